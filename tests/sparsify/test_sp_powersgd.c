/* test_sp_powersgd.c - PowerSGD against its definition (docs/SPARSIFIERS.md, "powersgd"): which
 * tensors the hook compresses, the schedule and its bytes (and bench sim's closed form), the
 * aggregate and residuals against a plain double-precision reference of the hook's math over
 * several steps (warm start, no warm start, no error feedback, Gram-Schmidt and QR ranks), the
 * allreduce warm-up, conservation, the non-persistent provider and the refusal of bad options.
 * Values agree to float rounding (OpenBLAS's sums against the reference's), not bit for bit;
 * counts, bytes and shapes agree exactly. tests/sparsify/powersgd_reference.py compares the
 * same steps with a numpy reference and with torch's own hook. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sp_internal.h" /* deftsim_powersgd_draw_q */
#include "sp_test.h"

TestSuite(sp_powersgd, .init = sp_suite_init, .fini = sp_suite_fini);

/* PowerSGD's value in the registry (it has no name in deftsim_method). */
static deftsim_method psgd(void)
{
    deftsim_method m;
    cr_assert_eq(deftsim_method_from_name("powersgd", &m), 0);
    return m;
}

/* Its result columns by position in its registry entry (extra[]). */
#define COL_RANK 0
#define COL_RATIO 1

/* The options at their defaults (torch's), then the rank and start_iter. */
static deftsim_sparsifier_params ps_params(uint32_t P, const deftsim_model *m, uint32_t rank,
                                           uint64_t start)
{
    deftsim_sparsifier_params p = sp_params(psgd(), 0.01, P, m);
    deftsim_method_opts_default(p.method, &p.opts);
    sp_opt(&p, "powersgd_rank", rank);
    sp_opt(&p, "powersgd_start_iter", (double)start);
    return p;
}

static deftsim_step_result *step_ok(deftsim_sparsifier *s, uint64_t t,
                                    const deftsim_acc_provider *prov)
{
    deftsim_step_result *r = NULL;
    cr_assert_eq(deftsim_sparsifier_step(s, t, prov, &r), DEFTSIM_OK, "%s",
                 deftsim_error_message());
    return r;
}

/* ---- the reference: the hook's math in double ------------------------------------------- */

typedef struct {
    const deftsim_model *m;
    uint32_t P, rank;
    double rate;
    int ef, warm;
    double *q[16];   /* per layer: the kept Q (cols x r), NULL when not compressed yet */
    double **res;    /* per worker residual (n) */
} ref_t;

static int ref_r(const ref_t *R, size_t li, uint64_t *rows, uint64_t *cols)
{
    const deftsim_layer *L = &R->m->layers[li];
    *rows = L->shape[0];
    *cols = L->numel / *rows;
    uint64_t r = R->rank;
    if (r > *rows) r = *rows;
    if (r > *cols) r = *cols;
    if ((double)((*rows + *cols) * r) * R->rate < (double)(*rows * *cols)) return (int)r;
    return 0;
}

/* Gram-Schmidt on a row-major rows x r matrix, in double (epsilon 0). */
static void ref_gs(double *a, uint64_t rows, int r)
{
    for (int i = 0; i < r; i++) {
        double ss = 0;
        for (uint64_t k = 0; k < rows; k++) ss += a[k * r + i] * a[k * r + i];
        double nrm = sqrt(ss);
        for (uint64_t k = 0; k < rows; k++) a[k * r + i] /= nrm;
        for (int j = i + 1; j < r; j++) {
            double dot = 0;
            for (uint64_t k = 0; k < rows; k++) dot += a[k * r + i] * a[k * r + j];
            for (uint64_t k = 0; k < rows; k++) a[k * r + j] -= dot * a[k * r + i];
        }
    }
}

/* One compressed step of the reference on the accumulators acc (P x n, float) into agg. */
static void ref_step(ref_t *R, uint64_t t, uint64_t seed, float *const *acc, double *agg)
{
    const deftsim_model *m = R->m;
    const uint32_t P = R->P;
    for (size_t li = 0; li < m->nlayers; li++) {
        const deftsim_layer *L = &m->layers[li];
        uint64_t rows, cols;
        int r = ref_r(R, li, &rows, &cols);
        if (!r) {
            for (uint64_t i = 0; i < L->numel; i++) {
                double s = 0;
                for (uint32_t w = 0; w < P; w++) s += acc[w][L->offset + i];
                agg[L->offset + i] = s / P;
            }
            continue;
        }
        if (!R->q[li] || !R->warm) {
            free(R->q[li]);
            R->q[li] = calloc(cols * r, sizeof(double));
            float *f = malloc(cols * r * sizeof *f);
            deftsim_powersgd_draw_q(seed, t, (uint32_t)li, f, cols * r);
            for (uint64_t i = 0; i < cols * (uint64_t)r; i++) R->q[li][i] = f[i];
            free(f);
        }
        double *q = R->q[li], *pm = calloc(rows * r, sizeof *pm), *qn = calloc(cols * r, sizeof *qn);
        ref_gs(q, cols, r);
        for (uint32_t w = 0; w < P; w++)
            for (uint64_t i = 0; i < rows; i++)
                for (uint64_t j = 0; j < cols; j++)
                    for (int c = 0; c < r; c++)
                        pm[i * r + c] += (double)acc[w][L->offset + i * cols + j] * q[j * r + c];
        ref_gs(pm, rows, r);
        for (uint32_t w = 0; w < P; w++)
            for (uint64_t i = 0; i < rows; i++)
                for (uint64_t j = 0; j < cols; j++)
                    for (int c = 0; c < r; c++)
                        qn[j * r + c] += (double)acc[w][L->offset + i * cols + j] * pm[i * r + c];
        for (uint64_t j = 0; j < cols * (uint64_t)r; j++) q[j] = qn[j] / P;
        for (uint64_t i = 0; i < rows; i++)
            for (uint64_t j = 0; j < cols; j++) {
                double s = 0;
                for (int c = 0; c < r; c++) s += pm[i * r + c] * q[j * r + c];
                agg[L->offset + i * cols + j] = s;
            }
        free(pm);
        free(qn);
    }
}

static void ref_free(ref_t *R)
{
    for (size_t i = 0; i < 16; i++) free(R->q[i]);
}

/* |x - y| within tol * scale, where scale is the largest magnitude of the reference. */
static void expect_close(const float *x, const double *y, uint64_t n, double tol, const char *what)
{
    double scale = 1e-30;
    for (uint64_t i = 0; i < n; i++) scale = fmax(scale, fabs(y[i]));
    for (uint64_t i = 0; i < n; i++)
        cr_assert(fabs((double)x[i] - y[i]) <= tol * scale, "%s[%llu]: %.9g vs reference %.9g",
                  what, (unsigned long long)i, (double)x[i], y[i]);
}

/* Runs T steps (from t = 0, start_iter 0) against the reference. */
static void against_reference(const char *const *shapes, size_t ns, uint32_t P, uint32_t rank,
                              int ef, int warm, uint64_t T)
{
    deftsim_model *m = sp_model(shapes, ns);
    const uint64_t n = m->numel, seed = sp_seed();
    deftsim_sparsifier_params p = ps_params(P, m, rank, 0);
    sp_opt(&p, "powersgd_error_feedback", ef);
    sp_opt(&p, "powersgd_warm_start", warm);
    deftsim_sparsifier *s = sp_new(&p);
    sp_accs *a = sp_accs_new(P, n);
    ref_t R = {.m = m, .P = P, .rank = rank, .rate = 2, .ef = ef, .warm = warm};
    double *agg = calloc(n, sizeof *agg);
    for (uint64_t t = 0; t < T; t++) {
        for (uint32_t w = 0; w < P; w++) {
            sp_fill_int(a->grad[w], n, 100, seed, t * 100 + w);
            for (uint64_t i = 0; i < n; i++) a->acc[w][i] += a->grad[w][i];
        }
        float **before = sp_accs_copy(a);
        ref_step(&R, t, p.seed, before, agg);
        deftsim_step_result *r = step_ok(s, t, &a->prov);
        cr_assert_eq(r->nnz, n);
        cr_assert_eq(r->common_count, n);
        cr_assert_eq(r->extra[COL_RANK], rank);
        expect_close(r->agg_value, agg, n, 2e-4, "aggregate");
        /* Residuals: acc - aggregate with error feedback (the float result's own), else 0. */
        for (uint32_t w = 0; w < P; w++)
            for (uint64_t i = 0; i < n; i++)
                cr_assert_eq(a->acc[w][i], ef ? before[w][i] - r->agg_value[i] : 0.0f,
                             "t=%llu w=%u i=%llu", (unsigned long long)t, w,
                             (unsigned long long)i);
        if (!ef) {
            double lm = 0;
            for (uint32_t w = 0; w < P; w++)
                for (uint64_t i = 0; i < n; i++) lm += (double)before[w][i] - r->agg_value[i];
            cr_assert_float_eq(r->lost_mass, lm, 1e-6 * (fabs(lm) + 1));
        } else {
            cr_assert_eq(r->lost_mass, 0);
        }
        sp_copies_free(before, P);
    }
    ref_free(&R);
    free(agg);
    sp_accs_free(a);
    deftsim_sparsifier_free(s);
    deftsim_model_free(m);
}

static const char *const mixed[] = {"12x3x2x2", "12", "20x9", "9", "5x40"};

Test(sp_powersgd, reference_warm_start_rank1)
{
    against_reference(mixed, 5, 3, 1, 1, 1, 4);
}

Test(sp_powersgd, reference_rank2_no_warm_start)
{
    against_reference(mixed, 5, 4, 2, 1, 0, 3);
}

Test(sp_powersgd, reference_no_error_feedback)
{
    against_reference(mixed, 5, 2, 1, 0, 1, 3);
}

/* Rank 4 > 2: LAPACK's QR. Its Q may differ from Gram-Schmidt's by the sign of a column; P Q^T
 * does not. */
Test(sp_powersgd, reference_rank4_qr)
{
    static const char *const shapes[] = {"30x24", "24", "16x2x3x3"};
    against_reference(shapes, 3, 3, 4, 1, 1, 3);
}

/* ---- compression decision, schedule, bytes ------------------------------------------------ */

/* Shapes and rates: (rows + cols) r * rate < rows cols, r = min(rows, cols, rank). */
Test(sp_powersgd, which_tensors_are_compressed)
{
    static const char *const shapes[] = {"10x10", "7", "3x50", "6x2x2"};
    deftsim_model *m = sp_model(shapes, 4);
    struct {
        uint32_t rank;
        double rate;
        uint64_t unc, pe, qe;
    } cases[] = {
        /* 10x10: r=2: 40*2 = 80 < 100 yes; r=3: 120 no. 7 (7x1): 16 > 7 no, rate 0.5: 4 < 7 yes.
         * 3x50: r=1: 106 < 150 yes; r=2: 212 no. 6x2x2 = 6x4: r=1: 20 < 24 yes; r=2 no. */
        {1, 2, 7, 10 + 3 + 6, 10 + 50 + 4},
        {2, 2, 7 + 150 + 24, 20, 20},
        {3, 2, 100 + 7 + 150 + 24, 0, 0},
        {1, 0.5, 0, 10 + 7 + 3 + 6, 10 + 1 + 50 + 4},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        deftsim_sparsifier_params p = ps_params(4, m, cases[c].rank, 0);
        sp_opt(&p, "powersgd_min_compression_rate", cases[c].rate);
        p.value_bytes = 2;
        deftsim_sparsifier *s = sp_new(&p);
        sp_accs *a = sp_accs_new(4, m->numel);
        for (uint32_t w = 0; w < 4; w++) sp_fill_int(a->acc[w], m->numel, 50, 5, w);
        deftsim_step_result *r = step_ok(s, 0, &a->prov);
        const char *names[3] = {"uncompressed", "p", "q"};
        uint64_t el[3] = {cases[c].unc, cases[c].pe, cases[c].qe};
        for (int i = 0; i < 3; i++) {
            const deftsim_step *st = sp_find_step(r, DEFTSIM_STEP_ALLREDUCE, names[i], 0);
            if (!el[i]) {
                cr_expect_null(st, "case %zu: no %s allreduce expected", c, names[i]);
                continue;
            }
            cr_assert(st, "case %zu: no %s allreduce", c, names[i]);
            for (uint32_t w = 0; w < 4; w++) cr_expect_eq(st->bytes[w], el[i] * 2, "case %zu %s", c, names[i]);
        }
        cr_expect_float_eq(r->extra[COL_RATIO],
                           (double)m->numel / (double)(el[0] + el[1] + el[2]), 1e-12);
        /* The closed form of bench sim sends the same. */
        deftsim_closed_form_in in = {.model = m, .density = 0.01, .k = 1, .index_bytes = 4,
                                     .value_bytes = 2, .opts = &p.opts};
        deftsim_schedule cf;
        cr_assert_eq(deftsim_method_closed_form(psgd(), &in, 4, &cf), DEFTSIM_OK);
        size_t j = 0;
        for (int i = 0; i < 3; i++) {
            if (!el[i]) continue;
            cr_assert_lt(j, cf.nsteps);
            cr_expect_str_eq(cf.steps[j].name, names[i]);
            cr_expect_eq(cf.steps[j].kind, DEFTSIM_STEP_ALLREDUCE);
            cr_expect_eq(cf.steps[j].bytes[1], el[i] * 2);
            j++;
        }
        cr_expect_eq(j, cf.nsteps);
        deftsim_schedule_free(&cf);
        sp_accs_free(a);
        deftsim_sparsifier_free(s);
    }
    deftsim_model_free(m);
}

/* The schedule's order: orthogonalize Q, compress, the allreduces of the uncompressed elements
 * and of P, orthogonalize P, project, the allreduce of Q, decompress, residual. */
Test(sp_powersgd, schedule_order)
{
    deftsim_model *m = sp_model(mixed, 5);
    deftsim_sparsifier_params p = ps_params(3, m, 1, 0);
    deftsim_sparsifier *s = sp_new(&p);
    sp_accs *a = sp_accs_new(3, m->numel);
    for (uint32_t w = 0; w < 3; w++) sp_fill_int(a->acc[w], m->numel, 50, 9, w);
    deftsim_step_result *r = step_ok(s, 0, &a->prov);
    static const char *const want[] = {"orthogonalize", "compress", "uncompressed", "p",
                                       "orthogonalize", "project", "q", "decompress", "residual"};
    cr_assert_eq(r->schedule.nsteps, 9);
    for (size_t i = 0; i < 9; i++) cr_expect_str_eq(r->schedule.steps[i].name, want[i]);
    cr_expect_eq(r->local_count[0], 0);
    cr_expect_eq(r->nphases, 5);
    sp_accs_free(a);
    deftsim_sparsifier_free(s);
    deftsim_model_free(m);
}

/* t < start_iter: the hook's plain allreduce of acc_w / P (each divided, then summed in worker
 * order); residual 0; rank 0 and ratio 1. */
Test(sp_powersgd, allreduce_warmup)
{
    deftsim_model *m = sp_model(mixed, 5);
    const uint32_t P = 3;
    deftsim_sparsifier_params p = ps_params(P, m, 1, 2);
    deftsim_sparsifier *s = sp_new(&p);
    sp_accs *a = sp_accs_new(P, m->numel);
    for (uint64_t t = 0; t < 3; t++) {
        for (uint32_t w = 0; w < P; w++) sp_fill_int(a->acc[w], m->numel, 50, 11, t * 10 + w);
        float **before = sp_accs_copy(a);
        deftsim_step_result *r = step_ok(s, t, &a->prov);
        if (t < 2) {
            cr_assert_eq(r->schedule.nsteps, 1);
            const deftsim_step *st = sp_find_step(r, DEFTSIM_STEP_ALLREDUCE, "values", 0);
            cr_assert(st);
            cr_expect_eq(st->bytes[0], m->numel * 4);
            cr_expect(isnan(r->extra[COL_RANK]), "rank %g in the warm-up", r->extra[COL_RANK]);
            cr_expect_eq(r->extra[COL_RATIO], 1);
            for (uint64_t i = 0; i < m->numel; i++) {
                float v = 0;
                for (uint32_t w = 0; w < P; w++) v = w ? v + before[w][i] / 3.0f : before[w][i] / 3.0f;
                cr_assert_eq(r->agg_value[i], v, "i=%llu", (unsigned long long)i);
                for (uint32_t w = 0; w < P; w++) cr_assert_eq(a->acc[w][i], 0);
            }
        } else {
            cr_expect_eq(r->extra[COL_RANK], 1);
            cr_expect_gt(r->extra[COL_RATIO], 1);
        }
        sp_copies_free(before, P);
    }
    sp_accs_free(a);
    deftsim_sparsifier_free(s);
    deftsim_model_free(m);
}

/* residuals + P * aggregate = accumulators (rounding), and the non-persistent provider gives the
 * same bits with no protocol violation. */
Test(sp_powersgd, conservation_and_providers)
{
    deftsim_model *m = sp_model_mix();
    const size_t n = m->numel;
    const uint64_t seed = sp_seed();
    for (uint32_t P = 1; P <= 5; P += 2) {
        deftsim_sparsifier_params p = ps_params(P, m, 2, 1);
        deftsim_sparsifier *s1 = sp_new(&p), *s2 = sp_new(&p);
        sp_accs *a = sp_accs_new(P, n);
        sp_npv *v = sp_npv_new(P, n);
        for (uint64_t t = 0; t < 3; t++) {
            for (uint32_t w = 0; w < P; w++) {
                sp_fill_int(a->grad[w], n, 1000, seed, t * 1000 + w);
                for (size_t i = 0; i < n; i++) a->acc[w][i] += a->grad[w][i];
                memcpy(v->grad[w], a->grad[w], n * sizeof(float));
            }
            float **before = sp_accs_copy(a);
            sp_npv_begin(v);
            deftsim_step_result *r1 = step_ok(s1, t, &a->prov);
            /* Per element: acc - residual = aggregate up to the rounding of acc - aggregate
             * (after the warm-up step t = 0, whose residual is 0). */
            for (uint32_t w = 0; w < P && t > 0; w++)
                for (size_t i = 0; i < n; i++) {
                    double d = (double)before[w][i] - a->acc[w][i] - r1->agg_value[i];
                    cr_assert(fabs(d) <= 1e-6 * (fabs(before[w][i]) + fabs(r1->agg_value[i])),
                              "P=%u w=%u i=%zu: %g", P, w, i, d);
                }
            double tol;
            double lost = sp_check_conservation(r1, before, a->acc, P, n, 0, &tol);
            cr_assert_float_eq(lost, 0, tol + 1e-6 * n * P * 1000);
            deftsim_step_result *r2 = step_ok(s2, t, &v->prov);
            cr_assert_eq(v->violations, 0);
            cr_assert_eq(v->nreleased, P);
            cr_assert(memcmp(r1->agg_value, r2->agg_value, n * sizeof(float)) == 0);
            for (uint32_t w = 0; w < P; w++)
                cr_assert(memcmp(a->acc[w], v->res[w], n * sizeof(float)) == 0);
            if (P == 1) cr_assert_eq(sp_count_collectives(r1), 0);
            sp_copies_free(before, P);
        }
        sp_npv_free(v);
        sp_accs_free(a);
        deftsim_sparsifier_free(s1);
        deftsim_sparsifier_free(s2);
    }
    deftsim_model_free(m);
}

/* The random Q: a pure function of (seed, t, layer), standard normal. */
Test(sp_powersgd, draws)
{
    float a[1001], b[1001];
    deftsim_powersgd_draw_q(5, 3, 2, a, 1001);
    deftsim_powersgd_draw_q(5, 3, 2, b, 1001);
    cr_assert(memcmp(a, b, sizeof a) == 0);
    deftsim_powersgd_draw_q(5, 4, 2, b, 1001);
    cr_assert(memcmp(a, b, sizeof a) != 0);
    double s = 0, ss = 0;
    for (int i = 0; i < 1001; i++) {
        s += a[i];
        ss += (double)a[i] * a[i];
    }
    cr_expect(fabs(s / 1001) < 0.15, "mean %g", s / 1001);
    cr_expect(fabs(ss / 1001 - 1) < 0.15, "variance %g", ss / 1001);
}

static double unit_cost(void *user, const deftsim_kcall *call)
{
    (void)user;
    (void)call;
    return 1e-6;
}

Test(sp_powersgd, bad_options)
{
    deftsim_model *m = sp_model(mixed, 5);
    deftsim_sparsifier *s = NULL;
    deftsim_sparsifier_params p = ps_params(2, m, 0, 0);
    cr_expect_eq(deftsim_sparsifier_new(&p, &s), DEFTSIM_E_USAGE);
    cr_expect(strstr(deftsim_error_message(), "powersgd_rank"), "%s", deftsim_error_message());
    p = ps_params(2, m, 1, 0);
    sp_opt(&p, "powersgd_min_compression_rate", -1);
    cr_expect_eq(deftsim_sparsifier_new(&p, &s), DEFTSIM_E_USAGE);
    p = ps_params(2, m, 1, 0);
    sp_opt(&p, "powersgd_epsilon", NAN);
    cr_expect_eq(deftsim_sparsifier_new(&p, &s), DEFTSIM_E_USAGE);
    cr_expect_null(s);
    /* A device profile's cost model on the kernels: PowerSGD calls none of them, so it is
     * refused, naming the operation a profile would need. */
    deftsim_kctx *kc;
    cr_assert_eq(deftsim_kctx_new(&kc, "cpu", 1), DEFTSIM_OK);
    deftsim_kctx_set_cost(kc, unit_cost, NULL);
    p = ps_params(2, m, 1, 0);
    p.kctx = kc;
    cr_expect_eq(deftsim_sparsifier_new(&p, &s), DEFTSIM_E_INPUT);
    cr_expect(strstr(deftsim_error_message(), "kind = profile") &&
                  strstr(deftsim_error_message(), "'gemm'"),
              "%s", deftsim_error_message());
    cr_expect_null(s);
    deftsim_kctx_free(kc);
    deftsim_model_free(m);
}
