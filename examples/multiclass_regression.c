/* multiclass_regression.c - beyond clicks: several classes (softmax) and real-valued targets.

   compile (from examples/):  cc -std=c99 -O2 -I.. multiclass_regression.c -o multiclass_regression -lm
   run:                       ./multiclass_regression

   Multiclass: labels are class ids 0, 1, 2, ... (stored as floats); the model keeps one
   parameter set per class and a softmax turns the C scores into probabilities. Regression:
   labels are any real numbers, the loss is squared error, and predictions are the raw scores.
   Both toys plant a pairwise interaction between field 0 and field 1; field 2 is noise.
*/
#define MODERN_FM_IMPLEMENTATION /* in exactly one file of a program, before the include */
#include "modern_fm.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static uint64_t rng_state = 11;
static double uniform(void) { /* xorshift64*: enough randomness for toy data */
    rng_state ^= rng_state >> 12, rng_state ^= rng_state << 25, rng_state ^= rng_state >> 27;
    return (double)((rng_state * 2685821657736338717ull) >> 11) / 9007199254740992.0;
}
static double gaussian(void) { /* Box-Muller */
    return sqrt(-2 * log(1 - uniform())) * cos(6.283185307179586 * uniform());
}

/* Rows of three one-hot fields with PER_FIELD values each: feature id = PER_FIELD * field + value. */
enum { PER_FIELD = 6, FIELDS = 3, MAX_ROWS = 12000, N_CLASSES = 3 };

typedef struct rows {
    uint64_t row_offsets[MAX_ROWS + 1];
    uint32_t features[MAX_ROWS * FIELDS], fields[MAX_ROWS * FIELDS];
    float labels[MAX_ROWS];
    int value[MAX_ROWS][FIELDS]; /* which value of each field the row has, for the labels */
    mfm_csr view;
} rows;

static void make_rows(rows *t, uint64_t n_rows) {
    uint64_t r;
    int j;
    for (r = 0; r < n_rows; r++) {
        t->row_offsets[r] = r * FIELDS;
        for (j = 0; j < FIELDS; j++) {
            t->value[r][j] = (int)(uniform() * PER_FIELD);
            t->features[r * FIELDS + j] = (uint32_t)(PER_FIELD * j + t->value[r][j]);
            t->fields[r * FIELDS + j] = (uint32_t)j;
        }
    }
    t->row_offsets[n_rows] = n_rows * FIELDS;
    t->view = (mfm_csr){0};
    t->view.n_rows = n_rows;
    t->view.row_offsets = t->row_offsets;
    t->view.features = t->features;
    t->view.fields = t->fields;
    t->view.labels = t->labels;
}

static rows train, test; /* static: too big for some stacks */

static int fail(const char *what, const mfm_error *e) {
    fprintf(stderr, "multiclass_regression: %s: %s\n", what, e->message);
    return 0;
}

/* ---- multiclass: the class is (value of field 0 + value of field 1) mod 3, 90% of the time -- */

static void multiclass_labels(rows *t) {
    uint64_t r;
    for (r = 0; r < t->view.n_rows; r++) {
        int cls = (t->value[r][0] + t->value[r][1]) % N_CLASSES;
        if (uniform() < 0.1) cls = (int)(uniform() * N_CLASSES); /* some noise */
        t->labels[r] = (float)cls;
    }
}

static int multiclass(void) {
    mfm_params p = {0};
    mfm_model *model = NULL;
    mfm_metrics metrics = {0};
    mfm_error e;
    float probabilities[2 * N_CLASSES];
    mfm_csr first_two;
    uint64_t r, count[N_CLASSES] = {0}, most = 0;
    int c, ok;

    make_rows(&train, 12000), multiclass_labels(&train);
    make_rows(&test, 3000), multiclass_labels(&test);
    for (r = 0; r < test.view.n_rows; r++) count[(int)test.labels[r]]++;
    for (c = 0; c < N_CLASSES; c++) most = count[c] > most ? count[c] : most;

    p.task = MFM_TASK_MULTICLASS;
    p.n_classes = N_CLASSES; /* 0 would infer it: the largest label + 1 */
    p.model = MFM_MODEL_FM;
    p.k = 4;
    p.n_epochs = 10;
    p.learning_rate = 0.1;
    if (mfm_train(&p, &train.view, &model, &e) != MFM_OK) return fail("multiclass training", &e);
    if (mfm_evaluate(model, &test.view, &metrics, &e) != MFM_OK) {
        mfm_model_free(model);
        return fail("multiclass evaluation", &e);
    }
    printf("multiclass (3 classes): test accuracy %.4f  cross-entropy %.4f  (always the commonest class: accuracy %.4f)\n", metrics.accuracy,
           metrics.logloss, (double)most / (double)test.view.n_rows);

    /* Probabilities: N_CLASSES values per row (mfm_output_width says how many), summing to 1.
       A view of the first two rows: the same arrays, n_rows = 2. */
    first_two = test.view;
    first_two.n_rows = 2;
    if (mfm_output_width(model, MFM_OUTPUT_PROBABILITY) != N_CLASSES ||
        mfm_predict(model, &first_two, MFM_OUTPUT_PROBABILITY, probabilities, 2 * N_CLASSES, &e) != MFM_OK) {
        mfm_model_free(model);
        return fail("multiclass prediction", &e);
    }
    for (r = 0; r < 2; r++)
        printf("  test row %d (class %d): p = %.3f %.3f %.3f\n", (int)r, (int)test.labels[r], probabilities[r * N_CLASSES],
               probabilities[r * N_CLASSES + 1], probabilities[r * N_CLASSES + 2]);
    mfm_model_free(model);

    ok = metrics.accuracy > 0.8; /* 90% of the rows follow the rule, a third of the rest by luck */
    printf("multiclass accuracy above 0.8: %s\n", ok ? "ok" : "FAILED");
    return ok;
}

/* ---- regression: y = 3 + main effects + 1.5 t(field 0) t(field 1) + noise ----------------- */

static double main_effect[FIELDS * PER_FIELD], taste[FIELDS * PER_FIELD];

static void regression_labels(rows *t) {
    uint64_t r;
    for (r = 0; r < t->view.n_rows; r++) {
        const uint32_t *f = t->features + r * FIELDS;
        double y = 3 + main_effect[f[0]] + main_effect[f[1]] + 1.5 * taste[f[0]] * taste[f[1]] + 0.3 * gaussian();
        t->labels[r] = (float)y;
    }
}

static int regression(void) {
    mfm_params p = {0};
    mfm_model *model = NULL;
    mfm_metrics metrics = {0};
    mfm_error e;
    double mean = 0, mean_rmse = 0;
    uint64_t r;
    int i, ok;

    for (i = 0; i < FIELDS * PER_FIELD; i++) main_effect[i] = 0.5 * gaussian(), taste[i] = gaussian();
    make_rows(&train, 12000), regression_labels(&train);
    make_rows(&test, 3000), regression_labels(&test);
    /* the simplest predictor: the training mean, whatever the row */
    for (r = 0; r < train.view.n_rows; r++) mean += train.labels[r];
    mean /= (double)train.view.n_rows;
    for (r = 0; r < test.view.n_rows; r++) mean_rmse += (test.labels[r] - mean) * (test.labels[r] - mean);
    mean_rmse = sqrt(mean_rmse / (double)test.view.n_rows);

    p.task = MFM_TASK_REGRESSION;
    p.model = MFM_MODEL_FM;
    p.k = 4;
    p.n_epochs = 10;
    if (mfm_train(&p, &train.view, &model, &e) != MFM_OK) return fail("regression training", &e);
    if (mfm_evaluate(model, &test.view, &metrics, &e) != MFM_OK) {
        mfm_model_free(model);
        return fail("regression evaluation", &e);
    }
    mfm_model_free(model);
    printf("regression: test RMSE %.4f  (predicting the mean: %.4f; the noise alone: 0.3)\n", metrics.rmse, mean_rmse);
    ok = metrics.rmse < 0.5 * mean_rmse;
    printf("regression RMSE below half the mean predictor's: %s\n", ok ? "ok" : "FAILED");
    return ok;
}

int main(void) {
    int ok = multiclass();
    ok &= regression();
    return ok ? 0 : 1;
}
