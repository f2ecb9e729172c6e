/* sim.c - the network simulation's caller side: names and defaults, unit parsing, platform
 * shapes and their XML, and the forked child that runs SimGrid (deftsim_sim.h). */
#include "deftsim_sim.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "deftsim_util.h"
#include "sim_internal.h"

/* ---- names -------------------------------------------------------------------------------------- */

const char *const deftsim_topology_names[] = {"flat", "fattree", "torus", "dragonfly", "file", NULL};
const char *const deftsim_net_model_names[] = {"LV08", "CM02", "SMPI", NULL};
const char *const deftsim_allgather_names[] = {"ring", "recursive_doubling", "bruck", NULL};
const char *const deftsim_allreduce_names[] = {"ring", "recursive_doubling", "rabenseifner", NULL};
const char *const deftsim_bcast_names[] = {"binomial", "scatter_rdb_allgather",
                                           "scatter_ring_allgather", NULL};
const char *const deftsim_sim_mode_names[] = {"exact", "approximate", NULL};
const char *const deftsim_sim_compute_names[] = {"measured", "none", NULL};

_Static_assert(sizeof deftsim_topology_names / sizeof(char *) == DEFTSIM_TOPO_COUNT + 1, "names");
_Static_assert(sizeof deftsim_net_model_names / sizeof(char *) == DEFTSIM_NET_COUNT + 1, "names");
_Static_assert(sizeof deftsim_allgather_names / sizeof(char *) == DEFTSIM_AG_COUNT + 1, "names");
_Static_assert(sizeof deftsim_allreduce_names / sizeof(char *) == DEFTSIM_AR_COUNT + 1, "names");
_Static_assert(sizeof deftsim_bcast_names / sizeof(char *) == DEFTSIM_BC_COUNT + 1, "names");
_Static_assert(sizeof deftsim_sim_mode_names / sizeof(char *) == DEFTSIM_SIM_MODE_COUNT + 1, "names");
_Static_assert(sizeof deftsim_sim_compute_names / sizeof(char *) == DEFTSIM_SIM_COMPUTE_COUNT + 1,
               "names");

static const char *name_of(const char *const *names, unsigned count, unsigned v)
{
    return v < count ? names[v] : "?";
}

const char *deftsim_topology_name(deftsim_topology t)
{
    return name_of(deftsim_topology_names, DEFTSIM_TOPO_COUNT, (unsigned)t);
}
const char *deftsim_net_model_name(deftsim_net_model m)
{
    return name_of(deftsim_net_model_names, DEFTSIM_NET_COUNT, (unsigned)m);
}
const char *deftsim_allgather_name(deftsim_allgather_algo a)
{
    return name_of(deftsim_allgather_names, DEFTSIM_AG_COUNT, (unsigned)a);
}
const char *deftsim_allreduce_name(deftsim_allreduce_algo a)
{
    return name_of(deftsim_allreduce_names, DEFTSIM_AR_COUNT, (unsigned)a);
}
const char *deftsim_bcast_name(deftsim_bcast_algo a)
{
    return name_of(deftsim_bcast_names, DEFTSIM_BC_COUNT, (unsigned)a);
}
const char *deftsim_sim_mode_name(deftsim_sim_mode m)
{
    return name_of(deftsim_sim_mode_names, DEFTSIM_SIM_MODE_COUNT, (unsigned)m);
}
const char *deftsim_sim_compute_name(deftsim_sim_compute c)
{
    return name_of(deftsim_sim_compute_names, DEFTSIM_SIM_COMPUTE_COUNT, (unsigned)c);
}

void deftsim_sim_params_default(deftsim_sim_params *p)
{
    memset(p, 0, sizeof *p);
    p->topology = DEFTSIM_TOPO_FLAT;
    p->bandwidth = 25e9 / 8; /* 25 Gbit/s */
    p->latency = 1e-6;
    p->model = DEFTSIM_NET_LV08;
    p->crosstraffic = 0;
    p->allgather = DEFTSIM_AG_BRUCK;
    p->allreduce = DEFTSIM_AR_RABENSEIFNER;
    p->bcast = DEFTSIM_BC_BINOMIAL;
    p->eager_threshold = 65536;
    p->envelope_bytes = 16;
    p->elem_bytes = 4;
    p->mode = DEFTSIM_SIM_EXACT;
    p->compute = DEFTSIM_SIM_COMPUTE_MEASURED;
}

/* ---- units -------------------------------------------------------------------------------------- */

/* A unit: a power of ten and a power of two to scale by, and whether it counts bits. */
typedef struct {
    const char *suffix;
    int dec, bin, bits;
} unit;

/* A number with an optional unit from the table. The decimal power goes into the number's own
 * exponent before strtod rounds it, so "5us" is the double nearest 5e-6, as the literal is;
 * binary prefixes and bits (/ 8) scale by powers of two, which is exact. */
static int parse_with_units(const char *text, const unit *units, double *out)
{
    if (!text || !*text) return -1;
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (end == text || errno == ERANGE || !isfinite(v)) return -1;
    const unit *u = NULL;
    if (*end) {
        for (const unit *x = units; x->suffix; x++)
            if (strcmp(end, x->suffix) == 0) u = x;
        if (!u) return -1;
    }
    if (u && u->dec) {
        /* mantissa [e exponent] -> mantissa e (exponent + dec) */
        size_t nlen = (size_t)(end - text);
        char num[128];
        if (nlen >= sizeof num - 16) return -1;
        memcpy(num, text, nlen);
        num[nlen] = '\0';
        char *e = strpbrk(num, "eE");
        long exp = 0;
        if (e) {
            char *ee;
            errno = 0;
            exp = strtol(e + 1, &ee, 10);
            if (errno || *ee) return -1;
            *e = '\0';
        }
        char scaled[160];
        snprintf(scaled, sizeof scaled, "%se%ld", num, exp + u->dec);
        errno = 0;
        v = strtod(scaled, &end);
        if (*end || errno == ERANGE || !isfinite(v)) return -1;
    }
    if (u) v = ldexp(v, u->bin - (u->bits ? 3 : 0));
    if (!isfinite(v)) return -1;
    *out = v;
    return 0;
}

int deftsim_parse_bandwidth(const char *text, double *bytes_per_s)
{
    /* SimGrid's bandwidth units: B for bytes, b for bits; decimal and binary prefixes. */
    static const unit units[] = {
        {"Bps", 0, 0, 0},    {"kBps", 3, 0, 0},   {"KBps", 3, 0, 0},   {"MBps", 6, 0, 0},
        {"GBps", 9, 0, 0},   {"TBps", 12, 0, 0},  {"KiBps", 0, 10, 0}, {"MiBps", 0, 20, 0},
        {"GiBps", 0, 30, 0}, {"TiBps", 0, 40, 0}, {"bps", 0, 0, 1},    {"kbps", 3, 0, 1},
        {"Kbps", 3, 0, 1},   {"Mbps", 6, 0, 1},   {"Gbps", 9, 0, 1},   {"Tbps", 12, 0, 1},
        {"Kibps", 0, 10, 1}, {"Mibps", 0, 20, 1}, {"Gibps", 0, 30, 1}, {"Tibps", 0, 40, 1},
        {NULL, 0, 0, 0}};
    return parse_with_units(text, units, bytes_per_s);
}

int deftsim_parse_duration(const char *text, double *seconds)
{
    static const unit units[] = {{"s", 0, 0, 0},   {"ms", -3, 0, 0},  {"us", -6, 0, 0},
                                 {"ns", -9, 0, 0}, {"ps", -12, 0, 0}, {NULL, 0, 0, 0}};
    return parse_with_units(text, units, seconds);
}

/* Shortest "%.*g" text that reads back as exactly d. */
static void shortest(double d, char *buf, size_t cap)
{
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, cap, "%.*g", prec, d);
        if (strtod(buf, NULL) == d) return;
    }
}

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

deftsim_status deftsim_sim_platform_shape(const deftsim_sim_params *p, char *buf, size_t cap,
                                          uint64_t *hosts)
{
    *hosts = 0;
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
    if (p->topology == DEFTSIM_TOPO_FLAT) {
        if (tp)
            return deftsim_error_set(DEFTSIM_E_INPUT,
                                     "topology_params '%s': a flat cluster has no parameters", tp);
        *hosts = p->P;
        return DEFTSIM_OK;
    }
    char derived[128];
    uint32_t P = p->P;
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
            snprintf(derived, sizeof derived, "%" PRIu64 ",%" PRIu64 ",%" PRIu64, d[0], d[1], d[2]);
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
                                 "topology_params '%s': %" PRIu64 " hosts, fewer than the %u "
                                 "workers",
                                 tp, n, P);
    if (strlen(tp) >= cap)
        return deftsim_error_set(DEFTSIM_E_INPUT, "topology_params '%s': too long", tp);
    snprintf(buf, cap, "%s", tp);
    *hosts = n;
    return DEFTSIM_OK;
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

static deftsim_status platform_xml(const deftsim_sim_params *p, char **out, size_t *len)
{
    char tp[128];
    uint64_t hosts;
    deftsim_status st = deftsim_sim_platform_shape(p, tp, sizeof tp, &hosts);
    if (st) return st;
    if (p->topology == DEFTSIM_TOPO_FILE)
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "topology = file: the platform is the user's file %s, nothing is "
                                 "generated",
                                 p->platform_file);
    char bw[40], lat[40], bb[40];
    shortest(p->bandwidth, bw, sizeof bw);
    shortest(p->latency, lat, sizeof lat);
    shortest(p->backbone_bandwidth, bb, sizeof bb);
    FILE *f = open_memstream(out, len);
    if (!f) return deftsim_error_set(DEFTSIM_E_NOMEM, "platform: out of memory");
    const char *sketch = p->topology == DEFTSIM_TOPO_FLAT      ? sketch_flat
                         : p->topology == DEFTSIM_TOPO_FATTREE ? sketch_fattree
                         : p->topology == DEFTSIM_TOPO_TORUS   ? sketch_torus
                                                               : sketch_dragonfly;
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
    switch (p->topology) {
    case DEFTSIM_TOPO_FLAT:
        /* A non-blocking switch needs no link of its own: every route is the sender's up link
         * and the receiver's down link. (A FATPIPE backbone would time the same but puts every
         * flow on one constraint, which makes SimGrid's solver cost grow with P.) */
        if (p->backbone_bandwidth > 0)
            fprintf(f, "\n           bb_bw=\"%sBps\" bb_lat=\"0s\" bb_sharing_policy=\"SHARED\"", bb);
        break;
    case DEFTSIM_TOPO_FATTREE: fprintf(f, "\n           topology=\"FAT_TREE\" topo_parameters=\"%s\"", tp); break;
    case DEFTSIM_TOPO_TORUS: fprintf(f, "\n           topology=\"TORUS\" topo_parameters=\"%s\"", tp); break;
    default: fprintf(f, "\n           topology=\"DRAGONFLY\" topo_parameters=\"%s\"", tp); break;
    }
    fprintf(f, "/>\n</platform>\n");
    if (fclose(f) != 0) {
        free(*out);
        *out = NULL;
        return deftsim_error_set(DEFTSIM_E_NOMEM, "platform: out of memory");
    }
    return DEFTSIM_OK;
}

deftsim_status deftsim_sim_write_platform(const deftsim_sim_params *p, const char *path)
{
    char *xml = NULL;
    size_t len = 0;
    deftsim_status st = platform_xml(p, &xml, &len);
    if (st) return st;
    st = deftsim_write_file_atomic(path, xml, len);
    free(xml);
    return st;
}

/* ---- running -------------------------------------------------------------------------------------- */

#define SIM_MAGIC 0x6d697364u /* "dsim" */
#define MSG_MAX 2048
#define ERR_TAIL 3000

typedef struct {
    uint32_t magic;
    int32_t rc;
    uint32_t msglen;
    uint32_t pad;
    uint64_t messages;
} child_header;

static deftsim_status check_schedules(const deftsim_sim_params *p,
                                      const deftsim_schedule *const *scheds, size_t nsched)
{
    for (size_t i = 0; i < nsched; i++) {
        const deftsim_schedule *s = scheds[i];
        if (!s || s->P != p->P)
            return deftsim_error_set(DEFTSIM_E_INTERNAL,
                                     "network simulation: schedule %zu has %u ranks, the "
                                     "platform %u",
                                     i, s ? s->P : 0, p->P);
        for (size_t k = 0; k < s->nsteps; k++) {
            const deftsim_step *st = &s->steps[k];
            if ((unsigned)st->kind > DEFTSIM_STEP_KIND_LAST)
                return deftsim_error_set(DEFTSIM_E_INTERNAL,
                                         "network simulation: schedule %zu step %zu: unknown "
                                         "kind %d",
                                         i, k, (int)st->kind);
            if (st->kind == DEFTSIM_STEP_BCAST && st->root >= s->P)
                return deftsim_error_set(DEFTSIM_E_INTERNAL,
                                         "network simulation: schedule %zu step %zu '%s': root %u "
                                         "of %u ranks",
                                         i, k, st->name, st->root, s->P);
            if (st->kind == DEFTSIM_STEP_COMPUTE)
                for (uint32_t r = 0; r < s->P; r++)
                    if (!(st->seconds[r] >= 0) || !isfinite(st->seconds[r]))
                        return deftsim_error_set(DEFTSIM_E_INTERNAL,
                                                 "network simulation: schedule %zu step %zu "
                                                 "'%s': rank %u computes for %g s",
                                                 i, k, st->name, r, st->seconds[r]);
            if (st->kind == DEFTSIM_STEP_P2P)
                for (size_t j = 0; j < (size_t)s->P * st->fan; j++)
                    if (st->peer[j] != DEFTSIM_NO_PEER && st->peer[j] >= s->P)
                        return deftsim_error_set(DEFTSIM_E_INTERNAL,
                                                 "network simulation: schedule %zu step %zu "
                                                 "'%s': rank %zu sends to %u of %u ranks",
                                                 i, k, st->name, j / st->fan, st->peer[j], s->P);
            if (st->kind == DEFTSIM_STEP_SENDRECV)
                for (uint32_t r = 0; r < s->P; r++)
                    if (st->peer[r] != DEFTSIM_NO_PEER && st->peer[r] >= s->P)
                        return deftsim_error_set(DEFTSIM_E_INTERNAL,
                                                 "network simulation: schedule %zu step %zu "
                                                 "'%s': rank %u sends to %u of %u ranks",
                                                 i, k, st->name, r, st->peer[r], s->P);
        }
    }
    return DEFTSIM_OK;
}

static int write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* A child whose parent is killed (SIGKILL, the OOM killer) would simulate on for nobody:
 * its results go to a pipe only the parent reads. On Linux it gets SIGKILL when the parent
 * dies (and leaves at once if that already happened). The signal follows the thread that
 * forked, which waits for the child: it comes only when the process dies. */
static void die_with_parent(pid_t parent)
{
#ifdef __linux__
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
#else
    (void)parent;
#endif
}

/* The child: runs SimGrid and writes the header, the message and the arrays. Never returns. */
static void child_main(int out_fd, int err_fd, const deftsim_sim_params *p, const char *platform,
                       const deftsim_schedule *const *scheds, size_t nsched, const size_t *offs)
{
    /* SimGrid writes its messages to stderr (and nothing should reach the caller's stdout):
     * both go to the parent, which shows them only if the simulation fails. */
    dup2(err_fd, 2);
    dup2(err_fd, 1);
    size_t cells = offs[nsched] * p->P;
    sim_child_out o;
    memset(&o, 0, sizeof o);
    o.start = calloc(cells ? cells : 1, sizeof(double));
    o.end = calloc(cells ? cells : 1, sizeof(double));
    o.sent = calloc(cells ? cells : 1, sizeof(uint64_t));
    o.recv = calloc(cells ? cells : 1, sizeof(uint64_t));
    char msg[MSG_MAX] = "";
    int rc;
    if (!o.start || !o.end || !o.sent || !o.recv) {
        snprintf(msg, sizeof msg, "out of memory for %zu result cells", cells);
        rc = -1;
    } else {
        rc = sim_child_run(p, platform, scheds, nsched, offs, &o, msg, sizeof msg);
    }
    child_header h = {SIM_MAGIC, rc, (uint32_t)strlen(msg), 0, o.messages};
    int bad = write_all(out_fd, &h, sizeof h) || write_all(out_fd, msg, h.msglen);
    if (!bad && rc == 0)
        bad = write_all(out_fd, o.start, cells * sizeof(double)) ||
              write_all(out_fd, o.end, cells * sizeof(double)) ||
              write_all(out_fd, o.sent, cells * sizeof(uint64_t)) ||
              write_all(out_fd, o.recv, cells * sizeof(uint64_t));
    /* _exit: no atexit handlers, no stdio flush of the parent's buffers, no SimGrid teardown. */
    _exit(bad ? 3 : 0);
}

void deftsim_sim_result_free(deftsim_sim_result *r)
{
    if (!r) return;
    free(r->step_offset);
    free(r->start);
    free(r->end);
    free(r->sent);
    free(r->recv);
    free(r->iteration_seconds);
    free(r->comm_seconds);
    memset(r, 0, sizeof *r);
}

/* Appends to a bounded tail buffer: keeps the last ERR_TAIL bytes. */
static void tail_append(char *tail, size_t *len, const char *data, size_t n)
{
    if (n >= ERR_TAIL) {
        memcpy(tail, data + n - ERR_TAIL, ERR_TAIL);
        *len = ERR_TAIL;
        return;
    }
    if (*len + n > ERR_TAIL) {
        size_t drop = *len + n - ERR_TAIL;
        memmove(tail, tail + drop, *len - drop);
        *len -= drop;
    }
    memcpy(tail + *len, data, n);
    *len += n;
}

/* What a failed SimGrid child said, for a message: the first line SimGrid logged as an error
 * (its log prefix "[time] file:line: [category/ERROR] " dropped), else the first non-empty
 * line; "" if it said nothing. */
static void simgrid_said(const char *text, char *out, size_t cap)
{
    out[0] = '\0';
    const char *pick = NULL;
    static const char *const tags[] = {"/ERROR] ", "/CRITICAL] "};
    for (size_t i = 0; i < 2 && !pick; i++) {
        const char *t = strstr(text, tags[i]);
        if (t) pick = t + strlen(tags[i]);
    }
    if (!pick) {
        pick = text;
        while (*pick == '\n' || *pick == '\r' || *pick == ' ') pick++;
    }
    size_t n = strcspn(pick, "\r\n");
    if (n >= cap) n = cap - 1;
    memcpy(out, pick, n);
    out[n] = '\0';
}

/* The last file this thread found good, and for how many workers: a scenario is checked when
 * it is loaded and again by the engine, and a sweep checks every variant; the same unchanged
 * file is loaded once. */
static _Thread_local struct {
    char path[4096];
    uint32_t P;
    struct stat st;
} platform_ok;

static int same_file(const struct stat *a, const struct stat *b)
{
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
           a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

deftsim_status deftsim_sim_check_platform(const deftsim_sim_params *p)
{
    if (p->topology != DEFTSIM_TOPO_FILE) return DEFTSIM_OK;
    const char *path = p->platform_file;
    if (!path || !path[0])
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "platform_file: missing (required when topology = file)");
    struct stat fst;
    if (access(path, R_OK) != 0 || stat(path, &fst) != 0)
        return deftsim_error_set(DEFTSIM_E_INPUT, "cannot read %s: %s", path, strerror(errno));
    if (platform_ok.P >= p->P && strcmp(platform_ok.path, path) == 0 &&
        same_file(&platform_ok.st, &fst))
        return DEFTSIM_OK;
    sim_check_progress *prog = mmap(NULL, sizeof *prog, PROT_READ | PROT_WRITE,
                                    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (prog == MAP_FAILED)
        return deftsim_error_set(DEFTSIM_E_RUNTIME, "platform check: mmap: %s", strerror(errno));
    memset(prog, 0, sizeof *prog);
    int outp[2], errp[2];
    if (pipe(outp) != 0) {
        munmap(prog, sizeof *prog);
        return deftsim_error_set(DEFTSIM_E_RUNTIME, "platform check: pipe: %s", strerror(errno));
    }
    if (pipe(errp) != 0) {
        close(outp[0]);
        close(outp[1]);
        munmap(prog, sizeof *prog);
        return deftsim_error_set(DEFTSIM_E_RUNTIME, "platform check: pipe: %s", strerror(errno));
    }
    pid_t parent = getpid();
    /* The child leaves with _exit, but flush first anyway: a buffered stdio stream of the
     * parent would otherwise be written twice by any path in the child that flushes. */
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        int err = errno;
        close(outp[0]);
        close(outp[1]);
        close(errp[0]);
        close(errp[1]);
        munmap(prog, sizeof *prog);
        return deftsim_error_set(DEFTSIM_E_RUNTIME, "platform check: fork: %s", strerror(err));
    }
    if (pid == 0) {
        die_with_parent(parent);
        close(outp[0]);
        close(errp[0]);
        dup2(errp[1], 2);
        dup2(errp[1], 1);
        char msg[MSG_MAX] = "";
        int32_t rc = sim_child_check_platform(path, p->P, prog, msg, sizeof msg);
        uint32_t len = (uint32_t)strlen(msg);
        int bad = write_all(outp[1], &rc, sizeof rc) || write_all(outp[1], &len, sizeof len) ||
                  write_all(outp[1], msg, len);
        _exit(bad ? 3 : 0);
    }
    close(outp[1]);
    close(errp[1]);
    /* The result is a few bytes (it fits the pipe, the child never blocks on it): read what
     * SimGrid says to the end, then the result. */
    char said[ERR_TAIL + 1];
    size_t said_len = 0;
    for (;;) {
        char chunk[4096];
        ssize_t r = read(errp[0], chunk, sizeof chunk);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        size_t take = (size_t)r < ERR_TAIL - said_len ? (size_t)r : ERR_TAIL - said_len;
        memcpy(said + said_len, chunk, take); /* the first lines: where SimGrid's error is */
        said_len += take;
    }
    said[said_len] = '\0';
    close(errp[0]);
    char res[8 + MSG_MAX + 1];
    size_t have = 0;
    for (;;) {
        ssize_t r = read(outp[0], res + have, sizeof res - 1 - have);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        have += (size_t)r;
        if (have == sizeof res - 1) break;
    }
    close(outp[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    sim_check_progress pr = *prog;
    munmap(prog, sizeof *prog);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || have < 8) {
        char what[1024], how[64];
        simgrid_said(said, what, sizeof what);
        if (WIFSIGNALED(status))
            snprintf(how, sizeof how, "killed by signal %d", WTERMSIG(status));
        else
            snprintf(how, sizeof how, "exit status %d", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
        pr.from_name[sizeof pr.from_name - 1] = pr.to_name[sizeof pr.to_name - 1] = '\0';
        if (pr.stage == 1) /* SimGrid 3.32 crashes on a route that does not exist */
            return deftsim_error_set(DEFTSIM_E_INPUT,
                                     "%s has no route from host %s to host %s (workers %" PRIu32
                                     " and %" PRIu32 ")",
                                     path, pr.from_name, pr.to_name, pr.from, pr.to);
        if (what[0])
            return deftsim_error_set(DEFTSIM_E_INPUT, "%s is not a SimGrid platform: %s", path,
                                     what);
        return deftsim_error_set(DEFTSIM_E_INPUT, "%s: SimGrid failed loading it (%s)", path, how);
    }
    int32_t rc;
    uint32_t len;
    memcpy(&rc, res, sizeof rc);
    memcpy(&len, res + 4, sizeof len);
    if (len > have - 8) len = (uint32_t)(have - 8);
    res[8 + len] = '\0';
    if (rc != 0) return deftsim_error_set(DEFTSIM_E_INPUT, "%s", res + 8);
    if (strlen(path) < sizeof platform_ok.path) {
        strcpy(platform_ok.path, path);
        platform_ok.P = p->P;
        platform_ok.st = fst;
    }
    return DEFTSIM_OK;
}

deftsim_status deftsim_sim_run(const deftsim_sim_params *p, const deftsim_schedule *const *scheds,
                               size_t nsched, deftsim_sim_result *out)
{
    memset(out, 0, sizeof *out);
    char tp[128];
    char tmp_path[4200] = ""; /* the generated platform, removed at the end */
    int platform_fd = -1, tmp_path_is_fd = 0; /* or its descriptor, already unlinked */
    uint64_t hosts;
    deftsim_status st = deftsim_sim_platform_shape(p, tp, sizeof tp, &hosts);
    if (st) return st;
    if ((st = check_schedules(p, scheds, nsched))) return st;
    uint32_t P = p->P;
    out->P = P;
    out->nsched = nsched;
    out->mode = p->mode;
    out->step_offset = calloc(nsched + 1, sizeof *out->step_offset);
    if (!out->step_offset) goto nomem;
    for (size_t i = 0; i < nsched; i++) out->step_offset[i + 1] = out->step_offset[i] + scheds[i]->nsteps;
    size_t cells = out->step_offset[nsched] * P;
    out->start = malloc((cells ? cells : 1) * sizeof(double));
    out->end = malloc((cells ? cells : 1) * sizeof(double));
    out->sent = malloc((cells ? cells : 1) * sizeof(uint64_t));
    out->recv = malloc((cells ? cells : 1) * sizeof(uint64_t));
    out->iteration_seconds = calloc(nsched ? nsched : 1, sizeof(double));
    out->comm_seconds = calloc(nsched ? nsched : 1, sizeof(double));
    if (!out->start || !out->end || !out->sent || !out->recv || !out->iteration_seconds ||
        !out->comm_seconds)
        goto nomem;

    /* The platform the child loads: the user's file, or the generated one in a temp file. */
    const char *platform = p->platform_file;
    if (p->topology == DEFTSIM_TOPO_FILE) {
        if (access(platform, R_OK) != 0) {
            st = deftsim_error_set(DEFTSIM_E_INPUT, "platform_file %s: cannot read: %s", platform,
                                   strerror(errno));
            goto fail;
        }
    } else {
        const char *dir = getenv("TMPDIR");
        snprintf(tmp_path, sizeof tmp_path, "%s/deftsim-platform-XXXXXX.xml",
                 dir && dir[0] ? dir : "/tmp");
        int fd = mkstemps(tmp_path, 4);
        if (fd < 0) {
            st = deftsim_error_set(DEFTSIM_E_IO, "%s: cannot create: %s", tmp_path, strerror(errno));
            tmp_path[0] = '\0';
            goto fail;
        }
        char *xml = NULL;
        size_t len = 0;
        st = platform_xml(p, &xml, &len);
        int bad = !st && write_all(fd, xml, len);
        free(xml);
        close(fd);
        if (!st && bad) st = deftsim_error_set(DEFTSIM_E_IO, "%s: write failed", tmp_path);
        if (st) goto fail;
        platform = tmp_path;
#ifdef __linux__
        /* The child reads the file through a descriptor it inherits, and the name goes now:
         * nothing is left in TMPDIR when this process is killed while the child runs. */
        platform_fd = open(tmp_path, O_RDONLY | O_CLOEXEC);
        if (platform_fd >= 0) { /* close-on-exec: the child inherits it (it does not exec) */
            unlink(tmp_path);
            snprintf(tmp_path, sizeof tmp_path, "/proc/self/fd/%d", platform_fd);
            platform = tmp_path;
            tmp_path_is_fd = 1;
        }
#endif
    }

    int outp[2], errp[2];
    if (pipe(outp) != 0) {
        st = deftsim_error_set(DEFTSIM_E_RUNTIME, "network simulation: pipe: %s", strerror(errno));
        goto fail;
    }
    if (pipe(errp) != 0) {
        close(outp[0]);
        close(outp[1]);
        st = deftsim_error_set(DEFTSIM_E_RUNTIME, "network simulation: pipe: %s", strerror(errno));
        goto fail;
    }
    double t0 = deftsim_now();
    pid_t parent = getpid();
    /* The child leaves with _exit, but flush first anyway: a buffered stdio stream of the
     * parent would otherwise be written twice by any path in the child that flushes. */
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        st = deftsim_error_set(DEFTSIM_E_RUNTIME, "network simulation: fork: %s", strerror(errno));
        close(outp[0]);
        close(outp[1]);
        close(errp[0]);
        close(errp[1]);
        goto fail;
    }
    if (pid == 0) {
        die_with_parent(parent);
        close(outp[0]);
        close(errp[0]);
        child_main(outp[1], errp[1], p, platform, scheds, nsched, out->step_offset);
    }
    close(outp[1]);
    close(errp[1]);

    /* Read the result and the child's messages together (either pipe can fill). */
    size_t want = sizeof(child_header) + MSG_MAX + cells * 2 * (sizeof(double) + sizeof(uint64_t));
    char *buf = malloc(want);
    size_t have = 0;
    char tail[ERR_TAIL + 1];
    size_t tail_len = 0;
    struct pollfd fds[2] = {{outp[0], POLLIN, 0}, {errp[0], POLLIN, 0}};
    int open_fds = 2;
    int read_failed = !buf;
    while (open_fds) {
        int n = poll(fds, 2, -1);
        if (n < 0) {
            if (errno == EINTR) continue;
            read_failed = 1;
            break;
        }
        for (int i = 0; i < 2; i++) {
            if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            char chunk[65536];
            char *dst = chunk;
            size_t room = sizeof chunk;
            if (i == 0 && buf) {
                dst = buf + have;
                room = want - have;
                if (room == 0) {
                    dst = chunk; /* more than a result holds: read and drop */
                    room = sizeof chunk;
                }
            }
            ssize_t r = read(fds[i].fd, dst, room);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) {
                close(fds[i].fd);
                fds[i].fd = -1;
                open_fds--;
                continue;
            }
            if (i == 0 && dst != chunk) have += (size_t)r;
            if (i == 1) tail_append(tail, &tail_len, chunk, (size_t)r);
        }
    }
    for (int i = 0; i < 2; i++)
        if (fds[i].fd >= 0) close(fds[i].fd);
    int status = 0;
    struct rusage ru;
    memset(&ru, 0, sizeof ru);
    while (wait4(pid, &status, 0, &ru) < 0 && errno == EINTR) {
    }
    out->wall_seconds = deftsim_now() - t0;
    out->peak_rss_bytes = (uint64_t)ru.ru_maxrss * 1024u;
    tail[tail_len] = '\0';
    /* The last lines of what SimGrid said, on one line, for the error message. */
    for (size_t i = 0; i < tail_len; i++)
        if (tail[i] == '\n' || tail[i] == '\r') tail[i] = ' ';
    /* Without the backtrace SimGrid prints after a failed assertion: the reason is before it. */
    char *bt = strstr(tail, " Backtrace (displayed");
    if (bt) {
        *bt = '\0';
        tail_len = (size_t)(bt - tail);
    }

    child_header h;
    memset(&h, 0, sizeof h);
    if (have >= sizeof h) memcpy(&h, buf, sizeof h);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || read_failed || h.magic != SIM_MAGIC) {
        char how[64];
        if (WIFSIGNALED(status))
            snprintf(how, sizeof how, "killed by signal %d", WTERMSIG(status));
        else if (WIFEXITED(status))
            snprintf(how, sizeof how, "exit status %d", WEXITSTATUS(status));
        else
            snprintf(how, sizeof how, "status %d", status);
        st = deftsim_error_set(DEFTSIM_E_RUNTIME,
                               "network simulation (SimGrid, %u workers, platform %s) failed: %s%s%s",
                               P, tmp_path_is_fd ? "generated" : platform, how,
                               tail_len ? "; SimGrid said: " : "", tail_len ? tail : "");
        free(buf);
        goto fail;
    }
    if (h.rc != 0) {
        char msg[MSG_MAX + 1];
        size_t ml = h.msglen < MSG_MAX ? h.msglen : MSG_MAX;
        memcpy(msg, buf + sizeof h, ml);
        msg[ml] = '\0';
        st = deftsim_error_set(DEFTSIM_E_RUNTIME, "network simulation (%u workers): %s%s%s", P,
                               msg, tail_len ? "; SimGrid said: " : "", tail_len ? tail : "");
        free(buf);
        goto fail;
    }
    size_t need = sizeof h + h.msglen + cells * 2 * (sizeof(double) + sizeof(uint64_t));
    if (have != need) {
        st = deftsim_error_set(DEFTSIM_E_RUNTIME,
                               "network simulation: %zu bytes of results, expected %zu", have, need);
        free(buf);
        goto fail;
    }
    const char *q = buf + sizeof h + h.msglen;
    memcpy(out->start, q, cells * sizeof(double));
    q += cells * sizeof(double);
    memcpy(out->end, q, cells * sizeof(double));
    q += cells * sizeof(double);
    memcpy(out->sent, q, cells * sizeof(uint64_t));
    q += cells * sizeof(uint64_t);
    memcpy(out->recv, q, cells * sizeof(uint64_t));
    free(buf);
    out->messages = h.messages;
    if (platform_fd >= 0) close(platform_fd);
    else if (tmp_path[0]) unlink(tmp_path);

    /* Per schedule: the end of its last step, and its communication time. */
    for (size_t i = 0; i < nsched; i++) {
        double it = 0, comm = 0;
        for (size_t k = 0; k < scheds[i]->nsteps; k++) {
            size_t row = out->step_offset[i] + k;
            double last_in = 0, last_out = 0;
            for (uint32_t w = 0; w < P; w++) {
                double s = out->start[row * P + w], e = out->end[row * P + w];
                if (s > last_in) last_in = s;
                if (e > last_out) last_out = e;
            }
            if (last_out > it) it = last_out;
            if (scheds[i]->steps[k].kind != DEFTSIM_STEP_COMPUTE) comm += last_out - last_in;
        }
        out->iteration_seconds[i] = it;
        out->comm_seconds[i] = comm;
    }
    return DEFTSIM_OK;

nomem:
    st = deftsim_error_set(DEFTSIM_E_NOMEM, "network simulation: out of memory for %u workers", P);
fail:
    if (platform_fd >= 0) close(platform_fd);
    else if (tmp_path[0]) unlink(tmp_path);
    deftsim_sim_result_free(out);
    return st;
}
