/* demo.c - the data of `make demo`: what factorization machines buy you, in under a minute.

   Generates click data whose labels depend on planted pairwise interactions between fields
   (bench/synth.h) and writes it as libffm text: DIR/train.ffm, DIR/valid.ffm and DIR/test.ffm.
   bench/demo.sh then trains a linear model, FM, FFM and FwFM on the same rows with the `mfm`
   tool and compares them on the test rows. The linear model can only learn per-feature biases;
   the other three also learn the interactions, which shows up as a clearly lower logloss and
   higher AUC.

   usage: demo DIR */
#define MODERN_FM_IMPLEMENTATION
#include "../modern_fm.h"

#include "common.h"
#include "synth.h"

#include <inttypes.h>
#include <string.h>

/* Rows [lo, hi) of the data as DIR/name in libffm text. */
static void write_part(const synth_data *all, uint64_t lo, uint64_t hi, const char *dir, const char *name) {
    synth_data part;
    mfm_csr csr;
    mfm_error e;
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (synth_split(all, lo, hi, &part) != 0) {
        fprintf(stderr, "demo: out of memory\n");
        exit(1);
    }
    csr = synth_csr(&part);
    bench_check(mfm_dataset_write(&csr, path, MFM_FORMAT_LIBFFM, &e), &e, "mfm_dataset_write");
    synth_free(&part);
}

int main(int argc, char **argv) {
    const uint64_t n_train = 100000, n_valid = 20000, n_test = 20000;
    double ctr = 0;
    synth_spec s;
    synth_data all;
    uint64_t r;

    if (argc != 2) {
        fprintf(stderr, "usage: demo DIR   (writes DIR/train.ffm, DIR/valid.ffm, DIR/test.ffm)\n");
        return 2;
    }
    memset(&s, 0, sizeof s);
    s.n_rows = n_train + n_valid + n_test;
    s.n_fields = 20;
    s.n_features = 1000; /* 50 per field: enough rows per feature to learn its interactions */
    s.per_field = 1;
    s.zipf_s = 1.1;
    s.hidden_k = 4;
    s.signal = 3.0; /* the interactions carry most of what is predictable */
    s.base_rate = 0.25;
    s.seed = 2024;
    if (synth_generate(&s, &all) != 0) {
        fprintf(stderr, "demo: could not generate the data (out of memory?)\n");
        return 1;
    }
    write_part(&all, 0, n_train, argv[1], "train.ffm");
    write_part(&all, n_train, n_train + n_valid, argv[1], "valid.ffm");
    write_part(&all, n_train + n_valid, all.n_rows, argv[1], "test.ffm");
    for (r = 0; r < n_train; r++) ctr += all.labels[r];
    ctr /= (double)n_train;
    printf("modern_fm %s demo: %" PRIu64 " training, %" PRIu64 " validation and %" PRIu64 " test rows in %s,\n"
           "%u fields, one of %u features per field, click rate %.1f%%, labels from planted pairwise\n"
           "interactions (bench/synth.h). A model that always predicts the click rate has logloss %.4f\n"
           "and AUC 0.5.\n",
           mfm_version_string(), n_train, n_valid, n_test, argv[1], s.n_fields, s.n_features, 100 * ctr,
           -(ctr * log(ctr) + (1 - ctr) * log(1 - ctr)));
    synth_free(&all);
    return 0;
}
