/* synth.h - the project's synthetic CTR data generator (tests, benchmarks, demo).

   Rows look like Criteo click logs: n_fields fields, `per_field` distinct features per field
   per row, feature ids Zipf-distributed within their field (the popular ids scattered over the
   field's block of ids, as hashed ids are in real logs). Labels come from a planted,
   seeded second-order model, so a factorization machine has something real to find:

       score = sum_a b(i_a) x_a + signal * sum_{a<b} <u(i_a, f_b), u(i_b, f_a)> x_a x_b / sqrt(P)

   P is the number of pairs in the row. b(i) ~ N(0, 0.3^2). u(i, g) is the FFM-like hidden
   vector feature i uses against field g (length hidden_k). Three quarters of its variance is
   shared by all fields (what FM and FwFM can learn), one quarter is specific to g (what only
   FFM can learn, given the many more rows its n_fields times more parameters need; on
   Criteo-like data FFM's edge over FM is small too):
       u(i, g) = (sqrt(3/4) e(i) + sqrt(1/4) h(i, g)) * hidden_k^(-1/4),   e, h ~ N(0, I)
   scaled so that each dot product has unit variance, so the pair term's standard deviation is
   about `signal` whatever hidden_k is. Nothing of size features x fields is stored: e and h
   are rows of a small table of normal vectors picked by an integer hash of (seed, i, g).

   Targets: binary Bernoulli(sigmoid(score + c)) with c found by bisection so that the positive
   rate is about base_rate; regression score + N(0, 0.1^2); multiclass argmax over classes of
   (score_c + Gumbel noise), i.e. a sample of softmax(score_c), each class with its own hash
   salt. The same spec gives the same data run after run; across platforms it can differ only
   where libm's pow, exp or log round differently. Cost: about 4.5 s for 10^6 Criteo-shaped
   rows (39 fields, 741 pairs a row) on one core with gcc -O2.

   All functions are static inline, so a file may use any subset without warnings. Include
   after modern_fm.h's implementation include where there is one (this header includes the
   plain declarations for mfm_csr). */
#ifndef SYNTH_H
#define SYNTH_H

#include "../modern_fm.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct synth_spec {
    uint64_t n_rows;
    uint32_t n_fields;
    uint32_t n_features; /* total feature ids, split across fields in contiguous blocks */
    int per_field;       /* features per field per row (1 = one-hot Criteo style) */
    double zipf_s;       /* Zipf exponent of ids within a field (e.g. 1.1); 0 = uniform */
    int hidden_k;        /* rank of the hidden FFM-like interaction model; 0 = 4 */
    double signal;       /* standard deviation of the planted pair term */
    double base_rate;    /* binary: target positive rate (e.g. 0.22); 0 = 0.5 */
    int task;            /* 0 binary, 1 regression, 2 multiclass */
    int n_classes;       /* multiclass */
    int with_values;     /* 0: values NULL (all ones); 1: random values in [0.25, 1.75) */
    uint64_t seed;
} synth_spec;

typedef struct synth_data {
    uint64_t n_rows, nnz;
    uint64_t *offsets; /* n_rows + 1, offsets[0] == 0 */
    uint32_t *features, *fields;
    float *values, *labels; /* values NULL when the spec asked for none */
    uint32_t n_features, n_fields;
} synth_data;

/* ---- random numbers and hashing (our own, so a seed means the same data everywhere) ---- */

static inline uint64_t synth__mix(uint64_t z) { /* splitmix64 finalizer */
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

typedef struct synth__rng {
    uint64_t s[4];
} synth__rng;

static inline synth__rng synth__rng_seed(uint64_t seed, uint64_t stream) {
    synth__rng r;
    int i;
    for (i = 0; i < 4; i++) r.s[i] = synth__mix(seed + (stream * 4 + (uint64_t)i + 1) * 0x9E3779B97F4A7C15ull);
    return r;
}

static inline uint64_t synth__next(synth__rng *r) { /* xoshiro256** */
    uint64_t *s = r->s, x = s[1] * 5, out = ((x << 7) | (x >> 57)) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = (s[3] << 45) | (s[3] >> 19);
    return out;
}

static inline double synth__unit(synth__rng *r) { return (double)(synth__next(r) >> 11) * (1.0 / 9007199254740992.0); }

/* Uniform in (0, 1): safe to take logs of. */
static inline double synth__open_unit(synth__rng *r) { return ((double)(synth__next(r) >> 11) + 0.5) * (1.0 / 9007199254740992.0); }

static inline double synth__normal(synth__rng *r) {
    double u1 = synth__open_unit(r), u2 = synth__unit(r);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* ---- the planted model ---- */

#define SYNTH__TABLE_BITS 14 /* 16384 normal vectors: small enough to stay in cache */
#define SYNTH__SPECIFIC 0.25 /* share of the variance of u(i, g) that is specific to field g */

typedef struct synth__model {
    float *table;    /* (1 << SYNTH__TABLE_BITS) x k standard normals */
    uint64_t *key;   /* scratch: a hash of feature i_a of the current row (class salted) */
    uint64_t *fkey;  /* scratch: a random key per field (class salted) */
    int k;
    uint64_t seed;
    float mix;   /* sqrt(SPECIFIC / (1 - SPECIFIC)): u is proportional to e + mix * h */
    float scale; /* (1 - SPECIFIC) / sqrt(k): <u, u'> = scale * <e + mix h, e' + mix h'> */
} synth__model;

/* Table rows: e(i) is picked by key(i) alone, h(i, g) by one multiply of key(i) ^ fkey(g);
   the per-pair cost is what makes 10^6 Criteo rows take seconds, not minutes. */
static inline const float *synth__row(const synth__model *m, uint64_t h) { return m->table + (h >> (64 - SYNTH__TABLE_BITS)) * (uint64_t)m->k; }

static inline const float *synth__h(const synth__model *m, uint64_t key, uint64_t fkey) {
    return synth__row(m, (key ^ fkey) * 0xD1B54A32D192ED03ull);
}

/* b(i) ~ N(0, 0.3^2), approximated by the sum of four 16-bit uniforms (Irwin-Hall). */
static inline double synth__bias(uint64_t key) {
    uint64_t h = synth__mix(key + 0x632BE59BD9B4E019ull);
    double s = (double)(h & 0xFFFF) + (double)(h >> 16 & 0xFFFF) + (double)(h >> 32 & 0xFFFF) + (double)(h >> 48);
    return 0.3 * (s / 65536.0 - 2.0) * 1.7320508075688772; /* Irwin-Hall(4) has variance 4/12 */
}

/* sum_{a<b} <e(i_a) + mix h(i_a, f_b), e(i_b) + mix h(i_b, f_a)> x_a x_b, keys already set. */
static inline double synth__pairs(const synth__model *m, int k, uint32_t z, const uint32_t *fld, const float *x) {
    double pairs = 0;
    uint32_t a, b;
    int t;
    for (a = 0; a < z; a++) {
        const float *ea = synth__row(m, m->key[a]);
        for (b = a + 1; b < z; b++) {
            const float *eb = synth__row(m, m->key[b]);
            const float *hab = synth__h(m, m->key[a], m->fkey[fld[b]]), *hba = synth__h(m, m->key[b], m->fkey[fld[a]]);
            float dot = 0;
            for (t = 0; t < k; t++) dot += (ea[t] + m->mix * hab[t]) * (eb[t] + m->mix * hba[t]);
            pairs += (double)dot * (x ? (double)x[a] * x[b] : 1.0);
        }
    }
    return pairs;
}

/* The planted score of one row for class c. */
static inline double synth__score(const synth__model *m, uint32_t c, uint32_t n_fields, double signal, uint32_t z, const uint32_t *feat,
                                  const uint32_t *fld, const float *x) {
    const uint64_t salt = synth__mix(m->seed + c);
    double lin = 0, pairs;
    uint32_t a, g;
    for (g = 0; g < n_fields; g++) m->fkey[g] = synth__mix(salt ^ ((uint64_t)g + 1) * 0x9E3779B97F4A7C15ull);
    for (a = 0; a < z; a++) {
        m->key[a] = synth__mix(salt ^ (uint64_t)feat[a] * 0xBF58476D1CE4E5B9ull);
        lin += synth__bias(m->key[a]) * (x ? x[a] : 1.0f);
    }
    if (z < 2 || signal == 0) return lin;
    /* a constant k = 4 (the usual one) lets the compiler unroll the dot: twice as fast */
    pairs = m->k == 4 ? synth__pairs(m, 4, z, fld, x) : synth__pairs(m, m->k, z, fld, x);
    return lin + signal * pairs * m->scale / sqrt(0.5 * (double)z * (z - 1));
}

/* ---- Zipf ids within a field: CDF plus a guide table, so a draw costs O(1) on average ---- */

/* Fields of one size share their tables (there are two sizes at most), which keeps them in
   cache: with a table per field, cache misses made the draws cost as much as the labels. */
typedef struct synth__field {
    uint32_t start, size, mult; /* ids start .. start+size-1; rank r -> start + r*mult % size */
    double *cdf;                /* size values, cdf[size-1] == 1 */
    uint32_t *guide;            /* guide[j] = first rank with cdf > j / size */
} synth__field;

static inline uint32_t synth__gcd(uint32_t a, uint32_t b) {
    while (b) {
        uint32_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* Tables for the field's ranks; the rank -> id scramble spreads popular ids over the block the
   way hashed ids are spread in real logs (no artificial cache locality). */
static inline void synth__field_init(synth__field *f, const synth__field *prev, uint32_t start, uint32_t size, double s, double *cdf, uint32_t *guide) {
    double total = 0;
    uint32_t r, j;
    f->start = start;
    f->size = size;
    f->cdf = cdf;
    f->guide = guide;
    f->mult = (uint32_t)(size * 0.6180339887498949) | 1u;
    while (synth__gcd(f->mult, size) != 1) f->mult++;
    if (prev && prev->size == size) { /* same tables as the field before */
        f->cdf = prev->cdf;
        f->guide = prev->guide;
        return;
    }
    for (r = 0; r < size; r++) total += (cdf[r] = s > 0 ? pow((double)r + 1.0, -s) : 1.0);
    for (r = 0, j = 0; r < size; r++) {
        double acc = (r ? cdf[r - 1] : 0) + cdf[r] / total;
        cdf[r] = r + 1 == size ? 1.0 : acc;
        while (j < size && cdf[r] > (double)j / size) guide[j++] = r;
    }
}

static inline uint32_t synth__draw(const synth__field *f, synth__rng *rng) {
    double u = synth__unit(rng);
    uint32_t r = f->guide[(uint32_t)(u * f->size)];
    while (f->cdf[r] <= u) r++;
    return f->start + (uint32_t)((uint64_t)r * f->mult % f->size);
}

/* ---- public functions ---- */

static inline void synth_free(synth_data *d) {
    if (!d) return;
    free(d->offsets);
    free(d->features);
    free(d->fields);
    free(d->values);
    free(d->labels);
    memset(d, 0, sizeof *d);
}

/* Arrays for n rows and nnz non-zeros (values only when asked). 0 on success. */
static inline int synth__alloc(synth_data *d, uint64_t n, uint64_t nnz, int with_values) {
    memset(d, 0, sizeof *d);
    d->n_rows = n;
    d->nnz = nnz;
    d->offsets = (uint64_t *)malloc((n + 1) * sizeof *d->offsets);
    d->features = (uint32_t *)malloc((nnz ? nnz : 1) * sizeof *d->features);
    d->fields = (uint32_t *)malloc((nnz ? nnz : 1) * sizeof *d->fields);
    d->labels = (float *)malloc((n ? n : 1) * sizeof *d->labels);
    if (with_values) d->values = (float *)malloc((nnz ? nnz : 1) * sizeof *d->values);
    if (!d->offsets || !d->features || !d->fields || !d->labels || (with_values && !d->values)) {
        synth_free(d);
        return -2;
    }
    return 0;
}

/* The c that makes mean(sigmoid(score + c)) == rate over (a stride sample of) the scores. */
static inline double synth__calibrate(const float *score, uint64_t n, double rate) {
    uint64_t step = n > 50000 ? n / 50000 : 1, r;
    double lo = -60, hi = 60;
    int it;
    for (it = 0; it < 60; it++) {
        double c = 0.5 * (lo + hi), sum = 0;
        uint64_t count = 0;
        for (r = 0; r < n; r += step, count++) sum += 1.0 / (1.0 + exp(-(score[r] + c)));
        if (sum / (double)count < rate)
            lo = c;
        else
            hi = c;
    }
    return 0.5 * (lo + hi);
}

/* 0 on success, -1 for a bad spec, -2 when memory is short. */
static inline int synth_generate(const synth_spec *spec, synth_data *out) {
    const uint64_t n = spec->n_rows;
    const uint32_t F = spec->n_fields, P = (uint32_t)spec->per_field;
    const uint32_t z = (uint64_t)F * P <= UINT32_MAX ? F * P : 0;
    const uint32_t n_classes = spec->task == 2 ? (uint32_t)spec->n_classes : 1;
    const double rate = spec->base_rate > 0 ? spec->base_rate : 0.5;
    synth__model m;
    synth__field *fields;
    double *cdf;
    uint32_t *guide;
    synth__rng rng = synth__rng_seed(spec->seed, 1), noise = synth__rng_seed(spec->seed, 2), tab = synth__rng_seed(spec->seed, 3);
    uint64_t r, t;
    uint32_t f, c;
    memset(out, 0, sizeof *out);
    if (F == 0 || spec->per_field < 1 || spec->n_features / F < P || spec->hidden_k < 0 || spec->hidden_k > 1024 || spec->task < 0 ||
        spec->task > 2 || (spec->task == 2 && spec->n_classes < 2) || rate >= 1 || z == 0 || n > UINT64_MAX / z - 1)
        return -1;
    m.k = spec->hidden_k ? spec->hidden_k : 4;
    m.seed = synth__mix(spec->seed ^ 0x5EED5EED5EED5EEDull);
    m.mix = (float)sqrt(SYNTH__SPECIFIC / (1 - SYNTH__SPECIFIC));
    m.scale = (float)((1 - SYNTH__SPECIFIC) / sqrt((double)m.k));
    m.table = (float *)malloc(((size_t)1 << SYNTH__TABLE_BITS) * (size_t)m.k * sizeof(float));
    m.key = (uint64_t *)malloc(z * sizeof *m.key);
    m.fkey = (uint64_t *)malloc(F * sizeof *m.fkey);
    fields = (synth__field *)malloc(F * sizeof *fields);
    cdf = (double *)malloc(spec->n_features * sizeof *cdf);
    guide = (uint32_t *)malloc(spec->n_features * sizeof *guide);
    if (!m.table || !m.key || !m.fkey || !fields || !cdf || !guide || synth__alloc(out, n, n * z, spec->with_values) != 0) {
        free(m.table), free(m.key), free(m.fkey), free(fields), free(cdf), free(guide);
        return -2;
    }
    out->n_features = spec->n_features;
    out->n_fields = F;
    for (t = 0; t < ((uint64_t)1 << SYNTH__TABLE_BITS) * (uint64_t)m.k; t++) m.table[t] = (float)synth__normal(&tab);
    for (f = 0; f < F; f++) { /* the first n_features % F fields get one id more */
        uint32_t q = spec->n_features / F, extra = spec->n_features % F;
        uint32_t start = f * q + (f < extra ? f : extra), size = q + (f < extra);
        synth__field_init(&fields[f], f ? &fields[f - 1] : NULL, start, size, spec->zipf_s, cdf + start, guide + start);
    }
    for (r = 0; r < n; r++) {
        uint64_t base = r * z;
        uint32_t *feat = out->features + base, *fld = out->fields + base;
        float *x = out->values ? out->values + base : NULL;
        uint32_t j = 0, p, q;
        out->offsets[r] = base;
        for (f = 0; f < F; f++)
            for (p = 0; p < P; p++, j++) {
                int tries = 0;
                do { /* distinct ids within a field (a few retries are plenty for Zipf blocks) */
                    feat[j] = synth__draw(&fields[f], &rng);
                    for (q = j - p; q < j && feat[q] != feat[j]; q++) {}
                } while (q < j && ++tries < 64);
                fld[j] = f;
                if (x) x[j] = (float)(0.25 + 1.5 * synth__unit(&rng));
            }
        if (spec->task != 2) {
            double s = synth__score(&m, 0, F, spec->signal, z, feat, fld, x);
            out->labels[r] = (float)(spec->task == 1 ? s + 0.1 * synth__normal(&noise) : s);
        } else { /* Gumbel-max: argmax(s_c + G_c) is a sample of softmax(s) */
            double top = -HUGE_VAL;
            for (c = 0; c < n_classes; c++) {
                double v = synth__score(&m, c, F, spec->signal, z, feat, fld, x) - log(-log(synth__open_unit(&noise)));
                if (v > top) {
                    top = v;
                    out->labels[r] = (float)c;
                }
            }
        }
    }
    out->offsets[n] = n * z;
    if (spec->task == 0 && n > 0) {
        double shift = synth__calibrate(out->labels, n, rate);
        for (r = 0; r < n; r++) out->labels[r] = synth__unit(&noise) < 1.0 / (1.0 + exp(-(out->labels[r] + shift))) ? 1.0f : 0.0f;
    }
    free(m.table), free(m.key), free(m.fkey), free(fields), free(cdf), free(guide);
    return 0;
}

/* Copies rows [row_begin, row_end) into a new synth_data (rebased offsets): train/test splits.
   0 on success, -1 for a bad range, -2 when memory is short. */
static inline int synth_split(const synth_data *d, uint64_t row_begin, uint64_t row_end, synth_data *out) {
    uint64_t lo, nnz, r;
    memset(out, 0, sizeof *out);
    if (row_begin > row_end || row_end > d->n_rows) return -1;
    lo = d->offsets[row_begin];
    nnz = d->offsets[row_end] - lo;
    if (synth__alloc(out, row_end - row_begin, nnz, d->values != NULL) != 0) return -2;
    out->n_features = d->n_features;
    out->n_fields = d->n_fields;
    for (r = row_begin; r <= row_end; r++) out->offsets[r - row_begin] = d->offsets[r] - lo;
    memcpy(out->features, d->features + lo, nnz * sizeof *out->features);
    memcpy(out->fields, d->fields + lo, nnz * sizeof *out->fields);
    if (d->values) memcpy(out->values, d->values + lo, nnz * sizeof *out->values);
    memcpy(out->labels, d->labels + row_begin, (row_end - row_begin) * sizeof *out->labels);
    return 0;
}

/* The whole data set as a borrowed mfm_csr (with n_features and n_fields set). */
static inline mfm_csr synth_csr(const synth_data *d) {
    mfm_csr v;
    memset(&v, 0, sizeof v);
    v.n_rows = d->n_rows;
    v.row_offsets = d->offsets;
    v.features = d->features;
    v.fields = d->fields;
    v.values = d->values;
    v.labels = d->labels;
    v.n_features = d->n_features;
    v.n_fields = d->n_fields;
    return v;
}

/* The first row_end rows as a borrowed view. mfm_csr needs row_offsets[0] == 0, which a
   borrowed view of later rows cannot have, so row_begin must be 0: any other row_begin gives
   an empty view (n_rows 0). Use synth_split for other ranges. */
static inline mfm_csr synth_view(const synth_data *d, uint64_t row_begin, uint64_t row_end) {
    mfm_csr v = synth_csr(d);
    v.n_rows = row_begin == 0 && row_end <= d->n_rows ? row_end : 0;
    return v;
}

#endif /* SYNTH_H */
