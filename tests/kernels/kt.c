/* kt.c - helpers of the kernel tests (see kt.h). */
#include "kt.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint64_t kt_seed(void)
{
    static uint64_t seed;
    static int done;
    if (!done) {
        const char *e = getenv("DEFTSIM_TEST_SEED");
        seed = e && *e ? strtoull(e, NULL, 0) : 0x5eed2024u;
        fprintf(stderr, "kernel tests: seed %llu (set DEFTSIM_TEST_SEED to replay)\n",
                (unsigned long long)seed);
        done = 1;
    }
    return seed;
}

void kt_rng_init(kt_rng *r, uint64_t seed) { deftsim_xoshiro256_seed(r, seed); }

uint64_t kt_next(kt_rng *r) { return deftsim_xoshiro256_next(r); }

double kt_uniform(kt_rng *r) { return deftsim_rng_unit(kt_next(r)); }

double kt_normal(kt_rng *r)
{
    double u = kt_uniform(r), v = kt_uniform(r);
    return sqrt(-2.0 * log(1.0 - u)) * cos(6.283185307179586 * v);
}

size_t kt_below(kt_rng *r, size_t n) { return n ? (size_t)(kt_next(r) % n) : 0; }

const char *kt_mode_name(kt_mode m)
{
    static const char *const names[KT_MODE_COUNT] = {"normal",   "heavy",     "ties",     "all-equal",
                                                     "all-zero", "nonfinite", "ascending"};
    return (unsigned)m < KT_MODE_COUNT ? names[m] : "?";
}

void kt_fill(float *x, size_t n, kt_mode mode, uint64_t seed)
{
    kt_rng r;
    kt_rng_init(&r, seed);
    for (size_t i = 0; i < n; i++) {
        double sgn = (kt_next(&r) & 1) ? -1.0 : 1.0;
        switch (mode) {
        case KT_NORMAL: x[i] = (float)kt_normal(&r); break;
        case KT_HEAVY: {
            double z = kt_normal(&r), u = kt_uniform(&r);
            x[i] = (float)(z / sqrt(-log(1.0 - u) + 1e-300));
            break;
        }
        case KT_TIES: x[i] = (float)(sgn * (double)kt_below(&r, 4)); break;
        case KT_ALL_EQUAL: x[i] = (float)(sgn * 1.5); break;
        case KT_ALL_ZERO: x[i] = sgn < 0 ? -0.0f : 0.0f; break;
        case KT_NONFINITE: {
            size_t c = kt_below(&r, 16);
            x[i] = c == 0 ? (float)(sgn * NAN) : c == 1 ? (float)(sgn * INFINITY) : (float)kt_normal(&r);
            break;
        }
        case KT_ASCENDING: x[i] = (float)(sgn * (1.0 + (double)i * 1e-3)); break;
        case KT_MODE_COUNT: break;
        }
    }
}

uint32_t kt_rank(float v)
{
    if (isnan(v)) return 0;
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    return (u & 0x7fffffffu) + 1u;
}

static const float *order_x;
static int cmp_order(const void *a, const void *b)
{
    uint32_t i = *(const uint32_t *)a, j = *(const uint32_t *)b;
    uint32_t ri = kt_rank(order_x[i]), rj = kt_rank(order_x[j]);
    if (ri != rj) return ri > rj ? -1 : 1;
    return i < j ? -1 : i > j;
}

uint32_t *kt_ref_order(const float *x, size_t n)
{
    uint32_t *o = malloc((n ? n : 1) * sizeof *o);
    cr_assert(o);
    for (size_t i = 0; i < n; i++) o[i] = (uint32_t)i;
    order_x = x;
    qsort(o, n, sizeof *o, cmp_order);
    return o;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

int kt_same_set(const uint32_t *a, const uint32_t *b, size_t k, const char *label)
{
    uint32_t *sa = malloc((k ? k : 1) * sizeof *sa), *sb = malloc((k ? k : 1) * sizeof *sb);
    cr_assert(sa && sb);
    memcpy(sa, a, k * sizeof *sa);
    memcpy(sb, b, k * sizeof *sb);
    qsort(sa, k, sizeof *sa, cmp_u32);
    qsort(sb, k, sizeof *sb, cmp_u32);
    int ok = memcmp(sa, sb, k * sizeof *sa) == 0;
    if (!ok) {
        for (size_t i = 0; i < k; i++)
            if (sa[i] != sb[i]) {
                fprintf(stderr, "%s: sets differ at sorted position %zu of %zu: got %u, want %u\n",
                        label, i, k, sa[i], sb[i]);
                break;
            }
    }
    free(sa);
    free(sb);
    return ok;
}

#define GUARD_BYTE 0xCD

void kt_buf_alloc(kt_buf *b, size_t bytes)
{
    b->bytes = bytes;
    b->base = malloc(bytes + 2 * KT_GUARD);
    cr_assert(b->base, "out of memory for %zu bytes", bytes);
    memset(b->base, GUARD_BYTE, KT_GUARD);
    memset(b->base + KT_GUARD + bytes, GUARD_BYTE, KT_GUARD);
    for (size_t i = 0; i < bytes; i++) b->base[KT_GUARD + i] = (unsigned char)(0xA5 ^ (i * 7));
    b->p = b->base + KT_GUARD;
}

int kt_guard_ok(const kt_buf *b, const char *label)
{
    for (size_t i = 0; i < KT_GUARD; i++) {
        if (b->base[i] != GUARD_BYTE) {
            fprintf(stderr, "%s: write %zu bytes before the buffer\n", label, KT_GUARD - i);
            return 0;
        }
        if (b->base[KT_GUARD + b->bytes + i] != GUARD_BYTE) {
            fprintf(stderr, "%s: write %zu bytes past the end of the buffer\n", label, i);
            return 0;
        }
    }
    return 1;
}

void kt_buf_free(kt_buf *b)
{
    free(b->base);
    b->base = NULL;
    b->p = NULL;
}

size_t kt_configs(kt_config *out, size_t max)
{
    size_t n = 0;
    for (size_t i = 0; i < deftsim_kernels_backend_count(); i++) {
        const char *be = deftsim_kernels_backend_name(i);
        if (!be) continue;
        if (!deftsim_kernels_backend_available(be)) {
            fprintf(stderr, "backend %s: not available here, skipped\n", be);
            continue;
        }
        /* These tests pass host buffers. The cuda backend takes device pointers only; its
         * operations are checked against the cpu backend by tests/gpu, and here through
         * cuda-staged, which stages host buffers through the device. */
        if (strcmp(be, "cuda") == 0) {
            fprintf(stderr, "backend cuda: takes device pointers, skipped here (tests/gpu checks "
                            "it; cuda-staged runs these tests on the device)\n");
            continue;
        }
        static const struct {
            unsigned threads, flags;
            const char *what;
        } v[] = {{1, 0, "1 thread"},
                 {2, 0, "2 threads"},
                 {1, DEFTSIM_KFLAG_NO_AVX512, "1 thread, AVX2 loops"},
                 {2, DEFTSIM_KFLAG_NO_AVX512, "2 threads, AVX2 loops"},
                 {1, DEFTSIM_KFLAG_GENERIC, "1 thread, generic loops"},
                 {2, DEFTSIM_KFLAG_GENERIC, "2 threads, generic loops"}};
        for (size_t j = 0; j < sizeof v / sizeof v[0] && n < max; j++) {
            /* Instruction sets are a CPU notion. */
            if ((v[j].flags & (DEFTSIM_KFLAG_GENERIC | DEFTSIM_KFLAG_NO_AVX512)) &&
                strcmp(be, "cpu") != 0)
                continue;
            /* One host thread drives a device. */
            if (v[j].threads > 1 && strcmp(be, "cpu") != 0) continue;
            out[n].backend = be;
            out[n].threads = v[j].threads;
            out[n].flags = v[j].flags;
            snprintf(out[n].label, sizeof out[n].label, "%s, %s", be, v[j].what);
            n++;
        }
    }
    return n;
}

const char *kt_expected_isa(const deftsim_kctx *ctx)
{
    if (strcmp(deftsim_kctx_backend(ctx), "cpu") != 0) return NULL;
    unsigned f = deftsim_kctx_flags(ctx);
    int avx2 = 0, avx512 = 0;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("popcnt");
    avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
#endif
    if ((f & DEFTSIM_KFLAG_GENERIC) || !avx2) return "generic";
    if ((f & DEFTSIM_KFLAG_NO_AVX512) || !avx512) return "avx2";
    return "avx512";
}

deftsim_kctx *kt_ctx(const kt_config *c)
{
    deftsim_kctx *ctx = NULL;
    deftsim_status st = deftsim_kctx_new(&ctx, c->backend, c->threads);
    cr_assert_eq(st, DEFTSIM_OK, "%s: %s", c->label, deftsim_error_message());
    deftsim_kctx_set_flags(ctx, c->flags);
    return ctx;
}

int kt_supported(deftsim_kctx *ctx, deftsim_kop op, const char *label)
{
    if (deftsim_k_supports(ctx, op)) return 1;
    fprintf(stderr, "%s: %s unsupported, skipped\n", label, deftsim_kop_name(op));
    return 0;
}
