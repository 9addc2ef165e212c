/* resume_stream.c - training that does not happen all at once.

   compile (from examples/):  cc -std=c99 -O2 -I.. resume_stream.c -o resume_stream -lm
   run:                       ./resume_stream                (writes and uses example_stream.ffm)
                              ./resume_stream DATA.ffm       (your own libffm file)

   Part 1, resume: train 3 epochs, save the model WITH its optimizer state, load it (as another
   process would, later), train 3 more epochs. The result is the model that 6 epochs in one go
   give, bit for bit: the file keeps the AdaGrad accumulators and the epoch count, which seeds
   each epoch's shuffle.

   Part 2, stream: read the file 1000 rows at a time, as one would read a log that keeps
   growing, parse each chunk from memory (mfm_dataset_parse) and learn it with mfm_partial_fit
   (one pass, rows in their order). Before learning a chunk the model is scored on it: rows it
   has never seen, so the AUC printed per chunk is an honest estimate that grows as it learns.
*/
#define MODERN_FM_IMPLEMENTATION /* in exactly one file of a program, before the include */
#include "modern_fm.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- a data file, when none is given: 4 fields, labels from two planted field pairs ------- */

static uint64_t rng_state = 3;
static double uniform(void) { /* xorshift64*: enough randomness for toy data */
    rng_state ^= rng_state >> 12, rng_state ^= rng_state << 25, rng_state ^= rng_state >> 27;
    return (double)((rng_state * 2685821657736338717ull) >> 11) / 9007199254740992.0;
}

static int write_example_file(const char *path, int n_rows) {
    enum { N_FIELDS = 4, PER_FIELD = 20 };
    double taste[N_FIELDS * PER_FIELD];
    FILE *f = fopen(path, "w");
    int r, j;
    if (!f) return 0;
    for (j = 0; j < N_FIELDS * PER_FIELD; j++) taste[j] = 3.4 * uniform() - 1.7;
    for (r = 0; r < n_rows; r++) {
        int feature[N_FIELDS];
        double score;
        for (j = 0; j < N_FIELDS; j++) feature[j] = j * PER_FIELD + (int)(uniform() * PER_FIELD);
        score = 1.5 * taste[feature[0]] * taste[feature[1]] + 1.5 * taste[feature[2]] * taste[feature[3]];
        fprintf(f, "%d", uniform() < 1 / (1 + exp(-score)));
        for (j = 0; j < N_FIELDS; j++) fprintf(f, " %d:%d:1", j, feature[j]);
        fputc('\n', f);
    }
    return fclose(f) == 0;
}

static int fail(const char *what, const mfm_error *e) {
    fprintf(stderr, "resume_stream: %s: %s\n", what, e->message);
    return 0;
}

/* The model's probabilities for every row of data into a new array (NULL on failure). */
static float *predict_all(const mfm_model *model, const mfm_csr *data) {
    float *out = (float *)malloc((size_t)data->n_rows * sizeof *out);
    mfm_error e;
    if (out && mfm_predict(model, data, MFM_OUTPUT_PROBABILITY, out, (size_t)data->n_rows, &e) != MFM_OK) {
        fail("mfm_predict", &e);
        free(out);
        out = NULL;
    }
    return out;
}

static int same_predictions(const mfm_model *a, const mfm_model *b, const mfm_csr *data) {
    float *pa = predict_all(a, data), *pb = predict_all(b, data);
    int same = pa && pb && memcmp(pa, pb, (size_t)data->n_rows * sizeof *pa) == 0;
    free(pa);
    free(pb);
    return same;
}

/* ---- part 1: save with the optimizer state, load, train on ------------------------------- */

static int resume(const mfm_csr *data) {
    const char *path = "example_resume.mfm";
    mfm_params p = {0};
    mfm_model *first = NULL, *resumed = NULL, *in_one_go = NULL;
    mfm_model_info info;
    mfm_metrics m3 = {0}, m6 = {0};
    mfm_error e;
    int ok = 0;

    p.model = MFM_MODEL_FFM;
    p.k = 4;
    p.n_epochs = 3;
    if (mfm_train(&p, data, &first, &e) != MFM_OK || mfm_evaluate(first, data, &m3, &e) != MFM_OK) {
        fail("training 3 epochs", &e);
        goto done;
    }
    /* with_state = 1: the optimizer's accumulators go into the file too. A model saved
       without them (with_state = 0, for serving) predicts the same but refuses to train on
       until mfm_model_reset_state, since it could not continue where it stopped. */
    if (mfm_model_save(first, path, 1, &e) != MFM_OK) {
        fail("mfm_model_save", &e);
        goto done;
    }

    /* Later, perhaps in another process: load and continue (the file's params say 3 epochs
       per call; mfm_model_set_params could change that, or the learning rate). */
    if (mfm_model_load(path, &resumed, &e) != MFM_OK || mfm_fit(resumed, data, &e) != MFM_OK || mfm_evaluate(resumed, data, &m6, &e) != MFM_OK) {
        fail("loading and training 3 more epochs", &e);
        goto done;
    }
    mfm_model_get_info(resumed, &info);
    printf("resume: training logloss %.4f after 3 epochs, %.4f after loading %s and 3 more (%llu epochs in all)\n", m3.logloss, m6.logloss,
           path, (unsigned long long)info.epochs_trained);

    p.n_epochs = 6;
    if (mfm_train(&p, data, &in_one_go, &e) != MFM_OK) {
        fail("training 6 epochs", &e);
        goto done;
    }
    ok = same_predictions(resumed, in_one_go, data);
    printf("resume: 3 epochs + save + load + 3 epochs equal 6 epochs in one go, bit for bit: %s\n", ok ? "ok" : "FAILED");
done:
    mfm_model_free(first);
    mfm_model_free(resumed);
    mfm_model_free(in_one_go);
    return ok;
}

/* ---- part 2: a stream of chunks ------------------------------------------------------------ */

/* Appends the next `n_lines` lines of f to buf (growing it); returns the number of lines read. */
static int read_lines(FILE *f, int n_lines, char **buf, size_t *size, size_t *capacity) {
    int c, lines = 0;
    *size = 0;
    while (lines < n_lines && (c = fgetc(f)) != EOF) {
        if (*size == *capacity) {
            size_t grown = *capacity ? 2 * *capacity : 65536;
            char *p = (char *)realloc(*buf, grown);
            if (!p) return -1;
            *buf = p, *capacity = grown;
        }
        (*buf)[(*size)++] = (char)c;
        lines += c == '\n';
    }
    return lines + (*size > 0 && (*buf)[*size - 1] != '\n'); /* a last line without newline */
}

static int stream(const char *path, uint32_t n_features, uint32_t n_fields, const mfm_csr *all_rows) {
    enum { CHUNK_ROWS = 1000 };
    mfm_params p = {0};
    mfm_model *model = NULL, *one_pass = NULL;
    mfm_read_options options;
    mfm_error e;
    char *buf = NULL;
    size_t size = 0, capacity = 0;
    int chunk = 0, n, ok = 0;
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "resume_stream: cannot open %s\n", path);
        return 0;
    }
    memset(&options, 0, sizeof options);
    options.n_threads = 1; /* small chunks: threads would cost more than they save */

    /* A stream cannot infer the shape from data it has not seen yet: the model is made for
       a fixed id space up front (in production often ids hashed into 2^20 buckets). */
    p.model = MFM_MODEL_FFM;
    p.k = 4;
    /* One pass over a few thousand rows: AdaGrad's default accumulator (1) keeps the first
       steps small, which pays over many epochs of rare ids (docs/DEFAULTS.md) but learns this
       stream's few, frequent ids too slowly; a smaller one learns them in one pass. */
    p.adagrad_init = 0.1;
    if (mfm_model_create(&p, n_features, n_fields, 0, &model, &e) != MFM_OK) {
        fail("mfm_model_create", &e);
        goto done;
    }
    while ((n = read_lines(f, CHUNK_ROWS, &buf, &size, &capacity)) > 0) {
        mfm_dataset *ds = NULL;
        mfm_csr rows;
        mfm_metrics before = {0};
        if (mfm_dataset_parse(buf, size, "stream chunk", &options, &ds, &e) != MFM_OK) {
            fail("mfm_dataset_parse", &e);
            goto done;
        }
        rows = mfm_dataset_csr(ds);
        /* score first (rows not yet learned), then learn them */
        if (mfm_evaluate(model, &rows, &before, &e) != MFM_OK || mfm_partial_fit(model, &rows, &e) != MFM_OK) {
            mfm_dataset_free(ds);
            fail("chunk", &e);
            goto done;
        }
        chunk++;
        printf("stream: chunk %d (%d rows): AUC %.4f on its rows before learning them\n", chunk, n, before.auc);
        mfm_dataset_free(ds);
    }
    if (n < 0) {
        fprintf(stderr, "resume_stream: out of memory\n");
        goto done;
    }

    /* mfm_partial_fit over consecutive chunks equals one pass over all the rows, bit for bit. */
    if (mfm_model_create(&p, n_features, n_fields, 0, &one_pass, &e) != MFM_OK || mfm_partial_fit(one_pass, all_rows, &e) != MFM_OK) {
        fail("one pass over all rows", &e);
        goto done;
    }
    ok = same_predictions(model, one_pass, all_rows);
    printf("stream: %d chunks equal one pass over all %llu rows, bit for bit: %s\n", chunk, (unsigned long long)all_rows->n_rows, ok ? "ok" : "FAILED");
done:
    fclose(f);
    free(buf);
    mfm_model_free(model);
    mfm_model_free(one_pass);
    return ok;
}

int main(int argc, char **argv) {
    const char *path = argc > 1 ? argv[1] : "example_stream.ffm";
    mfm_read_options options;
    mfm_dataset *ds = NULL;
    mfm_dataset_info info;
    mfm_csr rows;
    mfm_error e;
    int ok;

    if (argc == 1) {
        if (!write_example_file(path, 6000)) {
            fprintf(stderr, "resume_stream: could not write %s\n", path);
            return 1;
        }
        printf("wrote %s (6000 rows)\n", path);
    }
    memset(&options, 0, sizeof options);
    if (mfm_dataset_read(path, &options, &ds, &e) != MFM_OK) return !fail("mfm_dataset_read", &e);
    rows = mfm_dataset_csr(ds);
    mfm_dataset_get_info(ds, &info);

    ok = resume(&rows);
    ok &= stream(path, info.n_features, info.n_fields, &rows);
    mfm_dataset_free(ds);
    return ok ? 0 : 1;
}
