/* sp_sidco.c - SIDCo (Abdelmoniem et al., "An Efficient Statistical-based Gradient Compression
 * Technique for Distributed Training Systems", MLSys 2021), as docs/SPARSIFIERS.md ("sidco")
 * defines it after the authors' compressors (ahmedcs/sidco).
 *
 * Every worker fits a sparsity-inducing distribution to the magnitudes of its accumulator,
 * normalised by its L2 norm, and takes the threshold the fit puts at the target ratio; in
 * several stages, each later stage fits a generalised Pareto (an exponential for sidco_dist =
 * exp) to the excess over the minimum of what passed the stage before, at a ratio that makes the
 * stages' product the density. The stage count is fixed, derived from the density, or adapted
 * every 5 steps to the counts the worker achieved (the authors' rule). The worker sends the
 * elements above the last threshold; exchange and aggregate as hardthr's (sp_pairs_exchange).
 * Statistics in double, sums in index order; the last threshold, in gradient units, is rounded
 * to float and compared strictly. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sp_internal.h"

#define SIDCO_FIRST_RATIO 0.25 /* the first stage's ratio when there are several */
#define SIDCO_I_RATIO 0.25     /* a later stage's ratio with sidco_stages = 0 */
#define SIDCO_UPDATE_ITER 5    /* adaptive stages: steps between two updates */
#define SIDCO_RES_DIFF 0.2     /* adaptive stages: the band around the target */

/* Options (deftsim_sparsify.h): positions in sidco_options; the distributions in the order
 * of dist_names. */
enum { OPT_DIST, OPT_STAGES, OPT_EXCHANGE };
enum { DIST_EXP, DIST_GPARETO, DIST_GAMMA };
/* Its result columns: the stages column's position (the others have getters). */
enum { COL_STAGES = 3 };

typedef struct {
    sp_pairs pp;
    double *surv;              /* one worker's normalised survivors of a stage */
    int *cur_stages;           /* P: adaptive stage counts */
    double *sum_ratio;         /* P */
    int *iter;                 /* P */
    double *last;              /* 2 P: each worker's last threshold and stages run, shared in
                                  spread mode so that every rank sums them in worker order */
    size_t ph_fit, ph_filter, ph_gather, ph_residual, ph_sum;
} sidco_state;

/* ---- The regularised incomplete gamma function and its inverse ------------------------- */

/* P(a, x) by its series (x < a + 1) and Q(a, x) by Lentz's continued fraction (otherwise). */
static double gamma_q(double a, double x)
{
    if (x <= 0) return 1.0;
    double lg = -x + a * log(x) - lgamma(a);
    if (x < a + 1.0) {
        double ap = a, del = 1.0 / a, sum = del;
        for (int i = 0; i < 1000; i++) {
            ap += 1.0;
            del *= x / ap;
            sum += del;
            if (fabs(del) < fabs(sum) * 1e-16) break;
        }
        return 1.0 - sum * exp(lg);
    }
    double b = x + 1.0 - a, c = 1.0 / DBL_MIN, dd = 1.0 / b, h = dd;
    for (int i = 1; i < 1000; i++) {
        double an = -i * (i - a);
        b += 2.0;
        dd = an * dd + b;
        if (fabs(dd) < DBL_MIN) dd = DBL_MIN;
        c = b + an / c;
        if (fabs(c) < DBL_MIN) c = DBL_MIN;
        dd = 1.0 / dd;
        double del = dd * c;
        h *= del;
        if (fabs(del - 1.0) < 1e-16) break;
    }
    return exp(lg) * h;
}

/* x with Q(a, x) = q. */
static double gamma_qinv(double a, double q)
{
    /* Bracket [lo, hi] with Q(a, lo) > q >= Q(a, hi), then Newton steps kept inside it
     * (bisection when a step leaves it). */
    double lo = 0, hi = a > 1 ? a : 1.0;
    for (int i = 0; i < 2000 && gamma_q(a, hi) > q; i++) {
        lo = hi;
        hi *= 2.0;
    }
    double x = 0.5 * (lo + hi);
    for (int i = 0; i < 200; i++) {
        double f = gamma_q(a, x) - q;
        if (f > 0) lo = x;
        else hi = x;
        double dens = exp(-x + (a - 1.0) * log(x) - lgamma(a));
        double nx = dens > 0 ? x + f / dens : 0.5 * (lo + hi);
        if (!(nx > lo && nx < hi)) nx = 0.5 * (lo + hi);
        if (fabs(nx - x) <= 1e-15 * x || hi - lo <= 1e-15 * hi) {
            x = nx;
            break;
        }
        x = nx;
    }
    return x;
}

/* ---- One worker's fit --------------------------------------------------------------------- */

/* The generalised Pareto's threshold by its moments: mean m and unbiased variance v of the
 * excesses, at ratio r (its exponential limit when the shape is 0); NaN when v is not > 0. */
static double gpareto_thr(double m, double v, double r)
{
    if (!(v > 0)) return NAN;
    double q = m * m / v, alpha = 0.5 * m * (q + 1.0), kk = 0.5 * (q - 1.0);
    if (kk == 0) return -alpha * log(r);
    return alpha * (1.0 - exp(kk * log(r))) / kk;
}

/* mean and unbiased variance of x[0..c) less `sub`, summed in order. */
static void moments(const double *x, size_t c, double sub, double *m, double *v)
{
    double s = 0, q = 0;
    for (size_t i = 0; i < c; i++) s += x[i] - sub;
    *m = s / (double)c;
    for (size_t i = 0; i < c; i++) {
        double e = x[i] - sub - *m;
        q += e * e;
    }
    *v = c > 1 ? q / (double)(c - 1) : NAN;
}

/* The first stage over every element at ratio r: the threshold in normalised units. */
static double first_stage(const deftsim_sparsifier *s, const float *acc, double norm, double r)
{
    const size_t n = (size_t)s->n;
    double sum = 0, sl = 0;
    for (size_t i = 0; i < n; i++) sum += (double)fabsf(acc[i]) / norm;
    double m = sum / (double)n;
    if (sp_opt_int(&s->p, OPT_DIST) == DIST_GPARETO) {
        double q = 0;
        for (size_t i = 0; i < n; i++) {
            double e = (double)fabsf(acc[i]) / norm - m;
            q += e * e;
        }
        return gpareto_thr(m, n > 1 ? q / (double)(n - 1) : NAN, r);
    }
    if (sp_opt_int(&s->p, OPT_DIST) == DIST_GAMMA) {
        for (size_t i = 0; i < n; i++) sl += log((double)fabsf(acc[i]) / norm + DBL_EPSILON);
        double sh = log(m) - sl / (double)n;
        /* sh > 0 unless every magnitude is equal: then the exponential's threshold. */
        if (sh > 0 && isfinite(sh)) {
            double alpha = (3.0 - sh + sqrt((sh - 3.0) * (sh - 3.0) + 24.0 * sh)) / (12.0 * sh);
            return m / alpha * gamma_qinv(alpha, r);
        }
    }
    return -m * log(r);
}

/* Worker w's threshold in gradient units (float; +Inf for an all-zero accumulator) and the
 * stages it ran. */
static float fit_worker(const deftsim_sparsifier *s, sidco_state *d, const float *acc,
                        uint32_t w, int *ran)
{
    const size_t n = (size_t)s->n;
    const double ratio = s->p.density;
    double sq = 0;
    for (size_t i = 0; i < n; i++) sq += (double)acc[i] * (double)acc[i];
    double norm = sqrt(sq);
    *ran = 1;
    if (!(norm > 0) || !isfinite(norm)) return INFINITY;
    int opt = sp_opt_int(&s->p, OPT_STAGES);
    int stages = opt < 0 ? d->cur_stages[w] : opt;
    /* Later stages run for stages > 1 (or 0) when the density is below the first ratio. */
    int multi = (stages > 1 || stages == 0) && ratio < SIDCO_FIRST_RATIO;
    double thr = first_stage(s, acc, norm, multi ? SIDCO_FIRST_RATIO : ratio);
    if (!multi || !isfinite(thr)) return (float)(thr * norm);
    double r_ratio = ratio / SIDCO_FIRST_RATIO, i_ratio;
    int loop;
    if (stages == 0) {
        i_ratio = SIDCO_I_RATIO;
        loop = (int)ceil(log(r_ratio) / log(i_ratio));
    } else {
        i_ratio = pow(r_ratio, 1.0 / (stages - 1));
        loop = stages - 1;
    }
    size_t c = 0;
    for (size_t i = 0; i < n; i++) {
        double x = (double)fabsf(acc[i]) / norm;
        if (x > thr) d->surv[c++] = x;
    }
    for (int i = loop; i > 0; i--) {
        if (i != loop) {
            size_t c2 = 0;
            for (size_t j = 0; j < c; j++)
                if (d->surv[j] > thr) d->surv[c2++] = d->surv[j];
            c = c2;
        }
        if (c < 2) break; /* no fit: the stages stop at the last threshold */
        double tmin = d->surv[0], m, v;
        for (size_t j = 1; j < c; j++)
            if (d->surv[j] < tmin) tmin = d->surv[j];
        double ri = (i == 1 && stages == 0) ? r_ratio / pow(i_ratio, loop - 1) : i_ratio;
        double nt;
        moments(d->surv, c, tmin, &m, &v);
        if (sp_opt_int(&s->p, OPT_DIST) == DIST_EXP)
            nt = -m * log(ri) + tmin;
        else
            nt = gpareto_thr(m, v, ri) + tmin;
        if (!isfinite(nt)) break;
        thr = nt;
        (*ran)++;
    }
    return (float)(thr * norm);
}

/* The authors' adaptive rule (their stages = -1): every 5 steps, the mean of count / (d n)
 * over them; above 1.2 one stage less, below 0.8 one more, within [1, ceil(log(d) / log(1/2))]. */
static void adapt(const deftsim_sparsifier *s, sidco_state *d, uint32_t w, uint64_t count)
{
    double actual = 1.0 * (double)count / (double)s->n;
    d->sum_ratio[w] += actual / s->p.density;
    if (++d->iter[w] < SIDCO_UPDATE_ITER) return;
    double est = 1.0 * d->sum_ratio[w] / d->iter[w];
    if (est > 1 + SIDCO_RES_DIFF)
        d->cur_stages[w]--;
    else if (est < 1 - SIDCO_RES_DIFF)
        d->cur_stages[w]++;
    int mx = (int)ceil(log(s->p.density) / log(0.5));
    if (d->cur_stages[w] > mx) d->cur_stages[w] = mx;
    if (d->cur_stages[w] < 1) d->cur_stages[w] = 1;
    d->sum_ratio[w] = 0;
    d->iter[w] = 0;
}

static deftsim_status sidco_init(deftsim_sparsifier *s)
{
    deftsim_status st;
    sidco_state *d = sp_priv(s, sizeof *d);
    if (!d) return DEFTSIM_E_NOMEM;
    if ((st = sp_pairs_init(s, &d->pp)) ||
        (st = sp_alloc_n(s, &d->surv, s->n, sizeof *d->surv, "survivors")) ||
        (st = sp_alloc_n(s, &d->cur_stages, s->P, sizeof *d->cur_stages, "stages")) ||
        (st = sp_alloc_n(s, &d->sum_ratio, s->P, sizeof *d->sum_ratio, "stages")) ||
        (st = sp_alloc_n(s, &d->iter, s->P, sizeof *d->iter, "stages")) ||
        (st = sp_alloc_n(s, &d->last, 2 * (uint64_t)s->P, sizeof *d->last, "thresholds")))
        return st;
    if (!s->dry)
        for (uint32_t w = 0; w < s->P; w++) d->cur_stages[w] = 1;
    d->ph_fit = sp_phase(s, "fit", 1);
    d->ph_filter = sp_phase(s, "filter", 1);
    d->ph_gather = sp_phase(s, "gather", 0);
    d->ph_residual = sp_phase(s, "residual", 0);
    d->ph_sum = sp_phase(s, "sum", 0);
    return DEFTSIM_OK;
}

static void sidco_fini(deftsim_sparsifier *s)
{
    sidco_state *d = s->priv;
    if (d) sp_pairs_fini(&d->pp);
}

static deftsim_status sidco_step(deftsim_sparsifier *s, uint64_t t, const deftsim_acc_provider *a)
{
    (void)t;
    sidco_state *d = s->priv;
    deftsim_status st;
    const size_t n = (size_t)s->n;
    float *acc;
    size_t c_fit = sp_compute(s, d->ph_fit), c_filter = sp_compute(s, d->ph_filter),
           c_gather = sp_compute(s, d->ph_gather), c_res = sp_compute(s, d->ph_residual);
    if (c_fit == SIZE_MAX || c_filter == SIZE_MAX || c_gather == SIZE_MAX || c_res == SIZE_MAX)
        return DEFTSIM_E_NOMEM;
    sp_pairs_begin(&d->pp);
    for (uint32_t w = s->lo; w < s->hi; w++) {
        size_t cnt = 0;
        uint64_t at;
        int ran;
        if ((st = sp_get(a, w, &acc))) return st;
        double t0 = sp_now(s);
        float T = fit_worker(s, d, acc, w, &ran);
        sp_charge(s, c_fit, d->ph_fit, w, sp_now(s) - t0);
        /* |acc| > T as |acc| >= the next float above T; +Inf (a zero accumulator) or NaN
         * (a failed fit) picks nothing. */
        float ge = isfinite(T) ? nextafterf(T, INFINITY) : INFINITY;
        if (isfinite(T))
            SP_TIMED(s, c_filter, d->ph_filter, w,
                     deftsim_k_filter_ge(s->kc, acc, n, ge, d->pp.cand, n, &cnt));
        s->res.cost[w] += (double)n * (2 + ran);
        if ((st = sp_pairs_add(s, &d->pp, w, cnt, &at))) return st;
        const deftsim_kidx *idx = d->pp.picks + at;
        SP_TIMED(s, c_gather, d->ph_gather, w,
                 deftsim_k_gather(s->kc, acc, n, idx, cnt, d->pp.vals + at));
        SP_TIMED(s, c_res, d->ph_residual, w, deftsim_k_zero_at(s->kc, acc, n, idx, cnt));
        if ((st = sp_release(a, w))) return st;
        d->last[2 * w] = T;
        d->last[2 * w + 1] = ran;
        if (sp_opt_int(&s->p, OPT_STAGES) < 0) adapt(s, d, w, cnt);
    }
    if ((st = sp_share_fixed(s, d->last, 2 * sizeof *d->last)) ||
        (st = sp_pairs_exchange(s, &d->pp, sp_opt_int(&s->p, OPT_EXCHANGE), d->ph_sum)))
        return st;
    double thr_sum = 0, stage_sum = 0;
    for (uint32_t w = 0; w < s->P; w++) {
        thr_sum += d->last[2 * w];
        stage_sum += d->last[2 * w + 1];
    }
    s->res.threshold = thr_sum / s->P;
    s->res.extra[COL_STAGES] = stage_sum / s->P;
    return DEFTSIM_OK;
}

static const sp_method sidco_impl = {sidco_init, sidco_step, sidco_fini, NULL, 1};

static const char *const dist_names[] = {"exp", "gpareto", "gamma", NULL};
static const char *const exchange_names[] = {"variable", "padded", NULL};

static const deftsim_method_option sidco_options[] = {
    [OPT_DIST] = {.key = "sidco_dist", .type = DEFTSIM_OPT_ENUM, .dflt = "exp",
                  .names = dist_names,
                  .help = "sidco: the first stage's distribution (exponential, generalised "
                          "Pareto, gamma)"},
    [OPT_STAGES] = {.key = "sidco_stages", .type = DEFTSIM_OPT_INT, .dflt = "-1", .lo = -1,
                    .hi = 20,
                    .help = "sidco: threshold stages; -1 adaptive (the authors' rule), 0 as many "
                            "as the density needs"},
    [OPT_EXCHANGE] = {.key = "sidco_exchange", .type = DEFTSIM_OPT_ENUM, .dflt = "variable",
                      .names = exchange_names,
                      .help = "sidco: pairs allgather of each worker's count, or padded to the "
                              "largest"},
};

/* count_ratio, threshold and pad_overhead with MiCRO's getters (the same names, units and
 * summaries; here threshold is the mean over the workers of their last thresholds), then its
 * own. */
static const deftsim_method_column sidco_columns[] = {
    {.name = "count_ratio", .unit = "ratio", .title = "count ratio",
     .doc = "K / k: the workers' summed counts over the target", .get = sp_col_count_ratio,
     .summary = DEFTSIM_COL_ROWS_ONLY},
    {.name = "threshold", .unit = "gradient units", .title = "threshold",
     .doc = "sidco: the mean over the workers of the last stage's threshold",
     .get = sp_col_threshold, .summary = DEFTSIM_COL_MEDIAN},
    {.name = "pad_overhead", .unit = "ratio", .title = "padding",
     .doc = "m P / K - 1, the padding share of a padded allgather", .get = sp_col_pad,
     .summary = DEFTSIM_COL_MEDIAN},
    [COL_STAGES] = {.name = "stages", .unit = "count", .title = "stages",
                    .doc = "sidco: the threshold stages the workers ran, mean over the workers",
                    .summary = DEFTSIM_COL_MEDIAN},
};

#define OPBIT(o) (1u << DEFTSIM_KOP_##o)

const deftsim_method_desc deftsim_sp_sidco_desc = {
    .name = "sidco",
    .title = "SIDCo",
    .short_title = "SIDCo",
    .caps = DEFTSIM_METHOD_CAP_KEEPS_STATE,
    .impl = &sidco_impl,
    .closed_form = sp_pairs_closed_form,
    .options = sidco_options,
    .noptions = sizeof sidco_options / sizeof sidco_options[0],
    .columns = sidco_columns,
    .ncolumns = sizeof sidco_columns / sizeof sidco_columns[0],
    .kernel_ops = OPBIT(FILTER_GE) | OPBIT(SCATTER_ADD) | OPBIT(UNION) | OPBIT(GATHER) |
                  OPBIT(ZERO_AT),
};
