/* defaults.c - the experiment that chooses the training defaults (docs/DEFAULTS.md).

   For every data shape of a grid (training rows x features x Zipf exponent x planted
   interaction strength, Criteo-shaped rows from bench/synth.h) it generates training,
   validation and test rows from one seeded draw, then trains every setting of a grid (model x
   k x learning rate x AdaGrad's initial accumulator x L2 x init_scale x batch size x
   learning-rate rule) with early stopping on the validation rows (mfm_fit_validated), and
   prints one line per (shape, setting): the test logloss and AUC of the restored best epoch
   next to the logloss of the constant predictor (the training click rate), on the same test
   rows. Every list option takes comma-separated values and the program runs their product,
   so keep the lists short; `defaults --help` lists them. One thread per run: run several
   processes side by side for a wide grid.

   Batch rules (how the settings follow batch_size B): none (as given: the library's AdaGrad
   steps on a batch's summed gradients, so a coordinate the batch touches once takes the step
   it would take at batch 1), mean (AdaGrad on the batch's mean gradient, what the library did
   before: the same steps as the sum with the initial accumulator x B^2), sqrt (the mean with
   the learning rate x sqrt(B)). A zero in --init or --l2 is a literal zero (MFM_ZERO). */
#define MODERN_FM_IMPLEMENTATION
#include "../modern_fm.h"

#include "common.h"
#include "synth.h"

#include <inttypes.h>
#include <string.h>

enum { MAX_LIST = 12 };
enum { RULE_NONE, RULE_MEAN, RULE_SQRT, RULE_COUNT };
static const char *const rule_names[RULE_COUNT] = {"none", "mean", "sqrt"};

typedef struct dlist {
    int n;
    double v[MAX_LIST];
} dlist;

typedef struct options {
    dlist rows, features, zipf, signal;
    dlist models, k, lr, init, l2, init_scale, batch, rule;
    int fields, hidden_k, epochs, patience, threads, backend, normalize;
    double base_rate;
    uint64_t seed;
    const char *write_dir; /* --write: each shape's splits as libffm text, for other tools */
} options;

/* A model name or a batch rule as its index, else a number ("1e5" too); NaN when neither. */
static double parse_token(const char *s, int what) {
    char *end;
    double v;
    int i;
    if (what == 'm') return (double)bench_parse_model(s) < 0 ? NAN : (double)bench_parse_model(s);
    if (what == 'r') {
        for (i = 0; i < RULE_COUNT; i++)
            if (!strcmp(s, rule_names[i])) return i;
        return NAN;
    }
    v = strtod(s, &end);
    return *s && !*end && v >= 0 ? v : NAN;
}

static int parse_list(const char *arg, int what, dlist *out) {
    char buf[512], *tok;
    if (strlen(arg) >= sizeof buf) return 0;
    strcpy(buf, arg);
    out->n = 0;
    for (tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        if (out->n == MAX_LIST || isnan(out->v[out->n] = parse_token(tok, what))) return 0;
        out->n++;
    }
    return out->n > 0;
}

static void set_list(dlist *l, int n, const double *v) {
    l->n = n;
    memcpy(l->v, v, (size_t)n * sizeof *v);
}

static void usage(void) {
    printf("usage: defaults [options]   (lists are comma-separated; the program runs their product)\n"
           "data shapes:\n"
           "  --rows LIST        training rows (1e4); validation rows = rows/2, test rows = rows (at most 2e5)\n"
           "  --features LIST    feature ids over all fields (1e5)\n"
           "  --zipf LIST        Zipf exponent of ids within a field (1.1)\n"
           "  --signal LIST      standard deviation of the planted pair term (1)\n"
           "  --fields N         fields, one feature each per row (39, as Criteo)\n"
           "  --hidden-k N       rank of the planted interactions (4)\n"
           "  --base-rate P      click rate (0.22)\n"
           "settings:\n"
           "  --models LIST      fm, ffm, fwfm (ffm)\n"
           "  --k LIST           (4,8)\n"
           "  --lr LIST          learning rate, 0 = the library's default (0.02,0.05,0.1,0.2)\n"
           "  --init LIST        AdaGrad's initial accumulator (0,0.1,1)\n"
           "  --l2 LIST          l2_linear = l2_factors (0,2e-5,1e-4)\n"
           "  --init-scale LIST  0 = the library's default (0)\n"
           "  --batch LIST       batch sizes (1)\n"
           "  --rule LIST        none, mean, sqrt: how lr / init follow the batch (none)\n"
           "  --backend NAME     cpu or cuda (cpu)\n"
           "training:\n"
           "  --epochs N         at most (30); --patience N (2); --threads N (1); --seed N (1)\n"
"  --write DIR        also write each shape's splits as DIR/R_F_Z_S_{train,valid,test}.ffm (libffm text)\n"
           "  --no-normalize     every run takes the values as given (normalize_rows off; the library scales\n"
           "                     each row to sum x^2 = 1 by default, as LIBFFM and xLearn do)\n"
           "  --quick            10^4 rows, 10^4 features, FFM, k 4, lr 0.05,0.2, init 0,1, l2 2e-5\n");
}

static void write_split(const options *o, const double *shape, const synth_data *d, const char *name) {
    mfm_csr csr = synth_csr(d);
    mfm_error e;
    char path[1024];
    snprintf(path, sizeof path, "%s/%.0f_%.0f_%g_%g_%s.ffm", o->write_dir, shape[0], shape[1], shape[2], shape[3], name);
    bench_check(mfm_dataset_write(&csr, path, MFM_FORMAT_LIBFFM, &e), &e, "mfm_dataset_write");
}

static double constant_logloss(const synth_data *train, const synth_data *test) {
    double ctr = 0, ll = 0, p;
    uint64_t r;
    for (r = 0; r < train->n_rows; r++) ctr += train->labels[r];
    p = ctr / (double)train->n_rows;
    for (r = 0; r < test->n_rows; r++) ll -= test->labels[r] > 0.5f ? log(p) : log(1 - p);
    return ll / (double)test->n_rows;
}

/* One setting on one shape: a line of the table. */
static void run_setting(const options *o, const double *shape, const synth_data *tr, const synth_data *va, const synth_data *te,
                        double const_ll, int model, int k, double lr, double init, double l2, double iscale, int batch, int rule) {
    mfm_csr trc = synth_csr(tr), vac = synth_csr(va), tec = synth_csr(te);
    mfm_params p;
    mfm_model *m = NULL;
    mfm_model_info info;
    mfm_metrics test, valid;
    mfm_error e;
    mfm_status st;
    double t0 = bench_now(), eff_lr = lr, eff_init = init;
    if (rule == RULE_SQRT) eff_lr = lr * sqrt((double)batch);
    if (rule == RULE_MEAN || rule == RULE_SQRT) eff_init = init * ((double)batch * batch);
    memset(&p, 0, sizeof p);
    p.model = (mfm_model_type)model;
    p.task = MFM_TASK_BINARY;
    p.optimizer = MFM_OPTIMIZER_ADAGRAD;
    p.k = k;
    p.learning_rate = eff_lr;
    p.adagrad_init = eff_init == 0 ? MFM_ZERO : eff_init;
    p.l2_linear = p.l2_factors = l2 == 0 ? MFM_ZERO : l2;
    p.backend = (mfm_backend)o->backend;
    p.init_scale = iscale;
    p.normalize_rows = o->normalize ? 1 : MFM_OFF;
    p.batch_size = batch;
    p.n_epochs = o->epochs;
    p.patience = o->patience;
    p.n_threads = o->threads;
    p.seed = o->seed;
    printf("%8.0f %9.0f %4.2f %4.1f  %-4s %2d %6g %6g %7g %6g %5d %-6s", shape[0], shape[1], shape[2], shape[3], mfm_model_type_name(p.model), k, lr,
           init, l2, iscale, batch, rule_names[rule]);
    st = mfm_model_create(&p, trc.n_features, trc.n_fields, 1, &m, &e);
    if (st == MFM_OK) st = mfm_fit_validated(m, &trc, &vac, &e);
    if (st == MFM_OK) st = mfm_evaluate(m, &vac, &valid, &e);
    if (st == MFM_OK) st = mfm_evaluate(m, &tec, &test, &e);
    if (st != MFM_OK) {
        printf("  %s: %.60s\n", mfm_status_string(st), e.message);
    } else {
        mfm_model_get_info(m, &info);
        printf(" %3d %7.4f %7.4f %6.4f %7.4f %+8.4f %6.1f\n", (int)info.epochs_trained, valid.logloss, test.logloss, test.auc, const_ll,
               test.logloss - const_ll, bench_now() - t0);
    }
    fflush(stdout);
    mfm_model_free(m);
}

int main(int argc, char **argv) {
    static const double d_rows[] = {1e4}, d_feat[] = {1e5}, d_zipf[] = {1.1}, d_signal[] = {1}, d_models[] = {MFM_MODEL_FFM}, d_k[] = {4, 8},
                        d_lr[] = {0.02, 0.05, 0.1, 0.2}, d_init[] = {0, 0.1, 1}, d_l2[] = {0, 2e-5, 1e-4}, d_zero[] = {0}, d_one[] = {1},
                        q_lr[] = {0.05, 0.2}, q_init[] = {0, 1}, q_l2[] = {2e-5}, q_k[] = {4};
    options o;
    int i, a[12];
    memset(&o, 0, sizeof o);
    set_list(&o.rows, 1, d_rows), set_list(&o.features, 1, d_feat), set_list(&o.zipf, 1, d_zipf), set_list(&o.signal, 1, d_signal);
    set_list(&o.models, 1, d_models), set_list(&o.k, 2, d_k), set_list(&o.lr, 4, d_lr), set_list(&o.init, 3, d_init);
    set_list(&o.l2, 3, d_l2), set_list(&o.init_scale, 1, d_zero), set_list(&o.batch, 1, d_one), set_list(&o.rule, 1, d_zero);
    o.fields = 39, o.hidden_k = 4, o.epochs = 30, o.patience = 2, o.threads = 1, o.base_rate = 0.22, o.seed = 1, o.normalize = 1;
    for (i = 1; i < argc; i++) {
        const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int ok = v != NULL;
        if (!strcmp(f, "--help") || !strcmp(f, "-h")) {
            usage();
            return 0;
        } else if (!strcmp(f, "--normalize") || !strcmp(f, "--no-normalize")) {
            o.normalize = !strcmp(f, "--normalize");
            continue;
        } else if (!strcmp(f, "--quick")) {
            set_list(&o.rows, 1, d_rows), o.features.v[0] = 1e4, o.features.n = 1, set_list(&o.models, 1, d_models);
            set_list(&o.k, 1, q_k), set_list(&o.lr, 2, q_lr), set_list(&o.init, 2, q_init), set_list(&o.l2, 1, q_l2);
            continue;
        } else if (!strcmp(f, "--rows")) ok = ok && parse_list(v, 'n', &o.rows);
        else if (!strcmp(f, "--features")) ok = ok && parse_list(v, 'n', &o.features);
        else if (!strcmp(f, "--zipf")) ok = ok && parse_list(v, 'n', &o.zipf);
        else if (!strcmp(f, "--signal")) ok = ok && parse_list(v, 'n', &o.signal);
        else if (!strcmp(f, "--models")) ok = ok && parse_list(v, 'm', &o.models);
        else if (!strcmp(f, "--k")) ok = ok && parse_list(v, 'n', &o.k);
        else if (!strcmp(f, "--lr")) ok = ok && parse_list(v, 'n', &o.lr);
        else if (!strcmp(f, "--init")) ok = ok && parse_list(v, 'n', &o.init);
        else if (!strcmp(f, "--l2")) ok = ok && parse_list(v, 'n', &o.l2);
        else if (!strcmp(f, "--init-scale")) ok = ok && parse_list(v, 'n', &o.init_scale);
        else if (!strcmp(f, "--batch")) ok = ok && parse_list(v, 'n', &o.batch);
        else if (!strcmp(f, "--rule")) ok = ok && parse_list(v, 'r', &o.rule);
        else if (!strcmp(f, "--fields")) ok = ok && (o.fields = atoi(v)) > 0;
        else if (!strcmp(f, "--hidden-k")) ok = ok && (o.hidden_k = atoi(v)) > 0;
        else if (!strcmp(f, "--epochs")) ok = ok && (o.epochs = atoi(v)) > 0;
        else if (!strcmp(f, "--patience")) ok = ok && (o.patience = atoi(v)) > 0;
        else if (!strcmp(f, "--threads")) ok = ok && (o.threads = atoi(v)) >= 0;
        else if (!strcmp(f, "--backend")) {
            o.backend = !strcmp(v, "cuda") ? MFM_BACKEND_CUDA : MFM_BACKEND_CPU;
            ok = ok && (!strcmp(v, "cpu") || !strcmp(v, "cuda"));
        }
        else if (!strcmp(f, "--base-rate")) ok = ok && (o.base_rate = atof(v)) > 0 && o.base_rate < 1;
        else if (!strcmp(f, "--write")) o.write_dir = v;
        else if (!strcmp(f, "--seed")) ok = ok && (o.seed = strtoull(v, NULL, 10), 1);
        else ok = 0;
        if (!ok) {
            fprintf(stderr, "defaults: bad option or value: %s %s (see --help)\n", f, v ? v : "");
            return 2;
        }
        i++;
    }
    printf("# modern_fm %s: Criteo-shaped data (bench/synth.h), %d fields, planted rank %d, click rate %.2f; AdaGrad, binary,\n"
           "# early stopping on the validation rows (at most %d epochs, patience %d), %d thread(s), seed %" PRIu64 "%s.\n"
           "# test_ll and auc: the restored best epoch on the test rows; const: the training click rate's logloss there.\n"
           "#   rows  features zipf  sig  model k     lr   init      l2 iscale batch rule   ep valid_ll test_ll    auc   const  vs_const   secs\n",
           mfm_version_string(), o.fields, o.hidden_k, o.base_rate, o.epochs, o.patience, o.threads, o.seed, o.normalize ? ", rows normalized" : ", values as given");
    for (a[0] = 0; a[0] < o.rows.n; a[0]++)
        for (a[1] = 0; a[1] < o.features.n; a[1]++)
            for (a[2] = 0; a[2] < o.zipf.n; a[2]++)
                for (a[3] = 0; a[3] < o.signal.n; a[3]++) {
                    const double shape[4] = {o.rows.v[a[0]], o.features.v[a[1]], o.zipf.v[a[2]], o.signal.v[a[3]]};
                    const uint64_t n_train = (uint64_t)shape[0], n_valid = n_train / 2, n_test = n_train < 200000 ? n_train : 200000;
                    synth_spec s;
                    synth_data all, tr, va, te;
                    double const_ll;
                    memset(&s, 0, sizeof s);
                    s.n_rows = n_train + n_valid + n_test;
                    s.n_fields = (uint32_t)o.fields;
                    s.n_features = (uint32_t)shape[1];
                    s.per_field = 1;
                    s.zipf_s = shape[2];
                    s.hidden_k = o.hidden_k;
                    s.signal = shape[3];
                    s.base_rate = o.base_rate;
                    s.seed = o.seed + 1000;
                    if (synth_generate(&s, &all) != 0 || synth_split(&all, 0, n_train, &tr) != 0 ||
                        synth_split(&all, n_train, n_train + n_valid, &va) != 0 || synth_split(&all, n_train + n_valid, all.n_rows, &te) != 0) {
                        fprintf(stderr, "defaults: could not generate %.0f rows of %.0f features (bad shape or out of memory)\n", shape[0], shape[1]);
                        return 1;
                    }
                    synth_free(&all);
                    const_ll = constant_logloss(&tr, &te);
                    if (o.write_dir) write_split(&o, shape, &tr, "train"), write_split(&o, shape, &va, "valid"), write_split(&o, shape, &te, "test");
                    for (a[4] = 0; a[4] < o.models.n; a[4]++)
                        for (a[5] = 0; a[5] < o.k.n; a[5]++)
                            for (a[6] = 0; a[6] < o.init.n; a[6]++)
                                for (a[7] = 0; a[7] < o.lr.n; a[7]++)
                                    for (a[8] = 0; a[8] < o.l2.n; a[8]++)
                                        for (a[9] = 0; a[9] < o.init_scale.n; a[9]++)
                                            for (a[10] = 0; a[10] < o.batch.n; a[10]++)
                                                for (a[11] = 0; a[11] < o.rule.n; a[11]++) {
                                                    const int batch = (int)o.batch.v[a[10]], rule = (int)o.rule.v[a[11]];
                                                    if (batch == 1 && rule != RULE_NONE && o.rule.n > 1) continue; /* the same run as none */
                                                    run_setting(&o, shape, &tr, &va, &te, const_ll, (int)o.models.v[a[4]], (int)o.k.v[a[5]],
                                                                o.lr.v[a[7]], o.init.v[a[6]], o.l2.v[a[8]], o.init_scale.v[a[9]], batch, rule);
                                                }
                    synth_free(&tr), synth_free(&va), synth_free(&te);
                }
    return 0;
}
