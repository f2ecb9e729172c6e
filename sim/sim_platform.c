/* sim_platform.c - the platform description: the shapes of the generated topologies (flat,
 * fat tree, torus, dragonfly) and their SimGrid XML, written for the user
 * (deftsim_sim_write_platform) or to a temporary file for the child (sim.c).
 *
 * Call order in sim/: docs/ARCHITECTURE.md, the sim/ row of its folder table. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "deftsim_util.h"
#include "sim_internal.h"

/* ---- platform shapes ---------------------------------------------------------------------------- */

/* Largest host count a platform may have. */
#define HOSTS_MAX (1u << 22)
/* Derived shapes: hosts per leaf switch of a fat tree; hosts per router, routers per chassis
 * and chassis per group of a dragonfly. */
#define FATTREE_LEAF 32u
#define DF_NODES 4u
#define DF_ROUTERS 4u
#define DF_CHASSIS 4u

/* "a,b;c;d,e" into groups of positive integers. Returns the number of groups, or -1. */
#define MAX_GROUPS 8
#define MAX_VALUES 16
typedef struct {
    int ngroups;
    int n[MAX_GROUPS];
    uint64_t v[MAX_GROUPS][MAX_VALUES];
} groups;

static int parse_groups(const char *text, groups *g)
{
    memset(g, 0, sizeof *g);
    const char *p = text;
    for (;;) {
        if (g->ngroups == MAX_GROUPS) return -1;
        int gi = g->ngroups++;
        for (;;) {
            if (g->n[gi] == MAX_VALUES) return -1;
            if (*p < '0' || *p > '9') return -1;
            char *end;
            errno = 0;
            unsigned long long v = strtoull(p, &end, 10);
            if (errno || v == 0 || v > HOSTS_MAX) return -1;
            g->v[gi][g->n[gi]++] = v;
            p = end;
            if (*p != ',') break;
            p++;
        }
        if (*p == '\0') return g->ngroups;
        if (*p != ';') return -1;
        p++;
    }
}

/* Product of values, or 0 past HOSTS_MAX. */
static uint64_t product(const uint64_t *v, int n)
{
    uint64_t x = 1;
    for (int i = 0; i < n; i++) {
        x *= v[i];
        if (x > HOSTS_MAX) return 0;
    }
    return x;
}

/* Torus dimensions for P: the most balanced exact factorisation into three; when P has none
 * close to a cube (a prime, say) the near-cube ceil(cbrt P)^2-ish box with spare hosts. */
static void torus_dims(uint32_t P, uint64_t d[3])
{
    uint64_t best[3] = {P, 1, 1};
    for (uint64_t a = 1; a * a * a <= P; a++) {
        if (P % a) continue;
        for (uint64_t b = a; a * b * b <= P; b++) {
            if ((P / a) % b) continue;
            uint64_t c = P / a / b;
            /* the smallest largest side; on a tie, the largest smallest side */
            if (c < best[0] || (c == best[0] && a > best[2])) {
                best[0] = c;
                best[1] = b;
                best[2] = a;
            }
        }
    }
    uint64_t cube = (uint64_t)ceil(cbrt((double)P) - 1e-9);
    if (cube < 1) cube = 1;
    if (best[0] > 2 * cube) {
        uint64_t x = cube, y = (uint64_t)ceil(sqrt((double)P / (double)x) - 1e-9);
        if (y < 1) y = 1;
        uint64_t z = (P + x * y - 1) / (x * y);
        best[0] = x;
        best[1] = y;
        best[2] = z;
    }
    memcpy(d, best, sizeof best);
}

/* deftsim_sim_platform_shape, and the host count of the inter-node topology (with G GPUs a
 * node: the ports the NICs sit on; else the hosts). */
static deftsim_status platform_shape(const deftsim_sim_params *p, char *buf, size_t cap,
                                     uint64_t *hosts, uint64_t *net_hosts)
{
    *hosts = *net_hosts = 0;
    if (cap) buf[0] = '\0';
    if (p->P == 0) return deftsim_error_set(DEFTSIM_E_INPUT, "network: P must be at least 1");
    if (p->topology >= DEFTSIM_TOPO_COUNT)
        return deftsim_error_set(DEFTSIM_E_INPUT, "topology: unknown kind %d", (int)p->topology);
    if (!(p->bandwidth > 0) || !isfinite(p->bandwidth))
        return deftsim_error_set(DEFTSIM_E_INPUT, "bandwidth: %g bytes/s is not positive",
                                 p->bandwidth);
    if (!(p->latency >= 0) || !isfinite(p->latency))
        return deftsim_error_set(DEFTSIM_E_INPUT, "latency: %g s is negative", p->latency);
    if (!(p->backbone_bandwidth >= 0) || !isfinite(p->backbone_bandwidth))
        return deftsim_error_set(DEFTSIM_E_INPUT, "backbone_bandwidth: %g bytes/s is negative",
                                 p->backbone_bandwidth);
    if (p->backbone_bandwidth > 0 && p->topology != DEFTSIM_TOPO_FLAT)
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "backbone_bandwidth: set, but topology = %s (only flat has a "
                                 "backbone)",
                                 deftsim_topology_name(p->topology));
    deftsim_status st = sim_nodes_check(p);
    if (st) return st;
    const char *tp = p->topology_params && p->topology_params[0] ? p->topology_params : NULL;
    if (p->topology == DEFTSIM_TOPO_FILE) {
        if (!p->platform_file || !p->platform_file[0])
            return deftsim_error_set(DEFTSIM_E_INPUT,
                                     "platform_file: missing (required when topology = file)");
        if (tp)
            return deftsim_error_set(DEFTSIM_E_INPUT,
                                     "topology_params: set, but topology = file (the file holds "
                                     "the topology)");
        return DEFTSIM_OK;
    }
    if (p->platform_file && p->platform_file[0])
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "platform_file: set, but topology = %s (a file needs topology "
                                 "= file)",
                                 deftsim_topology_name(p->topology));
    /* With G GPUs a node the topology joins the NICs: ceil(P / G) nodes of nics_per_node. */
    uint32_t G = p->gpus_per_node;
    uint64_t nodes = ((uint64_t)p->P + G - 1) / G, gpu_hosts = nodes * G;
    uint64_t nics = G > 1 ? nodes * p->nics_per_node : p->P;
    if (nics > HOSTS_MAX)
        return deftsim_error_set(DEFTSIM_E_INPUT, "nics_per_node: %" PRIu64 " NICs, more than %u",
                                 nics, HOSTS_MAX);
    char noun[96];
    if (G > 1)
        snprintf(noun, sizeof noun, "%" PRIu64 " NICs (%" PRIu64 " nodes x %u)", nics, nodes,
                 p->nics_per_node);
    else
        snprintf(noun, sizeof noun, "%u workers", p->P);
    if (p->topology == DEFTSIM_TOPO_FLAT) {
        if (tp)
            return deftsim_error_set(DEFTSIM_E_INPUT,
                                     "topology_params '%s': a flat cluster has no parameters", tp);
        *hosts = G > 1 ? gpu_hosts : p->P;
        *net_hosts = nics;
        return DEFTSIM_OK;
    }
    char derived[128];
    uint32_t P = (uint32_t)nics;
    if (!tp) {
        switch (p->topology) {
        case DEFTSIM_TOPO_FATTREE:
            /* Full bisection: as many spines as hosts per leaf, one link from every leaf to
             * every spine. A single switch when one leaf holds everyone. */
            if (P <= FATTREE_LEAF)
                snprintf(derived, sizeof derived, "1;%u;1;1", P);
            else
                snprintf(derived, sizeof derived, "2;%u,%u;1,%u;1,1", FATTREE_LEAF,
                         (P + FATTREE_LEAF - 1) / FATTREE_LEAF, FATTREE_LEAF);
            break;
        case DEFTSIM_TOPO_TORUS: {
            uint64_t d[3];
            torus_dims(P, d);
            /* SimGrid 3.32 declares a link twice in a torus with two dimensions of 1 (and
             * aborts): P = 1, 2 and 3 (or that many NICs) are a ring of one dimension. */
            if (d[1] == 1 && d[2] == 1)
                snprintf(derived, sizeof derived, "%" PRIu64, d[0]);
            else
                snprintf(derived, sizeof derived, "%" PRIu64 ",%" PRIu64 ",%" PRIu64, d[0], d[1],
                         d[2]);
            break;
        }
        default: {
            uint32_t per_group = DF_NODES * DF_ROUTERS * DF_CHASSIS;
            if (P <= per_group) {
                uint32_t per_chassis = DF_NODES * DF_ROUTERS;
                snprintf(derived, sizeof derived, "1,1;%u,1;%u,1;%u",
                         (P + per_chassis - 1) / per_chassis, DF_ROUTERS, DF_NODES);
            } else {
                snprintf(derived, sizeof derived, "%u,1;%u,1;%u,1;%u",
                         (P + per_group - 1) / per_group, DF_CHASSIS, DF_ROUTERS, DF_NODES);
            }
            break;
        }
        }
        tp = derived;
    }
    groups g;
    int ng = parse_groups(tp, &g);
    uint64_t n = 0;
    switch (p->topology) {
    case DEFTSIM_TOPO_FATTREE:
        /* levels; children per level; parents per level; links per parent-child pair */
        if (ng != 4 || g.n[0] != 1 || g.v[0][0] > MAX_VALUES || (int)g.v[0][0] != g.n[1] ||
            g.n[1] != g.n[2] || g.n[2] != g.n[3])
            return deftsim_error_set(DEFTSIM_E_INPUT,
                                     "topology_params '%s': a fat tree is 'levels;children,...;"
                                     "parents,...;links,...' with one positive count per level "
                                     "in each list (e.g. 2;32,4;1,32;1,1)",
                                     tp);
        n = product(g.v[1], g.n[1]);
        break;
    case DEFTSIM_TOPO_TORUS:
        if (ng != 1)
            return deftsim_error_set(DEFTSIM_E_INPUT,
                                     "topology_params '%s': a torus is its dimensions, "
                                     "'x,y,...' (e.g. 4,4,4)",
                                     tp);
        n = product(g.v[0], g.n[0]);
        break;
    default:
        if (ng != 4 || g.n[0] != 2 || g.n[1] != 2 || g.n[2] != 2 || g.n[3] != 1)
            return deftsim_error_set(DEFTSIM_E_INPUT,
                                     "topology_params '%s': a dragonfly is 'groups,links;"
                                     "chassis,links;routers,links;hosts' (e.g. 2,1;4,1;4,1;4)",
                                     tp);
        {
            uint64_t v[4] = {g.v[0][0], g.v[1][0], g.v[2][0], g.v[3][0]};
            n = product(v, 4);
        }
        break;
    }
    if (n == 0)
        return deftsim_error_set(DEFTSIM_E_INPUT, "topology_params '%s': more than %u hosts", tp,
                                 HOSTS_MAX);
    if (n < P)
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "topology_params '%s': %" PRIu64 " hosts, fewer than the %s", tp,
                                 n, noun);
    if (strlen(tp) >= cap)
        return deftsim_error_set(DEFTSIM_E_INPUT, "topology_params '%s': too long", tp);
    snprintf(buf, cap, "%s", tp);
    *hosts = G > 1 ? gpu_hosts : n;
    *net_hosts = n;
    return DEFTSIM_OK;
}

deftsim_status deftsim_sim_platform_shape(const deftsim_sim_params *p, char *buf, size_t cap,
                                          uint64_t *hosts)
{
    uint64_t net;
    return platform_shape(p, buf, cap, hosts, &net);
}

/* ---- platform XML -------------------------------------------------------------------------------- */

static const char *const sketch_flat =
    "     node-0   node-1   ...   node-<N-1>\n"
    "       |        |              |          one full-duplex link per host\n"
    "   [============ switch ============]     non-blocking, or a shared backbone\n";
static const char *const sketch_fattree =
    "          [spine] ... [spine]             top level\n"
    "           |  \\       /  |                 every leaf to every spine (full bisection\n"
    "         [leaf]  ...  [leaf]               with the derived shape)\n"
    "         / | \\        / | \\\n"
    "     node-0 ...          node-<N-1>      full-duplex links at every level\n";
static const char *const sketch_torus =
    "   node -- node -- node --+               each host linked to its two neighbours in\n"
    "    |       |       |     |  (wraps)      every dimension, wrapping around\n"
    "   node -- node -- node --+\n";
static const char *const sketch_dragonfly =
    "   group 0 ====== group 1 ====== ...      groups fully connected (blue links)\n"
    "   chassis -- chassis                     chassis of a group fully connected (black)\n"
    "   router -- router                       routers of a chassis fully connected (green)\n"
    "   node node node node                    hosts on each router\n";

deftsim_status sim_platform_xml(const deftsim_sim_params *p, char **out, size_t *len)
{
    char tp[128];
    uint64_t hosts, net_hosts;
    deftsim_status st = platform_shape(p, tp, sizeof tp, &hosts, &net_hosts);
    if (st) return st;
    if (p->topology == DEFTSIM_TOPO_FILE)
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "topology = file: the platform is the user's file %s, nothing is "
                                 "generated",
                                 p->platform_file);
    char bw[40], lat[40], bb[40];
    sim_shortest(p->bandwidth, bw, sizeof bw);
    sim_shortest(p->latency, lat, sizeof lat);
    sim_shortest(p->backbone_bandwidth, bb, sizeof bb);
    FILE *f = open_memstream(out, len);
    if (!f) return deftsim_error_nomem("platform");
    const char *sketch = p->topology == DEFTSIM_TOPO_FLAT      ? sketch_flat
                         : p->topology == DEFTSIM_TOPO_FATTREE ? sketch_fattree
                         : p->topology == DEFTSIM_TOPO_TORUS   ? sketch_torus
                                                               : sketch_dragonfly;
    if (p->gpus_per_node > 1) {
        sim_nodes_xml(f, p, tp, net_hosts, sketch);
        goto done;
    }
    fprintf(f,
            "<?xml version='1.0'?>\n"
            "<!DOCTYPE platform SYSTEM \"https://simgrid.org/simgrid.dtd\">\n"
            "<!-- deftsim network platform for %u workers: %s",
            p->P, deftsim_topology_name(p->topology));
    if (tp[0]) fprintf(f, " %s", tp);
    fprintf(f,
            ", %" PRIu64 " hosts (worker i on node-i).\n"
            "     Every link: %s bytes/s, %s s latency, full duplex. Host speed is not used:\n"
            "     compute phases are injected as measured durations.\n\n%s-->\n"
            "<platform version=\"4.1\">\n"
            "  <cluster id=\"deftsim\" prefix=\"node-\" suffix=\"\" radical=\"0-%" PRIu64 "\"\n"
            "           speed=\"1Gf\" bw=\"%sBps\" lat=\"%ss\" sharing_policy=\"SPLITDUPLEX\"",
            hosts, bw, lat, sketch, hosts - 1, bw, lat);
    sim_cluster_topology(f, p, tp, bb, "           ");
    fprintf(f, "/>\n</platform>\n");
done:
    if (fclose(f) != 0) {
        free(*out);
        *out = NULL;
        return deftsim_error_nomem("platform");
    }
    return DEFTSIM_OK;
}

deftsim_status deftsim_sim_write_platform(const deftsim_sim_params *p, const char *path)
{
    char *xml = NULL;
    size_t len = 0;
    deftsim_status st = sim_platform_xml(p, &xml, &len);
    if (st) return st;
    st = deftsim_write_file_atomic(path, xml, len);
    free(xml);
    return st;
}

/* ---- the file the child loads ---------------------------------------------------------------- */

deftsim_status sim_platform_open(const deftsim_sim_params *p, sim_platform_file *pf)
{
    pf->path = p->platform_file;
    pf->tmp[0] = '\0';
    pf->fd = -1;
    pf->is_fd = 0;
    if (p->topology == DEFTSIM_TOPO_FILE) {
        if (access(pf->path, R_OK) != 0)
            return deftsim_error_set(DEFTSIM_E_INPUT, "platform_file %s: cannot read: %s", pf->path,
                                     strerror(errno));
        return DEFTSIM_OK;
    }
    const char *dir = getenv("TMPDIR");
    snprintf(pf->tmp, sizeof pf->tmp, "%s/deftsim-platform-XXXXXX.xml", dir && dir[0] ? dir : "/tmp");
    int fd = mkstemps(pf->tmp, 4);
    if (fd < 0) {
        deftsim_status st =
            deftsim_error_set(DEFTSIM_E_IO, "%s: cannot create: %s", pf->tmp, strerror(errno));
        pf->tmp[0] = '\0';
        return st;
    }
    char *xml = NULL;
    size_t len = 0;
    deftsim_status st = sim_platform_xml(p, &xml, &len);
    int bad = !st && deftsim_write_all(fd, xml, len);
    free(xml);
    close(fd);
    if (!st && bad) st = deftsim_error_set(DEFTSIM_E_IO, "%s: write failed", pf->tmp);
    if (st) {
        sim_platform_close(pf);
        return st;
    }
    pf->path = pf->tmp;
#ifdef __linux__
    /* The child reads the file through a descriptor it inherits, and the name goes now:
     * nothing is left in TMPDIR when this process is killed while the child runs. */
    pf->fd = open(pf->tmp, O_RDONLY | O_CLOEXEC);
    if (pf->fd >= 0) { /* close-on-exec: the child inherits it (it does not exec) */
        unlink(pf->tmp);
        snprintf(pf->tmp, sizeof pf->tmp, "/proc/self/fd/%d", pf->fd);
        pf->is_fd = 1;
    }
#endif
    return DEFTSIM_OK;
}

void sim_platform_close(sim_platform_file *pf)
{
    if (pf->fd >= 0) close(pf->fd);
    else if (pf->tmp[0]) unlink(pf->tmp);
    pf->fd = -1;
    pf->tmp[0] = '\0';
}
