/* kernels.c - the one op API: backend table, contexts, argument checks, dispatch.
 *
 * Everything a caller can get wrong is checked here, once, for every backend; the backends
 * check only what depends on data they alone can read (index ranges in device memory). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deftsim_kernels.h"
#include "deftsim_util.h"
#include "kernels_backend.h"

static const deftsim_kbackend *const backends[] = {
    &deftsim_kbackend_cpu,
#ifdef DEFTSIM_HAVE_CUDA
    &deftsim_kbackend_cuda,
    &deftsim_kbackend_cuda_staged,
#endif
};
#define NBACKENDS (sizeof backends / sizeof backends[0])

static const char *const op_names[DEFTSIM_KOP_COUNT] = {
    "absmax", "topk", "segtopk", "seg_norms", "filter_ge", "count_ge", "sample_strided",
    "sample_random", "gather", "zero_at", "scatter_add", "union", "merge_topk", "accumulate",
};

const char *deftsim_kop_name(deftsim_kop op)
{
    return (unsigned)op < DEFTSIM_KOP_COUNT ? op_names[op] : "unknown";
}

size_t deftsim_kernels_backend_count(void) { return NBACKENDS; }

const char *deftsim_kernels_backend_name(size_t i)
{
    return i < NBACKENDS ? backends[i]->name : NULL;
}

static const deftsim_kbackend *find_backend(const char *name)
{
    for (size_t i = 0; i < NBACKENDS; i++)
        if (name && strcmp(backends[i]->name, name) == 0) return backends[i];
    return NULL;
}

int deftsim_kernels_backend_available(const char *name)
{
    const deftsim_kbackend *be = find_backend(name);
    return be && (!be->available || be->available());
}

#ifdef DEFTSIM_HAVE_CUDA
#define BUILT_IN "cpu, cuda, cuda-staged"
#else
#define BUILT_IN "cpu"
#endif

const char *deftsim_kernels_backend_unavailable(const char *name)
{
    static _Thread_local char why[256];
    const deftsim_kbackend *be = find_backend(name);
    if (!be) {
        snprintf(why, sizeof why, "no backend '%s' in this build (have: " BUILT_IN ")",
                 name ? name : "(null)");
        return why;
    }
    if (!be->available || be->available()) return NULL;
    const char *r = be->unavailable ? be->unavailable() : NULL;
    snprintf(why, sizeof why, "%s", r ? r : "not usable on this machine");
    return why;
}

deftsim_status deftsim_kctx_new(deftsim_kctx **out, const char *name, unsigned threads)
{
    if (!out) return deftsim_error_set(DEFTSIM_E_USAGE, "kernels: NULL context pointer");
    *out = NULL;
    const deftsim_kbackend *be = find_backend(name);
    if (!be)
        return deftsim_error_set(DEFTSIM_E_UNSUPPORTED,
                                 "kernels: no backend '%s' in this build (have: " BUILT_IN ")",
                                 name ? name : "(null)");
    if (be->available && !be->available())
        return deftsim_error_set(DEFTSIM_E_UNSUPPORTED,
                                 "kernels: backend '%s' is not usable on this machine: %s",
                                 be->name, deftsim_kernels_backend_unavailable(be->name));
    if (threads > 256)
        return deftsim_error_set(DEFTSIM_E_USAGE, "kernels: %u threads (at most 256)", threads);
    deftsim_kctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx) return deftsim_error_nomem("kernels");
    ctx->be = be;
    ctx->threads = threads;
    ctx->last.backend = be->name;
    deftsim_status st = be->init ? be->init(ctx) : DEFTSIM_OK;
    if (st) {
        free(ctx);
        return st;
    }
    *out = ctx;
    return DEFTSIM_OK;
}

void deftsim_kctx_free(deftsim_kctx *ctx)
{
    if (!ctx) return;
    if (ctx->be->fini) ctx->be->fini(ctx);
    free(ctx);
}

const char *deftsim_kctx_backend(const deftsim_kctx *ctx) { return ctx->be->name; }
unsigned deftsim_kctx_threads(const deftsim_kctx *ctx) { return ctx->threads; }
void deftsim_kctx_set_flags(deftsim_kctx *ctx, unsigned flags) { ctx->flags = flags; }
unsigned deftsim_kctx_flags(const deftsim_kctx *ctx) { return ctx->flags; }
void deftsim_kctx_last(const deftsim_kctx *ctx, deftsim_kstats *out)
{
    /* A backend may finish the record lazily (the CUDA backend reads its counts back from the
     * device only when asked); the record is a cache, so the cast does not change what the
     * caller sees of ctx. */
    if (ctx->be->record) ctx->be->record((deftsim_kctx *)ctx);
    *out = ctx->last;
}

void deftsim_kctx_transfers(const deftsim_kctx *ctx, deftsim_kxfer *out)
{
    *out = ctx->xfer;
}

double deftsim_kctx_untimed_seconds(const deftsim_kctx *ctx) { return ctx->xfer.untimed_seconds; }

/* Every value of deftsim_kop has at least one entry in kernels_ops.h. */
#define KOP_BIT(P, ret, kop, member, fn, params) | (1u << DEFTSIM_KOP_##kop)
enum { KOPS_LISTED = 0u DEFTSIM_KERNEL_OPS(KOP_BIT, _) };
_Static_assert(DEFTSIM_KOP_COUNT < 32 && KOPS_LISTED == (1u << DEFTSIM_KOP_COUNT) - 1u,
               "every kernel operation is listed in kernels_ops.h");
_Static_assert(sizeof op_names / sizeof op_names[0] == DEFTSIM_KOP_COUNT,
               "every kernel operation has a name");

int deftsim_k_supports(const deftsim_kctx *ctx, deftsim_kop op)
{
    const deftsim_kbackend *b = ctx->be;
    if ((unsigned)op >= DEFTSIM_KOP_COUNT) return 0;
    int ok = 1;
    /* An operation is there when every entry of it is (the operation and its scratch query). */
#define KOP_HAS(P, ret, kop, member, fn, params) \
    if (op == DEFTSIM_KOP_##kop && !b->member) ok = 0;
    DEFTSIM_KERNEL_OPS(KOP_HAS, _)
#undef KOP_HAS
    return ok;
}

/* ---- Cost accounting -------------------------------------------------------------------- */

void deftsim_kctx_set_cost(deftsim_kctx *ctx, deftsim_kcost_fn fn, void *user)
{
    ctx->cost_fn = fn;
    ctx->cost_user = user;
    ctx->cost_seconds = 0;
}

int deftsim_kctx_has_cost(const deftsim_kctx *ctx) { return ctx->cost_fn != NULL; }
double deftsim_kctx_cost_seconds(const deftsim_kctx *ctx) { return ctx->cost_seconds; }

void deftsim_kctx_set_log(deftsim_kctx *ctx, deftsim_kcall *buf, size_t cap)
{
    ctx->log = buf;
    ctx->log_cap = buf ? cap : 0;
    ctx->log_n = 0;
}

size_t deftsim_kctx_log_count(const deftsim_kctx *ctx) { return ctx->log_n; }

uint64_t deftsim_kctx_bytes(const deftsim_kctx *ctx) { return ctx ? ctx->bytes : 0; }
void deftsim_kctx_touch(deftsim_kctx *ctx, uint64_t bytes)
{
    if (ctx) ctx->bytes += bytes;
}

static int accounting(const deftsim_kctx *ctx) { return ctx->cost_fn || ctx->log; }

/* After a call: on success, adds the bytes it had to touch to the context's count, charges it
 * to the modelled clock and logs it. Returns st. */
static deftsim_status account(deftsim_kctx *ctx, deftsim_status st, deftsim_kop op, size_t n,
                              size_t k, size_t segs, uint64_t bytes)
{
    if (st) return st;
    ctx->bytes += bytes;
    if (!accounting(ctx)) return st;
    deftsim_kcall c = {op, n, k, segs};
    if (ctx->cost_fn) ctx->cost_seconds += ctx->cost_fn(ctx->cost_user, &c);
    if (ctx->log) {
        if (ctx->log_n < ctx->log_cap) ctx->log[ctx->log_n] = c;
        ctx->log_n++;
    }
    return st;
}

/* Bytes of the cache lines that m elements of `elem` bytes reached by index touch in an array
 * of n: spread evenly, L (1 - (1 - 1/L)^m) of its L lines of 64 bytes; at least the m elements
 * themselves. */
static uint64_t scattered(size_t m, size_t n, size_t elem)
{
    if (!m || !n) return 0;
    double L = ceil((double)n * (double)elem / 64.0);
    double lines = L * -expm1((double)m * log1p(-1.0 / L));
    uint64_t b = (uint64_t)(lines * 64.0), least = (uint64_t)m * elem;
    return b > least ? b : least;
}

static size_t seg_elems(const deftsim_kseg *segs, size_t nseg)
{
    size_t t = 0;
    for (size_t j = 0; j < nseg; j++) t += segs[j].len;
    return t;
}

/* ---- Checks shared by the operations -------------------------------------------------- */

static deftsim_status begin(deftsim_kctx *ctx, deftsim_kop op)
{
    if (!ctx) return deftsim_error_set(DEFTSIM_E_USAGE, "kernels: NULL context");
    memset(&ctx->last, 0, sizeof ctx->last);
    ctx->last.op = op;
    ctx->last.backend = ctx->be->name;
    ctx->last.isa = "";
    ctx->last.threads = 1;
    if (!deftsim_k_supports(ctx, op))
        return deftsim_error_set(DEFTSIM_E_UNSUPPORTED, "kernels: backend '%s' has no %s",
                                 ctx->be->name, deftsim_kop_name(op));
    return DEFTSIM_OK;
}

/* The checks every scratch query starts with. */
static deftsim_status scratch_begin(const deftsim_kctx *ctx, deftsim_kop op, const size_t *bytes)
{
    if (!ctx || !bytes)
        return deftsim_error_set(DEFTSIM_E_USAGE, "kernels: %s_scratch: NULL",
                                 deftsim_kop_name(op));
    if (!deftsim_k_supports(ctx, op))
        return deftsim_error_set(DEFTSIM_E_UNSUPPORTED, "kernels: backend '%s' has no %s",
                                 ctx->be->name, deftsim_kop_name(op));
    return DEFTSIM_OK;
}

static deftsim_status check_n(deftsim_kop op, size_t n)
{
    if (n > DEFTSIM_KIDX_MAX_N)
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "kernels: %s: n = %zu exceeds the 32-bit index range",
                                 deftsim_kop_name(op), n);
    return DEFTSIM_OK;
}

static deftsim_status check_ptr(deftsim_kop op, const void *p, int needed, const char *what)
{
    if (needed && !p)
        return deftsim_error_set(DEFTSIM_E_USAGE, "kernels: %s: NULL %s", deftsim_kop_name(op),
                                 what);
    return DEFTSIM_OK;
}

static deftsim_status check_scratch(deftsim_kop op, size_t need, const void *scratch,
                                    size_t have)
{
    if (have < need || (need && !scratch))
        return deftsim_error_set(DEFTSIM_E_USAGE,
                                 "kernels: %s: scratch of %zu bytes given, %zu needed",
                                 deftsim_kop_name(op), scratch ? have : 0, need);
    return DEFTSIM_OK;
}

/* Every fragment inside x[0..n) with k <= len; *ksum receives sum(k_j). */
static deftsim_status check_segs(deftsim_kop op, size_t n, const deftsim_kseg *segs, size_t nseg,
                                 int use_k, size_t *ksum)
{
    deftsim_status st;
    if ((st = check_ptr(op, segs, nseg > 0, "fragment list"))) return st;
    size_t total = 0;
    for (size_t j = 0; j < nseg; j++) {
        const deftsim_kseg *s = &segs[j];
        size_t end;
        if (deftsim_add_size(s->offset, s->len, &end) || end > n)
            return deftsim_error_set(DEFTSIM_E_INPUT,
                                     "kernels: %s: fragment %zu [%zu, +%zu) lies outside x[0..%zu)",
                                     deftsim_kop_name(op), j, s->offset, s->len, n);
        if (use_k) {
            if (s->k > s->len)
                return deftsim_error_set(DEFTSIM_E_INPUT,
                                         "kernels: %s: fragment %zu wants k = %zu of %zu elements",
                                         deftsim_kop_name(op), j, s->k, s->len);
            if (deftsim_add_size(total, s->k, &total))
                return deftsim_error_set(DEFTSIM_E_INPUT, "kernels: %s: sum of k overflows",
                                         deftsim_kop_name(op));
        }
    }
    if (ksum) *ksum = total;
    return DEFTSIM_OK;
}

/* ---- Operations ----------------------------------------------------------------------- */

deftsim_status deftsim_k_absmax(deftsim_kctx *ctx, const float *x, size_t n, float *out)
{
    deftsim_status st;
    const deftsim_kop op = DEFTSIM_KOP_ABSMAX;
    if ((st = begin(ctx, op)) || (st = check_n(op, n)) || (st = check_ptr(op, x, n > 0, "x")) ||
        (st = check_ptr(op, out, 1, "output")))
        return st;
    return account(ctx, ctx->be->absmax(ctx, x, n, out), op, n, 0, 0, (uint64_t)n * sizeof *x);
}

deftsim_status deftsim_k_topk_scratch(const deftsim_kctx *ctx, size_t n, size_t k, size_t *bytes)
{
    const deftsim_kop op = DEFTSIM_KOP_TOPK;
    deftsim_status st;
    if ((st = scratch_begin(ctx, op, bytes))) return st;
    if ((st = check_n(op, n))) return st;
    if (k > n)
        return deftsim_error_set(DEFTSIM_E_INPUT, "kernels: topk: k = %zu > n = %zu", k, n);
    return ctx->be->topk_scratch(ctx, n, k, bytes);
}

deftsim_status deftsim_k_topk(deftsim_kctx *ctx, const float *x, size_t n, size_t k,
                              deftsim_kidx *idx_out, void *scratch, size_t scratch_bytes)
{
    const deftsim_kop op = DEFTSIM_KOP_TOPK;
    deftsim_status st;
    size_t need;
    if ((st = begin(ctx, op)) || (st = deftsim_k_topk_scratch(ctx, n, k, &need)) ||
        (st = check_ptr(op, x, n > 0, "x")) || (st = check_ptr(op, idx_out, k > 0, "output")) ||
        (st = check_scratch(op, need, scratch, scratch_bytes)))
        return st;
    return account(ctx, ctx->be->topk(ctx, x, n, k, idx_out, scratch, scratch_bytes), op, n, k, 0,
                   (uint64_t)n * sizeof *x + (uint64_t)k * sizeof *idx_out);
}

deftsim_status deftsim_k_segtopk_scratch(const deftsim_kctx *ctx, const deftsim_kseg *segs,
                                         size_t nseg, size_t *bytes)
{
    const deftsim_kop op = DEFTSIM_KOP_SEGTOPK;
    deftsim_status st;
    if ((st = scratch_begin(ctx, op, bytes))) return st;
    if ((st = check_segs(op, DEFTSIM_KIDX_MAX_N, segs, nseg, 1, NULL))) return st;
    return ctx->be->segtopk_scratch(ctx, segs, nseg, bytes);
}

deftsim_status deftsim_k_segtopk(deftsim_kctx *ctx, const float *x, size_t n,
                                 const deftsim_kseg *segs, size_t nseg, deftsim_kidx *idx_out,
                                 void *scratch, size_t scratch_bytes)
{
    const deftsim_kop op = DEFTSIM_KOP_SEGTOPK;
    deftsim_status st;
    size_t need, ksum;
    if ((st = begin(ctx, op)) || (st = check_n(op, n)) ||
        (st = check_segs(op, n, segs, nseg, 1, &ksum)) ||
        (st = deftsim_k_segtopk_scratch(ctx, segs, nseg, &need)) ||
        (st = check_ptr(op, x, n > 0, "x")) ||
        (st = check_ptr(op, idx_out, ksum > 0, "output")) ||
        (st = check_scratch(op, need, scratch, scratch_bytes)))
        return st;
    st = ctx->be->segtopk(ctx, x, n, segs, nseg, idx_out, scratch, scratch_bytes);
    size_t elems = seg_elems(segs, nseg);
    return account(ctx, st, op, elems, ksum, nseg,
                   (uint64_t)elems * sizeof *x + (uint64_t)ksum * sizeof *idx_out);
}

deftsim_status deftsim_k_seg_norms_scratch(const deftsim_kctx *ctx, const deftsim_kseg *segs,
                                           size_t nseg, size_t *bytes)
{
    const deftsim_kop op = DEFTSIM_KOP_SEG_NORMS;
    deftsim_status st;
    if ((st = scratch_begin(ctx, op, bytes))) return st;
    if ((st = check_segs(op, DEFTSIM_KIDX_MAX_N, segs, nseg, 0, NULL))) return st;
    return ctx->be->seg_norms_scratch(ctx, segs, nseg, bytes);
}

deftsim_status deftsim_k_seg_norms(deftsim_kctx *ctx, const float *x, size_t n,
                                   const deftsim_kseg *segs, size_t nseg, double *norms_out,
                                   void *scratch, size_t scratch_bytes)
{
    const deftsim_kop op = DEFTSIM_KOP_SEG_NORMS;
    deftsim_status st;
    size_t need;
    if ((st = begin(ctx, op)) || (st = check_n(op, n)) ||
        (st = check_segs(op, n, segs, nseg, 0, NULL)) ||
        (st = deftsim_k_seg_norms_scratch(ctx, segs, nseg, &need)) ||
        (st = check_ptr(op, x, n > 0, "x")) ||
        (st = check_ptr(op, norms_out, nseg > 0, "output")) ||
        (st = check_scratch(op, need, scratch, scratch_bytes)))
        return st;
    st = ctx->be->seg_norms(ctx, x, n, segs, nseg, norms_out, scratch, scratch_bytes);
    size_t elems = seg_elems(segs, nseg);
    return account(ctx, st, op, elems, 0, nseg,
                   (uint64_t)elems * sizeof *x + (uint64_t)nseg * sizeof *norms_out);
}

/* Fragments ascending and disjoint (the accumulate pass touches every element once). */
static deftsim_status check_sorted_segs(deftsim_kop op, const deftsim_kseg *segs, size_t nseg)
{
    for (size_t j = 1; j < nseg; j++)
        if (segs[j].offset < segs[j - 1].offset + segs[j - 1].len)
            return deftsim_error_set(DEFTSIM_E_INPUT,
                                     "kernels: %s: fragment %zu starts at %zu, before the end of "
                                     "fragment %zu (fragments must be ascending and disjoint)",
                                     deftsim_kop_name(op), j, segs[j].offset, j - 1);
    return DEFTSIM_OK;
}

deftsim_status deftsim_k_accumulate_scratch(const deftsim_kctx *ctx, const deftsim_kseg *segs,
                                            size_t nseg, size_t *bytes)
{
    const deftsim_kop op = DEFTSIM_KOP_ACCUMULATE;
    deftsim_status st;
    if ((st = scratch_begin(ctx, op, bytes))) return st;
    if ((st = check_segs(op, DEFTSIM_KIDX_MAX_N, segs, nseg, 0, NULL)) ||
        (st = check_sorted_segs(op, segs, nseg)))
        return st;
    return ctx->be->accumulate_scratch(ctx, segs, nseg, bytes);
}

deftsim_status deftsim_k_accumulate(deftsim_kctx *ctx, float *acc, const float *g, size_t n,
                                    int mode, const deftsim_kseg *segs, size_t nseg,
                                    double *sumsq_out, void *scratch, size_t scratch_bytes)
{
    const deftsim_kop op = DEFTSIM_KOP_ACCUMULATE;
    deftsim_status st;
    size_t need;
    if ((st = begin(ctx, op)) || (st = check_n(op, n))) return st;
    if (mode != DEFTSIM_KACC_ADD && mode != DEFTSIM_KACC_COPY)
        return deftsim_error_set(DEFTSIM_E_USAGE, "kernels: accumulate: mode %d (want add or copy)",
                                 mode);
    if ((st = check_segs(op, n, segs, nseg, 0, NULL)) ||
        (st = deftsim_k_accumulate_scratch(ctx, segs, nseg, &need)) ||
        (st = check_ptr(op, acc, n > 0, "acc")) || (st = check_ptr(op, g, n > 0, "g")) ||
        (st = check_ptr(op, sumsq_out, nseg > 0, "output")) ||
        (st = check_scratch(op, need, scratch, scratch_bytes)))
        return st;
    st = ctx->be->accumulate(ctx, acc, g, n, mode, segs, nseg, sumsq_out, scratch, scratch_bytes);
    /* Not a cost-model operation (the engine's preparation runs it): only its bytes count. */
    if (!st)
        ctx->bytes += (uint64_t)n * sizeof *acc * (mode == DEFTSIM_KACC_ADD ? 3 : 2) +
                      (uint64_t)nseg * sizeof *sumsq_out;
    return st;
}

static deftsim_status check_threshold(deftsim_kop op, float t)
{
    if (isnan(t))
        return deftsim_error_set(DEFTSIM_E_INPUT, "kernels: %s: threshold is NaN",
                                 deftsim_kop_name(op));
    return DEFTSIM_OK;
}

deftsim_status deftsim_k_filter_ge(deftsim_kctx *ctx, const float *x, size_t n, float t,
                                   deftsim_kidx *idx_out, size_t cap, size_t *count)
{
    const deftsim_kop op = DEFTSIM_KOP_FILTER_GE;
    deftsim_status st;
    if ((st = begin(ctx, op)) || (st = check_n(op, n)) || (st = check_threshold(op, t)) ||
        (st = check_ptr(op, x, n > 0, "x")) || (st = check_ptr(op, idx_out, cap > 0, "output")) ||
        (st = check_ptr(op, count, 1, "count")))
        return st;
    st = ctx->be->filter_ge(ctx, x, n, t, idx_out, cap, count);
    size_t written = st ? 0 : (*count < cap ? *count : cap);
    return account(ctx, st, op, n, written, 0,
                   (uint64_t)n * sizeof *x + (uint64_t)written * sizeof *idx_out);
}

deftsim_status deftsim_k_count_ge(deftsim_kctx *ctx, const float *x, size_t n, float t,
                                  size_t *count)
{
    const deftsim_kop op = DEFTSIM_KOP_COUNT_GE;
    deftsim_status st;
    if ((st = begin(ctx, op)) || (st = check_n(op, n)) || (st = check_threshold(op, t)) ||
        (st = check_ptr(op, x, n > 0, "x")) || (st = check_ptr(op, count, 1, "count")))
        return st;
    return account(ctx, ctx->be->count_ge(ctx, x, n, t, count), op, n, 0, 0,
                   (uint64_t)n * sizeof *x);
}

deftsim_status deftsim_k_sample_strided(deftsim_kctx *ctx, const float *x, size_t n,
                                        size_t start, size_t stride, size_t count,
                                        float *out_abs)
{
    const deftsim_kop op = DEFTSIM_KOP_SAMPLE_STRIDED;
    deftsim_status st;
    if ((st = begin(ctx, op)) || (st = check_n(op, n)) ||
        (st = check_ptr(op, x, count > 0, "x")) ||
        (st = check_ptr(op, out_abs, count > 0, "output")))
        return st;
    if (stride == 0)
        return deftsim_error_set(DEFTSIM_E_INPUT, "kernels: sample_strided: stride 0");
    if (count > 0) {
        size_t last;
        if (deftsim_mul_size(count - 1, stride, &last) || deftsim_add_size(last, start, &last) ||
            last >= n)
            return deftsim_error_set(DEFTSIM_E_INPUT,
                                     "kernels: sample_strided: %zu samples from %zu step %zu "
                                     "run past n = %zu",
                                     count, start, stride, n);
    }
    st = ctx->be->sample_strided(ctx, x, n, start, stride, count, out_abs);
    return account(ctx, st, op, 0, count, 0, (uint64_t)count * 2 * sizeof *x);
}

deftsim_status deftsim_k_sample_random(deftsim_kctx *ctx, const float *x, size_t n,
                                       size_t count, uint64_t seed, float *out_abs)
{
    const deftsim_kop op = DEFTSIM_KOP_SAMPLE_RANDOM;
    deftsim_status st;
    if ((st = begin(ctx, op)) || (st = check_n(op, n)) ||
        (st = check_ptr(op, x, count > 0, "x")) ||
        (st = check_ptr(op, out_abs, count > 0, "output")))
        return st;
    if (count > 0 && n == 0)
        return deftsim_error_set(DEFTSIM_E_INPUT, "kernels: sample_random: samples from n = 0");
    st = ctx->be->sample_random(ctx, x, n, count, seed, out_abs);
    return account(ctx, st, op, 0, count, 0, (uint64_t)count * 2 * sizeof *x);
}

deftsim_status deftsim_k_gather(deftsim_kctx *ctx, const float *x, size_t n,
                                const deftsim_kidx *idx, size_t m, float *vals_out)
{
    const deftsim_kop op = DEFTSIM_KOP_GATHER;
    deftsim_status st;
    if ((st = begin(ctx, op)) || (st = check_n(op, n)) || (st = check_ptr(op, x, m > 0, "x")) ||
        (st = check_ptr(op, idx, m > 0, "indices")) ||
        (st = check_ptr(op, vals_out, m > 0, "output")))
        return st;
    return account(ctx, ctx->be->gather(ctx, x, n, idx, m, vals_out), op, 0, m, 0,
                   (uint64_t)m * (sizeof *idx + sizeof *x) + scattered(m, n, sizeof *x));
}

deftsim_status deftsim_k_zero_at(deftsim_kctx *ctx, float *x, size_t n, const deftsim_kidx *idx,
                                 size_t m)
{
    const deftsim_kop op = DEFTSIM_KOP_ZERO_AT;
    deftsim_status st;
    if ((st = begin(ctx, op)) || (st = check_n(op, n)) || (st = check_ptr(op, x, m > 0, "x")) ||
        (st = check_ptr(op, idx, m > 0, "indices")))
        return st;
    return account(ctx, ctx->be->zero_at(ctx, x, n, idx, m), op, 0, m, 0,
                   (uint64_t)m * sizeof *idx + scattered(m, n, sizeof *x));
}

deftsim_status deftsim_k_scatter_add(deftsim_kctx *ctx, float *dst, size_t n,
                                     const deftsim_kidx *idx, const float *vals, size_t m)
{
    const deftsim_kop op = DEFTSIM_KOP_SCATTER_ADD;
    deftsim_status st;
    if ((st = begin(ctx, op)) || (st = check_n(op, n)) ||
        (st = check_ptr(op, dst, m > 0, "destination")) ||
        (st = check_ptr(op, idx, m > 0, "indices")) || (st = check_ptr(op, vals, m > 0, "values")))
        return st;
    return account(ctx, ctx->be->scatter_add(ctx, dst, n, idx, vals, m), op, 0, m, 0,
                   (uint64_t)m * (sizeof *idx + sizeof *vals) + 2 * scattered(m, n, sizeof *dst));
}

deftsim_status deftsim_k_union_scratch(const deftsim_kctx *ctx, size_t n, size_t *bytes)
{
    const deftsim_kop op = DEFTSIM_KOP_UNION;
    deftsim_status st;
    if ((st = scratch_begin(ctx, op, bytes))) return st;
    if ((st = check_n(op, n))) return st;
    return ctx->be->union_scratch(ctx, n, bytes);
}

deftsim_status deftsim_k_union(deftsim_kctx *ctx, size_t n, const deftsim_kidx *const *lists,
                               const size_t *lens, size_t nlists, deftsim_kidx *out, size_t cap,
                               size_t *count, void *scratch, size_t scratch_bytes)
{
    const deftsim_kop op = DEFTSIM_KOP_UNION;
    deftsim_status st;
    size_t need;
    if ((st = begin(ctx, op)) || (st = deftsim_k_union_scratch(ctx, n, &need)) ||
        (st = check_ptr(op, lists, nlists > 0, "list array")) ||
        (st = check_ptr(op, lens, nlists > 0, "length array")) ||
        (st = check_ptr(op, out, cap > 0, "output")) || (st = check_ptr(op, count, 1, "count")) ||
        (st = check_scratch(op, need, scratch, scratch_bytes)))
        return st;
    for (size_t j = 0; j < nlists; j++)
        if (lens[j] > 0 && !lists[j])
            return deftsim_error_set(DEFTSIM_E_USAGE, "kernels: union: list %zu is NULL", j);
    st = ctx->be->union_(ctx, n, lists, lens, nlists, out, cap, count, scratch, scratch_bytes);
    size_t total = 0;
    for (size_t j = 0; j < nlists; j++) total += lens[j];
    return account(ctx, st, op, n, total, nlists,
                   (uint64_t)(total + (st ? 0 : *count)) * sizeof *out);
}

deftsim_status deftsim_k_merge_topk_scratch(const deftsim_kctx *ctx, size_t na, size_t nb,
                                            size_t *bytes)
{
    const deftsim_kop op = DEFTSIM_KOP_MERGE_TOPK;
    deftsim_status st;
    size_t m;
    if ((st = scratch_begin(ctx, op, bytes))) return st;
    if (deftsim_add_size(na, nb, &m) || (st = check_n(op, m)))
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "kernels: merge_topk: %zu + %zu entries exceed the index range",
                                 na, nb);
    return ctx->be->merge_topk_scratch(ctx, na, nb, bytes);
}

deftsim_status deftsim_k_merge_topk(deftsim_kctx *ctx, const deftsim_kidx *ia, const float *va,
                                    size_t na, const deftsim_kidx *ib, const float *vb,
                                    size_t nb, size_t k, deftsim_kidx *out_idx, float *out_val,
                                    size_t *out_n, void *scratch, size_t scratch_bytes)
{
    const deftsim_kop op = DEFTSIM_KOP_MERGE_TOPK;
    deftsim_status st;
    size_t need;
    if ((st = begin(ctx, op)) || (st = deftsim_k_merge_topk_scratch(ctx, na, nb, &need)) ||
        (st = check_ptr(op, ia, na > 0, "indices a")) || (st = check_ptr(op, va, na > 0, "values a")) ||
        (st = check_ptr(op, ib, nb > 0, "indices b")) || (st = check_ptr(op, vb, nb > 0, "values b")) ||
        (st = check_ptr(op, out_idx, k > 0 && na + nb > 0, "output indices")) ||
        (st = check_ptr(op, out_val, k > 0 && na + nb > 0, "output values")) ||
        (st = check_ptr(op, out_n, 1, "output count")) ||
        (st = check_scratch(op, need, scratch, scratch_bytes)))
        return st;
    st = ctx->be->merge_topk(ctx, ia, va, na, ib, vb, nb, k, out_idx, out_val, out_n, scratch,
                             scratch_bytes);
    return account(ctx, st, op, na + nb, k, 0,
                   (uint64_t)(na + nb + (st ? 0 : *out_n)) * (sizeof *ia + sizeof *va));
}
