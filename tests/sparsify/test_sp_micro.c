/* test_sp_micro.c - MiCRO and ExDyna against their definition (docs/SPARSIFIERS.md, "micro"
 * and "exdyna"): the threshold controller's constants, a hand-computed MiCRO case step by
 * step, ExDyna's block geometry and repartition sweep (cascade, floor, zero counts, rank
 * mapping), every step of several iterations against a brute-force model for P = 1, 3, 4, 5
 * (selection, fallback, union, aggregate, residual, wire bytes), mass conservation, and two
 * fresh runs giving the same results. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sp_test.h"

TestSuite(sp_micro, .init = sp_suite_init, .fini = sp_suite_fini);

static deftsim_step_result *step_ok(deftsim_sparsifier *s, uint64_t t,
                                    const deftsim_acc_provider *prov)
{
    deftsim_step_result *r = NULL;
    cr_assert_eq(deftsim_sparsifier_step(s, t, prov, &r), DEFTSIM_OK, "%s",
                 deftsim_error_message());
    return r;
}

/* ---- the threshold controller ----------------------------------------------------------- */

Test(sp_micro, threshold_controller_constants)
{
    const double thr = 0.25;
    /* K / k > 1.1: up by 0.5 %. */
    cr_expect_eq(deftsim_micro_threshold_next(thr, 12, 10), thr * 1.005);
    cr_expect_eq(deftsim_micro_threshold_next(thr, 1000, 1), thr * 1.005);
    /* 1.1 itself is inside the band: up by 0.125 %. */
    cr_expect_eq(deftsim_micro_threshold_next(thr, 11, 10), thr * 1.00125);
    /* Inside the band, even below 1, it still rises (the authors' inner branch tests > 0). */
    cr_expect_eq(deftsim_micro_threshold_next(thr, 10, 10), thr * 1.00125);
    cr_expect_eq(deftsim_micro_threshold_next(thr, 910, 1000), thr * 1.00125);
    /* 0.909 itself and below: down by 0.5 %. */
    cr_expect_eq(deftsim_micro_threshold_next(thr, 909, 1000), thr * 0.995);
    cr_expect_eq(deftsim_micro_threshold_next(thr, 0, 1000), thr * 0.995);
}

/* ---- MiCRO by hand ---------------------------------------------------------------------- */

static void expect_bytes(const deftsim_step_result *r, uint64_t cb, uint64_t m, uint64_t K,
                         uint32_t si, uint32_t sv)
{
    const deftsim_step *st;
    cr_assert(st = sp_find_step(r, DEFTSIM_STEP_ALLGATHER, "counts", 0));
    for (uint32_t w = 0; w < r->P; w++) cr_expect_eq(st->bytes[w], cb);
    cr_assert(st = sp_find_step(r, DEFTSIM_STEP_ALLGATHER, "indices", 0));
    for (uint32_t w = 0; w < r->P; w++) cr_expect_eq(st->bytes[w], m * si, "m %llu", (unsigned long long)m);
    cr_assert(st = sp_find_step(r, DEFTSIM_STEP_ALLREDUCE, "values", 0));
    for (uint32_t w = 0; w < r->P; w++) cr_expect_eq(st->bytes[w], K * sv);
    cr_expect_eq(sp_count_collectives(r), 3);
}

static void expect_sel(deftsim_sparsifier *s, uint32_t w, const uint32_t *want, size_t nwant)
{
    const deftsim_kidx *idx;
    uint64_t c;
    cr_assert_eq(deftsim_sparsifier_selection(s, w, &idx, &c), DEFTSIM_OK);
    cr_assert_eq(c, nwant, "worker %u: %llu picks, want %zu", w, (unsigned long long)c, nwant);
    for (size_t i = 0; i < nwant; i++) cr_expect_eq(idx[i], want[i], "worker %u pick %zu", w, i);
}

Test(sp_micro, micro_hand_case_p3)
{
    /* n = 10, P = 3: partitions [0, 4), [4, 7), [7, 10); d = 0.4: k = 4, thr = 1 / (2 * 2). */
    static const char *const shapes[] = {"10"};
    deftsim_model *m = sp_model(shapes, 1);
    deftsim_sparsifier_params p = sp_params(DEFTSIM_METHOD_MICRO, 0.4, 3, m);
    deftsim_sparsifier *s = sp_new(&p);
    sp_accs *a = sp_accs_new(3, 10);
    static const float a0[10] = {0.125f, 0.25f, -0.5f, 0, 1, 2, 3, 4, 5, 6};
    static const float a1[10] = {1, 1, 1, 1, 0.125f, -0.125f, 0, 1, 1, 1};
    static const float a2[10] = {0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 2, 0.125f, -0.25f};
    memcpy(a->acc[0], a0, sizeof a0);
    memcpy(a->acc[1], a1, sizeof a1);
    memcpy(a->acc[2], a2, sizeof a2);

    /* t = 0: worker w selects in partition w. Worker 0: 0.25 (>=) and -0.5; worker 1 has nothing
     * >= 0.25 and sends lo + (0 mod 3) = 4; worker 2: 2 and -0.25. */
    deftsim_step_result *r = step_ok(s, 0, &a->prov);
    cr_expect_eq(r->threshold, 0.25);
    cr_expect_eq(r->count_control, 1);
    expect_sel(s, 0, (const uint32_t[]){1, 2}, 2);
    expect_sel(s, 1, (const uint32_t[]){4}, 1);
    expect_sel(s, 2, (const uint32_t[]){7, 9}, 2);
    static const uint32_t U0[] = {1, 2, 4, 7, 9};
    cr_assert_eq(r->nnz, 5);
    cr_expect_eq(r->count_total, 5);
    cr_expect_eq(r->count_max, 2);
    for (size_t i = 0; i < 5; i++) {
        uint32_t u = U0[i];
        cr_expect_eq(r->agg_index[i], u);
        /* Every worker's value at U, averaged: (a0 + a1 + a2) / 3 in float, in worker order. */
        float want = (a0[u] + a1[u] + a2[u]) / 3.0f;
        cr_expect_eq(r->agg_value[i], want, "U[%zu] = %u: %g, want %g", i, u, r->agg_value[i], want);
    }
    /* Residuals: every worker's accumulator zeroed on all of U, untouched elsewhere. */
    const float *orig[3] = {a0, a1, a2};
    for (uint32_t w = 0; w < 3; w++)
        for (uint32_t i = 0; i < 10; i++) {
            int inU = i == 1 || i == 2 || i == 4 || i == 7 || i == 9;
            cr_expect_eq(a->acc[w][i], inU ? 0.0f : orig[w][i], "worker %u element %u", w, i);
        }
    /* Wire: counts 4 B, indices padded to m = 2, values at K = 5. */
    expect_bytes(r, 4, 2, 5, 4, 4);

    /* t = 1: K / k = 5 / 4 > 1.1, so thr = 0.25 * 1.005. Worker w selects in partition
     * (1 + w) mod 3: worker 0 in [4, 7), worker 1 in [7, 10), worker 2 in [0, 4). */
    for (uint32_t w = 0; w < 3; w++) memset(a->acc[w], 0, 10 * sizeof(float));
    a->acc[0][5] = 0.25f;  /* below 0.25125 */
    a->acc[0][6] = 0.5f;
    a->acc[1][8] = -1;
    a->acc[2][0] = 0.25f;  /* nothing >= thr: fallback 0 + (1 mod 4) = 1 */
    r = step_ok(s, 1, &a->prov);
    cr_expect_eq(r->threshold, 0.25 * 1.005);
    expect_sel(s, 0, (const uint32_t[]){6}, 1);
    expect_sel(s, 1, (const uint32_t[]){8}, 1);
    expect_sel(s, 2, (const uint32_t[]){1}, 1);
    cr_assert_eq(r->nnz, 3);
    expect_bytes(r, 4, 1, 3, 4, 4);
    cr_expect_eq(a->acc[0][5], 0.25f, "not in U: kept");
    cr_expect_eq(a->acc[2][0], 0.25f, "not in U: kept");
    cr_expect_eq(a->acc[0][6], 0.0f);

    /* t = 2: K / k = 3 / 4 <= 0.909: down by 0.5 %. */
    r = step_ok(s, 2, &a->prov);
    cr_expect_eq(r->threshold, 0.25 * 1.005 * 0.995);
    /* The two 0.25s left in the residuals lie in partitions their workers do not own now:
     * every worker falls back to lo + (2 mod len). Worker 0: partition 2 = [7, 10) -> 9;
     * worker 1: partition 0 -> 2; worker 2: partition 1 = [4, 7) -> 6. */
    expect_sel(s, 0, (const uint32_t[]){9}, 1);
    expect_sel(s, 1, (const uint32_t[]){2}, 1);
    expect_sel(s, 2, (const uint32_t[]){6}, 1);
    /* The reference wire: 8-byte counts and indices. */
    deftsim_sparsifier_free(s);
    p.wire = DEFTSIM_WIRE_REFERENCE;
    s = sp_new(&p);
    memcpy(a->acc[0], a0, sizeof a0);
    memcpy(a->acc[1], a1, sizeof a1);
    memcpy(a->acc[2], a2, sizeof a2);
    r = step_ok(s, 0, &a->prov);
    expect_bytes(r, 8, 2, 5, 8, 4);
    sp_accs_free(a);
    deftsim_sparsifier_free(s);
    deftsim_model_free(m);
}

Test(sp_micro, micro_empty_partitions_and_p1)
{
    /* n = 2 < P = 3: partition 2 is empty; its worker picks nothing (no fallback). */
    static const char *const shapes[] = {"2"};
    deftsim_model *m = sp_model(shapes, 1);
    deftsim_sparsifier_params p = sp_params(DEFTSIM_METHOD_MICRO, 0.5, 3, m);
    deftsim_sparsifier *s = sp_new(&p);
    sp_accs *a = sp_accs_new(3, 2);
    for (uint32_t w = 0; w < 3; w++) a->acc[w][0] = a->acc[w][1] = 1;
    deftsim_step_result *r = step_ok(s, 0, &a->prov);
    cr_expect_eq(r->local_count[0], 1);
    cr_expect_eq(r->local_count[1], 1);
    cr_expect_eq(r->local_count[2], 0);
    cr_expect_eq(r->nnz, 2);
    r = step_ok(s, 1, &a->prov); /* worker 1 now owns the empty partition */
    cr_expect_eq(r->local_count[1], 0);
    cr_expect_eq(r->local_count[2], 1);
    deftsim_sparsifier_free(s);
    sp_accs_free(a);

    /* P = 1: one partition, no collectives; the controller reads this worker's own count. */
    p = sp_params(DEFTSIM_METHOD_MICRO, 0.5, 1, m);
    s = sp_new(&p);
    a = sp_accs_new(1, 2);
    a->acc[0][0] = a->acc[0][1] = 1;
    r = step_ok(s, 0, &a->prov);
    cr_expect_eq(r->threshold, 0.5);
    cr_expect_eq(sp_count_collectives(r), 0);
    cr_expect_eq(r->nnz, 2);
    a->acc[0][0] = a->acc[0][1] = 1;
    r = step_ok(s, 1, &a->prov); /* K / k = 2 > 1.1 */
    cr_expect_eq(r->threshold, 0.5 * 1.005);
    deftsim_sparsifier_free(s);
    sp_accs_free(a);
    deftsim_model_free(m);
}

/* ---- ExDyna's blocks ---------------------------------------------------------------------- */

Test(sp_micro, exdyna_initial_geometry)
{
    deftsim_exdyna_geometry g;
    int64_t part[5], pos[5];
    /* n = 1024 * 70 + 5: floor(n / 1024) = 70 -> 64 (a multiple of 32); rem = n - 65536. */
    deftsim_exdyna_initial(1024 * 70 + 5, 3, &g, part, pos);
    cr_expect_eq(g.blk_size, 64);
    cr_expect_eq(g.rem, 1024 * 70 + 5 - 65536);
    cr_expect_eq(g.min_blk, 1024.0 / 12.0);
    cr_expect(part[0] == 342 && part[1] == 341 && part[2] == 341);
    cr_expect(pos[0] == 0 && pos[1] == 342 && pos[2] == 683);
    deftsim_exdyna_initial(1024 * 96, 5, &g, part, pos);
    cr_expect_eq(g.blk_size, 96);
    cr_expect_eq(g.rem, 0);
    cr_expect(part[0] == 205 && part[3] == 205 && part[4] == 204);
    cr_expect_eq(pos[4], 820);
    cr_expect_eq(g.min_blk, 1024.0 / 20.0);
    /* Below 32768 elements the blocks are empty and the last partition holds everything. */
    deftsim_exdyna_initial(1000, 2, &g, part, pos);
    cr_expect_eq(g.blk_size, 0);
    cr_expect_eq(g.rem, 1000);
    deftsim_exdyna_initial(1000, 1, &g, part, pos);
    cr_expect(part[0] == 1024 && pos[0] == 0);
    cr_expect_eq(g.min_blk, 256.0);
}

static void expect_plan(const int64_t *part, const int64_t *pos, const int64_t *wpart,
                        const int64_t *wpos, uint32_t P)
{
    for (uint32_t j = 0; j < P; j++) {
        cr_expect_eq(part[j], wpart[j], "blk_part[%u] = %lld, want %lld", j, (long long)part[j],
                     (long long)wpart[j]);
        cr_expect_eq(pos[j], wpos[j], "blk_pos[%u] = %lld, want %lld", j, (long long)pos[j],
                     (long long)wpos[j]);
    }
}

Test(sp_micro, exdyna_repartition_sweep)
{
    /* n = 65536, P = 4: 64-element blocks, 256 per partition, floor 64 blocks. */
    const uint64_t n = 65536;
    deftsim_exdyna_geometry g;
    int64_t part[4], pos[4], temp[4];

    /* Left heavy, right light: one block leaves partition 0. mv = int(64 * 20000 / 65536) =
     * 19 moves into the estimate, so 1 and 2 stay. */
    deftsim_exdyna_initial(n, 4, &g, part, pos);
    uint32_t moved = deftsim_exdyna_repartition(n, 4, &g, 0, (const uint64_t[]){8000, 4000, 4000, 4000},
                                                20000, temp, part, pos);
    cr_expect_eq(moved, 1);
    expect_plan(part, pos, (const int64_t[]){255, 257, 256, 256}, (const int64_t[]){0, 255, 512, 768}, 4);
    cr_expect(temp[0] == 7981 && temp[1] == 4019);

    /* Left light, right heavy, then the moved estimate makes partition 1 heavy against 2. */
    deftsim_exdyna_initial(n, 4, &g, part, pos);
    moved = deftsim_exdyna_repartition(n, 4, &g, 0, (const uint64_t[]){4000, 8000, 4000, 4000},
                                       20000, temp, part, pos);
    cr_expect_eq(moved, 2);
    expect_plan(part, pos, (const int64_t[]){257, 254, 257, 256}, (const int64_t[]){0, 257, 511, 768}, 4);

    /* The cascade: partition 2's ratio 1.052 would move a block, but the estimate it received
     * from boundary 1 (-19) brings it to 1.0482 and it stays. */
    deftsim_exdyna_initial(n, 4, &g, part, pos);
    moved = deftsim_exdyna_repartition(n, 4, &g, 0, (const uint64_t[]){5500, 4700, 5260, 4540},
                                       20000, temp, part, pos);
    cr_expect_eq(moved, 2);
    expect_plan(part, pos, (const int64_t[]){255, 258, 255, 256}, (const int64_t[]){0, 255, 513, 768}, 4);

    /* Counts arrive by rank: at t_prev = 1 rank i selected in partition (1 + i) mod 4. */
    deftsim_exdyna_initial(n, 4, &g, part, pos);
    moved = deftsim_exdyna_repartition(n, 4, &g, 1, (const uint64_t[]){4700, 5260, 4540, 5500},
                                       20000, temp, part, pos);
    cr_expect_eq(moved, 2);
    expect_plan(part, pos, (const int64_t[]){255, 258, 255, 256}, (const int64_t[]){0, 255, 513, 768}, 4);

    /* The floor: a partition of 64 blocks (1024 / 16) gives none, in either direction. */
    int64_t fpart[4] = {64, 448, 256, 256}, fpos[4] = {0, 64, 512, 768};
    moved = deftsim_exdyna_repartition(n, 4, &g, 0, (const uint64_t[]){8000, 4000, 4000, 4000},
                                       20000, temp, fpart, fpos);
    cr_expect_eq(moved, 0);
    expect_plan(fpart, fpos, (const int64_t[]){64, 448, 256, 256}, (const int64_t[]){0, 64, 512, 768}, 4);
    int64_t gpart[4] = {448, 64, 256, 256}, gpos[4] = {0, 448, 512, 768};
    moved = deftsim_exdyna_repartition(n, 4, &g, 0, (const uint64_t[]){4000, 8000, 4000, 4000},
                                       20000, temp, gpart, gpos);
    cr_expect_eq(moved, 0, "right at the floor, then left at the floor");
    /* One above the floor: it may reach it. */
    int64_t hpart[4] = {65, 447, 256, 256}, hpos[4] = {0, 65, 512, 768};
    moved = deftsim_exdyna_repartition(n, 4, &g, 0, (const uint64_t[]){8000, 4000, 4000, 4000},
                                       20000, temp, hpart, hpos);
    cr_expect_eq(moved, 1);
    expect_plan(hpart, hpos, (const int64_t[]){64, 448, 256, 256}, (const int64_t[]){0, 64, 512, 768}, 4);

    /* All counts zero, or fewer than P in all: the mean is 0 and nothing moves. */
    deftsim_exdyna_initial(n, 4, &g, part, pos);
    moved = deftsim_exdyna_repartition(n, 4, &g, 3, (const uint64_t[]){0, 0, 0, 0}, 0, temp, part, pos);
    cr_expect_eq(moved, 0);
    moved = deftsim_exdyna_repartition(n, 4, &g, 3, (const uint64_t[]){3, 0, 0, 0}, 3, temp, part, pos);
    cr_expect_eq(moved, 0);
    expect_plan(part, pos, (const int64_t[]){256, 256, 256, 256}, (const int64_t[]){0, 256, 512, 768}, 4);

    /* Balanced within the bounds (1.05 and 0.95238 are strict): nothing moves. */
    moved = deftsim_exdyna_repartition(n, 4, &g, 0, (const uint64_t[]){5250, 4750, 5000, 5000},
                                       20000, temp, part, pos);
    cr_expect_eq(moved, 0);

    /* P = 1: no boundary. */
    int64_t p1[1], q1[1], t1[1];
    deftsim_exdyna_initial(n, 1, &g, p1, q1);
    cr_expect_eq(deftsim_exdyna_repartition(n, 1, &g, 0, (const uint64_t[]){7}, 7, t1, p1, q1), 0);
    cr_expect_eq(p1[0], 1024);
}

/* ---- every step against a brute-force model ------------------------------------------- */

/* The partitions the definition gives at step t (ExDyna: the plan carried in part/pos). */
typedef struct {
    int exdyna;
    uint32_t P;
    uint64_t n;
    deftsim_exdyna_geometry g;
    int64_t part[8], pos[8], temp[8];
    uint64_t counts[8], K, t_prev;
    double thr;
    int started;
} model_state;

static void part_range(const model_state *ms, uint32_t c, uint64_t *lo, uint64_t *len)
{
    if (!ms->exdyna) {
        uint64_t q = ms->n / ms->P, rem = ms->n % ms->P;
        *lo = c * q + (c < rem ? c : rem);
        *len = q + (c < rem ? 1 : 0);
    } else {
        *lo = (uint64_t)ms->pos[c] * ms->g.blk_size;
        *len = (uint64_t)ms->part[c] * ms->g.blk_size + (c == ms->P - 1 ? ms->g.rem : 0);
    }
}

static int u32cmp(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* One step of the definition on `before`, checked against the sparsifier's result and the
 * accumulators it left (`after`). */
static void check_step(deftsim_sparsifier *s, const deftsim_step_result *r, model_state *ms,
                       float *const *before, float *const *after, uint64_t t, uint64_t k)
{
    const uint32_t P = ms->P;
    const size_t n = (size_t)ms->n;
    if (ms->started && ms->exdyna)
        deftsim_exdyna_repartition(ms->n, P, &ms->g, ms->t_prev, ms->counts, ms->K, ms->temp,
                                   ms->part, ms->pos);
    ms->thr = ms->started ? deftsim_micro_threshold_next(ms->thr, ms->K, k)
                          : 1.0 / (2.0 * sqrt((double)k));
    cr_assert_eq(r->threshold, ms->thr, "t=%llu: threshold", (unsigned long long)t);
    const float thr = (float)ms->thr;
    uint32_t *all = malloc(n * sizeof *all);
    cr_assert(all);
    uint64_t K = 0, m = 0;
    for (uint32_t w = 0; w < P; w++) {
        uint32_t c = (uint32_t)((t % P + w) % P);
        uint64_t lo, len;
        part_range(ms, c, &lo, &len);
        uint64_t cnt = 0;
        for (uint64_t i = lo; i < lo + len; i++)
            if (fabsf(before[w][i]) >= thr) all[K + cnt++] = (uint32_t)i;
        if (cnt == 0 && len) all[K + cnt++] = (uint32_t)(lo + t % len);
        const deftsim_kidx *idx;
        uint64_t got;
        cr_assert_eq(deftsim_sparsifier_selection(s, w, &idx, &got), DEFTSIM_OK);
        cr_assert_eq(got, cnt, "t=%llu worker %u: %llu picks, want %llu", (unsigned long long)t, w,
                     (unsigned long long)got, (unsigned long long)cnt);
        for (uint64_t i = 0; i < cnt; i++) cr_assert_eq(idx[i], all[K + i]);
        ms->counts[w] = cnt;
        K += cnt;
        if (cnt > m) m = cnt;
    }
    qsort(all, (size_t)K, sizeof *all, u32cmp);
    cr_assert_eq(r->nnz, K);
    cr_assert_eq(r->count_total, K);
    cr_assert_eq(r->count_max, m);
    for (uint64_t i = 0; i < K; i++) {
        uint32_t u = all[i];
        cr_assert_eq(r->agg_index[i], u);
        float v = before[0][u];
        for (uint32_t w = 1; w < P; w++) v += before[w][u];
        v = (P & (P - 1)) == 0 ? v * (1.0f / (float)P) : v / (float)P;
        cr_assert_eq(r->agg_value[i], v, "t=%llu U[%llu]", (unsigned long long)t,
                     (unsigned long long)i);
    }
    /* Residuals: zero on U, the accumulator elsewhere. */
    unsigned char *inU = calloc(n, 1);
    cr_assert(inU);
    for (uint64_t i = 0; i < K; i++) inU[all[i]] = 1;
    for (uint32_t w = 0; w < P; w++)
        for (size_t i = 0; i < n; i++)
            cr_assert_eq(after[w][i], inU[i] ? 0.0f : before[w][i], "t=%llu worker %u element %zu",
                         (unsigned long long)t, w, i);
    free(inU);
    free(all);
    if (P > 1)
        expect_bytes(r, 4, m, K, 4, 4);
    else
        cr_assert_eq(sp_count_collectives(r), 0);
    ms->K = K;
    ms->t_prev = t;
    ms->started = 1;
}

/* Accumulators in multiples of 2^-10 (float sums stay exact), larger in the first third so
 * that ExDyna's partitions have something to balance. */
static void add_grad(sp_accs *a, uint64_t seed, uint64_t t)
{
    for (uint32_t w = 0; w < a->P; w++) {
        sp_fill_int(a->grad[w], a->n, 24, seed, t * 1000 + w);
        for (size_t i = 0; i < a->n; i++)
            a->acc[w][i] += a->grad[w][i] * (i < a->n / 3 ? 0x1p-6f : 0x1p-10f);
    }
}

static void run_model(deftsim_method method, uint32_t P, const char *shape, double d,
                      unsigned iters)
{
    const char *shapes[] = {shape};
    deftsim_model *m = sp_model(shapes, 1);
    deftsim_sparsifier_params p = sp_params(method, d, P, m);
    deftsim_sparsifier *s = sp_new(&p);
    sp_accs *a = sp_accs_new(P, m->numel);
    model_state ms = {.exdyna = method == DEFTSIM_METHOD_EXDYNA, .P = P, .n = m->numel};
    if (ms.exdyna) deftsim_exdyna_initial(ms.n, P, &ms.g, ms.part, ms.pos);
    uint64_t seed = sp_seed();
    for (unsigned t = 0; t < iters; t++) {
        add_grad(a, seed, t);
        float **before = sp_accs_copy(a);
        deftsim_step_result *r = step_ok(s, t, &a->prov);
        check_step(s, r, &ms, before, a->acc, t, r->k);
        double tol;
        double diff = sp_check_conservation(r, before, a->acc, P, a->n, 1, &tol);
        cr_assert_leq(fabs(diff), tol, "t=%u: mass not conserved (%g)", t, diff);
        sp_copies_free(before, P);
    }
    sp_accs_free(a);
    deftsim_sparsifier_free(s);
    deftsim_model_free(m);
}

Test(sp_micro, micro_matches_definition)
{
    run_model(DEFTSIM_METHOD_MICRO, 1, "3000", 0.01, 4);
    run_model(DEFTSIM_METHOD_MICRO, 3, "3001", 0.01, 7);
    run_model(DEFTSIM_METHOD_MICRO, 4, "40x100", 0.02, 6);
    run_model(DEFTSIM_METHOD_MICRO, 5, "2999", 0.005, 7);
}

Test(sp_micro, exdyna_matches_definition)
{
    /* 71680 elements: 64-element blocks and a remainder of 6144 in the last partition. */
    run_model(DEFTSIM_METHOD_EXDYNA, 1, "70x1024", 0.01, 3);
    run_model(DEFTSIM_METHOD_EXDYNA, 3, "70x1024", 0.01, 8);
    run_model(DEFTSIM_METHOD_EXDYNA, 5, "70x1024", 0.005, 8);
    /* Below 32768 elements: empty blocks, everything in the last partition. */
    run_model(DEFTSIM_METHOD_EXDYNA, 3, "1000", 0.05, 4);
}

Test(sp_micro, exdyna_moves_blocks_toward_balance)
{
    /* The first third is 16 times larger: the partition holding it picks more, and the plan
     * must have moved blocks after a few steps; every partition stays at or above the floor. */
    static const char *const shapes[] = {"70x1024"};
    deftsim_model *m = sp_model(shapes, 1);
    const uint32_t P = 3;
    deftsim_sparsifier_params p = sp_params(DEFTSIM_METHOD_EXDYNA, 0.01, P, m);
    deftsim_sparsifier *s = sp_new(&p);
    sp_accs *a = sp_accs_new(P, m->numel);
    model_state ms = {.exdyna = 1, .P = P, .n = m->numel};
    deftsim_exdyna_initial(ms.n, P, &ms.g, ms.part, ms.pos);
    double pad0 = 0, pad = 0;
    for (unsigned t = 0; t < 12; t++) {
        add_grad(a, 11, t);
        float **before = sp_accs_copy(a);
        deftsim_step_result *r = step_ok(s, t, &a->prov);
        check_step(s, r, &ms, before, a->acc, t, r->k);
        sp_copies_free(before, P);
        pad = (double)r->count_max * P / (double)r->count_total - 1;
        if (t == 0) pad0 = pad;
    }
    cr_expect_neq(ms.part[0], 342, "partition 0 never changed");
    for (uint32_t j = 0; j < P; j++) cr_expect_geq((double)ms.part[j], ms.g.min_blk);
    cr_expect_lt(pad, pad0, "the padding overhead did not fall (%g -> %g)", pad0, pad);
    sp_accs_free(a);
    deftsim_sparsifier_free(s);
    deftsim_model_free(m);
}

Test(sp_micro, fresh_runs_are_identical)
{
    static const char *const shapes[] = {"70x1024"};
    deftsim_model *m = sp_model(shapes, 1);
    const deftsim_method ms[2] = {DEFTSIM_METHOD_MICRO, DEFTSIM_METHOD_EXDYNA};
    for (int mi = 0; mi < 2; mi++) {
        deftsim_sparsifier_params p = sp_params(ms[mi], 0.01, 3, m);
        deftsim_sparsifier *s[2] = {sp_new(&p), sp_new(&p)};
        sp_accs *a[2] = {sp_accs_new(3, m->numel), sp_accs_new(3, m->numel)};
        for (unsigned t = 0; t < 5; t++) {
            deftsim_step_result *r[2];
            for (int k = 0; k < 2; k++) {
                add_grad(a[k], 5, t);
                r[k] = step_ok(s[k], t, &a[k]->prov);
            }
            cr_assert_eq(r[0]->threshold, r[1]->threshold);
            cr_assert_eq(r[0]->nnz, r[1]->nnz);
            cr_assert_eq(memcmp(r[0]->agg_index, r[1]->agg_index, r[0]->nnz * sizeof(deftsim_kidx)), 0);
            cr_assert_eq(memcmp(r[0]->agg_value, r[1]->agg_value, r[0]->nnz * sizeof(float)), 0);
            for (uint32_t w = 0; w < 3; w++) {
                cr_assert_eq(r[0]->local_count[w], r[1]->local_count[w]);
                cr_assert_eq(r[0]->bytes_sent[w], r[1]->bytes_sent[w]);
                cr_assert_eq(r[0]->bytes_recv[w], r[1]->bytes_recv[w]);
            }
        }
        for (int k = 0; k < 2; k++) {
            sp_accs_free(a[k]);
            deftsim_sparsifier_free(s[k]);
        }
    }
    deftsim_model_free(m);
}
