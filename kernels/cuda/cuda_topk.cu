/* cuda_topk.cu - exact top-k and segmented top-k by magnitude on the device.
 *
 * A whole vector is one fragment: topk is segtopk with a single fragment. Every fragment of a
 * call is planned on the host (one pass over the table, which the front has validated anyway)
 * into one of four classes, and each class runs for all its fragments at once:
 *
 * - W (up to KC_W_MAX elements; most of DEFT's fragments at large P): one warp per fragment.
 *   The warp finds the k-th largest key by a radix search over the fragment's own key range
 *   (256 buckets a round, histogram in shared memory), then writes the winners in one ordered
 *   ballot pass. The fragment is read once from memory and re-read from L1 by later rounds.
 * - B (up to KC_B_MAX): the same with one block of 256 threads and 2048 buckets.
 * - L (larger): a sampled threshold. One block per fragment reads whole 32-byte sectors at
 *   stratified random positions, and takes as threshold T the r-th largest sampled rank, r
 *   chosen so that about 1.3 k elements pass (r = mu + 3.5 sqrt(mu) + 4, mu the expected
 *   sample count above the true k-th element). One pass over all L fragments (tiles of 4096
 *   elements, every block any fragment) appends the elements with rank >= T to the fragment's
 *   candidate region; then one block per fragment selects among its candidates as in B. A
 *   fragment whose sample missed (fewer than k candidates, or more than its region holds:
 *   heavy ties do this) is selected by its block from the raw elements instead: exact, slower.
 * - H (KC_GRID_MIN elements and more: whole gradients): the same sample and candidate pass,
 *   then a grid-wide radix select over the candidates with 2048 buckets a pass. Each pass is
 *   one launch in which every block histograms its part, emits the elements above the bucket
 *   chosen by the previous pass and compacts the bucket's elements for the next pass; the last
 *   block to finish picks the next bucket. No pass waits for the host: the passes are queued
 *   up front (KC_GRID_PASSES, enough for a 63-bit key), and those after the last return at
 *   once. A missed sample switches the passes to the raw input on the device (AIR top-k's
 *   adaptive radix select: the bucket is compacted as soon as it fits the candidate region).
 *
 * So the input is read once (W, B) or once plus a sample (L, H); torch.topk's radix select
 * with 8-bit digits reads it about five times. Ties and NaN need no special case: keys are
 * unique (rank << 32 | ~index), and a search for the k-th largest key is exact. */
#include <math.h>
#include <string.h>

#include "cuda_internal.cuh"

#define KC_W_MAX 4096u
#define KC_B_MAX 16384u
#define KC_GRID_MIN ((size_t)1 << 20)
/* FORCE_SAMPLING applies from here (a sample of 8-element sectors needs room). */
#define KC_SAMPLE_MIN 64u
#define KC_TILE_ITEMS 16
#define KC_TILE (KC_THREADS * KC_TILE_ITEMS)
#define KC_GITEMS 8
#define KC_GTILE (KC_THREADS * KC_GITEMS)
/* First pass plus one per 11-bit digit of a 63-bit key range (52, 41, 30, 19, 8, 0). */
#define KC_GRID_PASSES 7

/* ---- Plan, shared by host and device ------------------------------------------------------- */

typedef struct {
    uint32_t off, len, k, pad;
    unsigned long long out; /* first output slot */
} kc_wfrag;

typedef struct {
    uint32_t off, len, k, cand_cap;
    uint32_t nsect, r, tile0, pad;
    unsigned long long out, cand_off, smp_off;
} kc_frag;

typedef struct {
    uint32_t T, ncand, maxrank, pad;
} kc_fstate;

/* ---- Group selection (a warp, NT = 32, or a block, NT = 256) --------------------------------
 * Sources: where the m elements of a selection come from, as keys and output indices. */

struct kc_src_raw { /* x[0..m) of a fragment starting at absolute index base */
    const float *x;
    uint32_t m, base;
    __device__ __forceinline__ kc_u64 key(uint32_t i) const
    {
        return kc_key(kc_rank(__ldg(x + i)), base + i);
    }
    __device__ __forceinline__ uint32_t out(uint32_t i) const { return base + i; }
};

struct kc_src_cand { /* (absolute index, rank) pairs written by an earlier kernel */
    const uint2 *c;
    uint32_t m;
    __device__ __forceinline__ kc_u64 key(uint32_t i) const
    {
        uint2 e = c[i];
        return kc_key(e.y, e.x);
    }
    __device__ __forceinline__ uint32_t out(uint32_t i) const { return c[i].x; }
};

struct kc_src_ranks { /* ranks written earlier in this kernel (plain loads, not __ldg) */
    const uint32_t *r;
    uint32_t m;
    __device__ __forceinline__ kc_u64 key(uint32_t i) const { return kc_key(r[i], i); }
    __device__ __forceinline__ uint32_t out(uint32_t i) const { return i; }
};

template <int NT>
struct kc_gshared {
    uint32_t hist[8 * NT]; /* 8 buckets per thread */
    kc_u64 red64[NT / 32];
    uint32_t red32[NT / 32];
    uint32_t d, above, cnt, ctr;
};

template <int NT>
__device__ __forceinline__ void kc_gsync()
{
    if (NT == 32)
        __syncwarp();
    else
        __syncthreads();
}

/* op 0: min, 1: max (64-bit) over the group; every thread gets the result. */
template <int NT, int OP>
__device__ __forceinline__ kc_u64 kc_gred64(kc_u64 v, kc_gshared<NT> &sh, unsigned t)
{
#pragma unroll
    for (int o = 16; o; o >>= 1) {
        kc_u64 y = __shfl_xor_sync(0xffffffffu, v, o);
        v = OP == 0 ? (y < v ? y : v) : (y > v ? y : v);
    }
    if (NT == 32) return v;
    if ((t & 31) == 0) sh.red64[t >> 5] = v;
    __syncthreads();
    kc_u64 r = sh.red64[0];
#pragma unroll
    for (int w = 1; w < NT / 32; w++) r = OP == 0 ? min(r, sh.red64[w]) : max(r, sh.red64[w]);
    __syncthreads();
    return r;
}

template <int NT>
__device__ __forceinline__ uint32_t kc_gsum(uint32_t v, kc_gshared<NT> &sh, unsigned t)
{
    v = kc_warp_sum(v);
    if (NT == 32) return v;
    if ((t & 31) == 0) sh.red32[t >> 5] = v;
    __syncthreads();
    uint32_t r = 0;
#pragma unroll
    for (int w = 0; w < NT / 32; w++) r += sh.red32[w];
    __syncthreads();
    return r;
}

/* Sum of c over the threads after t (in thread order). */
template <int NT>
__device__ __forceinline__ uint32_t kc_gsuffix(uint32_t c, kc_gshared<NT> &sh, unsigned t)
{
    uint32_t p = kc_warp_incl_scan(c);
    if (NT == 32) return __shfl_sync(0xffffffffu, p, 31) - p;
    if ((t & 31) == 31) sh.red32[t >> 5] = p;
    __syncthreads();
    uint32_t before = 0, tot = 0;
#pragma unroll
    for (int w = 0; w < NT / 32; w++) {
        uint32_t s = sh.red32[w];
        before += (unsigned)w < (t >> 5) ? s : 0u;
        tot += s;
    }
    __syncthreads();
    return tot - before - p;
}

/* Calls f(key) for every element of the source, each thread taking elements t, t + NT, ...
 * KC_GU at a time: their loads are issued together, so a thread has KC_GU reads in flight
 * instead of waiting for each (the sources are read from L1 or L2, where latency, not
 * bandwidth, bounds a single group). */
#define KC_GU 8
template <int NT, class S, class F>
__device__ __forceinline__ void kc_gforeach(const S &s, unsigned t, F f)
{
    const kc_u64 m = s.m;
    for (kc_u64 i0 = t; i0 < m; i0 += (kc_u64)KC_GU * NT) {
        kc_u64 k[KC_GU];
#pragma unroll
        for (int j = 0; j < KC_GU; j++) {
            kc_u64 i = i0 + (kc_u64)j * NT;
            k[j] = i < m ? s.key((uint32_t)i) : 0ull;
        }
#pragma unroll
        for (int j = 0; j < KC_GU; j++)
            if (i0 + (kc_u64)j * NT < m) f(k[j]);
    }
}

/* The key U such that exactly `need` of the source's m elements have key >= U
 * (1 <= need <= m). Each round histograms the keys inside the current range [lo, hi] over
 * 8 NT buckets of the smallest power-of-two width that covers it, and keeps the bucket where
 * the need-th largest falls; keys are unique, so it ends at the latest when a bucket is one
 * key wide. *nan (when non-NULL) receives the group's NaN count of the source. */
template <int NT, class S>
__device__ kc_u64 kc_gthreshold(const S &s, uint32_t need, kc_gshared<NT> &sh, unsigned t,
                                uint32_t *nan)
{
    const uint32_t m = s.m;
    kc_u64 lo = ~0ull, hi = 0;
    uint32_t nn = 0;
    kc_gforeach<NT>(s, t, [&](kc_u64 k) {
        lo = k < lo ? k : lo;
        hi = k > hi ? k : hi;
        nn += (uint32_t)(k >> 32) == 0u;
    });
    lo = kc_gred64<NT, 0>(lo, sh, t);
    hi = kc_gred64<NT, 1>(hi, sh, t);
    if (nan) *nan = kc_gsum<NT>(nn, sh, t);
    if (need >= m) return lo;
    for (;;) {
        if (lo == hi) return lo;
        const unsigned sft = kc_shift(hi - lo, 8u * NT);
        const kc_u64 l = lo, h = hi;
#pragma unroll
        for (int j = 0; j < 8; j++) sh.hist[j * NT + t] = 0;
        kc_gsync<NT>();
        kc_gforeach<NT>(s, t, [&](kc_u64 k) {
            if (k >= l && k <= h) atomicAdd(&sh.hist[(uint32_t)((k - l) >> sft)], 1u);
        });
        kc_gsync<NT>();
        uint32_t hb[8], c = 0;
#pragma unroll
        for (int j = 0; j < 8; j++) {
            hb[j] = sh.hist[8 * t + j];
            c += hb[j];
        }
        uint32_t acc = kc_gsuffix<NT>(c, sh, t);
#pragma unroll
        for (int j = 7; j >= 0; j--) {
            if (acc < need && need <= acc + hb[j]) {
                sh.d = 8 * t + (unsigned)j;
                sh.above = acc;
                sh.cnt = hb[j];
            }
            acc += hb[j];
        }
        kc_gsync<NT>();
        uint32_t d = sh.d, above = sh.above, cnt = sh.cnt;
        /* Nobody writes d again before passing the next round's first barrier, which every
         * thread reaches only after reading it. */
        need -= above;
        kc_u64 blo = lo + ((kc_u64)d << sft);
        if (cnt == need) return blo;
        kc_u64 bhi = blo + ((1ull << sft) - 1ull);
        lo = blo;
        hi = bhi < hi ? bhi : hi;
    }
}

/* Writes out(i) of every element with key >= U to out[0..), in any order: KC_GU rows of NT
 * elements at a time, their loads issued together, then one ballot per row. */
template <int NT, class S>
__device__ void kc_gemit(const S &s, kc_u64 U, uint32_t *out, kc_gshared<NT> &sh, unsigned t)
{
    const unsigned lane = t & 31;
    const unsigned below = (1u << lane) - 1u;
    const kc_u64 m = s.m;
    uint32_t base = 0; /* warps: the next free slot */
    if (NT != 32) {
        if (t == 0) sh.ctr = 0;
        __syncthreads();
    }
    for (kc_u64 r0 = 0; r0 < m; r0 += (kc_u64)KC_GU * NT) {
        bool p[KC_GU];
#pragma unroll
        for (int j = 0; j < KC_GU; j++) {
            kc_u64 i = r0 + (kc_u64)j * NT + t;
            p[j] = i < m && s.key((uint32_t)i) >= U;
        }
#pragma unroll
        for (int j = 0; j < KC_GU; j++) {
            kc_u64 i = r0 + (kc_u64)j * NT + t;
            unsigned b = __ballot_sync(0xffffffffu, p[j]);
            if (NT == 32) {
                if (p[j]) out[base + __popc(b & below)] = s.out((uint32_t)i);
                base += __popc(b);
            } else {
                uint32_t wb = 0;
                if (lane == 0 && b) wb = atomicAdd(&sh.ctr, (uint32_t)__popc(b));
                wb = __shfl_sync(0xffffffffu, wb, 0);
                if (p[j]) out[wb + __popc(b & below)] = s.out((uint32_t)i);
            }
        }
    }
}

template <int NT, class S>
__device__ __forceinline__ void kc_gselect(const S &s, uint32_t k, uint32_t *out,
                                           kc_gshared<NT> &sh, unsigned t, uint32_t *nan)
{
    kc_u64 U = kc_gthreshold<NT>(s, k, sh, t, nan);
    kc_gemit<NT>(s, U, out, sh, t);
}

/* ---- Kernels ------------------------------------------------------------------------------ */

__device__ __forceinline__ uint32_t kc_hash32(uint32_t x)
{
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

/* One block per sampled fragment: the threshold rank T from a stratified sample of whole
 * 32-byte sectors (the memory system moves a sector per random read anyway, so its other
 * seven elements are free). Also resets the fragment's counters. */
__global__ void __launch_bounds__(KC_THREADS)
    kc_sample_kernel(const float *__restrict__ x, const kc_frag *fr, kc_fstate *fs, uint32_t *smp)
{
    __shared__ kc_gshared<KC_THREADS> sh;
    const unsigned t = threadIdx.x;
    const kc_frag f = fr[blockIdx.x];
    uint32_t *r = smp + f.smp_off;
    /* Sectors are independent: unrolling keeps several random reads in flight per thread. */
#pragma unroll 4
    for (uint32_t j = t; j < f.nsect; j += KC_THREADS) {
        unsigned long long a = (unsigned long long)j * f.len / f.nsect;
        unsigned long long b = (unsigned long long)(j + 1) * f.len / f.nsect;
        uint32_t span = (uint32_t)(b - a) - 7u; /* b - a >= 8 by the plan */
        uint32_t p = (uint32_t)a + kc_hash32(j * 0x9e3779b9u ^ f.off ^ kc_hash32(f.len)) % span;
        const float *q = x + f.off + p;
#pragma unroll
        for (int e = 0; e < 8; e++) r[8 * j + e] = kc_rank(__ldg(q + e));
    }
    __syncthreads(); /* the block's global writes are visible to the block */
    kc_src_ranks src = {r, 8 * f.nsect};
    kc_u64 U = kc_gthreshold<KC_THREADS>(src, f.r, sh, t, NULL);
    if (t == 0) {
        kc_fstate s = {(uint32_t)(U >> 32), 0u, 0u, 0u};
        fs[blockIdx.x] = s;
    }
}

/* Every tile of every sampled fragment: append (index, rank) of the elements with rank >= T
 * to the fragment's candidate region, one atomic per tile. Counts go on past the region's
 * capacity, so that the selection sees the miss. Counts NaN (the record's). */
__global__ void __launch_bounds__(KC_THREADS)
    kc_filter_kernel(const float *__restrict__ x, const kc_frag *fr, kc_fstate *fs, uint32_t nfr,
                     uint32_t ntiles, uint2 *cand, kc_stats *st)
{
    __shared__ uint32_t s_base;
    __shared__ uint32_t s_red[KC_WARPS];
    const unsigned t = threadIdx.x;
    uint32_t nan_all = 0;
    for (uint32_t tile = blockIdx.x; tile < ntiles; tile += gridDim.x) {
        uint32_t lo = 0, hi = nfr; /* the last fragment whose first tile is <= tile */
        while (hi - lo > 1) {
            uint32_t mid = (lo + hi) >> 1;
            if (fr[mid].tile0 <= tile) lo = mid;
            else hi = mid;
        }
        const kc_frag f = fr[lo];
        const uint32_t T = fs[lo].T;
        const kc_u64 start = (kc_u64)(tile - f.tile0) * KC_TILE;
        uint32_t rk[KC_TILE_ITEMS], c = 0, mx = 0;
#pragma unroll
        for (int it = 0; it < KC_TILE_ITEMS; it++) {
            kc_u64 p = start + (kc_u64)it * KC_THREADS + t;
            rk[it] = KC_NO_RANK;
            if (p < f.len) {
                uint32_t r = kc_rank(__ldg(x + f.off + p));
                nan_all += r == 0u;
                if (r >= T) {
                    rk[it] = r;
                    c++;
                    mx = r > mx ? r : mx;
                }
            }
        }
        uint32_t tot, ex = kc_block_excl_scan(c, &tot);
        mx = kc_warp_max(mx);
        if ((t & 31) == 0) s_red[t >> 5] = mx;
        if (t == 0) s_base = tot ? atomicAdd(&fs[lo].ncand, tot) : 0u;
        __syncthreads();
        if (t == 0 && tot) {
            uint32_t m = 0;
            for (int w = 0; w < KC_WARPS; w++) m = s_red[w] > m ? s_red[w] : m;
            atomicMax(&fs[lo].maxrank, m);
        }
        uint32_t o = s_base + ex;
        uint2 *cb = cand + f.cand_off;
#pragma unroll
        for (int it = 0; it < KC_TILE_ITEMS; it++) {
            if (rk[it] != KC_NO_RANK) {
                if (o < f.cand_cap)
                    cb[o] = make_uint2(f.off + (uint32_t)(start + (kc_u64)it * KC_THREADS + t),
                                       rk[it]);
                o++;
            }
        }
        __syncthreads(); /* s_base and s_red are rewritten by the next tile */
    }
    kc_add_count(&st->nan, nan_all);
}

/* One launch for the W, B and L fragments: blocks [0, nl) take the L fragments, the next
 * nbw blocks the take-all and B entries of wf, the rest run 8 warps each over the W entries
 * that follow. */
__global__ void __launch_bounds__(KC_THREADS)
    kc_seg_kernel(const float *__restrict__ x, const kc_frag *fr, const kc_fstate *fs, uint32_t nl,
                  const uint2 *cand, const kc_wfrag *wf, uint32_t nbw, uint32_t nw, uint32_t *out,
                  kc_stats *st)
{
    __shared__ union {
        kc_gshared<KC_THREADS> b;
        kc_gshared<32> w[KC_WARPS];
    } sm;
    const unsigned t = threadIdx.x;
    uint32_t blk = blockIdx.x;
    if (blk < nl) {
        const kc_frag f = fr[blk];
        const kc_fstate s = fs[blk];
        if (s.ncand >= f.k && s.ncand <= f.cand_cap) {
            kc_src_cand src = {cand + f.cand_off, s.ncand};
            kc_gselect<KC_THREADS>(src, f.k, out + f.out, sm.b, t, NULL);
            if (t == 0) atomicAdd(&st->candidates, (kc_u64)s.ncand);
        } else {
            kc_src_raw src = {x + f.off, f.len, f.off};
            kc_gselect<KC_THREADS>(src, f.k, out + f.out, sm.b, t, NULL);
            if (t == 0) atomicAdd(&st->fallbacks, 1ull);
        }
        return;
    }
    blk -= nl;
    if (blk < nbw) {
        const kc_wfrag f = wf[blk];
        uint32_t *o = out + f.out;
        if (f.k == f.len) { /* take all: nothing to rank */
            for (uint32_t i = t; i < f.len; i += KC_THREADS) o[i] = f.off + i;
            return;
        }
        kc_src_raw src = {x + f.off, f.len, f.off};
        uint32_t nan = 0;
        kc_gselect<KC_THREADS>(src, f.k, o, sm.b, t, &nan);
        if (t == 0 && nan) atomicAdd(&st->nan, (kc_u64)nan);
        return;
    }
    blk -= nbw;
    const unsigned w = t >> 5;
    const uint32_t i = blk * KC_WARPS + w;
    if (i >= nw) return; /* the whole warp */
    const kc_wfrag f = wf[nbw + i];
    kc_src_raw src = {x + f.off, f.len, f.off};
    uint32_t nan = 0;
    kc_gselect<32>(src, f.k, out + f.out, sm.w[w], t & 31, &nan);
    if ((t & 31) == 0 && nan) atomicAdd(&st->nan, (kc_u64)nan);
}

/* ---- Grid-wide radix select (class H) -------------------------------------------------------- */

typedef struct {
    const float *x;        /* the fragment's first element */
    uint32_t n, base, k, cap;
    const kc_fstate *fs;   /* its sample and candidate counts */
    uint2 *bufA, *bufB;    /* A holds the candidates; both hold compacted buckets */
    uint32_t *out;         /* its first output slot */
    kc_grid *g;
    kc_stats *st;
} kc_gargs;

/* What a pass of kc_grid_kernel works on: the source (0 the input, 1 bufA, 2 bufB) and its
 * length, where this pass compacts the bucket (0: nowhere), how many of the largest keys are
 * still needed, whether the bucket holds exactly them (done: emit it), the keys still in play
 * [rlo, rhi], the bucket refined [blo, bhi] and its histogram shift. */
typedef struct {
    uint32_t src, src_n, dst, need, done;
    kc_u64 rlo, rhi, blo, bhi;
    unsigned shift;
} kc_gpass;

/* The first pass: the source is the candidates when the sample held (at least k, all stored),
 * else the input itself. Every block decides alike from the same counts. */
__device__ __forceinline__ kc_gpass kc_grid_first_pass(const kc_gargs &a, int forced, unsigned t)
{
    kc_gpass p;
    uint32_t T = 0, nc = 0, mr = 0;
    int cand = 0;
    if (!forced) {
        T = a.fs->T;
        nc = a.fs->ncand;
        mr = a.fs->maxrank;
        cand = nc >= a.k && nc <= a.cap;
    }
    p.src = cand ? 1u : 0u;
    p.src_n = cand ? nc : a.n;
    p.dst = 0;
    p.need = a.k;
    p.done = 0;
    p.rlo = 0;
    p.rhi = KC_UKEY_MAX;
    p.blo = cand ? (kc_u64)T << 32 : 0ull;
    p.bhi = cand ? (((kc_u64)mr << 32) | 0xffffffffull) : KC_UKEY_MAX;
    p.shift = kc_shift(p.bhi - p.blo, KC_GRID_BINS);
    if (blockIdx.x == 0 && t == 0) {
        if (cand) atomicAdd(&a.st->candidates, (kc_u64)nc);
        else if (!forced) atomicAdd(&a.st->fallbacks, 1ull);
    }
    return p;
}

/* A later pass: what the previous pass's last block planned. */
__device__ __forceinline__ kc_gpass kc_grid_next_pass(const kc_grid *g)
{
    kc_gpass p;
    p.src = g->src;
    p.src_n = g->src_n;
    p.dst = g->dst;
    p.need = g->need;
    p.done = g->done;
    p.shift = g->shift;
    p.rlo = g->rlo;
    p.rhi = g->rhi;
    p.blo = g->blo;
    p.bhi = g->bhi;
    return p;
}

/* The last block of a pass that refined the bucket (not done): finds the histogram bucket that
 * holds the need-th largest key and plans the next pass into a.g (every thread of the block
 * calls it). s_d, s_above, s_cnt: shared memory of the block. */
__device__ __forceinline__ void kc_grid_plan(const kc_gargs &a, int first, const kc_gpass &p,
                                             unsigned t, uint32_t *s_d, uint32_t *s_above,
                                             uint32_t *s_cnt)
{
    kc_grid *g = a.g;
    uint32_t h[8], c = 0;
#pragma unroll
    for (int j = 0; j < 8; j++) {
        h[j] = __ldcg(&g->hist[8 * t + j]);
        c += h[j];
    }
    uint32_t tot, before = kc_block_excl_scan(c, &tot);
    uint32_t acc = tot - before - c; /* elements in the buckets above this thread's */
#pragma unroll
    for (int j = 7; j >= 0; j--) {
        if (acc < p.need && p.need <= acc + h[j]) {
            *s_d = 8 * t + (unsigned)j;
            *s_above = acc;
            *s_cnt = h[j];
        }
        acc += h[j];
    }
#pragma unroll
    for (int j = 0; j < 8; j++) g->hist[8 * t + j] = 0;
    __syncthreads();
    if (t == 0) {
        uint32_t need2 = p.need - *s_above, cnt = *s_cnt;
        kc_u64 nblo = p.blo + ((kc_u64)*s_d << p.shift);
        kc_u64 nbhi = nblo + ((1ull << p.shift) - 1ull);
        if (nbhi > p.bhi) nbhi = p.bhi;
        uint32_t nsrc = p.src, nsrc_n = p.src_n;
        if (p.dst) { /* this pass compacted the bucket: the next reads only it */
            nsrc = p.dst;
            nsrc_n = __ldcg(&g->ncomp);
        }
        uint32_t ndone = cnt == need2;
        g->src = nsrc;
        g->src_n = nsrc_n;
        g->dst = (!ndone && cnt <= a.cap) ? (nsrc == 1 ? 2u : 1u) : 0u;
        g->need = need2;
        g->done = ndone;
        g->finished = 0;
        g->shift = kc_shift(nbhi - nblo, KC_GRID_BINS);
        g->rlo = p.blo;
        g->rhi = p.bhi;
        g->blo = nblo;
        g->bhi = nbhi;
        g->ncomp = 0;
        g->tickets = 0;
        if (first) g->nout = 0; /* the first pass emits nothing */
    }
}

__global__ void __launch_bounds__(KC_THREADS) kc_grid_kernel(kc_gargs a, int first, int forced)
{
    __shared__ uint32_t sh_hist[KC_GRID_BINS];
    __shared__ uint32_t s_emit, s_comp, s_last, s_d, s_above, s_cnt;
    const unsigned t = threadIdx.x;
    kc_grid *g = a.g;
    if (!first && g->finished) return;
    const kc_gpass p = first ? kc_grid_first_pass(a, forced, t) : kc_grid_next_pass(g);
    const uint32_t src = p.src, src_n = p.src_n, dst = p.dst, done = p.done;
    const kc_u64 rlo = p.rlo, rhi = p.rhi, blo = p.blo, bhi = p.bhi;
    const unsigned shift = p.shift;
    for (unsigned b = t; b < KC_GRID_BINS; b += KC_THREADS) sh_hist[b] = 0;
    __syncthreads();
    const uint2 *sb = src == 1 ? a.bufA : a.bufB;
    uint2 *db = dst == 1 ? a.bufA : a.bufB;
    const int count_nan = first && forced; /* forced: no candidate pass counted them */
    uint32_t nan = 0;
    for (kc_u64 t0 = (kc_u64)blockIdx.x * KC_GTILE; t0 < src_n;
         t0 += (kc_u64)gridDim.x * KC_GTILE) {
        kc_u64 key[KC_GITEMS];
        uint32_t em = 0, cm = 0, ne = 0, nc = 0;
#pragma unroll
        for (int it = 0; it < KC_GITEMS; it++) {
            kc_u64 i = t0 + (kc_u64)it * KC_THREADS + t;
            key[it] = 0;
            if (i < src_n) {
                uint32_t r, id;
                if (src == 0) {
                    r = kc_rank(__ldg(a.x + i));
                    id = a.base + (uint32_t)i;
                    nan += r == 0u;
                } else {
                    uint2 e = sb[i];
                    id = e.x;
                    r = e.y;
                }
                kc_u64 k = kc_key(r, id);
                key[it] = k;
                if (k >= rlo && k <= rhi) {
                    if (done ? k >= blo : k > bhi) {
                        em |= 1u << it;
                        ne++;
                    } else if (!done && k >= blo) {
                        atomicAdd(&sh_hist[(uint32_t)((k - blo) >> shift)], 1u);
                        if (dst) {
                            cm |= 1u << it;
                            nc++;
                        }
                    }
                }
            }
        }
        /* Both counts in one scan: each is at most KC_GTILE < 2^16 per tile. */
        uint32_t tot, ex = kc_block_excl_scan((ne << 16) | nc, &tot);
        if (t == 0) {
            s_emit = (tot >> 16) ? atomicAdd(&g->nout, tot >> 16) : 0u;
            s_comp = (tot & 0xffffu) ? atomicAdd(&g->ncomp, tot & 0xffffu) : 0u;
        }
        __syncthreads();
        uint32_t eo = s_emit + (ex >> 16), co = s_comp + (ex & 0xffffu);
#pragma unroll
        for (int it = 0; it < KC_GITEMS; it++) {
            uint32_t id = ~(uint32_t)key[it];
            if ((em >> it) & 1u) a.out[eo++] = id;
            if ((cm >> it) & 1u) db[co++] = make_uint2(id, (uint32_t)(key[it] >> 32));
        }
        __syncthreads();
    }
    if (count_nan) kc_add_count(&a.st->nan, nan);
    if (!done)
        for (unsigned b = t; b < KC_GRID_BINS; b += KC_THREADS)
            if (sh_hist[b]) atomicAdd(&g->hist[b], sh_hist[b]);
    /* The last block to arrive sees every block's histogram (threadFenceReduction). */
    __threadfence();
    __syncthreads();
    if (t == 0) s_last = atomicAdd(&g->tickets, 1u) == gridDim.x - 1;
    __syncthreads();
    if (!s_last) return;
    __threadfence();
    if (done) {
        if (t == 0) {
            g->finished = 1;
            g->tickets = 0;
        }
        return;
    }
    kc_grid_plan(a, first, p, t, &s_d, &s_above, &s_cnt);
}

/* ---- Host: plan -------------------------------------------------------------------------------- */

enum { C_SKIP, C_ALL, C_W, C_B, C_L, C_H };

static int classify(size_t len, size_t k, unsigned flags)
{
    if (k == 0) return C_SKIP;
    if (k == len) return C_ALL;
    if (flags & DEFTSIM_KFLAG_FORCE_FALLBACK)
        return len >= KC_GRID_MIN ? C_H : len <= KC_W_MAX ? C_W : C_B;
    if ((flags & DEFTSIM_KFLAG_FORCE_SAMPLING) && len >= KC_SAMPLE_MIN)
        return len >= KC_GRID_MIN ? C_H : C_L;
    if (len <= KC_W_MAX) return C_W;
    if (len <= KC_B_MAX) return C_B;
    return len >= KC_GRID_MIN ? C_H : C_L;
}

/* The sample of a fragment: nsect sectors of 8 (S = 8 nsect elements, at most len / 2), the
 * rank r of its threshold, and the candidate region's capacity. mu = 128 sampled elements
 * above the true k-th expected: the threshold then passes about 1.3 k elements, and 3.5
 * standard deviations of slack make a miss rare. */
static void sample_plan(size_t len, size_t k, uint32_t *nsect, uint32_t *r, uint32_t *cap)
{
    double d = (double)k / (double)len;
    double S = 128.0 / d;
    S = S < 2048 ? 2048 : S > 16384 ? 16384 : S;
    double smax = (double)(len / 2);
    if (S > smax) S = smax;
    size_t ns = (size_t)S / 8;
    if (ns < 1) ns = 1;
    double Sd = 8.0 * (double)ns;
    double mu = Sd * d;
    double rr = ceil(mu + 3.5 * sqrt(mu) + 4.0);
    if (rr > Sd) rr = Sd;
    if (rr < 1) rr = 1;
    double expect = rr * (double)len / Sd;
    double c = 2.0 * expect + 4096.0;
    *nsect = (uint32_t)ns;
    *r = (uint32_t)rr;
    *cap = c >= (double)len ? (uint32_t)len : (uint32_t)c;
}

typedef struct {
    size_t nall, nb, nw, nl, nh;
    size_t smp, cand, hmax, ntiles;
    size_t forced_fallbacks;
    /* scratch layout */
    size_t wf_bytes, fr_bytes, tables, fs_off, smp_off, cand_off, hbuf_off, total;
} kc_plan;

static size_t kc_div_up(size_t a, size_t b) { return (a + b - 1) / b; }

static deftsim_status plan_count(const deftsim_kseg *segs, size_t nseg, unsigned flags, kc_plan *p)
{
    memset(p, 0, sizeof *p);
    for (size_t j = 0; j < nseg; j++) {
        size_t len = segs[j].len, k = segs[j].k;
        int c = classify(len, k, flags);
        if ((flags & DEFTSIM_KFLAG_FORCE_FALLBACK) && c != C_SKIP && c != C_ALL)
            p->forced_fallbacks++;
        switch (c) {
        case C_SKIP: break;
        case C_ALL: p->nall++; break;
        case C_W: p->nw++; break;
        case C_B: p->nb++; break;
        case C_L:
        case C_H: {
            uint32_t ns, r, cap;
            sample_plan(len, k, &ns, &r, &cap);
            if (c == C_L) p->nl++;
            else {
                p->nh++;
                if (cap > p->hmax) p->hmax = cap;
            }
            p->smp += 8 * (size_t)ns;
            p->cand += cap;
            p->ntiles += kc_div_up(len, KC_TILE);
            break;
        }
        }
    }
    if (p->ntiles > UINT32_MAX)
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "kernels: cuda: segtopk: %zu tiles of sampled fragments exceed "
                                 "2^32",
                                 p->ntiles);
    size_t nwf = p->nall + p->nb + p->nw, nfr = p->nl + p->nh;
    p->wf_bytes = kc_round(nwf * sizeof(kc_wfrag));
    p->fr_bytes = nfr * sizeof(kc_frag);
    p->tables = p->wf_bytes + p->fr_bytes;
    p->fs_off = kc_round(p->tables);
    p->smp_off = p->fs_off + kc_round(nfr * sizeof(kc_fstate));
    p->cand_off = p->smp_off + kc_round(p->smp * sizeof(uint32_t));
    p->hbuf_off = p->cand_off + kc_round(p->cand * sizeof(uint2));
    p->total = p->hbuf_off + kc_round(p->hmax * sizeof(uint2));
    return DEFTSIM_OK;
}

/* Fills the tables (host memory laid out as on the device): wf = [take-all, B, W], fr = [L, H]. */
static void plan_fill(const deftsim_kseg *segs, size_t nseg, unsigned flags, const kc_plan *p,
                      void *host)
{
    kc_wfrag *wf = (kc_wfrag *)host;
    kc_frag *fr = (kc_frag *)((unsigned char *)host + p->wf_bytes);
    size_t ia = 0, ib = p->nall, iw = p->nall + p->nb, il = 0, ih = p->nl;
    unsigned long long out = 0, smp = 0, cand = 0;
    uint32_t tile = 0;
    /* Tiles follow the fr order (L then H), so that a tile's fragment is found by binary
     * search; their starts come in a second sweep. */
    for (size_t j = 0; j < nseg; j++) {
        size_t len = segs[j].len, k = segs[j].k;
        int c = classify(len, k, flags);
        kc_wfrag w = {(uint32_t)segs[j].offset, (uint32_t)len, (uint32_t)k, 0u, out};
        switch (c) {
        case C_SKIP: break;
        case C_ALL: wf[ia++] = w; break;
        case C_B: wf[ib++] = w; break;
        case C_W: wf[iw++] = w; break;
        case C_L:
        case C_H: {
            kc_frag f;
            memset(&f, 0, sizeof f);
            f.off = (uint32_t)segs[j].offset;
            f.len = (uint32_t)len;
            f.k = (uint32_t)k;
            sample_plan(len, k, &f.nsect, &f.r, &f.cand_cap);
            f.out = out;
            f.cand_off = cand;
            f.smp_off = smp;
            cand += f.cand_cap;
            smp += 8ull * f.nsect;
            fr[c == C_L ? il++ : ih++] = f;
            break;
        }
        }
        out += k;
    }
    for (size_t i = 0; i < p->nl + p->nh; i++) {
        fr[i].tile0 = tile;
        tile += (uint32_t)kc_div_up(fr[i].len, KC_TILE);
    }
}

/* ---- Host: operations -------------------------------------------------------------------------- */

static deftsim_status seg_scratch(const deftsim_kctx *ctx, const deftsim_kseg *segs, size_t nseg,
                                  size_t *bytes)
{
    kc_plan p;
    deftsim_status st = plan_count(segs, nseg, ctx->flags, &p);
    if (st) return st;
    *bytes = p.total ? 256 + p.total : 0;
    return DEFTSIM_OK;
}

extern "C" deftsim_status kc_segtopk_scratch(const deftsim_kctx *ctx, const deftsim_kseg *segs,
                                             size_t nseg, size_t *bytes)
{
    return seg_scratch(ctx, segs, nseg, bytes);
}

extern "C" deftsim_status kc_topk_scratch(const deftsim_kctx *ctx, size_t n, size_t k,
                                          size_t *bytes)
{
    deftsim_kseg one = {0, n, k};
    return seg_scratch(ctx, &one, 1, bytes);
}

static deftsim_status seg_launch(deftsim_kctx *ctx, const float *x, uint32_t *out,
                                 const kc_plan *pp, const kc_frag *h_fr, unsigned char *base);

static deftsim_status seg_run(deftsim_kctx *ctx, const float *x, const deftsim_kseg *segs,
                              size_t nseg, uint32_t *out, void *scratch, size_t scratch_bytes)
{
    kc_state *s = kc_st(ctx);
    deftsim_status st;
    kc_plan p;
    if ((st = plan_count(segs, nseg, ctx->flags, &p))) return st;
    if ((st = kc_check_dev(ctx, x, "x")) || (st = kc_check_dev(ctx, out, "idx_out")) ||
        (st = kc_check_dev(ctx, p.total ? scratch : NULL, "scratch")))
        return st;
    if ((st = kc_begin(ctx, p.nh ? KC_CTL_ALL : KC_CTL_SMALL))) return st;
    s->host_fallbacks = p.forced_fallbacks;
    kc_pending(ctx);
    if (!p.total) return DEFTSIM_OK;
    kc_arena ar;
    kc_arena_init(&ar, scratch, scratch_bytes);
    unsigned char *base = (unsigned char *)kc_take(&ar, p.total);
    kc_stage sg;
    if ((st = kc_stage_take(s, p.tables, &sg))) return st;
    plan_fill(segs, nseg, ctx->flags, &p, sg.host);
    /* The H entries are read back from the host copy below: the slot is not reused before
     * KC_STAGE_SLOTS more uploads, and a malloc'd copy lives until kc_stage_done. */
    const kc_frag *h_fr = (const kc_frag *)((unsigned char *)sg.host + p.wf_bytes);
    st = kc_stage_put(s, &sg, base, p.tables);
    if (!st) st = seg_launch(ctx, x, out, &p, h_fr, base);
    kc_stage_done(&sg);
    return st;
}

/* Queues the kernels of a planned segmented top-k whose tables are at `base` on the device. */
static deftsim_status seg_launch(deftsim_kctx *ctx, const float *x, uint32_t *out,
                                 const kc_plan *pp, const kc_frag *h_fr, unsigned char *base)
{
    kc_state *s = kc_st(ctx);
    const kc_plan p = *pp;
    const int forced = (ctx->flags & DEFTSIM_KFLAG_FORCE_FALLBACK) != 0;
    kc_wfrag *d_wf = (kc_wfrag *)base;
    kc_frag *d_fr = (kc_frag *)(base + p.wf_bytes);
    kc_fstate *d_fs = (kc_fstate *)(base + p.fs_off);
    uint32_t *d_smp = (uint32_t *)(base + p.smp_off);
    uint2 *d_cand = (uint2 *)(base + p.cand_off);
    uint2 *d_hbuf = (uint2 *)(base + p.hbuf_off);

    const uint32_t nfr = (uint32_t)(p.nl + p.nh);
    const int sampled = !forced && nfr > 0;
    if (sampled) {
        kc_sample_kernel<<<nfr, KC_THREADS, 0, s->stream>>>(x, d_fr, d_fs, d_smp);
        KC_LAUNCHED();
        unsigned g = kc_blocks(p.ntiles, 1, (unsigned)s->sms * 8u);
        kc_filter_kernel<<<g, KC_THREADS, 0, s->stream>>>(x, d_fr, d_fs, nfr, (uint32_t)p.ntiles,
                                                           d_cand, &s->ctl->st);
        KC_LAUNCHED();
    }
    size_t nbw = p.nall + p.nb;
    size_t blocks = p.nl + nbw + kc_div_up(p.nw, KC_WARPS);
    if (blocks > 0x7fffffffu)
        return deftsim_error_set(DEFTSIM_E_INPUT, "kernels: cuda: segtopk: %zu blocks exceed a grid", blocks);
    if (blocks) {
        kc_seg_kernel<<<(unsigned)blocks, KC_THREADS, 0, s->stream>>>(
            x, d_fr, d_fs, (uint32_t)p.nl, d_cand, d_wf, (uint32_t)nbw, (uint32_t)p.nw, out,
            &s->ctl->st);
        KC_LAUNCHED();
    }
    /* Class H: each fragment's passes, one after the other (there are few: each holds at
     * least KC_GRID_MIN elements). */
    const unsigned gg = (unsigned)s->sms * 2u;
    for (size_t h = 0; h < p.nh; h++) {
        const kc_frag f = h_fr[p.nl + h];
        kc_gargs a;
        a.x = x + f.off;
        a.n = f.len;
        a.base = f.off;
        a.k = f.k;
        a.cap = f.cand_cap;
        a.fs = d_fs + p.nl + h;
        a.bufA = d_cand + f.cand_off;
        a.bufB = d_hbuf;
        a.out = out + f.out;
        a.g = &s->ctl->g;
        a.st = &s->ctl->st;
        for (int pass = 0; pass < KC_GRID_PASSES; pass++) {
            kc_grid_kernel<<<gg, KC_THREADS, 0, s->stream>>>(a, pass == 0, forced);
            KC_LAUNCHED();
        }
    }
    return DEFTSIM_OK;
}

extern "C" deftsim_status kc_segtopk(deftsim_kctx *ctx, const float *x, size_t n,
                                     const deftsim_kseg *segs, size_t nseg, deftsim_kidx *out,
                                     void *scratch, size_t scratch_bytes)
{
    (void)n;
    return seg_run(ctx, x, segs, nseg, out, scratch, scratch_bytes);
}

extern "C" deftsim_status kc_topk(deftsim_kctx *ctx, const float *x, size_t n, size_t k,
                                  deftsim_kidx *out, void *scratch, size_t scratch_bytes)
{
    deftsim_kseg one = {0, n, k};
    return seg_run(ctx, x, &one, 1, out, scratch, scratch_bytes);
}

/* ---- Shared with cuda_ops.cu: the grid select over a candidate array ---------------------------
 * gTop-k's merge selects among its summed entries with the H machinery: the entries are the
 * candidates (all of them), so the passes start from them and never fall back. */
extern "C" deftsim_status kc_grid_select_cands(deftsim_kctx *ctx, uint2 *cand, uint2 *spare,
                                               uint32_t m, uint32_t k, void *fstate_dev,
                                               uint32_t *out)
{
    kc_state *s = kc_st(ctx);
    kc_fstate f = {0u, m, KC_RANK_MAX, 0u};
    kc_stage sg;
    deftsim_status st;
    if ((st = kc_stage_take(s, sizeof f, &sg))) return st;
    memcpy(sg.host, &f, sizeof f);
    st = kc_stage_put(s, &sg, fstate_dev, sizeof f);
    kc_stage_done(&sg);
    if (st) return st;
    kc_gargs a;
    memset(&a, 0, sizeof a);
    a.n = m;
    a.k = k;
    a.cap = m;
    a.fs = (const kc_fstate *)fstate_dev;
    a.bufA = cand;
    a.bufB = spare;
    a.out = out;
    a.g = &s->ctl->g;
    a.st = &s->ctl->st;
    unsigned gg = kc_blocks(m, KC_GTILE, (unsigned)s->sms * 2u);
    for (int pass = 0; pass < KC_GRID_PASSES; pass++) {
        kc_grid_kernel<<<gg, KC_THREADS, 0, s->stream>>>(a, pass == 0, 0);
        KC_LAUNCHED();
    }
    return DEFTSIM_OK;
}

extern "C" size_t kc_fstate_bytes(void) { return sizeof(kc_fstate); }
