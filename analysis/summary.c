/* summary.c - deftsim's tidy rows folded into one summary row per point (deftsim_analysis.h,
 * docs/ANALYSIS.md).
 *
 * A point is (axes, model, method, density, P). Its sample is the sequence of its iterations:
 * for every iteration the rows give one value of each quantity (the slowest worker's selection
 * time, the mean bytes a worker sends, the iteration's build-up, ...), and the summary reports
 * the median of those values with a percentile-bootstrap interval. Iteration-level columns are
 * repeated in every row of the iteration (docs/OUTPUT.md), so they are read from its first row;
 * worker-level columns are read from each worker's phase_index 0 row, which every worker has.
 *
 * summary.md is summary_md.c's; the types both files share are in summary_internal.h. */
#include "deftsim_analysis.h"
#include "summary_internal.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "deftsim_csv.h"
#include "deftsim_rng.h"
#include "deftsim_util.h"

static deftsim_metric_info metrics[DEFTSIM_M_MAX] = {
    [DEFTSIM_M_SELECT] = {"select_seconds", "select_seconds", "s",
                          "selection time of the slowest worker (max over workers of select_seconds)", 0},
    [DEFTSIM_M_COMPUTE] = {"compute_seconds", "worker_seconds", "s",
                           "compute time of the slowest worker (max over workers of worker_seconds)", 0},
    [DEFTSIM_M_SELECT_CRIT] = {"select_critical_seconds", "select_critical_seconds", "s",
                               "simulated time from the iteration's start until the last worker "
                               "ends its selection (collectives before it included)", 1},
    [DEFTSIM_M_COMM] = {"comm_seconds", "comm_seconds", "s",
                        "simulated communication time of the iteration", 1},
    [DEFTSIM_M_ITERATION] = {"iteration_seconds", "iteration_seconds", "s",
                             "simulated time of the iteration: the sparsifier's compute and the "
                             "collectives, and with [compute] the forward and backward pass", 1},
    [DEFTSIM_M_BYTES] = {"bytes_sent", "bytes_sent", "B",
                         "bytes one worker sends in the iteration, mean over the workers", 0},
    [DEFTSIM_M_BYTES_MAX] = {"bytes_sent_max", "bytes_sent", "B",
                             "bytes the busiest worker sends in the iteration", 0},
    [DEFTSIM_M_BUILDUP] = {"buildup", "buildup", "ratio", "gradient build-up |U| / k", 0},
    [DEFTSIM_M_CAPTURED] = {"captured_frac", "captured_frac", "fraction",
                            "squared norm of the average accumulator captured by U", 0},
    [DEFTSIM_M_CAPTURED_RATIO] = {"captured_ratio", "captured_ratio", "ratio",
                                  "captured_frac over what the exact global top-k captures", 0},
    [DEFTSIM_M_IMBALANCE] = {"imbalance_seconds", "imbalance_seconds", "ratio",
                             "max / mean of the workers' selection times", 0},
    [DEFTSIM_M_IMBALANCE_COST] = {"imbalance_cost", "imbalance_cost", "ratio",
                                  "max / mean of the workers' selection cost model", 0},
    [DEFTSIM_M_SELECT_MEDIAN] = {"select_median_worker_seconds", "select_seconds", "s",
                                 "selection time of the median worker (median over workers of "
                                 "select_seconds)", 0},
    [DEFTSIM_M_REP_SPREAD] = {"select_spread", "select_seconds_max", "ratio",
                              "spread of the timing repetitions: (select_seconds_max - "
                              "select_seconds_min) / select_seconds_min, median over the workers "
                              "(docs/TIMING.md)", 1},
    [DEFTSIM_M_FWDBWD] = {"forward_backward_seconds", "phase_seconds", "s",
                          "the training step's forward and backward pass in the iteration "
                          "([compute]: the phase_kind model rows; empty without)", 1},
    [DEFTSIM_M_REF] = {"ref_seconds", "ref_seconds", "s",
                       "the reference beside the timing repetitions: one cold read of an "
                       "accumulator's bytes (docs/TIMING.md, \"Reference\")", 1},
    [DEFTSIM_M_SELECT_REF] = {"select_ref", "select_seconds", "references",
                              "select_seconds of the slowest worker as a multiple of the "
                              "iteration's ref_seconds", 1},
    [DEFTSIM_M_SELECT_MEDIAN_REF] = {"select_median_worker_ref", "select_seconds", "references",
                                     "select_seconds of the median worker as a multiple of the "
                                     "iteration's ref_seconds", 1},
};

/* Quantities repeated in every row of an iteration (read once per iteration). */
static int iteration_level(int m)
{
    return m != DEFTSIM_M_SELECT && m != DEFTSIM_M_COMPUTE && m != DEFTSIM_M_BYTES &&
           m != DEFTSIM_M_BYTES_MAX && m != DEFTSIM_M_SELECT_MEDIAN && m != DEFTSIM_M_REP_SPREAD &&
           m != DEFTSIM_M_FWDBWD && m != DEFTSIM_M_SELECT_REF && m != DEFTSIM_M_SELECT_MEDIAN_REF;
}

/* The quantities known: the base ones above, then those added. */
static size_t nmetrics = DEFTSIM_M_BASE_COUNT;

size_t deftsim_metric_count(void) { return nmetrics; }

const deftsim_metric_info *deftsim_metric_get(deftsim_metric m)
{
    return (size_t)m < nmetrics ? &metrics[m] : NULL;
}

deftsim_status deftsim_metric_add(const char *column, const char *unit, const char *title,
                                  const char *doc)
{
    if (!column || !unit || !title || !doc)
        return deftsim_error_set(DEFTSIM_E_USAGE, "analysis: a quantity needs a column, unit, "
                                                  "title and doc");
    for (size_t i = 0; i < nmetrics; i++)
        if (!strcmp(metrics[i].name, column)) return DEFTSIM_OK;
    if (nmetrics == DEFTSIM_M_MAX)
        return deftsim_error_set(DEFTSIM_E_USAGE, "analysis: more than %d quantities (%s)",
                                 DEFTSIM_M_MAX, column);
    metrics[nmetrics++] = (deftsim_metric_info){column, column, unit, doc, 1, title};
    return DEFTSIM_OK;
}

void deftsim_analysis_options_default(deftsim_analysis_options *o)
{
    memset(o, 0, sizeof *o);
    o->boot.resamples = 2000;
    o->boot.level = 0.95;
    o->boot.seed = 1;
    o->warmup = 0;
    o->noisy_spread = DEFTSIM_NOISY_SPREAD;
}

int deftsim_analysis_is_noisy(double spread, double threshold)
{
    return isfinite(spread) && spread > threshold;
}

/* The sparsifiers' compute phases (docs/SPARSIFIERS.md, "Phases at a glance") that summary.csv
 * names, in the order the breakdown stacks them; a phase of another name counts as "other". */
static const char *const phase_names[] = {"norms", "allocate", "pack", "sample", "filter", "select",
                                          "merge", "union", "gather", "sum", "residual", "other"};
_Static_assert(sizeof phase_names / sizeof phase_names[0] == NPHASES, "phase_names");

static size_t phase_slot(const char *name)
{
    for (size_t i = 0; i + 1 < NPHASES; i++)
        if (!strcmp(phase_names[i], name)) return i;
    return NPHASES - 1;
}

/* Run-level columns whose values summary.md reports (the settings the numbers depend on). */
const char *const summary_context_cols[] = {
    "backend", "threads", "error_feedback", "sampled_workers", "wire", "index_bytes",
    "value_bytes", "net_topology", "net_model", "net_bandwidth", "net_latency",
    "net_allgather", "net_allreduce", "net_bcast", "sim_mode"};
_Static_assert(sizeof summary_context_cols / sizeof summary_context_cols[0] == NCONTEXT,
               "summary_context_cols");

/* ---- small helpers ------------------------------------------------------------------------ */


/* Index of s in the list, appended on first sight: the order things first appear in. */
static deftsim_status rank_of(strlist *l, const char *s, size_t *rank)
{
    for (size_t i = 0; i < l->n; i++)
        if (!strcmp(l->items[i], s)) {
            *rank = i;
            return DEFTSIM_OK;
        }
    if (deftsim_grow(&l->items, &l->cap, l->n + 1, sizeof *l->items))
        return deftsim_error_nomem("analysis");
    if (!(l->items[l->n] = strdup(s))) return deftsim_error_nomem("analysis");
    *rank = l->n++;
    return DEFTSIM_OK;
}

static void strlist_free(strlist *l)
{
    for (size_t i = 0; i < l->n; i++) free(l->items[i]);
    free(l->items);
}

/* 64-bit FNV-1a and splitmix64 (deftsim_rng.h): per-point seeds that do not depend on the order
 * files were read in. */
static uint64_t seed_for(const deftsim_analysis *a, const char *key, uint64_t salt)
{
    uint64_t h = deftsim_splitmix64(deftsim_fnv1a64(key) ^ deftsim_splitmix64(salt));
    return deftsim_splitmix64(a->opt.boot.seed ^ h);
}

/* ---- lifecycle ------------------------------------------------------------------------------ */

static void group_free(group *g, size_t naxes)
{
    if (!g) return;
    free(g->key);
    for (size_t i = 0; g->axv && i < naxes; i++) free(g->axv[i]);
    free(g->axv);
    free(g->model);
    free(g->method);
    free(g->dens);
    free(g->where);
    for (size_t t = 0; g->it && t < g->nit; t++) {
        free(g->it[t].wsel);
        free(g->it[t].wspread);
    }
    free(g->it);
    for (int m = 0; m < (int)nmetrics; m++) free(g->vals[m]);
    free(g);
}

void deftsim_analysis_free(deftsim_analysis *a)
{
    if (!a) return;
    for (size_t i = 0; i < a->ng; i++) group_free(a->g[i], a->naxes);
    free(a->g);
    for (size_t i = 0; i < a->naxes; i++) free(a->axes[i]);
    free(a->axes);
    strlist_free(&a->variants);
    strlist_free(&a->models);
    strlist_free(&a->dens);
    strlist_free(&a->methods);
    for (size_t i = 0; i < NCONTEXT; i++) strlist_free(&a->context[i]);
    for (size_t i = 0; i < a->ncolnames; i++) free(a->colnames[i]);
    free(a->colnames);
    free(a);
}

static deftsim_status add_colname(deftsim_analysis *a, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static deftsim_status add_colname(deftsim_analysis *a, const char *fmt, ...)
{
    char buf[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    char **p = realloc(a->colnames, (a->ncolnames + 1) * sizeof *p);
    if (!p) return deftsim_error_nomem("analysis");
    a->colnames = p;
    if (!(a->colnames[a->ncolnames] = strdup(buf))) return deftsim_error_nomem("analysis");
    a->ncolnames++;
    return DEFTSIM_OK;
}

static deftsim_status build_columns(deftsim_analysis *a)
{
    deftsim_status st = DEFTSIM_OK;
    for (size_t i = 0; i < a->naxes && !st; i++) st = add_colname(a, "%s", a->axes[i]);
    const char *key[] = {"model", "method", "density", "P", "iterations", "ci_level"};
    for (size_t i = 0; i < 6 && !st; i++) st = add_colname(a, "%s", key[i]);
    for (int m = 0; m < (int)nmetrics && !st; m++) {
        const char *n = metrics[m].name;
        if (!st) st = add_colname(a, "%s_median", n);
        if (!st) st = add_colname(a, "%s_lo", n);
        if (!st) st = add_colname(a, "%s_hi", n);
        if (!st) st = add_colname(a, "%s_mean", n);
    }
    const char *tail[] = {"select_exponent", "select_exponent_lo", "select_exponent_hi",
                          "select_exponent_r2", "select_exponent_points", "select_speedup",
                          "select_speedup_lo", "select_speedup_hi", "iteration_speedup",
                          "iteration_speedup_lo", "iteration_speedup_hi",
                          "iteration_speedup_dense", "iteration_speedup_dense_lo",
                          "iteration_speedup_dense_hi"};
    for (size_t i = 0; i < sizeof tail / sizeof tail[0] && !st; i++) st = add_colname(a, "%s", tail[i]);
    for (size_t i = 0; i < NPHASES && !st; i++) st = add_colname(a, "phase_%s_seconds_mean", phase_names[i]);
    if (!st) st = add_colname(a, "noisy");
    return st;
}

deftsim_status deftsim_analysis_new(const deftsim_analysis_options *o, const char *const *axes,
                                    size_t naxes, deftsim_analysis **out)
{
    *out = NULL;
    deftsim_analysis *a = calloc(1, sizeof *a);
    if (!a) return deftsim_error_nomem("analysis");
    if (o) a->opt = *o;
    else deftsim_analysis_options_default(&a->opt);
    deftsim_status st = DEFTSIM_OK;
    if (a->opt.boot.resamples < 100 || !(a->opt.boot.level > 0 && a->opt.boot.level < 1)) {
        st = deftsim_error_set(DEFTSIM_E_INPUT,
                               "analysis: %zu resamples at level %g; need >= 100 and a level in (0, 1)",
                               a->opt.boot.resamples, a->opt.boot.level);
        goto fail;
    }
    if (naxes && !(a->axes = calloc(naxes, sizeof *a->axes))) {
        st = deftsim_error_nomem("analysis");
        goto fail;
    }
    for (size_t i = 0; i < naxes; i++) {
        if (!(a->axes[i] = strdup(axes[i]))) {
            st = deftsim_error_nomem("analysis");
            goto fail;
        }
        a->naxes = i + 1;
    }
    if ((st = build_columns(a))) goto fail;
    *out = a;
    return DEFTSIM_OK;
fail:
    deftsim_analysis_free(a);
    return st;
}

const char *deftsim_analysis_column(const deftsim_analysis *a, size_t i)
{
    return i < a->ncolnames ? a->colnames[i] : NULL;
}
size_t deftsim_analysis_points(const deftsim_analysis *a) { return a->ng; }
int deftsim_analysis_has_column(const deftsim_analysis *a, deftsim_metric m)
{
    return (size_t)m < nmetrics && a->has_col[m];
}
int deftsim_analysis_has_values(const deftsim_analysis *a, deftsim_metric m)
{
    return (size_t)m < nmetrics && a->has_val[m];
}

/* ---- reading rows ----------------------------------------------------------------------------- */

enum { C_MODEL, C_METHOD, C_DENSITY, C_P, C_ITER, C_WORKER, C_PHASE_INDEX, C_NREQ };
static const char *const required[C_NREQ] = {"model", "method", "density", "P", "iteration",
                                             "worker", "phase_index"};

static deftsim_status find_group(deftsim_analysis *a, const char *const *axv, const char *model,
                                 const char *method, const char *dens, uint32_t P, group **out)
{
    /* The key: every part, separated by a byte no name holds. */
    size_t len = strlen(model) + strlen(method) + strlen(dens) + 32;
    for (size_t i = 0; i < a->naxes; i++) len += strlen(axv[i]) + 1;
    char *key = malloc(len);
    if (!key) return deftsim_error_nomem("analysis");
    size_t o = 0;
    for (size_t i = 0; i < a->naxes; i++) o += (size_t)sprintf(key + o, "%s\x1f", axv[i]);
    size_t vlen = o;
    sprintf(key + o, "%s\x1f%s\x1f%s\x1f%u", model, method, dens, P);
    if (a->last && !strcmp(a->last->key, key)) {
        free(key);
        *out = a->last;
        return DEFTSIM_OK;
    }
    for (size_t i = 0; i < a->ng; i++)
        if (!strcmp(a->g[i]->key, key)) {
            free(key);
            *out = a->last = a->g[i];
            return DEFTSIM_OK;
        }
    deftsim_status st;
    group *g = calloc(1, sizeof *g);
    if (!g) {
        free(key);
        return deftsim_error_nomem("analysis");
    }
    g->key = key;
    g->P = P;
    if (!(g->model = strdup(model)) || !(g->method = strdup(method)) || !(g->dens = strdup(dens)) ||
        (a->naxes && !(g->axv = calloc(a->naxes, sizeof *g->axv)))) {
        group_free(g, a->naxes);
        return deftsim_error_nomem("analysis");
    }
    for (size_t i = 0; i < a->naxes; i++)
        if (!(g->axv[i] = strdup(axv[i]))) {
            group_free(g, a->naxes);
            return deftsim_error_nomem("analysis");
        }
    if (deftsim_parse_double(dens, &g->density)) g->density = NAN;
    char save = key[vlen];
    key[vlen] = '\0';
    st = rank_of(&a->variants, key, &g->rank_variant);
    key[vlen] = save;
    if (!st) st = rank_of(&a->models, model, &g->rank_model);
    if (!st) st = rank_of(&a->dens, dens, &g->rank_dens);
    if (!st) st = rank_of(&a->methods, method, &g->rank_method);
    if (!st && deftsim_grow(&a->g, &a->capg, a->ng + 1, sizeof *a->g))
        st = deftsim_error_nomem("analysis");
    if (st) {
        group_free(g, a->naxes);
        return st;
    }
    a->g[a->ng++] = g;
    *out = a->last = g;
    return DEFTSIM_OK;
}

static deftsim_status iter_slot(group *g, size_t it, iter_rec **out)
{
    if (it >= g->nit) {
        size_t n = it + 1;
        if (n > (1u << 26))
            return deftsim_error_set(DEFTSIM_E_INPUT, "iteration %zu: too large", it);
        iter_rec *p = realloc(g->it, n * sizeof *p);
        if (!p) return deftsim_error_nomem("analysis");
        memset(p + g->nit, 0, (n - g->nit) * sizeof *p);
        g->it = p;
        g->nit = n;
    }
    *out = &g->it[it];
    return DEFTSIM_OK;
}

/* The first row of an iteration of point g: the iteration-level values (mc: their columns),
 * the per-worker arrays, and the context columns' values (cc: their columns). */
static deftsim_status iter_first_row(deftsim_analysis *a, deftsim_csvr *r, const group *g,
                                     iter_rec *ir, const long *mc, const long *cc)
{
    deftsim_status st;
    ir->seen = 1;
    for (int m = 0; m < (int)nmetrics; m++) {
        ir->v[m] = NAN;
        if (!iteration_level(m) || mc[m] < 0) continue;
        if ((st = deftsim_csvr_number(r, (size_t)mc[m], &ir->v[m]))) return st;
    }
    ir->v[DEFTSIM_M_SELECT] = ir->v[DEFTSIM_M_COMPUTE] = -INFINITY;
    ir->v[DEFTSIM_M_BYTES_MAX] = -INFINITY;
    ir->ph_ws = -INFINITY;
    ir->ph_w = -1;
    if (!ir->wsel && (!(ir->wsel = malloc(g->P * sizeof *ir->wsel)) ||
                      !(ir->wspread = malloc(g->P * sizeof *ir->wspread)))) {
        return deftsim_error_nomem("analysis");
    }
    for (size_t i = 0; i < NCONTEXT; i++) {
        if (cc[i] < 0) continue;
        const char *v = deftsim_csvr_field(r, (size_t)cc[i]);
        size_t k = 0;
        while (k < a->context[i].n && strcmp(a->context[i].items[k], v)) k++;
        if (k < a->context[i].n) continue;
        if (a->context[i].n >= CONTEXT_MAX) {
            a->context_more[i] = 1;
            continue;
        }
        if ((st = rank_of(&a->context[i], v, &k))) return st;
    }
    return DEFTSIM_OK;
}

deftsim_status deftsim_analysis_add_file(deftsim_analysis *a, const char *path,
                                         const char *const *values)
{
    if (a->finished)
        return deftsim_error_set(DEFTSIM_E_INTERNAL, "analysis: a file added after finish()");
    deftsim_csvr *r;
    deftsim_status st = deftsim_csvr_open(path, &r);
    if (st) return st;
    long req[C_NREQ], mc[DEFTSIM_M_MAX];
    for (int i = 0; i < C_NREQ; i++)
        if ((req[i] = deftsim_csvr_find(r, required[i])) < 0) {
            st = deftsim_error_set(DEFTSIM_E_INPUT,
                                   "%s: no column '%s' (not a table of deftsim rows? docs/OUTPUT.md)",
                                   path, required[i]);
            goto done;
        }
    for (int m = 0; m < (int)nmetrics; m++) {
        mc[m] = deftsim_csvr_find(r, metrics[m].column);
        if (mc[m] < 0 && !metrics[m].optional) {
            st = deftsim_error_set(DEFTSIM_E_INPUT,
                                   "%s: no column '%s' (not a table of deftsim rows? docs/OUTPUT.md)",
                                   path, metrics[m].column);
            goto done;
        }
        if (mc[m] >= 0) a->has_col[m] = 1;
    }
    long cc[NCONTEXT];
    for (size_t i = 0; i < NCONTEXT; i++) cc[i] = deftsim_csvr_find(r, summary_context_cols[i]);
    /* The compute phases by name, when the rows have them (every deftsim version writes them;
     * a hand-made table may not). */
    long c_ph = deftsim_csvr_find(r, "phase"), c_kind = deftsim_csvr_find(r, "phase_kind"),
         c_psec = deftsim_csvr_find(r, "phase_seconds");
    /* The spread of the timing repetitions (rows written since [timing]). */
    long c_smin = deftsim_csvr_find(r, "select_seconds_min"),
         c_smax = deftsim_csvr_find(r, "select_seconds_max");
    int has_ph = c_ph >= 0 && c_kind >= 0 && c_psec >= 0;
    static const char *const none[1] = {""};
    const char *const *axv = a->naxes ? values : none;
    a->files++;
    uint64_t rows0 = a->rows;
    int got;
    while (!(st = deftsim_csvr_next(r, &got)) && got) {
        a->rows++;
        double P, it, w, pi;
        if ((st = deftsim_csvr_number(r, (size_t)req[C_P], &P)) ||
            (st = deftsim_csvr_number(r, (size_t)req[C_ITER], &it)) ||
            (st = deftsim_csvr_number(r, (size_t)req[C_WORKER], &w)) ||
            (st = deftsim_csvr_number(r, (size_t)req[C_PHASE_INDEX], &pi)))
            goto done;
        if (!(P >= 1 && P <= 1e9 && P == floor(P)) || !(it >= 0 && it == floor(it)) ||
            !(w >= 0 && w < P && w == floor(w)) || !(pi >= 0)) {
            st = deftsim_error_set(DEFTSIM_E_INPUT,
                                   "%s:%zu: P = %g, iteration = %g, worker = %g, phase_index = %g "
                                   "are not a valid row",
                                   path, deftsim_csvr_line(r), P, it, w, pi);
            goto done;
        }
        const char *dens = deftsim_csvr_field(r, (size_t)req[C_DENSITY]);
        double dv;
        if (deftsim_parse_double(dens, &dv) || !(dv > 0 && dv <= 1)) {
            st = deftsim_error_set(DEFTSIM_E_INPUT, "%s:%zu: column density: '%s' is not in (0, 1]",
                                   path, deftsim_csvr_line(r), dens);
            goto done;
        }
        group *g = NULL;
        if ((st = find_group(a, axv, deftsim_csvr_field(r, (size_t)req[C_MODEL]),
                             deftsim_csvr_field(r, (size_t)req[C_METHOD]), dens, (uint32_t)P, &g)))
            goto done;
        if (!g->where) {
            char at[64];
            snprintf(at, sizeof at, ":%zu", deftsim_csvr_line(r));
            if (!(g->where = malloc(strlen(path) + strlen(at) + 1))) {
                st = deftsim_error_nomem("analysis");
                goto done;
            }
            strcpy(g->where, path);
            strcat(g->where, at);
        }
        iter_rec *ir = NULL;
        if ((st = iter_slot(g, (size_t)it, &ir))) goto done;
        if (!ir->seen && (st = iter_first_row(a, r, g, ir, mc, cc))) goto done;
        /* [compute]: worker 0's forward and backward rows, the same on every worker. */
        if (has_ph && w == 0 && !strcmp(deftsim_csvr_field(r, (size_t)c_kind), "model")) {
            double ps;
            if ((st = deftsim_csvr_number(r, (size_t)c_psec, &ps))) goto done;
            ir->v[DEFTSIM_M_FWDBWD] = (isnan(ir->v[DEFTSIM_M_FWDBWD]) ? 0 : ir->v[DEFTSIM_M_FWDBWD]) + ps;
        }
        if (has_ph) {
            g->has_ph = 1;
            /* A compute row of the slowest worker so far: its phases are the ones kept. Every
             * row repeats its worker's worker_seconds, so rows may come in any order. */
            if (!strcmp(deftsim_csvr_field(r, (size_t)c_kind), "compute")) {
                double ws, ps;
                if ((st = deftsim_csvr_number(r, (size_t)mc[DEFTSIM_M_COMPUTE], &ws)) ||
                    (st = deftsim_csvr_number(r, (size_t)c_psec, &ps)))
                    goto done;
                if (ws > ir->ph_ws) {
                    memset(ir->ph, 0, sizeof ir->ph);
                    ir->ph_ws = ws;
                    ir->ph_w = w;
                }
                if (w == ir->ph_w && isfinite(ps))
                    ir->ph[phase_slot(deftsim_csvr_field(r, (size_t)c_ph))] += ps;
            }
        }
        if (pi != 0) continue;
        /* The worker's own columns, once per worker. */
        if (++ir->nworkers > g->P) {
            st = deftsim_error_set(DEFTSIM_E_INPUT,
                                   "%s:%zu: %s d=%s P=%u iteration %zu has more than P workers' "
                                   "rows: the same point was read twice",
                                   path, deftsim_csvr_line(r), g->method, g->dens, g->P, (size_t)it);
            goto done;
        }
        double sel, ws, bs;
        if ((st = deftsim_csvr_number(r, (size_t)mc[DEFTSIM_M_SELECT], &sel)) ||
            (st = deftsim_csvr_number(r, (size_t)mc[DEFTSIM_M_COMPUTE], &ws)) ||
            (st = deftsim_csvr_number(r, (size_t)mc[DEFTSIM_M_BYTES], &bs)))
            goto done;
        if (sel > ir->v[DEFTSIM_M_SELECT]) ir->v[DEFTSIM_M_SELECT] = sel;
        ir->wsel[ir->nworkers - 1] = sel;
        ir->wspread[ir->nworkers - 1] = NAN;
        if (c_smin >= 0 && c_smax >= 0) {
            double lo, hi;
            if ((st = deftsim_csvr_number(r, (size_t)c_smin, &lo)) ||
                (st = deftsim_csvr_number(r, (size_t)c_smax, &hi)))
                goto done;
            /* hi == lo: one timed run ([timing] repeats = 1), whose spread is unknown, not 0
             * (repeated runs do not agree to the nanosecond). */
            if (lo > 0 && hi > lo) ir->wspread[ir->nworkers - 1] = (hi - lo) / lo;
        }
        if (ws > ir->v[DEFTSIM_M_COMPUTE]) ir->v[DEFTSIM_M_COMPUTE] = ws;
        if (bs > ir->v[DEFTSIM_M_BYTES_MAX]) ir->v[DEFTSIM_M_BYTES_MAX] = bs;
        ir->bytes_sum += bs;
    }
    /* Every point has rows (docs/OUTPUT.md): a header alone is a file cut short. */
    if (!st && a->rows == rows0)
        st = deftsim_error_set(DEFTSIM_E_INPUT, "%s: a header and no rows", path);
done:
    deftsim_csvr_close(r);
    return st;
}

/* ---- computing -------------------------------------------------------------------------------- */

static int cmp_group(const void *pa, const void *pb)
{
    const group *x = *(const group *const *)pa, *y = *(const group *const *)pb;
#define CMP(f) if (x->f != y->f) return x->f < y->f ? -1 : 1
    CMP(rank_variant);
    CMP(rank_model);
    CMP(rank_dens);
    CMP(rank_method);
    CMP(P);
#undef CMP
    return 0;
}

/* Same variant, model and density (and method when same_method): one curve of a figure. */
static int cmp_dbl(const void *pa, const void *pb)
{
    double x = *(const double *)pa, y = *(const double *)pb;
    return (x > y) - (x < y);
}

/* The median of v's finite values (reordered), NaN when there is none. */
static double median_finite(double *v, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(v[i])) v[k++] = v[i];
    if (!k) return NAN;
    qsort(v, k, sizeof *v, cmp_dbl);
    return k % 2 ? v[k / 2] : 0.5 * (v[k / 2 - 1] + v[k / 2]);
}

static deftsim_status finish_group(deftsim_analysis *a, group *g)
{
    /* Every iteration must hold every worker's rows. */
    for (size_t t = 0; t < g->nit; t++) {
        iter_rec *ir = &g->it[t];
        /* Named by where the point's first row was read: a row whose method or density was
         * changed makes a point of its own, found here. */
        if (!ir->seen)
            return deftsim_error_set(DEFTSIM_E_INPUT,
                                     "%s d=%s P=%u (first row %s): no rows for iteration %zu of %zu",
                                     g->method, g->dens, g->P, g->where, t, g->nit);
        if (ir->nworkers != g->P)
            return deftsim_error_set(DEFTSIM_E_INPUT,
                                     "%s d=%s P=%u (first row %s) iteration %zu: rows of %u of its "
                                     "%u workers",
                                     g->method, g->dens, g->P, g->where, t, ir->nworkers, g->P);
        ir->v[DEFTSIM_M_BYTES] = ir->bytes_sum / g->P;
        ir->v[DEFTSIM_M_SELECT_MEDIAN] = median_finite(ir->wsel, g->P);
        ir->v[DEFTSIM_M_REP_SPREAD] = median_finite(ir->wspread, g->P);
        /* As multiples of the reference (rows without one: NaN, empty cells). */
        double ref = ir->v[DEFTSIM_M_REF];
        ir->v[DEFTSIM_M_SELECT_REF] = ref > 0 ? ir->v[DEFTSIM_M_SELECT] / ref : NAN;
        ir->v[DEFTSIM_M_SELECT_MEDIAN_REF] = ref > 0 ? ir->v[DEFTSIM_M_SELECT_MEDIAN] / ref : NAN;
    }
    size_t first = a->opt.warmup < g->nit ? a->opt.warmup : g->nit;
    g->iterations = g->nit - first;
    /* The slowest worker's phases: means over the iterations, so that they add up to
     * compute_seconds_mean. */
    for (size_t j = 0; j < NPHASES; j++) {
        double sum = 0;
        for (size_t t = first; t < g->nit; t++) sum += g->it[t].ph[j];
        g->ph_mean[j] = g->has_ph && g->iterations ? sum / (double)g->iterations : NAN;
    }
    for (int m = 0; m < (int)nmetrics; m++) {
        size_t k = 0;
        g->vals[m] = malloc((g->iterations ? g->iterations : 1) * sizeof(double));
        if (!g->vals[m]) return deftsim_error_nomem("analysis");
        for (size_t t = first; t < g->nit; t++)
            if (isfinite(g->it[t].v[m])) g->vals[m][k++] = g->it[t].v[m];
        g->nvals[m] = k;
        if (k) a->has_val[m] = 1;
        deftsim_boot_options bo = a->opt.boot;
        bo.seed = seed_for(a, g->key, (uint64_t)m);
        deftsim_status st = deftsim_bootstrap_median(g->vals[m], k, &bo, &g->est[m], NULL);
        if (st) return deftsim_error_wrap(st, "%s d=%s P=%u, %s", g->method, g->dens, g->P,
                                          metrics[m].name);
    }
    return DEFTSIM_OK;
}

static void nan_estimate(deftsim_estimate *e)
{
    e->n = 0;
    e->median = e->mean = e->lo = e->hi = NAN;
}

static void nan_fit(deftsim_fit *f)
{
    memset(f, 0, sizeof *f);
    f->slope = f->intercept = f->slope_se = f->intercept_se = NAN;
    f->slope_lo = f->slope_hi = f->r2 = f->residual_sd = NAN;
}

static deftsim_status speedup(deftsim_analysis *a, const group *topk, group *g, deftsim_metric m,
                              uint64_t salt, deftsim_estimate *out)
{
    nan_estimate(out);
    if (!topk) return DEFTSIM_OK;
    if (topk == g) {
        /* topk against itself: 1 by definition, not a resampled ratio of a sample to itself. */
        if (g->nvals[m] && g->est[m].median > 0) {
            out->n = g->nvals[m];
            out->median = out->mean = out->lo = out->hi = 1;
        }
        return DEFTSIM_OK;
    }
    deftsim_boot_options bo = a->opt.boot;
    bo.seed = seed_for(a, g->key, salt);
    return deftsim_bootstrap_ratio(topk->vals[m], topk->nvals[m], g->vals[m], g->nvals[m], &bo, out);
}

deftsim_status deftsim_analysis_finish(deftsim_analysis *a)
{
    if (a->finished) return DEFTSIM_OK;
    if (!a->ng)
        return deftsim_error_set(DEFTSIM_E_INPUT, "analysis: no rows were read (%zu file%s)",
                                 a->files, a->files == 1 ? "" : "s");
    deftsim_status st;
    for (size_t i = 0; i < a->ng; i++)
        if ((st = finish_group(a, a->g[i]))) return st;
    qsort(a->g, a->ng, sizeof *a->g, cmp_group);
    a->last = NULL;
    double *x = malloc(a->ng * sizeof *x), *y = malloc(a->ng * sizeof *y);
    if (!x || !y) {
        free(x);
        free(y);
        return deftsim_error_nomem("analysis");
    }
    /* Scaling exponent per series: one point per P, its median selection time. Groups are
     * sorted so that a series is a run of consecutive groups, P ascending. */
    for (size_t i = 0; i < a->ng;) {
        size_t j = i;
        while (j < a->ng && summary_same_series(a->g[i], a->g[j], 1)) j++;
        size_t n = 0;
        for (size_t k = i; k < j; k++) {
            x[n] = a->g[k]->P;
            y[n] = a->g[k]->est[DEFTSIM_M_SELECT].median;
            n++;
        }
        deftsim_fit f;
        nan_fit(&f);
        size_t usable = 0;
        for (size_t k = 0; k < n; k++)
            if (x[k] > 0 && y[k] > 0 && isfinite(y[k])) usable++;
        /* A line through log-log points needs two distinct P with positive times; fewer
         * (a single P, or a method that selects nothing, like dense) leave the cells empty. */
        if (usable >= 2) {
            st = deftsim_fit_loglog(x, y, n, a->opt.boot.level, &f);
            if (st == DEFTSIM_E_INPUT) nan_fit(&f);
            else if (st) {
                free(x);
                free(y);
                return st;
            }
        }
        f.n = usable >= 2 ? f.n : usable;
        for (size_t k = i; k < j; k++) a->g[k]->fit = f;
        i = j;
    }
    free(x);
    free(y);
    /* Speedups over topk (and in iteration time over dense) at the same variant, model,
     * density and P. */
    for (size_t i = 0; i < a->ng; i++) {
        group *g = a->g[i], *topk = NULL, *dense = NULL;
        for (size_t k = 0; k < a->ng; k++) {
            group *h = a->g[k];
            if (!summary_same_series(g, h, 0) || h->P != g->P) continue;
            if (!strcmp(h->method, "topk")) topk = h;
            if (!strcmp(h->method, "dense")) dense = h;
        }
        if ((st = speedup(a, topk, g, DEFTSIM_M_SELECT, 1001, &g->speed_select))) return st;
        if ((st = speedup(a, topk, g, DEFTSIM_M_ITERATION, 1002, &g->speed_iter))) return st;
        if ((st = speedup(a, dense, g, DEFTSIM_M_ITERATION, 1003, &g->speed_iter_dense))) return st;
    }
    a->finished = 1;
    return DEFTSIM_OK;
}

/* ---- summary.csv ---------------------------------------------------------------------------- */

static void put_est(FILE *f, const deftsim_estimate *e, int with_mean)
{
    char b[48];
    fprintf(f, ",%s", deftsim_csv_double(b, sizeof b, e->median));
    fprintf(f, ",%s", deftsim_csv_double(b, sizeof b, e->lo));
    fprintf(f, ",%s", deftsim_csv_double(b, sizeof b, e->hi));
    if (with_mean) fprintf(f, ",%s", deftsim_csv_double(b, sizeof b, e->mean));
}

deftsim_status deftsim_analysis_write_csv(const deftsim_analysis *a, const char *path)
{
    if (!a->finished) return deftsim_error_set(DEFTSIM_E_INTERNAL, "analysis: write before finish()");
    deftsim_afile *af;
    deftsim_status st = deftsim_afile_open(&af, path);
    if (st) return st;
    FILE *f = deftsim_afile_stream(af);
    for (size_t i = 0; i < a->ncolnames; i++) fprintf(f, "%s%s", i ? "," : "", a->colnames[i]);
    fputc('\n', f);
    char b[48];
    for (size_t i = 0; i < a->ng; i++) {
        const group *g = a->g[i];
        for (size_t x = 0; x < a->naxes; x++) {
            deftsim_csv_field(f, g->axv[x]);
            fputc(',', f);
        }
        deftsim_csv_field(f, g->model);
        fputc(',', f);
        deftsim_csv_field(f, g->method);
        fprintf(f, ",%s,%u,%zu,%s", g->dens, g->P, g->iterations,
                deftsim_csv_double(b, sizeof b, a->opt.boot.level));
        for (int m = 0; m < (int)nmetrics; m++) put_est(f, &g->est[m], 1);
        fprintf(f, ",%s", deftsim_csv_double(b, sizeof b, g->fit.slope));
        fprintf(f, ",%s", deftsim_csv_double(b, sizeof b, g->fit.slope_lo));
        fprintf(f, ",%s", deftsim_csv_double(b, sizeof b, g->fit.slope_hi));
        fprintf(f, ",%s", deftsim_csv_double(b, sizeof b, g->fit.r2));
        fprintf(f, ",%zu", g->fit.n);
        put_est(f, &g->speed_select, 0);
        put_est(f, &g->speed_iter, 0);
        put_est(f, &g->speed_iter_dense, 0);
        for (size_t j = 0; j < NPHASES; j++)
            fprintf(f, ",%s", deftsim_csv_double(b, sizeof b, g->ph_mean[j]));
        double spread = g->est[DEFTSIM_M_REP_SPREAD].median;
        if (isnan(spread)) fprintf(f, ",");
        else fprintf(f, ",%d", deftsim_analysis_is_noisy(spread, a->opt.noisy_spread));
        fputc('\n', f);
    }
    if (ferror(f)) {
        deftsim_afile_abort(af);
        return deftsim_error_set(DEFTSIM_E_IO, "%s: write failed", path);
    }
    return deftsim_afile_commit(af);
}

/* ---- iterations.csv ------------------------------------------------------------------------- */

/* Its per-iteration columns after the keys, in this order (docs/ANALYSIS.md), then every added
 * quantity. */
static const deftsim_metric iter_cols[] = {DEFTSIM_M_BUILDUP, DEFTSIM_M_CAPTURED,
                                           DEFTSIM_M_CAPTURED_RATIO};
#define NITER_COLS (sizeof iter_cols / sizeof iter_cols[0] + nmetrics - DEFTSIM_M_BASE_COUNT)
static size_t iter_col(size_t i)
{
    return i < sizeof iter_cols / sizeof iter_cols[0]
               ? (size_t)iter_cols[i]
               : DEFTSIM_M_BASE_COUNT + i - sizeof iter_cols / sizeof iter_cols[0];
}

deftsim_status deftsim_analysis_write_iterations(const deftsim_analysis *a, const char *path)
{
    if (!a->finished) return deftsim_error_set(DEFTSIM_E_INTERNAL, "analysis: write before finish()");
    deftsim_afile *af;
    deftsim_status st = deftsim_afile_open(&af, path);
    if (st) return st;
    FILE *f = deftsim_afile_stream(af);
    for (size_t i = 0; i < a->naxes; i++) fprintf(f, "%s,", a->colnames[i]);
    fputs("model,method,density,P,iteration,warmup", f);
    for (size_t m = 0; m < NITER_COLS; m++) fprintf(f, ",%s", metrics[iter_col(m)].name);
    fputc('\n', f);
    char b[48];
    for (size_t i = 0; i < a->ng; i++) {
        const group *g = a->g[i];
        for (size_t t = 0; t < g->nit; t++) {
            const iter_rec *ir = &g->it[t];
            if (!ir->seen) continue;
            for (size_t x = 0; x < a->naxes; x++) {
                deftsim_csv_field(f, g->axv[x]);
                fputc(',', f);
            }
            deftsim_csv_field(f, g->model);
            fputc(',', f);
            deftsim_csv_field(f, g->method);
            fprintf(f, ",%s,%u,%zu,%d", g->dens, g->P, t, t < a->opt.warmup);
            for (size_t m = 0; m < NITER_COLS; m++)
                fprintf(f, ",%s", deftsim_csv_double(b, sizeof b, ir->v[iter_col(m)]));
            fputc('\n', f);
        }
    }
    if (ferror(f)) {
        deftsim_afile_abort(af);
        return deftsim_error_set(DEFTSIM_E_IO, "%s: write failed", path);
    }
    return deftsim_afile_commit(af);
}
