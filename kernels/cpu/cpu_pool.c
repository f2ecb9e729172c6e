/* cpu_pool.c - the context's worker threads.
 *
 * Threads start with the context and sleep on a condition variable between operations, so an
 * operation never creates a thread. Sleeping rather than spinning matters on a machine whose
 * cores are shared with other work: a spinning worker would steal the core the caller needs.
 * The cost is a wake-up latency of some microseconds per parallel region, which is why the
 * operations run on one thread below cpu_threads_for()'s size. */
#include <pthread.h>
#include <stdlib.h>

#include "cpu_internal.h"

struct cpu_pool {
    unsigned n; /* threads including the caller */
    pthread_t *th;
    pthread_mutex_t mu;
    pthread_cond_t start, done;
    unsigned long gen;
    unsigned pending;
    int stop;
    cpu_task_fn fn;
    void *arg;
    unsigned nrun;
};

typedef struct {
    cpu_pool *p;
    unsigned tid;
} worker_arg;

static void *worker(void *v)
{
    worker_arg *wa = v;
    cpu_pool *p = wa->p;
    unsigned tid = wa->tid;
    free(wa);
    unsigned long seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (p->gen == seen && !p->stop) pthread_cond_wait(&p->start, &p->mu);
        if (p->stop) break;
        seen = p->gen;
        if (tid < p->nrun) {
            cpu_task_fn fn = p->fn;
            void *arg = p->arg;
            unsigned nrun = p->nrun;
            pthread_mutex_unlock(&p->mu);
            fn(arg, tid, nrun);
            pthread_mutex_lock(&p->mu);
            if (--p->pending == 0) pthread_cond_signal(&p->done);
        }
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

deftsim_status cpu_pool_new(unsigned nthreads, cpu_pool **out)
{
    *out = NULL;
    cpu_pool *p = calloc(1, sizeof *p);
    if (!p) return deftsim_error_nomem("kernels: threads");
    p->n = nthreads ? nthreads : 1;
    if (pthread_mutex_init(&p->mu, NULL)) {
        free(p);
        return deftsim_error_set(DEFTSIM_E_RUNTIME, "kernels: cannot create a mutex");
    }
    if (pthread_cond_init(&p->start, NULL) || pthread_cond_init(&p->done, NULL)) {
        pthread_mutex_destroy(&p->mu);
        free(p);
        return deftsim_error_set(DEFTSIM_E_RUNTIME, "kernels: cannot create a condition");
    }
    if (p->n > 1) {
        p->th = calloc(p->n - 1, sizeof *p->th);
        if (!p->th) {
            cpu_pool_free(p);
            return deftsim_error_nomem("kernels: threads");
        }
    }
    for (unsigned t = 1; t < p->n; t++) {
        worker_arg *wa = malloc(sizeof *wa);
        if (wa) {
            wa->p = p;
            wa->tid = t;
        }
        if (!wa || pthread_create(&p->th[t - 1], NULL, worker, wa)) {
            free(wa);
            p->n = t; /* the threads started so far are joined by free */
            cpu_pool_free(p);
            return deftsim_error_set(DEFTSIM_E_RUNTIME, "kernels: cannot start thread %u", t);
        }
    }
    *out = p;
    return DEFTSIM_OK;
}

void cpu_pool_free(cpu_pool *p)
{
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->start);
    pthread_mutex_unlock(&p->mu);
    for (unsigned t = 1; t < p->n; t++) pthread_join(p->th[t - 1], NULL);
    pthread_cond_destroy(&p->start);
    pthread_cond_destroy(&p->done);
    pthread_mutex_destroy(&p->mu);
    free(p->th);
    free(p);
}

void cpu_pool_run(cpu_pool *p, unsigned nrun, cpu_task_fn fn, void *arg)
{
    if (nrun > p->n) nrun = p->n;
    if (nrun <= 1) {
        fn(arg, 0, 1);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->arg = arg;
    p->nrun = nrun;
    p->pending = nrun - 1;
    p->gen++;
    pthread_cond_broadcast(&p->start);
    pthread_mutex_unlock(&p->mu);
    fn(arg, 0, nrun);
    pthread_mutex_lock(&p->mu);
    while (p->pending) pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}
