/* test_model_files.c - model files: save and load give back the same model bit for bit (with
   or without the optimizer state), training resumes exactly from a saved file, clones are
   independent deep copies, damaged files are refused with a sentence saying what is wrong, and
   a failed save leaves the old file in place.

   Expected sizes and checksums follow the layout of docs/FORMATS.md (format 2: a 252-byte
   header of magic, 18 u32, 2 u64, 11 f64, 5 u32 and 3 f64 of the LIBFFM switches and early
   stopping, u64 file size and directory offset, the header's checksum; class weights; 4096-byte
   aligned sections of parameters, laid out as a model opened for prediction holds them, then of
   state; the directory; its checksum), computed here by hand. Models opened with mfm_model_map
   predict the same bits; files of format 1 (tests/data/) still load. */
#if !defined(_XOPEN_SOURCE)
#define _XOPEN_SOURCE 700
#endif
#include "../modern_fm.h"
#include "ref.h"
#include "runner.h"
#include "scratch.h"
#include "seal.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

enum { MODEL_HEADER_BYTES = 8 + 18 * 4 + 2 * 8 + 11 * 8 + 5 * 4 + 3 * 8 }; /* 228: format 1's header */
enum { V2_FIELDS_BYTES = MODEL_HEADER_BYTES + 16, V2_HEADER_BYTES = V2_FIELDS_BYTES + 8, ALIGN = 4096, CHUNK = 1 << 20 };
enum { N_FEATURES = 20, N_FIELDS = 4 };

static const char *task_name(mfm_task t) { return t == MFM_TASK_REGRESSION ? "regression" : t == MFM_TASK_MULTICLASS ? "multiclass" : "binary"; }
static const char *opt_name(mfm_optimizer o) {
    return o == MFM_OPTIMIZER_SGD ? "SGD" : o == MFM_OPTIMIZER_ADAM ? "Adam" : o == MFM_OPTIMIZER_FTRL ? "FTRL" : o == MFM_OPTIMIZER_ROWWISE_ADAGRAD ? "row-wise AdaGrad" : "AdaGrad";
}
static int state_slots(mfm_optimizer o) { return o == MFM_OPTIMIZER_SGD ? 0 : o == MFM_OPTIMIZER_ADAM ? 3 : o == MFM_OPTIMIZER_FTRL ? 2 : 1; }

/* Distinctive values for every parameter that a file must keep. */
static mfm_params file_params(mfm_model_type model, mfm_task task, mfm_optimizer opt) {
    mfm_params p;
    memset(&p, 0, sizeof p);
    p.model = model;
    p.task = task;
    p.optimizer = opt;
    p.k = 3;
    p.n_classes = task == MFM_TASK_MULTICLASS ? 3 : 0;
    p.n_epochs = 2;
    p.batch_size = 3;
    p.n_threads = 1;
    p.learning_rate = 0.037;
    p.l2_linear = 1e-3;
    p.l2_factors = 2.5e-3;
    p.init_scale = 0.02;
    p.adam_beta1 = 0.85;
    p.adam_beta2 = 0.995;
    p.adam_epsilon = 1e-7;
    p.ftrl_beta = 0.7;
    if (opt == MFM_OPTIMIZER_FTRL) p.l1_linear = 1e-3, p.l1_factors = 2e-3;
    if (task != MFM_TASK_REGRESSION) p.label_smoothing = 0.05;
    p.seed = 12345678901234ull;
    return p;
}

static void make_data(test_data *td, mfm_task task, uint64_t seed) {
    data_spec s;
    memset(&s, 0, sizeof s);
    s.n_rows = 60;
    s.feature_range = N_FEATURES;
    s.n_fields = N_FIELDS;
    s.min_nnz = 1;
    s.max_nnz = 6;
    s.with_values = 1;
    s.task = task;
    s.n_classes = 3;
    s.seed = seed;
    data_random(td, &s);
    td->csr.n_features = N_FEATURES;
    td->csr.n_fields = N_FIELDS;
}

/* mfm_model_create + mfm_fit, recording failures. */
static mfm_model *create_and_fit(const mfm_params *p, const mfm_csr *d) {
    mfm_model *m = make_model(p, N_FEATURES, N_FIELDS, 3);
    mfm_error e;
    mfm_status st;
    if (!m) return NULL;
    st = mfm_fit(m, d, &e);
    if (!CHECK(st == MFM_OK, "mfm_fit failed: %d %s", (int)st, st ? e.message : "")) {
        mfm_model_free(m);
        return NULL;
    }
    return m;
}

/* Slots [first, last] of every tensor and class of a and b are bit-identical; returns 1 if so. */
static int same_slots(const mfm_model *a, const mfm_model *b, int first, int last, const char *what) {
    mfm_model_info ia;
    int t, slot, ok = 1;
    uint32_t c;
    mfm_model_get_info(a, &ia);
    for (t = 0; t < MFM_TENSOR_COUNT; t++) {
        size_t n = mfm_tensor_size(a, (mfm_tensor)t); /* the largest slot */
        float *x, *y;
        if (!n) continue;
        if (!CHECK(n == mfm_tensor_size(b, (mfm_tensor)t), "%s: tensor %d sizes differ", what, t)) return 0;
        x = (float *)malloc(n * sizeof(float));
        y = (float *)malloc(n * sizeof(float));
        for (slot = first; slot <= last; slot++)
            for (c = 0; c < ia.n_classes; c++) {
                const size_t count = mfm_tensor_slot_size(a, (mfm_tensor)t, slot);
                mfm_status s1 = mfm_model_get_tensor(a, (mfm_tensor)t, slot, c, x, count, NULL), s2 = mfm_model_get_tensor(b, (mfm_tensor)t, slot, c, y, count, NULL);
                if (!CHECK(s1 == MFM_OK && s2 == MFM_OK, "%s: mfm_model_get_tensor tensor %d slot %d class %u failed", what, t, slot, c) ||
                    !CHECK(memcmp(x, y, count * sizeof(float)) == 0, "%s: tensor %d slot %d class %u differs", what, t, slot, c))
                    ok = 0;
            }
        free(x);
        free(y);
    }
    return ok;
}

/* Every state slot (1..) of every tensor and class is at its start: AdaGrad's accumulator at
   adagrad_init, everything else zero. */
static int state_is_fresh(const mfm_model *m, const char *what) {
    const mfm_params *p = mfm_model_params(m);
    mfm_model_info info;
    int t, slot, ok = 1;
    uint32_t c;
    size_t i;
    mfm_model_get_info(m, &info);
    for (t = 0; t < MFM_TENSOR_COUNT; t++) {
        size_t n = mfm_tensor_size(m, (mfm_tensor)t);
        float *x;
        if (!n) continue;
        x = (float *)malloc(n * sizeof(float));
        for (slot = 1; slot <= info.n_state_slots; slot++)
            for (c = 0; c < info.n_classes; c++) {
                const int adagrad = p->optimizer == MFM_OPTIMIZER_ADAGRAD || p->optimizer == MFM_OPTIMIZER_ROWWISE_ADAGRAD;
                const float want = adagrad && slot == 1 ? (float)p->adagrad_init : 0.0f;
                const size_t count = mfm_tensor_slot_size(m, (mfm_tensor)t, slot);
                mfm_model_get_tensor(m, (mfm_tensor)t, slot, c, x, count, NULL);
                for (i = 0; i < count; i++)
                    if (x[i] != want) {
                        ok = 0;
                        runner_fail(__FILE__, __LINE__, "%s: state slot %d of tensor %d class %u is %g at %lu, expected %g", what, slot, t, c, (double)x[i], (unsigned long)i,
                                    (double)want);
                        break;
                    }
            }
        free(x);
    }
    return ok;
}

/* The params a file must keep (n_classes, callbacks and the class-weight pointer aside). */
static int same_params(const mfm_params *a, const mfm_params *b, const char *what) {
    return CHECK(a->model == b->model && a->task == b->task && a->optimizer == b->optimizer && a->k == b->k && a->n_epochs == b->n_epochs &&
                     a->batch_size == b->batch_size && a->n_threads == b->n_threads && a->learning_rate == b->learning_rate &&
                     a->l2_linear == b->l2_linear && a->l2_factors == b->l2_factors && a->l1_linear == b->l1_linear && a->l1_factors == b->l1_factors &&
                     a->init_scale == b->init_scale && a->adam_beta1 == b->adam_beta1 && a->adam_beta2 == b->adam_beta2 &&
                     a->adam_epsilon == b->adam_epsilon && a->ftrl_beta == b->ftrl_beta && a->label_smoothing == b->label_smoothing &&
                     a->class_weight == b->class_weight && a->seed == b->seed && a->linear_only == b->linear_only,
                 "%s: params differ (lr %g/%g, l2 %g/%g, seed %llu/%llu, batch %d/%d, k %d/%d, epochs %d/%d)", what, a->learning_rate, b->learning_rate,
                 a->l2_linear, b->l2_linear, (unsigned long long)a->seed, (unsigned long long)b->seed, a->batch_size, b->batch_size, a->k, b->k,
                 a->n_epochs, b->n_epochs);
}

static int same_info(const mfm_model_info *a, const mfm_model_info *b, const char *what) {
    return CHECK(a->model == b->model && a->task == b->task && a->optimizer == b->optimizer && a->n_features == b->n_features &&
                     a->n_fields == b->n_fields && a->n_classes == b->n_classes && a->k == b->k && a->n_state_slots == b->n_state_slots &&
                     a->epochs_trained == b->epochs_trained && a->n_parameters == b->n_parameters && a->memory_bytes == b->memory_bytes,
                 "%s: model info differs (features %u/%u fields %u/%u classes %u/%u k %d/%d slots %d/%d epochs %llu/%llu params %llu/%llu)", what,
                 a->n_features, b->n_features, a->n_fields, b->n_fields, a->n_classes, b->n_classes, a->k, b->k, a->n_state_slots, b->n_state_slots,
                 (unsigned long long)a->epochs_trained, (unsigned long long)b->epochs_trained, (unsigned long long)a->n_parameters,
                 (unsigned long long)b->n_parameters);
}

static uint64_t align_up(uint64_t x) { return (x + ALIGN - 1) / ALIGN * ALIGN; }

/* The parameter floats of one class as a model opened for prediction lays them out: FM's and
   FwFM's w inside V's blocks, padded to a power of two floats, where that is at most 16. */
static uint64_t prediction_floats(const mfm_params *p, uint32_t n_features, uint32_t n_fields, int k, uint64_t *sections) {
    uint64_t padded = 1, floats = 1; /* w0 */
    while (padded < (uint64_t)k + 1) padded *= 2;
    *sections = 2 + (p->model == MFM_MODEL_FWFM);
    if (p->model == MFM_MODEL_FFM) {
        floats += (uint64_t)n_features * (1 + (uint64_t)n_fields * k);
        *sections += 1;
    } else if (!p->linear_only && padded <= 16) {
        floats += (uint64_t)n_features * padded;
    } else {
        floats += (uint64_t)n_features * (1 + (uint64_t)k);
        *sections += 1;
    }
    if (p->model == MFM_MODEL_FWFM) floats += (uint64_t)n_fields * n_fields;
    return floats;
}

/* The file size the documented layout gives: each section padded to 4096 bytes. */
static uint64_t expected_file_bytes(const mfm_model *m, int with_state) {
    const mfm_params *p = mfm_model_params(m);
    mfm_model_info info;
    uint64_t per_class, cw = 0, at, sections, padded = 1, table[4];
    int t;
    mfm_model_get_info(m, &info);
    per_class = 1 + (uint64_t)info.n_features + (uint64_t)info.n_features * (p->model == MFM_MODEL_FFM ? info.n_fields : 1) * (uint64_t)info.k +
                (p->model == MFM_MODEL_FWFM ? (uint64_t)info.n_fields * info.n_fields : 0);
    if (p->class_weight == MFM_CLASS_WEIGHT_EXPLICIT) cw = p->task == MFM_TASK_BINARY ? 2 : info.n_classes;
    prediction_floats(p, info.n_features, info.n_fields, info.k, &sections);
    while (padded < (uint64_t)info.k + 1) padded *= 2;
    table[0] = 1; /* each parameter section on its own */
    table[1] = sections == 2 + (p->model == MFM_MODEL_FWFM) ? 0 : info.n_features;
    table[2] = (uint64_t)info.n_features * (p->model == MFM_MODEL_FFM ? (uint64_t)info.n_fields * info.k : table[1] ? (uint64_t)info.k : padded);
    table[3] = p->model == MFM_MODEL_FWFM ? (uint64_t)info.n_fields * info.n_fields : 0;
    at = align_up(V2_HEADER_BYTES + 4 * cw);
    for (t = 0; t < 4; t++) at += align_up(4 * table[t] * info.n_classes);
    if (p->optimizer == MFM_OPTIMIZER_ROWWISE_ADAGRAD) /* one accumulator a vector of V */
        per_class -= (uint64_t)info.n_features * (p->model == MFM_MODEL_FFM ? info.n_fields : 1) * (uint64_t)(info.k - 1);
    if (with_state && state_slots(p->optimizer)) {
        at += align_up(4 * per_class * info.n_classes * (uint64_t)state_slots(p->optimizer));
        sections++;
    }
    return at + 8 + 40 * sections + 8;
}

/* The tables' bytes the documented layout gives: blocks of parameters then state; FM's and
   FwFM's w after v in one block, padded to a power of two floats, where that is at most 16. */
static uint64_t expected_memory_bytes(const mfm_model *m) {
    const mfm_params *p = mfm_model_params(m);
    mfm_model_info info;
    uint64_t slots, pair, padded = 1, floats, v_block;
    mfm_model_get_info(m, &info);
    slots = 1 + (uint64_t)info.n_state_slots;
    v_block = (uint64_t)info.k * (p->optimizer == MFM_OPTIMIZER_ROWWISE_ADAGRAD ? 1 : slots) + (p->optimizer == MFM_OPTIMIZER_ROWWISE_ADAGRAD); /* k values and their state */
    pair = v_block + slots;
    while (padded < pair) padded *= 2;
    floats = slots; /* w0 */
    if (p->model == MFM_MODEL_FFM)
        floats += (uint64_t)info.n_features * (slots + (uint64_t)info.n_fields * v_block);
    else if (!p->linear_only && pair <= 16)
        floats += (uint64_t)info.n_features * padded;
    else
        floats += (uint64_t)info.n_features * (slots + v_block);
    if (p->model == MFM_MODEL_FWFM) floats += (uint64_t)info.n_fields * info.n_fields * slots;
    return 4 * floats * info.n_classes;
}

static int scores_equal(const mfm_model *a, const mfm_model *b, const mfm_csr *d, const char *what) {
    size_t width = mfm_output_width(a, MFM_OUTPUT_SCORE), n = (size_t)d->n_rows * width;
    float *x = (float *)calloc(n, sizeof(float)), *y = (float *)calloc(n, sizeof(float));
    int ok = predict(a, d, MFM_OUTPUT_SCORE, x, n) && predict(b, d, MFM_OUTPUT_SCORE, y, n) &&
             CHECK(memcmp(x, y, n * sizeof(float)) == 0, "%s: the predicted scores differ", what);
    free(x);
    free(y);
    return ok;
}

/* A file opened with mfm_model_map, or copied by mfm_model_load_parameters: the parameters
   only (no state slots, memory_bytes of the prediction layout), the same scores and parameters
   as `m`; training, new tensors and a save with state are refused with a sentence; a save
   without state loads back to the same parameters; its clone trains once its state is reset. */
static void check_opened_for_prediction(const char *path, int copied, const mfm_model *m, const mfm_csr *d, const char *what) {
    const mfm_params *p = mfm_model_params(m);
    mfm_model *mapped = NULL, *again = NULL, *clone = NULL;
    mfm_model_info im, info;
    mfm_error e;
    mfm_status st = copied ? mfm_model_load_parameters(path, &mapped, &e) : mfm_model_map(path, &mapped, &e);
    uint64_t sections;
    float one = 0;
    char copy[300];
    if (!CHECK(st == MFM_OK && mapped, "%s: %s failed: %s", what, copied ? "load_parameters" : "map", st ? e.message : "")) return;
    mfm_model_get_info(m, &im);
    mfm_model_get_info(mapped, &info);
    CHECK(info.n_state_slots == 0 && info.has_state == (state_slots(p->optimizer) == 0) && info.epochs_trained == im.epochs_trained &&
              info.n_parameters == im.n_parameters,
          "%s: mapped info: state slots %d, has_state %d, epochs %llu", what, info.n_state_slots, info.has_state, (unsigned long long)info.epochs_trained);
    CHECK(info.memory_bytes == 4 * im.n_classes * prediction_floats(p, im.n_features, im.n_fields, im.k, &sections),
          "%s: mapped memory_bytes %llu, the prediction layout says %llu", what, (unsigned long long)info.memory_bytes,
          (unsigned long long)(4 * im.n_classes * prediction_floats(p, im.n_features, im.n_fields, im.k, &sections)));
    same_params(mfm_model_params(mapped), p, what);
    scores_equal(m, mapped, d, what);
    same_slots(m, mapped, 0, 0, what);
    st = mfm_fit(mapped, d, &e);
    CHECK(st == MFM_ERR_INVALID_ARGUMENT && strstr(e.message, "mfm_model_map") && strstr(e.message, "mfm_model_load"), "%s: fit of a mapped model: %d %s", what,
          (int)st, st ? e.message : "");
    st = mfm_model_set_tensor(mapped, MFM_TENSOR_W0, 0, 0, &one, 1, &e);
    CHECK(st == MFM_ERR_INVALID_ARGUMENT && strstr(e.message, "read-only"), "%s: set_tensor of a mapped model: %d", what, (int)st);
    st = mfm_model_get_tensor(mapped, MFM_TENSOR_W0, 1, 0, &one, 1, &e);
    CHECK(st == MFM_ERR_INVALID_ARGUMENT, "%s: state slot 1 of a mapped model: %d", what, (int)st);
    snprintf(copy, sizeof copy, "%s.copy", path);
    st = mfm_model_save(mapped, copy, 1, &e);
    CHECK(st == MFM_ERR_INVALID_ARGUMENT && strstr(e.message, "with_state = 0"), "%s: save with state of a mapped model: %d", what, (int)st);
    st = mfm_model_save(mapped, copy, 0, &e);
    if (CHECK(st == MFM_OK, "%s: save without state of a mapped model: %s", what, st ? e.message : "")) {
        st = mfm_model_load(copy, &again, &e);
        if (CHECK(st == MFM_OK, "%s: load of a mapped model's save: %s", what, st ? e.message : "")) same_slots(m, again, 0, 0, what);
    }
    mfm_model_reset_state(mapped); /* nothing to reset: no crash, no change */
    scores_equal(m, mapped, d, what);
    st = mfm_model_clone(mapped, &clone, &e);
    if (CHECK(st == MFM_OK && clone, "%s: clone of a mapped model: %s", what, st ? e.message : "")) {
        same_slots(m, clone, 0, 0, what);
        if (state_slots(p->optimizer)) {
            st = mfm_fit(clone, d, &e);
            CHECK(st == MFM_ERR_INVALID_ARGUMENT && strstr(e.message, "mfm_model_reset_state"), "%s: fit of a mapped model's clone: %d", what, (int)st);
        }
        mfm_model_reset_state(clone);
        st = mfm_fit(clone, d, &e);
        CHECK(st == MFM_OK, "%s: fit of a mapped model's clone after reset: %s", what, st ? e.message : "");
    }
    mfm_model_free(clone);
    mfm_model_free(again);
    mfm_model_free(mapped);
    remove(copy);
}

/* Every model (FM, FFM, FwFM) x task x optimizer, saved with and without its optimizer state,
   loads back with bit-identical scores and tensors (state slots zero and has_state 0 when it
   was not saved), the same epochs_trained, params and info (memory_bytes as the layout says);
   mfm_model_file_inspect describes the file (format and writer version, size as the layout
   says, header facts); mfm_model_map and mfm_model_load_parameters open it for prediction
   (check_opened_for_prediction). */
void test_model_save_load_round_trip(void) {
    static const mfm_model_type models[] = {MFM_MODEL_FM, MFM_MODEL_FFM, MFM_MODEL_FWFM};
    static const mfm_task tasks[] = {MFM_TASK_BINARY, MFM_TASK_REGRESSION, MFM_TASK_MULTICLASS};
    static const mfm_optimizer opts[] = {MFM_OPTIMIZER_SGD, MFM_OPTIMIZER_ADAGRAD, MFM_OPTIMIZER_ADAM, MFM_OPTIMIZER_FTRL, MFM_OPTIMIZER_ROWWISE_ADAGRAD};
    char path[256];
    size_t a, b, c;
    int with_state;
    scratch_path(path, sizeof path, "model.mfm");
    for (a = 0; a < 3; a++)
        for (b = 0; b < 3; b++)
            for (c = 0; c < 5; c++) {
                mfm_params p = file_params(models[a], tasks[b], opts[c]);
                test_data td;
                mfm_model *m;
                char what[96];
                make_data(&td, tasks[b], 100 + a * 16 + b * 4 + c);
                p.linear_only = a == 0 && c == 1; /* one linear model among them */
                m = create_and_fit(&p, &td.csr);
                if (!m) {
                    data_free(&td);
                    continue;
                }
                for (with_state = 0; with_state < 2; with_state++) {
                    mfm_model *l = NULL;
                    mfm_model_info im, il;
                    mfm_model_file_info fi;
                    mfm_error e;
                    mfm_status st;
                    struct stat sb;
                    snprintf(what, sizeof what, "%s %s %s %s state", model_name(models[a]), task_name(tasks[b]), opt_name(opts[c]),
                             with_state ? "with" : "without");
                    st = mfm_model_save(m, path, with_state, &e);
                    if (!CHECK(st == MFM_OK, "%s: save failed: %s", what, st ? e.message : "")) continue;
                    st = mfm_model_load(path, &l, &e);
                    if (!CHECK(st == MFM_OK && l, "%s: load failed: %s", what, st ? e.message : "")) continue;
                    mfm_model_get_info(m, &im);
                    mfm_model_get_info(l, &il);
                    same_info(&il, &im, what);
                    CHECK(il.epochs_trained == 2, "%s: epochs_trained %llu, expected 2", what, (unsigned long long)il.epochs_trained);
                    CHECK(il.has_state == with_state && im.has_state == 1, "%s: has_state %d after load", what, il.has_state);
                    same_params(mfm_model_params(l), mfm_model_params(m), what);
                    scores_equal(m, l, &td.csr, what);
                    same_slots(m, l, 0, with_state ? im.n_state_slots : 0, what);
                    if (!with_state) state_is_fresh(l, what);
                    CHECK(stat(path, &sb) == 0 && (uint64_t)sb.st_size == expected_file_bytes(m, with_state), "%s: file of %lld bytes, the layout says %llu",
                          what, (long long)sb.st_size, (unsigned long long)expected_file_bytes(m, with_state));
                    CHECK(im.memory_bytes == expected_memory_bytes(m), "%s: memory_bytes %llu, the layout says %llu", what,
                          (unsigned long long)im.memory_bytes, (unsigned long long)expected_memory_bytes(m));
                    st = mfm_model_file_inspect(path, &fi, &e);
                    if (CHECK(st == MFM_OK, "%s: inspect failed: %s", what, st ? e.message : "")) {
                        CHECK(fi.format_version == MFM_MODEL_FILE_VERSION && fi.writer_version == MFM_VERSION_NUMBER, "%s: versions %u / %u", what,
                              fi.format_version, fi.writer_version);
                        CHECK(fi.file_bytes == (uint64_t)sb.st_size, "%s: inspect says %llu bytes, stat %lld", what, (unsigned long long)fi.file_bytes,
                              (long long)sb.st_size);
                        CHECK(fi.has_state == with_state && fi.model.has_state == with_state, "%s: inspect has_state %d", what, fi.has_state);
                        same_info(&fi.model, &im, what);
                        same_params(&fi.params, mfm_model_params(m), what);
                        CHECK(fi.params.class_weights == NULL && fi.params.on_epoch == NULL, "%s: inspect hands back pointers", what);
                    }
                    check_opened_for_prediction(path, 0, m, &td.csr, what);
                    check_opened_for_prediction(path, 1, m, &td.csr, what);
                    if (!with_state) { /* refuses to resume until its state is reset, then trains on */
                        mfm_model_info after;
                        st = mfm_fit(l, &td.csr, &e);
                        CHECK(st == MFM_ERR_INVALID_ARGUMENT && strstr(e.message, "mfm_model_reset_state"), "%s: fit without state: %d %s", what,
                              (int)st, e.message);
                        mfm_model_reset_state(l);
                        st = mfm_fit(l, &td.csr, &e);
                        mfm_model_get_info(l, &after);
                        CHECK(st == MFM_OK && after.has_state == 1 && after.epochs_trained == 4, "%s: fit after reset: %d, has_state %d, epochs %llu",
                              what, (int)st, after.has_state, (unsigned long long)after.epochs_trained);
                    }
                    mfm_model_free(l);
                }
                mfm_model_free(m);
                data_free(&td);
            }
    scratch_clean();
}

/* A file saved without its state, of a model whose V is most of its bytes (FFM, k = 16, 2000
   features, 8 fields: 1 MB of V against 4 KB sections), loads and maps with the parameters it
   was saved with, for every optimizer: the header's state slots count only where the file holds
   the state (Adam's three slots once refused such a file as truncated). */
void test_model_without_state_large(void) {
    static const mfm_optimizer opts[] = {MFM_OPTIMIZER_SGD, MFM_OPTIMIZER_ADAGRAD, MFM_OPTIMIZER_ADAM, MFM_OPTIMIZER_FTRL, MFM_OPTIMIZER_ROWWISE_ADAGRAD};
    char path[256];
    size_t i;
    scratch_path(path, sizeof path, "stateless.mfm");
    for (i = 0; i < sizeof opts / sizeof opts[0]; i++) {
        mfm_params p = file_params(MFM_MODEL_FFM, MFM_TASK_BINARY, opts[i]);
        mfm_model *m, *loaded = NULL, *mapped = NULL;
        mfm_error e;
        char what[64];
        p.k = 16;
        snprintf(what, sizeof what, "FFM k = 16 %s, saved without state", opt_name(opts[i]));
        if (!(m = make_model(&p, 2000, 8, 1))) continue;
        model_randomize(m, 77 + i, 0.5);
        if (CHECK(mfm_model_save(m, path, 0, &e) == MFM_OK, "%s: save: %s", what, e.message)) {
            if (CHECK(mfm_model_load(path, &loaded, &e) == MFM_OK, "%s: load: %s", what, e.message)) same_slots(m, loaded, 0, 0, what);
            if (CHECK(mfm_model_map(path, &mapped, &e) == MFM_OK, "%s: map: %s", what, e.message)) same_slots(m, mapped, 0, 0, what);
        }
        mfm_model_free(mapped);
        mfm_model_free(loaded);
        mfm_model_free(m);
    }
    scratch_clean();
}

/* Explicit class weights (binary: 2 values, multiclass: one per class) survive a save: the
   loaded model has its own copy of the same values, and one more epoch of the original and
   of the loaded model give the same bits (the weights are in effect). */
void test_model_class_weights_survive(void) {
    static const float binary_w[2] = {0.5f, 2.25f}, multi_w[3] = {1.0f, 2.5f, 0.125f};
    char path[256];
    int multi;
    scratch_path(path, sizeof path, "weights.mfm");
    for (multi = 0; multi < 2; multi++) {
        const mfm_task task = multi ? MFM_TASK_MULTICLASS : MFM_TASK_BINARY;
        const float *w = multi ? multi_w : binary_w;
        const int n_w = multi ? 3 : 2;
        mfm_params p = file_params(MFM_MODEL_FFM, task, MFM_OPTIMIZER_ADAM);
        test_data td;
        mfm_model *m, *l = NULL;
        mfm_error e;
        mfm_status st;
        make_data(&td, task, 7 + (uint64_t)multi);
        p.class_weight = MFM_CLASS_WEIGHT_EXPLICIT;
        p.class_weights = w;
        m = create_and_fit(&p, &td.csr);
        if (m && CHECK(mfm_model_save(m, path, 1, &e) == MFM_OK, "save: %s", e.message)) {
            st = mfm_model_load(path, &l, &e);
            if (CHECK(st == MFM_OK, "load: %s", st ? e.message : "")) {
                const mfm_params *lp = mfm_model_params(l);
                snapshot s1, s2;
                CHECK(lp->class_weight == MFM_CLASS_WEIGHT_EXPLICIT && lp->class_weights != NULL && lp->class_weights != w &&
                          lp->class_weights != mfm_model_params(m)->class_weights,
                      "%s: the loaded model's class weights are not its own copy", task_name(task));
                if (lp->class_weights) CHECK(memcmp(lp->class_weights, w, (size_t)n_w * sizeof(float)) == 0, "%s: class weights differ", task_name(task));
                CHECK(mfm_fit(m, &td.csr, &e) == MFM_OK && mfm_fit(l, &td.csr, &e) == MFM_OK, "fit after load: %s", e.message);
                snapshot_take(&s1, m);
                snapshot_take(&s2, l);
                CHECK(snapshot_equal(&s1, &s2), "%s: training the loaded model differs from training the original", task_name(task));
                snapshot_free(&s1);
                snapshot_free(&s2);
            }
            mfm_model_free(l);
        }
        mfm_model_free(m);
        data_free(&td);
    }
    scratch_clean();
}

/* Train 2 epochs, save with state, load, train 2 more = train 4 epochs in one go, bit for bit
   (every optimizer and model, one thread, batch 1 and batch 7; also multiclass and regression). */
void test_model_resume_exact(void) {
    static const mfm_model_type models[] = {MFM_MODEL_FM, MFM_MODEL_FFM, MFM_MODEL_FWFM};
    static const mfm_optimizer opts[] = {MFM_OPTIMIZER_SGD, MFM_OPTIMIZER_ADAGRAD, MFM_OPTIMIZER_ADAM, MFM_OPTIMIZER_FTRL, MFM_OPTIMIZER_ROWWISE_ADAGRAD};
    static const int batches[] = {1, 7};
    char path[256];
    size_t i;
    scratch_path(path, sizeof path, "resume.mfm");
    for (i = 0; i < 3 * 5 * 2 + 2; i++) {
        const int extra = i >= 30;
        const mfm_model_type model = extra ? (i == 30 ? MFM_MODEL_FFM : MFM_MODEL_FWFM) : models[i / 10];
        const mfm_optimizer opt = extra ? (i == 30 ? MFM_OPTIMIZER_ADAM : MFM_OPTIMIZER_FTRL) : opts[i / 2 % 5];
        const mfm_task task = extra ? (i == 30 ? MFM_TASK_MULTICLASS : MFM_TASK_REGRESSION) : MFM_TASK_BINARY;
        const int batch = extra ? 7 : batches[i % 2];
        mfm_params p = file_params(model, task, opt);
        test_data td;
        mfm_model *two, *four, *resumed = NULL;
        mfm_error e;
        char what[96];
        snprintf(what, sizeof what, "%s %s %s batch %d", model_name(model), task_name(task), opt_name(opt), batch);
        make_data(&td, task, 300 + i);
        p.batch_size = batch;
        p.n_threads = 1;
        p.n_epochs = 2;
        two = create_and_fit(&p, &td.csr);
        p.n_epochs = 4;
        four = create_and_fit(&p, &td.csr);
        if (two && four && CHECK(mfm_model_save(two, path, 1, &e) == MFM_OK, "%s: save: %s", what, e.message) &&
            CHECK(mfm_model_load(path, &resumed, &e) == MFM_OK, "%s: load: %s", what, e.message)) {
            snapshot s2, s4, sr;
            mfm_model_info info;
            mfm_status st = mfm_fit(resumed, &td.csr, &e); /* the file's n_epochs: 2 more */
            CHECK(st == MFM_OK, "%s: fit after load: %s", what, st ? e.message : "");
            snapshot_take(&s2, two);
            snapshot_take(&s4, four);
            snapshot_take(&sr, resumed);
            mfm_model_get_info(resumed, &info);
            CHECK(info.epochs_trained == 4, "%s: %llu epochs after resuming", what, (unsigned long long)info.epochs_trained);
            CHECK(!snapshot_equal(&s2, &s4), "%s: 2 and 4 epochs give the same model (the test would prove nothing)", what);
            CHECK(snapshot_equal(&sr, &s4), "%s: 2 + save/load + 2 epochs differs from 4 epochs", what);
            scores_equal(resumed, four, &td.csr, what);
            snapshot_free(&s2);
            snapshot_free(&s4);
            snapshot_free(&sr);
        }
        mfm_model_free(two);
        mfm_model_free(four);
        mfm_model_free(resumed);
        data_free(&td);
    }
    scratch_clean();
}

/* mfm_model_clone is a deep copy: same info, params, tensors, state and scores; training the
   clone leaves the original as it was; the clone outlives the original; class weights are its
   own copy; a clone of a model loaded without state has no state either. */
void test_model_clone_independent(void) {
    static const float w[3] = {1.5f, 0.5f, 1.0f};
    mfm_params p = file_params(MFM_MODEL_FWFM, MFM_TASK_MULTICLASS, MFM_OPTIMIZER_ADAM);
    test_data td;
    mfm_model *m, *c = NULL;
    mfm_error e;
    make_data(&td, MFM_TASK_MULTICLASS, 55);
    p.class_weight = MFM_CLASS_WEIGHT_EXPLICIT;
    p.class_weights = w;
    m = create_and_fit(&p, &td.csr);
    if (m && CHECK(mfm_model_clone(m, &c, &e) == MFM_OK && c, "clone: %s", e.message)) {
        snapshot before, after, cloned, trained;
        mfm_model_info im, ic;
        mfm_model_get_info(m, &im);
        mfm_model_get_info(c, &ic);
        same_info(&ic, &im, "clone");
        CHECK(ic.has_state == im.has_state, "clone: has_state %d vs %d", ic.has_state, im.has_state);
        same_params(mfm_model_params(c), mfm_model_params(m), "clone");
        CHECK(mfm_model_params(c)->class_weights != mfm_model_params(m)->class_weights && mfm_model_params(c)->class_weights &&
                  memcmp(mfm_model_params(c)->class_weights, w, sizeof w) == 0,
              "clone: class weights are not an equal copy of its own");
        snapshot_take(&before, m);
        snapshot_take(&cloned, c);
        CHECK(snapshot_equal(&before, &cloned), "clone: parameters or state differ from the original");
        scores_equal(m, c, &td.csr, "clone before training");
        CHECK(mfm_fit(c, &td.csr, &e) == MFM_OK, "fit clone: %s", e.message);
        snapshot_take(&after, m);
        snapshot_take(&trained, c);
        CHECK(snapshot_equal(&before, &after), "training the clone changed the original");
        CHECK(!snapshot_equal(&before, &trained), "training the clone did not change it");
        mfm_model_get_info(m, &im);
        CHECK(im.epochs_trained == 2, "the original's epochs_trained moved to %llu", (unsigned long long)im.epochs_trained);
        mfm_model_free(m); /* the clone must not share anything with it */
        m = NULL;
        {
            size_t n = (size_t)td.csr.n_rows * 3;
            float *out = (float *)calloc(n, sizeof(float));
            predict(c, &td.csr, MFM_OUTPUT_PROBABILITY, out, n);
            free(out);
        }
        snapshot_free(&before);
        snapshot_free(&after);
        snapshot_free(&cloned);
        snapshot_free(&trained);
    }
    mfm_model_free(c);
    mfm_model_free(m);
    { /* has_state 0 carries over */
        char path[256];
        mfm_model *l = NULL, *lc = NULL;
        mfm_model_info info;
        mfm_params q = file_params(MFM_MODEL_FM, MFM_TASK_BINARY, MFM_OPTIMIZER_ADAGRAD);
        scratch_path(path, sizeof path, "nostate.mfm");
        m = make_model(&q, 8, 0, 1);
        if (m && CHECK(mfm_model_save(m, path, 0, &e) == MFM_OK && mfm_model_load(path, &l, &e) == MFM_OK, "save/load: %s", e.message) &&
            CHECK(mfm_model_clone(l, &lc, &e) == MFM_OK, "clone: %s", e.message)) {
            mfm_model_get_info(lc, &info);
            CHECK(info.has_state == 0, "a clone of a model without state has has_state %d", info.has_state);
            same_slots(l, lc, 0, info.n_state_slots, "clone of a loaded model");
        }
        mfm_model_free(lc);
        mfm_model_free(l);
        mfm_model_free(m);
        scratch_clean();
    }
    data_free(&td);
}

/* ---- damaged files ---- */

static void store_le(unsigned char *p, uint64_t x, int bytes) {
    int i;
    for (i = 0; i < bytes; i++) p[i] = (unsigned char)(x >> (8 * i));
}


/* Loading the bytes from a file (mfm_model_load and mfm_model_file_inspect) and from memory
   refuses them with `want`, no model, and a message holding one of the '|' phrases; the file
   ways name the file. */
static void expect_bad_model_ways(const unsigned char *b, size_t n, mfm_status want, const char *phrases, const char *what, int n_ways) {
    char path[256];
    int way;
    scratch_path(path, sizeof path, "damaged.mfm");
    if (!CHECK(write_whole_file(path, b, n), "cannot write %s", path)) return;
    for (way = 0; way < n_ways; way++) {
        static const char *ways[] = {"load", "load_memory", "inspect", "map", "load_parameters"};
        mfm_model *m = (mfm_model *)&way; /* must come back NULL */
        mfm_model_file_info fi;
        mfm_error e;
        mfm_status st;
        const char *p = phrases;
        int found = !*phrases; /* "": any sentence */
        memset(&e, 0, sizeof e);
        if (way == 0)
            st = mfm_model_load(path, &m, &e);
        else if (way == 1)
            st = mfm_model_load_memory(b, n, &m, &e);
        else if (way == 2)
            st = mfm_model_file_inspect(path, &fi, &e), m = NULL;
        else if (way == 3)
            st = mfm_model_map(path, &m, &e);
        else
            st = mfm_model_load_parameters(path, &m, &e);
        if (!CHECK(st == want, "%s (%s): status %d, expected %d (%s)", what, ways[way], (int)st, (int)want, st ? e.message : "accepted")) {
            if (st == MFM_OK && way != 2) mfm_model_free(m);
            continue;
        }
        CHECK(m == NULL, "%s (%s): a model came back", what, ways[way]);
        CHECK(e.status == st, "%s (%s): err.status %d", what, ways[way], (int)e.status);
        while (*p && !found) {
            char phrase[64];
            size_t len = strcspn(p, "|");
            memcpy(phrase, p, len);
            phrase[len] = '\0';
            found = strstr(e.message, phrase) != NULL;
            p += len + (p[len] == '|');
        }
        CHECK(found, "%s (%s): the message \"%s\" says none of \"%s\"", what, ways[way], e.message, phrases);
        if (way != 1) CHECK(strstr(e.message, path) != NULL, "%s (%s): the message \"%s\" does not name %s", what, ways[way], e.message, path);
    }
}

static void expect_bad_model(const unsigned char *b, size_t n, mfm_status want, const char *phrases, const char *what) {
    expect_bad_model_ways(b, n, want, phrases, what, 5);
}

/* A small model with everything: FwFM, multiclass, Adam state, explicit class weights. */
static unsigned char *small_model_file(size_t *n) {
    static const float w[3] = {1, 2, 3};
    mfm_params p = file_params(MFM_MODEL_FWFM, MFM_TASK_MULTICLASS, MFM_OPTIMIZER_ADAM);
    test_data td;
    mfm_model *m;
    mfm_error e;
    char path[256];
    unsigned char *b = NULL;
    *n = 0;
    make_data(&td, MFM_TASK_MULTICLASS, 77);
    p.class_weight = MFM_CLASS_WEIGHT_EXPLICIT;
    p.class_weights = w;
    m = create_and_fit(&p, &td.csr);
    scratch_path(path, sizeof path, "small.mfm");
    if (m && CHECK(mfm_model_save(m, path, 1, &e) == MFM_OK, "save: %s", e.message)) b = read_whole_file(path, n);
    mfm_model_free(m);
    data_free(&td);
    return b;
}

/* Damaged model files are MFM_ERR_BAD_FILE with a sentence that names the file and says what:
   truncated (at many cut points, the empty file and 3 bytes included), corrupt (a flipped byte
   in the header, the class weights' padding, each section, the directory and the last
   checksum), not a model (magic), newer (format version 3), too long; from a file, from memory,
   through mfm_model_file_inspect, mfm_model_map and mfm_model_load_parameters, which do not read
   the state, so a damaged state section is refused by the others only. A missing file is MFM_ERR_IO. */
void test_model_load_refuses_bad_files(void) {
    unsigned char *b, *c;
    size_t n, i;
    v2_layout L;
    b = small_model_file(&n);
    REQUIRE(b && n > 1000 && v2_read(b, n, &L) && L.n_sections == 4, "no model file of four sections to damage");
    c = (unsigned char *)malloc(n + 16);
    { /* the bytes as saved are fine, and the checksums are the documented ones */
        mfm_model *m = NULL;
        mfm_error e;
        CHECK(mfm_model_load_memory(b, n, &m, &e) == MFM_OK && m, "the saved bytes are refused: %s", e.message);
        mfm_model_free(m);
        memcpy(c, b, n);
        memset(c + V2_FIELDS_BYTES, 0, 8), memset(c + L.directory + 8 + 32, 0, 8), memset(c + n - 8, 0, 8);
        CHECK(v2_reseal(c, n, test_checksum) && memcmp(b, c, n) == 0, "the checksums as docs/FORMATS.md computes them differ from the file's");
        CHECK(memcmp(b, "MFMMODEL", 8) == 0 && seal_load_le(b + 8, 4) == MFM_MODEL_FILE_VERSION && MFM_MODEL_FILE_VERSION == 2, "the file does not start with MFMMODEL and version 2");
        for (i = 0; i < L.n_sections; i++)
            CHECK(L.s[i].offset % ALIGN == 0 && L.s[i].kind == (i < 3 ? 1u : 2u) && L.s[i].tensor == (i == 0 ? 0u : i == 1 ? 2u : i == 2 ? 3u : 0u),
                  "section %lu: kind %u tensor %u at %llu (W0, V with w inside, R, then the state)", (unsigned long)i, L.s[i].kind, L.s[i].tensor,
                  (unsigned long long)L.s[i].offset);
    }
    {
        const size_t cuts[] = {n - 1, n - 4, n - 8, n - 9, n / 2, L.directory, L.s[1].offset + 1, V2_HEADER_BYTES + 9, V2_HEADER_BYTES, V2_HEADER_BYTES - 1, 100, 13, 12, 11, 10, 9, 8};
        for (i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
            char what[64];
            snprintf(what, sizeof what, "cut to %lu of %lu bytes", (unsigned long)cuts[i], (unsigned long)n);
            expect_bad_model(b, cuts[i], MFM_ERR_BAD_FILE, "truncated", what);
        }
    }
    expect_bad_model(b, 0, MFM_ERR_BAD_FILE, "truncated|empty|not a modern_fm model", "an empty file");
    expect_bad_model(b, 3, MFM_ERR_BAD_FILE, "truncated|not a modern_fm model", "a file of 3 bytes");
    expect_bad_model((const unsigned char *)"hello, world: not a model at all, just some text\n", 50, MFM_ERR_BAD_FILE, "not a modern_fm model", "a text file");
    {
        const size_t at[] = {100, MODEL_HEADER_BYTES + 2, V2_FIELDS_BYTES + 3, V2_HEADER_BYTES + 13, L.s[0].offset - 1, L.s[1].offset + 5,
                             L.s[1].offset + L.s[1].bytes + 2, L.s[2].offset, L.s[3].offset + 7, L.directory + 8 + 40 + 16, n - 9, n - 1};
        for (i = 0; i < sizeof at / sizeof at[0]; i++) {
            char what[64];
            memcpy(c, b, n);
            c[at[i]] ^= 0x04;
            snprintf(what, sizeof what, "byte %lu flipped", (unsigned long)at[i]);
            expect_bad_model_ways(c, n, MFM_ERR_BAD_FILE, "checksum", what, at[i] >= L.s[3].offset && at[i] < L.directory ? 3 : 5);
            if (at[i] >= L.s[3].offset && at[i] < L.directory) { /* the state: mapping never reads it */
                char path[256];
                mfm_model *m = NULL;
                mfm_error e;
                scratch_path(path, sizeof path, "damaged.mfm");
                CHECK(mfm_model_map(path, &m, &e) == MFM_OK, "a damaged state section: map refused the parameters: %s", e.message);
                mfm_model_free(m);
                m = NULL;
                CHECK(mfm_model_load_parameters(path, &m, &e) == MFM_OK, "a damaged state section: load_parameters refused the parameters: %s", e.message);
                mfm_model_free(m);
            }
        }
    }
    memcpy(c, b, n);
    c[0] = 'X';
    expect_bad_model(c, n, MFM_ERR_BAD_FILE, "not a modern_fm model", "wrong magic");
    memcpy(c, b, n);
    store_le(c + 8, 3, 4);
    expect_bad_model(c, n, MFM_ERR_BAD_FILE, "newer", "format version 3");
    store_le(c + 8, 0xFFFFFFFFu, 4);
    expect_bad_model(c, n, MFM_ERR_BAD_FILE, "newer", "format version 2^32-1");
    expect_bad_model(c, 12, MFM_ERR_BAD_FILE, "newer", "format version 2^32-1, 12 bytes");
    memcpy(c, b, n);
    memset(c + n, 0, 8);
    expect_bad_model(c, n + 8, MFM_ERR_BAD_FILE, "too long", "eight bytes appended");
    memcpy(c, b, n); /* k = 0 behind valid checksums */
    store_le(c + 36, 0, 4);
    v2_reseal(c, n, test_checksum);
    expect_bad_model(c, n, MFM_ERR_BAD_FILE, "corrupt", "k = 0 with valid checksums");
    memcpy(c, b, n); /* a section moved by a page, behind valid checksums */
    store_le(c + L.directory + 8 + 40 * 2 + 16, L.s[2].offset + ALIGN, 8);
    v2_reseal(c, n, test_checksum);
    expect_bad_model(c, n, MFM_ERR_BAD_FILE, "corrupt", "a section where the last one did not end");
    memcpy(c, b, n); /* V's stride too short for its w, behind valid checksums */
    store_le(c + L.directory + 8 + 40 + 8, 2, 4);
    v2_reseal(c, n, test_checksum);
    expect_bad_model(c, n, MFM_ERR_BAD_FILE, "corrupt", "a stride too short");
    { /* missing file, a directory */
        mfm_model *m = NULL;
        mfm_model_file_info fi;
        mfm_error e;
        mfm_status st = mfm_model_load("build/no-such-dir/model.mfm", &m, &e);
        CHECK(st == MFM_ERR_IO && m == NULL && strstr(e.message, "build/no-such-dir/model.mfm"), "missing file: %d %s", (int)st, st ? e.message : "");
        st = mfm_model_map("build/no-such-dir/model.mfm", &m, &e);
        CHECK(st == MFM_ERR_IO && m == NULL, "map of a missing file: %d", (int)st);
        st = mfm_model_load_parameters("build/no-such-dir/model.mfm", &m, &e);
        CHECK(st == MFM_ERR_IO && m == NULL, "load_parameters of a missing file: %d", (int)st);
        st = mfm_model_file_inspect("build/no-such-dir/model.mfm", &fi, &e);
        CHECK(st == MFM_ERR_IO, "inspect of a missing file: %d", (int)st);
        st = mfm_model_load(scratch_dir(), &m, &e);
        CHECK(st == MFM_ERR_IO && m == NULL, "loading a directory: %d %s", (int)st, st ? e.message : "");
    }
    free(b);
    free(c);
    scratch_clean();
}

/* A save that fails part way (the file size limit makes the write fail like a full disk) returns
   MFM_ERR_IO with a message, leaves the old model at the path bit for bit, and leaves no
   temporary file behind. A save into a missing directory is MFM_ERR_IO too. */
void test_model_save_crash_safe(void) {
    char path[256];
    mfm_params pa = file_params(MFM_MODEL_FM, MFM_TASK_BINARY, MFM_OPTIMIZER_SGD);
    mfm_params pb = file_params(MFM_MODEL_FFM, MFM_TASK_BINARY, MFM_OPTIMIZER_ADAM);
    mfm_model *a, *big, *l = NULL;
    mfm_error e;
    mfm_status st;
    struct rlimit old, lim;
    void (*old_handler)(int);
    pa.k = 2;
    pb.k = 8;
    a = make_model(&pa, 4, 0, 1);
    big = make_model(&pb, 2000, 4, 1); /* 2000 x 4 x 8 x 4 slots x 4 bytes = 1 MB */
    if (!a || !big) goto done;
    model_randomize(a, 3, 0.5);
    scratch_path(path, sizeof path, "keep.mfm");
    if (!CHECK(mfm_model_save(a, path, 1, &e) == MFM_OK, "save A: %s", e.message)) goto done;
    if (!CHECK(getrlimit(RLIMIT_FSIZE, &old) == 0, "getrlimit: %s", strerror(errno))) goto done;
    lim = old;
    lim.rlim_cur = 16384;
    old_handler = signal(SIGXFSZ, SIG_IGN);
    if (!CHECK(setrlimit(RLIMIT_FSIZE, &lim) == 0, "setrlimit: %s", strerror(errno))) {
        signal(SIGXFSZ, old_handler);
        goto done;
    }
    memset(&e, 0, sizeof e);
    st = mfm_model_save(big, path, 1, &e);
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, old_handler);
    CHECK(st == MFM_ERR_IO, "a save past the file size limit returned %d (%s)", (int)st, st ? e.message : "success");
    CHECK(e.message[0] && strstr(e.message, path), "the failed save's message \"%s\" does not name %s", e.message, path);
    st = mfm_model_load(path, &l, &e);
    if (CHECK(st == MFM_OK, "the old file no longer loads: %s", st ? e.message : "")) {
        mfm_model_info info;
        mfm_model_get_info(l, &info);
        CHECK(info.model == MFM_MODEL_FM && info.n_features == 4, "the old file was replaced (model %d, %u features)", (int)info.model, info.n_features);
        if (info.n_features == 4) same_slots(a, l, 0, 0, "the old model after a failed save");
    }
    CHECK(count_names_containing(scratch_dir(), ".tmp-") == 0, "a failed save left a temporary file in %s", scratch_dir());
    st = mfm_model_save(a, "build/no-such-dir/x.mfm", 0, &e);
    CHECK(st == MFM_ERR_IO && strstr(e.message, "build/no-such-dir/x.mfm"), "save into a missing directory: %d %s", (int)st, st ? e.message : "");
done:
    mfm_model_free(l);
    mfm_model_free(a);
    mfm_model_free(big);
    scratch_clean();
}

/* A crafted multiclass file (valid checksum) whose header holds fewer explicit class weights
   than classes (69 weights for 70 classes) must be refused as BAD_FILE without reading past the
   weights it holds. Run in a child process: a read past the buffer may crash (AddressSanitizer
   stops there), and the child's heap is primed so that, unsanitized, the over-read sees a
   valid weight (so the outcome does not depend on leftover memory). */
void test_model_load_crafted_class_weights(void) {
    enum { C = 70 };
    float w[C];
    mfm_params p = file_params(MFM_MODEL_FM, MFM_TASK_MULTICLASS, MFM_OPTIMIZER_SGD);
    mfm_model *m;
    mfm_error e;
    char path[256];
    unsigned char *b = NULL, *c;
    size_t n = 0, i;
    pid_t pid;
    int status = 0;
    for (i = 0; i < C; i++) w[i] = 1.0f + (float)i;
    p.k = 1;
    p.class_weight = MFM_CLASS_WEIGHT_EXPLICIT;
    p.class_weights = w;
    m = make_model(&p, 2, 0, C);
    scratch_path(path, sizeof path, "weights70.mfm");
    if (m && CHECK(mfm_model_save(m, path, 0, &e) == MFM_OK, "save: %s", e.message)) b = read_whole_file(path, &n);
    mfm_model_free(m);
    scratch_clean();
    REQUIRE(b && n == align_up(V2_HEADER_BYTES + 4 * C) + 2 * ALIGN + 8 + 2 * 40 + 8, "unexpected file size %lu", (unsigned long)n);
    REQUIRE(b[64] == C, "n_class_weights is not at byte 64");
    /* 69 weights: the count one short, the last weight's place zero, every checksum valid */
    c = (unsigned char *)malloc(n);
    memcpy(c, b, n);
    memset(c + V2_HEADER_BYTES + 4 * (C - 1), 0, 4);
    store_le(c + 64, C - 1, 4);
    REQUIRE(v2_reseal(c, n, test_checksum), "the crafted file's directory cannot be read");
    fflush(stdout);
    pid = fork();
    if (pid == 0) {
        mfm_model *l = NULL;
        mfm_status st;
        float *prime = (float *)malloc(C * sizeof(float));
        for (i = 0; i < C; i++) prime[i] = 1.0f;
        free(prime); /* the loader's 69-float buffer is likely this block again */
        st = mfm_model_load_memory(c, n, &l, &e);
        _exit(st == MFM_ERR_BAD_FILE ? 0 : st == MFM_OK ? 10 : 11);
    }
    if (CHECK(pid > 0, "fork failed: %s", strerror(errno))) {
        waitpid(pid, &status, 0);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "69 class weights for 70 classes: %s",
              !WIFEXITED(status)               ? "the loader crashed"
              : WEXITSTATUS(status) == 10      ? "the file was accepted (the 70th weight was read from beyond the 69 in the file)"
              : WEXITSTATUS(status) == 11      ? "refused, but not as BAD_FILE"
                                               : "the loader stopped (AddressSanitizer: a read past the class weights)");
    }
    free(b);
    free(c);
}

/* mfm_model_file_inspect "checks a model file completely": a file that mfm_model_load refuses
   for its contents (behind a valid checksum: a NaN parameter, a negative learning rate, an
   unknown class weighting) must not be described as fine by inspect. */
void test_model_inspect_agrees_with_load(void) {
    unsigned char *b, *c;
    size_t n, i;
    v2_layout L;
    b = small_model_file(&n);
    REQUIRE(b && n > 1000 && v2_read(b, n, &L), "no model file to damage");
    c = (unsigned char *)malloc(n);
    for (i = 0; i < 3; i++) {
        static const char *what[] = {"a NaN parameter", "learning_rate -1", "class_weight 7"};
        memcpy(c, b, n);
        if (i == 0) store_le(c + L.s[1].offset + 8, 0x7FC00000u, 4); /* a float of V */
        if (i == 1) { /* learning_rate, the first f64, after 18 u32 and 2 u64 */
            double lr = -1;
            uint64_t bits;
            memcpy(&bits, &lr, 8);
            store_le(c + 8 + 18 * 4 + 2 * 8, bits, 8);
        }
        if (i == 2) store_le(c + 60, 7, 4); /* class_weight */
        v2_reseal(c, n, test_checksum);
        /* load, load_memory, map and load_parameters: BAD_FILE */
        expect_bad_model_ways(c, n, MFM_ERR_BAD_FILE, i == 0 ? "not finite" : "", what[i], 5);
        { /* inspect must not call it fine */
            char path[256];
            mfm_model_file_info fi;
            mfm_error e;
            mfm_status st;
            scratch_path(path, sizeof path, "damaged.mfm");
            st = mfm_model_file_inspect(path, &fi, &e);
            CHECK(st == MFM_ERR_BAD_FILE, "%s with a valid checksum: mfm_model_load refuses the file but mfm_model_file_inspect returns %d", what[i], (int)st);
        }
    }
    free(b);
    free(c);
    scratch_clean();
}

/* ---- files of format 1, and what a mapping depends on ---- */

/* tests/data/v1-*.mfm were saved at format 1 (tests/data/README.md says how): 20 features, 4
   fields, k = 3, parameters model_randomize(seed 1000 + i, 0.5), state slot s all 0.25 s. Loading
   them gives exactly those values (a fresh model filled the same way is the expected value),
   mapping them gives the same parameters and scores, inspect reports format 1, and a save
   (format 2) loads back the same bits. */
void test_model_files_of_format_1_load(void) {
    static const float class_weights[3] = {1, 2, 3};
    static const struct {
        mfm_model_type model;
        mfm_task task;
        mfm_optimizer opt;
        int state;
        const char *path;
    } f[3] = {{MFM_MODEL_FFM, MFM_TASK_BINARY, MFM_OPTIMIZER_ADAGRAD, 1, "tests/data/v1-ffm-adagrad-binary.mfm"},
              {MFM_MODEL_FM, MFM_TASK_REGRESSION, MFM_OPTIMIZER_SGD, 0, "tests/data/v1-fm-sgd-regression.mfm"},
              {MFM_MODEL_FWFM, MFM_TASK_MULTICLASS, MFM_OPTIMIZER_ADAM, 1, "tests/data/v1-fwfm-adam-multiclass.mfm"}};
    char path[256];
    int i, s;
    scratch_path(path, sizeof path, "v2.mfm");
    for (i = 0; i < 3; i++) {
        mfm_params p;
        mfm_model *want, *loaded = NULL, *mapped = NULL, *again = NULL;
        mfm_model_info info;
        mfm_model_file_info fi;
        mfm_error e;
        test_data td;
        memset(&p, 0, sizeof p);
        p.model = f[i].model, p.task = f[i].task, p.optimizer = f[i].opt, p.k = 3;
        p.n_classes = f[i].task == MFM_TASK_MULTICLASS ? 3 : 0;
        p.learning_rate = 0.037, p.seed = 12345678901234ull;
        if (f[i].task == MFM_TASK_MULTICLASS) p.class_weight = MFM_CLASS_WEIGHT_EXPLICIT, p.class_weights = class_weights;
        want = make_model(&p, N_FEATURES, N_FIELDS, 3);
        if (!want) continue;
        mfm_model_get_info(want, &info);
        model_randomize(want, 1000 + (uint64_t)i, 0.5);
        for (s = 1; s <= info.n_state_slots; s++) model_fill_slot(want, s, 0.25f * (float)s);
        make_data(&td, f[i].task, 40 + (uint64_t)i);
        if (CHECK(mfm_model_load(f[i].path, &loaded, &e) == MFM_OK, "%s: %s", f[i].path, e.message)) {
            mfm_model_info li;
            mfm_model_get_info(loaded, &li);
            CHECK(li.has_state == f[i].state && li.epochs_trained == 0, "%s: has_state %d, epochs %llu", f[i].path, li.has_state, (unsigned long long)li.epochs_trained);
            same_params(mfm_model_params(loaded), mfm_model_params(want), f[i].path);
            same_slots(want, loaded, 0, f[i].state ? info.n_state_slots : 0, f[i].path);
            if (!f[i].state) state_is_fresh(loaded, f[i].path);
            if (CHECK(mfm_model_map(f[i].path, &mapped, &e) == MFM_OK, "%s: map: %s", f[i].path, e.message)) {
                same_slots(want, mapped, 0, 0, f[i].path);
                scores_equal(loaded, mapped, &td.csr, f[i].path);
            }
            { /* and copied for prediction: read into memory, as a format-1 file always is */
                mfm_model *copied = NULL;
                if (CHECK(mfm_model_load_parameters(f[i].path, &copied, &e) == MFM_OK, "%s: load_parameters: %s", f[i].path, e.message)) {
                    same_slots(want, copied, 0, 0, f[i].path);
                    scores_equal(loaded, copied, &td.csr, f[i].path);
                }
                mfm_model_free(copied);
            }
            if (CHECK(mfm_model_file_inspect(f[i].path, &fi, &e) == MFM_OK, "%s: inspect: %s", f[i].path, e.message))
                CHECK(fi.format_version == 1 && fi.has_state == f[i].state, "%s: inspect says format %u, state %d", f[i].path, fi.format_version, fi.has_state);
            if (CHECK(mfm_model_save(loaded, path, 1, &e) == MFM_OK && mfm_model_load(path, &again, &e) == MFM_OK, "%s saved again: %s", f[i].path, e.message))
                same_slots(loaded, again, 0, info.n_state_slots, f[i].path);
        }
        mfm_model_free(again);
        mfm_model_free(mapped);
        mfm_model_free(loaded);
        mfm_model_free(want);
        data_free(&td);
    }
    scratch_clean();
}

/* How many of /proc/self/maps's ranges name `path` (Linux; -1 where it cannot be read), and the
   first one's start and end. */
static int mapped_ranges(const char *path, unsigned long long *start, unsigned long long *end) {
    FILE *f = fopen("/proc/self/maps", "r");
    char line[4096];
    int found = 0;
    if (!f) return -1;
    while (fgets(line, sizeof line, f))
        if (strstr(line, path) && found++ == 0) sscanf(line, "%llx-%llx", start, end);
    fclose(f);
    return found;
}

static int mapped_now(const char *path) {
    unsigned long long start, end;
    int n = mapped_ranges(path, &start, &end);
    return n > 0 ? 1 : n;
}

/* A mapped model depends on nothing but itself: a model saved over its file while it is open
   leaves its predictions as they were (the save replaces the file; the mapping keeps the old
   one), and mfm_model_free releases the mapping (/proc/self/maps no longer lists it). One
   opened by mfm_model_load_parameters keeps no mapping at all, and predicts as it did after its
   file is saved over, rewritten in place (zeros over its first 4 MB) and removed. A
   parameter section of five 1 MB chunks (verified by two threads where there are two cores)
   still catches a flipped byte in its last chunk. */
void test_model_map_outlives_its_file(void) {
    mfm_params p = file_params(MFM_MODEL_FFM, MFM_TASK_BINARY, MFM_OPTIMIZER_ADAGRAD);
    mfm_model *a, *b, *mapped = NULL;
    char path[256], *full;
    test_data td;
    mfm_error e;
    float *before, *after, *other;
    size_t n;
    unsigned char *bytes, *damaged;
    size_t size;
    v2_layout L;
    p.k = 32;
    a = make_model(&p, 5000, 8, 1); /* V: 5000 x 8 x 32 floats, 4.9 MiB */
    b = make_model(&p, 5000, 8, 1);
    make_data(&td, MFM_TASK_BINARY, 91);
    REQUIRE(a && b, "no models");
    model_randomize(a, 5, 0.5);
    model_randomize(b, 6, 0.5);
    n = (size_t)td.csr.n_rows;
    before = (float *)calloc(n, sizeof(float)), after = (float *)calloc(n, sizeof(float)), other = (float *)calloc(n, sizeof(float));
    scratch_path(path, sizeof path, "served.mfm");
    REQUIRE(mfm_model_save(a, path, 1, &e) == MFM_OK && mfm_model_map(path, &mapped, &e) == MFM_OK, "save and map: %s", e.message);
    full = realpath(path, NULL);
    REQUIRE(full != NULL, "realpath of %s", path);
    CHECK(mapped_now(full) != 0, "/proc/self/maps does not list the mapped model %s", full);
    { /* one range, the file's pages, from a 2 MB boundary (mfm__map_file): nothing left of the range reserved around it */
        unsigned long long start = 0, end = 0, page = (unsigned long long)sysconf(_SC_PAGESIZE);
        size_t file_bytes = 0;
        unsigned char *whole = read_whole_file(path, &file_bytes);
        const int ranges = mapped_ranges(full, &start, &end);
        free(whole);
        if (ranges >= 0) {
            CHECK(ranges == 1, "/proc/self/maps lists %d ranges of %s, not one", ranges, full);
            CHECK(start % (2ull << 20) == 0, "the mapping of %s starts at %#llx, not at a 2 MB boundary", full, start);
            CHECK(end - start == (file_bytes + page - 1) / page * page, "the mapping of %s spans %llu bytes for a file of %llu", full, end - start,
                  (unsigned long long)file_bytes);
        }
    }
    predict(a, &td.csr, MFM_OUTPUT_SCORE, before, n);
    CHECK(mfm_model_save(b, path, 1, &e) == MFM_OK, "save over the mapped file: %s", e.message);
    predict(mapped, &td.csr, MFM_OUTPUT_SCORE, after, n);
    predict(b, &td.csr, MFM_OUTPUT_SCORE, other, n);
    CHECK(memcmp(before, after, n * sizeof(float)) == 0, "a model saved over the file changed the mapped model's predictions");
    CHECK(memcmp(before, other, n * sizeof(float)) != 0, "the two models predict alike (the test would prove nothing)");
    mfm_model_free(mapped);
    CHECK(mapped_now(full) == 0, "/proc/self/maps still lists %s after mfm_model_free", full);
    mapped = NULL; /* a copy keeps no mapping, and outlives the file's removal */
    if (CHECK(mfm_model_load_parameters(path, &mapped, &e) == MFM_OK, "load_parameters: %s", e.message)) {
        CHECK(mapped_now(full) == 0, "/proc/self/maps lists %s after mfm_model_load_parameters", full);
        CHECK(mfm_model_save(a, path, 1, &e) == MFM_OK, "save over the copied file: %s", e.message);
        predict(mapped, &td.csr, MFM_OUTPUT_SCORE, after, n);
        CHECK(memcmp(other, after, n * sizeof(float)) == 0, "a model saved over the file changed the copied model's predictions");
        { /* rewritten in place, as a mapping would see it */
            FILE *f = fopen(path, "r+b");
            static unsigned char zeros[1 << 16];
            long at;
            for (at = 4096; f && at < (4l << 20); at += (long)sizeof zeros) {
                fseek(f, at, SEEK_SET);
                fwrite(zeros, 1, sizeof zeros, f);
            }
            CHECK(f && fclose(f) == 0, "rewriting %s in place", path);
        }
        predict(mapped, &td.csr, MFM_OUTPUT_SCORE, after, n);
        CHECK(memcmp(other, after, n * sizeof(float)) == 0, "the file rewritten in place changed the copied model's predictions");
        remove(path);
        predict(mapped, &td.csr, MFM_OUTPUT_SCORE, after, n);
        CHECK(memcmp(other, after, n * sizeof(float)) == 0, "the file's removal changed the copied model's predictions");
        mfm_model_free(mapped);
        CHECK(mfm_model_save(b, path, 1, &e) == MFM_OK, "save b again: %s", e.message);
    }
    bytes = read_whole_file(path, &size);
    if (CHECK(bytes && v2_read(bytes, size, &L) && L.n_sections >= 3 && L.s[2].tensor == 2 && L.s[2].bytes > (4u << 20), "the file of b has no V section of five chunks")) {
        damaged = (unsigned char *)malloc(size);
        memcpy(damaged, bytes, size);
        damaged[L.s[2].offset + L.s[2].bytes - 3] ^= 0x10; /* the last chunk */
        expect_bad_model(damaged, size, MFM_ERR_BAD_FILE, "checksum of its v parameter section", "a flip in V's last chunk");
        free(damaged);
    }
    free(bytes);
    free(full);
    free(before), free(after), free(other);
    mfm_model_free(a);
    mfm_model_free(b);
    data_free(&td);
    scratch_clean();
}

/* ---- float16 factors for serving ---- */

/* x rounded to the nearest float16 value, ties to even, computed in double here (|x| < 65504). */
static float round_to_half(float x) {
    double a = fabs((double)x), quantum, q;
    int e;
    if (a == 0) return x;
    e = (int)floor(log2(a));
    if (e < -14) e = -14; /* subnormal halves: steps of 2^-24 */
    quantum = ldexp(1.0, e - 10);
    q = nearbyint((double)x / quantum); /* the default rounding: to nearest, ties to even */
    return (float)(q * quantum);
}

void test_halves_widened(float *one_at_a_time, float *eight_at_a_time); /* tests/impl.c */
uint16_t test_float_to_half(float x);

/* The value of half bits h, from the IEEE definition (NaN for NaN). */
static double half_value(uint32_t h) {
    const int sign = h >> 15, e = (int)(h >> 10 & 31), frac = (int)(h & 1023);
    const double v = e == 31 ? (frac ? NAN : HUGE_VAL) : e ? ldexp(1024 + frac, e - 25) : ldexp(frac, -24);
    return sign ? -v : v;
}

/* Every float16 widens to its IEEE value, one at a time and eight at a time (F16C where the CPU
   has it); floats round to the nearest half, ties to even: every half, the midpoints between
   neighbours (ties) and a float either side of each, zeros, subnormals, the largest half, and
   beyond it infinity. */
void test_model_half_conversions(void) {
    float *one = (float *)malloc(65536 * sizeof(float)), *eight = (float *)malloc(65536 * sizeof(float));
    uint32_t h, bad = 0;
    test_halves_widened(one, eight);
    for (h = 0; h < 65536; h++) {
        const double v = half_value(h);
        if (isnan(v) ? !(isnan(one[h]) && isnan(eight[h])) : !((double)one[h] == v && (double)eight[h] == v && !signbit(one[h]) == !signbit(v)))
            if (bad++ < 5) (void)CHECK(0, "half 0x%04x widens to %g / %g, its value is %g", (unsigned)h, (double)one[h], (double)eight[h], v);
        if (!isnan(v) && test_float_to_half((float)v) != h) /* every half is its own nearest */
            if (bad++ < 5) (void)CHECK(0, "%g rounds to half 0x%04x, not 0x%04x", v, (unsigned)test_float_to_half((float)v), (unsigned)h);
        if ((h & 0x7C00u) != 0x7C00u && (h & 0x7FFFu) != 0x7BFFu) { /* the tie with the next half up, and a float either side */
            const double next = half_value(h + 1), mid = (v + next) / 2;
            const uint32_t even = (h & 1u) ? h + 1 : h;
            const float at = (float)mid, below = nextafterf(at, (float)v), above = nextafterf(at, (float)next);
            if ((double)at == mid && (test_float_to_half(at) != even || test_float_to_half(below) != h || test_float_to_half(above) != h + 1))
                if (bad++ < 5) (void)CHECK(0, "around the tie %.9g between 0x%04x and 0x%04x: %04x %04x %04x", mid, (unsigned)h, (unsigned)(h + 1),
                                     (unsigned)test_float_to_half(below), (unsigned)test_float_to_half(at), (unsigned)test_float_to_half(above));
        }
    }
    CHECK(bad == 0, "%u conversions wrong", bad);
    CHECK(test_float_to_half(65504.0f) == 0x7BFF && test_float_to_half(65520.0f) == 0x7C00 && test_float_to_half(1e30f) == 0x7C00 &&
              test_float_to_half(-0.0f) == 0x8000 && test_float_to_half(1e-9f) == 0 && test_float_to_half(3e-8f) == 1,
          "the edges: 65504 %04x, 65520 %04x, 1e30 %04x, -0 %04x, 1e-9 %04x, 3e-8 %04x", (unsigned)test_float_to_half(65504.0f),
          (unsigned)test_float_to_half(65520.0f), (unsigned)test_float_to_half(1e30f), (unsigned)test_float_to_half(-0.0f), (unsigned)test_float_to_half(1e-9f),
          (unsigned)test_float_to_half(3e-8f));
    free(one);
    free(eight);
}

/* Every value of tensor t of every class of m, rounded to float16 (V, and w where the file keeps
   it inside V's records). */
static void round_tensor_to_half(mfm_model *m, mfm_tensor t) {
    mfm_model_info info;
    size_t n = mfm_tensor_size(m, t), i;
    float *x = (float *)malloc(n * sizeof(float));
    uint32_t c;
    mfm_model_get_info(m, &info);
    for (c = 0; c < info.n_classes; c++) {
        CHECK(mfm_model_get_tensor(m, t, 0, c, x, n, NULL) == MFM_OK, "get_tensor");
        for (i = 0; i < n; i++) x[i] = round_to_half(x[i]);
        CHECK(mfm_model_set_tensor(m, t, 0, c, x, n, NULL) == MFM_OK, "set_tensor");
    }
    free(x);
}

/* The halves of a float16 FFM file's record (docs/FORMATS.md): F x k factors and w, padded to the
   smallest power of two up to 32, else to the next multiple of 32. */
static uint64_t half_record(uint64_t n_fields, uint64_t k) {
    const uint64_t need = n_fields * k + 1;
    uint64_t record = 1;
    if (need > 32) return (need + 31) / 32 * 32;
    while (record < need) record *= 2;
    return record;
}

/* FFM rows longer than MFM__FFM_AHEAD (256 non-zeros), whose pairs past it find their records
   one pair at a time: 12 rows of 240 to 300 non-zeros over 300 fields (repeated fields among
   them), k = 4 and 5, score as the reference does; a float16 file of the model, mapped, scores
   them as the float32 model holding its rounded values does, bit for bit, with F16C and without. */
void test_model_ffm_long_rows(void) {
    static const int ks[] = {4, 5};
    char path[256];
    size_t ki;
    scratch_path(path, sizeof path, "long.mfm");
    for (ki = 0; ki < 2; ki++) {
        mfm_params p = file_params(MFM_MODEL_FFM, MFM_TASK_BINARY, MFM_OPTIMIZER_ADAGRAD);
        mfm_model *m, *want = NULL, *mapped = NULL, *narrow = NULL;
        uint64_t row, shortest = 1000, longest = 0;
        data_spec spec;
        test_data td;
        ref_model r;
        mfm_error e;
        mfm_status st;
        float *out;
        char what[32];
        p.k = ks[ki];
        sprintf(what, "FFM k=%d, long rows", p.k);
        memset(&spec, 0, sizeof spec);
        spec.n_rows = 12, spec.feature_range = 400, spec.n_fields = 300, spec.min_nnz = 240, spec.max_nnz = 300;
        spec.with_values = 1, spec.task = MFM_TASK_BINARY, spec.seed = 70 + ki;
        data_random(&td, &spec);
        for (row = 0; row < td.csr.n_rows; row++) {
            const uint64_t z = td.offsets[row + 1] - td.offsets[row];
            if (z < shortest) shortest = z;
            if (z > longest) longest = z;
        }
        CHECK(shortest < 256 && longest > 257, "%s: rows of %llu to %llu non-zeros do not cross 256", what, (unsigned long long)shortest, (unsigned long long)longest);
        if (!(m = make_model(&p, 400, 300, 1))) {
            data_free(&td);
            continue;
        }
        model_randomize(m, 80 + ki, 0.1);
        ref_load(&r, m);
        out = (float *)calloc(td.csr.n_rows, sizeof(float));
        if (predict(m, &td.csr, MFM_OUTPUT_SCORE, out, td.csr.n_rows))
            for (row = 0; row < td.csr.n_rows; row++)
                CHECK_NEAR(out[row], ref_score(&r, 0, &td.csr, row), 1e-4, 1e-4, "%s: row %llu", what, (unsigned long long)row);
        free(out);
        ref_free(&r);
        REQUIRE(mfm_model_clone(m, &want, &e) == MFM_OK, "clone: %s", e.message);
        round_tensor_to_half(want, MFM_TENSOR_V);
        round_tensor_to_half(want, MFM_TENSOR_W); /* w inside V's records */
        st = mfm_model_save_half(m, path, &e);
        if (CHECK(st == MFM_OK, "%s: save_half: %s", what, st ? e.message : "")) {
            st = mfm_model_map(path, &mapped, &e);
            if (CHECK(st == MFM_OK, "%s: map: %s", what, st ? e.message : "")) scores_equal(want, mapped, &td.csr, what);
            setenv("MFM_SIMD", "sse2", 1); /* the halves widened one by one, as on a CPU without F16C */
            st = mfm_model_map(path, &narrow, &e);
            unsetenv("MFM_SIMD");
            if (CHECK(st == MFM_OK, "%s: map with MFM_SIMD=sse2: %s", what, st ? e.message : "")) scores_equal(want, narrow, &td.csr, what);
        }
        mfm_model_free(narrow);
        mfm_model_free(mapped);
        mfm_model_free(want);
        mfm_model_free(m);
        data_free(&td);
    }
}

/* mfm_model_save_half: V (and FM's and FwFM's w inside its blocks) as float16 in a file of the
   documented size. Mapped, the model holds exactly the values rounded to nearest (rounded here
   independently) and scores every row as a float32 model holding those values does, bit for
   bit (FFM, which reads its halves in place, at k = 3 and 9, with F16C and without: its records
   of F blocks and w padded to 16 and 64 halves);
   mfm_model_load widens them to the same values; a clone trains once its state is reset.
   A factor beyond float16's range, a damaged section and a NaN behind valid checksums are
   refused with a sentence; the inspections that read factors in place refuse it. */
void test_model_half_serving(void) {
    static const mfm_model_type models[] = {MFM_MODEL_FM, MFM_MODEL_FFM, MFM_MODEL_FWFM, MFM_MODEL_FM, MFM_MODEL_FFM};
    static const mfm_task tasks[] = {MFM_TASK_BINARY, MFM_TASK_BINARY, MFM_TASK_MULTICLASS, MFM_TASK_REGRESSION, MFM_TASK_MULTICLASS};
    char path[256];
    size_t mi;
    scratch_path(path, sizeof path, "half.mfm");
    for (mi = 0; mi < 5; mi++) {
        mfm_params p = file_params(models[mi], tasks[mi], MFM_OPTIMIZER_ADAGRAD);
        mfm_model *m, *want = NULL, *mapped = NULL, *loaded = NULL, *clone = NULL;
        const char *what = model_name(models[mi]);
        mfm_model_info info;
        mfm_interaction top[4];
        size_t found, n;
        unsigned char *bytes;
        uint64_t sections;
        test_data td;
        mfm_error e;
        mfm_status st;
        v2_layout L;
        if (mi == 3) p.k = 16; /* w apart from V: k + 1 floats pass a line */
        if (mi == 4) p.k = 9;  /* FFM: four lanes twice, then one; a record of whole lines */
        if (!(m = make_model(&p, N_FEATURES, N_FIELDS, 3))) continue;
        make_data(&td, tasks[mi], 60 + mi);
        model_randomize(m, 9 + mi, 0.7);
        mfm_model_get_info(m, &info);
        REQUIRE(mfm_model_clone(m, &want, &e) == MFM_OK, "clone: %s", e.message);
        round_tensor_to_half(want, MFM_TENSOR_V);
        if (models[mi] == MFM_MODEL_FFM || p.k < 16) round_tensor_to_half(want, MFM_TENSOR_W); /* w inside V's records */
        st = mfm_model_save_half(m, path, &e);
        if (!CHECK(st == MFM_OK, "%s: save_half: %s", what, st ? e.message : "")) goto next;
        bytes = read_whole_file(path, &n);
        prediction_floats(&p, info.n_features, info.n_fields, info.k, &sections);
        if (models[mi] == MFM_MODEL_FFM) sections--; /* w inside V's records */
        if (CHECK(bytes && v2_read(bytes, n, &L) && L.n_sections == sections, "%s: the file's directory", what)) {
            uint64_t s, at = seal_align_up(V2_HEADER_BYTES + 4 * (models[mi] == MFM_MODEL_FWFM ? 0 : 0));
            for (s = 0; s < L.n_sections; s++) {
                const int v = L.s[s].tensor == 2;
                const uint64_t values = L.s[s].bytes / (v ? 2 : 4);
                CHECK(L.s[s].offset == at && (L.s[s].flags & 2) == (v ? 2u : 0u) && values % info.n_classes == 0, "%s: section %llu at %llu, flags %u", what,
                      (unsigned long long)s, (unsigned long long)L.s[s].offset, L.s[s].flags);
                if (v && models[mi] == MFM_MODEL_FFM) { /* a record a feature: F blocks of k, w, zeros to 16 or a multiple of 32 halves */
                    const uint64_t need = (uint64_t)N_FIELDS * p.k + 1, record = half_record(N_FIELDS, (uint64_t)p.k);
                    uint64_t f, j, bad = 0;
                    float w[N_FEATURES];
                    REQUIRE(mfm_model_get_tensor(want, MFM_TENSOR_W, 0, 0, w, N_FEATURES, NULL) == MFM_OK, "get_tensor");
                    CHECK(L.s[s].flags == 3 && L.s[s].stride == record && L.s[s].bytes == 2 * record * N_FEATURES * info.n_classes,
                          "%s: V's section: flags %u, stride %u, %llu bytes; want 3, %llu, %llu", what, L.s[s].flags, L.s[s].stride,
                          (unsigned long long)L.s[s].bytes, (unsigned long long)record, (unsigned long long)(2 * record * N_FEATURES * info.n_classes));
                    for (f = 0; f < N_FEATURES && L.s[s].bytes == 2 * record * N_FEATURES * info.n_classes; f++) {
                        const unsigned char *r = bytes + L.s[s].offset + 2 * record * f; /* class 0 */
                        bad += half_value((uint32_t)(r[2 * (need - 1)] | r[2 * (need - 1) + 1] << 8)) != (double)w[f];
                        for (j = need; j < record; j++) bad += r[2 * j] || r[2 * j + 1];
                    }
                    CHECK(bad == 0, "%s: %llu of V's records lack w after their blocks, or zeros after w", what, (unsigned long long)bad);
                }
                at += seal_align_up(L.s[s].bytes);
            }
            CHECK(at == L.directory, "%s: the sections end at %llu, the directory is at %llu", what, (unsigned long long)at, (unsigned long long)L.directory);
        }
        {
            mfm_model_file_info fi;
            CHECK(mfm_model_file_inspect(path, &fi, &e) == MFM_OK && fi.half && !fi.has_state, "%s: inspect of a float16 file: half %d", what, fi.half);
        }
        st = mfm_model_map(path, &mapped, &e);
        if (CHECK(st == MFM_OK, "%s: map: %s", what, st ? e.message : "")) {
            mfm_model_info mi_info;
            same_slots(want, mapped, 0, 0, what);
            scores_equal(want, mapped, &td.csr, what);
            if (models[mi] == MFM_MODEL_FFM) { /* and its halves widened one by one, as on a CPU without F16C */
                mfm_model *narrow = NULL;
                setenv("MFM_SIMD", "sse2", 1);
                st = mfm_model_map(path, &narrow, &e);
                unsetenv("MFM_SIMD");
                if (CHECK(st == MFM_OK, "%s: map with MFM_SIMD=sse2: %s", what, st ? e.message : "")) scores_equal(want, narrow, &td.csr, "FFM, halves one by one");
                mfm_model_free(narrow);
            }
            mfm_model_get_info(mapped, &mi_info);
            CHECK(mi_info.memory_bytes < info.memory_bytes / 2, "%s: a mapped float16 model holds %llu bytes", what, (unsigned long long)mi_info.memory_bytes);
            { /* copied, the halves as they lie in the file: the same values, scores and memory */
                mfm_model *copied = NULL;
                mfm_model_info ci;
                st = mfm_model_load_parameters(path, &copied, &e);
                if (CHECK(st == MFM_OK, "%s: load_parameters: %s", what, st ? e.message : "")) {
                    same_slots(want, copied, 0, 0, what);
                    scores_equal(want, copied, &td.csr, what);
                    mfm_model_get_info(copied, &ci);
                    CHECK(ci.memory_bytes == mi_info.memory_bytes, "%s: a copied float16 model holds %llu bytes, the mapped one %llu", what,
                          (unsigned long long)ci.memory_bytes, (unsigned long long)mi_info.memory_bytes);
                }
                mfm_model_free(copied);
            }
            st = mfm_top_interactions(mapped, &td.csr, 0, 4, top, &found, &e);
            CHECK(st == MFM_ERR_INVALID_ARGUMENT && strstr(e.message, "float16"), "%s: top interactions of float16 factors: %d", what, (int)st);
            if (CHECK(mfm_model_clone(mapped, &clone, &e) == MFM_OK, "%s: clone: %s", what, e.message)) {
                same_slots(want, clone, 0, 0, what);
                mfm_model_reset_state(clone);
                CHECK(mfm_fit(clone, &td.csr, &e) == MFM_OK, "%s: the clone trains: %s", what, e.message);
            }
        }
        st = mfm_model_load(path, &loaded, &e);
        if (CHECK(st == MFM_OK, "%s: load: %s", what, st ? e.message : "")) {
            same_slots(want, loaded, 0, 0, what);
            scores_equal(want, loaded, &td.csr, what);
        }
        if (bytes && L.n_sections >= 2) {
            const v2_section *v = &L.s[L.n_sections - (models[mi] == MFM_MODEL_FWFM ? 2 : 1)];
            unsigned char *c = (unsigned char *)malloc(n);
            memcpy(c, bytes, n);
            c[v->offset + 3] ^= 0x20;
            expect_bad_model(c, n, MFM_ERR_BAD_FILE, "checksum", "a flip in the float16 factors");
            memcpy(c, bytes, n);
            c[v->offset + 2] = 0x00, c[v->offset + 3] = 0x7E; /* a float16 NaN */
            v2_reseal(c, n, test_checksum);
            expect_bad_model(c, n, MFM_ERR_BAD_FILE, "not finite", "a float16 NaN behind valid checksums");
            free(c);
        }
        free(bytes);
        { /* beyond float16's range: refused, nothing written */
            float big = 70000.0f;
            float *v = (float *)calloc(mfm_tensor_size(m, MFM_TENSOR_V), sizeof(float));
            char other[300];
            snprintf(other, sizeof other, "%s.big", path);
            mfm_model_get_tensor(m, MFM_TENSOR_V, 0, 0, v, mfm_tensor_size(m, MFM_TENSOR_V), NULL);
            v[5] = big;
            mfm_model_set_tensor(m, MFM_TENSOR_V, 0, 0, v, mfm_tensor_size(m, MFM_TENSOR_V), NULL);
            st = mfm_model_save_half(m, other, &e);
            CHECK(st == MFM_ERR_INVALID_ARGUMENT && strstr(e.message, "65504") && access(other, F_OK) != 0, "%s: a factor of 70000: %d %s", what, (int)st,
                  st ? e.message : "saved");
            free(v);
        }
    next:
        mfm_model_free(clone);
        mfm_model_free(loaded);
        mfm_model_free(mapped);
        mfm_model_free(want);
        mfm_model_free(m);
        data_free(&td);
    }
    for (mi = 0; mi < 2; mi++) { /* Adam keeps FM's w apart from V in memory, FFM always: the file puts it inside, its range is checked too */
        mfm_params p = file_params(mi ? MFM_MODEL_FFM : MFM_MODEL_FM, MFM_TASK_BINARY, mi ? MFM_OPTIMIZER_ADAGRAD : MFM_OPTIMIZER_ADAM);
        mfm_model *m;
        mfm_error e;
        mfm_status st;
        float w[N_FEATURES];
        p.k = 4;
        if ((m = make_model(&p, N_FEATURES, mi ? N_FIELDS : 0, 1)) != NULL) {
            mfm_model_get_tensor(m, MFM_TENSOR_W, 0, 0, w, N_FEATURES, NULL);
            w[3] = 1e5f;
            mfm_model_set_tensor(m, MFM_TENSOR_W, 0, 0, w, N_FEATURES, NULL);
            st = mfm_model_save_half(m, path, &e);
            CHECK(st == MFM_ERR_INVALID_ARGUMENT && strstr(e.message, "w of feature 3"), "%s with w = 1e5: %d %s", mi ? "FFM" : "FM under Adam", (int)st,
                  st ? e.message : "saved");
        }
        mfm_model_free(m);
    }
    scratch_clean();
}

/* tests/data/v2-ffm-half-multiclass.mfm is a float16 FFM file from before FFM's records held w
   (tests/data/README.md): its V blocks of k halves, its w floats. It still loads and maps (as a
   float32 copy: its layout is not the one mapped in place), holding exactly the model's values
   with V rounded to float16 and w as it was, and scores as that model does. */
void test_model_half_files_before_records_load(void) {
    const char *path = "tests/data/v2-ffm-half-multiclass.mfm";
    mfm_params p;
    mfm_model *want, *loaded = NULL, *mapped = NULL;
    mfm_error e;
    test_data td;
    memset(&p, 0, sizeof p);
    p.model = MFM_MODEL_FFM, p.task = MFM_TASK_MULTICLASS, p.optimizer = MFM_OPTIMIZER_ADAGRAD, p.k = 3, p.n_classes = 3;
    p.learning_rate = 0.037, p.seed = 12345678901234ull;
    if (!(want = make_model(&p, N_FEATURES, N_FIELDS, 3))) return;
    model_randomize(want, 2000, 0.5);
    round_tensor_to_half(want, MFM_TENSOR_V);
    make_data(&td, MFM_TASK_MULTICLASS, 77);
    if (CHECK(mfm_model_load(path, &loaded, &e) == MFM_OK, "%s: %s", path, e.message)) {
        same_slots(want, loaded, 0, 0, path);
        scores_equal(want, loaded, &td.csr, path);
    }
    if (CHECK(mfm_model_load_parameters(path, &mapped, &e) == MFM_OK, "%s: load_parameters: %s", path, e.message)) scores_equal(want, mapped, &td.csr, path);
    mfm_model_free(mapped);
    mapped = NULL;
    if (CHECK(mfm_model_map(path, &mapped, &e) == MFM_OK, "%s: map: %s", path, e.message)) {
        mfm_model_info info;
        const uint64_t floats = 3 * (1 + N_FEATURES + (uint64_t)N_FEATURES * N_FIELDS * 3); /* w0, w, V of 3 classes */
        same_slots(want, mapped, 0, 0, path);
        scores_equal(want, mapped, &td.csr, path);
        mfm_model_get_info(mapped, &info);
        CHECK(info.memory_bytes == 4 * floats, "%s: mapped as %llu bytes, not the float32 copy's %llu", path, (unsigned long long)info.memory_bytes,
              (unsigned long long)(4 * floats));
    }
    mfm_model_free(mapped);
    mfm_model_free(loaded);
    mfm_model_free(want);
    data_free(&td);
}

/* Float16 FFM files of every record shape: 1, 2 and 4 fields, k = 1, 3 and 9 (records of 2 to
   64 halves), 1 and 3 classes, and pairs-only and linear-only models. Mapped, each holds the
   float16-rounded model (w too) in records whose memory is C x (w0 + records) exactly, and scores
   as that model does; its clone holds the same values; saved again as float16 it gives the same
   bytes. Behind valid checksums, a record section without its flag, of the wrong record size or
   in a linear-only model's file is refused as corrupt. */
void test_model_half_ffm_records(void) {
    static const uint32_t fields[] = {1, 2, 4};
    static const int ks[] = {1, 3, 9};
    char path[256], again[256];
    size_t fi, ki, variant;
    scratch_path(path, sizeof path, "records.mfm");
    scratch_path(again, sizeof again, "records-again.mfm");
    for (variant = 0; variant < 3; variant++)
        for (fi = 0; fi < 3; fi++)
            for (ki = 0; ki < 3; ki++) {
                const uint32_t F = fields[fi], C = variant == 1 ? 3 : 1;
                mfm_params p = file_params(MFM_MODEL_FFM, C > 1 ? MFM_TASK_MULTICLASS : MFM_TASK_BINARY, MFM_OPTIMIZER_ADAGRAD);
                mfm_model *m, *want = NULL, *mapped = NULL, *clone = NULL;
                mfm_model_info info;
                data_spec spec;
                test_data td;
                mfm_error e;
                unsigned char *a, *b;
                size_t na = 0, nb = 0;
                char what[80];
                p.k = ks[ki];
                p.pairs_only = variant == 1, p.linear_only = variant == 2;
                snprintf(what, sizeof what, "FFM F %u k %d C %u%s", F, p.k, C, variant == 1 ? " pairs-only" : variant == 2 ? " linear-only" : "");
                if (!(m = make_model(&p, N_FEATURES, F, C))) continue;
                model_randomize(m, 70 + fi * 3 + ki, 0.6);
                REQUIRE(mfm_model_clone(m, &want, &e) == MFM_OK, "clone: %s", e.message);
                round_tensor_to_half(want, MFM_TENSOR_V);
                if (!p.linear_only) round_tensor_to_half(want, MFM_TENSOR_W);
                memset(&spec, 0, sizeof spec);
                spec.n_rows = 40, spec.feature_range = N_FEATURES, spec.n_fields = F, spec.min_nnz = 1, spec.max_nnz = 6, spec.with_values = 1;
                spec.task = C > 1 ? MFM_TASK_MULTICLASS : MFM_TASK_BINARY, spec.n_classes = C, spec.seed = 90 + variant * 9 + fi * 3 + ki;
                data_random(&td, &spec);
                td.csr.n_features = N_FEATURES, td.csr.n_fields = F;
                if (CHECK(mfm_model_save_half(m, path, &e) == MFM_OK, "%s: save_half: %s", what, e.message) &&
                    CHECK(mfm_model_map(path, &mapped, &e) == MFM_OK, "%s: map: %s", what, e.message)) {
                    const uint64_t bytes = 4 * C * (1 + (uint64_t)N_FEATURES / 2 * half_record(F, (uint64_t)p.k)); /* w0, then the records' halves */
                    same_slots(want, mapped, 0, 0, what);
                    scores_equal(want, mapped, &td.csr, what);
                    mfm_model_get_info(mapped, &info);
                    if (!p.linear_only)
                        CHECK(info.memory_bytes == bytes, "%s: a mapped model of %llu bytes, not %llu", what, (unsigned long long)info.memory_bytes,
                              (unsigned long long)bytes);
                    if (CHECK(mfm_model_clone(mapped, &clone, &e) == MFM_OK, "%s: clone: %s", what, e.message)) same_slots(want, clone, 0, 0, what);
                    a = read_whole_file(path, &na);
                    b = CHECK(mfm_model_save_half(mapped, again, &e) == MFM_OK, "%s: save_half of the mapped model: %s", what, e.message) ? read_whole_file(again, &nb) : NULL;
                    CHECK(a && b && na == nb && memcmp(a, b, na) == 0, "%s: the mapped model saved as float16 gives other bytes (%zu, %zu)", what, na, nb);
                    if (a && variant == 0 && F == 4 && ki == 1) { /* behind valid checksums, a record section that does not fit its header is refused */
                        v2_layout L;
                        unsigned char *c = (unsigned char *)malloc(na);
                        if (CHECK(c && v2_read(a, na, &L) && L.n_sections == 2 && L.s[1].flags == 3, "%s: the directory", what)) {
                            const size_t entry = (size_t)L.directory + 8 + 40;
                            memcpy(c, a, na);
                            store_le(c + entry + 12, 2, 4); /* V's records without the w-inside flag: blocks of `stride` halves */
                            v2_reseal(c, na, test_checksum);
                            expect_bad_model(c, na, MFM_ERR_BAD_FILE, "corrupt", "FFM records flagged as float16 blocks");
                            memcpy(c, a, na);
                            store_le(c + entry + 8, L.s[1].stride / 2, 4); /* a record of half the halves */
                            v2_reseal(c, na, test_checksum);
                            expect_bad_model(c, na, MFM_ERR_BAD_FILE, "corrupt", "FFM records of the wrong size");
                            memcpy(c, a, na);
                            store_le(c + 56, 1, 4); /* a linear-only header: its file has no records */
                            v2_reseal(c, na, test_checksum);
                            expect_bad_model(c, na, MFM_ERR_BAD_FILE, "corrupt", "FFM records in a linear-only model's file");
                        }
                        free(c);
                    }
                    free(a);
                    free(b);
                }
                mfm_model_free(clone);
                mfm_model_free(mapped);
                mfm_model_free(want);
                mfm_model_free(m);
                data_free(&td);
            }
    scratch_clean();
}
