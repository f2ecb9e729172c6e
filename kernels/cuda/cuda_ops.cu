/* cuda_ops.cu - the streaming operations on the device: absmax, fragment norms, accumulate
 * with fragment sums of squares, threshold filter and count, sampling. The index-driven ones
 * (gather, zero, scatter-add, union, merge) are cuda_sparse.cu's.
 *
 * Results equal the CPU backend's bit for bit where the contract fixes them: norms sum in the
 * CPU's fixed order (blocks of 4096, 32 lanes, the same tree), and sampling uses the same
 * counter-based generator. Arithmetic that must not fuse uses the explicit
 * round-to-nearest intrinsics, whatever -fmad says. */
#include <stdio.h>
#include <string.h>

#include "cuda_internal.cuh"
#include "deftsim_rng.h"

extern "C" {
#include "deftsim_kcuda.h"
}

#define KC_UNROLL 8


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
        kc_absmax_kernel<<<kc_grid_for(s, n, KC_UNROLL), KC_THREADS, 0, s->stream>>>(x, n, s->ctl);
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
        kc_filter_ge_kernel<<<kc_grid_for(s, n, KC_FITEMS), KC_THREADS, 0, s->stream>>>(
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
    kc_strided_kernel<<<kc_grid_for(s, count, 1), KC_THREADS, 0, s->stream>>>(x, start, stride,
                                                                              count, out, s->ctl);
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
    kc_random_kernel<<<kc_grid_for(s, count, 1), KC_THREADS, 0, s->stream>>>(x, n, count, seed,
                                                                             out, s->ctl);
    KC_LAUNCHED();
    return DEFTSIM_OK;
}
