/* sp_randk.c - Random-k with error feedback (Stich, Cordonnier and Jaggi, "Sparsified SGD with
 * memory", NeurIPS 2018), as docs/SPARSIFIERS.md ("randk") defines it.
 *
 * Every worker sends its accumulator's values at k indices drawn uniformly without replacement
 * and keeps the rest as its residual. randk_seed = shared: one draw per iteration from a seed
 * every worker holds, so that all of them pick the same set: no index is sent, an ALLREDUCE of
 * the k values. randk_seed = independent: every worker draws its own set from its own stream:
 * an ALLGATHER of the k (index, value) pairs, summed at the union (topk-ag's exchange).
 *
 * The draw: xoshiro256** seeded with splitmix64(seed ^ splitmix64(t ^ splitmix64(tag))), tag 0
 * for the shared set and w + 1 for worker w's own; Floyd's sampling of k distinct indices of
 * [0, n) (for j = n - k .. n - 1: r uniform on [0, j], r if not yet taken, else j); a uniform
 * integer on [0, m) is the first draw x with x >= 2^64 mod m, reduced mod m. */
#include <stdlib.h>
#include <string.h>

#include "sp_internal.h"

typedef struct {
    uint64_t *taken;            /* n bits, all clear between draws */
    float *vals;                /* shared: one worker's values; independent: P k values */
    float *dense;               /* independent: n floats, zero between steps */
    const deftsim_kidx **lists; /* independent: P selections, for the union */
    size_t *lens;
    size_t ph_select, ph_gather, ph_sum, ph_residual;
} randk_state;

static uint64_t bounded(deftsim_xoshiro256 *g, uint64_t m)
{
    uint64_t floor_ = (0 - m) % m;
    for (;;) {
        uint64_t x = deftsim_xoshiro256_next(g);
        if (x >= floor_) return x % m;
    }
}

/* k distinct indices of [0, n) into out, in the order Floyd's sampling produces them, from the
 * stream of (seed, t, tag); taken is n bits of scratch, all clear on entry and on return. */
static void randk_draw(uint64_t seed, uint64_t t, uint64_t tag, uint64_t n, uint64_t k,
                       uint64_t *taken, deftsim_kidx *out)
{
    deftsim_xoshiro256 g;
    deftsim_xoshiro256_seed(&g, seed ^ deftsim_splitmix64(t ^ deftsim_splitmix64(tag)));
    uint64_t c = 0;
    for (uint64_t j = n - k; j < n; j++) {
        uint64_t r = bounded(&g, j + 1);
        if (taken[r >> 6] >> (r & 63) & 1) r = j;
        taken[r >> 6] |= 1ull << (r & 63);
        out[c++] = (deftsim_kidx)r;
    }
    for (uint64_t i = 0; i < k; i++) taken[out[i] >> 6] = 0;
}

/* Options (deftsim_sparsify.h): positions in randk_options. */
enum { OPT_SEED };
enum { SEED_SHARED, SEED_INDEPENDENT };

static int independent(const deftsim_sparsifier *s)
{
    return sp_opt_int(&s->p, OPT_SEED) == SEED_INDEPENDENT;
}

static deftsim_status randk_init(deftsim_sparsifier *s)
{
    deftsim_status st;
    randk_state *d = sp_priv(s, sizeof *d);
    if (!d) return DEFTSIM_E_NOMEM;
    uint64_t P = s->P, ind = independent(s), sel = ind ? P * s->k : s->k;
    uint64_t agg = ind ? (P * s->k < s->n ? P * s->k : s->n) : s->k;
    if ((st = sp_plan_common(s, sel, agg)) ||
        (st = sp_alloc_n(s, &d->taken, (s->n + 63) / 64, sizeof *d->taken, "draw bitmap")) ||
        (st = sp_alloc_n(s, &d->vals, ind ? P * s->k : s->k, sizeof *d->vals, "values")))
        return st;
    if (ind && ((st = sp_alloc_n(s, &d->dense, s->n, sizeof *d->dense, "dense sums")) ||
                (st = sp_alloc_n(s, &d->lists, P, sizeof *d->lists, "lists")) ||
                (st = sp_alloc_n(s, &d->lens, P, sizeof *d->lens, "lists")) ||
                (st = sp_scratch_union(s))))
        return st;
    d->ph_select = sp_phase(s, "select", 1);
    d->ph_gather = sp_phase(s, "gather", 0);
    if (ind) d->ph_sum = sp_phase(s, "sum", 0);
    d->ph_residual = sp_phase(s, "residual", 0);
    return DEFTSIM_OK;
}

/* randk_seed = shared: one set, drawn by every worker (timed once, charged to each), the
 * values' allreduce and the residuals zeroed there (sp_gather_residual). */
static deftsim_status shared_step(deftsim_sparsifier *s, randk_state *d, uint64_t t,
                                  const deftsim_acc_provider *a)
{
    size_t c_select = sp_compute(s, d->ph_select);
    if (c_select == SIZE_MAX) return DEFTSIM_E_NOMEM;
    double t0 = sp_now(s);
    randk_draw(s->p.seed, t, 0, s->n, s->k, d->taken, s->sel);
    double dt = sp_now(s) - t0;
    for (uint32_t w = 0; w < s->P; w++) {
        sp_charge(s, c_select, d->ph_select, w, dt);
        s->sel_start[w] = 0;
        s->res.local_count[w] = s->k;
        s->res.cost[w] = (double)s->k;
    }
    /* The aggregate's support: the set, sorted (bookkeeping, untimed). */
    memcpy(s->agg_idx, s->sel, (size_t)s->k * sizeof *s->agg_idx);
    sp_sort_idx(s->agg_idx, (size_t)s->k);
    return sp_gather_residual(s, a, s->k, d->vals, d->ph_gather, d->ph_residual);
}

/* randk_seed = independent: every worker its own set, its pairs allgathered and summed. */
static deftsim_status independent_step(deftsim_sparsifier *s, randk_state *d, uint64_t t,
                                       const deftsim_acc_provider *a)
{
    deftsim_status st;
    const uint32_t P = s->P;
    const size_t n = (size_t)s->n, k = (size_t)s->k;
    float *acc;
    size_t c_select = sp_compute(s, d->ph_select), c_gather = sp_compute(s, d->ph_gather),
           c_res = sp_compute(s, d->ph_residual);
    if (c_select == SIZE_MAX || c_gather == SIZE_MAX || c_res == SIZE_MAX) return DEFTSIM_E_NOMEM;
    for (uint32_t w = s->lo; w < s->hi; w++) {
        uint64_t off = (uint64_t)w * k;
        deftsim_kidx *idx = s->sel + off;
        if ((st = sp_get(a, w, &acc))) return st;
        double t0 = sp_now(s);
        randk_draw(s->p.seed, t, (uint64_t)w + 1, s->n, s->k, d->taken, idx);
        sp_charge(s, c_select, d->ph_select, w, sp_now(s) - t0);
        s->sel_start[w] = off;
        s->res.local_count[w] = s->k;
        s->res.cost[w] = (double)s->k;
        SP_TIMED(s, c_gather, d->ph_gather, w, deftsim_k_gather(s->kc, acc, n, idx, k, d->vals + off));
        SP_TIMED(s, c_res, d->ph_residual, w, deftsim_k_zero_at(s->kc, acc, n, idx, k));
        if ((st = sp_release(a, w))) return st;
    }
    /* Spread mode: every worker's pairs from its rank (the values at the picks' places). */
    if ((st = sp_share_sel(s, d->vals, 0))) return st;
    for (uint32_t w = 0; w < P; w++) {
        d->lists[w] = s->sel + s->sel_start[w];
        d->lens[w] = (size_t)s->res.local_count[w];
    }
    if (P > 1) {
        deftsim_step *c = sp_collective(s, DEFTSIM_STEP_ALLGATHER, "pairs");
        if (!c) return DEFTSIM_E_NOMEM;
        for (uint32_t w = 0; w < P; w++) c->bytes[w] = s->k * ((uint64_t)s->si + s->sv);
    }
    /* Every worker sums the P received sparse vectors (in worker order): run once, charged to
     * every worker; the aggregate is read from the dense sums (untimed). */
    size_t c_sum = sp_compute(s, d->ph_sum);
    if (c_sum == SIZE_MAX) return DEFTSIM_E_NOMEM;
    double t0 = sp_now(s);
    st = deftsim_k_scatter_add(s->kc, d->dense, n, s->sel, d->vals, (size_t)P * k);
    double dt = sp_now(s) - t0;
    if (st) return st;
    for (uint32_t w = 0; w < P; w++) sp_charge(s, c_sum, d->ph_sum, w, dt);
    uint64_t nnz;
    if ((st = sp_union(s, d->lists, d->lens, P, &nnz)) ||
        (st = deftsim_k_gather(s->kc, d->dense, n, s->agg_idx, (size_t)nnz, s->agg_val)) ||
        (st = deftsim_k_zero_at(s->kc, d->dense, n, s->agg_idx, (size_t)nnz)))
        return st;
    sp_agg_finish(s, nnz);
    return DEFTSIM_OK;
}

static deftsim_status randk_step(deftsim_sparsifier *s, uint64_t t, const deftsim_acc_provider *a)
{
    randk_state *d = s->priv;
    return independent(s) ? independent_step(s, d, t, a) : shared_step(s, d, t, a);
}

static const sp_method randk_impl = {randk_init, randk_step, NULL, NULL, 1};

/* `deftsim bench sim` (randk_seed = shared, the default: the closed form sees no options): the
 * k values' allreduce. */
static deftsim_status randk_closed_form(const deftsim_closed_form_in *in, uint32_t P,
                                        deftsim_schedule *s)
{
    (void)P;
    return sp_cf_add(s, DEFTSIM_STEP_ALLREDUCE, "values", in->k * in->value_bytes)
               ? DEFTSIM_OK : DEFTSIM_E_NOMEM;
}

static const char *const seed_names[] = {"shared", "independent", NULL};

static const deftsim_method_option randk_options[] = {
    [OPT_SEED] = {.key = "randk_seed", .type = DEFTSIM_OPT_ENUM, .dflt = "shared",
                  .names = seed_names,
                  .help = "randk: one index set for all workers (allreduce of k values), or one "
                          "per worker (allgather of k pairs)"},
};

#define OPBIT(o) (1u << DEFTSIM_KOP_##o)

const deftsim_method_desc deftsim_sp_randk_desc = {
    .name = "randk",
    .title = "Random-k",
    .short_title = "Random-k",
    .impl = &randk_impl,
    .closed_form = randk_closed_form,
    .options = randk_options,
    .noptions = sizeof randk_options / sizeof randk_options[0],
    .kernel_ops = OPBIT(SCATTER_ADD) | OPBIT(UNION) | OPBIT(GATHER) | OPBIT(ZERO_AT),
};
