/* test_score.c - scores, probabilities and labels against hand-computed numbers and the naive
   double-precision reference of ref.c; initialization (docs/SPEC.md sections 1, 2 and 8). */
#include "ref.h"
#include "runner.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Scores are float32 sums of a few dozen products of size <= ~1 (parameters in [-0.5, 0.5],
   values in [0.5, 1.5]): the library may differ from the double reference by float rounding,
   so scores are compared with 1e-5 relative + 1e-5 absolute. */
#define SCORE_RTOL 1e-5
#define SCORE_ATOL 1e-5

/* The rows of the hand-checked examples: three features, two fields, k = 2.
     row 0  {0: 1 (field 0), 1: 2 (field 1), 2: -1 (field 1)}   three pairs, a repeated field
     row 1  {2: 3 (field 0)}                                     one non-zero: no pair term
     row 2  {}                                                   empty: the score is w0
     row 3  {1: 2 (field 1), 0: 1 (field 0)}                     a pair given in reverse order
     row 4  {0: 1 (field 0), 1: 1 (field 0)}                     a pair within one field */
static const uint64_t hand_offsets[] = {0, 3, 4, 4, 6, 8};
static const uint32_t hand_features[] = {0, 1, 2, 2, 1, 0, 0, 1};
static const uint32_t hand_fields[] = {0, 1, 1, 0, 1, 0, 0, 0};
static const float hand_values[] = {1, 2, -1, 3, 2, 1, 1, 1};
enum { HAND_ROWS = 5 };

/* Shared parameters: w0 = 0.5, w = (1, -2, 0.5). */
static const float hand_w0 = 0.5f, hand_w[3] = {1, -2, 0.5f};

/* Builds a k = 2 model of the given type over the hand rows, writes the parameters and checks
   the scores of the hand rows against `expected`. */
static void check_hand_scores(mfm_model_type model, const float *V, size_t v_count, const float *R, const double *expected) {
    mfm_params p;
    mfm_model *m;
    mfm_csr d;
    float out[HAND_ROWS];
    int r;
    memset(&p, 0, sizeof p);
    memset(&d, 0, sizeof d);
    p.model = model;
    p.k = 2;
    p.normalize_rows = MFM_OFF; /* the expected scores take the values as given */
    m = make_model(&p, 3, 2, 1);
    if (!m) return;
    REQUIRE(mfm_tensor_size(m, MFM_TENSOR_V) == v_count, "V holds %zu values, expected %zu", mfm_tensor_size(m, MFM_TENSOR_V), v_count);
    CHECK(mfm_model_set_tensor(m, MFM_TENSOR_W0, 0, 0, &hand_w0, 1, NULL) == MFM_OK, "write w0");
    CHECK(mfm_model_set_tensor(m, MFM_TENSOR_W, 0, 0, hand_w, 3, NULL) == MFM_OK, "write w");
    CHECK(mfm_model_set_tensor(m, MFM_TENSOR_V, 0, 0, V, v_count, NULL) == MFM_OK, "write V");
    if (R) CHECK(mfm_model_set_tensor(m, MFM_TENSOR_R, 0, 0, R, 4, NULL) == MFM_OK, "write R");
    d.n_rows = HAND_ROWS;
    d.row_offsets = hand_offsets;
    d.features = hand_features;
    d.fields = hand_fields;
    d.values = hand_values;
    if (predict(m, &d, MFM_OUTPUT_SCORE, out, HAND_ROWS))
        for (r = 0; r < HAND_ROWS; r++) CHECK_NEAR(out[r], expected[r], 1e-6, 1e-6, "hand row %d", r);
    mfm_model_free(m);
}

/* FM by hand, v0 = (1, 2), v1 = (3, -1), v2 = (0.5, 0.5):
     <v0,v1> = 3 - 2 = 1, <v0,v2> = 0.5 + 1 = 1.5, <v1,v2> = 1.5 - 0.5 = 1.
     row 0: linear 0.5 + 1*1 - 2*2 + 0.5*(-1) = -3; pairs 1*(1*2) + 1.5*(1*-1) + 1*(2*-1)
            = 2 - 1.5 - 2 = -1.5; s = -4.5
     row 1: 0.5 + 0.5*3 = 2            row 2: 0.5
     row 3: 0.5 - 2*2 + 1*1 + 1*(2*1) = -0.5
     row 4: 0.5 + 1 - 2 + 1*(1*1) = 0.5 */
void test_score_hand_fm(void) {
    static const float V[] = {1, 2, 3, -1, 0.5f, 0.5f};
    static const double expected[HAND_ROWS] = {-4.5, 2, 0.5, -0.5, 0.5};
    check_hand_scores(MFM_MODEL_FM, V, 6, NULL, expected);
}

/* FFM by hand, V[i][g] (feature i against field g):
     V[0][0] = (1, 0)    V[0][1] = (1, 2)
     V[1][0] = (3, -1)   V[1][1] = (0, 1)
     V[2][0] = (.5, .5)  V[2][1] = (2, -1)
     row 0: pair (0,1): <V[0][1], V[1][0]> = 3 - 2 = 1, times 1*2 -> 2
            pair (0,2): <V[0][1], V[2][0]> = .5 + 1 = 1.5, times 1*-1 -> -1.5
            pair (1,2): <V[1][1], V[2][1]> = 0 - 1 = -1, times 2*-1 -> 2
            s = -3 + 2 - 1.5 + 2 = -0.5
     row 1: 2    row 2: 0.5
     row 3: (1 in field 1, 0 in field 0): <V[1][0], V[0][1]> = 1, times 2*1 -> 2;
            s = 0.5 - 4 + 1 + 2 = -0.5
     row 4: (both in field 0): <V[0][0], V[1][0]> = 3, times 1 -> 3; s = 0.5 + 1 - 2 + 3 = 2.5 */
void test_score_hand_ffm(void) {
    static const float V[] = {1, 0, 1, 2, 3, -1, 0, 1, 0.5f, 0.5f, 2, -1};
    static const double expected[HAND_ROWS] = {-0.5, 2, 0.5, -0.5, 2.5};
    check_hand_scores(MFM_MODEL_FFM, V, 12, NULL, expected);
}

/* FwFM by hand with FM's V and R = [[2, 0.5], [99, 3]] (R[1][0] = 99 is below the diagonal,
   never used: r(a,b) = R[min][max]):
     row 0: r(0,1) * 2 + r(0,1) * -1.5 + r(1,1) * -2 = 0.5*2 - 0.5*1.5 - 3*2 = -5.75; s = -8.75
     row 1: 2    row 2: 0.5
     row 3: fields (1, 0): r = R[0][1] = 0.5; 0.5 * 1 * 2 = 1; s = -2.5 + 1 = -1.5
     row 4: fields (0, 0): r = 2; 2 * 1 * 1 = 2; s = -0.5 + 2 = 1.5 */
void test_score_hand_fwfm(void) {
    static const float V[] = {1, 2, 3, -1, 0.5f, 0.5f};
    static const float R[] = {2, 0.5f, 99, 3};
    static const double expected[HAND_ROWS] = {-8.75, 2, 0.5, -1.5, 1.5};
    check_hand_scores(MFM_MODEL_FWFM, V, 6, R, expected);
}

/* Random data for the scorer tests: 60 rows of 0..7 non-zeros over 5 fields (so empty rows,
   one-non-zero rows and repeated fields all occur; checked below). */
static data_spec scorer_data(mfm_task task, uint32_t n_classes, int with_values, uint64_t seed) {
    data_spec s;
    memset(&s, 0, sizeof s);
    s.n_rows = 60;
    s.feature_range = 20;
    s.n_fields = 5;
    s.min_nnz = 0;
    s.max_nnz = 7;
    s.with_values = with_values;
    s.task = task;
    s.n_classes = n_classes;
    s.seed = seed;
    return s;
}

/* Every class's score of every row against ref_score. */
static void check_scores_against_reference(const mfm_model *m, const mfm_csr *d, const char *what) {
    ref_model r;
    size_t width = mfm_output_width(m, MFM_OUTPUT_SCORE);
    float *out;
    uint64_t row;
    uint32_t c;
    ref_load(&r, m);
    REQUIRE(width == r.n_classes, "%s: score width %zu, expected %u", what, width, (unsigned)r.n_classes);
    out = (float *)calloc(d->n_rows * width, sizeof(float));
    if (predict(m, d, MFM_OUTPUT_SCORE, out, d->n_rows * width))
        for (row = 0; row < d->n_rows; row++)
            for (c = 0; c < r.n_classes; c++)
                CHECK_NEAR(out[row * width + c], ref_score(&r, c, d, row), SCORE_RTOL, SCORE_ATOL, "%s row %u class %u", what, (unsigned)row,
                           (unsigned)c);
    free(out);
    ref_free(&r);
}

/* A model of p's kind over n_features x n_fields, its parameters random (seed), scores d as the
   reference does. */
static void check_random_model(const mfm_params *p, uint32_t n_features, uint32_t n_fields, uint64_t seed, const mfm_csr *d, const char *what) {
    mfm_model *m = make_model(p, n_features, n_fields, 1);
    if (!m) return;
    model_randomize(m, seed, 0.5);
    check_scores_against_reference(m, d, what);
    mfm_model_free(m);
}

/* The naive scorer and the library agree for every model and k in {1, 5, 8, 13} on random rows
   that include empty rows (= w0), one-non-zero rows and repeated field ids. */
void test_score_matches_reference(void) {
    static const mfm_model_type models[] = {MFM_MODEL_FM, MFM_MODEL_FFM, MFM_MODEL_FWFM};
    static const int ks[] = {1, 5, 8, 13};
    data_spec spec = scorer_data(MFM_TASK_BINARY, 0, 1, 11);
    test_data td;
    int empty = 0, single = 0, repeated = 0;
    uint64_t r, a, b;
    size_t mi, ki;
    data_random(&td, &spec);
    for (r = 0; r < td.csr.n_rows; r++) { /* the data really has the cases the test is about */
        uint64_t lo = td.offsets[r], hi = td.offsets[r + 1];
        empty += hi == lo;
        single += hi == lo + 1;
        for (a = lo; a < hi; a++)
            for (b = a + 1; b < hi; b++) repeated += td.fields[a] == td.fields[b];
    }
    CHECK(empty > 0 && single > 0 && repeated > 0, "data lacks a case: %d empty, %d single, %d repeated-field pairs", empty, single, repeated);
    for (mi = 0; mi < 3; mi++)
        for (ki = 0; ki < 4; ki++) {
            mfm_params p;
            char what[64];
            memset(&p, 0, sizeof p);
            p.model = models[mi];
            p.k = ks[ki];
            sprintf(what, "%s k=%d", model_name(models[mi]), ks[ki]);
            check_random_model(&p, 20, 5, 100 + mi * 10 + ki, &td.csr, what);
        }
    data_free(&td);
}

/* FwFM rows that hold every field once, in order, score through their own path (r(a, b) read
   from consecutive blocks, four at a time where a block is [r, G]): against the reference for
   R's block strides 1 to 4 (the optimizers' slots), k in {1, 4, 8, 13}, and 3, 6 and 39 fields
   (the last group of a row's partners one to three long, and full groups). */
void test_score_fwfm_dense_rows(void) {
    static const mfm_optimizer optimizers[] = {MFM_OPTIMIZER_SGD, MFM_OPTIMIZER_ADAGRAD, MFM_OPTIMIZER_FTRL, MFM_OPTIMIZER_ADAM};
    static const int ks[] = {1, 4, 8, 13};
    static const uint32_t field_counts[] = {3, 6, 39};
    size_t oi, ki, fi;
    for (fi = 0; fi < 3; fi++) {
        const uint32_t F = field_counts[fi];
        data_spec spec = scorer_data(MFM_TASK_BINARY, 0, 1, 40 + fi);
        test_data td;
        spec.feature_range = 100;
        spec.n_fields = F;
        spec.min_nnz = spec.max_nnz = (int)F;
        data_random(&td, &spec);
        data_fields_in_order(&td);
        for (oi = 0; oi < 4; oi++)
            for (ki = 0; ki < 4; ki++) {
                mfm_params p;
                char what[64];
                memset(&p, 0, sizeof p);
                p.model = MFM_MODEL_FWFM;
                p.optimizer = optimizers[oi];
                p.k = ks[ki];
                sprintf(what, "FwFM F=%u optimizer %d k=%d", (unsigned)F, (int)p.optimizer, p.k);
                check_random_model(&p, 100, F, 200 + fi * 16 + oi * 4 + ki, &td.csr, what);
            }
        data_free(&td);
    }
}

/* Values NULL means every value is 1: the same rows with values absent and with an explicit
   array of ones score the same (compared to each other at 1e-6 relative, and both to the
   reference). */
void test_score_values_absent_is_ones(void) {
    static const mfm_model_type models[] = {MFM_MODEL_FM, MFM_MODEL_FFM, MFM_MODEL_FWFM};
    data_spec spec = scorer_data(MFM_TASK_BINARY, 0, 0, 12);
    test_data td;
    float *ones, *with_null, *with_ones;
    mfm_csr explicit_ones;
    uint64_t j, r;
    size_t mi;
    data_random(&td, &spec);
    ones = (float *)malloc(td.offsets[td.csr.n_rows] * sizeof(float));
    with_null = (float *)malloc(td.csr.n_rows * sizeof(float));
    with_ones = (float *)malloc(td.csr.n_rows * sizeof(float));
    for (j = 0; j < td.offsets[td.csr.n_rows]; j++) ones[j] = 1.0f;
    explicit_ones = td.csr;
    explicit_ones.values = ones;
    for (mi = 0; mi < 3; mi++) {
        mfm_params p;
        mfm_model *m;
        memset(&p, 0, sizeof p);
        p.model = models[mi];
        p.k = 4;
        m = make_model(&p, 20, 5, 1);
        if (!m) continue;
        model_randomize(m, 200 + mi, 0.5);
        if (predict(m, &td.csr, MFM_OUTPUT_SCORE, with_null, td.csr.n_rows) &&
            predict(m, &explicit_ones, MFM_OUTPUT_SCORE, with_ones, td.csr.n_rows))
            for (r = 0; r < td.csr.n_rows; r++)
                CHECK_NEAR(with_null[r], with_ones[r], 1e-6, 1e-7, "%s row %u: values NULL vs all ones", model_name(models[mi]), (unsigned)r);
        check_scores_against_reference(m, &td.csr, model_name(models[mi]));
        mfm_model_free(m);
    }
    free(ones);
    free(with_null);
    free(with_ones);
    data_free(&td);
}

/* Multiclass: C = 3 independent parameter sets; each class's logit matches the reference
   computed from that class's parameters alone. */
void test_score_multiclass_per_class(void) {
    static const mfm_model_type models[] = {MFM_MODEL_FM, MFM_MODEL_FFM, MFM_MODEL_FWFM};
    data_spec spec = scorer_data(MFM_TASK_MULTICLASS, 3, 1, 13);
    test_data td;
    size_t mi;
    data_random(&td, &spec);
    for (mi = 0; mi < 3; mi++) {
        mfm_params p;
        mfm_model *m;
        char what[64];
        memset(&p, 0, sizeof p);
        p.model = models[mi];
        p.task = MFM_TASK_MULTICLASS;
        p.k = 5;
        m = make_model(&p, 20, 5, 3);
        if (!m) continue;
        model_randomize(m, 300 + mi, 0.5);
        sprintf(what, "multiclass %s", model_name(models[mi]));
        check_scores_against_reference(m, &td.csr, what);
        mfm_model_free(m);
    }
    data_free(&td);
}

/* linear_only = 1 drops the pair term: the score is w0 + sum_i w_i x_i whatever V holds
   (ref_score skips pairs for such a model). */
void test_score_linear_only(void) {
    static const mfm_model_type models[] = {MFM_MODEL_FM, MFM_MODEL_FFM, MFM_MODEL_FWFM};
    data_spec spec = scorer_data(MFM_TASK_BINARY, 0, 1, 14);
    test_data td;
    size_t mi;
    data_random(&td, &spec);
    for (mi = 0; mi < 3; mi++) {
        mfm_params p;
        mfm_model *m;
        ref_model r;
        memset(&p, 0, sizeof p);
        p.model = models[mi];
        p.k = 3;
        p.linear_only = 1;
        m = make_model(&p, 20, 5, 1);
        if (!m) continue;
        model_randomize(m, 400 + mi, 0.5);
        ref_load(&r, m);
        CHECK(r.linear_only == 1, "mfm_model_params does not keep linear_only");
        ref_free(&r);
        check_scores_against_reference(m, &td.csr, model_name(models[mi]));
        mfm_model_free(m);
    }
    data_free(&td);
}

/* FwFM with R = 1 everywhere is FM with the same w0, w and V (docs/SPEC.md section 1); a fresh FwFM
   model starts with R = 1 (section 2). */
void test_score_fwfm_unit_r_is_fm(void) {
    data_spec spec = scorer_data(MFM_TASK_BINARY, 0, 1, 15);
    test_data td;
    mfm_params p;
    mfm_model *fm, *fwfm;
    float *r_values, *fm_out, *fwfm_out;
    size_t i;
    uint64_t row;
    memset(&p, 0, sizeof p);
    p.k = 6;
    p.model = MFM_MODEL_FM;
    fm = make_model(&p, 20, 5, 1);
    p.model = MFM_MODEL_FWFM;
    fwfm = make_model(&p, 20, 5, 1);
    if (!fm || !fwfm) {
        mfm_model_free(fm);
        mfm_model_free(fwfm);
        return;
    }
    data_random(&td, &spec);
    r_values = (float *)calloc(25, sizeof(float));
    REQUIRE(mfm_tensor_size(fwfm, MFM_TENSOR_R) == 25, "FwFM R holds %zu values, expected 5 x 5", mfm_tensor_size(fwfm, MFM_TENSOR_R));
    CHECK(mfm_model_get_tensor(fwfm, MFM_TENSOR_R, 0, 0, r_values, 25, NULL) == MFM_OK, "read R");
    for (i = 0; i < 25; i++) CHECK(r_values[i] == 1.0f, "fresh FwFM R[%zu] = %g, expected 1", i, (double)r_values[i]);
    model_randomize(fm, 500, 0.5);
    { /* copy FM's w0, w, V into the FwFM model */
        static const mfm_tensor shared[] = {MFM_TENSOR_W0, MFM_TENSOR_W, MFM_TENSOR_V};
        for (i = 0; i < 3; i++) {
            size_t n = mfm_tensor_size(fm, shared[i]);
            float *buf = (float *)malloc(n * sizeof(float));
            CHECK(mfm_model_get_tensor(fm, shared[i], 0, 0, buf, n, NULL) == MFM_OK, "read FM tensor %d", (int)shared[i]);
            CHECK(mfm_model_set_tensor(fwfm, shared[i], 0, 0, buf, n, NULL) == MFM_OK, "write FwFM tensor %d", (int)shared[i]);
            free(buf);
        }
    }
    fm_out = (float *)malloc(td.csr.n_rows * sizeof(float));
    fwfm_out = (float *)malloc(td.csr.n_rows * sizeof(float));
    if (predict(fm, &td.csr, MFM_OUTPUT_SCORE, fm_out, td.csr.n_rows) && predict(fwfm, &td.csr, MFM_OUTPUT_SCORE, fwfm_out, td.csr.n_rows))
        for (row = 0; row < td.csr.n_rows; row++)
            CHECK_NEAR(fwfm_out[row], fm_out[row], SCORE_RTOL, SCORE_ATOL, "row %u: FwFM with R = 1 vs FM", (unsigned)row);
    free(fm_out);
    free(fwfm_out);
    free(r_values);
    data_free(&td);
    mfm_model_free(fm);
    mfm_model_free(fwfm);
}

/* Section 2: w0 = w = 0; FM/FwFM V ~ N(0, init_scale) (sample mean and standard deviation of
   4000 x 8 draws within 5% of init_scale); FFM V ~ U[0, init_scale/sqrt(k)) (every value in
   range, mean within 5% of half the bound); the same seed gives the same V, another seed
   another V. */
void test_initialization(void) {
    static const mfm_model_type models[] = {MFM_MODEL_FM, MFM_MODEL_FFM, MFM_MODEL_FWFM};
    const double scale = 0.2;
    size_t mi;
    for (mi = 0; mi < 3; mi++) {
        mfm_params p;
        mfm_model *m, *same, *other;
        ref_model r;
        snapshot a, b, c;
        const uint32_t n_features = mi == 1 ? 1000 : 4000, n_fields = 4; /* FFM: 1000 x 4 slots */
        double sum = 0, sq = 0, lo = 1e9, hi = -1e9, mean, sd;
        size_t i, n;
        memset(&p, 0, sizeof p);
        p.model = models[mi];
        p.k = 8;
        p.init_scale = scale;
        p.seed = 99;
        m = make_model(&p, n_features, n_fields, 1);
        same = make_model(&p, n_features, n_fields, 1);
        p.seed = 100;
        other = make_model(&p, n_features, n_fields, 1);
        if (!m || !same || !other) {
            mfm_model_free(m), mfm_model_free(same), mfm_model_free(other);
            continue;
        }
        ref_load(&r, m);
        CHECK(r.t[0][MFM_TENSOR_W0][0] == 0, "%s: initial w0 = %g", model_name(models[mi]), r.t[0][MFM_TENSOR_W0][0]);
        for (i = 0; i < r.size[MFM_TENSOR_W]; i++)
            if (!CHECK(r.t[0][MFM_TENSOR_W][i] == 0, "%s: initial w[%zu] = %g", model_name(models[mi]), i, r.t[0][MFM_TENSOR_W][i])) break;
        n = r.size[MFM_TENSOR_V];
        for (i = 0; i < n; i++) {
            double v = r.t[0][MFM_TENSOR_V][i];
            sum += v;
            sq += v * v;
            lo = v < lo ? v : lo;
            hi = v > hi ? v : hi;
        }
        mean = sum / n;
        sd = sqrt(sq / n - mean * mean);
        if (models[mi] == MFM_MODEL_FFM) {
            double bound = scale / sqrt(8.0);
            CHECK(lo >= 0 && hi < bound, "FFM V outside [0, %g): min %g max %g", bound, lo, hi);
            CHECK_NEAR(mean, bound / 2, 0.05, 0, "FFM V mean");
        } else {
            CHECK_NEAR(mean, 0, 0, 0.05 * scale, "%s V mean", model_name(models[mi]));
            CHECK_NEAR(sd, scale, 0.05, 0, "%s V standard deviation", model_name(models[mi]));
        }
        snapshot_take(&a, m);
        snapshot_take(&b, same);
        snapshot_take(&c, other);
        CHECK(snapshot_equal(&a, &b), "%s: the same seed gave different initial parameters", model_name(models[mi]));
        CHECK(!snapshot_equal(&a, &c), "%s: seeds 99 and 100 gave the same initial parameters", model_name(models[mi]));
        snapshot_free(&a), snapshot_free(&b), snapshot_free(&c);
        ref_free(&r);
        mfm_model_free(m), mfm_model_free(same), mfm_model_free(other);
    }
}

/* Section 2's generator, written out here: xoshiro256** seeded through splitmix64 from
   (seed, stream 1, chunk). */
static uint64_t init_splitmix(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t init_xoshiro(uint64_t s[4]) {
    const uint64_t result = (((s[1] * 5) << 7) | ((s[1] * 5) >> 57)) * 9, t = s[1] << 17;
    s[2] ^= s[0], s[3] ^= s[1], s[1] ^= s[2], s[0] ^= s[3], s[2] ^= t;
    s[3] = (s[3] << 45) | (s[3] >> 19);
    return result;
}

/* Section 2: V is drawn in chunks of 4096 blocks, chunk c from its own stream, by the threads
   of params.n_threads: an FFM model of 50000 features x 4 fields (200000 blocks, 49 chunks,
   13 MB: as many threads as the machine has, up to 3) against one thread, bit for bit, and its
   first values of chunks 0, 1 and 48 against the generator written out above; and an FM model
   whose accumulators start at MFM_ZERO holds +0 in them. */
void test_initialization_chunks(void) {
    const uint32_t n_features = 50000, n_fields = 4, k = 4;
    const uint64_t chunks[] = {0, 1, 48};
    const double scale = 0.3, high = scale / sqrt((double)k);
    mfm_params p;
    mfm_model *one, *three;
    snapshot a, b;
    ref_model r;
    size_t i;
    memset(&p, 0, sizeof p);
    p.model = MFM_MODEL_FFM;
    p.k = (int)k;
    p.init_scale = scale;
    p.seed = 7;
    p.n_threads = 1;
    one = make_model(&p, n_features, n_fields, 1);
    p.n_threads = 3;
    three = make_model(&p, n_features, n_fields, 1);
    if (!one || !three) {
        mfm_model_free(one), mfm_model_free(three);
        return;
    }
    snapshot_take(&a, one);
    snapshot_take(&b, three);
    CHECK(snapshot_equal(&a, &b), "FFM's first values differ between 1 and 3 threads");
    snapshot_free(&a), snapshot_free(&b);
    ref_load(&r, three);
    for (i = 0; i < sizeof chunks / sizeof chunks[0]; i++) {
        uint64_t x = 7 ^ (1 * 0xD1B54A32D192ED03ull) ^ (chunks[i] * 0x8CB92BA72F3D8DD7ull), s[4], at = chunks[i] * 4096 * k, j;
        int n;
        for (n = 0; n < 4; n++) s[n] = init_splitmix(&x);
        for (j = 0; j < 3 * k && at + j < r.size[MFM_TENSOR_V]; j++) {
            const float u = (float)((double)(init_xoshiro(s) >> 11) * (1.0 / 9007199254740992.0) * high), want = u < (float)high ? u : 0.0f;
            if (!CHECK(r.t[0][MFM_TENSOR_V][at + j] == want, "chunk %llu value %llu: %.9g, the generator gives %.9g", (unsigned long long)chunks[i],
                       (unsigned long long)j, r.t[0][MFM_TENSOR_V][at + j], (double)want))
                break;
        }
    }
    ref_free(&r);
    mfm_model_free(one), mfm_model_free(three);
    /* adagrad_init = MFM_ZERO (-0): the accumulators start at the zeros' +0, as files written
       before the fill went to threads hold them */
    memset(&p, 0, sizeof p);
    p.k = 4;
    p.adagrad_init = MFM_ZERO;
    p.n_threads = 3;
    if (!(one = make_model(&p, 300000, 0, 1))) return;
    ref_load(&r, one);
    for (i = 0; i < r.size[MFM_TENSOR_V]; i++)
        if (!CHECK(r.t[1][MFM_TENSOR_V][i] == 0 && !signbit(r.t[1][MFM_TENSOR_V][i]), "FM's V accumulator %zu starts at %g", i, r.t[1][MFM_TENSOR_V][i])) break;
    ref_free(&r);
    mfm_model_free(one);
}

/* Binary probabilities are sigmoid(score) of the reference score (1e-5 relative + 1e-7
   absolute: float rounding); extreme scores (+-1000) give 1 and 0,
   never NaN; mfm_predict writes nothing past n_rows * width. Multiclass probabilities are the
   softmax of the reference logits and sum to 1 (within 1e-5: float). */
void test_predict_probabilities(void) {
    data_spec spec = scorer_data(MFM_TASK_BINARY, 0, 1, 16);
    test_data td;
    mfm_params p;
    mfm_model *m;
    ref_model r;
    float *out;
    uint64_t row;
    uint32_t c;
    data_random(&td, &spec);
    out = (float *)malloc((td.csr.n_rows * 4 + 1) * sizeof(float));
    memset(&p, 0, sizeof p);
    p.k = 4;
    p.model = MFM_MODEL_FFM;
    m = make_model(&p, 20, 5, 1);
    if (m) {
        model_randomize(m, 600, 0.5);
        ref_load(&r, m);
        CHECK(mfm_output_width(m, MFM_OUTPUT_PROBABILITY) == 1, "binary probability width");
        out[td.csr.n_rows] = -7.0f; /* a sentinel just past the rows */
        if (predict(m, &td.csr, MFM_OUTPUT_PROBABILITY, out, td.csr.n_rows + 1))
            for (row = 0; row < td.csr.n_rows; row++)
                CHECK_NEAR(out[row], ref_sigmoid(ref_score(&r, 0, &td.csr, row)), 1e-5, 1e-7, "binary probability row %u", (unsigned)row);
        CHECK(out[td.csr.n_rows] == -7.0f, "mfm_predict wrote past n_rows values");
        if (predict(m, &td.csr, MFM_OUTPUT_DEFAULT, out, td.csr.n_rows)) /* default for binary: probabilities */
            for (row = 0; row < td.csr.n_rows; row++)
                CHECK_NEAR(out[row], ref_sigmoid(ref_score(&r, 0, &td.csr, row)), 1e-5, 1e-7, "default output row %u", (unsigned)row);
        ref_free(&r);
        { /* extreme scores through w0 alone, on an empty row */
            one_row empty;
            float w0[2] = {1000.0f, -1000.0f}, prob;
            int i;
            one_row_init(&empty, 0, NULL, NULL, NULL, 0);
            for (i = 0; i < 2; i++) {
                mfm_model_set_tensor(m, MFM_TENSOR_W0, 0, 0, &w0[i], 1, NULL);
                if (!predict(m, &empty.csr, MFM_OUTPUT_PROBABILITY, &prob, 1)) continue;
                if (i == 0)
                    CHECK(prob == 1.0f, "sigmoid(1000) = %g, expected 1", (double)prob);
                else
                    CHECK(prob == 0.0f, "sigmoid(-1000) = %g, expected 0", (double)prob);
            }
        }
        mfm_model_free(m);
    }
    data_free(&td);

    spec = scorer_data(MFM_TASK_MULTICLASS, 4, 1, 17);
    data_random(&td, &spec);
    p.task = MFM_TASK_MULTICLASS;
    p.model = MFM_MODEL_FWFM;
    m = make_model(&p, 20, 5, 4);
    if (m) {
        static const float big_w0[4] = {1000, -1000, 0, 5}; /* exp(1000) overflows a double: needs the max shift */
        int pass;
        model_randomize(m, 601, 0.5);
        CHECK(mfm_output_width(m, MFM_OUTPUT_PROBABILITY) == 4, "multiclass probability width");
        CHECK(mfm_output_width(m, MFM_OUTPUT_LABEL) == 1, "multiclass label width");
        for (pass = 0; pass < 2; pass++) {
            if (pass == 1) mfm_model_set_tensor(m, MFM_TENSOR_W0, 0, 0, &big_w0[0], 1, NULL), mfm_model_set_tensor(m, MFM_TENSOR_W0, 0, 1, &big_w0[1], 1, NULL);
            ref_load(&r, m);
            if (predict(m, &td.csr, pass ? MFM_OUTPUT_PROBABILITY : MFM_OUTPUT_DEFAULT, out, td.csr.n_rows * 4))
                for (row = 0; row < td.csr.n_rows; row++) {
                    double s[4], pr[4], total = 0;
                    for (c = 0; c < 4; c++) s[c] = ref_score(&r, c, &td.csr, row);
                    ref_softmax(s, 4, pr);
                    for (c = 0; c < 4; c++) {
                        CHECK_NEAR(out[row * 4 + c], pr[c], 1e-5, 1e-7, "pass %d row %u class %u probability", pass, (unsigned)row, (unsigned)c);
                        total += out[row * 4 + c];
                    }
                    CHECK_NEAR(total, 1.0, 0, 1e-5, "pass %d row %u: probabilities sum", pass, (unsigned)row);
                }
            ref_free(&r);
        }
        mfm_model_free(m);
    }
    free(out);
    data_free(&td);
}

/* Labels: binary 1 iff score >= 0 (an exact 0 score gives 1); multiclass the first argmax (a
   tie between classes 1 and 2 gives 1); regression's label output is the score, and so is its
   default output. Rows whose reference score is within 1e-4 of the boundary are skipped: float
   rounding may fall either side there. */
void test_predict_labels(void) {
    data_spec spec = scorer_data(MFM_TASK_BINARY, 0, 1, 18);
    test_data td;
    mfm_params p;
    mfm_model *m;
    ref_model r;
    float out[60 * 3], zero = 0;
    one_row empty;
    uint64_t row;
    uint32_t c;
    int decided = 0;
    data_random(&td, &spec);
    one_row_init(&empty, 0, NULL, NULL, NULL, 0);
    memset(&p, 0, sizeof p);
    p.k = 4;
    m = make_model(&p, 20, 5, 1);
    if (m) {
        model_randomize(m, 700, 0.5);
        mfm_model_set_tensor(m, MFM_TENSOR_W0, 0, 0, &zero, 1, NULL);
        ref_load(&r, m);
        if (predict(m, &td.csr, MFM_OUTPUT_LABEL, out, 60))
            for (row = 0; row < 60; row++) {
                double s = ref_score(&r, 0, &td.csr, row);
                if (fabs(s) < 1e-4 && td.offsets[row] != td.offsets[row + 1]) continue;
                decided++;
                CHECK(out[row] == (s >= 0 ? 1.0f : 0.0f), "binary label of row %u (score %g) is %g", (unsigned)row, s, (double)out[row]);
            }
        CHECK(decided > 40, "only %d rows were clear of the boundary", decided);
        if (predict(m, &empty.csr, MFM_OUTPUT_LABEL, out, 1)) CHECK(out[0] == 1.0f, "score exactly 0 gave label %g, expected 1", (double)out[0]);
        ref_free(&r);
        mfm_model_free(m);
    }

    p.task = MFM_TASK_MULTICLASS;
    m = make_model(&p, 20, 5, 3);
    if (m) {
        static const float w0[3] = {1, 3, 3};
        model_randomize(m, 701, 0.5);
        ref_load(&r, m);
        if (predict(m, &td.csr, MFM_OUTPUT_LABEL, out, 60))
            for (row = 0; row < 60; row++) {
                double s[3];
                uint32_t best = 0;
                for (c = 0; c < 3; c++) {
                    s[c] = ref_score(&r, c, &td.csr, row);
                    if (s[c] > s[best]) best = c;
                }
                if (fabs(s[(best + 1) % 3] - s[best]) < 1e-4 || fabs(s[(best + 2) % 3] - s[best]) < 1e-4) continue;
                CHECK(out[row] == (float)best, "multiclass label of row %u is %g, expected %u", (unsigned)row, (double)out[row], (unsigned)best);
            }
        ref_free(&r);
        for (c = 0; c < 3; c++) mfm_model_set_tensor(m, MFM_TENSOR_W0, 0, c, &w0[c], 1, NULL);
        if (predict(m, &empty.csr, MFM_OUTPUT_LABEL, out, 1)) CHECK(out[0] == 1.0f, "tie of classes 1 and 2 gave label %g, expected 1", (double)out[0]);
        mfm_model_free(m);
    }

    p.task = MFM_TASK_REGRESSION;
    m = make_model(&p, 20, 5, 1);
    if (m) {
        int kind;
        model_randomize(m, 702, 0.5);
        ref_load(&r, m);
        for (kind = 0; kind < 2; kind++)
            if (predict(m, &td.csr, kind ? MFM_OUTPUT_LABEL : MFM_OUTPUT_DEFAULT, out, 60))
                for (row = 0; row < 60; row++)
                    CHECK_NEAR(out[row], ref_score(&r, 0, &td.csr, row), SCORE_RTOL, SCORE_ATOL, "regression %s row %u", kind ? "label" : "default",
                               (unsigned)row);
        ref_free(&r);
        mfm_model_free(m);
    }
    data_free(&td);
}
