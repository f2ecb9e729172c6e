/* deftsim_safetensors.h - safetensors files: a validating, zero-copy reader and a header
 * builder for writers.
 *
 * The format (github.com/huggingface/safetensors): 8 bytes, a little-endian uint64 N; N bytes
 * of UTF-8 JSON, an object mapping each tensor name to {"dtype", "shape", "data_offsets":
 * [begin, end]} plus an optional "__metadata__" object of string values; then the byte
 * buffer. Offsets count from the buffer's first byte; the tensors tile the buffer exactly, in
 * any order, without overlap or gap. Data is little-endian and row-major. Writers pad the
 * JSON with spaces so that the buffer starts at a multiple of 8.
 *
 * The reader maps the file read-only and checks everything above before returning; a tensor's
 * data is then a pointer into the map. Only little-endian hosts are supported. */
#ifndef DEFTSIM_SAFETENSORS_H
#define DEFTSIM_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "deftsim_error.h"

/* Dimensions a tensor may have (the format itself sets no limit). */
#define DEFTSIM_ST_MAX_DIMS 16
/* The header size limit of the reference implementation (100 MB). */
#define DEFTSIM_ST_MAX_HEADER 100000000ull

typedef struct {
    const char *name;
    const char *dtype;     /* "F32", "BF16", ... as written */
    size_t elem_size;      /* bytes per element */
    uint32_t ndim;
    uint64_t shape[DEFTSIM_ST_MAX_DIMS];
    uint64_t numel;
    uint64_t begin, end;   /* data_offsets, relative to the buffer */
    const void *data;      /* the tensor's bytes (in the map); aligned to 8 if the buffer is */
} deftsim_st_tensor;

typedef struct deftsim_st_file deftsim_st_file;

/* Maps and validates path. DEFTSIM_E_INPUT (with "path: byte OFFSET" or "path: header: tensor
 * 'name': field ...: problem") for a malformed file, DEFTSIM_E_IO if it cannot be read. If the
 * file's buffer does not start at a multiple of 8 (a writer that did not pad), the file is
 * read into aligned memory instead of mapped, so that data pointers stay aligned. */
deftsim_status deftsim_st_open(const char *path, deftsim_st_file **out);
void deftsim_st_close(deftsim_st_file *f);

const char *deftsim_st_path(const deftsim_st_file *f);
uint64_t deftsim_st_file_size(const deftsim_st_file *f);
/* File byte offset of the buffer (8 + N). */
uint64_t deftsim_st_buffer_offset(const deftsim_st_file *f);
/* Tensors in header order. */
size_t deftsim_st_count(const deftsim_st_file *f);
const deftsim_st_tensor *deftsim_st_tensor_at(const deftsim_st_file *f, size_t i);
/* NULL if absent. */
const deftsim_st_tensor *deftsim_st_find(const deftsim_st_file *f, const char *name);
/* The "__metadata__" object (string values only), or NULL if absent. */
const json_t *deftsim_st_metadata(const deftsim_st_file *f);

/* Bytes per element of a dtype name, 0 if unknown. */
size_t deftsim_st_dtype_size(const char *dtype);

/* What a writer declares per tensor. */
typedef struct {
    const char *name;
    const char *dtype;
    uint32_t ndim;
    const uint64_t *shape;
} deftsim_st_spec;

/* Builds the first 8 + N bytes of a file holding the given tensors in this order, contiguous
 * from offset 0, with optional metadata (object of strings, may be NULL), padded with spaces
 * so the buffer starts at a multiple of 8. *data_size receives the buffer's length. The
 * caller then writes each tensor's bytes in order, and frees *header. */
deftsim_status deftsim_st_build_header(const deftsim_st_spec *specs, size_t n,
                                       const json_t *metadata, char **header, size_t *header_len,
                                       uint64_t *data_size);

#endif
