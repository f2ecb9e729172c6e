/* deftsim_kernels.h - the data-parallel operations the sparsifiers need, behind one API.
 *
 * A context (deftsim_kctx) names a backend ("cpu" now; "cuda" plugs into the same table later)
 * and a thread count. Every operation takes the context first; callers never see which
 * backend runs it. Unsupported operations return DEFTSIM_E_UNSUPPORTED (ask with
 * deftsim_k_supports() first).
 *
 * Contracts shared by every operation:
 *
 * - Kernels never allocate. An operation that needs working memory has a *_scratch() query
 *   that reports the bytes to pass in; any alignment is accepted. The query depends on the
 *   context (its thread count and flags), so query with the context you will run on.
 * - Indices are deftsim_kidx (uint32_t): inputs have at most DEFTSIM_KIDX_MAX_N elements.
 *   Half the memory traffic of 64-bit indices, and the largest model table (about 140 M
 *   elements) fits with room to spare.
 * - Output index order is unspecified unless an operation says otherwise. Compare results as
 *   sets.
 * - Magnitude ranking (top-k, thresholds, merges): |x| orders values, -0 == +0, +-Inf ranks
 *   above every finite value. NaN ranks below every number, zero included: it is selected
 *   only when k exceeds the number of non-NaN elements, and it never passes a threshold.
 *   Equal magnitudes at a boundary are resolved by index: the lower index wins. So every
 *   top-k result is one exact, deterministic set.
 * - Arithmetic (norms, scatter-add, merge sums) follows IEEE: NaN and Inf propagate.
 * - Every operation counts the NaNs among the float values it inspects and reports the count
 *   in the context's record (deftsim_kctx_last()).
 * - Buffers live in memory the backend addresses: host memory for "cpu"; device memory for
 *   "cuda", whose convention (which arguments are device pointers, which stay on the host, a
 *   device memory pool, copies) is in kernels/cuda/deftsim_kcuda.h.
 * - Operations on one context must not run concurrently; use one context per caller thread.
 */
#ifndef DEFTSIM_KERNELS_H
#define DEFTSIM_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "deftsim_error.h"

typedef uint32_t deftsim_kidx;
#define DEFTSIM_KIDX_MAX_N ((size_t)UINT32_MAX)

typedef struct deftsim_kctx deftsim_kctx;

/* One fragment of a segmented operation: elements [offset, offset + len) of x, of which the
 * top k are wanted (k is ignored by the norm operation). */
typedef struct {
    size_t offset;
    size_t len;
    size_t k;
} deftsim_kseg;

/* The operations, for deftsim_k_supports() and the record of what ran. */
typedef enum {
    DEFTSIM_KOP_ABSMAX = 0,
    DEFTSIM_KOP_TOPK,
    DEFTSIM_KOP_SEGTOPK,
    DEFTSIM_KOP_SEG_NORMS,
    DEFTSIM_KOP_FILTER_GE,
    DEFTSIM_KOP_COUNT_GE,
    DEFTSIM_KOP_SAMPLE_STRIDED,
    DEFTSIM_KOP_SAMPLE_RANDOM,
    DEFTSIM_KOP_GATHER,
    DEFTSIM_KOP_ZERO_AT,
    DEFTSIM_KOP_SCATTER_ADD,
    DEFTSIM_KOP_UNION,
    DEFTSIM_KOP_MERGE_TOPK,
    DEFTSIM_KOP_ACCUMULATE,
    DEFTSIM_KOP_COUNT
} deftsim_kop;

/* Stable name of an operation ("topk", "segtopk", ...). */
const char *deftsim_kop_name(deftsim_kop op);

/* Context flags. The defaults choose the fastest path; the others exist so that tests and
 * benchmarks can force and check every path. */
enum {
    /* Top-k: skip the sampled threshold and run the radix-select fallback directly. */
    DEFTSIM_KFLAG_FORCE_FALLBACK = 1u << 0,
    /* Top-k: use the sampled-threshold path even for inputs small enough for the in-cache
     * path. */
    DEFTSIM_KFLAG_FORCE_SAMPLING = 1u << 1,
    /* CPU: use the portable C loops even where a vector instruction set is available. */
    DEFTSIM_KFLAG_GENERIC = 1u << 2,
    /* CPU: use the AVX2 loops even where AVX-512 is available (GENERIC wins over this). */
    DEFTSIM_KFLAG_NO_AVX512 = 1u << 3,
};

/* What the last operation on a context ran with: kept with a timing so that it says which
 * threads and paths produced it. */
typedef struct {
    deftsim_kop op;
    const char *backend;    /* "cpu" */
    const char *isa;        /* CPU: "avx512", "avx2" or "generic" */
    unsigned threads;       /* threads the operation actually used (1 for small inputs) */
    size_t fallbacks;       /* top-k: inputs or fragments where the sampled threshold missed
                               (or FORCE_FALLBACK) and the radix select ran */
    size_t candidates;      /* top-k: elements gathered above the threshold, summed */
    size_t nan_count;       /* NaNs among the values the operation inspected */
} deftsim_kstats;

/* ---- Backends and contexts ------------------------------------------------------------ */

size_t deftsim_kernels_backend_count(void);
const char *deftsim_kernels_backend_name(size_t i);
/* Backends: "cpu"; with CUDA built in, "cuda" (device pointers, deftsim_kcuda.h) and
 * "cuda-staged" (the same operations on the device, for callers that hold host buffers).
 * 1 if the backend is compiled in and usable on this machine (for "cuda": a device exists). */
int deftsim_kernels_backend_available(const char *name);
/* NULL if the backend is available; otherwise why not, in words ("no backend 'cuda' in this
 * build (have: cpu)", "no CUDA device found", the CUDA runtime's message). The string is
 * static or thread-local: copy it before the next call. */
const char *deftsim_kernels_backend_unavailable(const char *name);

/* Creates a context on backend `name`. threads: 1 is the single-thread mode; 0 means every
 * online CPU; at most 256. The backend starts its worker threads here, once, so operations
 * never create threads. */
deftsim_status deftsim_kctx_new(deftsim_kctx **out, const char *name, unsigned threads);
void deftsim_kctx_free(deftsim_kctx *ctx);

const char *deftsim_kctx_backend(const deftsim_kctx *ctx);
unsigned deftsim_kctx_threads(const deftsim_kctx *ctx);
void deftsim_kctx_set_flags(deftsim_kctx *ctx, unsigned flags);
unsigned deftsim_kctx_flags(const deftsim_kctx *ctx);

/* The record of the last operation run on ctx (zeroed before each operation). */
void deftsim_kctx_last(const deftsim_kctx *ctx, deftsim_kstats *out);

/* 1 if ctx's backend implements op. */
int deftsim_k_supports(const deftsim_kctx *ctx, deftsim_kop op);

/* What a context spent moving data, summed over its operations since it was created. Only the
 * "cuda-staged" backend moves anything (it takes host buffers, copies the arrays of every call
 * to the device and the results back, and runs the operation there; deftsim_kcuda.h); every
 * other backend reports zeros. Times come from CUDA events on the context's stream. */
typedef struct {
    uint64_t calls;              /* operations run */
    uint64_t bytes_to_device;    /* copied host -> device */
    uint64_t bytes_from_device;  /* copied device -> host */
    double copy_seconds;         /* device time of those copies */
    double device_seconds;       /* device time of the operations proper */
    /* Host wall time of the calls less device_seconds: the copies, queueing and waiting. A
     * caller that times a region with a wall clock and subtracts the growth of this figure
     * over the region gets its host work plus the device time of its operations. */
    double untimed_seconds;
} deftsim_kxfer;

void deftsim_kctx_transfers(const deftsim_kctx *ctx, deftsim_kxfer *out);
/* deftsim_kxfer.untimed_seconds alone (0 for every backend but "cuda-staged"). */
double deftsim_kctx_untimed_seconds(const deftsim_kctx *ctx);

/* ---- Operations ----------------------------------------------------------------------- */

/* Largest magnitude of x[0..n) (0 when n == 0 or every element is NaN; NaN skipped). One
 * streaming read: the benchmark's memory floor. */
deftsim_status deftsim_k_absmax(deftsim_kctx *ctx, const float *x, size_t n, float *out);

/* Exact top-k by magnitude: writes exactly k distinct indices to idx_out[0..k), the k
 * elements that rank highest under the ranking rules above. k <= n. */
deftsim_status deftsim_k_topk_scratch(const deftsim_kctx *ctx, size_t n, size_t k,
                                      size_t *bytes);
deftsim_status deftsim_k_topk(deftsim_kctx *ctx, const float *x, size_t n, size_t k,
                              deftsim_kidx *idx_out, void *scratch, size_t scratch_bytes);

/* Segmented top-k: for every fragment j, the top segs[j].k elements of
 * x[offset, offset + len), as absolute indices into x. Fragment j's indices occupy
 * idx_out[K_j .. K_j + k_j) with K_j = k_0 + ... + k_{j-1}, so the output holds sum(k_j)
 * entries in fragment order (order within a fragment unspecified). Fragments may come in any
 * order and may overlap; each needs k_j <= len_j and must lie within x[0..n). */
deftsim_status deftsim_k_segtopk_scratch(const deftsim_kctx *ctx, const deftsim_kseg *segs,
                                         size_t nseg, size_t *bytes);
deftsim_status deftsim_k_segtopk(deftsim_kctx *ctx, const float *x, size_t n,
                                 const deftsim_kseg *segs, size_t nseg, deftsim_kidx *idx_out,
                                 void *scratch, size_t scratch_bytes);

/* L2 norm of every fragment in one call, accumulated in double: norms_out[j] =
 * sqrt(sum of x[i]^2 over fragment j). The summation order is fixed (blocks of 4096
 * elements, eight lanes each), so results are bit-identical for every thread count and
 * instruction set. NaN or Inf propagate. */
deftsim_status deftsim_k_seg_norms_scratch(const deftsim_kctx *ctx, const deftsim_kseg *segs,
                                           size_t nseg, size_t *bytes);
deftsim_status deftsim_k_seg_norms(deftsim_kctx *ctx, const float *x, size_t n,
                                   const deftsim_kseg *segs, size_t nseg, double *norms_out,
                                   void *scratch, size_t scratch_bytes);

/* The accumulate pass, fused with the fragment norms: acc[i] = acc[i] + g[i]
 * (DEFTSIM_KACC_ADD) or acc[i] = g[i] (DEFTSIM_KACC_COPY, bit for bit: a fresh accumulator)
 * for every i < n, and sumsq_out[j] = the sum of squares of the new acc over fragment j, in
 * seg_norms' order (blocks of 4096 from the fragment's start, 32 lanes, blocks added in order
 * from 0.0), so sqrt(sumsq_out[j]) is bit-identical to deftsim_k_seg_norms on the result, for
 * every thread count and instruction set. One read of acc and g and one write of acc: the
 * norm pass costs no second read. Fragments (k ignored) must be in ascending order and
 * disjoint; elements outside every fragment are accumulated too. nseg may be 0 (a plain
 * accumulate). NaNs are counted in fragments whose sum is NaN, as seg_norms counts them. */
enum { DEFTSIM_KACC_ADD = 0, DEFTSIM_KACC_COPY = 1 };
/* The block of the norms' summation order: a caller that cuts a fragment into pieces of this
 * many elements from its start, calls accumulate on each piece as one fragment (its sum is
 * then exactly that block's) and adds the pieces' sums in order from 0.0 gets seg_norms' bits. */
#define DEFTSIM_K_NORM_BLOCK 4096u
deftsim_status deftsim_k_accumulate_scratch(const deftsim_kctx *ctx, const deftsim_kseg *segs,
                                            size_t nseg, size_t *bytes);
deftsim_status deftsim_k_accumulate(deftsim_kctx *ctx, float *acc, const float *g, size_t n,
                                    int mode, const deftsim_kseg *segs, size_t nseg,
                                    double *sumsq_out, void *scratch, size_t scratch_bytes);

/* Threshold filter: *count receives the number of i with |x[i]| >= t (NaN never matches;
 * t <= 0 matches every non-NaN element; t must not be NaN). min(*count, cap) of those indices
 * are written to idx_out; when *count > cap, which ones is unspecified. */
deftsim_status deftsim_k_filter_ge(deftsim_kctx *ctx, const float *x, size_t n, float t,
                                   deftsim_kidx *idx_out, size_t cap, size_t *count);
/* Count-only variant. */
deftsim_status deftsim_k_count_ge(deftsim_kctx *ctx, const float *x, size_t n, float t,
                                  size_t *count);

/* Strided sampling: out_abs[i] = |x[start + i * stride]| for i < count; every position must
 * lie within x[0..n) and stride >= 1. */
deftsim_status deftsim_k_sample_strided(deftsim_kctx *ctx, const float *x, size_t n,
                                        size_t start, size_t stride, size_t count,
                                        float *out_abs);
/* Random sampling with replacement: out_abs[i] = |x[j_i]|, j_i uniform on [0, n), a pure
 * function of (seed, i): the same seed gives the same samples on every backend and thread
 * count. n >= 1 unless count == 0. */
deftsim_status deftsim_k_sample_random(deftsim_kctx *ctx, const float *x, size_t n,
                                       size_t count, uint64_t seed, float *out_abs);

/* vals_out[i] = x[idx[i]] for i < m; every index must be < n. */
deftsim_status deftsim_k_gather(deftsim_kctx *ctx, const float *x, size_t n,
                                const deftsim_kidx *idx, size_t m, float *vals_out);
/* x[idx[i]] = 0 for i < m (the residual update); duplicates allowed. */
deftsim_status deftsim_k_zero_at(deftsim_kctx *ctx, float *x, size_t n, const deftsim_kidx *idx,
                                 size_t m);
/* dst[idx[i]] += vals[i] for i < m; duplicate indices accumulate in list order, so the
 * result is the same for every thread count. */
deftsim_status deftsim_k_scatter_add(deftsim_kctx *ctx, float *dst, size_t n,
                                     const deftsim_kidx *idx, const float *vals, size_t m);

/* Sorted union of index lists over the universe [0, n) (Top-k's build-up): the distinct
 * indices of lists[0..nlists) (each sorted or not, duplicates allowed) in ascending order.
 * *count receives the size of the union; the min(*count, cap) smallest are written. */
deftsim_status deftsim_k_union_scratch(const deftsim_kctx *ctx, size_t n, size_t *bytes);
deftsim_status deftsim_k_union(deftsim_kctx *ctx, size_t n, const deftsim_kidx *const *lists,
                               const size_t *lens, size_t nlists, deftsim_kidx *out, size_t cap,
                               size_t *count, void *scratch, size_t scratch_bytes);

/* gTop-k's merge: the (index, value) sets a and b are combined, values at equal indices
 * summed (a's entries first, then b's, in list order), and the min(k, distinct indices)
 * entries of largest |sum| are written to out_idx/out_val (*out_n receives how many), under
 * the ranking rules above. */
deftsim_status deftsim_k_merge_topk_scratch(const deftsim_kctx *ctx, size_t na, size_t nb,
                                            size_t *bytes);
deftsim_status deftsim_k_merge_topk(deftsim_kctx *ctx, const deftsim_kidx *ia, const float *va,
                                    size_t na, const deftsim_kidx *ib, const float *vb,
                                    size_t nb, size_t k, deftsim_kidx *out_idx, float *out_val,
                                    size_t *out_n, void *scratch, size_t scratch_bytes);

/* ---- Cost accounting (device profiles) --------------------------------------------------
 * Every successful operation can be reported to a cost function and appended to a log, with
 * the sizes that drive its cost. A device profile (src/engine/deftsim_profile.h) uses this to give
 * each call a modelled duration; the sum over a context's calls is a clock that timed regions
 * can read instead of the wall clock (deftsim_kctx_cost_seconds). */

/* One call and its sizes. n: elements the call streams over (top-k, filters, absmax: its n;
 * segmented operations: the sum of the fragments' lengths; union: the universe; merge: na +
 * nb). k: entries it selects, writes or touches by index (top-k: k; segmented top-k: the sum
 * of k_j; filter: the indices written; samples: the count; gather, zero_at, scatter_add: m;
 * union: the total length of the lists). segs: fragments (segmented operations) or lists
 * (union); 0 otherwise. */
typedef struct {
    deftsim_kop op;
    size_t n, k, segs;
} deftsim_kcall;

/* Returns the modelled seconds of one call. */
typedef double (*deftsim_kcost_fn)(void *user, const deftsim_kcall *call);

/* Installs (fn != NULL) or removes a cost function; resets the modelled clock to 0. */
void deftsim_kctx_set_cost(deftsim_kctx *ctx, deftsim_kcost_fn fn, void *user);
/* 1 if a cost function is installed. */
int deftsim_kctx_has_cost(const deftsim_kctx *ctx);
/* The modelled clock: the sum of the cost function over every successful call since it was
 * installed (0 without one). */
double deftsim_kctx_cost_seconds(const deftsim_kctx *ctx);
/* Logs every successful call into buf[0..cap) from now on (buf NULL: stop logging). Calls
 * beyond cap are counted but not stored. */
void deftsim_kctx_set_log(deftsim_kctx *ctx, deftsim_kcall *buf, size_t cap);
/* Calls logged since deftsim_kctx_set_log (may exceed its cap). */
size_t deftsim_kctx_log_count(const deftsim_kctx *ctx);

/* ---- Bytes touched ----------------------------------------------------------------------
 * The least bytes a context's operations had to touch, summed since the context was created:
 * each successful operation's inputs read once and its outputs written once, by its sizes
 * (top-k of n: 4 n read and 4 k written; segmented operations: their fragments' elements;
 * gather of m: the m indices read, the m values read by index and written; zero_at: the
 * indices read and the values written by index; scatter_add: indices and values read, the
 * destination read and written by index; union: the lists read and the union written;
 * merge_topk: both sets read, the result written; accumulate: acc and g read and acc written,
 * or g read and acc written). An element reached by index counts the cache line (64 bytes) it
 * lies in: m indices spread evenly over n elements touch L (1 - (1 - 1/L)^m) of the array's L
 * lines. Not counted: what an implementation moves beyond that (extra passes), plus what
 * callers added with deftsim_kctx_touch for their own loops beside the operations. The engine
 * turns it into the sparsify stage's floor (docs/TIMING.md). */
uint64_t deftsim_kctx_bytes(const deftsim_kctx *ctx);
/* Adds the bytes a caller's own loop touched (read and written, each once) to the count. */
void deftsim_kctx_touch(deftsim_kctx *ctx, uint64_t bytes);

#endif
