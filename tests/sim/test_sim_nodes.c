/* test_sim_nodes.c - multi-GPU nodes (suite fast): one GPU a node writes today's platforms
 * byte for byte; nodes of 8 GPUs load in SimGrid with every fabric and topology; a message
 * costs its closed form under CM02 without crosstraffic (inside a node the intra-node links
 * only, between nodes the NIC path); GPUs share a NIC or have their own (rail) as
 * nics_per_node says; host names; the errors of bad node keys. */
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

static int close_to(double got, double want)
{
    return fabs(got - want) <= 1e-9 * want + 4e-9;
}

static char *slurp(const char *path)
{
    char *text = NULL;
    size_t len = 0;
    cr_assert_eq(deftsim_read_file(path, &text, &len), DEFTSIM_OK, "%s", deftsim_error_message());
    return text;
}

/* gpus_per_node = 1: the XML is what deftsim wrote before multi-GPU nodes existed
 * (tests/sim/platforms/, written by the code of commit d66f987). */
Test(sim_nodes, one_gpu_a_node_is_unchanged_byte_for_byte)
{
    const struct {
        deftsim_topology t;
        uint32_t P;
        const char *tp;
        double bb;
        const char *file;
    } cases[] = {
        {DEFTSIM_TOPO_FLAT, 16, NULL, 0, "flat_16.xml"},
        {DEFTSIM_TOPO_FLAT, 5, NULL, 1e9, "flat_5_backbone.xml"},
        {DEFTSIM_TOPO_FATTREE, 40, NULL, 0, "fattree_40.xml"},
        {DEFTSIM_TOPO_TORUS, 40, NULL, 0, "torus_40.xml"},
        {DEFTSIM_TOPO_DRAGONFLY, 40, NULL, 0, "dragonfly_40.xml"},
        {DEFTSIM_TOPO_FATTREE, 8, "2;4,2;1,2;1,1", 0, "fattree_8_params.xml"},
    };
    const char *root = getenv("DEFTSIM_SOURCE_ROOT");
    cr_assert(root, "DEFTSIM_SOURCE_ROOT unset");
    char dir[] = "/tmp/deftsim-nodes-XXXXXX";
    cr_assert(mkdtemp(dir));
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        deftsim_sim_params p;
        deftsim_sim_params_default(&p);
        p.P = cases[i].P;
        p.topology = cases[i].t;
        p.topology_params = cases[i].tp;
        p.backbone_bandwidth = cases[i].bb;
        /* node keys other than gpus_per_node do not matter with one GPU a node */
        p.intra_bandwidth = 1e9;
        p.nic_bandwidth = 7e9;
        char out[128], want_path[4200];
        snprintf(out, sizeof out, "%s/%s", dir, cases[i].file);
        snprintf(want_path, sizeof want_path, "%s/tests/sim/platforms/%s", root, cases[i].file);
        cr_assert_eq(deftsim_sim_write_platform(&p, out), DEFTSIM_OK, "%s", deftsim_error_message());
        char *got = slurp(out), *want = slurp(want_path);
        cr_expect_str_eq(got, want, "%s differs from today's platform", cases[i].file);
        free(got);
        free(want);
        unlink(out);
    }
    rmdir(dir);
}

/* P workers on nodes of G GPUs under CM02 without crosstraffic; intra-node links of 100 GB/s
 * and 0.5 us, NICs of 10 GB/s, network links of 25 Gbit/s and 1 us. */
static void node_params(deftsim_sim_params *p, uint32_t P, uint32_t G, deftsim_intra_fabric f)
{
    simtest_params(p, P);
    p->gpus_per_node = G;
    p->intra_fabric = f;
    p->intra_bandwidth = 100e9;
    p->intra_latency = 0.5e-6;
    p->nics_per_node = G;
    p->nic_bandwidth = 10e9;
}

/* One SENDRECV step: src[i] sends bytes to dst[i], all at once. */
static double messages(const deftsim_sim_params *p, const uint32_t *src, const uint32_t *dst,
                       size_t n, uint64_t bytes)
{
    deftsim_schedule s;
    deftsim_schedule_init(&s, p->P);
    deftsim_step *m = deftsim_schedule_add(&s, DEFTSIM_STEP_SENDRECV, "msg");
    cr_assert(m);
    for (size_t i = 0; i < n; i++) {
        m->peer[src[i]] = dst[i];
        m->bytes[src[i]] = bytes;
    }
    double *t = simtest_run(p, &s, 1, NULL);
    double r = t[0];
    free(t);
    deftsim_schedule_free(&s);
    return r;
}

static double one(const deftsim_sim_params *p, uint32_t a, uint32_t b, uint64_t bytes)
{
    return messages(p, &a, &b, 1, bytes);
}

/* Inside a node: the intra-node links of the fabric and nothing else (a route through a NIC
 * would run at the NICs' tenth of the bandwidth). Between nodes: the hop link, the NIC link
 * and the network on each side: 2 intra latencies + 2 network latencies, the slowest
 * bandwidth on the way. */
Test(sim_nodes, a_message_costs_its_closed_form)
{
    const uint64_t sizes[] = {1000, 1u << 20};
    const struct {
        deftsim_intra_fabric f;
        uint32_t a, b, links; /* a -> b inside node 0 crosses `links` intra-node links */
    } intra[] = {
        {DEFTSIM_INTRA_NVSWITCH, 0, 5, 2},   {DEFTSIM_INTRA_NVLINK_MESH, 2, 7, 1},
        {DEFTSIM_INTRA_NVLINK_MESH, 7, 2, 1}, {DEFTSIM_INTRA_NVLINK_RING, 0, 1, 1},
        {DEFTSIM_INTRA_NVLINK_RING, 1, 4, 3}, {DEFTSIM_INTRA_NVLINK_RING, 1, 6, 3},
        {DEFTSIM_INTRA_NVLINK_RING, 0, 4, 4}, {DEFTSIM_INTRA_PCIE, 3, 1, 1},
    };
    int checked = 0;
    for (size_t c = 0; c < sizeof intra / sizeof intra[0]; c++)
        for (size_t si = 0; si < 2; si++) {
            deftsim_sim_params p;
            node_params(&p, 16, 8, intra[c].f);
            double b = (double)(sizes[si] + 16);
            double t = one(&p, intra[c].a, intra[c].b, sizes[si]);
            double want = intra[c].links * p.intra_latency + b / p.intra_bandwidth;
            printf("%-11s gpu %u -> gpu %u %8llu bytes: simulated %.9e s, formula %.9e s\n",
                   deftsim_intra_fabric_name(intra[c].f), intra[c].a, intra[c].b,
                   (unsigned long long)sizes[si], t, want);
            cr_expect(close_to(t, want), "%s %u -> %u: %.12e vs %.12e",
                      deftsim_intra_fabric_name(intra[c].f), intra[c].a, intra[c].b, t, want);
            /* between nodes: worker a of node 0 to worker b of node 1 */
            double t2 = one(&p, intra[c].a, 8 + intra[c].b, sizes[si]);
            double bw = fmin(fmin(p.intra_bandwidth, p.nic_bandwidth), p.bandwidth);
            double want2 = 2 * p.intra_latency + 2 * p.latency + b / bw;
            printf("%-11s node 0 gpu %u -> node 1 gpu %u: simulated %.9e s, formula %.9e s\n",
                   deftsim_intra_fabric_name(intra[c].f), intra[c].a, intra[c].b, t2, want2);
            cr_expect(close_to(t2, want2), "%s between nodes: %.12e vs %.12e",
                      deftsim_intra_fabric_name(intra[c].f), t2, want2);
            checked += 2;
        }
    cr_expect_eq(checked, 32);
}

/* The NIC mapping: two GPUs of node 0 send to two GPUs of node 1 at once. With a NIC each
 * (rail-optimized) nothing is shared and each message takes the time of one alone; with one
 * NIC a node both cross it and it halves their bandwidth; with the NICs the bottleneck
 * (slower than the network), so that the NIC link is what is shared. */
Test(sim_nodes, gpus_share_a_nic_or_have_their_own)
{
    const uint64_t bytes = 1u << 20;
    const uint32_t src[] = {0, 1}, dst[] = {4, 5};
    for (uint32_t nics = 1; nics <= 4; nics *= 2) {
        deftsim_sim_params p;
        node_params(&p, 8, 4, DEFTSIM_INTRA_NVSWITCH);
        p.nics_per_node = nics;
        p.nic_bandwidth = 1e9; /* below the network's 3.125 GB/s */
        double t = messages(&p, src, dst, 2, bytes);
        /* GPUs 0 and 1 use NIC 0 and NIC 0 (1 NIC), 0 and 0 (2 NICs: g * 2 / 4), 0 and 1 (4) */
        int shared = nics < 4;
        double want = 2 * p.intra_latency + 2 * p.latency +
                      (shared ? 2.0 : 1.0) * (double)(bytes + 16) / p.nic_bandwidth;
        printf("%u NIC(s) a node, gpu 0 -> 4 and 1 -> 5 at once: %.9e s, formula %.9e s (%s)\n",
               nics, t, want, shared ? "one NIC shared" : "a NIC each");
        cr_expect(close_to(t, want), "nics_per_node %u: %.12e vs %.12e", nics, t, want);
    }
    /* GPUs 0 and 2 of 4 with 2 NICs: NIC 0 and NIC 1, nothing shared */
    deftsim_sim_params p;
    node_params(&p, 8, 4, DEFTSIM_INTRA_PCIE);
    p.nics_per_node = 2;
    p.nic_bandwidth = 1e9;
    const uint32_t s2[] = {0, 2}, d2[] = {4, 6};
    double t = messages(&p, s2, d2, 2, bytes);
    /* the PCIe bridge is shared by both (SHARED, 100 GB/s): not the bottleneck */
    double want = 2 * p.intra_latency + 2 * p.latency + (double)(bytes + 16) / p.nic_bandwidth;
    cr_expect(close_to(t, want), "2 NICs, GPUs 0 and 2: %.12e vs %.12e", t, want);
}

/* Every fabric on every inter-node topology: the platform loads in SimGrid and every worker
 * reaches worker 0 and back (the check of a user's platform file, given the generated file);
 * a 1 MiB ring allreduce runs. */
Test(sim_nodes, eight_gpu_nodes_load_on_every_topology)
{
    const deftsim_topology topos[] = {DEFTSIM_TOPO_FLAT, DEFTSIM_TOPO_FATTREE, DEFTSIM_TOPO_TORUS,
                                      DEFTSIM_TOPO_DRAGONFLY};
    char dir[] = "/tmp/deftsim-nodes-XXXXXX";
    cr_assert(mkdtemp(dir));
    for (size_t ti = 0; ti < 4; ti++)
        for (int f = 0; f < DEFTSIM_INTRA_COUNT; f++) {
            deftsim_sim_params p;
            node_params(&p, 20, 8, (deftsim_intra_fabric)f); /* 3 nodes, the last half used */
            p.topology = topos[ti];
            p.nics_per_node = f == DEFTSIM_INTRA_PCIE ? 1 : f == DEFTSIM_INTRA_NVLINK_MESH ? 4 : 8;
            char path[128];
            snprintf(path, sizeof path, "%s/p.xml", dir);
            cr_assert_eq(deftsim_sim_write_platform(&p, path), DEFTSIM_OK, "%s", deftsim_error_message());
            deftsim_sim_params chk = p;
            chk.gpus_per_node = 1;
            chk.topology = DEFTSIM_TOPO_FILE;
            chk.platform_file = path;
            cr_expect_eq(deftsim_sim_check_platform(&chk), DEFTSIM_OK, "%s %s: %s",
                         deftsim_topology_name(topos[ti]), deftsim_intra_fabric_name(p.intra_fabric),
                         deftsim_error_message());
            p.allreduce = DEFTSIM_AR_RING;
            deftsim_schedule s;
            simtest_one_step(&s, p.P, DEFTSIM_STEP_ALLREDUCE, 1u << 20, 0, 0);
            double *t = simtest_run(&p, &s, 1, NULL);
            printf("%-9s %-11s P=20 G=8: ring allreduce of 1 MiB %.9e s\n",
                   deftsim_topology_name(topos[ti]), deftsim_intra_fabric_name(p.intra_fabric), t[0]);
            cr_expect_gt(t[0], 0);
            free(t);
            deftsim_schedule_free(&s);
            unlink(path);
        }
    rmdir(dir);
}

Test(sim_nodes, host_names_sort_in_worker_order)
{
    deftsim_sim_params p;
    deftsim_sim_params_default(&p);
    char a[64], b[64];
    deftsim_sim_host_name(&p, 12, a, sizeof a);
    cr_expect_str_eq(a, "node-12");
    p.gpus_per_node = 8;
    deftsim_sim_host_name(&p, 0, a, sizeof a);
    cr_expect_str_eq(a, "node-0-gpu-0");
    deftsim_sim_host_name(&p, 13, a, sizeof a);
    cr_expect_str_eq(a, "node-1-gpu-5");
    deftsim_sim_host_name(&p, 87, b, sizeof b);
    cr_expect_str_eq(b, "node-10-gpu-7");
}

/* Bad node keys: the message starts with the key. */
Test(sim_nodes, bad_node_keys_name_the_key)
{
    const struct {
        uint32_t G, nics;
        deftsim_intra_fabric f;
        deftsim_topology t;
        const char *tp;
        const char *msg;
    } bad[] = {
        {0, 1, DEFTSIM_INTRA_NVSWITCH, DEFTSIM_TOPO_FLAT, NULL,
         "gpus_per_node: 0: a node has at least one GPU"},
        {8, 9, DEFTSIM_INTRA_NVSWITCH, DEFTSIM_TOPO_FLAT, NULL,
         "nics_per_node: 9 is not in 1 .. gpus_per_node (8)"},
        {8, 0, DEFTSIM_INTRA_NVSWITCH, DEFTSIM_TOPO_FLAT, NULL,
         "nics_per_node: 0 is not in 1 .. gpus_per_node (8)"},
        {10, 1, DEFTSIM_INTRA_NVLINK_RING, DEFTSIM_TOPO_FLAT, NULL,
         "intra_fabric: nvlink_ring with 10 GPUs a node: at most 9 (a longer ring's farthest GPUs "
         "are more links apart than the way through the NICs, which SimGrid's shortest-path "
         "routing would take)"},
        {8, 2, DEFTSIM_INTRA_NVSWITCH, DEFTSIM_TOPO_TORUS, "2,2",
         "topology_params '2,2': 4 hosts, fewer than the 8 NICs (4 nodes x 2)"},
        {2, 1, DEFTSIM_INTRA_NVSWITCH, DEFTSIM_TOPO_FILE, NULL,
         "gpus_per_node: 2, but topology = file (a platform file declares its own nodes: "
         "docs/NETWORK.md)"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        deftsim_sim_params p;
        node_params(&p, 32, bad[i].G, bad[i].f);
        p.nics_per_node = bad[i].nics;
        p.topology = bad[i].t;
        p.topology_params = bad[i].tp;
        if (bad[i].t == DEFTSIM_TOPO_FILE) p.platform_file = "x.xml";
        char tp[128];
        uint64_t hosts;
        cr_expect_eq(deftsim_sim_platform_shape(&p, tp, sizeof tp, &hosts), DEFTSIM_E_INPUT, "case %zu", i);
        cr_expect_str_eq(deftsim_error_message(), bad[i].msg);
    }
    deftsim_sim_params p;
    node_params(&p, 32, 8, DEFTSIM_INTRA_PCIE);
    p.intra_bandwidth = 0;
    char tp[128];
    uint64_t hosts;
    cr_expect_eq(deftsim_sim_platform_shape(&p, tp, sizeof tp, &hosts), DEFTSIM_E_INPUT);
    cr_expect_str_eq(deftsim_error_message(), "intra_bandwidth: 0 bytes/s is not positive");
    /* a good one: 4 nodes of 8, 32 GPU hosts; the fat tree derived from the 16 NICs */
    node_params(&p, 32, 8, DEFTSIM_INTRA_NVSWITCH);
    p.nics_per_node = 4;
    p.topology = DEFTSIM_TOPO_FATTREE;
    cr_assert_eq(deftsim_sim_platform_shape(&p, tp, sizeof tp, &hosts), DEFTSIM_OK, "%s", deftsim_error_message());
    cr_expect_eq(hosts, 32);
    cr_expect_str_eq(tp, "1;16;1;1");
}
