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
    DEFTSIM_KOPS_TABLE(kc_)
};

/* Host buffers in and out, the operations above on the device (cuda_stage.cu). */
const deftsim_kbackend deftsim_kbackend_cuda_staged = {
    .name = "cuda-staged",
    .available = kc_available,
    .unavailable = kc_unavailable_reason,
    .init = ks_init,
    .fini = ks_fini,
    .record = ks_record,
    DEFTSIM_KOPS_TABLE(ks_)
};
