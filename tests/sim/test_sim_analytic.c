/* test_sim_analytic.c - analytic mode against the full simulation (suite fast): the same
 * schedules under mode = exact and mode = analytic, on the flat cluster with LV08 and CM02,
 * every MPI algorithm, P powers of two and not, eager and rendezvous sizes, equal and uneven
 * blocks, measured compute of seeded per-worker durations between the collectives,
 * asynchronous collectives, exchanges of pairs and rounds. Where analytic mode ran, every
 * worker's start and end of every step agree with the full simulation to SimGrid's clock
 * resolution, and the bytes and message counts are equal; where two transfers meet on a link
 * (Ok-Topk's rounds of four peers) or the platform is not one the closed form covers, the
 * full simulation runs and the result says why. */
#include <criterion/criterion.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deftsim_schedule.h"
#include "deftsim_sim.h"
#include "simtest.h"

static int close_to(double got, double want) { return fabs(got - want) <= 1e-9 * fabs(want) + 4e-9; }

/* A fixed generator: every duration of the test comes from its seed. */
static uint64_t rng = 0x9e3779b97f4a7c15ull;
static double uniform(void)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rng >> 11) / 9007199254740992.0;
}

/* A schedule with a compute step of per-worker durations (up to `spread` seconds) before
 * each of a few collectives of kind k, blocks of `size` bytes (uneven: size + 97 r), the
 * second collective asynchronous when async is set. */
static void mixed_schedule(deftsim_schedule *s, uint32_t P, deftsim_step_kind k, uint64_t size,
                           int uneven, double spread, int async)
{
    deftsim_schedule_init(s, P);
    for (int i = 0; i < 3; i++) {
        deftsim_step *c = deftsim_schedule_add(s, DEFTSIM_STEP_COMPUTE, "select");
        cr_assert(c);
        for (uint32_t w = 0; w < P; w++) c->seconds[w] = spread * uniform();
        deftsim_step *st = deftsim_schedule_add(s, k, "values");
        cr_assert(st);
        st->root = (uint32_t)i % P;
        for (uint32_t w = 0; w < P; w++) st->bytes[w] = size + (uneven ? 97u * w : 0);
        if (async && i == 1) st->flags = DEFTSIM_STEP_ASYNC;
    }
}

/* A SENDRECV step: rank r sends to (r + shift) mod P. */
static void shift_schedule(deftsim_schedule *s, uint32_t P, uint32_t shift, uint64_t size)
{
    deftsim_schedule_init(s, P);
    deftsim_step *st = deftsim_schedule_add(s, DEFTSIM_STEP_SENDRECV, "pairs");
    cr_assert(st);
    for (uint32_t w = 0; w < P; w++) {
        st->peer[w] = (w + shift) % P;
        st->bytes[w] = size + 13u * w;
    }
}

/* Runs s under both modes; checks them against each other where analytic mode ran. Returns
 * whether it did. */
static int compare(const deftsim_sim_params *base, deftsim_schedule *s, size_t n, const char *what)
{
    deftsim_sim_params p = *base;
    deftsim_sim_result re, ra;
    p.mode = DEFTSIM_SIM_EXACT;
    double *te = simtest_run(&p, s, n, &re);
    p.mode = DEFTSIM_SIM_ANALYTIC;
    double *ta = simtest_run(&p, s, n, &ra);
    int analytic = ra.mode == DEFTSIM_SIM_ANALYTIC;
    cr_expect(analytic || ra.mode == DEFTSIM_SIM_EXACT);
    if (!analytic) cr_expect(ra.mode_note[0], "%s: a fallback says why", what);
    size_t cells = re.step_offset[re.nsched] * re.P;
    double worst = 0;
    for (size_t i = 0; i < cells; i++) {
        cr_expect(close_to(ra.start[i], re.start[i]), "%s cell %zu: start %.12e vs %.12e", what, i,
                  ra.start[i], re.start[i]);
        cr_expect(close_to(ra.end[i], re.end[i]), "%s cell %zu: end %.12e vs %.12e", what, i,
                  ra.end[i], re.end[i]);
        cr_expect_eq(ra.sent[i], re.sent[i], "%s cell %zu: sent", what, i);
        cr_expect_eq(ra.recv[i], re.recv[i], "%s cell %zu: recv", what, i);
        if (re.end[i] > 0) worst = fmax(worst, fabs(ra.end[i] - re.end[i]) / re.end[i]);
    }
    cr_expect_eq(ra.messages, re.messages, "%s: messages", what);
    for (size_t i = 0; i < n; i++) cr_expect(close_to(ta[i], te[i]), "%s: iteration %zu", what, i);
    printf("%-44s %s: iteration %.9e s (exact %.9e), largest relative difference %.1e%s%s\n", what,
           analytic ? "analytic" : "exact   ", ta[0], te[0], worst, analytic ? "" : "; ",
           analytic ? "" : ra.mode_note);
    free(te);
    free(ta);
    deftsim_sim_result_free(&re);
    deftsim_sim_result_free(&ra);
    return analytic;
}

Test(sim_analytic, agrees_with_the_full_simulation)
{
    const uint32_t Ps[] = {2, 3, 5, 8, 13, 32};
    const deftsim_net_model models[] = {DEFTSIM_NET_CM02, DEFTSIM_NET_LV08};
    const deftsim_step_kind kinds[] = {DEFTSIM_STEP_ALLGATHER, DEFTSIM_STEP_ALLREDUCE,
                                       DEFTSIM_STEP_BCAST, DEFTSIM_STEP_ALLTOALL};
    const uint64_t sizes[] = {1000, 300000}; /* eager, rendezvous */
    int ran = 0, runs = 0;
    for (size_t mi = 0; mi < 2; mi++)
        for (size_t pi = 0; pi < sizeof Ps / sizeof Ps[0]; pi++)
            for (int algo = 0; algo < 3; algo++) {
                uint32_t P = Ps[pi];
                deftsim_sim_params p;
                simtest_params(&p, P);
                p.model = models[mi];
                /* recursive doubling's allgather and the scatter broadcasts are never
                 * analytic (they read what they receive): the full simulation runs them,
                 * which compare() checks too */
                p.allgather = (deftsim_allgather_algo)algo;
                p.allreduce = (deftsim_allreduce_algo)algo;
                p.bcast = (deftsim_bcast_algo)algo;
                for (size_t ki = 0; ki < sizeof kinds / sizeof kinds[0]; ki++)
                    for (size_t si = 0; si < 2; si++)
                        for (int uneven = 0; uneven < 2; uneven++) {
                            if (uneven && kinds[ki] != DEFTSIM_STEP_ALLGATHER) continue;
                            deftsim_schedule s[2];
                            simtest_one_step(&s[0], P, kinds[ki], sizes[si], uneven, P - 1);
                            mixed_schedule(&s[1], P, kinds[ki], sizes[si], uneven, 2e-4, 1);
                            char what[128];
                            snprintf(what, sizeof what, "%s P=%u %s/%s/%s %s %llu%s",
                                     deftsim_net_model_name(p.model), P,
                                     deftsim_allgather_name(p.allgather),
                                     deftsim_allreduce_name(p.allreduce),
                                     deftsim_bcast_name(p.bcast), deftsim_step_kind_name(kinds[ki]),
                                     (unsigned long long)sizes[si], uneven ? " uneven" : "");
                            ran += compare(&p, s, 2, what);
                            runs++;
                            deftsim_schedule_free(&s[0]);
                            deftsim_schedule_free(&s[1]);
                        }
            }
    printf("analytic mode held in %d of %d cases\n", ran, runs);
    /* The premise holds in most cases (measured: see the printed lines); a test that never
     * exercised the closed form would prove nothing. */
    cr_expect_gt(ran, runs / 2, "analytic in %d of %d cases", ran, runs);
}

Test(sim_analytic, pairs_trees_and_rounds)
{
    const uint32_t Ps[] = {4, 7, 16};
    for (size_t pi = 0; pi < 3; pi++) {
        uint32_t P = Ps[pi];
        deftsim_sim_params p;
        simtest_params(&p, P);
        p.model = DEFTSIM_NET_LV08;
        deftsim_schedule s;
        char what[96];
        shift_schedule(&s, P, 1, 200000);
        snprintf(what, sizeof what, "LV08 P=%u sendrecv shift 1", P);
        cr_expect(compare(&p, &s, 1, what), "a permutation of rendezvous messages is analytic");
        deftsim_schedule_free(&s);
        simtest_gtopk(&s, P, 200000);
        snprintf(what, sizeof what, "LV08 P=%u gTop-k tree, rendezvous", P);
        cr_expect(compare(&p, &s, 1, what), "gTop-k's pairwise rounds are analytic");
        deftsim_schedule_free(&s);
        /* eager: the root's broadcast posts its sends to its children at once */
        simtest_gtopk(&s, P, 40000);
        snprintf(what, sizeof what, "LV08 P=%u gTop-k tree, eager", P);
        cr_expect(!compare(&p, &s, 1, what), "eager sends from one rank share its link");
        deftsim_schedule_free(&s);
        simtest_oktopk_rounds(&s, P, 100000, 1);
        snprintf(what, sizeof what, "LV08 P=%u Ok-Topk rounds of 4 peers", P);
        int a = compare(&p, &s, 1, what);
        /* a rank sends to up to four peers at once: they share its up link */
        cr_expect(!a, "four messages from one rank at once share its link");
        deftsim_schedule_free(&s);
    }
}

Test(sim_analytic, platforms_it_does_not_cover_run_in_full)
{
    const uint32_t P = 8;
    struct {
        const char *what, *note;
    } cases[] = {{"fat tree", "not flat"},        {"backbone", "backbone"},
                 {"crosstraffic", "crosstraffic"}, {"SMPI model", "size"},
                 {"rdb allgather", "reads what it receives"}, {"multi-GPU", "GPUs"}};
    for (int c = 0; c < 6; c++) {
        deftsim_sim_params p;
        simtest_params(&p, P);
        p.mode = DEFTSIM_SIM_ANALYTIC;
        switch (c) {
        case 0: p.topology = DEFTSIM_TOPO_FATTREE; break;
        case 1: p.backbone_bandwidth = 1e9; break;
        case 2: p.crosstraffic = 1; break;
        case 3: p.model = DEFTSIM_NET_SMPI; break;
        case 4: p.allgather = DEFTSIM_AG_RECURSIVE_DOUBLING; break;
        default: p.gpus_per_node = 4; break;
        }
        deftsim_schedule s;
        simtest_one_step(&s, P, DEFTSIM_STEP_ALLGATHER, 5000, 0, 0);
        deftsim_sim_result r;
        double *t = simtest_run(&p, &s, 1, &r);
        cr_expect_eq(r.mode, DEFTSIM_SIM_EXACT, "%s: the full simulation", cases[c].what);
        cr_expect(strstr(r.mode_note, cases[c].note), "%s: note '%s'", cases[c].what, r.mode_note);
        printf("%s: exact (%s), %.9e s\n", cases[c].what, r.mode_note, t[0]);
        free(t);
        deftsim_sim_result_free(&r);
        deftsim_schedule_free(&s);
    }
}
