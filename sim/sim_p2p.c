/* sim_p2p.c - the point-to-point layer of sim_internal.h over SimGrid's S4U mailboxes, the
 * simulated clock, and approximate mode's agreement between the ranks. The lowest SimGrid
 * file: the collectives (sim_coll.c) and the steps (sim_child.c) send through it.
 *
 * Mailboxes: one per (receiver, sender) pair, so that messages between two ranks match in the
 * order they were posted, as MPI's non-overtaking rule matches them per (source, tag); a rank
 * talks to O(log P) peers in every algorithm but the rings, so each worker caches the mailboxes
 * it uses instead of building their names for every message.
 *
 * Call order in sim/: docs/ARCHITECTURE.md, the sim/ row of its folder table. */
#include <inttypes.h>
#include <stdio.h>

#include <simgrid/actor.h>
#include <simgrid/barrier.h>
#include <simgrid/comm.h>
#include <simgrid/engine.h>
#include <simgrid/mailbox.h>

#include "sim_actors.h"

uint32_t sim_rank(const sim_worker *w) { return w->rank; }
uint32_t sim_size(const sim_worker *w) { return w->P; }
double sim_now(void) { return simgrid_get_clock(); }

void sim_sleep(double seconds)
{
    /* Approximate mode only, which never records. */
    if (seconds > 0) sg_actor_sleep_for(seconds);
}

void sim_approx_agree(sim_worker *w, double end, double step, double *max_end, double *max_step)
{
    sim_ctx *c = w->ctx;
    unsigned slot = (unsigned)(w->agreements++ & 1u);
    if (end > c->approx_end[slot]) c->approx_end[slot] = end;
    if (step > c->approx_step[slot]) c->approx_step[slot] = step;
    sg_barrier_wait(c->approx_bar);
    *max_end = c->approx_end[slot];
    *max_step = c->approx_step[slot];
    /* The last reader clears the slot for the agreement after next. */
    if (++c->approx_read[slot] == w->P) {
        c->approx_read[slot] = 0;
        c->approx_end[slot] = c->approx_step[slot] = 0;
    }
}

void sim_approx_seq_start(sim_worker *w, sim_approx_seq *q)
{
    double unused;
    sim_approx_agree(w, sim_now(), 0, &q->end, &unused);
    sim_sleep(q->end - sim_now());
    q->pace = 0;
}

int sim_approx_seq_round(sim_worker *w, sim_approx_seq *q, uint32_t i, uint32_t n)
{
    (void)w;
    if (!sim_approx_seq_sampled(i, n)) {
        q->end += q->pace;
        sim_sleep(q->end - sim_now());
        return 0;
    }
    q->t0 = sim_now();
    return 1;
}

void sim_approx_seq_done(sim_worker *w, sim_approx_seq *q)
{
    double longest;
    sim_approx_agree(w, sim_now(), sim_now() - q->t0, &q->end, &longest);
    if (longest > q->pace) q->pace = longest;
    sim_sleep(q->end - sim_now());
}

/* ---- point to point ---------------------------------------------------------------------------- */

static sg_mailbox_t mailbox(uint32_t dst, uint32_t src)
{
    char name[40];
    snprintf(name, sizeof name, "%" PRIu32 "<%" PRIu32, dst, src);
    return sg_mailbox_by_name(name);
}

static sg_mailbox_t out_mailbox(sim_worker *w, uint32_t dst)
{
    uint32_t slot = dst % MBOX_CACHE;
    if (!w->out_mb[slot] || w->out_peer[slot] != dst) {
        w->out_mb[slot] = mailbox(dst, w->rank);
        w->out_peer[slot] = dst;
    }
    return w->out_mb[slot];
}

static sg_mailbox_t in_mailbox(sim_worker *w, uint32_t src)
{
    uint32_t slot = src % MBOX_CACHE;
    if (!w->in_mb[slot] || w->in_peer[slot] != src) {
        w->in_mb[slot] = mailbox(w->rank, src);
        w->in_peer[slot] = src;
    }
    return w->in_mb[slot];
}

/* Starts a send; NULL when it is eager (detached: it completes without the sender). The
 * payload pointer is the payload size itself (sim_payload_of): the receiver reads it back. */
/* Analytic mode records instead of sending (sim_analytic.c): a posted send or receive, and a
 * wait for every non-eager one posted since the last wait. The handle a recorded post returns
 * only has to be non-null. */
static char rec_handle;
#define REC_COMM ((sg_comm_t)(void *)&rec_handle)

sg_comm_t sim_isend(sim_worker *w, uint32_t dst, uint64_t bytes)
{
    const deftsim_sim_params *p = w->ctx->p;
    w->sent += bytes;
    w->messages++;
    if (w->rec) {
        int eager = bytes < p->eager_threshold;
        sim_rec_push(w->rec, SIM_OP_SEND, dst, bytes, eager);
        return eager ? NULL : REC_COMM;
    }
    sg_mailbox_t mb = out_mailbox(w, dst);
    void *payload = sim_payload_of(bytes);
    long size = (long)(bytes + p->envelope_bytes);
    if (bytes < p->eager_threshold) {
        sg_comm_detach(sg_mailbox_put_init(mb, payload, size), NULL);
        return NULL;
    }
    return sg_mailbox_put_async(mb, payload, size);
}

sg_comm_t sim_isend_sync(sim_worker *w, uint32_t dst, uint64_t bytes)
{
    const deftsim_sim_params *p = w->ctx->p;
    w->sent += bytes;
    w->messages++;
    if (w->rec) {
        sim_rec_push(w->rec, SIM_OP_SEND, dst, bytes, 0);
        return REC_COMM;
    }
    return sg_mailbox_put_async(out_mailbox(w, dst), sim_payload_of(bytes),
                                (long)(bytes + p->envelope_bytes));
}

sg_comm_t sim_isend_sync_wire(sim_worker *w, uint32_t dst, uint64_t bytes, uint64_t wire)
{
    if (wire == bytes || w->rec) return sim_isend_sync(w, dst, bytes);
    const deftsim_sim_params *p = w->ctx->p;
    w->sent += bytes;
    w->messages++;
    return sg_mailbox_put_async(out_mailbox(w, dst), sim_payload_of(bytes),
                                (long)(wire + p->envelope_bytes));
}

sg_comm_t sim_irecv(sim_worker *w, uint32_t src, void **slot)
{
    if (w->rec) {
        sim_rec_push(w->rec, SIM_OP_RECV, src, 0, 0);
        *slot = sim_payload_of(0);
        return REC_COMM;
    }
    return sg_mailbox_get_async(in_mailbox(w, src), slot);
}

void sim_wait_all(sim_worker *w, sg_comm_t *comms, size_t n)
{
    if (w->rec) {
        sim_rec_push(w->rec, SIM_OP_WAIT, 0, 0, 0);
        return;
    }
    if (n) sg_comm_wait_all(comms, n);
}

void sim_send(sim_worker *w, uint32_t dst, uint64_t bytes)
{
    sg_comm_t c = sim_isend(w, dst, bytes);
    if (w->rec) sim_wait_all(w, NULL, 0);
    else if (c) sg_comm_wait(c);
}

/* In analytic mode a receive returns 0 bytes: no algorithm that reads what it received
 * (recursive-doubling allgather, the scatter broadcasts) runs there (sim_analytic_eligible). */
uint64_t sim_recv(sim_worker *w, uint32_t src)
{
    if (w->rec) {
        void *slot;
        sim_irecv(w, src, &slot);
        sim_wait_all(w, NULL, 0);
        return 0;
    }
    void *data = NULL;
    sg_comm_wait(sg_mailbox_get_async(in_mailbox(w, src), &data));
    uint64_t got = sim_payload(data);
    w->recv += got;
    return got;
}

uint64_t sim_sendrecv(sim_worker *w, uint32_t dst, uint64_t sbytes, uint32_t src)
{
    if (dst == w->rank && src == w->rank) return sbytes; /* a local copy */
    if (w->rec) {
        void *slot;
        sim_isend(w, dst, sbytes);
        sim_irecv(w, src, &slot);
        sim_wait_all(w, NULL, 0);
        return 0;
    }
    void *data = NULL;
    sg_comm_t c[2];
    size_t n = 0;
    sg_comm_t s = sim_isend(w, dst, sbytes);
    if (s) c[n++] = s;
    c[n++] = sg_mailbox_get_async(in_mailbox(w, src), &data);
    sg_comm_wait_all(c, n);
    uint64_t got = sim_payload(data);
    w->recv += got;
    return got;
}
