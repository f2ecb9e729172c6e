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

/* ---- Eager sends ------------------------------------------------------------------------------
 *
 * An eager send completes without its sender: the sender goes on at once and never waits for
 * it. SimGrid 3.32 offers that as a detached comm, but keeps every detached comm in flight in one
 * list of the engine's (its maestro's activities) and removes each finished one by walking the
 * whole list (CommImpl::finish, a std::list::remove): with P workers each posting s eager sends
 * at once the walks cost O((P s)^2) a round, two thirds of an Ok-Topk simulation at P = 1024
 * on the flat network (docs/NETWORK.md, "Approximate mode").
 *
 * In approximate mode each actor keeps handles to up to EAGER_KEEP of its eager sends instead,
 * and reaps them in its own waits: a wait watches the comms it waits for and the kept sends
 * together (sg_comm_wait_any) until every comm it waits for has finished; a kept send that
 * finishes meanwhile, or had finished before, is released there at no simulated time (the wait
 * of a finished comm returns at once and takes the comm off the actor's own short list). The
 * actor still resumes when the comms it waits for finish, but it wakes more often within an
 * instant, and SimGrid's results depend on the order in which actors act within one instant
 * (it sets the order of the flows in its solver, and which of two nearly tied ends comes
 * first): simulated times move by rounding, or more where many ends tie (docs/NETWORK.md gives
 * the measured differences). So exact mode detaches, as before. Beyond EAGER_KEEP kept sends, or
 * for a wait of more than WAIT_ANY_MAX comms in all, sends are detached and the wait is a
 * plain sg_comm_wait_all. An actor's last kept sends are released when it ends
 * (sim_eager_reap), after its last step's clock was read. */

static sim_eager *own_eager(sim_worker *w)
{
    return &w->eager[sg_actor_self() != w->main_actor];
}

/* Waits until the n comms finish; reaps the calling actor's kept eager sends meanwhile. */
static void wait_reaping(sim_worker *w, sg_comm_t *comms, size_t n)
{
    /* Exact mode keeps no eager send: no actor lookup on its waits. */
    sim_eager *q = w->ctx->p->mode == DEFTSIM_SIM_APPROXIMATE ? own_eager(w) : NULL;
    if (!q || !q->n || n + q->n > WAIT_ANY_MAX) {
        if (n) sg_comm_wait_all(comms, n);
        return;
    }
    /* all[0, need): the comms waited for; all[need, len): the kept sends. */
    sg_comm_t all[WAIT_ANY_MAX];
    size_t need = n, len = n + q->n;
    for (size_t i = 0; i < n; i++) all[i] = comms[i];
    for (uint32_t i = 0; i < q->n; i++) all[n + i] = q->comm[i];
    while (need) {
        size_t i = (size_t)sg_comm_wait_any(all, len);
        if (i < need) {
            all[i] = all[need - 1];
            all[need - 1] = all[len - 1];
            need--;
        } else {
            all[i] = all[len - 1];
        }
        len--;
    }
    q->n = (uint32_t)len;
    for (size_t i = 0; i < len; i++) q->comm[i] = all[i];
}

void sim_eager_reap(sim_worker *w)
{
    sim_eager *q = own_eager(w);
    if (q->n) sg_comm_wait_all(q->comm, q->n);
    q->n = 0;
}

/* Starts a send; NULL when it is eager (it completes without the sender: above). The
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
        sim_eager *q = own_eager(w);
        if (p->mode == DEFTSIM_SIM_APPROXIMATE && q->n < EAGER_KEEP)
            q->comm[q->n++] = sg_mailbox_put_async(mb, payload, size);
        else
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
    wait_reaping(w, comms, n);
}

void sim_send(sim_worker *w, uint32_t dst, uint64_t bytes)
{
    sg_comm_t c = sim_isend(w, dst, bytes);
    if (w->rec) sim_wait_all(w, NULL, 0);
    else if (c) wait_reaping(w, &c, 1);
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
    sg_comm_t c = sg_mailbox_get_async(in_mailbox(w, src), &data);
    wait_reaping(w, &c, 1);
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
    wait_reaping(w, c, n);
    uint64_t got = sim_payload(data);
    w->recv += got;
    return got;
}
