/* deftsim_npy.h - one-dimensional NumPy .npy files (format version 1.0), written atomically.
 *
 * `deftsim run --dump` stores selections and aggregates in this format so that anyone can
 * check them with numpy.load() and nothing else. Only what the dump needs is supported:
 * 1-D arrays of little-endian int64 ('<i8'), int32 ('<i4') or float32 ('<f4') in C order.
 * The header is padded so that the data starts at a multiple of 64 bytes, as numpy itself
 * writes it. */
#ifndef DEFTSIM_NPY_H
#define DEFTSIM_NPY_H

#include <stddef.h>
#include <stdint.h>

#include "deftsim_error.h"

typedef enum { DEFTSIM_NPY_I8, DEFTSIM_NPY_I4, DEFTSIM_NPY_F4 } deftsim_npy_type;

/* "<i8", "<i4", "<f4". */
const char *deftsim_npy_descr(deftsim_npy_type t);
size_t deftsim_npy_itemsize(deftsim_npy_type t);

/* The header of a 1-D array of count items: writes min(needed, cap) bytes into buf and
 * returns the bytes needed (a multiple of 64). */
size_t deftsim_npy_header(deftsim_npy_type t, uint64_t count, unsigned char *buf, size_t cap);

/* Writes count items of type t from data (host byte order) to path atomically. */
deftsim_status deftsim_npy_write(const char *path, deftsim_npy_type t, const void *data,
                                 uint64_t count);

/* Writes 32-bit indices (the kernels' deftsim_kidx) widened to '<i8', the dump's index type,
 * so that files keep their type whatever width the kernels use. */
deftsim_status deftsim_npy_write_u32_as_i8(const char *path, const uint32_t *idx, uint64_t count);

/* Reads a 1-D '<i8', '<i4' or '<f4' file written by deftsim or numpy (versions 1.0 to 3.0).
 * *data is malloc'd (NULL when count is 0) in host byte order. DEFTSIM_E_INPUT naming the
 * file and the problem for anything else. */
deftsim_status deftsim_npy_read(const char *path, deftsim_npy_type *type, void **data,
                                uint64_t *count);

#endif
