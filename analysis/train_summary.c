/* train_summary.c - the summary of deftsim train results (deftsim_train_analysis.h). */
#include "deftsim_train_analysis.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deftsim_csv.h"
#include "deftsim_rng.h"
#include "deftsim_util.h"

typedef struct {
    double iteration, acc, loss, sim;
} trow;

typedef struct {
    uint64_t seed;
    char *file;
    trow *rows;
    size_t n, cap;
    int diverged;
    /* results */
    double final_acc, best_acc, final_loss, final_sim, final_it;
    double t_it, t_sim;     /* NaN: target not reached */
} trun;

typedef struct {
    char *key;              /* "model|method|density|P" */
    char *model, *method, *density;
    unsigned P;
    trun *runs;
    size_t nruns;
    /* results */
    deftsim_estimate final_acc, best_acc, final_loss, sim, t_it, t_sim;
    double iterations;      /* the largest last iteration over the repeats */
    double target;          /* NaN: no target (relative, no dense point at this P) */
    size_t reached, diverged;
} tpoint;

struct deftsim_train_analysis {
    deftsim_train_analysis_options opt;
    tpoint *pts;
    size_t npts;
    int finished;
};

void deftsim_train_analysis_options_default(deftsim_train_analysis_options *o)
{
    memset(o, 0, sizeof *o);
    o->boot.resamples = 2000;
    o->boot.level = 0.95;
    o->boot.seed = 1;
    o->target_relative = 1;
    o->target = 0.95;
}

int deftsim_train_target_parse(const char *s, deftsim_train_analysis_options *o)
{
    int rel = 0;
    if (!strncmp(s, "dense:", 6)) {
        rel = 1;
        s += 6;
    }
    double v;
    if (deftsim_parse_double(s, &v) || !(v > 0 && v <= 1)) return -1;
    o->target_relative = rel;
    o->target = v;
    return 0;
}

deftsim_status deftsim_train_analysis_new(const deftsim_train_analysis_options *o,
                                          deftsim_train_analysis **out)
{
    *out = NULL;
    if (o->boot.resamples < 100 || !(o->boot.level > 0 && o->boot.level < 1) ||
        !(o->target > 0 && o->target <= 1))
        return deftsim_error_set(DEFTSIM_E_INPUT, "train analysis: bad options (resamples %zu, "
                                                  "level %g, target %g)",
                                 o->boot.resamples, o->boot.level, o->target);
    deftsim_train_analysis *a = calloc(1, sizeof *a);
    if (!a) return deftsim_error_nomem("train analysis");
    a->opt = *o;
    *out = a;
    return DEFTSIM_OK;
}

void deftsim_train_analysis_free(deftsim_train_analysis *a)
{
    if (!a) return;
    for (size_t i = 0; i < a->npts; i++) {
        tpoint *p = &a->pts[i];
        for (size_t j = 0; j < p->nruns; j++) {
            free(p->runs[j].rows);
            free(p->runs[j].file);
        }
        free(p->runs);
        free(p->key);
        free(p->model);
        free(p->method);
        free(p->density);
    }
    free(a->pts);
    free(a);
}

/* The point of key, created (with its fields) when new. */
static deftsim_status point_get(deftsim_train_analysis *a, const char *model, const char *method,
                                const char *density, unsigned P, tpoint **out)
{
    char key[1024];
    snprintf(key, sizeof key, "%s|%s|%s|%u", model, method, density, P);
    for (size_t i = 0; i < a->npts; i++)
        if (!strcmp(a->pts[i].key, key)) {
            *out = &a->pts[i];
            return DEFTSIM_OK;
        }
    tpoint *np = realloc(a->pts, (a->npts + 1) * sizeof *np);
    if (!np) return deftsim_error_nomem("train analysis");
    a->pts = np;
    tpoint *p = &a->pts[a->npts];
    memset(p, 0, sizeof *p);
    if (!(p->key = strdup(key)) || !(p->model = strdup(model)) || !(p->method = strdup(method)) ||
        !(p->density = strdup(density))) {
        free(p->key);
        free(p->model);
        free(p->method);
        free(p->density);
        return deftsim_error_nomem("train analysis");
    }
    p->P = P;
    a->npts++;
    *out = p;
    return DEFTSIM_OK;
}

/* The run of (point, seed) read from path: created when new; the same point and seed from
 * another file is an error (the same repeat read twice). */
static deftsim_status run_get(tpoint *p, uint64_t seed, const char *path, trun **out)
{
    for (size_t j = 0; j < p->nruns; j++)
        if (p->runs[j].seed == seed) {
            if (strcmp(p->runs[j].file, path))
                return deftsim_error_set(DEFTSIM_E_INPUT,
                                         "%s: point %s (seed %llu) was already read from %s", path,
                                         p->key, (unsigned long long)seed, p->runs[j].file);
            *out = &p->runs[j];
            return DEFTSIM_OK;
        }
    trun *nr = realloc(p->runs, (p->nruns + 1) * sizeof *nr);
    if (!nr) return deftsim_error_nomem("train analysis");
    p->runs = nr;
    trun *r = &p->runs[p->nruns];
    memset(r, 0, sizeof *r);
    if (!(r->file = strdup(path))) return deftsim_error_nomem("train analysis");
    r->seed = seed;
    p->nruns++;
    *out = r;
    return DEFTSIM_OK;
}

deftsim_status deftsim_train_analysis_add_file(deftsim_train_analysis *a, const char *path,
                                               uint64_t seed)
{
    if (a->finished)
        return deftsim_error_set(DEFTSIM_E_INTERNAL, "train analysis: a file added after finish");
    deftsim_csvr *r;
    deftsim_status st = deftsim_csvr_open(path, &r);
    if (st) return st;
    static const char *const need[] = {"model", "method", "density", "P", "iteration",
                                       "test_accuracy", "test_loss"};
    long col[7];
    for (size_t i = 0; i < 7; i++)
        if ((col[i] = deftsim_csvr_find(r, need[i])) < 0) {
            deftsim_csvr_close(r);
            return deftsim_error_set(DEFTSIM_E_INPUT,
                                     "%s: no column %s (not rows of deftsim train; docs/TRAINING.md)",
                                     path, need[i]);
        }
    long csim = deftsim_csvr_find(r, "sim_seconds"), cdiv = deftsim_csvr_find(r, "diverged");
    size_t nrows = 0;
    int got;
    while (!(st = deftsim_csvr_next(r, &got)) && got) {
        double P, it, acc, loss, sim = NAN, dv = 0;
        if ((st = deftsim_csvr_number(r, (size_t)col[3], &P)) ||
            (st = deftsim_csvr_number(r, (size_t)col[4], &it)) ||
            (st = deftsim_csvr_number(r, (size_t)col[5], &acc)) ||
            (st = deftsim_csvr_number(r, (size_t)col[6], &loss)) ||
            (csim >= 0 && (st = deftsim_csvr_number(r, (size_t)csim, &sim))) ||
            (cdiv >= 0 && (st = deftsim_csvr_number(r, (size_t)cdiv, &dv))))
            break;
        if (!(P >= 1 && P <= 1e9 && P == floor(P)) || !(it >= 0)) {
            st = deftsim_error_set(DEFTSIM_E_INPUT, "%s:%zu: P or iteration is not a count", path,
                                   deftsim_csvr_line(r));
            break;
        }
        tpoint *p = NULL;
        trun *run = NULL;
        if ((st = point_get(a, deftsim_csvr_field(r, (size_t)col[0]),
                            deftsim_csvr_field(r, (size_t)col[1]),
                            deftsim_csvr_field(r, (size_t)col[2]), (unsigned)P, &p)) ||
            (st = run_get(p, seed, path, &run)))
            break;
        if (run->n && it <= run->rows[run->n - 1].iteration) {
            st = deftsim_error_set(DEFTSIM_E_INPUT,
                                   "%s:%zu: iteration %g does not follow %g (rows out of order, or "
                                   "the same point twice in one file)",
                                   path, deftsim_csvr_line(r), it, run->rows[run->n - 1].iteration);
            break;
        }
        if (deftsim_grow(&run->rows, &run->cap, run->n + 1, sizeof *run->rows)) {
            st = deftsim_error_nomem("train analysis");
            break;
        }
        run->rows[run->n++] = (trow){it, acc, loss, sim};
        if (dv != 0) run->diverged = 1;
        nrows++;
    }
    deftsim_csvr_close(r);
    if (!st && !nrows)
        st = deftsim_error_set(DEFTSIM_E_INPUT, "%s: a header and no rows", path);
    return st;
}

/* 64-bit FNV-1a and splitmix64 (deftsim_rng.h), as the sweep summary: each interval's seed
 * depends on the point and the quantity only. */
static deftsim_status estimate(const deftsim_train_analysis *a, const tpoint *p, uint64_t salt,
                               const double *x, size_t n, deftsim_estimate *out)
{
    deftsim_boot_options bo = a->opt.boot;
    uint64_t h = deftsim_splitmix64(deftsim_fnv1a64(p->key) ^ deftsim_splitmix64(salt));
    bo.seed = deftsim_splitmix64(a->opt.boot.seed ^ h);
    return deftsim_bootstrap_median(x, n, &bo, out, NULL);
}

deftsim_status deftsim_train_analysis_finish(deftsim_train_analysis *a)
{
    if (a->finished) return DEFTSIM_OK;
    if (!a->npts) return deftsim_error_set(DEFTSIM_E_INPUT, "train analysis: no rows were read");
    /* Each run's final row, best accuracy. */
    for (size_t i = 0; i < a->npts; i++) {
        tpoint *p = &a->pts[i];
        for (size_t j = 0; j < p->nruns; j++) {
            trun *r = &p->runs[j];
            const trow *last = &r->rows[r->n - 1];
            r->final_acc = last->acc;
            r->final_loss = last->loss;
            r->final_sim = last->sim;
            r->final_it = last->iteration;
            r->best_acc = NAN;
            for (size_t k = 0; k < r->n; k++)
                if (isfinite(r->rows[k].acc) && !(r->rows[k].acc <= r->best_acc))
                    r->best_acc = r->rows[k].acc;
        }
    }
    deftsim_status st = DEFTSIM_OK;
    size_t maxr = 0;
    for (size_t i = 0; i < a->npts; i++)
        if (a->pts[i].nruns > maxr) maxr = a->pts[i].nruns;
    double *x = malloc((maxr ? maxr : 1) * 6 * sizeof *x);
    if (!x) return deftsim_error_nomem("train analysis");
    double *fa = x, *ba = x + maxr, *fl = x + 2 * maxr, *fs = x + 3 * maxr;
    for (size_t i = 0; i < a->npts && !st; i++) {
        tpoint *p = &a->pts[i];
        p->iterations = 0;
        p->diverged = 0;
        for (size_t j = 0; j < p->nruns; j++) {
            fa[j] = p->runs[j].final_acc;
            ba[j] = p->runs[j].best_acc;
            fl[j] = p->runs[j].final_loss;
            fs[j] = p->runs[j].final_sim;
            if (p->runs[j].final_it > p->iterations) p->iterations = p->runs[j].final_it;
            p->diverged += (size_t)p->runs[j].diverged;
        }
        if ((st = estimate(a, p, 1, fa, p->nruns, &p->final_acc)) ||
            (st = estimate(a, p, 2, ba, p->nruns, &p->best_acc)) ||
            (st = estimate(a, p, 3, fl, p->nruns, &p->final_loss)) ||
            (st = estimate(a, p, 4, fs, p->nruns, &p->sim)))
            break;
    }
    /* Targets need every point's final accuracy (dense's) first. */
    for (size_t i = 0; i < a->npts && !st; i++) {
        tpoint *p = &a->pts[i];
        p->target = NAN;
        if (!a->opt.target_relative) {
            p->target = a->opt.target;
        } else {
            for (size_t q = 0; q < a->npts; q++)
                if (!strcmp(a->pts[q].method, "dense") && !strcmp(a->pts[q].model, p->model) &&
                    a->pts[q].P == p->P && isfinite(a->pts[q].final_acc.median))
                    p->target = a->opt.target * a->pts[q].final_acc.median;
        }
        double *ti = x + 4 * maxr, *ts = x + 5 * maxr;
        size_t m = 0;
        for (size_t j = 0; j < p->nruns; j++) {
            trun *r = &p->runs[j];
            r->t_it = r->t_sim = NAN;
            if (isnan(p->target)) continue;
            for (size_t k = 0; k < r->n; k++)
                if (r->rows[k].acc >= p->target) {
                    r->t_it = r->rows[k].iteration;
                    r->t_sim = r->rows[k].sim;
                    break;
                }
            if (!isnan(r->t_it)) {
                ti[m] = r->t_it;
                ts[m] = r->t_sim;
                m++;
            }
        }
        p->reached = m;
        if ((st = estimate(a, p, 5, ti, m, &p->t_it)) || (st = estimate(a, p, 6, ts, m, &p->t_sim)))
            break;
    }
    free(x);
    if (!st) a->finished = 1;
    return st;
}

size_t deftsim_train_analysis_points(const deftsim_train_analysis *a) { return a->npts; }

size_t deftsim_train_analysis_max_repeats(const deftsim_train_analysis *a)
{
    size_t m = 0;
    for (size_t i = 0; i < a->npts; i++)
        if (a->pts[i].nruns > m) m = a->pts[i].nruns;
    return m;
}

/* ---- output --------------------------------------------------------------------------------- */

static void put_est(FILE *f, const deftsim_estimate *e, int with_mean)
{
    char b[4][40];
    fprintf(f, ",%s,%s,%s", deftsim_csv_double(b[0], 40, e->median),
            deftsim_csv_double(b[1], 40, e->lo), deftsim_csv_double(b[2], 40, e->hi));
    if (with_mean) fprintf(f, ",%s", deftsim_csv_double(b[3], 40, e->mean));
}

static deftsim_status check_finished(const deftsim_train_analysis *a)
{
    return a->finished ? DEFTSIM_OK
                       : deftsim_error_set(DEFTSIM_E_INTERNAL, "train analysis: not finished");
}

deftsim_status deftsim_train_analysis_write_csv(const deftsim_train_analysis *a, const char *path)
{
    deftsim_status st = check_finished(a);
    if (st) return st;
    deftsim_afile *af;
    if ((st = deftsim_afile_open(&af, path))) return st;
    FILE *f = deftsim_afile_stream(af);
    fprintf(f, "model,method,density,P,repeats,seeds,iterations,ci_level,"
               "final_accuracy_median,final_accuracy_lo,final_accuracy_hi,final_accuracy_mean,"
               "best_accuracy_median,best_accuracy_lo,best_accuracy_hi,best_accuracy_mean,"
               "final_test_loss_median,final_test_loss_lo,final_test_loss_hi,final_test_loss_mean,"
               "sim_seconds_median,sim_seconds_lo,sim_seconds_hi,sim_seconds_mean,"
               "target_accuracy,target_reached,"
               "target_iterations_median,target_iterations_lo,target_iterations_hi,"
               "target_sim_seconds_median,target_sim_seconds_lo,target_sim_seconds_hi,diverged\n");
    for (size_t i = 0; i < a->npts; i++) {
        const tpoint *p = &a->pts[i];
        char b[4][40];
        deftsim_csv_field(f, p->model);
        fputc(',', f);
        deftsim_csv_field(f, p->method);
        fputc(',', f);
        deftsim_csv_field(f, p->density);
        fprintf(f, ",%u,%zu,", p->P, p->nruns);
        for (size_t j = 0; j < p->nruns; j++)
            fprintf(f, "%s%llu", j ? ";" : "", (unsigned long long)p->runs[j].seed);
        fprintf(f, ",%s,%s", deftsim_csv_double(b[0], 40, p->iterations),
                deftsim_csv_double(b[1], 40, a->opt.boot.level));
        put_est(f, &p->final_acc, 1);
        put_est(f, &p->best_acc, 1);
        put_est(f, &p->final_loss, 1);
        put_est(f, &p->sim, 1);
        fprintf(f, ",%s,%zu", deftsim_csv_double(b[2], 40, p->target), p->reached);
        put_est(f, &p->t_it, 0);
        put_est(f, &p->t_sim, 0);
        fprintf(f, ",%zu\n", p->diverged);
    }
    return deftsim_afile_commit(af);
}

/* "85.86 [85.1, 86.2]" in percent, or "85.86" without an interval, "-" when undefined. */
static void md_est(FILE *f, const deftsim_estimate *e, double scale, const char *fmt)
{
    if (isnan(e->median)) {
        fputs(" - |", f);
        return;
    }
    fputc(' ', f);
    fprintf(f, fmt, e->median * scale);
    if (!isnan(e->lo)) {
        fputs(" [", f);
        fprintf(f, fmt, e->lo * scale);
        fputs(", ", f);
        fprintf(f, fmt, e->hi * scale);
        fputc(']', f);
    }
    fputs(" |", f);
}

deftsim_status deftsim_train_analysis_write_md(const deftsim_train_analysis *a, const char *path,
                                               const char *const *provenance)
{
    deftsim_status st = check_finished(a);
    if (st) return st;
    deftsim_afile *af;
    if ((st = deftsim_afile_open(&af, path))) return st;
    FILE *f = deftsim_afile_stream(af);
    fprintf(f, "# Training summary\n\n");
    for (size_t i = 0; provenance && provenance[i]; i++) fprintf(f, "%s\n\n", provenance[i]);
    size_t maxr = deftsim_train_analysis_max_repeats(a);
    double pct = a->opt.boot.level * 100;
    if (maxr < 2)
        fprintf(f, "**One repeat per point** (one seed): the numbers are that run's, with no "
                   "confidence interval; a single evaluation of SGD at a constant learning rate "
                   "moves by a point or two, so differences of that size are not significant. "
                   "Train again with other seeds (`--set scenario.seed=N`, each into its own "
                   "folder) and analyse the folders together for intervals.\n\n");
    else
        fprintf(f, "Repeats: each folder is one repeat (one seed). A number is the median over "
                   "the point's repeats; in brackets its %g%% percentile-bootstrap interval "
                   "(%zu resamples, seed %llu); a point with one repeat has no interval.\n\n",
                pct, a->opt.boot.resamples, (unsigned long long)a->opt.boot.seed);
    if (a->opt.target_relative)
        fprintf(f, "Target: %g%% of the dense point's final test accuracy at the same P (the "
                   "target column; `-` where there is no dense point). Iterations and simulated "
                   "time to the target are those of the first evaluation at or above it; "
                   "\"not reached\" when no evaluation got there.\n\n",
                a->opt.target * 100);
    else
        fprintf(f, "Target: a test accuracy of %g%%. Iterations and simulated time to the target "
                   "are those of the first evaluation at or above it; \"not reached\" when no "
                   "evaluation got there.\n\n",
                a->opt.target * 100);
    fprintf(f, "Accuracy and loss are on the test images of `[train] eval_samples`; simulated "
               "time is the network simulation's cumulative training time (`-` when the network "
               "was not simulated).\n\n");
    fprintf(f, "| method | density | P | repeats | iterations | final test accuracy (%%) | best "
               "test accuracy (%%) | final test loss | simulated time (s) | target (%%) | "
               "iterations to target | simulated s to target |\n");
    fprintf(f, "|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (size_t i = 0; i < a->npts; i++) {
        const tpoint *p = &a->pts[i];
        fprintf(f, "| %s%s | %s | %u | %zu | %g |",
                a->opt.title ? a->opt.title(p->method) : p->method,
                p->diverged ? " (diverged)" : "", strcmp(p->method, "dense") ? p->density : "all",
                p->P, p->nruns, p->iterations);
        md_est(f, &p->final_acc, 100, "%.2f");
        md_est(f, &p->best_acc, 100, "%.2f");
        md_est(f, &p->final_loss, 1, "%.4f");
        md_est(f, &p->sim, 1, "%.4g");
        if (isnan(p->target)) {
            fputs(" - | - | - |\n", f);
            continue;
        }
        fprintf(f, " %.2f", p->target * 100);
        if (p->reached && p->reached < p->nruns)
            fprintf(f, " (reached by %zu of %zu repeats)", p->reached, p->nruns);
        fputs(" |", f);
        if (!p->reached) {
            fputs(" not reached | not reached |\n", f);
            continue;
        }
        md_est(f, &p->t_it, 1, "%g");
        md_est(f, &p->t_sim, 1, "%.4g");
        fputc('\n', f);
    }
    if (a->npts > 1) {
        const char *model = a->pts[0].model;
        int one = 1;
        for (size_t i = 1; i < a->npts; i++)
            if (strcmp(a->pts[i].model, model)) one = 0;
        if (one) fprintf(f, "\nModel: %s.\n", model);
    }
    return deftsim_afile_commit(af);
}
