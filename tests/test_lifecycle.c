/* test_lifecycle.c - the training lifecycle and the LIBFFM switches:
     - early stopping: the reported metric against mfm_evaluate and a hand computation from the
       predicted scores, best_epoch, patience and min_delta against a simulation of the rule over
       the recorded metric values, restoring the best epoch (bit for bit against a plain fit of
       that many epochs), keep_last, the metrics by task, the internal split;
     - warm start and partial fit: one call against many calls, chunks against their
       concatenation, through files with the optimizer state, all bit for bit; a partial fit's
       row order against the double-precision reference of tests/ref.c;
     - the refusals of mfm_partial_fit, mfm_model_set_params and of a model loaded without state;
     - exact resume with normalize_rows and pairs_only;
     - mfm_top_interactions against hand-set tensors and hand-computed rankings, and on a planted
       interaction after training; mfm_bi_interaction against a naive double sum;
     - normalize_rows against the reference scorer on hand-normalized rows, pairs_only, the AdaGrad
       initial accumulator against a hand-computed first step, and FFM + AdaGrad + the switches
       against an independent LIBFFM-style trainer in double precision.
   Expected values come from the reference (tests/ref.c), from hand computations, or, where the
   property is an equality between two ways of training, from the library trained the other way. */
#include "../modern_fm.h"
#include "ref.h"
#include "runner.h"
#include "scratch.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { NF = 24, NFLD = 4, MAX_EPOCHS = 80 };

static const mfm_model_type MODELS[3] = {MFM_MODEL_FM, MFM_MODEL_FFM, MFM_MODEL_FWFM};
static const mfm_optimizer OPTS[5] = {MFM_OPTIMIZER_SGD, MFM_OPTIMIZER_ADAGRAD, MFM_OPTIMIZER_ADAM, MFM_OPTIMIZER_FTRL, MFM_OPTIMIZER_ROWWISE_ADAGRAD};

static const char *opt_name(mfm_optimizer o) {
    return o == MFM_OPTIMIZER_SGD ? "SGD" : o == MFM_OPTIMIZER_ADAM ? "Adam" : o == MFM_OPTIMIZER_FTRL ? "FTRL" : o == MFM_OPTIMIZER_ROWWISE_ADAGRAD ? "row-wise AdaGrad" : "AdaGrad";
}
static const char *task_name(mfm_task t) { return t == MFM_TASK_REGRESSION ? "regression" : t == MFM_TASK_MULTICLASS ? "multiclass" : "binary"; }

/* ============================== fixtures ============================== */

/* One epoch, batch 1, one thread, some L2 (and L1 for FTRL), k = 3, 3 classes for multiclass. */
static mfm_params lc_params(mfm_model_type model, mfm_task task, mfm_optimizer opt) {
    mfm_params p;
    memset(&p, 0, sizeof p);
    p.model = model;
    p.task = task;
    p.optimizer = opt;
    p.k = 3;
    p.n_classes = task == MFM_TASK_MULTICLASS ? 3 : 0;
    p.n_epochs = 1;
    p.batch_size = 1;
    p.n_threads = 1;
    p.learning_rate = opt == MFM_OPTIMIZER_SGD ? 0.1 : 0.05;
    p.l2_linear = 1e-3;
    p.l2_factors = 2e-3;
    if (opt == MFM_OPTIMIZER_FTRL) p.l1_linear = p.l1_factors = 1e-3;
    p.init_scale = 0.1;
    p.seed = 2024;
    return p;
}

/* Random rows over NF features and NFLD fields, with values and row weights. */
static void lc_data(test_data *td, mfm_task task, uint64_t n_rows, uint64_t seed) {
    data_spec s;
    memset(&s, 0, sizeof s);
    s.n_rows = n_rows;
    s.feature_range = NF;
    s.n_fields = NFLD;
    s.min_nnz = 1;
    s.max_nnz = 5;
    s.with_values = 1;
    s.with_weights = 1;
    s.task = task;
    s.n_classes = 3;
    s.seed = seed;
    data_random(td, &s);
    td->csr.n_features = NF;
    td->csr.n_fields = NFLD;
}

static mfm_model *lc_model(const mfm_params *p) { return make_model(p, NF, NFLD, 3); }

static int fit_ok(mfm_model *m, const mfm_csr *d, const char *what) {
    mfm_error e;
    mfm_status st = mfm_fit(m, d, &e);
    return CHECK(st == MFM_OK, "%s: mfm_fit failed with %d: %s", what, (int)st, st ? e.message : "");
}

static int partial_ok(mfm_model *m, const mfm_csr *d, const char *what) {
    mfm_error e;
    mfm_status st = mfm_partial_fit(m, d, &e);
    return CHECK(st == MFM_OK, "%s: mfm_partial_fit failed with %d: %s", what, (int)st, st ? e.message : "");
}

static uint64_t epochs_of(const mfm_model *m) {
    mfm_model_info info;
    mfm_model_get_info(m, &info);
    return info.epochs_trained;
}

/* 1 when every tensor and slot of a and b (mfm_model_get_tensor) and, given d, their scores on d are
   bit-identical. Records nothing. */
static int models_equal(const mfm_model *a, const mfm_model *b, const mfm_csr *d) {
    snapshot sa, sb;
    int same;
    snapshot_take(&sa, a);
    snapshot_take(&sb, b);
    same = snapshot_equal(&sa, &sb);
    snapshot_free(&sa);
    snapshot_free(&sb);
    if (same && d) {
        size_t n = (size_t)d->n_rows * mfm_output_width(a, MFM_OUTPUT_SCORE);
        float *x = (float *)calloc(n + 1, sizeof(float)), *y = (float *)calloc(n + 1, sizeof(float));
        same = x && y && predict(a, d, MFM_OUTPUT_SCORE, x, n) && predict(b, d, MFM_OUTPUT_SCORE, y, n) && memcmp(x, y, n * sizeof(float)) == 0;
        free(x);
        free(y);
    }
    return same;
}

/* Rows [lo, hi) of d as a CSR of their own (offsets rebased to 0, arrays borrowed from d). */
typedef struct slice {
    uint64_t *offsets;
    mfm_csr csr;
} slice;

static void slice_make(slice *s, const mfm_csr *d, uint64_t lo, uint64_t hi) {
    const uint64_t base = d->row_offsets[lo];
    uint64_t i;
    s->offsets = (uint64_t *)malloc((size_t)(hi - lo + 1) * sizeof(uint64_t));
    if (!s->offsets) abort();
    for (i = 0; i <= hi - lo; i++) s->offsets[i] = d->row_offsets[lo + i] - base;
    s->csr = *d;
    s->csr.n_rows = hi - lo;
    s->csr.row_offsets = s->offsets;
    s->csr.features = d->features + base;
    if (d->fields) s->csr.fields = d->fields + base;
    if (d->values) s->csr.values = d->values + base;
    if (d->labels) s->csr.labels = d->labels + lo;
    if (d->weights) s->csr.weights = d->weights + lo;
}

static void slice_free(slice *s) {
    free(s->offsets);
    s->offsets = NULL;
}

/* A copy of d (own arrays: offsets, features, fields, values, labels, weights) whose rows are
   rows[0..n) of d; values become explicit (ones where d has none). */
static void data_pick(test_data *out, const mfm_csr *d, const uint64_t *rows, uint64_t n) {
    uint64_t i, nnz = 0, at = 0;
    memset(out, 0, sizeof *out);
    for (i = 0; i < n; i++) nnz += d->row_offsets[rows[i] + 1] - d->row_offsets[rows[i]];
    out->offsets = (uint64_t *)calloc((size_t)n + 1, sizeof(uint64_t));
    out->features = (uint32_t *)calloc((size_t)nnz + 1, sizeof(uint32_t));
    out->fields = (uint32_t *)calloc((size_t)nnz + 1, sizeof(uint32_t));
    out->values = (float *)calloc((size_t)nnz + 1, sizeof(float));
    out->labels = (float *)calloc((size_t)n + 1, sizeof(float));
    if (d->weights) out->weights = (float *)calloc((size_t)n + 1, sizeof(float));
    if (!out->offsets || !out->features || !out->fields || !out->values || !out->labels || (d->weights && !out->weights)) abort();
    for (i = 0; i < n; i++) {
        uint64_t j;
        for (j = d->row_offsets[rows[i]]; j < d->row_offsets[rows[i] + 1]; j++, at++) {
            out->features[at] = d->features[j];
            out->fields[at] = d->fields ? d->fields[j] : 0;
            out->values[at] = d->values ? d->values[j] : 1.0f;
        }
        out->offsets[i + 1] = at;
        out->labels[i] = d->labels ? d->labels[rows[i]] : 0;
        if (out->weights) out->weights[i] = d->weights[rows[i]];
    }
    out->csr = *d;
    out->csr.n_rows = n;
    out->csr.row_offsets = out->offsets;
    out->csr.features = out->features;
    out->csr.fields = d->fields ? out->fields : NULL;
    out->csr.values = out->values;
    out->csr.labels = out->labels;
    out->csr.weights = out->weights;
}

/* Rows of 4 distinct features from [0, NF), feature f under field f % NFLD, every value 1. The
   label is 1 when 1.5 #(features < 6) - 1.5 #(features in 6..11) + 3 [20 and 21 both present]
   + noise in [-2, 2] > 0: a signal to learn and noise to overfit with few rows. */
static void planted_data(test_data *td, uint64_t n_rows, uint64_t seed) {
    uint64_t rng = seed * 0x9E3779B97F4A7C15ull + 5, r;
    memset(td, 0, sizeof *td);
    td->offsets = (uint64_t *)calloc((size_t)n_rows + 1, sizeof(uint64_t));
    td->features = (uint32_t *)calloc((size_t)n_rows * 4, sizeof(uint32_t));
    td->fields = (uint32_t *)calloc((size_t)n_rows * 4, sizeof(uint32_t));
    td->labels = (float *)calloc((size_t)n_rows, sizeof(float));
    if (!td->offsets || !td->features || !td->fields || !td->labels) abort();
    for (r = 0; r < n_rows; r++) {
        uint32_t *f = td->features + r * 4;
        double t = rng_uniform(&rng, -2, 2);
        int a, b, has20 = 0, has21 = 0;
        for (a = 0; a < 4; a++) {
            do {
                f[a] = rng_below(&rng, NF);
                for (b = 0; b < a && f[b] != f[a]; b++) {}
            } while (b < a);
            td->fields[r * 4 + a] = f[a] % NFLD;
            if (f[a] < 6) t += 1.5;
            else if (f[a] < 12) t -= 1.5;
            has20 |= f[a] == 20;
            has21 |= f[a] == 21;
        }
        if (has20 && has21) t += 3;
        td->labels[r] = t > 0 ? 1.0f : 0.0f;
        td->offsets[r + 1] = (r + 1) * 4;
    }
    td->csr.n_rows = n_rows;
    td->csr.row_offsets = td->offsets;
    td->csr.features = td->features;
    td->csr.fields = td->fields;
    td->csr.labels = td->labels;
    td->csr.n_features = NF;
    td->csr.n_fields = NFLD;
}

/* ============================== metrics by hand ============================== */

static double metric_of(const mfm_metrics *met, mfm_metric metric) {
    switch (metric) {
    case MFM_METRIC_AUC: return met->auc;
    case MFM_METRIC_RMSE: return met->rmse;
    case MFM_METRIC_HALF_MSE: return 0.5 * met->rmse * met->rmse;
    default: return met->logloss;
    }
}

static double clip(double p) { return p < 1e-15 ? 1e-15 : p > 1 - 1e-15 ? 1 - 1e-15 : p; }

/* The metric of the model on d in double from its predicted scores: logloss and cross-entropy
   from the sigmoid / softmax of the scores (probabilities clipped to [1e-15, 1 - 1e-15]), AUC
   by counting ordered (positive, negative) pairs (ties count 1/2), half MSE and RMSE. */
static double hand_metric(const mfm_model *m, const mfm_csr *d, mfm_metric metric) {
    const size_t C = mfm_output_width(m, MFM_OUTPUT_SCORE), n = (size_t)d->n_rows;
    float *s = (float *)calloc(n * C + 1, sizeof(float));
    double total = 0, pairs = 0, pos = 0, neg = 0, out = NAN;
    size_t r, q;
    if (!s || !predict(m, d, MFM_OUTPUT_SCORE, s, n * C)) {
        free(s);
        return NAN;
    }
    for (r = 0; r < n; r++) {
        const double y = d->labels[r];
        switch (metric) {
        case MFM_METRIC_LOGLOSS: {
            double p = clip(ref_sigmoid(s[r]));
            total -= y > 0.5 ? log(p) : log(1 - p);
            break;
        }
        case MFM_METRIC_CROSS_ENTROPY: {
            double sc[16], p[16];
            size_t c;
            for (c = 0; c < C; c++) sc[c] = s[r * C + c];
            ref_softmax(sc, (uint32_t)C, p);
            total -= log(clip(p[(size_t)y]));
            break;
        }
        case MFM_METRIC_HALF_MSE:
        case MFM_METRIC_RMSE:
            total += (s[r] - y) * (s[r] - y);
            break;
        case MFM_METRIC_AUC:
            if (y > 0.5) {
                pos++;
                for (q = 0; q < n; q++)
                    if (!(d->labels[q] > 0.5)) pairs += s[r] > s[q] ? 1.0 : s[r] == s[q] ? 0.5 : 0.0;
            } else {
                neg++;
            }
            break;
        default: break;
        }
    }
    switch (metric) {
    case MFM_METRIC_AUC: out = pos > 0 && neg > 0 ? pairs / (pos * neg) : NAN; break;
    case MFM_METRIC_HALF_MSE: out = 0.5 * total / (double)n; break;
    case MFM_METRIC_RMSE: out = sqrt(total / (double)n); break;
    default: out = total / (double)n; break;
    }
    free(s);
    return out;
}

/* ============================== the epoch recorder ============================== */

typedef struct recorder {
    const mfm_model *model;    /* set once the model exists */
    const mfm_csr *validation; /* evaluated right there in the callback (NULL: not) */
    mfm_metric metric;
    int stop_at;               /* ask to stop after this many callbacks (0: never) */
    int n, bad_epoch_number;
    int n_epochs;
    double value[MAX_EPOCHS], evaluated[MAX_EPOCHS], hand[MAX_EPOCHS];
    int best[MAX_EPOCHS];
    uint64_t n_rows[MAX_EPOCHS];
} recorder;

static int record_epoch(void *user, const mfm_epoch_report *rep) {
    recorder *rec = (recorder *)user;
    const int i = rec->n;
    if (i >= MAX_EPOCHS) return 1;
    if (rep->epoch != i + 1) rec->bad_epoch_number = 1;
    rec->n_epochs = rep->n_epochs;
    rec->value[i] = rep->validation;
    rec->best[i] = rep->best_epoch;
    rec->n_rows[i] = rep->n_rows;
    rec->evaluated[i] = rec->hand[i] = NAN;
    if (rec->model && rec->validation) {
        mfm_metrics met;
        if (mfm_evaluate(rec->model, rec->validation, &met, NULL) == MFM_OK) rec->evaluated[i] = metric_of(&met, rec->metric);
        rec->hand[i] = hand_metric(rec->model, rec->validation, rec->metric);
    }
    rec->n++;
    return rec->stop_at && rec->n == rec->stop_at;
}

static void recorder_init(recorder *rec, const mfm_csr *validation, mfm_metric metric) {
    memset(rec, 0, sizeof *rec);
    rec->validation = validation;
    rec->metric = metric;
}

/* What the stopping rule gives on recorded values v[0..n): an epoch improves iff it beats the
   best so far by more than delta (lower is better unless higher), stop once `patience` epochs
   in a row did not. best_at[e] = the best epoch after epoch e + 1; returns the epochs run. */
static int simulate_stopping(const double *v, int n, int patience, double delta, int higher, int *best_at) {
    double best = 0;
    int e, best_epoch = 0, stale = 0, taken = 0;
    for (e = 0; e < n; e++) {
        int better = !taken || (higher ? v[e] > best + delta : v[e] < best - delta);
        if (better && v[e] == v[e]) {
            best = v[e];
            best_epoch = e + 1;
            stale = 0;
            taken = 1;
        } else {
            stale++;
        }
        best_at[e] = best_epoch;
        if (stale >= patience) return e + 1;
    }
    return n;
}

/* A fresh model of p trained by plain mfm_fit for `epochs` epochs (no early stopping). */
static mfm_model *plain_fit(const mfm_params *params, const mfm_csr *d, int epochs, const char *what) {
    mfm_params p = *params;
    mfm_model *m;
    p.n_epochs = epochs;
    p.validation_fraction = 0;
    p.on_epoch = NULL;
    p.user = NULL;
    m = lc_model(&p);
    if (m && !fit_ok(m, d, what)) {
        mfm_model_free(m);
        m = NULL;
    }
    return m;
}

/* ============================== 1. early stopping ============================== */

/* Overfitting setup: 40 planted training rows, 300 planted validation rows with row weights
   (which the metric must ignore), a large learning rate. */
static mfm_params overfit_params(mfm_model_type model, mfm_optimizer opt) {
    mfm_params p = lc_params(model, MFM_TASK_BINARY, opt);
    p.k = 4;
    p.n_epochs = 60;
    p.learning_rate = opt == MFM_OPTIMIZER_SGD ? 0.5 : opt == MFM_OPTIMIZER_ADAM ? 0.02 : 0.2;
    p.l2_linear = p.l2_factors = 0;
    p.l1_linear = p.l1_factors = 0;
    p.patience = 3;
    return p;
}

static void overfit_data(test_data *train, test_data *valid) {
    uint64_t r;
    planted_data(train, 40, 11);
    planted_data(valid, 300, 12);
    valid->weights = (float *)calloc(300, sizeof(float));
    if (!valid->weights) abort();
    for (r = 0; r < 300; r++) valid->weights[r] = r % 3 == 0 ? 5.0f : 0.5f;
    valid->csr.weights = valid->weights;
}

/* mfm_fit_validated on data where the validation loss falls, then rises: it stops before
   n_epochs; each reported value equals mfm_evaluate's logloss taken in the callback (and the
   hand logloss from the scores); best_epoch is the running argmin; training stops `patience`
   epochs after the best; the model then equals, bit for bit, a plain fit of best_epoch epochs
   from the same seed, with epochs_trained = best_epoch. FM AdaGrad, FFM Adam, FwFM SGD. */
void test_lifecycle_early_stop_restores_best(void) {
    static const mfm_model_type models[3] = {MFM_MODEL_FM, MFM_MODEL_FFM, MFM_MODEL_FWFM};
    static const mfm_optimizer opts[3] = {MFM_OPTIMIZER_ADAGRAD, MFM_OPTIMIZER_ADAM, MFM_OPTIMIZER_SGD};
    test_data train, valid;
    int i;
    overfit_data(&train, &valid);
    for (i = 0; i < 3; i++) {
        mfm_params p = overfit_params(models[i], opts[i]);
        recorder rec;
        mfm_model *m, *ref;
        mfm_error e;
        mfm_status st;
        char what[64];
        int e_, argmin = 0;
        snprintf(what, sizeof what, "%s %s", model_name(models[i]), opt_name(opts[i]));
        recorder_init(&rec, &valid.csr, MFM_METRIC_LOGLOSS);
        p.on_epoch = record_epoch;
        p.user = &rec;
        m = lc_model(&p);
        if (!m) continue;
        rec.model = m;
        st = mfm_fit_validated(m, &train.csr, &valid.csr, &e);
        if (!CHECK(st == MFM_OK, "%s: mfm_fit_validated failed with %d: %s", what, (int)st, st ? e.message : "")) {
            mfm_model_free(m);
            continue;
        }
        CHECK(!rec.bad_epoch_number && rec.n_epochs == 60, "%s: epoch numbers or n_epochs (%d) wrong in the reports", what, rec.n_epochs);
        CHECK(rec.n < 60, "%s: early stopping never stopped (%d epochs)", what, rec.n);
        for (e_ = 0; e_ < rec.n; e_++) {
            if (e_ == 0 || rec.value[e_] < rec.value[argmin]) argmin = e_;
            CHECK(rec.value[e_] == rec.evaluated[e_], "%s epoch %d: reported validation %.17g, mfm_evaluate's logloss %.17g", what, e_ + 1, rec.value[e_],
                  rec.evaluated[e_]);
            CHECK_NEAR(rec.value[e_], rec.hand[e_], 1e-9, 1e-12, "%s epoch %d: validation logloss against the hand logloss", what, e_ + 1);
            CHECK(rec.best[e_] == argmin + 1, "%s epoch %d: best_epoch %d, the running argmin is %d", what, e_ + 1, rec.best[e_], argmin + 1);
            CHECK(rec.n_rows[e_] == 40, "%s epoch %d: %llu rows, expected 40", what, e_ + 1, (unsigned long long)rec.n_rows[e_]);
        }
        CHECK(argmin + 1 > 1, "%s: the best epoch is the first (the test would prove little): values %.6g %.6g", what, rec.value[0], rec.value[1]);
        CHECK(rec.n == argmin + 1 + p.patience, "%s: %d epochs ran, the best was %d, patience %d", what, rec.n, argmin + 1, p.patience);
        CHECK(epochs_of(m) == (uint64_t)(argmin + 1), "%s: epochs_trained %llu after restoring epoch %d", what, (unsigned long long)epochs_of(m), argmin + 1);
        ref = plain_fit(&p, &train.csr, argmin + 1, what);
        if (ref) CHECK(models_equal(m, ref, &valid.csr), "%s: the restored model differs from a plain fit of %d epochs", what, argmin + 1);
        mfm_model_free(ref);
        mfm_model_free(m);
    }
    data_free(&train);
    data_free(&valid);
}

/* keep_last = 1: the model is the last epoch's (a plain fit of the epochs that ran) and
   epochs_trained counts them. A callback that asks to stop gives MFM_ERR_CANCELLED and keeps
   the finished epochs (no restore). */
void test_lifecycle_early_stop_keep_last(void) {
    test_data train, valid;
    mfm_params p = overfit_params(MFM_MODEL_FM, MFM_OPTIMIZER_ADAGRAD);
    recorder rec;
    mfm_model *m, *ref;
    mfm_error e;
    mfm_status st;
    overfit_data(&train, &valid);
    recorder_init(&rec, NULL, MFM_METRIC_LOGLOSS);
    p.on_epoch = record_epoch;
    p.user = &rec;
    p.keep_last = 1;
    m = lc_model(&p);
    if (m) {
        st = mfm_fit_validated(m, &train.csr, &valid.csr, &e);
        if (CHECK(st == MFM_OK, "keep_last: fit failed: %s", st ? e.message : "")) {
            int best = rec.best[rec.n - 1];
            CHECK(rec.n < 60 && best < rec.n, "keep_last: %d epochs ran, best %d: the test would prove nothing", rec.n, best);
            CHECK(epochs_of(m) == (uint64_t)rec.n, "keep_last: epochs_trained %llu, %d epochs ran", (unsigned long long)epochs_of(m), rec.n);
            ref = plain_fit(&p, &train.csr, rec.n, "keep_last");
            if (ref) CHECK(models_equal(m, ref, &valid.csr), "keep_last: the model differs from a plain fit of the %d epochs that ran", rec.n);
            mfm_model_free(ref);
        }
        mfm_model_free(m);
    }
    /* cancelled in the middle, after the best epoch: the finished epochs stay */
    p.keep_last = 0;
    recorder_init(&rec, NULL, MFM_METRIC_LOGLOSS);
    {
        int best_epoch;
        m = lc_model(&p);
        if (m && CHECK(mfm_fit_validated(m, &train.csr, &valid.csr, &e) == MFM_OK, "cancel: reference run failed: %s", e.message)) {
            best_epoch = rec.best[rec.n - 1];
            mfm_model_free(m);
            recorder_init(&rec, NULL, MFM_METRIC_LOGLOSS);
            rec.stop_at = best_epoch + 1;
            m = lc_model(&p);
            if (m) {
                st = mfm_fit_validated(m, &train.csr, &valid.csr, &e);
                CHECK(st == MFM_ERR_CANCELLED, "cancel: status %d, expected MFM_ERR_CANCELLED", (int)st);
                CHECK(rec.n == best_epoch + 1, "cancel: %d callbacks, expected %d", rec.n, best_epoch + 1);
                CHECK(epochs_of(m) == (uint64_t)(best_epoch + 1), "cancel: epochs_trained %llu, expected %d", (unsigned long long)epochs_of(m), best_epoch + 1);
                ref = plain_fit(&p, &train.csr, best_epoch + 1, "cancel");
                if (ref) CHECK(models_equal(m, ref, &valid.csr), "cancel: the model differs from a plain fit of the %d finished epochs", best_epoch + 1);
                mfm_model_free(ref);
            }
        }
        mfm_model_free(m);
    }
    data_free(&train);
    data_free(&valid);
}

/* Patience and min_delta against the rule: one run without stopping (FFM, Adam, patience 1000,
   keep_last) records the validation values of 40 epochs (they fall by 0.008, 0.036, rise, fall
   by 0.008, then rise); for patience 1, 2, 4 and min_delta
   0, 1e-3, 1e-2 the run stops where simulate_stopping says, reports its running best, restores
   its best epoch and reports the recorded values bit for bit. And on validation labels flipped
   against the training labels (the loss rises from the first epoch): best 1, stop after 1 + P. */
void test_lifecycle_early_stop_patience_min_delta(void) {
    static const int patiences[3] = {1, 2, 4};
    static const double deltas[3] = {0, 1e-3, 1e-2};
    test_data train, valid, flipped;
    mfm_params p = overfit_params(MFM_MODEL_FFM, MFM_OPTIMIZER_ADAM);
    recorder full, rec;
    mfm_model *m;
    mfm_error e;
    int pi, di, r;
    overfit_data(&train, &valid);
    p.n_epochs = 40;
    p.patience = 1000;
    p.keep_last = 1;
    p.on_epoch = record_epoch;
    recorder_init(&full, NULL, MFM_METRIC_LOGLOSS);
    p.user = &full;
    m = lc_model(&p);
    if (!m || !CHECK(mfm_fit_validated(m, &train.csr, &valid.csr, &e) == MFM_OK && full.n == 40, "full run failed (%d epochs): %s", full.n, e.message)) {
        mfm_model_free(m);
        data_free(&train);
        data_free(&valid);
        return;
    }
    mfm_model_free(m);
    p.keep_last = 0;
    for (pi = 0; pi < 3; pi++)
        for (di = 0; di < 3; di++) {
            int best_at[MAX_EPOCHS], expect_n, ep;
            char what[64];
            mfm_model *ref;
            snprintf(what, sizeof what, "patience %d, min_delta %g", patiences[pi], deltas[di]);
            expect_n = simulate_stopping(full.value, 40, patiences[pi], deltas[di], 0, best_at);
            p.patience = patiences[pi];
            p.min_delta = deltas[di];
            recorder_init(&rec, NULL, MFM_METRIC_LOGLOSS);
            p.user = &rec;
            m = lc_model(&p);
            if (!m) continue;
            if (CHECK(mfm_fit_validated(m, &train.csr, &valid.csr, &e) == MFM_OK, "%s: fit failed: %s", what, e.message)) {
                CHECK(rec.n == expect_n, "%s: %d epochs ran, the rule says %d", what, rec.n, expect_n);
                for (ep = 0; ep < rec.n && ep < expect_n; ep++) {
                    CHECK(memcmp(&rec.value[ep], &full.value[ep], sizeof(double)) == 0, "%s epoch %d: value %.17g, the full run had %.17g", what, ep + 1,
                          rec.value[ep], full.value[ep]);
                    CHECK(rec.best[ep] == best_at[ep], "%s epoch %d: best_epoch %d, the rule says %d", what, ep + 1, rec.best[ep], best_at[ep]);
                }
                CHECK(epochs_of(m) == (uint64_t)best_at[expect_n - 1], "%s: epochs_trained %llu, the best epoch is %d", what,
                      (unsigned long long)epochs_of(m), best_at[expect_n - 1]);
                ref = plain_fit(&p, &train.csr, best_at[expect_n - 1], what);
                if (ref) CHECK(models_equal(m, ref, &valid.csr), "%s: the model differs from a plain fit of %d epochs", what, best_at[expect_n - 1]);
                mfm_model_free(ref);
            }
            mfm_model_free(m);
        }
    { /* the simulation saw both outcomes: some min_delta changed the best epoch or the stop */
        int b0[MAX_EPOCHS], b1[MAX_EPOCHS], n0 = simulate_stopping(full.value, 40, 4, 0, 0, b0), n1 = simulate_stopping(full.value, 40, 4, 1e-2, 0, b1);
        CHECK(n0 != n1 || b0[n0 - 1] != b1[n1 - 1], "min_delta 1e-2 changes nothing on these values (the test would prove little)");
    }
    /* min_delta 1.0 on logloss: nothing after epoch 1 counts, even on validation = training rows */
    for (pi = 0; pi < 3; pi++) {
        p.patience = patiences[pi];
        p.min_delta = 1.0;
        recorder_init(&rec, NULL, MFM_METRIC_LOGLOSS);
        p.user = &rec;
        m = lc_model(&p);
        if (m && CHECK(mfm_fit_validated(m, &train.csr, &train.csr, &e) == MFM_OK, "min_delta 1: fit failed: %s", e.message)) {
            mfm_model *ref = plain_fit(&p, &train.csr, 1, "min_delta 1");
            CHECK(rec.n == 1 + patiences[pi] && rec.best[rec.n - 1] == 1, "min_delta 1, patience %d: %d epochs, best %d; expected %d and 1", patiences[pi],
                  rec.n, rec.best[rec.n - 1], 1 + patiences[pi]);
            CHECK(rec.n >= 2 && rec.value[1] < rec.value[0], "min_delta 1: the training loss did not fall (the test would prove little)");
            if (ref) CHECK(models_equal(m, ref, &train.csr), "min_delta 1: the model differs from one epoch of plain fit");
            mfm_model_free(ref);
        }
        mfm_model_free(m);
    }
    /* flipped labels: every epoch fits the training rows and hurts the validation rows */
    planted_data(&flipped, 40, 11);
    for (r = 0; r < 40; r++) flipped.labels[r] = 1.0f - flipped.labels[r];
    for (pi = 0; pi < 3; pi++) {
        p.patience = patiences[pi];
        p.min_delta = 0;
        recorder_init(&rec, NULL, MFM_METRIC_LOGLOSS);
        p.user = &rec;
        m = lc_model(&p);
        if (m && CHECK(mfm_fit_validated(m, &train.csr, &flipped.csr, &e) == MFM_OK, "flipped: fit failed: %s", e.message)) {
            int ep, rising = 1;
            for (ep = 1; ep < rec.n; ep++) rising &= rec.value[ep] >= rec.value[ep - 1];
            CHECK(rising, "flipped: the validation loss did not rise every epoch");
            CHECK(rec.n == 1 + patiences[pi] && rec.best[rec.n - 1] == 1, "flipped, patience %d: %d epochs, best %d; expected %d and 1", patiences[pi], rec.n,
                  rec.best[rec.n - 1], 1 + patiences[pi]);
            CHECK(epochs_of(m) == 1, "flipped: epochs_trained %llu, expected 1", (unsigned long long)epochs_of(m));
        }
        mfm_model_free(m);
    }
    data_free(&flipped);
    data_free(&train);
    data_free(&valid);
}

/* The metric by task: binary logloss (default) and AUC (higher is better: best is the running
   argmax), regression half MSE (default) and RMSE, multiclass cross-entropy: each reported value
   equals mfm_evaluate's logloss / auc / 0.5 rmse^2 / rmse taken in the callback, and the hand
   value from the scores. AUC of a validation set with one class is NaN and never improves: the
   run stops after `patience` epochs and keeps them. A metric that does not fit the task is
   MFM_ERR_INVALID_PARAM at create and at set_params (which then changes nothing). */
void test_lifecycle_early_stop_metrics(void) {
    static const struct {
        mfm_task task;
        mfm_metric metric, resolved;
    } cases[] = {
        {MFM_TASK_BINARY, MFM_METRIC_DEFAULT, MFM_METRIC_LOGLOSS},          {MFM_TASK_BINARY, MFM_METRIC_AUC, MFM_METRIC_AUC},
        {MFM_TASK_REGRESSION, MFM_METRIC_DEFAULT, MFM_METRIC_HALF_MSE},     {MFM_TASK_REGRESSION, MFM_METRIC_RMSE, MFM_METRIC_RMSE},
        {MFM_TASK_REGRESSION, MFM_METRIC_HALF_MSE, MFM_METRIC_HALF_MSE},    {MFM_TASK_MULTICLASS, MFM_METRIC_DEFAULT, MFM_METRIC_CROSS_ENTROPY},
        {MFM_TASK_MULTICLASS, MFM_METRIC_CROSS_ENTROPY, MFM_METRIC_CROSS_ENTROPY},
    };
    static const struct {
        mfm_task task;
        mfm_metric metric;
    } wrong[] = {{MFM_TASK_REGRESSION, MFM_METRIC_AUC},        {MFM_TASK_REGRESSION, MFM_METRIC_LOGLOSS}, {MFM_TASK_REGRESSION, MFM_METRIC_CROSS_ENTROPY},
                 {MFM_TASK_BINARY, MFM_METRIC_RMSE},           {MFM_TASK_BINARY, MFM_METRIC_HALF_MSE},    {MFM_TASK_BINARY, MFM_METRIC_CROSS_ENTROPY},
                 {MFM_TASK_MULTICLASS, MFM_METRIC_AUC},        {MFM_TASK_MULTICLASS, MFM_METRIC_LOGLOSS}, {MFM_TASK_MULTICLASS, MFM_METRIC_RMSE},
                 {MFM_TASK_BINARY, (mfm_metric)99}};
    size_t i;
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        mfm_params p = lc_params(MFM_MODEL_FFM, cases[i].task, MFM_OPTIMIZER_ADAGRAD);
        test_data train, valid;
        recorder rec;
        mfm_model *m;
        mfm_error e;
        char what[64];
        int ep, best = 0;
        const int higher = cases[i].resolved == MFM_METRIC_AUC;
        snprintf(what, sizeof what, "%s metric %d", task_name(cases[i].task), (int)cases[i].resolved);
        lc_data(&train, cases[i].task, 60, 40 + i);
        lc_data(&valid, cases[i].task, 50, 60 + i);
        p.n_epochs = 6;
        p.patience = 100;
        p.learning_rate = 0.2;
        p.metric = cases[i].metric;
        recorder_init(&rec, &valid.csr, cases[i].resolved);
        p.on_epoch = record_epoch;
        p.user = &rec;
        m = lc_model(&p);
        if (m) {
            CHECK(mfm_model_params(m)->metric == cases[i].resolved, "%s: the model's metric is %d", what, (int)mfm_model_params(m)->metric);
            rec.model = m;
            if (CHECK(mfm_fit_validated(m, &train.csr, &valid.csr, &e) == MFM_OK, "%s: fit failed: %s", what, e.message) &&
                CHECK(rec.n == 6, "%s: %d epochs, expected 6", what, rec.n)) {
                for (ep = 0; ep < rec.n; ep++) {
                    if (ep == 0 || (higher ? rec.value[ep] > rec.value[best] : rec.value[ep] < rec.value[best])) best = ep;
                    if (cases[i].resolved == MFM_METRIC_HALF_MSE)
                        CHECK_NEAR(rec.value[ep], rec.evaluated[ep], 1e-14, 0, "%s epoch %d: against 0.5 rmse^2 of mfm_evaluate", what, ep + 1);
                    else
                        CHECK(rec.value[ep] == rec.evaluated[ep], "%s epoch %d: reported %.17g, mfm_evaluate %.17g", what, ep + 1, rec.value[ep],
                              rec.evaluated[ep]);
                    CHECK_NEAR(rec.value[ep], rec.hand[ep], 1e-9, 1e-12, "%s epoch %d: against the hand metric", what, ep + 1);
                    CHECK(rec.best[ep] == best + 1, "%s epoch %d: best_epoch %d, expected %d", what, ep + 1, rec.best[ep], best + 1);
                }
                CHECK(epochs_of(m) == (uint64_t)(best + 1), "%s: epochs_trained %llu, best %d", what, (unsigned long long)epochs_of(m), best + 1);
            }
            mfm_model_free(m);
        }
        data_free(&train);
        data_free(&valid);
    }
    { /* AUC on a validation set of one class: NaN, never an improvement */
        mfm_params p = lc_params(MFM_MODEL_FM, MFM_TASK_BINARY, MFM_OPTIMIZER_ADAGRAD);
        test_data train, valid;
        recorder rec;
        mfm_model *m, *ref;
        mfm_error e;
        uint64_t r;
        lc_data(&train, MFM_TASK_BINARY, 40, 5);
        lc_data(&valid, MFM_TASK_BINARY, 20, 6);
        for (r = 0; r < 20; r++) valid.labels[r] = 1;
        p.n_epochs = 10;
        p.patience = 3;
        p.metric = MFM_METRIC_AUC;
        recorder_init(&rec, NULL, MFM_METRIC_AUC);
        p.on_epoch = record_epoch;
        p.user = &rec;
        m = lc_model(&p);
        if (m && CHECK(mfm_fit_validated(m, &train.csr, &valid.csr, &e) == MFM_OK, "AUC of one class: fit failed: %s", e.message)) {
            CHECK(rec.n == 3 && isnan(rec.value[0]) && rec.best[rec.n - 1] == 0, "AUC of one class: %d epochs, value %g, best %d; expected 3, NaN, 0", rec.n,
                  rec.value[0], rec.best[rec.n - 1]);
            CHECK(epochs_of(m) == 3, "AUC of one class: epochs_trained %llu, expected 3", (unsigned long long)epochs_of(m));
            ref = plain_fit(&p, &train.csr, 3, "AUC of one class");
            if (ref) CHECK(models_equal(m, ref, &train.csr), "AUC of one class: the model differs from a plain fit of 3 epochs");
            mfm_model_free(ref);
        }
        mfm_model_free(m);
        data_free(&train);
        data_free(&valid);
    }
    { /* patience < 0, min_delta < 0 or NaN, adagrad_init < 0 or NaN: refused at create */
        int c;
        for (c = 0; c < 5; c++) {
            static const char *names[5] = {"patience", "min_delta", "min_delta", "adagrad_init", "adagrad_init"};
            mfm_params p = lc_params(MFM_MODEL_FM, MFM_TASK_BINARY, MFM_OPTIMIZER_ADAGRAD);
            mfm_model *m = NULL;
            mfm_error e;
            mfm_status st;
            switch (c) {
            case 0: p.patience = -1; break;
            case 1: p.min_delta = -0.5; break;
            case 2: p.min_delta = NAN; break;
            case 3: p.adagrad_init = -1; break;
            default: p.adagrad_init = NAN; break;
            }
            st = mfm_model_create(&p, NF, NFLD, 1, &m, &e);
            CHECK(st == MFM_ERR_INVALID_PARAM && !m && mentions_word(e.message, names[c]), "create with a bad %s: status %d (%s)", names[c], (int)st,
                  st ? e.message : "");
            mfm_model_free(m);
        }
    }
    { /* validation data beyond the model: refused before anything changes, naming the validation data */
        mfm_params p = lc_params(MFM_MODEL_FFM, MFM_TASK_BINARY, MFM_OPTIMIZER_ADAGRAD);
        test_data train, valid;
        mfm_model *m;
        mfm_error e;
        lc_data(&train, MFM_TASK_BINARY, 20, 1);
        lc_data(&valid, MFM_TASK_BINARY, 10, 2);
        valid.features[2] = NF + 3;
        valid.csr.n_features = 0;
        m = lc_model(&p);
        if (m) {
            snapshot before, after;
            mfm_status st;
            snapshot_take(&before, m);
            st = mfm_fit_validated(m, &train.csr, &valid.csr, &e);
            snapshot_take(&after, m);
            CHECK(st == MFM_ERR_SHAPE_MISMATCH && mentions_word(e.message, "validation"), "validation feature beyond the model: status %d (%s)", (int)st,
                  st ? e.message : "");
            CHECK(snapshot_equal(&before, &after) && epochs_of(m) == 0, "the refused fit_validated changed the model");
            st = mfm_fit_validated(m, &train.csr, NULL, &e);
            CHECK(st == MFM_ERR_INVALID_ARGUMENT, "fit_validated without validation data: status %d", (int)st);
            snapshot_free(&before);
            snapshot_free(&after);
        }
        mfm_model_free(m);
        data_free(&train);
        data_free(&valid);
    }
    for (i = 0; i < sizeof wrong / sizeof wrong[0]; i++) {
        mfm_params p = lc_params(MFM_MODEL_FM, wrong[i].task, MFM_OPTIMIZER_ADAGRAD), good;
        mfm_model *m = NULL;
        mfm_error e;
        mfm_status st;
        p.metric = wrong[i].metric;
        st = mfm_model_create(&p, NF, NFLD, 3, &m, &e);
        CHECK(st == MFM_ERR_INVALID_PARAM && m == NULL && mentions_word(e.message, "metric"), "create, %s task with metric %d: status %d (%s)",
              task_name(wrong[i].task), (int)wrong[i].metric, (int)st, st ? e.message : "");
        mfm_model_free(m);
        good = lc_params(MFM_MODEL_FM, wrong[i].task, MFM_OPTIMIZER_ADAGRAD);
        m = lc_model(&good);
        if (m) {
            mfm_metric before = mfm_model_params(m)->metric;
            p.learning_rate = 0.5;
            st = mfm_model_set_params(m, &p, &e);
            CHECK(st == MFM_ERR_INVALID_PARAM && mfm_model_params(m)->metric == before && mfm_model_params(m)->learning_rate == good.learning_rate,
                  "set_params, %s task with metric %d: status %d, or the params changed", task_name(wrong[i].task), (int)wrong[i].metric, (int)st);
        }
        mfm_model_free(m);
    }
}

/* The internal split: a fraction outside (0, 1) or NaN is MFM_ERR_INVALID_PARAM (create and
   set_params); 0.9 of 2 rows (round(1.8) = 2 validation rows) leaves no training rows: refused
   naming that, the model unchanged; 0.3 of 50 rows trains on 35 rows each epoch with finite
   validation values, and the same seed gives the same run twice, bit for bit; mfm_fit_validated
   ignores the fraction (it trains on every row). */
void test_lifecycle_validation_fraction(void) {
    static const double bad[4] = {-0.1, 1.0, 1.5, NAN};
    test_data td;
    mfm_model *m;
    mfm_error e;
    mfm_status st;
    int i;
    lc_data(&td, MFM_TASK_BINARY, 50, 77);
    for (i = 0; i < 4; i++) {
        mfm_params p = lc_params(MFM_MODEL_FM, MFM_TASK_BINARY, MFM_OPTIMIZER_ADAGRAD);
        mfm_model *bad_m = NULL;
        p.validation_fraction = bad[i];
        st = mfm_model_create(&p, NF, NFLD, 1, &bad_m, &e);
        CHECK(st == MFM_ERR_INVALID_PARAM && !bad_m && mentions_word(e.message, "validation_fraction"), "create, validation_fraction %g: status %d (%s)",
              bad[i], (int)st, st ? e.message : "");
        mfm_model_free(bad_m);
        st = mfm_train(&p, &td.csr, &bad_m, &e);
        CHECK(st == MFM_ERR_INVALID_PARAM && !bad_m, "train, validation_fraction %g: status %d", bad[i], (int)st);
        mfm_model_free(bad_m);
        p.validation_fraction = 0;
        m = lc_model(&p);
        if (m) {
            p.validation_fraction = bad[i];
            st = mfm_model_set_params(m, &p, &e);
            CHECK(st == MFM_ERR_INVALID_PARAM && mfm_model_params(m)->validation_fraction == 0, "set_params, validation_fraction %g: status %d", bad[i],
                  (int)st);
        }
        mfm_model_free(m);
    }
    { /* no training rows left */
        mfm_params p = lc_params(MFM_MODEL_FM, MFM_TASK_BINARY, MFM_OPTIMIZER_ADAGRAD);
        slice two;
        slice_make(&two, &td.csr, 0, 2);
        p.validation_fraction = 0.9;
        m = lc_model(&p);
        if (m) {
            snapshot before, after;
            snapshot_take(&before, m);
            st = mfm_fit(m, &two.csr, &e);
            CHECK(st == MFM_ERR_INVALID_PARAM && strstr(e.message, "no training rows"), "0.9 of 2 rows: status %d (%s)", (int)st, st ? e.message : "");
            snapshot_take(&after, m);
            CHECK(snapshot_equal(&before, &after) && epochs_of(m) == 0, "0.9 of 2 rows: the refused fit changed the model");
            snapshot_free(&before);
            snapshot_free(&after);
            /* 0.2 of 2 rows: max(1, round(0.4)) = 1 validation row, 1 training row */
            p.validation_fraction = 0.2;
            if (CHECK(mfm_model_set_params(m, &p, &e) == MFM_OK, "set_params 0.2: %s", e.message)) {
                recorder rec;
                recorder_init(&rec, NULL, MFM_METRIC_LOGLOSS);
                p.on_epoch = record_epoch;
                p.user = &rec;
                mfm_model_set_params(m, &p, NULL);
                st = mfm_fit(m, &two.csr, &e);
                CHECK(st == MFM_OK && rec.n == 1 && rec.n_rows[0] == 1, "0.2 of 2 rows: status %d, %d epochs, %llu training rows (expected 1)", (int)st,
                      rec.n, (unsigned long long)rec.n_rows[0]);
            }
        }
        mfm_model_free(m);
        slice_free(&two);
    }
    { /* a valid split, twice */
        mfm_params p = lc_params(MFM_MODEL_FFM, MFM_TASK_BINARY, MFM_OPTIMIZER_ADAM);
        recorder r1, r2, r3;
        mfm_model *m1, *m2, *m3;
        p.validation_fraction = 0.3;
        p.n_epochs = 8;
        p.patience = 2;
        p.learning_rate = 0.3;
        p.on_epoch = record_epoch;
        recorder_init(&r1, NULL, MFM_METRIC_LOGLOSS);
        recorder_init(&r2, NULL, MFM_METRIC_LOGLOSS);
        recorder_init(&r3, NULL, MFM_METRIC_LOGLOSS);
        p.user = &r1;
        m1 = lc_model(&p);
        p.user = &r2;
        m2 = lc_model(&p);
        p.user = &r3;
        m3 = lc_model(&p);
        if (m1 && m2 && m3 && fit_ok(m1, &td.csr, "split 1") && fit_ok(m2, &td.csr, "split 2")) {
            int ep, finite = 1;
            CHECK(r1.n >= 1 && r1.n == r2.n && memcmp(r1.value, r2.value, (size_t)r1.n * sizeof(double)) == 0 && memcmp(r1.best, r2.best, (size_t)r1.n * sizeof(int)) == 0,
                  "the same split gave different runs (%d and %d epochs)", r1.n, r2.n);
            CHECK(models_equal(m1, m2, &td.csr), "the same split gave different models");
            for (ep = 0; ep < r1.n; ep++) {
                finite &= isfinite(r1.value[ep]) != 0;
                CHECK(r1.n_rows[ep] == 35, "split epoch %d: %llu training rows, expected 50 - round(0.3 * 50) = 35", ep + 1, (unsigned long long)r1.n_rows[ep]);
            }
            CHECK(finite, "the split's validation values are not all finite");
            /* mfm_fit_validated: the given rows validate, the fraction is not used */
            st = mfm_fit_validated(m3, &td.csr, &td.csr, &e);
            CHECK(st == MFM_OK && r3.n >= 1 && r3.n_rows[0] == 50, "fit_validated with a fraction: status %d, %llu training rows (expected 50)", (int)st,
                  (unsigned long long)(r3.n ? r3.n_rows[0] : 0));
        }
        mfm_model_free(m1);
        mfm_model_free(m2);
        mfm_model_free(m3);
    }
    { /* which rows validate: row r holds feature r (its own) and two of the shared features 50..59;
         the split never trains on a validation row, so exactly round(0.3 * 50) = 15 own features
         keep w = 0 and their initial v, over two fit calls; the last epoch's reported value is
         the logloss of those 15 rows */
        enum { ROWS = 50 };
        uint64_t offsets[ROWS + 1], rows[ROWS], rng = 5;
        uint32_t features[ROWS * 3];
        float labels[ROWS], w[ROWS + 10], v0[(ROWS + 10) * 3], v1[(ROWS + 10) * 3];
        mfm_params p = lc_params(MFM_MODEL_FM, MFM_TASK_BINARY, MFM_OPTIMIZER_SGD);
        recorder rec;
        mfm_csr d;
        uint64_t r, n_val = 0;
        for (r = 0; r < ROWS; r++) {
            features[r * 3] = (uint32_t)r;
            features[r * 3 + 1] = ROWS + rng_below(&rng, 5);
            features[r * 3 + 2] = ROWS + 5 + rng_below(&rng, 5);
            offsets[r] = r * 3;
            labels[r] = (float)rng_below(&rng, 2);
        }
        offsets[ROWS] = ROWS * 3;
        d = csr_of(ROWS, offsets, features, NULL, NULL, labels);
        p.validation_fraction = 0.3;
        p.n_epochs = 3;
        p.patience = 100;
        p.keep_last = 1;
        p.l2_linear = p.l2_factors = 0;
        recorder_init(&rec, NULL, MFM_METRIC_LOGLOSS);
        p.on_epoch = record_epoch;
        p.user = &rec;
        m = make_model(&p, ROWS + 10, 0, 1);
        if (m && CHECK(mfm_model_get_tensor(m, MFM_TENSOR_V, 0, 0, v0, (ROWS + 10) * 3, NULL) == MFM_OK, "read V") && fit_ok(m, &d, "own features") &&
            fit_ok(m, &d, "own features, again")) {
            test_data vrows;
            mfm_metrics met;
            mfm_model_get_tensor(m, MFM_TENSOR_W, 0, 0, w, ROWS + 10, NULL);
            mfm_model_get_tensor(m, MFM_TENSOR_V, 0, 0, v1, (ROWS + 10) * 3, NULL);
            for (r = 0; r < ROWS; r++) {
                const int untouched = w[r] == 0 && memcmp(v0 + r * 3, v1 + r * 3, 3 * sizeof(float)) == 0;
                if (untouched) rows[n_val++] = r;
                else CHECK(w[r] != 0 && memcmp(v0 + r * 3, v1 + r * 3, 3 * sizeof(float)) != 0, "row %lu: w moved but v did not, or v but not w", (unsigned long)r);
            }
            CHECK(n_val == 15 && rec.n == 6 && rec.n_rows[0] == 35, "own features: %lu rows never trained on (expected 15), %d epochs, %llu training rows",
                  (unsigned long)n_val, rec.n, (unsigned long long)rec.n_rows[0]);
            data_pick(&vrows, &d, rows, n_val);
            vrows.csr.values = NULL;
            if (CHECK(mfm_evaluate(m, &vrows.csr, &met, NULL) == MFM_OK, "evaluate the untrained rows"))
                CHECK_NEAR(rec.value[rec.n - 1], met.logloss, 1e-12, 0, "the split's validation logloss against the logloss of the rows it never trained on");
            data_free(&vrows);
            { /* mfm_validation_split names those rows, and mfm_dataset_select copies them */
                uint64_t order[ROWS], n_split = 0, i, seen = 0;
                mfm_dataset *picked = NULL;
                mfm_csr pc;
                if (CHECK(mfm_validation_split(mfm_model_params(m), ROWS, order, &n_split, NULL) == MFM_OK && n_split == n_val,
                          "mfm_validation_split: %llu validation rows, expected %lu", (unsigned long long)n_split, (unsigned long)n_val))
                    for (i = 0; i < n_split; i++)
                        if (w[order[i]] == 0) seen++;
                CHECK(seen == n_val, "mfm_validation_split: %llu of its %llu validation rows are rows training never touched", (unsigned long long)seen,
                      (unsigned long long)n_split);
                if (CHECK(mfm_dataset_select(&d, order, n_split, &picked, NULL) == MFM_OK, "mfm_dataset_select")) {
                    pc = mfm_dataset_csr(picked);
                    for (i = 0; i < n_split; i++)
                        CHECK(pc.row_offsets[i + 1] - pc.row_offsets[i] == 3 && memcmp(pc.features + pc.row_offsets[i], features + order[i] * 3, 3 * sizeof(uint32_t)) == 0 &&
                                  pc.labels[i] == labels[order[i]],
                              "selected row %llu is not row %llu", (unsigned long long)i, (unsigned long long)order[i]);
                    if (CHECK(mfm_evaluate(m, &pc, &met, NULL) == MFM_OK, "evaluate the selection"))
                        CHECK_NEAR(rec.value[rec.n - 1], met.logloss, 1e-12, 0, "the selected rows' logloss against the split's validation logloss");
                }
                mfm_dataset_free(picked);
            }
        }
        mfm_model_free(m);
    }
    data_free(&td);
}

/* mfm_validation_split and mfm_dataset_select: a fraction of 0 is every row in order; the split
   is a permutation that depends on the seed alone; the selection keeps values, fields, labels and
   weights; a row number the data lacks and a NULL argument (MFM_ERR_INVALID_ARGUMENT), and a
   fraction out of [0, 1) (MFM_ERR_INVALID_PARAM), are refused with a sentence that names them. */
void test_lifecycle_split_and_select(void) {
    test_data td;
    mfm_params p;
    uint64_t order[40], again[40], n_val = 7, r, picks[3] = {5, 0, 39}, bad[2] = {3, 40};
    unsigned char seen[40];
    mfm_dataset *ds = NULL;
    mfm_error e;
    int i;
    lc_data(&td, MFM_TASK_BINARY, 40, 78);
    memset(&p, 0, sizeof p);
    CHECK(mfm_validation_split(&p, 40, order, &n_val, &e) == MFM_OK && n_val == 0, "fraction 0: %llu validation rows", (unsigned long long)n_val);
    for (r = 0; r < 40; r++) CHECK(order[r] == r, "fraction 0: order[%llu] = %llu", (unsigned long long)r, (unsigned long long)order[r]);
    p.validation_fraction = 0.25;
    p.seed = 3;
    memset(seen, 0, sizeof seen);
    if (CHECK(mfm_validation_split(&p, 40, order, &n_val, &e) == MFM_OK && n_val == 10, "0.25 of 40: %llu validation rows", (unsigned long long)n_val))
        for (r = 0; r < 40; r++) seen[order[r] < 40 ? order[r] : 0]++;
    for (r = 0; r < 40; r++) CHECK(seen[r] == 1, "the split is not a permutation: row %llu appears %d times", (unsigned long long)r, seen[r]);
    CHECK(mfm_validation_split(&p, 40, again, &n_val, &e) == MFM_OK && memcmp(order, again, sizeof order) == 0, "the same seed gave another split");
    p.seed = 4;
    CHECK(mfm_validation_split(&p, 40, again, &n_val, &e) == MFM_OK && memcmp(order, again, sizeof order) != 0, "another seed gave the same split");
    p.validation_fraction = 1;
    CHECK(mfm_validation_split(&p, 40, order, &n_val, &e) == MFM_ERR_INVALID_PARAM && mentions_word(e.message, "validation_fraction"), "fraction 1: %s", e.message);
    CHECK(mfm_validation_split(NULL, 40, order, &n_val, &e) == MFM_ERR_INVALID_ARGUMENT && mentions_word(e.message, "params"), "NULL params: %s", e.message);
    td.csr.weights = NULL;
    {
        float weights[40];
        for (r = 0; r < 40; r++) weights[r] = 0.5f + (float)r;
        td.csr.weights = weights;
        if (CHECK(mfm_dataset_select(&td.csr, picks, 3, &ds, &e) == MFM_OK, "select: %s", e.message)) {
            const mfm_csr c = mfm_dataset_csr(ds);
            mfm_dataset_info info;
            mfm_dataset_get_info(ds, &info);
            CHECK(c.n_rows == 3 && info.n_rows == 3 && info.has_weights && info.has_fields == (td.csr.fields != NULL), "select: %llu rows, info %llu rows",
                  (unsigned long long)c.n_rows, (unsigned long long)info.n_rows);
            for (i = 0; i < 3; i++) {
                const uint64_t lo = td.csr.row_offsets[picks[i]], z = td.csr.row_offsets[picks[i] + 1] - lo, at = c.row_offsets[i];
                CHECK(c.row_offsets[i + 1] - at == z && memcmp(c.features + at, td.csr.features + lo, (size_t)z * sizeof(uint32_t)) == 0 &&
                          (!td.csr.fields || memcmp(c.fields + at, td.csr.fields + lo, (size_t)z * sizeof(uint32_t)) == 0) &&
                          (!td.csr.values || memcmp(c.values + at, td.csr.values + lo, (size_t)z * sizeof(float)) == 0) && c.labels[i] == td.csr.labels[picks[i]] &&
                          c.weights[i] == weights[picks[i]],
                      "selected row %d differs from row %llu", i, (unsigned long long)picks[i]);
            }
        }
        mfm_dataset_free(ds);
        td.csr.weights = NULL;
    }
    ds = NULL;
    CHECK(mfm_dataset_select(&td.csr, bad, 2, &ds, &e) == MFM_ERR_INVALID_ARGUMENT && !ds && strstr(e.message, "rows[1] = 40") != NULL, "row 40 of 40: %s", e.message);
    CHECK(mfm_dataset_select(&td.csr, picks, 3, NULL, &e) == MFM_ERR_INVALID_ARGUMENT && mentions_word(e.message, "out"), "NULL out: %s", e.message);
    data_free(&td);
}

/* ============================== 2. warm start and partial fit ============================== */

/* One mfm_fit of 4 epochs = 4 calls of 1 epoch (params.n_epochs = 1) = 4 calls after
   mfm_model_set_params(n_epochs = 1), bit for bit (every tensor and slot, FwFM's R included,
   and the scores): every optimizer and model, one thread, batch 1 and 5. */
void test_lifecycle_warm_start_equals_one_call(void) {
    size_t mi, oi, bi;
    for (mi = 0; mi < 3; mi++)
        for (oi = 0; oi < 5; oi++)
            for (bi = 0; bi < 2; bi++) {
                const int batch = bi ? 5 : 1;
                mfm_params p = lc_params(MODELS[mi], MFM_TASK_BINARY, OPTS[oi]);
                test_data td;
                mfm_model *one, *many, *set;
                char what[64];
                int ep;
                snprintf(what, sizeof what, "%s %s batch %d", model_name(MODELS[mi]), opt_name(OPTS[oi]), batch);
                lc_data(&td, MFM_TASK_BINARY, 40, 100 + mi * 8 + oi * 2 + bi);
                p.batch_size = batch;
                p.n_epochs = 4;
                one = lc_model(&p);
                set = lc_model(&p);
                p.n_epochs = 1;
                many = lc_model(&p);
                if (one && many && set && fit_ok(one, &td.csr, what)) {
                    mfm_error e;
                    snapshot s1, s4;
                    int ok = CHECK(mfm_model_set_params(set, &p, &e) == MFM_OK, "%s: set_params: %s", what, e.message);
                    for (ep = 0; ep < 4 && ok; ep++) ok = fit_ok(many, &td.csr, what) && fit_ok(set, &td.csr, what);
                    if (ok) {
                        CHECK(models_equal(one, many, &td.csr), "%s: 4 calls of 1 epoch differ from one call of 4", what);
                        CHECK(models_equal(one, set, &td.csr), "%s: 4 calls after set_params(n_epochs = 1) differ from one call of 4", what);
                        CHECK(epochs_of(many) == 4 && epochs_of(set) == 4, "%s: epochs_trained %llu / %llu", what, (unsigned long long)epochs_of(many),
                              (unsigned long long)epochs_of(set));
                    }
                    p.n_epochs = 3; /* and the test would notice a difference */
                    mfm_model_free(many);
                    many = plain_fit(&p, &td.csr, 3, what);
                    snapshot_take(&s1, one);
                    if (many) {
                        snapshot_take(&s4, many);
                        CHECK(!snapshot_equal(&s1, &s4), "%s: 3 and 4 epochs give the same model", what);
                        snapshot_free(&s4);
                    }
                    snapshot_free(&s1);
                }
                mfm_model_free(one);
                mfm_model_free(many);
                mfm_model_free(set);
                data_free(&td);
            }
}

/* The same with a save (with state) and a load between the epochs: 1 + save/load + 1 + ... = 4
   epochs in one call, bit for bit. */
void test_lifecycle_warm_start_through_files(void) {
    char path[256];
    size_t mi, oi, bi;
    scratch_path(path, sizeof path, "warm.mfm");
    for (mi = 0; mi < 3; mi++)
        for (oi = 0; oi < 5; oi++)
            for (bi = 0; bi < 2; bi++) {
                const int batch = bi ? 5 : 1;
                mfm_params p = lc_params(MODELS[mi], MFM_TASK_BINARY, OPTS[oi]);
                test_data td;
                mfm_model *one, *m;
                mfm_error e;
                char what[64];
                int ep, ok = 1;
                snprintf(what, sizeof what, "%s %s batch %d", model_name(MODELS[mi]), opt_name(OPTS[oi]), batch);
                lc_data(&td, MFM_TASK_BINARY, 40, 200 + mi * 8 + oi * 2 + bi);
                p.batch_size = batch;
                one = plain_fit(&p, &td.csr, 4, what);
                m = lc_model(&p); /* n_epochs 1, kept by the file */
                for (ep = 0; ep < 4 && m && ok; ep++) {
                    mfm_model *loaded = NULL;
                    ok = fit_ok(m, &td.csr, what) && CHECK(mfm_model_save(m, path, 1, &e) == MFM_OK, "%s: save: %s", what, e.message) &&
                         CHECK(mfm_model_load(path, &loaded, &e) == MFM_OK, "%s: load: %s", what, e.message);
                    mfm_model_free(m);
                    m = loaded;
                }
                if (ok && one && m) {
                    CHECK(models_equal(one, m, &td.csr), "%s: 4 x (1 epoch, save, load) differs from 4 epochs", what);
                    CHECK(epochs_of(m) == 4, "%s: epochs_trained %llu after 4 loads", what, (unsigned long long)epochs_of(m));
                }
                mfm_model_free(one);
                mfm_model_free(m);
                data_free(&td);
            }
    scratch_clean();
}

/* Partial fits over consecutive chunks = one partial fit over their concatenation, bit for bit:
   batch 1 with chunks of 7, 1, 13, 29 rows; batch 4 with chunks of 8, 4, 12, 24 rows; every
   optimizer and model (binary), and multiclass for every model. */
void test_lifecycle_partial_fit_chunks(void) {
    static const uint64_t chunks1[4] = {7, 1, 13, 29}, chunks4[4] = {8, 4, 12, 24};
    size_t i;
    for (i = 0; i < 3 * 5 + 3; i++) {
        const int multi = i >= 15;
        const mfm_model_type model = multi ? MODELS[i - 15] : MODELS[i / 5];
        const mfm_optimizer opt = multi ? OPTS[(i - 15) + 1] : OPTS[i % 5];
        const mfm_task task = multi ? MFM_TASK_MULTICLASS : MFM_TASK_BINARY;
        int bi;
        for (bi = 0; bi < 2; bi++) {
            const uint64_t *chunks = bi ? chunks4 : chunks1;
            mfm_params p = lc_params(model, task, opt);
            test_data td;
            mfm_model *whole, *parts;
            char what[80];
            uint64_t at = 0;
            int c, ok = 1;
            snprintf(what, sizeof what, "%s %s %s batch %d", model_name(model), task_name(task), opt_name(opt), bi ? 4 : 1);
            lc_data(&td, task, bi ? 48 : 50, 300 + i * 2 + (size_t)bi);
            p.batch_size = bi ? 4 : 1;
            whole = lc_model(&p);
            parts = lc_model(&p);
            if (whole && parts && partial_ok(whole, &td.csr, what)) {
                for (c = 0; c < 4 && ok; c++) {
                    slice s;
                    slice_make(&s, &td.csr, at, at + chunks[c]);
                    ok = partial_ok(parts, &s.csr, what);
                    slice_free(&s);
                    at += chunks[c];
                }
                if (ok) CHECK(at == td.csr.n_rows && models_equal(whole, parts, &td.csr), "%s: partial fits over chunks differ from one over all rows", what);
            }
            mfm_model_free(whole);
            mfm_model_free(parts);
            data_free(&td);
        }
    }
}

/* A partial fit takes the rows in their order: FM, SGD, batch 1, rows r0 then r1 (sharing
   features 2 and 4) against the double-precision reference stepping r0 then r1 (tests/ref.c:
   finite-difference gradients, one SGD step per touched coordinate); partial_fit([r0, r1]) =
   partial_fit([r0]) then partial_fit([r1]) bit for bit, and differs from [r1] then [r0]. */
void test_lifecycle_partial_fit_order(void) {
    static const uint64_t offsets[3] = {0, 3, 6};
    static const uint32_t features[6] = {0, 2, 4, 2, 3, 4};
    static const float values[6] = {1.0f, -0.5f, 2.0f, 1.5f, 1.0f, -1.0f}, labels[2] = {1, 0};
    static const uint64_t ord0[1] = {0}, ord1[1] = {1};
    mfm_params p = sgd_step_params(MFM_MODEL_FM, MFM_TASK_BINARY, 0.3);
    mfm_csr d;
    slice s0, s1;
    mfm_model *both, *one_by_one, *reversed;
    ref_model expected, before;
    ref_opt o;
    d = csr_of(2, offsets, features, NULL, values, labels);
    p.k = 3;
    p.l2_linear = 0.01;
    p.l2_factors = 0.02;
    both = make_model(&p, 6, 0, 1);
    one_by_one = make_model(&p, 6, 0, 1);
    reversed = make_model(&p, 6, 0, 1);
    if (!both || !one_by_one || !reversed) {
        mfm_model_free(both);
        mfm_model_free(one_by_one);
        mfm_model_free(reversed);
        return;
    }
    model_randomize(both, 9, 0.5);
    model_randomize(one_by_one, 9, 0.5);
    model_randomize(reversed, 9, 0.5);
    ref_load(&expected, both);
    ref_copy(&before, &expected);
    o = ref_opt_from_params(&p);
    ref_apply_batch(&expected, &o, &d, ord0, 1, NULL, 0);
    ref_apply_batch(&expected, &o, &d, ord1, 1, NULL, 0);
    slice_make(&s0, &d, 0, 1);
    slice_make(&s1, &d, 1, 2);
    if (partial_ok(both, &d, "both") && partial_ok(one_by_one, &s0.csr, "r0") && partial_ok(one_by_one, &s1.csr, "r1") &&
        partial_ok(reversed, &s1.csr, "r1 first") && partial_ok(reversed, &s0.csr, "r0 second")) {
        check_model(both, &expected, &before, NULL, 1e-3, 2e-6, "partial fit of r0, r1 against the reference");
        CHECK(models_equal(both, one_by_one, &d), "partial_fit([r0, r1]) differs from partial_fit([r0]) + partial_fit([r1])");
        CHECK(!models_equal(both, reversed, &d), "partial_fit([r0, r1]) equals [r1] then [r0]: the order would not matter");
    }
    ref_free(&expected);
    ref_free(&before);
    slice_free(&s0);
    slice_free(&s1);
    mfm_model_free(both);
    mfm_model_free(one_by_one);
    mfm_model_free(reversed);
}

/* A partial fit counts no epoch and calls no epoch callback, before and after a fit; with
   params.validation_fraction set it still trains on every row (no split: it equals a partial
   fit of a model without the fraction). */
void test_lifecycle_partial_fit_no_epochs(void) {
    mfm_params p = lc_params(MFM_MODEL_FWFM, MFM_TASK_BINARY, MFM_OPTIMIZER_ADAM);
    test_data td;
    recorder rec;
    mfm_model *m, *plain;
    lc_data(&td, MFM_TASK_BINARY, 30, 5);
    recorder_init(&rec, NULL, MFM_METRIC_LOGLOSS);
    p.on_epoch = record_epoch;
    p.user = &rec;
    p.n_epochs = 2;
    plain = lc_model(&p);
    p.validation_fraction = 0.3;
    p.patience = 1;
    m = lc_model(&p);
    if (m && plain && partial_ok(m, &td.csr, "partial 1") && partial_ok(plain, &td.csr, "partial plain")) {
        CHECK(epochs_of(m) == 0 && rec.n == 0, "partial fit: epochs_trained %llu, %d callbacks; expected 0 and 0", (unsigned long long)epochs_of(m), rec.n);
        CHECK(models_equal(m, plain, &td.csr), "partial fit with validation_fraction set differs from one without (it must not split)");
        p.validation_fraction = 0;
        mfm_model_set_params(m, &p, NULL);
        if (fit_ok(m, &td.csr, "fit")) {
            CHECK(epochs_of(m) == 2 && rec.n == 2, "fit: epochs_trained %llu, %d callbacks; expected 2 and 2", (unsigned long long)epochs_of(m), rec.n);
            CHECK(isnan(rec.value[0]) && rec.best[0] == 0 && rec.n_rows[0] == 30, "fit without validation: value %g, best %d, %llu rows; expected NaN, 0, 30",
                  rec.value[0], rec.best[0], (unsigned long long)rec.n_rows[0]);
            if (partial_ok(m, &td.csr, "partial 2"))
                CHECK(epochs_of(m) == 2 && rec.n == 2, "partial fit after fit: epochs_trained %llu, %d callbacks; expected 2 and 2",
                      (unsigned long long)epochs_of(m), rec.n);
        }
    }
    mfm_model_free(m);
    mfm_model_free(plain);
    data_free(&td);
}

/* A refused call leaves the model bit for bit as it was, params included. */
static void expect_refusal(mfm_model *m, mfm_status got, const mfm_error *e, mfm_status want, const char *words, const snapshot *before,
                           double lr_before, const char *what) {
    snapshot after;
    CHECK(got == want, "%s: status %d, expected %d (%s)", what, (int)got, (int)want, got ? e->message : "");
    if (got != MFM_OK && words) CHECK(mentions_word(e->message, words), "%s: the message \"%s\" names none of %s", what, e->message, words);
    snapshot_take(&after, m);
    CHECK(snapshot_equal(before, &after), "%s: the refused call changed the model", what);
    CHECK(mfm_model_params(m)->learning_rate == lr_before, "%s: the refused call changed the learning rate", what);
    snapshot_free(&after);
}

/* mfm_partial_fit refuses a feature beyond the model (MFM_ERR_SHAPE_MISMATCH), a class id >=
   n_classes (MFM_ERR_INVALID_DATA) and balanced class weights (MFM_ERR_INVALID_PARAM);
   mfm_model_set_params refuses changing model, task, optimizer, k, n_classes, linear_only,
   pairs_only and normalize_rows (MFM_ERR_INVALID_PARAM), the model and params unchanged; a
   change of what steers training takes effect: lr changed by set_params = lr given at create. */
void test_lifecycle_refusals(void) {
    mfm_params p = lc_params(MFM_MODEL_FFM, MFM_TASK_MULTICLASS, MFM_OPTIMIZER_ADAGRAD);
    test_data td;
    mfm_model *m;
    mfm_error e;
    snapshot before;
    lc_data(&td, MFM_TASK_MULTICLASS, 20, 8);
    m = lc_model(&p);
    if (!m) {
        data_free(&td);
        return;
    }
    partial_ok(m, &td.csr, "warm-up");
    snapshot_take(&before, m);
    { /* a feature beyond the model */
        uint32_t keep = td.features[3];
        td.features[3] = NF;
        td.csr.n_features = 0;
        expect_refusal(m, mfm_partial_fit(m, &td.csr, &e), &e, MFM_ERR_SHAPE_MISMATCH, "feature", &before, p.learning_rate, "feature beyond the model");
        td.features[3] = keep;
        td.csr.n_features = NF;
    }
    { /* class 3 of 3 */
        float keep = td.labels[5];
        td.labels[5] = 3;
        expect_refusal(m, mfm_partial_fit(m, &td.csr, &e), &e, MFM_ERR_INVALID_DATA, "class|classes", &before, p.learning_rate, "class id 3 of 3");
        td.labels[5] = keep;
    }
    { /* balanced class weights */
        mfm_params q = p;
        mfm_model *bm;
        snapshot bb;
        q.class_weight = MFM_CLASS_WEIGHT_BALANCED;
        bm = lc_model(&q);
        if (bm) {
            snapshot_take(&bb, bm);
            expect_refusal(bm, mfm_partial_fit(bm, &td.csr, &e), &e, MFM_ERR_INVALID_PARAM, "balanced", &bb, q.learning_rate, "balanced class weights");
            snapshot_free(&bb);
            CHECK(mfm_fit(bm, &td.csr, &e) == MFM_OK, "balanced class weights: mfm_fit refused them too: %s", e.message);
        }
        mfm_model_free(bm);
    }
    { /* set_params: the shape stays */
        int c;
        for (c = 0; c < 8; c++) {
            static const char *names[8] = {"model", "task", "optimizer", "k", "n_classes", "linear_only", "pairs_only", "normalize_rows"};
            mfm_params q = p;
            q.learning_rate = 0.9;
            switch (c) {
            case 0: q.model = MFM_MODEL_FWFM; break;
            case 1: q.task = MFM_TASK_BINARY, q.n_classes = 0; break;
            case 2: q.optimizer = MFM_OPTIMIZER_ADAM; break;
            case 3: q.k = 4; break;
            case 4: q.n_classes = 4; break;
            case 5: q.linear_only = 1; break;
            case 6: q.pairs_only = 1; break;
            default: q.normalize_rows = MFM_OFF; break;
            }
            expect_refusal(m, mfm_model_set_params(m, &q, &e), &e, MFM_ERR_INVALID_PARAM, names[c], &before, p.learning_rate, names[c]);
            CHECK(mfm_model_params(m)->model == MFM_MODEL_FFM && mfm_model_params(m)->task == MFM_TASK_MULTICLASS &&
                      mfm_model_params(m)->optimizer == MFM_OPTIMIZER_ADAGRAD && mfm_model_params(m)->k == 3 && !mfm_model_params(m)->linear_only &&
                      !mfm_model_params(m)->pairs_only && mfm_model_params(m)->normalize_rows == 1,
                  "set_params %s: the refused call changed the params", names[c]);
        }
    }
    { /* a valid change takes effect: lr 0.05 -> 0.2 by set_params = lr 0.2 at create */
        mfm_params q = p;
        mfm_model *a, *b;
        q.learning_rate = 0.05;
        a = lc_model(&q);
        q.learning_rate = 0.2;
        q.n_epochs = 2;
        b = lc_model(&q);
        if (a && b && CHECK(mfm_model_set_params(a, &q, &e) == MFM_OK, "set_params lr: %s", e.message) && fit_ok(a, &td.csr, "lr a") &&
            fit_ok(b, &td.csr, "lr b"))
            CHECK(models_equal(a, b, &td.csr) && epochs_of(a) == 2, "learning rate and n_epochs set by set_params differ from the same given at create");
        mfm_model_free(a);
        mfm_model_free(b);
    }
    snapshot_free(&before);
    mfm_model_free(m);
    data_free(&td);
}

/* A model loaded from a file saved without state refuses mfm_fit, mfm_fit_validated and
   mfm_partial_fit (MFM_ERR_INVALID_ARGUMENT, naming mfm_model_reset_state) and stays as loaded; after
   mfm_model_reset_state (AdaGrad's G at adagrad_init again) it trains: one epoch equals the
   original model with its state reset and trained one epoch, bit for bit. */
void test_lifecycle_stateless_file(void) {
    mfm_params p = lc_params(MFM_MODEL_FFM, MFM_TASK_BINARY, MFM_OPTIMIZER_ADAGRAD);
    test_data td;
    mfm_model *m, *l = NULL, *c = NULL;
    mfm_error e;
    mfm_status st;
    char path[256];
    scratch_path(path, sizeof path, "stateless.mfm");
    lc_data(&td, MFM_TASK_BINARY, 30, 9);
    p.adagrad_init = 0.25;
    p.n_epochs = 2;
    m = lc_model(&p);
    if (m && fit_ok(m, &td.csr, "fit") && CHECK(mfm_model_save(m, path, 0, &e) == MFM_OK, "save: %s", e.message) &&
        CHECK(mfm_model_load(path, &l, &e) == MFM_OK, "load: %s", e.message) && CHECK(mfm_model_clone(m, &c, &e) == MFM_OK, "clone: %s", e.message)) {
        snapshot s0, s1;
        mfm_model_info info;
        snapshot_take(&s0, l);
        st = mfm_fit(l, &td.csr, &e);
        CHECK(st == MFM_ERR_INVALID_ARGUMENT && strstr(e.message, "mfm_model_reset_state"), "fit without state: %d %s", (int)st, st ? e.message : "");
        st = mfm_partial_fit(l, &td.csr, &e);
        CHECK(st == MFM_ERR_INVALID_ARGUMENT && strstr(e.message, "mfm_model_reset_state"), "partial fit without state: %d %s", (int)st, st ? e.message : "");
        st = mfm_fit_validated(l, &td.csr, &td.csr, &e);
        CHECK(st == MFM_ERR_INVALID_ARGUMENT && strstr(e.message, "mfm_model_reset_state"), "fit_validated without state: %d %s", (int)st, st ? e.message : "");
        snapshot_take(&s1, l);
        CHECK(snapshot_equal(&s0, &s1), "the refused fits changed the loaded model");
        snapshot_free(&s0);
        snapshot_free(&s1);
        mfm_model_reset_state(l);
        mfm_model_reset_state(c);
        mfm_model_get_info(l, &info);
        CHECK(info.has_state == 1 && info.epochs_trained == 2, "after reset: has_state %d, epochs %llu", info.has_state, (unsigned long long)info.epochs_trained);
        {
            size_t n = mfm_tensor_size(l, MFM_TENSOR_V), i, bad = 0;
            float *g = (float *)calloc(n, sizeof(float));
            if (g && mfm_model_get_tensor(l, MFM_TENSOR_V, 1, 0, g, n, NULL) == MFM_OK)
                for (i = 0; i < n; i++) bad += g[i] != 0.25f;
            CHECK(g && bad == 0, "after reset: %lu of V's AdaGrad accumulators are not adagrad_init 0.25", (unsigned long)bad);
            free(g);
        }
        if (partial_ok(l, &td.csr, "partial after reset") && partial_ok(c, &td.csr, "partial of the clone") && fit_ok(l, &td.csr, "fit after reset") &&
            fit_ok(c, &td.csr, "fit of the clone"))
            CHECK(models_equal(l, c, &td.csr), "the loaded model after reset trains differently from the original after reset");
    }
    mfm_model_free(m);
    mfm_model_free(l);
    mfm_model_free(c);
    data_free(&td);
    scratch_clean();
}

/* ============================== 3. exact resume ============================== */

/* 3 epochs + save with state + load + 3 epochs = 6 epochs, bit for bit, every optimizer and
   model, with the switches off and with normalize_rows, pairs_only and adagrad_init 0.5 on (they
   and the early-stopping settings survive the file). */
void test_lifecycle_resume_exact(void) {
    char path[256];
    size_t mi, oi;
    int sw;
    scratch_path(path, sizeof path, "resume.mfm");
    for (sw = 0; sw < 2; sw++)
        for (mi = 0; mi < 3; mi++)
            for (oi = 0; oi < 5; oi++) {
                mfm_params p = lc_params(MODELS[mi], MFM_TASK_BINARY, OPTS[oi]);
                test_data td;
                mfm_model *six, *three, *l = NULL;
                mfm_error e;
                char what[80];
                snprintf(what, sizeof what, "%s %s switches %s", model_name(MODELS[mi]), opt_name(OPTS[oi]), sw ? "on" : "off");
                lc_data(&td, MFM_TASK_BINARY, 40, 400 + mi * 4 + oi + (size_t)sw * 16);
                p.batch_size = oi % 2 ? 3 : 1;
                p.normalize_rows = MFM_OFF;
                if (sw) {
                    p.normalize_rows = 1;
                    p.pairs_only = 1;
                    p.adagrad_init = 0.5;
                    p.patience = 7;
                    p.min_delta = 0.125;
                    p.metric = MFM_METRIC_AUC;
                    p.keep_last = 1;
                }
                six = plain_fit(&p, &td.csr, 6, what);
                three = plain_fit(&p, &td.csr, 3, what);
                if (six && three && CHECK(mfm_model_save(three, path, 1, &e) == MFM_OK, "%s: save: %s", what, e.message) &&
                    CHECK(mfm_model_load(path, &l, &e) == MFM_OK, "%s: load: %s", what, e.message)) {
                    const mfm_params *lp = mfm_model_params(l), asked = mfm_params_resolve(&p);
                    CHECK(lp->normalize_rows == p.normalize_rows && lp->pairs_only == p.pairs_only && lp->adagrad_init == asked.adagrad_init,
                          "%s: the switches did not survive the file (normalize %d, pairs_only %d, adagrad_init %g)", what, lp->normalize_rows, lp->pairs_only,
                          lp->adagrad_init);
                    if (sw)
                        CHECK(lp->patience == 7 && lp->min_delta == 0.125 && lp->metric == MFM_METRIC_AUC && lp->keep_last == 1,
                              "%s: the early-stopping settings did not survive the file", what);
                    CHECK(models_equal(l, three, &td.csr), "%s: the loaded model differs from the saved one", what);
                    if (fit_ok(l, &td.csr, what)) {
                        CHECK(models_equal(l, six, &td.csr), "%s: 3 + save/load + 3 epochs differs from 6 epochs", what);
                        CHECK(epochs_of(l) == 6, "%s: epochs_trained %llu", what, (unsigned long long)epochs_of(l));
                    }
                }
                mfm_model_free(six);
                mfm_model_free(three);
                mfm_model_free(l);
                data_free(&td);
            }
    { /* validation_fraction survives too */
        mfm_params p = lc_params(MFM_MODEL_FM, MFM_TASK_BINARY, MFM_OPTIMIZER_SGD);
        mfm_model *m, *l = NULL;
        mfm_error e;
        p.validation_fraction = 0.25;
        m = lc_model(&p);
        if (m && CHECK(mfm_model_save(m, path, 1, &e) == MFM_OK && mfm_model_load(path, &l, &e) == MFM_OK, "validation_fraction file: %s", e.message))
            CHECK(mfm_model_params(l)->validation_fraction == 0.25, "validation_fraction %g after load", mfm_model_params(l)->validation_fraction);
        mfm_model_free(m);
        mfm_model_free(l);
    }
    scratch_clean();
}

/* ============================== 4. inspection ============================== */

static int interaction_is(const mfm_interaction *x, uint32_t fa, uint32_t fla, uint32_t fb, uint32_t flb, double value, const char *what, int rank) {
    return CHECK(x->feature_a == fa && x->field_a == fla && x->feature_b == fb && x->field_b == flb && x->value == (float)value &&
                     x->strength == (float)fabs(value),
                 "%s rank %d: got (%u@%u, %u@%u) value %g strength %g, expected (%u@%u, %u@%u) value %g", what, rank, x->feature_a, x->field_a, x->feature_b,
                 x->field_b, (double)x->value, (double)x->strength, fa, fla, fb, flb, value);
}

static int write_tensor(mfm_model *m, mfm_tensor t, uint32_t cls, const float *values) {
    mfm_error e;
    return CHECK(mfm_model_set_tensor(m, t, 0, cls, values, mfm_tensor_size(m, t), &e) == MFM_OK, "mfm_model_set_tensor(tensor %d, class %u): %s", (int)t, cls, e.message);
}

/* FM, k = 2, V written by hand (exact binary fractions):
     v0 = (1, .5)  v1 = (.25, 0)  v2 = (.5, -1)  v3 = (2, 1)  v4 = (0, .25)  v5 = (-1, 1)
   <v_a, v_b>: 03 2.5 | 25 -1.5 | 35 -1 | 05 -.5, 13 .5 | 01 .25, 15 -.25, 24 -.25, 34 .25,
   45 .25 | 04 .125, 12 .125 | 02 0, 14 0, 23 0, ordered by strength, ties by smaller features.
   Without data every pair of the model's 6 features (15), fields 0; n = 3, 7 (a tie group cut
   by n), 100 (all 15); with data holding features 0, 3, 5 only the 3 pairs among them.
   Multiclass: class 1 has v1 = (1, 1), v4 = (2, 2), all else 0: (1, 4) value 4 first, then the
   zero pairs in feature order, (0, 1) first. Errors: a class beyond the model, a linear model. */
void test_lifecycle_top_interactions_fm(void) {
    static const float V[12] = {1, 0.5f, 0.25f, 0, 0.5f, -1, 2, 1, 0, 0.25f, -1, 1};
    static const struct {
        uint32_t a, b;
        double value;
    } all[15] = {{0, 3, 2.5},   {2, 5, -1.5},  {3, 5, -1},    {0, 5, -0.5},  {1, 3, 0.5},  {0, 1, 0.25}, {1, 5, -0.25}, {2, 4, -0.25},
                 {3, 4, 0.25},  {4, 5, 0.25},  {0, 4, 0.125}, {1, 2, 0.125}, {0, 2, 0},    {1, 4, 0},    {2, 3, 0}};
    static const size_t ns[3] = {3, 7, 100};
    mfm_params p = lc_params(MFM_MODEL_FM, MFM_TASK_BINARY, MFM_OPTIMIZER_SGD);
    mfm_interaction out[100];
    size_t found, i, j;
    mfm_model *m;
    mfm_error e;
    p.k = 2;
    m = make_model(&p, 6, 0, 1);
    if (!m || !write_tensor(m, MFM_TENSOR_V, 0, V)) {
        mfm_model_free(m);
        return;
    }
    for (j = 0; j < 3; j++) {
        char what[32];
        snprintf(what, sizeof what, "FM, n = %lu", (unsigned long)ns[j]);
        memset(out, 0xAB, sizeof out);
        if (!CHECK(mfm_top_interactions(m, NULL, 0, ns[j], out, &found, &e) == MFM_OK, "%s: %s", what, e.message)) continue;
        CHECK(found == (ns[j] < 15 ? ns[j] : 15), "%s: %lu found", what, (unsigned long)found);
        for (i = 0; i < found && i < 15; i++) interaction_is(&out[i], all[i].a, 0, all[i].b, 0, all[i].value, what, (int)i + 1);
    }
    { /* data with features 0, 3, 5 (5 twice) */
        static const uint64_t offsets[3] = {0, 2, 4};
        static const uint32_t features[4] = {3, 0, 5, 3};
        mfm_csr d = csr_of(2, offsets, features, NULL, NULL, NULL);
        if (CHECK(mfm_top_interactions(m, &d, 0, 10, out, &found, &e) == MFM_OK, "FM with data: %s", e.message) &&
            CHECK(found == 3, "FM with data: %lu pairs found, expected 3", (unsigned long)found)) {
            interaction_is(&out[0], 0, 0, 3, 0, 2.5, "FM with data", 1);
            interaction_is(&out[1], 3, 0, 5, 0, -1, "FM with data", 2);
            interaction_is(&out[2], 0, 0, 5, 0, -0.5, "FM with data", 3);
        }
    }
    { /* FM ignores fields: feature 3 under fields 0 and 2 is one slot */
        static const uint64_t offsets[3] = {0, 2, 4};
        static const uint32_t features[4] = {3, 0, 5, 3}, fields[4] = {0, 1, 1, 2};
        mfm_csr d = csr_of(2, offsets, features, fields, NULL, NULL);
        if (CHECK(mfm_top_interactions(m, &d, 0, 10, out, &found, &e) == MFM_OK, "FM with fields: %s", e.message) &&
            CHECK(found == 3, "FM with fields: %lu pairs found, expected 3 (FM has no fields)", (unsigned long)found))
            interaction_is(&out[0], 0, 0, 3, 0, 2.5, "FM with fields", 1);
    }
    { /* n = 0, a class beyond the model, data beyond the model */
        static const uint64_t offsets[2] = {0, 2};
        static const uint32_t features[2] = {1, 6};
        mfm_csr d;
        mfm_status st = mfm_top_interactions(m, NULL, 0, 0, out, &found, &e);
        CHECK(st == MFM_OK && found == 0, "n = 0: status %d, %lu found", (int)st, (unsigned long)found);
        st = mfm_top_interactions(m, NULL, 1, 3, out, &found, &e);
        CHECK(st == MFM_ERR_INVALID_ARGUMENT, "class 1 of a binary model: status %d", (int)st);
        d = csr_of(1, offsets, features, NULL, NULL, NULL);
        st = mfm_top_interactions(m, &d, 0, 3, out, &found, &e);
        CHECK(st == MFM_ERR_SHAPE_MISMATCH, "feature 6 of a 6-feature model: status %d", (int)st);
    }
    mfm_model_free(m);
    { /* multiclass: per class */
        static const float V1[12] = {0, 0, 1, 1, 0, 0, 0, 0, 2, 2, 0, 0};
        p.task = MFM_TASK_MULTICLASS;
        p.n_classes = 2;
        m = make_model(&p, 6, 0, 2);
        if (m && write_tensor(m, MFM_TENSOR_V, 0, V) && write_tensor(m, MFM_TENSOR_V, 1, V1)) {
            if (CHECK(mfm_top_interactions(m, NULL, 0, 2, out, &found, &e) == MFM_OK && found == 2, "multiclass class 0: %s", e.message)) {
                interaction_is(&out[0], 0, 0, 3, 0, 2.5, "class 0", 1);
                interaction_is(&out[1], 2, 0, 5, 0, -1.5, "class 0", 2);
            }
            if (CHECK(mfm_top_interactions(m, NULL, 1, 3, out, &found, &e) == MFM_OK && found == 3, "multiclass class 1: %s", e.message)) {
                interaction_is(&out[0], 1, 0, 4, 0, 4, "class 1", 1);
                interaction_is(&out[1], 0, 0, 1, 0, 0, "class 1", 2);
                interaction_is(&out[2], 0, 0, 2, 0, 0, "class 1", 3);
            }
            CHECK(mfm_top_interactions(m, NULL, 2, 3, out, &found, &e) == MFM_ERR_INVALID_ARGUMENT, "class 2 of 2 accepted");
        }
        mfm_model_free(m);
    }
    { /* a linear model learns no interactions */
        mfm_params q = lc_params(MFM_MODEL_FM, MFM_TASK_BINARY, MFM_OPTIMIZER_SGD);
        mfm_status st;
        q.linear_only = 1;
        m = make_model(&q, 6, 0, 1);
        if (m) {
            st = mfm_top_interactions(m, NULL, 0, 3, out, &found, &e);
            CHECK(st == MFM_ERR_INVALID_ARGUMENT, "linear model: status %d", (int)st);
        }
        mfm_model_free(m);
    }
}

/* FwFM (k = 1; v = 1, 2, -1, .5; R upper triangle r00 4, r01 .5, r02 3, r12 -2, lower triangle
   100 to show it is not read) on data with slots 0@0, 1@1, 2@2, 3@0: values r(fa,fb) v_a v_b:
   12 4, 02 -3, 03 2, 23 -1.5, 01 1, 13 .5. FFM (k = 1; V[i,g] = 1, 2 | 3, -1 | .5, 4) on data
   where feature 1 occurs under fields 0 and 1: slots 0@0, 1@0, 1@1, 2@1 give 5 pairs (not
   1@0-1@1), values <V[a,fb], V[b,fa]>: 0@0-1@1 6, 1@1-2@1 -4, 0@0-1@0 3, 0@0-2@1 1, 1@0-2@1 -.5.
   Both need data: NULL is MFM_ERR_INVALID_ARGUMENT. */
void test_lifecycle_top_interactions_fields(void) {
    mfm_interaction out[20];
    size_t found;
    mfm_error e;
    mfm_model *m;
    {
        static const float v[4] = {1, 2, -1, 0.5f};
        static const float R[9] = {4, 0.5f, 3, 100, 0, -2, 100, 100, 0};
        static const uint64_t offsets[3] = {0, 2, 4};
        static const uint32_t features[4] = {0, 1, 2, 3}, fields[4] = {0, 1, 2, 0};
        mfm_params p = lc_params(MFM_MODEL_FWFM, MFM_TASK_BINARY, MFM_OPTIMIZER_SGD);
        mfm_csr d = csr_of(2, offsets, features, fields, NULL, NULL);
        p.k = 1;
        m = make_model(&p, 4, 3, 1);
        if (m && write_tensor(m, MFM_TENSOR_V, 0, v) && write_tensor(m, MFM_TENSOR_R, 0, R)) {
            CHECK(mfm_top_interactions(m, NULL, 0, 5, out, &found, &e) == MFM_ERR_INVALID_ARGUMENT, "FwFM without data accepted");
            if (CHECK(mfm_top_interactions(m, &d, 0, 20, out, &found, &e) == MFM_OK && found == 6, "FwFM: %lu found (%s)", (unsigned long)found,
                      e.message)) {
                interaction_is(&out[0], 1, 1, 2, 2, 4, "FwFM", 1);
                interaction_is(&out[1], 0, 0, 2, 2, -3, "FwFM", 2);
                interaction_is(&out[2], 0, 0, 3, 0, 2, "FwFM", 3);
                interaction_is(&out[3], 2, 2, 3, 0, -1.5, "FwFM", 4);
                interaction_is(&out[4], 0, 0, 1, 1, 1, "FwFM", 5);
                interaction_is(&out[5], 1, 1, 3, 0, 0.5, "FwFM", 6);
            }
        }
        mfm_model_free(m);
    }
    {
        /* V[i, g] for i = 0..2, g = 0..1 (k = 1) */
        static const float V[6] = {1, 2, 3, -1, 0.5f, 4};
        static const uint64_t offsets[3] = {0, 2, 4};
        static const uint32_t features[4] = {0, 1, 1, 2}, fields[4] = {0, 1, 0, 1};
        mfm_params p = lc_params(MFM_MODEL_FFM, MFM_TASK_BINARY, MFM_OPTIMIZER_SGD);
        mfm_csr d = csr_of(2, offsets, features, fields, NULL, NULL);
        p.k = 1;
        m = make_model(&p, 3, 2, 1);
        if (m && write_tensor(m, MFM_TENSOR_V, 0, V)) {
            CHECK(mfm_top_interactions(m, NULL, 0, 5, out, &found, &e) == MFM_ERR_INVALID_ARGUMENT, "FFM without data accepted");
            if (CHECK(mfm_top_interactions(m, &d, 0, 20, out, &found, &e) == MFM_OK && found == 5, "FFM: %lu found (%s)", (unsigned long)found, e.message)) {
                interaction_is(&out[0], 0, 0, 1, 1, 6, "FFM", 1);
                interaction_is(&out[1], 1, 1, 2, 1, -4, "FFM", 2);
                interaction_is(&out[2], 0, 0, 1, 0, 3, "FFM", 3);
                interaction_is(&out[3], 0, 0, 2, 1, 1, "FFM", 4);
                interaction_is(&out[4], 1, 0, 2, 1, -0.5, "FFM", 5);
            }
        }
        mfm_model_free(m);
    }
}

/* Planted: y = 1 iff exactly one of features 3 and 7 is present (XOR, which no linear term can
   fit), each present with probability 1/2, plus 3 noise features from the other 28. After
   training an FM the strongest interaction is (3, 7), and it is negative. */
void test_lifecycle_top_interactions_learned(void) {
    enum { ROWS = 600, FEATS = 30 };
    uint64_t *offsets = (uint64_t *)calloc(ROWS + 1, sizeof(uint64_t)), rng = 99, r;
    uint32_t *features = (uint32_t *)calloc(ROWS * 5, sizeof(uint32_t));
    float *labels = (float *)calloc(ROWS, sizeof(float));
    mfm_params p = lc_params(MFM_MODEL_FM, MFM_TASK_BINARY, MFM_OPTIMIZER_ADAGRAD);
    mfm_interaction top[3];
    size_t found;
    mfm_model *m = NULL;
    mfm_csr d;
    mfm_error e;
    uint64_t nnz = 0;
    if (!offsets || !features || !labels) abort();
    for (r = 0; r < ROWS; r++) {
        int has3 = rng_below(&rng, 2), has7 = rng_below(&rng, 2), a, b, z0;
        if (has3) features[nnz++] = 3;
        if (has7) features[nnz++] = 7;
        z0 = (int)(nnz - offsets[r]);
        for (a = 0; a < 3; a++) {
            uint32_t f;
            do {
                f = rng_below(&rng, FEATS);
                for (b = 0; b < z0 + a && features[offsets[r] + b] != f; b++) {}
            } while (f == 3 || f == 7 || b < z0 + a);
            features[nnz++] = f;
        }
        offsets[r + 1] = nnz;
        labels[r] = has3 != has7 ? 1.0f : 0.0f;
    }
    d = csr_of(ROWS, offsets, features, NULL, NULL, labels);
    d.n_features = FEATS;
    p.k = 4;
    p.n_epochs = 15;
    p.learning_rate = 0.1;
    p.init_scale = 0.1;
    p.l2_linear = p.l2_factors = 1e-4;
    if (CHECK(mfm_train(&p, &d, &m, &e) == MFM_OK, "train: %s", e.message) &&
        CHECK(mfm_top_interactions(m, &d, 0, 3, top, &found, &e) == MFM_OK && found == 3, "top interactions: %s", e.message)) {
        mfm_metrics met;
        CHECK(top[0].feature_a == 3 && top[0].feature_b == 7 && top[0].value < 0,
              "the strongest learned interaction is (%u, %u) value %g, expected (3, 7) negative; next (%u, %u) %g", top[0].feature_a, top[0].feature_b,
              (double)top[0].value, top[1].feature_a, top[1].feature_b, (double)top[1].value);
        CHECK(top[0].strength > 2 * top[1].strength, "the planted pair (strength %g) does not stand out from the next (%g)", (double)top[0].strength,
              (double)top[1].strength);
        CHECK(mfm_evaluate(m, &d, &met, NULL) == MFM_OK && met.accuracy > 0.95, "the FM did not learn XOR: accuracy %g", met.accuracy);
    }
    mfm_model_free(m);
    free(offsets);
    free(features);
    free(labels);
}

/* mfm_bi_interaction: for random FM models and rows (values; one-hot; normalize_rows;
   multiclass) bi_t equals the naive double sum_{a<b} v_a,t v_b,t x_a x_b, and score = w0 +
   sum_i w_i x_i + sum_t bi_t (score from mfm_predict, w0 and w read back, x normalized by hand
   under normalize_rows). FFM, FwFM and a linear FM are MFM_ERR_INVALID_ARGUMENT, and so is an
   output too small. */
void test_lifecycle_bi_interaction(void) {
    int variant;
    for (variant = 0; variant < 4; variant++) {
        const int multi = variant == 3, norm = variant == 2, onehot = variant == 1;
        const mfm_task task = multi ? MFM_TASK_MULTICLASS : MFM_TASK_BINARY;
        mfm_params p = lc_params(MFM_MODEL_FM, task, MFM_OPTIMIZER_ADAGRAD);
        test_data td;
        mfm_model *m;
        mfm_error e;
        const char *what = multi ? "multiclass" : norm ? "normalize_rows" : onehot ? "one-hot" : "values";
        p.k = 5;
        p.normalize_rows = norm ? 1 : MFM_OFF;
        lc_data(&td, task, 30, 500 + (uint64_t)variant);
        if (onehot) td.csr.values = NULL;
        m = lc_model(&p);
        if (m) {
            const uint32_t C = multi ? 3 : 1;
            const size_t k = 5, n = (size_t)td.csr.n_rows;
            float *bi = (float *)calloc(n * C * k, sizeof(float)), *score = (float *)calloc(n * C, sizeof(float));
            float *w = (float *)calloc(NF, sizeof(float)), *V = (float *)calloc((size_t)NF * k, sizeof(float));
            model_randomize(m, 31 + (uint64_t)variant, 0.7);
            if (!bi || !score || !w || !V) abort();
            if (CHECK(mfm_bi_interaction(m, &td.csr, bi, n * C * k, &e) == MFM_OK, "%s: %s", what, e.message) &&
                predict(m, &td.csr, MFM_OUTPUT_SCORE, score, n * C)) {
                uint32_t c;
                for (c = 0; c < C; c++) {
                    float w0;
                    size_t r;
                    mfm_model_get_tensor(m, MFM_TENSOR_W0, 0, c, &w0, 1, NULL);
                    mfm_model_get_tensor(m, MFM_TENSOR_W, 0, c, w, NF, NULL);
                    mfm_model_get_tensor(m, MFM_TENSOR_V, 0, c, V, (size_t)NF * k, NULL);
                    for (r = 0; r < n; r++) {
                        const uint64_t lo = td.csr.row_offsets[r], hi = td.csr.row_offsets[r + 1];
                        double x[8], sq = 0, s = w0, scale = 1, naive[5] = {0, 0, 0, 0, 0};
                        uint64_t a, b;
                        size_t t;
                        for (a = lo; a < hi; a++) {
                            x[a - lo] = td.csr.values ? td.csr.values[a] : 1.0;
                            sq += x[a - lo] * x[a - lo];
                        }
                        if (norm && sq > 0) scale = 1 / sqrt(sq);
                        for (a = lo; a < hi; a++) x[a - lo] *= scale;
                        for (a = lo; a < hi; a++) s += w[td.csr.features[a]] * x[a - lo];
                        for (a = lo; a < hi; a++)
                            for (b = a + 1; b < hi; b++)
                                for (t = 0; t < k; t++)
                                    naive[t] += (double)V[td.csr.features[a] * k + t] * V[td.csr.features[b] * k + t] * x[a - lo] * x[b - lo];
                        for (t = 0; t < k; t++) {
                            const float got = bi[(r * C + c) * k + t];
                            CHECK_NEAR(got, naive[t], 1e-5, 1e-6, "%s class %u row %lu: bi[%lu]", what, c, (unsigned long)r, (unsigned long)t);
                            s += got;
                        }
                        CHECK_NEAR(score[r * C + c], s, 1e-5, 1e-5, "%s class %u row %lu: score against w0 + w x + sum bi", what, c, (unsigned long)r);
                    }
                }
                CHECK(mfm_bi_interaction(m, &td.csr, bi, n * C * k - 1, &e) == MFM_ERR_INVALID_ARGUMENT, "%s: an output one value short accepted", what);
            }
            free(bi);
            free(score);
            free(w);
            free(V);
        }
        mfm_model_free(m);
        data_free(&td);
    }
    { /* not FM with pairs */
        static const mfm_model_type others[3] = {MFM_MODEL_FFM, MFM_MODEL_FWFM, MFM_MODEL_FM};
        test_data td;
        int i;
        lc_data(&td, MFM_TASK_BINARY, 5, 3);
        for (i = 0; i < 3; i++) {
            mfm_params p = lc_params(others[i], MFM_TASK_BINARY, MFM_OPTIMIZER_ADAGRAD);
            mfm_model *m;
            float out[5 * 3];
            mfm_error e;
            mfm_status st;
            p.linear_only = i == 2;
            m = lc_model(&p);
            if (!m) continue;
            st = mfm_bi_interaction(m, &td.csr, out, 15, &e);
            CHECK(st == MFM_ERR_INVALID_ARGUMENT, "bi-interaction of %s%s: status %d", i == 2 ? "a linear " : "", model_name(others[i]), (int)st);
            mfm_model_free(m);
        }
        data_free(&td);
    }
}

/* ============================== 5. the LIBFFM switches ============================== */

/* d with each row's values scaled by 1 / sqrt(sum x^2) (computed in double), as a new data set. */
static void data_normalized(test_data *out, const mfm_csr *d) {
    uint64_t *rows = (uint64_t *)calloc((size_t)d->n_rows + 1, sizeof(uint64_t)), r;
    if (!rows) abort();
    for (r = 0; r < d->n_rows; r++) rows[r] = r;
    data_pick(out, d, rows, d->n_rows);
    free(rows);
    for (r = 0; r < d->n_rows; r++) {
        double sq = 0;
        uint64_t a;
        for (a = out->offsets[r]; a < out->offsets[r + 1]; a++) sq += (double)out->values[a] * out->values[a];
        if (sq > 0)
            for (a = out->offsets[r]; a < out->offsets[r + 1]; a++) out->values[a] = (float)(out->values[a] / sqrt(sq));
    }
}

/* normalize_rows: for random FM, FFM and FwFM models (and a multiclass FM), with values and
   one-hot, the score equals the reference scorer on the rows scaled by hand to sum x^2 = 1;
   scaling every value of a row by 4 gives the same scores bit for bit, by 3.7 to float
   rounding; a row of zeros scores w0. Training with normalize_rows equals training without it
   on the hand-normalized rows (to float rounding of the scaled values). */
void test_lifecycle_normalize_rows(void) {
    int variant;
    for (variant = 0; variant < 8; variant++) {
        const int multi = variant >= 6, onehot = variant >= 3 && variant < 6;
        const mfm_model_type model = variant == 6 ? MFM_MODEL_FM : variant == 7 ? MFM_MODEL_FWFM : MODELS[variant % 3];
        const mfm_task task = multi ? MFM_TASK_MULTICLASS : MFM_TASK_BINARY;
        mfm_params p = lc_params(model, task, MFM_OPTIMIZER_ADAGRAD);
        test_data td, scaled, times4, times37;
        mfm_model *m;
        char what[64];
        const uint32_t C = multi ? 3 : 1;
        snprintf(what, sizeof what, "%s%s%s", model_name(p.model), multi ? " multiclass" : "", onehot ? " one-hot" : "");
        p.normalize_rows = 1;
        lc_data(&td, task, 40, 600 + (uint64_t)variant);
        if (onehot) td.csr.values = NULL;
        data_normalized(&scaled, &td.csr);
        data_normalized(&times4, &td.csr); /* overwritten below: td's values times 4 and 3.7 */
        data_normalized(&times37, &td.csr);
        {
            uint64_t a;
            for (a = 0; a < td.csr.row_offsets[td.csr.n_rows]; a++) {
                float x = td.csr.values ? td.csr.values[a] : 1.0f;
                times4.values[a] = x * 4.0f;
                times37.values[a] = x * 3.7f;
            }
        }
        m = lc_model(&p);
        if (m) {
            const size_t n = (size_t)td.csr.n_rows * C;
            float *s = (float *)calloc(n, sizeof(float)), *s4 = (float *)calloc(n, sizeof(float)), *s37 = (float *)calloc(n, sizeof(float));
            ref_model ref;
            model_randomize(m, 70 + (uint64_t)variant, 0.6);
            ref_load(&ref, m);
            if (s && s4 && s37 && predict(m, &td.csr, MFM_OUTPUT_SCORE, s, n) && predict(m, &times4.csr, MFM_OUTPUT_SCORE, s4, n) &&
                predict(m, &times37.csr, MFM_OUTPUT_SCORE, s37, n)) {
                uint64_t r;
                uint32_t c;
                for (r = 0; r < td.csr.n_rows; r++)
                    for (c = 0; c < C; c++) {
                        CHECK_NEAR(s[r * C + c], ref_score(&ref, c, &scaled.csr, r), 1e-5, 1e-5, "%s row %lu class %u: score against the normalized reference",
                                   what, (unsigned long)r, c);
                        CHECK_NEAR(s37[r * C + c], s[r * C + c], 1e-5, 1e-5, "%s row %lu class %u: values x 3.7", what, (unsigned long)r, c);
                    }
                CHECK(memcmp(s, s4, n * sizeof(float)) == 0, "%s: values x 4 change the scores", what);
            }
            { /* a row of zeros scores w0 */
                static const uint32_t f2[2] = {1, 2}, fl2[2] = {0, 1};
                static const float zeros[2] = {0, 0};
                one_row row;
                float z[3], w0;
                one_row_init(&row, 2, f2, fl2, zeros, 0);
                mfm_model_get_tensor(m, MFM_TENSOR_W0, 0, 0, &w0, 1, NULL);
                if (predict(m, &row.csr, MFM_OUTPUT_SCORE, z, C)) CHECK(z[0] == w0, "%s: a row of zeros scores %g, expected w0 = %g", what, (double)z[0], (double)w0);
            }
            ref_free(&ref);
            free(s);
            free(s4);
            free(s37);
        }
        mfm_model_free(m);
        if (variant < 3 || variant >= 6) { /* training: normalize_rows = plain training on the normalized rows */
            mfm_params q = p;
            mfm_model *a, *b;
            q.n_epochs = 2;
            q.learning_rate = 0.1;
            a = lc_model(&q);
            q.normalize_rows = 0;
            b = lc_model(&q);
            if (a && b && fit_ok(a, &td.csr, what) && fit_ok(b, &scaled.csr, what)) {
                ref_model rb;
                const size_t n = (size_t)td.csr.n_rows * C;
                float *sa = (float *)calloc(n, sizeof(float)), *sb = (float *)calloc(n, sizeof(float));
                uint64_t i;
                ref_load(&rb, b);
                check_model(a, &rb, NULL, NULL, 1e-4, 1e-6, what);
                ref_free(&rb);
                if (sa && sb && predict(a, &td.csr, MFM_OUTPUT_SCORE, sa, n) && predict(b, &scaled.csr, MFM_OUTPUT_SCORE, sb, n))
                    for (i = 0; i < n; i++) CHECK_NEAR(sa[i], sb[i], 1e-4, 1e-6, "%s: trained score %lu", what, (unsigned long)i);
                free(sa);
                free(sb);
            }
            mfm_model_free(a);
            mfm_model_free(b);
        }
        data_free(&td);
        data_free(&scaled);
        data_free(&times4);
        data_free(&times37);
    }
}

/* pairs_only: after 2 epochs of every optimizer and model (batch 1 and 4, with L2 on w, and L1
   for FTRL; and multiclass) w0 and w are exactly 0 and the score is the pair term alone (the
   reference scorer); writing w0 and w by hand does not change the scores. With linear_only it
   is MFM_ERR_INVALID_PARAM (nothing left to learn). */
void test_lifecycle_pairs_only(void) {
    size_t mi, oi;
    int bi;
    {
        mfm_params p = lc_params(MFM_MODEL_FM, MFM_TASK_BINARY, MFM_OPTIMIZER_SGD);
        mfm_model *m = NULL;
        mfm_error e;
        mfm_status st;
        p.pairs_only = p.linear_only = 1;
        st = mfm_model_create(&p, NF, NFLD, 1, &m, &e);
        CHECK(st == MFM_ERR_INVALID_PARAM && !m, "pairs_only with linear_only: status %d", (int)st);
        mfm_model_free(m);
    }
    for (mi = 0; mi < 3; mi++)
        for (oi = 0; oi < 5; oi++)
            for (bi = 0; bi < 3; bi++) {
                const int multi = bi == 2;
                const mfm_task task = multi ? MFM_TASK_MULTICLASS : MFM_TASK_BINARY;
                mfm_params p = lc_params(MODELS[mi], task, OPTS[oi]);
                test_data td;
                mfm_model *m;
                char what[80];
                const uint32_t C = multi ? 3 : 1;
                snprintf(what, sizeof what, "%s %s %s batch %d", model_name(MODELS[mi]), opt_name(OPTS[oi]), task_name(task), bi == 1 ? 4 : 1);
                p.pairs_only = 1;
                p.batch_size = bi == 1 ? 4 : 1;
                p.n_epochs = 2;
                p.l2_linear = 0.05;
                lc_data(&td, task, 30, 700 + mi * 12 + oi * 3 + (size_t)bi);
                m = lc_model(&p);
                if (m && fit_ok(m, &td.csr, what)) {
                    float w[NF + 1], big[NF];
                    const size_t n = (size_t)td.csr.n_rows * C;
                    float *s = (float *)calloc(n, sizeof(float)), *s2 = (float *)calloc(n, sizeof(float));
                    ref_model ref;
                    uint32_t c;
                    int i, nonzero = 0;
                    for (c = 0; c < C; c++) {
                        mfm_model_get_tensor(m, MFM_TENSOR_W0, 0, c, w, 1, NULL);
                        mfm_model_get_tensor(m, MFM_TENSOR_W, 0, c, w + 1, NF, NULL);
                        for (i = 0; i <= NF; i++) nonzero += w[i] != 0;
                    }
                    CHECK(nonzero == 0, "%s: %d of w0 and w are not 0 after training", what, nonzero);
                    ref_load(&ref, m);
                    if (s && s2 && predict(m, &td.csr, MFM_OUTPUT_SCORE, s, n)) {
                        uint64_t r;
                        for (r = 0; r < td.csr.n_rows; r++)
                            for (c = 0; c < C; c++)
                                CHECK_NEAR(s[r * C + c], ref_score(&ref, c, &td.csr, r), 1e-5, 1e-6, "%s row %lu class %u: score against the pair term", what,
                                           (unsigned long)r, c);
                        for (i = 0; i < NF; i++) big[i] = 3.0f + (float)i;
                        for (c = 0; c < C; c++) {
                            mfm_model_set_tensor(m, MFM_TENSOR_W0, 0, c, big, 1, NULL);
                            mfm_model_set_tensor(m, MFM_TENSOR_W, 0, c, big, NF, NULL);
                        }
                        if (predict(m, &td.csr, MFM_OUTPUT_SCORE, s2, n))
                            CHECK(memcmp(s, s2, n * sizeof(float)) == 0, "%s: w0 and w written by hand change the scores of a pairs-only model", what);
                    }
                    ref_free(&ref);
                    free(s);
                    free(s2);
                }
                mfm_model_free(m);
                data_free(&td);
            }
}

/* adagrad_init: a fresh AdaGrad model (FM, FFM, FwFM, multiclass) holds G = adagrad_init in
   every state slot of every tensor (W0, W, V, R); other optimizers start at 0. The first step
   on one row, FM, k = 2, batch 1, against the hand formula with G0 = 0.5:
     g = dL/dtheta + l2 theta, G = G0 + g^2, theta -= lr g / sqrt(G + 1e-10),
   untouched coordinates keep theta and G = G0. mfm_model_reset_state brings G back to G0. */
void test_lifecycle_adagrad_init(void) {
    size_t mi;
    for (mi = 0; mi < 4; mi++) {
        const int multi = mi == 3;
        mfm_params p = lc_params(MODELS[multi ? 0 : mi], multi ? MFM_TASK_MULTICLASS : MFM_TASK_BINARY, MFM_OPTIMIZER_ADAGRAD);
        mfm_model *m;
        int opt;
        p.adagrad_init = 0.5;
        for (opt = 0; opt < 2; opt++) {
            if (opt) p.optimizer = MFM_OPTIMIZER_ADAM;
            m = lc_model(&p);
            if (m) {
                mfm_model_info info;
                int t, s, bad = 0;
                uint32_t c;
                mfm_model_get_info(m, &info);
                for (t = 0; t < MFM_TENSOR_COUNT; t++) {
                    size_t n = mfm_tensor_size(m, (mfm_tensor)t), i;
                    float *buf = (float *)calloc(n + 1, sizeof(float));
                    for (s = 1; s <= info.n_state_slots; s++)
                        for (c = 0; c < info.n_classes; c++) {
                            const size_t count = mfm_tensor_slot_size(m, (mfm_tensor)t, s);
                            mfm_model_get_tensor(m, (mfm_tensor)t, s, c, buf, count, NULL);
                            for (i = 0; i < count; i++) bad += buf[i] != (opt ? 0.0f : 0.5f);
                        }
                    free(buf);
                }
                CHECK(bad == 0, "%s %s: %d state values differ from %g", model_name(p.model), opt ? "Adam" : "AdaGrad", bad, opt ? 0.0 : 0.5);
            }
            mfm_model_free(m);
        }
    }
    { /* the first step by hand */
        static const uint32_t features[2] = {1, 3};
        static const float values[2] = {1, 2};
        static const float w0 = 0.1f, w[5] = {0.3f, -0.2f, 0.4f, 0.25f, -0.1f}, V[10] = {0.1f, 0.2f, 0.3f, -0.4f, -0.5f, 0.6f, 0.7f, 0.8f, -0.9f, 1.0f};
        const double lr = 0.1, l2w = 0.01, l2v = 0.02, G0 = 0.5;
        mfm_params p = sgd_step_params(MFM_MODEL_FM, MFM_TASK_BINARY, lr);
        mfm_model *m;
        one_row row;
        p.optimizer = MFM_OPTIMIZER_ADAGRAD;
        p.k = 2;
        p.l2_linear = l2w;
        p.l2_factors = l2v;
        p.adagrad_init = G0;
        m = make_model(&p, 5, 0, 1);
        if (m && write_tensor(m, MFM_TENSOR_W0, 0, &w0) && write_tensor(m, MFM_TENSOR_W, 0, w) && write_tensor(m, MFM_TENSOR_V, 0, V)) {
            /* s = w0 + w1 x1 + w3 x3 + <v1, v3> x1 x3 = 0.1 - 0.2 + 0.5 + (0.3 * 0.7 - 0.4 * 0.8) * 2 = 0.18 */
            const double x1 = values[0], x3 = values[1];
            const double s = (double)w0 + (double)w[1] * x1 + (double)w[3] * x3 + ((double)V[2] * V[6] + (double)V[3] * V[7]) * x1 * x3;
            const double g = 1 / (1 + exp(-s)) - 1; /* label 1 */
            double want_theta[1 + 5 + 10], want_G[1 + 5 + 10], theta0[1 + 5 + 10], grad[1 + 5 + 10];
            int touched[1 + 5 + 10], i, t;
            float got[10], gotG[10];
            memset(touched, 0, sizeof touched);
            theta0[0] = w0;
            for (i = 0; i < 5; i++) theta0[1 + i] = w[i];
            for (i = 0; i < 10; i++) theta0[6 + i] = V[i];
            grad[0] = g, touched[0] = 1;
            grad[1 + 1] = g * x1 + l2w * w[1], touched[2] = 1;
            grad[1 + 3] = g * x3 + l2w * w[3], touched[4] = 1;
            for (t = 0; t < 2; t++) {
                grad[6 + 2 + t] = g * x1 * (V[6 + t] * x3) + l2v * V[2 + t]; /* v1: x1 (sum - v1 x1) = x1 v3 x3 */
                grad[6 + 6 + t] = g * x3 * (V[2 + t] * x1) + l2v * V[6 + t];
                touched[6 + 2 + t] = touched[6 + 6 + t] = 1;
            }
            for (i = 0; i < 16; i++) {
                want_G[i] = touched[i] ? G0 + grad[i] * grad[i] : G0;
                want_theta[i] = touched[i] ? theta0[i] - lr * grad[i] / sqrt(want_G[i] + 1e-10) : theta0[i];
            }
            one_row_init(&row, 2, features, NULL, values, 1.0f);
            if (fit_ok(m, &row.csr, "first AdaGrad step")) {
                mfm_model_get_tensor(m, MFM_TENSOR_W0, 0, 0, got, 1, NULL);
                mfm_model_get_tensor(m, MFM_TENSOR_W0, 1, 0, gotG, 1, NULL);
                CHECK_NEAR(got[0], want_theta[0], 1e-5, 1e-7, "w0");
                CHECK_NEAR(gotG[0], want_G[0], 1e-5, 1e-7, "G of w0");
                mfm_model_get_tensor(m, MFM_TENSOR_W, 0, 0, got, 5, NULL);
                mfm_model_get_tensor(m, MFM_TENSOR_W, 1, 0, gotG, 5, NULL);
                for (i = 0; i < 5; i++) {
                    CHECK_NEAR(got[i], want_theta[1 + i], 1e-5, 1e-7, "w[%d]", i);
                    CHECK_NEAR(gotG[i], want_G[1 + i], 1e-5, 1e-7, "G of w[%d]", i);
                    if (!touched[1 + i]) CHECK(got[i] == w[i] && gotG[i] == 0.5f, "untouched w[%d] moved", i);
                }
                mfm_model_get_tensor(m, MFM_TENSOR_V, 0, 0, got, 10, NULL);
                mfm_model_get_tensor(m, MFM_TENSOR_V, 1, 0, gotG, 10, NULL);
                for (i = 0; i < 10; i++) {
                    CHECK_NEAR(got[i], want_theta[6 + i], 1e-5, 1e-7, "V[%d]", i);
                    CHECK_NEAR(gotG[i], want_G[6 + i], 1e-5, 1e-7, "G of V[%d]", i);
                    if (!touched[6 + i]) CHECK(got[i] == V[i] && gotG[i] == 0.5f, "untouched V[%d] moved", i);
                }
                mfm_model_reset_state(m);
                mfm_model_get_tensor(m, MFM_TENSOR_V, 1, 0, gotG, 10, NULL);
                for (i = 0; i < 10; i++) CHECK(gotG[i] == 0.5f, "after reset_state G of V[%d] is %g, expected 0.5", i, (double)gotG[i]);
            }
        }
        mfm_model_free(m);
    }
}

/* LIBFFM's algorithm, independently, in double: FFM without bias or linear term, r = 1 / sum x^2,
   t = sum_{a<b} <W[j_a, f_b], W[j_b, f_a]> x_a x_b r, y in {-1, +1}, kappa = -y e^{-yt} / (1 +
   e^{-yt}); for every pair and every d: g1 = lambda w1 + kappa x_a x_b r w2, g2 likewise (both
   from the old values), G += g^2, w -= eta g / sqrt(G); G starts at 1; rows in order, an update
   after each. W and G are n_features x n_fields x k. */
static void libffm_epoch(double *W, double *G, const mfm_csr *d, uint32_t F, int k, double eta, double lambda) {
    uint64_t r;
    for (r = 0; r < d->n_rows; r++) {
        const uint64_t lo = d->row_offsets[r], hi = d->row_offsets[r + 1];
        const double y = d->labels[r] > 0.5 ? 1.0 : -1.0;
        double norm = 0, t = 0, expnyt, kappa;
        uint64_t a, b;
        int q;
        for (a = lo; a < hi; a++) norm += (double)d->values[a] * d->values[a];
        norm = 1 / norm;
        for (a = lo; a < hi; a++)
            for (b = a + 1; b < hi; b++) {
                const double *w1 = W + ((size_t)d->features[a] * F + d->fields[b]) * k, *w2 = W + ((size_t)d->features[b] * F + d->fields[a]) * k;
                double dot = 0;
                for (q = 0; q < k; q++) dot += w1[q] * w2[q];
                t += dot * d->values[a] * d->values[b] * norm;
            }
        expnyt = exp(-y * t);
        kappa = -y * expnyt / (1 + expnyt);
        for (a = lo; a < hi; a++)
            for (b = a + 1; b < hi; b++) {
                const size_t i1 = ((size_t)d->features[a] * F + d->fields[b]) * k, i2 = ((size_t)d->features[b] * F + d->fields[a]) * k;
                const double kappa_v = kappa * d->values[a] * d->values[b] * norm;
                for (q = 0; q < k; q++) {
                    const double g1 = lambda * W[i1 + q] + kappa_v * W[i2 + q], g2 = lambda * W[i2 + q] + kappa_v * W[i1 + q];
                    G[i1 + q] += g1 * g1;
                    G[i2 + q] += g2 * g2;
                    W[i1 + q] -= eta / sqrt(G[i1 + q]) * g1;
                    W[i2 + q] -= eta / sqrt(G[i2 + q]) * g2;
                }
            }
    }
}

/* The library as LIBFFM (FFM, AdaGrad, normalize_rows, pairs_only, adagrad_init 1, init_scale
   1, batch 1, L2 on V = lambda), three partial fits over 80 rows in their order (one feature
   per field, values in [0.5, 1.5)), against libffm_epoch three times from the library's initial
   V: V and G to 1e-4 relative; w0 and w stay 0. */
void test_lifecycle_libffm_reference(void) {
    enum { ROWS = 80, FEATS = 30, FIELDS = 5, K = 4 };
    const double eta = 0.2, lambda = 1e-3;
    uint64_t offsets[ROWS + 1], rng = 4242, r;
    uint32_t features[ROWS * FIELDS], fields[ROWS * FIELDS];
    float values[ROWS * FIELDS], labels[ROWS];
    mfm_params p;
    mfm_model *m;
    mfm_csr d;
    const size_t nv = (size_t)FEATS * FIELDS * K;
    float *v0 = (float *)calloc(nv, sizeof(float)), *got = (float *)calloc(nv, sizeof(float));
    double *W = (double *)calloc(nv, sizeof(double)), *G = (double *)calloc(nv, sizeof(double));
    size_t i, nnz = 0;
    int ep;
    if (!v0 || !got || !W || !G) abort();
    offsets[0] = 0;
    for (r = 0; r < ROWS; r++) {
        uint32_t f;
        double t = 0;
        for (f = 0; f < FIELDS; f++) { /* one feature per field, fields in a row-dependent order */
            uint32_t fld = (f + (uint32_t)r) % FIELDS;
            features[nnz] = fld * (FEATS / FIELDS) + rng_below(&rng, FEATS / FIELDS);
            fields[nnz] = fld;
            values[nnz] = (float)rng_uniform(&rng, 0.5, 1.5);
            t += features[nnz] % 3 == 0 ? 1 : -0.5;
            nnz++;
        }
        offsets[r + 1] = nnz;
        labels[r] = t + rng_uniform(&rng, -1, 1) > 0 ? 1.0f : 0.0f;
    }
    d = csr_of(ROWS, offsets, features, fields, values, labels);
    memset(&p, 0, sizeof p);
    p.model = MFM_MODEL_FFM;
    p.optimizer = MFM_OPTIMIZER_ADAGRAD;
    p.k = K;
    p.batch_size = 1;
    p.learning_rate = eta;
    p.l2_factors = lambda;
    p.normalize_rows = 1;
    p.pairs_only = 1;
    p.adagrad_init = 1;
    p.init_scale = 1;
    p.seed = 31;
    m = make_model(&p, FEATS, FIELDS, 1);
    if (m && CHECK(mfm_model_get_tensor(m, MFM_TENSOR_V, 0, 0, v0, nv, NULL) == MFM_OK, "reading the initial V")) {
        int ok = 1;
        for (i = 0; i < nv; i++) {
            W[i] = v0[i];
            G[i] = 1;
        }
        CHECK(v0[0] >= 0 && v0[0] < 0.5f, "the initial V is not in U[0, 1/sqrt(k))");
        for (ep = 0; ep < 3 && ok; ep++) {
            libffm_epoch(W, G, &d, FIELDS, K, eta, lambda);
            ok = partial_ok(m, &d, "LIBFFM epoch");
        }
        if (ok) {
            float w[FEATS + 1];
            int moved = 0, nonzero = 0;
            mfm_model_get_tensor(m, MFM_TENSOR_V, 0, 0, got, nv, NULL);
            for (i = 0; i < nv; i++) {
                moved += got[i] != v0[i];
                CHECK_NEAR(got[i], W[i], 1e-4, 1e-6, "V[%lu] against the LIBFFM-style trainer", (unsigned long)i);
            }
            mfm_model_get_tensor(m, MFM_TENSOR_V, 1, 0, got, nv, NULL);
            for (i = 0; i < nv; i++) CHECK_NEAR(got[i], G[i], 1e-4, 1e-6, "G of V[%lu] against the LIBFFM-style trainer", (unsigned long)i);
            CHECK(moved > 100, "only %d of V moved (the test would prove little)", moved);
            mfm_model_get_tensor(m, MFM_TENSOR_W0, 0, 0, w, 1, NULL);
            mfm_model_get_tensor(m, MFM_TENSOR_W, 0, 0, w + 1, FEATS, NULL);
            for (i = 0; i <= FEATS; i++) nonzero += w[i] != 0;
            CHECK(nonzero == 0, "%d of w0 and w moved under pairs_only", nonzero);
        }
    }
    mfm_model_free(m);
    free(v0);
    free(got);
    free(W);
    free(G);
}

/* n = 0 with out = NULL, which the API allows (it refuses only n > 0 with out NULL): OK, 0
   found. Its own test, last in the list: the call once reached qsort(NULL, 0, ...), undefined
   behaviour that UBSan (make build/tests-asan) stops the whole program on. */
void test_lifecycle_top_interactions_n_zero(void) {
    mfm_params p = lc_params(MFM_MODEL_FM, MFM_TASK_BINARY, MFM_OPTIMIZER_SGD);
    mfm_model *m = make_model(&p, 6, 0, 1);
    size_t found = 99;
    mfm_error e;
    mfm_status st;
    if (!m) return;
    st = mfm_top_interactions(m, NULL, 0, 0, NULL, &found, &e);
    CHECK(st == MFM_OK && found == 0, "n = 0, out NULL: status %d, %lu found", (int)st, (unsigned long)found);
    mfm_model_free(m);
}
