/* test_metrics.c - mfm_auc, mfm_logloss, mfm_rmse against plain re-computations, and
   mfm_evaluate against those functions on mfm_predict output (docs/SPEC.md section 8). */
#include "ref.h"
#include "runner.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* AUC by counting every (positive, negative) pair: 1 when the positive scores higher, 1/2 on
   a tie; NaN when a class is absent. */
static double pair_auc(const float *labels, const float *scores, size_t n) {
    double wins = 0, pairs = 0;
    size_t i, j;
    for (i = 0; i < n; i++)
        if (labels[i] == 1)
            for (j = 0; j < n; j++)
                if (labels[j] == 0) {
                    pairs += 1;
                    wins += scores[i] > scores[j] ? 1.0 : scores[i] == scores[j] ? 0.5 : 0.0;
                }
    return pairs ? wins / pairs : NAN;
}

static double clip(double p) { return p < 1e-15 ? 1e-15 : p > 1 - 1e-15 ? 1 - 1e-15 : p; }

static double plain_logloss(const float *labels, const float *prob, size_t n) {
    double total = 0;
    size_t i;
    for (i = 0; i < n; i++) {
        double p = clip(prob[i]);
        total -= labels[i] == 1 ? log(p) : log(1 - p);
    }
    return total / (double)n;
}

static double plain_rmse(const float *labels, const float *pred, size_t n) {
    double total = 0;
    size_t i;
    for (i = 0; i < n; i++) total += ((double)labels[i] - pred[i]) * ((double)labels[i] - pred[i]);
    return sqrt(total / (double)n);
}

/* mfm_auc equals pair counting (1e-12: both are exact ratios of counts) on scores with many
   ties (one decimal), on 3000 untied scores, and in the corner cases: perfect order 1,
   reversed 0, all tied 1/2, a single class NaN. */
void test_metric_auc(void) {
    enum { N = 3000 };
    float *labels = (float *)malloc(N * sizeof(float)), *scores = (float *)malloc(N * sizeof(float));
    uint64_t rng = 121;
    size_t i;
    for (i = 0; i < 300; i++) {
        labels[i] = (float)rng_below(&rng, 2);
        scores[i] = (float)floor(rng_uniform(&rng, 0, 10) + 2 * labels[i]) / 10.0f; /* ties, some signal */
    }
    CHECK_NEAR(mfm_auc(labels, scores, 300), pair_auc(labels, scores, 300), 0, 1e-12, "AUC with ties");
    for (i = 0; i < N; i++) {
        labels[i] = (float)(rng_below(&rng, 4) == 0);
        scores[i] = (float)rng_uniform(&rng, -3, 3) + labels[i];
    }
    CHECK_NEAR(mfm_auc(labels, scores, N), pair_auc(labels, scores, N), 0, 1e-12, "AUC of %d rows", N);
    for (i = 0; i < 10; i++) {
        labels[i] = (float)(i >= 5);
        scores[i] = (float)i;
    }
    CHECK_NEAR(mfm_auc(labels, scores, 10), 1.0, 0, 1e-12, "perfect order");
    for (i = 0; i < 10; i++) scores[i] = -(float)i;
    CHECK_NEAR(mfm_auc(labels, scores, 10), 0.0, 0, 1e-12, "reversed order");
    for (i = 0; i < 10; i++) scores[i] = 0.25f;
    CHECK_NEAR(mfm_auc(labels, scores, 10), 0.5, 0, 1e-12, "all tied");
    for (i = 0; i < 10; i++) labels[i] = 1;
    CHECK(isnan(mfm_auc(labels, scores, 10)), "AUC with no negatives is %g, expected NaN", mfm_auc(labels, scores, 10));
    free(labels);
    free(scores);
}

/* mfm_logloss is the mean binary cross-entropy with probabilities clipped to
   [1e-15, 1 - 1e-15] (so 0 and 1 give about 34.5, not inf); mfm_rmse is sqrt(mean squared
   error). Both re-computed here in double (1e-9 relative). */
void test_metric_logloss_rmse(void) {
    static const float edge_labels[4] = {1, 0, 1, 0}, edge_prob[4] = {0, 1, 1, 0};
    float labels[200], prob[200], pred[200];
    uint64_t rng = 122;
    size_t i;
    double edge;
    for (i = 0; i < 200; i++) {
        labels[i] = (float)rng_below(&rng, 2);
        prob[i] = (float)rng_uniform(&rng, 0.01, 0.99);
        pred[i] = (float)rng_uniform(&rng, -2, 2);
    }
    CHECK_NEAR(mfm_logloss(labels, prob, 200), plain_logloss(labels, prob, 200), 1e-9, 0, "logloss");
    edge = mfm_logloss(edge_labels, edge_prob, 4);
    CHECK(isfinite(edge), "logloss of probabilities 0 and 1 is %g, expected finite (clipped)", edge);
    CHECK_NEAR(edge, plain_logloss(edge_labels, edge_prob, 4), 1e-6, 0, "clipped logloss");
    CHECK_NEAR(mfm_rmse(labels, pred, 200), plain_rmse(labels, pred, 200), 1e-9, 0, "rmse");
}

/* Predictions of a briefly trained model of the given task on random rows. */
static mfm_model *trained_model(mfm_task task, test_data *td, uint64_t seed) {
    data_spec spec;
    mfm_params p;
    mfm_model *m = NULL;
    memset(&spec, 0, sizeof spec);
    spec.n_rows = 400;
    spec.feature_range = 30;
    spec.n_fields = 4;
    spec.min_nnz = 1;
    spec.max_nnz = 6;
    spec.with_values = 1;
    spec.task = task;
    spec.n_classes = 3;
    spec.seed = seed;
    data_random(td, &spec);
    memset(&p, 0, sizeof p);
    p.model = MFM_MODEL_FFM;
    p.task = task;
    p.k = 4;
    p.n_epochs = 2;
    p.n_classes = task == MFM_TASK_MULTICLASS ? 3 : 0;
    CHECK(mfm_train(&p, &td->csr, &m, NULL) == MFM_OK && m, "mfm_train failed (task %d)", (int)task);
    return m;
}

/* mfm_evaluate reports n_rows and, per task, the metrics of section 8 computed from
   mfm_predict output: binary logloss (mfm_logloss of the probabilities), AUC (mfm_auc of the
   scores, or of the probabilities: the same ranking), accuracy (of the label output); multiclass
   cross-entropy mean -log p_label and accuracy; regression RMSE of the scores; the metrics a
   task does not have are NaN. Tolerance 1e-6 relative: the library may evaluate from
   unrounded probabilities. */
void test_evaluate_matches_metrics(void) {
    int task;
    for (task = MFM_TASK_BINARY; task <= MFM_TASK_MULTICLASS; task++) {
        test_data td;
        mfm_model *m = trained_model((mfm_task)task, &td, 130 + (uint64_t)task);
        const size_t n = td.csr.n_rows;
        float *score = (float *)malloc(n * 3 * sizeof(float)), *prob = (float *)malloc(n * 3 * sizeof(float));
        float *label = (float *)malloc(n * sizeof(float));
        mfm_metrics mt;
        mfm_error e;
        mfm_status st;
        size_t i, right = 0;
        if (m && predict(m, &td.csr, MFM_OUTPUT_SCORE, score, n * 3) &&
            (task == MFM_TASK_REGRESSION || predict(m, &td.csr, MFM_OUTPUT_PROBABILITY, prob, n * 3)) &&
            predict(m, &td.csr, MFM_OUTPUT_LABEL, label, n)) {
            st = mfm_evaluate(m, &td.csr, &mt, &e);
            if (CHECK(st == MFM_OK, "task %d: mfm_evaluate failed with %d: %s", task, (int)st, st ? e.message : "")) {
                CHECK(mt.n_rows == n, "task %d: n_rows %u", task, (unsigned)mt.n_rows);
                for (i = 0; i < n; i++) right += label[i] == td.labels[i];
                if (task == MFM_TASK_BINARY) {
                    double auc_s = mfm_auc(td.labels, score, n), auc_p = mfm_auc(td.labels, prob, n);
                    CHECK_NEAR(mt.logloss, mfm_logloss(td.labels, prob, n), 1e-6, 0, "binary logloss");
                    CHECK_NEAR(mt.logloss, plain_logloss(td.labels, prob, n), 1e-6, 0, "binary logloss (plain)");
                    CHECK(fabs(mt.auc - auc_s) <= 1e-9 || fabs(mt.auc - auc_p) <= 1e-9, "binary AUC %.12g, expected %.12g (scores) or %.12g (probabilities)",
                          mt.auc, auc_s, auc_p);
                    CHECK_NEAR(mt.accuracy, (double)right / n, 0, 1e-12, "binary accuracy");
                    CHECK(isnan(mt.rmse), "binary rmse is %g, expected NaN", mt.rmse);
                } else if (task == MFM_TASK_MULTICLASS) {
                    double ce = 0;
                    for (i = 0; i < n; i++) ce -= log(clip(prob[i * 3 + (size_t)td.labels[i]]));
                    CHECK_NEAR(mt.logloss, ce / n, 1e-6, 0, "multiclass cross-entropy");
                    CHECK_NEAR(mt.accuracy, (double)right / n, 0, 1e-12, "multiclass accuracy");
                    CHECK(isnan(mt.auc) && isnan(mt.rmse), "multiclass auc %g rmse %g, expected NaN", mt.auc, mt.rmse);
                } else {
                    CHECK_NEAR(mt.rmse, mfm_rmse(td.labels, score, n), 1e-6, 0, "regression rmse");
                    CHECK_NEAR(mt.rmse, plain_rmse(td.labels, score, n), 1e-6, 0, "regression rmse (plain)");
                    CHECK(isnan(mt.logloss) && isnan(mt.auc) && isnan(mt.accuracy), "regression logloss %g auc %g accuracy %g, expected NaN", mt.logloss,
                          mt.auc, mt.accuracy);
                }
            }
        }
        free(score), free(prob), free(label);
        mfm_model_free(m);
        data_free(&td);
    }
}

/* mfm_metrics_value picks the early-stopping metric out of the metrics (half MSE = RMSE^2 / 2)
   and says which way improves: AUC up, the losses down. */
void test_metrics_value(void) {
    mfm_metrics met;
    int higher = -1;
    memset(&met, 0, sizeof met);
    met.logloss = 0.25, met.auc = 0.75, met.accuracy = 0.5, met.rmse = 3;
    CHECK(mfm_metrics_value(&met, MFM_METRIC_LOGLOSS, &higher) == 0.25 && higher == 0, "logloss: %g, higher %d", mfm_metrics_value(&met, MFM_METRIC_LOGLOSS, NULL), higher);
    CHECK(mfm_metrics_value(&met, MFM_METRIC_CROSS_ENTROPY, &higher) == 0.25 && higher == 0, "cross-entropy: higher %d", higher);
    CHECK(mfm_metrics_value(&met, MFM_METRIC_AUC, &higher) == 0.75 && higher == 1, "AUC: higher %d", higher);
    CHECK(mfm_metrics_value(&met, MFM_METRIC_RMSE, &higher) == 3 && higher == 0, "RMSE: higher %d", higher);
    CHECK(mfm_metrics_value(&met, MFM_METRIC_HALF_MSE, NULL) == 4.5, "half MSE: %g, expected 3^2 / 2", mfm_metrics_value(&met, MFM_METRIC_HALF_MSE, NULL));
}
