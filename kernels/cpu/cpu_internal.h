/* cpu_internal.h - pieces shared by the CPU backend's files (not installed, not public). */
#ifndef DEFTSIM_CPU_INTERNAL_H
#define DEFTSIM_CPU_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "deftsim_kernels.h"
#include "kernels_backend.h"
#include "kernels_ops.h"

/* ---- Ranks ------------------------------------------------------------------------------
 * Every comparison works on a 32-bit rank instead of the float: the bit pattern with the sign
 * cleared orders non-negative floats like their values, so |x| compares as an integer and the
 * hot loops vectorize. NaN gets rank 0 and every number (zero included) key + 1, which is the
 * documented policy "NaN ranks below every number". Ranks lie in [0, CPU_RANK_MAX]. */
#define CPU_KEY_INF 0x7f800000u
#define CPU_RANK_MAX (CPU_KEY_INF + 1u)

static inline uint32_t cpu_key(float v)
{
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    return u & 0x7fffffffu;
}
static inline uint32_t cpu_rank_of_key(uint32_t key) { return key <= CPU_KEY_INF ? key + 1u : 0u; }
static inline uint32_t cpu_rank(float v) { return cpu_rank_of_key(cpu_key(v)); }

/* Room past a candidate buffer's capacity that the vector loops may scribble on. */
#define CPU_SLACK 16
/* Histogram buckets of one radix level. */
#define CPU_HIST 2048
/* Largest candidate set ranked by counting. */
#define CPU_TINY 64
/* Below this many candidates, selection bisects the rank range with vectorized counts. */
#define CPU_QS_MAX 1024

/* ---- Hot loops, one table per instruction set -------------------------------------------
 * A threshold T is a rank: "passes" means rank >= T. T == 0 passes everything, NaN included;
 * T >= 1 never passes NaN. Every loop adds the NaNs it reads to *nan. */
typedef struct {
    const char *name;
    /* Largest |x| (NaN skipped; -1 when there is no number). */
    float (*absmax)(const float *x, size_t n, size_t *nan);
    /* Number of elements that pass. */
    size_t (*count_ge)(const float *x, size_t n, uint32_t T, size_t *nan);
    /* Appends (base + i, key) for every element whose key = bits & 0x7fffffff is >= kmin, in
     * index order. NaN keys exceed every number's, so with kmin <= CPU_KEY_INF + 1 every NaN
     * is appended: the selection then ranks and counts them, which keeps this, the hottest
     * loop, free of NaN tests. idx and key must have room for cap + CPU_SLACK entries.
     * Returns the count, or SIZE_MAX as soon as more than cap are appended. */
    size_t (*gather_cand)(const float *x, size_t n, uint32_t base, uint32_t kmin, uint32_t *idx,
                          uint32_t *key, size_t cap);
    /* gather_cand without the keys: appends base + i only. For inputs still in cache, where
     * reading the few passing keys again (cpu_rank_at) costs less than storing them all. */
    size_t (*gather_idx)(const float *x, size_t n, uint32_t base, uint32_t kmin, uint32_t *idx,
                         size_t cap);
    /* The same for thresholds that few elements pass (under about 1 in 200): skips blocks
     * with none, which is cheaper when the skip is predictable and dearer when it is not. */
    size_t (*gather_sparse)(const float *x, size_t n, uint32_t base, uint32_t kmin, uint32_t *idx,
                            uint32_t *key, size_t cap);
    /* Writes the first min(count, cap) passing indices (base + i) to idx, never beyond cap,
     * and returns the count of all passing elements. */
    size_t (*filter_idx)(const float *x, size_t n, uint32_t base, uint32_t T, uint32_t *idx,
                         size_t cap, size_t *nan);
    /* Group maxima for the in-cache top-k path: the input is cut into rows of 8, rows into
     * blocks of R rows; group (block b, lane j) is the maximum rank of column j in block b,
     * written to gm[8 b + j]; the n % 8 tail elements form one more group at the end. */
    void (*group_max)(const float *x, size_t n, size_t R, uint32_t *gm);
    /* One pass over candidates (idx, key), key = |x| bits: writes the index of every
     * candidate with k_above <= key <= CPU_KEY_INF to out, which must be exactly n_above of
     * them (never writes beyond), and moves the candidates with k_lo <= key < k_above to the
     * front of idx and key in their order; returns how many it kept. */
    size_t (*split)(uint32_t *idx, uint32_t *key, size_t c, uint32_t k_above, uint32_t k_lo,
                    uint32_t *out, size_t n_above);
    /* Exact top-need among c <= CPU_TINY ranks (1 <= need <= c), an earlier position winning
     * ties: for each rank, the count of ranks that beat it (those before it that are >= it,
     * those after it that are >); the need with a count below need win. Branch-free, c^2
     * compares, vectorized over the ranks being counted. When out is not NULL the winners'
     * idx entries go to out[0..need) in position order (never beyond). Returns the smallest
     * winning rank: the need-th largest. Ranks are below 2^31. */
    uint32_t (*top_small)(const uint32_t *rank, const uint32_t *idx, size_t c, size_t need,
                          uint32_t *out);
    /* Number of a[0..n) >= t, for values below 2^31 (ranks). */
    size_t (*count_u32_ge)(const uint32_t *a, size_t n, uint32_t t);
    /* Sum of squares of at most CPU_NORM_BLOCK elements in double, in the fixed order of
     * cpu_sumsq_ref() (so every instruction set gives the same bits). */
    double (*sumsq)(const float *x, size_t n);
    /* The accumulate pass on at most CPU_NORM_BLOCK elements: acc[i] = acc[i] + g[i] (copy:
     * acc[i] = g[i]), and the sum of squares of the new values in sumsq's order. */
    double (*acc_sumsq)(float *acc, const float *g, size_t n, int copy);
} cpu_isa;

#define CPU_NORM_BLOCK 4096
_Static_assert(CPU_NORM_BLOCK == DEFTSIM_K_NORM_BLOCK, "the public block is the norms' block");

const cpu_isa *cpu_isa_generic(void);
/* NULL when the build or the machine lacks AVX2. */
const cpu_isa *cpu_isa_avx2(void);
/* NULL when the build or the machine lacks AVX2 or AVX-512 F, BW, VL and DQ. */
const cpu_isa *cpu_isa_avx512(void);

static inline size_t cpu_group_count(size_t n, size_t R)
{
    size_t rows = n / 8;
    return 8 * ((rows + R - 1) / R) + (n % 8 ? 1 : 0);
}

/* ---- Thread pool -------------------------------------------------------------------------
 * Started once per context. run() calls fn(arg, tid, nrun) on nrun threads (the caller is
 * tid 0) and returns when all have finished. */
typedef struct cpu_pool cpu_pool;
typedef void (*cpu_task_fn)(void *arg, unsigned tid, unsigned nrun);
deftsim_status cpu_pool_new(unsigned nthreads, cpu_pool **out);
void cpu_pool_free(cpu_pool *p);
void cpu_pool_run(cpu_pool *p, unsigned nrun, cpu_task_fn fn, void *arg);

/* The backend's per-context state. */
typedef struct {
    cpu_pool *pool;
    const cpu_isa *generic, *avx2, *avx512;
    unsigned nthreads;
    /* Per-thread result slots (nthreads entries each), so that operations never allocate. */
    size_t *slot_a, *slot_b, *slot_c;
    float *slot_f;
} cpu_state;

static inline cpu_state *cpu_st(const deftsim_kctx *ctx) { return (cpu_state *)ctx->state; }

/* ---- State and helpers (cpu_state.c) ------------------------------------------------------ */

/* The table's init and fini: the state above for ctx->threads threads (0: one per online
 * processor). */
deftsim_status cpu_init(deftsim_kctx *ctx);
void cpu_fini(deftsim_kctx *ctx);

/* The instruction set an operation runs with under ctx's flags; records it. */
const cpu_isa *cpu_isa_for(deftsim_kctx *ctx);
const cpu_isa *cpu_isa_peek(const deftsim_kctx *ctx);

/* Threads worth using on `work` elements: 1 below a size where waking threads costs more than
 * it saves. */
unsigned cpu_threads_for(const deftsim_kctx *ctx, size_t work);

/* Splits [0, n) into nrun near-equal parts aligned to `align` elements; part t is
 * [*lo, *hi). */
void cpu_split(size_t n, unsigned nrun, unsigned t, size_t align, size_t *lo, size_t *hi);

/* ---- Selection (cpu_select.c) ----------------------------------------------------------- */

/* The r-th largest (1-based, 1 <= r <= m) of a[0..m); a is reordered. hist: CPU_HIST. */
uint32_t cpu_kth_largest_u32(const cpu_isa *isa, uint32_t *a, size_t m, size_t r, uint32_t *hist);

/* A rank T <= the r-th largest (1-based, 1 <= r <= m) of a[0..m) (values below 2^31) with
 * T > that rank - res: bisection of [min, max] by vectorized counts, stopped once the bracket
 * is narrower than res. a is not changed. */
uint32_t cpu_kth_lower_bound(const cpu_isa *isa, const uint32_t *a, size_t m, size_t r,
                             uint32_t res);

/* rank[i] = the rank of x[idx[i] - base] for i < c; returns how many are NaN and the
 * smallest and largest rank (cpu_rank_candidates() for indices from gather_idx). */
size_t cpu_rank_at(const float *x, uint32_t base, const uint32_t *idx, size_t c, uint32_t *rank,
                   uint32_t *lo, uint32_t *hi);

/* Turns candidate keys (|x| bits, NaN keys allowed) into ranks in place; returns how many
 * are NaN and the smallest and largest rank. */
size_t cpu_rank_candidates(uint32_t *key, size_t c, uint32_t *lo, uint32_t *hi);

/* Exact top-k among c candidates given as (index, rank) in ascending index order, ranks in
 * [lo, hi]: writes the k winners' indices to out[0..k) (never beyond), equal ranks resolved
 * by lower index. idx and rank are reordered. hist: CPU_HIST.
 * Requires k <= c. Returns the k-th largest rank, or a lower bound of it within the last
 * bucket examined (a hint for later thresholds, not a result). */
uint32_t cpu_select_ranked(const cpu_isa *isa, uint32_t *idx, uint32_t *rank, size_t c, size_t k,
                           uint32_t lo, uint32_t hi, uint32_t *out, uint32_t *hist);

/* Exact top-k among many candidates above a threshold: (idx, key) in index order where every
 * number's key is >= kmin (NaN keys may be present); khint, a guess of the largest key,
 * sets the histogram's range. One histogram pass over the keys, one split pass (vectorized),
 * then cpu_select_ranked() on the boundary bucket. Returns 0 and writes out[0..k), or 1 when
 * fewer than k candidates are numbers (out untouched). *nan receives the NaN count either
 * way. Keys are reordered. */
int cpu_select_above(const cpu_isa *isa, uint32_t *idx, uint32_t *key, size_t c, size_t k,
                     uint32_t kmin, uint32_t khint, uint32_t *out, uint32_t *hist,
                     size_t *nan, uint32_t *kth);

/* cpu_rank_candidates() then cpu_select_ranked(); returns the NaN count, and the k-th rank
 * hint in *kth (may be NULL). */
size_t cpu_select_candidates(const cpu_isa *isa, uint32_t *idx, uint32_t *key, size_t c,
                             size_t k, uint32_t *out, uint32_t *hist, uint32_t *kth);

/* ---- Scratch carving -------------------------------------------------------------------- */

typedef struct {
    unsigned char *p;
    size_t left;
} cpu_arena;

static inline size_t cpu_round64(size_t b) { return (b + 63) & ~(size_t)63; }

static inline void cpu_arena_init(cpu_arena *a, void *scratch, size_t bytes)
{
    uintptr_t u = (uintptr_t)scratch;
    size_t pad = (size_t)((64 - (u & 63)) & 63);
    a->p = (unsigned char *)scratch + (pad <= bytes ? pad : 0);
    a->left = pad <= bytes ? bytes - pad : 0;
}

/* Returns 64-byte aligned memory carved from the arena (NULL for 0 bytes or when exhausted;
 * the size queries make exhaustion impossible). */
static inline void *cpu_arena_take(cpu_arena *a, size_t bytes)
{
    size_t b = cpu_round64(bytes);
    if (bytes == 0 || b > a->left) return NULL;
    void *r = a->p;
    a->p += b;
    a->left -= b;
    return r;
}

/* ---- Operations, by file ---------------------------------------------------------------- */

/* cpu_ops.c, cpu_topk.c: every operation of kernels_ops.h, as cpu_<op>; the table is
 * cpu_backend.c's. */
DEFTSIM_KOPS_DECLARE(cpu_)

#endif
