/* nccl_busbw.c - the simulated bus bandwidth of NCCL's allreduce, as nccl-tests reports it.
 *
 * Not a test: a measuring program (scripts/nccl-busbw.sh runs it; docs/NETWORK.md, "Against
 * nccl-tests", holds its table). For each node count, size, network model and NCCL allreduce
 * algorithm it simulates one ALLREDUCE step of S bytes (4-byte elements) on the network a
 * scenario would give: a default scenario with the --set keys applied and checked as
 * `deftsim run` applies them (so `network.preset=dgx-h100` fills the node keys from the
 * preset), turned into the simulation's parameters by deftsim_config_sim_params. It prints
 * nccl-tests' two bandwidths (doc/PERFORMANCE.md of github.com/NVIDIA/nccl-tests):
 * algbw = S / t and, for the allreduce, busbw = algbw * 2 (n - 1) / n over the n ranks.
 *
 *   nccl_busbw [--nodes 1,2,8,32] [--sizes 1048576,...] [--algos ring,tree,auto]
 *              [--models CM02,LV08] [--set network.KEY=VALUE]... [--max-tree-bytes B]
 *
 * The CM02 runs set network.crosstraffic=0 (the alpha-beta model); the others keep the
 * scenario's crosstraffic. --max-tree-bytes skips the exact tree above that size at 16 or
 * more nodes (its message count grows as P S; the row says "skipped"). One CSV row per point
 * on stdout. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deftsim_config.h"
#include "deftsim_schedule.h"
#include "deftsim_sim.h"

#define MAX_LIST 32
#define MAX_SET 32

static size_t split(char *text, char **items)
{
    size_t n = 0;
    for (char *tok = strtok(text, ","); tok && n < MAX_LIST; tok = strtok(NULL, ","))
        items[n++] = tok;
    return n;
}

/* A default scenario (as `deftsim bench sim` makes one: a model named, which the network
 * ignores) with the --set keys applied. */
static deftsim_status open_config(char **sets, size_t nsets, deftsim_config **cfg)
{
    deftsim_status st = deftsim_config_default("busbw", cfg);
    if (!st) st = deftsim_config_apply_override(*cfg, "gradients.model=resnet18_cifar10");
    for (size_t i = 0; !st && i < nsets; i++) st = deftsim_config_apply_override(*cfg, sets[i]);
    return st;
}

/* One point: its simulated seconds, messages and wall seconds; 0 on success. */
static int run_point(char **sets, size_t nsets, const char *model, const char *algo,
                     uint32_t P, uint64_t bytes, double *t, uint64_t *msgs, double *wall)
{
    deftsim_config *cfg = NULL;
    char buf[256];
    deftsim_status st = open_config(sets, nsets, &cfg);
    const char *extra[4];
    size_t ne = 0;
    static char mset[64], aset[64], pset[64];
    snprintf(mset, sizeof mset, "network.model=%s", model);
    snprintf(aset, sizeof aset, "network.nccl_algorithm=%s", algo);
    snprintf(pset, sizeof pset, "workers.counts=%u", P);
    extra[ne++] = mset;
    extra[ne++] = aset;
    extra[ne++] = pset;
    if (strcmp(model, "CM02") == 0) extra[ne++] = "network.crosstraffic=0";
    for (size_t i = 0; !st && i < ne; i++) {
        snprintf(buf, sizeof buf, "%s", extra[i]);
        st = deftsim_config_apply_override(cfg, buf);
    }
    if (!st) st = deftsim_config_check(cfg);
    if (st) {
        fprintf(stderr, "nccl_busbw: %s\n", deftsim_error_message());
        deftsim_config_free(cfg);
        return 2;
    }
    deftsim_sim_params sp;
    deftsim_config_sim_params(cfg, P, 4, &sp);
    deftsim_schedule s;
    deftsim_schedule_init(&s, P);
    deftsim_step *step = deftsim_schedule_add(&s, DEFTSIM_STEP_ALLREDUCE, "dense");
    if (!step) {
        fprintf(stderr, "nccl_busbw: %s\n", deftsim_error_message());
        deftsim_schedule_free(&s);
        deftsim_config_free(cfg);
        return 1;
    }
    for (uint32_t w = 0; w < P; w++) step->bytes[w] = bytes;
    const deftsim_schedule *sched = &s;
    deftsim_sim_result r;
    memset(&r, 0, sizeof r);
    st = deftsim_sim_run(&sp, &sched, 1, &r);
    int rc = 0;
    if (st) {
        fprintf(stderr, "nccl_busbw: %s\n", deftsim_error_message());
        rc = 1;
    } else {
        *t = r.iteration_seconds[0];
        *msgs = r.messages;
        *wall = r.wall_seconds;
    }
    deftsim_sim_result_free(&r);
    deftsim_schedule_free(&s);
    deftsim_config_free(cfg);
    return rc;
}

int main(int argc, char **argv)
{
    char nodes_s[256] = "1,2,8,32", sizes_s[512] = "1048576,4194304,16777216,67108864,"
                                                    "268435456,1073741824";
    char algos_s[128] = "ring,tree,auto", models_s[64] = "CM02,LV08";
    char *sets[MAX_SET];
    size_t nsets = 0;
    uint64_t max_tree = UINT64_MAX;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) {
            fprintf(stderr, "nccl_busbw: %s needs a value\n", a);
            return 2;
        }
        if (strcmp(a, "--nodes") == 0) snprintf(nodes_s, sizeof nodes_s, "%s", v);
        else if (strcmp(a, "--sizes") == 0) snprintf(sizes_s, sizeof sizes_s, "%s", v);
        else if (strcmp(a, "--algos") == 0) snprintf(algos_s, sizeof algos_s, "%s", v);
        else if (strcmp(a, "--models") == 0) snprintf(models_s, sizeof models_s, "%s", v);
        else if (strcmp(a, "--max-tree-bytes") == 0) max_tree = strtoull(v, NULL, 10);
        else if (strcmp(a, "--set") == 0 && nsets < MAX_SET) sets[nsets++] = argv[i + 1];
        else {
            fprintf(stderr, "nccl_busbw: unknown option %s (or more than 32 --set)\n", a);
            return 2;
        }
        i++;
    }
    char *nodes[MAX_LIST], *sizes[MAX_LIST], *algos[MAX_LIST], *models[MAX_LIST];
    size_t nn = split(nodes_s, nodes), ns = split(sizes_s, sizes), na = split(algos_s, algos),
           nmod = split(models_s, models);
    /* gpus_per_node as the scenario resolves it (the preset's 8, or a --set). */
    deftsim_config *cfg = NULL;
    deftsim_status st = open_config(sets, nsets, &cfg);
    if (!st) st = deftsim_config_apply_override(cfg, "workers.counts=8");
    if (!st) st = deftsim_config_check(cfg);
    if (st) {
        fprintf(stderr, "nccl_busbw: %s\n", deftsim_error_message());
        deftsim_config_free(cfg);
        return 2;
    }
    deftsim_sim_params sp;
    deftsim_config_sim_params(cfg, 8, 4, &sp);
    deftsim_config_free(cfg);
    uint32_t G = sp.gpus_per_node;
    printf("nodes,P,bytes,model,algorithm,channels,mode,simulated_s,algbw_GBps,busbw_GBps,"
           "messages,wall_s\n");
    for (size_t ni = 0; ni < nn; ni++)
        for (size_t si = 0; si < ns; si++)
            for (size_t mi = 0; mi < nmod; mi++)
                for (size_t ai = 0; ai < na; ai++) {
                    uint32_t N = (uint32_t)strtoul(nodes[ni], NULL, 10), P = N * G;
                    uint64_t S = strtoull(sizes[si], NULL, 10);
                    if (strcmp(algos[ai], "tree") == 0 && N >= 16 && S > max_tree) {
                        printf("%u,%u,%" PRIu64 ",%s,%s,%u,%s,skipped,,,,\n", N, P, S,
                               models[mi], algos[ai], sp.nccl_channels,
                               deftsim_sim_mode_name(sp.mode));
                        continue;
                    }
                    double t = 0, wall = 0;
                    uint64_t msgs = 0;
                    int rc = run_point(sets, nsets, models[mi], algos[ai], P, S, &t, &msgs, &wall);
                    if (rc) return rc;
                    double algbw = (double)S / t / 1e9;
                    double busbw = P > 1 ? algbw * 2.0 * (P - 1) / P : 0;
                    printf("%u,%u,%" PRIu64 ",%s,%s,%u,%s,%.9e,%.2f,%.2f,%" PRIu64 ",%.2f\n", N, P,
                           S, models[mi], algos[ai], sp.nccl_channels,
                           deftsim_sim_mode_name(sp.mode), t, algbw, busbw, msgs, wall);
                    fflush(stdout);
                }
    return 0;
}
