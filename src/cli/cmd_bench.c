/* cmd_bench.c - `deftsim bench <target>`: benchmarks. Targets: kernels, sim (bench_sim.c).
 *
 * `deftsim bench kernels` times the selection kernels against two yardsticks measured in the
 * same run on the same input: the memory floor (one streaming read of the input, the absmax
 * kernel) and a naive baseline (quickselect on a copy of the magnitudes). Kernel and floor
 * runs alternate, so that both see the same state of a machine whose memory bandwidth other
 * work shares; every result is verified against the baseline after timing.
 *
 * With --backend cuda the kernel reads and writes device memory: the input is copied to the
 * device once per case, the output is copied back for verification after timing, and both
 * the kernel and the floor are timed with CUDA events behind a spin kernel, so that they see
 * device time only (the floor there is the norm kernel over the whole input, one streaming
 * read that, unlike absmax, returns without waiting for the device). */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_profile.h"
#include "cli.h"
#include "deftsim_build_info.h"
#include "deftsim_deft.h"
#include "deftsim_kernels.h"
#include "deftsim_machine.h"
#include "deftsim_model.h"
#include "deftsim_rng.h"
#include "deftsim_sparsify.h"
#include "deftsim_util.h"
#ifdef DEFTSIM_HAVE_CUDA
#include "deftsim_kcuda.h"
#endif

/* ---- Data ----------------------------------------------------------------------------------
 * Normal, or Student t with 2 degrees of freedom (heavy tails: infinite variance), from
 * xoshiro256** seeded by splitmix64: the same bytes for the same seed. */

/* (0, 1]: never 0, so logarithms stay finite. */
static double rng_open(deftsim_xoshiro256 *r) { return deftsim_rng_open(deftsim_xoshiro256_next(r)); }

static void fill(float *x, size_t n, int heavy, uint64_t seed)
{
    deftsim_xoshiro256 r;
    deftsim_xoshiro256_seed(&r, seed);
    for (size_t i = 0; i < n; i += 2) {
        double rad = sqrt(-2.0 * log(rng_open(&r))), th = 6.283185307179586 * rng_open(&r);
        double z[2] = {rad * cos(th), rad * sin(th)};
        for (size_t j = 0; j < 2 && i + j < n; j++)
            x[i + j] = heavy ? (float)(z[j] / sqrt(-log(rng_open(&r)))) : (float)z[j];
    }
}

/* ---- The naive baseline ------------------------------------------------------------------ */

/* nth_element on floats, descending: a[r] becomes the (r+1)-th largest. */
static void quickselect_desc(float *a, size_t m, size_t r)
{
    size_t lo = 0, hi = m;
    while (hi - lo > 1) {
        /* Median of first, middle and last, moved to the front: Hoare's scheme then always
         * leaves both parts non-empty. */
        size_t mid = lo + (hi - lo) / 2, l = hi - 1;
        size_t med = a[lo] < a[mid] ? (a[mid] < a[l] ? mid : (a[lo] < a[l] ? l : lo))
                                    : (a[lo] < a[l] ? lo : (a[mid] < a[l] ? l : mid));
        float t0 = a[lo];
        a[lo] = a[med];
        a[med] = t0;
        float pv = a[lo];
        size_t i = lo, j = hi - 1;
        for (;;) {
            while (a[i] > pv) i++;
            while (a[j] < pv) j--;
            if (i >= j) break;
            float t = a[i];
            a[i++] = a[j];
            a[j--] = t;
        }
        /* a[lo..j] >= pv >= a[j+1..hi) */
        if (r <= j)
            hi = j + 1;
        else
            lo = j + 1;
    }
}

/* Top-k of x (absolute indices base + i) by copying |x| to tmp, quickselecting the k-th
 * magnitude v, then taking every |x| > v and the lowest-index ties. */
static void baseline_topk(const float *x, size_t n, size_t k, uint32_t base, float *tmp,
                          uint32_t *out)
{
    if (k == 0) return;
    for (size_t i = 0; i < n; i++) tmp[i] = fabsf(x[i]);
    quickselect_desc(tmp, n, k - 1);
    float v = tmp[k - 1];
    size_t above = 0;
    for (size_t i = 0; i < n; i++) above += fabsf(x[i]) > v;
    size_t o = 0, ties = k - above;
    for (size_t i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        if (a > v || (a == v && ties > 0)) {
            if (a == v) ties--;
            out[o++] = base + (uint32_t)i;
        }
    }
}

/* ---- Cases ---------------------------------------------------------------------------------- */

typedef enum { CASE_TOPK, CASE_SEGTOPK, CASE_ACCUMULATE } case_kind;

typedef struct {
    const char *id;
    case_kind kind;
    size_t n;       /* 0: ResNet-18's n from the model table */
    double density; /* top-k: k = deftsim_k_of_density(density, n); DEFT: total k */
    int heavy;
    uint32_t P;
    int in_quick;
    double target; /* largest acceptable ratio to the floor with one thread; 0: none */
} bench_case;

#define R18 0
static const bench_case cases[] = {
    {"topk-r18-d0.01-normal", CASE_TOPK, R18, 0.01, 0, 0, 1, 2.0},
    {"topk-r18-d0.001-normal", CASE_TOPK, R18, 0.001, 0, 0, 1, 2.0},
    {"topk-r18-d0.01-heavy", CASE_TOPK, R18, 0.01, 1, 0, 1, 2.0},
    {"topk-r18-d0.001-heavy", CASE_TOPK, R18, 0.001, 1, 0, 1, 2.0},
    {"topk-1e8-d0.01-normal", CASE_TOPK, 100000000, 0.01, 0, 0, 0, 1.5},
    {"topk-1e8-d0.001-normal", CASE_TOPK, 100000000, 0.001, 0, 0, 0, 0},
    {"topk-1e8-d0.01-heavy", CASE_TOPK, 100000000, 0.01, 1, 0, 0, 1.5},
    {"topk-1e8-d0.001-heavy", CASE_TOPK, 100000000, 0.001, 1, 0, 0, 0},
    {"segtopk-r18-P16-normal", CASE_SEGTOPK, R18, 0.01, 0, 16, 1, 2.0},
    {"segtopk-r18-P1024-normal", CASE_SEGTOPK, R18, 0.01, 0, 1024, 1, 2.0},
    {"segtopk-r18-P16-heavy", CASE_SEGTOPK, R18, 0.01, 1, 16, 1, 2.0},
    {"segtopk-r18-P1024-heavy", CASE_SEGTOPK, R18, 0.01, 1, 1024, 1, 2.0},
    /* DEFT's norms fused into the accumulate pass against the accumulate and a separate norm
     * pass (bench_accumulate). */
    {"accnorms-r18-P16-normal", CASE_ACCUMULATE, R18, 0.01, 0, 16, 1, 0},
};
#define NCASES (sizeof cases / sizeof cases[0])
/* Every exact top-k must beat the baseline by at least this factor. */
#define TARGET_SPEEDUP 10.0

typedef struct {
    int csv, quick;
    double budget;   /* seconds of kernel + floor timing per case */
    unsigned max_reps;
    unsigned threads[8];
    size_t nthreads;
    const char *cases; /* comma-separated substrings, or NULL for all */
    const char *backend;
    uint64_t seed;
    const char *profile; /* --profile FILE: measure, fit and validate a device profile */
    int no_validate;
    unsigned evict_mib;
    unsigned isa_flags[3]; /* --isa: the CPU context flags of each instruction set to run */
    const char *isa_names[3];
    size_t nisa;
} bench_opts;

/* Timings of one configuration. */
typedef struct {
    double med, min, floor_med, floor_min, base_med, base_min;
    double ratio; /* median over repetitions of kernel time / the adjacent floor time */
    unsigned reps, base_reps;
    deftsim_kstats ks;
    int verified;
} bench_result;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, size_t n)
{
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static double vmin(const double *v, size_t n)
{
    double m = v[0];
    for (size_t i = 1; i < n; i++) m = v[i] < m ? v[i] : m;
    return m;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* 1 if a[0..k) and b[0..k) hold the same set (both get sorted). */
static int same_set(uint32_t *a, uint32_t *b, size_t k)
{
    qsort(a, k, sizeof *a, cmp_u32);
    qsort(b, k, sizeof *b, cmp_u32);
    return memcmp(a, b, k * sizeof *a) == 0;
}

static int case_selected(const bench_case *c, const bench_opts *o)
{
    if (o->quick && !c->in_quick) return 0;
    if (!o->cases) return 1;
    const char *p = o->cases;
    while (*p) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        char pat[128];
        if (len >= sizeof pat) len = sizeof pat - 1;
        memcpy(pat, p, len);
        pat[len] = '\0';
        if (len && strstr(c->id, pat)) return 1;
        p += len + (e ? 1 : 0);
        if (!e) break;
    }
    return 0;
}

/* The work a case times: the kernel call, and the baseline on the same input. */
typedef struct {
    const bench_case *c;
    const float *x;
    size_t n, k;
    deftsim_kseg *segs;
    size_t nseg;
    uint32_t *out, *bout;
    float *tmp;
    void *scratch;
    size_t scratch_bytes;
    /* What the kernel reads and writes: x, out and scratch on the host; device copies with
     * --backend cuda (dev), where the floor is the norm kernel: whole is the one fragment,
     * norm its output and norm_scratch its scratch, timer the CUDA events. */
    const float *kx;
    uint32_t *kout;
    void *kscratch;
    int dev;
    deftsim_kseg whole;
    double *norm;
    void *norm_scratch;
    size_t norm_scratch_bytes;
#ifdef DEFTSIM_HAVE_CUDA
    deftsim_kcuda_timer *timer;
#endif
} bench_work;

static deftsim_status run_kernel(deftsim_kctx *ctx, bench_work *w)
{
    if (w->c->kind == CASE_TOPK)
        return deftsim_k_topk(ctx, w->kx, w->n, w->k, w->kout, w->kscratch, w->scratch_bytes);
    return deftsim_k_segtopk(ctx, w->kx, w->n, w->segs, w->nseg, w->kout, w->kscratch,
                             w->scratch_bytes);
}

static void run_baseline(bench_work *w)
{
    if (w->c->kind == CASE_TOPK) {
        baseline_topk(w->x, w->n, w->k, 0, w->tmp, w->bout);
        return;
    }
    size_t off = 0;
    for (size_t j = 0; j < w->nseg; j++) {
        const deftsim_kseg *s = &w->segs[j];
        baseline_topk(w->x + s->offset, s->len, s->k, (uint32_t)s->offset, w->tmp, w->bout + off);
        off += s->k;
    }
}

static int verify(bench_work *w)
{
    if (w->c->kind == CASE_TOPK) return same_set(w->out, w->bout, w->k);
    size_t off = 0;
    for (size_t j = 0; j < w->nseg; j++) {
        if (!same_set(w->out + off, w->bout + off, w->segs[j].k)) return 0;
        off += w->segs[j].k;
    }
    return 1;
}

/* One floor run and one kernel run: their seconds. */
static deftsim_status time_pair(deftsim_kctx *ctx, bench_work *w, double *tf, double *tk)
{
    deftsim_status st;
    if (!w->dev) {
        float sink;
        double t0 = deftsim_now();
        if ((st = deftsim_k_absmax(ctx, w->kx, w->n, &sink))) return st;
        double t1 = deftsim_now();
        if ((st = run_kernel(ctx, w))) return st;
        *tf = t1 - t0;
        *tk = deftsim_now() - t1;
        return DEFTSIM_OK;
    }
#ifdef DEFTSIM_HAVE_CUDA
    /* The spin holds the stream while the host queues both, so the events see back-to-back
     * device work and no host time. */
    if ((st = deftsim_kcuda_spin(ctx, 0.005)) || (st = deftsim_kcuda_timer_mark(w->timer, 0, ctx)) ||
        (st = deftsim_k_seg_norms(ctx, w->kx, w->n, &w->whole, 1, w->norm, w->norm_scratch,
                                  w->norm_scratch_bytes)) ||
        (st = deftsim_kcuda_timer_mark(w->timer, 1, ctx)) || (st = run_kernel(ctx, w)) ||
        (st = deftsim_kcuda_timer_mark(w->timer, 2, ctx)) ||
        (st = deftsim_kcuda_timer_seconds(w->timer, 0, 1, tf)) ||
        (st = deftsim_kcuda_timer_seconds(w->timer, 1, 2, tk)))
        return st;
    return DEFTSIM_OK;
#else
    (void)tf;
    (void)tk;
    return deftsim_error_set(DEFTSIM_E_INTERNAL, "bench: no CUDA in this build");
#endif
}

/* Times kernel and floor alternately, then the baseline, then verifies. */
static deftsim_status measure(deftsim_kctx *ctx, bench_work *w, const bench_opts *o,
                              bench_result *res, int want_baseline)
{
    enum { MAXREP = 200 };
    double tk[MAXREP], tf[MAXREP];
    deftsim_status st;
    /* Warm-up: page in the output and scratch, settle the clocks. */
    if ((st = time_pair(ctx, w, &tf[0], &tk[0]))) return st;
    unsigned reps = 0, maxr = o->max_reps < MAXREP ? o->max_reps : MAXREP;
    double start = deftsim_now();
    while (reps < maxr && (reps < 3 || deftsim_now() - start < o->budget)) {
        if ((st = time_pair(ctx, w, &tf[reps], &tk[reps]))) return st;
        reps++;
    }
    deftsim_kctx_last(ctx, &res->ks);
#ifdef DEFTSIM_HAVE_CUDA
    if (w->dev && (st = deftsim_kcuda_download(ctx, w->out, w->kout, w->k * sizeof *w->out)))
        return st;
#endif
    res->reps = reps;
    /* Each kernel run is paired with the floor run just before it: interference from other
     * work on the machine hits both, so the median of the pairs' ratios is steadier than the
     * ratio of medians. */
    double pr[MAXREP];
    for (unsigned i = 0; i < reps; i++) pr[i] = tk[i] / tf[i];
    res->ratio = median(pr, reps);
    res->min = vmin(tk, reps);
    res->med = median(tk, reps);
    res->floor_min = vmin(tf, reps);
    res->floor_med = median(tf, reps);
    if (want_baseline) {
        double tb[16];
        unsigned nb = 0, maxb = o->quick ? 1 : 3;
        double bstart = deftsim_now();
        while (nb < maxb && (nb < 1 || deftsim_now() - bstart < 2 * o->budget)) {
            double t0 = deftsim_now();
            run_baseline(w);
            tb[nb++] = deftsim_now() - t0;
        }
        res->base_reps = nb;
        res->base_min = vmin(tb, nb);
        res->base_med = median(tb, nb);
    }
    res->verified = verify(w);
    return DEFTSIM_OK;
}

static void print_header(const bench_opts *o, FILE *meta)
{
    char cpu[256];
    deftsim_cpu_model(cpu, sizeof cpu, "unknown CPU");
    fprintf(meta, "# machine: %s, %ld CPUs online; backend %s; deftsim %s (commit %s)\n", cpu,
            sysconf(_SC_NPROCESSORS_ONLN), o->backend, DEFTSIM_VERSION, DEFTSIM_GIT_COMMIT);
    if (o->csv) {
        printf("case,kernel,backend,isa,n,k,density,data,threads,fragments,median_s,min_s,"
               "floor_median_s,floor_min_s,ratio,ratio_min,baseline_median_s,baseline_min_s,"
               "speedup,candidates,fallbacks,reps,verified,target_ratio,target_met\n");
    } else {
        printf("%-26s %3s %6s %11s %9s %9s %9s %6s %6s %9s %8s %5s %-8s %s\n", "case", "thr", "isa",
               "k", "median_s", "min_s", "floor_s", "ratio", "r_min", "base_s", "speedup", "reps",
               "verified", "target");
    }
}

static void print_row(const bench_opts *o, const bench_case *c, const bench_work *w,
                      unsigned threads, const bench_result *r)
{
    double ratio = r->ratio, ratio_min = r->min / r->floor_min;
    double speedup = r->base_med / r->med;
    /* Targets hold for one thread: ratio to the floor, and the speedup over the baseline. */
    int has_target = threads == 1 && c->target > 0;
    int met = ratio <= c->target && speedup >= TARGET_SPEEDUP;
    char target[64] = "-";
    if (threads == 1) {
        if (has_target)
            snprintf(target, sizeof target, "ratio<=%.1f,speedup>=%.0f:%s", c->target,
                     TARGET_SPEEDUP, met ? "met" : "MISSED");
        else
            snprintf(target, sizeof target, "speedup>=%.0f:%s", TARGET_SPEEDUP,
                     speedup >= TARGET_SPEEDUP ? "met" : "MISSED");
    }
    const char *kernel = c->kind == CASE_TOPK ? "topk" : "segtopk";
    if (o->csv) {
        printf("%s,%s,%s,%s,%zu,%zu,%.6g,%s,%u,%zu,%.6e,%.6e,%.6e,%.6e,%.4f,%.4f,%.6e,%.6e,%.2f,"
               "%zu,%zu,%u,%s,%.2f,%s\n",
               c->id, kernel, r->ks.backend, r->ks.isa, w->n, w->k, (double)w->k / (double)w->n,
               c->heavy ? "heavy" : "normal", r->ks.threads, w->nseg ? w->nseg : 1, r->med, r->min,
               r->floor_med, r->floor_min, ratio, ratio_min, r->base_med, r->base_min, speedup,
               r->ks.candidates, r->ks.fallbacks, r->reps, r->verified ? "yes" : "NO",
               has_target ? c->target : 0.0,
               threads != 1 ? "-" : (has_target ? met : speedup >= TARGET_SPEEDUP) ? "yes" : "no");
    } else {
        printf("%-26s %3u %6s %11zu %9.5f %9.5f %9.5f %6.2f %6.2f %9.4f %8.1f %5u %-8s %s\n", c->id,
               r->ks.threads, r->ks.isa, w->k, r->med, r->min, r->floor_med, ratio, ratio_min,
               r->base_med, speedup, r->reps, r->verified ? "yes" : "NO", target);
    }
    fflush(stdout);
}

/* ResNet-18's DEFT fragments for P, with k_j allocated from this data's fragment norms
 * (computed with the norm kernel) for a total k = deftsim_k_of_density(density, n). */
static deftsim_status deft_segments(deftsim_kctx *ctx, const deftsim_model *m, const float *x,
                                    uint32_t P, double density, deftsim_kseg **segs_out,
                                    size_t *nseg_out, size_t *ksum)
{
    deftsim_fragment *fr = NULL;
    size_t nf = 0, sb = 0;
    double *norms = NULL;
    uint64_t *kj = NULL;
    size_t *order = NULL;
    deftsim_kseg *segs = NULL;
    void *scr = NULL;
    deftsim_status st = deftsim_deft_fragments(m, P, &fr, &nf);
    if (st) return st;
    norms = malloc(nf * sizeof *norms);
    kj = malloc(nf * sizeof *kj);
    order = malloc(nf * sizeof *order);
    segs = malloc(nf * sizeof *segs);
    if (!norms || !kj || !order || !segs) {
        st = deftsim_error_nomem("bench: %zu fragments", nf);
        goto done;
    }
    for (size_t j = 0; j < nf; j++) segs[j] = (deftsim_kseg){fr[j].offset, fr[j].size, 0};
    if ((st = deftsim_k_seg_norms_scratch(ctx, segs, nf, &sb))) goto done;
    if (sb && !(scr = malloc(sb))) {
        st = deftsim_error_nomem("bench");
        goto done;
    }
    if ((st = deftsim_k_seg_norms(ctx, x, m->numel, segs, nf, norms, scr, sb))) goto done;
    uint64_t k = deftsim_k_of_density(density, m->numel);
    *ksum = (size_t)deftsim_deft_allocate_k(fr, nf, norms, k, kj, order);
    for (size_t j = 0; j < nf; j++) segs[j].k = (size_t)kj[j];
    *segs_out = segs;
    *nseg_out = nf;
    segs = NULL;
done:
    free(fr);
    free(norms);
    free(kj);
    free(order);
    free(segs);
    free(scr);
    return st;
}

static void *alloc64(size_t bytes);

/* The accumulate case: acc += g with the fragments' sums of squares in one pass
 * (deftsim_k_accumulate), against the same accumulate without fragments followed by the
 * separate seg_norms pass, timed alternately on the same buffers (host backends only). The
 * ratio is the median over the pairs of fused / separate; < 1 means the fused pass is cheaper.
 * Verified: sqrt of the fused sums equals the separate norms bit for bit. In --csv the
 * "floor" columns hold the separate pair and the "baseline" columns the plain accumulate
 * alone. */
static deftsim_status bench_accumulate(deftsim_kctx *ctx, const deftsim_model *model,
                                       const bench_case *bc, const float *x, size_t n,
                                       const bench_opts *o, int *failures)
{
    enum { MAXREP = 200 };
    deftsim_status st;
    deftsim_kseg *segs = NULL;
    size_t nseg = 0, k = 0, sa = 0, sn = 0;
    float *acc = NULL, *g = NULL;
    double *sumsq = NULL, *norms = NULL;
    void *scr = NULL;
    if ((st = deft_segments(ctx, model, x, bc->P, bc->density, &segs, &nseg, &k))) return st;
    for (size_t j = 0; j < nseg; j++) segs[j].k = 0;
    /* deft_segments lists every fragment in order: they tile [0, n). */
    acc = alloc64(n * sizeof *acc);
    g = alloc64(n * sizeof *g);
    sumsq = malloc(nseg * sizeof *sumsq);
    norms = malloc(nseg * sizeof *norms);
    if ((st = deftsim_k_accumulate_scratch(ctx, segs, nseg, &sa)) ||
        (st = deftsim_k_seg_norms_scratch(ctx, segs, nseg, &sn)))
        goto done;
    scr = alloc64(sa > sn ? sa : sn);
    if (!acc || !g || !sumsq || !norms || !scr) {
        st = deftsim_error_nomem("bench");
        goto done;
    }
    memcpy(acc, x, n * sizeof *acc);
    fill(g, n, bc->heavy, o->seed * 7919u + 17u);
    for (size_t i = 0; i < n; i++) g[i] *= 1e-3f; /* keeps acc's scale over the repetitions */
    double tf[MAXREP], ts[MAXREP], ta[MAXREP], pr[MAXREP];
    unsigned reps = 0, maxr = o->max_reps < MAXREP ? o->max_reps : MAXREP;
    double start = 0;
    deftsim_kstats ks;
    for (int warm = 1; warm >= 0; warm--) {
        if (!warm) start = deftsim_now();
        while (warm ? reps < 1
                    : reps < maxr && (reps < 3 || deftsim_now() - start < o->budget)) {
            double t0 = deftsim_now();
            if ((st = deftsim_k_accumulate(ctx, acc, g, n, DEFTSIM_KACC_ADD, segs, nseg, sumsq,
                                           scr, sa)))
                goto done;
            double t1 = deftsim_now();
            if ((st = deftsim_k_accumulate(ctx, acc, g, n, DEFTSIM_KACC_ADD, NULL, 0, NULL, scr,
                                           sa)))
                goto done;
            double t2 = deftsim_now();
            if ((st = deftsim_k_seg_norms(ctx, acc, n, segs, nseg, norms, scr, sn))) goto done;
            double t3 = deftsim_now();
            if (warm) {
                reps++;
                continue;
            }
            tf[reps] = t1 - t0;
            ta[reps] = t2 - t1;
            ts[reps] = t3 - t1;
            pr[reps] = tf[reps] / ts[reps];
            reps++;
        }
        if (warm) reps = 0;
    }
    deftsim_kctx_last(ctx, &ks);
    /* Verification: one more fused pass; its sums against seg_norms on its result. */
    if ((st = deftsim_k_accumulate(ctx, acc, g, n, DEFTSIM_KACC_ADD, segs, nseg, sumsq, scr, sa)))
        goto done;
    ks.isa = ks.isa ? ks.isa : "";
    const char *isa = ks.isa;
    unsigned thr = ks.threads;
    if ((st = deftsim_k_seg_norms(ctx, acc, n, segs, nseg, norms, scr, sn))) goto done;
    int ok = 1;
    for (size_t j = 0; j < nseg && ok; j++) {
        double f = sqrt(sumsq[j]);
        ok = memcmp(&f, &norms[j], sizeof f) == 0;
    }
    *failures += !ok;
    double ratio = median(pr, reps), fmin = vmin(tf, reps), smin = vmin(ts, reps),
           amin = vmin(ta, reps);
    double fmed = median(tf, reps), smed = median(ts, reps), amed = median(ta, reps);
    if (o->csv) {
        printf("%s,accumulate+norms,%s,%s,%zu,0,0,%s,%u,%zu,%.6e,%.6e,%.6e,%.6e,%.4f,%.4f,%.6e,"
               "%.6e,%.2f,0,0,%u,%s,0,-\n",
               bc->id, ks.backend, isa, n, bc->heavy ? "heavy" : "normal", thr, nseg, fmed, fmin,
               smed, smin, ratio, fmin / smin, amed, amin, smed / fmed, reps, ok ? "yes" : "NO");
    } else {
        printf("%-26s %3u %6s   fused accumulate+norms %9.5f s (min %.5f); accumulate %9.5f s + "
               "separate norms %9.5f s = %9.5f s (min %.5f); fused/separate %.3f (min %.3f) "
               "%u reps, norms bit-identical: %s\n",
               bc->id, thr, isa, fmed, fmin, amed, smed - amed, smed, smin, ratio, fmin / smin,
               reps, ok ? "yes" : "NO");
    }
    fflush(stdout);
done:
    free(segs);
    free(acc);
    free(g);
    free(sumsq);
    free(norms);
    free(scr);
    return st;
}

static void *alloc64(size_t bytes)
{
    size_t b = (bytes + 63) / 64 * 64;
    return aligned_alloc(64, b ? b : 64);
}

static int bench_kernels(int argc, char **argv);

static void usage_kernels(FILE *out)
{
    fprintf(out,
            "usage: deftsim bench kernels [--csv] [--quick] [--threads N[,N...]] [--cases LIST]\n"
            "                             [--budget SECONDS] [--reps N] [--seed N] [--backend NAME]\n"
            "\n"
            "Times exact top-k and segmented top-k against the memory floor (one streaming read\n"
            "of the same input, measured alternately in the same run) and a naive baseline\n"
            "(quickselect on a copy of the magnitudes); verifies every result after timing.\n"
            "Cases: top-k at n = 11,173,962 (ResNet-18) and 1e8, densities 0.01 and 0.001,\n"
            "normal and heavy-tailed (Student t, 2 d.o.f.) data; segmented top-k over all of\n"
            "ResNet-18's DEFT fragments for P = 16 and 1024 (k = 0.01 n allocated by norms).\n"
            "Case accnorms: acc += g fused with the fragment norms (accumulate op) against the\n"
            "plain accumulate plus the separate norm pass, alternately, fused/separate as the\n"
            "ratio (host backends; in --csv the floor columns hold the separate pair and the\n"
            "baseline columns the plain accumulate).\n"
            "  --csv             one row per case and thread count (machine line on stderr)\n"
            "  --quick           ResNet-18 sizes only, one baseline run\n"
            "  --threads LIST    thread counts to run, e.g. 1,2 (default 1)\n"
            "  --cases LIST      only cases whose id contains one of these comma-separated words\n"
            "  --budget SECONDS  timing budget per case (default 2; --quick 0.5)\n"
            "  --reps N          at most N timed repetitions per case (default 25)\n"
            "  --seed N          data seed (default 1)\n"
            "  --backend NAME    kernel backend (default cpu; cuda: device buffers, CUDA events)\n"
            "  --isa LIST        cpu: run each case with each of these instruction sets, e.g.\n"
            "                    avx2,avx512 (default: the best the CPU has; generic, avx2,\n"
            "                    avx512), one row each, for side-by-side ratios\n"
            "  --profile FILE    instead: measure every kernel operation the sparsifiers use\n"
            "                    over a range of sizes, fit a cost model per operation, write\n"
            "                    the device profile FILE ([device] kind = profile) and validate\n"
            "                    it (fresh measurements, phases of a small run); --reps is\n"
            "                    then the rounds over all cases (default 9)\n"
            "  --no-validate     with --profile: write the profile and stop\n"
            "  --evict MIB       with --profile: read MIB MiB before every timed call so that\n"
            "                    inputs come from memory, as in a run (default 64; 0: warm)\n"
            "  -h, --help        this help\n"
            "Exit status 1 if any result fails verification.\n");
}

#ifdef DEFTSIM_HAVE_CUDA
/* --backend cuda: device copies of the case's input, output and scratch, and the floor's norm,
 * from a new pool (*pool: the previous one is freed). */
static deftsim_status dev_copies(deftsim_kctx *ctx, bench_work *w, const float *x, size_t n,
                                 deftsim_kcuda_timer *timer, deftsim_kcuda_pool **pool)
{
    deftsim_status st;
    void *p[5] = {0};
    size_t nb = 0;
    w->dev = 1;
    w->timer = timer;
    w->whole = (deftsim_kseg){0, n, 0};
    if ((st = deftsim_k_seg_norms_scratch(ctx, &w->whole, 1, &nb))) return st;
    w->norm_scratch_bytes = nb;
    size_t sz[5] = {n * sizeof *x, w->k * sizeof(uint32_t), w->scratch_bytes, nb, sizeof(double)};
    size_t total = 0;
    for (int i = 0; i < 5; i++) total += (sz[i] + 255) / 256 * 256 + 256;
    deftsim_kcuda_pool_free(*pool);
    *pool = NULL;
    if ((st = deftsim_kcuda_pool_new(total, pool))) return st;
    for (int i = 0; i < 5; i++)
        if ((st = deftsim_kcuda_alloc(*pool, sz[i], &p[i]))) return st;
    if ((st = deftsim_kcuda_upload(ctx, p[0], x, sz[0]))) return st;
    w->kx = p[0];
    w->kout = p[1];
    w->kscratch = p[2];
    w->norm_scratch = p[3];
    w->norm = p[4];
    return DEFTSIM_OK;
}
#endif

/* --isa LIST: the CPU context flags of each named instruction set, in order. */
static int parse_isa(const char *arg, bench_opts *o)
{
    static const struct {
        const char *name;
        unsigned flags;
    } isas[] = {{"generic", DEFTSIM_KFLAG_GENERIC}, {"avx2", DEFTSIM_KFLAG_NO_AVX512}, {"avx512", 0}};
    char buf[128];
    snprintf(buf, sizeof buf, "%s", arg);
    o->nisa = 0;
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        size_t q = 0;
        while (q < 3 && strcmp(tok, isas[q].name) != 0) q++;
        if (q == 3 || o->nisa == 3) return -1;
        o->isa_flags[o->nisa] = isas[q].flags;
        o->isa_names[o->nisa++] = isas[q].name;
    }
    return o->nisa == 0 ? -1 : 0;
}

/* The options of `bench kernels`, checked, into o; --profile runs here. Returns -1 to go on
 * with the timing cases, else the exit status. */
static int kernels_options(int argc, char **argv, bench_opts *o)
{
    static const struct option opts[] = {
        {"csv", no_argument, NULL, 'c'},          {"quick", no_argument, NULL, 'q'},
        {"threads", required_argument, NULL, 't'}, {"cases", required_argument, NULL, 'C'},
        {"budget", required_argument, NULL, 'b'}, {"reps", required_argument, NULL, 'r'},
        {"seed", required_argument, NULL, 's'},   {"backend", required_argument, NULL, 'B'},
        {"help", no_argument, NULL, 'h'},         {"profile", required_argument, NULL, 'p'},
        {"no-validate", no_argument, NULL, 'V'},  {"evict", required_argument, NULL, 'E'},
        {"isa", required_argument, NULL, 'I'},    {NULL, 0, NULL, 0},
    };
    int reps_given = 0, budget_given = 0;
    int c;
    uint64_t u;
    double d;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'c': o->csv = 1; break;
        case 'q': o->quick = 1; break;
        case 'C': o->cases = optarg; break;
        case 'B': o->backend = optarg; break;
        case 'p': o->profile = optarg; break;
        case 'V': o->no_validate = 1; break;
        case 'E':
            if (deftsim_parse_u64(optarg, &u) || u > 16384)
                return deftsim_cli_usage_error("bench kernels", "--evict must be 0..16384 (MiB)");
            o->evict_mib = (unsigned)u;
            break;
        case 'b':
            if (deftsim_parse_double(optarg, &d) || !(d >= 0) || d > 3600)
                return deftsim_cli_usage_error("bench kernels", "bad --budget '%s'", optarg);
            o->budget = d;
            budget_given = 1;
            break;
        case 'r':
            if (deftsim_parse_u64(optarg, &u) || u < 3 || u > 200)
                return deftsim_cli_usage_error("bench kernels", "--reps must be 3..200");
            o->max_reps = (unsigned)u;
            reps_given = 1;
            break;
        case 's':
            if (deftsim_parse_u64(optarg, &u))
                return deftsim_cli_usage_error("bench kernels", "bad --seed '%s'", optarg);
            o->seed = u;
            break;
        case 't': {
            o->nthreads = 0;
            char buf[128];
            snprintf(buf, sizeof buf, "%s", optarg);
            for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
                if (deftsim_parse_u64(tok, &u) || u < 1 || u > 256 || o->nthreads == 8)
                    return deftsim_cli_usage_error("bench kernels", "bad --threads '%s'", optarg);
                o->threads[o->nthreads++] = (unsigned)u;
            }
            if (o->nthreads == 0)
                return deftsim_cli_usage_error("bench kernels", "bad --threads '%s'", optarg);
            break;
        }
        case 'I':
            if (parse_isa(optarg, o))
                return deftsim_cli_usage_error("bench kernels", "bad --isa '%s' (a list of "
                                               "generic, avx2, avx512)", optarg);
            break;
        case 'h': usage_kernels(stdout); return 0;
        default: usage_kernels(stderr); return 2;
        }
    }
    if (optind < argc)
        return deftsim_cli_usage_error("bench kernels", "unexpected argument '%s'", argv[optind]);
    if (o->budget < 0) o->budget = o->quick ? 0.5 : 2.0;
    if (!deftsim_kernels_backend_available(o->backend))
        return deftsim_cli_usage_error("bench kernels", "backend '%s' is not available here: %s",
                                       o->backend, deftsim_kernels_backend_unavailable(o->backend));
    /* cuda-staged copies every call's arrays to the device and back: its wall times are
     * mostly copies. The cuda backend is the one to time. */
    if (strcmp(o->backend, "cuda-staged") == 0)
        return deftsim_cli_usage_error("bench kernels", "backend cuda-staged times copies with "
                                       "every call; use --backend cuda");
    if (o->profile) {
        if (o->nthreads != 1)
            return deftsim_cli_usage_error("bench kernels", "--profile measures one thread count "
                                           "(--threads N)");
        if (o->cases || o->csv || budget_given)
            return deftsim_cli_usage_error("bench kernels", "--profile runs its own cases in "
                                           "rounds (--reps); --cases, --csv and --budget do "
                                           "not apply");
        if (deftsim_cli_parse_only) return 0;
        bench_profile_opts po = {o->profile, o->backend, o->threads[0], reps_given ? o->max_reps : 0,
                                 o->seed, o->quick, o->no_validate, o->evict_mib};
        return deftsim_bench_profile(&po);
    }
    if (o->no_validate)
        return deftsim_cli_usage_error("bench kernels", "--no-validate goes with --profile");
    if (deftsim_cli_parse_only) return 0;
    return -1;
}

static int bench_kernels(int argc, char **argv)
{
    bench_opts o = {0, 0, -1.0, 25, {1}, 1, NULL, "cpu", 1, NULL, 0, 64, {0}, {NULL}, 1};
    int rc = kernels_options(argc, argv, &o);
    if (rc >= 0) return rc;
    const int dev = strcmp(o.backend, "cuda") == 0;
    (void)dev; /* used only with CUDA built in */

    deftsim_status st = DEFTSIM_OK;
    deftsim_model *model = NULL;
    deftsim_kctx *ctx = NULL;
    float *x = NULL, *tmp = NULL;
    uint32_t *out = NULL, *bout = NULL;
    void *scratch = NULL;
    deftsim_kseg *segs = NULL;
    size_t have_n = 0;
    int have_heavy = -1, failures = 0, ran = 0;
    /* --backend cuda: the device's copies (pool), and a host-buffer context for the fragment
     * norms that set up the segmented cases (untimed). */
    deftsim_kctx *setup = NULL;
#ifdef DEFTSIM_HAVE_CUDA
    deftsim_kcuda_pool *pool = NULL;
    deftsim_kcuda_timer *timer = NULL;
    if (dev && ((st = deftsim_kctx_new(&setup, "cuda-staged", 1)) ||
                (st = deftsim_kcuda_timer_new(3, &timer))))
        goto done;
#endif
    if ((st = deftsim_model_builtin("resnet18_cifar10", &model))) goto done;
    print_header(&o, o.csv ? stderr : stdout);

    for (size_t ci = 0; ci < NCASES; ci++) {
        const bench_case *bc = &cases[ci];
        if (!case_selected(bc, &o)) continue;
        ran++;
        size_t n = bc->n ? bc->n : (size_t)model->numel;
        if (n != have_n || bc->heavy != have_heavy) {
            free(x);
            free(tmp);
            x = alloc64(n * sizeof *x);
            tmp = alloc64(n * sizeof *tmp);
            if (!x || !tmp) {
                st = deftsim_error_nomem("bench: n = %zu", n);
                goto done;
            }
            fill(x, n, bc->heavy, o.seed * 1000003u + (uint64_t)bc->heavy);
            have_n = n;
            have_heavy = bc->heavy;
        }
        bench_result base = {0};
        int have_base = 0;
        for (size_t run = 0; run < o.nthreads * o.nisa; run++) {
            size_t ti = run / o.nisa, ii = run % o.nisa;
            deftsim_kctx_free(ctx);
            ctx = NULL;
            if ((st = deftsim_kctx_new(&ctx, o.backend, o.threads[ti]))) goto done;
            deftsim_kctx_set_flags(ctx, o.isa_flags[ii]);
            if (bc->kind == CASE_ACCUMULATE) {
                if (dev) { /* host buffers: the cuda backend's case is for tests/gpu */
                    fprintf(stderr, "%s: host buffers only, skipped with --backend cuda\n", bc->id);
                    continue;
                }
                if ((st = bench_accumulate(ctx, model, bc, x, n, &o, &failures))) goto done;
                continue;
            }
            bench_work w = {.c = bc, .x = x, .n = n, .tmp = tmp};
            free(segs);
            segs = NULL;
            if (bc->kind == CASE_TOPK) {
                w.k = (size_t)deftsim_k_of_density(bc->density, n);
                if ((st = deftsim_k_topk_scratch(ctx, n, w.k, &w.scratch_bytes))) goto done;
            } else {
                if ((st = deft_segments(setup ? setup : ctx, model, x, bc->P, bc->density, &segs,
                                        &w.nseg, &w.k)))
                    goto done;
                w.segs = segs;
                if ((st = deftsim_k_segtopk_scratch(ctx, segs, w.nseg, &w.scratch_bytes)))
                    goto done;
            }
            free(out);
            free(scratch);
            out = alloc64(w.k * sizeof *out);
            scratch = alloc64(w.scratch_bytes);
            /* The baseline's output is computed with the first thread count and kept: the
             * inputs, and so the fragments and k, do not depend on the thread count. */
            if (!have_base) {
                free(bout);
                bout = alloc64(w.k * sizeof *bout);
            }
            if (!out || !bout || !scratch) {
                st = deftsim_error_nomem("bench");
                goto done;
            }
            w.out = out;
            w.bout = bout;
            w.scratch = scratch;
            w.kx = x;
            w.kout = out;
            w.kscratch = scratch;
#ifdef DEFTSIM_HAVE_CUDA
            if (dev && (st = dev_copies(ctx, &w, x, n, timer, &pool))) goto done;
#endif
            bench_result r = {0};
            /* The baseline is single-threaded: measured once per case. */
            if ((st = measure(ctx, &w, &o, &r, !have_base))) goto done;
            if (o.isa_names[ii] && (!r.ks.isa || strcmp(r.ks.isa, o.isa_names[ii]) != 0)) {
                st = deftsim_error_set(DEFTSIM_E_USAGE, "bench: --isa %s: this machine or "
                                       "backend runs %s", o.isa_names[ii],
                                       r.ks.isa ? r.ks.isa : "no instruction set");
                goto done;
            }
            if (!have_base) {
                base = r;
                have_base = 1;
            } else {
                r.base_med = base.base_med;
                r.base_min = base.base_min;
                r.base_reps = base.base_reps;
            }
            failures += !r.verified;
            print_row(&o, bc, &w, o.threads[ti], &r);
        }
    }
    if (!ran) {
        st = deftsim_error_set(DEFTSIM_E_USAGE, "bench: no case matches '%s'",
                               o.cases ? o.cases : "");
        goto done;
    }
done:
    deftsim_kctx_free(ctx);
    deftsim_kctx_free(setup);
#ifdef DEFTSIM_HAVE_CUDA
    deftsim_kcuda_pool_free(pool);
    deftsim_kcuda_timer_free(timer);
#endif
    deftsim_model_free(model);
    free(x);
    free(tmp);
    free(out);
    free(bout);
    free(scratch);
    free(segs);
    if (st) return deftsim_cli_fail(st);
    if (failures) {
        fprintf(stderr, "deftsim bench: %d result(s) failed verification\n", failures);
        return 1;
    }
    return 0;
}

/* ---- Targets ---------------------------------------------------------------------------------
 * One entry per benchmark target; `deftsim bench sim` becomes one more line. */

typedef struct {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *summary;
} bench_target;

int deftsim_bench_sim(int argc, char **argv); /* bench_sim.c */

static const bench_target targets[] = {
    {"kernels", bench_kernels, "selection kernels against the memory floor and a baseline"},
    {"sim", deftsim_bench_sim, "the network simulation's wall time and memory against P"},
};
#define NTARGETS (sizeof targets / sizeof targets[0])

static void usage(FILE *out)
{
    fprintf(out, "usage: deftsim bench <target> [<args>]\n\nTargets:\n");
    for (size_t i = 0; i < NTARGETS; i++)
        fprintf(out, "  %-10s %s\n", targets[i].name, targets[i].summary);
    fprintf(out, "\nRun 'deftsim bench <target> --help' for a target's options.\n");
}

int deftsim_cmd_bench(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < NTARGETS; i++)
        if (strcmp(argv[1], targets[i].name) == 0) {
            optind = 0; /* glibc's getopt starts afresh (main's scan stopped at "bench") */
            return targets[i].fn(argc - 1, argv + 1);
        }
    return deftsim_cli_usage_error("bench", "unknown target '%s'", argv[1]);
}
