/* test_optim.c - the optimizers of docs/SPEC.md section 6: first steps against numbers computed by
   hand, several steps against the double-precision reference, FTRL's exact zeros. */
#include "ref.h"
#include "runner.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* The 1-row problem of the first-step tests: FM, regression, k = 1, two features,
     w0 = 0.1, w = (0.2, -0.3), v = (0.5, 0.4); row {0: 1, 1: 2}, y = 1, lr = 0.1.
   s = 0.1 + 0.2*1 - 0.3*2 + 0.5*0.4*1*2 = 0.1, dL/ds = s - y = -0.9.
   ds/dv0 = x0 (v0 x0 + v1 x1) - v0 x0^2 = 1.3 - 0.5 = 0.8; ds/dv1 = 2 * 1.3 - 0.4 * 4 = 1.
   Data gradients g: w0 -0.9 | w (-0.9, -1.8) | v (-0.72, -0.9).
   SGD, AdaGrad and Adam take g' = g + l2 theta with l2_linear = 0.01, l2_factors = 0.02 (w0
   never regularized): w0 -0.9 | w (-0.898, -1.803) | v (-0.71, -0.892). */
typedef struct small_tensors {
    double w0, w[2], v[2];
} small_tensors;

/* Makes the problem's model with the optimizer and its k factors v (k = 1: v = (0.5, 0.4)), runs
   one step and returns the model; adagrad_init as given (0: the default). */
static mfm_model *first_step_with(mfm_optimizer optimizer, int k, const float *v, double l1_linear, double l1_factors, double l2_linear, double l2_factors,
                                  double adagrad_init) {
    static const uint32_t features[2] = {0, 1};
    static const float values[2] = {1, 2};
    static const float w0 = 0.1f, w[2] = {0.2f, -0.3f};
    mfm_params p = sgd_step_params(MFM_MODEL_FM, MFM_TASK_REGRESSION, 0.1);
    mfm_model *m;
    one_row row;
    mfm_error e;
    mfm_status st;
    p.optimizer = optimizer;
    p.k = k;
    p.l1_linear = l1_linear;
    p.l1_factors = l1_factors;
    p.l2_linear = l2_linear;
    p.l2_factors = l2_factors;
    p.adagrad_init = adagrad_init;
    m = make_model(&p, 2, 0, 1);
    if (!m) return NULL;
    mfm_model_set_tensor(m, MFM_TENSOR_W0, 0, 0, &w0, 1, NULL);
    mfm_model_set_tensor(m, MFM_TENSOR_W, 0, 0, w, 2, NULL);
    mfm_model_set_tensor(m, MFM_TENSOR_V, 0, 0, v, 2 * (size_t)k, NULL);
    one_row_init(&row, 2, features, NULL, values, 1.0f);
    st = mfm_fit(m, &row.csr, &e);
    if (!CHECK(st == MFM_OK, "mfm_fit failed with %d: %s", (int)st, st ? e.message : "")) {
        mfm_model_free(m);
        return NULL;
    }
    return m;
}

static mfm_model *first_step_init(mfm_optimizer optimizer, double l1_linear, double l1_factors, double l2_linear, double l2_factors,
                                  double adagrad_init) {
    static const float v[2] = {0.5f, 0.4f};
    return first_step_with(optimizer, 1, v, l1_linear, l1_factors, l2_linear, l2_factors, adagrad_init);
}

/* The step from AdaGrad's accumulator at zero, and from its default. */
static mfm_model *first_step(mfm_optimizer optimizer, double l1_linear, double l1_factors, double l2_linear, double l2_factors) {
    return first_step_init(optimizer, l1_linear, l1_factors, l2_linear, l2_factors, MFM_ZERO);
}

static mfm_model *first_step_from(mfm_optimizer optimizer, double l2_linear, double l2_factors, double adagrad_init) {
    return first_step_init(optimizer, 0, 0, l2_linear, l2_factors, adagrad_init);
}

/* Slot `slot` of w0, w and v against hand values; 1e-5 relative + 1e-7 absolute (float
   storage; AdaGrad's and Adam's 1e-10 / 1e-8 epsilons shift the step by less). */
static void check_small(const mfm_model *m, int slot, const small_tensors *want, const char *what) {
    float w0, w[2], v[2];
    int i;
    if (!CHECK(mfm_model_get_tensor(m, MFM_TENSOR_W0, slot, 0, &w0, 1, NULL) == MFM_OK && mfm_model_get_tensor(m, MFM_TENSOR_W, slot, 0, w, 2, NULL) == MFM_OK &&
                   mfm_model_get_tensor(m, MFM_TENSOR_V, slot, 0, v, 2, NULL) == MFM_OK,
               "%s: reading slot %d failed", what, slot))
        return;
    CHECK_NEAR(w0, want->w0, 1e-5, 1e-7, "%s slot %d w0", what, slot);
    for (i = 0; i < 2; i++) {
        CHECK_NEAR(w[i], want->w[i], 1e-5, 1e-7, "%s slot %d w[%d]", what, slot, i);
        CHECK_NEAR(v[i], want->v[i], 1e-5, 1e-7, "%s slot %d v[%d]", what, slot, i);
    }
}

/* SGD: theta - lr g':  w0 0.1 + 0.09 = 0.19 | w 0.2 + 0.0898, -0.3 + 0.1803 | v 0.5 + 0.071,
   0.4 + 0.0892. */
void test_optimizer_first_step_sgd(void) {
    static const small_tensors want = {0.19, {0.2898, -0.1197}, {0.571, 0.4892}};
    mfm_model *m = first_step(MFM_OPTIMIZER_SGD, 0, 0, 0.01, 0.02);
    if (!m) return;
    check_small(m, 0, &want, "SGD");
    mfm_model_free(m);
}

/* AdaGrad from G = 0 (adagrad_init MFM_ZERO): G = g'^2, theta - lr g' / sqrt(g'^2 + 1e-10) =
   theta + 0.1 (every g' < 0): w0 0.2 | w 0.3, -0.2 | v 0.6, 0.5; G = 0.81 | 0.806404,
   3.250809 | 0.5041, 0.795664. From the default G = 1: G = 1 + g'^2 and the step is
   lr |g'| / sqrt(1 + g'^2), with |g'| = 0.9 | 0.898, 1.803 | 0.71, 0.892. */
void test_optimizer_first_step_adagrad(void) {
    static const small_tensors want = {0.2, {0.3, -0.2}, {0.6, 0.5}};
    static const small_tensors want_g = {0.81, {0.806404, 3.250809}, {0.5041, 0.795664}};
#define FROM_ONE(start, gabs) ((start) + 0.1 * (gabs) / sqrt(1 + (gabs) * (gabs)))
    const small_tensors from_one = {FROM_ONE(0.1, 0.9), {FROM_ONE(0.2, 0.898), FROM_ONE(-0.3, 1.803)}, {FROM_ONE(0.5, 0.71), FROM_ONE(0.4, 0.892)}};
    const small_tensors from_one_g = {1 + 0.81, {1 + 0.806404, 1 + 3.250809}, {1 + 0.5041, 1 + 0.795664}};
#undef FROM_ONE
    mfm_model *m = first_step(MFM_OPTIMIZER_ADAGRAD, 0, 0, 0.01, 0.02);
    if (!m) return;
    check_small(m, 0, &want, "AdaGrad");
    check_small(m, 1, &want_g, "AdaGrad G");
    mfm_model_free(m);
    m = first_step_from(MFM_OPTIMIZER_ADAGRAD, 0.01, 0.02, 0);
    if (!m) return;
    check_small(m, 0, &from_one, "AdaGrad from G = 1");
    check_small(m, 1, &from_one_g, "AdaGrad G from G = 1");
    mfm_model_free(m);
}

/* Row-wise AdaGrad, its first step from G = 0 without L2, on the problem above with k = 2:
   v0 = (0.5, 0.1), v1 = (0.4, -0.2). s = 0.1 + 0.2 - 0.6 + 2 (0.5 0.4 + 0.1 (-0.2)) = 0.06, so
   dL/ds = -0.94; the factor sums are (1.3, -0.3), ds/dv0 = (0.8, -0.4), ds/dv1 = (1.0, 0.2).
   Each vector's G is the mean of its two squares: v0 0.94^2 0.4 = 0.35344, v1 0.94^2 0.52 =
   0.459472; every factor of a vector steps by 0.1 g / sqrt(G): v0 + (0.08, -0.04) / sqrt(0.4),
   v1 + (0.1, 0.02) / sqrt(0.52). w0 and w, vectors of one, step as under AdaGrad: 0.1 each, G =
   g^2 (0.8836, 0.8836, 3.5344). */
void test_optimizer_first_step_rowwise_adagrad(void) {
    static const float v[4] = {0.5f, 0.1f, 0.4f, -0.2f};
    const double want_v[4] = {0.5 + 0.08 / sqrt(0.4), 0.1 - 0.04 / sqrt(0.4), 0.4 + 0.1 / sqrt(0.52), -0.2 + 0.02 / sqrt(0.52)};
    const double want_w[2] = {0.3, -0.2}, want_gw[2] = {0.8836, 3.5344}, want_gv[2] = {0.35344, 0.459472};
    float got_w0, got_g0, got_w[2], got_gw[2], got_v[4], got_gv[2];
    mfm_model *m = first_step_with(MFM_OPTIMIZER_ROWWISE_ADAGRAD, 2, v, 0, 0, MFM_ZERO, MFM_ZERO, MFM_ZERO);
    mfm_error e;
    int i;
    if (!m) return;
    CHECK(mfm_tensor_slot_size(m, MFM_TENSOR_V, 1) == 2 && mfm_tensor_slot_size(m, MFM_TENSOR_W, 1) == 2 && mfm_tensor_slot_size(m, MFM_TENSOR_V, 0) == 4,
          "row-wise AdaGrad keeps one accumulator per vector of V (2) and one per w (2); V holds 4 values");
    CHECK(mfm_model_get_tensor(m, MFM_TENSOR_W0, 0, 0, &got_w0, 1, NULL) == MFM_OK && mfm_model_get_tensor(m, MFM_TENSOR_W0, 1, 0, &got_g0, 1, NULL) == MFM_OK &&
              mfm_model_get_tensor(m, MFM_TENSOR_W, 0, 0, got_w, 2, NULL) == MFM_OK && mfm_model_get_tensor(m, MFM_TENSOR_W, 1, 0, got_gw, 2, NULL) == MFM_OK &&
              mfm_model_get_tensor(m, MFM_TENSOR_V, 1, 0, got_gv, 2, NULL) == MFM_OK,
          "reading the tensors failed");
    CHECK(mfm_model_get_tensor(m, MFM_TENSOR_V, 1, 0, got_v, 4, &e) == MFM_ERR_INVALID_ARGUMENT, "V's accumulator slot holds 2 values, not 4");
    CHECK(mfm_model_get_tensor(m, MFM_TENSOR_V, 0, 0, got_v, 4, NULL) == MFM_OK, "reading V failed");
    CHECK_NEAR(got_w0, 0.2, 1e-5, 1e-7, "w0");
    CHECK_NEAR(got_g0, 0.8836, 1e-5, 1e-7, "w0's G");
    for (i = 0; i < 2; i++) {
        CHECK_NEAR(got_w[i], want_w[i], 1e-5, 1e-7, "w[%d]", i);
        CHECK_NEAR(got_gw[i], want_gw[i], 1e-5, 1e-7, "w[%d]'s G", i);
        CHECK_NEAR(got_gv[i], want_gv[i], 1e-5, 1e-7, "v[%d]'s G", i);
    }
    for (i = 0; i < 4; i++) CHECK_NEAR(got_v[i], want_v[i], 1e-5, 1e-7, "v[%d][%d]", i / 2, i % 2);
    mfm_model_free(m);
}

/* Adam from m = v = t = 0 (beta1 0.9, beta2 0.999, eps 1e-8): t = 1, m = 0.1 g',
   v = 0.001 g'^2, so m/(1-0.9) = g' and v/(1-0.999) = g'^2 and the step is lr g'/|g'| = -0.1:
   theta as for AdaGrad; m = -0.09 | -0.0898, -0.1803 | -0.071, -0.0892;
   v = 0.00081 | 0.000806404, 0.003250809 | 0.0005041, 0.000795664; t = 1. */
void test_optimizer_first_step_adam(void) {
    static const small_tensors want = {0.2, {0.3, -0.2}, {0.6, 0.5}};
    static const small_tensors want_m = {-0.09, {-0.0898, -0.1803}, {-0.071, -0.0892}};
    static const small_tensors want_v = {0.00081, {0.000806404, 0.003250809}, {0.0005041, 0.000795664}};
    static const small_tensors want_t = {1, {1, 1}, {1, 1}};
    mfm_model *m = first_step(MFM_OPTIMIZER_ADAM, 0, 0, 0.01, 0.02);
    if (!m) return;
    check_small(m, 0, &want, "Adam");
    check_small(m, 1, &want_m, "Adam m");
    check_small(m, 2, &want_v, "Adam v");
    check_small(m, 3, &want_t, "Adam t");
    mfm_model_free(m);
}

/* FTRL (alpha = lr = 0.1, beta = 1) from z = n = 0, on the pure data gradient g, with
   l1_linear 0.05, l2_linear 0.1, l1_factors 0.01, l2_factors 0.1 (w0: none):
     n = g^2; sigma = sqrt(n) / alpha; z = g - sigma theta; theta = -(z - sign(z) l1) / ((1 + sqrt(n)) / alpha + l2)
     w0 : n 0.81,   sigma 9,   z = -0.9 - 0.9    = -1.8,  theta = 1.8 / 19
     w_0: n 0.81,   sigma 9,   z = -0.9 - 1.8    = -2.7,  theta = 2.65 / 19.1
     w_1: n 3.24,   sigma 18,  z = -1.8 + 5.4    = 3.6,   theta = -3.55 / 28.1
     v0 : n 0.5184, sigma 7.2, z = -0.72 - 3.6   = -4.32, theta = 4.31 / 17.3
     v1 : n 0.81,   sigma 9,   z = -0.9 - 3.6    = -4.5,  theta = 4.49 / 19.1 */
void test_optimizer_first_step_ftrl(void) {
    static const small_tensors want = {1.8 / 19, {2.65 / 19.1, -3.55 / 28.1}, {4.31 / 17.3, 4.49 / 19.1}};
    static const small_tensors want_z = {-1.8, {-2.7, 3.6}, {-4.32, -4.5}};
    static const small_tensors want_n = {0.81, {0.81, 3.24}, {0.5184, 0.81}};
    mfm_model *m = first_step(MFM_OPTIMIZER_FTRL, 0.05, 0.01, 0.1, 0.1);
    if (!m) return;
    check_small(m, 0, &want, "FTRL");
    check_small(m, 1, &want_z, "FTRL z");
    check_small(m, 2, &want_n, "FTRL n");
    mfm_model_free(m);
}

/* Three consecutive steps on one row (3 epochs of a 1-row data set) of every optimizer x model
   with regularization, against ref_apply_batch applied three times (state carried from step to
   step, Adam's bias correction at t = 1, 2, 3). Tolerance: 1e-3 of the total movement + 2e-6
   absolute (three float steps); untouched coordinates and their state must not move. */
void test_optimizer_steps_match_reference(void) {
    static const mfm_optimizer optimizers[] = {MFM_OPTIMIZER_SGD, MFM_OPTIMIZER_ADAGRAD, MFM_OPTIMIZER_ADAM, MFM_OPTIMIZER_FTRL, MFM_OPTIMIZER_ROWWISE_ADAGRAD};
    static const mfm_model_type models[] = {MFM_MODEL_FM, MFM_MODEL_FFM, MFM_MODEL_FWFM};
    static const uint32_t features[4] = {4, 1, 0, 3}, fields[4] = {2, 0, 2, 1};
    static const float values[4] = {0.8f, -1.2f, 1.5f, 0.6f};
    size_t oi, mi;
    for (oi = 0; oi < sizeof optimizers / sizeof optimizers[0]; oi++)
        for (mi = 0; mi < 3; mi++) {
            mfm_params p = sgd_step_params(models[mi], MFM_TASK_BINARY, 0.05);
            mfm_model *m;
            one_row row;
            ref_model before, expected;
            unsigned char *mask[MFM_TENSOR_COUNT];
            ref_opt opt;
            uint64_t only_row = 0;
            mfm_error e;
            mfm_status st;
            char what[96];
            int step;
            p.optimizer = optimizers[oi];
            p.k = 3;
            p.n_epochs = 3;
            if (optimizers[oi] == MFM_OPTIMIZER_FTRL) {
                p.l1_linear = 0.01;
                p.l1_factors = 0.001;
                p.l2_linear = p.l2_factors = 0.1;
            } else {
                p.l2_linear = 0.05;
                p.l2_factors = 0.1;
            }
            snprintf(what, sizeof what, "optimizer %d, %s, 3 steps", (int)optimizers[oi], model_name(models[mi]));
            m = make_model(&p, 6, 3, 1);
            if (!m) continue;
            model_randomize(m, 51 + oi * 3 + mi, 0.5);
            one_row_init(&row, 4, features, fields, values, 1.0f);
            opt = ref_opt_from_params(&p);
            ref_load(&before, m);
            ref_copy(&expected, &before);
            for (step = 0; step < 3; step++) ref_apply_batch(&expected, &opt, &row.csr, &only_row, 1, NULL, 0);
            ref_touched(&before, &row.csr, &only_row, 1, mask);
            st = mfm_fit(m, &row.csr, &e);
            if (CHECK(st == MFM_OK, "%s: mfm_fit failed with %d: %s", what, (int)st, st ? e.message : ""))
                check_model(m, &expected, &before, mask, 1e-3, 2e-6, what);
            ref_mask_free(mask);
            ref_free(&before);
            ref_free(&expected);
            mfm_model_free(m);
        }
}

/* FTRL with l1 = 250 on 200 one-valued rows: |z| is at most the sum of |g| < 200 for every
   w and, since V goes to 0 on its first step and stays there, for V too; so every w and
   every V value is exactly 0.0f. AdaGrad on the same data leaves no w of a present feature at
   0. */
void test_ftrl_l1_gives_exact_zeros(void) {
    data_spec spec;
    test_data td;
    int pass;
    memset(&spec, 0, sizeof spec);
    spec.n_rows = 200;
    spec.feature_range = 10;
    spec.min_nnz = 2;
    spec.max_nnz = 5;
    spec.task = MFM_TASK_BINARY;
    spec.seed = 61;
    data_random(&td, &spec);
    for (pass = 0; pass < 2; pass++) {
        mfm_params p;
        mfm_model *m;
        ref_model r;
        mfm_error e;
        mfm_status st;
        size_t i, zeros_w = 0, zeros_v = 0;
        memset(&p, 0, sizeof p);
        p.k = 4;
        p.n_epochs = 1;
        p.optimizer = pass == 0 ? MFM_OPTIMIZER_FTRL : MFM_OPTIMIZER_ADAGRAD;
        if (pass == 0) p.l1_linear = p.l1_factors = 250;
        m = make_model(&p, 10, 0, 1);
        if (!m) continue;
        st = mfm_fit(m, &td.csr, &e);
        if (CHECK(st == MFM_OK, "mfm_fit failed with %d: %s", (int)st, st ? e.message : "")) {
            ref_load(&r, m);
            for (i = 0; i < r.size[MFM_TENSOR_W]; i++) zeros_w += r.t[0][MFM_TENSOR_W][i] == 0.0;
            for (i = 0; i < r.size[MFM_TENSOR_V]; i++) zeros_v += r.t[0][MFM_TENSOR_V][i] == 0.0;
            if (pass == 0) {
                CHECK(zeros_w == 10 && zeros_v == 40, "FTRL with l1 = 250: %zu of 10 w and %zu of 40 V values are exactly 0", zeros_w, zeros_v);
            } else {
                CHECK(zeros_w == 0, "AdaGrad: %zu of 10 w are exactly 0", zeros_w);
                CHECK(zeros_v == 0, "AdaGrad: %zu of 40 V values are exactly 0", zeros_v);
            }
            ref_free(&r);
        }
        mfm_model_free(m);
    }
    data_free(&td);
}
