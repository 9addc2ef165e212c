/* test_files.c - dataset files: libffm and libsvm text parsed strictly and exactly (every quirk
   of real files, numbers bit for bit as strtof reads them, errors with the right line and
   column, the same result from any number of threads), files shaped like real data sets
   (testdata.h) against a naive reference parser, standard input, the text and binary writers,
   and binary dataset files that are refused when damaged.

   Expected values are written by hand or come from naive_parse below (strtok, strtoul and
   strtof over the text), never from the code under test. */
#if !defined(_XOPEN_SOURCE)
#define _XOPEN_SOURCE 700
#endif
#include "../modern_fm.h"
#include "ref.h"
#include "runner.h"
#include "scratch.h"
#include "testdata.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>
#include <utime.h>

/* ============================== helpers ============================== */

static mfm_read_options read_opts(mfm_format format, mfm_task task, int n_threads) {
    mfm_read_options o;
    memset(&o, 0, sizeof o);
    o.format = format;
    o.task = task;
    o.n_threads = n_threads;
    return o;
}

static int same_bits(float a, float b) { return memcmp(&a, &b, sizeof a) == 0; }

static uint32_t float_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}

/* mfm_dataset_parse of a NUL-terminated text that must succeed (a failure is recorded). */
static mfm_dataset *parse_text(const char *text, const char *what, mfm_format format, mfm_task task, int n_threads) {
    mfm_read_options o = read_opts(format, task, n_threads);
    mfm_dataset *ds = NULL;
    mfm_error e;
    mfm_status st = mfm_dataset_parse(text, strlen(text), what, &o, &ds, &e);
    if (!CHECK(st == MFM_OK && ds != NULL, "%s: parse failed with status %d: %s", what, (int)st, st ? e.message : "")) {
        mfm_dataset_free(ds);
        return NULL;
    }
    return ds;
}

/* What a parsed dataset must hold. NULL arrays must be NULL in the dataset too. */
typedef struct expect {
    uint64_t n_rows;
    const uint64_t *offsets;
    const uint32_t *features, *fields;
    const float *values, *labels;
    uint32_t n_features, n_fields;
    mfm_format format;
} expect;

static expect expect_of(uint64_t n_rows, const uint64_t *offsets, const uint32_t *features, const uint32_t *fields, const float *values, const float *labels,
                        uint32_t n_features, uint32_t n_fields, mfm_format format) {
    expect x;
    x.n_rows = n_rows;
    x.offsets = offsets;
    x.features = features;
    x.fields = fields;
    x.values = values;
    x.labels = labels;
    x.n_features = n_features;
    x.n_fields = n_fields;
    x.format = format;
    return x;
}

static void check_dataset(const mfm_dataset *ds, const expect *x, const char *what) {
    mfm_csr d = mfm_dataset_csr(ds);
    mfm_dataset_info info;
    uint64_t r, j, nnz;
    int bad = 0;
    mfm_dataset_get_info(ds, &info);
    if (!CHECK(d.n_rows == x->n_rows, "%s: %llu rows, expected %llu", what, (unsigned long long)d.n_rows, (unsigned long long)x->n_rows)) return;
    for (r = 0; r <= x->n_rows && !bad; r++)
        bad = !CHECK(d.row_offsets[r] == x->offsets[r], "%s: row_offsets[%llu] = %llu, expected %llu", what, (unsigned long long)r,
                     (unsigned long long)d.row_offsets[r], (unsigned long long)x->offsets[r]);
    if (bad) return;
    nnz = x->offsets[x->n_rows];
    CHECK(info.n_rows == x->n_rows && info.nnz == nnz, "%s: info says %llu rows, %llu non-zeros", what, (unsigned long long)info.n_rows,
          (unsigned long long)info.nnz);
    for (j = 0; j < nnz; j++) CHECK(d.features[j] == x->features[j], "%s: features[%llu] = %u, expected %u", what, (unsigned long long)j, d.features[j], x->features[j]);
    if (x->fields) {
        if (CHECK(d.fields != NULL, "%s: fields are NULL", what))
            for (j = 0; j < nnz; j++) CHECK(d.fields[j] == x->fields[j], "%s: fields[%llu] = %u, expected %u", what, (unsigned long long)j, d.fields[j], x->fields[j]);
    } else {
        CHECK(d.fields == NULL, "%s: fields should be NULL", what);
    }
    if (x->values) {
        if (CHECK(d.values != NULL, "%s: values are NULL", what))
            for (j = 0; j < nnz; j++)
                CHECK(same_bits(d.values[j], x->values[j]), "%s: values[%llu] = %.9g, expected %.9g", what, (unsigned long long)j, (double)d.values[j],
                      (double)x->values[j]);
    } else {
        CHECK(d.values == NULL, "%s: values should be NULL (every value is 1)", what);
    }
    if (x->labels) {
        if (CHECK(d.labels != NULL, "%s: labels are NULL", what))
            for (r = 0; r < x->n_rows; r++)
                CHECK(same_bits(d.labels[r], x->labels[r]), "%s: labels[%llu] = %.9g, expected %.9g", what, (unsigned long long)r, (double)d.labels[r],
                      (double)x->labels[r]);
    } else {
        CHECK(d.labels == NULL, "%s: labels should be NULL (the rows have none)", what);
    }
    CHECK(d.weights == NULL, "%s: text has no weights", what);
    /* the view may leave them 0 (= max id + 1); the info says them */
    CHECK((d.n_features == 0 || d.n_features == x->n_features) && info.n_features == x->n_features, "%s: n_features %u (info %u), expected %u",
          what, d.n_features, info.n_features, x->n_features);
    CHECK((d.n_fields == 0 || d.n_fields == x->n_fields) && info.n_fields == x->n_fields, "%s: n_fields %u (info %u), expected %u", what, d.n_fields,
          info.n_fields, x->n_fields);
    CHECK(info.format == x->format, "%s: info.format %d, expected %d", what, (int)info.format, (int)x->format);
    CHECK(info.has_labels == (x->labels != NULL) && info.has_fields == (x->fields != NULL) && info.has_values == (x->values != NULL) &&
              info.has_weights == 0,
          "%s: info flags labels %d fields %d values %d weights %d", what, info.has_labels, info.has_fields, info.has_values, info.has_weights);
}

/* n_features / n_fields as the view means them: 0 stands for max id + 1. */
static uint32_t effective_n(const mfm_csr *d, int fields) {
    uint64_t j, nnz = d->n_rows ? d->row_offsets[d->n_rows] : 0;
    uint32_t n = fields ? d->n_fields : d->n_features;
    const uint32_t *ids = fields ? d->fields : d->features;
    if (n || !ids) return n;
    for (j = 0; j < nnz; j++)
        if (ids[j] + 1 > n) n = ids[j] + 1;
    return n;
}

/* Two views hold the same arrays, bit for bit (NULL where the other is NULL), and mean the same
   n_features and n_fields. */
static int csr_equal(const mfm_csr *a, const mfm_csr *b, const char *what) {
    uint64_t nnz, r;
    if (!CHECK(a->n_rows == b->n_rows, "%s: %llu rows vs %llu", what, (unsigned long long)a->n_rows, (unsigned long long)b->n_rows)) return 0;
    if (!CHECK(memcmp(a->row_offsets, b->row_offsets, (size_t)(a->n_rows + 1) * 8) == 0, "%s: row offsets differ", what)) return 0;
    nnz = a->row_offsets[a->n_rows];
#define SAME_ARRAY(name, count, size)                                                                                   \
    if (!CHECK((a->name == NULL) == (b->name == NULL), "%s: " #name " present in one only", what)) return 0;            \
    if (a->name && count && !CHECK(memcmp(a->name, b->name, (size_t)(count) * (size)) == 0, "%s: " #name " differ", what)) { \
        for (r = 0; r < (count); r++)                                                                                   \
            if (memcmp(a->name + r, b->name + r, size) != 0) {                                                          \
                runner_fail(__FILE__, __LINE__, "%s: first difference in " #name " at %llu", what, (unsigned long long)r); \
                break;                                                                                                  \
            }                                                                                                           \
        return 0;                                                                                                       \
    }
    SAME_ARRAY(features, nnz, 4)
    SAME_ARRAY(fields, nnz, 4)
    SAME_ARRAY(values, nnz, 4)
    SAME_ARRAY(labels, a->n_rows, 4)
    SAME_ARRAY(weights, a->n_rows, 4)
#undef SAME_ARRAY
    return CHECK(effective_n(a, 0) == effective_n(b, 0) && effective_n(a, 1) == effective_n(b, 1), "%s: n_features %u/%u, n_fields %u/%u", what,
                 effective_n(a, 0), effective_n(b, 0), effective_n(a, 1), effective_n(b, 1));
}

/* ---- a naive reference parser: strtok over each line, strtoul for ids, strtof for numbers.
   It trusts its input (only valid text is given to it). ---- */

typedef struct naive {
    uint64_t n_rows, nnz, cap_rows, cap_nnz;
    uint64_t *offsets;
    uint32_t *features, *fields;
    float *values, *labels;
    int has_labels, ffm, all_ones, decided;
    uint32_t n_features, n_fields;
} naive;

static void *xrealloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    if (!q) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    return q;
}

static void naive_parse(const char *bytes, size_t size, mfm_task task, naive *nv) {
    char *text = (char *)xrealloc(NULL, size + 1), *line = text, *next;
    memset(nv, 0, sizeof *nv);
    memcpy(text, bytes, size);
    text[size] = '\0';
    nv->all_ones = 1;
    nv->offsets = (uint64_t *)xrealloc(NULL, sizeof(uint64_t));
    nv->offsets[0] = 0;
    for (; line; line = next) {
        char *tok;
        next = strchr(line, '\n');
        if (next) *next++ = '\0';
        tok = strtok(line, " \t\r");
        if (!tok) continue; /* blank */
        if (!nv->decided) {
            nv->has_labels = strchr(tok, ':') == NULL;
            nv->decided = 1;
        }
        if (nv->n_rows + 1 >= nv->cap_rows) {
            nv->cap_rows = nv->cap_rows ? 2 * nv->cap_rows : 1024;
            nv->offsets = (uint64_t *)xrealloc(nv->offsets, (nv->cap_rows + 1) * sizeof(uint64_t));
            nv->labels = (float *)xrealloc(nv->labels, nv->cap_rows * sizeof(float));
        }
        nv->labels[nv->n_rows] = 0;
        if (nv->has_labels) {
            float y = strtof(tok, NULL);
            if (task == MFM_TASK_BINARY || task == MFM_TASK_DEFAULT) y = y == 1 ? 1.0f : 0.0f;
            nv->labels[nv->n_rows] = y;
            tok = strtok(NULL, " \t\r");
        }
        for (; tok; tok = strtok(NULL, " \t\r")) {
            char *end;
            unsigned long a, b = 0;
            float x;
            int colons = (int)(strchr(tok, ':') != NULL) + (int)(strchr(tok, ':') && strchr(strchr(tok, ':') + 1, ':'));
            if (nv->ffm == 0) nv->ffm = colons == 2 ? 1 : -1;
            a = strtoul(tok, &end, 10);
            if (nv->ffm == 1) {
                b = a;
                a = strtoul(end + 1, &end, 10);
            }
            x = strtof(end + 1, NULL);
            if (nv->nnz + 1 > nv->cap_nnz) {
                nv->cap_nnz = nv->cap_nnz ? 2 * nv->cap_nnz : 4096;
                nv->features = (uint32_t *)xrealloc(nv->features, nv->cap_nnz * 4);
                nv->fields = (uint32_t *)xrealloc(nv->fields, nv->cap_nnz * 4);
                nv->values = (float *)xrealloc(nv->values, nv->cap_nnz * 4);
            }
            nv->features[nv->nnz] = (uint32_t)a;
            nv->fields[nv->nnz] = (uint32_t)b;
            nv->values[nv->nnz] = x;
            nv->all_ones &= x == 1.0f;
            if (a + 1 > nv->n_features) nv->n_features = (uint32_t)(a + 1);
            if (nv->ffm == 1 && b + 1 > nv->n_fields) nv->n_fields = (uint32_t)(b + 1);
            nv->nnz++;
        }
        nv->offsets[++nv->n_rows] = nv->nnz;
    }
    free(text);
}

static void naive_free(naive *nv) {
    free(nv->offsets);
    free(nv->features);
    free(nv->fields);
    free(nv->values);
    free(nv->labels);
    memset(nv, 0, sizeof *nv);
}

/* The dataset against the naive parse of the same text, array for array. */
static void check_against_naive(const mfm_dataset *ds, const naive *nv, const char *what) {
    expect x;
    x = expect_of(nv->n_rows, nv->offsets, nv->features, nv->ffm == 1 && nv->nnz ? nv->fields : NULL, nv->all_ones ? NULL : nv->values, nv->has_labels && nv->n_rows ? nv->labels : NULL, nv->n_features, nv->n_fields, nv->ffm == 1 ? MFM_FORMAT_LIBFFM : MFM_FORMAT_LIBSVM);
    check_dataset(ds, &x, what);
}

/* A growing text buffer. */
typedef struct text_buf {
    char *p;
    size_t len, cap;
} text_buf;

static void tb_put(text_buf *t, const char *s, size_t n) {
    if (t->len + n + 1 > t->cap) {
        while (t->len + n + 1 > t->cap) t->cap = t->cap ? 2 * t->cap : 1 << 16;
        t->p = (char *)xrealloc(t->p, t->cap);
    }
    memcpy(t->p + t->len, s, n);
    t->len += n;
    t->p[t->len] = '\0';
}

static void tb_printf(text_buf *t, const char *fmt, ...) RUNNER_PRINTF(2, 3);
static void tb_printf(text_buf *t, const char *fmt, ...) {
    char buf[512];
    int n;
    va_list ap;
    va_start(ap, fmt);
    n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    tb_put(t, buf, (size_t)n);
}

/* ============================== parsing quirks ============================== */

/* libffm with every quirk of real files at once: fields out of order, several features in one
   field, one feature id under different fields, trailing spaces and tabs, CRLF line ends, blank
   lines and lines of only blanks (skipped), an empty row (label only), 0-based ids kept as
   written, and a last line without its newline. n_features = max id + 1. */
void test_text_quirks_libffm(void) {
    static const char text[] = "1 2:5:0.5 0:3:1 1:7:2\n"    /* fields out of order */
                               "0 1:4:1 1:6:0.25 \t\n"       /* two features in field 1, trailing blanks */
                               "\n"                          /* blank */
                               "   \t  \n"                   /* only blanks */
                               "1 0:5:1\t3:5:-1.5\r\n"       /* feature 5 under another field, tab, CRLF */
                               "0\n"                         /* empty row */
                               " \r\n"                       /* blank with CRLF */
                               "1 0:0:3e-2 9:12:1";          /* no final newline */
    static const uint64_t offsets[] = {0, 3, 5, 7, 7, 9};
    static const uint32_t features[] = {5, 3, 7, 4, 6, 5, 5, 0, 12};
    static const uint32_t fields[] = {2, 0, 1, 1, 1, 0, 3, 0, 9};
    static const float labels[] = {1, 0, 1, 0, 1};
    float values[9] = {0.5f, 1, 2, 1, 0.25f, 1, -1.5f, 0, 1};
    expect x;
    mfm_dataset *ds;
    values[7] = strtof("3e-2", NULL);
    x = expect_of(5, offsets, features, fields, values, labels, 13, 10, MFM_FORMAT_LIBFFM);
    if ((ds = parse_text(text, "quirks.ffm", MFM_FORMAT_AUTO, MFM_TASK_DEFAULT, 1)) != NULL) check_dataset(ds, &x, "libffm quirks (auto)");
    mfm_dataset_free(ds);
    if ((ds = parse_text(text, "quirks.ffm", MFM_FORMAT_LIBFFM, MFM_TASK_BINARY, 2)) != NULL) check_dataset(ds, &x, "libffm quirks (explicit)");
    mfm_dataset_free(ds);
    { /* the same through a file and mfm_dataset_read */
        char path[256];
        mfm_read_options o = read_opts(MFM_FORMAT_AUTO, MFM_TASK_DEFAULT, 1);
        mfm_error e;
        mfm_status st;
        scratch_path(path, sizeof path, "quirks.ffm");
        REQUIRE(write_whole_file(path, text, strlen(text)), "cannot write %s", path);
        ds = NULL;
        st = mfm_dataset_read(path, &o, &ds, &e);
        if (CHECK(st == MFM_OK, "mfm_dataset_read(%s): %d %s", path, (int)st, st ? e.message : "")) check_dataset(ds, &x, "libffm quirks (file)");
        mfm_dataset_free(ds);
        scratch_clean();
    }
}

/* libsvm: 1-based ids kept as written (n_features = max id + 1 counts the unused id 0), no
   fields, values all 1 (written "1", "1.0", "1e0", "01") leave values NULL, and labels -1, +1,
   0, 1, -1.0 and 1.0 read as 0/1 under the binary task. */
void test_text_quirks_libsvm(void) {
    static const char text[] = "-1 1:1 3:1.0\n+1 2:1e0 10:01\n0 5:1\r\n1\n-1.0 1:1 \n1.0 7:1";
    static const uint64_t offsets[] = {0, 2, 4, 5, 5, 6, 7};
    static const uint32_t features[] = {1, 3, 2, 10, 5, 1, 7};
    static const float labels[] = {0, 1, 0, 1, 0, 1};
    expect x;
    mfm_dataset *ds;
    x = expect_of(6, offsets, features, NULL, NULL, labels, 11, 0, MFM_FORMAT_LIBSVM);
    if ((ds = parse_text(text, "quirks.svm", MFM_FORMAT_AUTO, MFM_TASK_DEFAULT, 1)) != NULL) check_dataset(ds, &x, "libsvm quirks (auto)");
    mfm_dataset_free(ds);
    if ((ds = parse_text(text, "quirks.svm", MFM_FORMAT_LIBSVM, MFM_TASK_BINARY, 4)) != NULL) check_dataset(ds, &x, "libsvm quirks (explicit)");
    mfm_dataset_free(ds);
    { /* one value that is not 1 brings the values back, all of them */
        static const char text2[] = "1 1:1 2:0.5\n0 3:1\n";
        static const uint64_t offsets2[] = {0, 2, 3};
        static const uint32_t features2[] = {1, 2, 3};
        static const float values2[] = {1, 0.5f, 1}, labels2[] = {1, 0};
        x = expect_of(2, offsets2, features2, NULL, values2, labels2, 4, 0, MFM_FORMAT_LIBSVM);
        if ((ds = parse_text(text2, "values.svm", MFM_FORMAT_AUTO, MFM_TASK_DEFAULT, 1)) != NULL) check_dataset(ds, &x, "libsvm with a value");
        mfm_dataset_free(ds);
    }
    { /* the largest id allowed, 4294967294, gives n_features 4294967295 */
        static const char text3[] = "1 4294967294:1 0:2\n";
        static const uint64_t offsets3[] = {0, 2};
        static const uint32_t features3[] = {4294967294u, 0};
        static const float values3[] = {1, 2}, labels3[] = {1};
        x = expect_of(1, offsets3, features3, NULL, values3, labels3, 4294967295u, 0, MFM_FORMAT_LIBSVM);
        if ((ds = parse_text(text3, "maxid.svm", MFM_FORMAT_AUTO, MFM_TASK_DEFAULT, 1)) != NULL) check_dataset(ds, &x, "libsvm id 4294967294");
        mfm_dataset_free(ds);
    }
}

/* Rows whose first token has a colon have no labels: labels NULL (libffm and libsvm), with
   the format still detected from that token. */
void test_text_unlabeled(void) {
    static const char ffm[] = "0:1:1 1:2:0.5\n\n2:3:1\n";
    static const char svm[] = "4:1 2:1\r\n7:1\n";
    static const uint64_t offsets_ffm[] = {0, 2, 3}, offsets_svm[] = {0, 2, 3};
    static const uint32_t features_ffm[] = {1, 2, 3}, fields_ffm[] = {0, 1, 2}, features_svm[] = {4, 2, 7};
    static const float values_ffm[] = {1, 0.5f, 1};
    expect x;
    mfm_dataset *ds;
    x = expect_of(2, offsets_ffm, features_ffm, fields_ffm, values_ffm, NULL, 4, 3, MFM_FORMAT_LIBFFM);
    if ((ds = parse_text(ffm, "unlabeled.ffm", MFM_FORMAT_AUTO, MFM_TASK_DEFAULT, 1)) != NULL) check_dataset(ds, &x, "unlabeled libffm");
    mfm_dataset_free(ds);
    x = expect_of(2, offsets_svm, features_svm, NULL, NULL, NULL, 8, 0, MFM_FORMAT_LIBSVM);
    if ((ds = parse_text(svm, "unlabeled.svm", MFM_FORMAT_AUTO, MFM_TASK_REGRESSION, 1)) != NULL) check_dataset(ds, &x, "unlabeled libsvm");
    mfm_dataset_free(ds);
}

/* Labels by task: regression keeps real labels exactly (as strtof reads them), multiclass
   keeps class ids, binary maps -1/+1 to 0/1. */
void test_text_labels_by_task(void) {
    static const char reg[] = "-2.5 0:1:1\n1e3 0:2:1\n0.1 1:1:1\n-0 0:1:1\n+7.25e-3\n";
    static const char multi[] = "0 1:1\n4 2:1\n2.0 1:1\n1e1 3:1\n";
    static const uint64_t off_reg[] = {0, 1, 2, 3, 4, 4}, off_multi[] = {0, 1, 2, 3, 4};
    static const uint32_t feat_reg[] = {1, 2, 1, 1}, fld_reg[] = {0, 0, 1, 0}, feat_multi[] = {1, 2, 1, 3};
    static const float multi_labels[] = {0, 4, 2, 10};
    float reg_labels[5];
    expect x;
    mfm_dataset *ds;
    reg_labels[0] = -2.5f;
    reg_labels[1] = 1000.0f;
    reg_labels[2] = strtof("0.1", NULL);
    reg_labels[3] = -0.0f;
    reg_labels[4] = strtof("7.25e-3", NULL);
    x = expect_of(5, off_reg, feat_reg, fld_reg, NULL, reg_labels, 3, 2, MFM_FORMAT_LIBFFM);
    if ((ds = parse_text(reg, "reg.ffm", MFM_FORMAT_AUTO, MFM_TASK_REGRESSION, 1)) != NULL) check_dataset(ds, &x, "regression labels");
    mfm_dataset_free(ds);
    x = expect_of(4, off_multi, feat_multi, NULL, NULL, multi_labels, 4, 0, MFM_FORMAT_LIBSVM);
    if ((ds = parse_text(multi, "multi.svm", MFM_FORMAT_AUTO, MFM_TASK_MULTICLASS, 1)) != NULL) check_dataset(ds, &x, "multiclass labels");
    mfm_dataset_free(ds);
}

/* Format: auto picks libffm from a first token with two colons and libsvm from one, looking
   past label-only rows; an explicit format is used as given; a text whose rows hold only
   labels reads as libsvm; an empty text is zero rows. */
void test_text_format_detection(void) {
    mfm_dataset *ds;
    mfm_dataset_info info;
    mfm_read_options o;
    mfm_error e;
    mfm_status st;
    if ((ds = parse_text("1\n\n0\n1 3:4:1\n", "late.ffm", MFM_FORMAT_AUTO, MFM_TASK_DEFAULT, 1)) != NULL) {
        mfm_csr d = mfm_dataset_csr(ds);
        mfm_dataset_get_info(ds, &info);
        CHECK(info.format == MFM_FORMAT_LIBFFM, "label-only rows then a libffm row: format %d", (int)info.format);
        CHECK(d.n_rows == 3 && d.row_offsets[2] == 0 && d.row_offsets[3] == 1 && d.fields && d.fields[0] == 3 && d.features[0] == 4,
              "label-only rows then a libffm row parsed wrong");
    }
    mfm_dataset_free(ds);
    if ((ds = parse_text("1 3:4\n", "one.svm", MFM_FORMAT_AUTO, MFM_TASK_DEFAULT, 1)) != NULL) {
        mfm_csr d = mfm_dataset_csr(ds);
        mfm_dataset_get_info(ds, &info);
        CHECK(info.format == MFM_FORMAT_LIBSVM && d.fields == NULL && d.features[0] == 3 && d.values && d.values[0] == 4.0f,
              "'1 3:4' should be libsvm feature 3 value 4");
    }
    mfm_dataset_free(ds);
    if ((ds = parse_text("1\n0\n", "labels-only", MFM_FORMAT_AUTO, MFM_TASK_DEFAULT, 1)) != NULL) {
        mfm_csr d = mfm_dataset_csr(ds);
        mfm_dataset_get_info(ds, &info);
        CHECK(d.n_rows == 2 && info.nnz == 0 && d.labels && d.labels[0] == 1 && d.labels[1] == 0 && info.n_features == 0,
              "label-only text: %llu rows, %llu nnz", (unsigned long long)d.n_rows, (unsigned long long)info.nnz);
    }
    mfm_dataset_free(ds);
    if ((ds = parse_text("", "empty", MFM_FORMAT_AUTO, MFM_TASK_DEFAULT, 1)) != NULL) {
        mfm_csr d = mfm_dataset_csr(ds);
        CHECK(d.n_rows == 0 && d.row_offsets && d.row_offsets[0] == 0, "an empty text is zero rows");
    }
    mfm_dataset_free(ds);
    if ((ds = parse_text("\n \n\r\n", "blank", MFM_FORMAT_LIBFFM, MFM_TASK_DEFAULT, 1)) != NULL) CHECK(mfm_dataset_csr(ds).n_rows == 0, "blank lines are zero rows");
    mfm_dataset_free(ds);
    /* explicit formats that do not match the text are errors */
    o = read_opts(MFM_FORMAT_LIBSVM, MFM_TASK_DEFAULT, 1);
    ds = NULL;
    st = mfm_dataset_parse("1 0:1:1\n", 8, "x", &o, &ds, &e);
    CHECK(st == MFM_ERR_INVALID_DATA && ds == NULL, "libffm text read as libsvm: status %d", (int)st);
    o = read_opts(MFM_FORMAT_LIBFFM, MFM_TASK_DEFAULT, 1);
    st = mfm_dataset_parse("1 0:1\n", 6, "x", &o, &ds, &e);
    CHECK(st == MFM_ERR_INVALID_DATA && ds == NULL, "libsvm text read as libffm: status %d", (int)st);
    o = read_opts(MFM_FORMAT_BINARY, MFM_TASK_DEFAULT, 1);
    st = mfm_dataset_parse("1 0:1\n", 6, "x", &o, &ds, &e);
    CHECK(st == MFM_ERR_BAD_FILE && ds == NULL, "text read as binary: status %d", (int)st);
    o = read_opts((mfm_format)17, MFM_TASK_DEFAULT, 1);
    st = mfm_dataset_parse("1 0:1\n", 6, "x", &o, &ds, &e);
    CHECK(st == MFM_ERR_INVALID_ARGUMENT, "unknown format: status %d", (int)st);
}

/* ============================== numbers ============================== */

/* Appends one decimal string of a random shape: %g / %e / %f of random doubles and floats, 1 to
   25 digits, decimal exponents -45..38, signs, and midpoints between neighbouring floats. */
static void random_number(uint64_t *rng, char *buf, size_t size) {
    int shape = (int)rng_below(rng, 8), digits = 1 + (int)rng_below(rng, 25), e10 = -45 + (int)rng_below(rng, 84);
    double x = rng_uniform(rng, 1, 10) * pow(10, e10);
    if (rng_below(rng, 3) == 0) x = -x;
    switch (shape) {
    case 0: snprintf(buf, size, "%.*g", digits, x); break;
    case 1: snprintf(buf, size, "%.*e", digits - 1, x); break;
    case 2: /* %f keeps lengths sane only for moderate exponents */
        x = rng_uniform(rng, -1, 1) * pow(10, (int)rng_below(rng, 12) - 4);
        snprintf(buf, size, "%.*f", digits, x);
        break;
    case 3: { /* a random finite float, shortest-ish and long */
        uint32_t u;
        float f;
        do {
            u = (uint32_t)rng_next(rng);
            memcpy(&f, &u, 4);
        } while (!(f - f == 0));
        if (rng_below(rng, 2))
            snprintf(buf, size, "%.9g", (double)f);
        else
            snprintf(buf, size, "%.*e", digits - 1, (double)f);
        break;
    }
    case 4: { /* the exact midpoint between a float and the next one, printed long or cut */
        float f = (float)x, g = nextafterf(f, (float)(2 * x));
        double mid = ((double)f + (double)g) / 2;
        snprintf(buf, size, "%.*e", rng_below(rng, 2) ? 24 : 8 + (int)rng_below(rng, 10), mid);
        break;
    }
    case 5: /* integers around 2^24, where floats get sparse */
        snprintf(buf, size, "%llu", (unsigned long long)(16777216ull - 40 + rng_below(rng, 80)) * (1ull << rng_below(rng, 8)));
        break;
    case 6: /* exponents outside the fast path, tiny and denormal */
        snprintf(buf, size, "%.*ge%d", digits, rng_uniform(rng, 1, 10), -45 + (int)rng_below(rng, 30));
        break;
    default: /* leading zeros, a lone point, an explicit plus sign */
        snprintf(buf, size, "+00%.*f", digits, rng_uniform(rng, 0, 1));
        break;
    }
}

/* A few thousand numbers of many shapes, each as a value and as a regression label, parse to
   exactly the float strtof gives (bit for bit). Numbers that strtof makes infinite are refused
   as not finite. */
void test_text_numbers_match_strtof(void) {
    enum { N = 6000 };
    static const char *fixed[] = {"0.1", "1e-7", "3.4e38", "3.4028234663852886e38", "-0", "-0.0", "1.17549435e-38", "1.1754942e-38",
                                  "1e-45", "1.401298464324817e-45", "7.006492321624085e-46", "7.006492321624087e-46", "1e-46", "16777217",
                                  "16777219", "33554434", "0.5", ".5", "5.", "0000.0001000", "123456789012345678901234",
                                  "0.000000000000000000000000000000000000000000001", "2.5e-8", "9007199254740993", "8388608.5",
                                  "1.00000005960464477539062", "1.000000059604644775390625", "1.0000000596046447753906251", "4.7019774e-38",
                                  "1E5", "1e+05", "-1E-0005", "340282356779733661637539395458142568447"};
    const size_t n_fixed = sizeof fixed / sizeof fixed[0];
    char (*nums)[96] = (char (*)[96])xrealloc(NULL, (N + n_fixed) * 96);
    float *want = (float *)xrealloc(NULL, (N + n_fixed) * sizeof(float));
    uint64_t rng = 20260101, i, n = 0;
    text_buf t = {0};
    mfm_dataset *ds;
    for (i = 0; i < n_fixed; i++) snprintf(nums[n++], 96, "%s", fixed[i]);
    while (n < N + n_fixed) {
        char *stop;
        float f;
        random_number(&rng, nums[n], 96);
        f = strtof(nums[n], &stop);
        if (*stop != '\0' || !(f - f == 0)) continue; /* only finite ones here */
        n++;
    }
    for (i = 0; i < n; i++) {
        want[i] = strtof(nums[i], NULL);
        tb_printf(&t, "%s 0:%llu:%s\n", nums[i], (unsigned long long)i, nums[i]);
    }
    ds = parse_text(t.p, "numbers.ffm", MFM_FORMAT_AUTO, MFM_TASK_REGRESSION, 1);
    if (ds) {
        mfm_csr d = mfm_dataset_csr(ds);
        int bad = 0;
        if (CHECK(d.n_rows == n && d.values && d.labels, "numbers: %llu rows", (unsigned long long)d.n_rows))
            for (i = 0; i < n; i++) {
                if (!same_bits(d.values[i], want[i]) || !same_bits(d.labels[i], want[i])) {
                    bad++;
                    runner_fail(__FILE__, __LINE__, "'%s': value 0x%08x, label 0x%08x, strtof 0x%08x (%.9g)", nums[i], float_bits(d.values[i]), float_bits(d.labels[i]),
                          float_bits(want[i]), (double)want[i]);
                }
            }
        CHECK(bad == 0, "%d of %llu numbers differ from strtof", bad, (unsigned long long)n);
    }
    mfm_dataset_free(ds);
    { /* beyond the float range: refused as not finite, in any position */
        static const char *huge[] = {"1e39", "-3.5e38", "3.4028236e38", "1e50", "123456789e40"};
        for (i = 0; i < sizeof huge / sizeof huge[0]; i++) {
            char line[96];
            mfm_read_options o = read_opts(MFM_FORMAT_AUTO, MFM_TASK_REGRESSION, 1);
            mfm_error e;
            mfm_status st;
            ds = NULL;
            snprintf(line, sizeof line, "1 0:1:%s\n", huge[i]);
            st = mfm_dataset_parse(line, strlen(line), "huge", &o, &ds, &e);
            CHECK(st == MFM_ERR_INVALID_DATA && strstr(e.message, "huge:1:7:") && mentions_word(e.message, "finite"),
                  "value %s: status %d, message %s", huge[i], (int)st, st ? e.message : "");
            snprintf(line, sizeof line, "%s 0:1:1\n", huge[i]);
            st = mfm_dataset_parse(line, strlen(line), "huge", &o, &ds, &e);
            CHECK(st == MFM_ERR_INVALID_DATA && strstr(e.message, "huge:1:1:"), "label %s: status %d, message %s", huge[i], (int)st,
                  st ? e.message : "");
        }
    }
    free(t.p);
    free(nums);
    free(want);
}

/* Valid decimal numbers longer than usual (many digits) still read as strtof reads them. */
void test_text_long_numbers(void) {
    char num[400], line[480];
    int len;
    size_t k;
    for (k = 0; k < 3; k++) {
        mfm_dataset *ds;
        float want;
        if (k == 0) { /* 1.000...0001 with 140 digits: the 1 at the end is below float precision */
            memset(num, '0', sizeof num);
            num[0] = '1', num[1] = '.', num[140] = '1', num[141] = '\0';
        } else if (k == 1) { /* 0.1234...: 200 significant digits */
            int i;
            num[0] = '0', num[1] = '.';
            for (i = 0; i < 200; i++) num[2 + i] = (char)('1' + i % 9);
            num[202] = '\0';
        } else { /* the float midpoint 1 + 2^-24 written exactly, then a 1 far behind: rounds up */
            snprintf(num, sizeof num, "1.000000059604644775390625");
            len = (int)strlen(num);
            memset(num + len, '0', 150);
            num[len + 150] = '1';
            num[len + 151] = '\0';
        }
        want = strtof(num, NULL);
        snprintf(line, sizeof line, "1 0:1:%s\n", num);
        ds = parse_text(line, "long-number", MFM_FORMAT_AUTO, MFM_TASK_DEFAULT, 1);
        if (ds) {
            mfm_csr d = mfm_dataset_csr(ds);
            float got = d.values ? d.values[0] : 1.0f; /* no values array: every value is exactly 1 */
            CHECK(same_bits(got, want), "a %d-character number: 0x%08x, strtof 0x%08x", (int)strlen(num), float_bits(got), float_bits(want));
        }
        mfm_dataset_free(ds);
    }
}

/* ============================== errors ============================== */

typedef struct error_case {
    const char *text;
    mfm_format format;
    mfm_task task;
    unsigned line, column, column2; /* column2: another column that is as right (0: none) */
    const char *what;
} error_case;

static void expect_parse_error(const char *text, size_t len, const char *name, mfm_format format, mfm_task task, int n_threads, unsigned line,
                               unsigned column, unsigned column2, const char *what) {
    mfm_read_options o = read_opts(format, task, n_threads);
    mfm_dataset *ds = (mfm_dataset *)&o; /* must come back NULL */
    mfm_error e;
    char where[160], where2[160];
    mfm_status st;
    memset(&e, 0, sizeof e);
    st = mfm_dataset_parse(text, len, name, &o, &ds, &e);
    snprintf(where, sizeof where, "%s:%u:%u:", name, line, column);
    snprintf(where2, sizeof where2, "%s:%u:%u:", name, line, column2);
    if (!CHECK(st == MFM_ERR_INVALID_DATA, "%s: status %d, expected MFM_ERR_INVALID_DATA (%s)", what, (int)st, st ? e.message : "")) {
        if (st == MFM_OK) mfm_dataset_free(ds);
        return;
    }
    CHECK(ds == NULL, "%s: a dataset was handed back", what);
    CHECK(e.status == st, "%s: err.status %d", what, (int)e.status);
    CHECK(strstr(e.message, where) != NULL || (column2 && strstr(e.message, where2) != NULL), "%s: message \"%s\" lacks \"%s\"%s%s", what, e.message, where,
          column2 ? " or " : "", column2 ? where2 : "");
    CHECK(strlen(e.message) > strlen(where) + 10, "%s: the message \"%s\" says nothing after the place", what, e.message);
}

/* Every malformed token is MFM_ERR_INVALID_DATA with "name:line:column:" of the bad spot. */
void test_text_errors(void) {
    static const error_case cases[] = {
        {"1 0:1:1\n3 1:2\n", MFM_FORMAT_AUTO, MFM_TASK_REGRESSION, 2, 6, 3, "missing colon: '1:2' in libffm"},
        {"1 3:1\n0 3 1:2\n", MFM_FORMAT_AUTO, MFM_TASK_DEFAULT, 2, 3, 0, "missing colon: '3' in libsvm"},
        {"1 0:1:1 5\n", MFM_FORMAT_AUTO, MFM_TASK_DEFAULT, 1, 9, 0, "missing colon: bare '5' in libffm"},
        {"1 0:1:abc\n", MFM_FORMAT_AUTO, MFM_TASK_DEFAULT, 1, 7, 0, "value 'abc'"},
        {"1 0:1:\n", MFM_FORMAT_AUTO, MFM_TASK_DEFAULT, 1, 7, 0, "empty value"},
        {"1 0:1:-\n", MFM_FORMAT_AUTO, MFM_TASK_DEFAULT, 1, 7, 0, "value '-'"},
        {"1 0:-1:1\n", MFM_FORMAT_AUTO, MFM_TASK_DEFAULT, 1, 5, 0, "negative feature id"},
        {"1 -1:0:1\n", MFM_FORMAT_LIBFFM, MFM_TASK_DEFAULT, 1, 3, 0, "negative field id"},
        {"1 -3:1\n", MFM_FORMAT_LIBSVM, MFM_TASK_DEFAULT, 1, 3, 0, "negative libsvm id"},
        {"1 0:1:nan\n", MFM_FORMAT_AUTO, MFM_TASK_DEFAULT, 1, 7, 0, "value nan"},
        {"1 0:1:NaN\n", MFM_FORMAT_AUTO, MFM_TASK_DEFAULT, 1, 7, 0, "value NaN"},
        {"1 0:1:inf\n", MFM_FORMAT_AUTO, MFM_TASK_DEFAULT, 1, 7, 0, "value inf"},
        {"1 0:1:-Infinity\n", MFM_FORMAT_AUTO, MFM_TASK_DEFAULT, 1, 7, 0, "value -Infinity"},
        {"1 0:1:1e50\n", MFM_FORMAT_AUTO, MFM_TASK_DEFAULT, 1, 7, 0, "value 1e50"},
        {"nan 0:1:1\n", MFM_FORMAT_AUTO, MFM_TASK_REGRESSION, 1, 1, 0, "label nan"},
        {"1 0:4294967296:1\n", MFM_FORMAT_AUTO, MFM_TASK_DEFAULT, 1, 5, 0, "feature id 2^32"},
        {"1 0:4294967295:1\n", MFM_FORMAT_AUTO, MFM_TASK_DEFAULT, 1, 5, 0, "feature id 4294967295"},
        {"1 0:99999999999999999999999:1\n", MFM_FORMAT_AUTO, MFM_TASK_DEFAULT, 1, 5, 0, "feature id of 23 digits"},
        {"1 4294967295:0:1\n", MFM_FORMAT_AUTO, MFM_TASK_DEFAULT, 1, 3, 0, "field id 4294967295"},
        {"1 4294967295:1\n", MFM_FORMAT_AUTO, MFM_TASK_DEFAULT, 1, 3, 0, "libsvm id 4294967295"},
        {"0:1:1\n1 0:2:1\n", MFM_FORMAT_AUTO, MFM_TASK_DEFAULT, 2, 1, 0, "a label in an unlabeled file"},
        {"1 0:1:1\n0:2:1\n", MFM_FORMAT_AUTO, MFM_TASK_DEFAULT, 2, 1, 0, "no label in a labeled file"},
        {"1 0:1:1\n0 3:1\n", MFM_FORMAT_AUTO, MFM_TASK_DEFAULT, 2, 6, 3, "libsvm token in libffm"},
        {"1 3:1\n0 0:1:1\n", MFM_FORMAT_AUTO, MFM_TASK_DEFAULT, 2, 3, 6, "libffm token in libsvm"},
        {"1 0:1:1\n2 0:1:1\n", MFM_FORMAT_AUTO, MFM_TASK_BINARY, 2, 1, 0, "binary label 2"},
        {"1 0:1:1\n0.5 0:1:1\n", MFM_FORMAT_AUTO, MFM_TASK_DEFAULT, 2, 1, 0, "binary label 0.5"},
        {"0 0:1:1\n1.5 0:1:1\n", MFM_FORMAT_AUTO, MFM_TASK_MULTICLASS, 2, 1, 0, "multiclass label 1.5"},
        {"0 0:1:1\n-1 0:1:1\n", MFM_FORMAT_AUTO, MFM_TASK_MULTICLASS, 2, 1, 0, "multiclass label -1"},
        {"1 0:1:1\rx 0:2:1\n", MFM_FORMAT_AUTO, MFM_TASK_DEFAULT, 1, 8, 0, "carriage return right after a value"},
        {"1 0:1:1 \r 0:2:1\n", MFM_FORMAT_AUTO, MFM_TASK_DEFAULT, 1, 9, 0, "lone carriage return between tokens"},
        {"1 0:1:1x\n", MFM_FORMAT_AUTO, MFM_TASK_DEFAULT, 1, 8, 0, "garbage after a value"},
        {"1 0:1:0x10\n", MFM_FORMAT_AUTO, MFM_TASK_DEFAULT, 1, 8, 0, "hexadecimal value"},
        {"1 0:1:1:2\n", MFM_FORMAT_AUTO, MFM_TASK_DEFAULT, 1, 8, 0, "a third colon"},
        {"1 0:1:1\r\n\n  \t\n1 0:1:abc\n", MFM_FORMAT_AUTO, MFM_TASK_DEFAULT, 4, 7, 0, "line count through CRLF and blank lines"},
        {"1 0:1:1\n\n0 x:1:1", MFM_FORMAT_AUTO, MFM_TASK_DEFAULT, 3, 3, 0, "bad field on a last line without newline"},
    };
    size_t i;
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const error_case *c = &cases[i];
        expect_parse_error(c->text, strlen(c->text), "bad.txt", c->format, c->task, 1, c->line, c->column, c->column2, c->what);
        expect_parse_error(c->text, strlen(c->text), "bad.txt", c->format, c->task, 2, c->line, c->column, c->column2, c->what);
    }
    { /* the same through mfm_dataset_read: the path names the input */
        char path[256], where[300];
        static const char text[] = "1 0:1:1\n\n1 0:2:zz\n";
        mfm_read_options o = read_opts(MFM_FORMAT_AUTO, MFM_TASK_DEFAULT, 1);
        mfm_dataset *ds = NULL;
        mfm_error e;
        mfm_status st;
        scratch_path(path, sizeof path, "bad.ffm");
        REQUIRE(write_whole_file(path, text, strlen(text)), "cannot write %s", path);
        st = mfm_dataset_read(path, &o, &ds, &e);
        snprintf(where, sizeof where, "%s:3:7:", path);
        CHECK(st == MFM_ERR_INVALID_DATA && ds == NULL && strstr(e.message, where), "read of a bad file: %d \"%s\", expected \"%s\"", (int)st,
              st ? e.message : "", where);
        scratch_clean();
    }
    { /* a missing file is an I/O error */
        mfm_dataset *ds = NULL;
        mfm_error e;
        mfm_status st = mfm_dataset_read("build/no-such-dir/no-such-file.txt", NULL, &ds, &e);
        CHECK(st == MFM_ERR_IO && ds == NULL && strstr(e.message, "no-such-file.txt"), "missing file: %d %s", (int)st, st ? e.message : "");
    }
}

/* ============================== large texts and threads ============================== */

/* A libffm text of n_lines lines with every quirk mixed in (blank lines, CRLF, trailing blanks,
   label-only rows, several values shapes). Line `bad_line` (1-based; 0 = none) is replaced by
   `bad_text`; a second bad line can be planted too. */
static void big_text(text_buf *t, uint64_t seed, unsigned n_lines, unsigned bad_line, const char *bad_text, unsigned bad_line2, const char *bad_text2) {
    uint64_t rng = seed;
    unsigned line;
    t->len = 0;
    for (line = 1; line <= n_lines; line++) {
        unsigned kind = rng_below(&rng, 200), z, a;
        if (line == bad_line || line == bad_line2) {
            tb_printf(t, "%s\n", line == bad_line ? bad_text : bad_text2);
            continue;
        }
        if (kind == 0) {
            tb_put(t, "\n", 1);
            continue;
        }
        if (kind == 1) {
            tb_put(t, " \t \n", 4);
            continue;
        }
        tb_put(t, rng_below(&rng, 2) ? "1" : "0", 1);
        z = kind == 2 ? 0 : 1 + rng_below(&rng, 8);
        for (a = 0; a < z; a++) {
            unsigned field = rng_below(&rng, 39), vk = rng_below(&rng, 6);
            uint32_t feature = rng_below(&rng, 4) == 0 ? rng_below(&rng, 4294967295u) : rng_below(&rng, 1u << 20);
            tb_printf(t, rng_below(&rng, 10) ? " %u:%u:" : "\t%u:%u:", field, (unsigned)feature);
            if (vk < 2)
                tb_put(t, "1", 1);
            else if (vk == 2)
                tb_printf(t, "%.4f", rng_uniform(&rng, 0, 1));
            else if (vk == 3)
                tb_printf(t, "%.*g", 1 + (int)rng_below(&rng, 12), rng_uniform(&rng, -100, 100));
            else if (vk == 4)
                tb_printf(t, "%.3e", rng_uniform(&rng, 1, 10) * pow(10, (int)rng_below(&rng, 60) - 30));
            else
                tb_printf(t, "%.9g", (double)(float)rng_uniform(&rng, -1, 1));
        }
        if (kind == 3) tb_put(t, "  \t", 3);
        if (kind == 4 || kind == 5)
            tb_put(t, "\r\n", 2);
        else if (line < n_lines || kind < 100)
            tb_put(t, "\n", 1); /* about half the time the last line has no newline */
    }
}

enum { BIG_LINES = 100000 };

/* A text of more than 4 MiB is cut into parts that 2 and 4 threads parse at once: the arrays are
   the same for 1, 2, 3 and 4 threads, and equal the naive parse. */
void test_text_threads_identical(void) {
    static const int threads[] = {2, 3, 4};
    text_buf t = {0};
    mfm_dataset *one, *ds;
    mfm_csr d1;
    naive nv;
    size_t i;
    big_text(&t, 77, BIG_LINES, 0, NULL, 0, NULL);
    REQUIRE(t.len > (5u << 20), "the generated text has only %lu bytes", (unsigned long)t.len);
    one = parse_text(t.p, "big.ffm", MFM_FORMAT_AUTO, MFM_TASK_DEFAULT, 1);
    if (!one) {
        free(t.p);
        return;
    }
    naive_parse(t.p, t.len, MFM_TASK_BINARY, &nv);
    check_against_naive(one, &nv, "big text, 1 thread vs naive");
    naive_free(&nv);
    d1 = mfm_dataset_csr(one);
    CHECK(d1.n_rows > 90000, "big text: only %llu rows", (unsigned long long)d1.n_rows);
    for (i = 0; i < sizeof threads / sizeof threads[0]; i++) {
        char what[64];
        snprintf(what, sizeof what, "big text, %d threads vs 1", threads[i]);
        ds = parse_text(t.p, "big.ffm", MFM_FORMAT_AUTO, MFM_TASK_DEFAULT, threads[i]);
        if (ds) {
            mfm_csr d = mfm_dataset_csr(ds);
            mfm_dataset_info a, b;
            csr_equal(&d, &d1, what);
            mfm_dataset_get_info(ds, &a);
            mfm_dataset_get_info(one, &b);
            CHECK(memcmp(&a, &b, sizeof a) == 0, "%s: dataset info differs", what);
        }
        mfm_dataset_free(ds);
    }
    { /* the same file through mfm_dataset_read with 1 and 4 threads */
        char path[256];
        scratch_path(path, sizeof path, "big.ffm");
        if (CHECK(write_whole_file(path, t.p, t.len), "cannot write %s", path)) {
            static const int file_threads[] = {1, 4};
            for (i = 0; i < 2; i++) {
                mfm_read_options o = read_opts(MFM_FORMAT_AUTO, MFM_TASK_DEFAULT, file_threads[i]);
                mfm_error e;
                mfm_status st;
                ds = NULL;
                st = mfm_dataset_read(path, &o, &ds, &e);
                if (CHECK(st == MFM_OK, "read big file: %d %s", (int)st, st ? e.message : "")) {
                    mfm_csr d = mfm_dataset_csr(ds);
                    csr_equal(&d, &d1, file_threads[i] == 1 ? "big file, 1 thread" : "big file, 4 threads");
                }
                mfm_dataset_free(ds);
            }
        }
        scratch_clean();
    }
    mfm_dataset_free(one);
    free(t.p);
}

/* An error planted late in the big text (line 70000, in the third quarter) is reported with its
   exact line and column whatever the thread count; with two bad lines the first one is. */
void test_text_threads_error_line(void) {
    static const int threads[] = {1, 2, 4};
    text_buf t = {0};
    size_t i;
    /* col 14 is the 'x' where a feature id should be */
    big_text(&t, 78, BIG_LINES, 70000, "1 3:17:0.5 4:x:1", 0, NULL);
    REQUIRE(t.len > (5u << 20), "the generated text has only %lu bytes", (unsigned long)t.len);
    for (i = 0; i < 3; i++) {
        char what[80];
        snprintf(what, sizeof what, "error at line 70000, %d threads", threads[i]);
        expect_parse_error(t.p, t.len, "big.ffm", MFM_FORMAT_AUTO, MFM_TASK_DEFAULT, threads[i], 70000, 14, 0, what);
    }
    big_text(&t, 79, BIG_LINES, 99990, "0 1:2:3 1:2:3:", 0, NULL); /* col 14: the fourth part's ':' */
    for (i = 0; i < 3; i++) {
        char what[80];
        snprintf(what, sizeof what, "error at line 99990, %d threads", threads[i]);
        expect_parse_error(t.p, t.len, "big.ffm", MFM_FORMAT_AUTO, MFM_TASK_DEFAULT, threads[i], 99990, 14, 0, what);
    }
    big_text(&t, 80, BIG_LINES, 30000, "1 0:1:1 2:3:1e999", 80000, "1 0:1:nan");
    for (i = 0; i < 3; i++) {
        char what[80];
        snprintf(what, sizeof what, "two errors (lines 30000, 80000), %d threads", threads[i]);
        expect_parse_error(t.p, t.len, "big.ffm", MFM_FORMAT_AUTO, MFM_TASK_DEFAULT, threads[i], 30000, 13, 0, what);
    }
    big_text(&t, 81, BIG_LINES, 3, "2 1:1:1", 0, NULL);
    for (i = 0; i < 3; i++) {
        char what[80];
        snprintf(what, sizeof what, "bad label at line 3, %d threads", threads[i]);
        expect_parse_error(t.p, t.len, "big.ffm", MFM_FORMAT_AUTO, MFM_TASK_DEFAULT, threads[i], 3, 1, 0, what);
    }
    free(t.p);
}

/* A file larger than the reader's 32 MiB chunks: rows that straddle chunk boundaries come out
   whole (the file read equals the text parsed in one piece), and an error past the first chunk
   still has its exact line number. */
void test_read_large_file_chunks(void) {
    text_buf t = {0};
    char path[256], where[300];
    mfm_dataset *whole, *ds = NULL;
    mfm_read_options o = read_opts(MFM_FORMAT_AUTO, MFM_TASK_DEFAULT, 2);
    mfm_error e;
    mfm_status st;
    unsigned lines = 0;
    while (t.len < (36u << 20)) { /* regular lines of about 200 bytes */
        unsigned a;
        lines++;
        tb_printf(&t, "%u", lines % 2);
        for (a = 0; a < 12; a++) tb_printf(&t, " %u:%u:0.%u", a, (lines * 7919u + a * 104729u) % 1000003u, (lines + a) % 1000u);
        tb_put(&t, lines % 3 ? "\n" : "\r\n", lines % 3 ? 1 : 2);
    }
    scratch_path(path, sizeof path, "large.ffm");
    REQUIRE(write_whole_file(path, t.p, t.len), "cannot write %s", path);
    whole = parse_text(t.p, "large.ffm", MFM_FORMAT_AUTO, MFM_TASK_DEFAULT, 2);
    st = mfm_dataset_read(path, &o, &ds, &e);
    if (CHECK(st == MFM_OK, "read %s: %d %s", path, (int)st, st ? e.message : "") && whole) {
        mfm_csr a = mfm_dataset_csr(ds), b = mfm_dataset_csr(whole);
        csr_equal(&a, &b, "36 MiB file read in chunks vs parsed whole");
        CHECK(a.n_rows == lines, "36 MiB file: %llu rows, expected %u", (unsigned long long)a.n_rows, lines);
    }
    mfm_dataset_free(ds);
    mfm_dataset_free(whole);
    /* plant an error on the last line: "1 0:1:1 q" after the file's content */
    tb_put(&t, "1 0:1:1 q\n", 10);
    REQUIRE(write_whole_file(path, t.p, t.len), "cannot write %s", path);
    ds = NULL;
    st = mfm_dataset_read(path, &o, &ds, &e);
    snprintf(where, sizeof where, "%s:%u:9:", path, lines + 1);
    CHECK(st == MFM_ERR_INVALID_DATA && strstr(e.message, where), "error after 36 MiB: %d \"%s\", expected \"%s\"", (int)st, st ? e.message : "", where);
    mfm_dataset_free(ds);
    scratch_clean();
    free(t.p);
}

/* ============================== files shaped like real data ============================== */

/* Writes the file (svm: libsvm, else libffm), then reads it with every format/thread default
   and checks it against the facts counted while writing and against the naive parse. */
static void check_realistic_file(const char *name, int svm, uint64_t n_rows, uint64_t seed, int quirks) {
    char path[256];
    unsigned char *bytes;
    size_t size;
    naive nv;
    mfm_dataset *ds = NULL, *parsed;
    mfm_read_options o = read_opts(MFM_FORMAT_AUTO, MFM_TASK_DEFAULT, 0);
    mfm_error e;
    mfm_status st;
    testdata_facts facts;
    const mfm_format format = svm ? MFM_FORMAT_LIBSVM : MFM_FORMAT_LIBFFM;
    const int has_values = !svm; /* libffm's values are 0.3651 and 0.5, libsvm's all 1 */
    uint64_t rows, positives, nnz;
    uint32_t n_features, n_fields;
    scratch_path(path, sizeof path, name);
    REQUIRE(svm ? testdata_write_svm(path, n_rows, seed, quirks, &facts) : testdata_write_ffm(path, n_rows, seed, quirks, &facts), "cannot write %s", path);
    rows = facts.n_rows;
    positives = facts.positives;
    nnz = facts.nnz;
    n_features = facts.n_features;
    n_fields = facts.n_fields;
    CHECK(rows == n_rows && positives > 0 && positives < rows && nnz > rows, "%s: the writer's facts make no sense", name);
    bytes = read_whole_file(path, &size);
    if (!CHECK(bytes != NULL && size == facts.bytes, "cannot read %s back (%zu bytes, written %llu)", path, size, (unsigned long long)facts.bytes)) {
        free(bytes);
        return;
    }
    naive_parse((const char *)bytes, size, MFM_TASK_BINARY, &nv);
    /* the writer's facts, through the naive parser first (so that they hold for the file) */
    CHECK(nv.n_rows == rows && nv.n_features == n_features && nv.n_fields == n_fields && nv.nnz == nnz, "%s: the naive parse disagrees with the writer", name);
    st = mfm_dataset_read(path, &o, &ds, &e);
    if (CHECK(st == MFM_OK, "read %s: %d %s", path, (int)st, st ? e.message : "")) {
        mfm_csr d = mfm_dataset_csr(ds);
        mfm_dataset_info info;
        uint64_t r, pos = 0;
        mfm_dataset_get_info(ds, &info);
        CHECK(info.format == format, "%s: format %d", name, (int)info.format);
        CHECK(d.n_rows == rows, "%s: %llu rows, expected %llu", name, (unsigned long long)d.n_rows, (unsigned long long)rows);
        CHECK(info.n_features == n_features && effective_n(&d, 0) == n_features, "%s: n_features %u (view %u), expected %u", name, info.n_features,
              d.n_features, n_features);
        CHECK(info.n_fields == n_fields && effective_n(&d, 1) == n_fields, "%s: n_fields %u (view %u), expected %u", name, info.n_fields, d.n_fields,
              n_fields);
        CHECK((d.values != NULL) == has_values, "%s: values %s", name, d.values ? "present" : "absent");
        CHECK(info.nnz == nnz, "%s: %llu non-zeros, expected %llu", name, (unsigned long long)info.nnz, (unsigned long long)nnz);
        if (d.labels)
            for (r = 0; r < d.n_rows; r++) pos += d.labels[r] == 1;
        CHECK(pos == positives, "%s: %llu positive labels, expected %llu", name, (unsigned long long)pos, (unsigned long long)positives);
        check_against_naive(ds, &nv, name);
    }
    parsed = parse_text((const char *)bytes, name, MFM_FORMAT_AUTO, MFM_TASK_DEFAULT, 2);
    if (parsed && ds) {
        mfm_csr a = mfm_dataset_csr(parsed), b = mfm_dataset_csr(ds);
        csr_equal(&a, &b, "parsed from memory vs read from the file");
    }
    mfm_dataset_free(parsed);
    mfm_dataset_free(ds);
    naive_free(&nv);
    free(bytes);
}

/* Files shaped like public data sets parse with the row counts, max ids, fields, non-zeros and
   positives their writer counted, and equal the naive parse array for array: click-log libffm
   (18 fields, one missing now and then, field 17 before 16, two features in field 16 on some
   rows, trailing spaces, CRLF, no final newline) and mushroom libsvm (1-based, 22 ones per
   row, -1/+1 labels, CRLF). */
void test_read_realistic_files(void) {
    check_realistic_file("clicks-train.ffm", 0, 200, 1, TESTDATA_CRLF | TESTDATA_NO_FINAL_NEWLINE);
    check_realistic_file("clicks-test.ffm", 0, 200, 2, TESTDATA_TRAILING_SPACES);
    check_realistic_file("mushroom-train.svm", 1, 2000, 3, TESTDATA_PLUS_MINUS_LABELS | TESTDATA_NO_FINAL_NEWLINE);
    check_realistic_file("mushroom-test.svm", 1, 500, 4, TESTDATA_CRLF | TESTDATA_TRAILING_SPACES | TESTDATA_PLUS_MINUS_LABELS);
    scratch_clean();
}

/* ============================== standard input ============================== */

/* mfm_dataset_read("-") with fd 0 pointing at `path`; stdin is restored afterwards. */
static mfm_status read_via_stdin(const char *path, const mfm_read_options *o, mfm_dataset **out, mfm_error *e) {
    int saved = dup(0), fd = open(path, O_RDONLY);
    mfm_status st;
    if (fd < 0) {
        if (saved >= 0) close(saved);
        return MFM_ERR_IO;
    }
    if (fd != 0) {
        dup2(fd, 0);
        close(fd);
    }
    clearerr(stdin);
    st = mfm_dataset_read("-", o, out, e);
    if (saved >= 0) {
        dup2(saved, 0);
        close(saved);
    } else {
        close(0);
    }
    clearerr(stdin);
    return st;
}

/* Text and binary datasets read from standard input equal the same files read by path, and a
   text error on standard input is named "<stdin>". */
void test_read_stdin(void) {
    char path[256], bin[256];
    mfm_dataset *by_path = NULL, *by_stdin = NULL, *bin_path = NULL, *bin_stdin = NULL;
    mfm_read_options o = read_opts(MFM_FORMAT_AUTO, MFM_TASK_DEFAULT, 2);
    mfm_error e;
    mfm_status st;
    scratch_path(path, sizeof path, "clicks.ffm");
    REQUIRE(testdata_write_ffm(path, 200, 1, TESTDATA_CRLF, NULL), "cannot write %s", path);
    st = mfm_dataset_read(path, &o, &by_path, &e);
    REQUIRE(st == MFM_OK, "read %s: %s", path, e.message);
    st = read_via_stdin(path, &o, &by_stdin, &e);
    if (CHECK(st == MFM_OK, "text from stdin: %d %s", (int)st, st ? e.message : "")) {
        mfm_csr a = mfm_dataset_csr(by_stdin), b = mfm_dataset_csr(by_path);
        csr_equal(&a, &b, "text from stdin vs path");
    }
    scratch_path(bin, sizeof bin, "clicks.bin");
    {
        mfm_csr d = mfm_dataset_csr(by_path);
        st = mfm_dataset_write(&d, bin, MFM_FORMAT_BINARY, &e);
    }
    if (CHECK(st == MFM_OK, "write %s: %s", bin, st ? e.message : "")) {
        st = mfm_dataset_read(bin, &o, &bin_path, &e);
        CHECK(st == MFM_OK, "binary by path: %s", st ? e.message : "");
        st = read_via_stdin(bin, &o, &bin_stdin, &e);
        if (CHECK(st == MFM_OK, "binary from stdin: %d %s", (int)st, st ? e.message : "") && bin_path) {
            mfm_csr a = mfm_dataset_csr(bin_stdin), b = mfm_dataset_csr(bin_path), c = mfm_dataset_csr(by_path);
            mfm_dataset_info info;
            csr_equal(&a, &b, "binary from stdin vs path");
            csr_equal(&a, &c, "binary from stdin vs the text");
            mfm_dataset_get_info(bin_stdin, &info);
            CHECK(info.format == MFM_FORMAT_BINARY, "binary from stdin: format %d", (int)info.format);
        }
    }
    { /* an error on standard input */
        char bad[256];
        static const char text[] = "1 0:1:1\n0 0:1:oops\n";
        mfm_dataset *ds = NULL;
        scratch_path(bad, sizeof bad, "bad.ffm");
        if (CHECK(write_whole_file(bad, text, strlen(text)), "cannot write %s", bad)) {
            st = read_via_stdin(bad, &o, &ds, &e);
            CHECK(st == MFM_ERR_INVALID_DATA && strstr(e.message, "<stdin>:2:7:"), "error on stdin: %d \"%s\"", (int)st, st ? e.message : "");
            mfm_dataset_free(ds);
        }
    }
    mfm_dataset_free(by_path);
    mfm_dataset_free(by_stdin);
    mfm_dataset_free(bin_path);
    mfm_dataset_free(bin_stdin);
    scratch_clean();
}

/* ============================== writers ============================== */

/* Awkward floats: shortest decimal forms, denormals, extremes, negative zero. */
static void awkward_floats(float *out, size_t n, uint64_t seed) {
    static const float fixed[] = {0.1f, 1e-7f, 3.4e38f, -0.0f, 1e-45f, 1.17549435e-38f, 5.87747175e-39f, -3.40282347e38f, 16777216.0f, 1e7f,
                                  123456792.0f, 0.3f, 2.0f / 3.0f, 3.14159274f, 1.0f, -1.0f, 0.5f, 1e-38f, 9999999.0f, -8388607.5f, 0.0f};
    size_t i;
    for (i = 0; i < n; i++) {
        if (i < sizeof fixed / sizeof fixed[0]) {
            out[i] = fixed[i];
        } else {
            uint32_t u;
            float f;
            do {
                u = (uint32_t)rng_next(&seed);
                memcpy(&f, &u, 4);
            } while (!(f - f == 0));
            out[i] = f;
        }
    }
}

/* A CSR owning its arrays, with everything present. */
typedef struct owned_csr {
    uint64_t offsets[41];
    uint32_t features[200], fields[200];
    float values[200], labels[40], weights[40];
    mfm_csr csr;
} owned_csr;

static void owned_csr_init(owned_csr *o, uint64_t seed) {
    uint64_t rng = seed, nnz = 0;
    int r;
    memset(o, 0, sizeof *o);
    awkward_floats(o->values, 200, seed);
    awkward_floats(o->labels, 40, seed + 1);
    for (r = 0; r < 40; r++) {
        int z = r == 3 || r == 17 ? 0 : 1 + (int)rng_below(&rng, 5), a;
        for (a = 0; a < z; a++) {
            o->features[nnz] = r == 5 && a == 0 ? 4294967294u : rng_below(&rng, 1000);
            o->fields[nnz] = r == 6 && a == 0 ? 4000000000u : rng_below(&rng, 12);
            nnz++;
        }
        o->offsets[r + 1] = nnz;
        o->weights[r] = (float)rng_uniform(&rng, 0, 3);
    }
    o->csr.n_rows = 40;
    o->csr.row_offsets = o->offsets;
    o->csr.features = o->features;
    o->csr.fields = o->fields;
    o->csr.values = o->values;
    o->csr.labels = o->labels;
}

static mfm_dataset *read_path(const char *path, mfm_format format, mfm_task task, const char *what) {
    mfm_read_options o = read_opts(format, task, 1);
    mfm_dataset *ds = NULL;
    mfm_error e;
    mfm_status st = mfm_dataset_read(path, &o, &ds, &e);
    if (!CHECK(st == MFM_OK, "%s: reading %s failed: %d %s", what, path, (int)st, st ? e.message : "")) return NULL;
    return ds;
}

/* libffm and libsvm text written then read back give the same arrays bit for bit (values and
   labels of every awkward kind, empty rows, ids up to 4294967294); a small exact output. */
void test_write_text_round_trip(void) {
    owned_csr o;
    char path[256];
    mfm_error e;
    mfm_status st;
    mfm_dataset *ds;
    owned_csr_init(&o, 5);
    scratch_path(path, sizeof path, "rt.ffm");
    st = mfm_dataset_write(&o.csr, path, MFM_FORMAT_LIBFFM, &e);
    if (CHECK(st == MFM_OK, "write libffm: %s", st ? e.message : "") && (ds = read_path(path, MFM_FORMAT_AUTO, MFM_TASK_REGRESSION, "libffm")) != NULL) {
        mfm_csr d = mfm_dataset_csr(ds), want = o.csr;
        want.n_features = 4294967295u;
        want.n_fields = 4000000001u;
        csr_equal(&d, &want, "libffm round trip");
        mfm_dataset_free(ds);
    }
    scratch_path(path, sizeof path, "rt.svm");
    st = mfm_dataset_write(&o.csr, path, MFM_FORMAT_LIBSVM, &e);
    if (CHECK(st == MFM_OK, "write libsvm: %s", st ? e.message : "") && (ds = read_path(path, MFM_FORMAT_AUTO, MFM_TASK_REGRESSION, "libsvm")) != NULL) {
        mfm_csr d = mfm_dataset_csr(ds), want = o.csr;
        want.fields = NULL;
        want.n_features = 4294967295u;
        csr_equal(&d, &want, "libsvm round trip");
        mfm_dataset_free(ds);
    }
    { /* unlabeled and all-ones: no labels, no values */
        mfm_csr c = o.csr;
        uint64_t offsets[3] = {0, 2, 3};
        c.n_rows = 2;
        c.row_offsets = offsets;
        c.labels = NULL;
        c.values = NULL;
        scratch_path(path, sizeof path, "rt2.ffm");
        st = mfm_dataset_write(&c, path, MFM_FORMAT_LIBFFM, &e);
        if (CHECK(st == MFM_OK, "write unlabeled libffm: %s", st ? e.message : "") && (ds = read_path(path, MFM_FORMAT_AUTO, MFM_TASK_DEFAULT, "unlabeled")) != NULL) {
            mfm_csr d = mfm_dataset_csr(ds);
            c.n_features = d.n_features; /* max id + 1 of these three non-zeros, checked next */
            c.n_fields = d.n_fields;
            csr_equal(&d, &c, "unlabeled all-ones round trip");
            CHECK(effective_n(&d, 0) == 1 + (o.features[0] > o.features[1] ? (o.features[0] > o.features[2] ? o.features[0] : o.features[2])
                                                                            : (o.features[1] > o.features[2] ? o.features[1] : o.features[2])),
                  "unlabeled round trip: n_features %u", effective_n(&d, 0));
            mfm_dataset_free(ds);
        }
    }
    { /* exact bytes of a small file */
        static const uint64_t offsets[] = {0, 2, 2, 5};
        static const uint32_t features[] = {3, 7, 0, 1, 2}, fields[] = {0, 2, 1, 0, 3};
        static const char want_ffm[] = "1 0:3:0.5 2:7:1\n0\n0.25 1:0:0.1 0:1:-2 3:2:3e-07\n";
        static const char want_svm[] = "1 3:0.5 7:1\n0\n0.25 0:0.1 1:-2 2:3e-07\n";
        float values[5] = {0.5f, 1, 0.1f, -2, 3e-7f}, labels[3] = {1, 0, 0.25f};
        mfm_csr c;
        unsigned char *got;
        size_t size;
        c = csr_of(3, offsets, features, fields, values, labels);
        scratch_path(path, sizeof path, "small.ffm");
        st = mfm_dataset_write(&c, path, MFM_FORMAT_LIBFFM, &e);
        got = st == MFM_OK ? read_whole_file(path, &size) : NULL;
        CHECK(got && size == strlen(want_ffm) && memcmp(got, want_ffm, size) == 0, "libffm text:\n%s\nexpected:\n%s", got ? (char *)got : e.message,
              want_ffm);
        free(got);
        scratch_path(path, sizeof path, "small.svm");
        st = mfm_dataset_write(&c, path, MFM_FORMAT_LIBSVM, &e);
        got = st == MFM_OK ? read_whole_file(path, &size) : NULL;
        CHECK(got && size == strlen(want_svm) && memcmp(got, want_svm, size) == 0, "libsvm text:\n%s\nexpected:\n%s", got ? (char *)got : e.message,
              want_svm);
        free(got);
    }
    scratch_clean();
}

/* Unlabeled data with an empty row: the row would be written as an empty line, which every
   reader skips as blank. The documented exact round trip needs the write to refuse it (or the
   read to keep the row); either way the rows must not silently shift. */
void test_write_unlabeled_empty_row(void) {
    static const uint64_t offsets[] = {0, 1, 1, 2};
    static const uint32_t features[] = {4, 5}, fields[] = {0, 1};
    char path[256];
    mfm_csr c;
    mfm_error e;
    mfm_status st;
    int f;
    c = csr_of(3, offsets, features, fields, NULL, NULL);
    for (f = 0; f < 2; f++) {
        const mfm_format format = f ? MFM_FORMAT_LIBSVM : MFM_FORMAT_LIBFFM;
        scratch_path(path, sizeof path, f ? "empty-row.svm" : "empty-row.ffm");
        st = mfm_dataset_write(&c, path, format, &e);
        if (st == MFM_OK) {
            mfm_dataset *ds = read_path(path, MFM_FORMAT_AUTO, MFM_TASK_DEFAULT, "unlabeled with an empty row");
            if (ds) {
                mfm_csr d = mfm_dataset_csr(ds);
                CHECK(d.n_rows == 3, "%s: unlabeled data with an empty middle row written, then read back as %llu rows, expected 3 (or a write error)",
                      f ? "libsvm" : "libffm", (unsigned long long)d.n_rows);
            }
            mfm_dataset_free(ds);
        } else {
            CHECK(st == MFM_ERR_INVALID_DATA && e.message[0], "%s: status %d", f ? "libsvm" : "libffm", (int)st);
        }
    }
    scratch_clean();
}

/* Writing libffm needs fields; unknown formats and NULL data are refused; nothing is left. */
void test_write_refusals(void) {
    owned_csr o;
    char path[256];
    mfm_error e;
    mfm_status st;
    owned_csr_init(&o, 9);
    o.csr.fields = NULL;
    scratch_path(path, sizeof path, "nofields.ffm");
    memset(&e, 0, sizeof e);
    st = mfm_dataset_write(&o.csr, path, MFM_FORMAT_LIBFFM, &e);
    CHECK(st == MFM_ERR_INVALID_DATA && mentions_word(e.message, "fields|field"), "libffm without fields: %d \"%s\"", (int)st, e.message);
    CHECK(access(path, F_OK) != 0, "a failed write left %s", path);
    st = mfm_dataset_write(&o.csr, path, MFM_FORMAT_AUTO, &e);
    CHECK(st == MFM_ERR_INVALID_ARGUMENT, "write with format AUTO: %d", (int)st);
    st = mfm_dataset_write(NULL, path, MFM_FORMAT_LIBSVM, &e);
    CHECK(st == MFM_ERR_INVALID_ARGUMENT, "write of NULL data: %d", (int)st);
    o.values[2] = NAN;
    o.csr.fields = o.fields;
    st = mfm_dataset_write(&o.csr, path, MFM_FORMAT_LIBFFM, &e);
    CHECK(st == MFM_ERR_INVALID_DATA, "write of a NaN value: %d", (int)st);
    o.values[2] = 1;
    o.labels[1] = INFINITY;
    st = mfm_dataset_write(&o.csr, path, MFM_FORMAT_LIBSVM, &e);
    CHECK(st == MFM_ERR_INVALID_DATA, "write of an infinite label as text: %d", (int)st);
    CHECK(count_names_containing(scratch_dir(), "") == 2, "failed writes left files in %s", scratch_dir()); /* "." and ".." */
    scratch_clean();
}

/* text -> binary -> read back (mapped) gives identical arrays, the binary file's info says
   binary with the right has_* flags, and writing that as text again gives the very same bytes
   as the first text. Weights, an absent array of each kind and zero rows round-trip too. */
void test_binary_round_trip(void) {
    char text1[256], text2[256], bin[256];
    unsigned char *b1 = NULL, *b2 = NULL, *bb = NULL;
    size_t n1 = 0, n2 = 0, nb = 0;
    mfm_dataset *txt = NULL, *ds = NULL, *mem = NULL;
    mfm_error e;
    mfm_status st;
    owned_csr o;
    int variant;
    owned_csr_init(&o, 21);
    scratch_path(text1, sizeof text1, "a.ffm");
    scratch_path(text2, sizeof text2, "b.ffm");
    scratch_path(bin, sizeof bin, "a.bin");
    REQUIRE(mfm_dataset_write(&o.csr, text1, MFM_FORMAT_LIBFFM, &e) == MFM_OK, "write %s: %s", text1, e.message);
    txt = read_path(text1, MFM_FORMAT_AUTO, MFM_TASK_REGRESSION, "text");
    if (txt) {
        mfm_csr d = mfm_dataset_csr(txt);
        st = mfm_dataset_write(&d, bin, MFM_FORMAT_BINARY, &e);
        if (CHECK(st == MFM_OK, "write binary: %s", st ? e.message : "") && (ds = read_path(bin, MFM_FORMAT_AUTO, MFM_TASK_REGRESSION, "binary")) != NULL) {
            mfm_csr db = mfm_dataset_csr(ds);
            mfm_dataset_info info;
            mfm_dataset_get_info(ds, &info);
            csr_equal(&db, &d, "text -> binary -> read");
            CHECK(info.format == MFM_FORMAT_BINARY && info.has_labels && !info.has_weights && info.has_fields && info.has_values && info.n_rows == 40 &&
                      info.source_bytes == 0 && info.source_mtime == 0,
                  "binary info: format %d labels %d weights %d fields %d values %d", (int)info.format, info.has_labels, info.has_weights,
                  info.has_fields, info.has_values);
            st = mfm_dataset_write(&db, text2, MFM_FORMAT_LIBFFM, &e);
            b1 = read_whole_file(text1, &n1);
            b2 = st == MFM_OK ? read_whole_file(text2, &n2) : NULL;
            CHECK(b1 && b2 && n1 == n2 && memcmp(b1, b2, n1) == 0, "binary -> text differs from the first text (%lu vs %lu bytes)", (unsigned long)n2,
                  (unsigned long)n1);
            bb = read_whole_file(bin, &nb);
            if (CHECK(bb != NULL, "cannot read %s", bin)) { /* the same bytes through mfm_dataset_parse */
                mfm_read_options ro = read_opts(MFM_FORMAT_AUTO, MFM_TASK_REGRESSION, 1);
                st = mfm_dataset_parse(bb, nb, "mem.bin", &ro, &mem, &e);
                if (CHECK(st == MFM_OK, "parse binary bytes: %s", st ? e.message : "")) {
                    mfm_csr dm = mfm_dataset_csr(mem);
                    csr_equal(&dm, &d, "binary bytes parsed from memory");
                }
                CHECK(nb % 8 == 0 && memcmp(bb, "MFM-DATA", 8) == 0, "binary file: %lu bytes, magic %.8s", (unsigned long)nb, (const char *)bb);
            }
        }
    }
    mfm_dataset_free(txt);
    mfm_dataset_free(ds);
    mfm_dataset_free(mem);
    free(b1);
    free(b2);
    free(bb);
    /* weights present; then each optional array absent; then zero rows */
    for (variant = 0; variant < 6; variant++) {
        mfm_csr c = o.csr;
        const char *what = "";
        mfm_task task = MFM_TASK_REGRESSION;
        switch (variant) {
        case 0: c.weights = o.weights, what = "with weights"; break;
        case 1: c.labels = NULL, what = "without labels"; break;
        case 2: c.fields = NULL, what = "without fields"; break;
        case 3: c.values = NULL, what = "without values"; break;
        case 4: c.n_rows = 0, c.row_offsets = NULL, what = "zero rows"; break;
        default: c.n_features = 4294967295u, c.n_fields = 4000000007u, what = "explicit n_features/n_fields"; break;
        }
        st = mfm_dataset_write(&c, bin, MFM_FORMAT_BINARY, &e);
        if (!CHECK(st == MFM_OK, "write binary %s: %s", what, st ? e.message : "")) continue;
        ds = read_path(bin, MFM_FORMAT_BINARY, task, what);
        if (ds) {
            mfm_csr d = mfm_dataset_csr(ds);
            mfm_dataset_info info;
            mfm_dataset_get_info(ds, &info);
            if (variant == 4) {
                CHECK(d.n_rows == 0 && info.nnz == 0, "zero rows: %llu rows", (unsigned long long)d.n_rows);
            } else {
                mfm_csr want = c;
                if (!want.n_features) want.n_features = 4294967295u; /* feature 4294967294 occurs */
                if (!want.n_fields && want.fields) want.n_fields = 4000000001u;
                csr_equal(&d, &want, what);
            }
            CHECK(info.has_weights == (c.weights != NULL && c.n_rows > 0) && info.has_labels == (c.labels != NULL && c.n_rows > 0) &&
                      info.has_fields == (c.fields != NULL && c.n_rows > 0) && info.has_values == (c.values != NULL && c.n_rows > 0),
                  "%s: has_* flags labels %d weights %d fields %d values %d", what, info.has_labels, info.has_weights, info.has_fields, info.has_values);
        }
        mfm_dataset_free(ds);
    }
    scratch_clean();
}

/* A cache records the size and mtime of its source text (as stat() sees them) and the task its
   labels were read for: read back for another task it is refused. */
void test_write_cache_records_source(void) {
    char src[256], cache[256];
    struct stat st_src;
    struct utimbuf times;
    mfm_dataset *txt, *ds;
    mfm_error e;
    mfm_status st;
    testdata_facts facts;
    scratch_path(src, sizeof src, "source.ffm");
    REQUIRE(testdata_write_ffm(src, 200, 1, 0, &facts), "cannot write %s", src);
    txt = read_path(src, MFM_FORMAT_AUTO, MFM_TASK_DEFAULT, "clicks");
    if (!txt) return;
    { /* the source's mtime set to a known time */
        times.actime = 1000000000;
        times.modtime = 1234567890;
        REQUIRE(utime(src, &times) == 0, "utime: %s", strerror(errno));
    }
    REQUIRE(stat(src, &st_src) == 0, "stat %s", src);
    scratch_path(cache, sizeof cache, "source.bin");
    st = mfm_dataset_write_cache(txt, cache, src, &e);
    if (CHECK(st == MFM_OK, "write_cache: %s", st ? e.message : "") && (ds = read_path(cache, MFM_FORMAT_AUTO, MFM_TASK_DEFAULT, "cache")) != NULL) {
        mfm_dataset_info info;
        mfm_csr a = mfm_dataset_csr(ds), b = mfm_dataset_csr(txt);
        mfm_dataset_get_info(ds, &info);
        CHECK(info.source_bytes == (uint64_t)st_src.st_size && info.source_bytes == facts.bytes, "cache source_bytes %llu, stat says %lld, written %llu",
              (unsigned long long)info.source_bytes, (long long)st_src.st_size, (unsigned long long)facts.bytes);
        CHECK(info.source_mtime == (int64_t)st_src.st_mtime && info.source_mtime == 1234567890, "cache source_mtime %lld, stat says %lld",
              (long long)info.source_mtime, (long long)st_src.st_mtime);
        csr_equal(&a, &b, "cache contents");
        CHECK(info.labels_task == MFM_TASK_BINARY, "cache labels_task %d, expected binary", (int)info.labels_task);
        mfm_dataset_free(ds);
        { /* the same cache for regression: refused, its labels were read as binary */
            mfm_read_options o = read_opts(MFM_FORMAT_AUTO, MFM_TASK_REGRESSION, 1);
            ds = NULL;
            st = mfm_dataset_read(cache, &o, &ds, &e);
            CHECK(st != MFM_OK && ds == NULL && mentions_word(e.message, "task|binary|regression"), "a binary-task cache read for regression: %d %s",
                  (int)st, st ? e.message : "accepted");
            mfm_dataset_free(ds);
        }
    }
    mfm_dataset_free(txt);
    scratch_clean();
}

/* ============================== damaged binary files ============================== */

static void store_le(unsigned char *p, uint64_t x, int bytes) {
    int i;
    for (i = 0; i < bytes; i++) p[i] = (unsigned char)(x >> (8 * i));
}

static void fix_checksum(unsigned char *b, size_t n) { store_le(b + n - 8, test_checksum(b, n - 8), 8); }

/* mfm_dataset_parse and mfm_dataset_read (from a file) of the bytes both refuse them with
   `want` and a message holding one of the '|'-separated phrases. */
static void expect_bad_dataset(const unsigned char *b, size_t n, mfm_format format, mfm_status want, const char *phrases, const char *what) {
    char path[256];
    mfm_read_options o = read_opts(format, MFM_TASK_REGRESSION, 1);
    int way;
    scratch_path(path, sizeof path, "damaged.bin");
    if (!CHECK(write_whole_file(path, b, n), "cannot write %s", path)) return;
    for (way = 0; way < 2; way++) {
        mfm_dataset *ds = NULL;
        mfm_error e;
        mfm_status st;
        const char *p = phrases;
        int found = 0;
        memset(&e, 0, sizeof e);
        st = way ? mfm_dataset_read(path, &o, &ds, &e) : mfm_dataset_parse(b, n, "damaged.bin", &o, &ds, &e);
        CHECK(st == want, "%s (%s): status %d, expected %d (%s)", what, way ? "read" : "parse", (int)st, (int)want, st ? e.message : "accepted");
        CHECK(ds == NULL, "%s: a dataset came back", what);
        mfm_dataset_free(ds);
        if (st == MFM_OK) continue;
        while (*p && !found) {
            char phrase[64];
            size_t len = strcspn(p, "|");
            memcpy(phrase, p, len);
            phrase[len] = '\0';
            found = strstr(e.message, phrase) != NULL;
            p += len + (p[len] == '|');
        }
        if (phrases) CHECK(found, "%s (%s): the message \"%s\" says none of \"%s\"", what, way ? "read" : "parse", e.message, phrases);
        CHECK(strstr(e.message, "damaged.bin") != NULL, "%s: the message \"%s\" does not name the file", what, e.message);
    }
}

/* A binary dataset that is truncated, corrupt (a flipped byte: checksum), foreign (magic), newer
   (version 2), or crafted with a valid checksum but a broken structure (decreasing offsets, a
   feature id beyond the header's n_features, a field id beyond n_fields, a last offset that
   is not nnz) is refused with MFM_ERR_BAD_FILE and a sentence saying which. */
void test_binary_refused(void) {
    char bin[256];
    unsigned char *b, *c;
    size_t n, cut;
    owned_csr o;
    mfm_error e;
    owned_csr_init(&o, 33);
    o.csr.weights = o.weights;
    scratch_path(bin, sizeof bin, "good.bin");
    REQUIRE(mfm_dataset_write(&o.csr, bin, MFM_FORMAT_BINARY, &e) == MFM_OK, "write: %s", e.message);
    b = read_whole_file(bin, &n);
    REQUIRE(b && n > 1000, "cannot read %s", bin);
    c = (unsigned char *)xrealloc(NULL, n);
    { /* the untouched bytes are fine, and the checksum helper agrees with the file */
        mfm_read_options ro = read_opts(MFM_FORMAT_AUTO, MFM_TASK_REGRESSION, 1);
        mfm_dataset *ds = NULL;
        CHECK(mfm_dataset_parse(b, n, "good.bin", &ro, &ds, &e) == MFM_OK, "good file refused: %s", e.message);
        mfm_dataset_free(ds);
        memcpy(c, b, n);
        fix_checksum(c, n);
        CHECK(memcmp(b, c, n) == 0, "test_checksum does not reproduce the file's checksum");
    }
    { /* truncated at many points; the file keeps its magic, so every cut reads as binary */
        const size_t cuts[] = {n - 1, n - 7, n - 8, n - 9, n / 2, 300, 200, 137, 136, 135, 128, 64, 9, 8};
        size_t i;
        for (i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
            char what[64];
            cut = cuts[i];
            snprintf(what, sizeof what, "cut to %lu of %lu bytes", (unsigned long)cut, (unsigned long)n);
            expect_bad_dataset(b, cut, MFM_FORMAT_AUTO, MFM_ERR_BAD_FILE, "truncated|shorter", what);
        }
        c = (unsigned char *)xrealloc(c, n + 8); /* eight bytes too many */
        memcpy(c, b, n);
        memset(c + n, 0, 8);
        expect_bad_dataset(c, n + 8, MFM_FORMAT_BINARY, MFM_ERR_BAD_FILE, "too long", "eight bytes appended");
    }
    { /* a flipped byte anywhere past the header: the checksum */
        const size_t at[] = {n / 2, n - 9, n - 1, 200};
        size_t i;
        for (i = 0; i < sizeof at / sizeof at[0]; i++) {
            char what[64];
            memcpy(c, b, n);
            c[at[i]] ^= 0x10;
            snprintf(what, sizeof what, "byte %lu flipped", (unsigned long)at[i]);
            expect_bad_dataset(c, n, MFM_FORMAT_AUTO, MFM_ERR_BAD_FILE, "checksum", what);
        }
    }
    memcpy(c, b, n); /* wrong magic: binary asked for is refused; auto reads it as (bad) text */
    c[7] = 'B';
    expect_bad_dataset(c, n, MFM_FORMAT_BINARY, MFM_ERR_BAD_FILE, "magic|not a modern_fm", "wrong magic, binary asked for");
    {
        mfm_read_options ro = read_opts(MFM_FORMAT_AUTO, MFM_TASK_DEFAULT, 1);
        mfm_dataset *ds = NULL;
        CHECK(mfm_dataset_parse(c, n, "x", &ro, &ds, &e) != MFM_OK && ds == NULL, "wrong magic read as text was accepted");
    }
    memcpy(c, b, n); /* newer version */
    store_le(c + 8, 2, 4);
    expect_bad_dataset(c, n, MFM_FORMAT_AUTO, MFM_ERR_BAD_FILE, "newer", "version 2");
    /* crafted with a valid checksum: layout from the format description (header 128 bytes,
       sections 64-byte aligned: offsets u64 x 41 from 128, then labels, weights, features) */
    {
        const uint64_t rows = 40, nnz = o.offsets[40];
        const size_t off_at = 128, labels_at = (off_at + (rows + 1) * 8 + 63) / 64 * 64, weights_at = (labels_at + rows * 4 + 63) / 64 * 64,
                     features_at = (weights_at + rows * 4 + 63) / 64 * 64;
        uint32_t f0;
        memcpy(c, b, n);
        CHECK(c[off_at + 8] == o.offsets[1] && c[features_at] == (o.features[0] & 0xFF), "the layout is not as documented");
        /* offsets[2] below offsets[1] (row 1 ends before it starts), last offset still nnz */
        store_le(c + off_at + 16, o.offsets[1] - 1 + (o.offsets[1] == 0), 8);
        store_le(c + off_at + 8, o.offsets[1] + 1, 8);
        fix_checksum(c, n);
        expect_bad_dataset(c, n, MFM_FORMAT_AUTO, MFM_ERR_BAD_FILE, "offset|offsets", "crafted decreasing offsets");
        memcpy(c, b, n); /* n_features in the header below a feature id that occurs */
        f0 = 1; /* ids above 0 occur */
        store_le(c + 40, f0, 4);
        fix_checksum(c, n);
        expect_bad_dataset(c, n, MFM_FORMAT_AUTO, MFM_ERR_BAD_FILE, "feature", "crafted feature id >= n_features");
        memcpy(c, b, n); /* n_fields below a field id */
        store_le(c + 44, 1, 4);
        fix_checksum(c, n);
        expect_bad_dataset(c, n, MFM_FORMAT_AUTO, MFM_ERR_BAD_FILE, "field", "crafted field id >= n_fields");
        memcpy(c, b, n); /* a feature id of 4294967295 */
        store_le(c + features_at + 4, 4294967295u, 4);
        store_le(c + 40, 0, 4);
        fix_checksum(c, n);
        expect_bad_dataset(c, n, MFM_FORMAT_AUTO, MFM_ERR_BAD_FILE, "feature|4294967295", "crafted feature id 4294967295");
        memcpy(c, b, n); /* last offset not nnz */
        store_le(c + off_at + 8 * rows, nnz - 1, 8);
        fix_checksum(c, n);
        expect_bad_dataset(c, n, MFM_FORMAT_AUTO, MFM_ERR_BAD_FILE, "offset|non-zeros", "crafted last offset != nnz");
        memcpy(c, b, n); /* unknown flags */
        store_le(c + 16, 16 | 15, 4);
        fix_checksum(c, n);
        expect_bad_dataset(c, n, MFM_FORMAT_AUTO, MFM_ERR_BAD_FILE, "corrupt|flags", "crafted unknown flags");
        memcpy(c, b, n); /* a NaN value */
        {
            const size_t fields_at = (features_at + nnz * 4 + 63) / 64 * 64, values_at = (fields_at + nnz * 4 + 63) / 64 * 64;
            store_le(c + values_at + 4, 0x7FC00000u, 4);
            fix_checksum(c, n);
            expect_bad_dataset(c, n, MFM_FORMAT_AUTO, MFM_ERR_BAD_FILE, "value|finite", "crafted NaN value");
        }
    }
    { /* a model file is not a dataset */
        mfm_params p;
        mfm_model *m = NULL;
        unsigned char *mb;
        size_t mn;
        memset(&p, 0, sizeof p);
        p.k = 2;
        if (CHECK(mfm_model_create(&p, 3, 0, 1, &m, &e) == MFM_OK && mfm_model_save(m, bin, 0, &e) == MFM_OK, "model: %s", e.message) &&
            (mb = read_whole_file(bin, &mn)) != NULL) {
            expect_bad_dataset(mb, mn, MFM_FORMAT_AUTO, MFM_ERR_BAD_FILE, "model", "a model file");
            free(mb);
        }
        mfm_model_free(m);
    }
    free(b);
    free(c);
    scratch_clean();
}

/* A path that is a symbolic link gets its file replaced (the link stays a link); a path that is
   a device is written into, never replaced by a regular file. */
void test_write_through_link_and_device(void) {
    static const char text[] = "1 0:3:1\n0 1:4:0.5\n";
    char target[512], link_path[512];
    unsigned char *back;
    struct stat st;
    mfm_dataset *ds = NULL;
    mfm_error e;
    mfm_csr d;
    size_t n = 0;
    REQUIRE(mfm_dataset_parse(text, sizeof text - 1, "small", NULL, &ds, &e) == MFM_OK, "%s", e.message);
    d = mfm_dataset_csr(ds);
    scratch_path(target, sizeof target, "target.ffm");
    scratch_path(link_path, sizeof link_path, "link.ffm");
    if (CHECK(write_whole_file(target, "old", 3) && symlink("target.ffm", link_path) == 0, "cannot set up the link")) {
        CHECK(mfm_dataset_write(&d, link_path, MFM_FORMAT_LIBFFM, &e) == MFM_OK, "%s", e.message);
        CHECK(lstat(link_path, &st) == 0 && S_ISLNK(st.st_mode), "the link was replaced by a file");
        back = read_whole_file(target, &n);
        CHECK(back && n == sizeof text - 1 && memcmp(back, text, n) == 0, "the link's file does not hold the text");
        free(back);
    }
    CHECK(mfm_dataset_write(&d, "/dev/null", MFM_FORMAT_BINARY, &e) == MFM_OK, "%s", e.message);
    CHECK(stat("/dev/null", &st) == 0 && S_ISCHR(st.st_mode), "/dev/null is no longer a device");
    mfm_dataset_free(ds);
    scratch_clean();
}
