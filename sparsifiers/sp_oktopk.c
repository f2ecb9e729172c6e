/* sp_oktopk.c - Ok-Topk (Li and Hoefler, PPoPP 2022), as the authors' code
 * (Shigangli/Ok-Topk) runs it: docs/SPARSIFIERS.md, "Ok-Topk", gives every step, constant and
 * byte count.
 *
 * In short: for the first `warmup` iterations a dense allreduce (no residual). Then every
 * worker selects |acc| > L with its own local threshold L (the exact k-th largest |acc| every
 * 32 steps, else last step's L raised by x1.03 while the count exceeds 4k/3, at most 5 times;
 * a band adjust of +-1.2 % after the selection), the index space is cut into P regions (every
 * 64 steps, from the mean of the workers' quantile positions), each region's picks go to its
 * owner in rounds of at most 4 peers (split and reduce), the owner keeps |sum| > G with the
 * global threshold G (every 32 steps: every nonzero sum, then the exact top-k of the union sets
 * G), and the owners' picks are allgathered. The aggregate counts only the workers that
 * selected an index; the residual is zeroed on the intersection of the local and global
 * selections. The BERT variant changes the constants and balances the allgather.
 *
 * The regions cut the authors' flat buffer. Their VGG (and LSTM) script lays the layers out in
 * reverse order (the last layer first), their BERT script in the model's order
 * ([sparsify] oktopk_layer_order: auto follows the variant). With the reverse order every
 * position that regions compare (the proposed boundaries, the regions' ranges, an owner's
 * candidates in ascending order, the union's order for the top-k and its ties) is a buffer
 * position; the picks are held in buffer order; the aggregate is sorted back to the model's
 * indices.
 *
 * Spread mode (sp_internal.h): each rank runs the local selection and the residual for its own
 * workers; the counts, thresholds, proposed boundaries and picks (with their values) are then
 * shared, laid out as one process lays them out, and every rank runs the regions, the
 * reductions and the global selection for all workers in one process's order. The warm-up's
 * sum is a chain over the ranks. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sp_internal.h"

/* Ok-Topk's options (its registry entry's table, by position). */
enum { OPT_VARIANT, OPT_WARMUP, OPT_LAYER_ORDER };
enum { VARIANT_VGG, VARIANT_BERT };
enum { ORDER_AUTO, ORDER_REVERSE, ORDER_FORWARD };

#define OK_THROTTLE 4u      /* peers per round of the split and reduce */
#define OK_REGION_PERIOD 64 /* steps between region re-cuts */

typedef struct {
    uint64_t local_period, global_period;
    int raise_loop;           /* VGG: the x1.03 loop while count > raise_num * k / raise_den */
    uint64_t raise_num, raise_den;
    double lo_num, lo_den, local_div, local_mul;  /* local band: < lo k -> /div, > 5k/4 -> *mul */
    double glo_num, glo_den, ghi_num, ghi_den, global_div, global_mul;
    int balanced;             /* BERT: balance before the allgather */
} ok_consts;

static const ok_consts vgg = {32, 32, 1, 4, 3, 2, 3, 1.012, 1.012, 2, 3, 4, 3, 1.008, 1.008, 0};
static const ok_consts bert = {128, 128, 0, 0, 1, 4, 5, 1.025, 1.025, 4, 5, 5, 4, 1.036, 1.025, 1};

/* A growable array of indices and values (a worker's picks, the union): grown outside the
 * timed regions. */
typedef struct {
    deftsim_kidx *idx;
    float *val;
    uint64_t cap;
} ok_buf;

typedef struct {
    const ok_consts *c;
    uint64_t warmup;
    int started;              /* a sparse step has run: the thresholds and regions are set */
    double *lthr;             /* P: each worker's local threshold */
    double gthr;              /* the global threshold (the same on every worker) */
    uint64_t *off;            /* P + 1: region starts, off[P] = n */
    uint64_t *prop;           /* P * (P - 1): each worker's proposed boundaries */
    deftsim_kidx *picks;      /* every worker's sorted picks, concatenated (grown) */
    float *pvals;             /* their values */
    uint64_t picks_cap;
    uint64_t *pos;            /* P * (P + 1): where worker w's picks of region j start */
    float *red;               /* n: the owners' reduced sums (zero between steps) */
    ok_buf uni;               /* the global selection (indices sorted, values summed) */
    deftsim_kidx *tk;         /* top-k output over the union */
    uint64_t tk_cap;
    uint64_t *gcount;         /* P: each owner's global picks */
    uint64_t *mark;           /* n bits: the global selection */
    deftsim_kidx *inter;      /* a worker's picks in the global selection (grown) */
    uint64_t inter_cap;
    uint64_t *rload;          /* P: entries each owner receives */
    /* The buffer order (rev = 1: the layers reversed). The nonempty layers, ascending: model
     * offset lay_off[l], buffer offset lay_buf[l] = n - lay_off[l] - numel; nlay of them. */
    int rev;
    size_t nlay;
    uint64_t *lay_off, *lay_buf;
    deftsim_kidx *tmp_idx;    /* reordering scratch (grown) */
    float *tmp_val;
    uint64_t tmp_cap;
    double *lused;            /* spread mode, P: each worker's local threshold of the step */
    size_t ph_threshold, ph_select, ph_reduce, ph_global, ph_residual;
} ok_state;

#define BIT_GET(m, i) (((m)[(i) >> 6] >> ((i) & 63)) & 1u)
#define BIT_SET(m, i) ((m)[(i) >> 6] |= (uint64_t)1 << ((i) & 63))
#define BIT_CLR(m, i) ((m)[(i) >> 6] &= ~((uint64_t)1 << ((i) & 63)))

static void ok_fini(deftsim_sparsifier *s)
{
    ok_state *d = s->priv;
    if (!d) return;
    free(d->picks);
    free(d->pvals);
    free(d->uni.idx);
    free(d->uni.val);
    free(d->tk);
    free(d->inter);
    free(d->tmp_idx);
    free(d->tmp_val);
    d->picks = d->inter = d->tk = d->uni.idx = d->tmp_idx = NULL;
    d->pvals = d->uni.val = d->tmp_val = NULL;
}

static deftsim_status grow(void *pp, uint64_t *cap, uint64_t need, size_t el)
{
    size_t c = (size_t)*cap;
    if (need > SIZE_MAX || deftsim_grow(pp, &c, (size_t)need, el))
        return deftsim_error_nomem("oktopk: %llu entries", (unsigned long long)need);
    *cap = c;
    return DEFTSIM_OK;
}

/* Room for need picks and their values (outside the timed regions). */
static deftsim_status grow_picks(ok_state *d, uint64_t need)
{
    deftsim_status st = grow(&d->picks, &d->picks_cap, need, sizeof *d->picks);
    if (st) return st;
    if (d->picks_cap * sizeof *d->pvals > 0) {
        float *nv = realloc(d->pvals, (size_t)d->picks_cap * sizeof *nv);
        if (!nv) return deftsim_error_nomem("oktopk: values");
        d->pvals = nv;
    }
    return DEFTSIM_OK;
}

/* Index of the first element of sorted a[0..m) that is >= v. */
static uint64_t lower_bound(const deftsim_kidx *a, uint64_t m, uint64_t v)
{
    uint64_t lo = 0, hi = m;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (a[mid] < v)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The buffer order: reverse for oktopk_layer_order = reverse, or auto with the VGG variant;
 * a model of one nonempty layer has the same order both ways (rev stays 0). */
static deftsim_status ok_layout(deftsim_sparsifier *s, ok_state *d)
{
    const deftsim_model *m = s->p.model;
    int o = sp_opt_int(&s->p, OPT_LAYER_ORDER);
    int rev = o == ORDER_REVERSE ||
              (o == ORDER_AUTO && sp_opt_int(&s->p, OPT_VARIANT) == VARIANT_VGG);
    size_t L = 0;
    for (size_t l = 0; l < m->nlayers; l++) L += m->layers[l].numel > 0;
    if (!rev || L < 2) return DEFTSIM_OK;
    deftsim_status st;
    if ((st = sp_alloc_n(s, &d->lay_off, L, sizeof *d->lay_off, "layers")) ||
        (st = sp_alloc_n(s, &d->lay_buf, L, sizeof *d->lay_buf, "layers")))
        return st;
    /* The reordering scratch grows to one worker's picks: about 2k planned, as the picks. */
    s->mem_bytes += 2 * s->k * (sizeof(deftsim_kidx) + sizeof(float));
    if (s->dry) return DEFTSIM_OK;
    d->rev = 1;
    d->nlay = L;
    for (size_t l = 0, j = 0; l < m->nlayers; l++) {
        const deftsim_layer *y = &m->layers[l];
        if (!y->numel) continue;
        d->lay_off[j] = y->offset;
        d->lay_buf[j++] = s->n - y->offset - y->numel;
    }
    return DEFTSIM_OK;
}

/* Model index -> buffer position (the identity in the model's order). */
static uint64_t to_buf(const ok_state *d, uint64_t i)
{
    if (!d->rev) return i;
    size_t lo = 0, hi = d->nlay; /* the last layer with lay_off <= i */
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (d->lay_off[mid] <= i)
            lo = mid;
        else
            hi = mid;
    }
    return d->lay_buf[lo] + (i - d->lay_off[lo]);
}

/* Buffer position -> model index. In the buffer the layers lie from the last to the first,
 * so the layer of b is the first one (ascending) with lay_buf <= b. */
static uint64_t from_buf(const ok_state *d, uint64_t b)
{
    if (!d->rev) return b;
    size_t lo = 0, hi = d->nlay - 1;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (d->lay_buf[mid] <= b)
            hi = mid;
        else
            lo = mid + 1;
    }
    return d->lay_off[lo] + (b - d->lay_buf[lo]);
}

/* Room for m entries of reordering scratch (outside the timed regions). */
static deftsim_status grow_tmp(ok_state *d, uint64_t m)
{
    if (m <= d->tmp_cap) return DEFTSIM_OK;
    uint64_t cap = d->tmp_cap;
    deftsim_status st = grow(&d->tmp_idx, &cap, m, sizeof *d->tmp_idx);
    if (st) return st;
    float *nv = realloc(d->tmp_val, (size_t)cap * sizeof *nv);
    if (!nv) return deftsim_error_nomem("oktopk: values");
    d->tmp_val = nv;
    d->tmp_cap = cap;
    return DEFTSIM_OK;
}

/* A worker's picks (ascending model indices, with their values) into buffer order: the layers'
 * runs from the last layer to the first, each run keeping its order. */
static deftsim_status to_buffer_order(ok_state *d, deftsim_kidx *idx, float *val, uint64_t m)
{
    if (!d->rev || m == 0) return DEFTSIM_OK;
    deftsim_status st = grow_tmp(d, m);
    if (st) return st;
    uint64_t out = 0, end = m;
    for (size_t l = d->nlay; l-- > 0 && end > 0;) {
        uint64_t start = lower_bound(idx, end, d->lay_off[l]);
        memcpy(d->tmp_idx + out, idx + start, (size_t)(end - start) * sizeof *idx);
        memcpy(d->tmp_val + out, val + start, (size_t)(end - start) * sizeof *val);
        out += end - start;
        end = start;
    }
    memcpy(idx, d->tmp_idx, (size_t)m * sizeof *idx);
    memcpy(val, d->tmp_val, (size_t)m * sizeof *val);
    return DEFTSIM_OK;
}

/* Model indices sorted by their buffer positions. */
static void sort_by_buffer(const ok_state *d, deftsim_kidx *idx, uint64_t m)
{
    if (d->rev)
        for (uint64_t e = 0; e < m; e++) idx[e] = (deftsim_kidx)to_buf(d, idx[e]);
    sp_sort_idx(idx, (size_t)m);
    if (d->rev)
        for (uint64_t e = 0; e < m; e++) idx[e] = (deftsim_kidx)from_buf(d, idx[e]);
}

/* The first of a worker's m picks (in buffer order) at buffer position >= v. */
static uint64_t lower_bound_buf(const ok_state *d, const deftsim_kidx *a, uint64_t m, uint64_t v)
{
    if (!d->rev) return lower_bound(a, m, v);
    uint64_t lo = 0, hi = m;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (to_buf(d, a[mid]) < v)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static deftsim_status ok_init(deftsim_sparsifier *s)
{
    deftsim_status st;
    ok_state *d = sp_priv(s, sizeof *d);
    if (!d) return DEFTSIM_E_NOMEM;
    d->c = sp_opt_int(&s->p, OPT_VARIANT) == VARIANT_BERT ? &bert : &vgg;
    d->warmup = (uint64_t)sp_opt_int(&s->p, OPT_WARMUP);
    uint64_t P = s->P, n = s->n;
    if ((st = sp_plan_common(s, 0, n)) ||
        (st = sp_alloc_n(s, &d->lthr, P, sizeof *d->lthr, "thresholds")) ||
        (st = sp_alloc_n(s, &d->off, P + 1, sizeof *d->off, "regions")) ||
        (st = sp_alloc_n(s, &d->prop, P * P, sizeof *d->prop, "boundaries")) ||
        (st = sp_alloc_n(s, &d->pos, P * (P + 1), sizeof *d->pos, "region offsets")) ||
        (st = sp_alloc_n(s, &d->red, n, sizeof *d->red, "reduced sums")) ||
        (st = sp_alloc_n(s, &d->gcount, P, sizeof *d->gcount, "global counts")) ||
        (st = sp_alloc_n(s, &d->rload, P, sizeof *d->rload, "region loads")) ||
        (st = sp_alloc_n(s, &d->mark, (n + 63) / 64, sizeof *d->mark, "bitmap")) ||
        (st = sp_scratch_topk(s, (size_t)n, (size_t)s->k)))
        return st;
    if (sp_spread(s) && (st = sp_alloc_n(s, &d->lused, P, sizeof *d->lused, "thresholds")))
        return st;
    if ((st = ok_layout(s, d))) return st;
    /* The picks and the union grow with the data; plan about 2k per worker and P k. */
    s->mem_bytes += P * 2 * s->k * (sizeof(deftsim_kidx) + sizeof(float)) +
                    P * s->k * (2 * sizeof(deftsim_kidx) + sizeof(float));
    d->ph_threshold = sp_phase(s, "threshold", 1);
    d->ph_select = sp_phase(s, "select", 1);
    d->ph_reduce = sp_phase(s, "reduce", 0);
    d->ph_global = sp_phase(s, "global", 1);
    d->ph_residual = sp_phase(s, "residual", 0);
    return DEFTSIM_OK;
}

/* The dense warm-up: one allreduce of the whole accumulator, no residual. */
static deftsim_status ok_dense(deftsim_sparsifier *s, const deftsim_acc_provider *a)
{
    deftsim_status st;
    float *acc;
    if (s->P > 1) {
        deftsim_step *c = sp_collective(s, DEFTSIM_STEP_ALLREDUCE, "dense");
        if (!c) return DEFTSIM_E_NOMEM;
        for (uint32_t w = 0; w < s->P; w++) c->bytes[w] = s->n * s->sv;
    }
    for (uint64_t i = 0; i < s->n; i++) s->agg_idx[i] = (deftsim_kidx)i;
    /* The sum in worker order: in spread mode a chain over the ranks' blocks. */
    const uint64_t bytes = s->n * sizeof *s->agg_val;
    if ((st = sp_chain_in(s, s->agg_val, bytes))) return st;
    for (uint32_t w = s->lo; w < s->hi; w++) {
        if ((st = sp_get(a, w, &acc))) return st;
        sp_agg_add(s, acc, s->n, w);
        sp_zero_acc(s, acc);
        s->res.local_count[w] = 0;
        if ((st = sp_release(a, w))) return st;
    }
    if ((st = sp_chain_out(s, s->agg_val, bytes)) || (st = sp_chain_bcast(s, s->agg_val, bytes)))
        return st;
    s->res.common_count = s->n;
    sp_agg_finish(s, s->n);
    return DEFTSIM_OK;
}

/* |x| > thr in float, as PyTorch compares a float32 tensor with a Python float: |x| >= the
 * next float above (float)thr. */
static float strict_above(double thr) { return nextafterf((float)thr, INFINITY); }

/* What one step's parts share: the recomputations due, the wire widths, the counts so far
 * and the COMPUTE steps already registered. */
typedef struct {
    int lrec, grec, recut;
    uint64_t ib, vb;            /* wire widths of an index and a value */
    uint64_t total;             /* every worker's picks together */
    uint64_t U;                 /* the global candidates (the union) */
    uint64_t nsel;              /* the global selection */
    size_t c_thr, c_sel, c_glob;
    double *lused;              /* spread mode: P, each worker's threshold of this step */
} ok_step_ctx;

/* Worker w's local threshold: on recompute steps the exact k-th largest |acc|; otherwise
 * (VGG) raised by 3% while it selects too many, at most 5 times. */
static deftsim_status ok_local_threshold(deftsim_sparsifier *s, ok_state *d, const float *acc,
                                         uint32_t w, const ok_step_ctx *x, double *thr)
{
    const ok_consts *c = d->c;
    deftsim_step_result *r = &s->res;
    deftsim_status st = DEFTSIM_OK;
    const uint64_t n = s->n, k = s->k;
    if (x->lrec) {
        /* The exact k-th largest |acc|. */
        if ((st = grow(&d->tk, &d->tk_cap, k, sizeof *d->tk)) ||
            (st = sp_scratch_topk(s, (size_t)n, (size_t)k)))
            return st;
        double t0 = sp_now(s);
        st = deftsim_k_topk(s->kc, acc, (size_t)n, (size_t)k, d->tk, s->scratch, s->scratch_bytes);
        float m = INFINITY;
        for (uint64_t j = 0; !st && j < k; j++) {
            float v = fabsf(acc[d->tk[j]]);
            if (v < m) m = v;
        }
        sp_charge(s, x->c_thr, d->ph_threshold, w, sp_now(s) - t0);
        if (st) return st;
        *thr = m;
        r->cost[w] += sp_topk_cost(n, k);
    } else if (c->raise_loop) {
        uint64_t limit = c->raise_num * k / c->raise_den;
        double t0 = sp_now(s);
        for (int i = 0; i < 5; i++) {
            size_t cnt = 0;
            if ((st = deftsim_k_count_ge(s->kc, acc, (size_t)n, strict_above(*thr), &cnt))) break;
            r->cost[w] += (double)n;
            if (cnt > limit)
                *thr *= 1.03;
            else
                break;
        }
        sp_charge(s, x->c_thr, d->ph_threshold, w, sp_now(s) - t0);
        if (st) return st;
    }
    return DEFTSIM_OK;
}

/* Spread mode, after this rank's workers have selected (their picks back to back from
 * d->picks[0], `mine` of them): every worker's count, threshold of this step and of the next
 * and, on re-cut steps, its proposed boundaries from its owner; then this rank's picks moved
 * to their one-process place (after every earlier worker's) and every other worker's picks
 * and values copied in, so that every rank holds one process's picks. x->total becomes every
 * worker's picks together. */
static deftsim_status ok_share_local(deftsim_sparsifier *s, ok_state *d, ok_step_ctx *x,
                                     uint64_t mine)
{
    deftsim_step_result *r = &s->res;
    deftsim_status st;
    const uint32_t P = s->P;
    /* Per worker: count, this step's threshold, the next step's, then P boundaries. */
    const size_t each = 3 + (x->recut ? (size_t)P : 0);
    uint64_t *buf = malloc((size_t)P * each * sizeof *buf);
    if (!buf) return deftsim_error_nomem("oktopk");
    for (uint32_t w = s->lo; w < s->hi; w++) {
        uint64_t *b = buf + (size_t)w * each;
        b[0] = r->local_count[w];
        memcpy(&b[1], &x->lused[w], sizeof b[1]);
        memcpy(&b[2], &d->lthr[w], sizeof b[2]);
        if (x->recut) memcpy(&b[3], d->prop + (size_t)w * P, P * sizeof *b);
    }
    if ((st = sp_share_fixed(s, buf, each * sizeof *buf))) {
        free(buf);
        return st;
    }
    uint64_t total = 0, base = 0;
    for (uint32_t w = 0; w < P; w++) {
        const uint64_t *b = buf + (size_t)w * each;
        if (w == s->lo) base = total;
        if (!sp_mine(s, w)) {
            memcpy(&x->lused[w], &b[1], sizeof b[1]);
            memcpy(&d->lthr[w], &b[2], sizeof b[2]);
            if (x->recut) memcpy(d->prop + (size_t)w * P, &b[3], P * sizeof *b);
        }
        total += b[0];
    }
    free(buf);
    /* This rank's picks to their place, then every other worker's from its owner. */
    if ((st = grow_picks(d, total))) return st;
    s->sel = d->picks;
    if (mine && base) {
        memmove(d->picks + base, d->picks, (size_t)mine * sizeof *d->picks);
        memmove(d->pvals + base, d->pvals, (size_t)mine * sizeof *d->pvals);
    }
    for (uint32_t w = s->lo; w < s->hi; w++) s->sel_start[w] += base;
    if ((st = sp_share_sel(s, d->pvals, 0))) return st;
    x->total = total;
    return DEFTSIM_OK;
}

/* 1. Every worker's local threshold and selection |acc| > L (sorted, with its values), the
 * band adjust of L for the next step and, on re-cut steps, its proposed region boundaries. */
static deftsim_status ok_local(deftsim_sparsifier *s, ok_state *d, const deftsim_acc_provider *a,
                               ok_step_ctx *x)
{
    const ok_consts *c = d->c;
    deftsim_step_result *r = &s->res;
    deftsim_status st;
    const uint32_t P = s->P;
    const uint64_t n = s->n, k = s->k;
    float *acc;
    uint64_t total = 0;
    double lsum = 0;
    for (uint32_t w = s->lo; w < s->hi; w++) {
        if ((st = sp_get(a, w, &acc))) return st;
        double thr = d->lthr[w];
        if ((st = ok_local_threshold(s, d, acc, w, x, &thr))) return st;
        d->lthr[w] = thr;
        lsum += thr;
        /* The selection |acc| > L, sorted, and its values. */
        size_t cnt = 0;
        if ((st = deftsim_k_count_ge(s->kc, acc, (size_t)n, strict_above(thr), &cnt))) return st;
        if ((st = grow_picks(d, total + cnt))) return st;
        deftsim_kidx *idx = d->picks + total;
        size_t got = 0;
        double t0 = sp_now(s);
        st = deftsim_k_filter_ge(s->kc, acc, (size_t)n, strict_above(thr), idx, cnt, &got);
        if (!st) sp_sort_idx(idx, got);
        if (!st) st = deftsim_k_gather(s->kc, acc, (size_t)n, idx, got, d->pvals + total);
        sp_charge(s, x->c_sel, d->ph_select, w, sp_now(s) - t0);
        if (st || (st = to_buffer_order(d, idx, d->pvals + total, got))) return st;
        r->cost[w] += (double)n;
        s->sel_start[w] = total;
        r->local_count[w] = got;
        s->sel_sorted[w] = (unsigned char)!d->rev;
        /* The local band adjust, for the next step. */
        double gk = (double)k;
        if ((double)got < c->lo_num * gk / c->lo_den)
            d->lthr[w] /= c->local_div;
        else if ((double)got > 5.0 * gk / 4.0)
            d->lthr[w] *= c->local_mul;
        /* Its proposed region boundaries: the positions of its picks' P-quantiles. */
        if (x->recut) {
            uint64_t q = got / P;
            for (uint32_t j = 1; j < P; j++)
                d->prop[(size_t)w * P + j] = got ? to_buf(d, idx[q * j]) : (uint64_t)(n * j / P);
        }
        total += got;
        if (sp_spread(s)) x->lused[w] = thr;
    }
    s->sel = d->picks;
    if (sp_spread(s)) {
        if ((st = ok_share_local(s, d, x, total))) return st;
        lsum = 0;
        for (uint32_t w = 0; w < P; w++) lsum += x->lused[w];
        total = x->total;
    }
    r->oktopk_threshold_local = lsum / P;
    x->total = total;
    return DEFTSIM_OK;
}

/* 2. The regions (on re-cut steps the mean of the proposals, floored), every worker's picks
 * per region and the region balance. */
static deftsim_status ok_regions(deftsim_sparsifier *s, ok_state *d, const ok_step_ctx *x)
{
    deftsim_step_result *r = &s->res;
    const uint32_t P = s->P;
    const uint64_t n = s->n, total = x->total;
    if (x->recut) {
        if (P > 1) {
            deftsim_step *b = sp_collective(s, DEFTSIM_STEP_ALLREDUCE, "boundaries");
            if (!b) return DEFTSIM_E_NOMEM;
            for (uint32_t w = 0; w < P; w++) b->bytes[w] = 4ull * (P - 1);
        }
        d->off[0] = 0;
        for (uint32_t j = 1; j < P; j++) {
            uint64_t sum = 0;
            for (uint32_t w = 0; w < P; w++) sum += d->prop[(size_t)w * P + j];
            d->off[j] = sum / P;
        }
        d->off[P] = n;
    }
    /* Every worker's picks per region (sorted picks: a binary search per boundary). */
    memset(d->rload, 0, P * sizeof *d->rload);
    for (uint32_t w = 0; w < P; w++) {
        const deftsim_kidx *idx = d->picks + s->sel_start[w];
        uint64_t m = r->local_count[w], *pw = d->pos + (size_t)w * (P + 1);
        pw[0] = 0;
        for (uint32_t j = 1; j < P; j++) pw[j] = lower_bound_buf(d, idx, m, d->off[j]);
        pw[P] = m;
        for (uint32_t j = 0; j < P; j++) d->rload[j] += pw[j + 1] - pw[j];
    }
    {
        uint64_t mx = 0;
        for (uint32_t j = 0; j < P; j++)
            if (d->rload[j] > mx) mx = d->rload[j];
        r->oktopk_region_balance = total ? (double)mx * P / (double)total : 0;
    }
    return DEFTSIM_OK;
}

/* 3. Split and reduce: the counts by alltoall, then rounds of at most 4 peers; each owner
 * adds what it receives into its region. */
static deftsim_status ok_reduce(deftsim_sparsifier *s, ok_state *d, const ok_step_ctx *x)
{
    deftsim_step_result *r = &s->res;
    deftsim_status st;
    const uint32_t P = s->P;
    const uint64_t n = s->n, ib = x->ib, vb = x->vb;
    if (P > 1) {
        deftsim_step *ac = sp_collective(s, DEFTSIM_STEP_ALLTOALL, "counts");
        if (!ac) return DEFTSIM_E_NOMEM;
        for (uint32_t w = 0; w < P; w++) ac->bytes[w] = 4;
        for (uint32_t first_i = 0; first_i < P; first_i += OK_THROTTLE) {
            deftsim_step *rs = deftsim_schedule_add_p2p(&r->schedule, "reduce", 2 * OK_THROTTLE);
            if (!rs) return DEFTSIM_E_NOMEM;
            for (uint32_t w = 0; w < P; w++)
                for (uint32_t i = first_i; i < first_i + OK_THROTTLE && i < P; i++) {
                    if (i == 0) continue; /* its own region: a local copy */
                    uint32_t dst = (w + i) % P;
                    const uint64_t *pw = d->pos + (size_t)w * (P + 1);
                    uint64_t cnt = pw[dst + 1] - pw[dst];
                    size_t at = (size_t)w * 2 * OK_THROTTLE + 2 * (i - first_i);
                    rs->peer[at] = rs->peer[at + 1] = dst;
                    rs->bytes[at] = cnt * ib;
                    rs->bytes[at + 1] = cnt * vb;
                }
        }
    }
    /* Each owner j adds the received entries into its region, sources j, j-1, ..., j+1. */
    size_t c_red = sp_compute(s, d->ph_reduce);
    if (c_red == SIZE_MAX) return DEFTSIM_E_NOMEM;
    for (uint32_t j = 0; j < P; j++) {
        double t0 = sp_now(s);
        st = DEFTSIM_OK;
        for (uint32_t q = 0; q < P && !st; q++) {
            uint32_t src = (j + P - q) % P;
            const uint64_t *pw = d->pos + (size_t)src * (P + 1);
            uint64_t b0 = s->sel_start[src] + pw[j], m = pw[j + 1] - pw[j];
            if (m) st = deftsim_k_scatter_add(s->kc, d->red, (size_t)n, d->picks + b0, d->pvals + b0, (size_t)m);
        }
        sp_charge(s, c_red, d->ph_reduce, j, sp_now(s) - t0);
        if (st) return st;
    }
    return DEFTSIM_OK;
}

/* 4. The global candidates: each owner's reduced sums at the indices picked in its region,
 * above the global threshold (all nonzero ones on recompute steps), in rank order. */
static deftsim_status ok_candidates(deftsim_sparsifier *s, ok_state *d, ok_step_ctx *x)
{
    deftsim_step_result *r = &s->res;
    deftsim_status st;
    const uint32_t P = s->P;
    const uint64_t total = x->total;
    const int grec = x->grec;
    x->c_glob = sp_compute(s, d->ph_global);
    if (x->c_glob == SIZE_MAX) return DEFTSIM_E_NOMEM;
    uint64_t U = 0;
    if ((st = grow(&d->uni.idx, &d->uni.cap, total, sizeof *d->uni.idx))) return st;
    {
        float *nv = realloc(d->uni.val, (size_t)d->uni.cap * sizeof *nv);
        if (!nv) return deftsim_error_nomem("oktopk: values");
        d->uni.val = nv;
    }
    float gcut = grec ? 0 : strict_above(d->gthr);
    r->oktopk_threshold_global = grec ? NAN : d->gthr;
    for (uint32_t j = 0; j < P; j++) {
        /* Owner j's candidates: the indices picked in its region (the only nonzero sums). */
        double t0 = sp_now(s);
        uint64_t before = U;
        for (uint32_t w = 0; w < P; w++) {
            const uint64_t *pw = d->pos + (size_t)w * (P + 1);
            const deftsim_kidx *idx = d->picks + s->sel_start[w];
            for (uint64_t e = pw[j]; e < pw[j + 1]; e++) {
                deftsim_kidx i = idx[e];
                if (BIT_GET(d->mark, i)) continue;
                BIT_SET(d->mark, i);
                float v = d->red[i];
                if (grec ? v != 0 : fabsf(v) >= gcut) {
                    d->uni.idx[U] = i;
                    d->uni.val[U++] = v;
                }
            }
        }
        sort_by_buffer(d, d->uni.idx + before, U - before);
        for (uint64_t e = before; e < U; e++) d->uni.val[e] = d->red[d->uni.idx[e]];
        d->gcount[j] = U - before;
        sp_charge(s, x->c_glob, d->ph_global, j, sp_now(s) - t0);
        r->cost[j] += (double)d->off[j + 1] - (double)d->off[j];
    }
    /* Clear the candidate marks (every pick of every worker was marked once). */
    for (uint64_t e = 0; e < total; e++) BIT_CLR(d->mark, d->picks[e]);
    x->U = U;
    return DEFTSIM_OK;
}

/* BERT's allgather: the union in rank order cut into P near-equal blocks, block j moved to
 * worker j point to point (indices and values, not on recompute steps), then two
 * allgathervs. */
static deftsim_status ok_balanced_allgather(deftsim_sparsifier *s, ok_state *d,
                                            const ok_step_ctx *x)
{
    deftsim_step_result *r = &s->res;
    const uint32_t P = s->P;
    const uint64_t U = x->U, ib = x->ib, vb = x->vb;
    const int grec = x->grec;
    uint64_t T = U, bq = T / P, brem = T % P;
    uint32_t fan = 1;
    uint64_t A = 0;
    for (uint32_t w = 0; w < P; w++) {
        uint32_t m = 0;
        for (uint32_t j = 0; j < P; j++) {
            uint64_t B0 = j * bq + (j < brem ? j : brem), B1 = B0 + bq + (j < brem);
            if (j != w && A < B1 && B0 < A + d->gcount[w]) m++;
        }
        if (m > fan) fan = m;
        A += d->gcount[w];
    }
    if (!grec) {
        deftsim_step *bs = deftsim_schedule_add_p2p(&r->schedule, "balance", 2 * fan);
        if (!bs) return DEFTSIM_E_NOMEM;
        A = 0;
        for (uint32_t w = 0; w < P; w++) {
            uint32_t m = 0;
            for (uint32_t j = 0; j < P; j++) {
                uint64_t B0 = j * bq + (j < brem ? j : brem), B1 = B0 + bq + (j < brem);
                uint64_t lo = A > B0 ? A : B0, hi = A + d->gcount[w] < B1 ? A + d->gcount[w] : B1;
                if (j == w || lo >= hi) continue;
                size_t at = (size_t)w * 2 * fan + 2 * m++;
                bs->peer[at] = bs->peer[at + 1] = j;
                bs->bytes[at] = (hi - lo) * ib;
                bs->bytes[at + 1] = (hi - lo) * vb;
            }
            A += d->gcount[w];
        }
    }
    deftsim_step *gv = sp_collective(s, DEFTSIM_STEP_ALLGATHER, "values");
    deftsim_step *gi = gv ? sp_collective(s, DEFTSIM_STEP_ALLGATHER, "indices") : NULL;
    if (!gi) return DEFTSIM_E_NOMEM;
    for (uint32_t w = 0; w < P; w++) {
        uint64_t sz = grec ? d->gcount[w] : bq + (w < brem);
        gv = &r->schedule.steps[r->schedule.nsteps - 2];
        gi = &r->schedule.steps[r->schedule.nsteps - 1];
        gv->bytes[w] = sz * vb;
        gi->bytes[w] = sz * ib;
    }
    return DEFTSIM_OK;
}

/* The allgather of the owners' picks (the union, in rank order). */
static deftsim_status ok_allgather(deftsim_sparsifier *s, ok_state *d, const ok_step_ctx *x)
{
    deftsim_status st;
    const uint32_t P = s->P;
    const uint64_t ib = x->ib, vb = x->vb;
    if (P > 1) {
        deftsim_step *cg = sp_collective(s, DEFTSIM_STEP_ALLGATHER, "counts");
        if (!cg) return DEFTSIM_E_NOMEM;
        for (uint32_t w = 0; w < P; w++) cg->bytes[w] = 4;
        if (!d->c->balanced) {
            deftsim_step *g = sp_collective(s, DEFTSIM_STEP_ALLGATHER, "selection");
            if (!g) return DEFTSIM_E_NOMEM;
            for (uint32_t w = 0; w < P; w++) g->bytes[w] = d->gcount[w] * (ib + vb);
        } else {
            if ((st = ok_balanced_allgather(s, d, x))) return st;
        }
    }
    return DEFTSIM_OK;
}

/* Every worker: on recompute steps the exact top-k of the union sets G and the selection;
 * otherwise the union is the selection and G follows its band. Run once, charged to every
 * worker. */
static deftsim_status ok_global(deftsim_sparsifier *s, ok_state *d, ok_step_ctx *x)
{
    const ok_consts *c = d->c;
    deftsim_step_result *r = &s->res;
    deftsim_status st;
    const uint32_t P = s->P;
    const uint64_t k = s->k, U = x->U;
    uint64_t nsel = U;
    if (x->grec) {
        uint64_t kk = U < k ? U : k;
        if (kk == 0) {
            nsel = 0;
        } else {
            if ((st = grow(&d->tk, &d->tk_cap, kk, sizeof *d->tk)) ||
                (st = sp_scratch_topk(s, (size_t)U, (size_t)kk)))
                return st;
            double t0 = sp_now(s);
            st = deftsim_k_topk(s->kc, d->uni.val, (size_t)U, (size_t)kk, d->tk, s->scratch,
                                s->scratch_bytes);
            float m = INFINITY;
            for (uint64_t j = 0; !st && j < kk; j++) {
                float v = fabsf(d->uni.val[d->tk[j]]);
                if (v < m) m = v;
            }
            double dt = sp_now(s) - t0;
            for (uint32_t w = 0; w < P; w++) {
                sp_charge(s, x->c_glob, d->ph_global, w, dt);
                r->cost[w] += sp_topk_cost(U, kk);
            }
            if (st) return st;
            d->gthr = m;
            /* The selection: the union's entries at the top-k positions, ascending. */
            for (uint64_t j = 0; j < kk; j++) d->tk[j] = d->uni.idx[d->tk[j]];
            sp_sort_idx(d->tk, (size_t)kk);
            if (kk) memcpy(d->uni.idx, d->tk, (size_t)kk * sizeof *d->tk);
            for (uint64_t j = 0; j < kk; j++) d->uni.val[j] = d->red[d->uni.idx[j]];
            nsel = kk;
        }
        r->oktopk_threshold_global = d->gthr;
    } else {
        double gk = (double)k;
        if ((double)U < c->glo_num * gk / c->glo_den)
            d->gthr /= c->global_div;
        else if ((double)U > c->ghi_num * gk / c->ghi_den)
            d->gthr *= c->global_mul;
        /* The union is in buffer order: the aggregate's indices ascend in the model's. */
        if (d->rev) {
            sp_sort_idx(d->uni.idx, (size_t)U);
            for (uint64_t j = 0; j < U; j++) d->uni.val[j] = d->red[d->uni.idx[j]];
        }
    }
    x->nsel = nsel;
    return DEFTSIM_OK;
}

/* 5. The residual: zero on the worker's picks that are in the global selection (each rank
 * its own workers'). */
static deftsim_status ok_residual(deftsim_sparsifier *s, ok_state *d, const deftsim_acc_provider *a,
                                  uint64_t nsel)
{
    deftsim_step_result *r = &s->res;
    deftsim_status st;
    const uint64_t n = s->n;
    float *acc;
    for (uint64_t j = 0; j < nsel; j++) BIT_SET(d->mark, d->uni.idx[j]);
    size_t c_res = sp_compute(s, d->ph_residual);
    if (c_res == SIZE_MAX) return DEFTSIM_E_NOMEM;
    sp_writes_only(a); /* the residual pass zeroes, it reads no entry */
    for (uint32_t w = s->lo; w < s->hi; w++) {
        if ((st = sp_get(a, w, &acc))) break;
        const deftsim_kidx *idx = d->picks + s->sel_start[w];
        uint64_t m = r->local_count[w], mi = 0;
        if ((st = grow(&d->inter, &d->inter_cap, m, sizeof *d->inter))) break;
        double t0 = sp_now(s);
        for (uint64_t e = 0; e < m; e++)
            if (BIT_GET(d->mark, idx[e])) d->inter[mi++] = idx[e];
        st = deftsim_k_zero_at(s->kc, acc, (size_t)n, d->inter, (size_t)mi);
        sp_charge(s, c_res, d->ph_residual, w, sp_now(s) - t0);
        if (st || (st = sp_release(a, w))) break;
    }
    sp_reads_at(a, NULL, 0);
    if (st) return st;
    for (uint64_t j = 0; j < nsel; j++) BIT_CLR(d->mark, d->uni.idx[j]);
    return DEFTSIM_OK;
}

static deftsim_status ok_step(deftsim_sparsifier *s, uint64_t t, const deftsim_acc_provider *a)
{
    ok_state *d = s->priv;
    const ok_consts *c = d->c;
    deftsim_step_result *r = &s->res;
    deftsim_status st;
    ok_step_ctx x;
    memset(&x, 0, sizeof x);
    x.lused = d->lused;

    r->oktopk_warmup = t < d->warmup;
    if (t < d->warmup) return ok_dense(s, a);

    int first = !d->started;
    x.lrec = first || t % c->local_period == 0;
    x.grec = first || t % c->global_period == 0;
    x.recut = first || t % OK_REGION_PERIOD == 0;
    r->oktopk_local_recompute = x.lrec;
    r->oktopk_global_recompute = x.grec;
    r->oktopk_recut = x.recut;
    /* Wire widths: the authors' code sends int32 indices and fp32 values; spec: the scenario's. */
    x.ib = s->p.wire == DEFTSIM_WIRE_REFERENCE ? 4 : s->si;
    x.vb = s->sv;

    x.c_thr = sp_compute(s, d->ph_threshold);
    x.c_sel = sp_compute(s, d->ph_select);
    if (x.c_thr == SIZE_MAX || x.c_sel == SIZE_MAX) return DEFTSIM_E_NOMEM;
    if ((st = ok_local(s, d, a, &x)) || (st = ok_regions(s, d, &x)) || (st = ok_reduce(s, d, &x)) ||
        (st = ok_candidates(s, d, &x)) || (st = ok_allgather(s, d, &x)) ||
        (st = ok_global(s, d, &x)) || (st = ok_residual(s, d, a, x.nsel)))
        return st;
    const uint64_t nsel = x.nsel, total = x.total;

    /* ---- 6. the aggregate: the owners' sums / P; the sums cleared for the next step ---- */
    if (nsel) { /* an empty union may have no buffers yet (memcpy's pointers must be valid) */
        memcpy(s->agg_idx, d->uni.idx, (size_t)nsel * sizeof *s->agg_idx);
        memcpy(s->agg_val, d->uni.val, (size_t)nsel * sizeof *s->agg_val);
    }
    for (uint64_t e = 0; e < total; e++) d->red[d->picks[e]] = 0;
    r->kj_total = total;
    d->started = 1;
    sp_agg_finish(s, nsel);
    return DEFTSIM_OK;
}

static const sp_method ok_impl = {ok_init, ok_step, ok_fini, NULL, 1};

/* `deftsim bench sim`: a sparse step between recomputations: every worker's k picks spread
 * evenly over the P regions, every owner keeps k / P of them (docs/SPARSIFIERS.md, Ok-Topk). */
static deftsim_status ok_closed_form(const deftsim_closed_form_in *in, uint32_t P,
                                     deftsim_schedule *s)
{
    uint64_t e = (in->k + P - 1) / P;
    deftsim_step *st;
    if (!sp_cf_add(s, DEFTSIM_STEP_ALLTOALL, "counts", 4)) return DEFTSIM_E_NOMEM;
    for (uint32_t first = 0; first < P; first += 4) {
        if (!(st = deftsim_schedule_add_p2p(s, "reduce", 8))) return DEFTSIM_E_NOMEM;
        for (uint32_t r = 0; r < P; r++)
            for (uint32_t i = first; i < first + 4 && i < P; i++) {
                if (i == 0) continue;
                size_t at = (size_t)r * 8 + 2 * (i - first);
                st->peer[at] = st->peer[at + 1] = (r + i) % P;
                st->bytes[at] = e * in->index_bytes;
                st->bytes[at + 1] = e * in->value_bytes;
            }
    }
    if (!sp_cf_add(s, DEFTSIM_STEP_ALLGATHER, "counts", 4) ||
        !sp_cf_add(s, DEFTSIM_STEP_ALLGATHER, "selection",
                   e * ((uint64_t)in->index_bytes + in->value_bytes)))
        return DEFTSIM_E_NOMEM;
    return DEFTSIM_OK;
}

static const char *const variant_names[] = {"vgg", "bert", NULL};
static const char *const order_names[] = {"auto", "reverse", "forward", NULL};

static const deftsim_method_option ok_options[] = {
    [OPT_VARIANT] = {.key = "oktopk_variant", .type = DEFTSIM_OPT_ENUM, .dflt = "vgg",
                     .names = variant_names,
                     .help = "Ok-Topk's constants: the authors' VGG script, or BERT's (periods "
                             "128, balanced allgather)"},
    [OPT_WARMUP] = {.key = "oktopk_warmup", .type = DEFTSIM_OPT_INT, .dflt = "512", .lo = 0,
                    .hi = 1000000000,
                    .help = "Ok-Topk: dense iterations before the first sparse one (the authors' "
                            "VGG: 512; 0 skips)"},
    [OPT_LAYER_ORDER] = {.key = "oktopk_layer_order", .type = DEFTSIM_OPT_ENUM, .dflt = "auto",
                         .names = order_names,
                         .help = "Ok-Topk's buffer, cut into regions; auto: the variant's (vgg "
                                 "reverse, bert forward)"},
};

static double col_local(const deftsim_step_result *r) { return r->oktopk_threshold_local; }
static double col_global(const deftsim_step_result *r) { return r->oktopk_threshold_global; }
static double col_balance(const deftsim_step_result *r) { return r->oktopk_region_balance; }

static const deftsim_method_column ok_columns[] = {
    {.name = "threshold_local", .unit = "gradient units", .title = "local threshold",
     .doc = "oktopk: the mean over the workers of the local threshold", .get = col_local,
     .summary = DEFTSIM_COL_MEDIAN},
    {.name = "threshold_global", .unit = "gradient units", .title = "global threshold",
     .doc = "oktopk: the global threshold", .get = col_global, .summary = DEFTSIM_COL_MEDIAN},
    {.name = "region_balance", .unit = "ratio", .title = "region balance",
     .doc = "oktopk: entries the busiest region owner receives over the mean",
     .get = col_balance, .summary = DEFTSIM_COL_MEDIAN},
};

#define OPBIT(o) (1u << DEFTSIM_KOP_##o)

const deftsim_method_desc deftsim_sp_oktopk_desc = {
    .name = "oktopk",
    .title = "Ok-Topk",
    .short_title = "Ok-Topk",
    .caps = DEFTSIM_METHOD_CAP_KEEPS_STATE,
    .impl = &ok_impl,
    .closed_form = ok_closed_form,
    .options = ok_options,
    .noptions = sizeof ok_options / sizeof ok_options[0],
    .columns = ok_columns,
    .ncolumns = sizeof ok_columns / sizeof ok_columns[0],
    .kernel_ops = OPBIT(COUNT_GE) | OPBIT(FILTER_GE) | OPBIT(TOPK) | OPBIT(SCATTER_ADD) |
                  OPBIT(GATHER) | OPBIT(ZERO_AT),
};
