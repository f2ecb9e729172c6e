/* sp_test.c - helpers of the sparsifier tests (see sp_test.h). */
#include "sp_test.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deftsim_rng.h"
#include "deftsim_util.h"

deftsim_kctx *sp_kc;

void sp_suite_init(void)
{
    cr_assert_eq(deftsim_kctx_new(&sp_kc, "cpu", 2), DEFTSIM_OK, "%s", deftsim_error_message());
}

void sp_suite_fini(void)
{
    deftsim_kctx_free(sp_kc);
    sp_kc = NULL;
}

uint64_t sp_seed(void)
{
    static uint64_t seed;
    static int have;
    if (!have) {
        const char *e = getenv("DEFTSIM_TEST_SEED");
        seed = 20230703;
        if (e && *e && deftsim_parse_u64(e, &seed)) seed = 20230703;
        have = 1;
        fprintf(stderr, "sparsify tests: seed %llu (set DEFTSIM_TEST_SEED to change)\n",
                (unsigned long long)seed);
    }
    return seed;
}

uint64_t sp_rand(uint64_t *s) { return deftsim_splitmix64_next(s); }

deftsim_model *sp_model(const char *const *shapes, size_t nshapes)
{
    size_t cap = 64 + nshapes * 96;
    char *csv = malloc(cap);
    cr_assert(csv);
    size_t len = (size_t)snprintf(csv, cap, "index,name,shape,numel\n");
    for (size_t i = 0; i < nshapes; i++) {
        uint64_t numel = 1;
        const char *p = shapes[i];
        while (*p) {
            numel *= strtoull(p, (char **)&p, 10);
            if (*p == 'x') p++;
        }
        len += (size_t)snprintf(csv + len, cap - len, "%zu,t%zu,%s,%llu\n", i, i, shapes[i],
                                (unsigned long long)numel);
    }
    deftsim_model *m = NULL;
    cr_assert_eq(deftsim_model_parse_csv(csv, len, "test", "test", &m), DEFTSIM_OK, "%s",
                 deftsim_error_message());
    free(csv);
    return m;
}

deftsim_model *sp_model_mix(void)
{
    static const char *const shapes[] = {"16x8x3x3", "16",  "32x16x3x3", "32",
                                         "64x32x3x3", "64", "10x64",     "10"};
    return sp_model(shapes, sizeof shapes / sizeof shapes[0]);
}

void sp_fill_int(float *x, size_t n, int range, uint64_t seed, uint64_t stream)
{
    uint64_t s = seed * 0x100000001b3ULL ^ (stream + 1) * 0x9e3779b97f4a7c15ULL;
    for (size_t i = 0; i < n; i++)
        x[i] = (float)((int64_t)(sp_rand(&s) % (uint64_t)(2 * range + 1)) - range);
}

static float *acc_get(void *ctx, uint32_t w)
{
    sp_accs *a = ctx;
    return w < a->P ? a->acc[w] : NULL;
}

static const float *acc_grad(void *ctx, uint32_t w)
{
    sp_accs *a = ctx;
    return w < a->P ? a->grad[w] : NULL;
}

sp_accs *sp_accs_new(uint32_t P, size_t n)
{
    sp_accs *a = calloc(1, sizeof *a);
    cr_assert(a);
    a->P = P;
    a->n = n;
    a->acc = calloc(P, sizeof *a->acc);
    a->grad = calloc(P, sizeof *a->grad);
    cr_assert(a->acc && a->grad);
    for (uint32_t w = 0; w < P; w++) {
        a->acc[w] = calloc(n ? n : 1, sizeof(float));
        a->grad[w] = calloc(n ? n : 1, sizeof(float));
        cr_assert(a->acc[w] && a->grad[w]);
    }
    a->prov = (deftsim_acc_provider){.get = acc_get, .ctx = a, .persistent = 1,
                                     .grad = acc_grad};
    return a;
}

void sp_accs_free(sp_accs *a)
{
    if (!a) return;
    for (uint32_t w = 0; w < a->P; w++) {
        free(a->acc[w]);
        free(a->grad[w]);
    }
    free(a->acc);
    free(a->grad);
    free(a);
}

float **sp_accs_copy(const sp_accs *a)
{
    float **c = calloc(a->P, sizeof *c);
    cr_assert(c);
    for (uint32_t w = 0; w < a->P; w++) {
        c[w] = malloc((a->n ? a->n : 1) * sizeof(float));
        cr_assert(c[w]);
        memcpy(c[w], a->acc[w], a->n * sizeof(float));
    }
    return c;
}

void sp_copies_free(float **c, uint32_t P)
{
    if (!c) return;
    for (uint32_t w = 0; w < P; w++) free(c[w]);
    free(c);
}

/* ---- The strict non-persistent provider ------------------------------------------------ */

static float *npv_get(void *ctx, uint32_t w)
{
    sp_npv *v = ctx;
    if (w >= v->P || v->released[w]) {
        v->violations++;
        return w < v->P ? v->buf : NULL;
    }
    if (v->cur >= 0 && !v->released[v->cur]) {
        /* The previous worker was not released: its buffer must be untouched. */
        const float *r = v->res[v->cur], *g = v->grad[v->cur];
        for (size_t i = 0; i < v->n; i++)
            if (v->buf[i] != r[i] + g[i]) {
                v->violations++;
                break;
            }
    }
    for (size_t i = 0; i < v->n; i++) v->buf[i] = v->res[w][i] + v->grad[w][i];
    v->cur = w;
    return v->buf;
}

static deftsim_status npv_release(void *ctx, uint32_t w)
{
    sp_npv *v = ctx;
    if (w >= v->P || (int64_t)w != v->cur || v->released[w] || (int64_t)w <= v->last_released) {
        v->violations++;
        return DEFTSIM_OK;
    }
    memcpy(v->res[w], v->buf, v->n * sizeof(float));
    v->released[w] = 1;
    v->last_released = w;
    v->nreleased++;
    return DEFTSIM_OK;
}

static const float *npv_grad(void *ctx, uint32_t w)
{
    sp_npv *v = ctx;
    if ((int64_t)w != v->cur) v->violations++;
    memcpy(v->gbuf, v->grad[w], v->n * sizeof(float));
    return v->gbuf;
}

sp_npv *sp_npv_new(uint32_t P, size_t n)
{
    sp_npv *v = calloc(1, sizeof *v);
    cr_assert(v);
    v->P = P;
    v->n = n;
    v->res = calloc(P, sizeof *v->res);
    v->grad = calloc(P, sizeof *v->grad);
    v->buf = calloc(n, sizeof(float));
    v->gbuf = calloc(n, sizeof(float));
    v->released = calloc(P, 1);
    cr_assert(v->res && v->grad && v->buf && v->gbuf && v->released);
    for (uint32_t w = 0; w < P; w++) {
        v->res[w] = calloc(n, sizeof(float));
        v->grad[w] = calloc(n, sizeof(float));
        cr_assert(v->res[w] && v->grad[w]);
    }
    v->prov = (deftsim_acc_provider){.get = npv_get, .ctx = v, .persistent = 0,
                                     .release = npv_release, .grad = npv_grad};
    sp_npv_begin(v);
    return v;
}

void sp_npv_begin(sp_npv *v)
{
    v->cur = -1;
    v->last_released = -1;
    v->nreleased = 0;
    memset(v->released, 0, v->P);
}

void sp_npv_free(sp_npv *v)
{
    if (!v) return;
    for (uint32_t w = 0; w < v->P; w++) {
        free(v->res[w]);
        free(v->grad[w]);
    }
    free(v->res);
    free(v->grad);
    free(v->buf);
    free(v->gbuf);
    free(v->released);
    free(v);
}

/* ---- Sparsifiers ---------------------------------------------------------------------- */

deftsim_sparsifier_params sp_params(deftsim_method m, double d, uint32_t P,
                                    const deftsim_model *model)
{
    return (deftsim_sparsifier_params){
        .method = m,
        .density = d,
        .P = P,
        .model = model,
        .index_bytes = 4,
        .value_bytes = 4,
        .wire = DEFTSIM_WIRE_SPEC,
        .seed = 7,
        .kctx = sp_kc,
    };
}

void sp_opt(deftsim_sparsifier_params *p, const char *key, double v)
{
    deftsim_method m;
    size_t j;
    cr_assert_eq(deftsim_method_option_find(key, &m, &j), 0, "no option %s", key);
    cr_assert_eq(m, p->method, "%s is %s's option, not %s's", key, deftsim_method_name(m),
                 deftsim_method_name(p->method));
    if (deftsim_method_get(m)->options[j].type == DEFTSIM_OPT_DOUBLE)
        p->opts.v[j].d = v;
    else
        p->opts.v[j].i = (int)v;
}

deftsim_sparsifier *sp_new(const deftsim_sparsifier_params *p)
{
    deftsim_sparsifier *s = NULL;
    cr_assert_eq(deftsim_sparsifier_new(p, &s), DEFTSIM_OK, "%s P=%u: %s",
                 deftsim_method_name(p->method), p->P, deftsim_error_message());
    return s;
}

/* ---- References ----------------------------------------------------------------------- */

typedef struct {
    uint32_t i;
    float v;
} pair;

static int rank_cmp(const void *a, const void *b)
{
    const pair *x = a, *y = b;
    float ax = fabsf(x->v), ay = fabsf(y->v);
    if (ax > ay) return -1;
    if (ax < ay) return 1;
    return (x->i > y->i) - (x->i < y->i);
}

static int u32_cmp(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

void sp_ref_rank(uint32_t *idx, float *val, size_t m)
{
    pair *p = malloc((m ? m : 1) * sizeof *p);
    cr_assert(p);
    for (size_t j = 0; j < m; j++) p[j] = (pair){idx[j], val[j]};
    qsort(p, m, sizeof *p, rank_cmp);
    for (size_t j = 0; j < m; j++) {
        idx[j] = p[j].i;
        val[j] = p[j].v;
    }
    free(p);
}

void sp_ref_topk(const float *x, size_t n, size_t k, uint32_t *out)
{
    pair *p = malloc((n ? n : 1) * sizeof *p);
    cr_assert(p);
    for (size_t i = 0; i < n; i++) p[i] = (pair){(uint32_t)i, x[i]};
    qsort(p, n, sizeof *p, rank_cmp);
    for (size_t j = 0; j < k; j++) out[j] = p[j].i;
    qsort(out, k, sizeof *out, u32_cmp);
    free(p);
}

double sp_check_conservation(const deftsim_step_result *r, float *const *before,
                             float *const *after, uint32_t P, size_t n, int per_element,
                             double *tol_sum)
{
    double *diff = calloc(n, sizeof *diff), *mag = calloc(n, sizeof *mag);
    cr_assert(diff && mag);
    for (uint32_t w = 0; w < P; w++)
        for (size_t i = 0; i < n; i++) {
            diff[i] += (double)before[w][i] - (double)after[w][i];
            mag[i] += fabs((double)before[w][i]);
        }
    for (uint64_t j = 0; j < r->nnz; j++) {
        cr_assert_lt(r->agg_index[j], n);
        diff[r->agg_index[j]] -= (double)P * (double)r->agg_value[j];
    }
    double total = 0, ts = 0;
    for (size_t i = 0; i < n; i++) {
        /* P * (sum / P) in float: off by at most a few ulps of the sum. */
        double tol = 1e-6 * (mag[i] + 1);
        if (per_element)
            cr_assert_leq(fabs(diff[i]), tol,
                          "element %zu: accumulators - residuals - P * aggregate = %g", i,
                          diff[i]);
        total += diff[i];
        ts += tol;
    }
    if (tol_sum) *tol_sum = ts;
    free(diff);
    free(mag);
    return total;
}

void sp_check_sorted(const deftsim_step_result *r)
{
    for (uint64_t j = 1; j < r->nnz; j++)
        cr_assert_lt(r->agg_index[j - 1], r->agg_index[j], "aggregate not strictly ascending at %llu",
                     (unsigned long long)j);
}

double sp_schedule_seconds(const deftsim_step_result *r, const char *phase, uint32_t w)
{
    double s = 0;
    for (size_t i = 0; i < r->schedule.nsteps; i++) {
        const deftsim_step *st = &r->schedule.steps[i];
        if (st->kind == DEFTSIM_STEP_COMPUTE && strcmp(st->name, phase) == 0) s += st->seconds[w];
    }
    return s;
}

const deftsim_step *sp_find_step(const deftsim_step_result *r, deftsim_step_kind kind,
                                 const char *name, size_t nth)
{
    for (size_t i = 0; i < r->schedule.nsteps; i++) {
        const deftsim_step *st = &r->schedule.steps[i];
        if (st->kind == kind && (!name || strcmp(st->name, name) == 0) && nth-- == 0) return st;
    }
    return NULL;
}

size_t sp_count_collectives(const deftsim_step_result *r)
{
    size_t c = 0;
    for (size_t i = 0; i < r->schedule.nsteps; i++)
        if (r->schedule.steps[i].kind != DEFTSIM_STEP_COMPUTE) c++;
    return c;
}
