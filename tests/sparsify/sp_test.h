/* sp_test.h - helpers shared by the sparsifier tests: models built in code, integer-valued
 * accumulators (so that float sums are exact), providers, brute-force references. */
#ifndef SP_TEST_H
#define SP_TEST_H

#include <stddef.h>
#include <stdint.h>

#include "deftsim_sparsify.h"

/* The kernel context every test runs on (two threads, so the threaded paths run too). */
extern deftsim_kctx *sp_kc;
void sp_suite_init(void);
void sp_suite_fini(void);

/* The run's seed: DEFTSIM_TEST_SEED or a fixed default; printed once. */
uint64_t sp_seed(void);
uint64_t sp_rand(uint64_t *state);

/* A model from shapes such as "64x3x3x3" (tensors named t0, t1, ...). */
deftsim_model *sp_model(const char *const *shapes, size_t nshapes);
/* A small mixed model: conv-like 4-D tensors, 1-D biases, a matrix (n = 24954). */
deftsim_model *sp_model_mix(void);

/* n integers in [-range, range] as floats, a pure function of (seed, stream). */
void sp_fill_int(float *x, size_t n, int range, uint64_t seed, uint64_t stream);

/* P accumulators with a persistent provider. */
typedef struct {
    uint32_t P;
    size_t n;
    float **acc;
    float **grad;   /* the gradients that went into acc (for CLT-k's filter) */
    deftsim_acc_provider prov;
} sp_accs;
sp_accs *sp_accs_new(uint32_t P, size_t n);
void sp_accs_free(sp_accs *a);
/* A copy of every accumulator (for before/after checks). */
float **sp_accs_copy(const sp_accs *a);
void sp_copies_free(float **c, uint32_t P);

/* A strict non-persistent provider: one shared buffer, residuals kept per worker, gradients
 * given per step. It counts protocol violations: a write to an accumulator before its last
 * visit, a get() after release(), releases out of order or repeated, grad() for another worker
 * than the last get(). */
typedef struct {
    uint32_t P;
    size_t n;
    float **res;
    float **grad;
    float *buf, *gbuf;
    int64_t cur;
    unsigned char *released;
    int64_t last_released;
    uint32_t nreleased;
    int violations;
    deftsim_acc_provider prov;
} sp_npv;
sp_npv *sp_npv_new(uint32_t P, size_t n);
void sp_npv_begin(sp_npv *v);  /* before each step */
void sp_npv_free(sp_npv *v);

deftsim_sparsifier_params sp_params(deftsim_method m, double d, uint32_t P,
                                    const deftsim_model *model);
deftsim_sparsifier *sp_new(const deftsim_sparsifier_params *p);
/* Sets option `key` (of p's method; the test fails otherwise) to v: a DOUBLE option's value,
 * an INT's, an ENUM's position in its names. No range check, so that tests can pass values a
 * scenario could not. */
void sp_opt(deftsim_sparsifier_params *p, const char *key, double v);

/* Exact top-k under the kernels' ranking (|x| descending, lower index first), sorted ascending
 * into out. */
void sp_ref_topk(const float *x, size_t n, size_t k, uint32_t *out);
/* Ranks (index, value) pairs like the kernels: |v| descending, lower index first. */
void sp_ref_rank(uint32_t *idx, float *val, size_t m);

/* Checks residuals + P * aggregate = accumulators element by element (tol relative to the
 * magnitudes involved); returns the total discrepancy sum(before - after - P agg) and, in *tol,
 * the sum of the per-element tolerances (what float rounding of P * (sum / P) may add up to). */
double sp_check_conservation(const deftsim_step_result *r, float *const *before,
                             float *const *after, uint32_t P, size_t n, int per_element,
                             double *tol);

/* The aggregate's indices are strictly ascending. */
void sp_check_sorted(const deftsim_step_result *r);

/* Sum over the schedule's COMPUTE steps of phase ph for worker w. */
double sp_schedule_seconds(const deftsim_step_result *r, const char *phase, uint32_t w);
/* The n-th step (0-based) of a kind and name, or NULL. */
const deftsim_step *sp_find_step(const deftsim_step_result *r, deftsim_step_kind kind,
                                 const char *name, size_t nth);
size_t sp_count_collectives(const deftsim_step_result *r);

#endif
