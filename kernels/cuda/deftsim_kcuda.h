/* deftsim_kcuda.h - what the "cuda" kernel backend adds to deftsim_kernels.h: its pointer
 * convention, a caller-owned device memory pool and copies on the context's stream. (The
 * synthetic gradient generator on the device sits with the host one: traces/cuda.)
 *
 * Built only when meson finds nvcc (DEFTSIM_HAVE_CUDA); the "cuda" backend is usable when the
 * CUDA runtime finds a device (deftsim_kernels_backend_available("cuda")).
 *
 * Pointer convention of a "cuda" context. Every array an operation reads or writes lives in
 * device memory: x, dst, idx, vals, idx_out, out_abs, vals_out, norms_out, out_idx, out_val,
 * the lists of deftsim_k_union (each list pointer is a device pointer) and every scratch
 * buffer. What describes the call stays on the host: the fragment table `segs`, the arrays
 * `lists` and `lens` themselves (host arrays holding device pointers and lengths), and the
 * scalar results (*out of absmax, *count, *out_n), which the operation writes to host memory.
 * A host pointer where device memory is expected is refused (DEFTSIM_E_USAGE) before
 * anything runs. Managed memory is accepted but never allocated by deftsim.
 *
 * Ordering. A context owns one CUDA stream; operations run on it in call order. Operations
 * whose results are all in device memory (topk, segtopk, seg_norms, the samples) return once
 * their kernels are queued; the others (absmax, filter_ge, count_ge, gather, zero_at,
 * scatter_add, union, merge_topk) wait for the stream, because they return a scalar or must
 * report an index out of range before returning. deftsim_kctx_last() waits for the stream too
 * (the record's counts are read back from the device). Read device results with
 * deftsim_kcuda_download(), which runs on the same stream, or call deftsim_kcuda_sync() first.
 *
 * Errors. Every CUDA call is checked; a failure becomes DEFTSIM_E_RUNTIME with the call, the
 * source line and the runtime's message. A kernel that faults is reported by the next call
 * that waits for the stream; the CUDA context is unusable afterwards (a CUDA property).
 *
 * Working memory. Operations allocate nothing: scratch comes from the caller (query its size
 * with the *_scratch() functions, allocate it from a pool below or any device allocation).
 * A context allocates once, at creation: its stream, a small control block on the device and
 * a pinned staging ring that carries fragment tables to the device without stalling the
 * stream. */
#ifndef DEFTSIM_KCUDA_H
#define DEFTSIM_KCUDA_H

#include <stddef.h>
#include <stdint.h>

#include "deftsim_error.h"
#include "deftsim_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Device and contexts --------------------------------------------------------------- */

/* NULL when a CUDA device is usable; otherwise why not, e.g. "no CUDA device found" or the
 * runtime's error ("CUDA driver version is insufficient for CUDA runtime version"). The
 * answer is computed once per process. */
const char *deftsim_kcuda_unavailable(void);

/* The device a context runs on, as "NVIDIA H200 (sm_90, 132 SMs)". */
const char *deftsim_kcuda_device_name(const deftsim_kctx *ctx);

/* The context's cudaStream_t (as void *, so that C callers need no CUDA header), for callers
 * that time operations with CUDA events or queue their own work behind them. */
void *deftsim_kcuda_stream(deftsim_kctx *ctx);

/* Waits until every operation queued on ctx has finished; reports a kernel fault. */
deftsim_status deftsim_kcuda_sync(deftsim_kctx *ctx);

/* Copies on ctx's stream, after the operations queued before them. upload and download wait
 * for the copy; memset does not. */
deftsim_status deftsim_kcuda_upload(deftsim_kctx *ctx, void *dst_dev, const void *src_host,
                                    size_t bytes);
deftsim_status deftsim_kcuda_download(deftsim_kctx *ctx, void *dst_host, const void *src_dev,
                                      size_t bytes);
deftsim_status deftsim_kcuda_memset(deftsim_kctx *ctx, void *dst_dev, int byte, size_t bytes);

/* Holds ctx's stream busy for about `seconds` (a kernel that watches the GPU clock). A
 * benchmark queues it first so that the operations queued behind it run back to back, timed
 * by the device alone, whatever the host costs of queueing them. */
deftsim_status deftsim_kcuda_spin(deftsim_kctx *ctx, double seconds);

/* ---- Timing with CUDA events -------------------------------------------------------------
 * A set of `marks` CUDA events. mark() records event i on the stream of ctx (a "cuda" or a
 * "cuda-staged" context); seconds() waits for event j and returns the device time from mark i
 * to mark j. */
typedef struct deftsim_kcuda_timer deftsim_kcuda_timer;

deftsim_status deftsim_kcuda_timer_new(size_t marks, deftsim_kcuda_timer **out);
void deftsim_kcuda_timer_free(deftsim_kcuda_timer *t);
deftsim_status deftsim_kcuda_timer_mark(deftsim_kcuda_timer *t, size_t i, deftsim_kctx *ctx);
deftsim_status deftsim_kcuda_timer_seconds(deftsim_kcuda_timer *t, size_t i, size_t j,
                                           double *seconds);

/* ---- The "cuda-staged" backend ------------------------------------------------------------
 * deftsim_kctx_new(&ctx, "cuda-staged", 1) gives a context that takes host buffers everywhere,
 * as the cpu backend does, and runs every operation on the device: each call copies its input
 * arrays into a device pool the context owns (grown as calls need, never shrunk), runs the
 * operation on an inner "cuda" context, and copies its outputs back (arrays written in place,
 * such as zero_at's x and scatter_add's dst, go both ways). Scratch queries answer 0: the
 * device scratch comes from the pool, and scratch passed in is ignored. Results equal the
 * "cuda" backend's. Each call waits for its copies back, so the context is synchronous.
 *
 * Every call is timed with CUDA events: the copies in and out and the operation itself.
 * deftsim_kctx_transfers() returns the sums; deftsim_kctx_untimed_seconds() the host wall
 * time of the calls less the operations' device time, so that a wall-clock region minus its
 * growth counts the device time of the operations, not the copies (the engine's selection
 * phases do this; docs/KERNELS_CUDA.md). This is what lets the sparsifiers, written against
 * host memory, run their selection on a GPU unchanged. */

/* The inner "cuda" context of a "cuda-staged" one (its stream, its device); NULL for any
 * other context. */
deftsim_kctx *deftsim_kcuda_staged_device(deftsim_kctx *ctx);

/* ---- Device memory pool -----------------------------------------------------------------
 * One cudaMalloc of `bytes` at creation, handed out in 256-byte aligned blocks (first fit,
 * freed blocks merge with their neighbours). Bookkeeping is on the host, so alloc and free
 * never touch the device. A pool belongs to the device current at creation. Not
 * thread-safe. */
typedef struct deftsim_kcuda_pool deftsim_kcuda_pool;

deftsim_status deftsim_kcuda_pool_new(size_t bytes, deftsim_kcuda_pool **out);
void deftsim_kcuda_pool_free(deftsim_kcuda_pool *p);
/* DEFTSIM_E_NOMEM naming the request and the largest free block when nothing fits. bytes == 0
 * gives a 256-byte block. */
deftsim_status deftsim_kcuda_alloc(deftsim_kcuda_pool *p, size_t bytes, void **dev);
/* dev must come from deftsim_kcuda_alloc on p (NULL is ignored). */
void deftsim_kcuda_release(deftsim_kcuda_pool *p, void *dev);
size_t deftsim_kcuda_pool_capacity(const deftsim_kcuda_pool *p);
size_t deftsim_kcuda_pool_in_use(const deftsim_kcuda_pool *p);

/* Working memory for operations whose API has no scratch argument: deftsim_k_scatter_add
 * sums duplicate indices in list order, which on the device takes a stable sort and about
 * 12 bytes per entry. Such an operation takes the memory from the pool attached to its
 * context for the length of the call (it waits for the device before giving it back) and
 * fails with DEFTSIM_E_USAGE when none is attached. NULL detaches. The pool must outlive the
 * attachment. */
deftsim_status deftsim_kcuda_attach_pool(deftsim_kctx *ctx, deftsim_kcuda_pool *pool);

#ifdef __cplusplus
}
#endif

#endif
