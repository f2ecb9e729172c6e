/* sim_analytic.c - analytic mode (docs/NETWORK.md, "Analytic mode"): the schedules timed
 * without SimGrid's actors, where that gives SimGrid's own answer.
 *
 * On a flat platform with no backbone, every route is the sender's up link and the receiver's
 * down link (full duplex), and with crosstraffic off and the LV08 or CM02 model a flow that
 * has both links to itself takes a fixed latency plus its size over a fixed rate: SimGrid's
 * max-min sharing has nothing to share. The collective algorithms (sim_coll.c, sim_nccl.c)
 * and the steps (sim_child.c) run unchanged for every worker, but the point-to-point layer
 * records their posts and waits (sim_p2p.c) instead of sending. This file then replays the
 * records as SimGrid would run them: a message starts when both its send and its receive are
 * posted (messages between two ranks match in posting order), takes L + (payload + envelope)
 * / R, and a worker leaves a wait when every non-eager message it waits for has arrived. L and
 * R are measured, not derived: the child times two lone messages with SimGrid on the
 * simulation's own platform first (sim_child.c).
 *
 * The replay checks the premise as it goes: if two messages ever transfer at once (after their
 * latency, during which SimGrid charges no bandwidth) on the same up or down link (eager sends whose receivers are late, a worker sending to several
 * peers at once, an alltoall's group), they would share its bandwidth and the closed form no
 * longer holds. The replay then gives up with the place it happened, and the caller runs the
 * full simulation instead (sim.c): the result names the mode that produced it.
 *
 * Call order in sim/: docs/ARCHITECTURE.md, the sim/ row of its folder table. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim_actors.h"
#include "deftsim_util.h"

/* The most posts one collective may record over all workers (16 bytes each): beyond it the
 * full simulation runs (it would take hours there too: a ring over 16384 ranks). */
#define AN_MAX_OPS (48u * 1000u * 1000u)

void sim_rec_push(sim_rec *r, sim_op_kind kind, uint32_t peer, uint64_t bytes, int eager)
{
    if (deftsim_grow(&r->ops, &r->cap, r->n + 1, sizeof *r->ops)) {
        r->nomem = 1;
        return;
    }
    r->ops[r->n++] = (sim_op){bytes, peer, (uint8_t)kind, (uint8_t)(eager ? 1 : 0)};
}

/* Whether a step of this kind is in the schedules. */
static int has_kind(const deftsim_schedule *const *scheds, size_t nsched, deftsim_step_kind k)
{
    for (size_t i = 0; i < nsched; i++)
        for (size_t j = 0; j < scheds[i]->nsteps; j++)
            if (scheds[i]->steps[j].kind == k) return 1;
    return 0;
}

int sim_analytic_eligible(const deftsim_sim_params *p, const deftsim_schedule *const *scheds,
                          size_t nsched, char *why, size_t cap)
{
    const char *no = NULL;
    int mpi = p->library == DEFTSIM_LIB_MPI;
    if (p->topology != DEFTSIM_TOPO_FLAT) no = "the topology is not flat";
    else if (p->backbone_bandwidth > 0) no = "the flat network has a shared backbone";
    else if (p->gpus_per_node > 1) no = "nodes hold several GPUs";
    else if (p->crosstraffic) no = "crosstraffic is on";
    else if (p->library == DEFTSIM_LIB_NCCL && p->nccl_model == DEFTSIM_NCCL_MODEL_TUNED)
        no = "NCCL's tuned model waits out per-step and per-call latencies";
    else if (p->model != DEFTSIM_NET_LV08 && p->model != DEFTSIM_NET_CM02)
        no = "the model's factors depend on the message size";
    else if (mpi && p->allgather == DEFTSIM_AG_RECURSIVE_DOUBLING &&
             has_kind(scheds, nsched, DEFTSIM_STEP_ALLGATHER))
        no = "recursive-doubling allgather reads what it receives";
    else if (mpi && p->bcast != DEFTSIM_BC_BINOMIAL && has_kind(scheds, nsched, DEFTSIM_STEP_BCAST))
        no = "the scatter broadcasts read what they receive";
    if (no) snprintf(why, cap, "%s", no);
    return no == NULL;
}

/* ---- the replay of one collective -------------------------------------------------------------- */

typedef struct {
    double t;         /* when it was posted */
    uint64_t bytes;   /* a send's payload */
    uint32_t rank;    /* who posted it */
    uint8_t awaited;  /* its poster waits for it */
    int32_t next;     /* the next post queued on the same pair, -1 */
} an_item;

/* The unmatched posts between one sender and one receiver: all sends or all receives. */
typedef struct {
    uint64_t key;     /* (src << 32 | dst) + 1; 0: empty slot */
    int32_t head, tail;
    uint8_t side;     /* SIM_OP_SEND or SIM_OP_RECV */
} an_pair;

typedef struct {
    uint32_t src, dst;
    double s, e;
} an_flow;

typedef struct {
    uint32_t P;
    double L, R;
    uint32_t envelope;
    sim_rec *rec;
    size_t *pc;
    double *t, *wend;
    uint32_t *outstanding;
    uint8_t *blocked;
    uint32_t *runq;
    size_t rq_head, rq_len;
    an_pair *tab;
    size_t tabcap;
    an_item *items;
    size_t nitems, itemcap;
    an_flow *flows, *sorted;
    size_t nflows;
    uint32_t *bucket;        /* P + 1: counting sort of the flows by link */
    double *up_busy, *down_busy; /* the latest end of an earlier collective's flow, per link */
    uint64_t *sent, *recv;
    char *msg;
    size_t msgcap;
    int shared;              /* two flows met on a link: msg says where */
} an_engine;

static void runq_push(an_engine *E, uint32_t r)
{
    E->runq[(E->rq_head + E->rq_len++) % E->P] = r;
}

static an_pair *pair_of(an_engine *E, uint32_t src, uint32_t dst)
{
    uint64_t key = (((uint64_t)src << 32) | dst) + 1;
    size_t mask = E->tabcap - 1;
    size_t h = (size_t)((key * 0x9E3779B97F4A7C15ull) >> 17) & mask;
    while (E->tab[h].key && E->tab[h].key != key) h = (h + 1) & mask;
    if (!E->tab[h].key) {
        E->tab[h].key = key;
        E->tab[h].head = E->tab[h].tail = -1;
    }
    return &E->tab[h];
}

static int item_new(an_engine *E, double t, uint64_t bytes, uint32_t rank, int awaited)
{
    if (E->nitems == E->itemcap) return -1; /* sized for every post: cannot happen */
    E->items[E->nitems] = (an_item){t, bytes, rank, (uint8_t)awaited, -1};
    return (int)E->nitems++;
}

static void enqueue(an_engine *E, an_pair *pr, uint8_t side, int it)
{
    if (pr->head < 0) {
        pr->head = pr->tail = it;
        pr->side = side;
    } else {
        E->items[pr->tail].next = it;
        pr->tail = it;
    }
}

static const an_item *dequeue(an_engine *E, an_pair *pr)
{
    const an_item *it = &E->items[pr->head];
    pr->head = it->next;
    if (pr->head < 0) pr->tail = -1;
    return it;
}

static void complete(an_engine *E, uint32_t r, double e)
{
    if (e > E->wend[r]) E->wend[r] = e;
    if (--E->outstanding[r] == 0 && E->blocked[r]) {
        E->blocked[r] = 0;
        if (E->wend[r] > E->t[r]) E->t[r] = E->wend[r];
        E->wend[r] = 0;
        runq_push(E, r);
    }
}

static void match(an_engine *E, uint32_t src, double ts, uint64_t bytes, int send_awaited,
                  uint32_t dst, double tr)
{
    double s = ts > tr ? ts : tr;
    double e = s + E->L + (double)(bytes + E->envelope) / E->R;
    E->flows[E->nflows++] = (an_flow){src, dst, s, e};
    E->sent[src] += bytes;
    E->recv[dst] += bytes;
    if (send_awaited) complete(E, src, e);
    complete(E, dst, e);
}

static void post_send(an_engine *E, uint32_t r, uint32_t d, uint64_t bytes, int awaited)
{
    if (awaited) E->outstanding[r]++;
    an_pair *pr = pair_of(E, r, d);
    if (pr->head >= 0 && pr->side == SIM_OP_RECV) {
        const an_item *it = dequeue(E, pr);
        match(E, r, E->t[r], bytes, awaited, d, it->t);
    } else {
        enqueue(E, pr, SIM_OP_SEND, item_new(E, E->t[r], bytes, r, awaited));
    }
}

static void post_recv(an_engine *E, uint32_t r, uint32_t s)
{
    E->outstanding[r]++;
    an_pair *pr = pair_of(E, s, r);
    if (pr->head >= 0 && pr->side == SIM_OP_SEND) {
        const an_item *it = dequeue(E, pr);
        match(E, s, it->t, it->bytes, it->awaited, r, E->t[r]);
    } else {
        enqueue(E, pr, SIM_OP_RECV, item_new(E, E->t[r], 0, r, 1));
    }
}

/* Runs rank r's record until it waits for a message not yet matched, or ends. */
static void run_rank(an_engine *E, uint32_t r)
{
    const sim_rec *rec = &E->rec[r];
    while (E->pc[r] < rec->n) {
        const sim_op *op = &rec->ops[E->pc[r]++];
        switch (op->kind) {
        case SIM_OP_SEND: post_send(E, r, op->peer, op->bytes, !op->eager); break;
        case SIM_OP_RECV: post_recv(E, r, op->peer); break;
        default:
            if (E->outstanding[r]) {
                E->blocked[r] = 1;
                return;
            }
            if (E->wend[r] > E->t[r]) E->t[r] = E->wend[r];
            E->wend[r] = 0;
            break;
        }
    }
}

/* Whether two flows of this collective, or one of it and one before it, are in flight on the
 * same link at once (by = 0: up links, keyed by sender; 1: down links, by receiver). */
static int link_shared(an_engine *E, int by)
{
    uint32_t P = E->P;
    double *busy = by ? E->down_busy : E->up_busy;
    memset(E->bucket, 0, ((size_t)P + 1) * sizeof *E->bucket);
    for (size_t i = 0; i < E->nflows; i++) E->bucket[(by ? E->flows[i].dst : E->flows[i].src) + 1]++;
    for (uint32_t l = 0; l < P; l++) E->bucket[l + 1] += E->bucket[l];
    for (size_t i = 0; i < E->nflows; i++) {
        uint32_t l = by ? E->flows[i].dst : E->flows[i].src;
        E->sorted[E->bucket[l]++] = E->flows[i];
    }
    size_t lo = 0;
    for (uint32_t l = 0; l < P; l++) {
        size_t hi = E->bucket[l]; /* after the pass above: the end of link l's flows */
        an_flow *f = E->sorted + lo;
        size_t n = hi - lo;
        for (size_t i = 1; i < n; i++) { /* by start: a link carries few flows a collective */
            an_flow x = f[i];
            size_t j = i;
            for (; j > 0 && f[j - 1].s > x.s; j--) f[j] = f[j - 1];
            f[j] = x;
        }
        double reach = busy[l];
        for (size_t i = 0; i < n; i++) {
            /* A message takes no bandwidth in its latency phase (SimGrid starts its transfer
             * after the latency): only the transfers must not meet. */
            if (f[i].s + E->L < reach - 1e-12 * reach) {
                snprintf(E->msg, E->msgcap,
                         "two messages transfer at once on the %s link of worker %" PRIu32
                         " at %.9g s", by ? "down" : "up", l, f[i].s);
                return 1;
            }
            if (f[i].e > reach) reach = f[i].e;
        }
        busy[l] = reach;
        lo = hi;
    }
    return 0;
}

/* Replays the collective recorded in E->rec from the entry times: end[r] when rank r leaves
 * it. 0, 1 when two flows share a link, -1 on a deadlock (msg says so). */
static int replay(an_engine *E, const double *entry, double *end)
{
    uint32_t P = E->P;
    E->nitems = E->nflows = 0;
    memset(E->tab, 0, E->tabcap * sizeof *E->tab);
    E->rq_head = E->rq_len = 0;
    for (uint32_t r = 0; r < P; r++) {
        E->pc[r] = 0;
        E->t[r] = entry[r];
        E->wend[r] = 0;
        E->outstanding[r] = 0;
        E->blocked[r] = 0;
        E->sent[r] = E->recv[r] = 0;
        runq_push(E, r);
    }
    while (E->rq_len) {
        uint32_t r = E->runq[E->rq_head];
        E->rq_head = (E->rq_head + 1) % P;
        E->rq_len--;
        run_rank(E, r);
    }
    for (uint32_t r = 0; r < P; r++) {
        if (E->pc[r] < E->rec[r].n || E->outstanding[r]) {
            snprintf(E->msg, E->msgcap,
                     "the simulation deadlocked: worker %" PRIu32 " waits for a message no one sends", r);
            return -1;
        }
        end[r] = E->t[r];
    }
    for (size_t i = 0; i < E->nflows; i++)
        if (E->flows[i].src == E->flows[i].dst) {
            snprintf(E->msg, E->msgcap, "worker %" PRIu32 " sends to itself", E->flows[i].src);
            return 1;
        }
    return link_shared(E, 0) || link_shared(E, 1);
}

/* Room for a collective of `posts` posts: the pair table (a power of two, at most half full),
 * the queued items and the flows. */
static int engine_reserve(an_engine *E, size_t posts)
{
    if (posts <= E->itemcap) return 0;
    size_t cap = E->itemcap ? E->itemcap : 1024;
    while (cap < posts) cap *= 2;
    size_t tabcap = 2 * cap;
    an_item *items = realloc(E->items, cap * sizeof *items);
    if (items) E->items = items;
    an_flow *flows = realloc(E->flows, cap * sizeof *flows);
    if (flows) E->flows = flows;
    an_flow *sorted = realloc(E->sorted, cap * sizeof *sorted);
    if (sorted) E->sorted = sorted;
    an_pair *tab = realloc(E->tab, tabcap * sizeof *tab);
    if (tab) E->tab = tab;
    if (!items || !flows || !sorted || !tab) return -1;
    E->itemcap = cap; /* the flows and their sorted copy hold as many */
    E->tabcap = tabcap;
    return 0;
}

static void engine_free(an_engine *E)
{
    if (E->rec)
        for (uint32_t r = 0; r < E->P; r++) free(E->rec[r].ops);
    free(E->rec);
    free(E->pc);
    free(E->t);
    free(E->wend);
    free(E->outstanding);
    free(E->blocked);
    free(E->runq);
    free(E->tab);
    free(E->items);
    free(E->flows);
    free(E->sorted);
    free(E->bucket);
    free(E->up_busy);
    free(E->down_busy);
    free(E->sent);
    free(E->recv);
}

static int engine_init(an_engine *E, uint32_t P, const sim_flow_model *fm, uint32_t envelope)
{
    memset(E, 0, sizeof *E);
    E->P = P;
    E->L = fm->L;
    E->R = fm->R;
    E->envelope = envelope;
    E->rec = calloc(P, sizeof *E->rec);
    E->pc = calloc(P, sizeof *E->pc);
    E->t = calloc(P, sizeof *E->t);
    E->wend = calloc(P, sizeof *E->wend);
    E->outstanding = calloc(P, sizeof *E->outstanding);
    E->blocked = calloc(P, sizeof *E->blocked);
    E->runq = calloc(P, sizeof *E->runq);
    E->bucket = calloc((size_t)P + 1, sizeof *E->bucket);
    E->up_busy = calloc(P, sizeof *E->up_busy);
    E->down_busy = calloc(P, sizeof *E->down_busy);
    E->sent = calloc(P, sizeof *E->sent);
    E->recv = calloc(P, sizeof *E->recv);
    return E->rec && E->pc && E->t && E->wend && E->outstanding && E->blocked && E->runq &&
                   E->bucket && E->up_busy && E->down_busy && E->sent && E->recv
               ? 0
               : -1;
}

/* ---- the schedules ----------------------------------------------------------------------------- */

/* Records every worker's part of collective step `row` and replays it. */
static int collective(an_engine *E, sim_ctx *c, sim_step_fn run_step, size_t row,
                      const deftsim_step *st, const double *entry, double *end)
{
    size_t posts = 0;
    for (uint32_t r = 0; r < E->P; r++) {
        sim_worker *w = &c->workers[r];
        E->rec[r].n = 0;
        w->rec = &E->rec[r];
        run_step(w, row, st);
        w->rec = NULL;
        if (E->rec[r].nomem) {
            deftsim_nomem_format(E->msg, E->msgcap, "recording step '%s'", st->name);
            return -1;
        }
        posts += E->rec[r].n;
        if (posts > AN_MAX_OPS) {
            snprintf(E->msg, E->msgcap,
                     "step '%s' posts more than %u messages and waits over all workers", st->name,
                     AN_MAX_OPS);
            return 1;
        }
    }
    if (engine_reserve(E, posts)) {
        deftsim_nomem_format(E->msg, E->msgcap, "replaying step '%s'", st->name);
        return -1;
    }
    int rc = replay(E, entry, end);
    if (rc > 0) {
        size_t len = strlen(E->msg);
        snprintf(E->msg + len, E->msgcap - len, " (step '%s')", st->name);
    }
    return rc;
}

int sim_analytic_run(sim_ctx *c, sim_step_fn run_step, const sim_flow_model *fm, char *msg,
                     size_t cap)
{
    const deftsim_sim_params *p = c->p;
    uint32_t P = p->P;
    sim_child_out *o = c->out;
    an_engine E;
    int rc = -1;
    double *main_t = calloc(P, sizeof *main_t), *async_t = calloc(P, sizeof *async_t);
    double *entry = calloc(P, sizeof *entry), *end = calloc(P, sizeof *end);
    if (engine_init(&E, P, fm, p->envelope_bytes) || !main_t || !async_t || !entry || !end) {
        deftsim_nomem_format(msg, cap, "the analytic simulation of %u workers", P);
        goto done;
    }
    E.msg = msg;
    E.msgcap = cap;
    for (size_t i = 0; i < c->nsched; i++) {
        const deftsim_schedule *s = c->scheds[i];
        /* Every worker starts the schedule at once, and no message is in flight then. */
        memset(main_t, 0, P * sizeof *main_t);
        memset(async_t, 0, P * sizeof *async_t);
        memset(E.up_busy, 0, P * sizeof *E.up_busy);
        memset(E.down_busy, 0, P * sizeof *E.down_busy);
        for (size_t k = 0; k < s->nsteps; k++) {
            size_t row = c->step_offset[i] + k;
            const deftsim_step *st = &s->steps[k];
            size_t at = row * P;
            if (st->kind == DEFTSIM_STEP_COMPUTE) {
                int passes = p->compute == DEFTSIM_SIM_COMPUTE_MEASURED || (st->flags & DEFTSIM_STEP_GIVEN);
                for (uint32_t r = 0; r < P; r++) {
                    o->start[at + r] = main_t[r];
                    if (passes && st->seconds[r] > 0) main_t[r] += st->seconds[r];
                    o->end[at + r] = main_t[r];
                    o->sent[at + r] = o->recv[at + r] = 0;
                }
                continue;
            }
            /* A synchronous collective starts when the worker's asynchronous ones have ended;
             * an asynchronous one when posted, after the one before it (one actor runs them). */
            for (uint32_t r = 0; r < P; r++) entry[r] = main_t[r] > async_t[r] ? main_t[r] : async_t[r];
            int x = collective(&E, c, run_step, row, st, entry, end);
            if (x) {
                rc = x;
                goto done;
            }
            double *to = (st->flags & DEFTSIM_STEP_ASYNC) ? async_t : main_t;
            for (uint32_t r = 0; r < P; r++) {
                o->start[at + r] = entry[r];
                o->end[at + r] = end[r];
                o->sent[at + r] = E.sent[r];
                o->recv[at + r] = E.recv[r];
                to[r] = end[r];
            }
        }
    }
    for (uint32_t r = 0; r < P; r++) o->messages += c->workers[r].messages;
    rc = 0;
done:
    engine_free(&E);
    free(main_t);
    free(async_t);
    free(entry);
    free(end);
    return rc;
}
