/* cuda_ops.cu - the streaming and sparse operations on the device: absmax, fragment norms,
 * threshold filter and count, sampling, gather, zero, scatter-add, union, merge.
 *
 * Results equal the CPU backend's bit for bit where the contract fixes them: norms sum in the
 * CPU's fixed order (blocks of 4096, 32 lanes, the same tree), scatter-add and the merge sum
 * duplicates in list order (a stable sort by index, then one thread per run), and sampling
 * uses the same counter-based generator. Arithmetic that must not fuse uses the explicit
 * round-to-nearest intrinsics, whatever -fmad says. */
#include <cub/device/device_radix_sort.cuh>
#include <stdio.h>
#include <string.h>

#include "cuda_internal.cuh"
#include "deftsim_rng.h"

extern "C" {
#include "deftsim_kcuda.h"
}

/* Defined in cuda_topk.cu. */
extern "C" deftsim_status kc_grid_select_cands(deftsim_kctx *ctx, uint2 *cand, uint2 *spare,
                                               uint32_t m, uint32_t k, void *fstate_dev,
                                               uint32_t *out);
extern "C" size_t kc_fstate_bytes(void);

#define KC_UNROLL 8

static unsigned grid_for(const kc_state *s, size_t n, unsigned per_thread)
{
    return kc_blocks(n, (size_t)KC_THREADS * per_thread, (unsigned)s->sms * 8u);
}

/* ---- absmax ------------------------------------------------------------------------------- */

__global__ void __launch_bounds__(KC_THREADS)
    kc_absmax_kernel(const float *__restrict__ x, size_t n, kc_ctl *ctl)
{
    const size_t stride = (size_t)gridDim.x * KC_THREADS;
    uint32_t mx = 0, nan = 0;
    for (size_t b = (size_t)blockIdx.x * KC_THREADS + threadIdx.x; b < n; b += KC_UNROLL * stride) {
        /* Eight independent loads in flight per thread keep the memory system busy. */
        uint32_t r[KC_UNROLL];
#pragma unroll
        for (int j = 0; j < KC_UNROLL; j++) {
            size_t i = b + (size_t)j * stride;
            r[j] = i < n ? kc_rank(__ldg(x + i)) : 1u;
        }
#pragma unroll
        for (int j = 0; j < KC_UNROLL; j++) {
            nan += r[j] == 0u;
            mx = r[j] > mx ? r[j] : mx;
        }
    }
    mx = kc_warp_max(mx);
    if ((threadIdx.x & 31) == 0 && mx > 1u) atomicMax(&ctl->sc.absmax, mx);
    kc_add_count(&ctl->st.nan, nan);
}

extern "C" deftsim_status kc_absmax(deftsim_kctx *ctx, const float *x, size_t n, float *out)
{
    kc_state *s = kc_st(ctx);
    deftsim_status st;
    if ((st = kc_check_dev(ctx, x, "x")) || (st = kc_begin(ctx, KC_CTL_SMALL))) return st;
    if (n) {
        kc_absmax_kernel<<<grid_for(s, n, KC_UNROLL), KC_THREADS, 0, s->stream>>>(x, n, s->ctl);
        KC_LAUNCHED();
    }
    if ((st = kc_readback(ctx))) return st;
    /* The largest rank among numbers, minus one, is the bit pattern of the largest |x|. */
    uint32_t r = s->pin->sc.absmax;
    float v = 0.0f;
    if (r > 1u) {
        uint32_t bits = r - 1u;
        memcpy(&v, &bits, sizeof v);
    }
    *out = v;
    return DEFTSIM_OK;
}

/* ---- Fragment norms ---------------------------------------------------------------------------
 * The CPU's order: each fragment cut into blocks of 4096 from its start; a block's sum of
 * squares in double over 32 lanes (lane j takes elements j, j + 32, ... of the whole 32-element
 * rows), the lanes combined as ((l[j] + l[j+8]) + (l[j+16] + l[j+24])), then pairs j, j + 4,
 * then (c0 + c2) + (c1 + c3), then the tail elements one by one; a fragment's sum adds its
 * blocks in order. One warp per block is exactly those 32 lanes. */

#define KC_NORM_BLOCK 4096u

typedef struct {
    uint32_t off, len;
    unsigned long long b0; /* first block of the fragment in the global block list */
} kc_nfrag;

__global__ void __launch_bounds__(KC_THREADS)
    kc_sumsq_kernel(const float *__restrict__ x, const kc_nfrag *fr, uint32_t nseg,
                    unsigned long long nblocks, double *part, kc_ctl *ctl)
{
    const unsigned lane = threadIdx.x & 31;
    const unsigned long long b = (unsigned long long)blockIdx.x * KC_WARPS + (threadIdx.x >> 5);
    if (b >= nblocks) return; /* the whole warp */
    uint32_t lo = 0, hi = nseg; /* the last fragment with b0 <= b (empty ones have no blocks) */
    while (hi - lo > 1) {
        uint32_t mid = (lo + hi) >> 1;
        if (fr[mid].b0 <= b) lo = mid;
        else hi = mid;
    }
    const kc_nfrag f = fr[lo];
    const uint32_t q = (uint32_t)(b - f.b0);
    const float *p = x + f.off + (size_t)q * KC_NORM_BLOCK;
    uint32_t len = f.len - q * KC_NORM_BLOCK;
    if (len > KC_NORM_BLOCK) len = KC_NORM_BLOCK;
    const uint32_t full = len / 32 * 32;
    double l = 0.0;
    uint32_t nan = 0;
    for (uint32_t i = lane; i < full; i += 32) {
        float v = __ldg(p + i);
        nan += v != v;
        l = __dadd_rn(l, __dmul_rn((double)v, (double)v));
    }
    double l8 = __shfl_down_sync(0xffffffffu, l, 8);
    double l16 = __shfl_down_sync(0xffffffffu, l, 16);
    double l24 = __shfl_down_sync(0xffffffffu, l, 24);
    double bj = __dadd_rn(__dadd_rn(l, l8), __dadd_rn(l16, l24)); /* lanes 0..7 */
    double b4 = __shfl_down_sync(0xffffffffu, bj, 4);
    double cj = __dadd_rn(bj, b4); /* lanes 0..3 */
    double c1 = __shfl_sync(0xffffffffu, cj, 1);
    double c2 = __shfl_sync(0xffffffffu, cj, 2);
    double c3 = __shfl_sync(0xffffffffu, cj, 3);
    if (lane == 0) {
        double sum = __dadd_rn(__dadd_rn(cj, c2), __dadd_rn(c1, c3));
        for (uint32_t i = full; i < len; i++) {
            float v = __ldg(p + i);
            nan += v != v;
            sum = __dadd_rn(sum, __dmul_rn((double)v, (double)v));
        }
        part[b] = sum;
    }
    kc_add_count(&ctl->st.nan, nan);
}

__global__ void kc_norm_finish_kernel(const kc_nfrag *fr, uint32_t nseg, const double *part,
                                      double *norms)
{
    for (uint32_t j = blockIdx.x * blockDim.x + threadIdx.x; j < nseg; j += gridDim.x * blockDim.x) {
        const kc_nfrag f = fr[j];
        unsigned long long nb = (f.len + KC_NORM_BLOCK - 1) / KC_NORM_BLOCK;
        double s = 0.0;
        for (unsigned long long q = 0; q < nb; q++) s = __dadd_rn(s, part[f.b0 + q]);
        norms[j] = __dsqrt_rn(s);
    }
}

static unsigned long long norm_blocks(const deftsim_kseg *segs, size_t nseg)
{
    unsigned long long nb = 0;
    for (size_t j = 0; j < nseg; j++) nb += (segs[j].len + KC_NORM_BLOCK - 1) / KC_NORM_BLOCK;
    return nb;
}

extern "C" deftsim_status kc_seg_norms_scratch(const deftsim_kctx *ctx, const deftsim_kseg *segs,
                                               size_t nseg, size_t *bytes)
{
    (void)ctx;
    *bytes = nseg ? 256 + kc_round(nseg * sizeof(kc_nfrag)) +
                        kc_round((size_t)norm_blocks(segs, nseg) * sizeof(double))
                  : 0;
    return DEFTSIM_OK;
}

extern "C" deftsim_status kc_seg_norms(deftsim_kctx *ctx, const float *x, size_t n,
                                       const deftsim_kseg *segs, size_t nseg, double *norms,
                                       void *scratch, size_t scratch_bytes)
{
    (void)n;
    kc_state *s = kc_st(ctx);
    deftsim_status st;
    if ((st = kc_check_dev(ctx, x, "x")) || (st = kc_check_dev(ctx, norms, "norms_out")) ||
        (st = kc_check_dev(ctx, nseg ? scratch : NULL, "scratch")) ||
        (st = kc_begin(ctx, KC_CTL_SMALL)))
        return st;
    kc_pending(ctx);
    if (!nseg) return DEFTSIM_OK;
    if (nseg > UINT32_MAX)
        return deftsim_error_set(DEFTSIM_E_INPUT, "kernels: cuda: seg_norms: %zu fragments", nseg);
    kc_arena a;
    kc_arena_init(&a, scratch, scratch_bytes);
    kc_nfrag *d_fr = (kc_nfrag *)kc_take(&a, nseg * sizeof(kc_nfrag));
    unsigned long long nb = norm_blocks(segs, nseg);
    double *part = (double *)kc_take(&a, (size_t)nb * sizeof(double));
    kc_stage sg;
    if ((st = kc_stage_take(s, nseg * sizeof(kc_nfrag), &sg))) return st;
    kc_nfrag *h = (kc_nfrag *)sg.host;
    unsigned long long b0 = 0;
    for (size_t j = 0; j < nseg; j++) {
        h[j].off = (uint32_t)segs[j].offset;
        h[j].len = (uint32_t)segs[j].len;
        h[j].b0 = b0;
        b0 += (segs[j].len + KC_NORM_BLOCK - 1) / KC_NORM_BLOCK;
    }
    st = kc_stage_put(s, &sg, d_fr, nseg * sizeof(kc_nfrag));
    kc_stage_done(&sg);
    if (st) return st;
    if (nb) {
        unsigned long long g = (nb + KC_WARPS - 1) / KC_WARPS;
        if (g > 0x7fffffffull)
            return deftsim_error_set(DEFTSIM_E_INPUT, "kernels: cuda: seg_norms: too many blocks");
        kc_sumsq_kernel<<<(unsigned)g, KC_THREADS, 0, s->stream>>>(x, d_fr, (uint32_t)nseg, nb,
                                                                  part, s->ctl);
        KC_LAUNCHED();
    }
    kc_norm_finish_kernel<<<kc_blocks(nseg, KC_THREADS, 1024), KC_THREADS, 0, s->stream>>>(
        d_fr, (uint32_t)nseg, part, norms);
    KC_LAUNCHED();
    return DEFTSIM_OK;
}

/* ---- Accumulate with fragment sums of squares -------------------------------------------------
 * acc = acc + g (or g), fused with the norms' sums: the items are the norm blocks of every
 * fragment (4096 from its start) and the gaps between fragments cut into blocks of 4096; one
 * warp per item, the lanes and their fold exactly as kc_sumsq_kernel (so the CPU's order), the
 * tail on lane 0. A fragment's sum adds its blocks in order from 0.0 (kc_acc_finish_kernel).
 * Compiled, not yet run on a GPU: the CPU-equality tests of tests/gpu have not seen it. */

typedef struct {
    uint32_t off, len;
    unsigned long long b0; /* first item of the entry in the global item list */
    unsigned long long p0; /* fragments: first block in the part array */
    uint32_t seg;          /* the fragment, or UINT32_MAX for a gap */
} kc_aent;

__global__ void __launch_bounds__(KC_THREADS)
    kc_acc_kernel(float *__restrict__ acc, const float *__restrict__ g, int copy,
                  const kc_aent *en, uint32_t nent, unsigned long long nitems, double *part,
                  kc_ctl *ctl)
{
    const unsigned lane = threadIdx.x & 31;
    const unsigned long long b = (unsigned long long)blockIdx.x * KC_WARPS + (threadIdx.x >> 5);
    if (b >= nitems) return; /* the whole warp */
    uint32_t lo = 0, hi = nent; /* the last entry with b0 <= b (empty ones have no items) */
    while (hi - lo > 1) {
        uint32_t mid = (lo + hi) >> 1;
        if (en[mid].b0 <= b) lo = mid;
        else hi = mid;
    }
    const kc_aent e = en[lo];
    const uint32_t q = (uint32_t)(b - e.b0);
    float *pa = acc + e.off + (size_t)q * KC_NORM_BLOCK;
    const float *pg = g + e.off + (size_t)q * KC_NORM_BLOCK;
    uint32_t len = e.len - q * KC_NORM_BLOCK;
    if (len > KC_NORM_BLOCK) len = KC_NORM_BLOCK;
    const uint32_t full = len / 32 * 32;
    double l = 0.0;
    uint32_t nan = 0;
    for (uint32_t i = lane; i < full; i += 32) {
        float v = copy ? __ldg(pg + i) : __fadd_rn(pa[i], __ldg(pg + i));
        pa[i] = v;
        nan += v != v;
        l = __dadd_rn(l, __dmul_rn((double)v, (double)v));
    }
    double l8 = __shfl_down_sync(0xffffffffu, l, 8);
    double l16 = __shfl_down_sync(0xffffffffu, l, 16);
    double l24 = __shfl_down_sync(0xffffffffu, l, 24);
    double bj = __dadd_rn(__dadd_rn(l, l8), __dadd_rn(l16, l24)); /* lanes 0..7 */
    double b4 = __shfl_down_sync(0xffffffffu, bj, 4);
    double cj = __dadd_rn(bj, b4); /* lanes 0..3 */
    double c1 = __shfl_sync(0xffffffffu, cj, 1);
    double c2 = __shfl_sync(0xffffffffu, cj, 2);
    double c3 = __shfl_sync(0xffffffffu, cj, 3);
    if (lane == 0) {
        double sum = __dadd_rn(__dadd_rn(cj, c2), __dadd_rn(c1, c3));
        for (uint32_t i = full; i < len; i++) {
            float v = copy ? __ldg(pg + i) : __fadd_rn(pa[i], __ldg(pg + i));
            pa[i] = v;
            nan += v != v;
            sum = __dadd_rn(sum, __dmul_rn((double)v, (double)v));
        }
        if (e.seg != UINT32_MAX) part[e.p0 + q] = sum;
    }
    /* NaNs counted in the fragments only, as the CPU backend counts them. */
    if (e.seg != UINT32_MAX) kc_add_count(&ctl->st.nan, nan);
}

__global__ void kc_acc_finish_kernel(const kc_aent *en, uint32_t nent, const double *part,
                                     double *sumsq)
{
    for (uint32_t j = blockIdx.x * blockDim.x + threadIdx.x; j < nent; j += gridDim.x * blockDim.x) {
        const kc_aent e = en[j];
        if (e.seg == UINT32_MAX) continue;
        unsigned long long nb = (e.len + KC_NORM_BLOCK - 1) / KC_NORM_BLOCK;
        double s = 0.0;
        for (unsigned long long q = 0; q < nb; q++) s = __dadd_rn(s, part[e.p0 + q]);
        sumsq[e.seg] = s;
    }
}

extern "C" deftsim_status kc_accumulate_scratch(const deftsim_kctx *ctx, const deftsim_kseg *segs,
                                                size_t nseg, size_t *bytes)
{
    (void)ctx;
    *bytes = 256 + kc_round((2 * nseg + 1) * sizeof(kc_aent)) +
             kc_round((size_t)norm_blocks(segs, nseg) * sizeof(double));
    return DEFTSIM_OK;
}

extern "C" deftsim_status kc_accumulate(deftsim_kctx *ctx, float *acc, const float *g, size_t n,
                                        int mode, const deftsim_kseg *segs, size_t nseg,
                                        double *sumsq, void *scratch, size_t scratch_bytes)
{
    kc_state *s = kc_st(ctx);
    deftsim_status st;
    if ((st = kc_check_dev(ctx, n ? acc : NULL, "acc")) ||
        (st = kc_check_dev(ctx, n ? g : NULL, "g")) ||
        (st = kc_check_dev(ctx, nseg ? sumsq : NULL, "sumsq_out")) ||
        (st = kc_check_dev(ctx, scratch, "scratch")) || (st = kc_begin(ctx, KC_CTL_SMALL)))
        return st;
    kc_pending(ctx);
    if (nseg >= UINT32_MAX / 2)
        return deftsim_error_set(DEFTSIM_E_INPUT, "kernels: cuda: accumulate: %zu fragments", nseg);
    const size_t cap = 2 * nseg + 1;
    kc_arena a;
    kc_arena_init(&a, scratch, scratch_bytes);
    kc_aent *d_en = (kc_aent *)kc_take(&a, cap * sizeof(kc_aent));
    double *part = (double *)kc_take(&a, (size_t)norm_blocks(segs, nseg) * sizeof(double));
    kc_stage sg;
    if ((st = kc_stage_take(s, cap * sizeof(kc_aent), &sg))) return st;
    kc_aent *h = (kc_aent *)sg.host;
    unsigned long long items = 0, p0 = 0;
    size_t nent = 0, pos = 0;
    for (size_t j = 0; j <= nseg; j++) {
        size_t start = j < nseg ? segs[j].offset : n;
        if (start > pos) { /* the gap before fragment j (after the last: up to n) */
            h[nent] = kc_aent{(uint32_t)pos, (uint32_t)(start - pos), items, 0, UINT32_MAX};
            items += (start - pos + KC_NORM_BLOCK - 1) / KC_NORM_BLOCK;
            nent++;
        }
        if (j == nseg) break;
        h[nent] = kc_aent{(uint32_t)segs[j].offset, (uint32_t)segs[j].len, items, p0, (uint32_t)j};
        unsigned long long fb = (segs[j].len + KC_NORM_BLOCK - 1) / KC_NORM_BLOCK;
        items += fb;
        p0 += fb;
        nent++;
        pos = segs[j].offset + segs[j].len;
    }
    st = kc_stage_put(s, &sg, d_en, nent * sizeof(kc_aent));
    kc_stage_done(&sg);
    if (st) return st;
    if (items) {
        unsigned long long gr = (items + KC_WARPS - 1) / KC_WARPS;
        if (gr > 0x7fffffffull)
            return deftsim_error_set(DEFTSIM_E_INPUT, "kernels: cuda: accumulate: too many blocks");
        kc_acc_kernel<<<(unsigned)gr, KC_THREADS, 0, s->stream>>>(
            acc, g, mode == DEFTSIM_KACC_COPY, d_en, (uint32_t)nent, items, part, s->ctl);
        KC_LAUNCHED();
    }
    if (nseg) {
        kc_acc_finish_kernel<<<kc_blocks(nent, KC_THREADS, 1024), KC_THREADS, 0, s->stream>>>(
            d_en, (uint32_t)nent, part, sumsq);
        KC_LAUNCHED();
    }
    return DEFTSIM_OK;
}

/* ---- Threshold filter and count --------------------------------------------------------------- */

#define KC_FITEMS 16

/* Every index with rank >= T (T >= 1, so never NaN) counted; the first `cap` slots of the
 * count written (which indices get them is unspecified, as the contract allows). */
__global__ void __launch_bounds__(KC_THREADS)
    kc_filter_ge_kernel(const float *__restrict__ x, size_t n, uint32_t T, uint32_t *out,
                        size_t cap, kc_ctl *ctl)
{
    __shared__ unsigned long long s_base;
    const size_t tile = (size_t)KC_THREADS * KC_FITEMS;
    uint32_t nan = 0;
    for (size_t t0 = (size_t)blockIdx.x * tile; t0 < n; t0 += (size_t)gridDim.x * tile) {
        uint32_t pass = 0, c = 0;
#pragma unroll
        for (int it = 0; it < KC_FITEMS; it++) {
            size_t i = t0 + (size_t)it * KC_THREADS + threadIdx.x;
            if (i < n) {
                uint32_t r = kc_rank(__ldg(x + i));
                nan += r == 0u;
                if (r >= T) {
                    pass |= 1u << it;
                    c++;
                }
            }
        }
        uint32_t tot, ex = kc_block_excl_scan(c, &tot);
        if (threadIdx.x == 0) s_base = tot ? atomicAdd(&ctl->sc.count, (kc_u64)tot) : 0ull;
        __syncthreads();
        unsigned long long o = s_base + ex;
        if (out && pass) {
#pragma unroll
            for (int it = 0; it < KC_FITEMS; it++)
                if ((pass >> it) & 1u) {
                    if (o < cap) out[o] = (uint32_t)(t0 + (size_t)it * KC_THREADS + threadIdx.x);
                    o++;
                }
        }
        __syncthreads();
    }
    kc_add_count(&ctl->st.nan, nan);
}

/* |x| >= t as a rank: t <= 0 (either zero, -Inf) admits every number. */
static uint32_t rank_threshold(float t)
{
    if (t <= 0.0f) return 1u;
    uint32_t u;
    memcpy(&u, &t, sizeof u);
    return (u & 0x7fffffffu) + 1u;
}

static deftsim_status filter_run(deftsim_kctx *ctx, const float *x, size_t n, float t,
                                 uint32_t *out, size_t cap, size_t *count)
{
    kc_state *s = kc_st(ctx);
    deftsim_status st;
    if ((st = kc_check_dev(ctx, x, "x")) || (st = kc_check_dev(ctx, cap ? out : NULL, "idx_out")) ||
        (st = kc_begin(ctx, KC_CTL_SMALL)))
        return st;
    if (n) {
        kc_filter_ge_kernel<<<grid_for(s, n, KC_FITEMS), KC_THREADS, 0, s->stream>>>(
            x, n, rank_threshold(t), cap ? out : NULL, cap, s->ctl);
        KC_LAUNCHED();
    }
    if ((st = kc_readback(ctx))) return st;
    *count = (size_t)s->pin->sc.count;
    return DEFTSIM_OK;
}

extern "C" deftsim_status kc_filter_ge(deftsim_kctx *ctx, const float *x, size_t n, float t,
                                       deftsim_kidx *out, size_t cap, size_t *count)
{
    return filter_run(ctx, x, n, t, out, cap, count);
}

extern "C" deftsim_status kc_count_ge(deftsim_kctx *ctx, const float *x, size_t n, float t,
                                      size_t *count)
{
    return filter_run(ctx, x, n, t, NULL, 0, count);
}

/* ---- Sampling ------------------------------------------------------------------------------ */

__global__ void kc_strided_kernel(const float *__restrict__ x, size_t start, size_t stride,
                                  size_t count, float *out, kc_ctl *ctl)
{
    uint32_t nan = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x) {
        float v = __ldg(x + start + i * stride);
        nan += v != v;
        out[i] = fabsf(v);
    }
    kc_add_count(&ctl->st.nan, nan);
}

extern "C" deftsim_status kc_sample_strided(deftsim_kctx *ctx, const float *x, size_t n,
                                            size_t start, size_t stride, size_t count, float *out)
{
    (void)n;
    kc_state *s = kc_st(ctx);
    deftsim_status st;
    if ((st = kc_check_dev(ctx, count ? x : NULL, "x")) ||
        (st = kc_check_dev(ctx, count ? out : NULL, "out_abs")) || (st = kc_begin(ctx, KC_CTL_SMALL)))
        return st;
    kc_pending(ctx);
    if (!count) return DEFTSIM_OK;
    kc_strided_kernel<<<grid_for(s, count, 1), KC_THREADS, 0, s->stream>>>(x, start, stride, count,
                                                                           out, s->ctl);
    KC_LAUNCHED();
    return DEFTSIM_OK;
}

/* The CPU's generator: j_i = high 64 bits of splitmix64(seed ^ splitmix64(i)) * n, with
 * deftsim_rng.h's splitmix64 (__host__ __device__ under nvcc). */
__global__ void kc_random_kernel(const float *__restrict__ x, unsigned long long n, size_t count,
                                 unsigned long long seed, float *out, kc_ctl *ctl)
{
    uint32_t nan = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x) {
        unsigned long long r = deftsim_splitmix64(seed ^ deftsim_splitmix64((uint64_t)i));
        float v = __ldg(x + __umul64hi(r, n));
        nan += v != v;
        out[i] = fabsf(v);
    }
    kc_add_count(&ctl->st.nan, nan);
}

extern "C" deftsim_status kc_sample_random(deftsim_kctx *ctx, const float *x, size_t n,
                                           size_t count, uint64_t seed, float *out)
{
    kc_state *s = kc_st(ctx);
    deftsim_status st;
    if ((st = kc_check_dev(ctx, count ? x : NULL, "x")) ||
        (st = kc_check_dev(ctx, count ? out : NULL, "out_abs")) || (st = kc_begin(ctx, KC_CTL_SMALL)))
        return st;
    kc_pending(ctx);
    if (!count) return DEFTSIM_OK;
    kc_random_kernel<<<grid_for(s, count, 1), KC_THREADS, 0, s->stream>>>(x, n, count, seed, out,
                                                                          s->ctl);
    KC_LAUNCHED();
    return DEFTSIM_OK;
}

/* ---- Index checks -------------------------------------------------------------------------------
 * Sparse operations check every index on the device before anything is written: the check
 * records the first offending position, the operation's kernels see it and do nothing, and
 * the host reports it after waiting for the stream. */

__global__ void kc_check_idx_kernel(const uint32_t *__restrict__ idx, size_t m, size_t n,
                                    kc_ctl *ctl)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < m;
         i += (size_t)gridDim.x * blockDim.x)
        if ((size_t)idx[i] >= n) atomicMax(&ctl->sc.bad, ~(kc_u64)i); /* max of ~i: min of i */
}

/* After kc_readback: the recorded offending index as an error, or OK. */
static deftsim_status index_error(deftsim_kctx *ctx, const char *op, const uint32_t *idx, size_t n)
{
    kc_state *s = kc_st(ctx);
    kc_u64 bad = s->pin->sc.bad;
    if (!bad) return DEFTSIM_OK;
    size_t pos = (size_t)~bad;
    uint32_t v = 0;
    KC_CHECK(cudaMemcpy(&v, idx + pos, sizeof v, cudaMemcpyDeviceToHost));
    return deftsim_error_set(DEFTSIM_E_INPUT,
                             "kernels: %s: index %u at position %zu is outside [0, %zu)", op, v,
                             pos, n);
}

static deftsim_status launch_check(kc_state *s, const uint32_t *idx, size_t m, size_t n)
{
    kc_check_idx_kernel<<<grid_for(s, m, 4), KC_THREADS, 0, s->stream>>>(idx, m, n, s->ctl);
    KC_LAUNCHED();
    return DEFTSIM_OK;
}

/* ---- gather, zero ----------------------------------------------------------------------------- */

__global__ void kc_gather_kernel(const float *__restrict__ x, const uint32_t *__restrict__ idx,
                                 size_t m, float *out, kc_ctl *ctl)
{
    if (*(volatile kc_u64 *)&ctl->sc.bad) return;
    uint32_t nan = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < m;
         i += (size_t)gridDim.x * blockDim.x) {
        float v = x[idx[i]];
        nan += v != v;
        out[i] = v;
    }
    kc_add_count(&ctl->st.nan, nan);
}

extern "C" deftsim_status kc_gather(deftsim_kctx *ctx, const float *x, size_t n,
                                    const deftsim_kidx *idx, size_t m, float *out)
{
    kc_state *s = kc_st(ctx);
    deftsim_status st;
    if ((st = kc_check_dev(ctx, m ? x : NULL, "x")) ||
        (st = kc_check_dev(ctx, m ? idx : NULL, "indices")) ||
        (st = kc_check_dev(ctx, m ? out : NULL, "vals_out")) || (st = kc_begin(ctx, KC_CTL_SMALL)))
        return st;
    if (m) {
        if ((st = launch_check(s, idx, m, n))) return st;
        kc_gather_kernel<<<grid_for(s, m, 4), KC_THREADS, 0, s->stream>>>(x, idx, m, out, s->ctl);
        KC_LAUNCHED();
    }
    if ((st = kc_readback(ctx))) return st;
    return index_error(ctx, "gather", idx, n);
}

__global__ void kc_zero_kernel(float *x, const uint32_t *__restrict__ idx, size_t m,
                               const kc_ctl *ctl)
{
    if (*(const volatile kc_u64 *)&ctl->sc.bad) return;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < m;
         i += (size_t)gridDim.x * blockDim.x)
        x[idx[i]] = 0.0f; /* duplicates store the same zero */
}

extern "C" deftsim_status kc_zero_at(deftsim_kctx *ctx, float *x, size_t n,
                                     const deftsim_kidx *idx, size_t m)
{
    kc_state *s = kc_st(ctx);
    deftsim_status st;
    if ((st = kc_check_dev(ctx, m ? x : NULL, "x")) ||
        (st = kc_check_dev(ctx, m ? idx : NULL, "indices")) || (st = kc_begin(ctx, KC_CTL_SMALL)))
        return st;
    if (m) {
        if ((st = launch_check(s, idx, m, n))) return st;
        kc_zero_kernel<<<grid_for(s, m, 4), KC_THREADS, 0, s->stream>>>(x, idx, m, s->ctl);
        KC_LAUNCHED();
    }
    if ((st = kc_readback(ctx))) return st;
    return index_error(ctx, "zero_at", idx, n);
}

/* ---- Stable sort by index (scatter-add, merge) -------------------------------------------------
 * One CUB instantiation, (uint32 key, uint32 position) pairs: stable, so equal indices keep
 * list order. */

static deftsim_status sort_bytes(uint32_t m, int bits, size_t *bytes)
{
    size_t b = 0;
    KC_CHECK(cub::DeviceRadixSort::SortPairs((void *)NULL, b, (const uint32_t *)NULL,
                                             (uint32_t *)NULL, (const uint32_t *)NULL,
                                             (uint32_t *)NULL, m, 0, bits, (cudaStream_t)0));
    *bytes = b;
    return DEFTSIM_OK;
}

static deftsim_status sort_pairs(kc_state *s, void *tmp, size_t tmp_bytes, const uint32_t *kin,
                                 uint32_t *kout, const uint32_t *vin, uint32_t *vout, uint32_t m,
                                 int bits)
{
    KC_CHECK(cub::DeviceRadixSort::SortPairs(tmp, tmp_bytes, kin, kout, vin, vout, m, 0, bits,
                                             s->stream));
    return DEFTSIM_OK;
}

/* Bits that hold every index below n (at least 1). */
static int index_bits(size_t n)
{
    int b = 1;
    while (b < 32 && ((size_t)1 << b) < n) b++;
    return b;
}

/* ---- scatter-add ----------------------------------------------------------------------------- */

/* The working memory scatter_add draws from the attached pool for m entries into [0, n). */
extern "C" deftsim_status kc_scatter_add_work(size_t n, size_t m, size_t *bytes)
{
    *bytes = 0;
    if (!m) return DEFTSIM_OK;
    if (m > UINT32_MAX)
        return deftsim_error_set(DEFTSIM_E_INPUT, "kernels: cuda: scatter_add: %zu entries", m);
    size_t tb = 0;
    deftsim_status st = sort_bytes((uint32_t)m, index_bits(n), &tb);
    if (st) return st;
    *bytes = 3 * kc_round(m * sizeof(uint32_t)) + kc_round(tb) + 256;
    return DEFTSIM_OK;
}

__global__ void kc_iota_nan_kernel(uint32_t *pos, size_t m, const float *__restrict__ vals,
                                   kc_ctl *ctl)
{
    uint32_t nan = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < m;
         i += (size_t)gridDim.x * blockDim.x) {
        pos[i] = (uint32_t)i;
        if (vals) {
            float v = vals[i];
            nan += v != v;
        }
    }
    kc_add_count(&ctl->st.nan, nan);
}

/* One thread per run of equal indices in sorted order adds the run's values in list order. */
__global__ void kc_scatter_runs_kernel(float *dst, const uint32_t *__restrict__ key,
                                       const uint32_t *__restrict__ pos,
                                       const float *__restrict__ vals, size_t m, const kc_ctl *ctl)
{
    if (*(const volatile kc_u64 *)&ctl->sc.bad) return;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < m;
         i += (size_t)gridDim.x * blockDim.x) {
        uint32_t d = key[i];
        if (i > 0 && key[i - 1] == d) continue;
        float acc = dst[d];
        for (size_t j = i; j < m && key[j] == d; j++) acc = __fadd_rn(acc, vals[pos[j]]);
        dst[d] = acc;
    }
}

extern "C" deftsim_status kc_scatter_add(deftsim_kctx *ctx, float *dst, size_t n,
                                         const deftsim_kidx *idx, const float *vals, size_t m)
{
    kc_state *s = kc_st(ctx);
    deftsim_status st;
    if ((st = kc_check_dev(ctx, m ? dst : NULL, "destination")) ||
        (st = kc_check_dev(ctx, m ? idx : NULL, "indices")) ||
        (st = kc_check_dev(ctx, m ? vals : NULL, "values")) || (st = kc_begin(ctx, KC_CTL_SMALL)))
        return st;
    if (!m) return kc_readback(ctx);
    if (m > UINT32_MAX)
        return deftsim_error_set(DEFTSIM_E_INPUT, "kernels: cuda: scatter_add: %zu entries", m);
    deftsim_kcuda_pool *pool = s->pool;
    if (!pool)
        return deftsim_error_set(DEFTSIM_E_USAGE,
                                 "kernels: cuda: scatter_add sums duplicates in list order, "
                                 "which takes a sort and working memory: attach a device pool "
                                 "to the context (deftsim_kcuda_attach_pool)");
    int bits = index_bits(n);
    size_t tb = 0;
    if ((st = sort_bytes((uint32_t)m, bits, &tb))) return st;
    /* kc_scatter_add_work() reports the same (cuda-staged reserves it). */
    size_t need = 3 * kc_round(m * sizeof(uint32_t)) + kc_round(tb) + 256;
    void *work;
    if ((st = deftsim_kcuda_alloc(pool, need, &work)))
        return deftsim_error_wrap(st, "kernels: cuda: scatter_add working memory");
    kc_arena a;
    kc_arena_init(&a, work, need);
    uint32_t *kout = (uint32_t *)kc_take(&a, m * sizeof(uint32_t));
    uint32_t *pin = (uint32_t *)kc_take(&a, m * sizeof(uint32_t));
    uint32_t *pout = (uint32_t *)kc_take(&a, m * sizeof(uint32_t));
    void *tmp = kc_take(&a, tb);
    do {
        if ((st = launch_check(s, idx, m, n))) break;
        kc_iota_nan_kernel<<<grid_for(s, m, 4), KC_THREADS, 0, s->stream>>>(pin, m, vals, s->ctl);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) {
            st = kc_fail(e, "kc_iota_nan_kernel", __FILE__, __LINE__);
            break;
        }
        if ((st = sort_pairs(s, tmp, tb, idx, kout, pin, pout, (uint32_t)m, bits))) break;
        kc_scatter_runs_kernel<<<grid_for(s, m, 4), KC_THREADS, 0, s->stream>>>(dst, kout, pout,
                                                                                vals, m, s->ctl);
        e = cudaGetLastError();
        if (e != cudaSuccess) {
            st = kc_fail(e, "kc_scatter_runs_kernel", __FILE__, __LINE__);
            break;
        }
        st = kc_readback(ctx);
    } while (0);
    /* Every kernel above has finished (kc_readback waits) or failed to queue, so the memory
     * can go back to the pool. After a failed wait the stream is unusable anyway. */
    if (st) (void)cudaStreamSynchronize(s->stream);
    deftsim_kcuda_release(pool, work);
    if (st) return st;
    return index_error(ctx, "scatter_add", idx, n);
}

/* ---- Sorted union ------------------------------------------------------------------------------
 * A bitmap over [0, n): marking is one atomicOr per index in any order, and reading the words
 * back in order yields the union sorted and without duplicates; the output slot of each word
 * comes from a prefix sum of per-block popcounts. The list table (device pointers and lengths)
 * is read by the marking kernel straight from pinned host memory. */

#define KC_UWORDS 2048u /* bitmap words per block */

typedef struct {
    const uint32_t *p;
    unsigned long long len;
} kc_list;

/* Lists l0 .. l0 + nlists - 1; their table is pinned host memory, read in place. */
__global__ void kc_union_mark_kernel(const kc_list *lists, uint32_t l0, uint32_t nlists, size_t n,
                                     uint32_t *bits, kc_ctl *ctl)
{
    for (uint32_t l = blockIdx.y; l < nlists; l += gridDim.y) {
        const kc_list L = lists[l];
        for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < L.len;
             i += (size_t)gridDim.x * blockDim.x) {
            uint32_t d = L.p[i];
            if ((size_t)d >= n) /* first (list, position) wins: min of l << 40 | i */
                atomicMax(&ctl->sc.bad, ~(((kc_u64)(l0 + l) << 40) | (kc_u64)i));
            else
                atomicOr(&bits[d >> 5], 1u << (d & 31));
        }
    }
}

__global__ void __launch_bounds__(KC_THREADS)
    kc_union_count_kernel(const uint32_t *bits, size_t words, uint32_t *bsum)
{
    size_t w0 = (size_t)blockIdx.x * KC_UWORDS;
    uint32_t c = 0;
    for (size_t w = w0 + threadIdx.x; w < words && w < w0 + KC_UWORDS; w += KC_THREADS)
        c += __popc(bits[w]);
    uint32_t tot;
    (void)kc_block_excl_scan(c, &tot);
    if (threadIdx.x == 0) bsum[blockIdx.x] = tot;
}

/* One block: exclusive prefix of the block counts in place; the total is the union size. */
__global__ void __launch_bounds__(KC_THREADS)
    kc_union_scan_kernel(uint32_t *bsum, uint32_t nb, kc_ctl *ctl)
{
    __shared__ uint32_t s_carry;
    if (threadIdx.x == 0) s_carry = 0;
    __syncthreads();
    for (uint32_t b0 = 0; b0 < nb; b0 += KC_THREADS) {
        uint32_t b = b0 + threadIdx.x;
        uint32_t v = b < nb ? bsum[b] : 0u;
        uint32_t tot, ex = kc_block_excl_scan(v, &tot);
        uint32_t carry = s_carry;
        if (b < nb) bsum[b] = carry + ex;
        __syncthreads();
        if (threadIdx.x == 0) s_carry = carry + tot;
        __syncthreads();
    }
    if (threadIdx.x == 0) ctl->sc.count = s_carry;
}

__global__ void __launch_bounds__(KC_THREADS)
    kc_union_emit_kernel(const uint32_t *bits, size_t words, const uint32_t *boff, uint32_t *out,
                         size_t cap, const kc_ctl *ctl)
{
    if (*(const volatile kc_u64 *)&ctl->sc.bad) return;
    const uint32_t per = KC_UWORDS / KC_THREADS;
    size_t w0 = (size_t)blockIdx.x * KC_UWORDS + (size_t)threadIdx.x * per;
    uint32_t wv[KC_UWORDS / KC_THREADS], c = 0;
#pragma unroll
    for (uint32_t j = 0; j < per; j++) {
        wv[j] = w0 + j < words ? bits[w0 + j] : 0u;
        c += __popc(wv[j]);
    }
    uint32_t tot, ex = kc_block_excl_scan(c, &tot);
    size_t o = (size_t)boff[blockIdx.x] + ex;
#pragma unroll
    for (uint32_t j = 0; j < per; j++) {
        uint32_t v = wv[j];
        while (v && o < cap) {
            out[o++] = (uint32_t)((w0 + j) * 32 + (size_t)(__ffs(v) - 1));
            v &= v - 1;
        }
    }
}

extern "C" deftsim_status kc_union_scratch(const deftsim_kctx *ctx, size_t n, size_t *bytes)
{
    (void)ctx;
    size_t words = (n + 31) / 32, nb = (words + KC_UWORDS - 1) / KC_UWORDS;
    *bytes = 256 + kc_round(words * sizeof(uint32_t)) + kc_round(nb * sizeof(uint32_t));
    return DEFTSIM_OK;
}

extern "C" deftsim_status kc_union(deftsim_kctx *ctx, size_t n, const deftsim_kidx *const *lists,
                                   const size_t *lens, size_t nlists, deftsim_kidx *out,
                                   size_t cap, size_t *count, void *scratch, size_t scratch_bytes)
{
    kc_state *s = kc_st(ctx);
    deftsim_status st;
    if ((st = kc_check_dev(ctx, cap ? out : NULL, "output")) ||
        (st = kc_check_dev(ctx, scratch, "scratch")))
        return st;
    for (size_t l = 0; l < nlists; l++) {
        char what[48];
        snprintf(what, sizeof what, "list %zu", l);
        if (lens[l] && (st = kc_check_dev(ctx, lists[l], what))) return st;
        if (lens[l] >= ((size_t)1 << 40))
            return deftsim_error_set(DEFTSIM_E_INPUT, "kernels: cuda: union: list %zu holds %zu "
                                                      "indices (at most 2^40)", l, lens[l]);
    }
    if (nlists >= ((size_t)1 << 23))
        return deftsim_error_set(DEFTSIM_E_INPUT, "kernels: cuda: union: %zu lists", nlists);
    if ((st = kc_begin(ctx, KC_CTL_SMALL))) return st;
    size_t words = (n + 31) / 32, nb = (words + KC_UWORDS - 1) / KC_UWORDS;
    *count = 0;
    if (!words) return kc_readback(ctx);
    kc_arena a;
    kc_arena_init(&a, scratch, scratch_bytes);
    uint32_t *bits = (uint32_t *)kc_take(&a, words * sizeof(uint32_t));
    uint32_t *bsum = (uint32_t *)kc_take(&a, nb * sizeof(uint32_t));
    KC_CHECK(cudaMemsetAsync(bits, 0, words * sizeof(uint32_t), s->stream));
    /* The table goes in ring slots (pinned, so the kernel reads it in place), as many lists
     * per launch as a slot holds. */
    const size_t per_slot = KC_STAGE_SLOT / sizeof(kc_list);
    for (size_t l0 = 0; l0 < nlists; l0 += per_slot) {
        size_t nl = nlists - l0 < per_slot ? nlists - l0 : per_slot, most = 0;
        for (size_t l = l0; l < l0 + nl; l++) most = lens[l] > most ? lens[l] : most;
        if (!most) continue;
        kc_stage sg;
        if ((st = kc_stage_take(s, nl * sizeof(kc_list), &sg))) return st;
        kc_list *h = (kc_list *)sg.host;
        for (size_t l = 0; l < nl; l++) {
            h[l].p = lists[l0 + l];
            h[l].len = lens[l0 + l];
        }
        dim3 grid(kc_blocks(most, KC_THREADS * 4, (unsigned)s->sms * 4u),
                  (unsigned)(nl < 65535 ? nl : 65535));
        kc_union_mark_kernel<<<grid, KC_THREADS, 0, s->stream>>>(h, (uint32_t)l0, (uint32_t)nl, n,
                                                                  bits, s->ctl);
        KC_LAUNCHED();
        /* The slot is busy until the kernel has read it. */
        KC_CHECK(cudaEventRecord(s->stage_ev[sg.slot], s->stream));
        s->stage_busy[sg.slot] = 1;
    }
    kc_union_count_kernel<<<(unsigned)nb, KC_THREADS, 0, s->stream>>>(bits, words, bsum);
    KC_LAUNCHED();
    kc_union_scan_kernel<<<1, KC_THREADS, 0, s->stream>>>(bsum, (uint32_t)nb, s->ctl);
    KC_LAUNCHED();
    if (cap) {
        kc_union_emit_kernel<<<(unsigned)nb, KC_THREADS, 0, s->stream>>>(bits, words, bsum, out,
                                                                        cap, s->ctl);
        KC_LAUNCHED();
    }
    if ((st = kc_readback(ctx))) return st;
    kc_u64 bad = s->pin->sc.bad;
    if (bad) {
        kc_u64 key = ~bad;
        size_t l = (size_t)(key >> 40), i = (size_t)(key & (((kc_u64)1 << 40) - 1));
        uint32_t v = 0;
        KC_CHECK(cudaMemcpy(&v, lists[l] + i, sizeof v, cudaMemcpyDeviceToHost));
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "list %zu: kernels: union: index %u at position %zu is outside "
                                 "[0, %zu)",
                                 l, v, i, n);
    }
    *count = (size_t)s->pin->sc.count;
    return DEFTSIM_OK;
}

/* ---- gTop-k merge ---------------------------------------------------------------------------
 * Both lists in one array (a first), a stable sort by index, one thread per run summing its
 * values in list order; the run heads are the candidates (sorted position, rank of the sum)
 * of the grid-wide selection, whose key breaks ties by sorted position, that is by index. */

__global__ void kc_merge_load_kernel(const uint32_t *__restrict__ ia, const float *__restrict__ va,
                                     size_t na, const uint32_t *__restrict__ ib,
                                     const float *__restrict__ vb, size_t nb, uint32_t *key,
                                     uint32_t *pos, kc_ctl *ctl)
{
    uint32_t nan = 0;
    size_t m = na + nb;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < m;
         i += (size_t)gridDim.x * blockDim.x) {
        float v = i < na ? va[i] : vb[i - na];
        key[i] = i < na ? ia[i] : ib[i - na];
        pos[i] = (uint32_t)i;
        nan += v != v;
    }
    kc_add_count(&ctl->st.nan, nan);
}

__global__ void __launch_bounds__(KC_THREADS)
    kc_merge_runs_kernel(const uint32_t *__restrict__ key, const uint32_t *__restrict__ pos,
                         const float *__restrict__ va, size_t na, const float *__restrict__ vb,
                         size_t m, float *sum, uint2 *cand, kc_ctl *ctl)
{
    __shared__ unsigned long long s_base;
    for (size_t t0 = (size_t)blockIdx.x * KC_THREADS; t0 < m; t0 += (size_t)gridDim.x * KC_THREADS) {
        size_t i = t0 + threadIdx.x;
        uint32_t head = 0, r = 0;
        if (i < m && (i == 0 || key[i - 1] != key[i])) {
            uint32_t d = key[i];
            uint32_t p = pos[i];
            float acc = p < na ? va[p] : vb[p - na];
            for (size_t j = i + 1; j < m && key[j] == d; j++) {
                p = pos[j];
                acc = __fadd_rn(acc, p < na ? va[p] : vb[p - na]);
            }
            sum[i] = acc;
            head = 1;
            r = kc_rank(acc);
        }
        uint32_t tot, ex = kc_block_excl_scan(head, &tot);
        if (threadIdx.x == 0) s_base = tot ? atomicAdd(&ctl->sc.count, (kc_u64)tot) : 0ull;
        __syncthreads();
        if (head) cand[s_base + ex] = make_uint2((uint32_t)i, r);
        __syncthreads();
    }
}

/* out_idx[i], out_val[i] from the i-th selected sorted position (sel, or every candidate). */
__global__ void kc_merge_out_kernel(const uint32_t *sel, const uint2 *cand, size_t kk,
                                    const uint32_t *key, const float *sum, uint32_t *out_idx,
                                    float *out_val)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < kk;
         i += (size_t)gridDim.x * blockDim.x) {
        uint32_t p = sel ? sel[i] : cand[i].x;
        out_idx[i] = key[p];
        out_val[i] = sum[p];
    }
}

typedef struct {
    size_t m, tb;
    size_t off_key, off_kout, off_pos, off_pout, off_sum, off_cand, off_spare, off_fs, off_sel,
        off_tmp, total;
} merge_layout;

static deftsim_status merge_plan(size_t na, size_t nb, merge_layout *L)
{
    memset(L, 0, sizeof *L);
    L->m = na + nb;
    if (L->m > UINT32_MAX)
        return deftsim_error_set(DEFTSIM_E_INPUT, "kernels: cuda: merge_topk: %zu entries", L->m);
    deftsim_status st = sort_bytes((uint32_t)L->m, 32, &L->tb);
    if (st) return st;
    size_t u4 = kc_round(L->m * sizeof(uint32_t)), u8 = kc_round(L->m * sizeof(uint2));
    size_t o = 0;
    L->off_key = o;
    o += u4;
    L->off_kout = o;
    o += u4;
    L->off_pos = o;
    o += u4;
    L->off_pout = o;
    o += u4;
    L->off_sum = o;
    o += u4;
    L->off_cand = o;
    o += u8;
    L->off_spare = o;
    o += u8;
    L->off_fs = o;
    o += kc_round(kc_fstate_bytes());
    L->off_sel = o;
    o += u4;
    L->off_tmp = o;
    o += kc_round(L->tb);
    L->total = o;
    return DEFTSIM_OK;
}

extern "C" deftsim_status kc_merge_topk_scratch(const deftsim_kctx *ctx, size_t na, size_t nb,
                                                size_t *bytes)
{
    (void)ctx;
    merge_layout L;
    deftsim_status st = merge_plan(na, nb, &L);
    if (st) return st;
    *bytes = L.m ? 256 + L.total : 0;
    return DEFTSIM_OK;
}

extern "C" deftsim_status kc_merge_topk(deftsim_kctx *ctx, const deftsim_kidx *ia, const float *va,
                                        size_t na, const deftsim_kidx *ib, const float *vb,
                                        size_t nb, size_t k, deftsim_kidx *out_idx,
                                        float *out_val, size_t *out_n, void *scratch,
                                        size_t scratch_bytes)
{
    kc_state *s = kc_st(ctx);
    deftsim_status st;
    merge_layout L;
    if ((st = merge_plan(na, nb, &L))) return st;
    if ((st = kc_check_dev(ctx, na ? ia : NULL, "indices a")) ||
        (st = kc_check_dev(ctx, na ? va : NULL, "values a")) ||
        (st = kc_check_dev(ctx, nb ? ib : NULL, "indices b")) ||
        (st = kc_check_dev(ctx, nb ? vb : NULL, "values b")) ||
        (st = kc_check_dev(ctx, k && L.m ? out_idx : NULL, "output indices")) ||
        (st = kc_check_dev(ctx, k && L.m ? out_val : NULL, "output values")) ||
        (st = kc_check_dev(ctx, L.m ? scratch : NULL, "scratch")) ||
        (st = kc_begin(ctx, KC_CTL_ALL)))
        return st;
    *out_n = 0;
    if (!L.m) return kc_readback(ctx);
    kc_arena a;
    kc_arena_init(&a, scratch, scratch_bytes);
    unsigned char *b = (unsigned char *)kc_take(&a, L.total);
    uint32_t *key = (uint32_t *)(b + L.off_key), *kout = (uint32_t *)(b + L.off_kout);
    uint32_t *pos = (uint32_t *)(b + L.off_pos), *pout = (uint32_t *)(b + L.off_pout);
    float *sum = (float *)(b + L.off_sum);
    uint2 *cand = (uint2 *)(b + L.off_cand), *spare = (uint2 *)(b + L.off_spare);
    uint32_t *sel = (uint32_t *)(b + L.off_sel);
    unsigned g = grid_for(s, L.m, 4);
    kc_merge_load_kernel<<<g, KC_THREADS, 0, s->stream>>>(ia, va, na, ib, vb, nb, key, pos, s->ctl);
    KC_LAUNCHED();
    if ((st = sort_pairs(s, b + L.off_tmp, L.tb, key, kout, pos, pout, (uint32_t)L.m, 32))) return st;
    kc_merge_runs_kernel<<<g, KC_THREADS, 0, s->stream>>>(kout, pout, va, na, vb, L.m, sum, cand,
                                                          s->ctl);
    KC_LAUNCHED();
    if ((st = kc_readback(ctx))) return st;
    size_t u = (size_t)s->pin->sc.count, kk = k < u ? k : u;
    if (kk) {
        if (kk < u) {
            if ((st = kc_grid_select_cands(ctx, cand, spare, (uint32_t)u, (uint32_t)kk,
                                           b + L.off_fs, sel)))
                return st;
        }
        kc_merge_out_kernel<<<grid_for(s, kk, 4), KC_THREADS, 0, s->stream>>>(
            kk < u ? sel : NULL, cand, kk, kout, sum, out_idx, out_val);
        KC_LAUNCHED();
    }
    /* The record (read back above) counts the NaNs among the input values, as on the CPU. */
    KC_CHECK(cudaStreamSynchronize(s->stream));
    *out_n = kk;
    return DEFTSIM_OK;
}

