/* test_gen.c - Philox-4x32-10 known answers and the synthetic generator: determinism, seeds,
 * slice independence, every kernel against the scalar reference, statistics of the model. */
#include <criterion/criterion.h>

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "deftsim_gen.h"
#include "deftsim_philox.h"
#include "deftsim_util.h"

/* ---- Philox --------------------------------------------------------------------------- */

/* Random123's kat_vectors for philox4x32 with 10 rounds: counter, key, expected output. */
static const struct {
    uint32_t ctr[4], key[2], out[4];
} kat[] = {
    {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
    {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
     {0xffffffff, 0xffffffff},
     {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
    {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
     {0xa4093822, 0x299f31d0},
     {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
};

Test(philox, known_answers)
{
    for (size_t i = 0; i < sizeof kat / sizeof kat[0]; i++) {
        deftsim_philox_ctr c = {{kat[i].ctr[0], kat[i].ctr[1], kat[i].ctr[2], kat[i].ctr[3]}};
        deftsim_philox_key k = {{kat[i].key[0], kat[i].key[1]}};
        deftsim_philox_ctr r = deftsim_philox4x32_10(c, k);
        for (int j = 0; j < 4; j++)
            cr_assert_eq(r.v[j], kat[i].out[j], "vector %zu word %d: %08x, expected %08x", i, j,
                         r.v[j], kat[i].out[j]);
        uint32_t w[4];
        deftsim_philox4x32_10_words(c.v[0], c.v[1], c.v[2], c.v[3], k.v[0], k.v[1], w);
        cr_assert_eq(memcmp(w, kat[i].out, sizeof w), 0, "words form differs, vector %zu", i);
    }
}

Test(philox, u01_double_range)
{
    cr_assert_eq(deftsim_philox_u01_double(0, 0), 0.0);
    double top = deftsim_philox_u01_double(0xffffffffu, 0xffffffffu);
    cr_assert(top < 1.0 && top > 1.0 - 1e-15, "%.17g", top);
}

/* ---- helpers -------------------------------------------------------------------------- */

/* Odd sizes so that layers start and end inside 32-element groups. */
static const char small_csv[] = "index,name,shape,numel\n"
                                "0,conv.weight,7x3x3x3,189\n"
                                "1,conv.bias,7,7\n"
                                "2,bn.weight,7,7\n"
                                "3,fc.weight,33x61,2013\n"
                                "4,fc.bias,33,33\n"
                                "5,big.weight,200x300,60000\n";

static deftsim_model *small_model(void)
{
    deftsim_model *m;
    deftsim_status st = deftsim_model_parse_csv(small_csv, strlen(small_csv), "small.csv", "small", &m);
    cr_assert_eq(st, DEFTSIM_OK, "%s", deftsim_error_message());
    return m;
}

static deftsim_gen *new_gen(const deftsim_model *m, const deftsim_gen_params *p)
{
    deftsim_gen *g;
    deftsim_status st = deftsim_gen_new(m, p, &g);
    cr_assert_eq(st, DEFTSIM_OK, "%s", deftsim_error_message());
    return g;
}

static float *fill_all(const deftsim_gen *g, uint64_t it, uint32_t w)
{
    uint64_t n = deftsim_gen_model(g)->numel;
    float *x = malloc(n * sizeof *x);
    cr_assert(x);
    deftsim_status st = deftsim_gen_fill(g, it, w, 0, n, x);
    cr_assert_eq(st, DEFTSIM_OK, "%s", deftsim_error_message());
    return x;
}

static uint64_t test_seed(void)
{
    const char *e = getenv("DEFTSIM_TEST_SEED");
    uint64_t s;
    if (e && deftsim_parse_u64(e, &s) == 0) return s;
    return (uint64_t)time(NULL) ^ ((uint64_t)clock() << 20);
}

/* xorshift64*: the tests' own choices of slices. */
static uint64_t rnd(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1Dull;
}

/* ---- parameters ----------------------------------------------------------------------- */

Test(gen, defaults)
{
    deftsim_gen_params p;
    memset(&p, 0xff, sizeof p);
    deftsim_gen_params_default(&p);
    cr_assert_eq(p.seed, 1);
    cr_assert_eq(p.scale_decades, 3.0);
    cr_assert_eq(p.signal, 0.5);
    cr_assert_eq(p.tail, 4.0);
    cr_assert_eq(p.drift, 0.01);
    cr_assert_eq(p.bias_shift, 1.0);
    cr_assert_eq(deftsim_gen_params_check(&p), DEFTSIM_OK);
}

Test(gen, params_rejected_with_field_name)
{
    static const struct {
        const char *field;
        double value;
    } bad[] = {
        {"scale_decades", -0.5}, {"scale_decades", NAN}, {"signal", -0.01}, {"signal", 1.5},
        {"tail", 2.0},           {"tail", 1.0},          {"tail", -3},      {"tail", INFINITY},
        {"drift", -1e-3},        {"drift", 0.5},         {"bias_shift", 7}, {"bias_shift", NAN},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        deftsim_gen_params p;
        deftsim_gen_params_default(&p);
        double *f = !strcmp(bad[i].field, "scale_decades") ? &p.scale_decades
                    : !strcmp(bad[i].field, "signal")      ? &p.signal
                    : !strcmp(bad[i].field, "tail")        ? &p.tail
                    : !strcmp(bad[i].field, "drift")       ? &p.drift
                                                           : &p.bias_shift;
        *f = bad[i].value;
        cr_assert_eq(deftsim_gen_params_check(&p), DEFTSIM_E_INPUT, "%s = %g accepted",
                     bad[i].field, bad[i].value);
        char want[64];
        snprintf(want, sizeof want, "synthetic.%s", bad[i].field);
        cr_assert(strstr(deftsim_error_message(), want), "message '%s' lacks '%s'",
                  deftsim_error_message(), want);
        deftsim_model *m = small_model();
        deftsim_gen *g = (deftsim_gen *)1;
        cr_assert_eq(deftsim_gen_new(m, &p, &g), DEFTSIM_E_INPUT);
        cr_assert_null(g);
        deftsim_model_free(m);
    }
    deftsim_gen_params p;
    deftsim_gen_params_default(&p);
    p.tail = 0; /* Gaussian */
    cr_assert_eq(deftsim_gen_params_check(&p), DEFTSIM_OK);
    p.tail = 2.5;
    cr_assert_eq(deftsim_gen_params_check(&p), DEFTSIM_OK);
}

/* ---- determinism ---------------------------------------------------------------------- */

Test(gen, same_seed_same_bytes)
{
    deftsim_model *m = small_model();
    deftsim_gen_params p;
    deftsim_gen_params_default(&p);
    p.seed = 0x123456789abcdefull;
    deftsim_gen *a = new_gen(m, &p), *b = new_gen(m, &p);
    for (uint64_t it = 0; it < 3; it++) {
        for (uint32_t w = 0; w < 3; w++) {
            float *x = fill_all(a, it, w), *y = fill_all(b, it, w);
            cr_assert_eq(memcmp(x, y, m->numel * sizeof *x), 0, "iteration %" PRIu64 " worker %u",
                         it, w);
            free(x);
            free(y);
        }
    }
    deftsim_gen_free(a);
    deftsim_gen_free(b);
    deftsim_model_free(m);
}

/* Fraction of positions where two gradients differ in their bits. */
static double frac_differ(const float *x, const float *y, uint64_t n)
{
    uint64_t d = 0;
    for (uint64_t i = 0; i < n; i++) d += memcmp(&x[i], &y[i], sizeof x[i]) != 0;
    return (double)d / (double)n;
}

Test(gen, different_seed_worker_iteration_differ)
{
    deftsim_model *m = small_model();
    deftsim_gen_params p;
    deftsim_gen_params_default(&p);
    deftsim_gen *a = new_gen(m, &p);
    p.seed = 2;
    deftsim_gen *b = new_gen(m, &p);
    p.seed = 1ull << 32; /* only the key's high word differs from seed 0 */
    deftsim_gen *c = new_gen(m, &p);
    p.seed = 0;
    deftsim_gen *d = new_gen(m, &p);
    float *a00 = fill_all(a, 0, 0), *b00 = fill_all(b, 0, 0), *a01 = fill_all(a, 0, 1),
          *a10 = fill_all(a, 1, 0), *c00 = fill_all(c, 0, 0), *d00 = fill_all(d, 0, 0);
    cr_assert_gt(frac_differ(a00, b00, m->numel), 0.999, "seeds 1 and 2");
    cr_assert_gt(frac_differ(c00, d00, m->numel), 0.999, "seeds 2^32 and 0");
    cr_assert_gt(frac_differ(a00, a01, m->numel), 0.999, "workers 0 and 1");
    cr_assert_gt(frac_differ(a00, a10, m->numel), 0.999, "iterations 0 and 1");
    free(a00); free(b00); free(a01); free(a10); free(c00); free(d00);
    deftsim_gen_free(a); deftsim_gen_free(b); deftsim_gen_free(c); deftsim_gen_free(d);
    deftsim_model_free(m);
}

/* Every kernel, every slice: filling [a, b) in random pieces, or all at once, or element by
 * element through the scalar reference gives the same bits. */
Test(gen, slice_independence_and_kernels)
{
    uint64_t seed = test_seed();
    fprintf(stderr, "gen.slice_independence_and_kernels: DEFTSIM_TEST_SEED=%" PRIu64 "\n", seed);
    uint64_t s = seed | 1;
    deftsim_model *m = small_model();
    deftsim_gen_params p;
    deftsim_gen_params_default(&p);
    p.seed = rnd(&s);
    deftsim_gen *g = new_gen(m, &p);
    const deftsim_gen_consts *c = deftsim_gen_get_consts(g);
    uint64_t n = m->numel;
    float *ref = malloc(n * sizeof *ref), *x = malloc(n * sizeof *x);
    cr_assert(ref && x);
    uint64_t it = rnd(&s) % 1000;
    uint32_t w = (uint32_t)(rnd(&s) % 64);
    for (size_t L = 0; L < m->nlayers; L++) {
        float scale = deftsim_gen_layer_scale(g, L, it);
        for (uint64_t i = 0; i < m->layers[L].numel; i++) {
            uint64_t e = m->layers[L].offset + i;
            ref[e] = deftsim_gen_element(c, e, w, (uint32_t)it, scale);
        }
    }
    size_t tried = 0;
    for (size_t k = 0; k < deftsim_gen_kernel_count(); k++) {
        const char *kn = deftsim_gen_kernel_name(k);
        deftsim_status st = deftsim_gen_use_kernel(g, kn);
        if (st == DEFTSIM_E_UNSUPPORTED) {
            fprintf(stderr, "kernel %s: not on this CPU, skipped\n", kn);
            continue;
        }
        cr_assert_eq(st, DEFTSIM_OK, "%s", deftsim_error_message());
        cr_assert_str_eq(deftsim_gen_kernel(g), kn);
        tried++;
        memset(x, 0, n * sizeof *x);
        cr_assert_eq(deftsim_gen_fill(g, it, w, 0, n, x), DEFTSIM_OK);
        for (uint64_t i = 0; i < n; i++)
            cr_assert_eq(memcmp(&x[i], &ref[i], 4), 0, "kernel %s element %" PRIu64 ": %.9g vs "
                         "reference %.9g", kn, i, x[i], ref[i]);
        for (int round = 0; round < 20; round++) {
            uint64_t a = rnd(&s) % n, b = a + rnd(&s) % (n - a + 1);
            memset(x, 0xff, n * sizeof *x);
            for (uint64_t at = a; at < b;) {
                uint64_t len = 1 + rnd(&s) % (round % 2 ? 7 : 700);
                if (len > b - at) len = b - at;
                cr_assert_eq(deftsim_gen_fill(g, it, w, at, len, x + at), DEFTSIM_OK);
                at += len;
            }
            cr_assert_eq(memcmp(x + a, ref + a, (b - a) * sizeof *x), 0,
                         "kernel %s: pieces of [%" PRIu64 ", %" PRIu64 ") differ", kn, a, b);
        }
    }
    cr_assert_geq(tried, 2, "the reference and at least one vector kernel");
    free(ref);
    free(x);
    deftsim_gen_free(g);
    deftsim_model_free(m);
}

Test(gen, fill_workers_equals_fill)
{
    deftsim_model *m = small_model();
    deftsim_gen_params p;
    deftsim_gen_params_default(&p);
    p.seed = 77;
    deftsim_gen *g = new_gen(m, &p);
    enum { P = 5 };
    uint64_t a = 150, n = m->numel - a - 3;
    float *outs[P];
    for (int w = 0; w < P; w++) cr_assert(outs[w] = malloc(n * sizeof(float)));
    cr_assert_eq(deftsim_gen_fill_workers(g, 9, 3, P, a, n, outs), DEFTSIM_OK);
    float *one = malloc(n * sizeof *one);
    for (uint32_t w = 0; w < P; w++) {
        cr_assert_eq(deftsim_gen_fill(g, 9, 3 + w, a, n, one), DEFTSIM_OK);
        cr_assert_eq(memcmp(one, outs[w], n * sizeof *one), 0, "worker %u", 3 + w);
        free(outs[w]);
    }
    free(one);
    /* signal = 1 and signal = 0 skip a stream: still the reference's bits. */
    for (int k = 0; k < 2; k++) {
        p.signal = k;
        deftsim_gen *h = new_gen(m, &p);
        const deftsim_gen_consts *c = deftsim_gen_get_consts(h);
        float *x = fill_all(h, 4, 2);
        for (uint64_t i = 0; i < m->numel; i += 13) {
            size_t L = 0;
            while (m->layers[L].offset + m->layers[L].numel <= i) L++;
            float r = deftsim_gen_element(c, i, 2, 4, deftsim_gen_layer_scale(h, L, 4));
            cr_assert_eq(memcmp(&r, &x[i], 4), 0, "signal %d element %" PRIu64, k, i);
        }
        free(x);
        deftsim_gen_free(h);
    }
    deftsim_gen_free(g);
    deftsim_model_free(m);
}

Test(gen, fill_rejects_bad_ranges)
{
    deftsim_model *m = small_model();
    deftsim_gen_params p;
    deftsim_gen_params_default(&p);
    deftsim_gen *g = new_gen(m, &p);
    float x[8];
    cr_assert_eq(deftsim_gen_fill(g, 0, 0, m->numel - 4, 8, x), DEFTSIM_E_INPUT);
    cr_assert(strstr(deftsim_error_message(), "outside model 'small'"), "%s",
              deftsim_error_message());
    cr_assert_eq(deftsim_gen_fill(g, 0, 0, UINT64_MAX, 2, x), DEFTSIM_E_INPUT);
    cr_assert_eq(deftsim_gen_fill(g, 1ull << 32, 0, 0, 8, x), DEFTSIM_E_INPUT);
    cr_assert(strstr(deftsim_error_message(), "iteration 4294967296"), "%s",
              deftsim_error_message());
    cr_assert_eq(deftsim_gen_fill(g, 0xFFFFFFFFull, 0, m->numel - 8, 8, x), DEFTSIM_OK);
    cr_assert_eq(deftsim_gen_fill(g, 0, 0, m->numel, 0, x), DEFTSIM_OK);
    cr_assert_eq(deftsim_gen_use_kernel(g, "nonsense"), DEFTSIM_E_INPUT);
    deftsim_gen_free(g);
    deftsim_model_free(m);
}

/* ---- the model's statistics ----------------------------------------------------------- */

static deftsim_model *one_layer(uint64_t n, int ndim)
{
    char csv[128];
    if (ndim == 1) snprintf(csv, sizeof csv, "index,name,shape,numel\n0,x,%" PRIu64 ",%" PRIu64 "\n", n, n);
    else snprintf(csv, sizeof csv, "index,name,shape,numel\n0,x,%" PRIu64 "x1,%" PRIu64 "\n", n, n);
    deftsim_model *m;
    cr_assert_eq(deftsim_model_parse_csv(csv, strlen(csv), "one", "one", &m), DEFTSIM_OK);
    return m;
}

Test(gen, moments_and_worker_correlation)
{
    const uint64_t n = 1u << 20;
    deftsim_model *m = one_layer(n, 2);
    const double tails[] = {0, 4, 3};
    for (size_t k = 0; k < 3; k++) {
        deftsim_gen_params p;
        deftsim_gen_params_default(&p);
        p.tail = tails[k];
        p.signal = 0.3;
        deftsim_gen *g = new_gen(m, &p);
        float *x = fill_all(g, 5, 0), *y = fill_all(g, 5, 1);
        double s = deftsim_gen_layer_scale(g, 0, 5);
        double sx = 0, sxx = 0, sxy = 0, syy = 0;
        uint64_t beyond4 = 0;
        for (uint64_t i = 0; i < n; i++) {
            double a = x[i] / s, b = y[i] / s;
            sx += a;
            sxx += a * a;
            syy += b * b;
            sxy += a * b;
            beyond4 += fabs(a) > 4;
        }
        double mean = sx / n, var = sxx / n, corr = sxy / sqrt(sxx * syy);
        double f4 = (double)beyond4 / n;
        fprintf(stderr, "tail %g: mean %.4f var %.4f corr %.4f P(|x|>4) %.2e\n", tails[k], mean,
                var, corr, f4);
        cr_assert_lt(fabs(mean), 0.01, "tail %g: mean %g", tails[k], mean);
        /* t(3) and t(4) have heavy enough tails that the sample variance wanders more. */
        cr_assert_lt(fabs(var - 1), tails[k] == 0 ? 0.01 : 0.1, "tail %g: variance %g", tails[k], var);
        cr_assert_lt(fabs(corr - 0.3), 0.02, "tail %g: worker correlation %g", tails[k], corr);
        if (tails[k] == 0)
            cr_assert_lt(f4, 2e-4, "Gaussian P(|x| > 4 sd) = 6.3e-5, got %g", f4);
        else
            cr_assert_gt(f4, 1e-3, "t(%g) should put more mass beyond 4 sd, got %g", tails[k], f4);
        free(x);
        free(y);
        deftsim_gen_free(g);
    }
    deftsim_model_free(m);
}

/* Indices of the k largest |x|, as a 0/1 mask. */
static unsigned char *topk_mask(const float *x, uint64_t n, uint64_t k)
{
    float *a = malloc(n * sizeof *a);
    for (uint64_t i = 0; i < n; i++) a[i] = fabsf(x[i]);
    /* threshold by bisection on the float ordering: simple and enough for a test */
    float lo = 0, hi = 0;
    for (uint64_t i = 0; i < n; i++) if (a[i] > hi) hi = a[i];
    for (int it = 0; it < 100; it++) {
        float mid = 0.5f * (lo + hi);
        uint64_t c = 0;
        for (uint64_t i = 0; i < n; i++) c += a[i] >= mid;
        if (c > k) lo = mid;
        else hi = mid;
    }
    unsigned char *mask = calloc(n, 1);
    for (uint64_t i = 0; i < n; i++) mask[i] = a[i] >= hi;
    free(a);
    return mask;
}

Test(gen, topk_sets_overlap_partially)
{
    const uint64_t n = 1u << 18, k = n / 100;
    deftsim_model *m = one_layer(n, 2);
    const double signals[] = {0.0, 0.5, 1.0};
    double overlap[3];
    for (int j = 0; j < 3; j++) {
        deftsim_gen_params p;
        deftsim_gen_params_default(&p);
        p.signal = signals[j];
        deftsim_gen *g = new_gen(m, &p);
        float *x = fill_all(g, 0, 0), *y = fill_all(g, 0, 1);
        unsigned char *a = topk_mask(x, n, k), *b = topk_mask(y, n, k);
        uint64_t ka = 0, both = 0;
        for (uint64_t i = 0; i < n; i++) {
            ka += a[i];
            both += a[i] && b[i];
        }
        overlap[j] = (double)both / (double)ka;
        fprintf(stderr, "signal %.1f: top-1%% overlap of two workers %.3f\n", signals[j], overlap[j]);
        free(x); free(y); free(a); free(b);
        deftsim_gen_free(g);
    }
    cr_assert_lt(overlap[0], 0.05, "independent workers: overlap about k/n");
    cr_assert(overlap[1] > 0.1 && overlap[1] < 0.9, "partial overlap, got %g", overlap[1]);
    cr_assert_eq(overlap[2], 1.0, "identical gradients");
    deftsim_model_free(m);
}

Test(gen, layer_scales_spread_shift_and_drift)
{
    deftsim_model *m;
    cr_assert_eq(deftsim_model_builtin("resnet18_cifar10", &m), DEFTSIM_OK);
    deftsim_gen_params p;
    deftsim_gen_params_default(&p);
    p.seed = 5;
    p.drift = 0;
    deftsim_gen *g = new_gen(m, &p);
    double wmin = INFINITY, wmax = -INFINITY, bsum = 0, wsum = 0;
    size_t nb = 0, nw = 0;
    for (size_t L = 0; L < m->nlayers; L++) {
        double l = log10(deftsim_gen_layer_scale(g, L, 0));
        cr_assert_eq(deftsim_gen_layer_scale(g, L, 0), deftsim_gen_layer_scale(g, L, 777),
                     "drift 0: constant scale");
        double base = l - (m->layers[L].ndim == 1 ? p.bias_shift : 0);
        cr_assert(base <= -2 + 1e-6 && base >= -5 - 1e-6, "layer %zu: log10 scale %g", L, l);
        if (m->layers[L].ndim == 1) { bsum += l; nb++; }
        else { wsum += l; nw++; if (l < wmin) wmin = l; if (l > wmax) wmax = l; }
    }
    cr_assert_gt(wmax - wmin, 2.0, "weights span most of 3 decades (%g)", wmax - wmin);
    cr_assert_gt(bsum / nb - wsum / nw, 0.5, "1-D tensors sit about a decade higher");
    deftsim_gen_free(g);

    p.drift = 0.02;
    g = new_gen(m, &p);
    int moved = 0;
    for (size_t L = 0; L < m->nlayers; L++) {
        double first = deftsim_gen_layer_scale(g, L, 0);
        for (uint64_t t = 0; t < 300; t++) {
            double a = deftsim_gen_layer_scale(g, L, t), b = deftsim_gen_layer_scale(g, L, t + 1);
            cr_assert_leq(fabs(log(b / a)), p.drift * (1 + 1e-5) + 1e-6,
                          "layer %zu iteration %" PRIu64 ": change %g", L, t, log(b / a));
            cr_assert_leq(fabs(log(a / first)), p.drift * DEFTSIM_GEN_DRIFT_PERIOD + 1e-5);
            moved |= a != first;
        }
    }
    cr_assert(moved, "drift > 0 moves the scales");
    deftsim_gen_free(g);
    deftsim_model_free(m);
}

/* ---- per-kind statistics, the magnitude field, the workers' factors -------------------- */

/* A conv and a linear layer of n elements each, then a 1-D bias. */
static deftsim_model *two_kinds(uint64_t n)
{
    char csv[256];
    snprintf(csv, sizeof csv, "index,name,shape,numel\n0,c.weight,%llux1x1x1,%llu\n"
             "1,l.weight,%llux1,%llu\n2,l.bias,77,77\n", (unsigned long long)n,
             (unsigned long long)n, (unsigned long long)n, (unsigned long long)n);
    deftsim_model *m;
    cr_assert_eq(deftsim_model_parse_csv(csv, strlen(csv), "two.csv", "two", &m), DEFTSIM_OK,
                 "%s", deftsim_error_message());
    return m;
}

/* |A & B| / |A| of two top-k masks over [off, off + n). */
static double mask_overlap(const float *x, const float *y, uint64_t off, uint64_t n, uint64_t k)
{
    unsigned char *a = topk_mask(x + off, n, k), *b = topk_mask(y + off, n, k);
    uint64_t ka = 0, both = 0;
    for (uint64_t i = 0; i < n; i++) {
        ka += a[i];
        both += a[i] && b[i];
    }
    free(a);
    free(b);
    return (double)both / (double)ka;
}

Test(gen, new_params_defaults_and_rejections)
{
    deftsim_gen_params p;
    deftsim_gen_params_default(&p);
    cr_assert_eq(p.field, 0);
    cr_assert_eq(p.worker_spread, 0);
    for (int k = 0; k < DEFTSIM_GEN_NKINDS; k++)
        cr_assert(p.kind_signal[k] == -1 && p.kind_tail[k] == -1 && p.kind_field[k] == -1);
    static const struct {
        const char *what;
        int which; /* 0 field, 1 worker_spread, 2 kind signal, 3 kind tail, 4 kind field */
        double v;
    } bad[] = {
        {"synthetic.field", 0, -0.1},          {"synthetic.field", 0, 6.5},
        {"synthetic.worker_spread", 1, NAN},   {"synthetic.worker_spread", 1, -1},
        {"synthetic.linear_signal", 2, 1.5},   {"synthetic.linear_signal", 2, -0.5},
        {"synthetic.linear_tail", 3, 2.0},     {"synthetic.linear_tail", 3, -2},
        {"synthetic.linear_field", 4, 7},      {"synthetic.linear_field", 4, -0.5},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        deftsim_gen_params_default(&p);
        double *f[5] = {&p.field, &p.worker_spread, &p.kind_signal[DEFTSIM_GEN_KIND_LINEAR],
                        &p.kind_tail[DEFTSIM_GEN_KIND_LINEAR],
                        &p.kind_field[DEFTSIM_GEN_KIND_LINEAR]};
        *f[bad[i].which] = bad[i].v;
        cr_assert_eq(deftsim_gen_params_check(&p), DEFTSIM_E_INPUT, "%s = %g accepted",
                     bad[i].what, bad[i].v);
        cr_assert(strstr(deftsim_error_message(), bad[i].what), "message '%s' lacks '%s'",
                  deftsim_error_message(), bad[i].what);
    }
    deftsim_gen_params_default(&p);
    p.kind_tail[DEFTSIM_GEN_KIND_CONV] = 0; /* a Gaussian kind */
    p.kind_signal[DEFTSIM_GEN_KIND_CONV] = 1;
    p.kind_field[DEFTSIM_GEN_KIND_CONV] = 0;
    p.field = 6;
    p.worker_spread = 6;
    cr_assert_eq(deftsim_gen_params_check(&p), DEFTSIM_OK, "%s", deftsim_error_message());
}

/* Per-kind values equal to the global ones give the defaults' bytes: the per-kind path is
 * the same arithmetic. */
Test(gen, per_kind_values_equal_to_global_change_nothing)
{
    deftsim_model *m = small_model();
    deftsim_gen_params p;
    deftsim_gen_params_default(&p);
    deftsim_gen *a = new_gen(m, &p);
    for (int k = 0; k < DEFTSIM_GEN_NKINDS; k++) {
        p.kind_signal[k] = p.signal;
        p.kind_tail[k] = p.tail;
        p.kind_field[k] = 0;
    }
    deftsim_gen *b = new_gen(m, &p);
    float *x = fill_all(a, 3, 1), *y = fill_all(b, 3, 1);
    cr_assert_eq(memcmp(x, y, m->numel * sizeof *x), 0);
    free(x);
    free(y);
    deftsim_gen_free(a);
    deftsim_gen_free(b);
    deftsim_model_free(m);
}

/* Runs filled in place (the entries a pass reads at a sparse index set): the bits of a whole
 * fill_workers inside every run, nothing written outside them, runs that cross layers, ragged
 * and empty ones, with and without the workers' factors; runs out of order are refused. */
Test(gen, fill_runs_equals_fill_workers)
{
    deftsim_model *m = small_model();
    deftsim_gen_params p;
    deftsim_gen_params_default(&p);
    p.seed = 913;
    const uint64_t n = m->numel;
    enum { P = 3, MAXR = 64 };
    for (int spread = 0; spread < 2; spread++) {
        p.worker_spread = spread;
        deftsim_gen *g = new_gen(m, &p);
        float *ref[P], *x[P];
        for (int w = 0; w < P; w++) cr_assert((ref[w] = malloc(n * 4)) && (x[w] = malloc(n * 4)));
        cr_assert_eq(deftsim_gen_fill_workers(g, 6, 2, P, 0, n, ref), DEFTSIM_OK);
        uint64_t s = 17 + (uint64_t)spread;
        for (int round = 0; round < 30; round++) {
            deftsim_gen_run runs[MAXR];
            size_t nr = 0;
            uint64_t at = rnd(&s) % 40;
            while (nr < MAXR && at < n) {
                uint64_t len = rnd(&s) % (round % 3 ? 70 : 900); /* 0: an empty run */
                if (len > n - at) len = n - at;
                runs[nr++] = (deftsim_gen_run){at, len};
                at += len + rnd(&s) % (round % 2 ? 5 : 300);
            }
            for (int w = 0; w < P; w++) memset(x[w], 0xff, n * 4);
            cr_assert_eq(deftsim_gen_fill_runs(g, 6, 2, P, runs, nr, x), DEFTSIM_OK, "%s",
                         deftsim_error_message());
            for (int w = 0; w < P; w++) {
                size_t r = 0;
                for (uint64_t i = 0; i < n; i++) {
                    while (r < nr && runs[r].offset + runs[r].count <= i) r++;
                    int in = r < nr && runs[r].offset <= i;
                    uint32_t bits;
                    memcpy(&bits, &x[w][i], 4);
                    if (in)
                        cr_assert_eq(memcmp(&x[w][i], &ref[w][i], 4), 0,
                                     "spread %d round %d worker %d element %" PRIu64, spread,
                                     round, w, i);
                    else
                        cr_assert_eq(bits, 0xffffffffu, "element %" PRIu64 " outside the runs "
                                     "written", i);
                }
            }
        }
        deftsim_gen_run bad[2] = {{100, 50}, {120, 10}};
        cr_assert_eq(deftsim_gen_fill_runs(g, 6, 2, P, bad, 2, x), DEFTSIM_E_INPUT);
        cr_assert(strstr(deftsim_error_message(), "run 1"), "%s", deftsim_error_message());
        deftsim_gen_run past = {n - 5, 6};
        cr_assert_eq(deftsim_gen_fill_runs(g, 6, 2, P, &past, 1, x), DEFTSIM_E_INPUT);
        for (int w = 0; w < P; w++) {
            free(ref[w]);
            free(x[w]);
        }
        deftsim_gen_free(g);
    }
    deftsim_model_free(m);
}

/* With every new feature on: each kernel, every slice and fill_workers return the scalar
 * reference's bits (the layer's constants, the worker's scale), and the same seed the same
 * bytes. */
Test(gen, new_features_kernels_match_reference)
{
    deftsim_model *m = small_model();
    deftsim_gen_params p;
    deftsim_gen_params_default(&p);
    p.seed = 4242;
    p.field = 1.5;
    p.worker_spread = 1;
    p.kind_signal[DEFTSIM_GEN_KIND_LINEAR] = 0.9;
    p.kind_tail[DEFTSIM_GEN_KIND_CONV] = 0;
    p.kind_field[DEFTSIM_GEN_KIND_BIAS] = 0.5;
    p.kind_field[DEFTSIM_GEN_KIND_NORM_WEIGHT] = 0;
    deftsim_gen *g = new_gen(m, &p);
    uint64_t n = m->numel;
    enum { P = 3 };
    const uint32_t w0 = 5, it = 11;
    float *ref[P], *x[P];
    for (int w = 0; w < P; w++) {
        ref[w] = malloc(n * sizeof(float));
        x[w] = malloc(n * sizeof(float));
        cr_assert(ref[w] && x[w]);
        for (size_t L = 0; L < m->nlayers; L++) {
            const deftsim_gen_consts *c = deftsim_gen_layer_consts(g, L);
            float scale = deftsim_gen_worker_scale(g, L, it, w0 + w);
            for (uint64_t i = 0; i < m->layers[L].numel; i++) {
                uint64_t e = m->layers[L].offset + i;
                ref[w][e] = deftsim_gen_element(c, e, w0 + w, it, scale);
            }
        }
    }
    /* The workers' factors differ, and the kinds' constants do. */
    cr_assert_neq(deftsim_gen_worker_scale(g, 0, it, w0), deftsim_gen_worker_scale(g, 0, it, w0 + 1));
    cr_assert_neq(deftsim_gen_layer_consts(g, 0)->gauss, deftsim_gen_layer_consts(g, 3)->gauss);
    cr_assert_neq(deftsim_gen_layer_consts(g, 3)->w_signal, deftsim_gen_get_consts(g)->w_signal);
    cr_assert_eq(deftsim_gen_layer_consts(g, 2)->field_w, 0.0f);
    cr_assert_neq(deftsim_gen_layer_consts(g, 1)->field_w, deftsim_gen_get_consts(g)->field_w);
    size_t tried = 0;
    for (size_t k = 0; k < deftsim_gen_kernel_count(); k++) {
        const char *kn = deftsim_gen_kernel_name(k);
        if (deftsim_gen_use_kernel(g, kn) != DEFTSIM_OK) continue;
        tried++;
        cr_assert_eq(deftsim_gen_fill_workers(g, it, w0, P, 0, n, x), DEFTSIM_OK);
        for (int w = 0; w < P; w++)
            for (uint64_t i = 0; i < n; i++)
                cr_assert_eq(memcmp(&x[w][i], &ref[w][i], 4), 0, "kernel %s worker %d element %"
                             PRIu64 ": %.9g vs %.9g", kn, w, i, x[w][i], ref[w][i]);
        for (uint64_t a = 0; a < n;) { /* odd pieces, one worker at a time */
            uint64_t len = a % 3 ? 45 : 301;
            if (len > n - a) len = n - a;
            cr_assert_eq(deftsim_gen_fill(g, it, w0 + 1, a, len, x[1] + a), DEFTSIM_OK);
            a += len;
        }
        cr_assert_eq(memcmp(x[1], ref[1], n * sizeof(float)), 0, "kernel %s: pieces", kn);
    }
    cr_assert_geq(tried, 2);
    deftsim_gen *h = new_gen(m, &p); /* same seed, same bytes */
    float *y = fill_all(h, it, w0 + 2);
    cr_assert_eq(memcmp(y, ref[2], n * sizeof *y), 0);
    free(y);
    deftsim_gen_free(h);
    for (int w = 0; w < P; w++) {
        free(ref[w]);
        free(x[w]);
    }
    deftsim_gen_free(g);
    deftsim_model_free(m);
}

/* <kind>_signal: the linear layer's top-1% sets overlap between workers as its own signal
 * says, the conv layer's as the global one. */
Test(gen, kind_signal_sets_that_kinds_overlap)
{
    const uint64_t n = 1u << 17, k = n / 100;
    deftsim_model *m = two_kinds(n);
    deftsim_gen_params p;
    deftsim_gen_params_default(&p);
    p.signal = 0.1;
    p.kind_signal[DEFTSIM_GEN_KIND_LINEAR] = 0.95;
    deftsim_gen *g = new_gen(m, &p);
    float *x = fill_all(g, 0, 0), *y = fill_all(g, 0, 1);
    double conv = mask_overlap(x, y, 0, n, k), lin = mask_overlap(x, y, n, n, k);
    fprintf(stderr, "kind signal: top-1%% overlap conv (0.1) %.3f, linear (0.95) %.3f\n", conv,
            lin);
    cr_assert_lt(conv, 0.2, "conv keeps the global signal 0.1: %g", conv);
    cr_assert_gt(lin, 0.6, "linear's own signal 0.95: %g", lin);
    free(x);
    free(y);
    deftsim_gen_free(g);
    deftsim_model_free(m);
}

/* <kind>_tail: a Gaussian conv layer beside a t(4) linear one. */
Test(gen, kind_tail_sets_that_kinds_tail)
{
    const uint64_t n = 1u << 18;
    deftsim_model *m = two_kinds(n);
    deftsim_gen_params p;
    deftsim_gen_params_default(&p);
    p.kind_tail[DEFTSIM_GEN_KIND_CONV] = 0;
    deftsim_gen *g = new_gen(m, &p);
    float *x = fill_all(g, 0, 0);
    double f4[2];
    for (int L = 0; L < 2; L++) {
        double s = deftsim_gen_layer_scale(g, (size_t)L, 0);
        uint64_t c = 0;
        for (uint64_t i = 0; i < n; i++) c += fabs(x[L * n + i]) > 4 * s;
        f4[L] = (double)c / (double)n;
    }
    fprintf(stderr, "kind tail: P(|x| > 4 sd) conv (Gaussian) %.2e, linear (t4) %.2e\n", f4[0],
            f4[1]);
    cr_assert_lt(f4[0], 2e-4);
    cr_assert_gt(f4[1], 1e-3);
    free(x);
    deftsim_gen_free(g);
    deftsim_model_free(m);
}

/* field: one worker's top-1% set persists from one iteration to the next (and the workers
 * share more of theirs) though every value is drawn afresh; the mean square stays the
 * layer's scale squared. */
Test(gen, field_keeps_large_elements_across_iterations)
{
    const uint64_t n = 1u << 17, k = n / 100;
    deftsim_model *m = two_kinds(n);
    double persist[2], across[2], ms = 0;
    for (int on = 0; on < 2; on++) {
        deftsim_gen_params p;
        deftsim_gen_params_default(&p);
        p.signal = 0;
        p.field = on ? 4 : 0;
        deftsim_gen *g = new_gen(m, &p);
        float *a = fill_all(g, 0, 0), *b = fill_all(g, 1, 0), *c = fill_all(g, 0, 1);
        persist[on] = mask_overlap(a, b, n, n, k);
        across[on] = mask_overlap(a, c, n, n, k);
        if (on) {
            double s = deftsim_gen_layer_scale(g, 1, 0), sum = 0;
            for (uint64_t i = 0; i < n; i++) sum += (double)a[n + i] * a[n + i];
            ms = sum / (double)n / (s * s);
        }
        free(a);
        free(b);
        free(c);
        deftsim_gen_free(g);
    }
    fprintf(stderr, "field: top-1%% persistence %.3f (off %.3f), across workers %.3f (off %.3f), "
            "mean square / scale^2 %.3f\n", persist[1], persist[0], across[1], across[0], ms);
    cr_assert_lt(persist[0], 0.05, "no field: independent draws");
    cr_assert_gt(persist[1], 0.08, "field 4: the large elements stay large");
    cr_assert_gt(across[1], 0.06);
    cr_assert(ms > 0.85 && ms < 1.15, "mean square %g", ms);
    deftsim_model_free(m);
}

/* worker_spread: the workers' norms spread as a uniform log10 factor of that width (standard
 * deviation width / sqrt(12)); without it they agree within sampling noise. */
Test(gen, worker_spread_spreads_worker_norms)
{
    const uint64_t n = 4096;
    enum { P = 64 };
    deftsim_model *m = two_kinds(n);
    double sd[2];
    for (int on = 0; on < 2; on++) {
        deftsim_gen_params p;
        deftsim_gen_params_default(&p);
        p.worker_spread = on ? 1.0 : 0;
        deftsim_gen *g = new_gen(m, &p);
        double l[P], mean = 0, var = 0;
        for (uint32_t w = 0; w < P; w++) {
            float *x = fill_all(g, 7, w);
            double s = 0;
            for (uint64_t i = 0; i < m->numel; i++) s += (double)x[i] * x[i];
            l[w] = 0.5 * log10(s);
            mean += l[w] / P;
            free(x);
        }
        for (int w = 0; w < P; w++) var += (l[w] - mean) * (l[w] - mean) / (P - 1);
        sd[on] = sqrt(var);
        deftsim_gen_free(g);
    }
    fprintf(stderr, "worker_spread: sd of log10 worker norms %.3f (1 decade; 0.289 expected), "
            "off %.3f\n", sd[1], sd[0]);
    cr_assert_lt(sd[0], 0.05);
    cr_assert(sd[1] > 0.2 && sd[1] < 0.38, "%g", sd[1]);
    deftsim_model_free(m);
}

/* Roles from names (2-D and larger only), and a role's offset moves exactly its tensors. */
Test(gen, roles_from_names_and_offsets)
{
    const char *csv = "index,name,shape,numel\n"
                      "0,embeddings.word_embeddings.weight,100x8,800\n"
                      "1,embeddings.position_embeddings.weight,16x8,128\n"
                      "2,embeddings.token_type_embeddings.weight,2x8,16\n"
                      "3,encoder.layer.0.attention.self.query.weight,8x8,64\n"
                      "4,encoder.layer.0.attention.self.key.weight,8x8,64\n"
                      "5,encoder.layer.0.attention.self.value.weight,8x8,64\n"
                      "6,encoder.layer.0.attention.output.dense.weight,8x8,64\n"
                      "7,encoder.layer.0.intermediate.dense.weight,32x8,256\n"
                      "8,encoder.layer.0.output.dense.weight,8x32,256\n"
                      "9,encoder.layer.0.attention.self.query.bias,8,8\n"
                      "10,h.0.attn.c_proj.weight,8x8,64\n"
                      "11,h.0.mlp.c_fc.weight,8x32,256\n"
                      "12,h.0.mlp.c_proj.weight,32x8,256\n"
                      "13,layer3.0.shortcut.0.weight,16x8x1x1,128\n"
                      "14,layer1.0.conv1.weight,8x8x3x3,576\n"
                      "15,wte.weight,100x8,800\n";
    static const deftsim_gen_role want[] = {
        DEFTSIM_GEN_ROLE_WORD,     DEFTSIM_GEN_ROLE_POSITION, DEFTSIM_GEN_ROLE_TOKEN_TYPE,
        DEFTSIM_GEN_ROLE_QK,       DEFTSIM_GEN_ROLE_QK,       DEFTSIM_GEN_ROLE_V,
        DEFTSIM_GEN_ROLE_ATTN_OUT, DEFTSIM_GEN_ROLE_FFN_IN,   DEFTSIM_GEN_ROLE_FFN_OUT,
        DEFTSIM_GEN_ROLE_NONE,     DEFTSIM_GEN_ROLE_ATTN_OUT, DEFTSIM_GEN_ROLE_FFN_IN,
        DEFTSIM_GEN_ROLE_FFN_OUT,  DEFTSIM_GEN_ROLE_SHORTCUT, DEFTSIM_GEN_ROLE_NONE,
        DEFTSIM_GEN_ROLE_WORD};
    deftsim_model *m;
    cr_assert_eq(deftsim_model_parse_csv(csv, strlen(csv), "roles.csv", "roles", &m), DEFTSIM_OK);
    for (size_t L = 0; L < m->nlayers; L++)
        cr_expect_eq(deftsim_gen_layer_role(m, L), want[L], "%s: %s, want %s", m->layers[L].name,
                     deftsim_gen_role_name(deftsim_gen_layer_role(m, L)),
                     deftsim_gen_role_name(want[L]));
    deftsim_gen_params p;
    deftsim_gen_params_default(&p);
    p.kind_scales = 1;
    deftsim_gen *a = new_gen(m, &p);
    p.role_offset[DEFTSIM_GEN_ROLE_QK] = -1.5;
    deftsim_gen *b = new_gen(m, &p);
    for (size_t L = 0; L < m->nlayers; L++) {
        double d = log10(deftsim_gen_layer_scale(b, L, 3)) - log10(deftsim_gen_layer_scale(a, L, 3));
        double expect = want[L] == DEFTSIM_GEN_ROLE_QK ? -1.5 : 0;
        cr_expect(fabs(d - expect) < 1e-6, "%s moved %g, want %g", m->layers[L].name, d, expect);
    }
    deftsim_gen_free(a);
    deftsim_gen_free(b);
    p.role_offset[DEFTSIM_GEN_ROLE_QK] = 6.5;
    cr_expect_eq(deftsim_gen_params_check(&p), DEFTSIM_E_INPUT);
    cr_expect(strstr(deftsim_error_message(), "synthetic.role_qk"), "%s", deftsim_error_message());
    deftsim_model_free(m);
}

/* The 16-lane kernel runs the calls of two groups per vector: where call 2^32 falls between
 * them, the second group's calls carry into counter word 1. Every kernel, on a slice whose
 * first whole group is the last one before the carry, against the scalar reference. */
Test(gen, kernels_across_the_counter_carry)
{
    static const char csv[] = "index,name,shape,numel\n"
                              "0,huge.weight,131072x262144,34359738368\n";
    deftsim_model *m;
    cr_assert_eq(deftsim_model_parse_csv(csv, strlen(csv), "huge.csv", "huge", &m), DEFTSIM_OK,
                 "%s", deftsim_error_message());
    deftsim_gen_params p;
    deftsim_gen_params_default(&p);
    deftsim_gen *g = new_gen(m, &p);
    const deftsim_gen_consts *c = deftsim_gen_get_consts(g);
    /* Group 2^29 - 1 holds calls 2^32 - 8 .. 2^32 - 1; the slice covers it and 4 groups more,
     * from 3 elements before it (a ragged head). */
    const uint64_t a = ((1ull << 29) - 1) * DEFTSIM_GEN_GROUP - 3, cnt = 5 * DEFTSIM_GEN_GROUP + 10;
    float ref[5 * DEFTSIM_GEN_GROUP + 10], x[5 * DEFTSIM_GEN_GROUP + 10];
    const float scale = deftsim_gen_layer_scale(g, 0, 3);
    for (uint64_t i = 0; i < cnt; i++) ref[i] = deftsim_gen_element(c, a + i, 5, 3, scale);
    size_t tried = 0;
    for (size_t k = 0; k < deftsim_gen_kernel_count(); k++) {
        const char *kn = deftsim_gen_kernel_name(k);
        if (deftsim_gen_use_kernel(g, kn) != DEFTSIM_OK) continue;
        tried++;
        memset(x, 0xff, sizeof x);
        cr_assert_eq(deftsim_gen_fill(g, 3, 5, a, cnt, x), DEFTSIM_OK);
        for (uint64_t i = 0; i < cnt; i++)
            cr_assert_eq(memcmp(&x[i], &ref[i], 4), 0, "kernel %s element %" PRIu64 ": %.9g vs "
                         "reference %.9g", kn, a + i, x[i], ref[i]);
    }
    cr_assert_geq(tried, 2);
    deftsim_gen_free(g);
    deftsim_model_free(m);
}
