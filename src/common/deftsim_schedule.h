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
 * Compute phases: seconds[r] = measured duration on rank r (0 where r does nothing). */
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
    DEFTSIM_STEP_SENDRECV
} deftsim_step_kind;

typedef struct {
    deftsim_step_kind kind;
    char name[DEFTSIM_STEP_NAME_MAX]; /* phase ("select", "norms") or payload ("indices") */
    uint32_t root;                    /* BCAST only */
    double *seconds;                  /* COMPUTE: P entries */
    uint64_t *bytes;                  /* collectives: P entries */
    uint32_t *peer;                   /* SENDRECV: P entries */
} deftsim_step;

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

const char *deftsim_step_kind_name(deftsim_step_kind k);

/* Bytes each rank sends and receives for a step under the reference algorithms of the
 * traffic formulas (docs/SPARSIFIERS.md, "Traffic of a schedule step"): ring allgather(v),
 * ring allreduce (reduce-scatter + allgather, the vector cut into P near-equal chunks at
 * element granularity elem_bytes), binomial-tree broadcast, and the step's own point-to-point
 * messages. Adds into sent[] and recv[] (P entries each). */
void deftsim_step_traffic(const deftsim_step *st, uint32_t P, uint32_t elem_bytes,
                          uint64_t *sent, uint64_t *recv);

#endif
