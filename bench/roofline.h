/* roofline.h - the memory ceiling that training runs against (bench --roofline).

   Three tests, each on one thread and on n at once, every thread on its own share of the
   memory, which it touches first (so that a machine of several NUMA nodes places each share
   near the thread that uses it):

   - copy: STREAM's copy, b[i] = a[i] over two 1 GiB arrays; GB/s counts the bytes read and
     written (2 x 8 bytes per element), as STREAM does.
   - random read-modify-write: blocks of `block` bytes at random places of a 2 GiB table, each
     read, changed and written back; the addresses do not depend on the data, so a core keeps
     many misses in flight, as training does with the rows' coordinates. GB/s counts the bytes
     read and written (2 x block). Training moves its parameters and state this way: with the
     block a model touches per feature (FFM k = 4: a feature's 39 fields x 32 bytes), this is the
     ceiling of its rows/s, bytes per row read and written over this rate.
   - latency: a pointer chase over a random cycle of cache lines in 1 GiB: one miss at a time,
     ns per load; with n threads, each chases its own cycle (latency under load).

   Include after modern_fm.h (which asks for POSIX threads). */
#ifndef BENCH_ROOFLINE_H
#define BENCH_ROOFLINE_H

#include "common.h"

#include <pthread.h>
#include <stdint.h>
#include <string.h>

typedef struct roof_job {
    int kind; /* 0 copy, 1 random read-modify-write, 2 latency */
    int thread, n_threads;
    unsigned char *a, *b; /* the shared arrays; each thread works on its share */
    uint64_t bytes;       /* of a (and b) */
    uint64_t block;       /* kind 1 */
    uint64_t ops;         /* kind 1: blocks; kind 2: loads */
    pthread_barrier_t *start;
    double seconds; /* from the barrier to the end of this thread's work */
    uint64_t sink;  /* keeps the compiler from dropping the loads */
} roof_job;

static uint64_t roof_next(uint64_t *s) { /* xorshift64* */
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ull;
}

/* The thread's share of the bytes, rounded down to whole 4 KiB pages. */
static void roof_share(const roof_job *j, uint64_t *lo, uint64_t *hi) {
    const uint64_t pages = j->bytes / 4096;
    *lo = pages * (uint64_t)j->thread / (uint64_t)j->n_threads * 4096;
    *hi = pages * (uint64_t)(j->thread + 1) / (uint64_t)j->n_threads * 4096;
}

static void *roof_thread(void *arg) {
    roof_job *j = (roof_job *)arg;
    uint64_t lo, hi, i, sink = 0, seed = 0x9E3779B97F4A7C15ull * (uint64_t)(j->thread + 1);
    double t0;
    roof_share(j, &lo, &hi);
    /* first touch, outside the timing */
    memset(j->a + lo, 1, hi - lo);
    if (j->b) memset(j->b + lo, 2, hi - lo);
    if (j->kind == 2) { /* a random cycle through the share's lines: Sattolo's shuffle of their order */
        const uint64_t lines = (hi - lo) / 64;
        uint64_t *order = (uint64_t *)malloc(lines * sizeof *order);
        if (!order) exit(1);
        for (i = 0; i < lines; i++) order[i] = i;
        for (i = lines - 1; i > 0; i--) {
            const uint64_t r = roof_next(&seed) % i, t = order[i];
            order[i] = order[r];
            order[r] = t;
        }
        for (i = 0; i < lines; i++) *(unsigned char **)(j->a + lo + order[i] * 64) = j->a + lo + order[(i + 1) % lines] * 64;
        free(order);
    }
    pthread_barrier_wait(j->start);
    t0 = bench_now();
    if (j->kind == 0) {
        const uint64_t *src = (const uint64_t *)(j->a + lo);
        uint64_t *dst = (uint64_t *)(j->b + lo), n = (hi - lo) / 8;
        for (i = 0; i < n; i++) dst[i] = src[i];
        sink = dst[n / 2];
    } else if (j->kind == 1) {
        const uint64_t blocks = (hi - lo) / j->block, floats = j->block / 4;
        for (i = 0; i < j->ops; i++) {
            float *blk = (float *)(j->a + lo + (roof_next(&seed) % blocks) * j->block);
            uint64_t f;
            for (f = 0; f < floats; f++) blk[f] += 1.0f;
        }
    } else {
        unsigned char *p = j->a + lo;
        for (i = 0; i < j->ops; i++) p = *(unsigned char **)p;
        sink = (uint64_t)(uintptr_t)p;
    }
    j->seconds = bench_now() - t0;
    j->sink = sink;
    return NULL;
}

/* Runs fn(jobs[t]) for t = 0 .. n-1, each on its own thread (0 on the caller), and waits for
   all; jobs are `size` bytes apart. */
static void roof_run(void *(*fn)(void *), void *jobs, size_t size, int n) {
    pthread_t threads[256];
    int t;
    for (t = 1; t < n; t++)
        if (pthread_create(&threads[t], NULL, fn, (char *)jobs + (size_t)t * size) != 0) {
            fprintf(stderr, "bench: could not start a thread\n");
            exit(1);
        }
    fn(jobs);
    for (t = 1; t < n; t++) pthread_join(threads[t], NULL);
}

/* 2 MB aligned, asking Linux for huge pages, as the library's tables do (mfm__table_alloc): with
   4 KB pages most random accesses would first miss the TLB. */
static unsigned char *roof_alloc(uint64_t bytes) {
    void *p = NULL;
    if (posix_memalign(&p, (size_t)2 << 20, bytes) != 0) return NULL;
#if defined(__linux__)
    posix_madvise(p, bytes, 14); /* MADV_HUGEPAGE */
#endif
    return (unsigned char *)p;
}

/* One test on n threads: GB/s (copy, random), or ns per load (latency). The arrays are
   allocated, touched and freed per call, so that every test starts from the same state. */
static double roof_test(int kind, int n_threads, uint64_t block) {
    const uint64_t bytes = kind == 1 ? (uint64_t)2 << 30 : (uint64_t)1 << 30;
    roof_job jobs[256];
    pthread_barrier_t start;
    unsigned char *a = roof_alloc(bytes), *b = kind == 0 ? roof_alloc(bytes) : NULL;
    double slowest = 0, moved = 0;
    int t;
    if (!a || (kind == 0 && !b) || n_threads < 1 || n_threads > 256) {
        fprintf(stderr, "bench: no memory for the roofline tests\n");
        exit(1);
    }
    pthread_barrier_init(&start, NULL, (unsigned)n_threads);
    for (t = 0; t < n_threads; t++) {
        roof_job *j = &jobs[t];
        memset(j, 0, sizeof *j);
        j->kind = kind, j->thread = t, j->n_threads = n_threads, j->a = a, j->b = b, j->bytes = bytes, j->block = block, j->start = &start;
        j->ops = kind == 1 ? ((uint64_t)256 << 20) / block : (uint64_t)1 << 22; /* 256 MB of blocks; 4M loads */
    }
    roof_run(roof_thread, jobs, sizeof jobs[0], n_threads);
    pthread_barrier_destroy(&start);
    for (t = 0; t < n_threads; t++) {
        uint64_t lo, hi;
        roof_share(&jobs[t], &lo, &hi);
        if (jobs[t].seconds > slowest) slowest = jobs[t].seconds;
        moved += kind == 0 ? 2.0 * (double)(hi - lo) : kind == 1 ? 2.0 * (double)jobs[t].ops * (double)block : 0;
    }
    free(a);
    free(b);
    if (kind == 2) { /* the mean over threads of ns per load */
        double ns = 0;
        for (t = 0; t < n_threads; t++) ns += 1e9 * jobs[t].seconds / (double)jobs[t].ops;
        return ns / n_threads;
    }
    return moved / slowest / 1e9;
}

/* The best of three runs (the fastest; for latency the lowest). */
static double roof_best(int kind, int n_threads, uint64_t block) {
    double best = 0;
    int rep;
    for (rep = 0; rep < 3; rep++) {
        const double v = roof_test(kind, n_threads, block);
        if (rep == 0 || (kind == 2 ? v < best : v > best)) best = v;
    }
    return best;
}

/* ---- replay: the memory work of training alone ----

   The three tests above touch memory uniformly; training's rows do not (Criteo's ids are
   Zipf-distributed, so the common features stay in cache). The replay reads and writes back
   the cache lines each training row touches under AdaGrad, in a table laid out as the model's,
   with no arithmetic but one add per line: for each of the row's features, FFM's vectors of 2k
   floats for every field (the row touches all but one), FM's and FwFM's v and w (2k + 2 floats
   in one line at k = 4), and FwFM's r of each field pair. With n threads the rows are split in
   contiguous shares, as Hogwild splits them, and the threads race on the shared lines as its
   threads do, and the next row's lines are asked for ahead, as the trainer asks. Its rows/s are
   the ceiling of training at batch 1 on this data and machine. */
typedef struct roof_replay {
    const mfm_csr *d;
    int model, k, thread, n_threads;
    float *table, *pairs; /* pairs: FwFM's fields x fields blocks of 2 */
    uint64_t stride;      /* floats per feature */
    pthread_barrier_t *start;
    double seconds;
} roof_replay;

static void *roof_replay_thread(void *arg) {
    roof_replay *j = (roof_replay *)arg;
    const mfm_csr *d = j->d;
    const uint64_t lo = d->n_rows * (uint64_t)j->thread / (uint64_t)j->n_threads, hi = d->n_rows * (uint64_t)(j->thread + 1) / (uint64_t)j->n_threads;
    const uint64_t per_thread = (uint64_t)d->n_features / (uint64_t)j->n_threads, vec = 2 * (uint64_t)j->k;
    uint64_t r, x, y, t;
    double t0;
    memset(j->table + per_thread * (uint64_t)j->thread * j->stride, 0, per_thread * j->stride * sizeof(float)); /* first touch of a share */
    pthread_barrier_wait(j->start);
    t0 = bench_now();
    for (r = lo; r < hi; r++) {
        const uint64_t a0 = d->row_offsets[r], a1 = d->row_offsets[r + 1];
        if (r + 1 < hi) /* the next row's lines asked for now, as the trainer asks (mfm__prefetch_row) */
            for (x = a1; x < d->row_offsets[r + 2]; x++)
                for (t = 0; t < j->stride; t += 16) __builtin_prefetch(j->table + (uint64_t)d->features[x] * j->stride + t, 1);
        for (x = a0; x < a1; x++) {
            float *feature = j->table + (uint64_t)d->features[x] * j->stride;
            if (j->model == MFM_MODEL_FFM) { /* the vectors for the row's other fields lie all over the feature's lines */
                for (t = 0; t < j->stride; t += 16) feature[t] += 1.0f;
            } else {
                for (t = 0; t < vec + 2; t += 16) feature[t] += 1.0f;
                if (j->model == MFM_MODEL_FWFM)
                    for (y = x + 1; y < a1; y++) {
                        float *pair = j->pairs + 2 * ((uint64_t)d->fields[x] * d->n_fields + d->fields[y]);
                        pair[0] += 1.0f;
                        pair[1] += 1.0f;
                    }
            }
        }
    }
    j->seconds = bench_now() - t0;
    return NULL;
}

/* The replay's rows/s on n threads (the best of three). */
static double roof_replay_rate(const mfm_csr *d, int model, int k, int n_threads) {
    const uint64_t stride = model == MFM_MODEL_FFM ? (uint64_t)d->n_fields * 2 * (uint64_t)k + 16 : (2 * (uint64_t)k + 2 + 15) / 16 * 16;
    const uint64_t bytes = ((uint64_t)d->n_features * stride * sizeof(float) + ((uint64_t)2 << 20) - 1) / ((uint64_t)2 << 20) * ((uint64_t)2 << 20);
    float *table = (float *)roof_alloc(bytes), *pairs = (float *)calloc((size_t)d->n_fields * d->n_fields * 2, sizeof(float));
    roof_replay jobs[256];
    pthread_barrier_t start;
    double best = 0;
    int rep, t;
    if (!table || !pairs || n_threads < 1 || n_threads > 256) {
        fprintf(stderr, "bench: no memory for the replay\n");
        exit(1);
    }
    memset(table, 0, bytes); /* the shares' first touch is the threads'; this clears the remainder once */
    for (rep = 0; rep < 3; rep++) {
        double slowest = 0;
        pthread_barrier_init(&start, NULL, (unsigned)n_threads);
        for (t = 0; t < n_threads; t++) {
            roof_replay *j = &jobs[t];
            j->d = d, j->model = model, j->k = k, j->thread = t, j->n_threads = n_threads, j->table = table, j->pairs = pairs, j->stride = stride, j->start = &start;
        }
        roof_run(roof_replay_thread, jobs, sizeof jobs[0], n_threads);
        pthread_barrier_destroy(&start);
        for (t = 0; t < n_threads; t++)
            if (jobs[t].seconds > slowest) slowest = jobs[t].seconds;
        if ((double)d->n_rows / slowest > best) best = (double)d->n_rows / slowest;
    }
    free(table);
    free(pairs);
    return best;
}

#endif /* BENCH_ROOFLINE_H */
