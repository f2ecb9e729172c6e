/* cuda_backend.cu - the CUDA backend's context: availability, stream, control block, staging
 * ring, the lazily completed record, pointer checks; the device memory pool and the copies of
 * deftsim_kcuda.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.cuh"

extern "C" {
#include "deftsim_kcuda.h"
}

deftsim_status kc_fail(cudaError_t e, const char *call, const char *file, int line)
{
    /* A file name without its directories keeps messages short and stable. */
    const char *base = strrchr(file, '/');
    return deftsim_error_set(DEFTSIM_E_RUNTIME, "kernels: cuda: %s failed (%s:%d): %s (%s)", call,
                             base ? base + 1 : file, line, cudaGetErrorString(e),
                             cudaGetErrorName(e));
}

/* ---- Availability -------------------------------------------------------------------------
 * Asked once per process: cudaGetDeviceCount initializes the runtime, which costs tens of
 * milliseconds with a driver and fails fast without one. */
static int g_probed;
static int g_available;
static char g_reason[200];

static void probe(void)
{
    if (g_probed) return;
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e == cudaErrorNoDevice) {
        snprintf(g_reason, sizeof g_reason, "no CUDA device found");
        (void)cudaGetLastError();
    } else if (e == cudaErrorInsufficientDriver) {
        /* Also what a machine without any NVIDIA driver reports. */
        snprintf(g_reason, sizeof g_reason,
                 "no NVIDIA driver, or one older than this build's CUDA runtime (%s)",
                 cudaGetErrorName(e));
        (void)cudaGetLastError();
    } else if (e != cudaSuccess) {
        snprintf(g_reason, sizeof g_reason, "the CUDA runtime finds no usable device: %s (%s)",
                 cudaGetErrorString(e), cudaGetErrorName(e));
        (void)cudaGetLastError();
    } else if (n <= 0) {
        snprintf(g_reason, sizeof g_reason, "no CUDA device found");
    } else {
        g_available = 1;
    }
    g_probed = 1;
}

extern "C" int kc_available(void)
{
    probe();
    return g_available;
}

extern "C" const char *kc_unavailable_reason(void)
{
    probe();
    return g_available ? NULL : g_reason;
}

extern "C" const char *deftsim_kcuda_unavailable(void) { return kc_unavailable_reason(); }

/* ---- Context --------------------------------------------------------------------------------- */

static void release_state(kc_state *s)
{
    if (!s) return;
    for (int i = 0; i < KC_STAGE_SLOTS; i++)
        if (s->stage_ev[i]) (void)cudaEventDestroy(s->stage_ev[i]);
    if (s->stage) (void)cudaFreeHost(s->stage);
    if (s->pin) (void)cudaFreeHost(s->pin);
    if (s->ctl) (void)cudaFree(s->ctl);
    if (s->stream) (void)cudaStreamDestroy(s->stream);
    free(s);
}

static deftsim_status init_state(kc_state *s)
{
    KC_CHECK(cudaGetDevice(&s->device));
    cudaDeviceProp p;
    KC_CHECK(cudaGetDeviceProperties(&p, s->device));
    s->sms = p.multiProcessorCount > 0 ? p.multiProcessorCount : 1;
    snprintf(s->isa, sizeof s->isa, "sm_%d%d", p.major, p.minor);
    snprintf(s->name, sizeof s->name, "%s (%s, %d SMs)", p.name, s->isa, s->sms);
    /* Non-blocking: the stream never waits for work other code queues on the legacy default
     * stream. */
    KC_CHECK(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking));
    KC_CHECK(cudaMalloc((void **)&s->ctl, sizeof(kc_ctl)));
    KC_CHECK(cudaMallocHost((void **)&s->pin, sizeof(kc_ctl)));
    KC_CHECK(cudaMallocHost((void **)&s->stage, KC_STAGE_SLOTS * KC_STAGE_SLOT));
    for (int i = 0; i < KC_STAGE_SLOTS; i++)
        KC_CHECK(cudaEventCreateWithFlags(&s->stage_ev[i], cudaEventDisableTiming));
    KC_CHECK(cudaMemsetAsync(s->ctl, 0, sizeof(kc_ctl), s->stream));
    KC_CHECK(cudaStreamSynchronize(s->stream));
    return DEFTSIM_OK;
}

extern "C" deftsim_status kc_init(deftsim_kctx *ctx)
{
    if (!kc_available())
        return deftsim_error_set(DEFTSIM_E_UNSUPPORTED, "kernels: cuda: %s", g_reason);
    kc_state *s = (kc_state *)calloc(1, sizeof *s);
    if (!s) return deftsim_error_nomem("kernels");
    deftsim_status st = init_state(s);
    if (st) {
        release_state(s);
        return st;
    }
    /* One host thread drives the device; the record's thread count says so. */
    if (ctx->threads == 0) ctx->threads = 1;
    ctx->state = s;
    return DEFTSIM_OK;
}

extern "C" void kc_fini(deftsim_kctx *ctx)
{
    kc_state *s = kc_st(ctx);
    if (!s) return;
    (void)cudaStreamSynchronize(s->stream);
    release_state(s);
    ctx->state = NULL;
}

deftsim_status kc_begin(deftsim_kctx *ctx, int what)
{
    kc_state *s = kc_st(ctx);
    ctx->last.isa = s->isa;
    ctx->last.threads = 1;
    s->stats_pending = 0;
    s->host_fallbacks = 0;
    size_t bytes = what == KC_CTL_ALL ? sizeof(kc_ctl) : offsetof(kc_ctl, g);
    KC_CHECK(cudaMemsetAsync(s->ctl, 0, bytes, s->stream));
    return DEFTSIM_OK;
}

void kc_pending(deftsim_kctx *ctx) { kc_st(ctx)->stats_pending = 1; }

deftsim_status kc_readback(deftsim_kctx *ctx)
{
    kc_state *s = kc_st(ctx);
    KC_CHECK(cudaMemcpyAsync(s->pin, s->ctl, offsetof(kc_ctl, g), cudaMemcpyDeviceToHost,
                             s->stream));
    KC_CHECK(cudaStreamSynchronize(s->stream));
    ctx->last.nan_count = (size_t)s->pin->st.nan;
    ctx->last.candidates = (size_t)s->pin->st.candidates;
    ctx->last.fallbacks = (size_t)s->pin->st.fallbacks + s->host_fallbacks;
    s->stats_pending = 0;
    return DEFTSIM_OK;
}

extern "C" void kc_record(deftsim_kctx *ctx)
{
    kc_state *s = kc_st(ctx);
    if (!s || !s->stats_pending) return;
    /* A failure here (a kernel fault) leaves the counts as they were; the next operation or
     * deftsim_kcuda_sync() reports it. */
    deftsim_status st = kc_readback(ctx);
    (void)st;
}

deftsim_status kc_check_dev(const deftsim_kctx *ctx, const void *p, const char *what)
{
    (void)ctx;
    if (!p) return DEFTSIM_OK;
    cudaPointerAttributes a;
    cudaError_t e = cudaPointerGetAttributes(&a, p);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return deftsim_error_set(DEFTSIM_E_USAGE,
                                 "kernels: cuda: %s is not device memory (%s); the cuda backend "
                                 "reads and writes device memory (deftsim_kcuda.h)",
                                 what, cudaGetErrorString(e));
    }
    if (a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged)
        return deftsim_error_set(DEFTSIM_E_USAGE,
                                 "kernels: cuda: %s is host memory; the cuda backend reads and "
                                 "writes device memory (deftsim_kcuda.h)",
                                 what);
    return DEFTSIM_OK;
}

/* ---- Staging ring ---------------------------------------------------------------------------- */

deftsim_status kc_stage_take(kc_state *s, size_t bytes, kc_stage *out)
{
    if (bytes > KC_STAGE_SLOT) {
        /* Larger than a slot (a table of over 100,000 fragments): plain memory, copied
         * synchronously by kc_stage_put. */
        out->slot = -1;
        out->host = malloc(bytes ? bytes : 1);
        if (!out->host) return deftsim_error_nomem("kernels");
        return DEFTSIM_OK;
    }
    int i = (int)(s->stage_next++ % KC_STAGE_SLOTS);
    /* The copy that last used this slot was queued KC_STAGE_SLOTS uploads ago; the host may
     * run that far ahead of the device and no farther. */
    if (s->stage_busy[i]) KC_CHECK(cudaEventSynchronize(s->stage_ev[i]));
    s->stage_busy[i] = 0;
    out->slot = i;
    out->host = s->stage + (size_t)i * KC_STAGE_SLOT;
    return DEFTSIM_OK;
}

deftsim_status kc_stage_put(kc_state *s, kc_stage *st, void *dst, size_t bytes)
{
    if (st->slot < 0) {
        /* Pageable memory: the copy must finish before the memory may change. */
        if (bytes) {
            KC_CHECK(cudaMemcpyAsync(dst, st->host, bytes, cudaMemcpyHostToDevice, s->stream));
            KC_CHECK(cudaStreamSynchronize(s->stream));
        }
        return DEFTSIM_OK;
    }
    if (bytes) {
        KC_CHECK(cudaMemcpyAsync(dst, st->host, bytes, cudaMemcpyHostToDevice, s->stream));
        KC_CHECK(cudaEventRecord(s->stage_ev[st->slot], s->stream));
        s->stage_busy[st->slot] = 1;
    }
    return DEFTSIM_OK;
}

void kc_stage_done(kc_stage *st)
{
    if (st->slot < 0) free(st->host);
    st->host = NULL;
}

/* ---- Public helpers of deftsim_kcuda.h ------------------------------------------------------- */

static deftsim_status want_cuda(const deftsim_kctx *ctx, const char *fn)
{
    if (!ctx || strcmp(deftsim_kctx_backend(ctx), "cuda") != 0)
        return deftsim_error_set(DEFTSIM_E_USAGE, "kernels: %s needs a context of backend cuda",
                                 fn);
    return DEFTSIM_OK;
}

extern "C" const char *deftsim_kcuda_device_name(const deftsim_kctx *ctx)
{
    return want_cuda(ctx, "deftsim_kcuda_device_name") ? "" : kc_st(ctx)->name;
}

extern "C" void *deftsim_kcuda_stream(deftsim_kctx *ctx)
{
    return want_cuda(ctx, "deftsim_kcuda_stream") ? NULL : (void *)kc_st(ctx)->stream;
}

extern "C" deftsim_status deftsim_kcuda_sync(deftsim_kctx *ctx)
{
    deftsim_status st = want_cuda(ctx, "deftsim_kcuda_sync");
    if (st) return st;
    KC_CHECK(cudaStreamSynchronize(kc_st(ctx)->stream));
    return DEFTSIM_OK;
}

extern "C" deftsim_status deftsim_kcuda_upload(deftsim_kctx *ctx, void *dst_dev,
                                               const void *src_host, size_t bytes)
{
    deftsim_status st = want_cuda(ctx, "deftsim_kcuda_upload");
    if (st || (st = kc_check_dev(ctx, dst_dev, "upload destination"))) return st;
    if (!bytes) return DEFTSIM_OK;
    kc_state *s = kc_st(ctx);
    KC_CHECK(cudaMemcpyAsync(dst_dev, src_host, bytes, cudaMemcpyHostToDevice, s->stream));
    KC_CHECK(cudaStreamSynchronize(s->stream));
    return DEFTSIM_OK;
}

extern "C" deftsim_status deftsim_kcuda_download(deftsim_kctx *ctx, void *dst_host,
                                                 const void *src_dev, size_t bytes)
{
    deftsim_status st = want_cuda(ctx, "deftsim_kcuda_download");
    if (st || (st = kc_check_dev(ctx, src_dev, "download source"))) return st;
    if (!bytes) return DEFTSIM_OK;
    kc_state *s = kc_st(ctx);
    KC_CHECK(cudaMemcpyAsync(dst_host, src_dev, bytes, cudaMemcpyDeviceToHost, s->stream));
    KC_CHECK(cudaStreamSynchronize(s->stream));
    return DEFTSIM_OK;
}

extern "C" deftsim_status deftsim_kcuda_memset(deftsim_kctx *ctx, void *dst_dev, int byte,
                                               size_t bytes)
{
    deftsim_status st = want_cuda(ctx, "deftsim_kcuda_memset");
    if (st || (st = kc_check_dev(ctx, dst_dev, "memset destination"))) return st;
    if (!bytes) return DEFTSIM_OK;
    KC_CHECK(cudaMemsetAsync(dst_dev, byte, bytes, kc_st(ctx)->stream));
    return DEFTSIM_OK;
}

extern "C" deftsim_status deftsim_kcuda_attach_pool(deftsim_kctx *ctx, deftsim_kcuda_pool *pool)
{
    deftsim_status st = want_cuda(ctx, "deftsim_kcuda_attach_pool");
    if (st) return st;
    kc_st(ctx)->pool = pool;
    return DEFTSIM_OK;
}

/* %globaltimer counts nanoseconds on every GPU since Volta. */
__global__ void kc_spin_kernel(unsigned long long ns)
{
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < ns);
}

extern "C" deftsim_status deftsim_kcuda_spin(deftsim_kctx *ctx, double seconds)
{
    deftsim_status st = want_cuda(ctx, "deftsim_kcuda_spin");
    if (st) return st;
    if (!(seconds > 0)) return DEFTSIM_OK;
    if (seconds > 10) seconds = 10;
    kc_spin_kernel<<<1, 1, 0, kc_st(ctx)->stream>>>((unsigned long long)(seconds * 1e9));
    KC_LAUNCHED();
    return DEFTSIM_OK;
}

/* ---- Device memory pool -------------------------------------------------------------------
 * Blocks are kept in address order as (offset, size, used); allocation splits the first free
 * block that fits, release merges a block with free neighbours. */

typedef struct {
    size_t off, size;
    int used;
} pool_block;

struct deftsim_kcuda_pool {
    unsigned char *base;
    size_t capacity, in_use;
    pool_block *b;
    size_t nb, cap_b;
};

#define POOL_ALIGN 256

extern "C" deftsim_status deftsim_kcuda_pool_new(size_t bytes, deftsim_kcuda_pool **out)
{
    if (!out) return deftsim_error_set(DEFTSIM_E_USAGE, "kernels: cuda pool: NULL result pointer");
    *out = NULL;
    if (!kc_available())
        return deftsim_error_set(DEFTSIM_E_UNSUPPORTED, "kernels: cuda pool: %s", g_reason);
    size_t cap = (bytes + POOL_ALIGN - 1) / POOL_ALIGN * POOL_ALIGN;
    if (cap < bytes) return deftsim_error_set(DEFTSIM_E_USAGE, "kernels: cuda pool: size overflows");
    if (cap == 0) cap = POOL_ALIGN;
    deftsim_kcuda_pool *p = (deftsim_kcuda_pool *)calloc(1, sizeof *p);
    if (!p) return deftsim_error_nomem("kernels");
    p->cap_b = 64;
    p->b = (pool_block *)malloc(p->cap_b * sizeof *p->b);
    if (!p->b) {
        free(p);
        return deftsim_error_nomem("kernels");
    }
    cudaError_t e = cudaMalloc((void **)&p->base, cap);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        free(p->b);
        free(p);
        if (e == cudaErrorMemoryAllocation) {
            size_t fr = 0, tot = 0;
            (void)cudaMemGetInfo(&fr, &tot);
            return deftsim_error_set(DEFTSIM_E_NOMEM,
                                     "kernels: cuda pool: cannot allocate %zu bytes of device "
                                     "memory (%zu of %zu free)",
                                     cap, fr, tot);
        }
        return kc_fail(e, "cudaMalloc(pool)", __FILE__, __LINE__);
    }
    p->capacity = cap;
    p->nb = 1;
    p->b[0].off = 0;
    p->b[0].size = cap;
    p->b[0].used = 0;
    *out = p;
    return DEFTSIM_OK;
}

extern "C" void deftsim_kcuda_pool_free(deftsim_kcuda_pool *p)
{
    if (!p) return;
    (void)cudaFree(p->base);
    free(p->b);
    free(p);
}

extern "C" deftsim_status deftsim_kcuda_alloc(deftsim_kcuda_pool *p, size_t bytes, void **dev)
{
    if (!p || !dev) return deftsim_error_set(DEFTSIM_E_USAGE, "kernels: cuda pool: NULL argument");
    *dev = NULL;
    size_t want = (bytes + POOL_ALIGN - 1) / POOL_ALIGN * POOL_ALIGN;
    if (want < bytes) return deftsim_error_set(DEFTSIM_E_NOMEM, "kernels: cuda pool: size overflows");
    if (want == 0) want = POOL_ALIGN;
    size_t largest = 0;
    for (size_t i = 0; i < p->nb; i++) {
        pool_block *b = &p->b[i];
        if (b->used) continue;
        if (b->size > largest) largest = b->size;
        if (b->size < want) continue;
        if (b->size > want) {
            if (p->nb == p->cap_b) {
                pool_block *nbk = (pool_block *)realloc(p->b, 2 * p->cap_b * sizeof *nbk);
                if (!nbk) return deftsim_error_nomem("kernels");
                p->b = nbk;
                p->cap_b *= 2;
                b = &p->b[i];
            }
            memmove(&p->b[i + 2], &p->b[i + 1], (p->nb - i - 1) * sizeof *p->b);
            p->b[i + 1].off = b->off + want;
            p->b[i + 1].size = b->size - want;
            p->b[i + 1].used = 0;
            b->size = want;
            p->nb++;
        }
        b->used = 1;
        p->in_use += b->size;
        *dev = p->base + b->off;
        return DEFTSIM_OK;
    }
    return deftsim_error_set(DEFTSIM_E_NOMEM,
                             "kernels: cuda pool: %zu bytes requested, the largest free block "
                             "holds %zu (%zu of %zu in use)",
                             bytes, largest, p->in_use, p->capacity);
}

extern "C" void deftsim_kcuda_release(deftsim_kcuda_pool *p, void *dev)
{
    if (!p || !dev) return;
    size_t off = (size_t)((unsigned char *)dev - p->base);
    size_t lo = 0, hi = p->nb;
    while (lo < hi) { /* first block with offset >= off */
        size_t mid = lo + (hi - lo) / 2;
        if (p->b[mid].off < off) lo = mid + 1;
        else hi = mid;
    }
    if (lo >= p->nb || p->b[lo].off != off || !p->b[lo].used) return; /* not ours */
    size_t i = lo;
    p->b[i].used = 0;
    p->in_use -= p->b[i].size;
    if (i + 1 < p->nb && !p->b[i + 1].used) {
        p->b[i].size += p->b[i + 1].size;
        memmove(&p->b[i + 1], &p->b[i + 2], (p->nb - i - 2) * sizeof *p->b);
        p->nb--;
    }
    if (i > 0 && !p->b[i - 1].used) {
        p->b[i - 1].size += p->b[i].size;
        memmove(&p->b[i], &p->b[i + 1], (p->nb - i - 1) * sizeof *p->b);
        p->nb--;
    }
}

extern "C" size_t deftsim_kcuda_pool_capacity(const deftsim_kcuda_pool *p)
{
    return p ? p->capacity : 0;
}

extern "C" size_t deftsim_kcuda_pool_in_use(const deftsim_kcuda_pool *p) { return p ? p->in_use : 0; }
