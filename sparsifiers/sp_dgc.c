/* sp_dgc.c - DGC (Deep Gradient Compression, Lin et al.), as docs/SPARSIFIERS.md ("dgc")
 * defines it after the reference code (synxlin/deep-gradient-compression, dgc/compression.py).
 *
 * Layer-wise: every tensor with more than one dimension selects on its own with a sampled
 * threshold; 1-D tensors (biases, norms) go through a dense allreduce. Per sparse tensor, fixed
 * at creation (deftsim_dgc_geometry): strided samples, the number of top samples that sets the
 * threshold, the target. Per iteration and worker: a random start offset, the threshold = the
 * smallest of the top sampled magnitudes, candidates = |x| >= threshold, up to 10 adaptation
 * passes (> 1.3 target: exact top-target among the candidates and stop; < 0.8 target:
 * threshold *= 0.8 and filter again; else stop), at most target kept (the lowest indices, as
 * the reference's indices[:num_selects] of an ascending nonzero()). Communication: one
 * allgather of variable-size (index, value) pairs per sparse tensor and one allreduce per dense
 * tensor, in parameter order, as the reference's per-tensor Horovod calls. Residual: the
 * worker's own picks and the dense tensors zeroed (momentum correction belongs to a training
 * run's optimizer and is not modelled: the accumulator is DGC's v with momentum 0).
 *
 * Spread mode: each rank selects, gathers and zeroes for its own block of workers; the dense
 * tensors' sum runs as a chain in worker order; then every worker's pairs and per-tensor counts
 * are shared, so that every rank fills the collectives' bytes, runs the sum of the gathered
 * pairs and builds the aggregate as one process does. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sp_internal.h"

typedef struct {
    uint64_t offset;
    uint32_t layer;     /* index in the model table */
    deftsim_dgc_geometry g;
} dgc_tensor;

typedef struct {
    dgc_tensor *t;              /* the sparse tensors, in parameter order */
    size_t nt;
    uint64_t per_worker;        /* sum of targets: a worker's selection capacity */
    deftsim_kidx *dense_list;   /* every element of the 1-D tensors */
    uint64_t ndense;
    float *dsum;                /* their allreduce sum */
    float *dblk;                /* spread mode: this rank's workers' dense values, so that the
                                   ranks select at once and only the sum runs as a chain */
    uint64_t *cnt;              /* P * nt: picks per worker and tensor */
    float *vals;                /* P * per_worker: values at the picks */
    float *sbuf;                /* samples of one tensor */
    deftsim_kidx *sidx;         /* top samples, or positions among candidates */
    deftsim_kidx *cand;         /* candidates of one tensor */
    float *cvals;               /* their values */
    float *dense;               /* n floats, zero between steps */
    const deftsim_kidx **lists; /* P selections + the dense list */
    size_t *lens;
    size_t ph_sample, ph_filter, ph_gather, ph_sum, ph_residual;
} dgc_state;

static uint64_t ceil_u64(double x) { return (uint64_t)ceil(x); }

void deftsim_dgc_geometry_of(uint64_t numel, double density, deftsim_dgc_geometry *g)
{
    /* The reference's arithmetic: Python floats, math.ceil, integer division. */
    uint64_t pct = ceil_u64((double)numel * 0.01);
    uint64_t cpr = ceil_u64(2.0 / density);
    memset(g, 0, sizeof *g);
    g->numel = numel;
    if (numel <= cpr) {
        g->all = 1;
        g->stride = 1;
        g->samples = numel;
    } else {
        uint64_t want = pct > cpr ? pct : cpr;
        uint64_t stride = ceil_u64((double)numel / (double)want / 32.0) * 32 + 1;
        uint64_t samples = numel / stride;
        /* Lower the stride by 8 until the samples suffice; stride 1 (every element) always
         * does, since numel > cpr and numel >= pct. */
        while (samples < want && stride > 8) {
            stride -= 8;
            samples = numel / stride;
        }
        if (samples < want) {
            stride = 1;
            samples = numel;
        }
        g->stride = stride;
        g->samples = samples;
    }
    g->top_samples = ceil_u64((double)g->samples * density);
    g->target = ceil_u64((double)numel * density);
    if (g->top_samples < 1) g->top_samples = 1;
    if (g->top_samples > g->samples) g->top_samples = g->samples;
    if (g->target > numel) g->target = numel;
}

static deftsim_status dgc_init(deftsim_sparsifier *s)
{
    deftsim_status st;
    dgc_state *d = sp_priv(s, sizeof *d);
    if (!d) return DEFTSIM_E_NOMEM;
    const deftsim_model *m = s->p.model;
    size_t nt = 0;
    uint64_t ndense = 0, per = 0, maxnumel = 0, maxsamples = 0, maxsel = 0;
    for (size_t i = 0; i < m->nlayers; i++) {
        if (m->layers[i].ndim > 1) nt++;
        else ndense += m->layers[i].numel;
    }
    d->nt = nt;
    d->ndense = ndense;
    /* The tensor table is a plan, allocated in the dry run too. */
    s->mem_bytes += nt * sizeof *d->t;
    d->t = calloc(nt ? nt : 1, sizeof *d->t);
    if (!d->t) return deftsim_error_nomem("dgc");
    size_t j = 0;
    for (size_t i = 0; i < m->nlayers; i++) {
        const deftsim_layer *L = &m->layers[i];
        if (L->ndim <= 1) continue;
        dgc_tensor *T = &d->t[j++];
        T->offset = L->offset;
        T->layer = (uint32_t)i;
        deftsim_dgc_geometry_of(L->numel, s->p.density, &T->g);
        per += T->g.target;
        if (L->numel > maxnumel) maxnumel = L->numel;
        if (T->g.samples > maxsamples) maxsamples = T->g.samples;
        if (T->g.target > maxsel) maxsel = T->g.target;
        if (T->g.top_samples > maxsel) maxsel = T->g.top_samples;
        if ((st = sp_scratch_topk(s, (size_t)T->g.samples, (size_t)T->g.top_samples)) ||
            (st = sp_scratch_topk(s, (size_t)L->numel, (size_t)T->g.target)))
            return st;
    }
    d->per_worker = per;
    uint64_t P = s->P, agg_cap = P * per + ndense;
    if (agg_cap > s->n) agg_cap = s->n;
    if ((st = sp_plan_common(s, P * per, agg_cap)) ||
        (st = sp_alloc_n(s, &d->dense_list, ndense, sizeof *d->dense_list, "dense indices")) ||
        (st = sp_alloc_n(s, &d->dsum, ndense, sizeof *d->dsum, "dense sums")) ||
        (st = sp_alloc_n(s, &d->dblk, sp_spread(s) ? (uint64_t)(s->hi - s->lo) * ndense : 0,
                         sizeof *d->dblk, "dense values")) ||
        (st = sp_alloc_n(s, &d->cnt, P * nt, sizeof *d->cnt, "counts")) ||
        (st = sp_alloc_n(s, &d->vals, P * per, sizeof *d->vals, "values")) ||
        (st = sp_alloc_n(s, &d->sbuf, maxsamples, sizeof *d->sbuf, "samples")) ||
        (st = sp_alloc_n(s, &d->sidx, maxsel, sizeof *d->sidx, "sample indices")) ||
        (st = sp_alloc_n(s, &d->cand, maxnumel, sizeof *d->cand, "candidates")) ||
        (st = sp_alloc_n(s, &d->cvals, maxnumel, sizeof *d->cvals, "candidate values")) ||
        (st = sp_alloc_n(s, &d->dense, s->n, sizeof *d->dense, "dense buffer")) ||
        (st = sp_alloc_n(s, &d->lists, P + 1, sizeof *d->lists, "lists")) ||
        (st = sp_alloc_n(s, &d->lens, P + 1, sizeof *d->lens, "lists")) ||
        (st = sp_scratch_union(s)))
        return st;
    if (!s->dry) {
        uint64_t e = 0;
        for (size_t i = 0; i < m->nlayers; i++)
            if (m->layers[i].ndim <= 1)
                for (uint64_t x = 0; x < m->layers[i].numel; x++)
                    d->dense_list[e++] = (deftsim_kidx)(m->layers[i].offset + x);
    }
    d->ph_sample = sp_phase(s, "sample", 1);
    d->ph_filter = sp_phase(s, "filter", 1);
    d->ph_gather = sp_phase(s, "gather", 0);
    d->ph_sum = sp_phase(s, "sum", 0);
    d->ph_residual = sp_phase(s, "residual", 0);
    return DEFTSIM_OK;
}

static void dgc_fini(deftsim_sparsifier *s)
{
    dgc_state *d = s->priv;
    if (d) free(d->t);
}

static void sort_if_needed(deftsim_kidx *a, size_t n)
{
    for (size_t i = 1; i < n; i++)
        if (a[i - 1] > a[i]) {
            sp_sort_idx(a, n);
            return;
        }
}

/* One sparse tensor of one worker: sampling, threshold, filtering and adaptation. Writes the
 * picks (absolute indices) to out and returns their count in *count. */
static deftsim_status select_tensor(deftsim_sparsifier *s, dgc_state *d, const dgc_tensor *T,
                                    const float *acc, uint64_t t, uint32_t w, size_t li,
                                    size_t c_sample, size_t c_filter, deftsim_kidx *out,
                                    uint64_t *count)
{
    deftsim_status st;
    const deftsim_dgc_geometry *g = &T->g;
    const float *x = acc + T->offset;
    const size_t numel = (size_t)g->numel, target = (size_t)g->target;
    size_t start = 0;
    if (!g->all)
        start = (size_t)(deftsim_splitmix64(s->p.seed ^ deftsim_splitmix64(t ^ deftsim_splitmix64(((uint64_t)w << 32) | li))) %
                         g->stride);

    /* Threshold: the smallest of the top sampled magnitudes. */
    if ((st = sp_scratch_topk(s, (size_t)g->samples, (size_t)g->top_samples))) return st;
    double t0 = sp_now(s);
    st = deftsim_k_sample_strided(s->kc, x, numel, start, (size_t)g->stride, (size_t)g->samples,
                                  d->sbuf);
    if (!st)
        st = deftsim_k_topk(s->kc, d->sbuf, (size_t)g->samples, (size_t)g->top_samples, d->sidx,
                            s->scratch, s->scratch_bytes);
    float thr = 0;
    if (!st) {
        thr = d->sbuf[d->sidx[0]];
        for (size_t j = 1; j < g->top_samples; j++)
            if (d->sbuf[d->sidx[j]] < thr) thr = d->sbuf[d->sidx[j]];
    }
    sp_charge(s, c_sample, d->ph_sample, w, sp_now(s) - t0);
    if (st) return st;
    double cost = sp_topk_cost(g->samples, g->top_samples);

    /* Filter and adapt. */
    size_t c = 0;
    int exact = 0;
    t0 = sp_now(s);
    st = deftsim_k_filter_ge(s->kc, x, numel, thr, d->cand, numel, &c);
    cost += (double)numel;
    for (int pass = 0; !st && pass < 10; pass++) {
        if ((double)c > 1.3 * (double)target) {
            /* Untimed: scratch, and the candidates put in index order (the reference's
             * nonzero() order; the filter kernel leaves it open) so that ties at the boundary
             * go to the lower index. */
            double el = sp_now(s) - t0;
            if ((st = sp_scratch_topk(s, c, target))) return st;
            sort_if_needed(d->cand, c);
            t0 = sp_now(s) - el;
            st = deftsim_k_gather(s->kc, x, numel, d->cand, c, d->cvals);
            if (!st)
                st = deftsim_k_topk(s->kc, d->cvals, c, target, d->sidx, s->scratch,
                                    s->scratch_bytes);
            if (!st)
                for (size_t j = 0; j < target; j++) out[j] = d->cand[d->sidx[j]];
            cost += sp_topk_cost(c, target);
            c = target;
            exact = 1;
            break;
        } else if ((double)c < 0.8 * (double)target) {
            thr = thr * 0.8f;
            st = deftsim_k_filter_ge(s->kc, x, numel, thr, d->cand, numel, &c);
            cost += (double)numel;
        } else {
            break;
        }
    }
    sp_charge(s, c_filter, d->ph_filter, w, sp_now(s) - t0);
    if (st) return st;
    if (!exact) {
        /* At most target: the lowest indices, as the reference slices its ascending candidate
         * list. The kernel's filter leaves the order open, so sort (bookkeeping, untimed). */
        if (c > target) {
            sort_if_needed(d->cand, c);
            c = target;
        }
        memcpy(out, d->cand, c * sizeof *out);
    }
    for (size_t j = 0; j < c; j++) out[j] += (deftsim_kidx)T->offset;
    s->res.cost[w] += cost;
    *count = c;
    return DEFTSIM_OK;
}

static deftsim_status dgc_step(deftsim_sparsifier *s, uint64_t t, const deftsim_acc_provider *a)
{
    dgc_state *d = s->priv;
    deftsim_step_result *r = &s->res;
    deftsim_status st;
    const uint32_t P = s->P;
    const size_t n = (size_t)s->n;
    float *acc;

    size_t c_sample = sp_compute(s, d->ph_sample), c_filter = sp_compute(s, d->ph_filter),
           c_gather = sp_compute(s, d->ph_gather), c_res = sp_compute(s, d->ph_residual);
    if (c_sample == SIZE_MAX || c_filter == SIZE_MAX || c_gather == SIZE_MAX || c_res == SIZE_MAX)
        return DEFTSIM_E_NOMEM;

    /* One pass: a worker's residual depends only on its own picks. The dense tensors' sum runs
     * in worker order: in spread mode the block's values are kept and summed afterwards, as a
     * chain over the ranks' blocks. */
    const uint64_t dbytes = d->ndense * sizeof *d->dsum;
    for (uint32_t w = s->lo; w < s->hi; w++) {
        if ((st = sp_get(a, w, &acc))) return st;
        uint64_t base = (uint64_t)w * d->per_worker, total = 0;
        for (size_t li = 0; li < d->nt; li++) {
            uint64_t c;
            if ((st = select_tensor(s, d, &d->t[li], acc, t, w, li, c_sample, c_filter,
                                    s->sel + base + total, &c)))
                return st;
            d->cnt[(size_t)w * d->nt + li] = c;
            total += c;
        }
        s->sel_start[w] = base;
        r->local_count[w] = total;
        d->lists[w] = s->sel + base;
        d->lens[w] = (size_t)total;
        SP_TIMED(s, c_gather, d->ph_gather, w,
                 deftsim_k_gather(s->kc, acc, n, s->sel + base, (size_t)total, d->vals + base));
        /* The dense tensors' allreduce, emulated (untimed: the collective's own work). */
        if (sp_spread(s)) {
            float *b = d->dblk + (size_t)(w - s->lo) * d->ndense;
            for (uint64_t e = 0; e < d->ndense; e++) b[e] = acc[d->dense_list[e]];
        } else {
            for (uint64_t e = 0; e < d->ndense; e++)
                d->dsum[e] = w == 0 ? acc[d->dense_list[e]] : d->dsum[e] + acc[d->dense_list[e]];
        }
        double t0 = sp_now(s);
        st = deftsim_k_zero_at(s->kc, acc, n, s->sel + base, (size_t)total);
        if (!st) st = deftsim_k_zero_at(s->kc, acc, n, d->dense_list, (size_t)d->ndense);
        sp_charge(s, c_res, d->ph_residual, w, sp_now(s) - t0);
        if (st || (st = sp_release(a, w))) return st;
    }
    if (sp_spread(s)) {
        if ((st = sp_chain_in(s, d->dsum, dbytes))) return st;
        for (uint32_t w = s->lo; w < s->hi; w++) {
            const float *b = d->dblk + (size_t)(w - s->lo) * d->ndense;
            for (uint64_t e = 0; e < d->ndense; e++) d->dsum[e] = w == 0 ? b[e] : d->dsum[e] + b[e];
        }
        if ((st = sp_chain_out(s, d->dsum, dbytes)) || (st = sp_chain_bcast(s, d->dsum, dbytes)))
            return st;
    }
    /* Spread mode: every worker's pairs and per-tensor counts from its rank, for the
     * collectives' bytes, the sum and the aggregate every rank computes. */
    if (sp_spread(s)) {
        if ((st = sp_share_sel(s, d->vals, 0)) ||
            (st = sp_share_fixed(s, d->cnt, d->nt * sizeof *d->cnt)))
            return st;
        for (uint32_t w = 0; w < P; w++) {
            d->lists[w] = s->sel + s->sel_start[w];
            d->lens[w] = (size_t)r->local_count[w];
        }
    }
    r->common_count = d->ndense;

    /* Per-tensor collectives, in parameter order. */
    if (P > 1) {
        const deftsim_model *m = s->p.model;
        size_t li = 0;
        for (size_t i = 0; i < m->nlayers; i++) {
            char name[DEFTSIM_STEP_NAME_MAX];
            deftsim_step *c;
            if (m->layers[i].ndim > 1) {
                snprintf(name, sizeof name, "pairs:%zu", i);
                if (!(c = sp_collective(s, DEFTSIM_STEP_ALLGATHER, name))) return DEFTSIM_E_NOMEM;
                for (uint32_t w = 0; w < P; w++)
                    c->bytes[w] = d->cnt[(size_t)w * d->nt + li] * ((uint64_t)s->si + s->sv);
                li++;
            } else {
                snprintf(name, sizeof name, "dense:%zu", i);
                if (!(c = sp_collective(s, DEFTSIM_STEP_ALLREDUCE, name))) return DEFTSIM_E_NOMEM;
                for (uint32_t w = 0; w < P; w++) c->bytes[w] = m->layers[i].numel * s->sv;
            }
        }
    }

    /* Every worker adds the P gathered sparse tensors into its gradient (the reference's
     * index_put_ with accumulate): run once, charged to every worker. */
    size_t c_sum = sp_compute(s, d->ph_sum);
    if (c_sum == SIZE_MAX) return DEFTSIM_E_NOMEM;
    double t0 = sp_now(s);
    st = DEFTSIM_OK;
    for (uint32_t w = 0; !st && w < P; w++)
        st = deftsim_k_scatter_add(s->kc, d->dense, n, d->lists[w],
                                   d->vals + (size_t)w * d->per_worker, d->lens[w]);
    double dt = sp_now(s) - t0;
    if (st) return st;
    for (uint32_t w = 0; w < P; w++) sp_charge(s, c_sum, d->ph_sum, w, dt);

    /* The aggregate (bookkeeping): sparse sums plus the dense tensors, sorted. */
    for (uint64_t e = 0; e < d->ndense; e++) d->dense[d->dense_list[e]] = d->dsum[e];
    d->lists[P] = d->dense_list;
    d->lens[P] = (size_t)d->ndense;
    uint64_t nnz;
    if ((st = sp_union(s, d->lists, d->lens, (size_t)P + 1, &nnz)) ||
        (st = deftsim_k_gather(s->kc, d->dense, n, s->agg_idx, (size_t)nnz, s->agg_val)) ||
        (st = deftsim_k_zero_at(s->kc, d->dense, n, s->agg_idx, (size_t)nnz)))
        return st;
    sp_agg_finish(s, nnz);
    return DEFTSIM_OK;
}

static const sp_method dgc_impl = {dgc_init, dgc_step, dgc_fini, NULL, 1};

/* `deftsim bench sim`: per tensor, ceil(numel d) pairs of a matrix or filter, or every value of
 * a 1-D tensor. */
static deftsim_status dgc_closed_form(const deftsim_closed_form_in *in, uint32_t P,
                                      deftsim_schedule *s)
{
    (void)P;
    const deftsim_model *m = in->model;
    for (size_t l = 0; l < m->nlayers; l++) {
        const deftsim_layer *ly = &m->layers[l];
        char name[DEFTSIM_STEP_NAME_MAX];
        deftsim_step *st;
        if (ly->ndim > 1) {
            snprintf(name, sizeof name, "pairs:%zu", l);
            st = sp_cf_add(s, DEFTSIM_STEP_ALLGATHER, name,
                           (uint64_t)ceil((double)ly->numel * in->density) *
                               ((uint64_t)in->index_bytes + in->value_bytes));
        } else {
            snprintf(name, sizeof name, "dense:%zu", l);
            st = sp_cf_add(s, DEFTSIM_STEP_ALLREDUCE, name, ly->numel * in->value_bytes);
        }
        if (!st) return DEFTSIM_E_NOMEM;
    }
    return DEFTSIM_OK;
}

#define OPBIT(o) (1u << DEFTSIM_KOP_##o)
#define RESIDUAL (OPBIT(GATHER) | OPBIT(ZERO_AT))

const deftsim_method_desc deftsim_sp_dgc_desc = {
    .name = "dgc",
    .title = "DGC",
    .short_title = "DGC",
    .caps = DEFTSIM_METHOD_CAP_DEFAULT | DEFTSIM_METHOD_CAP_OWN_MOMENTUM,
    .impl = &dgc_impl,
    .closed_form = dgc_closed_form,
    .kernel_ops = OPBIT(SAMPLE_STRIDED) | OPBIT(TOPK) | OPBIT(FILTER_GE) | OPBIT(SCATTER_ADD) |
                  OPBIT(UNION) | RESIDUAL,
};
