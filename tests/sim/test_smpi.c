/* test_smpi.c - every collective algorithm of sim/ against SimGrid SMPI's built-in
 * implementation of the same algorithm (suite sim): the same generated platform, the same
 * network model and settings on both sides, a small MPI program (smpi_coll.c) run by smpirun
 * against deftsim's simulation of the same one-step schedule. Each comparison prints deftsim's
 * time, SMPI's, and the closed-form alpha-beta prediction where the algorithm has one; they
 * must agree within 1 %.
 *
 * SMPI is configured so that it simulates what deftsim does: no computation between MPI calls
 * (smpi/simulate-computation off, smpi/wtime 0: reading the clock costs nothing), the same
 * eager threshold (smpi/send-is-detached-thresh) and timing precision, buffers from
 * SMPI_SHARED_MALLOC. Some SMPI algorithms allocate private temporaries of P times the size
 * (allgather bruck, allgatherv mpich_rdb and ompi_bruck's packed messages), real memory for
 * every rank at once: those run up to the size where P * P * size stays within 1 GiB (8 MiB at
 * P = 4, 4 MiB at P = 16, 256 KiB at P = 64). SMPI's ring allreduce (lr) handles a count that
 * P does not divide with a second allreduce of the remainder, where MPICH and Open MPI (and
 * deftsim) spread it over the chunks, so at P = 12 its sizes are rounded up to multiples of
 * 12 elements. */
#include <criterion/criterion.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "deftsim_schedule.h"
#include "deftsim_sim.h"
#include "deftsim_util.h"
#include "simtest.h"

#define TEMP_BUDGET (1ull << 30)

typedef struct {
    const char *label;         /* deftsim's collective and algorithm */
    deftsim_step_kind kind;    /* DEFTSIM_STEP_SENDRECV: gTop-k's tree */
    int algo;
    int uneven;                /* allgatherv with uneven contributions */
    const char *smpi_kind;     /* smpi_coll.c's KIND */
    const char *smpi_coll;     /* smpi/<coll>:<algo> */
    const char *smpi_algo;
    int temp_heavy;
} coll_case;

static const coll_case cases[] = {
    {"allgather ring", DEFTSIM_STEP_ALLGATHER, DEFTSIM_AG_RING, 0, "allgatherv_equal", "allgatherv", "mpich_ring", 0},
    {"allgatherv ring", DEFTSIM_STEP_ALLGATHER, DEFTSIM_AG_RING, 1, "allgatherv", "allgatherv", "mpich_ring", 0},
    {"allgather recursive_doubling", DEFTSIM_STEP_ALLGATHER, DEFTSIM_AG_RECURSIVE_DOUBLING, 0, "allgather", "allgather", "rdb", 0},
    {"allgatherv recursive_doubling", DEFTSIM_STEP_ALLGATHER, DEFTSIM_AG_RECURSIVE_DOUBLING, 1, "allgatherv", "allgatherv", "mpich_rdb", 1},
    {"allgather bruck", DEFTSIM_STEP_ALLGATHER, DEFTSIM_AG_BRUCK, 0, "allgather", "allgather", "bruck", 1},
    {"allgatherv bruck", DEFTSIM_STEP_ALLGATHER, DEFTSIM_AG_BRUCK, 1, "allgatherv", "allgatherv", "ompi_bruck", 1},
    {"allreduce ring", DEFTSIM_STEP_ALLREDUCE, DEFTSIM_AR_RING, 0, "allreduce", "allreduce", "lr", 0},
    {"allreduce recursive_doubling", DEFTSIM_STEP_ALLREDUCE, DEFTSIM_AR_RECURSIVE_DOUBLING, 0, "allreduce", "allreduce", "rdb", 0},
    {"allreduce rabenseifner", DEFTSIM_STEP_ALLREDUCE, DEFTSIM_AR_RABENSEIFNER, 0, "allreduce", "allreduce", "rab_rdb", 0},
    {"bcast binomial", DEFTSIM_STEP_BCAST, DEFTSIM_BC_BINOMIAL, 0, "bcast", "bcast", "binomial_tree", 0},
    {"bcast scatter_rdb_allgather", DEFTSIM_STEP_BCAST, DEFTSIM_BC_SCATTER_RDB_ALLGATHER, 0, "bcast", "bcast", "scatter_rdb_allgather", 0},
    {"bcast scatter_ring_allgather", DEFTSIM_STEP_BCAST, DEFTSIM_BC_SCATTER_RING_ALLGATHER, 0, "bcast", "bcast", "scatter_LR_allgather", 0},
    {"gtopk tree + bcast binomial", DEFTSIM_STEP_SENDRECV, DEFTSIM_BC_BINOMIAL, 0, "gtopk", "bcast", "binomial_tree", 0},
};

/* Ok-Topk's exchanges: the alltoall of its counts and its split-and-reduce rounds (P2P). */
static const coll_case p2p_cases[] = {
    {"alltoall pairwise", DEFTSIM_STEP_ALLTOALL, 0, 0, "alltoall", "alltoall", "ring", 0},
    {"oktopk p2p rounds", DEFTSIM_STEP_P2P, 0, 0, "oktopk", "alltoall", "ring", 0},
    {"oktopk p2p rounds (uneven)", DEFTSIM_STEP_P2P, 0, 1, "oktopk_uneven", "alltoall", "ring", 0},
};

static const uint64_t all_sizes[] = {1024, 16384, 65536, 262144, 1u << 20, 8u << 20};
#define NSIZES (sizeof all_sizes / sizeof all_sizes[0])

static char tmpdir[64];
static int compared, failed;

static void setup(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/deftsim-smpi-XXXXXX");
    cr_assert(mkdtemp(tmpdir));
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
}

TestSuite(smpi, .init = setup, .fini = teardown);

static const char *env_or_fail(const char *name)
{
    const char *v = getenv(name);
    cr_assert(v && v[0], "%s is not set (run the tests through meson test)", name);
    return v;
}

/* Runs the SMPI program on P ranks and returns, per size, the time of the last rank. */
static void run_smpi(const coll_case *c, const deftsim_sim_params *p, uint32_t root,
                     const uint64_t *sizes, size_t n, double *out, double *wall)
{
    char plat[128], hosts[128], errf[128];
    snprintf(plat, sizeof plat, "%s/platform_%u.xml", tmpdir, p->P);
    snprintf(hosts, sizeof hosts, "%s/hosts_%u", tmpdir, p->P);
    snprintf(errf, sizeof errf, "%s/smpi.err", tmpdir);
    cr_assert_eq(deftsim_sim_write_platform(p, plat), DEFTSIM_OK, "%s", deftsim_error_message());
    FILE *h = fopen(hosts, "w");
    cr_assert(h);
    for (uint32_t r = 0; r < p->P; r++) fprintf(h, "node-%u\n", r);
    fclose(h);
    char cmd[4096];
    int o = snprintf(cmd, sizeof cmd,
                     "%s -np %u -platform %s -hostfile %s --cfg=smpi/%s:%s --cfg=network/model:%s "
                     "--cfg=network/crosstraffic:%d --cfg=smpi/host-speed:1Gf "
                     "--cfg=smpi/simulate-computation:no --cfg=smpi/wtime:0 "
                     "--cfg=smpi/send-is-detached-thresh:%llu --cfg=surf/precision:1e-9 "
                     "--cfg=smpi/shared-malloc-blocksize:67108864 --cfg=smpi/tmpdir:%s "
                     "--log=root.thres:warning %s %s %u %u",
                     env_or_fail("DEFTSIM_SMPIRUN"), p->P, plat, hosts, c->smpi_coll, c->smpi_algo,
                     deftsim_net_model_name(p->model), p->crosstraffic,
                     (unsigned long long)p->eager_threshold, tmpdir, env_or_fail("DEFTSIM_SMPI_COLL"),
                     c->smpi_kind, p->elem_bytes, root);
    for (size_t i = 0; i < n; i++) o += snprintf(cmd + o, sizeof cmd - (size_t)o, " %llu", (unsigned long long)sizes[i]);
    snprintf(cmd + o, sizeof cmd - (size_t)o, " 2>%s", errf);
    double t0 = deftsim_now();
    FILE *f = popen(cmd, "r");
    cr_assert(f, "popen %s", cmd);
    for (size_t i = 0; i < n; i++) out[i] = -1;
    char line[512];
    size_t lines = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned k, rank;
        double t;
        if (sscanf(line, "R %u %u %lf", &k, &rank, &t) == 3 && k < n) {
            if (t > out[k]) out[k] = t;
            lines++;
        }
    }
    int rc = pclose(f);
    *wall = deftsim_now() - t0;
    if (rc != 0 || lines != n * p->P) {
        char *err = NULL;
        deftsim_read_file(errf, &err, NULL);
        cr_assert_fail("smpirun failed (status %d, %zu of %zu result lines): %s\n%s", rc, lines,
                       n * p->P, cmd, err ? err : "");
    }
}

static void compare(const coll_case *c, deftsim_sim_params *p, const char *setting)
{
    uint32_t P = p->P, root = 1 % P;
    p->allgather = (deftsim_allgather_algo)c->algo;
    p->allreduce = (deftsim_allreduce_algo)c->algo;
    p->bcast = (deftsim_bcast_algo)c->algo;
    uint64_t sizes[NSIZES];
    size_t n = 0;
    for (size_t i = 0; i < NSIZES; i++) {
        uint64_t s = all_sizes[i];
        if (c->temp_heavy && (uint64_t)P * P * s > TEMP_BUDGET) continue;
        if (c->kind == DEFTSIM_STEP_ALLREDUCE && c->algo == DEFTSIM_AR_RING) {
            uint64_t unit = (uint64_t)P * p->elem_bytes;
            s = (s + unit - 1) / unit * unit;
        }
        sizes[n++] = s;
    }
    deftsim_schedule s[NSIZES];
    for (size_t i = 0; i < n; i++) {
        if (c->kind == DEFTSIM_STEP_SENDRECV)
            simtest_gtopk(&s[i], P, sizes[i]);
        else if (c->kind == DEFTSIM_STEP_P2P)
            simtest_oktopk_rounds(&s[i], P, sizes[i], c->uneven);
        else
            simtest_one_step(&s[i], P, c->kind, sizes[i], c->uneven, root);
    }
    double t0 = deftsim_now();
    double *ours = simtest_run(p, s, n, NULL);
    double our_wall = deftsim_now() - t0;
    double smpi[NSIZES], smpi_wall;
    run_smpi(c, p, root, sizes, n, smpi, &smpi_wall);
    for (size_t i = 0; i < n; i++) {
        double f = NAN;
        int flat_cm02 = p->topology == DEFTSIM_TOPO_FLAT && p->model == DEFTSIM_NET_CM02 && !p->crosstraffic;
        if (flat_cm02 && !c->uneven)
            f = c->kind == DEFTSIM_STEP_SENDRECV   ? simtest_formula_gtopk(p, sizes[i])
                : c->kind == DEFTSIM_STEP_ALLTOALL ? simtest_formula_alltoall(p, sizes[i])
                : c->kind == DEFTSIM_STEP_P2P      ? simtest_formula_oktopk(p, sizes[i])
                                                   : simtest_formula(p, c->kind, sizes[i]);
        double rel = (ours[i] - smpi[i]) / smpi[i];
        char fs[32] = "-";
        if (!isnan(f)) snprintf(fs, sizeof fs, "%.6e", f);
        printf("| %-30s | %-22s | %3u | %8llu | %.6e | %.6e | %-12s | %+.1e |\n", c->label, setting, P,
               (unsigned long long)sizes[i], ours[i], smpi[i], fs, rel);
        compared++;
        if (!(fabs(rel) <= 0.01)) failed++;
        cr_expect(fabs(rel) <= 0.01, "%s %s P=%u %llu bytes: deftsim %.12e s, SMPI %.12e s (%+.3e)",
                  c->label, setting, P, (unsigned long long)sizes[i], ours[i], smpi[i], rel);
        if (!isnan(f))
            cr_expect(fabs(ours[i] - f) <= 1e-9 * f + 4e-9, "%s P=%u %llu bytes: deftsim %.12e s, formula %.12e s",
                      c->label, P, (unsigned long long)sizes[i], ours[i], f);
        deftsim_schedule_free(&s[i]);
    }
    fprintf(stderr, "%s %s P=%u: deftsim %.2f s, smpirun %.2f s wall\n", c->label, setting, P,
            our_wall, smpi_wall);
    fflush(stdout);
    free(ours);
}

static void header(void)
{
    printf("| %-30s | %-22s | %3s | %8s | %-12s | %-12s | %-12s | %-8s |\n", "algorithm", "platform, model",
           "P", "bytes", "deftsim (s)", "SMPI (s)", "formula (s)", "rel");
}

/* Every algorithm on the flat cluster with CM02 at P = 4, 16, 64 and (for the remainder
 * handling) 12, sizes 1 KiB to 8 MiB per rank. */
Test(smpi, every_algorithm_flat_cm02)
{
    header();
    const uint32_t Ps[] = {4, 16, 64, 12};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++)
        for (size_t pi = 0; pi < sizeof Ps / sizeof Ps[0]; pi++) {
            deftsim_sim_params p;
            simtest_params(&p, Ps[pi]);
            compare(&cases[ci], &p, "flat, CM02");
        }
    printf("%d comparisons, %d outside 1 %%\n", compared, failed);
    cr_expect_geq(compared, 250);
}

/* The other topologies, models and crosstraffic on: the default algorithms and the ring. */
Test(smpi, topologies_and_models)
{
    header();
    const deftsim_topology topos[] = {DEFTSIM_TOPO_FLAT, DEFTSIM_TOPO_FATTREE, DEFTSIM_TOPO_TORUS,
                                      DEFTSIM_TOPO_DRAGONFLY};
    const deftsim_net_model models[] = {DEFTSIM_NET_LV08, DEFTSIM_NET_SMPI};
    const size_t which[] = {1, 5, 8, 9}; /* allgatherv ring, allgatherv bruck, rabenseifner, binomial */
    for (size_t ti = 0; ti < 4; ti++)
        for (size_t mi = 0; mi < 2; mi++)
            for (size_t wi = 0; wi < sizeof which / sizeof which[0]; wi++) {
                deftsim_sim_params p;
                simtest_params(&p, ti == 0 ? 64 : 16);
                p.topology = topos[ti];
                p.model = models[mi];
                p.crosstraffic = 1;
                char setting[64];
                snprintf(setting, sizeof setting, "%s, %s, cross", deftsim_topology_name(p.topology),
                         deftsim_net_model_name(p.model));
                compare(&cases[which[wi]], &p, setting);
            }
    printf("%d comparisons, %d outside 1 %%\n", compared, failed);
    cr_expect_geq(compared, 150);
}

/* Ok-Topk's exchanges: SMPI's MPI_Alltoall (its ring, MPICH's pairwise exchange) and the
 * split-and-reduce rounds written with MPI_Irecv/MPI_Isend/MPI_Waitall, on the flat cluster
 * with CM02 at P = 4, 16, 64, 12 and 7, and on the fat tree with LV08 and crosstraffic. */
Test(smpi, alltoall_and_p2p_rounds)
{
    header();
    const uint32_t Ps[] = {4, 16, 64, 12, 7};
    for (size_t ci = 0; ci < sizeof p2p_cases / sizeof p2p_cases[0]; ci++) {
        for (size_t pi = 0; pi < sizeof Ps / sizeof Ps[0]; pi++) {
            deftsim_sim_params p;
            simtest_params(&p, Ps[pi]);
            compare(&p2p_cases[ci], &p, "flat, CM02");
        }
        deftsim_sim_params p;
        simtest_params(&p, 16);
        p.topology = DEFTSIM_TOPO_FATTREE;
        p.model = DEFTSIM_NET_LV08;
        p.crosstraffic = 1;
        compare(&p2p_cases[ci], &p, "fattree, LV08, cross");
    }
    printf("%d comparisons, %d outside 1 %%\n", compared, failed);
    cr_expect_geq(compared, 100);
}
