/* error.c - per-thread error messages. */
#include "deftsim_error.h"

#include <stdio.h>
#include <string.h>

#define DEFTSIM_ERRMSG_MAX 1024

static _Thread_local char errmsg[DEFTSIM_ERRMSG_MAX];

const char *deftsim_status_name(deftsim_status st)
{
    switch (st) {
    case DEFTSIM_OK: return "ok";
    case DEFTSIM_E_USAGE: return "usage";
    case DEFTSIM_E_INPUT: return "input";
    case DEFTSIM_E_IO: return "io";
    case DEFTSIM_E_NOMEM: return "nomem";
    case DEFTSIM_E_UNSUPPORTED: return "unsupported";
    case DEFTSIM_E_RUNTIME: return "runtime";
    case DEFTSIM_E_INTERNAL: return "internal";
    }
    return "unknown";
}

deftsim_status deftsim_error_setv(deftsim_status st, const char *fmt, va_list ap)
{
    /* Through a copy: callers may pass the current message (deftsim_error_message()) as an
     * argument, and vsnprintf must not read the buffer it writes. */
    char msg[DEFTSIM_ERRMSG_MAX];
    vsnprintf(msg, sizeof msg, fmt, ap);
    memcpy(errmsg, msg, strlen(msg) + 1);
    return st;
}

deftsim_status deftsim_error_set(deftsim_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    deftsim_error_setv(st, fmt, ap);
    va_end(ap);
    return st;
}

static void nomem_formatv(char *buf, size_t cap, const char *fmt, va_list ap)
{
    char what[DEFTSIM_ERRMSG_MAX];
    vsnprintf(what, sizeof what, fmt, ap);
    snprintf(buf, cap, "%s: out of memory", what);
}

void deftsim_nomem_format(char *buf, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    nomem_formatv(buf, cap, fmt, ap);
    va_end(ap);
}

deftsim_status deftsim_error_nomem(const char *fmt, ...)
{
    char msg[DEFTSIM_ERRMSG_MAX + 16]; /* the context at its longest, then the suffix */
    va_list ap;
    va_start(ap, fmt);
    nomem_formatv(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return deftsim_error_set(DEFTSIM_E_NOMEM, "%s", msg);
}

deftsim_status deftsim_error_wrap(deftsim_status st, const char *fmt, ...)
{
    char prefix[DEFTSIM_ERRMSG_MAX], old[DEFTSIM_ERRMSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, errmsg, sizeof old);
    size_t pl = strlen(prefix);
    if (pl > sizeof errmsg - 3) pl = sizeof errmsg - 3;
    memcpy(errmsg, prefix, pl);
    memcpy(errmsg + pl, ": ", 2);
    size_t room = sizeof errmsg - pl - 3, ol = strlen(old);
    if (ol > room) ol = room;
    memcpy(errmsg + pl + 2, old, ol);
    errmsg[pl + 2 + ol] = '\0';
    return st;
}

const char *deftsim_error_message(void) { return errmsg; }

void deftsim_error_clear(void) { errmsg[0] = '\0'; }

int deftsim_status_exit_code(deftsim_status st)
{
    if (st == DEFTSIM_OK) return 0;
    if (st == DEFTSIM_E_USAGE || st == DEFTSIM_E_INPUT) return 2;
    return 1;
}
