/* sim_nccl.c - NCCL's collective algorithms (library = nccl), as each rank runs them, over the
 * point-to-point layer (sim_p2p.c). Sizes are bytes. docs/NETWORK.md, "NCCL's algorithms",
 * describes each pattern, its source in NCCL and its validation.
 *
 * Every algorithm here is a sequence of rounds: in a round a rank posts all its receives,
 * then all its sends (one per channel, or per tree child), and waits for all of them, as a
 * NCCL kernel moves one step of every channel at once. No send is eager: NCCL sends into a
 * buffer slot its receiver has granted, so a transfer starts when both sides reach it
 * (sim_isend_sync). Ranks wait only for their own messages: a round is no barrier.
 *
 *   ring allreduce   per channel, loops of P chunks of up to NCCL_BUFFSIZE / 2 bytes each
 *                    (ALLREDUCE_CHUNKSTEPS = 4 steps of NCCL_BUFFSIZE / 8); 2 (P - 1) steps a
 *                    loop; in step s the rank at ring position q sends chunk q - 1 - s and
 *                    receives chunk q - 2 - s (mod P); the last loop's chunk is the rest over
 *                    P, rounded up to 16 bytes, as NCCL's
 *   ring allgather   per channel, loops of one chunk (up to NCCL_BUFFSIZE / 2) of every
 *                    rank's block; P - 1 steps a loop; in step s position q forwards the
 *                    block of position q - s
 *   ring broadcast   per channel a chain from the root along the ring, chunks of
 *                    NCCL_BUFFSIZE / 8: in round t the rank i hops after the root sends chunk
 *                    t - i and receives chunk t - i + 1
 *   tree allreduce   2 C tree channels (channel c and c + C share node c's chain, the first
 *                    on the double binary tree's first tree, the second on its second), each
 *                    with 1 / (2 C) of the data, chunks of NCCL_BUFFSIZE / 8; NCCL's split
 *                    tree (its Simple protocol's): the reduce up and the broadcast down at
 *                    once, a chunk going down as soon as the root has reduced it
 *   hierarchical     the ring reduce-scatter among a node's G GPUs, the ring allreduce of
 *                    each GPU's share among the GPUs of the same local rank (one per node),
 *                    the ring allgather in the node: three NCCL calls, one after another
 *   grouped p2p      a send to and a receive from every other rank (ncclGroupStart/End) in
 *                    NCCL's p2p order, batches of 8 rounds over the p2p channels, each
 *                    channel's batches in turn (sim_nccl_p2p_schedule): alltoall,
 *                    allgatherv = p2p
 *
 * Who talks to whom (rings' orders, trees' links, the p2p schedule): sim_nccl_shape.c. Call
 * order in sim/: docs/ARCHITECTURE.md, the sim/ row of its folder table. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include <simgrid/comm.h>

#include "sim_actors.h"

#define MAXC DEFTSIM_NCCL_CHANNELS_MAX

static uint32_t gpn(const deftsim_sim_params *p) { return p->gpus_per_node ? p->gpus_per_node : 1; }

/* ---- rounds ------------------------------------------------------------------------------------ */

typedef struct {
    sim_worker *w;
    const sim_nccl_call *call; /* the protocol's costs */
    sg_comm_t *comms;
    void **slots;
    size_t n, nrecv, cap;
    uint32_t nsend, ncross; /* this round's sends, and those that leave the node */
    uint32_t rcross;        /* this round's receives from another node */
    int p2p;                /* grouped sends: each held to its channels' limits (p2p_eff) */
    uint32_t nkind[2];      /* grouped sends: this rank's sends of the round inside the node
                               and across it */
} round_t;

static void round_init(round_t *rd, sim_worker *w, const sim_nccl_call *call, size_t cap)
{
    rd->w = w;
    rd->call = call;
    rd->nsend = rd->ncross = rd->rcross = 0;
    rd->p2p = 0;
    rd->nkind[0] = rd->nkind[1] = 0;
    rd->cap = cap ? cap : 1;
    rd->n = rd->nrecv = 0;
    rd->comms = malloc(rd->cap * sizeof *rd->comms);
    rd->slots = malloc(rd->cap * sizeof *rd->slots);
    if (!rd->comms || !rd->slots) abort(); /* the child's memory: it reports the signal */
}

static void round_free(round_t *rd)
{
    free(rd->comms);
    free(rd->slots);
}

/* Whether peer sits on another node than this rank (ranks fill the nodes in order). */
static int crosses_nodes(const round_t *rd, uint32_t peer)
{
    uint32_t G = gpn(rd->w->ctx->p);
    return peer / G != sim_rank(rd->w) / G;
}

/* Receives are posted before sends, in the order both sides agree on (channel, then child). */
static void round_recv(round_t *rd, uint32_t src)
{
    rd->slots[rd->nrecv] = NULL;
    rd->comms[rd->n++] = sim_irecv(rd->w, src, &rd->slots[rd->nrecv]);
    rd->nrecv++;
    rd->rcross += crosses_nodes(rd, src);
}

/* A grouped send's achieved fraction of its link, at most eff: NCCL moves a transfer to one
 * peer over the channels it gives it (sim_nccl_p2p_parts), each of them at most
 * nccl_p2p_channel_bandwidth within the node, nccl_p2p_net_channel_bandwidth across it. The
 * rank's n sends of the same kind in the round share its link (its NVLink port, or its share
 * of its NIC): each is held to n times its channels' limit over that link, as for n like
 * sends. */
static double p2p_eff(const round_t *rd, int cross, uint64_t bytes, double eff)
{
    const deftsim_sim_params *p = rd->w->ctx->p;
    double limit = cross ? p->nccl_p2p_net_channel_bandwidth : p->nccl_p2p_channel_bandwidth;
    if (!rd->p2p || limit <= 0 || p->nccl_model != DEFTSIM_NCCL_MODEL_TUNED) return eff;
    uint32_t G = gpn(p);
    double link = p->intra_bandwidth;
    if (cross) {
        uint32_t nics = sim_node_nics(p);
        link = sim_nic_bandwidth(p) / ((G + nics - 1) / nics);
    }
    uint32_t n = rd->nkind[cross] ? rd->nkind[cross] : 1;
    double cap = link > 0 ? n * sim_nccl_p2p_parts(p, bytes) * limit / link : eff;
    return cap < eff ? cap : eff;
}

/* A send of `bytes` of data: on the wire as the call's protocol moves them, at the achieved
 * fraction of the link it takes (the node's, or the network's). */
static void round_send(round_t *rd, uint32_t dst, uint64_t bytes)
{
    const sim_nccl_call *k = rd->call;
    int cross = crosses_nodes(rd, dst);
    double eff = p2p_eff(rd, cross, bytes, cross ? k->eff_net : k->eff_intra);
    uint64_t wire = bytes;
    if (k->wire != 1 || eff != 1) wire = (uint64_t)ceil((double)bytes * k->wire / eff);
    rd->nsend++;
    rd->ncross += (uint32_t)cross;
    rd->comms[rd->n++] = sim_isend_sync_wire(rd->w, dst, bytes, wire);
}

/* Whether approximate mode may run m like flows as one of m times the bytes (folded channels,
 * sampled waves): in the fluid model they end together, unless a flow's rate is held by
 * something other than its links' shares. Under SimGrid's SMPI model a flow's bandwidth factor
 * depends on its size; under every model the TCP window bound (network/TCP-gamma, 4 MiB)
 * caps a flow at 4 MiB / (2 x route latency x the model's latency factor), which one flow of
 * m times the bytes would hit where m flows do not. So: CM02 or LV08 on a generated platform
 * whose longest route (at most 8 links on a flat network, taken as 64 on the others) cannot be
 * capped below its fastest link's bandwidth. On dgx-h100 (1 ns links) the cap is 2.6e14 B/s;
 * with LV08's 13.01 on 1 us links 2.0e10 B/s, against the default 3.125e9. */
static int fold_is_exact(const deftsim_sim_params *p)
{
    if (p->topology == DEFTSIM_TOPO_FILE || (p->model != DEFTSIM_NET_CM02 && p->model != DEFTSIM_NET_LV08))
        return 0;
    double lat = p->latency > p->intra_latency ? p->latency : p->intra_latency;
    double bw = p->bandwidth;
    if (p->intra_bandwidth > bw) bw = p->intra_bandwidth;
    if (p->nic_bandwidth > bw) bw = p->nic_bandwidth;
    double route = (p->topology == DEFTSIM_TOPO_FLAT ? 8 : 64) * lat *
                   (p->model == DEFTSIM_NET_LV08 ? 13.01 : 1);
    return route <= 0 || 4194304.0 / (2 * route) >= bw;
}

/* Approximate mode's fold of C channels on full nodes of G GPUs: channels c, c + G, ... have
 * the same links in NCCL's rings and trees (ring_fold, tree_fold), so they may run as one, C / G
 * to a set, where that is exact (fold_is_exact). 1: no fold. */
static uint32_t like_channels(const deftsim_sim_params *p, uint32_t C)
{
    uint32_t G = gpn(p);
    if (p->mode != DEFTSIM_SIM_APPROXIMATE || p->P % G || C <= G || C % G || !fold_is_exact(p)) return 1;
    return C / G;
}

/* Approximate mode: one send that stands for m like sends of `each` bytes between the same
 * ranks (folded trees, sampled waves): their payload, and on the wire their bytes, each as the
 * protocol moves it, and their envelopes. */
static void round_send_as(round_t *rd, uint32_t dst, double each, double m)
{
    const sim_nccl_call *k = rd->call;
    const deftsim_sim_params *p = rd->w->ctx->p;
    int cross = crosses_nodes(rd, dst);
    double eff = p2p_eff(rd, cross, (uint64_t)llround(each), cross ? k->eff_net : k->eff_intra);
    double wire1 = k->wire != 1 || eff != 1 ? ceil(each * k->wire / eff) : each;
    double env = (double)p->envelope_bytes;
    rd->nsend++;
    rd->ncross += (uint32_t)cross;
    rd->comms[rd->n++] = sim_isend_sync_wire(rd->w, dst, (uint64_t)llround(m * each),
                                             (uint64_t)llround(m * (wire1 + env) - env));
}

/* The receives must all be posted before the first send: slots are indexed by receive. */
/* Then the step's latency: the protocol's per-step cost, the network's share of it as this
 * rank's sends of the round cross nodes. A rank that only receives pays the network's figure
 * if a receive crossed nodes, else the node's: a hop's latency lies on the chunk's path, so
 * a one-chunk call climbing a tree pays each level's (docs/NETWORK.md). */
static void round_wait(round_t *rd)
{
    sim_wait_all(rd->w, rd->comms, rd->n);
    for (size_t i = 0; i < rd->nrecv; i++) rd->w->recv += sim_payload(rd->slots[i]);
    const sim_nccl_call *k = rd->call;
    if (rd->n && (k->lat_intra > 0 || k->lat_net > 0)) {
        double f = k->net_share >= 0 ? k->net_share
                   : rd->nsend       ? (double)rd->ncross / rd->nsend
                   : rd->rcross      ? 1
                                     : 0;
        sim_sleep(k->lat_intra + (k->lat_net - k->lat_intra) * f);
    }
    rd->n = rd->nrecv = 0;
    rd->nsend = rd->ncross = rd->rcross = 0;
}

/* ---- rings ------------------------------------------------------------------------------------- */

/* A ring collective of one rank over a ring of n members, per channel. */
typedef enum { RING_VECTOR, RING_BLOCKS } ring_kind;
typedef struct {
    uint32_t n, C;
    uint32_t pos[MAXC], next[MAXC], prev[MAXC];
    uint64_t count[MAXC]; /* elements: the channel's part of the vector, or of every block */
    uint64_t e;           /* bytes an element */
    uint64_t chunk;       /* elements of a chunk */
    ring_kind kind;
    uint32_t s0, s1;      /* RING_VECTOR: steps [s0, s1) of the 2 (n - 1) of an allreduce */
    int approx_ok;        /* every rank of the collective runs as many loops of this ring */
    int foldable;         /* a ring over all P ranks in NCCL's order (ring_fold) */
    uint32_t fold;        /* channels c, c + C / fold, ... run as one (ring_run sets it) */
    const sim_nccl_call *call;
} ring_plan;

static uint64_t divup(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

static uint64_t vec_loops(const ring_plan *rp, uint32_t c)
{
    uint64_t per = (uint64_t)rp->n * rp->chunk;
    return rp->count[c] ? divup(rp->count[c], per) : 0;
}

static uint64_t ring_loops(const ring_plan *rp, uint32_t c)
{
    if (rp->kind == RING_BLOCKS) return rp->count[c] ? divup(rp->count[c], rp->chunk) : 0;
    return vec_loops(rp, c);
}

/* Elements of chunk k (of n) in loop l of channel c, NCCL's split: full loops carry n chunks
 * of `chunk` elements; the last one the rest over n, rounded up to 16 bytes, the last chunks
 * shorter or empty. */
static uint64_t vec_chunk(const ring_plan *rp, uint32_t c, uint64_t l, uint32_t k)
{
    uint64_t per = (uint64_t)rp->n * rp->chunk, off = l * per, rem = rp->count[c] - off;
    uint64_t cc = rp->chunk;
    if (rem < per) {
        uint64_t align = rp->e <= 16 && 16 % rp->e == 0 ? 16 / rp->e : 1;
        cc = divup(divup(rem, rp->n), align) * align;
    }
    uint64_t start = (uint64_t)k * cc;
    if (start >= rem) return 0;
    return rem - start < cc ? rem - start : cc;
}

uint32_t sim_nccl_ring_chunk(uint32_t n, uint32_t q, uint32_t s)
{
    return (uint32_t)(((uint64_t)q + 2u * n - 1u - s % (2u * n)) % n);
}

static uint64_t step_bytes(const ring_plan *rp, uint32_t c, uint64_t l, uint32_t s)
{
    uint32_t n = rp->n, q = rp->pos[c];
    if (rp->kind == RING_BLOCKS) {
        uint64_t left = rp->count[c] - l * rp->chunk;
        return (left < rp->chunk ? left : rp->chunk) * rp->e;
    }
    return vec_chunk(rp, c, l, sim_nccl_ring_chunk(n, q, s)) * rp->e;
}

/* One step of every channel still in loop l; folded (rp->fold > 1), channel c < C / fold
 * carries its own and its like channels' bytes, with their envelopes. */
static void ring_step(round_t *rd, const ring_plan *rp, uint64_t l, uint32_t s)
{
    uint32_t f = rp->fold, Cf = rp->C / f;
    for (uint32_t c = 0; c < Cf; c++)
        if (l < ring_loops(rp, c)) round_recv(rd, rp->prev[c]);
    for (uint32_t c = 0; c < Cf; c++) {
        if (l >= ring_loops(rp, c)) continue;
        if (f == 1) {
            round_send(rd, rp->next[c], step_bytes(rp, c, l, s));
            continue;
        }
        uint64_t b = 0;
        for (uint32_t i = 0; i < f; i++) b += step_bytes(rp, c + i * Cf, l, s);
        round_send_as(rd, rp->next[c], (double)b / f, f);
    }
    round_wait(rd);
}

/* Approximate mode's fold of NCCL's rings: channel c's ring orders each node's GPUs from GPU
 * (c + 1) mod G, so on full nodes the rings of channels c and c + G have the same links (with
 * one GPU a node every channel's ring is the same). Like channels that run as many loops run
 * as one, exact in the fluid model as the folded trees are (tree_fold). Decided from the
 * call's sizes alone, so every rank folds alike. */
static uint32_t ring_fold(const deftsim_sim_params *p, const ring_plan *rp)
{
    uint32_t f = rp->foldable ? like_channels(p, rp->C) : 1, G = rp->C / f;
    for (uint32_t c = G; c < rp->C; c++)
        if (ring_loops(rp, c) != ring_loops(rp, c % G)) return 1;
    return f;
}

static void ring_run(sim_worker *w, const deftsim_sim_params *p, const ring_plan *rp)
{
    if (rp->n < 2) return;
    ring_plan folded = *rp;
    folded.fold = ring_fold(p, rp);
    rp = &folded;
    uint32_t s0 = rp->kind == RING_BLOCKS ? 0 : rp->s0;
    uint32_t s1 = rp->kind == RING_BLOCKS ? rp->n - 1 : rp->s1;
    uint64_t loops = 0;
    int same = 1;
    /* A channel without data (a vector shorter than the channels) takes no part in any loop,
     * so every loop still has the same channels at work: only those with data must agree. */
    for (uint32_t c = 0; c < rp->C; c++) {
        uint64_t lc = ring_loops(rp, c);
        if (!lc) continue;
        if (loops && lc != loops) same = 0;
        if (lc > loops) loops = lc;
    }
    round_t rd;
    round_init(&rd, w, rp->call, 2 * (size_t)rp->C);
    uint32_t steps = s1 - s0;
    /* Approximate mode (every channel with data the same number of loops, so that every rank
     * agrees as often): each loop runs SIM_APPROX_RING_STEPS steps, the rest at the longest sampled step
     * of all ranks, from the latest end (a ring moves at the pace of its slowest hop). */
    int approx = p->mode == DEFTSIM_SIM_APPROXIMATE && same && rp->approx_ok &&
                 steps > SIM_APPROX_RING_STEPS;
    /* A ring that follows a broadcast (or uneven compute) starts skewed: a rank waits for
     * late neighbours, and a sampled step that includes that wait is no step of the ring's
     * pace. In the exact ring every rank's last step depends, through the ring, on the latest
     * starter, so the ring ends as if all had started with it: approximate mode starts the
     * ring from the latest start, then samples steady steps. */
    if (approx) {
        double start, unused;
        sim_approx_agree(w, sim_now(), 0, &start, &unused);
        sim_sleep(start - sim_now());
    }
    for (uint64_t l = 0; l < loops; l++) {
        double last = 0;
        for (uint32_t s = s0; s < s1; s++) {
            if (approx && s - s0 == SIM_APPROX_RING_STEPS) break;
            double t0 = sim_now();
            ring_step(&rd, rp, l, s);
            last = sim_now() - t0;
        }
        if (approx) {
            double end, step;
            sim_approx_agree(w, sim_now(), last, &end, &step);
            sim_sleep(end + (double)(steps - SIM_APPROX_RING_STEPS) * step - sim_now());
        }
    }
    round_free(&rd);
}

/* Splits `count` elements over C channels, the first count mod C one larger. */
static void split(uint64_t count, uint32_t C, uint64_t *out)
{
    for (uint32_t c = 0; c < C; c++) out[c] = count / C + (c < count % C);
}

/* Element size: the step's elem_bytes when it divides the bytes, else bytes. */
static uint64_t elem_of(const deftsim_sim_params *p, uint64_t bytes)
{
    return p->elem_bytes && bytes % p->elem_bytes == 0 ? p->elem_bytes : 1;
}

static uint64_t step_size(const deftsim_sim_params *p)
{
    uint64_t b = p->nccl_buffsize ? p->nccl_buffsize : DEFTSIM_NCCL_BUFFSIZE_DEFAULT;
    return b / 8 ? b / 8 : 1;
}

/* The ring over all P ranks in NCCL's order. */
static void plan_global(ring_plan *rp, const deftsim_sim_params *p, const sim_nccl_call *k,
                        uint32_t r, uint64_t e)
{
    uint32_t P = p->P, G = gpn(p);
    rp->n = P;
    rp->approx_ok = 1;
    rp->foldable = 1;
    rp->call = k;
    rp->C = k->channels < MAXC ? k->channels : MAXC;
    rp->e = e;
    rp->chunk = 4 * step_size(p) / e ? 4 * step_size(p) / e : 1;
    for (uint32_t c = 0; c < rp->C; c++) {
        uint32_t q = sim_nccl_ring_pos(P, G, c, r);
        rp->pos[c] = q;
        rp->next[c] = sim_nccl_ring_rank(P, G, c, (q + 1) % P);
        rp->prev[c] = sim_nccl_ring_rank(P, G, c, (q + P - 1) % P);
    }
}

static void ring_allreduce(sim_worker *w, const deftsim_sim_params *p, const sim_nccl_call *k,
                           uint64_t bytes)
{
    uint64_t e = elem_of(p, bytes);
    ring_plan rp;
    plan_global(&rp, p, k, sim_rank(w), e);
    rp.kind = RING_VECTOR;
    rp.s0 = 0;
    rp.s1 = 2 * (rp.n - 1);
    split(bytes / e, rp.C, rp.count);
    ring_run(w, p, &rp);
}

/* Every block `bytes` long (padded or equal). */
static void ring_allgather(sim_worker *w, const deftsim_sim_params *p, const sim_nccl_call *k,
                           uint64_t bytes)
{
    uint64_t e = elem_of(p, bytes);
    ring_plan rp;
    plan_global(&rp, p, k, sim_rank(w), e);
    rp.kind = RING_BLOCKS;
    split(bytes / e, rp.C, rp.count);
    ring_run(w, p, &rp);
}

/* ---- hierarchical ------------------------------------------------------------------------------- */

static void hierarchical(sim_worker *w, const deftsim_sim_params *p, const sim_nccl_call *k,
                         uint64_t bytes)
{
    uint32_t P = p->P, G = gpn(p), r = sim_rank(w), N = P / G, n = r / G, l = r % G;
    uint64_t e = elem_of(p, bytes);
    /* Inside the node: NCCL's ring order over the node's G GPUs. */
    ring_plan in;
    in.n = G;
    in.approx_ok = 1;
    in.foldable = 0;
    in.call = k;
    in.C = k->channels < MAXC ? k->channels : MAXC;
    in.e = e;
    in.chunk = 4 * step_size(p) / e ? 4 * step_size(p) / e : 1;
    in.kind = RING_VECTOR;
    split(bytes / e, in.C, in.count);
    for (uint32_t c = 0; c < in.C; c++) {
        uint32_t q = sim_nccl_ring_pos(G, G, c, l);
        in.pos[c] = q;
        in.next[c] = n * G + sim_nccl_ring_rank(G, G, c, (q + 1) % G);
        in.prev[c] = n * G + sim_nccl_ring_rank(G, G, c, (q + G - 1) % G);
    }
    /* Across nodes: the ranks of local rank l, one a node, a ring of N. Its vector: the chunks
     * this rank owns after the reduce-scatter (chunk q of every loop, per channel). */
    ring_plan out = in;
    out.n = N;
    for (uint32_t c = 0; c < in.C; c++) {
        uint64_t own = 0;
        for (uint64_t k = 0; k < vec_loops(&in, c); k++) own += vec_chunk(&in, c, k, in.pos[c]);
        out.count[c] = own;
        out.pos[c] = n;
        out.next[c] = ((n + 1) % N) * G + l;
        out.prev[c] = ((n + N - 1) % N) * G + l;
    }
    /* The rings of the local ranks own chunks that may differ by an alignment: approximate
     * mode only when they all run as many loops (every rank agrees as often). */
    for (uint32_t c = 0; c < in.C; c++)
        for (uint32_t q = 0; q < G; q++) {
            uint64_t own = 0;
            for (uint64_t k = 0; k < vec_loops(&in, c); k++) own += vec_chunk(&in, c, k, q);
            ring_plan t = out;
            t.count[c] = own;
            if (ring_loops(&t, c) != ring_loops(&out, 0)) out.approx_ok = 0;
        }
    in.s0 = 0;
    in.s1 = G - 1; /* reduce-scatter */
    if (G > 1) ring_run(w, p, &in);
    out.s0 = 0;
    out.s1 = 2 * (N - 1);
    if (N > 1) ring_run(w, p, &out);
    in.s0 = G - 1;
    in.s1 = 2 * (G - 1); /* allgather */
    if (G > 1) ring_run(w, p, &in);
}

/* ---- tree --------------------------------------------------------------------------------------- */

typedef struct {
    sim_nccl_links l;
    uint32_t h, d, hr;      /* height, depth, the root's height */
    uint32_t hc[3];         /* the children's heights */
    uint64_t bytes, chunks;
} tree_ch;

static uint64_t tree_chunk_bytes(const tree_ch *t, uint64_t csz, uint64_t k)
{
    uint64_t left = t->bytes - k * csz;
    return left < csz ? left : csz;
}

/* Approximate mode's fold of NCCL's trees: tree tc of a call of C channels runs its chain
 * inside each node from GPU (tc mod C) mod G, under the nodes' tree tc / C, so on nodes of G
 * GPUs each the trees of channels c and c + G have the same links. Folded, each set of like
 * trees runs as one that carries their bytes in chunks as many times as large: in the network's
 * fluid model f like flows on one path, started together, end when one flow of f times the bytes
 * does, while every flow of the call on a link is folded alike (docs/NETWORK.md, "Approximate
 * mode"). Returns f (1: nothing folds). */
static uint32_t tree_fold(const deftsim_sim_params *p, const sim_nccl_tree_shape *ts, uint32_t T)
{
    return ts->rails || T != 2 * ts->C ? 1 : like_channels(p, ts->C);
}

/* A chunk of `bytes` of a tree that stands for f folded ones (tree_fold). */
static void tree_send(round_t *rd, uint32_t dst, uint64_t bytes, uint32_t f)
{
    if (f == 1) round_send(rd, dst, bytes);
    else round_send_as(rd, dst, (double)bytes / f, f);
}

/* T trees of one shape reduce and broadcast this rank's `bytes`, split over them, in chunks of
 * `chunk` bytes (0: NCCL's step size; at most max_chunks a tree: larger chunks beyond). */
static void tree_run(sim_worker *w, const deftsim_sim_params *p, const sim_nccl_call *k,
                     const sim_nccl_tree_shape *ts, uint32_t T, uint64_t bytes, uint64_t max_chunks,
                     uint64_t chunk)
{
    uint32_t r = sim_rank(w);
    uint64_t e = elem_of(p, bytes), csz = (chunk ? chunk : step_size(p)) / e * e;
    if (!csz) csz = e;
    uint64_t part[2 * MAXC];
    split(bytes / e, T, part);
    for (uint32_t c = 0; c < T; c++)
        if (divup(part[c] * e, csz) > max_chunks) csz = divup(part[c], max_chunks) * e;
    /* Folded (tree_fold): tree j of the Tf run stands for trees tc = (j / G) C + j mod G + i G,
     * i < f, and carries their parts. */
    uint32_t f = tree_fold(p, ts, T), Tf = T / f;
    csz *= f;
    tree_ch *t = malloc(Tf * sizeof *t);
    if (!t) abort();
    const uint32_t *heights = sim_nccl_tree_heights(w->ctx, ts, T);
    uint64_t rounds = 0;
    for (uint32_t c = 0; c < Tf; c++) {
        uint32_t tc = f > 1 ? (c / ts->G) * ts->C + c % ts->G : c;
        const uint32_t *H = heights + (size_t)tc * ts->P;
        sim_nccl_tree_links(ts, tc, r, &t[c].l);
        t[c].h = H[r];
        t[c].d = sim_nccl_tree_depth(ts, tc, r);
        for (uint32_t k = 0; k < t[c].l.ndown; k++) t[c].hc[k] = H[t[c].l.down[k]];
        /* the root's height: the broadcast of chunk k leaves the root as soon as it reduced it */
        uint32_t root = r;
        sim_nccl_links l = t[c].l;
        while (l.up >= 0) {
            root = (uint32_t)l.up;
            sim_nccl_tree_links(ts, tc, root, &l);
        }
        t[c].hr = H[root];
        t[c].bytes = 0;
        for (uint32_t i = 0; i < f; i++) t[c].bytes += part[tc + i * ts->G] * e;
        t[c].chunks = divup(t[c].bytes, csz);
        uint64_t last = t[c].chunks ? t[c].hr + t[c].d + t[c].chunks : 0;
        if (last > rounds) rounds = last;
    }
    round_t rd;
    round_init(&rd, w, k, 8 * (size_t)T);
    /* NCCL's split tree: the reduce up and the broadcast down run at once. In round u a rank of
     * height h sends chunk u - h up (its child of height h' sends chunk u - h' in it); the root
     * (height H) reduces chunk k in round k + H - 1 and sends it down in round k + H; a rank at
     * depth d receives chunk u - H - d + 1 from its parent and sends chunk u - H - d down. */
    for (uint64_t u = 0; u < rounds; u++) {
        for (uint32_t c = 0; c < Tf; c++)
            for (uint32_t k = 0; k < t[c].l.ndown; k++)
                if (u >= t[c].hc[k] && u - t[c].hc[k] < t[c].chunks) round_recv(&rd, (uint32_t)t[c].l.down[k]);
        for (uint32_t c = 0; c < Tf; c++) {
            uint64_t off = (uint64_t)t[c].hr + t[c].d; /* down: chunk u - off sent, u - off + 1 received */
            if (t[c].l.up >= 0 && u + 1 >= off && u + 1 - off < t[c].chunks) round_recv(&rd, (uint32_t)t[c].l.up);
        }
        for (uint32_t c = 0; c < Tf; c++)
            if (t[c].l.up >= 0 && u >= t[c].h && u - t[c].h < t[c].chunks)
                tree_send(&rd, (uint32_t)t[c].l.up, tree_chunk_bytes(&t[c], csz, u - t[c].h), f);
        for (uint32_t c = 0; c < Tf; c++) {
            uint64_t off = (uint64_t)t[c].hr + t[c].d;
            if (u >= off && u - off < t[c].chunks)
                for (uint32_t k = 0; k < t[c].l.ndown; k++)
                    tree_send(&rd, (uint32_t)t[c].l.down[k], tree_chunk_bytes(&t[c], csz, u - off), f);
        }
        round_wait(&rd);
    }
    round_free(&rd);
    free(t);
}

/* The tree's chunk, as NCCL's enqueue.cc sizes it so that a medium call still pipelines: from
 * the step size, halved while the call would give each channel too few chunks for the tree's
 * depth. With LL128 (every release): while bytes / (channels x chunk) < n x 64 / ppn down to
 * 128 KiB, then < n x 16 / ppn down to 32 KiB, n = 1 + log2 N + ppn / 10. With Simple, NCCL
 * 2.8.4 only: < depth x 8 down to 128 KiB, x 4 down to 64 KiB, x 1 down to 32 KiB, depth =
 * ppn - 1 + log2 N (connect.cc). */
uint64_t sim_nccl_tree_chunk(const deftsim_sim_params *p, const sim_nccl_call *k, uint64_t bytes)
{
    uint64_t c = step_size(p), C = k->channels ? k->channels : 1;
    uint32_t G = gpn(p), N = (p->P + G - 1) / G, lg = 0;
    while ((N >> (lg + 1)) > 0) lg++;
    double ppn = (double)p->P / N;
    if (k->proto == DEFTSIM_NCCL_PROTO_LL128) {
        double n = 1 + lg + 0.1 * ppn;
        while ((double)(bytes / (C * c)) < n * 64 / ppn && c > 131072) c /= 2;
        while ((double)(bytes / (C * c)) < n * 16 / ppn && c > 32768) c /= 2;
    } else if (k->proto == DEFTSIM_NCCL_PROTO_SIMPLE && p->nccl_model == DEFTSIM_NCCL_MODEL_TUNED &&
               p->nccl_tuning == DEFTSIM_NCCL_TUNING_2_8) {
        double depth = ppn - 1 + lg;
        while ((double)(bytes / (C * c)) < depth * 8 && c > 131072) c /= 2;
        while ((double)(bytes / (C * c)) < depth * 4 && c > 65536) c /= 2;
        while ((double)(bytes / (C * c)) < depth && c > 32768) c /= 2;
    }
    return c;
}

static void tree_allreduce(sim_worker *w, const deftsim_sim_params *p, const sim_nccl_call *k,
                           uint64_t bytes)
{
    uint32_t C = k->channels < MAXC ? k->channels : MAXC;
    sim_nccl_tree_shape ts = {p->P, gpn(p), C, 0};
    tree_run(w, p, k, &ts, 2 * C, bytes, UINT64_MAX, sim_nccl_tree_chunk(p, k, bytes));
}

/* ---- entry points ------------------------------------------------------------------------------- */

/* NVLink SHARP (NVLS): the NVSwitch reduces. Each GPU's port carries its buffer up to the
 * switch and the reduced result back, pipelined: S (P + 1) / P bytes each way. A point-to-point
 * model cannot reduce in a switch, so each rank sends that volume, split over the call's
 * channels, to its ring neighbour in one round: every port moves what NVLS moves through it, and
 * the switch's reduction and multicast take no time of their own. */
static void nvls_allreduce(sim_worker *w, const deftsim_sim_params *p, const sim_nccl_call *k,
                           uint64_t bytes)
{
    uint32_t P = p->P, G = gpn(p), r = sim_rank(w), C = k->channels < MAXC ? k->channels : MAXC;
    uint64_t part[MAXC], e = elem_of(p, bytes);
    split(bytes / e, C, part);
    round_t rd;
    round_init(&rd, w, k, 2 * (size_t)C);
    for (uint32_t c = 0; c < C; c++)
        if (part[c]) round_recv(&rd, sim_nccl_ring_rank(P, G, c, (sim_nccl_ring_pos(P, G, c, r) + P - 1) % P));
    for (uint32_t c = 0; c < C; c++)
        if (part[c]) {
            uint64_t vol = (uint64_t)ceil((double)(part[c] * e) * (P + 1) / P);
            round_send(&rd, sim_nccl_ring_rank(P, G, c, (sim_nccl_ring_pos(P, G, c, r) + 1) % P), vol);
        }
    round_wait(&rd);
    round_free(&rd);
}

/* NVLS-tree (NCCL's NVLSTree, multi-node NVSwitch nodes): in each node the NVSwitch reduces
 * and multicasts, as NVLS does, and across nodes every GPU reduces and broadcasts its 1/G share
 * of the vector in a double binary tree of the GPUs of its local rank, one a node, on its own
 * NIC. NCCL pipelines the two; here the node's part (NVLS's port volume, S (G + 1) / G, sent to
 * the node-ring neighbour as nvls_allreduce sends it) runs as one transfer beside the trees'
 * rounds, and the call ends when both have. At most 512 chunks a tree. */
#define NVLS_TREE_MAX_CHUNKS 512u
static void nvls_tree_allreduce(sim_worker *w, const deftsim_sim_params *p, const sim_nccl_call *k,
                                uint64_t bytes)
{
    uint32_t P = p->P, G = gpn(p), r = sim_rank(w), n = r / G, g = r % G;
    uint64_t e = elem_of(p, bytes), share[64];
    split(bytes / e, G, share);
    sg_comm_t node[2];
    void *slot = NULL;
    node[0] = sim_irecv(w, n * G + (g + G - 1) % G, &slot);
    uint64_t vol = (uint64_t)ceil((double)bytes * (G + 1) / G);
    uint64_t wire = (uint64_t)ceil((double)vol / k->eff_intra);
    node[1] = sim_isend_sync_wire(w, n * G + (g + 1) % G, vol, wire);
    sim_nccl_tree_shape ts = {P, G, 1, 1};
    tree_run(w, p, k, &ts, 2, share[g] * e, NVLS_TREE_MAX_CHUNKS, 0);
    sim_wait_all(w, node, 2);
    w->recv += sim_payload(slot);
}

/* The end of a call that began at t0: a rank waits out the call's floor (sim_nccl_call). */
static void call_end(const sim_nccl_call *k, double t0)
{
    double left = t0 + k->floor - sim_now();
    if (left > 0) sim_sleep(left);
}

static void allreduce_run(sim_worker *w, const deftsim_sim_params *p, const sim_nccl_call *k,
                          uint64_t bytes);

void sim_nccl_allreduce(sim_worker *w, const deftsim_sim_params *p, uint64_t bytes)
{
    if (sim_size(w) < 2 || bytes == 0) return;
    sim_nccl_call k;
    sim_nccl_plan_call(p, SIM_NCCL_ALLREDUCE, bytes, &k);
    double t0 = sim_now();
    sim_sleep(k.base);
    allreduce_run(w, p, &k, bytes);
    call_end(&k, t0);
}

static void allreduce_run(sim_worker *w, const deftsim_sim_params *p, const sim_nccl_call *k,
                          uint64_t bytes)
{
    deftsim_nccl_algo a = k->algo;
    /* Hierarchical needs whole nodes; with a partial last node it is NCCL's ring. NVLS needs
     * one node on NVSwitch (the tuned model picks it only there). */
    if (a == DEFTSIM_NCCL_HIERARCHICAL && p->P % gpn(p)) a = DEFTSIM_NCCL_RING;
    if (a == DEFTSIM_NCCL_NVLS && (p->P > gpn(p) || gpn(p) < 2)) a = DEFTSIM_NCCL_RING;
    if (a == DEFTSIM_NCCL_NVLS_TREE && (p->P <= gpn(p) || p->P % gpn(p) || gpn(p) < 2 || gpn(p) > 64))
        a = DEFTSIM_NCCL_RING;
    switch (a) {
    case DEFTSIM_NCCL_TREE: tree_allreduce(w, p, k, bytes); return;
    case DEFTSIM_NCCL_HIERARCHICAL: hierarchical(w, p, k, bytes); return;
    case DEFTSIM_NCCL_NVLS: nvls_allreduce(w, p, k, bytes); return;
    case DEFTSIM_NCCL_NVLS_TREE: nvls_tree_allreduce(w, p, k, bytes); return;
    default: ring_allreduce(w, p, k, bytes); return;
    }
}

/* A ring broadcast of `bytes` from root, per channel a pipelined chain. */
static void bcast_run(sim_worker *w, const deftsim_sim_params *p, const sim_nccl_call *k,
                      uint32_t root, uint64_t bytes)
{
    uint32_t P = p->P, G = gpn(p), C = k->channels < MAXC ? k->channels : MAXC, r = sim_rank(w);
    if (P < 2 || bytes == 0) return;
    uint64_t e = elem_of(p, bytes), csz = step_size(p) / e * e, part[MAXC];
    if (!csz) csz = e;
    split(bytes / e, C, part);
    uint32_t rel[MAXC], next[MAXC], prev[MAXC];
    /* The rounds this rank takes part in: from the one it receives its first chunk in to the
     * one it sends its last (every other round has nothing of it). */
    uint64_t nch[MAXC], first = UINT64_MAX, rounds = 0;
    for (uint32_t c = 0; c < C; c++) {
        uint32_t q = sim_nccl_ring_pos(P, G, c, r), q0 = sim_nccl_ring_pos(P, G, c, root);
        rel[c] = (q + P - q0) % P;
        next[c] = sim_nccl_ring_rank(P, G, c, (q + 1) % P);
        prev[c] = sim_nccl_ring_rank(P, G, c, (q + P - 1) % P);
        nch[c] = divup(part[c] * e, csz);
        if (!nch[c]) continue;
        if (rel[c] + nch[c] > rounds) rounds = rel[c] + nch[c];
        if ((rel[c] ? rel[c] - 1 : 0) < first) first = rel[c] ? rel[c] - 1 : 0;
    }
    round_t rd;
    round_init(&rd, w, k, 2 * (size_t)C);
    for (uint64_t t = first; t < rounds; t++) {
        for (uint32_t c = 0; c < C; c++)
            if (rel[c] > 0 && t + 1 >= rel[c] && t + 1 - rel[c] < nch[c]) round_recv(&rd, prev[c]);
        for (uint32_t c = 0; c < C; c++)
            if (rel[c] + 1 < P && t >= rel[c] && t - rel[c] < nch[c]) {
                uint64_t ck = t - rel[c], left = part[c] * e - ck * csz;
                round_send(&rd, next[c], left < csz ? left : csz);
            }
        round_wait(&rd);
    }
    round_free(&rd);
}

void sim_nccl_bcast(sim_worker *w, const deftsim_sim_params *p, uint32_t root, uint64_t bytes)
{
    if (p->P < 2 || bytes == 0) return;
    sim_nccl_call k;
    sim_nccl_plan_call(p, SIM_NCCL_BCAST, bytes, &k);
    double t0 = sim_now();
    sim_sleep(k.base);
    bcast_run(w, p, &k, root, bytes);
    call_end(&k, t0);
}

/* ---- grouped point to point -------------------------------------------------------------------- */

/* A group of a send to and a receive from every other rank (rank r sends bytes[r], or `one`
 * for all), as NCCL schedules it (sim_nccl_p2p_schedule): its waves one after another, in a
 * wave every receive posted (rounds ascending), then every send, then one wait. Approximate
 * mode, when every rank sends the same (`equal`) and there are more than SIM_APPROX_SEQ_MIN
 * waves: after a start from the latest rank's, the sampled waves run; after each, every rank
 * takes the latest end, and the waves up to the next sample pass at the pace of the longest
 * sampled wave so far, of any rank; and in every wave of more than SIM_APPROX_WAVE_ROUNDS
 * rounds only some rounds run, with the bytes of those they stand for. */
static void group_p2p(sim_worker *w, const deftsim_sim_params *p, const sim_nccl_call *k,
                      const uint64_t *bytes, uint64_t one, int equal)
{
    uint32_t P = sim_size(w), r = sim_rank(w);
    uint32_t *sched = malloc((5 * (size_t)P + 1) * sizeof *sched);
    if (!sched) abort(); /* the child's memory: it reports the signal */
    uint32_t *send = sched, *recv = sched + P, *wave = sched + 2 * (size_t)P;
    uint32_t *order = sched + 3 * (size_t)P, *first = sched + 4 * (size_t)P;
    uint32_t nwaves = sim_nccl_p2p_schedule(P, gpn(p), sim_nccl_p2p_channels(p), r, send, recv, wave);
    /* The rounds by wave, ascending in each: wave v is order[first[v] .. first[v + 1]). */
    for (uint32_t v = 0; v <= nwaves; v++) first[v] = 0;
    for (uint32_t i = 1; i < P; i++) first[wave[i] + 1]++;
    for (uint32_t v = 0; v < nwaves; v++) first[v + 1] += first[v];
    for (uint32_t i = 1; i < P; i++) order[first[wave[i]]++] = i;
    for (uint32_t v = nwaves; v > 0; v--) first[v] = first[v - 1];
    first[0] = 0;
    int sample = p->mode == DEFTSIM_SIM_APPROXIMATE && equal && fold_is_exact(p);
    int approx = sample && nwaves > SIM_APPROX_SEQ_MIN;
    round_t rd;
    round_init(&rd, w, k, 2 * (size_t)P);
    rd.p2p = 1;
    sim_approx_seq q;
    if (approx) sim_approx_seq_start(w, &q);
    for (uint32_t v = 0; v < nwaves; v++) {
        if (approx && !sim_approx_seq_round(w, &q, v, nwaves)) continue;
        /* Approximate mode, equal blocks: every s-th round of the wave (the same rounds on
         * every rank, so each sampled send meets its receive); the sampled sends that leave
         * the node carry the bytes of all the wave's sends that do, and likewise those inside
         * it, so every NIC and port moves what it moved in the whole wave. */
        uint32_t len = first[v + 1] - first[v], s = 1, all[2] = {0, 0}, kept[2] = {0, 0};
        uint64_t b = bytes ? bytes[r] : one;
        if (sample && len > SIM_APPROX_WAVE_ROUNDS) s = (len + SIM_APPROX_WAVE_ROUNDS - 1) / SIM_APPROX_WAVE_ROUNDS;
        for (uint32_t j = first[v]; j < first[v + 1]; j++) {
            int x = send[order[j]] / gpn(p) != r / gpn(p); /* 0 inside the node, 1 across */
            all[x]++;
            kept[x] += (j - first[v]) % s == 0;
        }
        if ((all[0] && !kept[0]) || (all[1] && !kept[1])) s = 1;
        rd.nkind[0] = all[0];
        rd.nkind[1] = all[1];
        for (uint32_t j = first[v]; j < first[v + 1]; j += s) round_recv(&rd, recv[order[j]]);
        for (uint32_t j = first[v]; j < first[v + 1]; j += s) {
            int x = send[order[j]] / gpn(p) != r / gpn(p);
            if (s == 1) round_send(&rd, send[order[j]], b);
            else round_send_as(&rd, send[order[j]], (double)b, (double)all[x] / kept[x]);
        }
        if (s > 1) { /* the step latency's share of the network, as of the whole wave */
            rd.nsend = all[0] + all[1];
            rd.ncross = all[1];
        }
        round_wait(&rd);
        if (approx) sim_approx_seq_done(w, &q);
    }
    round_free(&rd);
    free(sched);
}

void sim_nccl_group(sim_worker *w, const deftsim_sim_params *p, const uint32_t *src, size_t nsrc,
                    const uint32_t *dst, const uint64_t *bytes, size_t ndst)
{
    uint32_t r = sim_rank(w);
    uint64_t mx = 0;
    size_t nsend = 0;
    for (size_t i = 0; i < ndst; i++)
        if (dst[i] != DEFTSIM_NO_PEER && dst[i] != r) {
            nsend++;
            if (bytes[i] > mx) mx = bytes[i];
        }
    if (!nsrc && !nsend) return; /* not in the group: nothing launched */
    sim_nccl_call k;
    sim_nccl_plan_call(p, SIM_NCCL_P2P, mx, &k);
    double t0 = sim_now();
    sim_sleep(k.base);
    round_t rd;
    round_init(&rd, w, &k, nsrc + ndst);
    rd.p2p = 1;
    for (size_t i = 0; i < ndst; i++)
        if (dst[i] != DEFTSIM_NO_PEER && dst[i] != r) rd.nkind[crosses_nodes(&rd, dst[i])]++;
    for (size_t i = 0; i < nsrc; i++) round_recv(&rd, src[i]);
    for (size_t i = 0; i < ndst; i++)
        if (dst[i] != DEFTSIM_NO_PEER && dst[i] != r) round_send(&rd, dst[i], bytes[i]);
    round_wait(&rd);
    round_free(&rd);
    call_end(&k, t0);
}

void sim_nccl_alltoall(sim_worker *w, const deftsim_sim_params *p, uint64_t bytes, int equal)
{
    if (sim_size(w) < 2) return;
    sim_nccl_call k;
    sim_nccl_plan_call(p, SIM_NCCL_P2P, bytes, &k);
    double t0 = sim_now();
    sim_sleep(k.base);
    group_p2p(w, p, &k, NULL, bytes, equal);
    call_end(&k, t0);
}

void sim_nccl_allgather(sim_worker *w, const deftsim_sim_params *p, const uint64_t *bytes,
                        const sim_ag_info *info)
{
    uint32_t P = sim_size(w);
    if (P < 2) return;
    uint64_t mx = 0;
    for (uint32_t q = 0; q < (info->equal ? 1 : P); q++)
        if (bytes[q] > mx) mx = bytes[q];
    if (!mx) return;
    deftsim_nccl_agv how = info->equal ? DEFTSIM_NCCL_AGV_PAD : p->nccl_allgatherv;
    /* One call (a group is one launch); its protocol and channels from the largest block,
     * as the whole gathered vector for the ring, one block for the others. */
    sim_nccl_call k;
    sim_nccl_plan_call(p, how == DEFTSIM_NCCL_AGV_PAD ? SIM_NCCL_ALLGATHER
                          : how == DEFTSIM_NCCL_AGV_BCAST ? SIM_NCCL_BCAST : SIM_NCCL_P2P,
                       how == DEFTSIM_NCCL_AGV_PAD ? mx * P : mx, &k);
    double t0 = sim_now();
    sim_sleep(k.base);
    switch (how) {
    case DEFTSIM_NCCL_AGV_BCAST:
        for (uint32_t root = 0; root < P; root++)
            if (bytes[root]) bcast_run(w, p, &k, root, bytes[root]);
        break;
    case DEFTSIM_NCCL_AGV_P2P: group_p2p(w, p, &k, bytes, 0, 0); break;
    default: ring_allgather(w, p, &k, mx); break;
    }
    call_end(&k, t0);
}
