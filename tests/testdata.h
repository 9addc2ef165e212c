/* testdata.h - data files the tests write for themselves, shaped like the public data sets
   people feed factorization machines: libffm text like a click log (18 fields, a few with small
   vocabularies and many with large ones, ~10,000 features) and libsvm text like the mushroom
   data set (22 one-hot attributes, 1-based ids, every value 1). Each carries a planted signal
   (a field interaction and a main effect) that a model can learn, and, on request, the quirks of
   real files: fields out of order, several features in one field, a missing field, trailing
   spaces, CRLF line ends, a last line without its newline, -1/+1 labels.

   The facts returned (rows, non-zeros, positives, max id + 1, fields, bytes) are counted while
   writing, never read back through the library, so tests may compare the library against them. */
#ifndef TESTS_TESTDATA_H
#define TESTS_TESTDATA_H

#include <stddef.h>
#include <stdint.h>

enum {
    TESTDATA_CRLF = 1,                /* every line ends "\r\n" */
    TESTDATA_NO_FINAL_NEWLINE = 2,    /* the last line has no line end */
    TESTDATA_TRAILING_SPACES = 4,     /* some lines end in spaces (before the line end) */
    TESTDATA_PLUS_MINUS_LABELS = 8    /* labels "+1" / "-1" instead of "1" / "0" */
};

typedef struct testdata_facts {
    uint64_t n_rows, nnz, positives, bytes;
    uint32_t n_features; /* largest id + 1 */
    uint32_t n_fields;   /* largest field + 1; 0 for libsvm */
} testdata_facts;

/* Click-log-like libffm text: rows `n_rows`, drawn from `seed` (rows of another seed follow the
   same planted signal, so a train and a test file come from two seeds). Returns 1 on success. */
int testdata_write_ffm(const char *path, uint64_t n_rows, uint64_t seed, int quirks, testdata_facts *facts);

/* Mushroom-like libsvm text (22 attributes, ids 1..126, values 1), as above. */
int testdata_write_svm(const char *path, uint64_t n_rows, uint64_t seed, int quirks, testdata_facts *facts);

/* The files most tests use, written into the scratch directory (path receives where):
     TESTDATA_TRAIN_FFM  "train.ffm"  200 rows, seed 1
     TESTDATA_TEST_FFM   "test.ffm"   200 rows, seed 2, trailing spaces
     TESTDATA_TRAIN_SVM  "train.svm"  2000 rows, seed 3
     TESTDATA_TEST_SVM   "test.svm"   500 rows, seed 4
   Returns 1 on success; facts may be NULL. */
typedef enum testdata_file { TESTDATA_TRAIN_FFM, TESTDATA_TEST_FFM, TESTDATA_TRAIN_SVM, TESTDATA_TEST_SVM } testdata_file;
int testdata_standard(testdata_file which, char *path, size_t path_size, testdata_facts *facts);

#endif
