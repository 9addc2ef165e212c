/* train_file.c - the everyday workflow: libffm files in, a trained FFM model file out.

   compile (from examples/):  cc -std=c99 -O2 -I.. train_file.c -o train_file -lm
   run:                       ./train_file                   (writes and uses example_train.ffm
                                                              and example_valid.ffm here)
                              ./train_file TRAIN.ffm VALID.ffm   (your own files)

   1. reads a training and a validation file (libffm text: "label field:feature:value ...")
   2. trains a field-aware FM, watching the validation logloss after every epoch and stopping
      when it has not improved for `patience` epochs (the best epoch is kept)
   3. evaluates the model on the validation rows (logloss, AUC, accuracy)
   4. saves it to example_model.mfm, loads it back and checks the predictions are identical
*/
#define MODERN_FM_IMPLEMENTATION /* in exactly one file of a program, before the include */
#include "modern_fm.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- a small data file to play with, when no files are given ---------------------------- */

static uint64_t rng_state = 42;
static double uniform(void) { /* xorshift64*: enough randomness for toy data */
    rng_state ^= rng_state >> 12, rng_state ^= rng_state << 25, rng_state ^= rng_state >> 27;
    return (double)((rng_state * 2685821657736338717ull) >> 11) / 9007199254740992.0;
}

/* 6 fields with 40 features each (feature id = 40 * field + value). Every feature has a hidden
   "taste" between -1.7 and 1.7, and the click probability depends on the products of the tastes
   of fields 0 and 1, and of fields 2 and 3: pairwise interactions, which FFM learns. Fields 4
   and 5 are noise. */
enum { N_FIELDS = 6, PER_FIELD = 40 };
static double taste[N_FIELDS * PER_FIELD];

static int write_libffm(const char *path, int n_rows) {
    FILE *f = fopen(path, "w");
    int r, field;
    if (!f) return 0;
    for (r = 0; r < n_rows; r++) {
        unsigned feature[N_FIELDS];
        double score;
        for (field = 0; field < N_FIELDS; field++) feature[field] = (unsigned)(field * PER_FIELD + (int)(uniform() * PER_FIELD));
        score = -0.3 + 1.5 * taste[feature[0]] * taste[feature[1]] + 1.5 * taste[feature[2]] * taste[feature[3]];
        fprintf(f, "%d", uniform() < 1 / (1 + exp(-score)));
        for (field = 0; field < N_FIELDS; field++) fprintf(f, " %d:%u:1", field, feature[field]);
        fputc('\n', f);
    }
    return fclose(f) == 0;
}

/* ---- training ---------------------------------------------------------------------------- */

/* Called after every epoch: a progress line with the validation metric early stopping watches. */
static int print_epoch(void *user, const mfm_epoch_report *r) {
    (void)user;
    printf("  epoch %2d  train loss %.4f  validation logloss %.4f  (best so far: epoch %d)\n", r->epoch, r->train_loss, r->validation,
           r->best_epoch);
    return 0; /* nonzero would stop training */
}

static int fail(const char *what, const mfm_error *e) {
    fprintf(stderr, "train_file: %s failed: %s\n", what, e->message);
    return 1;
}

int main(int argc, char **argv) {
    const char *train_path = "example_train.ffm", *valid_path = "example_valid.ffm", *model_path = "example_model.mfm";
    mfm_read_options options;
    mfm_dataset *train = NULL, *valid = NULL;
    mfm_dataset_info train_info, valid_info;
    mfm_csr train_rows, valid_rows;
    mfm_params p;
    mfm_model *model = NULL, *loaded = NULL;
    mfm_model_info model_info;
    mfm_metrics metrics = {0};
    mfm_error e;
    float *before = NULL, *after = NULL;
    uint32_t n_features, n_fields;
    int i, status = 1;

    if (argc == 3) {
        train_path = argv[1], valid_path = argv[2];
    } else if (argc == 1) {
        for (i = 0; i < N_FIELDS * PER_FIELD; i++) taste[i] = 3.4 * uniform() - 1.7;
        if (!write_libffm(train_path, 10000) || !write_libffm(valid_path, 1000)) {
            fprintf(stderr, "train_file: could not write %s and %s\n", train_path, valid_path);
            return 1;
        }
        printf("wrote %s (10000 rows) and %s (1000 rows)\n", train_path, valid_path);
    } else {
        fprintf(stderr, "usage: train_file [TRAIN.ffm VALID.ffm]\n");
        return 2;
    }

    /* Read both files. All-zero options: detect the format, binary 0/1 labels, every core. */
    memset(&options, 0, sizeof options);
    if (mfm_dataset_read(train_path, &options, &train, &e) != MFM_OK) return fail("reading the training file", &e);
    if (mfm_dataset_read(valid_path, &options, &valid, &e) != MFM_OK) {
        mfm_dataset_free(train);
        return fail("reading the validation file", &e);
    }
    train_rows = mfm_dataset_csr(train); /* borrowed views, valid until mfm_dataset_free */
    valid_rows = mfm_dataset_csr(valid);
    mfm_dataset_get_info(train, &train_info);
    mfm_dataset_get_info(valid, &valid_info);
    printf("read %llu training rows (%u features, %u fields) and %llu validation rows\n", (unsigned long long)train_info.n_rows,
           train_info.n_features, train_info.n_fields, (unsigned long long)valid_info.n_rows);

    /* Zero means "the default" in every field of mfm_params; set only what matters here. */
    memset(&p, 0, sizeof p);
    p.model = MFM_MODEL_FFM;
    p.k = 4;
    p.n_epochs = 50;      /* at most; early stopping usually ends sooner */
    p.patience = 3;       /* stop after 3 epochs without a better validation logloss */
    p.on_epoch = print_epoch;

    /* The model must cover every feature id of both files (a validation file may hold an id the
       training file lacks), so it is created with the larger shape, then trained. With one file,
       mfm_train(&p, &train_rows, &model, &e) does both and infers the shape from the data. */
    n_features = train_info.n_features > valid_info.n_features ? train_info.n_features : valid_info.n_features;
    n_fields = train_info.n_fields > valid_info.n_fields ? train_info.n_fields : valid_info.n_fields;
    if (mfm_model_create(&p, n_features, n_fields, 0, &model, &e) != MFM_OK) {
        fail("mfm_model_create", &e);
        goto done;
    }
    printf("training FFM (k = 4) with early stopping on the validation file:\n");
    if (mfm_fit_validated(model, &train_rows, &valid_rows, &e) != MFM_OK) {
        fail("mfm_fit_validated", &e);
        goto done;
    }
    mfm_model_get_info(model, &model_info);
    printf("kept the best epoch: %llu\n", (unsigned long long)model_info.epochs_trained);

    /* Evaluate on the validation rows. (In real work, also keep a test file that played no part
       in choosing the epoch, and report that.) */
    if (mfm_evaluate(model, &valid_rows, &metrics, &e) != MFM_OK) {
        fail("mfm_evaluate", &e);
        goto done;
    }
    printf("validation: logloss %.4f  AUC %.4f  accuracy %.4f\n", metrics.logloss, metrics.auc, metrics.accuracy);

    /* Save without the optimizer state (smaller; enough to predict), then load it back. */
    if (mfm_model_save(model, model_path, 0, &e) != MFM_OK) {
        fail("mfm_model_save", &e);
        goto done;
    }
    if (mfm_model_load(model_path, &loaded, &e) != MFM_OK) {
        fail("mfm_model_load", &e);
        goto done;
    }
    before = (float *)malloc(valid_info.n_rows * sizeof *before);
    after = (float *)malloc(valid_info.n_rows * sizeof *after);
    if (!before || !after) {
        fprintf(stderr, "train_file: out of memory\n");
        goto done;
    }
    if (mfm_predict(model, &valid_rows, MFM_OUTPUT_PROBABILITY, before, valid_info.n_rows, &e) != MFM_OK ||
        mfm_predict(loaded, &valid_rows, MFM_OUTPUT_PROBABILITY, after, valid_info.n_rows, &e) != MFM_OK) {
        fail("mfm_predict", &e);
        goto done;
    }
    printf("first validation rows: p(click) = %.4f %.4f %.4f\n", before[0], before[1], before[2]);
    if (memcmp(before, after, valid_info.n_rows * sizeof *before) != 0) {
        printf("saved to %s and loaded back: predictions differ: FAILED\n", model_path);
        goto done;
    }
    printf("saved to %s and loaded back: identical predictions: ok\n", model_path);
    status = 0;

done:
    free(before);
    free(after);
    mfm_model_free(model); /* every free function accepts NULL */
    mfm_model_free(loaded);
    mfm_dataset_free(train);
    mfm_dataset_free(valid);
    return status;
}
