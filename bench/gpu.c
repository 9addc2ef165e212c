/* gpu.c - prediction on the GPU next to the CPU (`make bench-gpu`): Criteo-shaped (39 fields)
   and Avazu-shaped (22 fields) one-hot rows, FM / FFM / FwFM, k = 4, 8, 16. For each cell:
   rows/s of the CPU with every core, of the GPU with the rows coming from host memory
   (transfer-inclusive), and of the GPU with model and rows resident; the resident figure as a
   percentage of its memory ceiling on the H100 (docs/PERFORMANCE.md, "GPU ceilings": FM and
   FwFM the random-gather one, FFM the 3.0 TB/s one); the largest difference from the CPU's
   probabilities. Then the time from a fresh process to its first prediction, with the kernel
   cache cold (NVRTC compiles) and warm.

   Then training (docs/PERFORMANCE.md's AdaGrad ceilings): AdaGrad per shape x
   model x k x batch (256, 4096, 65536) on --train-rows rows, CPU with two threads (one epoch),
   GPU fast and deterministic (two epochs, the second timed), with the test logloss of each GPU run.

       gpu [--rows N] [--train-rows N] [--features N] [--shape criteo|avazu] [--predict | --train] [--quick]
           [--model fm,ffm,fwfm] [--k N] [--batch N] [--optimizer NAME] [--gpu-only] [--gpus 1,2,4] [--fast-only]

   --model (one or more, comma-separated), --k and --batch pick training cells; --optimizer trains
   with another optimizer than AdaGrad (rowwise-adagrad, sgd, adam, ftrl; the ceilings stay
   AdaGrad's); --gpu-only leaves the CPU column out (profiling); --gpus trains each cell on that
   many GPUs (params.n_devices), side by side, fast and deterministic, instead (implies --train);
   --fast-only leaves its deterministic runs out. A run whose model does not fit the GPUs it names
   prints why in its place (--features 16777216 --k 16 --model ffm: 126 GB on the device). */
#define _POSIX_C_SOURCE 200809L
#define MODERN_FM_IMPLEMENTATION
#include "../modern_fm.h"
#include "common.h"
#include "synth.h"

#include <math.h>
#include <string.h>
#include <unistd.h>

/* rows/s ceilings (millions) for k = 4, 8, 16 (docs/PERFORMANCE.md, "GPU ceilings") */
static const double ceiling_fm[2][3] = {{750, 740, 550}, {1330, 1320, 970}};   /* Criteo, Avazu: cold gathers */
static const double ceiling_ffm[2][3] = {{120, 61, 31}, {370, 189, 96}};       /* 3.0 TB/s over the blocks */

typedef struct cell {
    mfm_model *m;
    mfm_gpu_model *gm;
    mfm_gpu_data *gd;
    mfm_csr d;
} cell;

typedef enum where { ON_CPU, ON_GPU_FROM_HOST, ON_GPU_RESIDENT } where;

/* Seconds of the fastest of n predictions of the cell's rows (probabilities into out). */
static double best_of(int n, const cell *c, where w, float *out) {
    static const char *const what[] = {"CPU predict", "GPU predict", "GPU resident predict"};
    double best = 1e30;
    int i;
    for (i = 0; i < n; i++) {
        mfm_error e;
        mfm_status st;
        double t = bench_now();
        if (w == ON_CPU)
            st = mfm_predict(c->m, &c->d, MFM_OUTPUT_PROBABILITY, out, c->d.n_rows, &e);
        else if (w == ON_GPU_FROM_HOST)
            st = mfm_gpu_predict(c->gm, &c->d, MFM_OUTPUT_PROBABILITY, out, c->d.n_rows, &e);
        else
            st = mfm_gpu_predict_resident(c->gm, c->gd, MFM_OUTPUT_PROBABILITY, out, c->d.n_rows, &e);
        bench_check(st, &e, what[w]);
        t = bench_now() - t;
        if (t < best) best = t;
    }
    return best;
}

/* In a fresh process (`gpu --probe`): library calls from nothing to one finished prediction.
   Prints seconds: to a loaded driver, to the first prediction; of those, creating the context,
   having the kernel image, the driver loading it; then 1 when the image came from the cache. */
static int probe(void) {
    static const uint64_t off[] = {0, 2};
    static const uint32_t feat[] = {1, 2}, fld[] = {0, 1};
    mfm_params p;
    mfm_model *m = NULL;
    mfm_gpu_model *gm = NULL;
    mfm_error e;
    mfm_cuda_info info;
    mfm_csr d;
    float out[1];
    double start = bench_now(), driver;
    memset(&p, 0, sizeof p);
    memset(&d, 0, sizeof d);
    p.model = MFM_MODEL_FFM;
    p.k = 4;
    d.n_rows = 1, d.row_offsets = off, d.features = feat, d.fields = fld;
    driver = mfm_cuda_available() ? bench_now() - start : -1;
    bench_check(mfm_model_create(&p, 10, 2, 1, &m, &e), &e, "create");
    bench_check(mfm_gpu_model_upload(m, 0, &gm, &e), &e, "upload");
    bench_check(mfm_gpu_predict(gm, &d, MFM_OUTPUT_PROBABILITY, out, 1, &e), &e, "predict");
    printf("%.6f %.6f", driver, bench_now() - start);
    mfm_cuda_get_info(0, &info, &e);
    printf(" %.6f %.6f %.6f %d\n", info.context_seconds, info.kernels.seconds, info.kernels.load_seconds, info.kernels.from_cache);
    mfm_gpu_model_free(gm);
    mfm_model_free(m);
    return 0;
}

static void first_prediction(const char *self, const char *label) {
    char cmd[1024], line[256] = "";
    double driver = 0, first = 0, context = 0, kernels = 0, load = 0;
    int from_cache = 0;
    FILE *f;
    snprintf(cmd, sizeof cmd, "'%s' --probe", self);
    fflush(stdout);
    if (!(f = popen(cmd, "r")) || !fgets(line, sizeof line, f) || sscanf(line, "%lf %lf %lf %lf %lf %d", &driver, &first, &context, &kernels, &load, &from_cache) != 6) {
        printf("%-10s probe failed: %s\n", label, line);
        if (f) pclose(f);
        return;
    }
    pclose(f);
    printf("%-10s first prediction %6.1f ms after the first library call: driver %5.1f ms, context %5.1f ms, kernels %s in %5.1f ms, "
           "module load %4.1f ms\n",
           label, 1e3 * first, 1e3 * driver, 1e3 * context, from_cache ? "read from the cache" : "compiled by NVRTC", 1e3 * kernels, 1e3 * load);
}

/* What the epoch callback saw: the pass's seconds (kernels only: the model and rows are on the
   device by then) and its training loss. */
typedef struct epoch_seen {
    double seconds, loss;
} epoch_seen;

static int see_epoch(void *user, const mfm_epoch_report *r) {
    epoch_seen *s = (epoch_seen *)user;
    s->seconds = r->seconds;
    s->loss = r->train_loss;
    return 0;
}

/* AdaGrad on a clone of `init` with backend and batch: one epoch on the CPU, two on the GPU,
   whose second is the steady state (its order was made on the CPU while the first ran). Rows/s
   of the last pass, of the whole fit call (model and rows up and back: transfer-inclusive), and
   the test logloss. */
static void train_cell(const mfm_model *init, const mfm_csr *train, const mfm_csr *test, mfm_backend backend, int batch, int deterministic, int threads,
                       int n_devices, double *pass_rate, double *call_rate, double *logloss) {
    mfm_model *m = NULL;
    mfm_params p = *mfm_model_params(init);
    mfm_metrics met = {0, NAN, NAN, NAN, NAN};
    mfm_error e;
    mfm_status st;
    epoch_seen seen = {0, 0};
    double t;
    bench_check(mfm_model_clone(init, &m, &e), &e, "clone");
    p.backend = backend, p.batch_size = batch, p.deterministic = deterministic, p.n_threads = threads, p.n_epochs = backend == MFM_BACKEND_CUDA ? 2 : 1;
    p.n_devices = n_devices;
    p.on_epoch = see_epoch, p.user = &seen;
    bench_check(mfm_model_set_params(m, &p, &e), &e, "set params");
    t = bench_now();
    st = mfm_fit(m, train, &e);
    t = bench_now() - t;
    *logloss = NAN;
    if (st == MFM_ERR_OUT_OF_MEMORY && backend == MFM_BACKEND_CUDA) { /* a model larger than the GPUs named: the table goes on */
        printf(" [%s]", e.message);
        *pass_rate = *call_rate = NAN;
        mfm_model_free(m);
        return;
    }
    bench_check(st, &e, backend == MFM_BACKEND_CUDA ? "GPU training" : "CPU training");
    *pass_rate = train->n_rows / seen.seconds;
    *call_rate = (double)p.n_epochs * train->n_rows / t;
    if (test) {
        bench_check(mfm_evaluate(m, test, &met, &e), &e, "evaluate");
        *logloss = met.logloss;
    }
    mfm_model_free(m);
}

/* FFM AdaGrad training ceilings (millions of rows/s, docs/PERFORMANCE.md), k = 4, 8, 16, and FM's
   (cold read-modify-write of one packed record per non-zero); FwFM is held to FM's. */
static const double train_ceiling_ffm[2][3] = {{28.6, 14.3, 7.2}, {89.6, 45.0, 22.5}};
static const double train_ceiling_fm[2][3] = {{310, 200, 140}, {550, 350, 250}};

/* Which training cells run: shape -1, k and batch 0 mean all; models is a bit per model type;
   cpu 0 leaves the CPU out; the optimizer every cell trains with. */
typedef struct cell_filter {
    int shape, models, k, batch, cpu, optimizer, fast_only; /* fast_only: --gpus without the deterministic runs */
    int gpus[MFM_MAX_DEVICES], n_gpus; /* --gpus: GPU counts side by side instead of the CPU / GPU columns */
} cell_filter;

/* The training table: per shape, model, k and batch, CPU (2 threads, on the first cpu_rows rows)
   and GPU rows/s, fast and deterministic, with the test logloss of each GPU run. */
static void train_table(uint64_t n_rows, uint32_t n_features, uint64_t cpu_rows, cell_filter only) {
    static const mfm_model_type models[] = {MFM_MODEL_FM, MFM_MODEL_FFM, MFM_MODEL_FWFM};
    static const int ks[] = {4, 8, 16}, batches[] = {256, 4096, 65536};
    const uint64_t n_test = n_rows / 20;
    int shape, i, b;
    printf("\ntraining: %s (lr 0.05), %llu rows + %llu test rows per shape, %u features; CPU: 2 threads, one epoch on the first %llu rows; GPU: two epochs\n",
           mfm_optimizer_name((mfm_optimizer)only.optimizer), (unsigned long long)n_rows, (unsigned long long)n_test, (unsigned)n_features, (unsigned long long)cpu_rows);
    if (only.n_gpus)
        printf("%-7s %-5s %3s %6s | GPUs: fast rows/s, vs the first count, logloss, deterministic rows/s, vs the first count\n", "shape", "model", "k", "batch");
    else
        printf("%-7s %-5s %3s %6s | %10s | %11s %11s %6s %8s | %11s %6s %8s\n", "shape", "model", "k", "batch", "CPU rows/s", "GPU rows/s", "with copies", "% ceil",
               "logloss", "determ.", "% fast", "logloss");
    for (shape = 0; shape < 2; shape++) {
        synth_spec spec;
        synth_data all, train, test, head;
        mfm_csr dtrain, dtest, dhead;
        if (only.shape >= 0 && shape != only.shape) continue;
        memset(&spec, 0, sizeof spec);
        spec.n_rows = n_rows + n_test;
        spec.n_fields = shape == 0 ? 39 : 22;
        spec.n_features = n_features;
        spec.per_field = 1, spec.zipf_s = 1.1, spec.signal = 1, spec.base_rate = 0.25, spec.seed = 11;
        if (synth_generate(&spec, &all) != 0 || synth_split(&all, 0, n_rows, &train) != 0 || synth_split(&all, n_rows, n_rows + n_test, &test) != 0 ||
            synth_split(&all, 0, cpu_rows < n_rows ? cpu_rows : n_rows, &head) != 0) {
            fprintf(stderr, "out of memory for the data\n");
            exit(1);
        }
        synth_free(&all);
        dtrain = synth_csr(&train), dtest = synth_csr(&test), dhead = synth_csr(&head);
        for (i = 0; i < 9; i++) {
            const mfm_model_type model = models[i / 3];
            const int k = ks[i % 3];
            const double ceiling = 1e6 * (model == MFM_MODEL_FFM ? train_ceiling_ffm : train_ceiling_fm)[shape][i % 3];
            mfm_model *init = NULL;
            mfm_params p;
            mfm_error e;
            if (!(only.models >> model & 1) || (only.k && k != only.k)) continue;
            memset(&p, 0, sizeof p);
            p.model = model, p.k = k, p.learning_rate = 0.05, p.optimizer = (mfm_optimizer)only.optimizer;
            bench_check(mfm_model_create(&p, train.n_features, train.n_fields, 1, &init, &e), &e, "create");
            for (b = 0; b < 3; b++) {
                double cpu = NAN, cpu_call, gpu, gpu_call, det, det_call, loss_cpu, loss, loss_det;
                if (only.batch && batches[b] != only.batch) continue;
                if (only.n_gpus) {
                    double first_fast = NAN, first_det = NAN; /* the first count's rates, the ratios' base */
                    int g;
                    printf("%-7s %-5s %3d %6d", shape == 0 ? "Criteo" : "Avazu", mfm_model_type_name((mfm_model_type)model), k, batches[b]);
                    for (g = 0; g < only.n_gpus; g++) {
                        train_cell(init, &dtrain, &dtest, MFM_BACKEND_CUDA, batches[b], 0, 1, only.gpus[g], &gpu, &gpu_call, &loss);
                        det = NAN;
                        if (!only.fast_only) train_cell(init, &dtrain, &dtest, MFM_BACKEND_CUDA, batches[b], 1, 1, only.gpus[g], &det, &det_call, &loss_det);
                        if (isnan(first_fast)) first_fast = gpu; /* the first count that ran, each mode its own */
                        if (isnan(first_det)) first_det = det;
                        printf(" | %d: %10.0f %5.2fx %8.5f", only.gpus[g], gpu, gpu / first_fast, loss);
                        if (!only.fast_only) printf(" %10.0f %5.2fx", det, det / first_det);
                        fflush(stdout);
                    }
                    printf("\n");
                    continue;
                }
                if (only.cpu) train_cell(init, &dhead, NULL, MFM_BACKEND_CPU, batches[b], 0, 2, 0, &cpu, &cpu_call, &loss_cpu);
                train_cell(init, &dtrain, &dtest, MFM_BACKEND_CUDA, batches[b], 0, 1, 0, &gpu, &gpu_call, &loss);
                train_cell(init, &dtrain, &dtest, MFM_BACKEND_CUDA, batches[b], 1, 1, 0, &det, &det_call, &loss_det);
                printf("%-7s %-5s %3d %6d | %10.0f | %11.0f %11.0f %5.1f%% %8.5f | %11.0f %5.0f%% %8.5f\n", shape == 0 ? "Criteo" : "Avazu", mfm_model_type_name((mfm_model_type)model), k,
                       batches[b], cpu, gpu, gpu_call, 100 * gpu / ceiling, loss, det, 100 * det / gpu, loss_det);
                fflush(stdout);
            }
            mfm_model_free(init);
        }
        synth_free(&train), synth_free(&test), synth_free(&head);
    }
    printf("GPU rows/s: the second epoch's pass (model and rows on the device; its order was made while the first ran); with copies: the whole\n"
           "mfm_fit call of two epochs, uploads and download included. Logloss: after the GPU's two epochs.\n"
           "%% ceil: of the AdaGrad training ceiling of docs/PERFORMANCE.md (FFM: bytes at 2.8 TB/s; FM, FwFM: FM's record read-modify-write).\n");
}

int main(int argc, char **argv) {
    static const mfm_model_type models[] = {MFM_MODEL_FM, MFM_MODEL_FFM, MFM_MODEL_FWFM};
    static const int ks[] = {4, 8, 16};
    uint64_t n_rows = 2000000;
    uint32_t n_features = 1000000;
    mfm_cuda_info info;
    mfm_error e;
    uint64_t train_rows = 10000000, cpu_rows = 200000;
    int i, shape, quick = 0, what = 3; /* what: 1 prediction, 2 training, 3 both */
    cell_filter only;
    memset(&only, 0, sizeof only);
    only.shape = -1, only.models = ~0, only.cpu = 1, only.optimizer = MFM_OPTIMIZER_ADAGRAD;
    for (i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--probe")) return probe();
        if (!strcmp(argv[i], "--rows") && i + 1 < argc) n_rows = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--train-rows") && i + 1 < argc) train_rows = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--features") && i + 1 < argc) n_features = (uint32_t)strtoul(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--shape") && i + 1 < argc) only.shape = !strcmp(argv[++i], "avazu");
        else if (!strcmp(argv[i], "--model") && i + 1 < argc) {
            char *name = argv[++i];
            only.models = 0;
            for (name = strtok(name, ","); name; name = strtok(NULL, ",")) {
                const int model = bench_parse_model(name);
                if (model < 0) {
                    fprintf(stderr, "--model: unknown model '%s' (fm, ffm, fwfm)\n", name);
                    return 2;
                }
                only.models |= 1 << model;
            }
        } else if (!strcmp(argv[i], "--k") && i + 1 < argc) only.k = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--batch") && i + 1 < argc) only.batch = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--optimizer") && i + 1 < argc) {
            const char *name = argv[++i];
            if ((only.optimizer = bench_parse_optimizer(name)) < 0) {
                fprintf(stderr, "gpu: --optimizer %s is not an optimizer (adagrad, rowwise-adagrad, sgd, adam, ftrl)\n", name);
                return 2;
            }
        }
        else if (!strcmp(argv[i], "--gpu-only")) only.cpu = 0;
        else if (!strcmp(argv[i], "--fast-only")) only.fast_only = 1;
        else if (!strcmp(argv[i], "--gpus") && i + 1 < argc) { /* 1,2,4: training on that many GPUs, side by side */
            char *c = argv[++i];
            while (*c && only.n_gpus < MFM_MAX_DEVICES) {
                only.gpus[only.n_gpus++] = (int)strtol(c, &c, 10);
                if (*c == ',') c++;
            }
            what = 2;
        }
        else if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--predict")) what = 1;
        else if (!strcmp(argv[i], "--train")) what = 2;
    }
    if (quick) n_rows = train_rows = 100000, n_features = 100000, cpu_rows = 20000;
    if (!mfm_cuda_available()) {
        mfm_cuda_get_info(0, &info, &e);
        printf("bench-gpu: skipped: %s\n", e.message);
        return 0;
    }
    /* start-up probes in fresh processes, with a cache folder of their own, empty at first */
    setenv("MFM_CACHE_DIR", "build/bench-gpu-cache", 1);
    if (system("rm -rf build/bench-gpu-cache") != 0) fprintf(stderr, "could not empty build/bench-gpu-cache\n");
    first_prediction(argv[0], "cold start");
    first_prediction(argv[0], "warm start");
    bench_check(mfm_cuda_get_info(0, &info, &e), &e, "mfm_cuda_get_info");
    printf("device: %s (sm_%d%d, %.1f GB), driver CUDA %d.%d, NVRTC %d.%d; CPU: %d threads\n", info.device_name, info.compute_major, info.compute_minor,
           (double)info.total_memory / 1e9, info.driver_version / 1000, info.driver_version % 1000 / 10, info.nvrtc_version / 1000,
           info.nvrtc_version % 1000 / 10, mfm__cores());
    if (what & 2) train_table(train_rows, n_features, cpu_rows, only);
    if (!(what & 1)) return 0;
    printf("\n%-7s %-5s %3s | %12s %14s %14s | %10s %6s | %9s\n", "shape", "model", "k", "CPU rows/s", "GPU transfer", "GPU resident", "ceiling", "%", "max diff");
    for (shape = 0; shape < 2; shape++) {
        synth_spec spec;
        synth_data data;
        memset(&spec, 0, sizeof spec);
        spec.n_rows = n_rows;
        spec.n_fields = shape == 0 ? 39 : 22;
        spec.n_features = n_features;
        spec.per_field = 1;
        spec.zipf_s = 1.1;
        spec.signal = 1;
        spec.seed = 7;
        if (synth_generate(&spec, &data) != 0) {
            fprintf(stderr, "out of memory for the data\n");
            return 1;
        }
        for (i = 0; i < 9; i++) {
            const mfm_model_type model = models[i / 3];
            const int k = ks[i % 3];
            cell c;
            mfm_params p;
            float *cpu_out, *gpu_out;
            double t_cpu, t_tr, t_res, ceiling, diff = 0;
            uint64_t r;
            memset(&c, 0, sizeof c);
            memset(&p, 0, sizeof p);
            p.model = model;
            p.k = k;
            p.init_scale = 0.1;
            p.n_threads = mfm__cores();
            c.d = synth_csr(&data);
            cpu_out = (float *)malloc(n_rows * sizeof(float));
            gpu_out = (float *)malloc(n_rows * sizeof(float));
            if (!cpu_out || !gpu_out) {
                fprintf(stderr, "out of memory for the outputs\n");
                return 1;
            }
            bench_check(mfm_model_create(&p, data.n_features, data.n_fields, 1, &c.m, &e), &e, "create");
            t_cpu = best_of(1, &c, ON_CPU, cpu_out);
            bench_check(mfm_gpu_model_upload(c.m, 0, &c.gm, &e), &e, "upload");
            bench_check(mfm_gpu_data_upload(c.gm, &c.d, &c.gd, &e), &e, "data upload");
            t_tr = best_of(3, &c, ON_GPU_FROM_HOST, gpu_out);
            t_res = best_of(5, &c, ON_GPU_RESIDENT, gpu_out);
            for (r = 0; r < n_rows; r++) diff = fmax(diff, fabs((double)gpu_out[r] - cpu_out[r]));
            ceiling = 1e6 * (model == MFM_MODEL_FFM ? ceiling_ffm : ceiling_fm)[shape][i % 3];
            printf("%-7s %-5s %3d | %12.0f %14.0f %14.0f | %9.0fM %5.1f%% | %9.2g\n", shape == 0 ? "Criteo" : "Avazu", mfm_model_type_name((mfm_model_type)model), k,
                   n_rows / t_cpu, n_rows / t_tr, n_rows / t_res, ceiling / 1e6, 100 * (n_rows / t_res) / ceiling, diff);
            fflush(stdout);
            mfm_gpu_data_free(c.gd);
            mfm_gpu_model_free(c.gm);
            mfm_model_free(c.m);
            free(gpu_out);
            free(cpu_out);
        }
        synth_free(&data);
    }
    printf("\nrows: %llu per shape, one feature per field, Zipf 1.1 ids over %u features; times: best of 1 (CPU), 3 (transfer), 5 (resident) calls\n",
           (unsigned long long)n_rows, (unsigned)n_features);
    return 0;
}
