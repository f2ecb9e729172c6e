/* gpu_util.c - helpers of the GPU test and benchmark (see gpu_util.h). */
#include "gpu_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deftsim_deft.h"
#include "deftsim_model.h"
#include "deftsim_rng.h"

/* ---- Random data ---------------------------------------------------------------------------- */

void gu_rng_init(gu_rng *r, uint64_t seed) { deftsim_xoshiro256_seed(r, seed); }

uint64_t gu_next(gu_rng *r) { return deftsim_xoshiro256_next(r); }

double gu_uniform(gu_rng *r) { return deftsim_rng_unit(gu_next(r)); }
double gu_open(gu_rng *r) { return deftsim_rng_open(gu_next(r)); }
size_t gu_below(gu_rng *r, size_t n) { return n ? (size_t)(gu_next(r) % n) : 0; }

static double gu_normal(gu_rng *r)
{
    return sqrt(-2.0 * log(gu_open(r))) * cos(6.283185307179586 * gu_uniform(r));
}

const char *gu_mode_name(gu_mode m)
{
    static const char *const names[GU_MODE_COUNT] = {"normal",   "heavy",     "ties",     "all-equal",
                                                     "all-zero", "nonfinite", "ascending"};
    return (unsigned)m < GU_MODE_COUNT ? names[m] : "?";
}

void gu_fill(float *x, size_t n, gu_mode mode, uint64_t seed)
{
    gu_rng r;
    gu_rng_init(&r, seed);
    for (size_t i = 0; i < n; i++) {
        double sgn = (gu_next(&r) & 1) ? -1.0 : 1.0;
        switch (mode) {
        case GU_NORMAL: x[i] = (float)gu_normal(&r); break;
        case GU_HEAVY: x[i] = (float)(gu_normal(&r) / sqrt(-log(gu_open(&r)))); break;
        case GU_TIES: x[i] = (float)(sgn * (double)gu_below(&r, 4)); break;
        case GU_ALL_EQUAL: x[i] = (float)(sgn * 1.5); break;
        case GU_ALL_ZERO: x[i] = sgn < 0 ? -0.0f : 0.0f; break;
        case GU_NONFINITE: {
            size_t c = gu_below(&r, 16);
            x[i] = c == 0 ? (float)(sgn * NAN) : c == 1 ? (float)(sgn * INFINITY) : (float)gu_normal(&r);
            break;
        }
        case GU_ASCENDING: x[i] = (float)(sgn * (1.0 + (double)i * 1e-3)); break;
        case GU_MODE_COUNT: break;
        }
    }
}

void gu_fill_bench(float *x, size_t n, int heavy, uint64_t seed)
{
    /* src/cli/cmd_bench.c's fill(): Box-Muller pairs, heavy divides by sqrt(-log u). */
    gu_rng r;
    gu_rng_init(&r, seed);
    for (size_t i = 0; i < n; i += 2) {
        double rad = sqrt(-2.0 * log(gu_open(&r))), th = 6.283185307179586 * gu_open(&r);
        double z[2] = {rad * cos(th), rad * sin(th)};
        for (size_t j = 0; j < 2 && i + j < n; j++)
            x[i + j] = heavy ? (float)(z[j] / sqrt(-log(gu_open(&r)))) : (float)z[j];
    }
}

size_t gu_count_nan(const float *x, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += isnan(x[i]) ? 1 : 0;
    return c;
}

/* ---- Sets --------------------------------------------------------------------------------- */

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

int gu_same_set(uint32_t *a, uint32_t *b, size_t k)
{
    qsort(a, k, sizeof *a, cmp_u32);
    qsort(b, k, sizeof *b, cmp_u32);
    return memcmp(a, b, k * sizeof *a) == 0;
}

/* ---- Guarded device buffers --------------------------------------------------------------- */

#define GUARD_BYTE 0xCD
#define INSIDE_BYTE 0x5A

int gu_dalloc(deftsim_kctx *ctx, deftsim_kcuda_pool *pool, gu_dbuf *b, size_t bytes)
{
    void *p;
    memset(b, 0, sizeof *b);
    if (deftsim_kcuda_alloc(pool, bytes + 2 * GU_GUARD, &p)) {
        fprintf(stderr, "device buffer of %zu bytes: %s\n", bytes, deftsim_error_message());
        return -1;
    }
    b->base = p;
    b->p = b->base + GU_GUARD;
    b->bytes = bytes;
    if (deftsim_kcuda_memset(ctx, b->base, GUARD_BYTE, GU_GUARD) ||
        deftsim_kcuda_memset(ctx, b->p, INSIDE_BYTE, bytes) ||
        deftsim_kcuda_memset(ctx, b->base + GU_GUARD + bytes, GUARD_BYTE, GU_GUARD)) {
        fprintf(stderr, "device memset: %s\n", deftsim_error_message());
        return -1;
    }
    return 0;
}

int gu_dguard_ok(deftsim_kctx *ctx, const gu_dbuf *b)
{
    unsigned char g[2][GU_GUARD];
    if (deftsim_kcuda_download(ctx, g[0], b->base, GU_GUARD) ||
        deftsim_kcuda_download(ctx, g[1], b->base + GU_GUARD + b->bytes, GU_GUARD)) {
        fprintf(stderr, "guard download: %s\n", deftsim_error_message());
        return 0;
    }
    for (size_t i = 0; i < GU_GUARD; i++)
        if (g[0][i] != GUARD_BYTE || g[1][i] != GUARD_BYTE) return 0;
    return 1;
}

void gu_dfree(deftsim_kcuda_pool *pool, gu_dbuf *b)
{
    if (b->base) deftsim_kcuda_release(pool, b->base);
    memset(b, 0, sizeof *b);
}

/* ---- DEFT's fragments ------------------------------------------------------------------------ */

size_t gu_model_numel(const char *model)
{
    deftsim_model *m;
    if (deftsim_model_builtin(model, &m)) return 0;
    size_t n = (size_t)m->numel;
    deftsim_model_free(m);
    return n;
}

int gu_deft_segments(const char *model, uint32_t P, double density, const float *x, size_t n,
                     deftsim_kseg **segs_out, size_t *nseg_out)
{
    deftsim_model *m = NULL;
    deftsim_fragment *fr = NULL;
    deftsim_kctx *cpu = NULL;
    double *norms = NULL;
    uint64_t *kj = NULL;
    size_t *order = NULL, nf = 0, sb = 0;
    deftsim_kseg *segs = NULL;
    void *scr = NULL;
    int rc = -1;
    if (deftsim_model_builtin(model, &m) || m->numel != n || deftsim_deft_fragments(m, P, &fr, &nf) ||
        deftsim_kctx_new(&cpu, "cpu", 0))
        goto done;
    norms = malloc(nf * sizeof *norms);
    kj = malloc(nf * sizeof *kj);
    order = malloc(nf * sizeof *order);
    segs = malloc(nf * sizeof *segs);
    if (!norms || !kj || !order || !segs) goto done;
    for (size_t j = 0; j < nf; j++) segs[j] = (deftsim_kseg){fr[j].offset, fr[j].size, 0};
    if (deftsim_k_seg_norms_scratch(cpu, segs, nf, &sb)) goto done;
    if (sb && !(scr = malloc(sb))) goto done;
    if (deftsim_k_seg_norms(cpu, x, n, segs, nf, norms, scr, sb)) goto done;
    (void)deftsim_deft_allocate_k(fr, nf, norms, (uint64_t)floor(density * (double)n), kj, order);
    for (size_t j = 0; j < nf; j++) segs[j].k = (size_t)kj[j];
    *segs_out = segs;
    *nseg_out = nf;
    segs = NULL;
    rc = 0;
done:
    if (rc) fprintf(stderr, "DEFT fragments of %s for P = %u: %s\n", model, P, deftsim_error_message());
    deftsim_kctx_free(cpu);
    deftsim_model_free(m);
    free(fr);
    free(norms);
    free(kj);
    free(order);
    free(segs);
    free(scr);
    return rc;
}
