/* test_api.c - what a newcomer meets first in the API:
     - a dataset read from text gives a view whose n_features / n_fields make a model that fits
       it (mfm_dataset_csr -> mfm_model_create -> mfm_fit, with no mfm_dataset_get_info);
     - n_threads = 0 means every core everywhere (params, mfm_model_set_threads, read options),
       and a model trained with 0 equals one trained with one thread, bit for bit;
     - every enum has one name, spelled as the mfm tool spells it; out of range is "unknown";
     - NULL arguments: refused with a sentence, never a crash.
   Expected names are written out here, not read from the library. */
#include "../modern_fm.h"
#include "ref.h"
#include "runner.h"
#include "scratch.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Rows whose largest feature id is 41 and largest field id 5: the view must say 42 and 6. */
static const char API_TEXT[] = "1 0:3:1 5:41:1\n"
                               "0 1:7:1 2:8:0.5\n"
                               "1 0:3:1 4:9:1\n"
                               "0 3:2:1\n";

void test_api_dataset_view_fits_a_model(void) {
    static const mfm_model_type models[3] = {MFM_MODEL_FM, MFM_MODEL_FFM, MFM_MODEL_FWFM};
    mfm_dataset *ds = NULL;
    mfm_error e;
    mfm_csr view;
    int i;
    REQUIRE(mfm_dataset_parse(API_TEXT, sizeof API_TEXT - 1, "api.ffm", NULL, &ds, &e) == MFM_OK, "parse: %s", e.message);
    view = mfm_dataset_csr(ds);
    CHECK(view.n_features == 42 && view.n_fields == 6, "the view says %u features and %u fields, not 42 and 6", (unsigned)view.n_features,
          (unsigned)view.n_fields);
    for (i = 0; i < 3; i++) {
        mfm_params p;
        mfm_model *m = NULL;
        memset(&p, 0, sizeof p);
        p.model = models[i];
        p.k = 2;
        p.n_epochs = 2;
        if (!CHECK(mfm_model_create(&p, view.n_features, view.n_fields, 0, &m, &e) == MFM_OK, "model %d from the view: %s", i, e.message)) continue;
        CHECK(mfm_fit(m, &view, &e) == MFM_OK, "model %d fits the view: %s", i, e.message);
        mfm_model_free(m);
    }
    mfm_dataset_free(ds);
    view = mfm_dataset_csr(NULL);
    CHECK(view.n_rows == 0 && view.row_offsets == NULL && view.n_features == 0, "a NULL dataset gives an empty view");
}

void test_api_threads_zero_is_every_core(void) {
    static const uint64_t off[] = {0, 2, 4, 6, 8, 10, 12};
    static const uint32_t feat[] = {0, 3, 1, 3, 2, 4, 0, 4, 1, 5, 2, 5}, fld[] = {0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1};
    static const float y[] = {1, 0, 1, 0, 0, 1};
    mfm_params p;
    mfm_csr d;
    mfm_model *one = NULL, *all = NULL;
    mfm_error e;
    snapshot a, b;
    mfm_read_options o;
    mfm_dataset *ds = NULL;
    memset(&p, 0, sizeof p);
    memset(&d, 0, sizeof d);
    d.n_rows = 6;
    d.row_offsets = off;
    d.features = feat;
    d.fields = fld;
    d.labels = y;
    p.model = MFM_MODEL_FFM;
    p.k = 4;
    p.n_epochs = 3;
    p.batch_size = 4;
    p.n_threads = 1;
    REQUIRE(mfm_train(&p, &d, &one, &e) == MFM_OK, "one thread: %s", e.message);
    p.n_threads = 0;
    REQUIRE(mfm_train(&p, &d, &all, &e) == MFM_OK, "n_threads 0: %s", e.message);
    CHECK(mfm_model_params(all)->n_threads == 0, "the model keeps 0 (every core of the machine it runs on), not %d", mfm_model_params(all)->n_threads);
    snapshot_take(&a, one);
    snapshot_take(&b, all);
    CHECK(snapshot_equal(&a, &b), "every core trains the bits of one thread");
    snapshot_free(&a);
    snapshot_free(&b);
    CHECK(mfm_model_set_threads(all, 0, &e) == MFM_OK && mfm_model_params(all)->n_threads == 0, "mfm_model_set_threads(0): %s", e.message);
    CHECK(mfm_model_set_threads(all, -1, &e) == MFM_ERR_INVALID_PARAM && strstr(e.message, "-1"), "mfm_model_set_threads(-1): %s", e.message);
    p.n_threads = -2;
    CHECK(mfm_model_set_params(all, &p, &e) == MFM_ERR_INVALID_PARAM && strstr(e.message, "n_threads = -2") && strstr(e.message, "every core"),
          "params.n_threads = -2: %s", e.message);
    memset(&o, 0, sizeof o);
    o.n_threads = 0;
    CHECK(mfm_dataset_parse(API_TEXT, sizeof API_TEXT - 1, "api.ffm", &o, &ds, &e) == MFM_OK, "read options n_threads 0: %s", e.message);
    mfm_dataset_free(ds);
    mfm_model_free(one);
    mfm_model_free(all);
}

void test_api_enum_names(void) {
    CHECK(!strcmp(mfm_model_type_name(MFM_MODEL_DEFAULT), "fm") && !strcmp(mfm_model_type_name(MFM_MODEL_FM), "fm") &&
              !strcmp(mfm_model_type_name(MFM_MODEL_FFM), "ffm") && !strcmp(mfm_model_type_name(MFM_MODEL_FWFM), "fwfm"),
          "model names");
    CHECK(!strcmp(mfm_task_name(MFM_TASK_DEFAULT), "binary") && !strcmp(mfm_task_name(MFM_TASK_REGRESSION), "regression") &&
              !strcmp(mfm_task_name(MFM_TASK_MULTICLASS), "multiclass"),
          "task names");
    CHECK(!strcmp(mfm_optimizer_name(MFM_OPTIMIZER_DEFAULT), "adagrad") && !strcmp(mfm_optimizer_name(MFM_OPTIMIZER_SGD), "sgd") &&
              !strcmp(mfm_optimizer_name(MFM_OPTIMIZER_ADAM), "adam") && !strcmp(mfm_optimizer_name(MFM_OPTIMIZER_FTRL), "ftrl"),
          "optimizer names");
    CHECK(!strcmp(mfm_backend_name(MFM_BACKEND_DEFAULT), "cpu") && !strcmp(mfm_backend_name(MFM_BACKEND_CUDA), "cuda") &&
              !strcmp(mfm_backend_name(MFM_BACKEND_AUTO), "auto"),
          "backend names");
    CHECK(!strcmp(mfm_metric_name(MFM_METRIC_DEFAULT), "default") && !strcmp(mfm_metric_name(MFM_METRIC_AUC), "auc") &&
              !strcmp(mfm_metric_name(MFM_METRIC_HALF_MSE), "half-mse") && !strcmp(mfm_metric_name(MFM_METRIC_CROSS_ENTROPY), "cross-entropy"),
          "metric names");
    CHECK(!strcmp(mfm_format_name(MFM_FORMAT_AUTO), "auto") && !strcmp(mfm_format_name(MFM_FORMAT_LIBFFM), "libffm") &&
              !strcmp(mfm_format_name(MFM_FORMAT_LIBSVM), "libsvm") && !strcmp(mfm_format_name(MFM_FORMAT_BINARY), "binary"),
          "format names");
    CHECK(!strcmp(mfm_output_name(MFM_OUTPUT_PROBABILITY), "prob") && !strcmp(mfm_output_name(MFM_OUTPUT_LABEL), "label"), "output names");
    CHECK(!strcmp(mfm_class_weight_name(MFM_CLASS_WEIGHT_BALANCED), "balanced"), "class weight names");
    CHECK(!strcmp(mfm_model_type_name((mfm_model_type)42), "unknown") && !strcmp(mfm_metric_name((mfm_metric)-1), "unknown") &&
              !strcmp(mfm_task_name(MFM_TASK_COUNT), "unknown"),
          "out of range is unknown");
    CHECK(!strcmp(mfm_status_string((mfm_status)999), "unknown status"), "status out of range");
}

/* Every public function that takes a pointer, given NULL where it may not be: a status and a
   sentence, no crash (ASan runs this too). */
void test_api_null_arguments(void) {
    static const uint64_t off[] = {0, 2};
    static const uint32_t feat[] = {0, 1}, fld[] = {0, 1};
    static const float y[] = {1};
    mfm_params p;
    mfm_csr d;
    mfm_model *m = NULL, *out = NULL;
    mfm_error e;
    float buf[8];
    size_t n = 5;
    mfm_metrics metrics;
    mfm_interaction top[2];
    memset(&p, 0, sizeof p);
    memset(&d, 0, sizeof d);
    p.model = MFM_MODEL_FFM;
    p.k = 2;
    d.n_rows = 1;
    d.row_offsets = off;
    d.features = feat;
    d.fields = fld;
    d.labels = y;
    REQUIRE(mfm_model_create(&p, 2, 2, 1, &m, &e) == MFM_OK, "create: %s", e.message);
#define API_REFUSES(call, name)                                                                                                 \
    do {                                                                                                                        \
        e.message[0] = '\0';                                                                                                    \
        CHECK((call) == MFM_ERR_INVALID_ARGUMENT && e.message[0], "%s with NULL gives INVALID_ARGUMENT and says so: \"%s\"", name, \
              e.message);                                                                                                       \
    } while (0)
    CHECK(mfm_model_create(NULL, 2, 0, 1, &out, &e) == MFM_OK && mfm_model_params(out)->model == MFM_MODEL_FM && mfm_model_params(out)->k == 4,
          "mfm_model_create(NULL params) makes the default model: %s", e.message);
    mfm_model_free(out);
    out = NULL;
    API_REFUSES(mfm_model_create(&p, 2, 2, 1, NULL, &e), "mfm_model_create(out)");
    API_REFUSES(mfm_model_clone(NULL, &out, &e), "mfm_model_clone(model)");
    API_REFUSES(mfm_train(&p, NULL, &out, &e), "mfm_train(data)");
    API_REFUSES(mfm_fit(NULL, &d, &e), "mfm_fit(model)");
    API_REFUSES(mfm_fit(m, NULL, &e), "mfm_fit(data)");
    API_REFUSES(mfm_partial_fit(m, NULL, &e), "mfm_partial_fit(data)");
    API_REFUSES(mfm_model_set_params(m, NULL, &e), "mfm_model_set_params(params)");
    API_REFUSES(mfm_model_get_tensor(NULL, MFM_TENSOR_W, 0, 0, buf, 2, &e), "mfm_model_get_tensor(model)");
    API_REFUSES(mfm_model_get_tensor(m, MFM_TENSOR_W, 0, 0, NULL, 2, &e), "mfm_model_get_tensor(out)");
    API_REFUSES(mfm_model_set_tensor(m, MFM_TENSOR_W, 0, 0, NULL, 2, &e), "mfm_model_set_tensor(in)");
    API_REFUSES(mfm_predict(NULL, &d, MFM_OUTPUT_SCORE, buf, 8, &e), "mfm_predict(model)");
    API_REFUSES(mfm_predict(m, NULL, MFM_OUTPUT_SCORE, buf, 8, &e), "mfm_predict(data)");
    API_REFUSES(mfm_predict(m, &d, MFM_OUTPUT_SCORE, NULL, 8, &e), "mfm_predict(out)");
    API_REFUSES(mfm_evaluate(m, &d, NULL, &e), "mfm_evaluate(out)");
    API_REFUSES(mfm_top_interactions(m, &d, 0, 2, NULL, &n, &e), "mfm_top_interactions(out)");
    API_REFUSES(mfm_bi_interaction(m, &d, NULL, 8, &e), "mfm_bi_interaction(out)");
    API_REFUSES(mfm_model_save(m, NULL, 1, &e), "mfm_model_save(path)");
    API_REFUSES(mfm_model_load(NULL, &out, &e), "mfm_model_load(path)");
    API_REFUSES(mfm_model_load_memory(NULL, 10, &out, &e), "mfm_model_load_memory(bytes)");
    API_REFUSES(mfm_dataset_write(NULL, "x", MFM_FORMAT_LIBFFM, &e), "mfm_dataset_write(data)");
    API_REFUSES(mfm_cuda_get_info(0, NULL, &e), "mfm_cuda_get_info(out)");
#undef API_REFUSES
    /* the ones that return no status: defined results */
    CHECK(mfm_output_width(NULL, MFM_OUTPUT_SCORE) == 0, "mfm_output_width(NULL) is 0");
    CHECK(mfm_tensor_size(NULL, MFM_TENSOR_V) == 0, "mfm_tensor_size(NULL) is 0");
    CHECK(mfm_model_params(NULL) == NULL, "mfm_model_params(NULL) is NULL");
    CHECK(isnan(mfm_logloss(NULL, NULL, 3)) && isnan(mfm_auc(NULL, NULL, 3)) && isnan(mfm_rmse(NULL, NULL, 3)), "metrics of NULL arrays are NaN");
    mfm_model_get_info(m, NULL);
    mfm_model_get_info(NULL, NULL);
    mfm_model_reset_state(NULL);
    mfm_model_free(NULL);
    mfm_dataset_free(NULL);
    mfm_gpu_model_free(NULL);
    mfm_gpu_data_free(NULL);
    (void)metrics;
    (void)top;
    mfm_model_free(m);
}

/* A row that a model cannot take is named by where it came from: the file and its 1-based line
   (blank lines counted, whichever part of a parallel read found them), a binary file and the
   row, or the row's number in the caller's arrays. */
void test_api_rows_named_by_their_lines(void) {
    /* rows on lines 1, 3, 6 and 7; the last one has feature 7, beyond a model of 4 features */
    static const char text[] = "1 0:1\n\n0 1:1\n\n   \n1 2:1\n0 7:1\n";
    mfm_dataset *ds = NULL, *bin = NULL;
    mfm_params p;
    mfm_model *m = NULL;
    mfm_error e;
    mfm_csr view;
    float out[4];
    char path[512];
    memset(&p, 0, sizeof p);
    p.k = 2;
    REQUIRE(mfm_dataset_parse(text, sizeof text - 1, "te.svm", NULL, &ds, &e) == MFM_OK, "parse: %s", e.message);
    REQUIRE(mfm_model_create(&p, 4, 0, 1, &m, &e) == MFM_OK, "create: %s", e.message);
    view = mfm_dataset_csr(ds);
    CHECK(mfm_predict(m, &view, MFM_OUTPUT_SCORE, out, 4, &e) == MFM_ERR_SHAPE_MISMATCH && strstr(e.message, "te.svm:7: feature id 7"),
          "a text file's row is named by its line: %s", e.message);
    CHECK(mfm_evaluate(m, &view, NULL, &e) != MFM_OK, "evaluate refuses too");
    scratch_path(path, sizeof path, "rows.mfmd");
    REQUIRE(mfm_dataset_write(&view, path, MFM_FORMAT_BINARY, &e) == MFM_OK, "write: %s", e.message);
    REQUIRE(mfm_dataset_read(path, NULL, &bin, &e) == MFM_OK, "read back: %s", e.message);
    view = mfm_dataset_csr(bin);
    CHECK(mfm_predict(m, &view, MFM_OUTPUT_SCORE, out, 4, &e) == MFM_ERR_SHAPE_MISMATCH && strstr(e.message, path) && strstr(e.message, "row 4: feature id 7"),
          "a binary file's row is named by its number: %s", e.message);
    view.origin = NULL;
    CHECK(mfm_predict(m, &view, MFM_OUTPUT_SCORE, out, 4, &e) == MFM_ERR_SHAPE_MISMATCH && strstr(e.message, "row 4 (1-based): feature id 7"),
          "the caller's arrays: %s", e.message);
    mfm_dataset_free(bin);
    mfm_dataset_free(ds);

    { /* 3 MB read in parallel parts, a blank line after every 997th row: the line is still exact */
        const uint64_t n_rows = 300000;
        char *big = (char *)malloc(n_rows * 12 + 16), expect[64];
        size_t used = 0;
        uint64_t r, line = 0;
        mfm_read_options o;
        REQUIRE(big, "out of memory");
        for (r = 0; r < n_rows; r++) {
            used += (size_t)sprintf(big + used, "1 %u:1\n", r + 1 == n_rows ? 9u : (unsigned)(r % 4));
            line++;
            if (r % 997 == 996) big[used++] = '\n', line++;
        }
        snprintf(expect, sizeof expect, "big.svm:%llu: feature id 9", (unsigned long long)(line - (n_rows % 997 == 0)));
        memset(&o, 0, sizeof o);
        o.n_threads = 4;
        if (CHECK(mfm_dataset_parse(big, used, "big.svm", &o, &ds, &e) == MFM_OK, "parse: %s", e.message)) {
            view = mfm_dataset_csr(ds);
            CHECK(view.n_rows == n_rows, "%llu rows read", (unsigned long long)view.n_rows);
            float *scores = (float *)malloc((size_t)n_rows * sizeof(float));
            CHECK(scores && mfm_predict(m, &view, MFM_OUTPUT_SCORE, scores, (size_t)n_rows, &e) == MFM_ERR_SHAPE_MISMATCH && strstr(e.message, expect),
                  "expected \"%s\" in: %s", expect, e.message);
            free(scores);
            mfm_dataset_free(ds);
        }
        free(big);
    }
    mfm_model_free(m);
    scratch_clean();
}
