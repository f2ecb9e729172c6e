/* config_keys.c - the schema of scenario files: the enum names, the table of every key (one
 * row of `keys` below a key, with its type, default and help; the methods' option keys appended
 * from the registry), the sections, and where a key got its value (deftsim_config_where).
 * The lowest file of src/config/: config.c (the reader, overrides, the lifecycle),
 * config_check.c and config_params.c call into it, and it calls none of them. */
#include "config_internal.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ini.h>

#include "deftsim_model.h"
#include "deftsim_util.h"

/* ---- enum names ------------------------------------------------------------------------- */

static const char *const source_names[] = {"synthetic", "trace", NULL};
static const char *const scales_names[] = {"seed", "kinds", NULL};
static const char *const feedback_names[] = {"full", "none", "sampled", NULL};
static const char *const device_names[] = {"cpu", "cuda", "profile", NULL};
static const char *const train_model_names[] = {"mlp", "cnn", NULL};
static const char *const timing_statistic_names[] = {"min", "median", NULL};
static const char *const timing_cache_names[] = {"cold", "warm", NULL};
static const char *const spread_names[] = {"params", "uniform", NULL};
const char *const deftsim_exec_network_names[] = {"simulate", "mpi", NULL};

/* Enum fields are stored through int-sized copies (see deftsim_cfg_commit()). */
_Static_assert(sizeof(deftsim_method) == sizeof(int), "enum storage");
_Static_assert(sizeof(deftsim_source) == sizeof(int), "enum storage");
_Static_assert(sizeof(deftsim_wire) == sizeof(int), "enum storage");
_Static_assert(sizeof(deftsim_feedback) == sizeof(int), "enum storage");
_Static_assert(sizeof(deftsim_device_kind) == sizeof(int), "enum storage");
_Static_assert(sizeof(deftsim_topology) == sizeof(int), "enum storage");
_Static_assert(sizeof(deftsim_net_model) == sizeof(int), "enum storage");
_Static_assert(sizeof(deftsim_allgather_algo) == sizeof(int), "enum storage");
_Static_assert(sizeof(deftsim_allreduce_algo) == sizeof(int), "enum storage");
_Static_assert(sizeof(deftsim_bcast_algo) == sizeof(int), "enum storage");
_Static_assert(sizeof(deftsim_sim_mode) == sizeof(int), "enum storage");
_Static_assert(sizeof(deftsim_sim_compute) == sizeof(int), "enum storage");
_Static_assert(sizeof(deftsim_intra_fabric) == sizeof(int), "enum storage");
_Static_assert(sizeof(deftsim_train_model) == sizeof(int), "enum storage");
_Static_assert(sizeof(deftsim_timing_statistic) == sizeof(int), "enum storage");
_Static_assert(sizeof(deftsim_timing_cache) == sizeof(int), "enum storage");
_Static_assert(sizeof(deftsim_backward_spread) == sizeof(int), "enum storage");
_Static_assert(sizeof(deftsim_exec_network) == sizeof(int), "enum storage");
/* The methods' INT and ENUM options are stored the same way (config_methods.c). */
_Static_assert(sizeof(((deftsim_opt_value *)0)->i) == sizeof(int), "option storage");

static const char *enum_name(const char *const *names, size_t count, int v)
{
    return v >= 0 && (size_t)v < count ? names[v] : "?";
}
#define ENUM_NAME(names, v) enum_name(names, sizeof names / sizeof names[0] - 1, (int)(v))

const char *deftsim_source_name(deftsim_source s) { return ENUM_NAME(source_names, s); }
const char *deftsim_feedback_name(deftsim_feedback f) { return ENUM_NAME(feedback_names, f); }
const char *deftsim_timing_statistic_name(deftsim_timing_statistic s)
{
    return ENUM_NAME(timing_statistic_names, s);
}
const char *deftsim_timing_cache_name(deftsim_timing_cache c)
{
    return ENUM_NAME(timing_cache_names, c);
}
const char *deftsim_device_kind_name(deftsim_device_kind k) { return ENUM_NAME(device_names, k); }
const char *deftsim_train_model_name(deftsim_train_model m) { return ENUM_NAME(train_model_names, m); }

/* ---- the schema ------------------------------------------------------------------------- */

static const char *check_tail(double v)
{
    if (v > 1e6) return "is above 1e6 (use 0 for Gaussian)";
    return v == 0 || v > 2 ? NULL : "is neither 0 (Gaussian) nor greater than 2";
}

static const char *check_kind_signal(double v)
{
    return v == -1 || (v >= 0 && v <= 1) ? NULL : "is neither -1 (the key signal) nor in [0, 1]";
}

static const char *check_kind_tail(double v)
{
    return v == -1 ? NULL : check_tail(v);
}

static const char *check_kind_field(double v)
{
    return v == -1 || (v >= 0 && v <= 6) ? NULL : "is neither -1 (the key field) nor in [0, 6]";
}

static const char *check_p2p_net_efficiency(double v)
{
    return v == -1 || (v > 0 && v <= 1) ? NULL
                                        : "is neither -1 (as nccl_net_efficiency) nor in (0, 1]";
}

static const char *check_net_step_scale(double v)
{
    return v == -1 || (v >= 0 && v <= 100) ? NULL
                                           : "is neither -1 (as nccl_step_scale) nor in [0, 100]";
}

static const int index_byte_choices[] = {4, 8, 0};
static const int value_byte_choices[] = {4, 2, 0};

static const char *const section_names[] = {"scenario", "gradients", "synthetic", "sparsify",
                                            "workers", "device", "engine", "timing",
                                            "network", "train", "compute", "execute"};
#define NSECTIONS (sizeof section_names / sizeof section_names[0])

#define F(field) offsetof(deftsim_config, field)
#define KEY(sec, key, typetext, dflt, doc) .info = {sec, key, typetext, dflt, doc}

/* One row per key, grouped by section in file order. A [network] key is one more row here
 * (and its field in deftsim_config). An enum key's type text is NULL: schema() writes it from
 * the key's names array ("one of: ..."), so a name added there shows in --keys and errors. The methods' own [sparsify] keys are not here: they come
 * from the registry's option tables (schema() below). */
static const keydef base_keys[] = {
    {KEY("scenario", "name", "string: 1..100 characters, no '/'", NULL,
         "names the results; default: the file's name without .ini"),
     .type = T_NAME, .off = F(scenario.name)},
    {KEY("scenario", "seed", "integer in [0, 9223372036854775807]", "1",
         "every random choice derives from it"),
     .type = T_U64, .off = F(scenario.seed), .imin = 0, .imax = INT64_MAX},
    {KEY("scenario", "output", "path", NULL, "results folder; default: results/<name>"),
     .type = T_PATH, .off = F(scenario.output)},
    {KEY("scenario", "iterations", "integer in [1, 1000000]", "3",
         "gradient iterations to run; unset with source = trace: every iteration of the trace"),
     .type = T_INT, .off = F(scenario.iterations), .imin = 1, .imax = 1000000},

    {KEY("gradients", "source", NULL, "synthetic",
         "where the gradients come from"),
     .type = T_ENUM, .off = F(gradients.source), .names = source_names},
    {KEY("gradients", "model", "built-in model name or CSV path, or a list of them", "",
         "the model table (source = synthetic only; see 'deftsim models'); a list: deftsim sweep"),
     .type = T_OPTPATH, .off = F(gradients.model)},
    {KEY("gradients", "trace", "path, or a list of paths", "",
         "the trace directory (source = trace only); a list: deftsim sweep"),
     .type = T_OPTPATH, .off = F(gradients.trace)},
    {KEY("gradients", "params", "built-in parameter set, INI path, or none", "",
         "[synthetic] keys from a file (deftsim trace calibrate writes one); the scenario's win; "
         "unset: the model table's own set (deftsim models), none: the plain defaults"),
     .type = T_OPTPATH, .off = F(gradients.params)},

    {KEY("synthetic", "scale_decades", "number in [0, 24]", "3",
         "spread of the layers' log10 gradient scales"),
     .type = T_DOUBLE, .off = F(synthetic.scale_decades), .lo = 0, .hi = 24},
    {KEY("synthetic", "signal", "number in [0, 1]", "0.5",
         "fraction of the gradient variance shared by all workers"),
     .type = T_DOUBLE, .off = F(synthetic.signal), .lo = 0, .hi = 1},
    {KEY("synthetic", "tail", "0 (Gaussian) or a number > 2", "4",
         "Student-t degrees of freedom of the element distribution"),
     .type = T_DOUBLE, .off = F(synthetic.tail), .check = check_tail},
    {KEY("synthetic", "drift", "number in [0, 0.1]", "0.01",
         "largest relative per-iteration change of a layer's scale (natural log)"),
     .type = T_DOUBLE, .off = F(synthetic.drift), .lo = 0, .hi = 0.1},
    {KEY("synthetic", "bias_shift", "number in [-6, 6]", "1",
         "log10 offset of the scales of 1-D tensors (biases, norms) against weights"),
     .type = T_DOUBLE, .off = F(synthetic.bias_shift), .lo = -6, .hi = 6},
    {KEY("synthetic", "scales", NULL, "seed",
         "layer scales drawn over scale_decades (seed) or on a line per tensor kind (kinds)"),
     .type = T_ENUM, .off = F(synthetic.scales), .names = scales_names},
    KIND_KEYS("conv", 0, "-3.5"), KIND_KEYS("linear", 1, "-3.5"), KIND_KEYS("embedding", 2, "-3.5"),
    KIND_KEYS("bias", 3, "-2.5"), KIND_KEYS("norm", 4, "-2.5"), KIND_KEYS("norm_bias", 5, "-2.5"),
    {KEY("synthetic", "field", "number in [0, 6]", "0",
         "width in decades of a per-element magnitude factor shared by workers and iterations"),
     .type = T_DOUBLE, .off = F(synthetic.field), .lo = 0, .hi = 6},
    {KEY("synthetic", "worker_spread", "number in [0, 6]", "0",
         "width in decades of a factor on one worker's whole gradient, drawn per iteration"),
     .type = T_DOUBLE, .off = F(synthetic.worker_spread), .lo = 0, .hi = 6},
    KIND_STAT_KEYS("conv", 0), KIND_STAT_KEYS("linear", 1), KIND_STAT_KEYS("embedding", 2),
    KIND_STAT_KEYS("bias", 3), KIND_STAT_KEYS("norm", 4), KIND_STAT_KEYS("norm_bias", 5),
    ROLE_KEY("qk", 0), ROLE_KEY("v", 1), ROLE_KEY("attn_out", 2), ROLE_KEY("ffn_in", 3),
    ROLE_KEY("ffn_out", 4), ROLE_KEY("word", 5), ROLE_KEY("position", 6),
    ROLE_KEY("token_type", 7), ROLE_KEY("shortcut", 8),

    /* Its type text and default come from the registry (schema_init). */
    {KEY("sparsify", "methods", NULL, NULL, "the sparsifiers to compare"),
     .type = T_ENUM_LIST, .off = F(sparsify.methods), .count_off = F(sparsify.nmethods),
     .names_fn = deftsim_method_names},
    {KEY("sparsify", "densities", "list of numbers in (0, 1]", "0.01", "densities d; k = floor(d*n)"),
     .type = T_DOUBLE_LIST, .off = F(sparsify.densities), .count_off = F(sparsify.ndensities),
     .lo = 0, .hi = 1, .flags = LO_OPEN},
    {KEY("sparsify", "index_bytes", "4 or 8", "4", "wire size of an index"),
     .type = T_INT, .off = F(sparsify.index_bytes), .choices = index_byte_choices},
    {KEY("sparsify", "value_bytes", "4 or 2", "4", "wire size of a value"),
     .type = T_INT, .off = F(sparsify.value_bytes), .choices = value_byte_choices},
    {KEY("sparsify", "wire", NULL, "spec",
         "reference: the authors' int64 indices, fp32 values (value_bytes 4) and gTop-k's "
         "16-byte pairs"),
     .type = T_ENUM, .off = F(sparsify.wire), .names = deftsim_wire_names},
    {KEY("sparsify", "error_feedback", NULL, "full",
         "residuals kept by every worker, none, or sampled workers"),
     .type = T_ENUM, .off = F(sparsify.error_feedback), .names = feedback_names},
    {KEY("sparsify", "sampled_workers", "integer in [1, 1048576]", "8",
         "workers whose residuals are tracked (error_feedback = sampled)"),
     .type = T_INT, .off = F(sparsify.sampled_workers), .imin = 1, .imax = DEFTSIM_WORKERS_MAX},
    /* Then each method's options, from its registry entry (config_methods.c). */

    {KEY("workers", "counts", "list of integers in [1, 1048576], ranges a..b or a..b:step",
         "2..64", "worker counts P to sweep"),
     .type = T_INT_LIST, .off = F(workers.counts), .count_off = F(workers.ncounts), .imin = 1,
     .imax = DEFTSIM_WORKERS_MAX},

    {KEY("device", "kind", NULL, "cpu",
         "where the selection kernels run; profile: on the cpu, timed by [device] profile"),
     .type = T_ENUM, .off = F(device.kind), .names = device_names},
    {KEY("device", "profile", "path", "",
         "a device profile CSV (deftsim bench kernels --profile; kind = profile only)"),
     .type = T_OPTPATH, .off = F(device.profile)},
    {KEY("device", "threads", "integer in [1, 1024]", "1", "CPU threads for the kernels"),
     .type = T_INT, .off = F(device.threads), .imin = 1, .imax = 1024},

    {KEY("engine", "memory_budget", "number in (0, 1]", "0.8",
         "fraction of physical RAM the engine may use"),
     .type = T_DOUBLE, .off = F(engine.memory_budget), .lo = 0, .hi = 1, .flags = LO_OPEN},
    {KEY("engine", "quality", "0 or 1", "1",
         "1: the quality metrics (captured_frac .. acc_norm2); 0: not computed, columns empty"),
     .type = T_INT, .off = F(engine.quality), .imin = 0, .imax = 1},
    {KEY("engine", "regen_slots", "integer in [1, 8]", "8",
         "at most this many accumulators of workers without a residual regenerated at once, "
         "where memory allows; the rows do not depend on it"),
     .type = T_INT, .off = F(engine.regen_slots), .imin = 1, .imax = 8},

    /* [timing]: the measurement protocol of the compute phases (docs/TIMING.md). */
    {KEY("timing", "repeats", "integer in [1, 100]", "3",
         "timed runs of every worker's compute phases on the same input (one under "
         "[device] kind = profile, which times nothing)"),
     .type = T_INT, .off = F(timing.repeats), .imin = 1, .imax = 100},
    {KEY("timing", "statistic", NULL, "min",
         "the per-worker estimate of the repeated runs"),
     .type = T_ENUM, .off = F(timing.statistic), .names = timing_statistic_names},
    {KEY("timing", "cache", NULL, "cold",
         "cold: each accumulator is flushed from the CPU caches before each visit"),
     .type = T_ENUM, .off = F(timing.cache), .names = timing_cache_names},

    /* [network]: the SimGrid simulation of the schedules (docs/NETWORK.md). */
    {KEY("network", "simulate", "0 or 1", "1",
         "1: simulate every point's communication with SimGrid; 0: no simulated times"),
     .type = T_INT, .off = F(network.simulate), .imin = 0, .imax = 1},
    {KEY("network", "topology", NULL, "flat",
         "the cluster: one switch, SimGrid's fat tree, torus or dragonfly, or platform_file"),
     .type = T_ENUM, .off = F(network.topology), .names = deftsim_topology_names},
    {KEY("network", "platform_file", "path", "",
         "a SimGrid platform XML file (topology = file only); workers on its hosts by name"),
     .type = T_OPTPATH, .off = F(network.platform_file)},
    {KEY("network", "topology_params", "SimGrid topo_parameters", "",
         "fat tree 'levels;down;up;links', torus 'x,y,z', dragonfly 'g,l;c,l;r,l;n'; empty: from P"),
     .type = T_OPTPATH, .off = F(network.topology_params)},
    {KEY("network", "bandwidth", "bandwidth in (0, 1e15] bytes/s, or with a unit (25Gbps)",
         "25Gbps", "every link's bandwidth"),
     .type = T_BANDWIDTH, .off = F(network.bandwidth), .lo = 0, .hi = 1e15, .flags = LO_OPEN},
    {KEY("network", "latency", "duration in [0, 1] s, or with a unit (1us)", "1us",
         "every link's latency"),
     .type = T_DURATION, .off = F(network.latency), .lo = 0, .hi = 1},
    {KEY("network", "backbone_bandwidth", "bandwidth in [0, 1e15] bytes/s, or with a unit", "0",
         "flat: a shared backbone of this bandwidth; 0: a non-blocking switch"),
     .type = T_BANDWIDTH, .off = F(network.backbone_bandwidth), .lo = 0, .hi = 1e15},
    {KEY("network", "model", NULL, "LV08",
         "SimGrid's network model (each has its own latency and bandwidth factors)"),
     .type = T_ENUM, .off = F(network.model), .names = deftsim_net_model_names},
    {KEY("network", "crosstraffic", "0 or 1", "0",
         "SimGrid's network/crosstraffic: acknowledgements load the reverse path"),
     .type = T_INT, .off = F(network.crosstraffic), .imin = 0, .imax = 1},
    {KEY("network", "allgather", NULL, "bruck",
         "allgather and allgatherv algorithm"),
     .type = T_ENUM, .off = F(network.allgather), .names = deftsim_allgather_names},
    {KEY("network", "allreduce", NULL, "rabenseifner",
         "allreduce algorithm"),
     .type = T_ENUM, .off = F(network.allreduce), .names = deftsim_allreduce_names},
    {KEY("network", "bcast", NULL,
         "binomial", "broadcast algorithm"),
     .type = T_ENUM, .off = F(network.bcast), .names = deftsim_bcast_names},
    {KEY("network", "eager_threshold", "integer in [0, 2147483647]", "65536",
         "bytes: a smaller send returns at once, a larger one waits for its receiver"),
     .type = T_INT, .off = F(network.eager_threshold), .imin = 0, .imax = INT32_MAX},
    {KEY("network", "mode", NULL, "exact",
         "approximate: like ring steps, rounds and waves sampled, NCCL's channels of "
         "like links run as one (docs/NETWORK.md); analytic: lone-flow times on a flat network; "
         "named in every row"),
     .type = T_ENUM, .off = F(network.mode), .names = deftsim_sim_mode_names},
    {KEY("network", "compute", NULL, "measured",
         "compute phases in simulated time: as measured, or none (times from the bytes alone)"),
     .type = T_ENUM, .off = F(network.compute), .names = deftsim_sim_compute_names},
    /* Multi-GPU nodes (docs/NETWORK.md, "Multi-GPU nodes" and "Presets"). */
    {KEY("network", "preset", NULL, "none",
         "a system's node keys from its datasheet; a key set in the file or by --set wins"),
     .type = T_ENUM, .off = F(network.preset), .names = deftsim_cfg_preset_names},
    {KEY("network", "preset_file", "path (optional)", "",
         "a file of [network] keys (deftsim validate nccl --fit -o writes one) that fill the keys "
         "the scenario leaves at their defaults, ahead of the preset's; it may name the preset"),
     .type = T_OPTPATH, .off = F(network.preset_file)},
    {KEY("network", "gpus_per_node", "integer in [1, 64]", "1",
         "GPUs a node: worker w on GPU w mod G of node w div G; 1: a host a worker"),
     .type = T_INT, .off = F(network.gpus_per_node), .imin = 1, .imax = 64},
    {KEY("network", "intra_fabric", NULL, "nvswitch",
         "how a node's GPUs are joined (gpus_per_node > 1)"),
     .type = T_ENUM, .off = F(network.intra_fabric), .names = deftsim_intra_fabric_names},
    {KEY("network", "intra_bandwidth", "bandwidth in (0, 1e15] bytes/s, or with a unit", "450GBps",
         "every intra-node link's bandwidth, per direction (pcie: the shared bridge's)"),
     .type = T_BANDWIDTH, .off = F(network.intra_bandwidth), .lo = 0, .hi = 1e15, .flags = LO_OPEN},
    {KEY("network", "intra_latency", "duration in [0, 1] s, or with a unit", "1us",
         "every intra-node link's latency"),
     .type = T_DURATION, .off = F(network.intra_latency), .lo = 0, .hi = 1},
    {KEY("network", "nics_per_node", "integer in [1, 64], at most gpus_per_node", "1",
         "NICs a node; GPU g uses NIC g * nics / G (nics = G: one each, rail-optimized)"),
     .type = T_INT, .off = F(network.nics_per_node), .imin = 1, .imax = 64},
    {KEY("network", "nic_bandwidth", "bandwidth in (0, 1e15] bytes/s, or with a unit", NULL,
         "every NIC's bandwidth, per direction; default: bandwidth"),
     .type = T_BANDWIDTH, .off = F(network.nic_bandwidth), .lo = 0, .hi = 1e15, .flags = LO_OPEN},
    {KEY("network", "library", NULL, "mpi",
         "whose collective algorithms: MPI's (allgather, allreduce, bcast), or NCCL's"),
     .type = T_ENUM, .off = F(network.library), .names = deftsim_net_library_names},
    {KEY("network", "nccl_algorithm", NULL, "ring",
         "library = nccl: the allreduce (auto: NCCL's tuning model picks; nvls: NVLink SHARP, "
         "tuned model, one NVSwitch node)"),
     .type = T_ENUM, .off = F(network.nccl_algorithm), .names = deftsim_nccl_algo_names},
    {KEY("network", "nccl_channels", "integer in [1, 64]", "2",
         "library = nccl: parallel rings (and twice as many trees), the data split over them"),
     .type = T_INT, .off = F(network.nccl_channels), .imin = 1, .imax = DEFTSIM_NCCL_CHANNELS_MAX},
    {KEY("network", "nccl_p2p_channels", "integer in [0, 64]", "0",
         "library = nccl: the channels of grouped sends and receives (alltoall, a sparsifier's own "
         "rounds), rounded up to a power of two; 0: nccl_channels"),
     .type = T_INT, .off = F(network.nccl_p2p_channels), .imin = 0, .imax = DEFTSIM_NCCL_CHANNELS_MAX},
    {KEY("network", "nccl_allgatherv", NULL, "pad",
         "library = nccl: unequal allgather blocks padded to the largest, one broadcast per rank, "
         "or grouped sends"),
     .type = T_ENUM, .off = F(network.nccl_allgatherv), .names = deftsim_nccl_agv_names},
    {KEY("network", "nccl_buffsize", "integer in [64, 1073741824]", "4194304",
         "library = nccl: NCCL_BUFFSIZE in bytes (a tree or broadcast chunk is 1/8, a ring chunk "
         "1/2)"),
     .type = T_INT, .off = F(network.nccl_buffsize), .imin = 64, .imax = 1073741824},
    {KEY("network", "nccl_model", NULL, "plain",
         "library = nccl: plain: the message pattern alone; tuned: NCCL as it runs (protocols, "
         "per-step and per-call costs, NCCL's choices; docs/NETWORK.md)"),
     .type = T_ENUM, .off = F(network.nccl_model), .names = deftsim_nccl_model_names},
    {KEY("network", "nccl_proto", NULL, "auto",
         "nccl_model = tuned: the protocol (NCCL_PROTO), or auto: NCCL's choice"),
     .type = T_ENUM, .off = F(network.nccl_proto), .names = deftsim_nccl_proto_names},
    {KEY("network", "nccl_arch", NULL, "hopper",
         "nccl_model = tuned: the GPU generation whose NCCL tuning constants apply"),
     .type = T_ENUM, .off = F(network.nccl_arch), .names = deftsim_nccl_arch_names},
    {KEY("network", "nccl_tuning", NULL, "2.30",
         "nccl_model = tuned: the NCCL release whose tuning figures apply (2.30: 2.30.7's; 2.8: 2.8.4's)"),
     .type = T_ENUM, .off = F(network.nccl_tuning), .names = deftsim_nccl_tuning_names},
    {KEY("network", "nccl_launch", "duration in [0, 1] s, or with a unit", "0",
         "nccl_model = tuned: what every collective call costs before its first step"),
     .type = T_DURATION, .off = F(network.nccl_launch), .lo = 0, .hi = 1},
    {KEY("network", "nccl_launch_gpu", "duration in [0, 1] s, or with a unit", "0",
         "nccl_model = tuned: what each further GPU one thread drives adds to a call's launch"),
     .type = T_DURATION, .off = F(network.nccl_launch_gpu), .lo = 0, .hi = 1},
    {KEY("network", "nccl_gpus_per_thread", "integer in [1, 64]", "1",
         "nccl_model = tuned: GPUs one thread launches a call on (1: DDP's; nccl-tests' -g)"),
     .type = T_INT, .off = F(network.nccl_gpus_per_thread), .imin = 1, .imax = 64},
    {KEY("network", "nccl_nvl_efficiency", "number in (0, 1]", "1",
         "nccl_model = tuned: the fraction of an intra-node link's bandwidth NCCL achieves"),
     .type = T_DOUBLE, .off = F(network.nccl_nvl_efficiency), .lo = 0, .hi = 1, .flags = LO_OPEN},
    {KEY("network", "nccl_net_efficiency", "number in (0, 1]", "1",
         "nccl_model = tuned: the fraction of a NIC's bandwidth NCCL achieves"),
     .type = T_DOUBLE, .off = F(network.nccl_net_efficiency), .lo = 0, .hi = 1, .flags = LO_OPEN},
    {KEY("network", "nccl_p2p_net_efficiency", "number in (0, 1], or -1", "-1",
         "nccl_model = tuned: that fraction for NCCL's grouped sends and receives (alltoall, "
         "allgatherv = p2p; -1: nccl_net_efficiency's)"),
     .type = T_DOUBLE, .off = F(network.nccl_p2p_net_efficiency), .lo = -1, .hi = 1,
     .check = check_p2p_net_efficiency},
    {KEY("network", "nccl_net_channel_bandwidth", "bandwidth in [0, 1e15] bytes/s, or with a unit",
         "0",
         "nccl_model = tuned: the most one channel of a ring or tree moves across the network "
         "(a NIC with c channels: at most c times it); 0: no limit but the NIC's"),
     .type = T_BANDWIDTH, .off = F(network.nccl_net_channel_bandwidth), .lo = 0, .hi = 1e15},
    {KEY("network", "nccl_p2p_channel_bandwidth", "bandwidth in [0, 1e15] bytes/s, or with a unit",
         "0",
         "nccl_model = tuned: the most one channel of a grouped send moves within a node (a "
         "transfer to one peer takes the channels NCCL gives its size); 0: no limit but the link's"),
     .type = T_BANDWIDTH, .off = F(network.nccl_p2p_channel_bandwidth), .lo = 0, .hi = 1e15},
    {KEY("network", "nccl_p2p_net_channel_bandwidth", "bandwidth in [0, 1e15] bytes/s, or with a unit",
         "0", "nccl_model = tuned: the same across the network; 0: no limit but the NIC's"),
     .type = T_BANDWIDTH, .off = F(network.nccl_p2p_net_channel_bandwidth), .lo = 0, .hi = 1e15},
    {KEY("network", "nccl_step_scale", "number in [0, 100]", "1",
         "nccl_model = tuned: multiplies NCCL's per-step latencies"),
     .type = T_DOUBLE, .off = F(network.nccl_step_scale), .lo = 0, .hi = 100},
    {KEY("network", "nccl_net_step_scale", "number in [0, 100], or -1", "-1",
         "nccl_model = tuned: multiplies NCCL's per-step latencies between nodes (-1: "
         "nccl_step_scale does)"),
     .type = T_DOUBLE, .off = F(network.nccl_net_step_scale), .lo = -1, .hi = 100,
     .check = check_net_step_scale},
    {KEY("network", "nccl_ll_efficiency", "number in (0, 1]", "1",
         "nccl_model = tuned: the further fraction of the link an LL transfer achieves"),
     .type = T_DOUBLE, .off = F(network.nccl_ll_efficiency), .lo = 0, .hi = 1, .flags = LO_OPEN},
    {KEY("network", "nccl_ll128_efficiency", "number in (0, 1]", "1",
         "nccl_model = tuned: the further fraction of the link an LL128 transfer achieves"),
     .type = T_DOUBLE, .off = F(network.nccl_ll128_efficiency), .lo = 0, .hi = 1, .flags = LO_OPEN},
    {KEY("network", "nccl_nvls_step", "duration in [0, 1] s, or with a unit", "0",
         "nccl_model = tuned: what each chunk step of an NVLS allreduce adds (NCCL's chunk rule)"),
     .type = T_DURATION, .off = F(network.nccl_nvls_step), .lo = 0, .hi = 1},

    /* [train]: deftsim train and deftsim trace record (docs/TRAINING.md). */
    {KEY("train", "model", NULL, "mlp",
         "network trained on the real images (mlp 784-512-256-10, or the small CNN)"),
     .type = T_ENUM, .off = F(train.model), .names = train_model_names},
    {KEY("train", "data", "path", "/usr/share/datasets/fashion-mnist",
         "folder of the IDX files (train-images-idx3-ubyte.gz, ...)"),
     .type = T_PATH, .off = F(train.data)},
    {KEY("train", "batch_size", "integer in [1, 4096]", "32", "images per worker and iteration"),
     .type = T_INT, .off = F(train.batch_size), .imin = 1, .imax = 4096},
    {KEY("train", "lr", "number in (0, 10]", "0.05", "learning rate of SGD"),
     .type = T_DOUBLE, .off = F(train.lr), .lo = 0, .hi = 10, .flags = LO_OPEN},
    {KEY("train", "momentum", "number in [0, 1)", "0.9",
         "SGD momentum, applied after aggregation (DGC: its own momentum correction)"),
     .type = T_DOUBLE, .off = F(train.momentum), .lo = 0, .hi = 1, .flags = HI_OPEN},
    {KEY("train", "weight_decay", "number in [0, 1]", "0.0001",
         "L2 weight decay, applied after aggregation"),
     .type = T_DOUBLE, .off = F(train.weight_decay), .lo = 0, .hi = 1},
    {KEY("train", "epochs", "number in [0, 1000]", "0",
         "> 0: train this many epochs instead of [scenario] iterations"),
     .type = T_DOUBLE, .off = F(train.epochs), .lo = 0, .hi = 1000},
    {KEY("train", "eval_every", "integer in [1, 1000000]", "100",
         "iterations between evaluations on the test set (and after the last)"),
     .type = T_INT, .off = F(train.eval_every), .imin = 1, .imax = 1000000},
    {KEY("train", "eval_samples", "integer in [1, 1000000]", "10000",
         "test images evaluated (the first ones; all when more than the test set)"),
     .type = T_INT, .off = F(train.eval_samples), .imin = 1, .imax = 1000000},
    {KEY("train", "train_samples", "integer in [0, 100000000]", "0",
         "training images used (the first ones); 0 = all"),
     .type = T_INT, .off = F(train.train_samples), .imin = 0, .imax = 100000000},
    {KEY("train", "threads", "integer in [1, 256]", "1", "OpenBLAS threads for the networks"),
     .type = T_INT, .off = F(train.threads), .imin = 1, .imax = 256},
    {KEY("train", "record", "list of integers in [0, 1000000], ranges a..b or a..b:step", "0",
         "iterations whose gradients deftsim trace record writes"),
     .type = T_INT_LIST, .off = F(train.record), .count_off = F(train.nrecord), .imin = 0,
     .imax = 1000000},

    /* [compute]: the training step's forward and backward pass (docs/COMPUTE.md). */
    {KEY("compute", "forward", "duration in [0, 60] s, or with a unit (30ms)", "0",
         "forward pass of one iteration on every worker; 0 and no table: no [compute]"),
     .type = T_DURATION, .off = F(compute.forward), .lo = 0, .hi = 60},
    {KEY("compute", "backward", "duration in [0, 60] s, or with a unit (60ms)", "0",
         "backward pass of one iteration on every worker"),
     .type = T_DURATION, .off = F(compute.backward), .lo = 0, .hi = 60},
    {KEY("compute", "table", "path", "",
         "CSV of published times (model, device, batch, forward_ms, backward_ms, source), "
         "instead of forward and backward"),
     .type = T_OPTPATH, .off = F(compute.table)},
    {KEY("compute", "model", "string", "",
         "the table row's model; default: the gradients' model table name"),
     .type = T_OPTPATH, .off = F(compute.model)},
    {KEY("compute", "device", "string", "", "the table row's device; empty: any"),
     .type = T_OPTPATH, .off = F(compute.device)},
    {KEY("compute", "batch", "integer in [0, 1000000000]", "0",
         "the table row's batch size per worker; 0: any"),
     .type = T_INT, .off = F(compute.batch), .imin = 0, .imax = 1000000000},
    {KEY("compute", "backward_spread", NULL, "params",
         "the backward time of a tensor: in proportion to its parameters, or equal shares"),
     .type = T_ENUM, .off = F(compute.backward_spread), .names = spread_names},
    {KEY("compute", "bucket_mb", "number in (0, 1e6]", "25",
         "dense: DDP's bucket_cap_mb (MiB of gradients per allreduce)"),
     .type = T_DOUBLE, .off = F(compute.bucket_mb), .lo = 0, .hi = 1e6, .flags = LO_OPEN},
    {KEY("compute", "first_bucket_mb", "number in [0, 1e6]", "1",
         "dense: DDP's smaller first bucket (MiB); 0: as bucket_mb"),
     .type = T_DOUBLE, .off = F(compute.first_bucket_mb), .lo = 0, .hi = 1e6},
    {KEY("compute", "overlap", "0 or 1", "1",
         "dense: each bucket's allreduce starts once the backward pass produced its gradients"),
     .type = T_INT, .off = F(compute.overlap), .imin = 0, .imax = 1},

    /* [execute]: where a point's communication runs (docs/CLUSTER.md, "Real mode"). */
    {KEY("execute", "network", NULL, "simulate",
         "simulate: SimGrid only; mpi: also run every schedule over MPI (mpirun -n P deftsim run)"),
     .type = T_ENUM, .off = F(execute.network), .names = deftsim_exec_network_names},
};
#define NBASE (sizeof base_keys / sizeof base_keys[0])
#define NKEYS_MAX (NBASE + DEFTSIM_METHOD_MAX * DEFTSIM_METHOD_OPTS_MAX)

/* 0: default (or derived); > 0: the file line; -1: a --set override; DEFTSIM_CFG_ORIGIN_PRESET,
 * _PRESET_FILE, _PARAMS: set by [network] preset, preset_file, [gradients] params
 * (config_internal.h). */
struct deftsim_config_origin {
    int key_line[NKEYS_MAX];
    int section_line[NSECTIONS];
};

/* The schema: the base rows, then every method's option rows (appended as the registry
 * grows, so that a key's index never changes); order[] lists them in file order, the methods'
 * keys at the end of [sparsify]'s base keys in registry order. infos[] are the descriptions
 * deftsim_config_key() hands out: the rows', with the methods key's type text and default
 * filled in from the registry. */
static keydef keys[NKEYS_MAX];
static deftsim_config_keyinfo infos[NKEYS_MAX];
static size_t order[NKEYS_MAX];
static size_t nkeys, schema_methods;
static char methods_type[600], methods_dflt[400];
/* The type texts of the enum rows, "one of: " and their names arrays (the rows say NULL). */
static char enum_type[NBASE][300];
static pthread_mutex_t schema_lock = PTHREAD_MUTEX_INITIALIZER;

static size_t schema(void)
{
    pthread_mutex_lock(&schema_lock);
    size_t nm = deftsim_method_count();
    if (!nkeys || nm != schema_methods) {
        if (!nkeys) {
            memcpy(keys, base_keys, sizeof base_keys);
            nkeys = NBASE;
        }
        nkeys += deftsim_cfg_method_keys(schema_methods, nm, keys + nkeys, NKEYS_MAX - nkeys);
        schema_methods = nm;
        size_t o = (size_t)snprintf(methods_type, sizeof methods_type, "list of: ");
        deftsim_method_list(0, methods_type + o, sizeof methods_type - o);
        deftsim_method_list(DEFTSIM_METHOD_CAP_DEFAULT, methods_dflt, sizeof methods_dflt);
        size_t n = 0, last_sparsify = 0;
        for (size_t i = 0; i < NBASE; i++)
            if (!strcmp(base_keys[i].info.section, "sparsify")) last_sparsify = i;
        for (size_t i = 0; i < NBASE; i++) {
            order[n++] = i;
            if (i == last_sparsify)
                for (size_t j = NBASE; j < nkeys; j++) order[n++] = j;
        }
        for (size_t i = 0; i < nkeys; i++) {
            infos[i] = keys[i].info;
            if (i < NBASE && keys[i].type == T_ENUM && !keys[i].info.type) {
                size_t o = (size_t)snprintf(enum_type[i], sizeof enum_type[i], "one of: ");
                deftsim_cfg_names_text(keys[i].names, enum_type[i] + o, sizeof enum_type[i] - o);
                keys[i].info.type = infos[i].type = enum_type[i];
            }
            if (keys[i].names_fn) {
                infos[i].type = methods_type;
                infos[i].dflt = methods_dflt;
            }
        }
    }
    size_t n = nkeys;
    pthread_mutex_unlock(&schema_lock);
    return n;
}
#define NKEYS schema()

const deftsim_config_keyinfo *deftsim_cfg_info(size_t i)
{
    schema();
    return &infos[i];
}

size_t deftsim_config_key_count(void) { return NKEYS; }
size_t deftsim_cfg_nkeys(void) { return NKEYS; }
int *deftsim_cfg_origin_at(deftsim_config *cfg, size_t i, const keydef **kd)
{
    return *kd = &keys[i], &cfg->origin->key_line[i];
}
/* In file order (as deftsim_config_key). */
const keydef *deftsim_cfg_keydef(size_t i) { return i < NKEYS ? &keys[order[i]] : NULL; }
const deftsim_config_keyinfo *deftsim_config_key(size_t i)
{
    return i < NKEYS ? deftsim_cfg_info(order[i]) : NULL;
}
size_t deftsim_config_section_count(void) { return NSECTIONS; }
const char *deftsim_config_section_name(size_t i) { return i < NSECTIONS ? section_names[i] : NULL; }

int deftsim_cfg_section_index(const char *s)
{
    for (size_t i = 0; i < NSECTIONS; i++)
        if (strcmp(section_names[i], s) == 0) return (int)i;
    return -1;
}

int deftsim_cfg_key_index(const char *section, const char *key)
{
    for (size_t i = 0, nk = NKEYS; i < nk; i++)
        if (strcmp(keys[i].info.section, section) == 0 && strcmp(keys[i].info.key, key) == 0)
            return (int)i;
    return -1;
}

/* "sections: scenario, gradients, ..." or "keys: methods, densities, ..." for messages. */
void deftsim_cfg_list_sections(char *buf, size_t cap)
{
    size_t o = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < NSECTIONS && o < cap; i++)
        o += (size_t)snprintf(buf + o, cap - o, "%s%s", i ? ", " : "", section_names[i]);
}

static void list_keys(const char *section, char *buf, size_t cap)
{
    size_t o = 0;
    buf[0] = '\0';
    size_t n = NKEYS;
    for (size_t i = 0; i < n && o < cap; i++) {
        const keydef *k = &keys[order[i]];
        if (strcmp(k->info.section, section) == 0)
            o += (size_t)snprintf(buf + o, cap - o, "%s%s", o ? ", " : "", k->info.key);
    }
}

deftsim_status deftsim_cfg_unknown_key_error(deftsim_status st, const char *where,
                                             const char *section)
{
    char known[900]; /* under the message buffer (1024) with the key's place */
    list_keys(section, known, sizeof known);
    if (!known[0])
        return deftsim_error_set(st, "%s: unknown key (the section has no keys yet)", where);
    return deftsim_error_set(st, "%s: unknown key (keys: %s)", where, known);
}

/* Keys the code itself refers to. */
size_t deftsim_cfg_kidx(const char *section, const char *key)
{
    int i = deftsim_cfg_key_index(section, key);
    return i < 0 ? 0 : (size_t)i;
}

/* ---- locations -------------------------------------------------------------------------- */

/* Where key k got its value, as a message prefix: "file:LINE: [section] key",
 * "--set section.key", or for a default the file and its section's line when present. */
void deftsim_cfg_where(const deftsim_config *cfg, size_t k, char *buf, size_t cap)
{
    const keydef *kd = &keys[k];
    int line = cfg->origin ? cfg->origin->key_line[k] : 0;
    if (line == DEFTSIM_CFG_ORIGIN_PRESET) {
        char pw[600];
        size_t kp = deftsim_cfg_kidx("network", "preset");
        deftsim_cfg_where(cfg, kp, pw, sizeof pw);
        snprintf(buf, cap, "%s = %s, its %s", pw, deftsim_cfg_preset_names[cfg->network.preset],
                 kd->info.key);
        return;
    }
    if (line == DEFTSIM_CFG_ORIGIN_PARAMS) {
        deftsim_params_choice ch;
        deftsim_config_params_choice(cfg, &ch);
        if (ch.why == DEFTSIM_PARAMS_TABLE)
            snprintf(buf, cap, "%s: [%s] %s (the default set of [gradients] model %s)", ch.set,
                     kd->info.section, kd->info.key, cfg->gradients.model);
        else
            snprintf(buf, cap, "%s: [%s] %s (from [gradients] params)", ch.set ? ch.set : "?",
                     kd->info.section, kd->info.key);
        return;
    }
    if (line == DEFTSIM_CFG_ORIGIN_PRESET_FILE) {
        snprintf(buf, cap, "%s (the [network] preset_file): [%s] %s", cfg->network.preset_file,
                 kd->info.section, kd->info.key);
        return;
    }
    if (line < 0) {
        snprintf(buf, cap, "--set %s.%s", kd->info.section, kd->info.key);
        return;
    }
    if (line == 0 && cfg->origin)
        line = cfg->origin->section_line[deftsim_cfg_section_index(kd->info.section)];
    if (cfg->path && line > 0)
        snprintf(buf, cap, "%s:%d: [%s] %s", cfg->path, line, kd->info.section, kd->info.key);
    else if (cfg->path)
        snprintf(buf, cap, "%s: [%s] %s", cfg->path, kd->info.section, kd->info.key);
    else
        snprintf(buf, cap, "[%s] %s", kd->info.section, kd->info.key);
}

void deftsim_config_where(const deftsim_config *cfg, const char *section, const char *key,
                          char *buf, size_t cap)
{
    int k = deftsim_cfg_key_index(section, key);
    if (k < 0) snprintf(buf, cap, "[%s] %s", section, key);
    else deftsim_cfg_where(cfg, (size_t)k, buf, cap);
}

/* ---- accessors for config.c ------------------------------------------------------------- */

const keydef *deftsim_cfg_key_at(size_t i) { return &keys[i]; }

struct deftsim_config_origin *deftsim_cfg_origin_new(const struct deftsim_config_origin *from)
{
    struct deftsim_config_origin *o = calloc(1, sizeof *o);
    if (o && from) memcpy(o, from, sizeof *o);
    return o;
}

int *deftsim_cfg_key_line(const deftsim_config *cfg, size_t k) { return &cfg->origin->key_line[k]; }

int *deftsim_cfg_section_line(const deftsim_config *cfg, size_t si)
{
    return &cfg->origin->section_line[si];
}
