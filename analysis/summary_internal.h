/* summary_internal.h - what the sweep summary's two files share (internal to analysis/): the
 * points as summary.c reads and computes them, and the context columns. summary.c reads the
 * rows, computes and writes summary.csv; summary_md.c writes summary.md from what it computed
 * (it calls nothing of summary.c). */
#ifndef DEFTSIM_SUMMARY_INTERNAL_H
#define DEFTSIM_SUMMARY_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "deftsim_analysis.h"

/* The sparsifiers' compute phases summary.csv names (summary.c's phase_names). */
#define NPHASES 12

/* Run-level columns whose values summary.md reports (the settings the numbers depend on). */
#define NCONTEXT 15
extern const char *const summary_context_cols[NCONTEXT];
#define CONTEXT_MAX 8 /* distinct values kept per column; more are summarised */

typedef struct {
    double v[DEFTSIM_M_MAX];
    double ph[NPHASES];    /* the slowest worker's (largest worker_seconds) compute phases */
    double ph_ws;          /* its worker_seconds; -inf before its first compute row */
    double ph_w;           /* that worker */
    double bytes_sum;
    double *wsel;          /* P: each worker's select_seconds (the median worker) */
    double *wspread;       /* P: each worker's repetition spread (NaN: not in the rows) */
    uint32_t nworkers;     /* phase_index 0 rows seen */
    int seen;
} iter_rec;

typedef struct {
    char *key;             /* axes, model, method, density, P joined by '\x1f' */
    char **axv;            /* naxes */
    char *model, *method, *dens;
    double density;
    uint32_t P;
    size_t rank_variant, rank_model, rank_dens, rank_method;
    iter_rec *it;
    size_t nit;
    char *where;           /* "file:line" of the point's first row, for messages */
    /* results */
    size_t iterations;     /* iterations after the warm-up */
    double *vals[DEFTSIM_M_MAX];
    size_t nvals[DEFTSIM_M_MAX];
    deftsim_estimate est[DEFTSIM_M_MAX];
    deftsim_fit fit;       /* select_seconds against P over the point's series */
    deftsim_estimate speed_select, speed_iter;
    deftsim_estimate speed_iter_dense; /* dense's median iteration time over the method's */
    int has_ph;            /* its rows have phase, phase_kind and phase_seconds */
    double ph_mean[NPHASES]; /* mean over the iterations of ph; NaN without has_ph */
} group;

typedef struct {
    char **items;
    size_t n, cap;
} strlist;

struct deftsim_analysis {
    deftsim_analysis_options opt;
    char **axes;
    size_t naxes;
    group **g;
    size_t ng, capg;
    group *last;
    strlist variants, models, dens, methods;
    int has_col[DEFTSIM_M_MAX], has_val[DEFTSIM_M_MAX];
    strlist context[NCONTEXT];      /* distinct values of each context column */
    int context_more[NCONTEXT];     /* more than CONTEXT_MAX of them */
    size_t files;
    uint64_t rows;
    int finished;
    char **colnames;
    size_t ncolnames;
    deftsim_analysis_note_fn note;  /* the conditions of a series, for summary.md, or NULL */
    void *note_ctx;
};

/* Two points of one series: the same variant, model and density (and method, if asked). */
static inline int summary_same_series(const group *x, const group *y, int same_method)
{
    return x->rank_variant == y->rank_variant && x->rank_model == y->rank_model &&
           x->rank_dens == y->rank_dens && (!same_method || x->rank_method == y->rank_method);
}

#endif
