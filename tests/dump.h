/* dump.h - every tensor, class and slot of a model into one array, through whichever copy of
   the library the including file sees (tests/test_inplace.c has a second, static one). */
#ifndef TESTS_DUMP_H
#define TESTS_DUMP_H

#include <stdlib.h>

/* Floats written; 0 when cap is too small or a read fails. */
static size_t dump_model(const mfm_model *m, float *out, size_t cap) {
    mfm_model_info info;
    size_t used = 0;
    int t, slot;
    uint32_t c;
    mfm_model_get_info(m, &info);
    for (t = 0; t < MFM_TENSOR_COUNT; t++)
        for (c = 0; c < info.n_classes; c++)
            for (slot = 0; slot <= info.n_state_slots; slot++) {
                size_t n = mfm_tensor_slot_size(m, (mfm_tensor)t, slot);
                if (!n) continue;
                if (used + n > cap || mfm_model_get_tensor(m, (mfm_tensor)t, slot, c, out + used, n, NULL) != MFM_OK) return 0;
                used += n;
            }
    return used;
}

#endif
