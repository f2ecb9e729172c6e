/* sweep_spread.c - a sweep in spread mode (deftsim_sweep.h's team, docs/CLUSTER.md): rank 0
 * keeps the folder and runs the points as one process would; it hands the other ranks the
 * list of points to run, which they run with it, writing nothing. */
#include <stdlib.h>
#include <string.h>

#include "sweep_internal.h"

/* Spread mode: rank 0's list of the points to run (their indices), on every rank. *idx is
 * allocated (free it). */
deftsim_status deftsim_sweep_spread_list(const deftsim_sweep *s, uint64_t **idx, uint64_t *n)
{
    const deftsim_team *t = deftsim_sweep_spread_team(s);
    *idx = malloc((s->npoints ? s->npoints : 1) * sizeof **idx);
    if (!*idx) return deftsim_error_nomem("sweep");
    *n = 0;
    if (t->rank == 0)
        for (size_t i = 0; i < s->npoints; i++)
            if (s->points[i].state != DEFTSIM_POINT_DONE && s->points[i].in_shard) (*idx)[(*n)++] = i;
    deftsim_status st = t->bcast(t->ctx, 0, n, sizeof *n);
    if (!st && *n > s->npoints)
        st = deftsim_error_set(DEFTSIM_E_INTERNAL, "spread mode: rank 0 sent %llu points of %zu",
                               (unsigned long long)*n, s->npoints);
    if (!st && *n) st = t->bcast(t->ctx, 0, *idx, *n * sizeof **idx);
    return st;
}

/* Spread mode, ranks > 0: the points rank 0 runs, with it, writing nothing. */
deftsim_status deftsim_sweep_spread_follow(deftsim_sweep *s, deftsim_sweep_summary *sum)
{
    uint64_t *idx, n;
    deftsim_status st = deftsim_sweep_spread_list(s, &idx, &n);
    deftsim_run_options eo = deftsim_sweep_engine_options(s);
    deftsim_engine *e = NULL;
    size_t e_variant = SIZE_MAX;
    for (uint64_t j = 0; !st && j < n; j++) {
        const point *p = &s->points[idx[j]];
        if (p->variant != e_variant) {
            deftsim_engine_free(e);
            e = NULL;
            e_variant = p->variant;
            if ((st = deftsim_engine_new(s->variants[p->variant].cfg, &eo, &e))) break;
        }
        if (!(st = deftsim_engine_run_point(e, p->method, p->density, p->P, NULL, NULL)))
            sum->ran++;
    }
    deftsim_engine_free(e);
    free(idx);
    return st;
}

