/* deftsim_schedule.h - what one iteration of a sparsifier asks of the cluster: an ordered list
 * of steps, each a compute phase (measured seconds per worker) or a collective (participants
 * and bytes per participant). Sparsifiers build schedules; sim/ turns them into simulated time.
 * Plain data: no kernels, no network.
 *
 * Collective byte conventions (bytes[] has one entry per rank 0..P-1):
 *   ALLGATHER  bytes[r] = rank r's contribution (allgatherv when they differ)
 *   ALLREDUCE  bytes[r] = the vector every rank reduces (equal for all ranks)
 *   BCAST      bytes[root] = the payload; root names the sender
 *   SENDRECV   one round of point-to-point messages: rank r sends bytes[r] to peer[r]
 *              (peer[r] == DEFTSIM_NO_PEER: r sends nothing); receivers are implied
 *   ALLTOALL   bytes[r] = the block rank r sends to every other rank (equal blocks: MPI_Alltoall)
 *   P2P        one round of point-to-point messages with per-pair byte counts: rank r sends
 *              bytes[r * fan + j] to peer[r * fan + j] for j < fan (DEFTSIM_NO_PEER or r
 *              itself: no message; 0 bytes is a message of its envelope alone); every rank
 *              posts its receives (senders ascending, then j), then its sends, and waits
 *              for all of them; receivers are implied
 * Compute phases: seconds[r] = measured duration on rank r (0 where r does nothing), or a
 * given one (DEFTSIM_STEP_GIVEN: the training step's forward and backward pass, [compute],
 * docs/COMPUTE.md).
 *
 * Asynchronous collectives (flags & DEFTSIM_STEP_ASYNC, collectives only): the worker starts
 * the collective and goes on with its next step at once, as a DDP bucket's allreduce runs
 * while the backward pass goes on. A worker's collectives still run one at a time in schedule
 * order (one communication stream): an asynchronous one starts when the worker posted it and
 * its previous collective ended; a synchronous collective starts after every outstanding one
 * ended; the schedule ends when they all have. */
#ifndef DEFTSIM_SCHEDULE_H
#define DEFTSIM_SCHEDULE_H

#include <stddef.h>
#include <stdint.h>

#include "deftsim_error.h"

#define DEFTSIM_NO_PEER UINT32_MAX
#define DEFTSIM_STEP_NAME_MAX 32

typedef enum {
    DEFTSIM_STEP_COMPUTE = 0,
    DEFTSIM_STEP_ALLGATHER,
    DEFTSIM_STEP_ALLREDUCE,
    DEFTSIM_STEP_BCAST,
    DEFTSIM_STEP_SENDRECV,
    DEFTSIM_STEP_ALLTOALL,
    DEFTSIM_STEP_P2P
} deftsim_step_kind;

#define DEFTSIM_STEP_KIND_LAST DEFTSIM_STEP_P2P

typedef struct {
    deftsim_step_kind kind;
    char name[DEFTSIM_STEP_NAME_MAX]; /* phase ("select", "norms") or payload ("indices") */
    uint32_t root;                    /* BCAST only */
    double *seconds;                  /* COMPUTE: P entries */
    uint64_t *bytes;                  /* collectives: P entries */
    uint32_t *peer;                   /* SENDRECV: P entries; P2P: P * fan */
    uint32_t fan;                     /* P2P: message slots per rank (bytes and peer hold
                                         P * fan entries); 1 for the other kinds */
    uint32_t flags;                   /* DEFTSIM_STEP_ASYNC, DEFTSIM_STEP_GIVEN; 0 for a plain step */
    uint32_t layer;                   /* 1 + the model layer whose gradient the step needs first
                                         (a layer-wise method: LAGS); 0: the whole gradient.
                                         [compute] runs the backward pass down to that layer
                                         before the step (src/engine/compute.c) */
} deftsim_step;

#define DEFTSIM_STEP_ASYNC 1u /* a collective the worker starts and does not wait for */
#define DEFTSIM_STEP_GIVEN 2u /* a compute step of given (not measured) seconds: the training
                                 step's forward and backward pass; [network] compute = none
                                 leaves it its duration */

typedef struct {
    uint32_t P;
    size_t nsteps, cap;
    deftsim_step *steps;
} deftsim_schedule;

void deftsim_schedule_init(deftsim_schedule *s, uint32_t P);
/* Drops every step, keeping the allocations for reuse. */
void deftsim_schedule_reset(deftsim_schedule *s, uint32_t P);
void deftsim_schedule_free(deftsim_schedule *s);

/* Appends a step with zeroed per-rank arrays and returns it (NULL on allocation failure,
 * with the error recorded). */
deftsim_step *deftsim_schedule_add(deftsim_schedule *s, deftsim_step_kind kind, const char *name);

/* Appends a P2P step with fan message slots per rank, every peer DEFTSIM_NO_PEER and every
 * byte count 0 (NULL on allocation failure, with the error recorded). */
deftsim_step *deftsim_schedule_add_p2p(deftsim_schedule *s, const char *name, uint32_t fan);

/* Appends a copy of src (its kind, name, root, fan and every per-rank array) to a schedule
 * of the same P (NULL on allocation failure, with the error recorded). */
deftsim_step *deftsim_schedule_add_copy(deftsim_schedule *s, const deftsim_step *src);

const char *deftsim_step_kind_name(deftsim_step_kind k);

/* Bytes each rank sends and receives for a step under the reference algorithms of the
 * traffic formulas (docs/SPARSIFIERS.md, "Traffic of a schedule step"): ring allgather(v),
 * ring allreduce (reduce-scatter + allgather, the vector cut into P near-equal chunks at
 * element granularity elem_bytes), binomial-tree broadcast, pairwise alltoall (every rank
 * sends its block to and receives one from each other rank), and the step's own
 * point-to-point messages (SENDRECV, P2P). Adds into sent[] and recv[] (P entries each). */
void deftsim_step_traffic(const deftsim_step *st, uint32_t P, uint32_t elem_bytes,
                          uint64_t *sent, uint64_t *recv);

#endif
