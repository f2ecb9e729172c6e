/* deftsim_sweep.h - `deftsim sweep`: every combination of a scenario's lists, one point at a
 * time, resumable, into one results folder (docs/OUTPUT.md, "deftsim sweep").
 *
 * A point is (variant, method, density, P). The scenario's [sparsify] methods and densities and
 * [workers] counts are lists the engine already runs; the sweep adds *axes*, keys that take
 * several values across runs:
 *   - the scenario's own lists: [gradients] model (or trace) with a comma-separated list;
 *   - --vary section.key=v1,v2,... for any other key (for instance network bandwidths).
 * A variant is one combination of axis values: the scenario with those values set. A key with
 * one value is a plain setting, not an axis.
 *
 * Each point runs alone through deftsim_engine_run_point() and its rows are committed to
 *     <output>/points/[<variant>/]<method>_d<density>_P<P>.csv
 * atomically when it finishes (the variant folder only when there are axes). The folder's
 * manifest.json (format "deftsim-sweep") is rewritten after every point: it records the
 * scenario's identity (the resolved configuration without the swept lists, and the rows'
 * columns) and every point's state. Rerunning a sweep on the same folder skips the points the
 * manifest lists as done whose file exists (resume), runs the rest, and refuses a folder whose
 * identity differs (another scenario, seed, iteration count, build with other columns), naming
 * the keys that differ. A point that fails leaves points/<id>.failed with its message and the
 * sweep goes on; the sweep then ends listing the failures, with DEFTSIM_E_INPUT when some point
 * failed on bad input (a NaN in a trace: a rerun fails again until the input is fixed), else
 * DEFTSIM_E_RUNTIME. rows.csv
 * (every finished point, one header) is written once no point of the plan is left.
 *
 * One sweep at a time may write a folder: it holds an exclusive lock on <output>/.sweep.lock.
 *
 * Shards (docs/CLUSTER.md): with shard_count N > 0 the sweep runs only the points dealt to
 * shard shard_index (by estimated cost, the same deal on every shard; shards/plan.json records
 * it), so that N processes, on as many machines, sweep one shared folder. A shard writes its own points' files, and its points' records to its own
 * shards/shard-<I>-of-<N>.json instead of manifest.json; shards/plan.json (the plan, created
 * by the first shard) binds the shards of one sweep together. The last shard to finish, or
 * deftsim_sweep_merge(), joins them into manifest.json and rows.csv as one process would have
 * written them. A sweep without shards on a folder of finished shards folds their records into
 * manifest.json and removes shards/. */
#ifndef DEFTSIM_SWEEP_H
#define DEFTSIM_SWEEP_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "deftsim_config.h"
#include "deftsim_team.h"
#include "deftsim_error.h"

typedef struct deftsim_sweep deftsim_sweep;

/* What a progress display hears of a running sweep (deftsim_sweep_run), in this order: BEGIN
 * once, after the folder's state is loaded; POINT_START and POINT_DONE around each point run
 * (ok = 0: it failed, its message in deftsim_sweep_failure_words); END once, after the last.
 * The display reads the points through deftsim_sweep_point_info. */
typedef enum {
    DEFTSIM_SWEEP_BEGIN,
    DEFTSIM_SWEEP_POINT_START,
    DEFTSIM_SWEEP_POINT_DONE,
    DEFTSIM_SWEEP_END
} deftsim_sweep_event_kind;

typedef struct {
    deftsim_sweep_event_kind kind;
    const deftsim_sweep *sweep;
    size_t point;            /* POINT_*: the point's index */
    int ok;                  /* POINT_DONE: it finished */
    size_t skipped, noisy;   /* BEGIN: points finished earlier; of them, run again as noisy */
} deftsim_sweep_event;

/* A progress callback: fn(user, event); fn NULL: none. The library prints no progress. */
typedef struct {
    void (*fn)(void *user, const deftsim_sweep_event *ev);
    void *user;
} deftsim_sweep_progress;

typedef struct {
    /* "section.key=v1,v2,..." (values separated by commas): one axis each. */
    const char *const *vary;
    size_t nvary;
    /* Told of every point as it starts and ends. */
    deftsim_sweep_progress progress;
    /* As deftsim_run_options: RAM to plan for (0: this machine's), preparation threads. */
    uint64_t ram_bytes;
    unsigned prep_threads;
    /* --rerun-noisy: finished points whose timing repetitions spread beyond
     * DEFTSIM_NOISY_SPREAD (deftsim_analysis_point_noise, leaving out the first noisy_warmup
     * iterations, as deftsim analyze --warmup) run again, replacing their files. */
    int rerun_noisy;
    size_t noisy_warmup;
    /* --shard I/N: run only the points dealt to shard shard_index of shard_count (shard_count
     * 0: every point, no shards). 0 <= shard_index < shard_count. The points are dealt by
     * estimated cost (gradient elements x P x iterations), longest first onto the shard with
     * the least so far, ties by plan index and shard index: every shard computes the same
     * deal, and the shards' estimated work is about equal (docs/CLUSTER.md). */
    unsigned shard_index, shard_count;
    /* Spread mode (docs/CLUSTER.md): the ranks every point's workers are spread over; rank 0
     * keeps the folder (state, manifest, point files, rows.csv), the others run the points
     * it hands them. A point that fails on any rank ends the sweep (the CLI ends every rank).
     * NULL: one process. */
    const deftsim_team *team;
    /* A flag the caller sets, from a signal handler for instance, to stop the sweep: nonzero
     * stops it before the next point, iteration or network simulation of the one running
     * (deftsim_run_options.stop), which stays to run, its file not committed. The manifest
     * (a shard: its own file) is then written with status "interrupted", and
     * deftsim_sweep_run() returns DEFTSIM_E_RUNTIME with summary->interrupted set. A rerun
     * resumes. NULL: none. */
    const volatile sig_atomic_t *stop;
} deftsim_sweep_options;

typedef enum {
    DEFTSIM_POINT_PENDING,   /* to run */
    DEFTSIM_POINT_DONE,      /* finished, in this sweep or an earlier one on the folder */
    DEFTSIM_POINT_FAILED     /* failed in this sweep (or earlier, until it is run again) */
} deftsim_point_state;

typedef struct {
    size_t planned;          /* points of this sweep's plan */
    size_t skipped;          /* of them, finished earlier (resumed) */
    size_t ran;              /* run now and finished */
    size_t failed;           /* run now and failed */
    size_t noisy;            /* finished earlier, flagged noisy and run again (--rerun-noisy) */
    uint64_t rows;           /* rows written now */
    double seconds;          /* wall time */
    int joined;              /* a shard: every shard had finished, rows.csv and manifest.json
                              * were joined (deftsim_sweep_merge) */
    int interrupted;         /* options.stop was set: the sweep stopped early */
    size_t finished;         /* points of the plan (of this shard) finished, now or earlier */
} deftsim_sweep_summary;

/* Expands the axes and the points. Checks every variant's configuration (each --vary value is
 * validated as a --set would be). Touches no file. */
deftsim_status deftsim_sweep_new(const deftsim_config *cfg, const deftsim_sweep_options *o,
                                 deftsim_sweep **out);
void deftsim_sweep_free(deftsim_sweep *s);

/* Reads the folder's manifest, if any: refuses a folder with another identity, a `deftsim run`
 * folder or stray point files; marks the points found done. Writes nothing. */
deftsim_status deftsim_sweep_load_state(deftsim_sweep *s);

/* --rerun-noisy: marks to run again the finished points of the plan whose point files the
 * noise rule flags (docs/TIMING.md); *count receives how many. After load_state; writes
 * nothing (deftsim_sweep_run calls it itself when the options ask for it). */
deftsim_status deftsim_sweep_mark_noisy(deftsim_sweep *s, size_t *count);

/* Creates every variant's engine once to check the memory each P needs against the budget
 * (DEFTSIM_E_INPUT, as deftsim run, when a point cannot fit). plan: when not NULL, each
 * variant's memory table is printed there. */
deftsim_status deftsim_sweep_check_memory(deftsim_sweep *s, FILE *plan);

/* Lists the points (id, variant, method, density, P, state, file) as a table. */
void deftsim_sweep_print_points(const deftsim_sweep *s, FILE *f);

/* Takes the folder's lock, loads its state, runs every point not done and writes the
 * manifest (and rows.csv when nothing is left). When some points failed (the message lists
 * them, each named once): DEFTSIM_E_INPUT if one of them failed on bad input, else
 * DEFTSIM_E_RUNTIME; the summary is filled in either way. */
deftsim_status deftsim_sweep_run(deftsim_sweep *s, deftsim_sweep_summary *summary);

size_t deftsim_sweep_point_count(const deftsim_sweep *s);
size_t deftsim_sweep_variant_count(const deftsim_sweep *s);
const char *deftsim_sweep_output(const deftsim_sweep *s);
/* The scenario as given (its lists: methods, densities, counts). */
const deftsim_config *deftsim_sweep_config(const deftsim_sweep *s);
/* Variant v's configuration (v < deftsim_sweep_variant_count; NULL past the end): the scenario
 * with the variant's axis values set, each model with its own table's parameter set. */
const deftsim_config *deftsim_sweep_variant_config(const deftsim_sweep *s, size_t v);
/* The options' shard_index and shard_count (0, 0 without shards). */
void deftsim_sweep_shard(const deftsim_sweep *s, unsigned *index, unsigned *count);

/* One point of the plan, as it stands. */
typedef struct {
    size_t variant;          /* 0 .. variant count - 1 */
    deftsim_method method;
    double density;
    uint32_t P;
    deftsim_point_state state;
    int ran_now;             /* run by this sweep */
    int in_shard;            /* this sweep runs it (always 1 without shards) */
    unsigned shard;          /* the shard it is dealt to (0 without shards) */
    double cost;             /* its estimated cost (gradient elements x P x iterations), by
                              * which the points are dealt to shards */
    uint64_t rows;           /* DONE: its rows */
    double seconds;          /* DONE: its wall time */
} deftsim_sweep_point_info;

void deftsim_sweep_point_info_get(const deftsim_sweep *s, size_t i, deftsim_sweep_point_info *out);
/* "deft d=0.01 P=32" and, with axes, the variant's label after a space. */
void deftsim_sweep_point_words(const deftsim_sweep *s, size_t i, char *buf, size_t cap);
/* A failed point's message, led by its words (the point is not repeated). */
void deftsim_sweep_failure_words(const deftsim_sweep *s, size_t i, char *buf, size_t cap);

/* ---- joining shards (deftsim sweep --merge) ---------------------------------------------------- */

typedef struct {
    size_t shards;           /* N */
    size_t points;           /* points of the plan, all finished */
    size_t extra;            /* finished points of the folder outside the plan, kept */
    uint64_t rows;           /* rows in rows.csv */
    int joined;              /* 0: only_if_complete and some shard is not finished */
} deftsim_sweep_merge_summary;

/* Joins the shards of the sweep in dir (shards/plan.json, shards/shard-<I>-of-<N>.json) into
 * dir/rows.csv (the plan's points in plan order, then the folder's finished points outside
 * the plan, as one process writes it) and dir/manifest.json (every point's record, status
 * complete, "shards" listing each shard's machine and times). Idempotent: the files depend
 * on the shards' files only. Refuses (DEFTSIM_E_INPUT) a folder without shards, shard files
 * of another split or plan, and, unless only_if_complete, shards that are missing or not
 * finished, naming the points. only_if_complete: an unfinished sweep is not an error; nothing
 * is written and joined is 0. Writes through unique temporary names (O_EXCL) and rename, so
 * that shards joining at the same moment on different machines cannot mix their files. */
deftsim_status deftsim_sweep_merge(const char *dir, int only_if_complete,
                                   deftsim_sweep_merge_summary *out);

/* ---- reading a results folder (deftsim analyze) ----------------------------------------------- */

typedef struct {
    char *path;              /* the point file (or rows file) to read */
    char **values;           /* naxes axis values */
} deftsim_result_file;

typedef struct {
    char *kind;              /* "sweep", "run", "points" (no manifest) or "file" */
    char **axes;             /* axis names */
    size_t naxes;
    deftsim_result_file *files;
    size_t nfiles;
    /* Lines describing where the results come from (scenario, status, build, machine), for
     * summary.md; NULL-terminated. */
    char **provenance;
    /* A run or sweep that did not finish (interrupted, killed, still running, or with points
     * left to run): files holds its finished points, of planned; the provenance says so. */
    int incomplete;
    size_t planned;
    char *status;            /* the manifest's status (NULL without a manifest) */
} deftsim_result_set;

/* What to read in dir: a sweep's finished points (manifest.json of format deftsim-sweep), a
 * run's point files (format deftsim-results), or, without a manifest, points/ *.csv, else
 * rows.csv. A path to a CSV file is read as it is. */
deftsim_status deftsim_results_list(const char *dir, deftsim_result_set **out);
void deftsim_results_free(deftsim_result_set *r);

/* The registry's result columns that `deftsim analyze` summarises (DEFTSIM_COL_MEDIAN), added
 * to the analysis's quantities (deftsim_metric_add) in rows.csv's order; call before
 * deftsim_analysis_new. */
deftsim_status deftsim_results_add_metrics(void);

#endif
