/* sp_hardthr.c - the hard-threshold sparsifier with error feedback (Sahu et al., "Rethinking
 * gradient sparsification as total error minimization", NeurIPS 2021), as docs/SPARSIFIERS.md
 * ("hardthr") defines it.
 *
 * One fixed threshold lambda for every worker and iteration: worker w sends the elements of its
 * accumulator with |acc_w[i]| >= lambda and keeps the rest as its residual, so its count varies
 * from step to step. lambda is hardthr_lambda, or, when that is 0, the k-th largest |acc_0| at
 * the first step (k from the density), fixed from then on. Exchange: an ALLGATHER of the counts
 * and an ALLGATHER of the (index, value) pairs, each worker's own count (hardthr_exchange =
 * variable) or padded to the largest (padded, as the authors' reducer sends), summed at the
 * union (sp_shared.c, sp_pairs_exchange). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sp_internal.h"

/* Options (deftsim_sparsify.h): positions in hardthr_options. */
enum { OPT_LAMBDA, OPT_EXCHANGE };

typedef struct {
    sp_pairs pp;
    int started;
    float lambda;
    size_t ph_threshold, ph_filter, ph_gather, ph_residual, ph_sum;
} hardthr_state;

static deftsim_status hardthr_init(deftsim_sparsifier *s)
{
    deftsim_status st;
    hardthr_state *d = sp_priv(s, sizeof *d);
    if (!d) return DEFTSIM_E_NOMEM;
    if ((st = sp_pairs_init(s, &d->pp))) return st;
    if (sp_opt_double(&s->p, OPT_LAMBDA) == 0 &&
        (st = sp_scratch_topk(s, (size_t)s->n, (size_t)s->k)))
        return st;
    d->ph_threshold = sp_phase(s, "threshold", 1);
    d->ph_filter = sp_phase(s, "filter", 1);
    d->ph_gather = sp_phase(s, "gather", 0);
    d->ph_residual = sp_phase(s, "residual", 0);
    d->ph_sum = sp_phase(s, "sum", 0);
    return DEFTSIM_OK;
}

static void hardthr_fini(deftsim_sparsifier *s)
{
    hardthr_state *d = s->priv;
    if (d) sp_pairs_fini(&d->pp);
}

/* lambda from worker 0's accumulator at the first step: its k-th largest magnitude (timed in
 * COMPUTE step c_thr, charged to worker 0). */
static deftsim_status derive_lambda(deftsim_sparsifier *s, hardthr_state *d, const float *acc,
                                    size_t c_thr)
{
    deftsim_status st;
    const size_t k = (size_t)s->k;
    double t0 = sp_now(s);
    st = deftsim_k_topk(s->kc, acc, (size_t)s->n, k, d->pp.cand, s->scratch, s->scratch_bytes);
    float lam = INFINITY;
    for (size_t i = 0; !st && i < k; i++) {
        float v = fabsf(acc[d->pp.cand[i]]);
        if (v < lam) lam = v;
    }
    sp_charge(s, c_thr, d->ph_threshold, 0, sp_now(s) - t0);
    if (st) return st;
    s->res.cost[0] += sp_topk_cost(s->n, s->k);
    /* A NaN among the top k (NaN ranks last: only when fewer than k numbers exist) or an
     * all-zero accumulator leaves lambda at 0: every non-NaN element then passes. */
    d->lambda = isnan(lam) ? 0.0f : lam;
    return DEFTSIM_OK;
}

static deftsim_status hardthr_step(deftsim_sparsifier *s, uint64_t t,
                                   const deftsim_acc_provider *a)
{
    (void)t;
    hardthr_state *d = s->priv;
    deftsim_status st;
    const size_t n = (size_t)s->n;
    float *acc;
    if (!d->started) {
        double lambda = sp_opt_double(&s->p, OPT_LAMBDA);
        if (lambda > 0) {
            d->lambda = (float)lambda;
        } else {
            /* Worker 0's rank derives it; spread mode hands it to every rank (every rank
             * registers the step, so that their schedules agree). */
            size_t c_thr = sp_compute(s, d->ph_threshold);
            if (c_thr == SIZE_MAX) return DEFTSIM_E_NOMEM;
            if (sp_mine(s, 0) &&
                ((st = sp_get(a, 0, &acc)) || (st = derive_lambda(s, d, acc, c_thr))))
                return st;
            if ((st = sp_bcast_from(s, 0, &d->lambda, sizeof d->lambda))) return st;
        }
        d->started = 1;
    }
    size_t c_filter = sp_compute(s, d->ph_filter), c_gather = sp_compute(s, d->ph_gather),
           c_res = sp_compute(s, d->ph_residual);
    if (c_filter == SIZE_MAX || c_gather == SIZE_MAX || c_res == SIZE_MAX) return DEFTSIM_E_NOMEM;
    sp_pairs_begin(&d->pp);
    /* One pass: a worker's residual depends only on its own picks (spread mode: this rank's
     * workers; the exchange shares them). */
    for (uint32_t w = s->lo; w < s->hi; w++) {
        size_t cnt = 0;
        uint64_t at;
        if ((st = sp_get(a, w, &acc))) return st;
        SP_TIMED(s, c_filter, d->ph_filter, w,
                 deftsim_k_filter_ge(s->kc, acc, n, d->lambda, d->pp.cand, n, &cnt));
        s->res.cost[w] += (double)n;
        if ((st = sp_pairs_add(s, &d->pp, w, cnt, &at))) return st;
        const deftsim_kidx *idx = d->pp.picks + at;
        SP_TIMED(s, c_gather, d->ph_gather, w,
                 deftsim_k_gather(s->kc, acc, n, idx, cnt, d->pp.vals + at));
        SP_TIMED(s, c_res, d->ph_residual, w, deftsim_k_zero_at(s->kc, acc, n, idx, cnt));
        if ((st = sp_release(a, w))) return st;
    }
    if ((st = sp_pairs_exchange(s, &d->pp, sp_opt_int(&s->p, OPT_EXCHANGE), d->ph_sum)))
        return st;
    s->res.threshold = d->lambda;
    return DEFTSIM_OK;
}

static const sp_method hardthr_impl = {hardthr_init, hardthr_step, hardthr_fini, NULL, 1};

/* `deftsim bench sim` at the target (hardthr and sidco): every worker k pairs (padding then
 * costs nothing). */
deftsim_status sp_pairs_closed_form(const deftsim_closed_form_in *in, uint32_t P,
                                    deftsim_schedule *s)
{
    (void)P;
    if (!sp_cf_add(s, DEFTSIM_STEP_ALLGATHER, "counts", 4) ||
        !sp_cf_add(s, DEFTSIM_STEP_ALLGATHER, "pairs",
                   in->k * ((uint64_t)in->index_bytes + in->value_bytes)))
        return DEFTSIM_E_NOMEM;
    return DEFTSIM_OK;
}

static const char *const exchange_names[] = {"variable", "padded", NULL};

static const deftsim_method_option hardthr_options[] = {
    [OPT_LAMBDA] = {.key = "hardthr_lambda", .type = DEFTSIM_OPT_DOUBLE, .dflt = "0", .lo = 0,
                    .hi = 1e30,
                    .help = "hardthr: the threshold on |acc|; 0: the k-th largest |acc| of worker "
                            "0 at the first step"},
    [OPT_EXCHANGE] = {.key = "hardthr_exchange", .type = DEFTSIM_OPT_ENUM, .dflt = "variable",
                      .names = exchange_names,
                      .help = "hardthr: pairs allgather of each worker's count, or padded to the "
                              "largest"},
};

#define OPBIT(o) (1u << DEFTSIM_KOP_##o)

/* Its columns are MiCRO's and ExDyna's (count_ratio, threshold, pad_overhead): the step fills
 * count_control, count_total, count_max and threshold as they do. */
const deftsim_method_desc deftsim_sp_hardthr_desc = {
    .name = "hardthr",
    .title = "Hard threshold",
    .short_title = "Hard thr.",
    .caps = DEFTSIM_METHOD_CAP_KEEPS_STATE,
    .impl = &hardthr_impl,
    .closed_form = sp_pairs_closed_form,
    .options = hardthr_options,
    .noptions = sizeof hardthr_options / sizeof hardthr_options[0],
    .columns = sp_mcr_columns,
    .ncolumns = SP_MCR_NCOLUMNS,
    .kernel_ops = OPBIT(TOPK) | OPBIT(FILTER_GE) | OPBIT(SCATTER_ADD) | OPBIT(UNION) |
                  OPBIT(GATHER) | OPBIT(ZERO_AT),
};
