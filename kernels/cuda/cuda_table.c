/* cuda_table.c - the CUDA backend's table (C, for designated initializers; the operations are
 * in the .cu files of this folder). */
#include "cuda_backend.h"
#include "kernels_backend.h"

const deftsim_kbackend deftsim_kbackend_cuda = {
    .name = "cuda",
    .available = kc_available,
    .unavailable = kc_unavailable_reason,
    .init = kc_init,
    .fini = kc_fini,
    .record = kc_record,
    .absmax = kc_absmax,
    .topk_scratch = kc_topk_scratch,
    .topk = kc_topk,
    .segtopk_scratch = kc_segtopk_scratch,
    .segtopk = kc_segtopk,
    .seg_norms_scratch = kc_seg_norms_scratch,
    .seg_norms = kc_seg_norms,
    .filter_ge = kc_filter_ge,
    .count_ge = kc_count_ge,
    .sample_strided = kc_sample_strided,
    .sample_random = kc_sample_random,
    .gather = kc_gather,
    .zero_at = kc_zero_at,
    .scatter_add = kc_scatter_add,
    .union_scratch = kc_union_scratch,
    .union_ = kc_union,
    .merge_topk_scratch = kc_merge_topk_scratch,
    .merge_topk = kc_merge_topk,
};

/* Host buffers in and out, the operations above on the device (cuda_stage.cu). */
const deftsim_kbackend deftsim_kbackend_cuda_staged = {
    .name = "cuda-staged",
    .available = kc_available,
    .unavailable = kc_unavailable_reason,
    .init = ks_init,
    .fini = ks_fini,
    .record = ks_record,
    .absmax = ks_absmax,
    .topk_scratch = ks_topk_scratch,
    .topk = ks_topk,
    .segtopk_scratch = ks_segtopk_scratch,
    .segtopk = ks_segtopk,
    .seg_norms_scratch = ks_seg_norms_scratch,
    .seg_norms = ks_seg_norms,
    .filter_ge = ks_filter_ge,
    .count_ge = ks_count_ge,
    .sample_strided = ks_sample_strided,
    .sample_random = ks_sample_random,
    .gather = ks_gather,
    .zero_at = ks_zero_at,
    .scatter_add = ks_scatter_add,
    .union_scratch = ks_union_scratch,
    .union_ = ks_union,
    .merge_topk_scratch = ks_merge_topk_scratch,
    .merge_topk = ks_merge_topk,
};
