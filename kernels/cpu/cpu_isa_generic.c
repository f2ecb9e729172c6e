/* cpu_isa_generic.c - the hot loops in portable C: the reference every other instruction set
 * must match bit for bit, and the fast path on machines without one.
 *
 * Loops test blocks of 16 elements before touching any output, because in top-k and
 * threshold filters only about one element in a hundred passes: a block that holds none costs
 * a few compares and no stores. */
#include <math.h>

#include "cpu_internal.h"

static inline int passes(uint32_t key, uint32_t T)
{
    return T == 0 || (key >= T - 1u && key <= CPU_KEY_INF);
}

static float g_absmax(const float *x, size_t n, size_t *nan)
{
    float m = -1.0f;
    size_t nn = 0;
    for (size_t i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        nn += x[i] != x[i];
        m = a > m ? a : m; /* false for NaN: skipped */
    }
    *nan += nn;
    return m;
}

static size_t g_count_ge(const float *x, size_t n, uint32_t T, size_t *nan)
{
    size_t c = 0, nn = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t k = cpu_key(x[i]);
        nn += k > CPU_KEY_INF;
        c += (size_t)passes(k, T);
    }
    *nan += nn;
    return c;
}

/* Lowest key that passes a threshold T >= 1 on the fast test (NaN keys pass it too and are
 * weeded out afterwards). */
static inline uint32_t block_any(const float *x, uint32_t lo)
{
    uint32_t any = 0;
    for (int j = 0; j < 16; j++) any |= (uint32_t)(cpu_key(x[j]) >= lo);
    return any;
}

static size_t g_gather_cand(const float *x, size_t n, uint32_t base, uint32_t kmin,
                            uint32_t *idx, uint32_t *key, size_t cap)
{
    size_t c = 0, i = 0;
    if (kmin > 0)
        for (; i + 16 <= n; i += 16) {
            if (!block_any(x + i, kmin)) continue;
            for (size_t j = i; j < i + 16; j++) {
                uint32_t k = cpu_key(x[j]);
                if (k >= kmin) {
                    if (c == cap) return SIZE_MAX;
                    idx[c] = base + (uint32_t)j;
                    key[c++] = k;
                }
            }
        }
    for (; i < n; i++) {
        uint32_t k = cpu_key(x[i]);
        if (k >= kmin) {
            if (c == cap) return SIZE_MAX;
            idx[c] = base + (uint32_t)i;
            key[c++] = k;
        }
    }
    return c;
}

static size_t g_gather_idx(const float *x, size_t n, uint32_t base, uint32_t kmin, uint32_t *idx,
                           size_t cap)
{
    size_t c = 0, i = 0;
    if (kmin > 0)
        for (; i + 16 <= n; i += 16) {
            if (!block_any(x + i, kmin)) continue;
            for (size_t j = i; j < i + 16; j++)
                if (cpu_key(x[j]) >= kmin) {
                    if (c == cap) return SIZE_MAX;
                    idx[c++] = base + (uint32_t)j;
                }
        }
    for (; i < n; i++)
        if (cpu_key(x[i]) >= kmin) {
            if (c == cap) return SIZE_MAX;
            idx[c++] = base + (uint32_t)i;
        }
    return c;
}

static size_t g_filter_idx(const float *x, size_t n, uint32_t base, uint32_t T, uint32_t *idx,
                           size_t cap, size_t *nan)
{
    size_t c = 0, nn = 0, i = 0;
    if (T > 0) {
        for (; i + 16 <= n; i += 16) {
            if (!block_any(x + i, T - 1u)) continue;
            for (size_t j = i; j < i + 16; j++) {
                uint32_t k = cpu_key(x[j]);
                nn += k > CPU_KEY_INF;
                if (passes(k, T)) {
                    if (c < cap) idx[c] = base + (uint32_t)j;
                    c++;
                }
            }
        }
    }
    for (; i < n; i++) {
        uint32_t k = cpu_key(x[i]);
        nn += k > CPU_KEY_INF;
        if (passes(k, T)) {
            if (c < cap) idx[c] = base + (uint32_t)i;
            c++;
        }
    }
    *nan += nn;
    return c;
}

static size_t g_split(uint32_t *idx, uint32_t *key, size_t c, uint32_t k_above, uint32_t k_lo,
                      uint32_t *out, size_t n_above)
{
    size_t o = 0, w = 0;
    uint32_t dummy;
    for (size_t i = 0; i < c; i++) {
        uint32_t id = idx[i], kv = key[i];
        /* Branch-free: the store goes to a dummy once out is full. */
        uint32_t *dst = o < n_above ? out + o : &dummy;
        *dst = id;
        o += kv >= k_above && kv <= CPU_KEY_INF;
        idx[w] = id;
        key[w] = kv;
        w += kv >= k_lo && kv < k_above;
    }
    return w;
}

static uint32_t g_top_small(const uint32_t *rank, const uint32_t *idx, size_t c, size_t need,
                            uint32_t *out)
{
    size_t o = 0;
    uint32_t m = UINT32_MAX, dummy;
    for (size_t j = 0; j < c; j++) {
        uint32_t r = rank[j];
        size_t beat = 0;
        for (size_t i = 0; i < j; i++) beat += rank[i] >= r;
        for (size_t i = j + 1; i < c; i++) beat += rank[i] > r;
        size_t win = beat < need;
        if (out) {
            /* Branch-free: the store goes to a dummy once out is full. */
            uint32_t *dst = o < need ? out + o : &dummy;
            *dst = idx[j];
            o += win;
        }
        m = win && r < m ? r : m;
    }
    return m;
}

static size_t g_count_u32_ge(const uint32_t *a, size_t n, uint32_t t)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += a[i] >= t;
    return c;
}

static inline uint32_t rank_of_max(float m) { return m < 0 ? 0u : cpu_key(m) + 1u; }

static void g_group_max(const float *x, size_t n, size_t R, uint32_t *gm)
{
    size_t rows = n / 8, g = 0;
    for (size_t r0 = 0; r0 < rows; r0 += R) {
        size_t r1 = r0 + R < rows ? r0 + R : rows;
        float m[8];
        for (int j = 0; j < 8; j++) m[j] = -1.0f;
        for (size_t r = r0; r < r1; r++)
            for (int j = 0; j < 8; j++) {
                float a = fabsf(x[8 * r + j]);
                m[j] = a > m[j] ? a : m[j];
            }
        for (int j = 0; j < 8; j++) gm[g++] = rank_of_max(m[j]);
    }
    if (n % 8) {
        float m = -1.0f;
        for (size_t i = rows * 8; i < n; i++) {
            float a = fabsf(x[i]);
            m = a > m ? a : m;
        }
        gm[g] = rank_of_max(m);
    }
}

/* The fixed summation order: 32 lanes (element i of each full 32-chunk goes to lane i),
 * folded as ((l[j] + l[j+8]) + (l[j+16] + l[j+24])), then b[j] + b[j+4], then
 * (c0 + c2) + (c1 + c3); the tail is added in order. Squares of floats are exact in double,
 * so only these additions round, and fused multiply-adds change nothing. */
static double g_sumsq(const float *x, size_t n)
{
    double l[32] = {0};
    size_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int j = 0; j < 32; j++) l[j] += (double)x[i + j] * (double)x[i + j];
    double b[8], c[4];
    for (int j = 0; j < 8; j++) b[j] = (l[j] + l[j + 8]) + (l[j + 16] + l[j + 24]);
    for (int j = 0; j < 4; j++) c[j] = b[j] + b[j + 4];
    double s = (c[0] + c[2]) + (c[1] + c[3]);
    for (; i < n; i++) s += (double)x[i] * (double)x[i];
    return s;
}

static double g_acc_sumsq(float *a, const float *g, size_t n, int copy)
{
    double l[32] = {0};
    size_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int j = 0; j < 32; j++) {
            float v = copy ? g[i + j] : a[i + j] + g[i + j];
            a[i + j] = v;
            l[j] += (double)v * (double)v;
        }
    double b[8], c[4];
    for (int j = 0; j < 8; j++) b[j] = (l[j] + l[j + 8]) + (l[j + 16] + l[j + 24]);
    for (int j = 0; j < 4; j++) c[j] = b[j] + b[j + 4];
    double s = (c[0] + c[2]) + (c[1] + c[3]);
    for (; i < n; i++) {
        float v = copy ? g[i] : a[i] + g[i];
        a[i] = v;
        s += (double)v * (double)v;
    }
    return s;
}

static const cpu_isa generic = {
    .name = "generic",
    .absmax = g_absmax,
    .count_ge = g_count_ge,
    .gather_cand = g_gather_cand,
    .gather_sparse = g_gather_cand,
    .gather_idx = g_gather_idx,
    .filter_idx = g_filter_idx,
    .group_max = g_group_max,
    .split = g_split,
    .top_small = g_top_small,
    .count_u32_ge = g_count_u32_ge,
    .sumsq = g_sumsq,
    .acc_sumsq = g_acc_sumsq,
};

const cpu_isa *cpu_isa_generic(void) { return &generic; }
