/* fuzz_dataset.c - libFuzzer target for the dataset readers (make fuzz).

   The first byte picks the read options, the rest is the input of mfm_dataset_parse:
     bits 0-1  format: auto, libffm, libsvm, binary
     bits 2-3  task: default, binary, regression, multiclass
     bit  4    n_threads 2 (else 1)
     bit  5    a binary dataset (MFM-DATA magic) gets a correct checksum, so that the checks
               behind the checksum are reached too
     bit  6    a successful read is written back (text as text, binary as binary) to a scratch
               file, read again and compared array for array
   A successful read must give a well-formed CSR (offsets from 0, never decreasing, ids below
   n_features / n_fields, finite values, labels as the task reads them). Scratch files go to
   $MFM_FUZZ_TMP, else /dev/shm, else /tmp. */
#define MODERN_FM_IMPLEMENTATION
#include "../../modern_fm.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void require(int cond, const char *what) {
    if (!cond) {
        fprintf(stderr, "fuzz_dataset: invariant broken: %s\n", what);
        abort();
    }
}

static int same(const void *a, const void *b, size_t n) { return (a == NULL) == (b == NULL) && (!a || n == 0 || memcmp(a, b, n) == 0); }

/* The task the labels were read for: the one asked for; by default binary, or for a binary
   file the task it records. */
static mfm_task task_read(const mfm_dataset *ds, const mfm_read_options *o) {
    mfm_dataset_info info;
    mfm_dataset_get_info(ds, &info);
    return o->task != MFM_TASK_DEFAULT ? o->task : info.labels_task != MFM_TASK_DEFAULT ? info.labels_task : MFM_TASK_BINARY;
}

/* The CSR of a successful read is well formed; text sets n_features / n_fields to max id + 1. */
static void check_dataset(const mfm_dataset *ds, const mfm_read_options *o) {
    mfm_csr d = mfm_dataset_csr(ds);
    mfm_dataset_info info;
    uint64_t r, j, nnz;
    uint32_t max_feature = 0, max_field = 0;
    const mfm_task task = task_read(ds, o);
    mfm_dataset_get_info(ds, &info);
    require(d.row_offsets != NULL && d.row_offsets[0] == 0, "row_offsets[0] == 0");
    for (r = 0; r < d.n_rows; r++) require(d.row_offsets[r + 1] >= d.row_offsets[r], "row offsets never decrease");
    nnz = d.row_offsets[d.n_rows];
    require(info.n_rows == d.n_rows && info.nnz == nnz, "info agrees with the CSR");
    require(info.has_labels == (d.labels != NULL) && info.has_fields == (d.fields != NULL) && info.has_values == (d.values != NULL) &&
                info.has_weights == (d.weights != NULL),
            "info flags agree with the arrays");
    for (j = 0; j < nnz; j++) {
        require(d.features[j] != 0xFFFFFFFFu, "feature id below 2^32-1");
        if (d.features[j] + 1 > max_feature) max_feature = d.features[j] + 1;
        if (d.n_features) require(d.features[j] < d.n_features, "feature id < n_features");
        if (d.fields) {
            require(d.fields[j] != 0xFFFFFFFFu, "field id below 2^32-1");
            if (d.fields[j] + 1 > max_field) max_field = d.fields[j] + 1;
            if (d.n_fields) require(d.fields[j] < d.n_fields, "field id < n_fields");
        }
        if (d.values) require(d.values[j] - d.values[j] == 0, "finite values");
    }
    if (d.labels)
        for (r = 0; r < d.n_rows; r++) {
            float y = d.labels[r];
            require(y - y == 0, "finite labels");
            if (task == MFM_TASK_BINARY) require(y == 0 || y == 1, "binary labels are 0 or 1");
            if (task == MFM_TASK_MULTICLASS) require(y >= 0 && y == (float)(uint32_t)y, "multiclass labels are class ids");
        }
    if (info.format != MFM_FORMAT_BINARY) {
        require(info.format == MFM_FORMAT_LIBFFM || info.format == MFM_FORMAT_LIBSVM, "text is libffm or libsvm");
        require(info.n_features == max_feature && (d.n_features == 0 || d.n_features == max_feature), "text: n_features = max feature id + 1");
        require(info.n_fields == max_field && (d.n_fields == 0 || d.n_fields == max_field), "text: n_fields = max field id + 1");
        require(d.weights == NULL, "text has no weights");
        require(info.format == MFM_FORMAT_LIBFFM || d.fields == NULL, "libsvm has no fields");
        if (o->format == MFM_FORMAT_LIBFFM || o->format == MFM_FORMAT_LIBSVM) require(info.format == o->format, "the format asked for");
    }
}

static const char *scratch_file(void) {
    static char path[512];
    if (!path[0]) {
        const char *dir = getenv("MFM_FUZZ_TMP");
        if (!dir || !*dir) dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
        snprintf(path, sizeof path, "%s/mfm-fuzz-dataset-%ld", dir, (long)getpid());
    }
    return path;
}

/* Written back and read again: the same arrays. Unlabeled data with an empty row is left out:
   that row becomes a blank line, which readers skip (a known limitation of the text formats). */
static void round_trip(const mfm_dataset *ds, const mfm_read_options *o) {
    mfm_csr a = mfm_dataset_csr(ds), b;
    mfm_dataset_info info;
    mfm_read_options o2 = *o;
    mfm_dataset *back = NULL;
    mfm_error e;
    mfm_format format;
    uint64_t r, nnz = a.row_offsets[a.n_rows];
    mfm_status st;
    const char *path = scratch_file();
    mfm_dataset_get_info(ds, &info);
    if (info.format == MFM_FORMAT_BINARY) {
        format = MFM_FORMAT_BINARY;
    } else {
        format = a.fields ? MFM_FORMAT_LIBFFM : MFM_FORMAT_LIBSVM;
        if (!a.labels)
            for (r = 0; r < a.n_rows; r++)
                if (a.row_offsets[r] == a.row_offsets[r + 1]) return;
    }
    st = mfm_dataset_write(&a, path, format, &e);
    if (st != MFM_OK) fprintf(stderr, "fuzz_dataset: write failed: %s\n", e.message);
    require(st == MFM_OK, "a dataset that was read can be written");
    o2.format = format;
    o2.task = task_read(ds, o); /* a file written from a view records no task */
    st = mfm_dataset_read(path, &o2, &back, &e);
    if (st != MFM_OK) fprintf(stderr, "fuzz_dataset: reading back failed: %s\n", e.message);
    require(st == MFM_OK, "what was written reads back");
    remove(path);
    b = mfm_dataset_csr(back);
    require(a.n_rows == b.n_rows && same(a.row_offsets, b.row_offsets, (size_t)(a.n_rows + 1) * 8), "round trip: row offsets");
    require(same(a.features, b.features, (size_t)nnz * 4) || nnz == 0, "round trip: features");
    require(same(a.fields, b.fields, (size_t)nnz * 4) || nnz == 0, "round trip: fields");
    require(same(a.values, b.values, (size_t)nnz * 4) || nnz == 0, "round trip: values (bits)");
    require(same(a.labels, b.labels, (size_t)a.n_rows * 4) || a.n_rows == 0, "round trip: labels (bits)");
    require(same(a.weights, b.weights, (size_t)a.n_rows * 4) || a.n_rows == 0, "round trip: weights");
    { /* n_features / n_fields: 0 means max id + 1 */
        uint32_t nf = 0, nfld = 0;
        uint64_t j;
        for (j = 0; j < nnz; j++) {
            if (a.features[j] + 1 > nf) nf = a.features[j] + 1;
            if (a.fields && a.fields[j] + 1 > nfld) nfld = a.fields[j] + 1;
        }
        require((b.n_features ? b.n_features : nf) == (a.n_features ? a.n_features : nf), "round trip: n_features");
        require((b.n_fields || !b.fields ? b.n_fields : nfld) == (a.n_fields || !a.fields ? a.n_fields : nfld), "round trip: n_fields");
    }
    mfm_dataset_free(back);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const mfm_format formats[4] = {MFM_FORMAT_AUTO, MFM_FORMAT_LIBFFM, MFM_FORMAT_LIBSVM, MFM_FORMAT_BINARY};
    mfm_read_options o;
    mfm_dataset *ds = (mfm_dataset *)&o;
    mfm_error e;
    mfm_status st;
    unsigned char *bytes;
    unsigned sel;
    if (size < 1) return 0;
    sel = data[0];
    data++, size--;
    memset(&o, 0, sizeof o);
    o.format = formats[sel & 3];
    o.task = (mfm_task)((sel >> 2) & 3);
    o.n_threads = sel & 16 ? 2 : 1;
    bytes = (unsigned char *)malloc(size ? size : 1); /* exactly the input's size: reads past it are caught */
    if (size) memcpy(bytes, data, size);
    if ((sel & 32) && size >= 16 && memcmp(bytes, "MFM-DATA", 8) == 0) mfm__store_le(bytes + size - 8, mfm__checksum(bytes, size - 8), 8);
    memset(&e, 0, sizeof e);
    st = mfm_dataset_parse(bytes, size, "fuzz", &o, &ds, &e);
    if (st == MFM_OK) {
        require(ds != NULL, "a dataset on success");
        check_dataset(ds, &o);
        if (sel & 64) round_trip(ds, &o);
        mfm_dataset_free(ds);
    } else {
        require(ds == NULL, "no dataset on failure");
        require(e.status == st && e.message[0] != '\0', "a failure has a message");
        if (st == MFM_ERR_INVALID_DATA && memcmp(bytes, "MFM-DATA", size < 8 ? size : 8) != 0)
            require(strncmp(e.message, "fuzz:", 5) == 0, "a text error starts with name:line:column");
    }
    free(bytes);
    return 0;
}
