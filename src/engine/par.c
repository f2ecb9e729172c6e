/* par.c - the engine's fork-join helper and its large buffers (deftsim_par.h). */
#include "deftsim_par.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/mman.h>

/* ---- large buffers -----------------------------------------------------------------------------
 * Residuals, the average and the regeneration buffer are n floats each, P of them for full
 * feedback. They come straight from mmap, marked for transparent huge pages, which cuts the
 * page faults of first touch by 512 (with 4 KiB pages, faulting in 128 ResNet-18 residuals
 * costs more system time than the run). The engine keeps them in a pool for the whole run, so
 * the kernel zeroes each page once, not once per point: residuals are not cleared between
 * points, the first iteration of a point assigns acc_w = g_w instead of adding. */

void *deftsim_big_alloc(size_t bytes)
{
    if (bytes == 0) bytes = 1;
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
#ifdef MADV_HUGEPAGE
    madvise(p, bytes, MADV_HUGEPAGE); /* advice only: without it the buffer still works */
#endif
    return p;
}

void deftsim_big_free(void *p, size_t bytes)
{
    if (p) munmap(p, bytes ? bytes : 1);
}

/* ---- a small fork-join helper ---------------------------------------------------------------
 * Items are claimed from a shared counter, so the split between threads varies from run to
 * run; every task writes only its own item's outputs, so results do not. A task's error is
 * recorded on its own thread, so the first one is copied here and raised again on the caller's
 * thread. */

typedef struct {
    deftsim_par_fn fn;
    void *ctx;
    size_t nitems;
    atomic_size_t next;
    atomic_int failed;
    pthread_mutex_t lock;
    deftsim_status st;
    char msg[2048];
} par_job;

typedef struct {
    par_job *job;
    unsigned thread;
} par_arg;

static void par_loop(par_job *job, unsigned thread)
{
    for (;;) {
        if (atomic_load(&job->failed)) return;
        size_t i = atomic_fetch_add(&job->next, 1);
        if (i >= job->nitems) return;
        deftsim_status st = job->fn(job->ctx, i, thread);
        if (st) {
            pthread_mutex_lock(&job->lock);
            if (!job->st) {
                job->st = st;
                snprintf(job->msg, sizeof job->msg, "%s", deftsim_error_message());
            }
            pthread_mutex_unlock(&job->lock);
            atomic_store(&job->failed, 1);
            return;
        }
    }
}

static void *par_main(void *p)
{
    par_arg *a = p;
    par_loop(a->job, a->thread);
    return NULL;
}


deftsim_status deftsim_par_run(unsigned threads, size_t nitems, deftsim_par_fn fn, void *ctx)
{
    if (nitems == 0) return DEFTSIM_OK;
    if (threads > nitems) threads = (unsigned)nitems;
    if (threads > DEFTSIM_PAR_MAX_THREADS) threads = DEFTSIM_PAR_MAX_THREADS;
    if (threads <= 1) {
        for (size_t i = 0; i < nitems; i++) {
            deftsim_status st = fn(ctx, i, 0);
            if (st) return st;
        }
        return DEFTSIM_OK;
    }
    par_job job = {.fn = fn, .ctx = ctx, .nitems = nitems};
    atomic_init(&job.next, 0);
    atomic_init(&job.failed, 0);
    pthread_mutex_init(&job.lock, NULL);
    pthread_t tid[DEFTSIM_PAR_MAX_THREADS];
    par_arg args[DEFTSIM_PAR_MAX_THREADS];
    unsigned started = 0;
    /* The caller is thread 0; a thread that cannot be started leaves its share to the others. */
    for (unsigned t = 1; t < threads; t++) {
        args[started] = (par_arg){&job, t};
        if (pthread_create(&tid[started], NULL, par_main, &args[started]) == 0) started++;
    }
    par_loop(&job, 0);
    for (unsigned t = 0; t < started; t++) pthread_join(tid[t], NULL);
    pthread_mutex_destroy(&job.lock);
    if (job.st) return deftsim_error_set(job.st, "%s", job.msg);
    return DEFTSIM_OK;
}
