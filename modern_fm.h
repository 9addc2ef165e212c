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
   README.md says exactly what is computed and which defaults we chose where others differ.

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
/* The implementation wants clock_gettime, which -std=c99 hides unless asked for before the
   first system header. */
#if (defined(MODERN_FM_IMPLEMENTATION) || defined(MFM_IMPLEMENTATION)) && !defined(_WIN32) && !defined(_POSIX_C_SOURCE) && \
    !defined(_GNU_SOURCE)
#define _POSIX_C_SOURCE 200809L
#endif

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

/* ############################################################################################
   ##                                                                                        ##
   ##  Implementation                                                                        ##
   ##                                                                                        ##
   ############################################################################################ */

#if (defined(MODERN_FM_IMPLEMENTATION) || defined(MFM_IMPLEMENTATION)) && !defined(MODERN_FM_IMPLEMENTATION_INCLUDED)
#define MODERN_FM_IMPLEMENTATION_INCLUDED

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

#ifdef __cplusplus
extern "C" {
#endif

/* ============================================================================================
   >>utilities  Errors, allocation, clock, random numbers
   ============================================================================================ */

#define MFM__NONE 0xFFFFFFFFu /* "no compact index yet" in the touched maps */

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

/* count * size bytes, or NULL when that overflows or memory is short. */
static void *mfm__alloc(uint64_t count, size_t size) {
    if (count == 0) count = 1;
    if (count > (uint64_t)SIZE_MAX / size) return NULL;
    return MFM_MALLOC((size_t)count * size);
}

static void *mfm__calloc(uint64_t count, size_t size) {
    void *p = mfm__alloc(count, size);
    if (p) memset(p, 0, (size_t)(count ? count : 1) * size);
    return p;
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

enum { MFM__STREAM_INIT = 1, MFM__STREAM_EPOCH = 2 };

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

typedef void (*mfm__task_fn)(void *ctx, int worker);

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

static void mfm__pool_loop(mfm__pool_worker *w) {
    mfm__pool *p = w->pool;
    uint64_t seen = 0;
    for (;;) {
        MFM__LOCK(p);
        while (!p->quit && p->generation == seen) MFM__WAIT(p, wake);
        if (p->quit) {
            MFM__UNLOCK(p);
            return;
        }
        seen = p->generation;
        MFM__UNLOCK(p);
        p->fn(p->ctx, w->index);
        MFM__LOCK(p);
        if (--p->running == 0) MFM__BROADCAST(p, done);
        MFM__UNLOCK(p);
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
        p->quit = 1;
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
    if (p->n <= 1) {
        fn(ctx, 0);
        return;
    }
    MFM__LOCK(p);
    p->fn = fn;
    p->ctx = ctx;
    p->running = p->n - 1;
    p->generation++;
    MFM__BROADCAST(p, wake);
    MFM__UNLOCK(p);
    fn(ctx, 0);
    MFM__LOCK(p);
    while (p->running > 0) MFM__WAIT(p, done);
    MFM__UNLOCK(p);
}

#endif /* MFM_NO_THREADS */

/* ============================================================================================
   >>params  Defaults and validation of mfm_params
   ============================================================================================ */

static const char *mfm__model_names[] = {"FM", "FM", "FFM", "FwFM"};
static const char *mfm__task_names[] = {"binary", "binary", "regression", "multiclass"};
static const char *mfm__optimizer_names[] = {"AdaGrad", "SGD", "AdaGrad", "Adam", "FTRL"};

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
    if (p.k == 0) p.k = 8;
    if (p.n_epochs == 0) p.n_epochs = 10;
    if (p.batch_size == 0) p.batch_size = 1;
    if (p.n_threads == 0) p.n_threads = 1;
    if (p.learning_rate == 0) p.learning_rate = 0.05;
    if (p.init_scale == 0) p.init_scale = 0.01;
    if (p.adam_beta1 == 0) p.adam_beta1 = 0.9;
    if (p.adam_beta2 == 0) p.adam_beta2 = 0.999;
    if (p.adam_epsilon == 0) p.adam_epsilon = 1e-8;
    if (p.ftrl_beta == 0) p.ftrl_beta = 1.0;
    return p;
}

/* Checks a resolved params struct; the first violation is reported with its field and value.
   n_classes is the class count the model will have (1 for binary and regression). */
static mfm_status mfm__validate_params(const mfm_params *p, uint32_t n_classes, mfm_error *err) {
    struct {
        const char *name;
        double value, low, high; /* valid: low <= value <= high (high exclusive where noted) */
        int high_exclusive;
    } reals[12];
    int n = 0, i;
    if ((unsigned)p->model >= MFM_MODEL_COUNT)
        return mfm__fail(err, MFM_ERR_INVALID_PARAM, "params.model = %d is not a known model (FM, FFM or FwFM)", (int)p->model);
    if ((unsigned)p->task >= MFM_TASK_COUNT)
        return mfm__fail(err, MFM_ERR_INVALID_PARAM, "params.task = %d is not a known task (binary, regression or multiclass)", (int)p->task);
    if ((unsigned)p->optimizer >= MFM_OPTIMIZER_COUNT)
        return mfm__fail(err, MFM_ERR_INVALID_PARAM, "params.optimizer = %d is not a known optimizer (SGD, AdaGrad, Adam or FTRL)", (int)p->optimizer);
    if ((unsigned)p->class_weight >= MFM_CLASS_WEIGHT_COUNT)
        return mfm__fail(err, MFM_ERR_INVALID_PARAM, "params.class_weight = %d is not a known class weighting (none, balanced or explicit)", (int)p->class_weight);
    if (p->k < 1 || p->k > 4096)
        return mfm__fail(err, MFM_ERR_INVALID_PARAM, "params.k = %d is out of range: it must be between 1 and 4096 (0 means 8)", p->k);
    if (p->n_epochs < 1)
        return mfm__fail(err, MFM_ERR_INVALID_PARAM, "params.n_epochs = %d must be at least 1 (0 means 10)", p->n_epochs);
    if (p->batch_size < 1)
        return mfm__fail(err, MFM_ERR_INVALID_PARAM, "params.batch_size = %d must be at least 1 (0 means 1)", p->batch_size);
    if (p->n_threads < 1 || p->n_threads > 1024)
        return mfm__fail(err, MFM_ERR_INVALID_PARAM, "params.n_threads = %d must be between 1 and 1024 (0 means 1)", p->n_threads);
    if (p->n_classes < 0)
        return mfm__fail(err, MFM_ERR_INVALID_PARAM, "params.n_classes = %d must not be negative", p->n_classes);
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
   after the other: block b of class c is block c * n_blocks + b. */

typedef struct mfm__table {
    float *data;
    uint64_t n_blocks; /* per class */
    uint32_t len;
    uint32_t stride;   /* len * (1 + state slots) */
} mfm__table;

struct mfm_model {
    mfm_params params; /* resolved; class_weights points at class_weight_values */
    float *class_weight_values;
    uint32_t n_features, n_fields, n_classes;
    int k;
    int n_slots; /* 1 + optimizer state slots */
    uint64_t epochs_trained;
    mfm__table t[MFM_TENSOR_COUNT];
};

static int mfm__state_slots(mfm_optimizer o) {
    switch (o) {
    case MFM_OPTIMIZER_ADAGRAD:
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

MFMDEF void mfm_model_free(mfm_model *model) {
    int t;
    if (!model) return;
    for (t = 0; t < MFM_TENSOR_COUNT; t++) MFM_FREE(model->t[t].data);
    MFM_FREE(model->class_weight_values);
    MFM_FREE(model);
}

/* Draws the initial V (and sets R to one) for every class, in block order. */
static void mfm__init_parameters(mfm_model *m) {
    mfm__rng rng = mfm__rng_seed(m->params.seed, MFM__STREAM_INIT, 0);
    const mfm__table *v = &m->t[MFM_TENSOR_V];
    double scale = m->params.init_scale, high = scale / sqrt((double)m->k);
    uint64_t b, nb = v->n_blocks * m->n_classes;
    uint32_t t;
    for (b = 0; b < nb; b++) {
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
    if (m->params.model == MFM_MODEL_FWFM) {
        const mfm__table *r = &m->t[MFM_TENSOR_R];
        for (b = 0; b < r->n_blocks * m->n_classes; b++) r->data[b * r->stride] = 1.0f;
    }
}

MFMDEF mfm_status mfm_model_create(const mfm_params *params, uint32_t n_features, uint32_t n_fields, uint32_t n_classes,
                                   mfm_model **out, mfm_error *err) {
    mfm_params p = mfm_params_resolve(params);
    mfm_model *m;
    mfm_status st;
    uint64_t blocks[MFM_TENSOR_COUNT];
    uint32_t lens[MFM_TENSOR_COUNT];
    int t;
    if (!out) return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "mfm_model_create: the output pointer is NULL");
    *out = NULL;
    if (p.task != MFM_TASK_MULTICLASS) n_classes = 1;
    st = mfm__validate_params(&p, n_classes, err);
    if (st) return st;
    if (p.model == MFM_MODEL_FM) n_fields = 0;
    if (p.model != MFM_MODEL_FM && n_fields == 0)
        return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "a %s model needs at least one field, got n_fields = 0", mfm__model_names[p.model]);
    m = (mfm_model *)mfm__calloc(1, sizeof *m);
    if (!m) return mfm__fail(err, MFM_ERR_OUT_OF_MEMORY, "out of memory for a model");
    m->n_features = n_features;
    m->n_fields = n_fields;
    m->n_classes = n_classes;
    m->k = p.k;
    m->n_slots = 1 + mfm__state_slots(p.optimizer);
    blocks[MFM_TENSOR_W0] = 1;
    blocks[MFM_TENSOR_W] = n_features;
    blocks[MFM_TENSOR_V] = p.model == MFM_MODEL_FFM ? (uint64_t)n_features * n_fields : n_features;
    blocks[MFM_TENSOR_R] = p.model == MFM_MODEL_FWFM ? (uint64_t)n_fields * n_fields : 0;
    lens[MFM_TENSOR_W0] = lens[MFM_TENSOR_W] = lens[MFM_TENSOR_R] = 1;
    lens[MFM_TENSOR_V] = (uint32_t)p.k;
    for (t = 0; t < MFM_TENSOR_COUNT; t++) {
        mfm__table *tab = &m->t[t];
        uint64_t floats;
        tab->n_blocks = blocks[t];
        tab->len = lens[t];
        tab->stride = lens[t] * (uint32_t)m->n_slots;
        /* blocks x classes x stride, saturating so that an impossible size fails to allocate */
        floats = tab->n_blocks && n_classes > UINT64_MAX / tab->n_blocks ? UINT64_MAX : tab->n_blocks * n_classes;
        floats = floats && tab->stride > UINT64_MAX / floats ? UINT64_MAX : floats * tab->stride;
        tab->data = (float *)mfm__calloc(floats, sizeof(float));
        if (!tab->data) {
            mfm_model_free(m);
            return mfm__fail(err, MFM_ERR_OUT_OF_MEMORY, "out of memory for the %s tensor of a %s model (%" PRIu64 " floats)",
                             t == MFM_TENSOR_V ? "V" : t == MFM_TENSOR_R ? "R" : "W", mfm__model_names[p.model], floats);
        }
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
    m->params = p;
    mfm__init_parameters(m);
    *out = m;
    return mfm__ok(err);
}

MFMDEF void mfm_model_get_info(const mfm_model *m, mfm_model_info *out) {
    int t;
    memset(out, 0, sizeof *out);
    out->model = m->params.model;
    out->task = m->params.task;
    out->optimizer = m->params.optimizer;
    out->n_features = m->n_features;
    out->n_fields = m->n_fields;
    out->n_classes = m->n_classes;
    out->k = m->k;
    out->n_state_slots = m->n_slots - 1;
    out->epochs_trained = m->epochs_trained;
    for (t = 0; t < MFM_TENSOR_COUNT; t++) out->n_parameters += m->t[t].n_blocks * m->t[t].len * m->n_classes;
}

MFMDEF const mfm_params *mfm_model_params(const mfm_model *m) { return &m->params; }

MFMDEF size_t mfm_tensor_size(const mfm_model *m, mfm_tensor t) {
    if (!m || (unsigned)t >= MFM_TENSOR_COUNT) return 0;
    return (size_t)(m->t[t].n_blocks * m->t[t].len);
}

/* Shared checks and the copy loop of mfm_model_read / mfm_model_write. */
static mfm_status mfm__tensor_copy(const mfm_model *m, mfm_tensor t, int slot, uint32_t cls, float *user, size_t count,
                                   int to_model, mfm_error *err) {
    const char *fn = to_model ? "mfm_model_write" : "mfm_model_read";
    const mfm__table *tab;
    uint64_t b;
    if (!m || !user) return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "%s: the model or the buffer is NULL", fn);
    if ((unsigned)t >= MFM_TENSOR_COUNT) return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "%s: tensor %d is not a known tensor", fn, (int)t);
    tab = &m->t[t];
    if (slot < 0 || slot >= m->n_slots)
        return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "%s: slot %d does not exist: %s keeps %d state slot(s) besides the parameter (slot 0)", fn,
                         slot, mfm__optimizer_names[m->params.optimizer], m->n_slots - 1);
    if (cls >= m->n_classes)
        return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "%s: class %u does not exist: the model has %u class(es)", fn, (unsigned)cls, (unsigned)m->n_classes);
    if ((uint64_t)count != tab->n_blocks * tab->len)
        return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "%s: count = %" PRIu64 " but the tensor holds %" PRIu64 " values per class", fn, (uint64_t)count,
                         tab->n_blocks * tab->len);
    if (to_model) {
        size_t i;
        for (i = 0; i < count; i++)
            if (!mfm__finite(user[i])) return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "%s: value %" PRIu64 " is not finite", fn, (uint64_t)i);
    }
    for (b = 0; b < tab->n_blocks; b++) {
        float *blk = mfm__block(m, t, cls, b) + (uint32_t)slot * tab->len;
        float *u = user + b * tab->len;
        memcpy(to_model ? blk : u, to_model ? u : blk, tab->len * sizeof(float));
    }
    return mfm__ok(err);
}

MFMDEF mfm_status mfm_model_read(const mfm_model *m, mfm_tensor t, int slot, uint32_t cls, float *out, size_t count, mfm_error *err) {
    return mfm__tensor_copy(m, t, slot, cls, out, count, 0, err);
}

MFMDEF mfm_status mfm_model_write(mfm_model *m, mfm_tensor t, int slot, uint32_t cls, const float *in, size_t count, mfm_error *err) {
    return mfm__tensor_copy(m, t, slot, cls, (float *)in, count, 1, err); /* only read from */
}

/* ============================================================================================
   >>data  Checking a borrowed CSR view before anything touches the model
   ============================================================================================ */

typedef struct mfm__data_info {
    uint64_t nnz;
    uint32_t max_row_nnz;
    uint32_t n_features, n_fields;  /* max id + 1 seen in the data (0 when none) */
    uint64_t feature_row, field_row; /* a row where that largest id occurs */
} mfm__data_info;

/* Structure, ids and values; labels and weights are checked by mfm__check_targets. */
static mfm_status mfm__check_csr(const mfm_csr *d, int need_fields, mfm__data_info *info, mfm_error *err) {
    uint64_t r, j;
    memset(info, 0, sizeof *info);
    if (!d) return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "the data pointer is NULL");
    if (d->n_rows == 0) return MFM_OK;
    if (!d->row_offsets) return mfm__fail(err, MFM_ERR_INVALID_DATA, "data.row_offsets is NULL but data.n_rows = %" PRIu64, d->n_rows);
    if (d->row_offsets[0] != 0)
        return mfm__fail(err, MFM_ERR_INVALID_DATA, "data.row_offsets[0] = %" PRIu64 " but CSR row offsets must start at 0", d->row_offsets[0]);
    for (r = 0; r < d->n_rows; r++) {
        uint64_t lo = d->row_offsets[r], hi = d->row_offsets[r + 1];
        if (hi < lo)
            return mfm__fail(err, MFM_ERR_INVALID_DATA, "data.row_offsets decreases at row %" PRIu64 " (%" PRIu64 " then %" PRIu64 ")", r, lo, hi);
        if (hi - lo > UINT32_MAX)
            return mfm__fail(err, MFM_ERR_INVALID_DATA, "row %" PRIu64 " has %" PRIu64 " non-zeros, more than 2^32-1", r, hi - lo);
        if (hi - lo > info->max_row_nnz) info->max_row_nnz = (uint32_t)(hi - lo);
    }
    info->nnz = d->row_offsets[d->n_rows];
    if (info->nnz == 0) return MFM_OK;
    if (!d->features) return mfm__fail(err, MFM_ERR_INVALID_DATA, "data.features is NULL but the data has %" PRIu64 " non-zeros", info->nnz);
    if (need_fields && !d->fields)
        return mfm__fail(err, MFM_ERR_INVALID_DATA, "data.fields is NULL, but FFM and FwFM need a field id for every non-zero");
    for (r = 0; r < d->n_rows; r++) {
        for (j = d->row_offsets[r]; j < d->row_offsets[r + 1]; j++) {
            uint32_t f = d->features[j];
            if (f == UINT32_MAX)
                return mfm__fail(err, MFM_ERR_INVALID_DATA, "feature id 4294967295 in row %" PRIu64 " is out of range: ids must be below 2^32-1", r);
            if (d->n_features && f >= d->n_features)
                return mfm__fail(err, MFM_ERR_INVALID_DATA, "feature id %u in row %" PRIu64 " is not below data.n_features = %u", (unsigned)f, r,
                                 (unsigned)d->n_features);
            if (f >= info->n_features) {
                info->n_features = f + 1;
                info->feature_row = r;
            }
            if (need_fields) {
                uint32_t g = d->fields[j];
                if (g == UINT32_MAX)
                    return mfm__fail(err, MFM_ERR_INVALID_DATA, "field id 4294967295 in row %" PRIu64 " is out of range: ids must be below 2^32-1", r);
                if (d->n_fields && g >= d->n_fields)
                    return mfm__fail(err, MFM_ERR_INVALID_DATA, "field id %u in row %" PRIu64 " is not below data.n_fields = %u", (unsigned)g, r,
                                     (unsigned)d->n_fields);
                if (g >= info->n_fields) {
                    info->n_fields = g + 1;
                    info->field_row = r;
                }
            }
            if (d->values && !mfm__finite(d->values[j]))
                return mfm__fail(err, MFM_ERR_INVALID_DATA, "value %g of feature %u in row %" PRIu64 " is not finite", (double)d->values[j], (unsigned)f, r);
        }
    }
    return MFM_OK;
}

/* The data's ids must fit the model's shape. */
static mfm_status mfm__check_shape(const mfm_model *m, const mfm_csr *d, const mfm__data_info *info, mfm_error *err) {
    if (d->n_features > m->n_features)
        return mfm__fail(err, MFM_ERR_SHAPE_MISMATCH, "the data has %u features (data.n_features) but the model was made for %u", (unsigned)d->n_features,
                         (unsigned)m->n_features);
    if (info->n_features > m->n_features)
        return mfm__fail(err, MFM_ERR_SHAPE_MISMATCH, "feature id %u in row %" PRIu64 " is beyond the model, which has %u features (ids 0..%u)",
                         (unsigned)(info->n_features - 1), info->feature_row, (unsigned)m->n_features, (unsigned)m->n_features - 1u);
    if (m->params.model == MFM_MODEL_FM) return MFM_OK;
    if (d->n_fields > m->n_fields)
        return mfm__fail(err, MFM_ERR_SHAPE_MISMATCH, "the data has %u fields (data.n_fields) but the model was made for %u", (unsigned)d->n_fields,
                         (unsigned)m->n_fields);
    if (info->n_fields > m->n_fields)
        return mfm__fail(err, MFM_ERR_SHAPE_MISMATCH, "field id %u in row %" PRIu64 " is beyond the model, which has %u fields (ids 0..%u)",
                         (unsigned)(info->n_fields - 1), info->field_row, (unsigned)m->n_fields, (unsigned)m->n_fields - 1u);
    return MFM_OK;
}

/* Labels (and row weights) for training and evaluation. With *n_classes == 0 a multiclass
   check infers the class count as the largest label + 1. */
static mfm_status mfm__check_targets(mfm_task task, const mfm_csr *d, uint32_t *n_classes, int check_weights, mfm_error *err) {
    uint64_t r;
    uint32_t top = 0;
    double weight_sum = 0;
    if (d->n_rows && !d->labels) return mfm__fail(err, MFM_ERR_INVALID_DATA, "data.labels is NULL, but training and evaluation need a label per row");
    for (r = 0; r < d->n_rows; r++) {
        float y = d->labels[r];
        if (!mfm__finite(y)) return mfm__fail(err, MFM_ERR_INVALID_DATA, "the label of row %" PRIu64 " is %g, not a finite number", r, (double)y);
        if (task == MFM_TASK_BINARY && y != 0 && y != 1)
            return mfm__fail(err, MFM_ERR_INVALID_DATA, "the label of row %" PRIu64 " is %g, but a binary label must be 0 or 1", r, (double)y);
        if (task == MFM_TASK_MULTICLASS) {
            if (y < 0 || y != floorf(y) || y >= 16777216.0f)
                return mfm__fail(err, MFM_ERR_INVALID_DATA, "the label of row %" PRIu64 " is %g, but a multiclass label must be a class id 0, 1, 2, ...", r,
                                 (double)y);
            if (*n_classes && (uint32_t)y >= *n_classes)
                return mfm__fail(err, MFM_ERR_INVALID_DATA, "the label of row %" PRIu64 " is class %u, but the model has %u classes (0..%u)", r, (unsigned)y,
                                 (unsigned)*n_classes, (unsigned)*n_classes - 1u);
            if ((uint32_t)y + 1 > top) top = (uint32_t)y + 1;
        }
    }
    if (task == MFM_TASK_MULTICLASS && *n_classes == 0) *n_classes = top;
    if (check_weights && d->weights) {
        for (r = 0; r < d->n_rows; r++) {
            float w = d->weights[r];
            if (!mfm__finite(w) || w < 0)
                return mfm__fail(err, MFM_ERR_INVALID_DATA, "the weight of row %" PRIu64 " is %g, but row weights must be finite and >= 0", r, (double)w);
            weight_sum += w;
        }
        if (d->n_rows && weight_sum == 0) return mfm__fail(err, MFM_ERR_INVALID_DATA, "all %" PRIu64 " row weights are zero", d->n_rows);
    }
    return MFM_OK;
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

static mfm__row mfm__get_row(const mfm_csr *d, uint64_t r, const float *ones) {
    mfm__row row;
    uint64_t lo = d->row_offsets[r];
    row.z = (uint32_t)(d->row_offsets[r + 1] - lo);
    row.feat = d->features + lo;
    row.field = d->fields ? d->fields + lo : NULL;
    row.x = d->values ? d->values + lo : ones;
    return row;
}

static float mfm__dot(const float *a, const float *b, int k) {
    float s = 0;
    int t;
    for (t = 0; t < k; t++) s += a[t] * b[t];
    return s;
}

/* FFM slot (i, g): the vector feature i uses against field g. */
static const float *mfm__ffm_slot(const mfm_model *m, uint32_t c, uint32_t i, uint32_t g) {
    return mfm__block(m, MFM_TENSOR_V, c, (uint64_t)i * m->n_fields + g);
}

/* FwFM's r(a, b) reads the upper triangle. */
static float mfm__fwfm_r(const mfm_model *m, uint32_t c, uint32_t fa, uint32_t fb) {
    uint32_t lo = fa < fb ? fa : fb, hi = fa < fb ? fb : fa;
    return *mfm__block(m, MFM_TENSOR_R, c, (uint64_t)lo * m->n_fields + hi);
}

/* Score of class c. FM leaves sum[t] = sum_i v_it x_i (k values) for its gradient. */
static float mfm__score(const mfm_model *m, uint32_t c, const mfm__row *row, float *sum) {
    const int k = m->k;
    float s = *mfm__block(m, MFM_TENSOR_W0, c, 0);
    uint32_t a, b;
    int t;
    for (a = 0; a < row->z; a++) s += *mfm__block(m, MFM_TENSOR_W, c, row->feat[a]) * row->x[a];
    if (m->params.linear_only) return s;
    switch (m->params.model) {
    case MFM_MODEL_FFM:
        for (a = 0; a < row->z; a++)
            for (b = a + 1; b < row->z; b++) {
                float dot = mfm__dot(mfm__ffm_slot(m, c, row->feat[a], row->field[b]), mfm__ffm_slot(m, c, row->feat[b], row->field[a]), k);
                s += dot * row->x[a] * row->x[b];
            }
        return s;
    case MFM_MODEL_FWFM:
        for (a = 0; a < row->z; a++)
            for (b = a + 1; b < row->z; b++) {
                float dot = mfm__dot(mfm__block(m, MFM_TENSOR_V, c, row->feat[a]), mfm__block(m, MFM_TENSOR_V, c, row->feat[b]), k);
                s += mfm__fwfm_r(m, c, row->field[a], row->field[b]) * dot * row->x[a] * row->x[b];
            }
        return s;
    default: {
        /* sum_{a<b} <v_a, v_b> x_a x_b = 1/2 sum_t [(sum_a v_at x_a)^2 - sum_a (v_at x_a)^2] */
        float sq = 0, dot = 0;
        memset(sum, 0, (size_t)k * sizeof *sum);
        for (a = 0; a < row->z; a++) {
            const float *v = mfm__block(m, MFM_TENSOR_V, c, row->feat[a]);
            for (t = 0; t < k; t++) {
                float vx = v[t] * row->x[a];
                sum[t] += vx;
                sq += vx * vx;
            }
        }
        for (t = 0; t < k; t++) dot += sum[t] * sum[t];
        return s + 0.5f * (dot - sq);
    }
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

typedef struct mfm__optim {
    mfm_optimizer kind;
    float lr, ftrl_beta;
    double beta1, beta2, eps;
} mfm__optim;

/* Steps `len` coordinates of a block; gsum holds their data-gradient sums over a batch of
   `rows` rows. w0 passes l1 = l2 = 0: it is never regularized. */
static void mfm__step(const mfm__optim *o, float *blk, uint32_t len, const float *gsum, float rows, float l1, float l2) {
    float *theta = blk, *s1 = blk + len, *s2 = blk + 2 * len, *s3 = blk + 3 * len;
    uint32_t i;
    switch (o->kind) {
    case MFM_OPTIMIZER_SGD:
        for (i = 0; i < len; i++) theta[i] -= o->lr * (gsum[i] / rows + l2 * theta[i]);
        break;
    case MFM_OPTIMIZER_ADAGRAD: /* s1 = G */
        for (i = 0; i < len; i++) {
            float g = gsum[i] / rows + l2 * theta[i];
            s1[i] += g * g;
            theta[i] -= o->lr * g / sqrtf(s1[i] + 1e-10f);
        }
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
   >>trainer  Batches: collect touched coordinates, accumulate in parallel, apply once
   ============================================================================================

   Per batch:
     1. collect (serial): every coordinate the batch touches gets a compact index, in
        first-seen order, through the maps feature -> index, FFM slot -> index, field pair ->
        index. The maps are as large as the model's id spaces but shared by all threads.
     2. accumulate (parallel): the batch is cut into n_chunks contiguous chunks; each worker
        scores its rows against the frozen parameters and sums weight * dL/ds * ds/dtheta into
        its own gradient buffers, which are only as large as the batch's touched set.
     3. apply (parallel over coordinates): each touched coordinate sums the chunks' buffers in
        chunk order, takes one optimizer step, and clears its map entry.
   One chunk is the canonical order; a fixed chunk count gives the same bits on every run. */

typedef struct mfm__worker {
    float *g[MFM_TENSOR_COUNT]; /* gradient sums of this chunk: [class][touched index][len] */
    uint64_t cap[MFM_TENSOR_COUNT];
    float *sum;   /* C x k: FM's per-row sums */
    float *score; /* C */
    double *prob; /* C */
    double loss, weight;
} mfm__worker;

typedef struct mfm__trainer {
    mfm_model *m;
    const mfm_csr *d;
    const float *ones;
    float *class_weights; /* per class, or NULL when every class weighs 1 */
    float smoothing;
    mfm__optim opt;
    const uint64_t *rows; /* the current batch */
    uint64_t n_batch;
    int n_chunks;
    /* The batch's touched coordinates per tensor: ids in first-seen order, and the map
       id -> compact index (MFM__NONE when untouched). FM and FwFM index V by feature, so their
       V shares W's map; W0 is always touched and needs none. */
    uint32_t *map[MFM_TENSOR_COUNT];
    uint64_t *touched[MFM_TENSOR_COUNT];
    uint64_t n_touched[MFM_TENSOR_COUNT], cap_touched[MFM_TENSOR_COUNT];
    mfm__worker *workers;
    int n_workers;
} mfm__trainer;

/* Gives `id` a compact index in tensor t's touched list unless it has one. 0 when out of memory. */
static int mfm__touch(mfm__trainer *tr, mfm_tensor t, uint64_t id) {
    if (tr->map[t][id] != MFM__NONE) return 1;
    if (!mfm__reserve((void **)&tr->touched[t], &tr->cap_touched[t], tr->n_touched[t] + 1, sizeof(uint64_t))) return 0;
    tr->map[t][id] = (uint32_t)tr->n_touched[t];
    tr->touched[t][tr->n_touched[t]++] = id;
    return 1;
}

static int mfm__collect_touched(mfm__trainer *tr) {
    const mfm_model *m = tr->m;
    const int pairs = !m->params.linear_only, v_by_feature = m->params.model != MFM_MODEL_FFM;
    const uint32_t F = m->n_fields;
    uint64_t q;
    uint32_t a, b;
    int w, t;
    tr->n_touched[MFM_TENSOR_W] = tr->n_touched[MFM_TENSOR_V] = tr->n_touched[MFM_TENSOR_R] = 0;
    for (q = 0; q < tr->n_batch; q++) {
        mfm__row row = mfm__get_row(tr->d, tr->rows[q], tr->ones);
        for (a = 0; a < row.z; a++) {
            uint32_t i = row.feat[a];
            if (tr->map[MFM_TENSOR_W][i] != MFM__NONE) continue;
            if (!mfm__touch(tr, MFM_TENSOR_W, i)) return 0;
            if (pairs && v_by_feature) { /* same compact index as the feature's w */
                if (!mfm__reserve((void **)&tr->touched[MFM_TENSOR_V], &tr->cap_touched[MFM_TENSOR_V], tr->n_touched[MFM_TENSOR_V] + 1, sizeof(uint64_t)))
                    return 0;
                tr->touched[MFM_TENSOR_V][tr->n_touched[MFM_TENSOR_V]++] = i;
            }
        }
        if (!pairs) continue;
        if (m->params.model == MFM_MODEL_FFM) {
            for (a = 0; a < row.z; a++)
                for (b = 0; b < row.z; b++)
                    if (a != b && !mfm__touch(tr, MFM_TENSOR_V, (uint64_t)row.feat[a] * F + row.field[b])) return 0;
        } else if (m->params.model == MFM_MODEL_FWFM) {
            for (a = 0; a < row.z; a++)
                for (b = a + 1; b < row.z; b++) {
                    uint32_t fa = row.field[a], fb = row.field[b];
                    if (!mfm__touch(tr, MFM_TENSOR_R, fa < fb ? (uint64_t)fa * F + fb : (uint64_t)fb * F + fa)) return 0;
                }
        }
    }
    for (w = 0; w < tr->n_chunks; w++)
        for (t = 0; t < MFM_TENSOR_COUNT; t++) {
            mfm__worker *wk = &tr->workers[w];
            uint64_t need = m->n_classes * tr->n_touched[t] * m->t[t].len;
            if (!mfm__reserve((void **)&wk->g[t], &wk->cap[t], need, sizeof(float))) return 0;
        }
    return 1;
}

/* Adds g * ds/dtheta of class c's score to the worker's buffers (g = weight * dL/ds). */
static void mfm__accumulate_row(const mfm__trainer *tr, mfm__worker *wk, uint32_t c, const mfm__row *row, float g, const float *sum) {
    const mfm_model *m = tr->m;
    const int k = m->k;
    const uint32_t F = m->n_fields;
    const uint32_t *wmap = tr->map[MFM_TENSOR_W], *vmap = tr->map[MFM_TENSOR_V], *rmap = tr->map[MFM_TENSOR_R];
    float *gw = wk->g[MFM_TENSOR_W] + c * tr->n_touched[MFM_TENSOR_W];
    float *gv = wk->g[MFM_TENSOR_V] + c * tr->n_touched[MFM_TENSOR_V] * (uint64_t)k;
    float *gr = wk->g[MFM_TENSOR_R] + c * tr->n_touched[MFM_TENSOR_R];
    uint32_t a, b;
    int t;
    wk->g[MFM_TENSOR_W0][c] += g;
    for (a = 0; a < row->z; a++) gw[wmap[row->feat[a]]] += g * row->x[a];
    if (m->params.linear_only) return;
    switch (m->params.model) {
    case MFM_MODEL_FFM:
        for (a = 0; a < row->z; a++)
            for (b = a + 1; b < row->z; b++) {
                uint32_t ia = row->feat[a], ib = row->feat[b], fa = row->field[a], fb = row->field[b];
                const float *va = mfm__ffm_slot(m, c, ia, fb), *vb = mfm__ffm_slot(m, c, ib, fa);
                float *ga = gv + (uint64_t)vmap[(uint64_t)ia * F + fb] * k, *gb = gv + (uint64_t)vmap[(uint64_t)ib * F + fa] * k;
                float coef = g * row->x[a] * row->x[b];
                for (t = 0; t < k; t++) {
                    ga[t] += coef * vb[t];
                    gb[t] += coef * va[t];
                }
            }
        break;
    case MFM_MODEL_FWFM:
        for (a = 0; a < row->z; a++)
            for (b = a + 1; b < row->z; b++) {
                uint32_t fa = row->field[a], fb = row->field[b];
                const float *va = mfm__block(m, MFM_TENSOR_V, c, row->feat[a]), *vb = mfm__block(m, MFM_TENSOR_V, c, row->feat[b]);
                float *ga = gv + (uint64_t)vmap[row->feat[a]] * k, *gb = gv + (uint64_t)vmap[row->feat[b]] * k;
                float coef = g * row->x[a] * row->x[b], coef_r = coef * mfm__fwfm_r(m, c, fa, fb), dot = 0;
                for (t = 0; t < k; t++) {
                    dot += va[t] * vb[t];
                    ga[t] += coef_r * vb[t];
                    gb[t] += coef_r * va[t];
                }
                gr[rmap[fa < fb ? (uint64_t)fa * F + fb : (uint64_t)fb * F + fa]] += coef * dot;
            }
        break;
    default: /* FM: ds/dv_it = x_i (sum_t - v_it x_i) */
        for (a = 0; a < row->z; a++) {
            const float *v = mfm__block(m, MFM_TENSOR_V, c, row->feat[a]);
            float *ga = gv + (uint64_t)vmap[row->feat[a]] * k;
            float xa = row->x[a], gx = g * xa;
            for (t = 0; t < k; t++) ga[t] += gx * (sum[t] - v[t] * xa);
        }
        break;
    }
}

/* Scores one row, adds its loss, and accumulates its gradient for every class. */
static void mfm__train_row(const mfm__trainer *tr, mfm__worker *wk, uint64_t r) {
    const mfm_model *m = tr->m;
    const mfm_csr *d = tr->d;
    const uint32_t C = m->n_classes;
    const float eps = tr->smoothing, y = d->labels[r];
    mfm__row row = mfm__get_row(d, r, tr->ones);
    float weight = d->weights ? d->weights[r] : 1.0f;
    double loss;
    uint32_t c;
    if (tr->class_weights) weight *= tr->class_weights[(uint32_t)y];
    for (c = 0; c < C; c++) wk->score[c] = mfm__score(m, c, &row, wk->sum + (uint64_t)c * m->k);
    if (m->params.task == MFM_TASK_MULTICLASS) {
        double lse = mfm__softmax(wk->score, C, wk->prob);
        loss = 0;
        for (c = 0; c < C; c++) {
            double target = c == (uint32_t)y ? 1.0 - eps : eps / (C - 1);
            loss -= target * (wk->score[c] - lse);
            mfm__accumulate_row(tr, wk, c, &row, weight * (float)(wk->prob[c] - target), wk->sum + (uint64_t)c * m->k);
        }
    } else {
        double s = wk->score[0], dlds;
        if (m->params.task == MFM_TASK_REGRESSION) {
            dlds = s - y;
            loss = 0.5 * dlds * dlds;
        } else {
            double target = y * (1.0 - eps) + 0.5 * eps;
            dlds = mfm__sigmoid(s) - target;
            loss = (s > 0 ? s : 0) - s * target + log1p(exp(-fabs(s)));
        }
        mfm__accumulate_row(tr, wk, 0, &row, weight * (float)dlds, wk->sum);
    }
    wk->loss += weight * loss;
    wk->weight += weight;
}

/* The [lo, hi) share of `count` items that worker `index` of `n` takes. */
static void mfm__share(uint64_t count, int n, int index, uint64_t *lo, uint64_t *hi) {
    uint64_t per = (count + (uint64_t)n - 1) / (uint64_t)n;
    *lo = per * (uint64_t)index;
    if (*lo > count) *lo = count;
    *hi = *lo + per < count ? *lo + per : count;
}

static void mfm__accumulate_task(void *ctx, int index) {
    const mfm__trainer *tr = (const mfm__trainer *)ctx;
    mfm__worker *wk = &tr->workers[index];
    uint64_t q, lo, hi;
    int t;
    if (index >= tr->n_chunks) return;
    for (t = 0; t < MFM_TENSOR_COUNT; t++)
        if (tr->n_touched[t]) memset(wk->g[t], 0, tr->m->n_classes * tr->n_touched[t] * tr->m->t[t].len * sizeof(float));
    mfm__share(tr->n_batch, tr->n_chunks, index, &lo, &hi);
    for (q = lo; q < hi; q++) mfm__train_row(tr, wk, tr->rows[q]);
}

static void mfm__apply_task(void *ctx, int index) {
    const mfm__trainer *tr = (const mfm__trainer *)ctx;
    mfm_model *m = tr->m;
    const mfm_params *p = &m->params;
    const float rows = (float)tr->n_batch;
    const float l1[MFM_TENSOR_COUNT] = {0, (float)p->l1_linear, (float)p->l1_factors, (float)p->l1_factors};
    const float l2[MFM_TENSOR_COUNT] = {0, (float)p->l2_linear, (float)p->l2_factors, (float)p->l2_factors};
    uint64_t units = 0, u, lo, hi, base = 0;
    int t, w;
    uint32_t c, i;
    for (t = 0; t < MFM_TENSOR_COUNT; t++) units += tr->n_touched[t];
    mfm__share(units, tr->n_workers, index, &lo, &hi);
    for (t = 0; t < MFM_TENSOR_COUNT; base += tr->n_touched[t], t++) {
        const uint32_t len = m->t[t].len;
        const int owns_map = tr->map[t] && !(t == MFM_TENSOR_V && tr->map[t] == tr->map[MFM_TENSOR_W]);
        for (u = lo > base ? lo : base; u < hi && u < base + tr->n_touched[t]; u++) {
            uint64_t j = u - base, id = tr->touched[t][j];
            for (c = 0; c < m->n_classes; c++) {
                /* the chunks' sums, added in chunk order into chunk 0's buffer */
                float *g = tr->workers[0].g[t] + (c * tr->n_touched[t] + j) * len;
                for (w = 1; w < tr->n_chunks; w++) {
                    const float *other = tr->workers[w].g[t] + (c * tr->n_touched[t] + j) * len;
                    for (i = 0; i < len; i++) g[i] += other[i];
                }
                mfm__step(&tr->opt, mfm__block(m, (mfm_tensor)t, c, id), len, g, rows, l1[t], l2[t]);
            }
            if (owns_map) tr->map[t][id] = MFM__NONE;
        }
    }
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

static void mfm__trainer_free(mfm__trainer *tr) {
    int t, w;
    for (t = 0; t < MFM_TENSOR_COUNT; t++) {
        MFM_FREE(tr->touched[t]);
        if (!(t == MFM_TENSOR_V && tr->map[t] == tr->map[MFM_TENSOR_W])) MFM_FREE(tr->map[t]);
    }
    for (w = 0; tr->workers && w < tr->n_workers; w++) {
        for (t = 0; t < MFM_TENSOR_COUNT; t++) MFM_FREE(tr->workers[w].g[t]);
        MFM_FREE(tr->workers[w].sum);
        MFM_FREE(tr->workers[w].score);
        MFM_FREE(tr->workers[w].prob);
    }
    MFM_FREE(tr->workers);
    MFM_FREE(tr->class_weights);
    MFM_FREE((void *)tr->ones);
}

/* A map of `n` entries, all MFM__NONE. */
static uint32_t *mfm__new_map(uint64_t n) {
    uint32_t *map = (uint32_t *)mfm__alloc(n, sizeof(uint32_t));
    if (map) memset(map, 0xFF, (size_t)(n ? n : 1) * sizeof(uint32_t));
    return map;
}

/* Everything a fit needs besides the model: maps, workers, class weights. 0 when memory is short. */
static int mfm__trainer_init(mfm__trainer *tr, mfm_model *m, const mfm_csr *d, const mfm__data_info *info) {
    const mfm_params *p = &m->params;
    const uint32_t C = m->n_classes, n_weights = p->task == MFM_TASK_BINARY ? 2 : C;
    float *ones;
    uint32_t c;
    uint64_t r;
    int w;
    memset(tr, 0, sizeof *tr);
    tr->m = m;
    tr->d = d;
    tr->smoothing = (float)p->label_smoothing;
    tr->opt.kind = p->optimizer;
    tr->opt.lr = (float)p->learning_rate;
    tr->opt.ftrl_beta = (float)p->ftrl_beta;
    tr->opt.beta1 = p->adam_beta1;
    tr->opt.beta2 = p->adam_beta2;
    tr->opt.eps = p->adam_epsilon;
    tr->ones = ones = (float *)mfm__alloc(info->max_row_nnz, sizeof(float));
    if (!ones) return 0;
    for (r = 0; r < info->max_row_nnz; r++) ones[r] = 1.0f;
    if (p->class_weight != MFM_CLASS_WEIGHT_NONE) {
        tr->class_weights = (float *)mfm__calloc(n_weights, sizeof(float));
        if (!tr->class_weights) return 0;
        if (p->class_weight == MFM_CLASS_WEIGHT_EXPLICIT) {
            memcpy(tr->class_weights, p->class_weights, n_weights * sizeof(float));
        } else { /* balanced: n_rows / (C * max(count_c, 1)), counted on this data */
            uint64_t *count = (uint64_t *)mfm__calloc(n_weights, sizeof(uint64_t));
            if (!count) return 0;
            for (r = 0; r < d->n_rows; r++) count[(uint32_t)d->labels[r]]++;
            for (c = 0; c < n_weights; c++)
                tr->class_weights[c] = (float)((double)d->n_rows / ((double)n_weights * (double)(count[c] > 1 ? count[c] : 1)));
            MFM_FREE(count);
        }
    }
    tr->touched[MFM_TENSOR_W0] = (uint64_t *)mfm__calloc(1, sizeof(uint64_t)); /* w0 is always touched */
    tr->n_touched[MFM_TENSOR_W0] = 1;
    tr->map[MFM_TENSOR_W] = mfm__new_map(m->n_features);
    tr->map[MFM_TENSOR_V] = p->model == MFM_MODEL_FFM ? mfm__new_map(m->t[MFM_TENSOR_V].n_blocks) : tr->map[MFM_TENSOR_W];
    tr->map[MFM_TENSOR_R] = mfm__new_map(m->t[MFM_TENSOR_R].n_blocks);
    if (!tr->touched[MFM_TENSOR_W0] || !tr->map[MFM_TENSOR_W] || !tr->map[MFM_TENSOR_V] || !tr->map[MFM_TENSOR_R]) return 0;
    tr->n_workers = p->n_threads < p->batch_size ? p->n_threads : p->batch_size;
    tr->workers = (mfm__worker *)mfm__calloc((uint64_t)tr->n_workers, sizeof(mfm__worker));
    if (!tr->workers) return 0;
    for (w = 0; w < tr->n_workers; w++) {
        mfm__worker *wk = &tr->workers[w];
        wk->g[MFM_TENSOR_W0] = (float *)mfm__alloc(C, sizeof(float));
        wk->cap[MFM_TENSOR_W0] = C;
        wk->sum = (float *)mfm__alloc((uint64_t)C * m->k, sizeof(float));
        wk->score = (float *)mfm__alloc(C, sizeof(float));
        wk->prob = (double *)mfm__alloc(C, sizeof(double));
        if (!wk->g[MFM_TENSOR_W0] || !wk->sum || !wk->score || !wk->prob) return 0;
    }
    return 1;
}

MFMDEF mfm_status mfm_fit(mfm_model *m, const mfm_csr *d, mfm_error *err) {
    mfm__data_info info;
    mfm__trainer tr;
    mfm__pool pool;
    mfm_status st;
    uint32_t n_classes;
    uint64_t *order = NULL, n, r, start;
    int e, w;
    if (!m) return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "mfm_fit: the model is NULL");
    n_classes = m->n_classes;
    if ((st = mfm__check_csr(d, m->params.model != MFM_MODEL_FM, &info, err)) != MFM_OK) return st;
    if (d->n_rows == 0) return mfm__fail(err, MFM_ERR_INVALID_DATA, "the training data has no rows");
    if ((st = mfm__check_shape(m, d, &info, err)) != MFM_OK) return st;
    if ((st = mfm__check_targets(m->params.task, d, &n_classes, 1, err)) != MFM_OK) return st;
    n = d->n_rows;
    order = (uint64_t *)mfm__alloc(n, sizeof(uint64_t));
    if (!order || !mfm__trainer_init(&tr, m, d, &info)) {
        if (order) mfm__trainer_free(&tr);
        MFM_FREE(order);
        return mfm__fail(err, MFM_ERR_OUT_OF_MEMORY, "out of memory for the training buffers (%" PRIu64 " rows)", n);
    }
    if ((st = mfm__pool_start(&pool, tr.n_workers, err)) != MFM_OK) {
        mfm__trainer_free(&tr);
        MFM_FREE(order);
        return st;
    }
    mfm__log(&m->params, MFM_LOG_INFO,
             "training %s %s on %" PRIu64 " rows (%" PRIu64 " non-zeros), %u features, %u fields, k=%d, %s, batch %d, %d thread(s), %d epoch(s)",
             mfm__model_names[m->params.model], mfm__task_names[m->params.task], n, info.nnz, (unsigned)m->n_features, (unsigned)m->n_fields, m->k,
             mfm__optimizer_names[m->params.optimizer], m->params.batch_size, tr.n_workers, m->params.n_epochs);
    st = MFM_OK;
    for (e = 0; e < m->params.n_epochs && st == MFM_OK; e++) {
        double t0 = mfm__seconds(), loss = 0, weight = 0;
        mfm__rng rng = mfm__rng_seed(m->params.seed, MFM__STREAM_EPOCH, m->epochs_trained);
        mfm_epoch_report rep;
        for (r = 0; r < n; r++) order[r] = r;
        for (r = n - 1; r > 0; r--) { /* Fisher-Yates: epoch e's order depends on (seed, e) only */
            uint64_t j = mfm__rng_below(&rng, r + 1), tmp = order[r];
            order[r] = order[j];
            order[j] = tmp;
        }
        for (w = 0; w < tr.n_workers; w++) tr.workers[w].loss = tr.workers[w].weight = 0;
        for (start = 0; start < n; start += (uint64_t)m->params.batch_size) {
            tr.rows = order + start;
            tr.n_batch = n - start < (uint64_t)m->params.batch_size ? n - start : (uint64_t)m->params.batch_size;
            tr.n_chunks = (uint64_t)tr.n_workers < tr.n_batch ? tr.n_workers : (int)tr.n_batch;
            if (!mfm__collect_touched(&tr)) {
                st = mfm__fail(err, MFM_ERR_OUT_OF_MEMORY,
                               "out of memory for the gradient buffers in epoch %d; the model holds the updates of the batches before it", e + 1);
                break;
            }
            mfm__pool_run(&pool, mfm__accumulate_task, &tr);
            mfm__pool_run(&pool, mfm__apply_task, &tr);
        }
        if (st != MFM_OK) break;
        m->epochs_trained++;
        for (w = 0; w < tr.n_workers; w++) { /* in worker order: the same bits every run */
            loss += tr.workers[w].loss;
            weight += tr.workers[w].weight;
        }
        rep.epoch = e + 1;
        rep.n_epochs = m->params.n_epochs;
        rep.train_loss = weight > 0 ? loss / weight : 0;
        rep.seconds = mfm__seconds() - t0;
        rep.n_rows = n;
        if (m->params.on_epoch && m->params.on_epoch(m->params.user, &rep))
            st = mfm__fail(err, MFM_ERR_CANCELLED, "training was stopped by the epoch callback after epoch %d of %d", e + 1, m->params.n_epochs);
    }
    mfm__pool_stop(&pool);
    mfm__trainer_free(&tr);
    MFM_FREE(order);
    return st == MFM_OK ? mfm__ok(err) : st;
}

MFMDEF mfm_status mfm_train(const mfm_params *params, const mfm_csr *d, mfm_model **out, mfm_error *err) {
    mfm_params p = mfm_params_resolve(params);
    mfm__data_info info;
    mfm_status st;
    uint32_t n_classes = p.n_classes > 0 ? (uint32_t)p.n_classes : 0;
    if (!out) return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "mfm_train: the output pointer is NULL");
    *out = NULL;
    /* Parameters first (the class count is checked again once the data has told it). */
    if ((st = mfm__validate_params(&p, n_classes ? n_classes : 2, err)) != MFM_OK) return st;
    if ((st = mfm__check_csr(d, p.model != MFM_MODEL_FM, &info, err)) != MFM_OK) return st;
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
    int n_workers;
} mfm__predictor;

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
    for (r = lo; r < hi; r++) {
        mfm__row row = mfm__get_row(pr->d, r, pr->ones);
        float *out = pr->out + r * width;
        for (c = 0; c < C; c++) score[c] = mfm__score(m, c, &row, sum + (uint64_t)c * m->k);
        if (pr->kind == MFM_OUTPUT_SCORE || m->params.task == MFM_TASK_REGRESSION) {
            memcpy(out, score, width * sizeof(float));
        } else if (m->params.task == MFM_TASK_BINARY) {
            out[0] = pr->kind == MFM_OUTPUT_LABEL ? (score[0] >= 0 ? 1.0f : 0.0f) : (float)mfm__sigmoid(score[0]);
        } else if (pr->kind == MFM_OUTPUT_LABEL) {
            uint32_t best = 0;
            for (c = 1; c < C; c++)
                if (score[c] > score[best]) best = c; /* the first of equal maxima wins */
            out[0] = (float)best;
        } else {
            mfm__softmax(score, C, prob);
            for (c = 0; c < C; c++) out[c] = (float)prob[c];
        }
    }
}

MFMDEF mfm_status mfm_predict(const mfm_model *m, const mfm_csr *d, mfm_output kind, float *out, size_t capacity, mfm_error *err) {
    mfm__data_info info;
    mfm__predictor pr;
    mfm__pool pool;
    mfm_status st;
    float *ones;
    uint64_t need, r;
    if (!m) return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "mfm_predict: the model is NULL");
    if ((unsigned)kind >= MFM_OUTPUT_COUNT)
        return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "mfm_predict: output kind %d is not a known kind (score, probability or label)", (int)kind);
    if (kind == MFM_OUTPUT_DEFAULT) kind = m->params.task == MFM_TASK_REGRESSION ? MFM_OUTPUT_SCORE : MFM_OUTPUT_PROBABILITY;
    if (kind == MFM_OUTPUT_PROBABILITY && m->params.task == MFM_TASK_REGRESSION)
        return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "mfm_predict: a regression model gives scores, not probabilities");
    if ((st = mfm__check_csr(d, m->params.model != MFM_MODEL_FM, &info, err)) != MFM_OK) return st;
    if ((st = mfm__check_shape(m, d, &info, err)) != MFM_OK) return st;
    need = d->n_rows * mfm_output_width(m, kind);
    if (!out && need) return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "mfm_predict: the output buffer is NULL");
    if ((uint64_t)capacity < need)
        return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "mfm_predict: the output holds %" PRIu64 " values but %" PRIu64 " rows need %" PRIu64,
                         (uint64_t)capacity, d->n_rows, need);
    if (d->n_rows == 0) return mfm__ok(err);
    memset(&pr, 0, sizeof pr);
    memset(&pool, 0, sizeof pool);
    pr.m = m;
    pr.d = d;
    pr.kind = kind;
    pr.out = out;
    pr.n_workers = (uint64_t)m->params.n_threads < d->n_rows ? m->params.n_threads : (int)d->n_rows;
    pr.ones = ones = (float *)mfm__alloc(info.max_row_nnz, sizeof(float));
    pr.scratch = (float *)mfm__alloc((uint64_t)pr.n_workers * m->n_classes * (m->k + 1), sizeof(float));
    pr.prob = (double *)mfm__alloc((uint64_t)pr.n_workers * m->n_classes, sizeof(double));
    st = ones && pr.scratch && pr.prob ? mfm__pool_start(&pool, pr.n_workers, err)
                                       : mfm__fail(err, MFM_ERR_OUT_OF_MEMORY, "out of memory for prediction buffers");
    if (st == MFM_OK) {
        for (r = 0; r < info.max_row_nnz; r++) ones[r] = 1.0f;
        mfm__pool_run(&pool, mfm__predict_task, &pr);
        mfm__pool_stop(&pool);
    }
    MFM_FREE(ones);
    MFM_FREE(pr.scratch);
    MFM_FREE(pr.prob);
    return st == MFM_OK ? mfm__ok(err) : st;
}

/* ============================================================================================
   >>metrics  Logloss, AUC (exact with ties), RMSE, accuracy
   ============================================================================================ */

static double mfm__clip(double p) { return p < 1e-15 ? 1e-15 : p > 1 - 1e-15 ? 1 - 1e-15 : p; }

MFMDEF double mfm_logloss(const float *labels, const float *probabilities, size_t n) {
    double total = 0;
    size_t i;
    if (n == 0) return NAN;
    for (i = 0; i < n; i++) {
        double p = mfm__clip(probabilities[i]), y = labels[i];
        total -= y * log(p) + (1 - y) * log(1 - p);
    }
    return total / (double)n;
}

MFMDEF double mfm_rmse(const float *labels, const float *predictions, size_t n) {
    double total = 0;
    size_t i;
    if (n == 0) return NAN;
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
   means label > 0.5. NaN when a class is absent or memory is short. */
MFMDEF double mfm_auc(const float *labels, const float *scores, size_t n) {
    mfm__scored *s = (mfm__scored *)mfm__alloc(n, sizeof *s);
    double positives = 0, rank_sum = 0, negatives;
    size_t i, j;
    if (!s) return NAN;
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
        if (j == i) j = i + 1; /* a NaN score equals nothing, itself included */
    }
    MFM_FREE(s);
    negatives = (double)n - positives;
    if (positives == 0 || negatives == 0) return NAN;
    return (rank_sum - positives * (positives + 1) / 2) / (positives * negatives);
}

MFMDEF mfm_status mfm_evaluate(const mfm_model *m, const mfm_csr *d, mfm_metrics *out, mfm_error *err) {
    const int multiclass = m && m->params.task == MFM_TASK_MULTICLASS;
    uint32_t n_classes, C;
    mfm__data_info info;
    mfm_status st;
    float *scores;
    double *prob;
    uint64_t r, n;
    double loss = 0, hits = 0;
    if (!m || !out) return mfm__fail(err, MFM_ERR_INVALID_ARGUMENT, "mfm_evaluate: the model or the output is NULL");
    out->n_rows = 0;
    out->logloss = out->auc = out->accuracy = out->rmse = NAN;
    if ((st = mfm__check_csr(d, m->params.model != MFM_MODEL_FM, &info, err)) != MFM_OK) return st;
    if ((st = mfm__check_shape(m, d, &info, err)) != MFM_OK) return st;
    n_classes = C = m->n_classes;
    if ((st = mfm__check_targets(m->params.task, d, &n_classes, 0, err)) != MFM_OK) return st;
    n = out->n_rows = d->n_rows;
    if (n == 0) return mfm__ok(err);
    scores = (float *)mfm__alloc(n * C, sizeof(float));
    prob = (double *)mfm__alloc(C, sizeof(double));
    st = scores && prob ? mfm_predict(m, d, MFM_OUTPUT_SCORE, scores, (size_t)(n * C), err)
                        : mfm__fail(err, MFM_ERR_OUT_OF_MEMORY, "out of memory for %" PRIu64 " scores", n * C);
    if (st != MFM_OK) {
        MFM_FREE(scores);
        MFM_FREE(prob);
        return st;
    }
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
    MFM_FREE(scores);
    MFM_FREE(prob);
    return mfm__ok(err);
}

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
