/* engine_internal.h - what the files of the engine share (engine.c, accum.c, rows.c,
 * point_sim.c, manifest.c): the engine's state and one point's accumulators. Not installed;
 * deftsim_engine.h is the interface. */
#ifndef DEFTSIM_ENGINE_INTERNAL_H
#define DEFTSIM_ENGINE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "deftsim_compute.h"
#include "deftsim_engine.h"
#include "deftsim_gradsrc.h"
#include "deftsim_kernels.h"
#include "deftsim_noise.h"
#include "deftsim_platform.h"
#include "deftsim_net_mpi.h"
#include "deftsim_point_sim.h"
#include "deftsim_profile.h"
#include "deftsim_sparsify.h"
#include "deftsim_stages.h"
#include "deftsim_timing.h"

/* Accumulators are prepared in chunks of this many elements (a multiple of the generator's
 * 32-element groups, so every call starts on a group), GEN_WORKERS workers per generator call
 * (they share the signal stream): the chunk's staging buffers and running sums stay in L2. */
#define CHUNK 8192u
#define GEN_WORKERS 8u
/* Regenerating one whole accumulator (error_feedback none or sampled) is cut into larger
 * pieces: there is no running sum to keep in cache. */
#define REGEN_CHUNK (64u * 1024u)

struct deftsim_engine {
    deftsim_config *cfg;
    deftsim_run_options opt;
    char *dump_dir;
    deftsim_gradsrc *src;         /* where the gradients come from */
    const deftsim_model *model;
    size_t iterations;
    uint64_t *source_iter;        /* per iteration: the generator's iteration or the trace's id */
    deftsim_kctx *kctx;
    deftsim_profile *profile;     /* [device] kind = profile: the phases' cost model */
    unsigned prep_threads;
    /* Buffers of n floats, reused by every point (deftsim_big_alloc). */
    float **pool;
    size_t npool;
    /* Per preparation thread: GEN_WORKERS staging chunks and one chunk of running sums. */
    float *stage;
    double *sums;
    deftsim_memory_plan plan;
    deftsim_platform_record platform; /* topology = file: the user's platform file as read */
    int has_compute;              /* [compute]: the training step's forward and backward pass */
    deftsim_compute_plan compute; /* its times and DDP buckets for the model */
    /* The averages kept for the points at avg_P (the plan's avg_cache): iteration i's in
     * avg_keep[i] with its squared norm, once avg_have[i]. */
    uint32_t avg_P;
    float **avg_keep;
    double *avg_norm2;
    uint8_t *avg_have;
};

/* The memory plan (engine_plan.c): e->plan's rows for the scenario's worker counts and the
 * largest count that fits the budget (deftsim_engine_new calls it once). */
deftsim_status deftsim_engine_plan_memory(deftsim_engine *e);
/* The regeneration slots of a point at P (point_state's regen): GEN_WORKERS where the memory
 * plan has room for them beside everything else and the source generates its gradients, else
 * 1 (engine_plan.c's memory_for counts them). */
uint32_t deftsim_engine_regen_slots(const deftsim_engine *e, uint32_t P);
/* The resident accumulators of a point at P (point_state's kept): row->resident of the plan. */
uint32_t deftsim_engine_resident(const deftsim_engine *e, uint32_t P);
/* Whether the points at P keep and reuse the iterations' averages: row->avg_cache. */
int deftsim_engine_avg_cache(const deftsim_engine *e, uint32_t P);

static inline uint32_t deftsim_engine_tracked_workers(const deftsim_config *cfg, uint32_t P)
{
    switch (cfg->sparsify.error_feedback) {
    case DEFTSIM_FEEDBACK_FULL: return P;
    case DEFTSIM_FEEDBACK_NONE: return 0;
    case DEFTSIM_FEEDBACK_SAMPLED:
        return (uint32_t)cfg->sparsify.sampled_workers < P ? (uint32_t)cfg->sparsify.sampled_workers : P;
    }
    return P;
}

/* Whether a method of the scenario asks the provider for g_w (the registry's raw-gradients
 * capability, with the options that turn it on: CLT-k's low-pass filter, when its beta is
 * set). */
static inline int deftsim_engine_needs_grad(const deftsim_config *cfg)
{
    for (size_t i = 0; i < cfg->sparsify.nmethods; i++) {
        deftsim_method m = cfg->sparsify.methods[i];
        if (deftsim_method_reads_grad(m, deftsim_config_method_opts(cfg, m))) return 1;
    }
    return 0;
}

/* Whether a point of method m reads no gradient at all: nothing but the method's step could
 * ([engine] quality = 0: no average; no --dump of the values), and its step does not need them
 * (the registry's DEFTSIM_METHOD_CAP_DATA_FREE: dense). Its steps are then
 * deftsim_sparsifier_step_data_free, with the same rows but the values. */
static inline int deftsim_engine_data_free(const deftsim_config *cfg, const char *dump_dir,
                                           deftsim_method m)
{
    return !cfg->engine.quality && !dump_dir && deftsim_method_has(m, DEFTSIM_METHOD_CAP_DATA_FREE);
}

/* 1 when the kernel backend copies data between host and device (cuda-staged). */
static inline int deftsim_engine_moves_data(const deftsim_engine *e)
{
    return strcmp(deftsim_kctx_backend(e->kctx), "cuda-staged") == 0;
}

/* What one point of a run did, for the manifest. */
typedef struct {
    char *file;        /* relative to the output folder */
    const char *method;
    double density;
    uint32_t P;
    uint64_t rows;
    double seconds;
    double prepare_seconds, step_seconds;
    double sim_seconds;        /* the network simulation's wall time */
    uint64_t sim_messages;     /* messages it simulated */
    uint64_t sim_peak_rss;     /* its process's peak resident bytes */
    uint64_t gradient_elements; /* read from the gradient source (deftsim_gradsrc_elements) */
    deftsim_kxfer xfer;        /* the kernel context's copies over the point (cuda-staged) */
    deftsim_noise_sample machine_start, machine_end; /* the machine's state around the point */
    deftsim_stages stages;     /* where its wall time went (deftsim_stages.h) */
    json_t *kept;              /* resumed: its record in the folder's earlier manifest */
} point_record;

/* ---- the manifest of a run (manifest.c) ----------------------------------------------------- */

deftsim_status deftsim_engine_write_manifest(const deftsim_engine *e, const char *started,
                                             const char *finished, const char *status,
                                             const char *error, const point_record *recs,
                                             size_t nrecs, int rows_written);
/* The finished points of an unfinished run of this scenario in the output folder (its
 * manifest's status running, interrupted or failed; each one's file present), or NULL. */
json_t *deftsim_engine_kept_points(const deftsim_engine *e);
/* Whether kept holds the point file rel; if so rec takes its record (numbers and kept). */
int deftsim_engine_kept_take(json_t *kept, const char *rel, point_record *rec);

/* ---- one point: accumulators (accum.c) ------------------------------------------------------ */

typedef struct {
    deftsim_engine *e;
    uint32_t P;
    uint32_t S;               /* workers 0 .. S-1 keep residuals */
    uint32_t lo, hi;          /* the workers this process holds (spread mode: its block) */
    const deftsim_team *team; /* spread mode's ranks (deftsim_team.h); NULL: one process */
    double *dsum;             /* spread mode, quality = 1: n running sums of the average */
    size_t chunk0;            /* spread mode: the first chunk of the piece being summed */
    uint64_t n;
    float **res;              /* S residual buffers (acc_w after preparation) */
    /* The accumulators of workers without a residual, regenerated into nregen buffers of n
     * floats (the slots): one, or GEN_WORKERS where the memory plan has room for them
     * (deftsim_engine_regen_slots), which a sparsifier visiting workers in ascending order
     * fills GEN_WORKERS at a time from one generator call (deftsim_gen_fill_workers shares
     * the signal among them). */
    float *regen[GEN_WORKERS];
    uint32_t regen_held[GEN_WORKERS]; /* the worker each slot holds (UINT32_MAX: none) */
    uint8_t regen_normed[GEN_WORKERS]; /* fused norms: slot j's are computed (acc_norms) */
    uint8_t regen_part[GEN_WORKERS];   /* slot j holds its worker at the runs below only */
    uint32_t nregen;
    /* A pass that reads the accumulators at a sparse index set (the provider's reads_at):
     * a slot is filled at the runs of 32-element groups that hold those indices (at_runs),
     * on the preparation threads, pieces at_piece[p] .. at_piece[p + 1] - 1 each. at_on = 0:
     * none, or the runs would cover most of the gradient (whole fills then). */
    int avg_hit;              /* the average of this iteration came from the engine's keep */
    int at_on;
    deftsim_gen_run *at_runs;
    size_t at_nruns, at_cap;
    size_t *at_piece;
    size_t at_npieces;
    uint32_t last_get;        /* the worker of the provider's last get() (UINT32_MAX: none) */
    float *gradbuf;           /* n floats: g_w for CLT-k's filter (synthetic source) */
    /* Workers S .. S + C - 1 (no residual) keep their accumulator in kept[w - S] for the whole
     * iteration: the preparation pass generates it once, every repetition and pass of the step
     * reads it (engine.c's plan: deftsim_memory_row.resident). */
    uint32_t C;
    float **kept;
    float *avg;               /* n floats: (1/P) sum_w acc_w; NULL with quality = 0 */
    int quality;              /* [engine] quality: the average, its norm, the captured norms */
    int data_free;            /* the point's steps read no accumulator (deftsim_engine_data_free) */
    double *chunk_norm2;      /* per chunk: sum of avg^2, summed in chunk order afterwards */
    double norm2;
    size_t it;                /* iteration index */
    int fresh;                /* first iteration of the point: residuals are zero */
    uint64_t mapped_bytes;    /* the average, residuals and resident accumulators newly mapped
                                 for this point: their first write zeroes them (stages.c) */
    uint64_t src_iter;        /* the generator's iteration or the trace's id */
    uint32_t regen_worker;    /* the first worker being regenerated */
    uint32_t regen_nw;        /* how many (regen_block_chunk) */
    float *regen_out;         /* into this buffer (regenerate: one worker) */
    uint32_t regen_slot0;     /* or into slots regen_slot0 .. + regen_nw - 1 */
    deftsim_status get_status;
    char get_msg[1024];
    double regen_seconds;     /* wall seconds of the provider's regenerations so far */
    /* A sparsifier that reads fragment norms and offers them to the provider (DEFT with
     * [sparsify] deft_norms = fused): the
     * accumulators are formed piece by piece, one piece per norm block of every fragment, with
     * deftsim_k_accumulate, whose sums give every worker's fragment norms with seg_norms' bits
     * (served by the provider's norms()). nseg = 0: the plain chunked pass. */
    const deftsim_kseg *nsegs;
    size_t nseg;
    size_t npieces;
    uint64_t *piece_off;
    uint32_t *piece_len;
    double *part;             /* (S + C + nregen) x npieces: each piece's sum of squares */
    /* A regenerated accumulator's norms are computed when the sparsifier asks for them, in
     * runs of whole pieces of up to REGEN_CHUNK elements: run r is pieces run_first[r] ..
     * run_first[r + 1] - 1, and piece_rel holds every piece as a fragment relative to its
     * run's start (one deftsim_k_accumulate call a run gives each piece's sum with the bits of
     * a call on the piece alone). */
    size_t nruns;
    size_t *run_first;        /* nruns + 1 */
    deftsim_kseg *piece_rel;  /* npieces */
    double *wnorms;           /* (S + C + nregen) x nseg; row S + C + j: the worker in slot j */
    deftsim_kctx **pctx;      /* one single-thread cpu context per preparation thread */
    unsigned npctx;
    char *pscratch;
    size_t pscratch_each;
} point_state;

/* Chunk c of the preparation pass: acc_w = residual_w + g_w for tracked workers, and the
 * average of every worker's accumulator, summed in worker order in double. */

/* Maps the point's buffers from the engine's pool: the average (quality = 1), S residuals,
 * the shared buffer of the workers without one, and g_w for CLT-k when the source does not map
 * it; data_free: none of them (the point's steps read no accumulator). */
deftsim_status deftsim_acc_init(point_state *ps, deftsim_engine *e, uint32_t P, int data_free);
void deftsim_acc_free(point_state *ps);
/* Turns the fused pass on when the sparsifier offers fragment norms (DEFT with deft_norms =
 * fused) of fragments that tile [0, n) in order; otherwise leaves nseg = 0. */
deftsim_status deftsim_acc_fused_init(point_state *ps, const deftsim_sparsifier *sp);
/* Before each step: every tracked residual takes its gradient, the average accumulator and
 * its squared norm are computed (quality = 1; otherwise norm2 is NaN and the untracked
 * workers' gradients are not generated here). */
deftsim_status deftsim_acc_prepare(point_state *ps);
/* The preparation pass's additions into the average's double sums, per second on `threads`
 * threads at once, on rows held in cache (the accumulate stage's compute floor). */
deftsim_status deftsim_acc_sum_rate(unsigned threads, double *rate);
/* The accumulator provider the sparsifier reads the point's accumulators through. */
deftsim_acc_provider deftsim_acc_provider_of(point_state *ps);
/* Whether p, the provider's buffer for worker w, is a regeneration slot (the timing
 * protocol's scratch test, deftsim_timing_set_scratch); ctx is the point_state. */
int deftsim_acc_is_scratch(void *ctx, uint32_t w, const float *p);

/* ---- one point: the stages of its wall time (stages.c) ------------------------------------- */

/* At the point's start, once its accumulators and timing context exist: the probes (the
 * parallel read of the timing buffer, the generator's throughput). */
deftsim_status deftsim_stages_begin(deftsim_stages *s, deftsim_engine *e, const point_state *ps,
                                    const deftsim_timing *tm);
/* After an iteration's preparation of `wall` seconds; busy0: the source's busy seconds before
 * it (deftsim_gradsrc_busy_seconds). Takes the point's newly mapped bytes (ps->mapped_bytes,
 * zeroed by the kernel at their first write) into the accumulate floor and clears them. */
void deftsim_stages_prepared(deftsim_stages *s, point_state *ps, double wall, double busy0);
/* After an iteration's timed step of `wall` seconds with result r; kernel_bytes: what the
 * step's kernel operations and the sparsifier's loops had to touch (deftsim_kctx_bytes). */
void deftsim_stages_stepped(deftsim_stages *s, const point_state *ps, const deftsim_timing *tm,
                            const deftsim_step_result *r, double wall, uint64_t kernel_bytes);

/* ---- one point: rows (rows.c) --------------------------------------------------------------- */

typedef struct {
    const char *method;
    double density;
    uint64_t k;
    uint32_t P;
    char dens_text[40];
    char prefix[1024];  /* scenario .. P, formatted once (names are at most 100 and 255 chars) */
    char fb_cols[64];   /* error_feedback,sampled_workers */
    char run_cols[256]; /* wire,backend,threads,seed */
    const deftsim_compute_plan *compute; /* [compute]: a forward and a backward row first */
} point_desc;

/* Per-worker numbers of one step. */
typedef struct {
    double *select_seconds;   /* P: the selection phases */
    double *worker_seconds;   /* P: every phase */
    uint64_t *coll_sent;      /* collectives x P */
    uint64_t *coll_recv;
    size_t *coll_step;        /* schedule index of each collective */
    size_t ncoll, cap_coll;
    double imbalance_seconds, imbalance_cost;
    double captured, topk, ratio;
    deftsim_kidx *ref_idx;    /* the exact top-k of the average accumulator, then the same k
                                 in index order */
    void *ref_scratch;
    size_t ref_scratch_bytes;
} step_metrics;

/* A point's rows before the network simulation's columns are appended: the text, in an
 * unlinked temporary file next to the point's file (a point of DGC at P = 4096 has close to a
 * million rows: not memory the plan counts), and where each row ends (after its newline). */
typedef struct {
    FILE *f;
    char *line;              /* one row read back */
    size_t line_cap;
    uint64_t *end;
    size_t n, cap;
    int failed;              /* out of memory recording a row */
    int werr;                /* errno of the first failed write, 0 if none */
    const char *csv_path;    /* the point's file, named in messages */
} row_buffer;

/* The CSV header line of rows.csv and every point file. */
void deftsim_rows_header(FILE *f);
/* Iteration r's per-worker seconds, bytes per collective and the captured norm against the
 * exact top-k of the average accumulator. */
deftsim_status deftsim_rows_metrics(point_state *ps, const point_desc *pd,
                                    const deftsim_step_result *r, step_metrics *m);
void deftsim_rows_metrics_free(step_metrics *m);
deftsim_status deftsim_row_buffer_open(row_buffer *rb, const char *csv_path);
/* A failed write of the buffered rows, naming the point's file. */
deftsim_status deftsim_row_buffer_error(const row_buffer *rb, int err);
void deftsim_row_buffer_free(row_buffer *rb);
/* The rows of one iteration: per worker, its phases, then its share of every collective,
 * with the worker's and the iteration's columns repeated; returns how many. */
uint64_t deftsim_rows_write(row_buffer *rb, const point_state *ps, const point_desc *pd,
                           const deftsim_step_result *r, const step_metrics *m, double prep_s,
                           double step_s, const deftsim_timing *tm);
/* --dump: the iteration's selections, union and values as .npy files. */
deftsim_status deftsim_rows_dump(const point_state *ps, const point_desc *pd,
                                 deftsim_sparsifier *sp, const deftsim_step_result *r);

/* ---- one point: the network simulation (point_sim.c) ---------------------------------------- */

/* Writes the buffered rows to out with the simulated columns appended (empty without res). */
deftsim_status deftsim_point_sim_emit(FILE *out, row_buffer *rb, const deftsim_point_sim *s,
                                      uint32_t P, const deftsim_sim_result *res,
                                      const char *run_cols, const deftsim_mpi_result *mres);
/* The simulated run's columns: net_topology .. sim_mode (the mode that ran). */
deftsim_status deftsim_point_sim_run_cols(const deftsim_config *cfg,
                                          const deftsim_platform_record *plat,
                                          deftsim_sim_mode ran, char *buf, size_t cap);

#endif
