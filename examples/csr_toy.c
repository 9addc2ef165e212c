/* csr_toy.c - your own arrays in, no files: why a pairwise model beats a linear one.

   compile (from examples/):  cc -std=c99 -O2 -I.. csr_toy.c -o csr_toy -lm
   run:                       ./csr_toy

   A toy "who buys what": field 0 is the user's age group, field 1 the product's category,
   field 2 the weekday. Whether a row is a purchase depends on the PAIR (age group, category)
   alone: young users buy games, older users buy books. Each feature by itself says nothing,
   so a linear model (params.linear_only = 1) does no better than a coin, while FM, FFM and FwFM,
   which learn a factor vector per feature and score pairs by their dot products, find the
   interaction. The data lives in plain CSR arrays that mfm_csr borrows (no copies).
*/
#define MODERN_FM_IMPLEMENTATION /* in exactly one file of a program, before the include */
#include "modern_fm.h"

#include <stdio.h>

static uint64_t rng_state = 7;
static double uniform(void) { /* xorshift64*: enough randomness for toy data */
    rng_state ^= rng_state >> 12, rng_state ^= rng_state << 25, rng_state ^= rng_state >> 27;
    return (double)((rng_state * 2685821657736338717ull) >> 11) / 9007199254740992.0;
}

/* Feature ids: 0..5 age groups, 6..13 categories, 14..20 weekdays. Every row has one feature
   of each field, all with value 1 (values = NULL says so). */
enum { N_AGES = 6, N_CATEGORIES = 8, N_DAYS = 7, FIELDS = 3, MAX_ROWS = 20000 };

typedef struct toy {
    uint64_t row_offsets[MAX_ROWS + 1];
    uint32_t features[MAX_ROWS * FIELDS];
    uint32_t fields[MAX_ROWS * FIELDS];
    float labels[MAX_ROWS];
    mfm_csr view;
} toy;

static void make_toy(toy *t, uint64_t n_rows) {
    uint64_t r;
    int j;
    for (r = 0; r < n_rows; r++) {
        int age = (int)(uniform() * N_AGES), category = (int)(uniform() * N_CATEGORIES), day = (int)(uniform() * N_DAYS);
        /* even categories are games, odd ones books; the lower half of the age groups is young */
        int young = age < N_AGES / 2, game = category % 2 == 0;
        double p = young == game ? 0.8 : 0.2; /* the planted interaction */
        uint32_t feature[FIELDS];
        feature[0] = (uint32_t)age;
        feature[1] = (uint32_t)(N_AGES + category);
        feature[2] = (uint32_t)(N_AGES + N_CATEGORIES + day);
        t->row_offsets[r] = r * FIELDS;
        for (j = 0; j < FIELDS; j++) {
            t->features[r * FIELDS + j] = feature[j];
            t->fields[r * FIELDS + j] = (uint32_t)j;
        }
        t->labels[r] = uniform() < p ? 1.0f : 0.0f;
    }
    t->row_offsets[n_rows] = n_rows * FIELDS;

    /* The view: zero first (every field that is left alone means "none" or "infer"). */
    t->view = (mfm_csr){0};
    t->view.n_rows = n_rows;
    t->view.row_offsets = t->row_offsets;
    t->view.features = t->features;
    t->view.fields = t->fields; /* FFM and FwFM need fields; FM ignores them */
    t->view.values = NULL;      /* every value is 1 */
    t->view.labels = t->labels;
    /* n_features and n_fields stay 0: the library infers them (largest id + 1). */
}

static toy train, test; /* static: a few hundred kilobytes, too much for some stacks */

/* Train one kind of model on the training toy and return its AUC on the test toy (or -1). */
static double train_and_test(const char *name, mfm_model_type type, int linear_only) {
    mfm_params p = {0}; /* zero = the defaults */
    mfm_model *model = NULL;
    mfm_metrics metrics = {0};
    mfm_error e;
    p.model = type;
    p.linear_only = linear_only;
    p.k = 4;
    p.n_epochs = 5;
    if (mfm_train(&p, &train.view, &model, &e) != MFM_OK || mfm_evaluate(model, &test.view, &metrics, &e) != MFM_OK) {
        fprintf(stderr, "csr_toy: %s: %s\n", name, e.message);
        mfm_model_free(model);
        return -1;
    }
    printf("%-8s test AUC %.4f  logloss %.4f\n", name, metrics.auc, metrics.logloss);

    if (type == MFM_MODEL_FM && !linear_only) {
        /* What did FM learn? Its strongest pairs of an age group and a category. (The list
           holds every pair of features the data has; FM knows no fields, so the toy's id
           ranges say which feature is which.) */
        mfm_interaction top[256]; /* 21 features: 210 pairs */
        size_t i, n_found = 0, shown = 0;
        if (mfm_top_interactions(model, &train.view, 0, 256, top, &n_found, &e) == MFM_OK)
            for (i = 0; i < n_found && shown < 2; i++)
                if (top[i].feature_a < N_AGES && top[i].feature_b >= N_AGES && top[i].feature_b < N_AGES + N_CATEGORIES) {
                    unsigned age = top[i].feature_a, category = top[i].feature_b - N_AGES;
                    printf("         learned: age group %u (%s) x category %u (%s): %+.3f\n", age, age < N_AGES / 2 ? "young" : "older", category,
                           category % 2 == 0 ? "games" : "books", top[i].value);
                    shown++;
                }
    }
    if (type == MFM_MODEL_FWFM) { /* FwFM learns one weight per pair of fields */
        float r[FIELDS * FIELDS];
        if (mfm_model_get_tensor(model, MFM_TENSOR_R, MFM_SLOT_PARAM, 0, r, FIELDS * FIELDS, &e) == MFM_OK)
            printf("         field-pair weights: age x category %+.3f, age x weekday %+.3f, category x weekday %+.3f\n", r[0 * FIELDS + 1],
                   r[0 * FIELDS + 2], r[1 * FIELDS + 2]);
    }
    mfm_model_free(model);
    return metrics.auc;
}

int main(void) {
    double linear, fm, ffm, fwfm;
    make_toy(&train, 20000);
    make_toy(&test, 5000);
    printf("20000 training rows, 5000 test rows; a purchase depends on the pair (age group, category)\n");

    linear = train_and_test("linear", MFM_MODEL_FM, 1);
    fm = train_and_test("FM", MFM_MODEL_FM, 0);
    ffm = train_and_test("FFM", MFM_MODEL_FFM, 0);
    fwfm = train_and_test("FwFM", MFM_MODEL_FWFM, 0);
    if (linear < 0 || fm < 0 || ffm < 0 || fwfm < 0) return 1;

    /* The best possible AUC here is 0.8; the linear model has nothing to find. */
    if (fm > linear + 0.1 && ffm > linear + 0.1 && fwfm > linear + 0.1) {
        printf("every pairwise model beats the linear one by more than 0.1 AUC: ok\n");
        return 0;
    }
    printf("a pairwise model does not beat the linear one by 0.1 AUC: FAILED\n");
    return 1;
}
