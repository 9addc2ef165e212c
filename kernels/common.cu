/* kernels/common.cu - what the prediction and the training kernels share. NVRTC compiles the
   files of kernels/ as one program, in name order, so this one comes first. No file includes a
   header: the program builds with nothing but NVRTC.

   A row is worked on by a group of `group` lanes of one warp (a power of two, at most 32); the
   argument records of both kernels name these fields alike, so the helpers take either. */

typedef unsigned long long mfm_u64;
typedef unsigned int mfm_u32;

struct mfm_row {
    mfm_u64 lo; /* first non-zero */
    mfm_u32 z;  /* non-zeros */
    float scale;
};

/* Lanes of the calling lane's group, as a shuffle mask. */
__device__ __forceinline__ unsigned mfm_group_mask(mfm_u32 group) {
    return group == 32 ? 0xffffffffu : ((1u << group) - 1u) << ((threadIdx.x & 31u) & ~(group - 1u));
}

__device__ __forceinline__ float mfm_group_sum(float v, unsigned mask, mfm_u32 group) {
    for (mfm_u32 o = group >> 1; o > 0; o >>= 1) v += __shfl_xor_sync(mask, v, o, group);
    return v;
}

__device__ __forceinline__ double mfm_group_sum(double v, unsigned mask, mfm_u32 group) {
    for (mfm_u32 o = group >> 1; o > 0; o >>= 1) v += __shfl_xor_sync(mask, v, o, group);
    return v;
}

template <class A>
__device__ __forceinline__ float mfm_x(const A &a, mfm_u64 i, float scale) {
    return (a.values ? a.values[i] : 1.0f) * scale;
}

/* Where row r lies, and with normalize its scale 1/sqrt(sum x^2) (the CPU's rounding: the
   squares add up in double, the scale is a float). */
template <class A>
__device__ mfm_row mfm_row_at(const A &a, mfm_u64 r, mfm_u32 lane, unsigned mask) {
    mfm_row row;
    row.lo = a.offsets[r] - a.offset_base;
    row.z = (mfm_u32)(a.offsets[r + 1] - a.offsets[r]);
    row.scale = 1.0f;
    if (a.normalize && a.values) {
        double squares = 0;
        for (mfm_u32 i = lane; i < row.z; i += a.group) {
            double x = a.values[row.lo + i];
            squares += x * x;
        }
        squares = mfm_group_sum(squares, mask, a.group);
        if (squares > 0) row.scale = (float)(1.0 / sqrt(squares));
    } else if (a.normalize && row.z > 0) {
        row.scale = (float)(1.0 / sqrt((double)row.z));
    }
    return row;
}

/* Visits the `count` rows of this group, grid-stride; every lane of a group sees the same rows. */
#define MFM_FOR_EACH_ROW(a, count, r, lane, mask)                                           \
    const mfm_u32 lane = threadIdx.x & (a.group - 1u);                                      \
    const unsigned mask = mfm_group_mask(a.group);                                          \
    const mfm_u64 n_groups = (mfm_u64)gridDim.x * blockDim.x / a.group;                     \
    for (mfm_u64 r = ((mfm_u64)blockIdx.x * blockDim.x + threadIdx.x) / a.group; r < (count); r += n_groups)

/* <p, q> over k floats; K > 0 is k known at compile time (a multiple of 4: float4 loads).
   K = 0 reads four at a time too where k is a multiple of 4 and p and q start on 16 bytes, and
   two at a time where k is even and they start on 8. */
template <int K>
__device__ __forceinline__ float mfm_dot(const float *p, const float *q, mfm_u32 k) {
    float s = 0;
    if (K > 0 || (k % 4 == 0 && ((unsigned long long)p | (unsigned long long)q) % 16 == 0)) {
#pragma unroll
        for (mfm_u32 t = 0; t < (K > 0 ? K : k); t += 4) {
            const float4 x = *reinterpret_cast<const float4 *>(p + t), y = *reinterpret_cast<const float4 *>(q + t);
            s += x.x * y.x + x.y * y.y + x.z * y.z + x.w * y.w;
        }
    } else if (k % 2 == 0 && ((unsigned long long)p | (unsigned long long)q) % 8 == 0) {
        for (mfm_u32 t = 0; t < k; t += 2) {
            const float2 x = *reinterpret_cast<const float2 *>(p + t), y = *reinterpret_cast<const float2 *>(q + t);
            s += x.x * y.x; /* in the one-at-a-time order */
            s += x.y * y.y;
        }
    } else {
        for (mfm_u32 t = 0; t < k; t++) s += p[t] * q[t];
    }
    return s;
}

/* The pairs (i, j), i < j, of a row of z non-zeros in the order (0,1) (0,2) .. (0,z-1) (1,2) ..,
   shared out among a group: a lane starts at pair `lane` and steps `group` pairs. Use:
       for (mfm_pair_walk w(lane, z); w.i + 1 < z; w.next(group, z)) ... w.i, w.j ... */
struct mfm_pair_walk {
    mfm_u32 i, j;
    __device__ mfm_pair_walk(mfm_u32 lane, mfm_u32 z) : i(0), j(1 + lane) { settle(z); }
    __device__ void next(mfm_u32 step, mfm_u32 z) {
        j += step;
        settle(z);
    }
    __device__ void settle(mfm_u32 z) { /* past the row's end: on to the next first index */
        while (j >= z && i + 1 < z) {
            i++;
            j = j - z + i + 1;
        }
    }
};

/* FwFM's pairs of a row of z non-zeros staged in shared memory (prediction and training): each
   non-zero's u_a = v_a x_a as Q float4s, S apart (u[q * S + a]), and its field f[a]. The pairs
   are shared out "round robin": the pairs (i, i + d mod z) for d = 1 .. z/2 name every
   unordered pair once (at d = z/2 of an even z only i < d takes it). R = 1 (z <= 32): lane i.
   R = 2 (z <= 64): lane holds i = 2 lane and 2 lane + 1, and the one partner it reads at step
   d serves both, (2 lane, d) and (2 lane + 1, d - 1): half the shared-memory reads of two
   lanes' worth. Each lane keeps its own vectors in registers, and calls visit(f_i, f_j,
   <u_i, u_j>) for each pair it takes, in a fixed order. */
template <int Q, int R, class Visit>
__device__ __forceinline__ void mfm_fwfm_pairs_by(const float4 *u, mfm_u32 S, const mfm_u32 *f, mfm_u32 z, mfm_u32 lane, Visit &visit) {
    const mfm_u32 half = z / 2, first = R == 1 ? lane : 2 * lane;
    float4 ua[R][Q];
    mfm_u32 fa[R];
    if (first >= z) return;
#pragma unroll
    for (int r = 0; r < R; r++) {
        const mfm_u32 i = first + r;
#pragma unroll
        for (int q = 0; q < Q; q++) ua[r][q] = i < z ? u[q * S + i] : make_float4(0, 0, 0, 0);
        fa[r] = i < z ? f[i] : 0;
    }
    for (mfm_u32 d = 1; d <= half + (R - 1); d++) {
        const mfm_u32 j = first + d < z ? first + d : first + d - z;
        const mfm_u32 fj = f[j];
        float4 ub[Q];
#pragma unroll
        for (int q = 0; q < Q; q++) ub[q] = u[q * S + j];
#pragma unroll
        for (int r = 0; r < R; r++) {
            const mfm_u32 i = first + r, distance = d - r;
            if (i < z && distance >= 1 && distance <= half && (2 * distance < z || i < distance)) {
                float dot = 0;
#pragma unroll
                for (int q = 0; q < Q; q++) dot += ua[r][q].x * ub[q].x + ua[r][q].y * ub[q].y + ua[r][q].z * ub[q].z + ua[r][q].w * ub[q].w;
                visit(fa[r], fj, dot);
            }
        }
    }
}

/* The pairs of a staged row of z <= 64 non-zeros: one non-zero a lane, or two past 32. */
template <int Q, class Visit>
__device__ __forceinline__ void mfm_fwfm_pairs(const float4 *u, mfm_u32 S, const mfm_u32 *f, mfm_u32 z, mfm_u32 lane, Visit &visit) {
    if (z <= 32) mfm_fwfm_pairs_by<Q, 1>(u, S, f, z, lane, visit);
    else mfm_fwfm_pairs_by<Q, 2>(u, S, f, z, lane, visit);
}

/* The floats of every class's pair weights in a staging area (rows padded to n_fields + 1),
   rounded up to whole float4s: where a warp's staged rows start. */
template <class A>
__device__ __forceinline__ mfm_u32 mfm_staged_weight_floats(const A &a) {
    return (a.n_classes * a.n_fields * (a.n_fields + 1) + 3) & ~3u;
}

/* A row staged for mfm_fwfm_pairs (mfm_stage_row): where the calling warp keeps it, and class
   c's pair weights. */
struct mfm_staged_row {
    float4 *u;             /* u[q * stage_nnz + i]: the row's non-zero i, factors 4q .. 4q + 3 */
    mfm_u32 *f;            /* its fields */
    const float *weights;  /* class c's r(f, g) = weights[f * (n_fields + 1) + g] */
};

/* FwFM's staging of a row of at most stage_nnz non-zeros (the whole warp calls): its u_a =
   v_a x_a of class c, Q float4s a vector, and its fields go to the calling warp's part of the
   shared memory at `stage`: every class's pair weights (mfm_staged_weight_floats), then per
   warp Q x stage_nnz float4s, then per warp stage_nnz fields. vector_of(feature) is where the
   feature's v starts (prediction and training keep their tables differently). Stage is the
   type the kernel gives its stage, float4 or float: the offsets count in it, so that each
   kernel's address arithmetic, and the instructions of its pair loops, stay as they were. */
template <int Q, class A, class Stage, class VectorOf>
__device__ __forceinline__ mfm_staged_row mfm_stage_row(const A &a, Stage *stage, mfm_u32 c, const mfm_row &row, mfm_u32 lane, const VectorOf &vector_of) {
    const mfm_u32 warp = threadIdx.x / 32, n_warps = blockDim.x / 32, S = a.stage_nnz;
    float4 *const warps = reinterpret_cast<float4 *>(stage + mfm_staged_weight_floats(a) / (mfm_u32)(sizeof(Stage) / sizeof(float)));
    mfm_staged_row st;
    st.u = warps + (mfm_u64)warp * S * Q;
    st.f = reinterpret_cast<mfm_u32 *>(warps + (mfm_u64)n_warps * S * Q) + warp * S;
    st.weights = reinterpret_cast<const float *>(stage) + c * a.n_fields * (a.n_fields + 1);
    for (mfm_u32 i = lane; i < row.z; i += 32) {
        const mfm_u64 at = row.lo + i;
        const float4 *v = reinterpret_cast<const float4 *>(vector_of(a.features[at]));
        const float x = mfm_x(a, at, row.scale);
#pragma unroll
        for (int q = 0; q < Q; q++) {
            const float4 t = v[q];
            st.u[q * S + i] = make_float4(t.x * x, t.y * x, t.z * x, t.w * x);
        }
        st.f[i] = a.fields[at];
    }
    __syncwarp();
    return st;
}
