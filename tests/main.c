/* main.c - runs every test of TEST_LIST (or those whose name contains argv[1]) and ends with
   the line "N passed, N failed". */
#include "runner.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

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

int main(int argc, char **argv) {
    const char *filter = argc > 1 ? argv[1] : NULL;
    int passed = 0, failed = 0, skipped = 0;
    size_t i;
    for (i = 0; i < sizeof tests / sizeof tests[0]; i++) {
        if (filter && !strstr(tests[i].name, filter)) continue;
        current_test = tests[i].name;
        current_failures = 0;
        current_skip[0] = '\0';
        tests[i].fn();
        if (current_failures == 0 && current_skip[0]) {
            skipped++;
            printf("skip  %s: %s\n", tests[i].name, current_skip);
        } else if (current_failures == 0) {
            passed++;
            printf("ok    %s\n", tests[i].name);
        } else {
            failed++;
            printf("FAIL  %s (%d failed checks)\n", tests[i].name, current_failures);
        }
        fflush(stdout);
    }
    if (skipped)
        printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    else
        printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
