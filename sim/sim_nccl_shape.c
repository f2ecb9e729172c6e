/* sim_nccl_shape.c - who talks to whom in NCCL's algorithms: the rings' orders, the trees'
 * links, heights and depths, and the rounds and waves of a grouped point-to-point call, all
 * functions of the ranks and channels alone. sim_nccl.c runs the algorithms on them; the
 * tests check them against NCCL's own constructions (tests/sim/test_sim_nccl.c). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "sim_actors.h"

#define MAXC DEFTSIM_NCCL_CHANNELS_MAX

/* ---- orders and trees ------------------------------------------------------------------------- */

/* GPUs of node n. */
static uint32_t node_gpus(uint32_t P, uint32_t G, uint32_t n)
{
    uint32_t first = n * G;
    return P - first < G ? P - first : G;
}

uint32_t sim_nccl_ring_rank(uint32_t P, uint32_t G, uint32_t c, uint32_t pos)
{
    uint32_t n = pos / G, j = pos % G, g = node_gpus(P, G, n);
    return n * G + (uint32_t)(((uint64_t)c + 1 + j) % g);
}

uint32_t sim_nccl_ring_pos(uint32_t P, uint32_t G, uint32_t c, uint32_t rank)
{
    uint32_t n = rank / G, l = rank % G, g = node_gpus(P, G, n);
    uint32_t shift = (uint32_t)(((uint64_t)c + 1) % g);
    return n * G + (l + g - shift) % g;
}

void sim_nccl_btree(uint32_t n, uint32_t node, int32_t *up, int32_t *d0, int32_t *d1)
{
    /* The lowest set bit of the node's index says its level: odd indices are leaves, a node
     * 2^k (2 i + 1) has children 2^k (2 i + 1) -/+ 2^(k-1) (the right one halved until it
     * exists) and its parent at the next level up, or the one below it when that one does
     * not exist. Node 0 is the root, with the single child n's highest power of two. */
    uint32_t bit = 1;
    while (bit < n && !(bit & node)) bit <<= 1;
    *up = *d0 = *d1 = -1;
    if (node == 0) {
        if (n > 1) *d1 = (int32_t)(bit >> 1);
        return;
    }
    uint32_t parent = (node ^ bit) | (bit << 1);
    if (parent >= n) parent = node ^ bit;
    *up = (int32_t)parent;
    uint32_t low = bit >> 1;
    if (!low) return;
    *d0 = (int32_t)(node - low);
    for (uint32_t lb = low; lb; lb >>= 1)
        if (node + lb < n) {
            *d1 = (int32_t)(node + lb);
            break;
        }
}

void sim_nccl_dtree(uint32_t n, uint32_t node, uint32_t which, int32_t *up, int32_t *d0, int32_t *d1)
{
    if (!which) {
        sim_nccl_btree(n, node, up, d0, d1);
        return;
    }
    int32_t u, a, b;
    if (n % 2) { /* shifted by one */
        sim_nccl_btree(n, (node + n - 1) % n, &u, &a, &b);
        *up = u < 0 ? -1 : (int32_t)(((uint32_t)u + 1) % n);
        *d0 = a < 0 ? -1 : (int32_t)(((uint32_t)a + 1) % n);
        *d1 = b < 0 ? -1 : (int32_t)(((uint32_t)b + 1) % n);
    } else { /* mirrored */
        sim_nccl_btree(n, n - 1 - node, &u, &a, &b);
        *up = u < 0 ? -1 : (int32_t)(n - 1 - (uint32_t)u);
        *d0 = a < 0 ? -1 : (int32_t)(n - 1 - (uint32_t)a);
        *d1 = b < 0 ? -1 : (int32_t)(n - 1 - (uint32_t)b);
    }
}

static uint32_t chain_gpu(uint32_t P, uint32_t G, uint32_t n, uint32_t first, uint32_t i)
{
    uint32_t g = node_gpus(P, G, n);
    return n * G + (first % g + i) % g;
}

void sim_nccl_tree(uint32_t P, uint32_t G, uint32_t C, uint32_t tc, uint32_t rank,
                   sim_nccl_links *out)
{
    uint32_t N = (P + G - 1) / G, c = tc % C, n = rank / G, g = node_gpus(P, G, n);
    uint32_t i = (rank % G + g - c % g) % g; /* index in the node's chain */
    out->up = -1;
    out->ndown = 0;
    if (i > 0) out->up = (int32_t)chain_gpu(P, G, n, c, i - 1);
    if (i + 1 < g) out->down[out->ndown++] = (int32_t)chain_gpu(P, G, n, c, i + 1);
    if (i > 0) return;
    int32_t up, d0, d1;
    sim_nccl_dtree(N, n, tc / C, &up, &d0, &d1);
    if (up >= 0) out->up = (int32_t)chain_gpu(P, G, (uint32_t)up, c, 0);
    if (d0 >= 0) out->down[out->ndown++] = (int32_t)chain_gpu(P, G, (uint32_t)d0, c, 0);
    if (d1 >= 0) out->down[out->ndown++] = (int32_t)chain_gpu(P, G, (uint32_t)d1, c, 0);
}

void sim_nccl_tree_links(const sim_nccl_tree_shape *ts, uint32_t tc, uint32_t rank, sim_nccl_links *out)
{
    if (!ts->rails) {
        sim_nccl_tree(ts->P, ts->G, ts->C, tc, rank, out);
        return;
    }
    uint32_t N = ts->P / ts->G, g = rank % ts->G;
    int32_t up, d[2];
    sim_nccl_dtree(N, rank / ts->G, tc % 2, &up, &d[0], &d[1]);
    out->up = up < 0 ? -1 : (int32_t)((uint32_t)up * ts->G + g);
    out->ndown = 0;
    for (int i = 0; i < 2; i++)
        if (d[i] >= 0) out->down[out->ndown++] = (int32_t)((uint32_t)d[i] * ts->G + g);
}

/* The height of a rank in tree tc: the longest path down to a leaf; h holds the heights known
 * so far (UINT32_MAX: not yet). */
static uint32_t tree_height(const sim_nccl_tree_shape *ts, uint32_t tc, uint32_t rank, uint32_t *h)
{
    if (h[rank] != UINT32_MAX) return h[rank];
    sim_nccl_links l;
    sim_nccl_tree_links(ts, tc, rank, &l);
    uint32_t best = 0;
    for (uint32_t k = 0; k < l.ndown; k++) {
        uint32_t hc = tree_height(ts, tc, (uint32_t)l.down[k], h) + 1;
        if (hc > best) best = hc;
    }
    return h[rank] = best;
}

/* Every rank's height in trees 0 .. T - 1 of a shape (T x P, tree by tree), computed once a
 * simulation and kept in its context: every rank of every tree call reads its own, its
 * children's and its root's, which computed afresh walked the whole tree for each rank (P^2
 * links a call). The actors take turns, so the first one to need a shape fills it alone. */
struct sim_nccl_heights {
    uint32_t C, T;
    int rails;
    uint32_t *h;
};

const uint32_t *sim_nccl_tree_heights(sim_ctx *c, const sim_nccl_tree_shape *ts, uint32_t T)
{
    for (size_t i = 0; i < c->nheights; i++)
        if (c->heights[i].C == ts->C && c->heights[i].rails == ts->rails && c->heights[i].T == T)
            return c->heights[i].h;
    size_t n = (size_t)T * ts->P;
    uint32_t *h = malloc(n * sizeof *h);
    sim_nccl_heights *grown = realloc(c->heights, (c->nheights + 1) * sizeof *grown);
    if (!h || !grown) abort(); /* the child's memory: it reports the signal */
    c->heights = grown;
    for (size_t i = 0; i < n; i++) h[i] = UINT32_MAX;
    for (uint32_t tc = 0; tc < T; tc++)
        for (uint32_t r = 0; r < ts->P; r++) tree_height(ts, tc, r, h + (size_t)tc * ts->P);
    c->heights[c->nheights++] = (sim_nccl_heights){ts->C, T, ts->rails, h};
    return h;
}

void sim_nccl_ctx_free(sim_ctx *c)
{
    for (size_t i = 0; i < c->nheights; i++) free(c->heights[i].h);
    free(c->heights);
    c->heights = NULL;
    c->nheights = 0;
}

uint32_t sim_nccl_tree_depth(const sim_nccl_tree_shape *ts, uint32_t tc, uint32_t rank)
{
    uint32_t d = 0;
    sim_nccl_links l;
    for (sim_nccl_tree_links(ts, tc, rank, &l); l.up >= 0; sim_nccl_tree_links(ts, tc, (uint32_t)l.up, &l)) d++;
    return d;
}

/* ---- grouped point to point -------------------------------------------------------------------- */

static uint32_t gcd32(uint32_t a, uint32_t b)
{
    while (b) {
        uint32_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

static uint32_t pow2_up(uint32_t v)
{
    uint32_t q = 1;
    while (q < v) q <<= 1;
    return q;
}

/* The low `bits` bits of x in reverse order. */
static uint32_t reverse_bits(uint32_t x, uint32_t bits)
{
    uint32_t out = 0;
    for (uint32_t b = 0; b < bits; b++) out |= ((x >> b) & 1u) << (bits - 1 - b);
    return out;
}

uint32_t sim_nccl_p2p_channels(const deftsim_sim_params *p)
{
    uint32_t c = p->nccl_p2p_channels ? p->nccl_p2p_channels : p->nccl_channels ? p->nccl_channels : 1;
    uint32_t C = pow2_up(c > MAXC ? MAXC : c);
    return C > MAXC ? MAXC : C;
}

double sim_nic_bandwidth(const deftsim_sim_params *p)
{
    return p->gpus_per_node > 1 && p->nic_bandwidth > 0 ? p->nic_bandwidth : p->bandwidth;
}

uint32_t sim_node_nics(const deftsim_sim_params *p)
{
    uint32_t G = p->gpus_per_node ? p->gpus_per_node : 1;
    if (G == 1 || !p->nics_per_node) return 1;
    return p->nics_per_node < G ? p->nics_per_node : G;
}

/* NCCL's P2P_PER_CHANNEL_NET_BW (GB/s) and its p2p chunks: P2P_NET_CHUNKSIZE across nodes,
 * P2P_NVL_CHUNKSIZE on one node of NVLink (src/init.cc, src/graph/paths.cc). */
#define P2P_PER_CHANNEL_NET_GBPS 14.0
#define P2P_NET_CHUNK (128u << 10)
#define P2P_NVL_CHUNK (512u << 10)

void sim_nccl_p2p_peer_channels(const deftsim_sim_params *p, uint32_t *cmin, uint32_t *cmax)
{
    uint32_t P = p->P ? p->P : 1, G = p->gpus_per_node ? p->gpus_per_node : 1;
    uint32_t Cp = sim_nccl_p2p_channels(p);
    int nodes = P > G;
    /* A peer on the node: 2 a NVLink between the two GPUs (NVSwitch: every one of the GPU's,
     * more than any p2p channel count), 2 over PCIe or one link. A peer across the network: at
     * least one a NIC of the GPU, and one for each 14 GB/s of them. The comm's figure is the
     * least over its peers. */
    uint32_t per = p->intra_fabric == DEFTSIM_INTRA_NVSWITCH ? MAXC : 2;
    if (nodes) {
        uint32_t net = (uint32_t)ceil(sim_nic_bandwidth(p) / 1e9 / P2P_PER_CHANNEL_NET_GBPS - 1e-9);
        if (net < 1) net = 1;
        if (net < per) per = net;
    }
    per = pow2_up(per);
    /* Across nodes as few that every peer's channels fit the p2p channels in one round of 8
     * peers a batch; on one node at most the p2p channels. */
    if (nodes)
        while (per > 1 && (uint64_t)per * ((P + SIM_NCCL_P2P_BATCH - 1) / SIM_NCCL_P2P_BATCH) > Cp) per /= 2;
    else if (per > Cp)
        per = Cp;
    uint32_t lo = per;
    while (lo > 1 && (uint64_t)lo * P > Cp) lo /= 2;
    *cmin = lo;
    *cmax = per;
}

uint32_t sim_nccl_p2p_parts(const deftsim_sim_params *p, uint64_t bytes)
{
    uint32_t cmin, cmax;
    sim_nccl_p2p_peer_channels(p, &cmin, &cmax);
    uint32_t P = p->P ? p->P : 1, G = p->gpus_per_node ? p->gpus_per_node : 1;
    int nodes = P > G;
    uint64_t chunk = nodes ? P2P_NET_CHUNK : P2P_NVL_CHUNK;
    if (chunk * 8 > p->nccl_buffsize && p->nccl_buffsize >= 8) chunk = p->nccl_buffsize / 8;
    uint64_t min_part = nodes ? chunk / 2 : chunk / 8, max_part = nodes ? chunk : chunk * 32;
    if (bytes == 0 || min_part == 0) return 1;
    uint64_t want = (bytes + min_part - 1) / min_part;
    uint32_t n = want < cmin ? (uint32_t)want : cmin;
    uint64_t part = (bytes + n - 1) / n;
    if (part < min_part) part = min_part;
    while (part > max_part && n <= cmax / 2) {
        n *= 2;
        part = (bytes + n - 1) / n;
    }
    return n;
}

uint32_t sim_nccl_p2p_schedule(uint32_t P, uint32_t G, uint32_t Cp, uint32_t rank,
                               uint32_t *send, uint32_t *recv, uint32_t *wave)
{
    if (G < 1) G = 1;
    if (G > P) G = P;
    uint32_t nodes = (P + G - 1) / G;
    /* The group size: NCCL_P2P_SCHEDULE_GROUP_SIZE (8) across nodes, the node's GPUs on one,
     * cut down to a divisor of every node's GPU count. */
    uint32_t gs = nodes > 1 ? SIM_NCCL_P2P_BATCH : G;
    for (uint32_t n = 0; n < nodes; n++) {
        uint32_t local = node_gpus(P, G, n);
        if (local % gs || local < gs) gs = gcd32(gs, local);
    }
    /* Nodes are contiguous blocks of G ranks and gs divides every node's count, so the groups
     * are the blocks of gs consecutive ranks. */
    uint32_t ngroups = P / gs, group = rank / gs, local = rank % gs, g2 = pow2_up(ngroups);
    uint32_t round = 0, gd = 0, gr = 0;
    do {
        if (gd < ngroups) {
            uint32_t sg = (group + gd) % ngroups, rg = (group + ngroups - gd) % ngroups;
            for (uint32_t d = 0; d < gs; d++, round++) {
                send[round] = sg * gs + (local + d) % gs;
                recv[round] = rg * gs + (local + gs - d) % gs;
            }
        }
        gr++;
        gd = (gd + gr) & (g2 - 1);
    } while (gr != g2);
    /* Channels and batches: round r's base channel (its group of gs rounds across nodes, or r
     * itself on one node) with its bits reversed; on a channel, consecutive rounds share a
     * batch while they are in the same block of 8 rounds (and at most 8 share one); each
     * channel runs its batches in order. Round 0 (the rank itself) moves nothing. */
    uint32_t bits = 0;
    while ((1u << bits) < Cp) bits++;
    uint32_t last_group[MAXC], count[MAXC], batches[MAXC], nwaves = 0;
    for (uint32_t c = 0; c < MAXC; c++) last_group[c] = UINT32_MAX, count[c] = batches[c] = 0;
    for (uint32_t r = 1; r < P; r++) {
        uint32_t base = nodes > 1 ? (r / gs) * ((gs + SIM_NCCL_P2P_BATCH - 1) / SIM_NCCL_P2P_BATCH) +
                                        (r % gs) / SIM_NCCL_P2P_BATCH
                                  : r;
        uint32_t c = reverse_bits(base & (Cp - 1), bits);
        uint32_t blk = r / SIM_NCCL_P2P_BATCH;
        if (last_group[c] != blk || count[c] == SIM_NCCL_P2P_BATCH) {
            last_group[c] = blk;
            count[c] = 0;
            batches[c]++;
        }
        count[c]++;
        wave[r] = batches[c] - 1;
        if (batches[c] > nwaves) nwaves = batches[c];
    }
    return nwaves;
}
