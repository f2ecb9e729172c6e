/* test_topk.c - exact top-k against the sort-based reference, every path, every backend. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kt.h"

static const unsigned path_flags[] = {0, DEFTSIM_KFLAG_FORCE_FALLBACK,
                                      DEFTSIM_KFLAG_FORCE_SAMPLING};
#define NPATHS (sizeof path_flags / sizeof path_flags[0])

/* Runs top-k of x for one k under ctx and checks it against the reference order: the
 * exact set, guard bands around the output and the scratch, and the record. */
static void check_one(deftsim_kctx *ctx, const float *x, size_t n, size_t k, const uint32_t *ref,
                      const char *label)
{
    size_t sb = 0;
    cr_assert_eq(deftsim_k_topk_scratch(ctx, n, k, &sb), DEFTSIM_OK, "%s: %s", label,
                 deftsim_error_message());
    kt_buf out, scr;
    kt_buf_alloc(&out, k * sizeof(deftsim_kidx));
    kt_buf_alloc(&scr, sb);
    deftsim_status st = deftsim_k_topk(ctx, x, n, k, out.p, scr.p, sb);
    cr_assert_eq(st, DEFTSIM_OK, "%s: %s", label, deftsim_error_message());
    cr_assert(kt_guard_ok(&out, label), "%s: output guard band overwritten", label);
    cr_assert(kt_guard_ok(&scr, label), "%s: scratch guard band overwritten", label);
    cr_assert(kt_same_set(out.p, ref, k, label), "%s: wrong top-k set", label);
    deftsim_kstats ks;
    deftsim_kctx_last(ctx, &ks);
    cr_assert_eq(ks.op, DEFTSIM_KOP_TOPK, "%s", label);
    const char *isa = kt_expected_isa(ctx);
    cr_assert(!isa || (ks.isa && strcmp(ks.isa, isa) == 0), "%s: ran with %s, expected %s", label,
              ks.isa ? ks.isa : "(none)", isa ? isa : "");
    cr_assert(ks.threads >= 1 && ks.threads <= deftsim_kctx_threads(ctx), "%s", label);
    if ((deftsim_kctx_flags(ctx) & DEFTSIM_KFLAG_FORCE_FALLBACK) && k > 0 && k < n)
        cr_assert_eq(ks.fallbacks, 1, "%s: forced fallback not taken", label);
    kt_buf_free(&out);
    kt_buf_free(&scr);
}

/* Every configuration and path over x with the given k values (k > n skipped). */
static void sweep(const float *x, size_t n, const size_t *ks, size_t nk, const char *what,
                  unsigned path_mask)
{
    uint32_t *ref = kt_ref_order(x, n);
    kt_config cfg[16];
    size_t nc = kt_configs(cfg, 16);
    for (size_t c = 0; c < nc; c++) {
        deftsim_kctx *ctx = kt_ctx(&cfg[c]);
        if (!kt_supported(ctx, DEFTSIM_KOP_TOPK, cfg[c].label)) {
            deftsim_kctx_free(ctx);
            continue;
        }
        for (size_t p = 0; p < NPATHS; p++) {
            if (!(path_mask >> p & 1)) continue;
            deftsim_kctx_set_flags(ctx, cfg[c].flags | path_flags[p]);
            for (size_t j = 0; j < nk; j++) {
                if (ks[j] > n) continue;
                char label[200];
                snprintf(label, sizeof label, "topk %s n=%zu k=%zu [%s, flags %#x]", what, n, ks[j],
                         cfg[c].label, cfg[c].flags | path_flags[p]);
                check_one(ctx, x, n, ks[j], ref, label);
            }
        }
        deftsim_kctx_free(ctx);
    }
    free(ref);
}

Test(topk, tiny_every_k)
{
    uint64_t seed = kt_seed();
    for (size_t n = 1; n <= 4; n++)
        for (int m = 0; m < KT_MODE_COUNT; m++)
            for (int rep = 0; rep < 4; rep++) {
                float x[4];
                kt_fill(x, n, (kt_mode)m, seed + 1000 * n + 10 * (uint64_t)m + (uint64_t)rep);
                size_t ks[5];
                for (size_t k = 0; k <= n; k++) ks[k] = k;
                char what[64];
                snprintf(what, sizeof what, "%s rep %d", kt_mode_name((kt_mode)m), rep);
                sweep(x, n, ks, n + 1, what, 7);
            }
}

static void sizes(unsigned ilo, unsigned ihi, const int *modes, size_t nmodes, unsigned paths)
{
    uint64_t seed = kt_seed();
    for (unsigned i = ilo; i <= ihi; i++)
        for (int plus = 0; plus <= 1; plus++) {
            size_t n = ((size_t)1 << i) + (plus ? 11 : 0);
            float *x = malloc(n * sizeof *x);
            cr_assert(x);
            for (size_t m = 0; m < nmodes; m++) {
                kt_fill(x, n, (kt_mode)modes[m], seed ^ (n * 31 + (size_t)modes[m]));
                size_t ks[] = {0, 1, 7, 100, n - 1, n};
                sweep(x, n, ks, sizeof ks / sizeof ks[0], kt_mode_name((kt_mode)modes[m]), paths);
            }
            free(x);
        }
}

Test(topk, sizes_small_all_modes)
{
    static const int modes[] = {KT_NORMAL, KT_HEAVY,     KT_TIES,      KT_ALL_EQUAL,
                                KT_ALL_ZERO, KT_NONFINITE, KT_ASCENDING};
    sizes(0, 13, modes, sizeof modes / sizeof modes[0], 7);
}

/* Sizes where the in-cache and the sampled path take over from each other, and where two
 * threads engage. */
Test(topk, sizes_large)
{
    static const int modes[] = {KT_NORMAL, KT_TIES, KT_NONFINITE};
    sizes(14, 20, modes, sizeof modes / sizeof modes[0], 7);
}

/* Densities the sparsifiers use, on a size where the sampled path runs by default. */
Test(topk, densities)
{
    uint64_t seed = kt_seed();
    size_t n = 300007;
    float *x = malloc(n * sizeof *x);
    cr_assert(x);
    static const int modes[] = {KT_NORMAL, KT_HEAVY, KT_ASCENDING};
    for (size_t m = 0; m < 3; m++) {
        kt_fill(x, n, (kt_mode)modes[m], seed + 77 + m);
        size_t ks[] = {n / 1000, n / 100, n / 10, n / 2};
        sweep(x, n, ks, 4, kt_mode_name((kt_mode)modes[m]), 7);
    }
    free(x);
}

/* The sampled threshold misses on its own when the candidates overflow: every magnitude
 * equal, or nearly every element NaN. The radix fallback must take over, and be exact. */
Test(topk, fallback_natural)
{
    uint64_t seed = kt_seed();
    size_t n = (1u << 20) + 11;
    float *x = malloc(n * sizeof *x);
    cr_assert(x);
    kt_config cfg[16];
    size_t nc = kt_configs(cfg, 16);
    for (int variant = 0; variant < 2; variant++) {
        kt_rng r;
        kt_rng_init(&r, seed + 5 + (uint64_t)variant);
        for (size_t i = 0; i < n; i++) {
            if (variant == 0)
                x[i] = (kt_next(&r) & 1) ? 2.0f : -2.0f;
            else
                x[i] = kt_below(&r, 100) < 98 ? NAN : (float)kt_normal(&r);
        }
        uint32_t *ref = kt_ref_order(x, n);
        size_t k = n / 100;
        for (size_t c = 0; c < nc; c++) {
            deftsim_kctx *ctx = kt_ctx(&cfg[c]);
            if (!kt_supported(ctx, DEFTSIM_KOP_TOPK, cfg[c].label)) {
                deftsim_kctx_free(ctx);
                continue;
            }
            char label[160];
            snprintf(label, sizeof label, "natural fallback %s [%s]",
                     variant ? "98%% NaN" : "all equal", cfg[c].label);
            check_one(ctx, x, n, k, ref, label);
            deftsim_kstats ks;
            deftsim_kctx_last(ctx, &ks);
            if (strcmp(cfg[c].backend, "cpu") == 0)
                cr_assert_eq(ks.fallbacks, 1, "%s: expected the fallback", label);
            if (variant == 1) {
                size_t nan = 0;
                for (size_t i = 0; i < n; i++) nan += isnan(x[i]) ? 1 : 0;
                cr_assert_eq(ks.nan_count, nan, "%s: NaN count %zu, want %zu", label,
                             ks.nan_count, nan);
            }
            deftsim_kctx_free(ctx);
        }
        free(ref);
    }
    free(x);
}

/* NaN is selected only once every number is: k above the number count picks NaNs, lowest
 * index first; Inf ranks above everything finite. */
Test(topk, nan_policy)
{
    float x[] = {NAN, 1.0f, -INFINITY, NAN, -3.0f, 0.0f, NAN, 3.0f};
    size_t n = sizeof x / sizeof x[0];
    kt_config cfg[16];
    size_t nc = kt_configs(cfg, 16);
    for (size_t c = 0; c < nc; c++) {
        deftsim_kctx *ctx = kt_ctx(&cfg[c]);
        if (!kt_supported(ctx, DEFTSIM_KOP_TOPK, cfg[c].label)) {
            deftsim_kctx_free(ctx);
            continue;
        }
        for (size_t p = 0; p < NPATHS; p++) {
            deftsim_kctx_set_flags(ctx, cfg[c].flags | path_flags[p]);
            /* order: -Inf(2), -3(4) and 3(7) tie: 4 first, then 7, 1.0(1), 0(5), NaN 0, 3, 6 */
            static const uint32_t want[] = {2, 4, 7, 1, 5, 0, 3, 6};
            for (size_t k = 0; k <= n; k++) {
                char label[160];
                snprintf(label, sizeof label, "nan policy k=%zu [%s, path %zu]", k, cfg[c].label, p);
                check_one(ctx, x, n, k, want, label);
                deftsim_kstats ks;
                deftsim_kctx_last(ctx, &ks);
                if (k > 0 && k < n) cr_assert_eq(ks.nan_count, 3, "%s: NaN count %zu", label, ks.nan_count);
            }
        }
        deftsim_kctx_free(ctx);
    }
}

/* Two threads engage on large inputs, one on small; the record says which. */
Test(topk, threads_recorded)
{
    size_t n = (size_t)1 << 21, k = n / 100;
    float *x = malloc(n * sizeof *x);
    cr_assert(x);
    kt_fill(x, n, KT_NORMAL, kt_seed() + 9);
    deftsim_kctx *one, *two;
    cr_assert_eq(deftsim_kctx_new(&one, "cpu", 1), DEFTSIM_OK);
    cr_assert_eq(deftsim_kctx_new(&two, "cpu", 2), DEFTSIM_OK);
    size_t sb;
    cr_assert_eq(deftsim_k_topk_scratch(two, n, k, &sb), DEFTSIM_OK);
    void *scr = malloc(sb);
    uint32_t *a = malloc(k * sizeof *a), *b = malloc(k * sizeof *b);
    cr_assert(scr && a && b);
    cr_assert_eq(deftsim_k_topk(two, x, n, k, a, scr, sb), DEFTSIM_OK);
    deftsim_kstats ks;
    deftsim_kctx_last(two, &ks);
    cr_assert_eq(ks.threads, 2);
    cr_assert_eq(deftsim_k_topk(one, x, n, k, b, scr, sb), DEFTSIM_OK);
    deftsim_kctx_last(one, &ks);
    cr_assert_eq(ks.threads, 1);
    cr_assert(kt_same_set(a, b, k, "1 vs 2 threads"));
    cr_assert_eq(deftsim_k_topk(two, x, 1000, 10, a, scr, sb), DEFTSIM_OK);
    deftsim_kctx_last(two, &ks);
    cr_assert_eq(ks.threads, 1, "a small input should not wake a second thread");
    free(scr);
    free(a);
    free(b);
    free(x);
    deftsim_kctx_free(one);
    deftsim_kctx_free(two);
}

Test(topk, errors)
{
    deftsim_kctx *ctx;
    cr_assert_eq(deftsim_kctx_new(&ctx, "cpu", 1), DEFTSIM_OK);
    float x[8] = {0};
    uint32_t out[8];
    size_t sb;
    cr_assert_eq(deftsim_k_topk_scratch(ctx, 8, 9, &sb), DEFTSIM_E_INPUT);
    cr_assert_eq(deftsim_k_topk(ctx, x, 8, 9, out, NULL, 0), DEFTSIM_E_INPUT);
    cr_assert(strstr(deftsim_error_message(), "k = 9 > n = 8"), "%s", deftsim_error_message());
    size_t big = 100000;
    float *y = calloc(big, sizeof *y);
    cr_assert(y);
    cr_assert_eq(deftsim_k_topk_scratch(ctx, big, 10, &sb), DEFTSIM_OK);
    cr_assert_gt(sb, 0);
    void *scr = malloc(sb);
    cr_assert_eq(deftsim_k_topk(ctx, y, big, 10, out, scr, sb - 1), DEFTSIM_E_USAGE);
    cr_assert(strstr(deftsim_error_message(), "scratch"), "%s", deftsim_error_message());
    cr_assert_eq(deftsim_k_topk(ctx, NULL, big, 10, out, scr, sb), DEFTSIM_E_USAGE);
    cr_assert_eq(deftsim_k_topk(ctx, y, big, 10, NULL, scr, sb), DEFTSIM_E_USAGE);
    cr_assert_eq(deftsim_k_topk(ctx, y, big, 0, NULL, NULL, 0), DEFTSIM_OK);
    free(scr);
    free(y);
    deftsim_kctx_free(ctx);
    deftsim_kctx *bad = NULL;
    cr_assert_eq(deftsim_kctx_new(&bad, "no-such-backend", 1), DEFTSIM_E_UNSUPPORTED);
    cr_assert_null(bad);
    cr_assert_eq(deftsim_kctx_new(&bad, "cpu", 1000), DEFTSIM_E_USAGE);
}
