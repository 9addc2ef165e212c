/* main.c - runs the tests of TEST_LIST and ends with the line "N passed, N failed". Each
   test's line gives its wall time and CPU time (user + sys of its threads and of the processes
   it waited for), so that slow ones show even on a busy machine.

     tests [PART ...] [--skip PART ...]

   runs every test whose name contains one of the PARTs (all tests when none is given) and
   none of the --skip PARTs. TESTS_QUICK=1 in the environment asks the heavy tests for smaller
   instances of the same checks (runner_quick): the sanitizer runs use it. */
#if !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200112L
#endif
#include "runner.h"
#include "scratch.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

typedef struct test_entry {
    const char *name;
    void (*fn)(void);
} test_entry;

static const test_entry tests[] = {
#define TEST_ENTRY(name) {#name, name},
    TEST_LIST(TEST_ENTRY)
#undef TEST_ENTRY
};

enum { MAX_PRINTED_FAILURES = 12 }; /* per test; the rest are only counted */

/* Seconds on a monotonic clock (wall time: the tests run threads, so CPU time would mislead). */
static double wall_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* CPU seconds (user + sys) of this process and of the children it waited for. */
static double cpu_seconds(void) {
    struct rusage self, children;
    getrusage(RUSAGE_SELF, &self);
    getrusage(RUSAGE_CHILDREN, &children);
    return (double)(self.ru_utime.tv_sec + self.ru_stime.tv_sec + children.ru_utime.tv_sec + children.ru_stime.tv_sec) +
           1e-6 * (double)(self.ru_utime.tv_usec + self.ru_stime.tv_usec + children.ru_utime.tv_usec + children.ru_stime.tv_usec);
}

static const char *current_test = "";
static int current_failures = 0;
static char current_skip[300]; /* why the running test skipped itself ("" when it ran) */

void runner_skip(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(current_skip, sizeof current_skip, fmt, ap);
    va_end(ap);
}

void runner_fail(const char *file, int line, const char *fmt, ...) {
    current_failures++;
    if (current_failures <= MAX_PRINTED_FAILURES) {
        va_list ap;
        printf("  %s:%d: %s: ", file, line, current_test);
        va_start(ap, fmt);
        vprintf(fmt, ap);
        va_end(ap);
        printf("\n");
    } else if (current_failures == MAX_PRINTED_FAILURES + 1) {
        printf("  %s: further failures are counted, not printed\n", current_test);
    }
}

int runner_near(const char *file, int line, double actual, double expected, double rtol, double atol, const char *fmt, ...) {
    double diff = actual - expected, limit = atol + rtol * (expected < 0 ? -expected : expected);
    char what[400];
    va_list ap;
    if (diff < 0) diff = -diff;
    if (diff <= limit) return 1; /* false for NaN */
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    runner_fail(file, line, "%s: got %.9g, expected %.9g (diff %.3g > allowed %.3g)", what, actual, expected, diff, limit);
    return 0;
}

int runner_quick(void) {
    const char *q = getenv("TESTS_QUICK");
    return q && q[0] && strcmp(q, "0") != 0;
}

/* Whether the command line selects the test: a name part matches (or none was given) and no
   --skip part does. */
static int selected(const char *name, int argc, char **argv) {
    int i, any_part = 0, matched = 0;
    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--skip") == 0) {
            if (i + 1 < argc && strstr(name, argv[++i])) return 0;
        } else {
            any_part = 1;
            matched |= strstr(name, argv[i]) != NULL;
        }
    }
    return !any_part || matched;
}

int main(int argc, char **argv) {
    int passed = 0, failed = 0, skipped = 0;
    double start_all = wall_seconds(), cpu_all = cpu_seconds();
    size_t i;
    for (i = 0; i < sizeof tests / sizeof tests[0]; i++) {
        double start, seconds, cpu;
        if (!selected(tests[i].name, argc, argv)) continue;
        current_test = tests[i].name;
        current_failures = 0;
        current_skip[0] = '\0';
        start = wall_seconds();
        cpu = cpu_seconds();
        tests[i].fn();
        scratch_clean(); /* what a test that skipped or failed midway left in its scratch folder */
        seconds = wall_seconds() - start;
        cpu = cpu_seconds() - cpu;
        if (current_failures == 0 && current_skip[0]) {
            skipped++;
            printf("skip  %s (%.2f s, cpu %.2f s): %s\n", tests[i].name, seconds, cpu, current_skip);
        } else if (current_failures == 0) {
            passed++;
            printf("ok    %s (%.2f s, cpu %.2f s)\n", tests[i].name, seconds, cpu);
        } else {
            failed++;
            printf("FAIL  %s (%.2f s, cpu %.2f s, %d failed checks)\n", tests[i].name, seconds, cpu, current_failures);
        }
        fflush(stdout);
    }
    printf("all tests: %.1f s, cpu %.1f s\n", wall_seconds() - start_all, cpu_seconds() - cpu_all);
    if (skipped)
        printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    else
        printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
