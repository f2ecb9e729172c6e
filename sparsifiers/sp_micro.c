/* sp_micro.c - MiCRO (Yoon and Oh), as docs/SPARSIFIERS.md ("micro") defines it after the
 * authors' code (kljp/micro, MicroReducer), and the core ExDyna shares with it (sp_exdyna.c).
 *
 * The n elements are cut once into P equal contiguous partitions (the first n mod P one element
 * longer); at step t worker w selects in partition (t mod P + w) mod P the elements with
 * |acc| >= thr, one global threshold that starts at 1 / (2 sqrt(k)) and is scaled every later
 * step by the previous step's total count K against k. A worker that picks nothing sends the
 * single index lo + (t mod len). Communication: an allgather of the counts, an allgather of the
 * indices padded to the largest count, an allreduce of every worker's values at the union U;
 * every residual is zeroed on all of U. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sp_internal.h"

double deftsim_micro_threshold_next(double thr, uint64_t k_prev, uint64_t k)
{
    double e = (double)k_prev / (double)(k ? k : 1);
    double sf;
    if (e > 1.1)
        sf = 1.005;
    else if (e > 0.909)
        sf = 1.00125; /* the authors' inner branch tests e > 0: it never lowers the threshold */
    else
        sf = 0.995;
    return thr * sf;
}

deftsim_status sp_mcr_init(deftsim_sparsifier *s)
{
    deftsim_status st;
    sp_mcr_state *d = sp_priv(s, sizeof *d);
    if (!d) return DEFTSIM_E_NOMEM;
    uint64_t P = s->P;
    /* Partitions are disjoint: the selections fit in n, and so does U. */
    if ((st = sp_plan_common(s, s->n, s->n)) ||
        (st = sp_alloc_n(s, &d->lo, P, sizeof *d->lo, "partitions")) ||
        (st = sp_alloc_n(s, &d->len, P, sizeof *d->len, "partitions")) ||
        (st = sp_alloc_n(s, &d->counts, P, sizeof *d->counts, "counts")) ||
        (st = sp_alloc_n(s, &d->vals, s->n, sizeof *d->vals, "values")) ||
        (st = sp_alloc_n(s, &d->lists, P, sizeof *d->lists, "lists")) ||
        (st = sp_alloc_n(s, &d->lens, P, sizeof *d->lens, "lists")))
        return st;
    if ((st = sp_scratch_union(s))) return st;
    d->ph_filter = sp_phase(s, "filter", 1);
    d->ph_union = sp_phase(s, "union", 0);
    d->ph_gather = sp_phase(s, "gather", 0);
    d->ph_residual = sp_phase(s, "residual", 0);
    return DEFTSIM_OK;
}

deftsim_status sp_mcr_step(deftsim_sparsifier *s, uint64_t t, const deftsim_acc_provider *a)
{
    sp_mcr_state *d = s->priv;
    deftsim_step_result *r = &s->res;
    deftsim_status st;
    const uint32_t P = s->P;
    float *acc;

    /* The threshold: 1 / (2 sqrt(k)) on the first step, then the controller. */
    if (!d->started)
        d->thr = 1.0 / (2.0 * sqrt((double)s->k));
    else
        d->thr = deftsim_micro_threshold_next(d->thr, d->k_prev, s->k);
    const float thr = (float)d->thr;

    size_t c_filter = sp_compute(s, d->ph_filter);
    if (c_filter == SIZE_MAX) return DEFTSIM_E_NOMEM;
    uint64_t K = 0, m = 0;
    for (uint32_t w = s->lo; w < s->hi; w++) {
        uint32_t c = (uint32_t)((t % P + w) % P);
        uint64_t lo = d->lo[c], len = d->len[c];
        deftsim_kidx *out = s->sel + lo;
        size_t cnt = 0;
        if ((st = sp_get(a, w, &acc))) return st;
        if (len) {
            double t0 = sp_now(s);
            st = deftsim_k_filter_ge(s->kc, acc + lo, (size_t)len, thr, out, (size_t)len, &cnt);
            for (size_t i = 0; !st && i < cnt; i++) out[i] += (deftsim_kidx)lo;
            if (!st && cnt == 0) {
                out[0] = (deftsim_kidx)(lo + t % len);
                cnt = 1;
            }
            sp_charge(s, c_filter, d->ph_filter, w, sp_now(s) - t0);
            if (st) return st;
        }
        /* An empty partition (n < P, or ExDyna's blocks of 0 elements) picks nothing: the
         * authors' fallback would divide by zero there. */
        s->sel_start[w] = lo;
        r->local_count[w] = cnt;
        r->cost[w] = (double)len;
    }
    /* Spread mode: every worker's picks from its rank (each at its partition's start). */
    if ((st = sp_share_sel(s, NULL, 0))) return st;
    for (uint32_t w = 0; w < P; w++) {
        uint64_t cnt = r->local_count[w];
        d->lists[w] = s->sel + s->sel_start[w];
        d->lens[w] = (size_t)cnt;
        d->counts[w] = cnt;
        K += cnt;
        if (cnt > m) m = cnt;
    }
    if (P > 1) {
        deftsim_step *c = sp_collective(s, DEFTSIM_STEP_ALLGATHER, "counts");
        if (!c) return DEFTSIM_E_NOMEM;
        for (uint32_t w = 0; w < P; w++) c->bytes[w] = s->count_bytes;
        /* Padded to the largest count, as the reference's all_gather of equal tensors. */
        c = sp_collective(s, DEFTSIM_STEP_ALLGATHER, "indices");
        if (!c) return DEFTSIM_E_NOMEM;
        for (uint32_t w = 0; w < P; w++) c->bytes[w] = m * s->si;
    }
    /* Every worker concatenates the P received lists (disjoint partitions: no duplicates);
     * the simulator builds the same set sorted: run once, charged to every worker. */
    size_t c_union = sp_compute(s, d->ph_union);
    if (c_union == SIZE_MAX) return DEFTSIM_E_NOMEM;
    uint64_t nnz;
    double t0 = sp_now(s);
    if ((st = sp_union(s, d->lists, d->lens, P, &nnz))) return st;
    double dt = sp_now(s) - t0;
    for (uint32_t w = 0; w < P; w++) sp_charge(s, c_union, d->ph_union, w, dt);
    if (nnz != K)
        return deftsim_error_set(DEFTSIM_E_INTERNAL,
                                 "%s: |U| = %llu but the workers picked %llu (overlap)",
                                 s->name, (unsigned long long)nnz, (unsigned long long)K);

    /* Gather/residual pass: values at U go into the (emulated) allreduce, U is zeroed. */
    if ((st = sp_gather_residual(s, a, nnz, d->vals, d->ph_gather, d->ph_residual))) return st;

    r->count_control = 1;
    r->threshold = d->thr;
    r->count_total = K;
    r->count_max = m;
    /* The next step's controller reads K. (The authors' MicroReducer leaves it at 0 when P = 1,
     * where no exchange runs; deftsim uses K there too: docs/SPARSIFIERS.md.) */
    d->k_prev = K;
    d->t_prev = t;
    d->started = 1;
    return DEFTSIM_OK;
}

static deftsim_status micro_init(deftsim_sparsifier *s)
{
    deftsim_status st = sp_mcr_init(s);
    if (st || s->dry) return st;
    sp_mcr_state *d = s->priv;
    uint64_t q = s->n / s->P, rem = s->n % s->P, pos = 0;
    for (uint32_t j = 0; j < s->P; j++) {
        d->lo[j] = pos;
        d->len[j] = q + (j < rem ? 1 : 0);
        pos += d->len[j];
    }
    return DEFTSIM_OK;
}

static deftsim_status micro_step(deftsim_sparsifier *s, uint64_t t, const deftsim_acc_provider *a)
{
    return sp_mcr_step(s, t, a);
}

static const sp_method micro_impl = {micro_init, micro_step, NULL, NULL, 1};

/* `deftsim bench sim` (MiCRO and ExDyna) at the target: K = k in all, balanced partitions,
 * m = ceil(k / P) per worker. */
deftsim_status deftsim_sp_mcr_closed_form(const deftsim_closed_form_in *in, uint32_t P,
                                          deftsim_schedule *s)
{
    const uint64_t k = in->k;
    if (!sp_cf_add(s, DEFTSIM_STEP_ALLGATHER, "counts", 4) ||
        !sp_cf_add(s, DEFTSIM_STEP_ALLGATHER, "indices", (k + P - 1) / P * in->index_bytes) ||
        !sp_cf_add(s, DEFTSIM_STEP_ALLREDUCE, "values", k * in->value_bytes))
        return DEFTSIM_E_NOMEM;
    return DEFTSIM_OK;
}

/* The result columns of the count-controlled methods (MiCRO, ExDyna, and the threshold
 * methods hardthr and sidco): K / k, the threshold, the pairs' or indices' padding m P / K - 1. */
double sp_col_count_ratio(const deftsim_step_result *r)
{
    return r->count_control ? (double)r->count_total / (double)r->k : NAN;
}

double sp_col_threshold(const deftsim_step_result *r) { return r->threshold; }

double sp_col_pad(const deftsim_step_result *r)
{
    if (!r->count_control || !r->count_total) return NAN;
    return (double)r->count_max * (double)r->P / (double)r->count_total - 1.0;
}

const deftsim_method_column sp_mcr_columns[SP_MCR_NCOLUMNS] = {
    {.name = "count_ratio", .unit = "ratio", .title = "count ratio",
     .doc = "K / k: the workers' summed counts over the target", .get = sp_col_count_ratio,
     .summary = DEFTSIM_COL_ROWS_ONLY},
    {.name = "threshold", .unit = "gradient units", .title = "threshold",
     .doc = "micro, exdyna: the global threshold the step selected with", .get = sp_col_threshold,
     .summary = DEFTSIM_COL_MEDIAN},
    {.name = "pad_overhead", .unit = "ratio", .title = "padding",
     .doc = "micro, exdyna: m P / K - 1, the padding share of the index allgather",
     .get = sp_col_pad, .summary = DEFTSIM_COL_MEDIAN},
};

#define OPBIT(o) (1u << DEFTSIM_KOP_##o)

const deftsim_method_desc deftsim_sp_micro_desc = {
    .name = "micro",
    .title = "MiCRO",
    .short_title = "MiCRO",
    .caps = DEFTSIM_METHOD_CAP_KEEPS_STATE,
    .impl = &micro_impl,
    .closed_form = deftsim_sp_mcr_closed_form,
    .columns = sp_mcr_columns,
    .ncolumns = SP_MCR_NCOLUMNS,
    .kernel_ops = SP_MCR_KERNEL_OPS,
};
