/* ref.c - the independent reference and the shared fixtures (see ref.h). */
#include "ref.h"

#include "runner.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ============================== random numbers ============================== */

uint64_t rng_next(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

double rng_uniform(uint64_t *state, double lo, double hi) {
    return lo + (hi - lo) * ((double)(rng_next(state) >> 11) * (1.0 / 9007199254740992.0));
}

uint32_t rng_below(uint64_t *state, uint32_t n) { return (uint32_t)(rng_next(state) % n); }

/* ============================== the reference model ============================== */

static void *xcalloc(size_t count, size_t size) {
    void *p = calloc(count ? count : 1, size);
    if (!p) abort(); /* the tests have no use for running on without memory */
    return p;
}

void ref_load(ref_model *r, const mfm_model *m) {
    mfm_model_info info;
    int s, t;
    uint32_t c;
    memset(r, 0, sizeof *r);
    mfm_model_get_info(m, &info);
    r->model = info.model;
    r->task = info.task;
    r->n_features = info.n_features;
    r->n_fields = info.n_fields;
    r->n_classes = info.n_classes;
    r->k = info.k;
    r->linear_only = mfm_model_params(m)->linear_only;
    r->normalize_rows = mfm_model_params(m)->normalize_rows > 0;
    r->n_slots = 1 + info.n_state_slots;
    for (t = 0; t < MFM_TENSOR_COUNT; t++) r->size[t] = mfm_tensor_size(m, (mfm_tensor)t);
    for (s = 0; s < r->n_slots; s++)
        for (t = 0; t < MFM_TENSOR_COUNT; t++) {
            size_t n = r->size[t], i;
            float *buf = (float *)xcalloc(n, sizeof(float));
            r->t[s][t] = (double *)xcalloc(n * r->n_classes, sizeof(double));
            for (c = 0; c < r->n_classes && n; c++) { /* a slot may hold fewer (row-wise AdaGrad: one a vector) */
                const size_t count = mfm_tensor_slot_size(m, (mfm_tensor)t, s);
                mfm_status st = mfm_model_get_tensor(m, (mfm_tensor)t, s, c, buf, count, NULL);
                CHECK(st == MFM_OK, "mfm_model_get_tensor(tensor %d, slot %d, class %u) failed with status %d", t, s, (unsigned)c, (int)st);
                for (i = 0; i < count; i++) r->t[s][t][c * n + i] = buf[i];
            }
            free(buf);
        }
}

void ref_copy(ref_model *dst, const ref_model *src) {
    int s, t;
    *dst = *src;
    for (s = 0; s < src->n_slots; s++)
        for (t = 0; t < MFM_TENSOR_COUNT; t++) {
            size_t n = src->size[t] * src->n_classes;
            dst->t[s][t] = (double *)xcalloc(n, sizeof(double));
            if (n) memcpy(dst->t[s][t], src->t[s][t], n * sizeof(double));
        }
}

void ref_free(ref_model *r) {
    int s, t;
    for (s = 0; s < REF_MAX_SLOTS; s++)
        for (t = 0; t < MFM_TENSOR_COUNT; t++) free(r->t[s][t]);
    memset(r, 0, sizeof *r);
}

static double value_at(const mfm_csr *d, uint64_t j) { return d->values ? (double)d->values[j] : 1.0; }

/* What every value of the row is multiplied by: 1 / sqrt(sum x^2) under normalize_rows, else 1. */
static double row_scale(const ref_model *r, const mfm_csr *d, uint64_t row) {
    double squares = 0;
    uint64_t a;
    if (!r->normalize_rows) return 1;
    for (a = d->row_offsets[row]; a < d->row_offsets[row + 1]; a++) squares += value_at(d, a) * value_at(d, a);
    return squares > 0 ? 1 / sqrt(squares) : 1;
}

double ref_score(const ref_model *r, uint32_t cls, const mfm_csr *d, uint64_t row) {
    const uint64_t lo = d->row_offsets[row], hi = d->row_offsets[row + 1];
    const uint32_t F = r->n_fields;
    const int k = r->k;
    const double *w = r->t[0][MFM_TENSOR_W] + cls * r->size[MFM_TENSOR_W];
    const double *V = r->t[0][MFM_TENSOR_V] + cls * r->size[MFM_TENSOR_V];
    const double *R = r->t[0][MFM_TENSOR_R] + cls * r->size[MFM_TENSOR_R];
    const double x = row_scale(r, d, row);
    double s = r->t[0][MFM_TENSOR_W0][cls];
    uint64_t a, b;
    int t;
    for (a = lo; a < hi; a++) s += w[d->features[a]] * value_at(d, a) * x;
    if (r->linear_only) return s;
    for (a = lo; a < hi; a++)
        for (b = a + 1; b < hi; b++) {
            const uint32_t i = d->features[a], j = d->features[b];
            const double *va, *vb;
            double coef = 1, dot = 0;
            if (r->model == MFM_MODEL_FFM) {
                va = V + ((size_t)i * F + d->fields[b]) * k; /* V[i, f_j] */
                vb = V + ((size_t)j * F + d->fields[a]) * k; /* V[j, f_i] */
            } else {
                va = V + (size_t)i * k;
                vb = V + (size_t)j * k;
                if (r->model == MFM_MODEL_FWFM) {
                    uint32_t fa = d->fields[a], fb = d->fields[b];
                    coef = fa < fb ? R[(size_t)fa * F + fb] : R[(size_t)fb * F + fa];
                }
            }
            for (t = 0; t < k; t++) dot += va[t] * vb[t];
            s += coef * dot * value_at(d, a) * x * value_at(d, b) * x;
        }
    return s;
}

double ref_sigmoid(double s) { return s >= 0 ? 1.0 / (1.0 + exp(-s)) : exp(s) / (1.0 + exp(s)); }

void ref_softmax(const double *s, uint32_t n, double *p) {
    double top = s[0], total = 0;
    uint32_t c;
    for (c = 1; c < n; c++)
        if (s[c] > top) top = s[c];
    for (c = 0; c < n; c++) total += (p[c] = exp(s[c] - top));
    for (c = 0; c < n; c++) p[c] /= total;
}

double ref_row_loss(const ref_model *r, const mfm_csr *d, uint64_t row, double eps) {
    const double y = d->labels[row];
    if (r->task == MFM_TASK_MULTICLASS) {
        const uint32_t C = r->n_classes;
        double s[64], top, total = 0, loss = 0;
        uint32_t c;
        for (c = 0; c < C; c++) s[c] = ref_score(r, c, d, row);
        top = s[0];
        for (c = 1; c < C; c++)
            if (s[c] > top) top = s[c];
        for (c = 0; c < C; c++) total += exp(s[c] - top);
        for (c = 0; c < C; c++) {
            double target = c == (uint32_t)y ? 1.0 - eps : eps / (C - 1);
            loss -= target * (s[c] - top - log(total));
        }
        return loss;
    } else {
        const double s = ref_score(r, 0, d, row);
        if (r->task == MFM_TASK_REGRESSION) return 0.5 * (s - y) * (s - y);
        {
            const double target = y * (1.0 - eps) + eps / 2;
            return (s > 0 ? s : 0) - s * target + log1p(exp(-fabs(s)));
        }
    }
}

static double batch_loss(const ref_model *r, const mfm_csr *d, const uint64_t *rows, size_t n_rows, const double *weights, double eps) {
    double total = 0;
    size_t q;
    for (q = 0; q < n_rows; q++) total += (weights ? weights[q] : 1.0) * ref_row_loss(r, d, rows[q], eps);
    return total;
}

void ref_fd_grad(ref_model *r, const mfm_csr *d, const uint64_t *rows, size_t n_rows, const double *weights, double eps,
                 double *grad[MFM_TENSOR_COUNT]) {
    int t;
    for (t = 0; t < MFM_TENSOR_COUNT; t++) {
        size_t n = r->size[t] * r->n_classes, i;
        grad[t] = (double *)xcalloc(n, sizeof(double));
        for (i = 0; i < n; i++) {
            double *theta = &r->t[0][t][i], keep = *theta, up, down;
            *theta = keep + REF_FD_STEP;
            up = batch_loss(r, d, rows, n_rows, weights, eps);
            *theta = keep - REF_FD_STEP;
            down = batch_loss(r, d, rows, n_rows, weights, eps);
            *theta = keep;
            grad[t][i] = (up - down) / (2 * REF_FD_STEP);
        }
    }
}

void ref_grad_free(double *grad[MFM_TENSOR_COUNT]) {
    int t;
    for (t = 0; t < MFM_TENSOR_COUNT; t++) {
        free(grad[t]);
        grad[t] = NULL;
    }
}

void ref_touched(const ref_model *r, const mfm_csr *d, const uint64_t *rows, size_t n_rows, unsigned char *mask[MFM_TENSOR_COUNT]) {
    const uint32_t F = r->n_fields;
    const int k = r->k;
    size_t q;
    int t;
    for (t = 0; t < MFM_TENSOR_COUNT; t++) mask[t] = (unsigned char *)xcalloc(r->size[t], 1);
    mask[MFM_TENSOR_W0][0] = 1; /* always */
    for (q = 0; q < n_rows; q++) {
        const uint64_t lo = d->row_offsets[rows[q]], hi = d->row_offsets[rows[q] + 1];
        uint64_t a, b;
        for (a = lo; a < hi; a++) {
            mask[MFM_TENSOR_W][d->features[a]] = 1;
            if (!r->linear_only && r->model != MFM_MODEL_FFM) /* FM, FwFM: all k factors of a present feature */
                memset(mask[MFM_TENSOR_V] + (size_t)d->features[a] * k, 1, (size_t)k);
        }
        if (r->linear_only) continue;
        for (a = lo; a < hi; a++)
            for (b = a + 1; b < hi; b++) {
                const uint32_t fa = r->model == MFM_MODEL_FM ? 0 : d->fields[a], fb = r->model == MFM_MODEL_FM ? 0 : d->fields[b];
                if (r->model == MFM_MODEL_FFM) { /* slots (i, f_j) and (j, f_i) */
                    memset(mask[MFM_TENSOR_V] + ((size_t)d->features[a] * F + fb) * k, 1, (size_t)k);
                    memset(mask[MFM_TENSOR_V] + ((size_t)d->features[b] * F + fa) * k, 1, (size_t)k);
                } else if (r->model == MFM_MODEL_FWFM) {
                    mask[MFM_TENSOR_R][fa < fb ? (size_t)fa * F + fb : (size_t)fb * F + fa] = 1;
                }
            }
    }
}

void ref_mask_free(unsigned char *mask[MFM_TENSOR_COUNT]) {
    int t;
    for (t = 0; t < MFM_TENSOR_COUNT; t++) {
        free(mask[t]);
        mask[t] = NULL;
    }
}

/* ============================== optimizers ============================== */

ref_opt ref_opt_from_params(const mfm_params *p) {
    ref_opt o;
    memset(&o, 0, sizeof o);
    o.kind = p->optimizer == MFM_OPTIMIZER_DEFAULT ? MFM_OPTIMIZER_ADAGRAD : p->optimizer;
    o.lr = p->learning_rate != 0 ? p->learning_rate : 0.05;
    o.beta1 = p->adam_beta1 != 0 ? p->adam_beta1 : 0.9;
    o.beta2 = p->adam_beta2 != 0 ? p->adam_beta2 : 0.999;
    o.eps = p->adam_epsilon != 0 ? p->adam_epsilon : 1e-8;
    o.ftrl_beta = p->ftrl_beta != 0 ? p->ftrl_beta : 1.0;
    o.l1[MFM_TENSOR_W] = p->l1_linear;
    o.l2[MFM_TENSOR_W] = p->l2_linear;
    o.l1[MFM_TENSOR_V] = o.l1[MFM_TENSOR_R] = p->l1_factors;
    o.l2[MFM_TENSOR_V] = o.l2[MFM_TENSOR_R] = p->l2_factors;
    o.linear_line = (o.kind == MFM_OPTIMIZER_ADAGRAD || o.kind == MFM_OPTIMIZER_ROWWISE_ADAGRAD) && p->batch_size > 1 && !p->pairs_only;
    return o; /* W0: l1 = l2 = 0, never regularized */
}

void ref_opt_step(const ref_opt *o, double *theta, double *s1, double *s2, double *s3, double g, double l1, double l2) {
    switch (o->kind) {
    case MFM_OPTIMIZER_SGD:
        *theta -= o->lr * (g + l2 * *theta);
        break;
    case MFM_OPTIMIZER_ADAGRAD:
    case MFM_OPTIMIZER_ROWWISE_ADAGRAD: { /* s1 = G; row-wise on one coordinate (w0, w, r) is AdaGrad (ref_rowwise_vector: V) */
        double gp = g + l2 * *theta;
        *s1 += gp * gp;
        *theta -= o->lr * gp / sqrt(*s1 + 1e-10);
        break;
    }
    case MFM_OPTIMIZER_ADAM: { /* s1 = m, s2 = v, s3 = t */
        double gp = g + l2 * *theta;
        *s3 += 1;
        *s1 = o->beta1 * *s1 + (1 - o->beta1) * gp;
        *s2 = o->beta2 * *s2 + (1 - o->beta2) * gp * gp;
        *theta -= o->lr * (*s1 / (1 - pow(o->beta1, *s3))) / (sqrt(*s2 / (1 - pow(o->beta2, *s3))) + o->eps);
        break;
    }
    case MFM_OPTIMIZER_FTRL: { /* s1 = z, s2 = n; pure data gradient */
        double n_new = *s2 + g * g, sigma = (sqrt(n_new) - sqrt(*s2)) / o->lr;
        *s1 += g - sigma * *theta;
        *s2 = n_new;
        if (fabs(*s1) <= l1)
            *theta = 0;
        else
            *theta = -(*s1 - (*s1 < 0 ? -l1 : l1)) / ((o->ftrl_beta + sqrt(n_new)) / o->lr + l2);
        break;
    }
    default:
        break;
    }
}

double ref_last_alpha;

/* The batch's loss with the linear terms (W0, W) at start + alpha * step and the rest at start. */
static double loss_along(const ref_model *start, ref_model *trial, double *const step[MFM_TENSOR_COUNT], double alpha, const mfm_csr *d,
                         const uint64_t *rows, size_t n_rows, const double *weights, double eps) {
    int t;
    size_t i;
    for (t = MFM_TENSOR_W0; t <= MFM_TENSOR_W; t++)
        for (i = 0; i < start->size[t] * start->n_classes; i++) trial->t[0][t][i] = start->t[0][t][i] + alpha * step[t][i];
    return batch_loss(trial, d, rows, n_rows, weights, eps);
}

/* Section 5, AdaGrad at batch_size > 1: the linear terms' accumulator adds the squares of the
   batch's terms (row weight * dL/ds, found by finite differences in w0 on the row alone, times
   the value), but at least the square of their sum over 32, and the batch takes the fraction alpha = min(1, -f'(0) / f''(0)) of their steps,
   f(alpha) the batch's loss with the linear terms at start + alpha step and everything else as the
   batch found it (one Newton step; 1 where f does not fall at 0). r holds the other tensors'
   steps already; start is r as the batch found it. */
static void linear_line_steps(ref_model *r, const ref_model *start, const ref_opt *o, const mfm_csr *d, const uint64_t *rows, size_t n_rows,
                              const double *weights, double eps, double *const grad[MFM_TENSOR_COUNT], unsigned char *const mask[MFM_TENSOR_COUNT]) {
    const uint32_t C = r->n_classes;
    double *squares[MFM_TENSOR_COUNT] = {NULL, NULL, NULL, NULL}, *step[MFM_TENSOR_COUNT] = {NULL, NULL, NULL, NULL};
    double alpha = 1;
    ref_model trial;
    size_t q, i;
    uint32_t c;
    int t;
    ref_copy(&trial, start);
    for (t = MFM_TENSOR_W0; t <= MFM_TENSOR_W; t++) {
        squares[t] = (double *)xcalloc(r->size[t] * C, sizeof(double));
        step[t] = (double *)xcalloc(r->size[t] * C, sizeof(double));
    }
    for (q = 0; q < n_rows; q++)
        for (c = 0; c < C; c++) { /* the row's weight * dL/ds of class c: its loss's slope in w0 */
            double *w0 = &trial.t[0][MFM_TENSOR_W0][c], keep = *w0, up, down, g;
            const double wq = weights ? weights[q] : 1.0, x = row_scale(r, d, rows[q]);
            uint64_t a;
            *w0 = keep + REF_FD_STEP;
            up = ref_row_loss(&trial, d, rows[q], eps);
            *w0 = keep - REF_FD_STEP;
            down = ref_row_loss(&trial, d, rows[q], eps);
            *w0 = keep;
            g = wq * (up - down) / (2 * REF_FD_STEP);
            squares[MFM_TENSOR_W0][c] += g * g;
            for (a = d->row_offsets[rows[q]]; a < d->row_offsets[rows[q] + 1]; a++) {
                const double term = g * value_at(d, a) * x;
                squares[MFM_TENSOR_W][c * r->size[MFM_TENSOR_W] + d->features[a]] += term * term;
            }
        }
    for (t = MFM_TENSOR_W0; t <= MFM_TENSOR_W; t++)
        for (i = 0; i < r->size[t] * C; i++) {
            double theta, gp, floor;
            if (!mask[t][i % r->size[t]]) continue;
            theta = start->t[0][t][i];
            gp = grad[t][i] + o->l2[t] * theta;
            floor = grad[t][i] * grad[t][i] / 32; /* at least the square of the sum over 32 rows */
            r->t[1][t][i] += (squares[t][i] > floor ? squares[t][i] : floor) + (o->l2[t] * theta) * (o->l2[t] * theta);
            step[t][i] = -o->lr * gp / sqrt(r->t[1][t][i] + 1e-10);
        }
    { /* one Newton step on the batch's loss f(alpha) along the steps, its derivatives by central differences */
        const double h = 1e-4, f0 = loss_along(start, &trial, step, 0, d, rows, n_rows, weights, eps);
        const double up = loss_along(start, &trial, step, h, d, rows, n_rows, weights, eps), down = loss_along(start, &trial, step, -h, d, rows, n_rows, weights, eps);
        const double slope = (up - down) / (2 * h), curvature = (up - 2 * f0 + down) / (h * h);
        if (slope < 0 && curvature > 0 && -slope < curvature) alpha = -slope / curvature;
    }
    ref_last_alpha = alpha;
    for (t = MFM_TENSOR_W0; t <= MFM_TENSOR_W; t++) {
        for (i = 0; i < r->size[t] * C; i++)
            if (mask[t][i % r->size[t]]) r->t[0][t][i] = start->t[0][t][i] + alpha * step[t][i];
        free(squares[t]);
        free(step[t]);
    }
    ref_free(&trial);
}

/* What a batch of n rows divides its gradient sums by: their count (the mean), AdaGrad's 1
   (the sum; docs/SPEC.md section 12). */
static double batch_divisor(const ref_opt *o, size_t n) {
    return o->kind == MFM_OPTIMIZER_ADAGRAD || o->kind == MFM_OPTIMIZER_ROWWISE_ADAGRAD ? 1.0 : (double)n;
}

/* Row-wise AdaGrad on class c's vectors of V (k values each; the state slot holds one value a
   vector, at the vector's index): g' = g + l2 theta, G += the mean of the k squares, every
   value steps by lr g' / sqrt(G + 1e-10). grad: the batch's gradient sums (AdaGrad's divisor: 1). */
static void rowwise_vectors(ref_model *r, const ref_opt *o, uint32_t c, const double *grad, const unsigned char *mask) {
    const size_t k = (size_t)r->k, n = r->size[MFM_TENSOR_V], at = c * n;
    size_t v, i;
    if (!CHECK(k <= 64, "the reference's row-wise AdaGrad takes k up to 64, not %zu", k)) return;
    for (v = 0; v < n / k; v++) {
        double *theta = &r->t[0][MFM_TENSOR_V][at + v * k], *G = &r->t[1][MFM_TENSOR_V][at + v], squares = 0, gp[64];
        if (!mask[v * k]) continue;
        for (i = 0; i < k; i++) {
            gp[i] = grad[at + v * k + i] + o->l2[MFM_TENSOR_V] * theta[i];
            squares += gp[i] * gp[i];
        }
        *G += squares / (double)k;
        for (i = 0; i < k; i++) theta[i] -= o->lr * gp[i] / sqrt(*G + 1e-10);
    }
}

void ref_apply_batch(ref_model *r, const ref_opt *o, const mfm_csr *d, const uint64_t *rows, size_t n_rows, const double *weights,
                     double eps) {
    double *grad[MFM_TENSOR_COUNT];
    unsigned char *mask[MFM_TENSOR_COUNT];
    ref_model start;
    int t;
    uint32_t c;
    ref_fd_grad(r, d, rows, n_rows, weights, eps, grad); /* against the parameters at batch start */
    ref_touched(r, d, rows, n_rows, mask);
    ref_copy(&start, r);
    for (t = 0; t < MFM_TENSOR_COUNT; t++)
        for (c = 0; c < r->n_classes; c++) {
            size_t i;
            if (o->linear_line && t <= MFM_TENSOR_W) continue;
            if (o->kind == MFM_OPTIMIZER_ROWWISE_ADAGRAD && t == MFM_TENSOR_V) {
                rowwise_vectors(r, o, c, grad[t], mask[t]);
                continue;
            }
            for (i = 0; i < r->size[t]; i++) {
                size_t at = c * r->size[t] + i;
                double *state[REF_MAX_SLOTS] = {NULL, NULL, NULL, NULL};
                int s;
                if (!mask[t][i]) continue;
                for (s = 1; s < r->n_slots; s++) state[s] = &r->t[s][t][at];
                /* the batch's mean gradient; AdaGrad's sum (docs/SPEC.md section 12) */
                ref_opt_step(o, &r->t[0][t][at], state[1], state[2], state[3], grad[t][at] / batch_divisor(o, n_rows), o->l1[t], o->l2[t]);
            }
        }
    if (o->linear_line) linear_line_steps(r, &start, o, d, rows, n_rows, weights, eps, grad, mask);
    ref_free(&start);
    ref_grad_free(grad);
    ref_mask_free(mask);
}

void ref_rows_holding_r(ref_model *r, const ref_opt *o, const mfm_csr *d, const uint64_t *rows, size_t n_rows, size_t hold, int pairs_only) {
    const size_t nr = r->size[MFM_TENSOR_R] * r->n_classes;
    double *sum = (double *)xcalloc(nr, sizeof(double));
    unsigned char *seen = (unsigned char *)xcalloc(nr, 1);
    size_t q, i, held = 0;
    int s, t;
    for (q = 0; q < n_rows; q++) {
        double *grad[MFM_TENSOR_COUNT];
        unsigned char *mask[MFM_TENSOR_COUNT];
        ref_model kept;
        ref_fd_grad(r, d, rows + q, 1, NULL, 0, grad);
        ref_touched(r, d, rows + q, 1, mask);
        ref_copy(&kept, r);
        ref_apply_batch(r, o, d, rows + q, 1, NULL, 0);
        for (t = 0; t < MFM_TENSOR_COUNT; t++) /* R (and with pairs_only w0 and w) as they were */
            if (t == MFM_TENSOR_R || (pairs_only && t <= MFM_TENSOR_W))
                for (s = 0; s < r->n_slots; s++) memcpy(r->t[s][t], kept.t[s][t], r->size[t] * r->n_classes * sizeof(double));
        for (i = 0; i < nr; i++)
            if (mask[MFM_TENSOR_R][i % r->size[MFM_TENSOR_R]]) sum[i] += grad[MFM_TENSOR_R][i], seen[i] = 1;
        ref_free(&kept);
        ref_grad_free(grad);
        ref_mask_free(mask);
        if (++held < hold && q + 1 < n_rows) continue;
        for (i = 0; i < nr; i++) {
            double *state[REF_MAX_SLOTS] = {NULL, NULL, NULL, NULL};
            if (!seen[i]) continue;
            for (s = 1; s < r->n_slots; s++) state[s] = &r->t[s][MFM_TENSOR_R][i];
            ref_opt_step(o, &r->t[0][MFM_TENSOR_R][i], state[1], state[2], state[3], sum[i] / batch_divisor(o, held), o->l1[MFM_TENSOR_R], o->l2[MFM_TENSOR_R]);
            sum[i] = 0, seen[i] = 0;
        }
        held = 0;
    }
    free(sum);
    free(seen);
}

void ref_row_weights(const mfm_csr *d, const mfm_params *p, uint32_t n_classes, double *out) {
    const int binary = p->task == MFM_TASK_DEFAULT || p->task == MFM_TASK_BINARY;
    const uint32_t C = binary ? 2 : n_classes;
    double class_weight[64];
    uint64_t count[64], r;
    uint32_t c;
    for (c = 0; c < 64; c++) {
        class_weight[c] = 1;
        count[c] = 0;
    }
    if (p->task != MFM_TASK_REGRESSION) {
        for (r = 0; r < d->n_rows; r++) count[(uint32_t)d->labels[r]]++;
        for (c = 0; c < C; c++) {
            if (p->class_weight == MFM_CLASS_WEIGHT_BALANCED)
                class_weight[c] = (double)d->n_rows / ((double)C * (double)(count[c] ? count[c] : 1));
            else if (p->class_weight == MFM_CLASS_WEIGHT_EXPLICIT)
                class_weight[c] = p->class_weights[c];
        }
    }
    for (r = 0; r < d->n_rows; r++) {
        double w = d->weights ? (double)d->weights[r] : 1.0;
        out[r] = p->task == MFM_TASK_REGRESSION ? w : w * class_weight[(uint32_t)d->labels[r]];
    }
}

/* ============================== comparing ============================== */

static const char *tensor_name(int t) { return t == MFM_TENSOR_W0 ? "W0" : t == MFM_TENSOR_W ? "W" : t == MFM_TENSOR_V ? "V" : "R"; }

int check_model(const mfm_model *m, const ref_model *expected, const ref_model *base, unsigned char *const *mask, double rtol,
                double atol, const char *what) {
    int s, t, bad = 0;
    uint32_t c;
    for (s = 0; s < expected->n_slots; s++)
        for (t = 0; t < MFM_TENSOR_COUNT; t++) {
            const size_t n = expected->size[t], count = mfm_tensor_slot_size(m, (mfm_tensor)t, s);
            size_t i;
            float *got = (float *)xcalloc(n, sizeof(float));
            for (c = 0; c < expected->n_classes && n; c++) {
                if (mfm_model_get_tensor(m, (mfm_tensor)t, s, c, got, count, NULL) != MFM_OK) {
                    runner_fail(__FILE__, __LINE__, "%s: mfm_model_get_tensor(%s, slot %d, class %u) failed", what, tensor_name(t), s, (unsigned)c);
                    bad++;
                    continue;
                }
                for (i = 0; i < count; i++) { /* a vector's one value (count < n): the vector's mask */
                    const double want = expected->t[s][t][c * n + i];
                    const double scale = base ? fabs(want - base->t[s][t][c * n + i]) : fabs(want);
                    const int untouched = mask && !mask[t][count < n ? i * (n / count) : i];
                    const double diff = fabs((double)got[i] - want);
                    if (untouched ? (double)got[i] != want : !(diff <= atol + rtol * scale)) {
                        bad++;
                        runner_fail(__FILE__, __LINE__, "%s: %s[%zu] slot %d class %u%s: got %.9g, expected %.9g (diff %.3g)", what, tensor_name(t), i,
                                    s, (unsigned)c, untouched ? " (untouched: must not move)" : "", (double)got[i], want, diff);
                    }
                }
            }
            free(got);
        }
    return bad;
}

void snapshot_take(snapshot *sn, const mfm_model *m) {
    mfm_model_info info;
    size_t total = 0, at = 0;
    int s, t;
    uint32_t c;
    mfm_model_get_info(m, &info);
    for (s = 0; s <= info.n_state_slots; s++)
        for (t = 0; t < MFM_TENSOR_COUNT; t++) total += mfm_tensor_slot_size(m, (mfm_tensor)t, s) * info.n_classes;
    sn->n = total;
    sn->data = (float *)xcalloc(total, sizeof(float));
    for (s = 0; s <= info.n_state_slots; s++)
        for (t = 0; t < MFM_TENSOR_COUNT; t++) {
            size_t n = mfm_tensor_slot_size(m, (mfm_tensor)t, s);
            for (c = 0; c < info.n_classes && n; c++, at += n)
                CHECK(mfm_model_get_tensor(m, (mfm_tensor)t, s, c, sn->data + at, n, NULL) == MFM_OK, "snapshot: mfm_model_get_tensor failed");
        }
}

int snapshot_equal(const snapshot *a, const snapshot *b) { return a->n == b->n && memcmp(a->data, b->data, a->n * sizeof(float)) == 0; }

void snapshot_free(snapshot *sn) {
    free(sn->data);
    sn->data = NULL;
    sn->n = 0;
}

/* ============================== fixtures ============================== */

static void model_write_all(mfm_model *m, int slot, uint64_t *rng, double scale, float constant) {
    mfm_model_info info;
    int t;
    uint32_t c;
    mfm_model_get_info(m, &info);
    for (t = 0; t < MFM_TENSOR_COUNT; t++) {
        size_t n = mfm_tensor_slot_size(m, (mfm_tensor)t, slot), i;
        float *buf;
        if (!n) continue;
        buf = (float *)xcalloc(n, sizeof(float));
        for (c = 0; c < info.n_classes; c++) {
            for (i = 0; i < n; i++) buf[i] = rng ? (float)rng_uniform(rng, -scale, scale) : constant;
            CHECK(mfm_model_set_tensor(m, (mfm_tensor)t, slot, c, buf, n, NULL) == MFM_OK, "mfm_model_set_tensor(%s, slot %d) failed", tensor_name(t), slot);
        }
        free(buf);
    }
}

void model_randomize(mfm_model *m, uint64_t seed, double scale) { model_write_all(m, 0, &seed, scale, 0); }

void model_fill_slot(mfm_model *m, int slot, float value) { model_write_all(m, slot, NULL, 0, value); }

mfm_model *make_model(const mfm_params *p, uint32_t n_features, uint32_t n_fields, uint32_t n_classes) {
    mfm_model *m = NULL;
    mfm_error e;
    mfm_status st = mfm_model_create(p, n_features, n_fields, n_classes, &m, &e);
    if (!CHECK(st == MFM_OK && m, "mfm_model_create failed with status %d: %s", (int)st, st ? e.message : "")) return NULL;
    return m;
}

int predict(const mfm_model *m, const mfm_csr *d, mfm_output kind, float *out, size_t capacity) {
    mfm_error e;
    mfm_status st = mfm_predict(m, d, kind, out, capacity, &e);
    return CHECK(st == MFM_OK, "mfm_predict(kind %d) failed with status %d: %s", (int)kind, (int)st, st ? e.message : "");
}

mfm_params sgd_step_params(mfm_model_type model, mfm_task task, double lr) {
    mfm_params p;
    memset(&p, 0, sizeof p);
    p.model = model;
    p.task = task;
    p.optimizer = MFM_OPTIMIZER_SGD;
    p.n_epochs = 1;
    p.batch_size = 1;
    p.learning_rate = lr;
    p.l2_linear = p.l2_factors = MFM_ZERO; /* no regularization unless a test asks for it */
    p.adagrad_init = MFM_ZERO;
    p.normalize_rows = MFM_OFF; /* the values as given, so that a step can be worked out by hand */
    return p;
}

void one_row_init(one_row *r, int z, const uint32_t *features, const uint32_t *fields, const float *values, float label) {
    int a;
    memset(r, 0, sizeof *r);
    r->offsets[1] = (uint64_t)z;
    for (a = 0; a < z; a++) {
        r->features[a] = features[a];
        r->fields[a] = fields ? fields[a] : 0;
        r->values[a] = values ? values[a] : 1.0f;
    }
    r->label = label;
    r->weight = 1.0f;
    r->csr.n_rows = 1;
    r->csr.row_offsets = r->offsets;
    r->csr.features = r->features;
    r->csr.fields = fields ? r->fields : NULL;
    r->csr.values = values ? r->values : NULL;
    r->csr.labels = &r->label;
}

void data_random(test_data *td, const data_spec *spec) {
    uint64_t rng = spec->seed * 0x2545F4914F6CDD1Dull + 17, r, nnz = 0;
    memset(td, 0, sizeof *td);
    td->offsets = (uint64_t *)xcalloc(spec->n_rows + 1, sizeof(uint64_t));
    td->features = (uint32_t *)xcalloc(spec->n_rows * (uint64_t)spec->max_nnz, sizeof(uint32_t));
    td->fields = (uint32_t *)xcalloc(spec->n_rows * (uint64_t)spec->max_nnz, sizeof(uint32_t));
    if (spec->with_values) td->values = (float *)xcalloc(spec->n_rows * (uint64_t)spec->max_nnz, sizeof(float));
    td->labels = (float *)xcalloc(spec->n_rows, sizeof(float));
    if (spec->with_weights) td->weights = (float *)xcalloc(spec->n_rows, sizeof(float));
    for (r = 0; r < spec->n_rows; r++) {
        int z = spec->min_nnz + (int)rng_below(&rng, (uint32_t)(spec->max_nnz - spec->min_nnz + 1)), a, b;
        for (a = 0; a < z; a++) {
            uint32_t f;
            do { /* distinct features within the row */
                f = rng_below(&rng, spec->feature_range);
                for (b = 0; b < a && td->features[nnz + b] != f; b++) {}
            } while (b < a);
            td->features[nnz + a] = f;
            td->fields[nnz + a] = spec->n_fields ? rng_below(&rng, spec->n_fields) : 0;
            if (td->values) td->values[nnz + a] = (float)(rng_uniform(&rng, 0.5, 1.5) * (rng_below(&rng, 4) == 0 ? -1 : 1));
        }
        nnz += (uint64_t)z;
        td->offsets[r + 1] = nnz;
        if (spec->task == MFM_TASK_REGRESSION)
            td->labels[r] = (float)rng_uniform(&rng, -1, 2);
        else if (spec->task == MFM_TASK_MULTICLASS)
            td->labels[r] = (float)rng_below(&rng, spec->n_classes);
        else
            td->labels[r] = (float)rng_below(&rng, 2);
        if (td->weights) td->weights[r] = (float)rng_uniform(&rng, 0.5, 2.0);
    }
    td->csr.n_rows = spec->n_rows;
    td->csr.row_offsets = td->offsets;
    td->csr.features = td->features;
    td->csr.fields = spec->n_fields ? td->fields : NULL;
    td->csr.values = td->values;
    td->csr.labels = td->labels;
    td->csr.weights = td->weights;
}

void data_fields_in_order(test_data *td) {
    uint64_t r, j;
    for (r = 0; r < td->csr.n_rows; r++)
        for (j = td->offsets[r]; j < td->offsets[r + 1]; j++) td->fields[j] = (uint32_t)(j - td->offsets[r]);
}

void data_free(test_data *td) {
    free(td->offsets);
    free(td->features);
    free(td->fields);
    free(td->values);
    free(td->labels);
    free(td->weights);
    memset(td, 0, sizeof *td);
}

const char *model_name(mfm_model_type t) { return t == MFM_MODEL_FFM ? "FFM" : t == MFM_MODEL_FWFM ? "FwFM" : "FM"; }

static int word_char(char ch) { return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_'; }

int mentions_word(const char *msg, const char *words) {
    char word[64];
    while (*words) {
        size_t len = strcspn(words, "|");
        const char *p = msg;
        if (len >= sizeof word) len = sizeof word - 1;
        memcpy(word, words, len);
        word[len] = '\0';
        while (len && (p = strstr(p, word)) != NULL) {
            if ((p == msg || !word_char(p[-1])) && !word_char(p[len])) return 1;
            p++;
        }
        words += len;
        if (*words == '|') words++;
    }
    return 0;
}

mfm_csr csr_of(uint64_t n_rows, const uint64_t *offsets, const uint32_t *features, const uint32_t *fields, const float *values, const float *labels) {
    mfm_csr d;
    memset(&d, 0, sizeof d);
    d.n_rows = n_rows;
    d.row_offsets = offsets;
    d.features = features;
    d.fields = fields;
    d.values = values;
    d.labels = labels;
    return d;
}
