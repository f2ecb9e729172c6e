/* kernels_backend.h - what a backend provides (internal to kernels/).
 *
 * A backend is one `static const deftsim_kbackend` table in its own folder (kernels/cpu/,
 * kernels/cuda/). kernels.c validates every argument before calling into the table, so a
 * backend may assume: pointers non-NULL where data is expected, sizes within
 * DEFTSIM_KIDX_MAX_N, k <= n, fragments inside x, scratch at least as large as its own query
 * reported. A NULL entry means "unsupported". Adding an operation touches: the enum in
 * deftsim_kernels.h, one entry here, the front in kernels.c, each backend, and the tests. */
#ifndef DEFTSIM_KERNELS_BACKEND_H
#define DEFTSIM_KERNELS_BACKEND_H

#include "deftsim_kernels.h"

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

    deftsim_status (*absmax)(deftsim_kctx *ctx, const float *x, size_t n, float *out);

    deftsim_status (*topk_scratch)(const deftsim_kctx *ctx, size_t n, size_t k, size_t *bytes);
    deftsim_status (*topk)(deftsim_kctx *ctx, const float *x, size_t n, size_t k,
                           deftsim_kidx *idx_out, void *scratch, size_t scratch_bytes);

    deftsim_status (*segtopk_scratch)(const deftsim_kctx *ctx, const deftsim_kseg *segs,
                                      size_t nseg, size_t *bytes);
    deftsim_status (*segtopk)(deftsim_kctx *ctx, const float *x, size_t n,
                              const deftsim_kseg *segs, size_t nseg, deftsim_kidx *idx_out,
                              void *scratch, size_t scratch_bytes);

    deftsim_status (*seg_norms_scratch)(const deftsim_kctx *ctx, const deftsim_kseg *segs,
                                        size_t nseg, size_t *bytes);
    deftsim_status (*seg_norms)(deftsim_kctx *ctx, const float *x, size_t n,
                                const deftsim_kseg *segs, size_t nseg, double *norms_out,
                                void *scratch, size_t scratch_bytes);

    deftsim_status (*accumulate_scratch)(const deftsim_kctx *ctx, const deftsim_kseg *segs,
                                         size_t nseg, size_t *bytes);
    deftsim_status (*accumulate)(deftsim_kctx *ctx, float *acc, const float *g, size_t n,
                                 int mode, const deftsim_kseg *segs, size_t nseg,
                                 double *sumsq_out, void *scratch, size_t scratch_bytes);

    deftsim_status (*filter_ge)(deftsim_kctx *ctx, const float *x, size_t n, float t,
                                deftsim_kidx *idx_out, size_t cap, size_t *count);
    deftsim_status (*count_ge)(deftsim_kctx *ctx, const float *x, size_t n, float t,
                               size_t *count);

    deftsim_status (*sample_strided)(deftsim_kctx *ctx, const float *x, size_t n, size_t start,
                                     size_t stride, size_t count, float *out_abs);
    deftsim_status (*sample_random)(deftsim_kctx *ctx, const float *x, size_t n, size_t count,
                                    uint64_t seed, float *out_abs);

    deftsim_status (*gather)(deftsim_kctx *ctx, const float *x, size_t n,
                             const deftsim_kidx *idx, size_t m, float *vals_out);
    deftsim_status (*zero_at)(deftsim_kctx *ctx, float *x, size_t n, const deftsim_kidx *idx,
                              size_t m);
    deftsim_status (*scatter_add)(deftsim_kctx *ctx, float *dst, size_t n,
                                  const deftsim_kidx *idx, const float *vals, size_t m);

    deftsim_status (*union_scratch)(const deftsim_kctx *ctx, size_t n, size_t *bytes);
    deftsim_status (*union_)(deftsim_kctx *ctx, size_t n, const deftsim_kidx *const *lists,
                             const size_t *lens, size_t nlists, deftsim_kidx *out, size_t cap,
                             size_t *count, void *scratch, size_t scratch_bytes);

    deftsim_status (*merge_topk_scratch)(const deftsim_kctx *ctx, size_t na, size_t nb,
                                         size_t *bytes);
    deftsim_status (*merge_topk)(deftsim_kctx *ctx, const deftsim_kidx *ia, const float *va,
                                 size_t na, const deftsim_kidx *ib, const float *vb, size_t nb,
                                 size_t k, deftsim_kidx *out_idx, float *out_val, size_t *out_n,
                                 void *scratch, size_t scratch_bytes);
};

/* The backends compiled in. */
extern const deftsim_kbackend deftsim_kbackend_cpu;
#ifdef DEFTSIM_HAVE_CUDA
extern const deftsim_kbackend deftsim_kbackend_cuda;
extern const deftsim_kbackend deftsim_kbackend_cuda_staged;
#endif

#endif
