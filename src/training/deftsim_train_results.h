/* deftsim_train_results.h - what a `deftsim train` folder holds, for `deftsim analyze` and
 * `deftsim plot`: its manifest.json (format deftsim-train-results, docs/TRAINING.md) read into
 * the seed, the scenario, the commit and the list of finished points with their files. */
#ifndef DEFTSIM_TRAIN_RESULTS_H
#define DEFTSIM_TRAIN_RESULTS_H

#include <stddef.h>
#include <stdint.h>

#include "deftsim_error.h"

typedef struct {
    char *method;      /* "deft", "dense", ... */
    double density;    /* 1 for dense */
    unsigned P;
    char *path;        /* the point file: DIR/points/<method>_d<density>_P<P>.csv */
} deftsim_train_point_file;

typedef struct {
    char *dir;
    char *scenario;
    uint64_t seed;
    char *status;      /* "done", or how the run ended */
    char *commit;      /* the deftsim commit that trained */
    char *network;     /* "fmnist_mlp", "fmnist_cnn" */
    deftsim_train_point_file *points;
    size_t npoints;
} deftsim_train_results;

/* 1 when dir/manifest.json exists and says format deftsim-train-results, else 0 (no error:
 * the caller reads the folder as other results). */
int deftsim_train_results_is(const char *dir);

/* Reads dir/manifest.json. DEFTSIM_E_INPUT naming the manifest when it is not JSON, not of
 * format deftsim-train-results, lacks a field, or lists no points; a listed point file that
 * cannot be read is DEFTSIM_E_INPUT naming it. */
deftsim_status deftsim_train_results_open(const char *dir, deftsim_train_results **out);
void deftsim_train_results_free(deftsim_train_results *r);

#endif
