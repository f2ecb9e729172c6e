/* sim_actors.h - the actors' state, shared by the forked child that creates the actors and
 * runs the schedule steps (sim_child.c) and the point-to-point layer they send with
 * (sim_p2p.c). SimGrid types; internal to sim/.
 *
 * Call order in sim/: docs/ARCHITECTURE.md, the sim/ row of its folder table. */
#ifndef DEFTSIM_SIM_ACTORS_H
#define DEFTSIM_SIM_ACTORS_H

#include <stddef.h>
#include <stdint.h>

#include <simgrid/actor.h>
#include <simgrid/barrier.h>
#include <simgrid/comm.h>
#include <simgrid/mailbox.h>
#include <simgrid/semaphore.h>

#include "sim_internal.h"

typedef struct sim_ctx sim_ctx;
typedef struct sim_nccl_heights sim_nccl_heights; /* sim_nccl_shape.c */

#define MBOX_CACHE 64u /* direct-mapped, by peer rank */

/* Eager sends an actor keeps a handle to (sim_p2p.c, "Eager sends"), and the most handles one
 * of its waits watches at once, those it waits for included. */
#define EAGER_KEEP 32u
#define WAIT_ANY_MAX 64u

typedef struct {
    sg_comm_t comm[EAGER_KEEP];
    uint32_t n;
} sim_eager;

struct sim_worker {
    uint32_t rank, P;
    sim_ctx *ctx;
    uint64_t sent, recv;       /* payload bytes of the current step */
    uint64_t messages;
    sim_rec *rec;              /* analytic mode: the posts and waits are recorded here */
    uint64_t agreements;       /* approximate mode: sim_approx_agree() calls so far */
    sim_approx_seq run;        /* approximate mode: the run of like P2P rounds under way */
    size_t cur_sched, cur_step;  /* where the worker is, for a deadlock report */
    int done;
    uint32_t in_peer[MBOX_CACHE], out_peer[MBOX_CACHE];
    sg_mailbox_t in_mb[MBOX_CACHE], out_mb[MBOX_CACHE];
    sg_comm_t *comms;          /* SENDRECV: room for every incoming message plus one send */
    void **slots;
    /* Asynchronous collectives (DEFTSIM_STEP_ASYNC): the worker's second actor runs them, one
     * at a time in the order posted, while the first goes on. Only one of the two actors
     * communicates at any time (the first drains the queue before a synchronous collective),
     * so they share the mailboxes, counters and buffers above. */
    sg_sem_t async_jobs, async_done; /* jobs posted; jobs finished */
    const deftsim_step **async_step; /* ring of async_cap posted steps and their rows */
    size_t *async_row;
    size_t async_cap, async_head, async_tail, async_outstanding;
    double t0;                 /* the clock when the current schedule started */
    /* The eager sends in flight that each of the worker's two actors posted ([0]: the first,
     * main_actor; [1]: the second); an actor reaps only its own (sim_p2p.c). */
    sg_actor_t main_actor;
    sim_eager eager[2];
};

struct sim_ctx {
    const deftsim_sim_params *p;
    const deftsim_schedule *const *scheds;
    size_t nsched;
    const size_t *step_offset;
    sim_child_out *out;
    sg_bar_t barrier;
    sim_ag_info *ag;           /* per global step row: ALLGATHER steps only */
    uint32_t **in_list;        /* per global step row: SENDRECV senders, grouped by receiver */
    uint32_t **in_off;         /* P + 1 offsets into in_list[row] */
    /* Approximate mode, per global step row of a P2P step: its place in a run of like rounds
     * (sim_child.c, like_rounds) and the run's length; len 0 for any other step. */
    struct { uint32_t pos, len; } *p2p_run;
    uint32_t max_in;
    size_t max_steps;          /* the most steps of any schedule */
    int has_async;             /* some step is DEFTSIM_STEP_ASYNC: every worker has a second actor */
    sim_worker *workers;
    /* Approximate mode's agreements, by the parity of a worker's count of them: a worker can
     * be at most one agreement ahead of the slowest (the barrier holds it), so two slots do. */
    sg_bar_t approx_bar;
    double approx_end[2], approx_step[2];
    uint32_t approx_read[2];
    /* NCCL's trees met so far: every rank's height in each (sim_nccl_tree_heights). */
    sim_nccl_heights *heights;
    size_t nheights;
};

/* Every rank's height in trees 0 .. T - 1 of a shape (T x P, tree by tree; the longest path
 * down to a leaf), computed at the first call for the shape and kept in c (sim_nccl_shape.c). */
const uint32_t *sim_nccl_tree_heights(sim_ctx *c, const sim_nccl_tree_shape *ts, uint32_t T);
/* Frees what sim_nccl_shape.c keeps in c (the trees' heights). */
void sim_nccl_ctx_free(sim_ctx *c);

/* Analytic mode (sim_analytic.c): runs the schedules of c on c->workers with the flow times
 * of fm, each collective step recorded through run_step (the child's step runner) and
 * replayed, filling c->out as the actors would. 0; SIM_RC_NOT_ANALYTIC when two messages
 * would share a link (msg says where); -1 on failure (msg says why). */
typedef void (*sim_step_fn)(sim_worker *w, size_t row, const deftsim_step *st);
int sim_analytic_run(sim_ctx *c, sim_step_fn run_step, const sim_flow_model *fm, char *msg,
                     size_t cap);

/* A message's payload is its size, as a pointer, with the top bit set so that an empty
 * message is no null pointer (SimGrid refuses to send one); sim_payload() reads it back. */
#define SIM_PAYLOAD_TAG ((uintptr_t)1 << (sizeof(uintptr_t) * 8 - 1))
static inline void *sim_payload_of(uint64_t bytes) { return (void *)((uintptr_t)bytes | SIM_PAYLOAD_TAG); }
static inline uint64_t sim_payload(const void *p) { return (uint64_t)((uintptr_t)p & ~SIM_PAYLOAD_TAG); }

/* The non-blocking halves of sim_send and sim_recv, for steps that post many messages and
 * wait for all of them (sim_child.c): sim_isend starts a send and returns NULL when it is
 * eager (it completes without the sender); sim_irecv posts a receive whose payload size lands
 * in *slot. Neither counts received bytes: the caller adds them after the wait. */
sg_comm_t sim_isend(sim_worker *w, uint32_t dst, uint64_t bytes);
sg_comm_t sim_irecv(sim_worker *w, uint32_t src, void **slot);
/* A send that always waits for its receiver, whatever its size: NCCL's transport sends into a
 * buffer slot its receiver has granted, so no message is eager (sim_nccl.c). */
sg_comm_t sim_isend_sync(sim_worker *w, uint32_t dst, uint64_t bytes);
/* The same with `wire` bytes simulated on the links for the `bytes` of data it carries (a
 * protocol's flags, a link's achieved fraction: sim_nccl.c); the payload stays `bytes`. */
sg_comm_t sim_isend_sync_wire(sim_worker *w, uint32_t dst, uint64_t bytes, uint64_t wire);
/* Waits for the n handles (all the worker posted since its last wait that are not eager). */
void sim_wait_all(sim_worker *w, sg_comm_t *comms, size_t n);
/* Releases the calling actor's eager sends still kept (sim_p2p.c): each actor's last call. */
void sim_eager_reap(sim_worker *w);

#endif
