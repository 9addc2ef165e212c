/* modern_fm.h - factorization machines (FM, FFM, FwFM) in one header. MIT licence at the end.

   Do this:
       #define MODERN_FM_IMPLEMENTATION
       #include "modern_fm.h"
   in exactly one C or C++ file (include it first there, before any system header);
   every other file includes the header plainly and sees only the declarations.

   What it does
   ------------
   Trains and predicts second-order factorization machines on sparse data:
       FM    s = w0 + sum_i w_i x_i + sum_{i<j} <v_i, v_j> x_i x_j
       FFM   s = w0 + sum_i w_i x_i + sum_{i<j} <V[i,f_j], V[j,f_i]> x_i x_j
       FwFM  s = w0 + sum_i w_i x_i + sum_{i<j} r(f_i,f_j) <v_i, v_j> x_i x_j
   for binary classification (logistic loss), regression (squared loss) and multiclass
   (softmax, one parameter set per class), with SGD, AdaGrad, lazy Adam or FTRL-Proximal,
   mini-batches, row and class weights, label smoothing and deterministic multi-threading.
   The exact contract is SPEC.md of the project; the README says where we chose defaults.

   Configuration (define before the implementation include)
   ---------------------------------------------------------
       MFM_STATIC           every function static (one translation unit uses the library)
       MFMDEF               linkage of the public functions (default: extern)
       MFM_MALLOC(sz) MFM_REALLOC(p,sz) MFM_FREE(p)   all three or none (default: stdlib)
       MFM_ASSERT(x)        internal invariants only, never input checks (default: assert)
       MFM_NO_THREADS       build without threads: n_threads above 1 still gives the same
                            numbers (chunks are accumulated one after the other)
       MFM_NO_CUDA          compile the GPU part out

   Quick start
   -----------
       mfm_params p = {0};              // all zero means "the defaults" (C++: mfm_params p{};)
       p.model = MFM_MODEL_FFM;
       p.k = 4;
       mfm_csr d = {0};                 // a borrowed view of your arrays
       d.n_rows = n; d.row_offsets = off; d.features = feat; d.fields = fld; d.labels = y;
       mfm_model *m = NULL;
       mfm_error e;
       if (mfm_train(&p, &d, &m, &e) != MFM_OK) fprintf(stderr, "%s\n", e.message);
       mfm_predict(m, &d, MFM_OUTPUT_PROBABILITY, probs, n, &e);
       mfm_model_free(m);

   Thread safety: a model may be used for prediction and inspection from many threads at
   once; training (mfm_fit, mfm_model_write) needs the model to itself. Nothing is global.
*/
#ifndef MODERN_FM_H
#define MODERN_FM_H

#include <stddef.h>
#include <stdint.h>

#define MFM_VERSION_MAJOR 0
#define MFM_VERSION_MINOR 1
#define MFM_VERSION_PATCH 0
#define MFM_VERSION_NUMBER (MFM_VERSION_MAJOR * 10000 + MFM_VERSION_MINOR * 100 + MFM_VERSION_PATCH)
#define MFM__STRINGIFY2(x) #x
#define MFM__STRINGIFY(x) MFM__STRINGIFY2(x)
#define MFM_VERSION_STRING \
    MFM__STRINGIFY(MFM_VERSION_MAJOR) "." MFM__STRINGIFY(MFM_VERSION_MINOR) "." MFM__STRINGIFY(MFM_VERSION_PATCH)

#ifndef MFMDEF
#ifdef MFM_STATIC
#if defined(__GNUC__) || defined(__clang__)
#define MFMDEF static __attribute__((unused))
#else
#define MFMDEF static
#endif
#else
#define MFMDEF extern
#endif
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ============================================================================================
   >>public-types  Status codes and the error record
   ============================================================================================ */

/* Numbers are stable and never reused. */
#define MFM__STATUS_LIST(X)                                                                       \
    X(MFM_OK, 0, "success")                                                                       \
    X(MFM_ERR_INVALID_ARGUMENT, 1, "invalid argument")                                            \
    X(MFM_ERR_INVALID_PARAM, 2, "invalid parameter")                                              \
    X(MFM_ERR_INVALID_DATA, 3, "invalid data")                                                    \
    X(MFM_ERR_SHAPE_MISMATCH, 4, "data and model shapes differ")                                  \
    X(MFM_ERR_OUT_OF_MEMORY, 5, "out of memory")                                                  \
    X(MFM_ERR_THREAD, 6, "could not start a thread")                                              \
    X(MFM_ERR_CANCELLED, 7, "cancelled by the caller")

typedef enum mfm_status {
#define MFM__STATUS_ENUM(name, value, text) name = value,
    MFM__STATUS_LIST(MFM__STATUS_ENUM)
#undef MFM__STATUS_ENUM
    MFM_STATUS_FORCE_U32 = 0x7FFFFFFF
} mfm_status;

/* Filled by every fallible call that is given one (it may be NULL). Caller-owned, no
   allocation. `message` is one complete sentence that names the bad value and where it is. */
typedef struct mfm_error {
    mfm_status status;
    char message[512];
} mfm_error;

/* ============================================================================================
   >>public-params  What to train
   ============================================================================================ */

typedef enum mfm_model_type {
    MFM_MODEL_DEFAULT = 0, /* FM */
    MFM_MODEL_FM,
    MFM_MODEL_FFM,
    MFM_MODEL_FWFM,
    MFM_MODEL_COUNT,
    MFM_MODEL_FORCE_U32 = 0x7FFFFFFF
} mfm_model_type;

typedef enum mfm_task {
    MFM_TASK_DEFAULT = 0, /* binary */
    MFM_TASK_BINARY,      /* labels 0/1, logistic loss */
    MFM_TASK_REGRESSION,  /* real labels, squared loss 1/2 (s-y)^2 */
    MFM_TASK_MULTICLASS,  /* labels 0..C-1, softmax over C parameter sets */
    MFM_TASK_COUNT,
    MFM_TASK_FORCE_U32 = 0x7FFFFFFF
} mfm_task;

typedef enum mfm_optimizer {
    MFM_OPTIMIZER_DEFAULT = 0, /* AdaGrad */
    MFM_OPTIMIZER_SGD,
    MFM_OPTIMIZER_ADAGRAD,
    MFM_OPTIMIZER_ADAM, /* lazy: each coordinate counts its own steps */
    MFM_OPTIMIZER_FTRL, /* FTRL-Proximal; the only one that takes L1 */
    MFM_OPTIMIZER_COUNT,
    MFM_OPTIMIZER_FORCE_U32 = 0x7FFFFFFF
} mfm_optimizer;

typedef enum mfm_class_weight {
    MFM_CLASS_WEIGHT_DEFAULT = 0, /* none: every class weighs 1 */
    MFM_CLASS_WEIGHT_NONE,
    MFM_CLASS_WEIGHT_BALANCED, /* class c weighs n_rows / (C * max(count_c, 1)) */
    MFM_CLASS_WEIGHT_EXPLICIT, /* class_weights[c], C values (2 for binary) */
    MFM_CLASS_WEIGHT_COUNT,
    MFM_CLASS_WEIGHT_FORCE_U32 = 0x7FFFFFFF
} mfm_class_weight;

typedef enum mfm_log_level {
    MFM_LOG_ERROR = 1,
    MFM_LOG_WARN,
    MFM_LOG_INFO,
    MFM_LOG_DEBUG,
    MFM_LOG_FORCE_U32 = 0x7FFFFFFF
} mfm_log_level;

/* What the epoch callback is told after every finished epoch. */
typedef struct mfm_epoch_report {
    int epoch;          /* 1-based, counted within this mfm_fit call */
    int n_epochs;       /* epochs this call will run at most */
    double train_loss;  /* mean loss of the epoch's rows, each scored just before its update
                           (row weights and label smoothing included) */
    double seconds;     /* wall time of this epoch */
    uint64_t n_rows;    /* rows seen in this epoch */
} mfm_epoch_report;

/* Return nonzero to stop: mfm_fit then returns MFM_ERR_CANCELLED and the model keeps the
   parameters of the epochs that finished. */
typedef int (*mfm_epoch_fn)(void *user, const mfm_epoch_report *report);
typedef void (*mfm_log_fn)(void *user, mfm_log_level level, const char *message);

/* Zero in any field means its default, written next to it. */
typedef struct mfm_params {
    mfm_model_type model;       /* FM */
    mfm_task task;              /* binary */
    mfm_optimizer optimizer;    /* AdaGrad */
    int k;                      /* 8: factors per vector */
    int n_classes;              /* multiclass only: 0 = max label + 1 of the training data */
    int n_epochs;               /* 10 */
    int batch_size;             /* 1: per-row updates */
    int n_threads;              /* 1. Results depend on this number, never on the machine */
    double learning_rate;       /* 0.05 (FTRL's alpha) */
    double l2_linear;           /* 0: L2 on w */
    double l2_factors;          /* 0: L2 on V (and R of FwFM) */
    double l1_linear;           /* 0: L1 on w, FTRL only */
    double l1_factors;          /* 0: L1 on V and R, FTRL only */
    double init_scale;          /* 0.01: FM/FwFM V ~ N(0, s); FFM V ~ U[0, s/sqrt(k)) */
    double adam_beta1;          /* 0.9 */
    double adam_beta2;          /* 0.999 */
    double adam_epsilon;        /* 1e-8 */
    double ftrl_beta;           /* 1 */
    double label_smoothing;     /* 0: binary y <- y(1-e)+e/2; multiclass 1-e / e/(C-1) */
    mfm_class_weight class_weight;  /* none */
    const float *class_weights;     /* EXPLICIT: one weight per class (binary: 2); copied */
    uint64_t seed;              /* 0 is a seed like any other */
    int linear_only;            /* 0: 1 switches the pair term off (a linear model) */
    mfm_epoch_fn on_epoch;      /* NULL */
    mfm_log_fn on_log;          /* NULL */
    void *user;                 /* handed to both callbacks */
} mfm_params;

/* ============================================================================================
   >>public-data  Data: a borrowed CSR view of the caller's arrays
   ============================================================================================ */

/* Row r owns non-zeros row_offsets[r] .. row_offsets[r+1]-1. The library never frees or
   keeps these pointers past the call that was given them. */
typedef struct mfm_csr {
    uint64_t n_rows;
    const uint64_t *row_offsets; /* n_rows + 1, starts at 0, never decreases */
    const uint32_t *features;    /* nnz feature ids */
    const uint32_t *fields;      /* nnz field ids; FFM and FwFM need them, FM ignores them */
    const float *values;         /* nnz values; NULL = every value is 1 */
    const float *labels;         /* n_rows; needed to train and evaluate, not to predict */
    const float *weights;        /* n_rows row weights >= 0; NULL = all 1 */
    uint32_t n_features;         /* 0 = max feature id + 1 */
    uint32_t n_fields;           /* 0 = max field id + 1 */
} mfm_csr;

/* ============================================================================================
   >>public-model  Models: create, train, inspect, free
   ============================================================================================ */

typedef struct mfm_model mfm_model;

/* The learned tensors, per class (binary and regression have one class). */
typedef enum mfm_tensor {
    MFM_TENSOR_W0 = 0, /* 1 value */
    MFM_TENSOR_W,      /* n_features */
    MFM_TENSOR_V,      /* FM/FwFM: n_features x k; FFM: n_features x n_fields x k (row-major) */
    MFM_TENSOR_R,      /* FwFM only: n_fields x n_fields; only a <= b is used */
    MFM_TENSOR_COUNT,
    MFM_TENSOR_FORCE_U32 = 0x7FFFFFFF
} mfm_tensor;

/* Slot 0 of a tensor is the parameter itself; slots 1.. are its optimizer state:
   AdaGrad 1 = G; Adam 1 = m, 2 = v, 3 = t (steps taken); FTRL 1 = z, 2 = n; SGD has none. */
enum { MFM_SLOT_PARAM = 0 };

typedef struct mfm_model_info {
    mfm_model_type model;
    mfm_task task;
    mfm_optimizer optimizer;
    uint32_t n_features;
    uint32_t n_fields;  /* 0 for FM */
    uint32_t n_classes; /* 1 for binary and regression */
    int k;
    int n_state_slots;  /* optimizer state slots per parameter */
    uint64_t epochs_trained;
    uint64_t n_parameters; /* learned values of all classes, state not counted */
} mfm_model_info;

MFMDEF const char *mfm_version_string(void);
MFMDEF const char *mfm_status_string(mfm_status status);

/* The params with every default filled in. Validates nothing. */
MFMDEF mfm_params mfm_params_resolve(const mfm_params *params);

/* A fresh, seeded model of the given shape (n_classes is used for multiclass only). */
MFMDEF mfm_status mfm_model_create(const mfm_params *params, uint32_t n_features, uint32_t n_fields,
                                   uint32_t n_classes, mfm_model **out, mfm_error *err);

/* Creates a model shaped by the data and params, then trains it: mfm_model_create + mfm_fit. */
MFMDEF mfm_status mfm_train(const mfm_params *params, const mfm_csr *data, mfm_model **out,
                            mfm_error *err);

/* Trains params.n_epochs more epochs, each a fresh seeded permutation of the rows, from the
   current parameters and optimizer state. Data is validated before anything changes. */
MFMDEF mfm_status mfm_fit(mfm_model *model, const mfm_csr *data, mfm_error *err);

MFMDEF void mfm_model_free(mfm_model *model);

MFMDEF void mfm_model_get_info(const mfm_model *model, mfm_model_info *out);
MFMDEF const mfm_params *mfm_model_params(const mfm_model *model);

/* Number of floats in one class of a tensor (0 where the model has no such tensor). */
MFMDEF size_t mfm_tensor_size(const mfm_model *model, mfm_tensor tensor);

/* Copy one class's tensor slot out of / into the model (count = mfm_tensor_size). */
MFMDEF mfm_status mfm_model_read(const mfm_model *model, mfm_tensor tensor, int slot, uint32_t cls,
                                 float *out, size_t count, mfm_error *err);
MFMDEF mfm_status mfm_model_write(mfm_model *model, mfm_tensor tensor, int slot, uint32_t cls,
                                  const float *in, size_t count, mfm_error *err);

/* ============================================================================================
   >>public-predict  Prediction and metrics
   ============================================================================================ */

typedef enum mfm_output {
    MFM_OUTPUT_DEFAULT = 0, /* probabilities for classification, scores for regression */
    MFM_OUTPUT_SCORE,       /* raw scores; multiclass: C logits per row */
    MFM_OUTPUT_PROBABILITY, /* binary: sigmoid; multiclass: C softmax values per row */
    MFM_OUTPUT_LABEL,       /* binary: 1 iff score >= 0; multiclass: first argmax; regression: score */
    MFM_OUTPUT_COUNT,
    MFM_OUTPUT_FORCE_U32 = 0x7FFFFFFF
} mfm_output;

/* Values per row that mfm_predict writes for this kind of output (C or 1). */
MFMDEF size_t mfm_output_width(const mfm_model *model, mfm_output kind);

/* out has n_rows * mfm_output_width values; `capacity` says how many it can hold. Uses the
   model's n_threads. Labels in the data are not needed and not read. */
MFMDEF mfm_status mfm_predict(const mfm_model *model, const mfm_csr *data, mfm_output kind,
                              float *out, size_t capacity, mfm_error *err);

typedef struct mfm_metrics {
    uint64_t n_rows;
    double logloss;  /* binary: logistic loss; multiclass: cross-entropy; else NaN */
    double auc;      /* binary only, exact with ties; NaN when one class is absent */
    double accuracy; /* binary and multiclass; else NaN */
    double rmse;     /* regression only; else NaN */
} mfm_metrics;

/* Unweighted metrics of the model's predictions against data->labels. */
MFMDEF mfm_status mfm_evaluate(const mfm_model *model, const mfm_csr *data, mfm_metrics *out,
                               mfm_error *err);

/* The metrics on plain arrays (n values each; probabilities clipped to [1e-15, 1-1e-15]). */
MFMDEF double mfm_logloss(const float *labels, const float *probabilities, size_t n);
MFMDEF double mfm_auc(const float *labels, const float *scores, size_t n);
MFMDEF double mfm_rmse(const float *labels, const float *predictions, size_t n);

#ifdef __cplusplus
}
#endif
#endif /* MODERN_FM_H */
