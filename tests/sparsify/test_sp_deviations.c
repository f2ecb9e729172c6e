/* test_sp_deviations.c - the options that remove deftsim's known deviations from the authors'
 * code (docs/SPARSIFIERS.md, "Deviations from the authors' code"):
 *
 *  - [sparsify] deft_norm_precision = float32: DEFT's fragment norms as PyTorch's float32 CUDA
 *    reduction adds them (hand cases whose float32 sums depend on which thread, accumulator
 *    and block an element lands in) and the authors' order of operations for k_j (a case on
 *    the integer boundary), through the allocation and through a whole DEFT step; float64
 *    unchanged;
 *  - topk_ag_mean = each: topk-ag's mean as the authors' per-worker division, exactly, and the
 *    size of its difference from sum-then-divide (printed: the measured figure of the docs);
 *  - oktopk_layer_order: the regions of the reversed buffer on a hand case, the reverse order
 *    on a model equal step for step to the forward order on the model with its layers
 *    reversed, and auto following the variant. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deftsim_deft.h"
#include "sp_test.h"

/* Ok-Topk's choices by position in its option table (oktopk_variant, oktopk_layer_order). */
enum { OK_VGG, OK_BERT };
enum { ORDER_AUTO, ORDER_REVERSE, ORDER_FORWARD };

TestSuite(sp_dev, .init = sp_suite_init, .fini = sp_suite_fini);

static deftsim_step_result *step_ok(deftsim_sparsifier *s, uint64_t t,
                                    const deftsim_acc_provider *prov)
{
    deftsim_step_result *r = NULL;
    cr_assert_eq(deftsim_sparsifier_step(s, t, prov, &r), DEFTSIM_OK, "%s",
                 deftsim_error_message());
    return r;
}

/* ---- DEFT: the float32 norms ------------------------------------------------------------ */

/* a = 2^-12, a^2 = 2^-24: half an ulp of 1, so 1 + a^2 rounds back to 1 (ties to even) while
 * a^2 + a^2 = 2^-23 is a whole ulp and survives. */
static const float A = 0x1p-12f;

/* Four elements: one block of 4 lanes. The shuffle tree adds lanes (0, 1) and (2, 3) first,
 * then the pairs: (a^2 + 1) + (a^2 + a^2) = 1 + 2^-23. Adding in index order in float would
 * give 1, in double 1 + 3 * 2^-24. */
Test(sp_dev, float32_norm_tree_of_a_small_fragment)
{
    const float x[4] = {A, 1.0f, A, A};
    cr_expect_eq(deftsim_deft_sumsq_float32(x, 4), 1.0f + 0x1p-23f, "%a",
                 (double)deftsim_deft_sumsq_float32(x, 4));
    float seq = 0;
    for (int i = 0; i < 4; i++) seq += x[i] * x[i];
    cr_expect_eq(seq, 1.0f); /* the order matters on this input */
    cr_expect_eq(deftsim_deft_sumsq_float32(x, 0), 0.0f);
    const float three[1] = {-3.0f};
    cr_expect_eq(deftsim_deft_norm_float32(three, 1), 3.0f);
    const float y[2] = {3.0f, 4.0f};
    cr_expect_eq(deftsim_deft_norm_float32(y, 2), 5.0f);
}

/* m = 200000: 512 threads, ceil(200000 / 512) = 391 values each, so 25 blocks and a stride of
 * S = 512 * 25 = 12800. Elements 0, 4S and 8S meet in thread 0's first accumulator, one after
 * the other: 1, then 1 + a^2 = 1 twice. Elements 0, 1024 and 1536 are lane 0 of blocks 0, 2
 * and 3: the last block's tree adds block results (2, 3) before adding them to (0, 1), so the
 * two a^2 survive; with blocks 1 and 2 instead, (0, 1) and (2, 3) each add one a^2 and both
 * are lost. */
Test(sp_dev, float32_norm_threads_accumulators_and_blocks)
{
    const uint64_t m = 200000, S = 12800;
    float *x = calloc(m, sizeof *x);
    cr_assert(x);
    x[0] = 1.0f;
    x[4 * S] = x[8 * S] = A;
    cr_expect_eq(deftsim_deft_sumsq_float32(x, m), 1.0f, "same accumulator: %a",
                 (double)deftsim_deft_sumsq_float32(x, m));
    x[4 * S] = x[8 * S] = 0;
    x[S] = x[2 * S] = A; /* accumulators 1 and 2 of thread 0: ((1 + a^2) + a^2) + 0 */
    cr_expect_eq(deftsim_deft_sumsq_float32(x, m), 1.0f);
    x[S] = x[2 * S] = 0;
    x[1024] = x[1536] = A;
    cr_expect_eq(deftsim_deft_sumsq_float32(x, m), 1.0f + 0x1p-23f, "blocks 2, 3: %a",
                 (double)deftsim_deft_sumsq_float32(x, m));
    x[1024] = x[1536] = 0;
    x[512] = x[1024] = A;
    cr_expect_eq(deftsim_deft_sumsq_float32(x, m), 1.0f, "blocks 1, 2: %a",
                 (double)deftsim_deft_sumsq_float32(x, m));
    x[512] = x[1024] = 0;
    x[2] = x[3] = A; /* lanes 2 and 3 of block 0 */
    cr_expect_eq(deftsim_deft_sumsq_float32(x, m), 1.0f + 0x1p-23f);
    free(x);
}

/* On ordinary data the float32 norm stays within a few float ulps of the double one. */
Test(sp_dev, float32_norm_close_to_double)
{
    const uint64_t m = 300007;
    float *x = malloc(m * sizeof *x);
    cr_assert(x);
    sp_fill_int(x, m, 1000, sp_seed(), 1);
    for (uint64_t i = 0; i < m; i++) x[i] *= 1e-3f / 7.0f;
    double d = 0;
    for (uint64_t i = 0; i < m; i++) d += (double)x[i] * x[i];
    d = sqrt(d);
    double f = deftsim_deft_norm_float32(x, m);
    cr_expect(fabs(f - d) <= 4e-7 * d, "float32 %.9g vs double %.9g", f, d);
    free(x);
}

/* ---- DEFT: the authors' order of operations for k_j -------------------------------------- */

/* Two fragments with norms 15 and 7 and k = 22: deftsim's tau = floor(22 * 15 / 22) = 15,
 * the authors' trunc(22 * (15 / 22)) = trunc(14.999999999999998) = 14; the second fragment
 * then gets the rest, 7 or 8. */
Test(sp_dev, authors_k_order_on_the_integer_boundary)
{
    const deftsim_fragment f[2] = {{0, 100, 0}, {100, 100, 1}};
    const double norms[2] = {15, 7};
    uint64_t kj[2];
    size_t order[2];
    cr_assert_eq(22.0 * (15.0 / 22.0), 14.999999999999998);
    cr_expect_eq(deftsim_deft_allocate_k(f, 2, norms, 22, kj, order), 22);
    cr_expect(kj[0] == 15 && kj[1] == 7, "float64: %llu %llu", (unsigned long long)kj[0],
              (unsigned long long)kj[1]);
    cr_expect_eq(deftsim_deft_allocate_k_authors(f, 2, norms, 22, kj, order), 22);
    cr_expect(kj[0] == 14 && kj[1] == 8, "float32: %llu %llu", (unsigned long long)kj[0],
              (unsigned long long)kj[1]);
}

/* The same case through a DEFT step at P = 2: each fragment holds one nonzero (15 and 7, exact
 * norms in float and double), the leader packs fragment 0 into bin 0 and fragment 1 into bin
 * 1, so worker 0 selects k_0 and worker 1 k_1: (15, 7) with float64, (14, 8) with float32. */
Test(sp_dev, deft_step_float32_gives_the_authors_k)
{
    const char *shapes[] = {"100", "100"};
    deftsim_model *m = sp_model(shapes, 2);
    for (int prec = 0; prec < 2; prec++) {
        deftsim_sparsifier_params p = sp_params(DEFTSIM_METHOD_DEFT, 0.11, 2, m);
        sp_opt(&p, "deft_norm_precision", prec); /* float64, float32 */
        deftsim_sparsifier *s = sp_new(&p);
        sp_accs *a = sp_accs_new(2, 200);
        for (uint32_t w = 0; w < 2; w++) {
            a->acc[w][3] = 15;
            a->acc[w][150] = -7;
        }
        deftsim_step_result *r = step_ok(s, 0, &a->prov);
        cr_expect_eq(r->k, 22);
        cr_expect_eq(r->kj_total, 22);
        cr_expect_eq(r->local_count[0], prec ? 14 : 15, "%s", prec ? "float32" : "float64");
        cr_expect_eq(r->local_count[1], prec ? 8 : 7, "%s", prec ? "float32" : "float64");
        sp_accs_free(a);
        deftsim_sparsifier_free(s);
    }
    deftsim_model_free(m);
}

Test(sp_dev, unknown_option_values_are_refused)
{
    const char *shapes[] = {"100"};
    deftsim_model *m = sp_model(shapes, 1);
    deftsim_sparsifier *s = NULL;
    deftsim_sparsifier_params p = sp_params(DEFTSIM_METHOD_DEFT, 0.1, 2, m);
    sp_opt(&p, "deft_norm_precision", 7);
    cr_expect_eq(deftsim_sparsifier_new(&p, &s), DEFTSIM_E_USAGE);
    cr_expect(strstr(deftsim_error_message(), "deft_norm_precision"), "%s",
              deftsim_error_message());
    p = sp_params(DEFTSIM_METHOD_OKTOPK, 0.1, 2, m);
    sp_opt(&p, "oktopk_layer_order", 9);
    cr_expect_eq(deftsim_sparsifier_new(&p, &s), DEFTSIM_E_USAGE);
    cr_expect(strstr(deftsim_error_message(), "oktopk_layer_order"));
    p = sp_params(DEFTSIM_METHOD_TOPK_AG, 0.1, 2, m);
    sp_opt(&p, "topk_ag_mean", 3);
    cr_expect_eq(deftsim_sparsifier_new(&p, &s), DEFTSIM_E_USAGE);
    cr_expect(strstr(deftsim_error_message(), "topk_ag_mean"));
    /* The values the tests below use by position, as the option tables name them. */
    static const char *const want[][2] = {{"deft_norm_precision", "float32"},
                                          {"oktopk_layer_order", "reverse"},
                                          {"topk_ag_mean", "each"}};
    static const int pos[] = {1, ORDER_REVERSE, 1};
    for (size_t i = 0; i < 3; i++) {
        deftsim_method mm;
        size_t j;
        cr_assert_eq(deftsim_method_option_find(want[i][0], &mm, &j), 0);
        cr_expect_str_eq(deftsim_method_get(mm)->options[j].names[pos[i]], want[i][1]);
    }
    deftsim_model_free(m);
}

/* ---- topk-ag: the authors' per-worker mean ----------------------------------------------- */

/* Non-integer values: x / 7 of integers in [-1000, 1000], so that sums round. */
static void fill_frac(sp_accs *a, uint64_t seed)
{
    for (uint32_t w = 0; w < a->P; w++) {
        sp_fill_int(a->acc[w], a->n, 1000, seed, 100 + w);
        for (size_t i = 0; i < a->n; i++) a->acc[w][i] /= 7.0f;
    }
}

/* Runs topk-ag with both means on the same accumulators; mean = each must equal
 * ((0 + v_0 / P) + v_1 / P) + .. over the workers that picked the index, in worker order.
 * Returns the largest |each - sum| over (the mean of the |v_w| involved), and in *rel the
 * largest |each - sum| / |sum|. */
static double topk_ag_compare(uint32_t P, size_t n, double d, uint64_t seed, double *rel,
                              int *differ)
{
    const char *shape[1];
    char buf[32];
    snprintf(buf, sizeof buf, "%zu", n);
    shape[0] = buf;
    deftsim_model *m = sp_model(shape, 1);
    deftsim_step_result *r[2];
    float *val[2];
    deftsim_kidx *idx[2];
    uint64_t nnz[2];
    sp_accs *a = sp_accs_new(P, n);
    fill_frac(a, seed);
    float **orig = sp_accs_copy(a);
    for (int mode = 0; mode < 2; mode++) {
        deftsim_sparsifier_params p = sp_params(DEFTSIM_METHOD_TOPK_AG, d, P, m);
        sp_opt(&p, "topk_ag_mean", mode); /* sum, each */
        deftsim_sparsifier *s = sp_new(&p);
        for (uint32_t w = 0; w < P; w++) memcpy(a->acc[w], orig[w], n * sizeof(float));
        r[mode] = step_ok(s, 0, &a->prov);
        nnz[mode] = r[mode]->nnz;
        val[mode] = malloc(nnz[mode] * sizeof(float));
        idx[mode] = malloc(nnz[mode] * sizeof(deftsim_kidx));
        memcpy(val[mode], r[mode]->agg_value, nnz[mode] * sizeof(float));
        memcpy(idx[mode], r[mode]->agg_index, nnz[mode] * sizeof(deftsim_kidx));
        deftsim_sparsifier_free(s);
    }
    cr_assert_eq(nnz[0], nnz[1]);
    /* Who picked what: the residuals are zero at a worker's picks (a picked 0 adds nothing). */
    double worst = 0, worst_rel = 0;
    *differ = 0;
    for (uint64_t e = 0; e < nnz[0]; e++) {
        uint32_t i = idx[0][e];
        cr_assert_eq(idx[1][e], i);
        float want = 0, sum = 0;
        double mag = 0;
        int first = 1;
        for (uint32_t w = 0; w < P; w++) {
            if (orig[w][i] == 0 || a->acc[w][i] != 0) continue; /* not picked by w (or 0) */
            float v = orig[w][i];
            want = want + v / (float)P;
            sum = first ? v : sum + v;
            first = 0;
            mag += fabs(v);
        }
        float sum_mean = (P & (P - 1)) == 0 ? sum * (1.0f / (float)P) : sum / (float)P;
        cr_assert_eq(val[1][e], want, "P=%u index %u: each %a, want %a", P, i, (double)val[1][e],
                     (double)want);
        cr_assert_eq(val[0][e], sum_mean, "P=%u index %u: sum %a, want %a", P, i,
                     (double)val[0][e], (double)sum_mean);
        double diff = fabs((double)val[1][e] - (double)val[0][e]);
        *differ += diff > 0;
        if (diff / (mag / P) > worst) worst = diff / (mag / P);
        if (val[0][e] != 0 && diff / fabs((double)val[0][e]) > worst_rel)
            worst_rel = diff / fabs((double)val[0][e]);
    }
    for (int mode = 0; mode < 2; mode++) {
        free(val[mode]);
        free(idx[mode]);
    }
    sp_copies_free(orig, P);
    sp_accs_free(a);
    deftsim_model_free(m);
    *rel = worst_rel;
    return worst;
}

Test(sp_dev, topk_ag_each_is_the_authors_mean)
{
    double rel;
    int differ;
    topk_ag_compare(3, 600, 0.2, sp_seed(), &rel, &differ);
    cr_expect_gt(differ, 0, "no entry where the two means differ: the case tests nothing");
    /* P a power of two: dividing by P is exact, both orders give the same bits. */
    topk_ag_compare(4, 600, 0.2, sp_seed(), &rel, &differ);
    cr_expect_eq(differ, 0);
}

/* The measured size (docs/SPARSIFIERS.md quotes this output): n = 1000000, d = 0.01, values
 * x / 7 of integers in [-1000, 1000] (every worker picks its own top-k, so about a third of the
 * union is picked by more than one worker at P = 8 and more at larger P). */
Test(sp_dev, topk_ag_mean_difference_size)
{
    const uint32_t Ps[] = {3, 5, 6, 7, 12, 24};
    for (size_t i = 0; i < sizeof Ps / sizeof Ps[0]; i++) {
        double rel;
        int differ;
        double w = topk_ag_compare(Ps[i], 1000000, 0.01, 12345, &rel, &differ);
        printf("topk-ag mean, P = %2u: %6d entries differ; max |each - sum| = %.3g x mean |v|, "
               "max relative to |sum| %.3g\n",
               Ps[i], differ, w, rel);
        cr_expect(w <= 2.0 * Ps[i] * 0x1p-24, "P=%u: %g", Ps[i], w);
    }
}

/* ---- Ok-Topk: the layer order of the buffer --------------------------------------------- */

static deftsim_sparsifier *ok_new(const deftsim_model *m, double d, uint32_t P,
                                  int v, int o)
{
    deftsim_sparsifier_params p = sp_params(DEFTSIM_METHOD_OKTOPK, d, P, m);
    sp_opt(&p, "oktopk_variant", v);
    sp_opt(&p, "oktopk_warmup", 0);
    sp_opt(&p, "oktopk_layer_order", o);
    return sp_new(&p);
}

/* Layers of 2 and 6 elements (n = 8), P = 2, k = 4, the accumulators of test_sp_oktopk's hand
 * case. The reversed buffer holds model elements 2..7 at positions 0..5 and 0..1 at 6..7.
 *   w0 = [10, -1, 6, 0, -9, 2, 5, 0] picks {0, 2, 4}: buffer order 2 (0), 4 (2), 0 (6);
 *   w1 = [0, 8, -3, 7, 0, 1, -4, 11] picks {1, 3, 7}: buffer order 3 (1), 7 (5), 1 (7).
 * Proposals S[1]: positions 2 and 5; the boundary floor(7 / 2) = 3: owner 0 has model
 * elements {2, 3, 4}, owner 1 {5, 6, 7, 0, 1}. So w0 sends 1 entry to owner 1 ({0}) and w1 1
 * to owner 0 ({3}); each owner receives 3 (balance 1); at t = 0 every nonzero sum is a
 * candidate (3 and 3: 24 B each in the allgather). The top 4 and the aggregate are those of
 * the forward order, {0, 1, 4, 7}. In the forward order the boundary is 2 and w0 sends 2
 * entries, owner 1 receives 4 (balance 4/3), the allgather carries 2 and 4 entries. */
Test(sp_dev, oktopk_reverse_hand_case)
{
    const char *shapes[] = {"2", "6"};
    deftsim_model *m = sp_model(shapes, 2);
    const float w0[8] = {10, -1, 6, 0, -9, 2, 5, 0}, w1[8] = {0, 8, -3, 7, 0, 1, -4, 11};
    for (int fwd = 0; fwd < 2; fwd++) {
        deftsim_sparsifier *s = ok_new(m, 0.5, 2, OK_VGG,
                                       fwd ? ORDER_FORWARD
                                           : ORDER_AUTO);
        sp_accs *a = sp_accs_new(2, 8);
        memcpy(a->acc[0], w0, sizeof w0);
        memcpy(a->acc[1], w1, sizeof w1);
        deftsim_step_result *r = step_ok(s, 0, &a->prov);
        const char *o = fwd ? "forward" : "reverse";
        cr_assert_eq(r->nnz, 4);
        const uint32_t want_i[4] = {0, 1, 4, 7};
        const float want_v[4] = {5, 4, -4.5f, 5.5f};
        for (int j = 0; j < 4; j++) {
            cr_expect_eq(r->agg_index[j], want_i[j], "%s: entry %d", o, j);
            cr_expect_eq(r->agg_value[j], want_v[j], "%s: entry %d", o, j);
        }
        cr_expect_eq(r->oktopk_threshold_global, 8);
        cr_expect_eq(r->oktopk_region_balance, fwd ? 4.0 * 2 / 6 : 1.0, "%s: %g", o,
                     r->oktopk_region_balance);
        const deftsim_step *st = sp_find_step(r, DEFTSIM_STEP_P2P, "reduce", 0);
        cr_assert(st);
        cr_expect_eq(st->peer[2], 1);
        cr_expect_eq(st->bytes[2], fwd ? 8 : 4, "%s: w0 -> owner 1", o);
        cr_expect_eq(st->bytes[3], fwd ? 8 : 4, "%s: w0 -> owner 1", o);
        cr_expect_eq(st->peer[st->fan + 2], 0);
        cr_expect_eq(st->bytes[st->fan + 2], 4, "%s: w1 -> owner 0", o);
        cr_assert(st = sp_find_step(r, DEFTSIM_STEP_ALLGATHER, "selection", 0));
        cr_expect_eq(st->bytes[0], fwd ? 16 : 24, "%s", o);
        cr_expect_eq(st->bytes[1], fwd ? 32 : 24, "%s", o);
        const float r0[8] = {0, -1, 6, 0, 0, 2, 5, 0}, r1[8] = {0, 0, -3, 7, 0, 1, -4, 0};
        cr_expect_arr_eq(a->acc[0], r0, sizeof r0);
        cr_expect_arr_eq(a->acc[1], r1, sizeof r1);
        /* Worker 0's selection still comes back ascending. */
        const deftsim_kidx *sel;
        uint64_t cnt;
        cr_assert_eq(deftsim_sparsifier_selection(s, 0, &sel, &cnt), DEFTSIM_OK);
        cr_assert_eq(cnt, 3);
        cr_expect(sel[0] == 0 && sel[1] == 2 && sel[2] == 4, "%s", o);
        sp_accs_free(a);
        deftsim_sparsifier_free(s);
    }
    deftsim_model_free(m);
}

/* Model index i of model m -> its index in the model with the layers reversed. */
static size_t rev_index(const deftsim_model *m, size_t i)
{
    for (size_t l = 0; l < m->nlayers; l++) {
        const deftsim_layer *y = &m->layers[l];
        if (i >= y->offset && i < y->offset + y->numel)
            return (size_t)(m->numel - y->offset - y->numel + (i - y->offset));
    }
    cr_assert_fail("index %zu outside the model", i);
    return 0;
}

static void expect_same_schedule(const deftsim_step_result *x, const deftsim_step_result *y,
                                 uint32_t P, uint64_t t)
{
    cr_assert_eq(x->schedule.nsteps, y->schedule.nsteps, "t=%llu", (unsigned long long)t);
    for (size_t i = 0; i < x->schedule.nsteps; i++) {
        const deftsim_step *a = &x->schedule.steps[i], *b = &y->schedule.steps[i];
        cr_assert_eq(a->kind, b->kind);
        cr_assert_str_eq(a->name, b->name);
        if (a->kind == DEFTSIM_STEP_COMPUTE) continue;
        size_t slots = a->kind == DEFTSIM_STEP_P2P ? (size_t)P * a->fan : P;
        cr_assert_eq(a->fan, b->fan);
        cr_assert_eq(a->root, b->root);
        for (size_t j = 0; j < slots; j++) {
            cr_assert_eq(a->bytes[j], b->bytes[j], "t=%llu step %s slot %zu",
                         (unsigned long long)t, a->name, j);
            if (a->kind == DEFTSIM_STEP_P2P) cr_assert_eq(a->peer[j], b->peer[j]);
        }
    }
}

/* The reverse order on layers (A, B, C) is the forward order on (C, B, A), step for step: the
 * same thresholds, counts, regions, bytes and aggregate (its indices mapped). */
static void reverse_equals_reversed_model(uint32_t P, int v, uint64_t T)
{
    const char *fw[] = {"40x25", "37", "300", "11"}, *bw[] = {"11", "300", "37", "40x25"};
    deftsim_model *m = sp_model(fw, 4), *mr = sp_model(bw, 4);
    const size_t n = m->numel;
    deftsim_sparsifier *s = ok_new(m, 0.02, P, v, ORDER_REVERSE);
    deftsim_sparsifier *sr = ok_new(mr, 0.02, P, v, ORDER_FORWARD);
    sp_accs *a = sp_accs_new(P, n), *ar = sp_accs_new(P, n);
    size_t *map = malloc(n * sizeof *map);
    float *g = malloc(n * sizeof *g);
    for (size_t i = 0; i < n; i++) map[i] = rev_index(m, i);
    uint64_t seed = sp_seed();
    int recuts = 0;
    for (uint64_t t = 0; t < T; t++) {
        for (uint32_t w = 0; w < P; w++) {
            sp_fill_int(g, n, 1000, seed, t * 1000 + w);
            for (size_t i = 0; i < n; i++) {
                a->acc[w][i] += g[i];
                ar->acc[w][map[i]] += g[i];
            }
        }
        deftsim_step_result *r = step_ok(s, t, &a->prov), *rr = step_ok(sr, t, &ar->prov);
        cr_assert_eq(r->oktopk_threshold_local, rr->oktopk_threshold_local);
        if (!isnan(rr->oktopk_threshold_global))
            cr_assert_eq(r->oktopk_threshold_global, rr->oktopk_threshold_global);
        cr_assert_eq(r->oktopk_region_balance, rr->oktopk_region_balance, "t=%llu",
                     (unsigned long long)t);
        for (uint32_t w = 0; w < P; w++) cr_assert_eq(r->local_count[w], rr->local_count[w]);
        expect_same_schedule(r, rr, P, t);
        cr_assert_eq(r->nnz, rr->nnz);
        sp_check_sorted(r);
        for (uint64_t e = 0; e < r->nnz; e++) {
            /* rr's entry for r's index e: its position by binary search over rr's ascending
             * indices. */
            deftsim_kidx want = (deftsim_kidx)map[r->agg_index[e]];
            uint64_t lo = 0, hi = rr->nnz;
            while (lo < hi) {
                uint64_t mid = (lo + hi) / 2;
                if (rr->agg_index[mid] < want) lo = mid + 1;
                else hi = mid;
            }
            cr_assert(lo < rr->nnz && rr->agg_index[lo] == want);
            cr_assert_eq(r->agg_value[e], rr->agg_value[lo]);
        }
        for (uint32_t w = 0; w < P; w++)
            for (size_t i = 0; i < n; i++) cr_assert_eq(a->acc[w][i], ar->acc[w][map[i]]);
        recuts += r->oktopk_recut;
    }
    cr_expect_geq(recuts, 2);
    free(map);
    free(g);
    sp_accs_free(a);
    sp_accs_free(ar);
    deftsim_sparsifier_free(s);
    deftsim_sparsifier_free(sr);
    deftsim_model_free(m);
    deftsim_model_free(mr);
}

Test(sp_dev, oktopk_reverse_equals_reversed_layers_p3) { reverse_equals_reversed_model(3, OK_VGG, 70); }
Test(sp_dev, oktopk_reverse_equals_reversed_layers_p6) { reverse_equals_reversed_model(6, OK_VGG, 70); }
Test(sp_dev, oktopk_reverse_equals_reversed_layers_bert) { reverse_equals_reversed_model(5, OK_BERT, 140); }

/* auto: the VGG variant reverses the layers, the BERT variant keeps them. */
Test(sp_dev, oktopk_auto_follows_the_variant)
{
    const char *shapes[] = {"2", "6"};
    deftsim_model *m = sp_model(shapes, 2);
    const float w0[8] = {10, -1, 6, 0, -9, 2, 5, 0}, w1[8] = {0, 8, -3, 7, 0, 1, -4, 11};
    const int vs[2] = {OK_VGG, OK_BERT};
    for (int i = 0; i < 2; i++) {
        double bal[3];
        for (int o = 0; o < 3; o++) {
            deftsim_sparsifier *s = ok_new(m, 0.5, 2, vs[i], o);
            sp_accs *a = sp_accs_new(2, 8);
            memcpy(a->acc[0], w0, sizeof w0);
            memcpy(a->acc[1], w1, sizeof w1);
            bal[o] = step_ok(s, 0, &a->prov)->oktopk_region_balance;
            sp_accs_free(a);
            deftsim_sparsifier_free(s);
        }
        cr_expect_eq(bal[ORDER_REVERSE], 1.0);
        cr_expect_eq(bal[ORDER_FORWARD], 4.0 / 3);
        cr_expect_eq(bal[ORDER_AUTO],
                     bal[i == 0 ? ORDER_REVERSE : ORDER_FORWARD],
                     "variant %d", i);
    }
    deftsim_model_free(m);
}
