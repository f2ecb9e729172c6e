/* test_sp_sidco.c - SIDCo (docs/SPARSIFIERS.md, "sidco") on cases worked by hand with the
 * exponential fit: one stage (T = mean |acc| ln(1/d)), two stages (the survivors' excess over
 * their minimum fitted again), a zero accumulator (nothing picked), the stages column through
 * the registry, the aggregate, the residuals and the bytes of both exchanges.
 * tests/sparsify/reference.py compares the other fits and the adaptive stages with a numpy
 * reference. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "sp_test.h"

TestSuite(sp_sidco, .init = sp_suite_init, .fini = sp_suite_fini);

enum { N = 16 };
/* mean |acc| = 2; worker 1 holds the same values in reverse order. */
static const float acc0[N] = {0.5f, -1, 1, -0.5f, 9, 1,  -1, 0.5f,
                              6,    -0.5f, 1, -1, 0.5f, -7, 1, 0.5f};

static deftsim_step_result *run(deftsim_sparsifier *s, sp_accs *a, uint64_t t)
{
    deftsim_step_result *r = NULL;
    cr_assert_eq(deftsim_sparsifier_step(s, t, &a->prov, &r), DEFTSIM_OK, "%s",
                 deftsim_error_message());
    return r;
}

static double column(const deftsim_step_result *r, const char *name)
{
    for (size_t i = 0; i < deftsim_method_column_count(); i++)
        if (!strcmp(deftsim_method_column_get(i)->name, name))
            return deftsim_method_column_value(i, r->method, r);
    cr_assert_fail("no column %s", name);
    return NAN;
}

static void expect_agg(const deftsim_step_result *r, const uint32_t *idx, const float *val,
                       size_t n)
{
    cr_assert_eq(r->nnz, n);
    for (size_t i = 0; i < n; i++) {
        cr_expect_eq(r->agg_index[i], idx[i], "aggregate %zu", i);
        cr_expect_eq(r->agg_value[i], val[i], "aggregate %zu: %g", i, (double)r->agg_value[i]);
    }
}

/* P = 2 at d = 1/16 (k = 1), the exponential fit, `stages` stages; worker 1 reversed (or
 * zero). */
static deftsim_sparsifier *setup(deftsim_model **m, int stages, int padded, int zero1,
                                 sp_accs **a)
{
    static const char *const shape[] = {"16"};
    *m = sp_model(shape, 1);
    deftsim_method sm;
    cr_assert_eq(deftsim_method_from_name("sidco", &sm), 0);
    deftsim_sparsifier_params p = sp_params(sm, 1.0 / 16, 2, *m);
    sp_opt(&p, "sidco_dist", 0);
    sp_opt(&p, "sidco_stages", stages);
    sp_opt(&p, "sidco_exchange", padded);
    *a = sp_accs_new(2, N);
    for (size_t i = 0; i < N; i++) {
        (*a)->acc[0][i] = acc0[i];
        (*a)->acc[1][i] = zero1 ? 0 : acc0[N - 1 - i];
    }
    return sp_new(&p);
}

/* One stage: T = 2 ln 16 = 5.545: worker 0 picks 4 (9), 8 (6), 13 (-7), worker 1 their
 * mirrors 11, 7, 2. */
Test(sp_sidco, one_stage)
{
    deftsim_model *m;
    sp_accs *a;
    deftsim_sparsifier *s = setup(&m, 1, 0, 0, &a);
    deftsim_step_result *r = run(s, a, 0);
    static const uint32_t idx[] = {2, 4, 7, 8, 11, 13};
    static const float val[] = {-3.5f, 4.5f, 3, 3, 4.5f, -3.5f};
    expect_agg(r, idx, val, 6);
    cr_expect_float_eq(column(r, "threshold"), 2 * log(16.0), 1e-6);
    cr_expect_eq(column(r, "stages"), 1);
    cr_expect_eq(column(r, "count_ratio"), 6);
    cr_expect_eq(column(r, "pad_overhead"), 0);
    for (size_t i = 0; i < N; i++) {
        int picked = i == 4 || i == 8 || i == 13;
        cr_expect_eq(a->acc[0][i], picked ? 0.0f : acc0[i], "residual 0 at %zu", i);
        cr_expect_eq(a->acc[1][N - 1 - i], picked ? 0.0f : acc0[i], "residual 1 at %zu",
                     N - 1 - i);
    }
    const deftsim_step *st;
    cr_assert(st = sp_find_step(r, DEFTSIM_STEP_ALLGATHER, "counts", 0));
    cr_expect_eq(st->bytes[0], 4);
    cr_assert(st = sp_find_step(r, DEFTSIM_STEP_ALLGATHER, "pairs", 0));
    cr_expect_eq(st->bytes[0], 24);
    cr_expect_eq(st->bytes[1], 24);
    cr_expect_eq(r->bytes_recv[0], 4 + 24);
    sp_accs_free(a);
    deftsim_sparsifier_free(s);
    deftsim_model_free(m);
}

/* Two stages: the first at ratio 1/4 (T1 = 2 ln 4 = 2.77) leaves 9, 6, 7; their excesses over
 * 6 have mean 4/3, so T2 = 6 + (4/3) ln 4 = 7.85 at ratio (1/16) / (1/4): only 9 passes. */
Test(sp_sidco, two_stages)
{
    deftsim_model *m;
    sp_accs *a;
    deftsim_sparsifier *s = setup(&m, 2, 0, 0, &a);
    deftsim_step_result *r = run(s, a, 0);
    static const uint32_t idx[] = {4, 11};
    static const float val[] = {4.5f, 4.5f};
    expect_agg(r, idx, val, 2);
    cr_expect_float_eq(column(r, "threshold"), 6 + 4.0 / 3.0 * log(4.0), 1e-6);
    cr_expect_eq(column(r, "stages"), 2);
    cr_expect_eq(column(r, "count_ratio"), 2);
    sp_accs_free(a);
    deftsim_sparsifier_free(s);
    deftsim_model_free(m);
}

/* A zero accumulator picks nothing; padded, worker 0's three pairs set both lists' size. */
Test(sp_sidco, zero_accumulator_and_padding)
{
    deftsim_model *m;
    sp_accs *a;
    deftsim_sparsifier *s = setup(&m, 1, 1, 1, &a);
    deftsim_step_result *r = run(s, a, 0);
    static const uint32_t idx[] = {4, 8, 13};
    static const float val[] = {4.5f, 3, -3.5f};
    expect_agg(r, idx, val, 3);
    cr_expect_eq(r->local_count[0], 3);
    cr_expect_eq(r->local_count[1], 0);
    cr_expect_eq(column(r, "stages"), 1);
    cr_expect_eq(column(r, "pad_overhead"), 1);
    const deftsim_step *st;
    cr_assert(st = sp_find_step(r, DEFTSIM_STEP_ALLGATHER, "pairs", 0));
    cr_expect_eq(st->bytes[0], 24);
    cr_expect_eq(st->bytes[1], 24);
    sp_accs_free(a);
    deftsim_sparsifier_free(s);
    deftsim_model_free(m);
}
