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

/* The main library's side of test_inplace_maps_the_other_layout: train and save to path (w
   inside V's blocks, for FM and FwFM at small k), or map path; then the scores of d. */
int inplace_train_save_score(const mfm_params *p, const mfm_csr *d, const char *path, float *scores, size_t n);
int inplace_train_save_score(const mfm_params *p, const mfm_csr *d, const char *path, float *scores, size_t n) {
    mfm_model *m = NULL;
    int ok = mfm_train(p, d, &m, NULL) == MFM_OK && mfm_model_save(m, path, 1, NULL) == MFM_OK &&
             mfm_predict(m, d, MFM_OUTPUT_SCORE, scores, n, NULL) == MFM_OK;
    mfm_model_free(m);
    return ok;
}

int inplace_map_score(const char *path, const mfm_csr *d, float *scores, size_t n);
int inplace_map_score(const char *path, const mfm_csr *d, float *scores, size_t n) {
    mfm_model *m = NULL;
    int ok = mfm_model_map(path, &m, NULL) == MFM_OK && mfm_predict(m, d, MFM_OUTPUT_SCORE, scores, n, NULL) == MFM_OK;
    mfm_model_free(m);
    return ok;
}

/* The library's float16 conversions, for test_model_half_conversions: every half widened one at
   a time and (where the CPU has F16C) eight at a time, and one float rounded. */
void test_halves_widened(float *one_at_a_time, float *eight_at_a_time);
void test_halves_widened(float *one_at_a_time, float *eight_at_a_time) {
    static uint16_t all[65536];
    uint32_t i;
    for (i = 0; i < 65536; i++) all[i] = (uint16_t)i, one_at_a_time[i] = mfm__half_to_float((uint16_t)i);
    mfm__halves_to_floats(all, eight_at_a_time, 65536, mfm__f16c());
}
uint16_t test_float_to_half(float x);
uint16_t test_float_to_half(float x) { return mfm__float_to_half(x); }

/* Forgets what the CUDA loader found, so that a forked child loads again under its own
   environment (the loader otherwise loads once per process). */
void test_cuda_forget(void);
void test_cuda_forget(void) {
    memset(&mfm__cuda, 0, sizeof mfm__cuda);
    memset(&mfm__settings, 0, sizeof mfm__settings);
}

/* Swaps the kernel sources for a one-line program (on = 1) or back to the real ones (on = 0),
   so that the tests of the kernel cache's mechanics (hits, misses, torn entries, two writers)
   pay milliseconds per NVRTC build instead of the real kernels' seconds. Its cache entries
   have keys of their own. test_cuda_nvrtc_compiles_every_arch builds the real kernels. */
void test_cuda_small_kernels(int on);
void test_cuda_small_kernels(int on) {
    static const char small[] = "extern \"C\" __global__ void mfm_test_small(float *x) { x[threadIdx.x] += 1.0f; }\n";
    char *copy = on ? (char *)mfm__alloc(sizeof small, 1) : NULL;
    mfm__cuda_lock();
    if (copy) {
        memcpy(copy, small, sizeof small);
        mfm__kernel_source_adopt(copy, sizeof small - 1);
    } else {
        MFM_FREE(mfm__cuda.source);
        mfm__cuda.source = NULL; /* the real sources are joined again on first use */
    }
    mfm__cuda_unlock();
}

/* Takes device memory in device 0's context until less than `leave` bytes are free, so that a
   test can watch the library run out; test_gpu_hog(0) gives it all back. 1 when the device
   was left with less than `leave` free. Needs device 0 made ready (an upload did that). */
int test_gpu_hog(uint64_t leave);
int test_gpu_hog(uint64_t leave) {
    static mfm__cu_ptr held[64];
    static int n_held;
    mfm__cu_context saved = NULL;
    size_t free_bytes = 0, total = 0;
    int i;
    if (!mfm__cuda.devices || !mfm__cuda.devices[0].context) return 0;
    mfm__cuda.cu.cuCtxGetCurrent(&saved);
    mfm__cuda.cu.cuCtxSetCurrent(mfm__cuda.devices[0].context);
    if (leave == 0) {
        for (i = 0; i < n_held; i++) mfm__cuda.cu.cuMemFree(held[i]);
        n_held = 0;
    } else {
        while (n_held < 64 && mfm__cuda.cu.cuMemGetInfo(&free_bytes, &total) == 0 && free_bytes >= leave) {
            size_t chunk = free_bytes - leave / 2; /* fragmentation may refuse it: then halve */
            while (chunk >= ((size_t)1 << 20) && mfm__cuda.cu.cuMemAlloc(&held[n_held], chunk) != 0) chunk /= 2;
            if (chunk < ((size_t)1 << 20)) break;
            n_held++;
        }
        mfm__cuda.cu.cuMemGetInfo(&free_bytes, &total);
    }
    mfm__cuda.cu.cuCtxSetCurrent(saved);
    return leave == 0 || free_bytes < leave;
}
