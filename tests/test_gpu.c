/* test_gpu.c - prediction on a GPU against the CPU (`make test-gpu`; each test skips, saying
   why, where no driver or no device is). The CPU's predictions are the reference: they are
   checked against the naive O(z^2 k) loops by test_score.c.

   Tolerance: the GPU adds the same float terms in another order, so the rounding difference
   grows with the size of the terms, not of their sum (FM's sum-of-squares form cancels a lot
   on long rows). A score may differ by 1e-5 of itself plus 2e-6 of S, the row's sum of
   absolute terms (|w0| + sum |w_i x_i| + sum over pairs of |interaction|: the CPU score of
   the model with every parameter made positive, the values being positive). Probabilities
   may differ by 1e-6 plus that much (the sigmoid and softmax have slope below 1); labels
   must agree wherever no score is that close to the decision. */
#define _POSIX_C_SOURCE 200809L
#include "ref.h"
#include "runner.h"
#include "scratch.h"
#include "../modern_fm.h"
#define XXH_INLINE_ALL
#include "xxhash.h" /* to give a crafted cache entry a valid checksum */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define GPU_RTOL 1e-5
#define GPU_STOL 2e-6

void test_cuda_forget(void);      /* tests/impl.c */
int test_gpu_hog(uint64_t leave); /* tests/impl.c */

static int gpu_ready(void) {
    mfm_cuda_info info;
    mfm_error e;
    if (mfm_cuda_get_info(0, &info, &e) != MFM_OK) {
        runner_skip("%s", e.message);
        return 0;
    }
    return 1;
}

typedef struct gpu_data {
    mfm_csr d;
    uint64_t *off;
    uint32_t *feat, *fld;
    float *val;
} gpu_data;

/* Rows of every length that matters: empty, one non-zero, a few, one per field, and (long) one
   row of `long_row` non-zeros. Fields are drawn per non-zero; features spread over n_features. */
static void make_data(gpu_data *g, uint64_t seed, uint64_t n_rows, uint32_t n_features, uint32_t n_fields, uint32_t long_row, int with_values) {
    uint64_t r, nnz = 0, state = seed;
    uint32_t *lens = (uint32_t *)malloc(n_rows * sizeof *lens);
    for (r = 0; r < n_rows; r++) {
        uint32_t z = r == 0 ? 0 : r == 1 ? 1 : r == 2 ? n_fields : r == 3 ? long_row : rng_below(&state, 2 * n_fields + 2);
        lens[r] = z;
        nnz += z;
    }
    memset(g, 0, sizeof *g);
    g->off = (uint64_t *)malloc((n_rows + 1) * sizeof *g->off);
    g->feat = (uint32_t *)malloc((nnz + 1) * sizeof *g->feat);
    g->fld = (uint32_t *)malloc((nnz + 1) * sizeof *g->fld);
    g->val = (float *)malloc((nnz + 1) * sizeof *g->val);
    g->off[0] = 0;
    for (r = 0, nnz = 0; r < n_rows; r++) {
        uint32_t a;
        for (a = 0; a < lens[r]; a++, nnz++) {
            g->fld[nnz] = lens[r] <= n_fields && r == 2 ? a : rng_below(&state, n_fields);
            g->feat[nnz] = rng_below(&state, n_features);
            g->val[nnz] = (float)rng_uniform(&state, 0.2, 1.5);
        }
        g->off[r + 1] = nnz;
    }
    free(lens);
    g->d.n_rows = n_rows;
    g->d.row_offsets = g->off;
    g->d.features = g->feat;
    g->d.fields = g->fld;
    g->d.values = with_values ? g->val : NULL;
    g->d.n_features = n_features;
    g->d.n_fields = n_fields;
}

static void free_data(gpu_data *g) {
    free(g->off);
    free(g->feat);
    free(g->fld);
    free(g->val);
}

/* A model with every parameter random (not the tiny initial ones), so that each term shows. */
static mfm_model *random_model(mfm_params p, uint32_t n_features, uint32_t n_fields, uint32_t n_classes, uint64_t seed) {
    mfm_model *m = NULL;
    mfm_error e;
    uint64_t state = seed;
    uint32_t c;
    int t;
    p.init_scale = 0.3;
    if (mfm_model_create(&p, n_features, n_fields, n_classes, &m, &e) != MFM_OK) {
        (void)CHECK(0, "create: %s", e.message);
        return NULL;
    }
    mfm_model_set_threads(m, 0, NULL); /* the CPU reference on every core */
    for (c = 0; c < (p.task == MFM_TASK_MULTICLASS ? n_classes : 1); c++)
        for (t = 0; t < MFM_TENSOR_COUNT; t++) {
            size_t n = mfm_tensor_size(m, (mfm_tensor)t), i;
            float *x;
            if (n == 0) continue;
            x = (float *)malloc(n * sizeof *x);
            for (i = 0; i < n; i++) x[i] = (float)rng_uniform(&state, t == MFM_TENSOR_V ? -0.4 : -1.0, t == MFM_TENSOR_V ? 0.4 : 1.0);
            mfm_model_set_tensor(m, (mfm_tensor)t, 0, c, x, n, &e);
            free(x);
        }
    return m;
}

/* Per row and class: how far a GPU score may be from the CPU's (see the top of the file). */
static double *score_tolerance(const mfm_model *m, const mfm_csr *d, const float *scores) {
    const size_t C = mfm_output_width(m, MFM_OUTPUT_SCORE), n = d->n_rows * C;
    mfm_model *abs_model = NULL;
    mfm_params p = *mfm_model_params(m);
    double *tol = (double *)malloc((n + 1) * sizeof *tol);
    float *terms = (float *)malloc((n + 1) * sizeof *terms);
    size_t i;
    uint32_t c;
    int t;
    mfm_model_clone(m, &abs_model, NULL);
    p.backend = MFM_BACKEND_CPU;
    mfm_model_set_params(abs_model, &p, NULL);
    for (c = 0; c < C; c++)
        for (t = 0; t < MFM_TENSOR_COUNT; t++) {
            size_t count = mfm_tensor_size(m, (mfm_tensor)t), j;
            float *x;
            if (count == 0) continue;
            x = (float *)malloc(count * sizeof *x);
            mfm_model_get_tensor(abs_model, (mfm_tensor)t, 0, c, x, count, NULL);
            for (j = 0; j < count; j++) x[j] = fabsf(x[j]);
            mfm_model_set_tensor(abs_model, (mfm_tensor)t, 0, c, x, count, NULL);
            free(x);
        }
    mfm_predict(abs_model, d, MFM_OUTPUT_SCORE, terms, n, NULL);
    for (i = 0; i < n; i++) tol[i] = GPU_RTOL * fabs(scores[i]) + GPU_STOL * terms[i] + 1e-7;
    mfm_model_free(abs_model);
    free(terms);
    return tol;
}

/* CPU vs CUDA (rows from host memory) vs CUDA resident, every output kind. */
static void compare(mfm_model *m, const mfm_csr *d, const char *what) {
    static const mfm_output kinds[] = {MFM_OUTPUT_SCORE, MFM_OUTPUT_PROBABILITY, MFM_OUTPUT_LABEL};
    const size_t C = mfm_output_width(m, MFM_OUTPUT_SCORE);
    mfm_params p = *mfm_model_params(m);
    mfm_gpu_model *gm = NULL;
    mfm_gpu_data *gd = NULL;
    mfm_error e;
    float *scores = (float *)malloc((d->n_rows * C + 1) * sizeof(float));
    double *tol;
    size_t i, k;
    p.backend = MFM_BACKEND_CPU;
    mfm_model_set_params(m, &p, NULL);
    mfm_predict(m, d, MFM_OUTPUT_SCORE, scores, d->n_rows * C, NULL);
    tol = score_tolerance(m, d, scores);
    if (!CHECK(mfm_gpu_model_upload(m, 0, &gm, &e) == MFM_OK, "%s: upload: %s", what, e.message) ||
        !CHECK(mfm_gpu_data_upload(gm, d, &gd, &e) == MFM_OK, "%s: data upload: %s", what, e.message)) {
        mfm_gpu_model_free(gm);
        free(scores), free(tol);
        return;
    }
    for (k = 0; k < 3; k++) {
        const mfm_output kind = kinds[k];
        size_t n = d->n_rows * mfm_output_width(m, kind), bad = 0;
        float *cpu, *gpu, *res;
        if (kind == MFM_OUTPUT_PROBABILITY && p.task == MFM_TASK_REGRESSION) continue;
        cpu = (float *)malloc((n + 1) * sizeof(float));
        gpu = (float *)malloc((n + 1) * sizeof(float));
        res = (float *)malloc((n + 1) * sizeof(float));
        p.backend = MFM_BACKEND_CPU;
        mfm_model_set_params(m, &p, NULL);
        CHECK(mfm_predict(m, d, kind, cpu, n, &e) == MFM_OK, "%s: CPU: %s", what, e.message);
        p.backend = MFM_BACKEND_CUDA;
        mfm_model_set_params(m, &p, NULL);
        CHECK(mfm_predict(m, d, kind, gpu, n, &e) == MFM_OK, "%s: CUDA: %s", what, e.message);
        CHECK(mfm_gpu_predict_resident(gm, gd, kind, res, n, &e) == MFM_OK, "%s: resident: %s", what, e.message);
        for (i = 0; i < n && bad < 3; i++) {
            const size_t row = kind == MFM_OUTPUT_LABEL ? i : i / C;
            double allowed = 0;
            size_t c;
            for (c = 0; c < C; c++) allowed = fmax(allowed, tol[row * C + c]);
            if (kind == MFM_OUTPUT_LABEL && p.task != MFM_TASK_REGRESSION) { /* by the decision, either label is right */
                int near = 0;
                if (C == 1) {
                    near = fabs(scores[row]) <= allowed;
                } else {
                    for (c = 0; c < C; c++) near |= c != (size_t)cpu[i] && scores[row * C + c] >= scores[row * C + (size_t)cpu[i]] - 2 * allowed;
                }
                if (!near && (gpu[i] != cpu[i] || res[i] != cpu[i])) {
                    (void)CHECK(0, "%s: row %zu label cpu %g cuda %g resident %g", what, row, cpu[i], gpu[i], res[i]);
                    bad++;
                }
            } else {
                const double limit = kind == MFM_OUTPUT_PROBABILITY ? 1e-6 + allowed : tol[i]; /* regression's label is its score */
                if (!CHECK_NEAR(gpu[i], cpu[i], 0, limit, "%s kind %d value %zu (CUDA)", what, (int)kind, i)) bad++;
                if (!CHECK_NEAR(res[i], cpu[i], 0, limit, "%s kind %d value %zu (resident)", what, (int)kind, i)) bad++;
            }
        }
        free(cpu), free(gpu), free(res);
    }
    p.backend = MFM_BACKEND_CPU;
    mfm_model_set_params(m, &p, NULL);
    mfm_gpu_data_free(gd);
    mfm_gpu_model_free(gm);
    free(scores), free(tol);
}

void test_gpu_predict_parity(void) {
    static const mfm_model_type models[] = {MFM_MODEL_FM, MFM_MODEL_FFM, MFM_MODEL_FWFM};
    static const mfm_task tasks[] = {MFM_TASK_BINARY, MFM_TASK_REGRESSION, MFM_TASK_MULTICLASS};
    static const int ks[] = {1, 4, 16, 64, 256};
    static const uint32_t fields[] = {1, 8, 39};
    size_t a, b, c, f;
    if (!gpu_ready()) return;
    for (a = 0; a < 3; a++)
        for (b = 0; b < 3; b++)
            for (c = 0; c < 5; c++)
                for (f = 0; f < 3; f++) {
                    mfm_params p;
                    mfm_model *m;
                    gpu_data g;
                    char what[160];
                    /* a 4096-non-zero row where the CPU reference stays quick (FFM and FwFM are O(z^2 k)) */
                    const uint32_t long_row = ks[c] <= 16 || models[a] == MFM_MODEL_FM ? 4096 : 512;
                    memset(&p, 0, sizeof p);
                    p.model = models[a];
                    p.task = tasks[b];
                    p.k = ks[c];
                    snprintf(what, sizeof what, "model %d task %d k %d fields %u", (int)models[a], (int)tasks[b], ks[c], (unsigned)fields[f]);
                    make_data(&g, 17 + a * 100 + b * 10 + c + f * 1000, 300, 2000, fields[f], long_row, (c + f) % 2 == 0);
                    if ((m = random_model(p, 2000, fields[f], 3, 99 + c)) != NULL) compare(m, &g.d, what);
                    mfm_model_free(m);
                    free_data(&g);
                }
}

/* FM, FFM and FwFM (multiclass) at k = 4, random models of `optimizer` over 39 fields, saved
   (factors as float16 where `half`) and mapped back: the GPU predicts what the CPU predicts from
   the mapped model, and from the model itself. */
static void compare_mapped(mfm_optimizer optimizer, int half, uint64_t seed, const char *name) {
    static const mfm_model_type models[] = {MFM_MODEL_FM, MFM_MODEL_FFM, MFM_MODEL_FWFM};
    char path[256];
    size_t a;
    if (!gpu_ready()) return;
    scratch_path(path, sizeof path, "mapped.mfm");
    for (a = 0; a < 3; a++) {
        mfm_params p;
        mfm_model *m, *mapped = NULL;
        mfm_error e;
        gpu_data g;
        char what[64];
        memset(&p, 0, sizeof p);
        p.model = models[a];
        p.task = a == 2 ? MFM_TASK_MULTICLASS : MFM_TASK_BINARY;
        p.k = 4;
        p.optimizer = optimizer;
        snprintf(what, sizeof what, "%s model %d", name, (int)models[a]);
        make_data(&g, seed + a, 2000, 3000, 39, 39, 1);
        m = random_model(p, 3000, 39, 3, seed + 17 + a);
        if (m) compare(m, &g.d, what);
        if (m && CHECK((half ? mfm_model_save_half(m, path, &e) : mfm_model_save(m, path, 1, &e)) == MFM_OK && mfm_model_map(path, &mapped, &e) == MFM_OK,
                       "%s: %s", what, e.message))
            compare(mapped, &g.d, what);
        mfm_model_free(mapped);
        mfm_model_free(m);
        free_data(&g);
    }
    scratch_clean();
}

/* A model whose factors are float16 (mfm_model_save_half, mapped): the GPU widens them as it
   uploads, and predicts what the CPU predicts from them. */
void test_gpu_predict_half(void) { compare_mapped(MFM_OPTIMIZER_ADAGRAD, 1, 41, "float16"); }

/* A model of row-wise AdaGrad (blocks of k + 1 floats: its parameters, then one accumulator). */
void test_gpu_predict_rowwise(void) { compare_mapped(MFM_OPTIMIZER_ROWWISE_ADAGRAD, 0, 61, "row-wise AdaGrad"); }

/* normalize_rows, pairs_only, linear_only, and rows that cross many transfer chunks. */
void test_gpu_predict_variants(void) {
    static const mfm_model_type models[] = {MFM_MODEL_FM, MFM_MODEL_FFM, MFM_MODEL_FWFM};
    size_t a, v;
    if (!gpu_ready()) return;
    for (a = 0; a < 3; a++)
        for (v = 0; v < 4; v++) {
            mfm_params p;
            mfm_model *m;
            gpu_data g;
            char what[120];
            memset(&p, 0, sizeof p);
            p.model = models[a];
            p.k = 8;
            p.normalize_rows = v == 0;
            p.pairs_only = v == 1;
            p.linear_only = v == 2;
            snprintf(what, sizeof what, "model %d variant %zu", (int)models[a], v);
            /* variant 3: 600,000 rows, more than two chunks of 2^18 rows */
            make_data(&g, 5 + v, v == 3 ? 600000 : 500, 5000, 10, 64, v != 1);
            if ((m = random_model(p, 5000, 10, 1, 7 + v)) != NULL) compare(m, &g.d, what);
            mfm_model_free(m);
            free_data(&g);
        }
}

void test_gpu_resident_repeated(void) {
    mfm_params p;
    mfm_model *m;
    mfm_gpu_model *gm = NULL;
    mfm_gpu_data *gd = NULL;
    gpu_data g;
    mfm_error e;
    float *first, *again;
    int i;
    if (!gpu_ready()) return;
    memset(&p, 0, sizeof p);
    p.model = MFM_MODEL_FFM;
    p.k = 4;
    make_data(&g, 3, 20000, 3000, 39, 39, 0);
    m = random_model(p, 3000, 39, 1, 1);
    first = (float *)malloc(20000 * sizeof(float));
    again = (float *)malloc(20000 * sizeof(float));
    REQUIRE(m && mfm_gpu_model_upload(m, 0, &gm, &e) == MFM_OK, "upload: %s", e.message);
    REQUIRE(mfm_gpu_data_upload(gm, &g.d, &gd, &e) == MFM_OK, "data: %s", e.message);
    REQUIRE(mfm_gpu_predict_resident(gm, gd, MFM_OUTPUT_PROBABILITY, first, 20000, &e) == MFM_OK, "%s", e.message);
    for (i = 0; i < 5; i++) {
        CHECK(mfm_gpu_predict_resident(gm, gd, MFM_OUTPUT_PROBABILITY, again, 20000, &e) == MFM_OK, "%s", e.message);
        CHECK(memcmp(first, again, 20000 * sizeof(float)) == 0, "call %d gives the same bits", i);
        CHECK(mfm_gpu_predict(gm, &g.d, MFM_OUTPUT_PROBABILITY, again, 20000, &e) == MFM_OK, "%s", e.message);
        CHECK(memcmp(first, again, 20000 * sizeof(float)) == 0, "host rows, call %d: the same bits", i);
    }
    CHECK(mfm_gpu_predict_resident(gm, gd, MFM_OUTPUT_PROBABILITY, again, 100, &e) == MFM_ERR_INVALID_ARGUMENT, "a short output is refused");
    mfm_gpu_data_free(gd);
    mfm_gpu_model_free(gm);
    mfm_model_free(m);
    free(first);
    free(again);
    free_data(&g);
}

/* How the device's kernels were had by a loader that starts afresh (as a new process's
   would) and is made ready before any model (mfm_cuda_prepare): 1 read from the cache, 2
   compiled and stored, 3 compiled, not stored, 100 failed. */
static int start_afresh(void) {
    mfm_params p;
    mfm_model *m = NULL;
    mfm_gpu_model *gm = NULL;
    mfm_cuda_info info;
    int code;
    memset(&p, 0, sizeof p);
    test_cuda_forget();
    if (mfm_cuda_prepare(0, NULL) != MFM_OK || mfm_cuda_get_info(0, &info, NULL) != MFM_OK || !info.kernels_ready || info.context_seconds <= 0 ||
        mfm_model_create(&p, 10, 0, 1, &m, NULL) != MFM_OK || mfm_gpu_model_upload(m, 0, &gm, NULL) != MFM_OK)
        code = 100;
    else
        code = info.kernels.from_cache ? 1 : info.kernels.stored ? 2 : 3;
    mfm_gpu_model_free(gm);
    mfm_model_free(m);
    return code;
}

/* Cold, then warm; a warm start with no NVRTC at all; an entry whose checksum holds but whose
   image the driver refuses is removed and built again. */
void test_gpu_cold_then_warm_start(void) {
    char dir[512], cmd[700];
    mfm_cuda_info info;
    unsigned char *bytes;
    size_t size;
    int cold, warm, no_nvrtc, rebuilt;
    if (!gpu_ready()) return;
    scratch_path(dir, sizeof dir, "cache-cold-warm");
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0, "empty %s", dir);
    setenv("MFM_CACHE_DIR", dir, 1);
    cold = start_afresh();
    warm = start_afresh();
    CHECK(cold == 2, "cold start compiled and stored the kernels (got %d)", cold);
    CHECK(warm == 1, "warm start read them from the cache (got %d)", warm);
    setenv("MFM_NVRTC_PATH", "/nonexistent/libnvrtc.so", 1);
    no_nvrtc = start_afresh();
    unsetenv("MFM_NVRTC_PATH");
    CHECK(no_nvrtc == 1, "a warm cache needs no NVRTC (got %d)", no_nvrtc);

    REQUIRE(mfm_cuda_get_info(0, &info, NULL) == MFM_OK && info.kernels_ready && info.kernels.path[0], "the entry's path");
    REQUIRE((bytes = read_whole_file(info.kernels.path, &size)) != NULL && size > 56, "read %s", info.kernels.path);
    memset(bytes + 56, 0x5a, size - 56); /* the payload: not an image; the checksum made to match */
    {
        const XXH64_hash_t sum = XXH3_64bits(bytes + 56, size - 56);
        int i;
        for (i = 0; i < 8; i++) bytes[48 + i] = (unsigned char)(sum >> (8 * i));
    }
    REQUIRE(write_whole_file(info.kernels.path, bytes, size), "write %s", info.kernels.path);
    free(bytes);
    rebuilt = start_afresh();
    CHECK(rebuilt == 2, "a refused image is compiled and stored again (got %d)", rebuilt);
    CHECK(start_afresh() == 1, "and then read from the cache");
    unsetenv("MFM_CACHE_DIR");
}

/* Out of GPU memory is a status and a sentence with the bytes; the device is fine afterwards. */
void test_gpu_out_of_memory(void) {
    mfm_params p;
    mfm_model *m = NULL;
    mfm_gpu_model *gm = NULL;
    mfm_error e;
    if (!gpu_ready()) return;
    memset(&p, 0, sizeof p);
    p.k = 8;
    REQUIRE(mfm_model_create(&p, 4000000, 0, 1, &m, &e) == MFM_OK, "%s", e.message); /* 192 MB on the GPU */
    REQUIRE(mfm_gpu_model_upload(m, 0, &gm, &e) == MFM_OK, "%s", e.message);
    mfm_gpu_model_free(gm);
    gm = NULL;
    if (CHECK(test_gpu_hog(64u << 20), "could not fill the GPU's memory")) {
        CHECK(mfm_gpu_model_upload(m, 0, &gm, &e) == MFM_ERR_OUT_OF_MEMORY && gm == NULL, "upload with the GPU full: %s", e.message);
        CHECK(strstr(e.message, "GPU out of memory") && strstr(e.message, "192.0 MB") && strstr(e.message, "free"), "message: %s", e.message);
    }
    test_gpu_hog(0);
    CHECK(mfm_gpu_model_upload(m, 0, &gm, &e) == MFM_OK, "after the memory came back: %s", e.message);
    mfm_gpu_model_free(gm);
    mfm_model_free(m);
}

void test_gpu_errors(void) {
    mfm_params p;
    mfm_model *m = NULL;
    mfm_gpu_model *gm = NULL;
    mfm_error e;
    mfm_csr d;
    float out[1];
    if (!gpu_ready()) return;
    memset(&p, 0, sizeof p);
    memset(&d, 0, sizeof d);
    REQUIRE(mfm_model_create(&p, 10, 0, 1, &m, &e) == MFM_OK, "%s", e.message);
    CHECK(mfm_gpu_model_upload(m, 999, &gm, &e) == MFM_ERR_CUDA_NO_DEVICE && strstr(e.message, "999") && gm == NULL, "device 999: %s", e.message);
    CHECK(mfm_cuda_prepare(999, &e) == MFM_ERR_CUDA_NO_DEVICE && strstr(e.message, "999"), "mfm_cuda_prepare of device 999: %s", e.message);
    REQUIRE(mfm_gpu_model_upload(m, 0, &gm, &e) == MFM_OK, "%s", e.message);
    CHECK(mfm_gpu_predict(gm, &d, MFM_OUTPUT_SCORE, out, 0, &e) == MFM_OK, "zero rows: %s", e.message);
    mfm_gpu_model_free(gm);
    mfm_model_free(m);
}

/* ---- training on the GPU ----------------------------------------------------------------

   The CPU trainer is the reference (test_batch.c and test_optim.c check it against naive steps).
   A GPU fit sees the same batches and takes the same steps; its gradient sums add the same
   terms in another order (fast mode) or exactly (deterministic mode), so its parameters drift
   from the CPU's by rounding only. Final scores must agree to TRAIN_RTOL relative to 1 + |s|:
   with the short runs below the rounding differences stay near 1e-6. */

#define TRAIN_RTOL 1e-4

/* gpu_data with labels for the task (multiclass: 3 classes) and row weights in [0.5, 2). */
typedef struct train_data {
    gpu_data g;
    float *labels, *weights;
} train_data;

static void make_train_data(train_data *t, uint64_t seed, uint64_t n_rows, uint32_t n_features, uint32_t n_fields, mfm_task task) {
    uint64_t r, state = seed * 7919 + 1;
    make_data(&t->g, seed, n_rows, n_features, n_fields, 40, 1);
    t->labels = (float *)malloc(n_rows * sizeof *t->labels);
    t->weights = (float *)malloc(n_rows * sizeof *t->weights);
    for (r = 0; r < n_rows; r++) {
        t->labels[r] = task == MFM_TASK_REGRESSION ? (float)rng_uniform(&state, -2, 2) : (float)rng_below(&state, task == MFM_TASK_MULTICLASS ? 3 : 2);
        t->weights[r] = (float)rng_uniform(&state, 0.5, 2.0);
    }
    t->g.d.labels = t->labels;
    t->g.d.weights = t->weights;
}

static void free_train_data(train_data *t) {
    free_data(&t->g);
    free(t->labels);
    free(t->weights);
}

/* Trains a copy of `p` on d with `backend`; NULL (and a failed check) when it fails. */
static mfm_model *train_on(mfm_params p, mfm_backend backend, const mfm_csr *d) {
    mfm_model *m = NULL;
    mfm_error e;
    p.backend = backend;
    if (!CHECK(mfm_train(&p, d, &m, &e) == MFM_OK, "train on %s: %s", backend == MFM_BACKEND_CUDA ? "CUDA" : "CPU", e.message)) return NULL;
    return m;
}

/* Every tensor and state slot of two models, bit for bit. */
static int same_bits(const mfm_model *a, const mfm_model *b) {
    mfm_model_info info;
    uint32_t c;
    int t, slot, same = 1;
    mfm_model_get_info(a, &info);
    for (c = 0; c < info.n_classes; c++)
        for (t = 0; t < MFM_TENSOR_COUNT; t++)
            for (slot = 0; slot <= info.n_state_slots; slot++) {
                const size_t n = mfm_tensor_slot_size(a, (mfm_tensor)t, slot);
                float *x = (float *)malloc((n + 1) * sizeof *x), *y = (float *)malloc((n + 1) * sizeof *y);
                if (n && (mfm_model_get_tensor(a, (mfm_tensor)t, slot, c, x, n, NULL) != MFM_OK || mfm_model_get_tensor(b, (mfm_tensor)t, slot, c, y, n, NULL) != MFM_OK ||
                          memcmp(x, y, n * sizeof *x) != 0))
                    same = 0;
                free(x);
                free(y);
            }
    return same;
}

/* The largest |gpu - cpu| / (1 + |cpu|) over the scores of d. */
static double score_gap(const mfm_model *cpu, const mfm_model *gpu, const mfm_csr *d) {
    const size_t n = d->n_rows * mfm_output_width(cpu, MFM_OUTPUT_SCORE);
    float *a = (float *)malloc(n * sizeof *a), *b = (float *)malloc(n * sizeof *b);
    double worst = 0;
    size_t i;
    if (mfm_predict(cpu, d, MFM_OUTPUT_SCORE, a, n, NULL) != MFM_OK || mfm_predict(gpu, d, MFM_OUTPUT_SCORE, b, n, NULL) != MFM_OK) worst = HUGE_VAL;
    for (i = 0; i < n && worst < HUGE_VAL; i++) {
        const double gap = fabs((double)a[i] - b[i]) / (1 + fabs((double)a[i]));
        if (!(gap <= worst)) worst = gap; /* NaN counts as the worst */
    }
    free(a);
    free(b);
    return worst;
}

/* One parity cell: a model, task and optimizer at batch size `batch` (the ib-th of 1, 7 and a
   whole-data batch), with row weights, label smoothing and L2 (FTRL: L1 too), two epochs. */
static mfm_params parity_cell(mfm_model_type model, mfm_task task, mfm_optimizer optimizer, size_t ib, int batch, int deterministic) {
    mfm_params p;
    memset(&p, 0, sizeof p);
    p.model = model, p.task = task, p.optimizer = optimizer;
    /* k: the kernels built for k = 4, 8, 16 and the one for any k (5). At batch 1 the float
       order of longer dot products drifts past the tolerance over the 120 steps. */
    p.k = ib == 0 ? 4 : ib == 1 ? 5 : 4 << ((int)optimizer - MFM_OPTIMIZER_SGD) % 3;
    p.batch_size = batch, p.n_epochs = 2, p.seed = 5;
    p.learning_rate = optimizer == MFM_OPTIMIZER_SGD ? 0.01 : 0.1; /* SGD at 0.05 diverges on the 40-long row */
    p.l2_linear = 1e-3, p.l2_factors = 2e-3;
    if (optimizer == MFM_OPTIMIZER_FTRL) p.l1_linear = 1e-3, p.l1_factors = 1e-3;
    if (task != MFM_TASK_REGRESSION) p.label_smoothing = 0.1;
    p.init_scale = 0.1;
    p.deterministic = deterministic;
    return p;
}

/* Every model x task x optimizer at batch 1, 7 and the whole data: the GPU's final scores match
   the CPU's. */
void test_gpu_train_parity(void) {
    static const mfm_model_type models[] = {MFM_MODEL_FM, MFM_MODEL_FFM, MFM_MODEL_FWFM};
    static const mfm_task tasks[] = {MFM_TASK_BINARY, MFM_TASK_REGRESSION, MFM_TASK_MULTICLASS};
    static const mfm_optimizer optimizers[] = {MFM_OPTIMIZER_SGD, MFM_OPTIMIZER_ADAGRAD, MFM_OPTIMIZER_ADAM, MFM_OPTIMIZER_FTRL, MFM_OPTIMIZER_ROWWISE_ADAGRAD};
    static const int batches[] = {1, 7, 1000};
    size_t im, it, io, ib;
    int cells = 0;
    if (!gpu_ready()) return;
    for (im = 0; im < 3; im++)
        for (it = 0; it < 3; it++) {
            train_data t;
            make_train_data(&t, 11 + im * 3 + it, 60, 50, 5, tasks[it]);
            for (io = 0; io < 5; io++)
                for (ib = 0; ib < 3; ib++) {
                    const mfm_params p = parity_cell(models[im], tasks[it], optimizers[io], ib, batches[ib], (int)(ib & 1));
                    mfm_model *cpu, *gpu;
                    double gap;
                    cpu = train_on(p, MFM_BACKEND_CPU, &t.g.d);
                    gpu = train_on(p, MFM_BACKEND_CUDA, &t.g.d);
                    if (cpu && gpu) {
                        gap = score_gap(cpu, gpu, &t.g.d);
                        CHECK(gap <= TRAIN_RTOL, "model %d task %d optimizer %d batch %d: scores differ by %.3g (relative)", (int)p.model, (int)p.task, (int)p.optimizer,
                              p.batch_size, gap);
                        cells++;
                    }
                    mfm_model_free(cpu);
                    mfm_model_free(gpu);
                }
            free_train_data(&t);
        }
    CHECK(cells == 135, "%d of 135 cells trained on both", cells);
}

/* The switches that change what is trained: LIBFFM's (normalized rows, no linear term),
   a linear model, balanced class weights. */
void test_gpu_train_variants(void) {
    train_data t;
    int v;
    if (!gpu_ready()) return;
    make_train_data(&t, 3, 200, 80, 6, MFM_TASK_BINARY);
    for (v = 0; v < 4; v++) {
        mfm_params p;
        mfm_model *cpu, *gpu;
        memset(&p, 0, sizeof p);
        p.model = v == 1 ? MFM_MODEL_FM : v == 3 ? MFM_MODEL_FWFM : MFM_MODEL_FFM;
        p.k = 4, p.batch_size = 16, p.n_epochs = 3, p.learning_rate = 0.1;
        if (v == 0) p.normalize_rows = 1, p.pairs_only = 1, p.adagrad_init = 1, p.init_scale = 1;
        if (v == 1) p.linear_only = 1;
        if (v == 2) p.class_weight = MFM_CLASS_WEIGHT_BALANCED;
        if (v == 3) p.normalize_rows = 1, p.optimizer = MFM_OPTIMIZER_ADAM;
        cpu = train_on(p, MFM_BACKEND_CPU, &t.g.d);
        gpu = train_on(p, MFM_BACKEND_CUDA, &t.g.d);
        if (cpu && gpu) CHECK(score_gap(cpu, gpu, &t.g.d) <= TRAIN_RTOL, "variant %d: scores differ by %.3g", v, score_gap(cpu, gpu, &t.g.d));
        mfm_model_free(cpu);
        mfm_model_free(gpu);
    }
    free_train_data(&t);
}

/* FwFM's rows through shared memory (fast sums, k = 4, 8, 16; kernels/train.cu, mfm_stage_of):
   a row of 50 (two non-zeros a lane) staged beside short ones, and a row of 80 that is not (it
   takes the rows kernel's plain path in the same batches), two classes and three, k = 4 and 16
   at batch 7 and k = 8 over the whole data: the GPU's final scores match the CPU's. */
void test_gpu_train_fwfm_staged(void) {
    static const uint32_t long_rows[] = {50, 80};
    static const mfm_task tasks[] = {MFM_TASK_BINARY, MFM_TASK_MULTICLASS};
    size_t il, it, ib;
    if (!gpu_ready()) return;
    for (il = 0; il < 2; il++)
        for (it = 0; it < 2; it++) {
            train_data t;
            uint64_t r, state = 99 + il;
            make_data(&t.g, 21 + il * 2 + it, 90, 60, 6, long_rows[il], 1);
            t.labels = (float *)malloc(90 * sizeof *t.labels), t.weights = NULL;
            for (r = 0; r < 90; r++) t.labels[r] = (float)rng_below(&state, tasks[it] == MFM_TASK_MULTICLASS ? 3 : 2);
            t.g.d.labels = t.labels;
            for (ib = 0; ib < 3; ib++) {
                mfm_params p = parity_cell(MFM_MODEL_FWFM, tasks[it], MFM_OPTIMIZER_ADAGRAD, 2, ib < 2 ? 7 : 1000, 0);
                mfm_model *cpu, *gpu;
                p.k = ib == 0 ? 4 : ib == 1 ? 16 : 8;
                cpu = train_on(p, MFM_BACKEND_CPU, &t.g.d);
                gpu = train_on(p, MFM_BACKEND_CUDA, &t.g.d);
                if (cpu && gpu)
                    CHECK(score_gap(cpu, gpu, &t.g.d) <= TRAIN_RTOL, "a row of %u, task %d, k = %d, batch %d: scores differ by %.3g", (unsigned)long_rows[il], (int)p.task, p.k,
                          p.batch_size, score_gap(cpu, gpu, &t.g.d));
                mfm_model_free(cpu);
                mfm_model_free(gpu);
            }
            free_train_data(&t);
        }
}

/* FTRL with a strong L1 leaves exact zeros on the GPU, as many as on the CPU. */
void test_gpu_train_ftrl_zeros(void) {
    train_data t;
    mfm_params p;
    mfm_model *cpu, *gpu;
    if (!gpu_ready()) return;
    make_train_data(&t, 8, 300, 100, 5, MFM_TASK_BINARY);
    memset(&p, 0, sizeof p);
    p.model = MFM_MODEL_FFM, p.optimizer = MFM_OPTIMIZER_FTRL, p.k = 4, p.batch_size = 8, p.n_epochs = 3;
    p.learning_rate = 0.1, p.l1_linear = 0.5, p.l1_factors = 0.02, p.init_scale = 0.1;
    cpu = train_on(p, MFM_BACKEND_CPU, &t.g.d);
    gpu = train_on(p, MFM_BACKEND_CUDA, &t.g.d);
    if (cpu && gpu) {
        int tensor;
        for (tensor = MFM_TENSOR_W; tensor <= MFM_TENSOR_V; tensor++) {
            const size_t n = mfm_tensor_size(cpu, (mfm_tensor)tensor);
            float *a = (float *)malloc(n * sizeof *a), *b = (float *)malloc(n * sizeof *b);
            size_t i, zeros_cpu = 0, zeros_gpu = 0, touched_zero = 0;
            mfm_model_get_tensor(cpu, (mfm_tensor)tensor, 0, 0, a, n, NULL);
            mfm_model_get_tensor(gpu, (mfm_tensor)tensor, 0, 0, b, n, NULL);
            for (i = 0; i < n; i++) zeros_cpu += a[i] == 0.0f, zeros_gpu += b[i] == 0.0f, touched_zero += a[i] == 0.0f && b[i] == 0.0f;
            CHECK(zeros_gpu > n / 4 && zeros_gpu + n / 100 >= zeros_cpu && zeros_cpu + n / 100 >= zeros_gpu && touched_zero + n / 100 >= zeros_cpu,
                  "tensor %d: %zu zeros on the GPU, %zu on the CPU, %zu on both, of %zu", tensor, zeros_gpu, zeros_cpu, touched_zero, n);
            free(a);
            free(b);
        }
        CHECK(score_gap(cpu, gpu, &t.g.d) <= TRAIN_RTOL, "scores differ by %.3g", score_gap(cpu, gpu, &t.g.d));
    }
    mfm_model_free(cpu);
    mfm_model_free(gpu);
    free_train_data(&t);
}

/* Deterministic mode: two runs give the same bits, parameters and optimizer state, for every
   model at a small and a large batch; the fast mode stays within tolerance of them. With 100
   features a batch of 1024 has about 90 non-zeros of each, more than one chunk (at most 32) of
   FFM's gather kernel, so most features' sums come from several warps. FFM runs twice more with 200 fields at k = 16, where a warp's sums
   (200 x 16 x 16 bytes) do not fit shared memory and the rows kernel adds them with atomics. A
   third batch of 2^17 rows (2^20 non-zeros) takes the exact sums' wide step kernel. */
void test_gpu_train_deterministic(void) {
    train_data t, wide, huge;
    int im, big;
    if (!gpu_ready()) return;
    make_train_data(&t, 21, 3000, 100, 8, MFM_TASK_BINARY);
    make_train_data(&wide, 22, 1000, 2000, 200, MFM_TASK_BINARY);
    make_train_data(&huge, 23, 1 << 17, 5000, 8, MFM_TASK_BINARY);
    for (im = MFM_MODEL_FM; im <= MFM_MODEL_FWFM + 1; im++)
        for (big = 0; big < 3; big++) {
            const int many_fields = im > MFM_MODEL_FWFM;
            train_data *d = big == 2 ? &huge : many_fields ? &wide : &t;
            mfm_params p;
            mfm_model *a, *b, *fast;
            memset(&p, 0, sizeof p);
            p.model = many_fields ? MFM_MODEL_FFM : (mfm_model_type)im, p.k = many_fields ? 16 : 8;
            if (many_fields && big == 2) continue;
            p.batch_size = big == 2 ? 1 << 17 : big ? 1024 : 32, p.n_epochs = big == 2 ? 2 : 3, p.learning_rate = many_fields ? 0.01 : 0.1, p.deterministic = 1;
            a = train_on(p, MFM_BACKEND_CUDA, &d->g.d);
            b = train_on(p, MFM_BACKEND_CUDA, &d->g.d);
            p.deterministic = 0;
            fast = train_on(p, MFM_BACKEND_CUDA, &d->g.d);
            if (a && b) CHECK(same_bits(a, b), "model %d k %d batch %d: two deterministic runs differ", (int)p.model, p.k, p.batch_size);
            if (a && fast)
                CHECK(score_gap(a, fast, &d->g.d) <= TRAIN_RTOL, "model %d k %d batch %d: fast and deterministic differ by %.3g", (int)p.model, p.k, p.batch_size,
                      score_gap(a, fast, &d->g.d));
            mfm_model_free(a);
            mfm_model_free(b);
            mfm_model_free(fast);
        }
    free_train_data(&t);
    free_train_data(&wide);
    free_train_data(&huge);
}

/* Both ways a batch lists the features it touched (kernels/train.cu): with 2 rows of about 20
   non-zeros over 200,000 features on their first touches, with 500 rows by a sweep of the marks
   (the host sweeps from 1/128 of the features). Either way the GPU trains what the CPU
   trains, and the deterministic mode the same bits twice. */
void test_gpu_train_listing(void) {
    static const mfm_model_type models[] = {MFM_MODEL_FM, MFM_MODEL_FFM, MFM_MODEL_FWFM};
    static const int batches[] = {2, 500};
    train_data t;
    size_t im, ib;
    if (!gpu_ready()) return;
    make_train_data(&t, 31, 2000, 200000, 6, MFM_TASK_BINARY);
    for (im = 0; im < 3; im++)
        for (ib = 0; ib < 2; ib++) {
            mfm_params p;
            mfm_model *cpu, *gpu, *again;
            memset(&p, 0, sizeof p);
            p.model = models[im], p.k = 4, p.batch_size = batches[ib], p.n_epochs = 2, p.seed = 3;
            p.learning_rate = 0.1, p.l2_linear = 1e-3, p.l2_factors = 2e-3, p.init_scale = 0.1, p.deterministic = 1;
            cpu = train_on(p, MFM_BACKEND_CPU, &t.g.d);
            gpu = train_on(p, MFM_BACKEND_CUDA, &t.g.d);
            again = train_on(p, MFM_BACKEND_CUDA, &t.g.d);
            if (cpu && gpu)
                CHECK(score_gap(cpu, gpu, &t.g.d) <= TRAIN_RTOL, "model %d batch %d: scores differ by %.3g (relative)", (int)p.model, p.batch_size, score_gap(cpu, gpu, &t.g.d));
            if (gpu && again) CHECK(same_bits(gpu, again), "model %d batch %d: two deterministic runs differ", (int)p.model, p.batch_size);
            mfm_model_free(cpu);
            mfm_model_free(gpu);
            mfm_model_free(again);
        }
    free_train_data(&t);
}

typedef struct stop_log {
    int epochs, best;
} stop_log;

static int note_epoch(void *user, const mfm_epoch_report *r) {
    stop_log *s = (stop_log *)user;
    s->epochs = r->epoch;
    s->best = r->best_epoch;
    return 0;
}

/* A clear-cut early stop: the validation rows have the training labels flipped, so every epoch
   makes them worse; both backends stop after epoch 1 + patience and restore epoch 1, the same
   model within the parity tolerance. FwFM under AdaGrad, and FFM under row-wise AdaGrad (whose
   blocks the GPU pads to 16 bytes: the best epoch's tables come back through that layout). */
void test_gpu_train_early_stopping(void) {
    train_data t;
    float *flipped;
    mfm_csr valid;
    uint64_t r;
    int backend, config;
    stop_log seen[2];
    if (!gpu_ready()) return;
    make_train_data(&t, 4, 400, 30, 4, MFM_TASK_BINARY);
    flipped = (float *)malloc(t.g.d.n_rows * sizeof *flipped);
    for (r = 0; r < t.g.d.n_rows; r++) flipped[r] = 1.0f - t.labels[r];
    valid = t.g.d;
    valid.labels = flipped;
    valid.weights = NULL;
    for (config = 0; config < 2; config++) {
        mfm_model *kept[2] = {NULL, NULL};
        for (backend = 0; backend < 2; backend++) {
            mfm_params p;
            mfm_model *m = NULL;
            mfm_model_info info;
            mfm_error e;
            memset(&p, 0, sizeof p);
            memset(&seen[backend], 0, sizeof seen[backend]);
            p.model = config ? MFM_MODEL_FFM : MFM_MODEL_FWFM, p.k = 4, p.batch_size = 8, p.n_epochs = 30, p.patience = 3, p.learning_rate = 0.2;
            p.optimizer = config ? MFM_OPTIMIZER_ROWWISE_ADAGRAD : MFM_OPTIMIZER_ADAGRAD;
            p.backend = backend ? MFM_BACKEND_CUDA : MFM_BACKEND_CPU;
            p.on_epoch = note_epoch, p.user = &seen[backend];
            if (!CHECK(mfm_model_create(&p, 30, 4, 1, &m, &e) == MFM_OK, "create: %s", e.message)) continue;
            CHECK(mfm_fit_validated(m, &t.g.d, &valid, &e) == MFM_OK, "fit: %s", e.message);
            mfm_model_get_info(m, &info);
            CHECK(seen[backend].epochs == 4 && seen[backend].best == 1 && info.epochs_trained == 1, "config %d backend %d: stopped after epoch %d, best %d, kept %d epochs",
                  config, backend, seen[backend].epochs, seen[backend].best, (int)info.epochs_trained);
            kept[backend] = m;
        }
        if (kept[0] && kept[1]) {
            const double gap = score_gap(kept[0], kept[1], &t.g.d);
            CHECK(gap <= TRAIN_RTOL, "config %d: the restored models' scores differ by %.3g (relative)", config, gap);
        }
        mfm_model_free(kept[0]);
        mfm_model_free(kept[1]);
    }
    free(flipped);
    free_train_data(&t);
}

/* Resuming on the GPU: 2 epochs and then 1 more equal 3 in one call, and partial fits over
   three chunks equal one over their concatenation (deterministic mode: bit for bit). */
void test_gpu_train_resume_and_partial(void) {
    train_data t;
    mfm_params p;
    mfm_model *once = NULL, *twice = NULL, *whole = NULL, *chunks = NULL;
    mfm_error e;
    mfm_csr part;
    uint64_t r0;
    if (!gpu_ready()) return;
    make_train_data(&t, 9, 210, 60, 5, MFM_TASK_BINARY);
    memset(&p, 0, sizeof p);
    p.model = MFM_MODEL_FFM, p.k = 4, p.batch_size = 7, p.n_epochs = 3, p.learning_rate = 0.1, p.deterministic = 1, p.optimizer = MFM_OPTIMIZER_ADAM;
    p.backend = MFM_BACKEND_CUDA;
    CHECK(mfm_model_create(&p, 60, 5, 1, &once, &e) == MFM_OK && mfm_fit(once, &t.g.d, &e) == MFM_OK, "3 epochs: %s", e.message);
    p.n_epochs = 2;
    CHECK(mfm_model_create(&p, 60, 5, 1, &twice, &e) == MFM_OK && mfm_fit(twice, &t.g.d, &e) == MFM_OK, "2 epochs: %s", e.message);
    p.n_epochs = 1;
    CHECK(mfm_model_set_params(twice, &p, &e) == MFM_OK && mfm_fit(twice, &t.g.d, &e) == MFM_OK, "1 more: %s", e.message);
    CHECK(once && twice && same_bits(once, twice), "2 + 1 epochs differ from 3");
    CHECK(mfm_model_create(&p, 60, 5, 1, &whole, &e) == MFM_OK && mfm_partial_fit(whole, &t.g.d, &e) == MFM_OK, "partial fit: %s", e.message);
    CHECK(mfm_model_create(&p, 60, 5, 1, &chunks, &e) == MFM_OK, "create: %s", e.message);
    for (r0 = 0; chunks && r0 < 210; r0 += 70) {
        uint64_t offsets[71], r;
        for (r = 0; r <= 70; r++) offsets[r] = t.g.off[r0 + r] - t.g.off[r0];
        part = t.g.d;
        part.n_rows = 70;
        part.row_offsets = offsets;
        part.features = t.g.feat + t.g.off[r0];
        part.fields = t.g.fld + t.g.off[r0];
        part.values = t.g.val + t.g.off[r0];
        part.labels = t.labels + r0;
        part.weights = t.weights + r0;
        CHECK(mfm_partial_fit(chunks, &part, &e) == MFM_OK, "chunk at %d: %s", (int)r0, e.message);
    }
    CHECK(whole && chunks && same_bits(whole, chunks), "three partial fits differ from one");
    mfm_model_free(once);
    mfm_model_free(twice);
    mfm_model_free(whole);
    mfm_model_free(chunks);
    free_train_data(&t);
}

static void keep_log(void *user, mfm_log_level level, const char *message) {
    (void)level;
    if (strstr(message, "stream")) *(int *)user = 1;
}

/* Rows that do not fit under params.gpu_memory_limit stream from host memory, with the same
   bits as resident rows (deterministic mode), on one GPU or (n_devices) on several; a limit
   below the model is a clear error that leaves the model as it was. */
static void check_streaming(mfm_model_type model, int n_devices) {
    train_data t;
    mfm_params p;
    mfm_model *resident = NULL, *streamed = NULL;
    mfm_error e;
    uint64_t limit;
    int streams = 0;
    make_train_data(&t, 13, 20000, 500, 6, MFM_TASK_BINARY);
    memset(&p, 0, sizeof p);
    p.model = model, p.k = 4, p.batch_size = 100, p.n_epochs = 2, p.learning_rate = 0.1, p.deterministic = 1, p.backend = MFM_BACKEND_CUDA;
    p.n_devices = n_devices;
    CHECK(mfm_train(&p, &t.g.d, &resident, &e) == MFM_OK, "resident on %d GPU(s): %s", n_devices, e.message);
    p.on_log = keep_log, p.user = &streams;
    for (limit = 100000; limit < ((uint64_t)1 << 32) && !streamed; limit += limit / 8) { /* the smallest limit that trains */
        p.gpu_memory_limit = limit;
        if (mfm_train(&p, &t.g.d, &streamed, &e) != MFM_OK)
            CHECK(e.status == MFM_ERR_OUT_OF_MEMORY && strstr(e.message, "MB"), "limit %.0f: %s", (double)limit, e.message);
    }
    CHECK(streamed && streams, "%d GPU(s): the smallest limit that trains (%.0f bytes) streamed the rows: %d", n_devices, (double)limit, streams);
    CHECK(resident && streamed && same_bits(resident, streamed), "%d GPU(s): streamed rows train other bits than resident ones", n_devices);
    if (resident) { /* too small for the model itself: nothing changes */
        mfm_model *copy = NULL;
        p.gpu_memory_limit = 1000;
        p.on_log = NULL;
        mfm_model_clone(resident, &copy, NULL);
        CHECK(mfm_model_set_params(resident, &p, &e) == MFM_OK && mfm_fit(resident, &t.g.d, &e) == MFM_ERR_OUT_OF_MEMORY && strstr(e.message, "needs"),
              "limit 1000: %s", e.message);
        CHECK(copy && same_bits(resident, copy), "a failed fit changed the model");
        mfm_model_free(copy);
    }
    mfm_model_free(resident);
    mfm_model_free(streamed);
    free_train_data(&t);
}

void test_gpu_train_streaming(void) {
    if (gpu_ready()) check_streaming(MFM_MODEL_FWFM, 0);
}

/* ---- several GPUs (params.n_devices; modern_fm.h, >>gpu-shards) --------------------------

   One GPU is the reference: G GPUs each hold a shard of the factors, add their parts of every
   score up through NCCL and step their own factors. The scores' parts add up in another order
   than one GPU's dot products, so the models agree within the parity tolerance; deterministic
   mode gives the same bits run after run on the same GPUs. */

/* How many GPUs this machine offers (0 after a skip: no GPU, or no NCCL). */
static int gpus_available(void) {
    mfm_cuda_info info;
    if (!gpu_ready() || mfm_cuda_get_info(0, &info, NULL) != MFM_OK) return 0;
    if (!info.nccl_version) {
        runner_skip("no NCCL: training on several GPUs needs NCCL 2 (MFM_NCCL_LIBRARY)");
        return 0;
    }
    if (info.n_devices < 2) {
        runner_skip("this machine has one GPU; training on several needs two or more");
        return 0;
    }
    return info.n_devices;
}

/* The counts of GPUs to test (2 and 4 where there are), with a line for the ones missing; 0
   after a skip (gpus_available). */
static int gpu_counts(int *counts) {
    const int available = gpus_available();
    int n = 0;
    if (!available) return 0;
    counts[n++] = 2;
    if (available >= 4) counts[n++] = 4;
    else printf("  (4 GPUs: not run, this machine has %d)\n", available);
    return n;
}

static mfm_model *train_on_gpus(mfm_params p, int n_devices, const mfm_csr *d) {
    p.n_devices = n_devices;
    return train_on(p, MFM_BACKEND_CUDA, d);
}

/* Every model x task x optimizer at batch 1, 7 and 65536 (all the rows) on 2 and 4 GPUs
   against one. */
void test_gpu_ranks_parity(void) {
    static const mfm_model_type models[] = {MFM_MODEL_FM, MFM_MODEL_FFM, MFM_MODEL_FWFM};
    static const mfm_task tasks[] = {MFM_TASK_BINARY, MFM_TASK_REGRESSION, MFM_TASK_MULTICLASS};
    static const mfm_optimizer optimizers[] = {MFM_OPTIMIZER_SGD, MFM_OPTIMIZER_ADAGRAD, MFM_OPTIMIZER_ADAM, MFM_OPTIMIZER_FTRL, MFM_OPTIMIZER_ROWWISE_ADAGRAD};
    static const int batches[] = {1, 7, 65536};
    int counts[2], n_counts = gpu_counts(counts), ic, cells = 0, same = 0;
    size_t im, it, io, ib;
    if (!n_counts) return;
    for (im = 0; im < 3; im++)
        for (it = 0; it < 3; it++) {
            train_data t;
            make_train_data(&t, 31 + im * 3 + it, 60, 50, 5, tasks[it]);
            for (io = 0; io < 5; io++)
                for (ib = 0; ib < 3; ib++) {
                    const mfm_params p = parity_cell(models[im], tasks[it], optimizers[io], ib, batches[ib], ib != 0);
                    mfm_model *one;
                    one = train_on(p, MFM_BACKEND_CUDA, &t.g.d);
                    for (ic = 0; ic < n_counts && one; ic++) {
                        mfm_model *many = train_on_gpus(p, counts[ic], &t.g.d);
                        if (!many) continue;
                        const double gap = score_gap(one, many, &t.g.d);
                        CHECK(gap <= TRAIN_RTOL, "model %d task %d optimizer %d batch %d on %d GPUs: scores differ by %.3g (relative)", (int)p.model, (int)p.task,
                              (int)p.optimizer, p.batch_size, counts[ic], gap);
                        if (p.deterministic && ib == 2) { /* and again: the same bits */
                            mfm_model *again = train_on_gpus(p, counts[ic], &t.g.d);
                            if (again) CHECK(same_bits(many, again), "model %d task %d optimizer %d batch %d on %d GPUs: two deterministic runs differ", (int)p.model,
                                             (int)p.task, (int)p.optimizer, p.batch_size, counts[ic]);
                            same += again != NULL;
                            mfm_model_free(again);
                        }
                        cells++;
                        mfm_model_free(many);
                    }
                    mfm_model_free(one);
                }
            free_train_data(&t);
        }
    CHECK(cells == 135 * n_counts, "%d of %d cells trained", cells, 135 * n_counts);
    printf("  %d cells, %d of them (deterministic) trained twice to the same bits\n", cells, same);
}

/* Deterministic mode on several GPUs: two runs give the same bits (AdaGrad with its line
   search, every model, batches spread over many features), within the tolerance of one GPU. */
void test_gpu_ranks_deterministic(void) {
    int counts[2], n_counts = gpu_counts(counts), ic, im;
    train_data t;
    if (!n_counts) return;
    make_train_data(&t, 41, 3000, 400, 8, MFM_TASK_BINARY);
    for (im = MFM_MODEL_FM; im <= MFM_MODEL_FWFM; im++) {
        mfm_params p;
        mfm_model *one;
        memset(&p, 0, sizeof p);
        p.model = (mfm_model_type)im, p.k = 8, p.batch_size = 1024, p.n_epochs = 3, p.learning_rate = 0.1, p.deterministic = 1;
        one = train_on(p, MFM_BACKEND_CUDA, &t.g.d);
        for (ic = 0; ic < n_counts && one; ic++) {
            mfm_model *a = train_on_gpus(p, counts[ic], &t.g.d), *b = train_on_gpus(p, counts[ic], &t.g.d);
            if (a && b) CHECK(same_bits(a, b), "model %d on %d GPUs: two deterministic runs differ", im, counts[ic]);
            if (a) CHECK(score_gap(one, a, &t.g.d) <= TRAIN_RTOL, "model %d on %d GPUs: %.3g from one GPU", im, counts[ic], score_gap(one, a, &t.g.d));
            mfm_model_free(a);
            mfm_model_free(b);
        }
        mfm_model_free(one);
    }
    free_train_data(&t);
}

/* Early stopping, resuming and partial fits on several GPUs, as on one: the same stop, and 2 +
   1 epochs or three partial fits give the bits of one call (deterministic, Adam). */
void test_gpu_ranks_lifecycle(void) {
    const int available = gpus_available();
    train_data t;
    float *flipped;
    mfm_csr valid;
    mfm_params p;
    mfm_model *one = NULL, *many = NULL, *resumed = NULL;
    mfm_error e;
    stop_log seen[2];
    uint64_t r;
    int i;
    if (!available) return;
    make_train_data(&t, 42, 400, 30, 4, MFM_TASK_BINARY);
    flipped = (float *)malloc(t.g.d.n_rows * sizeof *flipped);
    for (r = 0; r < t.g.d.n_rows; r++) flipped[r] = 1.0f - t.labels[r];
    valid = t.g.d;
    valid.labels = flipped;
    valid.weights = NULL;
    for (i = 0; i < 2; i++) { /* a clear-cut stop, as in test_gpu_train_early_stopping */
        mfm_model *m = NULL;
        mfm_model_info info;
        memset(&p, 0, sizeof p);
        memset(&seen[i], 0, sizeof seen[i]);
        p.model = MFM_MODEL_FFM, p.k = 4, p.batch_size = 8, p.n_epochs = 30, p.patience = 3, p.learning_rate = 0.2, p.backend = MFM_BACKEND_CUDA;
        p.n_devices = i ? 2 : 0;
        p.on_epoch = note_epoch, p.user = &seen[i];
        if (!CHECK(mfm_model_create(&p, 30, 4, 1, &m, &e) == MFM_OK, "create: %s", e.message)) continue;
        CHECK(mfm_fit_validated(m, &t.g.d, &valid, &e) == MFM_OK, "fit on %d GPU(s): %s", i ? 2 : 1, e.message);
        mfm_model_get_info(m, &info);
        CHECK(seen[i].epochs == 4 && seen[i].best == 1 && info.epochs_trained == 1, "%d GPU(s): stopped after epoch %d, best %d, kept %d epochs", i ? 2 : 1, seen[i].epochs,
              seen[i].best, (int)info.epochs_trained);
        if (i) many = m;
        else one = m;
    }
    if (one && many) CHECK(score_gap(one, many, &t.g.d) <= TRAIN_RTOL, "the restored models differ by %.3g", score_gap(one, many, &t.g.d));
    mfm_model_free(one);
    mfm_model_free(many);
    one = many = NULL;
    memset(&p, 0, sizeof p);
    p.model = MFM_MODEL_FWFM, p.k = 4, p.batch_size = 16, p.n_epochs = 3, p.learning_rate = 0.1, p.deterministic = 1, p.optimizer = MFM_OPTIMIZER_ADAM;
    p.backend = MFM_BACKEND_CUDA, p.n_devices = 2;
    CHECK(mfm_model_create(&p, 30, 4, 1, &one, &e) == MFM_OK && mfm_fit(one, &t.g.d, &e) == MFM_OK, "3 epochs: %s", e.message);
    p.n_epochs = 2;
    CHECK(mfm_model_create(&p, 30, 4, 1, &resumed, &e) == MFM_OK && mfm_fit(resumed, &t.g.d, &e) == MFM_OK, "2 epochs: %s", e.message);
    p.n_epochs = 1;
    CHECK(mfm_model_set_params(resumed, &p, &e) == MFM_OK && mfm_fit(resumed, &t.g.d, &e) == MFM_OK, "1 more: %s", e.message);
    CHECK(one && resumed && same_bits(one, resumed), "2 + 1 epochs on 2 GPUs differ from 3");
    p.n_devices = 0, p.n_epochs = 3;
    CHECK(mfm_model_create(&p, 30, 4, 1, &many, &e) == MFM_OK && mfm_fit(many, &t.g.d, &e) == MFM_OK, "one GPU: %s", e.message);
    CHECK(one && many && score_gap(one, many, &t.g.d) <= TRAIN_RTOL, "Adam on 2 GPUs (deterministic) is %.3g from one GPU", one && many ? score_gap(one, many, &t.g.d) : 0.0);
    mfm_model_free(one);
    mfm_model_free(many);
    mfm_model_free(resumed);
    free(flipped);
    free_train_data(&t);
}

/* A model larger than one GPU may hold (params.gpu_memory_limit) trains on two, each holding
   half its factors, to the scores of one GPU without the limit; one GPU under the limit says
   it is out of memory. */
void test_gpu_ranks_model_larger_than_one(void) {
    const uint32_t n_features = 20000, n_fields = 8, k = 32;
    const uint64_t v_bytes = (uint64_t)n_features * n_fields * k * 3 * 4; /* V's parameters, AdaGrad's state and the gradient sums */
    const int available = gpus_available();
    train_data t;
    mfm_params p;
    mfm_model *one, *limited = NULL, *two;
    mfm_error e;
    if (!available) return;
    make_train_data(&t, 45, 2000, n_features, n_fields, MFM_TASK_BINARY);
    memset(&p, 0, sizeof p);
    p.model = MFM_MODEL_FFM, p.k = (int)k, p.batch_size = 64, p.n_epochs = 2, p.learning_rate = 0.1, p.seed = 3;
    one = train_on(p, MFM_BACKEND_CUDA, &t.g.d);
    p.gpu_memory_limit = v_bytes * 3 / 4, p.backend = MFM_BACKEND_CUDA;
    CHECK(mfm_train(&p, &t.g.d, &limited, &e) == MFM_ERR_OUT_OF_MEMORY && !limited && strstr(e.message, "GPU out of memory"), "one GPU under the limit: %s", e.message);
    two = train_on_gpus(p, 2, &t.g.d);
    if (one && two) CHECK(score_gap(one, two, &t.g.d) <= TRAIN_RTOL, "2 GPUs under the limit: %.3g from one GPU without it", score_gap(one, two, &t.g.d));
    mfm_model_free(one);
    mfm_model_free(limited);
    mfm_model_free(two);
    free_train_data(&t);
}

/* Rows streamed on two GPUs (each GPU streams the same chunks): the resident rows' bits. */
void test_gpu_ranks_streaming(void) {
    if (gpus_available()) {
        check_streaming(MFM_MODEL_FWFM, 2);
        check_streaming(MFM_MODEL_FFM, 2);
    }
}

/* A linear model has no factors to share out: every GPU keeps them all (whatever k is), and the
   first trains w0 and w to the one GPU's scores. */
void test_gpu_ranks_linear_only(void) {
    int counts[2], n_counts = gpu_counts(counts), ic;
    train_data t;
    mfm_params p;
    mfm_model *one;
    if (!n_counts) return;
    make_train_data(&t, 46, 500, 40, 5, MFM_TASK_BINARY);
    memset(&p, 0, sizeof p);
    p.model = MFM_MODEL_FFM, p.k = 1, p.linear_only = 1, p.batch_size = 16, p.n_epochs = 2, p.learning_rate = 0.1;
    one = train_on(p, MFM_BACKEND_CUDA, &t.g.d);
    for (ic = 0; ic < n_counts && one; ic++) {
        mfm_model *many = train_on_gpus(p, counts[ic], &t.g.d);
        if (many) CHECK(score_gap(one, many, &t.g.d) <= TRAIN_RTOL, "linear, k = 1 on %d GPUs: %.3g from one GPU", counts[ic], score_gap(one, many, &t.g.d));
        mfm_model_free(many);
    }
    mfm_model_free(one);
    free_train_data(&t);
}

/* Asking for GPUs the machine does not have, or one twice, is an error that names them. */
void test_gpu_ranks_errors(void) {
    const int available = gpus_available();
    const int twice[] = {0, 1, 0};
    int too_many[MFM_MAX_DEVICES], i;
    train_data t;
    mfm_params p;
    mfm_model *m = NULL;
    mfm_error e;
    if (!available) return;
    make_train_data(&t, 43, 50, 20, 3, MFM_TASK_BINARY);
    memset(&p, 0, sizeof p);
    p.model = MFM_MODEL_FFM, p.backend = MFM_BACKEND_CUDA, p.n_devices = 3, p.devices = twice;
    CHECK(mfm_train(&p, &t.g.d, &m, &e) == MFM_ERR_INVALID_PARAM && strstr(e.message, "device 0 twice") && !m, "device 0 twice: %s", e.message);
    for (i = 0; i < available + 1 && i < MFM_MAX_DEVICES; i++) too_many[i] = i;
    p.n_devices = 2, p.devices = NULL, p.k = 1;
    CHECK(mfm_train(&p, &t.g.d, &m, &e) == MFM_ERR_INVALID_PARAM && strstr(e.message, "params.k = 1") && !m, "k = 1 on 2 GPUs: %s", e.message);
    p.k = 0;
    p.n_devices = available + 1, p.devices = too_many;
    if (available + 1 <= MFM_MAX_DEVICES) {
        char want[64];
        snprintf(want, sizeof want, "no CUDA device %d", available);
        CHECK(mfm_train(&p, &t.g.d, &m, &e) == MFM_ERR_CUDA_NO_DEVICE && strstr(e.message, want) && !m, "%d devices: %s", available + 1, e.message);
    }
    mfm_model_free(m);
    free_train_data(&t);
}

/* mfm_predict on several GPUs shares the rows out, each GPU with its own copy of the model: the
   same bits as one GPU, for many rows and for fewer rows than GPUs. */
void test_gpu_ranks_predict(void) {
    int counts[2], n_counts = gpu_counts(counts), ic, im;
    train_data t;
    if (!n_counts) return;
    make_train_data(&t, 44, 5000, 300, 6, MFM_TASK_MULTICLASS);
    for (im = MFM_MODEL_FM; im <= MFM_MODEL_FWFM; im++) {
        mfm_params p;
        mfm_model *m = NULL;
        mfm_error e;
        const size_t width = 3;
        float *one = (float *)malloc(t.g.d.n_rows * width * sizeof(float)), *many = (float *)malloc(t.g.d.n_rows * width * sizeof(float));
        memset(&p, 0, sizeof p);
        p.model = (mfm_model_type)im, p.task = MFM_TASK_MULTICLASS, p.k = 8, p.batch_size = 512, p.n_epochs = 1, p.backend = MFM_BACKEND_CUDA;
        if (CHECK(mfm_train(&p, &t.g.d, &m, &e) == MFM_OK, "train: %s", e.message) &&
            CHECK(mfm_predict(m, &t.g.d, MFM_OUTPUT_PROBABILITY, one, t.g.d.n_rows * width, &e) == MFM_OK, "one GPU: %s", e.message))
            for (ic = 0; ic < n_counts; ic++) {
                mfm_csr first = t.g.d;
                p.n_devices = counts[ic];
                first.n_rows = 1;
                CHECK(mfm_model_set_params(m, &p, &e) == MFM_OK, "set params: %s", e.message);
                CHECK(mfm_predict(m, &t.g.d, MFM_OUTPUT_PROBABILITY, many, t.g.d.n_rows * width, &e) == MFM_OK && !memcmp(one, many, t.g.d.n_rows * width * sizeof(float)),
                      "model %d on %d GPUs: other predictions (%s)", im, counts[ic], e.message);
                memset(many, 0, width * sizeof(float));
                CHECK(mfm_predict(m, &first, MFM_OUTPUT_PROBABILITY, many, width, &e) == MFM_OK && !memcmp(one, many, width * sizeof(float)),
                      "model %d, one row on %d GPUs: %s", im, counts[ic], e.message);
            }
        mfm_model_free(m);
        free(one);
        free(many);
    }
    free_train_data(&t);
}
