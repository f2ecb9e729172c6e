/* deftsim_util.h - small helpers shared by every folder: clocks, atomic files, directories,
 * overflow-checked parsing. */
#ifndef DEFTSIM_UTIL_H
#define DEFTSIM_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "deftsim_error.h"

/* Monotonic wall clock in seconds. */
double deftsim_now(void);

/* Creates a directory and its parents (like mkdir -p). */
deftsim_status deftsim_mkdir_p(const char *path);

/* Atomic file writer: writes go to "<path>.tmp.<pid>" which commit() flushes, fsyncs and
 * renames over path, so a reader never sees a half-written file. abort() removes the temp
 * file. Both free the handle. */
typedef struct deftsim_afile deftsim_afile;
deftsim_status deftsim_afile_open(deftsim_afile **out, const char *path);
FILE *deftsim_afile_stream(deftsim_afile *af);
deftsim_status deftsim_afile_commit(deftsim_afile *af);
void deftsim_afile_abort(deftsim_afile *af);
/* Removes from dir the temporary files of atomic writers that died before committing:
 * "<name>.tmp.<pid>" where no process <pid> exists any more (a writer killed by a signal).
 * Temporary files of live processes are kept. Returns how many were removed. */
size_t deftsim_afile_remove_orphans(const char *dir);

/* Writes all len bytes of buf to the descriptor fd, retrying interrupted and short writes.
 * Returns 0, or -1 (errno set by write) if a write fails or writes nothing. */
int deftsim_write_all(int fd, const void *buf, size_t len);

/* Writes len bytes to path atomically. */
deftsim_status deftsim_write_file_atomic(const char *path, const void *data, size_t len);

/* The status of a failed open() or fopen() of an input file, from its errno: the file is part
 * of the user's input, so a path that cannot be read as given (missing, not permitted, a
 * directory, not a directory on the way, a symlink loop, too long) is DEFTSIM_E_INPUT, exit 2,
 * like any other bad input: running again will not help until the user names another file or
 * fixes this one. DEFTSIM_E_IO (the system failed to serve a readable file: out of
 * descriptors or memory, a device error) for the rest. */
deftsim_status deftsim_open_input_status(int err);

/* Reads a whole file into a NUL-terminated malloc'd buffer. */
deftsim_status deftsim_read_file(const char *path, char **data, size_t *len);

/* Strict number parsing: the whole string must be a number in range; no overflow.
 * Return 0 on success, -1 otherwise (no message recorded). */
int deftsim_parse_i64(const char *s, int64_t *out);
int deftsim_parse_u64(const char *s, uint64_t *out);
int deftsim_parse_double(const char *s, double *out);

/* 0 if s is valid UTF-8 (no overlong forms, surrogates or code points past U+10FFFF, the rule
 * JSON writers such as jansson apply), else -1 with *bad_at (if not NULL) set to the offset of
 * the first byte that is not. */
int deftsim_utf8_check(const char *s, size_t *bad_at);

/* Checked size arithmetic: return 0 on success, -1 on overflow. */
int deftsim_mul_size(size_t a, size_t b, size_t *out);
int deftsim_add_size(size_t a, size_t b, size_t *out);

/* The one growing array (grow.c): makes room for `need` elements of `elem` bytes in the
 * array whose pointer is at p (a T **, passed as is) and whose capacity, in elements, is
 * *cap. Nothing happens while need <= *cap; otherwise the capacity doubles (from 16 for an
 * empty array) until it holds need, and the array is reallocated. On failure (no memory, or
 * a size past the address space) *p and *cap are unchanged and DEFTSIM_E_NOMEM is returned
 * with no message recorded: the caller records its own through deftsim_error_nomem() (or
 * deftsim_nomem_format()), which names what was growing. Typical use, before appending:
 *     if (deftsim_grow(&v->items, &v->cap, v->n + 1, sizeof *v->items))
 *         return deftsim_error_nomem("%s: items", path); */
deftsim_status deftsim_grow(void *p, size_t *cap, size_t need, size_t elem);

#endif
