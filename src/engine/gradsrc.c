/* gradsrc.c - the gradient source (deftsim_gradsrc.h): the synthetic generator and a recorded
 * trace behind one table of functions. */
#include "deftsim_gradsrc.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "deftsim_gen.h"
#include "deftsim_par.h"
#include "deftsim_trace.h"
#include "deftsim_util.h"

struct deftsim_gradsrc {
    const deftsim_gradsrc_ops *ops;
    void *impl;
    const deftsim_model *model;
    deftsim_source kind;
    _Atomic uint64_t elements;  /* elements read, filled or mapped (deftsim_gradsrc_elements) */
    _Atomic uint64_t busy_ns;   /* nanoseconds inside read and fill, summed over threads */
};

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- the synthetic generator ---------------------------------------------------------------- */

typedef struct {
    deftsim_model *model;
    deftsim_gen *gen;       /* NULL: the table only */
} gen_source;

static deftsim_status gen_prepare(void *impl, size_t it, uint32_t P, unsigned threads)
{
    (void)impl, (void)it, (void)P, (void)threads;
    return DEFTSIM_OK;
}

static deftsim_status gen_read(void *impl, size_t it, uint32_t w0, uint32_t nw, uint64_t off,
                               size_t cnt, float *const *stage, const float **out)
{
    gen_source *s = impl;
    deftsim_status st = deftsim_gen_fill_workers(s->gen, it, w0, nw, off, cnt, stage);
    if (st) return st;
    for (uint32_t j = 0; j < nw; j++) out[j] = stage[j];
    return DEFTSIM_OK;
}

static deftsim_status gen_fill(void *impl, size_t it, uint32_t w, uint64_t off, size_t cnt,
                               float *dst)
{
    return deftsim_gen_fill(((gen_source *)impl)->gen, it, w, off, cnt, dst);
}

static deftsim_status gen_fill_runs(void *impl, size_t it, uint32_t w0, uint32_t nw,
                                    const deftsim_gen_run *runs, size_t nruns, float *const *out)
{
    return deftsim_gen_fill_runs(((gen_source *)impl)->gen, it, w0, nw, runs, nruns, out);
}

static const float *gen_map(void *impl, size_t it, uint32_t w)
{
    (void)impl, (void)it, (void)w;
    return NULL;
}

static uint32_t gen_workers(const void *impl)
{
    (void)impl;
    return UINT32_MAX;
}

static size_t gen_iterations(const void *impl)
{
    (void)impl;
    return SIZE_MAX;
}

static uint64_t gen_iteration_id(const void *impl, size_t it)
{
    (void)impl;
    return it;
}

static void gen_describe(const void *impl, json_t *src)
{
    const gen_source *s = impl;
    json_object_set_new(src, "generator_kernel", json_string(deftsim_gen_kernel(s->gen)));
}

static void gen_close(void *impl)
{
    gen_source *s = impl;
    if (s->gen) deftsim_gen_free(s->gen);
    deftsim_model_free(s->model);
    free(s);
}

static const deftsim_gradsrc_ops gen_ops = {
    .prepare = gen_prepare,
    .read = gen_read,
    .fill = gen_fill,
    .fill_runs = gen_fill_runs,
    .map = gen_map,
    .workers = gen_workers,
    .iterations = gen_iterations,
    .iteration_id = gen_iteration_id,
    .describe = gen_describe,
    .close = gen_close,
    .maps = 0,
};

static deftsim_status gen_open(const deftsim_config *cfg, int table_only, deftsim_gradsrc *g)
{
    gen_source *s = calloc(1, sizeof *s);
    if (!s) return deftsim_error_nomem("engine");
    g->ops = &gen_ops;
    g->impl = s;
    deftsim_status st;
    if ((st = deftsim_model_load(cfg->gradients.model, &s->model))) {
        char w[600];
        deftsim_config_where(cfg, "gradients", "model", w, sizeof w);
        return deftsim_error_wrap(st, "%s", w);
    }
    g->model = s->model;
    if (table_only) return DEFTSIM_OK;
    deftsim_gen_params gp;
    deftsim_gradsrc_gen_params(cfg, &gp);
    return deftsim_gen_new(s->model, &gp, &s->gen);
}

void deftsim_gradsrc_gen_params(const deftsim_config *cfg, deftsim_gen_params *gp)
{
    deftsim_gen_params_default(gp);
    gp->seed = cfg->scenario.seed;
    gp->scale_decades = cfg->synthetic.scale_decades;
    gp->signal = cfg->synthetic.signal;
    gp->tail = cfg->synthetic.tail;
    gp->drift = cfg->synthetic.drift;
    gp->bias_shift = cfg->synthetic.bias_shift;
    gp->kind_scales = cfg->synthetic.scales;
    for (int k = 0; k < DEFTSIM_GEN_NKINDS; k++) {
        gp->kind_level[k] = cfg->synthetic.kind_level[k];
        gp->kind_depth[k] = cfg->synthetic.kind_depth[k];
        gp->kind_spread[k] = cfg->synthetic.kind_spread[k];
        gp->kind_size[k] = cfg->synthetic.kind_size[k];
        gp->kind_signal[k] = cfg->synthetic.kind_signal[k];
        gp->kind_tail[k] = cfg->synthetic.kind_tail[k];
        gp->kind_field[k] = cfg->synthetic.kind_field[k];
    }
    for (int r = 0; r < DEFTSIM_GEN_NROLES; r++) gp->role_offset[r] = cfg->synthetic.role_offset[r];
    gp->field = cfg->synthetic.field;
    gp->worker_spread = cfg->synthetic.worker_spread;
}

/* ---- a recorded trace ----------------------------------------------------------------------- */

typedef struct {
    deftsim_trace *trace;
    uint32_t workers;
    size_t iterations;
    const float **grad;          /* per trace worker: its gradient of the prepared iteration */
    unsigned char *finite_ok;    /* iterations x workers, 1 once checked */
    size_t it;                   /* the iteration being checked */
} trace_source;

static deftsim_status check_finite_task(void *ctx, size_t w, unsigned thread)
{
    (void)thread;
    trace_source *s = ctx;
    unsigned char *ok = &s->finite_ok[s->it * s->workers + w];
    if (*ok) return DEFTSIM_OK;
    deftsim_status st = deftsim_trace_check_finite(s->trace, s->it, (uint32_t)w);
    if (st) return st;
    *ok = 1;
    return DEFTSIM_OK;
}

/* The P gradients are mapped, then checked finite (once per iteration and worker for the whole
 * run). */
static deftsim_status trace_prepare(void *impl, size_t it, uint32_t P, unsigned threads)
{
    trace_source *s = impl;
    deftsim_status st;
    for (uint32_t w = 0; w < P; w++)
        if ((st = deftsim_trace_gradient(s->trace, it, w, &s->grad[w]))) return st;
    s->it = it;
    return deftsim_par_run(threads, P, check_finite_task, s);
}

static deftsim_status trace_read(void *impl, size_t it, uint32_t w0, uint32_t nw, uint64_t off,
                                 size_t cnt, float *const *stage, const float **out)
{
    (void)it, (void)cnt, (void)stage;
    trace_source *s = impl;
    for (uint32_t j = 0; j < nw; j++) out[j] = s->grad[w0 + j] + off;
    return DEFTSIM_OK;
}

static deftsim_status trace_fill(void *impl, size_t it, uint32_t w, uint64_t off, size_t cnt,
                                 float *dst)
{
    (void)it;
    memcpy(dst, ((trace_source *)impl)->grad[w] + off, cnt * sizeof(float));
    return DEFTSIM_OK;
}

static const float *trace_map(void *impl, size_t it, uint32_t w)
{
    (void)it;
    return ((trace_source *)impl)->grad[w];
}

static uint32_t trace_workers(const void *impl) { return ((const trace_source *)impl)->workers; }

static size_t trace_iterations(const void *impl)
{
    return ((const trace_source *)impl)->iterations;
}

static uint64_t trace_iteration_id(const void *impl, size_t it)
{
    return deftsim_trace_iteration_id(((const trace_source *)impl)->trace, it);
}

static void trace_describe(const void *impl, json_t *src)
{
    const trace_source *s = impl;
    json_object_set_new(src, "trace", json_string(deftsim_trace_dir(s->trace)));
    json_object_set_new(src, "trace_workers", json_integer(s->workers));
}

static void trace_close(void *impl)
{
    trace_source *s = impl;
    if (s->trace) deftsim_trace_close(s->trace);
    free(s->grad);
    free(s->finite_ok);
    free(s);
}

static const deftsim_gradsrc_ops trace_ops = {
    .prepare = trace_prepare,
    .read = trace_read,
    .fill = trace_fill,
    .map = trace_map,
    .workers = trace_workers,
    .iterations = trace_iterations,
    .iteration_id = trace_iteration_id,
    .describe = trace_describe,
    .close = trace_close,
    .maps = 1,
};

static deftsim_status trace_open(const deftsim_config *cfg, int table_only, deftsim_gradsrc *g)
{
    trace_source *s = calloc(1, sizeof *s);
    if (!s) return deftsim_error_nomem("engine");
    g->ops = &trace_ops;
    g->impl = s;
    deftsim_status st = deftsim_trace_open(cfg->gradients.trace, &s->trace);
    if (st && table_only) {
        char w[600];
        deftsim_config_where(cfg, "gradients", "trace", w, sizeof w);
        return deftsim_error_wrap(st, "%s", w);
    }
    if (st) return st;
    g->model = deftsim_trace_model(s->trace);
    s->workers = deftsim_trace_workers(s->trace);
    s->iterations = deftsim_trace_iterations(s->trace);
    if (table_only) return DEFTSIM_OK;
    s->grad = calloc(s->workers ? s->workers : 1, sizeof *s->grad);
    s->finite_ok = calloc(s->iterations * s->workers + 1, 1);
    if (!s->grad || !s->finite_ok) return deftsim_error_nomem("engine");
    return DEFTSIM_OK;
}

/* ---- the interface -------------------------------------------------------------------------- */

static deftsim_status open_kind(const deftsim_config *cfg, int table_only, deftsim_gradsrc **out)
{
    *out = NULL;
    deftsim_gradsrc *g = calloc(1, sizeof *g);
    if (!g) return deftsim_error_nomem("engine");
    g->kind = cfg->gradients.source;
    deftsim_status st = g->kind == DEFTSIM_SOURCE_TRACE ? trace_open(cfg, table_only, g)
                                                        : gen_open(cfg, table_only, g);
    if (st) {
        deftsim_gradsrc_close(g);
        return st;
    }
    *out = g;
    return DEFTSIM_OK;
}

/* The manifest's iteration list and model.numel, or the iter_<t>/ folders of a per-rank trace
 * without a manifest (numel 0 then): nothing is mapped or read but names and one small JSON
 * file. The trace is checked when it is opened (deftsim_gradsrc_open). */
int deftsim_gradsrc_named(const deftsim_config *cfg) { return deftsim_gradsrc_name(cfg) != NULL; }

const char *deftsim_gradsrc_key(const deftsim_config *cfg)
{
    return cfg->gradients.source == DEFTSIM_SOURCE_TRACE ? "trace" : "model";
}

const char *deftsim_gradsrc_name(const deftsim_config *cfg)
{
    return cfg->gradients.source == DEFTSIM_SOURCE_TRACE ? cfg->gradients.trace
                                                           : cfg->gradients.model;
}

deftsim_status deftsim_gradsrc_open(const deftsim_config *cfg, deftsim_gradsrc **out)
{
    *out = NULL;
    /* A list of models or traces is a sweep over them (deftsim sweep); a run takes one. */
    const char *one = deftsim_gradsrc_name(cfg);
    if (one && strchr(one, ','))
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "[gradients] %s: '%s' is a list; deftsim run takes one (deftsim "
                                 "sweep runs each in turn)",
                                 deftsim_gradsrc_key(cfg), one);
    return open_kind(cfg, 0, out);
}

deftsim_status deftsim_gradsrc_open_table(const deftsim_config *cfg, deftsim_gradsrc **out)
{
    return open_kind(cfg, 1, out);
}

void deftsim_gradsrc_close(deftsim_gradsrc *g)
{
    if (!g) return;
    if (g->impl) g->ops->close(g->impl);
    free(g);
}

const deftsim_model *deftsim_gradsrc_model(const deftsim_gradsrc *g) { return g->model; }
const char *deftsim_gradsrc_kind(const deftsim_gradsrc *g) { return deftsim_source_name(g->kind); }
uint32_t deftsim_gradsrc_workers(const deftsim_gradsrc *g) { return g->ops->workers(g->impl); }
size_t deftsim_gradsrc_iterations(const deftsim_gradsrc *g) { return g->ops->iterations(g->impl); }
int deftsim_gradsrc_maps(const deftsim_gradsrc *g) { return g->ops->maps; }

uint64_t deftsim_gradsrc_iteration_id(const deftsim_gradsrc *g, size_t it)
{
    return g->ops->iteration_id(g->impl, it);
}

void deftsim_gradsrc_describe(const deftsim_gradsrc *g, json_t *src)
{
    g->ops->describe(g->impl, src);
}

deftsim_status deftsim_gradsrc_prepare(deftsim_gradsrc *g, size_t it, uint32_t P,
                                       unsigned threads)
{
    return g->ops->prepare(g->impl, it, P, threads);
}

deftsim_status deftsim_gradsrc_read(deftsim_gradsrc *g, size_t it, uint32_t w0, uint32_t nw,
                                    uint64_t off, size_t cnt, float *const *stage,
                                    const float **out)
{
    atomic_fetch_add_explicit(&g->elements, (uint64_t)nw * cnt, memory_order_relaxed);
    uint64_t t0 = now_ns();
    deftsim_status st = g->ops->read(g->impl, it, w0, nw, off, cnt, stage, out);
    atomic_fetch_add_explicit(&g->busy_ns, now_ns() - t0, memory_order_relaxed);
    return st;
}

deftsim_status deftsim_gradsrc_fill(deftsim_gradsrc *g, size_t it, uint32_t w, uint64_t off,
                                    size_t cnt, float *dst)
{
    atomic_fetch_add_explicit(&g->elements, (uint64_t)cnt, memory_order_relaxed);
    uint64_t t0 = now_ns();
    deftsim_status st = g->ops->fill(g->impl, it, w, off, cnt, dst);
    atomic_fetch_add_explicit(&g->busy_ns, now_ns() - t0, memory_order_relaxed);
    return st;
}

deftsim_status deftsim_gradsrc_fill_runs(deftsim_gradsrc *g, size_t it, uint32_t w0, uint32_t nw,
                                         const deftsim_gen_run *runs, size_t nruns,
                                         float *const *out)
{
    uint64_t elems = 0;
    for (size_t r = 0; r < nruns; r++) elems += runs[r].count;
    atomic_fetch_add_explicit(&g->elements, (uint64_t)nw * elems, memory_order_relaxed);
    uint64_t t0 = now_ns();
    deftsim_status st = DEFTSIM_OK;
    if (g->ops->fill_runs) {
        st = g->ops->fill_runs(g->impl, it, w0, nw, runs, nruns, out);
    } else {
        for (uint32_t j = 0; j < nw && !st; j++)
            for (size_t r = 0; r < nruns && !st; r++)
                st = g->ops->fill(g->impl, it, w0 + j, runs[r].offset, (size_t)runs[r].count,
                                  out[j] + runs[r].offset);
    }
    atomic_fetch_add_explicit(&g->busy_ns, now_ns() - t0, memory_order_relaxed);
    return st;
}

const float *deftsim_gradsrc_map(deftsim_gradsrc *g, size_t it, uint32_t w)
{
    const float *p = g->ops->map(g->impl, it, w);
    if (p) atomic_fetch_add_explicit(&g->elements, g->model->numel, memory_order_relaxed);
    return p;
}

uint64_t deftsim_gradsrc_elements(const deftsim_gradsrc *g)
{
    return atomic_load_explicit(&((deftsim_gradsrc *)g)->elements, memory_order_relaxed);
}

double deftsim_gradsrc_busy_seconds(const deftsim_gradsrc *g)
{
    return (double)atomic_load_explicit(&((deftsim_gradsrc *)g)->busy_ns, memory_order_relaxed) *
           1e-9;
}

/* ---- the generator's own throughput --------------------------------------------------------- */

/* Elements per probe task: 8 workers (one generator call, as the preparation pass makes) of
 * this many elements each. */
#define RATE_WORKERS 8u
#define RATE_COUNT (32u * 1024u)

typedef struct {
    deftsim_gradsrc *g;
    float *buf;
    uint64_t n;
} rate_ctx;

static deftsim_status rate_task(void *ctx, size_t i, unsigned thread)
{
    rate_ctx *r = ctx;
    float *outs[RATE_WORKERS];
    for (uint32_t j = 0; j < RATE_WORKERS; j++)
        outs[j] = r->buf + ((size_t)thread * RATE_WORKERS + j) * RATE_COUNT;
    uint64_t cnt = r->n < RATE_COUNT ? r->n : RATE_COUNT;
    uint64_t off = (i * RATE_COUNT) % (r->n - cnt + 1);
    gen_source *s = r->g->impl;
    return deftsim_gen_fill_workers(s->gen, 0, 0, RATE_WORKERS, off, cnt, outs);
}

deftsim_status deftsim_gradsrc_rate(deftsim_gradsrc *g, unsigned threads, double *rate)
{
    *rate = NAN;
    if (g->kind == DEFTSIM_SOURCE_TRACE || !((gen_source *)g->impl)->gen) return DEFTSIM_OK;
    if (threads < 1) threads = 1;
    rate_ctx r = {.g = g, .n = g->model->numel};
    r.buf = malloc((size_t)threads * RATE_WORKERS * RATE_COUNT * sizeof(float));
    if (!r.buf) return deftsim_error_nomem("generator probe");
    size_t tasks = 4 * (size_t)threads;
    uint64_t per = (r.n < RATE_COUNT ? r.n : RATE_COUNT) * RATE_WORKERS;
    /* Once to warm the pages and the code, then timed three times: the best. */
    deftsim_status st = deftsim_par_run(threads, threads, rate_task, &r);
    for (int k = 0; k < 3 && !st; k++) {
        double t0 = deftsim_now();
        st = deftsim_par_run(threads, tasks, rate_task, &r);
        double dt = deftsim_now() - t0;
        if (!st && dt > 0 && !((double)(per * tasks) / dt <= *rate)) *rate = (double)(per * tasks) / dt;
    }
    free(r.buf);
    return st;
}
