/* deftsim_config.h - scenario files: one INI file describes one experiment.
 *
 * A scenario names the gradient source, the sparsifiers and densities, the worker counts, the
 * device, the output folder and the seed. Every key of every section is described by one row
 * of a schema table in config.c (type, range, default), so adding a key (the [network] keys,
 * for instance) is one row there plus one typed field here.
 *
 * Loading is strict: an unknown section or key, a duplicate key, a value of the wrong type or
 * out of range is an error whose message names where the value came from and the key:
 *
 *     scenarios/x.ini:12: [sparsify] densities: 1.5 is outside (0, 1]
 *     --set sparsify.densities: 1.5 is outside (0, 1]
 *     scenarios/x.ini: [gradients] model: missing (required when source = synthetic)
 *
 * File syntax (inih): `[section]` headers, `key = value` lines, comment lines starting with
 * '#' or ';', and inline comments after " ;" (a ';' preceded by whitespace; '#' starts a
 * comment only at the start of a line). A line holds at most DEFTSIM_CONFIG_MAX_LINE
 * characters; every value must fit on one line, so any configuration can be printed and read
 * back. Keys outside a section, text after a section's ']', a section given twice and
 * indented continuation lines are errors. Relative paths are relative to the working
 * directory deftsim runs in, not to the scenario file.
 *
 * Lists are comma-separated. Integer lists (worker counts) also take ranges:
 *     a..b       doubling: a, 2a, 4a, ... b; b must be a times a power of two
 *                (2..1024 = the powers of two from 2 to 1024)
 *     a..b:s     arithmetic: a, a+s, a+2s, ... b; b - a must be a multiple of s
 * and come out sorted ascending with duplicates merged (`2..64, 48` is fine).
 */
#ifndef DEFTSIM_CONFIG_H
#define DEFTSIM_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "deftsim_error.h"
#include "deftsim_gen.h" /* DEFTSIM_GEN_NKINDS */
#include "deftsim_sim.h"
#include "deftsim_sparsify.h" /* the methods and the sparsifier options */

/* Longest line (without its newline) a scenario file may hold: inih's line buffer. */
#define DEFTSIM_CONFIG_MAX_LINE 198

/* Most values an integer or double list may expand to. */
#define DEFTSIM_LIST_MAX 4096

/* Largest worker count a scenario may ask for. */
#define DEFTSIM_WORKERS_MAX (1 << 20)

typedef enum { DEFTSIM_SOURCE_SYNTHETIC, DEFTSIM_SOURCE_TRACE } deftsim_source;

typedef enum {
    DEFTSIM_FEEDBACK_FULL,    /* every worker keeps its residual */
    DEFTSIM_FEEDBACK_NONE,    /* residuals dropped: what was not sent is lost */
    DEFTSIM_FEEDBACK_SAMPLED  /* residuals tracked for sampled_workers workers only */
} deftsim_feedback;

/* profile: the kernels run on the cpu, the phases' durations come from [device] profile. */
typedef enum { DEFTSIM_DEVICE_CPU, DEFTSIM_DEVICE_CUDA, DEFTSIM_DEVICE_PROFILE } deftsim_device_kind;

/* The networks `deftsim train` trains (train/deftsim_nn.h, same order as deftsim_nn_kind). */
typedef enum { DEFTSIM_TRAIN_MLP, DEFTSIM_TRAIN_CNN } deftsim_train_model;

/* [timing]: how each compute phase is measured (docs/TIMING.md). */
typedef enum { DEFTSIM_TIMING_MIN, DEFTSIM_TIMING_MEDIAN } deftsim_timing_statistic;
typedef enum { DEFTSIM_TIMING_COLD, DEFTSIM_TIMING_WARM } deftsim_timing_cache;

/* [compute] backward_spread: how the backward pass's time spreads over the parameter tensors
 * (docs/COMPUTE.md). */
typedef enum { DEFTSIM_SPREAD_PARAMS, DEFTSIM_SPREAD_UNIFORM } deftsim_backward_spread;

/* [execute] network: where a point's communication runs. SIMULATE: SimGrid only; MPI: rank 0
 * runs the engine, then every iteration's schedule also runs over MPI between the ranks of
 * mpirun (docs/CLUSTER.md, "Real mode"). */
typedef enum { DEFTSIM_EXEC_SIMULATE, DEFTSIM_EXEC_MPI } deftsim_exec_network;
extern const char *const deftsim_exec_network_names[]; /* NULL-terminated */

struct deftsim_config_origin; /* private: where each key got its value, for messages */

/* A fully resolved configuration: every field holds a value (defaults filled in). Strings are
 * malloc'd and owned by the config; optional strings are NULL when unset. */
typedef struct deftsim_config {
    struct {
        char *name;         /* default: the file's basename without ".ini" */
        uint64_t seed;      /* 0 .. 2^63-1 (JSON manifests carry it as a signed integer) */
        char *output;       /* default: results/<name> */
        int iterations;     /* gradient iterations to run */
    } scenario;
    struct {
        deftsim_source source;
        char *model;        /* built-in name or CSV path; set exactly when source = synthetic */
        char *trace;        /* trace directory; set exactly when source = trace */
        char *params;       /* a parameter file of [synthetic] keys (a path or a built-in
                             * set's name); NULL when unset */
    } gradients;
    struct {
        double scale_decades, signal, tail, drift, bias_shift; /* docs/GENERATOR.md */
        int scales;                              /* 0 seed (scale_decades, bias_shift), 1 kinds */
        double kind_level[DEFTSIM_GEN_NKINDS];   /* <kind>_scale */
        double kind_depth[DEFTSIM_GEN_NKINDS];   /* <kind>_depth */
        double kind_spread[DEFTSIM_GEN_NKINDS];  /* <kind>_spread */
        double kind_size[DEFTSIM_GEN_NKINDS];    /* <kind>_size */
        double field, worker_spread;             /* 0: none */
        double role_offset[DEFTSIM_GEN_NROLES];  /* role_<name> */
        double kind_signal[DEFTSIM_GEN_NKINDS];  /* <kind>_signal, -1: signal */
        double kind_tail[DEFTSIM_GEN_NKINDS];    /* <kind>_tail, -1: tail */
        double kind_field[DEFTSIM_GEN_NKINDS];   /* <kind>_field, -1: field */
    } synthetic;
    struct {
        deftsim_method *methods;  /* in the order given, no duplicates */
        size_t nmethods;
        double *densities;        /* in (0, 1], in the order given, no duplicates */
        size_t ndensities;
        int index_bytes;          /* 4 or 8 */
        int value_bytes;          /* 4 or 2 */
        deftsim_wire wire;
        deftsim_feedback error_feedback;
        int sampled_workers;      /* used with error_feedback = sampled */
        /* Every method's own options ([sparsify] keys from its registry entry's table), by
         * registry position: deftsim_config_method_opts(), deftsim_config_opt(). */
        deftsim_method_opts opts[DEFTSIM_METHOD_MAX];
    } sparsify;
    struct {
        int64_t *counts;          /* sorted ascending, unique, each in [1, DEFTSIM_WORKERS_MAX] */
        size_t ncounts;
    } workers;
    struct {
        deftsim_device_kind kind;
        int threads;
        char *profile;            /* a device profile CSV; set exactly when kind = profile */
    } device;
    struct {
        double memory_budget;     /* fraction of physical RAM the engine may use */
        int quality;              /* 1: the quality metrics (captured_frac .. acc_norm2); 0: none
                                     computed, their columns empty (docs/OUTPUT.md) */
        int regen_slots;          /* at most this many workers without a residual regenerated
                                     at once (docs/OUTPUT.md, "Regeneration slots") */
    } engine;
    struct {
        int repeats;                          /* R: timed runs of every compute phase */
        deftsim_timing_statistic statistic;   /* the per-worker estimate of the R runs */
        deftsim_timing_cache cache;           /* accumulators flushed before each visit */
    } timing;
    struct {
        int simulate;                     /* 1: every point's schedules go through SimGrid */
        deftsim_topology topology;
        char *platform_file;              /* the SimGrid platform file; set exactly when
                                             topology = file */
        char *topology_params;            /* SimGrid's topo_parameters; NULL: derived from P */
        double bandwidth;                 /* bytes/s of every link */
        double latency;                   /* seconds of every link */
        double backbone_bandwidth;        /* flat: bytes/s of a shared backbone; 0 = none
                                             (a non-blocking switch) */
        deftsim_net_model model;
        int crosstraffic;                 /* 0 or 1: SimGrid's network/crosstraffic */
        deftsim_allgather_algo allgather;
        deftsim_allreduce_algo allreduce;
        deftsim_bcast_algo bcast;
        int eager_threshold;              /* bytes: smaller sends do not wait (SMPI's rule) */
        deftsim_sim_mode mode;            /* exact, or approximate (sampled rings) */
        deftsim_sim_compute compute;      /* compute phases in simulated time: measured, or
                                             none (zero: simulated times from the bytes) */
        int preset;                       /* 0 none, else deftsim_config_preset_get(preset - 1):
                                             fills the node keys not set otherwise */
        char *preset_file;                /* NULL or a file of [network] keys that fill the
                                             keys not set otherwise, ahead of the preset */
        int gpus_per_node;                /* G: worker w on GPU w % G of node w / G */
        deftsim_intra_fabric intra_fabric; /* G > 1: how a node's GPUs are joined */
        double intra_bandwidth;           /* bytes/s of every intra-node link, per direction */
        double intra_latency;             /* seconds of every intra-node link */
        int nics_per_node;                /* 1 .. G; GPU g uses NIC g * nics / G */
        double nic_bandwidth;             /* bytes/s of every NIC; default: bandwidth */
        deftsim_net_library library;      /* mpi, or nccl: NCCL's algorithms (sim_nccl.c) */
        deftsim_nccl_algo nccl_algorithm; /* nccl: the allreduce */
        int nccl_channels;                /* nccl: parallel rings */
        int nccl_p2p_channels;            /* nccl: grouped sends' channels; 0: nccl_channels */
        deftsim_nccl_agv nccl_allgatherv; /* nccl: unequal allgather blocks */
        int nccl_buffsize;                /* nccl: NCCL_BUFFSIZE, bytes */
        deftsim_nccl_model nccl_model;    /* nccl: plain (the pattern) or tuned (as NCCL runs) */
        deftsim_nccl_proto nccl_proto;    /* tuned: LL, LL128, Simple, or auto */
        deftsim_nccl_arch nccl_arch;      /* tuned: GPU generation of NCCL's constants */
        deftsim_nccl_tuning nccl_tuning;  /* tuned: NCCL release of those constants */
        double nccl_launch;               /* tuned: seconds a collective call costs */
        double nccl_launch_gpu;           /* tuned: seconds each further GPU of a thread adds */
        int nccl_gpus_per_thread;         /* tuned: GPUs one thread launches a call on */
        double nccl_nvl_efficiency;       /* tuned: achieved fraction of intra-node links */
        double nccl_net_efficiency;       /* tuned: achieved fraction between nodes */
        double nccl_p2p_net_efficiency;   /* tuned: that fraction for grouped send/receive
                                             (alltoall); -1: as nccl_net_efficiency */
        double nccl_net_channel_bandwidth; /* tuned: bytes/s one ring or tree channel moves
                                              between nodes at most; 0: no limit */
        double nccl_p2p_channel_bandwidth; /* tuned: bytes/s one channel of a grouped send
                                              moves within a node at most; 0: no limit */
        double nccl_p2p_net_channel_bandwidth; /* tuned: the same between nodes */
        double nccl_step_scale;           /* tuned: factor on NCCL's per-step latencies */
        double nccl_net_step_scale;       /* tuned: that factor for steps between nodes; -1: as
                                             nccl_step_scale */
        double nccl_ll_efficiency;        /* tuned: LL's further achieved fraction */
        double nccl_ll128_efficiency;     /* tuned: LL128's further achieved fraction */
        double nccl_nvls_step;            /* tuned: seconds an NVLS chunk step adds */
    } network;                            /* docs/NETWORK.md */
    struct {
        deftsim_train_model model;
        char *data;               /* folder of the IDX files */
        int batch_size;           /* images per worker and iteration */
        double lr, momentum, weight_decay;
        double epochs;            /* > 0: train this many epochs instead of [scenario] iterations */
        int eval_every;           /* iterations between test-set evaluations */
        int eval_samples;         /* test images evaluated (the first ones) */
        int train_samples;        /* training images used (the first ones); 0 = all */
        int threads;              /* OpenBLAS threads */
        int64_t *record;          /* iterations `deftsim trace record` records, sorted, unique */
        size_t nrecord;
    } train;
    struct {                      /* the training step's compute (docs/COMPUTE.md); none
                                     when forward and backward are 0 and table is unset */
        double forward, backward; /* seconds of one iteration, every worker */
        char *table;              /* CSV of published times: model, device, batch, ... */
        char *model;              /* the table row's model; NULL: the gradients' model */
        char *device;             /* the table row's device; NULL: any */
        int batch;                /* the table row's batch; 0: any */
        deftsim_backward_spread backward_spread;
        double bucket_mb, first_bucket_mb; /* DDP's bucket caps, MiB */
        int overlap;              /* dense: bucket allreduces overlap the backward pass */
    } compute;
    struct {
        deftsim_exec_network network; /* simulate; mpi: also over MPI (docs/CLUSTER.md) */
    } execute;

    char *path;                   /* the scenario file, or NULL when built in code */
    struct deftsim_config_origin *origin;
} deftsim_config;

/* Reads a scenario file, applies the "section.key=value" overrides in order (a later one
 * wins), fills in defaults and runs deftsim_config_check(). */
deftsim_status deftsim_config_load(const char *path, const char *const *overrides,
                                   size_t noverrides, deftsim_config **out);

/* Parses scenario text from memory; origin names it in messages (used as the file name and
 * for the default scenario name). Same checks as deftsim_config_load. */
deftsim_status deftsim_config_parse(const char *text, const char *origin,
                                    const char *const *overrides, size_t noverrides,
                                    deftsim_config **out);

/* The same for deftsim train and deftsim trace record: their gradients come from the network
 * of [train] model, so a synthetic source may leave [gradients] model unset (deftsim run and
 * sweep on the same file still need it). A model that is set is checked as always. */
deftsim_status deftsim_config_load_train(const char *path, const char *const *overrides,
                                         size_t noverrides, deftsim_config **out);
deftsim_status deftsim_config_parse_train(const char *text, const char *origin,
                                          const char *const *overrides, size_t noverrides,
                                          deftsim_config **out);

/* Every key at its default, scenario.name = name ("scenario" if NULL). The gradient model is
 * unset, so deftsim_config_check() fails until one is set. */
deftsim_status deftsim_config_default(const char *name, deftsim_config **out);

/* Sets one key from "section.key=value", validated as in a file; errors name
 * "--set section.key". Changing scenario.name also moves an output left at its default.
 * Cross-field rules are not checked here: call deftsim_config_check() after the last one. */
deftsim_status deftsim_config_apply_override(deftsim_config *cfg, const char *assignment);

/* Cross-field rules: the source's key is set and the other source's key is not; for a
 * synthetic source the model table loads (a built-in, or the CSV file is read and parsed) and
 * every worker count is at most its number of parameters; the [network] platform holds the
 * largest worker count (topology_params, platform_file readable and set exactly when topology
 * = file, a backbone only on a flat cluster). */
deftsim_status deftsim_config_check(const deftsim_config *cfg);

/* Where section.key got its value, as the prefix of a message about it (the checks that
 * need the gradients, the trace or the network, run after loading, use it like the loader's
 * own): "FILE:LINE: [section] key" with the key's line (or, for a key left at its default,
 * its section's line when the file has one), "--set section.key" for an override, "[section]
 * key" for a config built in code. */
void deftsim_config_where(const deftsim_config *cfg, const char *section, const char *key,
                          char *buf, size_t cap);

/* Writes every key as INI that deftsim_config_parse() reads back into an equal config. */
deftsim_status deftsim_config_to_ini(const deftsim_config *cfg, FILE *f);

/* {"section": {"key": value, ...}, ...} with typed values (numbers, strings, arrays, null for
 * an unset optional string). Returns a new reference, or NULL with a message on failure. */
json_t *deftsim_config_to_json(const deftsim_config *cfg);

/* Method m's option values (its [sparsify] keys; all zero for a value the registry does not
 * hold). */
const deftsim_method_opts *deftsim_config_method_opts(const deftsim_config *cfg, deftsim_method m);
/* The value of [sparsify] key `key`, one of some method's options, as a double (integers and
 * enums: their value); NaN when no method has that option. */
double deftsim_config_opt(const deftsim_config *cfg, const char *key);

/* A point's sparsifier parameters from the scenario: method m at this density for P workers of
 * this model, with [sparsify]'s wire settings, the method's options, the scenario's seed, the
 * kernel context, spread mode's team (NULL or a team of one: one process) and skip_quality
 * from [engine] quality. The one mapping from config to parameters: run, sweep, spread and
 * real mode, and deftsim train use it. */
void deftsim_config_sparsifier_params(const deftsim_config *cfg, deftsim_method m, double density,
                                      uint32_t P, const deftsim_model *model, deftsim_kctx *kctx,
                                      const deftsim_team *team, deftsim_sparsifier_params *out);

/* The scenario's figures a sparsifier's adaptive rule may read (deftsim_sparsify_context):
 * [compute]'s backward seconds (given, or its table's row for this model; 0 without
 * [compute]), [network]'s link bandwidth and latency. */
deftsim_sparsify_context deftsim_config_sparsify_context(const deftsim_config *cfg,
                                                         const deftsim_model *model);

/* The network simulation's parameters for P workers of a scenario ([network]);
 * elem_bytes: the element size of the schedules' ALLREDUCE vectors (the value wire width). */
void deftsim_config_sim_params(const deftsim_config *cfg, uint32_t P, uint32_t elem_bytes,
                               deftsim_sim_params *out);

/* [network] presets: a system's node keys from its datasheet (docs/NETWORK.md, "Presets").
 * `preset = NAME` sets each of its keys that neither the file nor --set gives. */
typedef struct {
    const char *key;   /* a [network] key */
    const char *value; /* as INI text */
    const char *note;  /* where the figure comes from, or what is assumed */
} deftsim_config_preset_key;

typedef struct {
    const char *name;   /* "dgx-h100" */
    const char *title;  /* one line */
    const char *source; /* the datasheets' URLs */
    const deftsim_config_preset_key *keys;
    size_t nkeys;
} deftsim_config_preset;

size_t deftsim_config_preset_count(void);
const deftsim_config_preset *deftsim_config_preset_get(size_t i); /* NULL past the end */
const deftsim_config_preset *deftsim_config_preset_find(const char *name); /* NULL if none */

/* Which parameter set fills the [synthetic] keys the scenario and --set leave unset, and why
 * (docs/GENERATOR.md, "Default sets"): [gradients] params names one (a built-in set or a
 * file); params = none opts out; unset, with source = synthetic, a built-in model table's own
 * set (deftsim_gen_table_params) applies. A list of models whose tables have different sets
 * resolves to none here: deftsim sweep gives each model's variant its own table's set. */
typedef enum {
    DEFTSIM_PARAMS_NAMED,      /* [gradients] params names the set */
    DEFTSIM_PARAMS_TABLE,      /* the model table's default set */
    DEFTSIM_PARAMS_OFF,        /* params = none: the plain defaults */
    DEFTSIM_PARAMS_NO_DEFAULT, /* the table (or a CSV path) has no default set */
    DEFTSIM_PARAMS_PER_MODEL,  /* a list of tables with different sets: one per variant */
    DEFTSIM_PARAMS_TRACE       /* source = trace: no generator */
} deftsim_params_why;

typedef struct {
    const char *set;         /* the set's name or the file's path; NULL: none */
    deftsim_params_why why;
    int fitted;              /* DEFTSIM_PARAMS_TABLE: 1 fitted on the table's network (every
                              * table of a list), 0 extrapolated to it */
    const char *note;        /* DEFTSIM_PARAMS_TABLE with one table: the table's line */
} deftsim_params_choice;

/* The value of [gradients] params that opts out of the tables' default sets. */
#define DEFTSIM_PARAMS_NONE "none"

void deftsim_config_params_choice(const deftsim_config *cfg, deftsim_params_choice *out);
/* "named", "table default", "none: params = none", "none: no default set for the table",
 * "per model", "none: source = trace". */
const char *deftsim_params_why_name(deftsim_params_why why);

/* Deep copy. */
deftsim_status deftsim_config_clone(const deftsim_config *cfg, deftsim_config **out);

/* 1 when both configs hold the same values (where they came from does not matter). */
int deftsim_config_equal(const deftsim_config *a, const deftsim_config *b);

void deftsim_config_free(deftsim_config *cfg);

/* The schema, for help texts and tests: one entry per key, in file order. */
typedef struct {
    const char *section;
    const char *key;
    const char *type;     /* e.g. "int in [1, 1000000]", "list of: deft, topk, ..." */
    const char *dflt;     /* the default as INI text ("" = unset); NULL when derived */
    const char *doc;      /* one line */
} deftsim_config_keyinfo;

size_t deftsim_config_key_count(void);
const deftsim_config_keyinfo *deftsim_config_key(size_t i); /* NULL past the end */

/* Section names in file order ("scenario", ..., "network", "train"). */
size_t deftsim_config_section_count(void);
const char *deftsim_config_section_name(size_t i);

/* Stable names of the config's own enums (the methods' and the sparsifier options' are in
 * deftsim_sparsify.h). */
const char *deftsim_source_name(deftsim_source s);
const char *deftsim_feedback_name(deftsim_feedback f);
const char *deftsim_timing_statistic_name(deftsim_timing_statistic s);
const char *deftsim_timing_cache_name(deftsim_timing_cache c);
const char *deftsim_device_kind_name(deftsim_device_kind k);
const char *deftsim_train_model_name(deftsim_train_model m);

/* Parses an integer list with ranges (syntax above) into a malloc'd array, sorted ascending
 * with duplicates merged; every value must lie in [min, max] and the list may hold at most
 * DEFTSIM_LIST_MAX values. On failure records a message without location, such as
 * "'0' is outside [1, 1048576]", for the caller to wrap. */
deftsim_status deftsim_parse_int_list(const char *text, int64_t min, int64_t max,
                                      int64_t **values, size_t *count);

/* Writes a sorted list back in the same syntax, runs of three or more turned into ranges
 * ("2..64", "10..40:10"). Returns the length it needed (snprintf-like). */
size_t deftsim_format_int_list(const int64_t *values, size_t count, char *buf, size_t cap);

#endif
