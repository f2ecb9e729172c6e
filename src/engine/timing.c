/* timing.c - the timing protocol of the compute phases: R runs of each step on the same
 * input, a robust per-worker estimate, cold or warm caches (deftsim_timing.h,
 * docs/TIMING.md). */
#include "deftsim_timing.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "deftsim_par.h"
#include "deftsim_util.h"

#include <jansson.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#endif

/* ---- cache flushing ----------------------------------------------------------------------- */

#define LINE 64u /* the smallest data cache line of the CPUs deftsim runs on */

#if defined(__x86_64__) || defined(__i386__)
/* CLFLUSHOPT (CPUID.(EAX=7,ECX=0):EBX bit 23): flushes of different lines overlap, 10 to 20
 * times faster than CLFLUSH over a 45 MB accumulator on the machine deftsim is developed on
 * (docs/TIMING.md). */
static int has_clflushopt(void)
{
    static int known = -1;
    if (known < 0) {
        unsigned a, b, c, d;
        known = __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b & (1u << 23));
    }
    return known;
}

__attribute__((target("clflushopt"))) static void flush_opt(const char *c, size_t bytes)
{
    for (size_t i = 0; i < bytes; i += LINE) _mm_clflushopt((void *)(c + i));
    _mm_clflushopt((void *)(c + bytes - 1));
    _mm_mfence();
}
#endif

const char *deftsim_timing_flush_method(void)
{
#if defined(__x86_64__) || defined(__i386__)
    return has_clflushopt() ? "clflushopt" : "clflush";
#elif defined(__aarch64__)
    return "dc civac";
#else
    return "none";
#endif
}

void deftsim_timing_flush(const void *p, size_t bytes)
{
    const char *c = p;
    if (!c || !bytes) return;
#if defined(__x86_64__) || defined(__i386__)
    if (has_clflushopt()) {
        flush_opt(c, bytes);
        return;
    }
    for (size_t i = 0; i < bytes; i += LINE) _mm_clflush(c + i);
    _mm_clflush(c + bytes - 1);
    _mm_mfence();
#elif defined(__aarch64__)
    for (size_t i = 0; i < bytes; i += LINE) __asm__ volatile("dc civac, %0" ::"r"(c + i) : "memory");
    __asm__ volatile("dc civac, %0" ::"r"(c + bytes - 1) : "memory");
    __asm__ volatile("dsb ish" ::: "memory");
#else
    (void)c;
#endif
}

/* ---- the estimate ------------------------------------------------------------------------- */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double deftsim_timing_estimate(deftsim_timing_statistic s, double *v, size_t r)
{
    if (r == 0) return 0;
    if (s == DEFTSIM_TIMING_MIN) {
        double m = v[0];
        for (size_t i = 1; i < r; i++)
            if (v[i] < m) m = v[i];
        return m;
    }
    qsort(v, r, sizeof *v, cmp_double);
    return r % 2 ? v[r / 2] : 0.5 * (v[r / 2 - 1] + v[r / 2]);
}

/* ---- the context -------------------------------------------------------------------------- */

struct deftsim_timing {
    int repeats;
    deftsim_timing_statistic statistic;
    deftsim_timing_cache cache;
    uint64_t n;
    float *copy;                  /* n floats: the accumulator of a timing repetition */
    uint32_t copy_of;             /* the worker copy holds (UINT32_MAX: none) */
    const deftsim_acc_provider *real;
    deftsim_sparsifier *const *shadows; /* NULL, or one per repetition but the last */
    /* Per repetition: phase times (P * nphases) and COMPUTE step times (nsteps * P). */
    double *ph, *stp;
    size_t ph_cap, stp_cap;
    double *phmin, *phmax, *selmin, *selmax, *vals;
    size_t phmin_cap, phmax_cap, selmin_cap, selmax_cap;
    deftsim_status get_status;
    /* Where a step's time goes besides its phases (deftsim_timing_overheads), since creation. */
    double copy_s, flush_s;
    uint64_t copies, flushes;
    /* The reference beside each repetition: a cold read of the copy buffer (n floats). */
    double *refs;
    double ref_est;
    unsigned threads;             /* for the copies and flushes (untimed work) */
    const float *par_src;         /* the copy in progress (par_copy) */
    float *par_dst;
    size_t par_bytes;
    /* deftsim_timing_set_scratch: whether the real provider's buffer for a worker is scratch
     * (handed out in place), and the worker last handed out so (UINT32_MAX: none). */
    int (*scratch)(void *ctx, uint32_t w, const float *p);
    void *scratch_ctx;
    uint32_t in_place_of;
};

/* Copies and flushes are untimed: split over the preparation threads in pieces of this many
 * bytes (a multiple of the cache line). */
#define PAR_PIECE ((size_t)4 << 20)

static size_t pieces(size_t bytes) { return (bytes + PAR_PIECE - 1) / PAR_PIECE; }

/* dst = src, written around the caches where the CPU can (x86's non-temporal stores): the
 * copy is flushed right after it with cache = cold, and a copy that never entered the caches
 * costs neither the reads for ownership of its lines nor their write-back in the flush. */
static void copy_bytes(void *dst, const void *src, size_t len)
{
#if defined(__x86_64__)
    if (((uintptr_t)dst | (uintptr_t)src) % 16 == 0) {
        __m128i *d = dst;
        const __m128i *s = src;
        size_t nv = len / 16, i = 0;
        for (; i + 4 <= nv; i += 4) {
            __m128i a = _mm_load_si128(s + i), b = _mm_load_si128(s + i + 1),
                    c = _mm_load_si128(s + i + 2), e = _mm_load_si128(s + i + 3);
            _mm_stream_si128(d + i, a);
            _mm_stream_si128(d + i + 1, b);
            _mm_stream_si128(d + i + 2, c);
            _mm_stream_si128(d + i + 3, e);
        }
        for (; i < nv; i++) _mm_stream_si128(d + i, _mm_load_si128(s + i));
        _mm_sfence();
        memcpy((char *)dst + nv * 16, (const char *)src + nv * 16, len % 16);
        return;
    }
#endif
    memcpy(dst, src, len);
}

static deftsim_status copy_piece(void *ctx, size_t i, unsigned thread)
{
    (void)thread;
    deftsim_timing *t = ctx;
    size_t a = i * PAR_PIECE, len = t->par_bytes - a < PAR_PIECE ? t->par_bytes - a : PAR_PIECE;
    copy_bytes((char *)t->par_dst + a, (const char *)t->par_src + a, len);
    return DEFTSIM_OK;
}

static deftsim_status flush_piece(void *ctx, size_t i, unsigned thread)
{
    (void)thread;
    deftsim_timing *t = ctx;
    size_t a = i * PAR_PIECE, len = t->par_bytes - a < PAR_PIECE ? t->par_bytes - a : PAR_PIECE;
    deftsim_timing_flush((const char *)t->par_src + a, len);
    return DEFTSIM_OK;
}

void deftsim_timing_set_threads(deftsim_timing *t, unsigned threads)
{
    t->threads = threads ? threads : 1;
}

void deftsim_timing_set_scratch(deftsim_timing *t,
                                int (*scratch)(void *ctx, uint32_t w, const float *p), void *ctx)
{
    t->scratch = scratch;
    t->scratch_ctx = ctx;
}

uint64_t deftsim_timing_memory(int repeats, uint64_t n)
{
    (void)repeats; /* the copy of the repetitions, and the reference's buffer with R = 1 */
    return n * sizeof(float);
}

/* ---- the reference ------------------------------------------------------------------------ */

/* Reads every byte of p once (an OR of its 64-bit words, which the compiler vectorizes): the
 * one-read floor of bytes. */
static uint64_t read_all(const void *p, size_t bytes)
{
    const uint64_t *q = p;
    size_t nq = bytes / sizeof *q;
    uint64_t a = 0, b = 0, c = 0, d = 0;
    size_t i = 0;
    for (; i + 4 <= nq; i += 4) {
        a |= q[i];
        b |= q[i + 1];
        c |= q[i + 2];
        d |= q[i + 3];
    }
    for (; i < nq; i++) a |= q[i];
    const unsigned char *t = (const unsigned char *)(q + nq);
    for (size_t j = 0; j < bytes % sizeof *q; j++) b |= t[j];
    return a | b | c | d;
}

static volatile uint64_t probe_sink;

double deftsim_timing_read_probe(const void *p, size_t bytes)
{
    if (!p || !bytes) return 0;
    deftsim_timing_flush(p, bytes);
    double t0 = deftsim_now();
    probe_sink = read_all(p, bytes);
    return deftsim_now() - t0;
}

double deftsim_timing_reference(const deftsim_timing *t) { return t->ref_est; }

/* The reference before repetition rep: the copy buffer (written once, so its pages exist)
 * flushed, then read. */
static void reference(deftsim_timing *t, int rep)
{
    t->refs[rep] = deftsim_timing_read_probe(t->copy, (size_t)t->n * sizeof(float));
}

deftsim_status deftsim_timing_new(int repeats, deftsim_timing_statistic statistic,
                                  deftsim_timing_cache cache, uint64_t n, deftsim_timing **out)
{
    *out = NULL;
    if (repeats < 1)
        return deftsim_error_set(DEFTSIM_E_USAGE, "[timing] repeats: %d, at least 1", repeats);
    deftsim_timing *t = calloc(1, sizeof *t);
    if (!t) return deftsim_error_nomem("timing");
    t->repeats = repeats;
    t->statistic = statistic;
    t->cache = cache;
    t->n = n;
    t->copy_of = UINT32_MAX;
    t->in_place_of = UINT32_MAX;
    t->threads = 1;
    t->vals = malloc((size_t)repeats * sizeof *t->vals);
    t->refs = calloc((size_t)repeats, sizeof *t->refs);
    if (!t->vals || !t->refs) goto nomem;
    {
        if (n > SIZE_MAX / sizeof(float)) goto nomem;
        /* Mapped as the engine maps the accumulators (huge pages advised), so that a copy and
         * the real accumulator cost the same TLB misses. */
        size_t bytes = n ? (size_t)n * sizeof(float) : 1;
        void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) goto nomem;
#ifdef MADV_HUGEPAGE
        madvise(p, bytes, MADV_HUGEPAGE);
#endif
        t->copy = p;
        memset(t->copy, 0, bytes); /* the reference reads mapped pages */
    }
    *out = t;
    return DEFTSIM_OK;
nomem:
    deftsim_timing_free(t);
    return deftsim_error_nomem("[timing] repeats = %d: the repetition copy of %llu floats", repeats,
                               (unsigned long long)n);
}

void deftsim_timing_free(deftsim_timing *t)
{
    if (!t) return;
    if (t->copy) munmap(t->copy, t->n ? (size_t)t->n * sizeof(float) : 1);
    free(t->ph);
    free(t->stp);
    free(t->phmin);
    free(t->phmax);
    free(t->selmin);
    free(t->selmax);
    free(t->vals);
    free(t->refs);
    free(t);
}

const double *deftsim_timing_phase_min(const deftsim_timing *t) { return t->phmin; }
const double *deftsim_timing_phase_raw(const deftsim_timing *t) { return t->ph; }
int deftsim_timing_repeats(const deftsim_timing *t) { return t->repeats; }
const float *deftsim_timing_buffer(const deftsim_timing *t) { return t->copy; }

void deftsim_timing_overheads(const deftsim_timing *t, double *copy_s, double *flush_s,
                              uint64_t *copies, uint64_t *flushes)
{
    *copy_s = t->copy_s;
    *flush_s = t->flush_s;
    *copies = t->copies;
    *flushes = t->flushes;
}

/* A flush of n floats, its time kept. */
static void timed_flush(deftsim_timing *t, const void *p)
{
    double t0 = deftsim_now();
    size_t bytes = (size_t)t->n * sizeof(float);
    if (t->threads > 1 && pieces(bytes) > 1) {
        t->par_src = p;
        t->par_bytes = bytes;
        (void)deftsim_par_run(t->threads, pieces(bytes), flush_piece, t); /* cannot fail */
    } else {
        deftsim_timing_flush(p, bytes);
    }
    t->flush_s += deftsim_now() - t0;
    t->flushes++;
}
const double *deftsim_timing_phase_max(const deftsim_timing *t) { return t->phmax; }
const double *deftsim_timing_select_min(const deftsim_timing *t) { return t->selmin; }
const double *deftsim_timing_select_max(const deftsim_timing *t) { return t->selmax; }

static int grow(double **p, size_t *cap, size_t need)
{
    return deftsim_grow(p, cap, need, sizeof **p) ? -1 : 0;
}

/* ---- the providers ------------------------------------------------------------------------
 * A timing repetition sees each accumulator through a copy, one at a time (persistent = 0:
 * the sparsifier's contract lets it work the same way): it may write the copy, the real
 * accumulator is never written. The real step sees the real provider, its accumulators
 * flushed first with cache = cold. */

static float *copy_get(void *ctx, uint32_t w)
{
    deftsim_timing *t = ctx;
    const deftsim_acc_provider *a = t->real;
    float *src = a->get(a->ctx, w);
    if (!src) return NULL;
    /* A buffer the provider regenerates at will (a worker without a residual, not resident)
     * is its own copy: the step may write it, and its release makes the provider forget it,
     * so that nothing written reaches a later visit. */
    if (t->scratch && t->scratch(t->scratch_ctx, w, src)) {
        t->in_place_of = w;
        if (t->cache == DEFTSIM_TIMING_COLD) timed_flush(t, src);
        return src;
    }
    /* The sparsifier does not write an accumulator before its last visit, and it releases it
     * after: a copy not yet released still holds the accumulator. */
    if (t->copy_of != w) {
        double t0 = deftsim_now();
        size_t bytes = (size_t)t->n * sizeof *t->copy;
        t->par_src = src;
        t->par_dst = t->copy;
        t->par_bytes = bytes;
        if (t->threads > 1 && pieces(bytes) > 1)
            (void)deftsim_par_run(t->threads, pieces(bytes), copy_piece, t); /* cannot fail */
        else
            copy_bytes(t->copy, src, bytes);
        t->copy_s += deftsim_now() - t0;
        t->copies++;
        t->copy_of = w;
    }
    if (t->cache == DEFTSIM_TIMING_COLD) timed_flush(t, t->copy);
    return t->copy;
}

static deftsim_status copy_release(void *ctx, uint32_t w)
{
    deftsim_timing *t = ctx;
    if (t->copy_of == w) t->copy_of = UINT32_MAX;
    if (t->in_place_of == w) {
        t->in_place_of = UINT32_MAX;
        if (t->real->release) return t->real->release(t->real->ctx, w);
    }
    return DEFTSIM_OK;
}

static const float *pass_grad(void *ctx, uint32_t w)
{
    deftsim_timing *t = ctx;
    return t->real->grad(t->real->ctx, w);
}

static const double *pass_norms(void *ctx, uint32_t w)
{
    deftsim_timing *t = ctx;
    return t->real->norms(t->real->ctx, w);
}

static void pass_reads_at(void *ctx, const deftsim_kidx *idx, uint64_t nnz)
{
    deftsim_timing *t = ctx;
    t->real->reads_at(t->real->ctx, idx, nnz);
}

static float *cold_get(void *ctx, uint32_t w)
{
    deftsim_timing *t = ctx;
    float *p = t->real->get(t->real->ctx, w);
    if (p) timed_flush(t, p);
    return p;
}

static deftsim_status pass_release(void *ctx, uint32_t w)
{
    deftsim_timing *t = ctx;
    return t->real->release ? t->real->release(t->real->ctx, w) : DEFTSIM_OK;
}

/* ---- one step ------------------------------------------------------------------------------ */

/* Keeps repetition rep's times. */
static deftsim_status record(deftsim_timing *t, const deftsim_step_result *r, int rep,
                             size_t *nsteps0)
{
    size_t P = r->P, nph = r->nphases, ns = r->schedule.nsteps;
    if (rep == 0) {
        *nsteps0 = ns;
        if (grow(&t->ph, &t->ph_cap, (size_t)t->repeats * P * nph) ||
            grow(&t->stp, &t->stp_cap, (size_t)t->repeats * ns * P))
            return deftsim_error_nomem("timing");
    } else if (ns != *nsteps0) {
        return deftsim_error_set(DEFTSIM_E_INTERNAL,
                                 "timing: repetition %d of the step has %zu schedule steps, the "
                                 "first %zu",
                                 rep + 1, ns, *nsteps0);
    }
    if (P != 0 && nph != 0)
        memcpy(t->ph + (size_t)rep * P * nph, r->phase_seconds, P * nph * sizeof(double));
    for (size_t i = 0; i < ns; i++) {
        double *s = t->stp + ((size_t)rep * ns + i) * P;
        const deftsim_step *st = &r->schedule.steps[i];
        for (size_t w = 0; w < P; w++)
            s[w] = st->kind == DEFTSIM_STEP_COMPUTE ? st->seconds[w] : 0;
    }
    return DEFTSIM_OK;
}

/* The estimates into the real step's result, the spread into phmin .. selmax. */
static deftsim_status summarize(deftsim_timing *t, deftsim_step_result *r)
{
    size_t P = r->P, nph = r->nphases, ns = r->schedule.nsteps, R = (size_t)t->repeats;
    for (size_t k = 0; k < R; k++) t->vals[k] = t->refs[k];
    t->ref_est = deftsim_timing_estimate(t->statistic, t->vals, R);
    if (grow(&t->phmin, &t->phmin_cap, P * nph) || grow(&t->phmax, &t->phmax_cap, P * nph) ||
        grow(&t->selmin, &t->selmin_cap, P) || grow(&t->selmax, &t->selmax_cap, P))
        goto nomem;
    /* COMPUTE steps: the estimate per worker, which the network simulation sees. */
    for (size_t i = 0; i < ns; i++) {
        deftsim_step *st = &r->schedule.steps[i];
        if (st->kind != DEFTSIM_STEP_COMPUTE) continue;
        for (size_t w = 0; w < P; w++) {
            for (size_t k = 0; k < R; k++) t->vals[k] = t->stp[(k * ns + i) * P + w];
            st->seconds[w] = deftsim_timing_estimate(t->statistic, t->vals, R);
        }
    }
    for (size_t w = 0; w < P; w++) {
        double smin = 0, smax = 0;
        for (size_t k = 0; k < R; k++) {
            double sel = 0;
            for (size_t ph = 0; ph < nph; ph++)
                if (r->phase_selection[ph]) sel += t->ph[(k * P + w) * nph + ph];
            if (k == 0 || sel < smin) smin = sel;
            if (k == 0 || sel > smax) smax = sel;
        }
        t->selmin[w] = smin;
        t->selmax[w] = smax;
        for (size_t ph = 0; ph < nph; ph++) {
            double lo = 0, hi = 0;
            for (size_t k = 0; k < R; k++) {
                double v = t->ph[(k * P + w) * nph + ph];
                t->vals[k] = v;
                if (k == 0 || v < lo) lo = v;
                if (k == 0 || v > hi) hi = v;
            }
            t->phmin[w * nph + ph] = lo;
            t->phmax[w * nph + ph] = hi;
            /* A phase is the sum of its COMPUTE steps (gTop-k's merges: several): the sum of
             * their estimates, so that phases and schedule agree; a phase without one keeps
             * the estimate of its own times. */
            double sum = 0;
            int steps = 0;
            for (size_t i = 0; i < ns; i++) {
                const deftsim_step *st = &r->schedule.steps[i];
                if (st->kind != DEFTSIM_STEP_COMPUTE || strcmp(st->name, r->phase_name[ph]))
                    continue;
                sum += st->seconds[w];
                steps = 1;
            }
            r->phase_seconds[w * nph + ph] =
                steps ? sum : deftsim_timing_estimate(t->statistic, t->vals, R);
        }
    }
    return DEFTSIM_OK;
nomem:
    return deftsim_error_nomem("timing");
}

void deftsim_timing_set_shadows(deftsim_timing *t, deftsim_sparsifier *const *shadows)
{
    t->shadows = shadows;
}

deftsim_status deftsim_timing_step(deftsim_timing *t, deftsim_sparsifier *sp, uint64_t it,
                                   const deftsim_acc_provider *acc, deftsim_step_result **res)
{
    deftsim_status st;
    deftsim_step_result *r = NULL;
    size_t nsteps0 = 0;
    *res = NULL;
    if (!acc) { /* a data-free step: the same repetitions, no accumulator to copy or flush */
        for (int rep = 0; rep < t->repeats; rep++) {
            reference(t, rep);
            deftsim_sparsifier *one = rep + 1 < t->repeats && t->shadows ? t->shadows[rep] : sp;
            const int dropped = rep + 1 < t->repeats; /* its result is not kept */
            int was = dropped ? deftsim_sparsifier_set_skip_quality(one, 1) : 0;
            st = deftsim_sparsifier_step_data_free(one, it, &r);
            if (dropped) (void)deftsim_sparsifier_set_skip_quality(one, was);
            if (st) return st;
            if ((st = record(t, r, rep, &nsteps0))) return st;
        }
        if ((st = summarize(t, r))) return st;
        *res = r;
        return DEFTSIM_OK;
    }
    /* copy_get's copies reuse the buffer of the reference. */
    t->real = acc;
    deftsim_acc_provider copy = {.get = copy_get,
                                 .ctx = t,
                                 .persistent = 0,
                                 .release = copy_release,
                                 .grad = acc->grad ? pass_grad : NULL,
                                 .norms = acc->norms ? pass_norms : NULL,
                                 .reads_at = acc->reads_at ? pass_reads_at : NULL};
    for (int rep = 0; rep + 1 < t->repeats; rep++) {
        reference(t, rep);
        t->copy_of = UINT32_MAX;
        t->in_place_of = UINT32_MAX;
        deftsim_sparsifier *one = t->shadows ? t->shadows[rep] : sp;
        /* its result is not kept: no quality bookkeeping (deftsim_sparsifier_set_skip_quality) */
        int was = deftsim_sparsifier_set_skip_quality(one, 1);
        st = deftsim_sparsifier_step(one, it, &copy, &r);
        (void)deftsim_sparsifier_set_skip_quality(one, was);
        if (st) return st;
        if ((st = record(t, r, rep, &nsteps0))) return st;
    }
    t->copy_of = UINT32_MAX;
    deftsim_acc_provider cold = *acc;
    if (t->cache == DEFTSIM_TIMING_COLD) {
        cold.get = cold_get;
        cold.ctx = t;
        cold.release = pass_release;
        cold.grad = acc->grad ? pass_grad : NULL;
        cold.norms = acc->norms ? pass_norms : NULL;
        cold.reads_at = acc->reads_at ? pass_reads_at : NULL;
    }
    reference(t, t->repeats - 1);
    if ((st = deftsim_sparsifier_step(sp, it, &cold, &r))) return st;
    if ((st = record(t, r, t->repeats - 1, &nsteps0))) return st;
    if ((st = summarize(t, r))) return st;
    *res = r;
    return DEFTSIM_OK;
}

/* ---- the manifest -------------------------------------------------------------------------- */

int deftsim_timing_repeats_of(const deftsim_config *cfg)
{
    return cfg->device.kind == DEFTSIM_DEVICE_PROFILE ? 1 : cfg->timing.repeats;
}

json_t *deftsim_timing_json(const deftsim_config *cfg)
{
    return json_pack("{s:i, s:i, s:s, s:s, s:s, s:s}", "repeats", deftsim_timing_repeats_of(cfg),
                     "repeats_configured", cfg->timing.repeats, "statistic",
                     deftsim_timing_statistic_name(cfg->timing.statistic), "cache",
                     deftsim_timing_cache_name(cfg->timing.cache), "flush",
                     cfg->timing.cache == DEFTSIM_TIMING_COLD ? deftsim_timing_flush_method()
                                                              : "none",
                     "order",
                     "repetition-major: every worker's phases of repetition 1, then of "
                     "repetition 2, ...; the last repetition is the real step");
}
