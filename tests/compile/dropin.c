/* dropin.c - the header dropped into an empty folder and built as a user builds it: no -I, no
   -pthread, no -ldl (glibc 2.34+), whatever came first. The Makefile copies this file to
   build/dropin/cpu/app.c (beside modern_fm.h alone) and to build/dropin/gpu/app.c (beside
   modern_fm.h, modern_fm_kernels.h and xxhash.h), builds it as C99 (with and without system
   headers first) and as C++17, with EXPECT_GPU_PART 0 or 1, and runs it:
   - CPU training and prediction work, and the clock is finer than whole seconds (a strict
     -std=c99 with <stdio.h> first used to hide clock_gettime);
   - backend CUDA answers MFM_ERR_CUDA_UNAVAILABLE naming what was missing at build time when
     the GPU part is out, and tries the driver when it is in;
   - backend AUTO trains on the CPU where there is no GPU. */
#if defined(SYSTEM_HEADERS_FIRST)
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if !defined(_WIN32)
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>
#endif
#endif
#define MODERN_FM_IMPLEMENTATION
#include "modern_fm.h"

#include <stdio.h>
#include <string.h>

static int failed(const char *what, const mfm_error *e) {
    fprintf(stderr, "dropin: %s: %s\n", what, e ? e->message : "");
    return 1;
}

static double seconds_seen = -1;
static int remember_seconds(void *user, const mfm_epoch_report *report) {
    (void)user;
    seconds_seen = report->seconds;
    return 0;
}

int main(void) {
    static const uint64_t offsets[] = {0, 2, 4, 6, 8};
    static const uint32_t features[] = {0, 2, 0, 3, 1, 2, 1, 3}, fields[] = {0, 1, 0, 1, 0, 1, 0, 1};
    static const float labels[] = {1, 0, 0, 1};
    float prob[4];
    mfm_params p;
    mfm_csr d;
    mfm_model *m = NULL;
    mfm_error e;
    mfm_status st;
    char cuda_said[sizeof e.message];
    memset(&p, 0, sizeof p); /* = {0} in C, {} in C++ */
    memset(&d, 0, sizeof d);
    p.model = MFM_MODEL_FFM;
    p.k = 4;
    p.n_epochs = 30;
    p.learning_rate = 0.3;
    p.init_scale = 0.5;
    p.on_epoch = remember_seconds;
    d.n_rows = 4;
    d.row_offsets = offsets;
    d.features = features;
    d.fields = fields;
    d.labels = labels;

    if (mfm_train(&p, &d, &m, &e) != MFM_OK) return failed("train on the CPU", &e);
    if (mfm_predict(m, &d, MFM_OUTPUT_PROBABILITY, prob, 4, &e) != MFM_OK) return failed("predict on the CPU", &e);
    if (!(prob[0] > 0.5f && prob[1] < 0.5f && prob[2] < 0.5f && prob[3] > 0.5f)) {
        fprintf(stderr, "dropin: the planted pairs were not learned: %g %g %g %g\n", prob[0], prob[1], prob[2], prob[3]);
        return 1;
    }
    if (!(seconds_seen > 0 && seconds_seen < 1)) { /* a clock of whole seconds gives 0 or 1 */
        fprintf(stderr, "dropin: an epoch of four rows took %g s: the clock is not finer than seconds\n", seconds_seen);
        return 1;
    }

    p.backend = MFM_BACKEND_CUDA;
    if (mfm_model_set_params(m, &p, &e) != MFM_OK) return failed("set backend CUDA", &e);
    st = mfm_predict(m, &d, MFM_OUTPUT_PROBABILITY, prob, 4, &e);
    snprintf(cuda_said, sizeof cuda_said, "%s", st == MFM_OK ? "a GPU answered" : e.message);
#if EXPECT_GPU_PART
    if (st != MFM_OK && strstr(e.message, "no GPU part")) return failed("the GPU part should be in this build", &e);
#else
    if (st != MFM_ERR_CUDA_UNAVAILABLE || !strstr(e.message, "no GPU part") || !strstr(e.message, "modern_fm_kernels.h"))
        return failed("backend CUDA without the GPU part should name what was missing", &e);
#endif

    p.backend = MFM_BACKEND_AUTO;
    if (mfm_model_set_params(m, &p, &e) != MFM_OK || mfm_fit(m, &d, &e) != MFM_OK) return failed("train with backend AUTO", &e);
    mfm_model_free(m);
    printf("drop-in ok (GPU part %s; backend CUDA: %s)\n", EXPECT_GPU_PART ? "in" : "out", cuda_said);
    return 0;
}
