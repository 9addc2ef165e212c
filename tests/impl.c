/* impl.c - the one translation unit that compiles the library's implementation. */
#define MODERN_FM_IMPLEMENTATION
#include "../modern_fm.h"

/* The library's internal checksum, for tests that craft binary files with a valid one
   (declared in ref.h). */
#include <stddef.h>
#include <stdint.h>
uint64_t test_checksum(const void *data, size_t n);
uint64_t test_checksum(const void *data, size_t n) { return mfm__checksum(data, n); }

/* The main library's side of tests/test_inplace.c: train, then dump every tensor and slot. */
#include "dump.h"
size_t inplace_train_dump(const mfm_params *p, const mfm_csr *d, float *out, size_t cap);
size_t inplace_train_dump(const mfm_params *p, const mfm_csr *d, float *out, size_t cap) {
    mfm_model *m = NULL;
    size_t n = 0;
    if (mfm_train(p, d, &m, NULL) == MFM_OK) n = dump_model(m, out, cap);
    mfm_model_free(m);
    return n;
}

/* Forgets what the CUDA loader found, so that a forked child loads again under its own
   environment (the loader otherwise loads once per process). */
void test_cuda_forget(void);
void test_cuda_forget(void) { memset(&mfm__cuda, 0, sizeof mfm__cuda); }
