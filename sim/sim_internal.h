/* sim_internal.h - what the files of sim/ share: the point-to-point layer the collective
 * algorithms are written against (sim_p2p.c implements it with SimGrid mailboxes), the
 * algorithms (sim_coll.c), the platform file the child loads (sim_platform.c) and the child's
 * entry points (sim_child.c). Internal to sim/.
 *
 * Call order in sim/: docs/ARCHITECTURE.md, the sim/ row of its folder table. */
#ifndef DEFTSIM_SIM_INTERNAL_H
#define DEFTSIM_SIM_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "deftsim_sim.h"

/* One worker's side of the simulation (an actor). */
typedef struct sim_worker sim_worker;

/* Analytic mode (sim_analytic.c): what a worker's collective posts, recorded instead of sent.
 * A WAIT waits for every non-eager SEND and every RECV posted since the previous WAIT. */
typedef enum { SIM_OP_SEND, SIM_OP_RECV, SIM_OP_WAIT } sim_op_kind;
typedef struct {
    uint64_t bytes;   /* SEND: payload bytes */
    uint32_t peer;    /* SEND: the receiver; RECV: the sender */
    uint8_t kind;     /* sim_op_kind */
    uint8_t eager;    /* SEND: completes without the receiver */
} sim_op;
typedef struct {
    sim_op *ops;
    size_t n, cap;
    int nomem;        /* a push failed: the recording is incomplete */
} sim_rec;
void sim_rec_push(sim_rec *r, sim_op_kind kind, uint32_t peer, uint64_t bytes, int eager);

/* A lone message of s bytes (payload and envelope) takes L + s / R on the platform. */
typedef struct {
    double L, R;
} sim_flow_model;

/* Whether analytic mode can hold for the schedules on p (a flat platform without backbone, one GPU a host,
 * crosstraffic off, LV08 or CM02, no algorithm that reads what it receives: MPI's
 * recursive-doubling allgather and scatter broadcasts); if not, why. */
int sim_analytic_eligible(const deftsim_sim_params *p, const deftsim_schedule *const *scheds,
                          size_t nsched, char *why, size_t cap);

/* The child's answer when analytic mode did not hold for the schedules (two messages met on a
 * link): the caller runs the full simulation. */
#define SIM_RC_NOT_ANALYTIC 1

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
/* Alltoall: rank r sends `bytes` to every other rank (MPI_Alltoall's equal blocks: pairwise
 * under mpi); `equal`: every rank sends as many (approximate mode may sample NCCL's waves). */
void sim_alltoall(sim_worker *w, const deftsim_sim_params *p, uint64_t bytes, int equal);

/* ---- sim_nccl.c: NCCL's algorithms (library = nccl) ------------------------------------------ */

/* The collectives of a step under library = nccl (docs/NETWORK.md, "NCCL's algorithms"). The
 * allgather is NCCL's ring when every block is equal, else p->nccl_allgatherv's mapping. */
void sim_nccl_allgather(sim_worker *w, const deftsim_sim_params *p, const uint64_t *bytes,
                        const sim_ag_info *info);
void sim_nccl_allreduce(sim_worker *w, const deftsim_sim_params *p, uint64_t bytes);
void sim_nccl_bcast(sim_worker *w, const deftsim_sim_params *p, uint32_t root, uint64_t bytes);
/* A group of sends and receives: rank r sends `bytes` to every other rank, in NCCL's waves. */
void sim_nccl_alltoall(sim_worker *w, const deftsim_sim_params *p, uint64_t bytes, int equal);
/* A step's own group (a SENDRECV or P2P round under library = nccl): one call (its launch,
 * the protocol of its largest send), its receives from src[0 .. nsrc) posted, then its sends of
 * bytes[i] to dst[i] (DEFTSIM_NO_PEER and the rank itself skipped), one wait and the step's
 * latency; the sends held to their channels' limits (grouped sends, as the alltoall's). */
void sim_nccl_group(sim_worker *w, const deftsim_sim_params *p, const uint32_t *src, size_t nsrc,
                    const uint32_t *dst, const uint64_t *bytes, size_t ndst);

/* NCCL's grouped point to point (src/init.cc ncclP2pSchedule, src/enqueue.cc): the P rounds
 * of rank `rank` (round 0 the rank itself): send[i] and recv[i], the peers of round i, by
 * groups of gs ranks (8 across nodes, the node's GPUs on one node, cut to a divisor of every
 * node's count) whose distances follow the quadratic sequence (x^2 + x) / 2 modulo the next
 * power of two (those beyond the groups left out), then the gs ranks of each group; wave[i]
 * (i >= 1), the batch of its channel that round i runs in: over Cp channels (a power of two),
 * round i goes to the channel of its base (its group of rounds across nodes, i on one node)
 * with log2 Cp bits reversed, and consecutive rounds of a channel share a batch while they
 * are among the same 8 (NCCL_MAX_DEV_WORK_P2P_PER_BATCH). Returns the waves: the most batches
 * of any channel. The same for every rank. */
#define SIM_NCCL_P2P_BATCH 8u
uint32_t sim_nccl_p2p_schedule(uint32_t P, uint32_t G, uint32_t Cp, uint32_t rank,
                               uint32_t *send, uint32_t *recv, uint32_t *wave);
/* A GPU's NIC as the platform builds it (sim_platform.c): nic_bandwidth on nodes of several
 * GPUs (bandwidth where it is 0), the host's own link on one-GPU hosts; bytes/s. */
double sim_nic_bandwidth(const deftsim_sim_params *p);
/* The NICs a node's GPUs use: nics_per_node, at most the GPUs; 1 on one-GPU hosts. */
uint32_t sim_node_nics(const deftsim_sim_params *p);
/* The p2p channels: nccl_p2p_channels (0: nccl_channels) rounded up to a power of two. */
uint32_t sim_nccl_p2p_channels(const deftsim_sim_params *p);
/* The channels NCCL gives a transfer to one peer in a group (src/graph/paths.cc,
 * ncclTopoComputeP2pChannels; src/enqueue.cc, addP2pToPlan): cmax, the comm's channels a peer
 * (the least over its peers, a power of two: on an NVSwitch node the p2p channels, across
 * nodes one for each 14 GB/s of the GPU's NIC, halved while a batch of 8 peers' would not fit
 * the p2p channels), and cmin, halved from it while every rank's would not; */
void sim_nccl_p2p_peer_channels(const deftsim_sim_params *p, uint32_t *cmin, uint32_t *cmax);
/* and those a transfer of `bytes` takes: parts of at least a chunk / 8 on one node (a chunk /
 * 2 across nodes), cmin of them or fewer, doubled up to cmax while a part exceeds 32 chunks
 * (one chunk across nodes); the chunk 512 KiB on one node, 128 KiB across nodes. */
uint32_t sim_nccl_p2p_parts(const deftsim_sim_params *p, uint64_t bytes);

/* NCCL's ring order of channel c over P ranks, G a node (worker w is GPU w mod G of node
 * w div G; the last node may hold fewer): nodes in order, and in node n its g GPUs from GPU
 * (c + 1) mod g to GPU c mod g, so that channel c enters a node at GPU c + 1 and leaves it
 * from GPU c (each channel leaves through its own GPU, and so its own NIC). The rank at ring
 * position pos, and the position of a rank. */
uint32_t sim_nccl_ring_rank(uint32_t P, uint32_t G, uint32_t c, uint32_t pos);
uint32_t sim_nccl_ring_pos(uint32_t P, uint32_t G, uint32_t c, uint32_t rank);
/* The chunk the rank at position q of a ring of n sends in step s of an allreduce's 2 (n - 1)
 * (reduce-scatter, then allgather): q - 1 - s mod n, NCCL's order; it receives the chunk its
 * predecessor sends. */
uint32_t sim_nccl_ring_chunk(uint32_t n, uint32_t q, uint32_t s);

/* NCCL's binary tree over n nodes (root 0, which has one child) and the second tree of its
 * double binary tree (which = 1: mirrored when n is even, shifted by one when odd). -1: no
 * such node. */
void sim_nccl_btree(uint32_t n, uint32_t node, int32_t *up, int32_t *d0, int32_t *d1);
void sim_nccl_dtree(uint32_t n, uint32_t node, uint32_t which, int32_t *up, int32_t *d0,
                    int32_t *d1);

/* Tree channel tc in [0, 2C) over ranks: the tree `tc / C` of the double binary tree over
 * nodes, and in every node a chain of its GPUs from GPU (tc mod C) mod g (the head, which
 * talks to the other nodes) on. up: the parent (-1 at the root); down: up to 3 children
 * (the next GPU of the chain, then the heads of the child nodes). */
typedef struct {
    int32_t up;
    int32_t down[3];
    uint32_t ndown;
} sim_nccl_links;
void sim_nccl_tree(uint32_t P, uint32_t G, uint32_t C, uint32_t tc, uint32_t rank,
                   sim_nccl_links *out);
/* The shape of a set of trees: NCCL's trees (a chain in each node under a double binary tree
 * of the nodes' chain heads, sim_nccl_tree) or NVLS-tree's (every GPU in a double binary tree
 * of the GPUs of its local rank, one a node). */
typedef struct {
    uint32_t P, G, C;
    int rails; /* 1: NVLS-tree's trees of local ranks */
} sim_nccl_tree_shape;
/* A rank's links in tree tc of a shape, and its depth (hops up to the root). */
void sim_nccl_tree_links(const sim_nccl_tree_shape *ts, uint32_t tc, uint32_t rank, sim_nccl_links *out);
uint32_t sim_nccl_tree_depth(const sim_nccl_tree_shape *ts, uint32_t tc, uint32_t rank);

/* auto: NCCL's predicted time (microseconds) of an allreduce of `bytes` with ring or tree
 * (Simple protocol), and the one NCCL picks (the shorter). */
double sim_nccl_predict_us(const deftsim_sim_params *p, deftsim_nccl_algo a, uint64_t bytes);
deftsim_nccl_algo sim_nccl_pick(const deftsim_sim_params *p, uint64_t bytes);

/* ---- sim_nccl_tune.c: how NCCL runs one call (nccl_model = tuned) ----------------------------- */

typedef enum { SIM_NCCL_ALLREDUCE, SIM_NCCL_ALLGATHER, SIM_NCCL_BCAST, SIM_NCCL_P2P } sim_nccl_coll;
typedef struct {
    deftsim_nccl_algo algo;   /* ring, tree, hierarchical or nvls (never auto) */
    deftsim_nccl_proto proto; /* LL, LL128 or Simple (never auto) */
    uint32_t channels;        /* the channels this call uses */
    double base;              /* seconds before the first step: the call's launch and NCCL's base
                                 latency of the pair */
    double floor;             /* the shortest the call takes: a thread that launches it on several
                                 GPUs is busy that long a call (calls back to back overlap the
                                 launches with the previous call's run); 0 with one GPU a thread */
    double lat_intra, lat_net; /* seconds a step costs whose sends stay in the node / cross it */
    double net_share;         /* the ring's allreduce and allgather: the share of its steps NCCL
                                 charges at lat_net, the same for every rank and round; -1: a
                                 rank's own share of sends that leave the node */
    double wire;              /* bytes on the wire per byte of data (LL 2, LL128 128/120) */
    double eff_intra, eff_net; /* the fraction of a link's bandwidth a transfer achieves */
    double predict_us;        /* NCCL's own predicted time of the call (tuned), else 0 */
} sim_nccl_call;
/* With nccl_model = plain: the configured algorithm (auto: sim_nccl_pick), Simple, the
 * configured channels, no costs, factors 1. With tuned: NCCL's choice and its costs. */
void sim_nccl_plan_call(const deftsim_sim_params *p, sim_nccl_coll coll, uint64_t bytes,
                        sim_nccl_call *out);
/* The bytes of a chunk of NCCL's tree allreduce for a call of `bytes` planned as k: NCCL's
 * step size, halved as its enqueue.cc does for a medium call (sim_nccl.c). */
uint64_t sim_nccl_tree_chunk(const deftsim_sim_params *p, const sim_nccl_call *k, uint64_t bytes);

/* Approximate mode: ring steps simulated before the rest is scaled from the last of them. */
#define SIM_APPROX_RING_STEPS 6u
/* Approximate mode's samples of a sequence of n like rounds (an equal-block NCCL group's
 * waves, a run of like P2P rounds), when n > SIM_APPROX_SEQ_MIN: the first three (where
 * rounds inside a node come first) and those at n / 4, n / 2 and 3 n / 4 (the far peers of a
 * fat-tree). */
#define SIM_APPROX_SEQ_MIN 8u
/* Approximate mode: at most about this many rounds of a wave of an NCCL group of equal blocks
 * run, each with the bytes of the rounds it stands for (sim_nccl.c, group_p2p). */
#define SIM_APPROX_WAVE_ROUNDS 16u
static inline int sim_approx_seq_sampled(uint32_t i, uint32_t n)
{
    return i < 3 || i == n / 4 || i == n / 2 || i == 3 * (uint64_t)n / 4;
}

/* A sequence of like rounds in approximate mode, as every rank runs it: _start starts it
 * from the latest rank's start; _round, before round i of n, passes an unsampled round at the
 * pace (0) or lets a sampled one run (1); _done, after a sampled round, takes the latest end
 * over the ranks and keeps the longest sampled round so far as the pace. Every rank makes the
 * same calls. */
typedef struct {
    double end, pace, t0;
} sim_approx_seq;
void sim_approx_seq_start(sim_worker *w, sim_approx_seq *q);
int sim_approx_seq_round(sim_worker *w, sim_approx_seq *q, uint32_t i, uint32_t n);
void sim_approx_seq_done(sim_worker *w, sim_approx_seq *q);

/* ---- sim_platform.c ------------------------------------------------------------------------ */

/* The SimGrid XML of a generated platform (not topology = file), malloc'd. */
deftsim_status sim_platform_xml(const deftsim_sim_params *p, char **out, size_t *len);

/* The platform file the child loads: the user's file (checked readable), or the generated XML
 * in a temporary file under $TMPDIR. On Linux the temporary file loses its name at once and
 * the child reads it through the inherited descriptor fd ("/proc/self/fd/N", is_fd = 1), so a
 * killed caller leaves nothing behind. path points into the struct: do not copy it. */
typedef struct {
    const char *path; /* what the child loads */
    char tmp[4200];   /* the generated file, "" if none */
    int fd;           /* its descriptor, or -1 */
    int is_fd;        /* path is the descriptor's: the file has no name */
} sim_platform_file;
deftsim_status sim_platform_open(const deftsim_sim_params *p, sim_platform_file *pf);
/* Closes the descriptor or removes the temporary file. Also on an unopened pf with fd = -1
 * and tmp = "". */
void sim_platform_close(sim_platform_file *pf);

/* ---- sim_nodes.c: multi-GPU nodes ------------------------------------------------------------ */

/* Shortest "%.*g" text that reads back as exactly d. */
void sim_shortest(double d, char *buf, size_t cap);

/* The attributes of a <cluster> element that give it p's topology, each on a line of its own
 * led by indent: flat's backbone (bb: its bandwidth's text) when backbone_bandwidth > 0, or
 * the fat tree's, torus's or dragonfly's topology with its parameters tp. One writer for the
 * one-GPU cluster (sim_platform.c) and the multi-GPU nodes' network (sim_nodes_xml). */
void sim_cluster_topology(FILE *f, const deftsim_sim_params *p, const char *tp, const char *bb,
                          const char *indent);

/* The node keys of p (gpus_per_node, intra_*, nics_per_node, nic_bandwidth): messages start
 * with the key ("nics_per_node: 9 is not in 1 .. gpus_per_node (8)"). Nothing to check at
 * gpus_per_node = 1 but that it is not 0. */
deftsim_status sim_nodes_check(const deftsim_sim_params *p);

/* The whole platform XML for gpus_per_node > 1: tp the inter-node topology's parameters (""
 * for flat), net_hosts its host count (the ports, at least the NICs), net_sketch its drawing. */
void sim_nodes_xml(FILE *f, const deftsim_sim_params *p, const char *tp, uint64_t net_hosts,
                   const char *net_sketch);

/* ---- sim_child.c: the forked child ------------------------------------------------------------ */

/* What the child writes to its result pipe: this header, msglen bytes of message, then (when
 * rc == 0) the start, end, sent and recv arrays (steps x workers each). */
#define SIM_MAGIC 0x6d697364u /* "dsim" */
#define SIM_MSG_MAX 2048
typedef struct {
    uint32_t magic;
    int32_t rc;
    uint32_t msglen;
    uint32_t pad;
    uint64_t messages;
} sim_child_header;

/* Results the child fills: layout as deftsim_sim_result (start, end, sent, recv per step and
 * worker) plus the message count. */
typedef struct {
    double *start, *end;
    uint64_t *sent, *recv;
    uint64_t messages;
} sim_child_out;

/* The child of deftsim_sim_run, right after fork(): dies with `parent`, sends its stdout and
 * stderr to err_fd, runs the simulation of the platform at platform_path and writes the
 * header, message and arrays to out_fd. Never returns (_exit). */
_Noreturn void sim_child_main(pid_t parent, int out_fd, int err_fd, const deftsim_sim_params *p,
                              const char *platform_path, const deftsim_schedule *const *scheds,
                              size_t nsched, const size_t *step_offset);

/* A batch (deftsim_sim_run_batch): its first child loads the platform once, then forks a
 * grandchild for each job, up to p->procs running at once, which simulates the job's
 * schedules on the loaded platform and writes as sim_child_main does to the job's out and err
 * pipes; the batch's child writes each grandchild's wait status and peak resident set to
 * status_fd in job order. At most SIM_BATCH_MAX jobs. */
#define SIM_BATCH_MAX 32
typedef struct {
    const deftsim_schedule *const *scheds;
    size_t nsched;
    const size_t *offs; /* the result's step_offset */
} sim_batch_job;
typedef struct {
    int32_t status;     /* as waitpid() gives it; -1 when the fork failed */
    int64_t maxrss_kib; /* the grandchild's peak resident set */
} sim_batch_status;
_Noreturn void sim_child_batch_main(pid_t parent, int status_fd, const int *out_fds,
                                    const int *err_fds, const deftsim_sim_params *p,
                                    const char *platform_path, const sim_batch_job *jobs,
                                    size_t njobs);

/* The check of a user's platform file for P workers, in the current (forked) process: at least
 * P hosts, and a route from the first worker's host to every other worker's host and back
 * (hosts in worker order, as the simulation takes them). A file SimGrid cannot parse aborts
 * the process, and SimGrid 3.32 crashes looking up a route that does not exist: prog (memory
 * shared with the parent) says how far the check went. */
typedef struct {
    int32_t stage;           /* 0 loading the file, 1 looking up the route below, 2 done */
    uint32_t from, to;       /* workers */
    char from_name[128], to_name[128];
} sim_check_progress;

/* The child of deftsim_sim_check_platform, right after fork(): dies with `parent`, sends its
 * stdout and stderr to err_fd, checks the file and writes int32 rc (0, or -1 with a message
 * such as "PATH has 1 host, fewer than the 2 workers"), uint32 length and the message to
 * out_fd. Never returns (_exit). */
_Noreturn void sim_child_check_main(pid_t parent, int out_fd, int err_fd, const char *platform_path,
                                    uint32_t P, sim_check_progress *prog);

/* Host names of a user platform in worker order: names compared with digit runs as numbers
 * ("node-2" before "node-10"). */
int sim_natural_cmp(const char *a, const char *b);

#endif
