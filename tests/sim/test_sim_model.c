/* test_sim_model.c - the network simulation against closed forms (suite fast): with SimGrid's
 * CM02 model on the flat cluster (no correction factors, no crosstraffic) every algorithm's
 * simulated time is its alpha-beta prediction, printed next to it; compute phases are injected
 * exactly; iterations are timed from a common start; the bytes each algorithm moves; LV08's
 * factors; approximate mode against the full simulation; platforms of every topology and a
 * user's file; the errors a caller sees. */
#include <criterion/criterion.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "deftsim_schedule.h"
#include "deftsim_sim.h"
#include "deftsim_util.h"
#include "simtest.h"
#include "vsize.h"

/* Relative agreement of a simulation with a formula: SimGrid's clock resolves 1 ns events
 * (surf/precision), so a few ns of absolute slack. */
static int close_to(double got, double want)
{
    return fabs(got - want) <= 1e-9 * want + 4e-9;
}

static const char *kind_name(deftsim_step_kind k) { return deftsim_step_kind_name(k); }

static const char *algo_name(const deftsim_sim_params *p, deftsim_step_kind k)
{
    switch (k) {
    case DEFTSIM_STEP_ALLGATHER: return deftsim_allgather_name(p->allgather);
    case DEFTSIM_STEP_ALLREDUCE: return deftsim_allreduce_name(p->allreduce);
    case DEFTSIM_STEP_BCAST: return deftsim_bcast_name(p->bcast);
    default: return "-";
    }
}

/* Every algorithm with a closed form, at P from 2 to 16 (powers of two and not), eager and
 * rendezvous sizes, against the formula. */
Test(sim_model, collectives_match_the_alpha_beta_formula)
{
    const uint32_t Ps[] = {2, 3, 4, 5, 6, 8, 12, 16};
    const uint64_t sizes[] = {1024, 65536, 1u << 20};
    const struct { deftsim_step_kind k; int algo; } cases[] = {
        {DEFTSIM_STEP_ALLGATHER, DEFTSIM_AG_RING},
        {DEFTSIM_STEP_ALLGATHER, DEFTSIM_AG_RECURSIVE_DOUBLING},
        {DEFTSIM_STEP_ALLGATHER, DEFTSIM_AG_BRUCK},
        {DEFTSIM_STEP_ALLREDUCE, DEFTSIM_AR_RING},
        {DEFTSIM_STEP_ALLREDUCE, DEFTSIM_AR_RECURSIVE_DOUBLING},
        {DEFTSIM_STEP_ALLREDUCE, DEFTSIM_AR_RABENSEIFNER},
        {DEFTSIM_STEP_BCAST, DEFTSIM_BC_BINOMIAL},
    };
    printf("%-10s %-20s %4s %9s %16s %16s\n", "collective", "algorithm", "P", "bytes",
           "simulated (s)", "formula (s)");
    int checked = 0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (size_t pi = 0; pi < sizeof Ps / sizeof Ps[0]; pi++) {
            deftsim_sim_params p;
            simtest_params(&p, Ps[pi]);
            p.allgather = (deftsim_allgather_algo)cases[c].algo;
            p.allreduce = (deftsim_allreduce_algo)cases[c].algo;
            p.bcast = (deftsim_bcast_algo)cases[c].algo;
            deftsim_schedule s[3];
            for (size_t si = 0; si < 3; si++) simtest_one_step(&s[si], Ps[pi], cases[c].k, sizes[si], 0, 0);
            double *t = simtest_run(&p, s, 3, NULL);
            for (size_t si = 0; si < 3; si++) {
                double f = simtest_formula(&p, cases[c].k, sizes[si]);
                deftsim_schedule_free(&s[si]);
                if (isnan(f)) continue;
                printf("%-10s %-20s %4u %9llu %16.9e %16.9e\n", kind_name(cases[c].k),
                       algo_name(&p, cases[c].k), Ps[pi], (unsigned long long)sizes[si], t[si], f);
                cr_expect(close_to(t[si], f), "%s %s P=%u %llu bytes: simulated %.12e s, formula %.12e s",
                          kind_name(cases[c].k), algo_name(&p, cases[c].k), Ps[pi],
                          (unsigned long long)sizes[si], t[si], f);
                checked++;
            }
            free(t);
        }
    cr_expect_geq(checked, 120, "only %d closed forms checked", checked);
}

Test(sim_model, gtopk_tree_matches_the_formula)
{
    for (uint32_t P = 2; P <= 32; P *= 2)
        for (uint64_t b = 1024; b <= (1u << 20); b *= 32) {
            deftsim_sim_params p;
            simtest_params(&p, P);
            deftsim_schedule s;
            simtest_gtopk(&s, P, b);
            double *t = simtest_run(&p, &s, 1, NULL);
            double f = simtest_formula_gtopk(&p, b);
            printf("gtopk tree + binomial P=%2u %8llu bytes: simulated %.9e s, formula %.9e s\n", P,
                   (unsigned long long)b, t[0], f);
            cr_expect(close_to(t[0], f), "P=%u b=%llu: %.12e vs %.12e", P, (unsigned long long)b, t[0], f);
            free(t);
            deftsim_schedule_free(&s);
        }
}

/* Pairwise alltoall and Ok-Topk's rounds of point-to-point messages (P2P steps) against their
 * closed forms, P a power of two and not, eager and rendezvous sizes; the bytes each moves
 * against the schedule module's reference traffic. */
Test(sim_model, alltoall_and_p2p_rounds_match_the_formula)
{
    const uint32_t Ps[] = {2, 3, 4, 5, 6, 8, 12, 16};
    const uint64_t sizes[] = {4, 1024, 65536, 1u << 20};
    int checked = 0;
    for (size_t pi = 0; pi < sizeof Ps / sizeof Ps[0]; pi++)
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
            uint32_t P = Ps[pi];
            deftsim_sim_params p;
            simtest_params(&p, P);
            deftsim_schedule s[2];
            simtest_one_step(&s[0], P, DEFTSIM_STEP_ALLTOALL, sizes[si], 0, 0);
            simtest_oktopk_rounds(&s[1], P, sizes[si], 0);
            deftsim_sim_result r;
            double *t = simtest_run(&p, s, 2, &r);
            double f[2] = {simtest_formula_alltoall(&p, sizes[si]), simtest_formula_oktopk(&p, sizes[si])};
            const char *what[2] = {"alltoall pairwise", "oktopk p2p rounds"};
            for (int i = 0; i < 2; i++) {
                printf("%-18s P=%2u %8llu bytes: simulated %.9e s, formula %.9e s\n", what[i], P,
                       (unsigned long long)sizes[si], t[i], f[i]);
                cr_expect(close_to(t[i], f[i]), "%s P=%u %llu bytes: %.12e vs %.12e", what[i], P,
                          (unsigned long long)sizes[si], t[i], f[i]);
                checked++;
                /* Bytes: what the simulation moved is the reference traffic. */
                uint64_t *sent = calloc(P, sizeof *sent), *recv = calloc(P, sizeof *recv);
                cr_assert(sent && recv);
                for (size_t k = 0; k < s[i].nsteps; k++)
                    deftsim_step_traffic(&s[i].steps[k], P, 4, sent, recv);
                for (uint32_t w = 0; w < P; w++) {
                    uint64_t ss = 0, rr = 0;
                    for (size_t k = 0; k < s[i].nsteps; k++) {
                        ss += r.sent[(r.step_offset[i] + k) * P + w];
                        rr += r.recv[(r.step_offset[i] + k) * P + w];
                    }
                    cr_expect_eq(ss, sent[w], "%s P=%u rank %u sent %llu, reference %llu", what[i], P, w,
                                 (unsigned long long)ss, (unsigned long long)sent[w]);
                    cr_expect_eq(rr, recv[w], "%s P=%u rank %u received %llu, reference %llu", what[i], P,
                                 w, (unsigned long long)rr, (unsigned long long)recv[w]);
                }
                free(sent);
                free(recv);
            }
            /* Per rank: alltoall (P - 1) blocks each way; the rounds 2 (P - 1) messages each way. */
            cr_expect_eq(r.sent[r.step_offset[0] * P], (uint64_t)(P - 1) * sizes[si]);
            free(t);
            deftsim_sim_result_free(&r);
            deftsim_schedule_free(&s[0]);
            deftsim_schedule_free(&s[1]);
        }
    cr_expect_eq(checked, 64);
}

/* Uneven per-pair sizes: every message reaches its receiver with its own size. */
Test(sim_model, p2p_rounds_deliver_per_pair_bytes)
{
    const uint32_t P = 7;
    deftsim_sim_params p;
    simtest_params(&p, P);
    deftsim_schedule s;
    simtest_oktopk_rounds(&s, P, 100000, 1);
    deftsim_sim_result r;
    double *t = simtest_run(&p, &s, 1, &r);
    for (uint32_t w = 0; w < P; w++) {
        uint64_t want_s = 0, want_r = 0, ss = 0, rr = 0;
        for (uint32_t q = 0; q < P; q++) {
            if (q == w) continue;
            want_s += 2 * deftsim_test_pair_size(100000, w, q, 1);
            want_r += 2 * deftsim_test_pair_size(100000, q, w, 1);
        }
        for (size_t k = 0; k < s.nsteps; k++) {
            ss += r.sent[(r.step_offset[0] + k) * P + w];
            rr += r.recv[(r.step_offset[0] + k) * P + w];
        }
        cr_expect_eq(ss, want_s, "rank %u", w);
        cr_expect_eq(rr, want_r, "rank %u", w);
    }
    cr_expect_eq(r.messages, 2ull * P * (P - 1));
    cr_expect_gt(t[0], 0);
    free(t);
    deftsim_sim_result_free(&r);
    deftsim_schedule_free(&s);
}

/* LV08 multiplies latency by 13.01 and bandwidth by 0.97: the factors the model is chosen for. */
Test(sim_model, lv08_applies_its_factors)
{
    deftsim_sim_params p;
    simtest_params(&p, 4);
    p.model = DEFTSIM_NET_LV08;
    p.allgather = DEFTSIM_AG_RING;
    const uint64_t sizes[] = {1024, 1u << 20};
    for (size_t i = 0; i < 2; i++) {
        deftsim_schedule s;
        simtest_one_step(&s, 4, DEFTSIM_STEP_ALLGATHER, sizes[i], 0, 0);
        double *t = simtest_run(&p, &s, 1, NULL);
        double f = 3 * (13.01 * 2 * p.latency + (double)(sizes[i] + 16) / (0.97 * p.bandwidth));
        printf("LV08 ring allgather P=4 %llu bytes: simulated %.9e s, formula %.9e s\n",
               (unsigned long long)sizes[i], t[0], f);
        cr_expect(close_to(t[0], f), "%.12e vs %.12e", t[0], f);
        free(t);
        deftsim_schedule_free(&s);
    }
}

/* A compute step lasts what it was measured to take; a message leaves once its sender has
 * computed; each schedule is timed from its own start. */
Test(sim_model, compute_is_injected_and_iterations_start_together)
{
    const uint32_t P = 4;
    deftsim_sim_params p;
    simtest_params(&p, P);
    deftsim_schedule s[2];
    for (int i = 0; i < 2; i++) {
        deftsim_schedule_init(&s[i], P);
        deftsim_step *c = deftsim_schedule_add(&s[i], DEFTSIM_STEP_COMPUTE, "select");
        cr_assert(c);
        const double secs[] = {1e-3, 2e-3 * (i + 1), 0, 5e-4};
        memcpy(c->seconds, secs, sizeof secs);
        deftsim_step *m = deftsim_schedule_add(&s[i], DEFTSIM_STEP_SENDRECV, "msg");
        cr_assert(m);
        m->peer[1] = 3; /* the slowest worker sends to the one that finished early */
        m->bytes[1] = 100000;
    }
    deftsim_sim_result r;
    double *t = simtest_run(&p, s, 2, &r);
    for (size_t i = 0; i < 2; i++) {
        for (uint32_t w = 0; w < P; w++) {
            cr_expect_eq(deftsim_sim_start(&r, i, 0, w), 0);
            cr_expect(close_to(deftsim_sim_end(&r, i, 0, w), s[i].steps[0].seconds[w]),
                      "iteration %zu worker %u: computed until %.12e, measured %.12e", i, w,
                      deftsim_sim_end(&r, i, 0, w), s[i].steps[0].seconds[w]);
        }
        double want = s[i].steps[0].seconds[1] + simtest_msg(&p, 100000);
        printf("iteration %zu: message received at %.9e s, formula %.9e s\n", i,
               deftsim_sim_end(&r, i, 1, 3), want);
        cr_expect(close_to(deftsim_sim_end(&r, i, 1, 3), want));
        cr_expect(close_to(t[i], want), "iteration %zu: %.12e vs %.12e", i, t[i], want);
        /* Workers 0 and 2 take no part: they leave the step as they enter it. */
        cr_expect_eq(deftsim_sim_start(&r, i, 1, 2), deftsim_sim_end(&r, i, 1, 2));
        cr_expect_eq(r.sent[(r.step_offset[i] + 1) * P + 1], 100000);
        cr_expect_eq(r.recv[(r.step_offset[i] + 1) * P + 3], 100000);
        cr_expect(close_to(r.comm_seconds[i], simtest_msg(&p, 100000)),
                  "comm %.12e", r.comm_seconds[i]);
    }
    cr_expect_eq(r.messages, 2);
    free(t);
    deftsim_sim_result_free(&r);
    for (int i = 0; i < 2; i++) deftsim_schedule_free(&s[i]);
}

/* Forward F, backward part b1, bucket 0's allreduce (A0), backward part b2, bucket 1's (A1):
 * DDP's overlap as the engine schedules it with [compute] (docs/COMPUTE.md). */
static void overlap_schedule(deftsim_schedule *s, uint32_t P, double F, double b1, double b2,
                             uint64_t s0, uint64_t s1, int async)
{
    deftsim_schedule_init(s, P);
    const double part[3] = {F, b1, b2};
    const char *const name[3] = {"forward", "backward", "backward"};
    const uint64_t size[2] = {s0, s1};
    for (int i = 0; i < 3; i++) {
        deftsim_step *c = deftsim_schedule_add(s, DEFTSIM_STEP_COMPUTE, name[i]);
        cr_assert(c);
        for (uint32_t w = 0; w < P; w++) c->seconds[w] = part[i];
        if (i == 0) continue;
        deftsim_step *a = deftsim_schedule_add(s, DEFTSIM_STEP_ALLREDUCE, i == 1 ? "bucket0" : "bucket1");
        cr_assert(a);
        for (uint32_t w = 0; w < P; w++) a->bytes[w] = size[i - 1];
        a->flags = async ? DEFTSIM_STEP_ASYNC : 0;
    }
}

/* Asynchronous collectives overlap the compute after them, one at a time in order: with A0
 * shorter than b2 bucket 1 starts when the backward pass ends, with A0 longer it waits for
 * bucket 0. Iteration = F + b1 + max(b2, A0) + A1 by hand; synchronous steps add up. */
Test(sim_model, async_collectives_overlap_compute_in_order)
{
    const uint32_t P = 4;
    deftsim_sim_params p;
    simtest_params(&p, P);
    const uint64_t s0 = 1u << 20, s1 = 1u << 22;
    double A0 = simtest_formula(&p, DEFTSIM_STEP_ALLREDUCE, s0);
    double A1 = simtest_formula(&p, DEFTSIM_STEP_ALLREDUCE, s1);
    cr_assert(A0 > 0 && A1 > 0);
    const double F = 3e-3, b1 = 2e-3;
    const double b2s[2] = {4 * A0, A0 / 4}; /* bucket 0 hidden; bucket 0 longer than b2 */
    for (int c = 0; c < 2; c++) {
        double b2 = b2s[c];
        deftsim_schedule s[2];
        overlap_schedule(&s[0], P, F, b1, b2, s0, s1, 1);
        overlap_schedule(&s[1], P, F, b1, b2, s0, s1, 0);
        deftsim_sim_result r;
        double *t = simtest_run(&p, s, 2, &r);
        double want_async = F + b1 + fmax(b2, A0) + A1, want_sync = F + b1 + A0 + b2 + A1;
        printf("overlap: b2 %.6e A0 %.6e A1 %.6e: async %.9e (formula %.9e), sync %.9e "
               "(formula %.9e)\n", b2, A0, A1, t[0], want_async, t[1], want_sync);
        cr_expect(close_to(t[0], want_async), "async: %.12e vs %.12e", t[0], want_async);
        cr_expect(close_to(t[1], want_sync), "sync: %.12e vs %.12e", t[1], want_sync);
        for (uint32_t w = 0; w < P; w++) {
            /* Steps: 0 forward, 1 backward, 2 bucket0, 3 backward, 4 bucket1. */
            cr_expect(close_to(deftsim_sim_start(&r, 0, 2, w), F + b1));
            cr_expect(close_to(deftsim_sim_end(&r, 0, 2, w), F + b1 + A0));
            cr_expect(close_to(deftsim_sim_end(&r, 0, 3, w), F + b1 + b2),
                      "the backward pass goes on during bucket 0");
            cr_expect(close_to(deftsim_sim_start(&r, 0, 4, w), F + b1 + fmax(b2, A0)));
            for (size_t k = 0; k < 5; k++) {
                size_t a = (r.step_offset[0] + k) * P + w, b = (r.step_offset[1] + k) * P + w;
                cr_expect_eq(r.sent[a], r.sent[b], "step %zu worker %u: bytes differ", k, w);
                cr_expect_eq(r.recv[a], r.recv[b]);
                cr_expect(k % 2 == 1 || k == 0 ? r.sent[a] == 0 : r.sent[a] > 0);
            }
        }
        cr_expect(close_to(r.comm_seconds[0], A0 + A1), "comm %.12e", r.comm_seconds[0]);
        free(t);
        deftsim_sim_result_free(&r);
        for (int i = 0; i < 2; i++) deftsim_schedule_free(&s[i]);
    }
}

/* The bytes every algorithm moves: every rank receives every other block once in an
 * allgather; the ring algorithms move exactly what the reference traffic of the schedule
 * module says (which the rows' byte columns report). */
Test(sim_model, algorithms_move_the_reference_bytes)
{
    const uint32_t Ps[] = {3, 4, 6, 7, 8};
    for (size_t pi = 0; pi < sizeof Ps / sizeof Ps[0]; pi++)
        for (int algo = 0; algo < 3; algo++)
            for (int uneven = 0; uneven < 2; uneven++) {
                uint32_t P = Ps[pi];
                deftsim_sim_params p;
                simtest_params(&p, P);
                p.allgather = (deftsim_allgather_algo)algo;
                p.allreduce = (deftsim_allreduce_algo)algo;
                p.bcast = (deftsim_bcast_algo)algo;
                /* 300001 bytes: blocks above the 256 KiB pipeline size; the allreduce of 75000
                 * floats, which no P here divides evenly but 3 and 4 and 6 */
                deftsim_schedule s[3];
                simtest_one_step(&s[0], P, DEFTSIM_STEP_ALLGATHER, 300004, uneven, 0);
                simtest_one_step(&s[1], P, DEFTSIM_STEP_ALLREDUCE, uneven ? 4 * 75001 : 4 * 75000, 0, 0);
                simtest_one_step(&s[2], P, DEFTSIM_STEP_BCAST, uneven ? 99999 : 100000, 0, P - 1);
                deftsim_sim_result r;
                free(simtest_run(&p, s, 3, &r));
                for (int k = 0; k < 3; k++) {
                    const deftsim_step *st = &s[k].steps[0];
                    uint64_t *sent = calloc(P, 8), *recv = calloc(P, 8), tot_s = 0, tot_r = 0;
                    cr_assert(sent && recv);
                    deftsim_step_traffic(st, P, 4, sent, recv);
                    for (uint32_t w = 0; w < P; w++) {
                        uint64_t gs = r.sent[(size_t)k * P + w], gr = r.recv[(size_t)k * P + w];
                        tot_s += gs;
                        tot_r += gr;
                        if (k == 0)
                            cr_expect_eq(gr, recv[w], "allgather %s P=%u uneven=%d rank %u: received %llu, want %llu",
                                         deftsim_allgather_name(p.allgather), P, uneven, w,
                                         (unsigned long long)gr, (unsigned long long)recv[w]);
                        int reference = (k == 1 && algo == DEFTSIM_AR_RING) ||
                                        (k == 2 && algo == DEFTSIM_BC_BINOMIAL) ||
                                        (k == 0 && algo == DEFTSIM_AG_RING);
                        if (reference) {
                            cr_expect_eq(gs, sent[w], "%s P=%u uneven=%d rank %u: sent %llu, reference %llu",
                                         deftsim_step_kind_name(st->kind), P, uneven, w,
                                         (unsigned long long)gs, (unsigned long long)sent[w]);
                            cr_expect_eq(gr, recv[w], "%s P=%u uneven=%d rank %u: received %llu, reference %llu",
                                         deftsim_step_kind_name(st->kind), P, uneven, w,
                                         (unsigned long long)gr, (unsigned long long)recv[w]);
                        }
                    }
                    cr_expect_eq(tot_s, tot_r, "what is sent is received");
                    if (k == 2) /* a broadcast delivers the payload to every other rank at least */
                        for (uint32_t w = 0; w + 1 < P; w++)
                            cr_expect_geq(r.recv[2 * P + w], algo == DEFTSIM_BC_BINOMIAL ? st->bytes[P - 1] : 0);
                    free(sent);
                    free(recv);
                    deftsim_schedule_free(&s[k]);
                }
                deftsim_sim_result_free(&r);
            }
}

/* Approximate mode against the full simulation: an equal-block ring repeats one exchange, so
 * sampling a few steps and scaling loses nothing without crosstraffic, on a flat cluster and on
 * a fat tree alike, and little with it. */
Test(sim_model, approximate_rings_against_exact)
{
    const deftsim_topology topos[] = {DEFTSIM_TOPO_FLAT, DEFTSIM_TOPO_FATTREE};
    for (size_t ti = 0; ti < 2; ti++)
        for (int cross = 0; cross < 2; cross++) {
            const uint32_t P = 96;
            deftsim_sim_params p;
            simtest_params(&p, P);
            p.topology = topos[ti];
            p.crosstraffic = cross;
            p.allgather = DEFTSIM_AG_RING;
            p.allreduce = DEFTSIM_AR_RING;
            deftsim_schedule s[5];
            simtest_one_step(&s[0], P, DEFTSIM_STEP_ALLGATHER, 1024, 0, 0);
            simtest_one_step(&s[1], P, DEFTSIM_STEP_ALLGATHER, 1u << 20, 0, 0);
            simtest_one_step(&s[2], P, DEFTSIM_STEP_ALLREDUCE, 4u * 96 * 1000, 0, 0);
            simtest_one_step(&s[3], P, DEFTSIM_STEP_ALLGATHER, 4096, 1, 0); /* uneven: exact */
            /* chunks of 1000 and 1001 floats: sampled too, to within an element */
            simtest_one_step(&s[4], P, DEFTSIM_STEP_ALLREDUCE, 4u * (96 * 1000 + 37), 0, 0);
            deftsim_sim_result re, ra;
            double *te = simtest_run(&p, s, 5, &re);
            p.mode = DEFTSIM_SIM_APPROXIMATE;
            double *ta = simtest_run(&p, s, 5, &ra);
            cr_expect_eq(ra.mode, DEFTSIM_SIM_APPROXIMATE);
            cr_expect_lt(ra.messages, re.messages / 2, "approximate: %llu messages, exact %llu",
                         (unsigned long long)ra.messages, (unsigned long long)re.messages);
            for (int i = 0; i < 5; i++) {
                double err = (ta[i] - te[i]) / te[i];
                printf("approximate vs exact, %s crosstraffic=%d, schedule %d: %.9e vs %.9e s (%+.2e)\n",
                       deftsim_topology_name(p.topology), cross, i, ta[i], te[i], err);
                /* Without crosstraffic every step of the ring is the same: nothing is lost.
                 * With it, the acknowledgements' load on the fat tree's shared links settles
                 * over more steps than are sampled: measured up to 1.6 %. */
                cr_expect_lt(fabs(err), cross ? 2e-2 : i == 4 ? 1e-2 : 1e-9,
                             "%s crosstraffic=%d schedule %d: approximate %.12e, exact %.12e",
                             deftsim_topology_name(p.topology), cross, i, ta[i], te[i]);
                if (i == 3) cr_expect_eq(ta[i], te[i], "uneven blocks are simulated in full");
                deftsim_schedule_free(&s[i]);
            }
            free(te);
            free(ta);
            deftsim_sim_result_free(&re);
            deftsim_sim_result_free(&ra);
        }
}

/* Approximate mode keeps handles to eager sends and reaps them in the sender's waits instead
 * of detaching them (sim_p2p.c, "Eager sends"). Ok-Topk's rounds with uneven pairs (not alike,
 * so they run in full) of eager sizes, then a step in which every rank posts more eager sends
 * than it keeps (the rest detached) and waits for as many receives, so that its wait watches
 * more comms than the reaping loop does (a plain wait then), then a ring allgather of uneven
 * blocks (not sampled either): the same
 * bytes and messages as exact mode, and the simulated times within 1e-4 of it on the flat
 * network and on a torus. */
Test(sim_model, approximate_keeps_eager_sends)
{
    const deftsim_topology topos[] = {DEFTSIM_TOPO_FLAT, DEFTSIM_TOPO_TORUS};
    const uint32_t P = 48, fan = 40;
    for (size_t ti = 0; ti < 2; ti++) {
        deftsim_sim_params p;
        simtest_params(&p, P);
        p.topology = topos[ti];
        p.allgather = DEFTSIM_AG_RING;
        deftsim_schedule s[3];
        simtest_oktopk_rounds(&s[0], P, 20000, 1);
        deftsim_schedule_init(&s[1], P);
        deftsim_step *st = deftsim_schedule_add_p2p(&s[1], "many", 2 * fan);
        cr_assert(st);
        for (uint32_t r = 0; r < P; r++)
            for (uint32_t i = 1; i <= fan; i++) {
                size_t at = (size_t)r * 2 * fan + 2 * (i - 1);
                st->peer[at] = st->peer[at + 1] = (r + i) % P;
                st->bytes[at] = st->bytes[at + 1] = 100 + 7 * ((r * 31 + i) % 13);
            }
        simtest_one_step(&s[2], P, DEFTSIM_STEP_ALLGATHER, 1000, 1, 0); /* uneven: no sampling */
        deftsim_sim_result re, ra;
        double *te = simtest_run(&p, s, 3, &re);
        p.mode = DEFTSIM_SIM_APPROXIMATE;
        double *ta = simtest_run(&p, s, 3, &ra);
        cr_expect_eq(ra.messages, re.messages);
        size_t rows = re.step_offset[3];
        for (size_t i = 0; i < rows * P; i++) {
            cr_expect_eq(ra.sent[i], re.sent[i]);
            cr_expect_eq(ra.recv[i], re.recv[i]);
        }
        for (int i = 0; i < 3; i++) {
            double err = (ta[i] - te[i]) / te[i];
            printf("eager sends kept, %s, schedule %d: approximate %.12e s, exact %.12e s (%+.2e)\n",
                   deftsim_topology_name(p.topology), i, ta[i], te[i], err);
            cr_expect_lt(fabs(err), 1e-4, "%s schedule %d: approximate %.12e, exact %.12e",
                         deftsim_topology_name(p.topology), i, ta[i], te[i]);
            deftsim_schedule_free(&s[i]);
        }
        free(te);
        free(ta);
        deftsim_sim_result_free(&re);
        deftsim_sim_result_free(&ra);
    }
}

/* Every generated topology loads and runs, at a P that is not a power of two; the same
 * simulation twice gives the same times; a worse network takes longer. */
Test(sim_model, every_topology_runs)
{
    const deftsim_topology topos[] = {DEFTSIM_TOPO_FLAT, DEFTSIM_TOPO_FATTREE, DEFTSIM_TOPO_TORUS,
                                      DEFTSIM_TOPO_DRAGONFLY};
    for (size_t ti = 0; ti < 4; ti++) {
        const uint32_t P = 40;
        deftsim_sim_params p;
        simtest_params(&p, P);
        p.topology = topos[ti];
        deftsim_schedule s;
        simtest_one_step(&s, P, DEFTSIM_STEP_ALLREDUCE, 1u << 20, 0, 0);
        double *a = simtest_run(&p, &s, 1, NULL), *b = simtest_run(&p, &s, 1, NULL);
        p.bandwidth /= 10;
        double *c = simtest_run(&p, &s, 1, NULL);
        printf("%-9s P=%u 1 MiB rabenseifner: %.9e s; at a tenth of the bandwidth %.9e s\n",
               deftsim_topology_name(topos[ti]), P, a[0], c[0]);
        cr_expect_gt(a[0], 0);
        cr_expect_eq(a[0], b[0]);
        cr_expect_gt(c[0], 5 * a[0]);
        free(a);
        free(b);
        free(c);
        deftsim_schedule_free(&s);
    }
}

/* A user's platform: workers take its hosts in name order with numbers compared as numbers, so
 * worker 1 is n2 (not n10) and a message from worker 0 to worker 1 crosses n1-n2's link. */
Test(sim_model, user_platform_file_in_natural_order)
{
    char dir[] = "/tmp/deftsim-simtest-XXXXXX";
    cr_assert(mkdtemp(dir));
    char path[128];
    snprintf(path, sizeof path, "%s/own.xml", dir);
    const char *xml =
        "<?xml version='1.0'?>\n"
        "<!DOCTYPE platform SYSTEM \"https://simgrid.org/simgrid.dtd\">\n"
        "<platform version=\"4.1\">\n"
        "  <zone id=\"z\" routing=\"Full\">\n"
        "    <host id=\"n10\" speed=\"1Gf\"/>\n"
        "    <host id=\"n2\" speed=\"1Gf\"/>\n"
        "    <host id=\"n1\" speed=\"1Gf\"/>\n"
        "    <link id=\"l12\" bandwidth=\"1GBps\" latency=\"1ms\"/>\n"
        "    <link id=\"l110\" bandwidth=\"1GBps\" latency=\"7ms\"/>\n"
        "    <link id=\"l210\" bandwidth=\"1GBps\" latency=\"3ms\"/>\n"
        "    <route src=\"n1\" dst=\"n2\"><link_ctn id=\"l12\"/></route>\n"
        "    <route src=\"n1\" dst=\"n10\"><link_ctn id=\"l110\"/></route>\n"
        "    <route src=\"n2\" dst=\"n10\"><link_ctn id=\"l210\"/></route>\n"
        "  </zone>\n"
        "</platform>\n";
    cr_assert_eq(deftsim_write_file_atomic(path, xml, strlen(xml)), DEFTSIM_OK);
    deftsim_sim_params p;
    simtest_params(&p, 3);
    p.topology = DEFTSIM_TOPO_FILE;
    p.platform_file = path;
    deftsim_schedule s;
    deftsim_schedule_init(&s, 3);
    deftsim_step *m = deftsim_schedule_add(&s, DEFTSIM_STEP_SENDRECV, "msg");
    cr_assert(m);
    m->peer[0] = 1;
    m->bytes[0] = 1000000 - 16;
    double *t = simtest_run(&p, &s, 1, NULL);
    double want = 1e-3 + 1e6 / 1e9;
    printf("worker 0 -> worker 1 on the user's platform: %.9e s, n1 -> n2 link %.9e s\n", t[0], want);
    cr_expect(close_to(t[0], want), "%.12e vs %.12e: workers not on n1, n2, n10", t[0], want);
    free(t);
    /* More workers than hosts: the child says so. */
    deftsim_schedule big;
    deftsim_schedule_init(&big, 4);
    p.P = 4;
    const deftsim_schedule *bp = &big;
    deftsim_sim_result r;
    cr_expect_eq(deftsim_sim_run(&p, &bp, 1, &r), DEFTSIM_E_RUNTIME);
    cr_expect(strstr(deftsim_error_message(), "3 hosts, fewer than the 4 workers"), "%s",
              deftsim_error_message());
    deftsim_schedule_free(&big);
    deftsim_schedule_free(&s);
    unlink(path);
    rmdir(dir);
}

/* What a caller is told when it goes wrong. */
Test(sim_model, errors_name_the_problem)
{
    deftsim_sim_params p;
    simtest_params(&p, 4);
    deftsim_schedule s;
    simtest_one_step(&s, 3, DEFTSIM_STEP_ALLGATHER, 10, 0, 0);
    const deftsim_schedule *sp = &s;
    deftsim_sim_result r;
    cr_expect_eq(deftsim_sim_run(&p, &sp, 1, &r), DEFTSIM_E_INTERNAL);
    cr_expect_str_eq(deftsim_error_message(),
                     "network simulation: schedule 0 has 3 ranks, the platform 4");
    deftsim_schedule_free(&s);

    simtest_one_step(&s, 4, DEFTSIM_STEP_BCAST, 10, 0, 9);
    cr_expect_eq(deftsim_sim_run(&p, &sp, 1, &r), DEFTSIM_E_INTERNAL);
    cr_expect_str_eq(deftsim_error_message(), "network simulation: schedule 0 step 0 'x': root 9 of 4 ranks");
    deftsim_schedule_free(&s);

    /* A platform SimGrid refuses: its own words come back. */
    char dir[] = "/tmp/deftsim-simtest-XXXXXX";
    cr_assert(mkdtemp(dir));
    char path[128];
    snprintf(path, sizeof path, "%s/broken.xml", dir);
    const char *xml = "<?xml version='1.0'?>\n<platform version=\"4.1\">\n  <zone id=\"z\" routing=\"Full\">\n";
    cr_assert_eq(deftsim_write_file_atomic(path, xml, strlen(xml)), DEFTSIM_OK);
    p.topology = DEFTSIM_TOPO_FILE;
    p.platform_file = path;
    simtest_one_step(&s, 4, DEFTSIM_STEP_ALLGATHER, 10, 0, 0);
    cr_expect_eq(deftsim_sim_run(&p, &sp, 1, &r), DEFTSIM_E_RUNTIME);
    printf("broken platform: %s\n", deftsim_error_message());
    cr_expect(strstr(deftsim_error_message(), "network simulation (SimGrid, 4 workers, platform") &&
                  strstr(deftsim_error_message(), "SimGrid said:"),
              "%s", deftsim_error_message());
    deftsim_schedule_free(&s);
    unlink(path);
    rmdir(dir);

    p.topology = DEFTSIM_TOPO_TORUS;
    p.platform_file = NULL;
    p.topology_params = "2,2";
    p.P = 8;
    simtest_one_step(&s, 8, DEFTSIM_STEP_ALLGATHER, 10, 0, 0);
    cr_expect_eq(deftsim_sim_run(&p, &sp, 1, &r), DEFTSIM_E_INPUT);
    cr_expect_str_eq(deftsim_error_message(), "topology_params '2,2': 4 hosts, fewer than the 8 workers");
    deftsim_schedule_free(&s);
}
