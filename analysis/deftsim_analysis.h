/* deftsim_analysis.h - statistics over result rows (GSL): medians with bootstrap confidence
 * intervals, log-log scaling fits, speedups, and the summary tables `deftsim analyze` writes
 * (docs/ANALYSIS.md defines every number).
 *
 * Three layers, each usable alone:
 *   - a streaming reader of CSV files (RFC 4180, a header row, cells looked up by name);
 *   - statistics on plain arrays: the median, a percentile-bootstrap confidence interval of
 *     the median (and of a ratio of two medians), an ordinary least-squares line with a
 *     t-based confidence interval of its slope, on raw or log-log data;
 *   - the summary: rows of deftsim's tidy CSV (docs/OUTPUT.md) folded into per-iteration
 *     values of each point, then into one summary row per point.
 *
 * Nothing here knows the engine: a point is recognised by the columns model, method, density
 * and P of its rows (plus any sweep axes the caller names), so the summary reads files written
 * by any deftsim version that has those columns. Columns that later versions add (the network
 * simulation's comm_seconds, iteration_seconds, select_critical_seconds) are used when present
 * and reported as absent otherwise, never invented. */
#ifndef DEFTSIM_ANALYSIS_H
#define DEFTSIM_ANALYSIS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "deftsim_error.h"

/* ---- CSV reading ---------------------------------------------------------------------------- */

typedef struct deftsim_csvr deftsim_csvr;

/* Opens a CSV file and reads its header. DEFTSIM_E_IO if it cannot be read, DEFTSIM_E_INPUT if
 * it has no header or a malformed one. */
deftsim_status deftsim_csvr_open(const char *path, deftsim_csvr **out);
void deftsim_csvr_close(deftsim_csvr *r);

size_t deftsim_csvr_ncols(const deftsim_csvr *r);
const char *deftsim_csvr_colname(const deftsim_csvr *r, size_t i);
/* Index of a column, or -1 if the header has none of that name. */
long deftsim_csvr_find(const deftsim_csvr *r, const char *name);

/* Reads the next record: *got = 1 and its cells through deftsim_csvr_field(), or *got = 0 at
 * the end of the file. A record whose field count differs from the header's, or an unclosed
 * quote, is DEFTSIM_E_INPUT naming the file and line. Blank lines are skipped. */
deftsim_status deftsim_csvr_next(deftsim_csvr *r, int *got);
/* Cell i of the current record (quotes removed); valid until the next call. */
const char *deftsim_csvr_field(const deftsim_csvr *r, size_t i);
/* Line number (from 1) where the current record starts. */
size_t deftsim_csvr_line(const deftsim_csvr *r);
const char *deftsim_csvr_path(const deftsim_csvr *r);

/* A cell as a number: "" (an undefined cell) is NaN; anything else must parse completely
 * (deftsim_parse_double) or the call fails naming the file, line and column. */
deftsim_status deftsim_csvr_number(const deftsim_csvr *r, size_t col, double *out);

/* ---- the real network mode's table (measured.c, docs/CLUSTER.md "Real mode") ------------- */

typedef struct deftsim_measured deftsim_measured;

deftsim_status deftsim_measured_new(deftsim_measured **out);
void deftsim_measured_free(deftsim_measured *m);
/* Reads a file of deftsim rows; the rows without comm_measured_seconds (and files without the
 * real mode's columns) add nothing. */
deftsim_status deftsim_measured_add_file(deftsim_measured *m, const char *path);
/* Groups (method, density, P, collective or the whole iteration) with measured times. */
size_t deftsim_measured_count(const deftsim_measured *m);
/* measured.csv: one line a group (docs/ANALYSIS.md), written atomically. */
deftsim_status deftsim_measured_write_csv(const deftsim_measured *m, const char *path);
/* The table as Markdown, with its heading. */
void deftsim_measured_write_md(const deftsim_measured *m, FILE *f);

/* ---- statistics ---------------------------------------------------------------------------- */

/* Median of n values (sorts x in place); NaN when n = 0. For even n, the mean of the two middle
 * values (gsl_stats_median_from_sorted_data). */
double deftsim_median(double *x, size_t n);

typedef struct {
    size_t n;          /* finite values the estimate is based on */
    double median;     /* NaN when n = 0 */
    double mean;       /* NaN when n = 0 */
    double lo, hi;     /* confidence interval of the median; NaN when n < 2 */
} deftsim_estimate;

typedef struct {
    size_t resamples;  /* bootstrap resamples B (>= 100) */
    double level;      /* confidence level, in (0, 1), e.g. 0.95 */
    uint64_t seed;     /* seeds the resampling (MT19937); the same seed gives the same interval */
} deftsim_boot_options;

/* Median of x (NaN values are skipped) and its percentile-bootstrap confidence interval: B
 * resamples of the n values with replacement, the median of each, and the (1-level)/2 and
 * 1-(1-level)/2 quantiles of those B medians. With n < 2 there is nothing to resample: lo and
 * hi are NaN. When reps is not NULL it receives the B resampled medians, sorted (n >= 2). */
deftsim_status deftsim_bootstrap_median(const double *x, size_t n, const deftsim_boot_options *o,
                                        deftsim_estimate *out, double *reps);

/* median(num) / median(den) and a percentile-bootstrap interval of that ratio, num and den
 * resampled independently (two samples: e.g. the iterations of topk and of another method at
 * the same P). NaN when either sample is empty or median(den) is not positive; lo, hi NaN
 * when either sample has fewer than 2 values. out->n is min(n_num, n_den). */
deftsim_status deftsim_bootstrap_ratio(const double *num, size_t nnum, const double *den,
                                       size_t nden, const deftsim_boot_options *o,
                                       deftsim_estimate *out);

typedef struct {
    size_t n;              /* points used */
    double slope, intercept;
    double slope_se, intercept_se;  /* standard errors; NaN when n < 3 */
    double slope_lo, slope_hi;      /* slope +- t(1-(1-level)/2, n-2) * slope_se; NaN when n < 3 */
    double r2;             /* coefficient of determination; NaN when y is constant */
    double residual_sd;    /* sqrt(SSE / (n - 2)); NaN when n < 3 */
} deftsim_fit;

/* Ordinary least squares y = intercept + slope x (gsl_fit_linear). Needs n >= 2 distinct x;
 * DEFTSIM_E_INPUT otherwise. */
deftsim_status deftsim_fit_line(const double *x, const double *y, size_t n, double level,
                                deftsim_fit *out);

/* The same on ln x, ln y: the slope is the exponent b of y = a x^b (base independent; the
 * intercept is ln a). Pairs where x or y is not a positive finite number are left out; out->n
 * says how many were used. */
deftsim_status deftsim_fit_loglog(const double *x, const double *y, size_t n, double level,
                                  deftsim_fit *out);

/* ---- the summary --------------------------------------------------------------------------- */

/* The per-iteration quantities of a point, in summary.csv's column order. */
typedef enum {
    DEFTSIM_M_SELECT,        /* max over workers of select_seconds: the slowest worker's selection */
    DEFTSIM_M_COMPUTE,       /* max over workers of worker_seconds: the slowest worker's compute */
    DEFTSIM_M_SELECT_CRIT,   /* select_critical_seconds (network simulation; absent before it) */
    DEFTSIM_M_COMM,          /* comm_seconds (network simulation) */
    DEFTSIM_M_ITERATION,     /* iteration_seconds (network simulation) */
    DEFTSIM_M_BYTES,         /* mean over workers of bytes_sent */
    DEFTSIM_M_BYTES_MAX,     /* max over workers of bytes_sent */
    DEFTSIM_M_BUILDUP,       /* buildup */
    DEFTSIM_M_CAPTURED,      /* captured_frac */
    DEFTSIM_M_CAPTURED_RATIO,/* captured_ratio */
    DEFTSIM_M_IMBALANCE,     /* imbalance_seconds */
    DEFTSIM_M_IMBALANCE_COST,/* imbalance_cost */
    DEFTSIM_M_SELECT_MEDIAN, /* median over workers of select_seconds: the median worker's selection */
    DEFTSIM_M_REP_SPREAD,    /* median over workers of (select_seconds_max - _min) / _min: how far
                                the timing repetitions spread (absent in rows before [timing]) */
    DEFTSIM_M_FWDBWD,        /* the training step's forward and backward pass ([compute]: the
                                phase_kind model rows of a worker); empty without [compute] */
    DEFTSIM_M_REF,              /* ref_seconds: the reference beside the timing repetitions */
    DEFTSIM_M_SELECT_REF,       /* the slowest worker's selection over ref_seconds */
    DEFTSIM_M_SELECT_MEDIAN_REF,/* the median worker's selection over ref_seconds */
    DEFTSIM_M_BASE_COUNT     /* the quantities of every table; the sparsifiers' own result
                                columns follow (deftsim_metric_add) */
} deftsim_metric;

/* Most quantities, the base ones and those added together. */
#define DEFTSIM_M_MAX (DEFTSIM_M_BASE_COUNT + 24)

typedef struct {
    const char *name;      /* summary.csv's column stem ("select_seconds", ...) */
    const char *column;    /* the rows' column it comes from */
    const char *unit;      /* "s", "B", "ratio", "fraction" */
    const char *doc;       /* one line */
    int optional;          /* 1: a column not every deftsim table has (the network
                              simulation's, the timing protocol's, the sparsifiers' own) */
    const char *title;     /* summary.md's heading of an added quantity; NULL for the base */
} deftsim_metric_info;

/* Quantities known: DEFTSIM_M_BASE_COUNT plus those added. */
size_t deftsim_metric_count(void);
/* Metric m's description; NULL past the end. */
const deftsim_metric_info *deftsim_metric_get(deftsim_metric m);
/* Adds a sparsifier's own result column as a quantity: read from the rows' column of that
 * name (optional: empty for the other methods, absent in older rows), one value per iteration,
 * summarised like the others in summary.csv (NAME_median, ...), iterations.csv and a table of
 * summary.md. The strings must outlive the process's use of them. A name already known adds
 * nothing. DEFTSIM_E_USAGE when DEFTSIM_M_MAX are known. Not thread-safe: call before any
 * analysis starts. Nothing here knows the sparsifiers: libdeftsim adds the registry's columns
 * (deftsim_results_add_metrics). */
deftsim_status deftsim_metric_add(const char *column, const char *unit, const char *title,
                                  const char *doc);

typedef struct {
    deftsim_boot_options boot;
    size_t warmup;         /* iterations 0 .. warmup-1 of every point are left out */
    double noisy_spread;   /* a point whose select_spread median exceeds this is flagged noisy */
} deftsim_analysis_options;

/* The default threshold of the noise flag (docs/TIMING.md): the timing repetitions of a
 * worker's selection spread by more than 25% of the fastest, at the median worker-iteration. */
#define DEFTSIM_NOISY_SPREAD 0.25

/* Whether a point with this spread (its select_spread median; NaN: unknown) is flagged. */
int deftsim_analysis_is_noisy(double spread, double threshold);

/* The noise flag of one point file (or any rows of one point): its select_spread median over
 * the iterations from warmup on, into *spread (NaN when the rows have no repetition columns);
 * *noisy is deftsim_analysis_is_noisy of it. */
deftsim_status deftsim_analysis_point_noise(const char *path, size_t warmup, double threshold,
                                            double *spread, int *noisy);

/* B = 2000, level 0.95, seed 1, warmup 0. */
void deftsim_analysis_options_default(deftsim_analysis_options *o);

typedef struct deftsim_analysis deftsim_analysis;

/* axes: names of the sweep axes (e.g. "gradients.model", "network.bandwidth") whose values
 * each file's rows take; they become leading columns of summary.csv and part of every key. */
deftsim_status deftsim_analysis_new(const deftsim_analysis_options *o, const char *const *axes,
                                    size_t naxes, deftsim_analysis **out);
void deftsim_analysis_free(deftsim_analysis *a);

/* Reads every row of a CSV file of deftsim rows (a point file or a rows.csv); values are the
 * file's values of the axes (naxes of them, as passed to _new). Rows are grouped by (axes,
 * model, method, density, P); a (point, iteration, worker) seen twice is DEFTSIM_E_INPUT
 * (the same rows read from two files). */
deftsim_status deftsim_analysis_add_file(deftsim_analysis *a, const char *path,
                                         const char *const *values);

/* Computes every estimate, fit and speedup. Call once, after the last file. DEFTSIM_E_INPUT
 * when no rows were read. */
deftsim_status deftsim_analysis_finish(deftsim_analysis *a);

size_t deftsim_analysis_points(const deftsim_analysis *a);
/* Whether some file had the metric's column, and whether some value of it was defined. */
int deftsim_analysis_has_column(const deftsim_analysis *a, deftsim_metric m);
int deftsim_analysis_has_values(const deftsim_analysis *a, deftsim_metric m);

/* One row per point, columns as docs/ANALYSIS.md lists them; written atomically. */
deftsim_status deftsim_analysis_write_csv(const deftsim_analysis *a, const char *path);

/* One row per iteration of every point: the axes, model, method, density, P, iteration,
 * warmup (1 for the iterations the summary leaves out), buildup (|U| / k: for MiCRO and
 * ExDyna their count against k, K / k), captured_frac and captured_ratio of that iteration,
 * then the added quantities (deftsim_metric_add);
 * docs/ANALYSIS.md. Written atomically. */
deftsim_status deftsim_analysis_write_iterations(const deftsim_analysis *a, const char *path);

/* A readable report: what was read, how each number is defined, per (axes, model, density) a
 * table of the points, the scaling exponents and what is missing. provenance: lines of text
 * placed under the title (NULL-terminated array, may be NULL). Written atomically. */
deftsim_status deftsim_analysis_write_md(const deftsim_analysis *a, const char *path,
                                         const char *const *provenance);

/* The conditions of a series (docs/ANALYSIS.md): fn writes into buf the line summary.md shows
 * under the heading of the series whose axes (naxes names, as passed to _new) take these
 * values, such as "network: preset dgx-h100, NCCL (nccl_algorithm ring), model LV08; compute
 * phases (selection etc.) timed on this machine's CPU (...)"; "" shows nothing. The caller
 * (which can read the results' manifest; this library cannot) keeps ctx alive until
 * deftsim_analysis_write_md returns. fn = NULL: no such lines. */
typedef void (*deftsim_analysis_note_fn)(void *ctx, const char *const *axes,
                                         const char *const *values, size_t naxes, char *buf,
                                         size_t cap);
void deftsim_analysis_set_note(deftsim_analysis *a, deftsim_analysis_note_fn fn, void *ctx);

/* summary.csv's column i (in order; NULL past the last). */
const char *deftsim_analysis_column(const deftsim_analysis *a, size_t i);

#endif
