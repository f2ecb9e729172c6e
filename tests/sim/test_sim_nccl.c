/* test_sim_nccl.c - NCCL's algorithms (library = nccl, sim/sim_nccl.c) against their closed
 * forms (suite fast): on the flat cluster under CM02 without crosstraffic, every link equal,
 * with gpus_per_node = 8 on 1, 2 and 8 nodes (the multi-GPU platform is validated with it:
 * here the message patterns are); the ring orders and trees are what NCCL builds; every rank
 * ends with every block and every contribution exactly once; the bytes moved. */
#include <criterion/criterion.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "deftsim_schedule.h"
#include "deftsim_sim.h"
#include "sim_internal.h"
#include "simtest.h"
#include "vsize.h"

#define STEP (512u * 1024u)  /* NCCL_BUFFSIZE / 8 at the default 4 MiB */
#define CHUNK (4u * STEP)    /* a ring chunk */

static double rel(double got, double want) { return fabs(got - want) / want; }

/* The flat cluster of P hosts, every link equal, as a platform file: with gpus_per_node = G
 * > 1 a generated platform would have nodes with their own links (sim_nodes.c, validated in
 * test_sim_nodes.c); a file keeps today's links and only groups its hosts G a node for NCCL's
 * algorithms, whose message patterns are what this file checks. */
static const char *flat_file(uint32_t P)
{
    static char path[64][256];
    static uint32_t made[64];
    size_t slot = 0;
    while (slot < 63 && made[slot] && made[slot] != P) slot++;
    if (made[slot] != P) {
        deftsim_sim_params f;
        simtest_params(&f, P);
        snprintf(path[slot], sizeof path[slot], "/tmp/deftsim-nccl-flat-%ld-P%u.xml",
                 (long)getpid(), P);
        cr_assert_eq(deftsim_sim_write_platform(&f, path[slot]), DEFTSIM_OK, "%s",
                     deftsim_error_message());
        made[slot] = P;
    }
    return path[slot];
}

static void nccl_params(deftsim_sim_params *p, uint32_t P, uint32_t G, uint32_t C,
                        deftsim_nccl_algo a)
{
    simtest_params(p, P);
    if (G > 1) {
        p->topology = DEFTSIM_TOPO_FILE;
        p->platform_file = flat_file(P);
    }
    p->library = DEFTSIM_LIB_NCCL;
    p->gpus_per_node = G;
    p->nccl_channels = C;
    p->nccl_algorithm = a;
}

/* k messages of b bytes at once on a host's link: 2 L + k (b + 16) / B. */
static double t_k(const deftsim_sim_params *p, uint32_t k, double b)
{
    return 2 * p->latency + k * (b + p->envelope_bytes) / p->bandwidth;
}

static double run1(const deftsim_sim_params *p, deftsim_step_kind k, uint64_t size, int uneven,
                   uint32_t root, deftsim_sim_result *keep)
{
    deftsim_schedule s;
    simtest_one_step(&s, p->P, k, size, uneven, root);
    double *t = simtest_run(p, &s, 1, keep);
    double v = t[0];
    free(t);
    deftsim_schedule_free(&s);
    return v;
}

/* Ring allreduce: loops of P chunks of up to 2 MiB a channel, 2 (P - 1) steps each, every
 * step C chunks on every link: sum over loops of 2 (P - 1) (2 L + C (chunk + 16) / B), which
 * for one loop is 2 (P - 1) / P S / B plus the latency terms. */
static double ring_ar_formula(const deftsim_sim_params *p, uint64_t S)
{
    uint32_t P = p->P, C = p->nccl_channels;
    double per = (double)S / C, t = 0; /* bytes a channel */
    while (per > 0) {
        double loop = per < (double)P * CHUNK ? per : (double)P * CHUNK;
        t += 2.0 * (P - 1) * t_k(p, C, loop / P);
        per -= loop;
    }
    return t;
}

Test(sim_nccl, ring_allreduce_matches_its_closed_form)
{
    const uint32_t nodes[] = {1, 2, 8}, Cs[] = {1, 2, 4};
    int checked = 0;
    for (size_t ni = 0; ni < 3; ni++)
        for (size_t ci = 0; ci < 3; ci++) {
            uint32_t G = 8, P = nodes[ni] * G, C = Cs[ci];
            deftsim_sim_params p;
            nccl_params(&p, P, G, C, DEFTSIM_NCCL_RING);
            const uint64_t sizes[] = {4ull * P * C * 1000, 4ull * P * C * 1024 * 1024 + 0,
                                      4ull * (P * C * 1000 + 37)};
            for (size_t si = 0; si < 3; si++) {
                double t = run1(&p, DEFTSIM_STEP_ALLREDUCE, sizes[si], 0, 0, NULL);
                double f = ring_ar_formula(&p, sizes[si]);
                printf("nccl ring allreduce N=%u G=%u P=%2u C=%u %10llu B: simulated %.9e s, "
                       "formula %.9e s (%+.2e)\n", nodes[ni], G, P, C,
                       (unsigned long long)sizes[si], t, f, (t - f) / f);
                cr_expect_lt(rel(t, f), si == 2 ? 1e-2 : 1e-6, "P=%u C=%u %llu: %.12e vs %.12e",
                             P, C, (unsigned long long)sizes[si], t, f);
                checked++;
            }
        }
    cr_expect_eq(checked, 27);
}

/* Ring allgather of b-byte blocks (padded to the largest when uneven): per loop of one chunk
 * of every block, P - 1 steps of C chunks a link. */
static double ring_ag_formula(const deftsim_sim_params *p, uint64_t b)
{
    uint32_t P = p->P, C = p->nccl_channels;
    double per = (double)b / C, t = 0;
    while (per > 0) {
        double c = per < CHUNK ? per : CHUNK;
        t += (P - 1) * t_k(p, C, c);
        per -= c;
    }
    return t;
}

/* Ring broadcast from a root: n chunks of 512 KiB a channel through P - 1 hops, n + P - 2
 * rounds; the last chunk shorter costs its own round. */
static double bcast_formula(const deftsim_sim_params *p, uint64_t b)
{
    uint32_t P = p->P, C = p->nccl_channels;
    double per = (double)b / C;
    double n = ceil(per / STEP), last = per - (n - 1) * STEP;
    if (n == 1) return (P - 1) * t_k(p, C, per);
    return (n + P - 3) * t_k(p, C, STEP) + t_k(p, C, last);
}

Test(sim_nccl, ring_allgather_and_broadcast_match_their_closed_forms)
{
    const uint32_t nodes[] = {1, 2, 8};
    for (size_t ni = 0; ni < 3; ni++)
        for (uint32_t C = 1; C <= 2; C++) {
            uint32_t G = 8, P = nodes[ni] * G;
            deftsim_sim_params p;
            nccl_params(&p, P, G, C, DEFTSIM_NCCL_RING);
            const uint64_t sizes[] = {4096, 3u << 20, 10000004};
            for (size_t si = 0; si < 3; si++) {
                for (int uneven = 0; uneven < 2; uneven++) {
                    deftsim_sim_result r;
                    double t = run1(&p, DEFTSIM_STEP_ALLGATHER, sizes[si], uneven, 0, &r);
                    uint64_t mx = uneven ? 0 : sizes[si];
                    for (uint32_t q = 0; uneven && q < P; q++)
                        if (deftsim_test_vsize(sizes[si], q) > mx) mx = deftsim_test_vsize(sizes[si], q);
                    double f = ring_ag_formula(&p, mx);
                    printf("nccl ring allgather%s P=%2u C=%u %9llu B: simulated %.9e s, formula "
                           "%.9e s (%+.2e)\n", uneven ? " (pad)" : "      ", P, C,
                           (unsigned long long)sizes[si], t, f, (t - f) / f);
                    cr_expect_lt(rel(t, f), 1e-2, "allgather P=%u C=%u %llu", P, C,
                                 (unsigned long long)sizes[si]);
                    /* Padded blocks travel padded: every rank receives P - 1 largest blocks. */
                    for (uint32_t w = 0; w < P; w++)
                        cr_expect_eq(r.recv[w], (uint64_t)(P - 1) * mx, "rank %u received %llu", w,
                                     (unsigned long long)r.recv[w]);
                    deftsim_sim_result_free(&r);
                }
                uint32_t root = P - 3;
                deftsim_sim_result r;
                double t = run1(&p, DEFTSIM_STEP_BCAST, sizes[si], 0, root, &r);
                double f = bcast_formula(&p, sizes[si]);
                printf("nccl ring broadcast       P=%2u C=%u %9llu B: simulated %.9e s, formula "
                       "%.9e s (%+.2e)\n", P, C, (unsigned long long)sizes[si], t, f, (t - f) / f);
                cr_expect_lt(rel(t, f), 1e-2, "bcast P=%u C=%u %llu: %.12e vs %.12e", P, C,
                             (unsigned long long)sizes[si], t, f);
                for (uint32_t w = 0; w < P; w++) {
                    cr_expect_eq(r.recv[w], w == root ? 0 : sizes[si], "bcast rank %u", w);
                    /* the rank before the root on every channel's ring sends nothing */
                }
                deftsim_sim_result_free(&r);
            }
        }
}

/* Hierarchical: the ring reduce-scatter over G GPUs, the ring allreduce over N nodes of S / G,
 * the ring allgather over G: (G - 1) t(C, S/(C G)) twice plus 2 (N - 1) t(C, S/(C G N)). */
Test(sim_nccl, hierarchical_allreduce_matches_its_closed_form)
{
    const uint32_t nodes[] = {1, 2, 8};
    for (size_t ni = 0; ni < 3; ni++)
        for (uint32_t C = 1; C <= 2; C++) {
            uint32_t G = 8, N = nodes[ni], P = N * G;
            deftsim_sim_params p;
            nccl_params(&p, P, G, C, DEFTSIM_NCCL_HIERARCHICAL);
            const uint64_t sizes[] = {4ull * P * C * 256, 4ull * P * C * 256 * 64, 4ull * (P * C * 2000 + 13)};
            for (size_t si = 0; si < 3; si++) {
                double S = (double)sizes[si];
                double f = 2.0 * (G - 1) * t_k(&p, C, S / (C * G)) +
                           (N > 1 ? 2.0 * (N - 1) * t_k(&p, C, S / (C * G * N)) : 0);
                double t = run1(&p, DEFTSIM_STEP_ALLREDUCE, sizes[si], 0, 0, NULL);
                printf("nccl hierarchical allreduce N=%u G=%u C=%u %9llu B: simulated %.9e s, "
                       "formula %.9e s (%+.2e)\n", N, G, C, (unsigned long long)sizes[si], t, f,
                       (t - f) / f);
                cr_expect_lt(rel(t, f), si == 2 ? 1e-2 : 1e-6, "N=%u C=%u %llu: %.12e vs %.12e", N,
                             C, (unsigned long long)sizes[si], t, f);
            }
        }
}

/* The tree's pipeline (NCCL's split tree: reduce and broadcast at once): in each round every
 * rank's messages of every tree channel leave at once; the round lasts 2 L + (the most loaded
 * host link's bytes in it) / B. Summed over the rounds, with the library's trees: a rank of
 * height h sends chunk u - h up in round u, a rank at depth d chunk u - H - d down (H the
 * root's height). */
static double tree_formula(const deftsim_sim_params *p, uint64_t S)
{
    uint32_t P = p->P, G = p->gpus_per_node, C = p->nccl_channels, T = 2 * C;
    uint64_t e = 4, count = S / e;
    double *up = calloc(P, sizeof *up), *down = calloc(P, sizeof *down);
    uint32_t *h = calloc((size_t)P * T, sizeof *h), *d = calloc((size_t)P * T, sizeof *d);
    sim_nccl_links *L = calloc((size_t)P * T, sizeof *L);
    cr_assert(up && down && h && d && L);
    uint64_t part[128], nch[128], H[128], rounds = 0;
    for (uint32_t c = 0; c < T; c++) {
        part[c] = (count / T + (c < count % T)) * e;
        nch[c] = (part[c] + STEP - 1) / STEP;
        for (uint32_t r = 0; r < P; r++) sim_nccl_tree(P, G, C, c, r, &L[c * P + r]);
        /* heights bottom-up and depths top-down (repeated until stable) */
        for (int it = 0; it < 64; it++)
            for (uint32_t r = 0; r < P; r++) {
                uint32_t hh = 0;
                for (uint32_t k = 0; k < L[c * P + r].ndown; k++) {
                    uint32_t x = h[c * P + (uint32_t)L[c * P + r].down[k]] + 1;
                    if (x > hh) hh = x;
                }
                h[c * P + r] = hh;
                d[c * P + r] = L[c * P + r].up < 0 ? 0 : d[c * P + (uint32_t)L[c * P + r].up] + 1;
            }
        for (uint32_t r = 0; r < P; r++)
            if (L[c * P + r].up < 0) H[c] = h[c * P + r];
        for (uint32_t r = 0; r < P; r++)
            if (H[c] + d[c * P + r] + nch[c] > rounds) rounds = H[c] + d[c * P + r] + nch[c];
    }
    double t = 0;
    for (uint64_t u = 0; u < rounds; u++) {
        memset(up, 0, P * sizeof *up);
        memset(down, 0, P * sizeof *down);
        int any = 0;
        for (uint32_t c = 0; c < T; c++)
            for (uint32_t r = 0; r < P; r++) {
                const sim_nccl_links *l = &L[c * P + r];
                for (int phase = 0; phase < 2; phase++) {
                    uint64_t k0 = phase ? H[c] + d[c * P + r] : h[c * P + r];
                    if (u < k0 || u - k0 >= nch[c]) continue;
                    uint64_t k = u - k0;
                    double b = (double)(part[c] - k * STEP < STEP ? part[c] - k * STEP : STEP) + 16;
                    if (phase == 0 && l->up >= 0) {
                        up[r] += b;
                        down[l->up] += b;
                        any = 1;
                    }
                    for (uint32_t j = 0; phase == 1 && j < l->ndown; j++) {
                        up[r] += b;
                        down[l->down[j]] += b;
                        any = 1;
                    }
                }
            }
        double mx = 0;
        for (uint32_t r = 0; r < P; r++) {
            if (up[r] > mx) mx = up[r];
            if (down[r] > mx) mx = down[r];
        }
        if (any) t += 2 * p->latency + mx / p->bandwidth;
    }
    free(up);
    free(down);
    free(h);
    free(d);
    free(L);
    return t;
}

Test(sim_nccl, tree_allreduce_matches_its_pipeline)
{
    const uint32_t nodes[] = {1, 2, 8};
    for (size_t ni = 0; ni < 3; ni++)
        for (uint32_t C = 1; C <= 2; C++) {
            uint32_t G = 8, P = nodes[ni] * G;
            deftsim_sim_params p;
            nccl_params(&p, P, G, C, DEFTSIM_NCCL_TREE);
            const uint64_t sizes[] = {4096, 4ull << 20, 4ull * (16u << 20) + 4 * 37};
            for (size_t si = 0; si < 3; si++) {
                deftsim_sim_result r;
                double t = run1(&p, DEFTSIM_STEP_ALLREDUCE, sizes[si], 0, 0, &r);
                double f = tree_formula(&p, sizes[si]);
                printf("nccl tree allreduce N=%u G=%u C=%u %9llu B: simulated %.9e s, pipeline "
                       "%.9e s (%+.2e)\n", nodes[ni], G, C, (unsigned long long)sizes[si], t, f,
                       (t - f) / f);
                cr_expect_lt(rel(t, f), 1e-2, "tree N=%u C=%u %llu: %.12e vs %.12e", nodes[ni],
                             C, (unsigned long long)sizes[si], t, f);
                /* Every rank receives the whole vector once going down, and sends up what it
                 * reduced: S in all from the parents, S in all to them (but the roots). */
                uint64_t down_total = 0;
                for (uint32_t w = 0; w < P; w++) down_total += r.recv[w];
                cr_expect_eq(down_total, 2 * (uint64_t)(P - 1) * sizes[si],
                             "tree: %llu bytes received in all", (unsigned long long)down_total);
                deftsim_sim_result_free(&r);
            }
        }
}

/* NCCL's ring order: every channel's ring is a permutation, node after node, entering node n
 * at GPU c + 1 and leaving it from GPU c: channels leave through different GPUs (NICs). */
Test(sim_nccl, ring_orders_are_nccl_rings)
{
    const uint32_t Ps[] = {8, 13, 16, 64, 30}, Gs[] = {8, 4, 8, 8, 1};
    for (size_t i = 0; i < 5; i++) {
        uint32_t P = Ps[i], G = Gs[i];
        for (uint32_t c = 0; c < 8; c++) {
            char *seen = calloc(P, 1);
            cr_assert(seen);
            for (uint32_t pos = 0; pos < P; pos++) {
                uint32_t r = sim_nccl_ring_rank(P, G, c, pos);
                cr_assert_lt(r, P);
                cr_expect_eq(seen[r], 0, "P=%u G=%u c=%u: rank %u twice", P, G, c, r);
                seen[r] = 1;
                cr_expect_eq(sim_nccl_ring_pos(P, G, c, r), pos);
                cr_expect_eq(r / G, pos / G, "the ring goes node by node");
                uint32_t g = P - (r / G) * G < G ? P - (r / G) * G : G;
                if (pos % G == g - 1 && G > 1 && g == G)
                    cr_expect_eq(r % G, c % G, "channel %u leaves node %u from GPU %u", c, r / G, r % G);
            }
            free(seen);
        }
    }
}

/* Every rank ends the ring allreduce with every chunk reduced over every rank exactly once,
 * and the ring allgather with every block once: tokens through the library's chunk order. */
Test(sim_nccl, rings_deliver_every_block_once)
{
    for (uint32_t n = 2; n <= 17; n++) {
        /* have[q][k]: the set of contributions to chunk k that position q holds (bit mask) */
        uint64_t *have = calloc((size_t)n * n, sizeof *have), *nxt = calloc((size_t)n * n, sizeof *nxt);
        cr_assert(have && nxt);
        for (uint32_t q = 0; q < n; q++)
            for (uint32_t k = 0; k < n; k++) have[q * n + k] = 1ull << q;
        for (uint32_t s = 0; s < 2 * (n - 1); s++) {
            memcpy(nxt, have, (size_t)n * n * sizeof *have);
            for (uint32_t q = 0; q < n; q++) {
                uint32_t k = sim_nccl_ring_chunk(n, q, s), to = (q + 1) % n;
                if (s < n - 1) { /* reduce: the receiver adds what it gets, never twice */
                    cr_expect_eq(have[to * n + k] & have[q * n + k], 0, "n=%u step %u: twice", n, s);
                    nxt[to * n + k] = have[to * n + k] | have[q * n + k];
                } else { /* allgather: the receiver takes the reduced chunk */
                    cr_expect_eq(have[q * n + k], (1ull << n) - 1, "n=%u step %u: sends a partial chunk", n, s);
                    nxt[to * n + k] = have[q * n + k];
                }
            }
            memcpy(have, nxt, (size_t)n * n * sizeof *have);
        }
        for (uint32_t q = 0; q < n; q++)
            for (uint32_t k = 0; k < n; k++)
                cr_expect_eq(have[q * n + k], (1ull << n) - 1, "n=%u: position %u chunk %u", n, q, k);
        /* the allgather: position q forwards the block of position q - s in step s */
        for (uint32_t q = 0; q < n; q++) {
            uint64_t got = 1ull << q;
            for (uint32_t s = 0; s < n - 1; s++) {
                uint32_t from = (q + n - 1) % n, block = (from + n - s) % n;
                cr_expect_eq(got & (1ull << block), 0, "n=%u: block %u twice", n, block);
                got |= 1ull << block;
            }
            cr_expect_eq(got, (1ull << n) - 1);
        }
        free(have);
        free(nxt);
    }
}

/* The trees: a spanning tree of every channel over all ranks, parent and child agree; over the
 * nodes the double binary tree makes every node a leaf in one of its two trees (with N odd,
 * NCCL shifts the second tree by one rank instead of mirroring it, and one node is interior in
 * both). */
Test(sim_nccl, trees_are_nccl_double_binary_trees)
{
    for (uint32_t N = 1; N <= 40; N++) {
        uint32_t interior = 0;
        for (uint32_t n = 0; n < N; n++) {
            int both = 1;
            for (uint32_t which = 0; which < 2; which++) {
                int32_t u, a, b;
                sim_nccl_dtree(N, n, which, &u, &a, &b);
                if (a < 0 && b < 0) both = 0;
                if (u >= 0) {
                    int32_t uu, ua, ub;
                    sim_nccl_dtree(N, (uint32_t)u, which, &uu, &ua, &ub);
                    cr_expect(ua == (int32_t)n || ub == (int32_t)n, "N=%u tree %u: %u's parent %d disowns it", N, which, n, u);
                }
            }
            if (both) interior++;
        }
        /* Mirrored (N even): complementary. Shifted (N odd, NCCL's choice): one node is
         * interior in both. */
        cr_expect_eq(interior, N % 2 && N > 1 ? 1u : 0u, "N=%u: %u nodes interior in both trees", N, interior);
    }
    const uint32_t Ps[] = {8, 16, 64, 20, 7};
    const uint32_t Gs[] = {8, 8, 8, 8, 1};
    for (size_t i = 0; i < 5; i++)
        for (uint32_t tc = 0; tc < 4; tc++) {
            uint32_t P = Ps[i], G = Gs[i];
            uint32_t roots = 0, reached = 0;
            for (uint32_t r = 0; r < P; r++) {
                sim_nccl_links l;
                sim_nccl_tree(P, G, 2, tc, r, &l);
                if (l.up < 0) roots++;
                for (uint32_t k = 0; k < l.ndown; k++) {
                    sim_nccl_links c;
                    sim_nccl_tree(P, G, 2, tc, (uint32_t)l.down[k], &c);
                    cr_expect_eq(c.up, (int32_t)r, "P=%u tc=%u: child %d of %u", P, tc, l.down[k], r);
                    reached++;
                }
            }
            cr_expect_eq(roots, 1, "P=%u G=%u tree %u: %u roots", P, G, tc, roots);
            cr_expect_eq(reached, P - 1, "every rank but the root a child once");
        }
}

/* Allgatherv mappings on uneven blocks (P = 16 on 2 nodes): pad moves padded blocks, bcast and
 * p2p the blocks themselves; every rank gets every other block. Alltoall is a group. */
Test(sim_nccl, allgatherv_mappings_and_groups)
{
    const uint32_t P = 16, G = 8;
    deftsim_sim_params p;
    nccl_params(&p, P, G, 2, DEFTSIM_NCCL_RING);
    const uint64_t size = 100000;
    uint64_t total = 0, mx = 0;
    for (uint32_t q = 0; q < P; q++) {
        total += deftsim_test_vsize(size, q);
        if (deftsim_test_vsize(size, q) > mx) mx = deftsim_test_vsize(size, q);
    }
    const deftsim_nccl_agv modes[] = {DEFTSIM_NCCL_AGV_PAD, DEFTSIM_NCCL_AGV_BCAST, DEFTSIM_NCCL_AGV_P2P};
    double t[3];
    for (int m = 0; m < 3; m++) {
        p.nccl_allgatherv = modes[m];
        deftsim_sim_result r;
        t[m] = run1(&p, DEFTSIM_STEP_ALLGATHER, size, 1, 0, &r);
        for (uint32_t w = 0; w < P; w++) {
            uint64_t want = m == 0 ? (P - 1) * mx : total - deftsim_test_vsize(size, w);
            cr_expect_eq(r.recv[w], want, "%s rank %u: received %llu, want %llu",
                         deftsim_nccl_agv_name(modes[m]), w, (unsigned long long)r.recv[w],
                         (unsigned long long)want);
        }
        printf("nccl allgatherv %-5s P=16: %.9e s, %llu messages\n", deftsim_nccl_agv_name(modes[m]),
               t[m], (unsigned long long)r.messages);
        deftsim_sim_result_free(&r);
    }
    /* p2p: every rank sends its block to the 15 others at once on its link, receives 15
     * blocks at once on its own: the largest rank's link bounds it. */
    double f = 2 * p.latency + (P - 1) * ((double)mx + 16) / p.bandwidth;
    cr_expect_lt(rel(t[2], f), 1e-6, "p2p %.12e vs %.12e", t[2], f);
    double a = run1(&p, DEFTSIM_STEP_ALLTOALL, 65536, 0, 0, NULL);
    double fa = t_k(&p, P - 1, 65536);
    printf("nccl alltoall (group) P=16 64 KiB: %.9e s, formula %.9e s\n", a, fa);
    cr_expect_lt(rel(a, fa), 1e-6);
}

/* auto: NCCL's model picks the tree for small messages across many nodes and the ring for
 * large ones; what auto runs is what it picks. */
Test(sim_nccl, auto_follows_the_tuning_model)
{
    deftsim_sim_params p;
    nccl_params(&p, 64, 8, 2, DEFTSIM_NCCL_AUTO);
    cr_expect_eq(sim_nccl_pick(&p, 4096), DEFTSIM_NCCL_TREE);
    cr_expect_eq(sim_nccl_pick(&p, 1ull << 30), DEFTSIM_NCCL_RING);
    for (uint32_t N = 1; N <= 128; N *= 2) {
        nccl_params(&p, 8 * N, 8, 2, DEFTSIM_NCCL_AUTO);
        uint64_t cross = 0;
        for (uint64_t b = 64; b <= (1ull << 34); b *= 2)
            if (sim_nccl_pick(&p, b) == DEFTSIM_NCCL_RING && !cross) cross = b;
            else if (sim_nccl_pick(&p, b) == DEFTSIM_NCCL_TREE) cross = 0;
        printf("nccl auto at 25 Gbit/s, G=8, N=%3u: ring from %llu bytes on (tree below)\n", N,
               (unsigned long long)cross);
    }
    nccl_params(&p, 64, 8, 2, DEFTSIM_NCCL_AUTO);
    for (uint64_t b = 4096; b <= (64u << 20); b *= 128) {
        double ta = run1(&p, DEFTSIM_STEP_ALLREDUCE, b, 0, 0, NULL);
        p.nccl_algorithm = sim_nccl_pick(&p, b);
        double tp = run1(&p, DEFTSIM_STEP_ALLREDUCE, b, 0, 0, NULL);
        p.nccl_algorithm = DEFTSIM_NCCL_AUTO;
        cr_expect_eq(ta, tp, "auto at %llu bytes", (unsigned long long)b);
    }
}

/* library = mpi stays MPI's whatever gpus_per_node says (on one platform: a generated one
 * with G > 1 has other links); G = 1 runs NCCL's ring over ranks. */
Test(sim_nccl, mpi_is_unchanged_and_approximate_rings)
{
    deftsim_sim_params p;
    simtest_params(&p, 16);
    p.topology = DEFTSIM_TOPO_FILE;
    p.platform_file = flat_file(16);
    p.allreduce = DEFTSIM_AR_RING;
    double a = run1(&p, DEFTSIM_STEP_ALLREDUCE, 4u * 16 * 1000, 0, 0, NULL);
    p.gpus_per_node = 8;
    double b = run1(&p, DEFTSIM_STEP_ALLREDUCE, 4u * 16 * 1000, 0, 0, NULL);
    cr_expect_eq(a, b);
    cr_expect_lt(rel(a, simtest_formula(&p, DEFTSIM_STEP_ALLREDUCE, 4u * 16 * 1000)), 1e-6);
    /* approximate mode: sampled NCCL rings within 1e-9 of the exact ones on equal chunks */
    nccl_params(&p, 96, 8, 2, DEFTSIM_NCCL_RING);
    deftsim_sim_result re, ra;
    double te = run1(&p, DEFTSIM_STEP_ALLREDUCE, 4ull * 96 * 2 * 50000, 0, 0, &re);
    p.mode = DEFTSIM_SIM_APPROXIMATE;
    double ta = run1(&p, DEFTSIM_STEP_ALLREDUCE, 4ull * 96 * 2 * 50000, 0, 0, &ra);
    printf("nccl ring allreduce P=96 approximate %.9e s (%llu messages), exact %.9e s (%llu)\n", ta,
           (unsigned long long)ra.messages, te, (unsigned long long)re.messages);
    cr_expect_lt(rel(ta, te), 1e-9);
    cr_expect_lt(ra.messages, re.messages / 5);
    deftsim_sim_result_free(&re);
    deftsim_sim_result_free(&ra);
    p.nccl_algorithm = DEFTSIM_NCCL_HIERARCHICAL;
    double he = 0, ha = 0;
    ha = run1(&p, DEFTSIM_STEP_ALLREDUCE, 4ull * 96 * 2 * 50000, 0, 0, NULL);
    p.mode = DEFTSIM_SIM_EXACT;
    he = run1(&p, DEFTSIM_STEP_ALLREDUCE, 4ull * 96 * 2 * 50000, 0, 0, NULL);
    printf("nccl hierarchical P=96 approximate %.9e s, exact %.9e s\n", ha, he);
    cr_expect_lt(rel(ha, he), 1e-9);
}

/* Partial nodes (G not dividing P), tiny and empty vectors, every algorithm: each finishes
 * (no deadlock), a broadcast delivers the payload to every rank but the root, what is sent is
 * received, and a tree or ring allreduce delivers at least the vector to every rank. */
Test(sim_nccl, partial_nodes_and_tiny_sizes_finish)
{
    const uint32_t Ps[] = {13, 5, 30, 2}, Gs[] = {8, 8, 4, 8};
    const uint64_t sizes[] = {0, 4, 4 * 7, 4 * 1001, 3u << 20};
    for (size_t i = 0; i < 4; i++)
        for (int a = 0; a < DEFTSIM_NCCL_ALGO_COUNT; a++) {
            deftsim_sim_params p;
            nccl_params(&p, Ps[i], Gs[i], 3, (deftsim_nccl_algo)a);
            p.nccl_allgatherv = (deftsim_nccl_agv)(a % DEFTSIM_NCCL_AGV_COUNT);
            for (size_t si = 0; si < 5; si++) {
                uint32_t P = Ps[i];
                deftsim_schedule s[3];
                simtest_one_step(&s[0], P, DEFTSIM_STEP_ALLREDUCE, sizes[si], 0, 0);
                simtest_one_step(&s[1], P, DEFTSIM_STEP_BCAST, sizes[si], 0, P / 2);
                simtest_one_step(&s[2], P, DEFTSIM_STEP_ALLGATHER, sizes[si], 1, 0);
                deftsim_sim_result r;
                free(simtest_run(&p, s, 3, &r));
                for (int k = 0; k < 3; k++) {
                    uint64_t ts = 0, tr = 0;
                    for (uint32_t w = 0; w < P; w++) {
                        uint64_t got = r.recv[((size_t)k) * P + w];
                        ts += r.sent[((size_t)k) * P + w];
                        tr += got;
                        if (k == 1)
                            cr_expect_eq(got, w == P / 2 ? 0 : sizes[si], "P=%u G=%u %s bcast %llu: rank %u got %llu",
                                         P, Gs[i], deftsim_nccl_algo_name(p.nccl_algorithm),
                                         (unsigned long long)sizes[si], w, (unsigned long long)got);
                        if (k == 0 && a != DEFTSIM_NCCL_HIERARCHICAL)
                            cr_expect_geq(got, sizes[si] * (P - 1) / P, "allreduce rank %u", w);
                    }
                    cr_expect_eq(ts, tr, "what is sent is received");
                    deftsim_schedule_free(&s[k]);
                }
                deftsim_sim_result_free(&r);
            }
        }
}

/* Approximate mode after a broadcast (CLT-k's schedule: the leader's indices broadcast, then an
 * allreduce of the values; DGC-like: a broadcast, an allgather, an allreduce): NCCL's ring
 * broadcast leaves the ranks up to P hops apart, and the sampled ring steps must not charge
 * that skew to every skipped step (before the fix: 16 times the exact time). On the flat file
 * grouped 8 a node: within the 1.5 % docs/NETWORK.md gives for approximate mode. On a
 * generated multi-GPU platform (NVLink hops faster than the NICs' ones) the exact ring absorbs
 * part of the skew on its fast hops, which approximate mode, starting the ring from the latest
 * rank, does not: measured +2.0 % to +11 % (docs/NETWORK.md, "Approximate mode"), held to 12 %. */
/* Schedule s on p, exact and then approximate (p is left approximate): the first schedule's
 * time and the messages each simulated. */
typedef struct {
    double exact, approx;
    unsigned long long m_exact, m_approx;
} exact_approx;

static exact_approx exact_and_approx(deftsim_sim_params *p, deftsim_schedule *s)
{
    deftsim_sim_result re, ra;
    p->mode = DEFTSIM_SIM_EXACT;
    double *te = simtest_run(p, s, 1, &re);
    p->mode = DEFTSIM_SIM_APPROXIMATE;
    double *ta = simtest_run(p, s, 1, &ra);
    exact_approx x = {te[0], ta[0], (unsigned long long)re.messages, (unsigned long long)ra.messages};
    free(te);
    free(ta);
    deftsim_sim_result_free(&re);
    deftsim_sim_result_free(&ra);
    return x;
}

/* The generated multi-GPU platform (default NVLink and NIC links) instead of the flat file. */
static void generated_nodes(deftsim_sim_params *p)
{
    p->topology = DEFTSIM_TOPO_FLAT;
    p->platform_file = NULL;
}

static void bcast_then(deftsim_schedule *s, uint32_t P, uint64_t size, int with_allgather)
{
    deftsim_schedule_init(s, P);
    deftsim_step *b = deftsim_schedule_add(s, DEFTSIM_STEP_BCAST, "bcast");
    cr_assert(b);
    b->root = 0;
    b->bytes[0] = size;
    if (with_allgather) {
        deftsim_step *g = deftsim_schedule_add(s, DEFTSIM_STEP_ALLGATHER, "allgather");
        cr_assert(g);
        for (uint32_t r = 0; r < P; r++) g->bytes[r] = size / 8;
    }
    deftsim_step *a = deftsim_schedule_add(s, DEFTSIM_STEP_ALLREDUCE, "allreduce");
    cr_assert(a);
    for (uint32_t r = 0; r < P; r++) a->bytes[r] = size;
}

Test(sim_nccl, approximate_after_a_broadcast)
{
    const uint32_t P = 64;
    const uint64_t sizes[] = {4u * 50000, 4u * 1000000};
    for (int generated = 0; generated < 2; generated++)
        for (int ag = 0; ag < 4; ag++) {
            uint64_t size = sizes[ag / 2];
            deftsim_sim_params p;
            nccl_params(&p, P, 8, 2, DEFTSIM_NCCL_RING);
            if (generated) generated_nodes(&p);
            deftsim_schedule s;
            bcast_then(&s, P, size, ag % 2);
            exact_approx x = exact_and_approx(&p, &s);
            printf("nccl P=%u %s %llu B bcast%s + ring allreduce: approximate %.9e s (%llu "
                   "messages), exact %.9e s (%llu), %+.3e\n",
                   P, generated ? "generated 8-GPU nodes" : "flat file", (unsigned long long)size,
                   ag % 2 ? " + allgather" : "", x.approx, x.m_approx, x.exact, x.m_exact,
                   (x.approx - x.exact) / x.exact);
            /* generated nodes: 13.5 % at 200 kB with the allgather since GPUs reach their NICs
             * over PCIe (sim_nodes.c), 6.6 % without it */
            cr_expect_lt(rel(x.approx, x.exact), generated ? 0.15 : 1.5e-2, "approximate %.9e, exact %.9e",
                         x.approx, x.exact);
            cr_expect_lt(x.m_approx, x.m_exact);
            deftsim_schedule_free(&s);
        }
}

/* A vector shorter than the channels (MiCRO's and ExDyna's one count per rank on 2 channels):
 * the empty channel takes no part, every loop has the same channels at work, and approximate
 * mode samples the ring, within 1e-4 of the exact ring, on far fewer messages. */
Test(sim_nccl, approximate_with_an_empty_channel)
{
    const uint32_t P = 64;
    for (int generated = 0; generated < 2; generated++)
        for (uint32_t elems = 1; elems <= 3; elems += 2) {
            deftsim_sim_params p;
            nccl_params(&p, P, 8, elems == 1 ? 2 : 4, DEFTSIM_NCCL_RING);
            if (generated) generated_nodes(&p);
            deftsim_schedule s;
            deftsim_schedule_init(&s, P);
            deftsim_step *g = deftsim_schedule_add(&s, DEFTSIM_STEP_ALLGATHER, "counts");
            cr_assert(g);
            for (uint32_t r = 0; r < P; r++) g->bytes[r] = 4 * elems;
            exact_approx x = exact_and_approx(&p, &s);
            printf("nccl P=%u %s, allgather of %u elements on %u channels: approximate %.9e s "
                   "(%llu messages), exact %.9e s (%llu)\n",
                   P, generated ? "generated 8-GPU nodes" : "flat file", elems, p.nccl_channels,
                   x.approx, x.m_approx, x.exact, x.m_exact);
            cr_expect_lt(rel(x.approx, x.exact), 1e-4, "approximate %.9e, exact %.9e", x.approx, x.exact);
            cr_expect_lt(x.m_approx * 4, x.m_exact);
            deftsim_schedule_free(&s);
        }
}

/* NCCL's p2p order (src/init.cc, ncclP2pSchedule): one rank a group (G = 1 across nodes)
 * follows the quadratic sequence NCCL's comment gives for 16 ranks; in every shape, each
 * rank's rounds send to every other rank once and receive from every other once, the
 * receiver of round i hears from the sender in its own round i, and every rank has the same
 * waves. */
Test(sim_nccl, p2p_schedule_is_nccls)
{
    static const uint32_t seq16[16] = {0, 1, 3, 6, 10, 15, 5, 12, 4, 13, 7, 2, 14, 11, 9, 8};
    uint32_t send[1024], recv[1024], wave[1024], s2[1024], r2[1024], w2[1024];
    for (uint32_t r = 0; r < 16; r++) {
        sim_nccl_p2p_schedule(16, 1, 2, r, send, recv, wave);
        for (uint32_t i = 0; i < 16; i++) {
            cr_expect_eq(send[i], (r + seq16[i]) % 16, "rank %u round %u", r, i);
            cr_expect_eq(recv[i], (r + 16 - seq16[i]) % 16, "rank %u round %u", r, i);
        }
    }
    /* P, G, p2p channels, the waves wanted */
    static const uint32_t shapes[][4] = {{16, 8, 2, 1},   {64, 8, 2, 4},  {1024, 8, 2, 64},
                                         {8, 8, 2, 1},    {64, 8, 16, 1}, {20, 8, 2, 0},
                                         {24, 4, 4, 0},   {12, 3, 1, 0},  {256, 8, 32, 1},
                                         {1000, 8, 4, 0}};
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        uint32_t P = shapes[k][0], G = shapes[k][1], Cp = shapes[k][2];
        uint32_t waves0 = sim_nccl_p2p_schedule(P, G, Cp, 0, s2, r2, w2);
        if (shapes[k][3]) cr_expect_eq(waves0, shapes[k][3], "P=%u G=%u: %u waves", P, G, waves0);
        for (uint32_t r = 0; r < P; r++) {
            uint32_t waves = sim_nccl_p2p_schedule(P, G, Cp, r, send, recv, wave);
            cr_expect_eq(waves, waves0);
            cr_expect_eq(send[0], r);
            cr_expect_eq(recv[0], r);
            uint8_t seen_s[1024] = {0}, seen_r[1024] = {0};
            for (uint32_t i = 1; i < P; i++) {
                cr_expect_eq(wave[i], w2[i], "P=%u rank %u round %u: wave %u, rank 0's %u", P, r, i,
                             wave[i], w2[i]);
                cr_expect_lt(wave[i], waves);
                seen_s[send[i]]++;
                seen_r[recv[i]]++;
            }
            for (uint32_t q = 0; q < P; q++) {
                cr_expect_eq(seen_s[q], q != r, "P=%u G=%u rank %u sends to %u %u times", P, G, r, q, seen_s[q]);
                cr_expect_eq(seen_r[q], q != r, "P=%u G=%u rank %u hears %u %u times", P, G, r, q, seen_r[q]);
            }
        }
        /* Round i of rank r sends to d; d's round i receives from r. */
        for (uint32_t r = 0; r < P; r += 7) {
            sim_nccl_p2p_schedule(P, G, Cp, r, send, recv, wave);
            for (uint32_t i = 1; i < P; i += 3) {
                sim_nccl_p2p_schedule(P, G, Cp, send[i], s2, r2, w2);
                cr_expect_eq(r2[i], r, "P=%u: rank %u round %u sends to %u, which hears %u", P, r, i,
                             send[i], r2[i]);
            }
        }
    }
}

/* An alltoall on 8 nodes of 8 (P = 64) over 2 p2p channels runs in 4 waves (batches of 8
 * rounds, one node apart, alternate channels): wave 0 sends to 15 ranks at once (round 0 is
 * the rank itself), the others to 16, each wave 2 L + k (b + 16) / B on the flat file. */
Test(sim_nccl, alltoall_runs_in_nccls_waves)
{
    deftsim_sim_params p;
    nccl_params(&p, 64, 8, 2, DEFTSIM_NCCL_RING);
    deftsim_sim_result r;
    double a = run1(&p, DEFTSIM_STEP_ALLTOALL, 65536, 0, 0, &r);
    double f = t_k(&p, 15, 65536) + 3 * t_k(&p, 16, 65536);
    printf("nccl alltoall P=64 (8 nodes of 8, 2 channels) 64 KiB: %.9e s, formula %.9e s, %llu messages\n",
           a, f, (unsigned long long)r.messages);
    cr_expect_lt(rel(a, f), 1e-6, "%.12e vs %.12e", a, f);
    cr_expect_eq(r.messages, 64u * 63u);
    deftsim_sim_result_free(&r);
}

/* Ok-Topk's counts alltoall and split and reduce: rounds of 4 peers (w + i for i in the
 * round's 4 offsets), two messages to each. In approximate mode a run of such like rounds
 * samples 6 of them (sim_approx_seq_sampled), and an alltoall of equal blocks 6 of its waves
 * (at P = 128: 16 waves). Against the exact simulation at P = 64 and 128 (P = 256 gave the
 * same agreement, too slowly for this suite under the sanitizers): on the flat file grouped 8
 * a node equal to rounding; on generated 8-GPU nodes (default NVLink and NIC links) within
 * 8 % (a round that mixes peers inside and outside the node, sampled among the first three,
 * is slower than the rounds between nodes only, and sets the pace). */
static void reduce_rounds(deftsim_schedule *s, uint32_t P, uint64_t ib, uint64_t vb)
{
    deftsim_schedule_init(s, P);
    deftsim_step *ac = deftsim_schedule_add(s, DEFTSIM_STEP_ALLTOALL, "counts");
    cr_assert(ac);
    for (uint32_t w = 0; w < P; w++) ac->bytes[w] = 4;
    for (uint32_t first = 0; first < P; first += 4) {
        deftsim_step *rs = deftsim_schedule_add_p2p(s, "reduce", 8);
        cr_assert(rs);
        for (uint32_t w = 0; w < P; w++)
            for (uint32_t i = first; i < first + 4 && i < P; i++) {
                if (i == 0) continue;
                size_t at = (size_t)w * 8 + 2 * (i - first);
                rs->peer[at] = rs->peer[at + 1] = (w + i) % P;
                rs->bytes[at] = ib;
                rs->bytes[at + 1] = vb;
            }
    }
}

Test(sim_nccl, approximate_groups_and_like_rounds)
{
    const uint32_t Ps[] = {64, 128};
    for (int generated = 0; generated < 2; generated++)
        for (int k = 0; k < 2; k++)
            for (int big = 0; big < 2; big++) {
                uint32_t P = Ps[k];
                deftsim_sim_params p;
                nccl_params(&p, P, 8, 2, DEFTSIM_NCCL_RING);
                if (generated) generated_nodes(&p);
                deftsim_schedule s;
                uint64_t b = big ? 4u * 2000 : 4u * 20;
                reduce_rounds(&s, P, b, b);
                exact_approx x = exact_and_approx(&p, &s);
                printf("nccl P=%u %s, alltoall + %u like rounds of %llu B: approximate %.9e s "
                       "(%llu messages), exact %.9e s (%llu), %+.3e\n",
                       P, generated ? "generated 8-GPU nodes" : "flat file", P / 4,
                       (unsigned long long)b, x.approx, x.m_approx, x.exact, x.m_exact,
                       (x.approx - x.exact) / x.exact);
                cr_expect_lt(rel(x.approx, x.exact), generated ? 0.08 : 1e-9, "approximate %.9e, exact %.9e",
                             x.approx, x.exact);
                cr_expect_lt(x.m_approx, x.m_exact * (k ? 0.5 : 0.6));
                deftsim_schedule_free(&s);
            }
}

/* H100-like nodes under the tuned model: 8 GPUs on an NVSwitch (450 GB/s a GPU), a 400 Gb/s NIC
 * each, 16 channels, NCCL's Hopper constants, the links' full speed. */
static void hopper_nodes(deftsim_sim_params *p, uint32_t P)
{
    simtest_params(p, P);
    generated_nodes(p);
    p->library = DEFTSIM_LIB_NCCL;
    p->gpus_per_node = 8;
    p->intra_fabric = DEFTSIM_INTRA_NVSWITCH;
    p->intra_bandwidth = 450e9;
    p->intra_latency = 1e-9;
    p->latency = 1e-9;
    p->nics_per_node = 8;
    p->nic_bandwidth = 50e9;
    p->bandwidth = 50e9;
    p->nccl_channels = 16;
    p->nccl_model = DEFTSIM_NCCL_MODEL_TUNED;
    p->nccl_arch = DEFTSIM_NCCL_ARCH_HOPPER;
    p->nccl_algorithm = DEFTSIM_NCCL_AUTO;
}

/* One H100-like GPU a host under the tuned model: a 400 Gb/s link each, 16 channels. */
static void hopper_hosts(deftsim_sim_params *p, uint32_t P)
{
    simtest_params(p, P);
    p->library = DEFTSIM_LIB_NCCL;
    p->bandwidth = 50e9;
    p->latency = 1e-9;
    p->nccl_channels = 16;
    p->nccl_model = DEFTSIM_NCCL_MODEL_TUNED;
    p->nccl_arch = DEFTSIM_NCCL_ARCH_HOPPER;
}

/* Approximate mode's folded trees and rings and sampled waves on H100-like nodes (8 GPUs, 16
 * channels): NCCL's tree allreduce runs the trees of channels c and c + 8, which have the same
 * links, as one with their bytes, and the ring allreduce and allgather their rings likewise;
 * an alltoall of equal blocks runs about 16 rounds of each wave, with the bytes of the rounds
 * each stands for, those leaving the node apart from those inside it. Against the exact
 * simulation at P = 64, 128 and 80 (10 nodes: waves of 79 rounds, 16 run): measured equal to
 * rounding (4e-15) but for the 4-byte alltoall at P = 80 (1.3e-5; docs/NETWORK.md,
 * "Approximate mode"), held to 1e-4, on fewer messages. Each send carries the
 * envelopes of the sends it stands for: without them a 4-byte alltoall at P = 128 was 34 ns
 * (0.36 %) short. A wave sampled without telling the rounds that leave the node from those
 * inside it gave the 10-node alltoall of the corpus 5 % too fast. */
Test(sim_nccl, approximate_folds_and_samples)
{
    static const char *what_name[] = {"tree allreduce of 4 MiB", "alltoall of 4 B", "alltoall of 1 MiB",
                                      "ring allreduce of 4 MiB", "ring allgather of 64 KiB a rank"};
    const uint32_t Ps[] = {64, 128, 80};
    for (int i = 0; i < 3; i++)
        for (int what = 0; what < 5; what++) {
            uint32_t P = Ps[i];
            deftsim_sim_params p;
            hopper_nodes(&p, P);
            p.nccl_algorithm = what == 0 ? DEFTSIM_NCCL_TREE : DEFTSIM_NCCL_RING;
            deftsim_schedule s;
            deftsim_schedule_init(&s, P);
            deftsim_step_kind kind = what == 0 || what == 3 ? DEFTSIM_STEP_ALLREDUCE
                                     : what == 4            ? DEFTSIM_STEP_ALLGATHER
                                                            : DEFTSIM_STEP_ALLTOALL;
            deftsim_step *st = deftsim_schedule_add(&s, kind, "step");
            cr_assert(st);
            uint64_t b = what == 0 || what == 3 ? 4u << 20 : what == 1 ? 4u : what == 2 ? 1u << 20 : 65536u;
            for (uint32_t r = 0; r < P; r++) st->bytes[r] = b;
            exact_approx x = exact_and_approx(&p, &s);
            printf("nccl P=%u hopper nodes, %s: approximate %.9e s (%llu messages), exact %.9e s (%llu), "
                   "%+.3e\n",
                   P, what_name[what], x.approx, x.m_approx, x.exact, x.m_exact, (x.approx - x.exact) / x.exact);
            cr_expect_lt(rel(x.approx, x.exact), 1e-4, "P=%u %s: approximate %.9e, exact %.9e", P,
                         what_name[what], x.approx, x.exact);
            cr_expect_lt(x.m_approx, x.m_exact * (what == 1 || what == 2 ? 0.4 : 0.6),
                         "P=%u %s: %llu messages against %llu", P, what_name[what], x.m_approx, x.m_exact);
            deftsim_schedule_free(&s);
        }
}

/* Where SimGrid's TCP window bound holds a flow (4 MiB / (2 x route latency x 13.01) under
 * LV08: 0.8 GB/s on 200 us links, against 50 GB/s links), one flow of f times the bytes takes f
 * times as long as f flows: approximate mode then does not fold. One GPU a host, 4 channels,
 * a ring allreduce of 4 MiB at P = 16: folded it was 0.74 % slow (1.576667693e-01 against
 * 1.565066923e-01 s; bench sim's dense at P = 16 on such links 7.7 %, 0.1726 against 0.1602 s);
 * unfolded it is the sampled ring's time, equal to the exact. */
Test(sim_nccl, approximate_does_not_fold_window_bound_flows)
{
    deftsim_sim_params p;
    nccl_params(&p, 16, 1, 4, DEFTSIM_NCCL_RING);
    p.model = DEFTSIM_NET_LV08;
    p.bandwidth = 50e9;
    p.latency = 200e-6;
    deftsim_schedule s;
    deftsim_schedule_init(&s, 16);
    deftsim_step *st = deftsim_schedule_add(&s, DEFTSIM_STEP_ALLREDUCE, "values");
    cr_assert(st);
    for (uint32_t r = 0; r < 16; r++) st->bytes[r] = 4u << 20;
    exact_approx x = exact_and_approx(&p, &s);
    printf("nccl P=16 LV08 200 us links, ring allreduce of 4 MiB on 4 channels: approximate %.9e s "
           "(%llu messages), exact %.9e s (%llu)\n",
           x.approx, x.m_approx, x.exact, x.m_exact);
    cr_expect_lt(rel(x.approx, x.exact), 1e-9, "approximate %.9e, exact %.9e", x.approx, x.exact);
    deftsim_schedule_free(&s);
}

/* NCCL's NVLSTree: chosen for a large allreduce across whole NVSwitch nodes (NVLS in one
 * node, the ring or tree without NVSwitch). On two nodes each GPU's NIC carries its 1/8 share
 * of the vector once each way (S / 8 over a NIC, where the ring sends 2 (P - 1) / P S / 8), and
 * its NVSwitch port NVLS's S (G + 1) / G at NVLS's efficiency: the call takes the longer of the
 * two, the trees' pipeline fill beside. */
Test(sim_nccl, nvls_tree_across_nvswitch_nodes)
{
    deftsim_sim_params p;
    sim_nccl_call k;
    const uint64_t S = 1ull << 30;
    hopper_nodes(&p, 16);
    sim_nccl_plan_call(&p, SIM_NCCL_ALLREDUCE, S, &k);
    cr_expect_eq(k.algo, DEFTSIM_NCCL_NVLS_TREE, "2 nodes, 1 GiB: %d", (int)k.algo);
    hopper_nodes(&p, 8);
    sim_nccl_plan_call(&p, SIM_NCCL_ALLREDUCE, S, &k);
    cr_expect_eq(k.algo, DEFTSIM_NCCL_NVLS, "1 node: NVLS");
    hopper_nodes(&p, 12); /* a partial node: NCCL has no NVLS-tree */
    sim_nccl_plan_call(&p, SIM_NCCL_ALLREDUCE, S, &k);
    cr_expect_neq(k.algo, DEFTSIM_NCCL_NVLS_TREE, "partial node");
    hopper_nodes(&p, 16);
    p.intra_fabric = DEFTSIM_INTRA_NVLINK_MESH;
    sim_nccl_plan_call(&p, SIM_NCCL_ALLREDUCE, S, &k);
    cr_expect_neq(k.algo, DEFTSIM_NCCL_NVLS_TREE, "no NVSwitch");

    hopper_nodes(&p, 16);
    double nvt = run1(&p, DEFTSIM_STEP_ALLREDUCE, S, 0, 0, NULL);
    double net = (double)S / 8 / p.nic_bandwidth;
    double node = (double)S * 9 / 8 / (p.intra_bandwidth * 0.85);
    double bound = net > node ? net : node;
    cr_expect(nvt > bound && nvt < 1.1 * bound,
              "NVLS-tree %.6f s against the NIC's %.6f s and the NVSwitch port's %.6f s", nvt, net, node);
    p.nccl_algorithm = DEFTSIM_NCCL_RING;
    double ring = run1(&p, DEFTSIM_STEP_ALLREDUCE, S, 0, 0, NULL);
    cr_expect(ring > 1.5 * nvt && ring > 1.875 * net, "the ring %.6f s, NVLS-tree %.6f s", ring, nvt);
    /* forced on a platform without it: the ring, with Simple (as a forced pair that cannot run
     * falls back) */
    p.intra_fabric = DEFTSIM_INTRA_NVLINK_MESH;
    p.nccl_proto = DEFTSIM_NCCL_PROTO_SIMPLE;
    p.nccl_algorithm = DEFTSIM_NCCL_NVLS_TREE;
    double forced = run1(&p, DEFTSIM_STEP_ALLREDUCE, 1u << 20, 0, 0, NULL);
    p.nccl_algorithm = DEFTSIM_NCCL_RING;
    cr_expect_eq(forced, run1(&p, DEFTSIM_STEP_ALLREDUCE, 1u << 20, 0, 0, NULL));
}

/* A thread that launches a call on G GPUs is busy nccl_launch + (G - 1) nccl_launch_gpu a call
 * (nccl-tests' -g): calls back to back overlap those launches with the previous call's run, so
 * they are the call's floor. A small call takes the floor; a large one, whose run is longer,
 * takes what it takes with one GPU a thread. (Until 2026-12-06 the launches were added to
 * every call: the large one took 7 nccl_launch_gpu longer.) */
Test(sim_nccl, launches_of_a_thread_are_the_calls_floor)
{
    deftsim_sim_params p;
    hopper_nodes(&p, 8);
    p.nccl_launch = 10e-6;
    p.nccl_launch_gpu = 20e-6;
    double small1 = run1(&p, DEFTSIM_STEP_ALLREDUCE, 1024, 0, 0, NULL);
    double large1 = run1(&p, DEFTSIM_STEP_ALLREDUCE, 1u << 30, 0, 0, NULL);
    p.nccl_gpus_per_thread = 8;
    double small8 = run1(&p, DEFTSIM_STEP_ALLREDUCE, 1024, 0, 0, NULL);
    double large8 = run1(&p, DEFTSIM_STEP_ALLREDUCE, 1u << 30, 0, 0, NULL);
    cr_expect(small1 < 10e-6 + 7 * 20e-6, "one GPU a thread, 1 KiB: %.9f s", small1);
    cr_expect(fabs(small8 - (10e-6 + 7 * 20e-6)) < 1e-9, "8 GPUs a thread, 1 KiB: %.9f s", small8);
    cr_expect(large1 > 10e-6 + 7 * 20e-6, "1 GiB runs longer than the floor: %.9f s", large1);
    cr_expect(fabs(large8 - large1) < 1e-9, "1 GiB: 8 GPUs a thread %.9f s, 1: %.9f s", large8, large1);
}

/* The ring's latency is NCCL's sum over its steps: with one channel across 2 nodes of 4, a
 * 4-byte allreduce (6 steps in a node, 2 across at the network's figure of 14 steps) takes
 * launch + base + 12 intra + 2 net step latencies, not 14 steps at the network's (the pace
 * of the two ranks whose hop leaves the node). */
Test(sim_nccl, ring_latency_is_nccls_sum_over_steps)
{
    deftsim_sim_params p;
    hopper_nodes(&p, 8);
    p.gpus_per_node = 4;
    p.nics_per_node = 4;
    p.nccl_channels = 1;
    p.nccl_algorithm = DEFTSIM_NCCL_RING;
    p.nccl_proto = DEFTSIM_NCCL_PROTO_LL;
    sim_nccl_call k;
    sim_nccl_plan_call(&p, SIM_NCCL_ALLREDUCE, 4, &k);
    cr_expect(fabs(k.net_share - 2.0 / 14.0) < 1e-12, "net share %.6f", k.net_share);
    double t = run1(&p, DEFTSIM_STEP_ALLREDUCE, 4, 0, 0, NULL);
    double want = k.base + 12 * k.lat_intra + 2 * k.lat_net;
    cr_expect(rel(t, want) < 0.02, "ring of 8 on 2 nodes, 4 B: %.3f us, NCCL's sum %.3f us", t * 1e6,
              want * 1e6);
    cr_expect(t < k.base + 14 * k.lat_net * 0.5, "%.3f us: not 14 network steps", t * 1e6);
}

/* A hop's step latency lies on the chunk's path: a one-chunk tree allreduce climbs and
 * descends the nodes' tree one level a round, and a round whose receive crossed nodes costs
 * the network's step latency even where the rank sends nothing in it. From 2 to 32 nodes the
 * tree is 4 levels deeper each way, so the call grows by about 8 network steps (NCCL's own
 * latency model: 2 log2(N) of them); before, the receiving rank paid the node's figure and the
 * call grew by about 1 network step. The network's step scale (nccl_net_step_scale) scales
 * that growth alone. */
Test(sim_nccl, tree_latency_lies_on_the_path)
{
    double t[2], lat_net = 0, lat_net2 = 0;
    const uint32_t nodes[2] = {2, 32};
    for (int i = 0; i < 2; i++) {
        deftsim_sim_params p;
        hopper_nodes(&p, 4 * nodes[i]);
        p.gpus_per_node = 4;
        p.nics_per_node = 4;
        p.nccl_channels = 1;
        p.nccl_algorithm = DEFTSIM_NCCL_TREE;
        p.nccl_proto = DEFTSIM_NCCL_PROTO_LL;
        sim_nccl_call k;
        sim_nccl_plan_call(&p, SIM_NCCL_ALLREDUCE, 4, &k);
        lat_net = k.lat_net;
        t[i] = run1(&p, DEFTSIM_STEP_ALLREDUCE, 4, 0, 0, NULL);
        if (i == 1) {
            p.nccl_net_step_scale = 2; /* the node's steps keep nccl_step_scale = 1 */
            sim_nccl_plan_call(&p, SIM_NCCL_ALLREDUCE, 4, &k);
            lat_net2 = k.lat_net;
            cr_expect(fabs(lat_net2 - 2 * lat_net) < 1e-15, "net step %.3f us, want %.3f us",
                      lat_net2 * 1e6, 2 * lat_net * 1e6);
            double t2 = run1(&p, DEFTSIM_STEP_ALLREDUCE, 4, 0, 0, NULL);
            cr_expect(rel(t2 - t[1], 8 * lat_net) < 0.25,
                      "doubling the network's steps added %.3f us, 8 of them %.3f us",
                      (t2 - t[1]) * 1e6, 8 * lat_net * 1e6);
        }
    }
    cr_expect(rel(t[1] - t[0], 8 * lat_net) < 0.25,
              "4 B tree allreduce: %.3f us on 2 nodes, %.3f us on 32; grew %.3f us, 8 network "
              "steps %.3f us",
              t[0] * 1e6, t[1] * 1e6, (t[1] - t[0]) * 1e6, 8 * lat_net * 1e6);
}

/* nccl_tuning = 2.8: NCCL 2.8.4's figures. On one Ampere node LL runs at a quarter of the bus
 * (2.30: half), so its predicted time at 1 MiB is longer; NVLS does not exist; LL128 is off on
 * Hopper; the LL base latency is 3.6 us (2.30: 6.6 us). */
Test(sim_nccl, tuning_of_nccl_2_8)
{
    deftsim_sim_params p;
    sim_nccl_call k30, k28;
    hopper_nodes(&p, 8);
    p.nccl_arch = DEFTSIM_NCCL_ARCH_AMPERE;
    p.intra_bandwidth = 300e9;
    p.nccl_proto = DEFTSIM_NCCL_PROTO_LL;
    p.nccl_algorithm = DEFTSIM_NCCL_RING;
    sim_nccl_plan_call(&p, SIM_NCCL_ALLREDUCE, 1u << 20, &k30);
    p.nccl_tuning = DEFTSIM_NCCL_TUNING_2_8;
    sim_nccl_plan_call(&p, SIM_NCCL_ALLREDUCE, 1u << 20, &k28);
    cr_expect(k28.predict_us > k30.predict_us, "LL at 1 MiB: 2.8 %.2f us, 2.30 %.2f us", k28.predict_us,
              k30.predict_us);
    cr_expect(fabs(k30.base - k28.base - 3.0e-6) < 1e-12, "base latency: 2.30 %.2f us, 2.8 %.2f us",
              k30.base * 1e6, k28.base * 1e6);
    hopper_nodes(&p, 8);
    p.nccl_tuning = DEFTSIM_NCCL_TUNING_2_8;
    sim_nccl_plan_call(&p, SIM_NCCL_ALLREDUCE, 1ull << 30, &k28);
    cr_expect_neq(k28.algo, DEFTSIM_NCCL_NVLS, "no NVLS in 2.8");
    p.nccl_proto = DEFTSIM_NCCL_PROTO_LL128;
    p.nccl_algorithm = DEFTSIM_NCCL_RING;
    sim_nccl_plan_call(&p, SIM_NCCL_ALLREDUCE, 1u << 20, &k28);
    cr_expect_eq(k28.proto, DEFTSIM_NCCL_PROTO_LL128, "a forced LL128 falls back to the ring with it");
    p.nccl_proto = DEFTSIM_NCCL_PROTO_AUTO;
    for (uint64_t b = 1; b <= (1ull << 30); b <<= 2) {
        sim_nccl_plan_call(&p, SIM_NCCL_ALLREDUCE, b, &k28);
        cr_expect_neq(k28.proto, DEFTSIM_NCCL_PROTO_LL128, "2.8 on Hopper chose LL128 at %llu B",
                      (unsigned long long)b);
    }
}

/* nccl_ll_efficiency slows LL's transfers (bytes on the wire / efficiency), not NCCL's choice;
 * Simple calls are untouched. */
Test(sim_nccl, protocol_efficiency_slows_its_transfers_only)
{
    deftsim_sim_params p;
    sim_nccl_call a, b;
    hopper_nodes(&p, 8);
    p.nccl_algorithm = DEFTSIM_NCCL_RING;
    p.nccl_proto = DEFTSIM_NCCL_PROTO_LL;
    sim_nccl_plan_call(&p, SIM_NCCL_ALLREDUCE, 1u << 20, &a);
    double t1 = run1(&p, DEFTSIM_STEP_ALLREDUCE, 1u << 20, 0, 0, NULL);
    p.nccl_ll_efficiency = 0.5;
    sim_nccl_plan_call(&p, SIM_NCCL_ALLREDUCE, 1u << 20, &b);
    double t2 = run1(&p, DEFTSIM_STEP_ALLREDUCE, 1u << 20, 0, 0, NULL);
    cr_expect(fabs(b.eff_intra - 0.5 * a.eff_intra) < 1e-12 && b.predict_us == a.predict_us,
              "efficiency %.3f -> %.3f, prediction %.3f -> %.3f", a.eff_intra, b.eff_intra,
              a.predict_us, b.predict_us);
    cr_expect(t2 > t1, "LL at half its efficiency: %.3f us, at full %.3f us", t2 * 1e6, t1 * 1e6);
    p.nccl_proto = DEFTSIM_NCCL_PROTO_SIMPLE;
    double s2 = run1(&p, DEFTSIM_STEP_ALLREDUCE, 1u << 20, 0, 0, NULL);
    p.nccl_ll_efficiency = 1;
    cr_expect_eq(s2, run1(&p, DEFTSIM_STEP_ALLREDUCE, 1u << 20, 0, 0, NULL), "Simple unchanged");
}

/* The tree's chunk as NCCL sizes it: with LL128 on 16 nodes of 8 and 16 channels a 4 MiB call
 * runs 32 KiB chunks (n = 5.8: 4 MiB / (16 x 512 KiB) = 0 < 46.4, halved to 128 KiB; 2 < 11.6,
 * halved to 32 KiB), a 1 GiB call NCCL's 512 KiB step (128 >= 46.4); Simple keeps the step
 * under 2.30's figures and shrinks by the tree's depth (11) under 2.8's. */
Test(sim_nccl, tree_chunks_as_nccl_sizes_them)
{
    deftsim_sim_params p;
    sim_nccl_call k;
    hopper_nodes(&p, 128);
    memset(&k, 0, sizeof k);
    k.channels = 16;
    k.proto = DEFTSIM_NCCL_PROTO_LL128;
    cr_expect_eq(sim_nccl_tree_chunk(&p, &k, 4u << 20), 32768u);
    cr_expect_eq(sim_nccl_tree_chunk(&p, &k, 1ull << 30), 524288u);
    k.proto = DEFTSIM_NCCL_PROTO_SIMPLE;
    cr_expect_eq(sim_nccl_tree_chunk(&p, &k, 4u << 20), 524288u, "2.30: Simple keeps the step");
    p.nccl_tuning = DEFTSIM_NCCL_TUNING_2_8;
    cr_expect_eq(sim_nccl_tree_chunk(&p, &k, 4u << 20), 32768u, "2.8: 4 MiB / (16 x 32 KiB) = 8 < 11");
    cr_expect_eq(sim_nccl_tree_chunk(&p, &k, 64u << 20), 65536u, "2.8, 64 MiB: 128 KiB (8 < 88), then 32 < 44 at 128 KiB: 64 KiB");
}

/* A p2p group (alltoall) does not go through the tuning model: each peer's send runs LL up to
 * NCCL's P2P_LL_THRESHOLD (16 KiB) and Simple above it, never LL128, on one node and across
 * nodes; NCCL 2.8 runs Simple only. Before, the tuner picked LL128 for a 1 MiB send. */
Test(sim_nccl, p2p_protocol_as_nccl_sends)
{
    deftsim_sim_params p;
    sim_nccl_call k;
    for (uint32_t nodes = 1; nodes <= 10; nodes += 9) {
        hopper_nodes(&p, 8 * nodes);
        sim_nccl_plan_call(&p, SIM_NCCL_P2P, 16384, &k);
        cr_expect_eq(k.proto, DEFTSIM_NCCL_PROTO_LL, "%u nodes: 16 KiB a peer runs LL", nodes);
        for (uint64_t b = 16385; b <= (1ull << 30); b <<= 2) {
            sim_nccl_plan_call(&p, SIM_NCCL_P2P, b, &k);
            cr_expect_eq(k.proto, DEFTSIM_NCCL_PROTO_SIMPLE, "%u nodes: %llu B a peer runs Simple",
                         nodes, (unsigned long long)b);
        }
        p.nccl_tuning = DEFTSIM_NCCL_TUNING_2_8;
        sim_nccl_plan_call(&p, SIM_NCCL_P2P, 64, &k);
        cr_expect_eq(k.proto, DEFTSIM_NCCL_PROTO_SIMPLE, "%u nodes: NCCL 2.8 sends Simple", nodes);
    }
}

/* NVLS's chunk steps: on one node of 8 with 16 channels (128 concurrent operations, every GPU
 * a head), NCCL's chunk is 16 KiB at 4 MiB (2 steps), 32 KiB at 16 MiB (4 steps), 64 KiB at
 * 512 MiB (64 steps) and 128 KiB at 1 GiB (64 steps); each step adds nccl_nvls_step to the
 * call, and nothing else moves (the choice, the ring). */
Test(sim_nccl, nvls_chunk_steps_as_nccl_sizes_them)
{
    static const struct {
        uint64_t bytes;
        double steps;
    } cases[] = {{4u << 20, 2}, {16u << 20, 4}, {512u << 20, 64}, {1ull << 30, 64}, {(1ull << 30) - 4, 128}};
    deftsim_sim_params p;
    sim_nccl_call a, b;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        hopper_nodes(&p, 8);
        p.nccl_algorithm = DEFTSIM_NCCL_NVLS;
        sim_nccl_plan_call(&p, SIM_NCCL_ALLREDUCE, cases[i].bytes, &a);
        p.nccl_nvls_step = 10e-6;
        sim_nccl_plan_call(&p, SIM_NCCL_ALLREDUCE, cases[i].bytes, &b);
        cr_assert_eq(b.algo, DEFTSIM_NCCL_NVLS);
        cr_expect(fabs(b.base - a.base - cases[i].steps * 10e-6) < 1e-12, "%llu B: %.3f us more, want %g steps",
                  (unsigned long long)cases[i].bytes, (b.base - a.base) * 1e6, cases[i].steps);
        cr_expect(b.predict_us == a.predict_us && b.channels == a.channels, "the choice stands");
    }
    hopper_nodes(&p, 8);
    p.nccl_algorithm = DEFTSIM_NCCL_NVLS;
    double t0 = run1(&p, DEFTSIM_STEP_ALLREDUCE, 16u << 20, 0, 0, NULL);
    p.nccl_nvls_step = 10e-6;
    double t1 = run1(&p, DEFTSIM_STEP_ALLREDUCE, 16u << 20, 0, 0, NULL);
    cr_expect(fabs(t1 - t0 - 40e-6) < 0.5e-6, "16 MiB: %.3f us, without the steps %.3f us", t1 * 1e6, t0 * 1e6);
    p.nccl_algorithm = DEFTSIM_NCCL_RING;
    double r1 = run1(&p, DEFTSIM_STEP_ALLREDUCE, 16u << 20, 0, 0, NULL);
    p.nccl_nvls_step = 0;
    cr_expect_eq(r1, run1(&p, DEFTSIM_STEP_ALLREDUCE, 16u << 20, 0, 0, NULL), "the ring unchanged");
}

/* nccl_p2p_net_efficiency: grouped sends and receives (an alltoall) cross the network at their
 * own fraction of the NIC, every other collective keeps nccl_net_efficiency's; -1 follows
 * nccl_net_efficiency. An alltoall of 64 MiB to each peer on 2 nodes of 8 sends 8 of a rank's
 * 15 blocks across the nodes, so the network sets its time: at 0.9 against the network's
 * 0.45, the call takes about half as long. */
Test(sim_nccl, grouped_sends_have_their_own_network_efficiency)
{
    deftsim_sim_params p;
    hopper_nodes(&p, 16);
    p.nccl_net_efficiency = 0.45;
    sim_nccl_call k;
    sim_nccl_plan_call(&p, SIM_NCCL_P2P, 1 << 20, &k);
    cr_expect(fabs(k.eff_net - 0.45) < 1e-12, "p2p at -1: eff_net %.3f, want the network's 0.45",
              k.eff_net);
    double slow = run1(&p, DEFTSIM_STEP_ALLTOALL, 64u << 20, 0, 0, NULL);
    double ar = run1(&p, DEFTSIM_STEP_ALLREDUCE, 64u << 20, 0, 0, NULL);
    p.nccl_p2p_net_efficiency = 0.9;
    sim_nccl_plan_call(&p, SIM_NCCL_P2P, 1 << 20, &k);
    cr_expect(fabs(k.eff_net - 0.9) < 1e-12, "p2p at 0.9: eff_net %.3f", k.eff_net);
    sim_nccl_plan_call(&p, SIM_NCCL_ALLREDUCE, 1 << 20, &k);
    cr_expect(k.proto != DEFTSIM_NCCL_PROTO_SIMPLE || fabs(k.eff_net - 0.45) < 1e-12,
              "the allreduce's Simple eff_net %.3f, want the network's 0.45", k.eff_net);
    double fast = run1(&p, DEFTSIM_STEP_ALLTOALL, 64u << 20, 0, 0, NULL);
    double ar2 = run1(&p, DEFTSIM_STEP_ALLREDUCE, 64u << 20, 0, 0, NULL);
    printf("nccl alltoall 2 nodes of 8, 64 MiB: p2p efficiency 0.45 %.3f us, 0.9 %.3f us; "
           "allreduce %.3f us, %.3f us\n", slow * 1e6, fast * 1e6, ar * 1e6, ar2 * 1e6);
    cr_expect(rel(fast, slow / 2) < 0.1, "0.9 took %.3f us, half of 0.45's is %.3f us",
              fast * 1e6, slow / 2 * 1e6);
    cr_expect_eq(ar, ar2, "the allreduce moved: %.9e s, %.9e s", ar, ar2);
}

/* nccl_net_channel_bandwidth: a ring's channel moves at most that across the network, so a NIC
 * with c of the call's channels at most c times it: 16 channels on 8 NICs, 2 on each. An
 * allgather across two 8-GPU nodes at a limit of 10 GB/s a channel runs at 20 of the NIC's 50
 * GB/s (2.5 times as long); grouped sends are not held to it, nor a ring on one-GPU nodes,
 * whose one NIC carries all 16 channels (160 GB/s of limit). */
Test(sim_nccl, a_channel_limit_across_nodes_holds_rings_not_grouped_sends)
{
    deftsim_sim_params p;
    hopper_nodes(&p, 16);
    p.nccl_algorithm = DEFTSIM_NCCL_RING;
    p.nccl_proto = DEFTSIM_NCCL_PROTO_SIMPLE;
    sim_nccl_call k;
    const uint64_t block = 64u << 20;
    sim_nccl_plan_call(&p, SIM_NCCL_ALLGATHER, block * 16, &k);
    cr_expect(fabs(k.eff_net - 1) < 1e-12, "no limit: eff_net %.3f", k.eff_net);
    double free_ag = run1(&p, DEFTSIM_STEP_ALLGATHER, block, 0, 0, NULL);
    double free_a2a = run1(&p, DEFTSIM_STEP_ALLTOALL, block, 0, 0, NULL);
    p.nccl_net_channel_bandwidth = 10e9;
    sim_nccl_plan_call(&p, SIM_NCCL_ALLGATHER, block * 16, &k);
    cr_expect(fabs(k.eff_net - 0.4) < 1e-12, "2 channels a NIC at 10 GB/s of 50: eff_net %.3f",
              k.eff_net);
    sim_nccl_plan_call(&p, SIM_NCCL_P2P, block * 16, &k);
    cr_expect(fabs(k.eff_net - 1) < 1e-12, "grouped sends: eff_net %.3f", k.eff_net);
    double held_ag = run1(&p, DEFTSIM_STEP_ALLGATHER, block, 0, 0, NULL);
    double held_a2a = run1(&p, DEFTSIM_STEP_ALLTOALL, block, 0, 0, NULL);
    printf("nccl ring allgather 2 nodes of 8, 64 MiB a rank: %.1f us, at 10 GB/s a channel %.1f "
           "us; alltoall %.1f us, %.1f us\n", free_ag * 1e6, held_ag * 1e6, free_a2a * 1e6,
           held_a2a * 1e6);
    cr_expect(rel(held_ag, 2.5 * free_ag) < 0.05, "held %.1f us, 2.5 x free is %.1f us",
              held_ag * 1e6, 2.5 * free_ag * 1e6);
    cr_expect_eq(held_a2a, free_a2a, "the alltoall moved: %.9e s, %.9e s", held_a2a, free_a2a);
    /* one GPU a node: the NIC's 16 channels may move 160 GB/s, more than the NIC */
    deftsim_sim_params q;
    hopper_hosts(&q, 4);
    q.nccl_algorithm = DEFTSIM_NCCL_RING;
    q.nccl_proto = DEFTSIM_NCCL_PROTO_SIMPLE;
    q.nccl_net_channel_bandwidth = 10e9;
    sim_nccl_plan_call(&q, SIM_NCCL_ALLGATHER, block * 4, &k);
    cr_expect(fabs(k.eff_net - 1) < 1e-12, "one GPU a node: eff_net %.3f", k.eff_net);
}

/* A ring of sends (rank r to r + 1, as nccl-tests' sendrecv_perf) on P ranks, each `size`. */
static double send_ring(const deftsim_sim_params *p, uint64_t size)
{
    deftsim_schedule s;
    deftsim_schedule_init(&s, p->P);
    deftsim_step *st = deftsim_schedule_add(&s, DEFTSIM_STEP_SENDRECV, "ring");
    cr_assert(st);
    for (uint32_t r = 0; r < p->P; r++) {
        st->peer[r] = (r + 1) % p->P;
        st->bytes[r] = size;
    }
    double *t = simtest_run(p, &s, 1, NULL);
    double v = t[0];
    free(t);
    deftsim_schedule_free(&s);
    return v;
}

/* NCCL's channels for one grouped transfer (src/enqueue.cc, addP2pToPlan) on H100-like nodes
 * with 32 p2p channels: on one 8-GPU node at least 32 / 8 = 4, doubled while a part exceeds
 * 16 MiB (32 x the 512 KiB chunk), so 4 up to 64 MiB, 8 at 128 MiB, 32 from 512 MiB; across
 * nodes a peer gets 4 (one for each 14 GB/s of a 50 GB/s NIC), 2 on 80 ranks (4 x 10 batches
 * of 8 peers would not fit 32), and a part is at most one 128 KiB chunk. */
Test(sim_nccl, grouped_transfers_take_the_channels_nccl_gives_their_size)
{
    deftsim_sim_params p;
    hopper_nodes(&p, 8);
    p.nccl_p2p_channels = 32;
    const uint64_t MiB = 1u << 20;
    const uint64_t sizes[] = {64 << 10, 32 * MiB, 64 * MiB, 128 * MiB, 256 * MiB, 512 * MiB, 4096 * MiB};
    const uint32_t one_node[] = {1, 4, 4, 8, 16, 32, 32};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        cr_expect_eq(sim_nccl_p2p_parts(&p, sizes[i]), one_node[i], "one node, %llu bytes: %u",
                     (unsigned long long)sizes[i], sim_nccl_p2p_parts(&p, sizes[i]));
    uint32_t lo, hi;
    hopper_nodes(&p, 16);
    p.nccl_p2p_channels = 32;
    sim_nccl_p2p_peer_channels(&p, &lo, &hi);
    cr_expect(lo == 2 && hi == 4, "2 nodes: %u .. %u channels a peer", lo, hi);
    cr_expect_eq(sim_nccl_p2p_parts(&p, 4096 * MiB), 4);
    cr_expect_eq(sim_nccl_p2p_parts(&p, 64 << 10), 1);
    hopper_nodes(&p, 80);
    p.nccl_p2p_channels = 32;
    sim_nccl_p2p_peer_channels(&p, &lo, &hi);
    cr_expect(hi == 2, "10 nodes of 8: %u channels a peer", hi);
}

/* A SENDRECV step under library = nccl is one NCCL group: with the tuned model it waits out the
 * call's launch and step latency, and each transfer moves at most its channels' limit. A ring
 * of 32 MiB sends on one 8-GPU node at 20 GB/s a channel runs 4 channels, 80 GB/s: 419 us
 * (within 5 %), against 75 us at the NVSwitch port's 450 GB/s without the limit; at 512 MiB
 * its 32 channels would move 640 GB/s, so the port holds it. Across two one-GPU nodes a
 * network peer's 4 channels at 10 GB/s move 40 of the NIC's 50 GB/s. The plain model (no
 * costs) runs the sends at the link's rate, as before. */
Test(sim_nccl, a_sendrecv_step_is_one_group_held_to_its_channels)
{
    deftsim_sim_params p;
    hopper_nodes(&p, 8);
    p.nccl_p2p_channels = 32;
    p.nccl_launch = 5e-6;
    const uint64_t MiB = 1u << 20;
    double tiny = send_ring(&p, 8);
    cr_expect(tiny >= 5e-6, "a tiny send ring pays the launch: %.3f us", tiny * 1e6);
    double free32 = send_ring(&p, 32 * MiB), free512 = send_ring(&p, 512 * MiB);
    p.nccl_p2p_channel_bandwidth = 20e9;
    double held32 = send_ring(&p, 32 * MiB), held512 = send_ring(&p, 512 * MiB);
    printf("nccl send ring, one node of 8: 8 B %.2f us; 32 MiB %.1f us free, %.1f us at 20 GB/s a "
           "channel; 512 MiB %.1f us, %.1f us\n", tiny * 1e6, free32 * 1e6, held32 * 1e6,
           free512 * 1e6, held512 * 1e6);
    double want32 = 32.0 * MiB / 80e9;
    cr_expect(rel(held32, want32) < 0.05, "32 MiB held: %.1f us, want %.1f us", held32 * 1e6, want32 * 1e6);
    cr_expect(free32 < want32 / 4, "32 MiB free: %.1f us", free32 * 1e6);
    cr_expect(rel(held512, free512) < 0.01, "512 MiB: %.1f us held, %.1f us free", held512 * 1e6,
              free512 * 1e6);
    /* two one-GPU nodes, 4 channels to the network peer */
    deftsim_sim_params q;
    hopper_hosts(&q, 2);
    q.nccl_p2p_channels = 32;
    double nfree = send_ring(&q, 1024 * MiB);
    q.nccl_p2p_net_channel_bandwidth = 10e9;
    double nheld = send_ring(&q, 1024 * MiB);
    printf("nccl send pair, two one-GPU nodes, 1 GiB: %.1f us free, %.1f us at 10 GB/s a channel\n",
           nfree * 1e6, nheld * 1e6);
    cr_expect(rel(nheld, 1024.0 * MiB / 40e9) < 0.05, "held %.1f us", nheld * 1e6);
    cr_expect(rel(nfree, 1024.0 * MiB / 50e9) < 0.05, "free %.1f us", nfree * 1e6);
    /* the plain model: no launch, no limit */
    q.nccl_model = DEFTSIM_NCCL_MODEL_PLAIN;
    double plain = send_ring(&q, 1024 * MiB);
    cr_expect(rel(plain, 1024.0 * MiB / 50e9) < 0.05, "plain %.1f us", plain * 1e6);
}
