/* sim_child.c - the SimGrid side of a simulation, run in a forked child (sim.c): the engine,
 * one actor per worker, the point-to-point layer of sim_internal.h over S4U mailboxes, and the
 * schedule steps.
 *
 * Mailboxes: one per (receiver, sender) pair, so that messages between two ranks match in the
 * order they were posted, as MPI's non-overtaking rule matches them per (source, tag); a rank
 * talks to O(log P) peers in every algorithm but the rings, so each worker caches the mailboxes
 * it uses instead of building their names for every message. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <simgrid/actor.h>
#include <simgrid/barrier.h>
#include <simgrid/comm.h>
#include <simgrid/engine.h>
#include <simgrid/host.h>
#include <simgrid/mailbox.h>

#include "sim_internal.h"

/* Stack of each actor. The workers' frames are small (no arrays on the stack); SimGrid's own
 * calls run on it too. Under AddressSanitizer the actors are threads (below) and ASan's
 * redzones make frames larger. */
#if defined(__SANITIZE_ADDRESS__)
#define SIM_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SIM_ASAN 1
#endif
#endif
#ifdef SIM_ASAN
#define STACK_KIB 1024
#else
#define STACK_KIB 256
#endif

#define MBOX_CACHE 64u /* direct-mapped, by peer rank */

typedef struct sim_ctx sim_ctx;

struct sim_worker {
    uint32_t rank, P;
    sim_ctx *ctx;
    uint64_t sent, recv;       /* payload bytes of the current step */
    uint64_t messages;
    uint64_t agreements;       /* approximate mode: sim_approx_agree() calls so far */
    size_t cur_sched, cur_step;  /* where the worker is, for a deadlock report */
    int done;
    uint32_t in_peer[MBOX_CACHE], out_peer[MBOX_CACHE];
    sg_mailbox_t in_mb[MBOX_CACHE], out_mb[MBOX_CACHE];
    sg_comm_t *comms;          /* SENDRECV: room for every incoming message plus one send */
    void **slots;
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
    uint32_t max_in;
    sim_worker *workers;
    /* Approximate mode's agreements, by the parity of a worker's count of them: a worker can
     * be at most one agreement ahead of the slowest (the barrier holds it), so two slots do. */
    sg_bar_t approx_bar;
    double approx_end[2], approx_step[2];
    uint32_t approx_read[2];
};

uint32_t sim_rank(const sim_worker *w) { return w->rank; }
uint32_t sim_size(const sim_worker *w) { return w->P; }
double sim_now(void) { return simgrid_get_clock(); }

void sim_sleep(double seconds)
{
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
 * payload pointer is the payload size itself: the receiver reads it back, nothing is stored. */
static sg_comm_t isend(sim_worker *w, uint32_t dst, uint64_t bytes)
{
    const deftsim_sim_params *p = w->ctx->p;
    sg_mailbox_t mb = out_mailbox(w, dst);
    void *payload = (void *)(uintptr_t)bytes;
    long size = (long)(bytes + p->envelope_bytes);
    w->sent += bytes;
    w->messages++;
    if (bytes < p->eager_threshold) {
        sg_comm_detach(sg_mailbox_put_init(mb, payload, size), NULL);
        return NULL;
    }
    return sg_mailbox_put_async(mb, payload, size);
}

void sim_send(sim_worker *w, uint32_t dst, uint64_t bytes)
{
    sg_comm_t c = isend(w, dst, bytes);
    if (c) sg_comm_wait(c);
}

uint64_t sim_recv(sim_worker *w, uint32_t src)
{
    void *data = NULL;
    sg_comm_wait(sg_mailbox_get_async(in_mailbox(w, src), &data));
    uint64_t got = (uint64_t)(uintptr_t)data;
    w->recv += got;
    return got;
}

uint64_t sim_sendrecv(sim_worker *w, uint32_t dst, uint64_t sbytes, uint32_t src)
{
    if (dst == w->rank && src == w->rank) return sbytes; /* a local copy */
    void *data = NULL;
    sg_comm_t c[2];
    size_t n = 0;
    sg_comm_t s = isend(w, dst, sbytes);
    if (s) c[n++] = s;
    c[n++] = sg_mailbox_get_async(in_mailbox(w, src), &data);
    sg_comm_wait_all(c, n);
    uint64_t got = (uint64_t)(uintptr_t)data;
    w->recv += got;
    return got;
}

/* ---- steps ------------------------------------------------------------------------------------- */

static void run_sendrecv(sim_worker *w, size_t row, const deftsim_step *st)
{
    sim_ctx *c = w->ctx;
    const uint32_t *off = c->in_off[row], *list = c->in_list[row];
    size_t n = 0;
    for (uint32_t i = off[w->rank]; i < off[w->rank + 1]; i++) {
        w->slots[n] = NULL;
        w->comms[n] = sg_mailbox_get_async(in_mailbox(w, list[i]), &w->slots[n]);
        n++;
    }
    size_t nrecv = n;
    uint32_t peer = st->peer[w->rank];
    if (peer != DEFTSIM_NO_PEER && peer != w->rank) {
        sg_comm_t s = isend(w, peer, st->bytes[w->rank]);
        if (s) w->comms[n++] = s;
    }
    if (n) sg_comm_wait_all(w->comms, n);
    for (size_t i = 0; i < nrecv; i++) w->recv += (uint64_t)(uintptr_t)w->slots[i];
}

/* A P2P round: every receive posted (senders ascending, each sender's messages in slot
 * order), then every send in slot order, then one wait for all of them. */
static void run_p2p(sim_worker *w, size_t row, const deftsim_step *st)
{
    sim_ctx *c = w->ctx;
    const uint32_t *off = c->in_off[row], *list = c->in_list[row];
    size_t n = 0;
    for (uint32_t i = off[w->rank]; i < off[w->rank + 1]; i++) {
        w->slots[n] = NULL;
        w->comms[n] = sg_mailbox_get_async(in_mailbox(w, list[i]), &w->slots[n]);
        n++;
    }
    size_t nrecv = n;
    for (uint32_t j = 0; j < st->fan; j++) {
        size_t at = (size_t)w->rank * st->fan + j;
        uint32_t peer = st->peer[at];
        if (peer == DEFTSIM_NO_PEER || peer == w->rank) continue;
        sg_comm_t s = isend(w, peer, st->bytes[at]);
        if (s) w->comms[n++] = s;
    }
    if (n) sg_comm_wait_all(w->comms, n);
    for (size_t i = 0; i < nrecv; i++) w->recv += (uint64_t)(uintptr_t)w->slots[i];
}

static void run_step(sim_worker *w, size_t row, const deftsim_step *st)
{
    const deftsim_sim_params *p = w->ctx->p;
    switch (st->kind) {
    case DEFTSIM_STEP_COMPUTE: /* compute = none: no time passes, no event is scheduled */
        if (p->compute == DEFTSIM_SIM_COMPUTE_MEASURED) sim_sleep(st->seconds[w->rank]);
        return;
    case DEFTSIM_STEP_ALLGATHER: sim_allgather(w, p, st->bytes, &w->ctx->ag[row]); return;
    case DEFTSIM_STEP_ALLREDUCE: sim_allreduce(w, p, st->bytes[0]); return;
    case DEFTSIM_STEP_BCAST: sim_bcast(w, p, st->root, st->bytes[st->root]); return;
    case DEFTSIM_STEP_SENDRECV: run_sendrecv(w, row, st); return;
    case DEFTSIM_STEP_ALLTOALL: sim_alltoall(w, p, st->bytes[w->rank]); return;
    case DEFTSIM_STEP_P2P: run_p2p(w, row, st); return;
    }
}

static void worker_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    sim_worker *w = sg_actor_self_get_data();
    sim_ctx *c = w->ctx;
    sim_child_out *o = c->out;
    for (size_t i = 0; i < c->nsched; i++) {
        /* Every worker starts the schedule at the instant the last one finished the previous. */
        sg_barrier_wait(c->barrier);
        double t0 = simgrid_get_clock();
        const deftsim_schedule *s = c->scheds[i];
        w->cur_sched = i;
        for (size_t k = 0; k < s->nsteps; k++) {
            size_t row = c->step_offset[i] + k, at = row * w->P + w->rank;
            w->cur_step = k;
            w->sent = w->recv = 0;
            o->start[at] = simgrid_get_clock() - t0;
            run_step(w, row, &s->steps[k]);
            o->end[at] = simgrid_get_clock() - t0;
            o->sent[at] = w->sent;
            o->recv[at] = w->recv;
        }
    }
    w->done = 1;
}

/* ---- set-up ------------------------------------------------------------------------------------ */

int sim_natural_cmp(const char *a, const char *b)
{
    while (*a && *b) {
        if (*a >= '0' && *a <= '9' && *b >= '0' && *b <= '9') {
            while (*a == '0') a++;
            while (*b == '0') b++;
            const char *ea = a, *eb = b;
            while (*ea >= '0' && *ea <= '9') ea++;
            while (*eb >= '0' && *eb <= '9') eb++;
            if (ea - a != eb - b) return ea - a < eb - b ? -1 : 1;
            int d = strncmp(a, b, (size_t)(ea - a));
            if (d) return d;
            a = ea;
            b = eb;
        } else {
            if (*a != *b) return (unsigned char)*a < (unsigned char)*b ? -1 : 1;
            a++;
            b++;
        }
    }
    return (*a != 0) - (*b != 0);
}

static int host_cmp(const void *x, const void *y)
{
    return sim_natural_cmp(sg_host_get_name(*(const sg_host_t *)x),
                           sg_host_get_name(*(const sg_host_t *)y));
}

/* What every worker reads but none writes: allgather sums and the SENDRECV receivers. */
static int precompute(sim_ctx *c, char *msg, size_t cap)
{
    uint32_t P = c->p->P;
    size_t rows = c->step_offset[c->nsched];
    c->ag = calloc(rows ? rows : 1, sizeof *c->ag);
    c->in_list = calloc(rows ? rows : 1, sizeof *c->in_list);
    c->in_off = calloc(rows ? rows : 1, sizeof *c->in_off);
    if (!c->ag || !c->in_list || !c->in_off) goto nomem;
    for (size_t i = 0; i < c->nsched; i++) {
        const deftsim_schedule *s = c->scheds[i];
        for (size_t k = 0; k < s->nsteps; k++) {
            size_t row = c->step_offset[i] + k;
            const deftsim_step *st = &s->steps[k];
            if (st->kind == DEFTSIM_STEP_ALLGATHER) {
                sim_ag_info *a = &c->ag[row];
                if (!(a->prefix = malloc(((size_t)P + 1) * sizeof *a->prefix))) goto nomem;
                a->prefix[0] = 0;
                a->min = UINT64_MAX;
                a->equal = 1;
                for (uint32_t r = 0; r < P; r++) {
                    a->prefix[r + 1] = a->prefix[r] + st->bytes[r];
                    if (st->bytes[r] < a->min) a->min = st->bytes[r];
                    if (st->bytes[r] != st->bytes[0]) a->equal = 0;
                }
                a->total = a->prefix[P];
            } else if (st->kind == DEFTSIM_STEP_SENDRECV) {
                uint32_t *off = calloc((size_t)P + 2, sizeof *off);
                if (!off) goto nomem;
                c->in_off[row] = off;
                uint32_t n = 0;
                for (uint32_t r = 0; r < P; r++)
                    if (st->peer[r] != DEFTSIM_NO_PEER && st->peer[r] != r) {
                        off[st->peer[r] + 2]++;
                        n++;
                    }
                for (uint32_t r = 0; r < P; r++) {
                    if (off[r + 2] > c->max_in) c->max_in = off[r + 2];
                    off[r + 2] += off[r + 1];
                }
                uint32_t *list = malloc((n ? n : 1) * sizeof *list);
                if (!list) goto nomem;
                c->in_list[row] = list;
                for (uint32_t r = 0; r < P; r++)
                    if (st->peer[r] != DEFTSIM_NO_PEER && st->peer[r] != r)
                        list[off[st->peer[r] + 1]++] = r;
            } else if (st->kind == DEFTSIM_STEP_P2P) {
                /* The same lists, a sender once per message it sends (in slot order). */
                uint32_t fan = st->fan;
                uint32_t *off = calloc((size_t)P + 2, sizeof *off);
                if (!off) goto nomem;
                c->in_off[row] = off;
                size_t n = 0;
                for (uint32_t r = 0; r < P; r++)
                    for (uint32_t j = 0; j < fan; j++) {
                        uint32_t d = st->peer[(size_t)r * fan + j];
                        if (d != DEFTSIM_NO_PEER && d != r) {
                            off[d + 2]++;
                            n++;
                        }
                    }
                for (uint32_t r = 0; r < P; r++) {
                    if (off[r + 2] + fan > c->max_in) c->max_in = off[r + 2] + fan;
                    off[r + 2] += off[r + 1];
                }
                uint32_t *list = malloc((n ? n : 1) * sizeof *list);
                if (!list) goto nomem;
                c->in_list[row] = list;
                for (uint32_t r = 0; r < P; r++)
                    for (uint32_t j = 0; j < fan; j++) {
                        uint32_t d = st->peer[(size_t)r * fan + j];
                        if (d != DEFTSIM_NO_PEER && d != r) list[off[d + 1]++] = r;
                    }
            }
        }
    }
    return 0;
nomem:
    snprintf(msg, cap, "out of memory preparing the simulation");
    return -1;
}

/* Frees what precompute() and sim_child_run() allocated: the child exits right after, but
 * leaves nothing lost behind (memcheck follows the forked child). */
static void ctx_free(sim_ctx *c)
{
    size_t rows = c->step_offset[c->nsched];
    for (size_t row = 0; row < rows; row++) {
        if (c->ag) free(c->ag[row].prefix);
        if (c->in_list) free(c->in_list[row]);
        if (c->in_off) free(c->in_off[row]);
    }
    free(c->ag);
    free(c->in_list);
    free(c->in_off);
    if (c->workers)
        for (uint32_t r = 0; r < c->p->P; r++) {
            free(c->workers[r].comms);
            free(c->workers[r].slots);
        }
    free(c->workers);
    if (c->barrier) sg_barrier_destroy(c->barrier);
    if (c->approx_bar) sg_barrier_destroy(c->approx_bar);
}

int sim_child_run(const deftsim_sim_params *p, const char *platform_path,
                  const deftsim_schedule *const *scheds, size_t nsched, const size_t *step_offset,
                  sim_child_out *out, char *msg, size_t msgcap)
{
    uint32_t P = p->P;
    sim_ctx c;
    memset(&c, 0, sizeof c);
    c.p = p;
    c.scheds = scheds;
    c.nsched = nsched;
    c.step_offset = step_offset;
    c.out = out;
    sg_host_t *hosts = NULL;
    int rc = -1;
    if (precompute(&c, msg, msgcap)) goto done;

    char model[64], cross[64], stack[64];
    snprintf(model, sizeof model, "--cfg=network/model:%s", deftsim_net_model_name(p->model));
    snprintf(cross, sizeof cross, "--cfg=network/crosstraffic:%d", p->crosstraffic ? 1 : 0);
    snprintf(stack, sizeof stack, "--cfg=contexts/stack-size:%d", STACK_KIB);
    char *argv[] = {"deftsim-sim", model, cross, stack,
                    /* Only warnings and errors: the configuration echo would go to the
                     * caller's terminal for every point. */
                    "--log=root.thres:warning",
#ifdef SIM_ASAN
                    /* SimGrid's default contexts switch stacks by hand, which ASan cannot
                     * follow (it reports false stack errors); threads it understands. */
                    "--cfg=contexts/factory:thread",
#endif
                    NULL};
    int argc = (int)(sizeof argv / sizeof argv[0]) - 1;
    simgrid_init(&argc, argv);
    simgrid_load_platform(platform_path);

    hosts = calloc(P, sizeof *hosts);
    c.workers = calloc(P, sizeof *c.workers);
    if (!hosts || !c.workers) {
        snprintf(msg, msgcap, "out of memory creating %u workers", P);
        goto done;
    }
    if (p->topology == DEFTSIM_TOPO_FILE) {
        size_t nh = sg_host_count();
        if (nh < P) {
            snprintf(msg, msgcap, "platform_file %s: %zu hosts, fewer than the %u workers",
                     platform_path, nh, P);
            goto done;
        }
        sg_host_t *all = sg_host_list();
        qsort(all, nh, sizeof *all, host_cmp);
        memcpy(hosts, all, P * sizeof *hosts);
        free(all);
    } else {
        for (uint32_t r = 0; r < P; r++) {
            char name[32];
            snprintf(name, sizeof name, "node-%" PRIu32, r);
            if (!(hosts[r] = sg_host_by_name(name))) {
                snprintf(msg, msgcap, "generated platform %s has no host %s", platform_path, name);
                goto done;
            }
        }
    }
    c.barrier = sg_barrier_init(P);
    c.approx_bar = sg_barrier_init(P);
    for (uint32_t r = 0; r < P; r++) {
        sim_worker *w = &c.workers[r];
        w->rank = r;
        w->P = P;
        w->ctx = &c;
        w->comms = calloc((size_t)c.max_in + 1, sizeof *w->comms);
        w->slots = calloc((size_t)c.max_in + 1, sizeof *w->slots);
        if (!w->comms || !w->slots) {
            snprintf(msg, msgcap, "out of memory creating %u workers", P);
            goto done;
        }
        char name[32];
        snprintf(name, sizeof name, "worker-%" PRIu32, r);
        sg_actor_t a = sg_actor_init(name, hosts[r]);
        sg_actor_set_data(a, w);
        sg_actor_start(a, worker_main, 0, NULL);
    }
    free(hosts);
    hosts = NULL;
    simgrid_run();

    uint32_t stuck = 0;
    const sim_worker *first = NULL;
    for (uint32_t r = 0; r < P; r++) {
        out->messages += c.workers[r].messages;
        if (!c.workers[r].done) {
            if (!first) first = &c.workers[r];
            stuck++;
        }
    }
    if (stuck) {
        const deftsim_schedule *s = scheds[first->cur_sched];
        snprintf(msg, msgcap,
                 "the simulation deadlocked: %u of %u workers unfinished, worker %u in schedule "
                 "%zu step %zu (%s '%s')",
                 stuck, P, first->rank, first->cur_sched, first->cur_step,
                 deftsim_step_kind_name(s->steps[first->cur_step].kind),
                 s->steps[first->cur_step].name);
        goto done;
    }
    rc = 0;
done:
    free(hosts);
    ctx_free(&c);
    return rc;
}

int sim_child_check_platform(const char *platform_path, uint32_t P, sim_check_progress *prog,
                             char *msg, size_t msgcap)
{
    /* Messages bare (no time stamp or source line): on a parse error SimGrid's only output is
     * its message, which the parent quotes. */
    char *argv[] = {"deftsim-check", "--log=root.thres:warning", "--log=root.fmt:%m%n", NULL};
    int argc = (int)(sizeof argv / sizeof argv[0]) - 1;
    simgrid_init(&argc, argv);
    simgrid_load_platform(platform_path);
    size_t nh = sg_host_count();
    if (nh < P) {
        snprintf(msg, msgcap, "%s has %zu host%s, fewer than the %" PRIu32 " workers",
                 platform_path, nh, nh == 1 ? "" : "s", P);
        return -1;
    }
    sg_host_t *all = sg_host_list();
    if (!all) {
        snprintf(msg, msgcap, "out of memory listing the hosts of %s", platform_path);
        return -1;
    }
    qsort(all, nh, sizeof *all, host_cmp);
    xbt_dynar_t links = xbt_dynar_new(sizeof(sg_link_t), NULL);
    int rc = 0;
    for (uint32_t w = 1; w < P && rc == 0; w++) {
        for (int back = 0; back < 2; back++) {
            sg_host_t a = back ? all[w] : all[0], b = back ? all[0] : all[w];
            prog->from = back ? w : 0;
            prog->to = back ? 0 : w;
            snprintf(prog->from_name, sizeof prog->from_name, "%s", sg_host_get_name(a));
            snprintf(prog->to_name, sizeof prog->to_name, "%s", sg_host_get_name(b));
            prog->stage = 1;
            xbt_dynar_reset(links);
            sg_host_get_route(a, b, links);
            /* What SimGrid's network model refuses when a message is sent: no link and no
             * latency between two hosts. */
            if (xbt_dynar_is_empty(links) && !(sg_host_get_route_latency(a, b) > 0)) {
                snprintf(msg, msgcap,
                         "%s has no route from host %s to host %s (workers %" PRIu32 " and %" PRIu32
                         ")",
                         platform_path, sg_host_get_name(a), sg_host_get_name(b), back ? w : 0,
                         back ? 0 : w);
                rc = -1;
                break;
            }
        }
    }
    prog->stage = 2;
    xbt_dynar_free(&links);
    free(all);
    return rc;
}
