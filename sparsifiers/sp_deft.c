/* sp_deft.c - DEFT (Yoon & Oh, ICPP 2023) as docs/SPARSIFIERS.md ("deft") defines it.
 *
 * Every worker computes its fragments' norms and its own k_j (step 2 there); the leader
 * t mod P packs the fragments by its own k_j and broadcasts the packing (step 3); worker r
 * selects in bin (t + r) mod P with its own k_j, one segmented top-k call (step 4); the index
 * lists plus the common fragments form U, disjoint by construction (step 5); every worker
 * zeroes U (step 6). Planning (fragments, k allocation, packing) is deft_plan.c's. */
#include <stdlib.h>
#include <string.h>

#include "deftsim_deft.h"
#include "sp_internal.h"

/* DEFT's options (its registry entry's table, by position). */
enum { OPT_NORMS, OPT_NORM_PRECISION };
enum { NORMS_FUSED, NORMS_SEPARATE };
enum { NORM_FLOAT64, NORM_FLOAT32 };

typedef struct {
    deftsim_fragment *frags;
    size_t nfrag;
    deftsim_kseg *all;          /* every fragment (the norm pass) */
    deftsim_kseg *bin;          /* one worker's bin with its own k_j */
    double *norms;
    uint64_t *kj_lead, *kj_own;
    size_t *order;
    deftsim_deft_packing pack;  /* the leader's, of the current step */
    deftsim_kidx *common;       /* the common fragments' indices */
    uint64_t common_cap;
    uint64_t sel_cap;           /* all workers' picks together */
    float *vals;                /* one worker's values at U */
    const deftsim_kidx **lists; /* P selections + the common list, for the union */
    size_t *lens;
    size_t ph_norms, ph_alloc, ph_pack, ph_select, ph_gather, ph_residual;
} deft_state;

static void deft_fini(deftsim_sparsifier *s)
{
    deft_state *d = s->priv;
    if (!d) return;
    free(d->frags);
    deftsim_deft_packing_free(&d->pack);
}

static uint64_t min_u64(uint64_t a, uint64_t b) { return a < b ? a : b; }

static deftsim_status deft_init(deftsim_sparsifier *s)
{
    deftsim_status st;
    deft_state *d = sp_priv(s, sizeof *d);
    if (!d) return DEFTSIM_E_NOMEM;
    if ((st = deftsim_deft_fragments(s->p.model, s->P, &d->frags, &d->nfrag))) return st;
    size_t L = d->nfrag;
    s->mem_bytes += L * sizeof *d->frags;
    /* Every k_j is at most max(remain_k, 1) <= k, so one worker's own total is at most
     * k + L' (the max(1, .) rule adds at most one per fragment). The common fragments are
     * fragments whose k_j equals their size, so they hold at most k + L' elements; the
     * selections live in disjoint fragments, so together at most n. */
    uint64_t jk = s->k + L;
    d->common_cap = min_u64(s->n, jk);
    uint64_t sel_cap = d->sel_cap = min_u64(s->n, (uint64_t)s->P * jk);
    uint64_t agg_cap = min_u64(s->n, sel_cap + d->common_cap);
    if ((st = sp_alloc_n(s, &d->all, L, sizeof *d->all, "fragments")) ||
        (st = sp_alloc_n(s, &d->bin, L, sizeof *d->bin, "bin")) ||
        (st = sp_alloc_n(s, &d->norms, L, sizeof *d->norms, "norms")) ||
        (st = sp_alloc_n(s, &d->kj_lead, L, sizeof *d->kj_lead, "k_j")) ||
        (st = sp_alloc_n(s, &d->kj_own, L, sizeof *d->kj_own, "k_j")) ||
        (st = sp_alloc_n(s, &d->order, L, sizeof *d->order, "norm order")) ||
        (st = sp_alloc_n(s, &d->common, d->common_cap, sizeof *d->common, "common indices")) ||
        (st = sp_alloc_n(s, &d->vals, agg_cap, sizeof *d->vals, "values at U")) ||
        (st = sp_alloc_n(s, &d->lists, (uint64_t)s->P + 1, sizeof *d->lists, "lists")) ||
        (st = sp_alloc_n(s, &d->lens, (uint64_t)s->P + 1, sizeof *d->lens, "lists")) ||
        (st = sp_plan_common(s, sel_cap, agg_cap)))
        return st;

    /* Scratch: the norm pass over every fragment, and a segmented top-k as large as any bin
     * can be (every fragment, each k_j at its largest possible value). */
    deftsim_kseg *q = malloc((L ? L : 1) * sizeof *q);
    if (!q) return deftsim_error_nomem("deft");
    for (size_t j = 0; j < L; j++)
        q[j] = (deftsim_kseg){(size_t)d->frags[j].offset, (size_t)d->frags[j].size,
                              (size_t)min_u64(d->frags[j].size, jk)};
    if (!s->dry) memcpy(d->all, q, L * sizeof *q);
    st = sp_scratch_norms(s, q, L);
    if (!st) st = sp_scratch_segtopk(s, q, L);
    if (!st) st = sp_scratch_union(s);
    free(q);
    if (st) return st;
    if (!s->dry) {
        for (size_t j = 0; j < L; j++) d->all[j].k = 0;
        /* deft_norms = fused: the provider may hand over the norms it computes while it forms
         * the accumulators; separate: the norms phase computes them. */
        if (sp_opt_int(&s->p, OPT_NORMS) == NORMS_FUSED) {
            s->norm_segs = d->all;
            s->norm_nseg = L;
        }
    }

    d->ph_norms = sp_phase(s, "norms", 1);
    d->ph_alloc = sp_phase(s, "allocate", 1);
    d->ph_pack = sp_phase(s, "pack", 1);
    d->ph_select = sp_phase(s, "select", 1);
    d->ph_gather = sp_phase(s, "gather", 0);
    d->ph_residual = sp_phase(s, "residual", 0);
    return DEFTSIM_OK;
}

/* Step 2 on one worker's accumulator: norms, then k_j. The norms come from the provider when
 * it formed the accumulator with the fused accumulate op (deft_norms = fused: their cost is
 * the accumulate pass's, outside the step, and the norms phase stays 0), else from one
 * seg_norms pass timed in the norms phase. Both give the same bits. With
 * deft_norm_precision = float32 those norms only carry the cost: the values k_j is computed
 * from are the authors' float32 ones (deftsim_deft_norm_float32, an emulation whose own time
 * is charged to no phase), and tau takes the authors' expression order. */
static deftsim_status norms_and_k(deftsim_sparsifier *s, deft_state *d, const float *acc,
                                  const double *given, uint32_t w, size_t c_norms, size_t c_alloc,
                                  uint64_t *kj, uint64_t *total)
{
    deftsim_status st;
    const double *norms = given;
    if (!norms) {
        SP_TIMED(s, c_norms, d->ph_norms, w,
                 deftsim_k_seg_norms(s->kc, acc, (size_t)s->n, d->all, d->nfrag, d->norms,
                                     s->scratch, s->scratch_bytes));
        norms = d->norms;
    }
    const int f32 = sp_opt_int(&s->p, OPT_NORM_PRECISION) == NORM_FLOAT32;
    if (f32) {
        for (size_t j = 0; j < d->nfrag; j++)
            d->norms[j] = (double)deftsim_deft_norm_float32(acc + d->frags[j].offset,
                                                            d->frags[j].size);
        norms = d->norms;
    }
    double t0 = sp_now(s);
    *total = f32 ? deftsim_deft_allocate_k_authors(d->frags, d->nfrag, norms, s->k, kj, d->order)
                 : deftsim_deft_allocate_k(d->frags, d->nfrag, norms, s->k, kj, d->order);
    sp_charge(s, c_alloc, d->ph_alloc, w, sp_now(s) - t0);
    return DEFTSIM_OK;
}

static deftsim_status deft_step(deftsim_sparsifier *s, uint64_t t, const deftsim_acc_provider *a)
{
    deft_state *d = s->priv;
    deftsim_step_result *r = &s->res;
    deftsim_status st;
    const uint32_t P = s->P;
    const size_t n = (size_t)s->n;
    const uint32_t lead = deftsim_deft_leader(t, P);
    float *acc;
    r->leader = lead;

    size_t c_norms = sp_compute(s, d->ph_norms), c_alloc = sp_compute(s, d->ph_alloc),
           c_pack = sp_compute(s, d->ph_pack);
    if (c_norms == SIZE_MAX || c_alloc == SIZE_MAX || c_pack == SIZE_MAX) return DEFTSIM_E_NOMEM;
    if (P > 1) {
        /* P bin sizes + L' fragment ids, int32, from the leader. */
        deftsim_step *b = sp_collective(s, DEFTSIM_STEP_BCAST, "packing");
        if (!b) return DEFTSIM_E_NOMEM;
        b->root = lead;
        b->bytes[lead] = 4 * ((uint64_t)P + d->nfrag);
    }
    size_t c_select = sp_compute(s, d->ph_select);
    if (c_select == SIZE_MAX) return DEFTSIM_E_NOMEM;

    /* The leader: its norms and k_j drive the packing (spread mode: on the leader's rank,
     * which broadcasts its k_j). */
    uint64_t lead_total = 0;
    if (sp_mine(s, lead)) {
        if ((st = sp_get(a, lead, &acc))) return st;
        if ((st = norms_and_k(s, d, acc, sp_norms(a, lead), lead, c_norms, c_alloc, d->kj_lead,
                              &lead_total)))
            return st;
    }
    if ((st = sp_bcast_from(s, lead, d->kj_lead, d->nfrag * sizeof *d->kj_lead)) ||
        (st = sp_bcast_from(s, lead, &lead_total, sizeof lead_total)))
        return st;
    r->kj_total = lead_total;
    deftsim_deft_packing_free(&d->pack);
    {
        double t0 = sp_now(s);
        st = deftsim_deft_pack(d->frags, d->nfrag, d->kj_lead, P, &d->pack);
        sp_charge(s, c_pack, d->ph_pack, lead, sp_now(s) - t0);
        if (st) return st;
    }

    /* Selection pass: every worker its bin, with its own k_j. */
    uint64_t off = 0, maxcount = 0;
    for (uint32_t w = s->lo; w < s->hi; w++) {
        if ((st = sp_get(a, w, &acc))) return st;
        const uint64_t *kj = d->kj_lead;
        if (w != lead) {
            uint64_t own_total;
            if ((st = norms_and_k(s, d, acc, sp_norms(a, w), w, c_norms, c_alloc, d->kj_own,
                                  &own_total)))
                return st;
            kj = d->kj_own;
        }
        uint32_t b = deftsim_deft_bin_of(t, w, P);
        size_t m = 0;
        uint64_t count = 0;
        double cost = 0;
        for (uint32_t i = d->pack.bin_start[b]; i < d->pack.bin_start[b + 1]; i++) {
            uint32_t j = d->pack.frag_ids[i];
            d->bin[m++] = (deftsim_kseg){(size_t)d->frags[j].offset, (size_t)d->frags[j].size,
                                         (size_t)kj[j]};
            count += kj[j];
            cost += deftsim_deft_cost(d->frags[j].size, kj[j]);
        }
        if (off + count > d->sel_cap)
            return deftsim_error_set(DEFTSIM_E_INTERNAL,
                                     "deft: selections exceed the planned %llu indices",
                                     (unsigned long long)d->sel_cap);
        if ((st = sp_scratch_segtopk(s, d->bin, m))) return st;
        SP_TIMED(s, c_select, d->ph_select, w,
                 deftsim_k_segtopk(s->kc, acc, n, d->bin, m, s->sel + off, s->scratch,
                                   s->scratch_bytes));
        s->sel_start[w] = off;
        r->local_count[w] = count;
        r->cost[w] = cost;
        d->lists[w] = s->sel + off;
        d->lens[w] = (size_t)count;
        off += count;
        if (count > maxcount) maxcount = count;
    }
    /* Spread mode: each rank laid out its own block's picks; every worker's, in worker order. */
    if (sp_spread(s)) {
        if ((st = sp_share_sel(s, NULL, 1))) return st;
        off = maxcount = 0;
        for (uint32_t w = 0; w < P; w++) {
            d->lists[w] = s->sel + s->sel_start[w];
            d->lens[w] = (size_t)r->local_count[w];
            off += r->local_count[w];
            if (r->local_count[w] > maxcount) maxcount = r->local_count[w];
        }
    }

    /* Common fragments: nobody selects in them, every worker sends all of them. */
    uint64_t nc = 0;
    for (size_t i = 0; i < d->pack.ncommon; i++) {
        const deftsim_fragment *f = &d->frags[d->pack.common_ids[i]];
        if (nc + f->size > d->common_cap)
            return deftsim_error_set(DEFTSIM_E_INTERNAL,
                                     "deft: common fragments exceed the planned %llu elements",
                                     (unsigned long long)d->common_cap);
        for (uint64_t e = 0; e < f->size; e++) d->common[nc++] = (deftsim_kidx)(f->offset + e);
    }
    r->common_count = nc;
    d->lists[P] = d->common;
    d->lens[P] = (size_t)nc;

    /* The workers concatenate the lists (no dedup is needed: the fragments are disjoint); the
     * simulator builds the same set sorted, for the aggregate, and checks the disjointness. */
    uint64_t nnz;
    if ((st = sp_union(s, d->lists, d->lens, (size_t)P + 1, &nnz))) return st;
    if (nnz != off + nc)
        return deftsim_error_set(DEFTSIM_E_INTERNAL,
                                 "deft: |U| = %llu but the lists hold %llu indices (overlap)",
                                 (unsigned long long)nnz, (unsigned long long)(off + nc));

    if (P > 1) {
        deftsim_step *c = sp_collective(s, DEFTSIM_STEP_ALLGATHER, "counts");
        if (!c) return DEFTSIM_E_NOMEM;
        for (uint32_t w = 0; w < P; w++) c->bytes[w] = s->count_bytes;
        /* Padded to the largest count, as the reference's all_gather of equal tensors. */
        c = sp_collective(s, DEFTSIM_STEP_ALLGATHER, "indices");
        if (!c) return DEFTSIM_E_NOMEM;
        for (uint32_t w = 0; w < P; w++) c->bytes[w] = maxcount * s->si;
    }
    /* Gather/residual pass: values at U go into the (emulated) allreduce, U is zeroed. */
    if ((st = sp_gather_residual(s, a, nnz, d->vals, d->ph_gather, d->ph_residual))) return st;
    return DEFTSIM_OK;
}

static const sp_method deft_impl = {deft_init, deft_step, deft_fini, NULL, 1};

/* `deftsim bench sim` (t = 0: the leader is worker 0): the packing, the counts, ceil(k / P)
 * indices per worker (uniformly spread selections: a union of k) and the k values. */
static deftsim_status deft_closed_form(const deftsim_closed_form_in *in, uint32_t P,
                                       deftsim_schedule *s)
{
    const uint64_t k = in->k;
    deftsim_fragment *frags;
    size_t nfrag;
    deftsim_status rc = deftsim_deft_fragments(in->model, P, &frags, &nfrag);
    if (rc) return rc;
    free(frags);
    if (!sp_cf_add(s, DEFTSIM_STEP_BCAST, "packing", 4 * ((uint64_t)P + nfrag)) ||
        !sp_cf_add(s, DEFTSIM_STEP_ALLGATHER, "counts", 4) ||
        !sp_cf_add(s, DEFTSIM_STEP_ALLGATHER, "indices", (k + P - 1) / P * in->index_bytes) ||
        !sp_cf_add(s, DEFTSIM_STEP_ALLREDUCE, "values", k * in->value_bytes))
        return DEFTSIM_E_NOMEM;
    return DEFTSIM_OK;
}

/* The float32 norms are an emulation that reads the accumulators on the host: the "cpu" and
 * "cuda-staged" backends hold them there, the "cuda" one (device pointers) does not. */
static deftsim_status deft_check(const deftsim_sparsifier_params *p)
{
    if (sp_opt_int(p, OPT_NORM_PRECISION) == NORM_FLOAT32 && p->kctx &&
        strcmp(deftsim_kctx_backend(p->kctx), "cuda") == 0)
        return deftsim_error_set(DEFTSIM_E_UNSUPPORTED,
                                 "deft: [sparsify] deft_norm_precision = float32 computes the "
                                 "norms on the host, but kernel backend 'cuda' holds the "
                                 "accumulators on the device; use 'cuda-staged' ([device] kind = "
                                 "cuda) or 'cpu', or deft_norm_precision = float64");
    return DEFTSIM_OK;
}

static const char *const norms_names[] = {"fused", "separate", NULL};
static const char *const precision_names[] = {"float64", "float32", NULL};

static const deftsim_method_option deft_options[] = {
    [OPT_NORMS] = {.key = "deft_norms", .type = DEFTSIM_OPT_ENUM, .dflt = "fused",
                   .names = norms_names,
                   .help = "DEFT's fragment norms: fused into the accumulate pass, or a separate "
                           "pass in its selection"},
    [OPT_NORM_PRECISION] = {.key = "deft_norm_precision", .type = DEFTSIM_OPT_ENUM,
                            .dflt = "float64", .names = precision_names,
                            .help = "DEFT's k_j from float64 norms, or as the authors' code: "
                                    "float32 torch.norm and order"},
};

#define OPBIT(o) (1u << DEFTSIM_KOP_##o)

const deftsim_method_desc deftsim_sp_deft_desc = {
    .name = "deft",
    .title = "DEFT",
    .short_title = "DEFT",
    .caps = DEFTSIM_METHOD_CAP_DEFAULT,
    .impl = &deft_impl,
    .closed_form = deft_closed_form,
    .options = deft_options,
    .noptions = sizeof deft_options / sizeof deft_options[0],
    .kernel_ops = OPBIT(SEG_NORMS) | OPBIT(SEGTOPK) | OPBIT(UNION) | OPBIT(GATHER) |
                  OPBIT(ZERO_AT),
    .check = deft_check,
};
