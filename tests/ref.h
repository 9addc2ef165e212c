/* ref.h - what the tests compare the library against, and the fixtures they share.

   The reference is independent of the code under test: a naive O(z^2 k) scorer in double
   precision over parameters read from (or written into) a model, losses as docs/SPEC.md section 3
   states them, central finite-difference gradients, the optimizer steps of docs/SPEC.md section 6 and
   the batch rule of docs/SPEC.md section 5. The library is only used to create models and to move
   parameters in and out of them (mfm_model_get_tensor / mfm_model_set_tensor). */
#ifndef TESTS_REF_H
#define TESTS_REF_H

#include "../modern_fm.h"

#include <stddef.h>
#include <stdint.h>

/* ---- small random numbers for fixtures (splitmix64) ---- */

uint64_t rng_next(uint64_t *state);
double rng_uniform(uint64_t *state, double lo, double hi);
uint32_t rng_below(uint64_t *state, uint32_t n);

/* ---- the reference model: every tensor slot of every class, in double ---- */

#define REF_MAX_SLOTS 4 /* parameter + up to 3 optimizer state slots (Adam) */

typedef struct ref_model {
    mfm_model_type model; /* resolved: FM, FFM or FWFM */
    mfm_task task;        /* resolved */
    uint32_t n_features, n_fields, n_classes;
    int k, linear_only, n_slots;
    int normalize_rows;   /* the model's rows are scaled to sum x^2 = 1 before scoring */
    size_t size[MFM_TENSOR_COUNT];                /* values per class (mfm_tensor_size) */
    double *t[REF_MAX_SLOTS][MFM_TENSOR_COUNT];   /* [slot][tensor][cls * size + index] */
} ref_model;

/* Copies every slot of every tensor and class out of the model (exact: float -> double). */
void ref_load(ref_model *r, const mfm_model *m);
void ref_copy(ref_model *dst, const ref_model *src);
void ref_free(ref_model *r);

/* Score of class `cls` of row `row`: w0 + sum_i w_i x_i + the pair term of section 1 as a
   plain double loop over pairs of non-zeros. Values NULL means every value is 1; with
   normalize_rows every x is divided by the row's sqrt(sum x^2) first. */
double ref_score(const ref_model *r, uint32_t cls, const mfm_csr *d, uint64_t row);

double ref_sigmoid(double s);
/* p = softmax(s) over n values (max-shifted). */
void ref_softmax(const double *s, uint32_t n, double *p);

/* Unweighted loss of one row under the model's task (section 3), with label smoothing eps. */
double ref_row_loss(const ref_model *r, const mfm_csr *d, uint64_t row, double eps);

/* grad[t][cls * size + i] = sum over the listed rows of weight[row] * dL_row/dtheta, by central
   finite differences (step REF_FD_STEP) of ref_row_loss. Untouched parameters get exactly 0.
   grad arrays are allocated here; free them with ref_grad_free. weights NULL = all 1. */
#define REF_FD_STEP 1e-5
void ref_fd_grad(ref_model *r, const mfm_csr *d, const uint64_t *rows, size_t n_rows, const double *weights, double eps,
                 double *grad[MFM_TENSOR_COUNT]);
void ref_grad_free(double *grad[MFM_TENSOR_COUNT]);

/* mask[t][i] = 1 when a batch of these rows touches coordinate i of tensor t (every class
   alike), by the rule of docs/SPEC.md section 5. Allocated here; free with ref_mask_free. */
void ref_touched(const ref_model *r, const mfm_csr *d, const uint64_t *rows, size_t n_rows, unsigned char *mask[MFM_TENSOR_COUNT]);
void ref_mask_free(unsigned char *mask[MFM_TENSOR_COUNT]);

/* The optimizer settings of section 6, with the documented defaults filled in for zeros. */
typedef struct ref_opt {
    mfm_optimizer kind; /* resolved */
    double lr, beta1, beta2, eps, ftrl_beta;
    double l1[MFM_TENSOR_COUNT], l2[MFM_TENSOR_COUNT]; /* per tensor: W0 none, W linear, V/R factors */
    int linear_line; /* AdaGrad at batch_size > 1: the linear terms' squares and line search (section 5) */
} ref_opt;

ref_opt ref_opt_from_params(const mfm_params *p);

/* One step of one coordinate: theta and its state s1..s3 (as the slots are numbered), with the
   mean data gradient g and the regularization of section 6. */
void ref_opt_step(const ref_opt *o, double *theta, double *s1, double *s2, double *s3, double g, double l1, double l2);

/* One batch of section 5 applied to r (parameters and state): the FD gradient of the weighted
   loss against the parameters at batch start, divided by the batch's row count (AdaGrad: not
   divided), one step per touched coordinate, nothing else moves; with o->linear_line the linear
   terms' steps of section 5's line search. */
void ref_apply_batch(ref_model *r, const ref_opt *o, const mfm_csr *d, const uint64_t *rows, size_t n_rows, const double *weights,
                     double eps);
extern double ref_last_alpha; /* the fraction the last linear line search found */

/* A Hogwild share of FwFM at batch 1 (modern_fm.h, mfm__r_pending): the rows in order, each a
   batch of its own for every tensor but R, whose gradients (against each row's parameters) add
   up and take one step every `hold` rows and after the last row (the sum under AdaGrad, else the
   mean). pairs_only: w0 and w stay as they are (they must be 0 with no L2, as the library's
   zero steps leave them). */
void ref_rows_holding_r(ref_model *r, const ref_opt *o, const mfm_csr *d, const uint64_t *rows, size_t n_rows, size_t hold, int pairs_only);

/* Row weight = sample weight x class weight (section 3) for every row of d under params p
   (class count C for multiclass; binary counts 2 classes). */
void ref_row_weights(const mfm_csr *d, const mfm_params *p, uint32_t n_classes, double *out);

/* ---- comparing a model with a reference ---- */

/* Every slot of every tensor and class of m against `expected`. A coordinate passes when
   |got - expected| <= atol + rtol * scale, where scale is |expected - base| (the size of the
   step) when base is given, else |expected|. Where mask is given and a coordinate is not
   touched, it must equal expected exactly (bit for bit, since expected holds the float).
   Prints the first mismatches with `what`; returns the number of mismatches. */
int check_model(const mfm_model *m, const ref_model *expected, const ref_model *base, unsigned char *const *mask, double rtol,
                double atol, const char *what);

/* All parameters and all optimizer state of a model, concatenated (for bitwise comparison). */
typedef struct snapshot {
    float *data;
    size_t n;
} snapshot;

void snapshot_take(snapshot *s, const mfm_model *m);
int snapshot_equal(const snapshot *a, const snapshot *b); /* same size and memcmp == 0 */
void snapshot_free(snapshot *s);

/* ---- fixtures ---- */

/* Writes uniform values in [-scale, scale] into slot 0 of every tensor and class (w0, w, V
   and R alike). */
void model_randomize(mfm_model *m, uint64_t seed, double scale);
/* Writes `value` into state slot `slot` (>= 1) of every tensor and class. */
void model_fill_slot(mfm_model *m, int slot, float value);
/* mfm_model_create that records a failure (and returns NULL) when it fails. */
mfm_model *make_model(const mfm_params *p, uint32_t n_features, uint32_t n_fields, uint32_t n_classes);
/* mfm_predict that records a failure when it fails; returns 1 on success. */
int predict(const mfm_model *m, const mfm_csr *d, mfm_output kind, float *out, size_t capacity);
/* Params for observing one plain SGD step per row: SGD, 1 epoch, batch 1, lr, no L2, the rows'
   values as given (normalize_rows off). */
mfm_params sgd_step_params(mfm_model_type model, mfm_task task, double lr);

/* One row, owning its arrays; csr points into the struct, so do not copy it after init. */
enum { ROW_MAX_NNZ = 16 };
typedef struct one_row {
    uint64_t offsets[2];
    uint32_t features[ROW_MAX_NNZ], fields[ROW_MAX_NNZ];
    float values[ROW_MAX_NNZ];
    float label, weight;
    mfm_csr csr;
} one_row;

/* fields / values NULL leave csr.fields / csr.values NULL. The weight is 1 and csr.weights NULL
   until the caller sets csr.weights = &row.weight. */
void one_row_init(one_row *r, int z, const uint32_t *features, const uint32_t *fields, const float *values, float label);

/* A CSR view of hand-written arrays (fields, values and labels may be NULL). */
mfm_csr csr_of(uint64_t n_rows, const uint64_t *offsets, const uint32_t *features, const uint32_t *fields, const float *values, const float *labels);

/* Random data owning its arrays. */
typedef struct data_spec {
    uint64_t n_rows;
    uint32_t feature_range; /* ids drawn from [0, feature_range), distinct within a row */
    uint32_t n_fields;      /* fields drawn per non-zero from [0, n_fields) (duplicates happen) */
    int min_nnz, max_nnz;   /* per row, inclusive */
    int with_values;        /* values in [0.5, 1.5) with random sign, else NULL */
    int with_weights;       /* row weights in [0.5, 2) */
    mfm_task task;          /* labels: binary 0/1, regression in [-1, 2), multiclass 0..n_classes-1 */
    uint32_t n_classes;
    uint64_t seed;
} data_spec;

typedef struct test_data {
    uint64_t *offsets;
    uint32_t *features, *fields;
    float *values, *labels, *weights;
    mfm_csr csr;
} test_data;

void data_random(test_data *td, const data_spec *spec);
/* Sets every row's field ids to 0, 1, .. in the row's order: distinct fields (rows that update
   in place at batch 1), and with rows of n_fields non-zeros FwFM's dense rows. */
void data_fields_in_order(test_data *td);
void data_free(test_data *td);

/* "FM", "FFM" or "FwFM". */
const char *model_name(mfm_model_type t);

/* 1 when msg contains one of the '|'-separated words ("label|labels") with no letter, digit
   or '_' right before or after it. */
int mentions_word(const char *msg, const char *words);

/* The checksum that ends every binary file (the library's own, reached through tests/impl.c),
   for tests that craft a file which must get past it. */
uint64_t test_checksum(const void *data, size_t n);

#endif
