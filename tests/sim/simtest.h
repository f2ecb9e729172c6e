/* simtest.h - helpers the tests of sim/ share: one-step schedules, running them, the closed-form
 * alpha-beta times of the algorithms on the flat cluster. */
#ifndef DEFTSIM_SIMTEST_H
#define DEFTSIM_SIMTEST_H

#include <stdint.h>

#include "deftsim_schedule.h"
#include "deftsim_sim.h"

/* The flat cluster under CM02 (no correction factors), no crosstraffic: the model of the
 * closed forms below. */
void simtest_params(deftsim_sim_params *p, uint32_t P);

/* A schedule of one collective step of kind k: every rank's bytes (ALLGATHER: contributions
 * from vbytes(size, r) when uneven, else size; ALLREDUCE, BCAST: size) and root. */
void simtest_one_step(deftsim_schedule *s, uint32_t P, deftsim_step_kind k, uint64_t size,
                      int uneven, uint32_t root);

/* gTop-k's tree as sp_gtopk.c schedules it (fold of the extra ranks, pairwise rounds toward
 * rank 0, then a broadcast from 0), every message `size` bytes. */
void simtest_gtopk(deftsim_schedule *s, uint32_t P, uint64_t size);

/* Ok-Topk's split-and-reduce as sp_oktopk.c schedules it: rounds of up to 4 peers, in round
 * rho rank r sends to (r + i) mod P for i = 4 rho .. 4 rho + 3 (i = 0 a local copy, no
 * message), two messages per peer (indices, values) of deftsim_test_pair_size(size, r, dst,
 * uneven) bytes each; one P2P step per round. */
void simtest_oktopk_rounds(deftsim_schedule *s, uint32_t P, uint64_t size, int uneven);

/* Runs the schedules; fails the test on error. Returns the iteration times (malloc'd). */
double *simtest_run(const deftsim_sim_params *p, deftsim_schedule *s, size_t n,
                    deftsim_sim_result *keep);

/* Alpha-beta time of one message of b payload bytes on the flat cluster: two links of latency
 * L, the envelope at bandwidth B. */
double simtest_msg(const deftsim_sim_params *p, uint64_t b);

/* Closed forms on the flat cluster (CM02, no crosstraffic) for equal contributions; NaN where
 * the algorithm has none (uneven sizes, a P or size it does not cover). */
double simtest_formula(const deftsim_sim_params *p, deftsim_step_kind k, uint64_t size);
double simtest_formula_gtopk(const deftsim_sim_params *p, uint64_t size);
/* Pairwise alltoall of size-byte blocks: (P - 1) messages one after another. */
double simtest_formula_alltoall(const deftsim_sim_params *p, uint64_t size);
/* Ok-Topk's rounds with equal messages: in a round where every rank sends and receives m
 * messages at once, they share its links: 2 L + m (size + 16) / B. */
double simtest_formula_oktopk(const deftsim_sim_params *p, uint64_t size);

#endif
