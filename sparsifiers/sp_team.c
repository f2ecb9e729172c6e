/* sp_team.c - what the sparsifiers share between the ranks of spread mode (sp_internal.h,
 * deftsim_team.h). Each helper moves the per-worker data of every rank's block to every rank;
 * the layouts are the one-process ones, so the steps after a share read what one process
 * would have computed. */
#include <stdlib.h>
#include <string.h>

#include "sp_internal.h"

deftsim_status sp_share_fixed(deftsim_sparsifier *s, void *base, size_t each)
{
    if (!sp_spread(s) || !each) return DEFTSIM_OK;
    const deftsim_team *t = s->p.team;
    uint64_t *bytes = malloc(t->size * sizeof *bytes);
    if (!bytes) return deftsim_error_nomem("%s: spread mode", s->name);
    for (uint32_t r = 0; r < t->size; r++)
        bytes[r] = (uint64_t)(deftsim_team_first(s->P, t->size, r + 1) -
                              deftsim_team_first(s->P, t->size, r)) * each;
    char *b = base;
    deftsim_status st = t->allgatherv(t->ctx, b + (size_t)s->lo * each, b, bytes);
    free(bytes);
    return st;
}

/* One worker's header in sp_share_sel's message. */
typedef struct {
    uint64_t start, count;
    double cost;
    uint64_t sorted;
} sel_head;

deftsim_status sp_share_sel(deftsim_sparsifier *s, float *vals, int compact)
{
    if (!sp_spread(s)) return DEFTSIM_OK;
    const deftsim_team *t = s->p.team;
    deftsim_step_result *r = &s->res;
    size_t item = sizeof(deftsim_kidx) + (vals ? sizeof(float) : 0);
    uint64_t bytes = 0;
    for (uint32_t w = s->lo; w < s->hi; w++)
        bytes += sizeof(sel_head) + r->local_count[w] * item;
    char *mine = malloc(bytes ? bytes : 1), *p = mine;
    if (!mine) return deftsim_error_nomem("%s: spread mode", s->name);
    for (uint32_t w = s->lo; w < s->hi; w++) {
        sel_head h = {s->sel_start[w], r->local_count[w], r->cost[w], s->sel_sorted[w]};
        memcpy(p, &h, sizeof h);
        p += sizeof h;
        size_t c = (size_t)h.count;
        if (c) memcpy(p, s->sel + h.start, c * sizeof(deftsim_kidx));
        p += c * sizeof(deftsim_kidx);
        if (vals && c) memcpy(p, vals + h.start, c * sizeof(float));
        if (vals) p += c * sizeof(float);
    }
    void *all;
    uint64_t total;
    deftsim_status st = deftsim_team_gather_var(t, mine, bytes, &all, &total, NULL);
    free(mine);
    if (st) return st;
    const char *q = all;
    uint64_t next = 0;
    for (uint32_t w = 0; w < s->P; w++) {
        sel_head h;
        memcpy(&h, q, sizeof h);
        q += sizeof h;
        size_t c = (size_t)h.count;
        /* compact: the picks back to back in worker order, as one process lays them out;
         * every worker's (this rank's too) copied from the gathered message. */
        if (compact) h.start = next;
        next += h.count;
        s->sel_start[w] = h.start;
        r->local_count[w] = h.count;
        r->cost[w] = h.cost;
        s->sel_sorted[w] = (unsigned char)h.sorted;
        int copy = compact || !sp_mine(s, w);
        if (copy && c) memcpy(s->sel + h.start, q, c * sizeof(deftsim_kidx));
        q += c * sizeof(deftsim_kidx);
        if (vals && copy && c) memcpy(vals + h.start, q, c * sizeof(float));
        if (vals) q += c * sizeof(float);
    }
    free(all);
    return DEFTSIM_OK;
}

deftsim_status sp_chain_in(deftsim_sparsifier *s, void *buf, uint64_t bytes)
{
    return sp_spread(s) ? deftsim_team_chain_in(s->p.team, buf, bytes) : DEFTSIM_OK;
}

deftsim_status sp_chain_out(deftsim_sparsifier *s, void *buf, uint64_t bytes)
{
    return sp_spread(s) ? deftsim_team_chain_out(s->p.team, buf, bytes) : DEFTSIM_OK;
}

deftsim_status sp_chain_bcast(deftsim_sparsifier *s, void *buf, uint64_t bytes)
{
    return sp_spread(s) ? deftsim_team_chain_bcast(s->p.team, buf, bytes) : DEFTSIM_OK;
}

deftsim_status sp_share_done(deftsim_sparsifier *s)
{
    if (!sp_spread(s)) return DEFTSIM_OK;
    deftsim_step_result *r = &s->res;
    deftsim_schedule *sc = &r->schedule;
    size_t ncomp = 0;
    for (size_t i = 0; i < sc->nsteps; i++) ncomp += sc->steps[i].kind == DEFTSIM_STEP_COMPUTE;
    /* Per worker: its phases, its COMPUTE steps, cost, local count (as 8 bytes each). */
    size_t each = r->nphases + ncomp + 2;
    double *buf = malloc((size_t)s->P * each * sizeof *buf + 1);
    if (!buf) return deftsim_error_nomem("%s: spread mode", s->name);
    for (uint32_t w = s->lo; w < s->hi; w++) {
        double *b = buf + (size_t)w * each;
        memcpy(b, r->phase_seconds + (size_t)w * r->nphases, r->nphases * sizeof *b);
        b += r->nphases;
        for (size_t i = 0; i < sc->nsteps; i++)
            if (sc->steps[i].kind == DEFTSIM_STEP_COMPUTE) *b++ = sc->steps[i].seconds[w];
        *b++ = r->cost[w];
        memcpy(b, &r->local_count[w], sizeof *b);
    }
    deftsim_status st = sp_share_fixed(s, buf, each * sizeof *buf);
    if (!st)
        for (uint32_t w = 0; w < s->P; w++) {
            if (sp_mine(s, w)) continue;
            const double *b = buf + (size_t)w * each;
            memcpy(r->phase_seconds + (size_t)w * r->nphases, b, r->nphases * sizeof *b);
            b += r->nphases;
            for (size_t i = 0; i < sc->nsteps; i++)
                if (sc->steps[i].kind == DEFTSIM_STEP_COMPUTE) sc->steps[i].seconds[w] = *b++;
            r->cost[w] = *b++;
            memcpy(&r->local_count[w], b, sizeof *b);
        }
    free(buf);
    return st;
}

deftsim_status sp_bcast_from(deftsim_sparsifier *s, uint32_t w, void *buf, uint64_t bytes)
{
    if (!sp_spread(s) || !bytes) return DEFTSIM_OK;
    const deftsim_team *t = s->p.team;
    return t->bcast(t->ctx, deftsim_team_owner(s->P, t->size, w), buf, bytes);
}
