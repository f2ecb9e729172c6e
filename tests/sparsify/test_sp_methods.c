/* test_sp_methods.c - each sparsifier against its definition: DEFT's fragments, allocation,
 * packing and rotation; Top-k's union; gTop-k against a brute-force merge tree and its lost
 * mass; CLT-k's flat traffic, charging and filter; DGC's geometry and selection. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "deftsim_deft.h"
#include "sp_test.h"

TestSuite(sp_methods, .init = sp_suite_init, .fini = sp_suite_fini);

static void add_gradients(sp_accs *a, int range, uint64_t seed, uint64_t t)
{
    for (uint32_t w = 0; w < a->P; w++) {
        sp_fill_int(a->grad[w], a->n, range, seed, t * 1000 + w);
        for (size_t i = 0; i < a->n; i++) a->acc[w][i] += a->grad[w][i];
    }
}

static deftsim_step_result *step_ok(deftsim_sparsifier *s, uint64_t t,
                                    const deftsim_acc_provider *prov)
{
    deftsim_step_result *r = NULL;
    cr_assert_eq(deftsim_sparsifier_step(s, t, prov, &r), DEFTSIM_OK, "%s",
                 deftsim_error_message());
    return r;
}

static int u32_cmp(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* ---- DEFT ------------------------------------------------------------------------------ */

Test(sp_methods, deft_fragment_counts_resnet18)
{
    deftsim_model *m = NULL;
    cr_assert_eq(deftsim_model_builtin("resnet18_cifar10", &m), DEFTSIM_OK, "%s",
                 deftsim_error_message());
    const struct {
        uint32_t P;
        size_t nfrag;
    } want[] = {{2, 62}, {4, 62}, {8, 83}, {16, 122}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        deftsim_fragment *f = NULL;
        size_t nf = 0;
        cr_assert_eq(deftsim_deft_fragments(m, want[i].P, &f, &nf), DEFTSIM_OK);
        cr_assert_eq(nf, want[i].nfrag, "P=%u: %zu fragments, want %zu", want[i].P, nf,
                     want[i].nfrag);
        /* Contiguous, covering, near-equal pieces. */
        uint64_t off = 0;
        for (size_t j = 0; j < nf; j++) {
            cr_assert_eq(f[j].offset, off);
            off += f[j].size;
        }
        cr_assert_eq(off, m->numel);
        free(f);
    }
    deftsim_model_free(m);
}

Test(sp_methods, deft_allocation_rules)
{
    /* Five fragments; norms visited in descending order with ties to the lower index. */
    deftsim_fragment f[5] = {{0, 10, 0}, {10, 100, 1}, {110, 3, 2}, {113, 1000, 3}, {1113, 50, 4}};
    double norms[5] = {1.0, 4.0, 4.0, 0.5, 0.0};
    uint64_t kj[5];
    size_t order[5];
    uint64_t total = deftsim_deft_allocate_k(f, 5, norms, 20, kj, order);
    size_t want_order[5] = {1, 2, 0, 3, 4};
    for (int i = 0; i < 5; i++) cr_assert_eq(order[i], want_order[i]);
    /* remain_k = 20, remain_norm = 9.5:
     *   frag 1: tau = floor(20 * 4 / 9.5) = 8          -> 8;   remain 12, 5.5
     *   frag 2: tau = floor(12 * 4 / 5.5) = 8 > size 3 -> 3;   remain 9, 1.5
     *   frag 0: tau = floor(9 * 1 / 1.5) = 6           -> 6;   remain 3, 0.5
     *   frag 3: tau = floor(3 * 0.5 / 0.5) = 3         -> 3;   remain 0, 0
     *   frag 4: remain_norm 0, tau = 0                 -> max(1, 0) = 1 (drift: 21) */
    uint64_t want[5] = {6, 8, 3, 3, 1};
    for (int i = 0; i < 5; i++) cr_assert_eq(kj[i], want[i], "fragment %d: %llu", i,
                                             (unsigned long long)kj[i]);
    cr_assert_eq(total, 21);
}

/* The reference order of the allocation: descending norm, ties to the lower index. */
typedef struct {
    double key;
    size_t id;
} ref_keyed;

static int ref_desc(const void *a, const void *b)
{
    const ref_keyed *x = a, *y = b;
    if (x->key > y->key) return -1;
    if (x->key < y->key) return 1;
    return (x->id > y->id) - (x->id < y->id);
}

Test(sp_methods, deft_allocation_order_matches_comparison_sort)
{
    /* The allocation sorts the norms by their bits; the order must be the comparison sort's
     * for many ties, values spanning exponents, zeros, negatives, keys that differ only in
     * their low bits, and (qsort's path) a NaN. */
    enum { N = 5000 };
    double *norms = malloc(N * sizeof *norms);
    deftsim_fragment *f = malloc(N * sizeof *f);
    uint64_t *kj = malloc(N * sizeof *kj);
    size_t *order = malloc(N * sizeof *order);
    ref_keyed *ref = malloc(N * sizeof *ref);
    cr_assert(norms && f && kj && order && ref);
    uint64_t x = 12345;
    for (int kase = 0; kase < 5; kase++) {
        for (size_t i = 0; i < N; i++) {
            x = x * 6364136223846793005ULL + 1442695040888963407ULL;
            uint32_t r = (uint32_t)(x >> 33);
            double v = (r % 7 == 0) ? 0.0 : ldexp((double)(r % 97), (int)(r % 61) - 30);
            if (kase == 1 && r % 5 == 0) v = -v;
            if (kase == 2 && i == 777) v = NAN;
            if (kase == 3) v = (double)(r % 3); /* three values: ties everywhere */
            /* keys equal in their upper 32 bits, apart in the lower ones (the sort's last
             * pass), some negative, some equal */
            if (kase == 4)
                v = (r % 4 == 0 ? -1.0 : 1.0) * ldexp(1.0 + (double)(r % 16) * 0x1p-45, (int)(r % 3));
            norms[i] = v;
            f[i] = (deftsim_fragment){i * 10, 10, (uint32_t)i};
            ref[i] = (ref_keyed){v, i};
        }
        qsort(ref, N, sizeof *ref, ref_desc);
        (void)deftsim_deft_allocate_k(f, N, norms, 1000, kj, order);
        for (size_t i = 0; i < N; i++)
            cr_assert_eq(order[i], ref[i].id, "case %d, position %zu: %zu, want %zu", kase, i,
                         order[i], ref[i].id);
    }
    free(norms);
    free(f);
    free(kj);
    free(order);
    free(ref);
}

Test(sp_methods, deft_packing_tie_rules)
{
    /* k_j = 8 gives cost 3 * size; fragment 3 has k_j = 4 (cost 16); fragment 5 has
     * k_j == size: common, never packed. Costs: 48, 48, 96, 16, 48, -. */
    deftsim_fragment f[6] = {{0, 16, 0}, {16, 16, 1}, {32, 32, 2}, {64, 8, 3}, {72, 16, 4},
                             {88, 8, 5}};
    uint64_t kj[6] = {8, 8, 8, 4, 8, 8};
    deftsim_deft_packing pk;
    cr_assert_eq(deftsim_deft_pack(f, 6, kj, 3, &pk), DEFTSIM_OK);
    /* LPT: 2 (96) -> bin 0; 0 (48, first of the tied 0/1/4) -> bin 1; 1 (48) -> bin 2;
     * 4 (48) -> bin 1 (bins 1 and 2 tie at 48: the first); 3 (24) -> bin 2. */
    uint32_t want_start[4] = {0, 1, 3, 5};
    uint32_t want_ids[5] = {2, 0, 4, 1, 3};
    for (int b = 0; b < 4; b++) cr_assert_eq(pk.bin_start[b], want_start[b], "bin_start[%d]", b);
    for (int i = 0; i < 5; i++) cr_assert_eq(pk.frag_ids[i], want_ids[i], "frag_ids[%d]", i);
    cr_assert_eq(pk.ncommon, 1);
    cr_assert_eq(pk.common_ids[0], 5);
    deftsim_deft_packing_free(&pk);
    /* Rotation and leader. */
    cr_assert_eq(deftsim_deft_bin_of(5, 2, 4), 3);
    cr_assert_eq(deftsim_deft_bin_of(6, 3, 4), 1);
    cr_assert_eq(deftsim_deft_leader(6, 4), 2);
}

/* Recomputes DEFT's plan for iteration t from the accumulators (norms through the same kernel,
 * allocation and packing through deft_plan.c) and checks every worker's selection against a
 * brute-force top-k_j in each fragment of its bin (t + r) mod P, with its own k_j. */
static void check_deft_step(const deftsim_model *m, deftsim_sparsifier *s,
                            const deftsim_step_result *r, float *const *acc, uint32_t P,
                            uint64_t t)
{
    deftsim_fragment *f = NULL;
    size_t nf = 0;
    cr_assert_eq(deftsim_deft_fragments(m, P, &f, &nf), DEFTSIM_OK);
    deftsim_kseg *segs = calloc(nf, sizeof *segs);
    double *norms = calloc(nf, sizeof *norms);
    uint64_t *kj = calloc(nf, sizeof *kj), *kj_lead = calloc(nf, sizeof *kj_lead);
    size_t *order = calloc(nf, sizeof *order);
    for (size_t j = 0; j < nf; j++) segs[j] = (deftsim_kseg){f[j].offset, f[j].size, 0};
    size_t sb = 0;
    cr_assert_eq(deftsim_k_seg_norms_scratch(sp_kc, segs, nf, &sb), DEFTSIM_OK);
    void *scr = malloc(sb ? sb : 1);

    uint32_t lead = (uint32_t)(t % P);
    cr_assert_eq(r->leader, lead);
    cr_assert_eq(deftsim_k_seg_norms(sp_kc, acc[lead], m->numel, segs, nf, norms, scr, sb),
                 DEFTSIM_OK);
    uint64_t total = deftsim_deft_allocate_k(f, nf, norms, r->k, kj_lead, order);
    cr_assert_eq(r->kj_total, total);
    deftsim_deft_packing pk;
    cr_assert_eq(deftsim_deft_pack(f, nf, kj_lead, P, &pk), DEFTSIM_OK);

    uint64_t sum_local = 0, common = 0;
    for (size_t i = 0; i < pk.ncommon; i++) common += f[pk.common_ids[i]].size;
    cr_assert_eq(r->common_count, common);
    unsigned char *owner = calloc(m->numel, 1);
    for (uint32_t w = 0; w < P; w++) {
        cr_assert_eq(deftsim_k_seg_norms(sp_kc, acc[w], m->numel, segs, nf, norms, scr, sb),
                     DEFTSIM_OK);
        deftsim_deft_allocate_k(f, nf, norms, r->k, kj, order);
        uint32_t b = (uint32_t)((t + w) % P);
        /* Expected picks: the top-k_j of each fragment of bin b. */
        uint64_t cnt = 0;
        for (uint32_t i = pk.bin_start[b]; i < pk.bin_start[b + 1]; i++) cnt += kj[pk.frag_ids[i]];
        uint32_t *want = calloc(cnt ? cnt : 1, sizeof *want);
        uint64_t pos = 0;
        for (uint32_t i = pk.bin_start[b]; i < pk.bin_start[b + 1]; i++) {
            const deftsim_fragment *fr = &f[pk.frag_ids[i]];
            sp_ref_topk(acc[w] + fr->offset, fr->size, kj[pk.frag_ids[i]], want + pos);
            for (uint64_t e = 0; e < kj[pk.frag_ids[i]]; e++) want[pos + e] += fr->offset;
            pos += kj[pk.frag_ids[i]];
        }
        qsort(want, cnt, sizeof *want, u32_cmp);
        const deftsim_kidx *sel;
        uint64_t c;
        cr_assert_eq(deftsim_sparsifier_selection(s, w, &sel, &c), DEFTSIM_OK);
        cr_assert_eq(c, cnt, "P=%u t=%llu worker %u: %llu picks, want %llu", P,
                     (unsigned long long)t, w, (unsigned long long)c, (unsigned long long)cnt);
        for (uint64_t e = 0; e < c; e++) {
            cr_assert_eq(sel[e], want[e], "P=%u worker %u pick %llu", P, w, (unsigned long long)e);
            cr_assert_eq(owner[sel[e]], 0, "P=%u: index %u selected twice", P, sel[e]);
            owner[sel[e]] = 1;
        }
        sum_local += c;
        free(want);
        /* The packing is the leader's work alone. */
        double pack = r->phase_seconds[(size_t)w * r->nphases + 2];
        if (w != lead) cr_assert_eq(pack, 0);
    }
    /* No build-up: the union is exactly the local counts plus the common fragments. */
    cr_assert_eq(r->nnz, sum_local + common, "P=%u: |U| %llu vs %llu + %llu", P,
                 (unsigned long long)r->nnz, (unsigned long long)sum_local,
                 (unsigned long long)common);
    free(owner);
    deftsim_deft_packing_free(&pk);
    free(scr);
    free(order);
    free(kj);
    free(kj_lead);
    free(norms);
    free(segs);
    free(f);
}

Test(sp_methods, deft_bins_rotation_no_overlap)
{
    uint64_t seed = sp_seed();
    deftsim_model *m = sp_model_mix();
    for (uint32_t P = 1; P <= 16; P++) {
        deftsim_sparsifier_params p = sp_params(DEFTSIM_METHOD_DEFT, 0.01, P, m);
        deftsim_sparsifier *s = sp_new(&p);
        sp_accs *a = sp_accs_new(P, m->numel);
        for (uint64_t t = 0; t < 3; t++) {
            add_gradients(a, 1000, seed, t + 10 * P);
            float **before = sp_accs_copy(a);
            deftsim_step_result *r = step_ok(s, t, &a->prov);
            check_deft_step(m, s, r, before, P, t);
            /* Residual: zero on all of U, on every worker, untouched elsewhere. */
            for (uint32_t w = 0; w < P; w++) {
                uint64_t j = 0;
                for (size_t i = 0; i < m->numel; i++) {
                    int in_u = j < r->nnz && r->agg_index[j] == i;
                    if (in_u) j++;
                    cr_assert_eq(a->acc[w][i], in_u ? 0.0f : before[w][i]);
                }
            }
            sp_copies_free(before, P);
        }
        sp_accs_free(a);
        deftsim_sparsifier_free(s);
    }
    deftsim_model_free(m);
}

Test(sp_methods, deft_resnet18_bounded_memory)
{
    uint64_t seed = sp_seed();
    deftsim_model *m = NULL;
    cr_assert_eq(deftsim_model_builtin("resnet18_cifar10", &m), DEFTSIM_OK);
    const uint32_t P = 4;
    deftsim_sparsifier_params p = sp_params(DEFTSIM_METHOD_DEFT, 0.001, P, m);
    deftsim_sparsifier *s = sp_new(&p);
    sp_npv *v = sp_npv_new(P, m->numel);
    for (uint32_t w = 0; w < P; w++) sp_fill_int(v->grad[w], m->numel, 1 << 20, seed, w);
    deftsim_step_result *r = step_ok(s, 0, &v->prov);
    cr_assert_eq(v->violations, 0);
    cr_assert_eq(v->nreleased, P);
    uint64_t sum = 0;
    for (uint32_t w = 0; w < P; w++) sum += r->local_count[w];
    cr_assert_eq(r->nnz, sum + r->common_count);
    cr_assert_eq(r->k, 11173);
    /* Within the drift the max(1, .) rule allows: one element per fragment. */
    cr_assert_leq(r->kj_total, r->k + 62);
    cr_assert_geq(r->nnz, r->k / 2);
    for (uint32_t w = 0; w < P; w++) {
        const deftsim_kidx *sel;
        uint64_t c;
        cr_assert_eq(deftsim_sparsifier_selection(s, w, &sel, &c), DEFTSIM_OK);
        for (uint64_t e = 0; e < c; e++) cr_assert_eq(v->res[w][sel[e]], 0);
    }
    sp_npv_free(v);
    deftsim_sparsifier_free(s);
    deftsim_model_free(m);
}

/* ---- Top-k ------------------------------------------------------------------------------ */

Test(sp_methods, topk_union_is_the_true_union)
{
    uint64_t seed = sp_seed();
    deftsim_model *m = sp_model_mix();
    size_t n = m->numel;
    for (uint32_t P = 1; P <= 8; P++) {
        deftsim_sparsifier_params p = sp_params(DEFTSIM_METHOD_TOPK, 0.01, P, m);
        deftsim_sparsifier *s = sp_new(&p);
        sp_accs *a = sp_accs_new(P, n);
        add_gradients(a, 1000, seed, P);
        float **before = sp_accs_copy(a);
        deftsim_step_result *r = step_ok(s, 0, &a->prov);
        uint64_t k = r->k;
        unsigned char *in = calloc(n, 1);
        uint32_t *ref = malloc(k * sizeof *ref);
        uint64_t u = 0;
        for (uint32_t w = 0; w < P; w++) {
            sp_ref_topk(before[w], n, k, ref);
            const deftsim_kidx *sel;
            uint64_t c;
            cr_assert_eq(deftsim_sparsifier_selection(s, w, &sel, &c), DEFTSIM_OK);
            cr_assert_eq(c, k);
            cr_assert(memcmp(sel, ref, k * sizeof *ref) == 0, "worker %u's top-k", w);
            for (uint64_t j = 0; j < k; j++) {
                if (!in[ref[j]]) u++;
                in[ref[j]] = 1;
            }
        }
        cr_assert_eq(r->nnz, u, "P=%u: |U| = %llu, true union %llu", P,
                     (unsigned long long)r->nnz, (unsigned long long)u);
        for (uint64_t j = 0; j < r->nnz; j++) cr_assert(in[r->agg_index[j]]);
        cr_assert_geq(r->nnz, k);
        cr_assert_leq(r->nnz, (uint64_t)P * k);
        if (P > 1) cr_assert_gt(r->nnz, k, "random data: some build-up expected");
        free(in);
        free(ref);
        sp_copies_free(before, P);
        sp_accs_free(a);
        deftsim_sparsifier_free(s);
    }
    deftsim_model_free(m);
}

Test(sp_methods, topk_ag_equals_topk_at_p1)
{
    uint64_t seed = sp_seed();
    deftsim_model *m = sp_model_mix();
    deftsim_sparsifier_params p1 = sp_params(DEFTSIM_METHOD_TOPK, 0.03, 1, m);
    deftsim_sparsifier_params p2 = sp_params(DEFTSIM_METHOD_TOPK_AG, 0.03, 1, m);
    deftsim_sparsifier *s1 = sp_new(&p1), *s2 = sp_new(&p2);
    sp_accs *a1 = sp_accs_new(1, m->numel), *a2 = sp_accs_new(1, m->numel);
    for (uint64_t t = 0; t < 3; t++) {
        add_gradients(a1, 1000, seed, t);
        add_gradients(a2, 1000, seed, t);
        deftsim_step_result *r1 = step_ok(s1, t, &a1->prov), *r2 = step_ok(s2, t, &a2->prov);
        cr_assert_eq(r1->nnz, r2->nnz);
        cr_assert(memcmp(r1->agg_index, r2->agg_index, r1->nnz * sizeof(deftsim_kidx)) == 0);
        cr_assert(memcmp(r1->agg_value, r2->agg_value, r1->nnz * sizeof(float)) == 0);
        cr_assert(memcmp(a1->acc[0], a2->acc[0], m->numel * sizeof(float)) == 0);
    }
    sp_accs_free(a1);
    sp_accs_free(a2);
    deftsim_sparsifier_free(s1);
    deftsim_sparsifier_free(s2);
    deftsim_model_free(m);
}

/* ---- gTop-k ----------------------------------------------------------------------------- */

typedef struct {
    uint32_t *idx;
    float *val;
    size_t n;
} set_t;

/* The reference merge: a's entries, then b's, summed per index in that order; ranked like the
 * kernels; the top k kept. Dropped entries are appended to drops. */
static void ref_merge(set_t *a, const set_t *b, size_t k, set_t *drops)
{
    size_t m = 0;
    uint32_t *ui = malloc((a->n + b->n) * sizeof *ui);
    float *uv = malloc((a->n + b->n) * sizeof *uv);
    for (int side = 0; side < 2; side++) {
        const set_t *x = side ? b : a;
        for (size_t j = 0; j < x->n; j++) {
            size_t q = 0;
            while (q < m && ui[q] != x->idx[j]) q++;
            if (q == m) {
                ui[m] = x->idx[j];
                uv[m++] = 0.0f;
            }
            uv[q] += x->val[j];
        }
    }
    sp_ref_rank(ui, uv, m);
    size_t keep = m < k ? m : k;
    for (size_t j = keep; j < m; j++) {
        drops->idx[drops->n] = ui[j];
        drops->val[drops->n++] = uv[j];
    }
    memcpy(a->idx, ui, keep * sizeof *ui);
    memcpy(a->val, uv, keep * sizeof *uv);
    a->n = keep;
    free(ui);
    free(uv);
}

Test(sp_methods, gtopk_matches_bruteforce_tree)
{
    uint64_t seed = sp_seed();
    static const char *const shapes[] = {"40x10", "37"};
    deftsim_model *m = sp_model(shapes, 2);
    size_t n = m->numel;
    for (uint32_t P = 2; P <= 9; P++) {
        deftsim_sparsifier_params p = sp_params(DEFTSIM_METHOD_GTOPK, 0.05, P, m);
        deftsim_sparsifier *s = sp_new(&p);
        sp_accs *a = sp_accs_new(P, n);
        /* A small range, so that picks collide and merges drop entries. */
        add_gradients(a, 20, seed, P);
        float **before = sp_accs_copy(a);
        deftsim_step_result *r = step_ok(s, 0, &a->prov);
        size_t k = r->k;
        set_t *sets = calloc(P, sizeof *sets);
        set_t drops = {malloc(P * k * sizeof(uint32_t)), malloc(P * k * sizeof(float)), 0};
        for (uint32_t w = 0; w < P; w++) {
            sets[w].idx = malloc(2 * k * sizeof(uint32_t));
            sets[w].val = malloc(2 * k * sizeof(float));
            sets[w].n = k;
            sp_ref_topk(before[w], n, k, sets[w].idx);
            for (size_t j = 0; j < k; j++) sets[w].val[j] = before[w][sets[w].idx[j]];
        }
        /* Fold, then the rounds. */
        uint32_t P2 = 1;
        while (P2 * 2 <= P) P2 *= 2;
        for (uint32_t q = P2; q < P; q++) ref_merge(&sets[q - P2], &sets[q], k, &drops);
        for (uint32_t step = 1; step < P2; step *= 2)
            for (uint32_t q = 0; q + step < P2; q += 2 * step)
                ref_merge(&sets[q], &sets[q + step], k, &drops);
        /* The final set against the aggregate. */
        set_t *F = &sets[0];
        cr_assert_eq(r->nnz, F->n, "P=%u", P);
        float *fv = calloc(n, sizeof *fv);
        unsigned char *inF = calloc(n, 1);
        for (size_t j = 0; j < F->n; j++) {
            fv[F->idx[j]] = F->val[j];
            inF[F->idx[j]] = 1;
        }
        for (uint64_t j = 0; j < r->nnz; j++) {
            uint32_t i = r->agg_index[j];
            cr_assert(inF[i], "P=%u: index %u is not in the reference's final set", P, i);
            cr_assert_float_eq(r->agg_value[j], fv[i] / (float)P, 1e-6);
        }
        /* Lost mass: the dropped values whose index is in F. */
        double lost = 0, lost_abs = 0;
        uint64_t lost_n = 0;
        for (size_t e = 0; e < drops.n; e++)
            if (inF[drops.idx[e]]) {
                lost += drops.val[e];
                lost_abs += fabs(drops.val[e]);
                lost_n++;
            }
        cr_assert_float_eq(r->lost_mass, lost, 1e-9, "P=%u: lost %g, reference %g", P,
                           r->lost_mass, lost);
        cr_assert_float_eq(r->lost_abs_mass, lost_abs, 1e-9);
        cr_assert_eq(r->lost_entries, lost_n);
        /* Residual: own picks in F zeroed, everything else kept. */
        for (uint32_t w = 0; w < P; w++) {
            uint32_t *pk = malloc(k * sizeof *pk);
            sp_ref_topk(before[w], n, k, pk);
            unsigned char *picked = calloc(n, 1);
            for (size_t j = 0; j < k; j++) picked[pk[j]] = 1;
            for (size_t i = 0; i < n; i++)
                cr_assert_eq(a->acc[w][i], picked[i] && inF[i] ? 0.0f : before[w][i]);
            free(picked);
            free(pk);
        }
        double tol;
        double disc = sp_check_conservation(r, before, a->acc, P, n, 0, &tol);
        cr_assert_float_eq(disc, r->lost_mass, tol);
        for (uint32_t w = 0; w < P; w++) {
            free(sets[w].idx);
            free(sets[w].val);
        }
        free(sets);
        free(drops.idx);
        free(drops.val);
        free(fv);
        free(inF);
        sp_copies_free(before, P);
        sp_accs_free(a);
        deftsim_sparsifier_free(s);
    }
    deftsim_model_free(m);
}

Test(sp_methods, gtopk_lost_mass_hand_made)
{
    /* n = 4, k = 1, P = 4:
     *   worker 0 picks 0 (10), worker 1 picks 1 (9), worker 2 picks 0 (6), worker 3 picks 2 (7)
     *   round 1: 0 <- 1 keeps {0: 10}, drops {1: 9}; 2 <- 3 keeps {2: 7}, drops {0: 6}
     *   round 2: 0 <- 2 keeps {0: 10}, drops {2: 7}
     * F = {0}. Worker 2's pick 0 was zeroed but its 6 never reached the aggregate: lost 6.
     * Indices 1 and 2 did not reach F, so workers 1 and 3 keep their values. */
    static const char *const shapes[] = {"4"};
    deftsim_model *m = sp_model(shapes, 1);
    deftsim_sparsifier_params p = sp_params(DEFTSIM_METHOD_GTOPK, 0.25, 4, m);
    deftsim_sparsifier *s = sp_new(&p);
    sp_accs *a = sp_accs_new(4, 4);
    const float init[4][4] = {{10, 0, 0, 0}, {0, 9, 0, 0}, {6, 0, 0, 0}, {0, 0, 7, 0}};
    for (int w = 0; w < 4; w++) memcpy(a->acc[w], init[w], sizeof init[w]);
    deftsim_step_result *r = step_ok(s, 0, &a->prov);
    cr_assert_eq(r->k, 1);
    cr_assert_eq(r->nnz, 1);
    cr_assert_eq(r->agg_index[0], 0);
    cr_assert_eq(r->agg_value[0], 2.5f);
    cr_assert_eq(r->lost_mass, 6.0);
    cr_assert_eq(r->lost_abs_mass, 6.0);
    cr_assert_eq(r->lost_entries, 1);
    const float want[4][4] = {{0, 0, 0, 0}, {0, 9, 0, 0}, {0, 0, 0, 0}, {0, 0, 7, 0}};
    for (int w = 0; w < 4; w++)
        for (int i = 0; i < 4; i++) cr_assert_eq(a->acc[w][i], want[w][i], "worker %d [%d]", w, i);
    /* 16 (residuals) + 4 * 2.5 (aggregate) + 6 (lost) = 32 (accumulators). */
    sp_accs_free(a);
    deftsim_sparsifier_free(s);
    deftsim_model_free(m);
}

/* ---- CLT-k ------------------------------------------------------------------------------ */

Test(sp_methods, cltk_traffic_does_not_grow_with_p)
{
    uint64_t seed = sp_seed();
    static const char *const shapes[] = {"64x64"};
    deftsim_model *m = sp_model(shapes, 1);
    uint64_t bcast = 0, ar = 0;
    for (uint32_t P = 2; P <= 64; P *= 2) {
        deftsim_sparsifier_params p = sp_params(DEFTSIM_METHOD_CLTK, 0.01, P, m);
        deftsim_sparsifier *s = sp_new(&p);
        sp_accs *a = sp_accs_new(P, m->numel);
        add_gradients(a, 1000, seed, P);
        deftsim_step_result *r = step_ok(s, 3, &a->prov);
        const deftsim_step *b = sp_find_step(r, DEFTSIM_STEP_BCAST, "indices", 0);
        const deftsim_step *v = sp_find_step(r, DEFTSIM_STEP_ALLREDUCE, "values", 0);
        cr_assert(b && v);
        if (P == 2) {
            bcast = b->bytes[b->root];
            ar = v->bytes[0];
        }
        cr_assert_eq(b->bytes[b->root], bcast, "P=%u: broadcast payload grew", P);
        cr_assert_eq(v->bytes[0], ar, "P=%u: allreduce payload grew", P);
        cr_assert_eq(r->nnz, r->k);
        /* Every worker receives at most k s_i + 2 k s_v, whatever P. */
        for (uint32_t w = 0; w < P; w++)
            cr_assert_leq(r->bytes_recv[w], r->k * 4 + 2 * r->k * 4);
        sp_accs_free(a);
        deftsim_sparsifier_free(s);
    }
    deftsim_model_free(m);
}

Test(sp_methods, cltk_leader_and_charge)
{
    uint64_t seed = sp_seed();
    deftsim_model *m = sp_model_mix();
    const uint32_t P = 5;
    for (int all = 0; all < 2; all++) {
        deftsim_sparsifier_params p = sp_params(DEFTSIM_METHOD_CLTK, 0.01, P, m);
        sp_opt(&p, "cltk_charge", all); /* leader, all */
        deftsim_sparsifier *s = sp_new(&p);
        sp_accs *a = sp_accs_new(P, m->numel);
        for (uint64_t t = 0; t < 7; t++) {
            add_gradients(a, 1000, seed, t);
            float **before = sp_accs_copy(a);
            deftsim_step_result *r = step_ok(s, t, &a->prov);
            uint32_t lead = (uint32_t)(t % P);
            cr_assert_eq(r->leader, lead);
            uint32_t *ref = malloc(r->k * sizeof *ref);
            sp_ref_topk(before[lead], m->numel, r->k, ref);
            cr_assert(memcmp(r->agg_index, ref, r->k * sizeof *ref) == 0, "leader's top-k");
            for (uint32_t w = 0; w < P; w++) {
                cr_assert_eq(r->local_count[w], w == lead ? r->k : 0);
                double sel = r->phase_seconds[(size_t)w * r->nphases + 0];
                if (all || w == lead) {
                    cr_assert_gt(r->cost[w], 0);
                    cr_assert_gt(sel, 0, "worker %u ran a top-k: its time counts", w);
                } else {
                    cr_assert_eq(r->cost[w], 0);
                    cr_assert_eq(sel, 0);
                }
                for (uint64_t j = 0; j < r->k; j++) cr_assert_eq(a->acc[w][ref[j]], 0);
            }
            free(ref);
            sp_copies_free(before, P);
        }
        sp_accs_free(a);
        deftsim_sparsifier_free(s);
    }
    deftsim_model_free(m);
}

Test(sp_methods, cltk_low_pass_filter)
{
    uint64_t seed = sp_seed();
    deftsim_model *m = sp_model_mix();
    const uint32_t P = 3;
    const double beta = 0.25;
    deftsim_sparsifier_params p = sp_params(DEFTSIM_METHOD_CLTK, 0.01, P, m);
    sp_opt(&p, "cltk_beta", beta);
    deftsim_sparsifier *s = sp_new(&p);
    sp_accs *a = sp_accs_new(P, m->numel);
    for (uint64_t t = 0; t < 3; t++) {
        /* acc = 4 (residual + g) with gradient 4 g: multiples of 4, so that the filter's
         * (1 - beta) and beta products are exact in float. */
        add_gradients(a, 1000, seed, t);
        for (uint32_t w = 0; w < P; w++)
            for (size_t i = 0; i < m->numel; i++) {
                a->acc[w][i] *= 4;
                a->grad[w][i] *= 4;
            }
        float **before = sp_accs_copy(a);
        deftsim_step_result *r = step_ok(s, t, &a->prov);
        unsigned char *inU = calloc(m->numel, 1);
        for (uint64_t j = 0; j < r->nnz; j++) inU[r->agg_index[j]] = 1;
        double lost = 0;
        for (uint32_t w = 0; w < P; w++)
            for (size_t i = 0; i < m->numel; i++) {
                double acc = before[w][i], g = a->grad[w][i], mold = acc - g;
                double C = inU[i] ? acc : 0;
                double want = (1 - beta) * mold + beta * (acc - C);
                cr_assert_float_eq(a->acc[w][i], want, 1e-3 * (1 + fabs(want)),
                                   "worker %u [%zu]: %g, want %g", w, i, a->acc[w][i], want);
                lost += (1 - beta) * (g - C);
            }
        cr_assert_float_eq(r->lost_mass, lost, 1e-6 * (1 + fabs(lost)));
        double tol;
        double disc = sp_check_conservation(r, before, a->acc, P, m->numel, 0, &tol);
        cr_assert_float_eq(disc, r->lost_mass, tol + 1e-6 * (1 + fabs(lost)));
        free(inU);
        sp_copies_free(before, P);
    }
    sp_accs_free(a);
    deftsim_sparsifier_free(s);
    deftsim_model_free(m);
}

/* ---- DGC -------------------------------------------------------------------------------- */

Test(sp_methods, dgc_geometry)
{
    deftsim_dgc_geometry g;
    deftsim_dgc_geometry_of(2359296, 0.001, &g);
    cr_assert_eq(g.stride, 97);
    cr_assert_eq(g.samples, 24322);
    cr_assert_eq(g.top_samples, 25);
    cr_assert_eq(g.target, 2360);
    cr_assert_eq(g.all, 0);
    /* numel <= ceil(2 / d): every element is a sample. */
    deftsim_dgc_geometry_of(2000, 0.001, &g);
    cr_assert_eq(g.all, 1);
    cr_assert_eq(g.samples, 2000);
    cr_assert_eq(g.stride, 1);
    cr_assert_eq(g.top_samples, 2);
    cr_assert_eq(g.target, 2);
    /* A 3x3 conv of 64 -> 64 channels at 1%: 1% of numel = 369 samples, stride
     * ceil(36864 / 369 / 32) * 32 + 1 = 129 -> 36864 / 129 = 285 < 369, lowered to 97
     * (380 samples). */
    deftsim_dgc_geometry_of(36864, 0.01, &g);
    cr_assert_eq(g.stride, 97);
    cr_assert_eq(g.samples, 380);
    cr_assert_eq(g.top_samples, 4);
    cr_assert_eq(g.target, 369);
}

/* The reference selection of one tensor for a given sampling start; *path receives what the
 * adaptation did: 1 exact top-target, 2 lowered the threshold (and no exact), 0 neither. */
static size_t dgc_ref(const float *x, const deftsim_dgc_geometry *g, size_t start, uint32_t *out,
                      int *path)
{
    size_t numel = g->numel, T = g->target, m = g->top_samples;
    float *sm = malloc(g->samples * sizeof *sm);
    for (size_t i = 0; i < g->samples; i++) sm[i] = fabsf(x[start + i * g->stride]);
    /* The m-th largest sample. */
    for (size_t i = 0; i < m; i++)
        for (size_t j = i + 1; j < g->samples; j++)
            if (sm[j] > sm[i]) {
                float tmp = sm[i];
                sm[i] = sm[j];
                sm[j] = tmp;
            }
    float thr = sm[m - 1];
    free(sm);
    size_t c = 0;
    *path = 0;
    for (size_t i = 0; i < numel; i++)
        if (fabsf(x[i]) >= thr) out[c++] = (uint32_t)i;
    for (int pass = 0; pass < 10; pass++) {
        if ((double)c > 1.3 * (double)T) {
            float *v = malloc(c * sizeof *v);
            for (size_t j = 0; j < c; j++) v[j] = x[out[j]];
            sp_ref_rank(out, v, c);
            free(v);
            qsort(out, T, sizeof *out, u32_cmp);
            *path = 1;
            return T;
        } else if ((double)c < 0.8 * (double)T) {
            thr = thr * 0.8f;
            *path = 2;
            c = 0;
            for (size_t i = 0; i < numel; i++)
                if (fabsf(x[i]) >= thr) out[c++] = (uint32_t)i;
        } else {
            break;
        }
    }
    return c < T ? c : T;
}

/* Every worker's picks in every sparse tensor equal the reference's for some sampling start;
 * paths[] counts the adaptation paths of the matches. */
static void check_dgc(const deftsim_model *m, deftsim_sparsifier *s, float *const *before,
                      uint32_t P, double density, const char *what, int *paths)
{
    uint32_t *ref = malloc(m->numel * sizeof *ref);
    for (uint32_t w = 0; w < P; w++) {
        const deftsim_kidx *sel;
        uint64_t c;
        cr_assert_eq(deftsim_sparsifier_selection(s, w, &sel, &c), DEFTSIM_OK);
        uint64_t pos = 0;
        for (size_t li = 0; li < m->nlayers; li++) {
            const deftsim_layer *L = &m->layers[li];
            if (L->ndim <= 1) continue;
            deftsim_dgc_geometry g;
            deftsim_dgc_geometry_of(L->numel, density, &g);
            /* The picks of this tensor (the selection is sorted). */
            uint64_t lo = pos;
            while (pos < c && sel[pos] < L->offset + L->numel) pos++;
            uint64_t cnt = pos - lo;
            cr_assert_leq(cnt, g.target);
            int found = 0, path = 0;
            for (size_t st = 0; st < (g.all ? 1 : g.stride) && !found; st++) {
                size_t rc = dgc_ref(before[w] + L->offset, &g, st, ref, &path);
                if (rc != cnt) continue;
                found = 1;
                for (size_t j = 0; j < rc && found; j++) found = ref[j] + L->offset == sel[lo + j];
            }
            cr_assert(found, "%s: worker %u tensor %zu: %llu picks match no sampling offset", what,
                      w, li, (unsigned long long)cnt);
            paths[path]++;
        }
        cr_assert_eq(pos, c);
    }
    free(ref);
}

Test(sp_methods, dgc_selection_matches_reference)
{
    uint64_t seed = sp_seed();
    static const char *const shapes[] = {"64x32x3x3", "64", "32x16x3x3", "10x8", "500x40"};
    deftsim_model *m = sp_model(shapes, 5);
    size_t n = m->numel;
    const uint32_t P = 3;
    /* Mostly distinct magnitudes; then heavy ties (the threshold catches far too many). */
    const int ranges[] = {1000, 3};
    int paths[3] = {0, 0, 0};
    for (size_t ri = 0; ri < 2; ri++) {
        deftsim_sparsifier_params p = sp_params(DEFTSIM_METHOD_DGC, 0.01, P, m);
        deftsim_sparsifier *s = sp_new(&p);
        sp_accs *a = sp_accs_new(P, n);
        for (uint64_t t = 0; t < 3; t++) {
            add_gradients(a, ranges[ri], seed, t);
            float **before = sp_accs_copy(a);
            deftsim_step_result *r = step_ok(s, t, &a->prov);
            check_dgc(m, s, before, P, p.density, ranges[ri] == 3 ? "ties" : "ints", paths);
            /* Dense tensors are in the aggregate and zeroed everywhere. */
            const deftsim_layer *B = &m->layers[1];
            cr_assert_eq(r->common_count, B->numel);
            for (uint32_t w = 0; w < P; w++)
                for (size_t i = 0; i < B->numel; i++) cr_assert_eq(a->acc[w][B->offset + i], 0);
            sp_copies_free(before, P);
        }
        sp_accs_free(a);
        deftsim_sparsifier_free(s);
    }
    cr_assert_gt(paths[1], 0, "no exact top-target path ran");
    deftsim_model_free(m);
}

Test(sp_methods, dgc_threshold_lowering)
{
    /* One 20000-element tensor at d = 0.01: stride 97, 206 samples, the 3rd largest sets the
     * threshold, target 200. 150 "big" values sit in [0, 291) at residues mod 97 below 50, three
     * per residue: a start below 50 samples three of them, the threshold lands among the bigs,
     * fewer than 0.8 target elements pass, and the threshold must come down through 400
     * "medium" values. Other starts see mediums only. */
    uint64_t seed = sp_seed(), rs = seed;
    static const char *const shapes[] = {"500x40"};
    deftsim_model *m = sp_model(shapes, 1);
    const uint32_t P = 2;
    deftsim_sparsifier_params p = sp_params(DEFTSIM_METHOD_DGC, 0.01, P, m);
    deftsim_sparsifier *s = sp_new(&p);
    sp_accs *a = sp_accs_new(P, m->numel);
    int paths[3] = {0, 0, 0};
    for (uint64_t t = 0; t < 12; t++) {
        for (uint32_t w = 0; w < P; w++) {
            float *x = a->acc[w];
            for (size_t i = 0; i < m->numel; i++) x[i] = (float)(sp_rand(&rs) % 201) - 100.0f;
            for (size_t i = 0; i < 291; i++)
                if (i % 97 < 50) x[i] = 5000.0f + (float)(sp_rand(&rs) % 15000);
            for (int j = 0; j < 400; j++)
                x[291 + sp_rand(&rs) % (m->numel - 291)] = 1000.0f + (float)(sp_rand(&rs) % 4000);
        }
        float **before = sp_accs_copy(a);
        step_ok(s, t, &a->prov);
        check_dgc(m, s, before, P, p.density, "structured", paths);
        sp_copies_free(before, P);
    }
    cr_assert_gt(paths[2], 0, "the threshold was never lowered");
    cr_assert_gt(paths[1], 0, "the exact path never ran");
    sp_accs_free(a);
    deftsim_sparsifier_free(s);
    deftsim_model_free(m);
}
