/* deftsim_engine.h - runs a scenario: every sparsifier, density and worker count over the
 * gradient source's iterations, with error feedback, and writes the metrics as tidy CSV
 * rows plus a manifest (docs/OUTPUT.md names every column and file).
 *
 * A run is a list of points (method, density, P), in the scenario's order: methods outermost,
 * then densities, then worker counts ascending. Each point starts from zero residuals and runs
 * [scenario] iterations iterations of the sparsifier on P workers; its rows are committed to
 * <output>/points/<method>_d<density>_P<P>.csv atomically when it finishes, and rows.csv
 * (all points, one header) and manifest.json are committed at the end (the manifest also after
 * every point, listing the points so far: a stopped or killed run is resumed from it).
 *
 * Gradients are never held as P copies: a trace is mapped and read in place, the synthetic
 * generator regenerates any worker's gradient on demand. What the accumulators need depends
 * on [sparsify] error_feedback:
 *   full     every worker keeps its residual: P buffers of n floats (acc_w = residual_w + g_w,
 *            updated in place at the start of each iteration);
 *   none     no residuals: acc_w = g_w is regenerated (or copied from the trace) into one
 *            buffer whenever the sparsifier asks for it, so memory is O(n) for any P;
 *   sampled  workers 0 .. S-1 (S = min(sampled_workers, P)) keep residuals, the others run
 *            without, so memory is O(S n); every row says whether its worker kept a residual.
 * Before anything runs the engine computes what every point needs and refuses (DEFTSIM_E_INPUT)
 * when one exceeds [engine] memory_budget of the machine's RAM, naming the largest P that
 * fits.
 *
 * With [network] simulate = 1 (the default) every point's iterations then run through the
 * network simulation (sim/deftsim_sim.h, docs/NETWORK.md): one SimGrid simulation per point,
 * whose simulated times become the rows' last columns, and the generated platform is written
 * to <output>/platforms/P<P>.xml. */
#ifndef DEFTSIM_ENGINE_H
#define DEFTSIM_ENGINE_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "deftsim_config.h"
#include "deftsim_team.h"
#include "deftsim_error.h"
#include "deftsim_noise.h"
#include "deftsim_stages.h"

/* One finished point of deftsim_engine_run(), for a progress display. */
typedef struct {
    size_t done, total;          /* points finished (this one included), points of the run */
    const char *method;
    const char *density;         /* as the point file's name writes it */
    uint32_t P;
    size_t iterations;
    double seconds, prepare_seconds, step_seconds, sim_seconds;
    uint64_t rows;
    /* The cuda-staged backend's copies over the point (moves_data: it has them). */
    int moves_data;
    double device_seconds, copy_seconds;
    uint64_t bytes_to_device, bytes_from_device, calls;
} deftsim_run_point_done;

/* A progress callback: fn(user, ...) after each point; fn NULL: none. The library prints no
 * progress itself. */
typedef struct {
    void (*fn)(void *user, const deftsim_run_point_done *p);
    void *user;
} deftsim_run_progress;

typedef struct {
    /* Also write the selections as .npy files under this folder (docs/OUTPUT.md); NULL: no. */
    const char *dump_dir;
    /* Called after every finished point. */
    deftsim_run_progress progress;
    /* RAM the memory budget is a fraction of; 0: this machine's (MemTotal of /proc/meminfo).
     * Set it to plan a run for another machine. */
    uint64_t ram_bytes;
    /* Threads that prepare accumulators (generation, residual updates, the average); 0: every
     * online CPU. Preparation is not timed and never overlaps a timed kernel; the kernels use
     * [device] threads. */
    unsigned prep_threads;
    /* Spread mode (docs/CLUSTER.md): the ranks this process is one of, each holding a block of
     * every point's workers (deftsim_team.h); only rank 0 writes results. NULL: one process. */
    const deftsim_team *team;
    /* A flag the caller sets, from a signal handler for instance, to stop the run: nonzero
     * stops it before the next point, iteration or network simulation (the point running is
     * dropped: its file is not committed). deftsim_engine_run() then writes the manifest with
     * status "interrupted", listing the points that finished, and returns DEFTSIM_E_RUNTIME
     * with summary->interrupted set. NULL: none. */
    const volatile sig_atomic_t *stop;
    /* 1: no resident accumulators (deftsim_memory_row.resident): every worker without a
     * residual is regenerated at each visit, as before they existed (tests compare both). */
    int no_resident;
} deftsim_run_options;

void deftsim_run_options_default(deftsim_run_options *o);

/* What one worker count needs: the most any (method, density) point at that P asks for. */
typedef struct {
    uint32_t P;
    uint64_t bytes;             /* total */
    uint64_t residual_bytes;    /* accumulator buffers (the error-feedback residuals) */
    uint64_t sparsifier_bytes;  /* deftsim_sparsifier_memory() of the largest point */
    uint64_t engine_bytes;      /* average accumulator and reference top-k ([engine]
                                   quality = 1), staging buffers */
    int fits;                   /* bytes <= budget */
    uint32_t regen_slots;       /* buffers the accumulators of workers without a residual
                                   are regenerated into (0: none has one; 1; up to 8 where
                                   they fit), counted in residual_bytes */
    /* Workers without a residual whose accumulator the point keeps for the whole iteration,
     * generated once by the preparation pass and read by every repetition and pass of the
     * step, where they fit in the budget beside everything else (the first `resident` of
     * them; the others are regenerated at each visit). Not in `bytes`, which is what the
     * point needs: these use what is left of the budget. */
    uint32_t resident;
    uint64_t resident_bytes;
    /* Without error feedback every point at this P averages the same gradients: the average
     * accumulator of each iteration ([engine] quality = 1) is kept from the first point and
     * read by the others, which then generate only their resident workers in the preparation
     * pass (accum.c). 1 where the iterations' averages fit in what is left of the budget; they
     * are taken from it before the residents. */
    int avg_cache;
    uint64_t avg_cache_bytes;
} deftsim_memory_row;

typedef struct {
    uint64_t ram_bytes;
    double budget_fraction;     /* [engine] memory_budget */
    uint64_t budget_bytes;
    deftsim_feedback feedback;
    uint32_t sampled_workers;   /* error_feedback = sampled: S; else 0 */
    uint64_t n;                 /* gradient elements */
    size_t ncounts;
    deftsim_memory_row *rows;   /* one per [workers] counts entry */
    /* Largest P <= the largest requested count whose points all fit (0: not even P = 1). */
    uint32_t largest_fit;
} deftsim_memory_plan;

typedef struct deftsim_engine deftsim_engine;

/* Opens the gradient source (the trace, or a generator for the model), checks the worker
 * counts against it, creates the kernel context of [device] and computes the memory plan.
 * Nothing is written yet. DEFTSIM_E_INPUT for a scenario that cannot run here (a worker count
 * above the trace's workers, more iterations than the trace holds, [device] kind = cuda in a
 * build without the CUDA backend or on a machine where no usable GPU was found). */
deftsim_status deftsim_engine_new(const deftsim_config *cfg, const deftsim_run_options *opt,
                                  deftsim_engine **out);
void deftsim_engine_free(deftsim_engine *e);

const deftsim_memory_plan *deftsim_engine_memory(const deftsim_engine *e);

/* DEFTSIM_OK when every point fits the budget; otherwise DEFTSIM_E_INPUT with a message such
 * as "[workers] counts: P = 512 needs 23.4 GiB with error_feedback = full, over the memory
 * budget of 19.2 GiB (0.8 of 24.0 GiB RAM); the largest P that fits is 384; set [sparsify]
 * error_feedback = none or sampled for larger P". */
deftsim_status deftsim_engine_check_memory(const deftsim_engine *e);

/* DEFTSIM_OK when [scenario] output may receive this run's results: it does not exist, holds
 * none, or holds an earlier run of the same scenario (the resolved configuration, without
 * [scenario] output and [engine] memory_budget, is the same), which the run replaces.
 * Otherwise DEFTSIM_E_INPUT naming what the folder holds (a sweep's points, another
 * scenario's results with the keys that differ, a trace, training results, point files or
 * rows.csv without a manifest); deftsim_engine_run() then writes nothing. Reads only. */
deftsim_status deftsim_engine_check_output(const deftsim_engine *e);

/* Writes the plan as a small table (for `deftsim run --dry-run`). */
void deftsim_engine_print_plan(const deftsim_engine *e, FILE *f);

typedef struct {
    size_t points;       /* points finished, resumed ones included */
    size_t resumed;      /* of them, kept from an unfinished run of the folder */
    uint64_t rows;       /* CSV rows of those points (header excluded) */
    double seconds;      /* wall time of the whole run */
    int interrupted;     /* options.stop was set: the run stopped early */
} deftsim_run_summary;

/* Checks the memory plan and the output folder (deftsim_engine_check_output), then runs every
 * point and writes the results. The manifest is rewritten after every point (status running,
 * the points so far). A folder holding an unfinished run of the same scenario (status
 * running, interrupted or failed) is resumed: the points its manifest lists whose files
 * exist are kept, not run again; a finished one is replaced. */
deftsim_status deftsim_engine_run(deftsim_engine *e, deftsim_run_summary *summary);

/* What one point of deftsim_engine_run_point() did. */
typedef struct {
    uint64_t rows;           /* CSV rows written (header excluded) */
    double seconds;          /* wall time of the point */
    double prepare_seconds;  /* of which preparing accumulators */
    double step_seconds;     /* of which the sparsifier's steps */
    double sim_seconds;      /* of which the network simulation ([network] simulate = 1) */
    uint64_t sim_messages;   /* point-to-point messages it simulated */
    deftsim_noise_sample machine_start, machine_end; /* the machine's state around the point */
    uint64_t gradient_elements; /* gradient elements it read or generated (0: a data-free
                                   point, [engine] quality = 0) */
    deftsim_stages stages;   /* where its wall time went, and each stage's floor */
} deftsim_point_summary;

/* Runs one point (method, density, P) over the source's iterations, as deftsim_engine_run()
 * runs each of its points, and commits its rows (header included) to csv_path atomically;
 * on failure nothing is left at csv_path. Writes no manifest and no rows.csv: for callers
 * that schedule points themselves (deftsim sweep). P must be one of [workers] counts, whose
 * memory it checks against the budget first; csv_path's folder must exist. */
deftsim_status deftsim_engine_run_point(deftsim_engine *e, deftsim_method method, double density,
                                        uint32_t P, const char *csv_path,
                                        deftsim_point_summary *out);

/* new + run + free. */
deftsim_status deftsim_run(const deftsim_config *cfg, const deftsim_run_options *opt,
                           deftsim_run_summary *summary);

/* The CSV header of rows.csv and every point file: the column names, in order. */
size_t deftsim_engine_column_count(void);
const char *deftsim_engine_column(size_t i);

/* Appends the rows of the point file at path (one written by a point of a run or a sweep)
 * to out, without its header line, each after `prefix` ("" for none): how rows.csv is joined
 * from the point files. DEFTSIM_E_IO naming path when it cannot be read. */
deftsim_status deftsim_rows_join(FILE *out, const char *path, const char *prefix);

#endif
