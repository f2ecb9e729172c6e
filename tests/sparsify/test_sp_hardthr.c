/* test_sp_hardthr.c - the hard threshold (docs/SPARSIFIERS.md, "hardthr") on cases worked by
 * hand: a given lambda (|acc| >= lambda, ties included), lambda from the density (worker 0's
 * k-th largest |acc| at the first step, kept), the aggregate at the union, the residuals, the
 * count columns and the bytes of both exchanges. tests/sparsify/reference.py compares longer
 * runs with a numpy reference. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "sp_test.h"

TestSuite(sp_hardthr, .init = sp_suite_init, .fini = sp_suite_fini);

enum { N = 8 };
static const float acc0[N] = {1, -3, 2.5f, 0, 4, -2, 0.5f, 3};
static const float acc1[N] = {3, 0, -1, -2.5f, 1, 1, 2, -5};

static deftsim_step_result *run(deftsim_sparsifier *s, sp_accs *a, uint64_t t)
{
    deftsim_step_result *r = NULL;
    cr_assert_eq(deftsim_sparsifier_step(s, t, &a->prov, &r), DEFTSIM_OK, "%s",
                 deftsim_error_message());
    return r;
}

static sp_accs *accs_of(void)
{
    sp_accs *a = sp_accs_new(2, N);
    memcpy(a->acc[0], acc0, sizeof acc0);
    memcpy(a->acc[1], acc1, sizeof acc1);
    return a;
}

/* The rows' column `name` of step r (the registry's value). */
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

static deftsim_sparsifier_params params(deftsim_model **m, double lambda, int padded)
{
    static const char *const shape[] = {"8"};
    *m = sp_model(shape, 1);
    deftsim_method hm;
    cr_assert_eq(deftsim_method_from_name("hardthr", &hm), 0);
    deftsim_sparsifier_params p = sp_params(hm, 0.25, 2, *m);
    sp_opt(&p, "hardthr_lambda", lambda);
    sp_opt(&p, "hardthr_exchange", padded);
    return p;
}

/* lambda = 2.5: worker 0 picks 1, 2, 4, 7 (2.5 itself passes), worker 1 picks 0, 3, 7. */
Test(sp_hardthr, given_lambda)
{
    deftsim_model *m;
    deftsim_sparsifier_params p = params(&m, 2.5, 0);
    deftsim_sparsifier *s = sp_new(&p);
    sp_accs *a = accs_of();
    deftsim_step_result *r = run(s, a, 0);
    static const uint32_t idx[] = {0, 1, 2, 3, 4, 7};
    static const float val[] = {1.5f, -1.5f, 1.25f, -1.25f, 2, -1};
    expect_agg(r, idx, val, 6);
    cr_expect_eq(r->local_count[0], 4);
    cr_expect_eq(r->local_count[1], 3);
    static const float res0[N] = {1, 0, 0, 0, 0, -2, 0.5f, 0};
    static const float res1[N] = {0, 0, -1, 0, 1, 1, 2, 0};
    cr_expect_arr_eq(a->acc[0], res0, sizeof res0);
    cr_expect_arr_eq(a->acc[1], res1, sizeof res1);
    /* k = 2: K / k = 7 / 2; padding m P / K - 1 = 8 / 7 - 1. */
    cr_expect_eq(column(r, "threshold"), 2.5);
    cr_expect_eq(column(r, "count_ratio"), 3.5);
    cr_expect_eq(column(r, "pad_overhead"), 8.0 / 7.0 - 1.0);
    /* Counts (4 B), then each worker's own pairs (8 B each): P = 2, each gets the other's. */
    const deftsim_step *st;
    cr_assert(st = sp_find_step(r, DEFTSIM_STEP_ALLGATHER, "counts", 0));
    cr_expect_eq(st->bytes[0], 4);
    cr_assert(st = sp_find_step(r, DEFTSIM_STEP_ALLGATHER, "pairs", 0));
    cr_expect_eq(st->bytes[0], 32);
    cr_expect_eq(st->bytes[1], 24);
    cr_expect_eq(r->bytes_recv[0], 4 + 24);
    cr_expect_eq(r->bytes_recv[1], 4 + 32);
    cr_expect_eq(r->bytes_sent[0], 4 + 32);
    sp_accs_free(a);
    deftsim_sparsifier_free(s);
    deftsim_model_free(m);
}

/* padded: every list padded to the largest count (4 pairs each). */
Test(sp_hardthr, padded_exchange)
{
    deftsim_model *m;
    deftsim_sparsifier_params p = params(&m, 2.5, 1);
    deftsim_sparsifier *s = sp_new(&p);
    sp_accs *a = accs_of();
    deftsim_step_result *r = run(s, a, 0);
    const deftsim_step *st;
    cr_assert(st = sp_find_step(r, DEFTSIM_STEP_ALLGATHER, "pairs", 0));
    cr_expect_eq(st->bytes[0], 32);
    cr_expect_eq(st->bytes[1], 32);
    cr_expect_eq(r->bytes_recv[0], 4 + 32);
    cr_expect_eq(r->bytes_recv[1], 4 + 32);
    cr_expect_eq(r->nnz, 6);
    sp_accs_free(a);
    deftsim_sparsifier_free(s);
    deftsim_model_free(m);
}

/* lambda = 0: worker 0's 2nd largest |acc| at the first step, 3 (|-3| and |3| tie), kept at
 * the next step although worker 0's accumulator changes. */
Test(sp_hardthr, lambda_from_the_density)
{
    deftsim_model *m;
    deftsim_sparsifier_params p = params(&m, 0, 0);
    deftsim_sparsifier *s = sp_new(&p);
    sp_accs *a = accs_of();
    deftsim_step_result *r = run(s, a, 0);
    static const uint32_t idx[] = {0, 1, 4, 7};
    static const float val[] = {1.5f, -1.5f, 2, -1};
    expect_agg(r, idx, val, 4);
    cr_expect_eq(r->threshold, 3);
    cr_expect_eq(r->local_count[0], 3);
    cr_expect_eq(r->local_count[1], 2);
    /* Next step: + 10 at element 5 of worker 0 (whose 2nd largest |acc| is now 2.5); lambda
     * stays 3: worker 0 picks 5 (|-2 + 10|), worker 1 nothing (its |acc| < 3 everywhere). */
    a->acc[0][5] += 10;
    r = run(s, a, 1);
    cr_expect_eq(r->threshold, 3);
    static const uint32_t idx1[] = {5};
    static const float val1[] = {4};
    expect_agg(r, idx1, val1, 1);
    cr_expect_eq(r->local_count[1], 0);
    cr_expect_eq(column(r, "count_ratio"), 0.5);
    sp_accs_free(a);
    deftsim_sparsifier_free(s);
    deftsim_model_free(m);
}
