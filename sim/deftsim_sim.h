/* deftsim_sim.h - the network simulation: turns schedules into simulated time with SimGrid.
 *
 * One SimGrid actor per worker, each on its own host of a cluster platform. A COMPUTE step is
 * injected as the duration the sparsifier measured on the real kernel (the actor sleeps for
 * it, so host speeds play no part), or takes no time at all with compute = none (then the
 * simulated times are a function of the schedules' bytes alone); a collective runs as the point-to-point pattern of the
 * chosen algorithm with the real byte counts (the message payload is a small integer, the
 * simulated size is separate: no data travels); SENDRECV runs its own messages. A collective
 * marked DEFTSIM_STEP_ASYNC runs on a second actor of its worker, in order, while the worker
 * goes on (deftsim_schedule.h).
 * docs/NETWORK.md describes the platforms, models, algorithms and their validation.
 *
 * Messages behave as SimGrid's SMPI sends them, so that an algorithm here and the same
 * algorithm in SMPI give the same time: every message carries envelope_bytes more than its
 * payload (SMPI adds 16 for tag, source and communicator), and a send of fewer than
 * eager_threshold payload bytes returns at once, the transfer continuing without the sender
 * (SMPI's smpi/send-is-detached-thresh, 65536 by default); a larger send waits until it is
 * received. A transfer starts when both sides have posted it.
 *
 * Several schedules (the iterations of one point) are simulated each on its own, from the same
 * loaded platform and from simulated instant 0, so each iteration is timed as if alone; up to
 * `procs` of them at once (exact and approximate modes; analytic mode computes them in turn in
 * one process, every worker starting schedule i once the last one finished schedule i-1, and
 * times relative to that instant).
 *
 * SimGrid's engine is a process-wide singleton that cannot be started twice in one process
 * (3.32's C API keeps it in a function-static object and seals the platform once), so
 * deftsim_sim_run() runs each simulation in a forked child that sends its results back over a
 * pipe; the caller's process is untouched by SimGrid and the child's memory is released when
 * it ends. */
#ifndef DEFTSIM_SIM_H
#define DEFTSIM_SIM_H

#include <stddef.h>
#include <stdint.h>

#include "deftsim_error.h"
#include "deftsim_schedule.h"

typedef enum {
    DEFTSIM_TOPO_FLAT,      /* hosts on one non-blocking switch (optionally a shared backbone) */
    DEFTSIM_TOPO_FATTREE,   /* SimGrid's FAT_TREE cluster */
    DEFTSIM_TOPO_TORUS,     /* SimGrid's TORUS cluster */
    DEFTSIM_TOPO_DRAGONFLY, /* SimGrid's DRAGONFLY cluster */
    DEFTSIM_TOPO_FILE,      /* the user's own SimGrid platform file */
    DEFTSIM_TOPO_COUNT
} deftsim_topology;

/* How the GPUs of a multi-GPU node are joined (gpus_per_node > 1; docs/NETWORK.md). */
typedef enum {
    DEFTSIM_INTRA_NVSWITCH,    /* a non-blocking switch: every GPU its own up/down port */
    DEFTSIM_INTRA_NVLINK_RING, /* point-to-point links between ring neighbours */
    DEFTSIM_INTRA_NVLINK_MESH, /* a point-to-point link between every pair of GPUs */
    DEFTSIM_INTRA_PCIE,        /* one host bridge every GPU shares (both directions) */
    DEFTSIM_INTRA_COUNT
} deftsim_intra_fabric;

typedef enum { DEFTSIM_NET_LV08, DEFTSIM_NET_CM02, DEFTSIM_NET_SMPI, DEFTSIM_NET_COUNT } deftsim_net_model;

typedef enum {
    DEFTSIM_AG_RING,               /* MPICH's ring (allgatherv: 256 KiB pipelining) */
    DEFTSIM_AG_RECURSIVE_DOUBLING, /* MPICH's, with its non-power-of-two completion */
    DEFTSIM_AG_BRUCK,              /* Open MPI's Bruck (any P, ceil(log2 P) rounds) */
    DEFTSIM_AG_COUNT
} deftsim_allgather_algo;

typedef enum {
    DEFTSIM_AR_RING,               /* reduce-scatter ring then allgather ring */
    DEFTSIM_AR_RECURSIVE_DOUBLING, /* MPICH's, extra ranks folded into partners */
    DEFTSIM_AR_RABENSEIFNER,       /* MPICH's recursive halving + recursive doubling */
    DEFTSIM_AR_COUNT
} deftsim_allreduce_algo;

typedef enum {
    DEFTSIM_BC_BINOMIAL,               /* binomial tree */
    DEFTSIM_BC_SCATTER_RDB_ALLGATHER,  /* binomial scatter, recursive-doubling allgather */
    DEFTSIM_BC_SCATTER_RING_ALLGATHER, /* binomial scatter, ring allgather */
    DEFTSIM_BC_COUNT
} deftsim_bcast_algo;

typedef enum {
    DEFTSIM_SIM_EXACT,       /* every message simulated */
    DEFTSIM_SIM_APPROXIMATE, /* ring steps sampled and scaled (docs/NETWORK.md); opt-in */
    DEFTSIM_SIM_ANALYTIC,    /* contention-free closed form where it provably holds, else
                                exact (docs/NETWORK.md, "Analytic mode"); opt-in */
    DEFTSIM_SIM_MODE_COUNT
} deftsim_sim_mode;

/* Whose collective algorithms run: MPI's (the algorithms above, one message pattern per key) or
 * NCCL's (sim_nccl.c, docs/NETWORK.md "NCCL's algorithms"). */
typedef enum {
    DEFTSIM_LIB_MPI,  /* allgather, allreduce, bcast as configured; pairwise alltoall */
    DEFTSIM_LIB_NCCL, /* NCCL's rings and trees over GPUs grouped gpus_per_node a node */
    DEFTSIM_LIB_COUNT
} deftsim_net_library;

/* NCCL's allreduce. */
typedef enum {
    DEFTSIM_NCCL_RING,         /* ring reduce-scatter + allgather over NCCL's ring order */
    DEFTSIM_NCCL_TREE,         /* double binary tree over nodes, a chain in each node */
    DEFTSIM_NCCL_HIERARCHICAL, /* intra-node reduce-scatter, inter-node ring, intra allgather */
    DEFTSIM_NCCL_AUTO,         /* by NCCL's tuning model (size, P, nodes): ring or tree, and
                                  NVLS where the tuned model allows it */
    DEFTSIM_NCCL_NVLS,         /* NVLink SHARP: the NVSwitch reduces (one node, nvswitch,
                                  nccl_arch = hopper; else the ring) */
    DEFTSIM_NCCL_NVLS_TREE,    /* NVLS in each node, a double binary tree of each local rank
                                  across nodes (whole nvswitch nodes, hopper; else the ring) */
    DEFTSIM_NCCL_ALGO_COUNT
} deftsim_nccl_algo;

/* How closely NCCL's runs are modelled (docs/NETWORK.md, "NCCL as it runs"). */
typedef enum {
    DEFTSIM_NCCL_MODEL_PLAIN, /* the message pattern alone: every message a Simple-protocol one
                                 at the links' full speed, no per-step or per-call cost (what the
                                 closed forms of tests/sim/test_sim_nccl.c check) */
    DEFTSIM_NCCL_MODEL_TUNED, /* NCCL as it runs: its protocols (LL, LL128, Simple) with their
                                 per-step latencies and wire overheads, the achieved fraction of
                                 each link, the cost of a call, fewer channels for small sizes,
                                 NCCL's choice of algorithm and protocol, NVLS */
    DEFTSIM_NCCL_MODEL_COUNT
} deftsim_nccl_model;

/* NCCL's protocols (NCCL_PROTO). */
typedef enum {
    DEFTSIM_NCCL_PROTO_AUTO,   /* NCCL's tuning model picks per collective and size */
    DEFTSIM_NCCL_PROTO_LL,     /* 8-byte data + 8-byte flag lines: half the bandwidth, lowest latency */
    DEFTSIM_NCCL_PROTO_LL128,  /* 120 bytes of data in every 128-byte line */
    DEFTSIM_NCCL_PROTO_SIMPLE, /* full lines and fences: full bandwidth, highest latency */
    DEFTSIM_NCCL_PROTO_COUNT
} deftsim_nccl_proto;

/* The GPU generation, which selects NCCL's tuning constants (LL's bandwidth cap, LL128's
 * per-channel cap, NVLS's efficiency). */
typedef enum {
    DEFTSIM_NCCL_ARCH_VOLTA,
    DEFTSIM_NCCL_ARCH_AMPERE,
    DEFTSIM_NCCL_ARCH_HOPPER,
    DEFTSIM_NCCL_ARCH_COUNT
} deftsim_nccl_arch;

/* nccl_model = tuned: the NCCL release whose tuning figures run (docs/NETWORK.md). */
typedef enum {
    DEFTSIM_NCCL_TUNING_2_30, /* NCCL 2.30.7's (the default) */
    DEFTSIM_NCCL_TUNING_2_8,  /* NCCL 2.8.4's */
    DEFTSIM_NCCL_TUNING_COUNT
} deftsim_nccl_tuning;

/* NCCL has no allgatherv: what an ALLGATHER step with unequal blocks becomes. */
typedef enum {
    DEFTSIM_NCCL_AGV_PAD,   /* ring allgather of every block padded to the largest */
    DEFTSIM_NCCL_AGV_BCAST, /* one ring broadcast per rank, in a group (rank order) */
    DEFTSIM_NCCL_AGV_P2P,   /* a group of sends and receives: every block to every rank */
    DEFTSIM_NCCL_AGV_COUNT
} deftsim_nccl_agv;

/* What a COMPUTE step costs in simulated time. */
typedef enum {
    DEFTSIM_SIM_COMPUTE_MEASURED, /* the step's seconds per worker (measured on the kernel) */
    DEFTSIM_SIM_COMPUTE_NONE,     /* nothing: every worker leaves the step when it enters it, so
                                     the simulated times depend on the bytes alone (a given step,
                                     DEFTSIM_STEP_GIVEN, keeps its duration) */
    DEFTSIM_SIM_COMPUTE_COUNT
} deftsim_sim_compute;

/* Stable names in enum order, NULL-terminated ("flat", "LV08", "bruck", ...). */
extern const char *const deftsim_topology_names[];
extern const char *const deftsim_net_model_names[];
extern const char *const deftsim_intra_fabric_names[];
extern const char *const deftsim_allgather_names[];
extern const char *const deftsim_allreduce_names[];
extern const char *const deftsim_bcast_names[];
extern const char *const deftsim_sim_mode_names[];
extern const char *const deftsim_sim_compute_names[];
extern const char *const deftsim_net_library_names[];
extern const char *const deftsim_nccl_algo_names[];
extern const char *const deftsim_nccl_agv_names[];
extern const char *const deftsim_nccl_model_names[];
extern const char *const deftsim_nccl_proto_names[];
extern const char *const deftsim_nccl_arch_names[];
extern const char *const deftsim_nccl_tuning_names[];

const char *deftsim_topology_name(deftsim_topology t);
const char *deftsim_net_model_name(deftsim_net_model m);
const char *deftsim_intra_fabric_name(deftsim_intra_fabric f);
const char *deftsim_allgather_name(deftsim_allgather_algo a);
const char *deftsim_allreduce_name(deftsim_allreduce_algo a);
const char *deftsim_bcast_name(deftsim_bcast_algo a);
const char *deftsim_sim_mode_name(deftsim_sim_mode m);
const char *deftsim_nccl_algo_name(deftsim_nccl_algo a);
const char *deftsim_nccl_agv_name(deftsim_nccl_agv a);

typedef struct {
    uint32_t P;                      /* workers: actors on hosts 0 .. P-1 */
    deftsim_topology topology;
    const char *platform_file;       /* topology = file: the SimGrid platform XML */
    const char *topology_params;     /* SimGrid's topo_parameters; NULL or "": derived from P */
    double bandwidth;                /* bytes/s of every link */
    double latency;                  /* seconds of every link */
    double backbone_bandwidth;       /* flat only: 0 = non-blocking switch, else a shared backbone */
    deftsim_net_model model;
    int crosstraffic;                /* SimGrid's network/crosstraffic (reverse-path traffic) */
    deftsim_allgather_algo allgather;
    deftsim_allreduce_algo allreduce;
    deftsim_bcast_algo bcast;
    uint64_t eager_threshold;        /* sends below it do not wait (bytes) */
    uint32_t envelope_bytes;         /* added to every message */
    uint32_t elem_bytes;             /* element size of ALLREDUCE vectors (chunking granularity) */
    uint32_t gpus_per_node;          /* GPUs a node (1: one worker a host) */
    deftsim_intra_fabric intra_fabric; /* gpus_per_node > 1: how a node's GPUs are joined */
    double intra_bandwidth;          /* bytes/s of every intra-node link, per direction */
    double intra_latency;            /* seconds of every intra-node link */
    uint32_t nics_per_node;          /* 1 .. gpus_per_node; GPU g uses NIC g * nics / G */
    double nic_bandwidth;            /* bytes/s of every NIC, per direction; 0: bandwidth */
    deftsim_sim_mode mode;
    deftsim_sim_compute compute;     /* COMPUTE steps as measured, or of no duration */
    deftsim_net_library library;     /* mpi: the algorithms above; nccl: the ones below */
    deftsim_nccl_algo nccl_algorithm; /* library = nccl: the allreduce */
    uint32_t nccl_channels;          /* library = nccl: parallel rings (trees: 2 a channel) */
    deftsim_nccl_agv nccl_allgatherv; /* library = nccl: ALLGATHER steps of unequal blocks */
    uint64_t nccl_buffsize;          /* library = nccl: NCCL_BUFFSIZE, bytes; a step is 1/8 of
                                        it, a ring chunk 4 steps, a tree or broadcast chunk 1 */
    deftsim_nccl_model nccl_model;   /* library = nccl: plain (the pattern) or tuned */
    deftsim_nccl_proto nccl_proto;   /* tuned: the protocol, or auto (NCCL's choice) */
    deftsim_nccl_arch nccl_arch;     /* tuned: the GPU generation of NCCL's tuning constants */
    deftsim_nccl_tuning nccl_tuning; /* tuned: the NCCL release of those constants */
    double nccl_launch;              /* tuned: seconds every collective call costs before its
                                        first step (kernel launch and set-up) */
    double nccl_launch_gpu;          /* tuned: seconds each further GPU that one thread
                                        launches the call on adds to nccl_launch */
    uint32_t nccl_gpus_per_thread;   /* tuned: GPUs one thread launches a call on (1: a
                                        process per GPU; nccl-tests' -g) */
    double nccl_nvl_efficiency;      /* tuned: the fraction of an intra-node link's bandwidth a
                                        Simple-protocol transfer achieves, (0, 1] */
    double nccl_net_efficiency;      /* tuned: the same for a transfer between nodes */
    double nccl_p2p_net_efficiency;  /* tuned: the same for grouped sends and receives
                                        (alltoall, allgatherv = p2p); < 0: nccl_net_efficiency */
    double nccl_net_channel_bandwidth; /* tuned: bytes/s one channel of a ring or tree moves
                                          between nodes at most (grouped sends excepted);
                                          0: no limit */
    uint32_t nccl_p2p_channels;      /* library = nccl: the channels of grouped sends and
                                        receives (0: nccl_channels), rounded up to a power of two */
    double nccl_p2p_channel_bandwidth; /* tuned: bytes/s one channel of a grouped send moves
                                          within a node at most; 0: no limit */
    double nccl_p2p_net_channel_bandwidth; /* tuned: the same between nodes */
    double nccl_ll_efficiency;       /* tuned: a further fraction of the link an LL transfer
                                        achieves beyond its 8-byte flags, (0, 1] */
    double nccl_ll128_efficiency;    /* tuned: the same for LL128 beyond its 120/128 */
    double nccl_step_scale;          /* tuned: multiplies NCCL's per-step latencies (1: as in
                                        NCCL's tuning tables) */
    double nccl_net_step_scale;      /* tuned: the same for the steps between nodes; < 0:
                                        nccl_step_scale */
    double nccl_nvls_step;           /* tuned: seconds each of an NVLS call's chunk steps adds
                                        (NCCL's chunk rule sets their number) */
    unsigned procs;                  /* several schedules (exact and approximate modes): how
                                        many are simulated at once, each in its own process
                                        (0 or 1: one at a time); the results do not depend
                                        on it */
} deftsim_sim_params;

/* The NCCL defaults: 2 channels (NCCL duplicates every ring its topology search finds, so it
 * never runs fewer than 2), NCCL_BUFFSIZE 4 MiB (NCCL's default). */
#define DEFTSIM_NCCL_CHANNELS_DEFAULT 2u
#define DEFTSIM_NCCL_CHANNELS_MAX 64u
#define DEFTSIM_NCCL_BUFFSIZE_DEFAULT (4ull << 20)

/* The defaults of docs/NETWORK.md: flat, 25 Gbit/s and 1 us per link, LV08, no crosstraffic,
 * Bruck allgather, Rabenseifner allreduce, binomial broadcast, eager threshold 65536,
 * envelope 16, 4-byte elements, exact, compute as measured, one GPU a node (for more: an
 * NVSwitch of 450 GB/s and 1 us per port, one NIC as fast as bandwidth), library mpi
 * (NCCL's settings: ring, 2 channels, pad, 4 MiB buffers). P is left 0. */
void deftsim_sim_params_default(deftsim_sim_params *p);

/* library = nccl: the algorithm, protocol and channels a collective step of `kind` runs with,
 * `bytes` being each rank's block (an ALLGATHER of equal blocks, an ALLTOALL's block to each
 * peer), as the simulation plans the call (nccl_model = tuned: NCCL's choice, or what the
 * keys force); for an ALLTOALL the p2p channels, for a SENDRECV (a send of `bytes` to one
 * peer, one group) the channels of that transfer. 0 for ALLREDUCE, ALLGATHER, BCAST, ALLTOALL
 * and SENDRECV; -1 for other kinds. */
int deftsim_sim_nccl_choice(const deftsim_sim_params *p, deftsim_step_kind kind, uint64_t bytes,
                            deftsim_nccl_algo *algo, deftsim_nccl_proto *proto, uint32_t *channels);

/* The platform for P workers: topology parameters (derived from P when unset, written into
 * params_buf) and the number of hosts it has (at least P). Checks everything a platform
 * needs; messages name the field ("topology_params '4,4': a torus needs ..."). For
 * topology = file, loads nothing: params_buf is "" and hosts is 0 (known only to SimGrid). */
deftsim_status deftsim_sim_platform_shape(const deftsim_sim_params *p, char *params_buf,
                                          size_t cap, uint64_t *hosts);

/* Writes the generated platform XML (with a comment naming its shape) for p to path,
 * atomically. Refused for topology = file. One GPU a node: host i is named "node-<i>";
 * worker i runs on it. gpus_per_node = G > 1: worker w runs on host "node-<w / G>-gpu-<w % G>"
 * (deftsim_sim_host_name), the NICs are the hosts "port-<k>" of the inter-node topology
 * (docs/NETWORK.md, "Multi-GPU nodes"). */
deftsim_status deftsim_sim_write_platform(const deftsim_sim_params *p, const char *path);

/* The name of worker w's host on a generated platform: "node-<w>", or with G GPUs a node
 * "node-<w / G>-gpu-<w % G>" (the names sort in worker order, digit runs as numbers). */
void deftsim_sim_host_name(const deftsim_sim_params *p, uint32_t w, char *buf, size_t cap);

/* topology = file: loads p->platform_file with SimGrid in a forked child (SimGrid aborts the
 * process on a file it cannot parse) and checks that it can carry p->P workers: at least P
 * hosts, and a route between the first worker's host and every other one. DEFTSIM_E_INPUT with
 * a message naming the file: "net.xml is not a SimGrid platform: Parse error at net.xml:5:
 * ...", "net.xml has 1 host, fewer than the 2 workers", "net.xml has no route from host a to
 * host b (workers 0 and 1)". Other topologies: DEFTSIM_OK, nothing loaded. */
deftsim_status deftsim_sim_check_platform(const deftsim_sim_params *p);

/* What a simulation produced. Step s of schedule i is row step_offset[i] + s of every per-step
 * array, which holds one entry per worker: [(step_offset[i] + s) * P + w]. Times are seconds
 * relative to the start of the schedule (every worker starts it at once). */
typedef struct {
    uint32_t P;
    size_t nsched;
    size_t *step_offset;       /* nsched + 1 */
    double *start, *end;       /* when worker w entered and left the step */
    uint64_t *sent, *recv;     /* payload bytes the worker sent and received in the step */
    double *iteration_seconds; /* nsched: the last worker's end of its last step */
    double *comm_seconds;      /* nsched: sum over the collectives of (last worker out - last
                                  worker in) */
    uint64_t messages;         /* point-to-point messages simulated (sampled ones in approximate
                                  mode) */
    double wall_seconds;       /* the simulation's wall time, fork to result */
    uint64_t peak_rss_bytes;   /* the simulating process's peak resident memory (several:
                                  the largest one's) */
    unsigned procs;            /* simulating processes at most at once (see procs above) */
    deftsim_sim_mode mode;     /* what ran: analytic mode gives ANALYTIC or, where its closed
                                  form does not hold, EXACT */
    char mode_note[256];       /* mode = analytic, EXACT ran: why ("crosstraffic is on", "two
                                  messages in flight at once on the up link of worker 3 ...") */
} deftsim_sim_result;

/* Simulates the schedules, each as if alone (see above; several: up to p->procs at once, from
 * one load of the platform, as deftsim_sim_run_batch runs its jobs). Every schedule must have
 * p->P ranks; a collective needs P > 1 to send anything. Runs SimGrid in a forked child;
 * DEFTSIM_E_RUNTIME with SimGrid's last messages if it fails. wall_seconds is the time from
 * the first fork to the last result, peak_rss_bytes the largest process's peak. */
deftsim_status deftsim_sim_run(const deftsim_sim_params *p, const deftsim_schedule *const *scheds,
                               size_t nsched, deftsim_sim_result *out);

/* Several independent simulations on one platform (`deftsim bench sim`: every method at one
 * P; deftsim_sim_run's schedules): job i's schedule simulated as deftsim_sim_run() simulates
 * it alone, its results in out[i] (the same to the last digit; a job of several schedules
 * runs them in its one process, each from the instant the last worker ended the one before,
 * as analytic mode does). The platform is loaded once in a forked child, which forks a
 * process for each job, up to p->procs at once (up to 32 jobs a load); wall_seconds of job i
 * is the time from the end of job i - 1 (the first job's includes the platform's load), so
 * with one process at a time the job's own, peak_rss_bytes the job's process's peak (the
 * loaded platform included, as when it loads its own). In analytic mode, and under
 * AddressSanitizer, each job runs on its own as deftsim_sim_run() does. On failure every
 * out[i] is freed and *failed (may be NULL) names the job. */
typedef struct {
    const deftsim_schedule *const *scheds;
    size_t nsched;
} deftsim_sim_job;
deftsim_status deftsim_sim_run_batch(const deftsim_sim_params *p, const deftsim_sim_job *jobs,
                                     size_t njobs, deftsim_sim_result *out, size_t *failed);

void deftsim_sim_result_free(deftsim_sim_result *r);

/* Where worker w's step s of schedule i starts and ends (seconds from the schedule's start). */
static inline double deftsim_sim_start(const deftsim_sim_result *r, size_t i, size_t s, uint32_t w)
{
    return r->start[(r->step_offset[i] + s) * r->P + w];
}
static inline double deftsim_sim_end(const deftsim_sim_result *r, size_t i, size_t s, uint32_t w)
{
    return r->end[(r->step_offset[i] + s) * r->P + w];
}

#endif
