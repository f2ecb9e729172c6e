/* trace_internal.h - what the files of the trace format share (internal to traces/): the
 * parsed manifest, an open trace's iterations, and the entry points one file calls in another.
 *
 * Call order (a file calls only files below it):
 *   trace_write.c  the writer and the import of a per-rank trace (which opens it to read)
 *   trace.c        the manifest and the reader: opens a trace, hands out gradients
 *   trace_rank.c   the per-rank layout (iter_<t>/rank_<r>.safetensors): scanned, checked
 *                  against the model, read and converted into memory of the trace's own */
#ifndef DEFTSIM_TRACE_INTERNAL_H
#define DEFTSIM_TRACE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "deftsim_safetensors.h"
#include "deftsim_trace.h"

typedef struct {
    int version;        /* format_version: 1 or 2 */
    int per_rank;       /* layout: 0 flat, 1 per-rank (version 2 only) */
    deftsim_model *model;
    uint32_t workers;
    size_t niter;
    uint64_t *iters;
    json_t *provenance;
} trace_manifest;

typedef struct {
    uint64_t id;
    char *path;            /* flat: the file; per-rank: the iteration's folder */
    deftsim_st_file *file; /* flat */
    const float **grads;   /* per worker: into the file (flat) or owned[w] (per-rank) */
    uint64_t *byte_offset; /* flat, per worker: file byte offset of element 0 */
    float **owned;         /* per-rank, per worker: the gradient read in parameter order */
    char **rank_paths;     /* per-rank, per worker */
    uint64_t *layer_byte;  /* per-rank, [worker * nlayers + layer]: file byte of element 0 */
    unsigned char *layer_esize; /* per-rank, same index: bytes per element as stored */
} trace_iter;

struct deftsim_trace {
    char *dir;
    trace_manifest man;
    trace_iter *iters;
    const char *order; /* deftsim_trace_layer_order */
};

/* trace_rank.c (the lowest file, so that every other calls down into it): "dir/name",
 * malloc'd; NULL when out of memory. */
char *trace_join_path(const char *dir, const char *name);

/* trace.c: opens the trace in dir; ignore_manifest = 1 reads a per-rank trace from its files
 * alone (the import). */
deftsim_status trace_open(const char *dir, int ignore_manifest, deftsim_trace **out);

/* trace_rank.c: the entries of dir named prefix<number>suffix (folders if want_dir, else
 * anything), sorted by number; two names of one number are an error. */
typedef struct {
    uint64_t id;
    char *name;
} trace_numbered;
deftsim_status trace_scan_numbered(const char *dir, const char *prefix, const char *suffix,
                                   int want_dir, trace_numbered **out, size_t *count);
void trace_numbered_free(trace_numbered *v, size_t n);

/* trace_rank.c: fills t (dir set; with have_manifest, its manifest parsed) from the per-rank
 * files: iterations, model (derived from the first file without a manifest), every worker's
 * gradient read in parameter order. */
deftsim_status trace_open_per_rank(deftsim_trace *t, int have_manifest);

#endif
