/* deftsim_sparsify.h - the sparsifiers of ../shared/spec/sparsifiers.md behind one interface.
 *
 * One call runs one iteration for all P workers: every worker's selection work runs for real on
 * that worker's accumulator (acc_w = residual_w + g_w) through the kernels of kernels/ and is
 * timed per phase (leader work charged to the leader); the communication it needs comes out
 * as a plain schedule (src/common/deftsim_schedule.h); the aggregated sparse gradient every
 * worker ends with comes out as sorted indices and values; each accumulator is turned into the
 * worker's new residual in place (error feedback).
 *
 * Accumulators reach the sparsifier through a provider so that a bounded-memory engine can
 * regenerate them instead of keeping P copies: get(w) returns worker w's accumulator, which
 * the sparsifier may modify (the residual update) and which stays valid until the next get()
 * call when the provider says `persistent == 0`. */
#ifndef DEFTSIM_SPARSIFY_H
#define DEFTSIM_SPARSIFY_H

#include <stddef.h>
#include <stdint.h>

#include "deftsim_config.h"
#include "deftsim_error.h"
#include "deftsim_kernels.h"
#include "deftsim_model.h"
#include "deftsim_schedule.h"

#define DEFTSIM_MAX_PHASES 12

typedef struct {
    /* Worker w's accumulator for this iteration (n floats). */
    float *(*get)(void *ctx, uint32_t w);
    void *ctx;
    /* 1: every get(w) returns the same memory during the iteration, so updates persist and
     * all P accumulators are valid at once. 0: at most one at a time is valid. */
    int persistent;
} deftsim_acc_provider;

typedef struct {
    deftsim_method method;
    double density;             /* k = max(1, floor(density * n)) */
    uint32_t P;
    const deftsim_model *model;
    uint32_t index_bytes;       /* wire width of an index: 4 or 8 */
    uint32_t value_bytes;       /* wire width of a value: 4 or 2 */
    deftsim_wire wire;          /* spec, or the references' own formats */
    deftsim_cltk_charge cltk_charge;
    double cltk_beta;
    uint64_t seed;              /* DGC's random sampling offsets */
    deftsim_kctx *kctx;         /* the kernel backend and its threads */
} deftsim_sparsifier_params;

/* What one iteration produced. Arrays are owned by the sparsifier and valid until its next
 * step. */
typedef struct {
    uint32_t P;
    uint64_t k;                  /* the target k */
    /* Per worker and phase: measured seconds (phase names in phase_name[]). */
    size_t nphases;
    const char *phase_name[DEFTSIM_MAX_PHASES];
    double *phase_seconds;       /* P * nphases, worker-major */
    double *cost;                /* P: selection cost model (DEFT's size*log2 k; others n*log2 k) */
    uint64_t *local_count;       /* P: elements each worker selected */
    uint64_t *bytes_sent;        /* P: under the reference collectives (ring, binomial) */
    uint64_t *bytes_recv;        /* P */
    uint64_t kj_total;           /* DEFT: the actual sum of k_j (can drift from k) */
    /* The aggregate every worker applies: values = sum / P at sorted indices. */
    uint64_t nnz;                /* |U| */
    const deftsim_kidx *agg_index;
    const float *agg_value;
    double lost_mass;            /* gTop-k: sum of |value| dropped at intermediate merges */
    deftsim_schedule schedule;
} deftsim_step_result;

typedef struct deftsim_sparsifier deftsim_sparsifier;

deftsim_status deftsim_sparsifier_new(const deftsim_sparsifier_params *p, deftsim_sparsifier **out);
void deftsim_sparsifier_free(deftsim_sparsifier *s);

/* Runs iteration t. */
deftsim_status deftsim_sparsifier_step(deftsim_sparsifier *s, uint64_t t,
                                       const deftsim_acc_provider *acc, deftsim_step_result **res);

/* Worker w's selected indices of the last step (sorted ascending), for --dump and tests. */
deftsim_status deftsim_sparsifier_selection(const deftsim_sparsifier *s, uint32_t w,
                                            const deftsim_kidx **idx, uint64_t *count);

/* Bytes a sparsifier holds for P workers (scratch, plans), excluding accumulators. */
uint64_t deftsim_sparsifier_memory(const deftsim_sparsifier_params *p);

#endif
