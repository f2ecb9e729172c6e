/* kernels_ops.h - every kernel operation a backend provides, listed once (internal to
 * kernels/; C and CUDA C++ alike).
 *
 * DEFTSIM_KERNEL_OPS(X, P) expands X(P, ret, kop, member, fn, params) once per entry:
 *   ret     the return type;
 *   kop     the operation it belongs to (DEFTSIM_KOP_<kop>; a scratch query belongs to its
 *           operation, and the operation is supported when all of its entries are there);
 *   member  the field of deftsim_kbackend (`union_`: `union` is a keyword);
 *   fn      the function's name after the backend's prefix (cpu_, kc_, ks_);
 *   params  the parameter list, in parentheses.
 * P is passed through untouched (a backend's prefix for the declarations and tables below).
 *
 * From this list come the function-pointer fields of deftsim_kbackend (kernels_backend.h),
 * each backend's declarations (DEFTSIM_KOPS_DECLARE(cpu_) in cpu_internal.h, kc_ and ks_ in
 * cuda_backend.h), each backend's table (DEFTSIM_KOPS_TABLE(prefix): a backend that lacks
 * one of the functions does not link) and deftsim_k_supports. Adding an operation: one
 * entry here, its value in deftsim_kop and its name in kernels.c's op_names (both checked
 * against this list at compile time), its front in kernels.c and deftsim_kernels.h, the
 * function in every backend, and the tests (docs/ARCHITECTURE.md, "Add a kernel op"). */
#ifndef DEFTSIM_KERNELS_OPS_H
#define DEFTSIM_KERNELS_OPS_H

#include "deftsim_kernels.h"

#define DEFTSIM_KERNEL_OPS(X, P)                                                                 \
    X(P, deftsim_status, ABSMAX, absmax, absmax,                                                 \
      (deftsim_kctx * ctx, const float *x, size_t n, float *out))                                \
    X(P, deftsim_status, TOPK, topk_scratch, topk_scratch,                                       \
      (const deftsim_kctx *ctx, size_t n, size_t k, size_t *bytes))                              \
    X(P, deftsim_status, TOPK, topk, topk,                                                       \
      (deftsim_kctx * ctx, const float *x, size_t n, size_t k, deftsim_kidx *idx_out,            \
       void *scratch, size_t scratch_bytes))                                                     \
    X(P, deftsim_status, SEGTOPK, segtopk_scratch, segtopk_scratch,                              \
      (const deftsim_kctx *ctx, const deftsim_kseg *segs, size_t nseg, size_t *bytes))           \
    X(P, deftsim_status, SEGTOPK, segtopk, segtopk,                                              \
      (deftsim_kctx * ctx, const float *x, size_t n, const deftsim_kseg *segs, size_t nseg,      \
       deftsim_kidx *idx_out, void *scratch, size_t scratch_bytes))                              \
    X(P, deftsim_status, SEG_NORMS, seg_norms_scratch, seg_norms_scratch,                        \
      (const deftsim_kctx *ctx, const deftsim_kseg *segs, size_t nseg, size_t *bytes))           \
    X(P, deftsim_status, SEG_NORMS, seg_norms, seg_norms,                                        \
      (deftsim_kctx * ctx, const float *x, size_t n, const deftsim_kseg *segs, size_t nseg,      \
       double *norms_out, void *scratch, size_t scratch_bytes))                                  \
    X(P, deftsim_status, ACCUMULATE, accumulate_scratch, accumulate_scratch,                     \
      (const deftsim_kctx *ctx, const deftsim_kseg *segs, size_t nseg, size_t *bytes))           \
    X(P, deftsim_status, ACCUMULATE, accumulate, accumulate,                                     \
      (deftsim_kctx * ctx, float *acc, const float *g, size_t n, int mode,                       \
       const deftsim_kseg *segs, size_t nseg, double *sumsq_out, void *scratch,                  \
       size_t scratch_bytes))                                                                    \
    X(P, deftsim_status, FILTER_GE, filter_ge, filter_ge,                                        \
      (deftsim_kctx * ctx, const float *x, size_t n, float t, deftsim_kidx *idx_out, size_t cap, \
       size_t *count))                                                                           \
    X(P, deftsim_status, COUNT_GE, count_ge, count_ge,                                           \
      (deftsim_kctx * ctx, const float *x, size_t n, float t, size_t *count))                    \
    X(P, deftsim_status, SAMPLE_STRIDED, sample_strided, sample_strided,                         \
      (deftsim_kctx * ctx, const float *x, size_t n, size_t start, size_t stride, size_t count,  \
       float *out_abs))                                                                          \
    X(P, deftsim_status, SAMPLE_RANDOM, sample_random, sample_random,                            \
      (deftsim_kctx * ctx, const float *x, size_t n, size_t count, uint64_t seed,                \
       float *out_abs))                                                                          \
    X(P, deftsim_status, GATHER, gather, gather,                                                 \
      (deftsim_kctx * ctx, const float *x, size_t n, const deftsim_kidx *idx, size_t m,          \
       float *vals_out))                                                                         \
    X(P, deftsim_status, ZERO_AT, zero_at, zero_at,                                              \
      (deftsim_kctx * ctx, float *x, size_t n, const deftsim_kidx *idx, size_t m))               \
    X(P, deftsim_status, SCATTER_ADD, scatter_add, scatter_add,                                  \
      (deftsim_kctx * ctx, float *dst, size_t n, const deftsim_kidx *idx, const float *vals,     \
       size_t m))                                                                                \
    X(P, deftsim_status, UNION, union_scratch, union_scratch,                                    \
      (const deftsim_kctx *ctx, size_t n, size_t *bytes))                                        \
    X(P, deftsim_status, UNION, union_, union,                                                   \
      (deftsim_kctx * ctx, size_t n, const deftsim_kidx *const *lists, const size_t *lens,       \
       size_t nlists, deftsim_kidx *out, size_t cap, size_t *count, void *scratch,               \
       size_t scratch_bytes))                                                                    \
    X(P, deftsim_status, MERGE_TOPK, merge_topk_scratch, merge_topk_scratch,                     \
      (const deftsim_kctx *ctx, size_t na, size_t nb, size_t *bytes))                            \
    X(P, deftsim_status, MERGE_TOPK, merge_topk, merge_topk,                                     \
      (deftsim_kctx * ctx, const deftsim_kidx *ia, const float *va, size_t na,                   \
       const deftsim_kidx *ib, const float *vb, size_t nb, size_t k, deftsim_kidx *out_idx,      \
       float *out_val, size_t *out_n, void *scratch, size_t scratch_bytes))

/* One function-pointer field of deftsim_kbackend. */
#define DEFTSIM_KOP_FIELD(P, ret, kop, member, fn, params) ret(*member) params;
/* One backend function's declaration: prefix + fn. */
#define DEFTSIM_KOP_DECL(P, ret, kop, member, fn, params) ret P##fn params;
/* One designated initializer of a backend's table. */
#define DEFTSIM_KOP_ENTRY(P, ret, kop, member, fn, params) .member = P##fn,

/* Every operation's declaration for the backend whose functions start with `prefix`. */
#define DEFTSIM_KOPS_DECLARE(prefix) DEFTSIM_KERNEL_OPS(DEFTSIM_KOP_DECL, prefix)
/* Every operation's entry of a `deftsim_kbackend` initializer (C only). */
#define DEFTSIM_KOPS_TABLE(prefix) DEFTSIM_KERNEL_OPS(DEFTSIM_KOP_ENTRY, prefix)

#endif
