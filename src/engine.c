/* engine.c - `deftsim run`: every (method, density, P) point of a scenario over the gradient
 * source's iterations, with error feedback, written as tidy CSV rows (deftsim_engine.h,
 * docs/OUTPUT.md). */
#include "deftsim_build_info.h"
#include "deftsim_engine.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "deftsim_csv.h"
#include "deftsim_folder.h"
#include "deftsim_gen.h"
#include "deftsim_kernels.h"
#ifdef DEFTSIM_HAVE_CUDA
#include "deftsim_kcuda.h"
#endif
#include "deftsim_npy.h"
#include "deftsim_platform.h"
#include "deftsim_profile.h"
#include "deftsim_sparsify.h"
#include "deftsim_timing.h"
#include "deftsim_trace.h"
#include "deftsim_util.h"

/* Accumulators are prepared in chunks of this many elements (a multiple of the generator's
 * 32-element groups, so every call starts on a group), GEN_WORKERS workers per generator call
 * (they share the signal stream): the chunk's staging buffers and running sums stay in L2. */
#define CHUNK 8192u
#define GEN_WORKERS 8u
/* Regenerating one whole accumulator (error_feedback none or sampled) is cut into larger
 * pieces: there is no running sum to keep in cache. */
#define REGEN_CHUNK (64u * 1024u)

/* The dump widens indices from 32 bits (deftsim_npy_write_u32_as_i8). */
_Static_assert(sizeof(deftsim_kidx) == sizeof(uint32_t) && (deftsim_kidx)-1 == UINT32_MAX,
               "deftsim_kidx is no longer uint32_t: adapt the dump");

/* ---- columns ------------------------------------------------------------------------------ */

/* rows.csv columns, in order; docs/OUTPUT.md describes each (a test checks that it names
 * every one). */
static const char *const columns[] = {
    /* the point and the row */
    "scenario", "model", "n", "source", "method", "density", "k", "P", "iteration",
    "source_iteration", "worker", "phase_index", "phase", "phase_kind", "phase_selection",
    "phase_seconds", "phase_seconds_min", "phase_seconds_max", "phase_bytes_sent",
    "phase_bytes_recv",
    /* the worker in this iteration */
    "select_seconds", "select_seconds_min", "select_seconds_max", "worker_seconds", "cost",
    "local_count", "bytes_sent", "bytes_recv", "residual_kept",
    /* the iteration */
    "leader", "nnz", "common_count", "buildup", "actual_density", "kj_total",
    "imbalance_seconds", "imbalance_cost", "captured_frac", "topk_frac", "captured_ratio",
    "lost_mass", "lost_abs_mass", "lost_entries", "acc_norm2", "prepare_seconds",
    "step_seconds",
    "count_ratio", "threshold", "pad_overhead",
    "threshold_local", "threshold_global", "region_balance",
    /* the run */
    "error_feedback", "sampled_workers", "index_bytes", "value_bytes", "wire", "backend",
    "threads", "seed",
    /* the network simulation: the row, the iteration, the run */
    "sim_start", "sim_end", "comm_seconds", "select_critical_seconds", "iteration_seconds",
    "net_topology", "net_model", "net_bandwidth", "net_latency", "net_allgather",
    "net_allreduce", "net_bcast", "sim_mode",
};
#define NCOLUMNS (sizeof columns / sizeof columns[0])

size_t deftsim_engine_column_count(void) { return NCOLUMNS; }
const char *deftsim_engine_column(size_t i) { return i < NCOLUMNS ? columns[i] : NULL; }

/* ---- machine ------------------------------------------------------------------------------ */

uint64_t deftsim_machine_ram(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (f) {
        char line[256];
        unsigned long long kb = 0;
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "MemTotal: %llu kB", &kb) == 1) break;
        fclose(f);
        if (kb) return (uint64_t)kb * 1024u;
    }
    long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
    if (pages > 0 && psize > 0) return (uint64_t)pages * (uint64_t)psize;
    return 0;
}

static unsigned online_cpus(void)
{
    long c = sysconf(_SC_NPROCESSORS_ONLN);
    return c > 0 ? (unsigned)c : 1u;
}

/* The first "model name" of /proc/cpuinfo, or "unknown". */
static void cpu_model(char *buf, size_t cap)
{
    snprintf(buf, cap, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) != 0) continue;
        char *p = strchr(line, ':');
        if (!p) continue;
        p++;
        while (*p == ' ' || *p == '\t') p++;
        size_t len = strcspn(p, "\n");
        snprintf(buf, cap, "%.*s", (int)len, p);
        break;
    }
    fclose(f);
}

static void utc_now(char *buf, size_t cap)
{
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* "23.4 GiB", "512.0 MiB", "96 B": sizes in messages. */
static const char *human_bytes(uint64_t b, char *buf, size_t cap)
{
    static const char *const unit[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
    if (b < 1024) {
        snprintf(buf, cap, "%" PRIu64 " B", b);
        return buf;
    }
    double v = (double)b / 1024.0;
    size_t u = 0;
    while (v >= 1024.0 && u + 1 < sizeof unit / sizeof unit[0]) {
        v /= 1024.0;
        u++;
    }
    snprintf(buf, cap, "%.1f %s", v, unit[u]);
    return buf;
}

/* ---- large buffers -----------------------------------------------------------------------------
 * Residuals, the average and the regeneration buffer are n floats each, P of them for full
 * feedback. They come straight from mmap, marked for transparent huge pages, which cuts the
 * page faults of first touch by 512 (with 4 KiB pages, faulting in 128 ResNet-18 residuals
 * costs more system time than the run). The engine keeps them in a pool for the whole run, so
 * the kernel zeroes each page once, not once per point: residuals are not cleared between
 * points, the first iteration of a point assigns acc_w = g_w instead of adding. */

static void *big_alloc(size_t bytes)
{
    if (bytes == 0) bytes = 1;
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
#ifdef MADV_HUGEPAGE
    madvise(p, bytes, MADV_HUGEPAGE); /* advice only: without it the buffer still works */
#endif
    return p;
}

static void big_free(void *p, size_t bytes)
{
    if (p) munmap(p, bytes ? bytes : 1);
}

/* ---- a small fork-join helper ---------------------------------------------------------------
 * Items are claimed from a shared counter, so the split between threads varies from run to
 * run; every task writes only its own item's outputs, so results do not. A task's error is
 * recorded on its own thread, so the first one is copied here and raised again on the caller's
 * thread. */

typedef deftsim_status (*par_fn)(void *ctx, size_t item, unsigned thread);

typedef struct {
    par_fn fn;
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

#define PAR_MAX_THREADS 256

static deftsim_status par_run(unsigned threads, size_t nitems, par_fn fn, void *ctx)
{
    if (nitems == 0) return DEFTSIM_OK;
    if (threads > nitems) threads = (unsigned)nitems;
    if (threads > PAR_MAX_THREADS) threads = PAR_MAX_THREADS;
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
    pthread_t tid[PAR_MAX_THREADS];
    par_arg args[PAR_MAX_THREADS];
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

/* ---- the engine ------------------------------------------------------------------------------ */

struct deftsim_engine {
    deftsim_config *cfg;
    deftsim_run_options opt;
    char *dump_dir;
    deftsim_model *model_owned;   /* synthetic source */
    const deftsim_model *model;
    deftsim_gen *gen;
    deftsim_trace *trace;
    size_t iterations;
    uint64_t *source_iter;        /* per iteration: the generator's iteration or the trace's id */
    unsigned char *finite_ok;     /* trace: iterations x trace workers, 1 once checked */
    uint32_t trace_workers;
    deftsim_kctx *kctx;
    deftsim_profile *profile;     /* [device] kind = profile: the phases' cost model */
    unsigned prep_threads;
    /* Buffers of n floats, reused by every point (see big_alloc). */
    float **pool;
    size_t npool;
    /* Per preparation thread: GEN_WORKERS staging chunks and one chunk of running sums. */
    float *stage;
    double *sums;
    deftsim_memory_plan plan;
    deftsim_platform_record platform; /* topology = file: the user's platform file as read */
};

void deftsim_run_options_default(deftsim_run_options *o)
{
    memset(o, 0, sizeof *o);
}

const deftsim_memory_plan *deftsim_engine_memory(const deftsim_engine *e) { return &e->plan; }

/* k of a density: floor(d n), at least 1 (docs/SPARSIFIERS.md, "One step, P workers"). */
static uint64_t k_of(double d, uint64_t n)
{
    double k = floor(d * (double)n);
    if (k < 1) return 1;
    if (k > (double)n) return n;
    return (uint64_t)k;
}

static uint32_t tracked_workers(const deftsim_config *cfg, uint32_t P)
{
    switch (cfg->sparsify.error_feedback) {
    case DEFTSIM_FEEDBACK_FULL: return P;
    case DEFTSIM_FEEDBACK_NONE: return 0;
    case DEFTSIM_FEEDBACK_SAMPLED:
        return (uint32_t)cfg->sparsify.sampled_workers < P ? (uint32_t)cfg->sparsify.sampled_workers : P;
    }
    return P;
}

/* Whether the provider hands out the same memory for a worker all iteration long: only when
 * every worker keeps a residual. Sampled mode always goes through the regenerating provider,
 * even with S >= P (so that sampled with S = P reproduces full exactly: a check of it). */
static int provider_persistent(const deftsim_config *cfg)
{
    return cfg->sparsify.error_feedback == DEFTSIM_FEEDBACK_FULL;
}

/* Whether a method of the scenario asks the provider for g_w (CLT-k's low-pass filter). */
static int needs_grad(const deftsim_config *cfg)
{
    if (!(cfg->sparsify.cltk_beta > 0)) return 0;
    for (size_t i = 0; i < cfg->sparsify.nmethods; i++)
        if (cfg->sparsify.methods[i] == DEFTSIM_METHOD_CLTK) return 1;
    return 0;
}

static void fill_params(const deftsim_engine *e, deftsim_method m, double d, uint32_t P,
                        deftsim_sparsifier_params *p)
{
    const deftsim_config *cfg = e->cfg;
    memset(p, 0, sizeof *p);
    p->method = m;
    p->density = d;
    p->P = P;
    p->model = e->model;
    p->index_bytes = (uint32_t)cfg->sparsify.index_bytes;
    p->value_bytes = (uint32_t)cfg->sparsify.value_bytes;
    p->wire = cfg->sparsify.wire;
    p->cltk_charge = cfg->sparsify.cltk_charge;
    p->cltk_beta = cfg->sparsify.cltk_beta;
    p->oktopk_variant = cfg->sparsify.oktopk_variant;
    p->oktopk_warmup = (uint64_t)cfg->sparsify.oktopk_warmup;
    p->seed = cfg->scenario.seed;
    p->kctx = e->kctx;
}

/* What one worker count needs (the most over the scenario's methods and densities). */
static deftsim_status memory_for(const deftsim_engine *e, uint32_t P, deftsim_memory_row *row)
{
    const deftsim_config *cfg = e->cfg;
    uint64_t n = e->model->numel;
    uint32_t S = tracked_workers(cfg, P);
    memset(row, 0, sizeof *row);
    row->P = P;
    /* S residuals, plus the buffer the others' accumulators are regenerated into. */
    row->residual_bytes = (uint64_t)S * n * sizeof(float) + (S < P ? n * sizeof(float) : 0);
    uint64_t best_sp = 0, best_ref = 0;
    for (size_t di = 0; di < cfg->sparsify.ndensities; di++) {
        double d = cfg->sparsify.densities[di];
        uint64_t k = k_of(d, n);
        size_t scratch = 0;
        deftsim_status st = deftsim_k_topk_scratch(e->kctx, (size_t)n, (size_t)k, &scratch);
        if (st) return st;
        uint64_t ref = (uint64_t)scratch + k * sizeof(deftsim_kidx);
        if (ref > best_ref) best_ref = ref;
        for (size_t mi = 0; mi < cfg->sparsify.nmethods; mi++) {
            deftsim_sparsifier_params p;
            fill_params(e, cfg->sparsify.methods[mi], d, P, &p);
            uint64_t b = deftsim_sparsifier_memory(&p);
            if (b > best_sp) best_sp = b;
        }
    }
    row->sparsifier_bytes = best_sp;
    /* CLT-k's low-pass filter reads g_w next to acc_w: a synthetic gradient is regenerated
     * into a buffer of its own (a trace's is read in place). */
    if (e->gen && needs_grad(cfg)) row->residual_bytes += n * sizeof(float);
    /* The average accumulator, the reference top-k, per-worker bookkeeping and the staging
     * buffers of the preparation threads. */
    row->engine_bytes = n * sizeof(float) + best_ref + (uint64_t)P * 64 +
                        (uint64_t)e->prep_threads * (GEN_WORKERS * CHUNK * sizeof(float) +
                                                     CHUNK * sizeof(double)) +
                        (n / CHUNK + 1) * sizeof(double) +
                        deftsim_timing_memory(cfg->timing.repeats, n);
    row->bytes = row->residual_bytes + row->sparsifier_bytes + row->engine_bytes;
    row->fits = row->bytes <= e->plan.budget_bytes;
    return DEFTSIM_OK;
}

static deftsim_status compute_plan(deftsim_engine *e)
{
    const deftsim_config *cfg = e->cfg;
    deftsim_memory_plan *pl = &e->plan;
    pl->ram_bytes = e->opt.ram_bytes ? e->opt.ram_bytes : deftsim_machine_ram();
    if (!pl->ram_bytes)
        return deftsim_error_set(DEFTSIM_E_RUNTIME,
                                 "[engine] memory_budget: cannot read this machine's RAM "
                                 "(/proc/meminfo, sysconf)");
    pl->budget_fraction = cfg->engine.memory_budget;
    pl->budget_bytes = (uint64_t)((double)pl->ram_bytes * pl->budget_fraction);
    pl->feedback = cfg->sparsify.error_feedback;
    pl->sampled_workers =
        pl->feedback == DEFTSIM_FEEDBACK_SAMPLED ? (uint32_t)cfg->sparsify.sampled_workers : 0;
    pl->n = e->model->numel;
    pl->ncounts = cfg->workers.ncounts;
    pl->rows = calloc(pl->ncounts, sizeof *pl->rows);
    if (!pl->rows) return deftsim_error_set(DEFTSIM_E_NOMEM, "memory plan: out of memory");
    uint32_t pmax = 0;
    for (size_t i = 0; i < pl->ncounts; i++) {
        deftsim_status st = memory_for(e, (uint32_t)cfg->workers.counts[i], &pl->rows[i]);
        if (st) return st;
        if (pl->rows[i].P > pmax) pmax = pl->rows[i].P;
    }
    /* The largest P up to the largest count that fits: memory grows with P, so a binary search
     * finds the boundary; the walk down afterwards guards against a sparsifier whose memory is
     * not monotone in P. */
    deftsim_memory_row r;
    uint32_t lo = 0, hi = pmax;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo + 1) / 2;
        deftsim_status st = memory_for(e, mid, &r);
        if (st) return st;
        if (r.fits) lo = mid;
        else hi = mid - 1;
    }
    while (lo > 0) {
        deftsim_status st = memory_for(e, lo, &r);
        if (st) return st;
        if (r.fits) break;
        lo--;
    }
    pl->largest_fit = lo;
    return DEFTSIM_OK;
}

deftsim_status deftsim_engine_check_memory(const deftsim_engine *e)
{
    const deftsim_memory_plan *pl = &e->plan;
    for (size_t i = 0; i < pl->ncounts; i++) {
        const deftsim_memory_row *r = &pl->rows[i];
        if (r->fits) continue;
        char need[32], budget[32], ram[32], fb[96], fit[96], hint[160], w[600];
        deftsim_config_where(e->cfg, "workers", "counts", w, sizeof w);
        if (pl->feedback == DEFTSIM_FEEDBACK_SAMPLED)
            snprintf(fb, sizeof fb, "error_feedback = sampled (sampled_workers = %u)",
                     pl->sampled_workers);
        else
            snprintf(fb, sizeof fb, "error_feedback = %s", deftsim_feedback_name(pl->feedback));
        if (pl->largest_fit)
            snprintf(fit, sizeof fit, "the largest P that fits is %u", pl->largest_fit);
        else
            snprintf(fit, sizeof fit, "not even P = 1 fits");
        switch (pl->feedback) {
        case DEFTSIM_FEEDBACK_FULL:
            snprintf(hint, sizeof hint,
                     "set [sparsify] error_feedback = none or sampled for larger P");
            break;
        case DEFTSIM_FEEDBACK_SAMPLED:
            snprintf(hint, sizeof hint,
                     "lower [sparsify] sampled_workers or set error_feedback = none for larger P");
            break;
        default:
            snprintf(hint, sizeof hint,
                     "lower [workers] counts or raise [engine] memory_budget");
            break;
        }
        return deftsim_error_set(
            DEFTSIM_E_INPUT,
            "%s: P = %u needs %s with %s, over the memory budget of %s (%g of %s RAM); %s; %s",
            w, r->P, human_bytes(r->bytes, need, sizeof need), fb,
            human_bytes(pl->budget_bytes, budget, sizeof budget), pl->budget_fraction,
            human_bytes(pl->ram_bytes, ram, sizeof ram), fit, hint);
    }
    return DEFTSIM_OK;
}

void deftsim_engine_print_plan(const deftsim_engine *e, FILE *f)
{
    const deftsim_memory_plan *pl = &e->plan;
    char b1[32], b2[32], b3[32], b4[32];
    fprintf(f, "model %s: n = %" PRIu64 " elements; error_feedback = %s", e->model->name, pl->n,
            deftsim_feedback_name(pl->feedback));
    if (pl->feedback == DEFTSIM_FEEDBACK_SAMPLED)
        fprintf(f, " (sampled_workers = %u)", pl->sampled_workers);
    fprintf(f, "\nmemory budget %s = %g of %s RAM\n", human_bytes(pl->budget_bytes, b1, sizeof b1),
            pl->budget_fraction, human_bytes(pl->ram_bytes, b2, sizeof b2));
    fprintf(f, "%8s %12s %12s %12s %12s  %s\n", "P", "total", "residuals", "sparsifier",
            "engine", "fits");
    for (size_t i = 0; i < pl->ncounts; i++) {
        const deftsim_memory_row *r = &pl->rows[i];
        fprintf(f, "%8u %12s %12s %12s %12s  %s\n", r->P, human_bytes(r->bytes, b1, sizeof b1),
                human_bytes(r->residual_bytes, b2, sizeof b2),
                human_bytes(r->sparsifier_bytes, b3, sizeof b3),
                human_bytes(r->engine_bytes, b4, sizeof b4), r->fits ? "yes" : "no");
    }
    if (pl->largest_fit)
        fprintf(f, "largest P that fits: %u\n", pl->largest_fit);
    else
        fprintf(f, "not even P = 1 fits\n");
}

/* The kernel backend of [device]: "cpu", or for kind = cuda "cuda-staged" (the sparsifiers
 * keep their buffers in host memory; that backend copies each kernel call's arrays to the
 * device, runs the operation there and copies the results back, and the timed phases count
 * the device time of the operations, not the copies: docs/KERNELS_CUDA.md). Refuses kind =
 * cuda with the reason when this build or this machine cannot run it: an input error (exit
 * 2), since the user fixes it by setting kind = cpu. */
static deftsim_status device_check(const deftsim_config *cfg, const char **backend)
{
    *backend = "cpu";
    if (cfg->device.kind != DEFTSIM_DEVICE_CUDA) return DEFTSIM_OK;
    int compiled = 0;
    char names[128] = "", w[600];
    deftsim_config_where(cfg, "device", "kind", w, sizeof w);
    for (size_t i = 0, o = 0; i < deftsim_kernels_backend_count() && o < sizeof names; i++) {
        const char *b = deftsim_kernels_backend_name(i);
        if (strcmp(b, "cuda-staged") == 0) compiled = 1;
        o += (size_t)snprintf(names + o, sizeof names - o, "%s%s", i ? ", " : "", b);
    }
    if (!compiled)
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "%s = cuda: this build of deftsim has no CUDA kernel "
                                 "backend (its backends: %s); set kind = cpu",
                                 w, names);
    const char *why = deftsim_kernels_backend_unavailable("cuda-staged");
    if (why) /* no device, no driver, or the runtime's own error */
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "%s = cuda: no usable GPU was found: %s; set kind = cpu", w,
                                 why);
    *backend = "cuda-staged";
    return DEFTSIM_OK;
}

/* [device] kind = profile: loads the profile and puts its cost model on the kernel context,
 * whose modelled clock then times every compute phase (src/sp_internal.h, sp_now). */
static deftsim_status profile_open(deftsim_engine *e)
{
    if (e->cfg->device.kind != DEFTSIM_DEVICE_PROFILE) return DEFTSIM_OK;
    if (!(e->profile = malloc(sizeof *e->profile)))
        return deftsim_error_set(DEFTSIM_E_NOMEM, "engine: out of memory");
    deftsim_status st = deftsim_profile_load(e->cfg->device.profile, e->profile);
    if (st) {
        char w[600];
        deftsim_config_where(e->cfg, "device", "profile", w, sizeof w);
        return deftsim_error_wrap(st, "%s", w);
    }
    deftsim_kctx_set_cost(e->kctx, deftsim_profile_cost, e->profile);
    return DEFTSIM_OK;
}

static deftsim_status open_source(deftsim_engine *e)
{
    const deftsim_config *cfg = e->cfg;
    deftsim_status st;
    /* A list of models or traces is a sweep over them (deftsim sweep); a run takes one. */
    const char *one = cfg->gradients.source == DEFTSIM_SOURCE_TRACE ? cfg->gradients.trace
                                                                      : cfg->gradients.model;
    if (one && strchr(one, ','))
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "[gradients] %s: '%s' is a list; deftsim run takes one (deftsim "
                                 "sweep runs each in turn)",
                                 cfg->gradients.source == DEFTSIM_SOURCE_TRACE ? "trace" : "model",
                                 one);
    e->iterations = (size_t)cfg->scenario.iterations;
    e->source_iter = calloc(e->iterations, sizeof *e->source_iter);
    if (!e->source_iter) return deftsim_error_set(DEFTSIM_E_NOMEM, "engine: out of memory");
    if (cfg->gradients.source == DEFTSIM_SOURCE_TRACE) {
        if ((st = deftsim_trace_open(cfg->gradients.trace, &e->trace))) return st;
        e->model = deftsim_trace_model(e->trace);
        e->trace_workers = deftsim_trace_workers(e->trace);
        char w[600];
        for (size_t i = 0; i < cfg->workers.ncounts; i++)
            if ((uint64_t)cfg->workers.counts[i] > e->trace_workers) {
                deftsim_config_where(cfg, "workers", "counts", w, sizeof w);
                return deftsim_error_set(DEFTSIM_E_INPUT,
                                         "%s: P = %" PRId64 " exceeds the %u workers of trace %s; "
                                         "use counts up to %u",
                                         w, cfg->workers.counts[i], e->trace_workers,
                                         cfg->gradients.trace, e->trace_workers);
            }
        size_t have = deftsim_trace_iterations(e->trace);
        if (e->iterations > have) {
            deftsim_config_where(cfg, "scenario", "iterations", w, sizeof w);
            return deftsim_error_set(DEFTSIM_E_INPUT, "%s: %zu, but trace %s holds %zu iteration%s",
                                     w, e->iterations, cfg->gradients.trace, have,
                                     have == 1 ? "" : "s");
        }
        for (size_t i = 0; i < e->iterations; i++)
            e->source_iter[i] = deftsim_trace_iteration_id(e->trace, i);
        e->finite_ok = calloc(e->iterations * e->trace_workers, 1);
        if (!e->finite_ok) return deftsim_error_set(DEFTSIM_E_NOMEM, "engine: out of memory");
    } else {
        if ((st = deftsim_model_load(cfg->gradients.model, &e->model_owned))) {
            char w[600];
            deftsim_config_where(cfg, "gradients", "model", w, sizeof w);
            return deftsim_error_wrap(st, "%s", w);
        }
        e->model = e->model_owned;
        deftsim_gen_params gp;
        deftsim_gen_params_default(&gp);
        gp.seed = cfg->scenario.seed;
        gp.scale_decades = cfg->synthetic.scale_decades;
        gp.signal = cfg->synthetic.signal;
        gp.tail = cfg->synthetic.tail;
        gp.drift = cfg->synthetic.drift;
        gp.bias_shift = cfg->synthetic.bias_shift;
        if ((st = deftsim_gen_new(e->model, &gp, &e->gen))) return st;
        for (size_t i = 0; i < e->iterations; i++) e->source_iter[i] = i;
    }
    if (e->model->numel == 0)
        return deftsim_error_set(DEFTSIM_E_INPUT, "model %s has no elements", e->model->name);
    if (e->model->numel > DEFTSIM_KIDX_MAX_N)
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "model %s: %" PRIu64 " elements exceed the kernels' index range "
                                 "(%zu)",
                                 e->model->name, e->model->numel, DEFTSIM_KIDX_MAX_N);
    return DEFTSIM_OK;
}

void deftsim_engine_free(deftsim_engine *e)
{
    if (!e) return;
    free(e->plan.rows);
    for (size_t i = 0; i < e->npool; i++) big_free(e->pool[i], (size_t)e->model->numel * sizeof(float));
    free(e->pool);
    free(e->stage);
    free(e->sums);
    if (e->kctx) deftsim_kctx_free(e->kctx);
    free(e->profile);
    if (e->gen) deftsim_gen_free(e->gen);
    if (e->trace) deftsim_trace_close(e->trace);
    deftsim_model_free(e->model_owned);
    free(e->finite_ok);
    free(e->source_iter);
    free(e->dump_dir);
    deftsim_platform_record_free(&e->platform);
    deftsim_config_free(e->cfg);
    free(e);
}

deftsim_status deftsim_engine_new(const deftsim_config *cfg, const deftsim_run_options *opt,
                                  deftsim_engine **out)
{
    *out = NULL;
    deftsim_engine *e = calloc(1, sizeof *e);
    if (!e) return deftsim_error_set(DEFTSIM_E_NOMEM, "engine: out of memory");
    deftsim_status st;
    if (opt) e->opt = *opt;
    else deftsim_run_options_default(&e->opt);
    if ((st = deftsim_config_clone(cfg, &e->cfg))) goto fail;
    if ((st = deftsim_config_check(e->cfg))) goto fail;
    if ((st = deftsim_platform_record_read(e->cfg, &e->platform))) goto fail;
    if (e->opt.dump_dir && !(e->dump_dir = strdup(e->opt.dump_dir))) {
        st = deftsim_error_set(DEFTSIM_E_NOMEM, "engine: out of memory");
        goto fail;
    }
    e->opt.dump_dir = e->dump_dir;
    const char *backend;
    if ((st = device_check(e->cfg, &backend))) goto fail;
    if ((st = open_source(e))) goto fail;
    if ((st = deftsim_kctx_new(&e->kctx, backend, (unsigned)e->cfg->device.threads))) {
        st = deftsim_error_wrap(st, "[device] threads = %d", e->cfg->device.threads);
        goto fail;
    }
    if ((st = profile_open(e))) goto fail;
    e->prep_threads = e->opt.prep_threads ? e->opt.prep_threads : online_cpus();
    if (e->prep_threads > PAR_MAX_THREADS) e->prep_threads = PAR_MAX_THREADS;
    if ((st = compute_plan(e))) goto fail;
    *out = e;
    return DEFTSIM_OK;
fail:
    deftsim_engine_free(e);
    return st;
}

/* ---- one point: accumulators ---------------------------------------------------------------- */

typedef struct {
    deftsim_engine *e;
    uint32_t P;
    uint32_t S;               /* workers 0 .. S-1 keep residuals */
    uint64_t n;
    float **res;              /* S residual buffers (acc_w after preparation) */
    float *regen;             /* n floats: the accumulator of a worker without a residual */
    uint32_t regen_cached;    /* the worker whose accumulator regen holds (UINT32_MAX: none) */
    float *gradbuf;           /* n floats: g_w for CLT-k's filter (synthetic source) */
    float *avg;               /* n floats: (1/P) sum_w acc_w */
    double *chunk_norm2;      /* per chunk: sum of avg^2, summed in chunk order afterwards */
    double norm2;
    size_t it;                /* iteration index */
    int fresh;                /* first iteration of the point: residuals are zero */
    uint64_t src_iter;        /* the generator's iteration or the trace's id */
    const float **tgrad;      /* trace: P gradient pointers of the iteration */
    uint32_t regen_worker;    /* the worker being regenerated */
    float *regen_out;         /* into this buffer */
    deftsim_status get_status;
    char get_msg[1024];
    /* [sparsify] deft_norms = fused, for a sparsifier that reads fragment norms: the
     * accumulators are formed piece by piece, one piece per norm block of every fragment, with
     * deftsim_k_accumulate, whose sums give every worker's fragment norms with seg_norms' bits
     * (served by the provider's norms()). nseg = 0: the plain chunked pass. */
    const deftsim_kseg *nsegs;
    size_t nseg;
    size_t npieces;
    uint64_t *piece_off;
    uint32_t *piece_len;
    double *part;             /* (S + 1) x npieces: each piece's sum of squares */
    double *wnorms;           /* (S + 1) x nseg; row S: the regenerated worker */
    deftsim_kctx **pctx;      /* one single-thread cpu context per preparation thread */
    unsigned npctx;
    char *pscratch;
    size_t pscratch_each;
} point_state;

/* Chunk c of the preparation pass: acc_w = residual_w + g_w for tracked workers, and the
 * average of every worker's accumulator, summed in worker order in double. */
static deftsim_status prepare_chunk(void *ctx, size_t c, unsigned thread)
{
    point_state *ps = ctx;
    deftsim_engine *e = ps->e;
    uint64_t off = (uint64_t)c * CHUNK;
    size_t cnt = (size_t)(ps->n - off < CHUNK ? ps->n - off : CHUNK);
    double *sum = e->sums + (size_t)thread * CHUNK;
    float *stage = e->stage + (size_t)thread * GEN_WORKERS * CHUNK;
    memset(sum, 0, cnt * sizeof *sum);
    for (uint32_t w0 = 0; w0 < ps->P; w0 += GEN_WORKERS) {
        uint32_t nw = ps->P - w0 < GEN_WORKERS ? ps->P - w0 : GEN_WORKERS;
        const float *g[GEN_WORKERS];
        if (e->gen) {
            float *outs[GEN_WORKERS];
            for (uint32_t j = 0; j < nw; j++) outs[j] = stage + (size_t)j * CHUNK;
            deftsim_status st = deftsim_gen_fill_workers(e->gen, ps->src_iter, w0, nw, off, cnt, outs);
            if (st) return st;
            for (uint32_t j = 0; j < nw; j++) g[j] = outs[j];
        } else {
            for (uint32_t j = 0; j < nw; j++) g[j] = ps->tgrad[w0 + j] + off;
        }
        for (uint32_t j = 0; j < nw; j++) {
            uint32_t w = w0 + j;
            const float *gw = g[j];
            if (w < ps->S && ps->fresh) {
                float *r = ps->res[w] + off;
                for (size_t i = 0; i < cnt; i++) {
                    r[i] = gw[i];
                    sum[i] += (double)r[i];
                }
            } else if (w < ps->S) {
                float *r = ps->res[w] + off;
                for (size_t i = 0; i < cnt; i++) {
                    r[i] += gw[i];
                    sum[i] += (double)r[i];
                }
            } else {
                for (size_t i = 0; i < cnt; i++) sum[i] += (double)gw[i];
            }
        }
    }
    float *a = ps->avg + off;
    double inv = 1.0 / (double)ps->P, nn = 0;
    for (size_t i = 0; i < cnt; i++) {
        a[i] = (float)(sum[i] * inv);
        nn += (double)a[i] * (double)a[i];
    }
    ps->chunk_norm2[c] = nn;
    return DEFTSIM_OK;
}

static deftsim_status check_finite_task(void *ctx, size_t w, unsigned thread)
{
    (void)thread;
    point_state *ps = ctx;
    deftsim_engine *e = ps->e;
    unsigned char *ok = &e->finite_ok[ps->it * e->trace_workers + w];
    if (*ok) return DEFTSIM_OK;
    deftsim_status st = deftsim_trace_check_finite(e->trace, ps->it, (uint32_t)w);
    if (st) return st;
    *ok = 1;
    return DEFTSIM_OK;
}

/* ---- deft_norms = fused: the accumulate pass with the fragment norms ------------------------ */

/* Piece c of the fused pass: prepare_chunk's work on one norm block of one fragment, the
 * accumulator formed by deftsim_k_accumulate (which also returns the block's sum of squares). */
static deftsim_status prepare_piece(void *ctx, size_t c, unsigned thread)
{
    point_state *ps = ctx;
    deftsim_engine *e = ps->e;
    uint64_t off = ps->piece_off[c];
    size_t cnt = ps->piece_len[c];
    double *sum = e->sums + (size_t)thread * CHUNK;
    float *stage = e->stage + (size_t)thread * GEN_WORKERS * CHUNK;
    deftsim_kctx *kc = ps->pctx[thread];
    void *scr = ps->pscratch + (size_t)thread * ps->pscratch_each;
    const deftsim_kseg seg = {0, cnt, 0};
    const int mode = ps->fresh ? DEFTSIM_KACC_COPY : DEFTSIM_KACC_ADD;
    memset(sum, 0, cnt * sizeof *sum);
    for (uint32_t w0 = 0; w0 < ps->P; w0 += GEN_WORKERS) {
        uint32_t nw = ps->P - w0 < GEN_WORKERS ? ps->P - w0 : GEN_WORKERS;
        const float *g[GEN_WORKERS];
        if (e->gen) {
            float *outs[GEN_WORKERS];
            for (uint32_t j = 0; j < nw; j++) outs[j] = stage + (size_t)j * CHUNK;
            deftsim_status st = deftsim_gen_fill_workers(e->gen, ps->src_iter, w0, nw, off, cnt, outs);
            if (st) return st;
            for (uint32_t j = 0; j < nw; j++) g[j] = outs[j];
        } else {
            for (uint32_t j = 0; j < nw; j++) g[j] = ps->tgrad[w0 + j] + off;
        }
        for (uint32_t j = 0; j < nw; j++) {
            uint32_t w = w0 + j;
            const float *gw = g[j];
            if (w < ps->S) {
                float *r = ps->res[w] + off;
                deftsim_status st = deftsim_k_accumulate(kc, r, gw, cnt, mode, &seg, 1,
                                                         &ps->part[(size_t)w * ps->npieces + c],
                                                         scr, ps->pscratch_each);
                if (st) return st;
                for (size_t i = 0; i < cnt; i++) sum[i] += (double)r[i];
            } else {
                for (size_t i = 0; i < cnt; i++) sum[i] += (double)gw[i];
            }
        }
    }
    float *a = ps->avg + off;
    double inv = 1.0 / (double)ps->P;
    for (size_t i = 0; i < cnt; i++) a[i] = (float)(sum[i] * inv);
    return DEFTSIM_OK;
}

/* prepare_chunk's squared norm of the average, alone. */
static deftsim_status avg_norm2_chunk(void *ctx, size_t c, unsigned thread)
{
    (void)thread;
    point_state *ps = ctx;
    uint64_t off = (uint64_t)c * CHUNK;
    size_t cnt = (size_t)(ps->n - off < CHUNK ? ps->n - off : CHUNK);
    const float *a = ps->avg + off;
    double nn = 0;
    for (size_t i = 0; i < cnt; i++) nn += (double)a[i] * (double)a[i];
    ps->chunk_norm2[c] = nn;
    return DEFTSIM_OK;
}

/* Row `row` of the piece sums into fragment norms: each fragment's blocks added in order
 * from 0.0, as seg_norms adds them. */
static void fold_norms(point_state *ps, uint32_t row)
{
    const double *p = ps->part + (size_t)row * ps->npieces;
    double *out = ps->wnorms + (size_t)row * ps->nseg;
    size_t b = 0;
    for (size_t j = 0; j < ps->nseg; j++) {
        size_t nb = (ps->nsegs[j].len + DEFTSIM_K_NORM_BLOCK - 1) / DEFTSIM_K_NORM_BLOCK;
        double s = 0.0;
        for (size_t q = 0; q < nb; q++) s += p[b++];
        out[j] = sqrt(s);
    }
}

/* The regenerated accumulator (no residual: acc = g), formed piece by piece with the copy mode
 * of the same op; its norms go to row S. */
static deftsim_status regen_piece(void *ctx, size_t c, unsigned thread)
{
    point_state *ps = ctx;
    deftsim_engine *e = ps->e;
    uint64_t off = ps->piece_off[c];
    size_t cnt = ps->piece_len[c];
    const float *g;
    if (e->gen) {
        float *stage = e->stage + (size_t)thread * GEN_WORKERS * CHUNK;
        deftsim_status st = deftsim_gen_fill(e->gen, ps->src_iter, ps->regen_worker, off, cnt, stage);
        if (st) return st;
        g = stage;
    } else {
        g = ps->tgrad[ps->regen_worker] + off;
    }
    const deftsim_kseg seg = {0, cnt, 0};
    return deftsim_k_accumulate(ps->pctx[thread], ps->regen_out + off, g, cnt, DEFTSIM_KACC_COPY,
                                &seg, 1, &ps->part[(size_t)ps->S * ps->npieces + c],
                                ps->pscratch + (size_t)thread * ps->pscratch_each,
                                ps->pscratch_each);
}

static void fused_free(point_state *ps)
{
    for (unsigned t = 0; t < ps->npctx; t++) deftsim_kctx_free(ps->pctx[t]);
    free(ps->pctx);
    free(ps->piece_off);
    free(ps->piece_len);
    free(ps->part);
    free(ps->wnorms);
    free(ps->pscratch);
}

/* Turns the fused pass on when deft_norms = fused and the sparsifier reads fragment norms of
 * fragments that tile [0, n) in order (DEFT's do); otherwise leaves nseg = 0, and the
 * sparsifier runs its own norm pass. */
static deftsim_status fused_init(point_state *ps, const deftsim_sparsifier *sp)
{
    deftsim_engine *e = ps->e;
    if (e->cfg->sparsify.deft_norms != DEFTSIM_DEFT_NORMS_FUSED) return DEFTSIM_OK;
    const deftsim_kseg *segs;
    size_t nseg;
    deftsim_sparsifier_norm_segments(sp, &segs, &nseg);
    if (!nseg) return DEFTSIM_OK;
    uint64_t pos = 0;
    size_t np = 0;
    for (size_t j = 0; j < nseg; j++) {
        if (segs[j].offset != pos) return DEFTSIM_OK;
        pos += segs[j].len;
        np += (segs[j].len + DEFTSIM_K_NORM_BLOCK - 1) / DEFTSIM_K_NORM_BLOCK;
    }
    if (pos != ps->n) return DEFTSIM_OK;
    deftsim_status st;
    size_t rows = (size_t)ps->S + 1;
    ps->piece_off = malloc(np * sizeof *ps->piece_off);
    ps->piece_len = malloc(np * sizeof *ps->piece_len);
    ps->part = calloc(rows * np, sizeof *ps->part);
    ps->wnorms = calloc(rows * nseg, sizeof *ps->wnorms);
    ps->pctx = calloc(e->prep_threads, sizeof *ps->pctx);
    if (!ps->piece_off || !ps->piece_len || !ps->part || !ps->wnorms || !ps->pctx)
        return deftsim_error_set(DEFTSIM_E_NOMEM, "engine: out of memory for the fused norms");
    size_t c = 0;
    for (size_t j = 0; j < nseg; j++)
        for (size_t q = 0; q * DEFTSIM_K_NORM_BLOCK < segs[j].len; q++) {
            size_t left = segs[j].len - q * DEFTSIM_K_NORM_BLOCK;
            ps->piece_off[c] = segs[j].offset + q * DEFTSIM_K_NORM_BLOCK;
            ps->piece_len[c++] = (uint32_t)(left < DEFTSIM_K_NORM_BLOCK ? left : DEFTSIM_K_NORM_BLOCK);
        }
    for (unsigned t = 0; t < e->prep_threads; t++) {
        if ((st = deftsim_kctx_new(&ps->pctx[t], "cpu", 1))) return st;
        ps->npctx = t + 1;
    }
    const deftsim_kseg one = {0, DEFTSIM_K_NORM_BLOCK, 0};
    size_t sb;
    if ((st = deftsim_k_accumulate_scratch(ps->pctx[0], &one, 1, &sb))) return st;
    ps->pscratch_each = (sb + 63) / 64 * 64;
    ps->pscratch = malloc(ps->pscratch_each * e->prep_threads + 1);
    if (!ps->pscratch)
        return deftsim_error_set(DEFTSIM_E_NOMEM, "engine: out of memory for the fused norms");
    ps->nsegs = segs;
    ps->nseg = nseg;
    ps->npieces = np;
    return DEFTSIM_OK;
}

/* The provider's norms(): a tracked worker's, or the regenerated worker's while it is cached. */
static const double *acc_norms(void *ctx, uint32_t w)
{
    point_state *ps = ctx;
    if (!ps->nseg || w >= ps->P) return NULL;
    if (w < ps->S) return ps->wnorms + (size_t)w * ps->nseg;
    if (ps->regen_cached == w) return ps->wnorms + (size_t)ps->S * ps->nseg;
    return NULL;
}

/* Runs before each step: every tracked residual takes its gradient, the average accumulator
 * and its squared norm are computed. A trace's gradients are checked finite first (once per
 * iteration and worker for the whole run). */
static deftsim_status prepare_iteration(point_state *ps)
{
    deftsim_engine *e = ps->e;
    deftsim_status st;
    if (e->trace) {
        for (uint32_t w = 0; w < ps->P; w++)
            if ((st = deftsim_trace_gradient(e->trace, ps->it, w, &ps->tgrad[w]))) return st;
        if ((st = par_run(e->prep_threads, ps->P, check_finite_task, ps))) return st;
    }
    size_t nchunks = (size_t)((ps->n + CHUNK - 1) / CHUNK);
    if (ps->nseg) {
        if ((st = par_run(e->prep_threads, ps->npieces, prepare_piece, ps))) return st;
        for (uint32_t w = 0; w < ps->S; w++) fold_norms(ps, w);
        /* The average's squared norm in the plain pass's chunks, so its bits do not depend
         * on deft_norms. */
        if ((st = par_run(e->prep_threads, nchunks, avg_norm2_chunk, ps))) return st;
    } else if ((st = par_run(e->prep_threads, nchunks, prepare_chunk, ps))) {
        return st;
    }
    double nn = 0;
    for (size_t c = 0; c < nchunks; c++) nn += ps->chunk_norm2[c];
    ps->norm2 = nn;
    ps->regen_cached = UINT32_MAX;
    return DEFTSIM_OK;
}

static deftsim_status regen_chunk(void *ctx, size_t c, unsigned thread)
{
    (void)thread;
    point_state *ps = ctx;
    uint64_t off = (uint64_t)c * REGEN_CHUNK;
    uint64_t cnt = ps->n - off < REGEN_CHUNK ? ps->n - off : REGEN_CHUNK;
    if (ps->e->gen)
        return deftsim_gen_fill(ps->e->gen, ps->src_iter, ps->regen_worker, off, cnt,
                                ps->regen_out + off);
    memcpy(ps->regen_out + off, ps->tgrad[ps->regen_worker] + off, (size_t)cnt * sizeof(float));
    return DEFTSIM_OK;
}

/* Worker w's gradient of this iteration into out, on the preparation threads. */
static deftsim_status regenerate(point_state *ps, uint32_t w, float *out)
{
    ps->regen_worker = w;
    ps->regen_out = out;
    size_t nchunks = (size_t)((ps->n + REGEN_CHUNK - 1) / REGEN_CHUNK);
    return par_run(ps->e->prep_threads, nchunks, regen_chunk, ps);
}

/* get(), release() and grad() cannot return a status: the first failure is kept for the
 * engine to raise after the step. */
static void provider_fail(point_state *ps, deftsim_status st)
{
    if (ps->get_status) return;
    ps->get_status = st;
    snprintf(ps->get_msg, sizeof ps->get_msg, "%s", deftsim_error_message());
}

/* The provider: a tracked worker's residual buffer (prepared before the step), else its
 * gradient regenerated (or copied from the trace) into the shared buffer. The sparsifier does
 * not write an accumulator before its last visit and releases it after, so a repeated get()
 * of the worker in the buffer returns it without regenerating. */
static float *acc_get(void *ctx, uint32_t w)
{
    point_state *ps = ctx;
    if (w >= ps->P) {
        provider_fail(ps, deftsim_error_set(DEFTSIM_E_INTERNAL,
                                            "accumulator provider: worker %u requested, P = %u",
                                            w, ps->P));
        return NULL;
    }
    if (w < ps->S) return ps->res[w];
    if (ps->regen_cached == w) return ps->regen;
    ps->regen_cached = UINT32_MAX;
    deftsim_status st;
    if (ps->nseg) {
        ps->regen_worker = w;
        ps->regen_out = ps->regen;
        st = par_run(ps->e->prep_threads, ps->npieces, regen_piece, ps);
        if (!st) fold_norms(ps, ps->S);
    } else {
        st = regenerate(ps, w, ps->regen);
    }
    if (st) {
        provider_fail(ps, st);
        return NULL;
    }
    ps->regen_cached = w;
    return ps->regen;
}

/* The residual is already where it belongs (a tracked buffer, or dropped with the shared
 * one); only the cache of the shared buffer ends. */
static deftsim_status acc_release(void *ctx, uint32_t w)
{
    point_state *ps = ctx;
    if (ps->regen_cached == w) ps->regen_cached = UINT32_MAX;
    return DEFTSIM_OK;
}

static const float *acc_grad(void *ctx, uint32_t w)
{
    point_state *ps = ctx;
    if (w >= ps->P) {
        provider_fail(ps, deftsim_error_set(DEFTSIM_E_INTERNAL,
                                            "gradient provider: worker %u requested, P = %u", w,
                                            ps->P));
        return NULL;
    }
    if (ps->e->trace) return ps->tgrad[w];
    deftsim_status st = regenerate(ps, w, ps->gradbuf);
    if (st) {
        provider_fail(ps, st);
        return NULL;
    }
    return ps->gradbuf;
}

static void fused_free(point_state *ps);

static void point_state_free(point_state *ps)
{
    fused_free(ps);
    free(ps->res);
    free(ps->chunk_norm2);
    free(ps->tgrad);
    memset(ps, 0, sizeof *ps);
}

/* Buffer i of the pool, mapped on first use. */
static float *pool_get(deftsim_engine *e, size_t i)
{
    if (i >= e->npool) {
        float **p = realloc(e->pool, (i + 1) * sizeof *p);
        if (!p) return NULL;
        e->pool = p;
        while (e->npool <= i) e->pool[e->npool++] = NULL;
    }
    if (!e->pool[i]) e->pool[i] = big_alloc((size_t)e->model->numel * sizeof(float));
    return e->pool[i];
}

static deftsim_status point_state_init(point_state *ps, deftsim_engine *e, uint32_t P)
{
    memset(ps, 0, sizeof *ps);
    ps->e = e;
    ps->P = P;
    ps->n = e->model->numel;
    ps->S = tracked_workers(e->cfg, P);
    size_t n = (size_t)ps->n;
    size_t nchunks = (n + CHUNK - 1) / CHUNK;
    ps->res = calloc(ps->S ? ps->S : 1, sizeof *ps->res);
    ps->chunk_norm2 = calloc(nchunks, sizeof(double));
    ps->tgrad = calloc(P, sizeof *ps->tgrad);
    if (!ps->res || !ps->chunk_norm2 || !ps->tgrad) goto nomem;
    size_t next = 0;
    if (!(ps->avg = pool_get(e, next++))) goto nomem;
    for (uint32_t w = 0; w < ps->S; w++)
        if (!(ps->res[w] = pool_get(e, next++))) goto nomem;
    if (ps->S < P && !(ps->regen = pool_get(e, next++))) goto nomem;
    if (e->gen && needs_grad(e->cfg) && !(ps->gradbuf = pool_get(e, next++))) goto nomem;
    ps->regen_cached = UINT32_MAX;
    ps->fresh = 1;
    return DEFTSIM_OK;
nomem:;
    uint32_t S = ps->S;
    point_state_free(ps);
    return deftsim_error_set(DEFTSIM_E_NOMEM,
                             "P = %u: out of memory for the accumulators (%u residuals of %zu "
                             "floats); lower [engine] memory_budget to leave room for the system",
                             P, S, n);
}

/* ---- one point: rows ------------------------------------------------------------------------ */

typedef struct {
    const char *method;
    double density;
    uint64_t k;
    uint32_t P;
    char dens_text[40];
    char prefix[1024];  /* scenario .. P, formatted once (names are at most 100 and 255 chars) */
    char fb_cols[64];   /* error_feedback,sampled_workers */
    char run_cols[256]; /* wire,backend,threads,seed */
} point_desc;

/* Per-worker numbers of one step. */
typedef struct {
    double *select_seconds;   /* P: the selection phases */
    double *worker_seconds;   /* P: every phase */
    uint64_t *coll_sent;      /* collectives x P */
    uint64_t *coll_recv;
    size_t *coll_step;        /* schedule index of each collective */
    size_t ncoll, cap_coll;
    double imbalance_seconds, imbalance_cost;
    double captured, topk, ratio;
    deftsim_kidx *ref_idx;    /* the exact top-k of the average accumulator */
    void *ref_scratch;
    size_t ref_scratch_bytes;
} step_metrics;

static void step_metrics_free(step_metrics *m)
{
    free(m->select_seconds);
    free(m->worker_seconds);
    free(m->coll_sent);
    free(m->coll_recv);
    free(m->coll_step);
    free(m->ref_idx);
    free(m->ref_scratch);
}

/* max / mean; NaN (an empty cell) when the mean is not positive. */
static double max_over_mean(const double *v, size_t n)
{
    double mx = 0, s = 0;
    for (size_t i = 0; i < n; i++) {
        s += v[i];
        if (v[i] > mx) mx = v[i];
    }
    if (!(s > 0)) return NAN;
    return mx / (s / (double)n);
}

static int cmp_kidx(const void *a, const void *b)
{
    deftsim_kidx x = *(const deftsim_kidx *)a, y = *(const deftsim_kidx *)b;
    return (x > y) - (x < y);
}

static deftsim_status compute_metrics(point_state *ps, const point_desc *pd,
                                      const deftsim_step_result *r, step_metrics *m)
{
    deftsim_engine *e = ps->e;
    uint32_t P = ps->P;
    if (!m->select_seconds) {
        m->select_seconds = malloc(P * sizeof(double));
        m->worker_seconds = malloc(P * sizeof(double));
        if (!m->select_seconds || !m->worker_seconds)
            return deftsim_error_set(DEFTSIM_E_NOMEM, "engine: out of memory");
    }
    for (uint32_t w = 0; w < P; w++) {
        double sel = 0, all = 0;
        for (size_t ph = 0; ph < r->nphases; ph++) {
            double v = r->phase_seconds[(size_t)w * r->nphases + ph];
            all += v;
            if (r->phase_selection[ph]) sel += v;
        }
        m->select_seconds[w] = sel;
        m->worker_seconds[w] = all;
    }
    m->imbalance_seconds = max_over_mean(m->select_seconds, P);
    m->imbalance_cost = max_over_mean(r->cost, P);

    /* Bytes per collective and worker under the reference algorithms. */
    size_t ncoll = 0;
    for (size_t i = 0; i < r->schedule.nsteps; i++)
        if (r->schedule.steps[i].kind != DEFTSIM_STEP_COMPUTE) ncoll++;
    if (ncoll > m->cap_coll) {
        free(m->coll_sent);
        free(m->coll_recv);
        free(m->coll_step);
        m->coll_sent = malloc(ncoll * P * sizeof(uint64_t));
        m->coll_recv = malloc(ncoll * P * sizeof(uint64_t));
        m->coll_step = malloc(ncoll * sizeof(size_t));
        m->cap_coll = ncoll;
        if (!m->coll_sent || !m->coll_recv || !m->coll_step) {
            m->cap_coll = 0;
            return deftsim_error_set(DEFTSIM_E_NOMEM, "engine: out of memory");
        }
    }
    m->ncoll = ncoll;
    if (ncoll) {
        memset(m->coll_sent, 0, ncoll * P * sizeof(uint64_t));
        memset(m->coll_recv, 0, ncoll * P * sizeof(uint64_t));
    }
    for (size_t i = 0, c = 0; i < r->schedule.nsteps; i++) {
        const deftsim_step *st = &r->schedule.steps[i];
        if (st->kind == DEFTSIM_STEP_COMPUTE) continue;
        m->coll_step[c] = i;
        deftsim_step_traffic(st, P, r->value_wire_bytes, m->coll_sent + c * P,
                             m->coll_recv + c * P);
        c++;
    }

    /* Captured norm: the aggregate's indices against the exact top-k of the average, both
     * summed in double over the same float values. */
    const float *a = ps->avg;
    double cap = 0;
    for (uint64_t i = 0; i < r->nnz; i++) {
        double v = a[r->agg_index[i]];
        cap += v * v;
    }
    size_t need = 0;
    deftsim_status st = deftsim_k_topk_scratch(e->kctx, (size_t)ps->n, (size_t)pd->k, &need);
    if (st) return st;
    if (need > m->ref_scratch_bytes) {
        free(m->ref_scratch);
        if (!(m->ref_scratch = malloc(need))) {
            m->ref_scratch_bytes = 0;
            return deftsim_error_set(DEFTSIM_E_NOMEM, "engine: out of memory");
        }
        m->ref_scratch_bytes = need;
    }
    if (!m->ref_idx && !(m->ref_idx = malloc((size_t)pd->k * sizeof(deftsim_kidx))))
        return deftsim_error_set(DEFTSIM_E_NOMEM, "engine: out of memory");
    if ((st = deftsim_k_topk(e->kctx, a, (size_t)ps->n, (size_t)pd->k, m->ref_idx, m->ref_scratch,
                             m->ref_scratch_bytes)))
        return deftsim_error_wrap(st, "reference top-k of the average accumulator");
    /* Summed in index order, as the aggregate's (sorted) indices are: when both sets are equal
     * the two fractions are equal to the last bit. */
    qsort(m->ref_idx, (size_t)pd->k, sizeof *m->ref_idx, cmp_kidx);
    double top = 0;
    for (uint64_t i = 0; i < pd->k; i++) {
        double v = a[m->ref_idx[i]];
        top += v * v;
    }
    if (ps->norm2 > 0) {
        m->captured = cap / ps->norm2;
        m->topk = top / ps->norm2;
    } else {
        m->captured = m->topk = NAN;
    }
    m->ratio = m->topk > 0 ? m->captured / m->topk : NAN;
    return DEFTSIM_OK;
}

static const char *dbl(char *buf, double v) { return deftsim_csv_double(buf, 40, v); }

/* The rows of one iteration: per worker, its phases, then its share of every collective,
 * with the worker's and the iteration's columns repeated. */
/* A point's rows before the network simulation's columns are appended: the text, in an
 * unlinked temporary file next to the point's file (a point of DGC at P = 4096 has close to a
 * million rows: not memory the plan counts), and where each row ends (after its newline). */
typedef struct {
    FILE *f;
    char *line;              /* one row read back */
    size_t line_cap;
    uint64_t *end;
    size_t n, cap;
    int failed;              /* out of memory recording a row */
    int werr;                /* errno of the first failed write, 0 if none */
    const char *csv_path;    /* the point's file, named in messages */
} row_buffer;

static deftsim_status row_buffer_open(row_buffer *rb, const char *csv_path)
{
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.rows.XXXXXX", csv_path);
    int fd = mkstemp(tmp);
    if (fd < 0) return deftsim_error_set(DEFTSIM_E_IO, "%s: cannot create: %s", tmp, strerror(errno));
    unlink(tmp); /* gone with the process, whatever happens */
    rb->csv_path = csv_path;
    if (!(rb->f = fdopen(fd, "w+"))) {
        close(fd);
        return deftsim_error_set(DEFTSIM_E_IO, "%s: cannot open: %s", tmp, strerror(errno));
    }
    return DEFTSIM_OK;
}

static void row_done(row_buffer *rb)
{
    if (rb->n == rb->cap) {
        size_t nc = rb->cap ? 2 * rb->cap : 1024;
        uint64_t *ne = realloc(rb->end, nc * sizeof *ne);
        if (!ne) {
            rb->failed = 1;
            return;
        }
        rb->end = ne;
        rb->cap = nc;
    }
    if (!rb->werr && ferror(rb->f)) rb->werr = errno ? errno : EIO;
    long at = ftell(rb->f);
    if (at < 0) rb->failed = 1;
    rb->end[rb->n++] = at < 0 ? 0 : (uint64_t)at;
}

/* A failed write of the buffered rows (a full disk, a file size limit), naming the point's
 * file: the buffer is an unlinked file beside it. */
static deftsim_status row_buffer_error(const row_buffer *rb, int err)
{
    return deftsim_error_set(DEFTSIM_E_IO,
                             "%s: write failed: %s (buffering the point's rows in a temporary "
                             "file beside it)",
                             rb->csv_path, strerror(err ? err : EIO));
}

static void row_buffer_free(row_buffer *rb)
{
    if (rb->f) fclose(rb->f);
    free(rb->line);
    free(rb->end);
    memset(rb, 0, sizeof *rb);
}

static uint64_t write_rows(row_buffer *rb, const point_state *ps, const point_desc *pd,
                           const deftsim_step_result *r, const step_metrics *m, double prep_s,
                           double step_s, const deftsim_timing *tm)
{
    FILE *f = rb->f;
    uint32_t P = ps->P;
    char b[23][40];
    const double *phmin = deftsim_timing_phase_min(tm), *phmax = deftsim_timing_phase_max(tm);
    char itcols[1024];
    /* MiCRO and ExDyna: K / k, the threshold, the index allgather's padding m P / K - 1. */
    double cr = NAN, pad = NAN;
    if (r->count_control) {
        cr = (double)r->count_total / (double)r->k;
        if (r->count_total)
            pad = (double)r->count_max * (double)P / (double)r->count_total - 1.0;
    }
    snprintf(itcols, sizeof itcols,
             "%u,%" PRIu64 ",%" PRIu64 ",%s,%s,%" PRIu64 ",%s,%s,%s,%s,%s,%s,%s,%" PRIu64
             ",%s,%s,%s,%s,%s,%s,%s,%s,%s",
             r->leader, r->nnz, r->common_count, dbl(b[0], r->buildup), dbl(b[1], r->density_actual),
             r->kj_total, dbl(b[2], m->imbalance_seconds), dbl(b[3], m->imbalance_cost),
             dbl(b[4], m->captured), dbl(b[5], m->topk), dbl(b[6], m->ratio),
             dbl(b[7], r->lost_mass), dbl(b[8], r->lost_abs_mass), r->lost_entries,
             dbl(b[9], ps->norm2), dbl(b[10], prep_s), dbl(b[11], step_s), dbl(b[16], cr),
             dbl(b[17], r->threshold), dbl(b[18], pad), dbl(b[19], r->oktopk_threshold_local),
             dbl(b[20], r->oktopk_threshold_global), dbl(b[21], r->oktopk_region_balance));
    char tail[512];
    snprintf(tail, sizeof tail, "%s,%u,%u,%s", pd->fb_cols, r->index_wire_bytes,
             r->value_wire_bytes, pd->run_cols);
    uint64_t rows = 0;
    for (uint32_t w = 0; w < P; w++) {
        char wcols[512];
        snprintf(wcols, sizeof wcols, "%s,%s,%s,%s,%s,%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%d",
                 dbl(b[12], m->select_seconds[w]),
                 dbl(b[16], deftsim_timing_select_min(tm)[w]),
                 dbl(b[17], deftsim_timing_select_max(tm)[w]), dbl(b[13], m->worker_seconds[w]),
                 dbl(b[14], r->cost[w]), r->local_count[w], r->bytes_sent[w], r->bytes_recv[w],
                 w < ps->S ? 1 : 0);
        size_t pi = 0;
        for (size_t ph = 0; ph < r->nphases; ph++, pi++) {
            fprintf(f, "%s,%zu,%" PRIu64 ",%u,%zu,", pd->prefix, ps->it, ps->src_iter, w, pi);
            deftsim_csv_field(f, r->phase_name[ph]);
            size_t wp = (size_t)w * r->nphases + ph;
            fprintf(f, ",compute,%d,%s,%s,%s,0,0,%s,%s,%s\n", r->phase_selection[ph] ? 1 : 0,
                    dbl(b[15], r->phase_seconds[wp]), dbl(b[18], phmin[wp]), dbl(b[19], phmax[wp]),
                    wcols, itcols, tail);
            row_done(rb);
            rows++;
        }
        for (size_t c = 0; c < m->ncoll; c++, pi++) {
            const deftsim_step *st = &r->schedule.steps[m->coll_step[c]];
            fprintf(f, "%s,%zu,%" PRIu64 ",%u,%zu,", pd->prefix, ps->it, ps->src_iter, w, pi);
            deftsim_csv_field(f, st->name);
            fprintf(f, ",%s,0,,,,%" PRIu64 ",%" PRIu64 ",%s,%s,%s\n",
                    deftsim_step_kind_name(st->kind),
                    m->coll_sent[c * P + w], m->coll_recv[c * P + w], wcols, itcols, tail);
            row_done(rb);
            rows++;
        }
        /* A worker with neither (dense at P = 1) still gets a row: the iteration's metrics
         * must not vanish from the table. */
        if (pi == 0) {
            fprintf(f, "%s,%zu,%" PRIu64 ",%u,0,none,none,0,0,0,0,0,0,%s,%s,%s\n", pd->prefix,
                    ps->it, ps->src_iter, w, wcols, itcols, tail);
            row_done(rb);
            rows++;
        }
    }
    return rows;
}

static deftsim_status dump_iteration(const point_state *ps, const point_desc *pd,
                                     deftsim_sparsifier *sp, const deftsim_step_result *r)
{
    const deftsim_engine *e = ps->e;
    char dir[4096], path[4200];
    int len = snprintf(dir, sizeof dir, "%s/%s/d%s/P%u/it%zu", e->dump_dir, pd->method,
                       pd->dens_text, ps->P, ps->it);
    if (len < 0 || (size_t)len >= sizeof dir)
        return deftsim_error_set(DEFTSIM_E_INPUT, "--dump %s: path too long", e->dump_dir);
    deftsim_status st = deftsim_mkdir_p(dir);
    if (st) return st;
    for (uint32_t w = 0; w < ps->P; w++) {
        const deftsim_kidx *idx;
        uint64_t count;
        if ((st = deftsim_sparsifier_selection(sp, w, &idx, &count))) return st;
        snprintf(path, sizeof path, "%s/worker%u.npy", dir, w);
        if ((st = deftsim_npy_write_u32_as_i8(path, idx, count))) return st;
    }
    snprintf(path, sizeof path, "%s/union.npy", dir);
    if ((st = deftsim_npy_write_u32_as_i8(path, r->agg_index, r->nnz))) return st;
    snprintf(path, sizeof path, "%s/values.npy", dir);
    return deftsim_npy_write(path, DEFTSIM_NPY_F4, r->agg_value, r->nnz);
}

/* The CSV header line. */
static void write_header(FILE *f)
{
    for (size_t i = 0; i < NCOLUMNS; i++) fprintf(f, "%s%s", i ? "," : "", columns[i]);
    fputc('\n', f);
}

/* ---- one point: the network simulation -------------------------------------------------------
 * All iterations of a point go through one SimGrid simulation (sim/, in a forked child) once
 * the sparsifier has run them; the point's rows wait in a row_buffer meanwhile and get the
 * simulated columns appended when they are written out. */

/* One iteration: its schedule (a copy: the sparsifier reuses its own) and how its rows map
 * onto the schedule's steps. */
typedef struct {
    deftsim_schedule sched;
    size_t nphases;
    char phase[DEFTSIM_MAX_PHASES][DEFTSIM_STEP_NAME_MAX]; /* as the COMPUTE steps name them */
    unsigned char selection[DEFTSIM_MAX_PHASES];
    size_t ncoll;
    size_t *coll_step;
} sim_iter;

typedef struct {
    sim_iter *it;
    size_t n, cap;
    uint32_t elem_bytes;      /* the value wire width: ALLREDUCE element size */
} point_sim;

static void point_sim_free(point_sim *s)
{
    for (size_t i = 0; i < s->n; i++) {
        deftsim_schedule_free(&s->it[i].sched);
        free(s->it[i].coll_step);
    }
    free(s->it);
    memset(s, 0, sizeof *s);
}

static deftsim_status schedule_copy(deftsim_schedule *dst, const deftsim_schedule *src)
{
    deftsim_schedule_init(dst, src->P);
    for (size_t k = 0; k < src->nsteps; k++)
        if (!deftsim_schedule_add_copy(dst, &src->steps[k])) return DEFTSIM_E_NOMEM;
    return DEFTSIM_OK;
}

/* Records iteration r's row layout, and its schedule when it is to be simulated. */
static deftsim_status point_sim_add(point_sim *s, const deftsim_step_result *r,
                                    const step_metrics *m, int with_schedule)
{
    if (s->n == s->cap) {
        size_t nc = s->cap ? 2 * s->cap : 8;
        sim_iter *ni = realloc(s->it, nc * sizeof *ni);
        if (!ni) return deftsim_error_set(DEFTSIM_E_NOMEM, "engine: out of memory");
        s->it = ni;
        s->cap = nc;
    }
    sim_iter *it = &s->it[s->n];
    memset(it, 0, sizeof *it);
    deftsim_schedule_init(&it->sched, r->P);
    s->n++;
    if (with_schedule && schedule_copy(&it->sched, &r->schedule))
        return deftsim_error_set(DEFTSIM_E_NOMEM, "engine: out of memory copying a schedule");
    it->nphases = r->nphases;
    for (size_t ph = 0; ph < r->nphases; ph++) {
        snprintf(it->phase[ph], sizeof it->phase[ph], "%s", r->phase_name[ph]);
        it->selection[ph] = r->phase_selection[ph];
    }
    it->ncoll = m->ncoll;
    if (m->ncoll) {
        if (!(it->coll_step = malloc(m->ncoll * sizeof *it->coll_step)))
            return deftsim_error_set(DEFTSIM_E_NOMEM, "engine: out of memory");
        memcpy(it->coll_step, m->coll_step, m->ncoll * sizeof *it->coll_step);
    }
    s->elem_bytes = r->value_wire_bytes;
    return DEFTSIM_OK;
}

/* Worker w's simulated start and end in row pi of iteration i: a compute phase spans its
 * COMPUTE steps (gTop-k merges once per round), a collective is its own step. 0: no step (a
 * phase the iteration did not run, or the row of a worker with neither). */
static int row_span(const point_sim *s, const deftsim_sim_result *res, size_t i, uint32_t w,
                    size_t pi, double *a, double *b)
{
    const sim_iter *it = &s->it[i];
    if (pi < it->nphases) {
        int any = 0;
        for (size_t k = 0; k < it->sched.nsteps; k++) {
            const deftsim_step *st = &it->sched.steps[k];
            if (st->kind != DEFTSIM_STEP_COMPUTE || strcmp(st->name, it->phase[pi])) continue;
            double x = deftsim_sim_start(res, i, k, w), y = deftsim_sim_end(res, i, k, w);
            if (!any || x < *a) *a = x;
            if (!any || y > *b) *b = y;
            any = 1;
        }
        return any;
    }
    size_t c = pi - it->nphases;
    if (c >= it->ncoll) return 0;
    *a = deftsim_sim_start(res, i, it->coll_step[c], w);
    *b = deftsim_sim_end(res, i, it->coll_step[c], w);
    return 1;
}

/* The iteration's selection critical path: when the last worker finished its last selection
 * phase (leader phases and the broadcasts before a worker's own selection included). NaN
 * when the method selects nothing (dense). */
static double select_critical(const point_sim *s, const deftsim_sim_result *res, size_t i)
{
    const sim_iter *it = &s->it[i];
    double crit = NAN;
    for (size_t k = 0; k < it->sched.nsteps; k++) {
        const deftsim_step *st = &it->sched.steps[k];
        if (st->kind != DEFTSIM_STEP_COMPUTE) continue;
        int sel = 0;
        for (size_t ph = 0; ph < it->nphases; ph++)
            if (it->selection[ph] && strcmp(st->name, it->phase[ph]) == 0) sel = 1;
        if (!sel) continue;
        for (uint32_t w = 0; w < res->P; w++) {
            double e = deftsim_sim_end(res, i, k, w);
            if (isnan(crit) || e > crit) crit = e;
        }
    }
    return crit;
}

/* Writes the buffered rows to out with the simulated columns appended (empty without res). */
static deftsim_status emit_rows(FILE *out, row_buffer *rb, const point_sim *s, uint32_t P,
                                const deftsim_sim_result *res, const char *run_cols)
{
    if (rb->failed) return deftsim_error_set(DEFTSIM_E_NOMEM, "engine: out of memory buffering rows");
    if (rb->werr) return row_buffer_error(rb, rb->werr);
    if (fflush(rb->f) != 0) return row_buffer_error(rb, errno);
    if (fseek(rb->f, 0, SEEK_SET) != 0)
        return deftsim_error_set(DEFTSIM_E_IO, "engine: the point's rows cannot be read back: %s",
                                 strerror(errno));
    size_t row = 0;
    uint64_t prev = 0;
    char b[5][40];
    for (size_t i = 0; i < s->n; i++) {
        const sim_iter *it = &s->it[i];
        size_t per = it->nphases + it->ncoll ? it->nphases + it->ncoll : 1;
        char itcols[160] = ",,";
        if (res)
            snprintf(itcols, sizeof itcols, "%s,%s,%s", dbl(b[0], res->comm_seconds[i]),
                     dbl(b[1], select_critical(s, res, i)), dbl(b[2], res->iteration_seconds[i]));
        for (uint32_t w = 0; w < P; w++)
            for (size_t pi = 0; pi < per; pi++, row++) {
                if (row >= rb->n || rb->end[row] <= prev)
                    return deftsim_error_set(DEFTSIM_E_INTERNAL,
                                             "engine: row %zu of the point is not where the "
                                             "schedule puts it",
                                             row);
                size_t len = (size_t)(rb->end[row] - prev);
                if (len > rb->line_cap) {
                    char *nl = realloc(rb->line, len);
                    if (!nl) return deftsim_error_set(DEFTSIM_E_NOMEM, "engine: out of memory");
                    rb->line = nl;
                    rb->line_cap = len;
                }
                if (fread(rb->line, 1, len, rb->f) != len)
                    return deftsim_error_set(DEFTSIM_E_IO, "engine: the point's rows cannot be "
                                             "read back");
                fwrite(rb->line, 1, len - 1, out); /* without its newline */
                double x = 0, y = 0;
                if (res && row_span(s, res, i, w, pi, &x, &y))
                    fprintf(out, ",%s,%s", dbl(b[3], x), dbl(b[4], y));
                else
                    fputs(",,", out);
                fprintf(out, ",%s,%s\n", itcols, run_cols);
                prev = rb->end[row];
            }
    }
    if (row != rb->n)
        return deftsim_error_set(DEFTSIM_E_INTERNAL, "engine: %zu rows buffered, %zu laid out",
                                 rb->n, row);
    return DEFTSIM_OK;
}

/* The simulated run's columns: net_topology .. sim_mode. A user's platform file has no one
 * link bandwidth or latency: net_topology names the file ("file:<name>", its copy under
 * platforms/) and those two stay empty. */
static deftsim_status sim_run_cols(const deftsim_engine *e, char *buf, size_t cap)
{
    const deftsim_config *cfg = e->cfg;
    if (!cfg->network.simulate) {
        snprintf(buf, cap, ",,,,,,,off");
        return DEFTSIM_OK;
    }
    FILE *m = fmemopen(buf, cap, "w");
    if (!m) return deftsim_error_set(DEFTSIM_E_NOMEM, "engine: out of memory");
    char bw[40], lat[40];
    if (cfg->network.topology == DEFTSIM_TOPO_FILE) {
        char topo[4200];
        snprintf(topo, sizeof topo, "file:%s", e->platform.name ? e->platform.name : "");
        deftsim_csv_field(m, topo);
        fprintf(m, ",%s,,,", deftsim_net_model_name(cfg->network.model));
    } else {
        fprintf(m, "%s,%s,%s,%s,", deftsim_topology_name(cfg->network.topology),
                deftsim_net_model_name(cfg->network.model), dbl(bw, cfg->network.bandwidth),
                dbl(lat, cfg->network.latency));
    }
    fprintf(m, "%s,%s,%s,%s", deftsim_allgather_name(cfg->network.allgather),
            deftsim_allreduce_name(cfg->network.allreduce), deftsim_bcast_name(cfg->network.bcast),
            deftsim_sim_mode_name(cfg->network.mode));
    int full = ftell(m) >= (long)cap - 1;
    fclose(m);
    if (full) return deftsim_error_set(DEFTSIM_E_INPUT, "[network] platform_file: name too long");
    return DEFTSIM_OK;
}

/* The generated platform of P workers, into <output>/platforms/P<P>.xml (rewritten for every
 * point: the same bytes each time), so that the run can be reproduced outside deftsim; a
 * user's platform file: its bytes as read, into <output>/platforms/<name>. */
static deftsim_status write_platform(const deftsim_engine *e, const deftsim_sim_params *sp)
{
    const deftsim_config *cfg = e->cfg;
    if (cfg->network.topology == DEFTSIM_TOPO_FILE)
        return deftsim_platform_record_keep(&e->platform, cfg->scenario.output);
    char dir[4200], path[4300];
    snprintf(dir, sizeof dir, "%s/platforms", cfg->scenario.output);
    deftsim_status st = deftsim_mkdir_p(dir);
    if (st) return deftsim_error_wrap(st, "[scenario] output");
    snprintf(path, sizeof path, "%s/P%u.xml", dir, sp->P);
    return deftsim_sim_write_platform(sp, path);
}

typedef struct {
    char *file;        /* relative to the output folder */
    const char *method;
    double density;
    uint32_t P;
    uint64_t rows;
    double seconds;
    double prepare_seconds, step_seconds;
    double sim_seconds;        /* the network simulation's wall time */
    uint64_t sim_messages;     /* messages it simulated */
    uint64_t sim_peak_rss;     /* its process's peak resident bytes */
    deftsim_kxfer xfer;        /* the kernel context's copies over the point (cuda-staged) */
    deftsim_noise_sample machine_start, machine_end; /* the machine's state around the point */
} point_record;

static deftsim_status run_point(deftsim_engine *e, deftsim_method method, double density,
                                uint32_t P, const char *csv_path, point_record *rec)
{
    const deftsim_config *cfg = e->cfg;
    deftsim_status st;
    point_desc pd;
    memset(&pd, 0, sizeof pd);
    pd.method = deftsim_method_name(method);
    pd.density = density;
    pd.P = P;
    pd.k = k_of(density, e->model->numel);
    deftsim_csv_double(pd.dens_text, sizeof pd.dens_text, density);
    {
        char b[40];
        /* scenario,model,n,source,method,density,k,P */
        FILE *m = fmemopen(pd.prefix, sizeof pd.prefix, "w");
        if (!m) return deftsim_error_set(DEFTSIM_E_NOMEM, "engine: out of memory");
        deftsim_csv_field(m, cfg->scenario.name);
        fputc(',', m);
        deftsim_csv_field(m, e->model->name);
        fprintf(m, ",%" PRIu64 ",%s,%s,%s,%" PRIu64 ",%u", e->model->numel,
                deftsim_source_name(cfg->gradients.source), pd.method, dbl(b, density), pd.k, P);
        fclose(m);
        snprintf(pd.fb_cols, sizeof pd.fb_cols, "%s,%u",
                 deftsim_feedback_name(cfg->sparsify.error_feedback),
                 cfg->sparsify.error_feedback == DEFTSIM_FEEDBACK_SAMPLED
                     ? (uint32_t)cfg->sparsify.sampled_workers : 0u);
        snprintf(pd.run_cols, sizeof pd.run_cols, "%s,%s,%u,%" PRIu64,
                 deftsim_wire_name(cfg->sparsify.wire),
                 e->profile ? "profile" : deftsim_kctx_backend(e->kctx),
                 deftsim_kctx_threads(e->kctx), cfg->scenario.seed);
    }

    deftsim_sparsifier_params params;
    fill_params(e, method, density, P, &params);
    deftsim_sparsifier *sp = NULL;
    deftsim_sparsifier **shadows = NULL; /* timing repetitions of a method with state */
    size_t nshadows = 0;
    deftsim_timing *tm = NULL;
    point_state ps;
    step_metrics m;
    memset(&m, 0, sizeof m);
    memset(&ps, 0, sizeof ps);
    deftsim_afile *af = NULL;
    row_buffer rb;
    point_sim psim;
    deftsim_sim_result sres;
    memset(&rb, 0, sizeof rb);
    memset(&psim, 0, sizeof psim);
    memset(&sres, 0, sizeof sres);
    int in_iter = 0, simulated = 0;
    deftsim_kxfer x0;
    deftsim_kctx_transfers(e->kctx, &x0);
    deftsim_noise_sample_now(&rec->machine_start, NULL);
    double t_start = deftsim_now();
    if ((st = deftsim_sparsifier_new(&params, &sp))) goto done;
    if ((st = point_state_init(&ps, e, P))) goto done;
    if ((st = fused_init(&ps, sp))) goto done;
    if ((st = deftsim_timing_new(cfg->timing.repeats, cfg->timing.statistic, cfg->timing.cache,
                                 ps.n, &tm)))
        goto done;
    if (cfg->timing.repeats > 1 && deftsim_sparsifier_keeps_state(sp)) {
        nshadows = (size_t)cfg->timing.repeats - 1;
        if (!(shadows = calloc(nshadows, sizeof *shadows))) {
            st = deftsim_error_set(DEFTSIM_E_NOMEM, "%s: out of memory", pd.method);
            goto done;
        }
        for (size_t i = 0; i < nshadows; i++)
            if ((st = deftsim_sparsifier_new(&params, &shadows[i]))) goto done;
        deftsim_timing_set_shadows(tm, shadows);
    }
    if ((st = deftsim_afile_open(&af, csv_path))) goto done;
    FILE *f = deftsim_afile_stream(af);
    write_header(f);
    if ((st = row_buffer_open(&rb, csv_path))) goto done;
    deftsim_acc_provider prov = {.get = acc_get,
                                 .ctx = &ps,
                                 .persistent = provider_persistent(cfg),
                                 .release = acc_release,
                                 .grad = acc_grad,
                                 .norms = acc_norms};
    in_iter = 1;
    for (size_t it = 0; it < e->iterations; it++) {
        ps.it = it;
        ps.src_iter = e->source_iter[it];
        double t0 = deftsim_now();
        if ((st = prepare_iteration(&ps))) goto done;
        ps.fresh = 0;
        double t1 = deftsim_now();
        deftsim_step_result *r = NULL;
        st = deftsim_timing_step(tm, sp, it, &prov, &r);
        double t2 = deftsim_now();
        if (!st && ps.get_status) st = deftsim_error_set(ps.get_status, "%s", ps.get_msg);
        if (st) goto done;
        if (r->P != P || r->k != pd.k || r->n != ps.n) {
            st = deftsim_error_set(DEFTSIM_E_INTERNAL,
                                   "%s: step result for P = %u, k = %" PRIu64 ", n = %" PRIu64
                                   "; expected %u, %" PRIu64 ", %" PRIu64,
                                   pd.method, r->P, r->k, r->n, P, pd.k, ps.n);
            goto done;
        }
        if ((st = compute_metrics(&ps, &pd, r, &m))) goto done;
        rec->rows += write_rows(&rb, &ps, &pd, r, &m, t1 - t0, t2 - t1, tm);
        if (rb.werr) { /* stop at once: the point cannot be written */
            st = row_buffer_error(&rb, rb.werr);
            goto done;
        }
        rec->prepare_seconds += t1 - t0;
        rec->step_seconds += t2 - t1;
        if ((st = point_sim_add(&psim, r, &m, cfg->network.simulate))) goto done;
        if (e->dump_dir && (st = dump_iteration(&ps, &pd, sp, r))) goto done;
    }
    in_iter = 0;
    if (cfg->network.simulate) {
        deftsim_sim_params sp_net;
        deftsim_config_sim_params(cfg, P, psim.elem_bytes, &sp_net);
        const deftsim_schedule **scheds = malloc((psim.n ? psim.n : 1) * sizeof *scheds);
        if (!scheds) {
            st = deftsim_error_set(DEFTSIM_E_NOMEM, "engine: out of memory");
            goto done;
        }
        for (size_t i = 0; i < psim.n; i++) scheds[i] = &psim.it[i].sched;
        st = write_platform(e, &sp_net);
        if (!st) st = deftsim_sim_run(&sp_net, scheds, psim.n, &sres);
        free(scheds);
        if (st) goto done;
        simulated = 1;
        rec->sim_seconds = sres.wall_seconds;
        rec->sim_messages = sres.messages;
        rec->sim_peak_rss = sres.peak_rss_bytes;
    }
    {
        char run_cols[1024];
        if ((st = sim_run_cols(e, run_cols, sizeof run_cols))) goto done;
        if ((st = emit_rows(f, &rb, &psim, P, simulated ? &sres : NULL, run_cols))) goto done;
    }
    st = deftsim_afile_commit(af);
    af = NULL;
done:
    if (st && in_iter)
        st = deftsim_error_wrap(st, "%s d=%s P=%u iteration %zu", pd.method, pd.dens_text, P, ps.it);
    else if (st)
        st = deftsim_error_wrap(st, "%s d=%s P=%u", pd.method, pd.dens_text, P);
    if (af) deftsim_afile_abort(af);
    row_buffer_free(&rb);
    point_sim_free(&psim);
    deftsim_sim_result_free(&sres);
    step_metrics_free(&m);
    point_state_free(&ps);
    deftsim_timing_free(tm);
    for (size_t i = 0; shadows && i < nshadows; i++) deftsim_sparsifier_free(shadows[i]);
    free(shadows);
    deftsim_sparsifier_free(sp);
    rec->seconds = deftsim_now() - t_start;
    deftsim_noise_sample_now(&rec->machine_end, NULL);
    deftsim_kctx_transfers(e->kctx, &rec->xfer);
    rec->xfer.calls -= x0.calls;
    rec->xfer.bytes_to_device -= x0.bytes_to_device;
    rec->xfer.bytes_from_device -= x0.bytes_from_device;
    rec->xfer.copy_seconds -= x0.copy_seconds;
    rec->xfer.device_seconds -= x0.device_seconds;
    rec->xfer.untimed_seconds -= x0.untimed_seconds;
    return st;
}

/* ---- manifest ------------------------------------------------------------------------------ */

/* 1 when the kernel backend copies data between host and device (cuda-staged). */
static int moves_data(const deftsim_engine *e)
{
    return strcmp(deftsim_kctx_backend(e->kctx), "cuda-staged") == 0;
}

static json_t *xfer_json(const deftsim_kxfer *x)
{
    return json_pack("{s:I, s:I, s:I, s:f, s:f, s:f}", "calls", (json_int_t)x->calls,
                     "bytes_to_device", (json_int_t)x->bytes_to_device, "bytes_from_device",
                     (json_int_t)x->bytes_from_device, "copy_seconds", x->copy_seconds,
                     "device_seconds", x->device_seconds, "untimed_seconds", x->untimed_seconds);
}

static json_t *manifest_json(const deftsim_engine *e, const char *started, const char *finished,
                             const char *status, const char *error, const point_record *recs,
                             size_t nrecs, int rows_written)
{
    const deftsim_config *cfg = e->cfg;
    const deftsim_memory_plan *pl = &e->plan;
    char host[256] = "unknown", cpu[256];
    if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "unknown");
    host[sizeof host - 1] = '\0';
    cpu_model(cpu, sizeof cpu);

    json_t *root = json_object();
    json_t *config = deftsim_config_to_json(cfg);
    if (!root || !config) {
        json_decref(root);
        json_decref(config);
        return NULL;
    }
    json_object_set_new(root, "format", json_string("deftsim-results"));
    json_object_set_new(root, "format_version", json_integer(1));
    json_object_set_new(root, "scenario", json_string(cfg->scenario.name));
    json_object_set_new(root, "seed", json_integer((json_int_t)cfg->scenario.seed));
    json_object_set_new(root, "deftsim",
                        json_pack("{s:s, s:s}", "version", DEFTSIM_VERSION, "git_commit",
                                  DEFTSIM_GIT_COMMIT));
    json_object_set_new(root, "status", json_string(status));
    if (error) json_object_set_new(root, "error", json_string(error));
    json_object_set_new(root, "started", json_string(started));
    json_object_set_new(root, "finished", finished ? json_string(finished) : json_null());
    json_object_set_new(root, "machine",
                        json_pack("{s:s, s:s, s:i, s:I}", "hostname", host, "cpu_model", cpu,
                                  "cpus_online", (int)online_cpus(), "ram_bytes",
                                  (json_int_t)deftsim_machine_ram()));
    json_object_set_new(root, "kernels",
                        json_pack("{s:s, s:i, s:i}", "backend", deftsim_kctx_backend(e->kctx),
                                  "threads", (int)deftsim_kctx_threads(e->kctx), "prep_threads",
                                  (int)e->prep_threads));
    json_object_set_new(root, "timing", deftsim_timing_json(cfg));
    if (e->profile)
        json_object_set_new(json_object_get(root, "kernels"), "profile",
                            json_pack("{s:s, s:s, s:s, s:i, s:s}", "file", cfg->device.profile,
                                      "device", e->profile->device, "backend",
                                      e->profile->backend, "threads", (int)e->profile->threads,
                                      "created", e->profile->created));
    json_t *src = json_pack("{s:s, s:s, s:I, s:I}", "kind", deftsim_source_name(cfg->gradients.source),
                            "model", e->model->name, "n", (json_int_t)e->model->numel, "layers",
                            (json_int_t)e->model->nlayers);
    json_t *ids = json_array();
    for (size_t i = 0; i < e->iterations; i++) json_array_append_new(ids, json_integer((json_int_t)e->source_iter[i]));
    json_object_set_new(src, "iterations", ids);
    if (e->trace) {
        json_object_set_new(src, "trace", json_string(deftsim_trace_dir(e->trace)));
        json_object_set_new(src, "trace_workers", json_integer(e->trace_workers));
    } else {
        json_object_set_new(src, "generator_kernel", json_string(deftsim_gen_kernel(e->gen)));
    }
    json_object_set_new(root, "source", src);

    json_t *mem = json_pack("{s:I, s:f, s:I, s:s, s:i, s:i}", "ram_bytes", (json_int_t)pl->ram_bytes,
                            "budget_fraction", pl->budget_fraction, "budget_bytes",
                            (json_int_t)pl->budget_bytes, "error_feedback",
                            deftsim_feedback_name(pl->feedback), "sampled_workers",
                            (int)pl->sampled_workers, "largest_fit", (int)pl->largest_fit);
    json_t *per = json_array();
    for (size_t i = 0; i < pl->ncounts; i++) {
        const deftsim_memory_row *r = &pl->rows[i];
        json_array_append_new(per, json_pack("{s:i, s:I, s:I, s:I, s:I}", "P", (int)r->P, "bytes",
                                             (json_int_t)r->bytes, "residual_bytes",
                                             (json_int_t)r->residual_bytes, "sparsifier_bytes",
                                             (json_int_t)r->sparsifier_bytes, "engine_bytes",
                                             (json_int_t)r->engine_bytes));
    }
    json_object_set_new(mem, "per_P", per);
    json_object_set_new(root, "memory", mem);

    json_t *pts = json_array();
    for (size_t i = 0; i < nrecs; i++)
        json_array_append_new(pts, json_pack("{s:s, s:f, s:i, s:s, s:I, s:f, s:f, s:f, s:f, s:I, "
                                             "s:I}", "method",
                                             recs[i].method, "density", recs[i].density, "P",
                                             (int)recs[i].P, "file", recs[i].file, "rows",
                                             (json_int_t)recs[i].rows, "seconds", recs[i].seconds,
                                             "prepare_seconds", recs[i].prepare_seconds,
                                             "step_seconds", recs[i].step_seconds,
                                             "sim_seconds", recs[i].sim_seconds, "sim_messages",
                                             (json_int_t)recs[i].sim_messages, "sim_peak_rss_bytes",
                                             (json_int_t)recs[i].sim_peak_rss));
    json_object_set_new(root, "points", pts);
    for (size_t i = 0; i < nrecs; i++)
        json_object_set_new(json_array_get(pts, i), "machine_state",
                            deftsim_noise_json(&recs[i].machine_start, &recs[i].machine_end));
    if (moves_data(e)) {
        /* What the cuda-staged backend copied, per point and in all (docs/OUTPUT.md). */
        deftsim_kxfer tot;
        deftsim_kctx_transfers(e->kctx, &tot);
        json_t *kj = json_object_get(root, "kernels");
#ifdef DEFTSIM_HAVE_CUDA
        json_object_set_new(kj, "device", json_string(deftsim_kcuda_device_name(
                                              deftsim_kcuda_staged_device(e->kctx))));
#endif
        json_object_set_new(kj, "copies", xfer_json(&tot));
        for (size_t i = 0; i < nrecs; i++)
            json_object_set_new(json_array_get(pts, i), "copies", xfer_json(&recs[i].xfer));
    }
    json_object_set_new(root, "rows_csv", rows_written ? json_string("rows.csv") : json_null());
    json_object_set_new(root, "dump", e->dump_dir ? json_string(e->dump_dir) : json_null());
    json_object_set_new(root, "platform", deftsim_platform_record_json(&e->platform));
    json_object_set_new(root, "config", config);
    return root;
}

static deftsim_status write_manifest(const deftsim_engine *e, const char *started,
                                     const char *finished, const char *status, const char *error,
                                     const point_record *recs, size_t nrecs, int rows_written)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/manifest.json", e->cfg->scenario.output);
    json_t *root = manifest_json(e, started, finished, status, error, recs, nrecs, rows_written);
    if (!root) return deftsim_error_set(DEFTSIM_E_NOMEM, "%s: cannot build the manifest", path);
    char *text = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(root);
    if (!text) return deftsim_error_set(DEFTSIM_E_NOMEM, "%s: cannot build the manifest", path);
    size_t len = strlen(text);
    /* A trailing newline, as text files have. */
    char *withnl = realloc(text, len + 2);
    if (!withnl) {
        free(text);
        return deftsim_error_set(DEFTSIM_E_NOMEM, "%s: out of memory", path);
    }
    withnl[len] = '\n';
    withnl[len + 1] = '\0';
    deftsim_status st = deftsim_write_file_atomic(path, withnl, len + 1);
    free(withnl);
    return st;
}

/* rows.csv: the point files of this run, one header. */
static deftsim_status write_combined(const deftsim_engine *e, const point_record *recs, size_t n)
{
    char path[4200], src[4200];
    snprintf(path, sizeof path, "%s/rows.csv", e->cfg->scenario.output);
    deftsim_afile *af;
    deftsim_status st = deftsim_afile_open(&af, path);
    if (st) return st;
    FILE *out = deftsim_afile_stream(af);
    write_header(out);
    char *line = NULL;
    size_t cap = 0;
    for (size_t i = 0; i < n; i++) {
        snprintf(src, sizeof src, "%s/%s", e->cfg->scenario.output, recs[i].file);
        FILE *in = fopen(src, "r");
        if (!in) {
            st = deftsim_error_set(DEFTSIM_E_IO, "%s: cannot read: %s", src, strerror(errno));
            break;
        }
        ssize_t len;
        int first = 1;
        while ((len = getline(&line, &cap, in)) > 0) {
            if (first) {
                first = 0;
                continue;
            }
            fwrite(line, 1, (size_t)len, out);
        }
        fclose(in);
    }
    free(line);
    if (st) {
        deftsim_afile_abort(af);
        return st;
    }
    return deftsim_afile_commit(af);
}

/* The preparation threads' staging chunks and running sums, allocated once per engine. */
static deftsim_status staging_alloc(deftsim_engine *e)
{
    if (!e->stage) e->stage = malloc((size_t)e->prep_threads * GEN_WORKERS * CHUNK * sizeof(float));
    if (!e->sums) e->sums = malloc((size_t)e->prep_threads * CHUNK * sizeof(double));
    if (!e->stage || !e->sums) return deftsim_error_set(DEFTSIM_E_NOMEM, "engine: out of memory");
    return DEFTSIM_OK;
}

deftsim_status deftsim_engine_run_point(deftsim_engine *e, deftsim_method method, double density,
                                        uint32_t P, const char *csv_path,
                                        deftsim_point_summary *out)
{
    const deftsim_memory_plan *pl = &e->plan;
    if (out) memset(out, 0, sizeof *out);
    /* The memory plan covers the scenario's worker counts only: a point outside them has not
     * been checked against the budget. */
    const deftsim_memory_row *row = NULL;
    for (size_t i = 0; i < pl->ncounts; i++)
        if (pl->rows[i].P == P) row = &pl->rows[i];
    if (!row)
        return deftsim_error_set(DEFTSIM_E_INPUT, "P = %u is not one of [workers] counts", P);
    if (!row->fits) return deftsim_engine_check_memory(e);
    deftsim_status st = staging_alloc(e);
    if (st) return st;
    point_record rec;
    memset(&rec, 0, sizeof rec);
    rec.method = deftsim_method_name(method);
    rec.density = density;
    rec.P = P;
    st = run_point(e, method, density, P, csv_path, &rec);
    if (out) {
        out->rows = rec.rows;
        out->seconds = rec.seconds;
        out->prepare_seconds = rec.prepare_seconds;
        out->step_seconds = rec.step_seconds;
        out->sim_seconds = rec.sim_seconds;
        out->sim_messages = rec.sim_messages;
        out->machine_start = rec.machine_start;
        out->machine_end = rec.machine_end;
    }
    return st;
}

/* What a run writes: a folder of another kind or another scenario's results is refused
 * (deftsim_folder_check); a rerun of the same scenario replaces its own. */
static const deftsim_folder_writer run_writer = {
    .format = "deftsim-results",
    .noun = "a run",
    .verb = "run",
    .option = "--output DIR",
    .another = "the results of another run",
    .why = "this run would replace them",
    .identity_of = deftsim_folder_run_identity_of,
    .files = (const char *const[]){"rows.csv"},
    .nfiles = 1,
};

deftsim_status deftsim_engine_check_output(const deftsim_engine *e)
{
    json_t *m = json_pack("{s:o}", "config", deftsim_config_to_json(e->cfg));
    json_t *id = m ? deftsim_folder_run_identity_of(m) : NULL;
    json_decref(m);
    if (!id) return deftsim_error_set(DEFTSIM_E_NOMEM, "engine: cannot describe the configuration");
    deftsim_status st = deftsim_folder_check(e->cfg->scenario.output, &run_writer, id, NULL);
    json_decref(id);
    return st;
}

deftsim_status deftsim_engine_run(deftsim_engine *e, deftsim_run_summary *summary)
{
    const deftsim_config *cfg = e->cfg;
    deftsim_status st = deftsim_engine_check_memory(e);
    if (st) return st;
    /* Before anything is created or removed in the folder. */
    if ((st = deftsim_engine_check_output(e))) return st;
    if (summary) memset(summary, 0, sizeof *summary);
    double t0 = deftsim_now();
    char started[64], finished[64], dir[4200];
    utc_now(started, sizeof started);
    snprintf(dir, sizeof dir, "%s/points", cfg->scenario.output);
    if ((st = deftsim_mkdir_p(dir))) return deftsim_error_wrap(st, "[scenario] output");
    if (e->dump_dir && (st = deftsim_mkdir_p(e->dump_dir))) return deftsim_error_wrap(st, "--dump");
    /* A run killed into this folder before left its uncommitted files: remove those whose
     * writer is gone (a live deftsim writing here keeps its own). */
    deftsim_afile_remove_orphans(cfg->scenario.output);
    deftsim_afile_remove_orphans(dir);
    snprintf(dir, sizeof dir, "%s/platforms", cfg->scenario.output);
    deftsim_afile_remove_orphans(dir);
    snprintf(dir, sizeof dir, "%s/points", cfg->scenario.output);

    size_t total = cfg->sparsify.nmethods * cfg->sparsify.ndensities * cfg->workers.ncounts;
    point_record *recs = calloc(total ? total : 1, sizeof *recs);
    if (!recs) return deftsim_error_set(DEFTSIM_E_NOMEM, "engine: out of memory");
    if ((st = staging_alloc(e))) {
        free(recs);
        return st;
    }
    if ((st = write_manifest(e, started, NULL, "running", NULL, recs, 0, 0))) {
        free(recs);
        return st;
    }
    size_t done = 0;
    uint64_t rows = 0;
    for (size_t mi = 0; mi < cfg->sparsify.nmethods && !st; mi++)
        for (size_t di = 0; di < cfg->sparsify.ndensities && !st; di++)
            for (size_t ci = 0; ci < cfg->workers.ncounts && !st; ci++) {
                deftsim_method m = cfg->sparsify.methods[mi];
                double d = cfg->sparsify.densities[di];
                uint32_t P = (uint32_t)cfg->workers.counts[ci];
                point_record *rec = &recs[done];
                char dt[40], rel[256], full[4500];
                deftsim_csv_double(dt, sizeof dt, d);
                snprintf(rel, sizeof rel, "points/%s_d%s_P%u.csv", deftsim_method_name(m), dt, P);
                snprintf(full, sizeof full, "%s/%s", cfg->scenario.output, rel);
                rec->method = deftsim_method_name(m);
                rec->density = d;
                rec->P = P;
                if (!(rec->file = strdup(rel))) {
                    st = deftsim_error_set(DEFTSIM_E_NOMEM, "engine: out of memory");
                    break;
                }
                st = run_point(e, m, d, P, full, rec);
                if (st) break;
                done++;
                rows += rec->rows;
                if (e->opt.progress) {
                    fprintf(e->opt.progress,
                            "deftsim run: [%zu/%zu] %s d=%s P=%u: %zu iteration%s in %.2f s "
                            "(prepare %.2f s, step %.2f s, network %.2f s), %" PRIu64 " rows\n",
                            done, total, rec->method, dt, P, e->iterations,
                            e->iterations == 1 ? "" : "s", rec->seconds, rec->prepare_seconds,
                            rec->step_seconds, rec->sim_seconds, rec->rows);
                    if (moves_data(e))
                        fprintf(e->opt.progress,
                                "deftsim run:   kernels on the device %.3f s, copies %.3f s "
                                "(%.1f MB in, %.1f MB out, %" PRIu64 " calls; not in the phases)\n",
                                rec->xfer.device_seconds, rec->xfer.copy_seconds,
                                (double)rec->xfer.bytes_to_device / 1e6,
                                (double)rec->xfer.bytes_from_device / 1e6, rec->xfer.calls);
                    fflush(e->opt.progress);
                }
            }
    if (!st) st = write_combined(e, recs, done);
    utc_now(finished, sizeof finished);
    if (st) {
        /* Keep the failure's message: writing the manifest may record another. */
        char msg[2048];
        snprintf(msg, sizeof msg, "%s", deftsim_error_message());
        write_manifest(e, started, finished, "failed", msg, recs, done, 0);
        st = deftsim_error_set(st, "%s", msg);
    } else {
        st = write_manifest(e, started, finished, "complete", NULL, recs, done, 1);
    }
    for (size_t i = 0; i < total; i++) free(recs[i].file);
    free(recs);
    if (summary) {
        summary->points = done;
        summary->rows = rows;
        summary->seconds = deftsim_now() - t0;
    }
    return st;
}

deftsim_status deftsim_run(const deftsim_config *cfg, const deftsim_run_options *opt,
                           deftsim_run_summary *summary)
{
    deftsim_engine *e;
    deftsim_status st = deftsim_engine_new(cfg, opt, &e);
    if (st) return st;
    st = deftsim_engine_run(e, summary);
    deftsim_engine_free(e);
    return st;
}
