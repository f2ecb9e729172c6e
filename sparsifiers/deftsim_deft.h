/* deftsim_deft.h - DEFT's planning steps (Yoon & Oh, ICPP 2023), exactly as
 * docs/SPARSIFIERS.md ("deft") defines them: fragments, norm-proportional k per fragment, and
 * the leader's greedy bin packing. Pure functions of their inputs: no kernels, no timing. */
#ifndef DEFTSIM_DEFT_H
#define DEFTSIM_DEFT_H

#include <stddef.h>
#include <stdint.h>

#include "deftsim_error.h"
#include "deftsim_model.h"

typedef struct {
    uint64_t offset;  /* first element in the flattened gradient */
    uint64_t size;    /* elements */
    uint32_t tensor;  /* index of the parameter tensor it comes from */
} deftsim_fragment;

/* Step 1 (built once per P): every tensor is one fragment, except a tensor with more than n/P
 * elements (numel * P > n), which is cut into exactly P contiguous near-equal pieces, the first
 * numel % P pieces one element longer. *out is malloc'd; free() it. */
deftsim_status deftsim_deft_fragments(const deftsim_model *m, uint32_t P, deftsim_fragment **out,
                                      size_t *nfrag);

/* Step 2: k_j per fragment from the fragments' L2 norms. Fragments are visited in descending
 * norm order (ties: lower fragment index first) keeping remain_k (starts at k) and
 * remain_norm (starts at the sum of norms); tau = floor(remain_k * norm_j / remain_norm)
 * (0 when remain_norm <= 0); k_j = size_j if size_j < tau else max(1, tau). order is scratch
 * of nfrag entries (receives the visiting order). Returns the actual total sum of k_j, which
 * can drift from k. */
uint64_t deftsim_deft_allocate_k(const deftsim_fragment *frags, size_t nfrag, const double *norms,
                                 uint64_t k, uint64_t *kj, size_t *order);

/* Step 2 as the authors' code computes tau: trunc(remain_k * (norm_j / remain_norm)), the
 * quotient first ([sparsify] deft_norm_precision = float32). Where remain_k * norm_j /
 * remain_norm is an integer the two orders can land on either side of it. */
uint64_t deftsim_deft_allocate_k_authors(const deftsim_fragment *frags, size_t nfrag,
                                         const double *norms, uint64_t k, uint64_t *kj,
                                         size_t *order);

/* The L2 norm of x[0 .. m) as PyTorch 1.5's float32 CUDA reduction computes it (the authors'
 * float(torch.norm(fragment))), emulated on the host in its order of operations (deft_plan.c
 * spells it out). 0 for m = 0. */
float deftsim_deft_norm_float32(const float *x, uint64_t m);
/* Its sum of squares, before the square root (sqrtf of it is the norm). */
float deftsim_deft_sumsq_float32(const float *x, uint64_t m);

/* Step 3 cost of selecting k_j in a fragment: size_j * log2(k_j) if k_j > 1 else size_j. */
double deftsim_deft_cost(uint64_t size, uint64_t kj);

/* A packing: bin b holds frag_ids[bin_start[b] .. bin_start[b+1]); common fragments
 * (k_j == size_j: nobody selects, all of it is sent) are listed separately. */
typedef struct {
    uint32_t nbins;
    size_t nfrag;
    uint32_t *bin_start;   /* nbins + 1 */
    uint32_t *frag_ids;    /* non-common fragments, grouped by bin, in packing order */
    double *bin_cost;      /* nbins: summed cost */
    uint64_t *bin_k;       /* nbins: summed k_j */
    uint32_t *common_ids;  /* common fragments, ascending */
    size_t ncommon;
} deftsim_deft_packing;

/* Greedy longest-processing-time packing into P bins: repeatedly take the remaining
 * non-common fragment of largest cost (ties: lower fragment index first) and put it into the
 * currently least-loaded bin (ties: lower bin index first). */
deftsim_status deftsim_deft_pack(const deftsim_fragment *frags, size_t nfrag, const uint64_t *kj,
                                 uint32_t P, deftsim_deft_packing *out);
void deftsim_deft_packing_free(deftsim_deft_packing *p);

/* The bin worker r takes at iteration t: (t + r) mod P. The leader is worker t mod P. */
static inline uint32_t deftsim_deft_bin_of(uint64_t t, uint32_t r, uint32_t P)
{
    return (uint32_t)((t + r) % P);
}
static inline uint32_t deftsim_deft_leader(uint64_t t, uint32_t P) { return (uint32_t)(t % P); }

#endif
