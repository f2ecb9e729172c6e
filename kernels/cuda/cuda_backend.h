/* cuda_backend.h - the CUDA backend's operations, as the table in cuda_table.c sees them
 * (C linkage; defined in the .cu files). Internal to kernels/. */
#ifndef DEFTSIM_CUDA_BACKEND_H
#define DEFTSIM_CUDA_BACKEND_H

#include "deftsim_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

int kc_available(void);
const char *kc_unavailable_reason(void);
deftsim_status kc_init(deftsim_kctx *ctx);
void kc_fini(deftsim_kctx *ctx);
void kc_record(deftsim_kctx *ctx);

deftsim_status kc_absmax(deftsim_kctx *ctx, const float *x, size_t n, float *out);
deftsim_status kc_topk_scratch(const deftsim_kctx *ctx, size_t n, size_t k, size_t *bytes);
deftsim_status kc_topk(deftsim_kctx *ctx, const float *x, size_t n, size_t k, deftsim_kidx *out,
                       void *scratch, size_t scratch_bytes);
deftsim_status kc_segtopk_scratch(const deftsim_kctx *ctx, const deftsim_kseg *segs, size_t nseg,
                                  size_t *bytes);
deftsim_status kc_segtopk(deftsim_kctx *ctx, const float *x, size_t n, const deftsim_kseg *segs,
                          size_t nseg, deftsim_kidx *out, void *scratch, size_t scratch_bytes);
deftsim_status kc_seg_norms_scratch(const deftsim_kctx *ctx, const deftsim_kseg *segs,
                                    size_t nseg, size_t *bytes);
deftsim_status kc_seg_norms(deftsim_kctx *ctx, const float *x, size_t n, const deftsim_kseg *segs,
                            size_t nseg, double *norms, void *scratch, size_t scratch_bytes);
deftsim_status kc_accumulate_scratch(const deftsim_kctx *ctx, const deftsim_kseg *segs,
                                     size_t nseg, size_t *bytes);
deftsim_status kc_accumulate(deftsim_kctx *ctx, float *acc, const float *g, size_t n, int mode,
                             const deftsim_kseg *segs, size_t nseg, double *sumsq, void *scratch,
                             size_t scratch_bytes);
deftsim_status kc_filter_ge(deftsim_kctx *ctx, const float *x, size_t n, float t,
                            deftsim_kidx *out, size_t cap, size_t *count);
deftsim_status kc_count_ge(deftsim_kctx *ctx, const float *x, size_t n, float t, size_t *count);
deftsim_status kc_sample_strided(deftsim_kctx *ctx, const float *x, size_t n, size_t start,
                                 size_t stride, size_t count, float *out);
deftsim_status kc_sample_random(deftsim_kctx *ctx, const float *x, size_t n, size_t count,
                                uint64_t seed, float *out);
deftsim_status kc_gather(deftsim_kctx *ctx, const float *x, size_t n, const deftsim_kidx *idx,
                         size_t m, float *out);
deftsim_status kc_zero_at(deftsim_kctx *ctx, float *x, size_t n, const deftsim_kidx *idx,
                          size_t m);
deftsim_status kc_scatter_add(deftsim_kctx *ctx, float *dst, size_t n, const deftsim_kidx *idx,
                              const float *vals, size_t m);
deftsim_status kc_union_scratch(const deftsim_kctx *ctx, size_t n, size_t *bytes);
deftsim_status kc_union(deftsim_kctx *ctx, size_t n, const deftsim_kidx *const *lists,
                        const size_t *lens, size_t nlists, deftsim_kidx *out, size_t cap,
                        size_t *count, void *scratch, size_t scratch_bytes);
deftsim_status kc_merge_topk_scratch(const deftsim_kctx *ctx, size_t na, size_t nb,
                                     size_t *bytes);
deftsim_status kc_merge_topk(deftsim_kctx *ctx, const deftsim_kidx *ia, const float *va,
                             size_t na, const deftsim_kidx *ib, const float *vb, size_t nb,
                             size_t k, deftsim_kidx *out_idx, float *out_val, size_t *out_n,
                             void *scratch, size_t scratch_bytes);

/* Bytes kc_scatter_add draws from the attached pool for m entries into [0, n) (cuda_ops.cu). */
deftsim_status kc_scatter_add_work(size_t n, size_t m, size_t *bytes);

/* The "cuda-staged" backend (cuda_stage.cu): host buffers, staged through a device pool. */
deftsim_status ks_init(deftsim_kctx *ctx);
void ks_fini(deftsim_kctx *ctx);
void ks_record(deftsim_kctx *ctx);
deftsim_status ks_absmax(deftsim_kctx *ctx, const float *x, size_t n, float *out);
deftsim_status ks_topk_scratch(const deftsim_kctx *ctx, size_t n, size_t k, size_t *bytes);
deftsim_status ks_topk(deftsim_kctx *ctx, const float *x, size_t n, size_t k, deftsim_kidx *out,
                       void *scratch, size_t scratch_bytes);
deftsim_status ks_segtopk_scratch(const deftsim_kctx *ctx, const deftsim_kseg *segs, size_t nseg,
                                  size_t *bytes);
deftsim_status ks_segtopk(deftsim_kctx *ctx, const float *x, size_t n, const deftsim_kseg *segs,
                          size_t nseg, deftsim_kidx *out, void *scratch, size_t scratch_bytes);
deftsim_status ks_seg_norms_scratch(const deftsim_kctx *ctx, const deftsim_kseg *segs,
                                    size_t nseg, size_t *bytes);
deftsim_status ks_seg_norms(deftsim_kctx *ctx, const float *x, size_t n, const deftsim_kseg *segs,
                            size_t nseg, double *norms, void *scratch, size_t scratch_bytes);
deftsim_status ks_accumulate_scratch(const deftsim_kctx *ctx, const deftsim_kseg *segs,
                                     size_t nseg, size_t *bytes);
deftsim_status ks_accumulate(deftsim_kctx *ctx, float *acc, const float *g, size_t n, int mode,
                             const deftsim_kseg *segs, size_t nseg, double *sumsq, void *scratch,
                             size_t scratch_bytes);
deftsim_status ks_filter_ge(deftsim_kctx *ctx, const float *x, size_t n, float t,
                            deftsim_kidx *out, size_t cap, size_t *count);
deftsim_status ks_count_ge(deftsim_kctx *ctx, const float *x, size_t n, float t, size_t *count);
deftsim_status ks_sample_strided(deftsim_kctx *ctx, const float *x, size_t n, size_t start,
                                 size_t stride, size_t count, float *out);
deftsim_status ks_sample_random(deftsim_kctx *ctx, const float *x, size_t n, size_t count,
                                uint64_t seed, float *out);
deftsim_status ks_gather(deftsim_kctx *ctx, const float *x, size_t n, const deftsim_kidx *idx,
                         size_t m, float *out);
deftsim_status ks_zero_at(deftsim_kctx *ctx, float *x, size_t n, const deftsim_kidx *idx,
                          size_t m);
deftsim_status ks_scatter_add(deftsim_kctx *ctx, float *dst, size_t n, const deftsim_kidx *idx,
                              const float *vals, size_t m);
deftsim_status ks_union_scratch(const deftsim_kctx *ctx, size_t n, size_t *bytes);
deftsim_status ks_union(deftsim_kctx *ctx, size_t n, const deftsim_kidx *const *lists,
                        const size_t *lens, size_t nlists, deftsim_kidx *out, size_t cap,
                        size_t *count, void *scratch, size_t scratch_bytes);
deftsim_status ks_merge_topk_scratch(const deftsim_kctx *ctx, size_t na, size_t nb,
                                     size_t *bytes);
deftsim_status ks_merge_topk(deftsim_kctx *ctx, const deftsim_kidx *ia, const float *va,
                             size_t na, const deftsim_kidx *ib, const float *vb, size_t nb,
                             size_t k, deftsim_kidx *out_idx, float *out_val, size_t *out_n,
                             void *scratch, size_t scratch_bytes);

#ifdef __cplusplus
}
#endif

#endif
