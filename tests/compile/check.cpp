// check.cpp - compile check in C++ (C++11 and C++17, g++ and mingw-w64): the implementation
// compiles as C++ warning-free, then the same smoke run as check.c.
#define MODERN_FM_IMPLEMENTATION
#include "../../modern_fm.h"

#include <cstdio>

int main() {
    static const uint64_t offsets[] = {0, 3, 5};
    static const uint32_t features[] = {0, 2, 4, 1, 3}, fields[] = {0, 1, 2, 0, 1};
    static const float labels[] = {1, 0};
    float prob[2] = {-1, -1};
    mfm_params p{}; // all zero = the defaults; C++ warns on {0}
    mfm_csr d{};
    mfm_model *m = nullptr;
    mfm_error e;
    p.model = MFM_MODEL_FWFM;
    p.k = 4;
    p.n_epochs = 1;
    p.n_threads = 2;
    d.n_rows = 2;
    d.row_offsets = offsets;
    d.features = features;
    d.fields = fields;
    d.labels = labels;
    if (mfm_train(&p, &d, &m, &e) != MFM_OK || mfm_predict(m, &d, MFM_OUTPUT_PROBABILITY, prob, 2, &e) != MFM_OK) {
        std::fprintf(stderr, "check.cpp: %s: %s\n", mfm_status_string(e.status), e.message);
        mfm_model_free(m);
        return 1;
    }
    mfm_model_free(m);
    if (!(prob[0] > 0 && prob[0] < 1 && prob[1] > 0 && prob[1] < 1)) {
        std::fprintf(stderr, "check.cpp: probabilities %g %g are not in (0, 1)\n", prob[0], prob[1]);
        return 1;
    }
    std::printf("modern_fm %s: C++ smoke run ok (p = %.4f, %.4f)\n", mfm_version_string(), prob[0], prob[1]);
    return 0;
}
