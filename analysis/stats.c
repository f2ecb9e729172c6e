/* stats.c - medians, bootstrap confidence intervals and least-squares fits on GSL
 * (deftsim_analysis.h). */
#include "deftsim_analysis.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <gsl/gsl_cdf.h>
#include <gsl/gsl_fit.h>
#include <gsl/gsl_rng.h>
#include <gsl/gsl_sort.h>
#include <gsl/gsl_statistics_double.h>

double deftsim_median(double *x, size_t n)
{
    if (n == 0) return NAN;
    gsl_sort(x, 1, n);
    return gsl_stats_median_from_sorted_data(x, 1, n);
}

/* The finite values of x, in a fresh array (NULL and *m = 0 when there are none). */
static deftsim_status finite_copy(const double *x, size_t n, double **out, size_t *m)
{
    *out = NULL;
    *m = 0;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(x[i])) k++;
    if (!k) return DEFTSIM_OK;
    double *c = malloc(k * sizeof *c);
    if (!c) return deftsim_error_nomem("statistics");
    k = 0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(x[i])) c[k++] = x[i];
    *out = c;
    *m = k;
    return DEFTSIM_OK;
}

static deftsim_status check_options(const deftsim_boot_options *o)
{
    if (o->resamples < 100)
        return deftsim_error_set(DEFTSIM_E_INPUT, "bootstrap: %zu resamples; at least 100 are needed",
                                 o->resamples);
    if (!(o->level > 0 && o->level < 1))
        return deftsim_error_set(DEFTSIM_E_INPUT, "bootstrap: confidence level %g is not in (0, 1)",
                                 o->level);
    return DEFTSIM_OK;
}

/* MT19937 takes a 32-bit seed; fold the 64-bit one so that every bit of it matters. */
static gsl_rng *rng_new(uint64_t seed)
{
    gsl_rng *r = gsl_rng_alloc(gsl_rng_mt19937);
    if (r) gsl_rng_set(r, (unsigned long)(uint32_t)(seed ^ (seed >> 32)));
    return r;
}

/* B medians of resamples of the sorted values x[0..n-1] into reps (sorted on return). */
static void resample_medians(gsl_rng *rng, const double *x, size_t n, size_t B, double *tmp,
                             double *reps)
{
    for (size_t b = 0; b < B; b++) {
        for (size_t i = 0; i < n; i++) tmp[i] = x[gsl_rng_uniform_int(rng, n)];
        reps[b] = deftsim_median(tmp, n);
    }
    gsl_sort(reps, 1, B);
}

deftsim_status deftsim_bootstrap_median(const double *x, size_t n, const deftsim_boot_options *o,
                                        deftsim_estimate *out, double *reps)
{
    out->n = 0;
    out->median = out->mean = out->lo = out->hi = NAN;
    deftsim_status st = check_options(o);
    if (st) return st;
    double *v;
    size_t m;
    if ((st = finite_copy(x, n, &v, &m))) return st;
    if (!m) return DEFTSIM_OK;
    out->n = m;
    out->mean = gsl_stats_mean(v, 1, m);
    out->median = deftsim_median(v, m);
    if (m < 2) {
        free(v);
        return DEFTSIM_OK;
    }
    size_t B = o->resamples;
    double *tmp = malloc(m * sizeof *tmp);
    double *own = reps ? NULL : malloc(B * sizeof *own);
    double *r = reps ? reps : own;
    gsl_rng *rng = rng_new(o->seed);
    if (!tmp || !r || !rng) {
        st = deftsim_error_nomem("bootstrap");
    } else {
        resample_medians(rng, v, m, B, tmp, r);
        double a = (1 - o->level) / 2;
        out->lo = gsl_stats_quantile_from_sorted_data(r, 1, B, a);
        out->hi = gsl_stats_quantile_from_sorted_data(r, 1, B, 1 - a);
    }
    if (rng) gsl_rng_free(rng);
    free(own);
    free(tmp);
    free(v);
    return st;
}

deftsim_status deftsim_bootstrap_ratio(const double *num, size_t nnum, const double *den,
                                       size_t nden, const deftsim_boot_options *o,
                                       deftsim_estimate *out)
{
    out->n = 0;
    out->median = out->mean = out->lo = out->hi = NAN;
    deftsim_status st = check_options(o);
    if (st) return st;
    double *a = NULL, *b = NULL, *ra = NULL, *rb = NULL, *tmp = NULL;
    size_t na, nb;
    gsl_rng *rng = NULL;
    if ((st = finite_copy(num, nnum, &a, &na)) || (st = finite_copy(den, nden, &b, &nb))) goto done;
    if (!na || !nb) goto done;
    out->n = na < nb ? na : nb;
    double ma = deftsim_median(a, na), mb = deftsim_median(b, nb);
    if (!(mb > 0)) goto done;
    out->median = ma / mb;
    /* The mean of a ratio is not the ratio of means; the mean column says the ratio of means,
     * which is what a stacked or summed view of the two samples compares. */
    out->mean = gsl_stats_mean(a, 1, na) / gsl_stats_mean(b, 1, nb);
    if (na < 2 || nb < 2) goto done;
    size_t B = o->resamples;
    ra = malloc(B * sizeof *ra);
    rb = malloc(B * sizeof *rb);
    tmp = malloc((na > nb ? na : nb) * sizeof *tmp);
    rng = rng_new(o->seed);
    if (!ra || !rb || !tmp || !rng) {
        st = deftsim_error_nomem("bootstrap");
        goto done;
    }
    /* Resample each sample, pair the b-th medians: independent draws of both. */
    for (size_t i = 0; i < B; i++) {
        for (size_t j = 0; j < na; j++) tmp[j] = a[gsl_rng_uniform_int(rng, na)];
        ra[i] = deftsim_median(tmp, na);
        for (size_t j = 0; j < nb; j++) tmp[j] = b[gsl_rng_uniform_int(rng, nb)];
        rb[i] = deftsim_median(tmp, nb);
        ra[i] = rb[i] > 0 ? ra[i] / rb[i] : INFINITY;
    }
    gsl_sort(ra, 1, B);
    double al = (1 - o->level) / 2;
    out->lo = gsl_stats_quantile_from_sorted_data(ra, 1, B, al);
    out->hi = gsl_stats_quantile_from_sorted_data(ra, 1, B, 1 - al);
done:
    if (rng) gsl_rng_free(rng);
    free(a);
    free(b);
    free(ra);
    free(rb);
    free(tmp);
    return st;
}

deftsim_status deftsim_fit_line(const double *x, const double *y, size_t n, double level,
                                deftsim_fit *out)
{
    memset(out, 0, sizeof *out);
    out->n = n;
    out->slope = out->intercept = out->slope_se = out->intercept_se = NAN;
    out->slope_lo = out->slope_hi = out->r2 = out->residual_sd = NAN;
    if (!(level > 0 && level < 1))
        return deftsim_error_set(DEFTSIM_E_INPUT, "fit: confidence level %g is not in (0, 1)", level);
    if (n < 2) return deftsim_error_set(DEFTSIM_E_INPUT, "fit: %zu point(s); a line needs 2", n);
    int distinct = 0;
    for (size_t i = 1; i < n; i++)
        if (x[i] != x[0]) distinct = 1;
    if (!distinct) return deftsim_error_set(DEFTSIM_E_INPUT, "fit: every x is %g; a line needs two", x[0]);
    double c0, c1, cov00, cov01, cov11, sumsq;
    if (gsl_fit_linear(x, 1, y, 1, n, &c0, &c1, &cov00, &cov01, &cov11, &sumsq))
        return deftsim_error_set(DEFTSIM_E_RUNTIME, "fit: gsl_fit_linear failed");
    out->slope = c1;
    out->intercept = c0;
    double ybar = gsl_stats_mean(y, 1, n), sst = 0;
    for (size_t i = 0; i < n; i++) sst += (y[i] - ybar) * (y[i] - ybar);
    if (sst > 0) out->r2 = 1 - sumsq / sst;
    /* Two points determine the line: no residual degrees of freedom, no interval. */
    if (n < 3) return DEFTSIM_OK;
    double df = (double)(n - 2);
    out->slope_se = sqrt(cov11);
    out->intercept_se = sqrt(cov00);
    out->residual_sd = sqrt(sumsq / df);
    double t = gsl_cdf_tdist_Pinv(1 - (1 - level) / 2, df);
    out->slope_lo = c1 - t * out->slope_se;
    out->slope_hi = c1 + t * out->slope_se;
    return DEFTSIM_OK;
}

deftsim_status deftsim_fit_loglog(const double *x, const double *y, size_t n, double level,
                                  deftsim_fit *out)
{
    double *lx = malloc((n ? n : 1) * sizeof *lx), *ly = malloc((n ? n : 1) * sizeof *ly);
    if (!lx || !ly) {
        free(lx);
        free(ly);
        return deftsim_error_nomem("fit");
    }
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (x[i] > 0 && y[i] > 0 && isfinite(x[i]) && isfinite(y[i])) {
            lx[m] = log(x[i]);
            ly[m] = log(y[i]);
            m++;
        }
    deftsim_status st = deftsim_fit_line(lx, ly, m, level, out);
    free(lx);
    free(ly);
    return st;
}
