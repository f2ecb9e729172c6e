/* test_sp_randk.c - Random-k (docs/SPARSIFIERS.md, "randk") on small cases checked exactly:
 * k = n sends everything (both draws); with k < n the shared draw gives every worker the same
 * k distinct indices, the independent draw each its own, and the aggregate, the residuals and
 * the bytes follow from the sets; the same seed and iteration give the same sets again.
 * tests/sparsify/reference.py compares the draws themselves with a numpy reference. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "sp_test.h"

TestSuite(sp_randk, .init = sp_suite_init, .fini = sp_suite_fini);

enum { N = 8 };

static deftsim_step_result *run(deftsim_sparsifier *s, sp_accs *a, uint64_t t)
{
    deftsim_step_result *r = NULL;
    cr_assert_eq(deftsim_sparsifier_step(s, t, &a->prov, &r), DEFTSIM_OK, "%s",
                 deftsim_error_message());
    return r;
}

/* P workers, acc_w[i] = 3 (i + 1) (w + 1): every sum over workers divides by P = 3 exactly. */
static deftsim_sparsifier *setup(deftsim_model **m, double d, uint32_t P, int independent,
                                 sp_accs **a)
{
    static const char *const shape[] = {"8"};
    *m = sp_model(shape, 1);
    deftsim_method rm;
    cr_assert_eq(deftsim_method_from_name("randk", &rm), 0);
    deftsim_sparsifier_params p = sp_params(rm, d, P, *m);
    sp_opt(&p, "randk_seed", independent);
    *a = sp_accs_new(P, N);
    for (uint32_t w = 0; w < P; w++)
        for (size_t i = 0; i < N; i++) (*a)->acc[w][i] = (float)(3 * (i + 1) * (w + 1));
    return sp_new(&p);
}

/* Worker w's selection, sorted, into out (k entries, distinct, in [0, N)). */
static void selection(deftsim_sparsifier *s, uint32_t w, uint64_t k, uint32_t *out)
{
    const deftsim_kidx *idx;
    uint64_t c;
    cr_assert_eq(deftsim_sparsifier_selection(s, w, &idx, &c), DEFTSIM_OK);
    cr_assert_eq(c, k);
    for (uint64_t i = 0; i < c; i++) {
        cr_assert_lt(idx[i], N);
        if (i) cr_assert_gt(idx[i], idx[i - 1], "distinct, ascending");
        out[i] = idx[i];
    }
}

/* k = n: every element, aggregate the mean, residuals zero; shared: one allreduce of n
 * values; independent: an allgather of n pairs. */
Test(sp_randk, everything_at_density_one)
{
    for (int ind = 0; ind < 2; ind++) {
        deftsim_model *m;
        sp_accs *a;
        deftsim_sparsifier *s = setup(&m, 1.0, 2, ind, &a);
        deftsim_step_result *r = run(s, a, 0);
        cr_assert_eq(r->nnz, N);
        for (size_t i = 0; i < N; i++) {
            cr_expect_eq(r->agg_index[i], i);
            cr_expect_eq(r->agg_value[i], (float)(3 * (i + 1) * 3) / 2);
            cr_expect_eq(a->acc[0][i], 0);
            cr_expect_eq(a->acc[1][i], 0);
        }
        cr_expect_eq(sp_count_collectives(r), 1);
        const deftsim_step *st = ind ? sp_find_step(r, DEFTSIM_STEP_ALLGATHER, "pairs", 0)
                                     : sp_find_step(r, DEFTSIM_STEP_ALLREDUCE, "values", 0);
        cr_assert(st, "%s", ind ? "pairs" : "values");
        cr_expect_eq(st->bytes[0], ind ? N * 8 : N * 4);
        /* P = 2: each receives the other's pairs; the allreduce moves n values each way. */
        cr_expect_eq(r->bytes_recv[0], ind ? N * 8 : N * 4);
        sp_accs_free(a);
        deftsim_sparsifier_free(s);
        deftsim_model_free(m);
    }
}

/* Shared, k = 2 of 8, P = 3: one set for all; its mean there, zero residuals there only. */
Test(sp_randk, shared_set)
{
    deftsim_model *m;
    sp_accs *a;
    deftsim_sparsifier *s = setup(&m, 0.25, 3, 0, &a);
    deftsim_step_result *r = run(s, a, 5);
    uint32_t set[3][2];
    for (uint32_t w = 0; w < 3; w++) selection(s, w, 2, set[w]);
    cr_expect_arr_eq(set[1], set[0], sizeof set[0]);
    cr_expect_arr_eq(set[2], set[0], sizeof set[0]);
    cr_assert_eq(r->nnz, 2);
    for (size_t j = 0; j < 2; j++) {
        cr_expect_eq(r->agg_index[j], set[0][j]);
        cr_expect_eq(r->agg_value[j], (float)(3 * (set[0][j] + 1) * 6) / 3);
    }
    for (uint32_t w = 0; w < 3; w++)
        for (uint32_t i = 0; i < N; i++) {
            int in = i == set[0][0] || i == set[0][1];
            cr_expect_eq(a->acc[w][i], in ? 0.0f : (float)(3 * (i + 1) * (w + 1)));
        }
    cr_expect_eq(sp_count_collectives(r), 1);
    cr_expect_eq(sp_find_step(r, DEFTSIM_STEP_ALLREDUCE, "values", 0)->bytes[0], 2 * 4);
    /* The same seed and iteration in a fresh sparsifier: the same set. */
    deftsim_model *m2;
    sp_accs *a2;
    deftsim_sparsifier *s2 = setup(&m2, 0.25, 3, 0, &a2);
    run(s2, a2, 5);
    uint32_t again[2];
    selection(s2, 2, 2, again);
    cr_expect_arr_eq(again, set[0], sizeof again);
    sp_accs_free(a2);
    deftsim_sparsifier_free(s2);
    deftsim_model_free(m2);
    sp_accs_free(a);
    deftsim_sparsifier_free(s);
    deftsim_model_free(m);
}

/* Independent, k = 2 of 8, P = 3: each its own set; at the union the sum over the workers
 * that picked an index, / 3; each residual zero at its own set only; 2 pairs each. */
Test(sp_randk, independent_sets)
{
    deftsim_model *m;
    sp_accs *a;
    deftsim_sparsifier *s = setup(&m, 0.25, 3, 1, &a);
    deftsim_step_result *r = run(s, a, 0);
    uint32_t set[3][2];
    float want[N] = {0};
    int in_union[N] = {0};
    for (uint32_t w = 0; w < 3; w++) {
        selection(s, w, 2, set[w]);
        for (size_t j = 0; j < 2; j++) {
            want[set[w][j]] += (float)(3 * (set[w][j] + 1) * (w + 1));
            in_union[set[w][j]] = 1;
        }
    }
    size_t nu = 0;
    for (uint32_t i = 0; i < N; i++)
        if (in_union[i]) {
            cr_assert_lt(nu, r->nnz);
            cr_expect_eq(r->agg_index[nu], i);
            cr_expect_eq(r->agg_value[nu], want[i] / 3, "at %u", i);
            nu++;
        }
    cr_expect_eq(r->nnz, nu);
    for (uint32_t w = 0; w < 3; w++)
        for (uint32_t i = 0; i < N; i++) {
            int in = i == set[w][0] || i == set[w][1];
            cr_expect_eq(a->acc[w][i], in ? 0.0f : (float)(3 * (i + 1) * (w + 1)));
        }
    const deftsim_step *st = sp_find_step(r, DEFTSIM_STEP_ALLGATHER, "pairs", 0);
    cr_assert(st);
    for (uint32_t w = 0; w < 3; w++) cr_expect_eq(st->bytes[w], 2 * 8);
    sp_accs_free(a);
    deftsim_sparsifier_free(s);
    deftsim_model_free(m);
}
