/* cpu_isa_avx2.c - the hot loops with AVX2, chosen at run time.
 *
 * The library is built for the baseline instruction set; these functions carry their own
 * target attribute and are used only when the CPU reports AVX2, so one binary runs anywhere.
 * What AVX2 buys (measured on the benchmark machine, see docs/KERNELS.md): a branch-free
 * compaction of the elements above a threshold. Eight elements are compared at once and the
 * passing ones are packed to the front of a register by a permutation looked up from the
 * 8-bit compare mask, then stored; the store is unconditional and the output pointer advances
 * by the mask's popcount. With one element in a hundred passing, a branch per block
 * mispredicts often enough to cost more than the memory read itself; this loop has none, and
 * it is short enough (about 1.7 instructions per element) to keep up with memory. */
#include "cpu_internal.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#include <pthread.h>

#define AVX2 __attribute__((target("avx2,popcnt")))

/* For each 8-bit mask, the lanes of its set bits, lowest first: the permutation that packs
 * the passing elements to the front. Built once (8 KiB, stays in L1 during a pass). */
static uint32_t compress_perm[256][8];
static pthread_once_t compress_once = PTHREAD_ONCE_INIT;

static void build_compress_perm(void)
{
    for (unsigned m = 0; m < 256; m++) {
        unsigned c = 0;
        for (unsigned j = 0; j < 8; j++)
            if (m >> j & 1) compress_perm[m][c++] = j;
        while (c < 8) compress_perm[m][c++] = 0;
    }
}

AVX2 static inline __m256i perm_of(unsigned mask)
{
    return _mm256_loadu_si256((const __m256i *)compress_perm[mask]);
}

AVX2 static inline size_t hsum_epi32(__m256i v)
{
    uint32_t t[8];
    _mm256_storeu_si256((__m256i *)t, v);
    size_t s = 0;
    for (int j = 0; j < 8; j++) s += t[j];
    return s;
}

AVX2 static float a_absmax(const float *x, size_t n, size_t *nan)
{
    const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 m0 = _mm256_set1_ps(-1.0f), m1 = m0, m2 = m0, m3 = m0;
    __m256i nn = _mm256_setzero_si256();
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m256 v0 = _mm256_loadu_ps(x + i), v1 = _mm256_loadu_ps(x + i + 8);
        __m256 v2 = _mm256_loadu_ps(x + i + 16), v3 = _mm256_loadu_ps(x + i + 24);
        /* max_ps returns its second operand when either is NaN: NaN is skipped. */
        m0 = _mm256_max_ps(_mm256_and_ps(v0, absm), m0);
        m1 = _mm256_max_ps(_mm256_and_ps(v1, absm), m1);
        m2 = _mm256_max_ps(_mm256_and_ps(v2, absm), m2);
        m3 = _mm256_max_ps(_mm256_and_ps(v3, absm), m3);
        __m256 u = _mm256_or_ps(_mm256_or_ps(_mm256_cmp_ps(v0, v0, _CMP_UNORD_Q),
                                             _mm256_cmp_ps(v1, v1, _CMP_UNORD_Q)),
                                _mm256_or_ps(_mm256_cmp_ps(v2, v2, _CMP_UNORD_Q),
                                             _mm256_cmp_ps(v3, v3, _CMP_UNORD_Q)));
        if (!_mm256_testz_ps(u, u)) {
            nn = _mm256_sub_epi32(nn, _mm256_castps_si256(_mm256_cmp_ps(v0, v0, _CMP_UNORD_Q)));
            nn = _mm256_sub_epi32(nn, _mm256_castps_si256(_mm256_cmp_ps(v1, v1, _CMP_UNORD_Q)));
            nn = _mm256_sub_epi32(nn, _mm256_castps_si256(_mm256_cmp_ps(v2, v2, _CMP_UNORD_Q)));
            nn = _mm256_sub_epi32(nn, _mm256_castps_si256(_mm256_cmp_ps(v3, v3, _CMP_UNORD_Q)));
        }
    }
    m0 = _mm256_max_ps(_mm256_max_ps(m0, m1), _mm256_max_ps(m2, m3));
    float t[8];
    _mm256_storeu_ps(t, m0);
    float m = -1.0f;
    for (int j = 0; j < 8; j++) m = t[j] > m ? t[j] : m;
    *nan += hsum_epi32(nn);
    float r = cpu_isa_generic()->absmax(x + i, n - i, nan);
    return r > m ? r : m;
}

AVX2 static size_t a_count_ge(const float *x, size_t n, uint32_t T, size_t *nan)
{
    if (T == 0) return cpu_isa_generic()->count_ge(x, n, T, nan);
    const __m256i absm = _mm256_set1_epi32(0x7fffffff), infv = _mm256_set1_epi32((int)CPU_KEY_INF);
    const __m256i tk = _mm256_set1_epi32((int)T - 2);
    __m256i cnt = _mm256_setzero_si256(), nn = _mm256_setzero_si256();
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i k0 = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(x + i)), absm);
        __m256i k1 = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(x + i + 8)), absm);
        __m256i n0 = _mm256_cmpgt_epi32(k0, infv), n1 = _mm256_cmpgt_epi32(k1, infv);
        cnt = _mm256_sub_epi32(cnt, _mm256_andnot_si256(n0, _mm256_cmpgt_epi32(k0, tk)));
        cnt = _mm256_sub_epi32(cnt, _mm256_andnot_si256(n1, _mm256_cmpgt_epi32(k1, tk)));
        nn = _mm256_sub_epi32(nn, _mm256_add_epi32(n0, n1));
    }
    *nan += hsum_epi32(nn);
    return hsum_epi32(cnt) + cpu_isa_generic()->count_ge(x + i, n - i, T, nan);
}

AVX2 static size_t a_gather_cand(const float *x, size_t n, uint32_t base, uint32_t kmin,
                                 uint32_t *idx, uint32_t *key, size_t cap)
{
    const __m256i absm = _mm256_set1_epi32(0x7fffffff);
    const __m256i tk = _mm256_set1_epi32((int)kmin - 1); /* keys are < 2^31: signed compare */
    const __m256i eight = _mm256_set1_epi32(8);
    __m256i pos = _mm256_add_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                   _mm256_set1_epi32((int)base));
    size_t i = 0, c = 0;
    for (; i + 16 <= n; i += 16) {
        /* Each iteration stores at most 16 entries from c on: within cap + CPU_SLACK. */
        if (c > cap) return SIZE_MAX;
        __m256i k0 = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(x + i)), absm);
        __m256i k1 = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(x + i + 8)), absm);
        unsigned m0 = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(k0, tk)));
        unsigned m1 = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(k1, tk)));
        __m256i q0 = perm_of(m0), q1 = perm_of(m1);
        _mm256_storeu_si256((__m256i *)(idx + c), _mm256_permutevar8x32_epi32(pos, q0));
        _mm256_storeu_si256((__m256i *)(key + c), _mm256_permutevar8x32_epi32(k0, q0));
        c += (size_t)__builtin_popcount(m0);
        pos = _mm256_add_epi32(pos, eight);
        _mm256_storeu_si256((__m256i *)(idx + c), _mm256_permutevar8x32_epi32(pos, q1));
        _mm256_storeu_si256((__m256i *)(key + c), _mm256_permutevar8x32_epi32(k1, q1));
        c += (size_t)__builtin_popcount(m1);
        pos = _mm256_add_epi32(pos, eight);
    }
    if (c > cap) return SIZE_MAX;
    size_t r = cpu_isa_generic()->gather_cand(x + i, n - i, base + (uint32_t)i, kmin, idx + c,
                                              key + c, cap - c);
    return r == SIZE_MAX ? SIZE_MAX : c + r;
}

AVX2 static size_t a_gather_idx(const float *x, size_t n, uint32_t base, uint32_t kmin,
                                uint32_t *idx, size_t cap)
{
    const __m256i absm = _mm256_set1_epi32(0x7fffffff);
    const __m256i tk = _mm256_set1_epi32((int)kmin - 1);
    const __m256i eight = _mm256_set1_epi32(8);
    __m256i pos = _mm256_add_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                   _mm256_set1_epi32((int)base));
    size_t i = 0, c = 0;
    for (; i + 16 <= n; i += 16) {
        if (c > cap) return SIZE_MAX;
        __m256i k0 = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(x + i)), absm);
        __m256i k1 = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(x + i + 8)), absm);
        unsigned m0 = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(k0, tk)));
        unsigned m1 = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(k1, tk)));
        _mm256_storeu_si256((__m256i *)(idx + c), _mm256_permutevar8x32_epi32(pos, perm_of(m0)));
        c += (size_t)__builtin_popcount(m0);
        pos = _mm256_add_epi32(pos, eight);
        _mm256_storeu_si256((__m256i *)(idx + c), _mm256_permutevar8x32_epi32(pos, perm_of(m1)));
        c += (size_t)__builtin_popcount(m1);
        pos = _mm256_add_epi32(pos, eight);
    }
    if (c > cap) return SIZE_MAX;
    size_t r = cpu_isa_generic()->gather_idx(x + i, n - i, base + (uint32_t)i, kmin, idx + c,
                                             cap - c);
    return r == SIZE_MAX ? SIZE_MAX : c + r;
}

AVX2 static size_t a_gather_sparse(const float *x, size_t n, uint32_t base, uint32_t kmin,
                                   uint32_t *idx, uint32_t *key, size_t cap)
{
    const __m256i absm = _mm256_set1_epi32(0x7fffffff);
    const __m256i tk = _mm256_set1_epi32((int)kmin - 1);
    const __m256i eight = _mm256_set1_epi32(8), sixteen = _mm256_set1_epi32(16);
    __m256i pos = _mm256_add_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                   _mm256_set1_epi32((int)base));
    size_t i = 0, c = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i k0 = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(x + i)), absm);
        __m256i k1 = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(x + i + 8)), absm);
        __m256i p0 = _mm256_cmpgt_epi32(k0, tk), p1 = _mm256_cmpgt_epi32(k1, tk);
        __m256i any = _mm256_or_si256(p0, p1);
        if (__builtin_expect(!_mm256_testz_si256(any, any), 0)) {
            if (c > cap) return SIZE_MAX;
            unsigned m0 = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(p0));
            unsigned m1 = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(p1));
            __m256i q0 = perm_of(m0), q1 = perm_of(m1);
            _mm256_storeu_si256((__m256i *)(idx + c), _mm256_permutevar8x32_epi32(pos, q0));
            _mm256_storeu_si256((__m256i *)(key + c), _mm256_permutevar8x32_epi32(k0, q0));
            c += (size_t)__builtin_popcount(m0);
            __m256i pos1 = _mm256_add_epi32(pos, eight);
            _mm256_storeu_si256((__m256i *)(idx + c), _mm256_permutevar8x32_epi32(pos1, q1));
            _mm256_storeu_si256((__m256i *)(key + c), _mm256_permutevar8x32_epi32(k1, q1));
            c += (size_t)__builtin_popcount(m1);
        }
        pos = _mm256_add_epi32(pos, sixteen);
    }
    if (c > cap) return SIZE_MAX;
    size_t r = cpu_isa_generic()->gather_cand(x + i, n - i, base + (uint32_t)i, kmin, idx + c,
                                              key + c, cap - c);
    return r == SIZE_MAX ? SIZE_MAX : c + r;
}

AVX2 static size_t a_filter_idx(const float *x, size_t n, uint32_t base, uint32_t T,
                                uint32_t *idx, size_t cap, size_t *nan)
{
    if (T == 0) return cpu_isa_generic()->filter_idx(x, n, base, T, idx, cap, nan);
    const __m256i absm = _mm256_set1_epi32(0x7fffffff), infv = _mm256_set1_epi32((int)CPU_KEY_INF);
    const __m256i tk = _mm256_set1_epi32((int)T - 2);
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), eight = _mm256_set1_epi32(8);
    __m256i nn = _mm256_setzero_si256();
    __m256i pos = _mm256_add_epi32(lane, _mm256_set1_epi32((int)base));
    size_t i = 0, c = 0;
    /* Vector stores while they cannot pass cap; then exact stores, then counting only. */
    for (; i + 16 <= n; i += 16) {
        __m256i k0 = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(x + i)), absm);
        __m256i k1 = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(x + i + 8)), absm);
        __m256i n0 = _mm256_cmpgt_epi32(k0, infv), n1 = _mm256_cmpgt_epi32(k1, infv);
        __m256i p0 = _mm256_andnot_si256(n0, _mm256_cmpgt_epi32(k0, tk));
        __m256i p1 = _mm256_andnot_si256(n1, _mm256_cmpgt_epi32(k1, tk));
        nn = _mm256_sub_epi32(nn, _mm256_add_epi32(n0, n1));
        unsigned m0 = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(p0));
        unsigned m1 = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(p1));
        if (c + 16 <= cap) {
            _mm256_storeu_si256((__m256i *)(idx + c), _mm256_permutevar8x32_epi32(pos, perm_of(m0)));
            c += (size_t)__builtin_popcount(m0);
            pos = _mm256_add_epi32(pos, eight);
            _mm256_storeu_si256((__m256i *)(idx + c), _mm256_permutevar8x32_epi32(pos, perm_of(m1)));
            c += (size_t)__builtin_popcount(m1);
            pos = _mm256_add_epi32(pos, eight);
        } else {
            unsigned m = m0 | (m1 << 8);
            while (m) {
                unsigned j = (unsigned)__builtin_ctz(m);
                m &= m - 1;
                if (c < cap) idx[c] = base + (uint32_t)(i + j);
                c++;
            }
            pos = _mm256_add_epi32(pos, _mm256_set1_epi32(16));
        }
    }
    *nan += hsum_epi32(nn);
    size_t room = c < cap ? cap - c : 0;
    return c + cpu_isa_generic()->filter_idx(x + i, n - i, base + (uint32_t)i, T, idx + c, room,
                                             nan);
}

AVX2 static size_t a_split(uint32_t *idx, uint32_t *key, size_t c, uint32_t k_above,
                           uint32_t k_lo, uint32_t *out, size_t n_above)
{
    const __m256i hi = _mm256_set1_epi32((int)k_above - 1), lo = _mm256_set1_epi32((int)k_lo - 1);
    const __m256i infv = _mm256_set1_epi32((int)CPU_KEY_INF);
    size_t i = 0, o = 0, w = 0;
    /* Kept entries are stored at w <= i after the eight at i are loaded, so the stores never
     * reach entries not yet read; out gets vector stores only while eight more fit. */
    for (; i + 8 <= c && o + 8 <= n_above; i += 8) {
        __m256i id = _mm256_loadu_si256((const __m256i *)(idx + i));
        __m256i kv = _mm256_loadu_si256((const __m256i *)(key + i));
        __m256i ge_hi = _mm256_cmpgt_epi32(kv, hi);
        __m256i up = _mm256_andnot_si256(_mm256_cmpgt_epi32(kv, infv), ge_hi);
        __m256i keep = _mm256_andnot_si256(ge_hi, _mm256_cmpgt_epi32(kv, lo));
        unsigned mu = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(up));
        unsigned mk = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(keep));
        __m256i qu = perm_of(mu), qk = perm_of(mk);
        _mm256_storeu_si256((__m256i *)(out + o), _mm256_permutevar8x32_epi32(id, qu));
        o += (size_t)__builtin_popcount(mu);
        _mm256_storeu_si256((__m256i *)(idx + w), _mm256_permutevar8x32_epi32(id, qk));
        _mm256_storeu_si256((__m256i *)(key + w), _mm256_permutevar8x32_epi32(kv, qk));
        w += (size_t)__builtin_popcount(mk);
    }
    for (; i < c; i++) {
        uint32_t d = idx[i], kv = key[i];
        if (kv >= k_above && kv <= CPU_KEY_INF) {
            if (o < n_above) out[o] = d;
            o++;
        }
        idx[w] = d;
        key[w] = kv;
        w += kv >= k_lo && kv < k_above;
    }
    return w;
}

AVX2 static uint32_t a_top_small(const uint32_t *rank, const uint32_t *idx, size_t c,
                                 size_t need, uint32_t *out)
{
    /* Blocks of eight ranks j are counted at once against every rank i broadcast: ranks i
     * before the block count when >= (compared as r_i + 1 >), ranks after it when >, and
     * within the block the lanes after i take the r_i + 1 form. Ranks are below 2^31, so
     * signed compares serve. */
    uint32_t r[CPU_TINY + 8], sel[CPU_TINY + 8];
    memcpy(r, rank, c * sizeof *r);
    for (size_t j = c; j < ((c + 7) & ~(size_t)7); j++) r[j] = 0;
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i needv = _mm256_set1_epi32((int)need), cv = _mm256_set1_epi32((int)c);
    __m256i mv = _mm256_set1_epi32(-1);
    size_t o = 0;
    for (size_t j0 = 0; j0 < c; j0 += 8) {
        __m256i rj = _mm256_loadu_si256((const __m256i *)(r + j0)), cnt = _mm256_setzero_si256();
        size_t i = 0, e = j0 + 8 < c ? j0 + 8 : c;
        for (; i < j0; i++)
            cnt = _mm256_sub_epi32(cnt, _mm256_cmpgt_epi32(_mm256_set1_epi32((int)r[i] + 1), rj));
        for (; i < e; i++) {
            __m256i after = _mm256_cmpgt_epi32(lane, _mm256_set1_epi32((int)(i - j0)));
            __m256i b = _mm256_sub_epi32(_mm256_set1_epi32((int)r[i]), after);
            cnt = _mm256_sub_epi32(cnt, _mm256_cmpgt_epi32(b, rj));
        }
        for (; i < c; i++)
            cnt = _mm256_sub_epi32(cnt, _mm256_cmpgt_epi32(_mm256_set1_epi32((int)r[i]), rj));
        __m256i inside = _mm256_cmpgt_epi32(cv, _mm256_add_epi32(lane, _mm256_set1_epi32((int)j0)));
        __m256i win = _mm256_and_si256(inside, _mm256_cmpgt_epi32(needv, cnt));
        /* Losers become -1, the largest unsigned value, for the minimum. */
        mv = _mm256_min_epu32(mv, _mm256_or_si256(rj, _mm256_xor_si256(win, _mm256_set1_epi32(-1))));
        if (out) {
            unsigned mk = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(win));
            __m256i id;
            if (j0 + 8 <= c) {
                id = _mm256_loadu_si256((const __m256i *)(idx + j0));
            } else {
                uint32_t t[8] = {0};
                memcpy(t, idx + j0, (c - j0) * sizeof *t);
                id = _mm256_loadu_si256((const __m256i *)t);
            }
            _mm256_storeu_si256((__m256i *)(sel + o), _mm256_permutevar8x32_epi32(id, perm_of(mk)));
            o += (size_t)__builtin_popcount(mk);
        }
    }
    if (out) memcpy(out, sel, need * sizeof *out);
    __m128i m4 = _mm_min_epu32(_mm256_castsi256_si128(mv), _mm256_extracti128_si256(mv, 1));
    m4 = _mm_min_epu32(m4, _mm_shuffle_epi32(m4, 0x4e));
    m4 = _mm_min_epu32(m4, _mm_shuffle_epi32(m4, 0xb1));
    return (uint32_t)_mm_cvtsi128_si32(m4);
}

AVX2 static size_t a_count_u32_ge(const uint32_t *a, size_t n, uint32_t t)
{
    /* Values below 2^31: a signed compare against t - 1 is ">= t". */
    const __m256i tv = _mm256_set1_epi32((int)t - 1);
    __m256i c0 = _mm256_setzero_si256(), c1 = c0;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        c0 = _mm256_sub_epi32(c0, _mm256_cmpgt_epi32(_mm256_loadu_si256((const __m256i *)(a + i)), tv));
        c1 = _mm256_sub_epi32(c1, _mm256_cmpgt_epi32(_mm256_loadu_si256((const __m256i *)(a + i + 8)), tv));
    }
    size_t c = hsum_epi32(_mm256_add_epi32(c0, c1));
    for (; i < n; i++) c += a[i] >= t;
    return c;
}

AVX2 static inline void store_group_ranks(__m256 m, uint32_t *gm)
{
    /* -1 (no number in the group) is negative as an integer: rank 0; else key + 1. */
    __m256i mi = _mm256_castps_si256(m);
    __m256i neg = _mm256_cmpgt_epi32(_mm256_setzero_si256(), mi);
    __m256i r = _mm256_andnot_si256(neg, _mm256_add_epi32(mi, _mm256_set1_epi32(1)));
    _mm256_storeu_si256((__m256i *)gm, r);
}

AVX2 static void a_group_max(const float *x, size_t n, size_t R, uint32_t *gm)
{
    const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256 none = _mm256_set1_ps(-1.0f);
    size_t rows = n / 8, g = 0;
    for (size_t r0 = 0; r0 < rows; r0 += R) {
        size_t r1 = r0 + R < rows ? r0 + R : rows, r = r0;
        /* Four chains hide the latency of max. */
        __m256 a = none, b = none, c = none, d = none;
        for (; r + 4 <= r1; r += 4) {
            a = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(x + 8 * r), absm), a);
            b = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(x + 8 * r + 8), absm), b);
            c = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(x + 8 * r + 16), absm), c);
            d = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(x + 8 * r + 24), absm), d);
        }
        for (; r < r1; r++) a = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(x + 8 * r), absm), a);
        store_group_ranks(_mm256_max_ps(_mm256_max_ps(a, b), _mm256_max_ps(c, d)), gm + g);
        g += 8;
    }
    if (n % 8) {
        uint32_t t;
        cpu_isa_generic()->group_max(x + rows * 8, n % 8, 1, &t);
        gm[g] = t;
    }
}

AVX2 static double a_sumsq(const float *x, size_t n)
{
    __m256d v[8];
    for (int j = 0; j < 8; j++) v[j] = _mm256_setzero_pd();
    size_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int q = 0; q < 4; q++) {
            __m256 f = _mm256_loadu_ps(x + i + 8 * q);
            __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(f));
            __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(f, 1));
            v[2 * q] = _mm256_add_pd(v[2 * q], _mm256_mul_pd(lo, lo));
            v[2 * q + 1] = _mm256_add_pd(v[2 * q + 1], _mm256_mul_pd(hi, hi));
        }
    /* The generic fold, lane for lane: v[2q] holds lanes 8q..8q+3, v[2q+1] lanes 8q+4..8q+7. */
    __m256d blo = _mm256_add_pd(_mm256_add_pd(v[0], v[2]), _mm256_add_pd(v[4], v[6]));
    __m256d bhi = _mm256_add_pd(_mm256_add_pd(v[1], v[3]), _mm256_add_pd(v[5], v[7]));
    __m256d c = _mm256_add_pd(blo, bhi);
    __m128d c01 = _mm256_castpd256_pd128(c), c23 = _mm256_extractf128_pd(c, 1);
    __m128d e = _mm_add_pd(c01, c23); /* (c0 + c2, c1 + c3) */
    double s = _mm_cvtsd_f64(_mm_add_sd(e, _mm_unpackhi_pd(e, e)));
    for (; i < n; i++) s += (double)x[i] * (double)x[i];
    return s;
}

/* a_sumsq's loop with the add (or copy) and the store in front of the squares. */
AVX2 static double a_acc_sumsq(float *a, const float *g, size_t n, int copy)
{
    __m256d v[8];
    for (int j = 0; j < 8; j++) v[j] = _mm256_setzero_pd();
    size_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int q = 0; q < 4; q++) {
            __m256 f = _mm256_loadu_ps(g + i + 8 * q);
            if (!copy) f = _mm256_add_ps(_mm256_loadu_ps(a + i + 8 * q), f);
            _mm256_storeu_ps(a + i + 8 * q, f);
            __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(f));
            __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(f, 1));
            v[2 * q] = _mm256_add_pd(v[2 * q], _mm256_mul_pd(lo, lo));
            v[2 * q + 1] = _mm256_add_pd(v[2 * q + 1], _mm256_mul_pd(hi, hi));
        }
    __m256d blo = _mm256_add_pd(_mm256_add_pd(v[0], v[2]), _mm256_add_pd(v[4], v[6]));
    __m256d bhi = _mm256_add_pd(_mm256_add_pd(v[1], v[3]), _mm256_add_pd(v[5], v[7]));
    __m256d c = _mm256_add_pd(blo, bhi);
    __m128d c01 = _mm256_castpd256_pd128(c), c23 = _mm256_extractf128_pd(c, 1);
    __m128d e = _mm_add_pd(c01, c23);
    double s = _mm_cvtsd_f64(_mm_add_sd(e, _mm_unpackhi_pd(e, e)));
    for (; i < n; i++) {
        float x = copy ? g[i] : a[i] + g[i];
        a[i] = x;
        s += (double)x * (double)x;
    }
    return s;
}

static const cpu_isa avx2 = {
    .name = "avx2",
    .absmax = a_absmax,
    .count_ge = a_count_ge,
    .gather_cand = a_gather_cand,
    .gather_sparse = a_gather_sparse,
    .gather_idx = a_gather_idx,
    .filter_idx = a_filter_idx,
    .group_max = a_group_max,
    .split = a_split,
    .top_small = a_top_small,
    .count_u32_ge = a_count_u32_ge,
    .sumsq = a_sumsq,
    .acc_sumsq = a_acc_sumsq,
};

const cpu_isa *cpu_isa_avx2(void)
{
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("popcnt")) return NULL;
    pthread_once(&compress_once, build_compress_perm);
    return &avx2;
}

#else

const cpu_isa *cpu_isa_avx2(void) { return NULL; }

#endif
