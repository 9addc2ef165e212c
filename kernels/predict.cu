/* kernels/predict.cu - the score of every row under FM, FFM and FwFM, then the output the
   caller asked for. NVRTC compiles this file at run time (modern_fm_kernels.h carries it as
   text) after kernels/common.cu, whose helpers it uses.

   A row is worked on by a group of `group` lanes of one warp (a power of two, at most 32):
     FM          each lane owns factors t = lane, lane + group, ...; the row's non-zeros are
                 walked by every lane, so the group reads each factor vector as one coalesced
                 request of k floats (the pair term has an O(zk) form)
     FFM, FwFM   a warp; the lanes share out the row's pairs (a, b), each lane reading the two
                 k-vectors of its pair (FFM: inside the two features' contiguous blocks of
                 n_fields x k floats; FwFM: the features' own vectors, weighted by r(f_a, f_b)).
                 FwFM with k = 4, 8, 16 stages rows of up to 64 non-zeros in shared memory
                 first (mfm_fwfm_staged), so that each vector is read from memory once
   The linear term and the row norm are shared out by non-zeros. Partial sums meet through
   shuffles inside the group; lane 0 writes the row's score of each class. */

struct mfm_args {
    const mfm_u64 *offsets;      /* n_rows + 1; row r holds offsets[r] - offset_base ..  */
    const mfm_u32 *features;
    const mfm_u32 *fields;       /* FFM and FwFM */
    const float *values;         /* 0: every value is 1 */
    const float *table;          /* per class, n_features records of `stride` floats: the
                                    factors (FM/FwFM k, FFM n_fields x k), then w */
    const float *w0;             /* one per class */
    const float *pair_weights;   /* FwFM: per class n_fields x n_fields, symmetric */
    float *scores;               /* n_rows x n_classes */
    mfm_u64 n_rows, offset_base, class_stride;
    mfm_u32 n_fields, n_classes, k, stride, group, w_offset;
    mfm_u32 stage_nnz;           /* FwFM, k = 4, 8, 16: rows up to this long go through shared
                                    memory (see mfm_stage); 0: never */
    int linear_only, pairs_only, normalize;
};

/* w0 + sum_i w_i x_i of one class (0 when the model keeps only pairs). */
__device__ float mfm_linear(const mfm_args &a, const float *table, mfm_u32 c, const mfm_row &row, mfm_u32 lane, unsigned mask) {
    if (a.pairs_only) return 0.0f;
    float s = 0;
    for (mfm_u32 i = lane; i < row.z; i += a.group) {
        const mfm_u64 at = row.lo + i;
        s += table[(mfm_u64)a.features[at] * a.stride + a.w_offset] * mfm_x(a, at, row.scale);
    }
    return a.w0[c] + mfm_group_sum(s, mask, a.group);
}

/* FM: sum_{a<b} <v_a, v_b> x_a x_b = 1/2 sum_t [(sum_a v_at x_a)^2 - sum_a (v_at x_a)^2]. */
extern "C" __global__ void mfm_predict_fm(const mfm_args a) {
    MFM_FOR_EACH_ROW(a, a.n_rows, r, lane, mask) {
        const mfm_row row = mfm_row_at(a, r, lane, mask);
        for (mfm_u32 c = 0; c < a.n_classes; c++) {
            const float *table = a.table + c * a.class_stride;
            float s = mfm_linear(a, table, c, row, lane, mask), part = 0;
            if (!a.linear_only) {
                for (mfm_u32 t = lane; t < a.k; t += a.group) {
                    float sum = 0, squares = 0;
                    for (mfm_u32 i = 0; i < row.z; i++) {
                        const mfm_u64 at = row.lo + i;
                        const float vx = table[(mfm_u64)a.features[at] * a.stride + t] * mfm_x(a, at, row.scale);
                        sum += vx;
                        squares += vx * vx;
                    }
                    part += sum * sum - squares;
                }
                s += 0.5f * mfm_group_sum(part, mask, a.group);
            }
            if (lane == 0) a.scores[r * a.n_classes + c] = s;
        }
    }
}

/* FwFM's shared memory (when args.stage_nnz > 0): every class's pair weights, rows padded to
   n_fields + 1 floats (lanes reading r(f_i, f_j) of neighbouring fields then hit distinct
   banks), then per warp a row's u_a = v_a x_a (k/4 runs of stage_nnz float4s: lanes reading
   neighbouring vectors hit distinct banks whatever k is) and its fields. */
extern __shared__ float4 mfm_stage[];

/* FwFM's pair term of a row of at most stage_nnz (64) non-zeros, on a whole warp: the row's
   vectors u_a = v_a x_a and fields go to shared memory once (mfm_stage_row), then the lanes
   share out its pairs (mfm_fwfm_pairs; both kernels/common.cu), each lane keeping its own
   vectors in registers. */
template <int K>
__device__ float mfm_fwfm_staged(const mfm_args &a, const float *table, mfm_u32 c, const mfm_row &row, mfm_u32 lane) {
    enum { Q = K >= 4 ? K / 4 : 1 }; /* float4s per vector (K = 0, the any-k kernel, never comes here) */
    const auto vector_of = [&](mfm_u32 feature) { return table + (mfm_u64)feature * a.stride; };
    const mfm_staged_row st = mfm_stage_row<Q>(a, mfm_stage, c, row, lane, vector_of);
    float part = 0;
    const auto weigh = [&](mfm_u32 fa, mfm_u32 fb, float dot) { part += st.weights[fa * (a.n_fields + 1) + fb] * dot; };
    mfm_fwfm_pairs<Q>(st.u, a.stage_nnz, st.f, row.z, lane, weigh);
    __syncwarp(); /* the stage is free for the next class or row */
    return part;
}

/* Copies every class's pair weights into shared memory (rows padded), once per block. */
__device__ void mfm_stage_weights(const mfm_args &a) {
    float *w = reinterpret_cast<float *>(mfm_stage);
    const mfm_u32 F = a.n_fields, n = a.n_classes * F * F;
    for (mfm_u32 e = threadIdx.x; e < n; e += blockDim.x) w[e / F * (F + 1) + e % F] = a.pair_weights[e];
    __syncthreads();
}

/* The pair term of FFM and FwFM, sum over a < b of
       FFM    <V[a, f_b], V[b, f_a]> x_a x_b
       FwFM   r(f_a, f_b) <v_a, v_b> x_a x_b
   Pair p of a row is (a, b) in the order (0,1) (0,2) .. (0,z-1) (1,2) ..; a lane starts at
   pair `lane` and steps `group` pairs. */
template <int K, bool FWFM>
__device__ void mfm_pairs(const mfm_args &a) {
    if (FWFM && K > 0 && a.stage_nnz) mfm_stage_weights(a);
    MFM_FOR_EACH_ROW(a, a.n_rows, r, lane, mask) {
        const mfm_row row = mfm_row_at(a, r, lane, mask);
        for (mfm_u32 c = 0; c < a.n_classes; c++) {
            const float *table = a.table + c * a.class_stride;
            const float *weights = FWFM ? a.pair_weights + (mfm_u64)c * a.n_fields * a.n_fields : 0;
            float s = mfm_linear(a, table, c, row, lane, mask), part = 0;
            if (FWFM && K > 0 && a.stage_nnz && !a.linear_only && row.z <= a.stage_nnz) {
                part = mfm_fwfm_staged<K>(a, table, c, row, lane);
            } else if (!a.linear_only) {
                for (mfm_pair_walk w(lane, row.z); w.i + 1 < row.z; w.next(a.group, row.z)) {
                    const mfm_u64 at = row.lo + w.i, bt = row.lo + w.j;
                    const mfm_u32 fa = a.fields[at], fb = a.fields[bt];
                    const float *va = table + (mfm_u64)a.features[at] * a.stride + (FWFM ? 0 : (mfm_u64)fb * a.k);
                    const float *vb = table + (mfm_u64)a.features[bt] * a.stride + (FWFM ? 0 : (mfm_u64)fa * a.k);
                    const float xx = mfm_x(a, at, row.scale) * mfm_x(a, bt, row.scale);
                    part += mfm_dot<K>(va, vb, a.k) * (FWFM ? weights[(mfm_u64)fa * a.n_fields + fb] * xx : xx);
                }
            }
            if (!a.linear_only) s += mfm_group_sum(part, mask, a.group);
            if (lane == 0) a.scores[r * a.n_classes + c] = s;
        }
    }
}

/* k = 4, 8 and 16 get their own copies with float4 loads; any other k the plain loop. */
#define MFM_PAIR_KERNELS(name, fwfm)                                                           \
    extern "C" __global__ void mfm_predict_##name(const mfm_args a) { mfm_pairs<0, fwfm>(a); }     \
    extern "C" __global__ void mfm_predict_##name##_k4(const mfm_args a) { mfm_pairs<4, fwfm>(a); } \
    extern "C" __global__ void mfm_predict_##name##_k8(const mfm_args a) { mfm_pairs<8, fwfm>(a); } \
    extern "C" __global__ void mfm_predict_##name##_k16(const mfm_args a) { mfm_pairs<16, fwfm>(a); }
MFM_PAIR_KERNELS(ffm, false)
MFM_PAIR_KERNELS(fwfm, true)

/* Scores to what the caller asked for, one thread per row, with the CPU's arithmetic (double).
   task: 1 binary, 2 regression, 3 multiclass; kind: 1 score, 2 probability, 3 label (the
   numbers of mfm_task and mfm_output). out may be scores itself when both are n x 1. */
extern "C" __global__ void mfm_finish(const float *scores, float *out, mfm_u64 n_rows, mfm_u32 n_classes, int task, int kind) {
    for (mfm_u64 r = (mfm_u64)blockIdx.x * blockDim.x + threadIdx.x; r < n_rows; r += (mfm_u64)gridDim.x * blockDim.x) {
        const float *s = scores + r * n_classes;
        if (kind == 1 || task == 2) {
            if (out != scores)
                for (mfm_u32 c = 0; c < n_classes; c++) out[r * n_classes + c] = s[c];
        } else if (task == 1) {
            const double x = s[0];
            double p;
            if (x >= 0) {
                p = 1.0 / (1.0 + exp(-x));
            } else {
                const double e = exp(x);
                p = e / (1.0 + e);
            }
            out[r] = kind == 3 ? (s[0] >= 0 ? 1.0f : 0.0f) : (float)p;
        } else if (kind == 3) {
            mfm_u32 best = 0;
            for (mfm_u32 c = 1; c < n_classes; c++)
                if (s[c] > s[best]) best = c; /* the first of equal maxima wins */
            out[r] = (float)best;
        } else {
            double top = s[0], total = 0;
            for (mfm_u32 c = 1; c < n_classes; c++) top = s[c] > top ? s[c] : top;
            for (mfm_u32 c = 0; c < n_classes; c++) total += exp((double)s[c] - top);
            for (mfm_u32 c = 0; c < n_classes; c++) out[r * n_classes + c] = (float)(exp((double)s[c] - top) / total);
        }
    }
}
