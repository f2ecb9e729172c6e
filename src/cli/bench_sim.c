/* bench_sim.c - `deftsim bench sim`: how the network simulation scales with P.
 *
 * One iteration of every sparsifier's communication, for a model's gradient at one density,
 * simulated at each P: the wall time and peak memory of the simulation, the simulated time and
 * the messages it took. The schedules are the ones the sparsifiers emit (docs/SPARSIFIERS.md),
 * with byte counts from their formulas instead of a run of the kernels (running every
 * sparsifier's selection for 4096 workers would take longer than what is measured here), and
 * without compute steps: only the network is timed. Where a count depends on the gradient,
 * the bench assumes uniformly spread selections: topk's union of P independent k-subsets
 * holds n (1 - (1 - k/n)^P) indices, DEFT's workers each hold k/P and its union k.
 * Each (P, method) is one simulation in its own process, as `deftsim run` simulates a point. */
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "cli.h"
#include "deftsim_config.h"
#include "deftsim_deft.h"
#include "deftsim_model.h"
#include "deftsim_schedule.h"
#include "deftsim_sim.h"
#include "deftsim_util.h"

int deftsim_bench_sim(int argc, char **argv);

#define MAX_P 16
#define MAX_OV 32

typedef struct {
    const deftsim_model *m;
    double density;
    uint64_t k;
    uint32_t si, sv;  /* wire widths of an index and a value (spec: 4 and 4) */
} workload;

static void fill(deftsim_step *st, uint32_t P, uint64_t bytes)
{
    for (uint32_t r = 0; r < P; r++) st->bytes[r] = bytes;
}

/* The communication of one iteration of method m (t = 0: DEFT's and CLT-k's leader is 0). */
static deftsim_status build(deftsim_method method, const workload *wl, uint32_t P,
                            deftsim_schedule *s)
{
    deftsim_schedule_init(s, P);
    if (P < 2) return DEFTSIM_OK;
    const uint64_t n = wl->m->numel, k = wl->k;
    deftsim_step *st;
#define ADD(kind, name)                                                                            \
    do {                                                                                           \
        if (!(st = deftsim_schedule_add(s, kind, name))) return DEFTSIM_E_NOMEM;                    \
    } while (0)
    switch (method) {
    case DEFTSIM_METHOD_DENSE:
        ADD(DEFTSIM_STEP_ALLREDUCE, "values");
        fill(st, P, n * wl->sv);
        break;
    case DEFTSIM_METHOD_TOPK: {
        ADD(DEFTSIM_STEP_ALLGATHER, "indices");
        fill(st, P, k * wl->si);
        double u = (double)n * (1.0 - pow(1.0 - (double)k / (double)n, (double)P));
        ADD(DEFTSIM_STEP_ALLREDUCE, "values");
        fill(st, P, (uint64_t)ceil(u) * wl->sv);
        break;
    }
    case DEFTSIM_METHOD_TOPK_AG:
        ADD(DEFTSIM_STEP_ALLGATHER, "pairs");
        fill(st, P, k * (wl->si + wl->sv));
        break;
    case DEFTSIM_METHOD_CLTK:
        ADD(DEFTSIM_STEP_BCAST, "indices");
        st->root = 0;
        st->bytes[0] = k * wl->si;
        ADD(DEFTSIM_STEP_ALLREDUCE, "values");
        fill(st, P, k * wl->sv);
        break;
    case DEFTSIM_METHOD_GTOPK: {
        uint64_t e = k * (wl->si + wl->sv);
        uint32_t P2 = 1;
        while (P2 <= P / 2) P2 <<= 1;
        if (P2 < P) {
            ADD(DEFTSIM_STEP_SENDRECV, "fold");
            for (uint32_t q = P2; q < P; q++) {
                st->peer[q] = q - P2;
                st->bytes[q] = e;
            }
        }
        for (uint32_t step = 1; step < P2; step <<= 1) {
            ADD(DEFTSIM_STEP_SENDRECV, "tree");
            for (uint32_t q = 0; q + step < P2; q += 2 * step) {
                st->peer[q + step] = q;
                st->bytes[q + step] = e;
            }
        }
        ADD(DEFTSIM_STEP_BCAST, "final");
        st->root = 0;
        st->bytes[0] = e;
        break;
    }
    case DEFTSIM_METHOD_DEFT: {
        deftsim_fragment *frags;
        size_t nfrag;
        deftsim_status rc = deftsim_deft_fragments(wl->m, P, &frags, &nfrag);
        if (rc) return rc;
        free(frags);
        ADD(DEFTSIM_STEP_BCAST, "packing");
        st->root = 0;
        st->bytes[0] = 4 * ((uint64_t)P + nfrag);
        ADD(DEFTSIM_STEP_ALLGATHER, "counts");
        fill(st, P, 4);
        ADD(DEFTSIM_STEP_ALLGATHER, "indices");
        fill(st, P, (k + P - 1) / P * wl->si);
        ADD(DEFTSIM_STEP_ALLREDUCE, "values");
        fill(st, P, k * wl->sv);
        break;
    }
    case DEFTSIM_METHOD_MICRO:
    case DEFTSIM_METHOD_EXDYNA:
        /* At the target: K = k in all, balanced partitions, m = ceil(k / P) per worker. */
        ADD(DEFTSIM_STEP_ALLGATHER, "counts");
        fill(st, P, 4);
        ADD(DEFTSIM_STEP_ALLGATHER, "indices");
        fill(st, P, (k + P - 1) / P * wl->si);
        ADD(DEFTSIM_STEP_ALLREDUCE, "values");
        fill(st, P, k * wl->sv);
        break;
    case DEFTSIM_METHOD_DGC:
        for (size_t l = 0; l < wl->m->nlayers; l++) {
            const deftsim_layer *ly = &wl->m->layers[l];
            char name[DEFTSIM_STEP_NAME_MAX];
            if (ly->ndim > 1) {
                snprintf(name, sizeof name, "pairs:%zu", l);
                ADD(DEFTSIM_STEP_ALLGATHER, name);
                fill(st, P, (uint64_t)ceil((double)ly->numel * wl->density) * (wl->si + wl->sv));
            } else {
                snprintf(name, sizeof name, "dense:%zu", l);
                ADD(DEFTSIM_STEP_ALLREDUCE, name);
                fill(st, P, ly->numel * wl->sv);
            }
        }
        break;
    case DEFTSIM_METHOD_OKTOPK: {
        /* A sparse step between recomputations: every worker's k picks spread evenly over the
         * P regions, every owner keeps k / P of them (docs/SPARSIFIERS.md, Ok-Topk). */
        uint64_t e = (k + P - 1) / P;
        ADD(DEFTSIM_STEP_ALLTOALL, "counts");
        fill(st, P, 4);
        for (uint32_t first = 0; first < P; first += 4) {
            if (!(st = deftsim_schedule_add_p2p(s, "reduce", 8))) return DEFTSIM_E_NOMEM;
            for (uint32_t r = 0; r < P; r++)
                for (uint32_t i = first; i < first + 4 && i < P; i++) {
                    if (i == 0) continue;
                    size_t at = (size_t)r * 8 + 2 * (i - first);
                    st->peer[at] = st->peer[at + 1] = (r + i) % P;
                    st->bytes[at] = e * wl->si;
                    st->bytes[at + 1] = e * wl->sv;
                }
        }
        ADD(DEFTSIM_STEP_ALLGATHER, "counts");
        fill(st, P, 4);
        ADD(DEFTSIM_STEP_ALLGATHER, "selection");
        fill(st, P, e * (wl->si + wl->sv));
        break;
    }
    case DEFTSIM_METHOD_COUNT: break;
    }
#undef ADD
    return DEFTSIM_OK;
}

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

static void usage(FILE *out)
{
    fprintf(out,
            "usage: deftsim bench sim [--P LIST] [--methods LIST] [--model NAME] [--density D]\n"
            "                         [--reps N] [--csv] [--set network.KEY=VALUE]...\n"
            "\n"
            "Simulates one iteration of every sparsifier's communication (no compute) for a\n"
            "model's gradient at one density, at each worker count, each in its own process, and\n"
            "prints the wall time, peak memory, messages and simulated time, the total per P,\n"
            "and how wall time grows with P. Schedules follow docs/SPARSIFIERS.md with byte\n"
            "counts from its formulas (uniformly spread selections).\n"
            "  --P LIST          worker counts (default 64,256,1024,4096)\n"
            "  --methods LIST    sparsifiers (default deft,topk,topk-ag,cltk,gtopk,dgc,dense)\n"
            "  --model NAME      model table (default resnet18_cifar10)\n"
            "  --density D       density (default 0.01)\n"
            "  --reps N          runs of each simulation; the median wall time is reported\n"
            "                    (default 1)\n"
            "  --csv             one CSV row per (P, method)\n"
            "  --set KEY=VALUE   a [network] key, as in a scenario (network.allgather=ring, ...)\n"
            "  -h, --help        this help\n"
            "Targets (docs/NETWORK.md): P = 1024 within 10 s and P = 4096 within 60 s for all\n"
            "methods together with the default algorithms, under 1 GiB of memory.\n");
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
    const char *plist = "64,256,1024,4096", *mlist = "deft,topk,topk-ag,cltk,gtopk,dgc,dense";
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
            if (strncmp(optarg, "network.", 8) != 0)
                return deftsim_cli_usage_error("bench sim", "--set %s: only network.* keys", optarg);
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
    deftsim_method methods[DEFTSIM_METHOD_COUNT];
    size_t nm = 0;
    {
        char buf[256];
        snprintf(buf, sizeof buf, "%s", mlist);
        for (char *tok = strtok(buf, ", "); tok; tok = strtok(NULL, ", ")) {
            deftsim_method m;
            if (deftsim_method_from_name(tok, &m) || nm == DEFTSIM_METHOD_COUNT) {
                free(Ps);
                return deftsim_cli_usage_error("bench sim", "bad --methods '%s'", mlist);
            }
            methods[nm++] = m;
        }
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

    workload wl = {.m = model, .density = density, .si = 4, .sv = 4};
    wl.k = (uint64_t)floor(density * (double)model->numel);
    if (wl.k < 1) wl.k = 1;
    deftsim_sim_params sp;
    deftsim_config_sim_params(cfg, 1, wl.sv, &sp);
    fprintf(csv ? stderr : stdout,
            "deftsim bench sim: %s (n = %" PRIu64 "), density %g (k = %" PRIu64 "), one iteration "
            "of communication per method; network %s, %s, %g bytes/s and %g s per link, "
            "crosstraffic %d, allgather %s, allreduce %s, bcast %s, %s; %u run%s each\n",
            model->name, model->numel, density, wl.k, deftsim_topology_name(sp.topology),
            deftsim_net_model_name(sp.model), sp.bandwidth, sp.latency, sp.crosstraffic,
            deftsim_allgather_name(sp.allgather), deftsim_allreduce_name(sp.allreduce),
            deftsim_bcast_name(sp.bcast), deftsim_sim_mode_name(sp.mode), reps, reps == 1 ? "" : "s");
    if (csv)
        printf("P,method,steps,messages,simulated_seconds,wall_seconds,wall_min_seconds,peak_rss_bytes\n");
    else
        printf("%7s  %-8s %6s %12s %15s %10s %10s\n", "P", "method", "steps", "messages",
               "simulated (s)", "wall (s)", "peak MiB");
    double total_wall[MAX_P] = {0};
    uint64_t peak[MAX_P] = {0};
    for (size_t pi = 0; pi < nP; pi++) {
        uint32_t P = (uint32_t)Ps[pi];
        sp.P = P;
        for (size_t mi = 0; mi < nm; mi++) {
            deftsim_schedule s;
            if ((st = build(methods[mi], &wl, P, &s))) {
                deftsim_schedule_free(&s);
                if (st == DEFTSIM_E_NOMEM) deftsim_error_set(st, "bench sim: out of memory");
                goto fail;
            }
            const deftsim_schedule *sched = &s;
            double walls[100];
            deftsim_sim_result r;
            memset(&r, 0, sizeof r);
            uint64_t rss = 0;
            for (unsigned rep = 0; rep < reps; rep++) {
                deftsim_sim_result_free(&r);
                if ((st = deftsim_sim_run(&sp, &sched, 1, &r))) {
                    deftsim_schedule_free(&s);
                    st = deftsim_error_wrap(st, "%s P=%u", deftsim_method_name(methods[mi]), P);
                    goto fail;
                }
                walls[rep] = r.wall_seconds;
                if (r.peak_rss_bytes > rss) rss = r.peak_rss_bytes;
            }
            qsort(walls, reps, sizeof walls[0], cmp_double);
            double med = reps % 2 ? walls[reps / 2] : 0.5 * (walls[reps / 2 - 1] + walls[reps / 2]);
            total_wall[pi] += med;
            if (rss > peak[pi]) peak[pi] = rss;
            if (csv)
                printf("%u,%s,%zu,%" PRIu64 ",%.9g,%.6g,%.6g,%" PRIu64 "\n", P,
                       deftsim_method_name(methods[mi]), s.nsteps, r.messages, r.iteration_seconds[0],
                       med, walls[0], rss);
            else
                printf("%7u  %-8s %6zu %12" PRIu64 " %15.6e %10.3f %10.1f\n", P,
                       deftsim_method_name(methods[mi]), s.nsteps, r.messages, r.iteration_seconds[0],
                       med, (double)rss / 1048576.0);
            fflush(stdout);
            deftsim_sim_result_free(&r);
            deftsim_schedule_free(&s);
        }
    }
    FILE *o = csv ? stderr : stdout;
    fprintf(o, "\n%7s  %-22s %12s  %s\n", "P", "all methods: wall (s)", "peak MiB", "target");
    for (size_t pi = 0; pi < nP; pi++) {
        char target[96] = "-";
        double limit = Ps[pi] == 1024 ? 10 : Ps[pi] == 4096 ? 60 : 0;
        if (limit > 0)
            snprintf(target, sizeof target, "<= %.0f s and < 1024 MiB: %s", limit,
                     total_wall[pi] <= limit && peak[pi] < (1ull << 30) ? "met" : "MISSED");
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
    rc = 0;
fail:
    if (rc) rc = deftsim_cli_fail(st);
    deftsim_model_free(model);
    deftsim_config_free(cfg);
    free(Ps);
    return rc;
}
