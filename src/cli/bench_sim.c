/* bench_sim.c - `deftsim bench sim`: how the network simulation scales with P.
 *
 * One iteration of every sparsifier's communication, for a model's gradient at one density,
 * simulated at each P: the wall time and peak memory of the simulation, the simulated time and
 * the messages it took. The schedules are the ones the sparsifiers emit (docs/SPARSIFIERS.md),
 * with byte counts from their formulas instead of a run of the kernels (running every
 * sparsifier's selection for 4096 workers would take longer than what is measured here), and
 * without compute steps: only the network is timed. Each method's closed form sits beside it
 * in sparsifiers/ (deftsim_method_closed_form). Where a count depends on the gradient,
 * the bench assumes uniformly spread selections: topk's union of P independent k-subsets
 * holds n (1 - (1 - k/n)^P) indices, DEFT's workers each hold k/P and its union k.
 * Each (P, method) is one simulation in its own process, as `deftsim run` simulates a point;
 * the processes of one P are forked from one that loaded the platform once for all of them
 * (deftsim_sim_run_batch), so the first method's wall time includes the load. */
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "cli.h"
#include "deftsim_conditions.h"
#include "deftsim_config.h"
#include "deftsim_model.h"
#include "deftsim_schedule.h"
#include "deftsim_sim.h"
#include "deftsim_util.h"

int deftsim_bench_sim(int argc, char **argv);

#define MAX_P 16
#define MAX_OV 32

static uint64_t self_rss(void)
{
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 ? (uint64_t)ru.ru_maxrss * 1024u : 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The default --methods: the registry's default list, comma-separated without spaces. */
static void default_methods(char *buf, size_t cap)
{
    char list[400];
    deftsim_method_list(DEFTSIM_METHOD_CAP_DEFAULT, list, sizeof list);
    size_t o = 0;
    for (const char *c = list; *c && o + 1 < cap; c++)
        if (*c != ' ') buf[o++] = *c;
    buf[o] = '\0';
}

static void usage(FILE *out)
{
    char dm[400];
    default_methods(dm, sizeof dm);
    fprintf(out,
            "usage: deftsim bench sim [--P LIST] [--methods LIST] [--model NAME] [--density D]\n"
            "                         [--reps N] [--csv] [--set network.KEY=VALUE]...\n"
            "\n"
            "Simulates one iteration of every sparsifier's communication (no compute) for a\n"
            "model's gradient at one density, at each worker count, each in its own process, and\n"
            "prints the wall time, peak memory, messages and simulated time, the total per P,\n"
            "and how wall time grows with P. Schedules follow docs/SPARSIFIERS.md with byte\n"
            "counts from its formulas (uniformly spread selections). The platform is loaded\n"
            "once a P: the first method's wall time includes its load.\n"
            "  --P LIST          worker counts (default 64,256,1024,4096)\n"
            "  --methods LIST    sparsifiers (default %s)\n"
            "  --model NAME      model table (default resnet18_cifar10)\n"
            "  --density D       density (default 0.01)\n"
            "  --reps N          runs of each simulation; the median wall time is reported\n"
            "                    (default 1)\n"
            "  --csv             one CSV row per (P, method)\n"
            "  --set KEY=VALUE   a [network] key, as in a scenario (network.allgather=ring,\n"
            "                    network.preset=dgx-h100, ...), or a method's own [sparsify]\n"
            "                    option its closed form reads (sparsify.powersgd_rank=4);\n"
            "                    communication only: [compute] keys are refused (deftsim run,\n"
            "                    sweep and train take them)\n"
            "  -h, --help        this help\n"
            "Targets (docs/NETWORK.md), for the default methods together with the default\n"
            "algorithms: P = 1024 within 10 s and P = 4096 within 60 s under 1 GiB of memory\n"
            "(network.mode=exact, the default); P = 4096 within 20 s and P = 16384 within 120 s\n"
            "under 2 GiB with --set network.mode=analytic (its times within 1 %% of exact's;\n"
            "the \"ran\" column says which mode ran). On GPU clusters (network.library=nccl\n"
            "with network.gpus_per_node > 1, as network.preset=dgx-h100): P = 1024 within 20 s\n"
            "under 1 GiB, all ten methods (--methods) in network.mode=approximate.\n", dm);
}

/* --methods: names from the registry, at most DEFTSIM_METHOD_MAX. */
static int parse_methods(const char *mlist, deftsim_method *methods, size_t *nm)
{
    char buf[512];
    snprintf(buf, sizeof buf, "%s", mlist);
    *nm = 0;
    for (char *tok = strtok(buf, ", "); tok; tok = strtok(NULL, ", ")) {
        deftsim_method m;
        if (deftsim_method_from_name(tok, &m) || *nm == DEFTSIM_METHOD_MAX) return -1;
        methods[(*nm)++] = m;
    }
    return 0;
}

/* Whether a --set names a method's own option ("sparsify.powersgd_rank=4"). */
static int method_option(const char *set)
{
    char key[64];
    const char *eq = strchr(set, '=');
    if (strncmp(set, "sparsify.", 9) != 0 || !eq || (size_t)(eq - set - 9) >= sizeof key) return 0;
    memcpy(key, set + 9, (size_t)(eq - set - 9));
    key[eq - set - 9] = '\0';
    deftsim_method m;
    size_t pos;
    return deftsim_method_option_find(key, &m, &pos) == 0;
}

/* One method's row at one P: its median wall time over the reps, and its peak memory, added to
 * the P's totals. */
static void print_row(const deftsim_sim_params *sp, deftsim_method method, uint32_t P,
                      const deftsim_schedule *s, const deftsim_sim_result *r, unsigned reps,
                      int csv, double *total_wall, uint64_t *peak)
{
    double walls[100];
    uint64_t rss = 0;
    for (unsigned rep = 0; rep < reps; rep++) {
        walls[rep] = r[rep].wall_seconds;
        if (r[rep].peak_rss_bytes > rss) rss = r[rep].peak_rss_bytes;
    }
    qsort(walls, reps, sizeof walls[0], cmp_double);
    double med = reps % 2 ? walls[reps / 2] : 0.5 * (walls[reps / 2 - 1] + walls[reps / 2]);
    *total_wall += med;
    if (rss > *peak) *peak = rss;
    const deftsim_sim_result *last = &r[reps - 1];
    if (csv)
        printf("%u,%s,%zu,%" PRIu64 ",%.9g,%.6g,%.6g,%" PRIu64 ",%s\n", P,
               deftsim_method_name(method), s->nsteps, last->messages, last->iteration_seconds[0],
               med, walls[0], rss, deftsim_sim_mode_name(last->mode));
    else
        printf("%7u  %-8s %6zu %12" PRIu64 " %15.6e %10.3f %10.1f  %s\n", P,
               deftsim_method_name(method), s->nsteps, last->messages, last->iteration_seconds[0],
               med, (double)rss / 1048576.0, deftsim_sim_mode_name(last->mode));
    /* Analytic mode that fell back to the full simulation: why. */
    if (sp->mode == DEFTSIM_SIM_ANALYTIC && last->mode != DEFTSIM_SIM_ANALYTIC)
        fprintf(csv ? stderr : stdout, "         %s P=%u ran exact: %s\n",
                deftsim_method_name(method), P, last->mode_note);
    fflush(stdout);
}

/* Every method at one P: their closed-form schedules, each simulated reps times in one batch
 * (deftsim_sim_run_batch: the platform loaded once for all; each method's first run, its
 * wall time from the end of the one before, the first one's with the load), then their rows. */
static deftsim_status run_P(deftsim_sim_params *sp, const deftsim_config *cfg,
                            const deftsim_method *methods, size_t nm, deftsim_closed_form_in *wl,
                            uint32_t P, unsigned reps, int csv, double *total_wall, uint64_t *peak)
{
    deftsim_status st = DEFTSIM_OK;
    size_t njobs = nm * reps, made = 0, failed = 0;
    deftsim_schedule *s = calloc(nm ? nm : 1, sizeof *s);
    const deftsim_schedule **ptr = calloc(nm ? nm : 1, sizeof *ptr);
    deftsim_sim_job *jobs = calloc(njobs ? njobs : 1, sizeof *jobs);
    deftsim_sim_result *r = calloc(njobs ? njobs : 1, sizeof *r);
    if (!s || !ptr || !jobs || !r) {
        st = deftsim_error_nomem("bench sim");
        goto done;
    }
    for (; made < nm; made++) {
        wl->opts = deftsim_config_method_opts(cfg, methods[made]);
        if ((st = deftsim_method_closed_form(methods[made], wl, P, &s[made]))) {
            deftsim_schedule_free(&s[made]);
            if (st == DEFTSIM_E_NOMEM) deftsim_error_nomem("bench sim");
            goto done;
        }
        ptr[made] = &s[made];
    }
    /* Method by method, each one's reps in a row. */
    for (size_t m = 0; m < nm; m++)
        for (unsigned rep = 0; rep < reps; rep++) jobs[m * reps + rep] = (deftsim_sim_job){&ptr[m], 1};
    sp->P = P;
    if ((st = deftsim_sim_run_batch(sp, jobs, njobs, r, &failed))) {
        st = deftsim_error_wrap(st, "%s P=%u", deftsim_method_name(methods[failed / reps]), P);
        goto done;
    }
    for (size_t m = 0; m < nm; m++)
        print_row(sp, methods[m], P, &s[m], &r[m * reps], reps, csv, total_wall, peak);
    for (size_t i = 0; i < njobs; i++) deftsim_sim_result_free(&r[i]);
done:
    for (size_t m = 0; m < made; m++) deftsim_schedule_free(&s[m]);
    free(s);
    free(ptr);
    free(jobs);
    free(r);
    return st;
}

/* The totals per P against the targets, and how the wall time grows with P. */
static void print_totals(FILE *o, const int64_t *Ps, size_t nP, const double *total_wall,
                         const uint64_t *peak, const deftsim_sim_params *sp)
{
    int analytic = sp->mode == DEFTSIM_SIM_ANALYTIC;
    /* GPU clusters (NCCL on multi-GPU nodes, as the dgx-h100 preset): P = 1024 within 20 s. */
    int gpu = sp->library == DEFTSIM_LIB_NCCL && sp->gpus_per_node > 1;
    int one_gpu_mpi = sp->library == DEFTSIM_LIB_MPI && sp->gpus_per_node <= 1;
    const uint64_t mib = analytic && !gpu ? 2048 : 1024;
    fprintf(o, "\n%7s  %-22s %12s  %s\n", "P", "all methods: wall (s)", "peak MiB", "target");
    for (size_t pi = 0; pi < nP; pi++) {
        char target[96] = "-";
        double limit = gpu          ? (Ps[pi] == 1024 ? 20 : 0)
                       : !one_gpu_mpi ? 0
                       : analytic     ? (Ps[pi] == 4096 ? 20 : Ps[pi] == 16384 ? 120 : 0)
                                      : (Ps[pi] == 1024 ? 10 : Ps[pi] == 4096 ? 60 : 0);
        if (limit > 0)
            snprintf(target, sizeof target, "<= %.0f s and < %" PRIu64 " MiB: %s", limit, mib,
                     total_wall[pi] <= limit && peak[pi] < (mib << 20) ? "met" : "MISSED");
        fprintf(o, "%7" PRId64 "  %22.3f %12.1f  %s\n", Ps[pi], total_wall[pi],
                (double)peak[pi] / 1048576.0, target);
    }
    if (nP > 1) {
        fprintf(o, "growth of the wall time with P (exponent b of wall ~ P^b):");
        for (size_t pi = 1; pi < nP; pi++)
            if (total_wall[pi - 1] > 0 && total_wall[pi] > 0)
                fprintf(o, " %" PRId64 "->%" PRId64 ": %.2f;", Ps[pi - 1], Ps[pi],
                        log(total_wall[pi] / total_wall[pi - 1]) / log((double)Ps[pi] / (double)Ps[pi - 1]));
        fprintf(o, "\n");
    }
    fprintf(o, "peak MiB: the simulating process's peak resident set (a fork of this one, whose "
               "own peak was %.1f MiB)\n", (double)self_rss() / 1048576.0);
}

int deftsim_bench_sim(int argc, char **argv)
{
    static const struct option opts[] = {
        {"P", required_argument, NULL, 'P'},       {"methods", required_argument, NULL, 'm'},
        {"model", required_argument, NULL, 'M'},   {"density", required_argument, NULL, 'd'},
        {"reps", required_argument, NULL, 'r'},    {"csv", no_argument, NULL, 'c'},
        {"set", required_argument, NULL, 's'},     {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    char dm[400];
    default_methods(dm, sizeof dm);
    const char *plist = "64,256,1024,4096", *mlist = dm;
    const char *model_name = "resnet18_cifar10";
    const char *ov[MAX_OV + 2];
    size_t nov = 0;
    double density = 0.01;
    unsigned reps = 1;
    int csv = 0, c;
    uint64_t u;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'P': plist = optarg; break;
        case 'm': mlist = optarg; break;
        case 'M': model_name = optarg; break;
        case 'd':
            if (deftsim_parse_double(optarg, &density) || !(density > 0) || density > 1)
                return deftsim_cli_usage_error("bench sim", "bad --density '%s'", optarg);
            break;
        case 'r':
            if (deftsim_parse_u64(optarg, &u) || u < 1 || u > 100)
                return deftsim_cli_usage_error("bench sim", "--reps must be 1..100");
            reps = (unsigned)u;
            break;
        case 'c': csv = 1; break;
        case 's':
            if (strncmp(optarg, "network.", 8) != 0 && !method_option(optarg))
                return deftsim_cli_usage_error("bench sim", "--set %s: only network.* keys and "
                                               "the methods' own sparsify.* options (the bench "
                                               "times communication alone; [compute] applies to "
                                               "run, sweep and train)", optarg);
            if (nov == MAX_OV) return deftsim_cli_usage_error("bench sim", "too many --set");
            ov[nov++] = optarg;
            break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) return deftsim_cli_usage_error("bench sim", "unexpected argument '%s'", argv[optind]);

    int64_t *Ps;
    size_t nP;
    deftsim_status st = deftsim_parse_int_list(plist, 1, DEFTSIM_WORKERS_MAX, &Ps, &nP);
    if (st) return deftsim_cli_usage_error("bench sim", "--P %s: %s", plist, deftsim_error_message());
    if (nP > MAX_P) {
        free(Ps);
        return deftsim_cli_usage_error("bench sim", "--P: at most %d worker counts", MAX_P);
    }
    deftsim_method methods[DEFTSIM_METHOD_MAX];
    size_t nm = 0;
    if (parse_methods(mlist, methods, &nm)) {
        free(Ps);
        return deftsim_cli_usage_error("bench sim", "bad --methods '%s'", mlist);
    }
    /* The [network] settings: a default scenario with the --set keys, checked as in a file. */
    deftsim_config *cfg = NULL;
    deftsim_model *model = NULL;
    char mset[300], cset[64];
    snprintf(mset, sizeof mset, "gradients.model=%s", model_name);
    snprintf(cset, sizeof cset, "workers.counts=%" PRId64, Ps[nP - 1]);
    ov[nov++] = mset;
    ov[nov++] = cset;
    int rc = 1;
    if ((st = deftsim_config_default("bench", &cfg))) goto fail;
    for (size_t i = 0; i < nov; i++)
        if ((st = deftsim_config_apply_override(cfg, ov[i]))) goto fail;
    if ((st = deftsim_config_check(cfg))) goto fail;
    if ((st = deftsim_model_load(model_name, &model))) goto fail;
    if (deftsim_cli_parse_only) {
        rc = 0;
        goto fail;
    }

    deftsim_closed_form_in wl = {.model = model, .density = density, .index_bytes = 4,
                                 .value_bytes = 4};
    wl.k = deftsim_k_of_density(density, model->numel);
    wl.context = deftsim_config_sparsify_context(cfg, model);
    deftsim_sim_params sp;
    deftsim_config_sim_params(cfg, 1, wl.value_bytes, &sp);
    /* The algorithms that run: NCCL's for library = nccl, MPI's (and the bcast) otherwise. */
    deftsim_conditions cd;
    if ((st = deftsim_conditions_of_config(cfg, NULL, &cd))) goto fail;
    char bcast[96] = "";
    if (sp.library != DEFTSIM_LIB_NCCL)
        snprintf(bcast, sizeof bcast, ", bcast %s", deftsim_bcast_name(sp.bcast));
    fprintf(csv ? stderr : stdout,
            "deftsim bench sim: %s (n = %" PRIu64 "), density %g (k = %" PRIu64 "), one iteration "
            "of communication per method; %s%s; topology %s, %g bytes/s and %g s per link, "
            "crosstraffic %d, %s; %u run%s each\n",
            model->name, model->numel, density, wl.k, cd.network, bcast,
            deftsim_topology_name(sp.topology), sp.bandwidth, sp.latency, sp.crosstraffic,
            deftsim_sim_mode_name(sp.mode), reps, reps == 1 ? "" : "s");
    if (sp.gpus_per_node > 1)
        fprintf(csv ? stderr : stdout,
                "  nodes of %u GPUs: %s of %g bytes/s and %g s per link, %u NICs of %g bytes/s "
                "(the network above joins the NICs)\n",
                sp.gpus_per_node, deftsim_intra_fabric_name(sp.intra_fabric), sp.intra_bandwidth,
                sp.intra_latency, sp.nics_per_node,
                sp.nic_bandwidth > 0 ? sp.nic_bandwidth : sp.bandwidth);
    if (sp.library == DEFTSIM_LIB_NCCL) {
        unsigned cp = 1, want = sp.nccl_p2p_channels ? sp.nccl_p2p_channels : sp.nccl_channels;
        while (cp < want) cp <<= 1; /* a power of two, as NCCL's p2p channels */
        fprintf(csv ? stderr : stdout,
                "  library nccl: allreduce %s, %u channels (%u for grouped sends), allgatherv %s, "
                "buffers of %llu bytes\n",
                deftsim_nccl_algo_name(sp.nccl_algorithm), sp.nccl_channels, cp,
                deftsim_nccl_agv_name(sp.nccl_allgatherv), (unsigned long long)sp.nccl_buffsize);
    }
    if (csv)
        printf("P,method,steps,messages,simulated_seconds,wall_seconds,wall_min_seconds,peak_rss_bytes,"
               "sim_mode\n");
    else
        printf("%7s  %-8s %6s %12s %15s %10s %10s  %s\n", "P", "method", "steps", "messages",
               "simulated (s)", "wall (s)", "peak MiB", "ran");
    double total_wall[MAX_P] = {0};
    uint64_t peak[MAX_P] = {0};
    for (size_t pi = 0; pi < nP; pi++)
        if ((st = run_P(&sp, cfg, methods, nm, &wl, (uint32_t)Ps[pi], reps, csv, &total_wall[pi],
                        &peak[pi])))
            goto fail;
    print_totals(csv ? stderr : stdout, Ps, nP, total_wall, peak, &sp);
    rc = 0;
fail:
    if (rc) rc = deftsim_cli_fail(st);
    deftsim_model_free(model);
    deftsim_config_free(cfg);
    free(Ps);
    return rc;
}
