/* cpu_topk.c - exact top-k by magnitude, whole vectors and fragments.
 *
 * The cost to beat is one read of the input. Three paths:
 *
 * - In-cache path (n <= CPU_SMALL_MAX, which covers DEFT's fragments): one pass takes the
 *   maximum of each of about 4k groups (columns of a block of rows, vectorized). The k-th
 *   largest group maximum T is a threshold that at least k elements reach, by construction:
 *   the k groups with the largest maxima each contribute one. So nothing can be missed and no
 *   fallback exists. A second pass, over data still in cache, gathers the elements >= T
 *   (about k plus the few top elements that shared a group) and an exact selection finishes.
 *   Per fragment this costs no fixed setup beyond a histogram of at most CPU_HIST buckets
 *   used only by large candidate sets.
 * - Sampled path (large inputs): a second pass over DRAM would double the cost, so the
 *   threshold comes from a sample of whole cache lines, one at a random position in each of
 *   `lines` equal strata (a random single element costs a whole line transfer anyway, so
 *   taking all 16 elements of the line is free). The threshold is set conservatively from
 *   the sample (the expected sample count above the true k-th element plus 3.5 standard
 *   deviations plus 4), one vectorized pass gathers (index, key) of the elements above it,
 *   and an exact radix select finishes among them.
 * - Radix fallback: when the sample misses (fewer than k candidates, or more than the
 *   candidate buffer holds; heavy ties cause the latter), a radix select over the whole
 *   input: histogram passes on 11, 11 and 9 bits of the rank until the boundary bucket fits
 *   the candidate buffer, then one pass that emits everything above the bucket and gathers
 *   the bucket. Two to four reads of the input; exact for any data, ties included.
 *
 * Every path ends in cpu_select_ranked(), whose input is in ascending index order, which
 * makes "lower index wins ties" free. */
#include <math.h>
#include <stdatomic.h>

#include "cpu_internal.h"

/* Largest input for the in-cache path: 256 KiB of floats stays in L2 between the passes. */
#define CPU_SMALL_MAX 65536
/* Group maxima per wanted element in the in-cache path. */
#define GROUP_FACTOR 4
/* Resolution of the in-cache path's threshold over many group maxima, in ranks: 2^16 ranks
 * are about 0.8% of a value (2^23 ranks per binade). */
#define GROUP_RES (1u << 16)
/* Consecutive fragments handed to a thread at a time in segmented top-k, in elements. */
#define SEG_BATCH 65536

typedef enum { PATH_NONE, PATH_SMALL, PATH_SAMPLE, PATH_RADIX } topk_path;

static topk_path choose_path(size_t n, size_t k, unsigned flags)
{
    if (k == 0 || k == n) return PATH_NONE;
    if (flags & DEFTSIM_KFLAG_FORCE_FALLBACK) return PATH_RADIX;
    if (n <= CPU_SMALL_MAX && !(flags & DEFTSIM_KFLAG_FORCE_SAMPLING)) return PATH_SMALL;
    return PATH_SAMPLE;
}

/* Rows of 8 per group in the in-cache path; below 2 grouping saves nothing. */
static size_t group_rows(size_t n, size_t k) { return (8 * (n / 8)) / (GROUP_FACTOR * k); }

/* Candidate capacity (per thread) of the sampled and radix paths. */
static size_t cand_cap(size_t n, size_t k)
{
    size_t c = 2 * k + 65536;
    return c < n ? c : n;
}

/* Sample plan: `lines` cache lines of 16 elements; threshold = the r-th largest sampled rank.
 * Lines lie on a 16-element grid from x[0]; with fewer than 4 full lines every element is
 * sampled. */
typedef struct {
    size_t lines, S, r;
} sample_plan;

static sample_plan plan_sample(size_t n, size_t k)
{
    sample_plan p;
    size_t nl = n / 16;
    if (nl < 4) {
        p.lines = 0;
        p.S = n;
    } else {
        /* mu, the expected sample count above the k-th element, trades the sample's cost
         * (about n / k * mu elements read at random) against the selection's (about
         * k * (1 + 3.5 / sqrt(mu)) candidates); the balance lies near (k^2 / n)^(2/3). */
        double mu = pow((double)k * (double)k / (double)n, 2.0 / 3.0);
        mu = mu < 32 ? 32 : mu > 1024 ? 1024 : mu;
        double want_d = mu * (double)n / (double)k / 16.0 + 1.0;
        size_t want = want_d > (double)nl ? nl : (size_t)want_d;
        size_t lo = nl < 64 ? nl : 64, hi = nl / 16 > lo ? nl / 16 : lo;
        p.lines = want < lo ? lo : want > hi ? hi : want;
        p.S = 16 * p.lines;
    }
    double mu = (double)p.S * (double)k / (double)n;
    double r = mu + 3.5 * sqrt(mu) + 4.0;
    p.r = r >= (double)p.S ? p.S : (size_t)r + 1;
    if (p.r < 1) p.r = 1;
    return p;
}

/* Working memory for one top-k (one fragment, or one whole vector on nrun threads). */
typedef struct {
    uint32_t *cidx, *ckey; /* nrun regions of cap + CPU_SLACK */
    size_t cap;
    uint32_t *aux;         /* group maxima, or the sample */
    uint32_t *lines;       /* sampled line numbers */
    uint32_t *hist;        /* nrun * CPU_HIST */
} topk_ws;

typedef struct {
    size_t cand, aux, lines, hist;
} ws_sizes;

static ws_sizes ws_sizes_for(size_t n, size_t k, unsigned flags, unsigned nrun)
{
    ws_sizes z = {0, 0, 0, 0};
    switch (choose_path(n, k, flags)) {
    case PATH_NONE: return z;
    case PATH_SMALL:
        /* With R >= 2 rows per group there are at most 8 ceil(rows / 2) + 1 <= n / 2 + 5
         * groups: a bound without divisions, since segmented top-k sizes every fragment on
         * every call. */
        z.cand = n;
        z.aux = n / 2 + 8;
        z.hist = 1;
        return z;
    case PATH_SAMPLE: {
        sample_plan p = plan_sample(n, k);
        z.aux = p.S;
        z.lines = p.lines;
    } /* fall through */
    case PATH_RADIX:
        z.cand = cand_cap(n, k);
        z.hist = nrun;
        return z;
    }
    return z;
}

static size_t ws_bytes(ws_sizes z, unsigned nrun)
{
    if (!z.cand) return 0;
    size_t regions = z.hist > 1 ? nrun : 1;
    return 64 + 2 * cpu_round64(regions * (z.cand + CPU_SLACK) * sizeof(uint32_t)) +
           cpu_round64(z.aux * sizeof(uint32_t)) + cpu_round64(z.lines * sizeof(uint32_t)) +
           cpu_round64(z.hist * CPU_HIST * sizeof(uint32_t));
}

static void ws_carve(cpu_arena *a, ws_sizes z, unsigned nrun, topk_ws *w)
{
    size_t regions = z.hist > 1 ? nrun : 1;
    w->cap = z.cand;
    w->cidx = cpu_arena_take(a, regions * (z.cand + CPU_SLACK) * sizeof(uint32_t));
    w->ckey = cpu_arena_take(a, regions * (z.cand + CPU_SLACK) * sizeof(uint32_t));
    w->aux = cpu_arena_take(a, z.aux * sizeof(uint32_t));
    w->lines = cpu_arena_take(a, z.lines * sizeof(uint32_t));
    w->hist = cpu_arena_take(a, z.hist * CPU_HIST * sizeof(uint32_t));
}

/* Segmented top-k: every buffer of a thread's working set starts at a fixed offset from the
 * input's address modulo 4 KiB, away from it. DEFT's fragments mostly start at multiples of
 * 4 KiB from x (layer sizes are multiples of 1024 elements), and when a buffer that the
 * gathers and the group maxima store to lies at the same offset as those starts, every
 * fragment's first loads wait on the stores (4 KiB aliasing): segmented top-k at P = 1024
 * took 1.7 times as long with the scratch at one unlucky placement in 64. */
#define SEG_PAGE 4096
#define SEG_NBUF 5
#define SEG_PAD ((size_t)SEG_NBUF * SEG_PAGE)

static void *take_near(cpu_arena *a, size_t bytes, uintptr_t anchor, size_t off)
{
    if (bytes == 0) return NULL;
    size_t skip = (size_t)((anchor + off - (uintptr_t)a->p) & (SEG_PAGE - 1));
    if (skip > a->left) return NULL;
    a->p += skip;
    a->left -= skip;
    return cpu_arena_take(a, bytes);
}

/* ws_carve() for one thread, the buffers at 1, 1.5, 2, 2.5 and 3 KiB past x modulo 4 KiB;
 * the arena needs SEG_PAD bytes beyond ws_bytes(z, 1). */
static void ws_carve_seg(cpu_arena *a, ws_sizes z, const float *x, topk_ws *w)
{
    uintptr_t ax = (uintptr_t)x & ~(uintptr_t)63; /* keeps the buffers 64-byte aligned */
    w->cap = z.cand;
    w->cidx = take_near(a, (z.cand + CPU_SLACK) * sizeof(uint32_t), ax, 1024);
    w->ckey = take_near(a, (z.cand + CPU_SLACK) * sizeof(uint32_t), ax, 1536);
    w->aux = take_near(a, z.aux * sizeof(uint32_t), ax, 2048);
    w->lines = take_near(a, z.lines * sizeof(uint32_t), ax, 2560);
    w->hist = take_near(a, z.hist * CPU_HIST * sizeof(uint32_t), ax, 3072);
}

typedef struct {
    size_t candidates, fallbacks, nan;
} topk_tally;

/* ---- In-cache path ---------------------------------------------------------------------- */

static void topk_small(const cpu_isa *isa, const float *x, size_t n, uint32_t base, size_t k,
                       topk_ws *w, uint32_t *out, topk_tally *tl, uint32_t *kth)
{
    size_t R = group_rows(n, k);
    uint32_t T = 0;
    if (R >= 2) {
        size_t G = cpu_group_count(n, R);
        isa->group_max(x, n, R, w->aux);
        /* Any T at or below the k-th largest maximum is a valid threshold: beyond a few
         * dozen maxima a bound within GROUP_RES ranks is cheaper than the exact value and
         * admits only the elements in that sliver. */
        T = G <= CPU_TINY ? cpu_kth_largest_u32(isa, w->aux, G, k, w->hist)
                          : cpu_kth_lower_bound(isa, w->aux, G, k, GROUP_RES);
    }
    /* Never more than n: cannot overflow. Every NaN is among the candidates, so the selection
     * counts them all. */
    size_t c = isa->gather_idx(x, n, base, T ? T - 1 : 0, w->cidx, n);
    uint32_t lo, hi;
    tl->candidates += c;
    tl->nan += cpu_rank_at(x, base, w->cidx, c, w->ckey, &lo, &hi);
    *kth = cpu_select_ranked(isa, w->cidx, w->ckey, c, k, lo, hi, out, w->hist);
}

/* ---- Radix fallback ----------------------------------------------------------------------- */

static const unsigned lvl_shift[3] = {20, 9, 0};
static const unsigned lvl_width[3] = {11, 11, 9};

typedef struct {
    const float *x;
    size_t n, k;
    uint32_t base;
    topk_ws *w;
    uint32_t *out;
    /* histogram pass */
    unsigned level;
    uint32_t prefix; /* rank >> lvl_shift[level - 1] of the elements in play (level >= 1) */
    size_t *nan;     /* per thread */
    /* final pass */
    int ties;        /* 1: the bucket is a single rank; emit ties in place */
    uint64_t hi_rank; /* rank >= hi_rank: above the bucket, emitted */
    unsigned bshift;
    uint32_t bprefix;
    size_t *above_off; /* per thread: first output slot for its above elements */
    size_t *tie_off;   /* per thread: ties before this thread's chunk */
    size_t need;       /* wanted from the bucket */
    size_t *ccount;    /* per thread: candidates gathered */
} radix_job;

static void radix_hist_task(void *arg, unsigned t, unsigned nrun)
{
    radix_job *j = arg;
    size_t lo, hi, nan = 0;
    cpu_split(j->n, nrun, t, 16, &lo, &hi);
    uint32_t *h = j->w->hist + (size_t)t * CPU_HIST;
    memset(h, 0, CPU_HIST * sizeof *h);
    unsigned sh = lvl_shift[j->level], mask = (1u << lvl_width[j->level]) - 1;
    if (j->level == 0) {
        for (size_t i = lo; i < hi; i++) {
            uint32_t key = cpu_key(j->x[i]);
            nan += key > CPU_KEY_INF;
            h[(cpu_rank_of_key(key) >> sh) & mask]++;
        }
        j->nan[t] = nan;
    } else {
        unsigned psh = lvl_shift[j->level - 1];
        for (size_t i = lo; i < hi; i++) {
            uint32_t r = cpu_rank(j->x[i]);
            if ((r >> psh) == j->prefix) h[(r >> sh) & mask]++;
        }
    }
}

static void radix_emit_task(void *arg, unsigned t, unsigned nrun)
{
    radix_job *j = arg;
    size_t lo, hi;
    cpu_split(j->n, nrun, t, 16, &lo, &hi);
    size_t a = j->above_off[t], c = 0;
    uint32_t *ci = j->w->cidx + (size_t)t * (j->w->cap + CPU_SLACK);
    uint32_t *ck = j->w->ckey + (size_t)t * (j->w->cap + CPU_SLACK);
    size_t tie_seen = j->tie_off[t], tie_base = j->k - j->need;
    for (size_t i = lo; i < hi; i++) {
        uint32_t key = cpu_key(j->x[i]), r = cpu_rank_of_key(key);
        if (r >= j->hi_rank) {
            j->out[a++] = j->base + (uint32_t)i;
        } else if ((r >> j->bshift) == j->bprefix) {
            if (j->ties) {
                if (tie_seen < j->need) j->out[tie_base + tie_seen] = j->base + (uint32_t)i;
                tie_seen++;
            } else {
                ci[c] = j->base + (uint32_t)i;
                ck[c++] = key;
            }
        }
    }
    j->ccount[t] = c;
}

/* Moves the nrun candidate regions together; returns the total. */
static size_t join_regions(topk_ws *w, const size_t *counts, unsigned nrun)
{
    size_t c = counts[0];
    for (unsigned t = 1; t < nrun; t++) {
        size_t off = (size_t)t * (w->cap + CPU_SLACK);
        memmove(w->cidx + c, w->cidx + off, counts[t] * sizeof(uint32_t));
        memmove(w->ckey + c, w->ckey + off, counts[t] * sizeof(uint32_t));
        c += counts[t];
    }
    return c;
}

static void topk_radix(cpu_state *cs, const cpu_isa *isa, unsigned nrun, const float *x, size_t n,
                       uint32_t base,
                       size_t k, topk_ws *w, uint32_t *out, topk_tally *tl, size_t *slot_a,
                       size_t *slot_b, size_t *slot_c)
{
    radix_job j;
    memset(&j, 0, sizeof j);
    j.x = x;
    j.n = n;
    j.k = k;
    j.base = base;
    j.w = w;
    j.out = out;
    j.nan = slot_a;
    j.above_off = slot_a; /* the NaN counts are read before these are reused */
    j.tie_off = slot_b;
    j.ccount = slot_c;
    size_t need = k;
    size_t above_t[256] = {0};
    for (unsigned level = 0; level < 3; level++) {
        j.level = level;
        cpu_pool_run(cs->pool, nrun, radix_hist_task, &j);
        if (level == 0)
            for (unsigned t = 0; t < nrun; t++) tl->nan += j.nan[t];
        /* Sum the threads' histograms into the first. */
        uint32_t *h = w->hist;
        for (unsigned t = 1; t < nrun; t++)
            for (size_t d = 0; d < CPU_HIST; d++) h[d] += w->hist[(size_t)t * CPU_HIST + d];
        size_t nb = (size_t)1 << lvl_width[level], acc = 0, b = nb - 1;
        while (acc + h[b] < need) acc += h[b--];
        /* Per-thread counts above the bucket and in it, from the per-thread histograms (the
         * first thread's was overwritten by the sum: recover it by subtraction). */
        size_t in_bucket_max = 0, tie_before = 0;
        for (unsigned t = nrun; t-- > 0;) {
            size_t ab = 0, inb;
            if (t == 0) {
                size_t others_ab = 0, others_in = 0;
                for (unsigned u = 1; u < nrun; u++) {
                    const uint32_t *hu = w->hist + (size_t)u * CPU_HIST;
                    for (size_t d = b + 1; d < nb; d++) others_ab += hu[d];
                    others_in += hu[b];
                }
                for (size_t d = b + 1; d < nb; d++) ab += h[d];
                ab -= others_ab;
                inb = h[b] - others_in;
            } else {
                const uint32_t *ht = w->hist + (size_t)t * CPU_HIST;
                for (size_t d = b + 1; d < nb; d++) ab += ht[d];
                inb = ht[b];
            }
            above_t[t] += ab;
            slot_c[t] = inb; /* bucket count of thread t, used below */
            if (inb > in_bucket_max) in_bucket_max = inb;
        }
        need -= acc;
        j.prefix = (level == 0 ? 0 : j.prefix << lvl_width[level]) | (uint32_t)b;
        unsigned sh = lvl_shift[level];
        int last = sh == 0;
        if (last || in_bucket_max <= w->cap) {
            j.ties = last;
            j.bshift = sh;
            j.bprefix = j.prefix;
            j.hi_rank = ((uint64_t)j.prefix + 1) << sh;
            j.need = need;
            size_t a = 0;
            for (unsigned t = 0; t < nrun; t++) {
                slot_b[t] = tie_before;
                tie_before += slot_c[t];
            }
            for (unsigned t = 0; t < nrun; t++) {
                slot_a[t] = a;
                a += above_t[t];
            }
            cpu_pool_run(cs->pool, nrun, radix_emit_task, &j);
            if (!last) {
                size_t c = join_regions(w, slot_c, nrun);
                tl->candidates += c;
                (void)cpu_select_candidates(isa, w->cidx, w->ckey, c, need, out + (k - need),
                                            w->hist, NULL);
            }
            return;
        }
    }
}

/* ---- Sampled path ----------------------------------------------------------------------- */

/* The threshold rank; *kmax receives the largest sampled key (a hint for the histogram). */
static uint32_t sample_threshold(const cpu_isa *isa, const float *x, size_t n, size_t k, topk_ws *w,
                                 uint32_t *kmax)
{
    sample_plan p = plan_sample(n, k);
    if (p.lines == 0) {
        for (size_t i = 0; i < n; i++) w->aux[i] = cpu_rank(x[i]);
    } else {
        size_t nl = n / 16;
        uint64_t s = 0x2545f4914f6cdd1dull ^ ((uint64_t)n << 20) ^ (uint64_t)k;
        for (size_t j = 0; j < p.lines; j++) {
            size_t a = (size_t)((uint64_t)j * nl / p.lines);
            size_t b = (size_t)((uint64_t)(j + 1) * nl / p.lines);
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            w->lines[j] = (uint32_t)(a + (size_t)(s % (b - a)));
        }
        /* The lines are independent misses: keep 32 in flight so that they overlap. */
        for (size_t j = 0; j < p.lines && j < 32; j++)
            __builtin_prefetch(x + (size_t)w->lines[j] * 16);
        for (size_t j = 0; j < p.lines; j++) {
            if (j + 32 < p.lines) __builtin_prefetch(x + (size_t)w->lines[j + 32] * 16);
            const float *l = x + (size_t)w->lines[j] * 16;
            for (int e = 0; e < 16; e++) w->aux[16 * j + (size_t)e] = cpu_rank(l[e]);
        }
    }
    uint32_t mx = 0;
    for (size_t i = 0; i < p.S; i++) mx = w->aux[i] > mx ? w->aux[i] : mx;
    *kmax = mx ? mx - 1 : 0;
    return cpu_kth_largest_u32(isa, w->aux, p.S, p.r, w->hist);
}

typedef struct {
    const cpu_isa *isa;
    const float *x;
    size_t n;
    uint32_t base, T;
    topk_ws *w;
    size_t *count;
    int sparse;
} gather_job;

/* Candidate fractions below this take the block-skipping gather. */
#define SPARSE_BELOW 0.005

static void gather_task(void *arg, unsigned t, unsigned nrun)
{
    gather_job *g = arg;
    size_t lo, hi;
    cpu_split(g->n, nrun, t, 16, &lo, &hi);
    size_t off = (size_t)t * (g->w->cap + CPU_SLACK);
    g->count[t] = (g->sparse ? g->isa->gather_sparse : g->isa->gather_cand)(
        g->x + lo, hi - lo, g->base + (uint32_t)lo, g->T ? g->T - 1 : 0, g->w->cidx + off,
        g->w->ckey + off, g->w->cap);
}

/* ---- Carried threshold (segmented top-k) -------------------------------------------------
 * DEFT's fragments come as runs of pieces of one tensor, with similar sizes, densities and
 * statistics. Each thread therefore tries the threshold that suited its previous fragment: a
 * single vectorized pass gathers the elements above it, and if at least k numbers (and not
 * too many elements) pass, the exact selection among them is the answer, as for any
 * threshold. Otherwise the fragment takes its ordinary path. Either way the threshold for the
 * next fragment is adjusted from what this one showed: tightened halfway to the k-th rank
 * when far more than k passed, loosened by the same gap when barely k did. Results do not
 * depend on the guess; only the time does. */
typedef struct {
    int valid;
    uint32_t T;    /* rank threshold to try (>= 1) */
    size_t len, k; /* the fragment it came from */
} seg_hint;

/* About 0.8% of a value in rank space (2^23 ranks per binade). */
#define HINT_STEP (1u << 16)

/* Sizes within a factor 2 of the hint's fragment; densities from a quarter to twice its
 * density: a threshold that suited a denser fragment lets through up to about 4 k, well
 * within the cap of 8 k + 64, whereas one from a sparser fragment lets through too few
 * (heavy-tailed data, whose norms spread k the most, gained most from the wider band). */
static int hint_applies(const seg_hint *h, size_t n, size_t k)
{
    if (!h || !h->valid || n < 64 || k == 0) return 0;
    double r = (double)n / (double)h->len, d = ((double)k / (double)n) / ((double)h->k / (double)h->len);
    return r >= 0.5 && r <= 2.0 && d >= 0.25 && d <= 2.0;
}

static void hint_from_kth(seg_hint *h, size_t n, size_t k, uint32_t kth)
{
    if (!h) return;
    h->valid = kth > 1;
    h->T = kth > HINT_STEP ? kth - HINT_STEP : 1;
    h->len = n;
    h->k = k;
}

static int topk_hinted(const cpu_isa *isa, const float *x, size_t n, uint32_t base, size_t k,
                       topk_ws *w, uint32_t *out, topk_tally *tl, seg_hint *h)
{
    uint32_t T = h->T;
    size_t cap = 8 * k + 64;
    if (cap > w->cap) cap = w->cap;
    int sparse = (double)k < 0.6 * SPARSE_BELOW * (double)n;
    /* A fragment small enough for the in-cache path stays in cache: its passing keys are
     * read again instead of stored. */
    int cached = n <= CPU_SMALL_MAX;
    size_t c = cached   ? isa->gather_idx(x, n, base, T - 1, w->cidx, cap)
               : sparse ? isa->gather_sparse(x, n, base, T - 1, w->cidx, w->ckey, cap)
                        : isa->gather_cand(x, n, base, T - 1, w->cidx, w->ckey, cap);
    if (c == SIZE_MAX) return 0;
    uint32_t lo, hi;
    size_t nan = cached ? cpu_rank_at(x, base, w->cidx, c, w->ckey, &lo, &hi)
                        : cpu_rank_candidates(w->ckey, c, &lo, &hi);
    if (c - nan < k) return 0;
    uint32_t R = cpu_select_ranked(isa, w->cidx, w->ckey, c, k, lo, hi, out, w->hist);
    tl->nan += nan;
    tl->candidates += c;
    uint32_t gap = R > T ? R - T : 0;
    size_t good = c - nan;
    if (good > k + 3 * k / 4 + 6)
        T += gap / 2;
    else if (good < k + k / 10 + 2)
        T = T > gap + HINT_STEP ? T - gap - HINT_STEP : 1;
    h->T = T;
    h->len = n;
    h->k = k;
    return 1;
}

/* One top-k of x[0..n) (absolute index base + i) on nrun threads; hint is NULL outside
 * segmented top-k. */
static void topk_one(cpu_state *cs, const cpu_isa *isa, unsigned flags, unsigned nrun,
                     const float *x, size_t n, uint32_t base, size_t k, topk_ws *w,
                     uint32_t *out, topk_tally *tl, size_t *slot_a, size_t *slot_b,
                     size_t *slot_c, seg_hint *hint)
{
    topk_path path = choose_path(n, k, flags);
    /* Forced paths are for testing those paths: no hint then. */
    int hints = !(flags & (DEFTSIM_KFLAG_FORCE_FALLBACK | DEFTSIM_KFLAG_FORCE_SAMPLING));
    if (path != PATH_NONE && hints && hint_applies(hint, n, k) &&
        topk_hinted(isa, x, n, base, k, w, out, tl, hint))
        return;
    uint32_t kth = 0;
    switch (path) {
    case PATH_NONE:
        for (size_t i = 0; i < k; i++) out[i] = base + (uint32_t)i;
        return;
    case PATH_SMALL:
        topk_small(isa, x, n, base, k, w, out, tl, &kth);
        if (hints) hint_from_kth(hint, n, k, kth);
        return;
    case PATH_RADIX:
        tl->fallbacks++;
        topk_radix(cs, isa, nrun, x, n, base, k, w, out, tl, slot_a, slot_b, slot_c);
        if (hint) hint->valid = 0;
        return;
    case PATH_SAMPLE: break;
    }
    uint32_t kmax;
    sample_plan sp = plan_sample(n, k);
    gather_job g = {isa, x, n, base, sample_threshold(isa, x, n, k, w, &kmax), w, slot_a,
                    (double)sp.r < SPARSE_BELOW * (double)sp.S};
    cpu_pool_run(cs->pool, nrun, gather_task, &g);
    int miss = 0;
    for (unsigned t = 0; t < nrun; t++) miss |= slot_a[t] == SIZE_MAX;
    size_t c = miss ? 0 : join_regions(w, slot_a, nrun), nan = 0;
    /* Below a threshold T >= 1 nothing was gathered, so the k must come from numbers >= T;
     * with T == 0 every element is a candidate and the selection is exact as it stands. */
    if (!miss && g.T == 0) {
        tl->nan += cpu_select_candidates(isa, w->cidx, w->ckey, c, k, out, w->hist, &kth);
        tl->candidates += c;
        if (hints) hint_from_kth(hint, n, k, kth);
        return;
    }
    if (miss || cpu_select_above(isa, w->cidx, w->ckey, c, k, g.T - 1, kmax, out,
                                 w->hist, &nan, &kth)) {
        tl->fallbacks++;
        topk_radix(cs, isa, nrun, x, n, base, k, w, out, tl, slot_a, slot_b, slot_c);
        if (hint) hint->valid = 0;
        return;
    }
    tl->nan += nan;
    tl->candidates += c;
    if (hints) hint_from_kth(hint, n, k, kth);
}

/* ---- Whole-vector top-k ------------------------------------------------------------------ */

deftsim_status cpu_topk_scratch(const deftsim_kctx *ctx, size_t n, size_t k, size_t *bytes)
{
    unsigned nrun = cpu_threads_for(ctx, n);
    *bytes = ws_bytes(ws_sizes_for(n, k, ctx->flags, nrun), nrun);
    return DEFTSIM_OK;
}

deftsim_status cpu_topk(deftsim_kctx *ctx, const float *x, size_t n, size_t k, deftsim_kidx *out,
                        void *scratch, size_t scratch_bytes)
{
    cpu_state *cs = cpu_st(ctx);
    const cpu_isa *isa = cpu_isa_for(ctx);
    unsigned nrun = cpu_threads_for(ctx, n);
    topk_path path = choose_path(n, k, ctx->flags);
    if (path == PATH_SMALL) nrun = 1;
    cpu_arena a;
    cpu_arena_init(&a, scratch, scratch_bytes);
    topk_ws w;
    ws_carve(&a, ws_sizes_for(n, k, ctx->flags, cpu_threads_for(ctx, n)), nrun, &w);
    topk_tally tl = {0, 0, 0};
    topk_one(cs, isa, ctx->flags, nrun, x, n, 0, k, &w, out, &tl, cs->slot_a, cs->slot_b,
             cs->slot_c, NULL);
    ctx->last.threads = path == PATH_NONE ? 1 : nrun;
    ctx->last.candidates = tl.candidates;
    ctx->last.fallbacks = tl.fallbacks;
    ctx->last.nan_count = tl.nan;
    return DEFTSIM_OK;
}

/* ---- Segmented top-k --------------------------------------------------------------------- */

typedef struct {
    cpu_state *cs;
    const cpu_isa *isa;
    unsigned flags;
    const float *x;
    const deftsim_kseg *segs;
    size_t nseg;
    const size_t *koff;   /* nseg: first output slot of each fragment */
    const size_t *bstart; /* nbatch + 1: first fragment of each batch */
    size_t nbatch;
    atomic_size_t next;
    unsigned char *ws_base;
    size_t ws_stride;
    ws_sizes wz;
    uint32_t *out;
    topk_tally tally[256];
} seg_job;

static void seg_task(void *arg, unsigned t, unsigned nrun)
{
    seg_job *j = arg;
    (void)nrun;
    cpu_arena a;
    cpu_arena_init(&a, j->ws_base + (size_t)t * j->ws_stride, j->ws_stride);
    topk_ws w;
    ws_carve_seg(&a, j->wz, j->x, &w);
    topk_tally tl = {0, 0, 0};
    size_t one_a, one_b, one_c;
    seg_hint hint = {0, 0, 0, 0};
    for (;;) {
        size_t b = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (b >= j->nbatch) break;
        for (size_t f = j->bstart[b]; f < j->bstart[b + 1]; f++) {
            const deftsim_kseg *s = &j->segs[f];
            topk_one(j->cs, j->isa, j->flags, 1, j->x + s->offset, s->len, (uint32_t)s->offset,
                     s->k, &w, j->out + j->koff[f], &tl, &one_a, &one_b, &one_c, &hint);
        }
    }
    j->tally[t] = tl;
}

/* Largest per-fragment working set, for one thread. */
static ws_sizes seg_ws(const deftsim_kseg *segs, size_t nseg, unsigned flags)
{
    ws_sizes m = {0, 0, 0, 0};
    for (size_t f = 0; f < nseg; f++) {
        ws_sizes z = ws_sizes_for(segs[f].len, segs[f].k, flags, 1);
        m.cand = z.cand > m.cand ? z.cand : m.cand;
        m.aux = z.aux > m.aux ? z.aux : m.aux;
        m.lines = z.lines > m.lines ? z.lines : m.lines;
        m.hist = z.hist > m.hist ? z.hist : m.hist;
    }
    return m;
}

static size_t seg_total_len(const deftsim_kseg *segs, size_t nseg)
{
    size_t s = 0;
    for (size_t f = 0; f < nseg; f++) s += segs[f].len;
    return s;
}

static size_t seg_batches(const deftsim_kseg *segs, size_t nseg, size_t *bstart)
{
    size_t nb = 0, acc = 0;
    for (size_t f = 0; f < nseg; f++) {
        if (acc == 0) {
            if (bstart) bstart[nb] = f;
            nb++;
        }
        acc += segs[f].len + 1;
        if (acc >= SEG_BATCH) acc = 0;
    }
    if (bstart) bstart[nb] = nseg;
    return nb;
}

deftsim_status cpu_segtopk_scratch(const deftsim_kctx *ctx, const deftsim_kseg *segs,
                                   size_t nseg, size_t *bytes)
{
    unsigned nrun = cpu_threads_for(ctx, seg_total_len(segs, nseg));
    size_t per = ws_bytes(seg_ws(segs, nseg, ctx->flags), 1) + SEG_PAD;
    size_t nb = seg_batches(segs, nseg, NULL);
    *bytes = 64 + cpu_round64(nseg * sizeof(size_t)) + cpu_round64((nb + 1) * sizeof(size_t)) +
             (size_t)nrun * per;
    return DEFTSIM_OK;
}

deftsim_status cpu_segtopk(deftsim_kctx *ctx, const float *x, size_t n, const deftsim_kseg *segs,
                           size_t nseg, deftsim_kidx *out, void *scratch, size_t scratch_bytes)
{
    (void)n;
    cpu_state *cs = cpu_st(ctx);
    unsigned nrun = cpu_threads_for(ctx, seg_total_len(segs, nseg));
    seg_job job, *j = &job;
    memset(j, 0, sizeof *j);
    cpu_arena a;
    cpu_arena_init(&a, scratch, scratch_bytes);
    size_t *koff = cpu_arena_take(&a, nseg * sizeof(size_t));
    size_t nb = seg_batches(segs, nseg, NULL);
    size_t *bstart = cpu_arena_take(&a, (nb + 1) * sizeof(size_t));
    if (nseg == 0) return DEFTSIM_OK;
    seg_batches(segs, nseg, bstart);
    size_t acc = 0;
    for (size_t f = 0; f < nseg; f++) {
        koff[f] = acc;
        acc += segs[f].k;
    }
    if (nrun > nb) nrun = (unsigned)nb;
    j->cs = cs;
    j->isa = cpu_isa_for(ctx);
    j->flags = ctx->flags;
    j->x = x;
    j->segs = segs;
    j->nseg = nseg;
    j->koff = koff;
    j->bstart = bstart;
    j->nbatch = nb;
    atomic_init(&j->next, 0);
    j->wz = seg_ws(segs, nseg, ctx->flags);
    j->ws_stride = ws_bytes(j->wz, 1) + SEG_PAD;
    j->ws_base = a.p;
    j->out = out;
    cpu_pool_run(cs->pool, nrun, seg_task, j);
    for (unsigned t = 0; t < nrun; t++) {
        ctx->last.candidates += j->tally[t].candidates;
        ctx->last.fallbacks += j->tally[t].fallbacks;
        ctx->last.nan_count += j->tally[t].nan;
    }
    ctx->last.threads = nrun;
    return DEFTSIM_OK;
}
