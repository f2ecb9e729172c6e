/* cmd_plot.c - `deftsim plot`: figures from summary.csv with the gnuplot scripts of plots/.
 *
 * For each combination of sweep axes, model and density in summary.csv, and each figure, this
 * writes the figure's data (plots/data/<figure>[_<combination>].dat: gnuplot blocks, one per
 * method or worker count) and runs plots/<figure>.gp on it once per image format. The scripts
 * hold every visual decision; this file only selects, scales and arranges numbers. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "cli_train.h"
#include "deftsim_analysis.h"
#include "deftsim_conditions.h"
#include "deftsim_plots_path.h"
#include "deftsim_sparsify.h"
#include "deftsim_train_results.h"
#include "deftsim_util.h"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: deftsim plot DIR [--format png,svg,pdf] [--pdf] [--scripts DIR] [--quiet]\n"
            "\n"
            "Draws the figures of a results folder from its summary.csv (run 'deftsim analyze DIR'\n"
            "first) into DIR/plots/, as PNG and SVG (PDF on request):\n"
            "  select_vs_P      selection time of the slowest worker (and, dashed, of the median\n"
            "                   worker) vs P (log2 axis)\n"
            "  speedup_vs_P     selection speedup over topk vs P\n"
            "  bytes_vs_P       bytes sent per worker vs P: the mean and the busiest worker\n"
            "  buildup_vs_P     gradient build-up |U|/k vs P\n"
            "  comm_vs_P        communication time vs P (when the network was simulated)\n"
            "  iteration_vs_P   simulated time per iteration vs P (when the network was simulated):\n"
            "                   sparsification + communication, with [compute] the whole step\n"
            "  breakdown        an iteration's time per sparsifier: compute phases by name, waiting,\n"
            "                   communication\n"
            "  imbalance_vs_P   load imbalance of the selection vs P (a method at P by construction,\n"
            "                   CLT-k, is left out and named)\n"
            "  captured_vs_P    captured gradient norm vs P\n"
            "Error bars are the confidence intervals of summary.csv. One set of figures per model\n"
            "and density (and sweep variant); file names carry them when there are several. The\n"
            "figures' data go to DIR/plots/data/. Needs gnuplot with the cairo terminals.\n"
            "A deftsim train folder (no summary.csv needed) gets its training curves instead:\n"
            "  test_accuracy_vs_iteration, test_accuracy_vs_time, test_loss_vs_iteration,\n"
            "  test_loss_vs_time   test accuracy and loss per method (from iteration 0, the\n"
            "                      initial model), one set per density and P\n"
            "Every figure names, under its subtitle, the network (preset, collective library and\n"
            "algorithm, network model) and where the compute phases were timed, from DIR's\n"
            "manifest.json; points flagged noisy in summary.csv get an open circle (a bar of\n"
            "breakdown: \"(noisy)\" in its label).\n"
            "\n"
            "  -f, --format LIST   image formats, comma-separated: png, svg, pdf (default png,svg)\n"
            "      --pdf           add pdf to the formats\n"
            "  -S, --scripts DIR   the gnuplot scripts (default: $DEFTSIM_PLOTS_DIR, else the\n"
            "                      source tree's plots/)\n"
            "  -q, --quiet         no list of written files\n"
            "  -h, --help          this help\n"
            "\n"
            "Exit status: 0 done, 2 bad usage or no summary.csv, 1 gnuplot failed.\n");
}

/* ---- summary.csv in memory ----------------------------------------------------------------- */

typedef struct {
    char **cell;      /* ncols */
} srow;

typedef struct {
    char **cols;
    size_t ncols, naxes;   /* axes: the columns before "model" */
    srow *rows;
    size_t nrows;
} stable;

static void stable_free(stable *t)
{
    for (size_t r = 0; r < t->nrows; r++) {
        for (size_t c = 0; c < t->ncols; c++) free(t->rows[r].cell[c]);
        free(t->rows[r].cell);
    }
    free(t->rows);
    for (size_t c = 0; c < t->ncols; c++) free(t->cols[c]);
    free(t->cols);
    memset(t, 0, sizeof *t);
}

/* Reads a CSV table of deftsim analyze: summary.csv (need: select_seconds_median) or
 * iterations.csv (need: buildup). */
static deftsim_status stable_load(const char *path, const char *need, stable *t)
{
    memset(t, 0, sizeof *t);
    deftsim_csvr *r;
    deftsim_status st = deftsim_csvr_open(path, &r);
    if (st) return st;
    t->ncols = deftsim_csvr_ncols(r);
    t->cols = calloc(t->ncols, sizeof *t->cols);
    if (!t->cols) {
        deftsim_csvr_close(r);
        return deftsim_error_nomem("plot");
    }
    for (size_t c = 0; c < t->ncols; c++) t->cols[c] = strdup(deftsim_csvr_colname(r, c));
    long m = deftsim_csvr_find(r, "model");
    if (m < 0 || deftsim_csvr_find(r, need) < 0) {
        deftsim_csvr_close(r);
        return deftsim_error_set(DEFTSIM_E_INPUT, "%s: not written by deftsim analyze (no model "
                                                  "or %s column)",
                                 path, need);
    }
    t->naxes = (size_t)m;
    int got;
    while (!(st = deftsim_csvr_next(r, &got)) && got) {
        srow *p = realloc(t->rows, (t->nrows + 1) * sizeof *p);
        if (!p) {
            st = deftsim_error_nomem("plot");
            break;
        }
        t->rows = p;
        srow *row = &t->rows[t->nrows];
        row->cell = calloc(t->ncols, sizeof *row->cell);
        if (!row->cell) {
            st = deftsim_error_nomem("plot");
            break;
        }
        t->nrows++;
        for (size_t c = 0; c < t->ncols; c++)
            if (!(row->cell[c] = strdup(deftsim_csvr_field(r, c)))) {
                st = deftsim_error_nomem("plot");
                break;
            }
        if (st) break;
    }
    deftsim_csvr_close(r);
    if (!st && !t->nrows) st = deftsim_error_set(DEFTSIM_E_INPUT, "%s: no rows", path);
    return st;
}

static long colidx(const stable *t, const char *name)
{
    for (size_t c = 0; c < t->ncols; c++)
        if (!strcmp(t->cols[c], name)) return (long)c;
    return -1;
}

static const char *cellv(const stable *t, size_t r, const char *name)
{
    long c = colidx(t, name);
    return c < 0 ? "" : t->rows[r].cell[c];
}

static double numv(const stable *t, size_t r, const char *name)
{
    double v;
    const char *s = cellv(t, r, name);
    if (!*s || deftsim_parse_double(s, &v)) return NAN;
    return v;
}

/* Rows r and q belong to the same figure: same axes, model and density. */
static int same_combo(const stable *t, size_t r, size_t q)
{
    for (size_t c = 0; c < t->naxes; c++)
        if (strcmp(t->rows[r].cell[c], t->rows[q].cell[c])) return 0;
    return !strcmp(cellv(t, r, "model"), cellv(t, q, "model")) &&
           !strcmp(cellv(t, r, "density"), cellv(t, q, "density"));
}

/* ---- figures ----------------------------------------------------------------------------- */

typedef struct {
    const char *name;      /* the script plots/<name>.gp and the image's stem */
    const char *stem;      /* summary.csv columns <stem>_median, _lo, _hi */
    const char *lo, *hi;   /* when the columns are named otherwise (speedups) */
    double scale;          /* seconds -> ms, bytes -> MB */
    int logy;              /* values <= 0 cannot be drawn */
    const char *missing;   /* why a figure without data is left out */
    const char *stem2;     /* a second quantity drawn beside the first (its blocks follow), or NULL */
    int drop_at_P;         /* leave out a method whose every median equals P (one worker does all) */
    int timed;             /* a timed quantity: the data get a fifth column, summary.csv's noisy
                              flag, and the figure marks those points */
} line_figure;

static const line_figure line_figures[] = {
    {"select_vs_P", "select_seconds", NULL, NULL, 1e3, 1, "no selection times",
     "select_median_worker_seconds", 0, 1},
    {"speedup_vs_P", "select_speedup", "select_speedup_lo", "select_speedup_hi", 1, 1,
     "no topk points to compare with", NULL, 0, 1},
    {"bytes_vs_P", "bytes_sent", NULL, NULL, 1e-6, 1, "no bytes sent (P = 1 only?)", "bytes_sent_max",
     0, 0},
    {"buildup_vs_P", "buildup", NULL, NULL, 1, 1, "no build-up values", NULL, 0, 0},
    {"comm_vs_P", "comm_seconds", NULL, NULL, 1e3, 1,
     "no communication times: the rows have no network simulation (comm_seconds)", NULL, 0, 1},
    {"iteration_vs_P", "iteration_seconds", NULL, NULL, 1e3, 1,
     "no iteration times: the rows have no network simulation (iteration_seconds)", NULL, 0, 1},
    {"imbalance_vs_P", "imbalance_seconds", NULL, NULL, 1, 1, "no imbalance values", NULL, 1, 1},
    {"captured_vs_P", "captured_frac", NULL, NULL, 1, 0, "no captured-norm values", NULL, 0, 0},
};

typedef struct {
    const char *outdir;       /* DIR/plots */
    const char *scripts;
    char formats[3][8];
    size_t nformats;
    int quiet;
    size_t written;
    char **notes;             /* figures left out, with the reason */
    size_t nnotes;
} plot_ctx;

static void add_note(plot_ctx *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add_note(plot_ctx *x, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    char **p = realloc(x->notes, (x->nnotes + 1) * sizeof *p);
    if (!p) return;
    x->notes = p;
    if ((x->notes[x->nnotes] = strdup(buf))) x->nnotes++;
}

/* Renders one figure in every format. extra: more "name=value;" statements, or "". */
static deftsim_status render(plot_ctx *x, const char *fig, const char *stem, const char *datafile,
                             const char *methods, const char *subtitle, const char *omitted,
                             const char *extra)
{
    char script[4200];
    snprintf(script, sizeof script, "%s/%s.gp", x->scripts, fig);
    if (access(script, R_OK) != 0)
        return deftsim_error_set(DEFTSIM_E_INPUT, "plot: %s: %s (--scripts names the folder)", script,
                                 strerror(errno));
    for (size_t i = 0; i < x->nformats; i++) {
        char out[4300];
        snprintf(out, sizeof out, "%s/%s.%s", x->outdir, stem, x->formats[i]);
        char *vars = NULL;
        size_t vl = 0;
        FILE *v = open_memstream(&vars, &vl);
        if (!v) return deftsim_error_nomem("plot");
        fprintf(v, "term=");
        deftsim_cli_gp_quote(v, x->formats[i]);
        fprintf(v, "; outfile=");
        deftsim_cli_gp_quote(v, out);
        fprintf(v, "; datafile=");
        deftsim_cli_gp_quote(v, datafile);
        fprintf(v, "; plotdir=");
        deftsim_cli_gp_quote(v, x->scripts);
        fprintf(v, "; methods=");
        deftsim_cli_gp_quote(v, methods);
        fprintf(v, "; subtitle=");
        deftsim_cli_gp_quote(v, subtitle);
        fprintf(v, "; omitted=");
        deftsim_cli_gp_quote(v, omitted);
        fprintf(v, "; %s", extra);
        fclose(v);
        deftsim_status st = deftsim_cli_gnuplot_run(vars, script);
        free(vars);
        if (st) return st;
        struct stat sb;
        if (stat(out, &sb) != 0 || sb.st_size == 0)
            return deftsim_error_set(DEFTSIM_E_RUNTIME, "plot: gnuplot wrote no %s", out);
        x->written++;
        if (!x->quiet) fprintf(stderr, "deftsim plot: %s\n", out);
    }
    return DEFTSIM_OK;
}

/* Distinct methods of rows [b, e), in order of first appearance. */
static size_t methods_of(const stable *t, size_t b, size_t e, const char **out, size_t cap)
{
    size_t n = 0;
    for (size_t r = b; r < e; r++) {
        const char *m = cellv(t, r, "method");
        size_t i = 0;
        while (i < n && strcmp(out[i], m)) i++;
        if (i == n && n < cap) out[n++] = m;
    }
    return n;
}

/* Writes method m's rows of [b, e) as one data block "P median lo hi" (scaled), for a timed
 * figure with a fifth column, 1 where summary.csv flags the point noisy (counted in *nnoisy);
 * returns the number of rows. hdr: the block's comment line. Values that a logarithmic axis
 * cannot show are left out. */
static size_t write_block(FILE *f, const stable *t, size_t b, size_t e, const char *m, const char *med,
                          const char *lo, const char *hi, const line_figure *fg, int first,
                          const char *hdr, double *pmin, double *pmax, size_t *nnoisy)
{
    size_t nrow = 0;
    for (size_t r = b; r < e; r++) {
        if (strcmp(cellv(t, r, "method"), m)) continue;
        double v = numv(t, r, med);
        if (isnan(v) || (fg->logy && !(v > 0))) continue;
        double l = numv(t, r, lo), h = numv(t, r, hi);
        /* No interval (one iteration): a bar of zero length. */
        if (isnan(l) || isnan(h) || isinf(l) || isinf(h)) l = h = v;
        if (fg->logy && !(l > 0)) l = v;
        if (!nrow) fprintf(f, "%s# %s %s\n", first ? "" : "\n\n", hdr, m);
        double P = numv(t, r, "P");
        if (P < *pmin) *pmin = P;
        if (P > *pmax) *pmax = P;
        fprintf(f, "%s %.9g %.9g %.9g", cellv(t, r, "P"), v * fg->scale, l * fg->scale, h * fg->scale);
        if (fg->timed) {
            int noisy = numv(t, r, "noisy") > 0;
            fprintf(f, " %d", noisy);
            *nnoisy += (size_t)noisy;
        }
        fputc('\n', f);
        nrow++;
    }
    return nrow;
}

/* Whether every defined median of method m in [b, e) equals its P (and there is one). */
static int equals_P(const stable *t, size_t b, size_t e, const char *m, const char *med)
{
    int any = 0;
    for (size_t r = b; r < e; r++) {
        if (strcmp(cellv(t, r, "method"), m)) continue;
        double v = numv(t, r, med), P = numv(t, r, "P");
        if (isnan(v)) continue;
        if (!(fabs(v - P) <= 1e-9 * P) || P < 2) return 0;
        any = 1;
    }
    return any;
}

static deftsim_status line_plot(plot_ctx *x, const stable *t, size_t b, size_t e,
                                const line_figure *fg, const char *suffix, const char *subtitle)
{
    const char *meth[64];
    size_t nm = methods_of(t, b, e, meth, 64);
    char lo[128], hi[128], med[128];
    snprintf(med, sizeof med, "%s%s", fg->stem, fg->lo ? "" : "_median");
    snprintf(lo, sizeof lo, "%s", fg->lo ? fg->lo : "");
    snprintf(hi, sizeof hi, "%s", fg->hi ? fg->hi : "");
    if (!fg->lo) {
        snprintf(lo, sizeof lo, "%s_lo", fg->stem);
        snprintf(hi, sizeof hi, "%s_hi", fg->stem);
    }
    if (colidx(t, med) < 0) {
        add_note(x, "%s%s: summary.csv has no %s column", fg->name, suffix, med);
        return DEFTSIM_OK;
    }
    /* The second quantity (the busiest worker's bytes beside the mean), when summary.csv has it. */
    char med2[128] = "", lo2[128] = "", hi2[128] = "";
    int two = 0;
    if (fg->stem2) {
        snprintf(med2, sizeof med2, "%s_median", fg->stem2);
        snprintf(lo2, sizeof lo2, "%s_lo", fg->stem2);
        snprintf(hi2, sizeof hi2, "%s_hi", fg->stem2);
        two = colidx(t, med2) >= 0;
        if (!two) add_note(x, "%s%s: summary.csv has no %s column: drawn without it", fg->name, suffix, med2);
    }
    char stem[512], data[4400];
    snprintf(stem, sizeof stem, "%s%s", fg->name, suffix);
    snprintf(data, sizeof data, "%s/data/%s.dat", x->outdir, stem);
    deftsim_afile *af;
    deftsim_status st = deftsim_afile_open(&af, data);
    if (st) return st;
    FILE *f = deftsim_afile_stream(af);
    fprintf(f, "# %s: %s\n# columns: P median lo hi%s (summary.csv %s, %s, %s, times %g%s)\n", stem,
            subtitle, fg->timed ? " noisy" : "", med, lo, hi, fg->scale,
            fg->timed ? "; noisy: 1 where summary.csv's noisy flag is set" : "");
    if (two)
        fprintf(f, "# the blocks after the methods' %s blocks: %s, %s, %s, one per method in the "
                   "same order\n", med, med2, lo2, hi2);
    char shown[1024] = "", omitted[1024] = "", at_P[1024] = "";
    const char *shown_m[64];
    size_t blocks = 0, nnoisy = 0, nnoisy2 = 0;
    double pmin = INFINITY, pmax = 0;
    for (size_t i = 0; i < nm; i++) {
        size_t nrow = 0;
        int drop = fg->drop_at_P && equals_P(t, b, e, meth[i], med);
        if (!drop)
            nrow = write_block(f, t, b, e, meth[i], med, lo, hi, fg, !blocks, "method", &pmin, &pmax,
                               &nnoisy);
        char *dst = drop ? at_P : nrow ? shown : omitted;
        size_t len = strlen(dst);
        snprintf(dst + len, 1024 - len, "%s%s", len ? " " : "", meth[i]);
        if (nrow) shown_m[blocks++] = meth[i];
    }
    if (!blocks) {
        deftsim_afile_abort(af);
        if (*at_P) add_note(x, "%s: not drawn: the imbalance of every method (%s) is P by construction", stem, at_P);
        else add_note(x, "%s: not drawn: %s", stem, fg->missing);
        return DEFTSIM_OK;
    }
    /* One block of the second quantity per shown method, empty where it has no value. */
    for (size_t i = 0; two && i < blocks; i++)
        if (!write_block(f, t, b, e, shown_m[i], med2, lo2, hi2, fg, 0, fg->stem2, &pmin, &pmax,
                         &nnoisy2))
            fprintf(f, "\n\n# %s %s: no values\nNaN NaN NaN NaN%s\n", fg->stem2, shown_m[i],
                    fg->timed ? " 0" : "");
    if ((st = deftsim_afile_commit(af))) return st;
    /* [compute]: the iteration holds the forward and backward pass (its figure says so). */
    int fwdbwd = 0;
    for (size_t r = b; r < e; r++) fwdbwd |= !isnan(numv(t, r, "forward_backward_seconds_median"));
    char extra[1400];
    snprintf(extra, sizeof extra, "pmin=%g; pmax=%g; second=%d; at_P='%s'; fwdbwd=%d; nnoisy=%zu",
             pmin, pmax, two, at_P, fwdbwd, nnoisy);
    return render(x, fg->name, stem, data, shown, subtitle, omitted, extra);
}

/* ---- build-up over the iterations (iterations.csv) -------------------------------------- */

/* Row q of iterations.csv belongs to summary row r's combination (axes, model, density) at P. */
static int iter_row_of(const stable *it, size_t q, const stable *t, size_t r, double P)
{
    for (size_t a = 0; a < t->naxes; a++)
        if (strcmp(cellv(it, q, t->cols[a]), t->rows[r].cell[a])) return 0;
    return !strcmp(cellv(it, q, "model"), cellv(t, r, "model")) &&
           !strcmp(cellv(it, q, "density"), cellv(t, r, "density")) && numv(it, q, "P") == P;
}

/* buildup_vs_iteration: each method's build-up (K / k for MiCRO and ExDyna) over the iterations
 * at the combination's largest P, from iterations.csv (it; NULL when the folder has none). */
static deftsim_status iter_plot(plot_ctx *x, const stable *it, const stable *t, size_t b, size_t e,
                                const char *suffix, const char *subtitle)
{
    char stem[512], data[4400];
    snprintf(stem, sizeof stem, "buildup_vs_iteration%s", suffix);
    if (!it) {
        add_note(x, "%s: not drawn: no iterations.csv (run 'deftsim analyze' again)", stem);
        return DEFTSIM_OK;
    }
    double P = 0;
    for (size_t r = b; r < e; r++)
        if (numv(t, r, "P") > P) P = numv(t, r, "P");
    const char *meth[64];
    size_t nm = methods_of(t, b, e, meth, 64);
    snprintf(data, sizeof data, "%s/data/%s.dat", x->outdir, stem);
    deftsim_afile *af;
    deftsim_status st = deftsim_afile_open(&af, data);
    if (st) return st;
    FILE *f = deftsim_afile_stream(af);
    fprintf(f, "# %s: %s, P = %g\n# columns: iteration buildup (iterations.csv)\n", stem, subtitle, P);
    char shown[1024] = "", omitted[1024] = "";
    size_t blocks = 0;
    double itmax = 0;
    for (size_t i = 0; i < nm; i++) {
        size_t nrow = 0;
        for (size_t q = 0; q < it->nrows; q++) {
            if (strcmp(cellv(it, q, "method"), meth[i]) || !iter_row_of(it, q, t, b, P)) continue;
            double v = numv(it, q, "buildup"), k = numv(it, q, "iteration");
            if (!(v > 0) || isinf(v) || isnan(k)) continue;
            if (!nrow) fprintf(f, "%s# method %s\n", blocks ? "\n\n" : "", meth[i]);
            fprintf(f, "%s %.9g\n", cellv(it, q, "iteration"), v);
            if (k > itmax) itmax = k;
            nrow++;
        }
        char *dst = nrow ? shown : omitted;
        size_t len = strlen(dst);
        snprintf(dst + len, 1024 - len, "%s%s", len ? " " : "", meth[i]);
        if (nrow) blocks++;
    }
    if (!blocks) {
        deftsim_afile_abort(af);
        add_note(x, "%s: not drawn: iterations.csv has no build-up values at P = %g", stem, P);
        return DEFTSIM_OK;
    }
    if ((st = deftsim_afile_commit(af))) return st;
    char sub[1200], extra[200];
    snprintf(sub, sizeof sub, "%s; every iteration's value, warm-up included", subtitle);
    snprintf(extra, sizeof extra, "P=%d; itmax=%g", (int)P, itmax);
    return render(x, "buildup_vs_iteration", stem, data, shown, sub, omitted, extra);
}

static int cmp_u(const void *a, const void *b)
{
    unsigned x = *(const unsigned *)a, y = *(const unsigned *)b;
    return (x > y) - (x < y);
}

/* The compute phases summary.csv names (phase_<name>_seconds_mean), in the order they are
 * stacked: selection phases first (docs/SPARSIFIERS.md, "Phases at a glance"). */
static const char *const bd_phases[] = {"norms", "allocate", "pack", "sample", "filter", "select",
                                        "merge", "union", "gather", "sum", "residual", "other"};
#define BD_NPHASES (sizeof bd_phases / sizeof bd_phases[0])

static double phase_mean(const stable *t, size_t r, size_t j)
{
    char col[64];
    snprintf(col, sizeof col, "phase_%s_seconds_mean", bd_phases[j]);
    return numv(t, r, col);
}

static deftsim_status breakdown_plot(plot_ctx *x, const stable *t, size_t b, size_t e,
                                     const char *suffix, const char *subtitle)
{
    /* With the network simulated: the simulated iteration split into communication (the
     * collectives' time), the slowest worker's compute phases by name, and waiting (the rest:
     * other workers' compute on the critical path, skew). Without: the slowest worker's compute
     * time split into its phases. Means, so that the parts add up to the whole. A summary.csv
     * without the phase columns (written before they existed) is split into the slowest
     * worker's selection and the rest. */
    int net = 0, fwdbwd = 0;
    for (size_t r = b; r < e; r++)
        if (!isnan(numv(t, r, "iteration_seconds_mean")) && !isnan(numv(t, r, "comm_seconds_mean"))) net = 1;
    /* [compute]: the bar starts with the forward and backward pass; communication shows what
     * the backward pass leaves of it (dense's buckets overlap it). */
    for (size_t r = b; r < e; r++) fwdbwd |= net && !isnan(numv(t, r, "forward_backward_seconds_mean"));
    unsigned Ps[256];
    size_t nP = 0;
    for (size_t r = b; r < e; r++) {
        unsigned P = (unsigned)numv(t, r, "P");
        size_t i = 0;
        while (i < nP && Ps[i] != P) i++;
        if (i == nP && nP < 256) Ps[nP++] = P;
    }
    qsort(Ps, nP, sizeof *Ps, cmp_u);
    unsigned pick[3];
    size_t npick = 0;
    if (nP <= 3) {
        for (size_t i = 0; i < nP; i++) pick[npick++] = Ps[i];
    } else {
        pick[npick++] = Ps[0];
        pick[npick++] = Ps[nP / 2];
        pick[npick++] = Ps[nP - 1];
    }
    /* The phases to show: those with a positive mean in some bar. */
    int use[BD_NPHASES] = {0}, phases = 0;
    for (size_t r = b; r < e; r++) {
        unsigned P = (unsigned)numv(t, r, "P");
        int picked = 0;
        for (size_t k = 0; k < npick; k++) picked |= pick[k] == P;
        for (size_t j = 0; j < BD_NPHASES; j++) {
            double v = phase_mean(t, r, j);
            if (!isnan(v)) phases = 1;
            if (picked && v > 0) use[j] = 1;
        }
    }
    char parts[256] = "";
    size_t po = fwdbwd ? (size_t)snprintf(parts, sizeof parts, "fwdbwd") : 0;
    if (phases) {
        for (size_t j = 0; j < BD_NPHASES; j++)
            if (use[j]) po += (size_t)snprintf(parts + po, sizeof parts - po, "%s%s", po ? " " : "", bd_phases[j]);
        if (net) snprintf(parts + po, sizeof parts - po, "%swaiting comm", po ? " " : "");
    } else {
        snprintf(parts + po, sizeof parts - po, "%s%s", po ? " " : "",
                 net ? "selection rest comm" : "selection rest");
    }
    const char *meth[64];
    size_t nm = methods_of(t, b, e, meth, 64);
    char stem[512], data[4400];
    snprintf(stem, sizeof stem, "breakdown%s", suffix);
    snprintf(data, sizeof data, "%s/data/%s.dat", x->outdir, stem);
    deftsim_afile *af;
    deftsim_status st = deftsim_afile_open(&af, data);
    if (st) return st;
    FILE *f = deftsim_afile_stream(af);
    fprintf(f, "# %s: %s\n# one block per P; columns: method %s (ms, means over iterations; %s; then "
               "noisy: 1 where summary.csv flags the point)\n", stem,
            subtitle, parts,
            phases ? (net ? "the slowest worker's compute phases (summary.csv phase_<name>_seconds_mean), "
                            "waiting: the rest of the simulated iteration outside communication, "
                            "comm: communication (comm_seconds_mean); the phases are scaled down "
                            "when they exceed what communication leaves of the iteration"
                          : "the slowest worker's compute phases (summary.csv "
                            "phase_<name>_seconds_mean), no network simulated")
                   : (net ? "selection of the slowest worker, the rest outside communication, "
                            "communication"
                          : "the slowest worker's compute, no network simulated"));
    char plist[256] = "";
    size_t pl = 0;
    for (size_t k = 0; k < npick; k++) {
        fprintf(f, "%s# P %u\n", k ? "\n\n" : "", pick[k]);
        pl += (size_t)snprintf(plist + pl, sizeof plist - pl, "%s%u", k ? " " : "", pick[k]);
        for (size_t i = 0; i < nm; i++)
            for (size_t r = b; r < e; r++) {
                if (strcmp(cellv(t, r, "method"), meth[i]) || (unsigned)numv(t, r, "P") != pick[k])
                    continue;
                double it = numv(t, r, "iteration_seconds_mean"), comm = 0;
                if (net) {
                    comm = numv(t, r, "comm_seconds_mean");
                    if (isnan(comm)) comm = 0;
                    if (isnan(it)) it = comm;
                }
                fprintf(f, "%s", meth[i]);
                if (fwdbwd) {
                    double fb = numv(t, r, "forward_backward_seconds_mean");
                    if (!(fb > 0)) fb = 0;
                    if (fb > it) fb = it;
                    fprintf(f, " %.9g", fb * 1e3);
                    it -= fb;
                    if (comm > it) comm = it; /* the part the backward pass did not hide */
                }
                if (phases) {
                    double ph[BD_NPHASES], sum = 0;
                    for (size_t j = 0; j < BD_NPHASES; j++) {
                        ph[j] = phase_mean(t, r, j);
                        if (!(ph[j] > 0)) ph[j] = 0;
                        sum += ph[j];
                    }
                    /* The parts must add up to the iteration: the phases take what
                     * communication leaves at most. */
                    double room = it - comm > 0 ? it - comm : 0, s = 1;
                    if (net && sum > room) s = sum > 0 ? room / sum : 0;
                    for (size_t j = 0; j < BD_NPHASES; j++)
                        if (use[j]) fprintf(f, " %.9g", ph[j] * s * 1e3);
                    if (net) {
                        double wait = room - sum * s;
                        fprintf(f, " %.9g %.9g", (wait > 0 ? wait : 0) * 1e3, comm * 1e3);
                    }
                } else {
                    double sel = numv(t, r, "select_seconds_mean"), other;
                    if (isnan(sel)) sel = 0;
                    if (net) {
                        /* Selection takes what communication leaves at most. */
                        if (sel > it - comm) sel = it - comm > 0 ? it - comm : 0;
                        other = it - comm - sel;
                    } else {
                        other = numv(t, r, "compute_seconds_mean") - sel;
                    }
                    if (isnan(other) || other < 0) other = 0;
                    fprintf(f, " %.9g %.9g", sel * 1e3, other * 1e3);
                    if (net) fprintf(f, " %.9g", comm * 1e3);
                }
                fprintf(f, " %d\n", numv(t, r, "noisy") > 0); /* the bar's label says "(noisy)" */
            }
    }
    if ((st = deftsim_afile_commit(af))) return st;
    char sub[1200], extra[800];
    snprintf(sub, sizeof sub, "%s; means over iterations%s", subtitle,
             net ? "; bar: the simulated iteration" : "; compute only: the network was not simulated");
    snprintf(extra, sizeof extra, "plist='%s'; parts='%s'; have_comm=%d; phases=%d; fwdbwd=%d", plist,
             parts, net, phases, fwdbwd);
    const char *names = "";
    return render(x, "breakdown", stem, data, names, sub, "", extra);
}

/* "_resnet18_cifar10_d0.01" (and the axis values): file-name safe. */
static void combo_suffix(const stable *t, size_t r, char *buf, size_t cap)
{
    size_t o = (size_t)snprintf(buf, cap, "_%s_d%s", cellv(t, r, "model"), cellv(t, r, "density"));
    for (size_t c = 0; c < t->naxes && o < cap; c++)
        o += (size_t)snprintf(buf + o, cap - o, "_%s", t->rows[r].cell[c]);
    for (char *p = buf; *p; p++)
        if (!isalnum((unsigned char)*p) && *p != '.' && *p != '_' && *p != '-') *p = '_';
}

/* The figures of one combination (rows [b, e): the same axes, model and density); multi: the
 * folder has several, so file names carry the combination. cond: the folder's manifest (NULL
 * without one), for the conditions line under every subtitle. */
static deftsim_status plot_combo(plot_ctx *x, const stable *t, const stable *it, size_t b, size_t e,
                                 int multi, const deftsim_conditions_src *cond)
{
    char suffix[600] = "", subtitle[1024];
    if (multi) combo_suffix(t, b, suffix, sizeof suffix);
    /* The network and where compute was timed: the sweep variant's, when the axes vary them. */
    deftsim_conditions cd = {0};
    if (cond) {
        const char *vals[64];
        size_t na = t->naxes < 64 ? t->naxes : 64;
        for (size_t a = 0; a < na; a++) vals[a] = t->rows[b].cell[a];
        deftsim_status st = deftsim_conditions_lookup(cond, (const char *const *)t->cols, vals, na, &cd);
        if (st) return st;
    }
    deftsim_cli_gp_set_conditions(cd.network, cd.compute);
    double itmin = INFINITY, itmax = 0, level = NAN;
    for (size_t r = b; r < e; r++) {
        double v = numv(t, r, "iterations");
        if (v < itmin) itmin = v;
        if (v > itmax) itmax = v;
        level = numv(t, r, "ci_level");
    }
    size_t so = (size_t)snprintf(subtitle, sizeof subtitle, "%s, density %s", cellv(t, b, "model"),
                                 cellv(t, b, "density"));
    for (size_t a = 0; a < t->naxes && so < sizeof subtitle; a++)
        so += (size_t)snprintf(subtitle + so, sizeof subtitle - so, ", %s = %s", t->cols[a],
                               t->rows[b].cell[a]);
    char base_sub[1024];
    snprintf(base_sub, sizeof base_sub, "%s", subtitle);
    if (so < sizeof subtitle) {
        if (itmin == itmax)
            snprintf(subtitle + so, sizeof subtitle - so, "; %g iterations per point", itmin);
        else
            snprintf(subtitle + so, sizeof subtitle - so, "; %g to %g iterations per point", itmin,
                     itmax);
    }
    char lines_sub[1200];
    if (isnan(level))
        snprintf(lines_sub, sizeof lines_sub, "%s; points: medians, bars: bootstrap interval", subtitle);
    else
        snprintf(lines_sub, sizeof lines_sub, "%s; points: medians, bars: %g%% bootstrap interval",
                 subtitle, level * 100);
    deftsim_status st = DEFTSIM_OK;
    for (size_t i = 0; i < sizeof line_figures / sizeof line_figures[0] && !st; i++)
        st = line_plot(x, t, b, e, &line_figures[i], suffix, lines_sub);
    if (!st) st = breakdown_plot(x, t, b, e, suffix, subtitle);
    if (!st) st = iter_plot(x, it, t, b, e, suffix, base_sub);
    return st;
}

/* --format (a comma-separated subset of png, svg, pdf) and --pdf into x's formats. Returns 0,
 * or the exit status of a usage error. */
static int parse_formats(const char *formats, int pdf, plot_ctx *x)
{
    const char *p = formats;
    while (*p) {
        size_t len = strcspn(p, ",");
        char one[8];
        snprintf(one, sizeof one, "%.*s", (int)(len < 7 ? len : 7), p);
        if (strcmp(one, "png") && strcmp(one, "svg") && strcmp(one, "pdf"))
            return deftsim_cli_usage_error("plot", "--format: '%.*s' is not png, svg or pdf",
                                           (int)len, p);
        int dup = 0;
        for (size_t i = 0; i < x->nformats; i++)
            if (!strcmp(x->formats[i], one)) dup = 1;
        if (!dup && x->nformats < 3)
            snprintf(x->formats[x->nformats++], sizeof x->formats[0], "%s", one);
        p += len;
        if (*p) p++;
    }
    if (pdf) {
        int have = 0;
        for (size_t i = 0; i < x->nformats; i++)
            if (!strcmp(x->formats[i], "pdf")) have = 1;
        if (!have && x->nformats < 3)
            snprintf(x->formats[x->nformats++], sizeof x->formats[0], "pdf");
    }
    if (!x->nformats) return deftsim_cli_usage_error("plot", "--format: no format given");
    return 0;
}

int deftsim_cmd_plot(int argc, char **argv)
{
    static const struct option opts[] = {
        {"format", required_argument, NULL, 'f'},
        {"pdf", no_argument, NULL, 'P'},
        {"scripts", required_argument, NULL, 'S'},
        {"quiet", no_argument, NULL, 'q'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    plot_ctx x;
    memset(&x, 0, sizeof x);
    const char *formats = "png,svg";
    int pdf = 0, c;
    optind = 0;
    while ((c = getopt_long(argc, argv, "f:S:qh", opts, NULL)) != -1) {
        switch (c) {
        case 'f': formats = optarg; break;
        case 'P': pdf = 1; break;
        case 'S': x.scripts = optarg; break;
        case 'q': x.quiet = 1; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind >= argc) return deftsim_cli_usage_error("plot", "missing DIR");
    if (optind + 1 < argc)
        return deftsim_cli_usage_error("plot", "unexpected argument '%s'", argv[optind + 1]);
    int rc = parse_formats(formats, pdf, &x);
    if (rc) return rc;
    if (!x.scripts) x.scripts = getenv("DEFTSIM_PLOTS_DIR");
    if (!x.scripts || !*x.scripts) x.scripts = DEFTSIM_PLOTS_DIR;
    if (deftsim_cli_parse_only) return 0;

    const char *dir = argv[optind];
    /* The network and where compute was timed, from the folder's manifest (none: no line). */
    deftsim_conditions_src *cond = NULL;
    deftsim_status st = deftsim_conditions_open(dir, &cond);
    if (st) return deftsim_cli_fail(st);
    /* A deftsim train folder: its training curves (plot_train.c). */
    if (deftsim_train_results_is(dir)) {
        deftsim_conditions cd = {0};
        if (cond && (st = deftsim_conditions_lookup(cond, NULL, NULL, 0, &cd)))
            memset(&cd, 0, sizeof cd);
        deftsim_conditions_close(cond);
        deftsim_cli_gp_set_conditions(cd.network, cd.compute);
        return deftsim_cli_plot_train(dir, x.scripts, (const char(*)[8])x.formats, x.nformats,
                                      x.quiet);
    }
    char summary[4200], outdir[4200], datadir[4300];
    snprintf(summary, sizeof summary, "%s/summary.csv", dir);
    snprintf(outdir, sizeof outdir, "%s/plots", dir);
    snprintf(datadir, sizeof datadir, "%s/data", outdir);
    x.outdir = outdir;
    if (access(summary, R_OK) != 0) {
        fprintf(stderr, "deftsim: input error: %s: %s; run 'deftsim analyze %s' first\n", summary,
                strerror(errno), dir);
        deftsim_conditions_close(cond);
        return 2;
    }
    stable t;
    if ((st = stable_load(summary, "select_seconds_median", &t))) {
        deftsim_conditions_close(cond);
        return deftsim_cli_fail(st);
    }
    /* iterations.csv: written by deftsim analyze beside summary.csv (an older folder has none). */
    char itpath[4200];
    snprintf(itpath, sizeof itpath, "%s/iterations.csv", dir);
    stable it = {0};
    int have_it = access(itpath, R_OK) == 0;
    if (have_it && (st = stable_load(itpath, "buildup", &it))) {
        rc = deftsim_cli_fail(st);
        goto done;
    }
    if ((st = deftsim_mkdir_p(datadir))) {
        rc = deftsim_cli_fail(st);
        goto done;
    }
    /* Combinations in order of appearance; rows of one combination need not be adjacent. */
    size_t *order = malloc(t.nrows * sizeof *order), no = 0;
    char *used = calloc(t.nrows, 1);
    if (!order || !used) {
        free(order);
        free(used);
        rc = 1;
        goto done;
    }
    size_t ncombos = 0;
    for (size_t r = 0; r < t.nrows; r++) {
        if (used[r]) continue;
        ncombos++;
        for (size_t q = r; q < t.nrows; q++)
            if (!used[q] && same_combo(&t, r, q)) {
                used[q] = 1;
                order[no++] = q;
            }
    }
    /* Reorder the table's rows so that each combination is a contiguous range. */
    srow *sorted = malloc(t.nrows * sizeof *sorted);
    if (!sorted) {
        free(order);
        free(used);
        rc = 1;
        goto done;
    }
    for (size_t i = 0; i < t.nrows; i++) sorted[i] = t.rows[order[i]];
    free(t.rows);
    t.rows = sorted;
    free(order);
    free(used);
    for (size_t b = 0; b < t.nrows && !st;) {
        size_t e = b;
        while (e < t.nrows && same_combo(&t, b, e)) e++;
        st = plot_combo(&x, &t, have_it ? &it : NULL, b, e, ncombos > 1, cond);
        b = e;
    }
    if (st) rc = deftsim_cli_fail(st);
    for (size_t i = 0; i < x.nnotes; i++) {
        if (!x.quiet || rc == 0) fprintf(stderr, "deftsim plot: %s\n", x.notes[i]);
        free(x.notes[i]);
    }
    free(x.notes);
    if (!rc && !x.quiet) fprintf(stderr, "deftsim plot: %zu files in %s\n", x.written, outdir);
done:
    deftsim_conditions_close(cond);
    stable_free(&t);
    stable_free(&it);
    return rc;
}
