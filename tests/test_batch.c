/* test_batch.c - mini-batches (docs/SPEC.md section 5), row and class weights (section 3),
   determinism and threads. */
#include "ref.h"
#include "runner.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Gives every optimizer state slot a non-zero start, so that "the state of an untouched
   coordinate does not advance" is visible: AdaGrad G = 0.5; Adam m = 0.05, v = 0.2, t = 3;
   FTRL z = 0.1, n = 0.3. */
static void preset_state(mfm_model *m, mfm_optimizer optimizer) {
    if (optimizer == MFM_OPTIMIZER_ADAGRAD) model_fill_slot(m, 1, 0.5f);
    if (optimizer == MFM_OPTIMIZER_ADAM) model_fill_slot(m, 1, 0.05f), model_fill_slot(m, 2, 0.2f), model_fill_slot(m, 3, 3.0f);
    if (optimizer == MFM_OPTIMIZER_FTRL) model_fill_slot(m, 1, 0.1f), model_fill_slot(m, 2, 0.3f);
}

/* Trains one epoch with batch_size = all rows from random parameters (and preset state), on one
   thread (one worker: each row summed as it is scored), on three (owners walking the rows) and
   on three with params.thread_chunks (three chunks' sums, added by their owners), and compares every slot with one batch of ref_apply_batch over all rows with the given row
   weights (NULL: from ref_row_weights). Tolerance: 1e-3 of the step + 2e-6 absolute (a mean of
   float gradients); untouched coordinates and their state must be bit-identical.
   Returns the number of untouched (W, V) coordinates through *untouched_w / *untouched_v. */
static void check_full_batch(const mfm_params *params, const mfm_csr *d, uint32_t n_features, uint32_t n_fields, uint32_t n_classes,
                             const double *weights, uint64_t seed, const char *what, size_t *untouched_w, size_t *untouched_v) {
    mfm_params p = *params;
    mfm_model *m;
    ref_model before, expected;
    unsigned char *mask[MFM_TENSOR_COUNT];
    uint64_t *rows = (uint64_t *)malloc(d->n_rows * sizeof(uint64_t)), r;
    double *w = (double *)malloc(d->n_rows * sizeof(double));
    ref_opt opt;
    mfm_error e;
    mfm_status st;
    size_t i;
    int run;
    char on[160];
    p.n_epochs = 1;
    p.batch_size = (int)d->n_rows;
    p.n_threads = 1;
    opt = ref_opt_from_params(&p);
    m = make_model(&p, n_features, n_fields, n_classes);
    if (!m) {
        free(rows), free(w);
        return;
    }
    model_randomize(m, seed, 0.5);
    preset_state(m, opt.kind);
    for (r = 0; r < d->n_rows; r++) rows[r] = r;
    if (weights)
        memcpy(w, weights, d->n_rows * sizeof(double));
    else
        ref_row_weights(d, &p, n_classes, w);
    ref_load(&before, m);
    ref_copy(&expected, &before);
    ref_apply_batch(&expected, &opt, d, rows, d->n_rows, w, p.label_smoothing);
    ref_touched(&before, d, rows, d->n_rows, mask);
    if (untouched_w)
        for (*untouched_w = 0, i = 0; i < before.size[MFM_TENSOR_W]; i++) *untouched_w += !mask[MFM_TENSOR_W][i];
    if (untouched_v)
        for (*untouched_v = 0, i = 0; i < before.size[MFM_TENSOR_V]; i++) *untouched_v += !mask[MFM_TENSOR_V][i];
    for (run = 0; run < 3; run++) {
        if (run) { /* the same start again */
            mfm_model_free(m);
            p.n_threads = 3;
            p.thread_chunks = run == 2;
            if (!(m = make_model(&p, n_features, n_fields, n_classes))) break;
            model_randomize(m, seed, 0.5);
            preset_state(m, opt.kind);
        }
        snprintf(on, sizeof on, "%s, %s", what, run == 0 ? "1 thread" : run == 1 ? "3 threads" : "3 threads' chunks");
        st = mfm_fit(m, d, &e);
        if (CHECK(st == MFM_OK, "%s: mfm_fit failed with %d: %s", on, (int)st, st ? e.message : "")) check_model(m, &expected, &before, mask, 1e-3, 2e-6, on);
    }
    ref_mask_free(mask);
    ref_free(&before);
    ref_free(&expected);
    mfm_model_free(m);
    free(rows);
    free(w);
}

static data_spec batch_data(mfm_task task, uint32_t n_classes, uint64_t seed) {
    data_spec s;
    memset(&s, 0, sizeof s);
    s.n_rows = 12;
    s.feature_range = 12; /* the models have 15 features: 12, 13, 14 never occur */
    s.n_fields = 4;
    s.min_nnz = 0;
    s.max_nnz = 5;
    s.with_values = 1;
    s.with_weights = 1;
    s.task = task;
    s.n_classes = n_classes;
    s.seed = seed;
    return s;
}

/* One full-batch epoch (batch_size = n_rows) is one step with the mean gradient of the rows'
   weighted gradients, all taken at the batch-start parameters, on exactly the touched
   coordinates; for every optimizer x model (binary, row weights, L2 / L1), and multiclass. */
void test_batch_step_matches_reference(void) {
    static const mfm_optimizer optimizers[] = {MFM_OPTIMIZER_SGD, MFM_OPTIMIZER_ADAGRAD, MFM_OPTIMIZER_ADAM, MFM_OPTIMIZER_FTRL, MFM_OPTIMIZER_ROWWISE_ADAGRAD};
    static const mfm_model_type models[] = {MFM_MODEL_FM, MFM_MODEL_FFM, MFM_MODEL_FWFM};
    data_spec spec = batch_data(MFM_TASK_BINARY, 0, 71);
    test_data td;
    size_t oi, mi, untouched_w = 0, untouched_v = 0;
    char what[96];
    data_random(&td, &spec);
    for (oi = 0; oi < sizeof optimizers / sizeof optimizers[0]; oi++)
        for (mi = 0; mi < 3; mi++) {
            mfm_params p;
            memset(&p, 0, sizeof p);
            p.model = models[mi];
            p.optimizer = optimizers[oi];
            p.k = oi % 2 ? 4 : 3; /* k = 4 has copies of its own (FFM's sums, AdaGrad's steps) */
            p.learning_rate = 0.05;
            if (optimizers[oi] == MFM_OPTIMIZER_FTRL) {
                p.l1_linear = 0.01;
                p.l1_factors = 0.001;
            }
            p.l2_linear = 0.05;
            p.l2_factors = 0.1;
            snprintf(what, sizeof what, "full batch, optimizer %d, %s", (int)optimizers[oi], model_name(models[mi]));
            check_full_batch(&p, &td.csr, 15, 4, 1, NULL, 72 + oi * 3 + mi, what, &untouched_w, &untouched_v);
            CHECK(untouched_w >= 3 && untouched_v >= 3, "%s: the data should leave coordinates untouched (%zu w, %zu V)", what, untouched_w, untouched_v);
        }
    data_free(&td);
    spec = batch_data(MFM_TASK_MULTICLASS, 3, 73);
    data_random(&td, &spec);
    for (mi = 0; mi < 3; mi++) {
        mfm_params p;
        memset(&p, 0, sizeof p);
        p.model = models[mi];
        p.task = MFM_TASK_MULTICLASS;
        p.optimizer = MFM_OPTIMIZER_ADAGRAD;
        p.k = 3;
        p.learning_rate = 0.05;
        p.l2_linear = 0.05;
        p.l2_factors = 0.1;
        snprintf(what, sizeof what, "full batch, multiclass %s", model_name(models[mi]));
        check_full_batch(&p, &td.csr, 15, 4, 3, NULL, 74 + mi, what, NULL, NULL);
    }
    data_free(&td);
}

/* AdaGrad at batch_size > 1 (section 5): the linear terms' accumulator adds the squares of the
   batch's terms and their steps are scaled by the line search. A learning rate of 2 makes the
   steps overshoot, so that the fraction the reference finds lies inside (0, 1); every task, every
   model, row weights, values and L2, against the reference's Newton step on the loss itself. */
void test_batch_linear_line_search(void) {
    static const mfm_model_type models[] = {MFM_MODEL_FM, MFM_MODEL_FFM, MFM_MODEL_FWFM};
    static const mfm_task tasks[] = {MFM_TASK_BINARY, MFM_TASK_REGRESSION, MFM_TASK_MULTICLASS};
    size_t ti, mi;
    for (ti = 0; ti < 3; ti++) {
        const uint32_t C = tasks[ti] == MFM_TASK_MULTICLASS ? 3 : 1;
        data_spec spec = batch_data(tasks[ti], tasks[ti] == MFM_TASK_MULTICLASS ? 3 : 0, 91 + ti);
        test_data td;
        spec.n_rows = 24;
        data_random(&td, &spec);
        for (mi = 0; mi < 3; mi++) {
            mfm_params p;
            char what[96];
            memset(&p, 0, sizeof p);
            p.model = models[mi];
            p.task = tasks[ti];
            p.optimizer = MFM_OPTIMIZER_ADAGRAD;
            p.k = 3;
            p.learning_rate = 2;
            p.l2_linear = 0.05;
            p.l2_factors = 0.1;
            snprintf(what, sizeof what, "line search, %s, %s", mfm_task_name(tasks[ti]), model_name(models[mi]));
            ref_last_alpha = -1;
            check_full_batch(&p, &td.csr, 15, 4, C, NULL, 95 + ti * 3 + mi, what, NULL, NULL);
            CHECK(ref_last_alpha > 0.01 && ref_last_alpha < 0.99, "%s: the reference's fraction is %g: the test should make the steps overshoot", what,
                  ref_last_alpha);
        }
        data_free(&td);
    }
}

/* FFM: a row with one non-zero has no pair, so it touches no V slot: with L2 > 0 on SGD and
   AdaGrad, V and its state stay bit-identical while w0 and w of the feature move. FM by
   contrast touches all k factors of a present feature: with a zero data gradient (one
   non-zero), SGD still decays them by L2: v <- v (1 - lr l2). */
void test_batch_ffm_single_nonzero_row(void) {
    static const uint32_t feature[1] = {3}, field[1] = {1};
    static const float value[1] = {1.5f};
    int pass;
    for (pass = 0; pass < 2; pass++) {
        mfm_params p = sgd_step_params(MFM_MODEL_FFM, MFM_TASK_BINARY, 0.1);
        mfm_model *m;
        one_row row;
        size_t nv;
        float *v_before, *v_after, w_before[6], w_after[6];
        int slot;
        p.optimizer = pass ? MFM_OPTIMIZER_ADAGRAD : MFM_OPTIMIZER_SGD;
        p.k = 4;
        p.l2_linear = 0.1;
        p.l2_factors = 0.1;
        m = make_model(&p, 6, 3, 1);
        if (!m) continue;
        model_randomize(m, 81 + (uint64_t)pass, 0.5);
        preset_state(m, p.optimizer);
        one_row_init(&row, 1, feature, field, value, 1.0f);
        nv = mfm_tensor_size(m, MFM_TENSOR_V);
        v_before = (float *)malloc(2 * nv * sizeof(float));
        v_after = (float *)malloc(2 * nv * sizeof(float));
        for (slot = 0; slot <= pass; slot++) mfm_model_get_tensor(m, MFM_TENSOR_V, slot, 0, v_before + slot * nv, nv, NULL);
        mfm_model_get_tensor(m, MFM_TENSOR_W, 0, 0, w_before, 6, NULL);
        CHECK(mfm_fit(m, &row.csr, NULL) == MFM_OK, "mfm_fit failed");
        for (slot = 0; slot <= pass; slot++) mfm_model_get_tensor(m, MFM_TENSOR_V, slot, 0, v_after + slot * nv, nv, NULL);
        mfm_model_get_tensor(m, MFM_TENSOR_W, 0, 0, w_after, 6, NULL);
        CHECK(memcmp(v_before, v_after, (size_t)(pass + 1) * nv * sizeof(float)) == 0, "optimizer %d: a one-non-zero FFM row moved V or its state",
              (int)p.optimizer);
        CHECK(w_after[3] != w_before[3], "optimizer %d: w of the present feature did not move", (int)p.optimizer);
        CHECK(w_after[2] == w_before[2], "optimizer %d: w of an absent feature moved", (int)p.optimizer);
        free(v_before);
        free(v_after);
        mfm_model_free(m);
    }
    { /* FM: V of the present feature decays by L2 although its data gradient is 0 */
        mfm_params p = sgd_step_params(MFM_MODEL_FM, MFM_TASK_BINARY, 0.1);
        mfm_model *m;
        one_row row;
        float v_before[24], v_after[24];
        int i;
        p.k = 4;
        p.l2_factors = 0.1;
        m = make_model(&p, 6, 0, 1);
        if (!m) return;
        model_randomize(m, 83, 0.5);
        one_row_init(&row, 1, feature, NULL, value, 1.0f);
        mfm_model_get_tensor(m, MFM_TENSOR_V, 0, 0, v_before, 24, NULL);
        CHECK(mfm_fit(m, &row.csr, NULL) == MFM_OK, "mfm_fit failed");
        mfm_model_get_tensor(m, MFM_TENSOR_V, 0, 0, v_after, 24, NULL);
        for (i = 0; i < 24; i++) {
            double want = i / 4 == 3 ? v_before[i] * (1 - 0.1 * 0.1) : v_before[i];
            CHECK_NEAR(v_after[i], want, 1e-6, 1e-8, "FM single non-zero: V[%d]", i);
        }
        mfm_model_free(m);
    }
}

/* A row weight of 2 doubles every parameter's step of a 1-row SGD problem (the weight
   multiplies dL/ds). Tolerance 1e-4 relative + 2e-7 absolute (differences of floats). */
void test_row_weight_scales_step(void) {
    static const uint32_t features[3] = {0, 2, 3}, fields[3] = {0, 1, 1};
    static const float values[3] = {1.0f, 0.5f, -1.0f};
    static const mfm_model_type models[] = {MFM_MODEL_FM, MFM_MODEL_FFM, MFM_MODEL_FWFM};
    size_t mi, i;
    for (mi = 0; mi < 3; mi++) {
        snapshot start, step[2];
        int pass;
        for (pass = 0; pass < 2; pass++) {
            mfm_params p = sgd_step_params(models[mi], MFM_TASK_BINARY, 0.1);
            mfm_model *m;
            one_row row;
            p.k = 3;
            m = make_model(&p, 5, 2, 1);
            if (!m) return;
            model_randomize(m, 91 + mi, 0.5);
            if (pass == 0) snapshot_take(&start, m);
            one_row_init(&row, 3, features, fields, values, 1.0f);
            row.weight = pass ? 2.0f : 1.0f;
            row.csr.weights = &row.weight;
            CHECK(mfm_fit(m, &row.csr, NULL) == MFM_OK, "mfm_fit failed");
            snapshot_take(&step[pass], m);
            mfm_model_free(m);
        }
        for (i = 0; i < start.n; i++) {
            double d1 = (double)step[0].data[i] - start.data[i], d2 = (double)step[1].data[i] - start.data[i];
            CHECK_NEAR(d2, 2 * d1, 1e-4, 2e-7, "%s value %zu: step with weight 2 vs twice the step with weight 1", model_name(models[mi]), i);
        }
        snapshot_free(&start), snapshot_free(&step[0]), snapshot_free(&step[1]);
    }
}

/* Labels and sample weights of the class-weight tests. Binary: classes 1,1,1,0 (counts 1 and
   3); multiclass: 0,0,0,1,2,2 (counts 3, 1, 2). */
static const float binary_labels[4] = {1, 1, 1, 0}, binary_sample[4] = {1, 0.5f, 2, 1.5f};
static const float multi_labels[6] = {0, 0, 0, 1, 2, 2}, multi_sample[6] = {1, 1, 0.5f, 2, 1, 1.5f};

/* Random rows with the given labels and sample weights; binary uses FFM, multiclass FwFM. */
static void class_weight_case(mfm_task task, mfm_class_weight kind, const float *class_weights, const double *hand_class_weight, const char *what) {
    const int binary = task == MFM_TASK_BINARY;
    const uint64_t n = binary ? 4 : 6;
    data_spec spec = batch_data(task, binary ? 0 : 3, binary ? 101 : 102);
    test_data td;
    mfm_params p;
    double weights[6], from_ref[6];
    uint64_t r;
    spec.n_rows = n;
    spec.min_nnz = 2;
    data_random(&td, &spec);
    for (r = 0; r < n; r++) {
        td.labels[r] = binary ? binary_labels[r] : multi_labels[r];
        td.weights[r] = binary ? binary_sample[r] : multi_sample[r];
        weights[r] = td.weights[r] * hand_class_weight[(int)td.labels[r]];
    }
    memset(&p, 0, sizeof p);
    p.model = binary ? MFM_MODEL_FFM : MFM_MODEL_FWFM;
    p.task = task;
    p.optimizer = MFM_OPTIMIZER_SGD;
    p.k = 3;
    p.learning_rate = 0.2;
    p.class_weight = kind;
    p.class_weights = class_weights;
    ref_row_weights(&td.csr, &p, binary ? 2 : 3, from_ref); /* the reference's own formula agrees with the hand numbers */
    for (r = 0; r < n; r++) CHECK_NEAR(from_ref[r], weights[r], 1e-12, 0, "%s: ref_row_weights row %u", what, (unsigned)r);
    check_full_batch(&p, &td.csr, 15, 4, binary ? 1 : 3, weights, 103, what, NULL, NULL);
    data_free(&td);
}

/* class_weight BALANCED: class c weighs n_rows / (C max(count_c, 1)), times the sample weight.
   Binary (n 4, C 2, counts 1 and 3): class 0 = 4/2 = 2, class 1 = 4/6 = 2/3.
   Multiclass (n 6, C 3, counts 3, 1, 2): 6/9 = 2/3, 6/3 = 2, 6/6 = 1. */
void test_class_weight_balanced(void) {
    static const double binary[2] = {2.0, 2.0 / 3}, multi[3] = {2.0 / 3, 2.0, 1.0};
    class_weight_case(MFM_TASK_BINARY, MFM_CLASS_WEIGHT_BALANCED, NULL, binary, "balanced binary");
    class_weight_case(MFM_TASK_MULTICLASS, MFM_CLASS_WEIGHT_BALANCED, NULL, multi, "balanced multiclass");
}

/* class_weight EXPLICIT: class_weights[label] times the sample weight. */
void test_class_weight_explicit(void) {
    static const float binary_f[2] = {0.5f, 3.0f}, multi_f[3] = {1.0f, 0.25f, 4.0f};
    static const double binary[2] = {0.5, 3.0}, multi[3] = {1.0, 0.25, 4.0};
    class_weight_case(MFM_TASK_BINARY, MFM_CLASS_WEIGHT_EXPLICIT, binary_f, binary, "explicit binary");
    class_weight_case(MFM_TASK_MULTICLASS, MFM_CLASS_WEIGHT_EXPLICIT, multi_f, multi, "explicit multiclass");
}

/* ---- determinism and threads ---- */

static data_spec train_data(mfm_task task, uint32_t n_classes, uint64_t n_rows, uint64_t seed) {
    data_spec s;
    memset(&s, 0, sizeof s);
    s.n_rows = n_rows;
    s.feature_range = 60;
    s.n_fields = 5;
    s.min_nnz = 1;
    s.max_nnz = 8;
    s.with_values = 1;
    s.task = task;
    s.n_classes = n_classes;
    s.seed = seed;
    return s;
}

/* Trains with mfm_train; the snapshot of the result goes to *out (NULL on failure). */
static int train_snapshot(const mfm_params *p, const mfm_csr *d, snapshot *out) {
    mfm_model *m = NULL;
    mfm_error e;
    mfm_status st = mfm_train(p, d, &m, &e);
    out->data = NULL;
    out->n = 0;
    if (!CHECK(st == MFM_OK && m, "mfm_train failed with %d: %s", (int)st, st ? e.message : "")) return 0;
    snapshot_take(out, m);
    mfm_model_free(m);
    return 1;
}

/* The cases of the determinism tests: three models binary, and FM multiclass. */
static void determinism_params(int which, mfm_params *p, mfm_task *task) {
    static const mfm_model_type models[] = {MFM_MODEL_FM, MFM_MODEL_FFM, MFM_MODEL_FWFM, MFM_MODEL_FM};
    memset(p, 0, sizeof *p);
    p->model = models[which];
    p->task = *task = which == 3 ? MFM_TASK_MULTICLASS : MFM_TASK_BINARY;
    p->k = 4;
    p->n_epochs = 2;
    p->seed = 7;
}

/* Case `which` of determinism_params, and its random data: n_rows rows of n_classes classes
   (multiclass) from the seed. */
static void determinism_data(int which, uint32_t n_classes, uint64_t n_rows, uint64_t seed, mfm_params *p, test_data *td) {
    mfm_task task;
    data_spec spec;
    determinism_params(which, p, &task);
    spec = train_data(task, n_classes, n_rows, seed);
    data_random(td, &spec);
}

/* The same seed gives bit-identical parameters and state (memcmp), with batch 1 and with
   batch 4, and so does one Hogwild thread (the ordinary schedule); another seed gives others,
   and that also through the row order alone: two models of seeds 7 and 8 given the same
   starting parameters end apart after an epoch. */
void test_determinism_same_seed(void) {
    int which;
    for (which = 0; which < 4; which++) {
        mfm_params p;
        test_data td;
        snapshot a = {NULL, 0}, b = {NULL, 0}, c = {NULL, 0}; /* freed whether or not a fit made them */
        determinism_data(which, 3, 300, 111, &p, &td);
        p.batch_size = which == 1 ? 4 : 1;
        if (train_snapshot(&p, &td.csr, &a) && train_snapshot(&p, &td.csr, &b)) {
            CHECK(snapshot_equal(&a, &b), "case %d: two runs with the same seed differ", which);
            snapshot_free(&b);
            p.hogwild = 1;
            p.n_threads = 1; /* (0 would be every core) */
            if (train_snapshot(&p, &td.csr, &b)) CHECK(snapshot_equal(&a, &b), "case %d: one Hogwild thread differs from the plain schedule", which);
            p.hogwild = 0;
            p.n_threads = 0;
            p.seed = 8;
            if (train_snapshot(&p, &td.csr, &c)) CHECK(!snapshot_equal(&a, &c), "case %d: seeds 7 and 8 gave identical models", which);
            snapshot_free(&c);
        }
        snapshot_free(&a), snapshot_free(&b);
        if (which == 0) { /* the seed drives the row order */
            mfm_model *m7, *m8;
            p.seed = 7;
            m7 = make_model(&p, 60, 5, 1);
            p.seed = 8;
            m8 = make_model(&p, 60, 5, 1);
            if (m7 && m8) {
                model_randomize(m7, 115, 0.3);
                model_randomize(m8, 115, 0.3);
                CHECK(mfm_fit(m7, &td.csr, NULL) == MFM_OK && mfm_fit(m8, &td.csr, NULL) == MFM_OK, "mfm_fit failed");
                snapshot_take(&a, m7);
                snapshot_take(&b, m8);
                CHECK(!snapshot_equal(&a, &b), "seeds 7 and 8 visit the rows in the same order");
                snapshot_free(&a), snapshot_free(&b);
            }
            mfm_model_free(m7), mfm_model_free(m8);
        }
        data_free(&td);
    }
}

/* A fixed thread count is bit-reproducible: n_threads = 2, batch 32, twice. */
void test_determinism_fixed_threads(void) {
    int which;
    for (which = 0; which < 4; which++) {
        mfm_params p;
        test_data td;
        snapshot a = {NULL, 0}, b = {NULL, 0};
        determinism_data(which, 3, 600, 112, &p, &td);
        p.batch_size = 32;
        p.n_threads = 2;
        if (train_snapshot(&p, &td.csr, &a) && train_snapshot(&p, &td.csr, &b))
            CHECK(snapshot_equal(&a, &b), "case %d: two runs with n_threads = 2 differ", which);
        snapshot_free(&a), snapshot_free(&b);
        data_free(&td);
    }
}

/* Every coordinate's gradient is summed in row order by the one worker that owns it, so
   n_threads 3, 2 and 5 give the bits of 1: AdaGrad and FTRL, batch 64 and 7, 2 epochs over
   1000 rows, every model and task, and FwFM on dense rows (every field once, in order), where a
   worker takes a's pairs whole or not at all: k = 4 (summed pair by pair), and k = 8 and 16
   (multiclass), summed from the terms their scores left where the CPU has AVX; and FM with
   pairs_only and FFM with linear_only (the owners' streams leave w at 0, or carry no v terms). Quick runs (the
   sanitizers', which look for races, not for other bits) take 300 rows and 3 threads. */
void test_threads_bit_identical(void) {
    static const mfm_optimizer optimizers[2] = {MFM_OPTIMIZER_ADAGRAD, MFM_OPTIMIZER_FTRL};
    static const int batches[2] = {64, 7}, thread_counts[3] = {3, 2, 5};
    const int n_counts = runner_quick() ? 1 : 3;
    const uint64_t n_rows = runner_quick() ? 300 : 1000;
    int which, i;
    for (which = 0; which < 9; which++)
        for (i = 0; i < 2; i++) {
            mfm_params p;
            mfm_task task;
            test_data td;
            data_spec spec;
            snapshot one, many;
            int ti;
            const int dense = which >= 4 && which <= 6;
            determinism_params(which == 6 ? 3 : dense ? 2 : which == 7 ? 0 : which == 8 ? 1 : which, &p, &task);
            if (which == 5 || which == 6) p.model = MFM_MODEL_FWFM, p.k = which == 5 ? 8 : 16;
            p.pairs_only = which == 7, p.linear_only = which == 8;
            spec = train_data(task, 3, n_rows, 113);
            if (dense) spec.min_nnz = spec.max_nnz = (int)spec.n_fields;
            data_random(&td, &spec);
            if (dense) data_fields_in_order(&td);
            p.optimizer = optimizers[i];
            p.batch_size = batches[i];
            p.n_threads = 1;
            if (train_snapshot(&p, &td.csr, &one))
                for (ti = 0; ti < n_counts; ti++) {
                    p.n_threads = thread_counts[ti];
                    if (!train_snapshot(&p, &td.csr, &many)) continue;
                    CHECK(snapshot_equal(&one, &many), "case %d, %s batch %d: %d threads differ from 1", which, i ? "FTRL" : "AdaGrad", batches[i],
                          thread_counts[ti]);
                    snapshot_free(&many);
                }
            snapshot_free(&one);
            data_free(&td);
        }
}

/* One worker sums each FFM row's gradients right after scoring it, several owners walk the
   rows apart: a slot's terms must come in the same order either way, also where a feature
   comes twice in a row. Rows with feature 7 at positions 1 and 2 and two partners of field 0
   around them (slot (7, field 0) receives four terms; taken pair by pair they would come in
   another order) must give 1 thread the bits of 3, and so must rows without a repeat. */
void test_batch_ffm_repeated_feature(void) {
    char *text = (char *)malloc(64 * 96 + 1), *at = text;
    mfm_read_options o;
    mfm_dataset *ds = NULL;
    mfm_params p;
    mfm_error e;
    snapshot one, many;
    int r;
    REQUIRE(text, "out of memory");
    for (r = 0; r < 64; r++) /* odd rows repeat feature 7, even rows have 8 in its second place */
        at += sprintf(at, "%d 0:%d:%.3f 1:7:%.3f 2:%d:%.3f 0:%d:%.3f 3:%d:%.3f\n", r % 3 == 0, r % 5, 0.3 + 0.011 * r, 1.7 - 0.013 * r,
                      r % 2 ? 7 : 8, 0.9 + 0.007 * r, 10 + r % 4, 0.45 + 0.005 * r, 14 + r % 3, 1.1 - 0.004 * r);
    memset(&o, 0, sizeof o);
    o.task = MFM_TASK_BINARY;
    o.n_threads = 1;
    if (CHECK(mfm_dataset_parse(text, strlen(text), "rows.txt", &o, &ds, &e) == MFM_OK, "parse: %s", e.message)) {
        const mfm_csr d = mfm_dataset_csr(ds);
        memset(&p, 0, sizeof p);
        p.model = MFM_MODEL_FFM;
        p.k = 4;
        p.n_epochs = 3;
        p.batch_size = 16;
        p.learning_rate = 0.3;
        p.normalize_rows = MFM_OFF; /* the values as written */
        p.seed = 5;
        p.n_threads = 1;
        if (train_snapshot(&p, &d, &one)) {
            p.n_threads = 3;
            if (train_snapshot(&p, &d, &many)) CHECK(snapshot_equal(&one, &many), "FFM with a feature twice in a row: 3 threads differ from 1");
            snapshot_free(&many);
            snapshot_free(&one);
        }
    }
    mfm_dataset_free(ds);
    free(text);
}

/* mfm_partial_fit of the rows (one pass in order) on one thread and on T threads of a schedule
   (params.hogwild or params.thread_chunks set in p): 1 when the two models hold the same bits, 0
   when they differ, -1 when one could not be trained (a failed check says why). */
static int one_thread_and_T_equal(const mfm_params *schedule, const mfm_csr *d, int T, uint32_t n_features, uint32_t n_fields) {
    mfm_model *m[2] = {NULL, NULL};
    snapshot one, many;
    int i, equal = -1;
    for (i = 0; i < 2; i++) {
        mfm_params p = *schedule;
        mfm_error e;
        p.n_threads = i ? T : 1;
        if (!i) p.hogwild = p.thread_chunks = 0;
        m[i] = make_model(&p, n_features, n_fields, 1);
        if (m[i] && !CHECK(mfm_partial_fit(m[i], d, &e) == MFM_OK, "mfm_partial_fit: %s", e.message)) mfm_model_free(m[i]), m[i] = NULL;
    }
    if (m[0] && m[1]) {
        snapshot_take(&one, m[0]);
        snapshot_take(&many, m[1]);
        equal = snapshot_equal(&one, &many);
        snapshot_free(&one);
        snapshot_free(&many);
    }
    mfm_model_free(m[0]);
    mfm_model_free(m[1]);
    return equal;
}

/* params.thread_chunks, checked exactly: the batch's rows in T blocks, block b of every batch
   with features (ids 20 b ..) and fields (3 b ..) of its own, and pairs_only, so that w0 and w
   take zero steps. Then chunk b of a batch is block b, every coordinate's sum is one chunk's,
   added to the owner's zero, and T threads' chunks must give one thread's bits: every sum,
   FFM's touched slots (by feature, and by slot at k = 512) and FwFM's r must reach their owner
   once. FM, FFM and FwFM; AdaGrad, SGD and Adam; 2 and 3 threads; three batches in one
   mfm_partial_fit (rows in order), the last of them short. */
void test_thread_chunks_exact(void) {
    static const mfm_model_type models[4] = {MFM_MODEL_FM, MFM_MODEL_FFM, MFM_MODEL_FWFM, MFM_MODEL_FFM};
    enum { BLOCK_ROWS = 40, BLOCK_FEATURES = 20, BLOCK_FIELDS = 3 };
    int mi, T, opt;
    for (mi = 0; mi < 4; mi++)
        for (T = 2; T <= 3; T++)
            for (opt = 0; opt < 3; opt++) {
                const uint64_t n_rows = (uint64_t)BLOCK_ROWS * T * 3 - 7 * (uint64_t)T; /* the third batch has 33 rows a block */
                data_spec spec = train_data(MFM_TASK_BINARY, 2, n_rows, 400 + (uint64_t)(mi * 10 + T));
                mfm_params p;
                test_data td;
                uint64_t r, j;
                spec.feature_range = BLOCK_FEATURES;
                spec.n_fields = BLOCK_FIELDS;
                spec.min_nnz = 2;
                data_random(&td, &spec);
                for (r = 0; r < td.csr.n_rows; r++) { /* row r of a batch lies in block (r mod batch) / block rows */
                    const uint64_t in_batch = r % ((uint64_t)BLOCK_ROWS * T), last_batch = r >= (uint64_t)BLOCK_ROWS * T * 2;
                    const uint32_t block = (uint32_t)(in_batch / (last_batch ? BLOCK_ROWS - 7 : BLOCK_ROWS));
                    for (j = td.offsets[r]; j < td.offsets[r + 1]; j++) {
                        td.features[j] += block * BLOCK_FEATURES;
                        td.fields[j] += block * BLOCK_FIELDS;
                    }
                }
                memset(&p, 0, sizeof p);
                p.model = models[mi];
                p.k = mi == 3 ? 512 : 4; /* FFM at k = 512: 3 T fields x 512 floats a feature, keyed by slot */
                p.pairs_only = 1;
                p.batch_size = BLOCK_ROWS * T;
                p.optimizer = opt == 0 ? MFM_OPTIMIZER_ADAGRAD : opt == 1 ? MFM_OPTIMIZER_SGD : MFM_OPTIMIZER_ADAM;
                p.seed = 9;
                p.thread_chunks = 1;
                CHECK(one_thread_and_T_equal(&p, &td.csr, T, (uint32_t)(BLOCK_FEATURES * T), (uint32_t)(BLOCK_FIELDS * T)) != 0,
                      "%s k=%d, optimizer %d: the chunks of %d threads on disjoint blocks differ from one thread", model_name(p.model), p.k, opt, T);
                data_free(&td);
            }
}

/* params.thread_chunks: the same thread count gives the same bits run after run (3 threads,
   batch 32 and a short last batch, twice, every model, multiclass FM, AdaGrad's line search);
   one thread's chunk is the shared batch (its bits); 3 threads' chunks add the same gradients in
   another order, so they differ from 1 thread's, in rounding only (test_validation.c refuses
   2, Hogwild with them, and the GPU). Quick runs (the sanitizers') take 300 rows. */
void test_thread_chunks_reproducible(void) {
    int which;
    for (which = 0; which < 4; which++) {
        mfm_params p;
        test_data td;
        snapshot shared = {NULL, 0}, a = {NULL, 0}, b = {NULL, 0};
        determinism_data(which, 3, runner_quick() ? 300 : 600, 117, &p, &td);
        p.batch_size = 32;
        p.n_threads = 1;
        if (train_snapshot(&p, &td.csr, &shared)) {
            p.thread_chunks = 1;
            if (train_snapshot(&p, &td.csr, &a)) CHECK(snapshot_equal(&shared, &a), "case %d: one thread's chunks differ from the shared batch", which);
            snapshot_free(&a);
            p.n_threads = 3;
            if (train_snapshot(&p, &td.csr, &a) && train_snapshot(&p, &td.csr, &b)) {
                size_t i, differ = 0;
                double worst = 0;
                CHECK(snapshot_equal(&a, &b), "case %d: two runs of 3 threads' chunks differ", which);
                CHECK(a.n == shared.n, "case %d: snapshots of different sizes", which);
                for (i = 0; i < a.n && a.n == shared.n; i++) {
                    const double d = fabs((double)a.data[i] - (double)shared.data[i]) / (1e-3 + fabs((double)shared.data[i]));
                    differ += a.data[i] != shared.data[i];
                    if (d > worst) worst = d;
                }
                CHECK(differ > 0, "case %d: 3 threads' chunks gave the bits of one thread: the sums should add in another order", which);
                CHECK(worst < 1e-3, "case %d: 3 threads' chunks differ from one thread by %g (relative): more than rounding", which, worst);
            }
            snapshot_free(&a), snapshot_free(&b);
        }
        snapshot_free(&shared);
        data_free(&td);
    }
}

/* Hogwild's shares, checked exactly: rows in T blocks whose features (ids 20 b ..) and fields
   (3 b ..) no other block has, with pairs_only so that w0 and w take zero steps. Then no share
   writes what another reads, and mfm_partial_fit (one pass in row order) with T Hogwild threads,
   share s taking block s, must give one thread's bits: every row trained once, in order, by the
   in-place steps (distinct fields) or the batched path (repeated fields) alike. FM, FFM and FwFM;
   batch 1 and 4; AdaGrad and SGD; 2 and 3 threads. FwFM at batch 1 holds R's steps back
   (test_hogwild_fwfm_holds_r_back), so there one thread is not its measure. */
void test_hogwild_disjoint_shares_exact(void) {
    static const mfm_model_type models[3] = {MFM_MODEL_FM, MFM_MODEL_FFM, MFM_MODEL_FWFM};
    enum { BLOCK_ROWS = 60, BLOCK_FEATURES = 20, BLOCK_FIELDS = 3 };
    int mi, T, batch, opt;
    for (mi = 0; mi < 3; mi++)
        for (T = 2; T <= 3; T++)
            for (batch = 1; batch <= 4; batch += 3)
                for (opt = 0; opt < 2 && !(models[mi] == MFM_MODEL_FWFM && batch == 1); opt++) {
                    data_spec spec = train_data(MFM_TASK_BINARY, 2, (uint64_t)BLOCK_ROWS * T, 300 + (uint64_t)(mi * 10 + T));
                    mfm_params p;
                    test_data td;
                    uint64_t r, j;
                    spec.feature_range = BLOCK_FEATURES;
                    spec.n_fields = BLOCK_FIELDS;
                    data_random(&td, &spec);
                    for (r = 0; r < td.csr.n_rows; r++)
                        for (j = td.offsets[r]; j < td.offsets[r + 1]; j++) {
                            td.features[j] += (uint32_t)(r / BLOCK_ROWS) * BLOCK_FEATURES;
                            td.fields[j] += (uint32_t)(r / BLOCK_ROWS) * BLOCK_FIELDS;
                        }
                    memset(&p, 0, sizeof p);
                    p.model = models[mi];
                    p.k = 4;
                    p.pairs_only = 1;
                    p.batch_size = batch;
                    p.optimizer = opt ? MFM_OPTIMIZER_SGD : MFM_OPTIMIZER_ADAGRAD;
                    p.seed = 9;
                    p.hogwild = 1;
                    CHECK(one_thread_and_T_equal(&p, &td.csr, T, (uint32_t)(BLOCK_FEATURES * T), (uint32_t)(BLOCK_FIELDS * T)) != 0,
                          "%s, %s, batch %d: %d Hogwild threads on disjoint blocks differ from one thread", model_name(p.model),
                          opt ? "SGD" : "AdaGrad", batch, T);
                    data_free(&td);
                }
}

/* Hogwild FwFM at batch 1: each share sums R's gradients over 32 rows and then steps R once (the
   sum under AdaGrad, the mean under SGD), and at the end of its pass; everything else steps row
   by row. The data's T blocks of 70 rows (pairs_only: w0 and w stay 0) are such that no share
   writes what another reads, so T threads must give what the reference gives block by block
   (ref_rows_holding_r), each share stepping R at rows 32 and 64 and at its end. */
static void check_holding_r(const mfm_csr *d, int T, int opt, uint32_t n_features, uint32_t n_fields, uint64_t block_rows, const char *shape) {
    mfm_params p;
    mfm_model *m;
    ref_model before, expected;
    ref_opt o;
    uint64_t r, *rows;
    int b;
    char what[96];
    memset(&p, 0, sizeof p);
    p.model = MFM_MODEL_FWFM, p.k = 4, p.pairs_only = 1, p.batch_size = 1, p.seed = 9, p.learning_rate = 0.1;
    p.optimizer = opt ? MFM_OPTIMIZER_SGD : MFM_OPTIMIZER_ADAGRAD;
    p.n_threads = T, p.hogwild = 1;
    snprintf(what, sizeof what, "FwFM %s, %d Hogwild threads, %s", opt ? "SGD" : "AdaGrad", T, shape);
    m = make_model(&p, n_features, n_fields, 1);
    rows = (uint64_t *)malloc(d->n_rows * sizeof *rows);
    if (m && rows) {
        mfm_error e;
        o = ref_opt_from_params(mfm_model_params(m));
        ref_load(&before, m);
        ref_copy(&expected, &before);
        for (r = 0; r < d->n_rows; r++) rows[r] = r;
        for (b = 0; b < T; b++) ref_rows_holding_r(&expected, &o, d, rows + (uint64_t)b * block_rows, block_rows, 32, 1);
        if (CHECK(mfm_partial_fit(m, d, &e) == MFM_OK, "%s: mfm_partial_fit: %s", what, e.message)) check_model(m, &expected, &before, NULL, 1e-3, 2e-6, what);
        ref_free(&before);
        ref_free(&expected);
    }
    free(rows);
    mfm_model_free(m);
}

/* Two shapes of blocks whose features (ids 20 b ..) no other block has. Fields apart: block b's
   rows hold its fields 3 b .. 3 b + 2, each once. Dense: the first block's rows hold every one
   of the model's 9 fields once, in order (FwFM's dense rows, whose held-back sums of R are added
   four at a time), and the other blocks' rows are cut to one non-zero (no pair: nothing of R). */
void test_hogwild_fwfm_holds_r_back(void) {
    enum { BLOCK_ROWS = 70, BLOCK_FEATURES = 20 };
    int T, opt, dense;
    for (dense = 0; dense < 2; dense++)
        for (T = 2; T <= 3; T++)
            for (opt = 0; opt < 2; opt++) {
                const uint32_t fields = dense ? 9 : 3; /* a row's */
                data_spec spec = train_data(MFM_TASK_BINARY, 2, (uint64_t)BLOCK_ROWS * T, 400 + (uint64_t)(10 * dense + T));
                test_data td;
                uint64_t r, j, at = 0;
                spec.feature_range = BLOCK_FEATURES;
                spec.n_fields = fields;
                spec.min_nnz = spec.max_nnz = fields; /* each field once: every row steps in place */
                data_random(&td, &spec);
                for (r = 0; r < td.csr.n_rows; r++) { /* in place: a row moves only towards the front */
                    const uint64_t block = r / BLOCK_ROWS, keep = dense && block ? 1 : fields, first = td.offsets[r];
                    td.offsets[r] = at;
                    for (j = 0; j < keep; j++, at++) {
                        td.features[at] = td.features[first + j] + (uint32_t)block * BLOCK_FEATURES;
                        td.fields[at] = (uint32_t)j + (dense ? 0 : (uint32_t)block * fields);
                        if (td.values) td.values[at] = td.values[first + j];
                    }
                }
                td.offsets[td.csr.n_rows] = at;
                check_holding_r(&td.csr, T, opt, (uint32_t)(BLOCK_FEATURES * T), dense ? fields : fields * (uint32_t)T, BLOCK_ROWS, dense ? "dense rows" : "fields apart");
                data_free(&td);
            }
}

/* mfm_train is mfm_model_create with the data's shape (max id + 1 for features and fields,
   max label + 1 classes for multiclass with n_classes 0) followed by mfm_fit: bit-identical.
   data.n_features, when set, gives the model's feature count. */
void test_train_is_create_plus_fit(void) {
    int which;
    for (which = 0; which < 4; which++) {
        mfm_params p;
        test_data td;
        snapshot trained, fitted;
        mfm_model *m = NULL;
        uint32_t max_feature = 0, max_field = 0, max_label = 0;
        uint64_t j, r;
        determinism_data(which, 4, 200, 114, &p, &td);
        for (j = 0; j < td.offsets[td.csr.n_rows]; j++) {
            max_feature = td.features[j] > max_feature ? td.features[j] : max_feature;
            max_field = td.fields[j] > max_field ? td.fields[j] : max_field;
        }
        for (r = 0; r < td.csr.n_rows; r++) max_label = (uint32_t)td.labels[r] > max_label ? (uint32_t)td.labels[r] : max_label;
        if (train_snapshot(&p, &td.csr, &trained)) {
            m = make_model(&p, max_feature + 1, max_field + 1, max_label + 1);
            if (m && CHECK(mfm_fit(m, &td.csr, NULL) == MFM_OK, "mfm_fit failed")) {
                snapshot_take(&fitted, m);
                CHECK(snapshot_equal(&trained, &fitted), "case %d: mfm_train differs from mfm_model_create + mfm_fit", which);
                snapshot_free(&fitted);
            }
            mfm_model_free(m);
            m = NULL;
        }
        snapshot_free(&trained);
        td.csr.n_features = 100;
        if (CHECK(mfm_train(&p, &td.csr, &m, NULL) == MFM_OK && m, "mfm_train with data.n_features = 100 failed")) {
            mfm_model_info info;
            mfm_model_get_info(m, &info);
            CHECK(info.n_features == 100, "case %d: data.n_features = 100 gave a model of %u features", which, (unsigned)info.n_features);
            CHECK(info.n_classes == (p.task == MFM_TASK_MULTICLASS ? max_label + 1 : 1u), "case %d: %u classes", which, (unsigned)info.n_classes);
            CHECK(info.epochs_trained == 2, "case %d: epochs_trained = %u after 2 epochs", which, (unsigned)info.epochs_trained);
        }
        mfm_model_free(m);
        data_free(&td);
    }
}
