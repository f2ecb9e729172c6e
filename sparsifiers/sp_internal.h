/* sp_internal.h - what the sparsifier files share (internal to sparsifiers/): the sparsifier
 * object, the method vtable, buffer planning, timing and schedule helpers.
 *
 * A method is one `const sp_method` table in its own file (sp_deft.c, sp_topk.c, ...), listed
 * with its name, capabilities and closed-form bytes in the registry (registry.c). Its init()
 * runs twice per configuration: once with s->dry set, to add up the bytes it needs for
 * deftsim_sparsifier_memory(), and once for real. It allocates only through sp_alloc(), which
 * in the dry run counts and returns NULL, so init() fills its buffers only when !s->dry. */
#ifndef DEFTSIM_SP_INTERNAL_H
#define DEFTSIM_SP_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "deftsim_rng.h"
#include "deftsim_sparsify.h"
#include "deftsim_util.h"

typedef struct sp_method {
    /* Plans and allocates the method's state (s->priv) and registers its phases. */
    deftsim_status (*init)(deftsim_sparsifier *s);
    /* One iteration: fills phases, local counts, costs, the schedule, the aggregate. */
    deftsim_status (*step)(deftsim_sparsifier *s, uint64_t t, const deftsim_acc_provider *acc);
    /* Frees what init() allocated outside sp_alloc() (may be NULL). */
    void (*fini)(deftsim_sparsifier *s);
    /* DEFTSIM_METHOD_CAP_DATA_FREE: step()'s result without reading an accumulator (no
     * values, no residuals, no timed phases); NULL for the other methods. */
    deftsim_status (*step_data_free)(deftsim_sparsifier *s, uint64_t t);
    /* 1: step() runs in spread mode (sp_mine, the shares of sp_team.c); 0: refused there. */
    int spread;
} sp_method;

/* The built-in methods' registry entries, each in its own file (sp_deft.c, sp_topk.c, ...),
 * listed once in registry.c's `builtin`. */
extern const deftsim_method_desc deftsim_sp_deft_desc, deftsim_sp_topk_desc,
    deftsim_sp_topk_ag_desc, deftsim_sp_cltk_desc, deftsim_sp_gtopk_desc, deftsim_sp_dgc_desc,
    deftsim_sp_dense_desc, deftsim_sp_micro_desc, deftsim_sp_exdyna_desc, deftsim_sp_oktopk_desc,
    deftsim_sp_powersgd_desc, deftsim_sp_lags_desc;
extern const deftsim_method_desc deftsim_sp_randk_desc, deftsim_sp_hardthr_desc,
    deftsim_sp_sidco_desc;

/* PowerSGD's random Q of one layer at iteration t (sp_powersgd.c, docs/SPARSIFIERS.md,
 * "powersgd"): count standard normals, Box-Muller pairs on xoshiro256** seeded from seed, t
 * and the layer; its tests draw the same. */
void deftsim_powersgd_draw_q(uint64_t seed, uint64_t t, uint32_t layer, float *q, uint64_t count);

/* What MiCRO and ExDyna share in their registry entries (sp_micro.c): the closed form, the
 * result columns (count_ratio, threshold, pad_overhead) and the kernel operations. */
deftsim_status deftsim_sp_mcr_closed_form(const deftsim_closed_form_in *in, uint32_t P,
                                          deftsim_schedule *s);
#define SP_MCR_NCOLUMNS 3
extern const deftsim_method_column sp_mcr_columns[SP_MCR_NCOLUMNS];
/* Their getters (sp_micro.c), which sidco's own column table reuses. */
double sp_col_count_ratio(const deftsim_step_result *r);
double sp_col_threshold(const deftsim_step_result *r);
double sp_col_pad(const deftsim_step_result *r);
#define SP_MCR_KERNEL_OPS                                                                     \
    ((1u << DEFTSIM_KOP_FILTER_GE) | (1u << DEFTSIM_KOP_UNION) | (1u << DEFTSIM_KOP_GATHER) | \
     (1u << DEFTSIM_KOP_ZERO_AT))

/* Every option of p's method within its table's range, then the method's own check
 * (registry.c). */
deftsim_status sp_check_options(const deftsim_sparsifier_params *p);

/* Option j of the sparsifier's method (its position in the method's option table). */
static inline int sp_opt_int(const deftsim_sparsifier_params *p, size_t j) { return p->opts.v[j].i; }
static inline double sp_opt_double(const deftsim_sparsifier_params *p, size_t j)
{
    return p->opts.v[j].d;
}

/* Appends a collective to a closed-form schedule with `bytes` for every worker (a BCAST: the
 * root's, root 0); NULL when out of memory (with the error recorded). */
deftsim_step *sp_cf_add(deftsim_schedule *s, deftsim_step_kind kind, const char *name,
                        uint64_t bytes);

/* Every buffer sp_alloc() hands out, freed together by deftsim_sparsifier_free(). */
typedef struct {
    void **ptr;
    size_t n, cap;
} sp_allocs;

struct deftsim_sparsifier {
    deftsim_sparsifier_params p;
    const sp_method *m;
    const char *name;     /* the method's, for messages */
    int dry;              /* init() only counts bytes */
    uint64_t mem_bytes;   /* what sp_alloc() handed out (or would have) */
    sp_allocs allocs;

    uint32_t P;
    uint32_t lo, hi;      /* the workers this process holds: all of them, or its block in
                             spread mode (p.team) */
    uint64_t n, k;
    uint32_t si, sv;      /* wire widths of an index and a value */
    uint32_t count_bytes; /* wire width of a count (DEFT's counts allgather) */
    deftsim_kctx *kc;

    /* One scratch area for whichever kernel runs; sized at init by the methods' queries and
     * grown (outside every timed region) if a step's query ever asks for more. */
    void *scratch;
    size_t scratch_bytes;
    int ready;            /* init done: scratch queries grow the scratch instead of planning */

    /* Selections: worker w's picks are sel[sel_start[w] .. + res.local_count[w]). */
    deftsim_kidx *sel;
    uint64_t *sel_start;
    unsigned char *sel_sorted;

    /* The aggregate: agg_idx[0..nnz), agg_val[0..nnz), capacity agg_cap. */
    deftsim_kidx *agg_idx;
    float *agg_val;
    uint64_t agg_cap;

    /* Fragments whose norms the method reads (deftsim_sparsifier_norm_segments). */
    const deftsim_kseg *norm_segs;
    size_t norm_nseg;

    deftsim_step_result res;
    double *phase_store;  /* P * DEFTSIM_MAX_PHASES */
    void *priv;           /* the method's own state */
};

/* ---- Buffers ------------------------------------------------------------------------- */

/* Allocates bytes (zeroed) and records them; in the dry run only counts and sets *out = NULL. */
deftsim_status sp_alloc(deftsim_sparsifier *s, void *out, size_t bytes, const char *what);
/* The method's own state struct (s->priv): allocated in the dry run too, since init() keeps
 * its plan there; NULL on failure with the error recorded. */
void *sp_priv(deftsim_sparsifier *s, size_t bytes);
/* elems * size with an overflow check, as sp_alloc's byte count. */
deftsim_status sp_alloc_n(deftsim_sparsifier *s, void *out, uint64_t elems, size_t size,
                          const char *what);
/* Scratch for one kernel call: during init these raise the planned size (nothing to do
 * without a kernel context, as in deftsim_sparsifier_memory()); during a step they grow the
 * scratch if the query asks for more than was planned. Never call them inside a timed
 * region. */
deftsim_status sp_scratch_topk(deftsim_sparsifier *s, size_t n, size_t k);
deftsim_status sp_scratch_segtopk(deftsim_sparsifier *s, const deftsim_kseg *segs, size_t nseg);
deftsim_status sp_scratch_norms(deftsim_sparsifier *s, const deftsim_kseg *segs, size_t nseg);
deftsim_status sp_scratch_union(deftsim_sparsifier *s);
deftsim_status sp_scratch_merge(deftsim_sparsifier *s, size_t na, size_t nb);
/* The common buffers: selections (sel_cap indices) and the aggregate (agg_cap entries). */
deftsim_status sp_plan_common(deftsim_sparsifier *s, uint64_t sel_cap, uint64_t agg_cap);

/* ---- Phases, timing, schedule ---------------------------------------------------------- */

/* Registers a phase (init only); returns its index. */
size_t sp_phase(deftsim_sparsifier *s, const char *name, int selection);

/* Appends a COMPUTE step named after phase ph; returns its index in the schedule, or
 * SIZE_MAX with the error recorded. */
size_t sp_compute(deftsim_sparsifier *s, size_t ph);
/* Appends a collective; returns the step (valid until the next append) or NULL. */
deftsim_step *sp_collective(deftsim_sparsifier *s, deftsim_step_kind kind, const char *name);
/* Adds secs to worker w's phase ph and to COMPUTE step `step` of the schedule. */
void sp_charge(deftsim_sparsifier *s, size_t step, size_t ph, uint32_t w, double secs);

/* The clock of the timed regions: with a cost model on the context, the modelled clock;
 * otherwise the wall clock less what the kernel context spent moving
 * data between host and device (deftsim_kctx_untimed_seconds: 0 on the cpu backend, so there
 * this is deftsim_now()). A region measured with it counts its host work plus the device time
 * of its kernel calls, not the copies a "cuda-staged" context makes for them. */
static inline double sp_now(const deftsim_sparsifier *s)
{
    /* [device] kind = profile: the context's modelled clock (deftsim_kctx_cost_seconds), which
     * advances only by the profile's cost of each kernel call, so every region measures the
     * modelled time of the calls it made (host work between them counts 0). */
    if (s->kc && deftsim_kctx_has_cost(s->kc)) return deftsim_kctx_cost_seconds(s->kc);
    return s->kc ? deftsim_now() - deftsim_kctx_untimed_seconds(s->kc) : deftsim_now();
}

/* Runs `call` (an expression giving a deftsim_status) on the clock and charges the time to
 * worker w's phase ph and COMPUTE step stp; returns the status from the enclosing function on
 * failure. Expects `deftsim_status st` in scope. */
#define SP_TIMED(s, stp, ph, w, call)                                                          \
    do {                                                                                       \
        double t0_ = sp_now((s));                                                              \
        st = (call);                                                                           \
        sp_charge((s), (stp), (ph), (w), sp_now((s)) - t0_);                                   \
        if (st) return st;                                                                     \
    } while (0)

/* ---- Spread mode (sp_team.c, deftsim_team.h) --------------------------------------------
 * With a team, every rank runs the same step for all P workers, but only a worker's own rank
 * touches its accumulator (sp_mine): per-worker work runs on the owner, and what the
 * cross-worker steps read is shared before they run, so that every rank holds the same
 * selections, counts and aggregate as one process would. Without a team all are no-ops. */

static inline int sp_mine(const deftsim_sparsifier *s, uint32_t w) { return w >= s->lo && w < s->hi; }
static inline int sp_spread(const deftsim_sparsifier *s) { return s->p.team && s->p.team->size > 1; }

/* Every worker's selection from its owner: sel_start, local_count, cost and the picks
 * sel[sel_start[w] .. + local_count[w]), plus vals at the same positions when not NULL.
 * compact = 1: the owners laid their picks out on their own (each block from offset 0); the
 * share lays every worker's back to back in worker order, as one process does. */
deftsim_status sp_share_sel(deftsim_sparsifier *s, float *vals, int compact);
/* buf (bytes) on every rank as worker w's rank holds it. */
deftsim_status sp_bcast_from(deftsim_sparsifier *s, uint32_t w, void *buf, uint64_t bytes);
/* base holds `each` bytes per worker, worker-major for all P: every worker's from its owner. */
deftsim_status sp_share_fixed(deftsim_sparsifier *s, void *base, size_t each);
/* An ordered sum over workers that runs across the ranks (deftsim_team_chain_*). */
deftsim_status sp_chain_in(deftsim_sparsifier *s, void *buf, uint64_t bytes);
deftsim_status sp_chain_out(deftsim_sparsifier *s, void *buf, uint64_t bytes);
deftsim_status sp_chain_bcast(deftsim_sparsifier *s, void *buf, uint64_t bytes);
/* After a step: each worker's measured phases, COMPUTE-step times, cost and local count from
 * its owner (the times of the steps every rank runs are the owner's measurement too). */
deftsim_status sp_share_done(deftsim_sparsifier *s);

/* ---- Accumulators ---------------------------------------------------------------------- */

deftsim_status sp_get(const deftsim_acc_provider *a, uint32_t w, float **acc);
deftsim_status sp_release(const deftsim_acc_provider *a, uint32_t w);
/* The provider's fragment norms of worker w (right after sp_get), or NULL: run the pass. */
const double *sp_norms(const deftsim_acc_provider *a, uint32_t w);
/* The provider's reads_at, where it has one (a pass that reads the accumulators at idx only;
 * NULL ends it). */
void sp_reads_at(const deftsim_acc_provider *a, const deftsim_kidx *idx, uint64_t nnz);
/* reads_at with no entry: a pass that only writes the accumulators (a residual's zeroing). */
void sp_writes_only(const deftsim_acc_provider *a);

/* ---- Aggregate helpers ---------------------------------------------------------------- */

/* agg_val[i] = (w == 0 ? v[i] : agg_val[i] + v[i]) for i < m: the emulated allreduce sum. */
void sp_agg_add(deftsim_sparsifier *s, const float *v, uint64_t m, uint32_t w);
/* A worker's whole accumulator zeroed (its residual after a dense step). */
void sp_zero_acc(deftsim_sparsifier *s, float *acc);
/* agg_val[0..nnz) /= P and the derived metrics (nnz, build-up, density). */
void sp_agg_finish(deftsim_sparsifier *s, uint64_t nnz);
/* The derived metrics alone (sp_agg_finish's, for a step that computes no values). */
void sp_agg_counts(deftsim_sparsifier *s, uint64_t nnz);

/* The gather/residual pass over the union U = agg_idx[0..nnz): registers the gather and
 * residual COMPUTE steps (phases ph_gather and ph_residual) around the values' ALLREDUCE
 * (nnz values per worker, when P > 1); then, worker by worker in ascending order, gathers the
 * accumulator's values at U (worker 0's straight into agg_val, the others' into vals, nnz
 * floats of scratch, then added), zeroes U in it (its new residual) and releases it; and
 * finishes the aggregate (sp_agg_finish). */
deftsim_status sp_gather_residual(deftsim_sparsifier *s, const deftsim_acc_provider *a,
                                  uint64_t nnz, float *vals, size_t ph_gather, size_t ph_residual);

/* Sorted union of lists into agg_idx (cap agg_cap) through the union kernel; *count receives
 * its size. An internal error if it exceeds agg_cap. */
deftsim_status sp_union(deftsim_sparsifier *s, const deftsim_kidx *const *lists,
                        const size_t *lens, size_t nlists, uint64_t *count);

/* Selection cost model of one top-k: size * log2(k) (size when k <= 1), as DEFT's packing. */
double sp_topk_cost(uint64_t size, uint64_t k);

/* Sorts indices ascending in place (bookkeeping outside the timed regions). */
void sp_sort_idx(deftsim_kidx *a, size_t n);

/* ---- Variable-size picks and their pairs allgather (hardthr, sidco; sp_shared.c) --------
 * A worker picks any number of elements (a threshold bounds nothing): its picks and their
 * values are appended, worker after worker in ascending order, to buffers that grow outside
 * the timed regions (s->sel points at the picks). The exchange then runs as topk-ag's: an
 * ALLGATHER of the counts, an ALLGATHER of the (index, value) pairs (each worker's count, or
 * padded to the largest), the sum of every gathered pair in worker order charged to every
 * worker, and the aggregate at the union with sum / P. In spread mode each rank appends its
 * own workers' picks; the exchange first shares every worker's, laid out as one process. */
typedef struct {
    deftsim_kidx *cand;          /* one worker's candidates: n indices */
    deftsim_kidx *picks;         /* every worker's picks, back to back (grown) */
    float *vals;                 /* their values */
    uint64_t cap, used;
    float *dense;                /* n floats, zero between steps */
    const deftsim_kidx **lists;  /* P */
    size_t *lens;
} sp_pairs;

/* Plans the buffers (the picks start at 2 P k and grow). */
deftsim_status sp_pairs_init(deftsim_sparsifier *s, sp_pairs *pp);
void sp_pairs_fini(sp_pairs *pp);
/* Before the workers' pass. */
void sp_pairs_begin(sp_pairs *pp);
/* Worker w's cnt picks (pp->cand) appended: sel_start, local_count and the list for the union;
 * returns the position of its values in pp->vals in *at. Untimed (growth, copies). */
deftsim_status sp_pairs_add(deftsim_sparsifier *s, sp_pairs *pp, uint32_t w, uint64_t cnt,
                            uint64_t *at);
/* The counts' and the pairs' allgathers (padded = 1: every list padded to the largest count),
 * the sum (phase ph_sum, charged to every worker), the aggregate and count_total / count_max
 * of the result. */
deftsim_status sp_pairs_exchange(deftsim_sparsifier *s, sp_pairs *pp, int padded, size_t ph_sum);
/* Their closed form for `deftsim bench sim` (sp_hardthr.c): the counts, k pairs per worker. */
deftsim_status sp_pairs_closed_form(const deftsim_closed_form_in *in, uint32_t P,
                                    deftsim_schedule *s);

/* ---- MiCRO's core, shared with ExDyna (sp_micro.c) --------------------------------------- */

/* Partition c covers elements [lo[c], lo[c] + len[c]); worker w selects in partition
 * (t mod P + w) mod P. The threshold, the previous step's counts and their sum persist from
 * one step to the next (started = 0: the next step is the first). */
typedef struct {
    uint64_t *lo, *len;
    int started;
    double thr;
    uint64_t k_prev, t_prev;
    uint64_t *counts;           /* P: each rank's count at step t_prev */
    float *vals;                /* one worker's values at U */
    const deftsim_kidx **lists;
    size_t *lens;
    size_t ph_filter, ph_union, ph_gather, ph_residual;
    void *ext;                  /* ExDyna's block plan */
} sp_mcr_state;

/* Allocates the state (partitions left for the caller to fill when !s->dry). */
deftsim_status sp_mcr_init(deftsim_sparsifier *s);
/* One step with the partitions as they are: threshold, filter, exchange, aggregate, residual. */
deftsim_status sp_mcr_step(deftsim_sparsifier *s, uint64_t t, const deftsim_acc_provider *a);

#endif
