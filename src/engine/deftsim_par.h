/* deftsim_par.h - the engine's fork-join helper and its large buffers (src/engine/par.c). */
#ifndef DEFTSIM_PAR_H
#define DEFTSIM_PAR_H

#include <stddef.h>

#include "deftsim_error.h"

/* The most threads deftsim_par_run starts (the caller included). */
#define DEFTSIM_PAR_MAX_THREADS 256

/* One item of a parallel loop, on thread `thread` (0 .. threads-1). */
typedef deftsim_status (*deftsim_par_fn)(void *ctx, size_t item, unsigned thread);

/* Runs fn on items 0 .. nitems-1 on up to `threads` threads (the caller is thread 0). Items
 * are claimed from a shared counter, so the split between threads varies from run to run;
 * every task must write only its own item's outputs, so results do not. The first task error
 * is raised again on the caller's thread, with its message. */
deftsim_status deftsim_par_run(unsigned threads, size_t nitems, deftsim_par_fn fn, void *ctx);

/* Buffers of n floats straight from mmap, marked for transparent huge pages (NULL: no
 * memory); deftsim_big_free takes the size they were allocated with. */
void *deftsim_big_alloc(size_t bytes);
void deftsim_big_free(void *p, size_t bytes);

#endif
