/* deftsim_trace.h - gradient traces, format versions 1 and 2 (traces/FORMAT.md).
 *
 * A trace is a directory in one of two layouts.
 * Flat (version 1, or 2 with "layout": "flat"): manifest.json (model layer table, worker count,
 * iteration ids, provenance) and one safetensors file per iteration holding every worker's
 * whole gradient as one flat float32 tensor "worker.NNNN" of the model's numel elements, in
 * parameter order. The reader maps every iteration file at open; gradients are pointers into
 * the maps.
 * Per-rank (version 2, "layout": "per-rank"): iter_<t>/rank_<r>.safetensors, one file per
 * rank and iteration holding the rank's {parameter name: gradient} as PyTorch saves it; the
 * manifest is optional (everything is derived from the files). The reader reads every file at
 * open into memory of its own, in parameter order, converting F16 and BF16 exactly to float32.
 *
 * Either way the reader validates all of the structure (manifest, headers, offsets, shapes,
 * tensors) before returning; gradients stay valid until deftsim_trace_close. Values are not scanned at open: call
 * deftsim_trace_check_finite before using a gradient, or deftsim_trace_layer_stats to count
 * non-finite values. A trace is read-only and safe to read from several threads. */
#ifndef DEFTSIM_TRACE_H
#define DEFTSIM_TRACE_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "deftsim_error.h"
#include "deftsim_model.h"

#define DEFTSIM_TRACE_FORMAT_NAME "deftsim-trace"
/* The version the flat writer writes; the reader reads 1 and DEFTSIM_TRACE_FORMAT_VERSION_MAX. */
#define DEFTSIM_TRACE_FORMAT_VERSION 1
#define DEFTSIM_TRACE_FORMAT_VERSION_MAX 2
#define DEFTSIM_TRACE_LAYOUT_FLAT "flat"
#define DEFTSIM_TRACE_LAYOUT_PER_RANK "per-rank"
/* The per-rank layout's __metadata__ key listing the parameter names in order (a JSON array
 * of strings, as a string). */
#define DEFTSIM_TRACE_ORDER_KEY "parameter_order"
#define DEFTSIM_TRACE_MANIFEST "manifest.json"
/* Upper bound on workers, a sanity limit for hand-written manifests. */
#define DEFTSIM_TRACE_MAX_WORKERS 1048576u

/* ---- Reading ----------------------------------------------------------------------------- */

typedef struct deftsim_trace deftsim_trace;

/* Opens the trace in dir (either layout). DEFTSIM_E_INPUT with a message naming the file, the
 * field, tensor or byte offset and the problem for anything malformed, missing or
 * inconsistent (a missing dir is reported as such). */
deftsim_status deftsim_trace_open(const char *dir, deftsim_trace **out);
void deftsim_trace_close(deftsim_trace *t);

/* The format version (1 or 2) and layout (DEFTSIM_TRACE_LAYOUT_*) of an open trace; a
 * per-rank trace without a manifest reports version 2. */
int deftsim_trace_format_version(const deftsim_trace *t);
const char *deftsim_trace_layout(const deftsim_trace *t);

/* Where the layer order came from: "manifest", "metadata" (the first file's
 * __metadata__.parameter_order) or "sorted" (neither: tensor names in byte order, which is
 * not PyTorch's parameter order). */
const char *deftsim_trace_layer_order(const deftsim_trace *t);

/* Writes dir/manifest.json for a per-rank trace derived from its files alone (any manifest
 * there is ignored while deriving), atomically. If a manifest exists and equals the derived
 * one, nothing is written and *written is 0; if it differs, DEFTSIM_E_INPUT and the file is
 * left alone. The provenance comes from the first file's __metadata__ (recorder, method,
 * seed) where present. */
deftsim_status deftsim_trace_import(const char *dir, int *written);

const char *deftsim_trace_dir(const deftsim_trace *t);
/* The model built from the manifest's layer table (name, layers, offsets, numel). */
const deftsim_model *deftsim_trace_model(const deftsim_trace *t);
uint32_t deftsim_trace_workers(const deftsim_trace *t);
/* Number of iterations present, and the id of the i-th (ids strictly increase with i). */
size_t deftsim_trace_iterations(const deftsim_trace *t);
uint64_t deftsim_trace_iteration_id(const deftsim_trace *t, size_t iter_index);
/* Index of iteration id; DEFTSIM_E_INPUT if the trace does not hold it. */
deftsim_status deftsim_trace_find_iteration(const deftsim_trace *t, uint64_t id,
                                            size_t *iter_index);
/* Path of the i-th iteration's file (flat) or folder (per-rank). */
const char *deftsim_trace_iteration_path(const deftsim_trace *t, size_t iter_index);
/* The manifest's provenance object (borrowed; at least recorder, method, seed). */
const json_t *deftsim_trace_provenance(const deftsim_trace *t);

/* Worker's gradient at the iter_index-th iteration: numel floats in parameter order, a
 * pointer into the file's map (no copy). DEFTSIM_E_INPUT for an index out of range. */
deftsim_status deftsim_trace_gradient(const deftsim_trace *t, size_t iter_index, uint32_t worker,
                                      const float **data);

/* DEFTSIM_OK if every value of the gradient is finite; otherwise DEFTSIM_E_INPUT with a
 * message naming the file, tensor, layer, element (within the layer and the gradient), the
 * file byte offset and the value (NaN, +Inf, -Inf) of the first non-finite element. */
deftsim_status deftsim_trace_check_finite(const deftsim_trace *t, size_t iter_index,
                                          uint32_t worker);

/* Per-layer statistics of one gradient: l2norm[L] is the L2 norm of layer L's finite values,
 * nonfinite[L] the count of its NaN and infinite values (either array may be NULL; each holds
 * the model's nlayers entries). */
deftsim_status deftsim_trace_layer_stats(const deftsim_trace *t, size_t iter_index,
                                         uint32_t worker, double *l2norm, uint64_t *nonfinite);

/* ---- Writing ----------------------------------------------------------------------------- */

typedef struct deftsim_trace_writer deftsim_trace_writer;

/* Starts a trace in dir (created if needed; an existing manifest.json there is removed first,
 * so the directory is no valid trace until deftsim_trace_writer_close). Only a trace of the same
 * model, workers and provenance (its "recorder" aside) is replaced so: a dir holding any other
 * manifest.json (results of deftsim run, sweep or train, another trace, one that is not JSON)
 * is refused with DEFTSIM_E_INPUT naming what it holds, and left as it is. provenance must be a
 * JSON object with "recorder" (string: what recorded it), "method" (string: how) and "seed"
 * (integer >= 0, a decimal string, or null); other keys are kept as they are. */
deftsim_status deftsim_trace_writer_open(const char *dir, const deftsim_model *m, uint32_t workers,
                                         const json_t *provenance, deftsim_trace_writer **out);

/* Writes iteration `iteration` (ids strictly increasing from call to call): grads[w] points
 * at worker w's numel floats. The file is written atomically. */
deftsim_status deftsim_trace_writer_put(deftsim_trace_writer *w, uint64_t iteration,
                                        const float *const *grads);

/* Produces elements [offset, offset + count) of a worker's gradient into out. */
typedef deftsim_status (*deftsim_trace_fill_fn)(void *ctx, uint32_t worker, uint64_t offset,
                                                uint64_t count, float *out);

/* As deftsim_trace_writer_put, but the gradients are produced chunk by chunk by fill, so no
 * caller needs all workers' gradients in memory at once. */
deftsim_status deftsim_trace_writer_put_fill(deftsim_trace_writer *w, uint64_t iteration,
                                             deftsim_trace_fill_fn fill, void *ctx);

/* Writes manifest.json (atomically, last) and frees w. Fails if no iteration was written or an
 * earlier put failed. */
deftsim_status deftsim_trace_writer_close(deftsim_trace_writer *w);

/* Frees w without writing a manifest (iteration files already written stay). */
void deftsim_trace_writer_discard(deftsim_trace_writer *w);

/* Converts n stored values of dtype "F32", "F16" or "BF16" (little-endian, any alignment) to
 * float32, exactly (every F16 and BF16 value is a float32 value; NaN payloads are kept). */
void deftsim_trace_convert(const char *dtype, const void *src, uint64_t n, float *dst);

/* ---- Shared helpers ---------------------------------------------------------------------- */

/* File name of an iteration: "iter_%06" PRIu64 ".safetensors" (buf of at least 40 bytes). */
void deftsim_trace_iteration_filename(uint64_t iteration, char *buf, size_t size);
/* Tensor name of a worker: "worker.%04u" (buf of at least 24 bytes). */
void deftsim_trace_worker_name(uint32_t worker, char *buf, size_t size);

/* Checks a provenance object as the manifest requires it; where names it in messages. */
deftsim_status deftsim_trace_check_provenance(const json_t *prov, const char *where);

#endif
