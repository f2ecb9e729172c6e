/* test_analysis.c - the statistics of analysis/ against values found independently of it:
 * NIST's certified results for the Norris data set, fits and quantiles worked out by hand, the
 * exact bootstrap distribution of a three-value sample, the coverage of the bootstrap interval
 * on samples with a known median, and summaries of small hand-written result tables. */
#include <criterion/criterion.h>

#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <gsl/gsl_randist.h>
#include <gsl/gsl_rng.h>

#include "deftsim_analysis.h"
#include "deftsim_sweep.h"
#include "deftsim_util.h"

static char tmpdir[64];

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb; (void)flag; (void)ftw;
    return remove(path);
}

static void setup(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/deftsim-analysis-XXXXXX");
    cr_assert(mkdtemp(tmpdir), "mkdtemp");
}

static void teardown(void) { nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

TestSuite(stats);
TestSuite(csv, .init = setup, .fini = teardown);
TestSuite(summary, .init = setup, .fini = teardown);

static void close_rel(double got, double want, double rel, const char *what)
{
    cr_assert(fabs(got - want) <= rel * fabs(want), "%s: got %.17g, want %.17g", what, got, want);
}

/* ---- median ------------------------------------------------------------------------------ */

Test(stats, median_by_hand)
{
    double a[] = {3, 1, 2};
    cr_assert_eq(deftsim_median(a, 3), 2);
    double b[] = {4, 1, 3, 2};
    cr_assert_eq(deftsim_median(b, 4), 2.5);
    double c[] = {-7.25};
    cr_assert_eq(deftsim_median(c, 1), -7.25);
    cr_assert(isnan(deftsim_median(NULL, 0)));
    double d[] = {10, 10, 1, 10, 2, 3};
    cr_assert_eq(deftsim_median(d, 6), 6.5); /* sorted 1 2 3 10 10 10: (3 + 10) / 2 */
}

/* ---- least squares ------------------------------------------------------------------------- */

/* NIST StRD, linear regression, Norris (lower difficulty): y = B0 + B1 x, 36 observations.
 * https://www.itl.nist.gov/div898/strd/lls/data/Norris.shtml */
static const double norris_x[] = {0.2, 337.4, 118.2, 884.6, 10.1, 226.5, 666.3, 996.3, 448.6,
                                  777.0, 558.2, 0.4, 0.6, 775.5, 666.9, 338.0, 447.5, 11.6,
                                  556.0, 228.1, 995.8, 887.6, 120.2, 0.3, 0.3, 556.8, 339.1,
                                  887.2, 999.0, 779.0, 11.1, 118.3, 229.2, 669.1, 448.9, 0.5};
static const double norris_y[] = {0.1, 338.8, 118.1, 888.0, 9.2, 228.1, 668.5, 998.5, 449.1,
                                  778.9, 559.2, 0.3, 0.1, 778.1, 668.8, 339.3, 448.9, 10.8,
                                  557.7, 228.3, 998.0, 888.8, 119.6, 0.3, 0.6, 557.6, 339.3,
                                  888.0, 998.5, 778.9, 10.2, 117.6, 228.9, 668.4, 449.2, 0.2};

Test(stats, norris_certified_values)
{
    deftsim_fit f;
    cr_assert_eq(deftsim_fit_line(norris_x, norris_y, 36, 0.95, &f), DEFTSIM_OK);
    /* Certified values, 15 significant digits. */
    close_rel(f.slope, 1.00211681802045, 1e-12, "B1");
    close_rel(f.intercept, -0.262323073774029, 1e-10, "B0");
    close_rel(f.slope_se, 0.429796848199937e-3, 1e-10, "sd(B1)");
    close_rel(f.intercept_se, 0.232818234301152, 1e-10, "sd(B0)");
    close_rel(f.residual_sd, 0.884796396144373, 1e-10, "residual sd");
    close_rel(f.r2, 0.999993745883712, 1e-12, "R^2");
    /* 95% interval: B1 +- t(0.975, 34) sd(B1); t(0.975, 34) = 2.03224450931772 (the Student t
     * distribution's quantile, found by integrating its density). */
    double half = 2.03224450931772 * 0.429796848199937e-3;
    close_rel(f.slope_lo, 1.00211681802045 - half, 1e-10, "lo");
    close_rel(f.slope_hi, 1.00211681802045 + half, 1e-10, "hi");
    cr_assert_eq(f.n, 36);
}

/* A fit worked out by hand: P = 1, 2, 4 and t = 1, 4, 8, so ln P = 0, L, 2L and ln t = 0, 2L,
 * 3L with L = ln 2. Means L and 5L/3; Sxy = 3L^2, Sxx = 2L^2, slope 3/2; residuals -L/6, L/3,
 * -L/6, SSE = L^2/6; s^2 = SSE/(n-2) = L^2/6, sd(slope) = sqrt(s^2/Sxx) = sqrt(1/12);
 * SST = 14L^2/3, R^2 = 27/28; t(0.975, 1) = tan(0.475 pi) (Student t with one degree of
 * freedom is the Cauchy distribution). */
Test(stats, loglog_by_hand)
{
    const double P[] = {1, 2, 4}, t[] = {1, 4, 8};
    deftsim_fit f;
    cr_assert_eq(deftsim_fit_loglog(P, t, 3, 0.95, &f), DEFTSIM_OK);
    close_rel(f.slope, 1.5, 1e-14, "slope");
    close_rel(f.intercept, 5 * log(2) / 3 - 1.5 * log(2), 1e-13, "intercept");
    close_rel(f.slope_se, sqrt(1.0 / 12), 1e-13, "sd");
    close_rel(f.r2, 27.0 / 28, 1e-14, "R^2");
    double half = tan(0.475 * M_PI) * sqrt(1.0 / 12);
    close_rel(f.slope_lo, 1.5 - half, 1e-12, "lo");
    close_rel(f.slope_hi, 1.5 + half, 1e-12, "hi");
}

Test(stats, loglog_exact_power_law_and_skipped_points)
{
    /* t = 3 P^-0.75; a point with t = 0 (nothing selected) and one with P = 0 are left out. */
    double P[] = {2, 4, 8, 16, 32, 0, 64}, t[7];
    for (int i = 0; i < 7; i++) t[i] = 3 * pow(P[i], -0.75);
    t[5] = 1;
    double tz[] = {3 * pow(2, -0.75), 0, 3 * pow(8, -0.75), 3 * pow(16, -0.75)};
    deftsim_fit f;
    cr_assert_eq(deftsim_fit_loglog(P, t, 7, 0.95, &f), DEFTSIM_OK);
    cr_assert_eq(f.n, 6);
    close_rel(f.slope, -0.75, 1e-12, "slope");
    close_rel(f.intercept, log(3), 1e-12, "intercept");
    cr_assert_lt(f.slope_se, 1e-12);
    cr_assert_eq(deftsim_fit_loglog(P, tz, 4, 0.95, &f), DEFTSIM_OK);
    cr_assert_eq(f.n, 3);
    close_rel(f.slope, -0.75, 1e-12, "slope without the zero");
}

Test(stats, fit_needs_two_distinct_x)
{
    const double x[] = {4, 4, 4}, y[] = {1, 2, 3};
    deftsim_fit f;
    cr_assert_eq(deftsim_fit_line(x, y, 3, 0.95, &f), DEFTSIM_E_INPUT);
    cr_assert_eq(deftsim_fit_line(x, y, 1, 0.95, &f), DEFTSIM_E_INPUT);
    /* Two points: the line, no interval. */
    const double x2[] = {1, 3}, y2[] = {2, 6};
    cr_assert_eq(deftsim_fit_line(x2, y2, 2, 0.95, &f), DEFTSIM_OK);
    cr_assert_eq(f.slope, 2);
    cr_assert(isnan(f.slope_lo) && isnan(f.slope_hi) && isnan(f.slope_se));
}

/* ---- bootstrap ------------------------------------------------------------------------------ */

static deftsim_boot_options boot(size_t B, uint64_t seed)
{
    deftsim_boot_options o = {.resamples = B, .level = 0.95, .seed = seed};
    return o;
}

Test(stats, bootstrap_small_samples)
{
    deftsim_boot_options o = boot(2000, 5);
    deftsim_estimate e;
    double one[] = {4.5};
    cr_assert_eq(deftsim_bootstrap_median(one, 1, &o, &e, NULL), DEFTSIM_OK);
    cr_assert_eq(e.n, 1);
    cr_assert_eq(e.median, 4.5);
    cr_assert(isnan(e.lo) && isnan(e.hi), "no interval from one value");
    /* Two values a < b: a resample's median is a (1/4), (a+b)/2 (1/2) or b (1/4), so the 2.5%
     * and 97.5% quantiles of 2000 resampled medians are a and b. */
    double two[] = {7, 3};
    cr_assert_eq(deftsim_bootstrap_median(two, 2, &o, &e, NULL), DEFTSIM_OK);
    cr_assert_eq(e.median, 5);
    cr_assert_eq(e.lo, 3);
    cr_assert_eq(e.hi, 7);
    /* NaN values are not part of the sample. */
    double withnan[] = {NAN, 2, NAN};
    cr_assert_eq(deftsim_bootstrap_median(withnan, 3, &o, &e, NULL), DEFTSIM_OK);
    cr_assert_eq(e.n, 1);
    cr_assert_eq(e.median, 2);
    cr_assert_eq(deftsim_bootstrap_median(withnan, 0, &o, &e, NULL), DEFTSIM_OK);
    cr_assert(isnan(e.median));
    o.resamples = 10;
    cr_assert_eq(deftsim_bootstrap_median(two, 2, &o, &e, NULL), DEFTSIM_E_INPUT);
}

/* The exact bootstrap distribution of the median of {1, 2, 10}: of the 27 equally likely
 * resamples, 7 have at least two 1s (median 1: 3 orderings of two 1s and one other value times
 * 2 others, plus 1 1 1), 7 have at least two 10s (median 10), and 13 have median 2. */
Test(stats, bootstrap_matches_the_exact_distribution)
{
    const size_t B = 27000;
    deftsim_boot_options o = boot(B, 99);
    double x[] = {10, 1, 2}, *reps = malloc(B * sizeof *reps);
    deftsim_estimate e;
    cr_assert_eq(deftsim_bootstrap_median(x, 3, &o, &e, reps), DEFTSIM_OK);
    size_t n1 = 0, n2 = 0, n10 = 0;
    for (size_t i = 0; i < B; i++) {
        if (reps[i] == 1) n1++;
        else if (reps[i] == 2) n2++;
        else if (reps[i] == 10) n10++;
        if (i) cr_assert_leq(reps[i - 1], reps[i], "replicates come sorted");
    }
    cr_assert_eq(n1 + n2 + n10, B);
    /* Binomial standard deviation about 0.0027: 0.015 is more than five of them. */
    cr_assert(fabs((double)n1 / B - 7.0 / 27) < 0.015, "P(median 1) = %g", (double)n1 / B);
    cr_assert(fabs((double)n10 / B - 7.0 / 27) < 0.015, "P(median 10) = %g", (double)n10 / B);
    cr_assert(fabs((double)n2 / B - 13.0 / 27) < 0.015, "P(median 2) = %g", (double)n2 / B);
    cr_assert_eq(e.lo, 1);
    cr_assert_eq(e.hi, 10);
    cr_assert_eq(e.median, 2);
    free(reps);
}

Test(stats, bootstrap_is_reproducible_from_its_seed)
{
    double x[] = {5.1, 4.9, 5.6, 7.2, 3.3, 4.4, 6.1, 5.0};
    deftsim_boot_options o = boot(500, 42);
    double r1[500], r2[500], r3[500];
    deftsim_estimate a, b, c;
    cr_assert_eq(deftsim_bootstrap_median(x, 8, &o, &a, r1), DEFTSIM_OK);
    cr_assert_eq(deftsim_bootstrap_median(x, 8, &o, &b, r2), DEFTSIM_OK);
    cr_assert(!memcmp(r1, r2, sizeof r1), "same seed, same resamples");
    cr_assert(a.lo == b.lo && a.hi == b.hi);
    o.seed = 43;
    cr_assert_eq(deftsim_bootstrap_median(x, 8, &o, &c, r3), DEFTSIM_OK);
    cr_assert(memcmp(r1, r3, sizeof r1), "another seed, other resamples");
    cr_assert(a.lo <= a.median && a.median <= a.hi);
}

/* Coverage: samples of 25 from a standard normal (true median 0), drawn by an independent
 * generator; a 95% interval should contain 0 in about 95% of 400 trials (the percentile
 * bootstrap of a median is a little conservative or liberal with small n: 0.88 .. 0.99). */
Test(stats, bootstrap_interval_covers_the_true_median)
{
    gsl_rng *r = gsl_rng_alloc(gsl_rng_ranlxd2);
    gsl_rng_set(r, 2024);
    const int trials = 400, n = 25;
    int covered = 0;
    double x[25];
    for (int t = 0; t < trials; t++) {
        for (int i = 0; i < n; i++) x[i] = gsl_ran_gaussian(r, 1.0);
        deftsim_boot_options o = boot(1000, (uint64_t)t + 1);
        deftsim_estimate e;
        cr_assert_eq(deftsim_bootstrap_median(x, n, &o, &e, NULL), DEFTSIM_OK);
        if (e.lo <= 0 && 0 <= e.hi) covered++;
    }
    gsl_rng_free(r);
    double cov = (double)covered / trials;
    cr_assert(cov >= 0.88 && cov <= 0.99, "coverage %g", cov);
}

Test(stats, bootstrap_ratio_by_hand)
{
    deftsim_boot_options o = boot(2000, 3);
    deftsim_estimate e;
    double num[] = {2, 2, 2}, den[] = {1, 1, 1};
    cr_assert_eq(deftsim_bootstrap_ratio(num, 3, den, 3, &o, &e), DEFTSIM_OK);
    cr_assert(e.median == 2 && e.lo == 2 && e.hi == 2);
    /* median(num) is always 4; a resample of {1, 2} has median 1, 1.5 or 2: ratios 4, 8/3, 2. */
    double n2[] = {4, 4}, d2[] = {1, 2};
    cr_assert_eq(deftsim_bootstrap_ratio(n2, 2, d2, 2, &o, &e), DEFTSIM_OK);
    close_rel(e.median, 8.0 / 3, 1e-15, "ratio of medians");
    cr_assert_eq(e.lo, 2);
    cr_assert_eq(e.hi, 4);
    double zero[] = {0, 0};
    cr_assert_eq(deftsim_bootstrap_ratio(n2, 2, zero, 2, &o, &e), DEFTSIM_OK);
    cr_assert(isnan(e.median), "no ratio over a zero median");
}

/* ---- CSV ------------------------------------------------------------------------------------ */

static char *write_tmp(const char *name, const char *text)
{
    char *path = malloc(256);
    snprintf(path, 256, "%s/%s", tmpdir, name);
    cr_assert_eq(deftsim_write_file_atomic(path, text, strlen(text)), DEFTSIM_OK);
    return path;
}

Test(csv, quotes_newlines_and_empty_cells)
{
    char *p = write_tmp("a.csv", "name,\"x\",note\r\n"
                                 "\"a,b\",1,\"say \"\"hi\"\"\"\r\n"
                                 "plain,,\"two\nlines\"\n"
                                 "\n"
                                 "last,inf,\n");
    deftsim_csvr *r;
    cr_assert_eq(deftsim_csvr_open(p, &r), DEFTSIM_OK, "%s", deftsim_error_message());
    cr_assert_eq(deftsim_csvr_ncols(r), 3);
    cr_assert_eq(deftsim_csvr_find(r, "x"), 1);
    cr_assert_eq(deftsim_csvr_find(r, "nope"), -1);
    int got;
    double v;
    cr_assert_eq(deftsim_csvr_next(r, &got), DEFTSIM_OK);
    cr_assert(got);
    cr_assert_str_eq(deftsim_csvr_field(r, 0), "a,b");
    cr_assert_str_eq(deftsim_csvr_field(r, 2), "say \"hi\"");
    cr_assert_eq(deftsim_csvr_number(r, 1, &v), DEFTSIM_OK);
    cr_assert_eq(v, 1);
    cr_assert_eq(deftsim_csvr_next(r, &got), DEFTSIM_OK);
    cr_assert_str_eq(deftsim_csvr_field(r, 2), "two\nlines");
    cr_assert_eq(deftsim_csvr_number(r, 1, &v), DEFTSIM_OK);
    cr_assert(isnan(v), "an empty cell is undefined");
    cr_assert_eq(deftsim_csvr_line(r), 3);
    cr_assert_eq(deftsim_csvr_next(r, &got), DEFTSIM_OK);
    cr_assert(got, "a blank line is skipped");
    cr_assert_str_eq(deftsim_csvr_field(r, 0), "last");
    cr_assert_eq(deftsim_csvr_line(r), 6);
    cr_assert_eq(deftsim_csvr_number(r, 1, &v), DEFTSIM_OK);
    cr_assert(isinf(v) && v > 0);
    cr_assert_eq(deftsim_csvr_number(r, 0, &v), DEFTSIM_E_INPUT);
    cr_assert(strstr(deftsim_error_message(), "a.csv:6: column name: 'last' is not a number"), "%s",
              deftsim_error_message());
    cr_assert_eq(deftsim_csvr_next(r, &got), DEFTSIM_OK);
    cr_assert(!got);
    deftsim_csvr_close(r);
    free(p);
}

Test(csv, malformed_files_name_the_line)
{
    char *p = write_tmp("b.csv", "a,b\n1,2\n3\n");
    deftsim_csvr *r;
    int got;
    cr_assert_eq(deftsim_csvr_open(p, &r), DEFTSIM_OK);
    cr_assert_eq(deftsim_csvr_next(r, &got), DEFTSIM_OK);
    cr_assert_eq(deftsim_csvr_next(r, &got), DEFTSIM_E_INPUT);
    cr_assert(strstr(deftsim_error_message(), "b.csv:3: 1 fields, but the header has 2"), "%s",
              deftsim_error_message());
    deftsim_csvr_close(r);
    free(p);
    p = write_tmp("c.csv", "a,b\n\"open,2\n");
    cr_assert_eq(deftsim_csvr_open(p, &r), DEFTSIM_OK);
    cr_assert_eq(deftsim_csvr_next(r, &got), DEFTSIM_E_INPUT);
    cr_assert(strstr(deftsim_error_message(), "c.csv:2: a quoted field is not closed"), "%s",
              deftsim_error_message());
    deftsim_csvr_close(r);
    free(p);
    p = write_tmp("d.csv", "a,a\n");
    cr_assert_eq(deftsim_csvr_open(p, &r), DEFTSIM_E_INPUT);
    cr_assert(strstr(deftsim_error_message(), "names column 'a' twice"), "%s", deftsim_error_message());
    free(p);
    p = write_tmp("e.csv", "");
    cr_assert_eq(deftsim_csvr_open(p, &r), DEFTSIM_E_INPUT);
    free(p);
}

/* ---- the summary ---------------------------------------------------------------------------- */

/* Rows as the engine writes them, reduced to the columns the summary reads (plus one it must
 * ignore). Each worker has one row per phase; only phase_index 0 carries weight for worker
 * columns, and iteration columns repeat in every row. */
static const char *const header =
    "scenario,model,method,density,P,iteration,worker,phase_index,phase,select_seconds,"
    "worker_seconds,bytes_sent,buildup,captured_frac,captured_ratio,imbalance_seconds,"
    "imbalance_cost\n";

static void row(FILE *f, const char *method, int P, int it, int w, int phase, double sel,
                double work, double bytes, double buildup, double cap)
{
    fprintf(f, "s,m,%s,0.01,%d,%d,%d,%d,ph%d,%.17g,%.17g,%.17g,%.17g,%.17g,,1.5,1.25\n", method, P, it,
            w, phase, phase, sel, work, bytes, buildup, cap);
}

/* summary.csv cell (row r, named column) as a number; NaN when empty. */
static double sum_cell(const char *path, size_t r, const char *col)
{
    deftsim_csvr *c;
    cr_assert_eq(deftsim_csvr_open(path, &c), DEFTSIM_OK);
    long k = deftsim_csvr_find(c, col);
    cr_assert_geq(k, 0, "summary.csv has no column %s", col);
    int got;
    for (size_t i = 0; i <= r; i++) {
        cr_assert_eq(deftsim_csvr_next(c, &got), DEFTSIM_OK);
        cr_assert(got, "summary.csv has no row %zu", r);
    }
    double v;
    cr_assert_eq(deftsim_csvr_number(c, (size_t)k, &v), DEFTSIM_OK, "%s", deftsim_error_message());
    deftsim_csvr_close(c);
    return v;
}

static const char *sum_text(const char *path, size_t r, const char *col, char *buf, size_t cap)
{
    deftsim_csvr *c;
    cr_assert_eq(deftsim_csvr_open(path, &c), DEFTSIM_OK);
    long k = deftsim_csvr_find(c, col);
    cr_assert_geq(k, 0);
    int got;
    for (size_t i = 0; i <= r; i++) cr_assert_eq(deftsim_csvr_next(c, &got), DEFTSIM_OK);
    snprintf(buf, cap, "%s", deftsim_csvr_field(c, (size_t)k));
    deftsim_csvr_close(c);
    return buf;
}

/* Two methods at P = 2 over three iterations, numbers chosen so that every median can be read
 * off by hand:
 *   topk: slowest-worker selection per iteration 0.004, 0.006, 0.005 -> median 0.005
 *   deft: 0.001, 0.003, 0.002 -> median 0.002; speedup over topk 0.005 / 0.002 = 2.5
 *   bytes per worker: topk (100 + 300)/2 = 200 every iteration; deft worker 0 sends 10, 30, 50
 *   and worker 1 sends 20 -> means 15, 25, 35, median 25, busiest worker median 30.
 * A second phase row per worker carries other values in the worker columns (the engine repeats
 * them, so they are equal there); the summary must read only phase_index 0. */
static char *write_two_methods(void)
{
    char *path = malloc(256);
    snprintf(path, 256, "%s/rows.csv", tmpdir);
    FILE *f = fopen(path, "w");
    cr_assert(f);
    fputs(header, f);
    const double tsel[3][2] = {{0.004, 0.001}, {0.002, 0.006}, {0.005, 0.003}};
    for (int it = 0; it < 3; it++)
        for (int w = 0; w < 2; w++) {
            row(f, "topk", 2, it, w, 0, tsel[it][w], tsel[it][w] + 0.001, w ? 300 : 100,
                1.5 + it, 0.9);
            row(f, "topk", 2, it, w, 1, 99, 99, 1e9, 1.5 + it, 0.9);
        }
    const double dsel[3] = {0.001, 0.003, 0.002};
    for (int it = 0; it < 3; it++)
        for (int w = 0; w < 2; w++) {
            row(f, "deft", 2, it, w, 0, w ? dsel[it] : dsel[it] / 2, dsel[it], w ? 20 : 10 + 20 * it,
                1.0, 0.5 + 0.1 * it);
        }
    fclose(f);
    return path;
}

Test(summary, medians_speedup_and_columns_from_hand_made_rows)
{
    char *rows = write_two_methods();
    deftsim_analysis_options o;
    deftsim_analysis_options_default(&o);
    deftsim_analysis *a;
    cr_assert_eq(deftsim_analysis_new(&o, NULL, 0, &a), DEFTSIM_OK);
    cr_assert_eq(deftsim_analysis_add_file(a, rows, NULL), DEFTSIM_OK, "%s", deftsim_error_message());
    cr_assert_eq(deftsim_analysis_finish(a), DEFTSIM_OK, "%s", deftsim_error_message());
    cr_assert_eq(deftsim_analysis_points(a), 2);
    cr_assert(!deftsim_analysis_has_column(a, DEFTSIM_M_COMM), "no network columns here");
    char out[256], md[256], buf[64];
    snprintf(out, sizeof out, "%s/summary.csv", tmpdir);
    snprintf(md, sizeof md, "%s/summary.md", tmpdir);
    cr_assert_eq(deftsim_analysis_write_csv(a, out), DEFTSIM_OK);
    const char *prov[] = {"Results: hand-made.", NULL};
    cr_assert_eq(deftsim_analysis_write_md(a, md, prov), DEFTSIM_OK);
    deftsim_analysis_free(a);

    /* Rows in order of first appearance: topk, then deft. */
    cr_assert_str_eq(sum_text(out, 0, "method", buf, sizeof buf), "topk");
    cr_assert_str_eq(sum_text(out, 1, "method", buf, sizeof buf), "deft");
    cr_assert_str_eq(sum_text(out, 1, "density", buf, sizeof buf), "0.01");
    cr_assert_eq(sum_cell(out, 0, "iterations"), 3);
    cr_assert_eq(sum_cell(out, 0, "select_seconds_median"), 0.005);
    cr_assert_eq(sum_cell(out, 1, "select_seconds_median"), 0.002);
    close_rel(sum_cell(out, 0, "select_seconds_mean"), 0.015 / 3, 1e-15, "mean");
    /* The slowest worker's compute: topk worker_seconds = select + 0.001. */
    cr_assert_eq(sum_cell(out, 0, "compute_seconds_median"), 0.006);
    cr_assert_eq(sum_cell(out, 0, "bytes_sent_median"), 200);
    cr_assert_eq(sum_cell(out, 0, "bytes_sent_max_median"), 300);
    cr_assert_eq(sum_cell(out, 1, "bytes_sent_median"), 25);
    cr_assert_eq(sum_cell(out, 1, "bytes_sent_max_median"), 30);
    cr_assert_eq(sum_cell(out, 0, "buildup_median"), 2.5);
    cr_assert_eq(sum_cell(out, 0, "buildup_lo"), 1.5);
    cr_assert_eq(sum_cell(out, 0, "buildup_hi"), 3.5);
    close_rel(sum_cell(out, 1, "captured_frac_median"), 0.6, 1e-15, "captured");
    cr_assert(isnan(sum_cell(out, 1, "captured_ratio_median")), "an empty column stays empty");
    cr_assert_eq(sum_cell(out, 1, "imbalance_seconds_median"), 1.5);
    cr_assert(isnan(sum_cell(out, 1, "comm_seconds_median")));
    cr_assert(isnan(sum_cell(out, 1, "iteration_seconds_median")));
    close_rel(sum_cell(out, 1, "select_speedup"), 2.5, 1e-15, "speedup");
    cr_assert_eq(sum_cell(out, 0, "select_speedup"), 1);
    cr_assert_eq(sum_cell(out, 0, "ci_level"), 0.95);
    /* One P per series: no exponent. */
    cr_assert(isnan(sum_cell(out, 0, "select_exponent")));
    double lo = sum_cell(out, 1, "select_seconds_lo"), hi = sum_cell(out, 1, "select_seconds_hi");
    cr_assert(lo >= 0.001 && lo <= 0.002 && hi >= 0.002 && hi <= 0.003, "[%g, %g]", lo, hi);

    char *text;
    size_t len;
    cr_assert_eq(deftsim_read_file(md, &text, &len), DEFTSIM_OK);
    cr_assert(strstr(text, "Results: hand-made."));
    cr_assert(strstr(text, "| topk | 2 | 5 ["), "the selection time in ms:\n%s", text);
    cr_assert(strstr(text, "not in these results"), "says that communication is missing");
    free(text);
    free(rows);
}

/* [compute]: forward and backward rows (phase_kind model) give forward_backward_seconds, and
 * dense's iteration time over topk's is iteration_speedup_dense:
 *   iteration_seconds: dense 0.10, 0.12, 0.11 -> 0.11; topk 0.20, 0.22, 0.21 -> 0.21;
 *   topk's speedup over dense 0.11 / 0.21, dense's 1; forward + backward 0.03 + 0.06. */
Test(summary, forward_backward_and_speedup_over_dense)
{
    char path[256];
    snprintf(path, sizeof path, "%s/rows.csv", tmpdir);
    FILE *f = fopen(path, "w");
    cr_assert(f);
    fputs("model,method,density,P,iteration,worker,phase_index,phase,phase_kind,phase_seconds,"
          "select_seconds,worker_seconds,bytes_sent,buildup,captured_frac,captured_ratio,"
          "imbalance_seconds,imbalance_cost,comm_seconds,iteration_seconds\n", f);
    const char *methods[2] = {"dense", "topk"};
    const double iter[2][3] = {{0.10, 0.12, 0.11}, {0.20, 0.22, 0.21}};
    for (int m = 0; m < 2; m++)
        for (int it = 0; it < 3; it++)
            for (int w = 0; w < 2; w++) {
                const char *tail = m ? "0.001,0.002,100,1,0.5,0.9,1,1" : "0,0,100,1,1,1,,1";
                fprintf(f, "m,%s,0.01,2,%d,%d,0,forward,model,0.03,%s,0.01,%.17g\n", methods[m], it,
                        w, tail, iter[m][it]);
                fprintf(f, "m,%s,0.01,2,%d,%d,1,backward,model,0.06,%s,0.01,%.17g\n", methods[m], it,
                        w, tail, iter[m][it]);
                fprintf(f, "m,%s,0.01,2,%d,%d,2,%s,%s,%s,%s,0.01,%.17g\n", methods[m], it, w,
                        m ? "select" : "values", m ? "compute" : "allreduce", m ? "0.001" : "",
                        tail, iter[m][it]);
            }
    fclose(f);
    deftsim_analysis *a;
    cr_assert_eq(deftsim_analysis_new(NULL, NULL, 0, &a), DEFTSIM_OK);
    cr_assert_eq(deftsim_analysis_add_file(a, path, NULL), DEFTSIM_OK, "%s", deftsim_error_message());
    cr_assert_eq(deftsim_analysis_finish(a), DEFTSIM_OK, "%s", deftsim_error_message());
    char out[256], md[256], buf[64];
    snprintf(out, sizeof out, "%s/summary.csv", tmpdir);
    snprintf(md, sizeof md, "%s/summary.md", tmpdir);
    cr_assert_eq(deftsim_analysis_write_csv(a, out), DEFTSIM_OK);
    cr_assert_eq(deftsim_analysis_write_md(a, md, NULL), DEFTSIM_OK);
    deftsim_analysis_free(a);
    cr_assert_str_eq(sum_text(out, 0, "method", buf, sizeof buf), "dense");
    for (size_t r = 0; r < 2; r++)
        close_rel(sum_cell(out, r, "forward_backward_seconds_median"), 0.09, 1e-15, "forward+backward");
    cr_assert_eq(sum_cell(out, 0, "iteration_speedup_dense"), 1);
    close_rel(sum_cell(out, 1, "iteration_speedup_dense"), 0.11 / 0.21, 1e-12, "speedup over dense");
    close_rel(sum_cell(out, 0, "iteration_speedup"), 0.21 / 0.11, 1e-12, "dense's speedup over topk");
    /* The model rows are not the sparsifier's compute. */
    cr_assert_eq(sum_cell(out, 1, "compute_seconds_median"), 0.002);
    char *text;
    cr_assert_eq(deftsim_read_file(md, &text, NULL), DEFTSIM_OK);
    cr_assert(strstr(text, "iteration speedup over dense"));
    cr_assert(strstr(text, "The iteration time is the whole training step"), "%s", text);
    free(text);
}

Test(summary, exponent_over_P_and_warmup)
{
    /* select time 0.01 P^0.5 at P = 1, 4, 16 (iterations 1 and 2), with a slower warm-up
     * iteration 0 that --warmup 1 leaves out. */
    char path[256];
    snprintf(path, sizeof path, "%s/p.csv", tmpdir);
    FILE *f = fopen(path, "w");
    fputs(header, f);
    const int Ps[] = {1, 4, 16};
    for (int k = 0; k < 3; k++)
        for (int it = 0; it < 3; it++)
            for (int w = 0; w < Ps[k]; w++) {
                double t = 0.01 * sqrt(Ps[k]) * (it == 0 ? 7 : 1);
                row(f, "deft", Ps[k], it, w, 0, t, t, 8, 1, 1);
            }
    fclose(f);
    deftsim_analysis_options o;
    deftsim_analysis_options_default(&o);
    o.warmup = 1;
    deftsim_analysis *a;
    cr_assert_eq(deftsim_analysis_new(&o, NULL, 0, &a), DEFTSIM_OK);
    cr_assert_eq(deftsim_analysis_add_file(a, path, NULL), DEFTSIM_OK, "%s", deftsim_error_message());
    cr_assert_eq(deftsim_analysis_finish(a), DEFTSIM_OK, "%s", deftsim_error_message());
    char out[256];
    snprintf(out, sizeof out, "%s/s.csv", tmpdir);
    cr_assert_eq(deftsim_analysis_write_csv(a, out), DEFTSIM_OK);
    deftsim_analysis_free(a);
    cr_assert_eq(sum_cell(out, 0, "iterations"), 2);
    close_rel(sum_cell(out, 2, "select_seconds_median"), 0.04, 1e-15, "P = 16");
    close_rel(sum_cell(out, 0, "select_exponent"), 0.5, 1e-12, "exponent");
    cr_assert_eq(sum_cell(out, 1, "select_exponent_points"), 3);
    close_rel(sum_cell(out, 2, "select_exponent_r2"), 1, 1e-12, "R^2");
    /* No speedup without topk. */
    cr_assert(isnan(sum_cell(out, 0, "select_speedup")));
}

Test(summary, bad_inputs_are_named)
{
    char *rows = write_two_methods();
    deftsim_analysis *a;
    cr_assert_eq(deftsim_analysis_new(NULL, NULL, 0, &a), DEFTSIM_OK);
    cr_assert_eq(deftsim_analysis_add_file(a, rows, NULL), DEFTSIM_OK);
    /* The same rows twice: more than P workers per iteration. */
    cr_assert_eq(deftsim_analysis_add_file(a, rows, NULL), DEFTSIM_E_INPUT);
    cr_assert(strstr(deftsim_error_message(), "the same point was read twice"), "%s",
              deftsim_error_message());
    deftsim_analysis_free(a);

    char *p = write_tmp("nocol.csv", "model,method,density,P,iteration,worker,phase_index\n");
    cr_assert_eq(deftsim_analysis_new(NULL, NULL, 0, &a), DEFTSIM_OK);
    cr_assert_eq(deftsim_analysis_add_file(a, p, NULL), DEFTSIM_E_INPUT);
    cr_assert(strstr(deftsim_error_message(), "no column 'select_seconds'"), "%s", deftsim_error_message());
    cr_assert_eq(deftsim_analysis_finish(a), DEFTSIM_E_INPUT, "no rows read");
    deftsim_analysis_free(a);
    free(p);

    /* One worker's rows missing from an iteration. */
    char path[256];
    snprintf(path, sizeof path, "%s/short.csv", tmpdir);
    FILE *f = fopen(path, "w");
    fputs(header, f);
    row(f, "topk", 2, 0, 0, 0, 1, 1, 1, 1, 1);
    row(f, "topk", 2, 0, 1, 0, 1, 1, 1, 1, 1);
    row(f, "topk", 2, 1, 0, 0, 1, 1, 1, 1, 1);
    fclose(f);
    cr_assert_eq(deftsim_analysis_new(NULL, NULL, 0, &a), DEFTSIM_OK);
    cr_assert_eq(deftsim_analysis_add_file(a, path, NULL), DEFTSIM_OK);
    cr_assert_eq(deftsim_analysis_finish(a), DEFTSIM_E_INPUT);
    cr_assert(strstr(deftsim_error_message(), "iteration 1: rows of 1 of its 2 workers"), "%s",
              deftsim_error_message());
    deftsim_analysis_free(a);
    free(rows);
}

Test(summary, axes_split_points_and_lead_the_columns)
{
    char *rows = write_two_methods();
    const char *axes[] = {"network.bandwidth"};
    const char *v1[] = {"10Gbps"}, *v2[] = {"100Gbps"};
    deftsim_analysis *a;
    cr_assert_eq(deftsim_analysis_new(NULL, axes, 1, &a), DEFTSIM_OK);
    cr_assert_eq(deftsim_analysis_add_file(a, rows, v1), DEFTSIM_OK);
    cr_assert_eq(deftsim_analysis_add_file(a, rows, v2), DEFTSIM_OK, "other axis values: other points");
    cr_assert_eq(deftsim_analysis_finish(a), DEFTSIM_OK);
    cr_assert_eq(deftsim_analysis_points(a), 4);
    cr_assert_str_eq(deftsim_analysis_column(a, 0), "network.bandwidth");
    cr_assert_str_eq(deftsim_analysis_column(a, 1), "model");
    char out[256], buf[64];
    snprintf(out, sizeof out, "%s/ax.csv", tmpdir);
    cr_assert_eq(deftsim_analysis_write_csv(a, out), DEFTSIM_OK);
    deftsim_analysis_free(a);
    cr_assert_str_eq(sum_text(out, 0, "network.bandwidth", buf, sizeof buf), "10Gbps");
    cr_assert_str_eq(sum_text(out, 3, "network.bandwidth", buf, sizeof buf), "100Gbps");
    close_rel(sum_cell(out, 3, "select_speedup"), 2.5, 1e-15, "speedup within the variant");
    free(rows);
}

/* The slowest worker's compute phases by name (phase_<name>_seconds_mean): rows with the
 * phase columns, one deft point at P = 2 over two iterations.
 *   iteration 0: worker 0 (worker_seconds 0.010) norms 0.004, select 0.006;
 *                worker 1 (0.012, the slowest) norms 0.005, select 0.003, and a phase named
 *                "mystery" 0.004 (counted as other); its allgather row adds nothing.
 *   iteration 1: worker 0 (0.020, the slowest) norms 0.008, select 0.012; worker 1 (0.002)
 *                select 0.002. Worker 0's rows come after worker 1's: order does not matter.
 * Means: norms (0.005 + 0.008) / 2 = 0.0065, select (0.003 + 0.012) / 2 = 0.0075,
 * other 0.002; their sum 0.016 = compute_seconds_mean; merge (not run) 0. */
Test(summary, phases_of_the_slowest_worker_by_name)
{
    char path[256];
    snprintf(path, sizeof path, "%s/phrows.csv", tmpdir);
    FILE *f = fopen(path, "w");
    cr_assert(f);
    fputs("model,method,density,P,iteration,worker,phase_index,phase,phase_kind,phase_seconds,"
          "select_seconds,worker_seconds,bytes_sent,buildup,captured_frac,captured_ratio,"
          "imbalance_seconds,imbalance_cost\n", f);
    const char *it0 =
        "m,deft,0.01,2,0,0,0,norms,compute,0.004,0.01,0.010,8,1,0.5,1,1.2,1\n"
        "m,deft,0.01,2,0,0,1,select,compute,0.006,0.01,0.010,8,1,0.5,1,1.2,1\n"
        "m,deft,0.01,2,0,1,0,norms,compute,0.005,0.012,0.012,8,1,0.5,1,1.2,1\n"
        "m,deft,0.01,2,0,1,1,select,compute,0.003,0.012,0.012,8,1,0.5,1,1.2,1\n"
        "m,deft,0.01,2,0,1,2,mystery,compute,0.004,0.012,0.012,8,1,0.5,1,1.2,1\n"
        "m,deft,0.01,2,0,1,3,indices,allgather,,0.012,0.012,8,1,0.5,1,1.2,1\n";
    const char *it1 =
        "m,deft,0.01,2,1,1,0,norms,compute,0,0.002,0.002,8,1,0.5,1,1.8,1\n"
        "m,deft,0.01,2,1,1,1,select,compute,0.002,0.002,0.002,8,1,0.5,1,1.8,1\n"
        "m,deft,0.01,2,1,0,0,norms,compute,0.008,0.02,0.020,8,1,0.5,1,1.8,1\n"
        "m,deft,0.01,2,1,0,1,select,compute,0.012,0.02,0.020,8,1,0.5,1,1.8,1\n";
    fputs(it0, f);
    fputs(it1, f);
    fclose(f);
    deftsim_analysis *a;
    cr_assert_eq(deftsim_analysis_new(NULL, NULL, 0, &a), DEFTSIM_OK);
    cr_assert_eq(deftsim_analysis_add_file(a, path, NULL), DEFTSIM_OK, "%s", deftsim_error_message());
    cr_assert_eq(deftsim_analysis_finish(a), DEFTSIM_OK, "%s", deftsim_error_message());
    char out[256];
    snprintf(out, sizeof out, "%s/phsummary.csv", tmpdir);
    cr_assert_eq(deftsim_analysis_write_csv(a, out), DEFTSIM_OK);
    deftsim_analysis_free(a);
    close_rel(sum_cell(out, 0, "phase_norms_seconds_mean"), 0.0065, 1e-14, "norms");
    close_rel(sum_cell(out, 0, "phase_select_seconds_mean"), 0.0075, 1e-14, "select");
    close_rel(sum_cell(out, 0, "phase_other_seconds_mean"), 0.002, 1e-14, "other");
    cr_assert_eq(sum_cell(out, 0, "phase_merge_seconds_mean"), 0, "a phase the method lacks: 0");
    close_rel(sum_cell(out, 0, "compute_seconds_mean"), 0.016, 1e-14, "compute");
    double sum = 0;
    const char *names[] = {"norms", "allocate", "pack", "sample", "filter", "select",
                           "merge", "union", "gather", "sum", "residual", "other"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char col[64];
        snprintf(col, sizeof col, "phase_%s_seconds_mean", names[i]);
        sum += sum_cell(out, 0, col);
    }
    close_rel(sum, sum_cell(out, 0, "compute_seconds_mean"), 1e-14, "phases add up to compute");

    /* Rows without the phase columns (the hand-made table above): the cells are empty. */
    char *rows = write_two_methods();
    cr_assert_eq(deftsim_analysis_new(NULL, NULL, 0, &a), DEFTSIM_OK);
    cr_assert_eq(deftsim_analysis_add_file(a, rows, NULL), DEFTSIM_OK);
    cr_assert_eq(deftsim_analysis_finish(a), DEFTSIM_OK);
    cr_assert_eq(deftsim_analysis_write_csv(a, out), DEFTSIM_OK);
    deftsim_analysis_free(a);
    cr_assert(isnan(sum_cell(out, 0, "phase_select_seconds_mean")), "no phase columns: empty");
    free(rows);
}

/* The count-control methods' own quantities: micro at P = 2 over three iterations with
 * thresholds 0.1, 0.3, 0.2 (median 0.2) and padding 0, 0.5, 0.25 (median 0.25); oktopk with
 * local thresholds 1, 2, 3, global 4, 5, 6 and region balance 1.1, 1.3, 1.2; topk without any
 * (empty cells). summary.csv's medians, iterations.csv's per-iteration values in its columns,
 * summary.md's table only for the methods that have them. */
Test(summary, count_control_quantities)
{
    char path[256];
    snprintf(path, sizeof path, "%s/cc.csv", tmpdir);
    FILE *f = fopen(path, "w");
    cr_assert(f);
    fputs("scenario,model,method,density,P,iteration,worker,phase_index,phase,select_seconds,"
          "worker_seconds,bytes_sent,buildup,captured_frac,captured_ratio,imbalance_seconds,"
          "imbalance_cost,threshold,pad_overhead,threshold_local,threshold_global,"
          "region_balance\n", f);
    const double thr[3] = {0.1, 0.3, 0.2}, pad[3] = {0, 0.5, 0.25};
    const double loc[3] = {1, 2, 3}, glob[3] = {4, 5, 6}, bal[3] = {1.1, 1.3, 1.2};
    for (int it = 0; it < 3; it++)
        for (int w = 0; w < 2; w++) {
            fprintf(f, "s,m,topk,0.01,2,%d,%d,0,select,0.001,0.001,10,1.5,0.9,1,1,1,,,,,\n", it, w);
            fprintf(f, "s,m,micro,0.01,2,%d,%d,0,filter,0.001,0.001,10,1.%d,0.9,1,1,1,%.17g,%.17g,,,\n",
                    it, w, it, thr[it], pad[it]);
            fprintf(f, "s,m,oktopk,0.01,2,%d,%d,0,select,0.001,0.001,10,0.9,0.9,1,1,1,,,%.17g,%.17g,%.17g\n",
                    it, w, loc[it], glob[it], bal[it]);
        }
    fclose(f);
    /* The quantities come from the registry's result columns, as deftsim analyze adds them. */
    cr_assert_eq(deftsim_results_add_metrics(), DEFTSIM_OK);
    cr_assert_eq(deftsim_results_add_metrics(), DEFTSIM_OK, "twice: the same quantities");
    deftsim_analysis *a;
    cr_assert_eq(deftsim_analysis_new(NULL, NULL, 0, &a), DEFTSIM_OK);
    cr_assert_eq(deftsim_analysis_add_file(a, path, NULL), DEFTSIM_OK, "%s", deftsim_error_message());
    cr_assert_eq(deftsim_analysis_finish(a), DEFTSIM_OK, "%s", deftsim_error_message());
    char out[256], md[256], its[256], buf[64];
    snprintf(out, sizeof out, "%s/cc_summary.csv", tmpdir);
    snprintf(md, sizeof md, "%s/cc_summary.md", tmpdir);
    snprintf(its, sizeof its, "%s/cc_iterations.csv", tmpdir);
    cr_assert_eq(deftsim_analysis_write_csv(a, out), DEFTSIM_OK);
    cr_assert_eq(deftsim_analysis_write_md(a, md, NULL), DEFTSIM_OK);
    cr_assert_eq(deftsim_analysis_write_iterations(a, its), DEFTSIM_OK, "%s", deftsim_error_message());
    deftsim_analysis_free(a);

    cr_assert_str_eq(sum_text(out, 1, "method", buf, sizeof buf), "micro");
    cr_assert(isnan(sum_cell(out, 0, "threshold_median")), "topk has no threshold");
    cr_assert_eq(sum_cell(out, 1, "threshold_median"), 0.2);
    cr_assert_eq(sum_cell(out, 1, "threshold_lo"), 0.1);
    cr_assert_eq(sum_cell(out, 1, "threshold_hi"), 0.3);
    cr_assert_eq(sum_cell(out, 1, "pad_overhead_median"), 0.25);
    cr_assert(isnan(sum_cell(out, 1, "region_balance_median")), "micro has no regions");
    cr_assert_eq(sum_cell(out, 2, "threshold_local_median"), 2);
    cr_assert_eq(sum_cell(out, 2, "threshold_global_median"), 5);
    cr_assert_eq(sum_cell(out, 2, "region_balance_median"), 1.2);
    cr_assert(isnan(sum_cell(out, 2, "pad_overhead_median")));

    /* iterations.csv: rows in point order (topk, micro, oktopk), iterations ascending. */
    cr_assert(isnan(sum_cell(its, 0, "threshold")));
    cr_assert_eq(sum_cell(its, 3 + 1, "threshold"), 0.3);
    cr_assert_eq(sum_cell(its, 3 + 2, "pad_overhead"), 0.25);
    cr_assert_eq(sum_cell(its, 6 + 0, "threshold_local"), 1);
    cr_assert_eq(sum_cell(its, 6 + 2, "threshold_global"), 6);
    cr_assert_eq(sum_cell(its, 6 + 1, "region_balance"), 1.3);

    char *text;
    size_t len;
    cr_assert_eq(deftsim_read_file(md, &text, &len), DEFTSIM_OK);
    cr_assert(strstr(text, "The methods' own quantities per iteration"), "%s", text);
    cr_assert(strstr(text, "| micro | 2 | 1.1 [1, 1.2] | 0.2 [0.1, 0.3] | 0.25 [0, 0.5] | - | - | - |"),
              "%s", text);
    cr_assert(strstr(text, "| oktopk | 2 | 0.9 [0.9, 0.9] | - | - | 2 [1, 3] | 5 [4, 6] | 1.2 [1.1, 1.3] |"),
              "%s", text);
    cr_assert(!strstr(text, "| topk | 2 | 1.5 | -"), "topk is not in the count-control table");
    free(text);
}

/* SIDCo's stages column reaches summary.csv and summary.md through its registry entry alone
 * (sp_sidco.c's columns, summarised by their median): stages 1, 3, 2 over three iterations
 * (median 2); the threshold methods fill count_ratio, threshold and pad_overhead as MiCRO. */
Test(summary, sidco_stages)
{
    char path[256];
    snprintf(path, sizeof path, "%s/sidco.csv", tmpdir);
    FILE *f = fopen(path, "w");
    cr_assert(f);
    fputs("scenario,model,method,density,P,iteration,worker,phase_index,phase,select_seconds,"
          "worker_seconds,bytes_sent,buildup,captured_frac,captured_ratio,imbalance_seconds,"
          "imbalance_cost,threshold,pad_overhead,stages\n", f);
    const double stages[3] = {1, 3, 2};
    for (int it = 0; it < 3; it++)
        for (int w = 0; w < 2; w++)
            fprintf(f, "s,m,sidco,0.01,2,%d,%d,0,fit,0.001,0.001,10,1,0.9,1,1,1,0.5,0,%g\n", it,
                    w, stages[it]);
    fclose(f);
    cr_assert_eq(deftsim_results_add_metrics(), DEFTSIM_OK);
    deftsim_analysis *a;
    cr_assert_eq(deftsim_analysis_new(NULL, NULL, 0, &a), DEFTSIM_OK);
    cr_assert_eq(deftsim_analysis_add_file(a, path, NULL), DEFTSIM_OK, "%s", deftsim_error_message());
    cr_assert_eq(deftsim_analysis_finish(a), DEFTSIM_OK, "%s", deftsim_error_message());
    char out[256], md[256];
    snprintf(out, sizeof out, "%s/sidco_summary.csv", tmpdir);
    snprintf(md, sizeof md, "%s/sidco_summary.md", tmpdir);
    cr_assert_eq(deftsim_analysis_write_csv(a, out), DEFTSIM_OK);
    cr_assert_eq(deftsim_analysis_write_md(a, md, NULL), DEFTSIM_OK);
    deftsim_analysis_free(a);
    cr_assert_eq(sum_cell(out, 0, "stages_median"), 2);
    cr_assert_eq(sum_cell(out, 0, "stages_lo"), 1);
    cr_assert_eq(sum_cell(out, 0, "stages_hi"), 3);
    char *text;
    size_t len;
    cr_assert_eq(deftsim_read_file(md, &text, &len), DEFTSIM_OK);
    cr_assert(strstr(text, "| method | P | build-up | threshold | padding | stages |"), "%s", text);
    cr_assert(strstr(text, "| sidco | 2 | 1 [1, 1] | 0.5 [0.5, 0.5] | 0 [0, 0] | 2 [1, 3] |"),
              "%s", text);
    free(text);
}
