/* sim_internal.h - what the files of sim/ share: the point-to-point layer the collective
 * algorithms are written against (sim_child.c implements it with SimGrid mailboxes), the
 * algorithms (sim_coll.c) and the child's entry point. Internal to sim/. */
#ifndef DEFTSIM_SIM_INTERNAL_H
#define DEFTSIM_SIM_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "deftsim_sim.h"

/* One worker's side of the simulation (an actor). */
typedef struct sim_worker sim_worker;

uint32_t sim_rank(const sim_worker *w);
uint32_t sim_size(const sim_worker *w);

/* MPI-like blocking calls with SMPI's semantics (deftsim_sim.h): a message carries its payload
 * size, which the receiver gets back, as MPI_Get_count does. send() below the eager threshold
 * returns at once. sendrecv() posts the send, then the receive, and waits for both (a send to
 * and receive from oneself is a local copy and takes no time). */
void sim_send(sim_worker *w, uint32_t dst, uint64_t bytes);
uint64_t sim_recv(sim_worker *w, uint32_t src);
uint64_t sim_sendrecv(sim_worker *w, uint32_t dst, uint64_t sbytes, uint32_t src);

/* The simulated clock, and a pause on it (approximate mode's stand-in for skipped steps). */
double sim_now(void);
void sim_sleep(double seconds);

/* Approximate mode: every rank reports when its sampled ring steps ended and how long its last
 * one took, and learns the latest end and the longest step over all ranks. A synchronisation
 * of the actors, not a message: it takes no simulated time. Every rank of the collective must
 * call it. */
void sim_approx_agree(sim_worker *w, double end, double step, double *max_end, double *max_step);

/* Per ALLGATHER step, computed once for all workers: the sum and smallest of the
 * contributions and their prefix sums (prefix[i] = sum of b[0 .. i-1], P + 1 entries). */
typedef struct {
    uint64_t total, min;
    uint64_t *prefix;
    int equal;             /* every rank contributes the same */
} sim_ag_info;

/* The collectives of a schedule step, as rank sim_rank(w) of sim_size(w) runs them. */
void sim_allgather(sim_worker *w, const deftsim_sim_params *p, const uint64_t *bytes,
                   const sim_ag_info *info);
void sim_allreduce(sim_worker *w, const deftsim_sim_params *p, uint64_t bytes);
void sim_bcast(sim_worker *w, const deftsim_sim_params *p, uint32_t root, uint64_t bytes);
/* Pairwise alltoall: rank r sends `bytes` to every other rank (MPI_Alltoall's equal blocks). */
void sim_alltoall(sim_worker *w, const deftsim_sim_params *p, uint64_t bytes);

/* Approximate mode: ring steps simulated before the rest is scaled from the last of them. */
#define SIM_APPROX_RING_STEPS 6u

/* Results the child fills: layout as deftsim_sim_result (start, end, sent, recv per step and
 * worker) plus the message count. */
typedef struct {
    double *start, *end;
    uint64_t *sent, *recv;
    uint64_t messages;
} sim_child_out;

/* Runs the simulation in the current (forked) process: platform_path is the XML to load.
 * Returns 0 on success; otherwise fills msg. Never returns to the caller's logic on a SimGrid
 * failure: SimGrid aborts the process, which the parent reports. */
int sim_child_run(const deftsim_sim_params *p, const char *platform_path,
                  const deftsim_schedule *const *scheds, size_t nsched, const size_t *step_offset,
                  sim_child_out *out, char *msg, size_t msgcap);

/* Loads the user's platform file in the current (forked) process and checks that it can
 * carry P workers: at least P hosts, and a route from the first worker's host to every other
 * worker's host and back (hosts in worker order, as sim_child_run takes them). Returns 0, or
 * -1 with msg filled ("PATH has 1 host, fewer than the 2 workers"). A file SimGrid cannot
 * parse aborts the process, and SimGrid 3.32 crashes looking up a route that does not exist:
 * prog (memory shared with the parent) says how far the check went. */
typedef struct {
    int32_t stage;           /* 0 loading the file, 1 looking up the route below, 2 done */
    uint32_t from, to;       /* workers */
    char from_name[128], to_name[128];
} sim_check_progress;
int sim_child_check_platform(const char *platform_path, uint32_t P, sim_check_progress *prog,
                             char *msg, size_t msgcap);

/* Host names of a user platform in worker order: names compared with digit runs as numbers
 * ("node-2" before "node-10"). */
int sim_natural_cmp(const char *a, const char *b);

#endif
