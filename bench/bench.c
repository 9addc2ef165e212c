/* bench.c - data file speed, training and prediction speed, and test quality, on Criteo-shaped
   synthetic data.

   First a data-file table: the rows written as libffm text, parsed back with one thread and
   with every core, written as a binary dataset file and loaded back (mmap + checksum). Then
   one table row per (model, k, batch size, threads; "2h": two Hogwild threads, params.hogwild;
   "2c": two threads each summing a chunk of every batch, params.thread_chunks):
   one run of the optimizer (--optimizer, AdaGrad unless named) over the training rows, then prediction (probabilities) and metrics on
   held-out rows on as many threads; with --repeat N, N runs of each, the thread counts of a (model, k, batch)
   taking turns, and the fastest of each reported, so that a noisy machine's slow spells fall
   on no one row. Data generation is timed on its own and kept out of every rate. `bench
   --help` lists the options. */
#define MODERN_FM_IMPLEMENTATION
#include "../modern_fm.h"

#include "common.h"
#include "roofline.h"
#include "synth.h"

#include <inttypes.h>
#include <string.h>
#include <sys/resource.h>

enum { MAX_LIST = 8, HOGWILD = 1 << 20, CHUNKS = 1 << 21, SCHEDULE = HOGWILD | CHUNKS }; /* a thread count | its schedule (Hogwild, chunks) */

typedef struct list {
    int n, v[MAX_LIST];
} list;

typedef struct options {
    uint64_t io_rows; /* rows of the data-file table (0: skip it) */
    int io_only;
    int roofline; /* --roofline: the memory tests, and each row's rate as a share of their ceiling */
    uint64_t rows; /* training rows; a quarter as many test rows */
    uint32_t features;
    int epochs, repeat;
    double lr;
    int optimizer; /* mfm_optimizer */
    uint64_t seed;
    double zipf; /* skew of the ids within a field; 0: uniform */
    list models, k, batch, threads;
} options;

/* One token of a comma list: a positive number; -1 when it is not one (models: bench_parse_model). */
static int parse_number(const char *s) {
    char *end;
    long v = strtol(s, &end, 10);
    return *s && !*end && v > 0 && v < 1000000 ? (int)v : -1;
}

static int parse_list(const char *arg, int (*parse)(const char *), list *out) {
    char buf[256], *tok;
    if (strlen(arg) >= sizeof buf) return 0;
    strcpy(buf, arg);
    out->n = 0;
    for (tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        if (out->n == MAX_LIST || (out->v[out->n] = parse(tok)) < 0) return 0;
        out->n++;
    }
    return out->n > 0;
}

/* A thread count, or one followed by 'h' for Hogwild threads ("2h") or by 'c' for threads that
   sum a chunk each ("2c"). */
static int parse_threads(const char *s) {
    char digits[16];
    const size_t n = strlen(s);
    int threads;
    if (n < 2 || n >= sizeof digits || (s[n - 1] != 'h' && s[n - 1] != 'c')) return parse_number(s);
    memcpy(digits, s, n - 1);
    digits[n - 1] = '\0';
    threads = parse_number(digits);
    return threads > 1 ? threads | (s[n - 1] == 'h' ? HOGWILD : CHUNKS) : -1; /* one thread is one thread */
}

static void set_list(list *l, int n, const int *v) {
    l->n = n;
    memcpy(l->v, v, (size_t)n * sizeof *v);
}

static void usage(int code) {
    printf("usage: bench [options]\n"
           "  --rows N       training rows (default 50000; a quarter as many test rows)\n"
           "  --features N   feature ids over all fields (default 262144)\n"
           "  --epochs N     epochs per run (default 1)\n"
           "  --lr X         learning rate (default: the library's, by model)\n"
           "  --optimizer O  adagrad (default), rowwise-adagrad, sgd, adam or ftrl\n"
           "  --models LIST  e.g. fm,ffm,fwfm, any case (default all three)\n"
           "  --k LIST       factors, e.g. 4,8,16 (default)\n"
           "  --batch LIST   batch sizes, e.g. 1,256 (default)\n"
           "  --threads LIST e.g. 1,2,2h (default; 2h: two Hogwild threads; 2c: two threads summing a chunk of each batch)\n"
           "  --repeat N     runs of each row, the thread counts taking turns; the fastest is reported (default 1)\n"
           "  --seed N       data seed (default 1)\n"
           "  --zipf S       Zipf exponent of the ids within a field (default 1.1, Criteo-like; 0: uniform, no\n"
           "                 feature more common than another)\n"
           "  --io-rows N    rows of the data-file table (default 500000, about 230 MB of text; 0 skips it)\n"
           "  --io-only      only the data-file table\n"
           "  --roofline     measure memory bandwidth and latency at each thread count (bench/roofline.h) and give\n"
           "                 each training row as a share of that ceiling (about a minute per thread count)\n"
           "  --quick        a tiny smoke run: 5000 rows, 100000 features, k 4, 20000 data-file rows\n");
    exit(code);
}

static void parse_options(int argc, char **argv, options *o) {
    static const int models[] = {MFM_MODEL_FM, MFM_MODEL_FFM, MFM_MODEL_FWFM}, ks[] = {4, 8, 16}, batches[] = {1, 256}, threads[] = {1, 2, 2 | HOGWILD};
    int i, ok = 1;
    o->io_rows = 500000;
    o->io_only = 0;
    o->roofline = 0;
    o->rows = 50000; /* 200000 rows and 10^6 features take over 10 minutes on 2 cores */
    o->features = 262144;
    o->epochs = 1;
    o->repeat = 1;
    o->lr = 0; /* the library's default: rows normalized, FFM 0.2, FM and FwFM 0.5 */
    o->optimizer = MFM_OPTIMIZER_ADAGRAD;
    o->seed = 1;
    o->zipf = 1.1;
    set_list(&o->models, 3, models);
    set_list(&o->k, 3, ks);
    set_list(&o->batch, 2, batches);
    set_list(&o->threads, 3, threads);
    for (i = 1; i < argc && ok; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--quick") == 0) {
            o->rows = 5000;
            o->features = 100000;
            o->io_rows = 20000;
            set_list(&o->k, 1, ks);
            continue;
        }
        if (strcmp(a, "--io-only") == 0) {
            o->io_only = 1;
            continue;
        }
        if (strcmp(a, "--roofline") == 0) {
            o->roofline = 1;
            continue;
        }
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) usage(0);
        if (!v) usage(2);
        i++;
        if (strcmp(a, "--rows") == 0)
            ok = (o->rows = strtoull(v, NULL, 10)) >= 10;
        else if (strcmp(a, "--io-rows") == 0)
            o->io_rows = strtoull(v, NULL, 10);
        else if (strcmp(a, "--features") == 0)
            ok = (o->features = (uint32_t)strtoul(v, NULL, 10)) >= 39;
        else if (strcmp(a, "--epochs") == 0)
            ok = (o->epochs = parse_number(v)) > 0;
        else if (strcmp(a, "--repeat") == 0)
            ok = (o->repeat = parse_number(v)) > 0;
        else if (strcmp(a, "--lr") == 0)
            ok = (o->lr = strtod(v, NULL)) >= 0;
        else if (strcmp(a, "--optimizer") == 0)
            ok = (o->optimizer = bench_parse_optimizer(v)) >= 0;
        else if (strcmp(a, "--seed") == 0)
            o->seed = strtoull(v, NULL, 10);
        else if (strcmp(a, "--zipf") == 0)
            ok = (o->zipf = strtod(v, NULL)) >= 0 && o->zipf <= 4;
        else if (strcmp(a, "--models") == 0)
            ok = parse_list(v, bench_parse_model, &o->models);
        else if (strcmp(a, "--k") == 0)
            ok = parse_list(v, parse_number, &o->k);
        else if (strcmp(a, "--batch") == 0)
            ok = parse_list(v, parse_number, &o->batch);
        else if (strcmp(a, "--threads") == 0)
            ok = parse_list(v, parse_threads, &o->threads);
        else
            ok = 0;
        if (!ok) fprintf(stderr, "bench: bad option %s %s\n", a, v);
    }
    if (!ok) usage(2);
}

/* Peak resident memory (MB) since the last reset_peak(): Linux's VmHWM, which writing 5 to
   /proc/self/clear_refs resets, so that each cell shows its own peak; elsewhere (or without
   that file) the process's peak so far from getrusage. */
static void reset_peak(void) {
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (f) {
        fputs("5", f);
        fclose(f);
    }
}

static double peak_rss_mb(void) {
    char line[256];
    double kb = -1;
    FILE *f = fopen("/proc/self/status", "r");
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "VmHWM:", 6) == 0) kb = strtod(line + 6, NULL);
    if (f) fclose(f);
    if (kb < 0) {
        struct rusage u;
        getrusage(RUSAGE_SELF, &u);
        kb = (double)u.ru_maxrss; /* KiB on Linux */
    }
    return kb / 1024.0;
}

/* Bytes of a CSR's arrays. */
static double csr_mb(const mfm_csr *d) {
    const uint64_t nnz = d->row_offsets[d->n_rows];
    double b = (double)(d->n_rows + 1) * 8 + (double)nnz * 4 * (1 + (d->fields != NULL) + (d->values != NULL)) + (double)d->n_rows * 4 * (1 + (d->weights != NULL));
    return b / 1048576.0;
}

/* The parameter and optimizer-state bytes one training row reads, and writes back, under
   AdaGrad, for z non-zeros of distinct fields: FFM's z(z - 1) vectors of 2k floats (v and its
   accumulator) and z w blocks of 2; FM's and FwFM's z features of 2k + 2 floats, and FwFM's
   z(z - 1) / 2 field-pair blocks of 2; w0's 2. */
static double row_bytes(int model, int k, double z) {
    double floats = model == MFM_MODEL_FFM ? z * (z - 1) * 2 * k + 2 * z : z * (2 * k + 2);
    if (model == MFM_MODEL_FWFM) floats += z * (z - 1);
    return 4 * (floats + 2);
}

/* The memory a row touches at one place per feature: FFM a feature's vectors for every field
   (fields x 2k floats, one after the other); FM and FwFM the feature's v and w, in whole lines. */
static uint64_t feature_block(int model, int k, int fields) {
    uint64_t b = 64;
    if (model == MFM_MODEL_FFM) return (uint64_t)fields * 2 * (uint64_t)k * 4;
    while (b < (uint64_t)(2 * k + 2) * 4) b *= 2;
    return b;
}

/* A ceiling, measured once per (threads, model, k, block) and remembered: with model < 0 the
   random read-modify-write GB/s of blocks of `block` bytes, else the replay's rows/s of the
   model at k on the training rows d. */
static double ceiling(const mfm_csr *d, int threads, int model, int k, uint64_t block) {
    static struct {
        int threads, model, k;
        uint64_t block;
        double value;
    } seen[64];
    static int n_seen;
    double value;
    int i;
    for (i = 0; i < n_seen; i++)
        if (seen[i].threads == threads && seen[i].model == model && seen[i].k == k && seen[i].block == block) return seen[i].value;
    value = model < 0 ? roof_best(1, threads, block) : roof_replay_rate(d, model, k, threads);
    if (n_seen < 64) seen[n_seen].threads = threads, seen[n_seen].model = model, seen[n_seen].k = k, seen[n_seen].block = block, seen[n_seen++].value = value;
    return value;
}

static double rmw_gbps(int threads, uint64_t block) { return ceiling(NULL, threads, -1, 0, block); }

/* The memory table: per thread count of the list, copy and random read-modify-write GB/s
   (64-byte lines and each model's feature block) and latency. */
static void roofline_table(const options *o, int fields) {
    uint64_t blocks[16];
    int n_blocks = 0, a, b, d, i, seen_threads[MAX_LIST], n_threads = 0;
    blocks[n_blocks++] = 64;
    for (a = 0; a < o->models.n; a++)
        for (b = 0; b < o->k.n; b++) {
            const uint64_t blk = feature_block(o->models.v[a], o->k.v[b], fields);
            for (i = 0; i < n_blocks && blocks[i] != blk; i++) {}
            if (i == n_blocks && n_blocks < 16) blocks[n_blocks++] = blk;
        }
    printf("memory    copy: STREAM's b[i] = a[i] over 1 GiB; rmw B: blocks of B bytes at random places of 2 GiB, each read and\n"
           "          written back, addresses independent of the data; GB/s count bytes read + written; latency: a pointer\n"
           "          chase over 1 GiB, one miss at a time (each thread its own). Best of 3; every thread first-touches its share.\n");
    printf("%4s %10s %11s", "thr", "copy_GB/s", "latency_ns");
    for (i = 0; i < n_blocks; i++) {
        char h[32];
        snprintf(h, sizeof h, "rmw_%lluB_GB/s", (unsigned long long)blocks[i]);
        printf(" %16s", h);
    }
    printf("\n");
    for (d = 0; d < o->threads.n; d++) {
        const int t = o->threads.v[d] & ~SCHEDULE;
        for (i = 0; i < n_threads && seen_threads[i] != t; i++) {}
        if (i < n_threads) continue;
        seen_threads[n_threads++] = t;
        printf("%4d %10.1f %11.1f", t, roof_best(0, t, 0), roof_best(2, t, 0));
        for (i = 0; i < n_blocks; i++) printf(" %16.1f", rmw_gbps(t, blocks[i]));
        printf("\n");
        fflush(stdout);
    }
    printf("\n");
}

/* The fastest of a table row's runs (the results are the same bits every run, Hogwild's aside). */
typedef struct cell {
    double train, predict, init, peak, model_mb;
    mfm_metrics met;
} cell;

/* One run: a model created, trained and evaluated; the rates kept where faster than *best's. */
static void run_once(const options *o, const mfm_csr *train, const mfm_csr *test, int model, int k, int batch, int threads, float *prob, cell *best) {
    mfm_params p = {0};
    mfm_model *m = NULL;
    mfm_model_info info;
    mfm_error e;
    double t0, t1, t2, tp, t3, peak;
    int i;
    p.model = (mfm_model_type)model;
    p.optimizer = (mfm_optimizer)o->optimizer;
    p.k = k;
    p.batch_size = batch;
    p.n_threads = threads & ~SCHEDULE;
    p.hogwild = (threads & HOGWILD) != 0;
    p.thread_chunks = (threads & CHUNKS) != 0;
    p.n_epochs = o->epochs;
    p.learning_rate = o->lr;
    p.seed = 7;
    reset_peak();
    t0 = bench_now();
    bench_check(mfm_model_create(&p, train->n_features, train->n_fields, 1, &m, &e), &e, "mfm_model_create");
    t1 = bench_now();
    bench_check(mfm_fit(m, train, &e), &e, "mfm_fit");
    t2 = bench_now();
    peak = peak_rss_mb();
    bench_check(mfm_model_set_threads(m, threads & ~SCHEDULE, &e), &e, "mfm_model_set_threads"); /* prediction on as many threads */
    for (i = 0; i < 3; i++) { /* the fastest of three: one pass over a quarter of the rows on 16 cores takes a few ms */
        tp = bench_now();
        bench_check(mfm_predict(m, test, MFM_OUTPUT_PROBABILITY, prob, test->n_rows, &e), &e, "mfm_predict");
        t3 = bench_now();
        if ((double)test->n_rows / (t3 - tp) > best->predict) best->predict = (double)test->n_rows / (t3 - tp);
    }
    bench_check(mfm_evaluate(m, test, &best->met, &e), &e, "mfm_evaluate");
    mfm_model_get_info(m, &info);
    if ((double)train->n_rows * o->epochs / (t2 - t1) > best->train) best->train = (double)train->n_rows * o->epochs / (t2 - t1);
    if (best->init == 0 || t1 - t0 < best->init) best->init = t1 - t0;
    if (peak > best->peak) best->peak = peak;
    best->model_mb = (double)info.memory_bytes / 1048576.0;
    mfm_model_free(m);
}

/* The table rows of one (model, k, batch): o->repeat runs of each thread count in turns, then
   a row each, with its training rate against one thread's where the list has 1. */
static void run_cells(const options *o, const mfm_csr *train, const mfm_csr *test, int model, int k, int batch, float *prob) {
    cell best[MAX_LIST];
    int rep, d, one = -1;
    memset(best, 0, sizeof best);
    for (rep = 0; rep < o->repeat; rep++)
        for (d = 0; d < o->threads.n; d++) run_once(o, train, test, model, k, batch, o->threads.v[d], prob, &best[d]);
    for (d = 0; d < o->threads.n; d++)
        if (o->threads.v[d] == 1) one = d;
    for (d = 0; d < o->threads.n; d++) {
        char ratio[16] = "-", thr[16], roof[64] = "";
        if (one >= 0) snprintf(ratio, sizeof ratio, "%.2fx", best[d].train / best[one].train);
        snprintf(thr, sizeof thr, "%d%s", o->threads.v[d] & ~SCHEDULE, o->threads.v[d] & HOGWILD ? "h" : o->threads.v[d] & CHUNKS ? "c" : "");
        if (o->roofline) { /* bytes per row; rows/s x bytes read and written over the random read-modify-write rate; the replay */
            const double z = (double)train->row_offsets[train->n_rows] / (double)train->n_rows, bytes = row_bytes(model, k, z);
            const double gbps = rmw_gbps(o->threads.v[d] & ~SCHEDULE, feature_block(model, k, (int)train->n_fields));
            const double replay = ceiling(train, o->threads.v[d] & ~SCHEDULE, model, k, 0);
            snprintf(roof, sizeof roof, " %8.0f %7.0f %12.0f %7.0f", bytes, 100 * best[d].train * 2 * bytes / (gbps * 1e9), replay, 100 * best[d].train / replay);
        }
        printf("%-5s %3d %6d %4s %13.0f %8s %15.0f %8.4f %7.4f %7.2f %9.0f %8.0f%s\n", mfm_model_type_name((mfm_model_type)model), k, batch, thr, best[d].train, ratio,
               best[d].predict, best[d].met.logloss, best[d].met.auc, best[d].init, best[d].model_mb, best[d].peak, roof);
        fflush(stdout);
    }
}

/* The fastest of three reads of path: seconds, and the dataset of the last read in *out. */
static double time_read(const char *path, int threads, mfm_dataset **out) {
    mfm_read_options ro = {0};
    mfm_error e;
    double best = 1e30;
    int rep;
    ro.n_threads = threads;
    *out = NULL;
    for (rep = 0; rep < 3; rep++) {
        double t0 = bench_now(), t;
        mfm_dataset_free(*out);
        bench_check(mfm_dataset_read(path, &ro, out, &e), &e, "mfm_dataset_read");
        t = bench_now() - t0;
        if (t < best) best = t;
    }
    return best;
}

static double file_mb(const char *path) {
    FILE *f = fopen(path, "rb");
    long n = -1;
    if (f && fseek(f, 0, SEEK_END) == 0) n = ftell(f);
    if (f) fclose(f);
    return (double)n / 1e6;
}

/* Writes the rows as libffm text and as a binary file, reads both back, prints the rates. */
static void io_table(const synth_data *d) {
    const char *text = "build/bench-io.ffm", *binary = "build/bench-io.mfmd";
    mfm_csr c = synth_csr(d);
    mfm_dataset *ds;
    mfm_error e;
    double t0, write_text, write_binary, parse1, parse_all, load, text_mb, binary_mb;
    t0 = bench_now();
    bench_check(mfm_dataset_write(&c, text, MFM_FORMAT_LIBFFM, &e), &e, "writing libffm text");
    write_text = bench_now() - t0;
    t0 = bench_now();
    bench_check(mfm_dataset_write(&c, binary, MFM_FORMAT_BINARY, &e), &e, "writing a binary dataset");
    write_binary = bench_now() - t0;
    text_mb = file_mb(text);
    binary_mb = file_mb(binary);
    parse1 = time_read(text, 1, &ds);
    mfm_dataset_free(ds);
    parse_all = time_read(text, 0, &ds); /* 0: every core */
    if (mfm_dataset_csr(ds).n_rows != d->n_rows) {
        fprintf(stderr, "bench: the text read back has %" PRIu64 " rows, not %" PRIu64 "\n", mfm_dataset_csr(ds).n_rows, d->n_rows);
        exit(1);
    }
    mfm_dataset_free(ds);
    load = time_read(binary, 1, &ds);
    mfm_dataset_free(ds);
    printf("data files: %" PRIu64 " rows; text %.1f MB, binary %.1f MB (page cache warm; best of 3 reads)\n", d->n_rows, text_mb, binary_mb);
    printf("  %-34s %8.3f s %9.1f MB/s %12.0f rows/s\n", "write libffm text", write_text, text_mb / write_text, (double)d->n_rows / write_text);
    printf("  %-34s %8.3f s %9.1f MB/s %12.0f rows/s\n", "parse libffm text, 1 thread", parse1, text_mb / parse1, (double)d->n_rows / parse1);
    printf("  %-34s %8.3f s %9.1f MB/s %12.0f rows/s\n", "parse libffm text, every core", parse_all, text_mb / parse_all, (double)d->n_rows / parse_all);
    printf("  %-34s %8.3f s %9.1f MB/s %12.0f rows/s\n", "write binary dataset", write_binary, binary_mb / write_binary, (double)d->n_rows / write_binary);
    printf("  %-34s %8.3f s %9.1f MB/s %12.0f rows/s\n\n", "load binary (mmap, checksum, check)", load, binary_mb / load, (double)d->n_rows / load);
    fflush(stdout);
    remove(text);
    remove(binary);
}

int main(int argc, char **argv) {
    options o;
    synth_spec s;
    synth_data all, test_rows;
    mfm_csr train, test;
    char cpu[400];
    double t0, gen_seconds, ctr = 0;
    float *prob;
    uint64_t r;
    int a, b, c;
    parse_options(argc, argv, &o);
    memset(&s, 0, sizeof s);
    s.n_rows = o.rows + o.rows / 4;
    s.n_fields = 39; /* Criteo: 13 integer + 26 categorical fields, one id each */
    s.n_features = o.features;
    s.per_field = 1;
    s.zipf_s = o.zipf;
    s.hidden_k = 4;
    s.signal = 1.0;
    s.base_rate = 0.22;
    s.seed = o.seed;
    bench_machine(cpu, sizeof cpu);
    printf("modern_fm %s benchmark\n", mfm_version_string());
    printf("machine   %s\n\n", cpu);
    if (o.io_rows) {
        synth_spec io = s;
        io.n_rows = o.io_rows;
        if (synth_generate(&io, &all) != 0) {
            fprintf(stderr, "bench: could not generate the data (out of memory?)\n");
            return 1;
        }
        io_table(&all);
        synth_free(&all);
    }
    if (o.io_only) return 0;
    t0 = bench_now();
    if (synth_generate(&s, &all) != 0 || synth_split(&all, o.rows, all.n_rows, &test_rows) != 0) {
        fprintf(stderr, "bench: could not generate the data (out of memory?)\n");
        return 1;
    }
    gen_seconds = bench_now() - t0;
    train = synth_view(&all, 0, o.rows); /* the first rows, borrowed; the rest copied out */
    test = synth_csr(&test_rows);
    for (r = 0; r < train.n_rows; r++) ctr += train.labels[r];
    ctr /= (double)train.n_rows;
    prob = (float *)malloc(test.n_rows * sizeof *prob);
    if (!prob) return 1;

    printf("data      %" PRIu64 " train + %" PRIu64 " test rows, %u fields, %.1f nnz/row, %u features (Zipf %.1f), CTR %.1f%%\n", train.n_rows,
           test.n_rows, s.n_fields, (double)all.nnz / (double)all.n_rows, s.n_features, s.zipf_s, 100 * ctr);
    printf("          generated in %.2f s (not part of any rate); constant-CTR logloss %.4f\n", gen_seconds,
           -(ctr * log(ctr) + (1 - ctr) * log(1 - ctr)));
    if (o.lr > 0)
        printf("training  %s, learning rate %g, %d epoch(s); rows/s = rows x epochs / wall seconds of mfm_fit", mfm_optimizer_name((mfm_optimizer)o.optimizer), o.lr, o.epochs);
    else
        printf("training  %s with the library's defaults, %d epoch(s); rows/s = rows x epochs / wall seconds of mfm_fit", mfm_optimizer_name((mfm_optimizer)o.optimizer), o.epochs);
    if (o.repeat > 1) printf(", the fastest of %d runs (thread counts in turns)", o.repeat);
    printf("\n          (vs_1thr: train_rows/s against the same model, k and batch on one thread;\n"
           "          thr 2h: two Hogwild threads, lock-free on shared parameters, not reproducible)\n");
    printf("          (init_s: mfm_model_create, i.e. allocating and seeding parameters and state, timed apart)\n");
    printf("predict   probabilities for the test rows on the row's thread count (2h, 2c: 2 threads), the fastest of three passes;\n          logloss and AUC on them\n");
    printf("memory    model_MB: parameters + optimizer state + padding; peak_MB: the process's peak resident memory from creating\n"
           "          the model to the end of training (Linux: reset per row), which also holds the data: %.1f MB of\n"
           "          training rows and %.1f MB of test rows\n\n",
           csr_mb(&train), csr_mb(&test));
    if (o.roofline) {
        roofline_table(&o, (int)s.n_fields);
        printf("roofline  B/row: parameter and state bytes a row reads (and writes back) under AdaGrad; rmw%%: train_rows/s x\n"
               "          2 x B/row over the random read-modify-write GB/s of the model's feature block at that thread count\n"
               "          (over 100 where the Zipf ids' common features stay in cache); replay: rows/s of reading and writing\n"
               "          back just those bytes, row by row, on the same data and threads (bench/roofline.h), and roof%%:\n"
               "          train_rows/s over it\n\n");
    }
    printf("%-5s %3s %6s %4s %13s %8s %15s %8s %7s %7s %9s %8s%s\n", "model", "k", "batch", "thr", "train_rows/s", "vs_1thr", "predict_rows/s",
           "logloss", "auc", "init_s", "model_MB", "peak_MB", o.roofline ? "    B/row    rmw%  replay_rows/s   roof%" : "");
    for (a = 0; a < o.models.n; a++)
        for (b = 0; b < o.k.n; b++)
            for (c = 0; c < o.batch.n; c++) run_cells(&o, &train, &test, o.models.v[a], o.k.v[b], o.batch.v[c], prob);
    free(prob);
    synth_free(&test_rows);
    synth_free(&all);
    return 0;
}
