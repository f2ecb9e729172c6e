/* sim_child.c - the forked child of a simulation (process isolation: sim.c forks it, SimGrid
 * runs here and a SimGrid failure ends only this process): its entry points, which write the
 * results to the parent's pipe, SimGrid's engine, one actor per worker, the schedule steps, and
 * the check of a user's platform file.
 *
 * Call order in sim/: docs/ARCHITECTURE.md, the sim/ row of its folder table. */
#include <inttypes.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <simgrid/actor.h>
#include <simgrid/barrier.h>
#include <simgrid/comm.h>
#include <simgrid/engine.h>
#include <simgrid/host.h>
#include <simgrid/mailbox.h>

#include "deftsim_util.h"
#include "sim_actors.h"

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

/* ---- steps ------------------------------------------------------------------------------------- */

/* A SENDRECV or P2P round under library = nccl: one NCCL group of its receives and sends
 * (sim_nccl_group: a call's launch and latency, sends that wait for their receivers). Under
 * mpi, below, the sends are eager below the threshold. */
static void run_sendrecv(sim_worker *w, size_t row, const deftsim_step *st)
{
    sim_ctx *c = w->ctx;
    const uint32_t *off = c->in_off[row], *list = c->in_list[row];
    if (c->p->library == DEFTSIM_LIB_NCCL) {
        sim_nccl_group(w, c->p, list + off[w->rank], off[w->rank + 1] - off[w->rank],
                       &st->peer[w->rank], &st->bytes[w->rank], 1);
        return;
    }
    size_t n = 0;
    for (uint32_t i = off[w->rank]; i < off[w->rank + 1]; i++) {
        w->slots[n] = NULL;
        w->comms[n] = sim_irecv(w, list[i], &w->slots[n]);
        n++;
    }
    size_t nrecv = n;
    uint32_t peer = st->peer[w->rank];
    if (peer != DEFTSIM_NO_PEER && peer != w->rank) {
        sg_comm_t s = sim_isend(w, peer, st->bytes[w->rank]);
        if (s) w->comms[n++] = s;
    }
    sim_wait_all(w, w->comms, n);
    for (size_t i = 0; i < nrecv; i++) w->recv += sim_payload(w->slots[i]);
}

/* A P2P round: every receive posted (senders ascending, each sender's messages in slot
 * order), then every send in slot order, then one wait for all of them. In approximate mode,
 * in a run of more than SIM_APPROX_SEQ_MIN like rounds: the run starts from the latest rank's
 * start; after each sampled round every rank takes the latest end, and the rounds up to the
 * next sample pass at the pace of the longest sampled round so far, of any rank. */
static void run_p2p(sim_worker *w, size_t row, const deftsim_step *st)
{
    sim_ctx *c = w->ctx;
    uint32_t pos = c->p2p_run ? c->p2p_run[row].pos : 0, len = c->p2p_run ? c->p2p_run[row].len : 0;
    int approx = c->p->mode == DEFTSIM_SIM_APPROXIMATE && len > SIM_APPROX_SEQ_MIN;
    if (approx && pos == 0) sim_approx_seq_start(w, &w->run);
    if (approx && !sim_approx_seq_round(w, &w->run, pos, len)) return;
    const uint32_t *off = c->in_off[row], *list = c->in_list[row];
    if (c->p->library == DEFTSIM_LIB_NCCL) {
        size_t at = (size_t)w->rank * st->fan;
        sim_nccl_group(w, c->p, list + off[w->rank], off[w->rank + 1] - off[w->rank],
                       &st->peer[at], &st->bytes[at], st->fan);
        if (approx) sim_approx_seq_done(w, &w->run);
        return;
    }
    size_t n = 0;
    for (uint32_t i = off[w->rank]; i < off[w->rank + 1]; i++) {
        w->slots[n] = NULL;
        w->comms[n] = sim_irecv(w, list[i], &w->slots[n]);
        n++;
    }
    size_t nrecv = n;
    for (uint32_t j = 0; j < st->fan; j++) {
        size_t at = (size_t)w->rank * st->fan + j;
        uint32_t peer = st->peer[at];
        if (peer == DEFTSIM_NO_PEER || peer == w->rank) continue;
        sg_comm_t s = sim_isend(w, peer, st->bytes[at]);
        if (s) w->comms[n++] = s;
    }
    sim_wait_all(w, w->comms, n);
    for (size_t i = 0; i < nrecv; i++) w->recv += sim_payload(w->slots[i]);
    if (approx) sim_approx_seq_done(w, &w->run);
}

static void run_step(sim_worker *w, size_t row, const deftsim_step *st)
{
    const deftsim_sim_params *p = w->ctx->p;
    switch (st->kind) {
    case DEFTSIM_STEP_COMPUTE: /* compute = none: no time passes, no event is scheduled (a
                                  given duration, DEFTSIM_STEP_GIVEN, still passes) */
        if (p->compute == DEFTSIM_SIM_COMPUTE_MEASURED || (st->flags & DEFTSIM_STEP_GIVEN))
            sim_sleep(st->seconds[w->rank]);
        return;
    case DEFTSIM_STEP_ALLGATHER: sim_allgather(w, p, st->bytes, &w->ctx->ag[row]); return;
    case DEFTSIM_STEP_ALLREDUCE: sim_allreduce(w, p, st->bytes[0]); return;
    case DEFTSIM_STEP_BCAST: sim_bcast(w, p, st->root, st->bytes[st->root]); return;
    case DEFTSIM_STEP_SENDRECV: run_sendrecv(w, row, st); return;
    case DEFTSIM_STEP_ALLTOALL:
        sim_alltoall(w, p, st->bytes[w->rank], w->ctx->ag[row].equal);
        return;
    case DEFTSIM_STEP_P2P: run_p2p(w, row, st); return;
    }
}

/* Records worker w's step row and runs it. A compute step leaves the byte counters alone: the
 * worker's second actor may be counting a collective's bytes meanwhile. */
static void timed_step(sim_worker *w, size_t row, const deftsim_step *st)
{
    sim_child_out *o = w->ctx->out;
    size_t at = row * w->P + w->rank;
    int comm = st->kind != DEFTSIM_STEP_COMPUTE;
    if (comm) w->sent = w->recv = 0;
    o->start[at] = simgrid_get_clock() - w->t0;
    run_step(w, row, st);
    o->end[at] = simgrid_get_clock() - w->t0;
    o->sent[at] = comm ? w->sent : 0;
    o->recv[at] = comm ? w->recv : 0;
}

/* Waits until the second actor finished every collective posted to it. */
static void async_drain(sim_worker *w)
{
    for (; w->async_outstanding; w->async_outstanding--) sg_sem_acquire(w->async_done);
}

/* The second actor of a worker: runs the posted asynchronous collectives in order; a NULL
 * step ends it. */
static void comm_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    sim_worker *w = sg_actor_self_get_data();
    for (;;) {
        sg_sem_acquire(w->async_jobs);
        const deftsim_step *st = w->async_step[w->async_head];
        size_t row = w->async_row[w->async_head];
        w->async_head = (w->async_head + 1) % w->async_cap;
        if (!st) {
            sim_eager_reap(w);
            return;
        }
        timed_step(w, row, st);
        sg_sem_release(w->async_done);
    }
}

static void async_post(sim_worker *w, size_t row, const deftsim_step *st)
{
    w->async_step[w->async_tail] = st;
    w->async_row[w->async_tail] = row;
    w->async_tail = (w->async_tail + 1) % w->async_cap;
    if (st) w->async_outstanding++;
    sg_sem_release(w->async_jobs);
}

static void worker_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    sim_worker *w = sg_actor_self_get_data();
    sim_ctx *c = w->ctx;
    for (size_t i = 0; i < c->nsched; i++) {
        /* Every worker starts the schedule at the instant the last one finished the previous. */
        sg_barrier_wait(c->barrier);
        w->t0 = simgrid_get_clock();
        const deftsim_schedule *s = c->scheds[i];
        w->cur_sched = i;
        for (size_t k = 0; k < s->nsteps; k++) {
            size_t row = c->step_offset[i] + k;
            const deftsim_step *st = &s->steps[k];
            w->cur_step = k;
            if (st->flags & DEFTSIM_STEP_ASYNC) {
                async_post(w, row, st);
                continue;
            }
            /* Collectives run in order: a synchronous one after every outstanding one. */
            if (st->kind != DEFTSIM_STEP_COMPUTE) async_drain(w);
            timed_step(w, row, st);
        }
        async_drain(w);
    }
    if (c->has_async) async_post(w, 0, NULL);
    w->done = 1;
    sim_eager_reap(w);
}

/* ---- analytic mode ----------------------------------------------------------------------------- */

/* Two lone messages between the hosts of workers 0 and 1, one after the other, timed by
 * SimGrid: a small one and a large one give the latency and the rate of every flow that has
 * its links to itself (sim_analytic.c). */
#define CALIB_SMALL 1.0
#define CALIB_LARGE 1e9
static double calib_end[2];

static void calib_sender(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    sg_mailbox_t mb = sg_mailbox_by_name("calibration");
    sg_mailbox_put(mb, sim_payload_of(0), (long)CALIB_SMALL);
    sg_mailbox_put(mb, sim_payload_of(0), (long)CALIB_LARGE);
}

static void calib_receiver(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    sg_mailbox_t mb = sg_mailbox_by_name("calibration");
    for (int i = 0; i < 2; i++) {
        (void)sg_mailbox_get(mb);
        calib_end[i] = simgrid_get_clock();
    }
}

static int run_analytic(sim_ctx *c, sg_host_t *hosts, char *msg, size_t cap)
{
    sim_flow_model fm = {0, 1};
    if (c->p->P >= 2) {
        sg_actor_start(sg_actor_init("calibration-send", hosts[0]), calib_sender, 0, NULL);
        sg_actor_start(sg_actor_init("calibration-recv", hosts[1]), calib_receiver, 0, NULL);
        simgrid_run();
        double d1 = calib_end[0], d2 = calib_end[1] - calib_end[0];
        if (!(d2 > d1) || !(d1 > 0)) {
            snprintf(msg, cap, "analytic mode: the calibration messages took %g and %g s", d1, d2);
            return -1;
        }
        fm.R = (CALIB_LARGE - CALIB_SMALL) / (d2 - d1);
        fm.L = d1 - CALIB_SMALL / fm.R;
    }
    return sim_analytic_run(c, run_step, &fm, msg, cap);
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
/* Approximate mode: the runs of like rounds, consecutive P2P steps of one schedule with the
 * same name and fan in which every message of a slot carries the same bytes, whoever sends
 * it and in whichever of the rounds (an empty slot, or one to the rank itself, matches any):
 * rounds of one exchange whose pace, a round's time, the samples give (run_p2p). */
static int p2p_like(const deftsim_step *st, uint32_t P, uint64_t *B)
{
    for (uint32_t r = 0; r < P; r++)
        for (uint32_t j = 0; j < st->fan; j++) {
            size_t at = (size_t)r * st->fan + j;
            uint32_t d = st->peer[at];
            if (d == DEFTSIM_NO_PEER || d == r) continue;
            if (B[j] == UINT64_MAX) B[j] = st->bytes[at];
            else if (B[j] != st->bytes[at]) return 0;
        }
    return 1;
}

static int like_rounds(sim_ctx *c)
{
    uint32_t P = c->p->P;
    size_t rows = c->step_offset[c->nsched];
    c->p2p_run = calloc(rows ? rows : 1, sizeof *c->p2p_run);
    if (!c->p2p_run) return -1;
    for (size_t i = 0; i < c->nsched; i++) {
        const deftsim_schedule *s = c->scheds[i];
        size_t k = 0;
        while (k < s->nsteps) {
            const deftsim_step *st = &s->steps[k];
            if (st->kind != DEFTSIM_STEP_P2P || st->flags) {
                k++;
                continue;
            }
            uint64_t *B = malloc((st->fan ? st->fan : 1) * sizeof *B);
            if (!B) return -1;
            for (uint32_t j = 0; j < st->fan; j++) B[j] = UINT64_MAX;
            size_t e = k;
            while (e < s->nsteps) {
                const deftsim_step *q = &s->steps[e];
                if (q->kind != DEFTSIM_STEP_P2P || q->flags || q->fan != st->fan ||
                    strcmp(q->name, st->name) || !p2p_like(q, P, B))
                    break;
                e++;
            }
            free(B);
            if (e == k) e = k + 1; /* a round unlike itself: a run of one */
            for (size_t m = k; m < e; m++) {
                c->p2p_run[c->step_offset[i] + m].pos = (uint32_t)(m - k);
                c->p2p_run[c->step_offset[i] + m].len = (uint32_t)(e - k);
            }
            k = e;
        }
    }
    return 0;
}

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
        if (s->nsteps > c->max_steps) c->max_steps = s->nsteps;
        for (size_t k = 0; k < s->nsteps; k++) {
            size_t row = c->step_offset[i] + k;
            const deftsim_step *st = &s->steps[k];
            if (st->flags & DEFTSIM_STEP_ASYNC) c->has_async = 1;
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
            } else if (st->kind == DEFTSIM_STEP_ALLTOALL) {
                c->ag[row].equal = 1;
                for (uint32_t r = 0; r < P; r++)
                    if (st->bytes[r] != st->bytes[0]) c->ag[row].equal = 0;
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
    if (c->p->mode == DEFTSIM_SIM_APPROXIMATE && like_rounds(c)) goto nomem;
    return 0;
nomem:
    deftsim_nomem_format(msg, cap, "preparing the simulation");
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
    free(c->p2p_run);
    free(c->in_list);
    free(c->in_off);
    if (c->workers)
        for (uint32_t r = 0; r < c->p->P; r++) {
            free(c->workers[r].comms);
            free(c->workers[r].slots);
            free(c->workers[r].async_step);
            free(c->workers[r].async_row);
            if (c->workers[r].async_jobs) sg_sem_destroy(c->workers[r].async_jobs);
            if (c->workers[r].async_done) sg_sem_destroy(c->workers[r].async_done);
        }
    free(c->workers);
    sim_nccl_ctx_free(c);
    if (c->barrier) sg_barrier_destroy(c->barrier);
    if (c->approx_bar) sg_barrier_destroy(c->approx_bar);
}

/* SimGrid's engine with the run's configuration (network model, crosstraffic, stacks) and
 * the platform at platform_path loaded. */
static void engine_load(const deftsim_sim_params *p, const char *platform_path)
{
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
}

/* Runs the simulation: platform_path is the XML to load, or the one engine_load() already
 * loaded (loaded = 1). Returns 0, or -1 with msg filled. A SimGrid failure aborts the process,
 * which the parent reports. */
static int sim_child_run(const deftsim_sim_params *p, const char *platform_path, int loaded,
                         const deftsim_schedule *const *scheds, size_t nsched,
                         const size_t *step_offset, sim_child_out *out, char *msg, size_t msgcap)
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

    if (!loaded) engine_load(p, platform_path);

    hosts = calloc(P, sizeof *hosts);
    c.workers = calloc(P, sizeof *c.workers);
    if (!hosts || !c.workers) {
        deftsim_nomem_format(msg, msgcap, "creating %u workers", P);
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
            char name[64];
            deftsim_sim_host_name(p, r, name, sizeof name);
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
            deftsim_nomem_format(msg, msgcap, "creating %u workers", P);
            goto done;
        }
        if (p->mode == DEFTSIM_SIM_ANALYTIC) continue;
        char name[32];
        snprintf(name, sizeof name, "worker-%" PRIu32, r);
        sg_actor_t a = sg_actor_init(name, hosts[r]);
        sg_actor_set_data(a, w);
        w->main_actor = a;
        sg_actor_start(a, worker_main, 0, NULL);
        if (!c.has_async) continue;
        /* Room for every step of a schedule and the final stop. */
        w->async_cap = c.max_steps + 2;
        w->async_step = calloc(w->async_cap, sizeof *w->async_step);
        w->async_row = calloc(w->async_cap, sizeof *w->async_row);
        if (!w->async_step || !w->async_row) {
            deftsim_nomem_format(msg, msgcap, "creating %u workers", P);
            goto done;
        }
        w->async_jobs = sg_sem_init(0);
        w->async_done = sg_sem_init(0);
        snprintf(name, sizeof name, "comm-%" PRIu32, r);
        sg_actor_t b = sg_actor_init(name, hosts[r]);
        sg_actor_set_data(b, w);
        sg_actor_start(b, comm_main, 0, NULL);
    }
    if (p->mode == DEFTSIM_SIM_ANALYTIC) {
        rc = run_analytic(&c, hosts, msg, msgcap);
        goto done;
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

/* The check of sim_child_check_main: 0, or -1 with msg filled. */
static int sim_child_check_platform(const char *platform_path, uint32_t P,
                                    sim_check_progress *prog, char *msg, size_t msgcap)
{
    /* Messages bare (no time stamp or source line): on a parse error SimGrid's only output is
     * its message, which the parent quotes. */
    char *argv[] = {"deftsim-check", "--log=root.thres:warning", "--log=root.fmt:%m%n", NULL};
    int argc = (int)(sizeof argv / sizeof argv[0]) - 1;
    simgrid_init(&argc, argv);
    simgrid_load_platform(platform_path);
    /* A run with no actor seals the platform: zones with Floyd or Dijkstra routing compute
     * their routes only then (before, a route through another zone is "not found"). */
    simgrid_run();
    size_t nh = sg_host_count();
    if (nh < P) {
        snprintf(msg, msgcap, "%s has %zu host%s, fewer than the %" PRIu32 " workers",
                 platform_path, nh, nh == 1 ? "" : "s", P);
        return -1;
    }
    sg_host_t *all = sg_host_list();
    if (!all) {
        deftsim_nomem_format(msg, msgcap, "listing the hosts of %s", platform_path);
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

/* ---- entry points after fork() ----------------------------------------------------------------- */

/* A child whose parent is killed (SIGKILL, the OOM killer) would simulate on for nobody:
 * its results go to a pipe only the parent reads. On Linux it gets SIGKILL when the parent
 * dies (and leaves at once if that already happened). The signal follows the thread that
 * forked, which waits for the child: it comes only when the process dies. */
static void die_with_parent(pid_t parent)
{
#ifdef __linux__
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
#else
    (void)parent;
#endif
}

/* The simulation of a child (or of a batch's grandchild: loaded = 1, the platform already in
 * the engine), its results written to out_fd, its messages to err_fd; never returns. */
static _Noreturn void child_body(int out_fd, int err_fd, const deftsim_sim_params *p,
                                 const char *platform_path, int loaded,
                                 const deftsim_schedule *const *scheds, size_t nsched,
                                 const size_t *offs)
{
    /* SimGrid writes its messages to stderr (and nothing should reach the caller's stdout):
     * both go to the parent, which shows them only if the simulation fails. */
    dup2(err_fd, 2);
    dup2(err_fd, 1);
    size_t cells = offs[nsched] * p->P;
    sim_child_out o;
    memset(&o, 0, sizeof o);
    o.start = calloc(cells ? cells : 1, sizeof(double));
    o.end = calloc(cells ? cells : 1, sizeof(double));
    o.sent = calloc(cells ? cells : 1, sizeof(uint64_t));
    o.recv = calloc(cells ? cells : 1, sizeof(uint64_t));
    char msg[SIM_MSG_MAX] = "";
    int rc;
    if (!o.start || !o.end || !o.sent || !o.recv) {
        deftsim_nomem_format(msg, sizeof msg, "%zu result cells", cells);
        rc = -1;
    } else {
        rc = sim_child_run(p, platform_path, loaded, scheds, nsched, offs, &o, msg, sizeof msg);
    }
    sim_child_header h = {SIM_MAGIC, rc, (uint32_t)strlen(msg), 0, o.messages};
    int bad = deftsim_write_all(out_fd, &h, sizeof h) || deftsim_write_all(out_fd, msg, h.msglen);
    if (!bad && rc == 0)
        bad = deftsim_write_all(out_fd, o.start, cells * sizeof(double)) ||
              deftsim_write_all(out_fd, o.end, cells * sizeof(double)) ||
              deftsim_write_all(out_fd, o.sent, cells * sizeof(uint64_t)) ||
              deftsim_write_all(out_fd, o.recv, cells * sizeof(uint64_t));
    /* _exit: no atexit handlers, no stdio flush of the parent's buffers, no SimGrid teardown. */
    _exit(bad ? 3 : 0);
}

void sim_child_main(pid_t parent, int out_fd, int err_fd, const deftsim_sim_params *p,
                    const char *platform_path, const deftsim_schedule *const *scheds,
                    size_t nsched, const size_t *offs)
{
    die_with_parent(parent);
    child_body(out_fd, err_fd, p, platform_path, 0, scheds, nsched, offs);
}

void sim_child_batch_main(pid_t parent, int status_fd, const int *out_fds, const int *err_fds,
                          const deftsim_sim_params *p, const char *platform_path,
                          const sim_batch_job *jobs, size_t njobs)
{
    die_with_parent(parent);
    /* Ctrl-C reaches the whole process group, and SimGrid's own SIGINT handler (installed by
     * the load below and inherited by every job's process) logs and exits inside the handler,
     * which can hang a process for good; a job's process that took the signal before it set
     * its parent-death signal would then outlive the caller. The caller ends this process with
     * SIGKILL when it stops, and the jobs get theirs then (die_with_parent), so none of them
     * takes SIGINT or SIGTERM: blocked here, and so from the birth of every job. */
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    sigprocmask(SIG_BLOCK, &stop, NULL);
    /* What SimGrid says while loading goes with the first job's messages. */
    dup2(err_fds[0], 2);
    dup2(err_fds[0], 1);
    engine_load(p, platform_path);
    /* A run with no actor seals the platform (Floyd computes its routes then), once for all. */
    simgrid_run();
    pid_t self = getpid();
    size_t at_once = p->procs > 1 ? p->procs : 1, started = 0;
    pid_t pids[SIM_BATCH_MAX];
    for (size_t i = 0; i < njobs; i++) {
        /* Up to at_once jobs simulate side by side; their statuses go out in job order (the
         * parent reads the jobs' pipes in that order: a later job that finished first waits
         * for it in its write). */
        for (; started < njobs && started < i + at_once; started++) {
            pid_t pid = pids[started] = fork();
            if (pid == 0) {
                die_with_parent(self);
                child_body(out_fds[started], err_fds[started], p, platform_path, 1,
                           jobs[started].scheds, jobs[started].nsched, jobs[started].offs);
            }
            /* The job's pipes close with its process (the first job's also here: the batch's
             * own stdout and stderr go nowhere from now on). */
            if (started == 0) {
                int null = open("/dev/null", O_WRONLY);
                if (null >= 0) {
                    dup2(null, 1);
                    dup2(null, 2);
                    close(null);
                }
            }
            close(out_fds[started]);
            close(err_fds[started]);
        }
        sim_batch_status bs;
        memset(&bs, 0, sizeof bs); /* the padding too: the whole struct goes down the pipe */
        bs.status = -1;
        struct rusage ru;
        memset(&ru, 0, sizeof ru);
        if (pids[i] > 0)
            while (wait4(pids[i], &bs.status, 0, &ru) < 0 && errno == EINTR) {
            }
        bs.maxrss_kib = ru.ru_maxrss;
        if (deftsim_write_all(status_fd, &bs, sizeof bs) || pids[i] < 0) _exit(3);
    }
    _exit(0);
}

void sim_child_check_main(pid_t parent, int out_fd, int err_fd, const char *platform_path,
                          uint32_t P, sim_check_progress *prog)
{
    die_with_parent(parent);
    dup2(err_fd, 2);
    dup2(err_fd, 1);
    char msg[SIM_MSG_MAX] = "";
    int32_t rc = sim_child_check_platform(platform_path, P, prog, msg, sizeof msg);
    uint32_t len = (uint32_t)strlen(msg);
    int bad = deftsim_write_all(out_fd, &rc, sizeof rc) ||
              deftsim_write_all(out_fd, &len, sizeof len) || deftsim_write_all(out_fd, msg, len);
    _exit(bad ? 3 : 0);
}
