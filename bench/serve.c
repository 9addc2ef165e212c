/* serve.c - serving: how fast a model file opens, how fast `mfm predict` answers from process
   start to output written, and how long one row takes from many threads at once
   (make bench-serve, SERVE_ARGS="...").

   Generates Criteo-shaped rows (bench/synth.h: 39 fields, one id each out of --features), trains
   --model at --k on 1000 of them for 2 epochs (a model is as large as its features make it,
   whatever its rows), and writes to --dir: model.mfm (with the AdaGrad state: the training
   file), serve.mfm (mfm export --predict-only's file: the parameters alone), half.mfm (mfm
   export --half's: the factors as float16), rows100.ffm and rows200k.ffm (held-out rows as
   libffm text). Then, the page cache warm, the best of --repeat:

   - opening: mfm_model_load (for training: everything read and copied), mfm_model_map (for
     prediction: the parameters verified and mapped in place) and mfm_model_load_parameters
     (for prediction: verified and copied) of each file;
   - the command line: `mfm predict --backend cpu FILE ROWS OUT` (--mfm, default build/mfm) of 100
     and 200,000 rows, and `--backend cuda` where a GPU is, both as the GPU's only process and
     beside another that holds it open: wall time from fork to exit (the best and the slowest of
     --repeat) and the process's peak memory;
   - one-row latency: for each count of --threads, that many threads at once, each predicting
     --calls single rows from serve.mfm and half.mfm, each mapped and copied (every call timed,
     its row in the caller's buffer as a server's parser leaves it): p50, p99, p99.9, max, after
     a line saying how much of each mapped file lies in 2 MB pages (Linux; docs/FORMATS.md);
     --turns N measures them N times in turn (a shared host's tails vary from one minute to the
     next, so a comparison is made within turns). */
#define _DEFAULT_SOURCE /* wait4: a child's own peak memory */
#define MODERN_FM_IMPLEMENTATION
#include "../modern_fm.h"

#include "common.h"
#include "synth.h"

#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

enum { TRAIN_ROWS = 1000, FEW_ROWS = 100, MANY_ROWS = 200000, MAX_THREADS = 8 };

typedef struct options {
    uint32_t features;
    int model, k, repeat, calls, turns, n_threads, threads[MAX_THREADS];
    const char *dir, *mfm;
} options;

static void usage(int code) {
    printf("usage: bench-serve [--features N] [--model ffm|fm|fwfm] [--k K] [--dir DIR] [--mfm PATH]\n"
           "                   [--repeat N] [--threads 1,4,16] [--calls N] [--turns N]\n"
           "  defaults: --features 1000000 --model ffm --k 4 --dir build/serve --mfm build/mfm --repeat 3\n"
           "            --threads 1,<every core> --calls 20000 --turns 1\n");
    exit(code);
}

static void parse_options(int argc, char **argv, options *o) {
    int i;
    memset(o, 0, sizeof *o);
    o->features = 1000000, o->model = MFM_MODEL_FFM, o->k = 4, o->repeat = 3, o->calls = 20000, o->turns = 1;
    o->dir = "build/serve", o->mfm = "build/mfm";
    o->n_threads = 2, o->threads[0] = 1, o->threads[1] = (int)sysconf(_SC_NPROCESSORS_ONLN);
    for (i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) usage(0);
        if (!v) usage(2);
        i++;
        if (strcmp(a, "--features") == 0)
            o->features = (uint32_t)strtoul(v, NULL, 10);
        else if (strcmp(a, "--model") == 0)
            o->model = bench_parse_model(v);
        else if (strcmp(a, "--k") == 0)
            o->k = atoi(v);
        else if (strcmp(a, "--repeat") == 0)
            o->repeat = atoi(v);
        else if (strcmp(a, "--calls") == 0)
            o->calls = atoi(v);
        else if (strcmp(a, "--turns") == 0)
            o->turns = atoi(v);
        else if (strcmp(a, "--dir") == 0)
            o->dir = v;
        else if (strcmp(a, "--mfm") == 0)
            o->mfm = v;
        else if (strcmp(a, "--threads") == 0) {
            char buf[256], *tok;
            snprintf(buf, sizeof buf, "%s", v);
            for (o->n_threads = 0, tok = strtok(buf, ","); tok && o->n_threads < MAX_THREADS; tok = strtok(NULL, ","))
                if ((o->threads[o->n_threads++] = atoi(tok)) < 1) usage(2);
        } else
            usage(2);
    }
    if (o->features < 1000 || o->model < 0 || o->k < 1 || o->repeat < 1 || o->calls < 100 || o->turns < 1) usage(2);
}

static void path_in(char *out, size_t size, const options *o, const char *name) { snprintf(out, size, "%s/%s", o->dir, name); }

/* Reads a file once, so that every measurement finds it in the page cache. */
static void warm(const char *path) {
    uint64_t digest;
    mfm_error e;
    bench_check(mfm_file_digest(path, &digest, &e), &e, "reading a file");
}

/* ---- opening ---- */

/* The ways to open a model file, as the tables name them. */
enum { OPEN_LOAD, OPEN_MAP, OPEN_COPY, OPEN_WAYS };
static const char *const open_names[OPEN_WAYS] = {"mfm_model_load", "mfm_model_map", "mfm_model_load_parameters"};

static mfm_status open_model(const char *path, int way, mfm_model **m, mfm_error *e) {
    return way == OPEN_LOAD ? mfm_model_load(path, m, e) : way == OPEN_MAP ? mfm_model_map(path, m, e) : mfm_model_load_parameters(path, m, e);
}

static double time_open(const char *path, int way, int repeat) {
    double best = 1e30;
    int i;
    for (i = 0; i < repeat; i++) {
        mfm_model *m = NULL;
        mfm_error e;
        double t0 = bench_now(), t;
        bench_check(open_model(path, way, &m, &e), &e, open_names[way]);
        t = bench_now() - t0;
        mfm_model_free(m);
        if (t < best) best = t;
    }
    return best;
}

/* Linux: the MB of `path`'s mappings in this process that are mapped in 2 MB pages (the
   FilePmdMapped and ShmemPmdMapped of /proc/self/smaps: mfm_model_map gets them where the page
   cache holds the file in 2 MB folios, docs/FORMATS.md); -1 where that cannot be read. */
static double mapped_in_huge_pages_mb(const char *path) {
    char line[4096], *full = realpath(path, NULL);
    FILE *f = full ? fopen("/proc/self/smaps", "r") : NULL;
    double kb = 0;
    int in_file = 0;
    if (!f) {
        free(full);
        return -1;
    }
    while (fgets(line, sizeof line, f)) {
        unsigned long long lo, hi, n;
        char key[64];
        if (sscanf(line, "%llx-%llx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) /* a range's first line */
            in_file = strstr(line, full) != NULL;
        else if (in_file && sscanf(line, "%63[^:]: %llu kB", key, &n) == 2 && (strcmp(key, "FilePmdMapped") == 0 || strcmp(key, "ShmemPmdMapped") == 0))
            kb += (double)n;
    }
    fclose(f);
    free(full);
    return kb * 1024 / 1e6;
}

/* ---- the command line ---- */

/* Runs mfm predict --backend BACKEND MODEL ROWS OUT; the wall seconds from fork to exit, and its
   peak memory (MB). */
static double time_predict(const options *o, const char *backend, const char *model, const char *rows, double *peak_mb) {
    char out[1024];
    double t0 = bench_now(), t;
    struct rusage usage;
    int status = 0;
    pid_t pid;
    path_in(out, sizeof out, o, "predictions.txt");
    pid = fork();
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        if (null >= 0) dup2(null, 2); /* the metrics line */
        execl(o->mfm, o->mfm, "predict", "--backend", backend, model, rows, out, (char *)NULL);
        _exit(127);
    }
    if (pid < 0 || wait4(pid, &status, 0, &usage) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "bench-serve: %s predict --backend %s %s %s %s failed (build it with make build/mfm)\n", o->mfm, backend, model, rows, out);
        exit(1);
    }
    t = bench_now() - t0;
    *peak_mb = (double)usage.ru_maxrss / 1024.0;
    return t;
}

/* Whether a GPU is there, asked in a child: a process with the driver open makes another's
   start cheaper (on the H100, cuInit 0.01 s instead of 0.10 s and a faster exit), so this one
   never opens it and the GPU rows time a process that is the GPU's only user. */
static int gpu_present(void) {
    int status = 0;
    pid_t pid = fork();
    if (pid == 0) _exit(mfm_cuda_available() ? 0 : 1);
    return pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

/* A child that holds device 0's context open until *release is closed: the rows that time
   `mfm predict` next to another user of the GPU, as on a server with a process already on it. */
static pid_t gpu_hold(int *release) {
    int ready[2], hold[2];
    char c = 0;
    pid_t pid;
    if (pipe(ready) != 0) return -1;
    if (pipe(hold) != 0) {
        close(ready[0]), close(ready[1]);
        return -1;
    }
    pid = fork();
    if (pid == 0) {
        mfm_error e;
        close(ready[0]), close(hold[1]);
        c = mfm_cuda_prepare(0, &e) == MFM_OK;
        if (write(ready[1], &c, 1) != 1) _exit(1);
        while (read(hold[0], &c, 1) > 0) {} /* until the parent closes its end */
        _exit(0);
    }
    close(ready[1]), close(hold[0]);
    if (pid < 0 || read(ready[0], &c, 1) != 1 || !c) {
        close(ready[0]), close(hold[1]);
        if (pid > 0) waitpid(pid, NULL, 0);
        return -1;
    }
    close(ready[0]);
    *release = hold[1];
    return pid;
}

/* ---- one-row latency ---- */

typedef struct caller {
    const mfm_model *model;
    const mfm_csr *rows;
    uint64_t first; /* the caller's first row; it walks on from there */
    int calls;
    double *seconds; /* per call */
    double began, ended; /* the caller's first call's start and last call's end */
    pthread_barrier_t *start;
} caller;

/* Each call's row is first copied into the caller's request buffer, where a server's parser
   would have just written it: the timed call finds its row in cache and the model wherever the
   other calls left it. */
enum { REQUEST_MAX = 256 };

static void *call_repeatedly(void *arg) {
    caller *c = (caller *)arg;
    const mfm_csr *d = c->rows;
    uint64_t offsets[2] = {0, 0};
    uint32_t features[REQUEST_MAX], fields[REQUEST_MAX];
    float values[REQUEST_MAX], out[4];
    mfm_csr row;
    mfm_error e;
    int i;
    memset(&row, 0, sizeof row);
    row.n_rows = 1, row.row_offsets = offsets, row.n_features = d->n_features, row.n_fields = d->n_fields;
    row.features = features, row.fields = fields, row.values = d->values ? values : NULL;
    pthread_barrier_wait(c->start);
    c->began = bench_now();
    for (i = 0; i < c->calls; i++) {
        const uint64_t r = (c->first + (uint64_t)i * 7919) % d->n_rows, at = d->row_offsets[r];
        double t0;
        offsets[1] = d->row_offsets[r + 1] - at;
        if (offsets[1] > REQUEST_MAX) {
            fprintf(stderr, "bench-serve: row %" PRIu64 " has %" PRIu64 " non-zeros, more than a request holds (%d)\n", r, offsets[1], REQUEST_MAX);
            exit(1);
        }
        memcpy(features, d->features + at, offsets[1] * sizeof *features);
        memcpy(fields, d->fields + at, offsets[1] * sizeof *fields);
        if (d->values) memcpy(values, d->values + at, offsets[1] * sizeof *values);
        t0 = bench_now();
        bench_check(mfm_predict(c->model, &row, MFM_OUTPUT_PROBABILITY, out, 4, &e), &e, "mfm_predict");
        c->seconds[i] = bench_now() - t0;
    }
    c->ended = bench_now();
    return NULL;
}

static int by_value(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void latency_row(const mfm_model *m, const mfm_csr *rows, int threads, int calls) {
    pthread_t tid[1024];
    caller c[1024];
    pthread_barrier_t start;
    double *all = (double *)malloc((size_t)threads * (size_t)calls * sizeof(double)), began = 1e300, ended = 0;
    uint64_t n = (uint64_t)threads * (uint64_t)calls;
    int i;
    if (!all || threads > 1024) exit(1);
    pthread_barrier_init(&start, NULL, (unsigned)threads + 1);
    for (i = 0; i < threads; i++) {
        c[i].model = m, c[i].rows = rows, c[i].first = (uint64_t)i * (rows->n_rows / (uint64_t)threads), c[i].calls = calls;
        c[i].seconds = all + (size_t)i * (size_t)calls, c[i].start = &start;
        if (pthread_create(&tid[i], NULL, call_repeatedly, &c[i]) != 0) exit(1);
    }
    pthread_barrier_wait(&start);
    for (i = 0; i < threads; i++) { /* the span from the first call to the last (this thread may wake after them) */
        pthread_join(tid[i], NULL);
        if (c[i].began < began) began = c[i].began;
        if (c[i].ended > ended) ended = c[i].ended;
    }
    pthread_barrier_destroy(&start);
    qsort(all, (size_t)n, sizeof(double), by_value);
    printf("| %d | %.2f | %.2f | %.2f | %.1f | %.0fk |\n", threads, 1e6 * all[n / 2], 1e6 * all[n * 99 / 100], 1e6 * all[n * 999 / 1000],
           1e6 * all[n - 1], (double)n / (ended - began) / 1e3);
    free(all);
}

/* ---- the data and the models ---- */

static void write_rows(const synth_data *all, uint64_t lo, uint64_t hi, const char *path) {
    synth_data part;
    mfm_csr csr;
    mfm_error e;
    if (synth_split(all, lo, hi, &part) != 0) exit(1);
    csr = synth_csr(&part);
    bench_check(mfm_dataset_write(&csr, path, MFM_FORMAT_LIBFFM, &e), &e, "mfm_dataset_write");
    synth_free(&part);
}

int main(int argc, char **argv) {
    options o;
    synth_spec s;
    synth_data all;
    mfm_dataset *held_out;
    mfm_read_options read_options;
    mfm_csr held_out_rows;
    mfm_params p;
    mfm_model *m, *served[4];
    mfm_csr train;
    mfm_error e;
    char cpu[400], model_path[1024], serve_path[1024], half_path[1024], few_path[1024], many_path[1024];
    const char *files[3], *rows[2];
    static const char *const names[3] = {"model.mfm (with state)", "serve.mfm (parameters)", "half.mfm (float16 factors)"};
    double t0;
    static const char *const backend_names[3] = {"cpu", "cuda", "cuda, GPU held"};
    int b, i, j, turn, have_gpu;
    parse_options(argc, argv, &o);
    mkdir(o.dir, 0755);
    path_in(model_path, sizeof model_path, &o, "model.mfm"), path_in(serve_path, sizeof serve_path, &o, "serve.mfm");
    path_in(half_path, sizeof half_path, &o, "half.mfm");
    path_in(few_path, sizeof few_path, &o, "rows100.ffm"), path_in(many_path, sizeof many_path, &o, "rows200k.ffm");
    bench_machine(cpu, sizeof cpu);
    printf("modern_fm %s serving benchmark\nmachine: %s\n", mfm_version_string(), cpu);

    memset(&s, 0, sizeof s);
    s.n_rows = TRAIN_ROWS + FEW_ROWS + MANY_ROWS, s.n_fields = 39, s.n_features = o.features, s.per_field = 1, s.zipf_s = 1.1;
    s.hidden_k = 4, s.signal = 1.0, s.base_rate = 0.22, s.seed = 49;
    t0 = bench_now();
    if (synth_generate(&s, &all) != 0) return 1;
    write_rows(&all, TRAIN_ROWS, TRAIN_ROWS + FEW_ROWS, few_path);
    write_rows(&all, TRAIN_ROWS + FEW_ROWS, all.n_rows, many_path);
    memset(&p, 0, sizeof p);
    p.model = (mfm_model_type)o.model, p.k = o.k, p.n_epochs = 2;
    train = synth_view(&all, 0, TRAIN_ROWS);
    bench_check(mfm_model_create(&p, o.features, s.n_fields, 1, &m, &e), &e, "mfm_model_create");
    bench_check(mfm_fit(m, &train, &e), &e, "mfm_fit");
    bench_check(mfm_model_save(m, model_path, 1, &e), &e, "mfm_model_save");
    bench_check(mfm_model_save(m, serve_path, 0, &e), &e, "mfm_model_save");
    bench_check(mfm_model_save_half(m, half_path, &e), &e, "mfm_model_save_half");
    mfm_model_free(m);
    synth_free(&all); /* a child's peak memory starts from this process's at the fork */
    printf("data: %s k = %d, %u features, 39 fields, trained on %d rows; files written in %.1f s to %s\n\n", mfm_model_type_name(p.model), o.k,
           o.features, TRAIN_ROWS, bench_now() - t0, o.dir);
    files[0] = model_path, files[1] = serve_path, files[2] = half_path, rows[0] = few_path, rows[1] = many_path;
    for (i = 0; i < 3; i++) warm(files[i]);
    for (i = 0; i < 2; i++) warm(rows[i]);

    printf("Opening a model file (page cache warm, best of %d):\n\n| file | MB | %s s | %s s | %s s |\n|---|---|---|---|---|\n", o.repeat,
           open_names[OPEN_LOAD], open_names[OPEN_MAP], open_names[OPEN_COPY]);
    for (i = 0; i < 3; i++) {
        struct stat st;
        stat(files[i], &st);
        printf("| %s | %.0f | %.3f | %.3f | %.3f |\n", names[i], (double)st.st_size / 1e6, time_open(files[i], OPEN_LOAD, o.repeat),
               time_open(files[i], OPEN_MAP, o.repeat), time_open(files[i], OPEN_COPY, o.repeat));
    }

    printf("\n`mfm predict --backend B FILE ROWS OUT`, fork to exit (best of %d, slowest; peak memory of the best run):\n\n"
           "| backend | file | rows | seconds | slowest | rows/s | peak MB |\n|---|---|---|---|---|---|---|\n", o.repeat);
    have_gpu = gpu_present();
    for (b = 0; b < (have_gpu ? 3 : 1); b++) { /* cpu; cuda, context creation included: alone on the GPU, then beside a holder */
        int release = -1;
        pid_t holder = b == 2 ? gpu_hold(&release) : 0;
        if (holder < 0) {
            printf("| cuda, GPU held | (a second process could not open device 0) | | | | | |\n");
            break;
        }
        for (i = 0; i < 3; i++)
            for (j = 0; j < 2; j++) {
                double best = 1e30, slowest = 0, best_peak = 0, peak;
                int r;
                for (r = 0; r < o.repeat; r++) {
                    double t = time_predict(&o, b ? "cuda" : "cpu", files[i], rows[j], &peak);
                    if (t < best) best = t, best_peak = peak;
                    if (t > slowest) slowest = t;
                }
                printf("| %s | %.9s | %d | %.3f | %.3f | %.0f | %.0f |\n", backend_names[b], names[i], j ? MANY_ROWS : FEW_ROWS, best, slowest,
                       (j ? MANY_ROWS : FEW_ROWS) / best, best_peak);
            }
        if (holder > 0) {
            close(release);
            waitpid(holder, NULL, 0);
        }
    }
    if (!have_gpu) printf("\n(no GPU here: `--backend cuda` not measured)\n");
    else printf("\n(cuda: the only process on the GPU; cuda, GPU held: another process has device 0's context open, which saves the driver's\n"
                "start and part of its exit)\n");

    memset(&read_options, 0, sizeof read_options);
    bench_check(mfm_dataset_read(many_path, &read_options, &held_out, &e), &e, "mfm_dataset_read");
    held_out_rows = mfm_dataset_csr(held_out);
    for (j = 0; j < 4; j++) /* serve.mfm and half.mfm, each mapped and copied */
        bench_check((j & 1 ? mfm_model_load_parameters : mfm_model_map)(files[1 + j / 2], &served[j], &e), &e, j & 1 ? "mfm_model_load_parameters" : "mfm_model_map");
    for (j = 0; j < 2; j++) {
        struct stat st;
        const double mb = mapped_in_huge_pages_mb(files[1 + j]);
        if (stat(files[1 + j], &st) == 0 && mb >= 0) printf("%s%s mapped: %.0f of its %.0f MB in 2 MB pages", j ? ", " : "\n", names[1 + j], mb, (double)st.st_size / 1e6);
    }
    printf("\n");
    for (turn = 1; turn <= o.turns; turn++) {
        printf("\nOne row per mfm_predict call, every thread at once, %d calls each", o.calls);
        if (o.turns > 1) printf(" (turn %d of %d)", turn, o.turns);
        printf(":\n\n| file | opened | threads | p50 us | p99 us | p99.9 us | max us | calls/s |\n|---|---|---|---|---|---|---|---|\n");
        for (j = 0; j < 4; j++)
            for (i = 0; i < o.n_threads; i++) {
                printf("| %.9s | %s ", names[1 + j / 2], j & 1 ? "copied" : "mapped");
                latency_row(served[j], &held_out_rows, o.threads[i], o.calls);
            }
    }
    for (j = 0; j < 4; j++) mfm_model_free(served[j]);
    mfm_dataset_free(held_out);
    return 0;
}
