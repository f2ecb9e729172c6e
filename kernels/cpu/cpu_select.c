/* cpu_select.c - exact selection among few values: candidates that passed a threshold, a
 * sample, group maxima.
 *
 * Large sets use a radix select whose digit adapts to the range actually present: the bucket
 * width is the smallest power of two that spreads [min, max] over at most CPU_HIST buckets.
 * Candidates above a threshold occupy a narrow slice of the 31-bit rank space, so fixed
 * digits of the top bits would put most of them in one bucket; adaptive digits split them
 * evenly and usually finish in two levels. Each level is one histogram pass and one
 * branch-free compaction pass that emits the buckets above the boundary and keeps the
 * boundary bucket in order. Keeping order is what makes ties cheap: candidates arrive in
 * ascending index order, so "lower index wins" means "first in the array wins". Small sets
 * pack (rank, ~index) into one 64-bit key, where ties cannot exist, and quickselect. */
#include "cpu_internal.h"

static inline uint64_t xorshift64(uint64_t s)
{
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
}

/* nth_element, descending: afterwards a[r] holds the (r+1)-th largest, a[0..r) >= a[r] >=
 * a[r+1..m). Hoare partitions around the median of three pseudo-random elements moved to the
 * front (which guarantees progress); the generator is seeded from m, so runs repeat exactly. */
#define DEFINE_QSEL(NAME, T)                                                                     \
    static void NAME(T *a, size_t m, size_t r)                                                   \
    {                                                                                            \
        size_t lo = 0, hi = m;                                                                   \
        uint64_t s = 0x9e3779b97f4a7c15ull ^ (uint64_t)m;                                        \
        while (hi - lo > 16) {                                                                   \
            size_t len = hi - lo, p[3];                                                          \
            for (int q = 0; q < 3; q++) { /* multiply-shift: no division */                      \
                s = xorshift64(s);                                                               \
                p[q] = lo + (size_t)(((s >> 32) * (uint64_t)len) >> 32);                         \
            }                                                                                    \
            T x0 = a[p[0]], x1 = a[p[1]], x2 = a[p[2]];                                          \
            size_t med = (x0 < x1) ? ((x1 < x2) ? p[1] : (x0 < x2 ? p[2] : p[0]))                \
                                   : ((x0 < x2) ? p[0] : (x1 < x2 ? p[2] : p[1]));               \
            T t = a[lo];                                                                         \
            a[lo] = a[med];                                                                      \
            a[med] = t;                                                                          \
            T pv = a[lo];                                                                        \
            size_t i = lo, j = hi - 1;                                                           \
            for (;;) {                                                                           \
                while (a[i] > pv) i++;                                                           \
                while (a[j] < pv) j--;                                                           \
                if (i >= j) break;                                                               \
                t = a[i];                                                                        \
                a[i] = a[j];                                                                     \
                a[j] = t;                                                                        \
                i++;                                                                             \
                j--;                                                                             \
            }                                                                                    \
            if (r <= j)                                                                          \
                hi = j + 1;                                                                      \
            else                                                                                 \
                lo = j + 1;                                                                      \
        }                                                                                        \
        for (size_t i = lo + 1; i < hi; i++) {                                                   \
            T v = a[i];                                                                          \
            size_t j = i;                                                                        \
            while (j > lo && a[j - 1] < v) {                                                     \
                a[j] = a[j - 1];                                                                 \
                j--;                                                                             \
            }                                                                                    \
            a[j] = v;                                                                            \
        }                                                                                        \
    }

DEFINE_QSEL(qsel_u32, uint32_t)
DEFINE_QSEL(qsel_u64, uint64_t)

/* Smallest shift that maps [0, range] onto at most CPU_HIST buckets. */
static inline unsigned digit_shift(uint32_t range)
{
    unsigned s = 0;
    while ((range >> s) >= CPU_HIST) s++;
    return s;
}

/* Boundary bucket: the highest d with (count above d) < need <= (count above d) + hist[d]. */
static inline size_t boundary(const uint32_t *hist, size_t nb, size_t need, size_t *above)
{
    size_t acc = 0, d = nb - 1;
    while (acc + hist[d] < need) acc += hist[d--];
    *above = acc;
    return d;
}

/* Below this size partitioning wins over bisection, whose fixed cost is about 25 passes. */
#define CPU_BISECT_MIN 256

/* Largest t in [lo, hi] with at least `need` of a[0..m) >= t, given that all of a lies in
 * [lo, hi] and 1 <= need <= m: a binary search whose every step is one vectorized count, so
 * no element moves and no branch depends on an element. On a few hundred values this beats
 * partitioning, whose branches mispredict about every other element. */
static uint32_t bisect_rank(const cpu_isa *isa, const uint32_t *a, size_t m, size_t need,
                            uint32_t lo, uint32_t hi)
{
    while (lo < hi) {
        uint32_t mid = lo + (uint32_t)(((uint64_t)hi - lo + 1) / 2);
        if (isa->count_u32_ge(a, m, mid) >= need)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

uint32_t cpu_kth_largest_u32(const cpu_isa *isa, uint32_t *a, size_t m, size_t r, uint32_t *hist)
{
    uint32_t lo = UINT32_MAX, hi = 0;
    for (size_t i = 0; i < m; i++) {
        lo = a[i] < lo ? a[i] : lo;
        hi = a[i] > hi ? a[i] : hi;
    }
    if (m <= CPU_TINY && hi < 0x80000000u) return isa->top_small(a, NULL, m, r, NULL);
    if (m < CPU_BISECT_MIN) {
        qsel_u32(a, m, r - 1);
        return a[r - 1];
    }
    if (m <= CPU_QS_MAX && hi < 0x80000000u) return bisect_rank(isa, a, m, r, lo, hi);
    while (m > CPU_QS_MAX) {
        if (lo == hi) return lo;
        unsigned s = digit_shift(hi - lo);
        size_t nb = (size_t)((hi - lo) >> s) + 1, above;
        memset(hist, 0, nb * sizeof *hist);
        for (size_t i = 0; i < m; i++) hist[(a[i] - lo) >> s]++;
        size_t d = boundary(hist, nb, r, &above), w = 0;
        for (size_t i = 0; i < m; i++) {
            a[w] = a[i];
            w += ((a[i] - lo) >> s) == d;
        }
        r -= above;
        m = w;
        uint32_t nlo = lo + (uint32_t)(d << s);
        uint64_t nhi = (uint64_t)nlo + ((uint64_t)1 << s) - 1;
        hi = nhi < hi ? (uint32_t)nhi : hi;
        lo = nlo;
    }
    qsel_u32(a, m, r - 1);
    return a[r - 1];
}

uint32_t cpu_kth_lower_bound(const cpu_isa *isa, const uint32_t *a, size_t m, size_t r,
                             uint32_t res)
{
    uint32_t lo = UINT32_MAX, hi = 0;
    for (size_t i = 0; i < m; i++) {
        lo = a[i] < lo ? a[i] : lo;
        hi = a[i] > hi ? a[i] : hi;
    }
    /* Invariant: at least r values are >= lo, and the r-th largest is <= hi. */
    while (hi - lo >= res) {
        uint32_t mid = lo + (uint32_t)(((uint64_t)hi - lo + 1) / 2);
        if (isa->count_u32_ge(a, m, mid) >= r)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

size_t cpu_rank_at(const float *x, uint32_t base, const uint32_t *idx, size_t c, uint32_t *rank,
                   uint32_t *lo, uint32_t *hi)
{
    uint32_t l = UINT32_MAX, h = 0;
    size_t nan = 0;
    for (size_t i = 0; i < c; i++) {
        uint32_t r = cpu_rank(x[idx[i] - base]);
        rank[i] = r;
        nan += r == 0;
        l = r < l ? r : l;
        h = r > h ? r : h;
    }
    *lo = l;
    *hi = h;
    return nan;
}

size_t cpu_rank_candidates(uint32_t *key, size_t c, uint32_t *lo, uint32_t *hi)
{
    uint32_t l = UINT32_MAX, h = 0;
    size_t nan = 0;
    for (size_t i = 0; i < c; i++) {
        uint32_t r = cpu_rank_of_key(key[i]);
        key[i] = r;
        nan += r == 0;
        l = r < l ? r : l;
        h = r > h ? r : h;
    }
    *lo = l;
    *hi = h;
    return nan;
}

size_t cpu_select_candidates(const cpu_isa *isa, uint32_t *idx, uint32_t *key, size_t c,
                             size_t k, uint32_t *out, uint32_t *hist, uint32_t *kth)
{
    uint32_t lo, hi;
    size_t nan = cpu_rank_candidates(key, c, &lo, &hi);
    uint32_t r = cpu_select_ranked(isa, idx, key, c, k, lo, hi, out, hist);
    if (kth) *kth = r;
    return nan;
}

uint32_t cpu_select_ranked(const cpu_isa *isa, uint32_t *idx, uint32_t *key, size_t c, size_t k,
                           uint32_t lo, uint32_t hi, uint32_t *out, uint32_t *hist)
{
    if (k == 0) return hi;
    size_t o = 0, need = k; /* invariant: o + need == k */
    for (;;) {
        if (need == c || lo == hi) {
            /* All remaining tie (or all are wanted): the first `need` have the lowest
             * indices. */
            memcpy(out + o, idx, need * sizeof *idx);
            return lo;
        }
        if (c <= CPU_TINY) return isa->top_small(key, idx, c, need, out + o);
        if (c < CPU_BISECT_MIN) {
            uint64_t tmp[CPU_BISECT_MIN];
            for (size_t i = 0; i < c; i++) tmp[i] = ((uint64_t)key[i] << 32) | (uint32_t)~idx[i];
            qsel_u64(tmp, c, need - 1);
            for (size_t i = 0; i < need; i++) out[o + i] = ~(uint32_t)tmp[i];
            return (uint32_t)(tmp[need - 1] >> 32);
        }
        if (c <= CPU_QS_MAX) {
            /* The k-th rank R by bisection; then everything above R and the first ties. */
            uint32_t R = bisect_rank(isa, key, c, need, lo, hi);
            size_t ties = need - (R < hi ? isa->count_u32_ge(key, c, R + 1) : 0);
            for (size_t i = 0; i < c; i++) {
                if (key[i] > R) {
                    out[o++] = idx[i];
                } else if (key[i] == R && ties > 0) {
                    out[o++] = idx[i];
                    ties--;
                }
            }
            return R;
        }
        unsigned s = digit_shift(hi - lo);
        size_t nb = (size_t)((hi - lo) >> s) + 1, above;
        memset(hist, 0, nb * sizeof *hist);
        for (size_t i = 0; i < c; i++) hist[(key[i] - lo) >> s]++;
        size_t d = boundary(hist, nb, need, &above), w = 0, oo = o;
        /* out[oo] is written on every step but kept only when the candidate is above the
         * boundary; oo never reaches k, because fewer than `need` are above. */
        for (size_t i = 0; i < c; i++) {
            uint32_t id = idx[i], kv = key[i];
            size_t dd = (kv - lo) >> s;
            out[oo] = id;
            oo += dd > d;
            idx[w] = id;
            key[w] = kv;
            w += dd == d;
        }
        o = oo;
        need -= above;
        c = w;
        uint32_t nlo = lo + (uint32_t)(d << s);
        uint64_t nhi = (uint64_t)nlo + ((uint64_t)1 << s) - 1;
        hi = nhi < hi ? (uint32_t)nhi : hi;
        lo = nlo;
    }
}

int cpu_select_above(const cpu_isa *isa, uint32_t *idx, uint32_t *key, size_t c, size_t k,
                     uint32_t kmin, uint32_t khint, uint32_t *out, uint32_t *hist,
                     size_t *nan, uint32_t *kth)
{
    /* The last bucket collects every key beyond the hint, so the hint need not be a bound;
     * the others cover [kmin, khint]. */
    if (khint < kmin) khint = kmin;
    uint32_t range = khint - kmin;
    unsigned s = 0;
    while ((range >> s) >= CPU_HIST - 1) s++;
    memset(hist, 0, CPU_HIST * sizeof *hist);
    size_t nn = 0;
    for (size_t i = 0; i < c; i++) {
        uint32_t kv = key[i];
        if (kv > CPU_KEY_INF) {
            nn++;
            continue;
        }
        hist[kv > khint ? CPU_HIST - 1 : (kv - kmin) >> s]++;
    }
    *nan = nn;
    if (c - nn < k) return 1;
    if (k == 0) {
        if (kth) *kth = CPU_RANK_MAX;
        return 0;
    }
    size_t above, b = boundary(hist, CPU_HIST, k, &above);
    if (b == CPU_HIST - 1) {
        /* The hint was far too low: the boundary sits among the unbounded keys. */
        (void)cpu_select_candidates(isa, idx, key, c, k, out, hist, kth);
        return 0;
    }
    uint32_t k_lo = kmin + (uint32_t)(b << s);
    uint32_t k_above = (uint64_t)k_lo + (1u << s) > (uint64_t)khint + 1 ? khint + 1 : k_lo + (1u << s);
    size_t kept = isa->split(idx, key, c, k_above, k_lo, out, above);
    /* The kept bucket holds numbers only; their ranks are key + 1. */
    for (size_t i = 0; i < kept; i++) key[i] += 1;
    uint32_t r = cpu_select_ranked(isa, idx, key, kept, k - above, k_lo + 1, k_above, out + above,
                                   hist);
    if (kth) *kth = r;
    return 0;
}
