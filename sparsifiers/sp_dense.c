/* sp_dense.c - the dense reference point: every worker allreduces its whole accumulator; the
 * residual is zero. No selection, so no phases: the step's cost is the allreduce alone, and
 * nothing of it but the values depends on the data (DEFTSIM_METHOD_CAP_DATA_FREE). */
#include <string.h>

#include "sp_internal.h"

static deftsim_status dense_init(deftsim_sparsifier *s)
{
    deftsim_status st;
    if ((st = sp_plan_common(s, 0, s->n))) return st;
    if (!s->dry)
        for (uint64_t i = 0; i < s->n; i++) s->agg_idx[i] = (deftsim_kidx)i;
    return DEFTSIM_OK;
}

/* The schedule: one allreduce of the n values (none at P = 1), whatever the data. */
static deftsim_status dense_schedule(deftsim_sparsifier *s)
{
    if (s->P > 1) {
        deftsim_step *c = sp_collective(s, DEFTSIM_STEP_ALLREDUCE, "values");
        if (!c) return DEFTSIM_E_NOMEM;
        for (uint32_t w = 0; w < s->P; w++) c->bytes[w] = s->n * s->sv;
    }
    s->res.common_count = s->n;
    return DEFTSIM_OK;
}

static deftsim_status dense_step(deftsim_sparsifier *s, uint64_t t, const deftsim_acc_provider *a)
{
    (void)t;
    deftsim_status st;
    float *acc;
    if ((st = dense_schedule(s))) return st;
    /* The allreduce, emulated: the sum in worker order (in spread mode a chain over the
     * ranks' blocks). */
    const uint64_t bytes = s->n * sizeof *s->agg_val;
    if ((st = sp_chain_in(s, s->agg_val, bytes))) return st;
    for (uint32_t w = s->lo; w < s->hi; w++) {
        if ((st = sp_get(a, w, &acc))) return st;
        sp_agg_add(s, acc, s->n, w);
        sp_zero_acc(s, acc);
        if ((st = sp_release(a, w))) return st;
    }
    if ((st = sp_chain_out(s, s->agg_val, bytes)) || (st = sp_chain_bcast(s, s->agg_val, bytes)))
        return st;
    sp_agg_finish(s, s->n);
    return DEFTSIM_OK;
}

/* The same result without the data (DEFTSIM_METHOD_CAP_DATA_FREE): schedule and counts; the
 * aggregate's indices are 0 .. n-1 from init. */
static deftsim_status dense_step_data_free(deftsim_sparsifier *s, uint64_t t)
{
    (void)t;
    deftsim_status st = dense_schedule(s);
    if (st) return st;
    sp_agg_counts(s, s->n);
    return DEFTSIM_OK;
}

static const sp_method dense_impl = {dense_init, dense_step, NULL, dense_step_data_free, 1};

/* `deftsim bench sim`: one allreduce of the n values. */
static deftsim_status dense_closed_form(const deftsim_closed_form_in *in, uint32_t P,
                                        deftsim_schedule *s)
{
    (void)P;
    return sp_cf_add(s, DEFTSIM_STEP_ALLREDUCE, "values", in->model->numel * in->value_bytes)
               ? DEFTSIM_OK : DEFTSIM_E_NOMEM;
}

const deftsim_method_desc deftsim_sp_dense_desc = {
    .name = "dense",
    .title = "dense allreduce",
    .short_title = "dense",
    .caps = DEFTSIM_METHOD_CAP_DEFAULT | DEFTSIM_METHOD_CAP_DATA_FREE |
            DEFTSIM_METHOD_CAP_DDP_BUCKETS | DEFTSIM_METHOD_CAP_SENDS_ALL,
    .impl = &dense_impl,
    .closed_form = dense_closed_form,
    .kernel_ops = 0,
};
