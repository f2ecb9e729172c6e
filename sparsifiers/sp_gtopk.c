/* sp_gtopk.c - gTop-k (Shi et al.), tree-based global top-k, for any P.
 *
 * Every worker runs top-k on its accumulator. The sets then travel up a binomial tree of
 * point-to-point rounds: in round i the participants are the ranks that are multiples of 2^i,
 * the odd-positioned one sends its (index, value) set to its even partner and drops out, and
 * the receiver merges (values at equal indices summed, the top-k of the merged set kept).
 * Rank 0 broadcasts the final set F; the aggregate is F's values / P.
 *
 * P not a power of two: with P2 the largest power of two below P, ranks P2 .. P-1 first fold
 * into ranks 0 .. P-P2-1 (rank r sends to r - P2, which merges), then the P2 remaining ranks
 * run the rounds above. The broadcast reaches all P ranks.
 *
 * Residual: the accumulator minus the picks that made it into F (its own picks whose index is
 * in F are zeroed; every other entry stays). An entry dropped at an intermediate merge whose
 * index still reaches F through another subtree is lost: its picks were zeroed but its value
 * never reached the aggregate. Those dropped values are the step's lost mass. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sp_internal.h"

/* Open-addressing table of (index, float sum), cleared after each use through its list of
 * used slots: the bookkeeping of one merge touches O(k) cache-friendly memory instead of an
 * n-element dense array. */
typedef struct {
    deftsim_kidx key;             /* SP_EMPTY where free */
    float val;
} sum_slot;

typedef struct {
    sum_slot *slot;               /* key and sum side by side: one cache line per probe */
    uint64_t *kept;               /* one bit per slot */
    uint32_t *used;
    size_t nused, mask;
    unsigned shift;
} sum_table;

#define SP_EMPTY ((deftsim_kidx)UINT32_MAX) /* never an index: n <= UINT32_MAX */

static size_t tab_home(const sum_table *t, deftsim_kidx i)
{
    return (size_t)(((uint64_t)i * 0x9e3779b97f4a7c15ULL) >> t->shift);
}

/* The table of a large k spans megabytes and its probes land at random: each loop over a list
 * asks for the slot of the entry TAB_AHEAD places further on before it probes the current one,
 * so the misses overlap instead of following one another. */
#define TAB_AHEAD 16
#define TAB_PREFETCH(t, h) __builtin_prefetch(&(t)->slot[(h)])

static size_t tab_slot(const sum_table *t, deftsim_kidx i)
{
    size_t h = tab_home(t, i);
    while (t->slot[h].key != SP_EMPTY && t->slot[h].key != i) h = (h + 1) & t->mask;
    return h;
}

/* Sums v into i's entry (a new entry starts at v: the kernel's order, a's then b's). */
static void tab_add(sum_table *t, deftsim_kidx i, float v)
{
    size_t h = tab_slot(t, i);
    if (t->slot[h].key == SP_EMPTY) {
        t->slot[h] = (sum_slot){i, v};
        t->used[t->nused++] = (uint32_t)h;
    } else {
        t->slot[h].val += v;
    }
}

/* tab_add of every entry of a list, in list order. */
static void tab_add_list(sum_table *t, const deftsim_kidx *idx, const float *val, size_t m)
{
    for (size_t j = 0; j < m; j++) {
        if (j + TAB_AHEAD < m) TAB_PREFETCH(t, tab_home(t, idx[j + TAB_AHEAD]));
        tab_add(t, idx[j], val[j]);
    }
}

static void tab_clear(sum_table *t)
{
    for (size_t j = 0; j < t->nused; j++) {
        uint32_t h = t->used[j];
        t->slot[h].key = SP_EMPTY;
        t->kept[h >> 6] = 0;
    }
    t->nused = 0;
}

typedef struct {
    float *pvals;                 /* P * k: every worker's values at its picks */
    deftsim_kidx *cur_idx;        /* P * k: a receiver's set after its merges (slot q) */
    float *cur_val;
    const deftsim_kidx **set_idx; /* P: the set each participant holds in the tree: its own */
    const float **set_val;        /*    picks (sel, pvals) until it first merges, then slot q */
    size_t *cur_n;                /* P */
    deftsim_kidx *tmp_idx;        /* k: a merge's output */
    float *tmp_val;
    deftsim_kidx *drop_idx;       /* entries dropped at merges (at most k per merge) */
    float *drop_val;
    uint64_t ndrop, drop_cap;
    sum_table tab;                /* a merge's sender set by index (drop tracking); F's
                                     values by index (the aggregate) */
    uint64_t *mark;               /* n bits: the final set (during the tree: a merge's kept
                                     set while its drops are recorded) */
    deftsim_kidx *inter;          /* k: one worker's picks that are in F */
    uint32_t *recv, *send;        /* one round's pairs: at most P / 2 + 1 */
    uint64_t entry_bytes;
    size_t ph_select, ph_gather, ph_merge, ph_residual;
} gtopk_state;

#define BIT_GET(m, i) (((m)[(i) >> 6] >> ((i) & 63)) & 1u)
#define BIT_SET(m, i) ((m)[(i) >> 6] |= (uint64_t)1 << ((i) & 63))
#define BIT_CLR(m, i) ((m)[(i) >> 6] &= ~((uint64_t)1 << ((i) & 63)))

static deftsim_status gtopk_init(deftsim_sparsifier *s)
{
    deftsim_status st;
    gtopk_state *d = sp_priv(s, sizeof *d);
    if (!d) return DEFTSIM_E_NOMEM;
    uint64_t P = s->P, k = s->k, pk = P * k;
    d->drop_cap = (P - 1) * k;
    /* The reference packs index and value as a pair of float64: 16 bytes an entry. */
    d->entry_bytes = s->p.wire == DEFTSIM_WIRE_REFERENCE ? 16 : (uint64_t)s->si + s->sv;
    if ((st = sp_plan_common(s, pk, k)) ||
        (st = sp_alloc_n(s, &d->pvals, pk, sizeof *d->pvals, "values")) ||
        (st = sp_alloc_n(s, &d->cur_idx, pk, sizeof *d->cur_idx, "tree sets")) ||
        (st = sp_alloc_n(s, &d->cur_val, pk, sizeof *d->cur_val, "tree sets")) ||
        (st = sp_alloc_n(s, &d->cur_n, P, sizeof *d->cur_n, "tree sets")) ||
        (st = sp_alloc_n(s, &d->set_idx, P, sizeof *d->set_idx, "tree sets")) ||
        (st = sp_alloc_n(s, &d->set_val, P, sizeof *d->set_val, "tree sets")) ||
        (st = sp_alloc_n(s, &d->tmp_idx, k, sizeof *d->tmp_idx, "merge output")) ||
        (st = sp_alloc_n(s, &d->tmp_val, k, sizeof *d->tmp_val, "merge output")) ||
        (st = sp_alloc_n(s, &d->drop_idx, d->drop_cap, sizeof *d->drop_idx, "dropped entries")) ||
        (st = sp_alloc_n(s, &d->drop_val, d->drop_cap, sizeof *d->drop_val, "dropped entries")) ||
        (st = sp_alloc_n(s, &d->mark, (s->n + 63) / 64, sizeof *d->mark, "bitmap")) ||
        (st = sp_alloc_n(s, &d->inter, k, sizeof *d->inter, "residual indices")) ||
        (st = sp_alloc_n(s, &d->recv, P / 2 + 1, sizeof *d->recv, "pairs")) ||
        (st = sp_alloc_n(s, &d->send, P / 2 + 1, sizeof *d->send, "pairs")) ||
        (st = sp_scratch_topk(s, (size_t)s->n, (size_t)k)) ||
        (st = sp_scratch_merge(s, (size_t)k, (size_t)k)) || (st = sp_scratch_union(s)))
        return st;
    /* The table holds at most k entries (a merge's sender set, or F), at a load of at most
     * one half. */
    size_t cap = 4;
    unsigned bits = 2;
    while (cap < 2 * k) {
        cap <<= 1;
        bits++;
    }
    d->tab.mask = cap - 1;
    d->tab.shift = 64 - bits;
    if ((st = sp_alloc_n(s, &d->tab.slot, cap, sizeof *d->tab.slot, "sum table")) ||
        (st = sp_alloc_n(s, &d->tab.kept, (cap + 63) / 64, sizeof *d->tab.kept, "sum table")) ||
        (st = sp_alloc_n(s, &d->tab.used, k, sizeof *d->tab.used, "sum table")))
        return st;
    if (!s->dry)
        for (size_t h = 0; h < cap; h++) d->tab.slot[h].key = SP_EMPTY;
    d->ph_select = sp_phase(s, "select", 1);
    d->ph_gather = sp_phase(s, "gather", 0);
    d->ph_merge = sp_phase(s, "merge", 1);
    d->ph_residual = sp_phase(s, "residual", 0);
    return DEFTSIM_OK;
}

/* The entries a merge of (ia, va) and (ib, vb) dropped, appended to the drop list in the order
 * a's entries, then b's entries that a does not hold, each list in its own order. A dropped
 * entry carries the merged sum as the kernel adds it (a's value, plus b's where b holds the
 * index), exactly what the receiver held for it. The merge kept the on entries of d->tmp_idx,
 * marked meanwhile in d->mark (clear during the tree: it holds the final set only after). The
 * table holds b's entries; the bit of a slot in tb->kept says a matched it. */
static deftsim_status record_drops(deftsim_sparsifier *s, gtopk_state *d, const deftsim_kidx *ia,
                                   const float *va, size_t na, const deftsim_kidx *ib,
                                   const float *vb, size_t nb, size_t on)
{
    sum_table *tb = &d->tab;
    deftsim_status st = DEFTSIM_OK;
    tab_add_list(tb, ib, vb, nb);
    for (size_t j = 0; j < on; j++) BIT_SET(d->mark, d->tmp_idx[j]);
    for (size_t j = 0; j < na && !st; j++) {
        if (j + TAB_AHEAD < na) TAB_PREFETCH(tb, tab_home(tb, ia[j + TAB_AHEAD]));
        size_t h = tab_slot(tb, ia[j]);
        float v = va[j];
        if (tb->slot[h].key != SP_EMPTY) {
            v = v + tb->slot[h].val;
            BIT_SET(tb->kept, h);
        }
        if (BIT_GET(d->mark, ia[j])) continue;
        if (d->ndrop == d->drop_cap) {
            st = deftsim_error_set(DEFTSIM_E_INTERNAL, "gtopk: more drops than planned");
            break;
        }
        d->drop_idx[d->ndrop] = ia[j];
        d->drop_val[d->ndrop++] = v;
    }
    /* b's entries in its order (the table's), those a did not hold and the merge did not keep;
     * the same pass empties the table */
    for (size_t j = 0; j < tb->nused; j++) {
        if (j + TAB_AHEAD < tb->nused) TAB_PREFETCH(tb, tb->used[j + TAB_AHEAD]);
        uint32_t h = tb->used[j];
        if (!st && !BIT_GET(tb->kept, h) && !BIT_GET(d->mark, tb->slot[h].key)) {
            if (d->ndrop == d->drop_cap)
                st = deftsim_error_set(DEFTSIM_E_INTERNAL, "gtopk: more drops than planned");
            else {
                d->drop_idx[d->ndrop] = tb->slot[h].key;
                d->drop_val[d->ndrop++] = tb->slot[h].val;
            }
        }
        tb->slot[h].key = SP_EMPTY;
        BIT_CLR(tb->kept, h); /* only its own bit: the word may hold a later entry's */
    }
    tb->nused = 0;
    for (size_t j = 0; j < on; j++) BIT_CLR(d->mark, d->tmp_idx[j]);
    /* b read into the table, a looked up in it, the kept marked and cleared */
    deftsim_kctx_touch(s->kc, nb * (sizeof *ib + sizeof *vb + sizeof tb->slot[0]) +
                                  na * (sizeof *ia + sizeof *va + sizeof tb->slot[0]) +
                                  2 * on * sizeof *d->tmp_idx);
    return st;
}

/* Receiver q merges sender r's set into its own (timed, charged to q), then records the
 * entries the merge dropped (untimed; not when skip_quality: only the lost mass reads them). */
static deftsim_status merge_into(deftsim_sparsifier *s, gtopk_state *d, uint32_t q, uint32_t r,
                                 size_t c_merge)
{
    deftsim_status st;
    const size_t k = (size_t)s->k;
    const deftsim_kidx *ia = d->set_idx[q], *ib = d->set_idx[r];
    const float *va = d->set_val[q], *vb = d->set_val[r];
    size_t na = d->cur_n[q], nb = d->cur_n[r], on = 0;
    if ((st = sp_scratch_merge(s, na, nb))) return st;
    SP_TIMED(s, c_merge, d->ph_merge, q,
             deftsim_k_merge_topk(s->kc, ia, va, na, ib, vb, nb, k, d->tmp_idx, d->tmp_val, &on,
                                  s->scratch, s->scratch_bytes));
    s->res.cost[q] += sp_topk_cost(na + nb, k);
    if (!s->p.skip_quality && (st = record_drops(s, d, ia, va, na, ib, vb, nb, on))) return st;
    deftsim_kidx *oi = d->cur_idx + (size_t)q * k;
    float *ov = d->cur_val + (size_t)q * k;
    memcpy(oi, d->tmp_idx, on * sizeof *oi);
    memcpy(ov, d->tmp_val, on * sizeof *ov);
    d->set_idx[q] = oi;
    d->set_val[q] = ov;
    d->cur_n[q] = on;
    deftsim_kctx_touch(s->kc, 2 * on * (sizeof *ia + sizeof *va)); /* the kept ones copied back */
    return DEFTSIM_OK;
}

/* One round: every (receiver, sender) pair of it as a SENDRECV step, then the merges. */
static deftsim_status round_(deftsim_sparsifier *s, gtopk_state *d, const char *name,
                             const uint32_t *recv, const uint32_t *send, size_t npairs)
{
    deftsim_status st;
    deftsim_step *c = sp_collective(s, DEFTSIM_STEP_SENDRECV, name);
    if (!c) return DEFTSIM_E_NOMEM;
    for (size_t i = 0; i < npairs; i++) {
        c->peer[send[i]] = recv[i];
        c->bytes[send[i]] = d->cur_n[send[i]] * d->entry_bytes;
    }
    size_t c_merge = sp_compute(s, d->ph_merge);
    if (c_merge == SIZE_MAX) return DEFTSIM_E_NOMEM;
    for (size_t i = 0; i < npairs; i++)
        if ((st = merge_into(s, d, recv[i], send[i], c_merge))) return st;
    return DEFTSIM_OK;
}

static deftsim_status gtopk_step(deftsim_sparsifier *s, uint64_t t, const deftsim_acc_provider *a)
{
    (void)t;
    gtopk_state *d = s->priv;
    deftsim_step_result *r = &s->res;
    deftsim_status st;
    const uint32_t P = s->P;
    const size_t n = (size_t)s->n, k = (size_t)s->k;
    float *acc;

    size_t c_select = sp_compute(s, d->ph_select), c_gather = sp_compute(s, d->ph_gather);
    if (c_select == SIZE_MAX || c_gather == SIZE_MAX) return DEFTSIM_E_NOMEM;
    for (uint32_t w = s->lo; w < s->hi; w++) {
        if ((st = sp_get(a, w, &acc))) return st;
        deftsim_kidx *idx = s->sel + (size_t)w * k;
        SP_TIMED(s, c_select, d->ph_select, w,
                 deftsim_k_topk(s->kc, acc, n, k, idx, s->scratch, s->scratch_bytes));
        SP_TIMED(s, c_gather, d->ph_gather, w,
                 deftsim_k_gather(s->kc, acc, n, idx, k, d->pvals + (size_t)w * k));
        s->sel_start[w] = (uint64_t)w * k;
        r->local_count[w] = s->k;
        r->cost[w] = sp_topk_cost(s->n, s->k);
    }
    /* Spread mode: every worker's (index, value) set from its rank; the tree then runs on
     * every rank alike. */
    if ((st = sp_share_sel(s, d->pvals, 0))) return st;
    for (uint32_t w = 0; w < P; w++) {
        d->cur_n[w] = k;
        d->set_idx[w] = s->sel + (size_t)w * k;
        d->set_val[w] = d->pvals + (size_t)w * k;
    }
    d->ndrop = 0;

    /* The tree: P2 is the largest power of two <= P; the P - P2 extra ranks fold first. */
    uint32_t P2 = 1;
    while (P2 <= P / 2) P2 <<= 1;
    uint32_t *recv = d->recv, *send = d->send;
    size_t np = 0;
    if (P2 < P) {
        for (uint32_t q = P2; q < P; q++, np++) {
            recv[np] = q - P2;
            send[np] = q;
        }
        if ((st = round_(s, d, "fold", recv, send, np))) return st;
    }
    for (uint32_t step = 1; step < P2; step <<= 1) {
        np = 0;
        for (uint32_t q = 0; q + step < P2; q += 2 * step, np++) {
            recv[np] = q;
            send[np] = q + step;
        }
        if ((st = round_(s, d, "tree", recv, send, np))) return st;
    }

    const deftsim_kidx *F = d->set_idx[0];
    const float *FV = d->set_val[0];
    const size_t nF = d->cur_n[0];
    if (P > 1) {
        deftsim_step *b = sp_collective(s, DEFTSIM_STEP_BCAST, "final");
        if (!b) return DEFTSIM_E_NOMEM;
        b->root = 0;
        b->bytes[0] = nF * d->entry_bytes;
    }
    size_t c_res = sp_compute(s, d->ph_residual);
    if (c_res == SIZE_MAX) return DEFTSIM_E_NOMEM;

    for (size_t j = 0; j < nF; j++) BIT_SET(d->mark, F[j]);
    for (uint64_t e = 0; !s->p.skip_quality && e < d->ndrop; e++)
        if (BIT_GET(d->mark, d->drop_idx[e])) {
            r->lost_mass += d->drop_val[e];
            r->lost_abs_mass += fabs((double)d->drop_val[e]);
            r->lost_entries++;
        }

    sp_writes_only(a); /* the residual pass zeroes, it reads no entry */
    for (uint32_t w = s->lo; w < s->hi; w++) {
        if ((st = sp_get(a, w, &acc))) break;
        const deftsim_kidx *idx = s->sel + (size_t)w * k;
        double t0 = sp_now(s);
        size_t m = 0;
        for (size_t j = 0; j < k; j++)
            if (BIT_GET(d->mark, idx[j])) d->inter[m++] = idx[j];
        st = deftsim_k_zero_at(s->kc, acc, n, d->inter, m);
        sp_charge(s, c_res, d->ph_residual, w, sp_now(s) - t0);
        if (st || (st = sp_release(a, w))) break;
    }
    sp_reads_at(a, NULL, 0);
    if (st) return st;

    /* The aggregate: F sorted, its values carried over through the table. */
    const deftsim_kidx *lists[1] = {F};
    size_t lens[1] = {nF};
    uint64_t nnz;
    tab_add_list(&d->tab, F, FV, nF);
    st = sp_union(s, lists, lens, 1, &nnz);
    for (uint64_t j = 0; !st && j < nnz; j++)
        s->agg_val[j] = d->tab.slot[tab_slot(&d->tab, s->agg_idx[j])].val;
    tab_clear(&d->tab);
    for (size_t j = 0; j < nF; j++) BIT_CLR(d->mark, F[j]);
    if (st) return st;
    sp_agg_finish(s, nnz);
    return DEFTSIM_OK;
}

static const sp_method gtopk_impl = {gtopk_init, gtopk_step, NULL, NULL, 1};

/* `deftsim bench sim`: k pairs up the tree (the fold of the ranks beyond the largest power of
 * two first) and down in a broadcast. */
static deftsim_status gtopk_closed_form(const deftsim_closed_form_in *in, uint32_t P,
                                        deftsim_schedule *s)
{
    uint64_t e = in->k * ((uint64_t)in->index_bytes + in->value_bytes);
    deftsim_step *st;
    uint32_t P2 = 1;
    while (P2 <= P / 2) P2 <<= 1;
    if (P2 < P) {
        if (!(st = sp_cf_add(s, DEFTSIM_STEP_SENDRECV, "fold", 0))) return DEFTSIM_E_NOMEM;
        for (uint32_t q = P2; q < P; q++) {
            st->peer[q] = q - P2;
            st->bytes[q] = e;
        }
    }
    for (uint32_t step = 1; step < P2; step <<= 1) {
        if (!(st = sp_cf_add(s, DEFTSIM_STEP_SENDRECV, "tree", 0))) return DEFTSIM_E_NOMEM;
        for (uint32_t q = 0; q + step < P2; q += 2 * step) {
            st->peer[q + step] = q;
            st->bytes[q + step] = e;
        }
    }
    return sp_cf_add(s, DEFTSIM_STEP_BCAST, "final", e) ? DEFTSIM_OK : DEFTSIM_E_NOMEM;
}

#define OPBIT(o) (1u << DEFTSIM_KOP_##o)
#define RESIDUAL (OPBIT(GATHER) | OPBIT(ZERO_AT))

const deftsim_method_desc deftsim_sp_gtopk_desc = {
    .name = "gtopk",
    .title = "gTop-k",
    .short_title = "gTop-k",
    .caps = DEFTSIM_METHOD_CAP_DEFAULT,
    .impl = &gtopk_impl,
    .closed_form = gtopk_closed_form,
    .kernel_ops = OPBIT(TOPK) | OPBIT(MERGE_TOPK) | OPBIT(UNION) | RESIDUAL,
};
