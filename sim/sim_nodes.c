/* sim_nodes.c - multi-GPU nodes (gpus_per_node = G > 1): the checks of the node keys, the
 * hosts' names and the node part of the generated SimGrid XML (docs/NETWORK.md, "Multi-GPU
 * nodes").
 *
 * The platform: one root zone (routing Floyd) holding the inter-node network, a SimGrid
 * cluster of the given topology whose hosts "port-<k>" stand for the NICs (NIC k % nics of
 * node k / nics), and one zone per GPU holding its host "node-<n>-gpu-<g>". The intra-node
 * links (switch ports, NVLinks or the PCIe bridge) and the NIC links are links of the root
 * zone; zone routes join the GPU zones: GPU to GPU of one node over the intra-node links
 * only, GPU to its NIC's port over its hop link and the NIC link (on NVSwitch the NIC link
 * alone: the GPU reaches its NIC over PCIe, not its NVLink port). A message between nodes
 * takes GPU -> hop link -> NIC link -> port -> the cluster's route -> port -> NIC link -> hop
 * link -> GPU: Floyd composes the two zone routes and fills the gap between the ports with
 * the cluster's own route.
 *
 * Why a zone per GPU and not per node: SimGrid picks one gateway for each pair of zones, so
 * the GPUs of a node that uses several NICs cannot share a zone where they meet the network.
 * Floyd takes the shortest route by number of links, and a declared route is kept unless a
 * strictly shorter one exists: every intra-node route is at most 4 links, the way through
 * the NICs (hop + NIC link on each side) is 4, so the declared intra-node routes stand (a
 * ring is therefore limited to 9 GPUs, whose longest route is 4 links).
 *
 * Call order in sim/: docs/ARCHITECTURE.md, the sim/ row of its folder table. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim_internal.h"

/* Largest G, and the longest ring whose every route is shorter than the way through NICs. */
#define GPUS_MAX 64u
#define RING_MAX 9u

void sim_shortest(double d, char *buf, size_t cap)
{
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, cap, "%.*g", prec, d);
        if (strtod(buf, NULL) == d) return;
    }
}

void sim_cluster_topology(FILE *f, const deftsim_sim_params *p, const char *tp, const char *bb,
                          const char *indent)
{
    switch (p->topology) {
    case DEFTSIM_TOPO_FLAT:
        /* A non-blocking switch needs no link of its own: every route is the sender's up link
         * and the receiver's down link. (A FATPIPE backbone would time the same but puts every
         * flow on one constraint, which makes SimGrid's solver cost grow with P.) */
        if (p->backbone_bandwidth > 0)
            fprintf(f, "\n%sbb_bw=\"%sBps\" bb_lat=\"0s\" bb_sharing_policy=\"SHARED\"", indent,
                    bb);
        break;
    case DEFTSIM_TOPO_FATTREE:
        fprintf(f, "\n%stopology=\"FAT_TREE\" topo_parameters=\"%s\"", indent, tp);
        break;
    case DEFTSIM_TOPO_TORUS:
        fprintf(f, "\n%stopology=\"TORUS\" topo_parameters=\"%s\"", indent, tp);
        break;
    default: fprintf(f, "\n%stopology=\"DRAGONFLY\" topo_parameters=\"%s\"", indent, tp); break;
    }
}

void deftsim_sim_host_name(const deftsim_sim_params *p, uint32_t w, char *buf, size_t cap)
{
    uint32_t G = p->gpus_per_node ? p->gpus_per_node : 1;
    if (G == 1) snprintf(buf, cap, "node-%" PRIu32, w);
    else snprintf(buf, cap, "node-%" PRIu32 "-gpu-%" PRIu32, w / G, w % G);
}

deftsim_status sim_nodes_check(const deftsim_sim_params *p)
{
    uint32_t G = p->gpus_per_node;
    if (G == 0)
        return deftsim_error_set(DEFTSIM_E_INPUT, "gpus_per_node: 0: a node has at least one GPU");
    if (G == 1) return DEFTSIM_OK;
    if (G > GPUS_MAX)
        return deftsim_error_set(DEFTSIM_E_INPUT, "gpus_per_node: %" PRIu32 " is more than %u",
                                 G, GPUS_MAX);
    /* A platform file declares its own nodes and links; gpus_per_node then only groups its
     * hosts (in worker order) into nodes for NCCL's algorithms (docs/NETWORK.md). */
    if (p->topology == DEFTSIM_TOPO_FILE) return DEFTSIM_OK;
    if ((unsigned)p->intra_fabric >= DEFTSIM_INTRA_COUNT)
        return deftsim_error_set(DEFTSIM_E_INPUT, "intra_fabric: unknown kind %d",
                                 (int)p->intra_fabric);
    if (p->intra_fabric == DEFTSIM_INTRA_NVLINK_RING && G > RING_MAX)
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "intra_fabric: nvlink_ring with %" PRIu32 " GPUs a node: at "
                                 "most %u (a longer ring's farthest GPUs are more links apart "
                                 "than the way through the NICs, which SimGrid's shortest-path "
                                 "routing would take)",
                                 G, RING_MAX);
    if (!(p->intra_bandwidth > 0) || !isfinite(p->intra_bandwidth))
        return deftsim_error_set(DEFTSIM_E_INPUT, "intra_bandwidth: %g bytes/s is not positive",
                                 p->intra_bandwidth);
    if (!(p->intra_latency >= 0) || !isfinite(p->intra_latency))
        return deftsim_error_set(DEFTSIM_E_INPUT, "intra_latency: %g s is negative",
                                 p->intra_latency);
    if (p->nics_per_node == 0 || p->nics_per_node > G)
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "nics_per_node: %" PRIu32 " is not in 1 .. gpus_per_node (%" PRIu32
                                 ")",
                                 p->nics_per_node, G);
    if (!(p->nic_bandwidth >= 0) || !isfinite(p->nic_bandwidth))
        return deftsim_error_set(DEFTSIM_E_INPUT, "nic_bandwidth: %g bytes/s is negative",
                                 p->nic_bandwidth);
    return DEFTSIM_OK;
}

/* ---- the XML ----------------------------------------------------------------------------------- */

static const char *const fabric_sketch[] = {
    "     node n:  gpu-0   gpu-1  ...  gpu-<G-1>\n"
    "                |       |           |        each GPU its own up/down port\n"
    "             [=========== NVSwitch ==========]  (non-blocking)\n",
    "     node n:  gpu-0 === gpu-1 === ... === gpu-<G-1>\n"
    "                |___________________________|  ring neighbours joined by an NVLink each;\n"
    "                                              a route takes the shorter way round\n",
    "     node n:  gpu-0 === gpu-1                  an NVLink between every pair of GPUs\n"
    "                |  \\  /  |\n"
    "              gpu-2 === gpu-3  ...\n",
    "     node n:  gpu-0   gpu-1  ...  gpu-<G-1>\n"
    "                |       |           |\n"
    "             [======= PCIe host bridge ======]  one link all of them share\n",
};

/* The link between GPU g of node n and the NIC side (its switch port, the bridge, or a link of
 * its own for the NVLink fabrics), written into buf; *dir: it has directions (SPLITDUPLEX). */
static void hop_link(const deftsim_sim_params *p, uint32_t n, uint32_t g, char *buf, size_t cap,
                     int *dir)
{
    *dir = 1;
    switch (p->intra_fabric) {
    case DEFTSIM_INTRA_NVSWITCH: snprintf(buf, cap, "node-%" PRIu32 "-nvswitch-%" PRIu32, n, g); break;
    case DEFTSIM_INTRA_PCIE:
        snprintf(buf, cap, "node-%" PRIu32 "-pcie", n);
        *dir = 0;
        break;
    default: snprintf(buf, cap, "node-%" PRIu32 "-pci-%" PRIu32, n, g); break;
    }
}

static void link_ctn(FILE *f, const char *id, int dir, int up)
{
    if (dir) fprintf(f, "      <link_ctn id=\"%s\" direction=\"%s\"/>\n", id, up ? "UP" : "DOWN");
    else fprintf(f, "      <link_ctn id=\"%s\"/>\n", id);
}

static void link_def(FILE *f, const char *id, const char *bw, const char *lat, int dir)
{
    fprintf(f, "    <link id=\"%s\" bandwidth=\"%sBps\" latency=\"%ss\" sharing_policy=\"%s\"/>\n", id,
            bw, lat, dir ? "SPLITDUPLEX" : "SHARED");
}

/* The links of node n. */
static void node_links(FILE *f, const deftsim_sim_params *p, uint32_t n, const char *ibw,
                       const char *ilat, const char *nbw)
{
    uint32_t G = p->gpus_per_node;
    char id[96];
    switch (p->intra_fabric) {
    case DEFTSIM_INTRA_NVSWITCH: break; /* the ports are the hop links, below */
    case DEFTSIM_INTRA_NVLINK_RING:
        for (uint32_t g = 0; g < G; g++) {
            snprintf(id, sizeof id, "node-%" PRIu32 "-nvlink-%" PRIu32 "-%" PRIu32, n, g, (g + 1) % G);
            link_def(f, id, ibw, ilat, 1);
        }
        break;
    case DEFTSIM_INTRA_NVLINK_MESH:
        for (uint32_t a = 0; a < G; a++)
            for (uint32_t b = a + 1; b < G; b++) {
                snprintf(id, sizeof id, "node-%" PRIu32 "-nvlink-%" PRIu32 "-%" PRIu32, n, a, b);
                link_def(f, id, ibw, ilat, 1);
            }
        break;
    default: break;
    }
    int dir;
    if (p->intra_fabric == DEFTSIM_INTRA_PCIE) {
        hop_link(p, n, 0, id, sizeof id, &dir);
        link_def(f, id, ibw, ilat, 0);
    } else {
        for (uint32_t g = 0; g < G; g++) {
            hop_link(p, n, g, id, sizeof id, &dir);
            link_def(f, id, ibw, ilat, 1);
        }
    }
    for (uint32_t k = 0; k < p->nics_per_node; k++) {
        snprintf(id, sizeof id, "node-%" PRIu32 "-nic-%" PRIu32, n, k);
        link_def(f, id, nbw, "0", 1);
    }
}

/* The links of the route from GPU a to GPU b of node n (a != b). */
static void intra_route(FILE *f, const deftsim_sim_params *p, uint32_t n, uint32_t a, uint32_t b)
{
    uint32_t G = p->gpus_per_node;
    char id[96];
    int dir;
    switch (p->intra_fabric) {
    case DEFTSIM_INTRA_NVSWITCH:
        hop_link(p, n, a, id, sizeof id, &dir);
        link_ctn(f, id, 1, 1);
        hop_link(p, n, b, id, sizeof id, &dir);
        link_ctn(f, id, 1, 0);
        break;
    case DEFTSIM_INTRA_NVLINK_MESH:
        snprintf(id, sizeof id, "node-%" PRIu32 "-nvlink-%" PRIu32 "-%" PRIu32, n, a < b ? a : b,
                 a < b ? b : a);
        link_ctn(f, id, 1, a < b);
        break;
    case DEFTSIM_INTRA_NVLINK_RING: {
        uint32_t fwd = (b + G - a) % G;
        if (fwd <= G - fwd) /* forward: links g -> g + 1, UP */
            for (uint32_t g = a; g != b; g = (g + 1) % G) {
                snprintf(id, sizeof id, "node-%" PRIu32 "-nvlink-%" PRIu32 "-%" PRIu32, n, g, (g + 1) % G);
                link_ctn(f, id, 1, 1);
            }
        else /* backward: links g - 1 -> g, DOWN */
            for (uint32_t g = a; g != b; g = (g + G - 1) % G) {
                uint32_t h = (g + G - 1) % G;
                snprintf(id, sizeof id, "node-%" PRIu32 "-nvlink-%" PRIu32 "-%" PRIu32, n, h, g);
                link_ctn(f, id, 1, 0);
            }
        break;
    }
    default:
        hop_link(p, n, a, id, sizeof id, &dir);
        link_ctn(f, id, 0, 0);
        break;
    }
}

/* The zone routes of node n: every GPU to every other, and to and from its NIC's port. */
static void node_routes(FILE *f, const deftsim_sim_params *p, uint32_t n)
{
    uint32_t G = p->gpus_per_node, nics = p->nics_per_node;
    char id[96];
    int dir;
    for (uint32_t a = 0; a < G; a++)
        for (uint32_t b = 0; b < G; b++) {
            if (a == b) continue;
            fprintf(f,
                    "    <zoneRoute src=\"zone-node-%" PRIu32 "-gpu-%" PRIu32 "\" dst=\"zone-node-%" PRIu32
                    "-gpu-%" PRIu32 "\" gw_src=\"node-%" PRIu32 "-gpu-%" PRIu32 "\" gw_dst=\"node-%" PRIu32
                    "-gpu-%" PRIu32 "\" symmetrical=\"NO\">\n",
                    n, a, n, b, n, a, n, b);
            intra_route(f, p, n, a, b);
            fprintf(f, "    </zoneRoute>\n");
        }
    for (uint32_t g = 0; g < G; g++) {
        uint32_t k = (uint32_t)((uint64_t)g * nics / G);
        uint64_t port = (uint64_t)n * nics + k;
        char nic[96];
        snprintf(nic, sizeof nic, "node-%" PRIu32 "-nic-%" PRIu32, n, k);
        hop_link(p, n, g, id, sizeof id, &dir);
        /* On NVSwitch a GPU reaches its NIC over PCIe, not through its NVLink port: the NIC
         * link alone (the other fabrics' hop link is a GPU's own link to the NIC side). */
        int hop = p->intra_fabric != DEFTSIM_INTRA_NVSWITCH;
        fprintf(f,
                "    <zoneRoute src=\"zone-node-%" PRIu32 "-gpu-%" PRIu32 "\" dst=\"deftsim-net\" "
                "gw_src=\"node-%" PRIu32 "-gpu-%" PRIu32 "\" gw_dst=\"port-%" PRIu64 "\" symmetrical=\"NO\">\n",
                n, g, n, g, port);
        if (hop) link_ctn(f, id, dir, 1);
        link_ctn(f, nic, 1, 1);
        fprintf(f, "    </zoneRoute>\n");
        fprintf(f,
                "    <zoneRoute src=\"deftsim-net\" dst=\"zone-node-%" PRIu32 "-gpu-%" PRIu32 "\" "
                "gw_src=\"port-%" PRIu64 "\" gw_dst=\"node-%" PRIu32 "-gpu-%" PRIu32 "\" symmetrical=\"NO\">\n",
                n, g, port, n, g);
        link_ctn(f, nic, 1, 0);
        if (hop) link_ctn(f, id, dir, 0);
        fprintf(f, "    </zoneRoute>\n");
    }
}

void sim_nodes_xml(FILE *f, const deftsim_sim_params *p, const char *tp, uint64_t net_hosts,
                   const char *net_sketch)
{
    uint32_t G = p->gpus_per_node, nics = p->nics_per_node;
    uint32_t nodes = (p->P + G - 1) / G;
    char bw[40], lat[40], bb[40], ibw[40], ilat[40], nbw[40];
    sim_shortest(p->bandwidth, bw, sizeof bw);
    sim_shortest(p->latency, lat, sizeof lat);
    sim_shortest(p->backbone_bandwidth, bb, sizeof bb);
    sim_shortest(p->intra_bandwidth, ibw, sizeof ibw);
    sim_shortest(p->intra_latency, ilat, sizeof ilat);
    sim_shortest(p->nic_bandwidth > 0 ? p->nic_bandwidth : p->bandwidth, nbw, sizeof nbw);
    fprintf(f,
            "<?xml version='1.0'?>\n"
            "<!DOCTYPE platform SYSTEM \"https://simgrid.org/simgrid.dtd\">\n"
            "<!-- deftsim network platform for %" PRIu32 " workers: %" PRIu32 " nodes of %" PRIu32
            " GPUs (worker w on\n"
            "     node-<w / %" PRIu32 ">-gpu-<w %% %" PRIu32 ">), %" PRIu32 " NIC%s a node (GPU g uses NIC g * %" PRIu32
            " / %" PRIu32 "),\n"
            "     the %" PRIu32 " NICs joined by %s",
            p->P, nodes, G, G, G, nics, nics == 1 ? "" : "s", nics, G, nodes * nics,
            deftsim_topology_name(p->topology));
    if (tp[0]) fprintf(f, " %s", tp);
    fprintf(f,
            " (%" PRIu64 " ports; NIC k of node n on port-<n * %" PRIu32 " + k>).\n"
            "     Intra-node: %s, every link %s bytes/s per direction, %s s latency.\n"
            "     NIC links: %s bytes/s per direction, no latency of their own; network links: %s\n"
            "     bytes/s, %s s latency, full duplex. Host speed is not used: compute phases are\n"
            "     injected as measured durations. Between nodes a message takes GPU -> hop link ->\n"
            "     NIC link -> the network -> NIC link -> hop link -> GPU; inside a node, the\n"
            "     intra-node links only.\n\n%s\n     The network between the nodes, its hosts the NICs' ports (port-<k>):\n%s-->\n"
            "<platform version=\"4.1\">\n"
            "  <zone id=\"deftsim\" routing=\"Floyd\">\n"
            "    <cluster id=\"deftsim-net\" prefix=\"port-\" suffix=\"\" radical=\"0-%" PRIu64 "\"\n"
            "             speed=\"1Gf\" bw=\"%sBps\" lat=\"%ss\" sharing_policy=\"SPLITDUPLEX\"",
            net_hosts, nics, deftsim_intra_fabric_name(p->intra_fabric), ibw, ilat, nbw, bw, lat,
            fabric_sketch[p->intra_fabric], net_sketch, net_hosts - 1, bw, lat);
    sim_cluster_topology(f, p, tp, bb, "             ");
    fprintf(f, "/>\n");
    for (uint32_t n = 0; n < nodes; n++)
        for (uint32_t g = 0; g < G; g++)
            fprintf(f,
                    "    <zone id=\"zone-node-%" PRIu32 "-gpu-%" PRIu32 "\" routing=\"Full\">\n"
                    "      <host id=\"node-%" PRIu32 "-gpu-%" PRIu32 "\" speed=\"1Gf\"/>\n"
                    "    </zone>\n",
                    n, g, n, g);
    for (uint32_t n = 0; n < nodes; n++) node_links(f, p, n, ibw, ilat, nbw);
    for (uint32_t n = 0; n < nodes; n++) node_routes(f, p, n);
    fprintf(f, "  </zone>\n</platform>\n");
}
