/* config.c - scenario files: the schema table, the strict INI reader, overrides, printing.
 *
 * Every key is one row of `keys` below. A value of any type goes through one path: text ->
 * parse_value() (type, range, choices) -> fits_one_line() -> commit(). Files, --set overrides
 * and the defaults all use it, so a default is validated like user input and every value can
 * be printed on one line of a file and read back. */
#include "deftsim_config.h"

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
static const char *const feedback_names[] = {"full", "none", "sampled", NULL};
static const char *const device_names[] = {"cpu", "cuda", "profile", NULL};
static const char *const train_model_names[] = {"mlp", "cnn", NULL};
static const char *const timing_statistic_names[] = {"min", "median", NULL};
static const char *const timing_cache_names[] = {"cold", "warm", NULL};

/* Enum fields are stored through int-sized copies (see commit()). */
_Static_assert(sizeof(deftsim_method) == sizeof(int), "enum storage");
_Static_assert(sizeof(deftsim_source) == sizeof(int), "enum storage");
_Static_assert(sizeof(deftsim_wire) == sizeof(int), "enum storage");
_Static_assert(sizeof(deftsim_feedback) == sizeof(int), "enum storage");
_Static_assert(sizeof(deftsim_cltk_charge) == sizeof(int), "enum storage");
_Static_assert(sizeof(deftsim_deft_norms) == sizeof(int), "enum storage");
_Static_assert(sizeof(deftsim_oktopk_variant) == sizeof(int), "enum storage");
_Static_assert(sizeof(deftsim_device_kind) == sizeof(int), "enum storage");
_Static_assert(sizeof(deftsim_topology) == sizeof(int), "enum storage");
_Static_assert(sizeof(deftsim_net_model) == sizeof(int), "enum storage");
_Static_assert(sizeof(deftsim_allgather_algo) == sizeof(int), "enum storage");
_Static_assert(sizeof(deftsim_allreduce_algo) == sizeof(int), "enum storage");
_Static_assert(sizeof(deftsim_bcast_algo) == sizeof(int), "enum storage");
_Static_assert(sizeof(deftsim_sim_mode) == sizeof(int), "enum storage");
_Static_assert(sizeof(deftsim_sim_compute) == sizeof(int), "enum storage");
_Static_assert(sizeof(deftsim_train_model) == sizeof(int), "enum storage");
_Static_assert(sizeof(deftsim_timing_statistic) == sizeof(int), "enum storage");
_Static_assert(sizeof(deftsim_timing_cache) == sizeof(int), "enum storage");

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

static int enum_index(const char *const *names, const char *s)
{
    for (int i = 0; names[i]; i++)
        if (strcmp(names[i], s) == 0) return i;
    return -1;
}

/* ---- the schema ------------------------------------------------------------------------- */

typedef enum {
    T_NAME,        /* char*, 1..100 characters, no '/' (it becomes a folder name) */
    T_PATH,        /* char*, non-empty */
    T_OPTPATH,     /* char*, NULL when unset; an empty value unsets it */
    T_U64,         /* uint64_t in [imin, imax] */
    T_INT,         /* int in [imin, imax], or one of choices[] when given */
    T_DOUBLE,      /* double in the range lo..hi (flags say open or closed), or check() */
    T_ENUM,        /* int-sized enum, one of names[] */
    T_ENUM_LIST,   /* int-sized enum array + size_t count; no duplicates */
    T_DOUBLE_LIST, /* double array + size_t count; in range, no duplicates */
    T_INT_LIST,    /* int64_t array + size_t count; ranges allowed; sorted, unique */
    T_BANDWIDTH,   /* double, bytes/s: a number or SimGrid units (25Gbps); range as T_DOUBLE */
    T_DURATION     /* double, seconds: a number or SimGrid units (1us); range as T_DOUBLE */
} ktype;

enum { LO_OPEN = 1, HI_OPEN = 2, HI_INF = 4 };

#define NAME_MAX_LEN 100

typedef struct {
    deftsim_config_keyinfo info;
    ktype type;
    size_t off, count_off;
    int64_t imin, imax;
    double lo, hi;
    unsigned flags;
    const char *const *names;
    const char *const *(*names_fn)(void); /* names[] from a table that can grow (the methods) */
    const int *choices;             /* 0-terminated */
    const char *(*check)(double v); /* NULL if fine, else why not (for odd numeric domains) */
} keydef;

static const char *check_tail(double v)
{
    if (v > 1e6) return "is above 1e6 (use 0 for Gaussian)";
    return v == 0 || v > 2 ? NULL : "is neither 0 (Gaussian) nor greater than 2";
}

static const int index_byte_choices[] = {4, 8, 0};
static const int value_byte_choices[] = {4, 2, 0};

static const char *const section_names[] = {"scenario", "gradients", "synthetic", "sparsify",
                                            "workers", "device", "engine", "timing",
                                            "network", "train"};
#define NSECTIONS (sizeof section_names / sizeof section_names[0])

#define F(field) offsetof(deftsim_config, field)
#define KEY(sec, key, typetext, dflt, doc) .info = {sec, key, typetext, dflt, doc}

/* One row per key, grouped by section in file order. A [network] key is one more row here
 * (and its field in deftsim_config). */
static const keydef keys[] = {
    {KEY("scenario", "name", "string: 1..100 characters, no '/'", NULL,
         "names the results; default: the file's name without .ini"),
     .type = T_NAME, .off = F(scenario.name)},
    {KEY("scenario", "seed", "integer in [0, 9223372036854775807]", "1",
         "every random choice derives from it"),
     .type = T_U64, .off = F(scenario.seed), .imin = 0, .imax = INT64_MAX},
    {KEY("scenario", "output", "path", NULL, "results folder; default: results/<name>"),
     .type = T_PATH, .off = F(scenario.output)},
    {KEY("scenario", "iterations", "integer in [1, 1000000]", "3", "gradient iterations to run"),
     .type = T_INT, .off = F(scenario.iterations), .imin = 1, .imax = 1000000},

    {KEY("gradients", "source", "one of: synthetic, trace", "synthetic",
         "where the gradients come from"),
     .type = T_ENUM, .off = F(gradients.source), .names = source_names},
    {KEY("gradients", "model", "built-in model name or CSV path, or a list of them", "",
         "the model table (source = synthetic only; see 'deftsim models'); a list: deftsim sweep"),
     .type = T_OPTPATH, .off = F(gradients.model)},
    {KEY("gradients", "trace", "path, or a list of paths", "",
         "the trace directory (source = trace only); a list: deftsim sweep"),
     .type = T_OPTPATH, .off = F(gradients.trace)},

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
    {KEY("sparsify", "wire", "one of: spec, reference", "spec",
         "reference: the authors' int64 indices, fp32 values (value_bytes 4) and gTop-k's "
         "16-byte pairs"),
     .type = T_ENUM, .off = F(sparsify.wire), .names = deftsim_wire_names},
    {KEY("sparsify", "error_feedback", "one of: full, none, sampled", "full",
         "residuals kept by every worker, none, or sampled workers"),
     .type = T_ENUM, .off = F(sparsify.error_feedback), .names = feedback_names},
    {KEY("sparsify", "sampled_workers", "integer in [1, 1048576]", "8",
         "workers whose residuals are tracked (error_feedback = sampled)"),
     .type = T_INT, .off = F(sparsify.sampled_workers), .imin = 1, .imax = DEFTSIM_WORKERS_MAX},
    {KEY("sparsify", "cltk_charge", "one of: leader, all", "leader",
         "CLT-k selection time charged to the leader only, or to every worker"),
     .type = T_ENUM, .off = F(sparsify.cltk_charge), .names = deftsim_cltk_charge_names},
    {KEY("sparsify", "cltk_beta", "number in [0, 1]", "0", "CLT-k low-pass filter beta; 0 = off"),
     .type = T_DOUBLE, .off = F(sparsify.cltk_beta), .lo = 0, .hi = 1},
    {KEY("sparsify", "deft_norms", "one of: fused, separate", "fused",
         "DEFT's fragment norms: fused into the accumulate pass, or a separate pass in its "
         "selection"),
     .type = T_ENUM, .off = F(sparsify.deft_norms), .names = deftsim_deft_norms_names},
    {KEY("sparsify", "oktopk_variant", "one of: vgg, bert", "vgg",
         "Ok-Topk's constants: the authors' VGG script, or BERT's (periods 128, balanced allgather)"),
     .type = T_ENUM, .off = F(sparsify.oktopk_variant), .names = deftsim_oktopk_variant_names},
    {KEY("sparsify", "oktopk_warmup", "integer in [0, 1000000000]", "512",
         "Ok-Topk: dense iterations before the first sparse one (the authors' VGG: 512; 0 skips)"),
     .type = T_INT, .off = F(sparsify.oktopk_warmup), .imin = 0, .imax = 1000000000},

    {KEY("workers", "counts", "list of integers in [1, 1048576], ranges a..b or a..b:step",
         "2..64", "worker counts P to sweep"),
     .type = T_INT_LIST, .off = F(workers.counts), .count_off = F(workers.ncounts), .imin = 1,
     .imax = DEFTSIM_WORKERS_MAX},

    {KEY("device", "kind", "one of: cpu, cuda, profile", "cpu",
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

    /* [timing]: the measurement protocol of the compute phases (docs/TIMING.md). */
    {KEY("timing", "repeats", "integer in [1, 100]", "3",
         "timed runs of every worker's compute phases on the same input"),
     .type = T_INT, .off = F(timing.repeats), .imin = 1, .imax = 100},
    {KEY("timing", "statistic", "one of: min, median", "min",
         "the per-worker estimate of the repeated runs"),
     .type = T_ENUM, .off = F(timing.statistic), .names = timing_statistic_names},
    {KEY("timing", "cache", "one of: cold, warm", "cold",
         "cold: each accumulator is flushed from the CPU caches before each visit"),
     .type = T_ENUM, .off = F(timing.cache), .names = timing_cache_names},

    /* [network]: the SimGrid simulation of the schedules (docs/NETWORK.md). */
    {KEY("network", "simulate", "0 or 1", "1",
         "1: simulate every point's communication with SimGrid; 0: no simulated times"),
     .type = T_INT, .off = F(network.simulate), .imin = 0, .imax = 1},
    {KEY("network", "topology", "one of: flat, fattree, torus, dragonfly, file", "flat",
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
    {KEY("network", "model", "one of: LV08, CM02, SMPI", "LV08",
         "SimGrid's network model (each has its own latency and bandwidth factors)"),
     .type = T_ENUM, .off = F(network.model), .names = deftsim_net_model_names},
    {KEY("network", "crosstraffic", "0 or 1", "0",
         "SimGrid's network/crosstraffic: acknowledgements load the reverse path"),
     .type = T_INT, .off = F(network.crosstraffic), .imin = 0, .imax = 1},
    {KEY("network", "allgather", "one of: ring, recursive_doubling, bruck", "bruck",
         "allgather and allgatherv algorithm"),
     .type = T_ENUM, .off = F(network.allgather), .names = deftsim_allgather_names},
    {KEY("network", "allreduce", "one of: ring, recursive_doubling, rabenseifner", "rabenseifner",
         "allreduce algorithm"),
     .type = T_ENUM, .off = F(network.allreduce), .names = deftsim_allreduce_names},
    {KEY("network", "bcast", "one of: binomial, scatter_rdb_allgather, scatter_ring_allgather",
         "binomial", "broadcast algorithm"),
     .type = T_ENUM, .off = F(network.bcast), .names = deftsim_bcast_names},
    {KEY("network", "eager_threshold", "integer in [0, 2147483647]", "65536",
         "bytes: a smaller send returns at once, a larger one waits for its receiver"),
     .type = T_INT, .off = F(network.eager_threshold), .imin = 0, .imax = INT32_MAX},
    {KEY("network", "mode", "one of: exact, approximate", "exact",
         "approximate: equal-block rings simulate 6 steps and scale (named in every row)"),
     .type = T_ENUM, .off = F(network.mode), .names = deftsim_sim_mode_names},
    {KEY("network", "compute", "one of: measured, none", "measured",
         "compute phases in simulated time: as measured, or none (times from the bytes alone)"),
     .type = T_ENUM, .off = F(network.compute), .names = deftsim_sim_compute_names},

    /* [train]: deftsim train and deftsim trace record (docs/TRAINING.md). */
    {KEY("train", "model", "one of: mlp, cnn", "mlp",
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
};
#define NKEYS (sizeof keys / sizeof keys[0])

/* 0: default (or derived); > 0: the file line; -1: a --set override. */
struct deftsim_config_origin {
    int key_line[NKEYS];
    int section_line[NSECTIONS];
};

/* The keys' descriptions as deftsim_config_key() hands them out: the table's, with the
 * methods' type text and default filled in from the registry of methods. */
static deftsim_config_keyinfo infos[NKEYS];
static char methods_type[600], methods_dflt[400];
static pthread_once_t schema_once = PTHREAD_ONCE_INIT;

static void schema_init(void)
{
    size_t o = (size_t)snprintf(methods_type, sizeof methods_type, "list of: ");
    deftsim_method_list(0, methods_type + o, sizeof methods_type - o);
    deftsim_method_list(DEFTSIM_METHOD_CAP_DEFAULT, methods_dflt, sizeof methods_dflt);
    for (size_t i = 0; i < NKEYS; i++) {
        infos[i] = keys[i].info;
        if (keys[i].names_fn) {
            infos[i].type = methods_type;
            infos[i].dflt = methods_dflt;
        }
    }
}

static const deftsim_config_keyinfo *info_of(size_t i)
{
    pthread_once(&schema_once, schema_init);
    return &infos[i];
}

static const char *const *knames(const keydef *k) { return k->names_fn ? k->names_fn() : k->names; }

size_t deftsim_config_key_count(void) { return NKEYS; }
const deftsim_config_keyinfo *deftsim_config_key(size_t i) { return i < NKEYS ? info_of(i) : NULL; }
size_t deftsim_config_section_count(void) { return NSECTIONS; }
const char *deftsim_config_section_name(size_t i) { return i < NSECTIONS ? section_names[i] : NULL; }

static int section_index(const char *s)
{
    for (size_t i = 0; i < NSECTIONS; i++)
        if (strcmp(section_names[i], s) == 0) return (int)i;
    return -1;
}

static int key_index(const char *section, const char *key)
{
    for (size_t i = 0; i < NKEYS; i++)
        if (strcmp(keys[i].info.section, section) == 0 && strcmp(keys[i].info.key, key) == 0)
            return (int)i;
    return -1;
}

/* "sections: scenario, gradients, ..." or "keys: methods, densities, ..." for messages. */
static void list_sections(char *buf, size_t cap)
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
    for (size_t i = 0; i < NKEYS && o < cap; i++)
        if (strcmp(keys[i].info.section, section) == 0)
            o += (size_t)snprintf(buf + o, cap - o, "%s%s", o ? ", " : "", keys[i].info.key);
}

static deftsim_status unknown_key_error(deftsim_status st, const char *where, const char *section)
{
    char known[512];
    list_keys(section, known, sizeof known);
    if (!known[0])
        return deftsim_error_set(st, "%s: unknown key (the section has no keys yet)", where);
    return deftsim_error_set(st, "%s: unknown key (keys: %s)", where, known);
}

/* Keys the code itself refers to. */
static size_t kidx(const char *section, const char *key)
{
    int i = key_index(section, key);
    return i < 0 ? 0 : (size_t)i;
}

/* ---- values ----------------------------------------------------------------------------- */

/* A parsed value before it is committed into a config: owns s and arr. */
typedef struct {
    char *s;
    uint64_t u;
    int64_t i;
    double d;
    void *arr;
    size_t n;
} kval;

static void kval_free(kval *v)
{
    free(v->s);
    free(v->arr);
    memset(v, 0, sizeof *v);
}

static void *field(deftsim_config *cfg, size_t off) { return (char *)cfg + off; }
static const void *cfield(const deftsim_config *cfg, size_t off) { return (const char *)cfg + off; }

static void *get_ptr(const deftsim_config *cfg, size_t off)
{
    void *p;
    memcpy(&p, cfield(cfg, off), sizeof p);
    return p;
}

static void set_ptr(deftsim_config *cfg, size_t off, void *p) { memcpy(field(cfg, off), &p, sizeof p); }

static size_t get_count(const deftsim_config *cfg, size_t off)
{
    size_t n;
    memcpy(&n, cfield(cfg, off), sizeof n);
    return n;
}

static void set_count(deftsim_config *cfg, size_t off, size_t n) { memcpy(field(cfg, off), &n, sizeof n); }

static int get_int(const deftsim_config *cfg, size_t off)
{
    int v;
    memcpy(&v, cfield(cfg, off), sizeof v);
    return v;
}

/* Shortest "%.*g" text that reads back as exactly d. */
static void format_double(double d, char *buf, size_t cap)
{
    for (int p = 1; p <= 17; p++) {
        snprintf(buf, cap, "%.*g", p, d);
        if (strtod(buf, NULL) == d) return;
    }
}

static void format_range(const keydef *k, char *buf, size_t cap)
{
    char lo[40], hi[40];
    format_double(k->lo, lo, sizeof lo);
    format_double(k->hi, hi, sizeof hi);
    if (k->flags & HI_INF)
        snprintf(buf, cap, "%c%s, inf)", k->flags & LO_OPEN ? '(' : '[', lo);
    else
        snprintf(buf, cap, "%c%s, %s%c", k->flags & LO_OPEN ? '(' : '[', lo, hi,
                 k->flags & HI_OPEN ? ')' : ']');
}

/* Number checks shared by T_DOUBLE and T_DOUBLE_LIST; tok is the text as written. */
static deftsim_status parse_number(const keydef *k, const char *tok, double *out)
{
    double d;
    if (deftsim_parse_double(tok, &d))
        return deftsim_error_set(DEFTSIM_E_INPUT, "'%s' is not a number", tok);
    if (k->check) {
        const char *why = k->check(d);
        if (why) return deftsim_error_set(DEFTSIM_E_INPUT, "%s %s", tok, why);
    } else {
        int below = (k->flags & LO_OPEN) ? d <= k->lo : d < k->lo;
        int above = (k->flags & HI_INF) ? 0 : (k->flags & HI_OPEN) ? d >= k->hi : d > k->hi;
        if (below || above) {
            char range[96];
            format_range(k, range, sizeof range);
            return deftsim_error_set(DEFTSIM_E_INPUT, "%s is outside %s", tok, range);
        }
    }
    *out = d;
    return DEFTSIM_OK;
}

/* T_BANDWIDTH and T_DURATION: a number in the base unit (bytes/s, seconds) or with one of
 * SimGrid's units; the range is the base unit's. */
static deftsim_status parse_unit_number(const keydef *k, const char *tok, double *out)
{
    double d;
    int bw = k->type == T_BANDWIDTH;
    if (bw ? deftsim_parse_bandwidth(tok, &d) : deftsim_parse_duration(tok, &d))
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 bw ? "'%s' is not a bandwidth (bytes/s, or a number with Bps, "
                                      "kBps, MBps, GBps, KiBps, MiBps, GiBps, bps, kbps, Mbps, "
                                      "Gbps, ...)"
                                    : "'%s' is not a duration (seconds, or a number with s, ms, "
                                      "us, ns, ps)",
                                 tok);
    int below = (k->flags & LO_OPEN) ? d <= k->lo : d < k->lo;
    int above = (k->flags & HI_OPEN) ? d >= k->hi : d > k->hi;
    if (below || above) {
        char range[96], val[40];
        format_range(k, range, sizeof range);
        format_double(d, val, sizeof val);
        return deftsim_error_set(DEFTSIM_E_INPUT, "%s (%s %s) is outside %s %s", tok, val,
                                 bw ? "bytes/s" : "s", range, bw ? "bytes/s" : "s");
    }
    *out = d;
    return DEFTSIM_OK;
}

static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t') s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t')) s[--n] = '\0';
    return s;
}

/* Calls fn on each comma-separated item, trimmed; an empty item is an error. */
static deftsim_status for_each_item(const char *text, deftsim_status (*fn)(const char *, void *),
                                    void *ctx)
{
    char *copy = strdup(text);
    if (!copy) return deftsim_error_set(DEFTSIM_E_NOMEM, "out of memory");
    deftsim_status st = DEFTSIM_OK;
    char *p = copy;
    if (!*trim(copy)) {
        st = deftsim_error_set(DEFTSIM_E_INPUT, "empty list");
        goto done;
    }
    for (;;) {
        char *comma = strchr(p, ',');
        if (comma) *comma = '\0';
        char *item = trim(p);
        if (!*item) {
            st = deftsim_error_set(DEFTSIM_E_INPUT, "empty item in list '%s'", text);
            goto done;
        }
        if ((st = fn(item, ctx))) goto done;
        if (!comma) break;
        p = comma + 1;
    }
done:
    free(copy);
    return st;
}

typedef struct {
    const keydef *k;
    kval *v;
    size_t cap;
} list_ctx;

static deftsim_status grow(list_ctx *c, size_t elem)
{
    if (c->v->n < c->cap) return DEFTSIM_OK;
    if (c->v->n >= DEFTSIM_LIST_MAX)
        return deftsim_error_set(DEFTSIM_E_INPUT, "more than %d values", DEFTSIM_LIST_MAX);
    size_t nc = c->cap ? 2 * c->cap : 8;
    void *na = realloc(c->v->arr, nc * elem);
    if (!na) return deftsim_error_set(DEFTSIM_E_NOMEM, "out of memory");
    c->v->arr = na;
    c->cap = nc;
    return DEFTSIM_OK;
}

static deftsim_status parse_enum(const keydef *k, const char *tok, int *out)
{
    int e = enum_index(knames(k), tok);
    if (e < 0) {
        char all[256] = "";
        size_t o = 0;
        for (int i = 0; knames(k)[i] && o < sizeof all; i++)
            o += (size_t)snprintf(all + o, sizeof all - o, "%s%s", i ? ", " : "", knames(k)[i]);
        return deftsim_error_set(DEFTSIM_E_INPUT, "'%s' is not one of %s", tok, all);
    }
    *out = e;
    return DEFTSIM_OK;
}

static deftsim_status enum_item(const char *tok, void *ctx)
{
    list_ctx *c = ctx;
    int e = 0;
    deftsim_status st = parse_enum(c->k, tok, &e);
    if (st) return st;
    int *a = c->v->arr;
    for (size_t i = 0; i < c->v->n; i++)
        if (a[i] == e) return deftsim_error_set(DEFTSIM_E_INPUT, "'%s' is listed twice", tok);
    if ((st = grow(c, sizeof(int)))) return st;
    ((int *)c->v->arr)[c->v->n++] = e;
    return DEFTSIM_OK;
}

static deftsim_status double_item(const char *tok, void *ctx)
{
    list_ctx *c = ctx;
    double d;
    deftsim_status st = parse_number(c->k, tok, &d);
    if (st) return st;
    double *a = c->v->arr;
    for (size_t i = 0; i < c->v->n; i++)
        if (a[i] == d) return deftsim_error_set(DEFTSIM_E_INPUT, "%s is listed twice", tok);
    if ((st = grow(c, sizeof(double)))) return st;
    ((double *)c->v->arr)[c->v->n++] = d;
    return DEFTSIM_OK;
}

/* Strings must survive a trip through a file and into the results' JSON manifest: valid UTF-8,
 * printable, and no " ;" that inih would read as the start of an inline comment. */
static deftsim_status check_string(const char *s)
{
    size_t bad;
    if (deftsim_utf8_check(s, &bad))
        return deftsim_error_set(DEFTSIM_E_INPUT, "not valid UTF-8 (byte %zu of the value)",
                                 bad + 1);
    /* A printed configuration writes "key = value": a leading ';' would follow a space. */
    if (s[0] == ';')
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "'%s' starts with ';', which a scenario file reads as a comment "
                                 "after 'key = '", s);
    for (const char *p = s; *p; p++) {
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            return deftsim_error_set(DEFTSIM_E_INPUT, "'%s' contains a control character", s);
        if (*p == ';' && p > s && (p[-1] == ' ' || p[-1] == '\t'))
            return deftsim_error_set(DEFTSIM_E_INPUT,
                                     "'%s' contains ' ;', which a scenario file reads as a comment", s);
    }
    if (s[0] && (s[0] == ' ' || s[0] == '\t' || s[strlen(s) - 1] == ' ' || s[strlen(s) - 1] == '\t'))
        return deftsim_error_set(DEFTSIM_E_INPUT, "'%s' starts or ends with a space", s);
    return DEFTSIM_OK;
}

static deftsim_status parse_value(const keydef *k, const char *text, kval *v)
{
    memset(v, 0, sizeof *v);
    deftsim_status st;
    switch (k->type) {
    case T_NAME:
    case T_PATH:
    case T_OPTPATH:
        if (!text[0]) {
            if (k->type == T_OPTPATH) return DEFTSIM_OK; /* unset */
            return deftsim_error_set(DEFTSIM_E_INPUT, "empty value");
        }
        if ((st = check_string(text))) return st;
        if (k->type == T_NAME) {
            if (strlen(text) > NAME_MAX_LEN)
                return deftsim_error_set(DEFTSIM_E_INPUT, "'%.20s...' is longer than %d characters",
                                         text, NAME_MAX_LEN);
            if (strchr(text, '/'))
                return deftsim_error_set(DEFTSIM_E_INPUT, "'%s' contains '/'", text);
        }
        v->s = strdup(text);
        if (!v->s) return deftsim_error_set(DEFTSIM_E_NOMEM, "out of memory");
        return DEFTSIM_OK;
    case T_U64:
        if (!text[0]) return deftsim_error_set(DEFTSIM_E_INPUT, "empty value");
        if (text[0] == '-' || text[0] == '+' || deftsim_parse_u64(text, &v->u)) {
            int64_t neg;
            if (text[0] == '-' && !deftsim_parse_i64(text, &neg))
                return deftsim_error_set(DEFTSIM_E_INPUT, "%s is outside [%lld, %lld]", text,
                                         (long long)k->imin, (long long)k->imax);
            return deftsim_error_set(DEFTSIM_E_INPUT, "'%s' is not an integer", text);
        }
        if (v->u > (uint64_t)k->imax)
            return deftsim_error_set(DEFTSIM_E_INPUT, "%s is outside [%lld, %lld]", text,
                                     (long long)k->imin, (long long)k->imax);
        return DEFTSIM_OK;
    case T_INT:
        if (!text[0]) return deftsim_error_set(DEFTSIM_E_INPUT, "empty value");
        if (text[0] == '+' || deftsim_parse_i64(text, &v->i))
            return deftsim_error_set(DEFTSIM_E_INPUT, "'%s' is not an integer", text);
        if (k->choices) {
            char all[64] = "";
            size_t o = 0;
            for (const int *c = k->choices; *c; c++) {
                if (*c == v->i) return DEFTSIM_OK;
                o += (size_t)snprintf(all + o, sizeof all - o, "%s%d", o ? ", " : "", *c);
            }
            return deftsim_error_set(DEFTSIM_E_INPUT, "%s is not one of %s", text, all);
        }
        if (v->i < k->imin || v->i > k->imax)
            return deftsim_error_set(DEFTSIM_E_INPUT, "%s is outside [%lld, %lld]", text,
                                     (long long)k->imin, (long long)k->imax);
        return DEFTSIM_OK;
    case T_DOUBLE:
        if (!text[0]) return deftsim_error_set(DEFTSIM_E_INPUT, "empty value");
        return parse_number(k, text, &v->d);
    case T_BANDWIDTH:
    case T_DURATION:
        if (!text[0]) return deftsim_error_set(DEFTSIM_E_INPUT, "empty value");
        return parse_unit_number(k, text, &v->d);
    case T_ENUM: {
        int e = 0;
        if (!text[0]) return deftsim_error_set(DEFTSIM_E_INPUT, "empty value");
        if ((st = parse_enum(k, text, &e))) return st;
        v->i = e;
        return DEFTSIM_OK;
    }
    case T_ENUM_LIST:
    case T_DOUBLE_LIST: {
        list_ctx c = {k, v, 0};
        st = for_each_item(text, k->type == T_ENUM_LIST ? enum_item : double_item, &c);
        if (st) kval_free(v);
        return st;
    }
    case T_INT_LIST: {
        int64_t *a;
        st = deftsim_parse_int_list(text, k->imin, k->imax, &a, &v->n);
        if (!st) v->arr = a;
        return st;
    }
    }
    return deftsim_error_set(DEFTSIM_E_INTERNAL, "config: unhandled key type");
}

/* Renders a value as its INI text: the inverse of parse_value(). Returns the length needed. */
static size_t render(const keydef *k, const kval *v, char *buf, size_t cap)
{
    size_t o = 0;
#define PUT(...) (o += (size_t)snprintf(o < cap ? buf + o : NULL, o < cap ? cap - o : 0, __VA_ARGS__))
    if (cap) buf[0] = '\0';
    switch (k->type) {
    case T_NAME:
    case T_PATH:
    case T_OPTPATH: PUT("%s", v->s ? v->s : ""); break;
    case T_U64: PUT("%llu", (unsigned long long)v->u); break;
    case T_INT: PUT("%lld", (long long)v->i); break;
    case T_DOUBLE:
    case T_BANDWIDTH:
    case T_DURATION: {
        /* Bandwidths and durations print in their base unit, with it: 3.125e+09Bps, 1e-06s. */
        char d[40];
        format_double(v->d, d, sizeof d);
        PUT("%s%s", d, k->type == T_BANDWIDTH ? "Bps" : k->type == T_DURATION ? "s" : "");
        break;
    }
    case T_ENUM: PUT("%s", knames(k)[v->i]); break;
    case T_ENUM_LIST:
        for (size_t i = 0; i < v->n; i++) PUT("%s%s", i ? ", " : "", knames(k)[((int *)v->arr)[i]]);
        break;
    case T_DOUBLE_LIST:
        for (size_t i = 0; i < v->n; i++) {
            char d[40];
            format_double(((double *)v->arr)[i], d, sizeof d);
            PUT("%s%s", i ? ", " : "", d);
        }
        break;
    case T_INT_LIST:
        o = deftsim_format_int_list(v->arr, v->n, buf, cap);
        break;
    }
#undef PUT
    return o;
}

/* A non-owning view of a config's value, for render() and comparisons. */
static kval view(const deftsim_config *cfg, const keydef *k)
{
    kval v = {0};
    switch (k->type) {
    case T_NAME:
    case T_PATH:
    case T_OPTPATH: v.s = get_ptr(cfg, k->off); break;
    case T_U64: memcpy(&v.u, cfield(cfg, k->off), sizeof v.u); break;
    case T_INT:
    case T_ENUM: v.i = get_int(cfg, k->off); break;
    case T_DOUBLE:
    case T_BANDWIDTH:
    case T_DURATION: memcpy(&v.d, cfield(cfg, k->off), sizeof v.d); break;
    case T_ENUM_LIST:
    case T_DOUBLE_LIST:
    case T_INT_LIST:
        v.arr = get_ptr(cfg, k->off);
        v.n = get_count(cfg, k->count_off);
        break;
    }
    return v;
}

static deftsim_status fits_one_line(const keydef *k, const kval *v)
{
    size_t len = strlen(k->info.key) + 3 + render(k, v, NULL, 0);
    if (len > DEFTSIM_CONFIG_MAX_LINE)
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "value too long: '%s = ...' would need %zu characters, more than "
                                 "the %d a scenario file's line holds",
                                 k->info.key, len, DEFTSIM_CONFIG_MAX_LINE);
    return DEFTSIM_OK;
}

static void release(deftsim_config *cfg, const keydef *k)
{
    switch (k->type) {
    case T_NAME:
    case T_PATH:
    case T_OPTPATH:
    case T_ENUM_LIST:
    case T_DOUBLE_LIST:
    case T_INT_LIST:
        free(get_ptr(cfg, k->off));
        set_ptr(cfg, k->off, NULL);
        if (k->count_off) set_count(cfg, k->count_off, 0);
        break;
    default: break;
    }
}

/* Moves v into the config (v is left empty). */
static void commit(deftsim_config *cfg, const keydef *k, kval *v)
{
    release(cfg, k);
    switch (k->type) {
    case T_NAME:
    case T_PATH:
    case T_OPTPATH: set_ptr(cfg, k->off, v->s); v->s = NULL; break;
    case T_U64: memcpy(field(cfg, k->off), &v->u, sizeof v->u); break;
    case T_INT:
    case T_ENUM: {
        int i = (int)v->i;
        memcpy(field(cfg, k->off), &i, sizeof i);
        break;
    }
    case T_DOUBLE:
    case T_BANDWIDTH:
    case T_DURATION: memcpy(field(cfg, k->off), &v->d, sizeof v->d); break;
    case T_ENUM_LIST:
    case T_DOUBLE_LIST:
    case T_INT_LIST:
        set_ptr(cfg, k->off, v->arr);
        set_count(cfg, k->count_off, v->n);
        v->arr = NULL;
        v->n = 0;
        break;
    }
}

/* Parses, validates and stores one value; on failure the config is unchanged and the message
 * (without location) is recorded. */
static deftsim_status set_value(deftsim_config *cfg, const keydef *k, const char *text)
{
    kval v;
    deftsim_status st = parse_value(k, text, &v);
    if (!st) st = fits_one_line(k, &v);
    if (!st) commit(cfg, k, &v);
    kval_free(&v);
    return st;
}

/* ---- locations -------------------------------------------------------------------------- */

/* Where key k got its value, as a message prefix: "file:LINE: [section] key",
 * "--set section.key", or for a default the file and its section's line when present. */
static void where(const deftsim_config *cfg, size_t k, char *buf, size_t cap)
{
    const keydef *kd = &keys[k];
    int line = cfg->origin ? cfg->origin->key_line[k] : 0;
    if (line < 0) {
        snprintf(buf, cap, "--set %s.%s", kd->info.section, kd->info.key);
        return;
    }
    if (line == 0 && cfg->origin) line = cfg->origin->section_line[section_index(kd->info.section)];
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
    int k = key_index(section, key);
    if (k < 0) snprintf(buf, cap, "[%s] %s", section, key);
    else where(cfg, (size_t)k, buf, cap);
}

/* ---- lifecycle -------------------------------------------------------------------------- */

void deftsim_config_free(deftsim_config *cfg)
{
    if (!cfg) return;
    for (size_t i = 0; i < NKEYS; i++) release(cfg, &keys[i]);
    free(cfg->path);
    free(cfg->origin);
    free(cfg);
}

/* Keeps output at results/<name> while the user has not set it. */
static deftsim_status derive(deftsim_config *cfg)
{
    size_t k = kidx("scenario", "output");
    if (cfg->origin->key_line[k] != 0) return DEFTSIM_OK;
    char buf[NAME_MAX_LEN + 16];
    snprintf(buf, sizeof buf, "results/%s", cfg->scenario.name);
    deftsim_status st = set_value(cfg, &keys[k], buf);
    if (st) {
        char w[512];
        where(cfg, k, w, sizeof w);
        return deftsim_error_wrap(st, "%s", w);
    }
    return DEFTSIM_OK;
}

static deftsim_status config_new(const char *name, const char *path, deftsim_config **out)
{
    *out = NULL;
    deftsim_config *cfg = calloc(1, sizeof *cfg);
    if (!cfg || !(cfg->origin = calloc(1, sizeof *cfg->origin))) {
        free(cfg);
        return deftsim_error_set(DEFTSIM_E_NOMEM, "out of memory");
    }
    deftsim_status st;
    if (path && !(cfg->path = strdup(path))) {
        st = deftsim_error_set(DEFTSIM_E_NOMEM, "out of memory");
        goto fail;
    }
    for (size_t i = 0; i < NKEYS; i++) {
        const char *dflt = info_of(i)->dflt;
        if (!dflt) continue;
        if ((st = set_value(cfg, &keys[i], dflt))) {
            /* The table's own defaults failed its own checks: a bug, not bad input. */
            st = deftsim_error_wrap(DEFTSIM_E_INTERNAL, "default of [%s] %s", keys[i].info.section,
                                    keys[i].info.key);
            goto fail;
        }
    }
    if ((st = set_value(cfg, &keys[kidx("scenario", "name")], name))) {
        st = deftsim_error_wrap(st, "[scenario] name");
        goto fail;
    }
    if ((st = derive(cfg))) goto fail;
    *out = cfg;
    return DEFTSIM_OK;
fail:
    deftsim_config_free(cfg);
    return st;
}

deftsim_status deftsim_config_default(const char *name, deftsim_config **out)
{
    return config_new(name ? name : "scenario", NULL, out);
}

deftsim_status deftsim_config_clone(const deftsim_config *cfg, deftsim_config **out)
{
    *out = NULL;
    deftsim_config *c = calloc(1, sizeof *c);
    if (!c) return deftsim_error_set(DEFTSIM_E_NOMEM, "out of memory");
    *c = *cfg;
    c->path = NULL;
    c->origin = NULL;
    /* Drop the shallow pointers first so that a failure below frees only what c owns. */
    for (size_t i = 0; i < NKEYS; i++) {
        ktype t = keys[i].type;
        if (t == T_NAME || t == T_PATH || t == T_OPTPATH || t == T_ENUM_LIST ||
            t == T_DOUBLE_LIST || t == T_INT_LIST) {
            set_ptr(c, keys[i].off, NULL);
            if (keys[i].count_off) set_count(c, keys[i].count_off, 0);
        }
    }
    if (!(c->origin = malloc(sizeof *c->origin))) goto nomem;
    memcpy(c->origin, cfg->origin, sizeof *c->origin);
    if (cfg->path && !(c->path = strdup(cfg->path))) goto nomem;
    for (size_t i = 0; i < NKEYS; i++) {
        const keydef *k = &keys[i];
        kval v = view(cfg, k);
        size_t elem = k->type == T_ENUM_LIST ? sizeof(int)
                    : k->type == T_DOUBLE_LIST ? sizeof(double) : sizeof(int64_t);
        switch (k->type) {
        case T_NAME:
        case T_PATH:
        case T_OPTPATH:
            if (v.s) {
                char *s = strdup(v.s);
                if (!s) goto nomem;
                set_ptr(c, k->off, s);
            }
            break;
        case T_ENUM_LIST:
        case T_DOUBLE_LIST:
        case T_INT_LIST: {
            void *a = malloc(v.n ? v.n * elem : 1);
            if (!a) goto nomem;
            if (v.n) memcpy(a, v.arr, v.n * elem);
            set_ptr(c, k->off, a);
            set_count(c, k->count_off, v.n);
            break;
        }
        default: break;
        }
    }
    *out = c;
    return DEFTSIM_OK;
nomem:
    deftsim_config_free(c);
    return deftsim_error_set(DEFTSIM_E_NOMEM, "out of memory");
}

int deftsim_config_equal(const deftsim_config *a, const deftsim_config *b)
{
    for (size_t i = 0; i < NKEYS; i++) {
        const keydef *k = &keys[i];
        kval x = view(a, k), y = view(b, k);
        size_t elem = k->type == T_ENUM_LIST ? sizeof(int)
                    : k->type == T_DOUBLE_LIST ? sizeof(double) : sizeof(int64_t);
        switch (k->type) {
        case T_NAME:
        case T_PATH:
        case T_OPTPATH:
            if (!x.s != !y.s || (x.s && strcmp(x.s, y.s))) return 0;
            break;
        case T_U64: if (x.u != y.u) return 0; break;
        case T_INT:
        case T_ENUM: if (x.i != y.i) return 0; break;
        case T_DOUBLE:
        case T_BANDWIDTH:
        case T_DURATION: if (x.d != y.d) return 0; break;
        case T_ENUM_LIST:
        case T_DOUBLE_LIST:
        case T_INT_LIST:
            if (x.n != y.n || (x.n && memcmp(x.arr, y.arr, x.n * elem))) return 0;
            break;
        }
    }
    return 1;
}

/* ---- overrides -------------------------------------------------------------------------- */

deftsim_status deftsim_config_apply_override(deftsim_config *cfg, const char *assignment)
{
    deftsim_status st = DEFTSIM_OK;
    char *copy = strdup(assignment);
    if (!copy) return deftsim_error_set(DEFTSIM_E_NOMEM, "out of memory");
    char *eq = strchr(copy, '=');
    if (!eq) {
        st = deftsim_error_set(DEFTSIM_E_USAGE, "--set %s: expected section.key=value", assignment);
        goto done;
    }
    *eq = '\0';
    char *lhs = trim(copy), *value = trim(eq + 1);
    char *dot = strchr(lhs, '.');
    if (!dot) {
        st = deftsim_error_set(DEFTSIM_E_USAGE,
                               "--set %s: no section (expected section.key=value)", lhs);
        goto done;
    }
    *dot = '\0';
    const char *section = lhs, *key = dot + 1;
    if (section_index(section) < 0) {
        char known[256];
        list_sections(known, sizeof known);
        st = deftsim_error_set(DEFTSIM_E_USAGE, "--set %s.%s: unknown section (sections: %s)",
                               section, key, known);
        goto done;
    }
    int k = key_index(section, key);
    char w[300];
    snprintf(w, sizeof w, "--set %s.%s", section, key);
    if (k < 0) {
        st = unknown_key_error(DEFTSIM_E_USAGE, w, section);
        goto done;
    }
    if ((st = set_value(cfg, &keys[k], value))) {
        st = deftsim_error_wrap(st, "%s", w);
        goto done;
    }
    cfg->origin->key_line[k] = -1;
    if ((size_t)k == kidx("scenario", "name")) st = derive(cfg);
done:
    free(copy);
    return st;
}

/* ---- the file reader -------------------------------------------------------------------- */

/* inih does not pass line numbers to the handler in Debian's build (INI_HANDLER_LINENO is 0),
 * so the text is fed to it line by line through this reader, which counts lines. The reader
 * also does what inih would accept silently: it rejects section headers that are unknown,
 * repeated or followed by text, lines without '=', and lines too long for inih's buffer
 * (which inih would split into two lines). It strips leading blanks so that an indented line
 * is never taken as a continuation of the previous value. */
typedef struct {
    const char *p, *end;
    int line;
    int failed;        /* set once a message is recorded; the reader then ends the parse */
    deftsim_status st;
    deftsim_config *cfg;
} reader_state;

static deftsim_status fail_at(reader_state *rs, deftsim_status st)
{
    rs->failed = 1;
    rs->st = st;
    return st;
}

static char *ini_reader_fn(char *str, int num, void *stream)
{
    reader_state *rs = stream;
    if (rs->failed || rs->p >= rs->end) return NULL;
    const char *nl = memchr(rs->p, '\n', (size_t)(rs->end - rs->p));
    const char *s = rs->p, *e = nl ? nl : rs->end;
    rs->p = nl ? nl + 1 : rs->end;
    rs->line++;
    const char *path = rs->cfg->path;
    if (rs->line == 1 && e - s >= 3 && memcmp(s, "\xEF\xBB\xBF", 3) == 0) s += 3;
    while (s < e && (*s == ' ' || *s == '\t')) s++;
    while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r')) e--;
    size_t len = (size_t)(e - s);
    int limit = num - 2 < DEFTSIM_CONFIG_MAX_LINE ? num - 2 : DEFTSIM_CONFIG_MAX_LINE;
    if (len > (size_t)limit) {
        fail_at(rs, deftsim_error_set(DEFTSIM_E_INPUT, "%s:%d: line longer than %d characters",
                                      path, rs->line, limit));
        return NULL;
    }
    char text[DEFTSIM_CONFIG_MAX_LINE + 1];
    memcpy(text, s, len);
    text[len] = '\0';
    if (len && text[0] == '[') {
        char *close = strchr(text, ']');
        if (!close) {
            fail_at(rs, deftsim_error_set(DEFTSIM_E_INPUT, "%s:%d: '%s': section header without ']'",
                                          path, rs->line, text));
            return NULL;
        }
        const char *rest = close + 1;
        while (*rest == ' ' || *rest == '\t') rest++;
        if (*rest && *rest != ';' && *rest != '#') {
            fail_at(rs, deftsim_error_set(DEFTSIM_E_INPUT, "%s:%d: '%s': text after the section header",
                                          path, rs->line, text));
            return NULL;
        }
        *close = '\0';
        int si = section_index(text + 1);
        if (si < 0) {
            char known[256];
            list_sections(known, sizeof known);
            fail_at(rs, deftsim_error_set(DEFTSIM_E_INPUT, "%s:%d: [%s]: unknown section (sections: %s)",
                                          path, rs->line, text + 1, known));
            return NULL;
        }
        int *first = &rs->cfg->origin->section_line[si];
        if (*first) {
            fail_at(rs, deftsim_error_set(DEFTSIM_E_INPUT,
                                          "%s:%d: [%s]: section given twice (first on line %d)",
                                          path, rs->line, text + 1, *first));
            return NULL;
        }
        *first = rs->line;
        *close = ']';
    } else if (len && text[0] != ';' && text[0] != '#') {
        /* inih's rule: '=' or ':' before any inline comment (a ';' after a blank). */
        int ok = 0;
        for (size_t i = 0; i < len; i++) {
            if (text[i] == '=' || text[i] == ':') { ok = 1; break; }
            if (text[i] == ';' && i && (text[i - 1] == ' ' || text[i - 1] == '\t')) break;
        }
        if (!ok) {
            fail_at(rs, deftsim_error_set(DEFTSIM_E_INPUT,
                                          "%s:%d: '%s' is not '[section]', 'key = value' or a comment",
                                          path, rs->line, text));
            return NULL;
        }
    }
    memcpy(str, text, len);
    str[len] = '\n';
    str[len + 1] = '\0';
    return str;
}

static int ini_handler_fn(void *user, const char *section, const char *name, const char *value)
{
    reader_state *rs = user;
    if (rs->failed) return 0;
    const char *path = rs->cfg->path;
    if (!value) value = "";
    if (!section[0]) {
        fail_at(rs, deftsim_error_set(DEFTSIM_E_INPUT, "%s:%d: %s: key outside any section", path,
                                      rs->line, name));
        return 0;
    }
    char w[512];
    if (!name[0]) {
        fail_at(rs, deftsim_error_set(DEFTSIM_E_INPUT, "%s:%d: [%s]: no key before '='", path,
                                      rs->line, section));
        return 0;
    }
    snprintf(w, sizeof w, "%s:%d: [%s] %s", path, rs->line, section, name);
    int k = key_index(section, name);
    if (k < 0) {
        fail_at(rs, unknown_key_error(DEFTSIM_E_INPUT, w, section));
        return 0;
    }
    int *first = &rs->cfg->origin->key_line[k];
    if (*first > 0) {
        fail_at(rs, deftsim_error_set(DEFTSIM_E_INPUT, "%s: duplicate key (first on line %d)", w,
                                      *first));
        return 0;
    }
    deftsim_status st = set_value(rs->cfg, &keys[k], value);
    if (st) {
        fail_at(rs, deftsim_error_wrap(st, "%s", w));
        return 0;
    }
    *first = rs->line;
    return 1;
}

static void default_name(const char *origin, char *buf, size_t cap)
{
    const char *base = strrchr(origin, '/');
    base = base ? base + 1 : origin;
    snprintf(buf, cap, "%s", base);
    size_t n = strlen(buf);
    if (n > 4 && strcmp(buf + n - 4, ".ini") == 0) buf[n - 4] = '\0';
}

static deftsim_status config_check(const deftsim_config *cfg, int train);

static deftsim_status parse_impl(const char *text, const char *origin,
                                 const char *const *overrides, size_t noverrides, int train,
                                 deftsim_config **out)
{
    *out = NULL;
    /* The name from the file's name is filled in last, and only if neither the file nor an
     * override sets one, so that an odd file name never stands in the way of an explicit one. */
    deftsim_config *cfg;
    deftsim_status st = config_new("scenario", origin, &cfg);
    if (st) return st;

    reader_state rs = {.p = text, .end = text + strlen(text), .cfg = cfg};
    int r = ini_parse_stream(ini_reader_fn, &rs, ini_handler_fn, &rs);
    if (rs.failed) {
        st = rs.st;
        goto fail;
    }
    if (r != 0) {
        /* Only reachable if inih rejects something the reader let through. */
        st = deftsim_error_set(DEFTSIM_E_INPUT, "%s:%d: syntax error", origin, r);
        goto fail;
    }
    for (size_t i = 0; i < noverrides; i++)
        if ((st = deftsim_config_apply_override(cfg, overrides[i]))) goto fail;
    size_t kn = kidx("scenario", "name");
    if (cfg->origin->key_line[kn] == 0) {
        char name[4096];
        default_name(origin, name, sizeof name);
        if ((st = set_value(cfg, &keys[kn], name))) {
            char w[512], why[512];
            where(cfg, kn, w, sizeof w);
            snprintf(why, sizeof why, "%s", deftsim_error_message());
            st = deftsim_error_set(st, "%s: %s (from the file's name; set it in the file)", w, why);
            goto fail;
        }
    }
    if ((st = derive(cfg))) goto fail;
    if ((st = config_check(cfg, train))) goto fail;
    *out = cfg;
    return DEFTSIM_OK;
fail:
    deftsim_config_free(cfg);
    return st;
}

deftsim_status deftsim_config_parse(const char *text, const char *origin,
                                    const char *const *overrides, size_t noverrides,
                                    deftsim_config **out)
{
    return parse_impl(text, origin, overrides, noverrides, 0, out);
}

deftsim_status deftsim_config_parse_train(const char *text, const char *origin,
                                          const char *const *overrides, size_t noverrides,
                                          deftsim_config **out)
{
    return parse_impl(text, origin, overrides, noverrides, 1, out);
}

static deftsim_status load_impl(const char *path, const char *const *overrides,
                                size_t noverrides, int train, deftsim_config **out)
{
    *out = NULL;
    char *text;
    size_t len;
    deftsim_status st = deftsim_read_file(path, &text, &len);
    if (st) return st;
    if (strlen(text) != len) {
        free(text);
        return deftsim_error_set(DEFTSIM_E_INPUT, "%s: contains a NUL byte", path);
    }
    st = parse_impl(text, path, overrides, noverrides, train, out);
    free(text);
    return st;
}

deftsim_status deftsim_config_load(const char *path, const char *const *overrides,
                                   size_t noverrides, deftsim_config **out)
{
    return load_impl(path, overrides, noverrides, 0, out);
}

deftsim_status deftsim_config_load_train(const char *path, const char *const *overrides,
                                         size_t noverrides, deftsim_config **out)
{
    return load_impl(path, overrides, noverrides, 1, out);
}

/* ---- cross-field rules ------------------------------------------------------------------ */

void deftsim_config_sim_params(const deftsim_config *cfg, uint32_t P, uint32_t elem_bytes,
                               deftsim_sim_params *out)
{
    deftsim_sim_params_default(out);
    out->P = P;
    out->topology = cfg->network.topology;
    out->platform_file = cfg->network.platform_file;
    out->topology_params = cfg->network.topology_params;
    out->bandwidth = cfg->network.bandwidth;
    out->latency = cfg->network.latency;
    out->backbone_bandwidth = cfg->network.backbone_bandwidth;
    out->model = cfg->network.model;
    out->crosstraffic = cfg->network.crosstraffic;
    out->allgather = cfg->network.allgather;
    out->allreduce = cfg->network.allreduce;
    out->bcast = cfg->network.bcast;
    out->eager_threshold = (uint64_t)cfg->network.eager_threshold;
    out->elem_bytes = elem_bytes;
    out->mode = cfg->network.mode;
    out->compute = cfg->network.compute;
}

/* [network]: the platform must hold the largest worker count. The simulation's messages start
 * with the field they are about ("topology_params '4,4': ..."), which names the key here. */
static deftsim_status network_check(const deftsim_config *cfg)
{
    char w[512];
    uint32_t P = 1;
    for (size_t i = 0; i < cfg->workers.ncounts; i++)
        if ((uint32_t)cfg->workers.counts[i] > P) P = (uint32_t)cfg->workers.counts[i];
    deftsim_sim_params sp;
    deftsim_config_sim_params(cfg, P, 4, &sp);
    char tp[128];
    uint64_t hosts;
    deftsim_status st = deftsim_sim_platform_shape(&sp, tp, sizeof tp, &hosts);
    if (st) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", deftsim_error_message());
        static const char *const fields[] = {"topology_params", "platform_file",
                                             "backbone_bandwidth", "bandwidth", "latency"};
        size_t k = kidx("network", "topology");
        const char *rest = msg;
        for (size_t f = 0; f < sizeof fields / sizeof fields[0]; f++) {
            size_t len = strlen(fields[f]);
            if (strncmp(msg, fields[f], len) == 0 && (msg[len] == ' ' || msg[len] == ':')) {
                k = kidx("network", fields[f]);
                rest = msg + len + (msg[len] == ':' ? 2 : 1);
                break;
            }
        }
        where(cfg, k, w, sizeof w);
        if (P > 1 && strstr(rest, "workers"))
            return deftsim_error_set(st, "%s: %s (the largest of [workers] counts)", w, rest);
        return deftsim_error_set(st, "%s: %s", w, rest);
    }
    if (cfg->network.topology == DEFTSIM_TOPO_FILE && access(cfg->network.platform_file, R_OK) != 0) {
        where(cfg, kidx("network", "platform_file"), w, sizeof w);
        return deftsim_error_set(DEFTSIM_E_INPUT, "%s: cannot read %s: %s", w,
                                 cfg->network.platform_file, strerror(errno));
    }
    /* A user's platform is loaded once here (in a child: SimGrid aborts on a file it cannot
     * parse), so that a broken file stops the run before any point, naming the file. */
    if (cfg->network.topology == DEFTSIM_TOPO_FILE && cfg->network.simulate &&
        (st = deftsim_sim_check_platform(&sp))) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", deftsim_error_message());
        where(cfg, kidx("network", "platform_file"), w, sizeof w);
        return deftsim_error_set(st, "%s: %s%s", w, msg,
                                 P > 1 && strstr(msg, "fewer than")
                                     ? " (the largest of [workers] counts)" : "");
    }
    return DEFTSIM_OK;
}

/* [sparsify]: wire = reference sends what the authors' code sends, 4-byte (fp32) values
 * among them (gTop-k's 16-byte pairs hold a float64 value); it has no 2-byte value. */
static deftsim_status sparsify_check(const deftsim_config *cfg)
{
    char w[512], ww[512];
    if (cfg->sparsify.wire == DEFTSIM_WIRE_REFERENCE && cfg->sparsify.value_bytes != 4) {
        where(cfg, kidx("sparsify", "value_bytes"), w, sizeof w);
        where(cfg, kidx("sparsify", "wire"), ww, sizeof ww);
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "%s: %d, but wire = reference (%s) sends 4-byte (fp32) values, "
                                 "as the authors' code does; set value_bytes = 4, or wire = spec",
                                 w, cfg->sparsify.value_bytes, ww);
    }
    return DEFTSIM_OK;
}

/* [device]: kind = profile needs a profile, and a profile needs kind = profile. The file
 * itself is read when a run starts (deftsim_profile_load names its line and column). */
static deftsim_status device_check(const deftsim_config *cfg)
{
    char w[512], ww[512];
    where(cfg, kidx("device", "kind"), w, sizeof w);
    where(cfg, kidx("device", "profile"), ww, sizeof ww);
    if (cfg->device.kind == DEFTSIM_DEVICE_PROFILE && !cfg->device.profile)
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "%s: profile, but [device] profile is not set (name a device "
                                 "profile CSV: deftsim bench kernels --profile FILE)",
                                 w);
    if (cfg->device.kind != DEFTSIM_DEVICE_PROFILE && cfg->device.profile)
        return deftsim_error_set(DEFTSIM_E_INPUT, "%s: set, but [device] kind = %s (a profile "
                                 "needs kind = profile)",
                                 ww, deftsim_device_kind_name(cfg->device.kind));
    return DEFTSIM_OK;
}

deftsim_status deftsim_config_check(const deftsim_config *cfg)
{
    return config_check(cfg, 0);
}

/* train: the scenario drives deftsim train or trace record, whose gradients come from the
 * network itself: a synthetic source may leave [gradients] model unset (when set, it must
 * load, and the trainer compares it with the network's table). */
static deftsim_status config_check(const deftsim_config *cfg, int train)
{
    char w[512];
    {
        deftsim_status nst = network_check(cfg);
        if (nst) return nst;
        if ((nst = sparsify_check(cfg))) return nst;
        if ((nst = device_check(cfg))) return nst;
    }
    int km = key_index("gradients", "model"), kt = key_index("gradients", "trace");
    int kc = key_index("workers", "counts");
    const char *src = deftsim_source_name(cfg->gradients.source);
    if (cfg->gradients.source == DEFTSIM_SOURCE_SYNTHETIC) {
        if (!cfg->gradients.model && train) {
            if (cfg->gradients.trace) {
                where(cfg, (size_t)kt, w, sizeof w);
                return deftsim_error_set(DEFTSIM_E_INPUT,
                                         "%s: set, but source = %s (a trace needs source = trace)",
                                         w, src);
            }
            return DEFTSIM_OK;
        }
        if (!cfg->gradients.model) {
            where(cfg, (size_t)km, w, sizeof w);
            return deftsim_error_set(DEFTSIM_E_INPUT, "%s: missing (required when source = %s)", w, src);
        }
        if (cfg->gradients.trace) {
            where(cfg, (size_t)kt, w, sizeof w);
            return deftsim_error_set(DEFTSIM_E_INPUT,
                                     "%s: set, but source = %s (a trace needs source = trace)", w, src);
        }
    } else {
        if (!cfg->gradients.trace) {
            where(cfg, (size_t)kt, w, sizeof w);
            return deftsim_error_set(DEFTSIM_E_INPUT, "%s: missing (required when source = %s)", w, src);
        }
        if (cfg->gradients.model) {
            where(cfg, (size_t)km, w, sizeof w);
            return deftsim_error_set(DEFTSIM_E_INPUT,
                                     "%s: set, but source = %s (a trace names its own model)", w, src);
        }
        return DEFTSIM_OK;
    }

    /* The model may be a comma-separated list, one model per sweep variant (deftsim sweep
     * runs each; the engine takes one): every one must load and hold the worker counts. */
    deftsim_status st = DEFTSIM_OK;
    const char *p = cfg->gradients.model;
    for (;;) {
        size_t len = strcspn(p, ",");
        while (len && isspace((unsigned char)*p)) p++, len--;
        while (len && isspace((unsigned char)p[len - 1])) len--;
        char *one = strndup(p, len);
        if (!one) return deftsim_error_set(DEFTSIM_E_NOMEM, "config: out of memory");
        if (!len) {
            free(one);
            where(cfg, (size_t)km, w, sizeof w);
            return deftsim_error_set(DEFTSIM_E_INPUT, "%s: an empty name in the list '%s'", w,
                                     cfg->gradients.model);
        }
        deftsim_model *m;
        st = deftsim_model_load(one, &m);
        free(one);
        if (st) {
            where(cfg, (size_t)km, w, sizeof w);
            return deftsim_error_wrap(st, "%s", w);
        }
        for (size_t i = 0; i < cfg->workers.ncounts; i++) {
            if ((uint64_t)cfg->workers.counts[i] > m->numel) {
                where(cfg, (size_t)kc, w, sizeof w);
                st = deftsim_error_set(DEFTSIM_E_INPUT,
                                       "%s: %lld workers exceed the %llu parameters of model %s", w,
                                       (long long)cfg->workers.counts[i],
                                       (unsigned long long)m->numel, m->name);
                break;
            }
        }
        deftsim_model_free(m);
        if (st) return st;
        p += strcspn(p, ",");
        if (!*p) break;
        p++;
    }
    return st;
}

/* ---- printing --------------------------------------------------------------------------- */

deftsim_status deftsim_config_to_ini(const deftsim_config *cfg, FILE *f)
{
    fprintf(f, "# deftsim scenario '%s', fully resolved: every key, defaults filled in.\n",
            cfg->scenario.name);
    for (size_t s = 0; s < NSECTIONS; s++) {
        fprintf(f, "\n[%s]\n", section_names[s]);
        int any = 0;
        for (size_t i = 0; i < NKEYS; i++) {
            const keydef *k = &keys[i];
            if (strcmp(k->info.section, section_names[s])) continue;
            kval v = view(cfg, k);
            char buf[DEFTSIM_CONFIG_MAX_LINE + 1];
            size_t n = render(k, &v, buf, sizeof buf);
            if (n >= sizeof buf)
                return deftsim_error_set(DEFTSIM_E_INTERNAL, "[%s] %s: value too long to print",
                                         k->info.section, k->info.key);
            if (n)
                fprintf(f, "%s = %s\n", k->info.key, buf);
            else
                fprintf(f, "%s =\n", k->info.key);
            any = 1;
        }
        if (!any) fprintf(f, "# (no keys yet)\n");
    }
    if (ferror(f)) return deftsim_error_set(DEFTSIM_E_IO, "writing the configuration failed");
    return DEFTSIM_OK;
}

json_t *deftsim_config_to_json(const deftsim_config *cfg)
{
    json_t *root = json_object();
    if (!root) goto nomem;
    for (size_t s = 0; s < NSECTIONS; s++) {
        json_t *sec = json_object();
        if (!sec || json_object_set_new(root, section_names[s], sec)) goto nomem;
        for (size_t i = 0; i < NKEYS; i++) {
            const keydef *k = &keys[i];
            if (strcmp(k->info.section, section_names[s])) continue;
            kval v = view(cfg, k);
            json_t *j = NULL;
            switch (k->type) {
            case T_NAME:
            case T_PATH:
            case T_OPTPATH: j = v.s ? json_string(v.s) : json_null(); break;
            case T_U64: j = json_integer((json_int_t)v.u); break;
            case T_INT: j = json_integer((json_int_t)v.i); break;
            case T_DOUBLE:
            case T_BANDWIDTH:
            case T_DURATION: j = json_real(v.d); break; /* bytes/s, seconds */
            case T_ENUM: j = json_string(knames(k)[v.i]); break;
            case T_ENUM_LIST:
            case T_DOUBLE_LIST:
            case T_INT_LIST:
                j = json_array();
                for (size_t e = 0; j && e < v.n; e++) {
                    json_t *x = k->type == T_ENUM_LIST ? json_string(knames(k)[((int *)v.arr)[e]])
                              : k->type == T_DOUBLE_LIST ? json_real(((double *)v.arr)[e])
                              : json_integer((json_int_t)((int64_t *)v.arr)[e]);
                    if (json_array_append_new(j, x)) {
                        json_decref(j);
                        j = NULL;
                    }
                }
                break;
            }
            if (!j || json_object_set_new(sec, k->info.key, j)) goto nomem;
        }
    }
    /* A user's platform file gives every link its own figures and its own shape: the keys
     * that only shape a generated platform do not apply, and a record of the run must not
     * quote their defaults as if they had been simulated (docs/OUTPUT.md). */
    if (cfg->network.topology == DEFTSIM_TOPO_FILE) {
        static const char *const unused[] = {"topology_params", "bandwidth", "latency",
                                             "backbone_bandwidth"};
        json_t *net = json_object_get(root, "network");
        for (size_t i = 0; i < sizeof unused / sizeof *unused; i++)
            if (json_object_set_new(net, unused[i], json_null())) goto nomem;
    }
    return root;
nomem:
    json_decref(root);
    deftsim_error_set(DEFTSIM_E_NOMEM, "out of memory building the configuration's JSON");
    return NULL;
}

/* ---- integer lists ---------------------------------------------------------------------- */

typedef struct {
    int64_t min, max;
    int64_t *a;
    size_t n, cap;
} int_list;

static deftsim_status int_push(int_list *l, int64_t v)
{
    if (l->n == l->cap) {
        if (l->n >= DEFTSIM_LIST_MAX)
            return deftsim_error_set(DEFTSIM_E_INPUT, "more than %d values", DEFTSIM_LIST_MAX);
        size_t nc = l->cap ? 2 * l->cap : 16;
        int64_t *na = realloc(l->a, nc * sizeof *na);
        if (!na) return deftsim_error_set(DEFTSIM_E_NOMEM, "out of memory");
        l->a = na;
        l->cap = nc;
    }
    l->a[l->n++] = v;
    return DEFTSIM_OK;
}

static deftsim_status in_range(const int_list *l, int64_t v)
{
    if (v < l->min || v > l->max)
        return deftsim_error_set(DEFTSIM_E_INPUT, "%lld is outside [%lld, %lld]", (long long)v,
                                 (long long)l->min, (long long)l->max);
    return DEFTSIM_OK;
}

static deftsim_status int_item(const char *tok, void *ctx)
{
    int_list *l = ctx;
    deftsim_status st;
    const char *dots = strstr(tok, "..");
    if (!dots) {
        int64_t v;
        if (tok[0] == '+' || deftsim_parse_i64(tok, &v))
            return deftsim_error_set(DEFTSIM_E_INPUT, "'%s' is not an integer", tok);
        if ((st = in_range(l, v))) return st;
        return int_push(l, v);
    }
    /* a..b or a..b:s */
    char a_txt[32], b_txt[32], s_txt[32] = "";
    const char *colon = strchr(dots + 2, ':');
    size_t la = (size_t)(dots - tok);
    size_t lb = colon ? (size_t)(colon - dots - 2) : strlen(dots + 2);
    int64_t a, b, s = 0;
    int bad = la == 0 || la >= sizeof a_txt || lb == 0 || lb >= sizeof b_txt ||
              (colon && strlen(colon + 1) >= sizeof s_txt);
    if (!bad) {
        memcpy(a_txt, tok, la);
        a_txt[la] = '\0';
        memcpy(b_txt, dots + 2, lb);
        b_txt[lb] = '\0';
        if (colon) strcpy(s_txt, colon + 1);
        bad = a_txt[0] == '+' || b_txt[0] == '+' || s_txt[0] == '+' ||
              deftsim_parse_i64(a_txt, &a) || deftsim_parse_i64(b_txt, &b) ||
              (colon && deftsim_parse_i64(s_txt, &s));
    }
    if (bad)
        return deftsim_error_set(DEFTSIM_E_INPUT, "'%s' is not an integer, a..b or a..b:step", tok);
    if ((st = in_range(l, a)) || (st = in_range(l, b))) return st;
    if (a > b) return deftsim_error_set(DEFTSIM_E_INPUT, "'%s' is empty (%lld > %lld)", tok,
                                        (long long)a, (long long)b);
    if (colon) {
        if (s <= 0) return deftsim_error_set(DEFTSIM_E_INPUT, "'%s': step must be positive", tok);
        /* b >= a, so the unsigned difference is exact even where the signed one overflows. */
        uint64_t span = (uint64_t)b - (uint64_t)a;
        if (span % (uint64_t)s)
            return deftsim_error_set(DEFTSIM_E_INPUT, "'%s' does not end on %lld (%lld + a multiple of %lld)",
                                     tok, (long long)b, (long long)a, (long long)s);
        if (span / (uint64_t)s >= DEFTSIM_LIST_MAX)
            return deftsim_error_set(DEFTSIM_E_INPUT, "more than %d values", DEFTSIM_LIST_MAX);
        for (uint64_t i = 0; i <= span / (uint64_t)s; i++)
            if ((st = int_push(l, (int64_t)((uint64_t)a + i * (uint64_t)s)))) return st;
        return DEFTSIM_OK;
    }
    if (a <= 0)
        return deftsim_error_set(DEFTSIM_E_INPUT, "'%s': a doubling range must start at 1 or more", tok);
    int64_t v = a;
    while (v < b && v <= INT64_MAX / 2) v *= 2;
    if (v != b)
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "'%s': %lld is not %lld times a power of two (a..b doubles from a "
                                 "to b; a..b:step counts in steps)",
                                 tok, (long long)b, (long long)a);
    for (v = a; v <= b; v *= 2) {
        if ((st = int_push(l, v))) return st;
        if (v == b) break;
    }
    return DEFTSIM_OK;
}

static int cmp_i64(const void *x, const void *y)
{
    int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
    return (a > b) - (a < b);
}

deftsim_status deftsim_parse_int_list(const char *text, int64_t min, int64_t max,
                                      int64_t **values, size_t *count)
{
    *values = NULL;
    *count = 0;
    int_list l = {.min = min, .max = max};
    deftsim_status st = for_each_item(text, int_item, &l);
    if (st) {
        free(l.a);
        return st;
    }
    qsort(l.a, l.n, sizeof *l.a, cmp_i64);
    size_t u = 0;
    for (size_t i = 0; i < l.n; i++)
        if (u == 0 || l.a[i] != l.a[u - 1]) l.a[u++] = l.a[i];
    *values = l.a;
    *count = u;
    return DEFTSIM_OK;
}

size_t deftsim_format_int_list(const int64_t *v, size_t n, char *buf, size_t cap)
{
    size_t o = 0;
#define PUT(...) (o += (size_t)snprintf(o < cap ? buf + o : NULL, o < cap ? cap - o : 0, __VA_ARGS__))
    if (cap) buf[0] = '\0';
    for (size_t i = 0; i < n;) {
        const char *sep = i ? ", " : "";
        size_t dj = i;
        while (dj + 1 < n && v[dj] > 0 && v[dj] <= INT64_MAX / 2 && v[dj + 1] == 2 * v[dj]) dj++;
        size_t aj = i;
        if (i + 1 < n && v[i + 1] > v[i] && (uint64_t)v[i + 1] - (uint64_t)v[i] <= INT64_MAX) {
            uint64_t d = (uint64_t)v[i + 1] - (uint64_t)v[i];
            aj = i + 1;
            while (aj + 1 < n && v[aj + 1] > v[aj] && (uint64_t)v[aj + 1] - (uint64_t)v[aj] == d) aj++;
        }
        size_t dlen = dj - i + 1, alen = aj - i + 1;
        if (dlen >= 3 && dlen >= alen) {
            PUT("%s%lld..%lld", sep, (long long)v[i], (long long)v[dj]);
            i = dj + 1;
        } else if (alen >= 3) {
            PUT("%s%lld..%lld:%llu", sep, (long long)v[i], (long long)v[aj],
                (unsigned long long)((uint64_t)v[i + 1] - (uint64_t)v[i]));
            i = aj + 1;
        } else {
            PUT("%s%lld", sep, (long long)v[i]);
            i++;
        }
    }
#undef PUT
    return o;
}
