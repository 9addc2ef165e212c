/* test_failsafe.c - no silent failure at the API: training that diverges is an error that names
   the epoch and the row or batch, and a model holding values that are not finite is never saved
   (the tool writes nothing over the old model); NULL arguments, out-of-range enums and NaN
   inputs to the metrics give documented answers, not crashes or numbers; and the messages name
   what is wrong with an input (a byte-order mark, compression, a lone carriage return, CSV, a
   row's 1-based number, a metric's name, a NaN early-stopping metric, --hogwild with
   --deterministic). Each check asserts the status and that the message says what and where. */
#if !defined(_XOPEN_SOURCE)
#define _XOPEN_SOURCE 700
#endif
#include "../modern_fm.h"
#include "runner.h"
#include "scratch.h"
#include "testdata.h"
#include "tool.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A click-log-like libffm file of 200 rows that the tests write (tests/testdata.h), written
   anew at each use since tests clean their scratch folder. */
static const char *failsafe_train(void) {
    static char path[512];
    if (!testdata_standard(TESTDATA_TRAIN_FFM, path, sizeof path, NULL)) snprintf(path, sizeof path, "(the training file could not be written)");
    return path;
}
#define FAILSAFE_TRAIN failsafe_train()

/* ---- helpers ---- */

/* The status is `want` and the message holds every '|'-separated part of `parts`. */
static int says(mfm_status got, mfm_status want, const mfm_error *e, const char *parts, const char *what) {
    char buf[256], *part, *save = NULL;
    int ok = CHECK(got == want, "%s: status %d (%s), expected %d", what, (int)got, got ? e->message : "", (int)want);
    snprintf(buf, sizeof buf, "%s", parts);
    for (part = strtok_r(buf, "|", &save); part && got == want; part = strtok_r(NULL, "|", &save))
        ok &= CHECK(strstr(e->message, part) != NULL, "%s: the message \"%s\" does not say \"%s\"", what, e->message, part);
    return ok;
}

static mfm_dataset *parse_text(const char *text, mfm_task task, mfm_error *e, mfm_status *st) {
    mfm_read_options o;
    mfm_dataset *ds = NULL;
    memset(&o, 0, sizeof o);
    o.task = task;
    o.n_threads = 1;
    *st = mfm_dataset_parse(text, strlen(text), "in.txt", &o, &ds, e);
    return ds;
}

/* n rows of libffm text: 3 fields, label y0 for even rows and y1 for odd ones. */
static char *make_text(int n, const char *y0, const char *y1) {
    char *text = (char *)malloc((size_t)n * 64 + 1), *p = text;
    int r;
    if (!text) return NULL;
    for (r = 0; r < n; r++) p += sprintf(p, "%s 0:%d:1 1:%d:0.5 2:%d:1\n", r % 2 ? y1 : y0, r % 5, 5 + r % 3, 8 + r % 4);
    return text;
}

static int is_nan(double x) { return x != x; }

/* ---- case 2: divergence ---- */

/* Trains on text with params p and expects MFM_ERR_DIVERGED naming the parts; then checks that
   the model refuses to be saved and that an existing file at the path is left as it was. */
static void expect_divergence(const char *text, mfm_task task, const mfm_params *p, const char *parts, const char *what) {
    static const char old_bytes[] = "an earlier model";
    char path[512], msg[600];
    mfm_error e;
    mfm_status st;
    mfm_dataset *ds = parse_text(text, task, &e, &st);
    mfm_model *m = NULL;
    mfm_csr d;
    mfm_model_info info;
    size_t n;
    unsigned char *kept;
    REQUIRE(st == MFM_OK, "%s: parse: %s", what, e.message);
    d = mfm_dataset_csr(ds);
    if (!CHECK(mfm_model_create(p, 16, 3, 1, &m, &e) == MFM_OK, "%s: create: %s", what, e.message)) {
        mfm_dataset_free(ds);
        return;
    }
    st = mfm_fit(m, &d, &e);
    says(st, MFM_ERR_DIVERGED, &e, parts, what);
    CHECK(strcmp(mfm_status_string(MFM_ERR_DIVERGED), "training diverged") == 0, "the status text of MFM_ERR_DIVERGED");
    mfm_model_get_info(m, &info);
    CHECK(info.epochs_trained < (uint64_t)p->n_epochs, "%s: the diverged epoch was counted (%llu epochs)", what, (unsigned long long)info.epochs_trained);
    snprintf(msg, sizeof msg, "%s", e.message);
    scratch_path(path, sizeof path, "old.model");
    REQUIRE(write_whole_file(path, old_bytes, sizeof old_bytes - 1), "cannot write %s", path);
    if (strstr(msg, "not finite (") || strstr(msg, "at its end")) { /* the model holds such values: saving must refuse */
        st = mfm_model_save(m, path, 1, &e);
        says(st, MFM_ERR_DIVERGED, &e, "mfm_model_save|not finite|nothing was written", what);
        kept = read_whole_file(path, &n);
        CHECK(kept && n == sizeof old_bytes - 1 && memcmp(kept, old_bytes, n) == 0, "%s: the refused save changed %s", what, path);
        free(kept);
        CHECK(count_names_containing(scratch_dir(), ".tmp") == 0, "%s: the refused save left a temporary file", what);
    }
    mfm_model_free(m);
    mfm_dataset_free(ds);
    scratch_clean();
}

/* FFM's one worker steps a feature's factors as soon as the batch's last row that touches it
   is summed, so a batch whose row in the middle overflows (values of 1e30 as written) has taken
   some steps: the sentence names that row, and the model holds no value that is not finite. */
void test_failsafe_diverged_mid_batch(void) {
    static const char text[] = "1 0:1:0.5 1:4:0.5 2:8:1\n0 0:2:1 1:5:0.5 2:9:1\n1 0:3:1 1:6:0.5 2:10:1\n0 0:0:1 1:7:0.5 2:11:1\n"
                               "1 0:1:1e30 1:5:1e30 2:10:1e30\n0 0:2:1 1:6:0.5 2:11:1\n1 0:3:1 1:4:0.5 2:8:1\n0 0:0:1 1:7:0.5 2:9:1\n";
    mfm_params p;
    int seed;
    memset(&p, 0, sizeof p);
    p.model = MFM_MODEL_FFM;
    p.k = 4;
    p.n_epochs = 2;
    p.batch_size = 8;
    p.n_threads = 1;
    p.normalize_rows = MFM_OFF;
    for (seed = 1; seed <= 3; seed++) { /* the overflowing row first in the batch or not: named either way */
        char what[64];
        p.seed = (uint64_t)seed;
        snprintf(what, sizeof what, "FFM batch 8, one thread, seed %d", seed);
        expect_divergence(text, MFM_TASK_BINARY, &p, "training diverged in epoch 1: the loss of batch 1 |in.txt:5|every value finite", what);
    }
}

void test_failsafe_diverged_sgd(void) {
    char *text = make_text(40, "0", "1");
    mfm_params p;
    REQUIRE(text, "out of memory");
    memset(&p, 0, sizeof p);
    p.model = MFM_MODEL_FFM;
    p.optimizer = MFM_OPTIMIZER_SGD;
    p.learning_rate = 1e6;
    p.n_epochs = 3;
    p.k = 4;
    expect_divergence(text, MFM_TASK_BINARY, &p, "training diverged in epoch 1|the loss of the row at in.txt:|learning rate (it is 1e+06)",
                      "SGD at learning rate 1e6, batch 1");
    p.batch_size = 8;
    p.n_threads = 2;
    expect_divergence(text, MFM_TASK_BINARY, &p, "training diverged in epoch |the loss of batch |its first row: the row at in.txt:", "SGD at learning rate 1e6, batch 8, 2 threads");
    p.batch_size = 1;
    p.hogwild = 1;
    expect_divergence(text, MFM_TASK_BINARY, &p, "training diverged in epoch |the loss of the row at in.txt:", "SGD at learning rate 1e6, Hogwild");
    { /* mfm_partial_fit: no epoch to name */
        mfm_error e;
        mfm_status st;
        mfm_dataset *ds = parse_text(text, MFM_TASK_BINARY, &e, &st);
        mfm_model *m = NULL;
        mfm_csr d;
        p.hogwild = 0;
        p.n_threads = 1;
        if (CHECK(ds && mfm_model_create(&p, 16, 3, 1, &m, &e) == MFM_OK, "partial fit set-up: %s", e.message)) {
            d = mfm_dataset_csr(ds);
            st = mfm_partial_fit(m, &d, &e);
            says(st, MFM_ERR_DIVERGED, &e, "training diverged: the loss of the row at in.txt:", "mfm_partial_fit at learning rate 1e6");
        }
        mfm_model_free(m);
        mfm_dataset_free(ds);
    }
    free(text);
}

void test_failsafe_diverged_regression_labels(void) {
    static const mfm_model_type models[] = {MFM_MODEL_FM, MFM_MODEL_FFM, MFM_MODEL_FWFM};
    char *text = make_text(40, "3e19", "-3e19"), what[64];
    mfm_params p;
    int i;
    REQUIRE(text, "out of memory");
    for (i = 0; i < 3; i++) {
        memset(&p, 0, sizeof p);
        p.model = models[i];
        p.task = MFM_TASK_REGRESSION;
        p.n_epochs = 2;
        p.k = 4;
        snprintf(what, sizeof what, "labels +-3e19 under AdaGrad, model %d", (int)models[i]);
        /* the gradients fit a float, their squares do not: the accumulator overflows, no loss shows it */
        expect_divergence(text, MFM_TASK_REGRESSION, &p, "training diverged in epoch 1|AdaGrad accumulator|+inf|scale the labels", what);
    }
    free(text);
}

void test_failsafe_diverged_tool(void) {
    char cmd[3072], train[256], model[256], keep[256], reg[256], out[4096], errs[4096];
    size_t n, m;
    unsigned char *before, *after;
    int rc;
    char *text = make_text(40, "3e19", "-3e19");
    REQUIRE(text, "out of memory");
    scratch_path(train, sizeof train, "tr.ffm");
    scratch_path(model, sizeof model, "v.model");
    scratch_path(keep, sizeof keep, "keep.model");
    scratch_path(reg, sizeof reg, "reg.ffm");
    REQUIRE(write_whole_file(reg, text, strlen(text)), "cannot write %s", reg);
    free(text);
    snprintf(cmd, sizeof cmd, "cp %s %s && \"$MFM\" train --quiet %s %s && cp %s %s", FAILSAFE_TRAIN, train, train, model, model, keep);
    rc = tool_shell(cmd, out, sizeof out, errs, sizeof errs);
    REQUIRE(rc == 0, "training a good model: exit %d\n%s%s", rc, out, errs);
    snprintf(cmd, sizeof cmd, "\"$MFM\" train -t 3 -r 1e6 --optimizer sgd %s %s", train, model);
    rc = tool_shell(cmd, out, sizeof out, errs, sizeof errs);
    CHECK(rc == 1 && strstr(errs, "training diverged in epoch 1") && strstr(errs, "the loss of the row at ") && strstr(errs, "tr.ffm:"),
          "mfm train -r 1e6 --optimizer sgd: exit %d, stderr:\n%s", rc, errs);
    snprintf(cmd, sizeof cmd, "\"$MFM\" train --task regression -t 2 %s %s", reg, model);
    rc = tool_shell(cmd, out, sizeof out, errs, sizeof errs);
    CHECK(rc == 1 && strstr(errs, "training diverged in epoch 1") && strstr(errs, "AdaGrad accumulator"), "mfm train on labels +-3e19: exit %d, stderr:\n%s",
          rc, errs);
    before = read_whole_file(keep, &n);
    after = read_whole_file(model, &m);
    CHECK(before && after && n == m && memcmp(before, after, n) == 0, "a diverged training changed the old model file");
    free(before);
    free(after);
    CHECK(count_names_containing(scratch_dir(), "tmp") == 0, "a diverged training left a temporary file");
    scratch_clean();
}

/* Backend CUDA: the loss a pass reports is checked, and the host model is left as it was. */
void test_failsafe_diverged_gpu(void) {
    char *text = make_text(40, "0", "1");
    mfm_cuda_info ci;
    mfm_params p;
    mfm_error e;
    mfm_status st;
    mfm_dataset *ds;
    mfm_model *m = NULL;
    mfm_csr d;
    float before[16], after[16];
    REQUIRE(text, "out of memory");
    if (mfm_cuda_get_info(0, &ci, &e) != MFM_OK) {
        free(text);
        runner_skip("%s", e.message);
        return;
    }
    ds = parse_text(text, MFM_TASK_BINARY, &e, &st);
    free(text);
    REQUIRE(st == MFM_OK, "parse: %s", e.message);
    d = mfm_dataset_csr(ds);
    memset(&p, 0, sizeof p);
    p.model = MFM_MODEL_FM;
    p.optimizer = MFM_OPTIMIZER_SGD;
    p.learning_rate = 1e6;
    p.n_epochs = 3;
    p.k = 4;
    p.backend = MFM_BACKEND_CUDA;
    if (CHECK(mfm_model_create(&p, 16, 3, 1, &m, &e) == MFM_OK, "create: %s", e.message)) {
        CHECK(mfm_model_get_tensor(m, MFM_TENSOR_W, 0, 0, before, 16, &e) == MFM_OK, "get w: %s", e.message);
        st = mfm_fit(m, &d, &e);
        says(st, MFM_ERR_DIVERGED, &e, "training diverged|on the GPU|epoch", "CUDA SGD at learning rate 1e6");
        CHECK(mfm_model_get_tensor(m, MFM_TENSOR_W, 0, 0, after, 16, &e) == MFM_OK && memcmp(before, after, sizeof before) == 0,
              "a diverged GPU fit changed the host model");
    }
    mfm_model_free(m);
    mfm_dataset_free(ds);
}

/* ---- case 11: the API on NULL, out-of-range enums, NaN ---- */

void test_failsafe_api_null_and_nan(void) {
    static const float labels[4] = {0, 1, 0, 1}, scores[4] = {0.1f, 0.9f, 0.2f, 0.8f};
    float with_nan[4] = {0.1f, 0.9f, 0.2f, 0.8f}, label_nan[4] = {0, 1, 0, 1};
    mfm_model_info info;
    mfm_params p;
    mfm_model *m = NULL;
    mfm_dataset *ds = NULL;
    mfm_read_options o;
    mfm_error e;
    mfm_status st;
    memset(&info, 0xAB, sizeof info);
    mfm_model_get_info(NULL, &info);
    CHECK(info.n_features == 0 && info.k == 0 && info.n_parameters == 0, "mfm_model_get_info(NULL, &i) should give zeros");
    CHECK(mfm_model_params(NULL) == NULL, "mfm_model_params(NULL) should be NULL");
    CHECK(mfm_output_width(NULL, MFM_OUTPUT_SCORE) == 0, "mfm_output_width(NULL, score) should be 0");
    CHECK(is_nan(mfm_logloss(NULL, NULL, 3)) && is_nan(mfm_auc(NULL, NULL, 3)) && is_nan(mfm_rmse(NULL, NULL, 3)), "metrics of NULL arrays should be NaN");
    CHECK(is_nan(mfm_auc(labels, NULL, 4)) && is_nan(mfm_logloss(NULL, scores, 4)), "metrics with one NULL array should be NaN");
    CHECK(fabs(mfm_auc(labels, scores, 4) - 1.0) < 1e-12, "AUC of a perfect ranking: %g", mfm_auc(labels, scores, 4));
    with_nan[2] = NAN;
    label_nan[1] = NAN;
    CHECK(is_nan(mfm_auc(labels, with_nan, 4)), "AUC with a NaN score: %g, expected NaN", mfm_auc(labels, with_nan, 4));
    CHECK(is_nan(mfm_auc(label_nan, scores, 4)), "AUC with a NaN label: %g, expected NaN", mfm_auc(label_nan, scores, 4));
    CHECK(is_nan(mfm_logloss(labels, with_nan, 4)) && is_nan(mfm_logloss(label_nan, scores, 4)), "logloss with a NaN should be NaN");
    CHECK(is_nan(mfm_rmse(labels, with_nan, 4)) && is_nan(mfm_rmse(label_nan, scores, 4)), "RMSE with a NaN should be NaN");
    memset(&p, 0, sizeof p);
    p.task = MFM_TASK_MULTICLASS;
    if (CHECK(mfm_model_create(&p, 4, 0, 3, &m, &e) == MFM_OK, "create: %s", e.message)) {
        mfm_model_get_info(m, NULL); /* ignored */
        mfm_model_get_info(m, &info);
        CHECK(info.n_classes == 3, "get_info after a NULL out");
        CHECK(mfm_output_width(m, (mfm_output)42) == 0, "mfm_output_width(m, 42) = %zu, expected 0", mfm_output_width(m, (mfm_output)42));
        CHECK(mfm_output_width(m, (mfm_output)-1) == 0, "mfm_output_width(m, -1) should be 0");
        CHECK(mfm_output_width(m, MFM_OUTPUT_PROBABILITY) == 3 && mfm_output_width(m, MFM_OUTPUT_LABEL) == 1, "mfm_output_width of a 3-class model");
    }
    mfm_model_free(m);
    memset(&o, 0, sizeof o);
    o.n_threads = -5;
    st = mfm_dataset_parse("1 0:1:1\n", 8, "x", &o, &ds, &e);
    says(st, MFM_ERR_INVALID_ARGUMENT, &e, "n_threads = -5|negative", "mfm_dataset_parse with n_threads -5");
    st = mfm_dataset_read(FAILSAFE_TRAIN, &o, &ds, &e);
    says(st, MFM_ERR_INVALID_ARGUMENT, &e, "n_threads = -5|negative", "mfm_dataset_read with n_threads -5");
    CHECK(ds == NULL, "a refused read left a dataset");
}

void test_failsafe_params_enums(void) {
    static const char *fields[6] = {"model", "task", "optimizer", "metric", "backend", "class_weight"};
    int i, bad;
    for (i = 0; i < 6; i++)
        for (bad = 0; bad < 2; bad++) {
            mfm_params p;
            mfm_model *m = NULL;
            mfm_error e;
            char parts[96], what[64];
            const int value = bad ? 42 : -3;
            memset(&p, 0, sizeof p);
            switch (i) {
            case 0: p.model = (mfm_model_type)value; break;
            case 1: p.task = (mfm_task)value; break;
            case 2: p.optimizer = (mfm_optimizer)value; break;
            case 3: p.metric = (mfm_metric)value; break;
            case 4: p.backend = (mfm_backend)value; break;
            default: p.class_weight = (mfm_class_weight)value; break;
            }
            snprintf(parts, sizeof parts, "params.%s = %d|not a known", fields[i], value);
            snprintf(what, sizeof what, "params.%s = %d", fields[i], value);
            says(mfm_model_create(&p, 4, 2, 2, &m, &e), MFM_ERR_INVALID_PARAM, &e, parts, what);
            CHECK(m == NULL, "%s: a model was made", what);
        }
}

/* ---- case 12: messages that say what is wrong ---- */

static void expect_parse_error(const char *text, size_t size, mfm_status want, const char *parts, const char *what) {
    mfm_read_options o;
    mfm_dataset *ds = NULL;
    mfm_error e;
    mfm_status st;
    memset(&o, 0, sizeof o);
    o.n_threads = 1;
    st = mfm_dataset_parse(text, size, "in.txt", &o, &ds, &e);
    says(st, want, &e, parts, what);
    mfm_dataset_free(ds);
}

void test_failsafe_input_messages(void) {
    static const char gz[] = "\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03", zst[] = "\x28\xb5\x2f\xfd\x24\x00\x01\x00", xz[] = "\xfd" "7zXZ\x00\x00\x04",
                      bz[] = "BZh91AY&SY";
    expect_parse_error("\xEF\xBB\xBF" "1 0:1:1\n", 11, MFM_ERR_INVALID_DATA, "in.txt starts with a UTF-8 byte-order mark (EF BB BF)|without one", "a BOM");
    expect_parse_error(gz, sizeof gz - 1, MFM_ERR_BAD_FILE, "in.txt is gzip-compressed|decompress it first|zcat in.txt |", "gzip");
    expect_parse_error(zst, sizeof zst - 1, MFM_ERR_BAD_FILE, "in.txt is zstd-compressed|zstdcat", "zstd");
    expect_parse_error(xz, sizeof xz - 1, MFM_ERR_BAD_FILE, "in.txt is xz-compressed|xzcat", "xz");
    expect_parse_error(bz, sizeof bz - 1, MFM_ERR_BAD_FILE, "in.txt is bzip2-compressed|bzcat", "bzip2");
    expect_parse_error("1 0:1:1\r0 0:2:1\r", 16, MFM_ERR_INVALID_DATA, "in.txt:1:8:|a carriage return (\\r) not followed by a newline", "old Mac line ends");
    expect_parse_error("1 0:1:1\n0 0:2:1 \r 1:3:1\n", 24, MFM_ERR_INVALID_DATA, "in.txt:2:9:|carriage return (\\r)", "a lone CR between tokens");
    expect_parse_error("label,f1,f2\n1,0.5,-2\n", 21, MFM_ERR_INVALID_DATA, "in.txt:1:6:|a comma|looks like CSV|libsvm|libffm", "CSV with a header");
    expect_parse_error("1,0.5,-2,3\n", 11, MFM_ERR_INVALID_DATA, "in.txt:1:2:|looks like CSV", "CSV without a header");
    expect_parse_error("1 1:0.5,2:-1\n", 13, MFM_ERR_INVALID_DATA, "in.txt:1:8:|looks like CSV", "comma-separated tokens");
    expect_parse_error("1 1:0.5 2:-1\n0 1:x 2:1,5\n", 25, MFM_ERR_INVALID_DATA, "in.txt:2:5:|expected a number", "a comma after the error is not blamed");
    expect_parse_error("1 0.5 -2 3\n", 11, MFM_ERR_INVALID_DATA, "in.txt:1:3:|the bare number '0.5'|dense|libsvm", "dense rows, spaces between");
    expect_parse_error("1 -2 0.5\n", 9, MFM_ERR_INVALID_DATA, "in.txt:1:3:|the bare number '-2'|dense", "dense rows, a negative value first");
    expect_parse_error("1 0:-2:1\n", 9, MFM_ERR_INVALID_DATA, "in.txt:1:5:|ids must not be negative", "a negative feature id stays what it is");
}

void test_failsafe_row_numbers_and_metric_names(void) {
    static const uint64_t off[4] = {0, 1, 2, 3};
    static const uint32_t feat[3] = {0, 1, 7};
    static const float y[3] = {0, 1, 0}, y_bad[3] = {0, 1, 2};
    mfm_csr d;
    mfm_params p;
    mfm_model *m = NULL;
    mfm_error e;
    float out[3];
    memset(&d, 0, sizeof d);
    d.n_rows = 3, d.row_offsets = off, d.features = feat, d.labels = y;
    memset(&p, 0, sizeof p);
    p.k = 2;
    REQUIRE(mfm_model_create(&p, 4, 0, 1, &m, &e) == MFM_OK, "create: %s", e.message);
    says(mfm_predict(m, &d, MFM_OUTPUT_SCORE, out, 3, &e), MFM_ERR_SHAPE_MISMATCH, &e, "row 3 (1-based): feature id 7 is beyond the model", "predict: a feature beyond the model");
    d.labels = y_bad;
    {
        static const uint32_t small[3] = {0, 1, 2};
        mfm_metrics met;
        d.features = small;
        says(mfm_evaluate(m, &d, &met, &e), MFM_ERR_INVALID_DATA, &e, "row 3 (1-based): the label is 2", "evaluate: a label that is not 0 or 1");
    }
    mfm_model_free(m);
    m = NULL;
    p.task = MFM_TASK_REGRESSION;
    p.metric = MFM_METRIC_AUC;
    says(mfm_model_create(&p, 4, 0, 1, &m, &e), MFM_ERR_INVALID_PARAM, &e, "params.metric = auc (2)|regression", "AUC for regression names the metric");
}

/* on_log: the warnings, one after the other. */
static void keep_warnings(void *user, mfm_log_level level, const char *message) {
    char *seen = (char *)user;
    size_t used = strlen(seen);
    if (level == MFM_LOG_WARN) snprintf(seen + used, 2048 - used, "%s\n", message);
}

void test_failsafe_nan_metric_is_told(void) {
    char *text = make_text(40, "0", "1"), *one_class = make_text(10, "1", "1"), seen[2048] = "", train[256], valid[256], cmd[1400], out[4096],
         errs[4096];
    mfm_params p;
    mfm_error e;
    mfm_status st;
    mfm_dataset *ds, *vs;
    mfm_model *m = NULL;
    mfm_csr d, v;
    int rc;
    REQUIRE(text && one_class, "out of memory");
    ds = parse_text(text, MFM_TASK_BINARY, &e, &st);
    vs = parse_text(one_class, MFM_TASK_BINARY, &e, &st);
    if (CHECK(ds && vs, "parse: %s", e.message)) {
        d = mfm_dataset_csr(ds), v = mfm_dataset_csr(vs);
        memset(&p, 0, sizeof p);
        p.model = MFM_MODEL_FFM;
        p.k = 4;
        p.n_epochs = 5;
        p.patience = 2;
        p.metric = MFM_METRIC_AUC;
        p.on_log = keep_warnings;
        p.user = seen;
        if (CHECK(mfm_model_create(&p, 16, 3, 1, &m, &e) == MFM_OK, "create: %s", e.message)) {
            st = mfm_fit_validated(m, &d, &v, &e);
            CHECK(st == MFM_OK, "fit with one validation class: %d %s", (int)st, st ? e.message : "");
            CHECK(strstr(seen, "epoch 1: the validation auc is NaN") && strstr(seen, "both classes") && strstr(seen, "logloss") &&
                      strstr(seen, "early stopping after epoch 2"),
                  "the NaN AUC was not told, or not why; warnings:\n%s", seen);
        }
    }
    mfm_model_free(m);
    mfm_dataset_free(ds);
    mfm_dataset_free(vs);
    scratch_path(train, sizeof train, "tr.ffm");
    scratch_path(valid, sizeof valid, "one.ffm");
    REQUIRE(write_whole_file(train, text, strlen(text)) && write_whole_file(valid, one_class, strlen(one_class)), "cannot write the data");
    free(text);
    free(one_class);
    snprintf(cmd, sizeof cmd, "cd %s && \"$MFM\" train --model ffm -t 4 --auto-stop --metric auc -p one.ffm tr.ffm m.model", scratch_dir());
    rc = tool_shell(cmd, out, sizeof out, errs, sizeof errs);
    CHECK(rc == 0 && strstr(errs, "warning: epoch 1: the validation auc is NaN") && strstr(errs, "both classes"),
          "mfm train --auto-stop on one class: exit %d, stderr:\n%s", rc, errs);
    scratch_clean();
}

void test_failsafe_tool_messages(void) {
    char cmd[1400], out[4096], errs[4096], bin[256];
    mfm_params p;
    mfm_model *m = NULL;
    mfm_error e;
    int rc;
    /* --hogwild with --deterministic: the tool refuses the pair; the library takes it, each for its backend */
    snprintf(cmd, sizeof cmd, "\"$MFM\" train --hogwild --deterministic -s 2 %s %s/x.model", FAILSAFE_TRAIN, scratch_dir());
    rc = tool_shell(cmd, out, sizeof out, errs, sizeof errs);
    CHECK(rc == 2 && strstr(errs, "--hogwild") && strstr(errs, "--deterministic"), "--hogwild --deterministic: exit %d, stderr:\n%s", rc, errs);
    memset(&p, 0, sizeof p);
    p.hogwild = p.deterministic = 1;
    CHECK(mfm_model_create(&p, 4, 0, 1, &m, &e) == MFM_OK, "the library refused hogwild with deterministic: %s", e.message);
    mfm_model_free(m);
    /* info - on a binary dataset from standard input */
    scratch_path(bin, sizeof bin, "x.mfmd");
    snprintf(cmd, sizeof cmd, "\"$MFM\" convert %s %s && \"$MFM\" info - < %s", FAILSAFE_TRAIN, bin, bin);
    rc = tool_shell(cmd, out, sizeof out, errs, sizeof errs);
    CHECK(rc == 0 && strstr(out, "200") && strstr(out, "binary"), "mfm info - < x.mfmd: exit %d\n%s%s", rc, out, errs);
    snprintf(cmd, sizeof cmd, "\"$MFM\" info - < %s", FAILSAFE_TRAIN);
    rc = tool_shell(cmd, out, sizeof out, errs, sizeof errs);
    CHECK(rc == 0 && strstr(out, "200"), "mfm info - < text: exit %d\n%s%s", rc, out, errs);
    /* compressed data given directly */
    snprintf(cmd, sizeof cmd, "printf '\\037\\213\\010\\000' > %s/d.gz && \"$MFM\" info %s/d.gz", scratch_dir(), scratch_dir());
    rc = tool_shell(cmd, out, sizeof out, errs, sizeof errs);
    CHECK(rc == 1 && strstr(errs, "d.gz is gzip-compressed") && strstr(errs, "zcat"), "mfm info on gzip data: exit %d, stderr:\n%s", rc, errs);
    scratch_clean();
}
