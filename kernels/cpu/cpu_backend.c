/* cpu_backend.c - the CPU backend's table: its state's start and end (cpu_state.c) and every
 * operation of kernels_ops.h (cpu_ops.c, cpu_topk.c). Nothing calls back into this file. */
#include "cpu_internal.h"

const deftsim_kbackend deftsim_kbackend_cpu = {
    .name = "cpu",
    .available = NULL,
    .init = cpu_init,
    .fini = cpu_fini,
    DEFTSIM_KOPS_TABLE(cpu_)
};
