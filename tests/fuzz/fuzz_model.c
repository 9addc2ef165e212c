/* fuzz_model.c - libFuzzer target for the model file loader (make fuzz).

   The input is a model file for mfm_model_load_memory. When it starts with the MFMMODEL magic
   and its last 8 bytes are zero, every checksum is written again (tests/seal.h), so that the
   checks behind the checksums are reached too. A model that loads must predict a tiny row,
   open with mfm_model_map and mfm_model_load_parameters to the same score, and survive a save and load unchanged (scratch
   file in $MFM_FUZZ_TMP, else /dev/shm, else /tmp). */
#define MODERN_FM_IMPLEMENTATION
#include "../../modern_fm.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../seal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void require(int cond, const char *what) {
    if (!cond) {
        fprintf(stderr, "fuzz_model: invariant broken: %s\n", what);
        abort();
    }
}

static const char *scratch_file(void) {
    static char path[512];
    if (!path[0]) {
        const char *dir = getenv("MFM_FUZZ_TMP");
        if (!dir || !*dir) dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
        snprintf(path, sizeof path, "%s/mfm-fuzz-model-%ld", dir, (long)getpid());
    }
    return path;
}

/* Every slot of every tensor and class of a and b (slots 0..n_slots-1) is the same. */
static void require_same_tensors(const mfm_model *a, const mfm_model *b, int n_slots) {
    mfm_model_info info;
    int t, s;
    uint32_t c;
    mfm_model_get_info(a, &info);
    for (t = 0; t < MFM_TENSOR_COUNT; t++) {
        size_t n = mfm_tensor_size(a, (mfm_tensor)t);
        float *x, *y;
        if (!n) continue;
        require(n == mfm_tensor_size(b, (mfm_tensor)t), "save/load: tensor sizes");
        x = (float *)malloc(n * sizeof(float));
        y = (float *)malloc(n * sizeof(float));
        for (s = 0; s < n_slots; s++)
            for (c = 0; c < info.n_classes; c++) {
                const size_t count = mfm_tensor_slot_size(a, (mfm_tensor)t, s); /* row-wise AdaGrad: fewer in a state slot */
                require(mfm_model_get_tensor(a, (mfm_tensor)t, s, c, x, count, NULL) == MFM_OK && mfm_model_get_tensor(b, (mfm_tensor)t, s, c, y, count, NULL) == MFM_OK,
                        "mfm_model_get_tensor");
                require(memcmp(x, y, count * sizeof(float)) == 0, "save/load: the same tensors");
            }
        free(x);
        free(y);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const unsigned char zeros[8] = {0};
    unsigned char *bytes = (unsigned char *)malloc(size ? size : 1);
    mfm_model *m = NULL;
    mfm_error e;
    mfm_status st;
    if (size) memcpy(bytes, data, size);
    if (size >= 16 && memcmp(bytes, "MFMMODEL", 8) == 0 && memcmp(bytes + size - 8, zeros, 8) == 0 &&
        (mfm__load_le32(bytes + 8) < 2 || !v2_reseal(bytes, size, mfm__checksum)))
        mfm__store_le(bytes + size - 8, mfm__checksum(bytes, size - 8), 8);
    memset(&e, 0, sizeof e);
    st = mfm_model_load_memory(bytes, size, &m, &e);
    if (st != MFM_OK) {
        require(m == NULL, "no model on failure");
        require(e.status == st && e.message[0] != '\0', "a failure has a message");
    } else {
        mfm_model_info info, info2;
        uint64_t offsets[2] = {0, 0};
        uint32_t feature = 0, field = 0;
        float value = 0.5f, out[4096];
        mfm_csr row;
        mfm_model *back = NULL;
        size_t width;
        require(m != NULL, "a model on success");
        mfm_model_get_info(m, &info);
        memset(&row, 0, sizeof row);
        row.n_rows = 1;
        row.row_offsets = offsets;
        row.features = &feature;
        row.fields = &field;
        row.values = &value;
        if (info.n_features > 0 && (info.model == MFM_MODEL_FM || info.n_fields > 0)) offsets[1] = 1;
        width = mfm_output_width(m, MFM_OUTPUT_SCORE);
        if (width <= sizeof out / sizeof out[0]) {
            float again[4096];
            FILE *f = fopen(scratch_file(), "wb");
            int copied;
            st = mfm_predict(m, &row, MFM_OUTPUT_SCORE, out, width, &e);
            if (st != MFM_OK) fprintf(stderr, "fuzz_model: predict failed: %s\n", e.message);
            require(st == MFM_OK, "a loaded model predicts a row of its shape");
            require(f && fwrite(bytes, 1, size, f) == size && fclose(f) == 0, "the scratch file is written");
            for (copied = 0; copied < 2; copied++) { /* opened for prediction: mapped, then copied */
                mfm_model *opened = NULL;
                st = copied ? mfm_model_load_parameters(scratch_file(), &opened, &e) : mfm_model_map(scratch_file(), &opened, &e);
                if (st != MFM_OK) fprintf(stderr, "fuzz_model: %s failed: %s\n", copied ? "load_parameters" : "map", e.message);
                require(st == MFM_OK, "a file that loads opens for prediction");
                require(mfm_predict(opened, &row, MFM_OUTPUT_SCORE, again, width, &e) == MFM_OK && memcmp(out, again, width * sizeof(float)) == 0,
                        "a model opened for prediction predicts the loaded model's scores");
                mfm_model_free(opened);
            }
        }
        st = mfm_model_save(m, scratch_file(), info.has_state, &e);
        if (st != MFM_OK) fprintf(stderr, "fuzz_model: save failed: %s\n", e.message);
        require(st == MFM_OK, "a loaded model saves");
        st = mfm_model_load(scratch_file(), &back, &e);
        remove(scratch_file());
        if (st != MFM_OK) fprintf(stderr, "fuzz_model: loading the saved model failed: %s\n", e.message);
        require(st == MFM_OK, "a saved model loads");
        mfm_model_get_info(back, &info2);
        require(info.model == info2.model && info.task == info2.task && info.optimizer == info2.optimizer && info.n_features == info2.n_features &&
                    info.n_fields == info2.n_fields && info.n_classes == info2.n_classes && info.k == info2.k &&
                    info.epochs_trained == info2.epochs_trained && info.has_state == info2.has_state,
                "save/load: the same info");
        require_same_tensors(m, back, info.has_state ? 1 + info.n_state_slots : 1);
        mfm_model_free(back);
        mfm_model_free(m);
    }
    free(bytes);
    return 0;
}
