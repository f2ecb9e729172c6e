/* sp_cltk.c - CLT-k, cyclic local top-k (ScaleCom, arXiv 2104.11125).
 *
 * The leader t mod P runs top-k on its accumulator and broadcasts the k indices; every worker
 * allreduces its own values there and zeroes them. The selection is charged to the leader (the
 * design); cltk_charge = all makes every worker run its own top-k too, timed and discarded, as
 * the DEFT authors' CLTKReducer does.
 *
 * cltk_beta > 0 turns on ScaleCom's low-pass filter on the residual,
 *     m <- (1 - beta) m + beta (m + g - C(m + g)),
 * where m + g is the accumulator and C keeps its values at the broadcast indices. Written in the
 * accumulator: new = acc - (1 - beta) g - beta C(acc). The filter deliberately drops
 * (1 - beta) (g - C(acc)) per worker, which the step reports as lost mass. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sp_internal.h"

/* CLT-k's options (its registry entry's table, by position). */
enum { OPT_CHARGE, OPT_BETA };
enum { CHARGE_LEADER, CHARGE_ALL };

typedef struct {
    deftsim_kidx *discard;  /* charge = all: the other workers' own top-k */
    float *vals;            /* one worker's values at the k indices */
    size_t ph_select, ph_gather, ph_residual;
} cltk_state;

static deftsim_status cltk_init(deftsim_sparsifier *s)
{
    deftsim_status st;
    cltk_state *d = sp_priv(s, sizeof *d);
    if (!d) return DEFTSIM_E_NOMEM;
    if ((st = sp_plan_common(s, s->k, s->k)) ||
        (st = sp_alloc_n(s, &d->vals, s->k, sizeof *d->vals, "values")) ||
        (st = sp_scratch_topk(s, (size_t)s->n, (size_t)s->k)))
        return st;
    if (sp_opt_int(&s->p, OPT_CHARGE) == CHARGE_ALL &&
        (st = sp_alloc_n(s, &d->discard, s->k, sizeof *d->discard, "indices")))
        return st;
    d->ph_select = sp_phase(s, "select", 1);
    d->ph_gather = sp_phase(s, "gather", 0);
    d->ph_residual = sp_phase(s, "residual", 0);
    return DEFTSIM_OK;
}

/* ScaleCom's filter on one worker's accumulator; v holds its values at idx (the timed part). */
static void low_pass(const deftsim_sparsifier *s, float *acc, const float *g,
                     const deftsim_kidx *idx, const float *v, size_t k)
{
    const size_t n = (size_t)s->n;
    const float beta = (float)sp_opt_double(&s->p, OPT_BETA), keep = 1.0f - beta;
    for (size_t i = 0; i < n; i++) acc[i] -= keep * g[i];
    for (size_t j = 0; j < k; j++) acc[idx[j]] -= beta * v[j];
    deftsim_kctx_touch(s->kc, n * sizeof *acc * 3 + k * (sizeof *idx + sizeof *v));
}

/* The mass the filter removes from one worker (signed and absolute), outside the timing. */
static void low_pass_loss(const deftsim_sparsifier *s, const float *g, const deftsim_kidx *idx,
                          const float *v, size_t k, double *lost, double *lost_abs)
{
    const size_t n = (size_t)s->n;
    const double keep = 1.0 - sp_opt_double(&s->p, OPT_BETA);
    double sg = 0, sa = 0;
    for (size_t i = 0; i < n; i++) {
        sg += g[i];
        sa += fabs((double)g[i]);
    }
    /* Dropped per element: keep * (g - C(acc)); C is nonzero only at the k indices. */
    for (size_t j = 0; j < k; j++) {
        double gi = g[idx[j]];
        sg -= v[j];
        sa += fabs(gi - (double)v[j]) - fabs(gi);
    }
    *lost += keep * sg;
    *lost_abs += keep * sa;
    deftsim_kctx_touch(s->kc, n * sizeof *g + k * (sizeof *idx + sizeof *v));
}

static deftsim_status cltk_step(deftsim_sparsifier *s, uint64_t t, const deftsim_acc_provider *a)
{
    cltk_state *d = s->priv;
    deftsim_step_result *r = &s->res;
    deftsim_status st;
    const uint32_t P = s->P;
    const size_t n = (size_t)s->n, k = (size_t)s->k;
    const uint32_t lead = (uint32_t)(t % P);
    const int all = sp_opt_int(&s->p, OPT_CHARGE) == CHARGE_ALL;
    const int filter = sp_opt_double(&s->p, OPT_BETA) > 0;
    float *acc;
    r->leader = lead;
    if (filter && !a->grad)
        return deftsim_error_set(DEFTSIM_E_USAGE,
                                 "cltk: cltk_beta > 0 needs the provider's grad() callback");

    size_t c_select = sp_compute(s, d->ph_select);
    if (c_select == SIZE_MAX) return DEFTSIM_E_NOMEM;
    if (P > 1) {
        deftsim_step *b = sp_collective(s, DEFTSIM_STEP_BCAST, "indices");
        if (!b) return DEFTSIM_E_NOMEM;
        b->root = lead;
        b->bytes[lead] = s->k * s->si;
    }
    size_t c_gather = sp_compute(s, d->ph_gather);
    if (c_gather == SIZE_MAX) return DEFTSIM_E_NOMEM;
    if (P > 1) {
        deftsim_step *c = sp_collective(s, DEFTSIM_STEP_ALLREDUCE, "values");
        if (!c) return DEFTSIM_E_NOMEM;
        for (uint32_t w = 0; w < P; w++) c->bytes[w] = s->k * s->sv;
    }
    size_t c_res = sp_compute(s, d->ph_residual);
    if (c_res == SIZE_MAX) return DEFTSIM_E_NOMEM;

    if (sp_mine(s, lead)) {
        if ((st = sp_get(a, lead, &acc))) return st;
        SP_TIMED(s, c_select, d->ph_select, lead,
                 deftsim_k_topk(s->kc, acc, n, k, s->sel, s->scratch, s->scratch_bytes));
        s->sel_start[lead] = 0;
        r->local_count[lead] = s->k;
        r->cost[lead] = sp_topk_cost(s->n, s->k);
    }
    /* Spread mode: the leader's indices from its rank (the broadcast). */
    if ((st = sp_share_sel(s, NULL, 0))) return st;
    /* The aggregate's support: the leader's indices, sorted (bookkeeping, untimed). */
    memcpy(s->agg_idx, s->sel, k * sizeof *s->agg_idx);
    sp_sort_idx(s->agg_idx, k);

    /* Spread mode: the other workers' own top-k (charge = all) first, on every rank at once,
     * so that only the sum below runs rank after rank. */
    for (uint32_t w = s->lo; sp_spread(s) && all && w < s->hi; w++) {
        if (w == lead) continue;
        if ((st = sp_get(a, w, &acc))) return st;
        SP_TIMED(s, c_select, d->ph_select, w,
                 deftsim_k_topk(s->kc, acc, n, k, d->discard, s->scratch, s->scratch_bytes));
        r->cost[w] = sp_topk_cost(s->n, s->k);
    }
    /* The values' sum and the filter's lost mass run in worker order: in spread mode a chain
     * over the ranks' blocks. */
    double lost[2] = {r->lost_mass, r->lost_abs_mass};
    if ((st = sp_chain_in(s, s->agg_val, k * sizeof *s->agg_val)) ||
        (st = sp_chain_in(s, lost, sizeof lost)))
        return st;
    r->lost_mass = lost[0];
    r->lost_abs_mass = lost[1];
    for (uint32_t w = s->lo; w < s->hi; w++) {
        if ((st = sp_get(a, w, &acc))) return st;
        const float *g = NULL;
        if (filter && !(g = a->grad(a->ctx, w)))
            return deftsim_error_set(DEFTSIM_E_RUNTIME, "cltk: no gradient for worker %u", w);
        if (all && w != lead && !sp_spread(s)) {
            SP_TIMED(s, c_select, d->ph_select, w,
                     deftsim_k_topk(s->kc, acc, n, k, d->discard, s->scratch, s->scratch_bytes));
            r->cost[w] = sp_topk_cost(s->n, s->k);
        }
        float *v = w == 0 ? s->agg_val : d->vals;
        SP_TIMED(s, c_gather, d->ph_gather, w,
                 deftsim_k_gather(s->kc, acc, n, s->agg_idx, k, v));
        if (filter) {
            double t0 = sp_now(s);
            low_pass(s, acc, g, s->agg_idx, v, k);
            sp_charge(s, c_res, d->ph_residual, w, sp_now(s) - t0);
            if (!s->p.skip_quality)
                low_pass_loss(s, g, s->agg_idx, v, k, &r->lost_mass, &r->lost_abs_mass);
        } else {
            SP_TIMED(s, c_res, d->ph_residual, w,
                     deftsim_k_zero_at(s->kc, acc, n, s->agg_idx, k));
        }
        /* Added after the filter has read v (for worker 0, v is the running sum itself). */
        if (w) sp_agg_add(s, v, k, w);
        if ((st = sp_release(a, w))) return st;
    }
    lost[0] = r->lost_mass;
    lost[1] = r->lost_abs_mass;
    if ((st = sp_chain_out(s, s->agg_val, k * sizeof *s->agg_val)) ||
        (st = sp_chain_out(s, lost, sizeof lost)) ||
        (st = sp_chain_bcast(s, s->agg_val, k * sizeof *s->agg_val)) ||
        (st = sp_chain_bcast(s, lost, sizeof lost)))
        return st;
    r->lost_mass = lost[0];
    r->lost_abs_mass = lost[1];
    sp_agg_finish(s, s->k);
    return DEFTSIM_OK;
}

static const sp_method cltk_impl = {cltk_init, cltk_step, NULL, NULL, 1};

/* `deftsim bench sim` (t = 0: the leader is worker 0): the leader's k indices, the k values. */
static deftsim_status cltk_closed_form(const deftsim_closed_form_in *in, uint32_t P,
                                       deftsim_schedule *s)
{
    (void)P;
    if (!sp_cf_add(s, DEFTSIM_STEP_BCAST, "indices", in->k * in->index_bytes) ||
        !sp_cf_add(s, DEFTSIM_STEP_ALLREDUCE, "values", in->k * in->value_bytes))
        return DEFTSIM_E_NOMEM;
    return DEFTSIM_OK;
}

/* The low-pass filter reads g_w next to the accumulator. */
static int cltk_reads_grad(const deftsim_method_opts *o) { return o->v[OPT_BETA].d > 0; }

static const char *const charge_names[] = {"leader", "all", NULL};

static const deftsim_method_option cltk_options[] = {
    [OPT_CHARGE] = {.key = "cltk_charge", .type = DEFTSIM_OPT_ENUM, .dflt = "leader",
                    .names = charge_names,
                    .help = "CLT-k selection time charged to the leader only, or to every worker"},
    [OPT_BETA] = {.key = "cltk_beta", .type = DEFTSIM_OPT_DOUBLE, .dflt = "0", .lo = 0, .hi = 1,
                  .help = "CLT-k low-pass filter beta; 0 = off"},
};

#define OPBIT(o) (1u << DEFTSIM_KOP_##o)

const deftsim_method_desc deftsim_sp_cltk_desc = {
    .name = "cltk",
    .title = "CLT-k",
    .short_title = "CLT-k",
    .caps = DEFTSIM_METHOD_CAP_DEFAULT | DEFTSIM_METHOD_CAP_RAW_GRADIENTS,
    .impl = &cltk_impl,
    .closed_form = cltk_closed_form,
    .options = cltk_options,
    .noptions = sizeof cltk_options / sizeof cltk_options[0],
    .kernel_ops = OPBIT(TOPK) | OPBIT(GATHER) | OPBIT(ZERO_AT),
    .reads_grad = cltk_reads_grad,
};
