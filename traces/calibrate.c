/* calibrate.c - the generator's parameters fitted to a recorded trace (deftsim_calibrate.h). */
#include "calibrate_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deftsim_util.h"

void deftsim_calib_opts_default(deftsim_calib_opts *o)
{
    o->tail_density = 0.01;
    o->signal_density = 0.001;
    o->scale_density = 0;
    o->from = -1;
    o->no_field = 0;
    o->no_size = 0;
}

/* ---- selection helpers -------------------------------------------------------------------- */

static void swapf(float *a, float *b)
{
    float t = *a;
    *a = *b;
    *b = t;
}

/* Rearranges a[0 .. n) so that a[j] holds the value sorted order puts there, everything before
 * it is <= and everything after >= (Hoare's selection with a median-of-three pivot). */
static void select_nth(float *a, size_t n, size_t j)
{
    size_t lo = 0, hi = n - 1;
    while (hi > lo) {
        size_t mid = lo + (hi - lo) / 2;
        if (a[mid] < a[lo]) swapf(&a[mid], &a[lo]);
        if (a[hi] < a[lo]) swapf(&a[hi], &a[lo]);
        if (a[hi] < a[mid]) swapf(&a[hi], &a[mid]);
        float pivot = a[mid];
        size_t i = lo, k = hi;
        while (i <= k) {
            while (a[i] < pivot) i++;
            while (a[k] > pivot) k--;
            if (i <= k) {
                swapf(&a[i], &a[k]);
                i++;
                if (k == 0) break;
                k--;
            }
        }
        if (j <= k) hi = k;
        else if (j >= i) lo = i;
        else return;
    }
}

/* |x| of n values into buf; the k-th largest becomes the threshold (returned) and buf[n-k ..
 * n) the k largest. *share (if not NULL): their part of the sum of squares. */
static float top_threshold(const float *x, size_t n, size_t k, float *buf, double *share)
{
    double total = 0;
    for (size_t i = 0; i < n; i++) {
        buf[i] = fabsf(x[i]);
        total += (double)buf[i] * buf[i];
    }
    select_nth(buf, n, n - k);
    if (share) {
        double top = 0;
        for (size_t i = n - k; i < n; i++) top += (double)buf[i] * buf[i];
        *share = total > 0 ? top / total : 0;
    }
    return buf[n - k];
}

/* |A & B| / k for A = {i: |a_i| >= ta} (> 0 when ta is 0: zeros are never picked). */
static double overlap(const float *a, float ta, const float *b, float tb, size_t n, size_t k)
{
    size_t both = 0;
    for (size_t i = 0; i < n; i++) {
        float u = fabsf(a[i]), v = fabsf(b[i]);
        both += (ta > 0 ? u >= ta : u > 0) && (tb > 0 ? v >= tb : v > 0);
    }
    return (double)both / (double)k;
}

/* ---- the generator's side of the tail and signal statistics ------------------------------- */

#define SIM_N (1u << 20)
#define SIM_W 4u
/* The density of the temporal statistic: one worker's top-1% sets at consecutive iterations. */
#define TEMPORAL_DENSITY 0.01

typedef struct {
    deftsim_model *model; /* one layer of SIM_N elements */
    float *g[SIM_W];      /* the workers at iteration 0 */
    float *next;          /* worker 0 at iteration 1 */
    float *buf;
} sim_ctx;

/* Element statistics of a tensor kind: the generator's parameters, and what they give. */
typedef struct {
    double signal, tail, field;
} elem_params;

typedef deftsim_calib_elem elem_stats;

static deftsim_status sim_open(sim_ctx *s)
{
    memset(s, 0, sizeof *s);
    char csv[128];
    snprintf(csv, sizeof csv, "index,name,shape,numel\n0,w,1024x1024,%u\n", SIM_N);
    deftsim_status st = deftsim_model_parse_csv(csv, strlen(csv), "calibrate", "one_layer",
                                                &s->model);
    if (st) return st;
    for (unsigned w = 0; w < SIM_W; w++)
        if (!(s->g[w] = malloc(SIM_N * sizeof(float))))
            return deftsim_error_nomem("calibrate");
    if (!(s->buf = malloc(SIM_N * sizeof(float))) || !(s->next = malloc(SIM_N * sizeof(float))))
        return deftsim_error_nomem("calibrate");
    return DEFTSIM_OK;
}

static void sim_close(sim_ctx *s)
{
    deftsim_model_free(s->model);
    for (unsigned w = 0; w < SIM_W; w++) free(s->g[w]);
    free(s->buf);
    free(s->next);
}

/* The generator's statistics for one layer with these element parameters: the top share at
 * tail_d (mean over the workers), the per-tensor overlap at signal_d (mean over the pairs of
 * SIM_W workers) and worker 0's temporal overlap between iterations 0 and 1; *q_unit (if
 * scale_d > 0): the threshold of its top scale_d fraction at unit scale (mean over the
 * workers). */
static deftsim_status sim_stats_q(sim_ctx *s, const elem_params *e, const deftsim_calib_opts *o,
                                  double scale_d, elem_stats *out, double *q_unit)
{
    deftsim_gen_params p;
    deftsim_gen_params_default(&p);
    p.signal = e->signal;
    p.tail = e->tail;
    p.field = e->field;
    p.drift = 0;
    deftsim_gen *g;
    deftsim_status st = deftsim_gen_new(s->model, &p, &g);
    if (st) return st;
    st = deftsim_gen_fill_workers(g, 0, 0, SIM_W, 0, SIM_N, s->g);
    if (!st) st = deftsim_gen_fill(g, 1, 0, 0, SIM_N, s->next);
    double unit = deftsim_gen_layer_scale(g, 0, 0);
    deftsim_gen_free(g);
    if (st) return st;
    if (q_unit) {
        size_t kq = (size_t)ceil(scale_d * SIM_N);
        *q_unit = 0;
        for (unsigned w = 0; w < SIM_W; w++)
            *q_unit += top_threshold(s->g[w], SIM_N, kq, s->buf, NULL) / unit / SIM_W;
    }
    size_t kt = (size_t)ceil(o->tail_density * SIM_N), ks = (size_t)ceil(o->signal_density * SIM_N);
    size_t kp = (size_t)ceil(TEMPORAL_DENSITY * SIM_N);
    double sh = 0, one;
    float thr[SIM_W];
    for (unsigned w = 0; w < SIM_W; w++) {
        top_threshold(s->g[w], SIM_N, kt, s->buf, &one);
        sh += one / SIM_W;
        thr[w] = top_threshold(s->g[w], SIM_N, ks, s->buf, NULL);
    }
    double ov = 0;
    unsigned pairs = 0;
    for (unsigned a = 0; a < SIM_W; a++)
        for (unsigned b = a + 1; b < SIM_W; b++, pairs++)
            ov += overlap(s->g[a], thr[a], s->g[b], thr[b], SIM_N, ks);
    float t0 = top_threshold(s->g[0], SIM_N, kp, s->buf, NULL);
    float t1 = top_threshold(s->next, SIM_N, kp, s->buf, NULL);
    out->share = sh;
    out->ovl = ov / pairs;
    out->temporal = overlap(s->g[0], t0, s->next, t1, SIM_N, kp);
    return DEFTSIM_OK;
}

static deftsim_status sim_stats(sim_ctx *s, const elem_params *e, const deftsim_calib_opts *o,
                                elem_stats *out)
{
    return sim_stats_q(s, e, o, 0, out, NULL);
}

/* One of e's parameters (which: 0 tail, log-bisected in [2.05, 1000]; 1 signal, in [0, 1]; 2
 * field, in [0, 6]) bisected until its statistic (share, overlap, temporal overlap) matches
 * target; the others stay. A heavier tail raises the share; more signal the overlap; a wider
 * field the temporal overlap. */
static deftsim_status fit_one(sim_ctx *s, const deftsim_calib_opts *o, int which, double target,
                              elem_params *e)
{
    double lo = which == 0 ? log(2.05) : 0, hi = which == 0 ? log(1000.0) : which == 1 ? 1 : 6;
    int steps = which == 0 ? 18 : which == 1 ? 16 : 14;
    elem_stats got;
    deftsim_status st;
    if (which == 2) { /* no field when none already reaches the target */
        e->field = 0;
        if ((st = sim_stats(s, e, o, &got))) return st;
        if (got.temporal >= target) return DEFTSIM_OK;
    }
    for (int i = 0; i < steps; i++) {
        double mid = 0.5 * (lo + hi);
        double *v = which == 0 ? &e->tail : which == 1 ? &e->signal : &e->field;
        *v = which == 0 ? exp(mid) : mid;
        if ((st = sim_stats(s, e, o, &got))) return st;
        double stat = which == 0 ? got.share : which == 1 ? got.ovl : got.temporal;
        int raise = which == 0 ? stat > target : stat < target; /* tail: more dof lowers it */
        if (raise) lo = mid;
        else hi = mid;
    }
    double mid = 0.5 * (lo + hi);
    if (which == 0) e->tail = exp(mid);
    else if (which == 1) e->signal = mid;
    else e->field = mid;
    return DEFTSIM_OK;
}

/* Tail and signal fitted to target (two rounds) with the field fixed at field. */
static deftsim_status fit_elements_given_field(sim_ctx *s, const deftsim_calib_opts *o,
                                               const elem_stats *target, double field,
                                               elem_params *e, elem_stats *got)
{
    e->signal = DEFTSIM_GEN_DEFAULT_SIGNAL;
    e->tail = DEFTSIM_GEN_DEFAULT_TAIL;
    e->field = field;
    deftsim_status st = DEFTSIM_OK;
    for (int round = 0; round < 2 && !st; round++)
        if (!(st = fit_one(s, o, 0, target->share, e))) st = fit_one(s, o, 1, target->ovl, e);
    return st ? st : sim_stats(s, e, o, got);
}

/* Tail, signal and (with_field) field fitted to target, each given the others, in turns (two
 * rounds, three with the field); *got: what the result gives. */
static deftsim_status fit_elements(sim_ctx *s, const deftsim_calib_opts *o,
                                   const elem_stats *target, int with_field, elem_params *e,
                                   elem_stats *got)
{
    e->signal = DEFTSIM_GEN_DEFAULT_SIGNAL;
    e->tail = DEFTSIM_GEN_DEFAULT_TAIL;
    e->field = 0;
    deftsim_status st = DEFTSIM_OK;
    for (int round = 0; round < (with_field ? 3 : 2) && !st; round++) {
        if (!(st = fit_one(s, o, 0, target->share, e)) &&
            !(st = fit_one(s, o, 1, target->ovl, e)) && with_field)
            st = fit_one(s, o, 2, target->temporal, e);
    }
    if (!st) st = sim_stats(s, e, o, got);
    /* The field also makes the tail heavier. When the temporal overlap takes a field whose
     * top share even the lightest tail (1000 degrees of freedom) exceeds, the share wins: the
     * field narrows to the widest one that the lightest tail still matches, and the tail and
     * signal are fitted again (the temporal overlap then falls short). */
    if (!st && with_field && got->share > 1.02 * target->share) {
        elem_params f = *e;
        double lo = 0, hi = e->field;
        f.tail = 1000;
        for (int i = 0; i < 14 && !st; i++) {
            f.field = 0.5 * (lo + hi);
            if (!(st = sim_stats(s, &f, o, got))) {
                if (got->share > target->share) hi = f.field;
                else lo = f.field;
            }
        }
        e->field = lo;
        for (int round = 0; round < 2 && !st; round++)
            if (!(st = fit_one(s, o, 0, target->share, e))) st = fit_one(s, o, 1, target->ovl, e);
        if (!st) st = sim_stats(s, e, o, got);
    }
    return st;
}

/* The generator's mean |change of ln s_L| over `gap` iterations per unit of drift: 512 layers,
 * 8 starting iterations (its layer scales are exactly proportional to drift). */
static deftsim_status drift_per_unit(uint64_t gap, double *per_unit)
{
    enum { NL = 512 };
    char *csv = malloc(NL * 24 + 32);
    if (!csv) return deftsim_error_nomem("calibrate");
    size_t o = (size_t)sprintf(csv, "index,name,shape,numel\n");
    for (int i = 0; i < NL; i++) o += (size_t)sprintf(csv + o, "%d,l%d,1,1\n", i, i);
    deftsim_model *m;
    deftsim_status st = deftsim_model_parse_csv(csv, o, "calibrate", "drift", &m);
    free(csv);
    if (st) return st;
    deftsim_gen_params p;
    deftsim_gen_params_default(&p);
    p.drift = 0.1;
    deftsim_gen *g;
    if ((st = deftsim_gen_new(m, &p, &g))) {
        deftsim_model_free(m);
        return st;
    }
    double sum = 0;
    for (int L = 0; L < NL; L++)
        for (uint64_t t0 = 0; t0 < 8; t0++) {
            uint64_t a = t0 * 97, b = a + gap;
            sum += fabs(log(deftsim_gen_layer_scale(g, (size_t)L, b)) -
                        log(deftsim_gen_layer_scale(g, (size_t)L, a)));
        }
    deftsim_gen_free(g);
    deftsim_model_free(m);
    *per_unit = sum / (NL * 8) / p.drift;
    return DEFTSIM_OK;
}

/* ---- the trace's side --------------------------------------------------------------------- */

static int weight_kind(deftsim_gen_kind k)
{
    return k == DEFTSIM_GEN_KIND_CONV || k == DEFTSIM_GEN_KIND_LINEAR;
}

static double clampd(double v, double lo, double hi) { return v < lo ? lo : v > hi ? hi : v; }

/* The variance of log10 s_L(t) that the drift adds at one iteration, over layers and
 * iterations: (drift log10 e)^2 Var D, where D = 64 ((1 - f) a0 + f a1) with a0, a1 uniform in
 * [-1/2, 1/2] and f uniform in [0, 1) has variance 64^2 / 12 * 2/3. */
static double drift_log10_var(double drift)
{
    double sd = drift * 0.43429448190325182765;
    double K = DEFTSIM_GEN_DRIFT_PERIOD;
    return sd * sd * K * K / 12.0 * (2.0 / 3.0);
}

typedef struct {
    const deftsim_trace *t;
    const deftsim_model *m;
    uint32_t P;
    size_t T;
    double *rms;   /* T x nlayers: RMS per element, median over the workers */
    double *top;   /* T x nlayers: top threshold (layer_top), median over the workers */
    float *buf;    /* max(numel of a layer, whole gradient) floats */
    float *thr;    /* P thresholds */
    double *vals;  /* statistics to take the median of */
    size_t nvals, capvals;
} calib_ctx;

static deftsim_status push_val(calib_ctx *c, double v)
{
    if (deftsim_grow(&c->vals, &c->capvals, c->nvals + 1, sizeof *c->vals))
        return deftsim_error_nomem("calibrate");
    c->vals[c->nvals++] = v;
    return DEFTSIM_OK;
}

static deftsim_status layer_rms(calib_ctx *c, const size_t *fit, size_t nfit,
                                deftsim_calib_result *r)
{
    size_t NL = c->m->nlayers;
    double *norms = malloc(NL * c->P * sizeof *norms), *col = malloc(c->P * sizeof *col);
    deftsim_status st = DEFTSIM_OK;
    if (!norms || !col) st = deftsim_error_nomem("calibrate");
    for (size_t i = 0; i < c->T && !st; i++) {
        for (uint32_t w = 0; w < c->P && !st; w++)
            st = deftsim_trace_layer_stats(c->t, i, w, norms + (size_t)w * NL, NULL);
        for (size_t L = 0; L < NL && !st; L++) {
            for (uint32_t w = 0; w < c->P; w++)
                col[w] = norms[(size_t)w * NL + L] / sqrt((double)c->m->layers[L].numel);
            c->rms[i * NL + L] = deftsim_calib_median(col, c->P);
        }
        int in_fit = 0;
        for (size_t f = 0; f < nfit; f++) in_fit |= fit[f] == i;
        if (st || !in_fit) continue;
        /* The spread of the workers' whole-gradient norms: sd of log10 over the workers. */
        double mean = 0, var = 0;
        for (uint32_t w = 0; w < c->P; w++) {
            double ss = 0;
            for (size_t L = 0; L < NL; L++) ss += norms[(size_t)w * NL + L] * norms[(size_t)w * NL + L];
            col[w] = ss > 0 ? 0.5 * log10(ss) : 0;
            mean += col[w] / c->P;
        }
        for (uint32_t w = 0; w < c->P; w++) var += (col[w] - mean) * (col[w] - mean) / (c->P - 1);
        r->worker_sd += sqrt(var) / (double)nfit;
    }
    free(norms);
    free(col);
    return st;
}

/* Per-tensor element statistics of the conv, linear and embedding tensors with 10 or more
 * top elements, medians over tensors and fit iterations: the top share (tail_density, mean
 * over the workers), the workers' pairwise overlap (signal_density) and, when two fit
 * iterations are consecutive (ids a and a + 1, the last such pair), one worker's overlap of
 * its top-1% sets between them (mean over the workers). Pooled over conv and linear tensors
 * (*pooled) and per kind (r->kind_real, r->kind_stat_tensors). */
static deftsim_status tensor_stats(calib_ctx *c, const deftsim_calib_opts *o, const size_t *fit,
                                   size_t nfit, elem_stats *pooled, deftsim_calib_result *r)
{
    const deftsim_model *m = c->m;
    size_t NL = m->nlayers;
    const float **g = malloc(c->P * sizeof *g);
    int *kinds = malloc((nfit * NL + 1) * sizeof *kinds);
    if (!g || !kinds) {
        free(g);
        free(kinds);
        return deftsim_error_nomem("calibrate");
    }
    /* The last consecutive pair among the fit iterations. */
    size_t pa = 0, pb = 0;
    r->field_fitted = 0;
    r->field_off = o->no_field;
    for (size_t f = o->no_field ? 0 : nfit; f-- > 1;)
        if (deftsim_trace_iteration_id(c->t, fit[f]) == deftsim_trace_iteration_id(c->t, fit[f - 1]) + 1) {
            pa = fit[f - 1];
            pb = fit[f];
            r->field_fitted = 1;
            r->field_a = deftsim_trace_iteration_id(c->t, pa);
            break;
        }
    deftsim_status st = DEFTSIM_OK;
    for (int pass = 0; pass < 3 && !st; pass++) {
        double d = pass == 0 ? o->tail_density : pass == 1 ? o->signal_density : TEMPORAL_DENSITY;
        c->nvals = 0;
        if (pass == 2 && !r->field_fitted) break;
        for (size_t f = 0; f < (pass == 2 ? 1 : nfit) && !st; f++) {
            if (pass < 2)
                for (uint32_t w = 0; w < c->P && !st; w++)
                    st = deftsim_trace_gradient(c->t, fit[f], w, &g[w]);
            for (size_t L = 0; L < NL && !st; L++) {
                const deftsim_layer *ly = &m->layers[L];
                size_t n = (size_t)ly->numel, k = (size_t)ceil(d * (double)n);
                deftsim_gen_kind kd = deftsim_gen_layer_kind(m, L);
                if (!(weight_kind(kd) || kd == DEFTSIM_GEN_KIND_EMBEDDING) || k < 10) continue;
                double v = 0, one;
                if (pass == 2) {
                    const float *a, *b;
                    for (uint32_t w = 0; w < c->P && !st; w++) {
                        if ((st = deftsim_trace_gradient(c->t, pa, w, &a)) ||
                            (st = deftsim_trace_gradient(c->t, pb, w, &b)))
                            break;
                        float ta = top_threshold(a + ly->offset, n, k, c->buf, NULL);
                        float tb = top_threshold(b + ly->offset, n, k, c->buf, NULL);
                        v += overlap(a + ly->offset, ta, b + ly->offset, tb, n, k) / c->P;
                    }
                } else {
                    for (uint32_t w = 0; w < c->P; w++) {
                        c->thr[w] = top_threshold(g[w] + ly->offset, n, k, c->buf, &one);
                        v += one / c->P;
                    }
                    if (pass == 1) {
                        v = 0;
                        for (uint32_t a = 0; a < c->P; a++)
                            for (uint32_t b = a + 1; b < c->P; b++)
                                v += overlap(g[a] + ly->offset, c->thr[a], g[b] + ly->offset,
                                             c->thr[b], n, k);
                        v /= c->P * (c->P - 1) / 2.0;
                    }
                }
                kinds[c->nvals] = (int)kd;
                if (!st) st = push_val(c, v);
            }
        }
        if (st) break;
        /* Medians: pooled over conv and linear, then per kind (the values are reordered). */
        double *tmp = malloc((c->nvals + 1) * sizeof *tmp);
        if (!tmp) {
            st = deftsim_error_nomem("calibrate");
            break;
        }
        for (int k = -1; k < DEFTSIM_GEN_NKINDS; k++) {
            size_t n = 0;
            for (size_t i = 0; i < c->nvals; i++)
                if (k < 0 ? weight_kind((deftsim_gen_kind)kinds[i]) : kinds[i] == k)
                    tmp[n++] = c->vals[i];
            double med = n ? deftsim_calib_median(tmp, n) : NAN;
            elem_stats *e = k < 0 ? pooled : &r->kind_real[k];
            *(pass == 0 ? &e->share : pass == 1 ? &e->ovl : &e->temporal) = med;
            if (k >= 0 && pass == 0) r->kind_stat_tensors[k] = (int)(n / nfit);
            if (k >= 0 && pass == 2) r->kind_temporal_tensors[k] = (int)n;
            if (k < 0 && pass < 2 && !n)
                st = deftsim_error_set(DEFTSIM_E_INPUT, "%s: no conv or linear tensor has %g / %g "
                                       "= 10 elements or more", deftsim_trace_dir(c->t), 10.0, d);
        }
        free(tmp);
    }
    free(g);
    free(kinds);
    return st;
}

static double cosine(const float *a, const float *b, uint64_t n)
{
    double ab = 0, aa = 0, bb = 0;
    for (uint64_t i = 0; i < n; i++) {
        ab += (double)a[i] * b[i];
        aa += (double)a[i] * a[i];
        bb += (double)b[i] * b[i];
    }
    return aa > 0 && bb > 0 ? ab / sqrt(aa * bb) : 0;
}

/* What the generator does not model, measured: the workers' correlation at the fit iterations,
 * and one worker's correlation and top-1% overlap between the last two consecutive ids. */
static deftsim_status measured(calib_ctx *c, const size_t *fit, size_t nfit,
                               deftsim_calib_result *r)
{
    uint64_t n = c->m->numel;
    const float *a, *b;
    deftsim_status st = DEFTSIM_OK;
    double corr = 0;
    int pairs = 0;
    for (size_t f = 0; f < nfit && !st; f++)
        for (uint32_t w = 0; w + 1 < c->P && !st; w += 2) {
            if ((st = deftsim_trace_gradient(c->t, fit[f], w, &a)) ||
                (st = deftsim_trace_gradient(c->t, fit[f], w + 1, &b)))
                break;
            corr += cosine(a, b, n);
            pairs++;
        }
    r->worker_corr = pairs ? corr / pairs : 0;
    for (size_t i = c->T; i-- > 1 && !st && !r->have_temporal;) {
        uint64_t id = deftsim_trace_iteration_id(c->t, i - 1);
        if (deftsim_trace_iteration_id(c->t, i) != id + 1) continue;
        r->have_temporal = 1;
        r->temporal_a = id;
        size_t k = (size_t)ceil(0.01 * (double)n);
        for (uint32_t w = 0; w < c->P && !st; w++) {
            if ((st = deftsim_trace_gradient(c->t, i - 1, w, &a)) ||
                (st = deftsim_trace_gradient(c->t, i, w, &b)))
                break;
            r->temporal_corr += cosine(a, b, n) / c->P;
            float ta = top_threshold(a, (size_t)n, k, c->buf, NULL);
            float tb = top_threshold(b, (size_t)n, k, c->buf, NULL);
            r->temporal_overlap += overlap(a, ta, b, tb, (size_t)n, k) / c->P;
        }
    }
    return st;
}

/* top[i][L] for the fit iterations: the threshold of the tensor's top scale_density fraction
 * (at least its largest value), median over the workers. */
static deftsim_status layer_top(calib_ctx *c, const deftsim_calib_opts *o, const size_t *fit,
                                size_t nfit)
{
    const deftsim_model *m = c->m;
    const float *g;
    double *col = malloc(c->P * sizeof *col);
    deftsim_status st = col ? DEFTSIM_OK
                            : deftsim_error_nomem("calibrate");
    for (size_t f = 0; f < nfit && !st; f++)
        for (size_t L = 0; L < m->nlayers && !st; L++) {
            const deftsim_layer *ly = &m->layers[L];
            size_t n = (size_t)ly->numel, k = (size_t)ceil(o->scale_density * (double)n);
            k = k < 1 ? 1 : k;
            for (uint32_t w = 0; w < c->P && !st; w++)
                if (!(st = deftsim_trace_gradient(c->t, fit[f], w, &g)))
                    col[w] = top_threshold(g + ly->offset, n, k, c->buf, NULL);
            if (!st) c->top[fit[f] * m->nlayers + L] = deftsim_calib_median(col, c->P);
        }
    free(col);
    return st;
}

static deftsim_status calibrate_ctx(calib_ctx *c, const deftsim_calib_opts *o, size_t *fit,
                                    deftsim_calib_result *r)
{
    const deftsim_model *m = c->m;
    size_t NL = m->nlayers, nfit = 0;
    uint64_t last = deftsim_trace_iteration_id(c->t, c->T - 1);
    uint64_t from = o->from >= 0 ? (uint64_t)o->from : last / 2;
    for (size_t i = 0; i < c->T; i++)
        if (deftsim_trace_iteration_id(c->t, i) >= from) fit[nfit++] = i;
    if (!nfit)
        return deftsim_error_set(DEFTSIM_E_INPUT, "%s: no iteration at or after %llu",
                                 deftsim_trace_dir(c->t), (unsigned long long)from);
    r->nfit = nfit;
    r->fit_first = deftsim_trace_iteration_id(c->t, fit[0]);
    r->fit_last = last;
    deftsim_status st = layer_rms(c, fit, nfit, r);
    if (st) return st;
    /* A uniform log10 factor of width W has standard deviation W / sqrt(12). */
    r->params.worker_spread = clampd(sqrt(12.0) * r->worker_sd, 0, 6);

    /* Tail, signal and (with two consecutive fit iterations) field: each fitted given the
     * others, in turns, to the conv and linear tensors pooled (the global keys), and to each
     * kind that has its own (embeddings; conv and linear when both have 3 tensors or more);
     * then the generator's threshold of its top scale_density fraction at unit scale. */
    elem_stats pooled, got;
    if ((st = tensor_stats(c, o, fit, nfit, &pooled, r))) return st;
    r->tail_real = pooled.share;
    r->signal_real = pooled.ovl;
    r->temporal_real = pooled.temporal;
    sim_ctx s;
    double q_unit = 1;
    if (!(st = sim_open(&s))) {
        elem_params e;
        if (!(st = fit_elements(&s, o, &pooled, r->field_fitted, &e, &got))) {
            r->params.tail = e.tail;
            r->params.signal = e.signal;
            r->params.field = r->field_fitted ? e.field : 0;
            r->tail_gen = got.share;
            r->signal_gen = got.ovl;
            r->temporal_gen = got.temporal;
        }
        int both = r->kind_stat_tensors[DEFTSIM_GEN_KIND_CONV] >= 3 &&
                   r->kind_stat_tensors[DEFTSIM_GEN_KIND_LINEAR] >= 3;
        for (int k = 0; k < DEFTSIM_GEN_NKINDS && !st; k++) {
            r->kind_own[k] = r->kind_stat_tensors[k] > 0 &&
                             (k == DEFTSIM_GEN_KIND_EMBEDDING ||
                              (both && (k == DEFTSIM_GEN_KIND_CONV || k == DEFTSIM_GEN_KIND_LINEAR)));
            if (!r->kind_own[k]) continue;
            /* Its own field only from 3 tensors or more (a median of one or two tensors, such
             * as BERT's word and position tables, is no kind's); otherwise the pooled field
             * stays, given which its tail and signal are fitted. */
            elem_params ek;
            int own_field = r->field_fitted && r->kind_temporal_tensors[k] >= 3;
            if (r->field_fitted && !own_field) {
                elem_stats t = r->kind_real[k];
                if ((st = fit_elements_given_field(&s, o, &t, r->params.field, &ek,
                                                   &r->kind_gen[k])))
                    break;
            } else if ((st = fit_elements(&s, o, &r->kind_real[k], own_field, &ek,
                                          &r->kind_gen[k]))) {
                break;
            }
            r->params.kind_tail[k] = ek.tail;
            r->params.kind_signal[k] = ek.signal;
            r->kind_own_field[k] = own_field;
            if (own_field) r->params.kind_field[k] = ek.field;
        }
        r->scale_density = o->scale_density;
        if (!st && o->scale_density > 0) {
            elem_params e0 = {r->params.signal, r->params.tail, r->params.field};
            st = sim_stats_q(&s, &e0, o, o->scale_density, &got, &q_unit);
        }
    }
    sim_close(&s);
    if (st) return st;
    r->q_unit = q_unit;
    if (o->scale_density > 0 && (st = layer_top(c, o, fit, nfit))) return st;

    /* Drift: the first fit iteration against the last when they lie a drift period (64) or
     * more apart (closer, the change is mostly minibatch noise); otherwise the default stays,
     * and the change from the first iteration after 0 to the last is reported only. */
    size_t ia = 0;
    while (ia < c->T && deftsim_trace_iteration_id(c->t, ia) == 0) ia++;
    int fitted = last - r->fit_first >= DEFTSIM_GEN_DRIFT_PERIOD;
    if (fitted) ia = fit[0];
    r->drift_fitted = fitted;
    r->drift_a = r->drift_b = last;
    if (ia + 1 < c->T) {
        double sum = 0, per_unit = 0;
        int n = 0;
        for (size_t L = 0; L < NL; L++) {
            double u = c->rms[ia * NL + L], v = c->rms[(c->T - 1) * NL + L];
            if (u > 0 && v > 0) sum += fabs(log(v) - log(u)), n++;
        }
        r->drift_a = deftsim_trace_iteration_id(c->t, ia);
        r->drift_real = n ? sum / n : 0;
        if (fitted) {
            if ((st = drift_per_unit(last - r->drift_a, &per_unit))) return st;
            r->params.drift = clampd(per_unit > 0 ? r->drift_real / per_unit : 0, 0, 0.1);
        }
    }
    /* Scales: the mean over the fit iterations of log10 of each tensor's effective scale (its
     * top threshold over the generator's, or its RMS), tensors non-zero in all. */
    double *y = calloc(NL, sizeof *y);
    int *ok = calloc(NL, sizeof *ok);
    if (!y || !ok) st = deftsim_error_nomem("calibrate");
    double wmin = INFINITY, wmax = -INFINITY;
    int any = 0;
    for (size_t L = 0; L < NL && !st; L++) {
        ok[L] = 1;
        for (size_t f = 0; f < nfit; f++) {
            double v = o->scale_density > 0 ? c->top[fit[f] * NL + L] / q_unit
                                            : c->rms[fit[f] * NL + L];
            ok[L] &= v > 0;
            if (v > 0) y[L] += log10(v) / (double)nfit;
        }
        any |= ok[L];
        if (ok[L] && weight_kind(deftsim_gen_layer_kind(m, L))) {
            double v = 0; /* the spread reported is the RMS's */
            for (size_t f = 0; f < nfit; f++) v += log10(c->rms[fit[f] * NL + L]) / (double)nfit;
            wmin = v < wmin ? v : wmin;
            wmax = v > wmax ? v : wmax;
        }
    }
    if (!st && !any)
        st = deftsim_error_set(DEFTSIM_E_INPUT, "%s: every tensor's gradient is zero",
                               deftsim_trace_dir(c->t));
    if (!st) {
        deftsim_calib_fit_kinds(m, y, ok, drift_log10_var(r->params.drift), o->no_size, r);
        r->weight_decades = wmax >= wmin ? wmax - wmin : 0;
    }
    free(y);
    free(ok);
    if (st) return st;

    return measured(c, fit, nfit, r);
}

deftsim_status deftsim_calibrate(const deftsim_trace *t, const deftsim_calib_opts *o,
                                 deftsim_calib_result *r)
{
    memset(r, 0, sizeof *r);
    deftsim_gen_params_default(&r->params);
    r->params.kind_scales = 1;
    calib_ctx c = {.t = t, .m = deftsim_trace_model(t), .P = deftsim_trace_workers(t),
                   .T = deftsim_trace_iterations(t)};
    if (c.P < 2)
        return deftsim_error_set(DEFTSIM_E_INPUT, "%s: %u worker; calibrating needs 2 or more",
                                 deftsim_trace_dir(t), c.P);
    if (!(o->tail_density > 0 && o->tail_density < 1 && o->signal_density > 0 &&
          o->signal_density < 1 && o->scale_density >= 0 && o->scale_density < 1))
        return deftsim_error_set(DEFTSIM_E_INPUT, "calibrate: densities must lie in (0, 1)");
    uint64_t maxn = c.m->numel;
    size_t *fit = malloc(c.T * sizeof *fit);
    c.rms = malloc(c.T * c.m->nlayers * sizeof *c.rms);
    c.top = calloc(c.T * c.m->nlayers, sizeof *c.top);
    c.buf = malloc((size_t)maxn * sizeof *c.buf);
    c.thr = malloc(c.P * sizeof *c.thr);
    deftsim_status st = fit && c.rms && c.top && c.buf && c.thr
                            ? calibrate_ctx(&c, o, fit, r)
                            : deftsim_error_nomem("calibrate");
    free(fit);
    free(c.rms);
    free(c.top);
    free(c.buf);
    free(c.thr);
    free(c.vals);
    return st;
}

/* ---- the parameter file ------------------------------------------------------------------- */

/* "# " + text, wrapped at spaces into lines of at most 96 characters (the scenario reader's
 * limit is 198). */
static void comment(FILE *f, const char *text)
{
    const char *p = text;
    while (*p) {
        size_t n = strlen(p), cut = n;
        if (n > 94) {
            cut = 94;
            while (cut > 20 && p[cut] != ' ') cut--;
        }
        fprintf(f, "# %.*s\n", (int)cut, p);
        p += cut;
        while (*p == ' ') p++;
    }
}

static void write_params(FILE *f, const deftsim_trace *t, const deftsim_calib_result *r)
{
    const deftsim_gen_params *p = &r->params;
    const json_t *prov = deftsim_trace_provenance(t);
    const char *rec = json_string_value(json_object_get(prov, "recorder"));
    const char *meth = json_string_value(json_object_get(prov, "method"));
    char line[1200];
    snprintf(line, sizeof line, "Synthetic generator parameters fitted by deftsim trace calibrate "
             "(docs/GENERATOR.md, \"Calibration\") to the trace %s: model %s (%zu tensors, %llu "
             "elements), %u workers, fitted on its %zu iteration(s) %llu .. %llu.",
             deftsim_trace_dir(t), deftsim_trace_model(t)->name, deftsim_trace_model(t)->nlayers,
             (unsigned long long)deftsim_trace_model(t)->numel, deftsim_trace_workers(t), r->nfit,
             (unsigned long long)r->fit_first, (unsigned long long)r->fit_last);
    comment(f, line);
    snprintf(line, sizeof line, "Recorded by: %s", rec ? rec : "?");
    comment(f, line);
    snprintf(line, sizeof line, "Method: %s", meth ? meth : "?");
    comment(f, line);
    fprintf(f, "# Weight tensors' RMS spans %.2f decades.\n", r->weight_decades);
    if (r->scale_density > 0)
        fprintf(f, "# A tensor's scale: the threshold of its top %g%% (median over the workers) "
                   "over the\n# generator's at unit scale (%.4f with this tail and signal).\n",
                100 * r->scale_density, r->q_unit);
    else
        fprintf(f, "# A tensor's scale: its RMS (median over the workers).\n");
    fprintf(f, "\n[synthetic]\nscales = kinds\n");
    for (int k = 0; k < DEFTSIM_GEN_NKINDS; k++) {
        const char *name = deftsim_gen_kind_name((deftsim_gen_kind)k);
        if (r->kind_tensors[k])
            fprintf(f, "# %s: %d tensors, residual %.2f decades%s\n", name, r->kind_tensors[k],
                    r->kind_rmse[k], r->kind_dropped[k] ? " (and some more than 3 decades below "
                    "the rest, left out)" : "");
        else if (r->kind_from[k] >= 0)
            fprintf(f, "# %s: not in the trace; extrapolated: copied from %s\n", name,
                    deftsim_gen_kind_name((deftsim_gen_kind)r->kind_from[k]));
        if (r->kind_tensors[k] && r->kind_size_fitted[k])
            fprintf(f, "# (its size slope fitted with the depth: tensors without a role span a "
                       "decade of sizes)\n");
        fprintf(f, "%s_scale = %.4f\n%s_depth = %.4f\n%s_spread = %.4f\n%s_size = %.4f\n",
                name, p->kind_level[k], name, p->kind_depth[k], name, p->kind_spread[k], name,
                p->kind_size[k]);
    }
    int roles = 0;
    for (int q = 0; q < DEFTSIM_GEN_NROLES; q++) roles += r->role_tensors[q] > 0;
    if (roles) {
        fprintf(f, "# Roles (from the tensors' names): each role's offset from its kinds' lines, the "
                   "mean\n# residual of its tensors, fitted together with the lines.\n");
        for (int q = 0; q < DEFTSIM_GEN_NROLES; q++)
            if (r->role_tensors[q])
                fprintf(f, "# %s: %d tensors\nrole_%s = %.4f\n",
                        deftsim_gen_role_name((deftsim_gen_role)q), r->role_tensors[q],
                        deftsim_gen_role_name((deftsim_gen_role)q), p->role_offset[q]);
    }
    fprintf(f, "# Conv and linear tensors pooled (the global keys; medians over tensors and fit "
               "iterations):\n# top-1%% share of a tensor's squared norm: trace %.4f, generator "
               "%.4f\ntail = %.4g\n", r->tail_real, r->tail_gen, p->tail);
    fprintf(f, "# Overlap of two workers' top-0.1%% sets in one tensor: trace %.4f, generator "
               "%.4f.\n# (The workers' whole gradients correlate %.4f.)\nsignal = %.4g\n",
            r->signal_real, r->signal_gen, r->worker_corr, p->signal);
    if (r->field_fitted)
        fprintf(f, "# Overlap of one worker's top-1%% sets in one tensor at iterations %llu and "
                   "%llu: trace\n# %.4f, generator %.4f\nfield = %.4g\n",
                (unsigned long long)r->field_a, (unsigned long long)r->field_a + 1,
                r->temporal_real, r->temporal_gen, p->field);
    else
        fprintf(f, "# field: not fitted (%s); none.\n",
                r->field_off ? "--no-field" : "no two consecutive fit iterations");
    for (int k = 0; k < DEFTSIM_GEN_NKINDS; k++) {
        if (!r->kind_own[k]) continue;
        const char *name = deftsim_gen_kind_name((deftsim_gen_kind)k);
        const deftsim_calib_elem *a = &r->kind_real[k], *b = &r->kind_gen[k];
        fprintf(f, "# %s alone (%d tensors): top-1%% share %.4f, overlap %.4f", name,
                r->kind_stat_tensors[k], a->share, a->ovl);
        if (r->field_fitted)
            fprintf(f, ",\n# temporal overlap %.4f (%d tensors)", a->temporal,
                    r->kind_temporal_tensors[k]);
        fprintf(f, ";\n# generator %.4f, %.4f", b->share, b->ovl);
        if (r->field_fitted) fprintf(f, ", %.4f", b->temporal);
        if (r->field_fitted && !r->kind_own_field[k])
            fprintf(f, " (the global field: its own needs 3 tensors or more)");
        fprintf(f, "\n%s_tail = %.4g\n%s_signal = %.4g\n", name, p->kind_tail[k], name,
                p->kind_signal[k]);
        if (r->kind_own_field[k]) fprintf(f, "%s_field = %.4g\n", name, p->kind_field[k]);
    }
    fprintf(f, "# The workers' whole-gradient norms: standard deviation of log10 over the "
               "workers %.4f\n# (mean over the fit iterations); the uniform width with that "
               "deviation:\nworker_spread = %.4g\n", r->worker_sd, p->worker_spread);
    if (r->drift_fitted)
        fprintf(f, "# Mean |change of ln RMS| from iteration %llu to %llu: %.4f (minibatch noise "
                   "included)\ndrift = %.4g\n",
                (unsigned long long)r->drift_a, (unsigned long long)r->drift_b, r->drift_real,
                p->drift);
    else if (r->drift_a < r->drift_b)
        fprintf(f, "# drift: not fitted (the fit's iterations lie less than %u apart); the "
                   "default stays.\n# From iteration %llu to %llu the tensors' ln RMS changed "
                   "by %.4f on average\n# (across training's stages: not the fit stage's "
                   "drift).\ndrift = %.4g\n",
                DEFTSIM_GEN_DRIFT_PERIOD, (unsigned long long)r->drift_a,
                (unsigned long long)r->drift_b, r->drift_real, p->drift);
    else
        fprintf(f, "# drift: one iteration after 0 only; not fitted\n");
    if (r->have_temporal)
        fprintf(f, "# Measured (whole gradient; the generator's values are drawn afresh, only "
                   "the field\n# persists): iterations %llu and %llu of one worker correlate "
                   "%.4f, their top-1%% sets\n# overlap %.4f.\n",
                (unsigned long long)r->temporal_a, (unsigned long long)r->temporal_a + 1,
                r->temporal_corr, r->temporal_overlap);
}

deftsim_status deftsim_calib_write(const deftsim_trace *t, const deftsim_calib_result *r,
                                   const char *path)
{
    if (!path) {
        write_params(stdout, t, r);
        return fflush(stdout) ? deftsim_error_set(DEFTSIM_E_IO, "stdout: write failed")
                              : DEFTSIM_OK;
    }
    deftsim_afile *af;
    deftsim_status st = deftsim_afile_open(&af, path);
    if (st) return st;
    write_params(deftsim_afile_stream(af), t, r);
    return deftsim_afile_commit(af);
}
