/* deftsim_sparsify.h - the sparsifiers of docs/SPARSIFIERS.md behind one interface.
 *
 * One call runs one iteration for all P workers: every worker's selection work runs for real on
 * that worker's accumulator (acc_w = residual_w + g_w) through the kernels of kernels/ and is
 * timed per phase (leader work charged to the leader); the communication it needs comes out
 * as a plain schedule (common/deftsim_schedule.h); the aggregated sparse gradient every
 * worker ends with comes out as sorted indices and values; each accumulator is turned into the
 * worker's new residual in place (error feedback). docs/SPARSIFIERS.md describes every method,
 * its phases, its wire format and its byte formulas.
 *
 * Accumulators reach the sparsifier through a provider so that a bounded-memory engine can
 * regenerate them instead of keeping P copies. The protocol of one step:
 *
 *  - The sparsifier visits the workers in passes (a selection pass, then a gather/residual
 *    pass; DEFT and CLT-k visit the leader first). get(w) may be called several times for the
 *    same worker within one step; until the worker is released it must return the iteration's
 *    accumulator with the same contents (the sparsifier does not write to it before its last
 *    visit).
 *  - On its last visit the sparsifier writes the new residual into the accumulator and then
 *    calls release(w) (when non-NULL): exactly once per worker and step, in ascending w. After
 *    release(w) the sparsifier does not touch worker w again in this step. A provider that
 *    keeps residuals elsewhere copies them out in release().
 *  - persistent == 1: every get(w) returns the same memory during the iteration, so all P
 *    accumulators are valid at once. persistent == 0: only the pointer of the latest get() is
 *    valid. The sparsifier works the same way with both.
 *  - grad(w) (optional) returns worker w's gradient g_w of this iteration; only CLT-k's
 *    low-pass filter (cltk_beta > 0) needs it, always right after get(w); both pointers stay
 *    valid until the next get().
 *  - norms(w) (optional) returns the L2 norms of the fragments deftsim_sparsifier_norm_segments
 *    lists, of worker w's accumulator as get(w) returned it, bit-identical to
 *    deftsim_k_seg_norms on it: a provider that forms the accumulator with the fused
 *    accumulate op (deftsim_k_accumulate) has them for free. Called right after get(w); valid
 *    until the next get(). NULL (or no callback) and the sparsifier runs its own norm pass. */
#ifndef DEFTSIM_SPARSIFY_H
#define DEFTSIM_SPARSIFY_H

#include <stddef.h>
#include <stdint.h>

#include "deftsim_error.h"
#include "deftsim_kernels.h"
#include "deftsim_team.h"
#include "deftsim_model.h"
#include "deftsim_schedule.h"

#define DEFTSIM_MAX_PHASES 12

/* ---- The sparsifiers' vocabulary -------------------------------------------------------- */

/* The built-in methods that code names, in the order of the registry (registry.c): scenarios
 * name them by deftsim_method_name(), rows and manifests carry that name. A method is looked up
 * by name or by its position in the registry; a new method needs no value here (the registry
 * lists it after these, and deftsim_method_count() counts it). Methods registered at run time
 * (deftsim_method_register) take the values after the built-in ones. */
typedef enum {
    DEFTSIM_METHOD_DEFT,
    DEFTSIM_METHOD_TOPK,    /* the DEFT paper's baseline: allgather indices, allreduce values */
    DEFTSIM_METHOD_TOPK_AG, /* classic sparse allgather of (index, value) pairs */
    DEFTSIM_METHOD_CLTK,
    DEFTSIM_METHOD_GTOPK,
    DEFTSIM_METHOD_DGC,
    DEFTSIM_METHOD_DENSE,
    DEFTSIM_METHOD_MICRO,   /* MiCRO and ExDyna: threshold selection in rotating partitions */
    DEFTSIM_METHOD_EXDYNA,
    DEFTSIM_METHOD_OKTOPK,  /* Ok-Topk: sparse allreduce with thresholds and regions */
    DEFTSIM_METHOD_COUNT    /* the methods named here (the registry may hold more) */
} deftsim_method;

/* Most methods the registry holds, built-in and registered at run time together. */
#define DEFTSIM_METHOD_MAX 32

/* spec: [sparsify] index_bytes and value_bytes for every method; reference: what the authors'
 * code sends (int64 indices, fp32 values, DEFT's int64 counts, gTop-k's 16-byte float64
 * (index, value) pairs). docs/SPARSIFIERS.md, "Wire formats". */
typedef enum { DEFTSIM_WIRE_SPEC, DEFTSIM_WIRE_REFERENCE } deftsim_wire;

/* The wire formats' names as scenarios spell them, NULL-terminated, in enum order. */
extern const char *const deftsim_wire_names[];

/* A name, or "?" for a value outside the enum. */
const char *deftsim_wire_name(deftsim_wire w);

/* Most result columns of a method's own (deftsim_method_desc.columns). */
#define DEFTSIM_METHOD_COLS_MAX 8

/* ---- A method's options ------------------------------------------------------------------ */

/* A method's own settings (CLT-k's beta, Ok-Topk's variant, ...) are rows of its option table
 * in the registry (deftsim_method_desc.options): the config turns every row into a [sparsify]
 * key of that name (its type text, default and help from the row), and the values reach the
 * method as a small typed array, indexed by the row's position (deftsim_method_opts). */
#define DEFTSIM_METHOD_OPTS_MAX 8

typedef enum {
    DEFTSIM_OPT_INT,    /* an integer in [lo, hi] */
    DEFTSIM_OPT_DOUBLE, /* a number in [lo, hi] */
    DEFTSIM_OPT_ENUM    /* one of names[], stored as its position */
} deftsim_opt_type;

typedef struct {
    const char *key;          /* the [sparsify] key, led by the method's name: "cltk_beta" */
    deftsim_opt_type type;
    const char *dflt;         /* the default, as a scenario writes it ("0", "vgg") */
    double lo, hi;            /* INT, DOUBLE: the closed range */
    const char *const *names; /* ENUM: the choices in value order, NULL-terminated */
    const char *help;         /* one line for `deftsim config --keys` */
} deftsim_method_option;

/* One option's value: i for INT and ENUM, d for DOUBLE. */
typedef union {
    int i;
    double d;
} deftsim_opt_value;

/* A method's option values by position in its table. All zero (a params struct built in code)
 * is a valid block for every built-in method but PowerSGD (its powersgd_rank is at least 1);
 * deftsim_method_opts_default() gives the defaults a scenario would. */
typedef struct {
    deftsim_opt_value v[DEFTSIM_METHOD_OPTS_MAX];
} deftsim_method_opts;

/* k of a density: floor(d n), at least 1 and at most n (docs/SPARSIFIERS.md, "One step, P
 * workers"). */
uint64_t deftsim_k_of_density(double d, uint64_t n);

typedef struct {
    /* Worker w's accumulator for this iteration (n floats); NULL reports a failure (with the
     * error message recorded by the provider). */
    float *(*get)(void *ctx, uint32_t w);
    void *ctx;
    /* 1: every get(w) returns the same memory during the iteration, so updates persist and
     * all P accumulators are valid at once. 0: at most one at a time is valid. */
    int persistent;
    /* Optional: the sparsifier is done with worker w; its accumulator now holds the new
     * residual. A non-OK status aborts the step and is returned. */
    deftsim_status (*release)(void *ctx, uint32_t w);
    /* Optional: worker w's gradient g_w (n floats), for CLT-k with cltk_beta > 0. */
    const float *(*grad)(void *ctx, uint32_t w);
    /* Optional: the fragment norms of worker w's accumulator (see the protocol above). */
    const double *(*norms)(void *ctx, uint32_t w);
    /* Optional: from this call until the next, if idx is not NULL, the sparsifier reads and
     * writes only the entries idx[0 .. nnz) (ascending; host memory that stays unchanged until
     * then) of the accumulators it gets, so get() may return one that holds the accumulator
     * there only (a provider that regenerates gradients fills just those entries); nnz = 0:
     * it reads none (it only writes); idx = NULL ends that. The sparsifier asks for no norms
     * in between. */
    void (*reads_at)(void *ctx, const deftsim_kidx *idx, uint64_t nnz);
} deftsim_acc_provider;

/* What the scenario says of the iteration around the sparsifier, for a rule that adapts to it
 * (lags_rule = adaptive): each 0 when the scenario does not say. */
typedef struct {
    double backward;            /* seconds of one iteration's backward pass ([compute]) */
    double bandwidth;           /* bytes/s of a link ([network] bandwidth) */
    double latency;             /* seconds of a link ([network] latency) */
} deftsim_sparsify_context;

typedef struct {
    deftsim_method method;
    double density;             /* k = deftsim_k_of_density(density, n) */
    uint32_t P;
    const deftsim_model *model;
    uint32_t index_bytes;       /* wire width of an index: 4 or 8 */
    uint32_t value_bytes;       /* wire width of a value: 4 or 2 */
    deftsim_wire wire;          /* spec, or the references' own formats (int64 indices, fp32
                                   values, 8-byte counts, gTop-k's 16-byte pairs) */
    uint64_t seed;              /* DGC's random sampling offsets */
    deftsim_method_opts opts;   /* the method's options (its registry entry's table) */
    deftsim_kctx *kctx;         /* the kernel backend and its threads */
    /* Spread mode (deftsim_team.h): this process holds and selects for its block of the P
     * workers only; the provider serves only those, and what crosses workers is shared with
     * the other ranks, which run the same steps. NULL: one process, every worker. */
    const deftsim_team *team;
    int skip_quality;           /* 1: nobody reads lost_mass, lost_abs_mass, lost_entries: the
                                   step leaves them NaN, NaN, 0 and skips the work only they
                                   need (CLT-k's pass over g_w for the filter's loss) */
    deftsim_sparsify_context context;
} deftsim_sparsifier_params;

/* What one iteration produced. Arrays are owned by the sparsifier and valid until its next
 * step. */
typedef struct {
    deftsim_method method;
    uint32_t P;
    uint64_t n;                  /* gradient elements */
    uint64_t k;                  /* the target k = max(1, floor(density * n)) */
    uint32_t leader;             /* DEFT and CLT-k: worker t mod P; 0 for the others */
    /* Wire widths the byte counts use (the wire option applied). value_wire_bytes is also the
     * element size of every ALLREDUCE step (deftsim_step_traffic's elem_bytes). */
    uint32_t index_wire_bytes, value_wire_bytes;
    /* Per worker and phase: measured seconds (phase names in phase_name[]). A phase that a
     * method runs several times (gTop-k's merges) holds the sum; the schedule's COMPUTE steps
     * carry each occurrence. phase_selection[i] is 1 for the phases that decide what is sent
     * (norms, allocate, pack, select, sample, filter, merge): their sum is the selection time
     * of the load-imbalance metric; 0 for the data movement around the collectives (union,
     * gather, sum, residual). */
    size_t nphases;
    const char *phase_name[DEFTSIM_MAX_PHASES];
    unsigned char phase_selection[DEFTSIM_MAX_PHASES];
    double *phase_seconds;       /* P * nphases, worker-major */
    double *cost;                /* P: selection cost model (docs/SPARSIFIERS.md) */
    uint64_t *local_count;       /* P: elements each worker's own selection picked */
    uint64_t common_count;       /* elements in the aggregate that nobody selected: DEFT's
                                    common fragments, DGC's dense tensors, all of dense */
    uint64_t *bytes_sent;        /* P: under the reference collectives (ring, binomial) */
    uint64_t *bytes_recv;        /* P */
    uint64_t kj_total;           /* DEFT: the leader's actual sum of k_j (can drift from k) */
    /* The aggregate every worker applies: values = (sum over workers, in float, in worker
     * order) / P at ascending indices. */
    uint64_t nnz;                /* |U| */
    double buildup;              /* nnz / k */
    double density_actual;       /* nnz / n */
    const deftsim_kidx *agg_index;
    const float *agg_value;
    /* Mass taken out of the accumulators without reaching the aggregate, so that, summed over
     * every element and worker, residuals + P * aggregate + lost_mass = accumulators.
     * gTop-k: the (signed) values dropped at intermediate merges whose index still reaches the
     * final set through another subtree; CLT-k with cltk_beta > 0: what the low-pass filter
     * removes. 0 for the others. lost_abs_mass sums the magnitudes of the same terms and
     * lost_entries counts them (gTop-k: dropped entries; CLT-k: 0). */
    double lost_mass;
    double lost_abs_mass;
    uint64_t lost_entries;
    /* MiCRO and ExDyna (count_control = 1; 0 and NaN threshold for the others): the global
     * threshold this step selected with, K = the sum of the workers' counts and m = the largest
     * count (the index allgather is padded to m per worker). */
    int count_control;
    double threshold;
    uint64_t count_total, count_max;
    /* Ok-Topk (NaN or 0 for the others): the workers' mean local threshold and the global
     * threshold this step used, the region balance (max over owners of the entries each
     * receives, over their mean), and which of its periodic recomputations ran. */
    double oktopk_threshold_local, oktopk_threshold_global, oktopk_region_balance;
    int oktopk_warmup, oktopk_local_recompute, oktopk_global_recompute, oktopk_recut;
    /* The method's own result columns (deftsim_method_desc.columns) that have no getter read
     * extra[their position]; every step starts them at NaN (an empty cell). */
    double extra[DEFTSIM_METHOD_COLS_MAX];
    deftsim_schedule schedule;
} deftsim_step_result;

typedef struct deftsim_sparsifier deftsim_sparsifier;

/* Checks the parameters, plans every buffer (kernel scratch included) and allocates it, so that
 * steps allocate nothing on their hot paths. */
deftsim_status deftsim_sparsifier_new(const deftsim_sparsifier_params *p, deftsim_sparsifier **out);
void deftsim_sparsifier_free(deftsim_sparsifier *s);

/* Nonzero for a method whose step changes state that the next step reads beyond the
 * accumulators (MiCRO's and ExDyna's threshold and counts, Ok-Topk's thresholds and regions):
 * running such a step twice for one iteration would change what follows, so the timing
 * repetitions run it on shadow instances that each step exactly once per iteration
 * (docs/TIMING.md). */
int deftsim_sparsifier_keeps_state(const deftsim_sparsifier *s);

/* Sets skip_quality (deftsim_sparsifier_params) for the steps that follow and returns the
 * previous setting. The timing repetitions whose results are dropped (all but the last,
 * docs/TIMING.md) run with it set: the quality bookkeeping is untimed, so their times and the
 * kept repetition's result are the same, without the work (gTop-k's table of dropped entries,
 * CLT-k's filter loss). */
int deftsim_sparsifier_set_skip_quality(deftsim_sparsifier *s, int skip);

/* Runs iteration t (t counts from 0; DEFT's and CLT-k's leader is t mod P). After a failed
 * step the accumulators and the sparsifier's state are undefined: free it. */
deftsim_status deftsim_sparsifier_step(deftsim_sparsifier *s, uint64_t t,
                                       const deftsim_acc_provider *acc, deftsim_step_result **res);

/* Iteration t of a method with DEFTSIM_METHOD_CAP_DATA_FREE without any accumulator: the
 * same result as deftsim_sparsifier_step would give (schedule, counts, bytes, costs, nnz, the
 * aggregate's indices), except that the aggregate's values are not computed (agg_value is
 * NULL), no phase runs (their times are 0) and no residual changes. DEFTSIM_E_USAGE for a
 * method without the capability. */
deftsim_status deftsim_sparsifier_step_data_free(deftsim_sparsifier *s, uint64_t t,
                                                 deftsim_step_result **res);

/* Worker w's selected indices of the last step (sorted ascending on first request), for --dump
 * and tests: the picks of its own selection (local_count[w] of them), not the common part. */
deftsim_status deftsim_sparsifier_selection(deftsim_sparsifier *s, uint32_t w,
                                            const deftsim_kidx **idx, uint64_t *count);

/* The fragments whose L2 norms the method reads from every accumulator (DEFT's fragments:
 * ascending, disjoint, covering [0, n)), for a provider that computes them while it forms the
 * accumulators (the provider's norms()); *nseg = 0 for methods that read none, and where the
 * method's options ask for its own norm pass (DEFT's deft_norms = separate). Valid for the
 * sparsifier's life. */
void deftsim_sparsifier_norm_segments(const deftsim_sparsifier *s, const deftsim_kseg **segs,
                                      size_t *nseg);

/* DGC's sampling geometry of one tensor, fixed at creation (docs/SPARSIFIERS.md): samples =
 * max(ceil(numel * 0.01), ceil(2 / d)) taken every `stride` elements, the stride starting at
 * ceil(numel / samples / 32) * 32 + 1 and lowered by 8 until numel / stride reaches that count
 * (samples then = numel / stride); numel <= ceil(2 / d): every element (all = 1, stride 1).
 * top_samples = ceil(samples * d) sets the threshold; target = ceil(numel * d). */
typedef struct {
    uint64_t numel, samples, stride, top_samples, target;
    int all;
} deftsim_dgc_geometry;

void deftsim_dgc_geometry_of(uint64_t numel, double density, deftsim_dgc_geometry *out);

/* MiCRO's threshold controller (docs/SPARSIFIERS.md, "micro"): the threshold after thr when
 * the previous step selected k_prev indices in all against the target k. */
double deftsim_micro_threshold_next(double thr, uint64_t k_prev, uint64_t k);

/* ExDyna's partitions in blocks (docs/SPARSIFIERS.md, "exdyna"). */
#define DEFTSIM_EXDYNA_BLOCKS 1024
typedef struct {
    uint64_t blk_size;  /* elements per block: floor(n / 1024) rounded down to a multiple of 32 */
    uint64_t rem;       /* n - 1024 blk_size, appended to partition P-1 */
    double min_blk;     /* 1024 / (4 P): no repartition takes a partition below it */
} deftsim_exdyna_geometry;

/* The t = 0 plan: the geometry and blk_part[P] (1024 blocks split as evenly as possible, the
 * first 1024 mod P partitions one block larger) and blk_pos[P] (their exclusive prefix sum). */
void deftsim_exdyna_initial(uint64_t n, uint32_t P, deftsim_exdyna_geometry *g,
                            int64_t *blk_part, int64_t *blk_pos);
/* One repartition sweep from the counts of the previous step (counts[i] = rank i's count at
 * step t_prev, k_prev = their sum); temp is P int64s of scratch. Returns the number of blocks
 * moved. */
uint32_t deftsim_exdyna_repartition(uint64_t n, uint32_t P, const deftsim_exdyna_geometry *g,
                                    uint64_t t_prev, const uint64_t *counts, uint64_t k_prev,
                                    int64_t *temp, int64_t *blk_part, int64_t *blk_pos);

/* Bytes a sparsifier holds for P workers (scratch, plans, results), excluding accumulators.
 * Kernel scratch is included when p->kctx is set. 0 when the parameters are invalid. */
uint64_t deftsim_sparsifier_memory(const deftsim_sparsifier_params *p);

/* ---- The registry of methods (registry.c) ---------------------------------------------- */

/* What `deftsim bench sim` needs for a method's closed-form schedule: one iteration's
 * communication from the byte formulas of docs/SPARSIFIERS.md, without running the kernels. */
typedef struct {
    const deftsim_model *model;
    double density;
    uint64_t k;                 /* deftsim_k_of_density(density, model->numel) */
    uint32_t index_bytes;       /* wire width of an index */
    uint32_t value_bytes;       /* wire width of a value */
    const deftsim_method_opts *opts; /* the method's options (a scenario's); NULL: defaults */
    deftsim_sparsify_context context;  /* the scenario's figures (zero: none) */
} deftsim_closed_form_in;

/* Capabilities a method declares (deftsim_method_desc.caps). */
enum {
    DEFTSIM_METHOD_CAP_DEFAULT = 1u << 0,       /* in [sparsify] methods' default list */
    DEFTSIM_METHOD_CAP_KEEPS_STATE = 1u << 1,   /* deftsim_sparsifier_keeps_state() */
    DEFTSIM_METHOD_CAP_RAW_GRADIENTS = 1u << 2, /* may ask the provider for g_w (grad()):
                                                   when its reads_grad() says so */
    DEFTSIM_METHOD_CAP_OWN_MOMENTUM = 1u << 3,  /* corrects momentum itself (DGC): deftsim
                                                   train applies it inside the method */
    DEFTSIM_METHOD_CAP_DATA_FREE = 1u << 4,     /* its schedule, counts and bytes do not depend
                                                   on the accumulators (dense): they come from
                                                   deftsim_sparsifier_step_data_free() */
    DEFTSIM_METHOD_CAP_DDP_BUCKETS = 1u << 5,   /* with [compute], its allreduce runs in DDP's
                                                   buckets overlapping the backward pass (dense;
                                                   src/engine/compute.c) */
    DEFTSIM_METHOD_CAP_SENDS_ALL = 1u << 6      /* sends every element: the density does not
                                                   apply (dense); deftsim train runs it once, at
                                                   density 1, and its figures draw it for every
                                                   density */
};

/* How `deftsim analyze` summarises a result column of a method's own. */
typedef enum {
    DEFTSIM_COL_ROWS_ONLY, /* in the rows only */
    DEFTSIM_COL_MEDIAN     /* the median over a point's iterations with its bootstrap interval,
                              in summary.csv (columns NAME, NAME_lo, NAME_hi) and summary.md */
} deftsim_col_summary;

/* A result column of a method's own: rows.csv carries it in every row of every method (empty
 * where the method does not declare it); methods that declare the same name share the column
 * and must agree on its unit and summary. */
typedef struct {
    const char *name;    /* the rows' column: 1..31 of [a-z0-9_] */
    const char *unit;    /* "ratio", "gradient units", "s", "B" */
    const char *title;   /* summary.md's heading for it ("local threshold") */
    const char *doc;     /* one line: what it is (summary.csv's documentation) */
    /* Its value in this step's result; NaN: an empty cell. NULL: r->extra[its position]. */
    double (*get)(const deftsim_step_result *r);
    deftsim_col_summary summary;
} deftsim_method_column;

struct sp_method; /* a method's constructor and step (sp_internal.h) */

/* One method: everything the rest of deftsim asks about it by name or by position. Its line
 * style in the figures follows from its position (deftsim_method_style). */
typedef struct {
    const char *name;        /* in scenarios, rows and file names: 1..15 of [a-z0-9-] */
    const char *title;       /* a figure's legend ("Top-k (allgather pairs)") */
    const char *short_title; /* a bar's label ("Top-k (pairs)") */
    unsigned caps;           /* DEFTSIM_METHOD_CAP_* */
    const struct sp_method *impl;
    /* One iteration's communication at P >= 2 workers from the byte formulas, appended to s
     * (initialised for P). NULL: `deftsim bench sim` cannot run the method. */
    deftsim_status (*closed_form)(const deftsim_closed_form_in *in, uint32_t P,
                                  deftsim_schedule *s);
    /* Its options: [sparsify] keys of their own (at most DEFTSIM_METHOD_OPTS_MAX). */
    const deftsim_method_option *options;
    size_t noptions;
    /* Its result columns (at most DEFTSIM_METHOD_COLS_MAX). */
    const deftsim_method_column *columns;
    size_t ncolumns;
    /* The kernel operations its phases call (bits 1 << DEFTSIM_KOP_*), for a device
     * profile's check that it has rows for them all (src/engine/profile.c). */
    unsigned kernel_ops;
    /* Optional: checks of the parameters beyond the options' ranges (an option pair, the
     * kernel backend); called by deftsim_sparsifier_new. */
    deftsim_status (*check)(const deftsim_sparsifier_params *p);
    /* Optional, with DEFTSIM_METHOD_CAP_RAW_GRADIENTS: whether these option values make the
     * method ask for g_w (CLT-k: beta > 0); NULL: always. */
    int (*reads_grad)(const deftsim_method_opts *o);
} deftsim_method_desc;

/* The line style of a name the registry does not hold (plots/style.gp). */
#define DEFTSIM_METHOD_STYLE_OTHER 8

/* Methods the registry holds: the built-in ones plus those registered at run time. */
size_t deftsim_method_count(void);
/* Method m's descriptor, or NULL for a value the registry does not hold. */
const deftsim_method_desc *deftsim_method_get(deftsim_method m);
/* Stable names ("deft", "topk-ag", ...; "?" for an unknown value) and their inverse (0 on
 * success, -1 if unknown). */
const char *deftsim_method_name(deftsim_method m);
int deftsim_method_from_name(const char *name, deftsim_method *out);
/* Nonzero when method m declares every capability in caps. */
int deftsim_method_has(deftsim_method m, unsigned caps);
/* Every name in registry order, NULL-terminated (valid until the next registration). */
const char *const *deftsim_method_names(void);
/* The names of the methods declaring every capability in caps (0: all), ", "-separated,
 * into buf (truncated to cap); returns the length it needed (snprintf-like). */
size_t deftsim_method_list(unsigned caps, char *buf, size_t cap);
/* A capability's name ("default", "keeps-state", "raw-gradients", "own-momentum",
 * "data-free", "ddp-buckets", "sends-all") for one DEFTSIM_METHOD_CAP_* bit; NULL for another
 * value. */
const char *deftsim_method_cap_name(unsigned cap);
/* Method m's line style in the figures: its position + 1, skipping
 * DEFTSIM_METHOD_STYLE_OTHER; 0 for a value the registry does not hold. */
int deftsim_method_style(deftsim_method m);
/* Whether method m, with these option values, asks the provider for g_w. */
int deftsim_method_reads_grad(deftsim_method m, const deftsim_method_opts *o);

/* ---- Options and result columns through the registry ------------------------------------ */

/* The method holding option `key` and the option's position in its table; 0 on success, -1
 * when no method has it. */
int deftsim_method_option_find(const char *key, deftsim_method *m, size_t *pos);
/* Method m's option values at their defaults (all zero for a method without options). */
void deftsim_method_opts_default(deftsim_method m, deftsim_method_opts *o);
/* An option value from its text as a scenario writes it: an integer, a number or a choice's
 * name, in range. DEFTSIM_E_INPUT with a message without location ("1.5 is outside [0, 1]",
 * "'x' is not one of: leader, all") otherwise. */
deftsim_status deftsim_method_option_parse(const deftsim_method_option *o, const char *text,
                                           deftsim_opt_value *out);
/* Sets option `key` of p->method from text (as in a scenario): DEFTSIM_E_USAGE when the
 * method has no such option, DEFTSIM_E_INPUT for a bad value. */
deftsim_status deftsim_sparsifier_params_set(deftsim_sparsifier_params *p, const char *key,
                                             const char *text);

/* The union of every method's result columns, in registry order (a name shared by several
 * methods once, where it first appears): rows.csv's method columns. */
size_t deftsim_method_column_count(void);
const deftsim_method_column *deftsim_method_column_get(size_t i); /* NULL past the end */
/* Column i's value for a step of method m: its getter (or extra[]) when m declares the
 * column, NaN (an empty cell) otherwise. */
double deftsim_method_column_value(size_t i, deftsim_method m, const deftsim_step_result *r);

/* Adds a method (tests, extensions): the descriptor is copied, its strings and impl must
 * outlive the process's use of it; *id receives its value. DEFTSIM_E_USAGE for a name that is
 * taken or malformed, a descriptor without impl, or a full registry. Not thread-safe: register
 * before other threads use the registry. Scenarios may name a registered method; `deftsim
 * sweep` and `deftsim train` know only the built-in ones. */
deftsim_status deftsim_method_register(const deftsim_method_desc *d, deftsim_method *id);

/* Method m's closed-form schedule for P workers into s (initialised here; free it with
 * deftsim_schedule_free even on failure); empty for P < 2. DEFTSIM_E_USAGE for an unknown
 * method or one without a closed form. */
deftsim_status deftsim_method_closed_form(deftsim_method m, const deftsim_closed_form_in *in,
                                          uint32_t P, deftsim_schedule *s);

#endif
