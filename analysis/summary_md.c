/* summary_md.c - summary.md, the readable report of a sweep's summary: the settings, how to
 * read the numbers, per series the time, bytes and scaling tables, the points flagged noisy and
 * the definitions (deftsim_analysis_write_md, docs/ANALYSIS.md). Reads what summary.c computed
 * (summary_internal.h); calls nothing of it. */
#include "deftsim_analysis.h"
#include "summary_internal.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deftsim_util.h"

/* ---- summary.md ----------------------------------------------------------------------------- */

/* Three significant digits, without exponents for the ranges tables show. */
static const char *sig(char *buf, size_t cap, double v)
{
    if (isnan(v)) snprintf(buf, cap, "-");
    else if (fabs(v) >= 1000) snprintf(buf, cap, "%.0f", v);
    else if (v == 0 || fabs(v) >= 0.001) snprintf(buf, cap, "%.3g", v);
    else snprintf(buf, cap, "%.2e", v);
    return buf;
}

/* "12.3 [11.9, 13.0]" with values scaled by s; "-" when undefined, no interval when n < 2. */
static const char *cell_est(char *buf, size_t cap, const deftsim_estimate *e, double s)
{
    char m[32], l[32], h[32];
    if (isnan(e->median)) snprintf(buf, cap, "-");
    else if (isnan(e->lo)) snprintf(buf, cap, "%s", sig(m, sizeof m, e->median * s));
    else
        snprintf(buf, cap, "%s [%s, %s]", sig(m, sizeof m, e->median * s), sig(l, sizeof l, e->lo * s),
                 sig(h, sizeof h, e->hi * s));
    return buf;
}

void deftsim_analysis_set_note(deftsim_analysis *a, deftsim_analysis_note_fn fn, void *ctx)
{
    a->note = fn;
    a->note_ctx = ctx;
}

/* A series' heading, and under it the conditions its numbers were taken in (the network, where
 * the compute phases were timed), when the caller can say. */
static void md_heading(FILE *f, const deftsim_analysis *a, const group *g)
{
    fprintf(f, "\n## %s, density %s", g->model, g->dens);
    for (size_t x = 0; x < a->naxes; x++) fprintf(f, ", %s = %s", a->axes[x], g->axv[x]);
    fputc('\n', f);
    char note[1024] = "";
    if (a->note)
        a->note(a->note_ctx, (const char *const *)a->axes, (const char *const *)g->axv, a->naxes,
                note, sizeof note);
    if (note[0]) fprintf(f, "\nConditions: %s.\n", note);
}

/* The points whose timing repetitions spread beyond the threshold (docs/TIMING.md). */
static void noisy_section(FILE *f, const deftsim_analysis *a)
{
    char b[32];
    if (!a->has_val[DEFTSIM_M_REP_SPREAD]) {
        fprintf(f, "\n## Timing noise\n\nThe rows hold no spread of timing repetitions (written "
                   "with [timing] repeats = 1, or before deftsim had them): no point can be "
                   "flagged as noisy.\n");
        return;
    }
    size_t n = 0;
    for (size_t i = 0; i < a->ng; i++)
        n += deftsim_analysis_is_noisy(a->g[i]->est[DEFTSIM_M_REP_SPREAD].median, a->opt.noisy_spread);
    fprintf(f, "\n## Timing noise\n\nA point is flagged *noisy* when the median over its "
               "iterations of `select_spread` (per iteration: the median over the workers of "
               "(max - min) / min of a worker's selection times over the timing repetitions) "
               "exceeds %s. ",
            sig(b, sizeof b, a->opt.noisy_spread));
    if (!n) {
        fprintf(f, "No point is.\n");
        return;
    }
    fprintf(f, "%zu point%s %s (marked `(noisy)` in the tables above; `deftsim sweep "
               "--rerun-noisy` runs them again):\n\n| method | density | P | spread |\n"
               "|---|---:|---:|---:|\n",
            n, n == 1 ? "" : "s", n == 1 ? "is" : "are");
    for (size_t i = 0; i < a->ng; i++) {
        const group *g = a->g[i];
        double sp = g->est[DEFTSIM_M_REP_SPREAD].median;
        if (!deftsim_analysis_is_noisy(sp, a->opt.noisy_spread)) continue;
        fprintf(f, "| %s | %s | %u | %s |\n", g->method, g->dens, g->P, sig(b, sizeof b, sp));
    }
}

deftsim_status deftsim_analysis_point_noise(const char *path, size_t warmup, double threshold,
                                            double *spread, int *noisy)
{
    *spread = NAN;
    *noisy = 0;
    deftsim_analysis_options o;
    deftsim_analysis_options_default(&o);
    o.boot.resamples = 100; /* only the median is used */
    o.warmup = warmup;
    o.noisy_spread = threshold;
    deftsim_analysis *a = NULL;
    deftsim_status st = deftsim_analysis_new(&o, NULL, 0, &a);
    if (!st) st = deftsim_analysis_add_file(a, path, NULL);
    if (!st) st = deftsim_analysis_finish(a);
    if (!st && a->ng) {
        double v = a->g[0]->est[DEFTSIM_M_REP_SPREAD].median;
        for (size_t i = 1; i < a->ng; i++) /* one point per file; the largest if more */
            if (!(a->g[i]->est[DEFTSIM_M_REP_SPREAD].median <= v))
                v = a->g[i]->est[DEFTSIM_M_REP_SPREAD].median;
        *spread = v;
        *noisy = deftsim_analysis_is_noisy(v, threshold);
    }
    deftsim_analysis_free(a);
    return st;
}

/* The run settings the rows record, and a user's platform file. */
static void md_settings(FILE *f, const deftsim_analysis *a)
{
    /* The run settings the rows record, as they are (several values: several runs). A user's
     * platform file (net_topology "file:<name>") has no one link bandwidth or latency: the
     * rows leave those empty, and the file is named instead. */
    int anyctx = 0, anyfile = 0;
    for (size_t i = 0; i < NCONTEXT; i++)
        if (!strcmp(summary_context_cols[i], "net_topology"))
            for (size_t k = 0; k < a->context[i].n; k++)
                anyfile |= !strncmp(a->context[i].items[k], "file:", 5);
    for (size_t i = 0; i < NCONTEXT; i++) {
        if (!a->context[i].n) continue;
        fprintf(f, "%s`%s` ", anyctx ? ", " : "Settings (from the rows): ", summary_context_cols[i]);
        anyctx = 1;
        for (size_t k = 0; k < a->context[i].n; k++) {
            const char *v = a->context[i].items[k];
            double d;
            int link = !strcmp(summary_context_cols[i], "net_bandwidth") ||
                       !strcmp(summary_context_cols[i], "net_latency");
            fprintf(f, "%s%s", k ? " | " : "",
                    v[0] ? v : anyfile && link ? "(the platform file's)" : "(empty)");
            /* Units a reader wants: bandwidth in Gb/s, latency in microseconds. */
            if (!strcmp(summary_context_cols[i], "net_bandwidth") && !deftsim_parse_double(v, &d))
                fprintf(f, " B/s (%g Gb/s)", d * 8 / 1e9);
            else if (!strcmp(summary_context_cols[i], "net_latency") && !deftsim_parse_double(v, &d))
                fprintf(f, " s (%g us)", d * 1e6);
        }
        if (a->context_more[i]) fprintf(f, " | ...");
    }
    if (anyctx) fprintf(f, ".\n\n");
    for (size_t i = 0; anyfile && i < NCONTEXT; i++) {
        if (strcmp(summary_context_cols[i], "net_topology")) continue;
        fprintf(f, "Network platform: ");
        for (size_t k = 0, m = 0; k < a->context[i].n; k++) {
            const char *v = a->context[i].items[k];
            if (strncmp(v, "file:", 5)) continue;
            fprintf(f, "%s`%s`", m++ ? ", " : "the SimGrid platform file ", v + 5);
        }
        fprintf(f, " (its copy lies under `platforms/` in the results folder, its size and SHA-256 "
                   "in manifest.json); its links' bandwidths and latencies are the file's own, so "
                   "the rows leave `net_bandwidth` and `net_latency` empty.\n\n");
    }
}

/* The points, the iterations, how to read the numbers, and what the network simulation
 * would add when the rows lack it. */
static void md_intro(FILE *f, const deftsim_analysis *a, size_t minit, size_t maxit)
{
    int comm = a->has_val[DEFTSIM_M_COMM], iter = a->has_val[DEFTSIM_M_ITERATION];
    int pct = (int)lround(a->opt.boot.level * 100);
    fprintf(f, "%zu points from %zu file%s (%llu rows); ", a->ng, a->files, a->files == 1 ? "" : "s",
            (unsigned long long)a->rows);
    if (minit == maxit) fprintf(f, "%zu iteration%s per point", minit, minit == 1 ? "" : "s");
    else fprintf(f, "%zu to %zu iterations per point", minit, maxit);
    if (a->opt.warmup == 1) fprintf(f, " after leaving out each point's first iteration");
    else if (a->opt.warmup) fprintf(f, " after leaving out each point's first %zu", a->opt.warmup);
    fprintf(f, ".\n\n");
    fprintf(f,
            "**How to read the numbers.** Each cell is the median over a point's iterations, with a "
            "%d%% percentile-bootstrap confidence interval in brackets ([lo, hi]; %zu resamples of "
            "the iterations, seed %llu). The sample is the point's per-iteration values: for each "
            "iteration, the slowest worker's selection time, the mean bytes a worker sends, the "
            "iteration's build-up and so on. With few iterations the interval is wide, and with "
            "one there is none (shown without brackets); iterations of one point are consecutive "
            "steps of one run, not independent trials, so read the interval as the spread of this "
            "run, not of all runs. `-` marks an undefined value. Selection and compute times are "
            "wall-clock times of the kernels measured on this machine%s\n\n",
            pct, a->opt.boot.resamples, (unsigned long long)a->opt.boot.seed,
            !(comm || iter) ? "."
            : a->has_val[DEFTSIM_M_FWDBWD]
                ? "; communication and iteration times are simulated by the network model "
                  "(SimGrid, docs/NETWORK.md), with the measured compute times injected into the "
                  "simulation. The iteration time is the whole training step: the forward and "
                  "backward pass given by [compute] (not measured; docs/COMPUTE.md), the "
                  "sparsifier's compute and the collectives (dense's bucket allreduces overlap "
                  "the backward pass when [compute] overlap = 1)."
                : "; communication and iteration times are simulated by the network "
                  "model (SimGrid, docs/NETWORK.md), with the measured compute times "
                  "injected into the simulation. The iteration time holds the "
                  "sparsifier's compute and the collectives only: the training step's "
                  "forward and backward pass is not modelled (no [compute] section).");

    /* What the network simulation would add, stated rather than left blank. */
    if (!comm || !iter) {
        int col = a->has_col[DEFTSIM_M_COMM] || a->has_col[DEFTSIM_M_ITERATION];
        fprintf(f,
                "**Communication and iteration time are not in these results.** %s "
                "summary.csv leaves comm_seconds, iteration_seconds and select_critical_seconds "
                "empty, and the tables below show computation and bytes only. Bytes per worker "
                "are what each worker's collectives send under the reference algorithms "
                "(docs/OUTPUT.md).\n\n",
                col ? "The rows have the network simulation's columns, but no values in them."
                    : "The rows have no network simulation columns (comm_seconds, "
                      "iteration_seconds): the run that wrote them did not simulate the network.");
    }
}

/* The quantities' names, units, columns and meanings. */
static void md_definitions(FILE *f, const deftsim_analysis *a)
{
    fprintf(f, "\n## Definitions\n\nsummary.csv has one row per point and, for each quantity, "
               "`<name>_median`, `_lo`, `_hi` (the interval) and `_mean`:\n\n");
    fprintf(f, "| name | unit | from the rows' column | meaning |\n|---|---|---|---|\n");
    for (int m = 0; m < (int)deftsim_metric_count(); m++) {
        const deftsim_metric_info *mi = deftsim_metric_get((deftsim_metric)m);
        fprintf(f, "| %s | %s | %s | ", mi->name, mi->unit, mi->column);
        /* A '|' in a cell would end it. */
        for (const char *c = mi->doc; *c; c++) {
            if (*c == '|') fputc('\\', f);
            fputc(*c, f);
        }
        fprintf(f, "%s |\n", a->has_col[m] ? "" : " (not in these rows: empty)");
    }
    fprintf(f, "\n`select_exponent` (with `_lo`, `_hi`, `_r2`, `_points`) is the scaling exponent "
               "above, repeated in every row of its series; `select_speedup` and "
               "`iteration_speedup` are topk's median over the method's at the same P, with a "
               "bootstrap interval that resamples both methods' iterations independently (topk "
               "itself: 1); `iteration_speedup_dense` is dense's median iteration time over the "
               "method's, the same way. `phase_<name>_seconds_mean` are the slowest worker's compute "
               "phases by name, means over the iterations that add up to compute_seconds_mean. "
               "docs/ANALYSIS.md has the details.\n");
}

/* The sparsifiers' own quantities (deftsim_metric_add: MiCRO's and ExDyna's threshold and
 * padding, Ok-Topk's thresholds and region balance, ...) for the points of [i, j) that have
 * any, one column per quantity that some point has: nothing when none has. */
static void md_own_quantities(FILE *f, const deftsim_analysis *a, size_t i, size_t j)
{
    size_t cols[DEFTSIM_M_MAX], nc = 0;
    for (size_t m = DEFTSIM_M_BASE_COUNT; m < deftsim_metric_count(); m++) {
        int any = 0;
        for (size_t k = i; k < j && !any; k++) any = a->g[k]->nvals[m] > 0;
        if (any) cols[nc++] = m;
    }
    if (!nc) return;
    fprintf(f, "\nThe methods' own quantities per iteration (build-up: |U| / k, for MiCRO and "
               "ExDyna their count against k, K / k)");
    for (size_t c = 0; c < nc; c++) {
        const deftsim_metric_info *mi = deftsim_metric_get((deftsim_metric)cols[c]);
        fprintf(f, "%s %s: %s", c ? ";" : ":", mi->title, mi->doc);
    }
    fprintf(f, ".\n\n| method | P | build-up |");
    for (size_t c = 0; c < nc; c++) fprintf(f, " %s |", deftsim_metric_get((deftsim_metric)cols[c])->title);
    fprintf(f, "\n|---|---:|---:|");
    for (size_t c = 0; c < nc; c++) fputs("---:|", f);
    fputc('\n', f);
    for (size_t k = i; k < j; k++) {
        const group *g = a->g[k];
        int has = 0;
        for (size_t c = 0; c < nc; c++) has |= g->nvals[cols[c]] > 0;
        if (!has) continue;
        char c0[128];
        fprintf(f, "| %s | %u | %s |", g->method, g->P,
                cell_est(c0, sizeof c0, &g->est[DEFTSIM_M_BUILDUP], 1));
        for (size_t c = 0; c < nc; c++) {
            char cb[128];
            fprintf(f, " %s |", g->nvals[cols[c]] ? cell_est(cb, sizeof cb, &g->est[cols[c]], 1) : "-");
        }
        fputc('\n', f);
    }
}

deftsim_status deftsim_analysis_write_md(const deftsim_analysis *a, const char *path,
                                         const char *const *provenance)
{
    if (!a->finished) return deftsim_error_set(DEFTSIM_E_INTERNAL, "analysis: write before finish()");
    deftsim_afile *af;
    deftsim_status st = deftsim_afile_open(&af, path);
    if (st) return st;
    FILE *f = deftsim_afile_stream(af);
    int comm = a->has_val[DEFTSIM_M_COMM], iter = a->has_val[DEFTSIM_M_ITERATION];
    int pct = (int)lround(a->opt.boot.level * 100);
    size_t minit = SIZE_MAX, maxit = 0;
    for (size_t i = 0; i < a->ng; i++) {
        if (a->g[i]->iterations < minit) minit = a->g[i]->iterations;
        if (a->g[i]->iterations > maxit) maxit = a->g[i]->iterations;
    }

    fprintf(f, "# Summary\n\n");
    for (size_t i = 0; provenance && provenance[i]; i++) fprintf(f, "%s\n", provenance[i]);
    if (provenance && provenance[0]) fputc('\n', f);
    md_settings(f, a);
    md_intro(f, a, minit, maxit);

    for (size_t i = 0; i < a->ng;) {
        size_t j = i;
        while (j < a->ng && summary_same_series(a->g[i], a->g[j], 0)) j++;
        md_heading(f, a, a->g[i]);
        char c1[128], c2[128], c3[128], c4[128], c5[128], c6[128], c7[128];

        fprintf(f, "\nTime per iteration, milliseconds (speedup: topk's median selection time over "
                   "the method's).\n\n");
        fprintf(f, "| method | P | selection (slowest worker) | selection (median worker) | "
                   "compute (slowest worker) |%s%s selection speedup over topk |%s\n",
                comm ? " communication |" : "", iter ? " iteration |" : "",
                iter ? " iteration speedup over topk | iteration speedup over dense |" : "");
        fprintf(f, "|---|---:|---:|---:|---:|%s%s---:|%s\n", comm ? "---:|" : "",
                iter ? "---:|" : "", iter ? "---:|---:|" : "");
        for (size_t k = i; k < j; k++) {
            const group *g = a->g[k];
            char c8[128];
            fprintf(f, "| %s | %u | %s%s | %s | %s |", g->method, g->P,
                    cell_est(c1, sizeof c1, &g->est[DEFTSIM_M_SELECT], 1e3),
                    deftsim_analysis_is_noisy(g->est[DEFTSIM_M_REP_SPREAD].median,
                                              a->opt.noisy_spread)
                        ? " (noisy)"
                        : "",
                    cell_est(c8, sizeof c8, &g->est[DEFTSIM_M_SELECT_MEDIAN], 1e3),
                    cell_est(c2, sizeof c2, &g->est[DEFTSIM_M_COMPUTE], 1e3));
            if (comm) fprintf(f, " %s |", cell_est(c3, sizeof c3, &g->est[DEFTSIM_M_COMM], 1e3));
            if (iter) fprintf(f, " %s |", cell_est(c4, sizeof c4, &g->est[DEFTSIM_M_ITERATION], 1e3));
            fprintf(f, " %s |", cell_est(c5, sizeof c5, &g->speed_select, 1));
            if (iter) fprintf(f, " %s |", cell_est(c6, sizeof c6, &g->speed_iter, 1));
            if (iter) fprintf(f, " %s |", cell_est(c7, sizeof c7, &g->speed_iter_dense, 1));
            fputc('\n', f);
        }

        fprintf(f, "\nTraffic and quality per iteration (MB = 10^6 bytes; build-up: \\|U\\| / k, "
                   "the indices the aggregate holds over k; captured: the fraction of the average "
                   "accumulator's squared norm the aggregate keeps; imbalance: max / mean of the "
                   "workers' selection times).\n\n");
        fprintf(f, "| method | P | MB sent per worker | MB sent, busiest worker | build-up | "
                   "captured norm | captured / exact top-k | imbalance |\n");
        fprintf(f, "|---|---:|---:|---:|---:|---:|---:|---:|\n");
        for (size_t k = i; k < j; k++) {
            const group *g = a->g[k];
            fprintf(f, "| %s | %u | %s | %s | %s | %s | %s | %s |\n", g->method, g->P,
                    cell_est(c1, sizeof c1, &g->est[DEFTSIM_M_BYTES], 1e-6),
                    cell_est(c2, sizeof c2, &g->est[DEFTSIM_M_BYTES_MAX], 1e-6),
                    cell_est(c3, sizeof c3, &g->est[DEFTSIM_M_BUILDUP], 1),
                    cell_est(c4, sizeof c4, &g->est[DEFTSIM_M_CAPTURED], 1),
                    cell_est(c5, sizeof c5, &g->est[DEFTSIM_M_CAPTURED_RATIO], 1),
                    cell_est(c7, sizeof c7, &g->est[DEFTSIM_M_IMBALANCE], 1));
        }
        md_own_quantities(f, a, i, j);

        fprintf(f, "\nScaling of the selection time with P: the exponent b of t = a P^b, a "
                   "least-squares line through (ln P, ln median time), one point per P, with a "
                   "t-based %d%% interval (n - 2 degrees of freedom; none with two P).\n\n",
                pct);
        fprintf(f, "| method | exponent b | interval | R^2 | P used |\n|---|---:|---:|---:|---:|\n");
        for (size_t k = i; k < j;) {
            const group *g = a->g[k];
            size_t e = k;
            while (e < j && a->g[e]->rank_method == g->rank_method) e++;
            char s3[32];
            if (isnan(g->fit.slope))
                fprintf(f, "| %s | - | - | - | %zu |\n", g->method, g->fit.n);
            else if (isnan(g->fit.slope_lo))
                fprintf(f, "| %s | %.3f | - | %s | %zu |\n", g->method, g->fit.slope,
                        sig(s3, sizeof s3, g->fit.r2), g->fit.n);
            else
                fprintf(f, "| %s | %.3f | [%.3f, %.3f] | %s | %zu |\n", g->method, g->fit.slope,
                        g->fit.slope_lo, g->fit.slope_hi, sig(s3, sizeof s3, g->fit.r2), g->fit.n);
            k = e;
        }
        i = j;
    }

    noisy_section(f, a);
    md_definitions(f, a);
    if (ferror(f)) {
        deftsim_afile_abort(af);
        return deftsim_error_set(DEFTSIM_E_IO, "%s: write failed", path);
    }
    return deftsim_afile_commit(af);
}
