/* cpu_isa_avx512.c - the hot loops with AVX-512 (F, BW, VL, DQ), chosen at run time.
 *
 * Like the AVX2 file, these functions carry their own target attribute and are used only when
 * the CPU reports the extensions, so one binary runs anywhere. What AVX-512 buys: compares
 * write a mask register, and vpcompressd packs the passing lanes to the front of a register in
 * one instruction, so the threshold gathers need neither the AVX2 file's permutation table nor
 * a movemask; sixteen lanes per instruction halve the counting loops of the selection.
 *
 * The table starts as a copy of the AVX2 table and replaces only the operations where AVX-512
 * measured faster on the benchmark machine (docs/KERNELS.md, "AVX-512 against AVX2"): the
 * dense gathers, the counts of the bisections and top_small. The others stay AVX2's: absmax,
 * count_ge, group maxima and the filter stream memory, the block-skipping gather showed no
 * gain, and the norms must give the same bits on every instruction set. */
#include "cpu_internal.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#include <pthread.h>

#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,popcnt")))

AVX512 static size_t x_gather_cand(const float *x, size_t n, uint32_t base, uint32_t kmin,
                                   uint32_t *idx, uint32_t *key, size_t cap)
{
    const __m512i absm = _mm512_set1_epi32(0x7fffffff);
    const __m512i tk = _mm512_set1_epi32((int)kmin - 1); /* keys are < 2^31: signed compare */
    const __m512i sixteen = _mm512_set1_epi32(16);
    __m512i pos = _mm512_add_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,
                                                     13, 14, 15),
                                   _mm512_set1_epi32((int)base));
    size_t i = 0, c = 0;
    for (; i + 16 <= n; i += 16) {
        /* Each iteration stores 16 entries from c on: within cap + CPU_SLACK. */
        if (c > cap) return SIZE_MAX;
        __m512i k = _mm512_and_si512(_mm512_loadu_si512((const void *)(x + i)), absm);
        __mmask16 m = _mm512_cmpgt_epi32_mask(k, tk);
        _mm512_storeu_si512((void *)(idx + c), _mm512_maskz_compress_epi32(m, pos));
        _mm512_storeu_si512((void *)(key + c), _mm512_maskz_compress_epi32(m, k));
        c += (size_t)__builtin_popcount((unsigned)m);
        pos = _mm512_add_epi32(pos, sixteen);
    }
    if (c > cap) return SIZE_MAX;
    size_t r = cpu_isa_generic()->gather_cand(x + i, n - i, base + (uint32_t)i, kmin, idx + c,
                                              key + c, cap - c);
    return r == SIZE_MAX ? SIZE_MAX : c + r;
}

AVX512 static size_t x_gather_idx(const float *x, size_t n, uint32_t base, uint32_t kmin,
                                  uint32_t *idx, size_t cap)
{
    const __m512i absm = _mm512_set1_epi32(0x7fffffff);
    const __m512i tk = _mm512_set1_epi32((int)kmin - 1);
    const __m512i sixteen = _mm512_set1_epi32(16);
    __m512i pos = _mm512_add_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,
                                                     13, 14, 15),
                                   _mm512_set1_epi32((int)base));
    size_t i = 0, c = 0;
    for (; i + 16 <= n; i += 16) {
        if (c > cap) return SIZE_MAX;
        __m512i k = _mm512_and_si512(_mm512_loadu_si512((const void *)(x + i)), absm);
        __mmask16 m = _mm512_cmpgt_epi32_mask(k, tk);
        _mm512_storeu_si512((void *)(idx + c), _mm512_maskz_compress_epi32(m, pos));
        c += (size_t)__builtin_popcount((unsigned)m);
        pos = _mm512_add_epi32(pos, sixteen);
    }
    if (c > cap) return SIZE_MAX;
    size_t r = cpu_isa_generic()->gather_idx(x + i, n - i, base + (uint32_t)i, kmin, idx + c,
                                             cap - c);
    return r == SIZE_MAX ? SIZE_MAX : c + r;
}

AVX512 static size_t x_count_u32_ge(const uint32_t *a, size_t n, uint32_t t)
{
    /* Values below 2^31: a signed compare against t - 1 is ">= t". */
    const __m512i tv = _mm512_set1_epi32((int)t - 1), one = _mm512_set1_epi32(1);
    __m512i c0 = _mm512_setzero_si512(), c1 = c0;
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512i a0 = _mm512_loadu_si512((const void *)(a + i));
        __m512i a1 = _mm512_loadu_si512((const void *)(a + i + 16));
        c0 = _mm512_mask_add_epi32(c0, _mm512_cmpgt_epi32_mask(a0, tv), c0, one);
        c1 = _mm512_mask_add_epi32(c1, _mm512_cmpgt_epi32_mask(a1, tv), c1, one);
    }
    if (i + 16 <= n) {
        __m512i a0 = _mm512_loadu_si512((const void *)(a + i));
        c0 = _mm512_mask_add_epi32(c0, _mm512_cmpgt_epi32_mask(a0, tv), c0, one);
        i += 16;
    }
    if (i < n) {
        __mmask16 in = (__mmask16)((1u << (n - i)) - 1);
        __m512i a0 = _mm512_maskz_loadu_epi32(in, a + i);
        c0 = _mm512_mask_add_epi32(c0, _mm512_mask_cmpgt_epi32_mask(in, a0, tv), c0, one);
    }
    return (size_t)(uint32_t)_mm512_reduce_add_epi32(_mm512_add_epi32(c0, c1));
}

AVX512 static uint32_t x_top_small(const uint32_t *rank, const uint32_t *idx, size_t c,
                                   size_t need, uint32_t *out)
{
    /* a_top_small with sixteen lanes: blocks of ranks j counted against every rank i
     * broadcast; ranks before the block count when >= (r_i + 1 >), after it when >, and
     * within the block the lanes after i take r_i + 1. The count is a masked add. */
    const uint32_t *r = rank;
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i one = _mm512_set1_epi32(1), needv = _mm512_set1_epi32((int)need);
    __m512i mv = _mm512_set1_epi32(-1);
    size_t o = 0;
    for (size_t j0 = 0; j0 < c; j0 += 16) {
        size_t e = j0 + 16 < c ? j0 + 16 : c;
        __mmask16 inside = (__mmask16)(e - j0 == 16 ? 0xffffu : (1u << (e - j0)) - 1);
        __m512i rj = _mm512_maskz_loadu_epi32(inside, r + j0), cnt = _mm512_setzero_si512();
        size_t i = 0;
        for (; i < j0; i++)
            cnt = _mm512_mask_add_epi32(
                cnt, _mm512_cmpgt_epi32_mask(_mm512_set1_epi32((int)r[i] + 1), rj), cnt, one);
        for (; i < e; i++) {
            __m512i b = _mm512_set1_epi32((int)r[i]);
            b = _mm512_mask_add_epi32(b, _mm512_cmpgt_epi32_mask(lane, _mm512_set1_epi32((int)(i - j0))),
                                      b, one);
            cnt = _mm512_mask_add_epi32(cnt, _mm512_cmpgt_epi32_mask(b, rj), cnt, one);
        }
        for (; i < c; i++)
            cnt = _mm512_mask_add_epi32(
                cnt, _mm512_cmpgt_epi32_mask(_mm512_set1_epi32((int)r[i]), rj), cnt, one);
        __mmask16 win = _mm512_mask_cmpgt_epi32_mask(inside, needv, cnt);
        mv = _mm512_mask_min_epu32(mv, win, mv, rj);
        if (out) {
            /* Writes exactly the winners: out never sees more than need. */
            __m512i id = _mm512_maskz_loadu_epi32(inside, idx + j0);
            _mm512_mask_compressstoreu_epi32(out + o, win, id);
            o += (size_t)__builtin_popcount((unsigned)win);
        }
    }
    return (uint32_t)_mm512_reduce_min_epu32(mv);
}

static cpu_isa avx512;
static pthread_once_t avx512_once = PTHREAD_ONCE_INIT;

static void build_avx512(void)
{
    avx512 = *cpu_isa_avx2();
    avx512.name = "avx512";
    avx512.gather_cand = x_gather_cand;
    avx512.gather_idx = x_gather_idx;
    avx512.count_u32_ge = x_count_u32_ge;
    avx512.top_small = x_top_small;
}

const cpu_isa *cpu_isa_avx512(void)
{
    __builtin_cpu_init();
    if (!cpu_isa_avx2() || !__builtin_cpu_supports("avx512f") ||
        !__builtin_cpu_supports("avx512bw") || !__builtin_cpu_supports("avx512vl") ||
        !__builtin_cpu_supports("avx512dq"))
        return NULL;
    pthread_once(&avx512_once, build_avx512);
    return &avx512;
}

#else

const cpu_isa *cpu_isa_avx512(void) { return NULL; }

#endif
