/* test_concurrency.c - one trained model predicting from many threads at once, and predictions
   that do not depend on the thread count. */
#if !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L
#endif
#include "../modern_fm.h"
#include "ref.h"
#include "runner.h"
#include "scratch.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

enum { CALLERS = 4, ROUNDS = 8 };

typedef struct caller {
    const mfm_model *model;
    const mfm_csr *data;
    float *out;
    size_t n;
    int failures;
} caller;

static void *predict_repeatedly(void *arg) {
    caller *c = (caller *)arg;
    int round;
    for (round = 0; round < ROUNDS; round++)
        if (mfm_predict(c->model, c->data, MFM_OUTPUT_SCORE, c->out, c->n, NULL) != MFM_OK) c->failures++;
    return NULL;
}

static void trained_ffm(test_data *td, mfm_model **model, int n_threads) {
    data_spec spec;
    mfm_params p = {0};
    memset(&spec, 0, sizeof spec);
    spec.n_rows = 400;
    spec.feature_range = 50;
    spec.n_fields = 5;
    spec.min_nnz = 0;
    spec.max_nnz = 9;
    spec.with_values = 1;
    spec.task = MFM_TASK_MULTICLASS;
    spec.n_classes = 3;
    spec.seed = 11;
    data_random(td, &spec);
    p.model = MFM_MODEL_FFM;
    p.task = MFM_TASK_MULTICLASS;
    p.k = 4;
    p.n_epochs = 2;
    p.n_threads = n_threads; /* batch_size 1: training runs on one thread whatever this says */
    p.seed = 5;
    *model = NULL;
    mfm_train(&p, &td->csr, model, NULL);
}

/* CALLERS threads predict with one model at the same time; each output must equal `expected`. */
static void predict_together(const mfm_model *m, const mfm_csr *d, const float *expected, size_t n, const char *what) {
    pthread_t threads[CALLERS];
    caller callers[CALLERS];
    int i;
    for (i = 0; i < CALLERS; i++) {
        callers[i].model = m;
        callers[i].data = d;
        callers[i].out = (float *)malloc(n * sizeof(float));
        callers[i].n = n;
        callers[i].failures = 0;
        CHECK(pthread_create(&threads[i], NULL, predict_repeatedly, &callers[i]) == 0, "pthread_create %d", i);
    }
    for (i = 0; i < CALLERS; i++) {
        pthread_join(threads[i], NULL);
        CHECK(callers[i].failures == 0, "%s, caller %d: %d failed predictions", what, i, callers[i].failures);
        CHECK(memcmp(callers[i].out, expected, n * sizeof(float)) == 0, "%s, caller %d: predictions differ from the lone call", what, i);
        free(callers[i].out);
    }
}

/* Four threads predict with one model at the same time: the trained model, then the same model
   saved and opened with mfm_model_map (every output equals a lone call's on the trained model),
   then saved with float16 factors and mapped, and copied by mfm_model_load_parameters (every
   output equals a lone call's on the mapped float16 model). */
void test_predict_from_many_threads(void) {
    test_data td;
    mfm_model *m, *mapped = NULL, *half = NULL, *copied = NULL;
    float *expected;
    char path[256];
    mfm_error e;
    size_t n;
    trained_ffm(&td, &m, 1);
    REQUIRE(m != NULL, "training failed");
    n = (size_t)td.csr.n_rows * mfm_output_width(m, MFM_OUTPUT_SCORE);
    expected = (float *)malloc(n * sizeof(float));
    CHECK(mfm_predict(m, &td.csr, MFM_OUTPUT_SCORE, expected, n, NULL) == MFM_OK, "lone prediction failed");
    predict_together(m, &td.csr, expected, n, "trained model");
    scratch_path(path, sizeof path, "threads.mfm");
    if (CHECK(mfm_model_save(m, path, 1, &e) == MFM_OK && mfm_model_map(path, &mapped, &e) == MFM_OK, "save and map: %s", e.message))
        predict_together(mapped, &td.csr, expected, n, "mapped model");
    if (CHECK(mfm_model_save_half(m, path, &e) == MFM_OK && mfm_model_map(path, &half, &e) == MFM_OK, "save_half and map: %s", e.message) &&
        CHECK(mfm_predict(half, &td.csr, MFM_OUTPUT_SCORE, expected, n, NULL) == MFM_OK, "lone prediction (float16) failed"))
        predict_together(half, &td.csr, expected, n, "float16 model");
    if (half && CHECK(mfm_model_load_parameters(path, &copied, &e) == MFM_OK, "load_parameters: %s", e.message))
        predict_together(copied, &td.csr, expected, n, "copied float16 model");
    free(expected);
    mfm_model_free(copied);
    mfm_model_free(half);
    mfm_model_free(mapped);
    mfm_model_free(m);
    data_free(&td);
    scratch_clean();
}

/* Prediction splits rows, never a row's sums, and batch_size 1 has nothing to split: models with
   1 and 3 threads predict the same bits. The 400 rows are predicted 30 times over in one call
   (12,000 rows, some 13 MB of records read: a thread for each 4 MB, so 3 threads run), and the
   copies must predict alike. */
void test_predict_thread_count_invariant(void) {
    enum { COPIES = 30 };
    test_data a, b;
    mfm_model *one, *three;
    mfm_csr many;
    float *pa, *pb;
    uint64_t *offsets = NULL, r, c, nnz;
    size_t n, width;
    trained_ffm(&a, &one, 1);
    trained_ffm(&b, &three, 3);
    REQUIRE(one && three, "training failed");
    width = mfm_output_width(one, MFM_OUTPUT_PROBABILITY);
    nnz = a.csr.row_offsets[a.csr.n_rows];
    many = a.csr;
    many.n_rows = a.csr.n_rows * COPIES;
    offsets = (uint64_t *)malloc((many.n_rows + 1) * sizeof(uint64_t));
    many.features = (uint32_t *)malloc(nnz * COPIES * sizeof(uint32_t));
    many.fields = (uint32_t *)malloc(nnz * COPIES * sizeof(uint32_t));
    many.values = (float *)malloc(nnz * COPIES * sizeof(float));
    many.labels = (float *)malloc(many.n_rows * sizeof(float));
    n = (size_t)many.n_rows * width;
    pa = (float *)malloc(n * sizeof(float));
    pb = (float *)malloc(n * sizeof(float));
    if (CHECK(offsets && many.features && many.fields && many.values && many.labels && pa && pb, "out of memory")) {
        for (c = 0; c < COPIES; c++) {
            memcpy((uint32_t *)many.features + c * nnz, a.csr.features, nnz * sizeof(uint32_t));
            memcpy((uint32_t *)many.fields + c * nnz, a.csr.fields, nnz * sizeof(uint32_t));
            memcpy((float *)many.values + c * nnz, a.csr.values, nnz * sizeof(float));
            memcpy((float *)many.labels + c * a.csr.n_rows, a.csr.labels, a.csr.n_rows * sizeof(float));
            for (r = 0; r < a.csr.n_rows; r++) offsets[c * a.csr.n_rows + r] = c * nnz + a.csr.row_offsets[r];
        }
        offsets[many.n_rows] = COPIES * nnz;
        many.row_offsets = offsets;
        CHECK(mfm_predict(one, &many, MFM_OUTPUT_PROBABILITY, pa, n, NULL) == MFM_OK, "predict with 1 thread");
        CHECK(mfm_predict(three, &many, MFM_OUTPUT_PROBABILITY, pb, n, NULL) == MFM_OK, "predict with 3 threads");
        CHECK(memcmp(pa, pb, n * sizeof(float)) == 0, "1 and 3 threads predict different bits");
        for (c = 1; c < COPIES; c++)
            if (!CHECK(memcmp(pb, pb + c * a.csr.n_rows * width, a.csr.n_rows * width * sizeof(float)) == 0, "copy %d of the rows predicts other bits", (int)c)) break;
    }
    free(offsets);
    free((void *)many.features), free((void *)many.fields), free((void *)many.values), free((void *)many.labels);
    free(pa);
    free(pb);
    mfm_model_free(one);
    mfm_model_free(three);
    data_free(&a);
    data_free(&b);
}
