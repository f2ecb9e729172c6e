/* sp_topk.c - the two Top-k baselines of docs/SPARSIFIERS.md ("topk", "topk-ag").
 *
 * topk (the DEFT paper's baseline, the authors' TopKReducer): top-k on every worker, an
 * allgather of the k indices, the sorted union U (k <= |U| <= min(n, P k): the build-up), an
 * allreduce of every worker's values at U, every residual zeroed at U.
 *
 * topk-ag (classic sparse allgather): top-k on every worker, an allgather of the k (index,
 * value) pairs, every worker sums the P sparse vectors, each residual zeroed at its own picks
 * only. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sp_internal.h"

typedef struct {
    float *vals;                 /* topk: one worker's values at U; topk-ag: P * k values */
    float *dense;                /* topk-ag: n floats, all zero between steps */
    const deftsim_kidx **lists;  /* P selections, for the union */
    size_t *lens;
    size_t ph_select, ph_union, ph_gather, ph_sum, ph_residual;
} topk_state;

static uint64_t min_u64(uint64_t a, uint64_t b) { return a < b ? a : b; }

static deftsim_status common_init(deftsim_sparsifier *s, int ag)
{
    deftsim_status st;
    topk_state *d = sp_priv(s, sizeof *d);
    if (!d) return DEFTSIM_E_NOMEM;
    uint64_t P = s->P, pk = P * s->k, agg_cap = min_u64(s->n, pk);
    if ((st = sp_plan_common(s, pk, agg_cap)) ||
        (st = sp_alloc_n(s, &d->vals, ag ? pk : agg_cap, sizeof *d->vals, "values")) ||
        (st = sp_alloc_n(s, &d->lists, P, sizeof *d->lists, "lists")) ||
        (st = sp_alloc_n(s, &d->lens, P, sizeof *d->lens, "lists")))
        return st;
    if (ag && (st = sp_alloc_n(s, &d->dense, s->n, sizeof *d->dense, "dense sums"))) return st;
    if ((st = sp_scratch_topk(s, (size_t)s->n, (size_t)s->k)) || (st = sp_scratch_union(s)))
        return st;
    d->ph_select = sp_phase(s, "select", 1);
    if (ag) {
        d->ph_gather = sp_phase(s, "gather", 0);
        d->ph_sum = sp_phase(s, "sum", 0);
    } else {
        d->ph_union = sp_phase(s, "union", 0);
        d->ph_gather = sp_phase(s, "gather", 0);
    }
    d->ph_residual = sp_phase(s, "residual", 0);
    return DEFTSIM_OK;
}

static deftsim_status topk_init(deftsim_sparsifier *s) { return common_init(s, 0); }
static deftsim_status topk_ag_init(deftsim_sparsifier *s) { return common_init(s, 1); }

/* Worker w's top-k into its slot of the selection buffer (timed). */
static deftsim_status select_w(deftsim_sparsifier *s, topk_state *d, const float *acc,
                               uint32_t w, size_t c_select)
{
    deftsim_status st;
    uint64_t off = (uint64_t)w * s->k;
    SP_TIMED(s, c_select, d->ph_select, w,
             deftsim_k_topk(s->kc, acc, (size_t)s->n, (size_t)s->k, s->sel + off, s->scratch,
                            s->scratch_bytes));
    s->sel_start[w] = off;
    s->res.local_count[w] = s->k;
    s->res.cost[w] = sp_topk_cost(s->n, s->k);
    d->lists[w] = s->sel + off;
    d->lens[w] = (size_t)s->k;
    return DEFTSIM_OK;
}

static deftsim_status topk_step(deftsim_sparsifier *s, uint64_t t, const deftsim_acc_provider *a)
{
    (void)t;
    topk_state *d = s->priv;
    deftsim_status st;
    const uint32_t P = s->P;
    float *acc;

    size_t c_select = sp_compute(s, d->ph_select);
    if (c_select == SIZE_MAX) return DEFTSIM_E_NOMEM;
    for (uint32_t w = s->lo; w < s->hi; w++) {
        if ((st = sp_get(a, w, &acc)) || (st = select_w(s, d, acc, w, c_select))) return st;
    }
    /* Spread mode: every worker's picks from its rank, for the union every rank computes. */
    if (sp_spread(s)) {
        if ((st = sp_share_sel(s, NULL, 0))) return st;
        for (uint32_t w = 0; w < P; w++) {
            d->lists[w] = s->sel + s->sel_start[w];
            d->lens[w] = (size_t)s->res.local_count[w];
        }
    }
    if (P > 1) {
        deftsim_step *c = sp_collective(s, DEFTSIM_STEP_ALLGATHER, "indices");
        if (!c) return DEFTSIM_E_NOMEM;
        for (uint32_t w = 0; w < P; w++) c->bytes[w] = s->k * s->si;
    }
    /* Every worker computes the same sorted union of the P lists it received (the reference's
     * torch.unique): run once, charged to every worker. */
    size_t c_union = sp_compute(s, d->ph_union);
    if (c_union == SIZE_MAX) return DEFTSIM_E_NOMEM;
    uint64_t nnz;
    double t0 = sp_now(s);
    if ((st = sp_union(s, d->lists, d->lens, P, &nnz))) return st;
    double dt = sp_now(s) - t0;
    for (uint32_t w = 0; w < P; w++) sp_charge(s, c_union, d->ph_union, w, dt);

    /* Gather/residual pass: values at U go into the (emulated) allreduce, U is zeroed. */
    if ((st = sp_gather_residual(s, a, nnz, d->vals, d->ph_gather, d->ph_residual))) return st;
    return DEFTSIM_OK;
}

static deftsim_status topk_ag_step(deftsim_sparsifier *s, uint64_t t,
                                   const deftsim_acc_provider *a)
{
    (void)t;
    topk_state *d = s->priv;
    deftsim_status st;
    const uint32_t P = s->P;
    const size_t n = (size_t)s->n, k = (size_t)s->k;
    float *acc;

    size_t c_select = sp_compute(s, d->ph_select), c_gather = sp_compute(s, d->ph_gather),
           c_res = sp_compute(s, d->ph_residual);
    if (c_select == SIZE_MAX || c_gather == SIZE_MAX || c_res == SIZE_MAX) return DEFTSIM_E_NOMEM;
    /* One pass: a worker's residual depends only on its own picks. */
    for (uint32_t w = s->lo; w < s->hi; w++) {
        if ((st = sp_get(a, w, &acc)) || (st = select_w(s, d, acc, w, c_select))) return st;
        const deftsim_kidx *idx = d->lists[w];
        SP_TIMED(s, c_gather, d->ph_gather, w,
                 deftsim_k_gather(s->kc, acc, n, idx, k, d->vals + (size_t)w * k));
        SP_TIMED(s, c_res, d->ph_residual, w, deftsim_k_zero_at(s->kc, acc, n, idx, k));
        if ((st = sp_release(a, w))) return st;
    }
    /* Spread mode: every worker's pairs from its rank (the values lie at the picks' places). */
    if (sp_spread(s)) {
        if ((st = sp_share_sel(s, d->vals, 0))) return st;
        for (uint32_t w = 0; w < P; w++) {
            d->lists[w] = s->sel + s->sel_start[w];
            d->lens[w] = (size_t)s->res.local_count[w];
        }
    }
    if (P > 1) {
        deftsim_step *c = sp_collective(s, DEFTSIM_STEP_ALLGATHER, "pairs");
        if (!c) return DEFTSIM_E_NOMEM;
        for (uint32_t w = 0; w < P; w++) c->bytes[w] = s->k * ((uint64_t)s->si + s->sv);
    }
    /* Every worker adds the P received sparse vectors into a dense gradient (the reference's
     * out[pos] += val): run once, charged to every worker. The picks lie back to back in
     * worker order, so one scatter-add sums them in that order. topk_ag_mean = each: every
     * value is divided by P first (the authors' out[pos] += val / P) and the sum is the mean. */
    const int each = sp_opt_int(&s->p, 0) == 1; /* topk_ag_mean: sum, each */
    size_t c_sum = sp_compute(s, d->ph_sum);
    if (c_sum == SIZE_MAX) return DEFTSIM_E_NOMEM;
    double t0 = sp_now(s);
    if (each)
        for (size_t i = 0; i < (size_t)P * k; i++) d->vals[i] /= (float)P;
    st = deftsim_k_scatter_add(s->kc, d->dense, n, s->sel, d->vals, (size_t)P * k);
    double dt = sp_now(s) - t0;
    if (st) return st;
    for (uint32_t w = 0; w < P; w++) sp_charge(s, c_sum, d->ph_sum, w, dt);

    /* Bookkeeping for the aggregate (untimed): its support, its values, the dense buffer
     * cleared for the next step. */
    uint64_t nnz;
    if ((st = sp_union(s, d->lists, d->lens, P, &nnz)) ||
        (st = deftsim_k_gather(s->kc, d->dense, n, s->agg_idx, (size_t)nnz, s->agg_val)) ||
        (st = deftsim_k_zero_at(s->kc, d->dense, n, s->agg_idx, (size_t)nnz)))
        return st;
    if (each)
        sp_agg_counts(s, nnz);
    else
        sp_agg_finish(s, nnz);
    return DEFTSIM_OK;
}

static const sp_method topk_impl = {topk_init, topk_step, NULL, NULL, 1};
static const sp_method topk_ag_impl = {topk_ag_init, topk_ag_step, NULL, NULL, 1};

/* `deftsim bench sim`: k indices per worker, and the values at a union of P independent,
 * uniformly spread k-subsets, which holds n (1 - (1 - k/n)^P) indices. */
static deftsim_status topk_closed_form(const deftsim_closed_form_in *in, uint32_t P,
                                       deftsim_schedule *s)
{
    const uint64_t n = in->model->numel, k = in->k;
    if (!sp_cf_add(s, DEFTSIM_STEP_ALLGATHER, "indices", k * in->index_bytes))
        return DEFTSIM_E_NOMEM;
    double u = (double)n * (1.0 - pow(1.0 - (double)k / (double)n, (double)P));
    return sp_cf_add(s, DEFTSIM_STEP_ALLREDUCE, "values", (uint64_t)ceil(u) * in->value_bytes)
               ? DEFTSIM_OK : DEFTSIM_E_NOMEM;
}

/* `deftsim bench sim`: k (index, value) pairs per worker. */
static deftsim_status topk_ag_closed_form(const deftsim_closed_form_in *in, uint32_t P,
                                          deftsim_schedule *s)
{
    (void)P;
    return sp_cf_add(s, DEFTSIM_STEP_ALLGATHER, "pairs",
                     in->k * ((uint64_t)in->index_bytes + in->value_bytes))
               ? DEFTSIM_OK : DEFTSIM_E_NOMEM;
}

#define OPBIT(o) (1u << DEFTSIM_KOP_##o)
#define RESIDUAL (OPBIT(GATHER) | OPBIT(ZERO_AT))

const deftsim_method_desc deftsim_sp_topk_desc = {
    .name = "topk",
    .title = "Top-k (allgather idx, allreduce val)",
    .short_title = "Top-k",
    .caps = DEFTSIM_METHOD_CAP_DEFAULT,
    .impl = &topk_impl,
    .closed_form = topk_closed_form,
    .kernel_ops = OPBIT(TOPK) | OPBIT(SCATTER_ADD) | OPBIT(UNION) | RESIDUAL,
};

static const char *const mean_names[] = {"sum", "each", NULL};

static const deftsim_method_option topk_ag_options[] = {
    {.key = "topk_ag_mean", .type = DEFTSIM_OPT_ENUM, .dflt = "sum", .names = mean_names,
     .help = "topk-ag's mean: the sum / P, or each value / P added up (the authors' reducer)"},
};

const deftsim_method_desc deftsim_sp_topk_ag_desc = {
    .name = "topk-ag",
    .title = "Top-k (allgather pairs)",
    .short_title = "Top-k (pairs)",
    .caps = DEFTSIM_METHOD_CAP_DEFAULT,
    .impl = &topk_ag_impl,
    .closed_form = topk_ag_closed_form,
    .options = topk_ag_options,
    .noptions = 1,
    .kernel_ops = OPBIT(TOPK) | OPBIT(SCATTER_ADD) | OPBIT(UNION) | RESIDUAL,
};
