/* test_tune.c - the mfm tool's training defaults and mfm tune, end to end: a real option typed
   as 0 reaches the params as a literal zero; mfm train holds out 10% of TRAIN for early stopping
   unless told otherwise; a model worse than the constant predictor is warned about, with
   numbers checked against the library and a count from the labels; mfm tune's table, choice,
   saved model and train line. The tool runs through tool_shell (tool.h); the data files come
   from testdata.h. */
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

/* Mushroom-like libsvm: 2000 training rows (a 10% hold-out is 200 of them), 500 test rows. */
static char TRAIN[512], TEST[512];

static int tune_data(void) {
    return testdata_standard(TESTDATA_TRAIN_SVM, TRAIN, sizeof TRAIN, NULL) && testdata_standard(TESTDATA_TEST_SVM, TEST, sizeof TEST, NULL);
}


static mfm_model *load_model(const char *path) {
    mfm_model *m = NULL;
    mfm_error e;
    if (!CHECK(mfm_model_load(path, &m, &e) == MFM_OK, "loading %s: %s", path, e.message)) return NULL;
    return m;
}

/* The number after `key` in text; NaN when key is absent. */
static double number_after(const char *text, const char *key) {
    const char *p = strstr(text, key);
    return p ? strtod(p + strlen(key), NULL) : NAN;
}

/* Lines of stdout that start with an epoch number 1, 2, 3, ... in order. */
static int epoch_lines(const char *out) {
    const char *line = out;
    int n = 0, epoch;
    for (; line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL)
        if (sscanf(line, "%d", &epoch) == 1 && epoch == n + 1) n++;
    return n;
}

/* Whether the tool's model scores every test row as the API's model does, bit for bit. */
static int same_scores(const mfm_model *a, const mfm_model *b, const mfm_csr *rows) {
    float *sa = (float *)malloc(rows->n_rows * sizeof(float)), *sb = (float *)malloc(rows->n_rows * sizeof(float));
    mfm_error e;
    int same = sa && sb && mfm_predict(a, rows, MFM_OUTPUT_SCORE, sa, rows->n_rows, &e) == MFM_OK &&
               mfm_predict(b, rows, MFM_OUTPUT_SCORE, sb, rows->n_rows, &e) == MFM_OK && memcmp(sa, sb, rows->n_rows * sizeof(float)) == 0;
    free(sa);
    free(sb);
    return same;
}

/* -l 0 and --adagrad-init 0 are zeros, not the defaults (2e-5 and 1): mfm info shows them, the
   model file holds them, and the model is the API's with MFM_ZERO in those fields. Without the
   options, info shows the defaults; --l2-linear 0 leaves the factors' L2 at its default. */
void test_cli_literal_zero(void) {
    char model[512], cmd[4096], out[8192], errs[4096];
    mfm_dataset *train = NULL, *test = NULL;
    mfm_model *tool = NULL, *api = NULL;
    mfm_params p;
    mfm_csr tr, te;
    mfm_error e;
    int rc;
    REQUIRE(tune_data(), "cannot write the data files");
    scratch_path(model, sizeof model, "zero.model");
    snprintf(cmd, sizeof cmd, "\"$MFM\" train -l 0 --adagrad-init 0 --validation-fraction 0 -t 2 --seed 3 -s 1 --quiet %s %s && \"$MFM\" info %s", TRAIN,
             model, model);
    rc = tool_shell(cmd, out, sizeof out, errs, sizeof errs);
    REQUIRE(rc == 0, "'%s' exited with %d: %s", cmd, rc, errs);
    CHECK(strstr(out, "l2 linear/factors  0 / 0\n") && strstr(out, "adagrad init       0\n"), "info of a model trained with -l 0 --adagrad-init 0:\n%s", out);
    CHECK(!strstr(out, "-0"), "info prints a literal zero as -0:\n%s", out);
    train = tool_read_data(TRAIN, MFM_TASK_BINARY);
    test = tool_read_data(TEST, MFM_TASK_BINARY);
    tool = load_model(model);
    if (!train || !test || !tool) goto done;
    CHECK(mfm_model_params(tool)->l2_linear == 0 && mfm_model_params(tool)->l2_factors == 0 && mfm_model_params(tool)->adagrad_init == 0,
          "the model file holds l2 %g / %g, adagrad init %g, not zeros", mfm_model_params(tool)->l2_linear, mfm_model_params(tool)->l2_factors,
          mfm_model_params(tool)->adagrad_init);
    memset(&p, 0, sizeof p);
    p.l2_linear = p.l2_factors = p.adagrad_init = MFM_ZERO;
    p.n_epochs = 2;
    p.seed = 3;
    p.n_threads = 1;
    tr = mfm_dataset_csr(train);
    te = mfm_dataset_csr(test);
    if (CHECK(mfm_train(&p, &tr, &api, &e) == MFM_OK, "%s", e.message))
        CHECK(same_scores(tool, api, &te), "'%s' trains another model than the API with MFM_ZERO in l2 and adagrad_init", cmd);

    snprintf(cmd, sizeof cmd, "\"$MFM\" train --validation-fraction 0 -t 1 --quiet %s %s && \"$MFM\" info %s", TRAIN, model, model);
    rc = tool_shell(cmd, out, sizeof out, errs, sizeof errs);
    CHECK(rc == 0 && strstr(out, "l2 linear/factors  2e-05 / 2e-05\n") && strstr(out, "adagrad init       1\n"),
          "info of a model trained without -l or --adagrad-init should show the defaults (exit %d):\n%s%s", rc, out, errs);
    snprintf(cmd, sizeof cmd, "\"$MFM\" train --l2-linear 0 --validation-fraction 0 -t 1 --quiet %s %s && \"$MFM\" info %s", TRAIN, model, model);
    rc = tool_shell(cmd, out, sizeof out, errs, sizeof errs);
    CHECK(rc == 0 && strstr(out, "l2 linear/factors  0 / 2e-05\n"), "--l2-linear 0 (exit %d):\n%s%s", rc, out, errs);
done:
    mfm_model_free(tool);
    mfm_model_free(api);
    mfm_dataset_free(train);
    mfm_dataset_free(test);
    scratch_clean();
}

/* mfm train TRAIN holds out a seeded 10% with early stopping (patience 1) and says so: the model
   is the API's with validation_fraction 0.1; --validation-fraction 0 trains every row for all
   epochs; --libffm holds nothing out; fewer than 100 rows are not split, and the line says so. */
void test_cli_default_holdout(void) {
    char model[512], tiny[512], ffm[512], cmd[4096], out[8192], errs[4096];
    mfm_dataset *train = NULL, *test = NULL;
    mfm_model *tool = NULL, *api = NULL;
    mfm_model_info info;
    mfm_params p;
    mfm_csr tr, te;
    mfm_error e;
    testdata_facts facts;
    int rc;
    REQUIRE(tune_data(), "cannot write the data files");
    scratch_path(model, sizeof model, "holdout.model");
    snprintf(cmd, sizeof cmd, "\"$MFM\" train -t 8 --seed 2 -s 1 %s %s", TRAIN, model);
    rc = tool_shell(cmd, out, sizeof out, errs, sizeof errs);
    REQUIRE(rc == 0, "'%s' exited with %d: %s", cmd, rc, errs);
    CHECK(strstr(out, "holding out a seeded 10% of TRAIN (200 of 2000 rows) for early stopping") && strstr(out, "--validation-fraction 0 trains on every row"),
          "no line about the default hold-out:\n%s", out);
    CHECK(strstr(out, "valid_logloss") != NULL, "the epoch lines show no validation metric of the hold-out:\n%s", out);
    train = tool_read_data(TRAIN, MFM_TASK_BINARY);
    test = tool_read_data(TEST, MFM_TASK_BINARY);
    tool = load_model(model);
    if (!train || !test || !tool) goto done;
    tr = mfm_dataset_csr(train);
    te = mfm_dataset_csr(test);
    CHECK(mfm_model_params(tool)->validation_fraction == 0.1, "the model records validation_fraction %g, not 0.1", mfm_model_params(tool)->validation_fraction);
    memset(&p, 0, sizeof p);
    p.validation_fraction = 0.1;
    p.patience = 1;
    p.n_epochs = 8;
    p.seed = 2;
    p.n_threads = 1;
    if (CHECK(mfm_train(&p, &tr, &api, &e) == MFM_OK, "%s", e.message)) {
        mfm_model_info api_info;
        mfm_model_get_info(tool, &info);
        mfm_model_get_info(api, &api_info);
        CHECK(info.epochs_trained == api_info.epochs_trained && same_scores(tool, api, &te),
              "the default hold-out trains another model (%llu epochs) than the API with validation_fraction 0.1, patience 1 (%llu epochs)",
              (unsigned long long)info.epochs_trained, (unsigned long long)api_info.epochs_trained);
    }

    snprintf(cmd, sizeof cmd, "\"$MFM\" train -t 8 --validation-fraction 0 %s %s", TRAIN, model);
    rc = tool_shell(cmd, out, sizeof out, errs, sizeof errs);
    CHECK(rc == 0 && !strstr(out, "holding out") && epoch_lines(out) == 8, "--validation-fraction 0 should train all 8 epochs on every row (exit %d):\n%s%s", rc,
          out, errs);
    mfm_model_free(tool);
    if ((tool = load_model(model)) != NULL) {
        mfm_model_get_info(tool, &info);
        CHECK(info.epochs_trained == 8 && mfm_model_params(tool)->validation_fraction == 0, "--validation-fraction 0: %llu epochs, validation_fraction %g",
              (unsigned long long)info.epochs_trained, mfm_model_params(tool)->validation_fraction);
    }

    REQUIRE(testdata_standard(TESTDATA_TRAIN_FFM, ffm, sizeof ffm, NULL), "cannot write the libffm data");
    snprintf(cmd, sizeof cmd, "\"$MFM\" train --libffm -t 3 %s %s", ffm, model);
    rc = tool_shell(cmd, out, sizeof out, errs, sizeof errs);
    CHECK(rc == 0 && !strstr(out, "holding out") && epoch_lines(out) == 3, "--libffm should hold nothing out and train 3 epochs (exit %d):\n%s%s", rc, out, errs);

    scratch_path(tiny, sizeof tiny, "tiny.svm");
    REQUIRE(testdata_write_svm(tiny, 60, 11, 0, &facts), "cannot write %s", tiny);
    snprintf(cmd, sizeof cmd, "\"$MFM\" train -t 4 %s %s", tiny, model);
    rc = tool_shell(cmd, out, sizeof out, errs, sizeof errs);
    CHECK(rc == 0 && strstr(out, "TRAIN has 60 rows, fewer than 100: no hold-out") && !strstr(out, "holding out") && epoch_lines(out) == 4,
          "60 rows should train all 4 epochs without a hold-out, saying why (exit %d):\n%s%s", rc, out, errs);
done:
    mfm_model_free(tool);
    mfm_model_free(api);
    mfm_dataset_free(train);
    mfm_dataset_free(test);
    scratch_clean();
}

/* The logloss on `rows` of predicting the training rows' positive rate for every row, counted
   here from the labels. */
static double constant_logloss(const mfm_csr *train, const mfm_csr *rows) {
    double positives = 0, loss = 0, rate;
    uint64_t r;
    for (r = 0; r < train->n_rows; r++) positives += train->labels[r];
    rate = positives / (double)train->n_rows;
    for (r = 0; r < rows->n_rows; r++) loss -= rows->labels[r] > 0.5f ? log(rate) : log(1 - rate);
    return loss / (double)rows->n_rows;
}

/* A model far worse than the constant predictor (AdaGrad without its initial accumulator at a
   learning rate of 5, on the values as given) trains, exits 0, and is warned about with both numbers, each checked:
   the model's against mfm_evaluate, the constant's against a count from the labels. A default
   run, with the hold-out or with -p --auto-stop, is not warned about. */
void test_cli_worse_than_constant(void) {
    char model[512], cmd[4096], out[8192], errs[4096];
    mfm_dataset *train = NULL, *test = NULL;
    mfm_model *m = NULL;
    mfm_metrics met;
    mfm_csr tr, te;
    mfm_error e;
    int rc;
    REQUIRE(tune_data(), "cannot write the data files");
    scratch_path(model, sizeof model, "worse.model");
    snprintf(cmd, sizeof cmd, "\"$MFM\" train --no-normalize --adagrad-init 0 -r 5 -t 5 --validation-fraction 0 -p %s %s %s", TEST, TRAIN, model);
    rc = tool_shell(cmd, out, sizeof out, errs, sizeof errs);
    REQUIRE(rc == 0, "a model worse than the constant still trains: '%s' exited with %d: %s", cmd, rc, errs);
    CHECK(strncmp(errs, "mfm: warning: ", 14) == 0 && strstr(errs, "constant predictor") && strstr(errs, "--adagrad-init 1") && strstr(errs, "-r"),
          "no warning naming the constant predictor, -r and --adagrad-init 1 on stderr:\n%s", errs);
    train = tool_read_data(TRAIN, MFM_TASK_BINARY);
    test = tool_read_data(TEST, MFM_TASK_BINARY);
    m = load_model(model);
    if (!train || !test || !m) goto done;
    tr = mfm_dataset_csr(train);
    te = mfm_dataset_csr(test);
    if (CHECK(mfm_evaluate(m, &te, &met, &e) == MFM_OK, "%s", e.message)) {
        CHECK(met.logloss > constant_logloss(&tr, &te) + 1, "the setting should be far worse than the constant: %g against %g", met.logloss,
              constant_logloss(&tr, &te));
        CHECK_NEAR(number_after(errs, "validation logloss "), met.logloss, 0, 2e-6, "the warning's model logloss: %s", errs);
    }
    CHECK_NEAR(number_after(errs, "constant predictor's "), constant_logloss(&tr, &te), 0, 2e-6, "the warning's constant logloss: %s", errs);

    snprintf(cmd, sizeof cmd, "\"$MFM\" train --quiet %s %s && \"$MFM\" train --quiet -p %s --auto-stop %s %s", TRAIN, model, TEST, TRAIN, model);
    rc = tool_shell(cmd, out, sizeof out, errs, sizeof errs);
    CHECK(rc == 0 && errs[0] == '\0', "default runs should train without a warning (exit %d):\n%s", rc, errs);
done:
    mfm_model_free(m);
    mfm_dataset_free(train);
    mfm_dataset_free(test);
    scratch_clean();
}

/* mfm tune -p TEST TRAIN MODEL: 9 table lines (lr, l2, best epoch, logloss); the best line
   names the smallest printed logloss; MODEL is that run's model (its test logloss, through
   mfm_evaluate, is the printed one); the printed mfm train line trains the same bytes again.
   Without -p, the default 10% hold-out. */
void test_cli_tune(void) {
    char model[512], cmd[4096], out[8192], errs[4096], best_lr[64] = "", best_l2[64] = "";
    const char *line, *again;
    double min_value = HUGE_VAL, printed_best = NAN, best_row_lr = NAN, best_row_l2 = NAN;
    unsigned char *first = NULL, *second = NULL;
    size_t n_first = 0, n_second = 0;
    mfm_dataset *test = NULL;
    mfm_model *m = NULL;
    mfm_metrics met;
    mfm_csr te;
    mfm_error e;
    int rc, rows = 0;
    REQUIRE(tune_data(), "cannot write the data files");
    scratch_path(model, sizeof model, "tuned.model");
    snprintf(cmd, sizeof cmd, "\"$MFM\" tune -s 1 -p %s %s %s", TEST, TRAIN, model);
    rc = tool_shell(cmd, out, sizeof out, errs, sizeof errs);
    REQUIRE(rc == 0, "'%s' exited with %d: %s", cmd, rc, errs);
    for (line = out; line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        double lr, l2, value;
        int epoch;
        if (sscanf(line, "%lf %lf %d %lf", &lr, &l2, &epoch, &value) == 4) {
            rows++;
            CHECK(epoch >= 1 && epoch <= 10 && value > 0 && value < 1, "a table line out of range: %.60s", line);
            if (value < min_value) min_value = value, best_row_lr = lr, best_row_l2 = l2;
        }
        if (strncmp(line, "best: -r ", 9) == 0) {
            CHECK(sscanf(line, "best: -r %63s -l %63[^,], validation logloss %lf", best_lr, best_l2, &printed_best) == 3, "the best line: %.80s", line);
        }
    }
    CHECK(rows == 9, "tune printed %d table lines, not 9:\n%s", rows, out);
    CHECK(printed_best == min_value && strtod(best_lr, NULL) == best_row_lr && strtod(best_l2, NULL) == best_row_l2,
          "the best line (-r %s -l %s, %g) is not the table's smallest logloss (-r %g -l %g, %g):\n%s", best_lr, best_l2, printed_best, best_row_lr, best_row_l2,
          min_value, out);
    test = tool_read_data(TEST, MFM_TASK_BINARY);
    m = load_model(model);
    if (test && m) {
        te = mfm_dataset_csr(test);
        if (CHECK(mfm_evaluate(m, &te, &met, &e) == MFM_OK, "%s", e.message))
            CHECK_NEAR(met.logloss, printed_best, 0, 6e-7, "the saved model's test logloss against the printed best");
        CHECK(mfm_model_params(m)->learning_rate == strtod(best_lr, NULL), "the saved model's learning rate %g is not the best -r %s",
              mfm_model_params(m)->learning_rate, best_lr);
    }
    again = strstr(out, "to train it again: mfm train ");
    if (CHECK(again != NULL, "no train line:\n%s", out)) {
        char train_cmd[2048];
        size_t len = strcspn(again, "\n") - strlen("to train it again: mfm ");
        snprintf(train_cmd, sizeof train_cmd, "\"$MFM\" %.*s", (int)len, again + strlen("to train it again: mfm "));
        first = read_whole_file(model, &n_first);
        rc = tool_shell(train_cmd, out, sizeof out, errs, sizeof errs);
        second = read_whole_file(model, &n_second);
        CHECK(rc == 0 && first && second && n_first == n_second && memcmp(first, second, n_first) == 0,
              "'%s' (exit %d) should train the saved model again byte for byte: %s", train_cmd, rc, errs);
    }

    snprintf(cmd, sizeof cmd, "\"$MFM\" tune --lr-grid 0.05,0.1 --l2-grid 1e-4 %s", TRAIN);
    rc = tool_shell(cmd, out, sizeof out, errs, sizeof errs);
    CHECK(rc == 0 && strstr(out, "seeded 10% of") && strstr(out, "\n      0.05       1e-4 ") && strstr(out, "\n       0.1       1e-4 ") &&
              strstr(out, "--validation-fraction 0.1"),
          "tune without -p should validate on the default hold-out, with the grids given (exit %d):\n%s%s", rc, out, errs);
    free(first);
    free(second);
    mfm_model_free(m);
    mfm_dataset_free(test);
    scratch_clean();
}

/* Bad grids, options tune sets itself and no validation rows: exit 2 and one sentence naming
   the option and the text; MODEL is not written. */
void test_cli_tune_errors(void) {
    static const struct {
        const char *args, *expect;
    } cases[] = {
        {"--lr-grid 0.1,abc", "'abc' in '0.1,abc'"}, {"--lr-grid 0", "--lr-grid"},     {"--l2-grid 1e-4,-1", "'-1'"},
        {"--l2-grid 1e-4,,0", "--l2-grid"},          {"-r 0.1", "tune takes no -r"}, {"--validation-fraction 0", "validation rows"},
    };
    char model[512], cmd[4096], out[4096], errs[4096];
    size_t i;
    int rc;
    FILE *f;
    REQUIRE(tune_data(), "cannot write the data files");
    scratch_path(model, sizeof model, "refused.model");
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(cmd, sizeof cmd, "\"$MFM\" tune %s %s %s", cases[i].args, TRAIN, model);
        rc = tool_shell(cmd, out, sizeof out, errs, sizeof errs);
        CHECK(rc == 2 && strncmp(errs, "mfm: ", 5) == 0 && strstr(errs, cases[i].expect) && strchr(errs, '\n') == errs + strlen(errs) - 1,
              "'tune %s' should exit 2 saying '%s' in one line (exit %d): %s", cases[i].args, cases[i].expect, rc, errs);
        f = fopen(model, "rb");
        CHECK(f == NULL, "a refused 'tune %s' wrote MODEL", cases[i].args);
        if (f) fclose(f);
    }
    scratch_clean();
}
