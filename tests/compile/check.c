/* check.c - compile check in C: the implementation in this translation unit, warning-free
   under -Wall -Wextra -Wpedantic -Werror, then a smoke run (train one epoch on two rows,
   predict one). The Makefile builds it as C99 and C11, with gcc and clang, with MFM_NO_CUDA,
   MFM_STATIC and MFM_NO_THREADS, and for Windows with mingw-w64 (compile only). */
#define MODERN_FM_IMPLEMENTATION
#include "../../modern_fm.h"

#include <stdio.h>

int main(void) {
    static const uint64_t offsets[] = {0, 3, 5};
    static const uint32_t features[] = {0, 2, 4, 1, 3}, fields[] = {0, 1, 2, 0, 1};
    static const float labels[] = {1, 0};
    float prob[2] = {-1, -1};
    mfm_params p = {0};
    mfm_csr d = {0};
    mfm_model *m = NULL;
    mfm_error e;
    p.model = MFM_MODEL_FFM;
    p.k = 4;
    p.n_epochs = 1;
    p.n_threads = 2;
    d.n_rows = 2;
    d.row_offsets = offsets;
    d.features = features;
    d.fields = fields;
    d.labels = labels;
    if (mfm_train(&p, &d, &m, &e) != MFM_OK || mfm_predict(m, &d, MFM_OUTPUT_PROBABILITY, prob, 2, &e) != MFM_OK) {
        fprintf(stderr, "check.c: %s: %s\n", mfm_status_string(e.status), e.message);
        mfm_model_free(m);
        return 1;
    }
    mfm_model_free(m);
    if (!(prob[0] > 0 && prob[0] < 1 && prob[1] > 0 && prob[1] < 1)) {
        fprintf(stderr, "check.c: probabilities %g %g are not in (0, 1)\n", prob[0], prob[1]);
        return 1;
    }
    printf("modern_fm %s: C smoke run ok (p = %.4f, %.4f)\n", mfm_version_string(), prob[0], prob[1]);
    return 0;
}
