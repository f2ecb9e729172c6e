/* test_ops.c - absmax, norms, threshold filter and count, sampling, and the sparse
 * operations, each against a plain reference on every configuration. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kt.h"

/* Sizes: the tiny ones, powers of two and +11 around vector widths and block sizes, and two
 * large enough that two threads engage. */
static size_t test_sizes(size_t *out)
{
    size_t c = 0;
    for (size_t n = 0; n <= 4; n++) out[c++] = n;
    for (unsigned i = 3; i <= 13; i += 2) {
        out[c++] = (size_t)1 << i;
        out[c++] = ((size_t)1 << i) + 11;
    }
    out[c++] = ((size_t)1 << 20) + 11;
    out[c++] = (size_t)1 << 21;
    return c;
}

/* Runs the following block once per configuration with `ctx` and `cfg[ci]`. */
static kt_config cfg[16];
#define FOR_CONFIGS(OP)                                                                            \
    for (size_t ci = 0, ncfg = kt_configs(cfg, 16); ci < ncfg; ci++)                               \
        for (deftsim_kctx *ctx = kt_ctx(&cfg[ci]); ctx; deftsim_kctx_free(ctx), ctx = NULL)        \
            if (kt_supported(ctx, OP, cfg[ci].label))

static size_t count_nan(const float *x, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += isnan(x[i]) ? 1 : 0;
    return c;
}

/* Every backend this build has, where it can run, has every operation: its table comes from
 * kernels/kernels_ops.h, and an entry set to NULL by hand would skip that operation's tests
 * on it without a word. */
Test(ops, every_backend_has_every_op)
{
    for (size_t b = 0; b < deftsim_kernels_backend_count(); b++) {
        const char *name = deftsim_kernels_backend_name(b);
        if (!deftsim_kernels_backend_available(name)) continue;
        deftsim_kctx *ctx = NULL;
        cr_assert_eq(deftsim_kctx_new(&ctx, name, 1), DEFTSIM_OK, "%s: %s", name,
                     deftsim_error_message());
        for (int op = 0; op < DEFTSIM_KOP_COUNT; op++)
            cr_expect(deftsim_k_supports(ctx, (deftsim_kop)op), "%s lacks %s", name,
                      deftsim_kop_name((deftsim_kop)op));
        deftsim_kctx_free(ctx);
    }
}

Test(ops, absmax)
{
    size_t sizes[40], ns = test_sizes(sizes);
    static const int modes[] = {KT_NORMAL, KT_HEAVY, KT_ALL_ZERO, KT_NONFINITE};
    for (size_t si = 0; si < ns; si++)
        for (size_t m = 0; m < 4; m++) {
            size_t n = sizes[si];
            float *x = malloc((n + 1) * sizeof *x);
            cr_assert(x);
            kt_fill(x, n, (kt_mode)modes[m], kt_seed() + n + m);
            float want = 0.0f;
            for (size_t i = 0; i < n; i++)
                if (!isnan(x[i]) && fabsf(x[i]) > want) want = fabsf(x[i]);
            FOR_CONFIGS(DEFTSIM_KOP_ABSMAX)
            {
                float got = -1.0f;
                cr_assert_eq(deftsim_k_absmax(ctx, x, n, &got), DEFTSIM_OK);
                cr_assert(got == want && !signbit(got), "absmax n=%zu %s [%s]: %g, want %g", n,
                          kt_mode_name((kt_mode)modes[m]), cfg[ci].label, got, want);
                deftsim_kstats ks;
                deftsim_kctx_last(ctx, &ks);
                cr_assert_eq(ks.nan_count, count_nan(x, n));
            }
            free(x);
        }
}

/* Norms match a long double reference to rounding, are bit-identical on every
 * configuration, and propagate NaN and Inf. */
Test(ops, seg_norms)
{
    size_t n = ((size_t)1 << 21) + 11;
    float *x = malloc(n * sizeof *x);
    cr_assert(x);
    kt_fill(x, n, KT_HEAVY, kt_seed() + 3);
    kt_rng r;
    kt_rng_init(&r, kt_seed() + 4);
    deftsim_kseg segs[64];
    size_t nseg = 0;
    segs[nseg++] = (deftsim_kseg){0, n, 0};
    segs[nseg++] = (deftsim_kseg){5, 0, 0};
    segs[nseg++] = (deftsim_kseg){n - 1, 1, 0};
    while (nseg < 64) {
        size_t len = kt_below(&r, 3) == 0 ? kt_below(&r, 300000) : kt_below(&r, 5000);
        segs[nseg++] = (deftsim_kseg){kt_below(&r, n - len), len, 0};
    }
    double ref[64], first[64];
    for (size_t j = 0; j < nseg; j++) {
        long double s = 0;
        for (size_t i = 0; i < segs[j].len; i++)
            s += (long double)x[segs[j].offset + i] * x[segs[j].offset + i];
        ref[j] = (double)sqrtl(s);
    }
    int have_first = 0;
    FOR_CONFIGS(DEFTSIM_KOP_SEG_NORMS)
    {
        size_t sb;
        cr_assert_eq(deftsim_k_seg_norms_scratch(ctx, segs, nseg, &sb), DEFTSIM_OK);
        kt_buf out, scr;
        kt_buf_alloc(&out, nseg * sizeof(double));
        kt_buf_alloc(&scr, sb);
        cr_assert_eq(deftsim_k_seg_norms(ctx, x, n, segs, nseg, out.p, scr.p, sb), DEFTSIM_OK);
        cr_assert(kt_guard_ok(&out, cfg[ci].label) && kt_guard_ok(&scr, cfg[ci].label));
        const double *got = out.p;
        for (size_t j = 0; j < nseg; j++)
            cr_assert(fabs(got[j] - ref[j]) <= 1e-12 * ref[j], "norm %zu [%s]: %.17g, want %.17g",
                      j, cfg[ci].label, got[j], ref[j]);
        if (!have_first) {
            memcpy(first, got, nseg * sizeof *first);
            have_first = 1;
        } else {
            cr_assert(memcmp(first, got, nseg * sizeof *first) == 0,
                      "[%s]: norms differ in the last bits from the first configuration",
                      cfg[ci].label);
        }
        kt_buf_free(&out);
        kt_buf_free(&scr);
    }
    /* Non-finite values. */
    float y[100];
    for (int i = 0; i < 100; i++) y[i] = 1.0f;
    y[10] = NAN;
    y[60] = INFINITY;
    deftsim_kseg s3[] = {{0, 50, 0}, {50, 50, 0}, {0, 9, 0}};
    FOR_CONFIGS(DEFTSIM_KOP_SEG_NORMS)
    {
        size_t sb;
        cr_assert_eq(deftsim_k_seg_norms_scratch(ctx, s3, 3, &sb), DEFTSIM_OK);
        void *scr = malloc(sb + 1);
        double nrm[3];
        cr_assert_eq(deftsim_k_seg_norms(ctx, y, 100, s3, 3, nrm, scr, sb), DEFTSIM_OK);
        cr_assert(isnan(nrm[0]) && isinf(nrm[1]) && nrm[2] == 3.0, "%g %g %g", nrm[0], nrm[1], nrm[2]);
        deftsim_kstats ks;
        deftsim_kctx_last(ctx, &ks);
        cr_assert_eq(ks.nan_count, 1);
        free(scr);
    }
    free(x);
}

/* Fragment lists for the accumulate test: ascending and disjoint, with gaps. kind 0: one
 * fragment over everything; 1: fragments of one element (at most 5000); 2: empty fragments
 * between short ones; 3: many small fragments with random gaps; 4: none. */
static size_t acc_segs(size_t n, int kind, kt_rng *r, deftsim_kseg *segs, size_t cap)
{
    size_t c = 0, pos = 0;
    switch (kind) {
    case 0: segs[c++] = (deftsim_kseg){0, n, 0}; break;
    case 1:
        for (size_t i = 0; i < n && i < 5000 && c < cap; i++) segs[c++] = (deftsim_kseg){i, 1, 0};
        break;
    case 2:
        while (pos < n && c + 2 <= cap) {
            size_t len = 1 + kt_below(r, 9000);
            if (len > n - pos) len = n - pos;
            segs[c++] = (deftsim_kseg){pos, 0, 0};
            segs[c++] = (deftsim_kseg){pos, len, 0};
            pos += len;
        }
        break;
    case 3:
        while (pos < n && c < cap) {
            pos += kt_below(r, 40);
            if (pos >= n) break;
            size_t len = 1 + kt_below(r, 700);
            if (len > n - pos) len = n - pos;
            segs[c++] = (deftsim_kseg){pos, len, 0};
            pos += len;
        }
        break;
    default: break;
    }
    return c;
}

/* The fused accumulate: the new accumulator equals acc + g (or g, bit for bit) and
 * sqrt(sum of squares) equals seg_norms on it bit for bit, on every configuration (instruction
 * set, threads), for sizes 2^i and 2^i + 11 and several fragment lists. */
Test(ops, accumulate_fused_norms)
{
    static const unsigned pows[] = {0, 3, 5, 7, 12, 13, 16, 20};
    enum { CAP = 6000 };
    deftsim_kseg *segs = malloc(CAP * sizeof *segs);
    double *sumsq = malloc(CAP * sizeof(double)), *nrm = malloc(CAP * sizeof(double)),
           *first = malloc(CAP * sizeof(double));
    cr_assert(segs && sumsq && nrm && first);
    kt_rng r;
    kt_rng_init(&r, kt_seed() + 91);
    size_t tested = 0;
    for (size_t pi = 0; pi < sizeof pows / sizeof pows[0]; pi++)
        for (size_t plus = 0; plus <= 11; plus += 11) {
            size_t n = ((size_t)1 << pows[pi]) + plus;
            float *x0 = malloc(n * sizeof *x0), *g = malloc(n * sizeof *g),
                  *want = malloc(n * sizeof *want), *acc = malloc(n * sizeof *acc);
            cr_assert(x0 && g && want && acc);
            kt_fill(x0, n, KT_HEAVY, kt_seed() + n);
            kt_fill(g, n, (n & 1) ? KT_ALL_ZERO : KT_NORMAL, kt_seed() + n + 1);
            for (int kind = 0; kind < 5; kind++) {
                size_t nseg = acc_segs(n, kind, &r, segs, CAP);
                for (int mode = DEFTSIM_KACC_ADD; mode <= DEFTSIM_KACC_COPY; mode++) {
                    for (size_t i = 0; i < n; i++)
                        want[i] = mode == DEFTSIM_KACC_COPY ? g[i] : x0[i] + g[i];
                    int have_first = 0;
                    FOR_CONFIGS(DEFTSIM_KOP_ACCUMULATE)
                    {
                        size_t sb, nb;
                        cr_assert_eq(deftsim_k_accumulate_scratch(ctx, segs, nseg, &sb), DEFTSIM_OK);
                        cr_assert_eq(deftsim_k_seg_norms_scratch(ctx, segs, nseg, &nb), DEFTSIM_OK);
                        kt_buf scr;
                        kt_buf_alloc(&scr, sb > nb ? sb : nb);
                        memcpy(acc, x0, n * sizeof *acc);
                        cr_assert_eq(deftsim_k_accumulate(ctx, acc, g, n, mode, segs, nseg, sumsq,
                                                          scr.p, sb),
                                     DEFTSIM_OK, "%s", deftsim_error_message());
                        cr_assert(kt_guard_ok(&scr, cfg[ci].label));
                        cr_assert(memcmp(acc, want, n * sizeof *acc) == 0,
                                  "accumulate n=%zu kind %d mode %d [%s]: values differ", n, kind,
                                  mode, cfg[ci].label);
                        cr_assert_eq(deftsim_k_seg_norms(ctx, acc, n, segs, nseg, nrm, scr.p, nb),
                                     DEFTSIM_OK);
                        for (size_t j = 0; j < nseg; j++) {
                            double f = sqrt(sumsq[j]);
                            cr_assert(memcmp(&f, &nrm[j], sizeof f) == 0,
                                      "n=%zu kind %d fragment %zu [%s]: fused %.17g, separate %.17g",
                                      n, kind, j, cfg[ci].label, f, nrm[j]);
                        }
                        if (!have_first) {
                            memcpy(first, sumsq, nseg * sizeof *first);
                            have_first = 1;
                        } else {
                            cr_assert(memcmp(first, sumsq, nseg * sizeof *first) == 0,
                                      "n=%zu kind %d [%s]: sums differ from the first configuration",
                                      n, kind, cfg[ci].label);
                        }
                        kt_buf_free(&scr);
                        tested++;
                    }
                }
            }
            free(x0);
            free(g);
            free(want);
            free(acc);
        }
    cr_assert(tested > 0);
    /* Bad fragment lists and modes are refused with their reason. */
    FOR_CONFIGS(DEFTSIM_KOP_ACCUMULATE)
    {
        float a[8] = {0}, b[8] = {0};
        double s2[2];
        char scr[1024];
        deftsim_kseg bad[] = {{0, 5, 0}, {4, 2, 0}};
        cr_assert_eq(deftsim_k_accumulate(ctx, a, b, 8, DEFTSIM_KACC_ADD, bad, 2, s2, scr,
                                          sizeof scr),
                     DEFTSIM_E_INPUT);
        cr_assert(strstr(deftsim_error_message(), "ascending and disjoint"));
        cr_assert_eq(deftsim_k_accumulate(ctx, a, b, 8, 7, bad, 1, s2, scr, sizeof scr),
                     DEFTSIM_E_USAGE);
    }
    /* NaN and Inf: counted and propagated as seg_norms does. */
    float y[100], z[100];
    for (int i = 0; i < 100; i++) y[i] = 1.0f, z[i] = 0.0f;
    z[10] = NAN;
    z[60] = INFINITY;
    deftsim_kseg s2[] = {{0, 50, 0}, {50, 50, 0}};
    FOR_CONFIGS(DEFTSIM_KOP_ACCUMULATE)
    {
        float a[100];
        memcpy(a, y, sizeof a);
        size_t sb;
        cr_assert_eq(deftsim_k_accumulate_scratch(ctx, s2, 2, &sb), DEFTSIM_OK);
        void *scr = malloc(sb + 1);
        double q[2];
        cr_assert_eq(deftsim_k_accumulate(ctx, a, z, 100, DEFTSIM_KACC_ADD, s2, 2, q, scr, sb),
                     DEFTSIM_OK);
        cr_assert(isnan(q[0]) && isinf(q[1]), "%g %g", q[0], q[1]);
        deftsim_kstats ks;
        deftsim_kctx_last(ctx, &ks);
        cr_assert_eq(ks.nan_count, 1);
        free(scr);
    }
    free(segs);
    free(sumsq);
    free(nrm);
    free(first);
}

/* Threshold filter and count: every threshold kind, every capacity regime. */
Test(ops, filter_and_count)
{
    size_t sizes[40], ns = test_sizes(sizes);
    static const int modes[] = {KT_NORMAL, KT_TIES, KT_NONFINITE, KT_ALL_ZERO};
    for (size_t si = 0; si < ns; si++)
        for (size_t m = 0; m < 4; m++) {
            size_t n = sizes[si];
            float *x = malloc((n + 1) * sizeof *x);
            uint32_t *ref = malloc((n + 1) * sizeof *ref);
            cr_assert(x && ref);
            kt_fill(x, n, (kt_mode)modes[m], kt_seed() + 7 * n + m);
            const float ts[] = {0.0f, -0.0f, -INFINITY, -1.0f, 0.5f, 1.0f, 2.0f, 2.5f, INFINITY,
                                n ? fabsf(x[n / 2]) : 1.0f};
            /* Large sizes (where threads engage) take a few thresholds and modes. */
            int large = n > 100000;
            if (large && (modes[m] == KT_TIES || modes[m] == KT_ALL_ZERO)) {
                free(ref);
                free(x);
                continue;
            }
            for (size_t ti = 0; ti < sizeof ts / sizeof ts[0]; ti++) {
                float t = ts[ti];
                if (large && ti % 3 != 0) continue;
                if (isnan(t)) continue;
                size_t want = 0;
                for (size_t i = 0; i < n; i++)
                    if (!isnan(x[i]) && fabsf(x[i]) >= t) ref[want++] = (uint32_t)i;
                FOR_CONFIGS(DEFTSIM_KOP_FILTER_GE)
                {
                    size_t c = 12345;
                    cr_assert_eq(deftsim_k_count_ge(ctx, x, n, t, &c), DEFTSIM_OK);
                    cr_assert_eq(c, want, "count n=%zu t=%g %s [%s]: %zu, want %zu", n, t,
                                 kt_mode_name((kt_mode)modes[m]), cfg[ci].label, c, want);
                    const size_t caps[] = {want, want + 5, want / 2, 0};
                    for (size_t q = 0; q < 4; q++) {
                        size_t cap = caps[q];
                        kt_buf out;
                        kt_buf_alloc(&out, cap * sizeof(deftsim_kidx));
                        char label[200];
                        snprintf(label, sizeof label, "filter n=%zu t=%g cap=%zu %s [%s]", n, t, cap,
                                 kt_mode_name((kt_mode)modes[m]), cfg[ci].label);
                        cr_assert_eq(deftsim_k_filter_ge(ctx, x, n, t, out.p, cap, &c), DEFTSIM_OK);
                        cr_assert_eq(c, want, "%s: count %zu", label, c);
                        cr_assert(kt_guard_ok(&out, label), "%s: guard band", label);
                        size_t w = cap < want ? cap : want;
                        const uint32_t *got = out.p;
                        if (cap >= want) {
                            cr_assert(kt_same_set(got, ref, want, label), "%s", label);
                        } else {
                            /* Any w distinct matching indices. */
                            char *seen = calloc(n + 1, 1);
                            for (size_t i = 0; i < w; i++) {
                                cr_assert_lt(got[i], n, "%s", label);
                                cr_assert(!seen[got[i]], "%s: duplicate", label);
                                seen[got[i]] = 1;
                                cr_assert(!isnan(x[got[i]]) && fabsf(x[got[i]]) >= t, "%s", label);
                            }
                            free(seen);
                        }
                        kt_buf_free(&out);
                    }
                }
            }
            free(ref);
            free(x);
        }
    deftsim_kctx *ctx;
    cr_assert_eq(deftsim_kctx_new(&ctx, "cpu", 1), DEFTSIM_OK);
    float z[4] = {0};
    size_t c;
    cr_assert_eq(deftsim_k_count_ge(ctx, z, 4, NAN, &c), DEFTSIM_E_INPUT);
    cr_assert_eq(deftsim_k_filter_ge(ctx, z, 4, NAN, NULL, 0, &c), DEFTSIM_E_INPUT);
    deftsim_kctx_free(ctx);
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

Test(ops, sampling)
{
    size_t n = 100003;
    float *x = malloc(n * sizeof *x), *a = malloc(5000 * sizeof *a), *b = malloc(5000 * sizeof *b);
    cr_assert(x && a && b);
    kt_fill(x, n, KT_NONFINITE, kt_seed() + 11);
    int have = 0;
    FOR_CONFIGS(DEFTSIM_KOP_SAMPLE_STRIDED)
    {
        kt_buf out;
        kt_buf_alloc(&out, 3000 * sizeof(float));
        cr_assert_eq(deftsim_k_sample_strided(ctx, x, n, 17, 33, 3000, out.p), DEFTSIM_OK);
        cr_assert(kt_guard_ok(&out, "strided"));
        const float *o = out.p;
        size_t nan = 0;
        for (size_t i = 0; i < 3000; i++) {
            float v = fabsf(x[17 + i * 33]);
            nan += isnan(v) ? 1 : 0;
            cr_assert(memcmp(&o[i], &v, sizeof v) == 0, "strided sample %zu", i);
        }
        deftsim_kstats ks;
        deftsim_kctx_last(ctx, &ks);
        cr_assert_eq(ks.nan_count, nan);
        kt_buf_free(&out);
        /* Out of range: the last sample would be at 17 + 3030 * 33 > n. */
        cr_assert_eq(deftsim_k_sample_strided(ctx, x, n, 17, 33, 3031, a), DEFTSIM_E_INPUT);
        cr_assert_eq(deftsim_k_sample_strided(ctx, x, n, 0, 0, 1, a), DEFTSIM_E_INPUT);
        if (!deftsim_k_supports(ctx, DEFTSIM_KOP_SAMPLE_RANDOM)) continue;
        cr_assert_eq(deftsim_k_sample_random(ctx, x, n, 5000, 42, have ? b : a), DEFTSIM_OK);
        if (have)
            cr_assert(memcmp(a, b, 5000 * sizeof *a) == 0, "[%s]: random samples differ",
                      cfg[ci].label);
        have = 1;
    }
    /* Every random sample is |x| of some element; a different seed gives different samples;
     * with n == 1 every sample is that element. */
    uint32_t *mags = malloc(n * sizeof *mags);
    cr_assert(mags);
    for (size_t j = 0; j < n; j++) {
        float v = fabsf(x[j]);
        memcpy(&mags[j], &v, sizeof v);
    }
    qsort(mags, n, sizeof *mags, cmp_u32);
    for (size_t i = 0; i < 5000; i++) {
        uint32_t key;
        memcpy(&key, &a[i], sizeof key);
        cr_assert(bsearch(&key, mags, n, sizeof *mags, cmp_u32),
                  "random sample %zu is no element's magnitude", i);
    }
    free(mags);
    deftsim_kctx *ctx;
    cr_assert_eq(deftsim_kctx_new(&ctx, "cpu", 1), DEFTSIM_OK);
    cr_assert_eq(deftsim_k_sample_random(ctx, x, n, 5000, 43, b), DEFTSIM_OK);
    cr_assert(memcmp(a, b, 5000 * sizeof *a) != 0);
    float one = -2.5f;
    cr_assert_eq(deftsim_k_sample_random(ctx, &one, 1, 100, 7, b), DEFTSIM_OK);
    for (int i = 0; i < 100; i++) cr_assert_eq(b[i], 2.5f);
    cr_assert_eq(deftsim_k_sample_random(ctx, x, 0, 1, 7, b), DEFTSIM_E_INPUT);
    deftsim_kctx_free(ctx);
    free(x);
    free(a);
    free(b);
}

/* gather, zero_at, scatter_add with duplicates against sequential references; a bad index
 * fails the call and changes nothing. */
Test(ops, gather_zero_scatter)
{
    const size_t ns[] = {1, 17, 5000, ((size_t)1 << 20) + 11};
    for (size_t si = 0; si < 4; si++) {
        size_t n = ns[si], m = n < 1000 ? 3 * n : n / 2 + 3;
        float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y), *ref = malloc(n * sizeof *ref);
        float *vals = malloc(m * sizeof *vals);
        uint32_t *idx = malloc(m * sizeof *idx);
        cr_assert(x && y && ref && vals && idx);
        kt_fill(x, n, KT_NONFINITE, kt_seed() + 21 + si);
        kt_fill(vals, m, KT_NORMAL, kt_seed() + 22 + si);
        kt_rng r;
        kt_rng_init(&r, kt_seed() + 23 + si);
        for (size_t i = 0; i < m; i++) idx[i] = (uint32_t)kt_below(&r, n < 64 ? n : 64 + n / 2);
        FOR_CONFIGS(DEFTSIM_KOP_GATHER)
        {
            kt_buf out;
            kt_buf_alloc(&out, m * sizeof(float));
            cr_assert_eq(deftsim_k_gather(ctx, x, n, idx, m, out.p), DEFTSIM_OK);
            cr_assert(kt_guard_ok(&out, "gather"));
            size_t nan = 0;
            for (size_t i = 0; i < m; i++) {
                const float *o = out.p;
                nan += isnan(x[idx[i]]) ? 1 : 0;
                cr_assert(memcmp(&o[i], &x[idx[i]], sizeof(float)) == 0, "gather %zu [%s]", i,
                          cfg[ci].label);
            }
            deftsim_kstats ks;
            deftsim_kctx_last(ctx, &ks);
            cr_assert_eq(ks.nan_count, nan);
            kt_buf_free(&out);

            if (deftsim_k_supports(ctx, DEFTSIM_KOP_ZERO_AT)) {
                memcpy(y, x, n * sizeof *y);
                memcpy(ref, x, n * sizeof *ref);
                for (size_t i = 0; i < m; i++) ref[idx[i]] = 0.0f;
                cr_assert_eq(deftsim_k_zero_at(ctx, y, n, idx, m), DEFTSIM_OK);
                cr_assert(memcmp(y, ref, n * sizeof *y) == 0, "zero_at n=%zu [%s]", n, cfg[ci].label);
            }
            if (deftsim_k_supports(ctx, DEFTSIM_KOP_SCATTER_ADD)) {
                kt_fill(y, n, KT_NORMAL, kt_seed() + 24);
                memcpy(ref, y, n * sizeof *ref);
                for (size_t i = 0; i < m; i++) ref[idx[i]] += vals[i];
                cr_assert_eq(deftsim_k_scatter_add(ctx, y, n, idx, vals, m), DEFTSIM_OK);
                cr_assert(memcmp(y, ref, n * sizeof *y) == 0, "scatter_add n=%zu [%s]", n,
                          cfg[ci].label);
            }
            /* One index out of range: error, nothing written. */
            uint32_t saved = idx[m / 2];
            idx[m / 2] = (uint32_t)n;
            memcpy(y, x, n * sizeof *y);
            cr_assert_eq(deftsim_k_zero_at(ctx, y, n, idx, m), DEFTSIM_E_INPUT);
            cr_assert_eq(deftsim_k_scatter_add(ctx, y, n, idx, vals, m), DEFTSIM_E_INPUT);
            cr_assert(memcmp(y, x, n * sizeof *y) == 0, "a failed call changed x");
            cr_assert_eq(deftsim_k_gather(ctx, x, n, idx, m, ref), DEFTSIM_E_INPUT);
            cr_assert(strstr(deftsim_error_message(), "outside"), "%s", deftsim_error_message());
            idx[m / 2] = saved;
        }
        free(x);
        free(y);
        free(ref);
        free(vals);
        free(idx);
    }
}

Test(ops, union_sorted)
{
    const size_t ns[] = {1, 63, 64, 65, 1000, ((size_t)1 << 20) + 11};
    for (size_t si = 0; si < 6; si++) {
        size_t n = ns[si];
        kt_rng r;
        kt_rng_init(&r, kt_seed() + 31 + si);
        size_t nl = 1 + kt_below(&r, 8), total = 0;
        deftsim_kidx *lists[8];
        size_t lens[8];
        for (size_t l = 0; l < nl; l++) {
            lens[l] = kt_below(&r, n < 100 ? 3 * n : n / 8);
            lists[l] = malloc((lens[l] + 1) * sizeof(deftsim_kidx));
            for (size_t i = 0; i < lens[l]; i++) lists[l][i] = (uint32_t)kt_below(&r, n);
            if (l % 2) qsort(lists[l], lens[l], sizeof(deftsim_kidx), cmp_u32);
            total += lens[l];
        }
        uint32_t *ref = malloc((total + 1) * sizeof *ref);
        size_t u = 0;
        for (size_t l = 0; l < nl; l++)
            for (size_t i = 0; i < lens[l]; i++) ref[u++] = lists[l][i];
        qsort(ref, u, sizeof *ref, cmp_u32);
        size_t w = 0;
        for (size_t i = 0; i < u; i++)
            if (w == 0 || ref[w - 1] != ref[i]) ref[w++] = ref[i];
        FOR_CONFIGS(DEFTSIM_KOP_UNION)
        {
            size_t sb;
            cr_assert_eq(deftsim_k_union_scratch(ctx, n, &sb), DEFTSIM_OK);
            const size_t caps[] = {w, w / 3, 0};
            for (size_t q = 0; q < 3; q++) {
                kt_buf out, scr;
                kt_buf_alloc(&out, caps[q] * sizeof(deftsim_kidx));
                kt_buf_alloc(&scr, sb);
                size_t c = 0;
                cr_assert_eq(deftsim_k_union(ctx, n, (const deftsim_kidx *const *)lists, lens, nl,
                                             out.p, caps[q], &c, scr.p, sb),
                             DEFTSIM_OK);
                cr_assert_eq(c, w, "union n=%zu [%s]: %zu, want %zu", n, cfg[ci].label, c, w);
                cr_assert(kt_guard_ok(&out, "union out") && kt_guard_ok(&scr, "union scratch"));
                /* Sorted: the smallest caps[q] of the union, in order. */
                cr_assert(memcmp(out.p, ref, caps[q] * sizeof *ref) == 0,
                          "union n=%zu cap=%zu [%s]", n, caps[q], cfg[ci].label);
                kt_buf_free(&out);
                kt_buf_free(&scr);
            }
            uint32_t bad = (uint32_t)n;
            const deftsim_kidx *bl[] = {&bad};
            size_t blen[] = {1}, c;
            void *scr = malloc(sb);
            uint32_t o1[2];
            cr_assert_eq(deftsim_k_union(ctx, n, bl, blen, 1, o1, 2, &c, scr, sb), DEFTSIM_E_INPUT);
            free(scr);
        }
        for (size_t l = 0; l < nl; l++) free(lists[l]);
        free(ref);
    }
}

/* Reference merge: entries of a then b, summed per index in that order, ranked by |sum|
 * (NaN lowest), ties to the lower index. */
typedef struct {
    uint32_t idx;
    float val;
} pair;

static int cmp_pair_rank(const void *a, const void *b)
{
    const pair *x = a, *y = b;
    uint32_t rx = kt_rank(x->val), ry = kt_rank(y->val);
    if (rx != ry) return rx > ry ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

Test(ops, merge_topk)
{
    for (int rep = 0; rep < 30; rep++) {
        kt_rng r;
        kt_rng_init(&r, kt_seed() + 41 + (uint64_t)rep);
        size_t na = kt_below(&r, rep < 10 ? 6 : 3000), nb = kt_below(&r, rep < 10 ? 6 : 3000);
        size_t universe = 1 + (rep % 3 == 0 ? (na + nb) : 10 * (na + nb));
        if (rep == 29) universe = (size_t)1 << 31; /* indices with the high digits set */
        uint32_t *ia = malloc((na + 1) * 4), *ib = malloc((nb + 1) * 4);
        float *va = malloc((na + 1) * 4), *vb = malloc((nb + 1) * 4);
        cr_assert(ia && ib && va && vb);
        kt_fill(va, na, rep % 4 == 1 ? KT_TIES : rep % 4 == 2 ? KT_NONFINITE : KT_NORMAL, 900 + rep);
        kt_fill(vb, nb, KT_NORMAL, 901 + rep);
        /* distinct indices within each set, as gTop-k's sets are */
        for (size_t i = 0; i < na; i++) ia[i] = (uint32_t)((kt_below(&r, universe / (na + 1) + 1)) * (na + 1) + i) % (uint32_t)universe;
        for (size_t i = 0; i < nb; i++) ib[i] = (uint32_t)((kt_below(&r, universe / (nb + 1) + 1)) * (nb + 1) + i) % (uint32_t)universe;
        qsort(ia, na, 4, cmp_u32);
        for (size_t i = 1; i < na; i++) if (ia[i] == ia[i - 1]) ia[i] = ia[i - 1] + 1;
        pair *all = malloc((na + nb + 1) * sizeof *all);
        size_t u = 0;
        for (size_t s = 0; s < 2; s++) {
            size_t cnt = s ? nb : na;
            for (size_t i = 0; i < cnt; i++) {
                uint32_t id = s ? ib[i] : ia[i];
                float v = s ? vb[i] : va[i];
                size_t j = 0;
                while (j < u && all[j].idx != id) j++;
                if (j == u) all[u++] = (pair){id, v};
                else all[j].val += v;
            }
        }
        qsort(all, u, sizeof *all, cmp_pair_rank);
        const size_t ks[] = {0, 1, 7, u, u + 5};
        FOR_CONFIGS(DEFTSIM_KOP_MERGE_TOPK)
        {
            size_t sb;
            cr_assert_eq(deftsim_k_merge_topk_scratch(ctx, na, nb, &sb), DEFTSIM_OK);
            for (size_t q = 0; q < 5; q++) {
                size_t k = ks[q], want = k < u ? k : u, got_n = 777;
                kt_buf oi, ov, scr;
                kt_buf_alloc(&oi, want * 4);
                kt_buf_alloc(&ov, want * 4);
                kt_buf_alloc(&scr, sb);
                cr_assert_eq(deftsim_k_merge_topk(ctx, ia, va, na, ib, vb, nb, k, oi.p, ov.p,
                                                  &got_n, scr.p, sb),
                             DEFTSIM_OK, "%s", deftsim_error_message());
                char label[120];
                snprintf(label, sizeof label, "merge rep %d k=%zu [%s]", rep, k, cfg[ci].label);
                cr_assert_eq(got_n, want, "%s: %zu entries", label, got_n);
                cr_assert(kt_guard_ok(&oi, label) && kt_guard_ok(&ov, label) && kt_guard_ok(&scr, label));
                uint32_t *refi = malloc((want + 1) * 4);
                for (size_t i = 0; i < want; i++) refi[i] = all[i].idx;
                cr_assert(kt_same_set(oi.p, refi, want, label), "%s", label);
                const uint32_t *gi = oi.p;
                const float *gv = ov.p;
                for (size_t i = 0; i < want; i++) {
                    size_t j = 0;
                    while (all[j].idx != gi[i]) j++;
                    cr_assert(memcmp(&gv[i], &all[j].val, 4) == 0, "%s: value at %u", label, gi[i]);
                }
                free(refi);
                kt_buf_free(&oi);
                kt_buf_free(&ov);
                kt_buf_free(&scr);
            }
        }
        free(all);
        free(ia);
        free(ib);
        free(va);
        free(vb);
    }
}

/* deftsim_kctx_bytes: each operation's inputs read once and outputs written once, by its
 * sizes; an element reached by index counts the cache line it lies in, spread evenly; a
 * failed call counts nothing; deftsim_kctx_touch adds a caller's own. */
Test(ops, bytes_touched)
{
    const size_t n = 1 << 16, k = 100;
    float *x = malloc(n * sizeof *x), *v = malloc(n * sizeof *v);
    deftsim_kidx *idx = malloc(n * sizeof *idx);
    cr_assert(x && v && idx);
    for (size_t i = 0; i < n; i++) x[i] = (float)((i * 2654435761u) % 1000003) - 500000.0f;
    deftsim_kctx *ctx = NULL;
    cr_assert_eq(deftsim_kctx_new(&ctx, "cpu", 1), DEFTSIM_OK);
    cr_assert_eq(deftsim_kctx_bytes(ctx), 0);
    size_t sb = 0;
    cr_assert_eq(deftsim_k_topk_scratch(ctx, n, k, &sb), DEFTSIM_OK);
    void *scr = malloc(sb ? sb : 1);
    cr_assert(scr);
    cr_assert_eq(deftsim_k_topk(ctx, x, n, k, idx, scr, sb), DEFTSIM_OK);
    uint64_t want = 4 * n + 4 * k;
    cr_expect_eq(deftsim_kctx_bytes(ctx), want, "top-k: %llu bytes, want %llu",
                 (unsigned long long)deftsim_kctx_bytes(ctx), (unsigned long long)want);
    /* Of the array's L = 4096 lines, m indices count L (1 - (1 - 1/L)^m): for m = 16 nearly
     * 16 lines, for m = n / 4 98.2 % of them. */
    for (size_t i = 0; i < 16; i++) idx[i] = (deftsim_kidx)(i * 16);
    uint64_t b0 = deftsim_kctx_bytes(ctx);
    cr_assert_eq(deftsim_k_gather(ctx, x, n, idx, 16, v), DEFTSIM_OK);
    uint64_t lines = (uint64_t)(4096.0 * -expm1(16.0 * log1p(-1.0 / 4096)) * 64.0);
    cr_expect_eq(deftsim_kctx_bytes(ctx) - b0, 16 * 8 + lines, "gather of 16: %llu",
                 (unsigned long long)(deftsim_kctx_bytes(ctx) - b0));
    for (size_t i = 0; i < n / 4; i++) idx[i] = (deftsim_kidx)(i * 4);
    b0 = deftsim_kctx_bytes(ctx);
    cr_assert_eq(deftsim_k_zero_at(ctx, v, n, idx, n / 4), DEFTSIM_OK);
    uint64_t got = deftsim_kctx_bytes(ctx) - b0;
    uint64_t lines_q = (uint64_t)(4096.0 * -expm1(16384.0 * log1p(-1.0 / 4096)) * 64.0);
    cr_expect_eq(got, 4 * (n / 4) + lines_q, "zero_at of n / 4: %llu", (unsigned long long)got);
    cr_expect(lines_q > 0.98 * 4 * n && lines_q <= 4 * n, "%llu of %zu bytes",
              (unsigned long long)lines_q, 4 * n);
    /* A refused call touches nothing; a caller's own loop adds what it says. */
    b0 = deftsim_kctx_bytes(ctx);
    cr_assert_neq(deftsim_k_topk(ctx, x, n, n + 1, idx, scr, sb), DEFTSIM_OK);
    cr_expect_eq(deftsim_kctx_bytes(ctx), b0);
    deftsim_kctx_touch(ctx, 12345);
    cr_expect_eq(deftsim_kctx_bytes(ctx), b0 + 12345);
    deftsim_kctx_touch(NULL, 1);
    cr_expect_eq(deftsim_kctx_bytes(NULL), 0);
    deftsim_kctx_free(ctx);
    free(scr);
    free(x);
    free(v);
    free(idx);
}
