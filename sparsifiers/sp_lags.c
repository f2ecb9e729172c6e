/* sp_lags.c - LAGS (layer-wise adaptive gradient sparsification, Shi et al. 2019, LAGS-SGD),
 * docs/SPARSIFIERS.md ("lags").
 *
 * Every tensor of the model table is a layer on its own: worker w takes the top k_l of its
 * accumulator's slice of layer l (lags_rule = uniform: k_l = deftsim_k_of_density(density,
 * numel_l), every layer at the point's density; adaptive: the largest k_l whose allgather fits
 * in the backward time of the layer computed next, at least the point's density's count and at
 * most the layer: lags_plan_k below), keeps the rest as the layer's residual, and the
 * layer's (index, value) pairs go out in an allgather of their own, layer after layer in the
 * order the backward pass produces them (the last layer first). Each allgather but the last is
 * asynchronous: the worker goes on selecting the next layer while it runs, and with [compute]
 * (src/engine/compute.c) the steps of layer l follow the backward pass down to layer l, so that the
 * exchange overlaps the backward pass layer by layer. The steps carry their layer
 * (deftsim_step.layer). After the last allgather every worker adds the P workers' pairs into
 * the aggregate (sum / P), as topk-ag. In spread mode each rank selects its own workers'
 * layers and the pairs are shared before the sum. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sp_internal.h"

/* Options (deftsim_sparsify.h): positions in lags_options. */
enum { OPT_RULE, OPT_BACKWARD, OPT_BANDWIDTH, OPT_LATENCY };
enum { RULE_UNIFORM, RULE_ADAPTIVE };

/* Its result columns, by position (lags_columns below): r->extra[COL_*]. */
enum { COL_LAYERS, COL_COUNT_MIN, COL_COUNT_MAX };

/* The adaptive rule's three figures: each option, or where it is left at its default (0 for
 * lags_backward and lags_gbps, -1 for lags_latency_us) the scenario's (c: [compute]'s
 * backward time, [network]'s link bandwidth and latency). */
typedef struct {
    double backward, bytes_per_s, latency;
} lags_figures;

static lags_figures lags_figures_of(const deftsim_method_opts *o,
                                    const deftsim_sparsify_context *c)
{
    lags_figures f = {o->v[OPT_BACKWARD].d, o->v[OPT_BANDWIDTH].d * 1e9 / 8,
                      o->v[OPT_LATENCY].d * 1e-6};
    if (!(f.backward > 0)) f.backward = c->backward;
    if (!(f.bytes_per_s > 0)) f.bytes_per_s = c->bandwidth;
    if (f.latency < 0) f.latency = c->latency;
    return f;
}

/* The per-layer counts k[0..L-1] for P workers, pairs of pair_bytes on the wire, under the
 * options o and the scenario's figures c (docs/SPARSIFIERS.md, "lags", "Layers and k").
 *
 * uniform: k_l = deftsim_k_of_density(density, n_l).
 * adaptive: layer l's allgather runs while the backward pass computes layer l - 1, whose
 * share of the backward time B is b_{l-1} = B n_{l-1} / n (the spread [compute]'s
 * backward_spread = params uses). The allgather of k pairs is estimated as Bruck's (the
 * default [network] allgather): ceil(log2 P) rounds of the latency each, and (P - 1) k
 * pair_bytes received at the bandwidth (lags_figures_of). k_l is the largest k whose estimate
 * is at most b_{l-1}, at most n_l (the whole layer), raised to the point's density's count.
 * Layer 0, exchanged last, has no backward time after it: the point's density. With P = 1
 * nothing is exchanged: the uniform counts. */
static void lags_plan_k(const deftsim_model *m, double density, uint32_t P, uint64_t pair_bytes,
                        const deftsim_method_opts *o, const deftsim_sparsify_context *c,
                        uint64_t *k)
{
    const size_t L = m->nlayers;
    const int adaptive = o && o->v[OPT_RULE].i == RULE_ADAPTIVE && P > 1;
    for (size_t l = 0; l < L; l++) {
        const uint64_t n_l = m->layers[l].numel;
        k[l] = deftsim_k_of_density(density, n_l);
        if (!adaptive || l == 0) continue;
        const lags_figures f = lags_figures_of(o, c);
        const double rounds = ceil(log2((double)P));
        const double budget = f.backward * (double)m->layers[l - 1].numel / (double)m->numel;
        const double fit = (budget - rounds * f.latency) * f.bytes_per_s /
                           ((double)(P - 1) * (double)pair_bytes);
        uint64_t kf = fit >= (double)n_l ? n_l : fit > 0 ? (uint64_t)floor(fit) : 0;
        if (kf > k[l]) k[l] = kf;
    }
}

typedef struct {
    uint64_t *k;                 /* per layer: k_l */
    uint64_t *pos;               /* per layer: where its picks start in a worker's block */
    uint64_t per;                /* sum of k_l: a worker's picks */
    uint64_t kmin, kmax;         /* the smallest and the largest k_l */
    float *vals;                 /* P * per values at the picks */
    float *dense;                /* n floats, zero between steps */
    const deftsim_kidx **lists;
    size_t *lens;
    size_t *c_sel, *c_res;       /* per layer: its COMPUTE steps in this step's schedule */
    size_t ph_select, ph_residual, ph_sum;
} lags_state;

static deftsim_status lags_init(deftsim_sparsifier *s)
{
    deftsim_status st;
    const deftsim_model *m = s->p.model;
    const size_t L = m->nlayers;
    lags_state *d = sp_priv(s, sizeof *d);
    if (!d) return DEFTSIM_E_NOMEM;
    /* The per-layer plan is needed in the dry run too (its sizes): plain allocations. */
    s->mem_bytes += 2 * L * sizeof(uint64_t);
    d->k = calloc(L ? L : 1, sizeof *d->k);
    d->pos = calloc(L ? L : 1, sizeof *d->pos);
    if (!d->k || !d->pos) return deftsim_error_nomem("lags");
    uint64_t per = 0;
    d->kmin = UINT64_MAX;
    d->kmax = 0;
    lags_plan_k(m, s->p.density, s->P, (uint64_t)s->si + s->sv, &s->p.opts, &s->p.context,
                d->k);
    for (size_t l = L; l-- > 0;) {
        if (d->k[l] < d->kmin) d->kmin = d->k[l];
        if (d->k[l] > d->kmax) d->kmax = d->k[l];
        d->pos[l] = per;
        per += d->k[l];
        if ((st = sp_scratch_topk(s, (size_t)m->layers[l].numel, (size_t)d->k[l]))) return st;
    }
    d->per = per;
    uint64_t P = s->P, agg_cap = P * per < s->n ? P * per : s->n;
    if ((st = sp_plan_common(s, P * per, agg_cap)) ||
        (st = sp_alloc_n(s, &d->vals, P * per, sizeof *d->vals, "values")) ||
        (st = sp_alloc_n(s, &d->dense, s->n, sizeof *d->dense, "dense sums")) ||
        (st = sp_alloc_n(s, &d->lists, P, sizeof *d->lists, "lists")) ||
        (st = sp_alloc_n(s, &d->lens, P, sizeof *d->lens, "lists")) ||
        (st = sp_alloc_n(s, &d->c_sel, L, sizeof *d->c_sel, "steps")) ||
        (st = sp_alloc_n(s, &d->c_res, L, sizeof *d->c_res, "steps")) ||
        (st = sp_scratch_union(s)))
        return st;
    d->ph_select = sp_phase(s, "select", 1);
    d->ph_residual = sp_phase(s, "residual", 0);
    d->ph_sum = sp_phase(s, "sum", 0);
    return DEFTSIM_OK;
}

static void lags_fini(deftsim_sparsifier *s)
{
    lags_state *d = s->priv;
    if (!d) return;
    free(d->k);
    free(d->pos);
}

/* The schedule of one step, layer by layer from the last: select, residual, the layer's
 * allgather of pairs (asynchronous but for the last); then the sum. */
static deftsim_status plan_steps(deftsim_sparsifier *s, lags_state *d, size_t *c_sum)
{
    const size_t L = s->p.model->nlayers;
    for (size_t l = L; l-- > 0;) {
        if ((d->c_sel[l] = sp_compute(s, d->ph_select)) == SIZE_MAX ||
            (d->c_res[l] = sp_compute(s, d->ph_residual)) == SIZE_MAX)
            return DEFTSIM_E_NOMEM;
        s->res.schedule.steps[d->c_sel[l]].layer = (uint32_t)l + 1;
        s->res.schedule.steps[d->c_res[l]].layer = (uint32_t)l + 1;
        if (s->P > 1) {
            deftsim_step *c = sp_collective(s, DEFTSIM_STEP_ALLGATHER, "pairs");
            if (!c) return DEFTSIM_E_NOMEM;
            c->layer = (uint32_t)l + 1;
            c->flags = l ? DEFTSIM_STEP_ASYNC : 0;
            for (uint32_t w = 0; w < s->P; w++) c->bytes[w] = d->k[l] * ((uint64_t)s->si + s->sv);
        }
    }
    *c_sum = sp_compute(s, d->ph_sum);
    return *c_sum == SIZE_MAX ? DEFTSIM_E_NOMEM : DEFTSIM_OK;
}

static deftsim_status lags_step(deftsim_sparsifier *s, uint64_t t, const deftsim_acc_provider *a)
{
    (void)t;
    lags_state *d = s->priv;
    deftsim_status st;
    const deftsim_model *m = s->p.model;
    const size_t L = m->nlayers, n = (size_t)s->n;
    const uint32_t P = s->P;
    size_t c_sum;
    float *acc;
    if ((st = plan_steps(s, d, &c_sum))) return st;
    for (uint32_t w = s->lo; w < s->hi; w++) {
        if ((st = sp_get(a, w, &acc))) return st;
        deftsim_kidx *sel = s->sel + (uint64_t)w * d->per;
        float *v = d->vals + (uint64_t)w * d->per;
        double cost = 0;
        for (size_t l = L; l-- > 0;) {
            const deftsim_layer *ly = &m->layers[l];
            deftsim_kidx *idx = sel + d->pos[l];
            const size_t k = (size_t)d->k[l];
            SP_TIMED(s, d->c_sel[l], d->ph_select, w,
                     deftsim_k_topk(s->kc, acc + ly->offset, (size_t)ly->numel, k, idx,
                                    s->scratch, s->scratch_bytes));
            for (size_t j = 0; j < k; j++) idx[j] += (deftsim_kidx)ly->offset;
            SP_TIMED(s, d->c_res[l], d->ph_residual, w,
                     deftsim_k_gather(s->kc, acc, n, idx, k, v + d->pos[l]));
            SP_TIMED(s, d->c_res[l], d->ph_residual, w, deftsim_k_zero_at(s->kc, acc, n, idx, k));
            cost += sp_topk_cost(ly->numel, d->k[l]);
        }
        s->sel_start[w] = (uint64_t)w * d->per;
        s->res.local_count[w] = d->per;
        s->res.cost[w] = cost;
        d->lists[w] = sel;
        d->lens[w] = (size_t)d->per;
        if ((st = sp_release(a, w))) return st;
    }
    /* Spread mode: every worker's pairs from its rank (each worker's block at w * per). */
    if (sp_spread(s)) {
        if ((st = sp_share_sel(s, d->vals, 0))) return st;
        for (uint32_t w = 0; w < P; w++) {
            d->lists[w] = s->sel + s->sel_start[w];
            d->lens[w] = (size_t)s->res.local_count[w];
        }
    }
    /* Every worker adds the P workers' pairs (worker order: the blocks lie back to back):
     * once, charged to every worker. */
    double t0 = sp_now(s);
    st = deftsim_k_scatter_add(s->kc, d->dense, n, s->sel, d->vals, (size_t)(P * d->per));
    double dt = sp_now(s) - t0;
    if (st) return st;
    for (uint32_t w = 0; w < P; w++) sp_charge(s, c_sum, d->ph_sum, w, dt);
    uint64_t nnz;
    if ((st = sp_union(s, d->lists, d->lens, P, &nnz)) ||
        (st = deftsim_k_gather(s->kc, d->dense, n, s->agg_idx, (size_t)nnz, s->agg_val)) ||
        (st = deftsim_k_zero_at(s->kc, d->dense, n, s->agg_idx, (size_t)nnz)))
        return st;
    sp_agg_finish(s, nnz);
    s->res.extra[COL_LAYERS] = (double)L;
    s->res.extra[COL_COUNT_MIN] = (double)d->kmin;
    s->res.extra[COL_COUNT_MAX] = (double)d->kmax;
    return DEFTSIM_OK;
}

static const sp_method lags_impl = {lags_init, lags_step, lags_fini, NULL, 1};

/* `deftsim bench sim`: per layer from the last, an allgather of k_l pairs (asynchronous but
 * for the last); k_l by the options given (NULL: the defaults, the uniform rule) and the
 * scenario's figures (adaptive without a backward time: the density's counts). */
static deftsim_status lags_closed_form(const deftsim_closed_form_in *in, uint32_t P,
                                       deftsim_schedule *s)
{
    const deftsim_model *m = in->model;
    const uint64_t pair = (uint64_t)in->index_bytes + in->value_bytes;
    uint64_t *k = calloc(m->nlayers ? m->nlayers : 1, sizeof *k);
    if (!k) return deftsim_error_nomem("lags");
    lags_plan_k(m, in->density, P, pair, in->opts, &in->context, k);
    for (size_t l = m->nlayers; l-- > 0;) {
        deftsim_step *c = sp_cf_add(s, DEFTSIM_STEP_ALLGATHER, "pairs", k[l] * pair);
        if (!c) {
            free(k);
            return DEFTSIM_E_NOMEM;
        }
        c->layer = (uint32_t)l + 1;
        c->flags = l ? DEFTSIM_STEP_ASYNC : 0;
    }
    free(k);
    return DEFTSIM_OK;
}

/* What the ranges do not say: the adaptive rule needs a backward time and a bandwidth above
 * zero. */
static deftsim_status lags_check(const deftsim_sparsifier_params *p)
{
    if (p->opts.v[OPT_RULE].i != RULE_ADAPTIVE) return DEFTSIM_OK;
    const lags_figures f = lags_figures_of(&p->opts, &p->context);
    if (!(f.backward > 0))
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "lags: lags_rule = adaptive needs the backward time of one "
                                 "iteration: a [compute] section (backward, or a table row for "
                                 "the model), or lags_backward in seconds");
    if (!(f.bytes_per_s > 0))
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "lags: lags_rule = adaptive needs a bandwidth: [network] "
                                 "bandwidth, or lags_gbps");
    if (!(f.latency >= 0))
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "lags: lags_rule = adaptive needs a latency: [network] latency, "
                                 "or lags_latency_us");
    return DEFTSIM_OK;
}

static const char *const rule_names[] = {"uniform", "adaptive", NULL};

static const deftsim_method_option lags_options[] = {
    [OPT_RULE] = {.key = "lags_rule", .type = DEFTSIM_OPT_ENUM, .dflt = "uniform",
                  .names = rule_names,
                  .help = "lags: every layer at the point's density (uniform), or each layer's "
                          "density raised while its allgather hides behind the next layer's "
                          "backward time (adaptive)"},
    [OPT_BACKWARD] = {.key = "lags_backward", .type = DEFTSIM_OPT_DOUBLE, .dflt = "0", .lo = 0,
                      .hi = 60,
                      .help = "lags: adaptive: the backward pass of one iteration in seconds, "
                              "spread over the layers by their parameters; 0: [compute]'s"},
    [OPT_BANDWIDTH] = {.key = "lags_gbps", .type = DEFTSIM_OPT_DOUBLE, .dflt = "0", .lo = 0,
                       .hi = 1e6,
                       .help = "lags: adaptive: the bandwidth in Gb/s its allgather estimate "
                               "assumes; 0: [network] bandwidth"},
    [OPT_LATENCY] = {.key = "lags_latency_us", .type = DEFTSIM_OPT_DOUBLE, .dflt = "-1", .lo = -1,
                     .hi = 1e6,
                     .help = "lags: adaptive: the latency in microseconds of each of the "
                             "allgather's ceil(log2 P) rounds; -1: [network] latency"},
};

static const deftsim_method_column lags_columns[] = {
    [COL_LAYERS] = {.name = "layers", .unit = "count", .title = "layers",
                    .doc = "lags: the layers selected and exchanged each on its own (one "
                           "allgather per layer when P > 1)",
                    .summary = DEFTSIM_COL_MEDIAN},
    [COL_COUNT_MIN] = {.name = "layer_count_min", .unit = "count", .title = "smallest layer count",
                       .doc = "lags: the smallest count k_l a layer's exchange carries per worker",
                       .summary = DEFTSIM_COL_MEDIAN},
    [COL_COUNT_MAX] = {.name = "layer_count_max", .unit = "count", .title = "largest layer count",
                       .doc = "lags: the largest count k_l a layer's exchange carries per worker",
                       .summary = DEFTSIM_COL_MEDIAN},
};

#define OPBIT(o) (1u << DEFTSIM_KOP_##o)

const deftsim_method_desc deftsim_sp_lags_desc = {
    .name = "lags",
    .title = "LAGS (layer-wise top-k)",
    .short_title = "LAGS",
    .impl = &lags_impl,
    .closed_form = lags_closed_form,
    .options = lags_options,
    .noptions = sizeof lags_options / sizeof lags_options[0],
    .columns = lags_columns,
    .ncolumns = sizeof lags_columns / sizeof lags_columns[0],
    .kernel_ops = OPBIT(TOPK) | OPBIT(GATHER) | OPBIT(ZERO_AT) | OPBIT(SCATTER_ADD) | OPBIT(UNION),
    .check = lags_check,
};
