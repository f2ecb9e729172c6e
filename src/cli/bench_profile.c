/* bench_profile.c - `deftsim bench kernels --profile FILE`: measures every kernel operation the
 * sparsifiers call over a range of sizes, densities and fragment counts, fits one cost model
 * per operation (deftsim_profile_fit), writes the profile atomically, then validates it: the
 * prediction against a fresh measurement of every case, and against the measured phases of a
 * small run of every sparsifier (ResNet-18, synthetic gradients). docs/KERNELS.md, "Device
 * profiles". */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_profile.h"
#include "cli.h"
#include "deftsim_build_info.h"
#include "deftsim_deft.h"
#include "deftsim_gen.h"
#include "deftsim_machine.h"
#include "deftsim_model.h"
#include "deftsim_profile.h"
#include "deftsim_rng.h"
#include "deftsim_sparsify.h"
#include "deftsim_util.h"
#ifdef DEFTSIM_HAVE_CUDA
#include "deftsim_kcuda.h"
#endif

#define NMAX ((size_t)1 << 24)
#define R18_N 11173962u
#define MMAX ((size_t)4000000)

/* ---- Data --------------------------------------------------------------------------------- */

/* (0, 1] from the counter *s, which steps by one. */
static double unit(uint64_t *s) { return deftsim_rng_open(deftsim_splitmix64((*s)++)); }

static void fill_normal(float *x, size_t n, uint64_t seed)
{
    uint64_t s = seed * 0x100000001b3ULL;
    for (size_t i = 0; i < n; i += 2) {
        double r = sqrt(-2.0 * log(unit(&s))), th = 6.283185307179586 * unit(&s);
        x[i] = (float)(r * cos(th));
        if (i + 1 < n) x[i + 1] = (float)(r * sin(th));
    }
}

/* m sorted indices in [0, n), uniform at random (ascending, as a run's union of selections;
 * random gaps, so that no prefetcher sees a constant stride). */
static void fill_sorted_idx(deftsim_kidx *idx, size_t m, size_t n, uint64_t seed)
{
    uint64_t s = seed;
    /* Ascending without a sort: exponential gaps, rescaled to end below n. */
    double *g = malloc((m + 1) * sizeof *g), tot = 0;
    if (!g) {
        for (size_t i = 0; i < m; i++) idx[i] = (deftsim_kidx)((double)n * (double)i / (double)m);
        return;
    }
    for (size_t i = 0; i <= m; i++) tot += (g[i] = -log(unit(&s)));
    double acc = 0;
    for (size_t i = 0; i < m; i++) {
        acc += g[i];
        size_t v = (size_t)((double)n * acc / tot);
        idx[i] = (deftsim_kidx)(v < n ? v : n - 1);
    }
    free(g);
}

/* ---- Cases -------------------------------------------------------------------------------- */

typedef struct {
    char id[64];
    deftsim_kop op;
    size_t n;         /* the input's length (x, universe) */
    size_t m;         /* k, count, entries, list length */
    size_t lists;     /* union: number of lists */
    deftsim_kidx *ul; /* union: its lists, lists x m random indices below n (owned) */
    float thr;        /* filters */
    deftsim_kseg *segs; /* segmented: owned */
    size_t nseg;
    deftsim_kcall call; /* what the dispatch layer will report (filled after the first run) */
} pcase;

typedef struct {
    pcase *c;
    size_t n, cap;
} pcases;

static pcase *add_case(pcases *cs)
{
    if (deftsim_grow(&cs->c, &cs->cap, cs->n + 1, sizeof *cs->c)) return NULL;
    pcase *c = &cs->c[cs->n++];
    memset(c, 0, sizeof *c);
    return c;
}

/* The fragments of ResNet-18 for P, every stride-th one, with k_j allocated by DEFT's rule for
 * a total k = 0.01 of their elements (norms from x). */
static deftsim_status deft_subset(deftsim_kctx *ctx, const deftsim_model *m, const float *x,
                                  uint32_t P, size_t stride, deftsim_kseg **out, size_t *nout)
{
    deftsim_fragment *fr = NULL;
    size_t nf = 0;
    deftsim_status st = deftsim_deft_fragments(m, P, &fr, &nf);
    if (st) return st;
    size_t ns = (nf + stride - 1) / stride, sb = 0;
    deftsim_fragment *sub = malloc(ns * sizeof *sub);
    deftsim_kseg *segs = malloc(ns * sizeof *segs);
    double *norms = malloc(ns * sizeof *norms);
    uint64_t *kj = malloc(ns * sizeof *kj);
    size_t *order = malloc(ns * sizeof *order);
    void *scr = NULL;
    if (!sub || !segs || !norms || !kj || !order) {
        st = deftsim_error_nomem("bench");
        goto done;
    }
    uint64_t total = 0;
    for (size_t j = 0; j < ns; j++) {
        sub[j] = fr[j * stride];
        segs[j] = (deftsim_kseg){(size_t)sub[j].offset, (size_t)sub[j].size, 0};
        total += sub[j].size;
    }
    if ((st = deftsim_k_seg_norms_scratch(ctx, segs, ns, &sb))) goto done;
    if (!(scr = malloc(sb ? sb : 1))) {
        st = deftsim_error_nomem("bench");
        goto done;
    }
    if ((st = deftsim_k_seg_norms(ctx, x, m->numel, segs, ns, norms, scr, sb))) goto done;
    deftsim_deft_allocate_k(sub, ns, norms, total / 100 ? total / 100 : 1, kj, order);
    for (size_t j = 0; j < ns; j++) segs[j].k = (size_t)kj[j];
    *out = segs;
    *nout = ns;
    segs = NULL;
done:
    free(fr);
    free(sub);
    free(segs);
    free(norms);
    free(kj);
    free(order);
    free(scr);
    return st;
}

static deftsim_status build_cases(deftsim_kctx *ctx, const deftsim_model *r18, const float *x,
                                  int quick, pcases *cs)
{
    static const size_t sizes[] = {65536, 262144, 1048576, 4194304, R18_N, NMAX};
    static const size_t qsizes[] = {65536, 1048576, R18_N};
    const size_t *sz = quick ? qsizes : sizes;
    size_t nsz = quick ? 3 : 6;
    static const double dens[] = {0.001, 0.01, 0.1};
    /* |N(0,1)| passes these with probability 0.001, 0.01 and 0.1. */
    static const float thr[] = {3.2905f, 2.5758f, 1.6449f};
    static const size_t counts[] = {1000, 10000, 100000, 1000000, 4000000};
    pcase *c;
#define ADD()                                                                                      \
    do {                                                                                           \
        if (!(c = add_case(cs))) return deftsim_error_nomem("bench"); \
    } while (0)
    for (size_t i = 0; i < nsz; i++) {
        ADD();
        *c = (pcase){.op = DEFTSIM_KOP_ABSMAX, .n = sz[i]};
        snprintf(c->id, sizeof c->id, "absmax-n%zu", sz[i]);
        ADD();
        *c = (pcase){.op = DEFTSIM_KOP_COUNT_GE, .n = sz[i], .thr = thr[1]};
        snprintf(c->id, sizeof c->id, "count_ge-n%zu", sz[i]);
        for (size_t d = 0; d < 3; d++) {
            ADD();
            *c = (pcase){.op = DEFTSIM_KOP_TOPK, .n = sz[i], .m = (size_t)(dens[d] * (double)sz[i])};
            snprintf(c->id, sizeof c->id, "topk-n%zu-d%g", sz[i], dens[d]);
            ADD();
            *c = (pcase){.op = DEFTSIM_KOP_FILTER_GE, .n = sz[i], .m = sz[i], .thr = thr[d]};
            snprintf(c->id, sizeof c->id, "filter_ge-n%zu-p%g", sz[i], dens[d]);
        }
    }
    static const uint32_t Ps[] = {2, 16, 128, 1024};
    static const size_t strides[] = {1, 4, 32};
    for (size_t p = 0; p < 4; p++)
        for (size_t s = 0; s < 3; s++) {
            if (quick && (p == 1 || s == 1)) continue;
            deftsim_kseg *segs = NULL;
            size_t nseg = 0;
            deftsim_status st = deft_subset(ctx, r18, x, Ps[p], strides[s], &segs, &nseg);
            if (st) return st;
            for (int twice = 0; twice < 2; twice++) {
                if (!(c = add_case(cs))) {
                    free(segs);
                    return deftsim_error_nomem("bench");
                }
                *c = (pcase){.op = twice ? DEFTSIM_KOP_SEG_NORMS : DEFTSIM_KOP_SEGTOPK,
                             .n = R18_N, .nseg = nseg};
                if (twice) {
                    c->segs = malloc(nseg * sizeof *segs);
                    if (!c->segs) {
                        free(segs);
                        return deftsim_error_nomem("bench");
                    }
                    memcpy(c->segs, segs, nseg * sizeof *segs);
                } else {
                    c->segs = segs;
                }
                snprintf(c->id, sizeof c->id, "%s-r18-P%u-every%zu",
                         twice ? "seg_norms" : "segtopk", Ps[p], strides[s]);
            }
        }
    for (size_t i = 0; i < 5; i++) {
        if (quick && (i == 1 || i == 3)) continue;
        static const deftsim_kop ops[] = {DEFTSIM_KOP_SAMPLE_STRIDED, DEFTSIM_KOP_SAMPLE_RANDOM,
                                          DEFTSIM_KOP_GATHER, DEFTSIM_KOP_ZERO_AT,
                                          DEFTSIM_KOP_SCATTER_ADD, DEFTSIM_KOP_MERGE_TOPK};
        for (size_t o = 0; o < 6; o++) {
            if (o == 5 && counts[i] > 1000000) continue;
            ADD();
            *c = (pcase){.op = ops[o], .n = NMAX, .m = counts[i]};
            snprintf(c->id, sizeof c->id, "%s-m%zu", deftsim_kop_name(ops[o]), counts[i]);
        }
    }
    static const size_t un[] = {1048576, R18_N};
    static const size_t ul[] = {2, 8, 32};
    for (size_t u = 0; u < 2; u++)
        for (size_t l = 0; l < 3; l++) {
            ADD();
            *c = (pcase){.op = DEFTSIM_KOP_UNION, .n = un[u], .m = un[u] / 100, .lists = ul[l]};
            snprintf(c->id, sizeof c->id, "union-n%zu-lists%zu", un[u], ul[l]);
        }
#undef ADD
    return DEFTSIM_OK;
}

/* ---- Running a case ------------------------------------------------------------------------- */

typedef struct {
    float *x;          /* NMAX normal values (read only) */
    float *xw;         /* NMAX, written by zero_at and scatter_add */
    float *vals;       /* MMAX */
    float *sbuf;       /* MMAX samples */
    deftsim_kidx *idx; /* MMAX sorted indices */
    deftsim_kidx *out; /* NMAX outputs */
    const deftsim_kidx *lp[32];
    size_t lens[32];
    float *mva, *mvb;  /* merge values */
    deftsim_kidx *mia, *mib;
    float *mout;
    void *scratch;
    size_t scratch_bytes;
    int staged;        /* time by the context's device seconds (cuda-staged) */
    float *evict;      /* evict_n floats read before every call (none if NULL) */
    size_t evict_n;
    float evict_sink;
} pbufs;

/* Reads the eviction buffer: the next call finds its inputs in memory, not in the caches, as
 * a phase of a run does (every worker's accumulator was just written by the gradient source,
 * and P of them exceed any cache). */
static void evict(pbufs *b)
{
    if (!b->evict) return;
    float acc = 0;
    for (size_t i = 0; i < b->evict_n; i += 16) acc += b->evict[i];
    b->evict_sink += acc;
}

static deftsim_status scratch_for(deftsim_kctx *ctx, const pcase *c, pbufs *b, size_t *need)
{
    *need = 0;
    switch (c->op) {
    case DEFTSIM_KOP_TOPK: return deftsim_k_topk_scratch(ctx, c->n, c->m, need);
    case DEFTSIM_KOP_SEGTOPK: return deftsim_k_segtopk_scratch(ctx, c->segs, c->nseg, need);
    case DEFTSIM_KOP_SEG_NORMS: return deftsim_k_seg_norms_scratch(ctx, c->segs, c->nseg, need);
    case DEFTSIM_KOP_UNION: return deftsim_k_union_scratch(ctx, c->n, need);
    case DEFTSIM_KOP_MERGE_TOPK: return deftsim_k_merge_topk_scratch(ctx, c->m, c->m, need);
    default: (void)b; return DEFTSIM_OK;
    }
}

static deftsim_status run_once(deftsim_kctx *ctx, const pcase *c, pbufs *b)
{
    size_t cnt = 0;
    float f;
    static double norms[32768];
    switch (c->op) {
    case DEFTSIM_KOP_ABSMAX: return deftsim_k_absmax(ctx, b->x, c->n, &f);
    case DEFTSIM_KOP_TOPK:
        return deftsim_k_topk(ctx, b->x, c->n, c->m, b->out, b->scratch, b->scratch_bytes);
    case DEFTSIM_KOP_SEGTOPK:
        return deftsim_k_segtopk(ctx, b->x, c->n, c->segs, c->nseg, b->out, b->scratch,
                                 b->scratch_bytes);
    case DEFTSIM_KOP_SEG_NORMS:
        return deftsim_k_seg_norms(ctx, b->x, c->n, c->segs, c->nseg, norms, b->scratch,
                                   b->scratch_bytes);
    case DEFTSIM_KOP_FILTER_GE: return deftsim_k_filter_ge(ctx, b->x, c->n, c->thr, b->out, c->m, &cnt);
    case DEFTSIM_KOP_COUNT_GE: return deftsim_k_count_ge(ctx, b->x, c->n, c->thr, &cnt);
    case DEFTSIM_KOP_SAMPLE_STRIDED:
        return deftsim_k_sample_strided(ctx, b->x, c->n, 7, c->n / c->m, c->m, b->sbuf);
    case DEFTSIM_KOP_SAMPLE_RANDOM: return deftsim_k_sample_random(ctx, b->x, c->n, c->m, 42, b->sbuf);
    case DEFTSIM_KOP_GATHER: return deftsim_k_gather(ctx, b->x, c->n, b->idx, c->m, b->vals);
    case DEFTSIM_KOP_ZERO_AT: return deftsim_k_zero_at(ctx, b->xw, c->n, b->idx, c->m);
    case DEFTSIM_KOP_SCATTER_ADD:
        return deftsim_k_scatter_add(ctx, b->xw, c->n, b->idx, b->vals, c->m);
    case DEFTSIM_KOP_UNION:
        for (size_t l = 0; l < c->lists; l++) {
            b->lp[l] = c->ul + l * c->m;
            b->lens[l] = c->m;
        }
        return deftsim_k_union(ctx, c->n, b->lp, b->lens, c->lists, b->out, NMAX, &cnt,
                               b->scratch, b->scratch_bytes);
    case DEFTSIM_KOP_MERGE_TOPK:
        return deftsim_k_merge_topk(ctx, b->mia, b->mva, c->m, b->mib, b->mvb, c->m, c->m, b->out,
                                    b->mout, &cnt, b->scratch, b->scratch_bytes);
    default: return deftsim_error_set(DEFTSIM_E_INTERNAL, "bench: no case runner for %s",
                                      deftsim_kop_name(c->op));
    }
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double device_seconds(const deftsim_kctx *ctx)
{
    deftsim_kxfer x;
    deftsim_kctx_transfers(ctx, &x);
    return x.device_seconds;
}

/* Sizes the scratch, draws a union's lists, and makes one untimed call, which also records
 * the sizes the dispatch layer reports for it (c->call). */
static deftsim_status prepare_case(deftsim_kctx *ctx, pcase *c, pbufs *b)
{
    size_t need;
    deftsim_status st;
    if ((st = scratch_for(ctx, c, b, &need))) return st;
    if (need > b->scratch_bytes) {
        void *p = realloc(b->scratch, need);
        if (!p) return deftsim_error_nomem("bench: scratch");
        b->scratch = p;
        b->scratch_bytes = need;
    }
    if (c->op == DEFTSIM_KOP_UNION && !c->ul) {
        if (!(c->ul = malloc(c->lists * c->m * sizeof *c->ul)))
            return deftsim_error_nomem("bench");
        for (size_t i = 0; i < c->lists * c->m; i++)
            c->ul[i] = (deftsim_kidx)(deftsim_splitmix64(0x5eed + i) % c->n);
    }
    deftsim_kcall log[1];
    deftsim_kctx_set_log(ctx, log, 1);
    st = run_once(ctx, c, b);
    deftsim_kctx_set_log(ctx, NULL, 0);
    if (st) return deftsim_error_wrap(st, "case %s", c->id);
    c->call = log[0];
    return DEFTSIM_OK;
}

/* Every case once per round, rounds times over (round-robin, so that a burst of other work
 * on a shared machine spreads over many cases instead of spoiling one), each call after the
 * eviction read: the median of each case's rounds. */
static deftsim_status measure_all(deftsim_kctx *ctx, pcases *cs, pbufs *b, unsigned rounds,
                                  double *median)
{
    deftsim_status st;
    for (size_t i = 0; i < cs->n; i++)
        if ((st = prepare_case(ctx, &cs->c[i], b))) return st;
    double *t = malloc(cs->n * rounds * sizeof *t);
    if (!t) return deftsim_error_nomem("bench");
    for (unsigned r = 0; r < rounds; r++)
        for (size_t i = 0; i < cs->n; i++) {
            evict(b);
            double d0 = b->staged ? device_seconds(ctx) : 0, t0 = deftsim_now();
            if ((st = run_once(ctx, &cs->c[i], b))) {
                free(t);
                return deftsim_error_wrap(st, "case %s", cs->c[i].id);
            }
            double t1 = deftsim_now();
            t[i * rounds + r] = b->staged ? device_seconds(ctx) - d0 : t1 - t0;
        }
    for (size_t i = 0; i < cs->n; i++) {
        double *v = t + i * rounds;
        qsort(v, rounds, sizeof *v, cmp_d);
        median[i] = rounds % 2 ? v[rounds / 2] : 0.5 * (v[rounds / 2 - 1] + v[rounds / 2]);
        if (!(median[i] > 0)) median[i] = 1e-9;
    }
    free(t);
    return DEFTSIM_OK;
}

static deftsim_status alloc_bufs(pbufs *b, uint64_t seed)
{
    memset(b, 0, sizeof *b);
    b->x = malloc(NMAX * sizeof *b->x);
    b->xw = malloc(NMAX * sizeof *b->xw);
    b->vals = malloc(MMAX * sizeof *b->vals);
    b->sbuf = malloc(MMAX * sizeof *b->sbuf);
    b->idx = malloc(MMAX * sizeof *b->idx);
    b->out = malloc(NMAX * sizeof *b->out);
    b->mva = malloc(1000000 * sizeof *b->mva);
    b->mvb = malloc(1000000 * sizeof *b->mvb);
    b->mia = malloc(1000000 * sizeof *b->mia);
    b->mib = malloc(1000000 * sizeof *b->mib);
    b->mout = malloc(1000000 * sizeof *b->mout);
    if (!b->x || !b->xw || !b->vals || !b->sbuf || !b->idx || !b->out || !b->mva ||
        !b->mvb || !b->mia || !b->mib || !b->mout)
        return deftsim_error_nomem("bench: the profile's inputs");
    fill_normal(b->x, NMAX, seed);
    memcpy(b->xw, b->x, NMAX * sizeof *b->x);
    fill_normal(b->vals, MMAX, seed + 1);
    fill_sorted_idx(b->idx, MMAX, NMAX, seed + 2);
    fill_sorted_idx(b->mia, 1000000, 4000000, seed + 4);
    fill_sorted_idx(b->mib, 1000000, 4000000, seed + 5);
    fill_normal(b->mva, 1000000, seed + 6);
    fill_normal(b->mvb, 1000000, seed + 7);
    return DEFTSIM_OK;
}

static void free_bufs(pbufs *b)
{
    free(b->x);
    free(b->xw);
    free(b->vals);
    free(b->sbuf);
    free(b->idx);
    free(b->out);
    free(b->mva);
    free(b->mvb);
    free(b->mia);
    free(b->mib);
    free(b->mout);
    free(b->scratch);
    free(b->evict);
}

/* ---- Phases of a small run ------------------------------------------------------------------ */

typedef struct {
    float **acc;
} vprov;

static float *vget(void *ctx, uint32_t w) { return ((vprov *)ctx)->acc[w]; }

/* Every sparsifier on ResNet-18 (synthetic gradients, the scenario defaults), density 0.01,
 * P workers: each iteration runs once timed by the wall clock and once by the profile on the
 * same accumulators; the table compares the phases (summed over workers, averaged over the
 * iterations after the first). */
static deftsim_status validate_phases(const deftsim_profile *prof, const char *backend,
                                      unsigned threads, uint32_t P, unsigned iters, double *worst,
                                      size_t *nrows, size_t *nbad)
{
    deftsim_status st;
    deftsim_model *m = NULL;
    deftsim_gen *g = NULL;
    deftsim_kctx *kc = NULL, *kp = NULL;
    float **acc = calloc(P, sizeof *acc);
    if (!acc) return deftsim_error_nomem("bench");
    if ((st = deftsim_model_builtin("resnet18_cifar10", &m))) goto done;
    deftsim_gen_params gp;
    deftsim_gen_params_default(&gp);
    if ((st = deftsim_gen_new(m, &gp, &g))) goto done;
    if ((st = deftsim_kctx_new(&kc, backend, threads)) || (st = deftsim_kctx_new(&kp, "cpu", threads)))
        goto done;
    deftsim_kctx_set_cost(kp, deftsim_profile_cost, (void *)prof);
    for (uint32_t w = 0; w < P; w++)
        if (!(acc[w] = malloc(m->numel * sizeof(float)))) {
            st = deftsim_error_nomem("bench");
            goto done;
        }
    vprov pv = {acc};
    deftsim_acc_provider prov = {.get = vget, .ctx = &pv, .persistent = 1};
    printf("\nphases of a small run: resnet18_cifar10 (n = %llu), synthetic gradients, density "
           "0.01, P = %u, %u iterations after one warm-up; per phase, seconds summed over the "
           "workers, mean over the iterations\n",
           (unsigned long long)m->numel, P, iters);
    printf("%-8s %-9s %12s %12s %9s\n", "method", "phase", "measured_ms", "profile_ms", "rel_err");
    static const deftsim_method methods[] = {DEFTSIM_METHOD_DEFT, DEFTSIM_METHOD_TOPK,
                                             DEFTSIM_METHOD_TOPK_AG, DEFTSIM_METHOD_CLTK,
                                             DEFTSIM_METHOD_GTOPK, DEFTSIM_METHOD_DGC};
    for (size_t mi = 0; mi < sizeof methods / sizeof methods[0]; mi++) {
        deftsim_sparsifier *sc = NULL, *sp = NULL;
        deftsim_sparsifier_params pp = {.method = methods[mi], .density = 0.01, .P = P, .model = m,
                                        .index_bytes = 4, .value_bytes = 4,
                                        .wire = DEFTSIM_WIRE_SPEC,
                                        .seed = 1,
                                        .kctx = kc};
        if ((st = deftsim_sparsifier_new(&pp, &sc))) goto done;
        pp.kctx = kp;
        if ((st = deftsim_sparsifier_new(&pp, &sp))) {
            deftsim_sparsifier_free(sc);
            goto done;
        }
        double meas[DEFTSIM_MAX_PHASES] = {0}, pred[DEFTSIM_MAX_PHASES] = {0};
        size_t nph = 0;
        const char *names[DEFTSIM_MAX_PHASES] = {0};
        for (unsigned t = 0; t <= iters && !st; t++) {
            for (int pass = 0; pass < 2 && !st; pass++) {
                for (uint32_t w = 0; w < P && !st; w++)
                    st = deftsim_gen_fill(g, t, w, 0, m->numel, acc[w]);
                deftsim_step_result *r = NULL;
                if (!st) st = deftsim_sparsifier_step(pass ? sp : sc, t, &prov, &r);
                if (st || t == 0) continue;
                nph = r->nphases;
                for (size_t ph = 0; ph < nph; ph++) {
                    names[ph] = r->phase_name[ph];
                    double sum = 0;
                    for (uint32_t w = 0; w < P; w++) sum += r->phase_seconds[(size_t)w * nph + ph];
                    (pass ? pred : meas)[ph] += sum / iters;
                }
            }
        }
        deftsim_sparsifier_free(sc);
        deftsim_sparsifier_free(sp);
        if (st) goto done;
        for (size_t ph = 0; ph < nph; ph++) {
            double e = meas[ph] > 0 ? (pred[ph] - meas[ph]) / meas[ph] : 0;
            /* Host work between kernel calls (DEFT's allocate and pack) has no kernel call:
             * the profile gives it 0. Reported, not counted against the kernels' model. */
            int host = pred[ph] == 0;
            printf("%-8s %-9s %12.4f %12.4f %+8.1f%%%s\n", deftsim_method_name(methods[mi]),
                   names[ph], meas[ph] * 1e3, pred[ph] * 1e3, 100 * e,
                   host ? "  host work, no kernel call: not modelled" : fabs(e) > 0.15 ? "  >15%" : "");
            if (!host) {
                (*nrows)++;
                if (fabs(e) > 0.15) (*nbad)++;
                if (fabs(e) > *worst) *worst = fabs(e);
            }
        }
        fflush(stdout);
    }
done:
    if (acc)
        for (uint32_t w = 0; w < P; w++) free(acc[w]);
    free(acc);
    deftsim_kctx_free(kc);
    deftsim_kctx_free(kp);
    deftsim_gen_free(g);
    deftsim_model_free(m);
    return st;
}

/* ---- The command ------------------------------------------------------------------------------ */

/* Fits every operation's cost model to the measured medians of the cases (med[i] for
 * cs->c[i]), for every candidate cache size (1 MiB to 1 GiB): the one with the smallest sum of
 * squared relative errors over all operations wins. Prints the fits. */
static deftsim_status fit_profile(const pcases *cs, const double *med, deftsim_profile *prof)
{
    deftsim_status st = DEFTSIM_OK;
    deftsim_profile_sample *samples = calloc(cs->n, sizeof *samples);
    if (!samples) return deftsim_error_nomem("bench");
    for (size_t i = 0; i < cs->n; i++)
        samples[i] = (deftsim_profile_sample){cs->c[i].call, med[i]};
    deftsim_profile_sample *sub = calloc(cs->n, sizeof *sub);
    if (!sub) {
        free(samples);
        return deftsim_error_nomem("bench");
    }
    double best = INFINITY, best_cache = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (int e = 20; e <= 30; e++) {
            double cache = pass ? best_cache : ldexp(1.0, e), sse = 0;
            for (size_t op = 0; op < DEFTSIM_KOP_COUNT && !st; op++) {
                size_t ns = 0;
                for (size_t i = 0; i < cs->n; i++)
                    if (cs->c[i].op == (deftsim_kop)op) sub[ns++] = samples[i];
                st = deftsim_profile_fit((deftsim_kop)op, sub, ns, cache, &prof->ops[op]);
                if (!st) sse += deftsim_profile_sse(&prof->ops[op], sub, ns, cache);
            }
            if (st) break;
            if (!pass && sse < best) {
                best = sse;
                best_cache = cache;
            }
            if (pass) break;
        }
        if (st) break;
    }
    free(sub);
    free(samples);
    if (st) return st;
    prof->cache_bytes = best_cache;
    printf("cache_bytes %.0f (the knee with the smallest squared relative error of all fits)\n",
           best_cache);
    printf("%-15s %11s %11s %11s %11s %11s %11s %5s %8s\n", "op", "intercept_s", "per_n_s",
           "per_k_s", "per_seg_s", "per_n_dram", "per_k_dram", "cases", "max_err");
    for (size_t op = 0; op < DEFTSIM_KOP_COUNT; op++) {
        const deftsim_profile_op *r = &prof->ops[op];
        printf("%-15s %11.3e %11.3e %11.3e %11.3e %11.3e %11.3e %5u %7.1f%%\n",
               deftsim_kop_name((deftsim_kop)op), r->coef[0], r->coef[1], r->coef[2], r->coef[3],
               r->coef[4], r->coef[5], r->cases, 100 * r->max_rel_err);
    }
    return DEFTSIM_OK;
}

int deftsim_bench_profile(const bench_profile_opts *o)
{
    deftsim_status st = DEFTSIM_OK;
    /* --backend cuda: the operations run on the device through the staged backend (host
     * buffers); each call is timed by the device time of the operation alone (CUDA events),
     * which is what the phases of [device] kind = cuda count. */
    const char *backend = strcmp(o->backend, "cuda") == 0 ? "cuda-staged" : o->backend;
    deftsim_kctx *ctx = NULL;
    deftsim_model *r18 = NULL;
    pcases cs = {0};
    double *med = NULL;
    pbufs b;
    deftsim_profile prof;
    memset(&prof, 0, sizeof prof);
    unsigned rounds = o->reps ? o->reps : 9;
    if ((st = alloc_bufs(&b, o->seed))) goto done;
    if (o->evict_mib) {
        b.evict_n = (size_t)o->evict_mib << 18;
        if (!(b.evict = malloc(b.evict_n * sizeof *b.evict))) {
            st = deftsim_error_nomem("bench: the eviction buffer");
            goto done;
        }
        for (size_t i = 0; i < b.evict_n; i++) b.evict[i] = (float)(i & 7);
    }
    b.staged = strcmp(backend, "cuda-staged") == 0;
    if ((st = deftsim_kctx_new(&ctx, backend, o->threads))) goto done;
    if ((st = deftsim_model_builtin("resnet18_cifar10", &r18))) goto done;
    if ((st = build_cases(ctx, r18, b.x, o->quick, &cs))) goto done;

    /* Where and how. */
    deftsim_cpu_model(prof.device, sizeof prof.device, "unknown CPU");
#ifdef DEFTSIM_HAVE_CUDA
    if (b.staged)
        snprintf(prof.device, sizeof prof.device, "%s",
                 deftsim_kcuda_device_name(deftsim_kcuda_staged_device(ctx)));
#endif
    snprintf(prof.backend, sizeof prof.backend, "%s", b.staged ? "cuda" : backend);
    {
        float sink;
        deftsim_kstats ks;
        deftsim_k_absmax(ctx, b.x, 1 << 20, &sink);
        deftsim_kctx_last(ctx, &ks);
        snprintf(prof.isa, sizeof prof.isa, "%s", ks.isa && ks.isa[0] ? ks.isa : "-");
    }
    prof.threads = o->threads;
    deftsim_utc_now(prof.created, sizeof prof.created);
    snprintf(prof.deftsim, sizeof prof.deftsim, "%s (commit %s)", DEFTSIM_VERSION,
             DEFTSIM_GIT_COMMIT);
    double load[1] = {0};
    if (getloadavg(load, 1) < 1) load[0] = -1;
    snprintf(prof.conditions, sizeof prof.conditions,
             "%zu cases; one untimed call of each, then %u rounds over all cases (round-robin), "
             "the median of each case's rounds, %s; before every call %u MiB read to evict the inputs from the caches%s; "
             "normal data, seed %llu; %ld CPUs online, load average %.2f at the start",
             cs.n, rounds, b.staged ? "device time of each call (CUDA events)" : "wall clock",
             o->evict_mib, o->evict_mib ? "" : " (none: inputs warm from the previous call)",
             (unsigned long long)o->seed, sysconf(_SC_NPROCESSORS_ONLN), load[0]);

    printf("# profile: %s; backend %s, %u thread(s), isa %s; %zu cases\n", prof.device,
           prof.backend, prof.threads, prof.isa, cs.n);
    med = calloc(cs.n, sizeof *med);
    if (!med || (st = measure_all(ctx, &cs, &b, rounds, med))) {
        if (!st) st = deftsim_error_nomem("bench");
        goto done;
    }
    if ((st = fit_profile(&cs, med, &prof))) goto done;
    if ((st = deftsim_profile_write(o->path, &prof))) goto done;
    printf("# wrote %s\n", o->path);
    fflush(stdout);
    if (o->no_validate) goto done;

    /* Validation 1: a fresh measurement of every case against the profile. */
    printf("\nvalidation: every case measured again, against the profile's prediction\n");
    printf("%-30s %10s %9s %6s %12s %12s %9s\n", "case", "n", "k", "segs", "measured_ms",
           "profile_ms", "rel_err");
    size_t bad = 0;
    double worst = 0;
    if ((st = measure_all(ctx, &cs, &b, rounds, med))) goto done;
    for (size_t i = 0; i < cs.n; i++) {
        double t = med[i];
        double p = deftsim_profile_predict(&prof, &cs.c[i].call), e = (p - t) / t;
        if (fabs(e) > 0.15) bad++;
        if (fabs(e) > worst) worst = fabs(e);
        printf("%-30s %10zu %9zu %6zu %12.4f %12.4f %+8.1f%%%s\n", cs.c[i].id, cs.c[i].call.n,
               cs.c[i].call.k, cs.c[i].call.segs, t * 1e3, p * 1e3, 100 * e,
               fabs(e) > 0.15 ? "  >15%" : "");
    }
    printf("cases within 15%%: %zu of %zu; largest |error| %.1f%%\n", cs.n - bad, cs.n, 100 * worst);
    fflush(stdout);
    deftsim_kctx_free(ctx);
    ctx = NULL;
    free_bufs(&b); /* the run below needs the memory */
    memset(&b, 0, sizeof b);

    /* Validation 2: the phases of a small run. */
    double pw = 0;
    size_t prow = 0, pbad = 0;
    if ((st = validate_phases(&prof, backend, o->threads, o->quick ? 2 : 4, o->quick ? 1 : 2, &pw,
                              &prow, &pbad)))
        goto done;
    printf("phases within 15%%: %zu of %zu (host-only phases excluded); largest |error| %.1f%%\n",
           prow - pbad, prow, 100 * pw);
done:
    free(med);
    for (size_t i = 0; i < cs.n; i++) {
        free(cs.c[i].segs);
        free(cs.c[i].ul);
    }
    free(cs.c);
    free_bufs(&b);
    deftsim_kctx_free(ctx);
    deftsim_model_free(r18);
    if (st) return deftsim_cli_fail(st);
    return 0;
}
