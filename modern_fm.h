/* modern_fm.h - factorization machines (FM, FFM, FwFM) in one header. MIT licence at the end.

   Do this:
       #define MODERN_FM_IMPLEMENTATION
       #include "modern_fm.h"
   in exactly one C or C++ file (anywhere among its includes); every other file includes the
   header plainly and sees only the declarations. Build (examples/ has complete programs):
       cc -std=c99 -O2 app.c -lm          Linux, glibc 2.34+ (older glibc: add -pthread -ldl)
       g++ -std=c++17 -O2 app.cpp         C++ (the same header; mfm_params p{}; not = {0})
       cc -std=c99 -O2 app.c              macOS (the GPU part compiles out: no CUDA there)
       cl /O2 app.c                       MSVC
       x86_64-w64-mingw32-gcc -std=c99 -O2 app.c -o app.exe      Windows from Linux

   What it does
   ------------
   Trains and predicts second-order factorization machines on sparse data:
       FM    s = w0 + sum_i w_i x_i + sum_{i<j} <v_i, v_j> x_i x_j
       FFM   s = w0 + sum_i w_i x_i + sum_{i<j} <V[i,f_j], V[j,f_i]> x_i x_j
       FwFM  s = w0 + sum_i w_i x_i + sum_{i<j} r(f_i,f_j) <v_i, v_j> x_i x_j
   for binary classification (logistic loss), regression (squared loss) and multiclass
   (softmax, one parameter set per class), with SGD, AdaGrad, lazy Adam or FTRL-Proximal,
   mini-batches, row and class weights, label smoothing and deterministic multi-threading.
   docs/SPEC.md says exactly what is computed, and its last section which defaults we chose
   where others differ.

   Configuration (define before the implementation include)
   ---------------------------------------------------------
       MFM_STATIC           every function static (one translation unit uses the library)
       MFMDEF               linkage of the public functions (default: extern)
       MFM_MALLOC(sz) MFM_REALLOC(p,sz) MFM_FREE(p)   all three or none (default: stdlib)
       MFM_ASSERT(x)        internal invariants only, never input checks (default: assert)
       MFM_NO_THREADS       build without threads: n_threads above 1 still gives the same
                            numbers (chunks are accumulated one after the other)
       MFM_NO_CUDA          leave the GPU part out
       MFM_CUDA             insist on the GPU part (an error when its two files are missing)
       MFM_NO_AVX           no eight-lane AdaGrad steps (by default they run where the CPU has
                            AVX, checked at run time; the bits are those of the SSE2 code,
                            and MFM_SIMD=sse2 in the environment turns them off at run time)

   The CPU part is this file alone. The GPU part needs no CUDA to build (the driver and NVRTC
   are loaded at run time) and compiles in by itself where two more headers are found: the
   kernel sources modern_fm_kernels.h (beside this file) and xxhash.h (xxHash 0.8,
   header-only, which keys the kernel cache; Debian/Ubuntu: libxxhash-dev). Without them,
   backend CUDA fails with MFM_ERR_CUDA_UNAVAILABLE naming the missing file, and AUTO runs on
   the CPU. Training on several GPUs at once (params.n_devices) loads NCCL the same way.

   Conventions
   -----------
   Every call that can fail returns an mfm_status (MFM_OK = 0) and, given an mfm_error (err
   may always be NULL), a sentence that names the bad value and where it is. A required
   pointer that is NULL is an MFM_ERR_INVALID_ARGUMENT naming it; NULL params to mfm_train or
   mfm_model_create, or NULL read options, mean every default; *_free(NULL) does nothing;
   the metric functions (mfm_logloss, mfm_auc, mfm_rmse) give NaN for NULL arrays or NaN
   inputs. Every n_threads means the same: 0 is every core. Enum values out of range are
   refused (parameters) or named "unknown" (mfm_*_name). The library never prints, exits or
   aborts on bad input.

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
   once; training (mfm_fit, mfm_model_set_tensor) needs the model to itself. Nothing is global
   but the GPU's loaded libraries and their settings (mfm_cuda_configure), and a lock that lets
   one fit on several GPUs pass over its rows at a time.
*/
/* The implementation uses POSIX 2008 (clock_gettime, fsync, lstat, ...), which a strict -std=c99
   hides unless asked for before the first system header. A system header included before this
   one has already fixed glibc's feature set; the implementation asks glibc again below. */
#if (defined(MODERN_FM_IMPLEMENTATION) || defined(MFM_IMPLEMENTATION)) && !defined(_WIN32) && !defined(_POSIX_C_SOURCE) && \
    !defined(_GNU_SOURCE) && !defined(_XOPEN_SOURCE)
#define _POSIX_C_SOURCE 200809L
#endif

#ifndef MODERN_FM_H
#define MODERN_FM_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h> /* FILE: mfm_output_stream */

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
    X(MFM_ERR_CANCELLED, 7, "cancelled by the caller")                                            \
    X(MFM_ERR_IO, 8, "a file could not be read or written")                                       \
    X(MFM_ERR_BAD_FILE, 9, "not a valid modern_fm file")                                         \
    X(MFM_ERR_CUDA_UNAVAILABLE, 10, "no usable CUDA driver")                                      \
    X(MFM_ERR_CUDA_NO_DEVICE, 11, "no CUDA device")                                               \
    X(MFM_ERR_CUDA_DRIVER_TOO_OLD, 12, "the CUDA driver is too old")                              \
    X(MFM_ERR_NVRTC_UNAVAILABLE, 13, "no usable NVRTC")                                           \
    X(MFM_ERR_DEVICE_UNSUPPORTED, 14, "the GPU is not supported by any NVRTC found")              \
    X(MFM_ERR_NVRTC_COMPILE, 15, "NVRTC could not compile the kernels")                           \
    X(MFM_ERR_CUDA, 16, "a CUDA driver call failed")                                              \
    X(MFM_ERR_DIVERGED, 17, "training diverged")                                                 \
    X(MFM_ERR_NCCL_UNAVAILABLE, 18, "no usable NCCL")

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
    MFM_OPTIMIZER_ROWWISE_ADAGRAD, /* AdaGrad with one accumulator per factor vector: less state, less traffic */
    MFM_OPTIMIZER_COUNT,
    MFM_OPTIMIZER_FORCE_U32 = 0x7FFFFFFF
} mfm_optimizer;

/* Where work runs (docs/SPEC.md section 11). CUDA never falls back to the CPU: without a driver, a device, or
   NVRTC (when the kernel cache cannot serve) the call fails and says what to install. AUTO
   runs on the GPU when a driver and a device are there, else on the CPU; a failure on a GPU
   that is there is still an error. */
typedef enum mfm_backend {
    MFM_BACKEND_DEFAULT = 0, /* CPU */
    MFM_BACKEND_CPU,
    MFM_BACKEND_CUDA,
    MFM_BACKEND_AUTO,
    MFM_BACKEND_COUNT,
    MFM_BACKEND_FORCE_U32 = 0x7FFFFFFF
} mfm_backend;

typedef enum mfm_class_weight {
    MFM_CLASS_WEIGHT_DEFAULT = 0, /* none: every class weighs 1 */
    MFM_CLASS_WEIGHT_NONE,
    MFM_CLASS_WEIGHT_BALANCED, /* class c weighs n_rows / (C * max(count_c, 1)) */
    MFM_CLASS_WEIGHT_EXPLICIT, /* class_weights[c], C values (2 for binary) */
    MFM_CLASS_WEIGHT_COUNT,
    MFM_CLASS_WEIGHT_FORCE_U32 = 0x7FFFFFFF
} mfm_class_weight;

/* What early stopping watches on the validation rows (docs/SPEC.md section 7). */
typedef enum mfm_metric {
    MFM_METRIC_DEFAULT = 0,  /* binary: logloss; regression: half MSE; multiclass: cross-entropy */
    MFM_METRIC_LOGLOSS,      /* binary, lower is better */
    MFM_METRIC_AUC,          /* binary, higher is better */
    MFM_METRIC_HALF_MSE,     /* regression: mean 1/2 (s - y)^2, lower is better */
    MFM_METRIC_RMSE,         /* regression, lower is better */
    MFM_METRIC_CROSS_ENTROPY, /* multiclass: mean -log p(y), lower is better */
    MFM_METRIC_COUNT,
    MFM_METRIC_FORCE_U32 = 0x7FFFFFFF
} mfm_metric;

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
    double seconds;     /* wall time of this epoch (validation not included) */
    uint64_t n_rows;    /* rows seen in this epoch */
    double validation;  /* the early-stopping metric on the validation rows; NaN without them */
    int best_epoch;     /* the epoch (of this call) with the best validation metric so far */
} mfm_epoch_report;

/* Return nonzero to stop: mfm_fit then returns MFM_ERR_CANCELLED and the model keeps the
   parameters of the epochs that finished. */
typedef int (*mfm_epoch_fn)(void *user, const mfm_epoch_report *report);
typedef void (*mfm_log_fn)(void *user, mfm_log_level level, const char *message);

/* Zero in any field means its default, written next to it. Where a real field's default is not
   zero, MFM_ZERO (minus zero) asks for a literal zero: p.l2_factors = MFM_ZERO; where a switch's
   default is on, MFM_OFF turns it off: p.normalize_rows = MFM_OFF. */
#define MFM_ZERO (-0.0)
#define MFM_OFF (-1)
#define MFM_MAX_DEVICES 16 /* GPUs one process trains on (params.n_devices) */
typedef struct mfm_params {
    mfm_model_type model;       /* FM */
    mfm_task task;              /* binary */
    mfm_optimizer optimizer;    /* AdaGrad */
    int k;                      /* 4: factors per vector */
    int n_classes;              /* multiclass only: 0 = max label + 1 of the training data */
    int n_epochs;               /* 10 (mfm train: 30 while early stopping watches) */
    int batch_size;             /* 1: per-row updates */
    int n_threads;              /* 0 = every core (counted when the work starts). The bits of a
                                   result depend neither on it nor on the machine (Hogwild aside) */
    int hogwild;                /* 0: the threads share each batch (every run the same bits); 1:
                                   Hogwild, as LIBFFM and xLearn run: each thread trains its own
                                   share of every epoch's rows on the shared model, lock-free,
                                   so batch_size 1 uses every thread too, and results vary from
                                   run to run; FwFM's threads step R every 32 rows (docs/DESIGN.md).
                                   CPU training only; one thread trains as 0 does */
    int thread_chunks;          /* 0: as hogwild 0; 1: each of the n_threads threads sums the
                                   gradients of its contiguous chunk of every batch, and the
                                   chunks' sums are added in chunk order before the one step
                                   (FFM and FwFM train faster on many cores, FM slower:
                                   docs/PERFORMANCE.md). Runs with the
                                   same n_threads give the same bits; other thread counts differ
                                   in rounding only. CPU training; at batch_size 1 a batch is one
                                   chunk, trained as 0 trains it */
    mfm_backend backend;        /* CPU: where mfm_fit, mfm_predict and mfm_evaluate run */
    int device;                 /* 0: the CUDA device (ordinal) for backend CUDA or AUTO */
    int n_devices;              /* 0 or 1: training on one GPU, params.device; 2 to MFM_MAX_DEVICES
                                   (at most k): as many GPUs of this process (NCCL), each holding
                                   a share of the k factors of every vector and scoring every row
                                   with them; one step per touched coordinate, as one GPU takes
                                   (docs/GPU.md). mfm_predict shares the rows out among them */
    const int *devices;         /* with n_devices > 1: their CUDA ordinals, each once; copied.
                                   NULL: 0, 1, ..., n_devices - 1 */
    int deterministic;          /* 0: CUDA training takes its fastest path, whose last bits vary
                                   from run to run (float atomics); 1: bit-identical runs on the
                                   same GPU (gradients summed exactly, in fixed point). GPU only:
                                   CPU training is deterministic unless hogwild is set, and this
                                   does not change that (with backend AUTO, hogwild and
                                   deterministic each steer their own backend; mfm train refuses
                                   the two together) */
    uint64_t gpu_memory_limit;  /* 0: the bytes CUDA training may take on the device (0: what is
                                   free); rows that do not fit next to the model stream from
                                   host memory, chunk by chunk */
    double learning_rate;       /* AdaGrad on normalized rows: 0.2 FFM, 0.5 FM and FwFM; else 0.05
                                   (FTRL's alpha). docs/DEFAULTS.md says why */
    double l2_linear;           /* 2e-5: L2 on w, applied to the coordinates a step touches */
    double l2_factors;          /* 2e-5: L2 on V (and R of FwFM), the same way */
    double l1_linear;           /* 0: L1 on w, FTRL only */
    double l1_factors;          /* 0: L1 on V and R, FTRL only */
    double init_scale;          /* 0.01 (FFM on normalized rows: 0.1): FM/FwFM V ~ N(0, s); FFM
                                   V ~ U[0, s/sqrt(k)) */
    double adam_beta1;          /* 0.9 */
    double adam_beta2;          /* 0.999 */
    double adam_epsilon;        /* 1e-8 */
    double ftrl_beta;           /* 1 */
    double label_smoothing;     /* 0: binary y <- y(1-e)+e/2; multiclass 1-e / e/(C-1) */
    mfm_class_weight class_weight;  /* none */
    const float *class_weights;     /* EXPLICIT: one weight per class (binary: 2); copied */
    uint64_t seed;              /* 0 is a seed like any other */
    int linear_only;            /* 0: 1 switches the pair term off (a linear model) */
    /* LIBFFM compatibility (docs/SPEC.md section 10): with normalize_rows, pairs_only and adagrad_init = 1,
       init_scale = 1, an FFM trained with AdaGrad is the algorithm LIBFFM runs. */
    int normalize_rows;         /* on (0 or 1): each row's values are scaled so that sum x^2 = 1, in
                                   training and prediction alike, as LIBFFM and xLearn do;
                                   MFM_OFF: the values as given */
    int pairs_only;             /* 0: 1 drops the bias and the linear term (they stay 0) */
    double adagrad_init;        /* 1: AdaGrad's initial accumulator G (as LIBFFM); it keeps a new
                                   coordinate's first step small (docs/DEFAULTS.md) */
    /* Early stopping: active with validation rows (mfm_fit_validated, or an internal seeded
       split of validation_fraction of the training rows). After every epoch the metric is
       computed; an epoch improves iff it beats the best by more than min_delta; training
       stops after `patience` epochs without improvement, and the best epoch's parameters,
       optimizer state and epoch count are restored unless keep_last is set. */
    double validation_fraction; /* 0: no internal split; else in (0, 1) */
    int patience;               /* 10 */
    double min_delta;           /* 0 */
    mfm_metric metric;          /* by task (see mfm_metric) */
    int keep_last;              /* 0: 1 keeps the last epoch instead of restoring the best */
    mfm_epoch_fn on_epoch;      /* NULL */
    mfm_log_fn on_log;          /* NULL */
    void *user;                 /* handed to both callbacks */
} mfm_params;

/* ============================================================================================
   >>public-data  Data: a borrowed CSR view of the caller's arrays
   ============================================================================================ */

/* A dataset the library owns: parsed text, or a binary file mapped into memory. */
typedef struct mfm_dataset mfm_dataset;

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
    const mfm_dataset *origin;   /* NULL; set by mfm_dataset_csr: errors about a row then name
                                    the file and the row's 1-based line ("te.ffm:7: ..."); a
                                    view of some of its rows must set it back to NULL */
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
    uint64_t memory_bytes; /* the tables in memory: parameters, optimizer state, and the padding that
                              keeps a feature's w and v on one cache line (FM, FwFM at small k) */
    int has_state;         /* 0 only for a model loaded from a file saved without its optimizer
                              state (the state is then at its start, as mfm_model_reset_state
                              leaves it), for one opened with mfm_model_map (which keeps none:
                              n_state_slots is then 0) and for a clone of either */
} mfm_model_info;

MFMDEF const char *mfm_version_string(void);
MFMDEF const char *mfm_status_string(mfm_status status); /* "unknown status" out of range */

/* The name of each enum value, as the mfm tool spells it on its command line ("ffm", "adagrad",
   "logloss", ...). A DEFAULT value gives its default's name ("default" where the default depends
   on the task); a value out of range gives "unknown". The strings are static. */
MFMDEF const char *mfm_model_type_name(mfm_model_type model);
MFMDEF const char *mfm_task_name(mfm_task task);
MFMDEF const char *mfm_optimizer_name(mfm_optimizer optimizer);
MFMDEF const char *mfm_backend_name(mfm_backend backend);
MFMDEF const char *mfm_class_weight_name(mfm_class_weight class_weight);
MFMDEF const char *mfm_metric_name(mfm_metric metric);

/* The params with every default filled in. Validates nothing. */
MFMDEF mfm_params mfm_params_resolve(const mfm_params *params);

/* A fresh, seeded model of the given shape (n_classes is used for multiclass only; params NULL:
   every default). */
MFMDEF mfm_status mfm_model_create(const mfm_params *params, uint32_t n_features, uint32_t n_fields,
                                   uint32_t n_classes, mfm_model **out, mfm_error *err);

/* A deep copy (parameters, optimizer state, params, epochs trained). The clone of a model opened
   with mfm_model_map has tables of its own and trains after mfm_model_reset_state. */
MFMDEF mfm_status mfm_model_clone(const mfm_model *model, mfm_model **out, mfm_error *err);

/* Creates a model shaped by the data and params, then trains it: mfm_model_create + mfm_fit. */
MFMDEF mfm_status mfm_train(const mfm_params *params, const mfm_csr *data, mfm_model **out,
                            mfm_error *err);

/* Trains params.n_epochs more epochs, each a fresh seeded permutation of the rows, from the
   current parameters and optimizer state (warm start: calling it again continues, and one call
   per epoch equals one call of many epochs bit for bit). Data is validated before anything
   changes. With params.validation_fraction, early stopping watches a seeded split.
   Divergence is an error, MFM_ERR_DIVERGED: a row's (batch's) loss that is not finite stops
   the epoch there, and every value (parameters and optimizer state) is checked after each
   epoch. The sentence names the epoch and the row or batch (1-based rows of `data`), or the
   value, and says what the model holds: the steps before that row, and any values that went
   NaN or infinite (mfm_model_save refuses such a model). On the GPU the loss is checked per
   epoch (a loss that is not finite leaves the model as it was before the call), and the tables
   once they are back (a value that is not finite there stays in the model, named, and
   mfm_model_save refuses it). mfm_partial_fit checks the losses only (a chunk may be much
   smaller than the model); mfm_model_save still refuses. */
MFMDEF mfm_status mfm_fit(mfm_model *model, const mfm_csr *data, mfm_error *err);

/* mfm_fit with early stopping on the given validation rows (no internal split). */
MFMDEF mfm_status mfm_fit_validated(mfm_model *model, const mfm_csr *data, const mfm_csr *validation,
                                    mfm_error *err);

/* One pass over the rows in their order, continuing the parameters and optimizer state. N
   calls over consecutive chunks equal one call over their concatenation bit for bit (one
   thread, and batch_size 1 or chunk lengths that are multiples of it). No epoch is counted,
   no callback called; "balanced" class weights are refused (they would depend on the chunk). */
MFMDEF mfm_status mfm_partial_fit(mfm_model *model, const mfm_csr *data, mfm_error *err);

MFMDEF void mfm_model_free(mfm_model *model);

/* Threads for the model's next mfm_fit and mfm_predict calls (params.n_threads; 0 = every
   core). Results do not depend on the number (Hogwild training aside). Not while another call
   uses the model. */
MFMDEF mfm_status mfm_model_set_threads(mfm_model *model, int n_threads, mfm_error *err);

/* Replaces the params that steer further training (epochs, batch, threads, learning rate,
   regularization, Adam/FTRL settings, smoothing, class weights, early stopping, callbacks).
   What shapes the model (model, task, optimizer, k, n_classes, linear_only, pairs_only,
   normalize_rows) must stay as it is; a change is an MFM_ERR_INVALID_PARAM. */
MFMDEF mfm_status mfm_model_set_params(mfm_model *model, const mfm_params *params, mfm_error *err);

/* Zeroes the optimizer state (AdaGrad's at adagrad_init). A model loaded from a file saved
   without its state refuses to train until this is called, since it could not continue
   where it stopped. A model opened with mfm_model_map has no state: nothing happens. */
MFMDEF void mfm_model_reset_state(mfm_model *model);

/* A NULL model gives all zeros; a NULL out is ignored. */
MFMDEF void mfm_model_get_info(const mfm_model *model, mfm_model_info *out);
/* NULL for a NULL model. */
MFMDEF const mfm_params *mfm_model_params(const mfm_model *model);

/* Number of floats in one class of a tensor (0 where the model has no such tensor). */
MFMDEF size_t mfm_tensor_size(const mfm_model *model, mfm_tensor tensor);

/* ... and in one class of its slot `slot` (0: the parameters, mfm_tensor_size; 1 on: the
   optimizer's state, as many, except row-wise AdaGrad's one accumulator per vector of V). 0 for
   a slot the model does not keep. */
MFMDEF size_t mfm_tensor_slot_size(const mfm_model *model, mfm_tensor tensor, int slot);

/* Copy one class's tensor slot out of / into the model (count = mfm_tensor_slot_size). */
MFMDEF mfm_status mfm_model_get_tensor(const mfm_model *model, mfm_tensor tensor, int slot, uint32_t cls,
                                 float *out, size_t count, mfm_error *err);
MFMDEF mfm_status mfm_model_set_tensor(mfm_model *model, mfm_tensor tensor, int slot, uint32_t cls,
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
MFMDEF const char *mfm_output_name(mfm_output output); /* "default", "score", "prob", "label" */

/* Values per row that mfm_predict writes for this kind of output (C or 1); 0 for a NULL model
   or a kind that is not an mfm_output. */
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
/* mfm_predict and mfm_evaluate from one scoring pass: the same outputs and metrics, in half the
   time of calling both. */
MFMDEF mfm_status mfm_predict_evaluate(const mfm_model *model, const mfm_csr *data, mfm_output kind, float *out,
                                       size_t capacity, mfm_metrics *metrics, mfm_error *err);

/* The value of `metric` (what early stopping watches) among the metrics, half MSE from the
   RMSE; *higher_is_better (may be NULL) says which way improves: up for AUC, down otherwise. */
MFMDEF double mfm_metrics_value(const mfm_metrics *metrics, mfm_metric metric, int *higher_is_better);

/* The metrics on plain arrays (n values each; probabilities clipped to [1e-15, 1-1e-15]). NaN
   when n is 0, an array is NULL, or a label or score is NaN (mfm_auc too). */
MFMDEF double mfm_logloss(const float *labels, const float *probabilities, size_t n);

/* ============================================================================================
   >>public-inspect  What a model learned
   ============================================================================================ */

/* One learned pairwise interaction: features a < b seen under fields field_a and field_b.
   strength: FM |<v_a, v_b>|; FwFM |r(field_a, field_b) <v_a, v_b>|; FFM
   |<V[a, field_b], V[b, field_a]>|; value is the same without the absolute value. */
typedef struct mfm_interaction {
    uint32_t feature_a, field_a, feature_b, field_b;
    float strength, value;
} mfm_interaction;

/* The n strongest interactions of class cls, strongest first (ties: smaller features first),
   by an exact scan over every pair of distinct (feature, field) slots that occur in `data`
   (FM: with data NULL, every pair of the model's features, fields reported as 0). FFM and FwFM
   need the data, since a model does not know which field a feature belongs to. The scan is
   O(slots^2 k): meant for the thousands of features a person looks at, not for 10^6.
   *n_found = min(n, pairs). */
MFMDEF mfm_status mfm_top_interactions(const mfm_model *model, const mfm_csr *data, uint32_t cls, size_t n,
                                       mfm_interaction *out, size_t *n_found, mfm_error *err);

/* FM only: per row the k-vector bi_t = 1/2 [(sum_i v_it x_i)^2 - sum_i v_it^2 x_i^2] of each
   class (n_rows x C x k floats), so that score = w0 + sum_i w_i x_i + sum_t bi_t. */
MFMDEF mfm_status mfm_bi_interaction(const mfm_model *model, const mfm_csr *data, float *out, size_t capacity,
                                     mfm_error *err);
MFMDEF double mfm_auc(const float *labels, const float *scores, size_t n);
MFMDEF double mfm_rmse(const float *labels, const float *predictions, size_t n);


/* ============================================================================================
   >>public-files  Data files (libffm, libsvm, binary) and model files
   ============================================================================================ */

typedef enum mfm_format {
    MFM_FORMAT_AUTO = 0, /* reading: binary by its magic, else libffm or libsvm by the first row */
    MFM_FORMAT_LIBFFM,   /* text: label field:feature:value ... */
    MFM_FORMAT_LIBSVM,   /* text: label feature:value ... (libFM reads the same) */
    MFM_FORMAT_BINARY,   /* modern_fm's dataset file: little-endian, checksummed, loaded by mmap */
    MFM_FORMAT_COUNT,
    MFM_FORMAT_FORCE_U32 = 0x7FFFFFFF
} mfm_format;
MFMDEF const char *mfm_format_name(mfm_format format); /* "auto", "libffm", "libsvm", "binary" */

/* bytes_total is 0 when the size is unknown (a pipe). Called from the reading thread. */
typedef void (*mfm_progress_fn)(void *user, uint64_t bytes_done, uint64_t bytes_total);

/* All zero means: detect the format, binary labels, every core. */
typedef struct mfm_read_options {
    mfm_format format;  /* AUTO */
    mfm_task task;      /* how labels read: binary 0/1 or -1/+1 (stored 0/1); regression any
                           finite real; multiclass class ids 0, 1, 2, ... DEFAULT: binary for
                           text, the recorded task for a binary file */
    int n_threads;      /* 0 = every core: big text files are parsed in parallel; the result
                           never depends on the number. Negative is refused */
    mfm_progress_fn on_progress; /* NULL */
    void *user;
} mfm_read_options;

typedef struct mfm_dataset_info {
    mfm_format format;       /* what was read (libffm, libsvm or binary) */
    uint64_t n_rows, nnz;
    uint32_t n_features;     /* max feature id + 1 (0 without non-zeros) */
    uint32_t n_fields;       /* max field id + 1 (0 for libsvm) */
    int has_labels;          /* text rows may all leave out the label (data to predict) */
    int has_weights, has_fields, has_values; /* values absent: every value is 1 */
    mfm_task labels_task;    /* the task the labels were read for (binary maps -1 to 0, so the
                                same file means other labels under another task); DEFAULT
                                for a binary file written from a plain CSR */
    uint64_t source_bytes;   /* binary cache of a text file: that file's size and */
    int64_t source_mtime;    /* modification time (seconds); 0 otherwise */
    uint64_t source_digest;  /* text: the digest of the bytes parsed (mfm_file_digest's); binary
                                cache: its text's, recorded when it was written; 0 = none */
} mfm_dataset_info;

/* Reads a libffm, libsvm or binary dataset from a path, or "-" for standard input. A malformed
   token fails the whole read with "path:line:column: what was expected"; blank lines, CRLF
   line ends, trailing blanks and a last line without newline are fine. */
MFMDEF mfm_status mfm_dataset_read(const char *path, const mfm_read_options *options, mfm_dataset **out,
                                   mfm_error *err);
/* The same from text in memory (binary data too); name is what errors call the input. */
MFMDEF mfm_status mfm_dataset_parse(const void *bytes, size_t size, const char *name,
                                    const mfm_read_options *options, mfm_dataset **out, mfm_error *err);
/* A view of the dataset's arrays, valid until mfm_dataset_free, with n_features and n_fields
   filled in (max id + 1 unless the file recorded more), so that
   mfm_model_create(&p, view.n_features, view.n_fields, 0, ...) fits the data. NULL: an empty view. */
MFMDEF mfm_csr mfm_dataset_csr(const mfm_dataset *dataset);
/* NULL dataset: *out is zeroed; NULL out: nothing happens. */
MFMDEF void mfm_dataset_get_info(const mfm_dataset *dataset, mfm_dataset_info *out);
MFMDEF void mfm_dataset_free(mfm_dataset *dataset); /* NULL is fine */
/* A dataset of its own that holds rows[0 .. n) of data, in that order, with their labels and
   weights: a copy, so data may go away. Its view keeps data's n_features and n_fields (so that
   it fits a model made for data); its info counts the selection's own ids. A row number that
   data does not have is an error. */
MFMDEF mfm_status mfm_dataset_select(const mfm_csr *data, const uint64_t *rows, uint64_t n, mfm_dataset **out, mfm_error *err);
/* The seeded split that training makes with params.validation_fraction (docs/SPEC.md section 7;
   the seed and the fraction are all it reads): order[0 .. n_rows) gets a permutation of the row
   numbers whose first *n_validation are the validation rows, the rest the training rows. A
   fraction of 0 gives 0, 1, .. n_rows - 1 and no validation rows. With
   mfm_dataset_select, the rows that mfm_fit validates on. */
MFMDEF mfm_status mfm_validation_split(const mfm_params *params, uint64_t n_rows, uint64_t *order, uint64_t *n_validation, mfm_error *err);

/* Writes data as libffm or libsvm text (path "-" = standard output) or as a binary dataset
   file. Text round-trips exactly: every float is printed with the fewest digits that read
   back to the same bits. Files are written to a temporary name and renamed into place. */
MFMDEF mfm_status mfm_dataset_write(const mfm_csr *data, const char *path, mfm_format format,
                                    mfm_error *err);
/* The binary file of a dataset read from a text file: records the digest of the text as it was
   parsed (and, for people, its size and mtime), so that a cache is known fresh only while
   mfm_file_digest(source) still equals mfm_dataset_info.source_digest; and the task its labels
   were read for (reading it back for another task is refused). source_path may be NULL. */
MFMDEF mfm_status mfm_dataset_write_cache(const mfm_dataset *dataset, const char *path, const char *source_path,
                                          mfm_error *err);
/* The digest of a file's bytes (any file; "-" is refused), the one a dataset parsed from that
   text records: not cryptographic, it tells an edited file from the one that was parsed. */
MFMDEF mfm_status mfm_file_digest(const char *path, uint64_t *digest, mfm_error *err);

/* Writing a file safely: every file the library writes (models, datasets, caches) goes through
   this, and so can the caller's own output (predictions):
   - a regular file, or a path where nothing is yet, is written to a temporary file created now,
     exclusively, in the same folder (".NAME.mfm.tmp-PID-RANDOM": never an existing file, never
     taken for a result), and renamed over the path only by a commit that flushed it to the
     disk; a failure, a crash or an abort leaves any earlier file as it was;
   - a symbolic link is written through: the file it names is replaced that way, the link stays;
   - "-" and "/dev/stdout" (standard output), a path naming an open descriptor (/dev/stderr,
     /dev/fd/N: written through it, so a file the shell redirected it to is appended to, never
     replaced), a character device (/dev/null) and a FIFO are written in place; a directory, a
     socket, a block device and the like are refused.
   Open creates the temporary file, so a path that cannot be written fails at once, before the
   work that would fill it. Commit and abort free the handle, whatever they return. */
typedef struct mfm_output_file mfm_output_file;
MFMDEF mfm_status mfm_output_open(const char *path, mfm_output_file **out, mfm_error *err);
/* Where to write (fwrite, fprintf): the temporary file, or the stream written in place. */
MFMDEF FILE *mfm_output_stream(mfm_output_file *file);
/* The temporary file's name; NULL when the output is written in place. */
MFMDEF const char *mfm_output_temp_path(const mfm_output_file *file);
/* Flushes (fsync) and renames into place; any write error, the stream's included, fails it with
   "writing PATH failed: reason" and removes the temporary file. */
MFMDEF mfm_status mfm_output_commit(mfm_output_file *file, mfm_error *err);
/* Removes the temporary file: nothing at the path changes. NULL is fine. */
MFMDEF void mfm_output_abort(mfm_output_file *file);
/* Removes the temporary file of every output of this process still open (mfm_model_save's and
   the dataset writers' included); async-signal-safe, for a SIGINT or SIGTERM handler that then
   re-raises the signal. The process-wide table behind it holds 32 names; more outputs open at
   once still work, without this clean-up. (On Windows a file still open is not removed.) */
MFMDEF void mfm_output_remove_temporaries(void);

/* Model files (docs/FORMATS.md): magic, format version, the params that shaped the model, shapes,
   the parameters laid out for mapping, optionally the optimizer state (so that training resumes
   exactly), checksums per section.
   Saving writes a temporary file and renames it over `path`: a failed or interrupted save
   leaves the old file as it was. A model holding a value that is not finite (only a fit that
   diverged leaves one) is refused with MFM_ERR_DIVERGED before anything is written: the loader
   would refuse the file. Without the state, only the parameters need be finite. */
#define MFM_MODEL_FILE_VERSION 2
MFMDEF mfm_status mfm_model_save(const mfm_model *model, const char *path, int with_state, mfm_error *err);
/* The same into an output opened (and not yet written) with mfm_output_open; the caller commits
   it, or aborts. Opening before training finds an unwritable path before the work is done. */
MFMDEF mfm_status mfm_model_write(const mfm_model *model, mfm_output_file *out, int with_state, mfm_error *err);
/* Opens a model for training: reads the parameters and the state into tables of its own.
   Refuses a truncated, corrupt, foreign or newer-version file with a sentence saying which. */
MFMDEF mfm_status mfm_model_load(const char *path, mfm_model **out, mfm_error *err);
MFMDEF mfm_status mfm_model_load_memory(const void *bytes, size_t size, mfm_model **out, mfm_error *err);
/* The parameters alone, for serving, with the factors (V, and w where it lies in V's blocks:
   FM's and FwFM's up to k = 15, FFM's always, in a record of whole lines a feature) as IEEE
   float16, rounded to nearest: a quarter of the file with AdaGrad state. Scores are still
   summed in float32, the same bits as a float32 model holding the rounded values; on held-out
   data the change is at most 4.4e-5 of the logloss (docs/PERFORMANCE.md). mfm_model_map maps
   the halves (half the memory): FFM reads them where they lie, faster than from float32; FM
   and FwFM widen a row's few blocks as they score it. mfm_model_load widens the whole file. A
   factor or w beyond 65504 is refused. */
MFMDEF mfm_status mfm_model_save_half(const mfm_model *model, const char *path, mfm_error *err);
/* Opens a model for prediction, the way a server should: maps the file's parameters read-only
   in place (no copy; the optimizer state is neither read nor kept) after verifying their
   checksums and values on every core, so that a damaged file is still refused with a sentence.
   The model predicts, evaluates and is inspected like any other, from many threads at once,
   and saves without its state; it does not train or take new tensors (MFM_ERR_INVALID_ARGUMENT:
   load the file with mfm_model_load for that). On Linux the mapping starts on a 2 MB boundary
   and asks for huge pages, which it gets where the page cache holds the file in 2 MB folios
   (a file this library wrote, on XFS or ext4 since Linux 6.16; docs/FORMATS.md). A file of
   format 1, of another byte order or of another layout is read into memory instead, with the
   same results. mfm_model_free unmaps.
   Replace a mapped file by renaming a new one over it (mfm_model_save does): one rewritten in
   place is read as it changes, and one cut short ends the process (SIGBUS). */
MFMDEF mfm_status mfm_model_map(const char *path, mfm_model **out, mfm_error *err);
/* Opens a model for prediction as mfm_model_map does (the same checks, the same scores to the
   bit, the same read-only model), then copies the parameters, float16 records as they are, into
   memory of the model's own (2 MB pages where Linux gives them) and closes the file. Opening
   costs the copy (about 0.1 s for 320 MB); the model then depends on no file, which may be
   rewritten or deleted, and a row's scattered records no longer each cost a TLB miss, as they do
   from a file mapped in 4 KB pages: one-row p99 from 16 threads about 10 % below such a mapped
   file's (docs/PERFORMANCE.md). Each process holds its own copy, where processes mapping one
   file share its pages. */
MFMDEF mfm_status mfm_model_load_parameters(const char *path, mfm_model **out, mfm_error *err);

typedef struct mfm_model_file_info {
    uint32_t format_version;
    uint32_t writer_version; /* MFM_VERSION_NUMBER of the library that wrote it */
    uint64_t file_bytes;
    int has_state;
    int half;                /* the factors are float16 (mfm_model_save_half) */
    mfm_model_info model;
    mfm_params params;       /* as trained; callbacks and class_weights are NULL */
} mfm_model_file_info;

/* Checks a model file completely (checksum included) and describes it without loading it. */
MFMDEF mfm_status mfm_model_file_inspect(const char *path, mfm_model_file_info *out, mfm_error *err);

/* ============================================================================================
   >>public-cuda  The GPU: is it there, kernels and their cache, resident models and data
   ============================================================================================

   Nothing here needs CUDA at build time: the driver (libcuda.so.1 / nvcuda.dll) and NVRTC are
   loaded when first needed. Kernels are compiled once per process and device; the image (CUBIN
   for a GPU that NVRTC knows, PTX for a newer one) is kept in a disk cache, so a warm cache
   needs no NVRTC at all. A build without the GPU part (see the top of this file) answers every
   call here with MFM_ERR_CUDA_UNAVAILABLE and a sentence naming what was missing. */

/* Where the GPU part finds its libraries and keeps its kernels, for the whole process. A field
   left NULL / DEFAULT takes its environment variable, then the built-in default:
       driver_library  MFM_CUDA_LIBRARY  libcuda.so.1 (never libcuda.so) / nvcuda.dll
       nvrtc_library   MFM_NVRTC_PATH    searched by version, newest first, never newer than
                                         the driver (a path set here is authoritative)
       nccl_library    MFM_NCCL_LIBRARY  libnccl.so.2 on the library path, in the CUDA folders,
                                         then in Python's nvidia/nccl wheel; loaded to train on
                                         several GPUs (params.n_devices > 1) and to describe the
                                         machine (mfm_cuda_get_info); a path that failed to
                                         load may be replaced
       cache_dir       MFM_CACHE_DIR     $XDG_CACHE_HOME/modern_fm, ~/.cache/modern_fm;
                                         %LOCALAPPDATA%\modern_fm\cache on Windows
       cache_mode      MFM_CACHE         on / off (no reads, no writes) / readonly; another
                                         value of MFM_CACHE is an error when the cache is used */
typedef enum mfm_cache_mode {
    MFM_CACHE_DEFAULT = 0, /* MFM_CACHE, else read and write */
    MFM_CACHE_ON,          /* read and write */
    MFM_CACHE_READONLY,    /* read, never write */
    MFM_CACHE_OFF,         /* neither: NVRTC compiles on every process start */
    MFM_CACHE_MODE_COUNT,
    MFM_CACHE_MODE_FORCE_U32 = 0x7FFFFFFF
} mfm_cache_mode;

typedef struct mfm_cuda_config {
    const char *driver_library; /* copied; NULL = MFM_CUDA_LIBRARY, else the default */
    const char *nvrtc_library;  /* copied; NULL = MFM_NVRTC_PATH, else searched */
    const char *cache_dir;      /* copied; NULL = MFM_CACHE_DIR, else the default */
    mfm_cache_mode cache_mode;  /* DEFAULT = MFM_CACHE, else on */
    const char *nccl_library;   /* copied; NULL = MFM_NCCL_LIBRARY, else searched (several GPUs only) */
} mfm_cuda_config;

/* Sets the GPU's settings (NULL: back to the environment's). The cache settings apply from the
   next kernel build on; the library paths only before the driver or NVRTC is first loaded: a
   different path after that is refused (MFM_ERR_INVALID_ARGUMENT), naming the library loaded.
   A build without the GPU part takes the settings and has no use for them. Thread-safe. */
MFMDEF mfm_status mfm_cuda_configure(const mfm_cuda_config *config, mfm_error *err);

/* 1 when a CUDA driver loads and sees at least one device. Never fails, creates no context. */
MFMDEF int mfm_cuda_available(void);

/* What getting the kernels cost: from the disk cache, or compiled by NVRTC and then stored. */
typedef struct mfm_kernel_build {
    int from_cache;      /* 1: read from the cache; 0: compiled now */
    int stored;          /* compiled and written to the cache */
    char not_stored[512]; /* compiled but not stored: why (the cache is off or read-only, or the
                            system's reason, e.g. "Permission denied"); "" otherwise */
    char kind[8];        /* "cubin" or "ptx" */
    int arch;            /* e.g. 90 for sm_90 / compute_90 */
    uint64_t image_bytes;
    double seconds;      /* to have the image (compile or read) */
    double load_seconds; /* for the driver to load it (cuModuleLoadData) */
    char path[704];      /* the cache entry ("" with the cache off) */
} mfm_kernel_build;

typedef struct mfm_cuda_info {
    int driver_version;   /* e.g. 13000 for 13.0; 0 when no driver loaded */
    int n_devices;
    int device;           /* the device described below */
    char device_name[128];
    int compute_major, compute_minor;
    uint64_t total_memory, free_memory; /* bytes */
    int nvrtc_version;    /* e.g. 13000; 0 when no NVRTC loaded (a warm cache does not need one) */
    char nvrtc_path[256]; /* the NVRTC library that was loaded */
    int nccl_version;     /* NCCL's own code: 22703 for 2.27.3 (before 2.9: 2804 for 2.8.4); 0 when no
                             NCCL loads (one GPU needs none) */
    char nccl_path[512];  /* the NCCL library that was loaded */
    char cache_dir[512];  /* "" when the cache is off or no directory could be found */
    mfm_cache_mode cache_mode; /* ON, READONLY or OFF: the mode in force */
    int kernels_ready;    /* this process has the device's kernels loaded, and ... */
    mfm_kernel_build kernels; /* ... this is how it got them */
    double context_seconds;   /* what creating the device's context took (0 until it exists) */
} mfm_cuda_info;

/* Describes the driver and one device; fails (saying what is missing) when there is none. */
MFMDEF mfm_status mfm_cuda_get_info(int device, mfm_cuda_info *out, mfm_error *err);

/* Makes `device` ready now, as its first use would: the driver loaded, the device's context
   created (a quarter of a second on an H100), the kernels read from the cache or compiled. A
   server calls it at start-up so that its first request does not wait; `mfm predict` calls it
   on a thread of its own while it opens the model and reads the rows. Thread-safe; later calls
   return at once. */
MFMDEF mfm_status mfm_cuda_prepare(int device, mfm_error *err);

/* Compiles the kernels for an architecture without any GPU (arch "sm_90", "90", or
   "compute_90" for PTX) and stores them in the cache, so that a container image can ship a
   warm cache. Needs NVRTC; an entry already in the cache is reported, not rebuilt. */
MFMDEF mfm_status mfm_cuda_build_kernels(const char *arch, mfm_kernel_build *out, mfm_error *err);

typedef struct mfm_cache_entry {
    char name[160];   /* file name inside the cache directory */
    uint64_t bytes;
    int64_t mtime;
    int valid;        /* header, length and checksum check out */
} mfm_cache_entry;

/* The cache directory in use ("" when there is none) into dir, and its entries into out (up to
   capacity of them; *n_entries gets how many there are). */
MFMDEF mfm_status mfm_cache_list(char *dir, size_t dir_capacity, mfm_cache_entry *out, size_t capacity,
                                 size_t *n_entries, mfm_error *err);
/* Removes every entry (and stray temporary file) of the cache; *n_removed may be NULL. */
MFMDEF mfm_status mfm_cache_clear(size_t *n_removed, mfm_error *err);

/* A copy of a model's parameters on a GPU, for many predictions without uploading again.
   The copy does not follow later changes of the model. One call at a time per copy. */
typedef struct mfm_gpu_model mfm_gpu_model;
/* A dataset kept on the GPU next to a model (features, fields, values and row offsets). */
typedef struct mfm_gpu_data mfm_gpu_data;

/* Uploads the model to `device`. Out of GPU memory is an MFM_ERR_OUT_OF_MEMORY that gives the
   bytes needed and free. */
MFMDEF mfm_status mfm_gpu_model_upload(const mfm_model *model, int device, mfm_gpu_model **out, mfm_error *err);
MFMDEF void mfm_gpu_model_free(mfm_gpu_model *model);

/* mfm_gpu_predict and the metrics of data's labels from the same scores (mfm_predict_evaluate). */
MFMDEF mfm_status mfm_gpu_predict_evaluate(mfm_gpu_model *model, const mfm_csr *data, mfm_output kind, float *out, size_t capacity,
                                           mfm_metrics *metrics, mfm_error *err);
/* Predicts rows that are in host memory: they cross to the GPU in chunks through pinned
   buffers, the copies overlapping the kernels. Output as mfm_predict. */
MFMDEF mfm_status mfm_gpu_predict(mfm_gpu_model *model, const mfm_csr *data, mfm_output kind, float *out,
                                  size_t capacity, mfm_error *err);

/* Uploads a dataset (checked against the model's shape) to the model's device, once. */
MFMDEF mfm_status mfm_gpu_data_upload(mfm_gpu_model *model, const mfm_csr *data, mfm_gpu_data **out, mfm_error *err);
MFMDEF void mfm_gpu_data_free(mfm_gpu_data *data);
/* Predicts a dataset that is on the device; only the outputs cross back. */
MFMDEF mfm_status mfm_gpu_predict_resident(mfm_gpu_model *model, const mfm_gpu_data *data, mfm_output kind,
                                           float *out, size_t capacity, mfm_error *err);

#ifdef __cplusplus
}
#endif
#endif /* MODERN_FM_H */

/* ############################################################################################
   ##                                                                                        ##
   ##  Implementation                                                                        ##
   ##                                                                                        ##
   ############################################################################################ */

#if (defined(MODERN_FM_IMPLEMENTATION) || defined(MFM_IMPLEMENTATION)) && !defined(MODERN_FM_IMPLEMENTATION_INCLUDED)
#define MODERN_FM_IMPLEMENTATION_INCLUDED

/* A system header came before this one under a strict -std=cNN: glibc then fixed its feature
   set without POSIX. Asking again (features.h recomputes everything when included anew) gives
   POSIX 2008 to every header included from here on; the few functions of <stdio.h> and
   <time.h>, which were already read, are declared under "late POSIX" below. */
#if defined(__GLIBC__) && !defined(__USE_POSIX199309) && !defined(__cplusplus) && !defined(_WIN32)
#undef _FEATURES_H
#undef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#include <features.h>
#define MFM__LATE_POSIX 1
#endif

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(MFM_MALLOC) && defined(MFM_REALLOC) && defined(MFM_FREE)
#elif !defined(MFM_MALLOC) && !defined(MFM_REALLOC) && !defined(MFM_FREE)
#define MFM_MALLOC(sz) malloc(sz)
#define MFM_REALLOC(p, sz) realloc(p, sz)
#define MFM_FREE(p) free(p)
#else
#error "modern_fm.h: define all of MFM_MALLOC, MFM_REALLOC and MFM_FREE, or none of them"
#endif

#ifndef MFM_ASSERT
#include <assert.h>
#define MFM_ASSERT(x) assert(x)
#endif

#if defined(_WIN32)
#if !defined(_WIN32_WINNT) || _WIN32_WINNT < 0x0600 /* condition variables arrived with Vista */
#undef _WIN32_WINNT
#define _WIN32_WINNT 0x0600
#endif
#ifndef WIN32_LEAN_AND_MEAN
#define WIN32_LEAN_AND_MEAN
#endif
#include <windows.h>
#elif !defined(MFM_NO_THREADS)
#include <pthread.h>
#endif

#if defined(__SSE2__) || defined(_M_X64) || (defined(_M_IX86_FP) && _M_IX86_FP >= 2)
#include <emmintrin.h> /* SSE2: part of every x86-64, so no run-time check is needed */
#define MFM__SSE2 1
#endif

/* MFM__NOINLINE keeps a loop-heavy function out of the long one that calls it, whose registers
   its loops would otherwise share, and spill. MFM__INLINE puts a small function's body in its
   caller's, where the caller's loop needs it unrolled or its values in registers. */
#if defined(__GNUC__) || defined(__clang__)
#define MFM__NOINLINE __attribute__((noinline))
#define MFM__INLINE __attribute__((always_inline)) inline
#elif defined(_MSC_VER)
#define MFM__NOINLINE __declspec(noinline)
#define MFM__INLINE __forceinline
#else
#define MFM__NOINLINE
#define MFM__INLINE inline
#endif

#include <errno.h>
#include <signal.h> /* sig_atomic_t: the temporary files a signal handler removes */
#include <sys/stat.h>
#include <sys/types.h>
#if defined(_WIN32)
#include <fcntl.h>
#include <io.h>
#else
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
#endif

#if defined(MFM__LATE_POSIX) /* see the top of the implementation */
#include <pthread.h>         /* struct timespec */
extern int fileno(FILE *stream);
extern FILE *fdopen(int fd, const char *mode);
extern int lstat(const char *path, struct stat *st); /* <sys/stat.h> and <unistd.h> may have come first too */
extern __ssize_t readlink(const char *path, char *buf, size_t size);
extern int fchmod(int fd, __mode_t mode);
extern int clock_gettime(int clock, struct timespec *ts);
#ifndef CLOCK_MONOTONIC
#define CLOCK_MONOTONIC 1 /* Linux's number; <time.h> hid it */
#endif
#endif

/* The GPU part compiles in when its two companions are found: modern_fm_kernels.h (the kernel
   sources, beside this file) and xxhash.h (xxHash 0.8, header-only, for the kernel cache's keys;
   Debian/Ubuntu: libxxhash-dev). MFM_NO_CUDA leaves it out; MFM_CUDA insists on it. Without
   it, backend CUDA fails with MFM_ERR_CUDA_UNAVAILABLE naming what was missing, and AUTO runs
   on the CPU. */
#if defined(MFM_NO_CUDA) && defined(MFM_CUDA)
#error "modern_fm.h: define MFM_NO_CUDA or MFM_CUDA, not both"
#endif
#if defined(MFM_NO_CUDA)
#define MFM__GPU 0
#define MFM__NO_GPU_WHY "it was compiled with MFM_NO_CUDA"
#elif defined(MFM_CUDA)
#define MFM__GPU 1
#elif defined(__has_include)
#if __has_include("modern_fm_kernels.h") && __has_include("xxhash.h")
#define MFM__GPU 1
#elif __has_include("xxhash.h")
#define MFM__GPU 0
#define MFM__NO_GPU_WHY "modern_fm_kernels.h was not found beside modern_fm.h when it was compiled"
#elif __has_include("modern_fm_kernels.h")
#define MFM__GPU 0
#define MFM__NO_GPU_WHY "xxhash.h (xxHash 0.8; Debian/Ubuntu: libxxhash-dev) was not on the include path when it was compiled"
#else
#define MFM__GPU 0
#define MFM__NO_GPU_WHY "modern_fm_kernels.h and xxhash.h were not found beside modern_fm.h when it was compiled"
#endif
#else /* a compiler that cannot look: the GPU part only when asked for */
#define MFM__GPU 0
#define MFM__NO_GPU_WHY "this compiler has no __has_include, so the GPU part needs -DMFM_CUDA"
#endif

#if MFM__GPU
#if !defined(_WIN32)
#include <dirent.h>
#include <dlfcn.h> /* glibc before 2.34 wants -ldl for dlopen */
#endif
#ifndef XXH_INLINE_ALL
#define XXH_INLINE_ALL
#endif
#include "xxhash.h"
#include "modern_fm_kernels.h"
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ============================================================================================
   >>utilities  Errors, allocation, clock, random numbers
   ============================================================================================ */


static mfm_status mfm__fail(mfm_error *err, mfm_status status, const char *fmt, ...) {
    if (err) {
        va_list ap;
        err->status = status;
        va_start(ap, fmt);
        vsnprintf(err->message, sizeof err->message, fmt, ap);
        va_end(ap);
    }
    return status;
}

static mfm_status mfm__ok(mfm_error *err) {
    if (err) {
        err->status = MFM_OK;
        err->message[0] = '\0';
    }
    return MFM_OK;
}

/* NaN and infinities fail x - x == 0; portable where isfinite is a macro in C and not in C++. */
static int mfm__finite(double x) { return x - x == 0.0; }

/* count * size bytes, or NULL when that is more than an object may be (PTRDIFF_MAX) or memory is short. */
static void *mfm__alloc(uint64_t count, size_t size) {
    if (count == 0) count = 1;
    if (count > (uint64_t)PTRDIFF_MAX / size) return NULL;
    return MFM_MALLOC((size_t)count * size);
}

static void *mfm__calloc(uint64_t count, size_t size) {
    void *p = mfm__alloc(count, size);
    if (p) memset(p, 0, (size_t)(count ? count : 1) * size);
    return p;
}

/* A copy of a string; NULL for NULL or when memory is short. */
static char *mfm__copy_text(const char *text) {
    size_t n = text ? strlen(text) + 1 : 0;
    char *copy = n ? (char *)mfm__alloc(n, 1) : NULL;
    if (copy) memcpy(copy, text, n);
    return copy;
}

/* Grows *p to hold at least `need` elements (amortized doubling). Returns 0 when memory is short,
   leaving *p as it was. */
static int mfm__reserve(void **p, uint64_t *cap, uint64_t need, size_t size) {
    uint64_t n = *cap ? *cap : 64;
    void *q;
    if (need <= *cap) return 1;
    while (n < need) n *= 2;
    if (n > (uint64_t)SIZE_MAX / size) return 0;
    q = MFM_REALLOC(*p, (size_t)n * size);
    if (!q) return 0;
    *p = q;
    *cap = n;
    return 1;
}

static double mfm__seconds(void) {
#if defined(_WIN32)
    LARGE_INTEGER f, c;
    QueryPerformanceFrequency(&f);
    QueryPerformanceCounter(&c);
    return (double)c.QuadPart / (double)f.QuadPart;
#elif defined(CLOCK_MONOTONIC)
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
#else /* a system header came before this one and hid clock_gettime: whole seconds only */
    return (double)time(NULL);
#endif
}

/* xoshiro256** seeded through splitmix64: our own generator, so a seed means the same numbers on
   every platform. Each purpose (initialization, epoch e's permutation) gets its own stream. */
typedef struct mfm__rng {
    uint64_t s[4];
} mfm__rng;

static uint64_t mfm__splitmix(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

enum { MFM__STREAM_INIT = 1, MFM__STREAM_EPOCH = 2, MFM__STREAM_SPLIT = 3 };

static mfm__rng mfm__rng_seed(uint64_t seed, uint64_t stream, uint64_t index) {
    mfm__rng r;
    uint64_t x = seed ^ (stream * 0xD1B54A32D192ED03ull) ^ (index * 0x8CB92BA72F3D8DD7ull);
    int i;
    for (i = 0; i < 4; i++) r.s[i] = mfm__splitmix(&x);
    return r;
}

static uint64_t mfm__rng_next(mfm__rng *r) {
    uint64_t *s = r->s;
    uint64_t x = s[1] * 5, result = ((x << 7) | (x >> 57)) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = (s[3] << 45) | (s[3] >> 19);
    return result;
}

/* Uniform in [0, 1) with 53 random bits. */
static double mfm__rng_unit(mfm__rng *r) { return (double)(mfm__rng_next(r) >> 11) * (1.0 / 9007199254740992.0); }

/* Standard normal by Box-Muller (one value per call keeps the stream simple to reason about). */
static double mfm__rng_normal(mfm__rng *r) {
    double u1 = 1.0 - mfm__rng_unit(r), u2 = mfm__rng_unit(r); /* u1 in (0, 1] */
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* Uniform integer in [0, n) without modulo bias. */
static uint64_t mfm__rng_below(mfm__rng *r, uint64_t n) {
    uint64_t threshold = (0 - n) % n, x;
    do x = mfm__rng_next(r);
    while (x < threshold);
    return x % n;
}

/* ============================================================================================
   >>threads  A small pool: run(fn) calls fn(ctx, i) for i = 0..n-1, i = 0 on the caller
   ============================================================================================ */

/* A lock for process-wide state (the live temporary files, the CUDA loader): ready without a
   call, as a static initialised with MFM__STATIC_LOCK_INIT. */
#if defined(MFM_NO_THREADS)
typedef int mfm__static_lock;
#define MFM__STATIC_LOCK_INIT 0
static void mfm__static_lock_take(mfm__static_lock *l) { (void)l; }
static void mfm__static_lock_give(mfm__static_lock *l) { (void)l; }
#elif defined(_WIN32)
typedef SRWLOCK mfm__static_lock;
#define MFM__STATIC_LOCK_INIT SRWLOCK_INIT
static void mfm__static_lock_take(mfm__static_lock *l) { AcquireSRWLockExclusive(l); }
static void mfm__static_lock_give(mfm__static_lock *l) { ReleaseSRWLockExclusive(l); }
#else
typedef pthread_mutex_t mfm__static_lock;
#define MFM__STATIC_LOCK_INIT PTHREAD_MUTEX_INITIALIZER
static void mfm__static_lock_take(mfm__static_lock *l) { pthread_mutex_lock(l); }
static void mfm__static_lock_give(mfm__static_lock *l) { pthread_mutex_unlock(l); }
#endif

typedef void (*mfm__task_fn)(void *ctx, int worker);

/* The [lo, hi) share of `count` items that worker `index` of `n` takes. */
static void mfm__share(uint64_t count, int n, int index, uint64_t *lo, uint64_t *hi) {
    uint64_t per = (count + (uint64_t)n - 1) / (uint64_t)n;
    *lo = per * (uint64_t)index;
    if (*lo > count) *lo = count;
    *hi = *lo + per < count ? *lo + per : count;
}

typedef struct mfm__pool mfm__pool;

typedef struct mfm__pool_worker {
    mfm__pool *pool;
    int index;
#if defined(_WIN32) && !defined(MFM_NO_THREADS)
    HANDLE thread;
#elif !defined(MFM_NO_THREADS)
    pthread_t thread;
#endif
} mfm__pool_worker;

struct mfm__pool {
    int n; /* workers including the caller */
    mfm__task_fn fn;
    void *ctx;
    uint64_t generation; /* bumped for every run; workers wait for a new one */
    int running;         /* workers that have not finished the current run */
    int sleepers;        /* workers waiting on `wake` */
    int quit;
    int started;         /* threads actually created (1 = only the caller) */
    mfm__pool_worker *workers;
#if defined(_WIN32) && !defined(MFM_NO_THREADS)
    CRITICAL_SECTION lock;
    CONDITION_VARIABLE wake, done;
#elif !defined(MFM_NO_THREADS)
    pthread_mutex_t lock;
    pthread_cond_t wake, done;
#endif
};

#if defined(MFM_NO_THREADS)

static mfm_status mfm__pool_start(mfm__pool *p, int n, mfm_error *err) {
    memset(p, 0, sizeof *p);
    p->n = n;
    (void)err;
    return MFM_OK;
}
static void mfm__pool_run(mfm__pool *p, mfm__task_fn fn, void *ctx) {
    int i;
    for (i = 0; i < p->n; i++) fn(ctx, i);
}
static void mfm__pool_stop(mfm__pool *p) { (void)p; }

#else

#if defined(_WIN32)
#define MFM__LOCK(p) EnterCriticalSection(&(p)->lock)
#define MFM__UNLOCK(p) LeaveCriticalSection(&(p)->lock)
#define MFM__WAIT(p, cv) SleepConditionVariableCS(&(p)->cv, &(p)->lock, INFINITE)
#define MFM__BROADCAST(p, cv) WakeAllConditionVariable(&(p)->cv)
#else
#define MFM__LOCK(p) pthread_mutex_lock(&(p)->lock)
#define MFM__UNLOCK(p) pthread_mutex_unlock(&(p)->lock)
#define MFM__WAIT(p, cv) pthread_cond_wait(&(p)->cv, &(p)->lock)
#define MFM__BROADCAST(p, cv) pthread_cond_broadcast(&(p)->cv)
#endif

/* A run hands out work every few hundred microseconds during training; a thread that went
   to sleep takes longer than that to wake (much longer in a virtual machine), so workers and
   the caller first spin a while on the counters, then sleep. Compilers without the GCC atomic
   builtins always sleep. */
#if defined(__GNUC__) || defined(__clang__)
#define MFM__SPIN_LIMIT (1 << 14)
#define MFM__ATOMIC_LOAD(x) __atomic_load_n(&(x), __ATOMIC_ACQUIRE)
#define MFM__ATOMIC_STORE(x, v) __atomic_store_n(&(x), (v), __ATOMIC_RELEASE)
#define MFM__ATOMIC_DEC(x) __atomic_sub_fetch(&(x), 1, __ATOMIC_ACQ_REL)
#if defined(__x86_64__) || defined(__i386__)
#define MFM__PAUSE() __builtin_ia32_pause()
#else
#define MFM__PAUSE() ((void)0)
#endif
#else
#define MFM__SPIN_LIMIT 0
#define MFM__ATOMIC_LOAD(x) (x)
#define MFM__ATOMIC_STORE(x, v) ((x) = (v))
#define MFM__ATOMIC_DEC(x) (--(x))
#define MFM__PAUSE() ((void)0)
#endif

static void mfm__pool_loop(mfm__pool_worker *w) {
    mfm__pool *p = w->pool;
    uint64_t seen = 0;
    for (;;) {
        int spin;
        for (spin = 0; spin < MFM__SPIN_LIMIT && MFM__ATOMIC_LOAD(p->generation) == seen && !MFM__ATOMIC_LOAD(p->quit); spin++) MFM__PAUSE();
        MFM__LOCK(p);
        p->sleepers++;
        while (!p->quit && p->generation == seen) MFM__WAIT(p, wake);
        p->sleepers--;
        if (p->quit) {
            MFM__UNLOCK(p);
            return;
        }
        seen = p->generation;
        MFM__UNLOCK(p);
        p->fn(p->ctx, w->index);
        if (MFM__ATOMIC_DEC(p->running) == 0) {
            MFM__LOCK(p);
            MFM__BROADCAST(p, done);
            MFM__UNLOCK(p);
        }
    }
}

#if defined(_WIN32)
static DWORD WINAPI mfm__pool_main(LPVOID arg) {
    mfm__pool_loop((mfm__pool_worker *)arg);
    return 0;
}
#else
static void *mfm__pool_main(void *arg) {
    mfm__pool_loop((mfm__pool_worker *)arg);
    return NULL;
}
#endif

static void mfm__pool_stop(mfm__pool *p) {
    int i;
    if (p->started > 1) {
        MFM__LOCK(p);
        MFM__ATOMIC_STORE(p->quit, 1);
        MFM__BROADCAST(p, wake);
        MFM__UNLOCK(p);
        for (i = 1; i < p->started; i++) {
#if defined(_WIN32)
            WaitForSingleObject(p->workers[i].thread, INFINITE);
            CloseHandle(p->workers[i].thread);
#else
            pthread_join(p->workers[i].thread, NULL);
#endif
        }
    }
    if (p->workers) {
#if defined(_WIN32)
        DeleteCriticalSection(&p->lock);
#else
        pthread_mutex_destroy(&p->lock);
        pthread_cond_destroy(&p->wake);
        pthread_cond_destroy(&p->done);
#endif
    }
    MFM_FREE(p->workers);
    p->workers = NULL;
    p->started = 0;
}

static mfm_status mfm__pool_start(mfm__pool *p, int n, mfm_error *err) {
    int i;
    memset(p, 0, sizeof *p);
    p->n = n;
    p->started = 1;
    if (n <= 1) return MFM_OK;
    p->workers = (mfm__pool_worker *)mfm__calloc((uint64_t)n, sizeof *p->workers);
    if (!p->workers) return mfm__fail(err, MFM_ERR_OUT_OF_MEMORY, "out of memory for %d worker threads", n);
#if defined(_WIN32)
    InitializeCriticalSection(&p->lock);
    InitializeConditionVariable(&p->wake);
    InitializeConditionVariable(&p->done);
#else
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
#endif
    for (i = 1; i < n; i++) {
        int ok;
        p->workers[i].pool = p;
        p->workers[i].index = i;
#if defined(_WIN32)
        p->workers[i].thread = CreateThread(NULL, 0, mfm__pool_main, &p->workers[i], 0, NULL);
        ok = p->workers[i].thread != NULL;
#else
        ok = pthread_create(&p->workers[i].thread, NULL, mfm__pool_main, &p->workers[i]) == 0;
#endif
        if (!ok) {
            mfm__pool_stop(p);
            return mfm__fail(err, MFM_ERR_THREAD, "could not start worker thread %d of %d", i + 1, n);
        }
        p->started = i + 1;
    }
    return MFM_OK;
}

static void mfm__pool_run(mfm__pool *p, mfm__task_fn fn, void *ctx) {
    int spin;
    if (p->n <= 1) {
        fn(ctx, 0);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    MFM__ATOMIC_STORE(p->running, p->n - 1);
    MFM__LOCK(p);
    MFM__ATOMIC_STORE(p->generation, p->generation + 1);
    if (p->sleepers) MFM__BROADCAST(p, wake);
    MFM__UNLOCK(p);
    fn(ctx, 0);
    for (spin = 0; spin < MFM__SPIN_LIMIT && MFM__ATOMIC_LOAD(p->running) > 0; spin++) MFM__PAUSE();
    MFM__LOCK(p);
    while (MFM__ATOMIC_LOAD(p->running) > 0) MFM__WAIT(p, done);
    MFM__UNLOCK(p);
}

#endif /* MFM_NO_THREADS */

/* One pass of work in n shares: fn(ctx, 0 .. n-1) on a pool started for it, or one share after
   another on the caller where the threads do not start. A share's work and result do not
   depend on the thread that runs it, so the pass gives the same either way. */
static void mfm__run_shares(mfm__task_fn fn, void *ctx, int n) {
    mfm__pool pool;
    int i;
    if (n > 1 && mfm__pool_start(&pool, n, NULL) == MFM_OK) {
        mfm__pool_run(&pool, fn, ctx);
        mfm__pool_stop(&pool);
        return;
    }
    for (i = 0; i < n; i++) fn(ctx, i);
}

/* ============================================================================================
   >>files  Files: checksums, little-endian bytes, read-only mappings, write-then-rename
   ============================================================================================ */

/* Every binary file (datasets, models) is little-endian and ends with an 8-byte checksum of
   everything before it. The checksum runs four independent lanes over 32-byte blocks so that it
   keeps up with memory; it is not cryptographic, it catches truncation, bit rot and edits. */
typedef struct mfm__hash {
    uint64_t lane[4];
    unsigned char pending[32];
    unsigned n_pending;
    uint64_t total;
} mfm__hash;

#define MFM__HASH_MUL 0x9E3779B97F4A7C15ull
#define MFM__HASH_MUL2 0xC2B2AE3D27D4EB4Full

static uint64_t mfm__load_le64(const unsigned char *p) {
    uint64_t x;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    int i;
    for (x = 0, i = 7; i >= 0; i--) x = x << 8 | p[i];
#else
    memcpy(&x, p, 8);
#endif
    return x;
}

static uint32_t mfm__load_le32(const unsigned char *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }

static void mfm__store_le(unsigned char *p, uint64_t x, int bytes) {
    int i;
    for (i = 0; i < bytes; i++) p[i] = (unsigned char)(x >> (8 * i));
}

static uint64_t mfm__rotl(uint64_t x, int r) { return x << r | x >> (64 - r); }

static void mfm__hash_init(mfm__hash *h) {
    memset(h, 0, sizeof *h);
    h->lane[0] = 0x243F6A8885A308D3ull; /* digits of pi: four different starting points */
    h->lane[1] = 0x13198A2E03707344ull;
    h->lane[2] = 0xA4093822299F31D0ull;
    h->lane[3] = 0x082EFA98EC4E6C89ull;
}

static void mfm__hash_blocks(mfm__hash *h, const unsigned char *p, size_t n_blocks) {
    uint64_t a = h->lane[0], b = h->lane[1], c = h->lane[2], d = h->lane[3];
    size_t i;
    for (i = 0; i < n_blocks; i++, p += 32) { /* xor, rotate, odd multiply: each step a bijection */
        a = mfm__rotl(a ^ mfm__load_le64(p), 29) * MFM__HASH_MUL;
        b = mfm__rotl(b ^ mfm__load_le64(p + 8), 29) * MFM__HASH_MUL;
        c = mfm__rotl(c ^ mfm__load_le64(p + 16), 29) * MFM__HASH_MUL;
        d = mfm__rotl(d ^ mfm__load_le64(p + 24), 29) * MFM__HASH_MUL;
    }
    h->lane[0] = a, h->lane[1] = b, h->lane[2] = c, h->lane[3] = d;
}

static void mfm__hash_update(mfm__hash *h, const void *data, size_t n) {
    const unsigned char *p = (const unsigned char *)data;
    h->total += n;
    if (h->n_pending) {
        size_t take = 32 - h->n_pending < n ? 32 - h->n_pending : n;
        memcpy(h->pending + h->n_pending, p, take);
        h->n_pending += (unsigned)take;
        p += take;
        n -= take;
        if (h->n_pending < 32) return;
        mfm__hash_blocks(h, h->pending, 1);
        h->n_pending = 0;
    }
    mfm__hash_blocks(h, p, n / 32);
    memcpy(h->pending, p + n / 32 * 32, n % 32);
    h->n_pending = (unsigned)(n % 32);
}

static uint64_t mfm__hash_final(const mfm__hash *h) {
    uint64_t x = h->total * MFM__HASH_MUL2;
    unsigned i;
    for (i = 0; i < 4; i++) x = mfm__rotl(x ^ h->lane[i] * MFM__HASH_MUL2, 31) * MFM__HASH_MUL;
    for (i = 0; i < h->n_pending; i++) x = mfm__rotl(x ^ h->pending[i], 11) * MFM__HASH_MUL;
    x ^= x >> 33; /* final avalanche so that every input bit reaches every output bit */
    x *= MFM__HASH_MUL2;
    return x ^ x >> 29;
}

static uint64_t mfm__checksum(const void *data, size_t n) {
    mfm__hash h;
    mfm__hash_init(&h);
    mfm__hash_update(&h, data, n);
    return mfm__hash_final(&h);
}

/* The last error of the C library or the system, as a phrase. */
static const char *mfm__os_error(void) { return strerror(errno); }

/* Linux: asks that [p, p + bytes), p on a 2 MB boundary, be backed by 2 MB pages (MADV_HUGEPAGE)
   where it holds whole ones; elsewhere nothing. Training and prediction read a few lines from
   each of thousands of scattered pages per row: with 4 KB pages most of those reads would first
   miss the TLB. The whole range is marked (its tail too), so that it stays one range. */
#define MFM__HUGE_PAGE ((uint64_t)2 << 20)
static void mfm__ask_huge_pages(void *p, uint64_t bytes) {
#if defined(__linux__) && (!defined(__GLIBC__) || defined(__USE_XOPEN2K)) /* declared where POSIX 2001 is */
    if (bytes >= MFM__HUGE_PAGE) posix_madvise(p, (size_t)bytes, 14); /* MADV_HUGEPAGE; glibc and musl pass it on */
#else
    (void)p, (void)bytes;
#endif
}

/* A whole file mapped read-only (an empty file maps to no bytes). */
typedef struct mfm__mapping {
    const unsigned char *bytes;
    uint64_t size;
#if defined(_WIN32)
    HANDLE file, map;
#endif
} mfm__mapping;

#if !defined(_WIN32)
/* The file's `size` bytes mapped read-only, from a 2 MB boundary where the file is 2 MB or more
   (Linux), and asked for huge pages: where the page cache holds the file in 2 MB folios (one the
   library wrote, mfm__writer_in_large_writes, on a file system that keeps large folios; a cold
   file read through such a mapping), each 2 MB of parameters then takes one TLB entry instead of
   512. A range 2 MB longer is reserved first and the file mapped over it at the boundary. */
static void *mfm__map_file(int fd, size_t size) {
#if defined(__linux__)
    const long page_size = sysconf(_SC_PAGESIZE); /* from the process's auxiliary vector: no file read */
    const size_t huge = (size_t)MFM__HUGE_PAGE, page = page_size > 0 && huge % (size_t)page_size == 0 ? (size_t)page_size : 0;
    char *area = page && size >= huge && size <= SIZE_MAX - 2 * huge ? (char *)mmap(NULL, size + huge, PROT_NONE, MAP_PRIVATE, fd, 0) : (char *)MAP_FAILED;
    if (area != (char *)MAP_FAILED) {
        char *const at = area + (huge - (uintptr_t)area % huge) % huge, *const end = at + (size + page - 1) / page * page;
        void *p = mmap(at, size, PROT_READ, MAP_PRIVATE | MAP_FIXED, fd, 0);
        if (at > area) munmap(area, (size_t)(at - area)); /* the reservation's head and tail back (where the map failed, its */
        if (area + size + huge > end) munmap(end, (size_t)(area + size + huge - end)); /* middle may be gone already, and another thread's now) */
        if (p != MAP_FAILED) {
            mfm__ask_huge_pages(p, size);
            return p;
        }
    }
#endif
    return mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
}
#endif

static mfm_status mfm__map(const char *path, mfm__mapping *m, mfm_error *err) {
    memset(m, 0, sizeof *m);
#if defined(_WIN32)
    {
        LARGE_INTEGER size;
        /* FILE_SHARE_DELETE: a model mapped for prediction stays open for its life, and a new
           model renamed over its file must not fail for it */
        m->file = CreateFileA(path, GENERIC_READ, FILE_SHARE_READ | FILE_SHARE_DELETE, NULL, OPEN_EXISTING, FILE_ATTRIBUTE_NORMAL, NULL);
        if (m->file == INVALID_HANDLE_VALUE) return mfm__fail(err, MFM_ERR_IO, "cannot open %s (Windows error %lu)", path, (unsigned long)GetLastError());
        if (!GetFileSizeEx(m->file, &size)) {
            CloseHandle(m->file);
            return mfm__fail(err, MFM_ERR_IO, "cannot get the size of %s (Windows error %lu)", path, (unsigned long)GetLastError());
        }
        m->size = (uint64_t)size.QuadPart;
        if (m->size == 0) return MFM_OK;
        m->map = CreateFileMappingA(m->file, NULL, PAGE_READONLY, 0, 0, NULL);
        m->bytes = m->map ? (const unsigned char *)MapViewOfFile(m->map, FILE_MAP_READ, 0, 0, 0) : NULL;
        if (!m->bytes) {
            unsigned long code = (unsigned long)GetLastError();
            if (m->map) CloseHandle(m->map);
            CloseHandle(m->file);
            return mfm__fail(err, MFM_ERR_IO, "cannot map %s into memory (Windows error %lu)", path, code);
        }
    }
#else
    {
        struct stat st;
        int fd = open(path, O_RDONLY);
        void *p;
        if (fd < 0) return mfm__fail(err, MFM_ERR_IO, "cannot open %s: %s", path, mfm__os_error());
        if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
            close(fd);
            return mfm__fail(err, MFM_ERR_IO, "%s is not a regular file", path);
        }
        m->size = (uint64_t)st.st_size;
        if (m->size == 0 || m->size > (uint64_t)SIZE_MAX) {
            close(fd);
            return m->size ? mfm__fail(err, MFM_ERR_IO, "%s is too large to map on this machine", path) : MFM_OK;
        }
        p = mfm__map_file(fd, (size_t)m->size);
        close(fd); /* the mapping keeps the file */
        if (p == MAP_FAILED) return mfm__fail(err, MFM_ERR_IO, "cannot map %s into memory: %s", path, mfm__os_error());
        m->bytes = (const unsigned char *)p;
    }
#endif
    return MFM_OK;
}

static void mfm__unmap(mfm__mapping *m) {
#if defined(_WIN32)
    if (m->bytes) UnmapViewOfFile(m->bytes);
    if (m->map) CloseHandle(m->map);
    if (m->file && m->file != INVALID_HANDLE_VALUE) CloseHandle(m->file);
#else
    if (m->bytes) munmap((void *)m->bytes, (size_t)m->size);
#endif
    memset(m, 0, sizeof *m);
}

/* Every file the library writes goes through one writer (mfm_output_open is its public face).
   A regular file, or a path where nothing is yet, is written to a new temporary file in the same
   folder, ".NAME.mfm.tmp-PID-RANDOM", created exclusively (so it is never someone's existing
   file), flushed to the disk and renamed over the path only at commit: a crash, a signal or a
   failed write never leaves a half-written file where a good one was, and the temporary name
   never looks like a result. A symbolic link is written through: the file it names is replaced
   that way and the link stays. Standard output ("-", "/dev/stdout"), an open descriptor
   (/dev/stderr, /dev/fd/N), a character device and a FIFO are written in place (nothing to
   replace); a directory, a socket, a block device or anything else is refused untouched. The
   checksum of everything written is kept. */
#if defined(O_CLOEXEC)
#define MFM__O_CLOEXEC O_CLOEXEC /* a child the caller starts meanwhile does not hold the file */
#else
#define MFM__O_CLOEXEC 0
#endif

typedef struct mfm__writer {
    FILE *f;
    const char *path; /* the file written or replaced (a link's target) */
    char *temp;       /* NULL when writing in place */
    char *resolved;   /* the file a symbolic link names */
    int failed;       /* a write came up short: the error is reported at commit */
    int failed_errno;
    int temp_slot;    /* temp's place in the table below, or -1 */
    char *buffer;     /* the stream's buffer, for a model file (mfm__writer_in_large_writes) */
    int started;      /* a byte was written */
    int unhashed;     /* the bytes carry checksums of their own (model files): no whole-file hash */
    mfm__hash hash;
} mfm__writer;

/* The temporary files open in this process, for mfm_output_remove_temporaries (a signal
   handler's): a name is complete before its flag says live, and read only through volatile. */
#define MFM__TEMP_SLOTS 32
#define MFM__TEMP_NAME_BYTES 4096
static volatile char mfm__temp_names[MFM__TEMP_SLOTS][MFM__TEMP_NAME_BYTES];
static volatile sig_atomic_t mfm__temp_live[MFM__TEMP_SLOTS];
static volatile long mfm__temp_owner[MFM__TEMP_SLOTS]; /* the process that made it: a forked child's handler leaves it */
static int mfm__temp_taken[MFM__TEMP_SLOTS];

static long mfm__process_id(void) {
#if defined(_WIN32)
    return (long)GetCurrentProcessId();
#else
    return (long)getpid(); /* async-signal-safe */
#endif
}

/* The name's bytes reach memory before its flag does, as another core's handler sees them. */
#if defined(__GNUC__) || defined(__clang__)
#define MFM__STORE_FENCE() __sync_synchronize()
#elif defined(_MSC_VER)
#define MFM__STORE_FENCE() MemoryBarrier()
#else
#define MFM__STORE_FENCE() ((void)0)
#endif
static mfm__static_lock mfm__temp_mutex = MFM__STATIC_LOCK_INIT;
static void mfm__temp_lock(void) { mfm__static_lock_take(&mfm__temp_mutex); }
static void mfm__temp_unlock(void) { mfm__static_lock_give(&mfm__temp_mutex); }

/* The slot holding name, or -1 when the table is full (the file then is not removed on a signal). */
static int mfm__temp_register(const char *name) {
    size_t n = strlen(name), i;
    int slot = -1, s;
    if (n >= MFM__TEMP_NAME_BYTES) return -1;
    mfm__temp_lock();
    for (s = 0; s < MFM__TEMP_SLOTS && slot < 0; s++)
        if (!mfm__temp_taken[s]) mfm__temp_taken[s] = 1, slot = s;
    mfm__temp_unlock();
    if (slot < 0) return -1;
    for (i = 0; i <= n; i++) mfm__temp_names[slot][i] = name[i];
    mfm__temp_owner[slot] = mfm__process_id();
    MFM__STORE_FENCE();
    mfm__temp_live[slot] = 1;
    return slot;
}

static void mfm__temp_unregister(int slot) {
    if (slot < 0) return;
    mfm__temp_live[slot] = 0;
    mfm__temp_lock();
    mfm__temp_taken[slot] = 0;
    mfm__temp_unlock();
}

MFMDEF void mfm_output_remove_temporaries(void) {
    const long self = mfm__process_id();
    int s;
    for (s = 0; s < MFM__TEMP_SLOTS; s++)
        if (mfm__temp_live[s] && mfm__temp_owner[s] == self) {
#if defined(_WIN32)
            _unlink((const char *)mfm__temp_names[s]);
#else
            unlink((const char *)mfm__temp_names[s]); /* async-signal-safe, unlike remove() */
#endif
        }
}

#if !defined(_WIN32)
#define MFM__FOLLOW_LINKS 1
/* The descriptor of this process that a path names (/dev/stderr, /dev/fd/N, /proc/self/fd/N),
   or -1. Such an output is written through the open descriptor, never reopened: reopening would
   truncate (or replace) the file that the shell redirected it to. */
static int mfm__named_descriptor(const char *p) {
    const char *digits = NULL;
    char self[48];
    long fd = 0;
    snprintf(self, sizeof self, "/proc/%ld/fd/", mfm__process_id());
    if (strcmp(p, "/dev/stdout") == 0) return 1;
    if (strcmp(p, "/dev/stderr") == 0) return 2;
    if (strncmp(p, "/dev/fd/", 8) == 0) digits = p + 8;
    else if (strncmp(p, "/proc/self/fd/", 14) == 0) digits = p + 14;
    else if (strncmp(p, "/proc/thread-self/fd/", 21) == 0) digits = p + 21;
    else if (strncmp(p, self, strlen(self)) == 0) digits = p + strlen(self);
    if (!digits || !*digits) return -1;
    for (; *digits >= '0' && *digits <= '9' && fd < 1000000; digits++) fd = 10 * fd + (*digits - '0');
    return *digits ? -1 : (int)fd;
}

/* The path a chain of symbolic links ends at, or NULL when path is no link (or memory is
   short, or the chain is absurdly long); *descriptor >= 0 when a link on the way names an open
   descriptor (mfm__named_descriptor). */
static char *mfm__follow_links(const char *path, int *descriptor) {
    char *cur = NULL;
    int hops;
    *descriptor = -1;
    for (hops = 0; hops < 32; hops++) {
        const char *p = cur ? cur : path, *slash;
        struct stat st;
        char target[4096], *next;
        ssize_t n;
        size_t dir;
        if ((*descriptor = mfm__named_descriptor(p)) >= 0) break;
        if (lstat(p, &st) != 0 || !S_ISLNK(st.st_mode)) return cur;
        if ((n = readlink(p, target, sizeof target - 1)) <= 0) break;
        target[n] = '\0';
        slash = strrchr(p, '/');
        dir = target[0] == '/' || !slash ? 0 : (size_t)(slash - p) + 1; /* relative: from the link's folder */
        if (!(next = (char *)mfm__alloc(dir + (size_t)n + 1, 1))) break;
        memcpy(next, p, dir);
        memcpy(next + dir, target, (size_t)n + 1);
        MFM_FREE(cur);
        cur = next;
    }
    MFM_FREE(cur);
    return NULL;
}
#endif

/* Leaves any old file at path untouched. */
static void mfm__writer_abort(mfm__writer *w) {
    if (w->f && w->f != stdout) fclose(w->f);
    MFM_FREE(w->buffer); /* after the close that flushed it */
    if (w->temp) remove(w->temp);
    mfm__temp_unregister(w->temp_slot);
    MFM_FREE(w->temp);
    MFM_FREE(w->resolved);
    memset(w, 0, sizeof *w);
    w->temp_slot = -1;
}

/* Creates w->temp beside path, exclusively: a name that exists is skipped, never reused. */
static mfm_status mfm__writer_create_temp(mfm__writer *w, const char *path, mfm_error *err) {
    const char *base = path, *c;
    size_t len = strlen(path) + 64;
    uint64_t seed = (uint64_t)(uintptr_t)w ^ ((uint64_t)time(NULL) << 20) ^ (uint64_t)clock();
    int attempt, fd = -1, code = 0;
#if defined(_WIN32)
    unsigned long pid = (unsigned long)GetCurrentProcessId();
#else
    unsigned long pid = (unsigned long)getpid();
#endif
    for (c = path; *c; c++)
#if defined(_WIN32)
        if (*c == '/' || *c == '\\' || *c == ':') base = c + 1;
#else
        if (*c == '/') base = c + 1;
#endif
    if (!(w->temp = (char *)mfm__alloc(len, 1))) return mfm__fail(err, MFM_ERR_OUT_OF_MEMORY, "out of memory for a file name");
    seed ^= (uint64_t)pid << 32;
    for (attempt = 0; attempt < 16 && fd < 0; attempt++) {
        /* at most 100 characters of the name: a long but legal name stays legal with the suffix */
        snprintf(w->temp, len, "%.*s.%.100s.mfm.tmp-%lu-%016" PRIx64, (int)(base - path), path, base, pid, mfm__splitmix(&seed));
        w->temp_slot = mfm__temp_register(w->temp); /* before the file exists: a signal in between finds no file */
#if defined(_WIN32)
        fd = _open(w->temp, _O_WRONLY | _O_CREAT | _O_EXCL | _O_BINARY, _S_IREAD | _S_IWRITE);
#else
        fd = open(w->temp, O_WRONLY | O_CREAT | O_EXCL | MFM__O_CLOEXEC, 0666);
#endif
        code = errno;
        if (fd < 0) mfm__temp_unregister(w->temp_slot), w->temp_slot = -1;
        if (fd < 0 && code != EEXIST) break;
    }
    if (fd < 0) { /* the name in w->temp is nobody's file of ours: keep it for the message only */
        mfm_status st = mfm__fail(err, MFM_ERR_IO, "cannot write %s (creating %s): %s", path, w->temp, strerror(code));
        MFM_FREE(w->temp);
        w->temp = NULL;
        mfm__writer_abort(w);
        return st;
    }
    if (fd >= 0) {
#if !defined(_WIN32)
        struct stat st;
        if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) (void)fchmod(fd, st.st_mode & 07777); /* the replaced file's permissions */
        w->f = fdopen(fd, "wb");
#else
        w->f = _fdopen(fd, "wb");
#endif
        code = errno;
        if (!w->f) {
#if defined(_WIN32)
            _close(fd);
#else
            close(fd);
#endif
            remove(w->temp);
        }
    }
    if (!w->f) {
        mfm_status st = mfm__fail(err, MFM_ERR_IO, "cannot write %s (creating %s): %s", path, w->temp, strerror(code));
        mfm__writer_abort(w);
        return st;
    }
    return MFM_OK;
}

static mfm_status mfm__writer_open(mfm__writer *w, const char *path, mfm_error *err) {
    memset(w, 0, sizeof *w);
    w->temp_slot = -1;
    mfm__hash_init(&w->hash);
    w->path = path;
    if (!path || !*path) return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "the output path is NULL or empty");
    if (strcmp(path, "-") == 0 || strcmp(path, "/dev/stdout") == 0) {
        w->f = stdout;
#if defined(_WIN32)
        _setmode(_fileno(stdout), _O_BINARY); /* a binary model or dataset: no LF -> CRLF */
#endif
        return MFM_OK;
    }
#if !defined(_WIN32)
    {
        struct stat st;
        int descriptor;
        if ((w->resolved = mfm__follow_links(path, &descriptor)) == NULL && descriptor >= 0) { /* an open descriptor: written through it */
            int copy = descriptor == 1 ? -1 : dup(descriptor);
            if (descriptor == 1) {
                w->f = stdout;
            } else if (copy < 0 || !(w->f = fdopen(copy, "wb"))) {
                if (copy >= 0) close(copy);
                return mfm__fail(err, MFM_ERR_IO, "cannot write %s: descriptor %d is not open for writing: %s", path, descriptor, mfm__os_error());
            }
            return MFM_OK;
        }
        if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) { /* nothing to replace: written in place, or not at all */
            if (!S_ISCHR(st.st_mode) && !S_ISFIFO(st.st_mode))
                return mfm__fail(err, MFM_ERR_IO, "cannot write %s: it is a %s, not a file; nothing was written", path,
                                 S_ISDIR(st.st_mode) ? "directory" : S_ISBLK(st.st_mode) ? "block device" : "special file");
            if (!(w->f = fopen(path, "wb"))) return mfm__fail(err, MFM_ERR_IO, "cannot write %s: %s", path, mfm__os_error());
            return MFM_OK;
        }
#if defined(MFM__FOLLOW_LINKS)
        if (w->resolved) {
            w->path = path = w->resolved; /* replace the file, not the link */
        } else if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode)) {
            return mfm__fail(err, MFM_ERR_IO, "cannot write %s: it is a symbolic link that leads nowhere (a loop, or a chain too long); nothing was written", path);
        }
#endif
    }
#endif
    return mfm__writer_create_temp(w, path, err);
}

/* A new model or binary data file is written through a buffer of 4 MB, so that the system
   receives whole 4 MB writes at multiples of 4 MB: a file system that keeps large folios (XFS;
   ext4 since Linux 6.16) then holds the file in the page cache in 2 MB folios, which mfm__map_file
   maps whole, where writes of a few KB leave it in 4 KB pages. Asked for before the first byte;
   other outputs keep stdio's buffer (a program may hold many open). */
#define MFM__WRITE_BUFFER ((size_t)4 << 20)
static void mfm__writer_in_large_writes(mfm__writer *w) {
    if (w->started || !w->temp || w->buffer || ftell(w->f) != 0 || !(w->buffer = (char *)mfm__alloc(MFM__WRITE_BUFFER, 1))) return; /* ftell: written through mfm_output_stream */
    if (setvbuf(w->f, w->buffer, _IOFBF, MFM__WRITE_BUFFER) != 0) { /* the default's, then */
        MFM_FREE(w->buffer);
        w->buffer = NULL;
    }
}

static void mfm__write(mfm__writer *w, const void *p, size_t n) {
    if (w->failed || n == 0) return;
    w->started = 1;
    if (!w->unhashed) mfm__hash_update(&w->hash, p, n);
    if (fwrite(p, 1, n, w->f) != n) {
        w->failed = 1;
        w->failed_errno = errno;
    }
}

/* fsync of the folder, so that the rename itself survives a power cut (best effort). */
static void mfm__sync_folder(const char *path) {
#if !defined(_WIN32)
    const char *slash = strrchr(path, '/');
    char *dir = (char *)mfm__alloc(slash ? (uint64_t)(slash - path) + 2 : 2, 1);
    int fd;
    if (!dir) return;
    if (slash) {
        memcpy(dir, path, (size_t)(slash - path) + 1);
        dir[slash - path + 1] = '\0';
    } else {
        strcpy(dir, ".");
    }
    if ((fd = open(dir, O_RDONLY)) >= 0) {
        (void)fsync(fd);
        close(fd);
    }
    MFM_FREE(dir);
#else
    (void)path;
#endif
}

static mfm_status mfm__writer_commit(mfm__writer *w, mfm_error *err) {
    int ok = !w->failed && fflush(w->f) == 0 && !ferror(w->f); /* ferror: writes straight to the stream too */
    if (!w->failed && !ok) w->failed_errno = errno;
    if (ok && w->temp) {
#if defined(_WIN32)
        ok = FlushFileBuffers((HANDLE)_get_osfhandle(_fileno(w->f))) != 0;
#else
        ok = fsync(fileno(w->f)) == 0;
#endif
        if (!ok) w->failed_errno = errno;
        ok = fclose(w->f) == 0 && ok;
        w->f = NULL;
#if defined(_WIN32)
        ok = ok && MoveFileExA(w->temp, w->path, MOVEFILE_REPLACE_EXISTING | MOVEFILE_WRITE_THROUGH);
#else
        ok = ok && rename(w->temp, w->path) == 0;
#endif
        if (!ok && !w->failed_errno) w->failed_errno = errno;
    } else if (ok && w->f != stdout) { /* a device or a pipe written in place */
        ok = fclose(w->f) == 0;
        w->f = NULL;
        if (!ok) w->failed_errno = errno;
    }
    if (!ok) {
        mfm_status st = mfm__fail(err, MFM_ERR_IO, "writing %s failed: %s; %s", w->f == stdout ? "standard output" : w->path,
                                  strerror(w->failed_errno ? w->failed_errno : EIO),
                                  w->temp ? "any earlier file there is unchanged" : "the output is incomplete");
        mfm__writer_abort(w);
        return st;
    }
    if (w->temp) mfm__sync_folder(w->path);
    MFM_FREE(w->temp); /* renamed: nothing left to remove */
    w->temp = NULL;
    mfm__writer_abort(w); /* now only frees (and forgets the temporary name) */
    return MFM_OK;
}

/* The public face of the writer: the same open, stream, commit or abort. */
struct mfm_output_file {
    mfm__writer w;
    char *path; /* the caller's path, kept for the writer */
};

MFMDEF mfm_status mfm_output_open(const char *path, mfm_output_file **out, mfm_error *err) {
    mfm_output_file *f;
    mfm_status st;
    if (!out) return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "mfm_output_open: the output pointer is NULL");
    *out = NULL;
    if (!path || !*path) return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "the output path is NULL or empty");
    f = (mfm_output_file *)mfm__calloc(1, sizeof *f);
    if (!f || !(f->path = mfm__copy_text(path))) {
        MFM_FREE(f);
        return mfm__fail(err, MFM_ERR_OUT_OF_MEMORY, "out of memory opening %s", path);
    }
    if ((st = mfm__writer_open(&f->w, f->path, err)) != MFM_OK) {
        MFM_FREE(f->path);
        MFM_FREE(f);
        return st;
    }
    *out = f;
    return mfm__ok(err);
}

MFMDEF FILE *mfm_output_stream(mfm_output_file *f) { return f ? f->w.f : NULL; }

MFMDEF const char *mfm_output_temp_path(const mfm_output_file *f) { return f ? f->w.temp : NULL; }

MFMDEF mfm_status mfm_output_commit(mfm_output_file *f, mfm_error *err) {
    mfm_status st;
    if (!f) return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "mfm_output_commit: the output is NULL");
    st = mfm__writer_commit(&f->w, err);
    MFM_FREE(f->path);
    MFM_FREE(f);
    return st == MFM_OK ? mfm__ok(err) : st;
}

MFMDEF void mfm_output_abort(mfm_output_file *f) {
    if (!f) return;
    mfm__writer_abort(&f->w);
    MFM_FREE(f->path);
    MFM_FREE(f);
}

/* Ends a binary file: the checksum of everything before it. */
static void mfm__write_checksum(mfm__writer *w) {
    unsigned char b[8];
    mfm__store_le(b, mfm__hash_final(&w->hash), 8);
    mfm__write(w, b, 8);
}

static void mfm__read_floats(const unsigned char *p, float *x, uint64_t n) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    uint64_t i;
    for (i = 0; i < n; i++) {
        uint32_t u = mfm__load_le32(p + 4 * i);
        memcpy(x + i, &u, 4);
    }
#else
    memcpy(x, p, (size_t)n * sizeof(float));
#endif
}

/* Size and modification time of a file (0, 0 when it cannot be read). */
static void mfm__file_stamp(const char *path, uint64_t *size, int64_t *mtime) {
    struct stat st;
    *size = 0;
    *mtime = 0;
    if (path && stat(path, &st) == 0) {
        *size = (uint64_t)st.st_size;
        *mtime = (int64_t)st.st_mtime;
    }
}

static int mfm__cores(void) {
#if defined(_WIN32)
    SYSTEM_INFO si;
    GetSystemInfo(&si);
    return si.dwNumberOfProcessors > 0 ? (int)si.dwNumberOfProcessors : 1;
#elif defined(_SC_NPROCESSORS_ONLN)
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (n > 256 ? 256 : (int)n) : 1;
#else
    return 1;
#endif
}

/* Every n_threads in the API means the same: 0 is every core of this machine, counted when the
   work starts (a model saved with 0 uses every core of the machine that loads it). */
static int mfm__threads(int n_threads) { return n_threads > 0 ? n_threads : mfm__cores(); }

/* Threads for one pass over `bytes` of memory: at most n_threads (0: no limit) and the cores,
   and none for less than 4 MB, the most a thread's start pays for. The cores are counted only
   for a pass long enough for two threads: counting them reads a file on Linux (sysconf), which
   cost a one-row mfm_predict most of its time (2-core VM: 7.8 us a row, 72 % of it in the
   kernel; 1.5-2.3 us without). */
static int mfm__workers_for_bytes(uint64_t bytes, int n_threads) {
    const uint64_t most = (bytes + (4u << 20) - 1) / (4u << 20);
    int cores, limit;
    if (most <= 1 || n_threads == 1) return 1;
    cores = mfm__cores();
    limit = n_threads > 0 && n_threads < cores ? n_threads : cores;
    return most >= (uint64_t)limit ? limit : (int)most;
}

/* ============================================================================================
   >>params  Defaults and validation of mfm_params
   ============================================================================================ */

static const char *mfm__model_names[] = {"FM", "FM", "FFM", "FwFM"};
static const char *mfm__optimizer_names[] = {"AdaGrad", "SGD", "AdaGrad", "Adam", "FTRL", "row-wise AdaGrad"};

/* AdaGrad and row-wise AdaGrad share everything but the shape of V's accumulator: the sum of a
   batch's gradients, adagrad_init, the linear terms' line search. */
static int mfm__adagrad_kind(mfm_optimizer o) { return o == MFM_OPTIMIZER_ADAGRAD || o == MFM_OPTIMIZER_ROWWISE_ADAGRAD; }

MFMDEF const char *mfm_version_string(void) { return MFM_VERSION_STRING; }

MFMDEF const char *mfm_status_string(mfm_status status) {
    switch (status) {
#define MFM__STATUS_CASE(name, value, text) \
    case name:                              \
        return text;
        MFM__STATUS_LIST(MFM__STATUS_CASE)
#undef MFM__STATUS_CASE
    default:
        return "unknown status";
    }
}

/* One table of names per enum, indexed by value (DEFAULT first). */
static const char *mfm__enum_name(const char *const *names, int count, int value) {
    return value >= 0 && value < count ? names[value] : "unknown";
}
#define MFM__ENUM_NAME(fn, type, count, ...)                                   \
    MFMDEF const char *fn(type value) {                                        \
        static const char *const names[count] = {__VA_ARGS__};                 \
        return mfm__enum_name(names, (int)(count), (int)value);                \
    }
MFM__ENUM_NAME(mfm_model_type_name, mfm_model_type, MFM_MODEL_COUNT, "fm", "fm", "ffm", "fwfm")
MFM__ENUM_NAME(mfm_task_name, mfm_task, MFM_TASK_COUNT, "binary", "binary", "regression", "multiclass")
MFM__ENUM_NAME(mfm_optimizer_name, mfm_optimizer, MFM_OPTIMIZER_COUNT, "adagrad", "sgd", "adagrad", "adam", "ftrl", "rowwise-adagrad")
MFM__ENUM_NAME(mfm_backend_name, mfm_backend, MFM_BACKEND_COUNT, "cpu", "cpu", "cuda", "auto")
MFM__ENUM_NAME(mfm_class_weight_name, mfm_class_weight, MFM_CLASS_WEIGHT_COUNT, "none", "none", "balanced", "explicit")
MFM__ENUM_NAME(mfm_metric_name, mfm_metric, MFM_METRIC_COUNT, "default", "logloss", "auc", "half-mse", "rmse", "cross-entropy")
MFM__ENUM_NAME(mfm_format_name, mfm_format, MFM_FORMAT_COUNT, "auto", "libffm", "libsvm", "binary")
MFM__ENUM_NAME(mfm_output_name, mfm_output, MFM_OUTPUT_COUNT, "default", "score", "prob", "label")
#undef MFM__ENUM_NAME

MFMDEF mfm_params mfm_params_resolve(const mfm_params *params) {
    mfm_params p;
    if (params)
        p = *params;
    else
        memset(&p, 0, sizeof p);
    if (p.model == MFM_MODEL_DEFAULT) p.model = MFM_MODEL_FM;
    if (p.task == MFM_TASK_DEFAULT) p.task = MFM_TASK_BINARY;
    if (p.optimizer == MFM_OPTIMIZER_DEFAULT) p.optimizer = MFM_OPTIMIZER_ADAGRAD;
    if (p.class_weight == MFM_CLASS_WEIGHT_DEFAULT) p.class_weight = MFM_CLASS_WEIGHT_NONE;
    if (p.backend == MFM_BACKEND_DEFAULT) p.backend = MFM_BACKEND_CPU;
    if (p.k == 0) p.k = 4;
    if (p.n_epochs == 0) p.n_epochs = 10;
    if (p.batch_size == 0) p.batch_size = 1;
    if (p.normalize_rows >= 0) p.normalize_rows = 1; /* MFM_OFF (any negative) stays off */
    /* Real fields: +0 means the default, MFM_ZERO (-0) a literal zero, which stays -0 so that
       resolving again changes nothing. Why these values: docs/DEFAULTS.md. */
#define MFM__REAL_DEFAULT(field, value) \
    if (p.field == 0 && !signbit(p.field)) p.field = value;
    /* On rows of unit length a step moves a score about sqrt(z) times less than on one-hot rows,
       so AdaGrad's defaults there are larger; FFM's smaller one keeps its many vectors apart. */
    if (mfm__adagrad_kind(p.optimizer) && p.normalize_rows > 0) {
        MFM__REAL_DEFAULT(learning_rate, p.model == MFM_MODEL_FFM ? 0.2 : 0.5)
        if (p.model == MFM_MODEL_FFM) MFM__REAL_DEFAULT(init_scale, 0.1)
    }
    MFM__REAL_DEFAULT(learning_rate, 0.05)
    MFM__REAL_DEFAULT(l2_linear, 2e-5)
    MFM__REAL_DEFAULT(l2_factors, 2e-5)
    MFM__REAL_DEFAULT(init_scale, 0.01)
    MFM__REAL_DEFAULT(adam_beta1, 0.9)
    MFM__REAL_DEFAULT(adam_beta2, 0.999)
    MFM__REAL_DEFAULT(adam_epsilon, 1e-8)
    MFM__REAL_DEFAULT(ftrl_beta, 1.0)
    MFM__REAL_DEFAULT(adagrad_init, 1.0)
#undef MFM__REAL_DEFAULT
    if (p.patience == 0) p.patience = 10;
    if (p.metric == MFM_METRIC_DEFAULT)
        p.metric = p.task == MFM_TASK_REGRESSION ? MFM_METRIC_HALF_MSE : p.task == MFM_TASK_MULTICLASS ? MFM_METRIC_CROSS_ENTROPY : MFM_METRIC_LOGLOSS;
    return p;
}

/* Checks a resolved params struct; the first violation is reported with its field and value.
   n_classes is the class count the model will have (1 for binary and regression). */
static mfm_status mfm__validate_params(const mfm_params *p, uint32_t n_classes, mfm_error *err) {
    struct {
        const char *name;
        double value, low, high; /* valid: low <= value <= high (high exclusive where noted) */
        int high_exclusive;
    } reals[16];
    int n = 0, i;
    if ((unsigned)p->model >= MFM_MODEL_COUNT)
        return mfm__fail(err, MFM_ERR_INVALID_PARAM, "params.model = %d is not a known model (FM, FFM or FwFM)", (int)p->model);
    if ((unsigned)p->task >= MFM_TASK_COUNT)
        return mfm__fail(err, MFM_ERR_INVALID_PARAM, "params.task = %d is not a known task (binary, regression or multiclass)", (int)p->task);
    if ((unsigned)p->optimizer >= MFM_OPTIMIZER_COUNT)
        return mfm__fail(err, MFM_ERR_INVALID_PARAM, "params.optimizer = %d is not a known optimizer (SGD, AdaGrad, Adam or FTRL)", (int)p->optimizer);
    if ((unsigned)p->class_weight >= MFM_CLASS_WEIGHT_COUNT)
        return mfm__fail(err, MFM_ERR_INVALID_PARAM, "params.class_weight = %d is not a known class weighting (none, balanced or explicit)", (int)p->class_weight);
    if ((unsigned)p->backend >= MFM_BACKEND_COUNT)
        return mfm__fail(err, MFM_ERR_INVALID_PARAM, "params.backend = %d is not a known backend (CPU, CUDA or AUTO)", (int)p->backend);
    if (p->device < 0) return mfm__fail(err, MFM_ERR_INVALID_PARAM, "params.device = %d must not be negative", p->device);
    if (p->n_devices < 0 || p->n_devices > MFM_MAX_DEVICES)
        return mfm__fail(err, MFM_ERR_INVALID_PARAM, "params.n_devices = %d must be between 0 (one GPU) and %d", p->n_devices, MFM_MAX_DEVICES);
    if (p->n_devices > 1 && p->devices) {
        int a, b;
        for (a = 0; a < p->n_devices; a++) {
            if (p->devices[a] < 0) return mfm__fail(err, MFM_ERR_INVALID_PARAM, "params.devices[%d] = %d must not be negative", a, p->devices[a]);
            for (b = 0; b < a; b++)
                if (p->devices[b] == p->devices[a])
                    return mfm__fail(err, MFM_ERR_INVALID_PARAM, "params.devices names device %d twice (devices[%d] and devices[%d]); name each GPU once",
                                     p->devices[a], b, a);
        }
    }
    if (p->n_devices > 1 && p->backend == MFM_BACKEND_CPU)
        return mfm__fail(err, MFM_ERR_INVALID_PARAM, "params.n_devices = %d asks for GPUs and the backend is CPU; set params.backend to CUDA (or AUTO)", p->n_devices);
    if (p->deterministic != 0 && p->deterministic != 1)
        return mfm__fail(err, MFM_ERR_INVALID_PARAM, "params.deterministic = %d must be 0 (fastest) or 1 (bit-identical GPU runs)", p->deterministic);
    if (p->hogwild != 0 && p->hogwild != 1)
        return mfm__fail(err, MFM_ERR_INVALID_PARAM, "params.hogwild = %d must be 0 (reproducible threads) or 1 (Hogwild threads)", p->hogwild);
    if (p->hogwild && p->backend == MFM_BACKEND_CUDA)
        return mfm__fail(err, MFM_ERR_INVALID_PARAM,
                         "params.hogwild = 1 is a schedule of CPU threads and the backend is CUDA; the GPU's choice is params.deterministic");
    if (p->thread_chunks != 0 && p->thread_chunks != 1)
        return mfm__fail(err, MFM_ERR_INVALID_PARAM, "params.thread_chunks = %d must be 0 (bits independent of the threads) or 1 (a chunk of each batch per thread)",
                         p->thread_chunks);
    if (p->thread_chunks && p->hogwild)
        return mfm__fail(err, MFM_ERR_INVALID_PARAM, "params.thread_chunks = 1 and params.hogwild = 1 are two schedules of the threads; choose one");
    if (p->thread_chunks && p->backend == MFM_BACKEND_CUDA)
        return mfm__fail(err, MFM_ERR_INVALID_PARAM,
                         "params.thread_chunks = 1 is a schedule of CPU threads and the backend is CUDA; the GPU's choice is params.deterministic");
    if (p->k < 1 || p->k > 4096)
        return mfm__fail(err, MFM_ERR_INVALID_PARAM, "params.k = %d is out of range: it must be between 1 and 4096 (0 means 4)", p->k);
    if (p->n_epochs < 1)
        return mfm__fail(err, MFM_ERR_INVALID_PARAM, "params.n_epochs = %d must be at least 1 (0 means 10)", p->n_epochs);
    if (p->batch_size < 1)
        return mfm__fail(err, MFM_ERR_INVALID_PARAM, "params.batch_size = %d must be at least 1 (0 means 1)", p->batch_size);
    if (p->n_threads < 0 || p->n_threads > 1024)
        return mfm__fail(err, MFM_ERR_INVALID_PARAM, "params.n_threads = %d must be between 0 (every core) and 1024", p->n_threads);
    if (p->n_classes < 0)
        return mfm__fail(err, MFM_ERR_INVALID_PARAM, "params.n_classes = %d must not be negative", p->n_classes);
    if (p->patience < 1) return mfm__fail(err, MFM_ERR_INVALID_PARAM, "params.patience = %d must be at least 1 (0 means 10)", p->patience);
    if ((unsigned)p->metric >= MFM_METRIC_COUNT || p->metric == MFM_METRIC_DEFAULT)
        return mfm__fail(err, MFM_ERR_INVALID_PARAM, "params.metric = %d is not a known metric (logloss, auc, half-mse, rmse or cross-entropy)", (int)p->metric);
    if ((p->task == MFM_TASK_BINARY) != (p->metric == MFM_METRIC_LOGLOSS || p->metric == MFM_METRIC_AUC) ||
        (p->task == MFM_TASK_REGRESSION) != (p->metric == MFM_METRIC_HALF_MSE || p->metric == MFM_METRIC_RMSE) ||
        (p->task == MFM_TASK_MULTICLASS) != (p->metric == MFM_METRIC_CROSS_ENTROPY))
        return mfm__fail(err, MFM_ERR_INVALID_PARAM,
                         "params.metric = %s (%d) does not fit a %s task (binary: logloss or auc; regression: half-mse or rmse; multiclass: cross-entropy)",
                         mfm_metric_name(p->metric), (int)p->metric, mfm_task_name(p->task));
    if (p->linear_only && p->pairs_only)
        return mfm__fail(err, MFM_ERR_INVALID_PARAM, "params.linear_only and params.pairs_only together leave nothing to learn");
#define MFM__REAL(field, lo, hi, excl)                \
    do {                                              \
        reals[n].name = #field;                       \
        reals[n].value = p->field;                    \
        reals[n].low = lo;                            \
        reals[n].high = hi;                           \
        reals[n].high_exclusive = excl;               \
        n++;                                          \
    } while (0)
    MFM__REAL(learning_rate, 0, HUGE_VAL, 0);
    MFM__REAL(l2_linear, 0, HUGE_VAL, 0);
    MFM__REAL(l2_factors, 0, HUGE_VAL, 0);
    MFM__REAL(l1_linear, 0, HUGE_VAL, 0);
    MFM__REAL(l1_factors, 0, HUGE_VAL, 0);
    MFM__REAL(init_scale, 0, HUGE_VAL, 0);
    MFM__REAL(adam_beta1, 0, 1, 1);
    MFM__REAL(adam_beta2, 0, 1, 1);
    MFM__REAL(adam_epsilon, 0, HUGE_VAL, 0);
    MFM__REAL(ftrl_beta, 0, HUGE_VAL, 0);
    MFM__REAL(label_smoothing, 0, 1, 1);
    MFM__REAL(adagrad_init, 0, HUGE_VAL, 0);
    MFM__REAL(validation_fraction, 0, 1, 1);
    MFM__REAL(min_delta, 0, HUGE_VAL, 0);
#undef MFM__REAL
    for (i = 0; i < n; i++) {
        double v = reals[i].value;
        if (!mfm__finite(v) || v < reals[i].low || v > reals[i].high || (reals[i].high_exclusive && v >= reals[i].high))
            return mfm__fail(err, MFM_ERR_INVALID_PARAM, "params.%s = %g is out of range: it must be a finite number in [%g, %g%s", reals[i].name, v,
                             reals[i].low, reals[i].high, reals[i].high_exclusive ? ")" : "]");
    }
    if (p->learning_rate <= 0)
        return mfm__fail(err, MFM_ERR_INVALID_PARAM, "params.learning_rate = %g must be positive", p->learning_rate);
    if (p->optimizer != MFM_OPTIMIZER_FTRL && (p->l1_linear != 0 || p->l1_factors != 0))
        return mfm__fail(err, MFM_ERR_INVALID_PARAM, "params.%s = %g needs the FTRL optimizer: %s does not take L1",
                         p->l1_linear != 0 ? "l1_linear" : "l1_factors", p->l1_linear != 0 ? p->l1_linear : p->l1_factors,
                         mfm__optimizer_names[p->optimizer]);
    if (p->task == MFM_TASK_REGRESSION && p->label_smoothing != 0)
        return mfm__fail(err, MFM_ERR_INVALID_PARAM, "params.label_smoothing = %g applies to classification only, not regression", p->label_smoothing);
    if (p->task == MFM_TASK_REGRESSION && p->class_weight != MFM_CLASS_WEIGHT_NONE)
        return mfm__fail(err, MFM_ERR_INVALID_PARAM, "params.class_weight applies to classification only, not regression");
    if (p->task == MFM_TASK_MULTICLASS && n_classes < 2)
        return mfm__fail(err, MFM_ERR_INVALID_PARAM, "a multiclass model needs at least 2 classes, got %u", (unsigned)n_classes);
    if (p->class_weight == MFM_CLASS_WEIGHT_EXPLICIT) {
        uint32_t c, count = p->task == MFM_TASK_BINARY ? 2 : n_classes;
        double total = 0;
        if (!p->class_weights)
            return mfm__fail(err, MFM_ERR_INVALID_PARAM, "params.class_weight is explicit but params.class_weights is NULL (it needs %u values)", (unsigned)count);
        for (c = 0; c < count; c++) {
            float w = p->class_weights[c];
            if (!mfm__finite(w) || w < 0)
                return mfm__fail(err, MFM_ERR_INVALID_PARAM, "params.class_weights[%u] = %g must be finite and >= 0", (unsigned)c, (double)w);
            total += w;
        }
        if (total == 0) return mfm__fail(err, MFM_ERR_INVALID_PARAM, "params.class_weights are all zero");
    }
    return MFM_OK;
}

/* ============================================================================================
   >>model  The parameter tables and their optimizer state
   ============================================================================================

   Every tensor is a table of blocks. A block is `len` parameters followed by the optimizer state
   of those parameters, slot by slot: [theta x len][state1 x len][state2 x len]... so that a
   coordinate's parameters and state share cache lines. W0 and W and R have len 1; V blocks have
   len k (FM/FwFM: one block per feature; FFM: one per (feature, field)). Classes are stored one
   after the other: block b of class c is block c * n_blocks + b.

   FM and FwFM read a feature's w and v together. Where both blocks fit one cache line, W is a
   guest of V: each V block is followed by the feature's W block, the pair padded to a power of
   two floats, so that a feature costs one line, not two (mfm__guest_stride). Code that walks
   blocks (mfm__block) sees no difference; code that copies whole tables copies the host's
   (mfm__table_bytes), which holds the guest's too.

   FFM's F blocks of a feature lie side by side, a record of F x stride floats. A float16 file
   mapped for serving (mfm_model_save_half) pads each record to whole lines with w inside, after
   the F blocks (mfm__half_record): a row's feature then costs its factors' lines and no other. */

typedef struct mfm__table {
    float *data;       /* 64-byte aligned (mfm__table_alloc); a guest's: its host's data + a host block's floats */
    void *allocation;  /* what data lies in; NULL for a guest */
    uint64_t n_blocks; /* per class */
    uint32_t len;
    uint32_t state_len; /* floats of each state slot of a block: len, or 1 (row-wise AdaGrad's one accumulator) */
    uint32_t stride;   /* floats from a block to the next: len + state_len * state slots, or the host's */
    int guest;         /* W only: its blocks lie in V's */
    const uint16_t *halves; /* instead of data: the parameters as IEEE float16, where a model maps
                               mfm_model_save_half's file (V, and W inside it); data is NULL then */
    uint32_t per_feature;    /* FFM's V: F, the blocks of a feature's record, side by side; other tables 1 */
    uint64_t feature_stride; /* values from a feature's record to the next's: per_feature x stride,
                                or more in a float16 file's padded records (mfm__half_record) */
} mfm__table;

struct mfm_model {
    mfm_params params; /* resolved; class_weights points at class_weight_values, devices at device_list */
    float *class_weight_values;
    int device_list[MFM_MAX_DEVICES];
    uint32_t n_features, n_fields, n_classes;
    int k;
    int n_slots; /* 1 + optimizer state slots */
    uint64_t epochs_trained;
    int has_state; /* 0 after loading a file saved without the optimizer state, until a fit */
    mfm__table t[MFM_TENSOR_COUNT];
    int wide;          /* eight lanes where the CPU has them (mfm__use_avx, asked at creation) */
    int f16c;          /* float16 factors widen eight at a time (mfm__f16c, asked at creation) */
    uint64_t *pair_id; /* FwFM: [fa * F + fb], either order: the block of r(fa, fb) in a class's R (its upper triangle) */
    int for_prediction;  /* opened by mfm_model_map: the parameters only (n_slots 1), never written */
    mfm__mapping file;   /* the model file whose parameters the tables lie in, when mapped */
};

static int mfm__state_slots(mfm_optimizer o) {
    switch (o) {
    case MFM_OPTIMIZER_ADAGRAD:
    case MFM_OPTIMIZER_ROWWISE_ADAGRAD:
        return 1;
    case MFM_OPTIMIZER_ADAM:
        return 3;
    case MFM_OPTIMIZER_FTRL:
        return 2;
    default:
        return 0;
    }
}

static float *mfm__block(const mfm_model *m, mfm_tensor t, uint32_t cls, uint64_t b) {
    const mfm__table *tab = &m->t[t];
    return tab->data + (cls * tab->n_blocks + b) * tab->stride;
}

/* Slot `slot` of a block: the parameters (0, len floats), then each state slot (state_len). */
static float *mfm__block_slot(const mfm_model *m, mfm_tensor t, uint32_t cls, uint64_t b, int slot) {
    const mfm__table *tab = &m->t[t];
    return mfm__block(m, t, cls, b) + (slot ? tab->len + (uint32_t)(slot - 1) * tab->state_len : 0);
}

static uint32_t mfm__slot_len(const mfm__table *tab, int slot) { return slot ? tab->state_len : tab->len; }

/* The floats of a table's own memory, blocks x classes x stride, saturating so that an
   impossible size fails to allocate: a guest has none (its blocks are its host's). */
static uint64_t mfm__table_floats(const mfm__table *tab, uint32_t n_classes) {
    const uint64_t blocks = tab->n_blocks && n_classes > UINT64_MAX / tab->n_blocks ? UINT64_MAX : tab->n_blocks * n_classes;
    if (tab->guest) return 0;
    { /* records of per_feature blocks (FFM's V: F), feature_stride values apart */
        const uint64_t records = blocks / tab->per_feature;
        return records && tab->feature_stride > UINT64_MAX / records ? UINT64_MAX : records * tab->feature_stride;
    }
}

/* The bytes a whole-table copy takes (clone, snapshot, the GPU's tables); a table of halves, half. */
static size_t mfm__table_bytes(const mfm_model *m, int t) {
    return (size_t)mfm__table_floats(&m->t[t], m->n_classes) * (m->t[t].halves ? sizeof(uint16_t) : sizeof(float));
}

/* ---- float16 parameters (mfm_model_save_half): every half is a float exactly ---- */

static float mfm__half_to_float(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1Fu, frac = h & 0x3FFu;
    uint32_t bits;
    float f;
    if (exp == 0x1F) {
        bits = sign | 0x7F800000u | frac << 13; /* infinity, NaN */
    } else if (exp) {
        bits = sign | (exp + 112) << 23 | frac << 13;
    } else { /* zero, or a subnormal: frac x 2^-24, exact in a float */
        f = (float)frac * (1.0f / 16777216.0f);
        return sign ? -f : f;
    }
    memcpy(&f, &bits, 4);
    return f;
}

/* The nearest half, ties to even; a finite float beyond 65504 rounds to infinity (the saver
   refuses such a model before this runs). */
static uint16_t mfm__float_to_half(float f) {
    uint32_t bits, sign, exp, mant;
    memcpy(&bits, &f, 4);
    sign = (bits >> 16) & 0x8000u, exp = (bits >> 23) & 0xFFu, mant = bits & 0x7FFFFFu;
    if (exp == 0xFF) return (uint16_t)(sign | 0x7C00u | (mant ? 0x200u : 0u));
    if (exp > 142) return (uint16_t)(sign | 0x7C00u); /* 2^16 and beyond */
    if (exp >= 113) {                                 /* a normal half: drop 13 bits, to nearest even */
        const uint32_t half = (exp - 112) << 10 | mant >> 13, rest = mant & 0x1FFFu;
        return (uint16_t)(sign | (half + (rest > 0x1000u || (rest == 0x1000u && (half & 1u))))); /* a carry reaches the exponent, as it should */
    }
    if (exp < 102) return (uint16_t)sign; /* below half the smallest subnormal: zero */
    {                                     /* a subnormal half: the 24-bit mantissa shifted right */
        const uint32_t m24 = mant | 0x800000u, shift = 126 - exp, q = m24 >> shift, rest = m24 & ((1u << shift) - 1u), tie = 1u << (shift - 1);
        return (uint16_t)(sign | (q + (rest > tie || (rest == tie && (q & 1u)))));
    }
}

#if defined(MFM__SSE2) && (defined(__GNUC__) || defined(__clang__)) && !defined(MFM_NO_AVX)
#include <immintrin.h>
#include <cpuid.h>
#define MFM__F16C 1
__attribute__((target("avx,f16c"))) static void mfm__halves_f16c(const uint16_t *h, float *f, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(f + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(h + i))));
    for (; i < n; i++) f[i] = mfm__half_to_float(h[i]);
}
#endif

static int mfm__use_avx(void); /* >>score */

/* Whether this CPU converts halves eight at a time (F16C: CPUID 1, ECX bit 29); asked as a
   model is made (mfm_model's f16c). */
static int mfm__f16c(void) {
#if defined(MFM__F16C)
    unsigned a, b, c, d;
    return mfm__use_avx() && __get_cpuid(1, &a, &b, &c, &d) && (c >> 29 & 1u);
#else
    return 0;
#endif
}

static void mfm__halves_to_floats(const uint16_t *h, float *f, size_t n, int f16c) {
    size_t i;
#if defined(MFM__F16C)
    if (f16c) {
        mfm__halves_f16c(h, f, n);
        return;
    }
#endif
    (void)f16c;
    for (i = 0; i < n; i++) f[i] = mfm__half_to_float(h[i]);
}

/* The parameters (slot 0) of blocks b .. b + n - 1 of tensor t, class c, into out (n x len
   floats): the table's own floats, or its halves widened; one run where the blocks lie side by
   side (parameters only, stride len), a float16 FFM file's within a feature's record. */
static void mfm__block_params(const mfm_model *m, mfm_tensor t, uint32_t c, uint64_t b, uint64_t n, float *out) {
    const mfm__table *tab = &m->t[t];
    uint64_t i, run;
    for (i = 0; i < n; i += run, out += run * tab->len) {
        const uint64_t at = c * tab->n_blocks + b + i, in_record = at % tab->per_feature; /* the block's place among all classes' */
        run = tab->stride != tab->len ? 1 : n - i;
        if (tab->halves && run > tab->per_feature - in_record) run = tab->per_feature - in_record; /* a padded record ends the run */
        if (tab->halves)
            mfm__halves_to_floats(tab->halves + at / tab->per_feature * tab->feature_stride + in_record * tab->stride, out, (size_t)(run * tab->len), m->f16c);
        else
            memcpy(out, mfm__block(m, t, c, b + i), (size_t)(run * tab->len) * sizeof(float));
    }
}

MFMDEF void mfm_model_free(mfm_model *model) {
    int t;
    if (!model) return;
    for (t = 0; t < MFM_TENSOR_COUNT; t++) MFM_FREE(model->t[t].allocation);
    mfm__unmap(&model->file);
    MFM_FREE(model->pair_id);
    MFM_FREE(model->class_weight_values);
    MFM_FREE(model);
}

/* ---- A model's first values: zeros, V's draws, R's ones, the optimizer's start ----
   The pool's threads fill the tables, each a run of whole chunks of MFM__DRAW_CHUNK blocks:
   one thread took 3 s to create FFM over 10^6 features and 39 fields (1.2 GB, most of it the
   kernel zeroing pages), and on a machine of several NUMA nodes the pages of one thread's
   writes all lie on its node, where training then reads them from every core. V's chunk c is
   drawn from the generator's stream (seed, c), so the values do not depend on the threads. */
#define MFM__DRAW_CHUNK 4096

enum { MFM__FILL_ZERO = 1, MFM__FILL_DRAW = 2, MFM__FILL_STATE = 4 };

typedef struct mfm__fill_job {
    mfm_model *m;
    int what; /* MFM__FILL_* */
    int n_workers;
} mfm__fill_job;

/* V's parameters of blocks [b, end), the chunk b / MFM__DRAW_CHUNK starts at b. */
static void mfm__draw_chunk(mfm_model *m, uint64_t b, uint64_t end) {
    mfm__rng rng = mfm__rng_seed(m->params.seed, MFM__STREAM_INIT, b / MFM__DRAW_CHUNK);
    const mfm__table *v = &m->t[MFM_TENSOR_V];
    const double scale = m->params.init_scale, high = scale / sqrt((double)m->k);
    uint32_t t;
    for (; b < end; b++) {
        float *blk = v->data + b * v->stride;
        for (t = 0; t < v->len; t++) {
            if (m->params.model == MFM_MODEL_FFM) {
                float u = (float)(mfm__rng_unit(&rng) * high);
                blk[t] = u < (float)high ? u : 0.0f; /* float rounding must not reach the open end */
            } else {
                blk[t] = (float)(mfm__rng_normal(&rng) * scale);
            }
        }
    }
}

/* Worker `index`'s chunks of every table: zeroed and drawn first, then the state, so that a
   guest's state (W's in V's blocks, the same worker's blocks) is not zeroed after it is set. */
static void mfm__fill_task(void *ctx, int index) {
    const mfm__fill_job *j = (const mfm__fill_job *)ctx;
    mfm_model *m = j->m;
    int pass, t;
    for (pass = 0; pass < 2; pass++)
        for (t = 0; t < MFM_TENSOR_COUNT; t++) {
            const mfm__table *tab = &m->t[t];
            const uint64_t nb = tab->n_blocks * m->n_classes;
            uint64_t lo, hi, b;
            uint32_t i;
            mfm__share((nb + MFM__DRAW_CHUNK - 1) / MFM__DRAW_CHUNK, j->n_workers, index, &lo, &hi);
            lo *= MFM__DRAW_CHUNK, hi = hi * MFM__DRAW_CHUNK < nb ? hi * MFM__DRAW_CHUNK : nb;
            if (hi <= lo) continue;
            if (pass == 0) {
                if ((j->what & MFM__FILL_ZERO) && !tab->guest) memset(tab->data + lo * tab->stride, 0, (size_t)((hi - lo) * tab->stride) * sizeof(float));
                for (b = lo; (j->what & MFM__FILL_DRAW) && t == MFM_TENSOR_V && b < hi; b += MFM__DRAW_CHUNK) mfm__draw_chunk(m, b, b + MFM__DRAW_CHUNK < hi ? b + MFM__DRAW_CHUNK : hi);
                for (b = lo; (j->what & MFM__FILL_DRAW) && t == MFM_TENSOR_R && b < hi; b++) tab->data[b * tab->stride] = 1.0f; /* FwFM's R starts at one */
                continue;
            }
            for (b = lo; (j->what & MFM__FILL_STATE) && b < hi; b++) { /* zero, AdaGrad's accumulator at adagrad_init */
                float *state = tab->data + b * tab->stride + tab->len;
                memset(state, 0, (size_t)tab->state_len * (size_t)(m->n_slots - 1) * sizeof(float));
                if (mfm__adagrad_kind(m->params.optimizer))
                    for (i = 0; i < tab->state_len; i++) state[i] = (float)m->params.adagrad_init;
            }
        }
}

/* Fills what `what` asks of the tables, on up to params.n_threads threads (none for less than
   4 MB a thread). */
static void mfm__fill_tables(mfm_model *m, int what) {
    mfm__fill_job j;
    uint64_t bytes = 0;
    int t;
    for (t = 0; t < MFM_TENSOR_COUNT; t++) bytes += mfm__table_floats(&m->t[t], m->n_classes) * sizeof(float);
    j.m = m, j.what = what, j.n_workers = mfm__workers_for_bytes(bytes, m->params.n_threads);
    mfm__run_shares(mfm__fill_task, &j, j.n_workers);
}

MFMDEF void mfm_model_reset_state(mfm_model *m) {
    if (!m || m->for_prediction) return; /* no state to reset (mfm_model_map) */
    mfm__fill_tables(m, MFM__FILL_STATE);
    m->has_state = 1;
}

/* A table of `floats` floats, zeroed unless the caller fills it (`zeroed` 0), 64-byte aligned so
   that a block of k = 4 (AdaGrad: 32 bytes) never splits lines; a table of 2 MB or more starts on
   a 2 MB boundary and asks for huge pages (mfm__ask_huge_pages). NULL when memory is short. */
static float *mfm__table_alloc(uint64_t floats, int zeroed, void **allocation) {
    const uint64_t huge = MFM__HUGE_PAGE, align = floats * sizeof(float) >= huge ? huge : 64;
    char *p;
    *allocation = floats < (UINT64_MAX - align) / sizeof(float) ? mfm__alloc(floats * sizeof(float) + align, 1) : NULL;
    if (!*allocation) return NULL;
    p = (char *)*allocation + (align - (uintptr_t)*allocation % align) % align;
    if (align == huge) mfm__ask_huge_pages(p, floats * sizeof(float));
    if (zeroed) memset(p, 0, floats * sizeof(float));
    return (float *)p;
}

static int mfm__use_avx(void); /* >>score */

/* The stride of V's blocks with W's as guests (>>model, above), or 0 where they do not share:
   FFM (V per feature and field), linear-only models (no V to read), or a pair longer than a line.
   Tests build a second copy of the library with MFM__W_GUEST 0, to check that both layouts
   train to the same bits. */
#ifndef MFM__W_GUEST
#define MFM__W_GUEST 1
#endif
/* The floats of each state slot of a block of `len` parameters: one per parameter, or row-wise
   AdaGrad's one accumulator. The tables' shapes, the files' state and their checks all ask here. */
static uint32_t mfm__state_len(mfm_optimizer o, uint32_t len) { return o == MFM_OPTIMIZER_ROWWISE_ADAGRAD ? 1u : len; }

/* The floats of one block of `len` parameters and its n_slots - 1 state slots. */
static uint32_t mfm__block_floats(const mfm_params *p, uint32_t len, int n_slots) {
    return len + mfm__state_len(p->optimizer, len) * (uint32_t)(n_slots - 1);
}

static uint32_t mfm__guest_stride(const mfm_params *p, int n_slots) {
    const uint32_t pair = mfm__block_floats(p, (uint32_t)p->k, n_slots) + mfm__block_floats(p, 1, n_slots);
    uint32_t stride = 1;
    if (!MFM__W_GUEST || p->model == MFM_MODEL_FFM || p->linear_only || pair > 16) return 0;
    while (stride < pair) stride *= 2;
    return stride;
}

/* The shapes of a model's tables, before any memory: blocks per class, len, stride, guest. */
static void mfm__shape_tables(const mfm_params *p, uint32_t n_features, uint32_t n_fields, int n_slots, mfm__table *tab) {
    const uint32_t guest_stride = mfm__guest_stride(p, n_slots);
    int t;
    memset(tab, 0, MFM_TENSOR_COUNT * sizeof *tab);
    tab[MFM_TENSOR_W0].n_blocks = 1;
    tab[MFM_TENSOR_W].n_blocks = n_features;
    tab[MFM_TENSOR_V].n_blocks = p->model == MFM_MODEL_FFM ? (uint64_t)n_features * n_fields : n_features;
    tab[MFM_TENSOR_R].n_blocks = p->model == MFM_MODEL_FWFM ? (uint64_t)n_fields * n_fields : 0;
    for (t = 0; t < MFM_TENSOR_COUNT; t++) {
        tab[t].len = t == MFM_TENSOR_V ? (uint32_t)p->k : 1;
        tab[t].state_len = mfm__state_len(p->optimizer, tab[t].len);
        tab[t].stride = guest_stride && (t == MFM_TENSOR_V || t == MFM_TENSOR_W) ? guest_stride : mfm__block_floats(p, tab[t].len, n_slots);
        tab[t].per_feature = t == MFM_TENSOR_V && p->model == MFM_MODEL_FFM && n_fields ? n_fields : 1;
        tab[t].feature_stride = (uint64_t)tab[t].per_feature * tab[t].stride;
    }
    tab[MFM_TENSOR_W].guest = guest_stride != 0;
}

/* The halves of an FFM feature's record in a float16 file: its F blocks of k, then w, padded to
   a power of two up to a line (64 bytes), else to whole lines, so that no record straddles more
   lines than it fills. */
static uint64_t mfm__half_record(uint32_t n_fields, int k) {
    const uint64_t need = (uint64_t)n_fields * (uint64_t)k + 1;
    uint64_t record = 1;
    if (need > 32) return (need + 31) / 32 * 32;
    while (record < need) record *= 2;
    return record;
}

/* W's blocks inside V's (>>model, above): after V's k values and their state, or after the F
   blocks of an FFM record (a float16 file's); floats, or the halves of a mapped float16 file. */
static void mfm__place_guest(mfm_model *m) {
    mfm__table *V = &m->t[MFM_TENSOR_V], *W = &m->t[MFM_TENSOR_W];
    const uint64_t at = m->params.model == MFM_MODEL_FFM ? (uint64_t)V->per_feature * V->stride : V->len + V->state_len * (uint64_t)(m->n_slots - 1); /* the record's blocks */
    if (!W->guest) return;
    if (V->data) W->data = V->data + at;
    if (V->halves) W->halves = V->halves + at;
}

/* A model of a checked shape (p resolved and validated) whose tables hold n_slots slots a block:
   1 + the optimizer's for training, 1 for a model opened for prediction (parameters only).
   With `allocate`, the tables get memory of their own, zeroed (MFM__TABLES_ZEROED) or left for
   mfm__fill_tables (MFM__TABLES_UNFILLED); without, a mapped file gives it (mfm_model_map).
   Parameters and state are not drawn: the caller fills them. */
/* The model keeps its own list of the GPUs it trains on (validated already); p->devices then
   points at it. */
static void mfm__adopt_devices(mfm_model *m, mfm_params *p) {
    int i;
    if (p->n_devices < 2) {
        p->devices = NULL;
        return;
    }
    for (i = 0; i < p->n_devices; i++) m->device_list[i] = p->devices ? p->devices[i] : i;
    p->devices = m->device_list;
}

enum { MFM__TABLES_MAPPED, MFM__TABLES_ZEROED, MFM__TABLES_UNFILLED };

static mfm_status mfm__model_new(const mfm_params *params, uint32_t n_features, uint32_t n_fields, uint32_t n_classes, int n_slots, int allocate,
                                 mfm_model **out, mfm_error *err) {
    mfm_params p = *params;
    mfm_model *m;
    int t;
    *out = NULL;
    m = (mfm_model *)mfm__calloc(1, sizeof *m);
    if (!m) return mfm__fail(err, MFM_ERR_OUT_OF_MEMORY, "out of memory for a model");
    m->n_features = n_features;
    m->n_fields = n_fields;
    m->n_classes = n_classes;
    m->k = p.k;
    m->n_slots = n_slots;
    mfm__shape_tables(&p, n_features, n_fields, m->n_slots, m->t);
    for (t = 0; t < MFM_TENSOR_COUNT && allocate; t++) {
        mfm__table *tab = &m->t[t];
        const uint64_t floats = mfm__table_floats(tab, n_classes);
        if (tab->guest) continue; /* placed in V's blocks, below */
        tab->data = mfm__table_alloc(floats, allocate == MFM__TABLES_ZEROED, &tab->allocation);
        if (!tab->allocation) {
            mfm_model_free(m);
            return mfm__fail(err, MFM_ERR_OUT_OF_MEMORY, "out of memory for the %s tensor of a %s model (%" PRIu64 " floats)",
                             t == MFM_TENSOR_V ? "V" : t == MFM_TENSOR_R ? "R" : "W", mfm__model_names[p.model], floats);
        }
    }
    if (allocate) mfm__place_guest(m);
    if (p.model == MFM_MODEL_FWFM) { /* a pair's weight is then one lookup, without ordering its fields */
        uint64_t fa, fb;
        if (!(m->pair_id = (uint64_t *)mfm__alloc((uint64_t)n_fields * n_fields, sizeof(uint64_t)))) {
            mfm_model_free(m);
            return mfm__fail(err, MFM_ERR_OUT_OF_MEMORY, "out of memory for the field pairs of a FwFM model");
        }
        for (fa = 0; fa < n_fields; fa++)
            for (fb = 0; fb < n_fields; fb++) m->pair_id[fa * n_fields + fb] = fa < fb ? fa * n_fields + fb : fb * n_fields + fa;
    }
    if (p.class_weight == MFM_CLASS_WEIGHT_EXPLICIT) {
        uint32_t count = p.task == MFM_TASK_BINARY ? 2 : n_classes;
        m->class_weight_values = (float *)mfm__alloc(count, sizeof(float));
        if (!m->class_weight_values) {
            mfm_model_free(m);
            return mfm__fail(err, MFM_ERR_OUT_OF_MEMORY, "out of memory for class weights");
        }
        memcpy(m->class_weight_values, p.class_weights, count * sizeof(float));
        p.class_weights = m->class_weight_values;
    } else {
        p.class_weights = NULL;
    }
    mfm__adopt_devices(m, &p);
    m->params = p;
    m->has_state = n_slots > 1 || mfm__state_slots(p.optimizer) == 0;
    m->wide = mfm__use_avx();
    m->f16c = mfm__f16c();
    *out = m;
    return MFM_OK;
}

MFMDEF mfm_status mfm_model_create(const mfm_params *params, uint32_t n_features, uint32_t n_fields, uint32_t n_classes,
                                   mfm_model **out, mfm_error *err) {
    mfm_params p = mfm_params_resolve(params);
    mfm_status st;
    if (!out) return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "mfm_model_create: the output pointer is NULL");
    *out = NULL;
    if (p.task != MFM_TASK_MULTICLASS) n_classes = 1;
    st = mfm__validate_params(&p, n_classes, err);
    if (st) return st;
    if (p.model == MFM_MODEL_FM) n_fields = 0;
    if (p.model != MFM_MODEL_FM && n_fields == 0)
        return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "a %s model needs at least one field, got n_fields = 0", mfm__model_names[p.model]);
    if ((st = mfm__model_new(&p, n_features, n_fields, n_classes, 1 + mfm__state_slots(p.optimizer), MFM__TABLES_UNFILLED, out, err)) != MFM_OK) return st;
    mfm__fill_tables(*out, MFM__FILL_ZERO | MFM__FILL_DRAW | (p.adagrad_init != 0 ? MFM__FILL_STATE : 0)); /* MFM_ZERO (-0) keeps the zeros' +0 */
    return mfm__ok(err);
}

MFMDEF mfm_status mfm_model_set_threads(mfm_model *m, int n_threads, mfm_error *err) {
    if (!m) return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "mfm_model_set_threads: the model is NULL");
    if (n_threads < 0 || n_threads > 1024)
        return mfm__fail(err, MFM_ERR_INVALID_PARAM, "n_threads = %d must be between 0 (every core) and 1024", n_threads);
    m->params.n_threads = n_threads;
    return mfm__ok(err);
}

MFMDEF mfm_status mfm_model_set_params(mfm_model *m, const mfm_params *params, mfm_error *err) {
    mfm_params p = mfm_params_resolve(params), *q;
    float *weights = NULL;
    mfm_status st;
    if (!m || !params) return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "mfm_model_set_params: the model or the params are NULL");
    q = &m->params;
    if (p.task == MFM_TASK_MULTICLASS && p.n_classes == 0) p.n_classes = (int)m->n_classes;
#define MFM__SAME(field)                                                                                                            \
    if (p.field != q->field)                                                                                                        \
        return mfm__fail(err, MFM_ERR_INVALID_PARAM, "mfm_model_set_params: params." #field " shapes the model and cannot change (%g to %g)", \
                         (double)q->field, (double)p.field);
    MFM__SAME(model) MFM__SAME(task) MFM__SAME(optimizer) MFM__SAME(k) MFM__SAME(linear_only) MFM__SAME(pairs_only) MFM__SAME(normalize_rows)
    if (p.task == MFM_TASK_MULTICLASS && (uint32_t)p.n_classes != m->n_classes)
        return mfm__fail(err, MFM_ERR_INVALID_PARAM, "mfm_model_set_params: params.n_classes shapes the model and cannot change (%u to %d)",
                         (unsigned)m->n_classes, p.n_classes);
#undef MFM__SAME
    if ((st = mfm__validate_params(&p, m->n_classes, err)) != MFM_OK) return st;
    if (p.class_weight == MFM_CLASS_WEIGHT_EXPLICIT) { /* the model keeps its own copy */
        uint32_t count = p.task == MFM_TASK_BINARY ? 2 : m->n_classes;
        if (!(weights = (float *)mfm__alloc(count, sizeof(float)))) return mfm__fail(err, MFM_ERR_OUT_OF_MEMORY, "out of memory for class weights");
        memcpy(weights, p.class_weights, count * sizeof(float));
    }
    MFM_FREE(m->class_weight_values);
    m->class_weight_values = weights;
    p.class_weights = weights;
    p.n_classes = q->n_classes;
    mfm__adopt_devices(m, &p);
    *q = p;
    return mfm__ok(err);
}

MFMDEF mfm_status mfm_model_clone(const mfm_model *m, mfm_model **out, mfm_error *err) {
    mfm_model *c;
    mfm_status st;
    int t;
    if (!m || !out) return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "mfm_model_clone: the model or the output pointer is NULL");
    *out = NULL;
    /* tables of the same shape, not drawn: every parameter is copied (a model opened for
       prediction gives its parameters; the state starts as mfm_model_create's) */
    if ((st = mfm__model_new(&m->params, m->n_features, m->n_fields, m->n_classes, 1 + mfm__state_slots(m->params.optimizer), MFM__TABLES_ZEROED, &c, err)) != MFM_OK) return st;
    if (m->for_prediction && m->params.adagrad_init != 0) mfm__fill_tables(c, MFM__FILL_STATE);
    for (t = 0; t < MFM_TENSOR_COUNT; t++) {
        uint64_t b, nb = m->t[t].n_blocks * m->n_classes;
        if (!m->for_prediction) {
            memcpy(c->t[t].data, m->t[t].data, mfm__table_bytes(m, t));
            continue;
        }
        for (b = 0; b < nb; b++) mfm__block_params(m, (mfm_tensor)t, 0, b, 1, mfm__block(c, (mfm_tensor)t, 0, b)); /* the state stays at its start */
    }
    c->epochs_trained = m->epochs_trained;
    c->has_state = m->has_state;
    *out = c;
    return mfm__ok(err);
}

MFMDEF void mfm_model_get_info(const mfm_model *m, mfm_model_info *out) {
    int t;
    if (!out) return;
    memset(out, 0, sizeof *out);
    if (!m) return;
    out->model = m->params.model;
    out->task = m->params.task;
    out->optimizer = m->params.optimizer;
    out->n_features = m->n_features;
    out->n_fields = m->n_fields;
    out->n_classes = m->n_classes;
    out->k = m->k;
    out->n_state_slots = m->n_slots - 1;
    out->epochs_trained = m->epochs_trained;
    out->has_state = m->has_state;
    for (t = 0; t < MFM_TENSOR_COUNT; t++) {
        out->n_parameters += m->t[t].n_blocks * m->t[t].len * m->n_classes;
        out->memory_bytes += mfm__table_bytes(m, t);
    }
}

MFMDEF const mfm_params *mfm_model_params(const mfm_model *m) { return m ? &m->params : NULL; }

MFMDEF size_t mfm_tensor_size(const mfm_model *m, mfm_tensor t) { return mfm_tensor_slot_size(m, t, 0); }

MFMDEF size_t mfm_tensor_slot_size(const mfm_model *m, mfm_tensor t, int slot) {
    if (!m || (unsigned)t >= MFM_TENSOR_COUNT || slot < 0 || slot >= m->n_slots) return 0;
    return (size_t)(m->t[t].n_blocks * mfm__slot_len(&m->t[t], slot));
}

/* The refusal of every call that would write a model opened for prediction. */
static mfm_status mfm__read_only(const char *fn, mfm_error *err) {
    return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT,
                     "%s: the model was opened for prediction (mfm_model_map, mfm_model_load_parameters): its parameters are read-only and it keeps no optimizer state; "
                     "open the file with mfm_model_load to train it or change it",
                     fn);
}

/* The refusal of the inspections that read a model's factors in place, where they are float16. */
static mfm_status mfm__half_refused(const char *fn, mfm_error *err) {
    return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT,
                     "%s: the model's factors are float16 (a file of mfm_model_save_half, mapped); open it with mfm_model_load, or use the float32 model", fn);
}

/* Shared checks and the copy loop of mfm_model_get_tensor / mfm_model_set_tensor. */
static mfm_status mfm__tensor_copy(const mfm_model *m, mfm_tensor t, int slot, uint32_t cls, float *user, size_t count,
                                   int to_model, mfm_error *err) {
    const char *fn = to_model ? "mfm_model_set_tensor" : "mfm_model_get_tensor";
    const mfm__table *tab;
    uint64_t b;
    if (!m || !user) return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "%s: the model or the buffer is NULL", fn);
    if ((unsigned)t >= MFM_TENSOR_COUNT) return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "%s: tensor %d is not a known tensor", fn, (int)t);
    tab = &m->t[t];
    if (to_model && m->for_prediction) return mfm__read_only(fn, err);
    if (slot > 0 && m->for_prediction)
        return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "%s: slot %d: a model opened for prediction (mfm_model_map, mfm_model_load_parameters) holds its parameters only (slot 0)", fn, slot);
    if (slot < 0 || slot >= m->n_slots)
        return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "%s: slot %d does not exist: %s keeps %d state slot(s) besides the parameter (slot 0)", fn,
                         slot, mfm__optimizer_names[m->params.optimizer], m->n_slots - 1);
    if (cls >= m->n_classes)
        return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "%s: class %u does not exist: the model has %u class(es)", fn, (unsigned)cls, (unsigned)m->n_classes);
    if ((uint64_t)count != tab->n_blocks * mfm__slot_len(tab, slot))
        return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "%s: count = %" PRIu64 " but the tensor's slot %d holds %" PRIu64 " values per class", fn,
                         (uint64_t)count, slot, tab->n_blocks * mfm__slot_len(tab, slot));
    if (to_model) {
        size_t i;
        for (i = 0; i < count; i++)
            if (!mfm__finite(user[i])) return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "%s: value %" PRIu64 " is not finite", fn, (uint64_t)i);
    }
    for (b = 0; b < tab->n_blocks; b++) {
        const uint32_t n = mfm__slot_len(tab, slot);
        float *u = user + b * n;
        if (to_model)
            memcpy(mfm__block_slot(m, t, cls, b, slot), u, n * sizeof(float));
        else if (slot == 0)
            mfm__block_params(m, t, cls, b, 1, u);
        else
            memcpy(u, mfm__block_slot(m, t, cls, b, slot), n * sizeof(float));
    }
    return mfm__ok(err);
}

MFMDEF mfm_status mfm_model_get_tensor(const mfm_model *m, mfm_tensor t, int slot, uint32_t cls, float *out, size_t count, mfm_error *err) {
    return mfm__tensor_copy(m, t, slot, cls, out, count, 0, err);
}

MFMDEF mfm_status mfm_model_set_tensor(mfm_model *m, mfm_tensor t, int slot, uint32_t cls, const float *in, size_t count, mfm_error *err) {
    return mfm__tensor_copy(m, t, slot, cls, (float *)in, count, 1, err); /* only read from */
}

/* ============================================================================================
   >>data  Checking a borrowed CSR view before anything touches the model
   ============================================================================================ */

/* A dataset read by the library; a view of it (mfm_dataset_csr) points back here (origin), so
   that a message about a row names its file and line. */
struct mfm_dataset {
    mfm_csr csr;
    mfm_dataset_info info;
    mfm__mapping mapping;
    void *owned[6]; /* offsets, labels, weights, features, fields, values (or a binary copy) */
    char *name;     /* the file (or the name given to mfm_dataset_parse), for messages */
    /* Text only: for each blank line, how many rows came before it, ascending; row r (0-based)
       is then on line r + 1 + (blank lines before it). NULL when the text had none. */
    uint64_t *blank_before, n_blank;
};

/* Where row r (0-based) of a view came from, for a message: "te.ffm:7" (the file and the row's
   1-based line), "te.mfmd, row 7" (a binary file), or "row 7 (1-based)" (the caller's arrays). */
static const char *mfm__row_at(const mfm_csr *d, uint64_t r, char *buf, size_t size) {
    const mfm_dataset *ds = d ? d->origin : NULL;
    if (ds && ds->name && ds->info.format != MFM_FORMAT_BINARY) {
        uint64_t lo = 0, hi = ds->n_blank; /* blank lines before row r: entries <= r */
        while (lo < hi) {
            const uint64_t mid = lo + (hi - lo) / 2;
            if (ds->blank_before[mid] <= r)
                lo = mid + 1;
            else
                hi = mid;
        }
        snprintf(buf, size, "%s:%" PRIu64, ds->name, r + 1 + lo);
    } else if (ds && ds->name) {
        snprintf(buf, size, "%s, row %" PRIu64, ds->name, r + 1);
    } else {
        snprintf(buf, size, "row %" PRIu64 " (1-based)", r + 1);
    }
    return buf;
}

typedef struct mfm__data_info {
    uint64_t nnz;
    uint32_t max_row_nnz;
    uint32_t n_features, n_fields;  /* max id + 1 seen in the data (0 when none) */
    uint64_t feature_row, field_row; /* a row where that largest id occurs */
} mfm__data_info;

/* The largest of ids [lo, hi) (hi > lo), and where it first occurs. */
static uint32_t mfm__largest_id(const uint32_t *ids, uint64_t lo, uint64_t hi, uint64_t *first) {
    uint64_t j;
    uint32_t top = 0, t[4] = {0, 0, 0, 0};
    for (j = lo; j + 4 <= hi; j += 4) { /* four independent branch-free maxima */
        t[0] = ids[j] > t[0] ? ids[j] : t[0];
        t[1] = ids[j + 1] > t[1] ? ids[j + 1] : t[1];
        t[2] = ids[j + 2] > t[2] ? ids[j + 2] : t[2];
        t[3] = ids[j + 3] > t[3] ? ids[j + 3] : t[3];
    }
    for (; j < hi; j++) top = ids[j] > top ? ids[j] : top;
    for (j = 0; j < 4; j++) top = t[j] > top ? t[j] : top;
    for (j = lo; ids[j] != top; j++) {
    }
    *first = j;
    return top;
}

/* The row that holds non-zero j: the last row starting at or before j (empty rows start there
   too, earlier). */
static uint64_t mfm__row_of(const mfm_csr *d, uint64_t j) {
    uint64_t lo = 0, hi = d->n_rows;
    while (lo + 1 < hi) {
        const uint64_t mid = lo + (hi - lo) / 2;
        if (d->row_offsets[mid] <= j)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/* mfm__check_csr's passes, on every core for data of more than 4 MB a core (prediction on 16
   cores spent a fifth of its time in them on one): first each worker's share of the rows'
   offsets, then its share of the non-zeros. */
typedef struct mfm__scan_part {
    uint64_t bad;         /* rows: 1 + the share's first row whose offsets are wrong; 0 if none */
    uint32_t widest;      /* rows: the share's most non-zeros in a row */
    uint32_t top[2];      /* non-zeros: the share's largest feature and field ids */
    uint64_t top_at[2];   /* where each first occurs */
    int special;          /* non-zeros: an infinite or NaN value */
} mfm__scan_part;       /* written once, at the end of the share's pass */

typedef struct mfm__scan_job {
    const mfm_csr *d;
    int need_fields, n_workers, rows; /* rows: the offsets' pass, else the non-zeros' */
    mfm__scan_part *part;
} mfm__scan_job;

static void mfm__scan_task(void *ctx, int index) {
    const mfm__scan_job *j = (const mfm__scan_job *)ctx;
    const mfm_csr *d = j->d;
    mfm__scan_part *part = &j->part[index];
    uint64_t lo, hi, r, widest = 0;
    if (j->rows) {
        mfm__share(d->n_rows, j->n_workers, index, &lo, &hi);
        for (r = lo; r < hi; r++) {
            const uint64_t a = d->row_offsets[r], b = d->row_offsets[r + 1];
            if (b < a || b - a > UINT32_MAX) {
                part->bad = r + 1;
                return;
            }
            widest = b - a > widest ? b - a : widest;
        }
        part->widest = (uint32_t)widest;
        return;
    }
    mfm__share(d->row_offsets[d->n_rows], j->n_workers, index, &lo, &hi);
    if (hi <= lo) return;
    part->top[0] = mfm__largest_id(d->features, lo, hi, &part->top_at[0]);
    if (j->need_fields) part->top[1] = mfm__largest_id(d->fields, lo, hi, &part->top_at[1]);
    if (d->values) {
        uint32_t special = 0, bits;
        for (r = lo; r < hi; r++) { /* exponent all ones: infinite or NaN */
            memcpy(&bits, d->values + r, 4);
            special |= (bits & 0x7f800000u) == 0x7f800000u;
        }
        part->special = special != 0;
    }
}

/* Where a check of the non-zeros failed: walks them in order and names the first bad one. */
static mfm_status mfm__csr_error(const mfm_csr *d, int need_fields, mfm_error *err) {
    uint64_t r, j;
    char at[600];
    for (r = 0; r < d->n_rows; r++) {
        for (j = d->row_offsets[r]; j < d->row_offsets[r + 1]; j++) {
            const uint32_t f = d->features[j], g = need_fields ? d->fields[j] : 0;
            if (f == UINT32_MAX)
                return mfm__fail(err, MFM_ERR_INVALID_DATA, "%s: feature id 4294967295 is out of range: ids must be below 2^32-1", mfm__row_at(d, r, at, sizeof at));
            if (d->n_features && f >= d->n_features)
                return mfm__fail(err, MFM_ERR_INVALID_DATA, "%s: feature id %u is not below data.n_features = %u", mfm__row_at(d, r, at, sizeof at), (unsigned)f,
                                 (unsigned)d->n_features);
            if (g == UINT32_MAX)
                return mfm__fail(err, MFM_ERR_INVALID_DATA, "%s: field id 4294967295 is out of range: ids must be below 2^32-1", mfm__row_at(d, r, at, sizeof at));
            if (need_fields && d->n_fields && g >= d->n_fields)
                return mfm__fail(err, MFM_ERR_INVALID_DATA, "%s: field id %u is not below data.n_fields = %u", mfm__row_at(d, r, at, sizeof at), (unsigned)g,
                                 (unsigned)d->n_fields);
            if (d->values && !mfm__finite(d->values[j]))
                return mfm__fail(err, MFM_ERR_INVALID_DATA, "%s: the value %g of feature %u is not finite", mfm__row_at(d, r, at, sizeof at), (double)d->values[j],
                                 (unsigned)f);
        }
    }
    return mfm__fail(err, MFM_ERR_INVALID_DATA, "the data failed a check that no non-zero fails on a second look"); /* not reached */
}

/* Structure, ids and values; labels and weights are checked by mfm__check_targets. The
   non-zeros are checked by whole-array passes that the compiler vectorizes (largest id, any
   infinite or NaN value), on up to n_threads threads (mfm__scan_task; 0: every core):
   prediction on a GPU runs faster than a per-row walk would. */
static mfm_status mfm__check_csr(const mfm_csr *d, int need_fields, int n_threads, mfm__data_info *info, mfm_error *err) {
    mfm__scan_part one_part, *part = &one_part;
    mfm__scan_job job;
    mfm_status st = MFM_OK;
    uint64_t bytes;
    int w, t;
    memset(info, 0, sizeof *info);
    if (!d) return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "the data pointer is NULL");
    if (d->n_rows == 0) return MFM_OK;
    if (!d->row_offsets) return mfm__fail(err, MFM_ERR_INVALID_DATA, "data.row_offsets is NULL but data.n_rows = %" PRIu64, d->n_rows);
    if (d->row_offsets[0] != 0)
        return mfm__fail(err, MFM_ERR_INVALID_DATA, "data.row_offsets[0] = %" PRIu64 " but CSR row offsets must start at 0", d->row_offsets[0]);
    bytes = d->n_rows * sizeof(uint64_t) + (d->row_offsets[d->n_rows] < UINT64_MAX / 16 ? d->row_offsets[d->n_rows] * 12 : UINT64_MAX / 4); /* a guess until the offsets pass */
    memset(&job, 0, sizeof job);
    job.d = d, job.need_fields = need_fields, job.rows = 1;
    job.n_workers = mfm__workers_for_bytes(bytes, n_threads);
    if (job.n_workers > 1 && !(part = (mfm__scan_part *)mfm__calloc((uint64_t)job.n_workers, sizeof *part)))
        part = &one_part, job.n_workers = 1; /* too short of memory to go faster: one pass */
    memset(part, 0, (size_t)job.n_workers * sizeof *part);
    job.part = part;
    mfm__run_shares(mfm__scan_task, &job, job.n_workers);
    for (w = 0; w < job.n_workers && !part[w].bad; w++)
        if (part[w].widest > info->max_row_nnz) info->max_row_nnz = part[w].widest;
    info->nnz = d->row_offsets[d->n_rows];
    if (w < job.n_workers) { /* the first share with a wrong row: its first is the data's first */
        const uint64_t r = part[w].bad - 1, lo = d->row_offsets[r], hi = d->row_offsets[r + 1];
        char at[600];
        st = hi < lo ? mfm__fail(err, MFM_ERR_INVALID_DATA, "data.row_offsets decreases at row %" PRIu64 " (1-based): %" PRIu64 " then %" PRIu64, r + 1, lo, hi)
                     : mfm__fail(err, MFM_ERR_INVALID_DATA, "%s has %" PRIu64 " non-zeros, more than 2^32-1", mfm__row_at(d, r, at, sizeof at), hi - lo);
    } else if (info->nnz && !d->features) {
        st = mfm__fail(err, MFM_ERR_INVALID_DATA, "data.features is NULL but the data has %" PRIu64 " non-zeros", info->nnz);
    } else if (info->nnz && need_fields && !d->fields) {
        st = mfm__fail(err, MFM_ERR_INVALID_DATA, "data.fields is NULL, but FFM and FwFM need a field id for every non-zero");
    } else if (info->nnz) {
        job.rows = 0;
        mfm__run_shares(mfm__scan_task, &job, job.n_workers);
        for (t = 0; t < (need_fields ? 2 : 1); t++) { /* the largest id, and its first occurrence: the first share that holds it (empty shares hold 0) */
            uint32_t top = part[0].top[t];
            uint64_t first = part[0].top_at[t];
            for (w = 1; w < job.n_workers; w++)
                if (part[w].top[t] > top) top = part[w].top[t], first = part[w].top_at[t];
            if (t == 0) info->n_features = top + 1, info->feature_row = mfm__row_of(d, first);
            if (t == 1) info->n_fields = top + 1, info->field_row = mfm__row_of(d, first);
            if (top == UINT32_MAX || (t == 0 && d->n_features && info->n_features > d->n_features) || (t == 1 && d->n_fields && info->n_fields > d->n_fields)) break;
        }
        for (w = 0; w < job.n_workers && !part[w].special; w++) {
        }
        if (t < (need_fields ? 2 : 1) || w < job.n_workers) st = mfm__csr_error(d, need_fields, err);
    }
    if (part != &one_part) MFM_FREE(part);
    return st;
}

/* The data's ids must fit the model's shape. */
static mfm_status mfm__check_shape(const mfm_model *m, const mfm_csr *d, const mfm__data_info *info, mfm_error *err) {
    char at[600]; /* an id beyond the model first: that message names the row */
    if (info->n_features > m->n_features)
        return mfm__fail(err, MFM_ERR_SHAPE_MISMATCH, "%s: feature id %u is beyond the model, which has %u features (ids 0..%u)",
                         mfm__row_at(d, info->feature_row, at, sizeof at), (unsigned)(info->n_features - 1), (unsigned)m->n_features, (unsigned)m->n_features - 1u);
    if (d->n_features > m->n_features)
        return mfm__fail(err, MFM_ERR_SHAPE_MISMATCH, "the data has %u features (data.n_features) but the model was made for %u", (unsigned)d->n_features,
                         (unsigned)m->n_features);
    if (m->params.model == MFM_MODEL_FM) return MFM_OK;
    if (info->n_fields > m->n_fields)
        return mfm__fail(err, MFM_ERR_SHAPE_MISMATCH, "%s: field id %u is beyond the model, which has %u fields (ids 0..%u)",
                         mfm__row_at(d, info->field_row, at, sizeof at), (unsigned)(info->n_fields - 1), (unsigned)m->n_fields, (unsigned)m->n_fields - 1u);
    if (d->n_fields > m->n_fields)
        return mfm__fail(err, MFM_ERR_SHAPE_MISMATCH, "the data has %u fields (data.n_fields) but the model was made for %u", (unsigned)d->n_fields,
                         (unsigned)m->n_fields);
    return MFM_OK;
}

/* Labels (and row weights) for training and evaluation. With *n_classes == 0 a multiclass
   check infers the class count as the largest label + 1. */
static mfm_status mfm__check_targets(mfm_task task, const mfm_csr *d, uint32_t *n_classes, int check_weights, mfm_error *err) {
    uint64_t r;
    uint32_t top = 0;
    double weight_sum = 0;
    char at[600];
    if (d->n_rows && !d->labels) return mfm__fail(err, MFM_ERR_INVALID_DATA, "data.labels is NULL, but training and evaluation need a label per row");
    for (r = 0; r < d->n_rows; r++) {
        float y = d->labels[r];
        if (!mfm__finite(y)) return mfm__fail(err, MFM_ERR_INVALID_DATA, "%s: the label is %g, not a finite number", mfm__row_at(d, r, at, sizeof at), (double)y);
        if (task == MFM_TASK_BINARY && y != 0 && y != 1)
            return mfm__fail(err, MFM_ERR_INVALID_DATA, "%s: the label is %g, but a binary label must be 0 or 1", mfm__row_at(d, r, at, sizeof at), (double)y);
        if (task == MFM_TASK_MULTICLASS) {
            if (y < 0 || y != floorf(y) || y >= 16777216.0f)
                return mfm__fail(err, MFM_ERR_INVALID_DATA, "%s: the label is %g, but a multiclass label must be a class id 0, 1, 2, ...",
                                 mfm__row_at(d, r, at, sizeof at), (double)y);
            if (*n_classes && (uint32_t)y >= *n_classes)
                return mfm__fail(err, MFM_ERR_INVALID_DATA, "%s: the label is class %u, but the model has %u classes (0..%u)", mfm__row_at(d, r, at, sizeof at),
                                 (unsigned)y, (unsigned)*n_classes, (unsigned)*n_classes - 1u);
            if ((uint32_t)y + 1 > top) top = (uint32_t)y + 1;
        }
    }
    if (task == MFM_TASK_MULTICLASS && *n_classes == 0) *n_classes = top;
    if (check_weights && d->weights) {
        for (r = 0; r < d->n_rows; r++) {
            float w = d->weights[r];
            if (!mfm__finite(w) || w < 0)
                return mfm__fail(err, MFM_ERR_INVALID_DATA, "%s: the row weight is %g, but row weights must be finite and >= 0", mfm__row_at(d, r, at, sizeof at),
                                 (double)w);
            weight_sum += w;
        }
        if (d->n_rows && weight_sum == 0) return mfm__fail(err, MFM_ERR_INVALID_DATA, "all %" PRIu64 " row weights are zero", d->n_rows);
    }
    return MFM_OK;
}

/* ============================================================================================
   >>text-data  Reading libffm and libsvm text: strict, exact, in parallel
   ============================================================================================ */

/* A dataset the library owns: its arrays come either from the parser (owned) or from a mapped
   binary file (borrowed from the mapping). */
MFMDEF void mfm_dataset_free(mfm_dataset *ds) {
    int i;
    if (!ds) return;
    MFM_FREE(ds->name);
    MFM_FREE(ds->blank_before);
    for (i = 0; i < 6; i++) MFM_FREE(ds->owned[i]);
    mfm__unmap(&ds->mapping);
    MFM_FREE(ds);
}

MFMDEF mfm_csr mfm_dataset_csr(const mfm_dataset *ds) {
    mfm_csr view;
    memset(&view, 0, sizeof view);
    if (!ds) return view;
    view = ds->csr;
    view.origin = ds;
    if (!view.n_features) view.n_features = ds->info.n_features; /* so that mfm_model_create(.., view.n_features, ..) fits the data */
    if (!view.n_fields) view.n_fields = ds->info.n_fields;
    return view;
}

MFMDEF void mfm_dataset_get_info(const mfm_dataset *ds, mfm_dataset_info *out) {
    if (!out) return;
    if (ds)
        *out = ds->info;
    else
        memset(out, 0, sizeof *out);
}

/* Growing columns of parsed rows. offsets[0] = 0 and offsets[r + 1] ends row r. */
typedef struct mfm__columns {
    uint64_t *offsets;
    float *labels;
    uint32_t *features, *fields;
    float *values;
    uint64_t n_rows, nnz, cap_rows, cap_nnz;
    uint32_t n_features, n_fields; /* max id + 1 */
    int all_ones;                  /* every value so far is exactly 1 */
    uint64_t lines;                /* lines consumed, blank ones included */
    uint64_t *blanks, n_blanks, cap_blanks; /* each blank line's row count before it (this part's rows) */
    /* the first error: line (1-based within this part), column (1-based) and sentence */
    uint64_t error_line, error_column;
    const char *error_from, *error_at; /* the line and the place the error names (mfm__explain_error) */
    char error[300];
} mfm__columns;

/* What every part of one input shares: decided from the first rows, then fixed. */
typedef struct mfm__text {
    const char *name;
    mfm_task task;
    mfm_format format; /* AUTO while no feature token has been seen */
    int has_labels;    /* -1 while no row has been seen */
} mfm__text;

static int mfm__columns_init(mfm__columns *c) {
    memset(c, 0, sizeof *c);
    c->all_ones = 1;
    c->offsets = (uint64_t *)mfm__calloc(1, sizeof(uint64_t));
    return c->offsets != NULL;
}

static void mfm__columns_free(mfm__columns *c) {
    MFM_FREE(c->blanks);
    MFM_FREE(c->offsets);
    MFM_FREE(c->labels);
    MFM_FREE(c->features);
    MFM_FREE(c->fields);
    MFM_FREE(c->values);
    memset(c, 0, sizeof *c);
}

/* Resizes *p to count elements; 0 (and *p unchanged) when memory is short. */
static int mfm__resize(void **p, uint64_t count, size_t size) {
    void *q;
    if (count > (uint64_t)SIZE_MAX / size) return 0;
    q = MFM_REALLOC(*p, (size_t)(count ? count : 1) * size);
    if (q) *p = q;
    return q != NULL;
}

/* Room for `rows` rows and `nnz` non-zeros (fields only for libffm), growing by doubling. */
static int mfm__columns_reserve(mfm__columns *c, uint64_t rows, uint64_t nnz, int with_fields) {
    if (rows > c->cap_rows) {
        uint64_t want = c->cap_rows ? c->cap_rows : 256;
        while (want < rows) want *= 2;
        if (!mfm__resize((void **)&c->labels, want, sizeof(float)) || !mfm__resize((void **)&c->offsets, want + 1, sizeof(uint64_t))) return 0;
        c->cap_rows = want;
    }
    if (nnz > c->cap_nnz || (with_fields && !c->fields)) {
        uint64_t want = c->cap_nnz ? c->cap_nnz : 1024;
        while (want < nnz) want *= 2;
        if (!mfm__resize((void **)&c->features, want, sizeof(uint32_t)) || !mfm__resize((void **)&c->values, want, sizeof(float)) ||
            (with_fields && !mfm__resize((void **)&c->fields, want, sizeof(uint32_t))))
            return 0;
        c->cap_nnz = want;
    }
    return 1;
}

#define MFM__IS_BLANK(ch) ((ch) == ' ' || (ch) == '\t')
#define MFM__IS_DIGIT(ch) ((unsigned)((ch) - '0') < 10u)

/* At a line end: '\n', "\r\n", a '\r' that ends the input, or the end itself. */
static int mfm__at_line_end(const char *p, const char *end) { return p == end || *p == '\n' || (*p == '\r' && (p + 1 == end || p[1] == '\n')); }

/* A word of the input for an error message, quoted and cut short. */
static const char *mfm__word(const char *p, const char *end, char *buf, size_t size) {
    size_t n = 0;
    if (p >= end || *p == '\n' || *p == '\r') return "the end of the line";
    buf[n++] = '\'';
    while (p < end && n + 5 < size && !MFM__IS_BLANK(*p) && *p != '\n' && *p != '\r') buf[n++] = (char)((unsigned char)*p < 32 ? '?' : *p), p++;
    if (p < end && !MFM__IS_BLANK(*p) && *p != '\n' && *p != '\r') buf[n++] = '.', buf[n++] = '.', buf[n++] = '.';
    buf[n++] = '\'';
    buf[n] = '\0';
    return buf;
}

static int mfm__text_error(mfm__columns *c, const char *line, const char *at, const char *fmt, ...) {
    va_list ap;
    c->error_line = c->lines;
    c->error_column = (uint64_t)(at - line) + 1;
    c->error_from = line, c->error_at = at;
    va_start(ap, fmt);
    vsnprintf(c->error, sizeof c->error, fmt, ap);
    va_end(ap);
    return 0;
}

/* A feature or field id: digits only, below 2^32 - 1 (so that "max id + 1" fits 32 bits). */
static const char *mfm__parse_id(const char *p, const char *end, uint32_t *out) {
    uint64_t v = 0;
    const char *start = p;
    while (p < end && MFM__IS_DIGIT(*p)) {
        v = v * 10 + (uint64_t)(*p - '0');
        if (v >= 0xFFFFFFFFull) return NULL;
        p++;
    }
    *out = (uint32_t)v;
    return p == start ? NULL : p;
}

/* Powers of ten that doubles hold exactly. */
static const double mfm__pow10[23] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
                                      1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* A decimal number to the nearest float, exactly as strtof would round it. The common case
   (at most 19 significant digits, exponent within +-22) takes one exact double operation
   (Clinger's fast path); that double rounds to the right float unless it sits exactly halfway
   between two floats, which goes to strtof with the rest. Returns the end, or NULL. */
static const char *mfm__parse_number(const char *p, const char *end, float *out, int *not_finite) {
    const char *start = p;
    uint64_t mantissa = 0;
    int digits = 0, exp10 = 0, any = 0, slow = 0, negative = 0;
    *not_finite = 0;
    if (p < end && MFM__IS_DIGIT(*p) && (p + 1 == end || (!MFM__IS_DIGIT(p[1]) && p[1] != '.' && (p[1] | 32) != 'e'))) {
        *out = (float)(*p - '0'); /* one digit, the one-hot "1" and the labels: most numbers */
        return p + 1;
    }
    if (p < end && (*p == '+' || *p == '-')) negative = *p++ == '-';
    for (; p < end && MFM__IS_DIGIT(*p); p++, any = 1) {
        if (mantissa == 0 && *p == '0') continue;
        if (digits < 19) mantissa = mantissa * 10 + (uint64_t)(*p - '0'), digits++;
        else exp10++, slow |= *p != '0';
    }
    if (p < end && *p == '.') {
        for (p++; p < end && MFM__IS_DIGIT(*p); p++, any = 1) {
            if (mantissa == 0 && *p == '0') {
                exp10--;
                continue;
            }
            if (digits < 19) mantissa = mantissa * 10 + (uint64_t)(*p - '0'), digits++, exp10--;
            else slow |= *p != '0';
        }
    }
    if (!any) {
        const char *q = p;
        while (q < end && ((*q | 32) >= 'a' && (*q | 32) <= 'z')) q++;
        *not_finite = q - p >= 3 && ((p[0] | 32) == 'n' || (p[0] | 32) == 'i'); /* nan, inf, infinity */
        return NULL;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        int e = 0, e_negative = 0;
        p++;
        if (p < end && (*p == '+' || *p == '-')) e_negative = *p++ == '-';
        if (p == end || !MFM__IS_DIGIT(*p)) return NULL;
        for (; p < end && MFM__IS_DIGIT(*p); p++)
            if (e < 100000) e = e * 10 + (*p - '0');
        exp10 += e_negative ? -e : e;
    }
    if (!slow && mantissa == 0) {
        *out = negative ? -0.0f : 0.0f;
        return p;
    }
    if (!slow && mantissa <= (1ull << 53) && exp10 >= -22 && exp10 <= 22) {
        double d = exp10 < 0 ? (double)mantissa / mfm__pow10[-exp10] : (double)mantissa * mfm__pow10[exp10];
        uint64_t bits;
        memcpy(&bits, &d, 8);
        if ((bits & 0x1FFFFFFFull) != 0x10000000ull) { /* not halfway between two floats */
            *out = (float)(negative ? -d : d);
            return p;
        }
    }
    { /* the rare rest: strtof on a copy (the input is not NUL-terminated) */
        char small[128], *buf = small, *stop;
        size_t n = (size_t)(p - start);
        int whole;
        double check;
        float f;
        if (n >= sizeof small && !(buf = (char *)mfm__alloc(n + 1, 1))) return NULL;
        memcpy(buf, start, n);
        buf[n] = '\0';
        f = strtof(buf, &stop);
        whole = stop == buf + n;
        if (buf != small) MFM_FREE(buf);
        if (!whole) return NULL;
        check = f;
        if (!mfm__finite(check)) {
            *not_finite = 1;
            return NULL;
        }
        *out = f;
        return p;
    }
}

/* Parses the lines of [p, end) into c; every line is complete (the last may lack its newline).
   Returns 0 at the first error, recorded in c. */
static int mfm__parse_lines(const mfm__text *t, const char *p, const char *end, mfm__columns *c) {
    const int ffm = t->format == MFM_FORMAT_LIBFFM;
    char word[48];
    while (p < end) {
        const char *line = p;
        uint64_t row = c->n_rows, nnz = c->nnz;
        c->lines++;
        while (p < end && MFM__IS_BLANK(*p)) p++;
        if (mfm__at_line_end(p, end)) { /* a blank line: its place is kept, so rows can be named by their lines */
            if (c->n_blanks == c->cap_blanks) {
                uint64_t cap = c->cap_blanks ? 2 * c->cap_blanks : 64;
                if (!mfm__resize((void **)&c->blanks, cap, sizeof(uint64_t))) return mfm__text_error(c, line, p, "out of memory after %" PRIu64 " rows", row);
                c->cap_blanks = cap;
            }
            c->blanks[c->n_blanks++] = row;
            while (p < end && *p != '\n') p++;
            p += p < end;
            continue;
        }
        if (row + 1 > c->cap_rows && !mfm__columns_reserve(c, row + 1, 0, ffm))
            return mfm__text_error(c, line, p, "out of memory after %" PRIu64 " rows", row);
        c->labels[row] = 0;
        if (t->has_labels) {
            const char *q;
            float y;
            int inf;
            q = mfm__parse_number(p, end, &y, &inf);
            if (!q || !(q == end || MFM__IS_BLANK(*q) || mfm__at_line_end(q, end))) {
                if (q && *q == ':')
                    return mfm__text_error(c, line, p, "expected a label, found %s (the first row has a label, so every row needs one)",
                                           mfm__word(p, end, word, sizeof word));
                return mfm__text_error(c, line, p, inf ? "the label %s is not a finite number" : "expected a label (a number), found %s",
                                       mfm__word(p, end, word, sizeof word));
            }
            if (t->task == MFM_TASK_BINARY) {
                if (y != 0 && y != 1 && y != -1)
                    return mfm__text_error(c, line, p, "a binary label must be 0, 1, -1 or +1, found %s", mfm__word(p, end, word, sizeof word));
                y = y == 1 ? 1.0f : 0.0f;
            } else if (t->task == MFM_TASK_MULTICLASS && (y < 0 || y != floorf(y) || y >= 16777216.0f)) {
                return mfm__text_error(c, line, p, "a multiclass label must be a class id 0, 1, 2, ..., found %s", mfm__word(p, end, word, sizeof word));
            }
            c->labels[row] = y;
            p = q;
        }
        for (;;) { /* tokens */
            const char *token, *q;
            uint32_t a, b = 0;
            float x;
            int inf;
            while (p < end && MFM__IS_BLANK(*p)) p++;
            if (mfm__at_line_end(p, end)) break;
            token = p;
            if (!(q = mfm__parse_id(p, end, &a))) {
                if (p < end && *p == '-') return mfm__text_error(c, line, p, "ids must not be negative, found %s", mfm__word(p, end, word, sizeof word));
                if (p < end && MFM__IS_DIGIT(*p))
                    return mfm__text_error(c, line, p, "the id in %s is too large: ids go up to 4294967294", mfm__word(p, end, word, sizeof word));
                if (p < end && *p == '\r') return mfm__text_error(c, line, p, "a carriage return in the middle of a line");
                return mfm__text_error(c, line, p, "expected %s, found %s", ffm ? "field:feature:value" : "feature:value", mfm__word(p, end, word, sizeof word));
            }
            if (q == end || *q != ':')
                return mfm__text_error(c, line, token, "expected %s, found %s%s", ffm ? "field:feature:value" : "feature:value",
                                       mfm__word(token, end, word, sizeof word),
                                       t->has_labels ? "" : " (the first row has no label, so no row may have one)");
            p = q + 1;
            if (ffm) {
                b = a;
                if (!(q = mfm__parse_id(p, end, &a))) {
                    if (p < end && *p == '-') return mfm__text_error(c, line, p, "ids must not be negative, found %s", mfm__word(p, end, word, sizeof word));
                    if (p < end && MFM__IS_DIGIT(*p))
                        return mfm__text_error(c, line, p, "the feature id in %s is too large: ids go up to 4294967294", mfm__word(token, end, word, sizeof word));
                    return mfm__text_error(c, line, p, "expected a feature id after the field in %s", mfm__word(token, end, word, sizeof word));
                }
                if (q == end || *q != ':')
                    return mfm__text_error(c, line, q, "expected ':' and a value after field:feature in %s (libffm tokens are field:feature:value)",
                                           mfm__word(token, end, word, sizeof word));
                p = q + 1;
            }
            if (!(q = mfm__parse_number(p, end, &x, &inf)))
                return mfm__text_error(c, line, p, inf ? "the value in %s is not a finite number" : "expected a number as the value in %s",
                                       mfm__word(token, end, word, sizeof word));
            if (!(q == end || MFM__IS_BLANK(*q) || mfm__at_line_end(q, end))) {
                if (*q == ':' && !ffm)
                    return mfm__text_error(c, line, token, "expected feature:value, found %s (this input is libsvm, as its first token showed)",
                                           mfm__word(token, end, word, sizeof word));
                return mfm__text_error(c, line, q, "expected a blank or the end of the line after %s", mfm__word(token, end, word, sizeof word));
            }
            p = q;
            if (nnz + 1 > c->cap_nnz && !mfm__columns_reserve(c, 0, nnz + 1, ffm))
                return mfm__text_error(c, line, token, "out of memory after %" PRIu64 " non-zeros", nnz);
            c->features[nnz] = a;
            c->values[nnz] = x;
            c->all_ones &= x == 1.0f;
            if (a >= c->n_features) c->n_features = a + 1;
            if (ffm) {
                c->fields[nnz] = b;
                if (b >= c->n_fields) c->n_fields = b + 1;
            }
            nnz++;
        }
        if (nnz - c->offsets[row] > UINT32_MAX) return mfm__text_error(c, line, line, "the row has more than 2^32-1 non-zeros");
        c->offsets[row + 1] = c->nnz = nnz;
        c->n_rows = row + 1;
        while (p < end && *p != '\n') p++;
        p += p < end;
    }
    return 1;
}

/* Fixes whether rows have labels and which format the tokens are, from the first row with a
   token. Lines before it are blank or hold only a label, so they parse the same either way. */
static void mfm__text_decide(mfm__text *t, const char *p, const char *end) {
    while (p < end && (t->has_labels < 0 || t->format == MFM_FORMAT_AUTO)) {
        const char *q;
        int colons = 0;
        while (p < end && (MFM__IS_BLANK(*p) || *p == '\r')) p++;
        if (p < end && *p != '\n') {
            for (q = p; q < end && !MFM__IS_BLANK(*q) && *q != '\n' && *q != '\r'; q++) colons += *q == ':';
            if (t->has_labels < 0) t->has_labels = colons == 0;
            if (colons == 0) { /* the label: the first token is next */
                for (p = q; p < end && MFM__IS_BLANK(*p); p++) {}
                for (q = p, colons = 0; q < end && !MFM__IS_BLANK(*q) && *q != '\n' && *q != '\r'; q++) colons += *q == ':';
            }
            if (colons && t->format == MFM_FORMAT_AUTO) t->format = colons >= 2 ? MFM_FORMAT_LIBFFM : MFM_FORMAT_LIBSVM;
        }
        while (p < end && *p != '\n') p++;
        p += p < end;
    }
}

/* Copies part b's rows into a from row `row` and non-zero `nnz` on (the room is reserved). */
static void mfm__columns_copy(mfm__columns *a, uint64_t row, uint64_t nnz, const mfm__columns *b) {
    uint64_t r;
    memcpy(a->labels + row, b->labels, (size_t)b->n_rows * sizeof(float));
    for (r = 1; r <= b->n_rows; r++) a->offsets[row + r] = nnz + b->offsets[r];
    memcpy(a->features + nnz, b->features, (size_t)b->nnz * sizeof(uint32_t));
    if (b->fields) memcpy(a->fields + nnz, b->fields, (size_t)b->nnz * sizeof(uint32_t));
    memcpy(a->values + nnz, b->values, (size_t)b->nnz * sizeof(float));
}

/* One chunk of whole lines, cut at newlines into parts that the pool parses in parallel: part 0
   straight into the result, the others into scratch columns appended in order afterwards. */
#define MFM__MAX_PARTS 64
#define MFM__MIN_PART_BYTES (1u << 20)

typedef struct mfm__chunk_job {
    const mfm__text *text;
    int n; /* parts in this chunk (the pool may have more workers) */
    const char *begin[MFM__MAX_PARTS], *end[MFM__MAX_PARTS];
    mfm__columns *cols[MFM__MAX_PARTS];
    int ok[MFM__MAX_PARTS];
    uint64_t at_row[MFM__MAX_PARTS], at_nnz[MFM__MAX_PARTS]; /* where part i lands in the result */
} mfm__chunk_job;

/* A parse error whose cause hides from its sentence: a carriage return that ends no line (the
   word quoted stops at it, so the message would not show it), or commas of CSV, which reach
   the parser as odd labels or ids. Looks at the line up to the end of the token the error
   names, so a CR or comma further on does not take the blame. */
static void mfm__explain_error(mfm__columns *c, const char *end) {
    const char *p, *stop = c->error_at;
    if (!c->error_from || strncmp(c->error, "out of memory", 13) == 0) return;
    while (stop < end && !MFM__IS_BLANK(*stop) && *stop != '\n') stop++;
    for (p = c->error_from; p <= stop && p < end && *p != '\n'; p++) {
        if (*p == '\r' && p + 1 < end && p[1] != '\n') {
            c->error_column = (uint64_t)(p - c->error_from) + 1;
            snprintf(c->error, sizeof c->error,
                     "a carriage return (\\r) not followed by a newline: lines end with \\n or \\r\\n (old Mac line ends are not read; "
                     "convert them, e.g. tr '\\r' '\\n')");
            return;
        }
        if (*p == ',' && p < stop) {
            c->error_column = (uint64_t)(p - c->error_from) + 1;
            snprintf(c->error, sizeof c->error,
                     "a comma: the input looks like CSV, which is not read; the formats are libsvm (label feature:value ...), libffm (label "
                     "field:feature:value ...) and modern_fm's binary datasets");
            return;
        }
    }
    if (strncmp(c->error, "ids must not be negative", 24) == 0 || strstr(c->error, "feature:value, found")) { /* a bare number: dense rows */
        int bare = c->error_at < stop;
        char word[48];
        for (p = c->error_at; p < stop; p++) bare &= MFM__IS_DIGIT(*p) || *p == '-' || *p == '+' || *p == '.' || *p == 'e' || *p == 'E';
        if (bare)
            snprintf(c->error, sizeof c->error,
                     "expected a feature:value token, found the bare number %s: rows of plain values (dense data) are not read; the formats are "
                     "libsvm (label feature:value ...), libffm (label field:feature:value ...) and modern_fm's binary datasets",
                     mfm__word(c->error_at, end, word, sizeof word));
    }
}

static void mfm__parse_task(void *ctx, int i) {
    mfm__chunk_job *job = (mfm__chunk_job *)ctx;
    if (i < job->n && !(job->ok[i] = mfm__parse_lines(job->text, job->begin[i], job->end[i], job->cols[i]))) mfm__explain_error(job->cols[i], job->end[i]);
}

/* Parts 1.. copy themselves into the result in parallel: copying, and the kernel's first touch
   of the result's new pages, would otherwise run on one core. */
static void mfm__append_task(void *ctx, int i) {
    mfm__chunk_job *job = (mfm__chunk_job *)ctx;
    if (i > 0 && i < job->n) mfm__columns_copy(job->cols[0], job->at_row[i], job->at_nnz[i], job->cols[i]);
}

typedef struct mfm__text_reader {
    mfm__text text;
    mfm__columns result;
    mfm__columns scratch[MFM__MAX_PARTS];
    mfm__pool pool;
    int n_parts;
    mfm__hash digest; /* of every byte parsed, in order: the source_digest a cache records */
} mfm__text_reader;

static mfm_status mfm__parse_chunk(mfm__text_reader *rd, const char *p, const char *end, mfm_error *err) {
    mfm__chunk_job job;
    int n = 1, i;
    mfm__hash_update(&rd->digest, p, (size_t)(end - p)); /* chunks arrive in order and cover the input */
    mfm__text_decide(&rd->text, p, end);
    if ((uint64_t)(end - p) >= 2ull * MFM__MIN_PART_BYTES) n = (int)((uint64_t)(end - p) / MFM__MIN_PART_BYTES);
    if (n > rd->n_parts) n = rd->n_parts;
    memset(&job, 0, sizeof job);
    job.text = &rd->text;
    job.n = n;
    for (i = 0; i < n; i++) { /* part i ends just after the first newline at or past i+1 shares */
        const char *lo = i ? job.end[i - 1] : p;
        const char *cut = i == n - 1 ? end : p + (uint64_t)(end - p) * (uint64_t)(i + 1) / (uint64_t)n;
        if (cut < lo) cut = lo;
        while (cut < end && cut > lo && cut[-1] != '\n') cut++;
        job.begin[i] = lo;
        job.end[i] = cut;
        job.cols[i] = i ? &rd->scratch[i] : &rd->result;
        if (i) { /* emptied, not freed: fresh pages would cost the kernel a zeroing each */
            mfm__columns *c = &rd->scratch[i];
            if (!c->offsets && !mfm__columns_init(c)) return mfm__fail(err, MFM_ERR_OUT_OF_MEMORY, "out of memory while reading %s", rd->text.name);
            c->n_rows = c->nnz = c->lines = c->n_blanks = 0;
            c->n_features = c->n_fields = 0;
            c->all_ones = 1;
        }
    }
    mfm__pool_run(&rd->pool, mfm__parse_task, &job);
    {
        mfm__columns *a = &rd->result;
        uint64_t rows = a->n_rows, nnz = a->nnz, lines = a->lines;
        for (i = 0; i < n; i++) { /* part 0 counts lines from the start; the others from their own */
            const mfm__columns *c = job.cols[i];
            if (!job.ok[i])
                return mfm__fail(err, MFM_ERR_INVALID_DATA, "%s:%" PRIu64 ":%" PRIu64 ": %s", rd->text.name, (i ? lines : 0) + c->error_line,
                                 c->error_column, c->error);
            if (i) {
                job.at_row[i] = rows, job.at_nnz[i] = nnz;
                rows += c->n_rows, nnz += c->nnz, lines += c->lines;
            }
        }
        if (n > 1 && !mfm__columns_reserve(a, rows, nnz, a->fields != NULL || job.cols[n - 1]->fields != NULL))
            return mfm__fail(err, MFM_ERR_OUT_OF_MEMORY, "out of memory while reading %s", rd->text.name);
        mfm__pool_run(&rd->pool, mfm__append_task, &job);
        for (i = 1; i < n; i++) {
            const mfm__columns *c = job.cols[i];
            uint64_t k;
            if (c->n_blanks && a->n_blanks + c->n_blanks > a->cap_blanks) {
                if (!mfm__resize((void **)&a->blanks, a->n_blanks + c->n_blanks, sizeof(uint64_t)))
                    return mfm__fail(err, MFM_ERR_OUT_OF_MEMORY, "out of memory while reading %s", rd->text.name);
                a->cap_blanks = a->n_blanks + c->n_blanks;
            }
            for (k = 0; k < c->n_blanks; k++) a->blanks[a->n_blanks++] = job.at_row[i] + c->blanks[k];
            a->all_ones &= c->all_ones;
            if (c->n_features > a->n_features) a->n_features = c->n_features;
            if (c->n_fields > a->n_fields) a->n_fields = c->n_fields;
        }
        a->n_rows = rows, a->nnz = nnz, a->lines = lines;
    }
    return MFM_OK;
}

/* Reading a whole input: the format decided from the options or the first rows, chunks of whole
   lines parsed in parallel, the columns handed to a dataset at the end. */
#define MFM__CHUNK_BYTES (32u << 20)

static mfm_status mfm__reader_start(mfm__text_reader *rd, const char *name, const mfm_read_options *o, mfm_error *err) {
    memset(rd, 0, sizeof *rd);
    mfm__hash_init(&rd->digest);
    rd->text.name = name;
    rd->text.task = o->task == MFM_TASK_DEFAULT ? MFM_TASK_BINARY : o->task;
    rd->text.format = o->format == MFM_FORMAT_BINARY ? MFM_FORMAT_AUTO : o->format;
    rd->text.has_labels = -1;
    rd->n_parts = mfm__threads(o->n_threads);
    if (rd->n_parts > MFM__MAX_PARTS) rd->n_parts = MFM__MAX_PARTS;
    if (!mfm__columns_init(&rd->result)) return mfm__fail(err, MFM_ERR_OUT_OF_MEMORY, "out of memory while reading %s", name);
    return mfm__pool_start(&rd->pool, rd->n_parts, err);
}

static void mfm__reader_free(mfm__text_reader *rd) {
    int i;
    mfm__pool_stop(&rd->pool);
    mfm__columns_free(&rd->result);
    for (i = 0; i < MFM__MAX_PARTS; i++) mfm__columns_free(&rd->scratch[i]);
}

/* Moves the parsed columns into a new dataset (dropping what the text did not have). */
static mfm_status mfm__reader_finish(mfm__text_reader *rd, mfm_dataset **out, mfm_error *err) {
    mfm__columns *c = &rd->result;
    mfm_dataset *ds = (mfm_dataset *)mfm__calloc(1, sizeof *ds);
    if (!ds) return mfm__fail(err, MFM_ERR_OUT_OF_MEMORY, "out of memory for a dataset");
    ds->info.format = rd->text.format == MFM_FORMAT_AUTO ? MFM_FORMAT_LIBSVM : rd->text.format;
    ds->info.n_rows = c->n_rows;
    ds->info.nnz = c->nnz;
    ds->info.n_features = c->n_features;
    ds->info.n_fields = c->n_fields;
    ds->info.has_labels = rd->text.has_labels == 1 && c->n_rows > 0;
    ds->info.has_fields = ds->info.format == MFM_FORMAT_LIBFFM && c->fields != NULL;
    ds->info.has_values = !c->all_ones;
    ds->info.labels_task = ds->info.has_labels ? rd->text.task : MFM_TASK_DEFAULT;
    ds->info.source_digest = mfm__hash_final(&rd->digest);
    ds->name = mfm__copy_text(rd->text.name);
    ds->blank_before = c->blanks, ds->n_blank = c->n_blanks; /* blank lines at the very end precede no row: harmless */
    c->blanks = NULL;
    ds->owned[0] = c->offsets;
    if (ds->info.has_labels) ds->owned[1] = c->labels;
    else MFM_FREE(c->labels);
    ds->owned[3] = c->features;
    if (ds->info.has_fields) ds->owned[4] = c->fields;
    else MFM_FREE(c->fields);
    if (ds->info.has_values) ds->owned[5] = c->values;
    else MFM_FREE(c->values);
    memset(c, 0, sizeof *c);
    ds->csr.n_rows = ds->info.n_rows;
    ds->csr.row_offsets = (const uint64_t *)ds->owned[0];
    ds->csr.labels = (const float *)ds->owned[1];
    ds->csr.features = (const uint32_t *)ds->owned[3];
    ds->csr.fields = (const uint32_t *)ds->owned[4];
    ds->csr.values = (const float *)ds->owned[5]; /* n_features, n_fields 0: the ids say, and a
                                                      too small model gets the row that fails */
    *out = ds;
    return mfm__ok(err);
}

/* Text from a stream, chunk by chunk; `first` holds bytes already read from it. */
static mfm_status mfm__read_text_stream(mfm__text_reader *rd, FILE *f, const unsigned char *first, size_t n_first, uint64_t total,
                                        const mfm_read_options *o, mfm_error *err) {
    uint64_t cap = MFM__CHUNK_BYTES, used = n_first, done = 0;
    char *buf = (char *)mfm__alloc(cap, 1);
    mfm_status st = MFM_OK;
    if (!buf) return mfm__fail(err, MFM_ERR_OUT_OF_MEMORY, "out of memory for a read buffer");
    memcpy(buf, first, n_first);
    for (;;) {
        size_t got = fread(buf + used, 1, (size_t)(cap - used), f);
        int eof = got < cap - used;
        char *last;
        used += got;
        if (eof && ferror(f)) {
            st = mfm__fail(err, MFM_ERR_IO, "reading %s failed after %" PRIu64 " bytes: %s", rd->text.name, done + used, mfm__os_error());
            break;
        }
        if (eof) {
            st = mfm__parse_chunk(rd, buf, buf + used, err);
            break;
        }
        for (last = buf + used; last > buf && last[-1] != '\n'; last--) {}
        if (last == buf) { /* one line fills the buffer: make room for more of it */
            char *bigger = cap * 2 <= (uint64_t)SIZE_MAX ? (char *)MFM_REALLOC(buf, (size_t)(cap * 2)) : NULL;
            if (!bigger) {
                st = mfm__fail(err, MFM_ERR_OUT_OF_MEMORY, "%s:%" PRIu64 ": the line is longer than the memory available (more than %" PRIu64 " bytes)",
                               rd->text.name, rd->result.lines + 1, used);
                break;
            }
            buf = bigger;
            cap *= 2;
            continue;
        }
        if ((st = mfm__parse_chunk(rd, buf, last, err)) != MFM_OK) break;
        done += (uint64_t)(last - buf);
        used -= (uint64_t)(last - buf);
        memmove(buf, last, (size_t)used);
        if (o->on_progress) o->on_progress(o->user, done, total);
    }
    if (st == MFM_OK && o->on_progress) o->on_progress(o->user, done + used, total);
    MFM_FREE(buf);
    return st;
}

/* ============================================================================================
   >>binary-data  Binary dataset files: a header, 64-byte aligned arrays, a checksum
   ============================================================================================ */

/* Layout (all little-endian):
     0  "MFM-DATA"          24  u64 n_rows          48  u64 source size (a cache's text)
     8  u32 version (1)     32  u64 nnz             56  i64 source mtime
    12  u32 0x01020304      40  u32 n_features
    16  u32 flags           44  u32 n_fields        64  u32 labels' task (0 = not recorded)
    20  u32 header bytes (128)                      72  u64 source digest (0 = none)
                                                    80  zero up to byte 128
   then, each starting at a multiple of 64: row offsets (u64 x rows+1), labels, weights (f32 x
   rows), features, fields (u32 x nnz), values (f32 x nnz), present per flags; then the
   checksum of everything before it (u64). Arrays are used in place from the mapping. */
#define MFM__DATA_MAGIC "MFM-DATA"
#define MFM__MODEL_MAGIC "MFMMODEL"
#define MFM__DATA_VERSION 1u
#define MFM__DATA_HEADER 128u
#define MFM__ENDIAN_MARK 0x01020304u
enum { MFM__HAS_LABELS = 1, MFM__HAS_WEIGHTS = 2, MFM__HAS_FIELDS = 4, MFM__HAS_VALUES = 8 };
enum { MFM__SEC_OFFSETS, MFM__SEC_LABELS, MFM__SEC_WEIGHTS, MFM__SEC_FEATURES, MFM__SEC_FIELDS, MFM__SEC_VALUES, MFM__SECTIONS };

/* Where each section starts (0 = absent) and the total file size. Callers check that n_rows and
   nnz are plausible for the file first, so nothing here overflows. */
static uint64_t mfm__data_layout(uint64_t n_rows, uint64_t nnz, uint32_t flags, uint64_t start[MFM__SECTIONS], uint64_t bytes[MFM__SECTIONS]) {
    static const uint32_t needs[MFM__SECTIONS] = {0, MFM__HAS_LABELS, MFM__HAS_WEIGHTS, 0, MFM__HAS_FIELDS, MFM__HAS_VALUES};
    uint64_t at = MFM__DATA_HEADER;
    int s;
    for (s = 0; s < MFM__SECTIONS; s++) {
        int per_row = s <= MFM__SEC_WEIGHTS;
        bytes[s] = needs[s] && !(flags & needs[s]) ? 0 : s == MFM__SEC_OFFSETS ? (n_rows + 1) * 8 : (per_row ? n_rows : nnz) * 4;
        start[s] = bytes[s] ? (at + 63) / 64 * 64 : 0;
        if (bytes[s]) at = start[s] + bytes[s];
    }
    return (at + 7) / 8 * 8 + 8;
}

/* "name: message" for an error raised about a named input. */
static mfm_status mfm__name_error(mfm_error *err, mfm_status st, const char *name) {
    size_t n = strlen(name), len, room = err ? sizeof err->message - 1 : 0;
    if (!err || st == MFM_OK || n + 2 > room) return st;
    len = strlen(err->message);
    if (len > room - n - 2) len = room - n - 2;
    memmove(err->message + n + 2, err->message, len);
    memcpy(err->message, name, n);
    err->message[n] = ':';
    err->message[n + 1] = ' ';
    err->message[n + 2 + len] = '\0';
    err->status = st;
    return st;
}

/* Checks a binary dataset in memory completely and points the dataset's view at its arrays. */
static mfm_status mfm__data_from_binary(mfm_dataset *ds, const unsigned char *b, uint64_t size, const char *name, mfm_task task, mfm_error *err) {
    uint64_t start[MFM__SECTIONS], bytes[MFM__SECTIONS], n_rows, nnz, total;
    uint32_t version, flags, labels_task;
    mfm__data_info info;
    mfm_csr *d = &ds->csr;
    mfm_status st;
    ds->name = mfm__copy_text(name); /* NULL when memory is short: rows are then named by number */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    (void)b, (void)size, (void)task;
    return mfm__fail(err, MFM_ERR_BAD_FILE, "%s: binary dataset files are little-endian and are used in place; this big-endian machine cannot use them (convert the text instead)", name);
#endif
    if (size < MFM__DATA_HEADER + 8 || memcmp(b, MFM__DATA_MAGIC, 8) != 0)
        return mfm__fail(err, MFM_ERR_BAD_FILE, "%s is not a modern_fm binary dataset (%s)", name, size < 8 || memcmp(b, MFM__DATA_MAGIC, 8) ? "no MFM-DATA magic" : "shorter than its header");
    version = mfm__load_le32(b + 8);
    if (version > MFM__DATA_VERSION)
        return mfm__fail(err, MFM_ERR_BAD_FILE, "%s is a binary dataset of format version %u, newer than this library reads (%u): update modern_fm", name, (unsigned)version,
                         MFM__DATA_VERSION);
    flags = mfm__load_le32(b + 16);
    labels_task = mfm__load_le32(b + 64);
    if (version == 0 || mfm__load_le32(b + 12) != MFM__ENDIAN_MARK || mfm__load_le32(b + 20) != MFM__DATA_HEADER || flags > 15 ||
        labels_task >= MFM_TASK_COUNT)
        return mfm__fail(err, MFM_ERR_BAD_FILE, "%s: the binary dataset header is corrupt (version, byte-order mark, header size or flags)", name);
    n_rows = mfm__load_le64(b + 24);
    nnz = mfm__load_le64(b + 32);
    if (n_rows >= size / 8 || nnz >= size / 4)
        return mfm__fail(err, MFM_ERR_BAD_FILE, "%s is truncated: its header announces %" PRIu64 " rows and %" PRIu64 " non-zeros, more than %" PRIu64 " bytes hold", name,
                         n_rows, nnz, size);
    total = mfm__data_layout(n_rows, nnz, flags, start, bytes);
    if (total != size)
        return mfm__fail(err, MFM_ERR_BAD_FILE, "%s is %s: %" PRIu64 " bytes where its header needs %" PRIu64, name, size < total ? "truncated" : "too long", size, total);
    if (mfm__checksum(b, (size_t)size - 8) != mfm__load_le64(b + size - 8))
        return mfm__fail(err, MFM_ERR_BAD_FILE, "%s is corrupt: its checksum does not match its contents", name);
    if (task == MFM_TASK_DEFAULT) task = labels_task != MFM_TASK_DEFAULT ? (mfm_task)labels_task : MFM_TASK_BINARY; /* as recorded */
    if (labels_task != MFM_TASK_DEFAULT && labels_task != (uint32_t)task)
        return mfm__fail(err, MFM_ERR_INVALID_DATA, "%s holds labels read for the %s task, not for %s: read the text again for this task", name,
                         mfm_task_name((mfm_task)labels_task), mfm_task_name(task));
    memset(d, 0, sizeof *d);
    d->n_rows = n_rows;
    d->row_offsets = (const uint64_t *)(const void *)(b + start[MFM__SEC_OFFSETS]);
    d->labels = bytes[MFM__SEC_LABELS] ? (const float *)(const void *)(b + start[MFM__SEC_LABELS]) : NULL;
    d->weights = bytes[MFM__SEC_WEIGHTS] ? (const float *)(const void *)(b + start[MFM__SEC_WEIGHTS]) : NULL;
    d->features = (const uint32_t *)(const void *)(b + start[MFM__SEC_FEATURES]);
    d->fields = bytes[MFM__SEC_FIELDS] ? (const uint32_t *)(const void *)(b + start[MFM__SEC_FIELDS]) : NULL;
    d->values = bytes[MFM__SEC_VALUES] ? (const float *)(const void *)(b + start[MFM__SEC_VALUES]) : NULL;
    d->n_features = mfm__load_le32(b + 40);
    d->n_fields = mfm__load_le32(b + 44);
    /* A checksum guards against accidents, not against a crafted file: check the structure too. */
    if (d->row_offsets[n_rows] != nnz)
        return mfm__fail(err, MFM_ERR_BAD_FILE, "%s: the last row offset is %" PRIu64 " but the header says %" PRIu64 " non-zeros", name, d->row_offsets[n_rows], nnz);
    if ((st = mfm__check_csr(d, d->fields != NULL, 0, &info, err)) != MFM_OK) return mfm__name_error(err, MFM_ERR_BAD_FILE, name);
    if (d->n_features == 0) d->n_features = info.n_features; /* a header may leave the counts to the ids */
    if (d->n_fields == 0) d->n_fields = info.n_fields;
    if (d->labels) {
        uint32_t n_classes = 0;
        mfm_csr labels_only = *d;
        labels_only.weights = NULL; /* weights are checked where they are used */
        if ((st = mfm__check_targets(task, &labels_only, &n_classes, 0, err)) != MFM_OK) return mfm__name_error(err, st, name);
    }
    ds->info.format = MFM_FORMAT_BINARY;
    ds->info.n_rows = n_rows;
    ds->info.nnz = nnz;
    ds->info.n_features = d->n_features;
    ds->info.n_fields = d->n_fields;
    ds->info.has_labels = d->labels != NULL;
    ds->info.has_weights = d->weights != NULL;
    ds->info.has_fields = d->fields != NULL;
    ds->info.has_values = d->values != NULL;
    ds->info.source_bytes = mfm__load_le64(b + 48);
    ds->info.source_mtime = (int64_t)mfm__load_le64(b + 56);
    ds->info.source_digest = mfm__load_le64(b + 72); /* files of earlier versions have 0: no digest */
    ds->info.labels_task = (mfm_task)labels_task;
    return MFM_OK;
}

/* Words (4 or 8 bytes) as little-endian, through a small buffer when the machine is not. */
static void mfm__write_words(mfm__writer *w, const void *x, uint64_t n, int size) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    unsigned char b[4096];
    const unsigned char *p = (const unsigned char *)x;
    uint64_t i;
    size_t used = 0;
    for (i = 0; i < n; i++, p += size) {
        uint64_t v = 0;
        if (size == 4) { uint32_t u; memcpy(&u, p, 4); v = u; } else memcpy(&v, p, 8);
        mfm__store_le(b + used, v, size);
        used += (size_t)size;
        if (used == sizeof b) {
            mfm__write(w, b, used);
            used = 0;
        }
    }
    mfm__write(w, b, used);
#else
    mfm__write(w, x, (size_t)n * (size_t)size);
#endif
}

static mfm_status mfm__write_binary(const mfm_csr *d, const char *path, mfm_task labels_task, uint64_t source_bytes, int64_t source_mtime,
                                    uint64_t source_digest, mfm_error *err) {
    static const unsigned char zeros[64] = {0};
    unsigned char h[MFM__DATA_HEADER];
    uint64_t start[MFM__SECTIONS], bytes[MFM__SECTIONS], at = MFM__DATA_HEADER, nnz, total;
    const void *arrays[MFM__SECTIONS];
    mfm__data_info info;
    mfm__writer w;
    mfm_status st;
    uint32_t flags = 0;
    int s;
    if ((st = mfm__check_csr(d, d && d->fields != NULL, 0, &info, err)) != MFM_OK) return st;
    nnz = info.nnz;
    flags |= d->labels ? MFM__HAS_LABELS : 0;
    flags |= d->weights ? MFM__HAS_WEIGHTS : 0;
    flags |= d->fields && nnz ? MFM__HAS_FIELDS : 0;
    flags |= d->values && nnz ? MFM__HAS_VALUES : 0;
    total = mfm__data_layout(d->n_rows, nnz, flags, start, bytes);
    (void)total;
    memset(h, 0, sizeof h);
    memcpy(h, MFM__DATA_MAGIC, 8);
    mfm__store_le(h + 8, MFM__DATA_VERSION, 4);
    mfm__store_le(h + 12, MFM__ENDIAN_MARK, 4);
    mfm__store_le(h + 16, flags, 4);
    mfm__store_le(h + 20, MFM__DATA_HEADER, 4);
    mfm__store_le(h + 24, d->n_rows, 8);
    mfm__store_le(h + 32, nnz, 8);
    mfm__store_le(h + 40, d->n_features ? d->n_features : info.n_features, 4);
    mfm__store_le(h + 44, d->n_fields ? d->n_fields : info.n_fields, 4);
    mfm__store_le(h + 48, source_bytes, 8);
    mfm__store_le(h + 56, (uint64_t)source_mtime, 8);
    mfm__store_le(h + 64, d->labels ? (uint64_t)labels_task : 0, 4);
    mfm__store_le(h + 72, source_digest, 8);
    arrays[MFM__SEC_OFFSETS] = d->row_offsets;
    arrays[MFM__SEC_LABELS] = d->labels;
    arrays[MFM__SEC_WEIGHTS] = d->weights;
    arrays[MFM__SEC_FEATURES] = d->features;
    arrays[MFM__SEC_FIELDS] = d->fields;
    arrays[MFM__SEC_VALUES] = d->values;
    if ((st = mfm__writer_open(&w, path, err)) != MFM_OK) return st;
    mfm__writer_in_large_writes(&w); /* mapped when read, as models are */
    mfm__write(&w, h, sizeof h);
    for (s = 0; s < MFM__SECTIONS; s++) {
        static const uint64_t zero_offset = 0;
        if (!bytes[s]) continue;
        mfm__write(&w, zeros, (size_t)(start[s] - at));
        if (s == MFM__SEC_OFFSETS && d->n_rows == 0)
            mfm__write_words(&w, &zero_offset, 1, 8); /* an empty view may have no offsets array */
        else
            mfm__write_words(&w, arrays[s], bytes[s] / (s == MFM__SEC_OFFSETS ? 8 : 4), s == MFM__SEC_OFFSETS ? 8 : 4);
        at = start[s] + bytes[s];
    }
    mfm__write(&w, zeros, (size_t)((at + 7) / 8 * 8 - at));
    mfm__write_checksum(&w);
    return mfm__writer_commit(&w, err);
}

/* ============================================================================================
   >>data-io  Reading any dataset, and writing text
   ============================================================================================ */

/* What an input's first bytes make it: a binary dataset (*binary = 1) or text; a model file, or
   text where the options ask for binary, is refused. */
static mfm_status mfm__sniff(const unsigned char *b, uint64_t size, const char *name, const mfm_read_options *o, int *binary, mfm_error *err) {
    static const struct {
        const char *magic, *what, *cat; /* compressed files: the parser would quote binary bytes and never say why */
        size_t bytes;
    } packed[] = {{"\x1f\x8b", "gzip", "zcat", 2},
                  {"\x28\xb5\x2f\xfd", "zstd", "zstdcat", 4},
                  {"\xfd" "7zXZ\x00", "xz", "xzcat", 6},
                  {"BZh", "bzip2", "bzcat", 3}}; /* and a digit 1-9 */
    size_t i;
    if (size >= 8 && memcmp(b, MFM__MODEL_MAGIC, 8) == 0) return mfm__fail(err, MFM_ERR_BAD_FILE, "%s is a modern_fm model file, not a dataset", name);
    for (i = 0; i < sizeof packed / sizeof packed[0]; i++)
        if (size >= packed[i].bytes && memcmp(b, packed[i].magic, packed[i].bytes) == 0 && (i != 3 || (size >= 4 && b[3] >= '1' && b[3] <= '9')))
            return mfm__fail(err, MFM_ERR_BAD_FILE, "%s is %s-compressed: decompress it first, or pipe it in: %s %s | mfm ... -", name, packed[i].what, packed[i].cat,
                             name[0] == '<' ? "FILE" : name); /* <stdin>, <memory> */
    if (size >= 3 && b[0] == 0xEF && b[1] == 0xBB && b[2] == 0xBF)
        return mfm__fail(err, MFM_ERR_INVALID_DATA, "%s starts with a UTF-8 byte-order mark (EF BB BF); save it without one", name);
    *binary = size >= 8 && memcmp(b, MFM__DATA_MAGIC, 8) == 0 && o->format != MFM_FORMAT_LIBFFM && o->format != MFM_FORMAT_LIBSVM;
    if (!*binary && o->format == MFM_FORMAT_BINARY) return mfm__fail(err, MFM_ERR_BAD_FILE, "%s is not a modern_fm binary dataset (no MFM-DATA magic)", name);
    return MFM_OK;
}

static mfm_status mfm__dataset_from_memory(const unsigned char *b, uint64_t size, const char *name, const mfm_read_options *o, mfm_dataset **out,
                                           mfm_error *err) {
    mfm__text_reader rd;
    int binary;
    mfm_status st = mfm__sniff(b, size, name, o, &binary, err);
    if (st != MFM_OK) return st;
    if (binary) {
        mfm_dataset *ds = (mfm_dataset *)mfm__calloc(1, sizeof *ds);
        unsigned char *copy = (unsigned char *)mfm__alloc(size, 1); /* aligned for the arrays, and ours */
        if (!ds || !copy) {
            MFM_FREE(ds);
            MFM_FREE(copy);
            return mfm__fail(err, MFM_ERR_OUT_OF_MEMORY, "out of memory for %s (%" PRIu64 " bytes)", name, size);
        }
        memcpy(copy, b, (size_t)size);
        ds->owned[0] = copy;
        if ((st = mfm__data_from_binary(ds, copy, size, name, o->task, err)) != MFM_OK) {
            mfm_dataset_free(ds);
            return st;
        }
        *out = ds;
        return mfm__ok(err);
    }
    if ((st = mfm__reader_start(&rd, name, o, err)) == MFM_OK && (st = mfm__parse_chunk(&rd, (const char *)b, (const char *)b + size, err)) == MFM_OK)
        st = mfm__reader_finish(&rd, out, err);
    mfm__reader_free(&rd);
    return st;
}

static mfm_status mfm__check_read_args(const mfm_read_options **o, mfm_read_options *defaults, mfm_dataset **out, mfm_error *err) {
    if (!out) return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "the dataset output pointer is NULL");
    *out = NULL;
    if (!*o) {
        memset(defaults, 0, sizeof *defaults);
        *o = defaults;
    }
    if ((unsigned)(*o)->format >= MFM_FORMAT_COUNT) return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "read options: format %d is not a known format", (int)(*o)->format);
    if ((unsigned)(*o)->task >= MFM_TASK_COUNT) return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "read options: task %d is not a known task", (int)(*o)->task);
    if ((*o)->n_threads < 0)
        return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "read options: n_threads = %d must not be negative (0 means every core)", (*o)->n_threads);
    return MFM_OK;
}

MFMDEF mfm_status mfm_dataset_parse(const void *bytes, size_t size, const char *name, const mfm_read_options *o, mfm_dataset **out, mfm_error *err) {
    mfm_read_options defaults;
    mfm_status st = mfm__check_read_args(&o, &defaults, out, err);
    if (st != MFM_OK) return st;
    if (!bytes && size) return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "mfm_dataset_parse: the bytes are NULL");
    return mfm__dataset_from_memory((const unsigned char *)(bytes ? bytes : ""), size, name ? name : "<memory>", o, out, err);
}

MFMDEF mfm_status mfm_dataset_read(const char *path, const mfm_read_options *o, mfm_dataset **out, mfm_error *err) {
    mfm_read_options defaults;
    mfm__text_reader rd;
    unsigned char first[8];
    size_t n_first;
    uint64_t total;
    int64_t mtime;
    int from_stdin, binary;
    FILE *f;
    mfm_status st = mfm__check_read_args(&o, &defaults, out, err);
    if (st != MFM_OK) return st;
    if (!path) return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "mfm_dataset_read: the path is NULL");
    from_stdin = strcmp(path, "-") == 0;
    f = from_stdin ? stdin : fopen(path, "rb");
    if (!f) return mfm__fail(err, MFM_ERR_IO, "cannot open %s: %s", path, mfm__os_error());
    if (from_stdin) path = "<stdin>";
    n_first = fread(first, 1, sizeof first, f);
    if ((st = mfm__sniff(first, n_first, path, o, &binary, err)) != MFM_OK) {
        if (!from_stdin) fclose(f);
        return st;
    }
    if (binary) {
        mfm_dataset *ds;
        if (from_stdin) { /* a pipe cannot be mapped: read it all, then use the bytes */
            uint64_t cap = 1u << 20, used = 8;
            unsigned char *b = (unsigned char *)mfm__alloc(cap, 1);
            int short_of_memory = !b;
            while (!short_of_memory) {
                size_t got;
                if (used == cap) {
                    if (!mfm__resize((void **)&b, cap * 2, 1)) short_of_memory = 1;
                    else cap *= 2;
                    continue;
                }
                if ((got = fread(b + used, 1, (size_t)(cap - used), f)) == 0) break;
                used += got;
            }
            if (short_of_memory) {
                MFM_FREE(b);
                return mfm__fail(err, MFM_ERR_OUT_OF_MEMORY, "out of memory reading a binary dataset from standard input (%" PRIu64 " bytes so far)", used);
            }
            memcpy(b, first, 8);
            st = mfm__dataset_from_memory(b, used, path, o, out, err);
            MFM_FREE(b);
            return st;
        }
        fclose(f);
        ds = (mfm_dataset *)mfm__calloc(1, sizeof *ds);
        if (!ds) return mfm__fail(err, MFM_ERR_OUT_OF_MEMORY, "out of memory for a dataset");
        if ((st = mfm__map(path, &ds->mapping, err)) == MFM_OK)
            st = mfm__data_from_binary(ds, ds->mapping.bytes, ds->mapping.size, path, o->task, err);
        if (st != MFM_OK) {
            mfm_dataset_free(ds);
            return st;
        }
        *out = ds;
        return mfm__ok(err);
    }
    mfm__file_stamp(from_stdin ? NULL : path, &total, &mtime);
    if ((st = mfm__reader_start(&rd, path, o, err)) == MFM_OK && (st = mfm__read_text_stream(&rd, f, first, n_first, total, o, err)) == MFM_OK)
        st = mfm__reader_finish(&rd, out, err);
    mfm__reader_free(&rd);
    if (!from_stdin) fclose(f);
    return st;
}

/* The fewest significant digits that read back to the same float ("1", "0.5", "0.1"). */
static int mfm__format_float(char *buf, float x) {
    int digits, n = 0;
    if (x > -1e7f && x < 1e7f && x == (float)(int32_t)x && !(x == 0 && 1 / x < 0)) return sprintf(buf, "%ld", (long)x);
    for (digits = 6; digits <= 9; digits++) {
        char *stop;
        n = sprintf(buf, "%.*g", digits, (double)x);
        if (strtof(buf, &stop) == x) break;
    }
    return n;
}

static char *mfm__put_u32(char *p, uint32_t x) {
    char tmp[10];
    int n = 0;
    do tmp[n++] = (char)('0' + x % 10);
    while (x /= 10);
    while (n) *p++ = tmp[--n];
    return p;
}

static mfm_status mfm__write_text(const mfm_csr *d, const char *path, int ffm, mfm_error *err) {
    enum { FLUSH_AT = 1 << 16 };
    char *buf;
    mfm__data_info info;
    mfm__writer w;
    mfm_status st;
    uint64_t r, j;
    size_t used = 0;
    if (ffm && d && !d->fields && d->n_rows && d->row_offsets && d->row_offsets[d->n_rows])
        return mfm__fail(err, MFM_ERR_INVALID_DATA, "libffm text needs a field for every non-zero, but the data has none (data.fields is NULL): write libsvm");
    if ((st = mfm__check_csr(d, ffm, 0, &info, err)) != MFM_OK) return st;
    for (r = 0; r < d->n_rows; r++) {
        if (d->labels && !mfm__finite(d->labels[r])) return mfm__fail(err, MFM_ERR_INVALID_DATA, "the label of row %" PRIu64 " (1-based) is not a finite number", r + 1);
        if (!d->labels && d->row_offsets[r] == d->row_offsets[r + 1])
            return mfm__fail(err, MFM_ERR_INVALID_DATA, "row %" PRIu64 " (1-based) has neither a label nor a non-zero: as text it would be a blank line, which reads as no row", r + 1);
    }
    buf = (char *)mfm__alloc(FLUSH_AT + 64, 1);
    if (!buf) return mfm__fail(err, MFM_ERR_OUT_OF_MEMORY, "out of memory for a write buffer");
    if ((st = mfm__writer_open(&w, path, err)) != MFM_OK) {
        MFM_FREE(buf);
        return st;
    }
    for (r = 0; r < d->n_rows; r++) {
        int sep = 0;
        if (used >= FLUSH_AT) { /* a label, a token or a newline each fit in the slack */
            mfm__write(&w, buf, used);
            used = 0;
        }
        if (d->labels) {
            used += (size_t)mfm__format_float(buf + used, d->labels[r]);
            sep = 1;
        }
        for (j = d->row_offsets[r]; j < d->row_offsets[r + 1]; j++) {
            char *p = buf + used;
            if (sep) *p++ = ' ';
            sep = 1;
            if (ffm) {
                p = mfm__put_u32(p, d->fields[j]);
                *p++ = ':';
            }
            p = mfm__put_u32(p, d->features[j]);
            *p++ = ':';
            if (d->values)
                p += mfm__format_float(p, d->values[j]);
            else
                *p++ = '1';
            used = (size_t)(p - buf);
            if (used >= FLUSH_AT) {
                mfm__write(&w, buf, used);
                used = 0;
            }
        }
        buf[used++] = '\n';
    }
    mfm__write(&w, buf, used);
    MFM_FREE(buf);
    return mfm__writer_commit(&w, err);
}

MFMDEF mfm_status mfm_dataset_write(const mfm_csr *d, const char *path, mfm_format format, mfm_error *err) {
    switch (format) {
    case MFM_FORMAT_LIBFFM:
    case MFM_FORMAT_LIBSVM:
        return mfm__write_text(d, path, format == MFM_FORMAT_LIBFFM, err);
    case MFM_FORMAT_BINARY:
        return mfm__write_binary(d, path, MFM_TASK_DEFAULT, 0, 0, 0, err);
    default:
        return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "mfm_dataset_write: format %d is not libffm, libsvm or binary", (int)format);
    }
}

MFMDEF mfm_status mfm_dataset_write_cache(const mfm_dataset *ds, const char *path, const char *source_path, mfm_error *err) {
    uint64_t size;
    int64_t mtime;
    if (!ds) return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "mfm_dataset_write_cache: the dataset is NULL");
    mfm__file_stamp(source_path, &size, &mtime);
    return mfm__write_binary(&ds->csr, path, ds->info.labels_task, size, mtime, ds->info.source_digest, err);
}

MFMDEF mfm_status mfm_file_digest(const char *path, uint64_t *digest, mfm_error *err) {
    enum { BUFFER = 1 << 20 };
    unsigned char *buf;
    mfm__hash h;
    size_t got;
    int failed;
    FILE *f;
    if (!path || !digest) return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "mfm_file_digest: the path or the digest is NULL");
    *digest = 0;
    if (strcmp(path, "-") == 0) return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "mfm_file_digest: standard input can be read only once");
    if (!(f = fopen(path, "rb"))) return mfm__fail(err, MFM_ERR_IO, "cannot open %s: %s", path, mfm__os_error());
    if (!(buf = (unsigned char *)mfm__alloc(BUFFER, 1))) {
        fclose(f);
        return mfm__fail(err, MFM_ERR_OUT_OF_MEMORY, "out of memory for a read buffer");
    }
    mfm__hash_init(&h);
    while ((got = fread(buf, 1, BUFFER, f)) > 0) mfm__hash_update(&h, buf, got);
    failed = ferror(f);
    fclose(f);
    MFM_FREE(buf);
    if (failed) return mfm__fail(err, MFM_ERR_IO, "reading %s failed: %s", path, mfm__os_error());
    *digest = mfm__hash_final(&h);
    return mfm__ok(err);
}

/* ============================================================================================
   >>lanes  Four floats at a time: SSE2 where the CPU has it, the same arithmetic in C elsewhere
   ============================================================================================ */

/* Every lane does IEEE single-precision operations, so both builds give the same bits. Loops
   over k take four factors at a time, then the rest one by one. mfm__f4_load_evens(p): p[0],
   p[2], p[4], p[6] (the first float of each of four pairs). */
#if defined(MFM__SSE2)
typedef __m128 mfm__f4;
#define mfm__f4_load(p) _mm_loadu_ps(p)
#define mfm__f4_store(p, a) _mm_storeu_ps(p, a)
#define mfm__f4_set1(x) _mm_set1_ps(x)
#define mfm__f4_set4(x0, x1, x2, x3) _mm_setr_ps(x0, x1, x2, x3)
#define mfm__f4_add(a, b) _mm_add_ps(a, b)
#define mfm__f4_sub(a, b) _mm_sub_ps(a, b)
#define mfm__f4_mul(a, b) _mm_mul_ps(a, b)
#define mfm__f4_div(a, b) _mm_div_ps(a, b)
#define mfm__f4_sqrt(a) _mm_sqrt_ps(a)
#define mfm__f4_load_evens(p) _mm_shuffle_ps(_mm_loadu_ps(p), _mm_loadu_ps((p) + 4), _MM_SHUFFLE(2, 0, 2, 0))
#else
typedef struct mfm__f4 {
    float v[4];
} mfm__f4;
#define MFM__F4_MAP(expr)        \
    mfm__f4 r;                   \
    int i;                       \
    for (i = 0; i < 4; i++) r.v[i] = expr; \
    return r
static mfm__f4 mfm__f4_load(const float *p) { MFM__F4_MAP(p[i]); }
static void mfm__f4_store(float *p, mfm__f4 a) { memcpy(p, a.v, sizeof a.v); }
static mfm__f4 mfm__f4_set1(float x) { MFM__F4_MAP(x); }
static mfm__f4 mfm__f4_set4(float x0, float x1, float x2, float x3) {
    mfm__f4 r;
    r.v[0] = x0, r.v[1] = x1, r.v[2] = x2, r.v[3] = x3;
    return r;
}
static mfm__f4 mfm__f4_add(mfm__f4 a, mfm__f4 b) { MFM__F4_MAP(a.v[i] + b.v[i]); }
static mfm__f4 mfm__f4_sub(mfm__f4 a, mfm__f4 b) { MFM__F4_MAP(a.v[i] - b.v[i]); }
static mfm__f4 mfm__f4_mul(mfm__f4 a, mfm__f4 b) { MFM__F4_MAP(a.v[i] * b.v[i]); }
static mfm__f4 mfm__f4_div(mfm__f4 a, mfm__f4 b) { MFM__F4_MAP(a.v[i] / b.v[i]); }
static mfm__f4 mfm__f4_sqrt(mfm__f4 a) { MFM__F4_MAP(sqrtf(a.v[i])); }
static mfm__f4 mfm__f4_load_evens(const float *p) { MFM__F4_MAP(p[2 * i]); }
#undef MFM__F4_MAP
#endif

/* (a0 + a1) + (a2 + a3), in this order in both builds. */
static float mfm__f4_sum(mfm__f4 a) {
    float v[4];
    mfm__f4_store(v, a);
    return (v[0] + v[1]) + (v[2] + v[3]);
}

/* The four sums mfm__f4_sum(p0) .. mfm__f4_sum(p3) in lanes, in the same order. */
static mfm__f4 mfm__f4_sum4(mfm__f4 p0, mfm__f4 p1, mfm__f4 p2, mfm__f4 p3) {
#if defined(MFM__SSE2) /* transposed: lane j of A holds p_j's first value, of B its second, ... */
    const __m128 t0 = _mm_unpacklo_ps(p0, p1), t1 = _mm_unpackhi_ps(p0, p1), t2 = _mm_unpacklo_ps(p2, p3), t3 = _mm_unpackhi_ps(p2, p3);
    const __m128 A = _mm_movelh_ps(t0, t2), B = _mm_movehl_ps(t2, t0), C = _mm_movelh_ps(t1, t3), D = _mm_movehl_ps(t3, t1);
    return _mm_add_ps(_mm_add_ps(A, B), _mm_add_ps(C, D));
#else
    return mfm__f4_set4(mfm__f4_sum(p0), mfm__f4_sum(p1), mfm__f4_sum(p2), mfm__f4_sum(p3));
#endif
}

/* sum_t a_t b_t: lanes of four, then the rest in order. */
static float mfm__dot(const float *a, const float *b, int k) {
    mfm__f4 acc = mfm__f4_set1(0.0f);
    float rest = 0;
    int t = 0;
    for (; t + 4 <= k; t += 4) acc = mfm__f4_add(acc, mfm__f4_mul(mfm__f4_load(a + t), mfm__f4_load(b + t)));
    for (; t < k; t++) rest += a[t] * b[t];
    return mfm__f4_sum(acc) + rest;
}

/* p_j += a[t ..] b_j[t ..], LANES factors at a time over all k: four dot products' lanes side by
   side (VEC, LOAD, ADD, MUL: the lanes' type and operations). */
#define MFM__DOTS_LANES(VEC, LANES, LOAD, ADD, MUL)         \
    for (t = 0; t < k; t += LANES) {                        \
        const VEC a_ = LOAD(a + t);                         \
        p0 = ADD(p0, MUL(a_, LOAD(b0 + t)));                \
        p1 = ADD(p1, MUL(a_, LOAD(b1 + t)));                \
        p2 = ADD(p2, MUL(a_, LOAD(b2 + t)));                \
        p3 = ADD(p3, MUL(a_, LOAD(b3 + t)));                \
    }

/* mfm__dot(a, b_j, k), j = 0 .. 3, in lanes, bit for bit, for k a multiple of 4: four sums
   side by side, so that four chains of additions run at once. */
MFM__INLINE static mfm__f4 mfm__dot4(const float *a, const float *b0, const float *b1, const float *b2, const float *b3, int k) {
    mfm__f4 p0 = mfm__f4_set1(0.0f), p1 = p0, p2 = p0, p3 = p0;
    int t;
    MFM__DOTS_LANES(mfm__f4, 4, mfm__f4_load, mfm__f4_add, mfm__f4_mul)
    return mfm__f4_add(mfm__f4_sum4(p0, p1, p2, p3), mfm__f4_set1(0.0f)); /* mfm__dot adds its (empty) rest */
}

/* Eight lanes: AVX, in functions compiled for it (GCC and Clang on x86) and called only when the
   CPU and the OS have it. A core divides and takes square roots eight floats at a time in the
   time it takes four, and those two bound AdaGrad's steps. The operations are the four-lane
   ones lane by lane, so either width gives the same bits; only steps of independent
   coordinates use them, never a sum's order. MFM_SIMD=sse2 in the environment keeps a fit
   at four lanes. */
#if defined(MFM__SSE2) && (defined(__GNUC__) || defined(__clang__)) && !defined(MFM_NO_AVX)
#include <immintrin.h>
#define MFM__AVX 1
#define MFM__AVX_FN __attribute__((target("avx")))
#define MFM__AVX_INLINE __attribute__((target("avx"), always_inline)) inline
#endif

/* Asks for the line at p, for writing, into every cache level; MFM__PREFETCH_READ the same for
   reading; MFM__PREFETCH_L2 as far as the core's second level (the first level's few misses in
   flight are then left to the lines needed first), for reading: where the target has PREFETCHW
   a write prefetch goes to the first level whatever its hint. Prediction asks to read: a write
   prefetch takes the line from every other core that holds it, and prediction's threads read
   the same common features' lines. MFM__PREFETCH_FOR(p, write) picks one (write a constant). */
#if defined(__GNUC__) || defined(__clang__)
#define MFM__PREFETCH(p) __builtin_prefetch((p), 1, 3)
#define MFM__PREFETCH_READ(p) __builtin_prefetch((p), 0, 3)
#define MFM__PREFETCH_L2(p) __builtin_prefetch((p), 0, 2)
#elif defined(MFM__SSE2)
#define MFM__PREFETCH(p) _mm_prefetch((const char *)(p), _MM_HINT_T0)
#define MFM__PREFETCH_READ(p) _mm_prefetch((const char *)(p), _MM_HINT_T0)
#define MFM__PREFETCH_L2(p) _mm_prefetch((const char *)(p), _MM_HINT_T1)
#else
#define MFM__PREFETCH(p) ((void)(p))
#define MFM__PREFETCH_READ(p) ((void)(p))
#define MFM__PREFETCH_L2(p) ((void)(p))
#endif
#define MFM__PREFETCH_FOR(p, write) do { if (write) MFM__PREFETCH(p); else MFM__PREFETCH_READ(p); } while (0)

static int mfm__use_avx(void) {
#if defined(MFM__AVX)
    const char *simd = getenv("MFM_SIMD");
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx") && !(simd && strcmp(simd, "sse2") == 0);
#else
    return 0;
#endif
}

/* ============================================================================================
   >>score  The score of one row under FM, FFM and FwFM
   ============================================================================================ */

typedef struct mfm__row {
    uint32_t z;            /* non-zeros */
    const uint32_t *feat;  /* z feature ids */
    const uint32_t *field; /* z field ids (NULL for FM) */
    const float *x;        /* z values (a buffer of ones when the data has none) */
} mfm__row;

/* Row r of the data. With params.normalize_rows its values are scaled into `scaled` (room for
   the longest row) so that their squares sum to 1 (a row of zeros stays as it is); callers
   that only look at ids pass scaled = NULL. *factor (may be NULL): what the values were
   multiplied by. */
static mfm__row mfm__get_row_scaled(const mfm_model *m, const mfm_csr *d, uint64_t r, const float *ones, float *scaled, float *factor) {
    mfm__row row;
    uint64_t lo = d->row_offsets[r];
    row.z = (uint32_t)(d->row_offsets[r + 1] - lo);
    row.feat = d->features + lo;
    row.field = d->fields ? d->fields + lo : NULL;
    row.x = d->values ? d->values + lo : ones;
    if (m->params.normalize_rows > 0 && scaled && row.z) {
        double squares = 0;
        float inv;
        uint32_t a;
        for (a = 0; a < row.z; a++) squares += (double)row.x[a] * row.x[a];
        inv = squares > 0 ? (float)(1.0 / sqrt(squares)) : 1.0f;
        for (a = 0; a < row.z; a++) scaled[a] = row.x[a] * inv;
        row.x = scaled;
        if (factor) *factor = inv;
    }
    return row;
}

static mfm__row mfm__get_row(const mfm_model *m, const mfm_csr *d, uint64_t r, const float *ones, float *scaled) {
    return mfm__get_row_scaled(m, d, r, ones, scaled, NULL);
}

/* Feature id's w in class c: where it lies, and its value (a float, or a half of a mapped
   float16 file). */
static const void *mfm__w_at(const mfm_model *m, uint32_t c, uint64_t id) {
    const mfm__table *W = &m->t[MFM_TENSOR_W];
    if (W->halves) return W->halves + (c * W->n_blocks + id) * W->stride;
    return mfm__block(m, MFM_TENSOR_W, c, id);
}

MFM__INLINE static float mfm__w(const mfm_model *m, uint32_t c, uint64_t id) {
    const void *w = mfm__w_at(m, c, id);
    return m->t[MFM_TENSOR_W].halves ? mfm__half_to_float(*(const uint16_t *)w) : *(const float *)w;
}

/* FFM slot (i, g): the vector feature i uses against field g. */
static const float *mfm__ffm_slot(const mfm_model *m, uint32_t c, uint32_t i, uint32_t g) {
    return mfm__block(m, MFM_TENSOR_V, c, (uint64_t)i * m->n_fields + g);
}

/* FwFM's r(a, b), read in its upper triangle (m->pair_id). */
static float mfm__fwfm_r(const mfm_model *m, uint32_t c, uint32_t fa, uint32_t fb) {
    return *mfm__block(m, MFM_TENSOR_R, c, m->pair_id[(uint64_t)fa * m->n_fields + fb]);
}

/* The part of each FFM feature's vectors that a row's fields cover: a feature's F slots lie side
   by side, so from the lowest field's slot to the end of the highest's. Training asks for the
   next row's spans one feature at a time inside this row's loops, batch 1's steps or one
   worker's sums (mfm__ffm_ask): all at once, some 20 lines a feature, they would fill the core's
   queue of outstanding misses while the row's own loads wait behind them. Prediction, whose
   row is a short score, asks for them all at once (mfm__prefetch_row): asked for inside the
   score, they made it 1.4-1.8x slower (docs/PERFORMANCE.md). */
typedef struct mfm__ffm_span {
    const uint32_t *feat; /* the row's features; NULL for no row */
    uint32_t z;
    uint64_t feature_bytes; /* of a feature's F slots in V: floats, or a float16 model's halves */
    uint64_t first;         /* bytes from a feature's first slot to the lowest field's */
    uint64_t bytes;         /* 0 where the fields lie far apart: the span would be mostly waste */
} mfm__ffm_span;

static mfm__ffm_span mfm__ffm_span_of(const mfm_model *m, const mfm_csr *d, uint64_t r) {
    const mfm__table *V = &m->t[MFM_TENSOR_V];
    const uint64_t lo = d->row_offsets[r], hi = d->row_offsets[r + 1], value_bytes = V->halves ? sizeof(uint16_t) : sizeof(float), slot_bytes = V->stride * value_bytes;
    mfm__ffm_span s;
    uint32_t low, high;
    uint64_t j;
    memset(&s, 0, sizeof s);
    s.feat = d->features + lo, s.z = (uint32_t)(hi - lo);
    if (m->params.model != MFM_MODEL_FFM || m->params.linear_only || hi == lo) return s;
    for (low = high = d->fields[lo], j = lo + 1; j < hi; j++) {
        if (d->fields[j] < low) low = d->fields[j];
        if (d->fields[j] > high) high = d->fields[j];
    }
    s.feature_bytes = V->feature_stride * value_bytes, s.first = low * slot_bytes;
    if (high - low < 4 * (hi - lo)) s.bytes = ((uint64_t)high - low + 1) * slot_bytes;
    return s;
}

/* The span of the row's a-th feature in `table` (one class's V); nothing past the row's end. Its
   first line comes into every level, the rest into the second: a row asks for some 200 lines
   at once, and the first level holds only a few misses in flight (asked for into it, each
   line waits for one to free; one-row prediction on the 2-core VM took a third less time).
   mfm__ffm_ask_after_first: the lines of the span at p, `bytes` long, after its first. */
MFM__INLINE static void mfm__ffm_ask_after_first(const char *p, uint64_t bytes) {
    uint64_t at;
    for (at = 64; at < bytes; at += 64) MFM__PREFETCH_L2(p + at);
    MFM__PREFETCH_L2(p + bytes - 1); /* a span that starts inside a line ends one line further */
}
MFM__INLINE static void mfm__ffm_ask(const void *table, const mfm__ffm_span *s, uint32_t a) {
    const char *p;
    if (!s || a >= s->z || !s->bytes) return;
    p = (const char *)table + s->feat[a] * s->feature_bytes + s->first;
    MFM__PREFETCH(p);
    mfm__ffm_ask_after_first(p, s->bytes);
}

/* ... and those of its features from the a-th on: what a shorter row's pair loop left. */
MFM__INLINE static void mfm__ffm_ask_rest(const void *table, const mfm__ffm_span *s, uint32_t a) {
    for (; s && a < s->z; a++) mfm__ffm_ask(table, s, a);
}

/* FFM's pair term: every pair adds into the same four lanes, and one sum ends it. The body of a
   function with mfm__ffm_pairs's parameters over V's elements of type T at TABLE (a class's V
   follows the last's n_features records), LOAD4 and ONE giving four and one of them as floats:
   a float16 model (mfm_model_save_half) is read in place, each half widened where it is used,
   as exact floats and in the same order, so that it gives the bits of a float32 model holding
   the same values. The records and field offsets of a row's first MFM__FFM_AHEAD non-zeros
   (every real row's) are worked out once, not at each pair: two multiplies a pair held a core
   that issues them on one port (one row from 16 threads on the 16-core host: p50 2.9-3.4 us
   against 3.4-3.9; docs/PERFORMANCE.md). The same products in the same order: the same bits. */
#define MFM__FFM_AHEAD 256
#define MFM__FFM_PAIR(T, LOAD4, ONE, VA, VB, XB)                                                               \
    {                                                                                                          \
        const T *const va = (VA), *const vb = (VB);                                                            \
        const float xx = row->x[a] * (XB);                                                                     \
        const mfm__f4 xx4 = mfm__f4_set1(xx);                                                                  \
        for (t = 0; t + 4 <= k; t += 4) acc4 = mfm__f4_add(acc4, mfm__f4_mul(mfm__f4_mul(LOAD4(va + t), LOAD4(vb + t)), xx4)); \
        for (; t < k; t++) rest += ONE(va[t]) * ONE(vb[t]) * xx;                                               \
    }
#define MFM__FFM_PAIRS(T, TABLE, LOAD4, ONE)                                                                   \
    const mfm__table *V = &m->t[MFM_TENSOR_V];                                                                 \
    const uint64_t stride = V->stride, per_feature = V->feature_stride;                                        \
    const T *const table = (TABLE) + (uint64_t)c * m->n_features * per_feature;                                \
    const uint32_t ahead = row->z < MFM__FFM_AHEAD ? row->z : MFM__FFM_AHEAD;                                  \
    const T *record[MFM__FFM_AHEAD];                                                                           \
    uint64_t field_at[MFM__FFM_AHEAD];                                                                         \
    mfm__f4 acc4 = mfm__f4_set1(0.0f);                                                                         \
    float rest = 0;                                                                                            \
    uint32_t a, b;                                                                                             \
    int t;                                                                                                     \
    for (b = 0; b < ahead; b++) record[b] = table + row->feat[b] * per_feature, field_at[b] = row->field[b] * stride; \
    for (a = 0; a < row->z; a++) {                                                                             \
        const T *const base_a = table + row->feat[a] * per_feature;                                            \
        const uint64_t field_a = row->field[a] * stride;                                                       \
        for (b = a + 1; b < ahead; b++) MFM__FFM_PAIR(T, LOAD4, ONE, base_a + field_at[b], record[b] + field_a, row->x[b]) \
        for (; b < row->z; b++) /* past MFM__FFM_AHEAD */                                                      \
            MFM__FFM_PAIR(T, LOAD4, ONE, base_a + row->field[b] * stride, table + row->feat[b] * per_feature + field_a, row->x[b]) \
    }                                                                                                          \
    return mfm__f4_sum(acc4) + rest;

#define MFM__FLOAT(x) (x)
MFM__INLINE static float mfm__ffm_pairs(const mfm_model *m, uint32_t c, const mfm__row *row, int k) {
    MFM__FFM_PAIRS(float, V->data, mfm__f4_load, MFM__FLOAT)
}

#define MFM__HALVES4(p) mfm__f4_set4(mfm__half_to_float((p)[0]), mfm__half_to_float((p)[1]), mfm__half_to_float((p)[2]), mfm__half_to_float((p)[3]))
static float mfm__ffm_pairs_halves(const mfm_model *m, uint32_t c, const mfm__row *row, int k) {
    MFM__FFM_PAIRS(uint16_t, V->halves, MFM__HALVES4, mfm__half_to_float)
}

#if defined(MFM__F16C) /* four halves to four floats in one instruction */
#define MFM__HALVES4_F16C(p) _mm_cvtph_ps(_mm_loadl_epi64((const __m128i *)(const void *)(p)))
__attribute__((target("avx,f16c"), always_inline)) inline static float mfm__ffm_pairs_f16c_k(const mfm_model *m, uint32_t c, const mfm__row *row, int k) {
    MFM__FFM_PAIRS(uint16_t, V->halves, MFM__HALVES4_F16C, mfm__half_to_float)
}

/* k = 4 (the common case) gets its own copy, with the k-loop unrolled. */
__attribute__((target("avx,f16c"))) static float mfm__ffm_pairs_f16c(const mfm_model *m, uint32_t c, const mfm__row *row, int k) {
    return k == 4 ? mfm__ffm_pairs_f16c_k(m, c, row, 4) : mfm__ffm_pairs_f16c_k(m, c, row, k);
}
#endif

/* FwFM's weight of the pair (a, b) is W_ab = (x_a x_b) r(fa, fb), multiplied in that order
   wherever it is computed (the score, mfm__fwfm_weights), so that every path has its bits. */

/* Whether a row holds every field once, in order (z = F, field[a] = a): the Criteo and Avazu
   shape. Then the pairs (a, b > a) of a are R's consecutive blocks a F + a + 1 .. a F + F - 1. */
#define MFM__FWFM_DENSE_MAX 256 /* longer dense rows take the general path */
static int mfm__fwfm_dense(const mfm_model *m, const mfm__row *row) {
    uint32_t a;
    if (row->z != m->n_fields || row->z > MFM__FWFM_DENSE_MAX) return 0;
    for (a = 0; a < row->z; a++)
        if (row->field[a] != a) return 0;
    return 1;
}

/* <v_a, v_b_j> for four partners, in lanes. Where k is a multiple of 8 the order is eight-lane
   (mfm__dots4_wide's): lanes t mod 8 summed from 0 over the groups of eight factors, then
   ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)); four lanes keep it as two halves of four. Other
   k: mfm__dot4 where k is a multiple of 4, else mfm__dot one by one. */
MFM__INLINE static mfm__f4 mfm__dots4(const float *a, const float *b0, const float *b1, const float *b2, const float *b3, int k) {
    if (k % 8 == 0) {
        const float *const b[4] = {b0, b1, b2, b3};
        mfm__f4 lo[4], hi[4];
        int j, t;
        for (j = 0; j < 4; j++) {
            lo[j] = hi[j] = mfm__f4_set1(0.0f);
            for (t = 0; t < k; t += 8) {
                lo[j] = mfm__f4_add(lo[j], mfm__f4_mul(mfm__f4_load(a + t), mfm__f4_load(b[j] + t)));
                hi[j] = mfm__f4_add(hi[j], mfm__f4_mul(mfm__f4_load(a + t + 4), mfm__f4_load(b[j] + t + 4)));
            }
        }
        return mfm__f4_add(mfm__f4_sum4(lo[0], lo[1], lo[2], lo[3]), mfm__f4_sum4(hi[0], hi[1], hi[2], hi[3]));
    }
    if (k % 4 == 0) return mfm__dot4(a, b0, b1, b2, b3, k);
    return mfm__f4_set4(mfm__dot(a, b0, k), mfm__dot(a, b1, k), mfm__dot(a, b2, k), mfm__dot(a, b3, k));
}

#if defined(MFM__AVX)
/* mfm__dots4 for k a multiple of 8, eight lanes wide. */
MFM__AVX_INLINE static __m128 mfm__dots4_wide(const float *a, const float *b0, const float *b1, const float *b2, const float *b3, int k) {
    __m256 p0 = _mm256_setzero_ps(), p1 = p0, p2 = p0, p3 = p0, h;
    int t;
    MFM__DOTS_LANES(__m256, 8, _mm256_loadu_ps, _mm256_add_ps, _mm256_mul_ps)
    h = _mm256_hadd_ps(_mm256_hadd_ps(p0, p1), _mm256_hadd_ps(p2, p3)); /* lane j: partner j's (l0 + l1) + (l2 + l3); lane 4 + j: its upper half's */
    return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}
#endif

/* A batch of one row keeps, per class, its FwFM pair weights and dots for the step
   (mfm__fwfm_row_update): W, z rows of mfm__kept_stride(z) floats holding every weight of the row
   (W_ab = W_ba, 0 on the diagonal), then D, rows of the same stride with the dots <v_a, v_b> of
   b > a, then the row's z vectors of k factors side by side (read without a pointer each). Rows
   are padded to whole groups of eight lanes, whose padding is never read into a result (it
   holds zeros, or numbers an earlier row kept there). */
static uint64_t mfm__kept_stride(uint64_t z) { return (z + 7) & ~(uint64_t)7; }
static uint64_t mfm__kept_floats(uint64_t z, int k) { return 2 * z * mfm__kept_stride(z) + z * (uint64_t)k; }

#if defined(MFM__AVX)
/* Eight rows of eight lanes, transposed in registers: q[j] lane i becomes q[i] lane j. GCC
   keeps an array in registers only where every index is a constant, hence the unrolled
   loads and stores below. */
MFM__AVX_INLINE static void mfm__transpose8(__m256 q[8]) {
    const __m256 t0 = _mm256_unpacklo_ps(q[0], q[1]), t1 = _mm256_unpackhi_ps(q[0], q[1]), t2 = _mm256_unpacklo_ps(q[2], q[3]);
    const __m256 t3 = _mm256_unpackhi_ps(q[2], q[3]), t4 = _mm256_unpacklo_ps(q[4], q[5]), t5 = _mm256_unpackhi_ps(q[4], q[5]);
    const __m256 t6 = _mm256_unpacklo_ps(q[6], q[7]), t7 = _mm256_unpackhi_ps(q[6], q[7]);
    const __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE), s2 = _mm256_shuffle_ps(t1, t3, 0x44);
    const __m256 s3 = _mm256_shuffle_ps(t1, t3, 0xEE), s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    const __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    q[0] = _mm256_permute2f128_ps(s0, s4, 0x20), q[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
    q[2] = _mm256_permute2f128_ps(s2, s6, 0x20), q[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
    q[4] = _mm256_permute2f128_ps(s0, s4, 0x31), q[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
    q[6] = _mm256_permute2f128_ps(s2, s6, 0x31), q[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

/* q[i] = the eight floats at p + i * stride, i < 8. */
MFM__AVX_INLINE static void mfm__load8x8(__m256 q[8], const float *p, uint64_t stride) {
    q[0] = _mm256_loadu_ps(p), q[1] = _mm256_loadu_ps(p + stride), q[2] = _mm256_loadu_ps(p + 2 * stride), q[3] = _mm256_loadu_ps(p + 3 * stride);
    q[4] = _mm256_loadu_ps(p + 4 * stride), q[5] = _mm256_loadu_ps(p + 5 * stride), q[6] = _mm256_loadu_ps(p + 6 * stride), q[7] = _mm256_loadu_ps(p + 7 * stride);
}

/* Row i of p (stride apart) takes q[i], for the rows i < n; unrolled by hand (mfm__transpose8). */
#define MFM__STORE_ROW(p, stride, q, n, i) \
    if ((n) > (i)) _mm256_storeu_ps((p) + (uint64_t)(i) * (stride), q[i]);
#define MFM__STORE8X8(p, stride, q, n)                                                                                                    \
    do {                                                                                                                                  \
        MFM__STORE_ROW(p, stride, q, n, 0) MFM__STORE_ROW(p, stride, q, n, 1) MFM__STORE_ROW(p, stride, q, n, 2) MFM__STORE_ROW(p, stride, q, n, 3) \
        MFM__STORE_ROW(p, stride, q, n, 4) MFM__STORE_ROW(p, stride, q, n, 5) MFM__STORE_ROW(p, stride, q, n, 6) MFM__STORE_ROW(p, stride, q, n, 7) \
    } while (0)

#endif

/* FwFM's pair term: the sum over pairs a < b of W_ab <v_a, v_b> (FwFM's weight W_ab, above). Each
   dot product is taken whole (DOTS4: mfm__dots4 or mfm__dots4_wide, the same bits), four partners
   b at a time, a last group of fewer padded with the first's vector and weight 0, then weighted
   and added in four lanes, the partners'. With KEEP (a batch of one row) it keeps the row's
   weights and dots (mfm__kept_stride), W_ba down column a as it goes: the step reads them, not
   the tables, and the row's vectors (copied first, then read from the copy). DENSE
   (mfm__fwfm_dense): r(a, b) is block a z + b and the row's vectors are found once, into vp; where
   blocks are [r, G] a group's four r come from two loads. Whole groups of four run in a loop of
   their own, without the last group's tests. The body of a function with mfm__fwfm_pairs's
   parameters (rs2: R's blocks are [r, G], known where the copy is made), returning a float;
   MFM__FWFM_R and MFM__FWFM_V name its r(a, b) and v_b. */
#define MFM__FWFM_R(DENSE, b) r[((DENSE) ? a * z + (b) : at[field[b]]) * rs]
#define MFM__FWFM_V(DENSE, KEEP, b) ((KEEP) ? kv + (b) * k : (DENSE) ? vp[b] : vt + feat[b] * vs)
#define MFM__FWFM_PAIRS(DOTS4, DENSE, KEEP)                                                                                       \
    const mfm__table *R = &m->t[MFM_TENSOR_R], *V = &m->t[MFM_TENSOR_V];                                                          \
    const float *const r = R->data + (uint64_t)c * R->n_blocks * R->stride, *const vt = V->data + (uint64_t)c * V->n_blocks * V->stride; \
    const uint64_t rs = rs2 ? 2 : R->stride, vs = V->stride, z = row->z, zs = mfm__kept_stride(z);                                \
    const uint32_t *const feat = row->feat, *const field = row->field;                                                            \
    const float *const x = row->x, *vp[(DENSE) && !(KEEP) ? MFM__FWFM_DENSE_MAX : 1];                                             \
    float *const kv = (KEEP) ? keep + 2 * z * zs : NULL; /* the row's vectors, kept */                                            \
    mfm__f4 acc4 = mfm__f4_set1(0.0f);                                                                                            \
    float w[4], d[4];                                                                                                             \
    uint64_t a, b, j;                                                                                                             \
    for (b = 0; (DENSE) && !(KEEP) && b < z; b++) vp[b] = vt + feat[b] * vs;                                                      \
    for (b = 0; (KEEP) && b < z; b++) memcpy(kv + b * k, vt + feat[b] * vs, (size_t)k * sizeof(float));                           \
    for (a = 0; a < z; a++) {                                                                                                     \
        const float *const va = MFM__FWFM_V(DENSE, KEEP, a), xa = x[a], *const ra = r + a * z * rs;                               \
        const uint64_t *const at = m->pair_id + (uint64_t)field[a] * m->n_fields;                                                 \
        const mfm__f4 xa4 = mfm__f4_set1(xa);                                                                                     \
        float *const wa = (KEEP) ? keep + a * zs : NULL, *const da = (KEEP) ? keep + z * zs + a * zs : NULL;                      \
        float *col = (KEEP) ? keep + (a + 1) * zs + a : NULL; /* W_ba, down column a */                                           \
        if (KEEP) wa[a] = 0;                                                                                                      \
        for (b = a + 1; b + 4 <= z; b += 4) {                                                                                     \
            const mfm__f4 w4 = mfm__f4_mul(mfm__f4_mul(xa4, mfm__f4_load(x + b)),                                                 \
                                           (DENSE) && rs == 2 ? mfm__f4_load_evens(ra + 2 * b)                                    \
                                                              : mfm__f4_set4(MFM__FWFM_R(DENSE, b), MFM__FWFM_R(DENSE, b + 1),    \
                                                                             MFM__FWFM_R(DENSE, b + 2), MFM__FWFM_R(DENSE, b + 3))); \
            const mfm__f4 d4 = DOTS4(va, MFM__FWFM_V(DENSE, KEEP, b), MFM__FWFM_V(DENSE, KEEP, b + 1), MFM__FWFM_V(DENSE, KEEP, b + 2), MFM__FWFM_V(DENSE, KEEP, b + 3), k); \
            acc4 = mfm__f4_add(acc4, mfm__f4_mul(w4, d4));                                                                        \
            if (!(KEEP)) continue;                                                                                                \
            mfm__f4_store(wa + b, w4);                                                                                            \
            mfm__f4_store(da + b, d4);                                                                                            \
            mfm__f4_store(w, w4);                                                                                                 \
            col[0] = w[0], col[zs] = w[1], col[2 * zs] = w[2], col[3 * zs] = w[3];                                                \
            col += 4 * zs;                                                                                                        \
        }                                                                                                                         \
        if (b < z) { /* the last group: fewer than four partners */                                                               \
            const uint64_t n = z - b, b1 = n > 1 ? b + 1 : b, b2 = n > 2 ? b + 2 : b;                                             \
            const mfm__f4 w4 = mfm__f4_set4(xa * x[b] * MFM__FWFM_R(DENSE, b), n > 1 ? xa * x[b1] * MFM__FWFM_R(DENSE, b1) : 0.0f, \
                                            n > 2 ? xa * x[b2] * MFM__FWFM_R(DENSE, b2) : 0.0f, 0.0f);                            \
            const mfm__f4 d4 = DOTS4(va, MFM__FWFM_V(DENSE, KEEP, b), MFM__FWFM_V(DENSE, KEEP, b1), MFM__FWFM_V(DENSE, KEEP, b2), MFM__FWFM_V(DENSE, KEEP, b), k); \
            acc4 = mfm__f4_add(acc4, mfm__f4_mul(w4, d4));                                                                        \
            if (!(KEEP)) continue;                                                                                                \
            mfm__f4_store(w, w4);                                                                                                 \
            mfm__f4_store(d, d4);                                                                                                 \
            for (j = 0; j < n; j++) wa[b + j] = col[j * zs] = w[j], da[b + j] = d[j];                                             \
        }                                                                                                                         \
    }                                                                                                                             \
    return mfm__f4_sum(acc4);

/* The four copies of the body: dense rows or any, kept or not. */
#define MFM__FWFM_PAIRS_ANY(DOTS4)                 \
    if (mfm__fwfm_dense(m, row)) {                 \
        if (keep) {                                \
            MFM__FWFM_PAIRS(DOTS4, 1, 1)           \
        } else {                                   \
            MFM__FWFM_PAIRS(DOTS4, 1, 0)           \
        }                                          \
    } else if (keep) {                             \
        MFM__FWFM_PAIRS(DOTS4, 0, 1)               \
    } else {                                       \
        MFM__FWFM_PAIRS(DOTS4, 0, 0)               \
    }

MFM__INLINE static float mfm__fwfm_pairs(const mfm_model *m, uint32_t c, const mfm__row *row, int k, int rs2, float *keep) {
    MFM__FWFM_PAIRS_ANY(mfm__dots4)
}

#if defined(MFM__AVX)
MFM__AVX_INLINE static float mfm__fwfm_pairs_wide_k(const mfm_model *m, uint32_t c, const mfm__row *row, int k, int rs2, float *keep) {
    MFM__FWFM_PAIRS_ANY(mfm__dots4_wide)
}

/* k = 8 under AdaGrad (the common case) gets its own copy, with the k-loop gone and R's stride
   known (GCC tested it in every group otherwise). */
MFM__AVX_FN static float mfm__fwfm_pairs_wide(const mfm_model *m, uint32_t c, const mfm__row *row, int k, float *keep) {
    if (k == 8 && m->t[MFM_TENSOR_R].stride == 2) return mfm__fwfm_pairs_wide_k(m, c, row, 8, 1, keep);
    return mfm__fwfm_pairs_wide_k(m, c, row, k, 0, keep);
}
#endif

/* FM's pair term: sum_{a<b} <v_a, v_b> x_a x_b = 1/2 sum_t [(sum_a v_at x_a)^2 - sum_a (v_at x_a)^2];
   sum[t] = sum_a v_at x_a stays for the gradient. The squares add up in four lanes, then the
   rest. Up to 16 factors the sums stay in registers, not in `sum` (which the compiler must
   otherwise store and load again for every non-zero, as it might alias v). */
MFM__INLINE static float mfm__fm_pairs(const mfm_model *m, uint32_t c, const mfm__row *row, float *sum, int k) {
    mfm__f4 sq4 = mfm__f4_set1(0.0f), acc[4];
    float sq = 0;
    uint32_t a;
    int t;
    if (k % 4 == 0 && k <= 16) {
        for (t = 0; t < k / 4; t++) acc[t] = mfm__f4_set1(0.0f);
        for (a = 0; a < row->z; a++) {
            const float *v = mfm__block(m, MFM_TENSOR_V, c, row->feat[a]);
            const mfm__f4 x4 = mfm__f4_set1(row->x[a]);
            for (t = 0; t < k / 4; t++) {
                const mfm__f4 vx = mfm__f4_mul(mfm__f4_load(v + 4 * t), x4);
                acc[t] = mfm__f4_add(acc[t], vx);
                sq4 = mfm__f4_add(sq4, mfm__f4_mul(vx, vx));
            }
        }
        for (t = 0; t < k / 4; t++) mfm__f4_store(sum + 4 * t, acc[t]);
        return 0.5f * (mfm__dot(sum, sum, k) - (mfm__f4_sum(sq4) + sq));
    }
    memset(sum, 0, (size_t)k * sizeof *sum);
    for (a = 0; a < row->z; a++) {
        const float *v = mfm__block(m, MFM_TENSOR_V, c, row->feat[a]);
        const mfm__f4 x4 = mfm__f4_set1(row->x[a]);
        for (t = 0; t + 4 <= k; t += 4) {
            mfm__f4 vx = mfm__f4_mul(mfm__f4_load(v + t), x4);
            mfm__f4_store(sum + t, mfm__f4_add(mfm__f4_load(sum + t), vx));
            sq4 = mfm__f4_add(sq4, mfm__f4_mul(vx, vx));
        }
        for (; t < k; t++) {
            float vx = v[t] * row->x[a];
            sum[t] += vx;
            sq += vx * vx;
        }
    }
    return 0.5f * (mfm__dot(sum, sum, k) - (mfm__f4_sum(sq4) + sq));
}

/* Score of class c. FM leaves sum[t] = sum_i v_it x_i (k values) for its gradient; FwFM, given
   `keep`, its pair weights and dots (mfm__fwfm_pairs). */
static float mfm__score(const mfm_model *m, uint32_t c, const mfm__row *row, float *sum, float *keep) {
    const int k = m->k;
    float s = 0;
    uint32_t a;
    if (!m->params.pairs_only) {
        s = *mfm__block(m, MFM_TENSOR_W0, c, 0);
        for (a = 0; a < row->z; a++) s += mfm__w(m, c, row->feat[a]) * row->x[a];
    }
    if (m->params.linear_only) return s;
    switch (m->params.model) {
    case MFM_MODEL_FFM: /* k = 4 (the common case) gets its own copy, with the k-loop unrolled */
        if (m->t[MFM_TENSOR_V].halves) {
#if defined(MFM__F16C)
            if (m->f16c) return s + mfm__ffm_pairs_f16c(m, c, row, k);
#endif
            return s + mfm__ffm_pairs_halves(m, c, row, k);
        }
        return s + (k == 4 ? mfm__ffm_pairs(m, c, row, 4) : mfm__ffm_pairs(m, c, row, k));
    case MFM_MODEL_FWFM:
#if defined(MFM__AVX)
        if (m->wide && k % 8 == 0) return s + mfm__fwfm_pairs_wide(m, c, row, k, keep);
#endif
        return s + (k == 4 ? mfm__fwfm_pairs(m, c, row, 4, 0, keep) : k == 8 ? mfm__fwfm_pairs(m, c, row, 8, 0, keep) : mfm__fwfm_pairs(m, c, row, k, 0, keep));
    default: /* k = 4, 8 and 16 get their own copies, with the sums in registers */
        return s + (k == 4 ? mfm__fm_pairs(m, c, row, sum, 4) : k == 8 ? mfm__fm_pairs(m, c, row, sum, 8) : k == 16 ? mfm__fm_pairs(m, c, row, sum, 16) : mfm__fm_pairs(m, c, row, sum, k));
    }
}

/* Stable logistic function. */
static double mfm__sigmoid(double s) {
    if (s >= 0) return 1.0 / (1.0 + exp(-s));
    {
        double e = exp(s);
        return e / (1.0 + e);
    }
}

/* p[c] = softmax(s)[c]; returns log sum_c exp(s_c - max) + max. */
static double mfm__softmax(const float *s, uint32_t n, double *p) {
    double top = -HUGE_VAL, total = 0;
    uint32_t c;
    for (c = 0; c < n; c++)
        if (s[c] > top) top = s[c];
    for (c = 0; c < n; c++) total += (p[c] = exp((double)s[c] - top));
    for (c = 0; c < n; c++) p[c] /= total;
    return top + log(total);
}

/* ============================================================================================
   >>optimizers  One step per touched coordinate with the batch's mean data gradient
   ============================================================================================ */

#define MFM__ROWWISE_FLOATS 64 /* row-wise AdaGrad keeps a vector's gradient in registers up to k = 64 */

typedef struct mfm__optim {
    mfm_optimizer kind;
    int wide; /* AdaGrad's batch-1 steps eight lanes wide (mfm__use_avx) */
    float lr, ftrl_beta;
    double beta1, beta2, eps;
} mfm__optim;

/* Whether blocks of len coordinates step as AdaGrad's: AdaGrad's own, and row-wise AdaGrad's of
   one coordinate (w0, w, r), which take AdaGrad's step to the bit (mfm__rowwise_adagrad) in the
   same layout, so they take AdaGrad's fast paths. */
static int mfm__steps_as_adagrad(const mfm__optim *o, uint32_t len) {
    return o->kind == MFM_OPTIMIZER_ADAGRAD || (o->kind == MFM_OPTIMIZER_ROWWISE_ADAGRAD && len == 1);
}

/* One AdaGrad step of four coordinates in lanes, gd their mean data gradient. */
MFM__INLINE static void mfm__adagrad4(mfm__f4 *theta, mfm__f4 *G, mfm__f4 gd, float lr, float l2) {
    const mfm__f4 g = mfm__f4_add(gd, mfm__f4_mul(mfm__f4_set1(l2), *theta));
    *G = mfm__f4_add(*G, mfm__f4_mul(g, g));
    *theta = mfm__f4_sub(*theta, mfm__f4_div(mfm__f4_mul(mfm__f4_set1(lr), g), mfm__f4_sqrt(mfm__f4_add(*G, mfm__f4_set1(1e-10f)))));
}

/* AdaGrad on n coordinates (theta[i], G[i]) whose gradient sums over a batch of `rows` rows are
   gsum[i]: four at a time, then one by one with the same operations. Small enough to be inlined
   into the batch-1 loops, which is where most of its calls come from. */
MFM__INLINE static void mfm__adagrad_span(const mfm__optim *o, float *theta, float *G, uint32_t n, const float *gsum, float rows, float l2) {
    uint32_t i;
    for (i = 0; i + 4 <= n; i += 4) {
        mfm__f4 th = mfm__f4_load(theta + i), G4 = mfm__f4_load(G + i);
        mfm__adagrad4(&th, &G4, mfm__f4_div(mfm__f4_load(gsum + i), mfm__f4_set1(rows)), o->lr, l2);
        mfm__f4_store(G + i, G4);
        mfm__f4_store(theta + i, th);
    }
    for (; i < n; i++) {
        float g = gsum[i] / rows + l2 * theta[i];
        G[i] += g * g;
        theta[i] -= o->lr * g / sqrtf(G[i] + 1e-10f);
    }
}

/* AdaGrad on a block [theta x len][G x len]. */
MFM__INLINE static void mfm__adagrad(const mfm__optim *o, float *blk, uint32_t len, const float *gsum, float rows, float l2) {
    mfm__adagrad_span(o, blk, blk + len, len, gsum, rows, l2);
}

/* Row-wise AdaGrad on a block [theta x len][G], gsum the data-gradient sums over `rows` rows:
   with g = gsum / rows + l2 theta, G takes the mean of the len squares g^2 (their sum times
   1 / len) and every coordinate steps by g (lr / sqrt(G + 1e-10)). The squares are summed four
   lanes wide (lane t mod 4 over the groups of four, then (l0 + l1) + (l2 + l3)), then the rest
   one by one. g is computed twice, the same way, rather than kept: a vector may be long. The
   rate's square root and division wait on the squares; where several vectors step together
   (an FFM pair, a row's FM vectors) their rates are taken in one lane each, with the same bits. */
MFM__INLINE static float mfm__rowwise_squares(const float *blk, uint32_t len, const float *gsum, float rows, float l2) {
    const mfm__f4 rows4 = mfm__f4_set1(rows), l24 = mfm__f4_set1(l2);
    mfm__f4 lanes = mfm__f4_set1(0.0f);
    float squares;
    uint32_t t;
    for (t = 0; t + 4 <= len; t += 4) {
        const mfm__f4 g4 = mfm__f4_add(mfm__f4_div(mfm__f4_load(gsum + t), rows4), mfm__f4_mul(l24, mfm__f4_load(blk + t)));
        lanes = mfm__f4_add(lanes, mfm__f4_mul(g4, g4));
    }
    squares = mfm__f4_sum(lanes);
    for (; t < len; t++) {
        const float g = gsum[t] / rows + l2 * blk[t];
        squares += g * g;
    }
    return squares;
}

/* The rates of four vectors whose accumulators are G4, lane by lane. */
MFM__INLINE static mfm__f4 mfm__rowwise_rates(float lr, mfm__f4 G4) {
    return mfm__f4_div(mfm__f4_set1(lr), mfm__f4_sqrt(mfm__f4_add(G4, mfm__f4_set1(1e-10f))));
}

MFM__INLINE static void mfm__rowwise_move(float *blk, uint32_t len, const float *gsum, float rows, float l2, float rate) {
    const mfm__f4 rows4 = mfm__f4_set1(rows), l24 = mfm__f4_set1(l2), rate4 = mfm__f4_set1(rate);
    uint32_t t;
    for (t = 0; t + 4 <= len; t += 4) {
        const mfm__f4 th = mfm__f4_load(blk + t), g4 = mfm__f4_add(mfm__f4_div(mfm__f4_load(gsum + t), rows4), mfm__f4_mul(l24, th));
        mfm__f4_store(blk + t, mfm__f4_sub(th, mfm__f4_mul(g4, rate4)));
    }
    for (; t < len; t++) blk[t] -= (gsum[t] / rows + l2 * blk[t]) * rate;
}

/* A vector of one (w0, w, r, V at k = 1) takes AdaGrad's step to the bit, so that those blocks
   share AdaGrad's fast paths (mfm__steps_as_adagrad). */
MFM__INLINE static void mfm__rowwise_adagrad(float lr, float *blk, uint32_t len, const float *gsum, float rows, float l2) {
    float rate[4];
    if (len == 1) {
        const float g = gsum[0] / rows + l2 * blk[0];
        blk[1] += g * g;
        blk[0] -= lr * g / sqrtf(blk[1] + 1e-10f);
        return;
    }
    blk[len] += mfm__rowwise_squares(blk, len, gsum, rows, l2) * (1.0f / (float)len);
    mfm__f4_store(rate, mfm__rowwise_rates(lr, mfm__f4_set1(blk[len])));
    mfm__rowwise_move(blk, len, gsum, rows, l2, rate[0]);
}

/* n blocks blk[i] of len > 1 coordinates, gradient grad[i * len ...] of a one-row batch: four
   rates at a time. */
static void mfm__rowwise_blocks(float lr, float *const *blk, const float *grad, uint32_t n, uint32_t len, float l2) {
    const float inv = 1.0f / (float)len;
    float G[4], rate[4];
    uint32_t i, j;
    for (i = 0; i < n; i += 4) {
        const uint32_t m = n - i < 4 ? n - i : 4;
        for (j = 0; j < 4; j++) G[j] = j < m ? (blk[i + j][len] += mfm__rowwise_squares(blk[i + j], len, grad + (uint64_t)(i + j) * len, 1.0f, l2) * inv) : 0.0f;
        mfm__f4_store(rate, mfm__rowwise_rates(lr, mfm__f4_set4(G[0], G[1], G[2], G[3])));
        for (j = 0; j < m; j++) mfm__rowwise_move(blk[i + j], len, grad + (uint64_t)(i + j) * len, 1.0f, l2, rate[j]);
    }
}

#if defined(MFM__AVX)
/* One AdaGrad step of eight coordinates in lanes, gd their data gradient: mfm__adagrad_span's
   operations. */
MFM__AVX_INLINE static void mfm__adagrad8(__m256 *theta, __m256 *G, __m256 gd, float lr, float l2) {
    const __m256 g = _mm256_add_ps(gd, _mm256_mul_ps(_mm256_set1_ps(l2), *theta));
    *G = _mm256_add_ps(*G, _mm256_mul_ps(g, g));
    *theta = _mm256_sub_ps(*theta, _mm256_div_ps(_mm256_mul_ps(_mm256_set1_ps(lr), g), _mm256_sqrt_ps(_mm256_add_ps(*G, _mm256_set1_ps(1e-10f)))));
}

/* Four floats at lo and four at hi as one eight-lane value, and back. */
MFM__AVX_INLINE static __m256 mfm__load2x4(const float *lo, const float *hi) {
    return _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(lo)), _mm_loadu_ps(hi), 1);
}

MFM__AVX_INLINE static void mfm__store2x4(float *lo, float *hi, __m256 v) {
    _mm_storeu_ps(lo, _mm256_castps256_ps128(v));
    _mm_storeu_ps(hi, _mm256_extractf128_ps(v, 1));
}

#endif

/* The pair (a, b) of an FFM row that is a batch of its own, under AdaGrad: slot va's gradient
   is coef times vb's old value and the other way round. The same operations as mfm__adagrad on
   those gradients (a division by one row is exact and left out), fused so that the gradients
   stay in registers. The factors from t on, one at a time: */
MFM__INLINE static void mfm__ffm_pair_adagrad_rest(float lr, float *va, float *vb, float coef, uint32_t t, uint32_t k, float l2) {
    for (; t < k; t++) {
        const float a = va[t], b = vb[t], ga = (0 + coef * b) + l2 * a, gb = (0 + coef * a) + l2 * b;
        va[k + t] += ga * ga;
        vb[k + t] += gb * gb;
        va[t] = a - lr * ga / sqrtf(va[k + t] + 1e-10f);
        vb[t] = b - lr * gb / sqrtf(vb[k + t] + 1e-10f);
    }
}

/* ... and four at a time. */
MFM__INLINE static void mfm__ffm_pair_adagrad(float lr, float *va, float *vb, float coef, uint32_t k, float l2) {
    const mfm__f4 lr4 = mfm__f4_set1(lr), l2v = mfm__f4_set1(l2), eps = mfm__f4_set1(1e-10f), c = mfm__f4_set1(coef), zero = mfm__f4_set1(0.0f);
    uint32_t t;
    for (t = 0; t + 4 <= k; t += 4) {
        const mfm__f4 a = mfm__f4_load(va + t), b = mfm__f4_load(vb + t);
        const mfm__f4 ga = mfm__f4_add(mfm__f4_add(zero, mfm__f4_mul(c, b)), mfm__f4_mul(l2v, a));
        const mfm__f4 gb = mfm__f4_add(mfm__f4_add(zero, mfm__f4_mul(c, a)), mfm__f4_mul(l2v, b));
        const mfm__f4 Ga = mfm__f4_add(mfm__f4_load(va + k + t), mfm__f4_mul(ga, ga));
        const mfm__f4 Gb = mfm__f4_add(mfm__f4_load(vb + k + t), mfm__f4_mul(gb, gb));
        mfm__f4_store(va + k + t, Ga);
        mfm__f4_store(vb + k + t, Gb);
        mfm__f4_store(va + t, mfm__f4_sub(a, mfm__f4_div(mfm__f4_mul(lr4, ga), mfm__f4_sqrt(mfm__f4_add(Ga, eps)))));
        mfm__f4_store(vb + t, mfm__f4_sub(b, mfm__f4_div(mfm__f4_mul(lr4, gb), mfm__f4_sqrt(mfm__f4_add(Gb, eps)))));
    }
    mfm__ffm_pair_adagrad_rest(lr, va, vb, coef, t, k, l2);
}

#define MFM__MAX_SIMPLE_NNZ 256 /* longer rows take the batched path at batch 1 */
#ifndef MFM__TERMS_FLOATS
#define MFM__TERMS_FLOATS ((uint64_t)1 << 24) /* 64 MB for a batch's streams' records (mfm__stream; doubling may take twice that), and as much for FwFM's kept terms (mfm__fwfm_keep_terms); past it, the owners walk the rows */
#endif

/* Every pair of an FFM row that is a batch of its own, under AdaGrad (dlds: the row's weighted
   loss derivative), stepped by PAIR_STEP(lr, va, vb, coef, k, l2); the body of a function with
   those parameters. Such a row has at most MFM__MAX_SIMPLE_NNZ non-zeros. Where each feature's
   vectors start and where each field's slot lies in them are found once per row, and the row
   is read through locals: the steps store through pointers that may alias anything, after
   which the compiler would read the row's fields again for every pair. With a's pairs, the
   next row's a-th span is asked for (`next`, NULL for none; mfm__ffm_span). */
#define MFM__FFM_ROW_PAIRS(PAIR_STEP)                                                                           \
    const mfm__table *V = &m->t[MFM_TENSOR_V];                                                                  \
    float *const table = V->data + (uint64_t)c * V->n_blocks * V->stride;                                       \
    const uint64_t stride = V->stride, per_feature = (uint64_t)m->n_fields * stride;                            \
    const uint32_t z = row->z;                                                                                  \
    const float *const x = row->x, lr = o->lr;                                                                  \
    uint64_t vectors[MFM__MAX_SIMPLE_NNZ], slot[MFM__MAX_SIMPLE_NNZ];                                           \
    uint32_t a, b;                                                                                              \
    for (a = 0; a < z; a++) vectors[a] = row->feat[a] * per_feature, slot[a] = row->field[a] * stride;         \
    for (a = 0; a < z; a++) {                                                                                   \
        float *const base_a = table + vectors[a];                                                               \
        const uint64_t field_a = slot[a];                                                                       \
        const float ga = dlds * x[a];                                                                           \
        mfm__ffm_ask(table, next, a);                                                                           \
        for (b = a + 1; b < z; b++) PAIR_STEP(lr, base_a + slot[b], table + vectors[b] + field_a, ga * x[b], k, l2); \
    }                                                                                                           \
    mfm__ffm_ask_rest(table, next, z);

MFM__INLINE static void mfm__ffm_row_adagrad(const mfm__optim *o, const mfm_model *m, uint32_t c, const mfm__row *row, float dlds, uint32_t k, float l2, const mfm__ffm_span *next) {
    MFM__FFM_ROW_PAIRS(mfm__ffm_pair_adagrad);
}

/* The pair (a, b) under row-wise AdaGrad (k <= MFM__ROWWISE_FLOATS): both gradients from the old
   values, then both vectors' steps, their rates in two lanes (k > 1: mfm__rowwise_adagrad). */
MFM__INLINE static void mfm__ffm_pair_rowwise(float lr, float *va, float *vb, float coef, uint32_t k, float l2) {
    float ga[MFM__ROWWISE_FLOATS], gb[MFM__ROWWISE_FLOATS], rate[4];
    uint32_t t;
    for (t = 0; t < k; t++) ga[t] = 0 + coef * vb[t], gb[t] = 0 + coef * va[t];
    va[k] += mfm__rowwise_squares(va, k, ga, 1.0f, l2) * (1.0f / (float)k);
    vb[k] += mfm__rowwise_squares(vb, k, gb, 1.0f, l2) * (1.0f / (float)k);
    mfm__f4_store(rate, mfm__rowwise_rates(lr, mfm__f4_set4(va[k], vb[k], 0.0f, 0.0f)));
    mfm__rowwise_move(va, k, ga, 1.0f, l2, rate[0]);
    mfm__rowwise_move(vb, k, gb, 1.0f, l2, rate[1]);
}

MFM__INLINE static void mfm__ffm_row_rowwise(const mfm__optim *o, const mfm_model *m, uint32_t c, const mfm__row *row, float dlds, uint32_t k, float l2, const mfm__ffm_span *next) {
    MFM__FFM_ROW_PAIRS(mfm__ffm_pair_rowwise);
}

#if defined(MFM__AVX)
/* mfm__ffm_pair_adagrad eight lanes wide: a's and b's slots eight factors at a time; for the
   last four, a's and b's in the two halves of one step. */
MFM__AVX_INLINE static void mfm__ffm_pair_adagrad_wide(float lr, float *va, float *vb, float coef, uint32_t k, float l2) {
    const __m256 c = _mm256_set1_ps(coef), zero = _mm256_setzero_ps();
    uint32_t t = 0;
    for (; t + 8 <= k; t += 8) {
        __m256 a = _mm256_loadu_ps(va + t), b = _mm256_loadu_ps(vb + t), Ga = _mm256_loadu_ps(va + k + t), Gb = _mm256_loadu_ps(vb + k + t);
        const __m256 ga = _mm256_add_ps(zero, _mm256_mul_ps(c, b)), gb = _mm256_add_ps(zero, _mm256_mul_ps(c, a));
        mfm__adagrad8(&a, &Ga, ga, lr, l2);
        mfm__adagrad8(&b, &Gb, gb, lr, l2);
        _mm256_storeu_ps(va + t, a), _mm256_storeu_ps(vb + t, b), _mm256_storeu_ps(va + k + t, Ga), _mm256_storeu_ps(vb + k + t, Gb);
    }
    if (t + 4 <= k) {
        __m256 ab = mfm__load2x4(va + t, vb + t), G = mfm__load2x4(va + k + t, vb + k + t);
        const __m256 ba = _mm256_permute2f128_ps(ab, ab, 1);
        mfm__adagrad8(&ab, &G, _mm256_add_ps(zero, _mm256_mul_ps(c, ba)), lr, l2);
        mfm__store2x4(va + t, vb + t, ab), mfm__store2x4(va + k + t, vb + k + t, G);
        t += 4;
    }
    mfm__ffm_pair_adagrad_rest(lr, va, vb, coef, t, k, l2);
}

MFM__AVX_INLINE static void mfm__ffm_row_adagrad_wide_k(const mfm__optim *o, const mfm_model *m, uint32_t c, const mfm__row *row, float dlds, uint32_t k, float l2, const mfm__ffm_span *next) {
    MFM__FFM_ROW_PAIRS(mfm__ffm_pair_adagrad_wide);
}

/* mfm__ffm_row_adagrad, eight lanes wide; k = 4 gets its own copy. */
MFM__AVX_FN static void mfm__ffm_row_adagrad_wide(const mfm__optim *o, const mfm_model *m, uint32_t c, const mfm__row *row, float dlds, uint32_t k, float l2, const mfm__ffm_span *next) {
    if (k == 4)
        mfm__ffm_row_adagrad_wide_k(o, m, c, row, dlds, 4, l2, next);
    else
        mfm__ffm_row_adagrad_wide_k(o, m, c, row, dlds, k, l2, next);
}
#endif

/* AdaGrad on n blocks of len coordinates anywhere in memory (blk[i], laid out as in
   mfm__adagrad) with the gradients of a one-row batch (grad[i * len ...]). Single coordinates
   are gathered four at a time so that the square roots and divisions run four wide. */
static void mfm__adagrad_blocks_narrow(const mfm__optim *o, float *const *blk, const float *grad, uint32_t n, uint32_t len, float l2) {
    float th[4], G[4];
    uint32_t i = 0, j;
    for (; len == 1 && i + 4 <= n; i += 4) { /* gathered into registers, not through memory: no stalled store forwarding */
        float *const *b = blk + i;
        mfm__f4 th4 = mfm__f4_set4(b[0][0], b[1][0], b[2][0], b[3][0]), G4 = mfm__f4_set4(b[0][1], b[1][1], b[2][1], b[3][1]);
        mfm__adagrad4(&th4, &G4, mfm__f4_load(grad + i), o->lr, l2);
        mfm__f4_store(th, th4), mfm__f4_store(G, G4);
        for (j = 0; j < 4; j++) b[j][0] = th[j], b[j][1] = G[j];
    }
    for (; i < n; i++) mfm__adagrad(o, blk[i], len, grad + (uint64_t)i * len, 1.0f, l2);
}

#if defined(MFM__AVX)
/* mfm__adagrad_blocks_narrow, eight lanes at a time: single coordinates eight by eight, blocks
   of four two by two, longer blocks eight coordinates at a time. */
MFM__AVX_FN static void mfm__adagrad_blocks_wide(const mfm__optim *o, float *const *blk, const float *grad, uint32_t n, uint32_t len, float l2) {
    float th[8], G[8];
    uint32_t i = 0, j, t;
    for (; len == 1 && i + 8 <= n; i += 8) {
        float *const *b = blk + i;
        __m256 th8 = _mm256_setr_ps(b[0][0], b[1][0], b[2][0], b[3][0], b[4][0], b[5][0], b[6][0], b[7][0]);
        __m256 G8 = _mm256_setr_ps(b[0][1], b[1][1], b[2][1], b[3][1], b[4][1], b[5][1], b[6][1], b[7][1]);
        mfm__adagrad8(&th8, &G8, _mm256_loadu_ps(grad + i), o->lr, l2);
        _mm256_storeu_ps(th, th8), _mm256_storeu_ps(G, G8);
        for (j = 0; j < 8; j++) blk[i + j][0] = th[j], blk[i + j][1] = G[j];
    }
    for (; len == 4 && i + 2 <= n; i += 2) {
        float *a = blk[i], *b = blk[i + 1];
        __m256 th8 = mfm__load2x4(a, b), G8 = mfm__load2x4(a + 4, b + 4);
        mfm__adagrad8(&th8, &G8, _mm256_loadu_ps(grad + (uint64_t)i * 4), o->lr, l2);
        mfm__store2x4(a, b, th8), mfm__store2x4(a + 4, b + 4, G8);
    }
    for (; len >= 8 && i < n; i++) {
        float *b = blk[i];
        const float *g = grad + (uint64_t)i * len;
        for (t = 0; t + 8 <= len; t += 8) {
            __m256 th8 = _mm256_loadu_ps(b + t), G8 = _mm256_loadu_ps(b + len + t);
            mfm__adagrad8(&th8, &G8, _mm256_loadu_ps(g + t), o->lr, l2);
            _mm256_storeu_ps(b + t, th8), _mm256_storeu_ps(b + len + t, G8);
        }
        mfm__adagrad_span(o, b + t, b + len + t, len - t, g + t, 1.0f, l2);
    }
    for (; i < n; i++) mfm__adagrad(o, blk[i], len, grad + (uint64_t)i * len, 1.0f, l2);
}
#endif

static void mfm__adagrad_blocks(const mfm__optim *o, float *const *blk, const float *grad, uint32_t n, uint32_t len, float l2) {
#if defined(MFM__AVX)
    if (o->wide) {
        mfm__adagrad_blocks_wide(o, blk, grad, n, len, l2);
        return;
    }
#endif
    mfm__adagrad_blocks_narrow(o, blk, grad, n, len, l2);
}

/* Steps `len` coordinates of a block; gsum holds their data-gradient sums over a batch of
   `rows` rows. w0 passes l1 = l2 = 0: it is never regularized. */
static void mfm__step(const mfm__optim *o, float *blk, uint32_t len, const float *gsum, float rows, float l1, float l2) {
    float *theta = blk, *s1 = blk + len, *s2 = blk + 2 * len, *s3 = blk + 3 * len; /* a state slot of len floats (row-wise AdaGrad: one) */
    uint32_t i;
    switch (o->kind) {
    case MFM_OPTIMIZER_SGD:
        for (i = 0; i < len; i++) theta[i] -= o->lr * (gsum[i] / rows + l2 * theta[i]);
        break;
    case MFM_OPTIMIZER_ADAGRAD:
        mfm__adagrad(o, blk, len, gsum, rows, l2);
        break;
    case MFM_OPTIMIZER_ROWWISE_ADAGRAD:
        mfm__rowwise_adagrad(o->lr, blk, len, gsum, rows, l2);
        break;
    case MFM_OPTIMIZER_ADAM: { /* s1 = m, s2 = v, s3 = t; the bias corrections are shared by equal t */
        double t_seen = -1, c1 = 1, c2 = 1;
        for (i = 0; i < len; i++) {
            float g = gsum[i] / rows + l2 * theta[i];
            float t = s3[i] + 1.0f;
            if (t != t_seen) {
                t_seen = t;
                c1 = 1.0 - pow(o->beta1, t);
                c2 = 1.0 - pow(o->beta2, t);
            }
            s3[i] = t;
            s1[i] = (float)(o->beta1 * s1[i] + (1.0 - o->beta1) * g);
            s2[i] = (float)(o->beta2 * s2[i] + (1.0 - o->beta2) * (double)g * g);
            theta[i] -= (float)(o->lr * (s1[i] / c1) / (sqrt(s2[i] / c2) + o->eps));
        }
        break;
    }
    case MFM_OPTIMIZER_FTRL: /* s1 = z, s2 = n; L1 and L2 live in the closed form, not in g */
        for (i = 0; i < len; i++) {
            float g = gsum[i] / rows;
            float n_new = s2[i] + g * g;
            float sigma = (sqrtf(n_new) - sqrtf(s2[i])) / o->lr;
            float z = s1[i] += g - sigma * theta[i];
            s2[i] = n_new;
            theta[i] = fabsf(z) <= l1 ? 0.0f : -(z - (z < 0 ? -l1 : l1)) / ((o->ftrl_beta + sqrtf(n_new)) / o->lr + l2);
        }
        break;
    default:
        break;
    }
}

/* ============================================================================================
   >>trainer  Batches: score in parallel, then each worker sums and steps the coordinates it owns
   ============================================================================================

   Per batch, with the parameters frozen:
     1. score (parallel over rows): each row's score, loss and weight * dL/ds per class; with
        several workers, the row's non-zeros grouped by owner (mfm__group_by_owner); for FM's
        rows and FwFM's dense ones, the terms their coordinates receive (tr->terms).
     2. gradients (parallel over coordinates): every coordinate has one owner, picked by a hash
        of its feature (of its field pair for FwFM's r; w0 belongs to worker 0). Each worker
        walks all the batch's rows in order and sums only what its own coordinates receive,
        into buffers as large as its share of the batch's touched set.
     3. apply (parallel): each worker takes one optimizer step per coordinate it owns.
   One worker takes steps 1 and 2 together, row by row (mfm__score_and_sum_task). A
   coordinate's gradient is summed in row order whatever the number of workers, so the bits do
   not depend on n_threads. At batch 1 most rows skip all of this (mfm__update_row). */

/* The divisor of a batch's gradient sums: the mean for SGD, Adam and FTRL; the sum for
   AdaGrad, whose step then neither shrinks with the batch for a coordinate the batch touches
   once (most of a CTR model's) nor grows for the others (its accumulator scales alike). With
   the mean, batch 4096 trained FFM 0.04 logloss worse than batch 1 (docs/DEFAULTS.md). The
   kernels (mfm_train_apply) divide the same way. */
#define MFM__BATCH_ROWS(optimizer, n_batch) (mfm__adagrad_kind(optimizer) ? 1.0f : (float)(n_batch))

#ifndef MFM__FFM_DENSE_FLOATS /* FFM keys gradients by feature while fields x classes x k fit */
#define MFM__FFM_DENSE_FLOATS 4096
#endif

/* One worker's touched coordinates of one tensor in the current batch: ids in first-touch
   order, their gradient sums [index][class][len], and an open-addressing table id -> index
   whose slots are live when their stamp is the batch's (so the table is not cleared per
   batch); a slot holds its id, stamp and index together, so that a probe reads one line. The
   sums (and flags) past the n in use are zero: the step sets what it read back to zero while it
   is in cache (mfm__coords_zero), and a first touch finds its sums ready. */
typedef struct mfm__coord_slot {
    uint64_t id;
    uint32_t stamp, index;
} mfm__coord_slot;

typedef struct mfm__coords {
    uint64_t *ids;
    float *g;
    uint64_t n, cap_ids, cap_g, last; /* last: the index mfm__own returned last */
    uint64_t fits;        /* entries the table and buffers hold as they are (mfm__coords_room) */
    uint32_t parts;       /* FFM keyed by feature: fields per entry, each with a touched flag */
    unsigned char *flags; /* [index][parts] */
    uint64_t cap_flags;
    mfm__coord_slot *slots;
    uint64_t mask; /* table size - 1; 0 before the first touch */
    int direct;    /* ids index the table (size mask + 1): FwFM's few field pairs, no hashing or probing */
    int like_w;    /* FM's and FwFM's v: its entries are w's (mfm__own_like_w), so it keeps no table */
} mfm__coords;

#define MFM__STEPPED 0xFFFFFFFFu /* a last row's mark once its entry has stepped (mfm__step_ending) */

/* An FFM row's non-zero as mfm__ffm_feature_sums reads it: where its feature's vectors start in
   a class's table, its field, its field's cell in a sums entry, and its value. */
typedef struct mfm__ffm_nonzero {
    uint64_t vectors;
    uint32_t field, cell;
    float x;
} mfm__ffm_nonzero;

/* Several workers, FM, FwFM and linear models (tr->stream_width): what the rows a worker scores
   leave for one owner, non-zero by non-zero in the batch's order: the feature, then (per class)
   its w's term g x_a and its v's k terms (FM: g x_a (sum - v_a x_a)). The owner adds them up and
   reads no row for them (mfm__stream_sums). */
typedef struct mfm__stream {
    uint32_t *ids; /* with line, the owner leaves in their place the features' w entries, for mfm__line_task */
    float *terms; /* per record: C w terms, then C x k v terms (none for linear models) */
    uint64_t n, cap; /* records, and room for them in both arrays */
} mfm__stream;

typedef struct mfm__worker {
    mfm__coords own[MFM_TENSOR_COUNT];
    mfm__stream *streams; /* tr->stream_width: one per owner, of the rows this worker scores */
    float *row_terms;     /* tr->stream_width: C x z x k, the terms of the scored row's vectors (mfm__stream_row) */
    int failed;    /* memory ran short while summing gradients */
    int r_in_order; /* FwFM: a dense row listed this batch's r entries, pair by pair (mfm__fwfm_kept_row_gradients) */
    float *sum;    /* C x k: FM's per-row sums */
    float *scaled; /* the row's values under normalize_rows */
    float *row_g;  /* batch 1: z x k gradients of a row's vectors (FM, FwFM), or one pair's (FFM) */
    const float **row_v; /* FwFM: the row's vectors; room for the pair weights of four of them (4 x z), or for
                            one's dot products with its partners; and the ids of its pairs */
    float *pair_weight;
    uint64_t *pair_ids;
    float *pair_keep;  /* FwFM at batch 1, or with tr->terms: per class, the weights and dots of the row's pairs (mfm__kept_floats) */
    float *row_ut;     /* with pair_keep: the row's vectors' gradients, factor-major (mfm__fwfm_kept_sums) */
    float **one_blk; /* batch 1: the blocks (w, FwFM's r, V) stepped together, and their gradients */
    float *one_g;
    float *score; /* C */
    float *dlds;  /* C: batch 1's weight * dL/ds */
    double *prob; /* C */
    uint32_t *owned;   /* 0, 1, 2, ...: one worker owns all of a row's non-zeros */
    uint32_t *owner_of; /* several workers: the owner of each of the row being scored's non-zeros */
    uint32_t *by_owner; /* several workers: the rows this worker scored, each row's non-zeros grouped by owner (mfm__group_by_owner) */
    uint64_t n_by_owner, cap_by_owner;
    uint32_t *cursor;  /* several workers: one per owner, while a row is grouped */
    uint32_t *partner; /* FwFM: a's partners whose pair this worker owns (mfm__fwfm_pair_gradients) */
    uint32_t *entry; /* batches: the w entry (mfm__coords) of each owned non-zero of the row, its v entry too where v is keyed by feature */
    uint32_t *walk_entry; /* batches, one worker: the w entries of every non-zero of the batch, row by row (mfm__list_entries) */
    uint64_t cap_walk_entry;
    uint32_t *last_row; /* tr->step_early: per w entry, the batch's last row that touches it (MFM__STEPPED once stepped) */
    uint64_t cap_last_row;
    uint32_t *ending;  /* tr->step_early: the v entries whose last row this is */
    uint64_t diverged; /* one worker: 1 + the batch's row whose loss was not finite, where it stopped (mfm__score_and_sum_task) */
    mfm__ffm_nonzero *ffm_row; /* batches, FFM keyed by feature: the row being summed, read through a copy (mfm__ffm_feature_sums) */
    mfm__ffm_span next_span;   /* one worker, FFM keyed by feature: the next row's spans, which this row's sums ask for (bytes 0: none) */
    double loss, weight;
    char apart[128]; /* keeps the next worker's fields off this one's cache lines */
} mfm__worker;

/* Hogwild FwFM at batch 1: every row steps all of R's field pairs it holds (741 for 39 fields,
   93 lines), so Hogwild threads stepping R at every row would pass those lines from core to core
   at every row and train no faster than one thread. Each share instead sums R's gradients over
   its last MFM__HOGWILD_R_ROWS rows and then takes one step per touched entry, as a batch of
   those rows would (mfm__r_pending_step), and at the end of its pass. */
#define MFM__HOGWILD_R_ROWS 32
typedef struct mfm__r_pending {
    float *sums;          /* C x R's blocks */
    unsigned char *seen;  /* whether sums[i] holds a gradient since the last steps */
    uint64_t *touched, n; /* the seen entries, in first-touch order */
    uint32_t rows;        /* rows added since the last steps */
    unsigned char *dense; /* per class: a dense row (mfm__fwfm_dense) came since the last steps, so every pair a < b is seen */
} mfm__r_pending;

typedef struct mfm__trainer {
    mfm_model *m;
    const mfm_csr *d;
    const float *ones;
    float *class_weights; /* per class, or NULL when every class weighs 1 */
    float smoothing;
    mfm__optim opt;
    const uint64_t *rows; /* the current batch */
    uint64_t n_batch;
    float *dlds;          /* batch x C: each row's weight * dL/ds per class */
    int line;             /* AdaGrad at batch_size > 1: the linear terms' line search (mfm__line_alpha) */
    float *scores;        /* with line: batch x C, each row's scores against the frozen parameters */
    double *along;        /* with line: batch x 2, each row's loss's slope and curvature along the linear terms' steps */
    double alpha;         /* with line: the fraction of the linear terms' steps the batch takes */
    float *sums;          /* batch x C x k: FM's per-row sums, for one worker and the owners' row walk (no streams) */
    float *terms;         /* batch x C x terms_row: what FwFM's dense rows' scores left to add up (mfm__fwfm_keep_terms), or NULL */
    uint64_t terms_row;
    unsigned char *kept;  /* batch: whether the row's score left terms (mfm__keeps_terms), for the owners */
    float *factor;        /* several workers, params.normalize_rows: batch, what each row's values were scaled by (mfm__owner_row) */
    uint32_t stamp_batch; /* tells the coordinate tables' live entries from stale ones */
    int step_early;       /* V's entries step as soon as the last row that touches them is summed (mfm__gradient_task) */
    uint32_t max_row_nnz;
    uint16_t *pair_owner; /* several workers, FwFM: the owner of each field pair (at lo * F + hi and hi * F + lo) */
    uint32_t *owned_at;   /* several workers without streams: batch x (workers + 1), where each owner's non-zeros of the row start in the scorer's by_owner, and the end */
    uint64_t stream_width; /* several workers but FFM's: floats of terms per record (mfm__stream); 0 without streams */
    mfm__worker *workers;
    int n_workers;
    struct mfm__chunk *chunks; /* params.thread_chunks: one per worker, whose rows it scores and sums (mfm__chunk_sum_task) */
    /* batch 1: which rows may update in place (see mfm__row_is_simple) */
    uint32_t *field_stamp, stamp;
    uint32_t feature_set[2 * MFM__MAX_SIMPLE_NNZ][2]; /* open addressing: id, and the row's stamp when live */
    mfm__ffm_span next_span; /* batch 1, FFM: the next row's spans, which this row's steps ask for (bytes 0: none) */
    int epoch;               /* 1-based within the mfm_fit call, for messages; 0 in mfm_partial_fit */
    mfm__r_pending *r_pending; /* a Hogwild share of FwFM at batch 1: R's steps held back (above); NULL otherwise */
    char apart[128];         /* Hogwild's trainers lie side by side (mfm__fit): keeps the next one's fields, read every row,
                                off the lines this one writes every row (stamp, feature_set, next_span) */
} mfm__trainer;

/* params.thread_chunks: worker i of a batch's trainer scores and sums the rows of chunk i, a
   contiguous share of the batch, by the one-worker path of a trainer of its own (tr), which
   takes no step. Then each worker, as owner, adds up its coordinates' sums chunk after chunk
   (mfm__merge_task) and steps them as the shared batch does. `order` lists the chunk's entries
   of w, of v where v keeps a table of its own, and of r, grouped by owner, owner o's from
   start[t][o]; merged_at gives each w entry's place in its owner's table, where the line search
   finds its step. */
typedef struct mfm__chunk {
    mfm__trainer tr;
    uint32_t *order[MFM_TENSOR_COUNT];
    uint64_t cap_order[MFM_TENSOR_COUNT];
    uint32_t *start;     /* [tensor][owners + 1] */
    uint32_t *merged_at; /* per w entry */
    uint64_t cap_merged_at;
} mfm__chunk;

static uint64_t mfm__mix(uint64_t id) { return (id * 0x9E3779B97F4A7C15ull) >> 24; }

/* Which of n workers owns the coordinates keyed by id (features; FwFM's r goes by whole rows
   of R, tr->pair_owner). Runs of 16 ids share an owner, so that no cache line of a table of
   small blocks (w takes 8 bytes with AdaGrad) is written by two workers: such lines would bounce
   between the cores at every batch. The hash spreads the runs evenly whatever the ids' pattern;
   its low 32 bits are scaled to [0, n) by a multiply, not a division: it is asked of every
   non-zero of a batch (mfm__group_by_owner). */
static int mfm__owner(uint64_t id, int n) { return n == 1 ? 0 : (int)(((mfm__mix(id >> 4) & 0xFFFFFFFFu) * (uint64_t)n) >> 32); }

static void mfm__coords_free(mfm__coords *o) {
    MFM_FREE(o->flags);
    MFM_FREE(o->ids);
    MFM_FREE(o->g);
    MFM_FREE(o->slots);
}

/* Doubles the table (at least 1024 entries) and puts the live ids back. 0 when memory is short. */
static int mfm__coords_grow(mfm__coords *o, uint32_t stamp) {
    const uint64_t size = o->mask ? 2 * (o->mask + 1) : 1024;
    mfm__coord_slot *slots = (mfm__coord_slot *)mfm__calloc(size, sizeof(mfm__coord_slot));
    uint64_t i, h;
    if (!slots) return 0;
    for (i = 0; i < o->n; i++) {
        for (h = mfm__mix(o->ids[i]) & (size - 1); slots[h].stamp == stamp; h = (h + 1) & (size - 1)) {}
        slots[h].stamp = stamp, slots[h].id = o->ids[i], slots[h].index = (uint32_t)i;
    }
    MFM_FREE(o->slots);
    o->slots = slots, o->mask = size - 1;
    return 1;
}

/* A table indexed by the ids 0..size-1 themselves. 0 when memory is short. */
static int mfm__coords_direct(mfm__coords *o, uint64_t size) {
    o->slots = (mfm__coord_slot *)mfm__calloc(size, sizeof(mfm__coord_slot));
    o->mask = size - 1;
    o->direct = 1;
    return o->slots != NULL;
}

/* Room for `more` first touches of width floats each (a table has one width): ids, sums, flags,
   and a table at most half full. Taken once per row, so that a touch (mfm__own) neither checks
   nor grows anything; o->fits answers at once while nothing needs to grow. 0 when memory is
   short. */
static int mfm__coords_grow_room(mfm__coords *o, uint64_t need, uint64_t width, uint32_t stamp) {
    const uint64_t had_g = o->cap_g, had_flags = o->cap_flags;
    if (need >= 0xFFFFFFF0u) return 0; /* the table's indices are 32-bit */
    while (!o->direct && !o->like_w && (need > (o->mask + 1) / 2 || !o->mask))
        if (!mfm__coords_grow(o, stamp)) return 0;
    if (!mfm__reserve((void **)&o->ids, &o->cap_ids, need, sizeof(uint64_t)) || !mfm__reserve((void **)&o->g, &o->cap_g, need * width, sizeof(float)) ||
        (o->parts && !mfm__reserve((void **)&o->flags, &o->cap_flags, need * o->parts, 1)))
        return 0;
    if (o->cap_g > had_g) memset(o->g + had_g, 0, (size_t)(o->cap_g - had_g) * sizeof(float)); /* new sums start at zero */
    if (o->cap_flags > had_flags) memset(o->flags + had_flags, 0, (size_t)(o->cap_flags - had_flags));
    o->fits = o->cap_ids < o->cap_g / width ? o->cap_ids : o->cap_g / width;
    if (o->parts && o->cap_flags / o->parts < o->fits) o->fits = o->cap_flags / o->parts;
    if (!o->direct && !o->like_w && (o->mask + 1) / 2 < o->fits) o->fits = (o->mask + 1) / 2;
    if (o->fits > 0xFFFFFFEFu) o->fits = 0xFFFFFFEFu;
    return 1;
}

MFM__INLINE static int mfm__coords_room(mfm__coords *o, uint64_t more, uint64_t width, uint32_t stamp) {
    return o->n + more <= o->fits || mfm__coords_grow_room(o, o->n + more, width, stamp);
}

/* Entries j .. j+n-1 (width floats each) back to zero sums and no flags, once stepped. */
static void mfm__coords_zero(const mfm__coords *o, uint64_t j, uint64_t n, uint64_t width) {
    if (!n) return; /* the buffers may not exist yet */
    memset(o->g + j * width, 0, (size_t)(n * width) * sizeof(float));
    if (o->parts) memset(o->flags + j * o->parts, 0, (size_t)(n * o->parts));
}

/* The gradient buffer (width = classes x len floats) of coordinate id, zero on its first touch
   in this batch, inside the room mfm__coords_room made. */
MFM__INLINE static float *mfm__own(mfm__coords *o, uint64_t id, uint32_t stamp, uint64_t width) {
    mfm__coord_slot *slot;
    if (o->direct) { /* slot id */
        slot = o->slots + id;
        if (slot->stamp == stamp) return o->g + (o->last = slot->index) * width;
    } else {
        uint64_t h;
        for (h = mfm__mix(id) & o->mask; (slot = o->slots + h)->stamp == stamp; h = (h + 1) & o->mask)
            if (slot->id == id) return o->g + (o->last = slot->index) * width;
    }
    slot->stamp = stamp, slot->id = id, slot->index = (uint32_t)o->n;
    o->ids[o->n] = id;
    return o->g + (o->last = o->n++) * width;
}

/* FM's and FwFM's v of feature id, whose w is entry `w_entry` of the w table: both tables are
   keyed by feature, and a row touches a feature's w before its v, so they list the batch's
   features in the same order and v's entry is w's; no second lookup. */
static float *mfm__own_like_w(mfm__coords *o, uint32_t w_entry, uint64_t id, uint64_t width) {
    if (w_entry == o->n) o->ids[o->n++] = id;
    return o->g + (o->last = w_entry) * width;
}

/* Asks the memory system for the next row's parameters while this row trains or is predicted:
   with millions of features most of them are far away, and a row waits on dozens of them. FFM
   fetches the span of each feature's vectors that the row's fields cover, line by line, or
   leaves the spans to the caller (`later`; mfm__ffm_span).
   The prefetching functions are inlined: GCC takes a function that does nothing but prefetch
   for one without effects and drops every call to it. */
/* Feature id's w and (FM, FwFM) v in class c: one line where w is v's guest (>>model); `write`:
   whether the caller will write them (training), else prediction's read (MFM__PREFETCH_READ). */
MFM__INLINE static void mfm__prefetch_feature(const mfm_model *m, uint32_t c, uint32_t id, int write) {
    MFM__PREFETCH_FOR(mfm__w_at(m, c, id), write);
    if (!m->params.linear_only && m->params.model != MFM_MODEL_FFM && !m->t[MFM_TENSOR_W].guest) MFM__PREFETCH_FOR(mfm__block(m, MFM_TENSOR_V, c, id), write);
}

/* Asked for all at once, FFM's spans go in two passes: each feature's first line (with its w),
   then the rest (mfm__ffm_ask's lines after the first). Every feature's page is then looked up
   at the start, side by side, rather than each lookup waiting behind the lines of the features
   before it. */
MFM__INLINE static void mfm__prefetch_row(const mfm_model *m, const mfm_csr *d, uint64_t r, mfm__ffm_span *later, int write) {
    const mfm__ffm_span span = mfm__ffm_span_of(m, d, r);
    const mfm__table *V = &m->t[MFM_TENSOR_V];
    uint32_t c, a;
    for (c = 0; c < m->n_classes; c++) {
        const uint64_t at = (uint64_t)c * m->n_features * V->feature_stride; /* class c's V: floats, or a float16 model's halves */
        const char *table = V->halves ? (const char *)(V->halves + at) : (const char *)(V->data + at);
        for (a = 0; a < span.z; a++) {
            mfm__prefetch_feature(m, c, span.feat[a], write);
            if (!later && span.bytes) MFM__PREFETCH_FOR(table + span.feat[a] * span.feature_bytes + span.first, write);
        }
        for (a = 0; !later && span.bytes && a < span.z; a++) mfm__ffm_ask_after_first(table + span.feat[a] * span.feature_bytes + span.first, span.bytes);
    }
    if (later) *later = span;
}

/* The lines of a[lo..hi) (elements of `size` bytes); nothing for a NULL array. */
MFM__INLINE static void mfm__prefetch_range(const void *a, uint64_t lo, uint64_t hi, size_t size) {
    const char *p = (const char *)a;
    uint64_t at;
    if (!p || hi <= lo) return;
    for (at = lo * size & ~(uint64_t)63; at < hi * size; at += 64) MFM__PREFETCH(p + at);
}

/* Rows come in shuffled order, so a row's own data is as far away as its parameters: the
   pass asks for row i + 3's offsets and row i + 2's non-zeros and label here, and row i + 1's
   parameters (mfm__prefetch_row), so that each has arrived by the time the next step needs it. */
MFM__INLINE static void mfm__prefetch_data_ahead(const mfm__trainer *tr, const uint64_t *rows, uint64_t i, uint64_t n) {
    const mfm_csr *d = tr->d;
    if (i + 3 < n) MFM__PREFETCH(d->row_offsets + rows[i + 3]);
    if (i + 2 < n) {
        const uint64_t r = rows[i + 2], lo = d->row_offsets[r], hi = d->row_offsets[r + 1];
        mfm__prefetch_range(d->features, lo, hi, sizeof *d->features);
        if (tr->m->params.model != MFM_MODEL_FM) mfm__prefetch_range(d->fields, lo, hi, sizeof *d->fields); /* FM reads no fields */
        mfm__prefetch_range(d->values, lo, hi, sizeof *d->values);
        MFM__PREFETCH(d->labels + r);
        if (d->weights) MFM__PREFETCH(d->weights + r);
    }
}

/* y += c x over k values, four lanes at a time. */
MFM__INLINE static void mfm__axpy(float *y, float c, const float *x, int k) {
    const mfm__f4 c4 = mfm__f4_set1(c);
    int t = 0;
    for (; t + 4 <= k; t += 4) mfm__f4_store(y + t, mfm__f4_add(mfm__f4_load(y + t), mfm__f4_mul(c4, mfm__f4_load(x + t))));
    for (; t < k; t++) y[t] += c * x[t];
}

/* FwFM within one row: v_a's gradient is g times the sum over its partners b, in row order, of
   W_ab v_b (FwFM's weight, >>score). W_aa = 0 stands for "not a partner": adding 0 v_a to a sum that
   starts at +0 leaves its bits as they are, and the loops need no branch. The weight rows of a
   group of vectors a[0 .. group), into w[j * z + b] (dense: mfm__fwfm_dense(m, row)): */
static void mfm__fwfm_weights(const mfm_model *m, uint32_t c, const mfm__row *row, int dense, const uint32_t *a, uint32_t group, float *w) {
    const mfm__table *R = &m->t[MFM_TENSOR_R];
    const float *const r = R->data + (uint64_t)c * R->n_blocks * R->stride, *const x = row->x;
    const uint64_t rs = R->stride, z = row->z;
    const uint32_t *const field = row->field;
    uint64_t j, b;
    for (j = 0; j < group; j++) { /* read through locals: the stores could alias the row */
        const uint64_t *const at = m->pair_id + (uint64_t)field[a[j]] * m->n_fields, aj = a[j];
        const float xa = x[aj];
        float *const wj = w + j * z;
        if (!dense) {
            for (b = 0; b < z; b++) wj[b] = xa * x[b] * r[at[field[b]] * rs];
        } else { /* r(b, a) down column a (block b z + a), then r(a, b) along row a, four from two loads where blocks are [r, G] */
            const float *const ra = r + aj * z * rs;
            const mfm__f4 xa4 = mfm__f4_set1(xa);
            for (b = 0; b < aj; b++) wj[b] = xa * x[b] * r[(b * z + aj) * rs];
            for (b = aj + 1; rs == 2 && b + 4 <= z; b += 4)
                mfm__f4_store(wj + b, mfm__f4_mul(mfm__f4_mul(xa4, mfm__f4_load(x + b)), mfm__f4_load_evens(ra + 2 * b)));
            for (; b < z; b++) wj[b] = xa * x[b] * ra[b * rs];
        }
        wj[aj] = 0;
    }
}

/* The gradients out[j][t .. k) of four vectors whose weight rows are w[j], LANES factors at a
   time while they fit: four independent chains of additions side by side, where one would wait
   on each addition. In a function with mfm__fwfm_group_narrow's parameters and a uint32_t b;
   VEC, LOAD, ...: the lanes' type and operations (the same, lane by lane, at either width). */
#define MFM__FWFM_GROUP(VEC, LANES, LOAD, STORE, SET1, ADD, MUL)                 \
    for (; t + LANES <= k; t += LANES) {                                         \
        const VEC g_ = SET1(g), zero_ = SET1(0.0f);                              \
        VEC s0 = zero_, s1 = zero_, s2 = zero_, s3 = zero_;                      \
        for (b = 0; b < z; b++) {                                                \
            const VEC vb = LOAD(v[b] + t);                                       \
            s0 = ADD(s0, MUL(SET1(w[0][b]), vb));                                \
            s1 = ADD(s1, MUL(SET1(w[1][b]), vb));                                \
            s2 = ADD(s2, MUL(SET1(w[2][b]), vb));                                \
            s3 = ADD(s3, MUL(SET1(w[3][b]), vb));                                \
        }                                                                        \
        STORE(out[0] + t, ADD(zero_, MUL(g_, s0)));                              \
        STORE(out[1] + t, ADD(zero_, MUL(g_, s1)));                              \
        STORE(out[2] + t, ADD(zero_, MUL(g_, s2)));                              \
        STORE(out[3] + t, ADD(zero_, MUL(g_, s3)));                              \
    }

/* Four lanes from factor t0, then one at a time. */
static void mfm__fwfm_group_narrow(const float *const *v, uint32_t z, const float *const *w, float g, int t0, int k, float *const *out) {
    uint32_t b, j;
    int t = t0;
    MFM__FWFM_GROUP(mfm__f4, 4, mfm__f4_load, mfm__f4_store, mfm__f4_set1, mfm__f4_add, mfm__f4_mul)
    for (; t < k; t++)
        for (j = 0; j < 4; j++) {
            float sum = 0;
            for (b = 0; b < z; b++) sum += w[j][b] * v[b][t];
            out[j][t] = 0 + g * sum;
        }
}

#if defined(MFM__AVX)
/* Eight lanes from factor 0 up to the last multiple of 8; returns where it stopped. */
MFM__AVX_FN static int mfm__fwfm_group_wide(const float *const *v, uint32_t z, const float *const *w, float g, int k, float *const *out) {
    uint32_t b;
    int t = 0;
    MFM__FWFM_GROUP(__m256, 8, _mm256_loadu_ps, _mm256_storeu_ps, _mm256_set1_ps, _mm256_add_ps, _mm256_mul_ps)
    return t;
}
#endif

/* The gradients of the listed vectors v_a, a = list[i], into gv[i * k ...], four at a time (a
   group of fewer repeats its first vector, whose sums are then written twice, the same). all:
   the row's kept weights (mfm__kept_stride), or NULL, and then room for four rows of weights. */
static void mfm__fwfm_vector_gradients(const mfm__optim *o, const mfm_model *m, uint32_t c, const mfm__row *row, const float *const *v, float g,
                                       const uint32_t *list, uint32_t n, int k, const float *all, float *room, float *gv) {
    const uint32_t z = row->z;
    const int dense = !all && mfm__fwfm_dense(m, row);
    uint32_t i, j;
    for (i = 0; i < n; i += 4) {
        const uint32_t group = n - i < 4 ? n - i : 4;
        const float *w[4];
        float *out[4];
        int t = 0;
        if (!all) mfm__fwfm_weights(m, c, row, dense, list + i, group, room);
        for (j = 0; j < 4; j++) {
            const uint32_t at = j < group ? j : 0;
            w[j] = all ? all + (uint64_t)list[i + at] * mfm__kept_stride(z) : room + (uint64_t)at * z;
            out[j] = gv + (uint64_t)(i + at) * k;
        }
#if defined(MFM__AVX)
        if (o->wide) t = mfm__fwfm_group_wide(v, z, w, g, k, out);
#endif
        mfm__fwfm_group_narrow(v, z, w, g, t, k, out);
    }
    (void)o;
}

#if defined(MFM__AVX)
/* mfm__fwfm_vector_gradients for every vector of a batch-1 row from what its score kept (w, k a
   multiple of 4), the same bits: U_a = the sum over b in row order of W_ab v_b, factor t of
   vectors a0 .. a0 + 8 nb side by side (lane a: W_ab = W_ba is in w's row b), one broadcast of
   v_b's factor serving them all; g U_a's factor t into ut[t zs + a]. */
MFM__AVX_INLINE static void mfm__fwfm_kept_sums(const float *v, const float *w, uint64_t z, uint64_t a0, int nb, int k, float g, float *ut) {
    const uint64_t zs = mfm__kept_stride(z);
    const __m256 g8 = _mm256_set1_ps(g), zero = _mm256_setzero_ps();
    uint64_t b;
    int t;
    for (t = 0; t < k; t++) { /* named sums, not an array: the registers stay theirs */
        __m256 s0 = zero, s1 = zero, s2 = zero, s3 = zero, s4 = zero;
        float *const out = ut + t * zs + a0;
        for (b = 0; b < z; b++) {
            const __m256 vb = _mm256_broadcast_ss(v + b * k + t);
            const float *const wb = w + b * zs + a0;
            s0 = _mm256_add_ps(s0, _mm256_mul_ps(_mm256_loadu_ps(wb), vb));
            if (nb > 1) s1 = _mm256_add_ps(s1, _mm256_mul_ps(_mm256_loadu_ps(wb + 8), vb));
            if (nb > 2) s2 = _mm256_add_ps(s2, _mm256_mul_ps(_mm256_loadu_ps(wb + 16), vb));
            if (nb > 3) s3 = _mm256_add_ps(s3, _mm256_mul_ps(_mm256_loadu_ps(wb + 24), vb));
            if (nb > 4) s4 = _mm256_add_ps(s4, _mm256_mul_ps(_mm256_loadu_ps(wb + 32), vb));
        }
        _mm256_storeu_ps(out, _mm256_add_ps(zero, _mm256_mul_ps(g8, s0)));
        if (nb > 1) _mm256_storeu_ps(out + 8, _mm256_add_ps(zero, _mm256_mul_ps(g8, s1)));
        if (nb > 2) _mm256_storeu_ps(out + 16, _mm256_add_ps(zero, _mm256_mul_ps(g8, s2)));
        if (nb > 3) _mm256_storeu_ps(out + 24, _mm256_add_ps(zero, _mm256_mul_ps(g8, s3)));
        if (nb > 4) _mm256_storeu_ps(out + 32, _mm256_add_ps(zero, _mm256_mul_ps(g8, s4)));
    }
}

/* Then gv[a k + t] = ut[t zs + a], eight by eight, and a last four factors (k % 8 = 4) four
   rows of eight lanes into eight vectors' four. ut: room for k x mfm__kept_stride(z). */
MFM__AVX_INLINE static void mfm__fwfm_kept_gradients_k(const float *w, uint64_t z, int k, float g, float *ut, float *gv) {
    const uint64_t zs = mfm__kept_stride(z);
    const float *const v = w + 2 * z * zs;
    uint64_t a0, j;
    int t0;
    for (a0 = 0; a0 < zs; a0 += 40) { /* five groups of eight lanes keep their sums in registers */
        switch ((zs - a0) / 8) {
        case 1: mfm__fwfm_kept_sums(v, w, z, a0, 1, k, g, ut); break;
        case 2: mfm__fwfm_kept_sums(v, w, z, a0, 2, k, g, ut); break;
        case 3: mfm__fwfm_kept_sums(v, w, z, a0, 3, k, g, ut); break;
        case 4: mfm__fwfm_kept_sums(v, w, z, a0, 4, k, g, ut); break;
        default: mfm__fwfm_kept_sums(v, w, z, a0, 5, k, g, ut); break;
        }
    }
    for (t0 = 0; t0 + 8 <= k; t0 += 8)
        for (a0 = 0; a0 < z; a0 += 8) {
            __m256 q[8];
            mfm__load8x8(q, ut + t0 * zs + a0, zs);
            mfm__transpose8(q);
            MFM__STORE8X8(gv + a0 * k + t0, (uint64_t)k, q, z - a0);
        }
    if (t0 < k)
        for (a0 = 0; a0 < z; a0 += 8) {
            const float *const u = ut + t0 * zs + a0;
            const __m256 r0 = _mm256_loadu_ps(u), r1 = _mm256_loadu_ps(u + zs), r2 = _mm256_loadu_ps(u + 2 * zs), r3 = _mm256_loadu_ps(u + 3 * zs);
            const __m256 t01 = _mm256_unpacklo_ps(r0, r1), u01 = _mm256_unpackhi_ps(r0, r1), t23 = _mm256_unpacklo_ps(r2, r3), u23 = _mm256_unpackhi_ps(r2, r3);
            const __m256 s[4] = {_mm256_shuffle_ps(t01, t23, 0x44), _mm256_shuffle_ps(t01, t23, 0xEE), _mm256_shuffle_ps(u01, u23, 0x44),
                                 _mm256_shuffle_ps(u01, u23, 0xEE)}; /* s[j]: vector a0 + j's four factors, then a0 + 4 + j's */
            for (j = 0; j < 8 && a0 + j < z; j++) _mm_storeu_ps(gv + (a0 + j) * k + t0, j < 4 ? _mm256_castps256_ps128(s[j]) : _mm256_extractf128_ps(s[j - 4], 1));
        }
}

/* k = 8 and 4 (the common cases) get their own copies. */
MFM__AVX_FN static void mfm__fwfm_kept_gradients_wide(const float *w, uint64_t z, int k, float g, float *ut, float *gv) {
    if (k == 8)
        mfm__fwfm_kept_gradients_k(w, z, 8, g, ut, gv);
    else if (k == 4)
        mfm__fwfm_kept_gradients_k(w, z, 4, g, ut, gv);
    else
        mfm__fwfm_kept_gradients_k(w, z, k, g, ut, gv);
}
#endif

/* out[i] = g x_a x_b <v_a, v_b> for a's partners b = p[i], i < n (room for n + 3), four at a time
   (fewer repeat the first); the body of a function with mfm__fwfm_partner_terms's parameters. */
#define MFM__FWFM_PARTNER_TERMS(DOTS4)                                                                                    \
    uint64_t i;                                                                                                           \
    for (i = 0; i < n; i += 4) {                                                                                          \
        const uint64_t group = n - i < 4 ? n - i : 4;                                                                     \
        const uint32_t p0 = p[i], p1 = p[i + (group > 1)], p2 = p[i + (group > 2 ? 2 : 0)], p3 = p[i + (group > 3 ? 3 : 0)]; \
        const mfm__f4 xx = mfm__f4_mul(mfm__f4_set1(x[a]), mfm__f4_set4(x[p0], x[p1], x[p2], x[p3]));                  \
        mfm__f4_store(out + i, mfm__f4_mul(mfm__f4_mul(mfm__f4_set1(g), xx), DOTS4(v[a], v[p0], v[p1], v[p2], v[p3], k))); \
    }

static void mfm__fwfm_partner_terms(const float *const *v, const float *x, uint64_t a, const uint32_t *p, uint64_t n, float g, int k, float *out) {
    MFM__FWFM_PARTNER_TERMS(mfm__dots4)
}

#if defined(MFM__AVX)
MFM__AVX_FN static void mfm__fwfm_partner_terms_wide(const float *const *v, const float *x, uint64_t a, const uint32_t *p, uint64_t n, float g, int k, float *out) {
    MFM__FWFM_PARTNER_TERMS(mfm__dots4_wide)
}
#endif

/* A batch row's FwFM pairs whose r worker `me` owns: r(fa, fb) receives g x_a x_b <v_a, v_b>
   (wk->row_v: the row's vectors). Read through locals: the sums' stores could alias anything.
   A worker owns whole rows of R's upper triangle (tr->pair_owner), so in a dense row
   (mfm__fwfm_dense) it owns all of a's pairs with b > a, or none: no lookups. */
MFM__NOINLINE static void mfm__fwfm_pair_gradients(const mfm__trainer *tr, mfm__worker *wk, int me, uint32_t c, const mfm__row *row, float g) {
    const mfm_model *m = tr->m;
    const uint64_t F = m->n_fields, C = m->n_classes, z = row->z;
    const uint32_t stamp = tr->stamp_batch, *const field = row->field;
    const int k = m->k;
    mfm__coords *const own_r = &wk->own[MFM_TENSOR_R]; /* direct: entry id is r's block id */
    const mfm__coord_slot *const slots = own_r->slots;
    const float *const x = row->x, *const *const v = wk->row_v;
    float *const sums = own_r->g + c, *const dots = wk->pair_weight; /* a's with its partners */
    uint32_t *const partner = wk->partner; /* a's partners b > a whose pair this worker owns */
    uint64_t *const pairs = wk->pair_ids;
    const int dense = mfm__fwfm_dense(m, row);
    uint64_t a, i;
    for (a = 0; a < z; a++) {
        const uint16_t *owner = tr->pair_owner ? tr->pair_owner + (uint64_t)field[a] * F : NULL; /* [fb]: r(fa, fb)'s */
        const uint64_t *const id = m->pair_id + (uint64_t)field[a] * F;
        uint64_t n_pairs = 0, b;
        if (dense) {
            if (owner && owner[a] != me) continue;
            for (b = a + 1; b < z; b++) partner[n_pairs] = (uint32_t)b, pairs[n_pairs++] = a * F + b;
        } else {
            for (b = a + 1; b < z; b++) { /* without a branch: a row's fields come in any order, so one would often mispredict */
                partner[n_pairs] = (uint32_t)b;
                pairs[n_pairs] = id[field[b]];
                n_pairs += !owner || owner[field[b]] == me;
            }
        }
        for (i = 0; i < n_pairs; i++) /* the first touches in the batch, listed; apart from the sums, whose loop then keeps its registers */
            if (slots[pairs[i]].stamp != stamp) mfm__own(own_r, pairs[i], stamp, C);
#if defined(MFM__AVX)
        if (tr->opt.wide && k % 8 == 0)
            mfm__fwfm_partner_terms_wide(v, x, a, partner, n_pairs, g, k, dots);
        else
#endif
            mfm__fwfm_partner_terms(v, x, a, partner, n_pairs, g, k, dots);
        for (i = 0; i < n_pairs; i++) sums[(uint64_t)slots[pairs[i]].index * C] += dots[i];
    }
}

/* Whether the row's score leaves terms (tr->terms): FwFM's dense rows. */
static int mfm__keeps_terms(const mfm__trainer *tr, const mfm__row *row) {
    return tr->terms && mfm__fwfm_dense(tr->m, row);
}

/* FM: what v_a receives from a row, g ds/dv_a = g x_a (sum - v_a x_a), k floats into out. */
static void mfm__fm_vector_term(const float *v, const float *sum, float g, float xa, uint64_t k, float *out) {
    const float gx = g * xa;
    const mfm__f4 gx4 = mfm__f4_set1(gx), xa4 = mfm__f4_set1(xa);
    uint64_t t;
    for (t = 0; t + 4 <= k; t += 4) mfm__f4_store(out + t, mfm__f4_mul(gx4, mfm__f4_sub(mfm__f4_load(sum + t), mfm__f4_mul(mfm__f4_load(v + t), xa4))));
    for (; t < k; t++) out[t] = gx * (sum[t] - v[t] * xa);
}

/* FwFM's dense batch rows (mfm__fwfm_dense) where the CPU has AVX and k is a multiple of 4:
   the worker that scores the row keeps its pairs (mfm__kept_stride) and leaves, per class, the
   terms its coordinates receive: g U_a for every v_a (z x k, mfm__fwfm_kept_gradients_wide),
   then g x_a x_b <v_a, v_b> for each pair a < b, a-major. The scoring and the products split
   among the workers with the rows. The terms and their order are those of the pair-by-pair
   path, so the bits are the same. */

#if defined(MFM__AVX)
MFM__AVX_FN static void mfm__fwfm_keep_terms(const mfm__trainer *tr, mfm__worker *wk, uint64_t q, const mfm__row *row) {
    const mfm_model *m = tr->m;
    const uint64_t C = m->n_classes, z = row->z, zs = mfm__kept_stride(z);
    const float *const x = row->x;
    uint64_t a, b;
    uint32_t c;
    for (c = 0; c < C; c++) {
        const float g = tr->dlds[q * C + c], *const keep = wk->pair_keep + c * mfm__kept_floats(z, m->k);
        float *const terms = tr->terms + (q * C + c) * tr->terms_row;
        float *r_terms = terms + z * m->k;
        const __m256 g8 = _mm256_set1_ps(g);
        mfm__fwfm_kept_gradients_wide(keep, z, m->k, g, wk->row_ut, terms);
        for (a = 0; a < z; r_terms += z - a - 1, a++) { /* g (x_a x_b) dot, eight pairs at a time */
            const float xa = x[a], *const da = keep + z * zs + a * zs;
            const __m256 xa8 = _mm256_set1_ps(xa);
            float *const out = r_terms - (a + 1); /* pair (a, b) at out[b] */
            for (b = a + 1; b + 8 <= z; b += 8) _mm256_storeu_ps(out + b, _mm256_mul_ps(_mm256_mul_ps(g8, _mm256_mul_ps(xa8, _mm256_loadu_ps(x + b))), _mm256_loadu_ps(da + b)));
            for (; b < z; b++) out[b] = g * (xa * x[b]) * da[b];
        }
    }
}
#endif

/* Adds up the r terms of one class (after the row's z x k v terms) that worker `me` owns: the
   owned rows of R's upper triangle (whole rows: pair_owner). Where the batch's first r touches
   were a dense row's, they listed every owned pair in order, so a row of R's pairs are
   consecutive entries and their sums one run, added four at a time; else each pair finds its
   entry. */
static void mfm__fwfm_kept_r_gradients(const mfm__trainer *tr, mfm__worker *wk, int me, uint32_t c, const mfm__row *row, const float *terms) {
    const mfm_model *m = tr->m;
    const uint64_t F = m->n_fields, C = m->n_classes, z = row->z, k = (uint64_t)m->k;
    const uint32_t stamp = tr->stamp_batch;
    mfm__coords *const own_r = &wk->own[MFM_TENSOR_R]; /* direct: entry id is r's block id */
    const mfm__coord_slot *const slots = own_r->slots; /* read through a local: the sums' stores could alias anything */
    const uint16_t *const row_owner = tr->pair_owner;
    const float *r_terms = terms + z * k;
    float *const sums = own_r->g + c;
    const int first = own_r->n == 0; /* this row lists the batch's r entries */
    uint64_t a, j, entry = 0;
    for (a = 0; a + 1 < z; r_terms += z - a - 1, a++) {
        const uint64_t at = a * F + a + 1, n = z - a - 1; /* r_terms[j]: the pair (a, a + 1 + j), block at + j */
        if (row_owner && row_owner[a * F + a] != me) continue;
        if (wk->r_in_order && !first) { /* entries entry .. entry + n - 1 */
            if (C == 1)
                mfm__axpy(sums + entry, 1.0f, r_terms, (int)n);
            else
                for (j = 0; j < n; j++) sums[(entry + j) * C] += r_terms[j];
            entry += n;
            continue;
        }
        for (j = 0; j < n; j++) /* the first touches in the batch, then the sums */
            if (slots[at + j].stamp != stamp) mfm__own(own_r, at + j, stamp, C);
        for (j = 0; j < n; j++) sums[(uint64_t)slots[at + j].index * C] += r_terms[j];
    }
    if (first) wk->r_in_order = 1;
}

/* FFM: the slots v(b, field a) of a's partners b, which a's gradients read two owned non-zeros
   later: the score read them too, but a batch's rows read more than the caches hold. */
MFM__INLINE static void mfm__prefetch_ffm_partners(const mfm_model *m, uint32_t c, const mfm__row *row, uint32_t a) {
    uint32_t b;
    for (b = 0; b < row->z; b++) MFM__PREFETCH(mfm__ffm_slot(m, c, row->feat[b], row->field[a]));
}

/* FFM with v keyed by feature (its entries are w's, v->parts fields each): what the row's
   owned non-zeros' slots receive, a by a: slot (a, field b) receives g x_a x_b v(b, field a)
   into its entry's sums, in the order of b. The row is read through a copy (wk->ffm_row): the
   sums are stored through pointers that may alias anything, after which the compiler would read
   the row and the table's shape again for every term. Several workers ask for the partner slots
   two non-zeros ahead: another worker scored the row, and a batch's rows read more than the
   caches hold. One worker sums the row it has just scored, and asks for the next row's spans
   (wk->next_span) feature by feature as it goes, as batch 1's steps do: asked for all at once
   before the row's score, they made one worker's batch 4096 train 9-12 % slower (best of
   three, FFM k = 4, 100k rows, 2-core VM, three turns: 63.5-70.8k rows/s against 69.9-79.4k). */
MFM__INLINE static void mfm__ffm_feature_sums_k(const mfm__trainer *tr, mfm__worker *wk, uint32_t c, const mfm__row *row, const uint32_t *owned, uint32_t n_owned,
                                                  float g, uint32_t k) {
    const mfm_model *m = tr->m;
    mfm__coords *const v = &wk->own[MFM_TENSOR_V];
    const mfm__table *V = &m->t[MFM_TENSOR_V];
    const float *const table = V->data + (uint64_t)c * V->n_blocks * V->stride;
    const uint32_t F = m->n_fields, z = row->z;
    const uint64_t stride = V->stride, cell = (uint64_t)m->n_classes * k, width = F * cell; /* sums: [field][class][k] */
    const int ask = tr->n_workers > 1;
    const mfm__ffm_span *const next = wk->next_span.bytes ? &wk->next_span : NULL;
    mfm__ffm_nonzero *const nz = wk->ffm_row;
    uint32_t i, b, t;
    for (b = 0; b < z; b++)
        nz[b].vectors = (uint64_t)row->feat[b] * F * stride, nz[b].field = row->field[b], nz[b].cell = row->field[b] * (uint32_t)cell, nz[b].x = row->x[b];
    for (i = 0; ask && i < 2 && i < n_owned; i++) mfm__prefetch_ffm_partners(m, c, row, owned[i]);
    for (i = 0; i < n_owned; i++) {
        const uint32_t a = owned[i];
        float *const sums = mfm__own_like_w(v, wk->entry[i], row->feat[a], width) + (uint64_t)c * k;
        mfm__ffm_ask(table, next, i);
        unsigned char *const touched = v->flags + (uint64_t)wk->entry[i] * F;
        const float *const partners = table + nz[a].field * stride; /* + a partner's vectors: its slot for a's field */
        const float xa = nz[a].x;
        if (ask && i + 2 < n_owned) mfm__prefetch_ffm_partners(m, c, row, owned[i + 2]);
        for (b = 0; b < z; b++) {
            const float coef = a < b ? g * xa * nz[b].x : g * nz[b].x * xa;
            const float *const vb = partners + nz[b].vectors;
            float *const s = sums + nz[b].cell;
            const mfm__f4 c4 = mfm__f4_set1(coef);
            if (b == a) continue;
            touched[nz[b].field] = 1;
            for (t = 0; t + 4 <= k; t += 4) mfm__f4_store(s + t, mfm__f4_add(mfm__f4_load(s + t), mfm__f4_mul(c4, mfm__f4_load(vb + t))));
            for (; t < k; t++) s[t] += coef * vb[t];
        }
    }
    mfm__ffm_ask_rest(table, next, n_owned);
}

/* k = 4, the common case, gets its own copy. */
static void mfm__ffm_feature_sums(const mfm__trainer *tr, mfm__worker *wk, uint32_t c, const mfm__row *row, const uint32_t *owned, uint32_t n_owned, float g) {
    if (tr->m->k == 4)
        mfm__ffm_feature_sums_k(tr, wk, c, row, owned, n_owned, g, 4);
    else
        mfm__ffm_feature_sums_k(tr, wk, c, row, owned, n_owned, g, (uint32_t)tr->m->k);
}

/* Adds g * ds/dtheta of class c's score on one row (g = weight * dL/ds) to the coordinates
   worker `me` owns. Within a row, a coordinate receives its terms in the order of the partner
   non-zero, which is the order the in-place path uses; mfm__gradient_room made room for the
   row's first touches. */
static void mfm__gradient_row(const mfm__trainer *tr, mfm__worker *wk, int me, uint32_t c, const mfm__row *row, const uint32_t *owned, uint32_t n_owned,
                             float g, const float *sum, const float *terms) {
    const mfm_model *m = tr->m;
    const int k = m->k, pairs_only = m->params.pairs_only;
    const int ask = m->params.model == MFM_MODEL_FFM && tr->n_workers > 1; /* FFM's partner slots, unless one worker scored the row just now */
    const uint32_t F = m->n_fields, C = m->n_classes, stamp = tr->stamp_batch;
    uint32_t a, b, i;
    float *gc;
    const uint64_t L = tr->line ? 2 * (uint64_t)C : C; /* the linear terms' sums, then (line search) the squares of their terms */
    if (me == 0) { /* pairs_only: w0 and w are touched with zero gradients: they stay 0 */
        gc = mfm__own(&wk->own[MFM_TENSOR_W0], 0, stamp, L);
        if (!pairs_only) gc[c] += g;
        if (tr->line) gc[C + c] += g * g;
    }
    for (i = 0; i < n_owned; i++) {
        const float term = g * row->x[a = owned[i]];
        gc = wk->own[MFM_TENSOR_W].g + (uint64_t)wk->entry[i] * L;
        if (!pairs_only) gc[c] += term;
        if (tr->line) gc[C + c] += term * term;
    }
    if (m->params.linear_only) return;
    if (terms) { /* the terms the row's score left (mfm__keeps_terms): v_a's, then FwFM's r. Adding a
                    term with mfm__axpy's 1 x term is the add of summing in place: the same bits. */
        for (i = 0; i < n_owned; i++) {
            gc = mfm__own_like_w(&wk->own[MFM_TENSOR_V], wk->entry[i], row->feat[owned[i]], (uint64_t)C * k);
            mfm__axpy(gc + (uint64_t)c * k, 1.0f, terms + (uint64_t)owned[i] * k, k);
        }
        if (m->params.model == MFM_MODEL_FWFM) mfm__fwfm_kept_r_gradients(tr, wk, me, c, row, terms);
        return;
    }
    if (m->params.model == MFM_MODEL_FFM && wk->own[MFM_TENSOR_V].parts) {
        mfm__ffm_feature_sums(tr, wk, c, row, owned, n_owned, g);
        return;
    }
    for (i = 0; ask && i < 2 && i < n_owned; i++) mfm__prefetch_ffm_partners(m, c, row, owned[i]);
    for (i = 0; i < n_owned; i++) {
        const uint32_t ia = row->feat[a = owned[i]], fa = m->params.model == MFM_MODEL_FM ? 0 : row->field[a];
        const float xa = row->x[a];
        switch (m->params.model) {
        case MFM_MODEL_FFM: /* slot (a, field b) receives g x_a x_b v(b, field a) */
            if (ask && i + 2 < n_owned) mfm__prefetch_ffm_partners(m, c, row, owned[i + 2]);
            for (b = 0; b < row->z; b++) {
                const float *vb = mfm__ffm_slot(m, c, row->feat[b], fa);
                const float coef = a < b ? g * xa * row->x[b] : g * row->x[b] * xa;
                if (b == a) continue;
                gc = mfm__own(&wk->own[MFM_TENSOR_V], (uint64_t)ia * F + row->field[b], stamp, (uint64_t)C * k);
                mfm__axpy(gc + (uint64_t)c * k, coef, vb, k);
            }
            break;
        case MFM_MODEL_FWFM: /* v_a's gradient in this row is summed first (below), then added */
            break;
        default: /* FM, where the score left no terms */
            mfm__fm_vector_term(mfm__block(m, MFM_TENSOR_V, c, ia), sum, g, xa, (uint64_t)k, wk->row_g);
            gc = mfm__own_like_w(&wk->own[MFM_TENSOR_V], wk->entry[i], ia, (uint64_t)C * k);
            mfm__axpy(gc + (uint64_t)c * k, 1.0f, wk->row_g, k);
            break;
        }
    }
    if (m->params.model == MFM_MODEL_FWFM) { /* v_a receives the row's sum of g x_a x_b r(fa, fb) v_b over its partners b */
        for (a = 0; a < row->z; a++) wk->row_v[a] = mfm__block(m, MFM_TENSOR_V, c, row->feat[a]);
        mfm__fwfm_vector_gradients(&tr->opt, m, c, row, wk->row_v, g, owned, n_owned, k, NULL, wk->pair_weight, wk->row_g);
        for (i = 0; i < n_owned; i++) {
            gc = mfm__own_like_w(&wk->own[MFM_TENSOR_V], wk->entry[i], row->feat[owned[i]], (uint64_t)C * k);
            mfm__axpy(gc + (uint64_t)c * k, 1.0f, wk->row_g + (uint64_t)i * k, k);
        }
    }
    if (m->params.model == MFM_MODEL_FWFM) mfm__fwfm_pair_gradients(tr, wk, me, c, row, g);
}

/* Batch 1, a row whose coordinates each take part in one term only (mfm__row_is_simple): every
   coordinate's step can be taken as soon as its gradient is known, from the same frozen values
   and with the same float operations as accumulate + apply, so the bits are the same. */

/* One step for each of n blocks of len coordinates (blk[i], gradient grad[i * len ...]). */
static void mfm__steps(const mfm__optim *o, float *const *blk, const float *grad, uint32_t n, uint32_t len, float l1, float l2) {
    uint32_t i;
    if (mfm__steps_as_adagrad(o, len)) {
        mfm__adagrad_blocks(o, blk, grad, n, len, l2);
        return;
    }
    if (o->kind == MFM_OPTIMIZER_ROWWISE_ADAGRAD) {
        mfm__rowwise_blocks(o->lr, blk, grad, n, len, l2);
        return;
    }
    for (i = 0; i < n; i++) mfm__step(o, blk[i], len, grad + (uint64_t)i * len, 1.0f, l1, l2);
}

#if defined(MFM__AVX)
/* AdaGrad's steps of eight pairs' r, blocks [r, G] side by side in lo (pairs 0 .. 3) and hi
   (4 .. 7): split into eight r and eight G, stepped with gradient (g (x_a x_b)) dot_b, put back. */
MFM__AVX_INLINE static void mfm__fwfm_r8_adagrad(const mfm__optim *o, __m256 *lo, __m256 *hi, __m256 g, __m256 xa, __m256 xb, __m256 dot, float l2) {
    const __m256 t = _mm256_permute2f128_ps(*lo, *hi, 0x20), u = _mm256_permute2f128_ps(*lo, *hi, 0x31); /* r0 G0 r1 G1 r4 G4 r5 G5, 2 3 6 7 */
    __m256 th = _mm256_shuffle_ps(t, u, 0x88), G = _mm256_shuffle_ps(t, u, 0xDD), il, ih;
    mfm__adagrad8(&th, &G, _mm256_add_ps(_mm256_setzero_ps(), _mm256_mul_ps(_mm256_mul_ps(g, _mm256_mul_ps(xa, xb)), dot)), o->lr, l2);
    il = _mm256_unpacklo_ps(th, G), ih = _mm256_unpackhi_ps(th, G); /* r0 G0 r1 G1 | r4 G4 r5 G5, and 2, 3 | 6, 7 */
    *lo = _mm256_permute2f128_ps(il, ih, 0x20), *hi = _mm256_permute2f128_ps(il, ih, 0x31);
}

/* AdaGrad's steps of a dense row's r (mfm__fwfm_dense) at batch 1, blocks [r, G] side by side:
   eight pairs from two loads (mfm__fwfm_r8_adagrad), the last group of a's masked. The gradient
   and the step are mfm__fwfm_row_update's and mfm__adagrad's, lane by lane (the same bits); dot:
   the row's kept dots (mfm__kept_stride), x: its values. */
MFM__AVX_FN static void mfm__fwfm_dense_r_adagrad(const mfm__optim *o, float *r, uint64_t F, const float *x, const float *dot, float g, float l2) {
    static const int32_t first[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0}; /* first + 8 - n: lanes below n */
    uint64_t a, b;
    for (a = 0; a + 1 < F; a++) {
        const __m256 g8 = _mm256_set1_ps(g), xa8 = _mm256_set1_ps(x[a]);
        const float *const da = dot + a * mfm__kept_stride(F);
        float *const ra = r + a * F * 2; /* block a F + b at ra + 2 b */
        for (b = a + 1; b + 8 <= F; b += 8) {
            float *const p = ra + 2 * b;
            __m256 lo = _mm256_loadu_ps(p), hi = _mm256_loadu_ps(p + 8);
            mfm__fwfm_r8_adagrad(o, &lo, &hi, g8, xa8, _mm256_loadu_ps(x + b), _mm256_loadu_ps(da + b), l2);
            _mm256_storeu_ps(p, lo), _mm256_storeu_ps(p + 8, hi);
        }
        if (b < F) {
            const uint64_t n = F - b, n_lo = 2 * n < 8 ? 2 * n : 8;
            const __m256i mask = _mm256_loadu_si256((const __m256i *)(first + 8 - n));
            const __m256i mask_lo = _mm256_loadu_si256((const __m256i *)(first + 8 - n_lo)), mask_hi = _mm256_loadu_si256((const __m256i *)(first + 8 - (2 * n - n_lo)));
            float *const p = ra + 2 * b;
            if (F >= 8) { /* the blocks past the row are the next row's first, within R: stored back as they were (a masked store is slow) */
                const __m256 lo0 = _mm256_loadu_ps(p), hi0 = _mm256_loadu_ps(p + 8), new_lo = _mm256_castsi256_ps(mask_lo), new_hi = _mm256_castsi256_ps(mask_hi);
                __m256 lo = lo0, hi = hi0;
                mfm__fwfm_r8_adagrad(o, &lo, &hi, g8, xa8, _mm256_maskload_ps(x + b, mask), _mm256_maskload_ps(da + b, mask), l2);
                /* and / or, not a blend: GCC takes a blend whose mask it can see apart lane by lane */
                _mm256_storeu_ps(p, _mm256_or_ps(_mm256_and_ps(new_lo, lo), _mm256_andnot_ps(new_lo, lo0)));
                _mm256_storeu_ps(p + 8, _mm256_or_ps(_mm256_and_ps(new_hi, hi), _mm256_andnot_ps(new_hi, hi0)));
            } else {
                __m256 lo = _mm256_maskload_ps(p, mask_lo), hi = _mm256_maskload_ps(p + 8, mask_hi);
                mfm__fwfm_r8_adagrad(o, &lo, &hi, g8, xa8, _mm256_maskload_ps(x + b, mask), _mm256_maskload_ps(da + b, mask), l2);
                _mm256_maskstore_ps(p, mask_lo, lo), _mm256_maskstore_ps(p + 8, mask_hi, hi);
            }
        }
    }
}
#endif

/* A gradient g of R's entry `at` (class c's entry e: c x blocks + e), into the share's sums. */
MFM__INLINE static void mfm__r_pending_see(mfm__r_pending *q, uint64_t at) {
    if (!q->seen[at]) q->seen[at] = 1, q->touched[q->n++] = at;
}

MFM__INLINE static void mfm__r_pending_add(mfm__r_pending *q, uint64_t at, float g) {
    mfm__r_pending_see(q, at);
    q->sums[at] += g;
}

/* A dense row's (mfm__fwfm_dense) gradients of R into the share's sums: the pairs (a, b > a) of
   a are R's consecutive blocks a F + b, so the row adds four at a time what mfm__r_pending_add
   adds one by one (the same values, in the same order: the same bits); its pairs are seen once a
   window. x: the row's values, dot: its kept dots (mfm__kept_stride). */
static void mfm__r_pending_dense(mfm__r_pending *q, const mfm_model *m, uint32_t c, uint64_t F, const float *x, const float *dot, float g) {
    const uint64_t first = c * m->t[MFM_TENSOR_R].n_blocks;
    const mfm__f4 g4 = mfm__f4_set1(g), zero = mfm__f4_set1(0.0f);
    uint64_t a, b;
    for (a = 0; a + 1 < F; a++) {
        float *const s = q->sums + first + a * F;
        const float xa = x[a], *const da = dot + a * mfm__kept_stride(F);
        const mfm__f4 xa4 = mfm__f4_set1(xa);
        for (b = a + 1; b + 4 <= F; b += 4)
            mfm__f4_store(s + b, mfm__f4_add(mfm__f4_load(s + b), mfm__f4_add(zero, mfm__f4_mul(mfm__f4_mul(g4, mfm__f4_mul(xa4, mfm__f4_load(x + b))), mfm__f4_load(da + b)))));
        for (; b < F; b++) s[b] += 0 + g * (xa * x[b]) * da[b];
    }
    if (q->dense[c]) return;
    q->dense[c] = 1;
    for (a = 0; a < F; a++)
        for (b = a + 1; b < F; b++) mfm__r_pending_see(q, first + a * F + b);
}

/* One step per entry of R the share's last rows touched, with their gradients' sum (AdaGrad's
   batch rule, MFM__BATCH_ROWS: the mean for the other optimizers). */
static void mfm__r_pending_step(const mfm__trainer *tr) {
    mfm__r_pending *q = tr->r_pending;
    mfm_model *m = tr->m;
    const uint64_t nb = m->t[MFM_TENSOR_R].n_blocks;
    const float rows = MFM__BATCH_ROWS(tr->opt.kind, q->rows);
    uint64_t i;
    for (i = 0; i < q->n; i++) {
        const uint64_t at = q->touched[i];
        mfm__step(&tr->opt, mfm__block(m, MFM_TENSOR_R, (uint32_t)(at / nb), at % nb), 1, &q->sums[at], rows, (float)m->params.l1_factors,
                  (float)m->params.l2_factors);
        q->sums[at] = 0, q->seen[at] = 0;
    }
    q->n = 0, q->rows = 0;
    memset(q->dense, 0, m->n_classes);
}

/* FwFM's pairs of a row that is a batch of its own, from the weights and dots its score kept
   (`keep`, see mfm__fwfm_pairs). r(fa, fb) is read by its pair alone and receives
   g x_a x_b <v_a, v_b>; v_a receives mfm__fwfm_vector_gradients's sum. Both are collected, then
   stepped. */
static void mfm__fwfm_row_update(const mfm__trainer *tr, mfm__worker *wk, uint32_t c, const mfm__row *row, float g, const float *keep) {
    mfm_model *m = tr->m;
    const float l1v = (float)m->params.l1_factors, l2v = (float)m->params.l2_factors;
    const uint64_t z = row->z, rs = m->t[MFM_TENSOR_R].stride;
    const float *const dot = keep + z * mfm__kept_stride(z), *const x = row->x, *const r = mfm__block(m, MFM_TENSOR_R, c, 0);
    const uint32_t *const field = row->field;
    const float **const v = wk->row_v;
    float **const blk = wk->one_blk, *const gr = wk->one_g;
    uint64_t a, n_r = 0;
    for (a = 0; a < z; a++) v[a] = mfm__block(m, MFM_TENSOR_V, c, row->feat[a]);
    if (tr->r_pending && mfm__fwfm_dense(m, row))
        mfm__r_pending_dense(tr->r_pending, m, c, z, x, dot, g);
    else
#if defined(MFM__AVX)
    if (tr->opt.wide && !tr->r_pending && mfm__steps_as_adagrad(&tr->opt, 1) && rs == 2 && mfm__fwfm_dense(m, row))
        mfm__fwfm_dense_r_adagrad(&tr->opt, (float *)r, z, x, dot, g, l2v);
    else
#endif
    for (a = 0; a < z; a++) { /* read through locals: the stores could alias the row for all the compiler knows */
        const uint64_t *const at = m->pair_id + (uint64_t)field[a] * m->n_fields;
        const float xa = x[a], *const da = dot + a * mfm__kept_stride(z);
        uint64_t b;
        const mfm__f4 g4 = mfm__f4_set1(g), xa4 = mfm__f4_set1(xa), zero = mfm__f4_set1(0.0f);
        float *const gr_a = gr + n_r - (a + 1);
        for (b = a + 1; b < z; b++) blk[n_r++] = (float *)r + at[field[b]] * rs;
        for (b = a + 1; b + 4 <= z; b += 4) /* the batched path's value, four at a time */
            mfm__f4_store(gr_a + b, mfm__f4_add(zero, mfm__f4_mul(mfm__f4_mul(g4, mfm__f4_mul(xa4, mfm__f4_load(x + b))), mfm__f4_load(da + b))));
        for (; b < z; b++) gr_a[b] = 0 + g * (xa * x[b]) * da[b];
        for (b = a + 1; tr->r_pending && b < z; b++) mfm__r_pending_add(tr->r_pending, c * m->t[MFM_TENSOR_R].n_blocks + at[field[b]], gr_a[b]);
    }
#if defined(MFM__AVX)
    if (tr->opt.wide && m->k % 4 == 0)
        mfm__fwfm_kept_gradients_wide(keep, z, m->k, g, wk->row_ut, wk->row_g);
    else
#endif
    mfm__fwfm_vector_gradients(&tr->opt, m, c, row, v, g, wk->owned, (uint32_t)z, m->k, keep, NULL, wk->row_g);
    if (!tr->r_pending) mfm__steps(&tr->opt, wk->one_blk, wk->one_g, n_r, 1, l1v, l2v); /* else held back, added above */
    for (a = 0; a < z; a++) wk->one_blk[a] = mfm__block(m, MFM_TENSOR_V, c, row->feat[a]);
    mfm__steps(&tr->opt, wk->one_blk, wk->row_g, (uint32_t)z, (uint32_t)m->k, l1v, l2v);
    if (tr->r_pending && c + 1 == m->n_classes && ++tr->r_pending->rows == MFM__HOGWILD_R_ROWS) mfm__r_pending_step(tr);
}

static void mfm__update_row(const mfm__trainer *tr, mfm__worker *wk, uint32_t c, const mfm__row *row, float g, const float *sum, const float *keep) {
    mfm_model *m = tr->m;
    const mfm_params *p = &m->params;
    const mfm__optim *o = &tr->opt;
    const int k = m->k;
    const float l1w = (float)p->l1_linear, l2w = (float)p->l2_linear, l1v = (float)p->l1_factors, l2v = (float)p->l2_factors;
    const mfm__ffm_span *const next = tr->next_span.bytes ? &tr->next_span : NULL;
    const float *const table = next ? mfm__block(m, MFM_TENSOR_V, c, 0) : NULL; /* FFM: class c's V, for next's spans */
    float *w0 = mfm__block(m, MFM_TENSOR_W0, c, 0), g0;
    uint32_t a, b;
    int t;
    /* "0 +" everywhere: the batched path sums into zeros, which turns a -0 into +0 */
    g0 = p->pairs_only ? 0.0f : 0 + g; /* pairs_only: w0 and w take zero steps, as batched */
    mfm__steps(o, &w0, &g0, 1, 1, 0, 0);
    for (a = 0; a < row->z; a++) {
        wk->one_blk[a] = mfm__block(m, MFM_TENSOR_W, c, row->feat[a]);
        wk->one_g[a] = p->pairs_only ? 0.0f : 0 + g * row->x[a];
    }
    mfm__steps(o, wk->one_blk, wk->one_g, row->z, 1, l1w, l2w);
    if (p->linear_only) return;
    switch (p->model) {
    case MFM_MODEL_FFM: /* slot (a, field b) is read by the pair (a, b) alone */
        if (o->kind == MFM_OPTIMIZER_ROWWISE_ADAGRAD && k > 1 && k <= MFM__ROWWISE_FLOATS) {
            if (k == 4)
                mfm__ffm_row_rowwise(o, m, c, row, g, 4, l2v, next);
            else
                mfm__ffm_row_rowwise(o, m, c, row, g, (uint32_t)k, l2v, next);
            break;
        }
        if (o->kind == MFM_OPTIMIZER_ADAGRAD) { /* k = 4 gets its own copy, with the k-loop unrolled */
#if defined(MFM__AVX)
            if (o->wide) {
                mfm__ffm_row_adagrad_wide(o, m, c, row, g, (uint32_t)k, l2v, next);
                break;
            }
#endif
            if (k == 4)
                mfm__ffm_row_adagrad(o, m, c, row, g, 4, l2v, next);
            else
                mfm__ffm_row_adagrad(o, m, c, row, g, (uint32_t)k, l2v, next);
            break;
        }
        for (a = 0; a < row->z; a++) {
            mfm__ffm_ask(table, next, a);
            for (b = a + 1; b < row->z; b++) {
                float *va = mfm__block(m, MFM_TENSOR_V, c, (uint64_t)row->feat[a] * m->n_fields + row->field[b]);
                float *vb = mfm__block(m, MFM_TENSOR_V, c, (uint64_t)row->feat[b] * m->n_fields + row->field[a]);
                float coef = g * row->x[a] * row->x[b], *ga = wk->row_g, *gb = wk->row_g + k;
                for (t = 0; t < k; t++) {
                    ga[t] = 0 + coef * vb[t];
                    gb[t] = 0 + coef * va[t];
                }
                mfm__step(o, va, (uint32_t)k, ga, 1.0f, l1v, l2v);
                mfm__step(o, vb, (uint32_t)k, gb, 1.0f, l1v, l2v);
            }
        }
        mfm__ffm_ask_rest(table, next, row->z);
        break;
    case MFM_MODEL_FWFM:
        mfm__fwfm_row_update(tr, wk, c, row, g, keep);
        break;
    default: /* FM: the sums are frozen in `sum`; every v_a is read before any is written */
        for (a = 0; a < row->z; a++) {
            const float *v = mfm__block(m, MFM_TENSOR_V, c, row->feat[a]);
            float xa = row->x[a], gx = g * xa, *gk = wk->row_g + (uint64_t)a * k;
            const mfm__f4 gx4 = mfm__f4_set1(gx), xa4 = mfm__f4_set1(xa), zero4 = mfm__f4_set1(0.0f);
            for (t = 0; t + 4 <= k; t += 4)
                mfm__f4_store(gk + t, mfm__f4_add(zero4, mfm__f4_mul(gx4, mfm__f4_sub(mfm__f4_load(sum + t), mfm__f4_mul(mfm__f4_load(v + t), xa4)))));
            for (; t < k; t++) gk[t] = 0 + gx * (sum[t] - v[t] * xa);
            wk->one_blk[a] = mfm__block(m, MFM_TENSOR_V, c, row->feat[a]);
        }
        mfm__steps(o, wk->one_blk, wk->row_g, row->z, (uint32_t)k, l1v, l2v);
        break;
    }
}

/* Whether a row's features are distinct and (FFM, FwFM) so are its fields: then each
   coordinate takes part in one term of the row only, and it may update in place. */
static int mfm__row_is_simple(mfm__trainer *tr, const mfm__row *row) {
    const uint32_t size = sizeof tr->feature_set / sizeof tr->feature_set[0];
    uint32_t a, h;
    if (row->z > size / 2) return 0;
    if (++tr->stamp == 0) { /* wrapped: clear the stamps once every 2^32 rows */
        memset(tr->field_stamp, 0, tr->m->n_fields * sizeof(uint32_t));
        memset(tr->feature_set, 0, sizeof tr->feature_set);
        tr->stamp = 1;
    }
    if (row->field && tr->m->params.model != MFM_MODEL_FM)
        for (a = 0; a < row->z; a++) {
            if (tr->field_stamp[row->field[a]] == tr->stamp) return 0;
            tr->field_stamp[row->field[a]] = tr->stamp;
        }
    for (a = 0; a < row->z; a++) { /* entries of earlier rows have older stamps: nothing to clear */
        for (h = (row->feat[a] * 2654435761u) >> 23; tr->feature_set[h][1] == tr->stamp; h = (h + 1) & (size - 1))
            if (tr->feature_set[h][0] == row->feat[a]) return 0;
        tr->feature_set[h][0] = row->feat[a];
        tr->feature_set[h][1] = tr->stamp;
    }
    return 1;
}

/* Row r's weight: its sample weight times its class's weight (docs/SPEC.md section 3). */
static float mfm__row_weight(const mfm__trainer *tr, uint64_t r) {
    const float weight = tr->d->weights ? tr->d->weights[r] : 1.0f;
    return tr->class_weights ? weight * tr->class_weights[(uint32_t)tr->d->labels[r]] : weight;
}

/* Scores one row for every class, adds its loss to the worker, and writes weight * dL/ds of
   every class to dlds (C values) and, for FM, the row's sums to sums (C x k). */
static void mfm__row_loss(const mfm__trainer *tr, mfm__worker *wk, uint64_t r, const mfm__row *row, float *dlds, float *sums, float *keep) {
    const mfm_model *m = tr->m;
    const uint32_t C = m->n_classes;
    const float eps = tr->smoothing, y = tr->d->labels[r], weight = mfm__row_weight(tr, r);
    double loss;
    uint32_t c;
    for (c = 0; c < C; c++) wk->score[c] = mfm__score(m, c, row, sums + (uint64_t)c * m->k, keep ? keep + c * mfm__kept_floats(row->z, m->k) : NULL);
    if (m->params.task == MFM_TASK_MULTICLASS) {
        double lse = mfm__softmax(wk->score, C, wk->prob);
        loss = 0;
        for (c = 0; c < C; c++) {
            double target = c == (uint32_t)y ? 1.0 - eps : eps / (C - 1);
            loss -= target * (wk->score[c] - lse);
            dlds[c] = weight * (float)(wk->prob[c] - target);
        }
    } else {
        double s = wk->score[0], g;
        if (m->params.task == MFM_TASK_REGRESSION) {
            g = s - y;
            loss = 0.5 * g * g;
        } else {
            double target = y * (1.0 - eps) + 0.5 * eps;
            g = mfm__sigmoid(s) - target;
            loss = (s > 0 ? s : 0) - s * target + log1p(exp(-fabs(s)));
        }
        dlds[0] = weight * (float)g;
    }
    wk->loss += weight * loss;
    wk->weight += weight;
}

/* A batch of one row whose coordinates each take part in one term (mfm__row_is_simple):
   scored, then stepped in place. */
static void mfm__train_row(const mfm__trainer *tr, mfm__worker *wk, uint64_t r) {
    const mfm__row row = mfm__get_row(tr->m, tr->d, r, tr->ones, wk->scaled);
    const uint64_t kept = mfm__kept_floats(row.z, tr->m->k); /* per class (FwFM) */
    uint32_t c;
    mfm__row_loss(tr, wk, r, &row, wk->dlds, wk->sum, wk->pair_keep);
    for (c = 0; c < tr->m->n_classes; c++) mfm__update_row(tr, wk, c, &row, wk->dlds[c], wk->sum + (uint64_t)c * tr->m->k, wk->pair_keep ? wk->pair_keep + c * kept : NULL);
}

/* Several workers without streams (FFM, and batches whose streams would pass MFM__TERMS_FLOATS):
   lists the non-zeros of the batch's row q, which this worker scores, grouped by the worker that
   owns each (in order within a group) at the end of wk->by_owner, and where each group starts in
   tr->owned_at. Each owner then walks only its own (mfm__gradient_task),
   and an owner is found once per non-zero, not once per worker. 0 when memory is short. */
static int mfm__group_by_owner(const mfm__trainer *tr, mfm__worker *wk, uint64_t q, const mfm__row *row) {
    const uint32_t W = (uint32_t)tr->n_workers;
    uint32_t *const at = tr->owned_at + q * (W + 1), *const cursor = wk->cursor;
    uint32_t a, o, n = (uint32_t)wk->n_by_owner;
    if (wk->n_by_owner + row->z > UINT32_MAX || !mfm__reserve((void **)&wk->by_owner, &wk->cap_by_owner, wk->n_by_owner + row->z, sizeof(uint32_t))) return 0;
    memset(cursor, 0, W * sizeof(uint32_t));
    for (a = 0; a < row->z; a++) cursor[wk->owner_of[a] = (uint32_t)mfm__owner(row->feat[a], (int)W)]++;
    for (o = 0; o < W; o++) {
        at[o] = n;
        n += cursor[o];
        cursor[o] = at[o];
    }
    at[W] = n;
    for (a = 0; a < row->z; a++) wk->by_owner[cursor[wk->owner_of[a]]++] = a;
    wk->n_by_owner = n;
    return 1;
}

/* Room for twice as many records (64 at first), in the ids and the terms alike. */
static int mfm__stream_grow(mfm__stream *st, uint64_t width) {
    uint64_t cap_ids = st->cap, cap_terms = st->cap * width, cap = st->cap ? 2 * st->cap : 64;
    if (!mfm__reserve((void **)&st->ids, &cap_ids, cap, sizeof(uint32_t)) || !mfm__reserve((void **)&st->terms, &cap_terms, cap * width, sizeof(float)))
        return 0;
    st->cap = cap;
    return 1;
}

/* Step 1, several workers with streams (tr->stream_width): the batch's row q leaves each of its
   non-zeros' terms in the stream of the non-zero's owner, while the row's v are in this core's
   cache. Its vectors' terms: class c's vector a at vterms[c vstride + a k]. 0 when memory is short. */
static int mfm__stream_row(const mfm__trainer *tr, mfm__worker *wk, uint64_t q, const mfm__row *row, const float *vterms, uint64_t vstride) {
    const mfm_model *m = tr->m;
    const uint64_t C = m->n_classes, k = (uint64_t)m->k, width = tr->stream_width;
    uint32_t a, c;
    for (a = 0; a < row->z; a++) {
        mfm__stream *const st = &wk->streams[mfm__owner(row->feat[a], tr->n_workers)];
        float *t;
        uint64_t i;
        if (st->n == st->cap && !mfm__stream_grow(st, width)) return 0;
        st->ids[st->n] = row->feat[a];
        t = st->terms + st->n++ * width;
        for (c = 0; c < C; c++) t[c] = tr->dlds[q * C + c] * row->x[a];
        for (c = 0; vterms && c < C; c++) { /* k floats, without a call to memcpy */
            const float *const from = vterms + c * vstride + a * k;
            float *const to = t + C + c * k;
            for (i = 0; i + 4 <= k; i += 4) mfm__f4_store(to + i, mfm__f4_load(from + i));
            for (; i < k; i++) to[i] = from[i];
        }
    }
    return 1;
}

/* The terms of the row's vectors that mfm__stream_row leaves, where its score left none (FM's
   rows, FwFM's sparse ones), into wk->row_terms; sums: FM's C x k sums. */
static void mfm__vector_terms(const mfm__trainer *tr, mfm__worker *wk, uint64_t q, const mfm__row *row, const float *sums) {
    const mfm_model *m = tr->m;
    const uint64_t C = m->n_classes, k = (uint64_t)m->k, z = row->z;
    uint32_t a, c;
    for (c = 0; c < C; c++) {
        const float g = tr->dlds[q * C + c];
        float *const out = wk->row_terms + c * z * k;
        if (m->params.model == MFM_MODEL_FM) {
            for (a = 0; a < z; a++) mfm__fm_vector_term(mfm__block(m, MFM_TENSOR_V, c, row->feat[a]), sums + c * k, g, row->x[a], k, out + a * k);
            continue;
        }
        for (a = 0; a < z; a++) wk->row_v[a] = mfm__block(m, MFM_TENSOR_V, c, row->feat[a]);
        mfm__fwfm_vector_gradients(&tr->opt, m, c, row, wk->row_v, g, wk->owned, (uint32_t)z, m->k, NULL, wk->pair_weight, out);
    }
}

/* Step 1 for the batch's row q (the worker's rows end at hi): its score against the frozen
   parameters, its loss and dL/ds, and what the owners read of it. 0 when memory is short. */
static int mfm__score_batch_row(const mfm__trainer *tr, mfm__worker *wk, uint64_t q, uint64_t hi, const mfm__row *row) {
    const uint64_t C = tr->m->n_classes, k = (uint64_t)tr->m->k;
    const int keeps = tr->kept[q] = (unsigned char)mfm__keeps_terms(tr, row); /* FwFM only */
    const float *vterms = NULL; /* what the streams take of the row's vectors (below) */
    uint64_t vstride = 0;
    memset(&wk->next_span, 0, sizeof wk->next_span);
    mfm__prefetch_data_ahead(tr, tr->rows, q, hi);
    if (q + 1 < hi) /* one worker's FFM by feature: the next row's spans, asked for feature by feature by this row's sums, as batch 1's steps do */
        mfm__prefetch_row(tr->m, tr->d, tr->rows[q + 1], tr->n_workers == 1 && wk->own[MFM_TENSOR_V].parts ? &wk->next_span : NULL, 1);
    if (tr->n_workers > 1 && !tr->stream_width && (wk->failed = !mfm__group_by_owner(tr, wk, q, row)) != 0) return 0;
    mfm__row_loss(tr, wk, tr->rows[q], row, tr->dlds + q * C, tr->sums ? tr->sums + q * C * k : wk->sum, keeps ? wk->pair_keep : NULL);
    if (tr->line) memcpy(tr->scores + q * C, wk->score, C * sizeof(float));
#if defined(MFM__AVX)
    if (keeps) mfm__fwfm_keep_terms(tr, wk, q, row);
#endif
    if (!tr->stream_width) return 1;
    if (keeps) {
        vterms = tr->terms + q * C * tr->terms_row, vstride = tr->terms_row;
    } else if (!tr->m->params.linear_only) {
        mfm__vector_terms(tr, wk, q, row, wk->sum);
        vterms = wk->row_terms, vstride = row->z * k;
    }
    return !(wk->failed = !mfm__stream_row(tr, wk, q, row, vterms, vstride));
}

/* Step 1, several workers: the worker's share of the batch's rows, scored against the frozen
   parameters. */
static void mfm__score_task(void *ctx, int index) {
    const mfm__trainer *tr = (const mfm__trainer *)ctx;
    mfm__worker *wk = &tr->workers[index];
    uint64_t q, lo, hi;
    int o;
    mfm__share(tr->n_batch, tr->n_workers, index, &lo, &hi);
    wk->n_by_owner = 0, wk->failed = 0;
    for (o = 0; wk->streams && o < tr->n_workers; o++) wk->streams[o].n = 0;
    for (q = lo; q < hi; q++) {
        const mfm__row row = mfm__get_row_scaled(tr->m, tr->d, tr->rows[q], tr->ones, wk->scaled, tr->factor ? tr->factor + q : NULL);
        if (!mfm__score_batch_row(tr, wk, q, hi, &row)) return;
    }
}

/* Room for a row's first touches in the worker's tables (see mfm__coords_room): n_owned of the
   row's non-zeros are the worker's. One worker's mfm__list_entries made room for the whole
   batch already but in FFM's v keyed by slot; asking again would grow tables mid-walk, after
   steps (tr->step_early). 0 when memory is short. */
static int mfm__gradient_room(const mfm__trainer *tr, mfm__worker *wk, const mfm__row *row, uint32_t n_owned) {
    const mfm_model *m = tr->m;
    const uint64_t C = m->n_classes, k = (uint64_t)m->k, F = m->n_fields, z = row->z;
    const uint32_t stamp = tr->stamp_batch;
    const uint64_t L = tr->line ? 2 * C : C; /* mfm__gradient_row */
    mfm__coords *v = &wk->own[MFM_TENSOR_V];
    if (tr->n_workers == 1) return m->params.linear_only || v->like_w || mfm__coords_room(v, (uint64_t)n_owned * z, C * k, stamp);
    if (!mfm__coords_room(&wk->own[MFM_TENSOR_W0], 1, L, stamp) || !mfm__coords_room(&wk->own[MFM_TENSOR_W], n_owned, L, stamp)) return 0;
    if (m->params.linear_only) return 1;
    switch (m->params.model) {
    case MFM_MODEL_FFM: /* keyed by feature (all of its slots in one entry, w's), or by slot */
        return v->like_w ? mfm__coords_room(v, n_owned, F * C * k, stamp) : mfm__coords_room(v, (uint64_t)n_owned * z, C * k, stamp);
    case MFM_MODEL_FWFM:
        return mfm__coords_room(v, n_owned, C * k, stamp) && mfm__coords_room(&wk->own[MFM_TENSOR_R], z * (z - 1) / 2, C, stamp);
    default:
        return mfm__coords_room(v, n_owned, C * k, stamp);
    }
}

/* The non-zeros of the batch's row q that worker `me` owns: all of them for one worker, else
   the group its scorer listed (mfm__group_by_owner); returns how many. */
static uint32_t mfm__owned_of(const mfm__trainer *tr, uint64_t q, int me, uint32_t **owned) {
    const uint64_t W = (uint64_t)tr->n_workers, per = (tr->n_batch + W - 1) / W; /* q's scorer: q / per (mfm__share) */
    const uint32_t *at;
    if (W == 1) {
        *owned = tr->workers[0].owned;
        return (uint32_t)(tr->d->row_offsets[tr->rows[q] + 1] - tr->d->row_offsets[tr->rows[q]]);
    }
    at = tr->owned_at + q * (W + 1) + me;
    *owned = tr->workers[q / per].by_owner + at[0];
    return at[1] - at[0];
}

/* x[0 .. n) /= d, four at a time: the division mfm__adagrad_span would make. */
static void mfm__divide(float *out, const float *x, uint64_t n, float d) {
    uint64_t i;
    for (i = 0; i + 4 <= n; i += 4) mfm__f4_store(out + i, mfm__f4_div(mfm__f4_load(x + i), mfm__f4_set1(d)));
    for (; i < n; i++) out[i] = x[i] / d;
}

/* The entries of a worker's table to step: list[0 .. n), or (list NULL) 0 .. n-1. */
#define MFM__ENTRY(list, i) ((list) ? (uint64_t)(list)[i] : (uint64_t)(i))

/* AdaGrad on the touched blocks of entries of a one-class tensor, many at a time: their mean
   gradients side by side in `mean`, then mfm__adagrad_blocks, which steps single coordinates and
   blocks of four eight wide, the next entries' blocks asked for meanwhile. Blocks of at most
   MFM__APPLY_FLOATS floats. */
#define MFM__APPLY_FLOATS 1024
static void mfm__apply_adagrad(const mfm__trainer *tr, const mfm__coords *o, mfm_tensor t, const uint32_t *list, uint64_t n_entries, float rows, float l2) {
    const uint32_t len = tr->m->t[t].len, per = MFM__APPLY_FLOATS / len < 64 ? MFM__APPLY_FLOATS / len : 64;
    const size_t bytes = (size_t)tr->m->t[t].stride * sizeof(float);
    float *blk[64], mean[MFM__APPLY_FLOATS];
    uint64_t i, j;
    uint32_t n = 0, f;
    for (i = 0; i < n_entries; i++) {
        j = MFM__ENTRY(list, i);
        if (i % per == 0) /* the next `per` entries' blocks, while these step */
            for (f = 0; i + per + f < n_entries && f < per; f++) mfm__prefetch_range(mfm__block(tr->m, t, 0, o->ids[MFM__ENTRY(list, i + per + f)]), 0, bytes, 1);
        blk[n] = mfm__block(tr->m, t, 0, o->ids[j]);
        mfm__divide(mean + n * len, o->g + j * len, len, rows);
        if (++n == per) {
            mfm__adagrad_blocks(&tr->opt, blk, mean, n, len, l2);
            n = 0;
        }
        mfm__coords_zero(o, j, 1, len);
    }
    if (n) mfm__adagrad_blocks(&tr->opt, blk, mean, n, len, l2);
}

/* mfm__apply_adagrad for FFM keyed by feature: each entry's flagged slots step where they lie,
   from their sums in place (a record of F neighbouring slots, 1248 bytes at 39 fields and
   k = 4, asked for two entries ahead). Copying the slots' sums side by side first, as above,
   bought nothing (one worker at batch 4096 on the 2-core VM, three turns: its steps at the rows'
   last rows 0.73-0.87 G cycles in place against 0.83-0.92 G copied; on the 16-core host, FFM
   80.2k and 74.9k rows/s against 66.3k and 75.1k). */
static void mfm__apply_adagrad_records(const mfm__trainer *tr, const mfm__coords *o, const uint32_t *list, uint64_t n_entries, float rows, float l2) {
    const mfm__table *V = &tr->m->t[MFM_TENSOR_V];
    const uint32_t parts = o->parts;
    uint64_t i, j;
    uint32_t f;
    for (i = 0; i < n_entries; i++) {
        float *const record = mfm__block(tr->m, MFM_TENSOR_V, 0, o->ids[j = MFM__ENTRY(list, i)] * parts);
        if (i + 2 < n_entries) mfm__prefetch_range(mfm__block(tr->m, MFM_TENSOR_V, 0, o->ids[MFM__ENTRY(list, i + 2)] * parts), 0, V->stride * parts, sizeof(float));
        for (f = 0; f < parts; f++)
            if (o->flags[j * parts + f]) mfm__adagrad(&tr->opt, record + (uint64_t)f * V->stride, V->len, o->g + (j * parts + f) * V->len, rows, l2);
        mfm__coords_zero(o, j, 1, (uint64_t)parts * V->len);
    }
}

/* One step for each of the entries (list, n) of the worker's table of tensor t, with the batch's
   mean gradient; AdaGrad's with the sum (MFM__BATCH_ROWS). The sums go back to zero. */
static void mfm__step_entries(const mfm__trainer *tr, const mfm__coords *o, mfm_tensor t, const uint32_t *list, uint64_t n) {
    const mfm_model *m = tr->m;
    const mfm_params *p = &m->params;
    const float rows = MFM__BATCH_ROWS(tr->opt.kind, tr->n_batch);
    const float l1 = t == MFM_TENSOR_W ? (float)p->l1_linear : t == MFM_TENSOR_W0 ? 0 : (float)p->l1_factors;
    const float l2 = t == MFM_TENSOR_W ? (float)p->l2_linear : t == MFM_TENSOR_W0 ? 0 : (float)p->l2_factors;
    const uint32_t len = m->t[t].len, parts = o->parts ? o->parts : 1; /* FFM by feature: its touched slots */
    uint64_t i, j;
    uint32_t c, f;
    if (mfm__steps_as_adagrad(&tr->opt, len) && m->n_classes == 1 && len <= MFM__APPLY_FLOATS) {
        if (o->parts)
            mfm__apply_adagrad_records(tr, o, list, n, rows, l2);
        else
            mfm__apply_adagrad(tr, o, t, list, n, rows, l2);
        return;
    }
    for (i = 0; i < n; i++) {
        j = MFM__ENTRY(list, i);
        for (f = 0; f < parts; f++)
            if (!o->parts || o->flags[j * parts + f])
                for (c = 0; c < m->n_classes; c++) {
                    float *blk = mfm__block(m, t, c, o->ids[j] * parts + f);
                    const float *g = o->g + ((j * parts + f) * m->n_classes + c) * len;
                    if (mfm__steps_as_adagrad(&tr->opt, len)) /* the default, inlined */
                        mfm__adagrad(&tr->opt, blk, len, g, rows, l2);
                    else
                        mfm__step(&tr->opt, blk, len, g, rows, l1, l2);
                }
        mfm__coords_zero(o, j, 1, (uint64_t)parts * m->n_classes * len);
    }
}

/* One worker: before summing, the entries of the batch's non-zeros are listed in a pass of their
   own, one probe after another with nothing between them (the probes of the walk below waited on
   the sums' work; with several workers the second pass over the rows' owner lists cost more than
   it saved, so they look up as they walk: 16 threads on the 16-core host, FFM 294-323k rows/s
   against 251-272k listing first).

   And FFM's v steps early (tr->step_early): a feature's v takes its step once the batch's last
   row that touches it has been summed, while its lines (read for that row: 624 bytes at 39
   fields and k = 4) and its sums are still in cache. No row after that one reads it (a row
   reads the v of its own features only), so the step sees the sums and frozen values the end of
   the batch would, and gives the same bits. FM's and FwFM's v of a line or two step faster at the
   end, 64 at a time (one thread at batch 4096: FM 510k rows/s against 430k stepping early). The
   batch's steps stay all or nothing: the room for every first touch is made before the first
   step. */

/* The entry of every non-zero of the batch, row by row (a feature's first touch makes its entry,
   in the order the rows touch them; v keyed by feature shares it), and with tr->step_early each
   entry's last row; then room for all of the batch's sums in the tables keyed by feature and in
   R. 0 when memory is short. */
static int mfm__list_entries(const mfm__trainer *tr, mfm__worker *wk) {
    const mfm_model *m = tr->m;
    const uint64_t C = m->n_classes, k = (uint64_t)m->k, F = m->n_fields, z = tr->max_row_nnz, L = tr->line ? 2 * C : C;
    const uint32_t stamp = tr->stamp_batch;
    mfm__coords *w = &wk->own[MFM_TENSOR_W], *v = &wk->own[MFM_TENSOR_V];
    uint64_t q, at = 0;
    uint32_t a;
    for (q = 0; q < tr->n_batch; q++) {
        const uint64_t lo = tr->d->row_offsets[tr->rows[q]], n_nz = tr->d->row_offsets[tr->rows[q] + 1] - lo;
        const uint32_t *const feat = tr->d->features + lo;
        mfm__prefetch_data_ahead(tr, tr->rows, q, tr->n_batch);
        if (q + 1 < tr->n_batch && w->mask) { /* the slots the next row's probes read */
            const uint64_t next = tr->d->row_offsets[tr->rows[q + 1]], next_end = tr->d->row_offsets[tr->rows[q + 1] + 1];
            uint64_t b;
            for (b = next; b < next_end; b++) MFM__PREFETCH(w->slots + (mfm__mix(tr->d->features[b]) & w->mask));
        }
        if (!mfm__coords_room(w, n_nz, L, stamp) || !mfm__reserve((void **)&wk->walk_entry, &wk->cap_walk_entry, at + n_nz, sizeof(uint32_t)) ||
            (tr->step_early && !mfm__reserve((void **)&wk->last_row, &wk->cap_last_row, w->n + n_nz, sizeof(uint32_t))))
            return 0;
        for (a = 0; a < n_nz; a++) {
            mfm__own(w, feat[a], stamp, L);
            wk->walk_entry[at + a] = (uint32_t)w->last;
            if (tr->step_early) wk->last_row[w->last] = (uint32_t)q;
        }
        at += n_nz;
    }
    return mfm__coords_room(&wk->own[MFM_TENSOR_W0], 1, L, stamp) &&
           (m->params.linear_only || !v->like_w || mfm__coords_room(v, w->n, (m->params.model == MFM_MODEL_FFM ? F : 1) * C * k, stamp)) &&
           (m->params.model != MFM_MODEL_FWFM || m->params.linear_only || mfm__coords_room(&wk->own[MFM_TENSOR_R], F * F + z * z / 2, C, stamp));
}

/* Several workers: the entries of the row's owned non-zeros, as the walk reaches them. */
static void mfm__look_up_entries(const mfm__trainer *tr, mfm__worker *wk, const mfm__row *row, const uint32_t *owned, uint32_t n_owned) {
    const uint64_t L = tr->line ? 2 * (uint64_t)tr->m->n_classes : tr->m->n_classes;
    uint32_t a;
    for (a = 0; a < n_owned; a++) {
        mfm__own(&wk->own[MFM_TENSOR_W], row->feat[owned[a]], tr->stamp_batch, L);
        wk->entry[a] = (uint32_t)wk->own[MFM_TENSOR_W].last;
    }
}

/* After row q's sums (tr->step_early): the v entries of the features whose last row it is step. */
static void mfm__step_ending(const mfm__trainer *tr, mfm__worker *wk, uint64_t q, uint32_t n_nz) {
    uint32_t a, n = 0;
    for (a = 0; a < n_nz; a++) {
        uint32_t *last = &wk->last_row[wk->entry[a]];
        if (*last != q) continue; /* touched again later, or stepped (a feature twice in the row) */
        *last = MFM__STEPPED;
        wk->ending[n++] = wk->entry[a];
    }
    mfm__step_entries(tr, &wk->own[MFM_TENSOR_V], MFM_TENSOR_V, wk->ending, n);
}

/* Step 2's start: the worker's tables emptied. */
static void mfm__gradient_start(mfm__worker *wk) {
    int t;
    for (t = 0; t < MFM_TENSOR_COUNT; t++) wk->own[t].n = 0;
    wk->failed = 0, wk->r_in_order = 0;
}

/* Step 2 for the batch's row q: what worker `me` owns of its gradients (owned, mfm__owned_of),
   added to its sums; *at: the row's first entry in walk_entry (one worker; NULL for several,
   who then leave, with line, each non-zero's w entry in the list's place for mfm__line_task). */
static void mfm__sum_batch_row(const mfm__trainer *tr, mfm__worker *wk, int me, uint64_t q, const mfm__row *row, uint32_t *owned, uint32_t n_owned,
                               uint64_t *at) {
    const uint64_t C = tr->m->n_classes, k = (uint64_t)tr->m->k;
    uint32_t c, a;
    if ((wk->failed = !mfm__gradient_room(tr, wk, row, n_owned)) != 0) return;
    if (tr->n_workers == 1)
        memcpy(wk->entry, wk->walk_entry + *at, n_owned * sizeof(uint32_t)), *at += n_owned;
    else
        mfm__look_up_entries(tr, wk, row, owned, n_owned);
    for (c = 0; c < C; c++)
        mfm__gradient_row(tr, wk, me, c, row, owned, n_owned, tr->dlds[q * C + c], tr->sums ? tr->sums + (q * C + c) * k : NULL,
                          tr->kept[q] ? tr->terms + (q * C + c) * tr->terms_row : NULL);
    if (tr->step_early) mfm__step_ending(tr, wk, q, n_owned);
    for (a = 0; tr->line && tr->n_workers > 1 && a < n_owned; a++) owned[a] = wk->entry[a]; /* several: the scorer's by_owner (one worker's is 0, 1, 2 ..., kept) */
}

/* FwFM, several workers: the terms of R that the batch's row q left (a dense row, laid out as
   mfm__fwfm_kept_r_gradients reads them) for the rows of R's upper triangle that worker `me` owns. */
MFM__INLINE static void mfm__prefetch_r_terms(const mfm__trainer *tr, uint64_t q, int me) {
    const uint64_t F = tr->m->n_fields, C = tr->m->n_classes, z = tr->d->row_offsets[tr->rows[q] + 1] - tr->d->row_offsets[tr->rows[q]];
    uint64_t a, c;
    for (c = 0; c < C; c++) {
        const float *r_terms = tr->terms + (q * C + c) * tr->terms_row + z * (uint64_t)tr->m->k;
        for (a = 0; a + 1 < z; r_terms += z - a - 1, a++)
            if (tr->pair_owner[a * F + a] == me) mfm__prefetch_range(r_terms, 0, z - a - 1, sizeof(float));
    }
}

/* Several workers: the batch's row q as an owner reads it. Where the owner needs the values of
   its own non-zeros only (FM's rows, and the rows that left terms), only those are scaled, by
   the factor the row's scorer found (the same products: the same bits); other rows whole. */
static mfm__row mfm__owner_row(const mfm__trainer *tr, mfm__worker *wk, uint64_t q, const uint32_t *owned, uint32_t n_owned) {
    mfm__row row;
    uint32_t i;
    if (!tr->factor || !(tr->m->params.model == MFM_MODEL_FM || tr->kept[q])) return mfm__get_row(tr->m, tr->d, tr->rows[q], tr->ones, wk->scaled);
    row = mfm__get_row(tr->m, tr->d, tr->rows[q], tr->ones, NULL); /* the values as stored */
    if (!row.z) return row;
    for (i = 0; i < n_owned; i++) wk->scaled[owned[i]] = row.x[owned[i]] * tr->factor[q];
    row.x = wk->scaled;
    return row;
}

/* Step 2, several workers with streams (tr->stream_width): the records the scorers left this
   worker, scorer by scorer. Each scorer took a run of the batch's rows, in order, so the records
   come in the batch's order, and every sum adds its terms in the order one worker adds them. The
   walk reads no row, and its length is the worker's share of the non-zeros: each owner walking
   every row of the batch made 16 owners spend 5.7 times one worker's time (docs/PERFORMANCE.md). */
static void mfm__stream_sums(const mfm__trainer *tr, mfm__worker *wk, int me) {
    const mfm_model *m = tr->m;
    const uint64_t C = m->n_classes, k = (uint64_t)m->k, width = tr->stream_width, L = tr->line ? 2 * C : C;
    const uint32_t stamp = tr->stamp_batch;
    const int sums = !m->params.pairs_only, vectors = !m->params.linear_only;
    mfm__coords *const w = &wk->own[MFM_TENSOR_W], *const v = &wk->own[MFM_TENSOR_V];
    uint64_t q, i;
    uint32_t c;
    int s;
    if (me == 0) { /* w0, worker 0's (pairs_only: touched with zero gradients) */
        float *g0;
        if (!mfm__coords_room(&wk->own[MFM_TENSOR_W0], 1, L, stamp)) {
            wk->failed = 1;
            return;
        }
        g0 = mfm__own(&wk->own[MFM_TENSOR_W0], 0, stamp, L);
        for (q = 0; q < tr->n_batch; q++)
            for (c = 0; c < C; c++) {
                const float g = tr->dlds[q * C + c];
                if (sums) g0[c] += g;
                if (tr->line) g0[C + c] += g * g;
            }
    }
    for (s = 0; s < tr->n_workers; s++) {
        mfm__stream *const st = &tr->workers[s].streams[me]; /* this worker's to read and (ids, with line) to write */
        if (!mfm__coords_room(w, st->n, L, stamp) || (vectors && !mfm__coords_room(v, st->n, C * k, stamp))) {
            wk->failed = 1;
            return;
        }
        for (i = 0; i < st->n; i++) {
            const float *const t = st->terms + i * width;
            const uint32_t id = st->ids[i];
            float *gw, *gv;
            if (i + 8 < st->n) MFM__PREFETCH(w->slots + (mfm__mix(st->ids[i + 8]) & w->mask)); /* the probe's slot, ahead */
            gw = mfm__own(w, id, stamp, L);
            if (tr->line) st->ids[i] = (uint32_t)w->last; /* for mfm__line_task */
            for (c = 0; c < C; c++) {
                if (sums) gw[c] += t[c];
                if (tr->line) gw[C + c] += t[c] * t[c];
            }
            if (!vectors) continue;
            gv = mfm__own_like_w(v, (uint32_t)w->last, id, C * k);
            for (c = 0; c < C; c++) mfm__axpy(gv + c * k, 1.0f, t + C + c * k, (int)k);
        }
    }
}

/* Step 2 for FwFM's R, several workers with streams: the rows of R's upper triangle that this
   worker owns (tr->pair_owner), row by row of the batch: from the terms a dense row's score left
   (their runs are read, and the rows of the others' skipped), or pair by pair from the row. */
static void mfm__stream_r_sums(const mfm__trainer *tr, mfm__worker *wk, int me) {
    const mfm_model *m = tr->m;
    const uint64_t C = m->n_classes, n = tr->n_batch;
    uint64_t q, f;
    uint32_t c, a;
    for (f = 0; f < m->n_fields && tr->pair_owner[f * m->n_fields + f] != me; f++) {}
    if (f == m->n_fields) return; /* more workers than R has rows */
    for (q = 0; q < n; q++) {
        mfm__row row;
        if (q + 1 < n && tr->kept[q + 1]) mfm__prefetch_r_terms(tr, q + 1, me);
        row = mfm__get_row(m, tr->d, tr->rows[q], tr->ones, tr->kept[q] ? NULL : wk->scaled); /* kept: its length is all it takes */
        if (!mfm__coords_room(&wk->own[MFM_TENSOR_R], (uint64_t)row.z * (row.z - (row.z > 0)) / 2, C, tr->stamp_batch)) {
            wk->failed = 1;
            return;
        }
        for (c = 0; c < C; c++) {
            if (tr->kept[q]) {
                mfm__fwfm_kept_r_gradients(tr, wk, me, c, &row, tr->terms + (q * C + c) * tr->terms_row);
                continue;
            }
            for (a = 0; a < row.z; a++) wk->row_v[a] = mfm__block(m, MFM_TENSOR_V, c, row.feat[a]);
            mfm__fwfm_pair_gradients(tr, wk, me, c, &row, tr->dlds[q * C + c]);
        }
    }
}

/* Step 2, several workers: the streams (above), or else every row of the batch, in order, for
   the coordinates this worker owns: FFM (a slot's terms read its partners' frozen vectors, which
   no scorer could leave for less than reading them), and batches whose streams would pass
   MFM__TERMS_FLOATS. The next row's owned w and (FM, FwFM) v, unless it left terms, and the table slots their
   first probes read are asked for while this row's are summed: the batch's rows touch more
   lines than L2 holds, and another worker scored the row. Only the owned ones, for the lines of
   the others are the other workers' to write. */
static void mfm__gradient_task(void *ctx, int index) {
    const mfm__trainer *tr = (const mfm__trainer *)ctx;
    mfm__worker *wk = &tr->workers[index];
    const uint64_t C = tr->m->n_classes, n = tr->n_batch;
    uint64_t q;
    uint32_t c, a;
    mfm__gradient_start(wk);
    if (tr->stream_width) {
        mfm__stream_sums(tr, wk, index);
        if (tr->pair_owner && !wk->failed) mfm__stream_r_sums(tr, wk, index);
        return;
    }
    for (q = 0; q < n && !wk->failed; q++) {
        uint32_t *owned;
        const uint32_t n_owned = mfm__owned_of(tr, q, index, &owned);
        mfm__row row;
        mfm__prefetch_data_ahead(tr, tr->rows, q, n);
        if (q + 1 < n) {
            uint32_t *next;
            const uint32_t *const feat = tr->d->features + tr->d->row_offsets[tr->rows[q + 1]];
            const uint32_t n_next = mfm__owned_of(tr, q + 1, index, &next);
            const mfm__coords *const w = &wk->own[MFM_TENSOR_W];
            for (c = 0; c < C; c++) /* a row that left terms: its owned terms, which its scorer's core wrote, and no parameter */
                for (a = 0; a < n_next; a++)
                    if (tr->kept[q + 1])
                        MFM__PREFETCH(tr->terms + ((q + 1) * C + c) * tr->terms_row + (uint64_t)next[a] * (uint64_t)tr->m->k);
                    else
                        mfm__prefetch_feature(tr->m, c, feat[next[a]], 1);
            for (a = 0; w->mask && a < n_next; a++) MFM__PREFETCH(w->slots + (mfm__mix(feat[next[a]]) & w->mask)); /* the first probes' slots */
            if (tr->kept[q + 1] && tr->pair_owner) mfm__prefetch_r_terms(tr, q + 1, index);
        }
        if (!n_owned && index && tr->m->params.model != MFM_MODEL_FWFM) continue; /* nothing to add (w0 is worker 0's, FwFM's r pairs have owners of their own) */
        row = mfm__owner_row(tr, wk, q, owned, n_owned);
        mfm__sum_batch_row(tr, wk, index, q, &row, owned, n_owned, NULL);
    }
}

/* One worker: the sums that the batch's row q will add to, its entries walk_entry[at ...): the
   batch's touched features' sums (FFM: 624 bytes a feature at 39 fields and k = 4, tens of MB a
   batch) lie far from the core, and a row adds to dozens of them. */
MFM__INLINE static void mfm__prefetch_sums(const mfm__trainer *tr, const mfm__worker *wk, uint64_t q, uint64_t at) {
    const mfm__coords *const w = &wk->own[MFM_TENSOR_W], *const v = &wk->own[MFM_TENSOR_V];
    const uint64_t C = tr->m->n_classes, L = tr->line ? 2 * C : C, n_nz = tr->d->row_offsets[tr->rows[q] + 1] - tr->d->row_offsets[tr->rows[q]];
    const uint64_t v_width = (v->parts ? v->parts : 1) * C * (uint64_t)tr->m->k;
    uint64_t a;
    for (a = 0; a < n_nz; a++) {
        const uint64_t e = wk->walk_entry[at + a];
        MFM__PREFETCH(w->g + e * L);
        if (v->like_w) mfm__prefetch_range(v->g + e * v_width, 0, v_width, sizeof(float));
        if (v->parts) MFM__PREFETCH(v->flags + e * v->parts);
    }
}

/* One worker: steps 1 and 2 together, row by row: each row's gradients are summed right after
   its score, while the parameters the score read are still in cache (walked apart, every row's
   were read twice: FFM's 1,482 partner slots a row at 39 fields). The same functions on the same
   rows in the same order: the same bits as the two steps apart. A row whose loss is not finite
   stops the walk before its sums (wk->diverged). */
static void mfm__score_and_sum_task(void *ctx, int index) {
    const mfm__trainer *tr = (const mfm__trainer *)ctx;
    mfm__worker *wk = &tr->workers[index];
    uint64_t q, at = 0; /* the row's first entry in walk_entry */
    wk->n_by_owner = 0, wk->diverged = 0;
    mfm__gradient_start(wk);
    if ((wk->failed = !mfm__list_entries(tr, wk)) != 0) return;
    for (q = 0; q < tr->n_batch && !wk->failed; q++) {
        const mfm__row row = mfm__get_row(tr->m, tr->d, tr->rows[q], tr->ones, wk->scaled);
        if (q + 1 < tr->n_batch) mfm__prefetch_sums(tr, wk, q + 1, at + row.z);
        mfm__score_batch_row(tr, wk, q, tr->n_batch, &row);
        if (!mfm__finite(wk->loss)) {
            wk->diverged = q + 1;
            return;
        }
        mfm__sum_batch_row(tr, wk, index, q, &row, wk->owned, row.z, &at);
    }
}

/* AdaGrad's steps of the linear terms w0 and w at batch_size > 1 (docs/SPEC.md section 5). The
   accumulator adds the squares of the batch's terms, as the rows would add them one at a time,
   not the square of their sum: the frequent features then move about as far in a batch as in
   its rows at batch 1, where the square of the sum holds them to about one learning rate a
   batch (with 25 batches an epoch, 0.006 logloss behind batch 1; docs/DEFAULTS.md). But it adds
   at least the square of the sum over MFM__LINEAR_ROWS, so that a step is at most sqrt(32) times
   the sum's: without that bound, at batch 65536 the frequent features and w0 swung from batch to
   batch and FFM ended its second epoch worse than the constant predictor. A batch's features
   move together and would overshoot, so the steps are not taken yet: each one is left in its
   sum's place for the line search (mfm__line_alpha), which scales them all. The kernels
   (mfm_line_step) step the same way. */
#define MFM__LINEAR_ROWS 32
static void mfm__apply_linear(const mfm__trainer *tr, const mfm__coords *o, mfm_tensor t, float l2) {
    const uint32_t C = tr->m->n_classes;
    uint64_t j;
    uint32_t c;
    for (j = 0; j < o->n; j++) {
        if (j + 16 < o->n) MFM__PREFETCH(mfm__block(tr->m, t, 0, o->ids[j + 16])); /* a batch's w lie far apart */
        for (c = 0; c < C; c++) {
            float *blk = mfm__block(tr->m, t, c, o->ids[j]), *sums = o->g + j * 2 * C; /* [theta, G]; sums, then squares */
            const float reg = l2 * blk[0], g = sums[c] + reg, floor = sums[c] * sums[c] * (1.0f / MFM__LINEAR_ROWS);
            blk[1] += (sums[C + c] > floor ? sums[C + c] : floor) + reg * reg;
            sums[c] = -tr->opt.lr * g / sqrtf(blk[1] + 1e-10f);
            sums[C + c] = 0;
        }
    }
}

/* Step 3: one step per owned coordinate not stepped yet (FFM's v with tr->step_early stepped in
   the walk); the linear terms' as mfm__apply_linear says. */
static void mfm__apply_task(void *ctx, int index) {
    const mfm__trainer *tr = (const mfm__trainer *)ctx;
    const mfm__worker *wk = &tr->workers[index];
    const mfm_params *p = &tr->m->params;
    int t;
    for (t = 0; t < MFM_TENSOR_COUNT; t++) {
        const mfm__coords *o = &wk->own[t];
        if (tr->line && (t == MFM_TENSOR_W0 || t == MFM_TENSOR_W))
            mfm__apply_linear(tr, o, (mfm_tensor)t, t == MFM_TENSOR_W ? (float)p->l2_linear : 0);
        else if (t == MFM_TENSOR_V && tr->step_early)
            continue; /* stepped in the walk */
        else
            mfm__step_entries(tr, o, (mfm_tensor)t, NULL, o->n);
    }
}

/* The line search of the linear terms' steps (tr->line): the steps mfm__apply_linear left
   move row q's scores by delta_q, and the batch takes the fraction alpha of them that one Newton
   step on the batch's loss along them gives, from the slope and curvature at the frozen scores:
   alpha = min(1, -slope / curvature). A fraction above 1 would fit the batch's rare features to
   its rows, so 1 is the most, which the batches take once the first few have found the scale of
   the labels. One step, not the exact minimum, so that a batch costs one pass over its rows: on
   Criteo-shaped data the exact minimum (found by regula falsi) was no better (docs/DEFAULTS.md). */

/* weight * delta' H delta: the curvature along delta of a row's loss at its scores s, H the
   loss's second derivative in the scores. prob: C doubles of scratch. */
static double mfm__curvature(const mfm_model *m, const float *s, const double *delta, double *prob, float weight) {
    const uint32_t C = m->n_classes;
    const double p = mfm__sigmoid(s[0]);
    double mean = 0, square = 0;
    uint32_t c;
    if (m->params.task == MFM_TASK_REGRESSION) return weight * delta[0] * delta[0];
    if (m->params.task != MFM_TASK_MULTICLASS) return weight * p * (1 - p) * delta[0] * delta[0];
    mfm__softmax(s, C, prob);
    for (c = 0; c < C; c++) mean += prob[c] * delta[c], square += prob[c] * delta[c] * delta[c];
    return weight * (square - mean * mean);
}

/* Step 4 (tr->line): for the worker's share of the batch's rows, delta (the steps added up in the
   row's order, so that it does not depend on the number of workers), then the slope and the
   curvature of the row's loss along it. */
static void mfm__line_task(void *ctx, int index) {
    const mfm__trainer *tr = (const mfm__trainer *)ctx;
    mfm__worker *wk = &tr->workers[index];
    const uint32_t C = tr->m->n_classes;
    const float *step_w0 = tr->workers[0].own[MFM_TENSOR_W0].g; /* one entry, w0 of every class */
    double *delta = wk->prob + C; /* C doubles after the scratch of mfm__curvature */
    const int W = tr->n_workers;
    uint32_t *const next = wk->cursor; /* several workers: per owner, its next entry among what it left */
    uint64_t q, lo, hi, at = 0;        /* one worker: the row's first entry in walk_entry */
    uint32_t a, c;
    int o;
    mfm__share(tr->n_batch, W, index, &lo, &hi);
    for (o = 0; W > 1 && o < W; o++) next[o] = 0;
    for (q = lo; q < hi; q++) {
        const mfm__row row = mfm__get_row(tr->m, tr->d, tr->rows[q], tr->ones, wk->scaled);
        double slope = 0;
        for (c = 0; c < C; c++) delta[c] = step_w0[c];
        for (o = 0; W > 1 && !wk->streams && o < W; o++) next[o] = tr->owned_at[q * ((uint64_t)W + 1) + (uint64_t)o]; /* the row's groups */
        for (a = 0; a < row.z; a++) { /* every non-zero's w was touched: one worker listed its entry, several owners left it in the
                                         place of what this worker gave them, its stream's record or its row's group's member */
            const int owner = W == 1 ? 0 : mfm__owner(row.feat[a], W);
            const uint32_t entry = W == 1 ? wk->walk_entry[at + a] : wk->streams ? wk->streams[owner].ids[next[owner]++] : wk->by_owner[next[owner]++];
            const float *step = tr->workers[owner].own[MFM_TENSOR_W].g + (uint64_t)entry * 2 * C;
            for (c = 0; c < C; c++) delta[c] += (double)row.x[a] * step[c];
        }
        at += row.z;
        for (c = 0; c < C; c++) slope += (double)tr->dlds[q * C + c] * delta[c];
        tr->along[2 * q] = slope;
        tr->along[2 * q + 1] = mfm__curvature(tr->m, tr->scores + q * C, delta, wk->prob, mfm__row_weight(tr, tr->rows[q]));
    }
}

/* The fraction alpha from the rows' slopes and curvatures, added up in the batch's order (with
   params.thread_chunks, chunk after chunk): 1 where the loss does not fall along the steps (they
   are L2's) or is flat in them. */
static double mfm__line_alpha(const mfm__trainer *tr) {
    double slope = 0, curvature = 0;
    uint64_t q;
    int i;
    for (i = 0; i < (tr->chunks ? tr->n_workers : 1); i++) {
        const mfm__trainer *rows = tr->chunks ? &tr->chunks[i].tr : tr;
        for (q = 0; q < rows->n_batch; q++) slope += rows->along[2 * q], curvature += rows->along[2 * q + 1];
    }
    return slope < 0 && curvature > 0 && -slope < curvature ? -slope / curvature : 1;
}

/* Step 5 (tr->line): the fraction alpha of each owned linear step, and the sums back to zero. */
static void mfm__settle_task(void *ctx, int index) {
    const mfm__trainer *tr = (const mfm__trainer *)ctx;
    const mfm__worker *wk = &tr->workers[index];
    const uint32_t C = tr->m->n_classes;
    const float alpha = (float)tr->alpha;
    uint64_t j;
    uint32_t c;
    int t;
    for (t = MFM_TENSOR_W0; t <= MFM_TENSOR_W; t++) {
        const mfm__coords *o = &wk->own[t];
        if (!o->n) continue; /* w0 is worker 0's; a worker may own no w of a small batch */
        for (j = 0; j < o->n; j++) {
            if (j + 16 < o->n) MFM__PREFETCH(mfm__block(tr->m, (mfm_tensor)t, 0, o->ids[j + 16])); /* a batch's w lie far apart */
            for (c = 0; c < C; c++) mfm__block(tr->m, (mfm_tensor)t, c, o->ids[j])[0] += alpha * o->g[j * 2 * C + c];
        }
        mfm__coords_zero(o, 0, o->n, 2 * (uint64_t)C);
    }
}

/* ---- params.thread_chunks: each worker sums a chunk of the batch; the owners add the chunks up ----

   Each worker scores and sums its chunk by the one-worker path, into tables of its own
   (mfm__chunk), with no early steps: a step must wait for every chunk's sums. Then each owner
   adds what the chunks hold of its coordinates, chunk 0's first (mfm__merge_task), into its
   worker's tables, where steps 3 to 5 find them as the shared batch leaves them. A coordinate's
   sum is thus chunk 0's sum in row order, plus chunk 1's, and so on: the bits depend on the
   number of chunks, n_threads, and on nothing else. Against the shared batch, no owner walks
   the batch's rows (for FFM, reading again the partner slots another core scored): each row is
   read by one core, once. */

/* The tables of the chunk's scorer that the owners add up entry by entry: w's, v's where v keeps
   a table of its own (FFM by slot; else v's entries are w's), FwFM's r. */
static int mfm__chunk_keyed(const mfm__trainer *chunk, int t) {
    const mfm_params *p = &chunk->m->params;
    if (t == MFM_TENSOR_W) return 1;
    if (p->linear_only) return 0;
    return t == MFM_TENSOR_V ? !chunk->workers[0].own[MFM_TENSOR_V].like_w : t == MFM_TENSOR_R && p->model == MFM_MODEL_FWFM;
}

/* The floats of one entry's sums in a worker's table of each tensor: w0's and w's (with the
   line search, their squares too), v's (FFM by feature: every field's), r's. */
static void mfm__sum_widths(const mfm__trainer *tr, const mfm__worker *wk, uint64_t width[MFM_TENSOR_COUNT]) {
    const uint64_t C = tr->m->n_classes, parts = wk->own[MFM_TENSOR_V].parts;
    width[MFM_TENSOR_W0] = width[MFM_TENSOR_W] = tr->line ? 2 * C : C;
    width[MFM_TENSOR_V] = (parts ? parts : 1) * C * (uint64_t)tr->m->k;
    width[MFM_TENSOR_R] = C;
}

/* The chunk's entries of tensor t grouped by owner, in entry order within a group (a counting
   sort). 0 when memory is short. */
static int mfm__chunk_split(mfm__chunk *ch, int t, int owners) {
    const mfm__coords *o = &ch->tr.workers[0].own[t];
    uint32_t *const start = ch->start + (uint64_t)t * (uint64_t)(owners + 1);
    uint64_t j;
    int w;
    if (!mfm__reserve((void **)&ch->order[t], &ch->cap_order[t], o->n, sizeof(uint32_t))) return 0;
    memset(start, 0, (size_t)(owners + 1) * sizeof(uint32_t));
    for (j = 0; j < o->n; j++) start[mfm__owner(o->ids[j], owners) + 1]++;
    for (w = 0; w < owners; w++) start[w + 1] += start[w];
    for (j = 0; j < o->n; j++) ch->order[t][start[mfm__owner(o->ids[j], owners)]++] = (uint32_t)j; /* start[w]: then w's end */
    for (w = owners; w > 0; w--) start[w] = start[w - 1];
    start[0] = 0;
    return 1;
}

/* Steps 1 and 2 for chunk `index` of the batch (mfm__share's rows), then its entries grouped by
   owner. The chunk's running loss is its worker's. First the last batch's sums, which the owners
   read, go back to zero: cleared here, by the core that writes them next, they do not travel to
   the owner's core and back. */
static void mfm__chunk_sum_task(void *ctx, int index) {
    const mfm__trainer *tr = (const mfm__trainer *)ctx;
    mfm__chunk *ch = &tr->chunks[index];
    mfm__worker *mine = &tr->workers[index], *wk = &ch->tr.workers[0];
    uint64_t lo, hi, width[MFM_TENSOR_COUNT];
    int t;
    mfm__sum_widths(&ch->tr, wk, width);
    for (t = 0; t < MFM_TENSOR_COUNT; t++) mfm__coords_zero(&wk->own[t], 0, wk->own[t].n, width[t]);
    mfm__share(tr->n_batch, tr->n_workers, index, &lo, &hi);
    ch->tr.rows = tr->rows + lo, ch->tr.n_batch = hi - lo, ch->tr.stamp_batch = tr->stamp_batch;
    wk->loss = mine->loss, wk->weight = mine->weight;
    mfm__score_and_sum_task(&ch->tr, 0);
    mine->loss = wk->loss, mine->weight = wk->weight, mine->failed = wk->failed;
    if (!mine->failed && !mfm__reserve((void **)&ch->merged_at, &ch->cap_merged_at, wk->own[MFM_TENSOR_W].n, sizeof(uint32_t))) mine->failed = 1;
    for (t = MFM_TENSOR_W; t < MFM_TENSOR_COUNT && !mine->failed; t++)
        if (mfm__chunk_keyed(&ch->tr, t) && !mfm__chunk_split(ch, t, tr->n_workers)) mine->failed = 1;
}

/* Owner `me`, before any step of the batch (so that one that runs out of memory leaves the
   model as it was): room in its tables for what the chunks hold of its coordinates, and each w
   entry's place (merged_at; v's too where they are w's), with the last chunk that touches it
   (wk->last_row). tr->step_early (mfm__chunks_init): v is keyed by feature, its entries are
   w's, and it steps in the merge. */
static void mfm__merge_places_task(void *ctx, int me) {
    const mfm__trainer *tr = (const mfm__trainer *)ctx;
    const int T = tr->n_workers, like_w = tr->step_early;
    const uint32_t stamp = tr->stamp_batch;
    mfm__worker *wk = &tr->workers[me];
    mfm__coords *const w = &wk->own[MFM_TENSOR_W], *const v = &wk->own[MFM_TENSOR_V];
    uint64_t need[MFM_TENSOR_COUNT] = {1, 0, 0, 0}, width[MFM_TENSOR_COUNT]; /* w0: one entry */
    uint32_t i;
    int c, t;
    mfm__gradient_start(wk);
    mfm__sum_widths(tr, wk, width);
    for (c = 0; c < T; c++)
        for (t = MFM_TENSOR_W; t < MFM_TENSOR_COUNT; t++) need[t] += tr->chunks[c].start[t * (T + 1) + me + 1] - tr->chunks[c].start[t * (T + 1) + me];
    if (like_w) need[MFM_TENSOR_V] = need[MFM_TENSOR_W];
    for (t = 0; t < MFM_TENSOR_COUNT; t++)
        if (!mfm__coords_room(&wk->own[t], need[t], width[t], stamp)) wk->failed = 1;
    if (like_w && !mfm__reserve((void **)&wk->last_row, &wk->cap_last_row, need[MFM_TENSOR_W], sizeof(uint32_t))) wk->failed = 1;
    if (wk->failed) return;
    for (c = 0; c < T; c++) {
        const mfm__chunk *ch = &tr->chunks[c];
        const uint32_t *const start = ch->start + MFM_TENSOR_W * (T + 1) + me;
        const uint64_t *const ids = ch->tr.workers[0].own[MFM_TENSOR_W].ids;
        for (i = start[0]; i < start[1]; i++) {
            const uint32_t j = ch->order[MFM_TENSOR_W][i];
            mfm__own(w, ids[j], stamp, width[MFM_TENSOR_W]);
            ch->merged_at[j] = (uint32_t)w->last;
            if (!like_w) continue;
            mfm__own_like_w(v, (uint32_t)w->last, ids[j], width[MFM_TENSOR_V]);
            wk->last_row[w->last] = (uint32_t)c;
        }
    }
}

/* Owner `me` adds up its coordinates' sums, chunk after chunk, into the places
   mfm__merge_places_task made (zero sums). v keyed by feature (tr->step_early) steps as soon as
   its last chunk is added, while its sums are in cache: no chunk after that one has a term for
   it. The chunks' entries, which other cores wrote, are asked for two ahead. */
#define MFM__MERGE_STEPS 16 /* v entries stepped together */
static void mfm__merge_task(void *ctx, int me) {
    const mfm__trainer *tr = (const mfm__trainer *)ctx;
    const int T = tr->n_workers, like_w = tr->step_early; /* v's entries are w's, and it steps here */
    const uint32_t stamp = tr->stamp_batch;
    mfm__worker *wk = &tr->workers[me];
    mfm__coords *const w = &wk->own[MFM_TENSOR_W], *const v = &wk->own[MFM_TENSOR_V];
    uint64_t width[MFM_TENSOR_COUNT], L, v_width;
    uint32_t ending[MFM__MERGE_STEPS], n_ending = 0, i;
    int c, t;
    mfm__sum_widths(tr, wk, width);
    L = width[MFM_TENSOR_W], v_width = width[MFM_TENSOR_V];
    for (c = 0; c < T; c++) {
        mfm__chunk *ch = &tr->chunks[c];
        mfm__coords *const from = ch->tr.workers[0].own;
        if (me == 0 && from[MFM_TENSOR_W0].n) /* w0: owner 0's */
            mfm__axpy(mfm__own(&wk->own[MFM_TENSOR_W0], 0, stamp, L), 1.0f, from[MFM_TENSOR_W0].g, (int)L);
        for (t = MFM_TENSOR_W; t < MFM_TENSOR_COUNT; t++) {
            const uint32_t *const start = ch->start + t * (T + 1) + me, *const order = ch->order[t];
            for (i = start[0]; i < start[1]; i++) {
                const uint32_t j = order[i];
                uint64_t e;
                if (t != MFM_TENSOR_W) { /* v by slot, r: found as they come */
                    mfm__axpy(mfm__own(&wk->own[t], from[t].ids[j], stamp, width[t]), 1.0f, from[t].g + j * width[t], (int)width[t]);
                    continue;
                }
                if (i + 2 < start[1]) {
                    const uint32_t ahead = order[i + 2];
                    MFM__PREFETCH(from[t].g + ahead * width[t]);
                    MFM__PREFETCH(w->g + (uint64_t)ch->merged_at[ahead] * L);
                    if (like_w) {
                        mfm__prefetch_range(from[MFM_TENSOR_V].g + ahead * v_width, 0, v_width, sizeof(float));
                        mfm__prefetch_range(v->g + (uint64_t)ch->merged_at[ahead] * v_width, 0, v_width, sizeof(float));
                    }
                }
                e = ch->merged_at[j];
                mfm__axpy(w->g + e * L, 1.0f, from[t].g + j * L, (int)L);
                if (!like_w) continue;
                mfm__axpy(v->g + e * v_width, 1.0f, from[MFM_TENSOR_V].g + j * v_width, (int)v_width);
                if (v->parts) {
                    uint32_t f;
                    for (f = 0; f < v->parts; f++) v->flags[e * v->parts + f] |= from[MFM_TENSOR_V].flags[(uint64_t)j * v->parts + f];
                }
                if (wk->last_row[e] != (uint32_t)c) continue;
                ending[n_ending++] = (uint32_t)e;
                if (n_ending == MFM__MERGE_STEPS) mfm__step_entries(tr, v, MFM_TENSOR_V, ending, n_ending), n_ending = 0;
            }
        }
    }
    if (n_ending) mfm__step_entries(tr, v, MFM_TENSOR_V, ending, n_ending);
}

/* Step 4 for chunk `index` (tr->line): the owners' linear steps back in the chunk's w entries,
   where mfm__line_task reads them, and its rows' slopes and curvatures. */
static void mfm__chunk_line_task(void *ctx, int index) {
    const mfm__trainer *tr = (const mfm__trainer *)ctx;
    mfm__chunk *ch = &tr->chunks[index];
    mfm__coords *const w0 = &ch->tr.workers[0].own[MFM_TENSOR_W0], *const w = &ch->tr.workers[0].own[MFM_TENSOR_W];
    const uint64_t C = tr->m->n_classes;
    uint64_t j;
    if (!ch->tr.n_batch) return;
    memcpy(w0->g, tr->workers[0].own[MFM_TENSOR_W0].g, C * sizeof(float));
    for (j = 0; j < w->n; j++)
        memcpy(w->g + j * 2 * C, tr->workers[mfm__owner(w->ids[j], tr->n_workers)].own[MFM_TENSOR_W].g + (uint64_t)ch->merged_at[j] * 2 * C, C * sizeof(float));
    mfm__line_task(&ch->tr, 0);
}

static void mfm__log(const mfm_params *p, mfm_log_level level, const char *fmt, ...) {
    char line[512];
    va_list ap;
    if (!p->on_log) return;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    p->on_log(p->user, level, line);
}

/* A Hogwild share's R held back (mfm__r_pending), where it trains FwFM at batch 1; 0 when memory is short. */
static int mfm__r_pending_init(mfm__trainer *tr) {
    const mfm_model *m = tr->m;
    const uint64_t n = m->t[MFM_TENSOR_R].n_blocks * m->n_classes;
    mfm__r_pending *q;
    if (m->params.model != MFM_MODEL_FWFM || m->params.linear_only || m->params.batch_size != 1 || !n) return 1;
    if (!(q = tr->r_pending = (mfm__r_pending *)mfm__calloc(1, sizeof *q))) return 0;
    q->sums = (float *)mfm__calloc(n, sizeof(float)), q->seen = (unsigned char *)mfm__calloc(n, 1), q->touched = (uint64_t *)mfm__alloc(n, sizeof(uint64_t));
    q->dense = (unsigned char *)mfm__calloc(m->n_classes, 1);
    return q->sums && q->seen && q->touched && q->dense;
}

static void mfm__trainer_free(mfm__trainer *tr) {
    int t, w;
    for (w = 0; tr->chunks && w < tr->n_workers; w++) {
        mfm__chunk *ch = &tr->chunks[w];
        mfm__trainer_free(&ch->tr);
        for (t = 0; t < MFM_TENSOR_COUNT; t++) MFM_FREE(ch->order[t]);
        MFM_FREE(ch->start);
        MFM_FREE(ch->merged_at);
    }
    MFM_FREE(tr->chunks);
    if (tr->r_pending) {
        MFM_FREE(tr->r_pending->sums);
        MFM_FREE(tr->r_pending->seen);
        MFM_FREE(tr->r_pending->touched);
        MFM_FREE(tr->r_pending->dense);
        MFM_FREE(tr->r_pending);
    }
    for (w = 0; tr->workers && w < tr->n_workers; w++) {
        mfm__worker *wk = &tr->workers[w];
        for (t = 0; t < MFM_TENSOR_COUNT; t++) mfm__coords_free(&wk->own[t]);
        MFM_FREE(wk->sum);
        MFM_FREE(wk->score);
        MFM_FREE(wk->dlds);
        MFM_FREE(wk->prob);
        MFM_FREE(wk->scaled);
        MFM_FREE(wk->row_g);
        MFM_FREE(wk->row_v);
        MFM_FREE(wk->owned);
        MFM_FREE(wk->by_owner);
        MFM_FREE(wk->entry);
        MFM_FREE(wk->walk_entry);
        MFM_FREE(wk->last_row);
        MFM_FREE(wk->ending);
        MFM_FREE(wk->ffm_row);
        MFM_FREE(wk->pair_weight);
        MFM_FREE(wk->pair_ids);
        MFM_FREE(wk->pair_keep);
        MFM_FREE(wk->row_ut);
        MFM_FREE(wk->one_blk);
        MFM_FREE(wk->one_g);
        for (t = 0; wk->streams && t < tr->n_workers; t++) MFM_FREE(wk->streams[t].ids), MFM_FREE(wk->streams[t].terms);
        MFM_FREE(wk->streams);
        MFM_FREE(wk->row_terms);
    }
    MFM_FREE(tr->workers);
    MFM_FREE(tr->dlds);
    MFM_FREE(tr->scores);
    MFM_FREE(tr->along);
    MFM_FREE(tr->sums);
    MFM_FREE(tr->terms);
    MFM_FREE(tr->kept);
    MFM_FREE(tr->factor);
    MFM_FREE(tr->field_stamp);
    MFM_FREE(tr->pair_owner);
    MFM_FREE(tr->owned_at);
    MFM_FREE(tr->class_weights);
    MFM_FREE((void *)tr->ones);
}

/* The weight of each class (binary: of labels 0 and 1) in *out, NULL when every class weighs 1.
   0 when memory is short. */
static int mfm__class_weights_of(const mfm_model *m, const mfm_csr *d, const uint64_t *rows, uint64_t n_rows, float **out) {
    const mfm_params *p = &m->params;
    const uint32_t n_weights = p->task == MFM_TASK_BINARY ? 2 : m->n_classes;
    uint64_t r, *count;
    uint32_t c;
    *out = NULL;
    if (p->class_weight == MFM_CLASS_WEIGHT_NONE) return 1;
    if (!(*out = (float *)mfm__calloc(n_weights, sizeof(float)))) return 0;
    if (p->class_weight == MFM_CLASS_WEIGHT_EXPLICIT) {
        memcpy(*out, p->class_weights, n_weights * sizeof(float));
        return 1;
    }
    if (!(count = (uint64_t *)mfm__calloc(n_weights, sizeof(uint64_t)))) return 0; /* *out is freed with its owner */
    for (r = 0; r < n_rows; r++) count[(uint32_t)d->labels[rows[r]]]++; /* balanced: n_rows / (C * max(count_c, 1)) */
    for (c = 0; c < n_weights; c++) (*out)[c] = (float)((double)n_rows / ((double)n_weights * (double)(count[c] > 1 ? count[c] : 1)));
    MFM_FREE(count);
    return 1;
}

/* Everything a fit needs besides the model: maps, workers, class weights; room for the rows of
   a batch that the trainer scores, at most batch_rows (none: the owners of params.thread_chunks,
   whose chunks score the rows). 0 when memory is short. */
static int mfm__trainer_init(mfm__trainer *tr, mfm_model *m, const mfm_csr *d, const uint64_t *rows, uint64_t n_rows, const mfm__data_info *info, int n_threads,
                             uint64_t batch_rows) {
    const mfm_params *p = &m->params;
    const uint32_t C = m->n_classes;
    float *ones;
    uint64_t r;
    int w;
    memset(tr, 0, sizeof *tr);
    tr->m = m;
    tr->d = d;
    tr->smoothing = (float)p->label_smoothing;
    tr->opt.kind = p->optimizer;
    tr->opt.wide = m->wide;
    tr->opt.lr = (float)p->learning_rate;
    tr->opt.ftrl_beta = (float)p->ftrl_beta;
    tr->opt.beta1 = p->adam_beta1;
    tr->opt.beta2 = p->adam_beta2;
    tr->opt.eps = p->adam_epsilon;
    tr->ones = ones = (float *)mfm__alloc(info->max_row_nnz, sizeof(float));
    if (!ones || !mfm__class_weights_of(m, d, rows, n_rows, &tr->class_weights)) return 0;
    for (r = 0; r < info->max_row_nnz; r++) ones[r] = 1.0f;
    tr->n_workers = n_threads < p->batch_size ? n_threads : p->batch_size;
    { /* per-row results of a batch */
        const uint64_t rows = batch_rows;
        const uint64_t width = C + (p->linear_only ? 0 : C * (uint64_t)m->k);
        if (tr->n_workers > 1 && p->batch_size > 1 && rows && (p->model != MFM_MODEL_FFM || p->linear_only) && rows * info->max_row_nnz * (width + 1) <= MFM__TERMS_FLOATS)
            tr->stream_width = width; /* the records with their ids; their arrays grow by doubling, so they may take twice that */
        tr->dlds = (float *)mfm__alloc(rows * C, sizeof(float));
        tr->kept = (unsigned char *)mfm__alloc(rows, 1);
        if (!tr->dlds || !tr->kept) return 0;
        if (n_threads > 1 && p->batch_size > 1 && p->normalize_rows > 0 && !(tr->factor = (float *)mfm__alloc(rows, sizeof(float)))) return 0;
        tr->line = mfm__adagrad_kind(p->optimizer) && p->batch_size > 1 && !p->pairs_only;
        if (tr->line) {
            tr->scores = (float *)mfm__alloc(rows * C, sizeof(float));
            tr->along = (double *)mfm__alloc(rows * 2, sizeof(double));
            if (!tr->scores || !tr->along) return 0;
        }
        if (p->model == MFM_MODEL_FM && !p->linear_only && !tr->stream_width && !(tr->sums = (float *)mfm__alloc(rows * C * (uint64_t)m->k, sizeof(float)))) return 0;
        if (p->model == MFM_MODEL_FWFM && !p->linear_only && p->batch_size > 1 && m->wide && m->k % 4 == 0 && m->n_fields <= MFM__FWFM_DENSE_MAX &&
            m->n_fields <= MFM__MAX_SIMPLE_NNZ) { /* mfm__fwfm_keeps; without room (MFM__TERMS_FLOATS, or memory) rows go pair by pair */
            const uint64_t F = m->n_fields;
            tr->terms_row = F * (uint64_t)m->k + F * (F - 1) / 2;
            if (rows * C * tr->terms_row <= MFM__TERMS_FLOATS) tr->terms = (float *)mfm__alloc(rows * C * tr->terms_row, sizeof(float));
        }
    }
    if (p->batch_size == 1 && !(tr->field_stamp = (uint32_t *)mfm__calloc(m->n_fields, sizeof(uint32_t)))) return 0;
    tr->max_row_nnz = (uint32_t)info->max_row_nnz;
    tr->step_early = p->batch_size > 1 && tr->n_workers == 1 && !p->linear_only && p->model == MFM_MODEL_FFM &&
                     (uint64_t)m->n_fields * C * m->k <= MFM__FFM_DENSE_FLOATS; /* FFM's v keyed by feature (624 bytes a feature at 39 fields and k = 4) */
    if (tr->n_workers > 1 && !tr->stream_width && batch_rows && !(tr->owned_at = (uint32_t *)mfm__alloc(batch_rows * ((uint64_t)tr->n_workers + 1), sizeof(uint32_t))))
        return 0; /* the owners' row walk */
    if (tr->n_workers > 1 && batch_rows && p->model == MFM_MODEL_FWFM && !p->linear_only) {
        const uint64_t F = m->n_fields;
        const uint64_t total = F * (F + 1) / 2;
        uint64_t lo, hi, before = 0;
        if (!(tr->pair_owner = (uint16_t *)mfm__alloc(F * F, sizeof(uint16_t)))) return 0;
        for (lo = 0; lo < F; before += F - lo, lo++) { /* R's rows of the upper triangle in runs of about equal size, a worker a run */
            const uint16_t owner = (uint16_t)((2 * before + (F - lo)) * (uint64_t)tr->n_workers / (2 * total)); /* where the row's middle falls */
            for (hi = lo; hi < F; hi++) tr->pair_owner[lo * F + hi] = tr->pair_owner[hi * F + lo] = owner; /* [hi][lo] too: no need to order a pair */
        }
    }
    tr->workers = (mfm__worker *)mfm__calloc((uint64_t)tr->n_workers, sizeof(mfm__worker));
    if (!tr->workers) return 0;
    for (w = 0; w < tr->n_workers; w++) {
        mfm__worker *wk = &tr->workers[w];
        wk->sum = (float *)mfm__alloc((uint64_t)C * m->k, sizeof(float));
        wk->score = (float *)mfm__alloc(C, sizeof(float));
        wk->dlds = (float *)mfm__alloc(C, sizeof(float));
        /* FFM with few fields keys its slots by feature: one table entry per feature, not per slot */
        if (p->model == MFM_MODEL_FFM && (uint64_t)m->n_fields * C * m->k <= MFM__FFM_DENSE_FLOATS) wk->own[MFM_TENSOR_V].parts = m->n_fields;
        wk->own[MFM_TENSOR_V].like_w = p->model != MFM_MODEL_FFM || wk->own[MFM_TENSOR_V].parts; /* v keyed by feature, as w */
        wk->prob = (double *)mfm__alloc(2 * (uint64_t)C, sizeof(double)); /* and, with tr->line, C more for mfm__line_task */
        wk->scaled = (float *)mfm__alloc(info->max_row_nnz, sizeof(float));
        wk->row_g = (float *)mfm__alloc(((uint64_t)info->max_row_nnz + 2) * m->k, sizeof(float));
        if (p->model == MFM_MODEL_FWFM) {
            if (!mfm__coords_direct(&wk->own[MFM_TENSOR_R], (uint64_t)m->n_fields * m->n_fields)) return 0;
            wk->row_v = (const float **)mfm__alloc(info->max_row_nnz, sizeof(float *));
            wk->pair_weight = (float *)mfm__alloc(4 * (uint64_t)info->max_row_nnz, sizeof(float));
            wk->pair_ids = (uint64_t *)mfm__alloc(info->max_row_nnz, sizeof(uint64_t));
            if (!wk->row_v || !wk->pair_weight || !wk->pair_ids) return 0;
            if (p->batch_size == 1 || tr->terms) { /* rows that keep their pairs have at most MFM__MAX_SIMPLE_NNZ (batch 1) or F <= MFM__MAX_SIMPLE_NNZ (batches) non-zeros */
                const uint64_t z = info->max_row_nnz < MFM__MAX_SIMPLE_NNZ ? info->max_row_nnz : MFM__MAX_SIMPLE_NNZ;
                wk->pair_keep = (float *)mfm__calloc(mfm__kept_floats(z, m->k) * m->n_classes, sizeof(float)); /* padding: numbers from the start */
                wk->row_ut = (float *)mfm__alloc(mfm__kept_stride(z) * m->k, sizeof(float));
                if (!wk->pair_keep || !wk->row_ut) return 0;
            }
        }
        wk->one_blk = (float **)mfm__alloc(MFM__MAX_SIMPLE_NNZ * MFM__MAX_SIMPLE_NNZ / 2, sizeof(float *));
        wk->one_g = (float *)mfm__alloc(MFM__MAX_SIMPLE_NNZ * MFM__MAX_SIMPLE_NNZ / 2, sizeof(float));
        wk->owned = (uint32_t *)mfm__alloc(3 * (uint64_t)info->max_row_nnz + (uint64_t)tr->n_workers, sizeof(uint32_t));
        wk->entry = (uint32_t *)mfm__alloc(info->max_row_nnz, sizeof(uint32_t));
        wk->ending = (uint32_t *)mfm__alloc(info->max_row_nnz, sizeof(uint32_t));
        wk->ffm_row = (mfm__ffm_nonzero *)mfm__alloc(info->max_row_nnz, sizeof(mfm__ffm_nonzero));
        if (tr->stream_width && !(wk->streams = (mfm__stream *)mfm__calloc((uint64_t)tr->n_workers, sizeof(mfm__stream)))) return 0;
        if (tr->stream_width && !p->linear_only && !(wk->row_terms = (float *)mfm__alloc((uint64_t)C * info->max_row_nnz * m->k, sizeof(float)))) return 0;
        if (!wk->dlds || !wk->sum || !wk->score || !wk->prob || !wk->scaled || !wk->row_g || !wk->one_blk || !wk->one_g || !wk->owned || !wk->entry ||
            !wk->ending || !wk->ffm_row)
            return 0;
        wk->owner_of = wk->owned + info->max_row_nnz;
        wk->partner = wk->owned + 2 * (uint64_t)info->max_row_nnz;
        wk->cursor = wk->owned + 3 * (uint64_t)info->max_row_nnz;
        for (r = 0; r < info->max_row_nnz; r++) wk->owned[r] = (uint32_t)r;
    }
    return 1;
}

/* Whether a worker of the batch ran short of memory. */
static int mfm__workers_failed(const mfm__trainer *tr) {
    int w, failed = 0;
    for (w = 0; w < tr->n_workers; w++) failed |= tr->workers[w].failed;
    return failed;
}

/* params.thread_chunks: a trainer of one worker per chunk, for the chunk's share of a batch of
   the pass's rows. 0 when memory is short. */
static int mfm__chunks_init(mfm__trainer *tr, mfm_model *m, const mfm_csr *d, const uint64_t *rows, uint64_t n_rows, const mfm__data_info *info) {
    const uint64_t T = (uint64_t)tr->n_workers, batch = n_rows < (uint64_t)m->params.batch_size ? n_rows : (uint64_t)m->params.batch_size;
    uint64_t i;
    if (!(tr->chunks = (mfm__chunk *)mfm__calloc(T, sizeof(mfm__chunk)))) return 0;
    for (i = 0; i < T; i++) {
        mfm__chunk *ch = &tr->chunks[i];
        if (!mfm__trainer_init(&ch->tr, m, d, rows, n_rows, info, 1, (batch + T - 1) / T) ||
            !(ch->start = (uint32_t *)mfm__calloc(MFM_TENSOR_COUNT * (T + 1), sizeof(uint32_t))))
            return 0;
        ch->tr.step_early = 0; /* a step waits for every chunk's sums */
    }
    tr->step_early = !m->params.linear_only && tr->workers[0].own[MFM_TENSOR_V].like_w; /* in mfm__merge_task */
    return 1;
}

/* Tests build a second copy of the library with 0 here, to check that the shortcut gives the
   bits the batched path gives. */
#ifndef MFM__BATCH1_IN_PLACE
#define MFM__BATCH1_IN_PLACE 1
#endif

/* Divergence (MFM_ERR_DIVERGED). Every row's loss is >= 0 and finite while the parameters are,
   so a worker's running loss turns non-finite at the first row that reads a value gone NaN or
   infinite: one compare per batch (per row at batch 1) finds it. Values no row reads again, the
   optimizer state above all (an AdaGrad accumulator that overflows leaves its step 0 and the
   loss finite), are found by mfm__tables_finite after each epoch, one pass over the tables. */
static const char *mfm__not_finite_name(double x) { return x != x ? "NaN" : x > 0 ? "+inf" : "-inf"; }

/* Whether x[0..n) are all finite: x * 0 is 0 for a finite x and NaN for any other, and a sum
   with a NaN in it is NaN. Sixteen lanes, memory speed (a 125 MB FFM model: about 8 ms). */
static int mfm__floats_finite(const float *x, uint64_t n) {
    const mfm__f4 zero = mfm__f4_set1(0.0f);
    mfm__f4 a = zero, b = zero, c = zero, d = zero;
    float lanes[4];
    uint64_t i;
    for (i = 0; i + 16 <= n; i += 16) {
        a = mfm__f4_add(a, mfm__f4_mul(mfm__f4_load(x + i), zero));
        b = mfm__f4_add(b, mfm__f4_mul(mfm__f4_load(x + i + 4), zero));
        c = mfm__f4_add(c, mfm__f4_mul(mfm__f4_load(x + i + 8), zero));
        d = mfm__f4_add(d, mfm__f4_mul(mfm__f4_load(x + i + 12), zero));
    }
    mfm__f4_store(lanes, mfm__f4_add(mfm__f4_add(a, b), mfm__f4_add(c, d)));
    for (; i < n; i++) lanes[0] += x[i] * 0.0f;
    return lanes[0] + lanes[1] + lanes[2] + lanes[3] == 0.0f;
}

/* Share `index` of n_shares of every table (parameters, optimizer state, padding). */
static int mfm__tables_share_finite(const mfm_model *m, int index, int n_shares) {
    int t;
    for (t = 0; t < MFM_TENSOR_COUNT; t++) {
        const uint64_t n = mfm__table_floats(&m->t[t], m->n_classes), lo = n * (uint64_t)index / (uint64_t)n_shares;
        if (m->t[t].halves) continue; /* mapped read-only, and checked as it was opened */
        if (!mfm__floats_finite(m->t[t].data + lo, n * (uint64_t)(index + 1) / (uint64_t)n_shares - lo)) return 0;
    }
    return 1;
}

static int mfm__tables_finite(const mfm_model *m) { return mfm__tables_share_finite(m, 0, 1); }

typedef struct mfm__finite_job {
    const mfm_model *m;
    int n;
    unsigned char *finite; /* per share */
} mfm__finite_job;

static void mfm__finite_task(void *ctx, int index) {
    const mfm__finite_job *job = (const mfm__finite_job *)ctx;
    job->finite[index] = (unsigned char)mfm__tables_share_finite(job->m, index, job->n);
}

/* mfm__tables_finite over the pool's threads (after a pass, while they wait). */
static int mfm__tables_finite_on(const mfm_model *m, mfm__pool *pool) {
    mfm__finite_job job;
    int i, all = 1;
    job.m = m, job.n = pool->n;
    if (pool->n <= 1 || !(job.finite = (unsigned char *)mfm__calloc((uint64_t)pool->n, 1))) return mfm__tables_finite(m);
    mfm__pool_run(pool, mfm__finite_task, &job);
    for (i = 0; i < job.n; i++) all &= job.finite[i];
    MFM_FREE(job.finite);
    return all;
}

/* Names the first value of slots 0 .. n_slots-1 that is not finite, e.g. "the AdaGrad
   accumulator of v[feature 12, field 3][0] of class 1 is +inf"; 0 when there is none. A walk
   for messages. */
static int mfm__describe_not_finite(const mfm_model *m, int n_slots, char *out, size_t size) {
    static const char *const state[][3] = {{"", "", ""}, {"", "", ""}, {"AdaGrad accumulator", "", ""},
                                           {"Adam first moment", "Adam second moment", "Adam step count"}, {"FTRL z", "FTRL n", ""},
                                           {"row-wise AdaGrad accumulator", "", ""}};
    const uint32_t F = m->n_fields ? m->n_fields : 1;
    uint64_t b;
    uint32_t c, i;
    int t, slot;
    for (t = 0; t < MFM_TENSOR_COUNT; t++)
        for (c = 0; c < m->n_classes; c++)
            for (b = 0; b < m->t[t].n_blocks; b++)
                for (slot = 0; slot < n_slots; slot++)
                    for (i = 0; i < mfm__slot_len(&m->t[t], slot); i++) {
                        const float x = mfm__block_slot(m, (mfm_tensor)t, c, b, slot)[i];
                        char where[96], cls[32] = "", what[48] = "";
                        if (mfm__finite(x)) continue;
                        if (t == MFM_TENSOR_W0) snprintf(where, sizeof where, "the bias w0");
                        else if (t == MFM_TENSOR_W) snprintf(where, sizeof where, "w[%" PRIu64 "]", b);
                        else if (t == MFM_TENSOR_R) snprintf(where, sizeof where, "r[%" PRIu64 ", %" PRIu64 "]", b / F, b % F);
                        else if (m->params.model == MFM_MODEL_FFM) snprintf(where, sizeof where, "v[feature %" PRIu64 ", field %" PRIu64 "]", b / F, b % F);
                        else snprintf(where, sizeof where, "v[%" PRIu64 "]", b);
                        if (t == MFM_TENSOR_V && mfm__slot_len(&m->t[t], slot) > 1) /* a value of the vector, not its one accumulator */
                            snprintf(where + strlen(where), sizeof where - strlen(where), "[%u]", (unsigned)i);
                        if (m->n_classes > 1) snprintf(cls, sizeof cls, " of class %u", (unsigned)c);
                        if (slot > 0) snprintf(what, sizeof what, "the %s of ", state[m->params.optimizer][slot - 1]);
                        snprintf(out, size, "%s%s%s is %s", what, where, cls, mfm__not_finite_name(x));
                        return 1;
                    }
    return 0;
}

/* The sentence of a divergence found by the loss of n rows from rows[0] (1-based numbers, rows
   of the training data as the caller numbers them, not in the epoch's order). stopped_at: 1 +
   the batch's row where FFM's one worker stopped, having stepped some of the batch's v early
   (0: no step of the batch was taken). mfm__fit adds what the model holds once every thread
   has stopped (mfm__diverged_holds). */
static void mfm__name_row(const mfm__trainer *tr, uint64_t r, char *out, size_t size) {
    char row[600];
    mfm__row_at(tr->d, r, row, sizeof row);
    if (tr->d->origin)
        snprintf(out, size, "the row at %s", row);
    else
        snprintf(out, size, "row %" PRIu64 " of the training data (1-based)", r + 1);
}

static mfm_status mfm__diverged_at(const mfm__trainer *tr, const uint64_t *rows, uint64_t n, uint64_t batch_number, uint64_t stopped_at, mfm_error *err) {
    char at[32] = "", where[640], stopped[640];
    if (tr->epoch > 0) snprintf(at, sizeof at, " in epoch %d", tr->epoch);
    mfm__name_row(tr, rows[0], where, sizeof where);
    if (n == 1) return mfm__fail(err, MFM_ERR_DIVERGED, "training diverged%s: the loss of %s is not finite", at, where);
    if (stopped_at <= 1) /* no step of the batch taken */
        return mfm__fail(err, MFM_ERR_DIVERGED, "training diverged%s: the loss of batch %" PRIu64 " (its first row: %s) is not finite", at, batch_number, where);
    mfm__name_row(tr, rows[stopped_at - 1], stopped, sizeof stopped);
    return mfm__fail(err, MFM_ERR_DIVERGED,
                     "training diverged%s: the loss of batch %" PRIu64 " (its first row: %s) is not finite from %s on; of that batch only the "
                     "factors of the features that no row from there on touches took their steps",
                     at, batch_number, where, stopped);
}

/* Ends the sentence of a divergence with what the model holds, and what to do. */
static mfm_status mfm__diverged_holds(const mfm_model *m, mfm_error *err) {
    char what[160];
    size_t used;
    if (!err) return MFM_ERR_DIVERGED;
    used = strlen(err->message);
    if (mfm__describe_not_finite(m, m->n_slots, what, sizeof what))
        snprintf(err->message + used, sizeof err->message - used,
                 "; the model now holds values that are not finite (%s), so mfm_model_save refuses it: start again from a fresh or reloaded model "
                 "with a smaller learning rate (it is %g), or scale the labels and values down",
                 what, m->params.learning_rate);
    else
        snprintf(err->message + used, sizeof err->message - used,
                 "; the model holds the steps of the rows before it, every value finite: a smaller learning rate (it is %g), or labels and values "
                 "scaled down, may train",
                 m->params.learning_rate);
    return MFM_ERR_DIVERGED;
}

/* After an epoch (`at`: "in epoch 3"), a value that no loss showed (mfm__tables_finite failed). */
static mfm_status mfm__diverged_tables(const mfm_model *m, const char *at, mfm_error *err) {
    char what[160] = "a value is not finite";
    mfm__describe_not_finite(m, m->n_slots, what, sizeof what);
    return mfm__fail(err, MFM_ERR_DIVERGED,
                     "training diverged %s: at its end, %s; the model holds it (and maybe other values that are not finite), so mfm_model_save "
                     "refuses it: start again from a fresh or reloaded model with a smaller learning rate (it is %g), or scale the labels and values down",
                     at, what, m->params.learning_rate);
}

/* One pass over rows[0..n) in that order, batch by batch. Adds the loss to the workers. */
static mfm_status mfm__pass(mfm__trainer *tr, mfm__pool *pool, const uint64_t *rows, uint64_t n, mfm_error *err) {
    const uint64_t batch = (uint64_t)tr->m->params.batch_size;
    uint64_t start;
    int w;
    for (start = 0; start < n; start += batch) {
        double loss = 0;
        if (batch == 1 && MFM__BATCH1_IN_PLACE) { /* most rows need no touched sets: steps in place */
            mfm__row row = mfm__get_row(tr->m, tr->d, rows[start], tr->ones, NULL);
            mfm__prefetch_data_ahead(tr, rows, start, n);
            memset(&tr->next_span, 0, sizeof tr->next_span);
            if (start + 1 < n) mfm__prefetch_row(tr->m, tr->d, rows[start + 1], &tr->next_span, 1); /* FFM's spans: asked for by the steps */
            if (mfm__row_is_simple(tr, &row)) {
                mfm__train_row(tr, &tr->workers[0], rows[start]);
                if (!mfm__finite(tr->workers[0].loss)) return mfm__diverged_at(tr, rows + start, 1, 1, 0, err);
                continue;
            }
            if (tr->next_span.bytes) mfm__prefetch_row(tr->m, tr->d, rows[start + 1], NULL, 1); /* the batched steps ask for no span: all now */
        }
        tr->rows = rows + start;
        tr->n_batch = n - start < batch ? n - start : batch;
        if (++tr->stamp_batch == 0) { /* wrapped: every table entry must read as stale again */
            int c, t;
            for (c = 0; c <= (tr->chunks ? tr->n_workers : 0); c++) { /* the workers', then the chunks' */
                const mfm__trainer *of = c ? &tr->chunks[c - 1].tr : tr;
                for (w = 0; w < of->n_workers; w++)
                    for (t = 0; t < MFM_TENSOR_COUNT; t++)
                        if (of->workers[w].own[t].slots) memset(of->workers[w].own[t].slots, 0, (of->workers[w].own[t].mask + 1) * sizeof(mfm__coord_slot));
            }
            tr->stamp_batch = 1;
        }
        mfm__pool_run(pool, tr->chunks ? mfm__chunk_sum_task : tr->n_workers == 1 ? mfm__score_and_sum_task : mfm__score_task, tr);
        if (tr->n_workers > 1 && mfm__workers_failed(tr))
            return mfm__fail(err, MFM_ERR_OUT_OF_MEMORY, "out of memory for %s; the model holds the updates of the batches before it",
                             tr->chunks ? "a chunk's gradient buffers" : "the batch's lists of owned non-zeros or the owners' streams");
        for (w = 0; w < tr->n_workers; w++) loss += tr->workers[w].loss;
        if (!mfm__finite(loss)) /* before its steps, but for FFM's v that one worker stepped early */
            return mfm__diverged_at(tr, tr->rows, tr->n_batch, start / batch + 1, tr->step_early ? tr->workers[0].diverged : 0, err);
        if (tr->chunks) mfm__pool_run(pool, mfm__merge_places_task, tr); /* every owner's room, before the merge's first step */
        if (tr->n_workers > 1 && !mfm__workers_failed(tr)) mfm__pool_run(pool, tr->chunks ? mfm__merge_task : mfm__gradient_task, tr);
        if (mfm__workers_failed(tr))
            return mfm__fail(err, MFM_ERR_OUT_OF_MEMORY, "out of memory for the gradient buffers; the model holds the updates of the batches before it");
        mfm__pool_run(pool, mfm__apply_task, tr);
        if (tr->line) {
            mfm__pool_run(pool, tr->chunks ? mfm__chunk_line_task : mfm__line_task, tr);
            tr->alpha = mfm__line_alpha(tr);
            mfm__pool_run(pool, mfm__settle_task, tr);
        }
    }
    return MFM_OK;
}

/* Hogwild (params.hogwild): the pass's rows in n_shares contiguous shares, share s trained by
   trainer s (one worker) on its own thread, each reading and writing the shared model without
   locks, as LIBFFM and xLearn do. A share's rows take the steps one thread would give them; how
   the shares' steps interleave is up to the machine. */
typedef struct mfm__hogwild {
    mfm__trainer *share;
    int n_shares;
    const uint64_t *rows;
    uint64_t n;
    mfm_status *status;
    mfm_error *errors;
} mfm__hogwild;

static void mfm__hogwild_task(void *ctx, int s) {
    const mfm__hogwild *h = (const mfm__hogwild *)ctx;
    const uint64_t lo = h->n * (uint64_t)s / (uint64_t)h->n_shares, hi = h->n * (uint64_t)(s + 1) / (uint64_t)h->n_shares;
    mfm__pool alone; /* one worker: the pass runs its batches on this thread */
    mfm__pool_start(&alone, 1, &h->errors[s]);
    h->status[s] = mfm__pass(&h->share[s], &alone, h->rows + lo, hi - lo, &h->errors[s]);
    if (h->share[s].r_pending && h->share[s].r_pending->n) mfm__r_pending_step(&h->share[s]); /* R's last steps, also after a failure */
    mfm__pool_stop(&alone);
}

/* One epoch's pass over rows[0..n): by the shared batches of trainer 0 (n_shares = 1) or by
   Hogwild shares; adds the rows' loss and weight, trainer by trainer, worker by worker. */
static mfm_status mfm__train_pass(mfm__trainer *tr, int n_shares, mfm__pool *pool, const uint64_t *rows, uint64_t n, double *loss, double *weight,
                                  mfm_error *err) {
    mfm_status st = MFM_OK;
    int s, w;
    for (s = 0; s < n_shares; s++)
        for (w = 0; w < tr[s].n_workers; w++) tr[s].workers[w].loss = tr[s].workers[w].weight = 0;
    if (n_shares == 1) {
        st = mfm__pass(tr, pool, rows, n, err);
    } else {
        mfm_status *status = (mfm_status *)mfm__alloc((uint64_t)n_shares, sizeof(mfm_status));
        mfm_error *errors = (mfm_error *)mfm__alloc((uint64_t)n_shares, sizeof(mfm_error));
        mfm__hogwild h;
        h.share = tr, h.n_shares = n_shares, h.rows = rows, h.n = n, h.status = status, h.errors = errors;
        if (!status || !errors) st = mfm__fail(err, MFM_ERR_OUT_OF_MEMORY, "out of memory for the reports of %d Hogwild threads", n_shares);
        if (st == MFM_OK) mfm__pool_run(pool, mfm__hogwild_task, &h);
        for (s = 0; s < n_shares && st == MFM_OK; s++)
            if ((st = status[s]) != MFM_OK && err) *err = errors[s];
        MFM_FREE(status);
        MFM_FREE(errors);
        if (st != MFM_OK) return st;
    }
    for (s = 0; s < n_shares; s++)
        for (w = 0; w < tr[s].n_workers; w++) { /* in a fixed order: with one share, the same bits every run */
            *loss += tr[s].workers[w].loss;
            *weight += tr[s].workers[w].weight;
        }
    return st;
}

/* The validation rows of an internal split as a CSR of their own. */
typedef struct mfm__subset {
    mfm_csr csr;
    uint64_t *offsets;
    uint32_t *features, *fields;
    float *values, *labels, *weights;
} mfm__subset;

static void mfm__subset_free(mfm__subset *s) {
    MFM_FREE(s->offsets);
    MFM_FREE(s->features);
    MFM_FREE(s->fields);
    MFM_FREE(s->values);
    MFM_FREE(s->labels);
    MFM_FREE(s->weights);
    memset(s, 0, sizeof *s);
}

/* Rows rows[0 .. n) of d copied, in that order; their weights too when with_weights (early
   stopping's validation rows go without: its metric is unweighted). 0 when memory is short. */
static int mfm__subset_make(mfm__subset *s, const mfm_csr *d, const uint64_t *rows, uint64_t n, int with_weights) {
    const int weights = with_weights && d->weights;
    uint64_t i, nnz = 0, at = 0;
    memset(s, 0, sizeof *s);
    for (i = 0; i < n; i++) nnz += d->row_offsets[rows[i] + 1] - d->row_offsets[rows[i]];
    s->offsets = (uint64_t *)mfm__alloc(n + 1, sizeof(uint64_t));
    s->features = (uint32_t *)mfm__alloc(nnz, sizeof(uint32_t));
    s->fields = d->fields ? (uint32_t *)mfm__alloc(nnz, sizeof(uint32_t)) : NULL;
    s->values = d->values ? (float *)mfm__alloc(nnz, sizeof(float)) : NULL;
    s->labels = d->labels ? (float *)mfm__alloc(n, sizeof(float)) : NULL;
    s->weights = weights ? (float *)mfm__alloc(n, sizeof(float)) : NULL;
    if (!s->offsets || !s->features || (d->fields && !s->fields) || (d->values && !s->values) || (d->labels && !s->labels) || (weights && !s->weights))
        return 0;
    s->offsets[0] = 0;
    for (i = 0; i < n; i++) {
        uint64_t lo = d->row_offsets[rows[i]], z = d->row_offsets[rows[i] + 1] - lo;
        memcpy(s->features + at, d->features + lo, (size_t)z * sizeof(uint32_t));
        if (s->fields) memcpy(s->fields + at, d->fields + lo, (size_t)z * sizeof(uint32_t));
        if (s->values) memcpy(s->values + at, d->values + lo, (size_t)z * sizeof(float));
        if (s->labels) s->labels[i] = d->labels[rows[i]];
        if (s->weights) s->weights[i] = d->weights[rows[i]];
        s->offsets[i + 1] = at += z;
    }
    s->csr.n_rows = n;
    s->csr.row_offsets = s->offsets;
    s->csr.features = s->features;
    s->csr.fields = s->fields;
    s->csr.values = s->values;
    s->csr.labels = s->labels;
    s->csr.weights = s->weights;
    return 1;
}

MFMDEF mfm_status mfm_dataset_select(const mfm_csr *data, const uint64_t *rows, uint64_t n, mfm_dataset **out, mfm_error *err) {
    mfm_dataset *ds;
    mfm__subset s;
    uint64_t i, j;
    if (!out) return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "mfm_dataset_select: out is NULL");
    *out = NULL;
    if (!data || !data->row_offsets || (n && !rows))
        return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "mfm_dataset_select: %s is NULL", !data || !data->row_offsets ? "data" : "rows");
    for (i = 0; i < n; i++)
        if (rows[i] >= data->n_rows)
            return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "mfm_dataset_select: rows[%" PRIu64 "] = %" PRIu64 " is not a row of the data, which has %" PRIu64 " (0 .. n_rows - 1)", i,
                             rows[i], data->n_rows);
    if (!(ds = (mfm_dataset *)mfm__calloc(1, sizeof *ds)) || !mfm__subset_make(&s, data, rows, n, 1)) {
        if (ds) mfm__subset_free(&s);
        MFM_FREE(ds);
        return mfm__fail(err, MFM_ERR_OUT_OF_MEMORY, "out of memory for a selection of %" PRIu64 " rows", n);
    }
    ds->owned[0] = s.offsets, ds->owned[1] = s.labels, ds->owned[2] = s.weights; /* the order mfm_dataset keeps them in */
    ds->owned[3] = s.features, ds->owned[4] = s.fields, ds->owned[5] = s.values;
    ds->csr = s.csr;
    ds->csr.n_features = data->n_features, ds->csr.n_fields = data->n_fields;
    ds->info.format = data->origin ? data->origin->info.format : MFM_FORMAT_AUTO;
    ds->info.labels_task = data->origin ? data->origin->info.labels_task : MFM_TASK_DEFAULT;
    ds->info.n_rows = n, ds->info.nnz = s.offsets[n];
    for (j = 0; j < ds->info.nnz; j++) {
        if (s.features[j] >= ds->info.n_features) ds->info.n_features = s.features[j] + 1;
        if (s.fields && s.fields[j] >= ds->info.n_fields) ds->info.n_fields = s.fields[j] + 1;
    }
    ds->info.has_labels = s.labels != NULL, ds->info.has_weights = s.weights != NULL;
    ds->info.has_fields = s.fields != NULL, ds->info.has_values = s.values != NULL;
    *out = ds;
    return MFM_OK;
}

static mfm_status mfm__evaluate(const mfm_model *m, const mfm_csr *d, mfm_metrics *out, int allow_gpu, mfm_error *err);

MFMDEF double mfm_metrics_value(const mfm_metrics *met, mfm_metric metric, int *higher_is_better) {
    if (higher_is_better) *higher_is_better = metric == MFM_METRIC_AUC;
    switch (metric) {
    case MFM_METRIC_AUC: return met->auc;
    case MFM_METRIC_RMSE: return met->rmse;
    case MFM_METRIC_HALF_MSE: return 0.5 * met->rmse * met->rmse;
    default: return met->logloss; /* logloss, cross-entropy */
    }
}

/* The early-stopping metric of the model on the validation rows (without weights or label
   smoothing); *higher_better says which way improves. */
static mfm_status mfm__validation_metric(const mfm_model *m, const mfm_csr *v, double *out, int *higher_better, mfm_error *err) {
    mfm_metrics met;
    mfm_status st = mfm__evaluate(m, v, &met, 0, err);
    *out = mfm_metrics_value(&met, m->params.metric, higher_better);
    return st;
}

/* The parameter tables and epoch count of the best epoch so far. */
typedef struct mfm__snapshot {
    float *t[MFM_TENSOR_COUNT];
    uint64_t epochs_trained;
    int taken;
} mfm__snapshot;

static void mfm__snapshot_copy(mfm_model *m, mfm__snapshot *s, int restore) {
    int t;
    for (t = 0; t < MFM_TENSOR_COUNT; t++) memcpy(restore ? m->t[t].data : s->t[t], restore ? s->t[t] : m->t[t].data, mfm__table_bytes(m, t));
    if (restore) m->epochs_trained = s->epochs_trained;
    else s->epochs_trained = m->epochs_trained, s->taken = 1;
}

MFMDEF mfm_status mfm_validation_split(const mfm_params *params, uint64_t n_rows, uint64_t *order, uint64_t *n_validation, mfm_error *err) {
    const double f = params ? params->validation_fraction : 0;
    uint64_t r, n_val;
    if (!params || !n_validation || (n_rows && !order))
        return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "mfm_validation_split: %s is NULL", !params ? "params" : !n_validation ? "n_validation" : "order");
    *n_validation = 0;
    if (!(f >= 0 && f < 1)) return mfm__fail(err, MFM_ERR_INVALID_PARAM, "params.validation_fraction = %g must be in [0, 1)", f);
    for (r = 0; r < n_rows; r++) order[r] = r;
    if (f == 0) return MFM_OK;
    n_val = (uint64_t)floor(f * (double)n_rows + 0.5);
    if (n_val < 1) n_val = 1;
    if (n_val >= n_rows)
        return mfm__fail(err, MFM_ERR_INVALID_PARAM, "params.validation_fraction = %g of %" PRIu64 " rows leaves no training rows", f, n_rows);
    {
        mfm__rng rng = mfm__rng_seed(params->seed, MFM__STREAM_SPLIT, 0);
        for (r = n_rows - 1; r > 0; r--) {
            uint64_t j = mfm__rng_below(&rng, r + 1), tmp = order[r];
            order[r] = order[j];
            order[j] = tmp;
        }
    }
    *n_validation = n_val;
    return MFM_OK;
}

/* The rows to train on (all, in order, for f = 0) and, with an internal split of a fraction f,
   the validation rows (mfm_validation_split: a seeded permutation; its first max(1, round(f n))
   rows validate, the rest train in permuted order). */
static mfm_status mfm__split(const mfm_model *m, const mfm_csr *d, double f, uint64_t **rows, uint64_t *n_train, mfm__subset *valid, mfm_error *err) {
    const uint64_t n = d->n_rows;
    mfm_params p = m->params;
    uint64_t n_val;
    mfm_status st;
    *rows = (uint64_t *)mfm__alloc(n, sizeof(uint64_t));
    if (!*rows) return mfm__fail(err, MFM_ERR_OUT_OF_MEMORY, "out of memory for the row order (%" PRIu64 " rows)", n);
    p.validation_fraction = f > 0 ? f : 0;
    *n_train = n;
    if ((st = mfm_validation_split(&p, n, *rows, &n_val, err)) != MFM_OK || !n_val) return st;
    if (!mfm__subset_make(valid, d, *rows, n_val, 0)) return mfm__fail(err, MFM_ERR_OUT_OF_MEMORY, "out of memory for %" PRIu64 " validation rows", n_val);
    memmove(*rows, *rows + n_val, (size_t)(n - n_val) * sizeof(uint64_t));
    *n_train = n - n_val;
    return MFM_OK;
}

/* Checks data (and validation rows) against the model before anything changes. */
static mfm_status mfm__check_fit_data(const mfm_model *m, const mfm_csr *d, int check_weights, mfm__data_info *info, mfm_error *err) {
    uint32_t n_classes = m->n_classes;
    mfm_status st;
    if ((st = mfm__check_csr(d, m->params.model != MFM_MODEL_FM, m->params.n_threads, info, err)) != MFM_OK) return st;
    if ((st = mfm__check_shape(m, d, info, err)) != MFM_OK) return st;
    return mfm__check_targets(m->params.task, d, &n_classes, check_weights, err);
}

/* An epoch's order of the rows: a seeded Fisher-Yates shuffle that depends on (seed, epochs
   trained) only, or (partial fit) the rows as they come. */
typedef struct mfm__epoch_order {
    const mfm_model *m;
    const uint64_t *rows;
    uint64_t n, epochs_trained;
    int partial;
    uint64_t *out;
} mfm__epoch_order;

static void mfm__make_order(const mfm__epoch_order *o) {
    uint64_t r;
    memcpy(o->out, o->rows, (size_t)o->n * sizeof(uint64_t));
    if (!o->partial) {
        mfm__rng rng = mfm__rng_seed(o->m->params.seed, MFM__STREAM_EPOCH, o->epochs_trained);
        for (r = o->n - 1; r > 0; r--) {
            uint64_t j = mfm__rng_below(&rng, r + 1), tmp = o->out[r];
            o->out[r] = o->out[j];
            o->out[j] = tmp;
        }
    }
}

/* Training on a GPU (>>gpu-train): the passes, the validation scores and the early-stopping copy
   of the tables on the device; the host model gets the tables back at the end. A pass makes the
   next epoch's order (`meanwhile`, when given) while the device works through its batches. */
typedef struct mfm__gpu_trainer mfm__gpu_trainer;
static mfm_status mfm__gpu_fit_start(mfm__gpu_trainer **out, mfm_model *m, const mfm_csr *d, uint64_t n_train, const mfm_csr *valid,
                                     const float *class_weights, const mfm__data_info *info, int ahead, mfm_error *err);
static mfm_status mfm__gpu_fit_pass(mfm__gpu_trainer *g, const mfm_csr *d, const uint64_t *order, uint64_t n, const mfm__epoch_order *meanwhile, double *loss,
                                    double *weight, mfm_error *err);
static mfm_status mfm__gpu_fit_metric(mfm__gpu_trainer *g, const mfm_csr *valid, double *metric, int *higher_better, mfm_error *err);
enum { MFM__KEEP_BEST, MFM__RETURN_LAST, MFM__RETURN_BEST }; /* where mfm__gpu_fit_tables copies the tables */
static mfm_status mfm__gpu_fit_tables(mfm__gpu_trainer *g, int where, mfm_error *err);
static void mfm__gpu_fit_free(mfm__gpu_trainer *g);
static int mfm__on_gpu(const mfm_params *p);

/* mfm_fit, mfm_fit_validated and mfm_partial_fit: epochs of seeded permutations with early
   stopping, or (partial) one pass in row order; on the CPU or on a GPU. */
static mfm_status mfm__fit(mfm_model *m, const mfm_csr *d, const mfm_csr *validation, int partial, mfm_error *err) {
    const char *fn = partial ? "mfm_partial_fit" : validation ? "mfm_fit_validated" : "mfm_fit";
    mfm__data_info info, vinfo;
    mfm__subset split;
    mfm__snapshot best;
    mfm__trainer *tr = NULL; /* one, or one a Hogwild share */
    mfm__gpu_trainer *gpu = NULL;
    mfm__pool pool;
    mfm_status st;
    const mfm_csr *valid = validation;
    uint64_t *rows = NULL, *order = NULL, *order_next = NULL, n = 0, epochs_before;
    double best_metric = 0;
    float *class_weights = NULL;
    int e, s, higher_better = 0, best_epoch = 0, stale = 0, on_gpu, pool_on = 0, restore_best, ahead = 0, n_epochs = partial ? 1 : m ? m->params.n_epochs : 0;
    int n_shares = 1, warned_nan = 0;
    if (!m) return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "%s: the model is NULL", fn);
    if (m->for_prediction) return mfm__read_only(fn, err);
    if (!m->has_state)
        return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT,
                         "%s: the model was loaded from a file saved without its optimizer state, so training could not continue where it "
                         "stopped; call mfm_model_reset_state to start the optimizer afresh",
                         fn);
    if ((st = mfm__check_fit_data(m, d, 1, &info, err)) != MFM_OK) return st;
    if (d->n_rows == 0) return mfm__fail(err, MFM_ERR_INVALID_DATA, "the training data has no rows");
    if (partial && m->params.class_weight == MFM_CLASS_WEIGHT_BALANCED)
        return mfm__fail(err, MFM_ERR_INVALID_PARAM, "mfm_partial_fit: balanced class weights would depend on each chunk; give explicit weights");
    if (validation && (st = mfm__check_fit_data(m, validation, 0, &vinfo, err)) != MFM_OK) return mfm__name_error(err, st, "the validation data");
    if (validation && validation->n_rows == 0) return mfm__fail(err, MFM_ERR_INVALID_DATA, "the validation data has no rows");
    on_gpu = mfm__on_gpu(&m->params);
    epochs_before = m->epochs_trained;
    memset(&split, 0, sizeof split);
    memset(&best, 0, sizeof best);
    memset(&pool, 0, sizeof pool);
    st = mfm__split(m, d, partial || validation ? 0.0 : m->params.validation_fraction, &rows, &n, &split, err);
    if (split.offsets) valid = &split.csr;
    if (st == MFM_OK && !on_gpu && m->params.hogwild) n_shares = (uint64_t)mfm__threads(m->params.n_threads) < n ? mfm__threads(m->params.n_threads) : (int)n;
    if (st == MFM_OK) {
        const int threads = n_shares > 1 ? 1 : mfm__threads(m->params.n_threads); /* a Hogwild share's trainer has one worker */
        const uint64_t batch_rows = n < (uint64_t)m->params.batch_size ? n : (uint64_t)m->params.batch_size;
        const int chunked = m->params.thread_chunks && (threads < m->params.batch_size ? threads : m->params.batch_size) > 1; /* its workers */
        int trainers_ok = 1;
        if (!on_gpu && (tr = (mfm__trainer *)mfm__calloc((uint64_t)n_shares, sizeof(mfm__trainer))) != NULL)
            for (s = 0; s < n_shares && trainers_ok; s++)
                trainers_ok = mfm__trainer_init(&tr[s], m, d, rows, n, &info, threads, chunked ? 0 : batch_rows) &&
                              (n_shares == 1 || mfm__r_pending_init(&tr[s])) && (!chunked || mfm__chunks_init(&tr[s], m, d, rows, n, &info));
        order = (uint64_t *)mfm__alloc(n, sizeof(uint64_t));
        if (on_gpu && n_epochs > 1) order_next = (uint64_t *)mfm__alloc(n, sizeof(uint64_t)); /* the next epoch's order, made during this one */
        for (e = 0; valid && !on_gpu && e < MFM_TENSOR_COUNT; e++) best.t[e] = (float *)mfm__alloc(mfm__table_bytes(m, e) / sizeof(float), sizeof(float));
        if (!order || (on_gpu && n_epochs > 1 && !order_next) || (valid && !on_gpu && (!best.t[0] || !best.t[1] || !best.t[2] || !best.t[3])) ||
            (on_gpu ? !mfm__class_weights_of(m, d, rows, n, &class_weights) : !tr || !trainers_ok))
            st = mfm__fail(err, MFM_ERR_OUT_OF_MEMORY, "out of memory for the training buffers (%" PRIu64 " rows)", n);
    }
    if (st == MFM_OK)
        st = on_gpu ? mfm__gpu_fit_start(&gpu, m, d, n, valid, class_weights, &info, order_next != NULL, err)
                    : mfm__pool_start(&pool, n_shares > 1 ? n_shares : tr->n_workers, err);
    if (st != MFM_OK) goto done;
    pool_on = !on_gpu;
    if (!partial)
        mfm__log(&m->params, MFM_LOG_INFO,
                 "training %s %s on %" PRIu64 " rows (%" PRIu64 " non-zeros), %u features, %u fields, k=%d, %s, batch %d, %d thread(s)%s%s, %d epoch(s)%s",
                 mfm__model_names[m->params.model], mfm_task_name(m->params.task), n, info.nnz, (unsigned)m->n_features, (unsigned)m->n_fields, m->k,
                 mfm__optimizer_names[m->params.optimizer], m->params.batch_size, on_gpu ? 0 : n_shares > 1 ? n_shares : tr->n_workers,
                 n_shares > 1                        ? " (Hogwild)"
                 : m->params.hogwild && on_gpu       ? " (Hogwild is for CPU threads: not used)"
                 : m->params.thread_chunks && on_gpu ? " (chunks are for CPU threads: not used)"
                 : tr && tr->chunks                  ? " (a chunk of each batch per thread)"
                                                     : "",
                 !on_gpu ? "" : m->params.n_devices > 1 ? (m->params.deterministic ? " on several GPUs (deterministic)" : " on several GPUs")
                           : (m->params.deterministic ? " on the GPU (deterministic)" : " on the GPU"), n_epochs, valid ? ", early stopping" : "");
    for (e = 0; e < n_epochs && st == MFM_OK; e++) {
        double t0 = mfm__seconds(), loss = 0, weight = 0, metric = NAN;
        mfm_epoch_report rep;
        mfm__epoch_order now = {m, rows, n, m->epochs_trained, partial, order}, next = {m, rows, n, m->epochs_trained + 1, partial, order_next};
        if (!ahead) mfm__make_order(&now); /* else the last pass made it */
        ahead = order_next && e + 1 < n_epochs;
        if (on_gpu) {
            if ((st = mfm__gpu_fit_pass(gpu, d, order, n, ahead ? &next : NULL, &loss, &weight, err)) != MFM_OK) break;
            if (ahead) order_next = order, order = next.out;
            if (!mfm__finite(loss)) { /* the host model is as it was: the tables come back only from a fit that worked */
                char at[32] = "mfm_partial_fit's pass";
                if (!partial) snprintf(at, sizeof at, "epoch %d", e + 1);
                st = mfm__fail(err, MFM_ERR_DIVERGED,
                               "training diverged in %s on the GPU: its loss is not finite; the model is left as it was before this call: a smaller "
                               "learning rate (it is %g), or labels and values scaled down, may train",
                               at, m->params.learning_rate);
                break;
            }
        } else {
            for (s = 0; s < n_shares; s++) tr[s].epoch = partial ? 0 : e + 1;
            st = mfm__train_pass(tr, n_shares, &pool, order, n, &loss, &weight, err);
            if (st == MFM_ERR_DIVERGED) mfm__diverged_holds(m, err);
            else if (st == MFM_OK && !partial && !mfm__tables_finite_on(m, &pool)) { /* not per chunk: a chunk may be far smaller than the model */
                char at[32];
                snprintf(at, sizeof at, "in epoch %d", e + 1);
                st = mfm__diverged_tables(m, at, err);
            }
            if (st != MFM_OK) break;
            m->has_state = 1;
        }
        if (partial) break;
        m->epochs_trained++;
        rep.seconds = mfm__seconds() - t0;
        if (valid) {
            st = on_gpu ? mfm__gpu_fit_metric(gpu, valid, &metric, &higher_better, err) : mfm__validation_metric(m, valid, &metric, &higher_better, err);
            if (st != MFM_OK) break;
            if (metric != metric && !warned_nan) { /* early stopping cannot work: say why, once */
                warned_nan = 1;
                mfm__log(&m->params, MFM_LOG_WARN,
                         "epoch %d: the validation %s is NaN, so no epoch improves on it and early stopping ends training after %d epoch(s)%s", e + 1,
                         mfm_metric_name(m->params.metric), m->params.patience,
                         m->params.metric == MFM_METRIC_AUC ? "; AUC needs rows of both classes, and the validation rows hold one class only: "
                                                              "choose the logloss metric, or validate on rows of both classes"
                                                            : "");
            }
            if (!best.taken || (higher_better ? metric > best_metric + m->params.min_delta : metric < best_metric - m->params.min_delta)) {
                if (metric == metric) { /* NaN (AUC without both classes) never improves */
                    best_metric = metric;
                    best_epoch = e + 1;
                    stale = 0;
                    if (on_gpu) {
                        if ((st = mfm__gpu_fit_tables(gpu, MFM__KEEP_BEST, err)) != MFM_OK) break;
                        best.epochs_trained = m->epochs_trained, best.taken = 1;
                    } else {
                        mfm__snapshot_copy(m, &best, 0);
                    }
                } else {
                    stale++;
                }
            } else {
                stale++;
            }
        }
        rep.epoch = e + 1;
        rep.n_epochs = n_epochs;
        rep.train_loss = weight > 0 ? loss / weight : 0;
        rep.n_rows = n;
        rep.validation = metric;
        rep.best_epoch = best_epoch;
        if (m->params.on_epoch && m->params.on_epoch(m->params.user, &rep))
            st = mfm__fail(err, MFM_ERR_CANCELLED, "training was stopped by the epoch callback after epoch %d of %d", e + 1, n_epochs);
        else if (valid && stale >= m->params.patience) {
            if (!best.taken)
                mfm__log(&m->params, MFM_LOG_WARN, "early stopping after epoch %d: no epoch had a validation %s that is a number; the model is the last epoch's",
                         e + 1, mfm_metric_name(m->params.metric));
            break;
        }
    }
    restore_best = st == MFM_OK && best.taken && !m->params.keep_last && m->epochs_trained != best.epochs_trained;
    if (restore_best) {
        mfm__log(&m->params, MFM_LOG_INFO, "early stopping: restoring the parameters of epoch %d", best_epoch);
        if (on_gpu) m->epochs_trained = best.epochs_trained; /* the device's copy comes back below */
        else mfm__snapshot_copy(m, &best, 1);
    }
    if (on_gpu) { /* the host model changes only when the whole fit worked (or was cancelled between epochs) */
        mfm_status got = st == MFM_OK || st == MFM_ERR_CANCELLED ? mfm__gpu_fit_tables(gpu, restore_best ? MFM__RETURN_BEST : MFM__RETURN_LAST, err) : st;
        if (got != MFM_OK) {
            m->epochs_trained = epochs_before;
            st = got;
        } else {
            m->has_state = 1;
            if (!mfm__tables_finite(m)) st = mfm__diverged_tables(m, "on the GPU", err); /* the optimizer state, which no loss shows */
        }
    }
done:
    if (pool_on) mfm__pool_stop(&pool);
    for (s = 0; tr && s < n_shares; s++)
        if (tr[s].m) mfm__trainer_free(&tr[s]);
    MFM_FREE(tr);
    mfm__gpu_fit_free(gpu);
    for (e = 0; e < MFM_TENSOR_COUNT; e++) MFM_FREE(best.t[e]);
    MFM_FREE(class_weights);
    mfm__subset_free(&split);
    MFM_FREE(rows);
    MFM_FREE(order);
    MFM_FREE(order_next);
    return st == MFM_OK ? mfm__ok(err) : st;
}

MFMDEF mfm_status mfm_fit(mfm_model *m, const mfm_csr *d, mfm_error *err) { return mfm__fit(m, d, NULL, 0, err); }

MFMDEF mfm_status mfm_fit_validated(mfm_model *m, const mfm_csr *d, const mfm_csr *validation, mfm_error *err) {
    if (!validation) return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "mfm_fit_validated: the validation data is NULL");
    return mfm__fit(m, d, validation, 0, err);
}

MFMDEF mfm_status mfm_partial_fit(mfm_model *m, const mfm_csr *d, mfm_error *err) { return mfm__fit(m, d, NULL, 1, err); }

MFMDEF mfm_status mfm_train(const mfm_params *params, const mfm_csr *d, mfm_model **out, mfm_error *err) {
    mfm_params p = mfm_params_resolve(params);
    mfm__data_info info;
    mfm_status st;
    uint32_t n_classes = p.n_classes > 0 ? (uint32_t)p.n_classes : 0;
    if (!out) return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "mfm_train: the output pointer is NULL");
    *out = NULL;
    /* Parameters first (the class count is checked again once the data has told it). */
    if ((st = mfm__validate_params(&p, n_classes ? n_classes : 2, err)) != MFM_OK) return st;
    if ((st = mfm__check_csr(d, p.model != MFM_MODEL_FM, p.n_threads, &info, err)) != MFM_OK) return st;
    if ((st = mfm__check_targets(p.task, d, &n_classes, 1, err)) != MFM_OK) return st;
    st = mfm_model_create(&p, d->n_features ? d->n_features : info.n_features, d->n_fields ? d->n_fields : info.n_fields, n_classes, out, err);
    if (st != MFM_OK) return st;
    st = mfm_fit(*out, d, err);
    if (st != MFM_OK && st != MFM_ERR_CANCELLED) {
        mfm_model_free(*out);
        *out = NULL;
    }
    return st;
}

/* ============================================================================================
   >>predict  Scores, probabilities and labels, split over threads by rows
   ============================================================================================ */

MFMDEF size_t mfm_output_width(const mfm_model *m, mfm_output kind) {
    if (!m || (unsigned)kind >= MFM_OUTPUT_COUNT) return 0;
    return m->params.task == MFM_TASK_MULTICLASS && kind != MFM_OUTPUT_LABEL ? m->n_classes : 1;
}

typedef struct mfm__predictor {
    const mfm_model *m;
    const mfm_csr *d;
    mfm_output kind;
    float *out;
    const float *ones;
    float *scratch;  /* per worker: C x k sums then C scores */
    double *prob;    /* per worker: C */
    float *scaled;   /* per worker: the longest row, for normalize_rows */
    float *widened;  /* per worker, FM and FwFM float16 factors only: mfm__row_widened's floats */
    uint64_t widened_floats;
    uint32_t *ids;   /* per worker, with widened: the row's features renumbered (max_row_nnz) */
    uint32_t max_row_nnz;
    int n_workers;
} mfm__predictor;

/* Floats of mfm__row_widened's buffer for rows of up to z non-zeros; 0 for a model of float32
   parameters, and for FFM, which reads its halves in place (mfm__ffm_pairs). */
static uint64_t mfm__widened_floats(const mfm_model *m, uint32_t z) {
    return m->t[MFM_TENSOR_V].halves && m->params.model != MFM_MODEL_FFM ? (uint64_t)m->n_classes * z * (m->t[MFM_TENSOR_V].stride + 1) : 0;
}

/* An FM or FwFM model whose factors are float16 (mfm_model_save_half) scores a row through a
   model of that row alone: the blocks of the row's features (every class) widened into buf, the
   features renumbered 0 .. z-1, w copied beside them where it lies apart. The float32 score
   paths then run as they are, and give the bits a float32 model holding the same values would.
   (FFM reads its halves where they lie: its row covers F slots a feature, and widening them
   first cost more than the score.) */
static mfm__row mfm__row_widened(const mfm_model *m, const mfm__row *row, mfm_model *local, float *buf, uint32_t *ids) {
    const mfm__table *V = &m->t[MFM_TENSOR_V], *W = &m->t[MFM_TENSOR_W];
    const uint32_t z = row->z;
    const uint64_t nb = z, per_feature = V->stride;
    float *w = buf + m->n_classes * nb * V->stride;
    const int f16c = m->f16c;
    mfm__row r = *row;
    uint32_t a, c;
    *local = *m;
    local->t[MFM_TENSOR_V].halves = local->t[MFM_TENSOR_W].halves = NULL;
    local->t[MFM_TENSOR_V].data = buf, local->t[MFM_TENSOR_V].n_blocks = nb;
    for (c = 0; c < m->n_classes; c++)
        for (a = 0; a < z; a++) {
            mfm__halves_to_floats(V->halves + (c * V->n_blocks + row->feat[a]) * V->stride, buf + (c * nb + a) * V->stride, per_feature, f16c);
            if (!W->guest) w[c * z + a] = *mfm__block(m, MFM_TENSOR_W, c, row->feat[a]);
        }
    if (W->guest)
        local->t[MFM_TENSOR_W].data = buf + m->k;
    else
        local->t[MFM_TENSOR_W].data = w, local->t[MFM_TENSOR_W].stride = 1;
    local->t[MFM_TENSOR_W].n_blocks = z;
    for (a = 0; a < z; a++) ids[a] = a;
    r.feat = ids;
    return r;
}

/* The float16 blocks of row r's features (FM, FwFM), and their w where it lies apart, asked for
   at once. */
static void mfm__prefetch_halves(const mfm_model *m, const mfm_csr *d, uint64_t r) {
    const mfm__table *V = &m->t[MFM_TENSOR_V];
    uint64_t j;
    uint32_t c;
    for (c = 0; c < m->n_classes; c++)
        for (j = d->row_offsets[r]; j < d->row_offsets[r + 1]; j++) {
            const char *p = (const char *)(V->halves + (c * V->n_blocks + d->features[j]) * V->stride);
            MFM__PREFETCH_READ(p);
            MFM__PREFETCH_READ(p + 2 * V->stride - 1); /* a block that starts inside a line ends one line further */
            if (m->t[MFM_TENSOR_W].data) MFM__PREFETCH_READ(mfm__block(m, MFM_TENSOR_W, c, d->features[j]));
        }
}

/* One row's output of `kind` from its C scores; prob: room for C doubles. */
static void mfm__row_output(const mfm_model *m, mfm_output kind, const float *score, float *out, double *prob) {
    const uint32_t C = m->n_classes;
    uint32_t c;
    if (kind == MFM_OUTPUT_SCORE || m->params.task == MFM_TASK_REGRESSION) {
        memcpy(out, score, mfm_output_width(m, kind) * sizeof(float));
    } else if (m->params.task == MFM_TASK_BINARY) {
        out[0] = kind == MFM_OUTPUT_LABEL ? (score[0] >= 0 ? 1.0f : 0.0f) : (float)mfm__sigmoid(score[0]);
    } else if (kind == MFM_OUTPUT_LABEL) {
        uint32_t best = 0;
        for (c = 1; c < C; c++)
            if (score[c] > score[best]) best = c; /* the first of equal maxima wins */
        out[0] = (float)best;
    } else {
        mfm__softmax(score, C, prob);
        for (c = 0; c < C; c++) out[c] = (float)prob[c];
    }
}

static void mfm__predict_task(void *ctx, int index) {
    const mfm__predictor *pr = (const mfm__predictor *)ctx;
    const mfm_model *m = pr->m;
    const uint32_t C = m->n_classes;
    const size_t width = mfm_output_width(m, pr->kind);
    float *sum = pr->scratch + (uint64_t)index * C * (m->k + 1), *score = sum + (uint64_t)C * m->k;
    double *prob = pr->prob + (uint64_t)index * C;
    uint64_t r, lo, hi;
    uint32_t c;
    mfm__share(pr->d->n_rows, pr->n_workers, index, &lo, &hi);
    if (pr->widened) { /* float16 factors: each row through a model of its own (mfm__row_widened) */
        float *buf = pr->widened + (uint64_t)index * pr->widened_floats;
        if (lo < hi) mfm__prefetch_halves(m, pr->d, lo);
        for (r = lo; r < hi; r++) {
            mfm__row whole = mfm__get_row(m, pr->d, r, pr->ones, pr->scaled + (uint64_t)index * pr->max_row_nnz), row;
            mfm_model local;
            if (r + 1 < hi) mfm__prefetch_halves(m, pr->d, r + 1);
            row = mfm__row_widened(m, &whole, &local, buf, pr->ids + (uint64_t)index * pr->max_row_nnz);
            for (c = 0; c < C; c++) score[c] = mfm__score(&local, c, &row, sum + (uint64_t)c * m->k, NULL);
            mfm__row_output(m, pr->kind, score, pr->out + r * width, prob);
        }
        return;
    }
    if (lo < hi) mfm__prefetch_row(m, pr->d, lo, NULL, 0); /* the first row's lines, all at once (a lone row's latency) */
    for (r = lo; r < hi; r++) {
        mfm__row row = mfm__get_row(m, pr->d, r, pr->ones, pr->scaled + (uint64_t)index * pr->max_row_nnz);
        float *out = pr->out + r * width;
        if (r + 1 < hi) mfm__prefetch_row(m, pr->d, r + 1, NULL, 0); /* the next row's, all at once while this one is scored (below) */
        for (c = 0; c < C; c++) score[c] = mfm__score(m, c, &row, sum + (uint64_t)c * m->k, NULL);
        mfm__row_output(m, pr->kind, score, out, prob);
    }
}

/* The checks of every prediction call, and the output kind with its default resolved. */
/* The output kind a prediction asked for, resolved (default: probabilities; regression: scores). */
static mfm_status mfm__check_kind(const mfm_model *m, mfm_output *kind, const char *fn, mfm_error *err) {
    if ((unsigned)*kind >= MFM_OUTPUT_COUNT)
        return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "%s: output kind %d is not a known kind (score, probability or label)", fn, (int)*kind);
    if (*kind == MFM_OUTPUT_DEFAULT) *kind = m->params.task == MFM_TASK_REGRESSION ? MFM_OUTPUT_SCORE : MFM_OUTPUT_PROBABILITY;
    if (*kind == MFM_OUTPUT_PROBABILITY && m->params.task == MFM_TASK_REGRESSION)
        return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "%s: a regression model gives scores, not probabilities", fn);
    return MFM_OK;
}

/* Room in the caller's output for n_rows rows of `kind`. */
static mfm_status mfm__check_room(const mfm_model *m, uint64_t n_rows, mfm_output kind, const float *out, size_t capacity, const char *fn, mfm_error *err) {
    const uint64_t need = n_rows * mfm_output_width(m, kind);
    if (!out && need) return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "%s: the output buffer is NULL", fn);
    if ((uint64_t)capacity < need)
        return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "%s: the output holds %" PRIu64 " values but %" PRIu64 " rows need %" PRIu64, fn,
                         (uint64_t)capacity, n_rows, need);
    return MFM_OK;
}

static mfm_status mfm__predict_check(const mfm_model *m, const mfm_csr *d, mfm_output *kind, const float *out, size_t capacity,
                                     mfm__data_info *info, const char *fn, mfm_error *err) {
    mfm_status st;
    if ((st = mfm__check_kind(m, kind, fn, err)) != MFM_OK) return st;
    if ((st = mfm__check_csr(d, m->params.model != MFM_MODEL_FM, m->params.n_threads, info, err)) != MFM_OK) return st;
    if ((st = mfm__check_shape(m, d, info, err)) != MFM_OK) return st;
    return mfm__check_room(m, d->n_rows, *kind, out, capacity, fn, err);
}

/* The backend a call runs on: CUDA for CUDA, and for AUTO when a driver sees a device. */
static int mfm__on_gpu(const mfm_params *p) {
    return p->backend == MFM_BACKEND_CUDA || (p->backend == MFM_BACKEND_AUTO && mfm_cuda_available());
}

/* Backend CUDA (the call checked already): the model goes up for this call only
   (mfm_gpu_model_upload keeps it there). On several GPUs (params.n_devices > 1) each takes a consecutive part of the rows, on a thread of
   its own with its own copy of the model: a row's score does not depend on where it runs. */
typedef struct mfm__gpu_parts {
    const mfm_model *m;
    const mfm_csr *d;
    mfm_output kind;
    float *out;
    size_t width;
    int n_parts;
    mfm_status status[MFM_MAX_DEVICES];
    mfm_error err[MFM_MAX_DEVICES];
} mfm__gpu_parts;

/* Part k of the rows on its GPU (params.devices[k], or params.device for one): the model
   uploaded, the part predicted, the upload freed. A part of some rows is a view with offsets of
   its own; one part is the data as it is. */
static void mfm__predict_gpu_part(void *ctx, int k) {
    mfm__gpu_parts *g = (mfm__gpu_parts *)ctx;
    const mfm_params *p = &g->m->params;
    const int device = g->n_parts > 1 ? p->devices[k] : p->device;
    const uint64_t n = g->d->n_rows, lo = n * (uint64_t)k / (uint64_t)g->n_parts, hi = n * (uint64_t)(k + 1) / (uint64_t)g->n_parts;
    const uint64_t at = g->d->row_offsets[lo];
    mfm_gpu_model *gm = NULL;
    mfm_csr part = *g->d;
    uint64_t *offsets = NULL, r;
    g->status[k] = MFM_OK;
    if (hi == lo) return;
    if (g->n_parts > 1) {
        if (!(offsets = (uint64_t *)mfm__alloc(hi - lo + 1, sizeof(uint64_t)))) {
            g->status[k] = mfm__fail(&g->err[k], MFM_ERR_OUT_OF_MEMORY, "out of memory for the rows of GPU %d", device);
            return;
        }
        for (r = lo; r <= hi; r++) offsets[r - lo] = g->d->row_offsets[r] - at;
        part.n_rows = hi - lo, part.row_offsets = offsets;
        part.origin = NULL; /* a view of some of the rows: errors must not name the dataset's lines */
        part.features += at;
        if (part.fields) part.fields += at;
        if (part.values) part.values += at;
        if (part.labels) part.labels += lo;
        if (part.weights) part.weights += lo;
    }
    g->status[k] = mfm_gpu_model_upload(g->m, device, &gm, &g->err[k]);
    if (g->status[k] == MFM_OK) g->status[k] = mfm_gpu_predict(gm, &part, g->kind, g->out + lo * g->width, (size_t)((hi - lo) * g->width), &g->err[k]);
    mfm_gpu_model_free(gm);
    MFM_FREE(offsets);
}

/* The rows on the model's GPU, or split across its GPUs (a thread each). */
static mfm_status mfm__predict_gpu(const mfm_model *m, const mfm_csr *d, mfm_output kind, float *out, size_t capacity, mfm_error *err) {
    mfm__gpu_parts parts;
    mfm__pool pool;
    mfm_status st;
    int k;
    (void)capacity; /* checked by the caller: each part has its rows' room */
    parts.m = m, parts.d = d, parts.kind = kind, parts.out = out, parts.width = mfm_output_width(m, kind);
    parts.n_parts = m->params.n_devices > 1 ? m->params.n_devices : 1;
    if ((st = mfm__pool_start(&pool, parts.n_parts, err)) != MFM_OK) return st; /* one part runs on this thread */
    mfm__pool_run(&pool, mfm__predict_gpu_part, &parts);
    mfm__pool_stop(&pool);
    for (k = 0; k < parts.n_parts; k++)
        if (parts.status[k] != MFM_OK) {
            if (err) *err = parts.err[k];
            return parts.status[k];
        }
    return mfm__ok(err);
}

/* A call of a few rows is a server's: it runs on the calling thread, its buffers on the stack
   where they fit (no allocation, no thread start). A longer call starts a thread for each 4 MB
   of parameters its rows read (mfm__workers_for_bytes; a non-zero reads its feature's record of
   V, a line at least, in every class): on the 2-core VM a second thread's start cost about as
   much as 30 FFM rows or 250 FM rows, and a thread every 32 rows, as before, made 2 threads
   predict 33-128 FM rows 3-8x slower than one. */
#define MFM__PREDICT_ROWS 32
#define MFM__STACK_FLOATS 8192 /* and MFM__STACK_IDS ids: about 36 KB of the caller's stack */
#define MFM__STACK_IDS 1024

/* allow_gpu = 0: always the CPU (a validation pass inside CPU training must not depend on the
   machine). */
static mfm_status mfm__predict(const mfm_model *m, const mfm_csr *d, mfm_output kind, float *out, size_t capacity, int allow_gpu, mfm_error *err) {
    mfm__data_info info;
    mfm__predictor pr;
    mfm__pool pool;
    mfm_status st;
    float *ones, stack_floats[MFM__STACK_FLOATS];
    uint32_t stack_ids[MFM__STACK_IDS];
    double stack_prob[64];
    uint64_t r, stack_need;
    int on_stack;
    if (!m) return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "mfm_predict: the model is NULL");
    if ((st = mfm__predict_check(m, d, &kind, out, capacity, &info, "mfm_predict", err)) != MFM_OK) return st;
    if (d->n_rows == 0) return mfm__ok(err);
    if (allow_gpu && mfm__on_gpu(&m->params)) return mfm__predict_gpu(m, d, kind, out, capacity, err);
    memset(&pr, 0, sizeof pr);
    memset(&pool, 0, sizeof pool);
    pr.m = m;
    pr.d = d;
    pr.kind = kind;
    pr.out = out;
    if (d->n_rows <= MFM__PREDICT_ROWS) {
        pr.n_workers = 1;
    } else {
        const mfm__table *V = &m->t[m->params.linear_only ? MFM_TENSOR_W : MFM_TENSOR_V];
        const uint64_t record = V->feature_stride * (V->halves ? sizeof(uint16_t) : sizeof(float));
        pr.n_workers = mfm__workers_for_bytes(info.nnz * (record > 64 ? record : 64) * m->n_classes, m->params.n_threads);
    }
    pr.max_row_nnz = info.max_row_nnz;
    pr.widened_floats = mfm__widened_floats(m, info.max_row_nnz);
    stack_need = 2ull * info.max_row_nnz + (uint64_t)m->n_classes * (m->k + 1) + pr.widened_floats;
    on_stack = pr.n_workers == 1 && stack_need <= MFM__STACK_FLOATS && m->n_classes <= 64 && (!pr.widened_floats || info.max_row_nnz <= MFM__STACK_IDS);
    if (on_stack) {
        pr.ones = ones = stack_floats;
        pr.scaled = stack_floats + info.max_row_nnz;
        pr.scratch = stack_floats + 2ull * info.max_row_nnz;
        pr.widened = pr.widened_floats ? pr.scratch + (uint64_t)m->n_classes * (m->k + 1) : NULL;
        pr.ids = pr.widened_floats ? stack_ids : NULL;
        pr.prob = stack_prob;
    } else {
        pr.ones = ones = (float *)mfm__alloc(info.max_row_nnz, sizeof(float));
        pr.scratch = (float *)mfm__alloc((uint64_t)pr.n_workers * m->n_classes * (m->k + 1), sizeof(float));
        pr.prob = (double *)mfm__alloc((uint64_t)pr.n_workers * m->n_classes, sizeof(double));
        pr.scaled = (float *)mfm__alloc((uint64_t)pr.n_workers * info.max_row_nnz, sizeof(float));
        pr.widened = pr.widened_floats ? (float *)mfm__alloc((uint64_t)pr.n_workers * pr.widened_floats, sizeof(float)) : NULL;
        pr.ids = pr.widened_floats ? (uint32_t *)mfm__alloc((uint64_t)pr.n_workers * info.max_row_nnz, sizeof(uint32_t)) : NULL;
    }
    st = ones && pr.scratch && pr.prob && pr.scaled && ((pr.widened && pr.ids) || !pr.widened_floats) ? mfm__pool_start(&pool, pr.n_workers, err)
                                       : mfm__fail(err, MFM_ERR_OUT_OF_MEMORY, "out of memory for prediction buffers");
    if (st == MFM_OK) {
        for (r = 0; r < info.max_row_nnz; r++) ones[r] = 1.0f;
        mfm__pool_run(&pool, mfm__predict_task, &pr);
        mfm__pool_stop(&pool);
    }
    if (!on_stack) {
        MFM_FREE(ones);
        MFM_FREE(pr.scratch);
        MFM_FREE(pr.prob);
        MFM_FREE(pr.scaled);
        MFM_FREE(pr.widened);
        MFM_FREE(pr.ids);
    }
    return st == MFM_OK ? mfm__ok(err) : st;
}

MFMDEF mfm_status mfm_predict(const mfm_model *m, const mfm_csr *d, mfm_output kind, float *out, size_t capacity, mfm_error *err) {
    return mfm__predict(m, d, kind, out, capacity, 1, err);
}

/* ============================================================================================
   >>metrics  Logloss, AUC (exact with ties), RMSE, accuracy
   ============================================================================================ */

static double mfm__clip(double p) { return p < 1e-15 ? 1e-15 : p > 1 - 1e-15 ? 1 - 1e-15 : p; }

MFMDEF double mfm_logloss(const float *labels, const float *probabilities, size_t n) {
    double total = 0;
    size_t i;
    if (n == 0 || !labels || !probabilities) return NAN;
    for (i = 0; i < n; i++) {
        double p = mfm__clip(probabilities[i]), y = labels[i];
        total -= y * log(p) + (1 - y) * log(1 - p);
    }
    return total / (double)n;
}

MFMDEF double mfm_rmse(const float *labels, const float *predictions, size_t n) {
    double total = 0;
    size_t i;
    if (n == 0 || !labels || !predictions) return NAN;
    for (i = 0; i < n; i++) {
        double e = (double)predictions[i] - labels[i];
        total += e * e;
    }
    return sqrt(total / (double)n);
}

typedef struct mfm__scored {
    float score;
    float label;
} mfm__scored;

static int mfm__by_score(const void *a, const void *b) {
    float x = ((const mfm__scored *)a)->score, y = ((const mfm__scored *)b)->score;
    return (x > y) - (x < y);
}

/* Mann-Whitney: the mean rank of the positives, equal scores sharing their average rank. Positive
   means label > 0.5. NaN when a class is absent, a score or label is NaN (it has no rank, and
   no class), an array is NULL, or memory is short. */
MFMDEF double mfm_auc(const float *labels, const float *scores, size_t n) {
    mfm__scored *s;
    double positives = 0, rank_sum = 0, negatives;
    size_t i, j;
    if (n == 0 || !labels || !scores) return NAN;
    for (i = 0; i < n; i++)
        if (scores[i] != scores[i] || labels[i] != labels[i]) return NAN;
    if (!(s = (mfm__scored *)mfm__alloc(n, sizeof *s))) return NAN;
    for (i = 0; i < n; i++) {
        s[i].score = scores[i];
        s[i].label = labels[i];
    }
    qsort(s, n, sizeof *s, mfm__by_score);
    for (i = 0; i < n; i = j) {
        double in_group = 0;
        for (j = i; j < n && s[j].score == s[i].score; j++) in_group += s[j].label > 0.5f;
        rank_sum += in_group * 0.5 * (double)(i + 1 + j); /* ranks i+1..j average to (i+1+j)/2 */
        positives += in_group;
    }
    MFM_FREE(s);
    negatives = (double)n - positives;
    if (positives == 0 || negatives == 0) return NAN;
    return (rank_sum - positives * (positives + 1) / 2) / (positives * negatives);
}

/* The metrics of rows whose labels are in d, from their scores (n_rows x C). */
static mfm_status mfm__score_metrics(const mfm_model *m, const mfm_csr *d, const float *scores, mfm_metrics *out, mfm_error *err) {
    const int multiclass = m->params.task == MFM_TASK_MULTICLASS;
    const uint32_t C = m->n_classes;
    const uint64_t n = d->n_rows;
    double *prob = (double *)mfm__alloc(C, sizeof(double)), loss = 0, hits = 0;
    uint64_t r;
    if (!prob) return mfm__fail(err, MFM_ERR_OUT_OF_MEMORY, "out of memory for the metrics");
    out->n_rows = n;
    if (m->params.task == MFM_TASK_REGRESSION) {
        out->rmse = mfm_rmse(d->labels, scores, (size_t)n);
    } else {
        for (r = 0; r < n; r++) {
            const float *s = scores + r * C;
            uint32_t y = (uint32_t)d->labels[r], best = 0, c;
            if (multiclass) {
                for (c = 1; c < C; c++)
                    if (s[c] > s[best]) best = c;
                mfm__softmax(s, C, prob);
                loss -= log(mfm__clip(prob[y]));
            } else {
                double p = mfm__clip(mfm__sigmoid(s[0]));
                best = s[0] >= 0;
                loss -= y ? log(p) : log(1 - p);
            }
            hits += best == y;
        }
        out->logloss = loss / (double)n;
        out->accuracy = hits / (double)n;
        if (!multiclass) out->auc = mfm_auc(d->labels, scores, (size_t)n);
    }
    MFM_FREE(prob);
    return MFM_OK;
}

/* mfm_evaluate, mfm_predict_evaluate and mfm_gpu_predict_evaluate: the scores of `shape`'s rows
   from the CPU (m, or the GPU that its backend names when allow_gpu) or from a GPU copy (gm),
   then the metrics and, with `outputs`, the outputs of `kind` from those scores. */
static mfm_status mfm__predict_evaluate(const mfm_model *shape, const mfm_model *m, mfm_gpu_model *gm, const mfm_csr *d, int outputs, mfm_output kind,
                                        float *out, size_t capacity, mfm_metrics *metrics, int allow_gpu, const char *fn, mfm_error *err) {
    mfm__data_info info;
    uint32_t n_classes = shape->n_classes;
    const uint64_t C = shape->n_classes;
    mfm_status st;
    float *scores;
    double *prob;
    uint64_t r, n;
    metrics->n_rows = 0;
    metrics->logloss = metrics->auc = metrics->accuracy = metrics->rmse = NAN;
    if (outputs && (st = mfm__check_kind(shape, &kind, fn, err)) != MFM_OK) return st;
    if ((st = mfm__check_csr(d, shape->params.model != MFM_MODEL_FM, shape->params.n_threads, &info, err)) != MFM_OK) return st;
    if ((st = mfm__check_shape(shape, d, &info, err)) != MFM_OK) return st;
    if (outputs && (st = mfm__check_room(shape, d->n_rows, kind, out, capacity, fn, err)) != MFM_OK) return st;
    if ((st = mfm__check_targets(shape->params.task, d, &n_classes, 0, err)) != MFM_OK) return st;
    n = metrics->n_rows = d->n_rows;
    if (n == 0) return mfm__ok(err);
    scores = (float *)mfm__alloc(n * C, sizeof(float));
    prob = (double *)mfm__alloc(C, sizeof(double));
    if (!scores || !prob)
        st = mfm__fail(err, MFM_ERR_OUT_OF_MEMORY, "out of memory for %" PRIu64 " scores", n * C);
    else
        st = m ? mfm__predict(m, d, MFM_OUTPUT_SCORE, scores, (size_t)(n * C), allow_gpu, err) : mfm_gpu_predict(gm, d, MFM_OUTPUT_SCORE, scores, (size_t)(n * C), err);
    if (st == MFM_OK) st = mfm__score_metrics(shape, d, scores, metrics, err);
    for (r = 0; r < n && st == MFM_OK && outputs; r++) mfm__row_output(shape, kind, scores + r * C, out + r * mfm_output_width(shape, kind), prob);
    MFM_FREE(scores);
    MFM_FREE(prob);
    return st == MFM_OK ? mfm__ok(err) : st;
}

static mfm_status mfm__evaluate(const mfm_model *m, const mfm_csr *d, mfm_metrics *out, int allow_gpu, mfm_error *err) {
    if (!m || !out) return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "mfm_evaluate: the model or the output is NULL");
    return mfm__predict_evaluate(m, m, NULL, d, 0, MFM_OUTPUT_SCORE, NULL, 0, out, allow_gpu, "mfm_evaluate", err);
}

MFMDEF mfm_status mfm_evaluate(const mfm_model *m, const mfm_csr *d, mfm_metrics *out, mfm_error *err) { return mfm__evaluate(m, d, out, 1, err); }

MFMDEF mfm_status mfm_predict_evaluate(const mfm_model *m, const mfm_csr *d, mfm_output kind, float *out, size_t capacity, mfm_metrics *metrics,
                                       mfm_error *err) {
    if (!m || !metrics) return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "mfm_predict_evaluate: the model or the metrics are NULL");
    return mfm__predict_evaluate(m, m, NULL, d, 1, kind, out, capacity, metrics, 1, "mfm_predict_evaluate", err);
}

/* ============================================================================================
   >>inspect  The strongest learned interactions and FM's bi-interaction vector
   ============================================================================================ */

/* x ranks before y: stronger, or as strong with the smaller (feature, field) pair. */
static int mfm__ranks_before(const mfm_interaction *x, const mfm_interaction *y) {
    const uint32_t kx[4] = {x->feature_a, x->field_a, x->feature_b, x->field_b}, ky[4] = {y->feature_a, y->field_a, y->feature_b, y->field_b};
    int i;
    if (x->strength != y->strength) return x->strength > y->strength;
    for (i = 0; i < 4; i++)
        if (kx[i] != ky[i]) return kx[i] < ky[i];
    return 0;
}

static int mfm__by_rank(const void *a, const void *b) {
    const mfm_interaction *x = (const mfm_interaction *)a, *y = (const mfm_interaction *)b;
    return mfm__ranks_before(x, y) ? -1 : mfm__ranks_before(y, x) ? 1 : 0;
}

/* Keeps the n best of everything offered in heap[0..*count), the weakest at the root. */
static void mfm__offer(mfm_interaction *heap, size_t n, size_t *count, const mfm_interaction *x) {
    size_t i;
    if (*count < n) { /* sift up: a parent never ranks before its children */
        for (i = (*count)++; i > 0 && mfm__ranks_before(&heap[(i - 1) / 2], x); i = (i - 1) / 2) heap[i] = heap[(i - 1) / 2];
        heap[i] = *x;
        return;
    }
    if (!mfm__ranks_before(x, &heap[0])) return;
    for (i = 0;;) { /* sift down from the root */
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && mfm__ranks_before(&heap[c], &heap[c + 1])) c++; /* the weaker child */
        if (!mfm__ranks_before(x, &heap[c])) break;
        heap[i] = heap[c];
        i = c;
    }
    heap[i] = *x;
}

typedef struct mfm__slot {
    uint32_t feature, field;
} mfm__slot;

static int mfm__by_slot(const void *a, const void *b) {
    const mfm__slot *x = (const mfm__slot *)a, *y = (const mfm__slot *)b;
    if (x->feature != y->feature) return x->feature < y->feature ? -1 : 1;
    return (x->field > y->field) - (x->field < y->field);
}

MFMDEF mfm_status mfm_top_interactions(const mfm_model *m, const mfm_csr *d, uint32_t cls, size_t n, mfm_interaction *out, size_t *n_found,
                                       mfm_error *err) {
    const int fm = m && m->params.model == MFM_MODEL_FM;
    mfm__data_info info;
    mfm__slot *slots;
    mfm_status st;
    uint64_t n_slots = 0, i, j;
    if (!m || !n_found || (n && !out)) return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "mfm_top_interactions: the model, the output or n_found is NULL");
    *n_found = 0;
    if (cls >= m->n_classes)
        return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "mfm_top_interactions: class %u does not exist: the model has %u class(es)", (unsigned)cls,
                         (unsigned)m->n_classes);
    if (m->params.linear_only) return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "mfm_top_interactions: a linear model learns no interactions");
    if (m->t[MFM_TENSOR_V].halves) return mfm__half_refused("mfm_top_interactions", err);
    if (!d && !fm)
        return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "mfm_top_interactions: a %s model needs data to know which field each feature belongs to",
                         mfm__model_names[m->params.model]);
    if (d && ((st = mfm__check_csr(d, !fm, m->params.n_threads, &info, err)) != MFM_OK || (st = mfm__check_shape(m, d, &info, err)) != MFM_OK)) return st;
    slots = (mfm__slot *)mfm__alloc(d ? info.nnz : m->n_features, sizeof(mfm__slot));
    if (!slots) return mfm__fail(err, MFM_ERR_OUT_OF_MEMORY, "out of memory for the features to scan");
    if (!d) {
        for (i = 0; i < m->n_features; i++) slots[i].feature = (uint32_t)i, slots[i].field = 0;
        n_slots = m->n_features;
    } else if (info.nnz) { /* the distinct (feature, field) pairs of the data; FM ignores fields */
        for (i = 0; i < info.nnz; i++) slots[i].feature = d->features[i], slots[i].field = fm ? 0 : d->fields[i];
        qsort(slots, (size_t)info.nnz, sizeof *slots, mfm__by_slot);
        for (i = 0; i < info.nnz; i++)
            if (n_slots == 0 || mfm__by_slot(&slots[n_slots - 1], &slots[i]) != 0) slots[n_slots++] = slots[i];
    }
    for (i = 0; i < n_slots && n; i++)
        for (j = i + 1; j < n_slots; j++) {
            const mfm__slot *a = &slots[i], *b = &slots[j];
            mfm_interaction x;
            if (a->feature == b->feature) continue; /* a feature seen under two fields is no pair */
            if (m->params.model == MFM_MODEL_FFM)
                x.value = mfm__dot(mfm__ffm_slot(m, cls, a->feature, b->field), mfm__ffm_slot(m, cls, b->feature, a->field), m->k);
            else
                x.value = mfm__dot(mfm__block(m, MFM_TENSOR_V, cls, a->feature), mfm__block(m, MFM_TENSOR_V, cls, b->feature), m->k) *
                          (fm ? 1.0f : mfm__fwfm_r(m, cls, a->field, b->field));
            x.strength = fabsf(x.value);
            x.feature_a = a->feature, x.field_a = a->field, x.feature_b = b->feature, x.field_b = b->field;
            mfm__offer(out, n, n_found, &x);
        }
    if (*n_found) qsort(out, *n_found, sizeof *out, mfm__by_rank); /* qsort wants a real pointer even for 0 */
    MFM_FREE(slots);
    return mfm__ok(err);
}

MFMDEF mfm_status mfm_bi_interaction(const mfm_model *m, const mfm_csr *d, float *out, size_t capacity, mfm_error *err) {
    mfm__data_info info;
    mfm_status st;
    float *ones, *scaled;
    uint64_t r, need;
    uint32_t c, a;
    int t;
    if (!m || !d) return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "mfm_bi_interaction: the model or the data is NULL");
    if (m->params.model != MFM_MODEL_FM || m->params.linear_only)
        return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "mfm_bi_interaction: the bi-interaction vector belongs to FM models with pairs, not to a%s %s",
                         m->params.linear_only ? " linear" : "n", m->params.linear_only ? "model" : mfm__model_names[m->params.model]);
    if (m->t[MFM_TENSOR_V].halves) return mfm__half_refused("mfm_bi_interaction", err);
    if ((st = mfm__check_csr(d, 0, m->params.n_threads, &info, err)) != MFM_OK || (st = mfm__check_shape(m, d, &info, err)) != MFM_OK) return st;
    need = d->n_rows * m->n_classes * (uint64_t)m->k;
    if ((uint64_t)capacity < need || (need && !out))
        return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "mfm_bi_interaction: the output holds %" PRIu64 " values but %" PRIu64 " rows need %" PRIu64,
                         (uint64_t)capacity, d->n_rows, need);
    ones = (float *)mfm__alloc(info.max_row_nnz, sizeof(float));
    scaled = (float *)mfm__alloc(info.max_row_nnz, sizeof(float));
    if (!ones || !scaled) {
        MFM_FREE(ones);
        MFM_FREE(scaled);
        return mfm__fail(err, MFM_ERR_OUT_OF_MEMORY, "out of memory for bi-interaction buffers");
    }
    for (a = 0; a < info.max_row_nnz; a++) ones[a] = 1.0f;
    for (r = 0; r < d->n_rows; r++) {
        mfm__row row = mfm__get_row(m, d, r, ones, scaled);
        for (c = 0; c < m->n_classes; c++) {
            float *bi = out + (r * m->n_classes + c) * (uint64_t)m->k;
            for (t = 0; t < m->k; t++) {
                float sum = 0, sq = 0;
                for (a = 0; a < row.z; a++) {
                    float vx = mfm__block(m, MFM_TENSOR_V, c, row.feat[a])[t] * row.x[a];
                    sum += vx;
                    sq += vx * vx;
                }
                bi[t] = 0.5f * (sum * sum - sq);
            }
        }
    }
    MFM_FREE(ones);
    MFM_FREE(scaled);
    return mfm__ok(err);
}

/* ============================================================================================
   >>model-files  Saving and loading models: header, sections of parameters and state, checksums
   ============================================================================================ */

/* Format 2 (docs/FORMATS.md), little-endian:
   - "MFMMODEL", the fields of mfm__model_header in table order (u32, or u64/f64), their
     checksum, the explicit class weights (f32), zeros up to a multiple of 4096 bytes;
   - the sections, each at a multiple of 4096 bytes and padded with zeros to the next: every
     parameter table laid out as a model opened for prediction holds it in memory (blocks of
     `stride` floats, class by class; FM's and FwFM's w inside V's blocks where they share a
     line), then, when saved, the optimizer state (tensor by tensor, class by class, slot by
     slot, each slot mfm_tensor_size floats);
   - the directory (u32 count, u32 0, then per section u32 kind, tensor, stride, flags and u64
     offset, bytes, checksum), and last the checksum of the header part and the directory.
   A section's checksum is the hash of the hashes of its 1 MB chunks, padding included, so that
   threads verify a big file at memory speed, and every byte of the file is under a checksum.
   A model opened for prediction (mfm_model_map, mfm_model_load_parameters) maps the parameter sections in place where
   this build lays its tables out the same way, and never reads the state. Format 1 (every slot
   of every tensor one after another, one checksum at the end) still loads. */
typedef struct mfm__model_header {
    uint32_t format_version, endian_mark, writer_version, flags;
    uint32_t model, task, optimizer, k, n_features, n_fields, n_classes, n_slots;
    uint32_t linear_only, class_weight, n_class_weights, n_epochs, batch_size, n_threads;
    uint32_t normalize_rows, pairs_only, patience, metric, keep_last;
    uint64_t epochs_trained, seed;
    double learning_rate, l2_linear, l2_factors, l1_linear, l1_factors, init_scale;
    double adam_beta1, adam_beta2, adam_epsilon, ftrl_beta, label_smoothing;
    double adagrad_init, validation_fraction, min_delta;
    uint64_t file_bytes, directory_offset; /* format 2 on */
} mfm__model_header;

#define MFM__FIELD(name) {offsetof(mfm__model_header, name), sizeof(((mfm__model_header *)0)->name)}
static const struct {
    size_t offset, size;
} mfm__model_fields[] = {
    MFM__FIELD(format_version), MFM__FIELD(endian_mark),     MFM__FIELD(writer_version), MFM__FIELD(flags),         MFM__FIELD(model),
    MFM__FIELD(task),           MFM__FIELD(optimizer),       MFM__FIELD(k),              MFM__FIELD(n_features),    MFM__FIELD(n_fields),
    MFM__FIELD(n_classes),      MFM__FIELD(n_slots),         MFM__FIELD(linear_only),    MFM__FIELD(class_weight),  MFM__FIELD(n_class_weights),
    MFM__FIELD(n_epochs),       MFM__FIELD(batch_size),      MFM__FIELD(n_threads),      MFM__FIELD(epochs_trained), MFM__FIELD(seed),
    MFM__FIELD(learning_rate),  MFM__FIELD(l2_linear),       MFM__FIELD(l2_factors),     MFM__FIELD(l1_linear),     MFM__FIELD(l1_factors),
    MFM__FIELD(init_scale),     MFM__FIELD(adam_beta1),      MFM__FIELD(adam_beta2),     MFM__FIELD(adam_epsilon),  MFM__FIELD(ftrl_beta),
    MFM__FIELD(label_smoothing), MFM__FIELD(normalize_rows),  MFM__FIELD(pairs_only),     MFM__FIELD(patience),      MFM__FIELD(metric),
    MFM__FIELD(keep_last),      MFM__FIELD(adagrad_init),    MFM__FIELD(validation_fraction), MFM__FIELD(min_delta), MFM__FIELD(file_bytes),
    MFM__FIELD(directory_offset)};
#undef MFM__FIELD
#define MFM__N_MODEL_FIELDS(version) (sizeof mfm__model_fields / sizeof mfm__model_fields[0] - ((version) < 2 ? 2 : 0))
enum { MFM__MODEL_STATE = 1 };

/* The sections of a format-2 file. */
enum { MFM__SECTION_PARAMS = 1, MFM__SECTION_STATE = 2 };
enum { MFM__SECTION_W_INSIDE = 1, /* a V section's flags: its blocks hold w right after v's k values; */
       MFM__SECTION_HALF = 2 };    /* its values are IEEE float16 (mfm_model_save_half; no state then) */
#define MFM__SECTION_ALIGN 4096u
#define MFM__HASH_CHUNK ((uint64_t)1 << 20)
#define MFM__MAX_SECTIONS (MFM_TENSOR_COUNT + 1)
#define MFM__SECTION_ENTRY_BYTES 40u

typedef struct mfm__section {
    uint32_t kind, tensor, stride, flags;
    uint64_t offset, bytes, checksum; /* bytes: without the padding; the checksum covers it */
} mfm__section;

typedef struct mfm__model_layout {
    mfm__section sec[MFM__MAX_SECTIONS];
    int n_sections;
    int half;            /* V's section is float16 */
    uint64_t header_end; /* where the first section starts (the directory, when there is none) */
} mfm__model_layout;

/* The magic and the fields; from format 2 on, then the checksum of those. */
static size_t mfm__model_fields_bytes(uint32_t version) {
    size_t i, n = 8;
    for (i = 0; i < MFM__N_MODEL_FIELDS(version); i++) n += mfm__model_fields[i].size;
    return n;
}

static size_t mfm__model_header_bytes(uint32_t version) { return mfm__model_fields_bytes(version) + (version >= 2 ? 8 : 0); }

static uint64_t mfm__align_section(uint64_t at) { return (at + MFM__SECTION_ALIGN - 1) / MFM__SECTION_ALIGN * MFM__SECTION_ALIGN; }

/* A section's bytes with their padding: what its checksum covers. */
static uint64_t mfm__section_span(const mfm__section *s) { return mfm__align_section(s->bytes); }

/* A section's checksum, as it is written: chunk by chunk, each chunk's hash hashed in turn. */
typedef struct mfm__section_hash {
    mfm__hash all, chunk;
    uint64_t in_chunk;
} mfm__section_hash;

static void mfm__section_hash_init(mfm__section_hash *s) {
    mfm__hash_init(&s->all);
    mfm__hash_init(&s->chunk);
    s->in_chunk = 0;
}

static void mfm__section_hash_fold(mfm__hash *all, uint64_t chunk_hash) {
    unsigned char le[8];
    mfm__store_le(le, chunk_hash, 8);
    mfm__hash_update(all, le, 8);
}

static void mfm__section_hash_update(mfm__section_hash *s, const unsigned char *p, uint64_t n) {
    while (n) {
        const uint64_t take = MFM__HASH_CHUNK - s->in_chunk < n ? MFM__HASH_CHUNK - s->in_chunk : n;
        mfm__hash_update(&s->chunk, p, (size_t)take);
        p += take, n -= take;
        if ((s->in_chunk += take) == MFM__HASH_CHUNK) {
            mfm__section_hash_fold(&s->all, mfm__hash_final(&s->chunk));
            mfm__hash_init(&s->chunk);
            s->in_chunk = 0;
        }
    }
}

static uint64_t mfm__section_hash_final(mfm__section_hash *s) {
    if (s->in_chunk) mfm__section_hash_fold(&s->all, mfm__hash_final(&s->chunk));
    s->in_chunk = 0;
    return mfm__hash_final(&s->all);
}

/* The sections of a model's file and where they lie, from its shape: its parameter tables as
   mfm__shape_tables lays them out with one slot, then the state when saved. Returns the file's
   size (header part, sections, directory, checksum). */
static uint64_t mfm__plan_sections(const mfm_params *p, uint32_t n_features, uint32_t n_fields, uint32_t n_classes, int state_slots, int with_state,
                                   int half, uint64_t header_part, mfm__model_layout *L) {
    mfm__table tab[MFM_TENSOR_COUNT];
    uint64_t at = mfm__align_section(header_part), state_floats = 0;
    int t;
    mfm__shape_tables(p, n_features, n_fields, 1, tab);
    if (half && p->model == MFM_MODEL_FFM && !p->linear_only) { /* padded records, w inside (mfm__half_record) */
        tab[MFM_TENSOR_V].stride = (uint32_t)(tab[MFM_TENSOR_V].feature_stride = mfm__half_record(n_fields, p->k)), tab[MFM_TENSOR_V].n_blocks = n_features;
        tab[MFM_TENSOR_W].guest = 1;
    }
    memset(L, 0, sizeof *L);
    L->header_end = at;
    for (t = 0; t < MFM_TENSOR_COUNT; t++) {
        mfm__section *s;
        state_floats += tab[t].n_blocks * tab[t].state_len * n_classes * (uint64_t)state_slots;
        if (tab[t].guest || tab[t].n_blocks * tab[t].len == 0) continue;
        s = &L->sec[L->n_sections++];
        s->kind = MFM__SECTION_PARAMS, s->tensor = (uint32_t)t, s->stride = (uint32_t)tab[t].stride; /* FFM's records: the record */
        s->flags = t == MFM_TENSOR_V && tab[MFM_TENSOR_W].guest ? MFM__SECTION_W_INSIDE : 0;
        s->flags |= t == MFM_TENSOR_V && half ? MFM__SECTION_HALF : 0;
        L->half |= (s->flags & MFM__SECTION_HALF) != 0;
        s->offset = at;
        s->bytes = (s->flags & MFM__SECTION_HALF ? 2 : 4) * n_classes * tab[t].n_blocks * tab[t].stride;
        at += mfm__section_span(s);
    }
    if (with_state && state_floats) {
        mfm__section *s = &L->sec[L->n_sections++];
        s->kind = MFM__SECTION_STATE, s->offset = at, s->bytes = 4 * state_floats;
        at += mfm__section_span(s);
    }
    return at + 8 + MFM__SECTION_ENTRY_BYTES * (uint64_t)L->n_sections + 8;
}

static void mfm__header_from_model(const mfm_model *m, int with_state, mfm__model_header *h) {
    const mfm_params *p = &m->params;
    memset(h, 0, sizeof *h);
    h->format_version = MFM_MODEL_FILE_VERSION;
    h->endian_mark = MFM__ENDIAN_MARK;
    h->writer_version = MFM_VERSION_NUMBER;
    h->flags = with_state ? MFM__MODEL_STATE : 0;
    h->model = (uint32_t)p->model, h->task = (uint32_t)p->task, h->optimizer = (uint32_t)p->optimizer, h->k = (uint32_t)m->k;
    h->n_features = m->n_features, h->n_fields = m->n_fields, h->n_classes = m->n_classes;
    h->n_slots = 1u + (uint32_t)mfm__state_slots(p->optimizer);
    h->linear_only = (uint32_t)p->linear_only, h->class_weight = (uint32_t)p->class_weight;
    h->n_class_weights = m->class_weight_values ? (p->task == MFM_TASK_BINARY ? 2 : m->n_classes) : 0;
    h->n_epochs = (uint32_t)p->n_epochs, h->batch_size = (uint32_t)p->batch_size, h->n_threads = (uint32_t)p->n_threads;
    h->epochs_trained = m->epochs_trained, h->seed = p->seed;
    h->learning_rate = p->learning_rate, h->l2_linear = p->l2_linear, h->l2_factors = p->l2_factors;
    h->l1_linear = p->l1_linear, h->l1_factors = p->l1_factors, h->init_scale = p->init_scale;
    h->adam_beta1 = p->adam_beta1, h->adam_beta2 = p->adam_beta2, h->adam_epsilon = p->adam_epsilon;
    h->ftrl_beta = p->ftrl_beta, h->label_smoothing = p->label_smoothing;
    h->normalize_rows = p->normalize_rows > 0, h->pairs_only = (uint32_t)p->pairs_only, h->patience = (uint32_t)p->patience;
    h->metric = (uint32_t)p->metric, h->keep_last = (uint32_t)p->keep_last;
    h->adagrad_init = p->adagrad_init, h->validation_fraction = p->validation_fraction, h->min_delta = p->min_delta;
}

static mfm_params mfm__params_from_header(const mfm__model_header *h) {
    mfm_params p;
    memset(&p, 0, sizeof p);
    p.model = (mfm_model_type)h->model, p.task = (mfm_task)h->task, p.optimizer = (mfm_optimizer)h->optimizer, p.k = (int)h->k;
    p.n_classes = (int)h->n_classes, p.n_epochs = (int)h->n_epochs, p.batch_size = (int)h->batch_size, p.n_threads = (int)h->n_threads;
    p.learning_rate = h->learning_rate, p.l2_linear = h->l2_linear, p.l2_factors = h->l2_factors;
    p.l1_linear = h->l1_linear, p.l1_factors = h->l1_factors, p.init_scale = h->init_scale;
    p.adam_beta1 = h->adam_beta1, p.adam_beta2 = h->adam_beta2, p.adam_epsilon = h->adam_epsilon;
    p.ftrl_beta = h->ftrl_beta, p.label_smoothing = h->label_smoothing;
    p.class_weight = (mfm_class_weight)h->class_weight, p.seed = h->seed, p.linear_only = (int)h->linear_only;
    p.normalize_rows = (int)h->normalize_rows, p.pairs_only = (int)h->pairs_only, p.patience = (int)h->patience;
    p.metric = (mfm_metric)h->metric, p.keep_last = (int)h->keep_last;
    p.adagrad_init = h->adagrad_init, p.validation_fraction = h->validation_fraction, p.min_delta = h->min_delta;
    /* Files written before these three defaulted to nonzero values hold +0 for a literal zero:
       read it as MFM_ZERO, so that resolving the params again keeps it (none written since
       holds +0 there). */
    if (p.l2_linear == 0) p.l2_linear = MFM_ZERO;
    if (p.l2_factors == 0) p.l2_factors = MFM_ZERO;
    if (p.adagrad_init == 0) p.adagrad_init = MFM_ZERO;
    if (!p.normalize_rows) p.normalize_rows = MFM_OFF; /* the file holds 1 for on, 0 for off */
    return p;
}

/* Format 1: floats in the tensor part of a file: per tensor, class and saved slot, one tensor's worth. */
static uint64_t mfm__model_payload_floats(const mfm__model_header *h, const uint64_t tensor_floats[MFM_TENSOR_COUNT]) {
    uint64_t total = h->n_class_weights, slots = h->flags & MFM__MODEL_STATE ? h->n_slots : 1;
    int t;
    for (t = 0; t < MFM_TENSOR_COUNT; t++) total += tensor_floats[t] * h->n_classes * slots;
    return total;
}

#define MFM__SAVE_FLOATS 16384

/* A model file holds finite values only (the loader refuses others): only a fit that diverged
   leaves a model that holds any, and such a model is refused before a byte is written. */
static mfm_status mfm__check_savable(const mfm_model *m, int with_state, const char *fn, mfm_error *err) {
    char what[160];
    if (with_state && m->for_prediction)
        return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT,
                         "%s: the model was opened for prediction (mfm_model_map, mfm_model_load_parameters) and holds no optimizer state; save it without (with_state = 0), "
                         "or open the file with mfm_model_load",
                         fn);
    if (!mfm__tables_finite(m) && mfm__describe_not_finite(m, with_state ? m->n_slots : 1, what, sizeof what))
        return mfm__fail(err, MFM_ERR_DIVERGED, "%s: %s, a value that is not finite (training diverged); a model file holds finite values only, so nothing was written",
                         fn, what);
    return MFM_OK;
}

/* Floats as the file stores them (little-endian), in place. */
static void mfm__floats_to_le(float *x, uint64_t n) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    uint64_t i;
    for (i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, x + i, 4);
        mfm__store_le((unsigned char *)(x + i), u, 4);
    }
#else
    (void)x, (void)n;
#endif
}

/* Bytes of the header part or the directory to the file and into their checksum. */
static void mfm__emit_head(mfm__writer *w, mfm__hash *head, const void *p, size_t n) {
    mfm__write(w, p, n);
    mfm__hash_update(head, p, n);
}

/* Bytes of one section to the file and its checksum. */
static void mfm__emit(mfm__writer *w, mfm__section_hash *sh, const void *p, uint64_t n) {
    mfm__write(w, p, (size_t)n);
    mfm__section_hash_update(sh, (const unsigned char *)p, n);
}

/* buf's `used` floats out, little-endian: as floats, or (half) rounded to IEEE float16 in place. */
static void mfm__emit_floats(mfm__writer *w, mfm__section_hash *sh, float *buf, size_t *used, int half) {
    if (half) {
        unsigned char *out = (unsigned char *)buf;
        size_t i;
        for (i = 0; i < *used; i++) mfm__store_le(out + 2 * i, mfm__float_to_half(buf[i]), 2); /* writes behind what it reads */
        mfm__emit(w, sh, buf, 2 * (uint64_t)*used);
    } else {
        mfm__floats_to_le(buf, *used);
        mfm__emit(w, sh, buf, 4 * (uint64_t)*used);
    }
    *used = 0;
}

/* One section's content: a parameter table block by block in the section's layout (zeros
   between blocks, w after v where it lies inside; a float16 FFM file's records of F blocks and
   w), or the state slot by slot. */
static void mfm__write_section(const mfm_model *m, mfm__writer *w, mfm__section_hash *sh, const mfm__section *s, float *buf) {
    size_t used = 0;
    uint32_t c;
    int t, slot;
    for (t = 0; t < MFM_TENSOR_COUNT; t++) {
        const mfm__table *tab = &m->t[t];
        const uint64_t per_record = s->kind == MFM__SECTION_PARAMS && (s->flags & MFM__SECTION_W_INSIDE) ? tab->per_feature : 1; /* blocks a record holds */
        if (s->kind == MFM__SECTION_PARAMS && (uint32_t)t != s->tensor) continue;
        for (c = 0; c < m->n_classes; c++)
            for (slot = s->kind == MFM__SECTION_PARAMS ? 0 : 1; slot < (s->kind == MFM__SECTION_PARAMS ? 1 : m->n_slots); slot++) {
                const uint32_t width = s->kind == MFM__SECTION_PARAMS ? s->stride : tab->state_len;
                uint64_t b;
                for (b = 0; b < tab->n_blocks; b += per_record) {
                    float *rec = buf + used;
                    memset(rec, 0, width * sizeof(float));
                    if (slot == 0)
                        mfm__block_params(m, (mfm_tensor)t, c, b, per_record, rec);
                    else
                        memcpy(rec, mfm__block_slot(m, (mfm_tensor)t, c, b, slot), tab->state_len * sizeof(float));
                    if (s->flags & MFM__SECTION_W_INSIDE) mfm__block_params(m, MFM_TENSOR_W, c, b / per_record, 1, rec + per_record * (uint64_t)m->k);
                    if ((used += width) >= MFM__SAVE_FLOATS) mfm__emit_floats(w, sh, buf, &used, (s->flags & MFM__SECTION_HALF) != 0);
                }
            }
    }
    mfm__emit_floats(w, sh, buf, &used, (s->flags & MFM__SECTION_HALF) != 0);
}

static mfm_status mfm__model_write(const mfm_model *m, mfm__writer *w, int with_state, int half, mfm_error *err) {
    static const unsigned char zeros[MFM__SECTION_ALIGN] = {0};
    unsigned char header[512], entry[MFM__SECTION_ENTRY_BYTES];
    const size_t header_bytes = mfm__model_header_bytes(MFM_MODEL_FILE_VERSION);
    float *buf;
    mfm__model_header h;
    mfm__model_layout L;
    mfm__hash head; /* the header part and the directory */
    uint64_t at, widest = 64 + (uint64_t)m->k * 2; /* floats of the widest record a section writes */
    size_t i;
    int s;
    mfm__header_from_model(m, with_state, &h);
    h.file_bytes = mfm__plan_sections(&m->params, m->n_features, m->n_fields, m->n_classes, (int)h.n_slots - 1, with_state, half,
                                      header_bytes + 4ull * h.n_class_weights, &L);
    h.directory_offset = L.n_sections ? L.sec[L.n_sections - 1].offset + mfm__section_span(&L.sec[L.n_sections - 1]) : L.header_end;
    memcpy(header, MFM__MODEL_MAGIC, 8);
    for (i = 0, at = 8; i < MFM__N_MODEL_FIELDS(MFM_MODEL_FILE_VERSION); i++) {
        uint64_t v = 0;
        if (mfm__model_fields[i].size == 4) {
            uint32_t u;
            memcpy(&u, (const char *)&h + mfm__model_fields[i].offset, 4);
            v = u;
        } else {
            memcpy(&v, (const char *)&h + mfm__model_fields[i].offset, 8); /* u64 or the bits of an f64 */
        }
        mfm__store_le(header + at, v, (int)mfm__model_fields[i].size);
        at += mfm__model_fields[i].size;
    }
    mfm__store_le(header + at, mfm__checksum(header, at), 8); /* so that a damaged header is named as such */
    for (s = 0; s < L.n_sections; s++)
        if (L.sec[s].stride > widest) widest = L.sec[s].stride; /* a float16 FFM file's records */
    if (!(buf = (float *)mfm__alloc(MFM__SAVE_FLOATS + widest, sizeof(float))))
        return mfm__fail(err, MFM_ERR_OUT_OF_MEMORY, "out of memory saving a model");
    w->unhashed = 1; /* the checksums are the sections' and the header's own */
    mfm__writer_in_large_writes(w);
    mfm__hash_init(&head);
    mfm__emit_head(w, &head, header, header_bytes);
    for (i = 0; i < h.n_class_weights; i++) {
        unsigned char le[4];
        uint32_t u;
        memcpy(&u, m->class_weight_values + i, 4);
        mfm__store_le(le, u, 4);
        mfm__emit_head(w, &head, le, 4);
    }
    at = header_bytes + 4ull * h.n_class_weights;
    mfm__emit_head(w, &head, zeros, (size_t)(L.header_end - at));
    for (s = 0; s < L.n_sections; s++) {
        mfm__section_hash sh;
        mfm__section_hash_init(&sh);
        mfm__write_section(m, w, &sh, &L.sec[s], buf);
        mfm__emit(w, &sh, zeros, mfm__section_span(&L.sec[s]) - L.sec[s].bytes);
        L.sec[s].checksum = mfm__section_hash_final(&sh);
    }
    mfm__store_le(entry, (uint64_t)L.n_sections, 8); /* u32 count, u32 0 */
    mfm__emit_head(w, &head, entry, 8);
    for (s = 0; s < L.n_sections; s++) {
        const mfm__section *x = &L.sec[s];
        mfm__store_le(entry, x->kind, 4), mfm__store_le(entry + 4, x->tensor, 4), mfm__store_le(entry + 8, x->stride, 4);
        mfm__store_le(entry + 12, x->flags, 4), mfm__store_le(entry + 16, x->offset, 8), mfm__store_le(entry + 24, x->bytes, 8);
        mfm__store_le(entry + 32, x->checksum, 8);
        mfm__emit_head(w, &head, entry, MFM__SECTION_ENTRY_BYTES);
    }
    mfm__store_le(entry, mfm__hash_final(&head), 8);
    mfm__write(w, entry, 8);
    MFM_FREE(buf);
    return MFM_OK;
}

/* A checked model into the file at path, through the crash-safe writer. */
static mfm_status mfm__model_save(const mfm_model *m, const char *path, int with_state, int half, mfm_error *err) {
    mfm__writer w;
    mfm_status st;
    if ((st = mfm__writer_open(&w, path, err)) != MFM_OK) return st;
    if ((st = mfm__model_write(m, &w, with_state, half, err)) != MFM_OK) {
        mfm__writer_abort(&w);
        return st;
    }
    return mfm__writer_commit(&w, err);
}

MFMDEF mfm_status mfm_model_save(const mfm_model *m, const char *path, int with_state, mfm_error *err) {
    mfm_status st;
    if (!m || !path) return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "mfm_model_save: the model or the path is NULL");
    if ((st = mfm__check_savable(m, with_state, "mfm_model_save", err)) != MFM_OK) return st;
    return mfm__model_save(m, path, with_state, 0, err);
}

MFMDEF mfm_status mfm_model_write(const mfm_model *m, mfm_output_file *out, int with_state, mfm_error *err) {
    mfm_status st;
    if (!m || !out) return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "mfm_model_write: the model or the output is NULL");
    if (!out->w.f) return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "mfm_model_write: the output was already committed or aborted");
    if ((st = mfm__check_savable(m, with_state, "mfm_model_write", err)) != MFM_OK) return st;
    return mfm__model_write(m, &out->w, with_state, 0, err);
}

/* The first factor (or w, where the file keeps it inside V's records: FM's and FwFM's blocks
   whatever this model's own layout, FFM's always) that float16 cannot hold. */
static int mfm__beyond_half(const mfm_model *m, char *what, size_t size) {
    const int w_inside = !m->params.linear_only && (mfm__guest_stride(&m->params, 1) != 0 || m->params.model == MFM_MODEL_FFM);
    float *v = (float *)mfm__alloc((uint64_t)m->k, sizeof(float)), w;
    uint64_t b;
    uint32_t c, i;
    int found = 0;
    for (c = 0; c < m->n_classes && v && !found; c++) {
        for (b = 0; b < m->t[MFM_TENSOR_V].n_blocks && !found; b++) {
            mfm__block_params(m, MFM_TENSOR_V, c, b, 1, v);
            for (i = 0; i < (uint32_t)m->k && !found; i++)
                if (fabs(v[i]) > 65504.0) {
                    snprintf(what, size, "a factor of block %" PRIu64 " of class %u is %g", b, (unsigned)c, (double)v[i]);
                    found = 1;
                }
        }
        for (b = 0; w_inside && b < m->n_features && !found; b++) {
            mfm__block_params(m, MFM_TENSOR_W, c, b, 1, &w);
            if (fabs(w) > 65504.0) {
                snprintf(what, size, "w of feature %" PRIu64 " of class %u is %g", b, (unsigned)c, (double)w);
                found = 1;
            }
        }
    }
    MFM_FREE(v);
    return found;
}

MFMDEF mfm_status mfm_model_save_half(const mfm_model *m, const char *path, mfm_error *err) {
    char what[160];
    mfm_status st;
    if (!m || !path) return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "mfm_model_save_half: the model or the path is NULL");
    if ((st = mfm__check_savable(m, 0, "mfm_model_save_half", err)) != MFM_OK) return st;
    if (m->params.model == MFM_MODEL_FFM && mfm__half_record(m->n_fields, m->k) > UINT32_MAX)
        return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "mfm_model_save_half: a feature's %u fields x k = %d factors exceed a float16 file's record; nothing was written: save it with mfm_model_save",
                         (unsigned)m->n_fields, m->k);
    if (mfm__beyond_half(m, what, sizeof what))
        return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "mfm_model_save_half: %s, beyond float16's range (65504); nothing was written: save it with mfm_model_save",
                         what);
    return mfm__model_save(m, path, 0, 1, err);
}

/* ---- checking a file: the header, the directory, the sections (in parallel) ---- */

/* Where the first value that is not finite lies in n little-endian floats, or n. */
static uint64_t mfm__first_not_finite(const unsigned char *p, uint64_t n) {
    uint64_t i = 0, j;
    for (; i + 1024 <= n; i += 1024) { /* a branch-free pass a block at a time (a fixed count: vectorized) */
        uint32_t bad = 0;
        for (j = 0; j < 1024; j++) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
            const uint32_t word = mfm__load_le32(p + 4 * (i + j));
#else
            uint32_t word;
            memcpy(&word, p + 4 * (i + j), 4);
#endif
            bad |= (word & 0x7F800000u) == 0x7F800000u ? 1u : 0u;
        }
        if (bad) break; /* the search below finds it */
    }
    for (; i < n; i++)
        if ((mfm__load_le32(p + 4 * i) & 0x7F800000u) == 0x7F800000u) return i;
    return n;
}

/* The same for n little-endian float16 values (exponent all ones: infinity or NaN). */
static uint64_t mfm__first_not_finite_half(const unsigned char *p, uint64_t n) {
    uint64_t i;
    for (i = 0; i < n; i++)
        if ((p[2 * i + 1] & 0x7Cu) == 0x7Cu) return i;
    return n;
}

/* The sections a check covers, cut into 1 MB chunks that threads hash (and scan for values that
   are not finite) on their own; each section's checksum is then folded from its chunks. */
typedef struct mfm__verify_job {
    const unsigned char *b;
    const mfm__section *sec[MFM__MAX_SECTIONS];
    uint64_t first_chunk[MFM__MAX_SECTIONS + 1]; /* section i's chunks: first_chunk[i] .. first_chunk[i + 1] - 1 */
    int n_sections, n_workers;
    uint64_t *chunk_hash, *not_finite_at; /* per chunk; not_finite_at: the section's byte, or UINT64_MAX */
} mfm__verify_job;

static void mfm__verify_task(void *ctx, int index) {
    mfm__verify_job *j = (mfm__verify_job *)ctx;
    uint64_t c, lo, hi;
    int i = 0;
    mfm__share(j->first_chunk[j->n_sections], j->n_workers, index, &lo, &hi);
    for (c = lo; c < hi; c++) {
        const mfm__section *s;
        uint64_t at, n, values, bad;
        while (c >= j->first_chunk[i + 1]) i++;
        s = j->sec[i];
        at = (c - j->first_chunk[i]) * MFM__HASH_CHUNK;
        n = mfm__section_span(s) - at < MFM__HASH_CHUNK ? mfm__section_span(s) - at : MFM__HASH_CHUNK;
        j->chunk_hash[c] = mfm__checksum(j->b + s->offset + at, (size_t)n);
        if (s->flags & MFM__SECTION_HALF) {
            values = at < s->bytes ? ((s->bytes - at < n ? s->bytes - at : n) / 2) : 0;
            bad = mfm__first_not_finite_half(j->b + s->offset + at, values);
            j->not_finite_at[c] = bad < values ? at + 2 * bad : UINT64_MAX;
        } else {
            values = at < s->bytes ? ((s->bytes - at < n ? s->bytes - at : n) / 4) : 0;
            bad = mfm__first_not_finite(j->b + s->offset + at, values);
            j->not_finite_at[c] = bad < values ? at + 4 * bad : UINT64_MAX;
        }
    }
}

/* Verifies the sections of a format-2 file that `want` names (the parameters; and the state
   with with_state): their checksums, and that every value is finite. On every core: a 1.2 GB
   file in the page cache takes tens of milliseconds, not seconds. */
static mfm_status mfm__verify_sections(const unsigned char *b, const mfm__model_layout *L, int with_state, const char *name, mfm_error *err) {
    static const char *const tensor_names[] = {"w0", "w", "v", "r"};
    mfm__verify_job j;
    mfm__pool pool;
    mfm_status st;
    uint64_t total;
    int i, s;
    memset(&j, 0, sizeof j);
    j.b = b;
    for (s = 0; s < L->n_sections; s++)
        if (L->sec[s].kind == MFM__SECTION_PARAMS || with_state) {
            j.sec[j.n_sections] = &L->sec[s];
            j.first_chunk[j.n_sections + 1] = j.first_chunk[j.n_sections] + (mfm__section_span(&L->sec[s]) + MFM__HASH_CHUNK - 1) / MFM__HASH_CHUNK;
            j.n_sections++;
        }
    total = j.first_chunk[j.n_sections];
    if (total == 0) return MFM_OK;
    j.n_workers = mfm__workers_for_bytes(total * MFM__HASH_CHUNK, 0);
    j.chunk_hash = (uint64_t *)mfm__alloc(2 * total, sizeof(uint64_t));
    if (!j.chunk_hash) return mfm__fail(err, MFM_ERR_OUT_OF_MEMORY, "out of memory checking %s", name);
    j.not_finite_at = j.chunk_hash + total;
    if ((st = mfm__pool_start(&pool, j.n_workers, err)) == MFM_OK) {
        mfm__pool_run(&pool, mfm__verify_task, &j);
        mfm__pool_stop(&pool);
    }
    for (i = 0; i < j.n_sections && st == MFM_OK; i++) {
        const mfm__section *x = j.sec[i];
        mfm__hash all;
        uint64_t c;
        mfm__hash_init(&all);
        for (c = j.first_chunk[i]; c < j.first_chunk[i + 1]; c++) mfm__section_hash_fold(&all, j.chunk_hash[c]);
        if (mfm__hash_final(&all) != x->checksum)
            st = mfm__fail(err, MFM_ERR_BAD_FILE, "%s is corrupt: the checksum of its %s%s section (bytes %" PRIu64 " to %" PRIu64 ") does not match its contents", name,
                           x->kind == MFM__SECTION_STATE ? "optimizer state" : tensor_names[x->tensor], x->kind == MFM__SECTION_STATE ? "" : " parameter",
                           x->offset, x->offset + mfm__section_span(x));
        for (c = j.first_chunk[i]; c < j.first_chunk[i + 1] && st == MFM_OK; c++)
            if (j.not_finite_at[c] != UINT64_MAX)
                st = mfm__fail(err, MFM_ERR_BAD_FILE, "%s: the value at byte %" PRIu64 " (in its %s%s section) is not finite", name, x->offset + j.not_finite_at[c],
                               x->kind == MFM__SECTION_STATE ? "optimizer state" : tensor_names[x->tensor], x->kind == MFM__SECTION_STATE ? "" : " parameter");
    }
    MFM_FREE(j.chunk_hash);
    return st;
}

/* Reads and checks a format-2 directory against the header: the sections the model must have,
   in order, each where the last one ended, of the size its shape gives. */
static mfm_status mfm__read_directory(const unsigned char *b, uint64_t size, const mfm__model_header *h, const uint64_t tensor_floats[MFM_TENSOR_COUNT],
                                      const char *name, mfm__model_layout *L, mfm_error *err) {
    const uint64_t header_part = mfm__model_header_bytes(h->format_version) + 4ull * h->n_class_weights, dir = h->directory_offset;
    const uint64_t blocks[MFM_TENSOR_COUNT] = {1, h->n_features, tensor_floats[MFM_TENSOR_V] / h->k, tensor_floats[MFM_TENSOR_R]};
    uint64_t n, at, state_floats = 0;
    mfm__hash head;
    int s, t, w_inside = 0, has_w = 0;
    memset(L, 0, sizeof *L);
    if (dir < header_part || dir > size - 16 || (size - 16 - dir) % MFM__SECTION_ENTRY_BYTES != 0 ||
        (n = mfm__load_le64(b + dir)) != (size - 16 - dir) / MFM__SECTION_ENTRY_BYTES || n > MFM__MAX_SECTIONS)
        return mfm__fail(err, MFM_ERR_BAD_FILE, "%s is corrupt: its header points to no valid directory of sections", name);
    L->n_sections = (int)n;
    for (s = 0; s < L->n_sections; s++) {
        const unsigned char *e = b + dir + 8 + MFM__SECTION_ENTRY_BYTES * (uint64_t)s;
        mfm__section *x = &L->sec[s];
        x->kind = mfm__load_le32(e), x->tensor = mfm__load_le32(e + 4), x->stride = mfm__load_le32(e + 8), x->flags = mfm__load_le32(e + 12);
        x->offset = mfm__load_le64(e + 16), x->bytes = mfm__load_le64(e + 24), x->checksum = mfm__load_le64(e + 32);
    }
    L->header_end = L->n_sections ? L->sec[0].offset : dir;
    if (L->header_end < header_part || L->header_end > dir || L->header_end - header_part >= MFM__SECTION_ALIGN)
        return mfm__fail(err, MFM_ERR_BAD_FILE, "%s is corrupt: its directory of sections does not fit its header", name);
    mfm__hash_init(&head);
    mfm__hash_update(&head, b, (size_t)L->header_end);
    mfm__hash_update(&head, b + dir, (size_t)(size - 8 - dir));
    if (mfm__hash_final(&head) != mfm__load_le64(b + size - 8))
        return mfm__fail(err, MFM_ERR_BAD_FILE, "%s is corrupt: the checksum of its header and directory does not match their contents", name);
    /* behind a valid checksum, a crafted directory is still refused */
    for (t = 0; t < MFM_TENSOR_COUNT; t++) /* a slot of len floats a block, or of one (row-wise AdaGrad) */
        state_floats += blocks[t] * mfm__state_len((mfm_optimizer)h->optimizer, t == MFM_TENSOR_V ? h->k : 1) * h->n_classes * (h->n_slots - 1u);
    for (s = 0, at = L->header_end, t = -1; s < L->n_sections; s++) {
        mfm__section *x = &L->sec[s];
        const uint32_t len = x->tensor == MFM_TENSOR_V ? h->k : 1;
        /* FFM's V in a float16 file: a record a feature, F blocks and w (mfm__half_record) */
        const int records = h->model == MFM_MODEL_FFM && x->tensor == MFM_TENSOR_V && (x->flags & MFM__SECTION_W_INSIDE);
        const uint64_t n_blocks = x->tensor < MFM_TENSOR_COUNT ? (records ? h->n_features : blocks[x->tensor]) : 0;
        int ok = x->offset == at && x->offset % MFM__SECTION_ALIGN == 0;
        if (x->kind == MFM__SECTION_PARAMS) {
            ok = ok && (int)x->tensor > t && x->tensor < MFM_TENSOR_COUNT && tensor_floats[x->tensor] && x->stride >= len &&
                 (records ? (x->flags & MFM__SECTION_HALF) && !h->linear_only && x->stride == mfm__half_record(h->n_fields, (int)h->k) : x->stride <= 65536 + 16) &&
                 (x->flags & ~(uint32_t)(x->tensor != MFM_TENSOR_V ? 0 : MFM__SECTION_W_INSIDE | MFM__SECTION_HALF)) == 0 &&
                 (!(x->flags & MFM__SECTION_W_INSIDE) || records || x->stride >= h->k + 1) && !((x->flags & MFM__SECTION_HALF) && (h->flags & MFM__MODEL_STATE)) &&
                 n_blocks * h->n_classes <= size / 2 / x->stride && /* no product below wraps */
                 x->bytes == (x->flags & MFM__SECTION_HALF ? 2ull : 4ull) * h->n_classes * n_blocks * x->stride;
            t = (int)x->tensor;
            w_inside |= (x->flags & MFM__SECTION_W_INSIDE) != 0, has_w |= x->tensor == MFM_TENSOR_W;
            L->half |= (x->flags & MFM__SECTION_HALF) != 0;
        } else {
            ok = ok && x->kind == MFM__SECTION_STATE && s == L->n_sections - 1 && (h->flags & MFM__MODEL_STATE) && x->tensor == 0 && x->stride == 0 && x->flags == 0 &&
                 x->bytes == 4 * state_floats;
        }
        if (!ok || x->bytes > dir - x->offset)
            return mfm__fail(err, MFM_ERR_BAD_FILE, "%s is corrupt: section %d of its directory does not match the model its header describes", name, s + 1);
        at = x->offset + mfm__section_span(x);
    }
    for (t = 0; t < MFM_TENSOR_COUNT; t++) { /* every table, once */
        int found = t == MFM_TENSOR_W && w_inside;
        for (s = 0; s < L->n_sections; s++) found += L->sec[s].kind == MFM__SECTION_PARAMS && L->sec[s].tensor == (uint32_t)t;
        if (found != (tensor_floats[t] != 0) || (t == MFM_TENSOR_W && w_inside && has_w))
            return mfm__fail(err, MFM_ERR_BAD_FILE, "%s is corrupt: its directory lacks or repeats the parameters of tensor %d", name, t);
    }
    if (at != dir || ((h->flags & MFM__MODEL_STATE) && state_floats && L->sec[L->n_sections - 1].kind != MFM__SECTION_STATE))
        return mfm__fail(err, MFM_ERR_BAD_FILE, "%s is corrupt: its sections do not end where its directory starts", name);
    return MFM_OK;
}

/* Checks a model file in memory: the header; format 1 completely; format 2 its directory and
   the sections that `with_state` asks for (the parameters always). Fills the header, the
   floats of each tensor's class and (format 2) the layout. */
static mfm_status mfm__model_decode(const unsigned char *b, uint64_t size, const char *name, int with_state, mfm__model_header *h,
                                    uint64_t tensor_floats[MFM_TENSOR_COUNT], mfm__model_layout *L, mfm_error *err) {
    size_t header_bytes, i, at = 8;
    uint32_t version;
    int t;
    mfm_params p;
    mfm_status st;
    memset(L, 0, sizeof *L);
    if (size < 8 || memcmp(b, MFM__MODEL_MAGIC, 8) != 0) return mfm__fail(err, MFM_ERR_BAD_FILE, "%s is not a modern_fm model file (no MFMMODEL magic)", name);
    if (size < 12) return mfm__fail(err, MFM_ERR_BAD_FILE, "%s is truncated: %" PRIu64 " bytes, shorter than a model header", name, size);
    if ((version = mfm__load_le32(b + 8)) > MFM_MODEL_FILE_VERSION)
        return mfm__fail(err, MFM_ERR_BAD_FILE, "%s is a model of file format version %u, newer than this library reads (%u): update modern_fm", name,
                         (unsigned)version, (unsigned)MFM_MODEL_FILE_VERSION);
    header_bytes = mfm__model_header_bytes(version);
    if (size < header_bytes + 8) return mfm__fail(err, MFM_ERR_BAD_FILE, "%s is truncated: %" PRIu64 " bytes, shorter than a model header", name, size);
    memset(h, 0, sizeof *h);
    for (i = 0; i < MFM__N_MODEL_FIELDS(version); i++) {
        uint64_t v = mfm__model_fields[i].size == 4 ? mfm__load_le32(b + at) : mfm__load_le64(b + at);
        if (mfm__model_fields[i].size == 4) {
            uint32_t u = (uint32_t)v;
            memcpy((char *)h + mfm__model_fields[i].offset, &u, 4);
        } else {
            memcpy((char *)h + mfm__model_fields[i].offset, &v, 8);
        }
        at += mfm__model_fields[i].size;
    }
    if (version >= 2 && mfm__checksum(b, at) != mfm__load_le64(b + at))
        return mfm__fail(err, MFM_ERR_BAD_FILE, "%s is corrupt: the checksum of its header does not match its contents", name);
    if (h->format_version == 0 || h->endian_mark != MFM__ENDIAN_MARK || h->flags > MFM__MODEL_STATE || h->model == 0 || h->model > MFM_MODEL_FWFM ||
        h->task == 0 || h->task > MFM_TASK_MULTICLASS || h->optimizer == 0 || h->optimizer >= MFM_OPTIMIZER_COUNT ||
        (version < 2 && h->optimizer == MFM_OPTIMIZER_ROWWISE_ADAGRAD) || h->k == 0 || h->k > 65536 ||
        h->n_classes == 0 || (h->task != MFM_TASK_MULTICLASS && h->n_classes != 1) || h->n_slots != 1u + (uint32_t)mfm__state_slots((mfm_optimizer)h->optimizer) ||
        (h->model == MFM_MODEL_FM) != (h->n_fields == 0) ||
        h->n_class_weights != (h->class_weight != MFM_CLASS_WEIGHT_EXPLICIT ? 0 : h->task == MFM_TASK_BINARY ? 2 : h->n_classes))
        return mfm__fail(err, MFM_ERR_BAD_FILE, "%s: the model header is corrupt (an impossible model type, task, optimizer, k, class or slot count)", name);
    /* Sizes from the header, saturating: a huge claim must read as "truncated", not wrap. */
    tensor_floats[MFM_TENSOR_W0] = 1;
    tensor_floats[MFM_TENSOR_W] = h->n_features;
    tensor_floats[MFM_TENSOR_V] = (uint64_t)h->n_features * (h->model == MFM_MODEL_FFM ? h->n_fields : 1);
    tensor_floats[MFM_TENSOR_V] = tensor_floats[MFM_TENSOR_V] > UINT64_MAX / h->k ? UINT64_MAX : tensor_floats[MFM_TENSOR_V] * h->k;
    tensor_floats[MFM_TENSOR_R] = h->model == MFM_MODEL_FWFM ? (uint64_t)h->n_fields * h->n_fields : 0;
    if (version >= 2) {
        if (h->file_bytes != size)
            return mfm__fail(err, MFM_ERR_BAD_FILE, "%s is %s: %" PRIu64 " bytes where its header says %" PRIu64, name, size < h->file_bytes ? "truncated" : "too long",
                             size, h->file_bytes);
        for (t = 0; t < MFM_TENSOR_COUNT; t++) /* the claim of the header must fit the file, before any product of it */
            if (tensor_floats[t] > size / 2 / h->n_classes || ((h->flags & MFM__MODEL_STATE) && (h->n_slots - 1) * tensor_floats[t] > size / 2 / h->n_classes)) /* float16 V: 2 bytes a value */
                return mfm__fail(err, MFM_ERR_BAD_FILE, "%s is truncated: %" PRIu64 " bytes, too few for the model its header describes", name, size);
        if ((st = mfm__read_directory(b, size, h, tensor_floats, name, L, err)) != MFM_OK) return st;
        if ((st = mfm__verify_sections(b, L, with_state, name, err)) != MFM_OK) return st;
    } else {
        uint64_t need = header_bytes + 8;
        for (t = 0; t < MFM_TENSOR_COUNT; t++)
            if (tensor_floats[t] > size / 4 / h->n_classes) need = UINT64_MAX;
        if (need != UINT64_MAX) need += 4 * mfm__model_payload_floats(h, tensor_floats);
        if (need != size)
            return mfm__fail(err, MFM_ERR_BAD_FILE, "%s is %s: %" PRIu64 " bytes where its header needs %s%" PRIu64, name, size < need ? "truncated" : "too long", size,
                             need == UINT64_MAX ? "more than " : "", need == UINT64_MAX ? size : need);
        if (mfm__checksum(b, (size_t)size - 8) != mfm__load_le64(b + size - 8))
            return mfm__fail(err, MFM_ERR_BAD_FILE, "%s is corrupt: its checksum does not match its contents", name);
        /* A checksum guards against accidents, not against a crafted file: everything the model
           would refuse is refused here, so that inspecting a file checks as much as loading it. */
        if ((i = (size_t)mfm__first_not_finite(b + header_bytes, (size - 8 - header_bytes) / 4)) < (size - 8 - header_bytes) / 4)
            return mfm__fail(err, MFM_ERR_BAD_FILE, "%s: stored value %" PRIu64 " (after the header) is not finite", name, (uint64_t)i);
    }
    p = mfm__params_from_header(h);
    if (h->n_class_weights) {
        float *w = (float *)mfm__alloc(h->n_class_weights, sizeof(float));
        if (!w) return mfm__fail(err, MFM_ERR_OUT_OF_MEMORY, "out of memory checking %s", name);
        mfm__read_floats(b + header_bytes, w, h->n_class_weights);
        p.class_weights = w;
    }
    st = mfm__validate_params(&p, h->n_classes, err);
    MFM_FREE((void *)p.class_weights);
    return st == MFM_OK ? MFM_OK : mfm__name_error(err, MFM_ERR_BAD_FILE, name);
}

/* ---- from a checked file to a model ---- */

/* An empty model for a checked file: its own tables with every slot (for training), with the
   parameters only (for prediction), or (allocate = 0) none yet. */
static mfm_status mfm__model_for_file(const unsigned char *b, const mfm__model_header *h, int for_prediction, int allocate, const char *name, mfm_model **out,
                                      mfm_error *err) {
    float class_weights[64], *w = NULL;
    mfm_params p = mfm__params_from_header(h);
    mfm_status st;
    if (h->n_class_weights) {
        w = h->n_class_weights <= 64 ? class_weights : (float *)mfm__alloc(h->n_class_weights, sizeof(float));
        if (!w) return mfm__fail(err, MFM_ERR_OUT_OF_MEMORY, "out of memory loading %s", name);
        mfm__read_floats(b + mfm__model_header_bytes(h->format_version), w, h->n_class_weights);
        p.class_weights = w;
    }
    p = mfm_params_resolve(&p);
    st = mfm__model_new(&p, h->n_features, h->n_fields, h->n_classes, for_prediction ? 1 : (int)h->n_slots, allocate, out, err);
    if (w && w != class_weights) MFM_FREE(w);
    if (st != MFM_OK) return mfm__name_error(err, st, name);
    (*out)->for_prediction = for_prediction;
    (*out)->epochs_trained = h->epochs_trained;
    return MFM_OK;
}

/* Fills a model's tables from a checked file: format 2 block by block from each parameter
   section's layout and slot by slot from the state section (with_state); format 1 slot by slot
   as it lies. A model whose tables lie as the file's sections takes each section whole. */
static mfm_status mfm__fill_from_file(mfm_model *m, const unsigned char *b, const mfm__model_header *h, const mfm__model_layout *L, int with_state,
                                      mfm_error *err) {
    uint64_t at = mfm__model_header_bytes(h->format_version) + 4ull * h->n_class_weights, blk;
    uint32_t c;
    int s, t, slot;
    for (s = 0; s < L->n_sections; s++) {
        const mfm__section *x = &L->sec[s];
        const mfm__table *tab = &m->t[x->kind == MFM__SECTION_PARAMS ? x->tensor : 0];
        const unsigned char *src = b + x->offset;
        if (x->kind != MFM__SECTION_PARAMS) continue;
        if (x->flags & MFM__SECTION_HALF) { /* widened record by record (a file of float16 factors) */
            const uint32_t per_record = x->flags & MFM__SECTION_W_INSIDE ? tab->per_feature : 1; /* FFM's: F blocks and w */
            float *v = (float *)mfm__alloc(x->stride, sizeof(float) + sizeof(uint16_t));
            uint16_t *hv = (uint16_t *)(void *)(v + x->stride);
            uint32_t i;
            if (!v) return mfm__fail(err, MFM_ERR_OUT_OF_MEMORY, "out of memory reading a model's float16 factors");
            for (c = 0; c < m->n_classes; c++)
                for (blk = 0; blk < tab->n_blocks; blk += per_record, src += 2ull * x->stride) {
                    for (i = 0; i < x->stride; i++) hv[i] = (uint16_t)(src[2 * i] | src[2 * i + 1] << 8);
                    mfm__halves_to_floats(hv, v, x->stride, 0);
                    for (i = 0; i < per_record; i++) memcpy(mfm__block(m, MFM_TENSOR_V, c, blk + i), v + (uint64_t)i * m->k, tab->len * sizeof(float));
                    if (x->flags & MFM__SECTION_W_INSIDE) *mfm__block(m, MFM_TENSOR_W, c, blk / per_record) = v[(uint64_t)per_record * m->k];
                }
            MFM_FREE(v);
            continue;
        }
        if (tab->stride == x->stride && tab->stride == tab->len && !x->flags) { /* a table of parameters only, laid out as the section */
            mfm__read_floats(src, tab->data, x->bytes / 4);
            continue;
        }
        for (c = 0; c < m->n_classes; c++)
            for (blk = 0; blk < tab->n_blocks; blk++, src += 4ull * x->stride) {
                mfm__read_floats(src, mfm__block(m, (mfm_tensor)x->tensor, c, blk), tab->len);
                if (x->flags & MFM__SECTION_W_INSIDE) mfm__read_floats(src + 4ull * m->k, mfm__block(m, MFM_TENSOR_W, c, blk), 1);
            }
    }
    for (s = 0; s < L->n_sections; s++)
        if (L->sec[s].kind == MFM__SECTION_STATE) at = L->sec[s].offset;
    for (t = 0; t < MFM_TENSOR_COUNT; t++) /* format 1's slots, or format 2's state section: the same order */
        for (c = 0; c < m->n_classes; c++)
            for (slot = h->format_version >= 2 ? 1 : 0; slot < (h->flags & MFM__MODEL_STATE ? (int)h->n_slots : 1); slot++) {
                const mfm__table *tab = &m->t[t];
                const uint32_t n = mfm__slot_len(tab, slot);
                if (slot >= m->n_slots || (slot > 0 && !with_state)) {
                    at += 4ull * tab->n_blocks * n;
                    continue;
                }
                for (blk = 0; blk < tab->n_blocks; blk++, at += 4ull * n) mfm__read_floats(b + at, mfm__block_slot(m, (mfm_tensor)t, c, blk, slot), n);
            }
    return MFM_OK;
}

/* A model for training from a file's bytes: every table its own, the state as saved or at its
   start. */
static mfm_status mfm__model_from_bytes(const unsigned char *b, uint64_t size, const char *name, mfm_model **out, mfm_error *err) {
    mfm__model_header h;
    mfm__model_layout L;
    uint64_t floats[MFM_TENSOR_COUNT];
    mfm_status st;
    if (!out) return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "the model output pointer is NULL");
    *out = NULL;
    if ((st = mfm__model_decode(b, size, name, 1, &h, floats, &L, err)) != MFM_OK) return st;
    if ((st = mfm__model_for_file(b, &h, 0, 1, name, out, err)) != MFM_OK) return st;
    if (!(h.flags & MFM__MODEL_STATE)) mfm__fill_tables(*out, MFM__FILL_STATE);
    if ((st = mfm__fill_from_file(*out, b, &h, &L, (h.flags & MFM__MODEL_STATE) != 0, err)) != MFM_OK) {
        mfm_model_free(*out);
        *out = NULL;
        return st;
    }
    (*out)->has_state = (h.flags & MFM__MODEL_STATE) != 0;
    return mfm__ok(err);
}

MFMDEF mfm_status mfm_model_load_memory(const void *bytes, size_t size, mfm_model **out, mfm_error *err) {
    if (!bytes && size) return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "mfm_model_load_memory: the bytes are NULL");
    return mfm__model_from_bytes((const unsigned char *)(bytes ? bytes : ""), size, "<memory>", out, err);
}

MFMDEF mfm_status mfm_model_load(const char *path, mfm_model **out, mfm_error *err) {
    mfm__mapping map;
    mfm_status st;
    if (out) *out = NULL;
    if (!path) return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "mfm_model_load: the path is NULL");
    if ((st = mfm__map(path, &map, err)) != MFM_OK) return st;
    st = mfm__model_from_bytes(map.bytes ? map.bytes : (const unsigned char *)"", map.size, path, out, err);
    mfm__unmap(&map);
    return st;
}

/* Whether every parameter section of a checked format-2 file lies as this build lays out a
   model's tables for prediction, so that the tables can be the file's own bytes. */
static int mfm__sections_map(const mfm__model_header *h, const mfm__model_layout *L) {
    mfm__model_layout want;
    mfm_params p = mfm__params_from_header(h);
    int s;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    return 0; /* the file's floats are little-endian */
#endif
    if (h->format_version < 2) return 0;
    mfm__plan_sections(&p, h->n_features, h->n_fields, h->n_classes, 0, 0, L->half, 0, &want);
    for (s = 0; s < want.n_sections; s++)
        if (s >= L->n_sections || L->sec[s].kind != MFM__SECTION_PARAMS || L->sec[s].tensor != want.sec[s].tensor || L->sec[s].stride != want.sec[s].stride ||
            L->sec[s].flags != want.sec[s].flags)
            return 0;
    return 1;
}

/* memcpy on every core, a share each (mfm__workers_for_bytes): the pages of a fresh table fault in
   on all of them at once. */
typedef struct mfm__copy_job {
    unsigned char *to;
    const unsigned char *from;
    uint64_t bytes;
    int n_workers;
} mfm__copy_job;

static void mfm__copy_task(void *ctx, int index) {
    const mfm__copy_job *j = (const mfm__copy_job *)ctx;
    uint64_t lo, hi;
    mfm__share(j->bytes, j->n_workers, index, &lo, &hi);
    if (hi > lo) memcpy(j->to + lo, j->from + lo, (size_t)(hi - lo));
}

static void mfm__copy_on_cores(void *to, const void *from, uint64_t bytes) {
    mfm__copy_job j;
    j.to = (unsigned char *)to, j.from = (const unsigned char *)from, j.bytes = bytes;
    j.n_workers = mfm__workers_for_bytes(bytes, 0);
    mfm__run_shares(mfm__copy_task, &j, j.n_workers);
}

/* A model for prediction from a checked file (mfm_model_map, mfm_model_load_parameters): the
   parameter sections in place in the mapping, or (copy) in tables of the model's own; the file
   read into memory where its sections do not lie as this build's tables. */
static mfm_status mfm__open_for_prediction(const char *fn, const char *path, int copy, mfm_model **out, mfm_error *err) {
    mfm__model_header h;
    mfm__model_layout L;
    uint64_t floats[MFM_TENSOR_COUNT];
    mfm__mapping map;
    mfm_model *m = NULL;
    mfm_status st;
    int s, in_place;
    if (!out) return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "%s: the output pointer is NULL", fn);
    *out = NULL;
    if (!path) return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "%s: the path is NULL", fn);
    if ((st = mfm__map(path, &map, err)) != MFM_OK) return st;
    st = mfm__model_decode(map.bytes ? map.bytes : (const unsigned char *)"", map.size, path, 0, &h, floats, &L, err);
    in_place = st == MFM_OK && mfm__sections_map(&h, &L);
    if (st == MFM_OK) st = mfm__model_for_file(map.bytes, &h, 1, !in_place, path, &m, err);
    if (st == MFM_OK && in_place) {
        for (s = 0; s < L.n_sections && st == MFM_OK; s++) {
            mfm__table *tab = &m->t[L.sec[s].kind == MFM__SECTION_PARAMS ? L.sec[s].tensor : 0];
            const unsigned char *at = map.bytes + L.sec[s].offset;
            if (L.sec[s].kind != MFM__SECTION_PARAMS) continue;
            if (copy) { /* the section's bytes into a table of the model's own */
                float *own = mfm__table_alloc((L.sec[s].bytes + sizeof(float) - 1) / sizeof(float), 0, &tab->allocation);
                if (!own) {
                    st = mfm__fail(err, MFM_ERR_OUT_OF_MEMORY, "%s: out of memory for a copy of %" PRIu64 " bytes of parameters of %s", fn, L.sec[s].bytes,
                                   path);
                    break;
                }
                mfm__copy_on_cores(own, at, L.sec[s].bytes);
                memset((unsigned char *)own + L.sec[s].bytes, 0, (size_t)((0 - L.sec[s].bytes) % sizeof(float))); /* a last float's tail */
                at = (const unsigned char *)own;
            }
            if (L.sec[s].flags & MFM__SECTION_HALF)
                tab->halves = (const uint16_t *)(const void *)at;
            else
                tab->data = (float *)(uintptr_t)at; /* never written */
            if (L.sec[s].flags & MFM__SECTION_W_INSIDE) { /* w in V's records (FFM's padded ones, FM's and FwFM's blocks): a record apart */
                mfm__table *W = &m->t[MFM_TENSOR_W];
                tab->feature_stride = W->stride = W->feature_stride = L.sec[s].stride;
                W->guest = 1;
            }
        }
        mfm__place_guest(m);
        if (st == MFM_OK && !copy) { /* the model owns the mapping now */
            m->file = map;
            memset(&map, 0, sizeof map);
        }
    } else if (st == MFM_OK) {
        st = mfm__fill_from_file(m, map.bytes, &h, &L, 0, err);
    }
    mfm__unmap(&map);
    if (st != MFM_OK) {
        mfm_model_free(m);
        return st;
    }
    *out = m;
    return mfm__ok(err);
}

MFMDEF mfm_status mfm_model_map(const char *path, mfm_model **out, mfm_error *err) { return mfm__open_for_prediction("mfm_model_map", path, 0, out, err); }

MFMDEF mfm_status mfm_model_load_parameters(const char *path, mfm_model **out, mfm_error *err) {
    return mfm__open_for_prediction("mfm_model_load_parameters", path, 1, out, err);
}

MFMDEF mfm_status mfm_model_file_inspect(const char *path, mfm_model_file_info *out, mfm_error *err) {
    mfm__model_header h;
    mfm__model_layout L;
    uint64_t floats[MFM_TENSOR_COUNT];
    mfm__table tables[MFM_TENSOR_COUNT];
    mfm__mapping map;
    mfm_status st;
    int t;
    if (!path || !out) return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "mfm_model_file_inspect: the path or the output is NULL");
    memset(out, 0, sizeof *out);
    if ((st = mfm__map(path, &map, err)) != MFM_OK) return st;
    st = mfm__model_decode(map.bytes ? map.bytes : (const unsigned char *)"", map.size, path, 1, &h, floats, &L, err);
    out->file_bytes = map.size;
    mfm__unmap(&map);
    if (st != MFM_OK) return st;
    out->format_version = h.format_version;
    out->writer_version = h.writer_version;
    out->has_state = (h.flags & MFM__MODEL_STATE) != 0;
    out->half = L.half;
    out->params = mfm__params_from_header(&h);
    out->model.model = out->params.model;
    out->model.task = out->params.task;
    out->model.optimizer = out->params.optimizer;
    out->model.n_features = h.n_features;
    out->model.n_fields = h.n_fields;
    out->model.n_classes = h.n_classes;
    out->model.k = (int)h.k;
    out->model.n_state_slots = (int)h.n_slots - 1;
    out->model.epochs_trained = h.epochs_trained;
    out->model.has_state = out->has_state;
    mfm__shape_tables(&out->params, h.n_features, h.n_fields, (int)h.n_slots, tables);
    for (t = 0; t < MFM_TENSOR_COUNT; t++) {
        out->model.n_parameters += floats[t] * h.n_classes;
        out->model.memory_bytes += mfm__table_floats(&tables[t], h.n_classes) * sizeof(float);
    }
    return mfm__ok(err);
}

/* ============================================================================================
   >>cuda-loader  The CUDA driver and NVRTC, loaded at run time: no CUDA header, no SDK to build
   ============================================================================================

   Own declarations of the few driver and NVRTC types used; every function is looked up by the
   exact versioned symbol whose signature we declare (cuMemAlloc_v2, ...), because the plain
   names still exist in the driver with older ABIs. A missing symbol fails the whole load. The
   libraries are loaded once per process, under a lock, and the outcome (failure included) is
   kept: later calls answer at once with the same sentence. Nothing is ever unloaded. */

#if MFM__GPU

#if defined(_WIN32)
#define MFM__CUDAAPI __stdcall
#else
#define MFM__CUDAAPI
#endif

typedef int mfm__cu_result; /* CUresult: 0 is success */
typedef int mfm__cu_device;
typedef unsigned long long mfm__cu_ptr; /* CUdeviceptr */
typedef struct mfm__cu_context_s *mfm__cu_context;
typedef struct mfm__cu_module_s *mfm__cu_module;
typedef struct mfm__cu_function_s *mfm__cu_function;
typedef struct mfm__cu_stream_s *mfm__cu_stream;
typedef struct mfm__cu_event_s *mfm__cu_event;
typedef struct mfm__nvrtc_program_s *mfm__nvrtc_program;
typedef struct mfm__nccl_comm_s *mfm__nccl_comm; /* ncclComm_t */
typedef struct mfm__nccl_id {                     /* ncclUniqueId */
    char internal[128];
} mfm__nccl_id;
enum { /* NCCL's numbers for the data type and reduction it is asked for (nccl.h) */
    MFM__NCCL_FLOAT32 = 7,
    MFM__NCCL_SUM = 0
};

enum { /* the driver's numbers for what gets its own sentence */
    MFM__CU_OUT_OF_MEMORY = 2,
    MFM__CU_STUB_LIBRARY = 34,
    MFM__CU_NO_DEVICE = 100,
    MFM__CU_INVALID_IMAGE = 200,
    MFM__CU_NO_BINARY_FOR_GPU = 209,
    MFM__CU_INVALID_PTX = 218,
    MFM__CU_UNSUPPORTED_PTX_VERSION = 222,
    MFM__CU_ATTR_SM_COUNT = 16,
    MFM__CU_ATTR_CC_MAJOR = 75,
    MFM__CU_ATTR_CC_MINOR = 76
};

/* name in the table, symbol in the library, signature */
#define MFM__DRIVER_FUNCTIONS(X)                                                                                    \
    X(cuInit, "cuInit", (unsigned flags))                                                                           \
    X(cuDriverGetVersion, "cuDriverGetVersion", (int *version))                                                     \
    X(cuGetErrorName, "cuGetErrorName", (mfm__cu_result e, const char **name))                                      \
    X(cuGetErrorString, "cuGetErrorString", (mfm__cu_result e, const char **text))                                  \
    X(cuDeviceGetCount, "cuDeviceGetCount", (int *count))                                                           \
    X(cuDeviceGet, "cuDeviceGet", (mfm__cu_device * device, int ordinal))                                           \
    X(cuDeviceGetName, "cuDeviceGetName", (char *name, int length, mfm__cu_device device))                          \
    X(cuDeviceGetAttribute, "cuDeviceGetAttribute", (int *value, int attribute, mfm__cu_device device))             \
    X(cuDeviceTotalMem, "cuDeviceTotalMem_v2", (size_t * bytes, mfm__cu_device device))                             \
    X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", (mfm__cu_context * context, mfm__cu_device device))     \
    X(cuCtxGetCurrent, "cuCtxGetCurrent", (mfm__cu_context * context))                                              \
    X(cuCtxSetCurrent, "cuCtxSetCurrent", (mfm__cu_context context))                                                \
    X(cuModuleLoadData, "cuModuleLoadData", (mfm__cu_module * module, const void *image))                           \
    X(cuModuleUnload, "cuModuleUnload", (mfm__cu_module module))                                                    \
    X(cuModuleGetFunction, "cuModuleGetFunction", (mfm__cu_function * f, mfm__cu_module module, const char *name)) \
    X(cuOccupancyMaxActiveBlocksPerMultiprocessor, "cuOccupancyMaxActiveBlocksPerMultiprocessor",                  \
      (int *blocks, mfm__cu_function f, int block_size, size_t shared_bytes))                                       \
    X(cuLaunchKernel, "cuLaunchKernel",                                                                             \
      (mfm__cu_function f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,            \
       unsigned shared_bytes, mfm__cu_stream stream, void **params, void **extra))                                  \
    X(cuMemAlloc, "cuMemAlloc_v2", (mfm__cu_ptr * p, size_t bytes))                                                \
    X(cuMemFree, "cuMemFree_v2", (mfm__cu_ptr p))                                                                   \
    X(cuMemAllocHost, "cuMemAllocHost_v2", (void **p, size_t bytes))                                                \
    X(cuMemFreeHost, "cuMemFreeHost", (void *p))                                                                    \
    X(cuMemGetInfo, "cuMemGetInfo_v2", (size_t * free_bytes, size_t * total_bytes))                                 \
    X(cuMemcpyHtoD, "cuMemcpyHtoD_v2", (mfm__cu_ptr dst, const void *src, size_t bytes))                           \
    X(cuMemcpyDtoH, "cuMemcpyDtoH_v2", (void *dst, mfm__cu_ptr src, size_t bytes))                                 \
    X(cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2", (mfm__cu_ptr dst, mfm__cu_ptr src, size_t bytes, mfm__cu_stream s)) \
    X(cuMemsetD8Async, "cuMemsetD8Async", (mfm__cu_ptr dst, unsigned char value, size_t n, mfm__cu_stream s))      \
    X(cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2", (mfm__cu_ptr dst, const void *src, size_t bytes, mfm__cu_stream s)) \
    X(cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2", (void *dst, mfm__cu_ptr src, size_t bytes, mfm__cu_stream s))     \
    X(cuStreamCreate, "cuStreamCreate", (mfm__cu_stream * stream, unsigned flags))                                  \
    X(cuStreamDestroy, "cuStreamDestroy_v2", (mfm__cu_stream stream))                                               \
    X(cuStreamSynchronize, "cuStreamSynchronize", (mfm__cu_stream stream))                                          \
    X(cuStreamWaitEvent, "cuStreamWaitEvent", (mfm__cu_stream stream, mfm__cu_event event, unsigned flags))         \
    X(cuEventCreate, "cuEventCreate", (mfm__cu_event * event, unsigned flags))                                      \
    X(cuEventRecord, "cuEventRecord", (mfm__cu_event event, mfm__cu_stream stream))                                 \
    X(cuEventSynchronize, "cuEventSynchronize", (mfm__cu_event event))                                              \
    X(cuEventDestroy, "cuEventDestroy_v2", (mfm__cu_event event))

#define MFM__NVRTC_FUNCTIONS(X)                                                                                   \
    X(nvrtcVersion, "nvrtcVersion", (int *major, int *minor))                                                     \
    X(nvrtcCreateProgram, "nvrtcCreateProgram",                                                                   \
      (mfm__nvrtc_program * p, const char *source, const char *name, int n_headers, const char *const *headers,   \
       const char *const *include_names))                                                                         \
    X(nvrtcDestroyProgram, "nvrtcDestroyProgram", (mfm__nvrtc_program * p))                                       \
    X(nvrtcCompileProgram, "nvrtcCompileProgram", (mfm__nvrtc_program p, int n_options, const char *const *options)) \
    X(nvrtcGetProgramLogSize, "nvrtcGetProgramLogSize", (mfm__nvrtc_program p, size_t * size))                    \
    X(nvrtcGetProgramLog, "nvrtcGetProgramLog", (mfm__nvrtc_program p, char *log))                                \
    X(nvrtcGetPTXSize, "nvrtcGetPTXSize", (mfm__nvrtc_program p, size_t * size))                                  \
    X(nvrtcGetPTX, "nvrtcGetPTX", (mfm__nvrtc_program p, char *ptx))

/* NCCL 2: what training on several GPUs calls (>>gpu-shards). ncclCommInitRank and
   ncclGetUniqueId are for one process per GPU, the multi-node plan (docs/GPU.md). */
#define MFM__NCCL_FUNCTIONS(X)                                                                                         \
    X(ncclGetVersion, "ncclGetVersion", (int *version))                                                                \
    X(ncclGetUniqueId, "ncclGetUniqueId", (mfm__nccl_id * id))                                                         \
    X(ncclCommInitAll, "ncclCommInitAll", (mfm__nccl_comm * comms, int n, const int *devices))                        \
    X(ncclCommInitRank, "ncclCommInitRank", (mfm__nccl_comm * comm, int n, mfm__nccl_id id, int rank))                \
    X(ncclCommDestroy, "ncclCommDestroy", (mfm__nccl_comm comm))                                                       \
    X(ncclCommAbort, "ncclCommAbort", (mfm__nccl_comm comm))                                                           \
    X(ncclGroupStart, "ncclGroupStart", (void))                                                                        \
    X(ncclGroupEnd, "ncclGroupEnd", (void))                                                                            \
    X(ncclAllReduce, "ncclAllReduce",                                                                                  \
      (const void *send, void *receive, size_t count, int type, int op, mfm__nccl_comm comm, mfm__cu_stream stream))   \
    X(ncclAllGather, "ncclAllGather", (const void *send, void *receive, size_t count, int type, mfm__nccl_comm comm, mfm__cu_stream stream))

/* Present from NVRTC 11.1 / 11.2 on; without them there is only PTX for a guessed arch list. */
#define MFM__NVRTC_OPTIONAL(X)                                                                 \
    X(nvrtcGetCUBINSize, "nvrtcGetCUBINSize", (mfm__nvrtc_program p, size_t * size))           \
    X(nvrtcGetCUBIN, "nvrtcGetCUBIN", (mfm__nvrtc_program p, char *cubin))                     \
    X(nvrtcGetNumSupportedArchs, "nvrtcGetNumSupportedArchs", (int *count))                    \
    X(nvrtcGetSupportedArchs, "nvrtcGetSupportedArchs", (int *archs))

#define MFM__DECLARE_FN(name, symbol, args) mfm__cu_result(MFM__CUDAAPI *name) args;
typedef struct mfm__driver_api {
    MFM__DRIVER_FUNCTIONS(MFM__DECLARE_FN)
} mfm__driver_api;
typedef struct mfm__nvrtc_api {
    MFM__NVRTC_FUNCTIONS(MFM__DECLARE_FN)
    MFM__NVRTC_OPTIONAL(MFM__DECLARE_FN)
} mfm__nvrtc_api;
#undef MFM__DECLARE_FN
#define MFM__DECLARE_NCCL(name, symbol, args) int(MFM__CUDAAPI *name) args; /* ncclResult_t: 0 is success */
typedef struct mfm__nccl_api {
    MFM__NCCL_FUNCTIONS(MFM__DECLARE_NCCL)
    const char *(MFM__CUDAAPI *ncclGetErrorString)(int result);
} mfm__nccl_api;
#undef MFM__DECLARE_NCCL

/* A device made ready on first use: its primary context and the module of all kernels. */
typedef struct mfm__gpu_device {
    int ready;
    mfm__cu_context context;
    mfm__cu_module module;
    mfm__cu_function fm, finish;
    mfm__cu_function pairs[2][4]; /* [FFM, FwFM][any k, k = 4, 8, 16] */
    mfm__cu_function train_rows[2][4];     /* [fast, exact][any k, k = 4, 8, 16] (kernels/train.cu) */
    mfm__cu_function train_apply[2][5][2]; /* [fast, exact][SGD, AdaGrad, Adam, FTRL, row-wise AdaGrad][k a multiple of 8: the _wide kernel] */
    mfm__cu_function train_list;           /* lists a large batch's features from a sweep of their marks */
    mfm__cu_function r_total[2];           /* shards of the factors: FwFM's R sums of every shard added up [fast, exact] */
    mfm__cu_function line[3];              /* the linear terms' line search: delta, alpha, settle */
    mfm__cu_function ffm_starts, ffm_place, ffm_gather[4]; /* deterministic FFM's gathered sums: gather [any k, k = 4, 8, 16] */
    int cc, sm_count;
    double context_seconds; /* cuDevicePrimaryCtxRetain: the first use of the GPU */
    mfm_kernel_build build; /* how the module's image was had */
} mfm__gpu_device;

/* Which of a kernel's versions serves k: 0 any k, 1 .. 3 k = 4, 8, 16 (known at compile time). */
static int mfm__k_kernel(int k) { return k == 4 ? 1 : k == 8 ? 2 : k == 16 ? 3 : 0; }

typedef struct mfm__cuda_state {
    int driver_tried, nvrtc_tried;
    mfm_status driver_status, nvrtc_status;
    char driver_why[1024], nvrtc_why[1024]; /* the sentence of a failed load */
    void *driver_library, *nvrtc_library;
    int driver_version, n_devices;
    int nvrtc_major, nvrtc_minor;
    char nvrtc_path[256];
    int archs[64], n_archs; /* what NVRTC can build CUBIN for, ascending (0 = unknown) */
    mfm__driver_api cu;
    mfm__nvrtc_api rtc;
    mfm__gpu_device *devices; /* n_devices, each made ready on first use */
    char *source;             /* the kernel chunks joined */
    size_t source_bytes;
    char source_digest[33];   /* XXH3-128 of the source, hex */
    int nccl_tried, nccl_version; /* NCCL: only for training on several GPUs */
    mfm_status nccl_status;
    char nccl_why[1536], nccl_path[512];
    void *nccl_library;
    mfm__nccl_api nccl;
} mfm__cuda_state;

static mfm__cuda_state mfm__cuda;

/* mfm_cuda_configure's settings, read under the lock; "" and DEFAULT defer to the environment. */
static struct mfm__cuda_settings {
    char driver[512], nvrtc[512], nccl[512], cache_dir[512];
    mfm_cache_mode cache_mode;
} mfm__settings;

/* A setting, else its environment variable; NULL when neither names anything. */
static const char *mfm__setting(const char *set, const char *env_name) {
    const char *e = set[0] ? set : getenv(env_name);
    return e && *e ? e : NULL;
}

/* One lock for the loader, the compiled modules and the cache directory. */
static mfm__static_lock mfm__cuda_mutex = MFM__STATIC_LOCK_INIT;
static void mfm__cuda_lock(void) { mfm__static_lock_take(&mfm__cuda_mutex); }
static void mfm__cuda_unlock(void) { mfm__static_lock_give(&mfm__cuda_mutex); }

/* Shared libraries. `why` gets the system's reason when a load fails. */
#if defined(_WIN32)
#ifndef LOAD_LIBRARY_SEARCH_DLL_LOAD_DIR
#define LOAD_LIBRARY_SEARCH_DLL_LOAD_DIR 0x00000100
#endif
#ifndef LOAD_LIBRARY_SEARCH_SYSTEM32
#define LOAD_LIBRARY_SEARCH_SYSTEM32 0x00000800
#endif
#ifndef LOAD_LIBRARY_SEARCH_DEFAULT_DIRS
#define LOAD_LIBRARY_SEARCH_DEFAULT_DIRS 0x00001000
#endif
static void *mfm__library_open(const char *name, int system_only, char *why, size_t cap) {
    /* the driver only from System32 (a DLL planted in the working directory is ignored); a full
       path finds its neighbours (nvrtc-builtins) next to it */
    DWORD flags = system_only ? LOAD_LIBRARY_SEARCH_SYSTEM32
                              : (strchr(name, '\\') || strchr(name, '/') ? LOAD_LIBRARY_SEARCH_DLL_LOAD_DIR | LOAD_LIBRARY_SEARCH_DEFAULT_DIRS : 0);
    HMODULE h = LoadLibraryExA(name, NULL, flags);
    if (!h) snprintf(why, cap, "Windows error %lu", (unsigned long)GetLastError());
    return (void *)h;
}
static void *mfm__library_symbol(void *lib, const char *name) {
    FARPROC f = GetProcAddress((HMODULE)lib, name);
    void *p;
    memcpy(&p, &f, sizeof p); /* a function pointer held as data: the memcpy keeps -Wpedantic quiet */
    return p;
}
static void mfm__library_close(void *lib) { FreeLibrary((HMODULE)lib); }
#else
static void *mfm__library_open(const char *name, int system_only, char *why, size_t cap) {
    void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    const char *e;
    (void)system_only;
    if (!h && (e = dlerror()) != NULL) snprintf(why, cap, "%s", e);
    return h;
}
static void *mfm__library_symbol(void *lib, const char *name) { return dlsym(lib, name); }
static void mfm__library_close(void *lib) { dlclose(lib); }
#endif

/* Fills a table of function pointers; a resolver returns the first symbol missing, or NULL. */
#define MFM__RESOLVE_ONE(name, symbol, args)                                        \
    if (!missing_ && (sym_ = mfm__library_symbol(lib_, symbol)) == NULL) missing_ = symbol; \
    if (sym_) memcpy(&table_->name, &sym_, sizeof sym_);

static const char *mfm__resolve_driver(void *lib_, mfm__driver_api *table_) {
    const char *missing_ = NULL;
    void *sym_ = NULL;
    MFM__DRIVER_FUNCTIONS(MFM__RESOLVE_ONE)
    return missing_;
}

static const char *mfm__resolve_nvrtc(void *lib_, mfm__nvrtc_api *table_) {
    const char *missing_ = NULL;
    void *sym_ = NULL;
    MFM__NVRTC_FUNCTIONS(MFM__RESOLVE_ONE)
    if (missing_) return missing_;
    MFM__NVRTC_OPTIONAL(MFM__RESOLVE_ONE)
    return NULL; /* optional ones may stay NULL */
}

#if !defined(_WIN32) /* NVIDIA builds NCCL for Linux only */
static const char *mfm__resolve_nccl(void *lib_, mfm__nccl_api *table_) {
    const char *missing_ = NULL;
    void *sym_ = NULL;
    MFM__NCCL_FUNCTIONS(MFM__RESOLVE_ONE)
    MFM__RESOLVE_ONE(ncclGetErrorString, "ncclGetErrorString", ())
    return missing_;
}
#endif
#undef MFM__RESOLVE_ONE

/* "cuMemAlloc_v2 failed: CUDA_ERROR_INVALID_VALUE (1): invalid argument" */
static mfm_status mfm__cu_fail(mfm_error *err, mfm__cu_result r, const char *step) {
    const char *name = NULL, *text = NULL;
    if (mfm__cuda.cu.cuGetErrorName) mfm__cuda.cu.cuGetErrorName(r, &name);
    if (mfm__cuda.cu.cuGetErrorString) mfm__cuda.cu.cuGetErrorString(r, &text);
    return mfm__fail(err, r == MFM__CU_OUT_OF_MEMORY ? MFM_ERR_OUT_OF_MEMORY : MFM_ERR_CUDA, "%s failed on the GPU: %s (%d): %s", step,
                     name ? name : "CUDA error", (int)r, text ? text : "no description");
}

/* Loads libcuda, checks its version and initialises it. Called under the lock. */
static void mfm__driver_load_locked(void) {
    mfm__cuda_state *s = &mfm__cuda;
    const char *env = mfm__setting(mfm__settings.driver, "MFM_CUDA_LIBRARY"), *missing;
#if defined(_WIN32)
    const char *name = env && *env ? env : "nvcuda.dll";
#else
    const char *name = env && *env ? env : "libcuda.so.1"; /* never libcuda.so: that may be the toolkit's stub */
#endif
    char why[256] = "";
    mfm__cu_result r;
    s->driver_tried = 1;
    s->driver_status = MFM_ERR_CUDA_UNAVAILABLE;
    if (sizeof(void *) != 8) {
        snprintf(s->driver_why, sizeof s->driver_why, "no CUDA driver: CUDA needs a 64-bit process");
        return;
    }
    if (!(s->driver_library = mfm__library_open(name, !(env && *env), why, sizeof why))) {
        snprintf(s->driver_why, sizeof s->driver_why,
                 "no CUDA driver: %s could not be loaded (%s); install the NVIDIA driver, or set MFM_CUDA_LIBRARY to the driver library", name, why);
        return;
    }
    if ((missing = mfm__resolve_driver(s->driver_library, &s->cu)) != NULL) {
        snprintf(s->driver_why, sizeof s->driver_why, "the CUDA driver %s has no %s: it is too old or not a CUDA driver; update the NVIDIA driver", name,
                 missing);
        return;
    }
    if ((r = s->cu.cuDriverGetVersion(&s->driver_version)) != 0 || s->driver_version < 11020) {
        s->driver_status = MFM_ERR_CUDA_DRIVER_TOO_OLD;
        snprintf(s->driver_why, sizeof s->driver_why, "the CUDA driver %s supports CUDA %d.%d, older than the 11.2 this library needs; update the NVIDIA driver",
                 name, s->driver_version / 1000, s->driver_version % 1000 / 10);
        return;
    }
    r = s->cu.cuInit(0);
    if (r == MFM__CU_NO_DEVICE || (r == 0 && (s->cu.cuDeviceGetCount(&s->n_devices) != 0 || s->n_devices == 0))) {
        s->driver_status = MFM_ERR_CUDA_NO_DEVICE;
        snprintf(s->driver_why, sizeof s->driver_why, "the CUDA driver (CUDA %d.%d) sees no GPU; check CUDA_VISIBLE_DEVICES and that the GPU is visible to this process",
                 s->driver_version / 1000, s->driver_version % 1000 / 10);
        return;
    }
    if (r == MFM__CU_STUB_LIBRARY) {
        snprintf(s->driver_why, sizeof s->driver_why, "%s is the CUDA toolkit's stub, not the driver; install the NVIDIA driver or fix the library path", name);
        return;
    }
    if (r != 0) {
        mfm_error e;
        mfm__cu_fail(&e, r, "cuInit (starting the CUDA driver)");
        s->driver_status = MFM_ERR_CUDA;
        snprintf(s->driver_why, sizeof s->driver_why, "%s", e.message);
        return;
    }
    if (!(s->devices = (mfm__gpu_device *)mfm__calloc((uint64_t)s->n_devices, sizeof(mfm__gpu_device)))) {
        s->driver_status = MFM_ERR_OUT_OF_MEMORY;
        snprintf(s->driver_why, sizeof s->driver_why, "out of memory for %d CUDA devices", s->n_devices);
        return;
    }
    s->driver_status = MFM_OK;
}

/* A library loaded once per process, under the lock; every later call answers with the outcome
   (a failure's sentence included). */
static mfm_status mfm__load_once(int *tried, void (*load_locked)(void), const mfm_status *status, const char *why, mfm_error *err) {
    mfm_status st;
    mfm__cuda_lock();
    if (!*tried) load_locked();
    st = *status;
    mfm__cuda_unlock();
    return st == MFM_OK ? MFM_OK : mfm__fail(err, st, "%s", why);
}

static mfm_status mfm__driver_load(mfm_error *err) {
    return mfm__load_once(&mfm__cuda.driver_tried, mfm__driver_load_locked, &mfm__cuda.driver_status, mfm__cuda.driver_why, err);
}

MFMDEF int mfm_cuda_available(void) { return mfm__driver_load(NULL) == MFM_OK; }

static mfm_status mfm__configure_path(char *setting, const char *path, int loaded, const char *field, mfm_error *err) {
    if (path && strlen(path) >= sizeof mfm__settings.driver)
        return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "mfm_cuda_config.%s is %u characters long, more than the %u this library keeps", field,
                         (unsigned)strlen(path), (unsigned)sizeof mfm__settings.driver - 1);
    if (loaded && strcmp(path ? path : "", setting) != 0)
        return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "mfm_cuda_config.%s cannot change: this process already loaded %s; configure before the first GPU call",
                         field, setting[0] ? setting : "the library it found by itself");
    snprintf(setting, sizeof mfm__settings.driver, "%s", path ? path : "");
    return MFM_OK;
}

MFMDEF mfm_status mfm_cuda_configure(const mfm_cuda_config *config, mfm_error *err) {
    mfm_cuda_config none;
    struct mfm__cuda_settings before;
    mfm_status st;
    if (!config) {
        memset(&none, 0, sizeof none);
        config = &none;
    }
    if ((unsigned)config->cache_mode >= (unsigned)MFM_CACHE_MODE_COUNT)
        return mfm__fail(err, MFM_ERR_INVALID_PARAM, "mfm_cuda_config.cache_mode = %d is not a cache mode (0 default, 1 on, 2 readonly, 3 off)",
                         (int)config->cache_mode);
    if (config->cache_dir && strlen(config->cache_dir) >= sizeof mfm__settings.cache_dir)
        return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "mfm_cuda_config.cache_dir is longer than the %u characters this library keeps",
                         (unsigned)sizeof mfm__settings.cache_dir - 1);
    mfm__cuda_lock();
    before = mfm__settings;
    st = mfm__configure_path(mfm__settings.driver, config->driver_library, mfm__cuda.driver_tried, "driver_library", err);
    if (st == MFM_OK) st = mfm__configure_path(mfm__settings.nvrtc, config->nvrtc_library, mfm__cuda.nvrtc_tried, "nvrtc_library", err);
    if (st == MFM_OK && mfm__cuda.nccl_tried && mfm__cuda.nccl_status != MFM_OK && strcmp(config->nccl_library ? config->nccl_library : "", mfm__settings.nccl) != 0)
        mfm__cuda.nccl_tried = 0; /* nothing was loaded: another path is looked at afresh */
    if (st == MFM_OK) st = mfm__configure_path(mfm__settings.nccl, config->nccl_library, mfm__cuda.nccl_tried, "nccl_library", err);
    if (st == MFM_OK) {
        snprintf(mfm__settings.cache_dir, sizeof mfm__settings.cache_dir, "%s", config->cache_dir ? config->cache_dir : "");
        mfm__settings.cache_mode = config->cache_mode;
    } else {
        mfm__settings = before; /* nothing partially applied */
    }
    mfm__cuda_unlock();
    return st == MFM_OK ? mfm__ok(err) : st;
}

/* Tries one NVRTC library; keeps it when its version fits the driver. */
static int mfm__nvrtc_try(const char *path, int max_major, char *tried, size_t cap) {
    mfm__cuda_state *s = &mfm__cuda;
    char why[256] = "";
    void *lib = mfm__library_open(path, 0, why, sizeof why);
    const char *missing;
    int major = 0, minor = 0, n = 0;
    if (!lib) return 0;
    memset(&s->rtc, 0, sizeof s->rtc);
    if ((missing = mfm__resolve_nvrtc(lib, &s->rtc)) != NULL || s->rtc.nvrtcVersion(&major, &minor) != 0 || major > max_major) {
        size_t used = strlen(tried);
        if (missing)
            snprintf(tried + used, cap - used, "; %s has no %s", path, missing);
        else
            snprintf(tried + used, cap - used, "; %s is NVRTC %d.%d, newer than the driver's CUDA %d", path, major, minor, max_major);
        mfm__library_close(lib);
        return 0;
    }
    s->nvrtc_library = lib;
    s->nvrtc_major = major;
    s->nvrtc_minor = minor;
    snprintf(s->nvrtc_path, sizeof s->nvrtc_path, "%s", path);
    if (s->rtc.nvrtcGetNumSupportedArchs && s->rtc.nvrtcGetSupportedArchs && s->rtc.nvrtcGetNumSupportedArchs(&n) == 0 && n > 0 &&
        n <= (int)(sizeof s->archs / sizeof s->archs[0]) && s->rtc.nvrtcGetSupportedArchs(s->archs) == 0)
        s->n_archs = n;
    return 1;
}

/* NVRTC by versioned names, newest first and never newer than the driver: MFM_NVRTC_PATH alone
   when set; else each name on the system's library path, then in the toolkit's folders. */
static void mfm__nvrtc_load_locked(void) {
    mfm__cuda_state *s = &mfm__cuda;
    const char *env = mfm__setting(mfm__settings.nvrtc, "MFM_NVRTC_PATH");
    const char *dirs[4];
    char tried[512] = "", name[64], path[512], where[256] = "";
    int n_dirs = 0, max_major, d, v;
    static const int old_minors[] = {112, 111, 110}; /* 11.2 to 11.8 all call themselves 11.2 */
    s->nvrtc_tried = 1;
    s->nvrtc_status = MFM_ERR_NVRTC_UNAVAILABLE;
    if (env && *env) {
        if (!mfm__nvrtc_try(env, 1 << 20, tried, sizeof tried))
            snprintf(s->nvrtc_why, sizeof s->nvrtc_why, "no NVRTC: MFM_NVRTC_PATH=%s could not be loaded as NVRTC%s", env, tried);
        else
            s->nvrtc_status = MFM_OK;
        return;
    }
    max_major = s->driver_status == MFM_OK ? s->driver_version / 1000 : 20;
#if defined(_WIN32)
    if ((dirs[n_dirs] = getenv("CUDA_PATH")) != NULL) n_dirs++;
#else
    if ((dirs[n_dirs] = getenv("CUDA_PATH")) != NULL) n_dirs++;
    if ((dirs[n_dirs] = getenv("CUDA_HOME")) != NULL) n_dirs++;
    dirs[n_dirs++] = "/usr/local/cuda";
#endif
    for (d = -1; d < n_dirs; d++) { /* -1: the system's search path */
        for (v = 0; v < max_major - 11 + 3; v++) {
            const int old = v - (max_major - 11); /* >= 0: the 11.x names, which carry a minor */
#if defined(_WIN32)
            if (old < 0)
                snprintf(name, sizeof name, "nvrtc64_%d0_0.dll", max_major - v);
            else
                snprintf(name, sizeof name, "nvrtc64_%d_0.dll", old_minors[old]);
            if (d < 0)
                snprintf(path, sizeof path, "%s", name);
            else
                snprintf(path, sizeof path, "%s\\bin\\x64\\%s", dirs[d], name);
#else
            if (old < 0)
                snprintf(name, sizeof name, "libnvrtc.so.%d", max_major - v);
            else
                snprintf(name, sizeof name, "libnvrtc.so.%d.%d", old_minors[old] / 10, old_minors[old] % 10);
            if (d < 0)
                snprintf(path, sizeof path, "%s", name);
            else
                snprintf(path, sizeof path, "%s/lib64/%s", dirs[d], name);
#endif
            if (mfm__nvrtc_try(path, max_major, tried, sizeof tried)) {
                s->nvrtc_status = MFM_OK;
                return;
            }
        }
    }
    for (d = 0; d < n_dirs; d++) {
        size_t used = strlen(where);
        snprintf(where + used, sizeof where - used, "%s%s", d ? ", " : "", dirs[d]);
    }
    snprintf(s->nvrtc_why, sizeof s->nvrtc_why,
             "no NVRTC: no NVRTC library of CUDA %d or older (the driver's) loads from the library path or from the CUDA folders (%s)%s; "
             "install the CUDA NVRTC runtime, or set MFM_NVRTC_PATH to the library",
             max_major, n_dirs ? where : "none", tried);
}

static mfm_status mfm__nvrtc_load(mfm_error *err) {
    mfm__driver_load(NULL); /* the driver's CUDA version, where there is one, bounds NVRTC's */
    return mfm__load_once(&mfm__cuda.nvrtc_tried, mfm__nvrtc_load_locked, &mfm__cuda.nvrtc_status, mfm__cuda.nvrtc_why, err);
}

/* ---- NCCL: only for training on several GPUs ---- */

#if !defined(_WIN32) /* NVIDIA builds NCCL for Linux only */
/* Tries one NCCL library; keeps it when it has every function and answers its version. */
static int mfm__nccl_try(const char *path, char *tried, size_t cap) {
    mfm__cuda_state *s = &mfm__cuda;
    char why[256] = "";
    void *lib = mfm__library_open(path, 0, why, sizeof why);
    const char *missing;
    size_t used = strlen(tried);
    if (!lib) {
        if (strchr(path, '/')) { /* a file that is there but does not load says why; absent ones are many */
            struct stat st_;
            if (stat(path, &st_) == 0) snprintf(tried + used, cap - used, "; %s: %s", path, why);
        }
        return 0;
    }
    memset(&s->nccl, 0, sizeof s->nccl);
    if ((missing = mfm__resolve_nccl(lib, &s->nccl)) != NULL || s->nccl.ncclGetVersion(&s->nccl_version) != 0) {
        snprintf(tried + used, cap - used, "; %s %s", path, missing ? "has no " : "does not answer ncclGetVersion");
        if (missing) snprintf(tried + strlen(tried), cap - strlen(tried), "%s", missing);
        mfm__library_close(lib);
        s->nccl_version = 0;
        return 0;
    }
    s->nccl_library = lib;
    snprintf(s->nccl_path, sizeof s->nccl_path, "%s", path);
    return 1;
}

/* Python's NVIDIA wheel (pip install nvidia-nccl-cu12 / -cu13, which PyTorch pulls in) keeps
   the library in <prefix>/lib/python3.X/{site,dist}-packages/nvidia/nccl/lib. */
static int mfm__nccl_try_wheels(const char *prefix, char *tried, size_t cap) {
    static const char *const kinds[] = {"site-packages", "dist-packages"};
    char lib_dir[512], path[1024];
    struct dirent *e;
    DIR *dir;
    int found = 0, k;
    if (!prefix || !*prefix) return 0;
    snprintf(lib_dir, sizeof lib_dir, "%s/lib", prefix);
    if (!(dir = opendir(lib_dir))) return 0;
    while (!found && (e = readdir(dir)) != NULL) {
        if (strncmp(e->d_name, "python3", 7) != 0) continue;
        for (k = 0; k < 2 && !found; k++) {
            snprintf(path, sizeof path, "%s/%s/%s/nvidia/nccl/lib/libnccl.so.2", lib_dir, e->d_name, kinds[k]);
            found = access(path, R_OK) == 0 && mfm__nccl_try(path, tried, cap);
        }
    }
    closedir(dir);
    return found;
}
#endif

/* NCCL 2: MFM_NCCL_LIBRARY alone when set; else libnccl.so.2 on the system's library path, in
   the CUDA folders, then in the Python wheel of the active virtual or conda environment, the
   user's and the system's Pythons. Called under the lock. */
static void mfm__nccl_load_locked(void) {
    mfm__cuda_state *s = &mfm__cuda;
    const char *env = mfm__setting(mfm__settings.nccl, "MFM_NCCL_LIBRARY");
    char tried[1024] = "";
    s->nccl_tried = 1;
    s->nccl_status = MFM_ERR_NCCL_UNAVAILABLE;
#if defined(_WIN32)
    (void)env;
    (void)tried;
    snprintf(s->nccl_why, sizeof s->nccl_why, "no NCCL: NVIDIA builds NCCL for Linux only, so training on several GPUs needs Linux; train on one GPU (params.n_devices = 1)");
#else
    if (env) {
        if (mfm__nccl_try(env, tried, sizeof tried))
            s->nccl_status = MFM_OK;
        else
            snprintf(s->nccl_why, sizeof s->nccl_why, "no NCCL: MFM_NCCL_LIBRARY (or mfm_cuda_config.nccl_library) = %s could not be loaded as NCCL 2%s", env,
                     tried[0] ? tried : ": there is no such file, or the loader could not open it");
        return;
    }
    {
        const char *cuda_dirs[3], *home = getenv("HOME");
        static const char *const sub[] = {"lib64", "lib", "targets/x86_64-linux/lib", "targets/sbsa-linux/lib"};
        char path[1024], user[512] = "";
        size_t d, j;
        int n_dirs = 0;
        if (mfm__nccl_try("libnccl.so.2", tried, sizeof tried)) goto found;
        if ((cuda_dirs[n_dirs] = getenv("CUDA_PATH")) != NULL && *cuda_dirs[n_dirs]) n_dirs++;
        if ((cuda_dirs[n_dirs] = getenv("CUDA_HOME")) != NULL && *cuda_dirs[n_dirs]) n_dirs++;
        cuda_dirs[n_dirs++] = "/usr/local/cuda";
        for (d = 0; d < (size_t)n_dirs; d++)
            for (j = 0; j < sizeof sub / sizeof sub[0]; j++) {
                snprintf(path, sizeof path, "%s/%s/libnccl.so.2", cuda_dirs[d], sub[j]);
                if (access(path, R_OK) == 0 && mfm__nccl_try(path, tried, sizeof tried)) goto found;
            }
        if (home) snprintf(user, sizeof user, "%s/.local", home);
        if (mfm__nccl_try_wheels(getenv("VIRTUAL_ENV"), tried, sizeof tried) || mfm__nccl_try_wheels(getenv("CONDA_PREFIX"), tried, sizeof tried) ||
            mfm__nccl_try_wheels(user, tried, sizeof tried) || mfm__nccl_try_wheels("/usr/local", tried, sizeof tried) ||
            mfm__nccl_try_wheels("/usr", tried, sizeof tried) || mfm__nccl_try_wheels("/opt/conda", tried, sizeof tried))
            goto found;
        if (getenv("CONDA_PREFIX")) { /* conda's nccl package */
            snprintf(path, sizeof path, "%s/lib/libnccl.so.2", getenv("CONDA_PREFIX"));
            if (access(path, R_OK) == 0 && mfm__nccl_try(path, tried, sizeof tried)) goto found;
        }
        snprintf(s->nccl_why, sizeof s->nccl_why,
                 "no NCCL: libnccl.so.2 loads neither from the library path nor from the CUDA folders ($CUDA_PATH, $CUDA_HOME, /usr/local/cuda) "
                 "nor from a Python environment's nvidia/nccl wheel%s; training on several GPUs needs NCCL 2: install it (e.g. pip install nvidia-nccl-cu12, "
                 "or the libnccl2 package), or set MFM_NCCL_LIBRARY to the library",
                 tried);
        return;
    found:
        s->nccl_status = MFM_OK;
    }
#endif
}

static mfm_status mfm__nccl_load(mfm_error *err) {
    return mfm__load_once(&mfm__cuda.nccl_tried, mfm__nccl_load_locked, &mfm__cuda.nccl_status, mfm__cuda.nccl_why, err);
}

/* "ncclAllReduce failed: unhandled cuda error (1)" */
static mfm_status mfm__nccl_fail(mfm_error *err, int r, const char *step) {
    const char *text = mfm__cuda.nccl.ncclGetErrorString ? mfm__cuda.nccl.ncclGetErrorString(r) : NULL;
    return mfm__fail(err, MFM_ERR_CUDA, "%s failed in NCCL: %s (%d)", step, text ? text : "no description", r);
}

#endif /* MFM__GPU */

/* ============================================================================================
   >>kernel-cache  Compiled kernels on disk, one file per sources x options x arch x NVRTC
   ============================================================================================

   What gets cached is the image the driver loads: CUBIN (sm_XY) when NVRTC knows the GPU's
   architecture, PTX (compute_XY of NVRTC's newest) for a newer GPU. The key is XXH3-128 of a
   text that names everything the image depends on:
       modern_fm kernels / format / library version / sources (length, XXH3-128) / options /
       kind / arch / NVRTC version / pointer size
   An entry is <dir>/v1/<kind>-<arch>-nvrtc<M>.<m>-<key>.mfmk: a 56-byte little-endian header
   ("MFMK", format, kind, arch, NVRTC major and minor, payload length, the key, XXH3-64 of the
   payload), then the image. Entries are written to a unique temporary file and renamed into
   place, so concurrent writers leave one whole entry; an entry that fails any check is a
   miss, removed and written again. A warm cache needs no NVRTC: the names say which NVRTC
   built each entry, and the key is recomputed for that version. An unwritable cache never
   fails a run. */

#if MFM__GPU

#define MFM__CACHE_FORMAT 1
#define MFM__CACHE_HEADER 56
enum { MFM__IMAGE_CUBIN = 1, MFM__IMAGE_PTX = 2 };

typedef struct mfm__image {
    int kind, arch, nvrtc_major, nvrtc_minor;
    unsigned char key[16];
    char name[160]; /* the entry's file name */
    char *bytes;    /* owned */
    size_t size;
} mfm__image;

static void mfm__hex(const unsigned char *bytes, int n, char *out) {
    static const char digits[] = "0123456789abcdef";
    int i;
    for (i = 0; i < n; i++) {
        out[2 * i] = digits[bytes[i] >> 4];
        out[2 * i + 1] = digits[bytes[i] & 15];
    }
    out[2 * n] = '\0';
}

/* The kernel sources as one string and its digest (made once, kept for the process). Under
   the lock. */
/* Makes `source` (allocated, NUL-terminated, `bytes` long) the program NVRTC compiles, with the
   digest that keys its cache entries. */
static const char *mfm__kernel_source_adopt(char *source, size_t bytes) {
    mfm__cuda_state *s = &mfm__cuda;
    XXH128_canonical_t canon;
    MFM_FREE(s->source);
    s->source = source;
    s->source_bytes = bytes;
    XXH128_canonicalFromHash(&canon, XXH3_128bits(source, bytes));
    mfm__hex(canon.digest, 16, s->source_digest);
    return source;
}

static const char *mfm__kernel_source(void) {
    size_t i, total = 0;
    char *source;
    if (mfm__cuda.source) return mfm__cuda.source;
    for (i = 0; i < MFM__KERNEL_CHUNK_COUNT; i++) total += strlen(mfm__kernel_chunks[i]);
    if (!(source = (char *)mfm__alloc(total + 1, 1))) return NULL;
    for (total = 0, i = 0; i < MFM__KERNEL_CHUNK_COUNT; i++) {
        size_t n = strlen(mfm__kernel_chunks[i]);
        memcpy(source + total, mfm__kernel_chunks[i], n);
        total += n;
    }
    source[total] = '\0';
    return mfm__kernel_source_adopt(source, total);
}

/* NVRTC's options for an image: the arch flag first, exactly as passed. */
static int mfm__nvrtc_options(int kind, int arch, char arch_option[48], const char *options[4]) {
    snprintf(arch_option, 48, "--gpu-architecture=%s_%d", kind == MFM__IMAGE_CUBIN ? "sm" : "compute", arch);
    options[0] = arch_option;
    options[1] = "--std=c++14";
    options[2] = "-default-device";
    return 3;
}

/* The key and the entry name of an image of `kind` for `arch` built by NVRTC major.minor.
   Under the lock, with the sources made (mfm__kernel_source). */
static void mfm__image_key(mfm__image *im) {
    char text[1024], arch_option[48], hex[33];
    const char *options[4];
    int n_options = mfm__nvrtc_options(im->kind, im->arch, arch_option, options), i;
    size_t used;
    XXH128_hash_t h;
    XXH128_canonical_t canon;
    used = (size_t)snprintf(text, sizeof text, "modern_fm kernels\nformat=%d\nlibrary=%s\nsources=%lu:%s\noptions=", MFM__CACHE_FORMAT,
                            MFM_VERSION_STRING, (unsigned long)mfm__cuda.source_bytes, mfm__cuda.source_digest);
    for (i = 0; i < n_options && used < sizeof text; i++) used += (size_t)snprintf(text + used, sizeof text - used, "%s%s", i ? " " : "", options[i]);
    if (used < sizeof text)
        used += (size_t)snprintf(text + used, sizeof text - used, "\nkind=%s\narch=%d\nnvrtc=%d.%d\npointer_bits=%d\n",
                                 im->kind == MFM__IMAGE_CUBIN ? "cubin" : "ptx", im->arch, im->nvrtc_major, im->nvrtc_minor, (int)(8 * sizeof(void *)));
    h = XXH3_128bits(text, used < sizeof text ? used : sizeof text - 1);
    XXH128_canonicalFromHash(&canon, h);
    memcpy(im->key, canon.digest, 16);
    mfm__hex(im->key, 16, hex);
    snprintf(im->name, sizeof im->name, "%s-%s_%d-nvrtc%d.%d-%s.mfmk", im->kind == MFM__IMAGE_CUBIN ? "cubin" : "ptx",
             im->kind == MFM__IMAGE_CUBIN ? "sm" : "compute", im->arch, im->nvrtc_major, im->nvrtc_minor, hex);
}

#if defined(S_ISDIR)
#define MFM__IS_DIR(mode) S_ISDIR(mode)
#else /* MSVC */
#define MFM__IS_DIR(mode) (((mode) & _S_IFMT) == _S_IFDIR)
#endif

/* The cache mode in force (mfm_cuda_config, else MFM_CACHE): OFF, READONLY or ON; COUNT (and
   err filled) for an MFM_CACHE that names no mode. Under the lock. */
static mfm_cache_mode mfm__cache_mode(mfm_error *err) {
    const char *e;
    if (mfm__settings.cache_mode != MFM_CACHE_DEFAULT) return mfm__settings.cache_mode;
    e = getenv("MFM_CACHE");
    if (!e || !*e || !strcmp(e, "on") || !strcmp(e, "1") || !strcmp(e, "yes") || !strcmp(e, "true")) return MFM_CACHE_ON;
    if (!strcmp(e, "off") || !strcmp(e, "0") || !strcmp(e, "no") || !strcmp(e, "false")) return MFM_CACHE_OFF;
    if (!strcmp(e, "readonly") || !strcmp(e, "read-only") || !strcmp(e, "ro")) return MFM_CACHE_READONLY;
    mfm__fail(err, MFM_ERR_INVALID_PARAM, "MFM_CACHE=%s is not a kernel cache mode: use on, off or readonly", e);
    return MFM_CACHE_MODE_COUNT;
}

/* <root>/v1 into out. 1: the cache has a folder; 0: the cache is off, or no folder can be named
   (out ""); -1: a setting is wrong (an unknown MFM_CACHE, a root that is a file; err says
   which). Under the lock. */
static int mfm__cache_dir(char *out, size_t cap, mfm_error *err) {
    const char *e;
    int n = -1;
    mfm_cache_mode mode = mfm__cache_mode(err);
    out[0] = '\0';
    if (mode == MFM_CACHE_MODE_COUNT) return -1;
    if (mode == MFM_CACHE_OFF) return 0;
    if ((e = mfm__setting(mfm__settings.cache_dir, "MFM_CACHE_DIR")) != NULL) {
        struct stat st;
        if (stat(e, &st) == 0 && !MFM__IS_DIR(st.st_mode)) {
            mfm__fail(err, MFM_ERR_INVALID_PARAM, "the kernel cache folder %s (%s) is not a folder", e,
                      mfm__settings.cache_dir[0] ? "mfm_cuda_config.cache_dir" : "MFM_CACHE_DIR");
            return -1;
        }
        n = snprintf(out, cap, "%s/v1", e);
    }
#if defined(_WIN32)
    else if ((e = getenv("LOCALAPPDATA")) != NULL && *e) /* not roaming AppData: caches stay on their machine */
        n = snprintf(out, cap, "%s\\modern_fm\\cache\\v1", e);
#else
    else if ((e = getenv("XDG_CACHE_HOME")) != NULL && e[0] == '/') /* the XDG rule: relative values are ignored */
        n = snprintf(out, cap, "%s/modern_fm/v1", e);
    else if ((e = getenv("HOME")) != NULL && *e)
        n = snprintf(out, cap, "%s/.cache/modern_fm/v1", e);
#endif
    if (n > 0 && (size_t)n < cap) return 1;
    out[0] = '\0';
    return 0;
}

/* Calls fn for every file of the cache directory whose name ends in .mfmk or holds ".tmp-". */
typedef void (*mfm__cache_visit_fn)(void *ctx, const char *dir, const char *name);

static void mfm__cache_visit(const char *dir, mfm__cache_visit_fn fn, void *ctx) {
#if defined(_WIN32)
    char pattern[600];
    WIN32_FIND_DATAA found;
    HANDLE h;
    snprintf(pattern, sizeof pattern, "%s\\*", dir);
    if ((h = FindFirstFileA(pattern, &found)) == INVALID_HANDLE_VALUE) return;
    do {
        size_t n = strlen(found.cFileName);
        if ((n > 5 && !strcmp(found.cFileName + n - 5, ".mfmk")) || strstr(found.cFileName, ".tmp-")) fn(ctx, dir, found.cFileName);
    } while (FindNextFileA(h, &found));
    FindClose(h);
#else
    DIR *dp = opendir(dir);
    struct dirent *e;
    if (!dp) return;
    while ((e = readdir(dp)) != NULL) {
        size_t n = strlen(e->d_name);
        if ((n > 5 && !strcmp(e->d_name + n - 5, ".mfmk")) || strstr(e->d_name, ".tmp-")) fn(ctx, dir, e->d_name);
    }
    closedir(dp);
#endif
}

/* mkdir -p, mode 0700; 0 when the directory is not there afterwards. */
static int mfm__make_dirs(const char *dir) {
    char path[640];
    size_t i, n = strlen(dir);
    struct stat st;
    if (n >= sizeof path) return 0;
    memcpy(path, dir, n + 1);
    for (i = 1; i <= n; i++) {
        if (path[i] == '/' || path[i] == '\\' || path[i] == '\0') {
            char c = path[i];
            path[i] = '\0';
            if (stat(path, &st) != 0) {
#if defined(_WIN32)
                CreateDirectoryA(path, NULL);
#else
                mkdir(path, 0700);
#endif
            }
            path[i] = c;
        }
    }
    return stat(dir, &st) == 0;
}

/* An entry's bytes are whole: magic, format, a length that matches, the image's checksum. */
static int mfm__cache_entry_whole(const unsigned char *b, uint64_t size) {
    return size > MFM__CACHE_HEADER && memcmp(b, "MFMK", 4) == 0 && mfm__load_le32(b + 4) == MFM__CACHE_FORMAT &&
           mfm__load_le64(b + 24) == size - MFM__CACHE_HEADER &&
           XXH3_64bits(b + MFM__CACHE_HEADER, (size_t)(size - MFM__CACHE_HEADER)) == mfm__load_le64(b + 48);
}

/* Reads an entry: whole, and the image that its name promises (kind, arch, NVRTC version, key);
   a bad one is removed. 1 = hit (im->bytes owned). */
static int mfm__cache_read(const char *dir, mfm__image *im) {
    char path[704];
    mfm__mapping map;
    const unsigned char *b;
    int ok;
    snprintf(path, sizeof path, "%s/%s", dir, im->name);
    if (mfm__map(path, &map, NULL) != MFM_OK) return 0;
    b = map.bytes;
    ok = mfm__cache_entry_whole(b, map.size) && mfm__load_le32(b + 8) == (uint32_t)im->kind && mfm__load_le32(b + 12) == (uint32_t)im->arch &&
         mfm__load_le32(b + 16) == (uint32_t)im->nvrtc_major && mfm__load_le32(b + 20) == (uint32_t)im->nvrtc_minor && memcmp(b + 32, im->key, 16) == 0 &&
         (im->bytes = (char *)mfm__alloc(map.size - MFM__CACHE_HEADER + 1, 1)) != NULL;
    if (ok) {
        im->size = (size_t)(map.size - MFM__CACHE_HEADER);
        memcpy(im->bytes, b + MFM__CACHE_HEADER, im->size);
        im->bytes[im->size] = '\0'; /* PTX is text */
    }
    mfm__unmap(&map);
    if (!ok) remove(path); /* a torn, foreign or corrupted entry: a miss, written again after the compile */
    return ok;
}

/* Publishes an entry: a unique temporary file in the same directory, renamed into place.
   0 with err's sentence saying why it could not be. */
static int mfm__cache_write(const char *dir, const mfm__image *im, mfm_error *err) {
    char path[704];
    unsigned char header[MFM__CACHE_HEADER];
    mfm__writer w;
    if (!mfm__make_dirs(dir)) {
        mfm__fail(err, MFM_ERR_IO, "cannot create the kernel cache folder %s: %s", dir, mfm__os_error());
        return 0;
    }
    snprintf(path, sizeof path, "%s/%s", dir, im->name);
    memcpy(header, "MFMK", 4);
    mfm__store_le(header + 4, MFM__CACHE_FORMAT, 4);
    mfm__store_le(header + 8, (uint64_t)im->kind, 4);
    mfm__store_le(header + 12, (uint64_t)im->arch, 4);
    mfm__store_le(header + 16, (uint64_t)im->nvrtc_major, 4);
    mfm__store_le(header + 20, (uint64_t)im->nvrtc_minor, 4);
    mfm__store_le(header + 24, (uint64_t)im->size, 8);
    memcpy(header + 32, im->key, 16);
    mfm__store_le(header + 48, XXH3_64bits(im->bytes, im->size), 8);
    if (mfm__writer_open(&w, path, err) != MFM_OK) return 0;
    mfm__write(&w, header, sizeof header);
    mfm__write(&w, im->bytes, im->size);
    return mfm__writer_commit(&w, err) == MFM_OK;
}

/* Runs NVRTC. Under the lock, with NVRTC loaded. */
static mfm_status mfm__nvrtc_compile(mfm__image *im, mfm_error *err) {
    mfm__nvrtc_api *rtc = &mfm__cuda.rtc;
    const char *source = mfm__kernel_source(), *options[4];
    char arch_option[48];
    int n_options, r;
    mfm__nvrtc_program prog = NULL;
    size_t size = 0;
    if (!source) return mfm__fail(err, MFM_ERR_OUT_OF_MEMORY, "out of memory for the kernel sources");
    n_options = mfm__nvrtc_options(im->kind, im->arch, arch_option, options);
    if ((r = rtc->nvrtcCreateProgram(&prog, source, "modern_fm_kernels.cu", 0, NULL, NULL)) != 0)
        return mfm__fail(err, MFM_ERR_NVRTC_COMPILE, "NVRTC %d.%d could not create the kernel program (nvrtcResult %d)", im->nvrtc_major, im->nvrtc_minor, r);
    if ((r = rtc->nvrtcCompileProgram(prog, n_options, options)) != 0) {
        char log[400] = "";
        size_t n = 0;
        if (rtc->nvrtcGetProgramLogSize(prog, &n) == 0 && n > 1) {
            char *full = (char *)mfm__alloc(n, 1);
            if (full && rtc->nvrtcGetProgramLog(prog, full) == 0) snprintf(log, sizeof log, "%s", full);
            MFM_FREE(full);
        }
        rtc->nvrtcDestroyProgram(&prog);
        return mfm__fail(err, MFM_ERR_NVRTC_COMPILE, "NVRTC %d.%d (%s) could not compile the kernels for %s (nvrtcResult %d)%s%s%s", im->nvrtc_major,
                         im->nvrtc_minor, mfm__cuda.nvrtc_path, arch_option, r, *log ? ": " : "", log,
                         strstr(log, "builtins") ? " (libnvrtc-builtins must sit next to NVRTC, same version; see MFM_NVRTC_PATH)" : "");
    }
    r = im->kind == MFM__IMAGE_CUBIN ? rtc->nvrtcGetCUBINSize(prog, &size) : rtc->nvrtcGetPTXSize(prog, &size);
    if (r == 0 && size > 0 && (im->bytes = (char *)mfm__alloc(size + 1, 1)) != NULL) {
        r = im->kind == MFM__IMAGE_CUBIN ? rtc->nvrtcGetCUBIN(prog, im->bytes) : rtc->nvrtcGetPTX(prog, im->bytes);
        im->size = size;
        im->bytes[size] = '\0';
    } else if (r == 0) {
        r = -1;
    }
    rtc->nvrtcDestroyProgram(&prog);
    if (r != 0) {
        MFM_FREE(im->bytes);
        im->bytes = NULL;
        return mfm__fail(err, MFM_ERR_NVRTC_COMPILE, "NVRTC %d.%d compiled the kernels but gave no image (nvrtcResult %d)", im->nvrtc_major, im->nvrtc_minor, r);
    }
    return MFM_OK;
}

/* The image for (kind, arch) with the loaded NVRTC: from the cache, else compiled and stored.
   Under the lock. */
static mfm_status mfm__image_get(mfm__image *im, mfm_kernel_build *build, mfm_error *err) {
    char dir[512];
    mfm_error dir_why; /* a cache folder that cannot be one fails no run: it only stores nothing */
    mfm_cache_mode mode = mfm__cache_mode(err);
    int have_dir = mfm__cache_dir(dir, sizeof dir, &dir_why);
    const char *source = mfm__kernel_source();
    double start = mfm__seconds();
    mfm_status st;
    if (mode == MFM_CACHE_MODE_COUNT) return MFM_ERR_INVALID_PARAM; /* an MFM_CACHE that names no mode: err says so */
    if (!source) return mfm__fail(err, MFM_ERR_OUT_OF_MEMORY, "out of memory for the kernel sources");
    im->nvrtc_major = mfm__cuda.nvrtc_major;
    im->nvrtc_minor = mfm__cuda.nvrtc_minor;
    mfm__image_key(im);
    memset(build, 0, sizeof *build);
    snprintf(build->kind, sizeof build->kind, "%s", im->kind == MFM__IMAGE_CUBIN ? "cubin" : "ptx");
    build->arch = im->arch;
    if (have_dir > 0) snprintf(build->path, sizeof build->path, "%s/%s", dir, im->name);
    if (have_dir > 0 && mfm__cache_read(dir, im)) {
        build->from_cache = 1;
    } else {
        mfm_error why;
        if ((st = mfm__nvrtc_compile(im, err)) != MFM_OK) return st;
        if (mode == MFM_CACHE_OFF)
            snprintf(build->not_stored, sizeof build->not_stored, "the kernel cache is off (MFM_CACHE or mfm_cuda_config.cache_mode)");
        else if (mode == MFM_CACHE_READONLY)
            snprintf(build->not_stored, sizeof build->not_stored, "the kernel cache is read-only (MFM_CACHE or mfm_cuda_config.cache_mode)");
        else if (have_dir < 0)
            snprintf(build->not_stored, sizeof build->not_stored, "%s", dir_why.message);
        else if (!have_dir)
            snprintf(build->not_stored, sizeof build->not_stored, "no folder for the kernel cache: set MFM_CACHE_DIR (or HOME)");
        else if (!(build->stored = mfm__cache_write(dir, im, &why)))
            snprintf(build->not_stored, sizeof build->not_stored, "%s", why.message);
    }
    build->image_bytes = im->size;
    build->seconds = mfm__seconds() - start;
    return MFM_OK;
}

/* An entry that some NVRTC built for this GPU, found without NVRTC: CUBIN for its exact arch,
   else PTX of the newest arch not above it; the newest NVRTC first (PTX: not newer than the
   driver, which refuses newer PTX). A name counts only when its key, recomputed for the kind,
   arch and NVRTC version that the name gives, is the one it carries: entries of other sources
   or library versions are passed over. */
typedef struct mfm__image_search {
    int cc, max_major;
    long best_rank;
    mfm__image best;
} mfm__image_search;

static void mfm__image_consider(void *ctx, const char *dir, const char *name) {
    mfm__image_search *q = (mfm__image_search *)ctx;
    mfm__image im;
    char kind[8];
    long rank;
    (void)dir;
    memset(&im, 0, sizeof im);
    if (sscanf(name, "%7[a-z]-%*[a-z]_%d-nvrtc%d.%d-", kind, &im.arch, &im.nvrtc_major, &im.nvrtc_minor) != 4) return;
    im.kind = !strcmp(kind, "cubin") ? MFM__IMAGE_CUBIN : !strcmp(kind, "ptx") ? MFM__IMAGE_PTX : 0;
    if (im.kind == MFM__IMAGE_CUBIN ? im.arch != q->cc : im.kind != MFM__IMAGE_PTX || im.arch > q->cc || im.nvrtc_major > q->max_major) return;
    if (im.arch < 0 || im.arch > 9999 || im.nvrtc_major < 0 || im.nvrtc_major > 999 || im.nvrtc_minor < 0 || im.nvrtc_minor > 99) return;
    rank = (im.kind == MFM__IMAGE_CUBIN ? 100000000L : 0) + im.arch * 100000L + im.nvrtc_major * 100L + im.nvrtc_minor;
    if (rank <= q->best_rank) return;
    mfm__image_key(&im);
    if (strcmp(im.name, name) != 0) return;
    q->best_rank = rank;
    q->best = im;
}

static int mfm__image_find(int cc, int max_major, mfm__image *im, mfm_kernel_build *build) {
    mfm__image_search q;
    char dir[512];
    double start = mfm__seconds();
    if (!mfm__kernel_source() || mfm__cache_dir(dir, sizeof dir, NULL) <= 0) return 0;
    memset(&q, 0, sizeof q);
    q.cc = cc;
    q.max_major = max_major;
    q.best_rank = -1;
    mfm__cache_visit(dir, mfm__image_consider, &q);
    if (q.best_rank < 0) return 0;
    *im = q.best;
    if (!mfm__cache_read(dir, im)) return 0;
    memset(build, 0, sizeof *build);
    build->from_cache = 1;
    snprintf(build->kind, sizeof build->kind, "%s", im->kind == MFM__IMAGE_CUBIN ? "cubin" : "ptx");
    build->arch = im->arch;
    build->image_bytes = im->size;
    snprintf(build->path, sizeof build->path, "%s/%s", dir, im->name);
    build->seconds = mfm__seconds() - start;
    return 1;
}

/* Which image a GPU of compute capability cc gets from the loaded NVRTC: CUBIN for its arch
   (or the newest of the same major below it), PTX of NVRTC's newest arch for a newer GPU. */
static mfm_status mfm__image_choose(int cc, mfm__image *im, mfm_error *err) {
    const mfm__cuda_state *s = &mfm__cuda;
    int i, best = 0;
    memset(im, 0, sizeof *im);
    if (s->n_archs == 0 || !s->rtc.nvrtcGetCUBIN) { /* NVRTC before 11.2: PTX for the GPU itself */
        im->kind = MFM__IMAGE_PTX;
        im->arch = cc;
        return MFM_OK;
    }
    for (i = 0; i < s->n_archs; i++)
        if (s->archs[i] <= cc && s->archs[i] / 10 == cc / 10 && s->archs[i] > best) best = s->archs[i];
    if (best) {
        im->kind = MFM__IMAGE_CUBIN;
        im->arch = best;
    } else if (cc > s->archs[s->n_archs - 1]) {
        im->kind = MFM__IMAGE_PTX;
        im->arch = s->archs[s->n_archs - 1];
    } else {
        return mfm__fail(err, MFM_ERR_DEVICE_UNSUPPORTED,
                         "the GPU is sm_%d, but NVRTC %d.%d (%s) builds for sm_%d and newer only; install the NVRTC of an older CUDA that still "
                         "supports sm_%d and point MFM_NVRTC_PATH at it",
                         cc, s->nvrtc_major, s->nvrtc_minor, s->nvrtc_path, s->archs[0], cc);
    }
    return MFM_OK;
}

MFMDEF mfm_status mfm_cuda_build_kernels(const char *arch, mfm_kernel_build *out, mfm_error *err) {
    mfm__image im;
    mfm_kernel_build build;
    mfm_status st;
    const char *p = arch;
    int i, known = 0;
    memset(&im, 0, sizeof im);
    if (!arch) return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "mfm_cuda_build_kernels: the arch is NULL");
    im.kind = MFM__IMAGE_CUBIN;
    if (!strncmp(p, "sm_", 3)) {
        p += 3;
    } else if (!strncmp(p, "compute_", 8)) {
        p += 8;
        im.kind = MFM__IMAGE_PTX;
    }
    for (i = 0; p[i] >= '0' && p[i] <= '9' && i < 4; i++) im.arch = im.arch * 10 + (p[i] - '0');
    if (i < 2 || p[i] != '\0')
        return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "arch \"%s\" is not an architecture: write it as sm_90, 90 or compute_90", arch);
    if ((st = mfm__nvrtc_load(err)) != MFM_OK) return st;
    mfm__cuda_lock();
    for (i = 0; i < mfm__cuda.n_archs; i++) known |= mfm__cuda.archs[i] == im.arch;
    if (mfm__cuda.n_archs && !known) {
        char list[256] = "";
        for (i = 0; i < mfm__cuda.n_archs; i++) {
            size_t used = strlen(list);
            snprintf(list + used, sizeof list - used, "%s%d", i ? " " : "", mfm__cuda.archs[i]);
        }
        mfm__cuda_unlock();
        return mfm__fail(err, MFM_ERR_DEVICE_UNSUPPORTED, "NVRTC %d.%d does not build for arch %d; it knows %s", mfm__cuda.nvrtc_major,
                         mfm__cuda.nvrtc_minor, im.arch, list);
    }
    if (im.kind == MFM__IMAGE_CUBIN && !mfm__cuda.rtc.nvrtcGetCUBIN) im.kind = MFM__IMAGE_PTX;
    st = mfm__image_get(&im, &build, err);
    mfm__cuda_unlock();
    MFM_FREE(im.bytes);
    if (st == MFM_OK && out) *out = build;
    return st == MFM_OK ? mfm__ok(err) : st;
}

#endif /* MFM__GPU */

/* ============================================================================================
   >>gpu-predict  Models and data on the device, and the prediction launches
   ============================================================================================

   Each device gets, on first use, its primary context (shared with any other CUDA user in the
   process; the caller's current context is restored before every return) and one module with
   all kernels. A model goes up as one table per class: per feature a record of the factors
   (FM/FwFM k, FFM n_fields x k) and then w, padded to a multiple of 4 floats, so that a
   feature's parameters are one contiguous read. Rows in host memory go up in chunks through
   two pinned buffers on two streams: while the GPU works on one chunk, the next is copied. */

#if MFM__GPU


/* Mirrors struct mfm_args of kernels/predict.cu, field for field. */
typedef struct mfm__gpu_args {
    mfm__cu_ptr offsets, features, fields, values, table, w0, pair_weights, scores;
    uint64_t n_rows, offset_base, class_stride;
    uint32_t n_fields, n_classes, k, stride, group, w_offset, stage_nnz;
    int32_t linear_only, pairs_only, normalize;
} mfm__gpu_args;

/* Makes device d ready: context, image (cache or NVRTC), module, functions. Under the lock. */
static mfm_status mfm__gpu_device_ready_locked(int d, mfm_error *err) {
    mfm__cuda_state *s = &mfm__cuda;
    mfm__driver_api *cu = &s->cu;
    mfm__gpu_device *dev = &s->devices[d];
    mfm__cu_device handle;
    mfm__cu_context saved = NULL;
    mfm__cu_result r;
    mfm__image im;
    mfm_status st = MFM_OK;
    int major = 0, minor = 0, attempt;
    double started;
    if (dev->ready) return MFM_OK;
    memset(&im, 0, sizeof im);
    if ((r = cu->cuDeviceGet(&handle, d)) != 0) return mfm__cu_fail(err, r, "cuDeviceGet");
    if ((r = cu->cuDeviceGetAttribute(&major, MFM__CU_ATTR_CC_MAJOR, handle)) != 0 ||
        (r = cu->cuDeviceGetAttribute(&minor, MFM__CU_ATTR_CC_MINOR, handle)) != 0 ||
        (r = cu->cuDeviceGetAttribute(&dev->sm_count, MFM__CU_ATTR_SM_COUNT, handle)) != 0)
        return mfm__cu_fail(err, r, "cuDeviceGetAttribute");
    dev->cc = major * 10 + minor;
    started = mfm__seconds();
    if (!dev->context && (r = cu->cuDevicePrimaryCtxRetain(&dev->context, handle)) != 0)
        return mfm__cu_fail(err, r, "cuDevicePrimaryCtxRetain (creating the GPU context)");
    dev->context_seconds = mfm__seconds() - started;
    cu->cuCtxGetCurrent(&saved);
    cu->cuCtxSetCurrent(dev->context);
    /* A warm cache is used before NVRTC is even loaded (loading NVRTC alone takes longer than
       reading an entry); a cached image the driver refuses is removed and built once more. */
    for (attempt = 0; attempt < 2 && st == MFM_OK; attempt++) {
        if (attempt > 0 || !mfm__image_find(dev->cc, s->driver_version / 1000, &im, &dev->build)) {
            if (!s->nvrtc_tried) mfm__nvrtc_load_locked();
            if (s->nvrtc_status != MFM_OK)
                st = mfm__fail(err, s->nvrtc_status, "%s (and the kernel cache holds no kernels for sm_%d)", s->nvrtc_why, dev->cc);
            else if ((st = mfm__image_choose(dev->cc, &im, err)) == MFM_OK)
                st = mfm__image_get(&im, &dev->build, err);
        }
        if (st != MFM_OK) break;
        started = mfm__seconds();
        r = cu->cuModuleLoadData(&dev->module, im.bytes);
        dev->build.load_seconds = mfm__seconds() - started;
        if (r == 0) break;
        if (dev->build.from_cache && (r == MFM__CU_INVALID_IMAGE || r == MFM__CU_NO_BINARY_FOR_GPU || r == MFM__CU_INVALID_PTX ||
                                      r == MFM__CU_UNSUPPORTED_PTX_VERSION)) {
            remove(dev->build.path); /* stale for this driver: build again */
            MFM_FREE(im.bytes);
            memset(&im, 0, sizeof im);
            continue;
        }
        st = mfm__cu_fail(err, r, r == MFM__CU_UNSUPPORTED_PTX_VERSION ? "cuModuleLoadData (the driver is older than the NVRTC that made this PTX; update the driver)"
                                                                      : "cuModuleLoadData (loading the kernels)");
    }
    MFM_FREE(im.bytes);
    if (st == MFM_OK) {
        static const char *const models[2] = {"ffm", "fwfm"}, *const ks[4] = {"", "_k4", "_k8", "_k16"};
        char name[64];
        int i;
        for (i = 0; i < 10 && st == MFM_OK; i++) {
            mfm__cu_function *f = i == 8 ? &dev->fm : i == 9 ? &dev->finish : &dev->pairs[i / 4][i % 4];
            if (i < 8)
                snprintf(name, sizeof name, "mfm_predict_%s%s", models[i / 4], ks[i % 4]);
            else
                snprintf(name, sizeof name, "%s", i == 8 ? "mfm_predict_fm" : "mfm_finish");
            if ((r = cu->cuModuleGetFunction(f, dev->module, name)) != 0) st = mfm__cu_fail(err, r, name);
        }
        for (i = 0; i < 28 && st == MFM_OK; i++) { /* rows [fast, exact][k], then apply [fast, exact][optimizer][narrow, wide] */
            static const char *const sums[2] = {"fast", "exact"}, *const optimizers[5] = {"sgd", "adagrad", "adam", "ftrl", "rowwise"};
            const int j = i - 8; /* the apply kernels' index */
            mfm__cu_function *f = i < 8 ? &dev->train_rows[i / 4][i % 4] : &dev->train_apply[j / 10][j % 10 / 2][j % 2];
            if (i < 8)
                snprintf(name, sizeof name, "mfm_train_rows_%s%s", sums[i / 4], ks[i % 4]);
            else
                snprintf(name, sizeof name, "mfm_train_apply_%s_%s%s", sums[j / 10], optimizers[j % 10 / 2], j % 2 ? "_wide" : "");
            if ((r = cu->cuModuleGetFunction(f, dev->module, name)) != 0) st = mfm__cu_fail(err, r, name);
        }
        for (i = 0; i < 6 && st == MFM_OK; i++) { /* deterministic FFM: starts, place, gather [k] */
            mfm__cu_function *f = i == 0 ? &dev->ffm_starts : i == 1 ? &dev->ffm_place : &dev->ffm_gather[i - 2];
            if (i < 2)
                snprintf(name, sizeof name, "mfm_train_ffm_%s", i == 0 ? "starts" : "place");
            else
                snprintf(name, sizeof name, "mfm_train_ffm_gather%s", ks[i - 2]);
            if ((r = cu->cuModuleGetFunction(f, dev->module, name)) != 0) st = mfm__cu_fail(err, r, name);
        }
        if (st == MFM_OK && (r = cu->cuModuleGetFunction(&dev->train_list, dev->module, "mfm_train_list")) != 0) st = mfm__cu_fail(err, r, "mfm_train_list");
        for (i = 0; i < 2 && st == MFM_OK; i++) {
            snprintf(name, sizeof name, "mfm_train_r_total_%s", i ? "exact" : "fast");
            if ((r = cu->cuModuleGetFunction(&dev->r_total[i], dev->module, name)) != 0) st = mfm__cu_fail(err, r, name);
        }
        for (i = 0; i < 3 && st == MFM_OK; i++) {
            static const char *const line[3] = {"mfm_train_line_delta", "mfm_train_line_alpha", "mfm_train_line_settle"};
            if ((r = cu->cuModuleGetFunction(&dev->line[i], dev->module, line[i])) != 0) st = mfm__cu_fail(err, r, line[i]);
        }
        dev->ready = st == MFM_OK;
    }
    cu->cuCtxSetCurrent(saved);
    return st;
}

/* Makes the device current (its kernels ready); *saved gets the caller's context to restore. */
static mfm_status mfm__gpu_enter(int d, mfm__gpu_device **dev, mfm__cu_context *saved, mfm_error *err) {
    mfm_status st = mfm__driver_load(err);
    if (st != MFM_OK) return st;
    if (d < 0 || d >= mfm__cuda.n_devices)
        return mfm__fail(err, MFM_ERR_CUDA_NO_DEVICE, "there is no CUDA device %d: this machine has %d (0 .. %d)", d, mfm__cuda.n_devices, mfm__cuda.n_devices - 1);
    mfm__cuda_lock();
    st = mfm__gpu_device_ready_locked(d, err);
    mfm__cuda_unlock();
    if (st != MFM_OK) return st;
    *dev = &mfm__cuda.devices[d];
    mfm__cuda.cu.cuCtxGetCurrent(saved);
    mfm__cuda.cu.cuCtxSetCurrent((*dev)->context);
    return MFM_OK;
}

static void mfm__gpu_leave(mfm__cu_context saved) { mfm__cuda.cu.cuCtxSetCurrent(saved); }

MFMDEF mfm_status mfm_cuda_prepare(int device, mfm_error *err) {
    mfm__gpu_device *dev;
    mfm__cu_context saved;
    const mfm_status st = mfm__gpu_enter(device, &dev, &saved, err);
    if (st != MFM_OK) return st;
    mfm__gpu_leave(saved);
    return mfm__ok(err);
}

/* Device memory, with the bytes asked for and free in the error. */
static mfm_status mfm__gpu_alloc(mfm__cu_ptr *p, uint64_t bytes, const char *what, mfm_error *err) {
    mfm__cu_result r;
    size_t free_bytes = 0, total = 0;
    *p = 0;
    if ((r = mfm__cuda.cu.cuMemAlloc(p, (size_t)(bytes ? bytes : 4))) == 0) return MFM_OK;
    *p = 0;
    if (r != MFM__CU_OUT_OF_MEMORY) return mfm__cu_fail(err, r, "cuMemAlloc");
    mfm__cuda.cu.cuMemGetInfo(&free_bytes, &total);
    return mfm__fail(err, MFM_ERR_OUT_OF_MEMORY, "GPU out of memory: %s needs %.1f MB, and the device has %.1f MB free of %.1f MB", what, (double)bytes / 1e6,
                     (double)free_bytes / 1e6, (double)total / 1e6);
}

static void mfm__gpu_free(mfm__cu_ptr *p) {
    if (*p) mfm__cuda.cu.cuMemFree(*p);
    *p = 0;
}

/* Two sets of chunk buffers, pinned on the host and on the device, one stream each. */
typedef struct mfm__gpu_stage {
    uint64_t rows, nnz;  /* capacity of each set */
    unsigned char *host[2];
    mfm__cu_ptr device[2];
    mfm__cu_stream stream[2];
    mfm__cu_event done[2];
} mfm__gpu_stage;

struct mfm_gpu_model {
    mfm_model shape; /* the model's params and sizes (no tables): checks data as mfm_predict does */
    int device;
    mfm__gpu_device *dev;
    mfm__cu_ptr table, w0, pair_weights;
    uint64_t class_stride;
    uint32_t stride, w_offset;
    mfm__gpu_stage stage;
};

struct mfm_gpu_data {
    int device;
    uint64_t n_rows;
    uint32_t n_features, n_fields; /* largest id + 1: what a model must hold */
    mfm__cu_ptr offsets, features, fields, values, scores, out; /* fields: FFM and FwFM data only */
};

static void mfm__stage_free(mfm__gpu_stage *g) {
    int b;
    for (b = 0; b < 2; b++) {
        if (g->host[b]) mfm__cuda.cu.cuMemFreeHost(g->host[b]);
        mfm__gpu_free(&g->device[b]);
        if (g->stream[b]) mfm__cuda.cu.cuStreamDestroy(g->stream[b]);
        if (g->done[b]) mfm__cuda.cu.cuEventDestroy(g->done[b]);
    }
    memset(g, 0, sizeof *g);
}

/* Frees n device allocations (and a staging set) in a device's context, then the record. */
static void mfm__gpu_release(mfm__cu_context context, mfm__cu_ptr *const *p, int n, mfm__gpu_stage *stage, void *record) {
    mfm__cu_context saved;
    int i;
    mfm__cuda.cu.cuCtxGetCurrent(&saved);
    mfm__cuda.cu.cuCtxSetCurrent(context);
    if (stage) mfm__stage_free(stage);
    for (i = 0; i < n; i++) mfm__gpu_free(p[i]);
    mfm__cuda.cu.cuCtxSetCurrent(saved);
    MFM_FREE(record);
}

MFMDEF void mfm_gpu_model_free(mfm_gpu_model *gm) {
    if (gm) {
        mfm__cu_ptr *const p[] = {&gm->table, &gm->w0, &gm->pair_weights};
        mfm__gpu_release(gm->dev->context, p, 3, &gm->stage, gm);
    }
}

/* The upload of a model: its records (a feature's factors, FFM's of every field, then w, then
   zeros to the record's stride) are laid out by every core into one of two pinned buffers while
   the other one's copy to the device runs, so that the layout, the copy and the reading of a
   mapped file overlap. */
#define MFM__UPLOAD_BYTES ((uint64_t)8 << 20)

typedef struct mfm__upload {
    const mfm_model *m;
    const mfm_gpu_model *gm;
    uint32_t cls;
    uint64_t first, n; /* features */
    float *out;
    int n_workers;
} mfm__upload;

static void mfm__upload_task(void *ctx, int index) {
    const mfm__upload *u = (const mfm__upload *)ctx;
    const mfm_model *m = u->m;
    const uint32_t F = m->params.model == MFM_MODEL_FFM ? m->n_fields : 1, n_factors = u->gm->w_offset;
    uint64_t i, lo, hi;
    uint32_t g;
    mfm__share(u->n, u->n_workers, index, &lo, &hi);
    for (i = lo; i < hi; i++) {
        const uint64_t feature = u->first + i;
        float *rec = u->out + i * u->gm->stride;
        mfm__block_params(m, MFM_TENSOR_V, u->cls, feature * F, F, rec); /* FFM: the feature's F blocks, one run where they lie side by side */
        if (m->params.pairs_only)
            rec[n_factors] = 0.0f;
        else
            mfm__block_params(m, MFM_TENSOR_W, u->cls, feature, 1, rec + n_factors);
        for (g = n_factors + 1; g < u->gm->stride; g++) rec[g] = 0.0f;
    }
}

/* The records of every class and feature into gm->table. */
static mfm_status mfm__upload_records(const mfm_model *m, mfm_gpu_model *gm, mfm_error *err) {
    const uint64_t record = (uint64_t)gm->stride * sizeof(float), per_buffer = MFM__UPLOAD_BYTES / record ? MFM__UPLOAD_BYTES / record : 1;
    void *host[2] = {NULL, NULL};
    mfm__cu_stream stream = NULL;
    mfm__cu_event copied[2] = {NULL, NULL};
    mfm__upload u;
    mfm__pool pool;
    mfm__cu_result r = 0;
    mfm_status st = MFM_OK;
    uint64_t f, slot = 0;
    uint32_t c;
    int b, pooled = 0;
    memset(&u, 0, sizeof u);
    u.m = m, u.gm = gm;
    u.n_workers = mfm__threads(m->params.n_threads);
    if ((uint64_t)u.n_workers > (m->n_features + 4095) / 4096) u.n_workers = (int)((m->n_features + 4095) / 4096); /* 4096 records a thread */
    if (u.n_workers < 1) u.n_workers = 1;
    for (b = 0; b < 2 && r == 0; b++) r = mfm__cuda.cu.cuMemAllocHost(&host[b], (size_t)(per_buffer * record));
    if (r == 0) r = mfm__cuda.cu.cuStreamCreate(&stream, 1 /* non-blocking */);
    for (b = 0; b < 2 && r == 0; b++) r = mfm__cuda.cu.cuEventCreate(&copied[b], 2 /* no timing */);
    if (r != 0) st = mfm__cu_fail(err, r, "cuMemAllocHost / cuStreamCreate / cuEventCreate (the model's upload)");
    if (st == MFM_OK && (st = mfm__pool_start(&pool, u.n_workers, err)) == MFM_OK) pooled = 1;
    for (c = 0; st == MFM_OK && c < m->n_classes; c++)
        for (f = 0; st == MFM_OK && f < m->n_features; f += per_buffer, slot++) {
            b = (int)(slot & 1);
            if (slot >= 2 && (r = mfm__cuda.cu.cuEventSynchronize(copied[b])) != 0) { /* the buffer's last copy has left */
                st = mfm__cu_fail(err, r, "cuEventSynchronize (the model's upload)");
                break;
            }
            u.cls = c, u.first = f, u.n = m->n_features - f < per_buffer ? m->n_features - f : per_buffer, u.out = (float *)host[b];
            mfm__pool_run(&pool, mfm__upload_task, &u);
            if ((r = mfm__cuda.cu.cuMemcpyHtoDAsync(gm->table + (c * gm->class_stride + f * gm->stride) * sizeof(float), host[b], (size_t)(u.n * record), stream)) != 0 ||
                (r = mfm__cuda.cu.cuEventRecord(copied[b], stream)) != 0)
                st = mfm__cu_fail(err, r, "cuMemcpyHtoDAsync (the model's upload)");
        }
    if (pooled) mfm__pool_stop(&pool);
    if (stream && (r = mfm__cuda.cu.cuStreamSynchronize(stream)) != 0 && st == MFM_OK) st = mfm__cu_fail(err, r, "cuStreamSynchronize (the model's upload)");
    for (b = 0; b < 2; b++) {
        if (copied[b]) mfm__cuda.cu.cuEventDestroy(copied[b]);
        if (host[b]) mfm__cuda.cu.cuMemFreeHost(host[b]);
    }
    if (stream) mfm__cuda.cu.cuStreamDestroy(stream);
    return st;
}

MFMDEF mfm_status mfm_gpu_model_upload(const mfm_model *m, int device, mfm_gpu_model **out, mfm_error *err) {
    const int is_ffm = m && m->params.model == MFM_MODEL_FFM;
    mfm_gpu_model *gm;
    mfm__cu_context saved;
    mfm__cu_result r;
    mfm_status st;
    float *small = NULL;
    uint32_t n_factors, c;
    uint64_t bytes;
    if (!m || !out) return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "mfm_gpu_model_upload: the model or the output pointer is NULL");
    *out = NULL;
    if (!(gm = (mfm_gpu_model *)mfm__calloc(1, sizeof *gm))) return mfm__fail(err, MFM_ERR_OUT_OF_MEMORY, "out of memory for a GPU model");
    if ((st = mfm__gpu_enter(device, &gm->dev, &saved, err)) != MFM_OK) {
        MFM_FREE(gm);
        return st;
    }
    gm->shape = *m;
    memset(gm->shape.t, 0, sizeof gm->shape.t);
    memset(&gm->shape.file, 0, sizeof gm->shape.file);
    gm->shape.class_weight_values = NULL;
    gm->shape.params.class_weights = NULL;
    gm->device = device;
    n_factors = is_ffm ? m->n_fields * (uint32_t)m->k : (uint32_t)m->k;
    gm->w_offset = n_factors;
    gm->stride = (n_factors + 1 + 3) & ~3u;
    gm->class_stride = (uint64_t)m->n_features * gm->stride;
    bytes = gm->class_stride * m->n_classes * sizeof(float);
    st = mfm__gpu_alloc(&gm->table, bytes, "the model's parameters", err);
    if (st == MFM_OK) st = mfm__gpu_alloc(&gm->w0, m->n_classes * sizeof(float), "the model's biases", err);
    if (st == MFM_OK && m->params.model == MFM_MODEL_FWFM)
        st = mfm__gpu_alloc(&gm->pair_weights, (uint64_t)m->n_classes * m->n_fields * m->n_fields * sizeof(float), "the field pair weights", err);
    if (st == MFM_OK && m->n_features) st = mfm__upload_records(m, gm, err);
    if (st == MFM_OK && !(small = (float *)mfm__alloc((uint64_t)m->n_fields * m->n_fields + m->n_classes, sizeof(float))))
        st = mfm__fail(err, MFM_ERR_OUT_OF_MEMORY, "out of memory for the upload of a model");
    if (st == MFM_OK) {
        for (c = 0; c < m->n_classes; c++) small[c] = m->params.pairs_only ? 0.0f : *mfm__block(m, MFM_TENSOR_W0, c, 0);
        if ((r = mfm__cuda.cu.cuMemcpyHtoD(gm->w0, small, m->n_classes * sizeof(float))) != 0) st = mfm__cu_fail(err, r, "cuMemcpyHtoD (uploading the model)");
    }
    for (c = 0; st == MFM_OK && gm->pair_weights && c < m->n_classes; c++) { /* r(a, b) as a full symmetric matrix */
        const uint32_t F = m->n_fields;
        uint32_t a, b;
        for (a = 0; a < F; a++)
            for (b = 0; b < F; b++) small[(uint64_t)a * F + b] = mfm__fwfm_r(m, c, a, b);
        if ((r = mfm__cuda.cu.cuMemcpyHtoD(gm->pair_weights + (uint64_t)c * F * F * sizeof(float), small, (size_t)F * F * sizeof(float))) != 0)
            st = mfm__cu_fail(err, r, "cuMemcpyHtoD (uploading the model)");
    }
    MFM_FREE(small);
    mfm__gpu_leave(saved);
    if (st != MFM_OK) {
        mfm_gpu_model_free(gm);
        return st;
    }
    *out = gm;
    return mfm__ok(err);
}

/* Lanes per row: FFM and FwFM share a row's pairs among a warp; FM gives each lane factors. */
static uint32_t mfm__gpu_group(const mfm_gpu_model *gm) {
    uint32_t g = 1;
    if (gm->shape.params.model != MFM_MODEL_FM) return 32;
    while (g < 32 && g < (uint32_t)gm->shape.k) g *= 2;
    return g;
}

/* FwFM's staged rows, prediction's and training's (kernels/common.cu, mfm_staged_weight_floats):
   the floats of every class's pair weights before the warps' rows. */
static uint64_t mfm__staged_weight_floats(uint32_t n_classes, uint32_t n_fields) { return ((uint64_t)n_classes * n_fields * (n_fields + 1) + 3) & ~(uint64_t)3; }

/* Scores rows [0, n) of the arrays in args into args->scores, then the output into out_dev. */
static mfm_status mfm__gpu_launch(mfm_gpu_model *gm, mfm__gpu_args *args, mfm__cu_ptr out_dev, mfm_output kind, mfm__cu_stream stream, mfm_error *err) {
    const mfm__gpu_device *dev = gm->dev;
    const mfm_model *m = &gm->shape;
    mfm__cu_function f = dev->fm;
    const unsigned block = 256;
    unsigned shared_bytes = 0;
    uint64_t groups_per_block, blocks, max_blocks = (uint64_t)dev->sm_count * 32;
    uint32_t n_classes = m->n_classes;
    int task = (int)m->params.task, kind_number = (int)kind;
    void *predict_params[1], *finish_params[6];
    mfm__cu_result r;
    if (args->n_rows == 0) return MFM_OK;
    args->table = gm->table;
    args->w0 = gm->w0;
    args->pair_weights = gm->pair_weights;
    args->class_stride = gm->class_stride;
    args->n_fields = m->n_fields;
    args->n_classes = m->n_classes;
    args->k = (uint32_t)m->k;
    args->stride = gm->stride;
    args->w_offset = gm->w_offset;
    args->group = mfm__gpu_group(gm);
    args->linear_only = m->params.linear_only;
    args->pairs_only = m->params.pairs_only;
    args->normalize = m->params.normalize_rows > 0;
    if (m->params.model != MFM_MODEL_FM) f = dev->pairs[m->params.model == MFM_MODEL_FWFM][mfm__k_kernel(m->k)];
    if (m->params.model == MFM_MODEL_FWFM && (m->k == 4 || m->k == 8 || m->k == 16)) {
        /* rows up to 64 long go through shared memory, with every class's pair weights
           (kernels/predict.cu, mfm_stage), when that fits the 48 KB any launch may ask for */
        const uint64_t bytes = 4 * (mfm__staged_weight_floats(m->n_classes, m->n_fields) + (uint64_t)block / 32 * 64 * ((unsigned)m->k + 1));
        if (bytes <= 48 * 1024) {
            args->stage_nnz = 64;
            shared_bytes = (unsigned)bytes;
        }
    }
    groups_per_block = block / args->group;
    blocks = (args->n_rows + groups_per_block - 1) / groups_per_block;
    predict_params[0] = args;
    if ((r = mfm__cuda.cu.cuLaunchKernel(f, (unsigned)(blocks < max_blocks ? blocks : max_blocks), 1, 1, block, 1, 1, shared_bytes, stream, predict_params, NULL)) != 0)
        return mfm__cu_fail(err, r, "cuLaunchKernel (prediction)");
    finish_params[0] = &args->scores;
    finish_params[1] = &out_dev;
    finish_params[2] = &args->n_rows;
    finish_params[3] = &n_classes;
    finish_params[4] = &task;
    finish_params[5] = &kind_number;
    blocks = (args->n_rows + block - 1) / block;
    if ((r = mfm__cuda.cu.cuLaunchKernel(dev->finish, (unsigned)(blocks < max_blocks ? blocks : max_blocks), 1, 1, block, 1, 1, 0, stream, finish_params, NULL)) != 0)
        return mfm__cu_fail(err, r, "cuLaunchKernel (prediction output)");
    return MFM_OK;
}

/* Chunk layout inside one staging set: offsets, features, fields, values, then two arrays of
   `width` floats per row (prediction: scores and outputs; training: labels and weights). */
typedef struct mfm__chunk_layout {
    size_t offsets, features, fields, values, per_row[2], total;
} mfm__chunk_layout;

static mfm__chunk_layout mfm__chunk_layout_of(uint64_t rows, uint64_t nnz, uint32_t width) {
    mfm__chunk_layout l;
    size_t at = 0;
#define MFM__PLACE(field, bytes) (l.field = at, at += ((size_t)(bytes) + 255) & ~(size_t)255)
    MFM__PLACE(offsets, (rows + 1) * 8);
    MFM__PLACE(features, nnz * 4);
    MFM__PLACE(fields, nnz * 4);
    MFM__PLACE(values, nnz * 4);
    MFM__PLACE(per_row[0], rows * width * 4);
    MFM__PLACE(per_row[1], rows * width * 4);
#undef MFM__PLACE
    l.total = at;
    return l;
}

/* A chunk's rows into its pinned buffer, the model's threads each copying a slice of every
   array (one thread's memcpy is slower than the bus). */
typedef struct mfm__chunk_copy {
    const mfm_csr *d;
    unsigned char *host;
    mfm__chunk_layout lay;
    uint64_t r0, rows, lo, nnz;
    int fields, n_workers;
} mfm__chunk_copy;

static void mfm__slice_copy(unsigned char *dst, const void *src, uint64_t n, size_t size, int w, int n_workers) {
    const uint64_t a = n * (uint64_t)w / (uint64_t)n_workers, b = n * (uint64_t)(w + 1) / (uint64_t)n_workers;
    if (b > a) memcpy(dst + a * size, (const unsigned char *)src + a * size, (size_t)((b - a) * size));
}

static void mfm__chunk_copy_task(void *ctx, int w) {
    const mfm__chunk_copy *c = (const mfm__chunk_copy *)ctx;
    mfm__slice_copy(c->host + c->lay.offsets, c->d->row_offsets + c->r0, c->rows + 1, 8, w, c->n_workers);
    mfm__slice_copy(c->host + c->lay.features, c->d->features + c->lo, c->nnz, 4, w, c->n_workers);
    if (c->fields) mfm__slice_copy(c->host + c->lay.fields, c->d->fields + c->lo, c->nnz, 4, w, c->n_workers);
    if (c->d->values) mfm__slice_copy(c->host + c->lay.values, c->d->values + c->lo, c->nnz, 4, w, c->n_workers);
}

/* Where the chunk that starts at row r0 ends: at most 256K rows or 8M non-zeros (a longer row
   goes alone). */
static uint64_t mfm__chunk_end(const mfm_csr *d, uint64_t r0) {
    const uint64_t max_rows = (uint64_t)1 << 18, max_nnz = (uint64_t)1 << 23;
    uint64_t r1 = r0 + 1;
    while (r1 < d->n_rows && r1 - r0 < max_rows && d->row_offsets[r1 + 1] - d->row_offsets[r0] <= max_nnz) r1++;
    return r1;
}

MFMDEF mfm_status mfm_gpu_predict_evaluate(mfm_gpu_model *gm, const mfm_csr *d, mfm_output kind, float *out, size_t capacity, mfm_metrics *metrics,
                                           mfm_error *err) {
    if (!gm || !metrics) return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "mfm_gpu_predict_evaluate: the GPU model or the metrics are NULL");
    return mfm__predict_evaluate(&gm->shape, NULL, gm, d, 1, kind, out, capacity, metrics, 1, "mfm_gpu_predict_evaluate", err);
}

MFMDEF mfm_status mfm_gpu_predict(mfm_gpu_model *gm, const mfm_csr *d, mfm_output kind, float *out, size_t capacity, mfm_error *err) {
    mfm__data_info info;
    mfm__cu_context saved;
    mfm__gpu_device *dev;
    mfm__gpu_stage *g;
    mfm_status st;
    mfm__cu_result r = 0;
    mfm__chunk_layout lay;
    uint64_t r0, need_nnz = 0, need_rows = 0, chunk_rows[2] = {0, 0}, chunk_first[2] = {0, 0};
    size_t width;
    int i, b;
    mfm__pool pool;
    mfm__chunk_copy copy;
    if (!gm) return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "mfm_gpu_predict: the GPU model is NULL");
    if ((st = mfm__predict_check(&gm->shape, d, &kind, out, capacity, &info, "mfm_gpu_predict", err)) != MFM_OK) return st;
    if (d->n_rows == 0) return mfm__ok(err);
    width = mfm_output_width(&gm->shape, kind);
    for (r0 = 0; r0 < d->n_rows;) { /* the largest chunk decides the buffers */
        const uint64_t r1 = mfm__chunk_end(d, r0);
        if (r1 - r0 > need_rows) need_rows = r1 - r0;
        if (d->row_offsets[r1] - d->row_offsets[r0] > need_nnz) need_nnz = d->row_offsets[r1] - d->row_offsets[r0];
        r0 = r1;
    }
    if ((st = mfm__gpu_enter(gm->device, &dev, &saved, err)) != MFM_OK) return st;
    g = &gm->stage;
    lay = mfm__chunk_layout_of(need_rows, need_nnz, gm->shape.n_classes);
    if (g->rows < need_rows || g->nnz < need_nnz) { /* kept between calls: repeated predictions allocate nothing */
        mfm__stage_free(g);
        for (b = 0; b < 2 && st == MFM_OK; b++) {
            void *host = NULL;
            if ((r = mfm__cuda.cu.cuMemAllocHost(&host, lay.total)) != 0) {
                st = mfm__cu_fail(err, r, "cuMemAllocHost (pinned transfer buffers)");
                break;
            }
            g->host[b] = (unsigned char *)host;
            if ((st = mfm__gpu_alloc(&g->device[b], lay.total, "the transfer buffers", err)) != MFM_OK) break;
            if ((r = mfm__cuda.cu.cuStreamCreate(&g->stream[b], 1 /* non-blocking */)) != 0 || (r = mfm__cuda.cu.cuEventCreate(&g->done[b], 2 /* no timing */)) != 0)
                st = mfm__cu_fail(err, r, "cuStreamCreate / cuEventCreate");
        }
        if (st != MFM_OK) {
            mfm__stage_free(g);
        } else {
            g->rows = need_rows;
            g->nnz = need_nnz;
        }
    }
    lay = mfm__chunk_layout_of(g->rows, g->nnz, gm->shape.n_classes);
    memset(&copy, 0, sizeof copy);
    copy.d = d;
    copy.lay = lay;
    copy.fields = gm->shape.params.model != MFM_MODEL_FM && d->fields;
    copy.n_workers = (uint64_t)mfm__threads(gm->shape.params.n_threads) < 1 + need_nnz / (1u << 18) ? mfm__threads(gm->shape.params.n_threads)
                                                                                              : (int)(1 + need_nnz / (1u << 18));
    memset(&pool, 0, sizeof pool);
    if (st == MFM_OK) st = mfm__pool_start(&pool, copy.n_workers, err);
    for (r0 = 0, i = 0; st == MFM_OK && r0 < d->n_rows; i++) {
        const uint64_t r1 = mfm__chunk_end(d, r0);
        uint64_t lo, nnz, rows;
        unsigned char *h;
        mfm__cu_ptr dv;
        mfm__gpu_args args;
        b = i & 1;
        h = g->host[b];
        dv = g->device[b];
        if (i >= 2) { /* set b held chunk i - 2: hand its outputs over before reusing it */
            if ((r = mfm__cuda.cu.cuEventSynchronize(g->done[b])) != 0) {
                st = mfm__cu_fail(err, r, "cuEventSynchronize (prediction)");
                break;
            }
            memcpy(out + chunk_first[b] * width, h + lay.per_row[1], (size_t)(chunk_rows[b] * width * sizeof(float)));
        }
        lo = d->row_offsets[r0];
        nnz = d->row_offsets[r1] - lo;
        rows = r1 - r0;
        copy.host = h;
        copy.r0 = r0;
        copy.rows = rows;
        copy.lo = lo;
        copy.nnz = nnz;
        mfm__pool_run(&pool, mfm__chunk_copy_task, &copy);
        memset(&args, 0, sizeof args);
        args.offsets = dv + lay.offsets;
        args.features = dv + lay.features;
        args.fields = gm->shape.params.model != MFM_MODEL_FM ? dv + lay.fields : 0;
        args.values = d->values ? dv + lay.values : 0;
        args.scores = dv + lay.per_row[0];
        args.n_rows = rows;
        args.offset_base = lo;
        if ((r = mfm__cuda.cu.cuMemcpyHtoDAsync(dv + lay.offsets, h + lay.offsets, (size_t)(rows + 1) * 8, g->stream[b])) != 0 ||
            (r = mfm__cuda.cu.cuMemcpyHtoDAsync(dv + lay.features, h + lay.features, (size_t)nnz * 4, g->stream[b])) != 0 ||
            (args.fields && (r = mfm__cuda.cu.cuMemcpyHtoDAsync(args.fields, h + lay.fields, (size_t)nnz * 4, g->stream[b])) != 0) ||
            (args.values && (r = mfm__cuda.cu.cuMemcpyHtoDAsync(args.values, h + lay.values, (size_t)nnz * 4, g->stream[b])) != 0)) {
            st = mfm__cu_fail(err, r, "cuMemcpyHtoDAsync (rows to the GPU)");
            break;
        }
        if ((st = mfm__gpu_launch(gm, &args, dv + lay.per_row[1], kind, g->stream[b], err)) != MFM_OK) break;
        if ((r = mfm__cuda.cu.cuMemcpyDtoHAsync(h + lay.per_row[1], dv + lay.per_row[1], (size_t)(rows * width * sizeof(float)), g->stream[b])) != 0 ||
            (r = mfm__cuda.cu.cuEventRecord(g->done[b], g->stream[b])) != 0) {
            st = mfm__cu_fail(err, r, "cuMemcpyDtoHAsync (outputs to the host)");
            break;
        }
        chunk_first[b] = r0;
        chunk_rows[b] = rows;
        r0 = r1;
    }
    mfm__pool_stop(&pool);
    for (b = 0; b < 2; b++) { /* the last two chunks (on failure: wait, hand nothing over) */
        if (!chunk_rows[b]) continue;
        if ((r = mfm__cuda.cu.cuEventSynchronize(g->done[b])) != 0 && st == MFM_OK) st = mfm__cu_fail(err, r, "cuEventSynchronize (prediction)");
        if (st == MFM_OK) memcpy(out + chunk_first[b] * width, g->host[b] + lay.per_row[1], (size_t)(chunk_rows[b] * width * sizeof(float)));
    }
    mfm__gpu_leave(saved);
    return st == MFM_OK ? mfm__ok(err) : st;
}

MFMDEF void mfm_gpu_data_free(mfm_gpu_data *gd) {
    if (gd) {
        mfm__cu_ptr *const p[] = {&gd->offsets, &gd->features, &gd->fields, &gd->values, &gd->scores, &gd->out};
        mfm__gpu_release(mfm__cuda.devices[gd->device].context, p, 6, NULL, gd);
    }
}

MFMDEF mfm_status mfm_gpu_data_upload(mfm_gpu_model *gm, const mfm_csr *d, mfm_gpu_data **out, mfm_error *err) {
    mfm__data_info info;
    mfm__cu_context saved;
    mfm__gpu_device *dev;
    mfm_gpu_data *gd;
    mfm_status st;
    mfm__cu_result r = 0;
    uint64_t nnz;
    const int fields = gm && gm->shape.params.model != MFM_MODEL_FM;
    if (!gm || !out) return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "mfm_gpu_data_upload: the GPU model or the output pointer is NULL");
    *out = NULL;
    if ((st = mfm__check_csr(d, fields, 0, &info, err)) != MFM_OK) return st;
    if ((st = mfm__check_shape(&gm->shape, d, &info, err)) != MFM_OK) return st;
    if (!(gd = (mfm_gpu_data *)mfm__calloc(1, sizeof *gd))) return mfm__fail(err, MFM_ERR_OUT_OF_MEMORY, "out of memory for GPU data");
    if ((st = mfm__gpu_enter(gm->device, &dev, &saved, err)) != MFM_OK) {
        MFM_FREE(gd);
        return st;
    }
    nnz = d->row_offsets[d->n_rows];
    gd->device = gm->device;
    gd->n_rows = d->n_rows;
    gd->n_features = info.n_features;
    gd->n_fields = info.n_fields;
    st = mfm__gpu_alloc(&gd->offsets, (d->n_rows + 1) * 8, "the dataset's row offsets", err);
    if (st == MFM_OK) st = mfm__gpu_alloc(&gd->features, nnz * 4, "the dataset's features", err);
    if (st == MFM_OK && fields) st = mfm__gpu_alloc(&gd->fields, nnz * 4, "the dataset's fields", err);
    if (st == MFM_OK && d->values) st = mfm__gpu_alloc(&gd->values, nnz * 4, "the dataset's values", err);
    if (st == MFM_OK) st = mfm__gpu_alloc(&gd->scores, d->n_rows * gm->shape.n_classes * 4, "the scores", err);
    if (st == MFM_OK) st = mfm__gpu_alloc(&gd->out, d->n_rows * gm->shape.n_classes * 4, "the outputs", err);
    if (st == MFM_OK && ((r = mfm__cuda.cu.cuMemcpyHtoD(gd->offsets, d->row_offsets, (size_t)(d->n_rows + 1) * 8)) != 0 ||
                         (nnz && (r = mfm__cuda.cu.cuMemcpyHtoD(gd->features, d->features, (size_t)nnz * 4)) != 0) ||
                         (nnz && fields && (r = mfm__cuda.cu.cuMemcpyHtoD(gd->fields, d->fields, (size_t)nnz * 4)) != 0) ||
                         (nnz && d->values && (r = mfm__cuda.cu.cuMemcpyHtoD(gd->values, d->values, (size_t)nnz * 4)) != 0)))
        st = mfm__cu_fail(err, r, "cuMemcpyHtoD (uploading the dataset)");
    mfm__gpu_leave(saved);
    if (st != MFM_OK) {
        mfm_gpu_data_free(gd);
        return st;
    }
    *out = gd;
    return mfm__ok(err);
}

MFMDEF mfm_status mfm_gpu_predict_resident(mfm_gpu_model *gm, const mfm_gpu_data *gd, mfm_output kind, float *out, size_t capacity, mfm_error *err) {
    mfm__cu_context saved;
    mfm__gpu_device *dev;
    mfm__gpu_args args;
    mfm_status st;
    mfm__cu_result r;
    uint64_t need;
    const mfm_model *m = gm ? &gm->shape : NULL;
    if (!gm || !gd) return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "mfm_gpu_predict_resident: the GPU model or the GPU data is NULL");
    if (gd->device != gm->device)
        return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "mfm_gpu_predict_resident: the data is on device %d, the model on device %d", gd->device, gm->device);
    if (gd->n_features > m->n_features || (m->params.model != MFM_MODEL_FM && gd->n_fields > m->n_fields) || (m->params.model != MFM_MODEL_FM && !gd->fields))
        return mfm__fail(err, MFM_ERR_SHAPE_MISMATCH, "mfm_gpu_predict_resident: the data (%u features, %u fields) was uploaded for another model shape (%u features, %u fields)",
                         (unsigned)gd->n_features, (unsigned)gd->n_fields, (unsigned)m->n_features, (unsigned)m->n_fields);
    if ((st = mfm__check_kind(m, &kind, "mfm_gpu_predict_resident", err)) != MFM_OK ||
        (st = mfm__check_room(m, gd->n_rows, kind, out, capacity, "mfm_gpu_predict_resident", err)) != MFM_OK)
        return st;
    if (gd->n_rows == 0) return mfm__ok(err);
    need = gd->n_rows * mfm_output_width(m, kind);
    if ((st = mfm__gpu_enter(gm->device, &dev, &saved, err)) != MFM_OK) return st;
    memset(&args, 0, sizeof args);
    args.offsets = gd->offsets;
    args.features = gd->features;
    args.fields = gd->fields;
    args.values = gd->values;
    args.scores = gd->scores;
    args.n_rows = gd->n_rows;
    st = mfm__gpu_launch(gm, &args, gd->out, kind, NULL, err);
    if (st == MFM_OK && (r = mfm__cuda.cu.cuMemcpyDtoH(out, gd->out, (size_t)need * sizeof(float))) != 0)
        st = mfm__cu_fail(err, r, "cuMemcpyDtoH (outputs to the host)");
    mfm__gpu_leave(saved);
    return st == MFM_OK ? mfm__ok(err) : st;
}

MFMDEF mfm_status mfm_cuda_get_info(int device, mfm_cuda_info *out, mfm_error *err) {
    mfm__cu_device handle;
    mfm__cu_result r;
    mfm__cu_context saved;
    mfm__gpu_device *dev;
    mfm_status st;
    size_t bytes = 0, free_bytes = 0;
    if (!out) return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "mfm_cuda_get_info: the output is NULL");
    memset(out, 0, sizeof *out);
    mfm__cuda_lock();
    out->cache_mode = mfm__cache_mode(NULL);
    if (out->cache_mode == MFM_CACHE_MODE_COUNT) out->cache_mode = MFM_CACHE_OFF; /* an unknown MFM_CACHE: nothing is read or written */
    mfm__cache_dir(out->cache_dir, sizeof out->cache_dir, NULL);
    mfm__cuda_unlock();
    if (mfm__nvrtc_load(NULL) == MFM_OK) {
        out->nvrtc_version = mfm__cuda.nvrtc_major * 1000 + mfm__cuda.nvrtc_minor * 10;
        snprintf(out->nvrtc_path, sizeof out->nvrtc_path, "%s", mfm__cuda.nvrtc_path);
    }
    if (mfm__nccl_load(NULL) == MFM_OK) {
        out->nccl_version = mfm__cuda.nccl_version;
        snprintf(out->nccl_path, sizeof out->nccl_path, "%s", mfm__cuda.nccl_path);
    }
    if ((st = mfm__driver_load(err)) != MFM_OK) return st;
    out->driver_version = mfm__cuda.driver_version;
    out->n_devices = mfm__cuda.n_devices;
    out->device = device;
    if (device < 0 || device >= mfm__cuda.n_devices)
        return mfm__fail(err, MFM_ERR_CUDA_NO_DEVICE, "there is no CUDA device %d: this machine has %d", device, mfm__cuda.n_devices);
    if ((r = mfm__cuda.cu.cuDeviceGet(&handle, device)) != 0 || (r = mfm__cuda.cu.cuDeviceGetName(out->device_name, (int)sizeof out->device_name, handle)) != 0 ||
        (r = mfm__cuda.cu.cuDeviceGetAttribute(&out->compute_major, MFM__CU_ATTR_CC_MAJOR, handle)) != 0 ||
        (r = mfm__cuda.cu.cuDeviceGetAttribute(&out->compute_minor, MFM__CU_ATTR_CC_MINOR, handle)) != 0 ||
        (r = mfm__cuda.cu.cuDeviceTotalMem(&bytes, handle)) != 0)
        return mfm__cu_fail(err, r, "reading the device's properties");
    out->total_memory = bytes;
    /* free memory needs a context: only when this process made one already */
    dev = &mfm__cuda.devices[device];
    mfm__cuda_lock();
    if ((out->kernels_ready = dev->ready) != 0) out->kernels = dev->build;
    out->context_seconds = dev->context_seconds;
    mfm__cuda_unlock();
    if (dev->context) {
        mfm__cuda.cu.cuCtxGetCurrent(&saved);
        mfm__cuda.cu.cuCtxSetCurrent(dev->context);
        if (mfm__cuda.cu.cuMemGetInfo(&free_bytes, &bytes) == 0) out->free_memory = free_bytes;
        mfm__cuda.cu.cuCtxSetCurrent(saved);
    }
    return mfm__ok(err);
}

#endif /* MFM__GPU */

/* ============================================================================================
   >>gpu-train  Training on the device: parameters, optimizer state and rows stay there
   ============================================================================================

   mfm_fit on backend CUDA (or AUTO where a GPU is) runs the CPU's epoch loop, early stopping
   and callbacks, but each pass is kernels on the device (kernels/train.cu): per batch one
   launch scores the rows and adds their gradients, one steps every touched coordinate
   (deterministic FFM: three more between them gather its pair sums by feature). The
   model's tables go up once per fit in the CPU's own layout and come back at its end (the best
   epoch's, with early stopping); a fit that fails on the device leaves the host model as it
   was. The epochs visit the CPU's seeded permutations, so both see the same batches. The rows
   go up once, or, when they would not fit next to the model (params.gpu_memory_limit, else
   the device's free memory), in chunks of whole batches gathered into two pinned buffers: a
   chunk's copy runs on its own stream while the kernels of the one before it run. */

#if MFM__GPU

/* Mirrors struct mfm_train_args of kernels/train.cu, field for field. */
typedef struct mfm__train_args {
    mfm__cu_ptr offsets, features, fields, values, labels, weights, rows;
    mfm__cu_ptr table[4], grad[4], mark[2], list[2], field_mask;
    mfm__cu_ptr occ, occ_start, occ_count, chunk_owner, tally, occ_list, batch_rows, spill;
    mfm__cu_ptr count, dlds, scores, sums, row_loss, totals, class_weights;
    mfm__cu_ptr grad_sq, line_step[2], line_delta, line_alpha, line_parts;
    mfm__cu_ptr partials, r_parts, rowwise_sq;
    uint64_t first, n_batch, offset_base;
    uint64_t n_blocks[4];
    double beta1, beta2, eps;
    uint32_t stride[4], len[4];
    float l1[4], l2[4];
    float lr, ftrl_beta, smoothing;
    uint32_t n_fields, n_classes, k, group, stamp, parity, mask_words, r_shared, stage_nnz, sweep, line_blocks, gather, chunk, shards, k_all;
    int32_t model, task, optimizer, linear_only, pairs_only, normalize, score_only;
    int32_t line, rowwise_squares;
} mfm__train_args;

struct mfm__gpu_trainer {
    mfm_model *m;
    mfm__gpu_device *dev;
    mfm__train_args a;            /* the launches' record; per batch only its rows change */
    mfm__table tab[MFM_TENSOR_COUNT]; /* the tables' shapes on this device (no data): the model's, or a shard's (>>gpu-shards) */
    uint32_t k, first_factor;     /* the factors of V this device holds: k of them from first_factor (all on one GPU) */
    mfm__cu_ptr owned[64];        /* every device allocation, freed together */
    int n_owned, streaming;
    uint64_t free_bytes;          /* what the fit may still take on the device */
    mfm__cu_ptr best[4];          /* early stopping: the best epoch's tables */
    mfm__cu_ptr order[2];         /* resident rows: the pass's order (order[order_at]), and the next one's */
    int order_at;
    const uint64_t *order_sent;   /* the host order that went up during the last pass, into order[order_at] */
    mfm__cu_event order_copied;   /* its copy, on the stream `copy` */
    mfm__cu_ptr valid_offsets, valid_features, valid_fields, valid_values;
    uint64_t n_valid, batch_rows, batches; /* batches launched: the parity of the next */
    uint64_t sweep_rows;          /* batches of this many rows list their features by a sweep of the marks */
    uint32_t stamp;
    unsigned rows_per_block, max_blocks, r_shared;
    unsigned stage_bytes, rows_shared; /* FwFM's staged rows (a.stage_nnz): their shared bytes; the training rows launch's, R's sums first */
    mfm__cu_function apply;       /* the step kernel, for the optimizer, the sums and k */
    unsigned apply_blocks;        /* its grid: as many blocks as the device runs at once */
    unsigned gather_warps, gather_blocks, gather_shared; /* deterministic FFM's gather kernel: warps a block, blocks, shared bytes */
    mfm__cu_stream stream, copy;
    /* streamed rows: two sets of chunk buffers, pinned on the host and on the device */
    uint64_t chunk_rows, chunk_nnz;
    mfm__chunk_layout lay;
    unsigned char *host[2];
    mfm__cu_ptr chunk[2];
    mfm__cu_event copied[2], consumed[2];
    float *valid_scores;
    /* several GPUs (>>gpu-shards): rank 0 is the fit's handle and holds every rank's trainer */
    int device, rank, n_ranks;
    mfm__gpu_trainer *ranks[MFM_MAX_DEVICES];
    mfm__nccl_comm comm;
};

/* Device memory that the trainer owns, counted against what the fit may take. */
static mfm_status mfm__gpu_take(mfm__gpu_trainer *g, mfm__cu_ptr *p, uint64_t bytes, const char *what, mfm_error *err) {
    mfm_status st;
    if (bytes > g->free_bytes) {
        *p = 0;
        return mfm__fail(err, MFM_ERR_OUT_OF_MEMORY, "GPU out of memory: %s needs %.1f MB, and training may take %.1f MB more of the device (params.gpu_memory_limit or what is free)",
                         what, (double)bytes / 1e6, (double)g->free_bytes / 1e6);
    }
    if ((st = mfm__gpu_alloc(p, bytes, what, err)) != MFM_OK) return st;
    g->owned[g->n_owned++] = *p;
    g->free_bytes -= bytes;
    return MFM_OK;
}

/* A table's stride on the device: the host's, except where blocks of a multiple of four (two)
   values would start off 16 (8) bytes (row-wise AdaGrad's V, k values and one accumulator): the
   kernels load such blocks four (two) values at a time, so there each block is padded to a
   multiple of four (two) floats. */
static uint32_t mfm__gpu_stride(const mfm__table *tab) {
    const uint32_t to = tab->len % 4 == 0 ? 4 : tab->len % 2 == 0 ? 2 : 1; /* float4 or float2 loads */
    return (tab->stride + to - 1) / to * to;
}

static uint64_t mfm__gpu_table_bytes(const mfm__gpu_trainer *g, int t) {
    const mfm__table *tab = &g->tab[t];
    return tab->guest ? 0 : tab->n_blocks * g->m->n_classes * (uint64_t)mfm__gpu_stride(tab) * sizeof(float);
}

/* One block bb (class-major) of table t between the host model and the device's block `dev`
   (up: into dev). V's block is the shard's factors of the host block, each state slot's too
   (row-wise AdaGrad's one accumulator whole), then W's block where W is V's guest on the device;
   other tables' blocks are the same floats. Down, only the first shard writes what every shard
   holds alike (`whole`: W0, W, R and row-wise AdaGrad's accumulators; the others' tables other
   than V do not come down, mfm__gpu_table_copy). */
static void mfm__gpu_block_copy(const mfm__gpu_trainer *g, int t, uint64_t bb, float *dev, int up, int whole) {
    const mfm__table *host = &g->m->t[t], *tab = &g->tab[t];
    const uint32_t slots = (uint32_t)g->m->n_slots;
    float *blk = host->data + bb * host->stride;
    uint32_t s;
#define MFM__BLOCK_PART(host_at, dev_at, n) memcpy(up ? dev + (dev_at) : blk + (host_at), up ? blk + (host_at) : dev + (dev_at), (n) * sizeof(float))
    if (t != MFM_TENSOR_V) {
        MFM__BLOCK_PART(0, 0, tab->len + tab->state_len * (slots - 1));
        return;
    }
    for (s = 0; s < slots; s++) { /* the parameters, then each state slot */
        const int sliced = s == 0 || host->state_len == host->len;
        const uint32_t host_at = s ? host->len + (s - 1) * host->state_len : 0, dev_at = s ? tab->len + (s - 1) * tab->state_len : 0;
        if (up || whole || sliced) MFM__BLOCK_PART(host_at + (sliced ? g->first_factor : 0), dev_at, s ? tab->state_len : tab->len);
    }
    if (g->tab[MFM_TENSOR_W].guest && (up || whole)) { /* W's block after V's k values and their state (mfm__place_guest) */
        const mfm__table *W = &g->m->t[MFM_TENSOR_W];
        float *const w = W->data + bb * W->stride, *const at = dev + tab->len + tab->state_len * (slots - 1);
        memcpy(up ? at : w, up ? w : at, slots * sizeof(float));
    }
#undef MFM__BLOCK_PART
}

/* Copies table t between the host's blocks and the device's (up: to the device): as one copy
   where the device holds the host's shape, else through a staging buffer of whole blocks at a
   time (mfm__gpu_block_copy; padding goes up as zeros). A guest comes with its host's blocks.
   The trainer's stream is idle. */
static mfm_status mfm__gpu_table_copy(const mfm__gpu_trainer *g, int t, mfm__cu_ptr dev, int up, mfm_error *err) {
    const mfm__table *host = &g->m->t[t], *tab = &g->tab[t];
    const uint32_t ds = mfm__gpu_stride(tab);
    const uint64_t blocks = tab->n_blocks * g->m->n_classes, per = ((uint64_t)4 << 20) / (4 * ds) + 1;
    const int whole = g->rank == 0; /* the first shard, or the only GPU */
    mfm__cu_result r = 0;
    float *stage;
    uint64_t b, i;
    if (tab->guest || (!up && !whole && t != MFM_TENSOR_V)) return MFM_OK;
    if (g->k == (uint32_t)g->m->k && ds == host->stride && tab->guest == host->guest && g->tab[MFM_TENSOR_W].guest == g->m->t[MFM_TENSOR_W].guest)
        r = up ? mfm__cuda.cu.cuMemcpyHtoD(dev, host->data, (size_t)mfm__gpu_table_bytes(g, t)) : mfm__cuda.cu.cuMemcpyDtoH(host->data, dev, (size_t)mfm__gpu_table_bytes(g, t));
    else if (!(stage = (float *)mfm__calloc((size_t)(per * ds), sizeof(float))))
        return mfm__fail(err, MFM_ERR_OUT_OF_MEMORY, "out of memory staging the model's tables for the GPU");
    else {
        for (b = 0; b < blocks && r == 0; b += per) {
            const uint64_t n = blocks - b < per ? blocks - b : per;
            const mfm__cu_ptr at = dev + (mfm__cu_ptr)(b * ds * sizeof(float));
            if (up) {
                for (i = 0; i < n; i++) mfm__gpu_block_copy(g, t, b + i, stage + i * ds, 1, whole);
                r = mfm__cuda.cu.cuMemcpyHtoD(at, stage, (size_t)(n * ds * sizeof(float)));
            } else if ((r = mfm__cuda.cu.cuMemcpyDtoH(stage, at, (size_t)(n * ds * sizeof(float)))) == 0) {
                for (i = 0; i < n; i++) mfm__gpu_block_copy(g, t, b + i, stage + i * ds, 0, whole);
            }
        }
        MFM_FREE(stage);
    }
    return r ? mfm__cu_fail(err, r, up ? "cuMemcpyHtoD (the model's tables to the GPU)" : "cuMemcpyDtoH (the trained model back from the GPU; its tables may be partly overwritten)") : MFM_OK;
}

/* Device memory set to zero, or to a copy of `bytes` bytes at host. */
static mfm_status mfm__gpu_put(mfm__gpu_trainer *g, mfm__cu_ptr *p, const void *host, uint64_t bytes, const char *what, mfm_error *err) {
    mfm__cu_result r;
    mfm_status st = mfm__gpu_take(g, p, bytes, what, err);
    if (st != MFM_OK || !bytes) return st;
    r = host ? mfm__cuda.cu.cuMemcpyHtoD(*p, host, (size_t)bytes) : mfm__cuda.cu.cuMemsetD8Async(*p, 0, (size_t)bytes, g->stream);
    return r ? mfm__cu_fail(err, r, host ? "cuMemcpyHtoD (uploading training data)" : "cuMemsetD8Async") : MFM_OK;
}

static void mfm__gpu_fit_free(mfm__gpu_trainer *g) {
    mfm__cu_context saved;
    int i;
    if (!g) return;
    for (i = 1; i < g->n_ranks && g->rank == 0; i++) mfm__gpu_fit_free(g->ranks[i]);
    if (g->dev) {
        mfm__cuda.cu.cuCtxGetCurrent(&saved);
        mfm__cuda.cu.cuCtxSetCurrent(g->dev->context);
        if (g->stream) mfm__cuda.cu.cuStreamSynchronize(g->stream);
        if (g->copy) mfm__cuda.cu.cuStreamSynchronize(g->copy);
        if (g->comm) mfm__cuda.nccl.ncclCommDestroy(g->comm); /* it may change the thread's device: inside the save and restore */
        for (i = 0; i < g->n_owned; i++) mfm__cuda.cu.cuMemFree(g->owned[i]);
        for (i = 0; i < 2; i++) {
            if (g->host[i]) mfm__cuda.cu.cuMemFreeHost(g->host[i]);
            if (g->copied[i]) mfm__cuda.cu.cuEventDestroy(g->copied[i]);
            if (g->consumed[i]) mfm__cuda.cu.cuEventDestroy(g->consumed[i]);
        }
        if (g->stream) mfm__cuda.cu.cuStreamDestroy(g->stream);
        if (g->copy) mfm__cuda.cu.cuStreamDestroy(g->copy);
        if (g->order_copied) mfm__cuda.cu.cuEventDestroy(g->order_copied);
        mfm__cuda.cu.cuCtxSetCurrent(saved);
    }
    MFM_FREE(g->valid_scores);
    MFM_FREE(g);
}

/* The most blocks one tensor's batch can touch: every row touches at most `per_row`. */
static uint64_t mfm__touch_bound(uint64_t n_blocks, uint64_t rows, uint64_t per_row) {
    return per_row && rows > n_blocks / per_row ? n_blocks : rows * per_row;
}

/* Uploads the model, the rows (or makes the chunk buffers) and the validation rows to one
   device; allocates the gradient sums, touched lists and per-batch buffers. n_ranks > 1: GPU
   `rank` of that many, each holding a shard of the factors (>>gpu-shards). */
static mfm_status mfm__gpu_rank_start(mfm__gpu_trainer **out, mfm_model *m, int device, int rank, int n_ranks, const mfm_csr *d, uint64_t n_train,
                                      const mfm_csr *valid, const float *class_weights, const mfm__data_info *info, int ahead, mfm_error *err) {
    const mfm_params *p = &m->params;
    const uint32_t C = m->n_classes, z = (uint32_t)(info->max_row_nnz ? info->max_row_nnz : 1);
    const uint64_t nnz = d->row_offsets[d->n_rows], gsize = p->deterministic ? 16 : 4;
    const int fields = p->model != MFM_MODEL_FM;
    mfm__gpu_trainer *g;
    mfm__train_args *a;
    mfm__cu_context saved;
    mfm__cu_result r;
    mfm_status st;
    size_t free_now = 0, total = 0;
    uint64_t resident_bytes, batch_nnz;
    int t;
    *out = NULL;
    if (!(g = (mfm__gpu_trainer *)mfm__calloc(1, sizeof *g))) return mfm__fail(err, MFM_ERR_OUT_OF_MEMORY, "out of memory for a GPU trainer");
    g->m = m;
    g->device = device;
    g->rank = rank;
    g->n_ranks = n_ranks;
    a = &g->a;
    a->shards = (uint32_t)n_ranks;
    a->k_all = (uint32_t)m->k;
    g->k = (uint32_t)m->k;
    if (n_ranks > 1 && !p->linear_only) { /* rank r's factors: an even share, the first k % n_ranks shards one more */
        const uint32_t share = (uint32_t)m->k / (uint32_t)n_ranks, more = (uint32_t)m->k % (uint32_t)n_ranks, r = (uint32_t)rank;
        g->k = share + (r < more);
        g->first_factor = r * share + (r < more ? r : more);
    }
    {
        mfm_params shard = *p;
        shard.k = (int)g->k;
        mfm__shape_tables(&shard, m->n_features, m->n_fields, m->n_slots, g->tab);
    }
    if ((st = mfm__gpu_enter(device, &g->dev, &saved, err)) != MFM_OK) {
        MFM_FREE(g);
        return st;
    }
    *out = g;
    mfm__cuda.cu.cuMemGetInfo(&free_now, &total);
    g->free_bytes = p->gpu_memory_limit && p->gpu_memory_limit < free_now ? p->gpu_memory_limit : free_now;
    if ((r = mfm__cuda.cu.cuStreamCreate(&g->stream, 1)) != 0 || (r = mfm__cuda.cu.cuStreamCreate(&g->copy, 1)) != 0) {
        mfm__gpu_leave(saved);
        return mfm__cu_fail(err, r, "cuStreamCreate");
    }
    g->batch_rows = n_train < (uint64_t)p->batch_size ? n_train : (uint64_t)p->batch_size;
    batch_nnz = mfm__touch_bound(nnz, g->batch_rows, z); /* the most a batch can hold */
    /* A batch whose non-zeros number at least 1/128 of the features lists them with a sweep of
       the marks (kernels/train.cu, mfm_train_list), one with fewer on their first touches: on
       the H100 the sweep of 10^6 marks paid from 10^4 non-zeros a batch (Criteo at batch 256). */
    g->sweep_rows = (uint64_t)((double)m->n_features * (double)(d->n_rows ? d->n_rows : 1) / (128.0 * (double)(nnz ? nnz : 1))) + 1;
    g->n_valid = valid ? valid->n_rows : 0;
    if (p->model == MFM_MODEL_FFM && !p->linear_only && p->deterministic) { /* pair sums gathered by feature, where a warp's sums fit */
        const uint64_t warp_bytes = (uint64_t)C * m->n_fields * (uint64_t)g->k * 16;
        a->gather = warp_bytes <= 48 * 1024 && batch_nnz < 0xFFFFFFFFu;
        g->gather_warps = a->gather ? (48 * 1024 / warp_bytes < 8 ? (unsigned)(48 * 1024 / warp_bytes) : 8) : 0;
        g->gather_shared = g->gather_warps * (unsigned)warp_bytes;
    }
    for (t = 0; t < MFM_TENSOR_COUNT && st == MFM_OK; t++) { /* the tables and their gradient sums */
        const mfm__table *tab = &g->tab[t];
        const uint64_t sums = tab->n_blocks * C * tab->len;
        a->n_blocks[t] = tab->n_blocks;
        a->stride[t] = mfm__gpu_stride(tab);
        a->len[t] = tab->len;
        if (!tab->n_blocks) continue;
        if (tab->guest) /* W (>>model): V comes after it, so its table is placed below */
            a->table[t] = 0;
        else if ((st = mfm__gpu_take(g, &a->table[t], mfm__gpu_table_bytes(g, t), "the model's parameters and optimizer state", err)) == MFM_OK)
            st = mfm__gpu_table_copy(g, t, a->table[t], 1, err);
        if (st != MFM_OK || t == MFM_TENSOR_W0) continue;
        if (a->gather && t == MFM_TENSOR_V) { /* the gather rounds V's sums: floats, and exact ones for features of several chunks */
            st = mfm__gpu_put(g, &a->grad[t], NULL, sums * 4, "the gradient sums", err);
            if (st == MFM_OK) st = mfm__gpu_put(g, &a->spill, NULL, sums * 16, "the gradient sums", err);
        } else {
            st = mfm__gpu_put(g, &a->grad[t], NULL, sums * gsize, "the gradient sums", err);
        }
    }
    if (st == MFM_OK && g->tab[MFM_TENSOR_W].guest) /* W in V's blocks, after V's k values and their state (mfm__place_guest) */
        a->table[MFM_TENSOR_W] = a->table[MFM_TENSOR_V] + (mfm__cu_ptr)((g->tab[MFM_TENSOR_V].len + g->tab[MFM_TENSOR_V].state_len * (uint64_t)(m->n_slots - 1)) * sizeof(float));
    /* what a batch touched: features (with FFM their field masks) and FwFM's entries of R */
    if (st == MFM_OK) st = mfm__gpu_put(g, &a->mark[0], NULL, (uint64_t)m->n_features * 4, "the touched marks", err);
    if (st == MFM_OK) st = mfm__gpu_take(g, &a->list[0], mfm__touch_bound(m->n_features, g->batch_rows, z) * 8, "the touched lists", err);
    if (st == MFM_OK && p->model == MFM_MODEL_FFM && !p->linear_only) {
        a->mask_words = (m->n_fields + 63) / 64;
        st = mfm__gpu_put(g, &a->field_mask, NULL, (uint64_t)m->n_features * a->mask_words * 8, "the field masks", err);
    }
    if (st == MFM_OK && a->gather) { /* the batch's non-zeros listed by feature */
        const uint64_t listed = mfm__touch_bound(m->n_features, g->batch_rows, z);
        st = mfm__gpu_put(g, &a->occ, NULL, (uint64_t)m->n_features * 4, "the batch's non-zeros by feature", err);
        if (st == MFM_OK) st = mfm__gpu_take(g, &a->occ_start, listed * 4, "the batch's non-zeros by feature", err);
        if (st == MFM_OK) st = mfm__gpu_take(g, &a->occ_count, listed * 4, "the batch's non-zeros by feature", err);
        if (st == MFM_OK) st = mfm__gpu_take(g, &a->chunk_owner, batch_nnz * 8, "the batch's non-zeros by feature", err);
        if (st == MFM_OK) st = mfm__gpu_put(g, &a->tally, NULL, 2 * 3 * 4, "the batch's non-zeros by feature", err);
        if (st == MFM_OK) st = mfm__gpu_take(g, &a->occ_list, batch_nnz * 8, "the batch's non-zeros by feature", err);
        if (st == MFM_OK) st = mfm__gpu_take(g, &a->batch_rows, g->batch_rows * 8, "the batch's non-zeros by feature", err);
    }
    if (st == MFM_OK && p->model == MFM_MODEL_FWFM && !p->linear_only) {
        const uint64_t entries = g->tab[MFM_TENSOR_R].n_blocks;
        st = mfm__gpu_put(g, &a->mark[1], NULL, entries * 4, "the touched marks", err);
        if (st == MFM_OK) st = mfm__gpu_take(g, &a->list[1], mfm__touch_bound(entries, g->batch_rows, (uint64_t)z * (z - 1) / 2) * 8, "the touched lists", err);
    }
    if (st == MFM_OK) st = mfm__gpu_put(g, &a->count, NULL, 4 * sizeof(uint64_t), "the touched counts", err);
    if (st == MFM_OK) st = mfm__gpu_take(g, &a->totals, 2 * sizeof(double), "the epoch's loss", err);
    if (st == MFM_OK) st = mfm__gpu_take(g, &a->dlds, g->batch_rows * C * 4, "a batch's loss derivatives", err);
    if (st == MFM_OK) st = mfm__gpu_take(g, &a->scores, (g->batch_rows > g->n_valid ? g->batch_rows : g->n_valid) * C * 4, "the scores", err);
    if (st == MFM_OK) st = mfm__gpu_take(g, &a->row_loss, g->batch_rows * 2 * sizeof(double), "a batch's losses", err);
    if (st == MFM_OK && p->model == MFM_MODEL_FM && !p->linear_only) st = mfm__gpu_take(g, &a->sums, g->batch_rows * C * (uint64_t)g->k * 4, "a batch's FM sums", err);
    if (st == MFM_OK && class_weights)
        st = mfm__gpu_put(g, &a->class_weights, class_weights, (p->task == MFM_TASK_BINARY ? 2 : C) * sizeof(float), "the class weights", err);
    a->line = mfm__adagrad_kind(p->optimizer) && p->batch_size > 1 && !p->pairs_only && rank == 0; /* the CPU's tr->line; shards: the first's linear terms */
    if (st == MFM_OK && a->line) {
        const uint64_t w_sums = g->tab[MFM_TENSOR_W].n_blocks * C;
        st = mfm__gpu_put(g, &a->grad_sq, NULL, w_sums * gsize, "the linear terms' line search", err);
        if (st == MFM_OK) st = mfm__gpu_put(g, &a->line_step[0], NULL, C * 4, "the linear terms' line search", err);
        if (st == MFM_OK) st = mfm__gpu_put(g, &a->line_step[1], NULL, w_sums * 4, "the linear terms' line search", err);
        if (st == MFM_OK) st = mfm__gpu_take(g, &a->line_delta, g->batch_rows * C * 8, "the linear terms' line search", err);
        if (st == MFM_OK) st = mfm__gpu_take(g, &a->line_alpha, 8, "the linear terms' line search", err);
        if (st == MFM_OK) st = mfm__gpu_put(g, &a->line_parts, NULL, (uint64_t)g->dev->sm_count * 8 * 2 * 8, "the linear terms' line search", err);
    }
    if (st == MFM_OK && valid) { /* validation rows stay on the device */
        const uint64_t vnnz = valid->row_offsets[valid->n_rows];
        st = mfm__gpu_put(g, &g->valid_offsets, valid->row_offsets, (valid->n_rows + 1) * 8, "the validation rows", err);
        if (st == MFM_OK) st = mfm__gpu_put(g, &g->valid_features, valid->features, vnnz * 4, "the validation rows", err);
        if (st == MFM_OK && fields) st = mfm__gpu_put(g, &g->valid_fields, valid->fields, vnnz * 4, "the validation rows", err);
        if (st == MFM_OK && valid->values) st = mfm__gpu_put(g, &g->valid_values, valid->values, vnnz * 4, "the validation rows", err);
        if (st == MFM_OK && !(g->valid_scores = (float *)mfm__alloc(valid->n_rows * C, sizeof(float))))
            st = mfm__fail(err, MFM_ERR_OUT_OF_MEMORY, "out of memory for the validation scores");
    }
    if (st == MFM_OK && n_ranks > 1) { /* before the rows take what is left: the shards' parts of the scores, of R's sums, of row-wise AdaGrad's squares */
        st = mfm__gpu_take(g, &a->partials, (uint64_t)n_ranks * g->batch_rows * C * 4, "the shards' parts of a batch's scores", err);
        if (st == MFM_OK && a->grad[MFM_TENSOR_R])
            st = mfm__gpu_take(g, &a->r_parts, (uint64_t)n_ranks * g->tab[MFM_TENSOR_R].n_blocks * C * gsize, "the shards' sums of R", err);
        if (st == MFM_OK && p->optimizer == MFM_OPTIMIZER_ROWWISE_ADAGRAD && !p->linear_only)
            st = mfm__gpu_put(g, &a->rowwise_sq, NULL, g->tab[MFM_TENSOR_V].n_blocks * C * 4, "row-wise AdaGrad's squares, added up over the shards", err);
    }
    /* the rows: resident when they fit (keeping 1/16 for the early-stopping copy and slack) */
    resident_bytes = (d->n_rows + 1) * 8 + nnz * 4 * (1 + (uint64_t)fields + (d->values != NULL)) + d->n_rows * 4 * (1 + (uint64_t)(d->weights != NULL)) + n_train * 8 * (ahead ? 2 : 1);
    if (st == MFM_OK && resident_bytes <= g->free_bytes - g->free_bytes / 16) {
        st = mfm__gpu_put(g, &a->offsets, d->row_offsets, (d->n_rows + 1) * 8, "the training rows", err);
        if (st == MFM_OK) st = mfm__gpu_put(g, &a->features, d->features, nnz * 4, "the training rows", err);
        if (st == MFM_OK && fields) st = mfm__gpu_put(g, &a->fields, d->fields, nnz * 4, "the training rows", err);
        if (st == MFM_OK && d->values) st = mfm__gpu_put(g, &a->values, d->values, nnz * 4, "the training rows", err);
        if (st == MFM_OK) st = mfm__gpu_put(g, &a->labels, d->labels, d->n_rows * 4, "the training rows", err);
        if (st == MFM_OK && d->weights) st = mfm__gpu_put(g, &a->weights, d->weights, d->n_rows * 4, "the training rows", err);
        if (st == MFM_OK) st = mfm__gpu_take(g, &g->order[0], n_train * 8, "the row order", err);
        if (st == MFM_OK && ahead) st = mfm__gpu_take(g, &g->order[1], n_train * 8, "the next epoch's row order", err);
        if (st == MFM_OK && ahead && (r = mfm__cuda.cu.cuEventCreate(&g->order_copied, 2)) != 0) st = mfm__cu_fail(err, r, "cuEventCreate");
    } else if (st == MFM_OK) { /* streamed: chunks of whole batches, at least one batch of the longest rows */
        int b;
        const uint64_t rows_wanted = n_train / 4 < ((uint64_t)1 << 16) ? n_train / 4 : ((uint64_t)1 << 16); /* at least four chunks */
        const uint64_t nnz_wanted = nnz / 4 < ((uint64_t)1 << 22) ? nnz / 4 : ((uint64_t)1 << 22);
        g->streaming = 1;
        g->chunk_rows = g->batch_rows > rows_wanted ? g->batch_rows : rows_wanted;
        g->chunk_nnz = g->batch_rows * z > nnz_wanted + z ? g->batch_rows * z : nnz_wanted + z;
        g->lay = mfm__chunk_layout_of(g->chunk_rows, g->chunk_nnz, 1);
        mfm__log(p, MFM_LOG_INFO, "the rows (%.1f MB) do not fit next to the model on the GPU: they stream from host memory in chunks of up to %" PRIu64 " rows",
                 (double)resident_bytes / 1e6, g->chunk_rows);
        for (b = 0; b < 2 && st == MFM_OK; b++) {
            void *host = NULL;
            if ((r = mfm__cuda.cu.cuMemAllocHost(&host, g->lay.total)) != 0) {
                st = mfm__cu_fail(err, r, "cuMemAllocHost (pinned buffers for streaming the rows)");
                break;
            }
            g->host[b] = (unsigned char *)host;
            st = mfm__gpu_take(g, &g->chunk[b], g->lay.total, "the buffers that stream the rows", err);
            if (st == MFM_OK && ((r = mfm__cuda.cu.cuEventCreate(&g->copied[b], 2)) != 0 || (r = mfm__cuda.cu.cuEventCreate(&g->consumed[b], 2)) != 0))
                st = mfm__cu_fail(err, r, "cuEventCreate");
        }
    }
    a->model = (int32_t)p->model, a->task = (int32_t)p->task, a->optimizer = (int32_t)p->optimizer;
    a->linear_only = p->linear_only, a->pairs_only = p->pairs_only || rank > 0, a->normalize = p->normalize_rows > 0; /* shards: the first holds w0 and w */
    a->lr = (float)p->learning_rate, a->ftrl_beta = (float)p->ftrl_beta, a->smoothing = (float)p->label_smoothing;
    a->beta1 = p->adam_beta1, a->beta2 = p->adam_beta2, a->eps = p->adam_epsilon;
    a->l1[MFM_TENSOR_W] = (float)p->l1_linear, a->l2[MFM_TENSOR_W] = (float)p->l2_linear;
    a->l1[MFM_TENSOR_V] = a->l1[MFM_TENSOR_R] = (float)p->l1_factors;
    a->l2[MFM_TENSOR_V] = a->l2[MFM_TENSOR_R] = (float)p->l2_factors;
    a->n_fields = m->n_fields, a->n_classes = C, a->k = g->k;
    a->group = 32;
    if (p->model == MFM_MODEL_FM) /* deterministic: two lanes a factor, each adding half the row's exact sums */
        for (a->group = 1; a->group < 32 && a->group < g->k * (p->deterministic ? 2u : 1u);) a->group *= 2;
    g->rows_per_block = 256 / a->group;
    g->max_blocks = (unsigned)g->dev->sm_count * 8;
    /* _wide for k a multiple of 8; exact sums only in batches of 2^20 non-zeros or more: where
       fewer blocks are touched the narrow kernel's occupancy hides more (kernels/train.cu) */
    g->apply = g->dev->train_apply[p->deterministic][p->optimizer - MFM_OPTIMIZER_SGD][g->k % 8 == 0 && (!p->deterministic || batch_nnz >= ((uint64_t)1 << 20))];
    if (st == MFM_OK) { /* every block of the step kernel goes round the items: a second wave would wait for the first */
        int per_sm = 0;
        if ((r = mfm__cuda.cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, g->apply, 256, 0)) != 0)
            st = mfm__cu_fail(err, r, "cuOccupancyMaxActiveBlocksPerMultiprocessor");
        g->apply_blocks = C + 1 + (unsigned)g->dev->sm_count * (unsigned)(per_sm > 0 ? per_sm : 1);
        if (st == MFM_OK && a->gather) {
            if ((r = mfm__cuda.cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, g->dev->ffm_gather[mfm__k_kernel((int)g->k)], 32 * (int)g->gather_warps, g->gather_shared)) != 0)
                st = mfm__cu_fail(err, r, "cuOccupancyMaxActiveBlocksPerMultiprocessor");
            g->gather_blocks = (unsigned)g->dev->sm_count * (unsigned)(per_sm > 0 ? per_sm : 1);
            { /* chunks of up to 32 non-zeros, about four for each warp the device runs at once: small batches, whose
                 time is the longest chunk's, in short ones */
                const uint64_t per_warp = batch_nnz / (4 * (uint64_t)g->gather_blocks * g->gather_warps);
                a->chunk = per_warp < 4 ? 4 : per_warp > 32 ? 32 : (uint32_t)per_warp;
            }
        }
    }
    if (p->model == MFM_MODEL_FWFM && !p->linear_only) { /* R's sums through shared memory when they fit the 48 KB any launch may ask */
        const uint64_t FF = (uint64_t)m->n_fields * m->n_fields, bytes = (C * FF * gsize + 4 * FF + 7) & ~(uint64_t)7;
        if (bytes <= 48 * 1024) g->r_shared = (unsigned)bytes;
    }
    g->rows_shared = g->r_shared;
    if (p->model == MFM_MODEL_FWFM && !p->linear_only && !p->deterministic && mfm__k_kernel((int)g->k) > 0) {
        /* fast sums: rows up to S long through shared memory (kernels/train.cu, mfm_stage_of),
           beside R's sums in the 48 KB any launch may ask for: every class's pair weights, then
           per warp S non-zeros of k + 1 floats; S the longest row (a multiple of 4, at most 64)
           or what fits, and at least 8. (The exact sums' kernels staged ran at 0.7x of their
           own unstaged speed at k = 4 and 8: they never stage.) */
        const uint64_t weights = mfm__staged_weight_floats(C, m->n_fields), before = (g->r_shared + 15) & ~15u;
        const uint64_t per_row = 4 * 256 / 32 * (g->k + 1), room = 48 * 1024 > before + 4 * weights ? 48 * 1024 - before - 4 * weights : 0;
        uint64_t S = z < 64 ? (z + 3) & ~(uint64_t)3 : 64;
        if (S * per_row > room) S = room / per_row & ~(uint64_t)3;
        if (S >= 8) a->stage_nnz = (uint32_t)S, g->stage_bytes = (unsigned)(4 * weights + S * per_row), g->rows_shared = (unsigned)(before + g->stage_bytes);
    }
    mfm__gpu_leave(saved);
    return st;
}

/* The fit's trainer: one device, or (params.n_devices > 1) one on each device named, joined by
   NCCL communicators, rank 0 the handle (>>gpu-shards). NCCL is looked for first, so that a
   machine without it says so before any upload. */
static mfm_status mfm__gpu_fit_start(mfm__gpu_trainer **out, mfm_model *m, const mfm_csr *d, uint64_t n_train, const mfm_csr *valid,
                                     const float *class_weights, const mfm__data_info *info, int ahead, mfm_error *err) {
    const mfm_params *p = &m->params;
    const int n = p->n_devices > 1 ? p->n_devices : 1;
    mfm__nccl_comm comms[MFM_MAX_DEVICES];
    mfm__cu_context saved;
    mfm__gpu_trainer *g;
    mfm_status st;
    int r, rc;
    *out = NULL;
    if (n == 1) return mfm__gpu_rank_start(out, m, p->device, 0, 1, d, n_train, valid, class_weights, info, ahead, err);
    if ((st = mfm__nccl_load(err)) != MFM_OK || (st = mfm__driver_load(err)) != MFM_OK) return st;
    for (r = 0; r < n; r++)
        if (p->devices[r] >= mfm__cuda.n_devices)
            return mfm__fail(err, MFM_ERR_CUDA_NO_DEVICE, "there is no CUDA device %d: this machine has %d (0 .. %d)", p->devices[r], mfm__cuda.n_devices, mfm__cuda.n_devices - 1);
    if (!p->linear_only && m->k < n) /* training only: prediction shares rows out, not factors */
        return mfm__fail(err, MFM_ERR_INVALID_PARAM, "params.k = %d factors cannot be shared out among %d GPUs (params.n_devices): each GPU holds at least one; train on %d GPUs or fewer",
                         m->k, n, m->k);
    if ((st = mfm__gpu_rank_start(out, m, p->devices[0], 0, n, d, n_train, valid, class_weights, info, 0, err)) != MFM_OK) return st;
    g = *out;
    g->ranks[0] = g;
    for (r = 1; r < n && st == MFM_OK; r++) /* shards score the validation rows too: each its part */
        st = mfm__gpu_rank_start(&g->ranks[r], m, p->devices[r], r, n, d, n_train, valid, class_weights, info, 0, err);
    if (st != MFM_OK) {
        g->n_ranks = r; /* the ranks made so far, freed with rank 0 */
        return st;
    }
    mfm__cuda.cu.cuCtxGetCurrent(&saved);
    rc = mfm__cuda.nccl.ncclCommInitAll(comms, n, p->devices);
    mfm__cuda.cu.cuCtxSetCurrent(saved);
    if (rc != 0) return mfm__nccl_fail(err, rc, "ncclCommInitAll (joining the GPUs)");
    for (r = 0; r < n; r++) g->ranks[r]->comm = comms[r];
    return MFM_OK;
}

/* The batch of a->n_batch rows described by g->a, on g's device (current): the rows' launches
   (mfm__gpu_batch_rows: scores, losses, gradient sums, what they touched), then the steps'
   (mfm__gpu_batch_step); several GPUs exchange sums between the two. */
static unsigned mfm__gpu_row_blocks(const mfm__gpu_trainer *g) {
    const uint64_t need = (g->a.n_batch + g->rows_per_block - 1) / g->rows_per_block;
    return need < g->max_blocks ? (unsigned)need : g->max_blocks;
}

static mfm_status mfm__gpu_batch_rows(mfm__gpu_trainer *g, mfm_error *err) {
    mfm__train_args *a = &g->a;
    void *params[1];
    mfm__cu_result r;
    const unsigned blocks = mfm__gpu_row_blocks(g);
    if (++g->stamp == 0) { /* wrapped: every mark must read as stale again */
        int i;
        for (i = 0; i < 2; i++)
            if (a->mark[i] && (r = mfm__cuda.cu.cuMemsetD8Async(a->mark[i], 0, (size_t)(a->n_blocks[i ? MFM_TENSOR_R : MFM_TENSOR_W] * 4), g->stream)) != 0)
                return mfm__cu_fail(err, r, "cuMemsetD8Async");
        g->stamp = 1;
    }
    a->stamp = g->stamp;
    a->parity = (uint32_t)(g->batches++ & 1);
    a->score_only = 0;
    a->r_shared = g->r_shared;
    a->sweep = a->n_batch >= g->sweep_rows;
    params[0] = a;
    if ((r = mfm__cuda.cu.cuLaunchKernel(g->dev->train_rows[g->m->params.deterministic][mfm__k_kernel((int)g->k)], blocks, 1, 1, 256, 1, 1, g->rows_shared, g->stream, params, NULL)) != 0)
        return mfm__cu_fail(err, r, "cuLaunchKernel (training rows)");
    if (a->sweep && (r = mfm__cuda.cu.cuLaunchKernel(g->dev->train_list, g->max_blocks, 1, 1, 256, 1, 1, 0, g->stream, params, NULL)) != 0)
        return mfm__cu_fail(err, r, "cuLaunchKernel (listing the touched features)");
    if (a->gather && ((r = mfm__cuda.cu.cuLaunchKernel(g->dev->ffm_starts, blocks, 1, 1, 256, 1, 1, 0, g->stream, params, NULL)) != 0 ||
                      (r = mfm__cuda.cu.cuLaunchKernel(g->dev->ffm_place, blocks, 1, 1, 256, 1, 1, 0, g->stream, params, NULL)) != 0 ||
                      (r = mfm__cuda.cu.cuLaunchKernel(g->dev->ffm_gather[mfm__k_kernel((int)g->k)], g->gather_blocks, 1, 1, 32 * g->gather_warps, 1, 1, g->gather_shared,
                                                       g->stream, params, NULL)) != 0))
        return mfm__cu_fail(err, r, "cuLaunchKernel (FFM's pair sums by feature)");
    return MFM_OK;
}

static mfm_status mfm__gpu_batch_step(mfm__gpu_trainer *g, mfm_error *err) {
    mfm__train_args *a = &g->a;
    void *params[1];
    mfm__cu_result r;
    params[0] = a;
    if ((r = mfm__cuda.cu.cuLaunchKernel(g->apply, g->apply_blocks, 1, 1, 256, 1, 1, 0, g->stream, params, NULL)) != 0)
        return mfm__cu_fail(err, r, "cuLaunchKernel (optimizer steps)");
    a->line_blocks = (uint32_t)((a->n_batch + 255) / 256 < g->max_blocks ? (a->n_batch + 255) / 256 : g->max_blocks); /* mfm_train_line_delta's */
    if (a->line && ((r = mfm__cuda.cu.cuLaunchKernel(g->dev->line[0], a->line_blocks, 1, 1, 256, 1, 1, 0, g->stream, params, NULL)) != 0 ||
                    (r = mfm__cuda.cu.cuLaunchKernel(g->dev->line[1], 1, 1, 1, 256, 1, 1, 0, g->stream, params, NULL)) != 0 ||
                    (r = mfm__cuda.cu.cuLaunchKernel(g->dev->line[2], g->max_blocks, 1, 1, 256, 1, 1, 0, g->stream, params, NULL)) != 0))
        return mfm__cu_fail(err, r, "cuLaunchKernel (the linear terms' line search)");
    return MFM_OK;
}

/* Gathers the rows order[0 .. n) into set b's pinned buffer, offsets counted from 0. */
static void mfm__gpu_gather(mfm__gpu_trainer *g, const mfm_csr *d, const uint64_t *order, uint64_t n, int b) {
    unsigned char *h = g->host[b];
    uint64_t *offsets = (uint64_t *)(h + g->lay.offsets), i, at = 0;
    float *labels = (float *)(h + g->lay.per_row[0]), *weights = (float *)(h + g->lay.per_row[1]);
    for (i = 0; i < n; i++) {
        const uint64_t lo = d->row_offsets[order[i]], z = d->row_offsets[order[i] + 1] - lo;
        offsets[i] = at;
        memcpy(h + g->lay.features + at * 4, d->features + lo, (size_t)z * 4);
        if (g->m->params.model != MFM_MODEL_FM) memcpy(h + g->lay.fields + at * 4, d->fields + lo, (size_t)z * 4);
        if (d->values) memcpy(h + g->lay.values + at * 4, d->values + lo, (size_t)z * 4);
        labels[i] = d->labels[order[i]];
        if (d->weights) weights[i] = d->weights[order[i]];
        at += z;
    }
    offsets[n] = at;
}

/* Streamed rows: where the chunk from order[next] ends, whole batches while they fit the chunk
   buffers (one at least); *nnz gets its non-zeros. */
static uint64_t mfm__gpu_chunk_end(const mfm__gpu_trainer *g, const mfm_csr *d, const uint64_t *order, uint64_t next, uint64_t n, uint64_t *nnz) {
    const uint64_t batch = (uint64_t)g->m->params.batch_size;
    uint64_t end = next, q;
    *nnz = 0;
    while (end < n) {
        const uint64_t stop = end + batch < n ? end + batch : n;
        uint64_t add = 0;
        for (q = end; q < stop; q++) add += d->row_offsets[order[q] + 1] - d->row_offsets[order[q]];
        if (end > next && (stop - next > g->chunk_rows || *nnz + add > g->chunk_nnz)) break;
        *nnz += add;
        end = stop;
    }
    return end;
}

/* Sends the chunk order[next .. end) (nnz non-zeros) in set b, whose buffers held an earlier
   chunk of the pass when `used`: gathered into its pinned buffer once that buffer's last copy is
   done, copied on the stream `copy` once the batches that read its device buffer are done; the
   trainer's stream waits for the copy, and g->a reads the rows there (a->first: a batch's first
   row in the chunk). The caller records consumed[b] after the chunk's batches. */
static mfm_status mfm__gpu_chunk_send(mfm__gpu_trainer *g, const mfm_csr *d, const uint64_t *order, uint64_t next, uint64_t end, uint64_t nnz, int b, int used,
                                      mfm_error *err) {
    mfm__train_args *a = &g->a;
    const int fields = g->m->params.model != MFM_MODEL_FM;
    /* the arrays' filled parts: offsets, features, fields, values, labels, weights */
    const size_t at[6] = {g->lay.offsets, g->lay.features, g->lay.fields, g->lay.values, g->lay.per_row[0], g->lay.per_row[1]};
    const size_t bytes[6] = {(size_t)(end - next + 1) * 8, (size_t)nnz * 4, fields ? (size_t)nnz * 4 : 0, d->values ? (size_t)nnz * 4 : 0, (size_t)(end - next) * 4,
                             d->weights ? (size_t)(end - next) * 4 : 0};
    mfm__cu_result r = 0;
    int k;
    if (used && (r = mfm__cuda.cu.cuEventSynchronize(g->copied[b])) != 0) return mfm__cu_fail(err, r, "cuEventSynchronize (streaming the rows)");
    mfm__gpu_gather(g, d, order + next, end - next, b);
    if (used) r = mfm__cuda.cu.cuStreamWaitEvent(g->copy, g->consumed[b], 0); /* its device buffer is free again */
    for (k = 0; k < 6 && r == 0; k++)
        if (bytes[k]) r = mfm__cuda.cu.cuMemcpyHtoDAsync(g->chunk[b] + at[k], g->host[b] + at[k], bytes[k], g->copy);
    if (r == 0 && (r = mfm__cuda.cu.cuEventRecord(g->copied[b], g->copy)) == 0) r = mfm__cuda.cu.cuStreamWaitEvent(g->stream, g->copied[b], 0);
    if (r != 0) return mfm__cu_fail(err, r, "streaming the rows to the GPU");
    a->rows = 0;
    a->offset_base = 0;
    a->offsets = g->chunk[b] + g->lay.offsets;
    a->features = g->chunk[b] + g->lay.features;
    a->fields = fields ? g->chunk[b] + g->lay.fields : 0;
    a->values = d->values ? g->chunk[b] + g->lay.values : 0;
    a->labels = g->chunk[b] + g->lay.per_row[0];
    a->weights = d->weights ? g->chunk[b] + g->lay.per_row[1] : 0;
    return MFM_OK;
}

/* A driver call's failure on one of several GPUs, naming the GPU. */
static mfm_status mfm__rank_fail(mfm__gpu_trainer *t, mfm__cu_result r, const char *what, mfm_error *err) {
    char step[160];
    snprintf(step, sizeof step, "%s, on GPU %d", what, t->device);
    return mfm__cu_fail(err, r, step);
}

static mfm_status mfm__rank_launch(mfm__gpu_trainer *t, mfm__cu_function f, unsigned blocks, unsigned threads, unsigned shared, const char *what, mfm_error *err) {
    void *params[1];
    mfm__cu_result r;
    params[0] = &t->a;
    mfm__cuda.cu.cuCtxSetCurrent(t->dev->context);
    if (!blocks) return MFM_OK;
    r = mfm__cuda.cu.cuLaunchKernel(f, blocks, 1, 1, threads, 1, 1, shared, t->stream, params, NULL);
    return r ? mfm__rank_fail(t, r, what, err) : MFM_OK;
}

/* GPUs that run collectives for two fits at once can wait on each other for ever (NCCL): one
   fit on several GPUs passes over its rows at a time in a process. */
static mfm__static_lock mfm__ranks_mutex = MFM__STATIC_LOCK_INIT;

/* ---- >>gpu-shards  Several GPUs, each holding a shard of the factors (params.n_devices > 1) ----

   A score is w0 + sum_i w_i x_i + a sum over the k factors (FM, FwFM and FFM alike: every dot
   product is one), and each factor's gradient needs only that factor and the row's dL/ds. So
   GPU r holds factors first_factor .. first_factor + k - 1 of every vector of V, with their
   optimizer state: the model's V (its largest part by far) is shared out, and a model larger
   than one GPU trains on several. w0 and W are the first GPU's (the others train them as
   pairs_only: untouched); FwFM's R is on every GPU. Every GPU reads every row: resident, or
   streamed in the same chunks as on one GPU (mfm__gpu_chunk_send), each GPU as it fits. Per
   batch:
     1. each GPU scores the batch's rows with its factors alone (score_only; the first GPU adds
        the linear terms);
     2. NCCL gathers every GPU's parts on every GPU;
     3. each GPU runs the rows kernel again, the score now the parts added up in GPU order (the
        same bits everywhere): losses, dL/ds, and its factors' gradient sums, as one GPU does;
     4. FwFM: R's gradient adds a dot product over the factors: every GPU's R sums are gathered
        and added up in GPU order (mfm_train_r_total); row-wise AdaGrad: each block's squares
        are added up over the GPUs by an all-reduce before the step;
     5. each GPU steps its own coordinates, the first its w0, W and their line search.
   What travels is a float per row and class (and R's sums), not per feature touched; row-wise
   AdaGrad adds a float per block of V (all of them, touched or not: its cost, docs/GPU.md).
   Nothing waits for the host between batches. Validation scores add up the GPUs' parts the
   same way; early stopping's copy and the final download take each GPU's factors back into
   their places. */

/* All GPUs' NCCL calls of one exchange, as a group; the first failure is kept. */
#define MFM__NCCL_EACH(rc, what, call)                                          \
    do {                                                                        \
        int g_rc_ = mfm__cuda.nccl.ncclGroupStart(), k_;                        \
        for (k_ = 0; k_ < g->n_ranks && g_rc_ == 0; k_++) {                     \
            mfm__gpu_trainer *const t_ = g->ranks[k_];                          \
            mfm__train_args *const a_ = &t_->a;                                 \
            g_rc_ = (call);                                                     \
        }                                                                       \
        (rc) = mfm__cuda.nccl.ncclGroupEnd();                                   \
        if (g_rc_ != 0) (rc) = g_rc_;                                           \
        if (rc) nccl_step = (what);                                             \
    } while (0)

/* A batch's rows from order[start] on, for a GPU whose rows are resident (g->order[0] holds the
   pass's order) or streamed (the chunk from order[chunk] on). */
static void mfm__gpu_rows_at(mfm__gpu_trainer *g, uint64_t start, uint64_t chunk) {
    g->a.offset_base = 0;
    g->a.first = g->streaming ? start - chunk : 0;
    g->a.rows = g->streaming ? 0 : g->order[0] + start * 8;
}

/* One batch of `rows` rows from order[start] (chunk: where the streamed rows' chunk starts) on
   every GPU, steps 1 to 5 above; *rc gets NCCL's failure, and *failed what it was exchanging. */
static mfm_status mfm__gpu_shards_batch(mfm__gpu_trainer *g, uint64_t start, uint64_t chunk, uint64_t rows, int *rc, const char **failed, mfm_error *err) {
    const int G = g->n_ranks, exact = g->m->params.deterministic;
    const uint64_t C = g->m->n_classes;
    const char *nccl_step = "";
    mfm_status st = MFM_OK;
    int k;
    for (k = 0; k < G && st == MFM_OK; k++) { /* 1. each GPU's part of the scores */
        mfm__gpu_trainer *t = g->ranks[k];
        mfm__train_args *a = &t->a;
        const mfm__cu_ptr scores = a->scores;
        mfm__gpu_rows_at(t, start, chunk);
        a->n_batch = rows;
        a->score_only = 1, a->r_shared = 0, a->scores = a->partials + (uint64_t)k * rows * C * 4;
        st = mfm__rank_launch(t, t->dev->train_rows[exact][mfm__k_kernel((int)t->k)], mfm__gpu_row_blocks(t), 256, t->stage_bytes, "cuLaunchKernel (scoring the rows)", err);
        a->score_only = 0, a->scores = scores;
    }
    if (st == MFM_OK) /* 2. */
        MFM__NCCL_EACH(*rc, "the parts of the batch's scores",
                       mfm__cuda.nccl.ncclAllGather((void *)(a_->partials + (uint64_t)k_ * rows * C * 4), (void *)a_->partials, (size_t)(rows * C), MFM__NCCL_FLOAT32, t_->comm,
                                                    t_->stream));
    for (k = 0; k < G && st == MFM_OK && *rc == 0; k++) { /* 3. */
        mfm__cuda.cu.cuCtxSetCurrent(g->ranks[k]->dev->context);
        st = mfm__gpu_batch_rows(g->ranks[k], err);
    }
    if (g->a.r_parts && st == MFM_OK && *rc == 0) { /* 4. */
        const uint64_t sums = g->tab[MFM_TENSOR_R].n_blocks * C * (exact ? 4 : 1);
        MFM__NCCL_EACH(*rc, "the sums of R", mfm__cuda.nccl.ncclAllGather((void *)a_->grad[MFM_TENSOR_R], (void *)a_->r_parts, (size_t)sums, MFM__NCCL_FLOAT32, t_->comm, t_->stream));
        for (k = 0; k < G && st == MFM_OK && *rc == 0; k++)
            st = mfm__rank_launch(g->ranks[k], g->ranks[k]->dev->r_total[exact], g->ranks[k]->max_blocks, 256, 0, "cuLaunchKernel (adding up the sums of R)", err);
    }
    if (g->a.rowwise_sq && st == MFM_OK && *rc == 0) {
        for (k = 0; k < G && st == MFM_OK; k++) {
            mfm__gpu_trainer *t = g->ranks[k];
            t->a.rowwise_squares = 1;
            st = mfm__rank_launch(t, t->apply, t->apply_blocks, 256, 0, "cuLaunchKernel (row-wise AdaGrad's squares)", err);
            t->a.rowwise_squares = 0;
        }
        if (st == MFM_OK)
            MFM__NCCL_EACH(*rc, "row-wise AdaGrad's squares",
                           mfm__cuda.nccl.ncclAllReduce((void *)a_->rowwise_sq, (void *)a_->rowwise_sq, (size_t)(t_->tab[MFM_TENSOR_V].n_blocks * C), MFM__NCCL_FLOAT32,
                                                        MFM__NCCL_SUM, t_->comm, t_->stream));
    }
    for (k = 0; k < G && st == MFM_OK && *rc == 0; k++) { /* 5. */
        mfm__cuda.cu.cuCtxSetCurrent(g->ranks[k]->dev->context);
        st = mfm__gpu_batch_step(g->ranks[k], err);
    }
    if (*rc) *failed = nccl_step;
    return st;
}

static mfm_status mfm__gpu_shards_pass(mfm__gpu_trainer *g, const mfm_csr *d, const uint64_t *order, uint64_t n, const mfm__epoch_order *meanwhile, double *loss,
                                       double *weight, mfm_error *err) {
    const int G = g->n_ranks;
    const uint64_t batch = (uint64_t)g->m->params.batch_size;
    const char *nccl_step = "";
    mfm__cu_context saved;
    mfm__cu_result r = 0;
    mfm_status st = MFM_OK;
    double totals[2] = {0, 0};
    uint64_t start, next, end = 0, nnz = 0;
    int k, i, rc = 0, streamer = -1; /* a GPU whose rows stream: its chunks (the same on every GPU that streams) */
    mfm__static_lock_take(&mfm__ranks_mutex);
    mfm__cuda.cu.cuCtxGetCurrent(&saved);
    for (k = 0; k < G && st == MFM_OK; k++) { /* the order to every GPU whose rows are resident, the epoch's loss to zero */
        mfm__gpu_trainer *t = g->ranks[k];
        mfm__cuda.cu.cuCtxSetCurrent(t->dev->context);
        if (t->streaming) streamer = k;
        if ((r = mfm__cuda.cu.cuMemsetD8Async(t->a.totals, 0, 2 * sizeof(double), t->stream)) != 0 ||
            (!t->streaming && (r = mfm__cuda.cu.cuMemcpyHtoDAsync(t->order[0], order, (size_t)(n * 8), t->stream)) != 0))
            st = mfm__rank_fail(t, r, "cuMemcpyHtoDAsync (the row order)", err);
    }
    for (i = 0, next = 0; next < n && st == MFM_OK && rc == 0; i++, next = end) { /* chunks of streamed rows (mfm__gpu_fit_pass); one where none streams */
        end = streamer < 0 ? n : mfm__gpu_chunk_end(g->ranks[streamer], d, order, next, n, &nnz);
        for (k = 0; k < G && st == MFM_OK; k++)
            if (g->ranks[k]->streaming) {
                mfm__cuda.cu.cuCtxSetCurrent(g->ranks[k]->dev->context);
                st = mfm__gpu_chunk_send(g->ranks[k], d, order, next, end, nnz, i & 1, i >= 2, err);
            }
        for (start = next; start < end && st == MFM_OK && rc == 0; start += batch)
            st = mfm__gpu_shards_batch(g, start, next, end - start < batch ? end - start : batch, &rc, &nccl_step, err);
        for (k = 0; k < G && st == MFM_OK && rc == 0; k++) /* the chunk's buffers are free again once its batches are done */
            if (g->ranks[k]->streaming && (r = mfm__cuda.cu.cuEventRecord(g->ranks[k]->consumed[i & 1], g->ranks[k]->stream)) != 0)
                st = mfm__rank_fail(g->ranks[k], r, "cuEventRecord", err);
    }
    if (st == MFM_OK && rc) {
        char step[160];
        snprintf(step, sizeof step, "exchanging %s among GPUs %d", nccl_step, g->ranks[0]->device);
        for (k = 1; k < G; k++) snprintf(step + strlen(step), sizeof step - strlen(step), "%s%d", k + 1 < G ? ", " : " and ", g->ranks[k]->device);
        st = mfm__nccl_fail(err, rc, step);
    }
    if (rc) /* a group that failed may have queued its collectives on some GPUs only: those would wait for ever */
        for (k = 0; k < G; k++) {
            mfm__cuda.nccl.ncclCommAbort(g->ranks[k]->comm);
            g->ranks[k]->comm = NULL;
        }
    if (st == MFM_OK && meanwhile) mfm__make_order(meanwhile);
    mfm__cuda.cu.cuCtxSetCurrent(g->dev->context);
    if (st == MFM_OK && (r = mfm__cuda.cu.cuMemcpyDtoHAsync(totals, g->a.totals, sizeof totals, g->stream)) != 0) st = mfm__rank_fail(g, r, "training", err);
    for (k = 0; k < G; k++) { /* every GPU idle again, failed or not */
        mfm__cuda.cu.cuCtxSetCurrent(g->ranks[k]->dev->context);
        if ((r = mfm__cuda.cu.cuStreamSynchronize(g->ranks[k]->stream)) != 0 && st == MFM_OK) st = mfm__rank_fail(g->ranks[k], r, "training", err);
    }
    mfm__cuda.cu.cuCtxSetCurrent(saved);
    mfm__static_lock_give(&mfm__ranks_mutex);
    *loss = totals[0];
    *weight = totals[1];
    return st;
}
#undef MFM__NCCL_EACH

/* One pass over the rows order[0 .. n) (the CPU's batches); *loss and *weight get the sums of
   weight * loss and of weight over its rows. Once every batch is launched, and before waiting
   for them, it makes the order `meanwhile` asks for. */
static mfm_status mfm__gpu_fit_pass(mfm__gpu_trainer *g, const mfm_csr *d, const uint64_t *order, uint64_t n, const mfm__epoch_order *meanwhile, double *loss,
                                    double *weight, mfm_error *err) {
    mfm__train_args *a = &g->a;
    const uint64_t batch = (uint64_t)g->m->params.batch_size;
    mfm__cu_context saved;
    mfm__cu_result r = 0;
    mfm__gpu_device *dev;
    mfm_status st;
    double totals[2] = {0, 0};
    uint64_t start;
    if (g->n_ranks > 1) return mfm__gpu_shards_pass(g, d, order, n, meanwhile, loss, weight, err);
    if ((st = mfm__gpu_enter(g->device, &dev, &saved, err)) != MFM_OK) return st;
    if ((r = mfm__cuda.cu.cuMemsetD8Async(a->totals, 0, 2 * sizeof(double), g->stream)) != 0) st = mfm__cu_fail(err, r, "cuMemsetD8Async");
    if (st == MFM_OK && !g->streaming) {
        if (g->order_sent && (r = mfm__cuda.cu.cuStreamWaitEvent(g->stream, g->order_copied, 0)) != 0) st = mfm__cu_fail(err, r, "cuStreamWaitEvent (the row order)");
        if (st == MFM_OK && order != g->order_sent && (r = mfm__cuda.cu.cuMemcpyHtoDAsync(g->order[g->order_at], order, (size_t)(n * 8), g->stream)) != 0)
            st = mfm__cu_fail(err, r, "cuMemcpyHtoDAsync (the row order)");
        g->order_sent = NULL;
        a->offset_base = a->first = 0;
        for (start = 0; start < n && st == MFM_OK; start += batch) {
            a->rows = g->order[g->order_at] + start * 8;
            a->n_batch = n - start < batch ? n - start : batch;
            if ((st = mfm__gpu_batch_rows(g, err)) == MFM_OK) st = mfm__gpu_batch_step(g, err);
        }
    }
    if (st == MFM_OK && g->streaming) { /* chunk i in set i & 1: gather, copy (stream `copy`), batches (stream `stream`) */
        uint64_t next = 0, end, nnz;
        int i;
        for (i = 0; next < n && st == MFM_OK; i++, next = end) {
            end = mfm__gpu_chunk_end(g, d, order, next, n, &nnz);
            st = mfm__gpu_chunk_send(g, d, order, next, end, nnz, i & 1, i >= 2, err);
            for (start = next; start < end && st == MFM_OK; start += batch) {
                a->first = start - next;
                a->n_batch = end - start < batch ? end - start : batch;
                if ((st = mfm__gpu_batch_rows(g, err)) == MFM_OK) st = mfm__gpu_batch_step(g, err);
            }
            if (st == MFM_OK && (r = mfm__cuda.cu.cuEventRecord(g->consumed[i & 1], g->stream)) != 0) st = mfm__cu_fail(err, r, "cuEventRecord");
        }
    }
    if (st == MFM_OK && meanwhile) {
        mfm__make_order(meanwhile);
        if (!g->streaming && g->order[1]) { /* up on the other stream while the batches run, into the buffer that the last pass read */
            g->order_at ^= 1;
            if ((r = mfm__cuda.cu.cuMemcpyHtoDAsync(g->order[g->order_at], meanwhile->out, (size_t)(n * 8), g->copy)) != 0 ||
                (r = mfm__cuda.cu.cuEventRecord(g->order_copied, g->copy)) != 0)
                st = mfm__cu_fail(err, r, "cuMemcpyHtoDAsync (the next epoch's row order)");
            else
                g->order_sent = meanwhile->out;
        }
    }
    if (st == MFM_OK && (r = mfm__cuda.cu.cuMemcpyDtoHAsync(totals, a->totals, sizeof totals, g->stream)) != 0) st = mfm__cu_fail(err, r, "training on the GPU");
    if (st == MFM_OK && (r = mfm__cuda.cu.cuStreamSynchronize(g->stream)) != 0) st = mfm__cu_fail(err, r, "training on the GPU");
    mfm__gpu_leave(saved);
    *loss = totals[0];
    *weight = totals[1];
    return st;
}

/* The early-stopping metric on the validation rows, scored on the device; shards (>>gpu-shards)
   each score their part, added up in GPU order. */
static mfm_status mfm__gpu_fit_metric(mfm__gpu_trainer *g, const mfm_csr *valid, double *metric, int *higher_better, mfm_error *err) {
    const int G = g->n_ranks;
    const uint64_t n = valid->n_rows * g->m->n_classes;
    mfm__cu_context saved;
    mfm__gpu_device *dev;
    mfm__cu_result r = 0;
    mfm_metrics met;
    mfm_status st = MFM_OK;
    uint64_t i;
    int k;
    for (k = 0; k < G && st == MFM_OK && r == 0; k++) {
        mfm__gpu_trainer *t = k ? g->ranks[k] : g;
        mfm__train_args a = t->a;
        void *params[1];
        const uint64_t need = (valid->n_rows + t->rows_per_block - 1) / t->rows_per_block;
        if ((st = mfm__gpu_enter(t->device, &dev, &saved, err)) != MFM_OK) break;
        a.offsets = t->valid_offsets, a.features = t->valid_features, a.fields = t->valid_fields, a.values = t->valid_values;
        a.rows = 0, a.first = 0, a.offset_base = 0, a.n_batch = valid->n_rows, a.score_only = 1, a.r_shared = 0;
        params[0] = &a;
        if ((r = mfm__cuda.cu.cuLaunchKernel(dev->train_rows[0][mfm__k_kernel((int)t->k)], need < t->max_blocks ? (unsigned)need : t->max_blocks, 1, 1, 256, 1, 1, t->stage_bytes,
                                             t->stream, params, NULL)) == 0 &&
            (r = mfm__cuda.cu.cuMemcpyDtoHAsync(t->valid_scores, a.scores, (size_t)(n * 4), t->stream)) == 0)
            r = mfm__cuda.cu.cuStreamSynchronize(t->stream);
        if (r) st = mfm__rank_fail(t, r, "scoring the validation rows on the GPU", err);
        mfm__gpu_leave(saved);
    }
    for (k = 1; k < G && st == MFM_OK; k++)
        for (i = 0; i < n; i++) g->valid_scores[i] += g->ranks[k]->valid_scores[i];
    if (st == MFM_OK && (st = mfm__score_metrics(g->m, valid, g->valid_scores, &met, err)) == MFM_OK) *metric = mfm_metrics_value(&met, g->m->params.metric, higher_better);
    return st;
}

/* KEEP_BEST: the tables as they are now become the best epoch's (a device copy, allocated on
   first use); RETURN_LAST and RETURN_BEST: the tables, or the best epoch's, back into the host
   model. Shards (>>gpu-shards): each GPU its own, its factors back into their places. */
static mfm_status mfm__gpu_fit_tables(mfm__gpu_trainer *g, int where, mfm_error *err) {
    mfm__cu_context saved;
    mfm__gpu_device *dev;
    mfm__cu_result r = 0;
    mfm_status st = MFM_OK;
    int t;
    for (t = 1; g->rank == 0 && t < g->n_ranks && st == MFM_OK; t++) st = mfm__gpu_fit_tables(g->ranks[t], where, err); /* the other shards first */
    if (st != MFM_OK || (st = mfm__gpu_enter(g->device, &dev, &saved, err)) != MFM_OK) return st;
    if (where != MFM__KEEP_BEST) r = mfm__cuda.cu.cuStreamSynchronize(g->stream); /* the copies below wait for no stream */
    for (t = 0; t < MFM_TENSOR_COUNT && st == MFM_OK && r == 0; t++) {
        const size_t bytes = (size_t)mfm__gpu_table_bytes(g, t);
        if (!g->a.table[t] || !bytes) continue; /* a guest's blocks come with its host's */
        if (where != MFM__KEEP_BEST)
            st = mfm__gpu_table_copy(g, t, where == MFM__RETURN_BEST ? g->best[t] : g->a.table[t], 0, err);
        else if (g->best[t] || (st = mfm__gpu_take(g, &g->best[t], bytes, "the best epoch's parameters (early stopping)", err)) == MFM_OK)
            r = mfm__cuda.cu.cuMemcpyDtoDAsync(g->best[t], g->a.table[t], bytes, g->stream);
    }
    if (st == MFM_OK && r == 0) r = mfm__cuda.cu.cuStreamSynchronize(g->stream);
    if (st == MFM_OK && r != 0)
        st = mfm__cu_fail(err, r, where == MFM__KEEP_BEST ? "keeping the best epoch's parameters on the GPU"
                                                          : "copying the trained model back from the GPU (the model's tables may be partly overwritten)");
    mfm__gpu_leave(saved);
    return st;
}

#endif /* MFM__GPU */

/* ============================================================================================
   >>cache-files  Listing and clearing the kernel cache (the `mfm cache` command)
   ============================================================================================ */

#if MFM__GPU

typedef struct mfm__cache_listing {
    mfm_cache_entry *out;
    size_t capacity, n;
} mfm__cache_listing;

static void mfm__cache_list_one(void *ctx, const char *dir, const char *name) {
    mfm__cache_listing *l = (mfm__cache_listing *)ctx;
    mfm_cache_entry *e;
    char path[704];
    struct stat st;
    if (l->n++ >= l->capacity) return;
    e = &l->out[l->n - 1];
    memset(e, 0, sizeof *e);
    snprintf(e->name, sizeof e->name, "%s", name);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (stat(path, &st) == 0) {
        mfm__mapping map;
        e->bytes = (uint64_t)st.st_size;
        e->mtime = (int64_t)st.st_mtime;
        if (strstr(name, ".tmp-") == NULL && mfm__map(path, &map, NULL) == MFM_OK) {
            e->valid = mfm__cache_entry_whole(map.bytes, map.size);
            mfm__unmap(&map);
        }
    }
}

MFMDEF mfm_status mfm_cache_list(char *dir, size_t dir_capacity, mfm_cache_entry *out, size_t capacity, size_t *n_entries, mfm_error *err) {
    char d[512];
    mfm__cache_listing l;
    int have_dir;
    l.out = out;
    l.capacity = out ? capacity : 0;
    l.n = 0;
    if (dir && dir_capacity) dir[0] = '\0';
    if (n_entries) *n_entries = 0;
    mfm__cuda_lock();
    if ((have_dir = mfm__cache_dir(d, sizeof d, err)) > 0) mfm__cache_visit(d, mfm__cache_list_one, &l);
    mfm__cuda_unlock();
    if (have_dir < 0) return err ? err->status : MFM_ERR_INVALID_PARAM;
    if (dir && dir_capacity) snprintf(dir, dir_capacity, "%s", d);
    if (n_entries) *n_entries = l.n;
    return mfm__ok(err);
}

static void mfm__cache_remove_one(void *ctx, const char *dir, const char *name) {
    char path[800]; /* a 512-byte folder, a 256-byte name */
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (remove(path) == 0) ++*(size_t *)ctx;
}

MFMDEF mfm_status mfm_cache_clear(size_t *n_removed, mfm_error *err) {
    char d[512];
    size_t n = 0;
    int have_dir;
    mfm__cuda_lock();
    if ((have_dir = mfm__cache_dir(d, sizeof d, err)) > 0) mfm__cache_visit(d, mfm__cache_remove_one, &n);
    mfm__cuda_unlock();
    if (n_removed) *n_removed = n;
    return have_dir < 0 ? (err ? err->status : MFM_ERR_INVALID_PARAM) : mfm__ok(err);
}

#else /* no GPU part: the same functions, each saying that this build has no GPU support */

#define MFM__NO_CUDA_SENTENCE "this build of modern_fm has no GPU part: " MFM__NO_GPU_WHY
static mfm_status mfm__gpu_fit_start(mfm__gpu_trainer **out, mfm_model *m, const mfm_csr *d, uint64_t n_train, const mfm_csr *valid,
                                     const float *class_weights, const mfm__data_info *info, int ahead, mfm_error *err) {
    (void)m, (void)d, (void)n_train, (void)valid, (void)class_weights, (void)info, (void)ahead;
    *out = NULL;
    return mfm__fail(err, MFM_ERR_CUDA_UNAVAILABLE, MFM__NO_CUDA_SENTENCE);
}
static mfm_status mfm__gpu_fit_pass(mfm__gpu_trainer *g, const mfm_csr *d, const uint64_t *order, uint64_t n, const mfm__epoch_order *meanwhile, double *loss,
                                    double *weight, mfm_error *err) {
    (void)g, (void)d, (void)order, (void)n, (void)meanwhile, (void)loss, (void)weight;
    return mfm__fail(err, MFM_ERR_CUDA_UNAVAILABLE, MFM__NO_CUDA_SENTENCE);
}
static mfm_status mfm__gpu_fit_metric(mfm__gpu_trainer *g, const mfm_csr *valid, double *metric, int *higher_better, mfm_error *err) {
    (void)g, (void)valid, (void)metric, (void)higher_better;
    return mfm__fail(err, MFM_ERR_CUDA_UNAVAILABLE, MFM__NO_CUDA_SENTENCE);
}
static mfm_status mfm__gpu_fit_tables(mfm__gpu_trainer *g, int where, mfm_error *err) {
    (void)g, (void)where;
    return mfm__fail(err, MFM_ERR_CUDA_UNAVAILABLE, MFM__NO_CUDA_SENTENCE);
}
static void mfm__gpu_fit_free(mfm__gpu_trainer *g) { (void)g; }
MFMDEF int mfm_cuda_available(void) { return 0; }
MFMDEF mfm_status mfm_cuda_configure(const mfm_cuda_config *config, mfm_error *err) {
    if (config && (unsigned)config->cache_mode >= (unsigned)MFM_CACHE_MODE_COUNT)
        return mfm__fail(err, MFM_ERR_INVALID_PARAM, "mfm_cuda_config.cache_mode = %d is not a cache mode (0 default, 1 on, 2 readonly, 3 off)",
                         (int)config->cache_mode);
    return mfm__ok(err);
}
MFMDEF mfm_status mfm_cuda_get_info(int device, mfm_cuda_info *out, mfm_error *err) {
    (void)device;
    if (out) memset(out, 0, sizeof *out);
    return mfm__fail(err, MFM_ERR_CUDA_UNAVAILABLE, MFM__NO_CUDA_SENTENCE);
}
MFMDEF mfm_status mfm_cuda_prepare(int device, mfm_error *err) {
    (void)device;
    return mfm__fail(err, MFM_ERR_CUDA_UNAVAILABLE, MFM__NO_CUDA_SENTENCE);
}
MFMDEF mfm_status mfm_cuda_build_kernels(const char *arch, mfm_kernel_build *out, mfm_error *err) {
    (void)arch;
    (void)out;
    return mfm__fail(err, MFM_ERR_NVRTC_UNAVAILABLE, MFM__NO_CUDA_SENTENCE);
}
MFMDEF mfm_status mfm_cache_list(char *dir, size_t dir_capacity, mfm_cache_entry *out, size_t capacity, size_t *n_entries, mfm_error *err) {
    (void)out;
    (void)capacity;
    if (dir && dir_capacity) dir[0] = '\0';
    if (n_entries) *n_entries = 0;
    return mfm__ok(err);
}
MFMDEF mfm_status mfm_cache_clear(size_t *n_removed, mfm_error *err) {
    if (n_removed) *n_removed = 0;
    return mfm__ok(err);
}
MFMDEF mfm_status mfm_gpu_model_upload(const mfm_model *model, int device, mfm_gpu_model **out, mfm_error *err) {
    (void)model;
    (void)device;
    if (out) *out = NULL;
    return mfm__fail(err, MFM_ERR_CUDA_UNAVAILABLE, MFM__NO_CUDA_SENTENCE);
}
MFMDEF void mfm_gpu_model_free(mfm_gpu_model *model) { (void)model; }
MFMDEF mfm_status mfm_gpu_predict_evaluate(mfm_gpu_model *model, const mfm_csr *data, mfm_output kind, float *out, size_t capacity, mfm_metrics *metrics,
                                           mfm_error *err) {
    (void)metrics;
    return mfm_gpu_predict(model, data, kind, out, capacity, err);
}
MFMDEF mfm_status mfm_gpu_predict(mfm_gpu_model *model, const mfm_csr *data, mfm_output kind, float *out, size_t capacity, mfm_error *err) {
    (void)model, (void)data, (void)kind, (void)out, (void)capacity;
    return mfm__fail(err, MFM_ERR_CUDA_UNAVAILABLE, MFM__NO_CUDA_SENTENCE);
}
MFMDEF mfm_status mfm_gpu_data_upload(mfm_gpu_model *model, const mfm_csr *data, mfm_gpu_data **out, mfm_error *err) {
    (void)model, (void)data;
    if (out) *out = NULL;
    return mfm__fail(err, MFM_ERR_CUDA_UNAVAILABLE, MFM__NO_CUDA_SENTENCE);
}
MFMDEF void mfm_gpu_data_free(mfm_gpu_data *data) { (void)data; }
MFMDEF mfm_status mfm_gpu_predict_resident(mfm_gpu_model *model, const mfm_gpu_data *data, mfm_output kind, float *out, size_t capacity,
                                           mfm_error *err) {
    (void)model, (void)data, (void)kind, (void)out, (void)capacity;
    return mfm__fail(err, MFM_ERR_CUDA_UNAVAILABLE, MFM__NO_CUDA_SENTENCE);
}

#endif /* MFM__GPU */

#ifdef __cplusplus
}
#endif
#endif /* MODERN_FM_IMPLEMENTATION */

/*
MIT License

Copyright (c) 2026 the modern_fm authors

Permission is hereby granted, free of charge, to any person obtaining a copy of this software and
associated documentation files (the "Software"), to deal in the Software without restriction,
including without limitation the rights to use, copy, modify, merge, publish, distribute,
sublicense, and/or sell copies of the Software, and to permit persons to whom the Software is
furnished to do so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in all copies or
substantial portions of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED, INCLUDING BUT
NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY, FITNESS FOR A PARTICULAR PURPOSE AND
NONINFRINGEMENT. IN NO EVENT SHALL THE AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES
OR OTHER LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM, OUT OF OR IN
CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE SOFTWARE.
*/
