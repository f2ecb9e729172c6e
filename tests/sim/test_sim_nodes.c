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
#include <sys/wait.h>
#include <unistd.h>

#include <simgrid/actor.h>
#include <simgrid/engine.h>
#include <simgrid/host.h>
#include <simgrid/link.h>
#include <simgrid/mailbox.h>
#include <simgrid/plugins/load.h>

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
 * bandwidth on the way; on NVSwitch no hop link (a GPU reaches its NIC over PCIe, not its
 * switch port): 2 network latencies. */
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
            int hop = intra[c].f != DEFTSIM_INTRA_NVSWITCH;
            double bw = fmin(fmin(hop ? p.intra_bandwidth : INFINITY, p.nic_bandwidth), p.bandwidth);
            double want2 = (hop ? 2 * p.intra_latency : 0) + 2 * p.latency + b / bw;
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
        double want = 2 * p.latency + /* NVSwitch: no hop link to the NIC */
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

/* ---- bytes per link, counted by SimGrid's link-load plugin -------------------------------------- */

/* A sender actor: argv[1] the mailbox, argv[2] the bytes. A receiver: argv[1] the mailbox. */
static void sender(int argc, char **argv)
{
    (void)argc;
    static int token;
    sg_mailbox_put(sg_mailbox_by_name(argv[1]), &token, (uint64_t)strtoull(argv[2], NULL, 10));
}
static void receiver(int argc, char **argv)
{
    (void)argc;
    sg_mailbox_get(sg_mailbox_by_name(argv[1]));
}

/* The links as SimGrid seals them: the load plugin attaches to a link only then (when the
 * run starts), so an actor that runs first tracks them all (the split-duplex links' two
 * directions, "X_UP" and "X_DOWN", carry the loads; the pair itself is not tracked). */
static int directional(const char *name)
{
    size_t l = strlen(name);
    return (l > 3 && !strcmp(name + l - 3, "_UP")) || (l > 5 && !strcmp(name + l - 5, "_DOWN"));
}
static void tracker(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    size_t nl = sg_link_count();
    sg_link_t *links = sg_link_list();
    for (size_t i = 0; i < nl; i++)
        if (directional(sg_link_get_name(links[i]))) sg_link_load_track(links[i]);
    free(links);
}

/* In a forked child: load the platform, send `bytes` from each src host to its dst host at
 * once, write every link's cumulated load (bytes) as "name bytes" lines to out. */
static void child_link_loads(const char *platform, const char *const *src, const char *const *dst,
                             size_t n, const char *bytes, const char *out)
{
    int argc = 4;
    char *argv[] = {"links", "--cfg=network/model:CM02", "--cfg=network/crosstraffic:0",
                    "--log=root.thres:critical", NULL};
    simgrid_init(&argc, argv);
    sg_link_load_plugin_init();
    simgrid_load_platform(platform);
    sg_actor_create("t", sg_host_by_name(src[0]), tracker, 0, NULL);
    for (size_t i = 0; i < n; i++) {
        char mb[16];
        snprintf(mb, sizeof mb, "m%zu", i);
        const char *sa[] = {"s", mb, bytes}, *ra[] = {"r", mb};
        sg_actor_create("s", sg_host_by_name(src[i]), sender, 3, (char **)sa);
        sg_actor_create("r", sg_host_by_name(dst[i]), receiver, 2, (char **)ra);
    }
    simgrid_run();
    FILE *f = fopen(out, "w");
    if (!f) _exit(3);
    size_t nl = sg_link_count();
    sg_link_t *links = sg_link_list();
    for (size_t i = 0; i < nl; i++)
        if (directional(sg_link_get_name(links[i])))
            fprintf(f, "%s %.0f\n", sg_link_get_name(links[i]), sg_link_get_cum_load(links[i]));
    fclose(f);
    _exit(0);
}

static double load_of(const char *text, const char *link)
{
    char key[128];
    snprintf(key, sizeof key, "\n%s ", link);
    const char *at = strstr(text, key);
    return at ? strtod(at + strlen(key), NULL) : -1;
}

/* Two nodes of 4 GPUs: GPUs 0 and 1 of node 0 send 1 MB each to GPUs 0 and 1 of node 1 (flows
 * A and B) while GPU 2 sends 1 MB to GPU 3 inside node 0 (flow C). Which links carry which
 * flow, counted by hand: with one NIC a node, A and B share node 0's NIC link and port; with
 * four, each has its own; A and B never cross a switch port (a GPU reaches its NIC over PCIe);
 * C loads the two switch ports only. The plugin's cumulated load is
 * the integral of the flows' rates, which SimGrid holds from a comm's start, its latency
 * included: each flow adds b + rate x (its route's latency), the rate from the closed form
 * (A, B: the network's 3.125 GB/s, halved when they share a port; C: 100 GB/s). */
Test(sim_nodes, bytes_per_link_as_counted_by_hand)
{
    char dir[] = "/tmp/deftsim-nodes-XXXXXX";
    cr_assert(mkdtemp(dir));
    enum { A = 1, B = 2, C = 4 };
    for (uint32_t nics = 1; nics <= 4; nics *= 4) {
        deftsim_sim_params p;
        node_params(&p, 8, 4, DEFTSIM_INTRA_NVSWITCH);
        p.nics_per_node = nics;
        char plat[128], out[128];
        snprintf(plat, sizeof plat, "%s/p.xml", dir);
        snprintf(out, sizeof out, "%s/loads.txt", dir);
        cr_assert_eq(deftsim_sim_write_platform(&p, plat), DEFTSIM_OK, "%s", deftsim_error_message());
        const char *src[] = {"node-0-gpu-0", "node-0-gpu-1", "node-0-gpu-2"};
        const char *dst[] = {"node-1-gpu-0", "node-1-gpu-1", "node-0-gpu-3"};
        fflush(NULL);
        pid_t pid = fork();
        cr_assert_geq(pid, 0);
        if (pid == 0) child_link_loads(plat, src, dst, 3, "1000000", out);
        int status;
        cr_assert_eq(waitpid(pid, &status, 0), pid);
        cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the SimGrid child failed");
        char *raw = slurp(out), *text = malloc(strlen(raw) + 2);
        cr_assert(text);
        text[0] = '\n';
        strcpy(text + 1, raw);
        printf("nics_per_node %u, bytes per loaded link:\n", nics);
        for (char *line = strtok(raw, "\n"); line; line = strtok(NULL, "\n"))
            if (strtod(strchr(line, ' ') + 1, NULL) > 0) printf("  %s\n", line);
        const double MB = 1e6, inter_lat = 2 * p.latency; /* NVSwitch: no hop link to the NIC */
        double rate_ab = nics == 1 ? p.bandwidth / 2 : p.bandwidth;
        double flow[3] = {MB + rate_ab * inter_lat, MB + rate_ab * inter_lat,
                          MB + p.intra_bandwidth * 2 * p.intra_latency};
        const struct { const char *link; int flows; } want1[] = {
            {"node-0-nvswitch-0_UP", 0},    {"node-0-nvswitch-1_UP", 0},
            {"node-0-nvswitch-2_UP", C},    {"node-0-nvswitch-3_DOWN", C},
            {"node-0-nvswitch-2_DOWN", 0},  {"node-0-nic-0_UP", A | B},
            {"node-0-nic-0_DOWN", 0},       {"node-1-nic-0_DOWN", A | B},
            {"node-1-nvswitch-0_DOWN", 0},  {"node-1-nvswitch-1_DOWN", 0},
            {"node-1-nvswitch-2_DOWN", 0},  {"deftsim-net_link_0_UP", A | B},
            {"deftsim-net_link_1_DOWN", A | B},
        }, want4[] = {
            {"node-0-nic-0_UP", A},         {"node-0-nic-1_UP", B},
            {"node-0-nic-2_UP", 0},         {"node-0-nic-3_UP", 0},
            {"node-1-nic-0_DOWN", A},       {"node-1-nic-1_DOWN", B},
            {"deftsim-net_link_0_UP", A},   {"deftsim-net_link_1_UP", B},
            {"deftsim-net_link_4_DOWN", A}, {"deftsim-net_link_5_DOWN", B},
            {"deftsim-net_link_2_UP", 0},   {"node-0-nvswitch-3_DOWN", C},
        };
        size_t nw = nics == 1 ? sizeof want1 / sizeof want1[0] : sizeof want4 / sizeof want4[0];
        for (size_t i = 0; i < nw; i++) {
            const char *l = nics == 1 ? want1[i].link : want4[i].link;
            int fl = nics == 1 ? want1[i].flows : want4[i].flows;
            double w = 0, got = load_of(text, l);
            for (int f = 0; f < 3; f++)
                if (fl & (1 << f)) w += flow[f];
            cr_expect(fabs(got - w) <= 1e-9 * w + 1, "nics %u: link %s carried %.0f bytes, by hand %.0f",
                      nics, l, got, w);
        }
        /* nothing of the intra-node message leaves node 0 */
        double total = 0;
        for (char *at = strstr(text, "\nnode-0-nic-"); at; at = strstr(at + 1, "\nnode-0-nic-"))
            total += strtod(strchr(at + 1, ' ') + 1, NULL);
        cr_expect(fabs(total - flow[0] - flow[1]) <= 2, "nics %u: the node's NIC links carried %.0f bytes",
                  nics, total);
        free(raw);
        free(text);
        unlink(out);
        unlink(plat);
    }
    rmdir(dir);
}
