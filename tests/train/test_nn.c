/* test_nn.c - the networks of train/: tables, initialisation, and every gradient against
 * central finite differences. */
#include <criterion/criterion.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deftsim_nn.h"
#include "deftsim_philox.h"

/* Deterministic inputs in about [-2, 2] and labels below classes. */
static void fill_inputs(uint32_t seed, float *x, size_t nx, uint8_t *y, uint32_t B, uint32_t classes)
{
    for (size_t i = 0; i < nx; i++) {
        uint32_t r[4];
        deftsim_philox4x32_10_words((uint32_t)i, 7, 0, 0, seed, 0, r);
        x[i] = ((float)(r[0] >> 8) / 16777216.0f - 0.5f) * 4.0f;
    }
    for (uint32_t b = 0; b < B; b++) y[b] = (uint8_t)((b * 7 + seed) % classes);
}

typedef struct {
    size_t checked, kinks, bad;
    double worst;      /* largest |fd - analytic| / (atol + rtol * scale) among the checked */
    size_t worst_at;
} fd_report;

/* Central differences of the mean loss for every parameter. A parameter whose two one-sided
 * differences disagree by more than a smooth loss allows has a ReLU or max-pool switch
 * within +-h (a kink): it is counted and skipped, since no difference quotient converges
 * there. A parameter fails when |fd - g| > atol + rtol * max(|fd|, |g|). */
static fd_report fd_check(deftsim_nn *net, float *p, const float *x, const uint8_t *y, uint32_t B,
                          const float *g)
{
    const double h = 1e-3, atol = 1e-4, rtol = 1e-2;
    fd_report r = {0};
    size_t n = deftsim_nn_model(net)->numel;
    double l0;
    cr_assert_eq(deftsim_nn_eval(net, p, x, y, B, &l0, NULL), DEFTSIM_OK);
    for (size_t i = 0; i < n; i++) {
        float orig = p[i];
        float up = (float)(orig + h), dn = (float)(orig - h);
        double lp, lm;
        p[i] = up;
        deftsim_nn_eval(net, p, x, y, B, &lp, NULL);
        p[i] = dn;
        deftsim_nn_eval(net, p, x, y, B, &lm, NULL);
        p[i] = orig;
        double hu = (double)up - orig, hd = (double)orig - dn;
        double right = (lp - l0) / hu / B, left = (l0 - lm) / hd / B;
        /* A smooth loss moves the one-sided quotients apart by about h times its curvature
         * (below 4e-4 in these cases); a switch moves them by the jump in the slope. */
        if (fabs(right - left) > 2e-3) {
            r.kinks++;
            continue;
        }
        double fd = (lp - lm) / (hu + hd) / B;
        double scale = fabs(fd) > fabs(g[i]) ? fabs(fd) : fabs(g[i]);
        double q = fabs(fd - g[i]) / (atol + rtol * scale);
        r.checked++;
        if (q > 1) r.bad++;
        if (q > r.worst) {
            r.worst = q;
            r.worst_at = i;
        }
    }
    return r;
}

static void gradient_case(const deftsim_nn_spec *s, uint32_t B, uint64_t seed)
{
    deftsim_nn *net;
    cr_assert_eq(deftsim_nn_new(s, B, &net), DEFTSIM_OK, "%s", deftsim_error_message());
    size_t n = deftsim_nn_model(net)->numel;
    size_t nx = (size_t)B * s->in_rows * s->in_cols;
    float *p = malloc(n * sizeof *p), *g = malloc(n * sizeof *g), *x = malloc(nx * sizeof *x);
    uint8_t y[64];
    deftsim_nn_init(net, seed, p);
    fill_inputs((uint32_t)seed, x, nx, y, B, s->classes);
    double loss;
    cr_assert_eq(deftsim_nn_grad(net, p, x, y, B, g, &loss, NULL), DEFTSIM_OK);
    double lsum;
    cr_assert_eq(deftsim_nn_eval(net, p, x, y, B, &lsum, NULL), DEFTSIM_OK);
    cr_expect(fabs(lsum / B - loss) < 1e-12, "grad's loss %.17g, eval's %.17g", loss, lsum / B);

    fd_report r = fd_check(net, p, x, y, B, g);
    const deftsim_model *m = deftsim_nn_model(net);
    size_t L = 0;
    while (L + 1 < m->nlayers && m->layers[L + 1].offset <= r.worst_at) L++;
    size_t big = 0;
    for (size_t i = 0; i < n; i++) big += fabs(g[i]) > 1e-3;
    fprintf(stderr, "%s: %zu parameters (%zu with |g| > 1e-3), %zu checked, %zu kinks skipped, "
            "%zu bad; worst %.3f of the tolerance at %zu (%s)\n", m->name, n, big, r.checked,
            r.kinks, r.bad, r.worst, r.worst_at, m->layers[L].name);
    cr_expect_gt(big, n / 2, "most gradients should be well above the tolerance");
    cr_expect_eq(r.bad, 0, "%zu gradients disagree with finite differences (worst at %zu, %s)",
                 r.bad, r.worst_at, m->layers[L].name);
    cr_expect_lt(r.kinks, n / 20 + 1, "%zu of %zu parameters skipped as kinks", r.kinks, n);

    /* The checker itself must notice a wrong gradient: one entry of every layer off by 30%. */
    for (size_t l = 0; l < m->nlayers; l++) {
        size_t i = m->layers[l].offset + m->layers[l].numel / 2;
        float keep = g[i];
        if (fabs(g[i]) < 1e-2) continue;
        g[i] *= 1.3f;
        float saved = p[i];
        double lp, lm, h = 1e-3;
        p[i] = (float)(saved + h);
        deftsim_nn_eval(net, p, x, y, B, &lp, NULL);
        p[i] = (float)(saved - h);
        deftsim_nn_eval(net, p, x, y, B, &lm, NULL);
        double fd = (lp - lm) / ((double)(float)(saved + h) - (double)(float)(saved - h)) / B;
        p[i] = saved;
        int noticed = fabs(fd - g[i]) > 1e-4 + 1e-2 * fabs(g[i]);
        cr_expect(noticed, "%s: a 30%% error in element %zu went unnoticed", m->layers[l].name, i);
        g[i] = keep;
    }
    free(p);
    free(g);
    free(x);
    deftsim_nn_free(net);
}

Test(nn, mlp_gradient_matches_finite_differences)
{
    deftsim_nn_spec s = {.kind = DEFTSIM_NN_MLP, .in_rows = 5, .in_cols = 6, .classes = 4,
                         .hidden = {7, 5}};
    gradient_case(&s, 3, 11);
}

Test(nn, cnn_gradient_matches_finite_differences)
{
    deftsim_nn_spec s = {.kind = DEFTSIM_NN_CNN, .in_rows = 8, .in_cols = 8, .classes = 3,
                         .hidden = {6}, .channels = {3, 4}, .kernel = 3};
    gradient_case(&s, 2, 5);
}

Test(nn, cnn_5x5_kernel_gradient_matches_finite_differences)
{
    deftsim_nn_spec s = {.kind = DEFTSIM_NN_CNN, .in_rows = 8, .in_cols = 12, .classes = 5,
                         .hidden = {4}, .channels = {2, 3}, .kernel = 5};
    gradient_case(&s, 3, 9);
}

/* The minibatch gradient is the mean of the images' own gradients (the 1/B scaling and the
 * accumulation over images in the convolutions). */
Test(nn, batch_gradient_is_the_mean_of_image_gradients)
{
    deftsim_nn_spec s = {.kind = DEFTSIM_NN_CNN, .in_rows = 8, .in_cols = 8, .classes = 3,
                         .hidden = {6}, .channels = {3, 4}, .kernel = 3};
    const uint32_t B = 4;
    deftsim_nn *net;
    cr_assert_eq(deftsim_nn_new(&s, B, &net), DEFTSIM_OK);
    size_t n = deftsim_nn_model(net)->numel, px = 64;
    float *p = malloc(n * 4), *g = malloc(n * 4), *gi = malloc(n * 4), x[4 * 64];
    double *mean = calloc(n, sizeof *mean);
    uint8_t y[4];
    deftsim_nn_init(net, 3, p);
    fill_inputs(3, x, B * px, y, B, s.classes);
    cr_assert_eq(deftsim_nn_grad(net, p, x, y, B, g, NULL, NULL), DEFTSIM_OK);
    for (uint32_t b = 0; b < B; b++) {
        cr_assert_eq(deftsim_nn_grad(net, p, x + b * px, y + b, 1, gi, NULL, NULL), DEFTSIM_OK);
        for (size_t i = 0; i < n; i++) mean[i] += gi[i] / (double)B;
    }
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        if (fabs(mean[i] - g[i]) > 1e-6 + 1e-4 * fabs(mean[i])) bad++;
    cr_expect_eq(bad, 0, "%zu of %zu elements differ", bad, n);
    free(p);
    free(g);
    free(gi);
    free(mean);
    deftsim_nn_free(net);
}

/* The Fashion-MNIST networks: their tables, counted by hand from the architecture. */
Test(nn, default_tables)
{
    static const struct {
        deftsim_nn_kind kind;
        const char *name;
        uint64_t numel;
        size_t nlayers;
        const char *layer[8];
        uint64_t numels[8];
    } cases[] = {
        {DEFTSIM_NN_MLP, "fmnist_mlp", 535818, 6,
         {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "fc3.weight", "fc3.bias"},
         {784 * 512, 512, 512 * 256, 256, 256 * 10, 10}},
        {DEFTSIM_NN_CNN, "fmnist_cnn", 421642, 8,
         {"conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias", "fc1.weight", "fc1.bias",
          "fc2.weight", "fc2.bias"},
         {32 * 9, 32, 64 * 32 * 9, 64, 64 * 7 * 7 * 128, 128, 128 * 10, 10}},
    };
    for (size_t c = 0; c < 2; c++) {
        deftsim_nn_spec s;
        deftsim_nn_spec_default(cases[c].kind, &s);
        deftsim_nn *net;
        cr_assert_eq(deftsim_nn_new(&s, 4, &net), DEFTSIM_OK);
        const deftsim_model *m = deftsim_nn_model(net);
        cr_expect_str_eq(m->name, cases[c].name);
        cr_expect_eq(m->numel, cases[c].numel);
        cr_assert_eq(m->nlayers, cases[c].nlayers);
        uint64_t off = 0;
        for (size_t l = 0; l < m->nlayers; l++) {
            cr_expect_str_eq(m->layers[l].name, cases[c].layer[l]);
            cr_expect_eq(m->layers[l].numel, cases[c].numels[l], "%s", cases[c].layer[l]);
            cr_expect_eq(m->layers[l].offset, off);
            off += m->layers[l].numel;
        }
        deftsim_nn_free(net);
    }
}

Test(nn, init_is_seeded_and_bounded)
{
    deftsim_nn_spec s;
    deftsim_nn_spec_default(DEFTSIM_NN_MLP, &s);
    deftsim_nn *net;
    cr_assert_eq(deftsim_nn_new(&s, 1, &net), DEFTSIM_OK);
    const deftsim_model *m = deftsim_nn_model(net);
    size_t n = m->numel;
    float *a = malloc(n * 4), *b = malloc(n * 4), *c = malloc(n * 4);
    deftsim_nn_init(net, 42, a);
    deftsim_nn_init(net, 42, b);
    deftsim_nn_init(net, 43, c);
    cr_expect(!memcmp(a, b, n * 4), "same seed, different bytes");
    size_t same = 0;
    for (size_t i = 0; i < n; i++) same += a[i] == c[i];
    cr_expect_lt(same, n / 1000, "seeds 42 and 43 agree on %zu of %zu values", same, n);
    /* fc1: fan_in 784, so every weight and bias lies in +-1/28 and they fill that range. */
    double lo = 1, hi = -1, sum = 0;
    for (size_t i = 0; i < m->layers[0].numel + m->layers[1].numel; i++) {
        lo = fmin(lo, a[i]);
        hi = fmax(hi, a[i]);
        sum += a[i];
    }
    cr_expect(lo >= -1.0 / 28 && hi < 1.0 / 28, "range [%g, %g]", lo, hi);
    cr_expect(lo < -0.99 / 28 && hi > 0.99 / 28, "range [%g, %g] does not fill +-1/28", lo, hi);
    cr_expect(fabs(sum / (double)m->layers[0].numel) < 1e-3, "mean %g", sum / (double)m->layers[0].numel);
    free(a);
    free(b);
    free(c);
    deftsim_nn_free(net);
}

Test(nn, bad_specs_and_batches)
{
    deftsim_nn *net;
    deftsim_nn_spec s;
    deftsim_nn_spec_default(DEFTSIM_NN_CNN, &s);
    s.in_rows = 30;
    cr_expect_eq(deftsim_nn_new(&s, 4, &net), DEFTSIM_E_INPUT);
    cr_expect(strstr(deftsim_error_message(), "multiples of 4"), "%s", deftsim_error_message());
    deftsim_nn_spec_default(DEFTSIM_NN_CNN, &s);
    s.kernel = 4;
    cr_expect_eq(deftsim_nn_new(&s, 4, &net), DEFTSIM_E_INPUT);
    cr_expect(strstr(deftsim_error_message(), "kernel 4"), "%s", deftsim_error_message());
    deftsim_nn_spec_default(DEFTSIM_NN_MLP, &s);
    cr_assert_eq(deftsim_nn_new(&s, 2, &net), DEFTSIM_OK);
    size_t n = deftsim_nn_model(net)->numel;
    float *p = calloc(n, 4), *g = malloc(n * 4), x[3 * 784] = {0};
    uint8_t y[3] = {1, 10, 2};
    cr_expect_eq(deftsim_nn_grad(net, p, x, y, 3, g, NULL, NULL), DEFTSIM_E_INPUT);
    cr_expect(strstr(deftsim_error_message(), "expected 1 to 2"), "%s", deftsim_error_message());
    cr_expect_eq(deftsim_nn_grad(net, p, x, y, 2, g, NULL, NULL), DEFTSIM_E_INPUT);
    cr_expect(strstr(deftsim_error_message(), "image 1 of the minibatch has label 10"), "%s",
              deftsim_error_message());
    free(p);
    free(g);
    deftsim_nn_free(net);
}
