/* test_alloc_failure.c - a batch that runs out of memory takes none of its steps. This file
   compiles a static copy of the library whose allocations fail from a chosen one on, so that
   every allocation a fit makes can be the one that fails, in turn. */
static long alloc_calls, alloc_fail_from = -1; /* -1: nothing fails */
static int alloc_may(void) { return alloc_fail_from < 0 || alloc_calls++ < alloc_fail_from; }
#define MFM_MALLOC(sz) (alloc_may() ? malloc(sz) : NULL)
#define MFM_REALLOC(p, sz) (alloc_may() ? realloc(p, sz) : NULL)
#define MFM_FREE(p) free(p)
#define MFM_STATIC
#define MODERN_FM_IMPLEMENTATION
#include "../modern_fm.h"

#include "dump.h"
#include "ref.h"
#include "runner.h"

#include <string.h>

/* One batch of 32 rows, one thread, FFM keyed by feature (whose v steps as its last row passes)
   and FM and FwFM: rows 0-30 hold two features each that no other row has, row 31 eight seen
   before, so that the sums' tables fill up as the batch goes. Whenever fit reports
   MFM_ERR_OUT_OF_MEMORY, every tensor and state slot must be as the model was created, and
   every allocation of the run is made to fail once (from it on). With two threads too, where
   the workers look their entries up as they walk, and two threads' chunks (params.thread_chunks),
   whose owners make room for the chunks' sums. */
void test_alloc_failure_takes_no_step(void) {
    static const mfm_model_type models[] = {MFM_MODEL_FFM, MFM_MODEL_FM, MFM_MODEL_FWFM};
    enum { ROWS = 32, FEATURES = 80, FIELDS = 4, CAP = 1 << 16 };
    uint64_t offsets[ROWS + 1], at = 0;
    uint32_t features[8 * ROWS], fields[8 * ROWS];
    float labels[ROWS], *before = (float *)malloc(CAP * sizeof(float)), *after = (float *)malloc(CAP * sizeof(float));
    mfm_csr d;
    size_t mi;
    int r, a, run;
    REQUIRE(before && after, "no memory for the test");
    for (r = 0; r < ROWS; r++) {
        offsets[r] = at;
        for (a = 0; a < (r == ROWS - 1 ? 8 : 2); a++, at++) {
            features[at] = r == ROWS - 1 ? (uint32_t)(5 * a) : (uint32_t)(2 * r + a);
            fields[at] = (uint32_t)a % FIELDS;
        }
        labels[r] = (float)(r % 3 == 0);
    }
    offsets[ROWS] = at;
    memset(&d, 0, sizeof d);
    d.n_rows = ROWS, d.row_offsets = offsets, d.features = features, d.fields = fields, d.labels = labels;
    for (mi = 0; mi < 3; mi++)
        for (run = 0; run < 3; run++) {
            const int threads = run ? 2 : 1;
            const char *how = run == 2 ? " (chunks)" : "";
            mfm_params p;
            mfm_model *m = NULL;
            size_t n_floats;
            long total, fail;
            int refused = 0, changed = 0;
            memset(&p, 0, sizeof p);
            p.model = models[mi], p.k = 4, p.batch_size = ROWS, p.n_threads = threads, p.n_epochs = 1, p.seed = 7, p.thread_chunks = run == 2;
            REQUIRE(mfm_model_create(&p, FEATURES, FIELDS, 1, &m, NULL) == MFM_OK, "create");
            n_floats = dump_model(m, before, CAP);
            alloc_calls = 0, alloc_fail_from = 1L << 40; /* count the fit's allocations */
            CHECK(mfm_fit(m, &d, NULL) == MFM_OK, "%s, %d threads%s: the fit fails with memory to spare", model_name(models[mi]), threads, how);
            total = alloc_calls;
            alloc_fail_from = -1;
            mfm_model_free(m);
            REQUIRE(n_floats > 0 && total > 0, "no tensors, or a fit that allocates nothing");
            for (fail = 0; fail < total; fail++) {
                mfm_status st;
                m = NULL;
                REQUIRE(mfm_model_create(&p, FEATURES, FIELDS, 1, &m, NULL) == MFM_OK, "create");
                alloc_calls = 0, alloc_fail_from = fail;
                st = mfm_fit(m, &d, NULL);
                alloc_fail_from = -1;
                if (st == MFM_ERR_OUT_OF_MEMORY) {
                    refused++;
                    changed += dump_model(m, after, CAP) != n_floats || memcmp(before, after, n_floats * sizeof(float)) != 0;
                } else {
                    CHECK(st == MFM_OK, "%s, %d threads%s, allocation %ld failing: status %d", model_name(models[mi]), threads, how, fail, (int)st);
                }
                mfm_model_free(m);
            }
            CHECK(refused > 0, "%s, %d threads%s: no failing allocation made the fit fail (the test would prove nothing)", model_name(models[mi]),
                  threads, how);
            CHECK(changed == 0, "%s, %d threads%s: %d of %d fits that ran out of memory changed the model", model_name(models[mi]), threads, how,
                  changed, refused);
        }
    free(before);
    free(after);
}
