/* deftsim_folder.h - what a results folder already holds, checked before a command writes into
 * it, so that no command replaces another run's results (docs/OUTPUT.md, "One folder, one
 * run").
 *
 * Every command that writes a folder with a manifest.json (run, sweep, train) describes what it
 * is about to write: the manifest format, and an *identity*, a JSON object of the form
 *     {"config": {section: {key: value}}, ...further keys compared as they are}
 * naming what must match for the folder's results to be this command's own (a rerun of the
 * same scenario). deftsim_folder_check() reads the folder's manifest and refuses (DEFTSIM_E_INPUT)
 * a folder that holds another kind of results (another command's manifest, a trace, a manifest
 * deftsim cannot read), another scenario's (the identities differ: the message names up to four
 * differences), or result files without a manifest. It writes nothing. */
#ifndef DEFTSIM_FOLDER_H
#define DEFTSIM_FOLDER_H

#include <stddef.h>

#include <jansson.h>

#include "deftsim_config.h"
#include "deftsim_error.h"

/* What a command writes, for deftsim_folder_check's checks and messages. */
typedef struct {
    const char *format;      /* the manifest's "format" it writes: "deftsim-results" */
    const char *noun;        /* "a run": "the folder holds ..., not a run" */
    const char *verb;        /* "run": "run into another folder" */
    const char *option;      /* how to choose another folder: "--output DIR" */
    /* "%s holds <another> (<differences>); <why>: <verb> into another folder (<option>)" */
    const char *another;     /* "the results of another run" */
    const char *why;         /* "this run would replace them" */
    /* The folder's identity from its manifest (a new reference; NULL when the manifest has
     * none). */
    json_t *(*identity_of)(json_t *manifest);
    /* Files (relative to the folder) that this command writes and that, without a manifest,
     * mean another run's results: they are refused. points/ is always checked for point
     * files (*.csv, in points/ or one folder below). */
    const char *const *files;
    size_t nfiles;
} deftsim_folder_writer;

/* What a manifest of this format says the folder holds: "the results of deftsim run". */
const char *deftsim_folder_holds(const char *format);

/* Whether a points folder holds a point file: a *.csv in it or in a folder one level below (a
 * sweep's variants). Empty folders do not count: a sweep creates them before it reads the
 * manifest. 0 also when points_dir cannot be read. */
int deftsim_folder_has_point_files(const char *points_dir);

/* The identity {"config": ...} of a resolved configuration (deftsim_config_to_json's object,
 * not consumed) without the keys of drop ("section", "key" pairs). A new reference. */
json_t *deftsim_folder_config_identity(json_t *config, const char *const (*drop)[2], size_t ndrop);

/* The identity of a run or training manifest: its "config" without [scenario] output and
 * [engine] memory_budget, which do not change the results. */
json_t *deftsim_folder_run_identity_of(json_t *manifest);

/* Checks dir against what w is about to write there (identity as above). OK when dir does not
 * exist, holds none of the results named above, or holds w's own format with an equal identity
 * (a key the folder's manifest lacks counts as its default: it was added to deftsim since).
 * manifest: when not NULL, receives the folder's manifest on success (NULL when it has none). */
deftsim_status deftsim_folder_check(const char *dir, const deftsim_folder_writer *w,
                                    json_t *identity, json_t **manifest);

#endif
