/* sim_nccl_tune.c - how NCCL runs one call: its algorithm, protocol and channel count for the
 * collective and size (NCCL's tuning model), and what the chosen protocol costs a step. The
 * collectives of sim_nccl.c ask it once per call (sim_nccl_plan_call) and run the pattern.
 *
 * The constants are NCCL's own tuning figures, read from its source (github.com/NVIDIA/nccl,
 * src/graph/tuning.cc, ncclTunerConstantsDefaults and ncclTopoTuneModel, and src/enqueue.cc,
 * the channel and thread tuning of a call; NCCL 2.30.7, 2026-06). docs/NETWORK.md, "NCCL as it
 * runs", says which of them enter the simulation and how, and what is fitted instead.
 *
 * Call order in sim/: docs/ARCHITECTURE.md, the sim/ row of its folder table; this
 * file calls only sim_names.c's defaults and libm. */
#include <math.h>

#include "sim_internal.h"

/* Per algorithm (tree, ring, NVLS, NVLS-tree) and protocol (LL, LL128, Simple), microseconds. */
enum { A_TREE, A_RING, A_NVLS, A_NVLS_TREE, NA };
enum { P_LL, P_LL128, P_SIMPLE, NP };

/* NCCL's P2P_LL_THRESHOLD: a p2p send of at most this many bytes a channel runs LL (enqueue.cc) */
#define P2P_LL_THRESHOLD 16384u
static const double base_lat[NA][NP] = {{6.8, 14.0, 8.4}, {6.6, 14.0, 8.4}, {0, 0, 0}, {0, 0, 0}};
static const double hw_lat_nvl[NA][NP] = {{0.6, 1.25, 4.0}, {0.6, 1.9, 3.4}, {0, 0, 25}, {0, 0, 25}};
static const double hw_lat_pci[NA][NP] = {{1.0, 1.9, 4.0}, {1.0, 2.5, 5.7}, {0, 0, 0}, {0, 0, 0}};
static const double hw_lat_net[NA][NP] = {{5.0, 8.5, 14}, {2.7, 4.0, 14.0}, {0, 0, 18}, {0, 0, 20.9}};

/* GB/s, by GPU generation (volta, ampere, hopper) and node count (1, 2, more). LL's cap is
 * NCCL's for one node by GPU generation; between nodes NCCL takes it by CPU vendor, and the
 * Intel row (NCCL's first) is taken here. */
static const double ll_max_bw_n1[DEFTSIM_NCCL_ARCH_COUNT] = {39.0, 87.7, 141.0};
static const double ll_max_bw_intel[3] = {39.0, 39.0, 20.4};
static const double per_ch_ring_ll128[DEFTSIM_NCCL_ARCH_COUNT] = {20.0, 20.0, 36.7};
static const double per_ch_tree_ll128[DEFTSIM_NCCL_ARCH_COUNT][3] = {
    {20.0, 20.0, 20.0}, {20.0, 20.0, 20.0}, {36.7, 36.7, 29.0}};
static const double per_ch_tree[DEFTSIM_NCCL_ARCH_COUNT][3] = {
    {26.5, 18.5, 10.0}, {24.0, 23.6, 17.8}, {38.7, 41.4, 36.0}};
/* NVLS-tree's cap a channel, by node count (Hopper's row: it runs on no earlier GPU). */
static const double per_ch_nvls_tree[3] = {0.0, 57.7, 45.5};
/* NVLS's achieved fraction of NVLink (Hopper; NCCL has none before it). */
#define NVLS_EFFICIENCY 0.85
/* The channels NVLS uses at most ("NVLS should not need more than 16 channels"). */
#define NVLS_CHANNELS 16u
/* NVLS's largest chunk a channel and head (NCCL_NVLS_CHUNKSIZE's default, 128 KiB). */
#define NVLS_CHUNK_MAX 131072u
/* Tree's bandwidth correction by log2(bytes / 64), per protocol. */
static const double tree_corr[NP][24] = {
    {1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0, 1.0},
    {1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0, 1.0},
    {.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9, .9}};
/* Threads a channel runs and the bytes a thread must have before another channel is used
 * (enqueue.cc: a call drops channels while bytes < channels x threads x threshold; the ring's
 * LL threshold is multiplied by the rank count). */
static const double max_threads[NP] = {512, 640, 512};
static const double thread_threshold[NP] = {8, 8, 64};
/* Bytes on the wire per byte of data: LL's lines carry 8 bytes of data and 8 of flags, LL128's
 * 120 of every 128; Simple moves the data as it is. */
static const double wire_factor[NP] = {2.0, 128.0 / 120.0, 1.0};
/* The per-step cost of the network proxy between nodes, microseconds (NCCL's default for Intel
 * CPUs; three times for Simple). */
#define NET_OVERHEAD_US 1.0

/* NCCL 2.8.4's figures where they differ (its src/graph/tuning.cc and src/enqueue.cc, tag
 * v2.8.4-1, 2021; `nccl_tuning = 2.8`): lower base latencies, the tree's Simple step at 28 us,
 * the ring's Simple step across nodes 9.6 us; LL at a quarter of the bus (a third for one
 * node's allgather and broadcast), LL128 at a fixed cap a channel per collective whatever the
 * GPU, Ampere's bus at most 235 GB/s, no NVLS, LL128 only on Volta and Ampere, an LL step
 * inside a node 1.8 times longer when the call spans nodes, and the ring's plateau 1.9 times
 * from P / 16 x 64 KiB on. */
static const double base_lat_28[NA][NP] = {{4.4, 4.4, 0}, {3.6, 10.0, 8.4}, {0, 0, 0}, {0, 0, 0}};
static const double hw_lat_nvl_28[NA][NP] = {{0.52, 1.25, 28}, {0.47, 1.9, 3.4}, {0, 0, 0}, {0, 0, 0}};
static const double hw_lat_pci_28[NA][NP] = {{1.0, 1.9, 28}, {1.0, 2.5, 5.7}, {0, 0, 0}, {0, 0, 0}};
static const double hw_lat_net_28[NA][NP] = {{5.0, 8.5, 28}, {2.7, 4.0, 9.6}, {0, 0, 0}, {0, 0, 0}};
/* LL128's cap a channel, GB/s: broadcast (deftsim's bcast), allgather, allreduce. */
#define LL128_CH_28_BCAST 18.8
#define LL128_CH_28_ALLGATHER 18.3
#define LL128_CH_28_ALLREDUCE 16.9
static const double ll_max_bw_n1_28[DEFTSIM_NCCL_ARCH_COUNT] = {39.0, 87.7, 39.0};
static const double per_ch_tree_28[DEFTSIM_NCCL_ARCH_COUNT][3] = {
    {26.5, 18.5, 10.0}, {24.0, 22.5, 16.0}, {26.5, 18.5, 10.0}};
static const double tree_corr_28[NP][23] = {
    {1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0},
    {1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .5, .6, .6, .7, .7, .8, .9, .9, .92, .92},
    {.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9}};

static uint32_t log2_floor(uint64_t v)
{
    uint32_t l = 0;
    while (v >>= 1) l++;
    return l;
}

static double dmin(double a, double b) { return a < b ? a : b; }
static double dmax(double a, double b) { return a > b ? a : b; }

static int proto_index(deftsim_nccl_proto pr)
{
    return pr == DEFTSIM_NCCL_PROTO_LL ? P_LL : pr == DEFTSIM_NCCL_PROTO_LL128 ? P_LL128 : P_SIMPLE;
}

static deftsim_nccl_proto proto_of(int pi)
{
    return pi == P_LL ? DEFTSIM_NCCL_PROTO_LL
                      : pi == P_LL128 ? DEFTSIM_NCCL_PROTO_LL128 : DEFTSIM_NCCL_PROTO_SIMPLE;
}

/* ---- plain auto: NCCL's tuning model for Simple, ring or tree ----------------------------------------------------------------- */

/* NCCL's figures for its Simple protocol (src/graph/tuning.cc, NCCL 2.2x): base latency of
 * ring and tree, microseconds; hardware latency per step over NVLink and over the network;
 * the tree's bandwidth correction by log2(bytes / 64). */
#define BASE_LAT_US 8.4
#define RING_NVL_LAT_US 3.4
#define TREE_NVL_LAT_US 4.0
#define NET_LAT_US 14.0
static const double tree_correction[24] = {.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5,
                                           .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9, .9};

double sim_nccl_predict_us(const deftsim_sim_params *p, deftsim_nccl_algo a, uint64_t bytes)
{
    uint32_t P = p->P, G = p->gpus_per_node ? p->gpus_per_node : 1, N = (P + G - 1) / G;
    uint32_t C = p->nccl_channels ? p->nccl_channels : 1;
    double ppn = (double)P / N, gbps = p->bandwidth / 1e9; /* GB/s, NCCL's unit */
    if (P < 2) return 0;
    if (a == DEFTSIM_NCCL_TREE) {
        double bw = gbps * 0.92 * 0.5;
        int lg = bytes >> 6 ? (int)log2_floor(bytes >> 6) : -1;
        if (lg >= 0 && lg < 24) bw *= tree_correction[lg];
        double lat = BASE_LAT_US + 2 * ((ppn - 1) * TREE_NVL_LAT_US + log2_floor(N) * NET_LAT_US);
        return lat + (double)bytes / (1000 * bw);
    }
    uint32_t steps = 2 * (P - 1), inter = N > 1 ? 2 * (N - 1) : 0;
    double lat = BASE_LAT_US + (steps - inter) * RING_NVL_LAT_US + inter * NET_LAT_US;
    if (N > 1 && bytes / ((uint64_t)C * P) >= 64) lat *= 1.4; /* the ring's plateau */
    double bw = gbps * P / (2.0 * (P - 1));
    return lat + (double)bytes / (1000 * bw);
}

deftsim_nccl_algo sim_nccl_pick(const deftsim_sim_params *p, uint64_t bytes)
{
    return sim_nccl_predict_us(p, DEFTSIM_NCCL_TREE, bytes) <
                   sim_nccl_predict_us(p, DEFTSIM_NCCL_RING, bytes)
               ? DEFTSIM_NCCL_TREE
               : DEFTSIM_NCCL_RING;
}

/* The shape NCCL sees. */
typedef struct {
    uint32_t P, G, N, C;
    double ppn, intra, node_net; /* GB/s: a GPU's intra-node link; a node's NICs together */
    int nvl, nvls_ok, nvls_tree_ok;
    int v28; /* NCCL 2.8.4's tuning figures */
} shape_t;

static void shape_of(const deftsim_sim_params *p, shape_t *s)
{
    s->P = p->P;
    s->G = p->gpus_per_node ? p->gpus_per_node : 1;
    if (s->G > s->P) s->G = s->P;
    s->N = (s->P + s->G - 1) / s->G;
    s->C = p->nccl_channels ? p->nccl_channels : 1;
    if (s->C > DEFTSIM_NCCL_CHANNELS_MAX) s->C = DEFTSIM_NCCL_CHANNELS_MAX;
    s->ppn = (double)s->P / s->N;
    s->intra = (s->G > 1 ? p->intra_bandwidth : p->bandwidth) / 1e9;
    double nic = sim_nic_bandwidth(p) / 1e9;
    s->node_net = sim_node_nics(p) * nic;
    s->nvl = s->G > 1 && p->intra_fabric != DEFTSIM_INTRA_PCIE;
    int nvls_node = s->G > 2 && p->intra_fabric == DEFTSIM_INTRA_NVSWITCH &&
                    p->nccl_arch == DEFTSIM_NCCL_ARCH_HOPPER && s->C >= 2;
    s->v28 = p->nccl_tuning == DEFTSIM_NCCL_TUNING_2_8;
    if (s->v28) nvls_node = 0; /* NVLS came with NCCL 2.17 */
    s->nvls_ok = s->N == 1 && nvls_node;
    /* NVLS-tree: whole nodes (NCCL needs the same GPUs on every node) */
    s->nvls_tree_ok = s->N > 1 && nvls_node && s->P % s->G == 0 && s->G <= 64;
}

/* The ring's steps of a collective (NCCL's nsteps) and those that cross nodes (nInterSteps):
 * 2 (P - 1) and 2 (N - 1) for the allreduce, P - 1 and N - 1 for the allgather; the broadcast
 * P steps. */
static double ring_steps(const shape_t *s, sim_nccl_coll coll, double *inter)
{
    int ar = coll == SIM_NCCL_ALLREDUCE;
    *inter = s->N == 1 ? 0 : ar ? 2.0 * (s->N - 1) : s->N - 1.0;
    return ar ? 2.0 * (s->P - 1) : coll == SIM_NCCL_BCAST ? s->P : s->P - 1.0;
}

/* NCCL's per-step latencies of a pair, microseconds: over the node's links and over the
 * network (with one GPU a node, the tree's network figure); `proxy`: across nodes a ring step
 * costs at least the network proxy's overhead. */
static void step_latencies(const shape_t *s, int a, int pi, int proxy, double *intra, double *inter)
{
    if (s->v28) {
        *intra = (s->nvl ? hw_lat_nvl_28 : hw_lat_pci_28)[a][pi] * (s->N > 1 && pi == P_LL ? 1.8 : 1);
        *inter = hw_lat_net_28[a][pi];
        return;
    }
    const double (*intra_tab)[NP] = s->nvl ? hw_lat_nvl : hw_lat_pci;
    *intra = intra_tab[a][pi];
    *inter = s->ppn == 1 ? hw_lat_net[A_TREE][pi] : hw_lat_net[a][pi];
    if (proxy && s->N > 1) *intra = dmax(*intra, NET_OVERHEAD_US * (pi == P_SIMPLE ? 3 : 1));
}

/* NCCL 2.8.4's bus bandwidth of a pair (GB/s) from the platform's: its refinements as
 * ncclTopoTuneModel of that release made them; -1 where the pair does not run. */
static double bus_28(const deftsim_sim_params *p, const shape_t *s, sim_nccl_coll coll, int a, int pi,
                     double bus)
{
    uint32_t i2 = s->N <= 2 ? s->N - 1 : 2;
    int arch = p->nccl_arch;
    if (pi == P_LL128 && arch == DEFTSIM_NCCL_ARCH_HOPPER) return -1; /* Volta and Ampere only */
    double ll128_ch = coll == SIM_NCCL_ALLREDUCE   ? LL128_CH_28_ALLREDUCE
                      : coll == SIM_NCCL_ALLGATHER ? LL128_CH_28_ALLGATHER
                                                   : LL128_CH_28_BCAST;
    double llmax = s->N == 1 ? ll_max_bw_n1_28[arch] : ll_max_bw_intel[i2];
    if (arch == DEFTSIM_NCCL_ARCH_AMPERE) bus = dmin(bus, 235.0);
    if (a == A_RING && pi == P_LL)
        bus = dmin(llmax, bus * (s->N > 1 || coll == SIM_NCCL_ALLREDUCE ? 0.25 : 1.0 / 3.0));
    if (a == A_RING && pi == P_LL128) bus = dmin(bus * (s->ppn < 2 ? 0.7 : 0.92), ll128_ch * s->C);
    if (a == A_TREE) bus = dmin(bus * 0.92, s->C * per_ch_tree_28[arch][i2]);
    if (a == A_TREE && pi == P_LL) bus = dmin(bus / 3.8, llmax);
    if (a == A_TREE && pi == P_LL128) bus = dmin(bus * (s->N == 1 ? 7.0 / 9.0 : 0.915), ll128_ch * s->C);
    return bus;
}

static double predict_28(const deftsim_sim_params *p, const shape_t *s, sim_nccl_coll coll, int a,
                         int pi, uint64_t bytes, double bus);

/* NCCL's predicted time of one call (microseconds), or a negative value where the pair does
 * not run: NCCL's latency + bytes / bandwidth, its bandwidth from the platform's links at
 * their achieved fractions. */
static double predict(const deftsim_sim_params *p, const shape_t *s, sim_nccl_coll coll, int a,
                      int pi, uint64_t bytes)
{
    int ar = coll == SIM_NCCL_ALLREDUCE;
    if (a != A_RING && !ar) return -1;
    if (a == A_NVLS && (pi != P_SIMPLE || !s->nvls_ok)) return -1;
    if (a == A_NVLS_TREE && (pi != P_SIMPLE || !s->nvls_tree_ok)) return -1;
    if (pi == P_LL128 && s->G > 1 && !s->nvl) return -1; /* LL128 needs NVLink in the node */
    uint32_t i2 = s->N <= 2 ? s->N - 1 : 2;
    int hop = p->nccl_arch;
    double nvl = s->intra * p->nccl_nvl_efficiency, net = s->node_net * p->nccl_net_efficiency;
    if (p->nccl_net_channel_bandwidth > 0) net = dmin(net, s->C * p->nccl_net_channel_bandwidth / 1e9);
    double bus = s->N == 1 ? nvl : dmin(nvl, net);
    if (s->v28) return predict_28(p, s, coll, a, pi, bytes, bus);
    double llmax = s->N == 1 ? ll_max_bw_n1[hop] : ll_max_bw_intel[i2];
    if (a == A_RING && pi == P_LL) bus = dmin(llmax, bus * 0.5);
    if (a == A_RING && pi == P_LL128) bus = dmin(bus * 0.92, s->C * per_ch_ring_ll128[hop]);
    if (a == A_TREE) bus = dmin(bus * 0.92, s->C * per_ch_tree[hop][i2]);
    if (a == A_TREE && pi == P_LL) bus = dmin(bus / 3.8, llmax);
    if (a == A_TREE && pi == P_LL128)
        bus = dmin(bus * (s->N == 1 ? 7.0 / 9.0 : 120.0 / 128.0), s->C * per_ch_tree_ll128[hop][i2]);
    if (a == A_NVLS) bus = s->intra * NVLS_EFFICIENCY * (s->C - 1.0) / s->C * 2.0;
    /* NVLS-tree: NVLS in the node, the network between (twice its bandwidth on two nodes,
     * where each node sends half the vector and receives the other half). */
    if (a == A_NVLS_TREE)
        bus = dmin(dmin(s->intra * NVLS_EFFICIENCY * (s->C - 1.0) / s->C * 2.0,
                        net * (s->N <= 2 ? 2.0 : 1.0)),
                   s->C * per_ch_nvls_tree[i2]);
    double ninter, nsteps = ring_steps(s, coll, &ninter);
    double bw = a == A_TREE ? bus * 0.5 : bus * s->P / nsteps;
    double intra, inter;
    step_latencies(s, a, pi, a == A_RING && coll != SIM_NCCL_BCAST, &intra, &inter);
    double lat = base_lat[a][pi];
    if (a == A_RING) {
        if (coll == SIM_NCCL_BCAST) {
            lat += nsteps * (s->N > 1 ? inter : intra);
        } else {
            lat += (nsteps - ninter) * intra + ninter * inter;
        }
    } else if (a == A_TREE) {
        lat += 2 * ((s->ppn - 1) * intra + log2_floor(s->N) * inter);
    } else if (a == A_NVLS_TREE) {
        lat = intra + 2 * log2_floor(s->N) * inter;
    } else {
        lat = intra;
    }
    int lg = bytes >> 6 ? (int)log2_floor(bytes >> 6) : -1;
    if (a == A_TREE && lg >= 0 && lg < 23) bw *= tree_corr[pi][lg];
    if (a == A_RING && pi == P_SIMPLE && s->N > 1 && ar && bytes / ((uint64_t)s->C * s->P) >= 64)
        lat *= p->nccl_arch == DEFTSIM_NCCL_ARCH_VOLTA ? 1.9 : 1.4;
    return bw > 0 ? lat + (double)bytes / (1000 * bw) : -1;
}

/* predict() with NCCL 2.8.4's figures (above): its bandwidths, latencies and corrections. */
static double predict_28(const deftsim_sim_params *p, const shape_t *s, sim_nccl_coll coll, int a,
                         int pi, uint64_t bytes, double bus)
{
    bus = bus_28(p, s, coll, a, pi, bus);
    if (bus <= 0) return -1;
    int ar = coll == SIM_NCCL_ALLREDUCE;
    double ninter, nsteps = ring_steps(s, coll, &ninter);
    double bw = a == A_TREE ? bus * 0.5 : bus * s->P / nsteps;
    double intra, inter;
    step_latencies(s, a, pi, 0, &intra, &inter);
    double lat = base_lat_28[a][pi];
    if (a == A_RING) {
        if (coll == SIM_NCCL_BCAST) lat += nsteps * (s->N > 1 ? inter : intra);
        else lat += (nsteps - ninter) * intra + ninter * inter;
    } else {
        lat += 2 * ((s->ppn - 1) * intra + log2_floor(s->N) * inter);
    }
    int lg = bytes >> 6 ? (int)log2_floor(bytes >> 6) : -1;
    if (a == A_TREE && lg >= 0 && lg < 23) bw *= tree_corr_28[pi][lg];
    if (a == A_RING && pi == P_SIMPLE && s->N > 1 && ar && (double)bytes >= s->P / 16.0 * 65536)
        lat *= 1.9;
    return lat + (double)bytes / (1000 * bw);
}

static int algo_index(deftsim_nccl_algo a)
{
    return a == DEFTSIM_NCCL_TREE        ? A_TREE
           : a == DEFTSIM_NCCL_NVLS      ? A_NVLS
           : a == DEFTSIM_NCCL_NVLS_TREE ? A_NVLS_TREE
                                         : A_RING;
}

static deftsim_nccl_algo algo_of(int a)
{
    return a == A_TREE        ? DEFTSIM_NCCL_TREE
           : a == A_NVLS      ? DEFTSIM_NCCL_NVLS
           : a == A_NVLS_TREE ? DEFTSIM_NCCL_NVLS_TREE
                              : DEFTSIM_NCCL_RING;
}

/* Channels a call of `bytes` uses: NCCL drops one while the bytes would leave a thread less
 * than its threshold. */
static uint32_t call_channels(const shape_t *s, int a, int pi, uint64_t bytes)
{
    if (a == A_NVLS || a == A_NVLS_TREE) return s->C < NVLS_CHANNELS ? s->C : NVLS_CHANNELS;
    double thr = thread_threshold[pi] * (a == A_RING && pi == P_LL ? s->P : 1);
    uint32_t nc = s->C;
    while (nc >= 2 && (double)bytes < nc * max_threads[pi] * thr) nc--;
    return nc;
}

/* The chunk steps of a one-node NVLS allreduce: each of its channels x heads (every GPU of the
 * node is a head) moves its share of the bytes in chunks that NCCL halves, from 128 KiB down to
 * 16 KiB, as the call has fewer bytes for the concurrent operations (enqueue.cc,
 * calcCollChunking's NVLS case, the same since NCCL 2.18): below 64 chunks of 128 KiB an
 * operation it takes 64 KiB, below 8 of those 32 KiB, below 2 of those 16 KiB. */
static double nvls_steps(uint32_t channels, uint32_t heads, uint64_t bytes)
{
    double ops = (double)channels * heads, chunk = NVLS_CHUNK_MAX;
    if (bytes < 64 * ops * chunk) chunk = 65536;
    if (bytes < 8 * ops * chunk) chunk = 32768;
    if (bytes < 2 * ops * chunk) chunk = 16384;
    return ceil((double)bytes / (ops * chunk));
}

void sim_nccl_plan_call(const deftsim_sim_params *p, sim_nccl_coll coll, uint64_t bytes,
                        sim_nccl_call *out)
{
    shape_t s;
    shape_of(p, &s);
    deftsim_nccl_algo forced = p->nccl_algorithm;
    out->channels = s.C;
    out->base = out->floor = 0;
    out->lat_intra = out->lat_net = 0;
    out->net_share = -1;
    out->wire = 1;
    out->eff_intra = out->eff_net = 1;
    out->predict_us = 0;
    out->proto = DEFTSIM_NCCL_PROTO_SIMPLE;
    if (p->nccl_model != DEFTSIM_NCCL_MODEL_TUNED) {
        out->algo = coll != SIM_NCCL_ALLREDUCE ? DEFTSIM_NCCL_RING
                    : forced == DEFTSIM_NCCL_AUTO  ? sim_nccl_pick(p, bytes)
                    : forced == DEFTSIM_NCCL_NVLS || forced == DEFTSIM_NCCL_NVLS_TREE
                        ? DEFTSIM_NCCL_RING
                                                   : forced;
        return;
    }
    /* NCCL's choice: the fastest predicted (algorithm, protocol) among those allowed. */
    int best_a = A_RING, best_p = P_SIMPLE;
    double best = -1;
    /* Point-to-point groups (alltoall, allgatherv as p2p) do not go through the tuning model:
     * NCCL sends each peer's bytes with Simple, or with LL where they fit in LL's threshold
     * (enqueue.cc's P2P_LL_THRESHOLD, 16 KiB, since NCCL 2.14; 2.8 sends Simple only). The
     * ring's figures for that protocol stand for its latencies. */
    if (coll == SIM_NCCL_P2P) {
        int ll_ok = !s.v28 && p->nccl_proto != DEFTSIM_NCCL_PROTO_SIMPLE &&
                    p->nccl_proto != DEFTSIM_NCCL_PROTO_LL128;
        best_p = ll_ok && bytes <= P2P_LL_THRESHOLD ? P_LL : P_SIMPLE;
        best = predict(p, &s, coll, A_RING, best_p, bytes);
    }
    for (int a = 0; a < NA && coll != SIM_NCCL_P2P; a++) {
        if (coll == SIM_NCCL_ALLREDUCE && forced != DEFTSIM_NCCL_AUTO &&
            forced != DEFTSIM_NCCL_HIERARCHICAL && algo_index(forced) != a)
            continue;
        if (forced == DEFTSIM_NCCL_HIERARCHICAL && a != A_RING) continue;
        for (int pi = 0; pi < NP; pi++) {
            if (p->nccl_proto != DEFTSIM_NCCL_PROTO_AUTO && proto_index(p->nccl_proto) != pi) continue;
            double t = predict(p, &s, coll, a, pi, bytes);
            if (t >= 0 && (best < 0 || t < best)) best = t, best_a = a, best_p = pi;
        }
    }
    /* A forced pair that cannot run (NVLS off one NVSwitch node, say) falls back as NCCL's
     * does to what can: the ring with the forced protocol, or Simple. */
    if (best < 0) {
        best_a = A_RING;
        best_p = p->nccl_proto != DEFTSIM_NCCL_PROTO_AUTO ? proto_index(p->nccl_proto) : P_SIMPLE;
        best = predict(p, &s, coll, best_a, best_p, bytes);
    }
    out->algo = forced == DEFTSIM_NCCL_HIERARCHICAL && coll == SIM_NCCL_ALLREDUCE
                    ? DEFTSIM_NCCL_HIERARCHICAL
                    : algo_of(best_a);
    out->proto = proto_of(best_p);
    out->predict_us = best;
    out->channels = call_channels(&s, best_a, best_p, bytes);
    double intra, inter;
    step_latencies(&s, best_a, best_p, best_a == A_RING, &intra, &inter);
    if (s.G == 1) intra = inter; /* one GPU a host: every step crosses the network */
    uint32_t gpt = p->nccl_gpus_per_thread ? p->nccl_gpus_per_thread : 1;
    out->base = p->nccl_launch + (s.v28 ? base_lat_28 : base_lat)[best_a][best_p] * 1e-6;
    /* A thread that launches the call on gpt GPUs spends nccl_launch_gpu more on each beyond the
     * first. The launches are asynchronous: issued back to back (nccl-tests' loop, a training
     * step's calls), they overlap the previous call's run, so they bound the call's time from
     * below instead of adding to it. */
    out->floor = gpt > 1 ? p->nccl_launch + (gpt - 1) * p->nccl_launch_gpu : 0;
    const double net_scale = p->nccl_net_step_scale >= 0 ? p->nccl_net_step_scale : p->nccl_step_scale;
    out->lat_intra = intra * 1e-6 * p->nccl_step_scale;
    out->lat_net = inter * 1e-6 * net_scale;
    /* The ring's latency is NCCL's sum over its steps, (steps - inter) x intra + inter x net: a
     * step's cost is what a chunk pays on its hop, and a chunk passes every hop in turn. The
     * simulated ring runs in lockstep, each round at the pace of its slowest rank, so a rank
     * whose own hop leaves the node would set every round's pace at the network's figure
     * (with one channel, at every step): every rank pays the call's share instead. */
    if (best_a == A_RING && out->algo == DEFTSIM_NCCL_RING && s.N > 1 &&
        (coll == SIM_NCCL_ALLREDUCE || coll == SIM_NCCL_ALLGATHER)) {
        double ninter, nsteps = ring_steps(&s, coll, &ninter);
        out->net_share = ninter / nsteps;
    }
    out->wire = wire_factor[best_p];
    int nvls = best_a == A_NVLS || best_a == A_NVLS_TREE;
    /* LL and LL128 move less than their line formats alone say (their kernels poll flags and
     * write in small stores): a further fraction of the link, fitted; it slows the transfer,
     * not NCCL's choice, which its own tuning figures make. */
    double proto_eff = best_p == P_LL      ? p->nccl_ll_efficiency
                       : best_p == P_LL128 ? p->nccl_ll128_efficiency
                                           : 1;
    out->eff_intra = p->nccl_nvl_efficiency * (nvls ? NVLS_EFFICIENCY : 1) * proto_eff;
    /* NCCL's grouped sends and receives keep many peers' transfers in flight on a NIC at once
     * (its p2p chunks, several channels a peer) where a ring keeps one stream a channel: their
     * achieved fraction of the link is a figure of its own (fitted on the alltoall tables). */
    double net_eff = coll == SIM_NCCL_P2P && p->nccl_p2p_net_efficiency > 0
                         ? p->nccl_p2p_net_efficiency
                         : p->nccl_net_efficiency;
    /* A ring's or tree's channel moves at most nccl_net_channel_bandwidth across the network:
     * a NIC carrying c of the call's channels reaches at most c times it, whatever its own rate.
     * The call's channels spread over the NICs the node's GPUs use, the busiest carrying
     * ceil(channels / NICs) of them, which share the NIC's rate in the simulation: held to c
     * times the limit, each of them moves at most the limit (a call of fewer channels than
     * NICs, one a NIC). Fitted on one cluster's rings of 1, 2, 4 and 8 GPUs a node
     * (docs/NETWORK.md): with 16 channels an 8-GPU node has 2 on each NIC, a 1-GPU node all 16
     * on its one. Grouped sends keep many peers' transfers in flight on a NIC (their own
     * efficiency, above) and are not held to it. */
    if (coll != SIM_NCCL_P2P && s.N > 1 && p->nccl_net_channel_bandwidth > 0) {
        double c = ceil((double)out->channels / sim_node_nics(p));
        double cap = c * p->nccl_net_channel_bandwidth / sim_nic_bandwidth(p);
        if (cap < net_eff) net_eff = cap;
    }
    out->eff_net = net_eff * proto_eff;
    /* NVLS and NVLS-tree: NCCL's latency of the whole call (the switch's, and the trees' depth
     * across nodes), once; their rounds pipeline behind it */
    if (best_a == A_NVLS) out->lat_intra = out->lat_net = 0, out->base += intra * 1e-6 * p->nccl_step_scale;
    /* NVLS's chunk steps each cost nccl_nvls_step (fitted): small chunks below 1 GiB make a
     * mid-sized call slower than its bandwidth says, as nccl-tests measures */
    if (best_a == A_NVLS) out->base += nvls_steps(out->channels, s.G, bytes) * p->nccl_nvls_step;
    if (best_a == A_NVLS_TREE)
        out->lat_intra = out->lat_net = 0,
        out->base += (intra * p->nccl_step_scale + 2 * log2_floor(s.N) * inter * net_scale) * 1e-6;
}

int deftsim_sim_nccl_choice(const deftsim_sim_params *p, deftsim_step_kind kind, uint64_t bytes,
                            deftsim_nccl_algo *algo, deftsim_nccl_proto *proto, uint32_t *channels)
{
    sim_nccl_call k;
    switch (kind) { /* the calls of sim_nccl.c, with the bytes each plans by */
    case DEFTSIM_STEP_ALLREDUCE: sim_nccl_plan_call(p, SIM_NCCL_ALLREDUCE, bytes, &k); break;
    case DEFTSIM_STEP_BCAST: sim_nccl_plan_call(p, SIM_NCCL_BCAST, bytes, &k); break;
    case DEFTSIM_STEP_ALLTOALL:
    case DEFTSIM_STEP_SENDRECV: sim_nccl_plan_call(p, SIM_NCCL_P2P, bytes, &k); break;
    case DEFTSIM_STEP_ALLGATHER:
        sim_nccl_plan_call(p, SIM_NCCL_ALLGATHER, bytes * (p->P ? p->P : 1), &k);
        break;
    default: return -1;
    }
    *algo = k.algo;
    *proto = k.proto;
    /* grouped sends: the group's channels; one transfer's, of a send to one peer */
    *channels = kind == DEFTSIM_STEP_ALLTOALL   ? sim_nccl_p2p_channels(p)
                : kind == DEFTSIM_STEP_SENDRECV ? sim_nccl_p2p_parts(p, bytes)
                                                : k.channels;
    return 0;
}
