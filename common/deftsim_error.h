/* deftsim_error.h - status codes and the per-thread error message.
 *
 * Every library function that can fail returns a deftsim_status. On failure it has also
 * recorded a human-readable message (naming the file, line or field, and the problem) that
 * deftsim_error_message() returns until the next deftsim_error_set() on the same thread.
 * Library code never calls exit(); the CLI maps statuses to exit codes.
 */
#ifndef DEFTSIM_ERROR_H
#define DEFTSIM_ERROR_H

#include <stdarg.h>
#include <stddef.h>

typedef enum {
    DEFTSIM_OK = 0,
    DEFTSIM_E_USAGE,       /* bad command line                        -> exit 2 */
    DEFTSIM_E_INPUT,       /* bad input file, value or data           -> exit 2 */
    DEFTSIM_E_IO,          /* the system refused a read or write      -> exit 1 */
    DEFTSIM_E_NOMEM,       /* allocation failed or budget exceeded    -> exit 1 */
    DEFTSIM_E_UNSUPPORTED, /* feature absent in this build or device  -> exit 1 */
    DEFTSIM_E_RUNTIME,     /* any other failure while running         -> exit 1 */
    DEFTSIM_E_INTERNAL     /* a broken invariant: a bug in deftsim    -> exit 1 */
} deftsim_status;

/* Stable short name of a status ("ok", "usage", "input", ...). */
const char *deftsim_status_name(deftsim_status st);

/* Records a formatted message for the calling thread and returns st, so that
 * `return deftsim_error_set(DEFTSIM_E_INPUT, "%s:%d: ...", file, line);` reads naturally. */
deftsim_status deftsim_error_set(deftsim_status st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
deftsim_status deftsim_error_setv(deftsim_status st, const char *fmt, va_list ap);

/* The one out-of-memory message: records "<context>: out of memory" (context formatted as
 * printf does, naming what was being allocated: "sweep", "%s: trace", path) and returns
 * DEFTSIM_E_NOMEM. */
deftsim_status deftsim_error_nomem(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The same message into buf (cap bytes, truncated), for code that carries its messages in its
 * own buffers (the forked simulation child): "<context>: out of memory". */
void deftsim_nomem_format(char *buf, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prepends "prefix: " to the current message (for adding context on the way up). */
deftsim_status deftsim_error_wrap(deftsim_status st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* The last message recorded on this thread ("" if none). */
const char *deftsim_error_message(void);
void deftsim_error_clear(void);

/* Process exit code for a status: 0 ok, 2 usage or input error, 1 anything else. */
int deftsim_status_exit_code(deftsim_status st);

#endif
