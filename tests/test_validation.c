/* test_validation.c - every invalid input of docs/SPEC.md section 9 returns its status with an error
   record whose message names the bad thing, and changes nothing (the model's parameters and
   state are bit-identical, mfm_train hands back no model, mfm_predict writes no output). */
#include "ref.h"
#include "runner.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The status, the error record and its message. `words`: '|'-separated names one of which
   the message must contain as a word (NULL: any non-empty sentence). */
static void expect_failure(mfm_status got, const mfm_error *e, mfm_status want, const char *words, const char *what) {
    CHECK(got == want, "%s: status %d, expected %d (message: %s)", what, (int)got, (int)want, got ? e->message : "");
    if (got == MFM_OK) return;
    CHECK(e->status == got, "%s: err->status %d but %d returned", what, (int)e->status, (int)got);
    CHECK(e->message[0] != '\0', "%s: empty error message", what);
    if (words) CHECK(mentions_word(e->message, words), "%s: the message \"%s\" names none of %s", what, e->message, words);
}

/* ---- parameters: mfm_train and mfm_model_create refuse them and hand back no model ---- */

typedef enum param_change {
    P_MODEL, P_TASK, P_OPTIMIZER, P_CLASS_WEIGHT, P_K, P_BATCH, P_LR_NEG, P_LR_NAN, P_LR_INF, P_L2_LIN_NEG, P_L2_LIN_NAN, P_L2_FAC_INF,
    P_L2_FAC_NEG, P_L1_SGD, P_L1_ADAGRAD, P_L1_ADAM, P_L1_FACTORS_DEFAULT_OPT, P_SMOOTH_ONE, P_SMOOTH_NEG, P_SMOOTH_NAN, P_CW_NEG, P_CW_NAN,
    P_CW_ZERO, P_CW_NULL, P_HOGWILD_TWO, P_HOGWILD_CUDA, P_CHUNKS_TWO, P_CHUNKS_HOGWILD, P_CHUNKS_CUDA
} param_change;

typedef struct param_case {
    param_change change;
    const char *words;
    const char *what;
} param_case;

static void change_params(mfm_params *p, param_change c) {
    static const float cw_neg[2] = {1, -1}, cw_zero[2] = {0, 0};
    static float cw_nan[2] = {1, 0};
    cw_nan[1] = NAN;
    switch (c) {
    case P_MODEL: p->model = (mfm_model_type)99; break;
    case P_TASK: p->task = (mfm_task)99; break;
    case P_OPTIMIZER: p->optimizer = (mfm_optimizer)99; break;
    case P_CLASS_WEIGHT: p->class_weight = (mfm_class_weight)99; break;
    case P_K: p->k = -1; break;
    case P_BATCH: p->batch_size = -1; break;
    case P_LR_NEG: p->learning_rate = -0.1; break;
    case P_LR_NAN: p->learning_rate = NAN; break;
    case P_LR_INF: p->learning_rate = INFINITY; break;
    case P_L2_LIN_NEG: p->l2_linear = -1; break;
    case P_L2_LIN_NAN: p->l2_linear = NAN; break;
    case P_L2_FAC_INF: p->l2_factors = INFINITY; break;
    case P_L2_FAC_NEG: p->l2_factors = -0.5; break;
    case P_L1_SGD: p->optimizer = MFM_OPTIMIZER_SGD, p->l1_linear = 0.1; break;
    case P_L1_ADAGRAD: p->optimizer = MFM_OPTIMIZER_ADAGRAD, p->l1_linear = 0.1; break;
    case P_L1_ADAM: p->optimizer = MFM_OPTIMIZER_ADAM, p->l1_factors = 0.1; break;
    case P_L1_FACTORS_DEFAULT_OPT: p->optimizer = MFM_OPTIMIZER_DEFAULT, p->l1_factors = 0.1; break;
    case P_SMOOTH_ONE: p->label_smoothing = 1.0; break;
    case P_SMOOTH_NEG: p->label_smoothing = -0.1; break;
    case P_SMOOTH_NAN: p->label_smoothing = NAN; break;
    case P_CW_NEG: p->class_weight = MFM_CLASS_WEIGHT_EXPLICIT, p->class_weights = cw_neg; break;
    case P_CW_NAN: p->class_weight = MFM_CLASS_WEIGHT_EXPLICIT, p->class_weights = cw_nan; break;
    case P_CW_ZERO: p->class_weight = MFM_CLASS_WEIGHT_EXPLICIT, p->class_weights = cw_zero; break;
    case P_CW_NULL: p->class_weight = MFM_CLASS_WEIGHT_EXPLICIT, p->class_weights = NULL; break;
    case P_HOGWILD_TWO: p->hogwild = 2; break;
    case P_HOGWILD_CUDA: p->hogwild = 1, p->backend = MFM_BACKEND_CUDA, p->n_threads = 2; break;
    case P_CHUNKS_TWO: p->thread_chunks = 2; break;
    case P_CHUNKS_HOGWILD: p->thread_chunks = 1, p->hogwild = 1; break;
    case P_CHUNKS_CUDA: p->thread_chunks = 1, p->backend = MFM_BACKEND_CUDA; break;
    }
}

/* A small valid FFM binary data set: 4 rows, features 0..7, fields 0..2, labels 0/1. */
typedef struct fixture {
    uint64_t offsets[5];
    uint32_t features[9], fields[9];
    float values[9], labels[4], weights[4];
    mfm_csr csr;
} fixture;

static void fixture_init(fixture *f, int multiclass) {
    static const uint64_t offsets[5] = {0, 3, 5, 5, 9};
    static const uint32_t features[9] = {0, 3, 7, 1, 2, 4, 5, 6, 0}, fields[9] = {0, 1, 2, 0, 2, 1, 1, 0, 2};
    static const float values[9] = {1, 0.5f, 2, 1, 1, -1, 1, 0.25f, 1};
    static const float labels[4] = {1, 0, 0, 1}, multi_labels[4] = {2, 0, 1, 2}, weights[4] = {1, 2, 0.5f, 1};
    memset(f, 0, sizeof *f);
    memcpy(f->offsets, offsets, sizeof offsets);
    memcpy(f->features, features, sizeof features);
    memcpy(f->fields, fields, sizeof fields);
    memcpy(f->values, values, sizeof values);
    memcpy(f->labels, multiclass ? multi_labels : labels, sizeof labels);
    memcpy(f->weights, weights, sizeof weights);
    f->csr.n_rows = 4;
    f->csr.row_offsets = f->offsets;
    f->csr.features = f->features;
    f->csr.fields = f->fields;
    f->csr.values = f->values;
    f->csr.labels = f->labels;
    f->csr.weights = f->weights;
}

static mfm_params valid_params(void) {
    mfm_params p;
    memset(&p, 0, sizeof p);
    p.model = MFM_MODEL_FFM;
    p.k = 2;
    p.n_epochs = 1;
    return p;
}

/* Unknown enum values, k < 0, batch_size < 0, negative/NaN/inf learning rate and L2, L1 with
   any optimizer but FTRL, label smoothing outside [0, 1), bad explicit class weights, hogwild
   other than 0 and 1 or asked of the CUDA backend: each is MFM_ERR_INVALID_PARAM from mfm_train
   and from mfm_model_create, naming the parameter, with no model handed back. The same values
   with FTRL (L1) or k = 0 (= 8) are accepted. */
void test_invalid_params(void) {
    static const param_case cases[] = {
        {P_MODEL, "model", "unknown model"},
        {P_TASK, "task", "unknown task"},
        {P_OPTIMIZER, "optimizer", "unknown optimizer"},
        {P_CLASS_WEIGHT, "class_weight", "unknown class_weight"},
        {P_K, "k", "k = -1"},
        {P_BATCH, "batch_size", "batch_size = -1"},
        {P_LR_NEG, "learning_rate", "learning_rate = -0.1"},
        {P_LR_NAN, "learning_rate", "learning_rate = NaN"},
        {P_LR_INF, "learning_rate", "learning_rate = inf"},
        {P_L2_LIN_NEG, "l2_linear", "l2_linear = -1"},
        {P_L2_LIN_NAN, "l2_linear", "l2_linear = NaN"},
        {P_L2_FAC_INF, "l2_factors", "l2_factors = inf"},
        {P_L2_FAC_NEG, "l2_factors", "l2_factors = -0.5"},
        {P_L1_SGD, "l1_linear", "L1 with SGD"},
        {P_L1_ADAGRAD, "l1_linear", "L1 with AdaGrad"},
        {P_L1_ADAM, "l1_factors", "L1 with Adam"},
        {P_L1_FACTORS_DEFAULT_OPT, "l1_factors", "L1 with the default optimizer"},
        {P_SMOOTH_ONE, "label_smoothing", "label_smoothing = 1"},
        {P_SMOOTH_NEG, "label_smoothing", "label_smoothing = -0.1"},
        {P_SMOOTH_NAN, "label_smoothing", "label_smoothing = NaN"},
        {P_CW_NEG, "class_weights", "class_weights with a negative value"},
        {P_CW_NAN, "class_weights", "class_weights with NaN"},
        {P_CW_ZERO, "class_weights", "class_weights all zero"},
        {P_CW_NULL, "class_weights", "class_weight explicit without class_weights"},
        {P_HOGWILD_TWO, "hogwild", "hogwild = 2"},
        {P_HOGWILD_CUDA, "hogwild", "hogwild with the CUDA backend"},
        {P_CHUNKS_TWO, "thread_chunks = 2", "thread_chunks = 2"},
        {P_CHUNKS_HOGWILD, "hogwild", "thread_chunks with hogwild"},
        {P_CHUNKS_CUDA, "CUDA", "thread_chunks with the CUDA backend"},
    };
    fixture f;
    size_t i;
    fixture_init(&f, 0);
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        mfm_params p = valid_params();
        mfm_model *m = NULL;
        mfm_error e;
        char what[128];
        change_params(&p, cases[i].change);
        memset(&e, 0, sizeof e);
        snprintf(what, sizeof what, "mfm_train, %s", cases[i].what);
        expect_failure(mfm_train(&p, &f.csr, &m, &e), &e, MFM_ERR_INVALID_PARAM, cases[i].words, what);
        CHECK(m == NULL, "%s: a model was handed back", what);
        mfm_model_free(m);
        m = NULL;
        memset(&e, 0, sizeof e);
        snprintf(what, sizeof what, "mfm_model_create, %s", cases[i].what);
        expect_failure(mfm_model_create(&p, 8, 3, 1, &m, &e), &e, MFM_ERR_INVALID_PARAM, cases[i].words, what);
        CHECK(m == NULL, "%s: a model was handed back", what);
        mfm_model_free(m);
    }
    { /* the valid neighbours: L1 with FTRL, k = 0 meaning 8 */
        mfm_params p = valid_params();
        mfm_model *m = NULL;
        mfm_error e;
        mfm_status st;
        p.optimizer = MFM_OPTIMIZER_FTRL;
        p.l1_linear = p.l1_factors = 0.1;
        p.k = 0;
        st = mfm_train(&p, &f.csr, &m, &e);
        if (CHECK(st == MFM_OK && m, "FTRL with L1 and k = 0 refused: %d %s", (int)st, st ? e.message : "")) {
            mfm_model_info info;
            mfm_model_get_info(m, &info);
            CHECK(info.k == 4, "k = 0 gave k = %d, expected the default 4", info.k);
        }
        mfm_model_free(m);
    }
}

/* ---- data: mfm_fit refuses it and leaves the model as it was ---- */

typedef enum data_change {
    D_FEATURE_BEYOND_MODEL, D_FIELD_BEYOND_MODEL, D_N_FEATURES_BEYOND_MODEL, D_N_FIELDS_BEYOND_MODEL, D_FEATURE_BEYOND_DATA_N,
    D_NO_FIELDS, D_OFFSET_START, D_OFFSET_DECREASE, D_NULL_OFFSETS, D_NULL_FEATURES, D_VALUE_NAN, D_VALUE_INF, D_LABEL_NAN,
    D_LABEL_INF, D_LABEL_TWO, D_LABEL_MINUS_ONE, D_NULL_LABELS, D_WEIGHT_NEG, D_WEIGHT_NAN, D_WEIGHT_ALL_ZERO, D_CLASS_TOO_BIG,
    D_CLASS_FRACTION, D_CLASS_NEGATIVE
} data_change;

typedef struct data_case {
    data_change change;
    int multiclass; /* the case needs a multiclass model (C = 3) */
    mfm_status status;
    const char *words;
    const char *what;
} data_case;

static void change_data(fixture *f, data_change c) {
    switch (c) {
    case D_FEATURE_BEYOND_MODEL: f->features[4] = 8; break; /* the model has features 0..7 */
    case D_FIELD_BEYOND_MODEL: f->fields[6] = 3; break;     /* and fields 0..2 */
    case D_N_FEATURES_BEYOND_MODEL: f->csr.n_features = 9; break;
    case D_N_FIELDS_BEYOND_MODEL: f->csr.n_fields = 4; break;
    case D_FEATURE_BEYOND_DATA_N: f->csr.n_features = 6; break; /* feature 7 occurs */
    case D_NO_FIELDS: f->csr.fields = NULL; break;
    case D_OFFSET_START: f->offsets[0] = 1; break;
    case D_OFFSET_DECREASE: f->offsets[2] = 2; break; /* 3 then 2 */
    case D_NULL_OFFSETS: f->csr.row_offsets = NULL; break;
    case D_NULL_FEATURES: f->csr.features = NULL; break;
    case D_VALUE_NAN: f->values[5] = NAN; break;
    case D_VALUE_INF: f->values[8] = -INFINITY; break;
    case D_LABEL_NAN: f->labels[2] = NAN; break;
    case D_LABEL_INF: f->labels[1] = INFINITY; break;
    case D_LABEL_TWO: f->labels[3] = 2; break;
    case D_LABEL_MINUS_ONE: f->labels[0] = -1; break;
    case D_NULL_LABELS: f->csr.labels = NULL; break;
    case D_WEIGHT_NEG: f->weights[1] = -1; break;
    case D_WEIGHT_NAN: f->weights[2] = NAN; break;
    case D_WEIGHT_ALL_ZERO: memset(f->weights, 0, sizeof f->weights); break;
    case D_CLASS_TOO_BIG: f->labels[1] = 3; break;
    case D_CLASS_FRACTION: f->labels[2] = 1.5f; break;
    case D_CLASS_NEGATIVE: f->labels[0] = -1; break;
    }
}

static const data_case fit_cases[] = {
    {D_FEATURE_BEYOND_MODEL, 0, MFM_ERR_SHAPE_MISMATCH, "feature|features", "feature id 8 >= the model's 8 features"},
    {D_FIELD_BEYOND_MODEL, 0, MFM_ERR_SHAPE_MISMATCH, "field|fields", "field id 3 >= the model's 3 fields"},
    {D_N_FEATURES_BEYOND_MODEL, 0, MFM_ERR_SHAPE_MISMATCH, "n_features|features|feature", "data.n_features 9 for a model of 8"},
    {D_N_FIELDS_BEYOND_MODEL, 0, MFM_ERR_SHAPE_MISMATCH, "n_fields|fields|field", "data.n_fields 4 for a model of 3"},
    {D_FEATURE_BEYOND_DATA_N, 0, MFM_ERR_INVALID_DATA, "feature|features|n_features", "feature id 7 >= data.n_features 6"},
    {D_NO_FIELDS, 0, MFM_ERR_INVALID_DATA, "fields|field", "FFM data without fields"},
    {D_OFFSET_START, 0, MFM_ERR_INVALID_DATA, "row_offsets", "row_offsets[0] = 1"},
    {D_OFFSET_DECREASE, 0, MFM_ERR_INVALID_DATA, "row_offsets", "decreasing row_offsets"},
    {D_NULL_OFFSETS, 0, MFM_ERR_INVALID_DATA, "row_offsets", "row_offsets NULL with rows"},
    {D_NULL_FEATURES, 0, MFM_ERR_INVALID_DATA, "features", "features NULL with non-zeros"},
    {D_VALUE_NAN, 0, MFM_ERR_INVALID_DATA, "value|values", "a NaN value"},
    {D_VALUE_INF, 0, MFM_ERR_INVALID_DATA, "value|values", "an infinite value"},
    {D_LABEL_NAN, 0, MFM_ERR_INVALID_DATA, "label|labels", "a NaN label"},
    {D_LABEL_INF, 0, MFM_ERR_INVALID_DATA, "label|labels", "an infinite label"},
    {D_LABEL_TWO, 0, MFM_ERR_INVALID_DATA, "label|labels", "binary label 2"},
    {D_LABEL_MINUS_ONE, 0, MFM_ERR_INVALID_DATA, "label|labels", "binary label -1"},
    {D_NULL_LABELS, 0, MFM_ERR_INVALID_DATA, "label|labels", "labels NULL at fit"},
    {D_WEIGHT_NEG, 0, MFM_ERR_INVALID_DATA, "weight|weights", "a negative row weight"},
    {D_WEIGHT_NAN, 0, MFM_ERR_INVALID_DATA, "weight|weights", "a NaN row weight"},
    {D_WEIGHT_ALL_ZERO, 0, MFM_ERR_INVALID_DATA, "weight|weights", "all row weights zero"},
    {D_CLASS_TOO_BIG, 1, MFM_ERR_INVALID_DATA, "label|labels|class", "class id 3 for 3 classes"},
    {D_CLASS_FRACTION, 1, MFM_ERR_INVALID_DATA, "label|labels|class", "class id 1.5"},
    {D_CLASS_NEGATIVE, 1, MFM_ERR_INVALID_DATA, "label|labels|class", "class id -1"},
};

/* Each malformed data set of section 9 makes mfm_fit return its status (SHAPE_MISMATCH where
   the data does not fit the model, INVALID_DATA where it is malformed) with a message naming
   the bad part, and the model's parameters, state and epoch count stay as they were; the
   unmodified data then trains fine (the fixture itself is valid). */
void test_invalid_data_at_fit(void) {
    size_t i;
    for (i = 0; i <= sizeof fit_cases / sizeof fit_cases[0]; i++) {
        const int valid = i == sizeof fit_cases / sizeof fit_cases[0], multiclass = valid ? 0 : fit_cases[i].multiclass;
        mfm_params p = valid_params();
        mfm_model *m;
        fixture f;
        snapshot before, after;
        mfm_model_info info;
        mfm_error e;
        mfm_status st;
        p.optimizer = MFM_OPTIMIZER_ADAM; /* three state slots to keep */
        p.task = multiclass ? MFM_TASK_MULTICLASS : MFM_TASK_BINARY;
        m = make_model(&p, 8, 3, 3);
        if (!m) continue;
        model_randomize(m, 141 + i, 0.3);
        fixture_init(&f, multiclass);
        if (!valid) change_data(&f, fit_cases[i].change);
        snapshot_take(&before, m);
        memset(&e, 0, sizeof e);
        st = mfm_fit(m, &f.csr, &e);
        mfm_model_get_info(m, &info);
        if (valid) {
            CHECK(st == MFM_OK, "the unmodified fixture was refused: %d %s", (int)st, st ? e.message : "");
            CHECK(info.epochs_trained == 1, "epochs_trained %u after one epoch", (unsigned)info.epochs_trained);
        } else {
            expect_failure(st, &e, fit_cases[i].status, fit_cases[i].words, fit_cases[i].what);
            snapshot_take(&after, m);
            CHECK(snapshot_equal(&before, &after), "%s: the failed mfm_fit changed the model", fit_cases[i].what);
            CHECK(info.epochs_trained == 0, "%s: epochs_trained %u after a failed fit", fit_cases[i].what, (unsigned)info.epochs_trained);
            snapshot_free(&after);
        }
        snapshot_free(&before);
        mfm_model_free(m);
    }
}

/* mfm_predict refuses ids beyond the model (SHAPE_MISMATCH), FFM data without fields and
   non-finite values (INVALID_DATA), a too small capacity and an unknown output kind, and then
   writes nothing into the output. It does not read labels: NaN or NULL labels are fine. */
void test_invalid_data_at_predict(void) {
    static const data_case cases[] = {
        {D_FEATURE_BEYOND_MODEL, 0, MFM_ERR_SHAPE_MISMATCH, "feature|features", "predict: feature id beyond the model"},
        {D_FIELD_BEYOND_MODEL, 0, MFM_ERR_SHAPE_MISMATCH, "field|fields", "predict: field id beyond the model"},
        {D_NO_FIELDS, 0, MFM_ERR_INVALID_DATA, "fields|field", "predict: FFM data without fields"},
        {D_OFFSET_DECREASE, 0, MFM_ERR_INVALID_DATA, "row_offsets", "predict: decreasing row_offsets"},
        {D_VALUE_NAN, 0, MFM_ERR_INVALID_DATA, "value|values", "predict: a NaN value"},
    };
    mfm_params p = valid_params();
    mfm_model *m = make_model(&p, 8, 3, 1);
    float out[8];
    fixture f;
    mfm_error e;
    mfm_status st;
    size_t i, j;
    if (!m) return;
    model_randomize(m, 151, 0.3);
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fixture_init(&f, 0);
        change_data(&f, cases[i].change);
        for (j = 0; j < 8; j++) out[j] = -9.0f;
        memset(&e, 0, sizeof e);
        expect_failure(mfm_predict(m, &f.csr, MFM_OUTPUT_SCORE, out, 8, &e), &e, cases[i].status, cases[i].words, cases[i].what);
        CHECK(out[0] == -9.0f && out[3] == -9.0f, "%s: output written after a failure", cases[i].what);
    }
    fixture_init(&f, 0);
    memset(&e, 0, sizeof e);
    out[0] = -9.0f;
    st = mfm_predict(m, &f.csr, MFM_OUTPUT_SCORE, out, 3, &e); /* 4 rows need 4 values */
    expect_failure(st, &e, MFM_ERR_INVALID_ARGUMENT, "capacity|output", "predict: capacity 3 for 4 rows");
    CHECK(out[0] == -9.0f, "predict: output written although the capacity is too small");
    memset(&e, 0, sizeof e);
    st = mfm_predict(m, &f.csr, (mfm_output)99, out, 8, &e);
    CHECK(st == MFM_ERR_INVALID_ARGUMENT || st == MFM_ERR_INVALID_PARAM, "predict: unknown output kind gave status %d", (int)st);
    if (st != MFM_OK) CHECK(e.message[0] != '\0', "predict: unknown output kind without a message");
    f.labels[0] = NAN;
    CHECK(mfm_predict(m, &f.csr, MFM_OUTPUT_SCORE, out, 4, NULL) == MFM_OK, "predict refused data with a NaN label (labels are not read)");
    f.csr.labels = NULL;
    CHECK(mfm_predict(m, &f.csr, MFM_OUTPUT_SCORE, out, 4, NULL) == MFM_OK, "predict refused data without labels");
    mfm_model_free(m);
}

/* mfm_predict's checks of a large CSR (600000 rows of 4 non-zeros, 19 MB: on up to 3 threads,
   each a share of the rows and of the non-zeros) name the data's first bad row, in the first
   share or a later one, as one thread does: the largest feature id's first row (it occurs in
   two shares), a field id beyond the model, a decreasing offset, a NaN value. */
void test_invalid_data_on_threads(void) {
    enum { ROWS = 600000, Z = 4 };
    static const struct {
        uint64_t row, row_too;   /* where the change is made (row_too: again, later; 0: nowhere) */
        int what;                /* 0: feature 9, 1: field 5, 2: offset, 3: NaN */
        const char *words;
    } cases[] = {
        {412345, 555555, 0, "feature|features"}, {17, 412345, 0, "feature|features"}, {299999, 0, 1, "field|fields"},
        {500001, 0, 2, "row_offsets"},          {3, 0, 2, "row_offsets"},            {450000, 0, 3, "value|values"},
    };
    mfm_params p = valid_params();
    mfm_model *m = make_model(&p, 8, 3, 1);
    uint64_t *offsets = (uint64_t *)malloc((ROWS + 1) * sizeof(uint64_t)), r;
    uint32_t *features = (uint32_t *)malloc((size_t)ROWS * Z * sizeof(uint32_t)), *fields = (uint32_t *)malloc((size_t)ROWS * Z * sizeof(uint32_t));
    float *values = (float *)malloc((size_t)ROWS * Z * sizeof(float)), *out = (float *)malloc(ROWS * sizeof(float));
    mfm_csr d;
    size_t i;
    if (!m || !offsets || !features || !fields || !values || !out) {
        CHECK(m != NULL, "no model");
        free(offsets), free(features), free(fields), free(values), free(out), mfm_model_free(m);
        return;
    }
    memset(&d, 0, sizeof d);
    d.n_rows = ROWS, d.row_offsets = offsets, d.features = features, d.fields = fields, d.values = values;
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char first[600], row_name[64];
        mfm_error e;
        int threads;
        for (r = 0; r <= ROWS; r++) offsets[r] = r * Z;
        for (r = 0; r < (uint64_t)ROWS * Z; r++) features[r] = (uint32_t)(r % 8), fields[r] = (uint32_t)(r % 3), values[r] = 1;
        for (r = cases[i].row; r; r = r == cases[i].row_too ? 0 : cases[i].row_too) {
            if (cases[i].what == 0) features[r * Z + 2] = 9;
            if (cases[i].what == 1) fields[r * Z + 1] = 5;
            if (cases[i].what == 2) offsets[r] = offsets[r - 1] - 1; /* row r - 1 ends before it starts: 0-based row r - 1 decreases */
            if (cases[i].what == 3) values[r * Z + 3] = NAN;
        }
        snprintf(row_name, sizeof row_name, cases[i].what == 2 ? "row %llu" : "row %llu (1-based)",
                 (unsigned long long)(cases[i].what == 2 ? cases[i].row : cases[i].row + 1));
        for (threads = 1; threads <= 3; threads += 2) {
            mfm_model_set_threads(m, threads, NULL);
            memset(&e, 0, sizeof e);
            expect_failure(mfm_predict(m, &d, MFM_OUTPUT_SCORE, out, ROWS, &e), &e, cases[i].what < 2 ? MFM_ERR_SHAPE_MISMATCH : MFM_ERR_INVALID_DATA, cases[i].words,
                           row_name);
            CHECK(strstr(e.message, row_name) != NULL, "case %zu, %d threads: \"%s\" does not name %s", i, threads, e.message, row_name);
            if (threads == 1) snprintf(first, sizeof first, "%s", e.message);
            else CHECK(strcmp(first, e.message) == 0, "case %zu: 1 thread said \"%s\", 3 threads \"%s\"", i, first, e.message);
        }
    }
    for (r = 0; r <= ROWS; r++) offsets[r] = r * Z;
    for (r = 0; r < (uint64_t)ROWS * Z; r++) features[r] = (uint32_t)(r % 8), fields[r] = (uint32_t)(r % 3), values[r] = 1;
    CHECK(mfm_predict(m, &d, MFM_OUTPUT_SCORE, out, ROWS, NULL) == MFM_OK, "the large valid data was refused");
    free(offsets), free(features), free(fields), free(values), free(out);
    mfm_model_free(m);
}

/* mfm_train validates the data before it creates anything: a binary label 2, a multiclass
   label beyond params.n_classes, FFM or FwFM data without fields, all-zero weights, offsets
   not starting at 0 give INVALID_DATA and no model (each case with FFM and with FwFM). */
void test_invalid_data_at_train(void) {
    static const data_case cases[] = {
        {D_LABEL_TWO, 0, MFM_ERR_INVALID_DATA, "label|labels", "train: binary label 2"},
        {D_CLASS_TOO_BIG, 1, MFM_ERR_INVALID_DATA, "label|labels|class", "train: class 3 with n_classes 3"},
        {D_NO_FIELDS, 0, MFM_ERR_INVALID_DATA, "fields|field", "train: data without fields"},
        {D_WEIGHT_ALL_ZERO, 0, MFM_ERR_INVALID_DATA, "weight|weights", "train: all weights zero"},
        {D_OFFSET_START, 0, MFM_ERR_INVALID_DATA, "row_offsets", "train: row_offsets[0] = 1"},
    };
    size_t i;
    for (i = 0; i < 2 * sizeof cases / sizeof cases[0]; i++) {
        mfm_params p = valid_params();
        mfm_model *m = NULL;
        fixture f;
        mfm_error e;
        char what[96];
        const data_case *dc = &cases[i / 2];
        p.model = i % 2 ? MFM_MODEL_FWFM : MFM_MODEL_FFM;
        if (dc->multiclass) p.task = MFM_TASK_MULTICLASS, p.n_classes = 3;
        snprintf(what, sizeof what, "%s (%s)", dc->what, model_name(p.model));
        fixture_init(&f, dc->multiclass);
        change_data(&f, dc->change);
        memset(&e, 0, sizeof e);
        expect_failure(mfm_train(&p, &f.csr, &m, &e), &e, dc->status, dc->words, what);
        CHECK(m == NULL, "%s: a model was handed back", what);
        mfm_model_free(m);
    }
}

/* A shape whose size overflows 64 bits (FwFM R: (2^31)^2 blocks x 4 classes = 2^64) is refused
   as out of memory, never allocated short. */
void test_create_impossible_size(void) {
    mfm_params p = {0};
    mfm_model *m = NULL;
    mfm_error e;
    p.model = MFM_MODEL_FWFM;
    p.task = MFM_TASK_MULTICLASS;
    CHECK(mfm_model_create(&p, 1, 1u << 31, 4, &m, &e) == MFM_ERR_OUT_OF_MEMORY, "status %d: %s", (int)e.status, e.message);
    CHECK(m == NULL, "no model on failure");
}
