/* demo.c - what factorization machines buy you, in under a minute.

   Generates click data whose labels depend on planted pairwise interactions between fields
   (bench/synth.h), then trains a linear model, FM, FFM and FwFM on the same rows and compares
   them on held-out rows. The linear model can only learn per-feature biases; the other three
   also learn the interactions, which shows up as a clearly lower logloss and higher AUC. */
#define MODERN_FM_IMPLEMENTATION
#include "../modern_fm.h"

#include "common.h"
#include "synth.h"

#include <inttypes.h>
#include <string.h>

typedef struct demo_model {
    const char *name;
    mfm_model_type model;
    int linear_only, k;
    double learning_rate;
} demo_model;

/* Per-epoch progress: a long run must be visible while it runs. */
static int on_epoch(void *user, const mfm_epoch_report *r) {
    printf("  %-6s epoch %d/%d  train loss %.4f  %5.2f s\n", (const char *)user, r->epoch, r->n_epochs, r->train_loss, r->seconds);
    fflush(stdout);
    return 0; /* keep going */
}

int main(void) {
    static const demo_model models[] = {
        {"linear", MFM_MODEL_FM, 1, 1, 0.05},
        {"FM", MFM_MODEL_FM, 0, 8, 0.05},
        {"FFM", MFM_MODEL_FFM, 0, 4, 0.05},
        {"FwFM", MFM_MODEL_FWFM, 0, 8, 0.05},
    };
    enum { N_MODELS = sizeof models / sizeof models[0], EPOCHS = 3 };
    const uint64_t n_train = 100000, n_test = 20000;
    mfm_metrics met[N_MODELS];
    double seconds[N_MODELS], ctr = 0;
    synth_spec s;
    synth_data all, test_rows;
    mfm_csr train, test;
    uint64_t r;
    int i;

    memset(&s, 0, sizeof s);
    s.n_rows = n_train + n_test;
    s.n_fields = 20;
    s.n_features = 1000; /* 50 per field: enough rows per feature to learn its interactions */
    s.per_field = 1;
    s.zipf_s = 1.1;
    s.hidden_k = 4;
    s.signal = 3.0; /* the interactions carry most of what is predictable */
    s.base_rate = 0.25;
    s.seed = 2024;
    if (synth_generate(&s, &all) != 0 || synth_split(&all, n_train, all.n_rows, &test_rows) != 0) {
        fprintf(stderr, "demo: could not generate the data (out of memory?)\n");
        return 1;
    }
    train = synth_view(&all, 0, n_train);
    test = synth_csr(&test_rows);
    for (r = 0; r < n_train; r++) ctr += train.labels[r];
    ctr /= (double)n_train;
    printf("modern_fm %s demo: %" PRIu64 " training and %" PRIu64 " test rows, %u fields, one of %u features per field,\n"
           "click rate %.1f%%, labels from planted pairwise interactions (bench/synth.h)\n\n",
           mfm_version_string(), n_train, n_test, s.n_fields, s.n_features, 100 * ctr);

    for (i = 0; i < N_MODELS; i++) {
        mfm_params p = {0};
        mfm_model *m = NULL;
        mfm_error e;
        double t0;
        p.model = models[i].model;
        p.linear_only = models[i].linear_only;
        p.k = models[i].k;
        p.optimizer = MFM_OPTIMIZER_ADAGRAD;
        p.learning_rate = models[i].learning_rate;
        p.n_epochs = EPOCHS;
        p.seed = 1;
        p.on_epoch = on_epoch;
        p.user = (void *)models[i].name;
        t0 = bench_now();
        bench_check(mfm_train(&p, &train, &m, &e), &e, "mfm_train");
        seconds[i] = bench_now() - t0;
        bench_check(mfm_evaluate(m, &test, &met[i], &e), &e, "mfm_evaluate");
        mfm_model_free(m);
    }

    printf("\n%-8s %13s %9s %9s %13s\n", "model", "test logloss", "test AUC", "train s", "train rows/s");
    for (i = 0; i < N_MODELS; i++)
        printf("%-8s %13.4f %9.4f %9.2f %13.0f\n", models[i].name, met[i].logloss, met[i].auc, seconds[i], (double)n_train * EPOCHS / seconds[i]);
    printf("\n(a model that always predicts the click rate has logloss %.4f and AUC 0.5)\n", -(ctr * log(ctr) + (1 - ctr) * log(1 - ctr)));
    synth_free(&test_rows);
    synth_free(&all);
    return 0;
}
