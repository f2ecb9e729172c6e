/* deftsim_manifest.h - what every results folder's manifest.json shares (deftsim run, sweep,
 * train; docs/OUTPUT.md): its opening keys, the machine it ran on, and the atomic write; and
 * the manifest of a run (engine). */
#ifndef DEFTSIM_MANIFEST_H
#define DEFTSIM_MANIFEST_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "deftsim_config.h"
#include "deftsim_error.h"
#include "deftsim_machine.h"
#include "deftsim_profile.h"
#include "deftsim_team.h"

/* {"hostname", "cpu_model", "cpus_online", "ram_bytes"} of this machine. */
json_t *deftsim_manifest_machine(void);

/* Spread mode's record: {"ranks", "library" (the MPI library), "workers" (how they are cut)}.
 * The manifest's "machine" is rank 0's. */
json_t *deftsim_manifest_spread(const deftsim_team *t);

/* A device profile's record: {"file", "device", "backend", "threads", "created",
 * "conditions", "source"} ("measured" for a profile without a source line). A run's manifest
 * holds it as kernels.profile, a sweep's as each profile variant's "profile". */
json_t *deftsim_manifest_profile(const char *file, const deftsim_profile *p);

/* A manifest's opening keys, in order: format, format_version (1), scenario, seed, deftsim
 * (version, git_commit), status, error (only when not NULL), started, finished (null when
 * NULL). NULL when out of memory. */
json_t *deftsim_manifest_new(const char *format, const deftsim_config *cfg, const char *status,
                             const char *error, const char *started, const char *finished);

/* Writes root (which it releases) to path atomically, indented, keys in order, with a
 * trailing newline. */
deftsim_status deftsim_manifest_write(const char *path, json_t *root);

#endif
