/* simtest.c - helpers of the tests of sim/ (simtest.h). */
#include "simtest.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

#include "vsize.h"

void simtest_params(deftsim_sim_params *p, uint32_t P)
{
    deftsim_sim_params_default(p);
    p->P = P;
    p->model = DEFTSIM_NET_CM02;
    p->crosstraffic = 0;
}

void simtest_one_step(deftsim_schedule *s, uint32_t P, deftsim_step_kind k, uint64_t size,
                      int uneven, uint32_t root)
{
    deftsim_schedule_init(s, P);
    deftsim_step *st = deftsim_schedule_add(s, k, "x");
    cr_assert(st);
    st->root = root;
    for (uint32_t r = 0; r < P; r++) st->bytes[r] = uneven ? deftsim_test_vsize(size, r) : size;
}

void simtest_gtopk(deftsim_schedule *s, uint32_t P, uint64_t size)
{
    deftsim_schedule_init(s, P);
    uint32_t P2 = 1;
    while (P2 <= P / 2) P2 <<= 1;
    if (P2 < P) {
        deftsim_step *st = deftsim_schedule_add(s, DEFTSIM_STEP_SENDRECV, "fold");
        cr_assert(st);
        for (uint32_t q = P2; q < P; q++) {
            st->peer[q] = q - P2;
            st->bytes[q] = size;
        }
    }
    for (uint32_t step = 1; step < P2; step <<= 1) {
        deftsim_step *st = deftsim_schedule_add(s, DEFTSIM_STEP_SENDRECV, "tree");
        cr_assert(st);
        for (uint32_t q = 0; q + step < P2; q += 2 * step) {
            st->peer[q + step] = q;
            st->bytes[q + step] = size;
        }
    }
    if (P > 1) {
        deftsim_step *st = deftsim_schedule_add(s, DEFTSIM_STEP_BCAST, "final");
        cr_assert(st);
        st->root = 0;
        st->bytes[0] = size;
    }
}

void simtest_oktopk_rounds(deftsim_schedule *s, uint32_t P, uint64_t size, int uneven)
{
    deftsim_schedule_init(s, P);
    const uint32_t th = DEFTSIM_TEST_OKTOPK_THROTTLE;
    for (uint32_t first = 0; first < P; first += th) {
        deftsim_step *st = deftsim_schedule_add_p2p(s, "reduce", 2 * th);
        cr_assert(st);
        for (uint32_t r = 0; r < P; r++)
            for (uint32_t i = first; i < first + th && i < P; i++) {
                if (i == 0) continue;
                uint32_t d = (r + i) % P;
                size_t at = (size_t)r * 2 * th + 2 * (i - first);
                st->peer[at] = st->peer[at + 1] = d;
                st->bytes[at] = st->bytes[at + 1] = deftsim_test_pair_size(size, r, d, uneven);
            }
    }
}

double *simtest_run(const deftsim_sim_params *p, deftsim_schedule *s, size_t n,
                    deftsim_sim_result *keep)
{
    const deftsim_schedule **ss = malloc(n * sizeof *ss);
    cr_assert(ss);
    for (size_t i = 0; i < n; i++) ss[i] = &s[i];
    deftsim_sim_result r;
    deftsim_status st = deftsim_sim_run(p, ss, n, &r);
    free(ss);
    cr_assert_eq(st, DEFTSIM_OK, "%s", deftsim_error_message());
    double *t = malloc(n * sizeof *t);
    cr_assert(t);
    for (size_t i = 0; i < n; i++) t[i] = r.iteration_seconds[i];
    if (keep)
        *keep = r;
    else
        deftsim_sim_result_free(&r);
    return t;
}

double simtest_msg(const deftsim_sim_params *p, uint64_t b)
{
    return 2 * p->latency + (double)(b + p->envelope_bytes) / p->bandwidth;
}

static int pow2(uint32_t P) { return P && !(P & (P - 1)); }

static uint32_t log2u(uint32_t P)
{
    uint32_t l = 0;
    while ((1u << (l + 1)) <= P) l++;
    return l;
}

/* A binomial broadcast of b bytes on P = 2^l ranks. Large messages: every sender waits for
 * each of its sends, so the root's l sends follow one another and every path takes l
 * messages. Eager ones: a sender's j sends leave together and share its link, finishing after
 * 2L + j b / B; the longest chain is the root's l, then l - 1, ... 1. */
static double bcast_binomial(const deftsim_sim_params *p, uint32_t P, uint64_t b)
{
    uint32_t l = log2u(P);
    if (b >= p->eager_threshold) return l * simtest_msg(p, b);
    double t = 0, s = (double)(b + p->envelope_bytes) / p->bandwidth;
    for (uint32_t j = 1; j <= l; j++) t += 2 * p->latency + j * s;
    return t;
}

double simtest_formula(const deftsim_sim_params *p, deftsim_step_kind k, uint64_t size)
{
    uint32_t P = p->P;
    if (P < 2) return 0;
    double t = 0;
    switch (k) {
    case DEFTSIM_STEP_ALLGATHER:
        switch (p->allgather) {
        case DEFTSIM_AG_RING: return (P - 1) * simtest_msg(p, size);
        case DEFTSIM_AG_RECURSIVE_DOUBLING:
            if (!pow2(P)) return NAN;
            for (uint32_t m = 1; m < P; m <<= 1) t += simtest_msg(p, m * size);
            return t;
        default:
            for (uint32_t d = 1; d < P; d <<= 1) t += simtest_msg(p, (d <= P / 2 ? d : P - d) * size);
            return t;
        }
    case DEFTSIM_STEP_ALLREDUCE: {
        uint64_t e = p->elem_bytes, count = size / e;
        uint32_t pof2 = 1u << log2u(P);
        switch (p->allreduce) {
        case DEFTSIM_AR_RING:
            if (count % P || count < P) return NAN;
            return 2.0 * (P - 1) * simtest_msg(p, size / P);
        case DEFTSIM_AR_RECURSIVE_DOUBLING:
            return (log2u(P) + (pof2 < P ? 2 : 0)) * simtest_msg(p, size);
        default:
            if (count % pof2 || count < pof2) return NAN;
            for (uint32_t m = 2; m <= pof2; m <<= 1) t += 2 * simtest_msg(p, size / m);
            return t + (pof2 < P ? 2 * simtest_msg(p, size) : 0);
        }
    }
    case DEFTSIM_STEP_BCAST:
        if (p->bcast != DEFTSIM_BC_BINOMIAL || !pow2(P)) return NAN;
        return bcast_binomial(p, P, size);
    default: return NAN;
    }
}

double simtest_formula_gtopk(const deftsim_sim_params *p, uint64_t size)
{
    if (!pow2(p->P)) return NAN;
    return log2u(p->P) * simtest_msg(p, size) + bcast_binomial(p, p->P, size);
}

double simtest_formula_alltoall(const deftsim_sim_params *p, uint64_t size)
{
    return p->P < 2 ? 0 : (p->P - 1) * simtest_msg(p, size);
}

double simtest_formula_oktopk(const deftsim_sim_params *p, uint64_t size)
{
    const uint32_t th = DEFTSIM_TEST_OKTOPK_THROTTLE;
    double t = 0;
    for (uint32_t first = 0; first < p->P; first += th) {
        uint32_t m = 0;
        for (uint32_t i = first; i < first + th && i < p->P; i++) m += i ? 2 : 0;
        if (m) t += 2 * p->latency + m * (double)(size + p->envelope_bytes) / p->bandwidth;
    }
    return t;
}
