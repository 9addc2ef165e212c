/* serve_threads.c - one model in memory, many threads answering requests at once.

   compile (from examples/):  cc -std=c99 -O2 -I.. serve_threads.c -o serve_threads -lm -pthread
   run:                       ./serve_threads

   A trained model is saved without its optimizer state (what `mfm export --predict-only`
   writes), then opened once with mfm_model_map, the way a server starts: the parameters are
   verified and used where they lie in the file, without a copy. Eight threads then share that
   one model: each answers a few thousand single-row requests with mfm_predict, and every
   answer is compared with the prediction made before the threads started. A model may be used
   for prediction from any number of threads at once without a lock: mfm_predict only reads it,
   and a call of a few rows allocates nothing and starts no thread. (Training and
   mfm_model_set_params need a model of their own: mfm_model_load.)
   Threads: POSIX threads, or Windows threads under _WIN32.
*/
#define MODERN_FM_IMPLEMENTATION /* in exactly one file of a program, before the include */
#include "modern_fm.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(_WIN32)
#include <windows.h>
#else
#include <pthread.h>
#endif

enum { N_FIELDS = 5, PER_FIELD = 20, N_ROWS = 4000, N_THREADS = 8, REQUESTS_PER_THREAD = 4000 };

static uint64_t rng_state = 5;
static double uniform(void) { /* xorshift64*: enough randomness for toy data */
    rng_state ^= rng_state >> 12, rng_state ^= rng_state << 25, rng_state ^= rng_state >> 27;
    return (double)((rng_state * 2685821657736338717ull) >> 11) / 9007199254740992.0;
}

/* The toy data: one feature per field, labels from a planted pair (fields 0 and 1). */
static uint64_t row_offsets[N_ROWS + 1];
static uint32_t features[N_ROWS * N_FIELDS], fields[N_ROWS * N_FIELDS];
static float labels[N_ROWS];

static mfm_csr make_data(void) {
    double taste[N_FIELDS * PER_FIELD];
    mfm_csr d = {0};
    int r, j;
    for (j = 0; j < N_FIELDS * PER_FIELD; j++) taste[j] = 2 * uniform() - 1;
    for (r = 0; r < N_ROWS; r++) {
        row_offsets[r] = (uint64_t)r * N_FIELDS;
        for (j = 0; j < N_FIELDS; j++) {
            features[r * N_FIELDS + j] = (uint32_t)(j * PER_FIELD + (int)(uniform() * PER_FIELD));
            fields[r * N_FIELDS + j] = (uint32_t)j;
        }
        labels[r] = uniform() < 1 / (1 + exp(-3 * taste[features[r * N_FIELDS]] * taste[features[r * N_FIELDS + 1]])) ? 1.0f : 0.0f;
    }
    row_offsets[N_ROWS] = (uint64_t)N_ROWS * N_FIELDS;
    d.n_rows = N_ROWS;
    d.row_offsets = row_offsets;
    d.features = features;
    d.fields = fields;
    d.labels = labels;
    return d;
}

/* ---- the server's threads ------------------------------------------------------------------ */

typedef struct worker {
    const mfm_model *model;    /* shared by every thread, read only */
    const float *expected;     /* the answers made before the threads started */
    int id;
    int answered, wrong, failed;
} worker;

/* Each request is one row, as a client would send it: the thread copies it into a CSR of its
   own (offsets must start at 0, so a row of the big arrays cannot be used as it is). */
static void serve(worker *w) {
    int i, j;
    for (i = 0; i < REQUESTS_PER_THREAD; i++) {
        int row = (w->id * 7919 + i * 13) % N_ROWS; /* every thread asks for other rows */
        uint64_t offsets[2] = {0, N_FIELDS};
        uint32_t feat[N_FIELDS], fld[N_FIELDS];
        mfm_csr request = {0};
        mfm_error e;
        float p;
        for (j = 0; j < N_FIELDS; j++) feat[j] = features[row * N_FIELDS + j], fld[j] = fields[row * N_FIELDS + j];
        request.n_rows = 1;
        request.row_offsets = offsets;
        request.features = feat;
        request.fields = fld;
        if (mfm_predict(w->model, &request, MFM_OUTPUT_PROBABILITY, &p, 1, &e) != MFM_OK) {
            w->failed++;
            continue;
        }
        w->answered++;
        w->wrong += memcmp(&p, &w->expected[row], sizeof p) != 0;
    }
}

#if defined(_WIN32)
typedef HANDLE thread_handle;
static DWORD WINAPI thread_main(LPVOID arg) {
    serve((worker *)arg);
    return 0;
}
static int thread_start(thread_handle *t, worker *w) { return (*t = CreateThread(NULL, 0, thread_main, w, 0, NULL)) != NULL; }
static void thread_join(thread_handle t) {
    WaitForSingleObject(t, INFINITE);
    CloseHandle(t);
}
#else
typedef pthread_t thread_handle;
static void *thread_main(void *arg) {
    serve((worker *)arg);
    return NULL;
}
static int thread_start(thread_handle *t, worker *w) { return pthread_create(t, NULL, thread_main, w) == 0; }
static void thread_join(thread_handle t) { pthread_join(t, NULL); }
#endif

int main(void) {
    const char *path = "example_serve.mfm";
    static float expected[N_ROWS];
    mfm_csr data = make_data();
    mfm_params p = {0};
    mfm_model *trained = NULL, *model = NULL;
    worker workers[N_THREADS];
    thread_handle threads[N_THREADS];
    mfm_error e;
    int i, started = 0, answered = 0, wrong = 0, failed = 0;

    /* Train and save (another program's job, usually), then open as a server would. */
    p.model = MFM_MODEL_FFM;
    p.k = 4;
    p.n_epochs = 3;
    if (mfm_train(&p, &data, &trained, &e) != MFM_OK || mfm_model_save(trained, path, 0, &e) != MFM_OK ||
        mfm_model_map(path, &model, &e) != MFM_OK) {
        fprintf(stderr, "serve_threads: %s\n", e.message);
        mfm_model_free(trained);
        return 1;
    }
    mfm_model_free(trained);
    /* The server's own threads are the parallelism: each mfm_predict call runs on the thread
       that makes it (a bigger number would split big batches over more threads). */
    if (mfm_model_set_threads(model, 1, &e) != MFM_OK) {
        fprintf(stderr, "serve_threads: %s\n", e.message);
        mfm_model_free(model);
        return 1;
    }

    /* The answers to compare with: every row at once, before any thread starts. */
    if (mfm_predict(model, &data, MFM_OUTPUT_PROBABILITY, expected, N_ROWS, &e) != MFM_OK) {
        fprintf(stderr, "serve_threads: %s\n", e.message);
        mfm_model_free(model);
        return 1;
    }
    printf("mapped %s; %d threads now answer %d single-row requests each\n", path, N_THREADS, REQUESTS_PER_THREAD);

    for (i = 0; i < N_THREADS; i++) {
        memset(&workers[i], 0, sizeof workers[i]);
        workers[i].model = model;
        workers[i].expected = expected;
        workers[i].id = i;
        if (!thread_start(&threads[i], &workers[i])) break;
        started++;
    }
    for (i = 0; i < started; i++) { /* wait for all, then add up */
        thread_join(threads[i]);
        answered += workers[i].answered, wrong += workers[i].wrong, failed += workers[i].failed;
    }
    mfm_model_free(model); /* only once no thread uses it */

    printf("%d requests answered, %d failed, %d answers differ from the single-threaded ones\n", answered, failed, wrong);
    if (started != N_THREADS || failed || wrong || answered != N_THREADS * REQUESTS_PER_THREAD) {
        printf("every thread got the same answers: FAILED\n");
        return 1;
    }
    printf("every thread got the same answers: ok\n");
    return 0;
}
