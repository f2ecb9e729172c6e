/* test_sp_oktopk.c - Ok-Topk against its definition (docs/SPARSIFIERS.md, "Ok-Topk"): a small
 * case computed by hand (a recompute step, then steps that only adjust the thresholds); a
 * plain reference implementation over many steps (t mod 32 == 0 and t mod 64 == 0 and the
 * steps between, P a power of two and not, both variants), the wire bytes of every phase
 * against the formulas, error-feedback mass conservation, the dense warm-up, the non-persistent
 * provider, and the same results from two runs. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sp_test.h"

/* Ok-Topk's choices by position in its option table (oktopk_variant, oktopk_layer_order). */
enum { OK_VGG, OK_BERT };
enum { ORDER_AUTO, ORDER_REVERSE, ORDER_FORWARD };

TestSuite(sp_oktopk, .init = sp_suite_init, .fini = sp_suite_fini);

static deftsim_step_result *step_ok(deftsim_sparsifier *s, uint64_t t,
                                    const deftsim_acc_provider *prov)
{
    deftsim_step_result *r = NULL;
    cr_assert_eq(deftsim_sparsifier_step(s, t, prov, &r), DEFTSIM_OK, "%s",
                 deftsim_error_message());
    return r;
}

static deftsim_sparsifier_params ok_params(double d, uint32_t P, const deftsim_model *m,
                                           int v, uint64_t warmup)
{
    deftsim_sparsifier_params p = sp_params(DEFTSIM_METHOD_OKTOPK, d, P, m);
    sp_opt(&p, "oktopk_variant", v);
    sp_opt(&p, "oktopk_warmup", (double)warmup);
    /* The reference below cuts regions in the model's order; test_sp_deviations.c checks the
     * reverse order (the VGG variant's default) against it on the model reversed. */
    sp_opt(&p, "oktopk_layer_order", ORDER_FORWARD);
    return p;
}

/* ---- the hand-computed case ------------------------------------------------------------- */

/* P = 2, n = 8, k = 4.
 *   w0 = [10, -1, 6, 0, -9, 2, 5, 0]: 4th largest |x| = 5, picks |x| > 5: {0, 2, 4}
 *   w1 = [0, 8, -3, 7, 0, 1, -4, 11]: 4th largest = 4, picks {1, 3, 7}
 * Regions: c = 3 / 2 = 1, proposals S[1] = 2 and 3, boundary (2 + 3) / 2 = 2: [0, 2), [2, 8).
 * Owner 0 sums {0: 10, 1: 8}, owner 1 {2: 6, 3: 7, 4: -9, 7: 11}. t = 0 recomputes: every
 * nonzero sum is a candidate, the top 4 by magnitude are {7, 0, 4, 1}, the global threshold
 * is 8. Aggregate [0, 1, 4, 7] = [5, 4, -4.5, 5.5]; w0 zeroes {0, 4}, w1 {1, 7}. No band
 * adjust (3 is within [8/3, 5]). */
Test(sp_oktopk, hand_computed_recompute_then_adjust)
{
    const char *shapes[] = {"8"};
    deftsim_model *m = sp_model(shapes, 1);
    deftsim_sparsifier_params p = ok_params(0.5, 2, m, OK_VGG, 0);
    deftsim_sparsifier *s = sp_new(&p);
    sp_accs *a = sp_accs_new(2, 8);
    const float w0[8] = {10, -1, 6, 0, -9, 2, 5, 0}, w1[8] = {0, 8, -3, 7, 0, 1, -4, 11};
    memcpy(a->acc[0], w0, sizeof w0);
    memcpy(a->acc[1], w1, sizeof w1);
    deftsim_step_result *r = step_ok(s, 0, &a->prov);
    cr_assert_eq(r->k, 4);
    cr_assert_eq(r->local_count[0], 3);
    cr_assert_eq(r->local_count[1], 3);
    cr_assert_eq(r->nnz, 4);
    const uint32_t want_i[4] = {0, 1, 4, 7};
    const float want_v[4] = {5, 4, -4.5f, 5.5f};
    for (int j = 0; j < 4; j++) {
        cr_expect_eq(r->agg_index[j], want_i[j], "entry %d: index %u", j, r->agg_index[j]);
        cr_expect_eq(r->agg_value[j], want_v[j], "entry %d: value %g", j, r->agg_value[j]);
    }
    const float r0[8] = {0, -1, 6, 0, 0, 2, 5, 0}, r1[8] = {0, 0, -3, 7, 0, 1, -4, 0};
    cr_expect_arr_eq(a->acc[0], r0, sizeof r0);
    cr_expect_arr_eq(a->acc[1], r1, sizeof r1);
    cr_expect_eq(r->oktopk_threshold_local, 4.5);
    cr_expect_eq(r->oktopk_threshold_global, 8);
    cr_expect_eq(r->oktopk_region_balance, 4.0 * 2 / 6);  /* owner 1 receives 4 of 6 */
    cr_expect(r->oktopk_local_recompute && r->oktopk_global_recompute && r->oktopk_recut);
    /* Bytes: counts by alltoall (4 B), one round (w0 sends 2 entries to owner 1, w1 one to
     * owner 0: indices and values 4 B each), the boundaries (4 (P - 1) B), the owners' counts
     * (4 B), every nonzero sum (8 B each: 2 and 4 of them). */
    const deftsim_step *st = sp_find_step(r, DEFTSIM_STEP_ALLTOALL, "counts", 0);
    cr_assert(st);
    cr_expect_eq(st->bytes[0], 4);
    cr_assert(st = sp_find_step(r, DEFTSIM_STEP_P2P, "reduce", 0));
    cr_assert_null(sp_find_step(r, DEFTSIM_STEP_P2P, "reduce", 1));
    /* Slots 2i and 2i + 1 of a rank hold peer i of the round (i = 0, itself: no message). */
    cr_expect_eq(st->peer[0], DEFTSIM_NO_PEER);
    cr_expect_eq(st->peer[2], 1);
    cr_expect_eq(st->bytes[2], 8);
    cr_expect_eq(st->bytes[3], 8);
    cr_expect_eq(st->peer[st->fan + 2], 0);
    cr_expect_eq(st->bytes[st->fan + 2], 4);
    cr_expect_eq(st->bytes[st->fan + 3], 4);
    cr_assert(st = sp_find_step(r, DEFTSIM_STEP_ALLREDUCE, "boundaries", 0));
    cr_expect_eq(st->bytes[0], 4);
    cr_assert(st = sp_find_step(r, DEFTSIM_STEP_ALLGATHER, "selection", 0));
    cr_expect_eq(st->bytes[0], 16);
    cr_expect_eq(st->bytes[1], 32);

    /* t = 1 with no new gradient: the raise loop keeps L (counts 1 <= 4 * 4 // 3), w0 picks
     * {2} (6 > 5), w1 {3} (7 > 4); owner 1 sums 6 and 7, neither above G = 8: nothing is
     * selected, the residuals stay, G /= 1.008, and both L /= 1.012 (1 < 8/3). No re-cut. */
    r = step_ok(s, 1, &a->prov);
    cr_expect_eq(r->local_count[0], 1);
    cr_expect_eq(r->local_count[1], 1);
    cr_expect_eq(r->nnz, 0);
    cr_expect_arr_eq(a->acc[0], r0, sizeof r0);
    cr_expect_arr_eq(a->acc[1], r1, sizeof r1);
    cr_expect_eq(r->oktopk_threshold_global, 8);
    cr_expect(!r->oktopk_local_recompute && !r->oktopk_global_recompute && !r->oktopk_recut);
    cr_assert_null(sp_find_step(r, DEFTSIM_STEP_ALLREDUCE, "boundaries", 0));
    /* t = 2: L = 5 / 1.012 and 4 / 1.012; w0 picks {2, 6}, w1 {3, 6}; owner 1 sums {2: 6,
     * 3: 7, 6: 5 + -4 = 1} against G = 8 / 1.008 = 7.94: still nothing. */
    r = step_ok(s, 2, &a->prov);
    cr_expect_eq(r->oktopk_threshold_local, (5 / 1.012 + 4 / 1.012) / 2);
    cr_expect_eq(r->oktopk_threshold_global, 8 / 1.008);
    cr_expect_eq(r->local_count[0], 2);
    cr_expect_eq(r->local_count[1], 2);
    cr_expect_eq(r->nnz, 0);
    /* t = 3 with w1 = 10 at index 2: owner 1 sums 6 + 10 = 16 > G: selected, and only the
     * workers that picked index 2 count (w0 with 6, w1 with 10); both residuals zero there. */
    a->acc[1][2] = 10;
    r = step_ok(s, 3, &a->prov);
    cr_assert_eq(r->nnz, 1);
    cr_expect_eq(r->agg_index[0], 2);
    cr_expect_eq(r->agg_value[0], 8);
    cr_expect_eq(a->acc[0][2], 0);
    cr_expect_eq(a->acc[1][2], 0);
    cr_expect_eq(a->acc[1][3], 7, "w1 picked 3 but it was not selected: kept");
    sp_accs_free(a);
    deftsim_sparsifier_free(s);
    deftsim_model_free(m);
}

/* The raise loop: 7 of 8 elements above L after a recompute step drops the rest: count 6 > 4k/3
 * = 1 (k = 1) raises L by 1.03 up to 5 times, then stops. */
Test(sp_oktopk, raise_loop_at_most_five_times)
{
    const char *shapes[] = {"8"};
    deftsim_model *m = sp_model(shapes, 1);
    deftsim_sparsifier_params p = ok_params(0.125, 1, m, OK_VGG, 0);
    deftsim_sparsifier *s = sp_new(&p);
    sp_accs *a = sp_accs_new(1, 8);
    const float x[8] = {100, 1, 1, 1, 1, 1, 1, 1};
    memcpy(a->acc[0], x, sizeof x);
    deftsim_step_result *r = step_ok(s, 0, &a->prov);
    /* k = 1: L = 100, nothing > 100 (count 0 < 2/3): L /= 1.012. Then refill with values
     * just above L: every one stays above after 5 raises. */
    cr_expect_eq(r->local_count[0], 0);
    for (int i = 0; i < 8; i++) a->acc[0][i] = 200;
    r = step_ok(s, 1, &a->prov);
    double L = 100 / 1.012;
    for (int i = 0; i < 5; i++) L *= 1.03;
    cr_expect(fabs(r->oktopk_threshold_local - L) < 1e-12, "%.17g vs %.17g", r->oktopk_threshold_local, L);
    cr_expect_eq(r->local_count[0], 8);
    sp_accs_free(a);
    deftsim_sparsifier_free(s);
    deftsim_model_free(m);
}

/* ---- a plain reference ------------------------------------------------------------------ */

typedef struct {
    uint32_t P;
    size_t n;
    uint64_t k, warmup;
    int bert;
    int started;
    double *lthr, gthr;
    uint64_t *off;
    /* outputs of the last step */
    unsigned char **pick;     /* P x n */
    float *red;
    unsigned char *gsel;
    uint64_t *cnt;            /* P: local counts */
    uint64_t *pair;           /* P x P: picks of w in region j */
    uint64_t *gcount;         /* P */
    double thr_local, thr_global;
    int recut;
} ref_t;

static ref_t *ref_new(uint32_t P, size_t n, uint64_t k, int bert, uint64_t warmup)
{
    ref_t *f = calloc(1, sizeof *f);
    f->P = P;
    f->n = n;
    f->k = k;
    f->bert = bert;
    f->warmup = warmup;
    f->lthr = calloc(P, sizeof *f->lthr);
    f->off = calloc(P + 1, sizeof *f->off);
    f->pick = calloc(P, sizeof *f->pick);
    for (uint32_t w = 0; w < P; w++) f->pick[w] = calloc(n, 1);
    f->red = calloc(n, sizeof *f->red);
    f->gsel = calloc(n, 1);
    f->cnt = calloc(P, sizeof *f->cnt);
    f->pair = calloc((size_t)P * P, sizeof *f->pair);
    f->gcount = calloc(P, sizeof *f->gcount);
    return f;
}

static void ref_free(ref_t *f)
{
    for (uint32_t w = 0; w < f->P; w++) free(f->pick[w]);
    free(f->pick);
    free(f->lthr);
    free(f->off);
    free(f->red);
    free(f->gsel);
    free(f->cnt);
    free(f->pair);
    free(f->gcount);
    free(f);
}

static int cmp_desc(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x < y) - (x > y);
}

static uint32_t owner(const ref_t *f, size_t i)
{
    uint32_t j = 0;
    while (j + 1 < f->P && i >= f->off[j + 1]) j++;
    return j;
}

/* One step on acc (P x n), in place; returns the aggregate as a dense array (agg) with gsel. */
static void ref_step(ref_t *f, uint64_t t, float **acc, float *agg)
{
    const uint32_t P = f->P;
    const size_t n = f->n;
    const uint64_t k = f->k;
    memset(agg, 0, n * sizeof *agg);
    memset(f->gsel, 0, n);
    if (t < f->warmup) {
        for (size_t i = 0; i < n; i++) {
            float sum = 0;
            for (uint32_t w = 0; w < P; w++) sum = w ? sum + acc[w][i] : acc[w][i];
            agg[i] = sum / (float)P;
            f->gsel[i] = 1;
            for (uint32_t w = 0; w < P; w++) acc[w][i] = 0;
        }
        return;
    }
    uint64_t lp = f->bert ? 128 : 32;
    int first = !f->started;
    int lrec = first || t % lp == 0, grec = lrec, recut = first || t % 64 == 0;
    f->recut = recut;
    float *tmp = malloc(n * sizeof *tmp);
    uint64_t *prop = calloc((size_t)P * P, sizeof *prop);
    f->thr_local = 0;
    for (uint32_t w = 0; w < P; w++) {
        double thr = f->lthr[w];
        if (lrec) {
            for (size_t i = 0; i < n; i++) tmp[i] = fabsf(acc[w][i]);
            qsort(tmp, n, sizeof *tmp, cmp_desc);
            thr = tmp[k - 1];
        } else if (!f->bert) {
            for (int it = 0; it < 5; it++) {
                uint64_t c = 0;
                for (size_t i = 0; i < n; i++) c += fabsf(acc[w][i]) > (float)thr;
                if (c > 4 * k / 3)
                    thr *= 1.03;
                else
                    break;
            }
        }
        f->lthr[w] = thr;
        f->thr_local += thr;
        uint64_t c = 0;
        for (size_t i = 0; i < n; i++) c += (f->pick[w][i] = fabsf(acc[w][i]) > (float)thr);
        f->cnt[w] = c;
        double lo = f->bert ? 4.0 * k / 5 : 2.0 * k / 3, fac = f->bert ? 1.025 : 1.012;
        if ((double)c < lo)
            f->lthr[w] /= fac;
        else if ((double)c > 5.0 * k / 4)
            f->lthr[w] *= fac;
        if (recut) {
            uint64_t q = c / P, seen = 0;
            for (uint32_t j = 1; j < P; j++) prop[(size_t)w * P + j] = n * j / P;
            for (size_t i = 0; i < n && c; i++)
                if (f->pick[w][i]) {
                    for (uint32_t j = 1; j < P; j++)
                        if (seen == q * j) prop[(size_t)w * P + j] = i;
                    seen++;
                }
        }
    }
    f->thr_local /= P;
    if (recut) {
        for (uint32_t j = 1; j < P; j++) {
            uint64_t s = 0;
            for (uint32_t w = 0; w < P; w++) s += prop[(size_t)w * P + j];
            f->off[j] = s / P;
        }
        f->off[P] = n;
    }
    memset(f->pair, 0, (size_t)P * P * sizeof *f->pair);
    memset(f->gcount, 0, P * sizeof *f->gcount);
    for (size_t i = 0; i < n; i++) {
        uint32_t j = owner(f, i);
        float sum = 0;
        for (uint32_t q = 0; q < P; q++) {
            uint32_t src = (j + P - q) % P;
            if (f->pick[src][i]) sum += acc[src][i];
        }
        f->red[i] = sum;
        for (uint32_t w = 0; w < P; w++) f->pair[(size_t)w * P + j] += f->pick[w][i];
    }
    /* candidates: picked by someone */
    f->thr_global = f->gthr;
    uint64_t U = 0;
    for (size_t i = 0; i < n; i++) {
        int picked = 0;
        for (uint32_t w = 0; w < P; w++) picked |= f->pick[w][i];
        if (!picked) continue;
        int in = grec ? f->red[i] != 0 : fabsf(f->red[i]) > (float)f->gthr;
        if (in) {
            f->gsel[i] = 1;
            f->gcount[owner(f, i)]++;
            U++;
        }
    }
    if (grec) {
        uint64_t kk = U < k ? U : k;
        /* keep the kk largest |sum|, ties to the lower index */
        for (uint64_t drop = U - kk; drop > 0; drop--) {
            size_t worst = n;
            for (size_t i = 0; i < n; i++) {
                if (!f->gsel[i]) continue;
                if (worst == n || fabsf(f->red[i]) <= fabsf(f->red[worst])) worst = i;
            }
            f->gsel[worst] = 0;
        }
        float m = INFINITY;
        for (size_t i = 0; i < n; i++)
            if (f->gsel[i] && fabsf(f->red[i]) < m) m = fabsf(f->red[i]);
        if (kk) f->gthr = m;
        f->thr_global = f->gthr;
    } else {
        double lo = f->bert ? 4.0 * k / 5 : 2.0 * k / 3, hi = f->bert ? 5.0 * k / 4 : 4.0 * k / 3;
        if ((double)U < lo)
            f->gthr /= f->bert ? 1.036 : 1.008;
        else if ((double)U > hi)
            f->gthr *= f->bert ? 1.025 : 1.008;
    }
    for (size_t i = 0; i < n; i++) {
        if (!f->gsel[i]) continue;
        agg[i] = f->red[i] / (float)P;
        for (uint32_t w = 0; w < P; w++)
            if (f->pick[w][i]) acc[w][i] = 0;
    }
    f->started = 1;
    free(tmp);
    free(prop);
}

static void add_grad(sp_accs *a, float **racc, uint64_t seed, uint64_t t)
{
    for (uint32_t w = 0; w < a->P; w++) {
        sp_fill_int(a->grad[w], a->n, 1000, seed, t * 1000 + w);
        for (size_t i = 0; i < a->n; i++) {
            a->acc[w][i] += a->grad[w][i];
            racc[w][i] += a->grad[w][i];
        }
    }
}

/* Runs the sparsifier and the reference side by side for T steps and compares everything. */
static void against_reference(uint32_t P, int bert, uint64_t warmup, uint64_t T, double d)
{
    const char *shapes[] = {"40x25", "37", "300"};
    deftsim_model *m = sp_model(shapes, 3);
    const size_t n = m->numel;
    deftsim_sparsifier_params p = ok_params(d, P, m, bert ? OK_BERT : OK_VGG, warmup);
    deftsim_sparsifier *s = sp_new(&p);
    sp_accs *a = sp_accs_new(P, n);
    float **racc = sp_accs_copy(a);
    uint64_t k = (uint64_t)floor(d * (double)n);
    ref_t *f = ref_new(P, n, k, bert, warmup);
    float *agg = malloc(n * sizeof *agg);
    uint64_t seed = sp_seed();
    int recomputes = 0, normals = 0, recuts = 0;
    for (uint64_t t = 0; t < T; t++) {
        add_grad(a, racc, seed, t);
        float **before = sp_accs_copy(a);
        deftsim_step_result *r = step_ok(s, t, &a->prov);
        ref_step(f, t, racc, agg);
        double tol = 0;
        double disc = sp_check_conservation(r, before, a->acc, P, n, 1, &tol);
        cr_expect(fabs(disc) <= tol + 1e-6, "P=%u t=%llu: mass off by %g (tol %g)", P,
                  (unsigned long long)t, disc, tol);
        sp_copies_free(before, P);
        sp_check_sorted(r);
        /* The aggregate and the residuals, exactly. */
        uint64_t j = 0;
        for (size_t i = 0; i < n; i++) {
            if (!f->gsel[i]) continue;
            cr_assert(j < r->nnz && r->agg_index[j] == i, "P=%u t=%llu: aggregate entry %llu is %u, want %zu",
                      P, (unsigned long long)t, (unsigned long long)j, j < r->nnz ? r->agg_index[j] : 0, i);
            cr_assert_eq(r->agg_value[j], agg[i], "P=%u t=%llu index %zu: %g vs %g", P,
                         (unsigned long long)t, i, r->agg_value[j], agg[i]);
            j++;
        }
        cr_assert_eq(j, r->nnz, "P=%u t=%llu: %llu entries, want %llu", P, (unsigned long long)t,
                     (unsigned long long)r->nnz, (unsigned long long)j);
        for (uint32_t w = 0; w < P; w++)
            cr_assert_arr_eq(a->acc[w], racc[w], n * sizeof(float), "P=%u t=%llu: residual of %u", P,
                             (unsigned long long)t, w);
        if (t < warmup) {
            cr_expect(r->oktopk_warmup);
            cr_assert(sp_find_step(r, DEFTSIM_STEP_ALLREDUCE, "dense", 0) || P == 1);
            cr_expect_eq(r->nnz, n);
            continue;
        }
        for (uint32_t w = 0; w < P; w++) cr_assert_eq(r->local_count[w], f->cnt[w]);
        cr_assert_eq(r->oktopk_threshold_local, f->thr_local, "t=%llu", (unsigned long long)t);
        cr_assert_eq(r->oktopk_threshold_global, f->thr_global, "t=%llu: %.17g vs %.17g",
                     (unsigned long long)t, r->oktopk_threshold_global, f->thr_global);
        uint64_t lp = bert ? 128 : 32;
        int first = t == warmup;
        cr_assert_eq(r->oktopk_local_recompute, first || t % lp == 0);
        cr_assert_eq(r->oktopk_recut, first || t % 64 == 0);
        recomputes += r->oktopk_global_recompute;
        normals += !r->oktopk_global_recompute;
        recuts += r->oktopk_recut;
        if (P == 1) continue;
        /* Wire bytes of every phase. */
        const deftsim_step *st = sp_find_step(r, DEFTSIM_STEP_ALLTOALL, "counts", 0);
        cr_assert(st);
        for (uint32_t w = 0; w < P; w++) cr_assert_eq(st->bytes[w], 4);
        size_t rounds = 0;
        uint64_t seen_pairs = 0;
        while ((st = sp_find_step(r, DEFTSIM_STEP_P2P, "reduce", rounds))) {
            for (uint32_t w = 0; w < P; w++)
                for (uint32_t x = 0; x < st->fan; x += 2) {
                    uint32_t dst = st->peer[(size_t)w * st->fan + x];
                    if (dst == DEFTSIM_NO_PEER) continue;
                    uint32_t i = (dst + P - w) % P;
                    cr_assert(i >= 4 * rounds && i < 4 * rounds + 4 && i != 0, "round %zu: %u -> %u", rounds, w, dst);
                    cr_assert_eq(st->bytes[(size_t)w * st->fan + x], f->pair[(size_t)w * P + dst] * 4);
                    cr_assert_eq(st->bytes[(size_t)w * st->fan + x + 1], f->pair[(size_t)w * P + dst] * 4);
                    seen_pairs++;
                }
            rounds++;
        }
        cr_assert_eq(rounds, (P + 3) / 4);
        cr_assert_eq(seen_pairs, (uint64_t)P * (P - 1));
        st = sp_find_step(r, DEFTSIM_STEP_ALLREDUCE, "boundaries", 0);
        if (r->oktopk_recut) {
            cr_assert(st);
            cr_assert_eq(st->bytes[0], 4ull * (P - 1));
        } else {
            cr_assert_null(st);
        }
        cr_assert(st = sp_find_step(r, DEFTSIM_STEP_ALLGATHER, "counts", 0));
        cr_assert_eq(st->bytes[0], 4);
        /* The owners' picks before the top-k (recompute) or their selection. */
        uint64_t G[64] = {0}, Gt = 0;
        if (r->oktopk_global_recompute) {
            for (size_t i = 0; i < n; i++) {
                int picked = 0;
                for (uint32_t w = 0; w < P; w++) picked |= f->pick[w][i];
                if (picked && f->red[i] != 0) G[owner(f, i)]++;
            }
        } else {
            for (uint32_t w = 0; w < P; w++) G[w] = f->gcount[w];
        }
        for (uint32_t w = 0; w < P; w++) Gt += G[w];
        if (!bert) {
            cr_assert(st = sp_find_step(r, DEFTSIM_STEP_ALLGATHER, "selection", 0));
            for (uint32_t w = 0; w < P; w++) cr_assert_eq(st->bytes[w], G[w] * 8);
        } else {
            const deftsim_step *gv = sp_find_step(r, DEFTSIM_STEP_ALLGATHER, "values", 0);
            const deftsim_step *gi = sp_find_step(r, DEFTSIM_STEP_ALLGATHER, "indices", 0);
            cr_assert(gv && gi);
            const deftsim_step *bs = sp_find_step(r, DEFTSIM_STEP_P2P, "balance", 0);
            if (r->oktopk_global_recompute) {
                cr_assert_null(bs);
                for (uint32_t w = 0; w < P; w++) cr_assert_eq(gv->bytes[w], G[w] * 4);
            } else {
                cr_assert(bs);
                uint64_t moved_in[64] = {0};
                for (uint32_t w = 0; w < P; w++) {
                    cr_assert_eq(gv->bytes[w], (Gt / P + (w < Gt % P)) * 4);
                    cr_assert_eq(gi->bytes[w], gv->bytes[w]);
                    for (uint32_t x = 0; x < bs->fan; x += 2)
                        if (bs->peer[(size_t)w * bs->fan + x] != DEFTSIM_NO_PEER)
                            moved_in[bs->peer[(size_t)w * bs->fan + x]] += bs->bytes[(size_t)w * bs->fan + x] / 4;
                }
                /* Block j = what j keeps of its own plus what it receives. */
                uint64_t A = 0;
                for (uint32_t j = 0; j < P; j++) {
                    uint64_t B0 = j * (Gt / P) + (j < Gt % P ? j : Gt % P), B1 = B0 + Gt / P + (j < Gt % P);
                    uint64_t lo = A > B0 ? A : B0, hi = A + G[j] < B1 ? A + G[j] : B1;
                    uint64_t own = hi > lo ? hi - lo : 0;
                    cr_assert_eq(own + moved_in[j], B1 - B0, "balance: block %u", j);
                    A += G[j];
                }
            }
        }
    }
    if (T > warmup + 65) {
        cr_expect_geq(recomputes, 2);
        cr_expect_geq(normals, 30);
        cr_expect_geq(recuts, 2);
    }
    free(agg);
    ref_free(f);
    sp_copies_free(racc, P);
    sp_accs_free(a);
    deftsim_sparsifier_free(s);
    deftsim_model_free(m);
}

Test(sp_oktopk, vgg_matches_the_reference_p3) { against_reference(3, 0, 0, 70, 0.02); }
Test(sp_oktopk, vgg_matches_the_reference_p4) { against_reference(4, 0, 0, 70, 0.02); }
Test(sp_oktopk, vgg_matches_the_reference_p9_three_rounds) { against_reference(9, 0, 0, 67, 0.05); }
Test(sp_oktopk, vgg_matches_the_reference_p1) { against_reference(1, 0, 0, 40, 0.02); }
Test(sp_oktopk, warmup_is_dense_then_sparse) { against_reference(3, 0, 5, 12, 0.02); }
Test(sp_oktopk, bert_matches_the_reference_p5) { against_reference(5, 1, 0, 140, 0.02); }

/* The non-persistent provider gives the same results and sees no protocol violation, in
 * either order of the buffer. */
static void non_persistent(int order)
{
    const char *shapes[] = {"40x25", "37"};
    deftsim_model *m = sp_model(shapes, 2);
    const uint32_t P = 5;
    const size_t n = m->numel;
    deftsim_sparsifier_params p = ok_params(0.03, P, m, OK_VGG, 0);
    sp_opt(&p, "oktopk_layer_order", order);
    deftsim_sparsifier *s1 = sp_new(&p), *s2 = sp_new(&p);
    sp_accs *a = sp_accs_new(P, n);
    sp_npv *v = sp_npv_new(P, n);
    uint64_t seed = sp_seed();
    for (uint64_t t = 0; t < 40; t++) {
        for (uint32_t w = 0; w < P; w++) {
            sp_fill_int(a->grad[w], n, 1000, seed, t * 1000 + w);
            memcpy(v->grad[w], a->grad[w], n * sizeof(float));
            for (size_t i = 0; i < n; i++) a->acc[w][i] += a->grad[w][i];
        }
        sp_npv_begin(v);
        deftsim_step_result *r1 = step_ok(s1, t, &a->prov);
        uint64_t nnz = r1->nnz;
        float *vals = malloc(nnz * sizeof *vals + 1);
        memcpy(vals, r1->agg_value, nnz * sizeof *vals);
        deftsim_step_result *r2 = step_ok(s2, t, &v->prov);
        cr_assert_eq(v->violations, 0);
        cr_assert_eq(r2->nnz, nnz);
        cr_assert_arr_eq(r2->agg_value, vals, nnz * sizeof *vals);
        for (uint32_t w = 0; w < P; w++) cr_assert_arr_eq(v->res[w], a->acc[w], n * sizeof(float));
        free(vals);
    }
    sp_npv_free(v);
    sp_accs_free(a);
    deftsim_sparsifier_free(s1);
    deftsim_sparsifier_free(s2);
    deftsim_model_free(m);
}

Test(sp_oktopk, non_persistent_provider) { non_persistent(ORDER_FORWARD); }
Test(sp_oktopk, non_persistent_provider_reverse) { non_persistent(ORDER_REVERSE); }

/* Two runs from the same inputs: the same selections, aggregates and bytes. */
Test(sp_oktopk, two_runs_identical)
{
    const char *shapes[] = {"50x40"};
    deftsim_model *m = sp_model(shapes, 1);
    const uint32_t P = 6;
    const size_t n = m->numel;
    deftsim_sparsifier_params p = ok_params(0.01, P, m, OK_VGG, 0);
    deftsim_sparsifier *s[2] = {sp_new(&p), sp_new(&p)};
    sp_accs *a[2] = {sp_accs_new(P, n), sp_accs_new(P, n)};
    uint64_t seed = sp_seed();
    for (uint64_t t = 0; t < 70; t++) {
        deftsim_step_result *r[2];
        for (int x = 0; x < 2; x++) {
            for (uint32_t w = 0; w < P; w++) {
                sp_fill_int(a[x]->grad[w], n, 1000, seed, t * 1000 + w);
                for (size_t i = 0; i < n; i++) a[x]->acc[w][i] += a[x]->grad[w][i];
            }
            r[x] = step_ok(s[x], t, &a[x]->prov);
        }
        cr_assert_eq(r[0]->nnz, r[1]->nnz);
        cr_assert_arr_eq(r[0]->agg_index, r[1]->agg_index, r[0]->nnz * sizeof(deftsim_kidx));
        cr_assert_arr_eq(r[0]->agg_value, r[1]->agg_value, r[0]->nnz * sizeof(float));
        cr_assert_arr_eq(r[0]->bytes_sent, r[1]->bytes_sent, P * sizeof(uint64_t));
        cr_assert_arr_eq(r[0]->bytes_recv, r[1]->bytes_recv, P * sizeof(uint64_t));
        cr_assert_eq(r[0]->schedule.nsteps, r[1]->schedule.nsteps);
        for (uint32_t w = 0; w < P; w++) {
            const deftsim_kidx *i0, *i1;
            uint64_t c0, c1;
            cr_assert_eq(deftsim_sparsifier_selection(s[0], w, &i0, &c0), DEFTSIM_OK);
            cr_assert_eq(deftsim_sparsifier_selection(s[1], w, &i1, &c1), DEFTSIM_OK);
            cr_assert_eq(c0, c1);
            cr_assert_arr_eq(i0, i1, c0 * sizeof *i0);
        }
    }
    for (int x = 0; x < 2; x++) {
        sp_accs_free(a[x]);
        deftsim_sparsifier_free(s[x]);
    }
    deftsim_model_free(m);
}
