/* cuda_backend.h - the CUDA backend's operations, as the table in cuda_table.c sees them
 * (C linkage; defined in the .cu files). Internal to kernels/. */
#ifndef DEFTSIM_CUDA_BACKEND_H
#define DEFTSIM_CUDA_BACKEND_H

#include "deftsim_kernels.h"
#include "kernels_ops.h"

#ifdef __cplusplus
extern "C" {
#endif

int kc_available(void);
const char *kc_unavailable_reason(void);
deftsim_status kc_init(deftsim_kctx *ctx);
void kc_fini(deftsim_kctx *ctx);
void kc_record(deftsim_kctx *ctx);

/* Every operation of kernels_ops.h, as kc_<op> (device buffers). */
DEFTSIM_KOPS_DECLARE(kc_)

/* Bytes kc_scatter_add draws from the attached pool for m entries into [0, n) (cuda_ops.cu). */
deftsim_status kc_scatter_add_work(size_t n, size_t m, size_t *bytes);

/* The "cuda-staged" backend (cuda_stage.cu): host buffers, staged through a device pool. */
deftsim_status ks_init(deftsim_kctx *ctx);
void ks_fini(deftsim_kctx *ctx);
void ks_record(deftsim_kctx *ctx);
/* Every operation of kernels_ops.h, as ks_<op>. */
DEFTSIM_KOPS_DECLARE(ks_)

#ifdef __cplusplus
}
#endif

#endif
