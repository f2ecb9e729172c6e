/* test_sp_lags.c - LAGS against its definition (docs/SPARSIFIERS.md, "lags"): per-layer k, a
 * hand case, a brute-force reference over several steps (exact: integer accumulators), the
 * schedule (one allgather per layer, from the last layer, asynchronous but for the last) and
 * bench sim's closed form, the non-persistent provider, [compute]'s layer-by-layer overlap of
 * the backward pass, and the adaptive rule's per-layer counts (lags_rule = adaptive). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "deftsim_compute.h"
#include "deftsim_config.h"
#include "sp_test.h"

/* LAGS's value in the registry (it has no name in deftsim_method). */
static deftsim_method lags(void)
{
    deftsim_method m;
    cr_assert_eq(deftsim_method_from_name("lags", &m), 0);
    return m;
}

/* Its result columns by position in its registry entry (extra[]). */
#define COL_LAYERS 0
#define COL_COUNT_MIN 1
#define COL_COUNT_MAX 2

TestSuite(sp_lags, .init = sp_suite_init, .fini = sp_suite_fini);

static deftsim_step_result *step_ok(deftsim_sparsifier *s, uint64_t t,
                                    const deftsim_acc_provider *prov)
{
    deftsim_step_result *r = NULL;
    cr_assert_eq(deftsim_sparsifier_step(s, t, prov, &r), DEFTSIM_OK, "%s",
                 deftsim_error_message());
    return r;
}

/* Layers "4" and "2x3" at density 0.5: k = 2 and 3. */
Test(sp_lags, hand_case)
{
    static const char *const shapes[] = {"4", "2x3"};
    deftsim_model *m = sp_model(shapes, 2);
    deftsim_sparsifier_params p = sp_params(lags(), 0.5, 2, m);
    deftsim_sparsifier *s = sp_new(&p);
    sp_accs *a = sp_accs_new(2, 10);
    const float w0[10] = {1, -5, 3, 0, /**/ 9, 0, -2, 7, 1, 4};
    const float w1[10] = {6, 0, -1, 2, /**/ 0, -8, 3, 1, 2, 0};
    memcpy(a->acc[0], w0, sizeof w0);
    memcpy(a->acc[1], w1, sizeof w1);
    deftsim_step_result *r = step_ok(s, 0, &a->prov);
    /* w0: layer 0 picks {1, 2}, layer 1 {4, 7, 9}; w1: layer 0 {0, 3}, layer 1 {5, 6, 8}. */
    cr_assert_eq(r->local_count[0], 5);
    cr_assert_eq(r->extra[COL_LAYERS], 2);
    cr_assert_eq(r->extra[COL_COUNT_MIN], 2);
    cr_assert_eq(r->extra[COL_COUNT_MAX], 3);
    const deftsim_kidx *sel;
    uint64_t c;
    cr_assert_eq(deftsim_sparsifier_selection(s, 0, &sel, &c), DEFTSIM_OK);
    const deftsim_kidx want0[5] = {1, 2, 4, 7, 9}, want1[5] = {0, 3, 5, 6, 8};
    for (int i = 0; i < 5; i++) cr_expect_eq(sel[i], want0[i]);
    cr_assert_eq(deftsim_sparsifier_selection(s, 1, &sel, &c), DEFTSIM_OK);
    for (int i = 0; i < 5; i++) cr_expect_eq(sel[i], want1[i]);
    cr_assert_eq(r->nnz, 10);
    const float agg[10] = {3, -2.5f, 1.5f, 1, 4.5f, -4, 1.5f, 3.5f, 1, 2};
    for (int i = 0; i < 10; i++) {
        cr_expect_eq(r->agg_index[i], (deftsim_kidx)i);
        cr_expect_eq(r->agg_value[i], agg[i], "agg[%d] = %g", i, r->agg_value[i]);
    }
    const float res0[10] = {1, 0, 0, 0, 0, 0, -2, 0, 1, 0}, res1[10] = {0, 0, -1, 0, 0, 0, 0, 1, 0, 0};
    for (int i = 0; i < 10; i++) {
        cr_expect_eq(a->acc[0][i], res0[i]);
        cr_expect_eq(a->acc[1][i], res1[i]);
    }
    /* The schedule: layer 1 first (its allgather asynchronous), then layer 0, then the sum. */
    static const char *const names[] = {"select", "residual", "pairs", "select", "residual",
                                        "pairs", "sum"};
    static const uint32_t layers[] = {2, 2, 2, 1, 1, 1, 0};
    cr_assert_eq(r->schedule.nsteps, 7);
    for (int i = 0; i < 7; i++) {
        cr_expect_str_eq(r->schedule.steps[i].name, names[i]);
        cr_expect_eq(r->schedule.steps[i].layer, layers[i], "step %d", i);
    }
    cr_expect_eq(r->schedule.steps[2].flags, DEFTSIM_STEP_ASYNC);
    cr_expect_eq(r->schedule.steps[5].flags, 0);
    cr_expect_eq(r->schedule.steps[2].bytes[1], 3 * 8);
    cr_expect_eq(r->schedule.steps[5].bytes[0], 2 * 8);
    cr_expect_eq(r->bytes_sent[0], 5 * 8);
    sp_accs_free(a);
    deftsim_sparsifier_free(s);
    deftsim_model_free(m);
}

/* Brute force over several steps: per layer the exact top-k of the slice, the aggregate the sum
 * over workers / P at the union, residuals zero at the picks. Integer values: exact. */
Test(sp_lags, reference_every_P)
{
    deftsim_model *m = sp_model_mix();
    const size_t n = m->numel, L = m->nlayers;
    const uint64_t seed = sp_seed();
    for (uint32_t P = 1; P <= 5; P += 2) {
        deftsim_sparsifier_params p = sp_params(lags(), 0.03, P, m);
        deftsim_sparsifier *s = sp_new(&p), *s2 = sp_new(&p);
        sp_accs *a = sp_accs_new(P, n);
        sp_npv *v = sp_npv_new(P, n);
        float *sum = calloc(n, sizeof *sum);
        unsigned char *in = calloc(n, 1);
        uint32_t *ref = malloc(n * sizeof *ref);
        for (uint64_t t = 0; t < 3; t++) {
            for (uint32_t w = 0; w < P; w++) {
                sp_fill_int(a->grad[w], n, 1000, seed, t * 100 + w);
                for (size_t i = 0; i < n; i++) a->acc[w][i] += a->grad[w][i];
                memcpy(v->grad[w], a->grad[w], n * sizeof(float));
            }
            float **before = sp_accs_copy(a);
            memset(sum, 0, n * sizeof *sum);
            memset(in, 0, n);
            uint64_t per = 0;
            for (uint32_t w = 0; w < P; w++)
                for (size_t l = 0; l < L; l++) {
                    const deftsim_layer *ly = &m->layers[l];
                    uint64_t k = deftsim_k_of_density(0.03, ly->numel);
                    if (w == 0) per += k;
                    sp_ref_topk(before[w] + ly->offset, ly->numel, k, ref);
                    for (uint64_t j = 0; j < k; j++) {
                        size_t i = ly->offset + ref[j];
                        sum[i] += before[w][i];
                        in[i] = 1;
                    }
                }
            sp_npv_begin(v);
            deftsim_step_result *r = step_ok(s, t, &a->prov);
            deftsim_step_result *r2 = step_ok(s2, t, &v->prov);
            cr_assert_eq(v->violations, 0);
            uint64_t nnz = 0;
            for (size_t i = 0; i < n; i++) {
                if (!in[i]) {
                    for (uint32_t w = 0; w < P; w++) cr_assert_eq(a->acc[w][i], before[w][i]);
                    continue;
                }
                cr_assert_eq(r->agg_index[nnz], (deftsim_kidx)i, "P=%u t=%llu", P,
                             (unsigned long long)t);
                float want = (P & (P - 1)) == 0 ? sum[i] * (1.0f / (float)P) : sum[i] / (float)P;
                cr_assert_eq(r->agg_value[nnz], want, "P=%u i=%zu", P, i);
                nnz++;
            }
            cr_assert_eq(r->nnz, nnz);
            for (uint32_t w = 0; w < P; w++) {
                cr_assert_eq(r->local_count[w], per);
                cr_assert(memcmp(a->acc[w], v->res[w], n * sizeof(float)) == 0);
            }
            cr_assert(memcmp(r->agg_value, r2->agg_value, nnz * sizeof(float)) == 0);
            double tol;
            double lost = sp_check_conservation(r, before, a->acc, P, n, 1, &tol);
            cr_assert_float_eq(lost, 0, tol);
            /* One allgather per layer (P > 1), k_l (s_i + s_v) bytes from everyone. */
            size_t ag = 0;
            for (size_t i = 0; i < r->schedule.nsteps; i++) {
                const deftsim_step *st = &r->schedule.steps[i];
                if (st->kind != DEFTSIM_STEP_ALLGATHER) continue;
                cr_assert_eq(st->bytes[0], deftsim_k_of_density(p.density, m->layers[st->layer - 1].numel) * 8);
                ag++;
            }
            cr_assert_eq(ag, P > 1 ? L : 0);
            sp_copies_free(before, P);
        }
        free(sum);
        free(in);
        free(ref);
        sp_npv_free(v);
        sp_accs_free(a);
        deftsim_sparsifier_free(s);
        deftsim_sparsifier_free(s2);
    }
    deftsim_model_free(m);
}

Test(sp_lags, closed_form_matches_the_step)
{
    deftsim_model *m = sp_model_mix();
    deftsim_sparsifier_params p = sp_params(lags(), 0.02, 4, m);
    deftsim_sparsifier *s = sp_new(&p);
    sp_accs *a = sp_accs_new(4, m->numel);
    for (uint32_t w = 0; w < 4; w++) sp_fill_int(a->acc[w], m->numel, 50, 3, w);
    deftsim_step_result *r = step_ok(s, 0, &a->prov);
    deftsim_closed_form_in in = {.model = m, .density = 0.02, .k = r->k, .index_bytes = 4,
                                 .value_bytes = 4};
    deftsim_schedule cf;
    cr_assert_eq(deftsim_method_closed_form(lags(), &in, 4, &cf), DEFTSIM_OK);
    size_t j = 0;
    for (size_t i = 0; i < r->schedule.nsteps; i++) {
        const deftsim_step *st = &r->schedule.steps[i];
        if (st->kind == DEFTSIM_STEP_COMPUTE) continue;
        cr_assert_lt(j, cf.nsteps);
        cr_expect_eq(cf.steps[j].bytes[2], st->bytes[2]);
        cr_expect_eq(cf.steps[j].layer, st->layer);
        cr_expect_eq(cf.steps[j].flags, st->flags);
        j++;
    }
    cr_expect_eq(j, cf.nsteps);
    deftsim_schedule_free(&cf);
    sp_accs_free(a);
    deftsim_sparsifier_free(s);
    deftsim_model_free(m);
}

/* [compute]: forward, then before each layer's steps the backward pass down to that layer
 * (the layers' shares of the backward time), the rest before the first step without a layer. */
Test(sp_lags, compute_overlaps_layer_by_layer)
{
    static const char *const shapes[] = {"10x10", "100", "30x10"}; /* shares 0.2, 0.2, 0.6 */
    deftsim_model *m = sp_model(shapes, 3);
    deftsim_config *cfg = NULL;
    cr_assert_eq(deftsim_config_default("t", &cfg), DEFTSIM_OK);
    cr_assert_eq(deftsim_config_apply_override(cfg, "compute.forward=0.01"), DEFTSIM_OK);
    cr_assert_eq(deftsim_config_apply_override(cfg, "compute.backward=0.05"), DEFTSIM_OK,
                 "%s", deftsim_error_message());
    deftsim_compute_plan plan;
    cr_assert_eq(deftsim_compute_plan_init(cfg, m, &plan), DEFTSIM_OK, "%s",
                 deftsim_error_message());
    deftsim_sparsifier_params p = sp_params(lags(), 0.1, 2, m);
    deftsim_sparsifier *s = sp_new(&p);
    sp_accs *a = sp_accs_new(2, m->numel);
    for (uint32_t w = 0; w < 2; w++) sp_fill_int(a->acc[w], m->numel, 50, 3, w);
    deftsim_step_result *r = step_ok(s, 0, &a->prov);
    deftsim_schedule out;
    deftsim_schedule_init(&out, 2);
    cr_assert_eq(deftsim_compute_schedule(&plan, &r->schedule, 0, 4, &out), DEFTSIM_OK);
    /* forward, backward (layer 2: 0.6), 3 steps of layer 2, backward (layer 1: 0.2), 3 steps,
     * backward (layer 0: 0.2), 3 steps, sum. */
    cr_assert_eq(out.nsteps, 1 + 3 * 4 + 1);
    cr_expect_eq(out.steps[0].seconds[0], 0.01);
    const size_t bw[3] = {1, 5, 9};
    const double sec[3] = {0.05 * 0.6, 0.05 * 0.2, 0.05 * 0.2};
    for (int i = 0; i < 3; i++) {
        cr_expect_str_eq(out.steps[bw[i]].name, "backward");
        cr_expect_eq(out.steps[bw[i]].flags, DEFTSIM_STEP_GIVEN);
        cr_expect_float_eq(out.steps[bw[i]].seconds[1], sec[i], 1e-15, "piece %d", i);
        cr_expect_eq(out.steps[bw[i] + 1].layer, 3 - (uint32_t)i);
    }
    cr_expect_str_eq(out.steps[13].name, "sum");
    /* overlap = 0: forward, the whole backward, then the method's steps. */
    plan.overlap = 0;
    cr_assert_eq(deftsim_compute_schedule(&plan, &r->schedule, 0, 4, &out), DEFTSIM_OK);
    cr_assert_eq(out.nsteps, 2 + r->schedule.nsteps);
    cr_expect_eq(out.steps[1].seconds[0], 0.05);
    deftsim_schedule_free(&out);
    deftsim_compute_plan_free(&plan);
    deftsim_config_free(cfg);
    sp_accs_free(a);
    deftsim_sparsifier_free(s);
    deftsim_model_free(m);
}

/* The adaptive rule by hand (docs/SPARSIFIERS.md, "lags", "Layers and k"). Layers of 100, 1000
 * and 400 elements (n = 1500), density 0.01: the floors are 1, 10 and 4. P = 2: one Bruck
 * round, P - 1 = 1; 8-byte pairs at 0.064 Gb/s = 8e6 B/s, so a pair costs 1 us.
 * lags_backward = 1.5 ms: backward shares 0.1, 1 and 0.4 ms.
 *   layer 2 (exchanged first) hides behind layer 1's 1000 us: (1000 - 10.5) / 1 = 989.5 pairs,
 *     above n_2 = 400, the whole layer: k_2 = 400;
 *   layer 1 behind layer 0's 100 us: (100 - 10.5) / 1 = 89.5: k_1 = 89;
 *   layer 0 has nothing after it: its floor, k_0 = 1.
 * With lags_backward = 0.3 ms (shares 20, 200, 80 us) and 15.5 us of latency: k_2 =
 * floor(184.5) = 184, k_1 = floor(4.5) = 4 below its floor: 10; k_0 = 1. */
static void adaptive_params(deftsim_sparsifier_params *p, double backward, double latency_us)
{
    sp_opt(p, "lags_rule", 1);
    sp_opt(p, "lags_backward", backward);
    sp_opt(p, "lags_gbps", 0.064);
    sp_opt(p, "lags_latency_us", latency_us);
}

Test(sp_lags, adaptive_counts_by_hand)
{
    static const char *const shapes[] = {"100", "10x100", "20x20"};
    deftsim_model *m = sp_model(shapes, 3);
    static const struct {
        double backward, latency_us;
        uint64_t k[3];
    } cases[] = {
        {0.0015, 10.5, {1, 89, 400}},
        {0.0003, 15.5, {1, 10, 184}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        deftsim_sparsifier_params p = sp_params(lags(), 0.01, 2, m);
        adaptive_params(&p, cases[c].backward, cases[c].latency_us);
        deftsim_sparsifier *s = sp_new(&p);
        sp_accs *a = sp_accs_new(2, m->numel);
        for (uint32_t w = 0; w < 2; w++) sp_fill_int(a->acc[w], m->numel, 50, 3, w);
        deftsim_step_result *r = step_ok(s, 0, &a->prov);
        const uint64_t *k = cases[c].k;
        cr_expect_eq(r->local_count[0], k[0] + k[1] + k[2], "case %zu: %llu picks", c,
                     (unsigned long long)r->local_count[0]);
        cr_expect_eq(r->extra[COL_COUNT_MIN], (double)k[0], "case %zu", c);
        cr_expect_eq(r->extra[COL_COUNT_MAX], (double)(k[2] > k[1] ? k[2] : k[1]), "case %zu", c);
        /* The allgathers, layer 2 first: k_l pairs of 8 bytes from each worker. */
        size_t j = 0;
        for (size_t i = 0; i < r->schedule.nsteps; i++) {
            const deftsim_step *st = &r->schedule.steps[i];
            if (st->kind != DEFTSIM_STEP_ALLGATHER) continue;
            cr_assert_lt(j, 3);
            cr_expect_eq(st->layer, 3 - j);
            cr_expect_eq(st->bytes[0], k[2 - j] * 8, "case %zu layer %zu: %llu bytes", c, 2 - j,
                         (unsigned long long)st->bytes[0]);
            j++;
        }
        cr_expect_eq(j, 3);
        /* Each layer's picks are its exact top k_l, its residual the rest. */
        const deftsim_kidx *sel;
        uint64_t cnt;
        cr_assert_eq(deftsim_sparsifier_selection(s, 1, &sel, &cnt), DEFTSIM_OK);
        cr_assert_eq(cnt, k[0] + k[1] + k[2]);
        /* bench sim's closed form with the same options: the same bytes. */
        deftsim_closed_form_in in = {.model = m, .density = 0.01, .k = r->k, .index_bytes = 4,
                                     .value_bytes = 4, .opts = &p.opts};
        deftsim_schedule cf;
        cr_assert_eq(deftsim_method_closed_form(lags(), &in, 2, &cf), DEFTSIM_OK);
        cr_assert_eq(cf.nsteps, 3);
        for (size_t l = 0; l < 3; l++) cr_expect_eq(cf.steps[l].bytes[1], k[2 - l] * 8);
        deftsim_schedule_free(&cf);
        sp_accs_free(a);
        deftsim_sparsifier_free(s);
    }
    deftsim_model_free(m);
}

/* P = 4: two Bruck rounds and P - 1 = 3 blocks. Layer 2 behind layer 1's 1000 us:
 * (1000 - 2 x 10.5) / 3 = 326.33: k_2 = 326; layer 1: (100 - 21) / 3 = 26.33: k_1 = 26. The
 * uniform rule (the default) keeps the floors, and the adaptive rule without a backward time
 * is refused. */
Test(sp_lags, adaptive_four_workers_and_refusals)
{
    static const char *const shapes[] = {"100", "10x100", "20x20"};
    deftsim_model *m = sp_model(shapes, 3);
    deftsim_sparsifier_params p = sp_params(lags(), 0.01, 4, m);
    adaptive_params(&p, 0.0015, 10.5);
    deftsim_closed_form_in in = {.model = m, .density = 0.01, .k = 15, .index_bytes = 4,
                                 .value_bytes = 4, .opts = &p.opts};
    deftsim_schedule cf;
    cr_assert_eq(deftsim_method_closed_form(lags(), &in, 4, &cf), DEFTSIM_OK);
    const uint64_t want[3] = {326 * 8, 26 * 8, 1 * 8};
    cr_assert_eq(cf.nsteps, 3);
    for (size_t l = 0; l < 3; l++) cr_expect_eq(cf.steps[l].bytes[0], want[l], "step %zu", l);
    deftsim_schedule_free(&cf);
    deftsim_method_opts_default(lags(), &p.opts);
    in.opts = &p.opts;
    cr_assert_eq(deftsim_method_closed_form(lags(), &in, 4, &cf), DEFTSIM_OK);
    const uint64_t floors[3] = {4 * 8, 10 * 8, 1 * 8};
    for (size_t l = 0; l < 3; l++) cr_expect_eq(cf.steps[l].bytes[0], floors[l], "step %zu", l);
    deftsim_schedule_free(&cf);
    sp_opt(&p, "lags_rule", 1);
    deftsim_sparsifier *s = NULL;
    cr_expect_neq(deftsim_sparsifier_new(&p, &s), DEFTSIM_OK);
    cr_expect(strstr(deftsim_error_message(), "lags_backward") != NULL, "%s",
              deftsim_error_message());
    deftsim_model_free(m);
}

/* The adaptive rule left at its defaults reads the scenario's figures (the parameters'
 * context: [compute]'s backward time, [network]'s bandwidth and latency): the same counts as
 * the by-hand case above given as options (1.5 ms, 8e6 B/s, 10.5 us: k = 1, 89, 400), in the
 * step and in the closed form; an option given wins over the scenario's figure; no backward
 * time anywhere is refused with a message naming [compute]. */
Test(sp_lags, adaptive_reads_the_scenario)
{
    static const char *const shapes[] = {"100", "10x100", "20x20"};
    deftsim_model *m = sp_model(shapes, 3);
    deftsim_sparsifier_params p = sp_params(lags(), 0.01, 2, m);
    deftsim_method_opts_default(lags(), &p.opts);
    sp_opt(&p, "lags_rule", 1);
    p.context = (deftsim_sparsify_context){.backward = 0.0015, .bandwidth = 8e6,
                                           .latency = 10.5e-6};
    deftsim_sparsifier *s = sp_new(&p);
    sp_accs *a = sp_accs_new(2, m->numel);
    for (uint32_t w = 0; w < 2; w++) sp_fill_int(a->acc[w], m->numel, 50, 3, w);
    deftsim_step_result *r = step_ok(s, 0, &a->prov);
    cr_expect_eq(r->local_count[0], 1 + 89 + 400, "%llu picks",
                 (unsigned long long)r->local_count[0]);
    deftsim_closed_form_in in = {.model = m, .density = 0.01, .k = r->k, .index_bytes = 4,
                                 .value_bytes = 4, .opts = &p.opts, .context = p.context};
    deftsim_schedule cf;
    cr_assert_eq(deftsim_method_closed_form(lags(), &in, 2, &cf), DEFTSIM_OK);
    const uint64_t want[3] = {400 * 8, 89 * 8, 1 * 8};
    for (size_t l = 0; l < 3; l++) cr_expect_eq(cf.steps[l].bytes[1], want[l], "step %zu", l);
    deftsim_schedule_free(&cf);
    deftsim_sparsifier_free(s);
    /* lags_backward given: 0.3 ms and 15.5 us of latency as options win (k = 1, 10, 184). */
    sp_opt(&p, "lags_backward", 0.0003);
    sp_opt(&p, "lags_latency_us", 15.5);
    s = sp_new(&p);
    for (uint32_t w = 0; w < 2; w++) sp_fill_int(a->acc[w], m->numel, 50, 3, w);
    r = step_ok(s, 0, &a->prov);
    cr_expect_eq(r->local_count[0], 1 + 10 + 184, "%llu picks",
                 (unsigned long long)r->local_count[0]);
    deftsim_sparsifier_free(s);
    /* Neither the option nor the scenario gives a backward time. */
    sp_opt(&p, "lags_backward", 0);
    p.context.backward = 0;
    deftsim_sparsifier *bad = NULL;
    cr_expect_neq(deftsim_sparsifier_new(&p, &bad), DEFTSIM_OK);
    cr_expect(strstr(deftsim_error_message(), "[compute]") != NULL, "%s",
              deftsim_error_message());
    sp_accs_free(a);
    deftsim_model_free(m);
}
