/* gpu_util.h - pieces shared by the GPU test and benchmark (no Criterion: a GPU machine has
 * none): seeds and data, guarded device buffers, ResNet-18's DEFT fragments, set comparison. */
#ifndef GPU_UTIL_H
#define GPU_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "deftsim_kcuda.h"
#include "deftsim_rng.h"
#include "deftsim_kernels.h"

/* Exit status for "no GPU here": meson reports the test as skipped. */
#define GPU_SKIP 77

/* ---- Random data (xoshiro256**, seeded by splitmix64) -------------------------------------- */

typedef deftsim_xoshiro256 gu_rng;
void gu_rng_init(gu_rng *r, uint64_t seed);
uint64_t gu_next(gu_rng *r);
double gu_uniform(gu_rng *r);    /* [0, 1) */
double gu_open(gu_rng *r);       /* (0, 1] */
size_t gu_below(gu_rng *r, size_t n);

typedef enum {
    GU_NORMAL,    /* mixed signs, continuous */
    GU_HEAVY,     /* Student t with 2 degrees of freedom */
    GU_TIES,      /* magnitudes from {0, 1, 2, 3}, random signs */
    GU_ALL_EQUAL, /* every element +-1.5 */
    GU_ALL_ZERO,  /* +0 and -0 */
    GU_NONFINITE, /* normal with NaN (both signs) and +-Inf sprinkled */
    GU_ASCENDING, /* |x| increasing with the index */
    GU_MODE_COUNT
} gu_mode;
const char *gu_mode_name(gu_mode m);
void gu_fill(float *x, size_t n, gu_mode mode, uint64_t seed);

/* The benchmark's data, the same bytes as `deftsim bench kernels` for the same seed: normal,
 * or Student t with 2 degrees of freedom (heavy). */
void gu_fill_bench(float *x, size_t n, int heavy, uint64_t seed);

size_t gu_count_nan(const float *x, size_t n);

/* ---- Set comparison ------------------------------------------------------------------------ */

/* 1 if a[0..k) and b[0..k) hold the same set (both get sorted). */
int gu_same_set(uint32_t *a, uint32_t *b, size_t k);

/* ---- Guarded device buffers ----------------------------------------------------------------
 * GU_GUARD bytes of a pattern before and after the usable bytes, garbage inside (so a kernel
 * that relies on zeroed memory fails too). */
#define GU_GUARD 256
typedef struct {
    unsigned char *base;
    void *p;
    size_t bytes;
} gu_dbuf;

/* 0 on success; allocation failures are reported and return -1. */
int gu_dalloc(deftsim_kctx *ctx, deftsim_kcuda_pool *pool, gu_dbuf *b, size_t bytes);
/* 1 if both guard bands are intact. */
int gu_dguard_ok(deftsim_kctx *ctx, const gu_dbuf *b);
void gu_dfree(deftsim_kcuda_pool *pool, gu_dbuf *b);

/* ---- DEFT's fragments of a model ------------------------------------------------------------ */

/* The fragments of `model` for P workers with k_j allocated by DEFT's norm-proportional rule
 * from the norms of x (host data of the model's n elements) for a total of
 * floor(density * n). *segs is malloc'd. */
int gu_deft_segments(const char *model, uint32_t P, double density, const float *x, size_t n,
                     deftsim_kseg **segs, size_t *nseg);

/* The number of elements of a built-in model, or 0. */
size_t gu_model_numel(const char *model);

#endif
