/* deftsim_conditions.h - the conditions every output that shows times names (issue 31): the
 * network (its [network] preset, the collective library and its algorithms, the network model)
 * and where the compute phases were timed (this machine's CPU, a CUDA device, or a device
 * profile). One formatter builds both lines, from a resolved configuration (deftsim config,
 * the log of deftsim run and sweep, bench sim) or from a results folder's manifest.json
 * (summary.md, the figures of deftsim plot), so the words are the same everywhere:
 *
 *   network: preset dgx-h100, NCCL (nccl_algorithm ring), model LV08
 *   network: preset none, MPI (allreduce rabenseifner, allgather bruck), model LV08
 *   compute phases (selection etc.) timed on this machine's CPU (AMD EPYC 7763), not on the
 *   cluster's GPUs
 *   compute phases (selection etc.) charged from the device profile h100.csv (NVIDIA H100)
 */
#ifndef DEFTSIM_CONDITIONS_H
#define DEFTSIM_CONDITIONS_H

#include <stddef.h>
#include <stdio.h>

#include "deftsim_config.h"
#include "deftsim_error.h"

typedef struct {
    int gpu_cluster;    /* a preset other than none, library nccl or gpus_per_node > 1 */
    int simulated;      /* [network] simulate = 1 */
    char network[384];  /* "network: preset ..., NCCL (...), model LV08" */
    char compute[384];  /* "compute phases (selection etc.) timed on ..." */
} deftsim_conditions;

/* From a resolved configuration; cpu names the CPU the phases are timed on (NULL: this
 * machine's, from /proc/cpuinfo). */
deftsim_status deftsim_conditions_of_config(const deftsim_config *cfg, const char *cpu,
                                            deftsim_conditions *out);

/* "network: ...; compute phases ..." into buf (both lines joined). */
void deftsim_conditions_join(const deftsim_conditions *c, char *buf, size_t cap);

/* The line `deftsim run` and `deftsim sweep` print on f when they start:
 * "<who>: network: ...; compute phases ...". */
void deftsim_conditions_log(FILE *f, const char *who, const deftsim_config *cfg);

/* ---- from a results folder ------------------------------------------------------------------ */

typedef struct deftsim_conditions_src deftsim_conditions_src;

/* Reads dir/manifest.json (deftsim run, sweep or train). *out = NULL, and DEFTSIM_OK, when dir
 * has no manifest.json (CSV files alone say nothing of the conditions) or one that is not JSON
 * or holds no configuration (the command reading the folder reports that); DEFTSIM_E_NOMEM. */
deftsim_status deftsim_conditions_open(const char *dir, deftsim_conditions_src **out);
void deftsim_conditions_close(deftsim_conditions_src *s);

/* The conditions of the series whose sweep axes (names such as "network.nccl_algorithm")
 * take these values: the configuration of the sweep variant a finished point with those
 * values ran (manifest "variants"), else the folder's configuration with the values put in.
 * naxes = 0: the folder's configuration. */
deftsim_status deftsim_conditions_lookup(const deftsim_conditions_src *s,
                                         const char *const *axes, const char *const *values,
                                         size_t naxes, deftsim_conditions *out);

/* The same as one line "network: ...; compute phases ..." into buf ("" when s is NULL or the
 * lookup fails); the shape of deftsim_analysis_set_note's callback, ctx being s. */
void deftsim_conditions_note(void *ctx, const char *const *axes, const char *const *values,
                             size_t naxes, char *buf, size_t cap);

/* dir's conditions (its manifest's configuration) as one line into buf; "" when dir has no
 * manifest or it cannot be read. */
void deftsim_conditions_folder(const char *dir, char *buf, size_t cap);

/* deftsim analyze: deftsim_analysis_write_md with every series' conditions under its heading,
 * from dir's manifest (none when dir has no manifest.json). */
struct deftsim_analysis;
deftsim_status deftsim_conditions_write_md(struct deftsim_analysis *a, const char *dir,
                                           const char *path, const char *const *provenance);

#endif
