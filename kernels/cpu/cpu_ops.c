/* cpu_ops.c - the streaming and sparse operations: absmax, norms, threshold filter and count,
 * sampling, gather, zero, scatter-add, union, merge. */
#include <math.h>

#include "cpu_internal.h"
#include "deftsim_rng.h"

/* Threshold t as a rank: |x| >= t. t <= 0 (either zero, -Inf) admits every number. */
static uint32_t rank_threshold(float t) { return t <= 0.0f ? 1u : cpu_rank(t); }

/* ---- absmax ----------------------------------------------------------------------------- */

typedef struct {
    const cpu_isa *isa;
    const float *x;
    size_t n;
    float *mx;
    size_t *nan;
} absmax_job;

static void absmax_task(void *arg, unsigned t, unsigned nrun)
{
    absmax_job *j = arg;
    size_t lo, hi, nan = 0;
    cpu_split(j->n, nrun, t, 64, &lo, &hi);
    j->mx[t] = j->isa->absmax(j->x + lo, hi - lo, &nan);
    j->nan[t] = nan;
}

deftsim_status cpu_absmax(deftsim_kctx *ctx, const float *x, size_t n, float *out)
{
    cpu_state *cs = cpu_st(ctx);
    unsigned nrun = cpu_threads_for(ctx, n);
    absmax_job j = {cpu_isa_for(ctx), x, n, cs->slot_f, cs->slot_a};
    cpu_pool_run(cs->pool, nrun, absmax_task, &j);
    float m = -1.0f;
    for (unsigned t = 0; t < nrun; t++) {
        m = cs->slot_f[t] > m ? cs->slot_f[t] : m;
        ctx->last.nan_count += cs->slot_a[t];
    }
    *out = m < 0 ? 0.0f : m;
    ctx->last.threads = nrun;
    return DEFTSIM_OK;
}

/* ---- Fragment norms ----------------------------------------------------------------------
 * Each fragment is cut into blocks of CPU_NORM_BLOCK elements from its own start; every block's
 * sum of squares is stored, and a fragment's sum adds its blocks in order. Threads split the
 * global list of blocks, so neither the thread count nor the split changes a single bit. */

static size_t norm_blocks(const deftsim_kseg *segs, size_t nseg)
{
    size_t nb = 0;
    for (size_t f = 0; f < nseg; f++) nb += (segs[f].len + CPU_NORM_BLOCK - 1) / CPU_NORM_BLOCK;
    return nb;
}

deftsim_status cpu_seg_norms_scratch(const deftsim_kctx *ctx, const deftsim_kseg *segs,
                                     size_t nseg, size_t *bytes)
{
    (void)ctx;
    *bytes = 64 + cpu_round64(norm_blocks(segs, nseg) * sizeof(double));
    return DEFTSIM_OK;
}

typedef struct {
    const cpu_isa *isa;
    const float *x;
    const deftsim_kseg *segs;
    size_t nseg, nblocks;
    double *part;
} norms_job;

static void norms_task(void *arg, unsigned t, unsigned nrun)
{
    norms_job *j = arg;
    size_t lo, hi, b = 0;
    cpu_split(j->nblocks, nrun, t, 1, &lo, &hi);
    for (size_t f = 0; f < j->nseg && b < hi; f++) {
        const deftsim_kseg *s = &j->segs[f];
        size_t fb = (s->len + CPU_NORM_BLOCK - 1) / CPU_NORM_BLOCK;
        if (b + fb <= lo) {
            b += fb;
            continue;
        }
        for (size_t q = 0; q < fb; q++, b++) {
            if (b < lo || b >= hi) continue;
            size_t off = q * CPU_NORM_BLOCK;
            size_t len = s->len - off < CPU_NORM_BLOCK ? s->len - off : CPU_NORM_BLOCK;
            j->part[b] = j->isa->sumsq(j->x + s->offset + off, len);
        }
    }
}

deftsim_status cpu_seg_norms(deftsim_kctx *ctx, const float *x, size_t n,
                             const deftsim_kseg *segs, size_t nseg, double *norms,
                             void *scratch, size_t scratch_bytes)
{
    (void)n;
    cpu_state *cs = cpu_st(ctx);
    cpu_arena a;
    cpu_arena_init(&a, scratch, scratch_bytes);
    size_t nb = norm_blocks(segs, nseg), total = 0;
    for (size_t f = 0; f < nseg; f++) total += segs[f].len;
    unsigned nrun = cpu_threads_for(ctx, total);
    if (nrun > nb) nrun = nb ? (unsigned)nb : 1;
    norms_job j = {cpu_isa_for(ctx), x, segs, nseg, nb, cpu_arena_take(&a, nb * sizeof(double))};
    if (nb) cpu_pool_run(cs->pool, nrun, norms_task, &j);
    size_t b = 0;
    for (size_t f = 0; f < nseg; f++) {
        size_t fb = (segs[f].len + CPU_NORM_BLOCK - 1) / CPU_NORM_BLOCK;
        double s = 0.0;
        for (size_t q = 0; q < fb; q++) s += j.part[b++];
        /* A sum of squares is NaN only if an element is: count them only then. */
        if (isnan(s))
            for (size_t i = 0; i < segs[f].len; i++)
                ctx->last.nan_count += isnan(x[segs[f].offset + i]) ? 1 : 0;
        norms[f] = sqrt(s);
    }
    ctx->last.threads = nrun;
    return DEFTSIM_OK;
}

/* ---- Accumulate with fragment sums of squares --------------------------------------------
 * The same blocks as the norms (CPU_NORM_BLOCK from each fragment's start, one acc_sumsq call
 * each, the fragment's sum adding its blocks in order), plus the gaps between fragments cut
 * into blocks whose sums are dropped. Threads split the list of blocks, gaps included. */

typedef struct {
    const cpu_isa *isa;
    float *acc;
    const float *g;
    size_t n;
    int copy;
    const deftsim_kseg *segs;
    size_t nseg;
    size_t nitems;
    double *part;
} acc_job;

/* Walks the blocks in address order; with run set, processes those numbered [lo, hi).
 * Returns the number of blocks. */
static size_t acc_items(const acc_job *j, size_t lo, size_t hi, int run)
{
    const size_t B = CPU_NORM_BLOCK;
    size_t it = 0, b = 0, pos = 0;
    for (size_t f = 0; f <= j->nseg; f++) {
        if (run && it >= hi) break;
        size_t start = f < j->nseg ? j->segs[f].offset : j->n;
        if (start > pos) {
            size_t gi = (start - pos + B - 1) / B;
            if (run && it + gi > lo && it < hi)
                for (size_t q = 0; q < gi; q++) {
                    if (it + q < lo || it + q >= hi) continue;
                    size_t off = pos + q * B, len = start - off < B ? start - off : B;
                    (void)j->isa->acc_sumsq(j->acc + off, j->g + off, len, j->copy);
                }
            it += gi;
        }
        if (f == j->nseg) break;
        const deftsim_kseg *s = &j->segs[f];
        size_t fb = (s->len + B - 1) / B;
        if (run && it + fb > lo && it < hi)
            for (size_t q = 0; q < fb; q++) {
                if (it + q < lo || it + q >= hi) continue;
                size_t off = q * B, len = s->len - off < B ? s->len - off : B;
                j->part[b + q] = j->isa->acc_sumsq(j->acc + s->offset + off,
                                                   j->g + s->offset + off, len, j->copy);
            }
        it += fb;
        b += fb;
        pos = s->offset + s->len;
    }
    return it;
}

static void acc_task(void *arg, unsigned t, unsigned nrun)
{
    acc_job *j = arg;
    size_t lo, hi;
    cpu_split(j->nitems, nrun, t, 1, &lo, &hi);
    if (lo < hi) acc_items(j, lo, hi, 1);
}

deftsim_status cpu_accumulate_scratch(const deftsim_kctx *ctx, const deftsim_kseg *segs,
                                      size_t nseg, size_t *bytes)
{
    return cpu_seg_norms_scratch(ctx, segs, nseg, bytes);
}

deftsim_status cpu_accumulate(deftsim_kctx *ctx, float *acc, const float *g, size_t n, int mode,
                              const deftsim_kseg *segs, size_t nseg, double *sumsq_out,
                              void *scratch, size_t scratch_bytes)
{
    cpu_state *cs = cpu_st(ctx);
    cpu_arena a;
    cpu_arena_init(&a, scratch, scratch_bytes);
    size_t nb = norm_blocks(segs, nseg);
    acc_job j = {cpu_isa_for(ctx), acc, g, n, mode == DEFTSIM_KACC_COPY, segs, nseg, 0,
                 cpu_arena_take(&a, nb * sizeof(double))};
    j.nitems = acc_items(&j, 0, 0, 0);
    unsigned nrun = cpu_threads_for(ctx, n);
    if (nrun > j.nitems) nrun = j.nitems ? (unsigned)j.nitems : 1;
    if (j.nitems) cpu_pool_run(cs->pool, nrun, acc_task, &j);
    size_t b = 0;
    for (size_t f = 0; f < nseg; f++) {
        size_t fb = (segs[f].len + CPU_NORM_BLOCK - 1) / CPU_NORM_BLOCK;
        double s = 0.0;
        for (size_t q = 0; q < fb; q++) s += j.part[b++];
        if (isnan(s))
            for (size_t i = 0; i < segs[f].len; i++)
                ctx->last.nan_count += isnan(acc[segs[f].offset + i]) ? 1 : 0;
        sumsq_out[f] = s;
    }
    ctx->last.threads = nrun;
    return DEFTSIM_OK;
}

/* ---- Threshold filter and count ---------------------------------------------------------- */

typedef struct {
    const cpu_isa *isa;
    const float *x;
    size_t n;
    uint32_t T;
    uint32_t *out;
    size_t cap;
    size_t *count, *nan, *off;
} filter_job;

static void count_task(void *arg, unsigned t, unsigned nrun)
{
    filter_job *j = arg;
    size_t lo, hi, nan = 0;
    cpu_split(j->n, nrun, t, 64, &lo, &hi);
    j->count[t] = j->isa->count_ge(j->x + lo, hi - lo, j->T, &nan);
    j->nan[t] = nan;
}

static void write_task(void *arg, unsigned t, unsigned nrun)
{
    filter_job *j = arg;
    size_t lo, hi, nan = 0;
    cpu_split(j->n, nrun, t, 64, &lo, &hi);
    size_t off = j->off[t];
    if (off >= j->cap) return;
    size_t room = j->cap - off < j->count[t] ? j->cap - off : j->count[t];
    j->isa->filter_idx(j->x + lo, hi - lo, (uint32_t)lo, j->T, j->out + off, room, &nan);
}

deftsim_status cpu_filter_ge(deftsim_kctx *ctx, const float *x, size_t n, float t,
                             deftsim_kidx *out, size_t cap, size_t *count)
{
    cpu_state *cs = cpu_st(ctx);
    const cpu_isa *isa = cpu_isa_for(ctx);
    unsigned nrun = cpu_threads_for(ctx, n);
    uint32_t T = rank_threshold(t);
    size_t nan = 0;
    if (nrun == 1) {
        *count = isa->filter_idx(x, n, 0, T, out, cap, &nan);
        ctx->last.nan_count = nan;
        return DEFTSIM_OK;
    }
    /* In parallel the output offsets are unknown until every part is counted: one counting
     * pass, then a writing pass at known offsets (two reads, each split over the threads). */
    filter_job j = {isa, x, n, T, out, cap, cs->slot_a, cs->slot_b, cs->slot_c};
    cpu_pool_run(cs->pool, nrun, count_task, &j);
    size_t total = 0;
    for (unsigned u = 0; u < nrun; u++) {
        cs->slot_c[u] = total;
        total += cs->slot_a[u];
        ctx->last.nan_count += cs->slot_b[u];
    }
    if (cap > 0 && total > 0) cpu_pool_run(cs->pool, nrun, write_task, &j);
    *count = total;
    ctx->last.threads = nrun;
    return DEFTSIM_OK;
}

deftsim_status cpu_count_ge(deftsim_kctx *ctx, const float *x, size_t n, float t, size_t *count)
{
    cpu_state *cs = cpu_st(ctx);
    unsigned nrun = cpu_threads_for(ctx, n);
    filter_job j = {cpu_isa_for(ctx), x, n, rank_threshold(t), NULL, 0, cs->slot_a, cs->slot_b,
                    NULL};
    cpu_pool_run(cs->pool, nrun, count_task, &j);
    size_t total = 0;
    for (unsigned u = 0; u < nrun; u++) {
        total += cs->slot_a[u];
        ctx->last.nan_count += cs->slot_b[u];
    }
    *count = total;
    ctx->last.threads = nrun;
    return DEFTSIM_OK;
}

/* ---- Sampling ----------------------------------------------------------------------------- */

deftsim_status cpu_sample_strided(deftsim_kctx *ctx, const float *x, size_t n, size_t start,
                                  size_t stride, size_t count, float *out)
{
    (void)n;
    size_t nan = 0;
    for (size_t i = 0; i < count; i++) {
        float v = x[start + i * stride];
        nan += isnan(v) ? 1 : 0;
        out[i] = fabsf(v);
    }
    ctx->last.nan_count = nan;
    return DEFTSIM_OK;
}

/* floor(r * n / 2^64) without a 128-bit type: uniform on [0, n) up to a bias below n / 2^64. */
static inline uint64_t mulhi64(uint64_t r, uint64_t n)
{
    uint64_t rl = r & 0xffffffffu, rh = r >> 32, nl = n & 0xffffffffu, nh = n >> 32;
    uint64_t ll = rl * nl, lh = rl * nh, hl = rh * nl, hh = rh * nh;
    uint64_t mid = (ll >> 32) + (lh & 0xffffffffu) + (hl & 0xffffffffu);
    return hh + (lh >> 32) + (hl >> 32) + (mid >> 32);
}

deftsim_status cpu_sample_random(deftsim_kctx *ctx, const float *x, size_t n, size_t count,
                                 uint64_t seed, float *out)
{
    size_t nan = 0;
    for (size_t i = 0; i < count; i++) {
        uint64_t r = deftsim_splitmix64(seed ^ deftsim_splitmix64((uint64_t)i));
        float v = x[mulhi64(r, (uint64_t)n)];
        nan += isnan(v) ? 1 : 0;
        out[i] = fabsf(v);
    }
    ctx->last.nan_count = nan;
    return DEFTSIM_OK;
}

/* ---- Sparse operations -------------------------------------------------------------------
 * Indices are checked before anything is written, so a call that fails changes nothing. */

static deftsim_status check_indices(const char *op, const deftsim_kidx *idx, size_t m, size_t n)
{
    uint32_t mx = 0;
    for (size_t i = 0; i < m; i++) mx = idx[i] > mx ? idx[i] : mx;
    if (m > 0 && (size_t)mx >= n) {
        for (size_t i = 0; i < m; i++)
            if ((size_t)idx[i] >= n)
                return deftsim_error_set(DEFTSIM_E_INPUT,
                                         "kernels: %s: index %u at position %zu is outside [0, %zu)",
                                         op, idx[i], i, n);
    }
    return DEFTSIM_OK;
}

typedef struct {
    float *dst;
    const float *src;
    size_t n;
    const deftsim_kidx *idx;
    const float *vals;
    size_t m;
    size_t *nan;
} sparse_job;

static void gather_task(void *arg, unsigned t, unsigned nrun)
{
    sparse_job *j = arg;
    size_t lo, hi, nan = 0;
    cpu_split(j->m, nrun, t, 16, &lo, &hi);
    for (size_t i = lo; i < hi; i++) {
        float v = j->src[j->idx[i]];
        nan += isnan(v) ? 1 : 0;
        j->dst[i] = v;
    }
    j->nan[t] = nan;
}

deftsim_status cpu_gather(deftsim_kctx *ctx, const float *x, size_t n, const deftsim_kidx *idx,
                          size_t m, float *out)
{
    deftsim_status st = check_indices("gather", idx, m, n);
    if (st) return st;
    cpu_state *cs = cpu_st(ctx);
    unsigned nrun = cpu_threads_for(ctx, m);
    sparse_job j = {out, x, n, idx, NULL, m, cs->slot_a};
    cpu_pool_run(cs->pool, nrun, gather_task, &j);
    for (unsigned t = 0; t < nrun; t++) ctx->last.nan_count += cs->slot_a[t];
    ctx->last.threads = nrun;
    return DEFTSIM_OK;
}

/* Writes by destination ownership: thread t touches only dst[lo_t, hi_t), scanning the whole
 * list. No two threads write one element, and each element sees its updates in list order. */
static void zero_task(void *arg, unsigned t, unsigned nrun)
{
    sparse_job *j = arg;
    size_t lo, hi;
    cpu_split(j->n, nrun, t, 16, &lo, &hi);
    for (size_t i = 0; i < j->m; i++) {
        size_t d = j->idx[i];
        if (d >= lo && d < hi) j->dst[d] = 0.0f;
    }
}

deftsim_status cpu_zero_at(deftsim_kctx *ctx, float *x, size_t n, const deftsim_kidx *idx,
                           size_t m)
{
    deftsim_status st = check_indices("zero_at", idx, m, n);
    if (st) return st;
    cpu_state *cs = cpu_st(ctx);
    unsigned nrun = cpu_threads_for(ctx, m);
    sparse_job j = {x, NULL, n, idx, NULL, m, NULL};
    if (nrun == 1)
        for (size_t i = 0; i < m; i++) x[idx[i]] = 0.0f;
    else
        cpu_pool_run(cs->pool, nrun, zero_task, &j);
    ctx->last.threads = nrun;
    return DEFTSIM_OK;
}

static void scatter_task(void *arg, unsigned t, unsigned nrun)
{
    sparse_job *j = arg;
    size_t lo, hi;
    cpu_split(j->n, nrun, t, 16, &lo, &hi);
    for (size_t i = 0; i < j->m; i++) {
        size_t d = j->idx[i];
        if (d >= lo && d < hi) j->dst[d] += j->vals[i];
    }
}

deftsim_status cpu_scatter_add(deftsim_kctx *ctx, float *dst, size_t n, const deftsim_kidx *idx,
                               const float *vals, size_t m)
{
    deftsim_status st = check_indices("scatter_add", idx, m, n);
    if (st) return st;
    cpu_state *cs = cpu_st(ctx);
    for (size_t i = 0; i < m; i++) ctx->last.nan_count += isnan(vals[i]) ? 1 : 0;
    unsigned nrun = cpu_threads_for(ctx, m);
    sparse_job j = {dst, NULL, n, idx, vals, m, NULL};
    if (nrun == 1)
        for (size_t i = 0; i < m; i++) dst[idx[i]] += vals[i];
    else
        cpu_pool_run(cs->pool, nrun, scatter_task, &j);
    ctx->last.threads = nrun;
    return DEFTSIM_OK;
}

/* ---- Sorted union ------------------------------------------------------------------------
 * A bitmap over the universe: marking is one store per index whatever the lists' order, and
 * reading the bitmap back yields the union sorted and without duplicates. Threads own word
 * ranges of the bitmap (so no word is shared), each scanning every list. */

deftsim_status cpu_union_scratch(const deftsim_kctx *ctx, size_t n, size_t *bytes)
{
    (void)ctx;
    *bytes = 64 + cpu_round64((n + 63) / 64 * sizeof(uint64_t));
    return DEFTSIM_OK;
}

typedef struct {
    uint64_t *bits;
    size_t words;
    const deftsim_kidx *const *lists;
    const size_t *lens;
    size_t nlists;
    uint32_t *out;
    size_t cap;
    size_t *count, *off;
} union_job;

static void union_mark_task(void *arg, unsigned t, unsigned nrun)
{
    union_job *j = arg;
    size_t wlo, whi;
    cpu_split(j->words, nrun, t, 8, &wlo, &whi);
    if (whi > wlo) memset(j->bits + wlo, 0, (whi - wlo) * sizeof(uint64_t));
    uint64_t lo = (uint64_t)wlo * 64, hi = (uint64_t)whi * 64;
    for (size_t l = 0; l < j->nlists; l++)
        for (size_t i = 0; i < j->lens[l]; i++) {
            uint64_t d = j->lists[l][i];
            if (nrun == 1 || (d >= lo && d < hi)) j->bits[d >> 6] |= (uint64_t)1 << (d & 63);
        }
    size_t c = 0;
    for (size_t w = wlo; w < whi; w++) c += (size_t)__builtin_popcountll(j->bits[w]);
    j->count[t] = c;
}

static void union_emit_task(void *arg, unsigned t, unsigned nrun)
{
    union_job *j = arg;
    size_t wlo, whi;
    cpu_split(j->words, nrun, t, 8, &wlo, &whi);
    size_t o = j->off[t];
    for (size_t w = wlo; w < whi && o < j->cap; w++) {
        uint64_t b = j->bits[w];
        while (b && o < j->cap) {
            j->out[o++] = (uint32_t)(w * 64 + (size_t)__builtin_ctzll(b));
            b &= b - 1;
        }
    }
}

deftsim_status cpu_union(deftsim_kctx *ctx, size_t n, const deftsim_kidx *const *lists,
                         const size_t *lens, size_t nlists, deftsim_kidx *out, size_t cap,
                         size_t *count, void *scratch, size_t scratch_bytes)
{
    size_t total = 0;
    for (size_t l = 0; l < nlists; l++) {
        deftsim_status st = check_indices("union", lists[l], lens[l], n);
        if (st) return deftsim_error_wrap(st, "list %zu", l);
        total += lens[l];
    }
    cpu_state *cs = cpu_st(ctx);
    cpu_arena a;
    cpu_arena_init(&a, scratch, scratch_bytes);
    size_t words = (n + 63) / 64;
    unsigned nrun = cpu_threads_for(ctx, total > words ? total : words);
    union_job j = {cpu_arena_take(&a, words * sizeof(uint64_t)), words, lists, lens, nlists, out,
                   cap, cs->slot_a, cs->slot_b};
    *count = 0;
    if (words == 0) return DEFTSIM_OK;
    cpu_pool_run(cs->pool, nrun, union_mark_task, &j);
    size_t c = 0;
    for (unsigned t = 0; t < nrun; t++) {
        cs->slot_b[t] = c;
        c += cs->slot_a[t];
    }
    if (cap > 0 && c > 0) cpu_pool_run(cs->pool, nrun, union_emit_task, &j);
    *count = c;
    ctx->last.threads = nrun;
    return DEFTSIM_OK;
}

/* ---- gTop-k merge --------------------------------------------------------------------------
 * Both sets are copied into one array (a first), sorted by index with a stable LSD radix sort,
 * equal indices summed in that order, and the exact top-k taken by |sum| with the common
 * candidate selection (entries in index order, so ties go to the lower index). */

deftsim_status cpu_merge_topk_scratch(const deftsim_kctx *ctx, size_t na, size_t nb,
                                      size_t *bytes)
{
    (void)ctx;
    size_t m = na + nb;
    *bytes = 64 + 6 * cpu_round64((m + CPU_SLACK) * sizeof(uint32_t)) +
             cpu_round64(CPU_HIST * sizeof(uint32_t));
    return DEFTSIM_OK;
}

deftsim_status cpu_merge_topk(deftsim_kctx *ctx, const deftsim_kidx *ia, const float *va,
                              size_t na, const deftsim_kidx *ib, const float *vb, size_t nb,
                              size_t k, deftsim_kidx *out_idx, float *out_val, size_t *out_n,
                              void *scratch, size_t scratch_bytes)
{
    size_t m = na + nb, nan = 0;
    cpu_arena a;
    cpu_arena_init(&a, scratch, scratch_bytes);
    size_t sz = (m + CPU_SLACK) * sizeof(uint32_t);
    uint32_t *i0 = cpu_arena_take(&a, sz), *i1 = cpu_arena_take(&a, sz);
    float *v0 = cpu_arena_take(&a, sz), *v1 = cpu_arena_take(&a, sz);
    uint32_t *pos = cpu_arena_take(&a, sz), *key = cpu_arena_take(&a, sz);
    uint32_t *hist = cpu_arena_take(&a, CPU_HIST * sizeof(uint32_t));
    *out_n = 0;
    if (m == 0) return DEFTSIM_OK;
    for (size_t i = 0; i < na; i++) {
        i0[i] = ia[i];
        v0[i] = va[i];
        nan += isnan(va[i]) ? 1 : 0;
    }
    for (size_t i = 0; i < nb; i++) {
        i0[na + i] = ib[i];
        v0[na + i] = vb[i];
        nan += isnan(vb[i]) ? 1 : 0;
    }
    static const unsigned shift[3] = {0, 11, 22};
    for (int p = 0; p < 3; p++) {
        memset(hist, 0, CPU_HIST * sizeof *hist);
        for (size_t i = 0; i < m; i++) hist[(i0[i] >> shift[p]) & (CPU_HIST - 1)]++;
        size_t sum = 0, used = 0;
        for (size_t d = 0; d < CPU_HIST; d++) {
            size_t h = hist[d];
            used += h > 0;
            hist[d] = (uint32_t)sum;
            sum += h;
        }
        if (used <= 1) continue; /* every index shares this digit: already in order */
        for (size_t i = 0; i < m; i++) {
            uint32_t d = (i0[i] >> shift[p]) & (CPU_HIST - 1), o = hist[d]++;
            i1[o] = i0[i];
            v1[o] = v0[i];
        }
        uint32_t *ti = i0;
        i0 = i1;
        i1 = ti;
        float *tv = v0;
        v0 = v1;
        v1 = tv;
    }
    size_t u = 0;
    for (size_t i = 0; i < m; i++) {
        if (u > 0 && i0[u - 1] == i0[i]) {
            v0[u - 1] += v0[i];
        } else {
            i0[u] = i0[i];
            v0[u++] = v0[i];
        }
    }
    for (size_t i = 0; i < u; i++) {
        pos[i] = (uint32_t)i;
        key[i] = cpu_key(v0[i]);
    }
    size_t kk = k < u ? k : u;
    (void)cpu_select_candidates(cpu_isa_for(ctx), pos, key, u, kk, out_idx, hist, NULL);
    for (size_t i = 0; i < kk; i++) {
        uint32_t p = out_idx[i];
        out_idx[i] = i0[p];
        out_val[i] = v0[p];
    }
    *out_n = kk;
    ctx->last.nan_count = nan;
    return DEFTSIM_OK;
}
