/* test_inplace.c - with batch_size 1 the trainer takes a row's steps in place when each
   coordinate takes part in one term of the row (distinct features, and for FFM and FwFM
   distinct fields), instead of collecting touched sets and applying them afterwards. This file
   compiles a second, static copy of the library with that shortcut switched off and checks that
   both copies train every model, task and optimizer to the same bits, on rows that take the
   shortcut and rows that do not (repeated features or fields). The copy also keys FFM's
   gradients by slot where the library keys them by feature (MFM__FFM_DENSE_FLOATS 0), so batch
   7 compares those two ways of summing, which must agree to the bit as well; and with no room
   for terms (MFM__TERMS_FLOATS 0) its owners walk the batch's rows where the library's add up
   the streams the scorers left them (FM and FwFM, batch 7 on 3 threads), and it sums FwFM's
   dense rows pair by pair where the library adds up the terms their scores left
   (test_fwfm_kept_terms_equal_pairs).
   Its W is a table of its own (MFM__W_GUEST 0) where the library's lies in V's blocks (FM and
   FwFM under SGD and AdaGrad at this k), so every comparison also checks the two layouts.
   Its allocations are counted (test_inplace_few_rows_allocate_nothing). */
static unsigned long inplace_allocations;
#define MFM_MALLOC(sz) (++inplace_allocations, malloc(sz))
#define MFM_REALLOC(p, sz) (++inplace_allocations, realloc(p, sz))
#define MFM_FREE(p) free(p)
#define MFM_STATIC
#define MFM__W_GUEST 0
#define MFM__BATCH1_IN_PLACE 0
#define MFM__FFM_DENSE_FLOATS 0
#define MFM__TERMS_FLOATS 0
#define MODERN_FM_IMPLEMENTATION
#include "../modern_fm.h"

#include "dump.h"
#include "ref.h"
#include "runner.h"
#include "scratch.h"

#include <string.h>

size_t inplace_train_dump(const mfm_params *p, const mfm_csr *d, float *out, size_t cap); /* tests/impl.c */
int inplace_train_save_score(const mfm_params *p, const mfm_csr *d, const char *path, float *scores, size_t n);
int inplace_map_score(const char *path, const mfm_csr *d, float *scores, size_t n);

/* Random rows with values over `fields` fields for the serving tests, and a model of `model`
   with k = 4 trained one epoch on them (its params in *p): NULL when training fails. */
static mfm_model *serving_model(test_data *td, mfm_params *p, mfm_model_type model, mfm_task task, uint64_t rows, uint32_t fields, uint64_t seed) {
    data_spec spec;
    mfm_model *m = NULL;
    memset(&spec, 0, sizeof spec);
    spec.n_rows = rows, spec.feature_range = 8 * fields, spec.n_fields = fields, spec.min_nnz = 1, spec.max_nnz = fields, spec.with_values = 1;
    spec.task = task, spec.n_classes = 3, spec.seed = seed;
    data_random(td, &spec);
    memset(p, 0, sizeof *p);
    p->model = model, p->task = task, p->k = 4, p->n_epochs = 1, p->seed = 3;
    return mfm_train(p, &td->csr, &m, NULL) == MFM_OK ? m : NULL;
}

/* A call of a few rows is a server's: it allocates nothing and starts no thread (a pool of more
   than one worker would allocate), for every model, mapped, and mapped with float16 factors
   (whose w lies apart from V in this copy), with n_threads 0 (every core). A clone of the model
   allocates: the counter counts. */
void test_inplace_few_rows_allocate_nothing(void) {
    static const mfm_model_type models[] = {MFM_MODEL_FM, MFM_MODEL_FFM, MFM_MODEL_FWFM};
    char path[256], half_path[256];
    size_t mi;
    scratch_path(path, sizeof path, "serve.mfm");
    scratch_path(half_path, sizeof half_path, "half.mfm");
    for (mi = 0; mi < 3; mi++) {
        test_data td;
        mfm_params p;
        mfm_model *m = serving_model(&td, &p, models[mi], MFM_TASK_MULTICLASS, 400, 8, 70 + mi), *mapped = NULL, *half = NULL;
        float out[64 * 3];
        mfm_csr few;
        unsigned long before;
        int pass;
        if (!CHECK(m && mfm_model_save(m, path, 0, NULL) == MFM_OK && mfm_model_map(path, &mapped, NULL) == MFM_OK &&
                       mfm_model_save_half(m, half_path, NULL) == MFM_OK && mfm_model_map(half_path, &half, NULL) == MFM_OK,
                   "%s: train, save and map", model_name(p.model))) {
            mfm_model_free(mapped);
            mfm_model_free(m);
            data_free(&td);
            continue;
        }
        for (pass = 0; pass < 3; pass++) {
            mfm_model *x = pass == 2 ? half : pass ? mapped : m;
            mfm_params q = *mfm_model_params(x);
            q.n_threads = 0;
            CHECK(mfm_model_set_params(x, &q, NULL) == MFM_OK, "set_params");
            few = td.csr;
            few.n_rows = 1;
            before = inplace_allocations;
            CHECK(mfm_predict(x, &few, MFM_OUTPUT_PROBABILITY, out, sizeof out / sizeof out[0], NULL) == MFM_OK, "predict one row");
            CHECK(inplace_allocations == before, "%s%s: one row's prediction allocated %lu times", model_name(p.model), pass == 2 ? " (float16)" : pass ? " (mapped)" : "",
                  inplace_allocations - before);
            few.n_rows = 32;
            before = inplace_allocations;
            CHECK(mfm_predict(x, &few, MFM_OUTPUT_LABEL, out, sizeof out / sizeof out[0], NULL) == MFM_OK, "predict 32 rows");
            CHECK(inplace_allocations == before, "%s%s: 32 rows' prediction allocated %lu times", model_name(p.model), pass == 2 ? " (float16)" : pass ? " (mapped)" : "",
                  inplace_allocations - before);
            if (pass == 0) {
                mfm_model *copy = NULL;
                before = inplace_allocations;
                CHECK(mfm_model_clone(x, &copy, NULL) == MFM_OK, "clone");
                CHECK(inplace_allocations > before, "%s: a clone allocated nothing (the counter counts nothing)", model_name(p.model));
                mfm_model_free(copy);
            }
        }
        mfm_model_free(half);
        mfm_model_free(mapped);
        mfm_model_free(m);
        data_free(&td);
    }
    scratch_clean();
}

/* A model file holds its parameters as the library that wrote it lays them out (FM's and
   FwFM's w inside V's blocks or not); mfm_model_map maps a file that lies as it would, and reads
   one that does not into tables of its own: both ways round, the scores are the same bits. */
void test_inplace_maps_the_other_layout(void) {
    char path[256];
    int fwfm;
    scratch_path(path, sizeof path, "layout.mfm");
    for (fwfm = 0; fwfm < 2; fwfm++) { /* FM, then FwFM: both keep w inside V's blocks at k = 4 */
        test_data td;
        mfm_params p;
        mfm_model *m = serving_model(&td, &p, fwfm ? MFM_MODEL_FWFM : MFM_MODEL_FM, MFM_TASK_BINARY, 80, 5, 7 + (uint64_t)fwfm), *mapped = NULL;
        const size_t n = (size_t)td.csr.n_rows;
        float *want, *got;
        want = (float *)calloc(n, sizeof(float)), got = (float *)calloc(n, sizeof(float));
        /* this copy's layout (w apart) into the main library */
        if (CHECK(m && mfm_model_save(m, path, 1, NULL) == MFM_OK, "%s: train and save", model_name(p.model))) {
            CHECK(mfm_predict(m, &td.csr, MFM_OUTPUT_SCORE, want, n, NULL) == MFM_OK, "predict");
            CHECK(inplace_map_score(path, &td.csr, got, n) && memcmp(want, got, n * sizeof(float)) == 0,
                  "%s: the main library maps this copy's file to other scores", model_name(p.model));
        }
        /* the main library's layout (w inside) into this copy */
        if (CHECK(inplace_train_save_score(&p, &td.csr, path, want, n), "%s: the main library's train and save", model_name(p.model)))
            CHECK(mfm_model_map(path, &mapped, NULL) == MFM_OK && mfm_predict(mapped, &td.csr, MFM_OUTPUT_SCORE, got, n, NULL) == MFM_OK &&
                      memcmp(want, got, n * sizeof(float)) == 0,
                  "%s: this copy maps the main library's file to other scores", model_name(p.model));
        mfm_model_free(mapped);
        mfm_model_free(m);
        free(want), free(got);
        data_free(&td);
    }
    scratch_clean();
}

void test_inplace_equals_batched(void) {
    static const mfm_model_type models[] = {MFM_MODEL_FM, MFM_MODEL_FFM, MFM_MODEL_FWFM};
    static const mfm_task tasks[] = {MFM_TASK_BINARY, MFM_TASK_REGRESSION, MFM_TASK_MULTICLASS};
    static const mfm_optimizer optimizers[] = {MFM_OPTIMIZER_SGD, MFM_OPTIMIZER_ADAGRAD, MFM_OPTIMIZER_ADAM, MFM_OPTIMIZER_FTRL, MFM_OPTIMIZER_ROWWISE_ADAGRAD};
    enum { CAP = 1 << 20 };
    float *a = (float *)malloc(CAP * sizeof(float)), *b = (float *)malloc(CAP * sizeof(float));
    size_t mi, ti, oi, bi;
    REQUIRE(a && b, "out of memory");
    for (bi = 0; bi < 2; bi++)
        for (mi = 0; mi < 3; mi++)
            for (ti = 0; ti < 3; ti++)
                for (oi = 0; oi < sizeof optimizers / sizeof optimizers[0]; oi++) {
                    data_spec spec;
                    test_data td;
                    mfm_params p;
                    mfm_model *m = NULL;
                    size_t na, nb = 0;
                    uint64_t r;
                    memset(&spec, 0, sizeof spec);
                    spec.n_rows = runner_quick() ? 60 : 120; /* quick: the sanitizers' runs */
                    spec.feature_range = 40;
                    spec.n_fields = 6; /* fields repeat within some rows: those take the batched path */
                    spec.min_nnz = 1;
                    spec.max_nnz = 5;
                    spec.with_values = 1;
                    spec.with_weights = 1;
                    spec.task = tasks[ti];
                    spec.n_classes = 3;
                    spec.seed = 100 + mi * 16 + ti * 4 + oi;
                    data_random(&td, &spec);
                    for (r = 0; r < td.csr.n_rows; r += 7) /* a repeated feature now and then */
                        if (td.offsets[r + 1] - td.offsets[r] >= 2) td.features[td.offsets[r] + 1] = td.features[td.offsets[r]];
                    memset(&p, 0, sizeof p);
                    p.model = models[mi];
                    p.task = tasks[ti];
                    p.optimizer = optimizers[oi];
                    p.k = 6; /* a group of four and a rest of two */
                    p.n_epochs = 2;
                    p.batch_size = bi ? 7 : 1;
                    p.n_threads = 3; /* several workers, on any machine (batch 1: one) */
                    p.l2_linear = 1e-3;
                    p.l2_factors = 2e-3;
                    if (optimizers[oi] == MFM_OPTIMIZER_FTRL) p.l1_linear = p.l1_factors = 1e-3;
                    if (tasks[ti] != MFM_TASK_REGRESSION) p.label_smoothing = 0.1;
                    p.seed = 42;
                    na = inplace_train_dump(&p, &td.csr, a, CAP);
                    if (mfm_train(&p, &td.csr, &m, NULL) == MFM_OK) nb = dump_model(m, b, CAP);
                    mfm_model_free(m);
                    CHECK(na > 0 && na == nb && memcmp(a, b, na * sizeof(float)) == 0, "%s, task %d, optimizer %d, batch %d: the two copies differ",
                          model_name(p.model), (int)p.task, (int)p.optimizer, p.batch_size);
                    data_free(&td);
                }
    free(a);
    free(b);
}

/* AdaGrad's batch-1 steps run eight lanes wide where the CPU has AVX and four lanes wide
   elsewhere (or with MFM_SIMD=sse2): both must give the bits of the batched path, for every
   model and for k = 1 (single coordinates), 4 (blocks taken in pairs), 8 and 16 (whole
   registers), 12 (eight, then four) and 13 (eight, four, then one), in place (the library) and
   not (the copy).
   Rows are long enough for runs of eight singles; in the second data set every row holds every
   field once, in order (FwFM's dense rows, whose r steps eight pairs from two loads, the last
   group of a partner list masked). */
void test_simd_widths_agree(void) {
    static const mfm_model_type models[] = {MFM_MODEL_FM, MFM_MODEL_FFM, MFM_MODEL_FWFM};
    static const int ks[] = {1, 4, 8, 12, 13, 16};
    enum { CAP = 1 << 21 };
    float *batched = (float *)malloc(CAP * sizeof(float)), *wide = (float *)malloc(CAP * sizeof(float)), *narrow = (float *)malloc(CAP * sizeof(float));
    float *narrow_batched = (float *)malloc(CAP * sizeof(float));
    size_t mi, ki, dense;
    REQUIRE(batched && wide && narrow && narrow_batched, "out of memory");
    if (!mfm__use_avx()) runner_skip("this CPU has no AVX: only the four-lane steps run");
    for (dense = 0; dense < 2; dense++)
    for (mi = 0; mi < 3; mi++)
        for (ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
            data_spec spec;
            test_data td;
            mfm_params p;
            mfm_model *m = NULL;
            size_t nw, nn, nb = 0, ni = 0;
            memset(&spec, 0, sizeof spec);
            spec.n_rows = 150;
            spec.feature_range = 400;
            spec.n_fields = 24;
            spec.min_nnz = dense ? 20 : 9;
            spec.max_nnz = 20;
            spec.with_values = 1;
            spec.seed = 300 + dense * 64 + mi * 8 + ki;
            data_random(&td, &spec);
            data_fields_in_order(&td); /* distinct fields: every row takes the in-place path */
            memset(&p, 0, sizeof p);
            p.model = models[mi];
            p.optimizer = MFM_OPTIMIZER_ADAGRAD;
            p.k = ks[ki];
            p.n_epochs = 2;
            p.batch_size = 1;
            p.l2_linear = 1e-3;
            p.l2_factors = 2e-3;
            p.seed = 43;
            unsetenv("MFM_SIMD");
            nw = inplace_train_dump(&p, &td.csr, wide, CAP);
            setenv("MFM_SIMD", "sse2", 1);
            nn = inplace_train_dump(&p, &td.csr, narrow, CAP);
            if (mfm_train(&p, &td.csr, &m, NULL) == MFM_OK) ni = dump_model(m, narrow_batched, CAP);
            mfm_model_free(m);
            m = NULL;
            unsetenv("MFM_SIMD");
            if (mfm_train(&p, &td.csr, &m, NULL) == MFM_OK) nb = dump_model(m, batched, CAP);
            mfm_model_free(m);
            CHECK(nw > 0 && nw == nb && memcmp(wide, batched, nw * sizeof(float)) == 0, "%s k %d%s: eight-lane steps differ from the batched path",
                  model_name(p.model), p.k, dense ? ", dense rows" : "");
            CHECK(nn > 0 && nn == nb && memcmp(narrow, batched, nn * sizeof(float)) == 0, "%s k %d%s: four-lane steps differ from the batched path",
                  model_name(p.model), p.k, dense ? ", dense rows" : "");
            CHECK(ni > 0 && ni == nb && memcmp(narrow_batched, batched, ni * sizeof(float)) == 0, "%s k %d%s: the batched path's four-lane steps differ from its eight-lane ones",
                  model_name(p.model), p.k, dense ? ", dense rows" : "");
            data_free(&td);
        }
    free(batched);
    free(wide);
    free(narrow);
    free(narrow_batched);
}

/* FwFM's dense batch rows (k a multiple of 4, AVX): the library sums the terms each row's score
   left (every v_a's sum at once, the pairs' terms from the kept dots), the copy sums them pair by
   pair; both must give the same bits, for k = 4, 8, 12 and 16, binary and multiclass, batches of
   7 and 64, one and two threads, AdaGrad and FTRL (whose R blocks are not [r, G]). */
void test_fwfm_kept_terms_equal_pairs(void) {
    static const int ks[4] = {4, 8, 12, 16}, batches[2] = {7, 64};
    enum { CAP = 1 << 21 };
    float *kept = (float *)malloc(CAP * sizeof(float)), *pairs = (float *)malloc(CAP * sizeof(float));
    int ki, bi, threads, multiclass, ftrl;
    REQUIRE(kept && pairs, "out of memory");
    if (!mfm__use_avx()) runner_skip("this CPU has no AVX: both copies sum pair by pair");
    for (ki = 0; ki < 4; ki++)
        for (multiclass = 0; multiclass < 2; multiclass++) {
            data_spec spec;
            test_data td;
            memset(&spec, 0, sizeof spec);
            spec.n_rows = 300;
            spec.feature_range = 500;
            spec.n_fields = 13;
            spec.min_nnz = spec.max_nnz = 13;
            spec.with_values = 1;
            spec.task = multiclass ? MFM_TASK_MULTICLASS : MFM_TASK_BINARY;
            spec.n_classes = 3;
            spec.seed = 500 + ki * 2 + multiclass;
            data_random(&td, &spec);
            data_fields_in_order(&td); /* every row dense: every field once, in order */
            for (bi = 0; bi < 2; bi++)
                for (threads = 1; threads <= 2; threads++)
                    for (ftrl = 0; ftrl < 2; ftrl++) {
                        mfm_params p;
                        mfm_model *m = NULL;
                        size_t nk, np = 0;
                        memset(&p, 0, sizeof p);
                        p.model = MFM_MODEL_FWFM;
                        p.task = spec.task;
                        p.optimizer = ftrl ? MFM_OPTIMIZER_FTRL : MFM_OPTIMIZER_ADAGRAD;
                        p.k = ks[ki];
                        p.n_epochs = 2;
                        p.batch_size = batches[bi];
                        p.n_threads = threads;
                        p.l2_factors = 1e-3;
                        p.seed = 44;
                        nk = inplace_train_dump(&p, &td.csr, kept, CAP);
                        if (mfm_train(&p, &td.csr, &m, NULL) == MFM_OK) np = dump_model(m, pairs, CAP);
                        mfm_model_free(m);
                        CHECK(nk > 0 && nk == np && memcmp(kept, pairs, nk * sizeof(float)) == 0, "k %d%s, batch %d, %d thread(s), %s: kept terms differ from pair by pair",
                              p.k, multiclass ? ", multiclass" : "", p.batch_size, threads, ftrl ? "FTRL" : "AdaGrad");
                    }
            data_free(&td);
        }
    free(kept);
    free(pairs);
}
