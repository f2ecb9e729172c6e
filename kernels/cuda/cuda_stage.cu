/* cuda_stage.cu - CUDA event timers, and the "cuda-staged" backend: host buffers in, the cuda
 * backend's operation on the device, results back, every call timed with CUDA events
 * (deftsim_kcuda.h). Host code only: it runs no kernel of its own. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda_internal.cuh"

extern "C" {
#include "deftsim_kcuda.h"
#include "deftsim_util.h"
}

/* ---- Timers ----------------------------------------------------------------------------------- */

struct deftsim_kcuda_timer {
    size_t n;          /* events created */
    cudaEvent_t *ev;
};

extern "C" void deftsim_kcuda_timer_free(deftsim_kcuda_timer *t)
{
    if (!t) return;
    for (size_t i = 0; i < t->n; i++) (void)cudaEventDestroy(t->ev[i]);
    free(t->ev);
    free(t);
}

extern "C" deftsim_status deftsim_kcuda_timer_new(size_t marks, deftsim_kcuda_timer **out)
{
    if (!out || marks == 0)
        return deftsim_error_set(DEFTSIM_E_USAGE, "kernels: cuda timer: no result pointer or no marks");
    *out = NULL;
    if (!kc_available())
        return deftsim_error_set(DEFTSIM_E_UNSUPPORTED, "kernels: cuda timer: %s",
                                 kc_unavailable_reason());
    deftsim_kcuda_timer *t = (deftsim_kcuda_timer *)calloc(1, sizeof *t);
    if (!t || !(t->ev = (cudaEvent_t *)calloc(marks, sizeof *t->ev))) {
        free(t);
        return deftsim_error_nomem("kernels");
    }
    for (; t->n < marks; t->n++) {
        cudaError_t e = cudaEventCreate(&t->ev[t->n]);
        if (e != cudaSuccess) {
            deftsim_status st = kc_fail(e, "cudaEventCreate", __FILE__, __LINE__);
            deftsim_kcuda_timer_free(t);
            return st;
        }
    }
    *out = t;
    return DEFTSIM_OK;
}

typedef struct {
    deftsim_kctx *dev;         /* the inner "cuda" context */
    deftsim_kcuda_pool *pool;  /* every device buffer of a call; grown, never shrunk */
    cudaEvent_t ev[4];         /* before the copies in, after them, after the op, after the
                                  copies out */
    int nev;
} ks_state;

static ks_state *ks_st(const deftsim_kctx *ctx) { return (ks_state *)ctx->state; }

static int is_backend(const deftsim_kctx *ctx, const char *name)
{
    return ctx && strcmp(deftsim_kctx_backend(ctx), name) == 0;
}

/* The stream of a "cuda" or "cuda-staged" context; NULL (with the error recorded) otherwise. */
static deftsim_status stream_of(deftsim_kctx *ctx, cudaStream_t *out, const char *fn)
{
    if (is_backend(ctx, "cuda-staged")) ctx = ks_st(ctx)->dev;
    if (!is_backend(ctx, "cuda"))
        return deftsim_error_set(DEFTSIM_E_USAGE,
                                 "kernels: %s needs a context of backend cuda or cuda-staged", fn);
    *out = kc_st(ctx)->stream;
    return DEFTSIM_OK;
}

extern "C" deftsim_status deftsim_kcuda_timer_mark(deftsim_kcuda_timer *t, size_t i,
                                                   deftsim_kctx *ctx)
{
    cudaStream_t s = NULL;
    deftsim_status st;
    if (!t || i >= t->n)
        return deftsim_error_set(DEFTSIM_E_USAGE, "kernels: cuda timer: mark %zu of %zu", i,
                                 t ? t->n : 0);
    if ((st = stream_of(ctx, &s, "deftsim_kcuda_timer_mark"))) return st;
    KC_CHECK(cudaEventRecord(t->ev[i], s));
    return DEFTSIM_OK;
}

extern "C" deftsim_status deftsim_kcuda_timer_seconds(deftsim_kcuda_timer *t, size_t i, size_t j,
                                                      double *seconds)
{
    if (!t || !seconds || i >= t->n || j >= t->n)
        return deftsim_error_set(DEFTSIM_E_USAGE, "kernels: cuda timer: marks %zu, %zu of %zu", i,
                                 j, t ? t->n : 0);
    float ms = 0;
    KC_CHECK(cudaEventSynchronize(t->ev[j]));
    KC_CHECK(cudaEventElapsedTime(&ms, t->ev[i], t->ev[j]));
    *seconds = (double)ms * 1e-3;
    return DEFTSIM_OK;
}

/* ---- The staged backend: context ---------------------------------------------------------- */

static double wall_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

extern "C" void ks_fini(deftsim_kctx *ctx)
{
    ks_state *s = ks_st(ctx);
    if (!s) return;
    if (s->dev) {
        (void)cudaStreamSynchronize(kc_st(s->dev)->stream);
        (void)deftsim_kcuda_attach_pool(s->dev, NULL);
    }
    deftsim_kcuda_pool_free(s->pool);
    for (int i = 0; i < s->nev; i++) (void)cudaEventDestroy(s->ev[i]);
    deftsim_kctx_free(s->dev);
    free(s);
    ctx->state = NULL;
}

extern "C" deftsim_status ks_init(deftsim_kctx *ctx)
{
    if (!kc_available())
        return deftsim_error_set(DEFTSIM_E_UNSUPPORTED, "kernels: cuda-staged: %s",
                                 kc_unavailable_reason());
    ks_state *s = (ks_state *)calloc(1, sizeof *s);
    if (!s) return deftsim_error_nomem("kernels");
    ctx->state = s;
    deftsim_status st = deftsim_kctx_new(&s->dev, "cuda", 1);
    for (; !st && s->nev < 4; s->nev++) {
        cudaError_t e = cudaEventCreate(&s->ev[s->nev]);
        if (e != cudaSuccess) st = kc_fail(e, "cudaEventCreate", __FILE__, __LINE__);
    }
    if (st) {
        ks_fini(ctx);
        return st;
    }
    /* One host thread drives the device, as for "cuda". */
    ctx->threads = 1;
    return DEFTSIM_OK;
}

extern "C" void ks_record(deftsim_kctx *ctx) { (void)ctx; }

extern "C" deftsim_kctx *deftsim_kcuda_staged_device(deftsim_kctx *ctx)
{
    return is_backend(ctx, "cuda-staged") ? ks_st(ctx)->dev : NULL;
}

/* ---- The staged backend: one call ---------------------------------------------------------
 * A call lists its arrays: what goes in (copied to the device before the operation), what
 * comes out (copied back after it; `down` bytes, the whole buffer unless the operation says
 * fewer), both, or device-only working memory. A NULL host pointer or 0 bytes gives a NULL
 * device pointer and no copy. */
enum { KS_IN = 1, KS_OUT = 2, KS_INOUT = 3, KS_WORK = 0 };

typedef struct {
    const void *in;   /* host source (KS_IN, KS_INOUT) */
    void *out;        /* host destination (KS_OUT, KS_INOUT) */
    size_t bytes;     /* device buffer size */
    int dir;
    size_t down;      /* bytes copied back; set to bytes by ks_begin */
    void *dev;
} ks_arg;

typedef struct {
    double wall0;
    int marked;       /* events recorded so far */
} ks_call;

static size_t ks_block(size_t bytes) { return kc_round(bytes ? bytes : 1) + 256; }

/* Makes the pool hold at least `bytes` in one piece. Between calls every block is free, so a
 * larger pool simply replaces the old one. */
static deftsim_status ks_reserve(ks_state *s, size_t bytes)
{
    if (s->pool && deftsim_kcuda_pool_capacity(s->pool) >= bytes) return DEFTSIM_OK;
    size_t cap = bytes + bytes / 4;
    if (cap < ((size_t)64 << 20)) cap = (size_t)64 << 20;
    KC_CHECK(cudaStreamSynchronize(kc_st(s->dev)->stream));
    deftsim_status st = deftsim_kcuda_attach_pool(s->dev, NULL);
    if (st) return st;
    deftsim_kcuda_pool_free(s->pool);
    s->pool = NULL;
    st = deftsim_kcuda_pool_new(cap, &s->pool);
    if (st == DEFTSIM_E_NOMEM && cap > bytes) st = deftsim_kcuda_pool_new(bytes, &s->pool);
    if (st) return deftsim_error_wrap(st, "kernels: cuda-staged: device buffers of one call");
    return deftsim_kcuda_attach_pool(s->dev, s->pool);
}

static void ks_release(ks_state *s, ks_arg *a, size_t na)
{
    for (size_t i = 0; i < na; i++) {
        deftsim_kcuda_release(s->pool, a[i].dev);
        a[i].dev = NULL;
    }
}

/* Reserves the pool (with `work` more bytes for the operation's own use), allocates every
 * buffer and queues the copies in. */
static deftsim_status ks_begin(deftsim_kctx *ctx, ks_call *c, ks_arg *a, size_t na, size_t work)
{
    ks_state *s = ks_st(ctx);
    cudaStream_t str = kc_st(s->dev)->stream;
    deftsim_status st;
    c->wall0 = wall_now();
    c->marked = 0;
    size_t total = work ? ks_block(work) : 0;
    for (size_t i = 0; i < na; i++) {
        a[i].dev = NULL;
        a[i].down = a[i].bytes;
        if (a[i].bytes && deftsim_add_size(total, ks_block(a[i].bytes), &total))
            return deftsim_error_set(DEFTSIM_E_NOMEM, "kernels: cuda-staged: size overflows");
    }
    if ((st = ks_reserve(s, total))) return st;
    deftsim_kctx_set_flags(s->dev, ctx->flags);
    KC_CHECK(cudaEventRecord(s->ev[0], str));
    c->marked = 1;
    for (size_t i = 0; i < na; i++) {
        int used = a[i].bytes && (a[i].dir == KS_WORK || ((a[i].dir & KS_IN) && a[i].in) ||
                                  ((a[i].dir & KS_OUT) && a[i].out));
        if (!used) continue;
        if ((st = deftsim_kcuda_alloc(s->pool, a[i].bytes, &a[i].dev))) {
            ks_release(s, a, na);
            return deftsim_error_wrap(st, "kernels: cuda-staged");
        }
        if ((a[i].dir & KS_IN) && a[i].in) {
            cudaError_t e = cudaMemcpyAsync(a[i].dev, a[i].in, a[i].bytes, cudaMemcpyHostToDevice,
                                            str);
            if (e != cudaSuccess) {
                ks_release(s, a, na);
                return kc_fail(e, "cudaMemcpyAsync(host to device)", __FILE__, __LINE__);
            }
            ctx->xfer.bytes_to_device += a[i].bytes;
        }
    }
    KC_CHECK(cudaEventRecord(s->ev[1], str));
    c->marked = 2;
    return DEFTSIM_OK;
}

/* After the operation (status op): the copies out, the timing, the record; releases every
 * buffer. A failed operation copies nothing back, and its message stands. */
static deftsim_status ks_end(deftsim_kctx *ctx, ks_call *c, ks_arg *a, size_t na,
                             deftsim_status op)
{
    ks_state *s = ks_st(ctx);
    cudaStream_t str = kc_st(s->dev)->stream;
    deftsim_status st = op;
    cudaError_t e;
#define KS_TRY(call)                                                                            \
    do {                                                                                        \
        e = (call);                                                                             \
        if (e != cudaSuccess && !st) st = kc_fail(e, #call, __FILE__, __LINE__);               \
    } while (0)
    if (!st) KS_TRY(cudaEventRecord(s->ev[2], str));
    for (size_t i = 0; i < na && !st; i++) {
        if (!(a[i].dir & KS_OUT) || !a[i].out || !a[i].dev || !a[i].down) continue;
        KS_TRY(cudaMemcpyAsync(a[i].out, a[i].dev, a[i].down, cudaMemcpyDeviceToHost, str));
        if (!st) ctx->xfer.bytes_from_device += a[i].down;
    }
    if (!st) KS_TRY(cudaEventRecord(s->ev[3], str));
    if (!st) KS_TRY(cudaEventSynchronize(s->ev[3]));
    float up = 0, dev = 0, down = 0;
    if (!st) KS_TRY(cudaEventElapsedTime(&up, s->ev[0], s->ev[1]));
    if (!st) KS_TRY(cudaEventElapsedTime(&dev, s->ev[1], s->ev[2]));
    if (!st) KS_TRY(cudaEventElapsedTime(&down, s->ev[2], s->ev[3]));
#undef KS_TRY
    /* The buffers go back only once nothing on the stream can still use them. */
    if (st) (void)cudaStreamSynchronize(str);
    ks_release(s, a, na);
    if (st) return st;
    deftsim_kstats r;
    deftsim_kctx_last(s->dev, &r);
    ctx->last.isa = r.isa;
    ctx->last.threads = r.threads;
    ctx->last.fallbacks = r.fallbacks;
    ctx->last.candidates = r.candidates;
    ctx->last.nan_count = r.nan_count;
    double op_s = (double)dev * 1e-3;
    ctx->xfer.calls++;
    ctx->xfer.copy_seconds += (double)(up + down) * 1e-3;
    ctx->xfer.device_seconds += op_s;
    double untimed = wall_now() - c->wall0 - op_s;
    ctx->xfer.untimed_seconds += untimed > 0 ? untimed : 0;
    return DEFTSIM_OK;
}

/* ---- The staged backend: operations --------------------------------------------------------- */

#define KS_RUN(ctx, a, work, call)                                                             \
    do {                                                                                        \
        ks_call c_;                                                                             \
        size_t na_ = sizeof(a) / sizeof((a)[0]);                                                \
        deftsim_status st_ = ks_begin((ctx), &c_, (a), na_, (work));                            \
        if (st_) return st_;                                                                    \
        st_ = (call);                                                                           \
        return ks_end((ctx), &c_, (a), na_, st_);                                               \
    } while (0)

static ks_arg in_(const void *p, size_t bytes) { return ks_arg{p, NULL, bytes, KS_IN, 0, NULL}; }
static ks_arg out_(void *p, size_t bytes) { return ks_arg{NULL, p, bytes, KS_OUT, 0, NULL}; }
static ks_arg inout_(void *p, size_t bytes) { return ks_arg{p, p, bytes, KS_INOUT, 0, NULL}; }
static ks_arg work_(size_t bytes) { return ks_arg{NULL, NULL, bytes, KS_WORK, 0, NULL}; }

extern "C" deftsim_status ks_absmax(deftsim_kctx *ctx, const float *x, size_t n, float *out)
{
    ks_arg a[] = {in_(x, n * sizeof *x)};
    KS_RUN(ctx, a, 0, deftsim_k_absmax(ks_st(ctx)->dev, (const float *)a[0].dev, n, out));
}

extern "C" deftsim_status ks_scratch_none(const deftsim_kctx *ctx, size_t *bytes)
{
    (void)ctx;
    *bytes = 0;
    return DEFTSIM_OK;
}

extern "C" deftsim_status ks_topk_scratch(const deftsim_kctx *ctx, size_t n, size_t k,
                                          size_t *bytes)
{
    (void)n;
    (void)k;
    return ks_scratch_none(ctx, bytes);
}

extern "C" deftsim_status ks_topk(deftsim_kctx *ctx, const float *x, size_t n, size_t k,
                                  deftsim_kidx *out, void *scratch, size_t scratch_bytes)
{
    (void)scratch;
    (void)scratch_bytes;
    deftsim_kctx *d = ks_st(ctx)->dev;
    size_t need = 0;
    deftsim_status st = deftsim_k_topk_scratch(d, n, k, &need);
    if (st) return st;
    ks_arg a[] = {in_(x, n * sizeof *x), out_(out, k * sizeof *out), work_(need)};
    KS_RUN(ctx, a, 0,
           deftsim_k_topk(d, (const float *)a[0].dev, n, k, (deftsim_kidx *)a[1].dev, a[2].dev,
                          need));
}

extern "C" deftsim_status ks_segtopk_scratch(const deftsim_kctx *ctx, const deftsim_kseg *segs,
                                             size_t nseg, size_t *bytes)
{
    (void)segs;
    (void)nseg;
    return ks_scratch_none(ctx, bytes);
}

extern "C" deftsim_status ks_segtopk(deftsim_kctx *ctx, const float *x, size_t n,
                                     const deftsim_kseg *segs, size_t nseg, deftsim_kidx *out,
                                     void *scratch, size_t scratch_bytes)
{
    (void)scratch;
    (void)scratch_bytes;
    deftsim_kctx *d = ks_st(ctx)->dev;
    size_t need = 0, ksum = 0;
    deftsim_status st = deftsim_k_segtopk_scratch(d, segs, nseg, &need);
    if (st) return st;
    for (size_t j = 0; j < nseg; j++) ksum += segs[j].k; /* the front checked the sum */
    ks_arg a[] = {in_(x, n * sizeof *x), out_(out, ksum * sizeof *out), work_(need)};
    KS_RUN(ctx, a, 0,
           deftsim_k_segtopk(d, (const float *)a[0].dev, n, segs, nseg, (deftsim_kidx *)a[1].dev,
                             a[2].dev, need));
}

extern "C" deftsim_status ks_seg_norms_scratch(const deftsim_kctx *ctx, const deftsim_kseg *segs,
                                               size_t nseg, size_t *bytes)
{
    (void)segs;
    (void)nseg;
    return ks_scratch_none(ctx, bytes);
}

extern "C" deftsim_status ks_seg_norms(deftsim_kctx *ctx, const float *x, size_t n,
                                       const deftsim_kseg *segs, size_t nseg, double *norms,
                                       void *scratch, size_t scratch_bytes)
{
    (void)scratch;
    (void)scratch_bytes;
    deftsim_kctx *d = ks_st(ctx)->dev;
    size_t need = 0;
    deftsim_status st = deftsim_k_seg_norms_scratch(d, segs, nseg, &need);
    if (st) return st;
    ks_arg a[] = {in_(x, n * sizeof *x), out_(norms, nseg * sizeof *norms), work_(need)};
    KS_RUN(ctx, a, 0,
           deftsim_k_seg_norms(d, (const float *)a[0].dev, n, segs, nseg, (double *)a[1].dev,
                               a[2].dev, need));
}

extern "C" deftsim_status ks_accumulate_scratch(const deftsim_kctx *ctx, const deftsim_kseg *segs,
                                                size_t nseg, size_t *bytes)
{
    (void)segs;
    (void)nseg;
    return ks_scratch_none(ctx, bytes);
}

extern "C" deftsim_status ks_accumulate(deftsim_kctx *ctx, float *acc, const float *g, size_t n,
                                        int mode, const deftsim_kseg *segs, size_t nseg,
                                        double *sumsq, void *scratch, size_t scratch_bytes)
{
    (void)scratch;
    (void)scratch_bytes;
    deftsim_kctx *d = ks_st(ctx)->dev;
    size_t need = 0;
    deftsim_status st = deftsim_k_accumulate_scratch(d, segs, nseg, &need);
    if (st) return st;
    ks_arg a[] = {inout_(acc, n * sizeof *acc), in_(g, n * sizeof *g),
                  out_(sumsq, nseg * sizeof *sumsq), work_(need)};
    KS_RUN(ctx, a, 0,
           deftsim_k_accumulate(d, (float *)a[0].dev, (const float *)a[1].dev, n, mode, segs,
                                nseg, (double *)a[2].dev, a[3].dev, need));
}

extern "C" deftsim_status ks_filter_ge(deftsim_kctx *ctx, const float *x, size_t n, float t,
                                       deftsim_kidx *out, size_t cap, size_t *count)
{
    /* At most n indices can pass: a capacity beyond that needs no device memory. */
    size_t dcap = cap < n ? cap : n;
    ks_arg a[] = {in_(x, n * sizeof *x), out_(out, dcap * sizeof *out)};
    ks_call c;
    deftsim_status st = ks_begin(ctx, &c, a, 2, 0);
    if (st) return st;
    st = deftsim_k_filter_ge(ks_st(ctx)->dev, (const float *)a[0].dev, n, t,
                             (deftsim_kidx *)a[1].dev, dcap, count);
    if (!st) a[1].down = (*count < dcap ? *count : dcap) * sizeof *out;
    return ks_end(ctx, &c, a, 2, st);
}

extern "C" deftsim_status ks_count_ge(deftsim_kctx *ctx, const float *x, size_t n, float t,
                                      size_t *count)
{
    ks_arg a[] = {in_(x, n * sizeof *x)};
    KS_RUN(ctx, a, 0, deftsim_k_count_ge(ks_st(ctx)->dev, (const float *)a[0].dev, n, t, count));
}

extern "C" deftsim_status ks_sample_strided(deftsim_kctx *ctx, const float *x, size_t n,
                                            size_t start, size_t stride, size_t count, float *out)
{
    ks_arg a[] = {in_(count ? x : NULL, n * sizeof *x), out_(out, count * sizeof *out)};
    KS_RUN(ctx, a, 0,
           deftsim_k_sample_strided(ks_st(ctx)->dev, (const float *)a[0].dev, n, start, stride,
                                    count, (float *)a[1].dev));
}

extern "C" deftsim_status ks_sample_random(deftsim_kctx *ctx, const float *x, size_t n,
                                           size_t count, uint64_t seed, float *out)
{
    ks_arg a[] = {in_(count ? x : NULL, n * sizeof *x), out_(out, count * sizeof *out)};
    KS_RUN(ctx, a, 0,
           deftsim_k_sample_random(ks_st(ctx)->dev, (const float *)a[0].dev, n, count, seed,
                                   (float *)a[1].dev));
}

extern "C" deftsim_status ks_gather(deftsim_kctx *ctx, const float *x, size_t n,
                                    const deftsim_kidx *idx, size_t m, float *out)
{
    /* x travels only when something is gathered (the front allows x == NULL for m == 0). */
    ks_arg a[] = {in_(m ? x : NULL, n * sizeof *x), in_(idx, m * sizeof *idx),
                  out_(out, m * sizeof *out)};
    KS_RUN(ctx, a, 0,
           deftsim_k_gather(ks_st(ctx)->dev, (const float *)a[0].dev, n,
                            (const deftsim_kidx *)a[1].dev, m, (float *)a[2].dev));
}

extern "C" deftsim_status ks_zero_at(deftsim_kctx *ctx, float *x, size_t n,
                                     const deftsim_kidx *idx, size_t m)
{
    ks_arg a[] = {inout_(m ? x : NULL, n * sizeof *x), in_(idx, m * sizeof *idx)};
    KS_RUN(ctx, a, 0,
           deftsim_k_zero_at(ks_st(ctx)->dev, (float *)a[0].dev, n,
                             (const deftsim_kidx *)a[1].dev, m));
}

extern "C" deftsim_status ks_scatter_add(deftsim_kctx *ctx, float *dst, size_t n,
                                         const deftsim_kidx *idx, const float *vals, size_t m)
{
    /* The device sorts the list with working memory from the attached pool, which is this
     * context's pool: reserve it with the buffers. */
    size_t work = 0;
    deftsim_status st = kc_scatter_add_work(n, m, &work);
    if (st) return st;
    ks_arg a[] = {inout_(m ? dst : NULL, n * sizeof *dst), in_(idx, m * sizeof *idx),
                  in_(vals, m * sizeof *vals)};
    KS_RUN(ctx, a, work,
           deftsim_k_scatter_add(ks_st(ctx)->dev, (float *)a[0].dev, n,
                                 (const deftsim_kidx *)a[1].dev, (const float *)a[2].dev, m));
}

extern "C" deftsim_status ks_union_scratch(const deftsim_kctx *ctx, size_t n, size_t *bytes)
{
    (void)n;
    return ks_scratch_none(ctx, bytes);
}

extern "C" deftsim_status ks_union(deftsim_kctx *ctx, size_t n, const deftsim_kidx *const *lists,
                                   const size_t *lens, size_t nlists, deftsim_kidx *out,
                                   size_t cap, size_t *count, void *scratch, size_t scratch_bytes)
{
    (void)scratch;
    (void)scratch_bytes;
    deftsim_kctx *d = ks_st(ctx)->dev;
    size_t need = 0;
    deftsim_status st = deftsim_k_union_scratch(d, n, &need);
    if (st) return st;
    /* The union holds at most n indices. */
    size_t dcap = cap < n ? cap : n;
    size_t na = nlists + 2;
    ks_arg *a = (ks_arg *)malloc(na * sizeof *a);
    const deftsim_kidx **dl = (const deftsim_kidx **)malloc((nlists ? nlists : 1) * sizeof *dl);
    if (!a || !dl) {
        free(a);
        free(dl);
        return deftsim_error_nomem("kernels");
    }
    for (size_t j = 0; j < nlists; j++) a[j] = in_(lens[j] ? lists[j] : NULL, lens[j] * sizeof **lists);
    a[nlists] = out_(out, dcap * sizeof *out);
    a[nlists + 1] = work_(need);
    ks_call c;
    if (!(st = ks_begin(ctx, &c, a, na, 0))) {
        for (size_t j = 0; j < nlists; j++) dl[j] = (const deftsim_kidx *)a[j].dev;
        st = deftsim_k_union(d, n, dl, lens, nlists, (deftsim_kidx *)a[nlists].dev, dcap, count,
                             a[nlists + 1].dev, need);
        if (!st) a[nlists].down = (*count < dcap ? *count : dcap) * sizeof *out;
        st = ks_end(ctx, &c, a, na, st);
    }
    free(a);
    free(dl);
    return st;
}

extern "C" deftsim_status ks_merge_topk_scratch(const deftsim_kctx *ctx, size_t na, size_t nb,
                                                size_t *bytes)
{
    (void)na;
    (void)nb;
    return ks_scratch_none(ctx, bytes);
}

extern "C" deftsim_status ks_merge_topk(deftsim_kctx *ctx, const deftsim_kidx *ia,
                                        const float *va, size_t na, const deftsim_kidx *ib,
                                        const float *vb, size_t nb, size_t k,
                                        deftsim_kidx *out_idx, float *out_val, size_t *out_n,
                                        void *scratch, size_t scratch_bytes)
{
    (void)scratch;
    (void)scratch_bytes;
    deftsim_kctx *d = ks_st(ctx)->dev;
    size_t need = 0;
    deftsim_status st = deftsim_k_merge_topk_scratch(d, na, nb, &need);
    if (st) return st;
    size_t m = k < na + nb ? k : na + nb; /* at most this many entries come out */
    ks_arg a[] = {in_(ia, na * sizeof *ia),         in_(va, na * sizeof *va),
                  in_(ib, nb * sizeof *ib),         in_(vb, nb * sizeof *vb),
                  out_(out_idx, m * sizeof *out_idx), out_(out_val, m * sizeof *out_val),
                  work_(need)};
    ks_call c;
    if ((st = ks_begin(ctx, &c, a, 7, 0))) return st;
    st = deftsim_k_merge_topk(d, (const deftsim_kidx *)a[0].dev, (const float *)a[1].dev, na,
                              (const deftsim_kidx *)a[2].dev, (const float *)a[3].dev, nb, k,
                              (deftsim_kidx *)a[4].dev, (float *)a[5].dev, out_n, a[6].dev, need);
    if (!st) {
        size_t got = *out_n < m ? *out_n : m;
        a[4].down = got * sizeof *out_idx;
        a[5].down = got * sizeof *out_val;
    }
    return ks_end(ctx, &c, a, 7, st);
}
