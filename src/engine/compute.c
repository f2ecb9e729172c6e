/* compute.c - the training step's own compute in a simulated iteration (deftsim_compute.h,
 * docs/COMPUTE.md): [compute]'s durations or table row, DDP's buckets, the iteration's
 * schedule around a sparsifier's. */
#include "deftsim_compute.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deftsim_util.h"

/* ---- buckets and the schedule --------------------------------------------------------------- */

void deftsim_compute_plan_free(deftsim_compute_plan *p)
{
    free(p->bucket_elems);
    free(p->bucket_backward);
    free(p->layer_backward);
    memset(p, 0, sizeof *p);
}

deftsim_status deftsim_compute_plan_init(const deftsim_config *cfg, const deftsim_model *m,
                                         deftsim_compute_plan *out)
{
    memset(out, 0, sizeof *out);
    deftsim_status st = deftsim_compute_resolve(cfg, m->name, &out->t);
    if (st) return st;
    out->overlap = cfg->compute.overlap;
    size_t L = m->nlayers;
    out->bucket_elems = calloc(L ? L : 1, sizeof *out->bucket_elems);
    out->bucket_backward = calloc(L ? L : 1, sizeof *out->bucket_backward);
    out->layer_backward = calloc(L ? L : 1, sizeof *out->layer_backward);
    out->nlayers = L;
    if (!out->bucket_elems || !out->bucket_backward || !out->layer_backward) {
        deftsim_compute_plan_free(out);
        return deftsim_error_nomem("[compute]");
    }
    /* DDP's assignment: tensors in reverse parameter order fill a bucket until it holds at
     * least its cap (the first bucket's cap is first_bucket_mb), then the next one starts. */
    uint32_t vb = (uint32_t)cfg->sparsify.value_bytes;
    double cap = cfg->compute.first_bucket_mb > 0 ? cfg->compute.first_bucket_mb
                                                  : cfg->compute.bucket_mb;
    double bytes = 0;
    size_t nb = 0;
    for (size_t i = L; i-- > 0;) {
        const deftsim_layer *ly = &m->layers[i];
        double share = cfg->compute.backward_spread == DEFTSIM_SPREAD_UNIFORM
                           ? 1.0 / (double)L : (double)ly->numel / (double)m->numel;
        out->bucket_elems[nb] += ly->numel;
        out->bucket_backward[nb] += out->t.backward * share;
        out->layer_backward[i] = out->t.backward * share;
        bytes += (double)ly->numel * vb;
        if (bytes >= cap * 1048576.0 || i == 0) {
            nb++;
            bytes = 0;
            cap = cfg->compute.bucket_mb;
        }
    }
    out->nbuckets = nb;
    return DEFTSIM_OK;
}

static deftsim_step *given_step(deftsim_schedule *s, const char *name, double seconds)
{
    deftsim_step *st = deftsim_schedule_add(s, DEFTSIM_STEP_COMPUTE, name);
    if (!st) return NULL;
    st->flags = DEFTSIM_STEP_GIVEN;
    for (uint32_t w = 0; w < s->P; w++) st->seconds[w] = seconds;
    return st;
}

/* A layer-wise schedule: the backward pass in pieces before the steps of each layer (the
 * layers run backward from the last; `left` counts the layers not yet produced). */
static deftsim_status layerwise(const deftsim_compute_plan *p, const deftsim_schedule *sp,
                                deftsim_schedule *out)
{
    size_t left = p->nlayers;
    for (size_t k = 0; k <= sp->nsteps; k++) {
        size_t upto = k < sp->nsteps && sp->steps[k].layer ? sp->steps[k].layer - 1 : 0;
        if (upto < left) {
            double sec = 0;
            for (size_t l = upto; l < left; l++) sec += p->layer_backward[l];
            if (!given_step(out, DEFTSIM_COMPUTE_BACKWARD, sec)) return DEFTSIM_E_NOMEM;
            left = upto;
        }
        if (k < sp->nsteps && !deftsim_schedule_add_copy(out, &sp->steps[k]))
            return DEFTSIM_E_NOMEM;
    }
    return DEFTSIM_OK;
}

deftsim_status deftsim_compute_schedule(const deftsim_compute_plan *p, const deftsim_schedule *sp,
                                        int bucketed, uint32_t value_bytes,
                                        deftsim_schedule *out)
{
    deftsim_schedule_reset(out, sp->P);
    if (!given_step(out, DEFTSIM_COMPUTE_FORWARD, p->t.forward)) goto nomem;
    int tagged = 0;
    for (size_t k = 0; k < sp->nsteps && !tagged; k++)
        tagged = sp->steps[k].layer > 0 && sp->steps[k].layer <= p->nlayers;
    if (!bucketed && p->overlap && tagged) {
        if (layerwise(p, sp, out)) goto nomem;
        return DEFTSIM_OK;
    }
    if (!bucketed || !p->overlap || p->nbuckets == 0) {
        if (!given_step(out, DEFTSIM_COMPUTE_BACKWARD, p->t.backward)) goto nomem;
        for (size_t k = 0; k < sp->nsteps; k++)
            if (!deftsim_schedule_add_copy(out, &sp->steps[k])) goto nomem;
        return DEFTSIM_OK;
    }
    for (size_t b = 0; b < p->nbuckets; b++) {
        if (!given_step(out, DEFTSIM_COMPUTE_BACKWARD, p->bucket_backward[b])) goto nomem;
        char name[DEFTSIM_STEP_NAME_MAX];
        snprintf(name, sizeof name, "bucket%zu", b);
        deftsim_step *a = deftsim_schedule_add(out, DEFTSIM_STEP_ALLREDUCE, name);
        if (!a) goto nomem;
        a->flags = DEFTSIM_STEP_ASYNC;
        for (uint32_t w = 0; w < sp->P; w++) a->bytes[w] = p->bucket_elems[b] * value_bytes;
    }
    return DEFTSIM_OK;
nomem:
    return deftsim_error_nomem("[compute]: a schedule");
}
