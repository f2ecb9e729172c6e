/* test_gpu.c - every operation of the "cuda" backend against the "cpu" backend on fresh random
 * inputs (after ggml's test-backend-ops): top-k results compared as sets, ties and NaN cases
 * included, every path forced in turn, guard bands around every device output and scratch;
 * norms, samples, gathers and sums compared bit for bit; errors checked to change nothing;
 * the device generator compared with the host's bytes.
 *
 * Plain C without Criterion (a GPU machine has none). Prints the seed first; DEFTSIM_TEST_SEED
 * replays one. Exit 0: all passed; 1: a check failed; 77: no usable CUDA device (skipped). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deftsim_gen_cuda.h"
#include "deftsim_kcuda.h"
#include "deftsim_kernels.h"
#include "deftsim_model.h"
#include "gpu_util.h"
#ifdef GPU_HAVE_GEN
#include "deftsim_gen.h"
#endif

typedef struct {
    deftsim_kctx *gpu, *cpu;
    deftsim_kcuda_pool *pool;
    uint64_t seed;
    size_t checks, failures;
} tctx;

static void report(tctx *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void report(tctx *t, const char *fmt, ...)
{
    t->failures++;
    if (t->failures > 40) return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "FAIL: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
}

/* Counts a check; on failure reports the label and the last recorded error. */
#define CHECK(t, cond, ...)                                                                        \
    do {                                                                                           \
        (t)->checks++;                                                                             \
        if (!(cond)) report((t), __VA_ARGS__);                                                     \
    } while (0)

static const unsigned path_flags[] = {0, DEFTSIM_KFLAG_FORCE_FALLBACK, DEFTSIM_KFLAG_FORCE_SAMPLING};
static const char *const path_names[] = {"default", "forced fallback", "forced sampling"};
#define NPATHS 3

static void *xmalloc(size_t b)
{
    void *p = malloc(b ? b : 1);
    if (!p) {
        fprintf(stderr, "out of memory (%zu bytes)\n", b);
        exit(1);
    }
    return p;
}

/* Bit-identical floats, except that any NaN matches any NaN: IEEE leaves the payload of a
 * computed NaN open, and GPUs return a canonical one where x86 propagates the operand's. */
static int same_floats(const float *a, const float *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof *a) != 0 && !(isnan(a[i]) && isnan(b[i]))) return 0;
    return 1;
}

static int same_doubles(const double *a, const double *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof *a) != 0 && !(isnan(a[i]) && isnan(b[i]))) return 0;
    return 1;
}

/* x on the device (guarded). */
static int upload_x(tctx *t, const float *x, size_t n, gu_dbuf *d)
{
    if (gu_dalloc(t->gpu, t->pool, d, n * sizeof(float))) return -1;
    if (deftsim_kcuda_upload(t->gpu, d->p, x, n * sizeof(float))) {
        fprintf(stderr, "upload: %s\n", deftsim_error_message());
        return -1;
    }
    return 0;
}

/* ---- top-k ------------------------------------------------------------------------------ */

static void topk_case(tctx *t, const float *x, const gu_dbuf *xd, size_t n, size_t k, unsigned path,
                      const char *what)
{
    char label[200];
    snprintf(label, sizeof label, "topk %s n=%zu k=%zu [%s]", what, n, k, path_names[path]);
    size_t sb = 0, gsb = 0;
    deftsim_kctx_set_flags(t->gpu, path_flags[path]);
    if (deftsim_k_topk_scratch(t->cpu, n, k, &sb) || deftsim_k_topk_scratch(t->gpu, n, k, &gsb)) {
        report(t, "%s: scratch query: %s", label, deftsim_error_message());
        return;
    }
    void *cs = xmalloc(sb);
    uint32_t *ref = xmalloc(k * sizeof *ref), *got = xmalloc(k * sizeof *got);
    gu_dbuf out, scr;
    if (deftsim_k_topk(t->cpu, x, n, k, ref, cs, sb)) {
        report(t, "%s: cpu: %s", label, deftsim_error_message());
        goto done0;
    }
    if (gu_dalloc(t->gpu, t->pool, &out, k * sizeof(uint32_t))) goto done0;
    if (gu_dalloc(t->gpu, t->pool, &scr, gsb)) goto done1;
    deftsim_status st = deftsim_k_topk(t->gpu, xd->p, n, k, out.p, scr.p, gsb);
    CHECK(t, st == DEFTSIM_OK, "%s: %s", label, deftsim_error_message());
    if (st) goto done2;
    deftsim_kstats ks;
    deftsim_kctx_last(t->gpu, &ks);
    if (deftsim_kcuda_download(t->gpu, got, out.p, k * sizeof *got)) {
        report(t, "%s: download: %s", label, deftsim_error_message());
        goto done2;
    }
    CHECK(t, gu_same_set(got, ref, k), "%s: wrong top-k set", label);
    CHECK(t, gu_dguard_ok(t->gpu, &out), "%s: output guard band overwritten", label);
    CHECK(t, gu_dguard_ok(t->gpu, &scr), "%s: scratch guard band overwritten", label);
    CHECK(t, ks.op == DEFTSIM_KOP_TOPK && ks.threads == 1, "%s: record", label);
    if (k > 0 && k < n) {
        size_t nan = gu_count_nan(x, n);
        CHECK(t, ks.nan_count == nan, "%s: NaN count %zu, want %zu", label, ks.nan_count, nan);
        if (path_flags[path] & DEFTSIM_KFLAG_FORCE_FALLBACK)
            CHECK(t, ks.fallbacks == 1, "%s: forced fallback not recorded (%zu)", label, ks.fallbacks);
    }
done2:
    gu_dfree(t->pool, &scr);
done1:
    gu_dfree(t->pool, &out);
done0:
    free(cs);
    free(ref);
    free(got);
    deftsim_kctx_set_flags(t->gpu, 0);
}

static void test_topk(tctx *t)
{
    size_t sizes[64], ns = 0;
    for (size_t n = 1; n <= 4; n++) sizes[ns++] = n;
    static const int exps[] = {5, 7, 9, 11, 12, 13, 14, 15, 17, 19};
    for (size_t i = 0; i < sizeof exps / sizeof exps[0]; i++) {
        sizes[ns++] = (size_t)1 << exps[i];
        sizes[ns++] = ((size_t)1 << exps[i]) + 11;
    }
    sizes[ns++] = ((size_t)1 << 20) + 11; /* the grid-wide path */
    for (size_t si = 0; si < ns; si++) {
        size_t n = sizes[si];
        float *x = xmalloc(n * sizeof *x);
        int big = n > ((size_t)1 << 18);
        for (int m = 0; m < GU_MODE_COUNT; m++) {
            if (big && m != GU_NORMAL && m != GU_TIES && m != GU_NONFINITE) continue;
            gu_fill(x, n, (gu_mode)m, t->seed + 31 * n + (uint64_t)m);
            gu_dbuf xd;
            if (upload_x(t, x, n, &xd)) {
                t->failures++;
                continue;
            }
            size_t ks[12], nk = 0;
            if (n <= 4) {
                for (size_t k = 0; k <= n; k++) ks[nk++] = k;
            } else {
                size_t cand[] = {0, 1, 2, 3, n / 1000, n / 100, n / 10, n / 2, n - 1, n};
                for (size_t c = 0; c < sizeof cand / sizeof cand[0]; c++) {
                    int dup = 0;
                    for (size_t j = 0; j < nk; j++) dup |= ks[j] == cand[c];
                    if (!dup) ks[nk++] = cand[c];
                }
            }
            for (size_t p = 0; p < NPATHS; p++)
                for (size_t j = 0; j < nk; j++) topk_case(t, x, &xd, n, ks[j], (unsigned)p, gu_mode_name((gu_mode)m));
            gu_dfree(t->pool, &xd);
        }
        free(x);
    }
    /* The policy example of tests/kernels: -Inf(2), then -3(4) and 3(7) tied (4 first), 1, 0,
     * then the NaNs in index order. */
    float x[] = {NAN, 1.0f, -INFINITY, NAN, -3.0f, 0.0f, NAN, 3.0f};
    gu_dbuf xd;
    if (!upload_x(t, x, 8, &xd)) {
        for (size_t p = 0; p < NPATHS; p++)
            for (size_t k = 0; k <= 8; k++) topk_case(t, x, &xd, 8, k, (unsigned)p, "nan policy");
        gu_dfree(t->pool, &xd);
    }
}

/* ---- Segmented top-k ----------------------------------------------------------------------- */

static void segtopk_case(tctx *t, const float *x, const gu_dbuf *xd, size_t n,
                         const deftsim_kseg *segs, size_t nseg, unsigned path, const char *what)
{
    char label[200];
    snprintf(label, sizeof label, "segtopk %s n=%zu fragments=%zu [%s]", what, n, nseg,
             path_names[path]);
    deftsim_kctx_set_flags(t->gpu, path_flags[path]);
    size_t ksum = 0, sb = 0, gsb = 0, nan = 0;
    for (size_t j = 0; j < nseg; j++) ksum += segs[j].k;
    if (deftsim_k_segtopk_scratch(t->cpu, segs, nseg, &sb) ||
        deftsim_k_segtopk_scratch(t->gpu, segs, nseg, &gsb)) {
        report(t, "%s: scratch query: %s", label, deftsim_error_message());
        deftsim_kctx_set_flags(t->gpu, 0);
        return;
    }
    void *cs = xmalloc(sb);
    uint32_t *ref = xmalloc(ksum * sizeof *ref), *got = xmalloc(ksum * sizeof *got);
    gu_dbuf out, scr;
    if (deftsim_k_segtopk(t->cpu, x, n, segs, nseg, ref, cs, sb)) {
        report(t, "%s: cpu: %s", label, deftsim_error_message());
        goto done0;
    }
    if (gu_dalloc(t->gpu, t->pool, &out, ksum * sizeof(uint32_t))) goto done0;
    if (gu_dalloc(t->gpu, t->pool, &scr, gsb)) goto done1;
    deftsim_status st = deftsim_k_segtopk(t->gpu, xd->p, n, segs, nseg, out.p, scr.p, gsb);
    CHECK(t, st == DEFTSIM_OK, "%s: %s", label, deftsim_error_message());
    if (st) goto done2;
    deftsim_kstats ks;
    deftsim_kctx_last(t->gpu, &ks);
    if (deftsim_kcuda_download(t->gpu, got, out.p, ksum * sizeof *got)) {
        report(t, "%s: download: %s", label, deftsim_error_message());
        goto done2;
    }
    size_t off = 0, bad = 0, forced = 0;
    for (size_t j = 0; j < nseg; j++) {
        if (!gu_same_set(got + off, ref + off, segs[j].k)) {
            if (!bad)
                report(t, "%s: fragment %zu (offset %zu, len %zu, k %zu): wrong set", label, j,
                       segs[j].offset, segs[j].len, segs[j].k);
            bad++;
        }
        if (segs[j].k > 0 && segs[j].k < segs[j].len) {
            nan += gu_count_nan(x + segs[j].offset, segs[j].len);
            forced++;
        }
        off += segs[j].k;
    }
    t->checks++;
    CHECK(t, gu_dguard_ok(t->gpu, &out), "%s: output guard band overwritten", label);
    CHECK(t, gu_dguard_ok(t->gpu, &scr), "%s: scratch guard band overwritten", label);
    CHECK(t, ks.nan_count == nan, "%s: NaN count %zu, want %zu", label, ks.nan_count, nan);
    if (path_flags[path] & DEFTSIM_KFLAG_FORCE_FALLBACK)
        CHECK(t, ks.fallbacks == forced, "%s: %zu fallbacks recorded, want %zu", label,
              ks.fallbacks, forced);
done2:
    gu_dfree(t->pool, &scr);
done1:
    gu_dfree(t->pool, &out);
done0:
    free(cs);
    free(ref);
    free(got);
    deftsim_kctx_set_flags(t->gpu, 0);
}

/* A fragment of every class, any k, anywhere (overlaps allowed), in random order. */
static size_t random_segments(gu_rng *r, size_t n, deftsim_kseg *segs, size_t max)
{
    size_t nseg = 20 + gu_below(r, max - 20);
    for (size_t j = 0; j < nseg; j++) {
        size_t c = gu_below(r, 100), len;
        if (c < 30) len = gu_below(r, 65);                       /* tiny, empty included */
        else if (c < 65) len = 65 + gu_below(r, 4096 - 64);      /* a warp each */
        else if (c < 80) len = 4097 + gu_below(r, 16384 - 4096); /* a block each */
        else if (c < 97) len = 16385 + gu_below(r, 300000);      /* sampled */
        else len = ((size_t)1 << 20) + gu_below(r, 200000);      /* grid-wide */
        if (len > n) len = n;
        size_t kk = gu_below(r, 6), k;
        switch (kk) {
        case 0: k = 0; break;
        case 1: k = len; break;
        case 2: k = len ? 1 : 0; break;
        case 3: k = len / 100 ? len / 100 : (len ? 1 : 0); break;
        default: k = gu_below(r, len + 1); break;
        }
        segs[j].offset = gu_below(r, n - len + 1);
        segs[j].len = len;
        segs[j].k = k;
    }
    return nseg;
}

static void test_segtopk(tctx *t)
{
    gu_rng r;
    gu_rng_init(&r, t->seed ^ 0x5e9);
    size_t n = 3u << 20;
    float *x = xmalloc(n * sizeof *x);
    deftsim_kseg *segs = xmalloc(200 * sizeof *segs);
    static const int modes[] = {GU_NORMAL, GU_HEAVY, GU_TIES, GU_NONFINITE, GU_ASCENDING};
    for (size_t mi = 0; mi < sizeof modes / sizeof modes[0]; mi++) {
        gu_fill(x, n, (gu_mode)modes[mi], t->seed + 7000 + mi);
        gu_dbuf xd;
        if (upload_x(t, x, n, &xd)) {
            t->failures++;
            continue;
        }
        for (int rep = 0; rep < 2; rep++) {
            size_t nseg = random_segments(&r, n, segs, 200);
            for (size_t p = 0; p < NPATHS; p++)
                segtopk_case(t, x, &xd, n, segs, nseg, (unsigned)p, gu_mode_name((gu_mode)modes[mi]));
        }
        gu_dfree(t->pool, &xd);
    }
    free(x);
    free(segs);
    /* DEFT's own fragments of ResNet-18 (all in one call), normal data and ties. */
    size_t rn = gu_model_numel("resnet18_cifar10");
    if (!rn) {
        report(t, "model resnet18_cifar10: %s", deftsim_error_message());
        return;
    }
    x = xmalloc(rn * sizeof *x);
    for (int m = 0; m < 2; m++) {
        gu_fill(x, rn, m ? GU_TIES : GU_NORMAL, t->seed + 8000 + (uint64_t)m);
        gu_dbuf xd;
        if (upload_x(t, x, rn, &xd)) {
            t->failures++;
            continue;
        }
        static const uint32_t Ps[] = {16, 1024};
        for (size_t pi = 0; pi < 2; pi++) {
            deftsim_kseg *ds;
            size_t nd;
            if (gu_deft_segments("resnet18_cifar10", Ps[pi], 0.01, x, rn, &ds, &nd)) {
                t->failures++;
                continue;
            }
            char what[64];
            snprintf(what, sizeof what, "resnet18 DEFT P=%u %s", Ps[pi], m ? "ties" : "normal");
            for (size_t p = 0; p < NPATHS; p++) segtopk_case(t, x, &xd, rn, ds, nd, (unsigned)p, what);
            free(ds);
        }
        gu_dfree(t->pool, &xd);
    }
    free(x);
}

/* ---- Norms, filter, samples ------------------------------------------------------------------ */

static void test_norms(tctx *t)
{
    gu_rng r;
    gu_rng_init(&r, t->seed ^ 0x40f);
    size_t n = (1u << 20) + 11;
    float *x = xmalloc(n * sizeof *x);
    deftsim_kseg segs[120];
    static const int modes[] = {GU_NORMAL, GU_HEAVY, GU_NONFINITE, GU_ALL_ZERO};
    for (size_t mi = 0; mi < 4; mi++) {
        gu_fill(x, n, (gu_mode)modes[mi], t->seed + 9000 + mi);
        gu_dbuf xd, nd, scr;
        if (upload_x(t, x, n, &xd)) {
            t->failures++;
            continue;
        }
        size_t nseg = 1 + gu_below(&r, 119);
        for (size_t j = 0; j < nseg; j++) {
            size_t len = gu_below(&r, 4) == 0 ? gu_below(&r, 40) : gu_below(&r, 300000);
            segs[j].len = len;
            segs[j].offset = gu_below(&r, n - len + 1);
            segs[j].k = 0;
        }
        segs[0].offset = 0;
        segs[0].len = n; /* one fragment of everything */
        size_t sb = 0, gsb = 0;
        double ref[120], got[120];
        (void)deftsim_k_seg_norms_scratch(t->cpu, segs, nseg, &sb);
        (void)deftsim_k_seg_norms_scratch(t->gpu, segs, nseg, &gsb);
        void *cs = xmalloc(sb);
        if (deftsim_k_seg_norms(t->cpu, x, n, segs, nseg, ref, cs, sb)) report(t, "norms cpu: %s", deftsim_error_message());
        if (!gu_dalloc(t->gpu, t->pool, &nd, nseg * sizeof(double)) &&
            !gu_dalloc(t->gpu, t->pool, &scr, gsb)) {
            deftsim_status st = deftsim_k_seg_norms(t->gpu, xd.p, n, segs, nseg, nd.p, scr.p, gsb);
            CHECK(t, st == DEFTSIM_OK, "seg_norms %s: %s", gu_mode_name((gu_mode)modes[mi]),
                  deftsim_error_message());
            deftsim_kstats ks;
            deftsim_kctx_last(t->gpu, &ks);
            size_t nan = 0;
            for (size_t j = 0; j < nseg; j++) nan += gu_count_nan(x + segs[j].offset, segs[j].len);
            if (!st && !deftsim_kcuda_download(t->gpu, got, nd.p, nseg * sizeof(double))) {
                CHECK(t, same_doubles(got, ref, nseg),
                      "seg_norms %s: not bit-identical to the cpu backend",
                      gu_mode_name((gu_mode)modes[mi]));
                CHECK(t, ks.nan_count == nan, "seg_norms: NaN count %zu, want %zu", ks.nan_count, nan);
            }
            CHECK(t, gu_dguard_ok(t->gpu, &nd) && gu_dguard_ok(t->gpu, &scr), "seg_norms: guards");
            gu_dfree(t->pool, &scr);
        }
        gu_dfree(t->pool, &nd);
        free(cs);
        gu_dfree(t->pool, &xd);
    }
    free(x);
}

/* The fused accumulate: acc and the fragments' sums of squares equal the cpu backend's bit for
 * bit (ascending fragments with gaps; add and copy). Written without a GPU at hand: its first
 * run on a device is this test's. */
static void test_accumulate(tctx *t)
{
    gu_rng r;
    gu_rng_init(&r, t->seed ^ 0xacc);
    size_t n = (1u << 20) + 11;
    float *x = xmalloc(n * sizeof *x), *g = xmalloc(n * sizeof *g), *ac = xmalloc(n * sizeof *ac),
          *ag = xmalloc(n * sizeof *ag);
    deftsim_kseg segs[120];
    size_t nseg = 0, pos = 0;
    while (nseg < 120 && pos < n) {
        pos += gu_below(&r, 3) == 0 ? gu_below(&r, 5000) : 0;
        if (pos >= n) break;
        size_t len = gu_below(&r, 4) == 0 ? gu_below(&r, 40) : gu_below(&r, 30000);
        if (len > n - pos) len = n - pos;
        segs[nseg++] = (deftsim_kseg){pos, len, 0};
        pos += len;
    }
    for (int mode = DEFTSIM_KACC_ADD; mode <= DEFTSIM_KACC_COPY; mode++) {
        gu_fill(x, n, GU_HEAVY, t->seed + 9100 + (uint64_t)mode);
        gu_fill(g, n, GU_NONFINITE, t->seed + 9200 + (uint64_t)mode);
        memcpy(ac, x, n * sizeof *ac);
        size_t sb = 0, gsb = 0;
        double ref[120], got[120];
        (void)deftsim_k_accumulate_scratch(t->cpu, segs, nseg, &sb);
        (void)deftsim_k_accumulate_scratch(t->gpu, segs, nseg, &gsb);
        void *cs = xmalloc(sb + 1);
        if (deftsim_k_accumulate(t->cpu, ac, g, n, mode, segs, nseg, ref, cs, sb))
            report(t, "accumulate cpu: %s", deftsim_error_message());
        deftsim_kstats kc;
        deftsim_kctx_last(t->cpu, &kc);
        gu_dbuf xd, gd, sd, scr;
        memset(&gd, 0, sizeof gd);
        memset(&sd, 0, sizeof sd);
        if (upload_x(t, x, n, &xd)) {
            t->failures++;
            free(cs);
            continue;
        }
        if (!upload_x(t, g, n, &gd) && !gu_dalloc(t->gpu, t->pool, &sd, nseg * sizeof(double)) &&
            !gu_dalloc(t->gpu, t->pool, &scr, gsb)) {
            deftsim_status st = deftsim_k_accumulate(t->gpu, xd.p, gd.p, n, mode, segs, nseg, sd.p,
                                                     scr.p, gsb);
            CHECK(t, st == DEFTSIM_OK, "accumulate mode %d: %s", mode, deftsim_error_message());
            deftsim_kstats ks;
            deftsim_kctx_last(t->gpu, &ks);
            if (!st && !deftsim_kcuda_download(t->gpu, got, sd.p, nseg * sizeof(double)) &&
                !deftsim_kcuda_download(t->gpu, ag, xd.p, n * sizeof(float))) {
                CHECK(t, memcmp(ag, ac, n * sizeof *ac) == 0,
                      "accumulate mode %d: values not bit-identical to the cpu backend", mode);
                CHECK(t, same_doubles(got, ref, nseg),
                      "accumulate mode %d: sums not bit-identical to the cpu backend", mode);
                CHECK(t, ks.nan_count == kc.nan_count, "accumulate: NaN count %zu, cpu %zu",
                      ks.nan_count, kc.nan_count);
            }
            CHECK(t, gu_dguard_ok(t->gpu, &sd) && gu_dguard_ok(t->gpu, &scr) &&
                         gu_dguard_ok(t->gpu, &xd),
                  "accumulate: guards");
            gu_dfree(t->pool, &scr);
        }
        gu_dfree(t->pool, &sd);
        gu_dfree(t->pool, &gd);
        gu_dfree(t->pool, &xd);
        free(cs);
    }
    free(x);
    free(g);
    free(ac);
    free(ag);
}

static int passes(float v, float th) { return !isnan(v) && (th <= 0.0f || fabsf(v) >= th); }

static void test_filter(tctx *t)
{
    static const size_t sizes[] = {1, 37, 4096, 100003, (1u << 21) + 5};
    static const int modes[] = {GU_NORMAL, GU_TIES, GU_NONFINITE};
    for (size_t si = 0; si < 5; si++)
        for (size_t mi = 0; mi < 3; mi++) {
            size_t n = sizes[si];
            float *x = xmalloc(n * sizeof *x);
            gu_fill(x, n, (gu_mode)modes[mi], t->seed + 11000 + 13 * si + mi);
            gu_dbuf xd;
            if (upload_x(t, x, n, &xd)) {
                t->failures++;
                free(x);
                continue;
            }
            const float ths[] = {-1.0f, 0.0f, 0.5f, 1.0f, 2.5f, 3.0f, 1e-30f, INFINITY};
            for (size_t ti = 0; ti < sizeof ths / sizeof ths[0]; ti++) {
                float th = ths[ti];
                size_t want = 0, c1 = 0, c2 = 0;
                for (size_t i = 0; i < n; i++) want += passes(x[i], th);
                deftsim_status st = deftsim_k_count_ge(t->gpu, xd.p, n, th, &c1);
                CHECK(t, st == DEFTSIM_OK && c1 == want, "count_ge n=%zu t=%g: %zu, want %zu (%s)", n,
                      (double)th, c1, want, deftsim_error_message());
                deftsim_kstats ks;
                deftsim_kctx_last(t->gpu, &ks);
                CHECK(t, ks.nan_count == gu_count_nan(x, n), "count_ge: NaN count");
                size_t caps[] = {0, want / 2, want, want + 7};
                for (size_t ci = 0; ci < 4; ci++) {
                    size_t cap = caps[ci];
                    gu_dbuf out;
                    if (gu_dalloc(t->gpu, t->pool, &out, cap * sizeof(uint32_t))) {
                        t->failures++;
                        continue;
                    }
                    st = deftsim_k_filter_ge(t->gpu, xd.p, n, th, cap ? out.p : NULL, cap, &c2);
                    CHECK(t, st == DEFTSIM_OK && c2 == want, "filter_ge n=%zu t=%g cap=%zu: %zu, want %zu",
                          n, (double)th, cap, c2, want);
                    size_t w = want < cap ? want : cap;
                    uint32_t *got = xmalloc(w * sizeof *got);
                    if (!st && !deftsim_kcuda_download(t->gpu, got, out.p, w * sizeof *got)) {
                        int ok = 1;
                        for (size_t i = 0; i < w && ok; i++) ok = got[i] < n && passes(x[got[i]], th);
                        /* distinct: sort and look for neighbours */
                        uint32_t *cp = xmalloc(w * sizeof *cp);
                        memcpy(cp, got, w * sizeof *cp);
                        (void)gu_same_set(cp, got, w); /* sorts both */
                        for (size_t i = 1; i < w && ok; i++) ok = cp[i] != cp[i - 1];
                        free(cp);
                        CHECK(t, ok, "filter_ge n=%zu t=%g cap=%zu: an index does not pass or repeats",
                              n, (double)th, cap);
                    }
                    CHECK(t, gu_dguard_ok(t->gpu, &out), "filter_ge: guard band overwritten");
                    free(got);
                    gu_dfree(t->pool, &out);
                }
            }
            gu_dfree(t->pool, &xd);
            free(x);
        }
}

static void test_samples(tctx *t)
{
    gu_rng r;
    gu_rng_init(&r, t->seed ^ 0x5a3);
    size_t n = 1000003;
    float *x = xmalloc(n * sizeof *x);
    gu_fill(x, n, GU_NONFINITE, t->seed + 12000);
    gu_dbuf xd;
    if (upload_x(t, x, n, &xd)) {
        t->failures++;
        free(x);
        return;
    }
    for (int rep = 0; rep < 20; rep++) {
        size_t stride = 1 + gu_below(&r, 5000), start = gu_below(&r, 1000);
        size_t count = (n - 1 - start) / stride + 1;
        if (rep % 3 == 0) count = gu_below(&r, count + 1);
        uint64_t seed = gu_next(&r);
        float *a = xmalloc(count * sizeof *a), *b = xmalloc(count * sizeof *b);
        gu_dbuf out;
        if (gu_dalloc(t->gpu, t->pool, &out, count * sizeof(float))) {
            t->failures++;
        } else {
            for (int kind = 0; kind < 2; kind++) {
                deftsim_status s1 = kind ? deftsim_k_sample_random(t->cpu, x, n, count, seed, a)
                                         : deftsim_k_sample_strided(t->cpu, x, n, start, stride, count, a);
                deftsim_status s2 = kind ? deftsim_k_sample_random(t->gpu, xd.p, n, count, seed, out.p)
                                         : deftsim_k_sample_strided(t->gpu, xd.p, n, start, stride, count,
                                                                    out.p);
                deftsim_kstats kc, kg;
                deftsim_kctx_last(t->cpu, &kc);
                deftsim_kctx_last(t->gpu, &kg);
                CHECK(t, !s1 && !s2 && !deftsim_kcuda_download(t->gpu, b, out.p, count * sizeof *b) &&
                             same_floats(a, b, count) && kc.nan_count == kg.nan_count,
                      "sample_%s count=%zu: differs from the cpu backend", kind ? "random" : "strided",
                      count);
            }
            CHECK(t, gu_dguard_ok(t->gpu, &out), "samples: guard band overwritten");
            gu_dfree(t->pool, &out);
        }
        free(a);
        free(b);
    }
    gu_dfree(t->pool, &xd);
    free(x);
}

/* ---- Sparse operations ----------------------------------------------------------------------- */

static void test_sparse(tctx *t)
{
    gu_rng r;
    gu_rng_init(&r, t->seed ^ 0x59a);
    static const size_t sizes[] = {1, 100, 65536, 3000017};
    for (size_t si = 0; si < 4; si++) {
        size_t n = sizes[si];
        float *x = xmalloc(n * sizeof *x), *y = xmalloc(n * sizeof *y);
        gu_fill(x, n, GU_NONFINITE, t->seed + 13000 + si);
        size_t ms[] = {0, 1, 17, n / 3 + 1, 2 * n + 3};
        for (size_t mi = 0; mi < 5; mi++) {
            size_t m = ms[mi];
            uint32_t *idx = xmalloc(m * sizeof *idx);
            float *vals = xmalloc(m * sizeof *vals), *a = xmalloc(m * sizeof *a), *b = xmalloc(m * sizeof *b);
            /* Indices drawn from a small range repeat often: duplicates must sum in order. */
            size_t range = mi % 2 ? n : (n < 50 ? n : 50);
            for (size_t i = 0; i < m; i++) idx[i] = (uint32_t)gu_below(&r, range);
            gu_fill(vals, m, GU_NONFINITE, t->seed + 14000 + 7 * si + mi);
            gu_dbuf xd, id, vd, od;
            if (upload_x(t, x, n, &xd) || gu_dalloc(t->gpu, t->pool, &id, m * 4) ||
                gu_dalloc(t->gpu, t->pool, &vd, m * 4) || gu_dalloc(t->gpu, t->pool, &od, m * 4)) {
                t->failures++;
                goto next;
            }
            deftsim_kcuda_upload(t->gpu, id.p, idx, m * 4);
            deftsim_kcuda_upload(t->gpu, vd.p, vals, m * 4);
            /* gather */
            deftsim_status s1 = deftsim_k_gather(t->cpu, x, n, idx, m, a);
            deftsim_status s2 = deftsim_k_gather(t->gpu, xd.p, n, id.p, m, od.p);
            CHECK(t, !s1 && !s2 && !deftsim_kcuda_download(t->gpu, b, od.p, m * 4) &&
                         same_floats(a, b, m),
                  "gather n=%zu m=%zu differs (%s)", n, m, deftsim_error_message());
            CHECK(t, gu_dguard_ok(t->gpu, &od), "gather: guard band overwritten");
            /* scatter-add into a copy of x: duplicates in list order, bit for bit */
            memcpy(y, x, n * 4);
            s1 = deftsim_k_scatter_add(t->cpu, y, n, idx, vals, m);
            s2 = deftsim_k_scatter_add(t->gpu, xd.p, n, id.p, vd.p, m);
            float *z = xmalloc(n * 4);
            CHECK(t, !s1 && !s2 && !deftsim_kcuda_download(t->gpu, z, xd.p, n * 4) &&
                         same_floats(y, z, n),
                  "scatter_add n=%zu m=%zu differs (%s)", n, m, deftsim_error_message());
            /* zero_at */
            s1 = deftsim_k_zero_at(t->cpu, y, n, idx, m);
            s2 = deftsim_k_zero_at(t->gpu, xd.p, n, id.p, m);
            CHECK(t, !s1 && !s2 && !deftsim_kcuda_download(t->gpu, z, xd.p, n * 4) &&
                         same_floats(y, z, n),
                  "zero_at n=%zu m=%zu differs (%s)", n, m, deftsim_error_message());
            CHECK(t, gu_dguard_ok(t->gpu, &xd), "scatter_add/zero_at: guard band overwritten");
            /* An index out of range: an input error, and nothing written. */
            if (m > 2) {
                uint32_t badv = (uint32_t)n + 3;
                size_t at = m / 2;
                deftsim_kcuda_upload(t->gpu, (uint32_t *)id.p + at, &badv, 4);
                deftsim_kcuda_download(t->gpu, y, xd.p, n * 4);
                deftsim_kcuda_download(t->gpu, a, od.p, m * 4);
                s2 = deftsim_k_gather(t->gpu, xd.p, n, id.p, m, od.p);
                CHECK(t, s2 == DEFTSIM_E_INPUT && strstr(deftsim_error_message(), "position"),
                      "gather with a bad index: %d (%s)", (int)s2, deftsim_error_message());
                s2 = deftsim_k_zero_at(t->gpu, xd.p, n, id.p, m);
                CHECK(t, s2 == DEFTSIM_E_INPUT, "zero_at with a bad index: %d", (int)s2);
                s2 = deftsim_k_scatter_add(t->gpu, xd.p, n, id.p, vd.p, m);
                CHECK(t, s2 == DEFTSIM_E_INPUT, "scatter_add with a bad index: %d", (int)s2);
                deftsim_kcuda_download(t->gpu, z, xd.p, n * 4);
                deftsim_kcuda_download(t->gpu, b, od.p, m * 4);
                CHECK(t, memcmp(y, z, n * 4) == 0 && memcmp(a, b, m * 4) == 0,
                      "a failed sparse operation changed its output");
            }
            free(z);
        next:
            gu_dfree(t->pool, &od);
            gu_dfree(t->pool, &vd);
            gu_dfree(t->pool, &id);
            gu_dfree(t->pool, &xd);
            free(idx);
            free(vals);
            free(a);
            free(b);
        }
        free(x);
        free(y);
    }
}

static void test_union(tctx *t)
{
    gu_rng r;
    gu_rng_init(&r, t->seed ^ 0x0123);
    static const size_t sizes[] = {1, 64, 1000, 100000, 5000011};
    for (size_t si = 0; si < 5; si++) {
        size_t n = sizes[si], nl = 1 + gu_below(&r, 40);
        uint32_t **hl = xmalloc(nl * sizeof *hl);
        const uint32_t **dl = xmalloc(nl * sizeof *dl);
        size_t *lens = xmalloc(nl * sizeof *lens);
        gu_dbuf *db = xmalloc(nl * sizeof *db);
        for (size_t l = 0; l < nl; l++) {
            lens[l] = gu_below(&r, 4) == 0 ? 0 : gu_below(&r, n / 2 + 20);
            hl[l] = xmalloc(lens[l] * sizeof **hl);
            for (size_t i = 0; i < lens[l]; i++) hl[l][i] = (uint32_t)gu_below(&r, n);
            if (gu_dalloc(t->gpu, t->pool, &db[l], lens[l] * 4)) exit(1);
            deftsim_kcuda_upload(t->gpu, db[l].p, hl[l], lens[l] * 4);
            dl[l] = db[l].p;
        }
        size_t sb = 0, gsb = 0, want = 0, got = 0;
        deftsim_k_union_scratch(t->cpu, n, &sb);
        deftsim_k_union_scratch(t->gpu, n, &gsb);
        void *cs = xmalloc(sb);
        uint32_t *ref = xmalloc(n * 4), *out = xmalloc(n * 4);
        gu_dbuf od, scr;
        if (gu_dalloc(t->gpu, t->pool, &od, n * 4) || gu_dalloc(t->gpu, t->pool, &scr, gsb)) exit(1);
        deftsim_k_union(t->cpu, n, (const deftsim_kidx *const *)hl, lens, nl, ref, n, &want, cs, sb);
        size_t caps[] = {0, want / 2, want};
        for (size_t ci = 0; ci < 3; ci++) {
            size_t cap = caps[ci], w = want < cap ? want : cap;
            deftsim_status st = deftsim_k_union(t->gpu, n, dl, lens, nl, cap ? od.p : NULL, cap, &got,
                                                scr.p, gsb);
            CHECK(t, st == DEFTSIM_OK && got == want, "union n=%zu lists=%zu cap=%zu: %zu, want %zu (%s)",
                  n, nl, cap, got, want, deftsim_error_message());
            CHECK(t, !st && !deftsim_kcuda_download(t->gpu, out, od.p, w * 4) &&
                         memcmp(out, ref, w * 4) == 0,
                  "union n=%zu cap=%zu: not the smallest indices in order", n, cap);
            CHECK(t, gu_dguard_ok(t->gpu, &od) && gu_dguard_ok(t->gpu, &scr), "union: guards");
        }
        /* A bad index in the last non-empty list: an input error, the output untouched. */
        for (size_t l = nl; l-- > 0;) {
            if (!lens[l]) continue;
            uint32_t bad = (uint32_t)n;
            deftsim_kcuda_upload(t->gpu, (uint32_t *)db[l].p + lens[l] - 1, &bad, 4);
            deftsim_kcuda_download(t->gpu, ref, od.p, n * 4);
            deftsim_status st = deftsim_k_union(t->gpu, n, dl, lens, nl, od.p, n, &got, scr.p, gsb);
            deftsim_kcuda_download(t->gpu, out, od.p, n * 4);
            CHECK(t, st == DEFTSIM_E_INPUT && memcmp(out, ref, n * 4) == 0,
                  "union with a bad index: %d (%s)", (int)st, deftsim_error_message());
            break;
        }
        for (size_t l = 0; l < nl; l++) {
            gu_dfree(t->pool, &db[l]);
            free(hl[l]);
        }
        gu_dfree(t->pool, &od);
        gu_dfree(t->pool, &scr);
        free(hl);
        free(dl);
        free(lens);
        free(db);
        free(cs);
        free(ref);
        free(out);
    }
}

typedef struct {
    uint32_t idx;
    float val;
} pair;

static int cmp_pair(const void *a, const void *b)
{
    uint32_t x = ((const pair *)a)->idx, y = ((const pair *)b)->idx;
    return x < y ? -1 : x > y;
}

/* 1 if the (index, value) sets agree: indices are distinct in a merge's output, so sorting by
 * index lines them up; values must match bit for bit, NaN matching any NaN. */
static int same_pairs(const uint32_t *ia, const float *va, const uint32_t *ib, const float *vb,
                      size_t m)
{
    pair *a = xmalloc(m * sizeof *a), *b = xmalloc(m * sizeof *b);
    for (size_t i = 0; i < m; i++) {
        a[i] = (pair){ia[i], va[i]};
        b[i] = (pair){ib[i], vb[i]};
    }
    qsort(a, m, sizeof *a, cmp_pair);
    qsort(b, m, sizeof *b, cmp_pair);
    int ok = 1;
    for (size_t i = 0; i < m && ok; i++) ok = a[i].idx == b[i].idx && same_floats(&a[i].val, &b[i].val, 1);
    free(a);
    free(b);
    return ok;
}

static void test_merge(tctx *t)
{
    gu_rng r;
    gu_rng_init(&r, t->seed ^ 0x3e6);
    for (int rep = 0; rep < 24; rep++) {
        size_t na = rep % 6 == 0 ? 0 : gu_below(&r, rep < 20 ? 3000 : 400000);
        size_t nb = rep % 7 == 1 ? 0 : gu_below(&r, rep < 20 ? 3000 : 400000);
        size_t range = 1 + gu_below(&r, rep % 2 ? 100 : 4 * (na + nb) + 10);
        size_t m = na + nb, k = gu_below(&r, m + 10);
        uint32_t *ia = xmalloc(na * 4), *ib = xmalloc(nb * 4);
        float *va = xmalloc(na * 4), *vb = xmalloc(nb * 4);
        for (size_t i = 0; i < na; i++) ia[i] = (uint32_t)gu_below(&r, range);
        for (size_t i = 0; i < nb; i++) ib[i] = (uint32_t)gu_below(&r, range);
        gu_fill(va, na, rep % 3 ? GU_TIES : GU_NONFINITE, t->seed + 15000 + (uint64_t)rep);
        gu_fill(vb, nb, rep % 3 ? GU_TIES : GU_NONFINITE, t->seed + 16000 + (uint64_t)rep);
        size_t sb = 0, gsb = 0, n1 = 0, n2 = 0;
        deftsim_k_merge_topk_scratch(t->cpu, na, nb, &sb);
        deftsim_k_merge_topk_scratch(t->gpu, na, nb, &gsb);
        void *cs = xmalloc(sb);
        uint32_t *ri = xmalloc(m * 4 + 4), *gi = xmalloc(m * 4 + 4);
        float *rv = xmalloc(m * 4 + 4), *gv = xmalloc(m * 4 + 4);
        gu_dbuf dia, dva, dib, dvb, doi, dov, scr;
        if (gu_dalloc(t->gpu, t->pool, &dia, na * 4) || gu_dalloc(t->gpu, t->pool, &dva, na * 4) ||
            gu_dalloc(t->gpu, t->pool, &dib, nb * 4) || gu_dalloc(t->gpu, t->pool, &dvb, nb * 4) ||
            gu_dalloc(t->gpu, t->pool, &doi, m * 4) || gu_dalloc(t->gpu, t->pool, &dov, m * 4) ||
            gu_dalloc(t->gpu, t->pool, &scr, gsb))
            exit(1);
        deftsim_kcuda_upload(t->gpu, dia.p, ia, na * 4);
        deftsim_kcuda_upload(t->gpu, dva.p, va, na * 4);
        deftsim_kcuda_upload(t->gpu, dib.p, ib, nb * 4);
        deftsim_kcuda_upload(t->gpu, dvb.p, vb, nb * 4);
        deftsim_status s1 = deftsim_k_merge_topk(t->cpu, ia, va, na, ib, vb, nb, k, ri, rv, &n1, cs, sb);
        deftsim_status s2 = deftsim_k_merge_topk(t->gpu, dia.p, dva.p, na, dib.p, dvb.p, nb, k, doi.p,
                                                 dov.p, &n2, scr.p, gsb);
        int ok = !s1 && !s2 && n1 == n2 && !deftsim_kcuda_download(t->gpu, gi, doi.p, n2 * 4) &&
                 !deftsim_kcuda_download(t->gpu, gv, dov.p, n2 * 4);
        ok = ok && same_pairs(ri, rv, gi, gv, n1);
        CHECK(t, ok, "merge_topk na=%zu nb=%zu range=%zu k=%zu: differs from the cpu backend (%zu vs %zu; %s)",
              na, nb, range, k, n1, n2, deftsim_error_message());
        deftsim_kstats kc, kg;
        deftsim_kctx_last(t->cpu, &kc);
        deftsim_kctx_last(t->gpu, &kg);
        CHECK(t, kc.nan_count == kg.nan_count, "merge_topk: NaN count %zu, want %zu", kg.nan_count,
              kc.nan_count);
        CHECK(t, gu_dguard_ok(t->gpu, &doi) && gu_dguard_ok(t->gpu, &dov) && gu_dguard_ok(t->gpu, &scr),
              "merge_topk: guards");
        gu_dfree(t->pool, &dia);
        gu_dfree(t->pool, &dva);
        gu_dfree(t->pool, &dib);
        gu_dfree(t->pool, &dvb);
        gu_dfree(t->pool, &doi);
        gu_dfree(t->pool, &dov);
        gu_dfree(t->pool, &scr);
        free(ia);
        free(ib);
        free(va);
        free(vb);
        free(cs);
        free(ri);
        free(gi);
        free(rv);
        free(gv);
    }
}

/* ---- absmax, pointers, pool ------------------------------------------------------------------- */

static void test_absmax_and_api(tctx *t)
{
    static const size_t sizes[] = {0, 1, 31, 4097, (1u << 22) + 3};
    for (size_t si = 0; si < 5; si++)
        for (int m = 0; m < GU_MODE_COUNT; m++) {
            size_t n = sizes[si];
            float *x = xmalloc(n * 4);
            gu_fill(x, n, (gu_mode)m, t->seed + 17000 + 10 * si + (uint64_t)m);
            float want = 0.0f, got = -1.0f;
            for (size_t i = 0; i < n; i++)
                if (!isnan(x[i]) && fabsf(x[i]) > want) want = fabsf(x[i]);
            gu_dbuf xd;
            if (upload_x(t, x, n, &xd)) exit(1);
            deftsim_status st = deftsim_k_absmax(t->gpu, n ? xd.p : NULL, n, &got);
            deftsim_kstats ks;
            deftsim_kctx_last(t->gpu, &ks);
            CHECK(t, !st && got == want && !signbit(got) && ks.nan_count == gu_count_nan(x, n),
                  "absmax n=%zu %s: %g, want %g", n, gu_mode_name((gu_mode)m), (double)got, (double)want);
            gu_dfree(t->pool, &xd);
            free(x);
        }
    /* Host memory where device memory belongs: refused before anything runs. */
    float hx[64] = {1};
    uint32_t hout[4];
    size_t sb = 0;
    deftsim_k_topk_scratch(t->gpu, 64, 4, &sb);
    gu_dbuf scr;
    if (gu_dalloc(t->gpu, t->pool, &scr, sb)) exit(1);
    deftsim_status st = deftsim_k_topk(t->gpu, hx, 64, 4, hout, scr.p, sb);
    CHECK(t, st == DEFTSIM_E_USAGE && strstr(deftsim_error_message(), "host memory"),
          "a host pointer was not refused: %d (%s)", (int)st, deftsim_error_message());
    gu_dfree(t->pool, &scr);
    CHECK(t, deftsim_kernels_backend_unavailable("cuda") == NULL, "cuda reported unavailable");
    /* Pool: first fit, neighbours merge, exhaustion is an error that names the sizes. */
    deftsim_kcuda_pool *p;
    st = deftsim_kcuda_pool_new(1 << 20, &p);
    CHECK(t, st == DEFTSIM_OK, "pool_new: %s", deftsim_error_message());
    if (st) return;
    void *a, *b, *c, *d;
    int ok = !deftsim_kcuda_alloc(p, 1000, &a) && !deftsim_kcuda_alloc(p, 300000, &b) &&
             !deftsim_kcuda_alloc(p, 5, &c) && ((uintptr_t)a % 256 == 0) && ((uintptr_t)c % 256 == 0);
    deftsim_kcuda_release(p, b);
    ok = ok && !deftsim_kcuda_alloc(p, 290000, &d) && d == b;
    deftsim_kcuda_release(p, a);
    deftsim_kcuda_release(p, c);
    deftsim_kcuda_release(p, d);
    ok = ok && deftsim_kcuda_pool_in_use(p) == 0 && !deftsim_kcuda_alloc(p, 1 << 20, &a);
    deftsim_kcuda_release(p, a);
    st = deftsim_kcuda_alloc(p, (1 << 20) + 1, &a);
    ok = ok && st == DEFTSIM_E_NOMEM && strstr(deftsim_error_message(), "largest free block");
    CHECK(t, ok, "pool bookkeeping (%s)", deftsim_error_message());
    deftsim_kcuda_pool_free(p);
}

/* ---- Generator ----------------------------------------------------------------------------- */

/* The device kernel against deftsim_gen.h's element reference for any constants, layer
 * tables with odd sizes, and ranges that start and end inside groups. */
static void test_gen_reference(tctx *t)
{
    gu_rng r;
    gu_rng_init(&r, t->seed ^ 0x6e1);
    for (int rep = 0; rep < 12; rep++) {
        deftsim_gen_consts c;
        memset(&c, 0, sizeof c);
        uint64_t seed = gu_next(&r);
        c.key[0] = (uint32_t)seed;
        c.key[1] = (uint32_t)(seed >> 32);
        double tails[] = {0, 4, 2.5, 30};
        double tail = tails[rep % 4], signal = rep % 5 == 0 ? 1.0 : rep % 5 == 1 ? 0.0 : gu_uniform(&r);
        c.gauss = tail == 0;
        double nu = c.gauss ? 0 : tail, norm = c.gauss ? 1.0 : sqrt((nu - 2.0) / nu);
        c.nu = (float)nu;
        c.inv_nu = c.gauss ? 0.0f : (float)(1.0 / nu);
        c.w_signal = (float)(sqrt(signal) * norm);
        c.w_noise = (float)(sqrt(1.0 - signal) * norm);
        double field = rep % 3 == 2 ? 0.5 + 5.5 * gu_uniform(&r) : 0.0; /* decades */
        if (field > 0) {
            double wd = field * 2.30258509299404568402;
            c.field_w = (float)wd;
            c.field_c = (float)sqrt(2.0 * wd / expm1(2.0 * wd));
        }
        size_t nl = 1 + gu_below(&r, 9);
        deftsim_kcuda_gen_layer L[10];
        uint64_t off = gu_below(&r, 1000);
        for (size_t i = 0; i < nl; i++) {
            L[i].offset = off;
            L[i].numel = 1 + gu_below(&r, i % 2 ? 70 : 300000);
            L[i].scale = (float)pow(10.0, -6.0 * gu_uniform(&r));
            off += L[i].numel;
        }
        uint64_t lo = L[0].offset + gu_below(&r, 40), hi = off - gu_below(&r, 40);
        if (hi <= lo) hi = off;
        if (lo >= hi) lo = L[0].offset;
        uint64_t count = hi - lo;
        uint32_t iter = (uint32_t)gu_next(&r), worker = (uint32_t)gu_below(&r, 5000);
        float *want = xmalloc(count * 4), *got = xmalloc(count * 4);
        for (uint64_t i = 0; i < count; i++) {
            uint64_t e = lo + i;
            size_t li = 0;
            while (li + 1 < nl && L[li + 1].offset <= e) li++;
            want[i] = deftsim_gen_element(&c, e, worker, iter, L[li].scale);
        }
        gu_dbuf od, scr;
        if (gu_dalloc(t->gpu, t->pool, &od, count * 4) ||
            gu_dalloc(t->gpu, t->pool, &scr, deftsim_kcuda_gen_scratch(nl)))
            exit(1);
        deftsim_status st = deftsim_kcuda_gen_fill(t->gpu, &c, L, nl, iter, worker, lo, count, od.p,
                                                   scr.p, deftsim_kcuda_gen_scratch(nl));
        CHECK(t, !st && !deftsim_kcuda_download(t->gpu, got, od.p, count * 4) &&
                     memcmp(want, got, count * 4) == 0,
              "generator (tail %g, signal %.3f, field %.2f, %zu layers, [%llu, +%llu)): device bytes "
              "differ from the element reference (%s)",
              tail, signal, field, nl, (unsigned long long)lo, (unsigned long long)count,
              deftsim_error_message());
        CHECK(t, gu_dguard_ok(t->gpu, &od), "generator: guard band overwritten");
        gu_dfree(t->pool, &od);
        gu_dfree(t->pool, &scr);
        free(want);
        free(got);
    }
}

#ifdef GPU_HAVE_GEN
/* The device kernel against deftsim_gen_fill for whole ResNet-18 gradients: with the defaults,
 * and with what calibrated sets use (scales by kind, a role's offset, a magnitude field, kinds
 * with their own signal, tail and field, workers' factors), one call per run of layers that
 * share their constants (deftsim_gen_layer_consts), each layer at its worker's scale. */
static void test_gen_fill_one(tctx *t, const deftsim_gen_params *gp, const char *what)
{
    deftsim_model *m;
    deftsim_gen *g;
    if (deftsim_model_builtin("resnet18_cifar10", &m) || deftsim_gen_new(m, gp, &g)) {
        report(t, "generator (%s): %s", what, deftsim_error_message());
        return;
    }
    size_t n = (size_t)m->numel, nl = m->nlayers;
    deftsim_kcuda_gen_layer *L = xmalloc(nl * sizeof *L);
    float *want = xmalloc(n * 4), *got = xmalloc(n * 4);
    gu_dbuf od, scr;
    if (gu_dalloc(t->gpu, t->pool, &od, n * 4) ||
        gu_dalloc(t->gpu, t->pool, &scr, deftsim_kcuda_gen_scratch(nl)))
        exit(1);
    static const uint32_t it[] = {0, 1, 63, 64, 1000};
    static const uint32_t wk[] = {0, 1, 7, 1023, 5};
    for (int rep = 0; rep < 5; rep++) {
        for (size_t i = 0; i < nl; i++) {
            L[i].offset = m->layers[i].offset;
            L[i].numel = m->layers[i].numel;
            L[i].scale = deftsim_gen_worker_scale(g, i, it[rep], wk[rep]);
        }
        deftsim_status s1 = deftsim_gen_fill(g, it[rep], wk[rep], 0, n, want), s2 = DEFTSIM_OK;
        for (size_t a = 0, b; a < nl && !s2; a = b) {
            const deftsim_gen_consts *c = deftsim_gen_layer_consts(g, a);
            for (b = a + 1; b < nl && deftsim_gen_layer_consts(g, b) == c; b++)
                ;
            s2 = deftsim_kcuda_gen_fill(t->gpu, c, L + a, b - a, it[rep], wk[rep], L[a].offset,
                                        L[b - 1].offset + L[b - 1].numel - L[a].offset,
                                        (float *)od.p + L[a].offset, scr.p,
                                        deftsim_kcuda_gen_scratch(nl));
        }
        CHECK(t, !s1 && !s2 && !deftsim_kcuda_download(t->gpu, got, od.p, n * 4) &&
                     memcmp(want, got, n * 4) == 0,
              "generator (%s): ResNet-18 gradient (iteration %u, worker %u) differs from "
              "deftsim_gen_fill (%s)",
              what, it[rep], wk[rep], s1 || s2 ? deftsim_error_message() : "bytes");
    }
    gu_dfree(t->pool, &od);
    gu_dfree(t->pool, &scr);
    free(L);
    free(want);
    free(got);
    deftsim_gen_free(g);
    deftsim_model_free(m);
}

static void test_gen_fill(tctx *t)
{
    deftsim_gen_params gp;
    deftsim_gen_params_default(&gp);
    gp.seed = t->seed;
    test_gen_fill_one(t, &gp, "defaults");
    gp.kind_scales = 1;
    gp.kind_level[DEFTSIM_GEN_KIND_CONV] = -2.4;
    gp.kind_depth[DEFTSIM_GEN_KIND_CONV] = -0.6;
    gp.kind_spread[DEFTSIM_GEN_KIND_CONV] = 0.2;
    gp.kind_size[DEFTSIM_GEN_KIND_CONV] = -0.42;
    gp.role_offset[DEFTSIM_GEN_ROLE_SHORTCUT] = 0.19;
    gp.field = 1.1;
    gp.tail = 4.5;
    gp.signal = 0.12;
    gp.kind_field[DEFTSIM_GEN_KIND_LINEAR] = 0;
    gp.kind_tail[DEFTSIM_GEN_KIND_NORM_WEIGHT] = 0;
    gp.kind_signal[DEFTSIM_GEN_KIND_NORM_BIAS] = 0.8;
    gp.worker_spread = 1.2;
    test_gen_fill_one(t, &gp, "calibrated-like: kinds, a size slope, roles, field, per-kind constants, workers");
}
#endif

int main(void)
{
    tctx t;
    memset(&t, 0, sizeof t);
    const char *e = getenv("DEFTSIM_TEST_SEED");
    t.seed = e && *e ? strtoull(e, NULL, 0) : 0x5eed2024u;
    printf("gpu tests: seed %llu (set DEFTSIM_TEST_SEED to replay)\n", (unsigned long long)t.seed);
    const char *why = deftsim_kernels_backend_unavailable("cuda");
    if (why) {
        printf("gpu tests: skipped: %s\n", why);
        return GPU_SKIP;
    }
    if (deftsim_kctx_new(&t.gpu, "cuda", 1) || deftsim_kctx_new(&t.cpu, "cpu", 0)) {
        fprintf(stderr, "contexts: %s\n", deftsim_error_message());
        return 1;
    }
    printf("gpu tests: device %s\n", deftsim_kcuda_device_name(t.gpu));
    if (deftsim_kcuda_pool_new((size_t)3 << 30, &t.pool) ||
        deftsim_kcuda_attach_pool(t.gpu, t.pool)) {
        fprintf(stderr, "pool: %s\n", deftsim_error_message());
        return 1;
    }
    struct {
        const char *name;
        void (*fn)(tctx *);
    } parts[] = {
        {"absmax, pointers, pool", test_absmax_and_api},
        {"topk", test_topk},
        {"segtopk", test_segtopk},
        {"seg_norms", test_norms},
        {"accumulate", test_accumulate},
        {"filter_ge, count_ge", test_filter},
        {"sample_strided, sample_random", test_samples},
        {"gather, zero_at, scatter_add", test_sparse},
        {"union", test_union},
        {"merge_topk", test_merge},
        {"generator vs element reference", test_gen_reference},
#ifdef GPU_HAVE_GEN
        {"generator vs deftsim_gen_fill", test_gen_fill},
#endif
    };
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        size_t f0 = t.failures, c0 = t.checks;
        parts[i].fn(&t);
        printf("  %-36s %6zu checks  %s\n", parts[i].name, t.checks - c0,
               t.failures == f0 ? "ok" : "FAILED");
        fflush(stdout);
    }
    /* Anything the last operations left pending (a fault) shows here. */
    if (deftsim_kcuda_sync(t.gpu)) report(&t, "final sync: %s", deftsim_error_message());
    deftsim_kcuda_pool_free(t.pool);
    deftsim_kctx_free(t.gpu);
    deftsim_kctx_free(t.cpu);
    printf("gpu tests: %zu checks, %zu failed\n", t.checks, t.failures);
    return t.failures ? 1 : 0;
}
