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
            mfm_model_write(m, (mfm_tensor)t, 0, c, x, n, &e);
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
            mfm_model_read(abs_model, (mfm_tensor)t, 0, c, x, count, NULL);
            for (j = 0; j < count; j++) x[j] = fabsf(x[j]);
            mfm_model_write(abs_model, (mfm_tensor)t, 0, c, x, count, NULL);
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
   would): 1 read from the cache, 2 compiled and stored, 3 compiled, not stored, 100 failed. */
static int start_afresh(void) {
    mfm_params p;
    mfm_model *m = NULL;
    mfm_gpu_model *gm = NULL;
    mfm_cuda_info info;
    int code;
    memset(&p, 0, sizeof p);
    test_cuda_forget();
    if (mfm_model_create(&p, 10, 0, 1, &m, NULL) != MFM_OK || mfm_gpu_model_upload(m, 0, &gm, NULL) != MFM_OK ||
        mfm_cuda_get_info(0, &info, NULL) != MFM_OK || !info.kernels_ready)
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
    REQUIRE(mfm_gpu_model_upload(m, 0, &gm, &e) == MFM_OK, "%s", e.message);
    CHECK(mfm_gpu_predict(gm, &d, MFM_OUTPUT_SCORE, out, 0, &e) == MFM_OK, "zero rows: %s", e.message);
    mfm_gpu_model_free(gm);
    mfm_model_free(m);
}
