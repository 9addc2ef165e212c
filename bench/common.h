/* common.h - small helpers shared by bench.c and demo.c (include after the implementation). */
#ifndef BENCH_COMMON_H
#define BENCH_COMMON_H

#include "../modern_fm.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* Wall-clock seconds from an arbitrary start (CLOCK_MONOTONIC: immune to clock changes). */
static inline double bench_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* These programs have nothing sensible to do after a failed call: say what failed and exit. */
static inline void bench_check(mfm_status st, const mfm_error *err, const char *what) {
    if (st == MFM_OK) return;
    fprintf(stderr, "%s failed: %s: %s\n", what, mfm_status_string(st), err->message);
    exit(1);
}

static const char *const bench_model_names[] = {"FM", "FM", "FFM", "FwFM"};

#endif /* BENCH_COMMON_H */
