/* mfm.c - the modern_fm command-line tool: train, predict, evaluate, convert and inspect.

       mfm train   [options] TRAIN [MODEL]    FM, FFM, FwFM or a linear model from a data file
       mfm tune    [options] TRAIN [MODEL]    train over a small grid of learning rates and L2
       mfm predict [options] MODEL DATA OUT   one line of predictions per row
       mfm eval    [options] MODEL DATA       logloss, AUC and accuracy, or RMSE
       mfm convert [options] IN OUT           libffm, libsvm and binary data files
       mfm info    FILE                       what a model or data file holds

   Short options follow LIBFFM (-k -t -r -l -s -p, --auto-stop); every library parameter also
   has a long option, given as "--opt value" or "--opt=value". A real-valued option typed as 0
   means zero, never the library's default (it reaches the params as MFM_ZERO). Every error is
   one sentence on stderr that starts with "mfm: "; the exit status is 0 on success, 1 on a
   failure and 2 on a usage error. The tool is a thin layer: reading, training, saving and
   checking all happen in modern_fm.h, whose error sentences already say which file, line and
   value was wrong.

   Build: cc -std=c99 -O2 -o mfm tools/mfm.c -pthread -lm */
#define MODERN_FM_IMPLEMENTATION
#include "../modern_fm.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if !defined(_WIN32)
#include <pthread.h>
#endif
#include <sys/stat.h>
#include <signal.h>
#include <sys/types.h>
#include <time.h>

#ifdef _WIN32
#include <io.h>
#include <windows.h>
#define stderr_is_terminal() _isatty(_fileno(stderr))
#else
#include <unistd.h>
#define stderr_is_terminal() isatty(fileno(stderr))
#endif

#if defined(__GNUC__) || defined(__clang__)
#define MFM_CLI_PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))
#else
#define MFM_CLI_PRINTF(fmt, args)
#endif

/* ============================================================================================
   Messages, small helpers, platform
   ============================================================================================ */

MFM_CLI_PRINTF(1, 2) static void say(const char *fmt, ...) {
    va_list ap;
    fputs("mfm: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}
#define fail(...) (say(__VA_ARGS__), 1)        /* a failure: exit status 1 */
#define usage_error(...) (say(__VA_ARGS__), 2) /* a bad command line: exit status 2 */

/* Small allocations have no sensible way on without memory. */
static void *xmalloc(size_t size) {
    void *p = malloc(size ? size : 1);
    if (!p) exit(fail("out of memory (%llu bytes)", (unsigned long long)size));
    return p;
}

static char *join(const char *a, const char *b) {
    size_t na = strlen(a), nb = strlen(b);
    char *s = (char *)xmalloc(na + nb + 1);
    memcpy(s, a, na);
    memcpy(s + na, b, nb + 1);
    return s;
}

static int ends_with(const char *s, const char *tail) {
    size_t n = strlen(s), m = strlen(tail);
    return n >= m && strcmp(s + n - m, tail) == 0;
}

static int is_std_stream(const char *path) { return strcmp(path, "-") == 0; }

static double per_second(double count, double seconds) { return seconds > 0 ? count / seconds : 0; }

/* ---- platform: clock, file size and time, replacing a file ---- */

static double now_seconds(void) {
#ifdef _WIN32
    LARGE_INTEGER freq, t;
    QueryPerformanceFrequency(&freq);
    QueryPerformanceCounter(&t);
    return (double)t.QuadPart / (double)freq.QuadPart;
#else
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
#endif
}

/* What is at a path (links followed): nothing, a regular file, or something else (a pipe, a
   device, a folder); errno tells why for nothing. */
enum { PATH_NONE, PATH_FILE, PATH_OTHER };
static int path_kind(const char *path) {
#ifdef _WIN32
    struct _stat64 st;
    if (_stat64(path, &st) != 0) return PATH_NONE;
    return (st.st_mode & _S_IFMT) == _S_IFREG ? PATH_FILE : PATH_OTHER;
#else
    struct stat st;
    if (stat(path, &st) != 0) return PATH_NONE;
    return S_ISREG(st.st_mode) ? PATH_FILE : PATH_OTHER;
#endif
}

/* Whether an output would overwrite an input: the same path, or (links and other names of one
   file included) the same device and inode. Standard input and output are separate streams,
   and a character device (/dev/null) is no file to lose. */
static int same_file(const char *a, const char *b) {
    if (is_std_stream(a) || is_std_stream(b)) return 0;
    if (strcmp(a, b) == 0) return 1;
#ifdef _WIN32
    { /* one file under two spellings: case, ".\\", "/" for "\\", a relative path */
        char fa[_MAX_PATH], fb[_MAX_PATH];
        return _fullpath(fa, a, sizeof fa) && _fullpath(fb, b, sizeof fb) && _stricmp(fa, fb) == 0;
    }
#else
    {
        struct stat sa, sb;
        return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino && !S_ISCHR(sa.st_mode);
    }
#endif
}

/* Refuses, before any work, an output that is one of the inputs. */
static int check_output(const char *out, const char *out_name, const char *in, const char *in_name) {
    if (in && same_file(out, in))
        return usage_error("%s (%s) is the same file as %s (%s): writing it would destroy the input; choose another output", out_name, out, in_name, in);
    return 0;
}

/* ---- outputs: their temporary files go away on Ctrl-C and kill; standard output is checked ---- */

static void remove_temporaries_and_die(int sig) {
    mfm_output_remove_temporaries(); /* async-signal-safe: unlink only */
    signal(sig, SIG_DFL);
    raise(sig);
}

/* A signal the parent had ignored (nohup, a background job of a script) stays ignored. */
static void catch_signal(int sig) {
    if (signal(sig, remove_temporaries_and_die) == SIG_IGN) signal(sig, SIG_IGN);
}

static void handle_signals(void) {
    catch_signal(SIGINT);
    catch_signal(SIGTERM);
#ifdef SIGHUP
    catch_signal(SIGHUP);
#endif
#ifdef SIGXFSZ
    signal(SIGXFSZ, SIG_IGN); /* past the file size limit a write then fails with EFBIG, reported like any other */
#endif
}

/* Output to standard output that did not arrive (a full disk, /dev/full, a closed pipe) is a
   failure, in every command. */
static int check_stdout(int rc) {
    int failed = fflush(stdout) != 0, code = errno;
    if (rc != 0 || (!failed && !ferror(stdout))) return rc; /* a failed command has said why */
    say("could not write to standard output: %s", failed ? strerror(code) : "a write failed");
    return rc ? rc : 1;
}

/* ============================================================================================
   Names: one table per enum, used both to parse options and to print
   ============================================================================================ */

/* The names are the library's (mfm_model_type_name, ...); a set lists the values a user may
   type, from `first` (DEFAULT's 0 is left out where it only repeats another value's name). */
typedef struct name_set {
    const char *(*name)(int value);
    int first, count;
} name_set;

enum { MODEL_LINEAR = MFM_MODEL_COUNT }; /* the tool's fourth model: FM without the pair term */

static const char *model_or_linear(int v) { return v == MODEL_LINEAR ? "linear" : mfm_model_type_name((mfm_model_type)v); }
static const char *task_value_name(int v) { return mfm_task_name((mfm_task)v); }
static const char *optimizer_value_name(int v) { return mfm_optimizer_name((mfm_optimizer)v); }
static const char *format_value_name(int v) { return mfm_format_name((mfm_format)v); }
static const char *output_value_name(int v) { return mfm_output_name((mfm_output)v); }
static const char *backend_value_name(int v) { return mfm_backend_name((mfm_backend)v); }
static const char *metric_value_name(int v) { return mfm_metric_name((mfm_metric)v); }
static const char *class_weight_value_name(int v) { return mfm_class_weight_name((mfm_class_weight)v); }

static const name_set model_set = {model_or_linear, MFM_MODEL_FM, MODEL_LINEAR + 1}, task_set = {task_value_name, MFM_TASK_BINARY, MFM_TASK_COUNT},
                      optimizer_set = {optimizer_value_name, MFM_OPTIMIZER_SGD, MFM_OPTIMIZER_COUNT},
                      format_set = {format_value_name, MFM_FORMAT_AUTO, MFM_FORMAT_COUNT}, output_set = {output_value_name, MFM_OUTPUT_DEFAULT, MFM_OUTPUT_COUNT},
                      class_weight_set = {class_weight_value_name, MFM_CLASS_WEIGHT_NONE, MFM_CLASS_WEIGHT_COUNT},
                      metric_set = {metric_value_name, MFM_METRIC_LOGLOSS, MFM_METRIC_COUNT}, backend_set = {backend_value_name, MFM_BACKEND_CPU, MFM_BACKEND_COUNT};

static const char *name_of(const name_set *set, int value) { return set->name(value); }

static int same_name(const char *a, const char *b) { /* ASCII, case-insensitive */
    for (; *a && tolower((unsigned char)*a) == tolower((unsigned char)*b); a++, b++) {}
    return tolower((unsigned char)*a) == tolower((unsigned char)*b);
}

static int find_name(const name_set *set, const char *text) {
    int i;
    for (i = set->first; i < set->count; i++)
        if (same_name(set->name(i), text)) return i;
    return -1;
}

/* "fm, ffm, fwfm, linear" (or "fm|ffm|fwfm|linear") for messages and help. */
static const char *list_names(const name_set *set, const char *separator, char *buf, size_t size) {
    size_t used = 0;
    int i;
    buf[0] = '\0';
    for (i = set->first; i < set->count; i++)
        if (used < size) used += (size_t)snprintf(buf + used, size - used, "%s%s", used ? separator : "", set->name(i));
    return buf;
}

/* The model name a user would type: "linear" for an FM without pairs. */
static const char *model_name(const mfm_params *p) { return p->linear_only ? "linear" : name_of(&model_set, p->model); }

/* ============================================================================================
   Options: one table; each entry says which commands take it, where its value goes, and its help
   ============================================================================================ */

enum { CMD_TRAIN = 1, CMD_PREDICT = 2, CMD_EVAL = 4, CMD_CONVERT = 8, CMD_INFO = 16, CMD_CACHE = 32, CMD_GPU = 64, CMD_TUNE = 128, CMD_EXPORT = 256, CMD_ANY = 511, CMD_READ = 15 };
enum { OPEN_LO = 1, OPEN_HI = 2 }; /* that end of the range is not itself valid */

typedef enum opt_kind { OPT_FLAG, OPT_INT, OPT_U32, OPT_U64, OPT_REAL, OPT_TEXT, OPT_NAME } opt_kind;

/* Everything the command line says. Options write straight into it (see the table). */
typedef struct settings {
    const char *command;  /* "train", ... */
    unsigned command_bit; /* CMD_TRAIN, ... */
    mfm_params p; /* the library parameters; zero = the library's default */
    int model, task, optimizer, format, output, to, metric; /* indices into the name tables */
    uint32_t n_features, n_fields;
    int auto_stop, no_auto_stop, no_normalize, libffm, cache, no_state, half, quiet, help, backend, clear;
    const char *validation, *class_weight, *resume, *build, *devices;
    const char *lr_grid, *l2_grid; /* tune's grids, comma lists */
    const char *args[3];
    int n_args;
    int argc;          /* the command's arguments (after "mfm COMMAND"), for tune's train line */
    char **argv;
    unsigned char given[96]; /* per entry of options[]: set on the command line (zeros included) */
} settings;

typedef struct option {
    unsigned commands;      /* CMD_* bits */
    const char *short_name; /* "-k", or NULL */
    const char *long_name;  /* "--k" */
    opt_kind kind;
    size_t at, also_at;     /* offsets into settings; also_at: a second copy, or 0 */
    double lo, hi;          /* numbers: the valid range */
    int open;               /* OPEN_* bits: keeps out an end the library refuses (a learning rate of 0) */
    const name_set *names;  /* OPT_NAME */
    const char *value, *help;
} option;

#define AT(field) offsetof(settings, field)
#define OPTION_FLAG(cmds, s, l, field, help) {cmds, s, l, OPT_FLAG, AT(field), 0, 0, 0, 0, NULL, "", help}
#define OPTION_TEXT(cmds, s, l, field, value, help) {cmds, s, l, OPT_TEXT, AT(field), 0, 0, 0, 0, NULL, value, help}
#define OPTION_NAME(cmds, l, field, set, help) {cmds, NULL, l, OPT_NAME, AT(field), 0, 0, 0, 0, &set, NULL, help}
#define OPTION_NUMBER(cmds, s, l, kind, field, lo, hi, open, value, help) {cmds, s, l, kind, AT(field), 0, lo, hi, open, NULL, value, help}
#define OPTION_INT(s, l, field, lo, hi, value, help) OPTION_NUMBER(CMD_TRAIN, s, l, OPT_INT, field, lo, hi, 0, value, help)
#define OPTION_REAL(l, field, lo, hi, open, help) OPTION_NUMBER(CMD_TRAIN, NULL, l, OPT_REAL, field, lo, hi, open, "X", help)

static const option options[] = {
    OPTION_INT("-k", "--k", p.k, 1, 4096, "K", "factors per vector (4)"),
    OPTION_INT("-t", "--epochs", p.n_epochs, 1, INT_MAX, "N", "epochs (10; 30 while early stopping watches)"),
    OPTION_NUMBER(CMD_TRAIN, "-r", "--learning-rate", OPT_REAL, p.learning_rate, 0, HUGE_VAL, OPEN_LO, "R", "learning rate, FTRL's alpha (AdaGrad: FFM 0.2, FM 0.5; 0.05 otherwise)"),
    {CMD_TRAIN, "-l", "--l2", OPT_REAL, AT(p.l2_linear), AT(p.l2_factors), 0, HUGE_VAL, 0, NULL, "L", "L2 on both weights and factors (2e-5)"},
    OPTION_NUMBER(CMD_TRAIN | CMD_PREDICT | CMD_EVAL, "-s", "--threads", OPT_INT, p.n_threads, 0, 1024, 0, "N",
                  "threads, 0 = every core; results do not depend on it, Hogwild aside (every core)"),
    OPTION_FLAG(CMD_TRAIN, NULL, "--hogwild", p.hogwild, "threads train their shares of the rows lock-free (LIBFFM's way; results vary run to run)"),
    OPTION_FLAG(CMD_TRAIN, NULL, "--thread-chunks", p.thread_chunks,
                "with --batch N: each thread sums a chunk of every batch (FFM and FwFM faster on many cores; the same bits for the same -s)"),
    OPTION_TEXT(CMD_TRAIN, "-p", "--validation", validation, "FILE", "validation metrics after every epoch, and early stopping on them"),
    OPTION_FLAG(CMD_TRAIN, NULL, "--auto-stop", auto_stop, "early stopping on -p FILE, keeping the best epoch's model (the default, except with --libffm)"),
    OPTION_FLAG(CMD_TRAIN, NULL, "--no-auto-stop", no_auto_stop, "-p FILE only reports: every epoch trains and the last is kept (LIBFFM's -p)"),
    OPTION_REAL("--validation-fraction", p.validation_fraction, 0, 1, OPEN_HI,
                "early stopping on a seeded split of TRAIN; 0 = none (0.1 unless -p, --libffm or --resume)"),
    OPTION_INT(NULL, "--patience", p.patience, 1, INT_MAX, "N", "epochs without improvement before stopping (2, as xLearn; 1 with --libffm)"),
    OPTION_REAL("--min-delta", p.min_delta, 0, HUGE_VAL, 0, "the least change that counts as improvement (0)"),
    OPTION_NAME(CMD_TRAIN, "--metric", metric, metric_set, "what early stopping watches (logloss; rmse...)"),
    OPTION_FLAG(CMD_TRAIN, NULL, "--keep-last", p.keep_last, "keep the last epoch, not the best"),
    OPTION_TEXT(CMD_TRAIN, NULL, "--resume", resume, "MODEL", "continue training MODEL (saved with its state; its shape, task, optimizer stay)"),
    OPTION_NAME(CMD_TRAIN, "--model", model, model_set, "linear = FM without pairs (fm)"),
    OPTION_NAME(CMD_TRAIN | CMD_CONVERT, "--task", task, task_set, "the labels and the loss (binary)"),
    OPTION_NAME(CMD_TRAIN, "--optimizer", optimizer, optimizer_set, "(adagrad)"),
    OPTION_INT(NULL, "--batch", p.batch_size, 1, INT_MAX, "N", "rows per mini-batch (1)"),
    OPTION_INT(NULL, "--classes", p.n_classes, 2, 16777216, "C", "number of classes (largest label + 1)"),
    OPTION_REAL("--l2-linear", p.l2_linear, 0, HUGE_VAL, 0, "L2 on the linear weights (2e-5)"),
    OPTION_REAL("--l2-factors", p.l2_factors, 0, HUGE_VAL, 0, "L2 on the factors (2e-5)"),
    OPTION_REAL("--l1-linear", p.l1_linear, 0, HUGE_VAL, 0, "L1 on the linear weights, FTRL only (0)"),
    OPTION_REAL("--l1-factors", p.l1_factors, 0, HUGE_VAL, 0, "L1 on the factors, FTRL only (0)"),
    OPTION_REAL("--init-scale", p.init_scale, 0, HUGE_VAL, OPEN_LO, "scale of the initial factors (0.01; FFM on normalized rows 0.1)"),
    OPTION_REAL("--adam-beta1", p.adam_beta1, 0, 1, OPEN_LO | OPEN_HI, "Adam's beta1 (0.9)"),
    OPTION_REAL("--adam-beta2", p.adam_beta2, 0, 1, OPEN_LO | OPEN_HI, "Adam's beta2 (0.999)"),
    OPTION_REAL("--adam-epsilon", p.adam_epsilon, 0, HUGE_VAL, OPEN_LO, "Adam's epsilon (1e-8)"),
    OPTION_REAL("--ftrl-beta", p.ftrl_beta, 0, HUGE_VAL, OPEN_LO, "FTRL's beta (1)"),
    OPTION_REAL("--label-smoothing", p.label_smoothing, 0, 1, OPEN_HI, "classification only (0)"),
    OPTION_FLAG(CMD_TRAIN, NULL, "--normalize", p.normalize_rows, "scale each row to sum x^2 = 1, as LIBFFM and xLearn do (the default)"),
    OPTION_FLAG(CMD_TRAIN, NULL, "--no-normalize", no_normalize, "train and predict on the values as given"),
    OPTION_FLAG(CMD_TRAIN, NULL, "--pairs-only", p.pairs_only, "no bias and no linear term (LIBFFM)"),
    OPTION_REAL("--adagrad-init", p.adagrad_init, 0, HUGE_VAL, 0, "AdaGrad's initial accumulator (1, as LIBFFM; 0 = plain AdaGrad)"),
    OPTION_FLAG(CMD_TRAIN, NULL, "--libffm", libffm, "LIBFFM's FFM: the three above, init scale 1, -k 4 -t 15 -r 0.2 -l 2e-5, no hold-out"),
    OPTION_TEXT(CMD_TRAIN, NULL, "--class-weight", class_weight, "W", "none, balanced, or a weight per class: 1,3 (none)"),
    OPTION_NUMBER(CMD_TRAIN, NULL, "--seed", OPT_U64, p.seed, 0, 0, 0, "N", "random seed (0)"),
    OPTION_NUMBER(CMD_TRAIN, NULL, "--features", OPT_U32, n_features, 1, 4294967295.0, 0, "N", "make room for larger feature ids than TRAIN's"),
    OPTION_NUMBER(CMD_TRAIN, NULL, "--fields", OPT_U32, n_fields, 1, 4294967295.0, 0, "N", "make room for larger field ids than TRAIN's"),
    OPTION_NAME(CMD_READ, "--format", format, format_set, "the input's format (auto)"),
    OPTION_FLAG(CMD_TRAIN, NULL, "--cache", cache, "keep TRAIN.mfmd, reused while TRAIN is unchanged"),
    OPTION_FLAG(CMD_TRAIN, NULL, "--no-state", no_state, "save without the optimizer state"),
    OPTION_FLAG(CMD_EXPORT, NULL, "--predict-only", no_state, "the parameters alone: the file to serve from (no optimizer state)"),
    OPTION_FLAG(CMD_EXPORT, NULL, "--half", half, "the factors as float16, a quarter of the file (implies --predict-only; logloss within 1e-4)"),
    OPTION_FLAG(CMD_TRAIN, NULL, "--quiet", quiet, "no per-epoch lines"),
    OPTION_NAME(CMD_PREDICT, "--output", output, output_set, "(default: probabilities, regression: values)"),
    OPTION_NAME(CMD_TRAIN | CMD_PREDICT | CMD_EVAL, "--backend", backend, backend_set, "where training or prediction runs; cuda never falls back (cpu)"),
    OPTION_NUMBER(CMD_TRAIN | CMD_PREDICT | CMD_EVAL | CMD_GPU, NULL, "--device", OPT_INT, p.device, 0, 1024, 0, "N", "the CUDA device (0)"),
    OPTION_TEXT(CMD_TRAIN, NULL, "--devices", devices, "LIST", "train on these GPUs together through NCCL, each holding a share of the k factors, e.g. 0,1 (at most k GPUs; implies --backend cuda)"),
    OPTION_FLAG(CMD_TRAIN, NULL, "--deterministic", p.deterministic, "CUDA training gives the same bits every run (a little slower)"),
    OPTION_NUMBER(CMD_TRAIN, NULL, "--gpu-memory", OPT_U64, p.gpu_memory_limit, 0, 0, 0, "BYTES", "most device memory CUDA training takes; rows beyond it stream (all free)"),
    OPTION_FLAG(CMD_CACHE, NULL, "--clear", clear, "remove every entry of the kernel cache"),
    OPTION_TEXT(CMD_CACHE, NULL, "--build", build, "ARCH", "compile the kernels for ARCH (sm_90, compute_90) into the cache; no GPU needed"),
    OPTION_NAME(CMD_CONVERT, "--to", to, format_set, "OUT's format (auto: by extension, else binary)"),
    OPTION_TEXT(CMD_TUNE, NULL, "--lr-grid", lr_grid, "R,R,..", "the learning rates tune tries (0.4, 1 and 2 x the default)"),
    OPTION_TEXT(CMD_TUNE, NULL, "--l2-grid", l2_grid, "L,L,..", "the L2 values (weights and factors) tune tries (0,2e-5,1e-4)"),
    OPTION_FLAG(CMD_ANY, "-h", "--help", help, "this help"),
};

typedef char every_option_fits_in_given[sizeof options / sizeof options[0] <= sizeof((settings *)0)->given ? 1 : -1];

/* All of the text is the number: no blanks around it, no overflow, nothing infinite. */
static int parse_number(const option *o, const char *s, double *x, long long *n, uint64_t *u) {
    char *end;
    if (!(isdigit((unsigned char)*s) || (o->kind != OPT_U64 && (*s == '-' || *s == '+' || *s == '.')))) return 0;
    errno = 0;
    if (o->kind == OPT_REAL)
        *x = strtod(s, &end);
    else if (o->kind == OPT_U64)
        *u = (uint64_t)strtoull(s, &end, 10);
    else
        *x = (double)(*n = strtoll(s, &end, 10));
    return *end == '\0' && errno == 0;
}

static int range_error(const option *o, const char *name, const char *value) {
    if (o->kind != OPT_REAL) return usage_error("%s must be between %.0f and %.0f, got '%s'", name, o->lo, o->hi, value);
    if (o->hi == HUGE_VAL) return usage_error("%s must be %s, got '%s'", name, o->open & OPEN_LO ? "positive" : "zero or more", value);
    return usage_error("%s must be in %c%g, %g%c, got '%s'", name, o->open & OPEN_LO ? '(' : '[', o->lo, o->hi, o->open & OPEN_HI ? ')' : ']', value);
}

static int set_number(settings *s, const option *o, const char *name, const char *value) {
    char *at = (char *)s + o->at;
    long long n = 0;
    uint64_t u = 0;
    double x = 0;
    if (!parse_number(o, value, &x, &n, &u))
        return usage_error("%s expects %s, got '%s'", name, o->kind == OPT_REAL ? "a number" : "a whole number", value);
    if (o->kind == OPT_U64) {
        *(uint64_t *)at = u;
        return 0;
    }
    if (o->open & OPEN_LO ? x <= o->lo : x < o->lo) return range_error(o, name, value);
    if (o->open & OPEN_HI ? x >= o->hi : x > o->hi) return range_error(o, name, value);
    if (o->kind == OPT_INT) *(int *)at = (int)n;
    if (o->kind == OPT_U32) *(uint32_t *)at = (uint32_t)n;
    if (o->kind == OPT_REAL && x == 0) x = MFM_ZERO; /* a typed 0 is a zero, not "the default" */
    if (o->kind == OPT_REAL) *(double *)at = x;
    if (o->also_at) *(double *)((char *)s + o->also_at) = x;
    return 0;
}

static int set_option(settings *s, const option *o, const char *name, const char *value) {
    char *at = (char *)s + o->at, list[96];
    int i;
    switch (o->kind) {
    case OPT_FLAG: *(int *)at = 1; return 0;
    case OPT_TEXT: *(const char **)at = value; return 0;
    case OPT_NAME:
        if ((i = find_name(o->names, value)) < 0)
            return usage_error("%s must be one of %s, got '%s'", name, list_names(o->names, ", ", list, sizeof list), value);
        *(int *)at = i;
        return 0;
    default: return set_number(s, o, name, value);
    }
}

/* tune takes train's options, less those it searches or that contradict keeping the best epoch. */
static const char *const not_for_tune[] = {"--learning-rate", "--l2", "--l2-linear", "--l2-factors", "--resume", "--keep-last"};

static int takes_option(unsigned command_bit, const option *o) {
    size_t i;
    if (command_bit != CMD_TUNE || !(o->commands & CMD_TRAIN)) return (o->commands & command_bit) != 0;
    for (i = 0; i < sizeof not_for_tune / sizeof not_for_tune[0]; i++)
        if (strcmp(o->long_name, not_for_tune[i]) == 0) return 0;
    return 1;
}

static const option *find_option(unsigned command_bit, const char *arg, size_t len) {
    size_t i;
    for (i = 0; i < sizeof options / sizeof options[0]; i++) {
        const option *o = &options[i];
        int is_long = strlen(o->long_name) == len && memcmp(o->long_name, arg, len) == 0;
        int is_short = o->short_name && strlen(o->short_name) == len && memcmp(o->short_name, arg, len) == 0;
        if (takes_option(command_bit, o) && (is_long || is_short)) return o;
    }
    return NULL;
}

/* "  -k, --k K                  factors per vector (8)" for each option the command takes. */
static void print_options(unsigned command_bit) {
    char left[80], list[96];
    size_t i;
    for (i = 0; i < sizeof options / sizeof options[0]; i++) {
        const option *o = &options[i];
        const char *value = o->names ? list_names(o->names, "|", list, sizeof list) : o->value;
        if (!takes_option(command_bit, o)) continue;
        snprintf(left, sizeof left, "%s%s%s %s", o->short_name ? o->short_name : "", o->short_name ? ", " : "    ", o->long_name, value);
        printf("  %-40s %s\n", left, o->help);
    }
}

/* ============================================================================================
   Reading data (with a progress line for big files) and the --cache file
   ============================================================================================ */

typedef struct progress {
    const char *name;
    long mark; /* the percent (or MB when the size is unknown) last shown */
    int width; /* characters of the line shown; 0 = none yet */
} progress;

static void show_progress(void *user, uint64_t done, uint64_t total) {
    progress *p = (progress *)user;
    long mark = total ? (long)(100.0 * (double)done / (double)total) : (long)(done >> 20);
    if ((total ? total : done) < (32u << 20) || (p->width && mark == p->mark)) return; /* small files read in a blink */
    p->mark = mark;
    if (total)
        p->width = fprintf(stderr, "\rreading %s: %ld%% (%llu MB)", p->name, mark, (unsigned long long)(done >> 20));
    else
        p->width = fprintf(stderr, "\rreading %s: %llu MB", p->name, (unsigned long long)(done >> 20));
}

static mfm_status read_dataset(const char *path, int task, int format, mfm_dataset **out, mfm_error *err) {
    mfm_read_options ro;
    progress pr = {NULL, 0, 0};
    mfm_status st;
    memset(&ro, 0, sizeof ro);
    ro.format = (mfm_format)format;
    ro.task = (mfm_task)task;
    pr.name = path;
    if (stderr_is_terminal()) ro.on_progress = show_progress, ro.user = &pr;
    st = mfm_dataset_read(path, &ro, out, err);
    if (pr.width > 0) fprintf(stderr, "\r%*s\r", pr.width, ""); /* clear the progress line */
    return st;
}

static int read_data(const char *path, int task, int format, mfm_dataset **out) {
    mfm_error e;
    return read_dataset(path, task, format, out, &e) == MFM_OK ? 0 : fail("%s", e.message);
}

/* Training and evaluation need labeled rows; FFM, FwFM and libffm output need field ids. */
static int check_data(const char *path, const mfm_dataset *d, int need_labels, int need_fields, const char *who) {
    mfm_dataset_info i;
    mfm_dataset_get_info(d, &i);
    if (need_labels && !i.n_rows) return fail("%s has no rows", path);
    if (need_labels && !i.has_labels) return fail("%s has no labels (rows start with a feature)", path);
    if (need_fields && !i.has_fields && i.nnz) return fail("%s has no field ids (libsvm rows), but %s needs them", path, who);
    return 0;
}

static int starts_with(const char *path, const char *magic);

/* The cache, when it was made from the text as it is now (the digest it recorded while the
   text was parsed equals the text's digest now); NULL otherwise. */
static mfm_dataset *fresh_cache(const char *cache, const char *path, int task) {
    mfm_dataset *d = NULL;
    mfm_dataset_info info;
    uint64_t digest;
    if (path_kind(cache) != PATH_FILE || read_dataset(cache, task, MFM_FORMAT_BINARY, &d, NULL) != MFM_OK) return NULL;
    mfm_dataset_get_info(d, &info);
    if (info.source_digest && mfm_file_digest(path, &digest, NULL) == MFM_OK && digest == info.source_digest) return d;
    mfm_dataset_free(d);
    return NULL;
}

/* --cache: PATH.mfmd beside a text file, reused while the text's content is unchanged. Only a
   regular file is cached (a pipe reads once, and its next content is unknown), and only a
   dataset cache is ever overwritten. */
static int read_cached(const char *path, int task, int format, int quiet, mfm_dataset **out) {
    char *cache = join(path, ".mfmd");
    mfm_dataset_info info;
    mfm_error e;
    int rc = 0, kind = path_kind(path), cache_kind = path_kind(cache);
    if (kind == PATH_NONE) {
        rc = fail("cannot read %s: %s", path, strerror(errno));
    } else if (kind != PATH_FILE) {
        rc = usage_error("--cache needs a training file, but %s is a pipe or a device (read once, never cached): drop --cache", path);
    } else if (cache_kind != PATH_NONE && (cache_kind != PATH_FILE || !starts_with(cache, "MFM-DATA") || same_file(cache, path))) {
        rc = fail("%s exists and is not a modern_fm dataset cache: --cache does not overwrite it (move it away, or train without --cache)", cache);
    } else if ((*out = fresh_cache(cache, path, task)) != NULL) {
        if (!quiet) printf("using the cache %s\n", cache);
    } else if ((rc = read_data(path, task, format, out)) == 0) {
        mfm_dataset_get_info(*out, &info);
        if (info.format != MFM_FORMAT_BINARY && mfm_dataset_write_cache(*out, cache, path, &e) != MFM_OK) rc = fail("%s", e.message);
    }
    free(cache);
    return rc;
}

/* ============================================================================================
   Metrics: which ones a task reports, printed the same way everywhere
   ============================================================================================ */

/* Validation during training shows the short list; eval and predict add accuracy to binary. */
static int task_metrics(mfm_task task, int brief, const mfm_metrics *m, const char **names, double *values) {
    int n = 0;
    if (task == MFM_TASK_REGRESSION) {
        names[n] = "rmse", values[n++] = m->rmse;
        return n;
    }
    names[n] = "logloss", values[n++] = m->logloss;
    if (task == MFM_TASK_BINARY) names[n] = "auc", values[n++] = m->auc;
    if (task == MFM_TASK_MULTICLASS || !brief) names[n] = "accuracy", values[n++] = m->accuracy;
    return n;
}

/* ============================================================================================
   mfm train
   ============================================================================================ */

/* Everything a command allocates; main frees it whatever happened. */
/* --backend cuda or auto in predict and eval: a thread of its own makes the device ready while
   the model is opened (creating the context is most of a few rows' time); predict's then uploads
   the model while the rows are read. On Windows both happen once the model is open, before the
   rows are read, and only for predict. */
typedef struct gpu_upload {
    const mfm_model *model;
    int device, automatic; /* automatic: --backend auto, which needs a GPU to use one */
    int started, running, given;
    mfm_gpu_model *gm;     /* NULL after the upload: no GPU for --backend auto, or a failure (st) */
    mfm_status st;
    mfm_error e;
#if !defined(_WIN32)
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t model_given;
#endif
} gpu_upload;

typedef struct job {
    gpu_upload up;
    mfm_dataset *data, *valid;
    mfm_model *model;
    mfm_model *best;   /* tune: the best run's model so far */
    float *floats;     /* predictions, or explicit class weights */
    int devices[MFM_MAX_DEVICES]; /* --devices */
    char *model_path;  /* train's MODEL */
    mfm_output_file *out; /* MODEL or OUT, open (its temporary file made) before the work */
} job;

/* What the epoch callback needs, and what it leaves behind. */
typedef struct trainer {
    const settings *s;
    job *job;
    mfm_csr valid;        /* -p FILE; n_rows 0 without */
    mfm_task task;
    mfm_metric metric;    /* what early stopping watches */
    int best_epoch, failed;
    double seconds;
    uint64_t rows;        /* rows trained on over all epochs */
} trainer;

static void print_epoch_header(const char **names, int n) {
    char column[32];
    int i;
    printf("%5s %12s", "epoch", "train_loss");
    for (i = 0; i < n; i++) {
        snprintf(column, sizeof column, "valid_%s", names[i]);
        printf(" %14s", column);
    }
    printf(" %9s %11s\n", "seconds", "rows/s");
}

/* The library's warnings and errors (an early-stopping metric that is NaN, ...) go to stderr;
   its progress notes do not. */
static void on_log(void *user, mfm_log_level level, const char *message) {
    (void)user;
    if (level <= MFM_LOG_WARN) say("%s: %s", level == MFM_LOG_ERROR ? "error" : "warning", message);
}

/* One line per epoch (a header before the first): train loss, validation metrics (of -p FILE,
   or early stopping's metric on a split of TRAIN), speed. */
static int on_epoch(void *user, const mfm_epoch_report *r) {
    trainer *t = (trainer *)user;
    const char *names[3];
    double values[3];
    mfm_metrics m;
    mfm_error e;
    int i, n = 0;
    t->seconds += r->seconds;
    t->rows += r->n_rows;
    t->best_epoch = r->best_epoch;
    if (t->s->quiet) return 0;
    if (t->valid.n_rows) { /* the model is consistent between epochs */
        if (mfm_evaluate(t->job->model, &t->valid, &m, &e) != MFM_OK) return t->failed = fail("%s: %s", t->s->validation, e.message);
        n = task_metrics(t->task, 1, &m, names, values);
    } else if (r->validation == r->validation) {
        names[0] = name_of(&metric_set, t->metric), values[0] = r->validation, n = 1;
    }
    if (r->epoch == 1) print_epoch_header(names, n);
    printf("%5d %12.6f", r->epoch, r->train_loss);
    for (i = 0; i < n; i++) printf(" %14.6f", values[i]);
    printf(" %9.2f %11.0f\n", r->seconds, per_second((double)r->n_rows, r->seconds));
    fflush(stdout);
    return 0;
}

/* MODEL defaults to TRAIN's file name + ".model" in the current directory, as in LIBFFM. */
static char *default_model_path(const char *train_path) {
    const char *base = train_path, *c;
    for (c = train_path; *c; c++)
        if (*c == '/' || *c == '\\') base = c + 1;
    return join(base, ".model");
}

/* The largest class id + 1 among the labels (the reader lets only whole, small ids through). */
static uint32_t count_classes(const mfm_csr *d) {
    uint32_t top = 0;
    uint64_t r;
    for (r = 0; d->labels && r < d->n_rows; r++)
        if (d->labels[r] >= 0 && d->labels[r] < 16777216.0f && (uint32_t)d->labels[r] + 1 > top) top = (uint32_t)d->labels[r] + 1;
    return top;
}

/* --class-weight none|balanced|W0,W1,...: a list gives one explicit weight per class. */
static int set_class_weight(const char *text, uint32_t n_classes, mfm_params *p, float **weights) {
    const char *c;
    char *end;
    uint32_t n = 1, i;
    double total = 0;
    int named = find_name(&class_weight_set, text);
    if (named == MFM_CLASS_WEIGHT_NONE || named == MFM_CLASS_WEIGHT_BALANCED) {
        p->class_weight = (mfm_class_weight)named;
        return 0;
    }
    for (c = text; *c; c++) n += *c == ',';
    *weights = (float *)xmalloc(n * sizeof(float));
    for (c = text, i = 0; i < n; i++, c = end + 1) {
        double w = -1;
        end = (char *)c;
        if (!isspace((unsigned char)*c)) w = strtod(c, &end);
        if (c == end || (*end != ',' && *end != '\0') || !(w >= 0 && w <= 3.4e38)) /* finite as a float */
            return usage_error("--class-weight expects none, balanced or weights >= 0 like 1,3, got '%s'", text);
        total += (*weights)[i] = (float)w;
    }
    if (total == 0) return usage_error("--class-weight needs at least one weight above 0, got '%s'", text);
    if (n != n_classes) return usage_error("--class-weight gives %u weights but the model has %u classes", (unsigned)n, (unsigned)n_classes);
    p->class_weight = MFM_CLASS_WEIGHT_EXPLICIT;
    p->class_weights = *weights;
    return 0;
}

/* --devices 0,1,...: the GPUs one training shares the factors among (list has MFM_MAX_DEVICES places). */
static int set_devices(const char *text, mfm_params *p, int *list) {
    const char *c = text;
    char *end;
    int n = 0;
    for (;;) {
        long d = -1;
        end = (char *)c;
        if (isdigit((unsigned char)*c)) d = strtol(c, &end, 10);
        if (c == end || (*end != ',' && *end != '\0') || d < 0 || d > 1024)
            return usage_error("--devices expects CUDA device numbers like 0,1, got '%s'", text);
        if (n == MFM_MAX_DEVICES) return usage_error("--devices names more than %d GPUs: '%s'", MFM_MAX_DEVICES, text);
        list[n++] = (int)d;
        if (*end == '\0') break;
        c = end + 1;
    }
    p->n_devices = n;
    p->devices = list;
    if (n == 1) p->device = list[0]; /* one GPU: --device's */
    return 0;
}

static int was_given(const settings *s, const char *long_name) {
    size_t i;
    for (i = 0; i < sizeof options / sizeof options[0]; i++)
        if (s->given[i] && strcmp(options[i].long_name, long_name) == 0) return 1;
    return 0;
}

/* What a resumed model keeps: its kind, task, shape, optimizer and initialization. */
static const char *const fixed_on_resume[] = {"--model", "--task", "--optimizer", "--classes", "--k", "--features", "--fields", "--normalize",
                                              "--no-normalize", "--pairs-only", "--libffm", "--init-scale", "--adagrad-init", "--seed"};

static int check_resume_options(const settings *s) {
    size_t i, f;
    for (i = 0; i < sizeof options / sizeof options[0]; i++)
        for (f = 0; s->given[i] && f < sizeof fixed_on_resume / sizeof fixed_on_resume[0]; f++)
            if (strcmp(options[i].long_name, fixed_on_resume[f]) == 0)
                return usage_error("%s cannot apply to a resumed model: %s keeps what it was made with (see mfm info %s); drop %s",
                                   options[i].short_name ? options[i].short_name : options[i].long_name, s->resume, s->resume,
                                   options[i].short_name ? options[i].short_name : options[i].long_name);
    return 0;
}

/* Option combinations that cannot work, caught before any data is read. */
static int check_train_settings(const settings *s) {
    int rc;
    if (s->resume && (rc = check_resume_options(s)) != 0) return rc;
    if (s->command_bit == CMD_TRAIN && s->auto_stop && !s->validation && !s->p.validation_fraction) /* tune: always on */
        return usage_error("--auto-stop needs validation data (-p FILE or --validation-fraction F)");
    if (s->auto_stop && s->no_auto_stop) return usage_error("--auto-stop and --no-auto-stop contradict each other: give one");
    if (s->no_auto_stop && !s->validation) return usage_error("--no-auto-stop applies to -p FILE (without it, --validation-fraction 0 trains every epoch)");
    if (s->validation && s->p.validation_fraction) return usage_error("give -p FILE or --validation-fraction, not both");
    if (s->libffm && s->model && s->model != MFM_MODEL_FFM) return usage_error("--libffm trains an FFM; drop --model");
    if (s->no_normalize && (s->p.normalize_rows || s->libffm))
        return usage_error("--no-normalize contradicts %s, which scales the rows: give one", s->libffm ? "--libffm" : "--normalize");
    if (s->p.hogwild && s->p.thread_chunks) return usage_error("--hogwild and --thread-chunks are two schedules of the threads: give one");
    if (s->p.hogwild && s->p.deterministic)
        return usage_error("--hogwild (CPU threads whose results vary run to run) and --deterministic (bit-identical GPU runs) contradict each other: give one");
    if (s->cache && is_std_stream(s->args[0])) return usage_error("--cache needs a training file, not standard input");
    if (s->p.n_classes && s->task != MFM_TASK_MULTICLASS) return usage_error("--classes applies to --task multiclass only");
    if (s->command_bit == CMD_TRAIN && s->n_args < 2 && is_std_stream(s->args[0]))
        return usage_error("training data from standard input needs an explicit MODEL path");
    return 0;
}

/* A real field the command line left alone (+0); a typed 0 is MFM_ZERO (-0). */
static int unset(double x) { return x == 0 && !signbit(x); }

/* --libffm: LIBFFM's algorithm and, where the command line leaves them, its defaults. */
static void apply_libffm(mfm_params *p) {
    p->model = MFM_MODEL_FFM;
    p->normalize_rows = p->pairs_only = 1;
    if (unset(p->adagrad_init)) p->adagrad_init = 1;
    if (unset(p->init_scale)) p->init_scale = 1;
    if (!p->k) p->k = 4;
    if (!p->n_epochs) p->n_epochs = 15;
    if (unset(p->learning_rate)) p->learning_rate = 0.2;
    if (unset(p->l2_linear) && unset(p->l2_factors)) p->l2_linear = p->l2_factors = 2e-5;
}

/* --resume: the saved model's params, with every option the command line gives on top, zeros
   included (options that cannot apply were refused by check_resume_options). */
static void resume_params(const settings *s, const mfm_model *model, mfm_params *p) {
    const size_t lo = offsetof(settings, p), hi = lo + sizeof(mfm_params);
    size_t i;
    *p = *mfm_model_params(model);
    for (i = 0; i < sizeof options / sizeof options[0]; i++) {
        const option *o = &options[i];
        size_t bytes = o->kind == OPT_REAL || o->kind == OPT_U64 ? 8 : o->kind == OPT_U32 ? 4 : sizeof(int);
        if (!s->given[i] || o->at < lo || o->at >= hi) continue; /* not given, or not a library parameter */
        memcpy((char *)p + (o->at - lo), (const char *)s + o->at, bytes);
        if (o->also_at) memcpy((char *)p + (o->also_at - lo), (const char *)s + o->also_at, sizeof(double));
    }
    if (was_given(s, "--metric")) p->metric = (mfm_metric)s->metric;
}

/* What a new model is: its kind, task, optimizer and row scaling as the options say. */
static void choose_model(const settings *s, mfm_task task, mfm_params *p) {
    p->model = s->model == MODEL_LINEAR ? MFM_MODEL_FM : (mfm_model_type)s->model;
    p->linear_only = s->model == MODEL_LINEAR;
    p->task = task;
    p->optimizer = (mfm_optimizer)s->optimizer;
    p->metric = (mfm_metric)s->metric;
    if (s->no_normalize) p->normalize_rows = MFM_OFF;
    if (s->libffm) apply_libffm(p);
}

/* The model to train: MODEL of --resume (with its state), or a new one as big as the data and
   the options ask. */
static int make_model(const settings *s, job *j, trainer *t, mfm_params *p) {
    const mfm_csr csr = mfm_dataset_csr(j->data);
    mfm_dataset_info info;
    mfm_error e;
    uint32_t n_classes;
    int rc;
    if (s->resume) {
        resume_params(s, j->model, p);
    } else {
        choose_model(s, t->task, p);
    }
    if (s->devices && (rc = set_devices(s->devices, p, j->devices)) != 0) return rc;
    if (s->backend || was_given(s, "--backend")) p->backend = (mfm_backend)s->backend;
    else if (s->devices) p->backend = MFM_BACKEND_CUDA;
    p->on_epoch = on_epoch;
    p->on_log = on_log;
    p->user = t;
    n_classes = t->task != MFM_TASK_MULTICLASS ? 2 : s->resume ? mfm_model_params(j->model)->n_classes ? (uint32_t)mfm_model_params(j->model)->n_classes : count_classes(&csr)
                                                              : p->n_classes ? (uint32_t)p->n_classes : count_classes(&csr);
    if (t->task == MFM_TASK_MULTICLASS && !s->resume) p->n_classes = (int)n_classes;
    if (s->class_weight && (rc = set_class_weight(s->class_weight, n_classes, p, &j->floats)) != 0) return rc;
    if (s->resume) return mfm_model_set_params(j->model, p, &e) == MFM_OK ? 0 : fail("%s: %s", s->resume, e.message);
    mfm_dataset_get_info(j->data, &info);
    if (mfm_model_create(p, info.n_features > s->n_features ? info.n_features : s->n_features, info.n_fields > s->n_fields ? info.n_fields : s->n_fields,
                         n_classes, &j->model, &e) != MFM_OK)
        return fail("%s", e.message);
    return 0;
}

/* TRAIN (through --cache when asked) and -p FILE, both with labels (and field ids when the
   model needs them). */
static int read_training_data(const settings *s, job *j, mfm_task task, int need_fields) {
    const char *path = s->args[0];
    int rc = s->cache ? read_cached(path, task, s->format, s->quiet, &j->data) : read_data(path, task, s->format, &j->data);
    if (rc == 0) rc = check_data(path, j->data, 1, need_fields, "an FFM or FwFM model");
    if (rc == 0 && s->validation) rc = read_data(s->validation, task, s->format, &j->valid);
    if (rc == 0 && s->validation) rc = check_data(s->validation, j->valid, 1, need_fields, "an FFM or FwFM model");
    return rc;
}

/* The hold-out mfm train and tune use without -p FILE: with the defaults the best epoch on
   click data is often the first, second or third, and ten epochs without early stopping
   overfit. Fewer rows than HOLDOUT_MIN_ROWS are too few to spare a tenth of. */
#define DEFAULT_HOLDOUT 0.1
enum { HOLDOUT_MIN_ROWS = 100 };

static uint64_t rows_of(const mfm_dataset *d) {
    mfm_dataset_info info;
    mfm_dataset_get_info(d, &info);
    return info.n_rows;
}

/* The validation rows the library splits off n rows (docs/SPEC.md section 7), for the message. */
static uint64_t held_out(double fraction, uint64_t n) {
    uint64_t v = (uint64_t)floor(fraction * (double)n + 0.5);
    return v < 1 ? 1 : v;
}

/* mfm train TRAIN without -p FILE, --validation-fraction, --libffm (LIBFFM holds nothing out)
   or --resume (the model keeps its own): a seeded 10% of TRAIN, with early stopping. */
static void default_holdout(const settings *s, const mfm_dataset *data, mfm_params *p) {
    uint64_t n = rows_of(data);
    if (s->validation || was_given(s, "--validation-fraction") || s->libffm || s->resume) return;
    if (n < HOLDOUT_MIN_ROWS) {
        printf("TRAIN has %llu rows, fewer than %d: no hold-out for early stopping, every row trains for all epochs\n", (unsigned long long)n,
               HOLDOUT_MIN_ROWS);
        return;
    }
    p->validation_fraction = DEFAULT_HOLDOUT;
    printf("holding out a seeded 10%% of TRAIN (%llu of %llu rows) for early stopping; --validation-fraction 0 trains on every row for all epochs\n",
           (unsigned long long)held_out(DEFAULT_HOLDOUT, n), (unsigned long long)n);
}

/* With early stopping and no -t, up to 30 epochs: on normalized rows FFM's best epoch is often
   the 10th to 16th, and stopping ends the run sooner where fewer help (docs/DEFAULTS.md). */
static void early_stopping_epochs(const settings *s, mfm_params *p) {
    if (!was_given(s, "--epochs") && !s->libffm && !s->resume) p->n_epochs = 30;
}

/* Whether training stops early on -p FILE: yes, as xLearn's -v does, unless --no-auto-stop, or
   --libffm without --auto-stop (LIBFFM's -p only reports). Training every epoch and keeping the
   last ended worse than the constant predictor on 5 of 6 Criteo-shaped runs (docs/DEFAULTS.md). */
static int stops_on_validation(const settings *s) { return s->validation && (s->auto_stop || (!s->no_auto_stop && !s->libffm)); }

/* Reads TRAIN (and -p), makes or loads the model, trains: early stopping on -p FILE
   (stops_on_validation) or with --validation-fraction (by default 10% of TRAIN), metrics of -p
   FILE reported either way. */
static int fit_model(const settings *s, job *j, trainer *t) {
    const char *path = s->args[0];
    mfm_params p = s->p;
    mfm_metrics unused;
    mfm_model_info info;
    mfm_csr csr;
    mfm_error e;
    mfm_status st;
    int need_fields, rc = 0;
    if (s->resume) {
        if (mfm_model_load(s->resume, &j->model, &e) != MFM_OK) return fail("%s", e.message);
        mfm_model_get_info(j->model, &info);
        if (!info.has_state)
            return fail("%s was saved without its optimizer state (--no-state), so training cannot continue where it stopped", s->resume);
        t->task = info.task;
    }
    need_fields = s->resume ? info.model != MFM_MODEL_FM : s->model == MFM_MODEL_FFM || s->model == MFM_MODEL_FWFM || s->libffm;
    rc = read_training_data(s, j, t->task, need_fields);
    if (rc == 0) default_holdout(s, j->data, &p);
    if (rc == 0 && (stops_on_validation(s) || p.validation_fraction > 0)) early_stopping_epochs(s, &p);
    if (rc == 0 && stops_on_validation(s) && !s->auto_stop)
        printf("early stopping on %s, keeping the best epoch; --no-auto-stop trains every epoch\n", s->validation);
    if (rc == 0) rc = make_model(s, j, t, &p);
    if (rc != 0) return rc;
    t->metric = mfm_model_params(j->model)->metric;
    csr = mfm_dataset_csr(j->data);
    if (j->valid) {
        t->valid = mfm_dataset_csr(j->valid);
        /* a shape mismatch shows now, not after the first epoch */
        if (mfm_evaluate(j->model, &t->valid, &unused, &e) != MFM_OK) return fail("%s: %s", s->validation, e.message);
    }
    st = stops_on_validation(s) && j->valid ? mfm_fit_validated(j->model, &csr, &t->valid, &e) : mfm_fit(j->model, &csr, &e);
    if (t->failed) return t->failed;
    if (st != MFM_OK) return fail("%s: %s", path, e.message);
    return 0;
}

/* ============================================================================================
   The constant predictor: what a model must beat on the validation rows
   ============================================================================================ */

/* The rows early stopping (or -p FILE) validated on, and the rows trained on: -p FILE and
   every row of TRAIN, or the seeded split of TRAIN that training made
   (params.validation_fraction), which mfm_validation_split gives again. */
typedef struct holdout {
    mfm_csr valid;            /* n_rows 0: none; unweighted, as early stopping's metric */
    const uint64_t *train_rows; /* NULL: every row of TRAIN */
    uint64_t n_train;
    uint64_t *order;          /* the split: validation rows, then training rows */
    mfm_dataset *split;       /* the validation rows of the split */
} holdout;

static void free_holdout(holdout *h) {
    mfm_dataset_free(h->split);
    free(h->order);
    memset(h, 0, sizeof *h);
}

static mfm_status make_holdout(const mfm_model *m, const mfm_csr *train, const mfm_csr *valid_file, holdout *h, mfm_error *err) {
    const mfm_params *p = mfm_model_params(m);
    uint64_t n_valid = 0;
    mfm_status st;
    memset(h, 0, sizeof *h);
    h->n_train = train->n_rows;
    if (valid_file) h->valid = *valid_file;
    if (valid_file || !(p->validation_fraction > 0)) return MFM_OK;
    if (train->n_rows > SIZE_MAX / sizeof(uint64_t) || !(h->order = (uint64_t *)malloc((size_t)(train->n_rows ? train->n_rows : 1) * sizeof(uint64_t)))) {
        if (err) err->status = MFM_ERR_OUT_OF_MEMORY, snprintf(err->message, sizeof err->message, "out of memory for the order of %llu rows", (unsigned long long)train->n_rows);
        return MFM_ERR_OUT_OF_MEMORY;
    }
    if ((st = mfm_validation_split(p, train->n_rows, h->order, &n_valid, err)) != MFM_OK || (st = mfm_dataset_select(train, h->order, n_valid, &h->split, err)) != MFM_OK)
        return free_holdout(h), st;
    h->valid = mfm_dataset_csr(h->split);
    h->valid.weights = NULL;
    h->train_rows = h->order + n_valid;
    h->n_train = train->n_rows - n_valid;
    return MFM_OK;
}

/* The model's early-stopping metric on rows (unweighted, as early stopping computes it);
   *higher_is_better says which way improves. */
static mfm_status metric_on(const mfm_model *m, const mfm_csr *rows, double *out, int *higher_is_better, mfm_error *err) {
    mfm_metrics met;
    mfm_status st = mfm_evaluate(m, rows, &met, err);
    *out = mfm_metrics_value(&met, mfm_model_params(m)->metric, higher_is_better);
    return st;
}

static double clip_probability(double p) { return p < 1e-15 ? 1e-15 : p > 1 - 1e-15 ? 1 - 1e-15 : p; }

/* The early-stopping metric on the validation rows of the best constant fitted to the training
   rows' labels (row weights counted): the positive rate (binary), the mean (regression), the
   class frequencies (multiclass); any constant has AUC 0.5. Computed from the labels alone;
   `what` says which constant. NaN without validation rows or memory. */
static double constant_metric(const mfm_model *m, const mfm_csr *train, const holdout *h, char *what, size_t size) {
    const mfm_params *p = mfm_model_params(m);
    const mfm_csr *v = &h->valid;
    mfm_model_info info;
    double total = 0, sum = 0, loss = 0, *mass = NULL, mean;
    uint64_t i;
    uint32_t n_classes;
    mfm_model_get_info(m, &info);
    n_classes = p->task == MFM_TASK_MULTICLASS ? info.n_classes : 2;
    if (!v->n_rows || !v->labels || !train->labels) return NAN;
    if (p->task != MFM_TASK_REGRESSION && !(mass = (double *)calloc(n_classes, sizeof(double)))) return NAN;
    for (i = 0; i < h->n_train; i++) {
        uint64_t r = h->train_rows ? h->train_rows[i] : i;
        double w = train->weights ? train->weights[r] : 1, y = train->labels[r];
        total += w;
        sum += w * y;
        if (mass && y >= 0 && y < n_classes) mass[(uint32_t)y] += w;
    }
    mean = total > 0 ? sum / total : 0;
    for (i = 0; i < v->n_rows; i++) {
        double y = v->labels[i], e = y - mean;
        if (p->task == MFM_TASK_REGRESSION) loss += e * e;
        else if (p->task == MFM_TASK_MULTICLASS) loss -= log(clip_probability(y >= 0 && y < n_classes && total > 0 ? mass[(uint32_t)y] / total : 0));
        else loss -= y > 0.5 ? log(clip_probability(mean)) : log(1 - clip_probability(mean));
    }
    free(mass);
    loss /= (double)v->n_rows;
    if (p->task == MFM_TASK_REGRESSION) snprintf(what, size, "the training mean %.6g for every row", mean);
    else if (p->task == MFM_TASK_MULTICLASS) snprintf(what, size, "the training class frequencies for every row");
    else snprintf(what, size, "the training positive rate %.6g for every row", mean);
    switch (p->metric) {
    case MFM_METRIC_AUC: snprintf(what, size, "any constant"); return 0.5;
    case MFM_METRIC_RMSE: return sqrt(loss);
    case MFM_METRIC_HALF_MSE: return 0.5 * loss;
    default: return loss; /* logloss, cross-entropy */
    }
}

/* A real param as a person reads it: MFM_ZERO (-0) is 0. */
static double shown(double x) { return x == 0 ? 0.0 : x; }

/* The end of training: a model whose validation metric is worse than the constant predictor's
   learned nothing useful, and usually diverged or overfit; a warning says so and what to try
   (the exit status stays). Nothing is said without validation rows, or when a number cannot
   be had. */
static void warn_if_worse_than_constant(const mfm_model *m, const mfm_csr *train, const holdout *h, int early_stopping) {
    const mfm_params *p = mfm_model_params(m);
    char what[128], tips[512];
    double model_value, constant_value = constant_metric(m, train, h, what, sizeof what);
    int higher_is_better;
    size_t used = 0;
    if (h->valid.n_rows && metric_on(m, &h->valid, &model_value, &higher_is_better, NULL) == MFM_OK && model_value == model_value &&
        constant_value == constant_value && (higher_is_better ? model_value < constant_value : model_value > constant_value)) {
        used += (size_t)snprintf(tips + used, sizeof tips - used, "a smaller learning rate (-r, now %g)", shown(p->learning_rate));
        if (!early_stopping) used += (size_t)snprintf(tips + used, sizeof tips - used, ", fewer epochs (-t) or early stopping (-p FILE without --no-auto-stop; --auto-stop with --libffm)");
        if ((p->optimizer == MFM_OPTIMIZER_ADAGRAD || p->optimizer == MFM_OPTIMIZER_ROWWISE_ADAGRAD) && p->adagrad_init == 0)
            used += (size_t)snprintf(tips + used, sizeof tips - used, ", --adagrad-init 1 (now 0: the first steps are as large as the learning rate)");
        if (used < sizeof tips) snprintf(tips + used, sizeof tips - used, ", or a larger L2 (--l2, now %g)", shown(p->l2_factors));
        say("warning: the model's validation %s %.6f is worse than the constant predictor's %.6f (%s); try %s",
            name_of(&metric_set, p->metric), model_value, constant_value, what, tips);
    }
}

static int cmd_train(const settings *s, job *j) {
    trainer t;
    mfm_error e;
    int rc;
    memset(&t, 0, sizeof t);
    t.s = s;
    t.job = j;
    t.task = s->task ? (mfm_task)s->task : MFM_TASK_BINARY;
    if ((rc = check_train_settings(s)) != 0) return rc;
    /* MODEL: as the help says, also with --resume (which then leaves its file as it was) */
    j->model_path = s->n_args > 1 ? join(s->args[1], "") : default_model_path(s->args[0]);
    if ((rc = check_output(j->model_path, "MODEL", s->args[0], "TRAIN")) != 0 || (rc = check_output(j->model_path, "MODEL", s->validation, "-p")) != 0)
        return rc;
    if (s->cache && !is_std_stream(s->args[0])) {
        char *cache = join(s->args[0], ".mfmd");
        rc = check_output(j->model_path, "MODEL", cache, "the --cache file");
        free(cache);
        if (rc != 0) return rc;
    }
    /* the temporary file now: a MODEL that cannot be written fails before the epochs run */
    if (mfm_output_open(j->model_path, &j->out, &e) != MFM_OK) return fail("%s", e.message);
    if ((rc = fit_model(s, j, &t)) != 0) return rc;
    if (t.best_epoch) printf("early stopping: using the model of epoch %d\n", t.best_epoch);
    if (mfm_model_write(j->model, j->out, !s->no_state, &e) != MFM_OK) return fail("%s", e.message);
    rc = mfm_output_commit(j->out, &e);
    j->out = NULL; /* freed either way */
    if (rc != MFM_OK) return fail("%s", e.message);
    printf("trained %s in %.2f s (%.0f rows/s)\n", j->model_path, t.seconds, per_second((double)t.rows, t.seconds));
    {
        const mfm_csr train = mfm_dataset_csr(j->data);
        const int early_stopping = j->valid ? stops_on_validation(s) : mfm_model_params(j->model)->validation_fraction > 0;
        holdout h;
        if (make_holdout(j->model, &train, j->valid ? &t.valid : NULL, &h, NULL) == MFM_OK) warn_if_worse_than_constant(j->model, &train, &h, early_stopping);
        free_holdout(&h);
    }
    return 0;
}

/* ============================================================================================
   mfm tune
   ============================================================================================ */

/* A grid: the values, and each as the user typed it (so that the train line repeats it). */
typedef struct grid {
    int n;
    double value[64];
    char text[64][40];
} grid;

/* "0.02,0.05,0.1": numbers above zero (learning rates) or at least zero (L2), no blanks. */
static int parse_grid(const char *option, const char *text, int positive, grid *g) {
    const char *c = text, *example = positive ? "0.02,0.05,0.1" : "0,2e-5,1e-4";
    g->n = 0;
    for (;;) {
        size_t len = strcspn(c, ",");
        char item[40], *end;
        double x;
        if (len == 0 || len >= sizeof item) return usage_error("%s expects numbers separated by commas, like %s, got '%s'", option, example, text);
        memcpy(item, c, len);
        item[len] = '\0';
        errno = 0;
        x = strtod(item, &end);
        if (!(isdigit((unsigned char)item[0]) || item[0] == '.') || *end != '\0' || errno != 0 || !(positive ? x > 0 : x >= 0))
            return usage_error("%s expects numbers %s separated by commas, like %s, but '%s' in '%s' is not one", option, positive ? "above 0" : "of 0 or more",
                               example, item, text);
        if (g->n == (int)(sizeof g->value / sizeof g->value[0])) return usage_error("%s gives more than %d values", option, g->n);
        g->value[g->n] = x;
        memcpy(g->text[g->n++], item, len + 1);
        if (c[len] == '\0') return 0;
        c += len + 1;
    }
}

/* An argument as the shell reads it back: quoted unless it is plain. */
static void print_shell_word(const char *w) {
    const char *c;
    int plain = *w != '\0';
    for (c = w; *c; c++)
        if (!isalnum((unsigned char)*c) && !strchr("_./=,:+-", *c)) plain = 0;
    if (plain) {
        printf(" %s", w);
        return;
    }
    printf(" '");
    for (c = w; *c; c++)
        if (*c == '\'') printf("'\\''");
        else putchar(*c);
    putchar('\'');
}

/* The mfm train command that trains the chosen run again: tune's own arguments less the grids
   (and --auto-stop, given again), with the chosen -r and -l, early stopping on the same rows. */
static void print_train_command(const settings *s, const char *lr, const char *l2) {
    int i, only_args = 0, n_args = 0;
    const char *args[3];
    printf("to train it again: mfm train");
    for (i = 0; i < s->argc; i++) {
        const char *a = s->argv[i], *eq;
        const option *o;
        if (only_args || a[0] != '-' || a[1] == '\0') {
            if (n_args < 3) args[n_args++] = a;
            continue;
        }
        if (strcmp(a, "--") == 0) {
            only_args = 1;
            continue;
        }
        eq = a[1] == '-' ? strchr(a, '=') : NULL;
        if (!(o = find_option(CMD_TUNE, a, eq ? (size_t)(eq - a) : strlen(a)))) continue; /* parse_args took every one */
        if (strcmp(o->long_name, "--lr-grid") && strcmp(o->long_name, "--l2-grid") && strcmp(o->long_name, "--auto-stop")) {
            print_shell_word(a);
            if (o->kind != OPT_FLAG && !eq && i + 1 < s->argc) print_shell_word(s->argv[i + 1]);
        }
        if (o->kind != OPT_FLAG && !eq) i++;
    }
    printf(" -r %s -l %s %s", lr, l2, s->validation ? "--auto-stop" : was_given(s, "--validation-fraction") ? "" : "--validation-fraction 0.1");
    if (only_args) printf(" --");
    for (i = 0; i < n_args; i++) print_shell_word(args[i]);
    putchar('\n');
}

/* One model per (learning rate, L2), each with early stopping on the same validation rows; the
   best validation metric wins (the first of equals). */
static int cmd_tune(const settings *s, job *j) {
    settings quiet = *s;
    grid lr, l2;
    trainer t;
    holdout h;
    mfm_csr csr;
    mfm_error e;
    double fraction = 0, best_value = 0, lr_at;
    int rc, a, b, best_a = -1, best_b = -1, best_epoch = 0, n_runs = 0, need_fields, higher_is_better = 0;
    char lr_default[64];
    mfm_params chosen = s->p;
    memset(&h, 0, sizeof h);
    quiet.quiet = 1; /* a line per run, not per epoch */
    chosen.learning_rate = 0; /* tune searches around the model's default, whatever -r says */
    choose_model(s, MFM_TASK_DEFAULT, &chosen);
    lr_at = mfm_params_resolve(&chosen).learning_rate;
    snprintf(lr_default, sizeof lr_default, "%g,%g,%g", 0.4 * lr_at, lr_at, 2 * lr_at);
    early_stopping_epochs(s, &quiet.p);
    if ((rc = parse_grid("--lr-grid", s->lr_grid ? s->lr_grid : lr_default, 1, &lr)) != 0) return rc;
    if ((rc = parse_grid("--l2-grid", s->l2_grid ? s->l2_grid : "0,2e-5,1e-4", 0, &l2)) != 0) return rc;
    if ((rc = check_train_settings(s)) != 0) return rc;
    if (!s->validation && was_given(s, "--validation-fraction") && !(s->p.validation_fraction > 0))
        return usage_error("tune needs validation rows: give -p FILE, or --validation-fraction above 0");
    if (s->n_args > 1) { /* MODEL: its temporary file now, so that a MODEL that cannot be written fails before the runs */
        j->model_path = join(s->args[1], "");
        if ((rc = check_output(j->model_path, "MODEL", s->args[0], "TRAIN")) != 0 || (rc = check_output(j->model_path, "MODEL", s->validation, "-p")) != 0)
            return rc;
        if (mfm_output_open(j->model_path, &j->out, &e) != MFM_OK) return fail("%s", e.message);
    }
    memset(&t, 0, sizeof t);
    t.s = &quiet;
    t.job = j;
    t.task = s->task ? (mfm_task)s->task : MFM_TASK_BINARY;
    need_fields = s->model == MFM_MODEL_FFM || s->model == MFM_MODEL_FWFM || s->libffm;
    if ((rc = read_training_data(s, j, t.task, need_fields)) != 0) return rc;
    csr = mfm_dataset_csr(j->data);
    if (!j->valid) {
        fraction = was_given(s, "--validation-fraction") ? s->p.validation_fraction : DEFAULT_HOLDOUT;
        if (!was_given(s, "--validation-fraction") && csr.n_rows < HOLDOUT_MIN_ROWS)
            return fail("tune needs validation rows, but %s has %llu rows, too few to hold out 10%% of: give -p FILE", s->args[0], (unsigned long long)csr.n_rows);
        printf("validating on a seeded %g%% of %s (%llu of %llu rows)", 100 * fraction, s->args[0], (unsigned long long)held_out(fraction, csr.n_rows),
               (unsigned long long)csr.n_rows);
    } else {
        t.valid = mfm_dataset_csr(j->valid);
        printf("validating on %s (%llu rows)", s->validation, (unsigned long long)t.valid.n_rows);
    }
    printf(", early stopping with patience %d; %d runs\n", s->p.patience, lr.n * l2.n);
    for (a = 0; a < lr.n; a++)
        for (b = 0; b < l2.n; b++) {
            mfm_params p = quiet.p; /* with its epochs */
            mfm_status st;
            double value;
            p.learning_rate = lr.value[a];
            p.l2_linear = p.l2_factors = l2.value[b] == 0 ? MFM_ZERO : l2.value[b];
            if (!j->valid) p.validation_fraction = fraction;
            free(j->floats); /* explicit class weights, made again for each model */
            j->floats = NULL;
            mfm_model_free(j->model);
            j->model = NULL;
            t.best_epoch = 0;
            if ((rc = make_model(&quiet, j, &t, &p)) != 0) goto done;
            t.metric = mfm_model_params(j->model)->metric;
            if (n_runs == 0) {
                if (!h.valid.n_rows && make_holdout(j->model, &csr, j->valid ? &t.valid : NULL, &h, &e) != MFM_OK) {
                    rc = fail("%s", e.message);
                    goto done;
                }
                printf("%10s %10s %10s %14s\n", "lr", "l2", "best_epoch", name_of(&metric_set, t.metric));
            }
            n_runs++;
            st = j->valid ? mfm_fit_validated(j->model, &csr, &t.valid, &e) : mfm_fit(j->model, &csr, &e);
            if (t.failed) {
                rc = t.failed;
                goto done;
            }
            if (st == MFM_ERR_DIVERGED) { /* too large a learning rate: the others may still train */
                printf("%10s %10s %10s %14s\n", lr.text[a], l2.text[b], "-", "diverged");
                continue;
            }
            if (st != MFM_OK || metric_on(j->model, &h.valid, &value, &higher_is_better, &e) != MFM_OK) {
                rc = fail("%s: %s", s->args[0], e.message);
                goto done;
            }
            printf("%10s %10s %10d %14.6f\n", lr.text[a], l2.text[b], t.best_epoch, value);
            fflush(stdout);
            if (value == value && (best_a < 0 || (higher_is_better ? value > best_value : value < best_value))) {
                best_a = a, best_b = b, best_value = value, best_epoch = t.best_epoch;
                mfm_model_free(j->best);
                j->best = j->model;
                j->model = NULL;
            }
        }
    if (best_a < 0) {
        rc = fail("no run of tune gave a validation %s that is a number (diverged or NaN): try smaller learning rates (--lr-grid)", name_of(&metric_set, t.metric));
        goto done;
    }
    printf("best: -r %s -l %s, validation %s %.6f at epoch %d\n", lr.text[best_a], l2.text[best_b], name_of(&metric_set, t.metric), best_value, best_epoch);
    print_train_command(s, lr.text[best_a], l2.text[best_b]);
    if (j->out) {
        if (mfm_model_write(j->best, j->out, !s->no_state, &e) != MFM_OK) {
            rc = fail("%s", e.message);
            goto done;
        }
        rc = mfm_output_commit(j->out, &e);
        j->out = NULL; /* freed either way */
        if (rc != MFM_OK) {
            rc = fail("%s", e.message);
            goto done;
        }
        printf("saved the best run's model to %s\n", j->model_path);
    }
    warn_if_worse_than_constant(j->best, &csr, &h, 1);
done:
    free_holdout(&h);
    return rc;
}

/* ============================================================================================
   mfm predict and mfm eval
   ============================================================================================ */

/* The device made ready, then (once upload_give has named it) the model uploaded. */
static void *upload_main(void *arg) {
    gpu_upload *u = (gpu_upload *)arg;
    const mfm_model *model;
    const int use = !u->automatic || mfm_cuda_available();
    if (use) u->st = mfm_cuda_prepare(u->device, &u->e);
#if !defined(_WIN32)
    if (u->running) { /* on a thread of its own: the model comes later (called by upload_give, it is there) */
        pthread_mutex_lock(&u->lock);
        while (!u->given) pthread_cond_wait(&u->model_given, &u->lock);
        pthread_mutex_unlock(&u->lock);
    }
#endif
    model = u->model;
    if (use && u->st == MFM_OK && model) u->st = mfm_gpu_model_upload(model, u->device, &u->gm, &u->e);
    return NULL;
}

static void upload_start(gpu_upload *u, int device, int automatic) {
    u->device = device, u->automatic = automatic, u->started = 1;
#if !defined(_WIN32)
    if (pthread_mutex_init(&u->lock, NULL) != 0) return;
    if (pthread_cond_init(&u->model_given, NULL) != 0) {
        pthread_mutex_destroy(&u->lock);
        return;
    }
    u->running = 1;
    if (pthread_create(&u->thread, NULL, upload_main, u) != 0) {
        u->running = 0;
        pthread_cond_destroy(&u->model_given);
        pthread_mutex_destroy(&u->lock);
    }
#endif
}

/* The model to upload (NULL: none, the command failed first). Without the thread, the work
   happens here. */
static void upload_give(gpu_upload *u, const mfm_model *m) {
    if (!u->started || u->given) return;
#if !defined(_WIN32)
    if (u->running) {
        pthread_mutex_lock(&u->lock);
        u->model = m, u->given = 1;
        pthread_cond_signal(&u->model_given);
        pthread_mutex_unlock(&u->lock);
        return;
    }
#endif
    u->model = m, u->given = 1;
    if (m) upload_main(u);
}

/* The upload's outcome, once it has ended. */
static mfm_status upload_wait(gpu_upload *u) {
    upload_give(u, NULL); /* a command that ended before its model was open */
#if !defined(_WIN32)
    if (u->running) {
        pthread_join(u->thread, NULL);
        pthread_cond_destroy(&u->model_given);
        pthread_mutex_destroy(&u->lock);
    }
#endif
    u->running = 0;
    return u->st;
}

static int write_rows(FILE *f, const float *v, uint64_t n_rows, size_t width) {
    uint64_t r;
    size_t c;
    for (r = 0; r < n_rows; r++)
        for (c = 0; c < width; c++) fprintf(f, c + 1 < width ? "%.9g " : "%.9g\n", (double)v[r * width + c]); /* %.9g reads back exactly */
    return !ferror(f);
}

/* Through the library's writer (opened before the work): OUT appears whole, or not at all. */
static int write_predictions(job *j, const float *v, uint64_t n_rows, size_t width) {
    mfm_error e;
    mfm_status st;
    write_rows(mfm_output_stream(j->out), v, n_rows, width); /* an error shows at commit */
    st = mfm_output_commit(j->out, &e);
    j->out = NULL;
    return st == MFM_OK ? 0 : fail("%s", e.message);
}

/* With labels (metrics not NULL), the metrics come from the same scores. */
static int predict_to_file(const settings *s, job *j, const mfm_csr *csr, mfm_metrics *metrics, double *seconds) {
    size_t width = mfm_output_width(j->model, (mfm_output)s->output);
    mfm_error e;
    mfm_status st;
    double t0 = now_seconds();
    if (csr->n_rows > SIZE_MAX / sizeof(float) / width) return fail("%s has too many rows to predict in memory", s->args[1]);
    j->floats = (float *)xmalloc((size_t)csr->n_rows * width * sizeof(float));
    if (j->up.started && upload_wait(&j->up) != MFM_OK) return fail("%s", j->up.e.message);
    if (j->up.gm)
        st = metrics ? mfm_gpu_predict_evaluate(j->up.gm, csr, (mfm_output)s->output, j->floats, (size_t)csr->n_rows * width, metrics, &e)
                     : mfm_gpu_predict(j->up.gm, csr, (mfm_output)s->output, j->floats, (size_t)csr->n_rows * width, &e);
    else
        st = metrics ? mfm_predict_evaluate(j->model, csr, (mfm_output)s->output, j->floats, (size_t)csr->n_rows * width, metrics, &e)
                     : mfm_predict(j->model, csr, (mfm_output)s->output, j->floats, (size_t)csr->n_rows * width, &e);
    if (st != MFM_OK) return fail("%s: %s", s->args[1], e.message);
    *seconds = now_seconds() - t0;
    return write_predictions(j, j->floats, csr->n_rows, width);
}

/* predict writes OUT and, for data with labels, the metrics to stderr; eval only the metrics. */
static int predict_or_eval(const settings *s, job *j) {
    const char *model_path = s->args[0], *data_path = s->args[1];
    const int predicting = s->command_bit == CMD_PREDICT;
    FILE *report = predicting ? stderr : stdout;
    const char *names[3];
    double values[3], t0, seconds = 0;
    mfm_model_info info;
    mfm_dataset_info data_info;
    mfm_metrics m;
    mfm_csr csr;
    mfm_error e;
    int rc, i, n;
    if (predicting) {
        if ((rc = check_output(s->args[2], "OUT", model_path, "MODEL")) != 0 || (rc = check_output(s->args[2], "OUT", data_path, "DATA")) != 0) return rc;
        if (mfm_output_open(s->args[2], &j->out, &e) != MFM_OK) return fail("%s", e.message);
    }
    if (s->backend == MFM_BACKEND_CUDA || s->backend == MFM_BACKEND_AUTO) upload_start(&j->up, s->p.device, s->backend == MFM_BACKEND_AUTO);
    if (mfm_model_map(model_path, &j->model, &e) != MFM_OK) return fail("%s", e.message); /* the parameters only, in place */
    mfm_model_get_info(j->model, &info);
    if (mfm_model_set_threads(j->model, s->p.n_threads, &e) != MFM_OK) return fail("%s", e.message); /* 0: every core */
    if (s->backend) {
        mfm_params p = *mfm_model_params(j->model);
        p.backend = (mfm_backend)s->backend;
        p.device = s->p.device;
        if (mfm_model_set_params(j->model, &p, &e) != MFM_OK) return fail("%s", e.message);
    }
    if (s->output == MFM_OUTPUT_PROBABILITY && info.task == MFM_TASK_REGRESSION)
        return usage_error("--output prob needs a classification model, but %s is a regression model", model_path);
    upload_give(&j->up, predicting ? j->model : NULL); /* predict: uploaded while the rows are read; eval: mfm_evaluate's */
    if ((rc = read_data(data_path, info.task, s->format, &j->data)) != 0) return rc;
    if ((rc = check_data(data_path, j->data, !predicting, info.model != MFM_MODEL_FM, "the model")) != 0) return rc;
    csr = mfm_dataset_csr(j->data);
    mfm_dataset_get_info(j->data, &data_info);
    if (predicting && (rc = predict_to_file(s, j, &csr, data_info.has_labels ? &m : NULL, &seconds)) != 0) return rc;
    if (!data_info.has_labels) return 0;
    if (!predicting) upload_wait(&j->up); /* the device ready; a failure shows again, in mfm_evaluate's words */
    t0 = now_seconds();
    if (!predicting && mfm_evaluate(j->model, &csr, &m, &e) != MFM_OK) return fail("%s: %s", data_path, e.message);
    if (!predicting) seconds = now_seconds() - t0;
    for (i = 0, n = task_metrics(info.task, 0, &m, names, values); i < n; i++) fprintf(report, "%s %.6f  ", names[i], values[i]);
    fprintf(report, "rows %llu  seconds %.3f  rows/s %.0f\n", (unsigned long long)m.n_rows, seconds, per_second((double)m.n_rows, seconds));
    return 0;
}

/* ============================================================================================
   mfm convert
   ============================================================================================ */

/* --to auto: by OUT's extension, binary unless it says text; text for standard output. */
static mfm_format output_format(const char *path, int to, const mfm_dataset_info *in) {
    if (to != MFM_FORMAT_AUTO) return (mfm_format)to;
    if (is_std_stream(path)) return in->has_fields ? MFM_FORMAT_LIBFFM : MFM_FORMAT_LIBSVM;
    if (ends_with(path, ".svm") || ends_with(path, ".libsvm")) return MFM_FORMAT_LIBSVM;
    if (ends_with(path, ".ffm") || ends_with(path, ".libffm")) return MFM_FORMAT_LIBFFM;
    return MFM_FORMAT_BINARY;
}

static int cmd_convert(const settings *s, job *j) {
    const char *in = s->args[0], *out = s->args[1];
    mfm_dataset_info info;
    mfm_format to;
    mfm_csr csr;
    mfm_error e;
    double t0 = now_seconds();
    int rc = check_output(out, "OUT", in, "IN");
    if (rc != 0 || (rc = read_data(in, s->task, s->format, &j->data)) != 0) return rc;
    mfm_dataset_get_info(j->data, &info);
    to = output_format(out, s->to, &info);
    if ((rc = check_data(in, j->data, 0, to == MFM_FORMAT_LIBFFM, "libffm output")) != 0) return rc;
    csr = mfm_dataset_csr(j->data);
    /* a binary file records where it came from and the task its labels were read for */
    if ((to == MFM_FORMAT_BINARY ? mfm_dataset_write_cache(j->data, out, is_std_stream(in) ? NULL : in, &e) : mfm_dataset_write(&csr, out, to, &e)) != MFM_OK)
        return fail("%s", e.message);
    fprintf(is_std_stream(out) ? stderr : stdout, "converted %s (%llu rows, %llu non-zeros) to %s (%s) in %.2f s\n", in,
            (unsigned long long)info.n_rows, (unsigned long long)info.nnz, out, name_of(&format_set, to), now_seconds() - t0);
    return 0;
}

/* ============================================================================================
   mfm export
   ============================================================================================ */

static int cmd_export(const settings *s, job *j) {
    const char *in = s->args[0], *out = s->args[1];
    mfm_model_info info;
    mfm_error e;
    int rc = check_output(out, "OUT", in, "MODEL"), with_state;
    if (rc != 0) return rc;
    /* for the parameters alone, the state is never read */
    if ((s->no_state || s->half ? mfm_model_map(in, &j->model, &e) : mfm_model_load(in, &j->model, &e)) != MFM_OK) return fail("%s", e.message);
    mfm_model_get_info(j->model, &info);
    with_state = !s->no_state && !s->half && info.has_state && info.n_state_slots > 0;
    if ((s->half ? mfm_model_save_half(j->model, out, &e) : mfm_model_save(j->model, out, with_state, &e)) != MFM_OK) return fail("%s", e.message);
    fprintf(is_std_stream(out) ? stderr : stdout, "exported %s to %s (model file format %d, %s)\n", in, out, MFM_MODEL_FILE_VERSION,
           s->half ? "the parameters alone, the factors as float16" : with_state ? "with the optimizer state" : "the parameters alone");
    return 0;
}

/* ============================================================================================
   mfm info
   ============================================================================================ */

MFM_CLI_PRINTF(2, 3) static void show(const char *label, const char *fmt, ...) {
    va_list ap;
    printf("%-18s ", label);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
}

static void show_model_file(const char *path, const mfm_model_file_info *f) {
    const mfm_model_info *m = &f->model;
    const mfm_params *p = &f->params;
    unsigned v = f->writer_version;
    show("model file", "%s (%llu bytes, format version %u)", path, (unsigned long long)f->file_bytes, (unsigned)f->format_version);
    show("written by", "modern_fm %u.%u.%u", v / 10000, v / 100 % 100, v % 100);
    show("model", "%s", model_name(p));
    show("task", "%s", name_of(&task_set, m->task));
    show("optimizer", "%s", name_of(&optimizer_set, m->optimizer));
    if (!p->linear_only) show("k", "%d", m->k);
    show("features", "%u", (unsigned)m->n_features);
    if (m->model != MFM_MODEL_FM) show("fields", "%u", (unsigned)m->n_fields);
    if (m->task == MFM_TASK_MULTICLASS) show("classes", "%u", (unsigned)m->n_classes);
    show("epochs trained", "%llu", (unsigned long long)m->epochs_trained);
    show("parameters", "%llu", (unsigned long long)m->n_parameters);
    show("memory", "%.1f MB (parameters, optimizer state, padding)", (double)m->memory_bytes / 1e6);
    show("optimizer state", "%s", f->has_state ? "stored (training resumes exactly)" : "not stored");
    if (f->half) show("factors", "float16 (mfm export --half): for prediction");
    /* the params as a person reads them: a literal zero (MFM_ZERO, -0) is 0 */
    show("learning rate", "%g", shown(p->learning_rate));
    show("l2 linear/factors", "%g / %g", shown(p->l2_linear), shown(p->l2_factors));
    if (p->optimizer == MFM_OPTIMIZER_FTRL) show("l1 linear/factors", "%g / %g", shown(p->l1_linear), shown(p->l1_factors));
    if (p->optimizer == MFM_OPTIMIZER_FTRL) show("ftrl beta", "%g", shown(p->ftrl_beta));
    if (p->optimizer == MFM_OPTIMIZER_ADAM) show("adam beta1/2, eps", "%g / %g / %g", shown(p->adam_beta1), shown(p->adam_beta2), shown(p->adam_epsilon));
    if (p->optimizer == MFM_OPTIMIZER_ADAGRAD || p->optimizer == MFM_OPTIMIZER_ROWWISE_ADAGRAD) show("adagrad init", "%g", shown(p->adagrad_init));
    show("rows normalized", "%s", p->normalize_rows > 0 ? "yes (sum x^2 = 1)" : "no");
    show("bias and linear", "%s", p->pairs_only ? "none (pairs only)" : "yes");
    show("early stopping", "%s, patience %d, min delta %g, %s", name_of(&metric_set, p->metric), p->patience, shown(p->min_delta),
         p->keep_last ? "keeps the last epoch" : "restores the best epoch");
    if (p->validation_fraction) show("validation split", "%g of the training rows", p->validation_fraction);
    show("init scale", "%g", shown(p->init_scale));
    show("batch size", "%d", p->batch_size);
    if (p->n_threads)
        show("threads", "%d", p->n_threads);
    else
        show("threads", "every core");
    show("seed", "%llu", (unsigned long long)p->seed);
    if (p->task != MFM_TASK_REGRESSION) show("label smoothing", "%g", shown(p->label_smoothing));
    if (p->task != MFM_TASK_REGRESSION) show("class weight", "%s", name_of(&class_weight_set, p->class_weight));
}

static void show_dataset(const char *path, const mfm_dataset *d) {
    mfm_dataset_info i;
    mfm_csr csr = mfm_dataset_csr(d);
    double lo = HUGE_VAL, hi = -HUGE_VAL, sum = 0;
    char when[64] = "?";
    time_t t;
    uint64_t r;
    mfm_dataset_get_info(d, &i);
    show("data file", "%s (%s)", path, name_of(&format_set, i.format));
    show("rows", "%llu", (unsigned long long)i.n_rows);
    show("non-zeros", "%llu", (unsigned long long)i.nnz);
    show("features", "%u (largest id + 1)", (unsigned)i.n_features);
    show("fields", "%u (largest id + 1)", (unsigned)i.n_fields);
    show("has", "labels %s, weights %s, fields %s, values %s", i.has_labels ? "yes" : "no", i.has_weights ? "yes" : "no",
         i.has_fields ? "yes" : "no", i.has_values ? "yes" : "no (every value is 1)");
    for (r = 0; i.has_labels && r < csr.n_rows; r++) {
        lo = csr.labels[r] < lo ? csr.labels[r] : lo;
        hi = csr.labels[r] > hi ? csr.labels[r] : hi;
        sum += csr.labels[r];
    }
    if (i.has_labels && i.n_rows) show("labels", "%g .. %g, mean %g", lo, hi, sum / (double)i.n_rows);
    if (!i.source_bytes && !i.source_mtime) return;
    t = (time_t)i.source_mtime;
    if (gmtime(&t)) strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", gmtime(&t));
    show("cache of", "a file of %llu bytes modified %s", (unsigned long long)i.source_bytes, when);
    if (i.source_digest) show("source digest", "%016llx (--cache reuses the file while its text has this digest)", (unsigned long long)i.source_digest);
}

/* Whether the file starts with an 8-byte magic ("MFMMODEL", "MFM-DATA"). */
static int starts_with(const char *path, const char *magic) {
    char head[8] = {0};
    FILE *f = is_std_stream(path) ? NULL : fopen(path, "rb");
    size_t n = f ? fread(head, 1, sizeof head, f) : 0;
    if (f) fclose(f);
    return n == sizeof head && memcmp(head, magic, sizeof head) == 0;
}

/* info -: standard input read whole, so that its first bytes can say how to read it (a pipe
   cannot be opened twice): a binary dataset with the task it records, text as regression. */
static int info_stdin(job *j) {
    size_t cap = 1 << 20, n = 0, got;
    unsigned char *b = (unsigned char *)xmalloc(cap), *bigger;
    mfm_read_options ro;
    mfm_error e;
    mfm_status st;
    while ((got = fread(b + n, 1, cap - n, stdin)) > 0)
        if ((n += got) == cap) {
            if (!(bigger = (unsigned char *)realloc(b, cap * 2))) return free(b), fail("out of memory reading standard input (%llu bytes)", (unsigned long long)n);
            b = bigger, cap *= 2;
        }
    if (ferror(stdin)) return free(b), fail("could not read standard input: %s", strerror(errno));
    if (n >= 8 && memcmp(b, "MFMMODEL", 8) == 0) return free(b), fail("standard input holds a model file: give its path to mfm info");
    memset(&ro, 0, sizeof ro);
    ro.task = n >= 8 && memcmp(b, "MFM-DATA", 8) == 0 ? MFM_TASK_DEFAULT : MFM_TASK_REGRESSION;
    st = mfm_dataset_parse(b, n, "<stdin>", &ro, &j->data, &e);
    free(b);
    if (st != MFM_OK) return fail("%s", e.message);
    show_dataset("-", j->data);
    return 0;
}

static int cmd_info(const settings *s, job *j) {
    const char *path = s->args[0];
    const int binary = starts_with(path, "MFM-DATA");
    mfm_model_file_info mi;
    mfm_error model_err, data_err;
    if (is_std_stream(path)) return info_stdin(j);
    if (mfm_model_file_inspect(path, &mi, &model_err) == MFM_OK) {
        show_model_file(path, &mi);
        return 0;
    }
    /* a binary file reads with the task it records; text as regression, which takes any label */
    if (read_dataset(path, binary ? MFM_TASK_DEFAULT : MFM_TASK_REGRESSION, MFM_FORMAT_AUTO, &j->data, &data_err) != MFM_OK)
        return fail("%s", starts_with(path, "MFMMODEL") ? model_err.message : data_err.message);
    show_dataset(path, j->data);
    return 0;
}

/* ============================================================================================
   mfm cache, mfm gpu
   ============================================================================================ */

static int cmd_cache(const settings *s, job *j) {
    mfm_cache_entry entries[256];
    mfm_kernel_build b;
    mfm_error e;
    char dir[512];
    size_t n = 0, i, removed = 0;
    (void)j;
    if (s->clear) {
        if (mfm_cache_clear(&removed, &e) != MFM_OK) return fail("%s", e.message);
        printf("removed %zu cache files\n", removed);
    }
    if (s->build) {
        if (mfm_cuda_build_kernels(s->build, &b, &e) != MFM_OK) return fail("%s", e.message);
        printf("%s for %s_%d: %s (%llu bytes, %.3f s)%s%s\n", b.kind, strcmp(b.kind, "ptx") ? "sm" : "compute", b.arch,
               b.from_cache ? "already in the cache" : b.stored ? "compiled and stored" : "compiled, NOT stored", (unsigned long long)b.image_bytes,
               b.seconds, b.path[0] ? "\n  " : "", b.path);
        if (!b.from_cache && !b.stored) return fail("the kernels were compiled but not stored: %s", b.not_stored);
    }
    if (mfm_cache_list(dir, sizeof dir, entries, 256, &n, &e) != MFM_OK) return fail("%s", e.message);
    printf("kernel cache: %s\n", dir[0] ? dir : "off (MFM_CACHE=off, or no directory: set MFM_CACHE_DIR)");
    for (i = 0; i < n && i < 256; i++)
        printf("  %-70s %9llu bytes  %s\n", entries[i].name, (unsigned long long)entries[i].bytes, entries[i].valid ? "ok" : "INVALID (rebuilt on use)");
    if (n > 256) printf("  ... and %zu more\n", n - 256);
    if (dir[0] && n == 0) printf("  (empty)\n");
    return 0;
}

static int cmd_gpu(const settings *s, job *j) {
    mfm_cuda_info info;
    mfm_error e;
    mfm_status st = mfm_cuda_get_info(s->p.device, &info, &e);
    (void)j;
    if (info.nvrtc_version)
        printf("NVRTC:        %d.%d (%s)\n", info.nvrtc_version / 1000, info.nvrtc_version % 1000 / 10, info.nvrtc_path);
    else
        printf("NVRTC:        not found (not needed while the kernel cache holds the kernels)\n");
    if (info.nccl_version >= 10000) /* NCCL_VERSION_CODE: major 10000 + minor 100 + patch from 2.9 on, major 1000 + minor 100 + patch before */
        printf("NCCL:         %d.%d.%d (%s)\n", info.nccl_version / 10000, info.nccl_version / 100 % 100, info.nccl_version % 100, info.nccl_path);
    else if (info.nccl_version)
        printf("NCCL:         %d.%d.%d (%s)\n", info.nccl_version / 1000, info.nccl_version / 100 % 10, info.nccl_version % 100, info.nccl_path);
    else
        printf("NCCL:         not found (needed only to train on several GPUs)\n");
    printf("kernel cache: %s\n", info.cache_dir[0] ? info.cache_dir : "off");
    if (st != MFM_OK) return fail("%s", e.message);
    printf("driver:       CUDA %d.%d, %d device%s\n", info.driver_version / 1000, info.driver_version % 1000 / 10, info.n_devices, info.n_devices == 1 ? "" : "s");
    printf("device %d:     %s, sm_%d%d, %.1f GB\n", info.device, info.device_name, info.compute_major, info.compute_minor, (double)info.total_memory / 1e9);
    return 0;
}

/* ============================================================================================
   Commands and main
   ============================================================================================ */

typedef struct command {
    const char *name;
    unsigned bit;
    int min_args, max_args;
    const char *synopsis;
    int (*run)(const settings *s, job *j);
    const char *help;
} command;

static const command commands[] = {
    {"train", CMD_TRAIN, 1, 2, "[options] TRAIN [MODEL]", cmd_train,
     "Trains a model on TRAIN (libffm, libsvm or binary data; \"-\" = standard input) and saves it\n"
     "to MODEL, by default TRAIN's file name + \".model\" in the current directory. Without -p FILE, a\n"
     "seeded 10% of TRAIN's rows (when it has 100 or more) is held out for early stopping and the\n"
     "best epoch's model kept; --validation-fraction 0 trains on every row for all epochs."},
    {"tune", CMD_TUNE, 1, 2, "[options] TRAIN [MODEL]", cmd_tune,
     "Trains one model per learning rate x L2 of a small grid (--lr-grid, --l2-grid), each with\n"
     "early stopping on -p FILE or, without it, on a seeded 10% of TRAIN; prints a line per run,\n"
     "the best setting and the mfm train command that trains it again, and saves the best run's\n"
     "model to MODEL when given. Other options (--model, -k, --task, -s, --batch, ...) stay fixed."},
    {"predict", CMD_PREDICT, 3, 3, "[options] MODEL DATA OUT", predict_or_eval,
     "Writes one line per row of DATA to OUT (\"-\" = standard output): the probability (binary),\n"
     "the value (regression) or the class probabilities (multiclass). For DATA with labels the\n"
     "metrics go to stderr."},
    {"eval", CMD_EVAL, 2, 2, "[options] MODEL DATA", predict_or_eval,
     "Prints the model's metrics on DATA: logloss, AUC and accuracy (binary), RMSE (regression),\n"
     "logloss and accuracy (multiclass)."},
    {"convert", CMD_CONVERT, 2, 2, "[options] IN OUT", cmd_convert, "Converts a data file (OUT \"-\" = standard output)."},
    {"export", CMD_EXPORT, 2, 2, "[--predict-only] [--half] MODEL OUT", cmd_export,
     "Writes MODEL again to OUT in the current file format (an older file is upgraded), with its\n"
     "optimizer state unless --predict-only: then the parameters alone, half the size for AdaGrad,\n"
     "the file to serve from. Predictions from OUT are the same bits as from MODEL."},
    {"info", CMD_INFO, 1, 1, "FILE", cmd_info, "Describes a model file or a data file."},
    {"cache", CMD_CACHE, 0, 0, "[--clear] [--build ARCH]", cmd_cache,
     "Shows the GPU kernel cache (MFM_CACHE_DIR, else ~/.cache/modern_fm) and its entries; --clear\n"
     "empties it; --build compiles the kernels for an architecture without a GPU (NVRTC needed)."},
    {"gpu", CMD_GPU, 0, 0, "[--device N]", cmd_gpu, "Describes the CUDA driver, NVRTC, the kernel cache and a device."},
};

static void print_usage(FILE *f) {
    size_t i;
    fprintf(f, "mfm %s - factorization machines (FM, FFM, FwFM) from the command line\n\nusage:\n", mfm_version_string());
    for (i = 0; i < sizeof commands / sizeof commands[0]; i++) fprintf(f, "  mfm %-8s %s\n", commands[i].name, commands[i].synopsis);
    fprintf(f, "  mfm COMMAND --help     the command's options\n  mfm --version\n");
}

static const command *find_command(const char *name) {
    size_t i;
    for (i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(commands[i].name, name) == 0) return &commands[i];
    return NULL;
}

/* Options anywhere among the arguments; "--" ends them; "-" alone is an argument. */
static int parse_args(settings *s, int argc, char **argv) {
    const char *cmd = s->command;
    int i, only_args = 0, rc;
    for (i = 0; i < argc; i++) {
        const char *a = argv[i], *eq, *value = NULL;
        const option *o;
        char name[64];
        size_t len;
        if (only_args || a[0] != '-' || a[1] == '\0') {
            if (s->n_args < (int)(sizeof s->args / sizeof s->args[0])) s->args[s->n_args] = a;
            s->n_args++;
            continue;
        }
        if (strcmp(a, "--") == 0) {
            only_args = 1;
            continue;
        }
        eq = a[1] == '-' ? strchr(a, '=') : NULL;
        len = eq ? (size_t)(eq - a) : strlen(a);
        snprintf(name, sizeof name, "%.*s", (int)len, a);
        if (!(o = find_option(s->command_bit, a, len)) && s->command_bit == CMD_TUNE && find_option(CMD_TRAIN, a, len))
            return usage_error("tune takes no %s: it searches the learning rate and L2 itself (--lr-grid, --l2-grid) and keeps each run's best epoch", name);
        if (!o) return usage_error("%s has no option %s (see mfm %s --help)", cmd, name, cmd);
        if (o->kind == OPT_FLAG && eq) return usage_error("%s takes no value", name);
        if (o->kind != OPT_FLAG && !(value = eq ? eq + 1 : i + 1 < argc ? argv[++i] : NULL)) return usage_error("%s needs a value", name);
        if ((rc = set_option(s, o, name, value)) != 0) return rc;
        s->given[o - options] = 1;
    }
    return 0;
}

static int run(int argc, char **argv) {
    settings s;
    job j;
    const command *c;
    int rc;
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "help") == 0) {
        print_usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("mfm %s\n", mfm_version_string());
        return 0;
    }
    if (!(c = find_command(argv[1])))
        return usage_error("'%s' is not a command: train, tune, predict, eval, export, convert, info, cache or gpu (see mfm --help)", argv[1]);
    memset(&s, 0, sizeof s);
    s.command = c->name;
    s.command_bit = c->bit;
    s.argc = argc - 2;
    s.argv = argv + 2;
    if ((rc = parse_args(&s, argc - 2, argv + 2)) != 0) return rc;
    /* xLearn's stop window; LIBFFM's --auto-stop stops at the first epoch without improvement.
       On normalized rows FFM's validation loss can pause for an epoch and fall again. */
    if (!s.p.patience) s.p.patience = s.libffm ? 1 : 2;
    if (s.help) {
        printf("usage: mfm %s %s\n\n%s\n\n", c->name, c->synopsis, c->help);
        print_options(c->bit);
        return 0;
    }
    if (s.n_args < c->min_args || s.n_args > c->max_args)
        return usage_error("%s expects %s, got %d argument%s (see mfm %s --help)", c->name, c->synopsis, s.n_args, s.n_args == 1 ? "" : "s", c->name);
    memset(&j, 0, sizeof j);
    rc = c->run(&s, &j);
    upload_wait(&j.up);
    mfm_gpu_model_free(j.up.gm);
    mfm_model_free(j.model);
    mfm_model_free(j.best);
    mfm_dataset_free(j.data);
    mfm_dataset_free(j.valid);
    free(j.floats);
    free(j.model_path);
    mfm_output_abort(j.out); /* a failed command leaves any earlier file as it was */
    return rc;
}

/* Everything is written, closed and freed by then; _Exit skips the exit handlers of the libraries
   loaded on the way (the CUDA driver's took some 30 ms of a 0.4 s GPU prediction on an H100),
   whose resources the system frees with the process anyway. */
int main(int argc, char **argv) {
    int rc;
    handle_signals();
    rc = check_stdout(run(argc, argv));
    fflush(NULL);
    _Exit(rc);
}
