/* accum.c - one point's accumulators (engine_internal.h): acc_w = residual_w + g_w for the
 * workers that keep a residual, the average accumulator, the fused norm pass of deft_norms =
 * fused, and the provider through which the sparsifier reads them. Gradients come from the
 * engine's source (deftsim_gradsrc.h), whatever its kind. */
#include "engine_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deftsim_par.h"
#include "deftsim_util.h"


/* ---- the average's sums ---------------------------------------------------------------------- */

/* sum[i] += a[0][i], then a[1][i], ... a[m - 1][i], each addition in double in that order: the
 * same bits as adding the rows one pass at a time, but sum is read and written once for the m
 * rows. Blocks of SUM_BLOCK elements keep their partial sums in registers. */
#define SUM_BLOCK 32

static void sum_rows_generic(double *sum, const float *const *a, uint32_t m, size_t cnt)
{
    size_t i = 0;
    for (; i + SUM_BLOCK <= cnt; i += SUM_BLOCK) {
        double s[SUM_BLOCK];
        memcpy(s, sum + i, sizeof s);
        for (uint32_t j = 0; j < m; j++)
            for (size_t q = 0; q < SUM_BLOCK; q++) s[q] += (double)a[j][i + q];
        memcpy(sum + i, s, sizeof s);
    }
    for (; i < cnt; i++) {
        double s = sum[i];
        for (uint32_t j = 0; j < m; j++) s += (double)a[j][i];
        sum[i] = s;
    }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

/* The same with AVX2: eight independent vectors of four doubles, so the additions of one row
 * overlap instead of waiting on each other. */
__attribute__((target("avx2"))) static void sum_rows_avx2(double *sum, const float *const *a,
                                                          uint32_t m, size_t cnt)
{
    size_t i = 0;
    for (; i + SUM_BLOCK <= cnt; i += SUM_BLOCK) {
        __m256d s[SUM_BLOCK / 4];
        for (int q = 0; q < SUM_BLOCK / 4; q++) s[q] = _mm256_loadu_pd(sum + i + 4 * q);
        for (uint32_t j = 0; j < m; j++) {
            const float *x = a[j] + i;
            for (int q = 0; q < SUM_BLOCK / 4; q++)
                s[q] = _mm256_add_pd(s[q], _mm256_cvtps_pd(_mm_loadu_ps(x + 4 * q)));
        }
        for (int q = 0; q < SUM_BLOCK / 4; q++) _mm256_storeu_pd(sum + i + 4 * q, s[q]);
    }
    for (; i < cnt; i++) {
        double s1 = sum[i];
        for (uint32_t j = 0; j < m; j++) s1 += (double)a[j][i];
        sum[i] = s1;
    }
}

static void sum_rows(double *sum, const float *const *a, uint32_t m, size_t cnt)
{
    if (__builtin_cpu_supports("avx2"))
        sum_rows_avx2(sum, a, m, cnt);
    else
        sum_rows_generic(sum, a, m, cnt);
}
#else
#define sum_rows sum_rows_generic
#endif

/* The probe of the average's additions (deftsim_acc_sum_rate): each task adds GEN_WORKERS rows
 * of CHUNK elements into one chunk's sums SUM_PROBE_REPS times, the preparation pass's inner
 * step on data it holds in cache. */
#define SUM_PROBE_REPS 8u

typedef struct {
    float *rows;  /* per thread: GEN_WORKERS x CHUNK */
    double *sums; /* per thread: CHUNK */
    size_t cnt;   /* CHUNK */
} sum_probe;

static deftsim_status sum_probe_task(void *ctx, size_t i, unsigned thread)
{
    (void)i;
    sum_probe *p = ctx;
    const float *rows[GEN_WORKERS];
    float *base = p->rows + (size_t)thread * GEN_WORKERS * CHUNK;
    for (uint32_t j = 0; j < GEN_WORKERS; j++) rows[j] = base + (size_t)j * CHUNK;
    for (unsigned r = 0; r < SUM_PROBE_REPS; r++)
        sum_rows(p->sums + (size_t)thread * CHUNK, rows, GEN_WORKERS, p->cnt);
    return DEFTSIM_OK;
}

deftsim_status deftsim_acc_sum_rate(unsigned threads, double *rate)
{
    *rate = NAN;
    if (threads < 1) threads = 1;
    sum_probe p = {malloc((size_t)threads * GEN_WORKERS * CHUNK * sizeof(float)),
                   calloc((size_t)threads * CHUNK, sizeof(double)), CHUNK};
    deftsim_status st = DEFTSIM_OK;
    if (!p.rows || !p.sums) st = deftsim_error_nomem("the average's addition probe");
    for (size_t i = 0; !st && i < (size_t)threads * GEN_WORKERS * CHUNK; i++)
        p.rows[i] = 1.0f / (float)(1 + i % 1021);
    const size_t tasks = 4 * (size_t)threads;
    const double adds = (double)tasks * SUM_PROBE_REPS * GEN_WORKERS * CHUNK;
    /* Once to warm the caches and the code, then timed three times: the best. */
    if (!st) st = deftsim_par_run(threads, threads, sum_probe_task, &p);
    for (int k = 0; k < 3 && !st; k++) {
        double t0 = deftsim_now();
        st = deftsim_par_run(threads, tasks, sum_probe_task, &p);
        double dt = deftsim_now() - t0;
        if (!st && dt > 0 && !(adds / dt <= *rate)) *rate = adds / dt;
    }
    free(p.rows);
    free(p.sums);
    return st;
}

/* Chunk c of the preparation pass: acc_w = residual_w + g_w for tracked workers, and the
 * average of every worker's accumulator, summed in worker order in double. */
static deftsim_status prepare_chunk(void *ctx, size_t c, unsigned thread)
{
    point_state *ps = ctx;
    deftsim_engine *e = ps->e;
    uint64_t off = (uint64_t)c * CHUNK;
    size_t cnt = (size_t)(ps->n - off < CHUNK ? ps->n - off : CHUNK);
    double *sum = e->sums + (size_t)thread * CHUNK;
    float *stage = e->stage + (size_t)thread * GEN_WORKERS * CHUNK;
    memset(sum, 0, cnt * sizeof *sum);
    /* quality = 0, or the average kept from an earlier point: only the tracked workers'
     * residuals and the resident accumulators; the others' gradients fed the average alone. */
    const int avg = ps->quality && !ps->avg_hit;
    const uint32_t upto = avg ? ps->P : ps->S + ps->C;
    for (uint32_t w0 = 0; w0 < upto; w0 += GEN_WORKERS) {
        uint32_t nw = upto - w0 < GEN_WORKERS ? upto - w0 : GEN_WORKERS;
        const float *g[GEN_WORKERS], *rows[GEN_WORKERS];
        float *outs[GEN_WORKERS];
        for (uint32_t j = 0; j < nw; j++) outs[j] = stage + (size_t)j * CHUNK;
        deftsim_status st = deftsim_gradsrc_read(e->src, ps->it, w0, nw, off, cnt, outs, g);
        if (st) return st;
        for (uint32_t j = 0; j < nw; j++) {
            uint32_t w = w0 + j;
            const float *gw = g[j];
            /* The sums feed the average alone: none without quality. */
            if (w < ps->S && ps->fresh) {
                float *r = ps->res[w] + off;
                memcpy(r, gw, cnt * sizeof *r);
            } else if (w < ps->S) {
                float *r = ps->res[w] + off;
                for (size_t i = 0; i < cnt; i++) r[i] += gw[i];
            } else if (w < ps->S + ps->C) {
                memcpy(ps->kept[w - ps->S] + off, gw, cnt * sizeof *gw);
            }
            rows[j] = w < ps->S ? ps->res[w] + off : gw;
        }
        if (avg) sum_rows(sum, rows, nw, cnt);
    }
    if (!avg) return DEFTSIM_OK;
    float *a = ps->avg + off;
    double inv = 1.0 / (double)ps->P, nn = 0;
    for (size_t i = 0; i < cnt; i++) {
        a[i] = (float)(sum[i] * inv);
        nn += (double)a[i] * (double)a[i];
    }
    ps->chunk_norm2[c] = nn;
    return DEFTSIM_OK;
}

/* ---- deft_norms = fused: the accumulate pass with the fragment norms ------------------------ */

/* Piece c of the fused pass: prepare_chunk's work on one norm block of one fragment, the
 * accumulator formed by deftsim_k_accumulate (which also returns the block's sum of squares). */
static deftsim_status prepare_piece(void *ctx, size_t c, unsigned thread)
{
    point_state *ps = ctx;
    deftsim_engine *e = ps->e;
    uint64_t off = ps->piece_off[c];
    size_t cnt = ps->piece_len[c];
    double *sum = e->sums + (size_t)thread * CHUNK;
    float *stage = e->stage + (size_t)thread * GEN_WORKERS * CHUNK;
    deftsim_kctx *kc = ps->pctx[thread];
    void *scr = ps->pscratch + (size_t)thread * ps->pscratch_each;
    const deftsim_kseg seg = {0, cnt, 0};
    const int mode = ps->fresh ? DEFTSIM_KACC_COPY : DEFTSIM_KACC_ADD;
    const int avg = ps->quality && !ps->avg_hit;
    const uint32_t upto = avg ? ps->P : ps->S + ps->C; /* as prepare_chunk */
    memset(sum, 0, cnt * sizeof *sum);
    for (uint32_t w0 = 0; w0 < upto; w0 += GEN_WORKERS) {
        uint32_t nw = upto - w0 < GEN_WORKERS ? upto - w0 : GEN_WORKERS;
        const float *g[GEN_WORKERS], *rows[GEN_WORKERS];
        float *outs[GEN_WORKERS];
        for (uint32_t j = 0; j < nw; j++) outs[j] = stage + (size_t)j * CHUNK;
        deftsim_status st = deftsim_gradsrc_read(e->src, ps->it, w0, nw, off, cnt, outs, g);
        if (st) return st;
        for (uint32_t j = 0; j < nw; j++) {
            uint32_t w = w0 + j;
            const float *gw = g[j];
            if (w < ps->S) {
                float *r = ps->res[w] + off;
                deftsim_status st = deftsim_k_accumulate(kc, r, gw, cnt, mode, &seg, 1,
                                                         &ps->part[(size_t)w * ps->npieces + c],
                                                         scr, ps->pscratch_each);
                if (st) return st;
                rows[j] = r;
            } else if (w < ps->S + ps->C) { /* resident: acc = g, with its norms */
                float *k = ps->kept[w - ps->S] + off;
                deftsim_status st = deftsim_k_accumulate(kc, k, gw, cnt, DEFTSIM_KACC_COPY, &seg, 1,
                                                         &ps->part[(size_t)w * ps->npieces + c],
                                                         scr, ps->pscratch_each);
                if (st) return st;
                rows[j] = gw;
            } else {
                rows[j] = gw;
            }
        }
        if (avg) sum_rows(sum, rows, nw, cnt);
    }
    if (!avg) return DEFTSIM_OK;
    float *a = ps->avg + off;
    double inv = 1.0 / (double)ps->P;
    for (size_t i = 0; i < cnt; i++) a[i] = (float)(sum[i] * inv);
    return DEFTSIM_OK;
}

/* prepare_chunk's squared norm of the average, alone. */
static deftsim_status avg_norm2_chunk(void *ctx, size_t c, unsigned thread)
{
    (void)thread;
    point_state *ps = ctx;
    uint64_t off = (uint64_t)c * CHUNK;
    size_t cnt = (size_t)(ps->n - off < CHUNK ? ps->n - off : CHUNK);
    const float *a = ps->avg + off;
    double nn = 0;
    for (size_t i = 0; i < cnt; i++) nn += (double)a[i] * (double)a[i];
    ps->chunk_norm2[c] = nn;
    return DEFTSIM_OK;
}

/* Row `row` of the piece sums into fragment norms: each fragment's blocks added in order
 * from 0.0, as seg_norms adds them. */
static void fold_norms(point_state *ps, uint32_t row)
{
    const double *p = ps->part + (size_t)row * ps->npieces;
    double *out = ps->wnorms + (size_t)row * ps->nseg;
    size_t b = 0;
    for (size_t j = 0; j < ps->nseg; j++) {
        size_t nb = (ps->nsegs[j].len + DEFTSIM_K_NORM_BLOCK - 1) / DEFTSIM_K_NORM_BLOCK;
        double s = 0.0;
        for (size_t q = 0; q < nb; q++) s += p[b++];
        out[j] = sqrt(s);
    }
}

/* Forgets what the slots hold (a new iteration). */
static void regen_forget(point_state *ps)
{
    for (uint32_t j = 0; j < GEN_WORKERS; j++) ps->regen_held[j] = UINT32_MAX;
    ps->last_get = UINT32_MAX;
    ps->at_on = 0;
}

/* Run r of the norms of the accumulator in slot regen_slot0 (regenerated: acc = g): one in-place
 * copy with the sums of squares of the run's pieces (a value copied onto itself changes nothing),
 * into row S + C + slot. */
static deftsim_status norm_run(void *ctx, size_t r, unsigned thread)
{
    point_state *ps = ctx;
    const size_t p0 = ps->run_first[r], p1 = ps->run_first[r + 1];
    const uint64_t off = ps->piece_off[p0];
    const size_t cnt = (size_t)(ps->piece_off[p1 - 1] + ps->piece_len[p1 - 1] - off);
    float *acc = ps->regen[ps->regen_slot0] + off;
    uint32_t row = ps->S + ps->C + ps->regen_slot0;
    return deftsim_k_accumulate(ps->pctx[thread], acc, acc, cnt, DEFTSIM_KACC_COPY,
                                ps->piece_rel + p0, p1 - p0, &ps->part[(size_t)row * ps->npieces + p0],
                                ps->pscratch + (size_t)thread * ps->pscratch_each,
                                ps->pscratch_each);
}

static void fused_free(point_state *ps)
{
    for (unsigned t = 0; t < ps->npctx; t++) deftsim_kctx_free(ps->pctx[t]);
    free(ps->pctx);
    free(ps->piece_off);
    free(ps->piece_len);
    free(ps->run_first);
    free(ps->piece_rel);
    free(ps->part);
    free(ps->wnorms);
    free(ps->pscratch);
}

/* Turns the fused pass on when the sparsifier offers fragment norms (DEFT with deft_norms =
 * fused: deftsim_sparsifier_norm_segments) of fragments that tile [0, n) in order; otherwise
 * leaves nseg = 0, and the sparsifier runs its own norm pass. */
deftsim_status deftsim_acc_fused_init(point_state *ps, const deftsim_sparsifier *sp)
{
    deftsim_engine *e = ps->e;
    /* Spread mode forms the accumulators in its own passes: the sparsifier's norm pass runs
     * (the same bits, docs/SPARSIFIERS.md). */
    if (ps->data_free || ps->team) return DEFTSIM_OK;
    const deftsim_kseg *segs;
    size_t nseg;
    deftsim_sparsifier_norm_segments(sp, &segs, &nseg);
    if (!nseg) return DEFTSIM_OK;
    uint64_t pos = 0;
    size_t np = 0;
    for (size_t j = 0; j < nseg; j++) {
        if (segs[j].offset != pos) return DEFTSIM_OK;
        pos += segs[j].len;
        np += (segs[j].len + DEFTSIM_K_NORM_BLOCK - 1) / DEFTSIM_K_NORM_BLOCK;
    }
    if (pos != ps->n) return DEFTSIM_OK;
    deftsim_status st;
    size_t rows = (size_t)ps->S + ps->C + (ps->nregen ? ps->nregen : 1);
    ps->piece_off = malloc(np * sizeof *ps->piece_off);
    ps->piece_len = malloc(np * sizeof *ps->piece_len);
    ps->part = calloc(rows * np, sizeof *ps->part);
    ps->wnorms = calloc(rows * nseg, sizeof *ps->wnorms);
    ps->pctx = calloc(e->prep_threads, sizeof *ps->pctx);
    if (!ps->piece_off || !ps->piece_len || !ps->part || !ps->wnorms || !ps->pctx)
        return deftsim_error_nomem("engine: the fused norms");
    size_t c = 0;
    for (size_t j = 0; j < nseg; j++)
        for (size_t q = 0; q * DEFTSIM_K_NORM_BLOCK < segs[j].len; q++) {
            size_t left = segs[j].len - q * DEFTSIM_K_NORM_BLOCK;
            ps->piece_off[c] = segs[j].offset + q * DEFTSIM_K_NORM_BLOCK;
            ps->piece_len[c++] = (uint32_t)(left < DEFTSIM_K_NORM_BLOCK ? left : DEFTSIM_K_NORM_BLOCK);
        }
    /* The runs of a regenerated accumulator's norms (norm_run): whole pieces, up to
     * REGEN_CHUNK elements (a piece is at most a norm block, which is smaller). */
    ps->run_first = malloc((np + 1) * sizeof *ps->run_first);
    ps->piece_rel = malloc(np * sizeof *ps->piece_rel);
    if (!ps->run_first || !ps->piece_rel) return deftsim_error_nomem("engine: the fused norms");
    size_t nruns = 0, most = 1;
    for (size_t q = 0; q < np; q++) {
        if (!nruns || ps->piece_off[q] + ps->piece_len[q] - ps->piece_off[ps->run_first[nruns - 1]] >
                          REGEN_CHUNK)
            ps->run_first[nruns++] = q;
        size_t first = ps->run_first[nruns - 1];
        ps->piece_rel[q] = (deftsim_kseg){ps->piece_off[q] - ps->piece_off[first], ps->piece_len[q], 0};
        if (q + 1 - first > most) most = q + 1 - first;
    }
    ps->run_first[nruns] = np;
    ps->nruns = nruns;
    for (unsigned t = 0; t < e->prep_threads; t++) {
        if ((st = deftsim_kctx_new(&ps->pctx[t], "cpu", 1))) return st;
        ps->npctx = t + 1;
    }
    /* Scratch for the longest run's pieces (which covers a single piece too). */
    deftsim_kseg *most_segs = malloc(most * sizeof *most_segs);
    if (!most_segs) return deftsim_error_nomem("engine: the fused norms");
    for (size_t q = 0; q < most; q++) most_segs[q] = (deftsim_kseg){q * DEFTSIM_K_NORM_BLOCK, DEFTSIM_K_NORM_BLOCK, 0};
    size_t sb;
    st = deftsim_k_accumulate_scratch(ps->pctx[0], most_segs, most, &sb);
    free(most_segs);
    if (st) return st;
    ps->pscratch_each = (sb + 63) / 64 * 64;
    ps->pscratch = malloc(ps->pscratch_each * e->prep_threads + 1);
    if (!ps->pscratch)
        return deftsim_error_nomem("engine: the fused norms");
    ps->nsegs = segs;
    ps->nseg = nseg;
    ps->npieces = np;
    return DEFTSIM_OK;
}

static void provider_fail(point_state *ps, deftsim_status st);

/* The provider's norms(): a tracked worker's, or the regenerated worker's while a slot holds it
 * (computed at the first request after its regeneration). */
static const double *acc_norms(void *ctx, uint32_t w)
{
    point_state *ps = ctx;
    if (!ps->nseg || w >= ps->P) return NULL;
    if (w < ps->S + ps->C) return ps->wnorms + (size_t)w * ps->nseg;
    for (uint32_t j = 0; j < ps->nregen; j++) {
        if (ps->regen_held[j] != w) continue;
        if (ps->regen_part[j]) {
            provider_fail(ps, deftsim_error_set(DEFTSIM_E_INTERNAL,
                                                "accumulator provider: norms of worker %u "
                                                "asked for during a pass that reads it at an "
                                                "index set only", w));
            return NULL;
        }
        double *out = ps->wnorms + (size_t)(ps->S + ps->C + j) * ps->nseg;
        if (ps->regen_normed[j]) return out;
        double t0 = deftsim_now();
        ps->regen_slot0 = j;
        deftsim_status st = deftsim_par_run(ps->e->prep_threads, ps->nruns, norm_run, ps);
        ps->regen_seconds += deftsim_now() - t0;
        if (st) {
            provider_fail(ps, st);
            return NULL;
        }
        fold_norms(ps, ps->S + ps->C + j);
        ps->regen_normed[j] = 1;
        return out;
    }
    return NULL;
}

/* ---- spread mode: this rank's block (deftsim_team.h) ----------------------------------------
 * Pass 1, on every rank at once: the block's tracked residuals take their gradients. Pass 2,
 * a chain over the ranks: the running double sums of the average (ps->dsum) take the block's
 * accumulators in worker order, as prepare_chunk adds them; the last rank forms the average
 * and its norm, which every rank then receives. */

/* The chunks of one piece of spread mode's chain (4 Mi elements: 32 MiB of running sums). */
#define SPREAD_PIECE_CHUNKS 512u

static deftsim_status spread_update_chunk(void *ctx, size_t c, unsigned thread)
{
    point_state *ps = ctx;
    deftsim_engine *e = ps->e;
    uint64_t off = (uint64_t)c * CHUNK;
    size_t cnt = (size_t)(ps->n - off < CHUNK ? ps->n - off : CHUNK);
    float *stage = e->stage + (size_t)thread * GEN_WORKERS * CHUNK;
    const uint32_t end = ps->hi < ps->S ? ps->hi : ps->S;
    for (uint32_t w0 = ps->lo; w0 < end; w0 += GEN_WORKERS) {
        uint32_t nw = end - w0 < GEN_WORKERS ? end - w0 : GEN_WORKERS;
        const float *g[GEN_WORKERS];
        float *outs[GEN_WORKERS];
        for (uint32_t j = 0; j < nw; j++) outs[j] = stage + (size_t)j * CHUNK;
        deftsim_status st = deftsim_gradsrc_read(e->src, ps->it, w0, nw, off, cnt, outs, g);
        if (st) return st;
        for (uint32_t j = 0; j < nw; j++) {
            float *r = ps->res[w0 + j] + off;
            const float *gw = g[j];
            if (ps->fresh)
                memcpy(r, gw, cnt * sizeof *r);
            else
                for (size_t i = 0; i < cnt; i++) r[i] += gw[i];
        }
    }
    return DEFTSIM_OK;
}

static deftsim_status spread_sum_chunk(void *ctx, size_t c, unsigned thread)
{
    point_state *ps = ctx;
    c += ps->chunk0;
    deftsim_engine *e = ps->e;
    uint64_t off = (uint64_t)c * CHUNK;
    size_t cnt = (size_t)(ps->n - off < CHUNK ? ps->n - off : CHUNK);
    float *stage = e->stage + (size_t)thread * GEN_WORKERS * CHUNK;
    double *sum = ps->dsum + off;
    for (uint32_t w0 = ps->lo; w0 < ps->hi && w0 < ps->S; w0 += GEN_WORKERS) {
        const uint32_t end = ps->hi < ps->S ? ps->hi : ps->S;
        uint32_t nw = end - w0 < GEN_WORKERS ? end - w0 : GEN_WORKERS;
        const float *rows[GEN_WORKERS];
        for (uint32_t j = 0; j < nw; j++) rows[j] = ps->res[w0 + j] + off;
        sum_rows(sum, rows, nw, cnt);
    }
    uint32_t from = ps->lo > ps->S ? ps->lo : ps->S;
    for (uint32_t w0 = from; w0 < ps->hi; w0 += GEN_WORKERS) {
        uint32_t nw = ps->hi - w0 < GEN_WORKERS ? ps->hi - w0 : GEN_WORKERS;
        const float *g[GEN_WORKERS];
        float *outs[GEN_WORKERS];
        for (uint32_t j = 0; j < nw; j++) outs[j] = stage + (size_t)j * CHUNK;
        deftsim_status st = deftsim_gradsrc_read(e->src, ps->it, w0, nw, off, cnt, outs, g);
        if (st) return st;
        sum_rows(sum, g, nw, cnt);
    }
    if (ps->team->rank + 1 < ps->team->size) return DEFTSIM_OK;
    float *a = ps->avg + off;
    double inv = 1.0 / (double)ps->P, nn = 0;
    for (size_t i = 0; i < cnt; i++) {
        a[i] = (float)(sum[i] * inv);
        nn += (double)a[i] * (double)a[i];
    }
    ps->chunk_norm2[c] = nn;
    return DEFTSIM_OK;
}

static deftsim_status spread_prepare(point_state *ps, size_t nchunks)
{
    deftsim_engine *e = ps->e;
    const deftsim_team *t = ps->team;
    deftsim_status st;
    if ((st = deftsim_par_run(e->prep_threads, nchunks, spread_update_chunk, ps))) return st;
    if (!ps->quality) return DEFTSIM_OK;
    if (t->rank == 0) memset(ps->dsum, 0, ps->n * sizeof *ps->dsum);
    /* In pieces, so that the ranks work at once, each on the piece the rank before it has
     * passed on (a pipeline: R - 1 pieces of delay, not R - 1 whole passes). */
    const size_t per = SPREAD_PIECE_CHUNKS;
    for (size_t c0 = 0; c0 < nchunks; c0 += per) {
        size_t cnt = nchunks - c0 < per ? nchunks - c0 : per;
        uint64_t off = (uint64_t)c0 * CHUNK, len = (uint64_t)cnt * CHUNK;
        if (off + len > ps->n) len = ps->n - off;
        double *piece = ps->dsum + off;
        ps->chunk0 = c0;
        if ((st = deftsim_team_chain_in(t, piece, len * sizeof *piece)) ||
            (st = deftsim_par_run(e->prep_threads, cnt, spread_sum_chunk, ps)) ||
            (st = deftsim_team_chain_out(t, piece, len * sizeof *piece)))
            return deftsim_error_wrap(st, "spread mode, the average accumulator");
    }
    ps->chunk0 = 0;
    /* Only rank 0 reads the average (the quality metrics): the last rank sends it there. */
    uint32_t last = t->size - 1;
    if (t->rank == last) {
        double nn = 0;
        for (size_t c = 0; c < nchunks; c++) nn += ps->chunk_norm2[c];
        ps->norm2 = nn;
    }
    if (last != 0 && t->rank == last &&
        ((st = t->send(t->ctx, 0, ps->avg, ps->n * sizeof *ps->avg)) ||
         (st = t->send(t->ctx, 0, &ps->norm2, sizeof ps->norm2))))
        return deftsim_error_wrap(st, "spread mode, the average accumulator");
    if (last != 0 && t->rank == 0 &&
        ((st = t->recv(t->ctx, last, ps->avg, ps->n * sizeof *ps->avg)) ||
         (st = t->recv(t->ctx, last, &ps->norm2, sizeof ps->norm2))))
        return deftsim_error_wrap(st, "spread mode, the average accumulator");
    return DEFTSIM_OK;
}

/* Without error feedback the average of iteration it is the same for every point at this P:
 * the first point keeps it (avg_keep), the others copy it (memory plan's avg_cache). */
static int avg_cached(point_state *ps)
{
    deftsim_engine *e = ps->e;
    if (!ps->quality || ps->S || ps->team || !deftsim_engine_avg_cache(e, ps->P)) return 0;
    if (e->avg_P != ps->P) {
        if (!e->avg_keep) {
            e->avg_keep = calloc(e->iterations, sizeof *e->avg_keep);
            e->avg_norm2 = calloc(e->iterations, sizeof *e->avg_norm2);
            e->avg_have = calloc(e->iterations, 1);
            if (!e->avg_keep || !e->avg_norm2 || !e->avg_have) {
                free(e->avg_keep), free(e->avg_norm2), free(e->avg_have);
                e->avg_keep = NULL, e->avg_norm2 = NULL, e->avg_have = NULL;
                return 0;
            }
        }
        memset(e->avg_have, 0, e->iterations);
        e->avg_P = ps->P;
    }
    return ps->it < e->iterations && e->avg_have[ps->it];
}

static void avg_keep(point_state *ps)
{
    deftsim_engine *e = ps->e;
    if (!ps->quality || ps->S || ps->team || e->avg_P != ps->P || ps->it >= e->iterations ||
        e->avg_have[ps->it])
        return;
    size_t nb = (size_t)ps->n * sizeof(float);
    if (!e->avg_keep[ps->it] && !(e->avg_keep[ps->it] = deftsim_big_alloc(nb))) return;
    memcpy(e->avg_keep[ps->it], ps->avg, nb);
    e->avg_norm2[ps->it] = ps->norm2;
    e->avg_have[ps->it] = 1;
}

/* Runs before each step: every tracked residual takes its gradient, the average accumulator
 * and its squared norm are computed (or copied where an earlier point kept them: avg_cached).
 * A trace's gradients are checked finite first (once per iteration and worker for the whole
 * run). */
deftsim_status deftsim_acc_prepare(point_state *ps)
{
    deftsim_engine *e = ps->e;
    deftsim_status st;
    if ((st = deftsim_gradsrc_prepare(e->src, ps->it, ps->P, e->prep_threads))) return st;
    size_t nchunks = (size_t)((ps->n + CHUNK - 1) / CHUNK);
    regen_forget(ps);
    ps->norm2 = NAN;
    ps->avg_hit = avg_cached(ps);
    if (ps->avg_hit) {
        memcpy(ps->avg, e->avg_keep[ps->it], (size_t)ps->n * sizeof(float));
        ps->norm2 = e->avg_norm2[ps->it];
    }
    /* quality = 0 (or the average kept) and no residual to update (error_feedback = none)
     * and no resident accumulator: nothing to prepare. */
    if ((!ps->quality || ps->avg_hit) && !ps->S && !ps->C) return DEFTSIM_OK;
    if (ps->team) return spread_prepare(ps, nchunks);
    if (ps->nseg) {
        if ((st = deftsim_par_run(e->prep_threads, ps->npieces, prepare_piece, ps))) return st;
        for (uint32_t w = 0; w < ps->S + ps->C; w++) fold_norms(ps, w);
        /* The average's squared norm in the plain pass's chunks, so its bits do not depend
         * on deft_norms. */
        if (ps->quality && !ps->avg_hit &&
            (st = deftsim_par_run(e->prep_threads, nchunks, avg_norm2_chunk, ps)))
            return st;
    } else if ((st = deftsim_par_run(e->prep_threads, nchunks, prepare_chunk, ps))) {
        return st;
    }
    if (!ps->quality || ps->avg_hit) return DEFTSIM_OK;
    double nn = 0;
    for (size_t c = 0; c < nchunks; c++) nn += ps->chunk_norm2[c];
    ps->norm2 = nn;
    avg_keep(ps);
    return DEFTSIM_OK;
}

static deftsim_status regen_chunk(void *ctx, size_t c, unsigned thread)
{
    (void)thread;
    point_state *ps = ctx;
    uint64_t off = (uint64_t)c * REGEN_CHUNK;
    uint64_t cnt = ps->n - off < REGEN_CHUNK ? ps->n - off : REGEN_CHUNK;
    return deftsim_gradsrc_fill(ps->e->src, ps->it, ps->regen_worker, off, (size_t)cnt,
                                ps->regen_out + off);
}

/* Worker w's gradient of this iteration into out, on the preparation threads. */
static deftsim_status regenerate(point_state *ps, uint32_t w, float *out)
{
    ps->regen_worker = w;
    ps->regen_out = out;
    size_t nchunks = (size_t)((ps->n + REGEN_CHUNK - 1) / REGEN_CHUNK);
    return deftsim_par_run(ps->e->prep_threads, nchunks, regen_chunk, ps);
}

/* get(), release() and grad() cannot return a status: the first failure is kept for the
 * engine to raise after the step. */
static void provider_fail(point_state *ps, deftsim_status st)
{
    if (ps->get_status) return;
    ps->get_status = st;
    snprintf(ps->get_msg, sizeof ps->get_msg, "%s", deftsim_error_message());
}

/* Chunk c of a block's regeneration: workers regen_worker .. + regen_nw - 1 from one
 * generator call, into slots regen_slot0 onwards. */
static deftsim_status regen_block_chunk(void *ctx, size_t c, unsigned thread)
{
    (void)thread;
    point_state *ps = ctx;
    uint64_t off = (uint64_t)c * REGEN_CHUNK;
    size_t cnt = (size_t)(ps->n - off < REGEN_CHUNK ? ps->n - off : REGEN_CHUNK);
    const uint32_t nw = ps->regen_nw;
    const float *g[GEN_WORKERS];
    float *outs[GEN_WORKERS] = {0};
    for (uint32_t j = 0; j < nw; j++) outs[j] = ps->regen[ps->regen_slot0 + j] + off;
    deftsim_status st = deftsim_gradsrc_read(ps->e->src, ps->it, ps->regen_worker, nw, off, cnt, outs, g);
    if (st) return st;
    for (uint32_t j = 0; j < nw; j++)
        if (g[j] != outs[j]) memcpy(outs[j], g[j], cnt * sizeof *outs[j]);
    return DEFTSIM_OK;
}

/* Piece p of a slot's partial regeneration: its runs for workers regen_worker .. + regen_nw - 1
 * from one generator call. */
static deftsim_status regen_runs_piece(void *ctx, size_t p, unsigned thread)
{
    (void)thread;
    point_state *ps = ctx;
    float *outs[GEN_WORKERS] = {0};
    for (uint32_t j = 0; j < ps->regen_nw; j++) outs[j] = ps->regen[ps->regen_slot0 + j];
    size_t r0 = ps->at_piece[p], r1 = ps->at_piece[p + 1];
    return deftsim_gradsrc_fill_runs(ps->e->src, ps->it, ps->regen_worker, ps->regen_nw,
                                     ps->at_runs + r0, r1 - r0, outs);
}

/* The runs of 32-element groups holding idx[0 .. nnz) (ascending), joined across gaps of at
 * most AT_GAP groups (one generator call is cheaper than the few elements it skips); at_on
 * stays 0 where they would cover more than half the gradient. nnz = 0: a pass that only
 * writes, whose slots need no values at all. */
#define AT_GAP 2u
static void acc_reads_at(void *ctx, const deftsim_kidx *idx, uint64_t nnz)
{
    point_state *ps = ctx;
    /* The slots filled for the pass that ends hold their workers in part only. */
    for (uint32_t j = 0; j < ps->nregen; j++)
        if (ps->regen_part[j]) {
            ps->regen_part[j] = 0;
            ps->regen_held[j] = UINT32_MAX;
        }
    ps->at_on = 0;
    if (!idx) return;
    const uint64_t G = DEFTSIM_GEN_GROUP, n = ps->n;
    size_t nr = 0;
    uint64_t covered = 0, cur_a = 0, cur_b = 0;
    for (uint64_t i = 0; i < nnz; i++) {
        uint64_t x = (uint64_t)idx[i];
        if (x >= n || (i && x <= (uint64_t)idx[i - 1])) return; /* not ascending: whole fills */
        uint64_t a = x / G * G, b = a + G < n ? a + G : n;
        if (nr && a <= cur_b + AT_GAP * G) {
            if (b > cur_b) cur_b = b;
            continue;
        }
        if (nr) {
            covered += cur_b - cur_a;
            ps->at_runs[nr - 1] = (deftsim_gen_run){cur_a, cur_b - cur_a};
        }
        if (nr == ps->at_cap) {
            size_t cap = ps->at_cap ? 2 * ps->at_cap : 4096;
            deftsim_gen_run *r = realloc(ps->at_runs, cap * sizeof *r);
            if (!r) return; /* whole fills */
            ps->at_runs = r;
            ps->at_cap = cap;
        }
        nr++;
        cur_a = a;
        cur_b = b;
    }
    if (nr) {
        covered += cur_b - cur_a;
        ps->at_runs[nr - 1] = (deftsim_gen_run){cur_a, cur_b - cur_a};
    }
    if (covered > n / 2) return;
    /* Pieces of about REGEN_CHUNK elements for the preparation threads. */
    size_t most = (size_t)(covered / REGEN_CHUNK) + 2;
    size_t *pc = realloc(ps->at_piece, (most + 1) * sizeof *pc);
    if (!pc) return;
    ps->at_piece = pc;
    size_t np = 0;
    uint64_t acc = 0;
    pc[np++] = 0;
    for (size_t r = 0; r < nr; r++) {
        acc += ps->at_runs[r].count;
        if (acc >= REGEN_CHUNK && r + 1 < nr && np < most) {
            pc[np++] = r + 1;
            acc = 0;
        }
    }
    pc[np] = nr;
    ps->at_npieces = np;
    ps->at_nruns = nr;
    ps->at_on = 1;
}

/* Workers w .. w + nw - 1 into slots slot0 onwards (during a pass of reads_at: at its runs
 * only). */
static deftsim_status regen_into_slots(point_state *ps, uint32_t w, uint32_t nw, uint32_t slot0)
{
    double t0 = deftsim_now();
    for (uint32_t j = 0; j < nw; j++) ps->regen_held[slot0 + j] = UINT32_MAX;
    ps->regen_worker = w;
    ps->regen_nw = nw;
    ps->regen_slot0 = slot0;
    deftsim_status st;
    /* Fused norms: computed when asked for (acc_norms), since DEFT reads them on one of its
     * two visits of a worker only. */
    for (uint32_t j = 0; j < nw; j++) {
        ps->regen_normed[slot0 + j] = 0;
        ps->regen_part[slot0 + j] = (uint8_t)ps->at_on;
    }
    if (ps->at_on) {
        st = deftsim_par_run(ps->e->prep_threads, ps->at_npieces, regen_runs_piece, ps);
    } else if (nw == 1) {
        st = regenerate(ps, w, ps->regen[slot0]);
    } else {
        size_t nchunks = (size_t)((ps->n + REGEN_CHUNK - 1) / REGEN_CHUNK);
        st = deftsim_par_run(ps->e->prep_threads, nchunks, regen_block_chunk, ps);
    }
    ps->regen_seconds += deftsim_now() - t0;
    if (st) return st;
    for (uint32_t j = 0; j < nw; j++) ps->regen_held[slot0 + j] = w + j;
    return DEFTSIM_OK;
}

/* The provider: a tracked worker's residual buffer (prepared before the step), else its
 * gradient regenerated (or copied from the trace) into a slot. The sparsifier does not write
 * an accumulator before its last visit and releases it after, so a repeated get() of a worker
 * a slot holds returns it without regenerating. A get() of the worker after the last one
 * asked for (a sparsifier walking the workers in ascending order) regenerates the next
 * nregen workers at once, which one generator call does at a lower cost per worker; any
 * other get() regenerates its worker alone, into a slot that holds none (slot 0 if all do). */
static float *acc_get(void *ctx, uint32_t w)
{
    point_state *ps = ctx;
    if (w >= ps->P) {
        provider_fail(ps, deftsim_error_set(DEFTSIM_E_INTERNAL,
                                            "accumulator provider: worker %u requested, P = %u",
                                            w, ps->P));
        return NULL;
    }
    if (w < ps->lo || w >= ps->hi) {
        provider_fail(ps, deftsim_error_set(DEFTSIM_E_INTERNAL,
                                            "accumulator provider: worker %u requested, this "
                                            "rank holds workers %u to %u",
                                            w, ps->lo, ps->hi - 1));
        return NULL;
    }
    if (w < ps->S) return ps->res[w];
    if (w < ps->S + ps->C) return ps->kept[w - ps->S];
    const uint32_t prev = ps->last_get;
    ps->last_get = w;
    for (uint32_t j = 0; j < ps->nregen; j++)
        if (ps->regen_held[j] == w) return ps->regen[j];
    deftsim_status st;
    if (ps->nregen > 1 && prev != UINT32_MAX && w == prev + 1) {
        uint32_t nw = ps->hi - w < ps->nregen ? ps->hi - w : ps->nregen;
        st = regen_into_slots(ps, w, nw, 0);
        if (!st) return ps->regen[0];
    } else {
        uint32_t slot = 0;
        for (uint32_t j = 0; j < ps->nregen; j++)
            if (ps->regen_held[j] == UINT32_MAX) {
                slot = j;
                break;
            }
        st = regen_into_slots(ps, w, 1, slot);
        if (!st) return ps->regen[slot];
    }
    provider_fail(ps, st);
    return NULL;
}

int deftsim_acc_is_scratch(void *ctx, uint32_t w, const float *p)
{
    (void)w;
    const point_state *ps = ctx;
    for (uint32_t j = 0; j < ps->nregen; j++)
        if (p == ps->regen[j]) return 1;
    return 0;
}

/* The residual is already where it belongs (a tracked buffer, or dropped with the shared
 * one); only what the slot holding the worker caches ends. */
static deftsim_status acc_release(void *ctx, uint32_t w)
{
    point_state *ps = ctx;
    for (uint32_t j = 0; j < ps->nregen; j++)
        if (ps->regen_held[j] == w) ps->regen_held[j] = UINT32_MAX;
    return DEFTSIM_OK;
}

static const float *acc_grad(void *ctx, uint32_t w)
{
    point_state *ps = ctx;
    if (w >= ps->P) {
        provider_fail(ps, deftsim_error_set(DEFTSIM_E_INTERNAL,
                                            "gradient provider: worker %u requested, P = %u", w,
                                            ps->P));
        return NULL;
    }
    const float *g = deftsim_gradsrc_map(ps->e->src, ps->it, w);
    if (g) return g;
    double t0 = deftsim_now();
    deftsim_status st = regenerate(ps, w, ps->gradbuf);
    ps->regen_seconds += deftsim_now() - t0;
    if (st) {
        provider_fail(ps, st);
        return NULL;
    }
    return ps->gradbuf;
}

void deftsim_acc_free(point_state *ps)
{
    fused_free(ps);
    free(ps->at_runs);
    free(ps->at_piece);
    free(ps->dsum);
    free(ps->res);
    free(ps->kept);
    free(ps->chunk_norm2);
    memset(ps, 0, sizeof *ps);
}

/* Buffer i of the pool, mapped on first use; a new mapping's bytes are added to *mapped (the
 * pages the kernel zeroes at their first write), when mapped is not NULL. */
static float *pool_get(deftsim_engine *e, size_t i, uint64_t *mapped)
{
    if (i >= e->npool) {
        float **p = realloc(e->pool, (i + 1) * sizeof *p);
        if (!p) return NULL;
        e->pool = p;
        while (e->npool <= i) e->pool[e->npool++] = NULL;
    }
    if (!e->pool[i]) {
        size_t bytes = (size_t)e->model->numel * sizeof(float);
        e->pool[i] = deftsim_big_alloc(bytes);
        if (e->pool[i] && mapped) *mapped += bytes;
    }
    return e->pool[i];
}

deftsim_status deftsim_acc_init(point_state *ps, deftsim_engine *e, uint32_t P, int data_free)
{
    memset(ps, 0, sizeof *ps);
    ps->e = e;
    ps->P = P;
    ps->n = e->model->numel;
    ps->S = deftsim_engine_tracked_workers(e->cfg, P);
    ps->quality = e->cfg->engine.quality;
    ps->data_free = data_free;
    ps->norm2 = NAN;
    regen_forget(ps);
    ps->fresh = 1;
    size_t n = (size_t)ps->n;
    size_t nchunks = (n + CHUNK - 1) / CHUNK;
    ps->team = e->opt.team && e->opt.team->size > 1 ? e->opt.team : NULL;
    deftsim_team_block(ps->team, P, &ps->lo, &ps->hi);
    ps->res = calloc(ps->S ? ps->S : 1, sizeof *ps->res);
    ps->chunk_norm2 = calloc(nchunks, sizeof(double));
    if (!ps->res || !ps->chunk_norm2) goto nomem;
    if (data_free) return DEFTSIM_OK; /* no accumulator is ever formed */
    size_t next = 0;
    if (ps->quality && !(ps->avg = pool_get(e, next++, &ps->mapped_bytes))) goto nomem;
    if (ps->team && ps->quality && !(ps->dsum = malloc(n * sizeof *ps->dsum)))
        goto nomem;
    /* Only this process's block keeps residuals here (all of them without spread mode). */
    for (uint32_t w = ps->lo; w < ps->S && w < ps->hi; w++)
        if (!(ps->res[w] = pool_get(e, next++, &ps->mapped_bytes))) goto nomem;
    /* The resident accumulators (one process only: its block is every worker). */
    if (!ps->team && ps->S < P) {
        uint32_t C = deftsim_engine_resident(e, P);
        ps->C = C < P - ps->S ? C : P - ps->S;
        if (ps->C && !(ps->kept = calloc(ps->C, sizeof *ps->kept))) goto nomem;
        for (uint32_t j = 0; j < ps->C; j++)
            if (!(ps->kept[j] = pool_get(e, next++, &ps->mapped_bytes))) goto nomem;
    }
    /* The slots, when this process holds a worker without a residual or a resident one. */
    if (ps->S + ps->C < ps->hi) {
        uint32_t untracked = ps->hi - (ps->S + ps->C > ps->lo ? ps->S + ps->C : ps->lo);
        uint32_t slots = deftsim_engine_regen_slots(e, P);
        ps->nregen = slots < untracked ? slots : untracked;
        for (uint32_t j = 0; j < ps->nregen; j++)
            if (!(ps->regen[j] = pool_get(e, next++, NULL))) goto nomem;
    }
    if (!deftsim_gradsrc_maps(e->src) && deftsim_engine_needs_grad(e->cfg) &&
        !(ps->gradbuf = pool_get(e, next++, NULL))) goto nomem;
    return DEFTSIM_OK;
nomem:;
    uint32_t S = ps->S;
    deftsim_acc_free(ps);
    return deftsim_error_nomem("P = %u: the accumulators (%u residuals of %zu floats; lower [engine] memory_budget to leave room for the system)",
                               P, S, n);
}

/* Whether the provider hands out the same memory for a worker all iteration long: only when
 * every worker keeps a residual. Sampled mode always goes through the regenerating provider,
 * even with S >= P (so that sampled with S = P reproduces full exactly: a check of it). */
deftsim_acc_provider deftsim_acc_provider_of(point_state *ps)
{
    /* Partial regenerations only where the timed kernels see flushed accumulators: a warm
     * cache would hold other lines after a partial fill than after a whole one. */
    const int cold = ps->e->cfg->timing.cache == DEFTSIM_TIMING_COLD;
    return (deftsim_acc_provider){.get = acc_get,
                                  .ctx = ps,
                                  .persistent = ps->e->cfg->sparsify.error_feedback ==
                                                DEFTSIM_FEEDBACK_FULL,
                                  .release = acc_release,
                                  .grad = acc_grad,
                                  .norms = acc_norms,
                                  .reads_at = cold ? acc_reads_at : NULL};
}
