/* gpu.c - use the GPU where there is one, the CPU where there is none, with the same code.

   compile (from examples/):  cc -std=c99 -O2 -I.. -I../.deps/xxhash gpu.c -o gpu -lm
   run:                       ./gpu

   The build needs no CUDA: the driver and NVRTC are loaded when the program runs, and the
   kernels come with modern_fm_kernels.h (beside modern_fm.h). xxhash.h (header-only, Debian's
   libxxhash-dev; `make` puts a copy in .deps/xxhash) keys the compiled-kernel cache.

   1. asks whether a GPU is usable, and prints the device, or the reason there is none
   2. trains and evaluates with backend AUTO: on the GPU when there is one, else on the CPU
   3. with a GPU: uploads the model and the data once (a resident model) and predicts with
      nothing but the outputs crossing the bus, then checks the answers against the CPU's
   4. with two GPUs or more and NCCL (libnccl.so.2, found at run time like the driver): trains
      the same model on all of them at once (params.n_devices), each GPU holding a share of
      every vector's k factors
*/
#define MODERN_FM_IMPLEMENTATION /* in exactly one file of a program, before the include */
#include "modern_fm.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

enum { N_FIELDS = 8, PER_FIELD = 50, N_ROWS = 10000 }; /* rows of the training set and of the test set */

static uint64_t rng_state = 9;
static double uniform(void) { /* xorshift64*: enough randomness for toy data */
    rng_state ^= rng_state >> 12, rng_state ^= rng_state << 25, rng_state ^= rng_state >> 27;
    return (double)((rng_state * 2685821657736338717ull) >> 11) / 9007199254740992.0;
}

/* Toy clicks: one feature per field, labels from planted pairs (fields 0 x 1 and 2 x 3). */
typedef struct rows {
    uint64_t row_offsets[N_ROWS + 1];
    uint32_t features[N_ROWS * N_FIELDS], fields[N_ROWS * N_FIELDS];
    float labels[N_ROWS];
    mfm_csr view;
} rows;
static rows train, test; /* static: too big for some stacks */
static double taste[N_FIELDS * PER_FIELD];
static float cpu_answers[N_ROWS], gpu_answers[N_ROWS];

static void make_rows(rows *t) {
    int r, j;
    for (r = 0; r < N_ROWS; r++) {
        const uint32_t *f = t->features + r * N_FIELDS;
        t->row_offsets[r] = (uint64_t)r * N_FIELDS;
        for (j = 0; j < N_FIELDS; j++) {
            t->features[r * N_FIELDS + j] = (uint32_t)(j * PER_FIELD + (int)(uniform() * PER_FIELD));
            t->fields[r * N_FIELDS + j] = (uint32_t)j;
        }
        t->labels[r] = uniform() < 1 / (1 + exp(-1.5 * (taste[f[0]] * taste[f[1]] + taste[f[2]] * taste[f[3]]))) ? 1.0f : 0.0f;
    }
    t->row_offsets[N_ROWS] = (uint64_t)N_ROWS * N_FIELDS;
    t->view = (mfm_csr){0};
    t->view.n_rows = N_ROWS;
    t->view.row_offsets = t->row_offsets;
    t->view.features = t->features;
    t->view.fields = t->fields;
    t->view.labels = t->labels;
}

/* With a GPU: a resident model and resident data, then the CPU's answers to compare. */
static int predict_resident(mfm_model *model, const mfm_csr *data) {
    mfm_gpu_model *gpu_model = NULL;
    mfm_gpu_data *gpu_data = NULL;
    mfm_params on_cpu;
    mfm_cuda_info info;
    mfm_error e;
    double largest = 0;
    int r, ok = 0;

    /* A server makes the device ready when it starts (the driver's context takes a quarter of a
       second), so that no request waits for it. The first GPU call would do it otherwise. */
    if (mfm_cuda_prepare(0, &e) != MFM_OK) {
        printf("the GPU could not be made ready: %s\n", e.message);
        goto done;
    }
    if (mfm_gpu_model_upload(model, 0, &gpu_model, &e) != MFM_OK || mfm_gpu_data_upload(gpu_model, data, &gpu_data, &e) != MFM_OK ||
        mfm_gpu_predict_resident(gpu_model, gpu_data, MFM_OUTPUT_PROBABILITY, gpu_answers, N_ROWS, &e) != MFM_OK) {
        printf("resident prediction failed: %s\n", e.message);
        goto done;
    }
    if (mfm_cuda_get_info(0, &info, &e) == MFM_OK && info.kernels_ready)
        printf("context in %.3f s; kernels: %s for sm_%d, %s in %.3f s\n", info.context_seconds, info.kernels.kind, info.kernels.arch,
               info.kernels.from_cache ? "read from the cache" : "compiled by NVRTC", info.kernels.seconds);

    /* The same model on the CPU: only the backend changes (mfm_model_set_params). */
    on_cpu = *mfm_model_params(model);
    on_cpu.backend = MFM_BACKEND_CPU;
    if (mfm_model_set_params(model, &on_cpu, &e) != MFM_OK ||
        mfm_predict(model, data, MFM_OUTPUT_PROBABILITY, cpu_answers, N_ROWS, &e) != MFM_OK) {
        printf("CPU prediction failed: %s\n", e.message);
        goto done;
    }
    for (r = 0; r < N_ROWS; r++) {
        double d = fabs((double)gpu_answers[r] - cpu_answers[r]);
        largest = d > largest ? d : largest;
    }
    /* Floats summed in another order differ in their last bits, no more. */
    ok = largest < 1e-5;
    printf("resident GPU predictions agree with the CPU's (largest difference %.1e): %s\n", largest, ok ? "ok" : "FAILED");
done:
    mfm_gpu_data_free(gpu_data); /* data before the model it belongs to */
    mfm_gpu_model_free(gpu_model);
    return ok;
}

int main(void) {
    mfm_params p = {0};
    mfm_model *model = NULL;
    mfm_cuda_info info;
    mfm_metrics metrics = {0};
    mfm_error e;
    int have_gpu = mfm_cuda_available(), ok = 1, j;

    for (j = 0; j < N_FIELDS * PER_FIELD; j++) taste[j] = 3.4 * uniform() - 1.7;
    make_rows(&train);
    make_rows(&test);

    /* 1. Is there a GPU? mfm_cuda_get_info says which, or why not, in one sentence. */
    if (mfm_cuda_get_info(0, &info, &e) == MFM_OK)
        printf("GPU: %s (compute %d.%d, %.1f GiB, driver CUDA %d.%d)\n", info.device_name, info.compute_major, info.compute_minor,
               (double)info.total_memory / (1024.0 * 1024.0 * 1024.0), info.driver_version / 1000, info.driver_version % 1000 / 10);
    else
        printf("no GPU: %s\n", e.message);

    /* 2. Backend AUTO: the GPU when a driver and a device are there, else the CPU. A failure
          on a GPU that is there is an error, never a silent fallback. */
    p.model = MFM_MODEL_FFM;
    p.k = 4;
    p.n_epochs = 15;    /* on rows of unit length (the default) these pure interactions take
                           about 15 passes; 5 learn little (AUC 0.57) */
    p.batch_size = 256; /* GPUs want batches; the CPU is content with them too */
    p.backend = MFM_BACKEND_AUTO;
    if (mfm_train(&p, &train.view, &model, &e) != MFM_OK || mfm_evaluate(model, &test.view, &metrics, &e) != MFM_OK) {
        fprintf(stderr, "gpu: %s\n", e.message);
        mfm_model_free(model);
        return 1;
    }
    printf("backend AUTO trained FFM on the %s: test AUC %.4f, logloss %.4f\n", have_gpu ? "GPU" : "CPU", metrics.auc, metrics.logloss);

    /* 3. A resident model, for many predictions without uploading again. */
    if (have_gpu)
        ok = predict_resident(model, &test.view);
    else
        printf("no resident model without a GPU; the CPU did the work: ok\n");
    mfm_model_free(model);

    /* 4. Several GPUs each hold a share of the k factors (so at most k GPUs), score every row
          together and take the steps one GPU would take (the same model, up to the order of
          float additions); mfm_evaluate then shares the rows out. */
    if (have_gpu && mfm_cuda_get_info(0, &info, &e) == MFM_OK && info.n_devices >= 2 && info.nccl_version) {
        mfm_metrics on_all = {0};
        p.backend = MFM_BACKEND_CUDA;
        p.n_devices = info.n_devices < p.k ? info.n_devices : p.k; /* p.devices NULL: GPUs 0, 1, ... */
        if (mfm_train(&p, &train.view, &model, &e) != MFM_OK || mfm_evaluate(model, &test.view, &on_all, &e) != MFM_OK) {
            printf("training on %d GPUs failed: %s\n", p.n_devices, e.message);
            ok = 0;
        } else {
            printf("trained FFM on %d GPUs at once: test AUC %.4f (one GPU: %.4f)\n", p.n_devices, on_all.auc, metrics.auc);
        }
        mfm_model_free(model);
    }
    return ok ? 0 : 1;
}
