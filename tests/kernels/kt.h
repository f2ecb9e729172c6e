/* kt.h - shared pieces of the kernel tests: data generators, sort-based references, guarded
 * buffers and the loop over backends and modes (after ggml's test-backend-ops: every backend
 * against simple references, results compared as sets, an unsupported case reported and
 * skipped rather than failed). */
#ifndef KT_H
#define KT_H

#include <stddef.h>
#include <stdint.h>

#include "deftsim_kernels.h"
#include "deftsim_rng.h"

/* ---- Seeds -------------------------------------------------------------------------------- */

/* The suite's base seed: DEFTSIM_TEST_SEED if set, else a fixed value. Printed on first use so
 * that any failure can be replayed. */
uint64_t kt_seed(void);

typedef deftsim_xoshiro256 kt_rng; /* deftsim_rng.h */
void kt_rng_init(kt_rng *r, uint64_t seed);
uint64_t kt_next(kt_rng *r);
double kt_uniform(kt_rng *r); /* [0, 1) */
double kt_normal(kt_rng *r);
size_t kt_below(kt_rng *r, size_t n);

/* ---- Data --------------------------------------------------------------------------------- */

typedef enum {
    KT_NORMAL,     /* mixed signs, continuous */
    KT_HEAVY,      /* Student t with 2 degrees of freedom */
    KT_TIES,       /* magnitudes from {0, 1, 2, 3}, random signs: many equal magnitudes */
    KT_ALL_EQUAL,  /* every element +-1.5 */
    KT_ALL_ZERO,   /* +0 and -0 */
    KT_NONFINITE,  /* normal with NaN (both signs) and +-Inf sprinkled */
    KT_ASCENDING,  /* |x| increasing with the index: worst order for running thresholds */
    KT_MODE_COUNT
} kt_mode;
const char *kt_mode_name(kt_mode m);
void kt_fill(float *x, size_t n, kt_mode mode, uint64_t seed);

/* Rank of a value under the documented policy: NaN 0, else |x| bits + 1. */
uint32_t kt_rank(float v);

/* Reference top-k order: all indices sorted by (rank descending, index ascending). The top-k
 * set for any k is the first k entries. Returns a malloc'd array of n. */
uint32_t *kt_ref_order(const float *x, size_t n);

/* 1 if a[0..k) (any order) equals b[0..k) as sets (b is left unchanged). On mismatch prints
 * what differs with the label. */
int kt_same_set(const uint32_t *a, const uint32_t *b, size_t k, const char *label);

/* ---- Guarded buffers ----------------------------------------------------------------------
 * Every output the kernels write sits between two guard bands of KT_GUARD bytes filled with a
 * pattern; kt_guard_ok() checks both after the call. Inside bytes are filled with garbage, so
 * a kernel that relies on zeroed memory fails too. */
#define KT_GUARD 256
typedef struct {
    unsigned char *base;
    void *p; /* the usable bytes */
    size_t bytes;
} kt_buf;
void kt_buf_alloc(kt_buf *b, size_t bytes);
int kt_guard_ok(const kt_buf *b, const char *label);
void kt_buf_free(kt_buf *b);

/* ---- Contexts ------------------------------------------------------------------------------ */

/* The configurations every op is run under: each available backend, 1 and 2 threads, and for
 * the CPU each instruction set: its best (AVX-512 where the CPU has it), AVX2
 * (DEFTSIM_KFLAG_NO_AVX512) and the generic loops (DEFTSIM_KFLAG_GENERIC). */
typedef struct {
    const char *backend;
    unsigned threads;
    unsigned flags;
    char label[64];
} kt_config;
size_t kt_configs(kt_config *out, size_t max);

/* The instruction set the CPU backend must report for ctx's flags on this machine (the best
 * the CPU has, unless a flag caps it); NULL for other backends. */
const char *kt_expected_isa(const deftsim_kctx *ctx);

/* Creates the context of a configuration (fails the test on error). */
deftsim_kctx *kt_ctx(const kt_config *c);

/* 1 if the op is supported; otherwise prints "unsupported" for the label and returns 0. */
int kt_supported(deftsim_kctx *ctx, deftsim_kop op, const char *label);

#endif
