/* make_corpus.c - writes the seed corpora of the fuzzers with the library itself:
       cc -std=c99 -o build/make-corpus tests/fuzz/make_corpus.c -pthread -lm && ./build/make-corpus
   (run from the project root; it rewrites tests/fuzz/corpus_dataset and tests/fuzz/corpus_model).
   Dataset seeds start with fuzz_dataset.c's option byte. Model seeds are small saved models, one
   of them with its checksum zeroed (fuzz_model.c then fills it in), and the format-1 files of
   tests/data. */
#define MODERN_FM_IMPLEMENTATION
#include "../../modern_fm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void put(const char *dir, const char *name, unsigned char option, const void *bytes, size_t n) {
    char path[256];
    FILE *f;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    f = fopen(path, "wb");
    if (!f) {
        perror(path);
        exit(1);
    }
    if (option != 0xFF) fputc(option, f);
    fwrite(bytes, 1, n, f);
    fclose(f);
}

static unsigned char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    unsigned char *b = (unsigned char *)malloc(1 << 20);
    *n = f ? fread(b, 1, 1 << 20, f) : 0;
    if (f) fclose(f);
    return b;
}

static void text(const char *dir, const char *name, unsigned char option, const char *s) { put(dir, name, option, s, strlen(s)); }

int main(void) {
    const char *dd = "tests/fuzz/corpus_dataset", *md = "tests/fuzz/corpus_model", *tmp = "build/make-corpus.tmp";
    /* option byte: format (0 auto, 1 libffm, 2 libsvm, 3 binary) | task << 2 | 16 two threads | 32 fix checksum | 64 round trip */
    text(dd, "ffm_quirks", 0x40, "1 2:5:0.5 0:3:1 1:7:2\n0 1:4:1 1:6:0.25 \t\n\n   \n1 0:5:1\t3:5:-1.5\r\n0\n1 0:0:3e-2 9:12:1");
    text(dd, "svm_labels", 0x42, "-1 1:1 3:1.0\n+1 2:1e0 10:01\n0 5:1\r\n1\n");
    text(dd, "regression", 0x48 | 16, "-2.5 0:1:1\n1e3 0:2:0.1\n0.1 1:1:1e-45\n-0 0:1:3.4e38\n+7.25e-3\n");
    text(dd, "multiclass", 0x4C, "0 1:1\n4 2:0.5\n2.0 1:1\n1e1 3:1\n");
    text(dd, "unlabeled", 0x40, "0:1:1 1:2:0.5\n\n2:3:1\n");
    text(dd, "bad_value", 0x00, "1 0:1:1\n0 0:1:abc\n");
    text(dd, "bad_id", 0x00, "1 0:4294967295:1\n");
    text(dd, "numbers", 0x48, "0.1 0:1:16777217 1:2:1.00000005960464477539062 2:3:7.006492321624087e-46 3:4:.5 4:5:5.\n");
    {
        static const uint64_t offsets[4] = {0, 2, 2, 5};
        static const uint32_t features[5] = {3, 7, 0, 1, 2}, fields[5] = {0, 2, 1, 0, 3};
        static const float values[5] = {0.5f, 1, 0.1f, -2, 3e-7f}, labels[3] = {1, 0, 1}, weights[3] = {1, 0.5f, 2};
        mfm_csr d;
        mfm_error e;
        unsigned char *b;
        size_t n;
        memset(&d, 0, sizeof d);
        d.n_rows = 3;
        d.row_offsets = offsets;
        d.features = features;
        d.fields = fields;
        d.values = values;
        d.labels = labels;
        d.weights = weights;
        if (mfm_dataset_write(&d, tmp, MFM_FORMAT_BINARY, &e) != MFM_OK) return fprintf(stderr, "%s\n", e.message), 1;
        b = slurp(tmp, &n);
        remove(tmp);
        put(dd, "binary", 0x03 | 32 | 64, b, n);
        put(dd, "binary_auto", 0x00, b, n);
        free(b);
    }
    {
        static const float cw[3] = {1, 2, 0.5f};
        static const struct {
            mfm_model_type model;
            mfm_task task;
            mfm_optimizer opt;
            int with_state, zero_checksum;
            const char *name;
        } seeds[] = {{MFM_MODEL_FM, MFM_TASK_BINARY, MFM_OPTIMIZER_SGD, 0, 0, "fm_binary_sgd"},
                     {MFM_MODEL_FFM, MFM_TASK_MULTICLASS, MFM_OPTIMIZER_ADAM, 1, 1, "ffm_multiclass_adam_zero_checksum"},
                     {MFM_MODEL_FWFM, MFM_TASK_REGRESSION, MFM_OPTIMIZER_FTRL, 1, 0, "fwfm_regression_ftrl"},
                     {MFM_MODEL_FM, MFM_TASK_BINARY, MFM_OPTIMIZER_ADAGRAD, 1, 1, "fm_binary_adagrad_zero_checksum"},
                     {MFM_MODEL_FFM, MFM_TASK_BINARY, MFM_OPTIMIZER_ROWWISE_ADAGRAD, 1, 0, "ffm_binary_rowwise_adagrad"}};
        size_t i;
        for (i = 0; i < sizeof seeds / sizeof seeds[0]; i++) {
            mfm_params p;
            mfm_model *m;
            mfm_error e;
            unsigned char *b;
            size_t n;
            memset(&p, 0, sizeof p);
            p.model = seeds[i].model;
            p.task = seeds[i].task;
            p.optimizer = seeds[i].opt;
            p.k = 2;
            if (p.task == MFM_TASK_MULTICLASS) p.class_weight = MFM_CLASS_WEIGHT_EXPLICIT, p.class_weights = cw;
            if (mfm_model_create(&p, 5, p.model == MFM_MODEL_FM ? 0 : 3, 3, &m, &e) != MFM_OK) return fprintf(stderr, "%s\n", e.message), 1;
            if (mfm_model_save(m, tmp, seeds[i].with_state, &e) != MFM_OK) return fprintf(stderr, "%s\n", e.message), 1;
            mfm_model_free(m);
            b = slurp(tmp, &n);
            remove(tmp);
            if (seeds[i].zero_checksum) memset(b + n - 8, 0, 8);
            put(md, seeds[i].name, 0xFF, b, n);
            free(b);
        }
        for (i = 0; i < 3; i++) { /* files of the previous format (tests/data/README.md) */
            static const char *const v1[3] = {"v1-ffm-adagrad-binary.mfm", "v1-fm-sgd-regression.mfm", "v1-fwfm-adam-multiclass.mfm"};
            char path[256];
            unsigned char *b;
            size_t n;
            snprintf(path, sizeof path, "tests/data/%s", v1[i]);
            b = slurp(path, &n);
            if (!n) return fprintf(stderr, "cannot read %s\n", path), 1;
            put(md, v1[i], 0xFF, b, n);
            free(b);
        }
    }
    return 0;
}
