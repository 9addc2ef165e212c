/* testdata.c - see testdata.h. */
#include "testdata.h"
#include "scratch.h"

#include <math.h>
#include <stdio.h>

/* splitmix64: small, and the same sequence everywhere */
static uint64_t td_next(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static double td_uniform(uint64_t *s) { return (double)(td_next(s) >> 11) * (1.0 / 9007199254740992.0); }
static uint32_t td_below(uint64_t *s, uint32_t n) { return (uint32_t)(td_uniform(s) * n); }

/* The planted signal's sign of value v of field f: +1 for half of 0..n-1 and -1 for the other
   half, since (7v + 3f) mod n runs over 0..n-1 when 7 does not divide n (larger v wrap). */
static double td_sign(uint32_t f, uint32_t v, uint32_t n) { return (v * 7 + f * 3) % n < n / 2 ? 1.0 : -1.0; }

/* Counts what it writes: bytes, and the largest id and field. */
typedef struct td_out {
    FILE *f;
    testdata_facts *facts;
    int ok;
} td_out;

static void td_put(td_out *o, const char *text) {
    size_t n = 0;
    while (text[n]) n++;
    if (fwrite(text, 1, n, o->f) != n) o->ok = 0;
    o->facts->bytes += n;
}

static void td_label(td_out *o, int positive, int quirks) {
    td_put(o, positive ? (quirks & TESTDATA_PLUS_MINUS_LABELS ? "+1" : "1") : (quirks & TESTDATA_PLUS_MINUS_LABELS ? "-1" : "0"));
    o->facts->positives += (uint64_t)positive;
}

static void td_feature(td_out *o, int ffm, uint32_t field, uint32_t id, const char *value) {
    char buf[64];
    if (ffm)
        snprintf(buf, sizeof buf, " %u:%u:%s", (unsigned)field, (unsigned)id, value);
    else
        snprintf(buf, sizeof buf, " %u:%s", (unsigned)id, value);
    td_put(o, buf);
    o->facts->nnz++;
    if (id + 1 > o->facts->n_features) o->facts->n_features = id + 1;
    if (ffm && field + 1 > o->facts->n_fields) o->facts->n_fields = field + 1;
}

static void td_end_line(td_out *o, uint64_t row, uint64_t n_rows, int quirks) {
    if ((quirks & TESTDATA_TRAILING_SPACES) && row % 3 == 0) td_put(o, row % 2 ? "  " : " ");
    if (row + 1 == n_rows && (quirks & TESTDATA_NO_FINAL_NEWLINE)) return;
    td_put(o, quirks & TESTDATA_CRLF ? "\r\n" : "\n");
}

static int td_open(td_out *o, const char *path, testdata_facts *facts) {
    facts->n_rows = facts->nnz = facts->positives = facts->bytes = 0;
    facts->n_features = facts->n_fields = 0;
    o->facts = facts;
    o->ok = 1;
    o->f = fopen(path, "wb");
    return o->f != NULL;
}

static int td_close(td_out *o) { return (fclose(o->f) == 0) & o->ok; }

/* ---- click-log-like libffm ----
   Fields 0..5 have 8 values each, 6..15 have 900, 16 and 17 have 400 (ids are disjoint per
   field, 10,048 in all); large fields draw skewed (u^3) so that some values repeat. Field 0 is
   missing from a fifth of the rows, 17 is written before 16, and a quarter of the rows hold two
   features in field 16. P(label 1) = sigmoid(1.8 s1 s2 + 0.9 s3 - 0.9), s_f = td_sign of field
   f's value: an interaction only pairs of fields see, and a main effect. */
int testdata_write_ffm(const char *path, uint64_t n_rows, uint64_t seed, int quirks, testdata_facts *facts) {
    static const uint32_t vocab[18] = {8, 8, 8, 8, 8, 8, 900, 900, 900, 900, 900, 900, 900, 900, 900, 900, 400, 400};
    uint32_t base[18], f;
    uint64_t state = 0x5EEDF00Dull ^ (seed * 0x2545F4914F6CDD1Dull), row;
    testdata_facts own;
    td_out o;
    if (!facts) facts = &own;
    if (!td_open(&o, path, facts)) return 0;
    for (f = 0, base[0] = 0; f + 1 < 18; f++) base[f + 1] = base[f] + vocab[f];
    for (row = 0; row < n_rows; row++) {
        uint32_t v[18], extra;
        double s;
        for (f = 0; f < 18; f++) {
            double u = td_uniform(&state);
            v[f] = vocab[f] <= 8 ? td_below(&state, vocab[f]) : (uint32_t)(u * u * u * vocab[f]);
        }
        extra = td_below(&state, vocab[16]);
        s = 1.8 * td_sign(1, v[1], 8) * td_sign(2, v[2], 8) + 0.9 * td_sign(3, v[3], 8) - 0.9;
        td_label(&o, td_uniform(&state) < 1.0 / (1.0 + exp(-s)), quirks);
        for (f = 0; f < 16; f++)
            if (f > 0 || row % 5 != 1) td_feature(&o, 1, f, base[f] + v[f], "0.3651");
        td_feature(&o, 1, 17, base[17] + v[17], row % 2 ? "0.5" : "0.50000");
        td_feature(&o, 1, 16, base[16] + v[16], row % 2 ? "0.5" : "0.50000");
        if (row % 4 == 3) td_feature(&o, 1, 16, base[16] + extra, "0.25");
        td_end_line(&o, row, n_rows, quirks);
        facts->n_rows++;
    }
    return td_close(&o);
}

/* ---- mushroom-like libsvm ----
   22 attributes of 2..12 values, one-hot, ids 1..126 in ascending order, values 1.
   P(label 1) = sigmoid(2.5 s4 + 1.5 s0 s2 - 0.3). */
int testdata_write_svm(const char *path, uint64_t n_rows, uint64_t seed, int quirks, testdata_facts *facts) {
    static const uint32_t vocab[22] = {6, 4, 10, 2, 9, 4, 3, 2, 12, 2, 5, 4, 4, 9, 9, 2, 4, 3, 5, 9, 6, 12};
    uint32_t base = 0, a, v[22];
    uint64_t state = 0xA6A41C05ull ^ (seed * 0x2545F4914F6CDD1Dull), row;
    testdata_facts own;
    td_out o;
    if (!facts) facts = &own;
    if (!td_open(&o, path, facts)) return 0;
    for (row = 0; row < n_rows; row++) {
        double s;
        for (a = 0; a < 22; a++) v[a] = td_below(&state, vocab[a]);
        s = 2.5 * td_sign(4, v[4], 8) + 1.5 * td_sign(0, v[0], 4) * td_sign(2, v[2], 8) - 0.3;
        td_label(&o, td_uniform(&state) < 1.0 / (1.0 + exp(-s)), quirks);
        for (a = 0, base = 1; a < 22; base += vocab[a], a++) td_feature(&o, 0, 0, base + v[a], "1");
        td_end_line(&o, row, n_rows, quirks);
        facts->n_rows++;
    }
    return td_close(&o);
}

int testdata_standard(testdata_file which, char *path, size_t path_size, testdata_facts *facts) {
    switch (which) {
    case TESTDATA_TRAIN_FFM: scratch_path(path, path_size, "train.ffm"); return testdata_write_ffm(path, 200, 1, 0, facts);
    case TESTDATA_TEST_FFM: scratch_path(path, path_size, "test.ffm"); return testdata_write_ffm(path, 200, 2, TESTDATA_TRAILING_SPACES, facts);
    case TESTDATA_TRAIN_SVM: scratch_path(path, path_size, "train.svm"); return testdata_write_svm(path, 2000, 3, 0, facts);
    case TESTDATA_TEST_SVM: scratch_path(path, path_size, "test.svm"); return testdata_write_svm(path, 500, 4, 0, facts);
    }
    return 0;
}
