/* kernels_backend.h - what a backend provides (internal to kernels/).
 *
 * A backend is one `static const deftsim_kbackend` table in its own folder (kernels/cpu/,
 * kernels/cuda/). kernels.c validates every argument before calling into the table, so a
 * backend may assume: pointers non-NULL where data is expected, sizes within
 * DEFTSIM_KIDX_MAX_N, k <= n, fragments inside x, scratch at least as large as its own query
 * reported. A NULL entry means "unsupported". The operations' fields come from the one list
 * in kernels_ops.h (which says what adding an operation touches). */
#ifndef DEFTSIM_KERNELS_BACKEND_H
#define DEFTSIM_KERNELS_BACKEND_H

#include "deftsim_kernels.h"
#include "kernels_ops.h"

typedef struct deftsim_kbackend deftsim_kbackend;

struct deftsim_kctx {
    const deftsim_kbackend *be;
    unsigned threads;
    unsigned flags;
    deftsim_kstats last;
    deftsim_kxfer xfer; /* zero unless the backend moves data (cuda-staged) */
    void *state; /* the backend's own (thread pool, streams) */
    /* Cost accounting (deftsim_kctx_set_cost, deftsim_kctx_set_log); filled by kernels.c. */
    deftsim_kcost_fn cost_fn;
    void *cost_user;
    double cost_seconds;
    deftsim_kcall *log;
    size_t log_cap, log_n;
    uint64_t bytes; /* deftsim_kctx_bytes */
};

struct deftsim_kbackend {
    const char *name;
    int (*available)(void);
    /* Optional: why available() says no, for messages ("no CUDA device found"). */
    const char *(*unavailable)(void);
    deftsim_status (*init)(deftsim_kctx *ctx);
    void (*fini)(deftsim_kctx *ctx);
    /* Optional: completes ctx->last before deftsim_kctx_last() returns it, for a backend
     * whose operations return before their counts are known (CUDA reads them back from the
     * device). */
    void (*record)(deftsim_kctx *ctx);

    /* The operations, one field each (kernels_ops.h). */
    DEFTSIM_KERNEL_OPS(DEFTSIM_KOP_FIELD, _)
};

/* The backends compiled in. */
extern const deftsim_kbackend deftsim_kbackend_cpu;
#ifdef DEFTSIM_HAVE_CUDA
extern const deftsim_kbackend deftsim_kbackend_cuda;
extern const deftsim_kbackend deftsim_kbackend_cuda_staged;
#endif

#endif
