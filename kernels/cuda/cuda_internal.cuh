/* cuda_internal.cuh - pieces shared by the CUDA backend's files (not installed, not public).
 *
 * Host side: the per-context state, the check macros that turn every cudaError_t into a
 * deftsim_status, scratch carving and the pinned staging ring. Device side: ranks and keys,
 * block and warp scans. Every kernel runs with KC_THREADS threads per block. */
#ifndef DEFTSIM_CUDA_INTERNAL_CUH
#define DEFTSIM_CUDA_INTERNAL_CUH

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

extern "C" {
#include "deftsim_error.h"
#include "deftsim_kernels.h"
#include "kernels_backend.h"
}
#include "cuda_backend.h"

#define KC_THREADS 256
#define KC_WARPS (KC_THREADS / 32)

/* ---- Ranks and keys ----------------------------------------------------------------------
 * As on the CPU: rank(v) = 0 for NaN, else (|v| bits) + 1, so |x| orders as an integer, -0 ==
 * +0, Inf is above every finite value and NaN below zero. A 64-bit key appends the complement
 * of the element's index, key = rank << 32 | ~index: keys are unique and "larger key" is
 * exactly "ranks higher, lower index first", so every top-k is the set of the k largest keys
 * and every selection below is a search for one key. */
#define KC_KEY_INF 0x7f800000u
#define KC_RANK_MAX (KC_KEY_INF + 1u)
#define KC_UKEY_MAX ((((unsigned long long)KC_RANK_MAX) << 32) | 0xffffffffull)
/* Not a rank: marks "not selected" in register arrays. */
#define KC_NO_RANK 0xffffffffu

typedef unsigned long long kc_u64;

__device__ __forceinline__ uint32_t kc_rank(float v)
{
    uint32_t k = __float_as_uint(v) & 0x7fffffffu;
    return k <= KC_KEY_INF ? k + 1u : 0u;
}

__device__ __forceinline__ kc_u64 kc_key(uint32_t rank, uint32_t index)
{
    return ((kc_u64)rank << 32) | (kc_u64)(uint32_t)~index;
}

/* Smallest shift s with (range >> s) < bins: the digit that spreads [lo, lo + range] over at
 * most `bins` buckets. */
__host__ __device__ __forceinline__ unsigned kc_shift(kc_u64 range, unsigned bins)
{
    unsigned s = 0;
    while ((range >> s) >= bins) s++;
    return s;
}

/* ---- Block-wide helpers (blockDim.x == KC_THREADS) ---------------------------------------- */

__device__ __forceinline__ uint32_t kc_warp_incl_scan(uint32_t v)
{
    unsigned lane = threadIdx.x & 31;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        uint32_t y = __shfl_up_sync(0xffffffffu, v, o);
        if (lane >= (unsigned)o) v += y;
    }
    return v;
}

/* Exclusive prefix sum of v over the block in thread order; *total receives the sum. Every
 * thread of the block must call it (it synchronizes). */
__device__ __forceinline__ uint32_t kc_block_excl_scan(uint32_t v, uint32_t *total)
{
    __shared__ uint32_t ws[KC_WARPS];
    unsigned w = threadIdx.x >> 5;
    uint32_t p = kc_warp_incl_scan(v);
    if ((threadIdx.x & 31) == 31) ws[w] = p;
    __syncthreads();
    uint32_t before = 0, tot = 0;
#pragma unroll
    for (int i = 0; i < KC_WARPS; i++) {
        uint32_t s = ws[i];
        before += (unsigned)i < w ? s : 0u;
        tot += s;
    }
    __syncthreads();
    *total = tot;
    return before + p - v;
}

__device__ __forceinline__ uint32_t kc_warp_sum(uint32_t v)
{
#pragma unroll
    for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ uint32_t kc_warp_max(uint32_t v)
{
#pragma unroll
    for (int o = 16; o; o >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Adds v over the block into *dst with one atomic per warp (counts for the record). */
__device__ __forceinline__ void kc_add_count(kc_u64 *dst, uint32_t v)
{
    v = kc_warp_sum(v);
    if ((threadIdx.x & 31) == 0 && v) atomicAdd(dst, (kc_u64)v);
}

/* ---- Device control block ----------------------------------------------------------------
 * One per context, zeroed at the start of every operation: the record's counts, the scalar
 * results read back by the host, and the state of the grid-wide selection (cuda_topk.cu). */
typedef struct {
    kc_u64 nan, candidates, fallbacks;
} kc_stats;

typedef struct {
    kc_u64 count;       /* filter/count/union/merge results */
    kc_u64 bad;         /* ~(first offending position) of an index check, 0: none */
    uint32_t absmax;    /* largest key (|x| bits) among numbers, +1; 0: no number */
    uint32_t pad;
} kc_scalars;

#define KC_GRID_BINS 2048

typedef struct {
    /* Written by the last block of a pass, read by every block of the next. */
    uint32_t src;       /* 0: the input, 1: buffer A, 2: buffer B */
    uint32_t src_n;     /* elements in the source */
    uint32_t dst;       /* buffer this pass compacts the bucket into (0: none) */
    uint32_t need;      /* elements still wanted from the bucket */
    uint32_t done;      /* every element of the bucket is wanted: the next pass finishes */
    uint32_t finished;  /* later passes do nothing */
    uint32_t shift;     /* histogram digit of the bucket */
    uint32_t pad;
    kc_u64 rlo, rhi;    /* the range the source is read in */
    kc_u64 blo, bhi;    /* the bucket being resolved, inside [rlo, rhi] */
    /* Counters of the running pass. */
    uint32_t nout, ncomp, tickets, pad2;
    uint32_t hist[KC_GRID_BINS];
} kc_grid;

typedef struct {
    kc_stats st;
    kc_scalars sc;
    kc_grid g;
} kc_ctl;

/* ---- Host state ------------------------------------------------------------------------- */

#define KC_STAGE_SLOTS 8
#define KC_STAGE_SLOT ((size_t)1 << 20)

typedef struct {
    int device;
    int sms;
    char isa[16];             /* "sm_90" */
    char name[320];           /* "NVIDIA H200 (sm_90, 132 SMs)" */
    cudaStream_t stream;
    kc_ctl *ctl;              /* device */
    kc_ctl *pin;              /* pinned mirror of the counts and scalars */
    unsigned char *stage;     /* pinned: KC_STAGE_SLOTS slots of KC_STAGE_SLOT bytes */
    cudaEvent_t stage_ev[KC_STAGE_SLOTS];
    int stage_busy[KC_STAGE_SLOTS];
    unsigned stage_next;
    struct deftsim_kcuda_pool *pool; /* deftsim_kcuda_attach_pool: working memory of
                                        operations without a scratch argument */
    int stats_pending;        /* the last operation's counts are still on the device */
    size_t host_fallbacks;    /* fallbacks the host planned for the last operation */
} kc_state;

static inline kc_state *kc_st(const deftsim_kctx *ctx) { return (kc_state *)ctx->state; }

/* A failed CUDA call as a status, naming the call and the line. */
deftsim_status kc_fail(cudaError_t e, const char *call, const char *file, int line);

#define KC_CHECK(call)                                                                      \
    do {                                                                                    \
        cudaError_t kc_e_ = (call);                                                         \
        if (kc_e_ != cudaSuccess) return kc_fail(kc_e_, #call, __FILE__, __LINE__);        \
    } while (0)

/* After a kernel launch: a launch error (bad configuration, no device code for this GPU). */
#define KC_LAUNCHED() KC_CHECK(cudaGetLastError())

/* Starts an operation: zeroes the control block (KC_CTL_SMALL: only the counts and scalars)
 * and clears the record. */
#define KC_CTL_SMALL 0
#define KC_CTL_ALL 1
deftsim_status kc_begin(deftsim_kctx *ctx, int what);
/* Marks the record's counts as waiting on the device (read by kc_record). */
void kc_pending(deftsim_kctx *ctx);
/* Waits for the stream and copies the counts and scalars into s->pin. */
deftsim_status kc_readback(deftsim_kctx *ctx);

/* 1 if p is device (or managed) memory; otherwise records DEFTSIM_E_USAGE naming `what`. */
deftsim_status kc_check_dev(const deftsim_kctx *ctx, const void *p, const char *what);

/* Pinned staging: kc_stage_take() returns host memory for `bytes` (a ring slot, after the
 * copy that last used it has finished; or, for tables larger than a slot, malloc'd memory);
 * kc_stage_put() copies it to dst on the stream (waiting only for malloc'd memory);
 * kc_stage_done() frees malloc'd memory. The host copy stays readable until then. */
typedef struct {
    void *host;
    int slot;  /* -1: malloc'd */
} kc_stage;
deftsim_status kc_stage_take(kc_state *s, size_t bytes, kc_stage *out);
deftsim_status kc_stage_put(kc_state *s, kc_stage *st, void *dst, size_t bytes);
void kc_stage_done(kc_stage *st);

/* ---- Scratch carving: 256-byte aligned pieces of a device buffer -------------------------- */

typedef struct {
    uintptr_t p;
    size_t left;
} kc_arena;

static inline size_t kc_round(size_t b) { return (b + 255) & ~(size_t)255; }

static inline void kc_arena_init(kc_arena *a, void *scratch, size_t bytes)
{
    uintptr_t u = (uintptr_t)scratch;
    size_t pad = (size_t)((256 - (u & 255)) & 255);
    a->p = u + (pad <= bytes ? pad : 0);
    a->left = pad <= bytes ? bytes - pad : 0;
}

/* NULL for 0 bytes or when exhausted (the size queries make exhaustion impossible). */
static inline void *kc_take(kc_arena *a, size_t bytes)
{
    size_t b = kc_round(bytes);
    if (bytes == 0 || b > a->left) return NULL;
    void *r = (void *)a->p;
    a->p += b;
    a->left -= b;
    return r;
}

/* Launch geometry. */
static inline unsigned kc_blocks(size_t work, size_t per_block, unsigned cap)
{
    size_t b = (work + per_block - 1) / per_block;
    if (b < 1) b = 1;
    return b > cap ? cap : (unsigned)b;
}

/* Blocks for n elements, per_thread of them per thread, at most 8 per SM (grid-stride loops
 * cover the rest): the element-wise operations of cuda_ops.cu and cuda_sparse.cu. */
static inline unsigned kc_grid_for(const kc_state *s, size_t n, unsigned per_thread)
{
    return kc_blocks(n, (size_t)KC_THREADS * per_thread, (unsigned)s->sms * 8u);
}

#endif
