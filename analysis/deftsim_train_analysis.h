/* deftsim_train_analysis.h - the summary of `deftsim train` results (docs/ANALYSIS.md,
 * "Training results"): per point (model, method, density, P) the final and best test
 * accuracy, the final test loss and simulated time, and the iterations and simulated time to
 * a target accuracy, each as the median over the point's repeats (one per seed: one train
 * folder each) with a percentile-bootstrap interval when there are two repeats or more.
 *
 * Like the sweep summary this reads rows by column name only (docs/TRAINING.md's columns);
 * the caller says which seed each file's rows were trained with. */
#ifndef DEFTSIM_TRAIN_ANALYSIS_H
#define DEFTSIM_TRAIN_ANALYSIS_H

#include <stddef.h>
#include <stdint.h>

#include "deftsim_analysis.h"
#include "deftsim_error.h"

typedef struct {
    deftsim_boot_options boot;
    /* The target accuracy: relative = 1: value times the dense point's final test accuracy at
     * the same model and P (the median over its repeats); relative = 0: value itself. */
    int target_relative;
    double target;
    /* A method's name in summary.md's tables (the figures' legend title), or NULL to show the
     * name itself; the caller, which can read the registry of methods, supplies it. */
    const char *(*title)(const char *method);
} deftsim_train_analysis_options;

/* B = 2000, level 0.95, seed 1; target 0.95 of dense's final accuracy. */
void deftsim_train_analysis_options_default(deftsim_train_analysis_options *o);

/* Parses --target: "0.85" (an absolute accuracy in (0, 1]) or "dense:0.95" (a fraction in
 * (0, 1] of dense's final accuracy). Returns 0, or -1 when malformed or out of range. */
int deftsim_train_target_parse(const char *s, deftsim_train_analysis_options *o);

typedef struct deftsim_train_analysis deftsim_train_analysis;

deftsim_status deftsim_train_analysis_new(const deftsim_train_analysis_options *o,
                                          deftsim_train_analysis **out);
void deftsim_train_analysis_free(deftsim_train_analysis *a);

/* Reads a CSV file of deftsim train rows (a point file or curves.csv) trained with `seed`.
 * A file without rows, without one of the columns model, method, density, P, iteration,
 * test_accuracy, test_loss, or a (point, seed) already read from another file is
 * DEFTSIM_E_INPUT naming the file. */
deftsim_status deftsim_train_analysis_add_file(deftsim_train_analysis *a, const char *path,
                                               uint64_t seed);

/* Computes the estimates; call once after the last file. */
deftsim_status deftsim_train_analysis_finish(deftsim_train_analysis *a);

size_t deftsim_train_analysis_points(const deftsim_train_analysis *a);
/* The largest number of repeats of any point. */
size_t deftsim_train_analysis_max_repeats(const deftsim_train_analysis *a);

/* summary.csv (one row per point, docs/ANALYSIS.md) and summary.md; both atomically.
 * provenance: NULL-terminated lines placed under the title of summary.md (may be NULL). */
deftsim_status deftsim_train_analysis_write_csv(const deftsim_train_analysis *a, const char *path);
deftsim_status deftsim_train_analysis_write_md(const deftsim_train_analysis *a, const char *path,
                                               const char *const *provenance);

#endif
