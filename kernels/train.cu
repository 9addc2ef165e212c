/* kernels/train.cu - one training batch on the GPU in two launches (three with a sweep, below; docs/SPEC.md section 5):
     mfm_train_rows_*    every row of the batch on a group of lanes (as in predict.cu): its score
                         against the parameters as the batch found them, its loss and
                         weight * dL/ds, then its data gradients added into dense gradient
                         tables. What the batch touches is listed once, on its first touch:
                         features (w, and v of FM and FwFM, share the feature's index) and
                         FwFM's entries of R. An FFM feature's blocks are one per field: the
                         fields its rows paired it with are the bits of its field mask.
     mfm_train_apply_*   one optimizer step per touched coordinate with g = sum / B, a thread
                         per block of parameters, two kernels per optimizer (_wide steps eight
                         coordinates at a time, for k a multiple of 8); the sum set back to
                         zero (and FFM's field masks). Blocks 0 .. C-1 step w0 of each class
                         from the rows' dL/ds, added in a fixed order; block C adds the rows'
                         losses to the epoch's.
     mfm_train_line_*    AdaGrad at batch > 1: the linear terms' steps wait while three short
                         kernels find the fraction of them the batch takes (docs/SPEC.md section
                         5, item 4) and apply it.
   The tables keep the CPU's layout (modern_fm.h, >>model): a block is `len` parameters, then
   their optimizer state slot by slot, and class c's blocks follow class c-1's. Gradient sums
   come in two kinds, the _fast and the _exact kernels:
     fast    float atomicAdd: the order of the additions, so the last bits, vary from run to run
     exact   every contribution becomes a 128-bit fixed-point number in units of 2^-64 and is
             added with integer atomics. Integer sums do not depend on their order, so the sum
             is exact and the same every run; it is rounded once, when the step reads it.
   FwFM's rows of up to 64 non-zeros (fast sums, k = 4, 8, 16; as long as the 48 KB allow) go
   through shared memory as in prediction: each v once, then the row's pairs and gradients
   from there (mfm_stage_of).
   With score_only the rows kernel writes the scores and nothing else (validation rows). Where
   several GPUs each hold a shard of the factors (shards > 1), it runs twice a batch: score_only
   for the shard's part of each score, then, once NCCL has gathered every shard's parts, with
   the whole scores added up from them.
   Where a batch touches many features (`sweep`, the host's choice), the rows kernel only
   stamps them, and mfm_train_list lists them afterwards from a sweep of the stamps, a few
   thousand ids at a time in id order: the step then walks the tables from low addresses to
   high, a few pages at a time, not all over them (Criteo FM k = 8 at batch 65536: +45 %).

   Deterministic FFM gathers its pair sums by feature instead (when a warp's sums fit shared
   memory; `gather`): a pair's exact sums would take 12 integer atomics a float4 where the fast
   sums take one. The rows kernel counts each feature's non-zeros, mfm_train_ffm_starts and
   mfm_train_ffm_place list the batch's non-zeros feature by feature, and mfm_train_ffm_gather
   gives each feature's list to one warp, which adds up the feature's sums exactly in shared
   memory and writes each once, rounded, so that V's step reads a float, not 16 bytes (see
   there). The sums are the same integers as the atomics', rounded the same way. */

enum { MFM_W0 = 0, MFM_W = 1, MFM_V = 2, MFM_R = 3 };     /* mfm_tensor */
enum { MFM_FEATURES = 0, MFM_PAIRS = 1 };                 /* what is listed: features, entries of R */
enum { MFM_FM = 1, MFM_FFM = 2, MFM_FWFM = 3 };           /* mfm_model_type */
enum { MFM_REGRESSION = 2, MFM_MULTICLASS = 3 };          /* mfm_task */
enum { MFM_SGD = 1, MFM_ADAGRAD = 2, MFM_ADAM = 3, MFM_FTRL = 4, MFM_ROWWISE = 5 }; /* mfm_optimizer */

/* A batch row as the rows kernel saw it, for the gathering FFM kernels. */
struct mfm_batch_row {
    float scale;
    mfm_u32 repeats; /* a field holds more than one of the row's non-zeros */
};

/* What both launches are given. modern_fm.h has the same struct (mfm__train_args) with the
   pointers spelled as 64-bit device addresses: 8-byte fields first, then 4-byte ones. */
struct mfm_train_args {
    const mfm_u64 *offsets;      /* the rows: row r holds offsets[r] - offset_base .. */
    const mfm_u32 *features;
    const mfm_u32 *fields;       /* FFM and FwFM */
    const float *values;         /* 0: every value is 1 */
    const float *labels;
    const float *weights;        /* 0: every row weighs 1 */
    const mfm_u64 *rows;         /* batch row q is rows[q]; 0: row first + q (a streamed chunk) */
    float *table[4];             /* W0, W, V, R (0 where the model has none) */
    void *grad[4];               /* gradient sums [class][block][len]: float, or exact (mfm_sums) */
    mfm_u32 *mark[2];            /* per feature, per entry of R: the stamp of the last batch that touched it */
    mfm_u64 *list[2];            /* the features and entries of R this batch touched, in no particular order */
    mfm_u64 *field_mask;         /* FFM: per feature mask_words words; bit g: its block of field g is touched */
    mfm_u32 *occ;                /* gather: per feature, its non-zeros in the batch; after mfm_train_ffm_starts, where its next one goes */
    mfm_u32 *occ_start, *occ_count; /* gather: per listed feature, its first entry of occ_list and its non-zeros */
    mfm_u64 *chunk_owner;        /* gather: per chunk, its feature's place in the list << 32 | the chunk's place among the feature's */
    mfm_u32 *tally;              /* gather: [2][3] the batch's non-zeros, chunks and chunks taken, for even and odd batches */
    mfm_u64 *occ_list;           /* gather: the batch's non-zeros feature by feature, each as row q << 32 | its place in the row */
    mfm_batch_row *batch_rows;   /* gather: n_batch */
    void *spill;                 /* gather: V's exact sums (mfm_sums) of the features that span several chunks */
    mfm_u64 *count;              /* [2][2]: how many are listed, for even and odd batches */
    float *dlds;                 /* n_batch x C: weight * dL/ds */
    float *scores;               /* n_batch x C */
    float *sums;                 /* FM: n_batch x C x k, sum_i v_it x_i */
    double *row_loss;            /* n_batch x 2: weight * loss, weight */
    double *totals;              /* the epoch's weighted loss and weight so far */
    const float *class_weights;  /* one per class, or 0 */
    void *grad_sq;               /* line: W's sums of its terms' squares, as grad[MFM_W] */
    float *line_step[2];         /* line: the steps of w0 (C) and W ([class][block]) the line search scales */
    double *line_delta;          /* line: n_batch x C, how much those steps move each row's scores */
    double *line_alpha;          /* line: the fraction of them the batch takes */
    double *line_parts;          /* line: per block of mfm_train_line_delta, its rows' slopes and curvatures */
    const float *partials;       /* shards: every shard's part of the batch's scores, [shard][n_batch x C], gathered */
    void *r_parts;               /* shards, FwFM: every shard's sums of R, [shard][its grad[MFM_R]], gathered */
    float *rowwise_sq;           /* shards, row-wise AdaGrad: per block of V (all classes) its gradient's squares, summed over the shards */
    mfm_u64 first, n_batch, offset_base;
    mfm_u64 n_blocks[4];         /* per class */
    double beta1, beta2, eps;    /* Adam */
    mfm_u32 stride[4], len[4];   /* floats per block, parameters per block */
    float l1[4], l2[4];          /* per tensor; w0's are 0 */
    float lr, ftrl_beta, smoothing;
    mfm_u32 n_fields, n_classes, k, group, stamp, parity, mask_words;
    mfm_u32 r_shared;            /* FwFM: R's sums of a block go through shared memory first */
    mfm_u32 stage_nnz;           /* FwFM, k = 4, 8, 16: rows up to this long go through shared memory (mfm_stage_of); 0: never */
    mfm_u32 sweep;               /* the features are listed by mfm_train_list, not on their first touch */
    mfm_u32 line_blocks;         /* line: the blocks mfm_train_line_delta runs in */
    mfm_u32 gather, chunk;       /* deterministic FFM: the pairs' sums are gathered by feature (the top of this file), in chunks of `chunk` non-zeros */
    mfm_u32 shards, k_all;       /* GPUs that each hold k of the model's k_all factors (modern_fm.h, >>gpu-shards); 1 on one GPU */
    int model, task, optimizer, linear_only, pairs_only, normalize, score_only;
    int line;                    /* AdaGrad at batch_size > 1: the linear terms' squares and line search (mfm_train_line_*) */
    int rowwise_squares;         /* shards, row-wise AdaGrad: the step kernel only writes V's squares into rowwise_sq */
};

/* ---- the two kinds of gradient sums ---- */

/* A table of n gradient sums: n floats, or n exact sums kept as two arrays of n words, every
   sum's low word and then every sum's high word. The lanes of a row add to neighbouring sums
   together, and the L2 does an atomic instruction's work by the cache sector: low words side
   by side take half the sectors that (low, high) pairs took, and the H100 did twice the 64-bit
   atomics a second (a row's 16 lanes adding to 39 features' factors: 134M -> 265M rows/s). */
struct mfm_sums {
    void *at;
    mfm_u64 n;
};

struct mfm_exact { /* one exact value as a thread holds it */
    mfm_u64 lo, hi; /* two's complement, units of 2^-64 */
};

/* The sum whose low word is at s (its high word n words on) += (hi, lo): the carry out of the
   low word goes into the high one. */
__device__ __forceinline__ void mfm_exact_add_parts(mfm_u64 *s, mfm_u64 n, mfm_u64 lo, mfm_u64 hi) {
    if (lo) {
        const mfm_u64 old = atomicAdd(s, lo);
        hi += old + lo < old;
    }
    if (hi) atomicAdd(s + n, hi);
}

/* v in units of 2^-64, its magnitude cut below 2^-64 (the same cut in every run): the float's
   24-bit significand m shifted into place, |v| = m 2^s units, with integer selects, where a
   double's conversions run at a quarter of the integer rate (the FFM gather converts four values
   a pass). Magnitudes from 2^63 on (inf, NaN) saturate. */
__device__ __forceinline__ mfm_exact mfm_exact_of(float v) {
    const mfm_u32 bits = __float_as_uint(v), e = bits >> 23 & 0xFFu;
    const mfm_u64 m = (bits & 0x7FFFFFu) | 0x800000u, negative = 0 - (mfm_u64)(bits >> 31), one = negative & 1;
    const int s = (int)e - 86; /* below 2^-126 (e = 0): s = -86, nothing */
    mfm_exact x;
    x.lo = s >= 104 ? ~0ull : s >= 64 ? 0 : s >= 0 ? m << s : s > -64 ? m >> -s : 0;
    x.hi = s >= 104 ? 0x7FFFFFFFFFFFFFFFull : s >= 64 ? m << (s - 64) : s > 0 ? m >> (64 - s) : 0;
    x.lo = (x.lo ^ negative) + one; /* negated where v < 0: complemented, plus one */
    x.hi = (x.hi ^ negative) + (x.lo < one);
    return x;
}

/* The sums whose low words are at s[u] receive v[u], u = 0 .. N-1: the N low words' additions
   first, so that their answers (the carries) are awaited together, not one after another; then
   the high words'. */
template <int N>
__device__ __forceinline__ void mfm_exact_add_n(mfm_u64 *const *s, mfm_u64 n, const float *v) {
    mfm_exact x[N];
    mfm_u64 old[N];
#pragma unroll
    for (int u = 0; u < N; u++) x[u] = mfm_exact_of(v[u]);
#pragma unroll
    for (int u = 0; u < N; u++) old[u] = x[u].lo ? atomicAdd(s[u], x[u].lo) : 0;
#pragma unroll
    for (int u = 0; u < N; u++) {
        x[u].hi += old[u] + x[u].lo < old[u];
        if (x[u].hi) atomicAdd(s[u] + n, x[u].hi);
    }
}

/* x += y where no other thread adds to x meanwhile. */
__device__ __forceinline__ void mfm_exact_put(mfm_exact *x, const mfm_exact &y) {
    const mfm_u64 lo = x->lo + y.lo;
    x->hi += y.hi + (lo < y.lo);
    x->lo = lo;
}

__device__ __forceinline__ double mfm_exact_value(const mfm_exact &s) {
    return (double)(long long)s.hi + (double)s.lo * 5.421010862427522170e-20; /* 2^-64 */
}

/* Sum i of s receives v. */
template <bool EXACT>
__device__ __forceinline__ void mfm_add(const mfm_sums &s, mfm_u64 i, float v) {
    if (EXACT) {
        const mfm_exact x = mfm_exact_of(v);
        mfm_exact_add_parts(static_cast<mfm_u64 *>(s.at) + i, s.n, x.lo, x.hi);
    } else {
        atomicAdd(static_cast<float *>(s.at) + i, v);
    }
}

/* Four consecutive sums from i (a multiple of 4) receive v: fast sums with one vector atomic
   where the GPU has them (sm_90 on), exact sums four at a time. */
template <bool EXACT>
__device__ __forceinline__ void mfm_add4(const mfm_sums &s, mfm_u64 i, float4 v) {
    if (EXACT) {
        mfm_u64 *const w = static_cast<mfm_u64 *>(s.at) + i, *const at[4] = {w, w + 1, w + 2, w + 3};
        const float f[4] = {v.x, v.y, v.z, v.w};
        mfm_exact_add_n<4>(at, s.n, f);
    } else {
#if __CUDA_ARCH__ >= 900
        atomicAdd(reinterpret_cast<float4 *>(static_cast<float *>(s.at) + i), v);
#else
        float *g = static_cast<float *>(s.at) + i;
        atomicAdd(g, v.x), atomicAdd(g + 1, v.y), atomicAdd(g + 2, v.z), atomicAdd(g + 3, v.w);
#endif
    }
}

/* Two consecutive sums from i (even) receive v: fast sums with one vector atomic from sm_90 on
   (a shard of two factors, >>gpu-shards, adds as many atomics a block as one GPU's float4). */
template <bool EXACT>
__device__ __forceinline__ void mfm_add2(const mfm_sums &s, mfm_u64 i, float2 v) {
#if __CUDA_ARCH__ >= 900
    if (!EXACT) {
        atomicAdd(reinterpret_cast<float2 *>(static_cast<float *>(s.at) + i), v);
        return;
    }
#endif
    mfm_add<EXACT>(s, i, v.x);
    mfm_add<EXACT>(s, i + 1, v.y);
}

/* Sum i of s, read; mfm_take also sets it back to zero for the next batch. */
template <bool EXACT>
__device__ __forceinline__ float mfm_peek(const mfm_sums &s, mfm_u64 i) {
    if (EXACT) {
        const mfm_u64 *w = static_cast<const mfm_u64 *>(s.at) + i;
        const mfm_exact sum = {w[0], w[s.n]};
        return (float)mfm_exact_value(sum);
    }
    return static_cast<const float *>(s.at)[i];
}

template <bool EXACT>
__device__ __forceinline__ float mfm_take(const mfm_sums &s, mfm_u64 i) {
    const float v = mfm_peek<EXACT>(s, i);
    if (EXACT) {
        mfm_u64 *w = static_cast<mfm_u64 *>(s.at) + i;
        w[0] = w[s.n] = 0;
    } else {
        static_cast<float *>(s.at)[i] = 0;
    }
    return v;
}

/* Four sums from i (a multiple of 4, as n is then), which go back to zero: each array's four
   words with two 16-byte requests each way (the table starts on 256 bytes). */
template <bool EXACT>
__device__ __forceinline__ void mfm_take4(const mfm_sums &s, mfm_u64 i, float *out) {
    if (EXACT) {
        ulonglong2 *lo = reinterpret_cast<ulonglong2 *>(static_cast<mfm_u64 *>(s.at) + i), *hi = reinterpret_cast<ulonglong2 *>(static_cast<mfm_u64 *>(s.at) + i + s.n);
        const ulonglong2 l[2] = {lo[0], lo[1]}, h[2] = {hi[0], hi[1]};
        const mfm_exact sum[4] = {{l[0].x, h[0].x}, {l[0].y, h[0].y}, {l[1].x, h[1].x}, {l[1].y, h[1].y}};
        lo[0] = lo[1] = hi[0] = hi[1] = make_ulonglong2(0, 0);
        for (int u = 0; u < 4; u++) out[u] = (float)mfm_exact_value(sum[u]);
    } else {
        float4 *g = reinterpret_cast<float4 *>(static_cast<float *>(s.at) + i);
        const float4 v = *g;
        *g = make_float4(0, 0, 0, 0);
        out[0] = v.x, out[1] = v.y, out[2] = v.z, out[3] = v.w;
    }
}

/* ---- the parameters ---- */

/* Asks for the cache lines of [p, p + bytes) to come into L1 ahead of their reads: a hint that
   no register waits on. */
__device__ __forceinline__ void mfm_prefetch(const void *p, mfm_u64 bytes) {
    const char *end = static_cast<const char *>(p) + bytes;
    for (const char *line = reinterpret_cast<const char *>(reinterpret_cast<mfm_u64>(p) & ~(mfm_u64)127); line < end; line += 128)
        asm volatile("prefetch.global.L1 [%0];" ::"l"(line));
}

__device__ __forceinline__ float *mfm_block(const mfm_train_args &a, int t, mfm_u32 c, mfm_u64 b) {
    return a.table[t] + (c * a.n_blocks[t] + b) * a.stride[t];
}

/* Where coordinate j of block b of class c keeps its gradient sum. */
__device__ __forceinline__ mfm_u64 mfm_grad_at(const mfm_train_args &a, int t, mfm_u32 c, mfm_u64 b, mfm_u32 j) {
    return (c * a.n_blocks[t] + b) * a.len[t] + j;
}

/* Tensor t's gradient sums: a sum for each coordinate of each block of each class. */
__device__ __forceinline__ mfm_sums mfm_sums_of(const mfm_train_args &a, int t) {
    const mfm_sums s = {a.grad[t], (mfm_u64)a.n_classes * a.n_blocks[t] * a.len[t]};
    return s;
}

/* Row r's weight: its sample weight times its class's weight (modern_fm.h, mfm__row_weight). */
__device__ __forceinline__ float mfm_row_weight(const mfm_train_args &a, mfm_u64 r) {
    const float weight = a.weights ? a.weights[r] : 1.0f;
    return a.class_weights ? weight * a.class_weights[(mfm_u32)a.labels[r]] : weight;
}

/* W's sums of its terms' squares (line), laid out as its gradient sums. */
__device__ __forceinline__ mfm_sums mfm_sums_sq(const mfm_train_args &a) {
    const mfm_sums s = {a.grad_sq, (mfm_u64)a.n_classes * a.n_blocks[MFM_W]};
    return s;
}

/* Lists feature or entry x (what: MFM_FEATURES, MFM_PAIRS) on its first touch in this batch.
   The lanes that list together take their places with one atomic: the counter is one address
   that every first touch of the batch goes to. A sweep's features are only stamped. */
__device__ __forceinline__ void mfm_touch(const mfm_train_args &a, int what, mfm_u64 x) {
    mfm_u32 *m = a.mark[what] + x;
    if (what == MFM_FEATURES && a.sweep) { /* every lane that stores here stores the same stamp */
        if (*m != a.stamp) *m = a.stamp;
        return;
    }
    const bool first = *m != a.stamp && atomicExch(m, a.stamp) != a.stamp;
    const unsigned together = __activemask(), listing = __ballot_sync(together, first);
    const mfm_u32 me = threadIdx.x & 31u, leader = __ffs(listing) - 1;
    mfm_u64 at = 0;
    if (!listing) return;
    if (me == leader) at = atomicAdd(a.count + 2 * a.parity + what, (mfm_u64)__popc(listing));
    at = __shfl_sync(together, at, leader);
    if (first) a.list[what][at + __popc(listing & ((1u << me) - 1u))] = x;
}

/* FFM: a row pairs each non-zero's feature with the row's other fields, so those bits go into
   its field mask: the row's fields, less its own unless another non-zero has it too. The
   group is the whole warp (FFM's rows take 32 lanes). True when a field repeats in the row. */
__device__ bool mfm_touch_fields(const mfm_train_args &a, const mfm_row &row, mfm_u32 lane, unsigned mask) {
    bool repeats = false;
    for (mfm_u32 w = 0; w < a.mask_words; w++) {
        mfm_u64 once = 0, twice = 0;
        for (mfm_u32 i = lane; i < row.z; i += a.group) {
            const mfm_u32 f = a.fields[row.lo + i];
            const mfm_u64 bit = f / 64 == w ? 1ull << (f % 64) : 0;
            twice |= once & bit;
            once |= bit;
        }
        for (mfm_u32 o = a.group >> 1; o > 0; o >>= 1) {
            const mfm_u64 once_there = __shfl_xor_sync(mask, once, o), twice_there = __shfl_xor_sync(mask, twice, o);
            twice |= twice_there | (once & once_there);
            once |= once_there;
        }
        repeats |= twice != 0;
        if (!once) continue;
        for (mfm_u32 i = lane; i < row.z; i += a.group) {
            const mfm_u32 f = a.fields[row.lo + i];
            const mfm_u64 own = f / 64 == w ? 1ull << (f % 64) : 0, bits = (once & ~own) | (twice & own);
            if (bits) atomicOr(a.field_mask + (mfm_u64)a.features[row.lo + i] * a.mask_words + w, bits);
        }
    }
    return repeats;
}

/* FwFM's r(f, g) reads the upper triangle. */
__device__ __forceinline__ float mfm_pair_weight(const mfm_train_args &a, mfm_u32 c, mfm_u32 f, mfm_u32 g) {
    return *mfm_block(a, MFM_R, c, f < g ? (mfm_u64)f * a.n_fields + g : (mfm_u64)g * a.n_fields + f);
}

/* ---- the rows: score, loss, gradients ---- */

/* The rows kernel's shared memory: FwFM's R sums of a block (r_shared bytes: per class
   n_fields^2 sums, then a touched flag per field pair), then FwFM's staged rows (stage_nnz). */
extern __shared__ __align__(16) mfm_u64 mfm_r_stage[];

/* FwFM's rows of at most stage_nnz non-zeros, k = 4, 8 or 16, go through shared memory as in
   prediction (kernels/predict.cu): a row's u_a = v_a x_a and fields once, then its pairs from
   there (the score and R's sums, mfm_fwfm_pairs) and each v's gradient. Unstaged, every pair
   read its vectors through the L1, and the kernel waited on it (ncu, FwFM k = 8: the L1 80 %
   busy, DRAM 4 %). After R's sums (from r_shared rounded up to 16 bytes): every class's pair
   weights r(f, g), rows padded to n_fields + 1 floats (lanes reading r(f_i, f_j) of
   neighbouring fields hit distinct banks), then per warp Q x stage_nnz float4s and stage_nnz
   fields. */
__device__ __forceinline__ float *mfm_stage_base(const mfm_train_args &a) {
    return reinterpret_cast<float *>(reinterpret_cast<char *>(mfm_r_stage) + ((a.r_shared + 15) & ~15u));
}

/* Every class's pair weights into the stage, once a block (R does not change in a batch's rows). */
__device__ void mfm_stage_weights(const mfm_train_args &a) {
    float *w = mfm_stage_base(a);
    const mfm_u32 F = a.n_fields, FF = F * F;
    for (mfm_u32 e = threadIdx.x; e < a.n_classes * FF; e += blockDim.x) {
        const mfm_u32 c = e / FF, fa = e % FF / F, fb = e % F;
        w[c * F * (F + 1) + fa * (F + 1) + fb] = mfm_pair_weight(a, c, fa, fb);
    }
}

/* The calling warp's stage, class c's u and the row's fields in it (the whole warp calls;
   mfm_stage_row, kernels/common.cu). */
template <int Q>
__device__ mfm_staged_row mfm_stage_of(const mfm_train_args &a, mfm_u32 c, const mfm_row &row, mfm_u32 lane) {
    const auto vector_of = [&](mfm_u32 feature) { return mfm_block(a, MFM_V, c, feature); };
    return mfm_stage_row<Q>(a, mfm_stage_base(a), c, row, lane, vector_of);
}

/* Whether the row goes through the stage: FwFM with k = K of 4, 8 or 16, a row of at most
   stage_nnz non-zeros, in a kernel that stages (STAGE: the fast sums' kernels). A macro: the
   same test as a __forceinline__ function reshaped the branches of the fast rows kernels. */
#define MFM_ROW_STAGED(K, STAGE, a, row) ((STAGE) && (K) > 0 && (a).model == MFM_FWFM && (a).stage_nnz && (row).z <= (a).stage_nnz)

/* The lane's part of a staged row's pair term, sum over a < b of r(f_a, f_b) <u_a, u_b>. */
template <int K>
__device__ float mfm_staged_score(const mfm_train_args &a, mfm_u32 c, const mfm_row &row, mfm_u32 lane) {
    enum { Q = K >= 4 ? K / 4 : 1 };
    const mfm_staged_row st = mfm_stage_of<Q>(a, c, row, lane);
    const mfm_u32 F1 = a.n_fields + 1;
    float part = 0;
    const auto weigh = [&](mfm_u32 fa, mfm_u32 fb, float dot) { part += st.weights[fa * F1 + fb] * dot; };
    mfm_fwfm_pairs<Q>(st.u, a.stage_nnz, st.f, row.z, lane, weigh);
    __syncwarp(); /* the stage is free for the next class or row */
    return part;
}

/* The score of class c; FM leaves sum_i v_it x_i of the lane's factors in a.sums. K > 0: k = K,
   known at compile time (FFM's and FwFM's pair loops unroll). STAGE: the kernel may stage
   FwFM's rows (the fast sums' kernels; the exact ones never do, and leave the code out, whose
   registers they would spill). */
template <int K, bool STAGE>
__device__ float mfm_train_score(const mfm_train_args &a, mfm_u32 c, const mfm_row &row, mfm_u64 q, mfm_u32 lane, unsigned mask) {
    float s = 0, part = 0;
    if (!a.pairs_only) {
        for (mfm_u32 i = lane; i < row.z; i += a.group) s += *mfm_block(a, MFM_W, c, a.features[row.lo + i]) * mfm_x(a, row.lo + i, row.scale);
        s = *mfm_block(a, MFM_W0, c, 0) + mfm_group_sum(s, mask, a.group);
    }
    if (a.linear_only) return s;
    if (MFM_ROW_STAGED(K, STAGE, a, row)) return s + mfm_group_sum(mfm_staged_score<K>(a, c, row, lane), mask, a.group);
    if (a.model == MFM_FM) {
        for (mfm_u32 t = lane; t < a.k; t += a.group) {
            float sum = 0, squares = 0;
            for (mfm_u32 i = 0; i < row.z; i++) {
                const float vx = mfm_block(a, MFM_V, c, a.features[row.lo + i])[t] * mfm_x(a, row.lo + i, row.scale);
                sum += vx;
                squares += vx * vx;
            }
            if (!a.score_only) a.sums[(q * a.n_classes + c) * a.k + t] = sum;
            part += sum * sum - squares;
        }
        return s + 0.5f * mfm_group_sum(part, mask, a.group);
    }
    const float *V = mfm_block(a, MFM_V, c, 0);
    const mfm_u64 stride = a.stride[MFM_V];
    for (mfm_pair_walk w(lane, row.z); w.i + 1 < row.z; w.next(a.group, row.z)) {
        const mfm_u64 at = row.lo + w.i, bt = row.lo + w.j;
        const mfm_u32 fa = a.fields[at], fb = a.fields[bt];
        const float xx = mfm_x(a, at, row.scale) * mfm_x(a, bt, row.scale);
        if (a.model == MFM_FFM)
            part += mfm_dot<K>(V + ((mfm_u64)a.features[at] * a.n_fields + fb) * stride, V + ((mfm_u64)a.features[bt] * a.n_fields + fa) * stride, a.k) * xx;
        else
            part += mfm_dot<K>(V + a.features[at] * stride, V + a.features[bt] * stride, a.k) * (mfm_pair_weight(a, c, fa, fb) * xx);
    }
    return s + mfm_group_sum(part, mask, a.group);
}

/* The row's weighted loss and weight * dL/ds of every class, from its scores (one lane; the
   CPU's arithmetic, modern_fm.h mfm__row_loss). */
__device__ void mfm_train_loss(const mfm_train_args &a, mfm_u64 q, mfm_u64 r) {
    const mfm_u32 C = a.n_classes;
    const float y = a.labels[r], eps = a.smoothing, weight = mfm_row_weight(a, r);
    const float *s = a.scores + q * C;
    double loss;
    if (a.task == MFM_MULTICLASS) {
        double top = -1e308, total = 0, lse;
        for (mfm_u32 c = 0; c < C; c++) top = s[c] > top ? s[c] : top;
        for (mfm_u32 c = 0; c < C; c++) total += exp((double)s[c] - top);
        lse = top + log(total);
        loss = 0;
        for (mfm_u32 c = 0; c < C; c++) {
            const double target = c == (mfm_u32)y ? 1.0 - eps : eps / (C - 1);
            loss -= target * (s[c] - lse);
            a.dlds[q * C + c] = weight * (float)(exp((double)s[c] - top) / total - target);
        }
    } else {
        const double x = s[0];
        double g;
        if (a.task == MFM_REGRESSION) {
            g = x - y;
            loss = 0.5 * g * g;
        } else {
            const double target = y * (1.0 - eps) + 0.5 * eps;
            g = (x >= 0 ? 1.0 / (1.0 + exp(-x)) : exp(x) / (1.0 + exp(x))) - target;
            loss = (x > 0 ? x : 0) - x * target + log1p(exp(-fabs(x)));
        }
        a.dlds[q] = weight * (float)g;
    }
    a.row_loss[2 * q] = weight * loss;
    a.row_loss[2 * q + 1] = weight;
}

template <bool EXACT>
__device__ __forceinline__ mfm_u32 *mfm_r_touched(const mfm_train_args &a) {
    return reinterpret_cast<mfm_u32 *>(reinterpret_cast<char *>(mfm_r_stage) + (mfm_u64)a.n_classes * a.n_fields * a.n_fields * (EXACT ? 16 : 4));
}

/* R's entry e of class c receives v: into the block's shared sums when they are there. */
template <bool EXACT>
__device__ __forceinline__ void mfm_add_r(const mfm_train_args &a, mfm_u32 c, mfm_u64 e, float v, bool first_class) {
    const mfm_u64 FF = (mfm_u64)a.n_fields * a.n_fields;
    if (!a.r_shared) {
        mfm_add<EXACT>(mfm_sums_of(a, MFM_R), mfm_grad_at(a, MFM_R, c, e, 0), v);
        if (first_class) mfm_touch(a, MFM_PAIRS, e);
        return;
    }
    const mfm_sums stage = {mfm_r_stage, a.n_classes * FF};
    mfm_add<EXACT>(stage, c * FF + e, v);
    if (first_class) mfm_r_touched<EXACT>(a)[e] = 1;
}

/* FwFM's gradients of class c of a staged row whose weight * dL/ds is g: v_i receives
   g x_i sum_{j != i} r(f_i, f_j) u_j (a lane a non-zero, reading the partners in step: one
   shared-memory read serves the warp), and r(f_a, f_b) receives g <u_a, u_b> (the pairs round
   robin, as the score takes them). */
template <bool EXACT, int K>
__device__ void mfm_staged_gradients(const mfm_train_args &a, mfm_u32 c, const mfm_row &row, float g, mfm_u32 lane, bool first_class) {
    enum { Q = K >= 4 ? K / 4 : 1 };
    const mfm_staged_row st = mfm_stage_of<Q>(a, c, row, lane);
    const mfm_u32 F = a.n_fields, S = a.stage_nnz;
    for (mfm_u32 i = lane; i < row.z; i += 32) {
        const float *w = st.weights + st.f[i] * (F + 1);
        float4 acc[Q];
#pragma unroll
        for (int q = 0; q < Q; q++) acc[q] = make_float4(0, 0, 0, 0);
        for (mfm_u32 j = 0; j < row.z; j++) {
            if (j == i) continue;
            const float r = w[st.f[j]];
#pragma unroll
            for (int q = 0; q < Q; q++) {
                const float4 u = st.u[q * S + j];
                acc[q].x += r * u.x, acc[q].y += r * u.y, acc[q].z += r * u.z, acc[q].w += r * u.w;
            }
        }
        const mfm_u64 at = row.lo + i;
        const float gx = g * mfm_x(a, at, row.scale);
        const mfm_u64 sums = mfm_grad_at(a, MFM_V, c, a.features[at], 0);
#pragma unroll
        for (int q = 0; q < Q; q++) mfm_add4<EXACT>(mfm_sums_of(a, MFM_V), sums + 4 * q, make_float4(gx * acc[q].x, gx * acc[q].y, gx * acc[q].z, gx * acc[q].w));
    }
    const auto to_r = [&](mfm_u32 fa, mfm_u32 fb, float dot) {
        mfm_add_r<EXACT>(a, c, fa < fb ? (mfm_u64)fa * F + fb : (mfm_u64)fb * F + fa, g * dot, first_class);
    };
    mfm_fwfm_pairs<Q>(st.u, a.stage_nnz, st.f, row.z, lane, to_r);
    __syncwarp(); /* the stage is free for the next class or row */
}

/* The data gradients of class c of one row whose weight * dL/ds is g. */
template <bool EXACT, int K>
__device__ void mfm_train_gradients(const mfm_train_args &a, mfm_u32 c, const mfm_row &row, mfm_u64 q, float g, mfm_u32 lane, unsigned mask) {
    const bool first_class = c == 0;
    if (first_class && a.model == MFM_FFM && !a.linear_only) {
        const bool repeats = mfm_touch_fields(a, row, lane, mask);
        if (EXACT && a.gather && lane == 0) {
            const mfm_batch_row seen = {row.scale, repeats};
            a.batch_rows[q] = seen;
        }
    }
    for (mfm_u32 i = lane; i < row.z; i += a.group) { /* pairs_only: w is touched, its gradient is 0 */
        const mfm_u32 f = a.features[row.lo + i];
        const float term = a.pairs_only ? 0.0f : g * mfm_x(a, row.lo + i, row.scale);
        mfm_add<EXACT>(mfm_sums_of(a, MFM_W), mfm_grad_at(a, MFM_W, c, f, 0), term);
        if (a.line) mfm_add<EXACT>(mfm_sums_sq(a), mfm_grad_at(a, MFM_W, c, f, 0), term * term);
        if (first_class) mfm_touch(a, MFM_FEATURES, f);
        if (EXACT && first_class && a.gather) atomicAdd(a.occ + f, 1u);
    }
    if (a.linear_only) return;
    if (a.model == MFM_FM) { /* ds/dv_it = x_i (sum_t - v_it x_i) */
        const float *sum = a.sums + (q * a.n_classes + c) * a.k;
        const mfm_u32 k = K > 0 ? K : a.k, per = k / 4;
        if (!EXACT && k % 4 == 0) { /* a lane takes four factors of a non-zero, added with one vector atomic (exact sums stay a
                                       factor a lane: four 128-bit sums on one lane took a fifth longer than one on each of four) */
            for (mfm_u32 item = lane; item < row.z * per; item += a.group) {
                const mfm_u32 i = item / per, t = (item - i * per) * 4, f = a.features[row.lo + i];
                const float x = mfm_x(a, row.lo + i, row.scale), gx = g * x;
                const float4 v = *reinterpret_cast<const float4 *>(mfm_block(a, MFM_V, c, f) + t), s = *reinterpret_cast<const float4 *>(sum + t);
                mfm_add4<EXACT>(mfm_sums_of(a, MFM_V), mfm_grad_at(a, MFM_V, c, f, t), make_float4(gx * (s.x - v.x * x), gx * (s.y - v.y * x), gx * (s.z - v.z * x), gx * (s.w - v.w * x)));
            }
        } else if (EXACT) { /* a lane takes factor t of N non-zeros at a time: their low words' atomics go out together */
            constexpr int N = 4; /* Criteo at batch 256: k = 4 53 % -> 69 % of the fast mode, k = 16 50 % -> 63 % (two: 64 %, 60 %; eight spilled) */
            const mfm_sums sums = mfm_sums_of(a, MFM_V);
            const mfm_u32 ways = a.group >= 2 * k ? a.group / k : 1, way = ways > 1 ? lane / k : 0; /* lanes a factor takes (the host's group): each every ways-th N non-zeros */
            for (mfm_u32 t = ways > 1 ? lane - way * k : lane; t < k && way < ways; t += ways > 1 ? k : a.group) {
                const float st = sum[t];
                for (mfm_u32 i = way * N; i < row.z; i += ways * N) { /* past the row's end: a 0 to the first sum, which adds nothing */
                    mfm_u64 *at[N];
                    float d[N];
#pragma unroll
                    for (int u = 0; u < N; u++) {
                        const bool in = i + u < row.z;
                        const mfm_u64 nz = row.lo + (in ? i + u : i);
                        const mfm_u32 f = a.features[nz];
                        const float x = mfm_x(a, nz, row.scale), gx = g * x;
                        at[u] = static_cast<mfm_u64 *>(sums.at) + mfm_grad_at(a, MFM_V, c, f, t);
                        d[u] = in ? gx * (st - mfm_block(a, MFM_V, c, f)[t] * x) : 0.0f;
                    }
                    mfm_exact_add_n<N>(at, sums.n, d);
                }
            }
        } else {
            for (mfm_u32 i = 0; i < row.z; i++) {
                const mfm_u32 f = a.features[row.lo + i];
                const float x = mfm_x(a, row.lo + i, row.scale), gx = g * x, *v = mfm_block(a, MFM_V, c, f);
                for (mfm_u32 t = lane; t < a.k; t += a.group) mfm_add<EXACT>(mfm_sums_of(a, MFM_V), mfm_grad_at(a, MFM_V, c, f, t), gx * (sum[t] - v[t] * x));
            }
        }
        return;
    }
    if (MFM_ROW_STAGED(K, !EXACT, a, row)) {
        mfm_staged_gradients<EXACT, K>(a, c, row, g, lane, first_class);
        return;
    }
    if (a.model == MFM_FWFM) /* v_i receives g x_i sum_{j != i} r(f_i, f_j) x_j v_j, eight factors at a time */
        for (mfm_u32 i = lane; i < row.z; i += a.group) {
            const mfm_u32 f = a.features[row.lo + i], fi = a.fields[row.lo + i];
            const float gx = g * mfm_x(a, row.lo + i, row.scale);
            for (mfm_u32 t0 = 0; t0 < a.k; t0 += 8) {
                float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
                const mfm_u32 n = a.k - t0 < 8 ? a.k - t0 : 8;
                for (mfm_u32 j = 0; j < row.z; j++) {
                    if (j == i) continue;
                    const float coef = mfm_pair_weight(a, c, fi, a.fields[row.lo + j]) * mfm_x(a, row.lo + j, row.scale);
                    const float *v = mfm_block(a, MFM_V, c, a.features[row.lo + j]) + t0;
#pragma unroll
                    for (mfm_u32 u = 0; u < 8; u++)
                        if (u < n) acc[u] += coef * v[u];
                }
#pragma unroll
                for (mfm_u32 u = 0; u < 8; u++)
                    if (u < n) mfm_add<EXACT>(mfm_sums_of(a, MFM_V), mfm_grad_at(a, MFM_V, c, f, t0 + u), gx * acc[u]);
            }
        }
    if (EXACT && a.gather) return; /* mfm_train_ffm_gather adds FFM's pair sums */
    const float *V = mfm_block(a, MFM_V, c, 0);
    const mfm_u64 stride = a.stride[MFM_V], sums = mfm_grad_at(a, MFM_V, c, 0, 0);
    const mfm_u32 k = K > 0 ? K : a.k;
    for (mfm_pair_walk w(lane, row.z); w.i + 1 < row.z; w.next(a.group, row.z)) {
        const mfm_u64 at = row.lo + w.i, bt = row.lo + w.j;
        const mfm_u32 fa = a.fields[at], fb = a.fields[bt];
        const float coef = g * mfm_x(a, at, row.scale) * mfm_x(a, bt, row.scale);
        if (a.model == MFM_FFM) { /* slot (a, f_b) receives coef V[b, f_a] and the other way round */
            const mfm_u64 sa = (mfm_u64)a.features[at] * a.n_fields + fb, sb = (mfm_u64)a.features[bt] * a.n_fields + fa;
            const float *va = V + sa * stride, *vb = V + sb * stride;
            mfm_u32 t = 0;
#pragma unroll
            for (; k % 4 == 0 && t < k; t += 4) { /* blocks and sums of k = 4n floats start on 16 bytes */
                const float4 x = *reinterpret_cast<const float4 *>(va + t), y = *reinterpret_cast<const float4 *>(vb + t);
                mfm_add4<EXACT>(mfm_sums_of(a, MFM_V), sums + sa * k + t, make_float4(coef * y.x, coef * y.y, coef * y.z, coef * y.w));
                mfm_add4<EXACT>(mfm_sums_of(a, MFM_V), sums + sb * k + t, make_float4(coef * x.x, coef * x.y, coef * x.z, coef * x.w));
            }
            for (; k % 2 == 0 && t < k; t += 2) { /* and of k = 2n floats on 8 */
                const float2 x = *reinterpret_cast<const float2 *>(va + t), y = *reinterpret_cast<const float2 *>(vb + t);
                mfm_add2<EXACT>(mfm_sums_of(a, MFM_V), sums + sa * k + t, make_float2(coef * y.x, coef * y.y));
                mfm_add2<EXACT>(mfm_sums_of(a, MFM_V), sums + sb * k + t, make_float2(coef * x.x, coef * x.y));
            }
            for (; t < k; t++) {
                mfm_add<EXACT>(mfm_sums_of(a, MFM_V), sums + sa * k + t, coef * vb[t]);
                mfm_add<EXACT>(mfm_sums_of(a, MFM_V), sums + sb * k + t, coef * va[t]);
            }
        } else { /* r(f_a, f_b) receives coef <v_a, v_b> */
            const float dot = mfm_dot<K>(V + a.features[at] * stride, V + a.features[bt] * stride, k);
            mfm_add_r<EXACT>(a, c, fa < fb ? (mfm_u64)fa * a.n_fields + fb : (mfm_u64)fb * a.n_fields + fa, coef * dot, first_class);
        }
    }
}

template <bool EXACT, int K>
__device__ void mfm_train_rows(const mfm_train_args &a) {
    const mfm_u32 C = a.n_classes;
    const mfm_u64 FF = (mfm_u64)a.n_fields * a.n_fields;
    if (a.r_shared || (!EXACT && K > 0 && a.stage_nnz)) {
        for (mfm_u32 e = threadIdx.x; e < a.r_shared / 8; e += blockDim.x) mfm_r_stage[e] = 0;
        if (!EXACT && K > 0 && a.stage_nnz) mfm_stage_weights(a);
        __syncthreads();
    }
    {
        MFM_FOR_EACH_ROW(a, a.n_batch, q, lane, mask) {
            const mfm_u64 r = a.rows ? a.rows[q] : a.first + q;
            const mfm_row row = mfm_row_at(a, r, lane, mask);
            for (mfm_u32 c = 0; c < C; c++) {
                float s = 0;
                if (a.shards == 1 || a.score_only || (a.model == MFM_FM && !a.linear_only)) /* FM's gradients want its sums */
                    s = mfm_train_score<K, !EXACT>(a, c, row, q, lane, mask);
                if (a.shards > 1 && !a.score_only) { /* the shards' parts, added in shard order: every shard the same score */
                    s = a.partials[q * C + c];
                    for (mfm_u32 part = 1; part < a.shards; part++) s += a.partials[(part * a.n_batch + q) * C + c];
                }
                if (lane == 0) a.scores[q * C + c] = s;
            }
            if (a.score_only) continue;
            __syncwarp(mask);
            if (lane == 0) mfm_train_loss(a, q, r);
            __syncwarp(mask);
            for (mfm_u32 c = 0; c < C; c++) mfm_train_gradients<EXACT, K>(a, c, row, q, a.dlds[q * C + c], lane, mask);
        }
    }
    if (a.r_shared) { /* the block's R sums and touched pairs go out */
        const mfm_u32 *touched = mfm_r_touched<EXACT>(a);
        __syncthreads();
        for (mfm_u64 e = threadIdx.x; e < FF; e += blockDim.x) {
            if (!touched[e]) continue;
            mfm_touch(a, MFM_PAIRS, e);
            for (mfm_u32 c = 0; c < C; c++) {
                if (EXACT) { /* the stage's low words, then its high words (mfm_sums) */
                    const mfm_sums sums = mfm_sums_of(a, MFM_R);
                    mfm_exact_add_parts(static_cast<mfm_u64 *>(sums.at) + mfm_grad_at(a, MFM_R, c, e, 0), sums.n, mfm_r_stage[c * FF + e], mfm_r_stage[(C + c) * FF + e]);
                } else {
                    atomicAdd(static_cast<float *>(a.grad[MFM_R]) + mfm_grad_at(a, MFM_R, c, e, 0), reinterpret_cast<const float *>(mfm_r_stage)[c * FF + e]);
                }
            }
        }
    }
}

/* The features stamped by this batch into the list: a block takes 2048 features at a time,
   eight a thread, lists them in id order and takes their places with one atomic (one atomic a
   warp queued 31,000 on the counter, 27 us a batch); the blocks' turns come about in id order. */
__device__ void mfm_list_stamped(const mfm_train_args &a, int what, mfm_u64 n) {
    __shared__ mfm_u32 warp_at[8];
    __shared__ mfm_u64 block_at;
    const mfm_u32 *mark = a.mark[what];
    const mfm_u32 me = threadIdx.x & 31u, warp = threadIdx.x / 32;
    for (mfm_u64 tile = (mfm_u64)blockIdx.x * 2048; tile < n; tile += (mfm_u64)gridDim.x * 2048) {
        const mfm_u64 first = tile + threadIdx.x * 8;
        mfm_u32 bits = 0, upto, at;
        if (first + 8 <= n) { /* the marks start on 256 bytes: two 16-byte reads */
            const uint4 x = reinterpret_cast<const uint4 *>(mark + first)[0], y = reinterpret_cast<const uint4 *>(mark + first)[1];
            const mfm_u32 m[8] = {x.x, x.y, x.z, x.w, y.x, y.y, y.z, y.w};
#pragma unroll
            for (mfm_u32 u = 0; u < 8; u++) bits |= (mfm_u32)(m[u] == a.stamp) << u;
        } else {
            for (mfm_u32 u = 0; first + u < n; u++) bits |= (mfm_u32)(mark[first + u] == a.stamp) << u;
        }
        upto = __popc(bits); /* then the thread's and those before it in the warp */
        for (mfm_u32 o = 1; o < 32; o *= 2) {
            const mfm_u32 x = __shfl_up_sync(0xffffffffu, upto, o);
            if (me >= o) upto += x;
        }
        if (me == 31) warp_at[warp] = upto;
        __syncthreads();
        if (threadIdx.x == 0) {
            mfm_u32 total = 0;
            for (mfm_u32 w = 0; w < 8; w++) {
                const mfm_u32 count = warp_at[w];
                warp_at[w] = total, total += count;
            }
            block_at = total ? atomicAdd(a.count + 2 * a.parity + what, (mfm_u64)total) : 0;
        }
        __syncthreads();
        at = warp_at[warp] + upto - __popc(bits);
        for (mfm_u32 u = 0; u < 8; u++)
            if (bits >> u & 1) a.list[what][block_at + at++] = first + u;
        __syncthreads();
    }
}

extern "C" __global__ void __launch_bounds__(256) mfm_train_list(const mfm_train_args a) {
    mfm_list_stamped(a, MFM_FEATURES, a.n_blocks[MFM_W]);
}

/* ---- several GPUs, each a shard of the factors: FwFM's R sums added up ---- */

/* Each shard's R sums come from its own factors (modern_fm.h, >>gpu-shards); NCCL gathers all
   of them on every shard, and this adds them up in shard order (exact sums as 128-bit
   integers), so that every shard steps R by the same totals and the copies of R stay equal. */
template <bool EXACT>
__device__ void mfm_train_r_total(const mfm_train_args &a) {
    const mfm_sums r = mfm_sums_of(a, MFM_R);
    const mfm_u64 n_threads = (mfm_u64)gridDim.x * blockDim.x;
    for (mfm_u64 e = (mfm_u64)blockIdx.x * blockDim.x + threadIdx.x; e < r.n; e += n_threads) {
        if (EXACT) {
            const mfm_u64 *part = static_cast<const mfm_u64 *>(a.r_parts);
            mfm_exact total = {0, 0};
            for (mfm_u32 s = 0; s < a.shards; s++) {
                const mfm_exact x = {part[2 * r.n * s + e], part[2 * r.n * s + r.n + e]};
                mfm_exact_put(&total, x);
            }
            static_cast<mfm_u64 *>(r.at)[e] = total.lo;
            static_cast<mfm_u64 *>(r.at)[r.n + e] = total.hi;
        } else {
            const float *part = static_cast<const float *>(a.r_parts);
            float total = part[e];
            for (mfm_u32 s = 1; s < a.shards; s++) total += part[r.n * s + e];
            static_cast<float *>(r.at)[e] = total;
        }
    }
}

extern "C" __global__ void __launch_bounds__(256) mfm_train_r_total_fast(const mfm_train_args a) { mfm_train_r_total<false>(a); }
extern "C" __global__ void __launch_bounds__(256) mfm_train_r_total_exact(const mfm_train_args a) { mfm_train_r_total<true>(a); }

/* ---- deterministic FFM: the pair sums gathered by feature ---- */

/* Each listed feature's part of occ_list and its chunks, taken from the batch's tallies (a
   warp's features together, with one atomic each), and its count becomes the place of its first
   non-zero. A chunk is a.chunk (at most 32) of a feature's non-zeros, one warp's work in the
   gather kernel: a feature in every row is spread over many warps. */
extern "C" __global__ void __launch_bounds__(256) mfm_train_ffm_starts(const mfm_train_args a) {
    const mfm_u64 n = a.count[2 * a.parity + MFM_FEATURES], warps = (mfm_u64)gridDim.x * blockDim.x / 32;
    const mfm_u32 me = threadIdx.x & 31u;
    mfm_u32 *tally = a.tally + 3 * a.parity;
    for (mfm_u64 i = ((mfm_u64)blockIdx.x * blockDim.x + threadIdx.x) / 32 * 32 + me; i - me < n; i += warps * 32) {
        const mfm_u64 f = i < n ? a.list[MFM_FEATURES][i] : 0;
        const mfm_u32 nz = i < n ? a.occ[f] : 0, chunks = (nz + a.chunk - 1) / a.chunk;
        mfm_u32 nz_to = nz, chunks_to = chunks, nz_at = 0, chunks_at = 0; /* sums over lanes 0 .. me, then where the warp's start */
        for (mfm_u32 o = 1; o < 32; o *= 2) {
            const mfm_u32 x = __shfl_up_sync(0xffffffffu, nz_to, o), y = __shfl_up_sync(0xffffffffu, chunks_to, o);
            if (me >= o) nz_to += x, chunks_to += y;
        }
        if (me == 31) nz_at = atomicAdd(tally, nz_to), chunks_at = atomicAdd(tally + 1, chunks_to);
        nz_at = __shfl_sync(0xffffffffu, nz_at, 31) + nz_to - nz, chunks_at = __shfl_sync(0xffffffffu, chunks_at, 31) + chunks_to - chunks;
        if (i >= n) continue;
        a.occ_start[i] = a.occ[f] = nz_at, a.occ_count[i] = nz;
        for (mfm_u32 c = 0; c < chunks; c++) a.chunk_owner[chunks_at + c] = i << 32 | c;
    }
}

/* Every non-zero of the batch into its feature's part of occ_list, in no particular order: the
   sums are integers, so the order of their terms does not matter. */
extern "C" __global__ void __launch_bounds__(256) mfm_train_ffm_place(const mfm_train_args a) {
    MFM_FOR_EACH_ROW(a, a.n_batch, q, lane, mask) {
        const mfm_u64 r = a.rows ? a.rows[q] : a.first + q, lo = a.offsets[r] - a.offset_base;
        const mfm_u32 z = (mfm_u32)(a.offsets[r + 1] - a.offsets[r]);
        (void)mask;
        for (mfm_u32 j = lane; j < z; j += a.group) a.occ_list[atomicAdd(a.occ + a.features[lo + j], 1u)] = q << 32 | j;
    }
}

/* A non-zero of the feature being gathered: its row and place. */
struct mfm_occurrence {
    mfm_u64 q, lo; /* batch row, its first non-zero */
    mfm_u32 j, z, fa, repeats;
    float xa, scale;
};

/* W terms of a gathered sum: lane item (p, t) of non-zero j adds coef V[b_p, f_a][t + r] to sum
   (f_p, t + r), r = 0 .. W-1 (W = 4 where k is a multiple of 4: one 16-byte read), in the order
   of mfm_gather_add: v[u] is the term of r = (u + turn) mod W. key: sum (f_p, t), or a key of
   the lane's own when the item is past the row or j itself. */
template <int W>
struct mfm_term {
    mfm_u32 key;
    float v[W];
    bool live;
};

/* Where a lane starts among its W terms (mfm_gather_add says why). */
template <int W>
__device__ __forceinline__ mfm_u32 mfm_gather_turn() {
    return (threadIdx.x & 31u) / 2 % W;
}

template <int K, int W>
__device__ __forceinline__ mfm_term<W> mfm_gather_term(const mfm_train_args &a, const float *V, const mfm_occurrence &o, float g, mfm_u32 item) {
    const mfm_u32 k = K > 0 ? K : a.k, per = k / W, p = item / per, t = (item - p * per) * W;
    mfm_term<W> term;
    term.key = 0xFFFFFFFFu - 4 * (threadIdx.x & 31u);
    term.live = item < o.z * per && p != o.j;
#pragma unroll
    for (int u = 0; u < W; u++) term.v[u] = 0;
    if (term.live) { /* coef multiplied in the rows kernel's order: the pair's first non-zero first */
        const mfm_u64 bt = o.lo + p;
        const float xb = mfm_x(a, bt, o.scale), coef = p < o.j ? g * xb * o.xa : g * o.xa * xb;
        const float *v = V + ((mfm_u64)a.features[bt] * a.n_fields + o.fa) * a.stride[MFM_V] + t;
        if (W == 4) { /* rotated by turn: by one, then by two */
            const float4 x = *reinterpret_cast<const float4 *>(v);
            const mfm_u32 turn = mfm_gather_turn<W>();
            const float r0 = turn & 1 ? x.y : x.x, r1 = turn & 1 ? x.z : x.y, r2 = turn & 1 ? x.w : x.z, r3 = turn & 1 ? x.x : x.w;
            term.v[0] = coef * (turn & 2 ? r2 : r0), term.v[1] = coef * (turn & 2 ? r3 : r1);
            term.v[2] = coef * (turn & 2 ? r0 : r2), term.v[3] = coef * (turn & 2 ? r1 : r3);
        } else {
            term.v[0] = coef * v[0];
        }
        term.key = a.fields[bt] * k + t;
    }
    return term;
}

/* The terms of a warp go into its sums; in a row whose fields repeat, lanes with one key take
   turns. With W = 4 lane l adds its term r = u + turn (mod 4) at step u, turn = l/2 mod 4: the
   eight lanes of each 16-byte shared-memory request then hit eight different banks' words, where
   term u at step u would put lanes 0, 2, 4, 6 on the same ones. */
template <int W>
__device__ __forceinline__ void mfm_gather_add(mfm_exact *sum, const mfm_term<W> &term, mfm_u32 repeats) {
    const mfm_u32 me = threadIdx.x & 31u, turn = mfm_gather_turn<W>();
#pragma unroll
    for (mfm_u32 u = 0; u < W; u++) {
        const mfm_u32 key = term.key + (u + turn) % W;
        const float v = term.v[u];
        if (!repeats) {
            if (term.live) mfm_exact_put(sum + key, mfm_exact_of(v));
            continue;
        }
        const unsigned peers = __match_any_sync(0xffffffffu, key);
        for (unsigned left = peers; left; left &= left - 1) {
            if (term.live && me == (mfm_u32)__ffs(left) - 1u) mfm_exact_put(sum + key, mfm_exact_of(v));
            __syncwarp(peers);
        }
    }
}

/* Where the gradient of a warp's sum s of class c (field f, factor t: s = f k + t) of a feature
   is kept: the feature's blocks (one a field) lie one after another, as the sums do. */
__device__ __forceinline__ mfm_u64 mfm_gather_slot(const mfm_train_args &a, mfm_u64 feature, mfm_u32 c, mfm_u32 s) {
    return mfm_grad_at(a, MFM_V, c, feature * a.n_fields, s);
}

/* Each warp takes a chunk, then one after another from the batch's count of chunks taken (chunks
   differ in length: warps given their shares up front waited for the slowest), and sums their
   pairs into its own exact sums in shared memory (classes x fields x k), as the rows kernel would
   add to the feature's slots. Lane l first reads the chunk's non-zero l (its row, place, field,
   value), so that the non-zeros' reads are in flight together; the warp then goes through them,
   the lanes sharing out a non-zero's items (partner p, factor t; four factors an item where k is
   a multiple of 4, so that a pass reads four times the bytes and a row takes a quarter of the
   passes). At the chunk's end each sum goes out, rounded to the float that the step reads: stored
   when the chunk is the feature's only one (most are), else added with integer atomics into the
   spill sums, which the feature's last chunk to end rounds. */
template <int K>
__device__ void mfm_train_ffm_gather(const mfm_train_args &a) {
    constexpr int W = K > 0 && K % 4 == 0 ? 4 : 1; /* factors a lane reads at once */
    constexpr int AHEAD = W == 4 ? 2 : 4;          /* passes over a row whose reads are in flight together: as many as 64 registers hold */
    const mfm_u32 C = a.n_classes, F = a.n_fields, k = K > 0 ? K : a.k, slots = C * F * k, me = threadIdx.x & 31u;
    mfm_u32 *const tally = a.tally + 3 * a.parity;
    const mfm_u32 n_chunks = tally[1];
    mfm_exact *acc = reinterpret_cast<mfm_exact *>(mfm_r_stage) + (threadIdx.x / 32) * slots;
    for (mfm_u32 s = me; s < slots; s += 32) acc[s].lo = acc[s].hi = 0;
    __syncwarp();
    const mfm_u32 warps = gridDim.x * blockDim.x / 32;
    mfm_u32 chunk = (blockIdx.x * blockDim.x + threadIdx.x) / 32; /* a chunk a warp, then the rest from the count */
    while (chunk < n_chunks) {
        mfm_u32 next = n_chunks;
        if (warps < n_chunks && me == 0) next = warps + atomicAdd(tally + 2, 1u); /* awaited at the chunk's end */
        const mfm_u64 owner = a.chunk_owner[chunk], i = owner >> 32, feature = a.list[MFM_FEATURES][i];
        const mfm_u32 nth = (mfm_u32)owner, all = a.occ_count[i], from = nth * a.chunk, count = all - from < a.chunk ? all - from : a.chunk;
        const mfm_u64 at = a.occ_start[i] + from;
        mfm_occurrence mine = {0, 0, 0, 0, 0, 0, 0, 0};
        if (me < count) {
            const mfm_u64 e = a.occ_list[at + me], r = a.rows ? a.rows[e >> 32] : a.first + (e >> 32);
            const mfm_batch_row row = a.batch_rows[e >> 32];
            mine.q = e >> 32, mine.j = (mfm_u32)e, mine.lo = a.offsets[r] - a.offset_base, mine.z = (mfm_u32)(a.offsets[r + 1] - a.offsets[r]);
            mine.fa = a.fields[mine.lo + mine.j], mine.xa = mfm_x(a, mine.lo + mine.j, row.scale);
            mine.scale = row.scale, mine.repeats = row.repeats;
        }
        for (mfm_u32 u = 0; u < count; u++) {
            mfm_occurrence o;
            o.q = __shfl_sync(0xffffffffu, mine.q, u), o.lo = __shfl_sync(0xffffffffu, mine.lo, u);
            o.j = __shfl_sync(0xffffffffu, mine.j, u), o.z = __shfl_sync(0xffffffffu, mine.z, u), o.fa = __shfl_sync(0xffffffffu, mine.fa, u);
            o.repeats = __shfl_sync(0xffffffffu, mine.repeats, u);
            o.xa = __shfl_sync(0xffffffffu, mine.xa, u), o.scale = __shfl_sync(0xffffffffu, mine.scale, u);
            const mfm_u32 items = o.z * (k / W);
            for (mfm_u32 c = 0; c < C; c++) {
                const float g = a.dlds[o.q * C + c], *V = mfm_block(a, MFM_V, c, 0);
                mfm_exact *sum = acc + c * F * k;
                for (mfm_u32 base = 0; base < items; base += 32 * AHEAD) {
                    mfm_term<W> term[AHEAD];
#pragma unroll
                    for (mfm_u32 ahead = 0; ahead < AHEAD; ahead++) term[ahead] = mfm_gather_term<K, W>(a, V, o, g, base + 32 * ahead + me);
#pragma unroll
                    for (mfm_u32 ahead = 0; ahead < AHEAD; ahead++)
                        if (base + 32 * ahead < items) mfm_gather_add<W>(sum, term[ahead], o.repeats);
                    __syncwarp();
                }
            }
        }
        const bool only = all <= a.chunk;
        float *grad = static_cast<float *>(a.grad[MFM_V]);
        const mfm_sums spill = {a.spill, mfm_sums_of(a, MFM_V).n}; /* exact, like the rows kernel's */
        mfm_u64 *spilled = static_cast<mfm_u64 *>(spill.at);
        for (mfm_u32 c = 0; c < C; c++)
            for (mfm_u32 s = me; s < F * k; s += 32) {
                mfm_exact *const x = acc + c * F * k + s;
                if (!(x->lo | x->hi)) continue;
                const mfm_u64 at = mfm_gather_slot(a, feature, c, s);
                if (only) grad[at] = (float)mfm_exact_value(*x); /* rounded as the exact step rounds it */
                else mfm_exact_add_parts(spilled + at, spill.n, x->lo, x->hi);
                x->lo = x->hi = 0;
            }
        if (only) {
            if (me == 0) a.occ[feature] = 0; /* for the next batch */
        } else { /* the feature's chunks count themselves on occ, which place left at the feature's end */
            mfm_u32 done = 0;
            __threadfence();
            __syncwarp();
            if (me == 0) done = atomicAdd(a.occ + feature, 1u);
            done = __shfl_sync(0xffffffffu, done, 0);
            if (done == a.occ_start[i] + all + (all - 1) / a.chunk) { /* the last: every other chunk's sums are in */
                __threadfence();
                if (me == 0) a.occ[feature] = 0;
                for (mfm_u32 c = 0; c < C; c++)
                    for (mfm_u32 s = me; s < F * k; s += 32) {
                        const mfm_u64 at = mfm_gather_slot(a, feature, c, s);
                        const mfm_exact sum = {__ldcg(spilled + at), __ldcg(spilled + at + spill.n)};
                        if (!(sum.lo | sum.hi)) continue;
                        grad[at] = (float)mfm_exact_value(sum);
                        __stcg(spilled + at, 0ull), __stcg(spilled + at + spill.n, 0ull);
                    }
            }
        }
        __syncwarp();
        chunk = __shfl_sync(0xffffffffu, next, 0);
    }
}

/* ---- the step ---- */

/* One optimizer step of a coordinate whose gradient sum over `rows` rows is gsum, its state
   s1 .. s3 (what the optimizer keeps): the CPU's operations (modern_fm.h, mfm__step). OPT is
   the optimizer: each has kernels of its own, which hold only its own registers. */
template <int OPT>
__device__ __forceinline__ void mfm_step(const mfm_train_args &a, int t, float &theta, float &s1, float &s2, float &s3, float gsum, float rows) {
    const float l1 = a.l1[t], l2 = a.l2[t];
    if (OPT == MFM_SGD) {
        theta -= a.lr * (gsum / rows + l2 * theta);
    } else if (OPT == MFM_ADAGRAD || OPT == MFM_ROWWISE) { /* row-wise: a block of one only (mfm_step_block) */
        const float g = gsum / rows + l2 * theta;
        s1 += g * g;
        theta -= a.lr * g / sqrtf(s1 + 1e-10f);
    } else if (OPT == MFM_ADAM) { /* s1 = m, s2 = v, s3 = steps taken */
        const float g = gsum / rows + l2 * theta, n = s3 + 1.0f;
        const double c1 = 1.0 - pow(a.beta1, (double)n), c2 = 1.0 - pow(a.beta2, (double)n);
        s3 = n;
        s1 = (float)(a.beta1 * s1 + (1.0 - a.beta1) * g);
        s2 = (float)(a.beta2 * s2 + (1.0 - a.beta2) * (double)g * g);
        theta -= (float)(a.lr * (s1 / c1) / (sqrt(s2 / c2) + a.eps));
    } else { /* FTRL: s1 = z, s2 = n; L1 and L2 live in the closed form */
        const float g = gsum / rows, n = s2 + g * g, sigma = (sqrtf(n) - sqrtf(s2)) / a.lr;
        const float z = s1 += g - sigma * theta;
        s2 = n;
        theta = fabsf(z) <= l1 ? 0.0f : -(z - (z < 0 ? -l1 : l1)) / ((a.ftrl_beta + sqrtf(n)) / a.lr + l2);
    }
}

/* N floats at p (N = 1, or a multiple of 4 with p on 16 bytes) into v, and back: a memory
   request for every four. Plain accesses, not __ldcg/__stcg: those are strong (GPU-scope)
   operations, and Nsight Compute found the step's next reads waiting for its last strong
   stores to leave (fast FFM at batch 65536: k = 4 +4 %, k = 8 +5 %). */
template <int N>
__device__ __forceinline__ void mfm_load(float *v, const float *p) {
#pragma unroll
    for (int q = 0; q < N; q += 4) {
        if (N == 1) {
            v[0] = *p;
        } else {
            const float4 x = *reinterpret_cast<const float4 *>(p + q);
            v[q] = x.x, v[q + 1] = x.y, v[q + 2] = x.z, v[q + 3] = x.w;
        }
    }
}

template <int N>
__device__ __forceinline__ void mfm_store(float *p, const float *v) {
#pragma unroll
    for (int q = 0; q < N; q += 4) {
        if (N == 1)
            *p = v[0];
        else
            *reinterpret_cast<float4 *>(p + q) = make_float4(v[q], v[q + 1], v[q + 2], v[q + 3]);
    }
}

/* Steps coordinates j .. j+N-1 of a block of len parameters (then its state, slot by slot):
   every load first, so that they are in flight together, then the steps, then the stores. */
template <int N, int OPT>
__device__ __forceinline__ void mfm_step_run(const mfm_train_args &a, int t, float *blk, mfm_u32 len, mfm_u32 j, const float *gsum, float rows) {
    const mfm_u32 slots = OPT == MFM_SGD ? 1 : OPT == MFM_ADAGRAD || OPT == MFM_ROWWISE ? 2 : OPT == MFM_ADAM ? 4 : 3; /* the parameter and its state */
    float v[4][N];
#pragma unroll
    for (mfm_u32 s = 0; s < 4; s++) {
        for (int u = 0; u < N; u++) v[s][u] = 0;
        if (s < slots) mfm_load<N>(v[s], blk + s * len + j);
    }
#pragma unroll
    for (int u = 0; u < N; u++) mfm_step<OPT>(a, t, v[0][u], v[1][u], v[2][u], v[3][u], gsum[u], rows);
#pragma unroll
    for (mfm_u32 s = 0; s < 4; s++)
        if (s < slots) mfm_store<N>(blk + s * len + j, v[s]);
}

/* One step of every coordinate of block b of tensor t, class c: four at a time where the
   block's length is a multiple of four (blocks and sums start on 16 bytes then), with WIDE
   eight at a time where it is a multiple of eight, so that a block of eight waits for its
   reads once, not twice (a block's stores come before the next four's reads, which the
   compiler must then keep after them). WIDE takes more registers, so fewer threads run on a
   multiprocessor: it pays where k is a multiple of 8, not at k = 4, and the host chooses. */
/* AdaGrad's step of a linear term (w0 or w: theta, then G) at batch_size > 1 from its gradient
   sum and the sum of its terms' squares (modern_fm.h, mfm__apply_linear): the accumulator moves,
   the step waits in `step` for the line search. */
__device__ __forceinline__ void mfm_line_step(const mfm_train_args &a, int t, float *blk, float gsum, float squares, float *step) {
    const float reg = a.l2[t] * blk[0], g = gsum + reg, floor = gsum * gsum * (1.0f / 32); /* MFM__LINEAR_ROWS */
    blk[1] += (squares > floor ? squares : floor) + reg * reg;
    *step = -a.lr * g / sqrtf(blk[1] + 1e-10f);
}

/* Row-wise AdaGrad's step of a block of len > 1 values and its one accumulator (modern_fm.h,
   mfm__rowwise_adagrad): the squares summed in the CPU's order (lanes t mod 4, then the rest),
   the rate lr / sqrt(G + 1e-10) once, then each value's step; the sums read twice, taken the
   second time. Where shards hold the vector's factors (a.shards > 1), a first launch
   (rowwise_squares) leaves each shard's squares in rowwise_sq, NCCL adds them up, and the step
   takes their mean over all k_all factors. */
template <bool EXACT>
__device__ __forceinline__ void mfm_rowwise_step(const mfm_train_args &a, int t, float *blk, mfm_u32 len, mfm_u64 at, float rows) {
    const mfm_sums sums = mfm_sums_of(a, t);
    const float l2 = a.l2[t];
    float lanes[4] = {0, 0, 0, 0}, squares;
    mfm_u32 j = 0;
    for (; j + 4 <= len; j += 4)
#pragma unroll
        for (int u = 0; u < 4; u++) {
            const float g = mfm_peek<EXACT>(sums, at + j + u) / rows + l2 * blk[j + u];
            lanes[u] = __fadd_rn(lanes[u], __fmul_rn(g, g));
        }
    squares = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
    for (; j < len; j++) {
        const float g = mfm_peek<EXACT>(sums, at + j) / rows + l2 * blk[j];
        squares = __fadd_rn(squares, __fmul_rn(g, g));
    }
    if (a.shards > 1) {
        float *const total = a.rowwise_sq + at / len;
        if (a.rowwise_squares) {
            *total = squares;
            return;
        }
        squares = *total;
        *total = 0;
    }
    blk[len] += squares * (1.0f / (float)(a.shards > 1 ? a.k_all : len));
    const float rate = a.lr / sqrtf(blk[len] + 1e-10f);
    for (j = 0; j < len; j++) blk[j] -= (mfm_take<EXACT>(sums, at + j) / rows + l2 * blk[j]) * rate;
}

template <bool EXACT, int OPT, bool WIDE>
__device__ __forceinline__ void mfm_step_block(const mfm_train_args &a, int t, mfm_u32 c, mfm_u64 b, float rows) {
    const mfm_u32 len = a.len[t];
    if (OPT == MFM_ROWWISE && t == MFM_V && (len > 1 || a.shards > 1)) { /* a shard's len may be 1 */
        mfm_rowwise_step<EXACT>(a, t, mfm_block(a, t, c, b), len, mfm_grad_at(a, t, c, b, 0), rows);
        return;
    }
    if ((OPT == MFM_ADAGRAD || OPT == MFM_ROWWISE) && a.line && t == MFM_W) { /* len 1 */
        const mfm_u64 at = mfm_grad_at(a, t, c, b, 0);
        const float gsum = mfm_take<EXACT>(mfm_sums_of(a, t), at), squares = mfm_take<EXACT>(mfm_sums_sq(a), at);
        mfm_line_step(a, t, mfm_block(a, t, c, b), gsum, squares, a.line_step[1] + at);
        return;
    }
    float *blk = mfm_block(a, t, c, b), g[8];
    const mfm_u64 at = mfm_grad_at(a, t, c, b, 0);
    const mfm_sums sums = mfm_sums_of(a, t);
    mfm_u32 j = 0;
    for (; WIDE && len % 8 == 0 && j < len; j += 8) {
        mfm_take4<EXACT>(sums, at + j, g);
        mfm_take4<EXACT>(sums, at + j + 4, g + 4);
        mfm_step_run<8, OPT>(a, t, blk, len, j, g, rows);
    }
    for (; len % 4 == 0 && j < len; j += 4) {
        mfm_take4<EXACT>(sums, at + j, g);
        mfm_step_run<4, OPT>(a, t, blk, len, j, g, rows);
    }
    for (; j < len; j++) {
        g[0] = mfm_take<EXACT>(sums, at + j);
        mfm_step_run<1, OPT>(a, t, blk, len, j, g, rows);
    }
}

/* FFM: the lanes of a warp that stepped blocks under one word of a feature's field mask clear
   their bits of it with one atomic (bits: the lane's own bit, or 0; word 0: none). Every lane
   of the warp calls this. */
__device__ __forceinline__ void mfm_clear_fields(mfm_u64 *word, mfm_u64 bits) {
#if __CUDA_ARCH__ >= 800
    const unsigned peers = __match_any_sync(0xffffffffu, (mfm_u64)word);
    bits = (mfm_u64)__reduce_or_sync(peers, (mfm_u32)bits) | (mfm_u64)__reduce_or_sync(peers, (mfm_u32)(bits >> 32)) << 32;
    if ((threadIdx.x & 31u) != (mfm_u32)__ffs(peers) - 1u) return;
#endif
    if (bits) atomicAnd(word, ~bits);
}

/* A block's sum of n values v(i), i = 0 .. n-1, in an order fixed by n and the block size.
   Each thread keeps eight partial sums, so that eight loads are in flight at a time. */
template <class T, class F>
__device__ T mfm_block_sum(T *shared, mfm_u64 n, F v) {
    const mfm_u64 B = blockDim.x;
    T part[8] = {0, 0, 0, 0, 0, 0, 0, 0}, s = 0;
    mfm_u64 i = threadIdx.x;
    for (; i + 7 * B < n; i += 8 * B)
#pragma unroll
        for (int u = 0; u < 8; u++) part[u] += v(i + u * B);
#pragma unroll
    for (int u = 0; u < 7; u++)
        if (i + u * B < n) part[u] += v(i + u * B);
    for (int u = 0; u < 8; u++) s += part[u];
    shared[threadIdx.x] = s;
    __syncthreads();
    for (mfm_u32 half = blockDim.x / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) shared[threadIdx.x] += shared[threadIdx.x + half];
        __syncthreads();
    }
    return shared[0];
}

/* One block to step: item i of the list of all of them (see mfm_train_apply). Its reads come
   in three stages, each an iteration ahead of the next, so that a thread's reads of the next two
   items are in flight while it steps this one: where it is listed, then (FFM's v) its word of
   the field mask, with a prefetch of its block and sums, then the block. */
struct mfm_item {
    mfm_u64 b;      /* the list's entry, then (mfm_item_block) the block */
    mfm_u64 *word;  /* FFM's v: the word of the feature's field mask that holds the field's bit */
    mfm_u64 bits;   /* that word as read */
    mfm_u32 field;  /* FFM's v */
    int t;          /* the tensor; -1: past the last item */
};

struct mfm_items {
    mfm_u64 n_features, v_end, n; /* w items end at n_features, v items at v_end, R's at n */
    bool ffm;
};

/* Stage 1: reads item i's list entry. */
__device__ __forceinline__ mfm_item mfm_item_find(const mfm_train_args &a, const mfm_items &all, mfm_u64 i) {
    mfm_item it = {0, 0, 0, 0, -1};
    if (i < all.n_features) {
        it.t = MFM_W;
        it.b = a.list[MFM_FEATURES][i];
    } else if (i < all.v_end) {
        const mfm_u64 j = i - all.n_features, f = !all.ffm ? j : j >> 32 ? j / a.n_fields : (mfm_u32)j / a.n_fields;
        it.t = MFM_V;
        it.field = (mfm_u32)(j - f * a.n_fields);
        it.b = a.list[MFM_FEATURES][f];
    } else if (i < all.n) {
        it.t = MFM_R;
        it.b = a.list[MFM_PAIRS][i - all.v_end];
    }
    return it;
}

/* Stage 2: FFM's v reads the feature's word of the field mask, and every item asks for its
   block and its sums (all classes') to come into L1, so that stage 3's reads find them there.
   Without it the step waited on those reads (Nsight Compute, fast FFM k = 4 at batch 65536: 57
   of the 63 cycles between a warp's instructions; 18 % of DRAM's bandwidth). A/B on 2M Criteo
   rows, FFM: k = 4 at batch 65536 13.3M -> 17.7M rows/s (deterministic 8.5M -> 10.0M); with k = 8
   and 16 (the wide kernels) the deterministic mode gains too (k = 8 at batch 4096 3.06M ->
   3.83M, at 65536 5.37M -> 6.34M; k = 16 at 4096 +4 %) but the fast one loses (k = 8 -2 to -3 %,
   k = 16 at 4096 -15 %), into L1 or L2 alike, so the wide fast kernels go without. The same
   hint in the rows kernel's pair loop, two pairs ahead, was slower (FFM k = 4 -8 %, FwFM k = 8
   -33 %). */
template <bool EXACT, bool WIDE>
__device__ __forceinline__ void mfm_item_look(const mfm_train_args &a, const mfm_items &all, mfm_item &it) {
    mfm_u64 b = it.b;
    if (it.t < 0) return;
    if (all.ffm && it.t == MFM_V) {
        it.word = a.field_mask + it.b * a.mask_words + it.field / 64;
        it.bits = __ldcg(it.word);
        b = it.b * a.n_fields + it.field;
    }
    if (WIDE && !EXACT) return;
    const bool exact = EXACT && !(a.gather && it.t == MFM_V); /* the gather's sums are rounded */
    const mfm_u64 word = exact ? 8 : 4, bytes = a.len[it.t] * word;
    const mfm_sums sums = mfm_sums_of(a, it.t);
    for (mfm_u32 c = 0; c < a.n_classes; c++) {
        const char *at = static_cast<const char *>(sums.at) + mfm_grad_at(a, it.t, c, b, 0) * word;
        mfm_prefetch(mfm_block(a, it.t, c, b), a.stride[it.t] * sizeof(float));
        mfm_prefetch(at, bytes);
        if (exact) mfm_prefetch(at + sums.n * 8, bytes); /* the high words */
    }
}

/* Stage 3: whether the item has a block to step (FFM's v: whether its field's bit is set), and
   which block. */
__device__ __forceinline__ bool mfm_item_block(const mfm_train_args &a, mfm_item &it) {
    if (it.t < 0) return false;
    if (!it.word) return true;
    if (!(it.bits >> (it.field % 64) & 1)) return false;
    it.b = it.b * a.n_fields + it.field;
    return true;
}

/* Blocks of 256 threads; the first C + 1 have their own jobs (see the top of this file). In
   the rest each thread steps one block of parameters, item i of: the listed features' w, their
   v (FFM: a feature's blocks field by field, so that neighbouring threads share a feature and
   its field mask; a block whose bit is clear is skipped), the listed entries of R. One place
   steps every block, so the step's code is there once. A warp goes round the items together,
   so that its lanes can clear FFM's mask bits with one atomic. */
template <bool EXACT, int OPT, bool WIDE>
__device__ void mfm_train_apply(const mfm_train_args &a) {
    __shared__ double shared[256];
    const mfm_u32 C = a.n_classes;
    const mfm_u64 *count = a.count + 2 * a.parity;
    const float rows = OPT == MFM_ADAGRAD || OPT == MFM_ROWWISE ? 1.0f : (float)a.n_batch; /* AdaGrad: the sum (modern_fm.h, MFM__BATCH_ROWS) */
    const bool squares_only = OPT == MFM_ROWWISE && a.rowwise_squares; /* V's blocks' squares, no step (mfm_rowwise_step) */
    if (squares_only && blockIdx.x <= C) return;
    if (blockIdx.x < C) { /* w0: pairs_only touches it with a zero gradient */
        const mfm_u32 c = blockIdx.x;
        const float *dlds = a.dlds;
        float sum = mfm_block_sum(reinterpret_cast<float *>(shared), a.n_batch, [=](mfm_u64 q) { return dlds[q * C + c]; });
        if ((OPT == MFM_ADAGRAD || OPT == MFM_ROWWISE) && a.line) {
            __syncthreads();
            const float squares = mfm_block_sum(reinterpret_cast<float *>(shared), a.n_batch, [=](mfm_u64 q) { return dlds[q * C + c] * dlds[q * C + c]; });
            if (threadIdx.x == 0) mfm_line_step(a, MFM_W0, mfm_block(a, MFM_W0, c, 0), sum, squares, a.line_step[0] + c);
            return;
        }
        if (threadIdx.x == 0) {
            if (a.pairs_only) sum = 0;
            mfm_step_run<1, OPT>(a, MFM_W0, mfm_block(a, MFM_W0, c, 0), 1, 0, &sum, rows);
        }
        return;
    }
    if (blockIdx.x == C) {
        const double *row_loss = a.row_loss;
        const double loss = mfm_block_sum(shared, a.n_batch, [=](mfm_u64 q) { return row_loss[2 * q]; });
        __syncthreads();
        const double weight = mfm_block_sum(shared, a.n_batch, [=](mfm_u64 q) { return row_loss[2 * q + 1]; });
        if (threadIdx.x == 0) {
            a.totals[0] += loss;
            a.totals[1] += weight;
            a.count[2 * (a.parity ^ 1)] = a.count[2 * (a.parity ^ 1) + 1] = 0; /* for the next batch */
            if (a.gather) {
                mfm_u32 *const tally = a.tally + 3 * (a.parity ^ 1);
                tally[0] = tally[1] = tally[2] = 0;
            }
        }
        return;
    }
    mfm_items all;
    all.ffm = a.model == MFM_FFM && !a.linear_only;
    all.n_features = count[MFM_FEATURES];
    all.v_end = all.n_features * (a.linear_only ? 1 : all.ffm ? 1 + a.n_fields : 2);
    all.n = all.v_end + count[MFM_PAIRS];
    const mfm_u64 step = (mfm_u64)(gridDim.x - C - 1) * blockDim.x, warp_lane = threadIdx.x & 31u;
    mfm_u64 i = (mfm_u64)(blockIdx.x - C - 1) * blockDim.x + threadIdx.x;
    mfm_item now = mfm_item_find(a, all, i), soon = mfm_item_find(a, all, i + step);
    mfm_item_look<EXACT, WIDE>(a, all, now);
    for (; i - warp_lane < all.n; i += step) {
        const mfm_item later = mfm_item_find(a, all, i + 2 * step);
        mfm_item_look<EXACT, WIDE>(a, all, soon);
        const bool go = mfm_item_block(a, now) && (!squares_only || now.t == MFM_V);
        if (go && EXACT && a.gather && now.t == MFM_V) /* the gather rounded them already */
            for (mfm_u32 c = 0; c < C; c++) mfm_step_block<false, OPT, WIDE>(a, now.t, c, now.b, rows);
        else if (go)
            for (mfm_u32 c = 0; c < C; c++) mfm_step_block<EXACT, OPT, WIDE>(a, now.t, c, now.b, rows);
        if (all.ffm && !squares_only) mfm_clear_fields(now.word, go && now.word ? 1ull << (now.field % 64) : 0); /* for the next batch */
        now = soon;
        soon = later;
    }
}

/* ---- the line search of the linear terms' steps (line; modern_fm.h, mfm__line_alpha) ---- */

/* weight * delta' H delta: the curvature along delta of row q's loss at its scores, H the loss's
   second derivative in the scores (modern_fm.h, mfm__curvature). */
__device__ double mfm_line_curvature(const mfm_train_args &a, mfm_u64 q, const double *delta, float weight) {
    const mfm_u32 C = a.n_classes;
    const float *s = a.scores + q * C;
    if (a.task == MFM_REGRESSION) return weight * delta[0] * delta[0];
    if (a.task != MFM_MULTICLASS) {
        const double x = s[0], p = x >= 0 ? 1.0 / (1.0 + exp(-x)) : exp(x) / (1.0 + exp(x));
        return weight * p * (1 - p) * delta[0] * delta[0];
    }
    double top = -1e308, total = 0, mean = 0, square = 0;
    for (mfm_u32 c = 0; c < C; c++) top = s[c] > top ? s[c] : top;
    for (mfm_u32 c = 0; c < C; c++) total += exp((double)s[c] - top);
    for (mfm_u32 c = 0; c < C; c++) {
        const double p = exp((double)s[c] - top) / total;
        mean += p * delta[c], square += p * delta[c] * delta[c];
    }
    return weight * (square - mean * mean);
}

/* How much the linear steps move each row's scores (a thread a row, the steps added in the
   row's order), and the slope and curvature of the row's loss along them, summed by each block
   into line_parts. */
extern "C" __global__ void __launch_bounds__(256) mfm_train_line_delta(const mfm_train_args a) {
    __shared__ double shared[256];
    const mfm_u32 C = a.n_classes;
    const mfm_u64 n_threads = (mfm_u64)gridDim.x * blockDim.x;
    double slope = 0, curvature = 0;
    for (mfm_u64 q = (mfm_u64)blockIdx.x * blockDim.x + threadIdx.x; q < a.n_batch; q += n_threads) {
        const mfm_u64 r = a.rows ? a.rows[q] : a.first + q;
        mfm_row row = {a.offsets[r] - a.offset_base, (mfm_u32)(a.offsets[r + 1] - a.offsets[r]), 1.0f};
        double *delta = a.line_delta + q * C;
        if (a.normalize) { /* mfm_row_at's scale, one lane */
            double squares = 0;
            for (mfm_u32 i = 0; i < row.z; i++) squares += a.values ? (double)a.values[row.lo + i] * a.values[row.lo + i] : 1.0;
            if (squares > 0) row.scale = (float)(1.0 / sqrt(squares));
        }
        for (mfm_u32 c = 0; c < C; c++) {
            double d = a.line_step[0][c];
            for (mfm_u32 i = 0; i < row.z; i++) d += (double)mfm_x(a, row.lo + i, row.scale) * a.line_step[1][mfm_grad_at(a, MFM_W, c, a.features[row.lo + i], 0)];
            delta[c] = d;
            slope += (double)a.dlds[q * C + c] * d;
        }
        curvature += mfm_line_curvature(a, q, delta, mfm_row_weight(a, r));
    }
    const double *parts[2] = {&slope, &curvature};
    for (int j = 0; j < 2; j++) {
        shared[threadIdx.x] = *parts[j];
        __syncthreads();
        for (mfm_u32 half = blockDim.x / 2; half > 0; half /= 2) {
            if (threadIdx.x < half) shared[threadIdx.x] += shared[threadIdx.x + half];
            __syncthreads();
        }
        if (threadIdx.x == 0) a.line_parts[2 * blockIdx.x + j] = shared[0];
        __syncthreads();
    }
}

/* The fraction alpha = min(1, -slope / curvature) of the batch's sums (one block, a fixed
   order); 1 where the loss does not fall along the steps or is flat in them. */
extern "C" __global__ void __launch_bounds__(256) mfm_train_line_alpha(const mfm_train_args a) {
    __shared__ double shared[256];
    const double *parts = a.line_parts;
    const double slope = mfm_block_sum(shared, a.line_blocks, [=](mfm_u64 b) { return parts[2 * b]; });
    __syncthreads();
    const double curvature = mfm_block_sum(shared, a.line_blocks, [=](mfm_u64 b) { return parts[2 * b + 1]; });
    if (threadIdx.x == 0) *a.line_alpha = slope < 0 && curvature > 0 && -slope < curvature ? -slope / curvature : 1.0;
}

/* Every listed feature's w (and w0) takes alpha of its step; the steps go back to zero. */
extern "C" __global__ void __launch_bounds__(256) mfm_train_line_settle(const mfm_train_args a) {
    const mfm_u32 C = a.n_classes;
    const mfm_u64 n = a.count[2 * a.parity + MFM_FEATURES] * C, n_threads = (mfm_u64)gridDim.x * blockDim.x;
    const float alpha = (float)*a.line_alpha;
    const mfm_u64 first = (mfm_u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (first < C) {
        *mfm_block(a, MFM_W0, (mfm_u32)first, 0) += alpha * a.line_step[0][first];
        a.line_step[0][first] = 0;
    }
    for (mfm_u64 i = first; i < n; i += n_threads) {
        const mfm_u64 f = a.list[MFM_FEATURES][i / C];
        const mfm_u32 c = (mfm_u32)(i % C);
        float *step = a.line_step[1] + mfm_grad_at(a, MFM_W, c, f, 0);
        *mfm_block(a, MFM_W, c, f) += alpha * *step;
        *step = 0;
    }
}

/* mfm_train_rows_{fast,exact}{,_k4,_k8,_k16}: any k, and k = 4, 8, 16 known at compile time */
#define MFM_TRAIN_ROWS(sums, EXACT, ks, K) \
    extern "C" __global__ void __launch_bounds__(256, 4) mfm_train_rows_##sums##ks(const mfm_train_args a) { mfm_train_rows<EXACT, K>(a); }
MFM_TRAIN_ROWS(fast, false, , 0)
MFM_TRAIN_ROWS(fast, false, _k4, 4)
MFM_TRAIN_ROWS(fast, false, _k8, 8)
MFM_TRAIN_ROWS(fast, false, _k16, 16)
MFM_TRAIN_ROWS(exact, true, , 0)
MFM_TRAIN_ROWS(exact, true, _k4, 4)
MFM_TRAIN_ROWS(exact, true, _k8, 8)
MFM_TRAIN_ROWS(exact, true, _k16, 16)

/* mfm_train_ffm_gather{,_k4,_k8,_k16}: blocks of whole warps, each warp's sums in shared memory */
#define MFM_TRAIN_FFM_GATHER(ks, K) \
    extern "C" __global__ void __launch_bounds__(256) mfm_train_ffm_gather##ks(const mfm_train_args a) { mfm_train_ffm_gather<K>(a); }
MFM_TRAIN_FFM_GATHER(, 0)
MFM_TRAIN_FFM_GATHER(_k4, 4)
MFM_TRAIN_FFM_GATHER(_k8, 8)
MFM_TRAIN_FFM_GATHER(_k16, 16)

/* mfm_train_apply_{fast,exact}_{sgd,adagrad,adam,ftrl,rowwise}{,_wide} (_wide: k a multiple of 8). The
   narrow kernels may take 85 registers (three blocks a multiprocessor): at 64 they spilled, and
   fast FFM k = 4 ran 2 % slower. The exact sums' wide kernel takes 104 (two blocks) and waits
   on its reads (Nsight Compute): the host gives it large batches only (deterministic FM k = 16,
   Criteo at batch 4096: narrow 49 % -> 51 % of the fast mode; at 65536 wide 52 %, narrow 49 %). */
#define MFM_TRAIN_APPLY(sums, EXACT, opt, OPT)                                                                                                        \
    extern "C" __global__ void __launch_bounds__(256, 3) mfm_train_apply_##sums##_##opt(const mfm_train_args a) { mfm_train_apply<EXACT, OPT, false>(a); } \
    extern "C" __global__ void __launch_bounds__(256) mfm_train_apply_##sums##_##opt##_wide(const mfm_train_args a) { mfm_train_apply<EXACT, OPT, true>(a); }
MFM_TRAIN_APPLY(fast, false, sgd, MFM_SGD)
MFM_TRAIN_APPLY(fast, false, adagrad, MFM_ADAGRAD)
MFM_TRAIN_APPLY(fast, false, adam, MFM_ADAM)
MFM_TRAIN_APPLY(fast, false, ftrl, MFM_FTRL)
MFM_TRAIN_APPLY(fast, false, rowwise, MFM_ROWWISE)
MFM_TRAIN_APPLY(exact, true, sgd, MFM_SGD)
MFM_TRAIN_APPLY(exact, true, adagrad, MFM_ADAGRAD)
MFM_TRAIN_APPLY(exact, true, adam, MFM_ADAM)
MFM_TRAIN_APPLY(exact, true, ftrl, MFM_FTRL)
MFM_TRAIN_APPLY(exact, true, rowwise, MFM_ROWWISE)
