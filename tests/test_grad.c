/* test_grad.c - gradients of every model x loss, observed through one plain SGD step, against
   central finite differences of the reference loss (docs/SPEC.md sections 3 and 4); label smoothing
   through the w0 step. */
#include "ref.h"
#include "runner.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* The one row of the gradient checks: four non-zeros over three fields (field 2 repeats),
   features 2 and 5 absent (their w and V must not move). */
static const uint32_t grad_features[4] = {4, 1, 0, 3};
static const uint32_t grad_fields[4] = {2, 0, 2, 1};
static const float grad_values[4] = {0.8f, -1.2f, 1.5f, 0.6f};

typedef struct grad_case {
    mfm_task task;
    float label;
    double smoothing, weight;
} grad_case;

/* One SGD step (1 row, batch 1, l2 = 0, lr) moves every parameter by -lr * weight * dL/dtheta
   (section 5 with B = 1). The expected step comes from finite differences of ref_row_loss.
   Tolerance: 1e-3 of the step size + 1e-6 absolute (float score and gradient; parameters of
   size <= 0.5 stored as float); coordinates the row does not touch must not move at all. */
static void check_gradient_step(mfm_model_type model, const grad_case *gc) {
    const double lr = 0.1;
    const uint32_t C = gc->task == MFM_TASK_MULTICLASS ? 3 : 1;
    mfm_params p = sgd_step_params(model, gc->task, lr);
    mfm_model *m;
    one_row row;
    ref_model before, expected;
    double *grad[MFM_TENSOR_COUNT], weight = gc->weight;
    unsigned char *mask[MFM_TENSOR_COUNT];
    uint64_t only_row = 0;
    mfm_error e;
    mfm_status st;
    char what[160];
    int t, moving = 0;
    size_t i;
    p.k = 3;
    p.label_smoothing = gc->smoothing;
    p.seed = 5;
    snprintf(what, sizeof what, "%s task %d label %g smoothing %g weight %g", model_name(model), (int)gc->task, (double)gc->label, gc->smoothing,
             gc->weight);
    m = make_model(&p, 6, 3, C);
    if (!m) return;
    model_randomize(m, 31 + (uint64_t)model * 7 + (uint64_t)gc->task, 0.5);
    one_row_init(&row, 4, grad_features, grad_fields, grad_values, gc->label);
    row.weight = (float)gc->weight;
    if (gc->weight != 1) row.csr.weights = &row.weight;
    ref_load(&before, m);
    ref_copy(&expected, &before);
    ref_fd_grad(&expected, &row.csr, &only_row, 1, &weight, gc->smoothing, grad);
    ref_touched(&before, &row.csr, &only_row, 1, mask);
    for (t = 0; t < MFM_TENSOR_COUNT; t++)
        for (i = 0; i < before.size[t] * C; i++) {
            expected.t[0][t][i] -= lr * grad[t][i];
            moving += fabs(lr * grad[t][i]) > 1e-3;
        }
    CHECK(moving >= 10, "%s: only %d coordinates move by more than 1e-3; the check would be weak", what, moving);
    st = mfm_fit(m, &row.csr, &e);
    if (CHECK(st == MFM_OK, "%s: mfm_fit failed with %d: %s", what, (int)st, st ? e.message : ""))
        check_model(m, &expected, &before, mask, 1e-3, 1e-6, what);
    ref_grad_free(grad);
    ref_mask_free(mask);
    ref_free(&before);
    ref_free(&expected);
    mfm_model_free(m);
}

/* Every model (FM, FFM, FwFM incl. R) x loss (logistic, squared, softmax), plain, with label
   smoothing and with a row weight. */
void test_gradients_finite_differences(void) {
    static const mfm_model_type models[] = {MFM_MODEL_FM, MFM_MODEL_FFM, MFM_MODEL_FWFM};
    static const grad_case cases[] = {
        {MFM_TASK_BINARY, 1, 0, 1},       {MFM_TASK_BINARY, 0, 0.2, 1},      {MFM_TASK_BINARY, 1, 0, 2.5},
        {MFM_TASK_REGRESSION, 1.7f, 0, 1}, {MFM_TASK_REGRESSION, -0.4f, 0, 0.5}, {MFM_TASK_MULTICLASS, 2, 0, 1},
        {MFM_TASK_MULTICLASS, 0, 0.3, 1}, {MFM_TASK_MULTICLASS, 1, 0.1, 1.5},
    };
    size_t mi, ci;
    for (mi = 0; mi < 3; mi++)
        for (ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) check_gradient_step(models[mi], &cases[ci]);
}

/* Runs one SGD step on `row` and returns the w0 step of every class in delta[]. */
static int w0_steps(mfm_model *m, one_row *row, uint32_t C, double *delta) {
    float before[8], after[8];
    uint32_t c;
    mfm_error e;
    mfm_status st;
    for (c = 0; c < C; c++) mfm_model_get_tensor(m, MFM_TENSOR_W0, 0, c, &before[c], 1, NULL);
    st = mfm_fit(m, &row->csr, &e);
    if (!CHECK(st == MFM_OK, "mfm_fit failed with %d: %s", (int)st, st ? e.message : "")) return 0;
    for (c = 0; c < C; c++) {
        mfm_model_get_tensor(m, MFM_TENSOR_W0, 0, c, &after[c], 1, NULL);
        delta[c] = (double)after[c] - before[c];
    }
    return 1;
}

/* Binary smoothing eps = 0.2: the target is y(1-eps) + eps/2, i.e. 0.9 for y = 1 and 0.1 for
   y = 0, so one SGD step moves w0 by -lr (sigmoid(s) - target), s from the reference scorer.
   Tolerance 1e-4 relative + 1e-7 absolute (float). */
void test_label_smoothing_binary(void) {
    static const uint32_t features[2] = {0, 1};
    const double lr = 0.5, eps = 0.2;
    int y;
    for (y = 0; y <= 1; y++) {
        mfm_params p = sgd_step_params(MFM_MODEL_FM, MFM_TASK_BINARY, lr);
        mfm_model *m;
        one_row row;
        ref_model r;
        double delta, s, target = y ? 0.9 : 0.1;
        p.k = 2;
        p.label_smoothing = eps;
        m = make_model(&p, 2, 0, 1);
        if (!m) continue;
        model_randomize(m, 41 + (uint64_t)y, 0.5);
        one_row_init(&row, 2, features, NULL, NULL, (float)y);
        ref_load(&r, m);
        s = ref_score(&r, 0, &row.csr, 0);
        CHECK_NEAR(target, y * (1 - eps) + eps / 2, 0, 1e-15, "smoothed target formula");
        if (w0_steps(m, &row, 1, &delta)) CHECK_NEAR(delta, -lr * (ref_sigmoid(s) - target), 1e-4, 1e-7, "w0 step, y = %d, eps = 0.2", y);
        ref_free(&r);
        mfm_model_free(m);
    }
}

/* Multiclass smoothing eps = 0.3 over C = 4: targets 1 - eps = 0.7 for the true class and
   eps/(C-1) = 0.1 for the others; one SGD step moves class c's w0 by -lr (p_c - t_c) with p the
   softmax of the reference logits. Tolerance 1e-4 relative + 1e-7 absolute. */
void test_label_smoothing_multiclass(void) {
    static const uint32_t features[3] = {0, 2, 1};
    static const double targets[4] = {0.1, 0.1, 0.7, 0.1}; /* true class 2 */
    const double lr = 0.5;
    mfm_params p = sgd_step_params(MFM_MODEL_FM, MFM_TASK_MULTICLASS, lr);
    mfm_model *m;
    one_row row;
    ref_model r;
    double s[4], prob[4], delta[4];
    uint32_t c;
    p.k = 2;
    p.label_smoothing = 0.3;
    m = make_model(&p, 3, 0, 4);
    if (!m) return;
    model_randomize(m, 43, 0.5);
    one_row_init(&row, 3, features, NULL, NULL, 2.0f);
    ref_load(&r, m);
    for (c = 0; c < 4; c++) s[c] = ref_score(&r, c, &row.csr, 0);
    ref_softmax(s, 4, prob);
    if (w0_steps(m, &row, 4, delta))
        for (c = 0; c < 4; c++) CHECK_NEAR(delta[c], -lr * (prob[c] - targets[c]), 1e-4, 1e-7, "class %u w0 step", (unsigned)c);
    ref_free(&r);
    mfm_model_free(m);
}
