/* cmd_validate.c - `deftsim validate nccl`: NCCL's collectives as simulated against nccl-tests as
 * measured, table by table (the corpus in sim/validation/nccl, or a user's own output files),
 * and with --fit the tuned model's free figures fitted to them (docs/NETWORK.md, "Validation
 * against nccl-tests"). */
#include <getopt.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "deftsim_config.h"
#include "deftsim_nccl_validate.h"
#include "deftsim_util.h"

#define MAX_SETS 32
#define MAX_FILES 64

typedef struct {
    const char *corpus, *preset, *coll, *algo, *proto, *out;
    const char *only[MAX_FILES];
    size_t nonly;
    const char *sets[MAX_SETS + 8];
    size_t nsets;
    unsigned nodes, gpn;
    int rows, fit, fit_rounds;
} vopts;

static void usage(FILE *out)
{
    fprintf(out,
            "usage: deftsim validate nccl [--corpus DIR] [--table ID]... [--set network.KEY=V]...\n"
            "                             [--rows] [--fit -o FILE]\n"
            "       deftsim validate nccl FILE... --nodes N --gpus-per-node G --preset NAME\n"
            "                             [--collective C] [--algo A] [--proto P] [--rows] [--fit -o FILE]\n"
            "\n"
            "Simulates every row of published nccl-tests tables (default corpus:\n"
            "sim/validation/nccl) or of your own nccl-tests output files on the matching\n"
            "preset with library = nccl, and prints simulated against measured out-of-place time\n"
            "with the relative error: per table and over all (median, 90th percentile, worst).\n"
            "\n"
            "  --table ID        only this corpus table (repeatable)\n"
            "  --set KEY=VALUE   a scenario key applied after the table's own (repeatable)\n"
            "  --rows            every row, not only the summaries, with the algorithm,\n"
            "                    protocol and channels its call ran with\n"
            "  --fit             fit nccl_launch, nccl_launch_gpu, nccl_nvl_efficiency,\n"
            "                    nccl_net_efficiency, nccl_p2p_net_efficiency (with an\n"
            "                    alltoall table), nccl_net_channel_bandwidth (with tables\n"
            "                    across nodes of two GPU counts a node), nccl_step_scale,\n"
            "                    nccl_net_step_scale, nccl_ll_efficiency,\n"
            "                    nccl_ll128_efficiency, nccl_nvls_step and, with sendrecv\n"
            "                    tables on one node or across nodes,\n"
            "                    nccl_p2p_channel_bandwidth and\n"
            "                    nccl_p2p_net_channel_bandwidth to the tables; -o FILE\n"
            "                    writes them as [network] keys (a corpus table's own\n"
            "                    platform keys stay as the table sets them)\n"
            "  --fit-rounds N    rounds of the fit's coordinate search (default 10)\n"
            "  FILE...           nccl-tests output as all_reduce_perf and its siblings print it;\n"
            "                    the collective from the file (or --collective: allreduce,\n"
            "                    allgather, reducescatter, broadcast, alltoall, sendrecv); a\n"
            "                    log of several tests is a table per test (FILE:COLLECTIVE),\n"
            "                    tests of other operations (reduce_perf, gather_perf) left\n"
            "                    out and named\n");
}

static int cmp_dbl(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The q-quantile of n sorted values (linear between neighbours). */
static double quantile(const double *v, size_t n, double q)
{
    if (!n) return NAN;
    double pos = q * (double)(n - 1);
    size_t i = (size_t)pos;
    return i + 1 < n ? v[i] + (pos - (double)i) * (v[i + 1] - v[i]) : v[n - 1];
}

typedef struct {
    double med, p90, worst;
    size_t n;
} err_stats;

static err_stats stats_of(double *abs_err, size_t n)
{
    err_stats s = {NAN, NAN, NAN, n};
    if (!n) return s;
    qsort(abs_err, n, sizeof *abs_err, cmp_dbl);
    s.med = quantile(abs_err, n, 0.5);
    s.p90 = quantile(abs_err, n, 0.9);
    s.worst = abs_err[n - 1];
    return s;
}

/* The targets a table is held to (docs/NETWORK.md): median |error| and 90th percentile. */
#define TARGET_MEDIAN 0.10
#define TARGET_P90 0.25

/* Simulates every table; fills the signed relative errors of all rows (all_err, *nall) and
 * prints per table (and per row with --rows) when `print`; counts in *met (when not NULL)
 * the tables within both targets. */
static deftsim_status run_tables(const vopts *o, const deftsim_nt_table *t, size_t nt,
                                 const char *const *extra, size_t nextra, int print,
                                 double *all_err, size_t *nall, size_t *met)
{
    *nall = 0;
    for (size_t k = 0; k < nt; k++) {
        double *sim = malloc(t[k].nrows * sizeof *sim), *err = malloc(t[k].nrows * sizeof *err);
        deftsim_nt_choice *how = print && o->rows ? malloc(t[k].nrows * sizeof *how) : NULL;
        if (!sim || !err || (print && o->rows && !how)) {
            free(sim);
            free(err);
            free(how);
            return deftsim_error_nomem("validate");
        }
        deftsim_status st = deftsim_nt_simulate(&t[k], extra, nextra, o->sets, o->nsets, sim, how);
        if (st) {
            free(sim);
            free(err);
            free(how);
            return st;
        }
        size_t ne = 0;
        if (print && o->rows)
            printf("\n%s (%s, %u x %u GPUs)\n  %14s %12s %12s %8s  %s\n", t[k].id,
                   deftsim_nt_coll_names[t[k].coll], t[k].nodes, t[k].gpus_per_node, "bytes",
                   "measured_us", "simulated_us", "error", "algorithm/protocol/channels");
        for (size_t r = 0; r < t[k].nrows; r++) {
            const deftsim_nt_row *row = &t[k].rows[r];
            if (isnan(sim[r]) || row->time_us <= 0) continue;
            double e = (sim[r] - row->time_us) / row->time_us;
            err[ne++] = fabs(e);
            all_err[(*nall)++] = e;
            if (print && o->rows)
                printf("  %14llu %12.2f %12.2f %+7.1f%%  %s\n", (unsigned long long)row->bytes,
                       row->time_us, sim[r], 100 * e, how[r].text);
        }
        err_stats s = stats_of(err, ne);
        if (met && ne && s.med <= TARGET_MEDIAN && s.p90 <= TARGET_P90) (*met)++;
        if (print)
            printf("%-48s %-13s %3u x %u %4zu rows  median %6.1f%%  p90 %6.1f%%  worst %7.1f%%\n",
                   t[k].id, deftsim_nt_coll_names[t[k].coll], t[k].nodes, t[k].gpus_per_node, ne,
                   100 * s.med, 100 * s.p90, 100 * s.worst);
        free(sim);
        free(err);
        free(how);
    }
    return DEFTSIM_OK;
}

/* The mean of |log(1 + e)| over signed relative errors e. */
static double mean_log_error(const double *e, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++) s += fabs(log1p(e[i]));
    return n ? s / (double)n : INFINITY;
}

static size_t total_rows(const deftsim_nt_table *t, size_t nt)
{
    size_t n = 0;
    for (size_t k = 0; k < nt; k++) n += t[k].nrows;
    return n;
}

/* The figures the fit moves: the key, where the search starts without a preset, its bounds,
 * and the figure's place in the resolved scenario. */
typedef struct {
    const char *key;
    double start, lo, hi;
    size_t off;
    int unit; /* 0: a number; 1: a duration, written in microseconds; 2: bytes/s, in GB/s */
} fit_figure;

#define NETF(field) offsetof(deftsim_config, network.field)
static const fit_figure FIGURES[] = {
    {"nccl_launch", 20e-6, 1e-9, 100e-6, NETF(nccl_launch), 1},
    {"nccl_launch_gpu", 2e-6, 1e-9, 20e-6, NETF(nccl_launch_gpu), 1},
    {"nccl_nvl_efficiency", 0.8, 0.05, 1, NETF(nccl_nvl_efficiency), 0},
    {"nccl_net_efficiency", 0.85, 0.05, 1, NETF(nccl_net_efficiency), 0},
    {"nccl_p2p_net_efficiency", 0.85, 0.05, 1, NETF(nccl_p2p_net_efficiency), 0},
    {"nccl_net_channel_bandwidth", 20e9, 1e8, 1e12, NETF(nccl_net_channel_bandwidth), 2},
    {"nccl_step_scale", 1.0, 0.05, 20, NETF(nccl_step_scale), 0},
    {"nccl_net_step_scale", 1.0, 0.05, 20, NETF(nccl_net_step_scale), 0},
    {"nccl_ll_efficiency", 1.0, 0.05, 1, NETF(nccl_ll_efficiency), 0},
    {"nccl_ll128_efficiency", 1.0, 0.05, 1, NETF(nccl_ll128_efficiency), 0},
    {"nccl_nvls_step", 2e-6, 1e-9, 50e-6, NETF(nccl_nvls_step), 1},
    {"nccl_p2p_channel_bandwidth", 20e9, 1e8, 1e12, NETF(nccl_p2p_channel_bandwidth), 2},
    {"nccl_p2p_net_channel_bandwidth", 10e9, 1e8, 1e12, NETF(nccl_p2p_net_channel_bandwidth), 2},
};
enum { NF = sizeof FIGURES / sizeof FIGURES[0] };

/* Where the fit starts: the first table's preset's figures (a figure at 0 from a small positive
 * value, since the search scales). */
static void fit_start(const deftsim_nt_table *t, size_t nt, double *x)
{
    deftsim_config *cfg = NULL;
    char kv[64];
    snprintf(kv, sizeof kv, "network.preset=%s", nt ? t[0].preset : "none");
    if (deftsim_config_default("fit", &cfg) ||
        deftsim_config_apply_override(cfg, "gradients.model=resnet18_cifar10") ||
        deftsim_config_apply_override(cfg, kv) || deftsim_config_check(cfg)) {
        deftsim_config_free(cfg);
        return; /* the defaults stand */
    }
    for (int i = 0; i < NF; i++) {
        double v = *(const double *)((const char *)cfg + FIGURES[i].off);
        if (v > 0) x[i] = v;
        /* a figure unset (-1) that stands for the one before it (the network's step scale for
         * the node's, the grouped sends' efficiency for the network's) starts there */
        if (v < 0 && i > 0) x[i] = x[i - 1];
    }
    deftsim_config_free(cfg);
}

/* The fit: coordinate search from the preset's figures, each figure in turn scaled up and down
 * by a step that halves when neither helps, minimising the mean of |log(simulated / measured)|
 * over every row (every row counts, a factor too fast as much as a factor too slow). */
static deftsim_status fit(const vopts *o, const deftsim_nt_table *t, size_t nt, double *all)
{
    double x[NF], lo[NF], hi[NF];
    for (int i = 0; i < NF; i++) x[i] = FIGURES[i].start, lo[i] = FIGURES[i].lo, hi[i] = FIGURES[i].hi;
    fit_start(t, nt, x);
    double step = 0.5, best = INFINITY;
    char buf[NF][96];
    const char *extra[NF];
    size_t nall;
    /* Without an alltoall table nothing measures the grouped sends: their figure stays -1 (as
     * the network's), not a number the tables never saw. */
    int p2p = 0;
    for (size_t k = 0; k < nt; k++) p2p |= t[k].coll == DEFTSIM_NT_ALLTOALL;
    /* A channel's limit across the network shows apart from the NIC's achieved fraction only
     * where the NICs carry different numbers of channels: rings or trees across nodes of two
     * GPU counts or more. Elsewhere it stays 0 (no limit). */
    uint32_t g0 = 0;
    int channel = 0;
    for (size_t k = 0; k < nt; k++) {
        if (t[k].nodes < 2 || t[k].coll == DEFTSIM_NT_ALLTOALL) continue;
        if (g0 && t[k].gpus_per_node != g0) channel = 1;
        g0 = t[k].gpus_per_node;
    }
    /* A grouped transfer's channel limits show only in sendrecv tables: one peer at a time,
     * on one node for the node's figure, across nodes for the network's. Elsewhere 0. */
    int sr_node = 0, sr_net = 0;
    for (size_t k = 0; k < nt; k++)
        if (t[k].coll == DEFTSIM_NT_SENDRECV) {
            if (t[k].nodes < 2) sr_node = 1;
            else sr_net = 1;
        }
    for (int i = 0; i < NF; i++) {
        if (!p2p && !strcmp(FIGURES[i].key, "nccl_p2p_net_efficiency")) x[i] = -1;
        if (!channel && !strcmp(FIGURES[i].key, "nccl_net_channel_bandwidth")) x[i] = 0;
        if (!sr_node && !strcmp(FIGURES[i].key, "nccl_p2p_channel_bandwidth")) x[i] = 0;
        if (!sr_net && !strcmp(FIGURES[i].key, "nccl_p2p_net_channel_bandwidth")) x[i] = 0;
    }
    for (int round = 0; round < o->fit_rounds && step > 0.02; round++) {
        int moved = 0;
        for (int i = 0; i < NF; i++)
            for (int dir = -1; dir <= 1; dir++) {
                if (x[i] <= 0) break; /* held at -1, or at 0 (no limit) */
                double y[NF];
                memcpy(y, x, sizeof y);
                if (dir) y[i] = fmin(hi[i], fmax(lo[i], x[i] * (1 + dir * step)));
                if (dir && y[i] == x[i]) continue;
                for (int j = 0; j < NF; j++) {
                    snprintf(buf[j], sizeof buf[j], "network.%s=%.9g", FIGURES[j].key, y[j]);
                    extra[j] = buf[j];
                }
                deftsim_status st = run_tables(o, t, nt, extra, NF, 0, all, &nall, NULL);
                if (st) return st;
                double cost = mean_log_error(all, nall);
                if (cost < best - 1e-12) {
                    best = cost;
                    memcpy(x, y, sizeof x);
                    moved = dir != 0;
                }
            }
        if (!moved) step /= 2;
        fprintf(stderr, "validate: fit round %d: mean |log ratio| %.4f (launch %.2f us + %.2f us a "
                        "further GPU of a thread, nvl %.3f, net %.3f, grouped p2p net %.3f, a "
                        "channel across nodes %.2f GB/s, step x %.3f, network step x %.3f, LL "
                        "%.3f, LL128 %.3f, NVLS step %.2f us, a grouped send's channel %.2f GB/s in "
                        "a node, %.2f GB/s across)\n",
                round + 1, best, x[0] * 1e6, x[1] * 1e6, x[2], x[3], x[4], x[5] / 1e9, x[6], x[7],
                x[8], x[9], x[10] * 1e6, x[11] / 1e9, x[12] / 1e9);
    }
    /* One preset under every table: the file names it, so that a scenario naming the file
     * (preset_file) gets the node keys with the fitted figures. */
    const char *preset = nt ? t[0].preset : "";
    for (size_t k = 1; k < nt; k++)
        if (strcmp(t[k].preset, preset) != 0) preset = "";
    deftsim_afile *af = NULL;
    deftsim_status st = deftsim_afile_open(&af, o->out);
    if (st) return st;
    FILE *f = deftsim_afile_stream(af);
    fprintf(f, "# deftsim validate nccl --fit: mean |log(simulated / measured)| %.4f over %zu tables\n",
            best, nt);
    for (size_t k = 0; k < nt; k++) fprintf(f, "#   %s\n", t[k].id);
    fprintf(f, "# A scenario names this file with [network] preset_file = PATH; its own keys win.\n");
    fprintf(f, "[network]\n");
    if (*preset) fprintf(f, "preset = %s\n", preset);
    else fprintf(f, "# the tables' presets differ: the scenario names its own\n");
    fprintf(f, "nccl_model = tuned\n");
    for (int i = 0; i < NF; i++) {
        if (FIGURES[i].unit == 1) fprintf(f, "%s = %.3fus\n", FIGURES[i].key, x[i] * 1e6);
        else if (FIGURES[i].unit == 2) fprintf(f, "%s = %.4fGBps\n", FIGURES[i].key, x[i] / 1e9);
        else fprintf(f, "%s = %.4f\n", FIGURES[i].key, x[i]);
    }
    return deftsim_afile_commit(af);
}

static int parse_opts(int argc, char **argv, vopts *o)
{
    static const struct option lo[] = {
        {"corpus", required_argument, 0, 'c'}, {"table", required_argument, 0, 't'},
        {"set", required_argument, 0, 's'},    {"rows", no_argument, 0, 'r'},
        {"fit", no_argument, 0, 'f'},          {"output", required_argument, 0, 'o'},
        {"nodes", required_argument, 0, 'n'},  {"gpus-per-node", required_argument, 0, 'g'},
        {"preset", required_argument, 0, 'p'}, {"collective", required_argument, 0, 'C'},
        {"algo", required_argument, 0, 'A'},   {"proto", required_argument, 0, 'P'},
        {"fit-rounds", required_argument, 0, 'R'},
        {"help", no_argument, 0, 'h'},         {0, 0, 0, 0}};
    int c;
    optind = 0; /* glibc's getopt starts afresh (main's scan stopped at "validate") */
    while ((c = getopt_long(argc, argv, "o:h", lo, NULL)) != -1) {
        switch (c) {
        case 'c': o->corpus = optarg; break;
        case 't':
            if (o->nonly == MAX_FILES) return deftsim_cli_usage_error("validate", "too many --table");
            o->only[o->nonly++] = optarg;
            break;
        case 's':
            if (o->nsets == MAX_SETS) return deftsim_cli_usage_error("validate", "too many --set");
            o->sets[o->nsets++] = optarg;
            break;
        case 'r': o->rows = 1; break;
        case 'f': o->fit = 1; break;
        case 'o': o->out = optarg; break;
        case 'n': o->nodes = (unsigned)strtoul(optarg, NULL, 10); break;
        case 'g': o->gpn = (unsigned)strtoul(optarg, NULL, 10); break;
        case 'p': o->preset = optarg; break;
        case 'C': o->coll = optarg; break;
        case 'A': o->algo = optarg; break;
        case 'P': o->proto = optarg; break;
        case 'R':
            o->fit_rounds = atoi(optarg);
            if (o->fit_rounds < 1 || o->fit_rounds > 100)
                return deftsim_cli_usage_error("validate", "--fit-rounds %s: an integer in [1, 100]", optarg);
            break;
        case 'h': usage(stdout); return -1;
        default: usage(stderr); return 2;
        }
    }
    return 0;
}

/* A table of the user's on the shape the options give, rows not read yet. */
static void user_table(const vopts *o, const char *id, deftsim_nt_coll coll, deftsim_nt_table *t)
{
    memset(t, 0, sizeof *t);
    snprintf(t->id, sizeof t->id, "%s", id);
    snprintf(t->preset, sizeof t->preset, "%s", o->preset);
    t->nodes = o->nodes;
    t->gpus_per_node = o->gpn;
    t->coll = coll;
    snprintf(t->algo, sizeof t->algo, "%s", o->algo ? o->algo : "default");
    snprintf(t->proto, sizeof t->proto, "%s", o->proto ? o->proto : "default");
    for (char *q = t->proto; *q; q++) *q = (char)(*q >= 'A' && *q <= 'Z' ? *q + 32 : *q);
}

#define MAX_TESTS 64

/* The user's files as tables. A file of one test is one table: its collective from --collective,
 * its "Collective test starting" line or its name. A file of several tests (runs printed into
 * one log) is a table for each test of a collective the simulation runs, named FILE:COLLECTIVE
 * (FILE:COLLECTIVE#N where one collective comes again), only --collective's with that option;
 * the others (reduce_perf, gather_perf, say) are named on stderr and left out. */
static deftsim_status user_tables(const vopts *o, char **files, size_t nf, deftsim_nt_table **out,
                                  size_t *nout)
{
    int given = -1;
    for (int i = 0; o->coll && i < DEFTSIM_NT_COUNT; i++)
        if (strcmp(o->coll, deftsim_nt_coll_names[i]) == 0) given = i;
    if (o->coll && given < 0)
        return deftsim_error_set(DEFTSIM_E_USAGE,
                                 "--collective '%s': one of allreduce, allgather, reducescatter, "
                                 "broadcast, alltoall, sendrecv",
                                 o->coll);
    deftsim_nt_table *t = NULL;
    size_t k = 0, cap = 0;
    deftsim_status st = DEFTSIM_OK;
    deftsim_nt_test tests[MAX_TESTS];
    for (size_t fi = 0; !st && fi < nf; fi++) {
        size_t ntests = 0;
        if ((st = deftsim_nt_file_tests(files[fi], tests, MAX_TESTS, &ntests))) break;
        if (ntests > MAX_TESTS) {
            st = deftsim_error_set(DEFTSIM_E_INPUT, "%s: %zu tests; at most %d a file", files[fi],
                                   ntests, MAX_TESTS);
            break;
        }
        if (deftsim_grow(&t, &cap, k + (ntests > 1 ? ntests : 1), sizeof *t)) {
            st = deftsim_error_nomem("validate");
            break;
        }
        if (ntests <= 1) {
            deftsim_nt_coll c = (deftsim_nt_coll)(given < 0 ? 0 : given);
            if (given < 0 && (st = deftsim_nt_detect_coll(files[fi], &c))) break;
            user_table(o, files[fi], c, &t[k]);
            if ((st = deftsim_nt_read_rows(files[fi], &t[k]))) break;
            k++;
            continue;
        }
        size_t kept = 0;
        for (size_t i = 0; !st && i < ntests; i++) {
            if (!tests[i].known) {
                fprintf(stderr, "validate: %s: test %zu (%s) left out: not a collective the "
                                "simulation runs\n", files[fi], i + 1, tests[i].name);
                continue;
            }
            if (given >= 0 && (int)tests[i].coll != given) continue;
            size_t again = 0;
            for (size_t j = 0; j < i; j++) again += tests[j].known && tests[j].coll == tests[i].coll;
            char id[128];
            if (again) snprintf(id, sizeof id, "%s:%s#%zu", files[fi],
                                deftsim_nt_coll_names[tests[i].coll], again + 1);
            else snprintf(id, sizeof id, "%s:%s", files[fi], deftsim_nt_coll_names[tests[i].coll]);
            user_table(o, id, tests[i].coll, &t[k]);
            if (!(st = deftsim_nt_read_test_rows(files[fi], i, &t[k]))) k++, kept++;
        }
        if (!st && !kept)
            st = deftsim_error_set(DEFTSIM_E_INPUT, "%s: none of its %zu tests is %s", files[fi],
                                   ntests, given >= 0 ? o->coll : "a collective the simulation runs");
    }
    if (st) {
        deftsim_nt_tables_free(t, k);
        return st;
    }
    *out = t;
    *nout = k;
    return DEFTSIM_OK;
}

/* Keeps the tables --table names; refuses a name the corpus lacks. */
static deftsim_status select_tables(const vopts *o, deftsim_nt_table *t, size_t *nt)
{
    if (!o->nonly) return DEFTSIM_OK;
    for (size_t i = 0; i < o->nonly; i++) {
        int found = 0;
        for (size_t k = 0; k < *nt; k++) found |= strcmp(t[k].id, o->only[i]) == 0;
        if (!found)
            return deftsim_error_set(DEFTSIM_E_USAGE, "--table %s: no such table with status ok in the corpus",
                                     o->only[i]);
    }
    size_t w = 0;
    for (size_t k = 0; k < *nt; k++) {
        int keep = 0;
        for (size_t i = 0; i < o->nonly; i++) keep |= strcmp(t[k].id, o->only[i]) == 0;
        if (keep) {
            deftsim_nt_table tmp = t[w];
            t[w++] = t[k];
            t[k] = tmp;
        }
    }
    for (size_t k = w; k < *nt; k++) free(t[k].rows), t[k].rows = NULL;
    *nt = w;
    return DEFTSIM_OK;
}

/* The corpus: sim/validation/nccl of the working directory (a checkout's root), else of the
 * checkout the program was built in (build/deftsim -> ../sim/validation/nccl). */
static const char *default_corpus(void)
{
    static char path[4096];
    const char *rel = "sim/validation/nccl";
    if (access(rel, R_OK) == 0) return rel;
    ssize_t n = readlink("/proc/self/exe", path, sizeof path - 64);
    if (n <= 0) return rel;
    path[n] = '\0';
    char *slash = strrchr(path, '/');
    if (!slash) return rel;
    snprintf(slash, sizeof path - (size_t)(slash - path), "/../%s", rel);
    return access(path, R_OK) == 0 ? path : rel;
}

int deftsim_cmd_validate(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "nccl") != 0) {
        if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
            usage(stdout);
            return 0;
        }
        return deftsim_cli_usage_error("validate", "the target is nccl: deftsim validate nccl --help");
    }
    vopts o;
    memset(&o, 0, sizeof o);
    o.corpus = default_corpus();
    o.fit_rounds = 10;
    int rc = parse_opts(argc - 1, argv + 1, &o);
    if (rc) return rc < 0 ? 0 : rc;
    size_t nf = (size_t)(argc - 1 - optind);
    char **files = argv + 1 + optind;
    if (o.fit && !o.out) return deftsim_cli_usage_error("validate", "--fit needs -o FILE");
    if (nf && (!o.nodes || !o.gpn || !o.preset))
        return deftsim_cli_usage_error("validate", "files need --nodes, --gpus-per-node and --preset");
    deftsim_nt_table *t = NULL;
    size_t nt = nf;
    deftsim_status st = nf ? user_tables(&o, files, nf, &t, &nt) : deftsim_nt_read_corpus(o.corpus, &t, &nt);
    size_t all_n = nt;
    if (!st) st = select_tables(&o, t, &nt);
    double *all = st ? NULL : malloc((total_rows(t, nt) + 1) * sizeof *all);
    if (!st && !all) st = deftsim_error_nomem("validate");
    if (!st && o.fit) st = fit(&o, t, nt, all);
    size_t nall = 0, met = 0;
    if (!st && !o.fit) {
        printf("%-48s %-13s %-7s %9s\n", "table", "collective", "nodes x G", "errors");
        st = run_tables(&o, t, nt, NULL, 0, 1, all, &nall, &met);
    }
    if (!st && !o.fit) {
        for (size_t i = 0; i < nall; i++) all[i] = fabs(all[i]);
        err_stats s = stats_of(all, nall);
        printf("\nall %zu tables, %zu rows: median |error| %.1f%%, 90th percentile %.1f%%, worst %.1f%%\n",
               nt, s.n, 100 * s.med, 100 * s.p90, 100 * s.worst);
        printf("%zu of %zu tables within both targets (median |error| <= %.0f%%, 90th percentile <= %.0f%%)\n",
               met, nt, 100 * TARGET_MEDIAN, 100 * TARGET_P90);
    }
    free(all);
    if (t) deftsim_nt_tables_free(t, all_n);
    return st ? deftsim_cli_fail(st) : 0;
}
