/* common.h - small helpers shared by the benchmarks and demo.c (include after the implementation). */
#ifndef BENCH_COMMON_H
#define BENCH_COMMON_H

#include "../modern_fm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

/* A model's name as the library spells it ("fm", "ffm", "fwfm"; any case); -1 for none. */
static inline int bench_parse_model(const char *s) {
    int m, i;
    for (m = MFM_MODEL_FM; m < MFM_MODEL_COUNT; m++) {
        const char *name = mfm_model_type_name((mfm_model_type)m);
        for (i = 0; name[i] && (s[i] | 0x20) == name[i]; i++) {}
        if (!name[i] && !s[i]) return m;
    }
    return -1;
}

/* An optimizer by its library name (adagrad, rowwise-adagrad, sgd, adam, ftrl); -1 for none. */
static inline int bench_parse_optimizer(const char *s) {
    int o;
    for (o = MFM_OPTIMIZER_SGD; o < MFM_OPTIMIZER_COUNT; o++)
        if (strcmp(s, mfm_optimizer_name((mfm_optimizer)o)) == 0) return o;
    return -1;
}

/* "Intel(R) Xeon(R) ..., 2 cores" from /proc/cpuinfo (Linux); "unknown" elsewhere. */
static inline void bench_machine(char *out, size_t size) {
    char line[512], model[256] = "unknown CPU";
    int cores = 0;
    FILE *f = fopen("/proc/cpuinfo", "r");
    while (f && fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (strncmp(line, "processor", 9) == 0) cores++;
        if (strncmp(line, "model name", 10) == 0 && colon) {
            snprintf(model, sizeof model, "%s", colon + 2);
            model[strcspn(model, "\n")] = '\0';
        }
    }
    if (f) fclose(f);
    snprintf(out, size, "%s, %d logical cores", model, cores);
}

#endif /* BENCH_COMMON_H */
