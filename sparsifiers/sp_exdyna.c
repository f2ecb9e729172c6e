/* sp_exdyna.c - ExDyna (Yoon and Oh, CCGrid 2024), as docs/SPARSIFIERS.md ("exdyna") defines
 * it after the authors' code (kljp/exdyna, ExDynaReducer): MiCRO (sp_micro.c) with partitions
 * made of 1024 blocks whose sizes adapt. The block size is floor(n / 1024) rounded down to a
 * multiple of 32, the remainder goes to the last partition; before every step after the first,
 * one left-to-right sweep over the partition boundaries moves at most one block across each
 * boundary, from a partition whose previous count was above 1.05 times the mean to a
 * neighbour below 0.95238 times it, never taking a partition below 1024 / (4 P) blocks, and
 * carries an estimate of the moved count into the next comparison. Every worker computes the
 * same plan from the already gathered counts: no extra message. */
#include <stdlib.h>
#include <string.h>

#include "sp_internal.h"

typedef struct {
    deftsim_exdyna_geometry g;
    int64_t *blk_part, *blk_pos, *temp;
} exdyna_plan;

void deftsim_exdyna_initial(uint64_t n, uint32_t P, deftsim_exdyna_geometry *g,
                            int64_t *blk_part, int64_t *blk_pos)
{
    const uint64_t B = DEFTSIM_EXDYNA_BLOCKS;
    uint64_t a = n / B;
    g->blk_size = a - a % 32;
    g->rem = n - B * g->blk_size;
    g->min_blk = (double)B / (4.0 * (double)P);
    uint64_t q = B / P, rr = B % P;
    int64_t pos = 0;
    for (uint32_t j = 0; j < P; j++) {
        blk_part[j] = (int64_t)(q + (j < rr ? 1 : 0));
        blk_pos[j] = pos;
        pos += blk_part[j];
    }
}

uint32_t deftsim_exdyna_repartition(uint64_t n, uint32_t P, const deftsim_exdyna_geometry *g,
                                    uint64_t t_prev, const uint64_t *counts, uint64_t k_prev,
                                    int64_t *temp, int64_t *blk_part, int64_t *blk_pos)
{
    /* Rank i selected in partition (t_prev mod P + i) mod P. */
    for (uint32_t i = 0; i < P; i++) temp[(t_prev % P + i) % P] = (int64_t)counts[i];
    int64_t k_acc = (int64_t)(k_prev / P);
    /* No count at all (or fewer than P): the mean is 0 and the ratios undefined (the authors'
     * code divides by zero); nothing moves. */
    if (k_acc == 0) return 0;
    double den = (double)k_prev / (double)n;
    int64_t mv = (int64_t)((double)g->blk_size * den);
    uint32_t moved = 0;
    for (uint32_t j = 0; j + 1 < P; j++) {
        double d1 = (double)temp[j] / (double)k_acc;
        double d2 = (double)temp[j + 1] / (double)k_acc;
        if (d1 > 1.05 && d2 < 0.95238) {
            /* Left heavy, right light: the left partition gives its last block. */
            if ((double)(blk_part[j] - 1) < g->min_blk) continue;
            blk_part[j]--;
            blk_part[j + 1]++;
            blk_pos[j + 1]--;
            temp[j] -= mv;
            temp[j + 1] += mv;
            moved++;
        } else if (d1 < 0.95238 && d2 > 1.05) {
            /* Left light, right heavy: the right partition gives its first block. */
            if ((double)(blk_part[j + 1] - 1) < g->min_blk) continue;
            blk_part[j]++;
            blk_part[j + 1]--;
            blk_pos[j + 1]++;
            temp[j] += mv;
            temp[j + 1] -= mv;
            moved++;
        }
    }
    return moved;
}

/* The element ranges of the block plan. */
static void apply_plan(deftsim_sparsifier *s, sp_mcr_state *d, const exdyna_plan *x)
{
    for (uint32_t c = 0; c < s->P; c++) {
        d->lo[c] = (uint64_t)x->blk_pos[c] * x->g.blk_size;
        d->len[c] = (uint64_t)x->blk_part[c] * x->g.blk_size + (c == s->P - 1 ? x->g.rem : 0);
    }
}

static deftsim_status exdyna_init(deftsim_sparsifier *s)
{
    deftsim_status st = sp_mcr_init(s);
    if (st) return st;
    sp_mcr_state *d = s->priv;
    exdyna_plan *x;
    int64_t *part, *pos, *temp;
    if ((st = sp_alloc(s, &x, sizeof *x, "block plan")) ||
        (st = sp_alloc_n(s, &part, s->P, sizeof *part, "block plan")) ||
        (st = sp_alloc_n(s, &pos, s->P, sizeof *pos, "block plan")) ||
        (st = sp_alloc_n(s, &temp, s->P, sizeof *temp, "block plan")))
        return st;
    if (s->dry) return DEFTSIM_OK;
    x->blk_part = part;
    x->blk_pos = pos;
    x->temp = temp;
    d->ext = x;
    deftsim_exdyna_initial(s->n, s->P, &x->g, x->blk_part, x->blk_pos);
    apply_plan(s, d, x);
    return DEFTSIM_OK;
}

static deftsim_status exdyna_step(deftsim_sparsifier *s, uint64_t t,
                                  const deftsim_acc_provider *a)
{
    sp_mcr_state *d = s->priv;
    exdyna_plan *x = d->ext;
    if (d->started) {
        /* Redundant on every worker, from the counts all of them gathered at t_prev: a few
         * operations per boundary, not timed (as the authors' Python loop, it is not on the
         * critical path of the selection kernels). */
        deftsim_exdyna_repartition(s->n, s->P, &x->g, d->t_prev, d->counts, d->k_prev, x->temp,
                                   x->blk_part, x->blk_pos);
        apply_plan(s, d, x);
    }
    return sp_mcr_step(s, t, a);
}

static const sp_method exdyna_impl = {exdyna_init, exdyna_step, NULL, NULL, 1};

const deftsim_method_desc deftsim_sp_exdyna_desc = {
    .name = "exdyna",
    .title = "ExDyna",
    .short_title = "ExDyna",
    .caps = DEFTSIM_METHOD_CAP_KEEPS_STATE,
    .impl = &exdyna_impl,
    .closed_form = deftsim_sp_mcr_closed_form,
    .columns = sp_mcr_columns,
    .ncolumns = SP_MCR_NCOLUMNS,
    .kernel_ops = SP_MCR_KERNEL_OPS,
};
