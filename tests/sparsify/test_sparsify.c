/* test_sparsify.c - what every sparsifier must do: keep all gradient mass (residuals + P times
 * the aggregate = accumulators, except gTop-k's documented loss), run with P = 1, give the same
 * result through a non-persistent provider, report bytes equal to the formulas of
 * docs/SPARSIFIERS.md, and report phases that match the schedule. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "deftsim_deft.h"
#include "sp_test.h"

TestSuite(sparsify, .init = sp_suite_init, .fini = sp_suite_fini);

static const deftsim_method named_methods[] = {DEFTSIM_METHOD_DEFT,  DEFTSIM_METHOD_TOPK,
                                               DEFTSIM_METHOD_TOPK_AG, DEFTSIM_METHOD_CLTK,
                                               DEFTSIM_METHOD_GTOPK, DEFTSIM_METHOD_DGC,
                                               DEFTSIM_METHOD_DENSE,
                                               DEFTSIM_METHOD_MICRO, DEFTSIM_METHOD_EXDYNA};
/* Methods without a value of deftsim_method, found in the registry by name. */
static const char *const unnamed_methods[] = {"randk", "hardthr", "sidco"};
#define NNAMED (sizeof named_methods / sizeof named_methods[0])
#define NMETHODS (NNAMED + sizeof unnamed_methods / sizeof unnamed_methods[0])

/* The i-th method these tests run (i < NMETHODS). */
static deftsim_method method_at(size_t i)
{
    if (i < NNAMED) return named_methods[i];
    deftsim_method m;
    cr_assert_eq(deftsim_method_from_name(unnamed_methods[i - NNAMED], &m), 0, "%s",
                 unnamed_methods[i - NNAMED]);
    return m;
}

/* Whether m is the registry's method `name`. */
static int is_method(deftsim_method m, const char *name)
{
    return !strcmp(deftsim_method_name(m), name);
}
/* The registry's methods these tests leave to their own files, each with the reason. */
static const char *const elsewhere[][2] = {
    {"oktopk", "test_sp_oktopk.c: dense warm-up steps and regions break the generic byte "
               "formulas and d = 1 cases below"},
    {"powersgd", "test_sp_powersgd.c: low rank, not a selection: its aggregate is every index, "
                 "its bytes follow the matrices' shapes and rank, not d, and all-zero options "
                 "(rank 0) are refused"},
    {"lags", "test_sp_lags.c: its bytes are per layer (k_l of each tensor, one allgather per "
             "layer), not the generic formulas; it checks conservation, P = 1 and the "
             "non-persistent provider there"},
};

/* Every method of the registry is in named_methods, unnamed_methods or elsewhere: a method
 * added to the registry fails here until one of the lists takes it. */
Test(sparsify, method_list_covers_the_registry)
{
    for (size_t i = 0; i < deftsim_method_count(); i++) {
        int found = 0;
        for (size_t j = 0; j < NMETHODS; j++) found += method_at(j) == (deftsim_method)i;
        for (size_t j = 0; j < sizeof elsewhere / sizeof elsewhere[0]; j++)
            found += !strcmp(elsewhere[j][0], deftsim_method_name((deftsim_method)i));
        cr_expect_eq(found, 1, "%s: in neither list of test_sparsify.c (or in both)",
                     deftsim_method_name((deftsim_method)i));
    }
}

/* acc_w += fresh integer gradient (residual + g), remembering g. */
static void add_gradients(sp_accs *a, uint64_t seed, uint64_t t)
{
    for (uint32_t w = 0; w < a->P; w++) {
        sp_fill_int(a->grad[w], a->n, 1000, seed, t * 1000 + w);
        for (size_t i = 0; i < a->n; i++) a->acc[w][i] += a->grad[w][i];
    }
}

/* Phases of the result equal the schedule's COMPUTE steps, per worker and phase. */
static void check_phases(const deftsim_step_result *r)
{
    cr_assert_leq(r->nphases, DEFTSIM_MAX_PHASES);
    for (uint32_t w = 0; w < r->P; w++)
        for (size_t ph = 0; ph < r->nphases; ph++) {
            double a = r->phase_seconds[(size_t)w * r->nphases + ph];
            double b = sp_schedule_seconds(r, r->phase_name[ph], w);
            cr_assert_geq(a, 0);
            cr_assert_float_eq(a, b, 1e-12, "%s worker %u phase %s: %g vs schedule %g",
                               deftsim_method_name(r->method), w, r->phase_name[ph], a, b);
        }
    /* Every COMPUTE step names a phase. */
    for (size_t i = 0; i < r->schedule.nsteps; i++) {
        const deftsim_step *st = &r->schedule.steps[i];
        if (st->kind != DEFTSIM_STEP_COMPUTE) continue;
        int found = 0;
        for (size_t ph = 0; ph < r->nphases; ph++)
            found |= strcmp(st->name, r->phase_name[ph]) == 0;
        cr_assert(found, "compute step '%s' is not a phase", st->name);
    }
}

Test(sparsify, conservation_every_method_and_P)
{
    uint64_t seed = sp_seed();
    deftsim_model *m = sp_model_mix();
    const uint32_t Ps[] = {1, 2, 3, 5, 8};
    for (size_t mi = 0; mi < NMETHODS; mi++)
        for (size_t pi = 0; pi < sizeof Ps / sizeof Ps[0]; pi++) {
            uint32_t P = Ps[pi];
            deftsim_sparsifier_params p = sp_params(method_at(mi), 0.01, P, m);
            deftsim_sparsifier *s = sp_new(&p);
            sp_accs *a = sp_accs_new(P, m->numel);
            for (uint64_t t = 0; t < 3; t++) {
                add_gradients(a, seed, t);
                float **before = sp_accs_copy(a);
                deftsim_step_result *r = NULL;
                cr_assert_eq(deftsim_sparsifier_step(s, t, &a->prov, &r), DEFTSIM_OK, "%s: %s",
                             deftsim_method_name(p.method), deftsim_error_message());
                sp_check_sorted(r);
                check_phases(r);
                cr_assert_eq(r->P, P);
                cr_assert_eq(r->n, m->numel);
                cr_assert_eq(r->k, (uint64_t)floor(0.01 * (double)m->numel));
                cr_assert_float_eq(r->buildup, (double)r->nnz / (double)r->k, 1e-12);
                cr_assert_float_eq(r->density_actual, (double)r->nnz / (double)m->numel, 1e-12);
                int exact = p.method != DEFTSIM_METHOD_GTOPK;
                double tol;
                double lost = sp_check_conservation(r, before, a->acc, P, m->numel, exact, &tol);
                if (exact) {
                    cr_assert_eq(r->lost_mass, 0);
                    cr_assert_eq(r->lost_entries, 0);
                }
                /* Summed over everything the identity is exact for every method: gTop-k's
                 * lost mass is the whole difference. */
                cr_assert_float_eq(lost, r->lost_mass, tol,
                                   "%s P=%u t=%llu: discrepancy %g, lost_mass %g",
                                   deftsim_method_name(p.method), P, (unsigned long long)t, lost,
                                   r->lost_mass);
                sp_copies_free(before, P);
            }
            sp_accs_free(a);
            deftsim_sparsifier_free(s);
        }
    deftsim_model_free(m);
}

/* The extremes of the density: k = n (DEFT: every fragment common; DGC: every element) and
 * k = 1 (the max(1, .) guard). */
Test(sparsify, extreme_densities)
{
    uint64_t seed = sp_seed();
    static const char *const shapes[] = {"6x5", "7", "3x3x2"};
    deftsim_model *m = sp_model(shapes, 3);
    const double dens[] = {1.0, 1e-9};
    for (size_t mi = 0; mi < NMETHODS; mi++)
        for (size_t di = 0; di < 2; di++)
            for (uint32_t P = 1; P <= 5; P += 2) {
                deftsim_sparsifier_params p = sp_params(method_at(mi), dens[di], P, m);
                deftsim_sparsifier *s = sp_new(&p);
                sp_accs *a = sp_accs_new(P, m->numel);
                add_gradients(a, seed, P);
                float **before = sp_accs_copy(a);
                deftsim_step_result *r = NULL;
                cr_assert_eq(deftsim_sparsifier_step(s, 1, &a->prov, &r), DEFTSIM_OK, "%s: %s",
                             deftsim_method_name(p.method), deftsim_error_message());
                cr_assert_eq(r->k, di == 0 ? m->numel : 1);
                double tol;
                double disc = sp_check_conservation(r, before, a->acc, P, m->numel,
                                                    p.method != DEFTSIM_METHOD_GTOPK, &tol);
                cr_assert_float_eq(disc, r->lost_mass, tol);
                /* At d = 1 the top-k methods send everything. DEFT's allocation gives a
                 * fragment floor(remain_k * norm share) elements, all of it only when its share
                 * of the norm reaches its share of the size; DGC's threshold comes from samples
                 * and never reaches exact zeros. */
                if (di == 0 && p.method != DEFTSIM_METHOD_DEFT && p.method != DEFTSIM_METHOD_DGC)
                    cr_assert_eq(r->nnz, m->numel, "%s at d = 1", deftsim_method_name(p.method));
                if (di == 0 && p.method == DEFTSIM_METHOD_DEFT) cr_assert_leq(r->kj_total, r->k);
                sp_copies_free(before, P);
                sp_accs_free(a);
                deftsim_sparsifier_free(s);
            }
    deftsim_model_free(m);
}

Test(sparsify, p1_every_method)
{
    uint64_t seed = sp_seed();
    deftsim_model *m = sp_model_mix();
    size_t n = m->numel;
    for (size_t mi = 0; mi < NMETHODS; mi++) {
        deftsim_sparsifier_params p = sp_params(method_at(mi), 0.02, 1, m);
        deftsim_sparsifier *s = sp_new(&p);
        sp_accs *a = sp_accs_new(1, n);
        add_gradients(a, seed, 0);
        float **before = sp_accs_copy(a);
        deftsim_step_result *r = NULL;
        cr_assert_eq(deftsim_sparsifier_step(s, 0, &a->prov, &r), DEFTSIM_OK, "%s",
                     deftsim_error_message());
        cr_assert_eq(sp_count_collectives(r), 0, "%s: P = 1 needs no communication",
                     deftsim_method_name(p.method));
        cr_assert_eq(r->bytes_sent[0], 0);
        cr_assert_eq(r->bytes_recv[0], 0);
        /* The aggregate is the accumulator at U, and the residual is zero exactly there. */
        for (uint64_t j = 0; j < r->nnz; j++) {
            uint32_t i = r->agg_index[j];
            cr_assert_eq(r->agg_value[j], before[0][i]);
            cr_assert_eq(a->acc[0][i], 0);
        }
        sp_check_conservation(r, before, a->acc, 1, n, 1, NULL);
        const deftsim_kidx *sel;
        uint64_t cnt;
        cr_assert_eq(deftsim_sparsifier_selection(s, 0, &sel, &cnt), DEFTSIM_OK);
        cr_assert_eq(cnt, r->local_count[0]);
        cr_assert_eq(r->nnz, cnt + r->common_count, "%s: |U| = %llu, picks %llu + common %llu",
                     deftsim_method_name(p.method), (unsigned long long)r->nnz,
                     (unsigned long long)cnt, (unsigned long long)r->common_count);
        if (p.method == DEFTSIM_METHOD_TOPK || p.method == DEFTSIM_METHOD_TOPK_AG ||
            p.method == DEFTSIM_METHOD_CLTK || p.method == DEFTSIM_METHOD_GTOPK) {
            uint32_t *ref = malloc(r->k * sizeof *ref);
            sp_ref_topk(before[0], n, r->k, ref);
            cr_assert_eq(cnt, r->k);
            for (uint64_t j = 0; j < r->k; j++) {
                cr_assert_eq(sel[j], ref[j], "%s: pick %llu", deftsim_method_name(p.method),
                             (unsigned long long)j);
                cr_assert_eq(r->agg_index[j], ref[j]);
            }
            free(ref);
        }
        if (p.method == DEFTSIM_METHOD_DENSE) cr_assert_eq(r->nnz, n);
        sp_copies_free(before, 1);
        sp_accs_free(a);
        deftsim_sparsifier_free(s);
    }
    deftsim_model_free(m);
}

/* Runs both providers side by side for a few iterations and compares everything. */
static void compare_providers(deftsim_method method, uint32_t P, double beta)
{
    uint64_t seed = sp_seed();
    deftsim_model *m = sp_model_mix();
    size_t n = m->numel;
    deftsim_sparsifier_params p = sp_params(method, 0.01, P, m);
    if (method == DEFTSIM_METHOD_CLTK) sp_opt(&p, "cltk_beta", beta);
    deftsim_sparsifier *s1 = sp_new(&p), *s2 = sp_new(&p);
    sp_accs *a = sp_accs_new(P, n);
    sp_npv *v = sp_npv_new(P, n);
    for (uint64_t t = 0; t < 3; t++) {
        add_gradients(a, seed, t);
        for (uint32_t w = 0; w < P; w++) memcpy(v->grad[w], a->grad[w], n * sizeof(float));
        sp_npv_begin(v);
        deftsim_step_result *r1 = NULL, *r2 = NULL;
        cr_assert_eq(deftsim_sparsifier_step(s1, t, &a->prov, &r1), DEFTSIM_OK, "%s",
                     deftsim_error_message());
        cr_assert_eq(deftsim_sparsifier_step(s2, t, &v->prov, &r2), DEFTSIM_OK, "%s",
                     deftsim_error_message());
        cr_assert_eq(v->violations, 0, "%s: %d provider protocol violations",
                     deftsim_method_name(method), v->violations);
        cr_assert_eq(v->nreleased, P, "%s: %u of %u workers released", deftsim_method_name(method),
                     v->nreleased, P);
        cr_assert_eq(r1->nnz, r2->nnz);
        for (uint64_t j = 0; j < r1->nnz; j++) {
            cr_assert_eq(r1->agg_index[j], r2->agg_index[j]);
            cr_assert_eq(r1->agg_value[j], r2->agg_value[j]);
        }
        cr_assert_eq(r1->lost_mass, r2->lost_mass);
        for (uint32_t w = 0; w < P; w++) {
            const deftsim_kidx *i1, *i2;
            uint64_t c1, c2;
            cr_assert_eq(deftsim_sparsifier_selection(s1, w, &i1, &c1), DEFTSIM_OK);
            cr_assert_eq(deftsim_sparsifier_selection(s2, w, &i2, &c2), DEFTSIM_OK);
            cr_assert_eq(c1, c2);
            cr_assert(c1 == 0 || memcmp(i1, i2, c1 * sizeof *i1) == 0,
                      "%s: worker %u selections differ", deftsim_method_name(method), w);
            cr_assert(memcmp(a->acc[w], v->res[w], n * sizeof(float)) == 0,
                      "%s: worker %u residuals differ", deftsim_method_name(method), w);
        }
    }
    sp_npv_free(v);
    sp_accs_free(a);
    deftsim_sparsifier_free(s1);
    deftsim_sparsifier_free(s2);
    deftsim_model_free(m);
}

Test(sparsify, nonpersistent_provider_same_result)
{
    for (size_t mi = 0; mi < NMETHODS; mi++) {
        compare_providers(method_at(mi), 5, 0);
        compare_providers(method_at(mi), 4, 0);
    }
    compare_providers(DEFTSIM_METHOD_CLTK, 3, 0.5);
}

/* ---- Bytes ------------------------------------------------------------------------------ */

/* What a step must move under the formulas of docs/SPARSIFIERS.md: recv_exact[r] from
 * allgathers, broadcasts and point-to-point messages (exact per rank), plus ring allreduces,
 * where each rank sends and receives 2 (P-1)/P m e for m elements of e bytes. The ring moves
 * whole elements, so a rank's share is that value exactly when P divides m and within two
 * elements otherwise; the total over ranks, 2 (P-1) m e, is exact always. */
typedef struct {
    uint64_t *recv_exact;
    double ar_rank;      /* sum over the allreduces of 2 (P-1)/P m e */
    double ar_slack;     /* sum over the allreduces of 2 e */
    uint64_t ar_total;   /* sum over the allreduces of 2 (P-1) m e */
} expect_t;

static void expect_ar(expect_t *x, uint32_t P, uint64_t m, uint64_t e)
{
    if (P < 2) return;
    x->ar_rank += 2.0 * (P - 1) / P * (double)m * (double)e;
    x->ar_slack += 2.0 * (double)e;
    x->ar_total += 2 * (uint64_t)(P - 1) * m * e;
}

/* gTop-k's receives: rank r gets one set per merge it performs (the fold, then one per round
 * while it is an even-positioned participant), plus the final broadcast unless it is rank 0. */
static uint64_t gtopk_receives(uint32_t r, uint32_t P)
{
    uint32_t P2 = 1;
    while (P2 * 2 <= P) P2 *= 2;
    uint64_t c = 0;
    if (r < P - P2) c++;
    for (uint32_t step = 1; step < P2; step *= 2)
        if (r < P2 && r % (2 * step) == 0 && r + step < P2) c++;
    return c;
}

static void check_bytes(const deftsim_step_result *r, const deftsim_model *m, int reference)
{
    const uint32_t P = r->P;
    const uint64_t k = r->k, si = r->index_wire_bytes, sv = r->value_wire_bytes;
    const char *name = deftsim_method_name(r->method);
    expect_t x = {calloc(P, sizeof(uint64_t)), 0, 0, 0};
    cr_assert(x.recv_exact);
    uint64_t sum_local = 0, maxc = 0;
    for (uint32_t w = 0; w < P; w++) {
        sum_local += r->local_count[w];
        if (r->local_count[w] > maxc) maxc = r->local_count[w];
    }
    if (P > 1) switch (r->method) {
        case DEFTSIM_METHOD_TOPK_AG:
            for (uint32_t w = 0; w < P; w++) {
                x.recv_exact[w] = (uint64_t)(P - 1) * k * (si + sv);
                cr_assert_eq(r->bytes_sent[w], (uint64_t)(P - 1) * k * (si + sv));
            }
            break;
        case DEFTSIM_METHOD_TOPK:
            for (uint32_t w = 0; w < P; w++) x.recv_exact[w] = (uint64_t)(P - 1) * k * si;
            expect_ar(&x, P, r->nnz, sv);
            break;
        case DEFTSIM_METHOD_CLTK:
            for (uint32_t w = 0; w < P; w++)
                if (w != r->leader) x.recv_exact[w] = k * si;
            expect_ar(&x, P, k, sv);
            break;
        case DEFTSIM_METHOD_DEFT: {
            size_t nfrag = 0;
            deftsim_fragment *f = NULL;
            cr_assert_eq(deftsim_deft_fragments(m, P, &f, &nfrag), DEFTSIM_OK);
            free(f);
            uint64_t cb = reference ? 8 : 4;
            for (uint32_t w = 0; w < P; w++)
                x.recv_exact[w] = (w != r->leader ? 4 * ((uint64_t)P + nfrag) : 0) +
                                  (uint64_t)(P - 1) * cb + (uint64_t)(P - 1) * maxc * si;
            expect_ar(&x, P, r->nnz, sv);
            break;
        }
        case DEFTSIM_METHOD_GTOPK: {
            uint64_t e = reference ? 16 : si + sv;
            for (uint32_t w = 0; w < P; w++)
                x.recv_exact[w] = gtopk_receives(w, P) * k * e + (w ? k * e : 0);
            /* Rank 0 receives one set per round: ceil(log2 P) of them. */
            uint64_t rounds = 0;
            while ((1u << rounds) < P) rounds++;
            cr_assert_eq(r->bytes_recv[0], rounds * k * e, "gtopk P=%u: rank 0", P);
            break;
        }
        case DEFTSIM_METHOD_DGC:
            for (uint32_t w = 0; w < P; w++)
                x.recv_exact[w] = (sum_local - r->local_count[w]) * (si + sv);
            for (size_t i = 0; i < m->nlayers; i++)
                if (m->layers[i].ndim <= 1) expect_ar(&x, P, m->layers[i].numel, sv);
            break;
        case DEFTSIM_METHOD_DENSE:
            expect_ar(&x, P, r->n, sv);
            break;
        case DEFTSIM_METHOD_MICRO:
        case DEFTSIM_METHOD_EXDYNA: {
            /* Counts (4 B, or 8 B in the reference wire), indices padded to the largest count. */
            uint64_t cb = reference ? 8 : 4;
            for (uint32_t w = 0; w < P; w++)
                x.recv_exact[w] = (uint64_t)(P - 1) * cb + (uint64_t)(P - 1) * maxc * si;
            expect_ar(&x, P, r->nnz, sv);
            cr_assert_eq(r->nnz, sum_local, "%s: |U| = sum of the counts", name);
            break;
        }
        case DEFTSIM_METHOD_OKTOPK: /* its bytes: test_sp_oktopk.c */
            break;
        default: /* DEFTSIM_METHOD_COUNT and after: methods without a value of their own */
            if (is_method(r->method, "randk")) {
                /* The shared set (randk_seed's default): the k values' allreduce alone. */
                expect_ar(&x, P, k, sv);
                cr_assert_eq(r->nnz, k, "%s: |U| = k", name);
            } else if (is_method(r->method, "hardthr") || is_method(r->method, "sidco")) {
                /* Counts, then every worker's own count of pairs (the exchange's default,
                 * variable). */
                uint64_t cb = reference ? 8 : 4;
                for (uint32_t w = 0; w < P; w++)
                    x.recv_exact[w] =
                        (uint64_t)(P - 1) * cb + (sum_local - r->local_count[w]) * (si + sv);
                cr_assert_eq(r->count_total, sum_local, "%s", name);
                cr_assert_eq(r->count_max, maxc, "%s", name);
            }
            break;
        }
    uint64_t tot_s = 0, tot_r = 0, tot_exact = 0;
    for (uint32_t w = 0; w < P; w++) {
        tot_s += r->bytes_sent[w];
        tot_r += r->bytes_recv[w];
        tot_exact += x.recv_exact[w];
        double ar = (double)r->bytes_recv[w] - (double)x.recv_exact[w];
        cr_assert_geq(r->bytes_recv[w], x.recv_exact[w], "%s P=%u worker %u: received %llu < %llu",
                      name, P, w, (unsigned long long)r->bytes_recv[w],
                      (unsigned long long)x.recv_exact[w]);
        cr_assert_leq(fabs(ar - x.ar_rank), x.ar_slack + 1e-9,
                      "%s P=%u worker %u: allreduce share %g, formula %g", name, P, w, ar,
                      x.ar_rank);
    }
    cr_assert_eq(tot_r, tot_exact + x.ar_total, "%s P=%u: total received %llu, formula %llu", name,
                 P, (unsigned long long)tot_r, (unsigned long long)(tot_exact + x.ar_total));
    cr_assert_eq(tot_s, tot_r, "%s P=%u: bytes sent %llu != received %llu", name, P,
                 (unsigned long long)tot_s, (unsigned long long)tot_r);
    free(x.recv_exact);
}

Test(sparsify, bytes_equal_spec_formulas)
{
    uint64_t seed = sp_seed();
    deftsim_model *m = sp_model_mix();
    const uint32_t Ps[] = {1, 2, 3, 4, 7, 8};
    const struct {
        uint32_t si, sv;
        deftsim_wire wire;
    } wires[] = {{4, 4, DEFTSIM_WIRE_SPEC}, {8, 2, DEFTSIM_WIRE_SPEC},
                 {4, 2, DEFTSIM_WIRE_REFERENCE}};
    for (size_t mi = 0; mi < NMETHODS; mi++)
        for (size_t pi = 0; pi < sizeof Ps / sizeof Ps[0]; pi++)
            for (size_t wi = 0; wi < sizeof wires / sizeof wires[0]; wi++) {
                uint32_t P = Ps[pi];
                deftsim_sparsifier_params p = sp_params(method_at(mi), 0.005, P, m);
                p.index_bytes = wires[wi].si;
                p.value_bytes = wires[wi].sv;
                p.wire = wires[wi].wire;
                deftsim_sparsifier *s = sp_new(&p);
                sp_accs *a = sp_accs_new(P, m->numel);
                for (uint64_t t = 0; t < 2; t++) {
                    add_gradients(a, seed, t);
                    deftsim_step_result *r = NULL;
                    cr_assert_eq(deftsim_sparsifier_step(s, t, &a->prov, &r), DEFTSIM_OK, "%s",
                                 deftsim_error_message());
                    int ref = wires[wi].wire == DEFTSIM_WIRE_REFERENCE;
                    cr_assert_eq(r->index_wire_bytes, ref ? 8 : wires[wi].si);
                    cr_assert_eq(r->value_wire_bytes, ref ? 4 : wires[wi].sv);
                    check_bytes(r, m, ref);
                }
                sp_accs_free(a);
                deftsim_sparsifier_free(s);
            }
    deftsim_model_free(m);
}

/* The payloads each method puts on the schedule, step by step. */
Test(sparsify, schedule_payloads)
{
    uint64_t seed = sp_seed();
    deftsim_model *m = sp_model_mix();
    const uint32_t P = 4;
    for (size_t mi = 0; mi < NMETHODS; mi++) {
        deftsim_sparsifier_params p = sp_params(method_at(mi), 0.01, P, m);
        p.index_bytes = 8;
        p.value_bytes = 2;
        deftsim_sparsifier *s = sp_new(&p);
        sp_accs *a = sp_accs_new(P, m->numel);
        add_gradients(a, seed, 0);
        deftsim_step_result *r = NULL;
        cr_assert_eq(deftsim_sparsifier_step(s, 1, &a->prov, &r), DEFTSIM_OK, "%s",
                     deftsim_error_message());
        const uint64_t k = r->k;
        const deftsim_step *st;
        switch (p.method) {
        case DEFTSIM_METHOD_TOPK:
            cr_assert(st = sp_find_step(r, DEFTSIM_STEP_ALLGATHER, "indices", 0));
            for (uint32_t w = 0; w < P; w++) cr_assert_eq(st->bytes[w], k * 8);
            cr_assert(st = sp_find_step(r, DEFTSIM_STEP_ALLREDUCE, "values", 0));
            cr_assert_eq(st->bytes[0], r->nnz * 2);
            break;
        case DEFTSIM_METHOD_TOPK_AG:
            cr_assert(st = sp_find_step(r, DEFTSIM_STEP_ALLGATHER, "pairs", 0));
            for (uint32_t w = 0; w < P; w++) cr_assert_eq(st->bytes[w], k * 10);
            break;
        case DEFTSIM_METHOD_CLTK:
            cr_assert(st = sp_find_step(r, DEFTSIM_STEP_BCAST, "indices", 0));
            cr_assert_eq(st->root, 1);
            cr_assert_eq(st->bytes[1], k * 8);
            cr_assert(st = sp_find_step(r, DEFTSIM_STEP_ALLREDUCE, "values", 0));
            cr_assert_eq(st->bytes[0], k * 2);
            break;
        case DEFTSIM_METHOD_DEFT: {
            cr_assert(st = sp_find_step(r, DEFTSIM_STEP_BCAST, "packing", 0));
            cr_assert_eq(st->root, 1);
            cr_assert(st = sp_find_step(r, DEFTSIM_STEP_ALLGATHER, "counts", 0));
            for (uint32_t w = 0; w < P; w++) cr_assert_eq(st->bytes[w], 4);
            uint64_t maxc = 0;
            for (uint32_t w = 0; w < P; w++)
                if (r->local_count[w] > maxc) maxc = r->local_count[w];
            cr_assert(st = sp_find_step(r, DEFTSIM_STEP_ALLGATHER, "indices", 0));
            for (uint32_t w = 0; w < P; w++) cr_assert_eq(st->bytes[w], maxc * 8);
            cr_assert(st = sp_find_step(r, DEFTSIM_STEP_ALLREDUCE, "values", 0));
            cr_assert_eq(st->bytes[0], r->nnz * 2);
            break;
        }
        case DEFTSIM_METHOD_GTOPK:
            /* P = 4: two rounds (1 -> 0, 3 -> 2; then 2 -> 0), then rank 0 broadcasts. */
            cr_assert(st = sp_find_step(r, DEFTSIM_STEP_SENDRECV, "tree", 0));
            cr_assert_eq(st->peer[1], 0);
            cr_assert_eq(st->peer[3], 2);
            cr_assert_eq(st->peer[0], DEFTSIM_NO_PEER);
            cr_assert_eq(st->bytes[1], k * 10);
            cr_assert(st = sp_find_step(r, DEFTSIM_STEP_SENDRECV, "tree", 1));
            cr_assert_eq(st->peer[2], 0);
            cr_assert_eq(st->peer[1], DEFTSIM_NO_PEER);
            cr_assert_null(sp_find_step(r, DEFTSIM_STEP_SENDRECV, "tree", 2));
            cr_assert(st = sp_find_step(r, DEFTSIM_STEP_BCAST, "final", 0));
            cr_assert_eq(st->root, 0);
            cr_assert_eq(st->bytes[0], k * 10);
            break;
        case DEFTSIM_METHOD_MICRO:
        case DEFTSIM_METHOD_EXDYNA: {
            uint64_t maxc = 0;
            for (uint32_t w = 0; w < P; w++)
                if (r->local_count[w] > maxc) maxc = r->local_count[w];
            cr_assert(st = sp_find_step(r, DEFTSIM_STEP_ALLGATHER, "counts", 0));
            for (uint32_t w = 0; w < P; w++) cr_assert_eq(st->bytes[w], 4);
            cr_assert(st = sp_find_step(r, DEFTSIM_STEP_ALLGATHER, "indices", 0));
            for (uint32_t w = 0; w < P; w++) cr_assert_eq(st->bytes[w], maxc * 8);
            cr_assert(st = sp_find_step(r, DEFTSIM_STEP_ALLREDUCE, "values", 0));
            cr_assert_eq(st->bytes[0], r->nnz * 2);
            cr_assert_eq(r->count_control, 1);
            cr_assert_eq(r->count_total, r->nnz);
            cr_assert_eq(r->count_max, maxc);
            break;
        }
        case DEFTSIM_METHOD_DGC: {
            /* One step per tensor, in parameter order. */
            size_t sparse = 0, dense = 0;
            for (size_t i = 0; i < m->nlayers; i++) {
                if (m->layers[i].ndim > 1) sparse++;
                else dense++;
            }
            size_t ns = 0, nd = 0;
            for (size_t i = 0; i < r->schedule.nsteps; i++) {
                const deftsim_step *q = &r->schedule.steps[i];
                if (q->kind == DEFTSIM_STEP_ALLGATHER) ns++;
                if (q->kind == DEFTSIM_STEP_ALLREDUCE) {
                    nd++;
                    cr_assert_eq(q->bytes[0] % 2, 0);
                }
            }
            cr_assert_eq(ns, sparse);
            cr_assert_eq(nd, dense);
            cr_assert(st = sp_find_step(r, DEFTSIM_STEP_ALLREDUCE, "dense:1", 0));
            cr_assert_eq(st->bytes[0], m->layers[1].numel * 2);
            break;
        }
        case DEFTSIM_METHOD_DENSE:
            cr_assert(st = sp_find_step(r, DEFTSIM_STEP_ALLREDUCE, "values", 0));
            cr_assert_eq(st->bytes[0], m->numel * 2);
            cr_assert_eq(r->nphases, 0);
            break;
        case DEFTSIM_METHOD_OKTOPK: /* its bytes: test_sp_oktopk.c */
            break;
        default: /* DEFTSIM_METHOD_COUNT and after: methods without a value of their own */
            if (is_method(p.method, "randk")) {
                cr_assert(st = sp_find_step(r, DEFTSIM_STEP_ALLREDUCE, "values", 0));
                cr_assert_eq(st->bytes[0], k * 2);
                cr_assert_eq(sp_count_collectives(r), 1);
            } else if (is_method(p.method, "hardthr") || is_method(p.method, "sidco")) {
                cr_assert(st = sp_find_step(r, DEFTSIM_STEP_ALLGATHER, "counts", 0));
                cr_assert_eq(st->bytes[0], 4);
                cr_assert(st = sp_find_step(r, DEFTSIM_STEP_ALLGATHER, "pairs", 0));
                for (uint32_t w = 0; w < P; w++)
                    cr_assert_eq(st->bytes[w], r->local_count[w] * 10);
            } else {
                cr_assert_fail("%s: no payload checks", deftsim_method_name(p.method));
            }
            break;
        }
        sp_accs_free(a);
        deftsim_sparsifier_free(s);
    }
    deftsim_model_free(m);
}

/* ---- Phases, memory, errors -------------------------------------------------------------- */

Test(sparsify, phase_names)
{
    deftsim_model *m = sp_model_mix();
    const struct {
        deftsim_method m;
        const char *names;
        const char *selection;
    } want[] = {
        {DEFTSIM_METHOD_DEFT, "norms allocate pack select gather residual", "111100"},
        {DEFTSIM_METHOD_TOPK, "select union gather residual", "1000"},
        {DEFTSIM_METHOD_TOPK_AG, "select gather sum residual", "1000"},
        {DEFTSIM_METHOD_CLTK, "select gather residual", "100"},
        {DEFTSIM_METHOD_GTOPK, "select gather merge residual", "1010"},
        {DEFTSIM_METHOD_DGC, "sample filter gather sum residual", "11000"},
        {DEFTSIM_METHOD_DENSE, "", ""},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        deftsim_sparsifier_params p = sp_params(want[i].m, 0.01, 3, m);
        deftsim_sparsifier *s = sp_new(&p);
        sp_accs *a = sp_accs_new(3, m->numel);
        deftsim_step_result *r = NULL;
        cr_assert_eq(deftsim_sparsifier_step(s, 0, &a->prov, &r), DEFTSIM_OK);
        char names[256] = "", sel[DEFTSIM_MAX_PHASES + 1] = "";
        for (size_t ph = 0; ph < r->nphases; ph++) {
            if (ph) strcat(names, " ");
            strcat(names, r->phase_name[ph]);
            sel[ph] = r->phase_selection[ph] ? '1' : '0';
        }
        cr_assert_str_eq(names, want[i].names);
        cr_assert_str_eq(sel, want[i].selection);
        sp_accs_free(a);
        deftsim_sparsifier_free(s);
    }
    deftsim_model_free(m);
}

Test(sparsify, memory_estimate)
{
    deftsim_model *m = sp_model_mix();
    for (size_t mi = 0; mi < NMETHODS; mi++) {
        deftsim_sparsifier_params p = sp_params(method_at(mi), 0.01, 4, m);
        uint64_t b4 = deftsim_sparsifier_memory(&p);
        p.P = 16;
        uint64_t b16 = deftsim_sparsifier_memory(&p);
        cr_assert_gt(b4, 0);
        cr_assert_geq(b16, b4, "%s: memory for 16 workers below that for 4",
                      deftsim_method_name(p.method));
        p.kctx = NULL; /* planning without a context leaves the kernel scratch out */
        cr_assert_leq(deftsim_sparsifier_memory(&p), b16);
        p.density = 2;
        cr_assert_eq(deftsim_sparsifier_memory(&p), 0);
    }
    deftsim_model_free(m);
}

Test(sparsify, bad_parameters)
{
    deftsim_model *m = sp_model_mix();
    deftsim_sparsifier *s = NULL;
    deftsim_sparsifier_params p = sp_params(DEFTSIM_METHOD_TOPK, 0.01, 4, m);
    p.density = 0;
    cr_assert_eq(deftsim_sparsifier_new(&p, &s), DEFTSIM_E_USAGE);
    cr_assert(strstr(deftsim_error_message(), "density"), "%s", deftsim_error_message());
    p = sp_params(DEFTSIM_METHOD_TOPK, 0.01, 4, m);
    p.index_bytes = 2;
    cr_assert_eq(deftsim_sparsifier_new(&p, &s), DEFTSIM_E_USAGE);
    cr_assert(strstr(deftsim_error_message(), "index_bytes"));
    p = sp_params(DEFTSIM_METHOD_TOPK, 0.01, 0, m);
    cr_assert_eq(deftsim_sparsifier_new(&p, &s), DEFTSIM_E_USAGE);
    p = sp_params(DEFTSIM_METHOD_CLTK, 0.01, 2, m);
    sp_opt(&p, "cltk_beta", 1.5);
    cr_assert_eq(deftsim_sparsifier_new(&p, &s), DEFTSIM_E_USAGE);
    /* DEFT cannot cut a model into more fragments than it has elements. */
    p = sp_params(DEFTSIM_METHOD_DEFT, 0.01, (uint32_t)m->numel + 1, m);
    cr_assert_neq(deftsim_sparsifier_new(&p, &s), DEFTSIM_OK);
    cr_assert_null(s);
    /* CLT-k's filter without the provider's gradients. */
    p = sp_params(DEFTSIM_METHOD_CLTK, 0.01, 2, m);
    sp_opt(&p, "cltk_beta", 0.5);
    s = sp_new(&p);
    sp_accs *a = sp_accs_new(2, m->numel);
    a->prov.grad = NULL;
    deftsim_step_result *r = NULL;
    cr_assert_eq(deftsim_sparsifier_step(s, 0, &a->prov, &r), DEFTSIM_E_USAGE);
    cr_assert(strstr(deftsim_error_message(), "grad"), "%s", deftsim_error_message());
    const deftsim_kidx *idx;
    uint64_t c;
    cr_assert_eq(deftsim_sparsifier_selection(s, 2, &idx, &c), DEFTSIM_E_USAGE);
    sp_accs_free(a);
    deftsim_sparsifier_free(s);
    deftsim_model_free(m);
}

/* A provider that fails: the step reports it with the worker named. */
static float *failing_get(void *ctx, uint32_t w)
{
    (void)ctx;
    if (w == 1) deftsim_error_set(DEFTSIM_E_IO, "trace file vanished");
    return NULL;
}

Test(sparsify, provider_failure)
{
    deftsim_model *m = sp_model_mix();
    deftsim_sparsifier_params p = sp_params(DEFTSIM_METHOD_TOPK, 0.01, 3, m);
    deftsim_sparsifier *s = sp_new(&p);
    deftsim_acc_provider prov = {.get = failing_get, .ctx = NULL, .persistent = 1};
    deftsim_step_result *r = NULL;
    cr_assert_neq(deftsim_sparsifier_step(s, 0, &prov, &r), DEFTSIM_OK);
    cr_assert_null(r);
    cr_assert(strstr(deftsim_error_message(), "worker 0"), "%s", deftsim_error_message());
    deftsim_sparsifier_free(s);
    deftsim_model_free(m);
}
