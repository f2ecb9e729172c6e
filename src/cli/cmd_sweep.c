/* cmd_sweep.c - `deftsim sweep`: every combination of a scenario's lists, resumable. */
#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "deftsim_conditions.h"
#include "deftsim_config.h"
#include "deftsim_net_mpi.h"
#include "deftsim_sweep.h"
#include "deftsim_units.h"
#include "deftsim_util.h"
#include "progress.h"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: deftsim sweep SCENARIO [--set section.key=value]... [--vary section.key=v1,v2,...]...\n"
            "                     [--output DIR] [--dry-run] [--ram SIZE] [--prep-threads N]\n"
            "                     [--progress auto|bar|lines] [--quiet] [--rerun-noisy [--warmup N]]\n"
            "                     [--shard I/N]\n"
            "       deftsim sweep --merge DIR [--quiet]\n"
            "\n"
            "Runs every combination of the scenario's lists, one point (variant, method, density,\n"
            "P) at a time, into [scenario] output:\n"
            "  points/[<variant>/]<method>_d<density>_P<P>.csv  one file per point, committed when\n"
            "                                                  it finishes\n"
            "  points/<id>.failed   a failed point's message (the sweep goes on without it)\n"
            "  manifest.json        the sweep's identity and every point's state\n"
            "  rows.csv             every finished point's rows, once no point is left\n"
            "Lists: [sparsify] methods and densities, [workers] counts, [gradients] model (or\n"
            "trace) as a comma-separated list, and any key given with --vary. Run again on the same\n"
            "folder to resume: finished points are skipped, failed ones retried; a folder written\n"
            "by another scenario (seed, iterations, ...) is refused. docs/OUTPUT.md has the layout.\n"
            "Ctrl-C (SIGINT) or SIGTERM stops the sweep before its next iteration: the finished\n"
            "points are kept, the manifest says interrupted, and the command to resume is printed\n"
            "(exit status 130 or 143; a second signal stops at once).\n"
            "\n"
            "  -s, --set S.K=V        override key K of section S (repeatable; a later one wins)\n"
            "  -V, --vary S.K=V1,V2   sweep key K over these values (repeatable: every combination)\n"
            "  -o, --output DIR       results folder (same as --set scenario.output=DIR)\n"
            "  -n, --dry-run          list the points (run, retry or done) and the memory plan\n"
            "  -r, --ram SIZE         plan memory for SIZE of RAM (bytes, or K, M, G, T suffixes)\n"
            "  -j, --prep-threads N   threads preparing accumulators (default: every CPU)\n"
            "  -p, --progress MODE    auto (a bar on a terminal, lines otherwise), bar or lines\n"
            "  -q, --quiet            no progress on stderr\n"
            "      --rerun-noisy      run again the finished points whose timing repetitions\n"
            "                         spread beyond the noise threshold (docs/TIMING.md), replacing\n"
            "                         their point files and rows.csv (with --dry-run: lists them)\n"
            "      --warmup N         with --rerun-noisy: leave out each point's first N iterations\n"
            "                         when judging its spread, as deftsim analyze --warmup (0)\n"
            "      --shard I/N        run only the points dealt to shard I, 0 <= I < N, by\n"
            "                         estimated cost (n x P x iterations, the same deal on every\n"
            "                         shard): N such shards, on as many machines, sweep one\n"
            "                         shared folder; the last to finish joins rows.csv and\n"
            "                         manifest.json (docs/CLUSTER.md)\n"
            "      --merge DIR        join the finished shards of DIR into rows.csv and\n"
            "                         manifest.json, as one process writes them (idempotent;\n"
            "                         refuses missing or unfinished shards, naming the points)\n"
            "  -h, --help             this help\n"
            "\n"
            "Exit status: 0 every point finished; 1 some point failed while running (the others\n"
            "are kept); 2 bad usage or scenario (including a point over the memory budget), or\n"
            "some point failed on bad input, such as a NaN in a trace (the others are kept);\n"
            "130 or 143 stopped by SIGINT or SIGTERM (the finished points are kept).\n");
}

/* --dry-run: reads the folder's state only, lists the points and the memory plan. */
static int dry_run(deftsim_sweep *sw, const deftsim_sweep_options *so)
{
    deftsim_status st = deftsim_sweep_load_state(sw);
    if (st) return deftsim_cli_fail(st);
    size_t noisy = 0;
    if (so->rerun_noisy && (st = deftsim_sweep_mark_noisy(sw, &noisy))) return deftsim_cli_fail(st);
    deftsim_sweep_print_points(sw, stdout);
    if (so->rerun_noisy) printf("\n%zu finished point%s flagged noisy would run again\n", noisy,
                                noisy == 1 ? "" : "s");
    printf("\n");
    if ((st = deftsim_sweep_check_memory(sw, stdout))) return deftsim_cli_fail(st);
    return 0;
}

/* --shard I/N: two decimal numbers, 0 <= I < N. 0, or the usage error's exit status. */
static int parse_shard(const char *arg, deftsim_sweep_options *so)
{
    const char *slash = strchr(arg, '/');
    char idx[32];
    int64_t i = -1, n = -1;
    if (slash && (size_t)(slash - arg) < sizeof idx) {
        snprintf(idx, sizeof idx, "%.*s", (int)(slash - arg), arg);
        if (deftsim_parse_i64(idx, &i) || deftsim_parse_i64(slash + 1, &n)) i = n = -1;
    }
    if (!slash || n < 1 || n > 1000000 || i < 0 || i >= n)
        return deftsim_cli_usage_error("sweep",
                                       "--shard: '%s' is not I/N with 0 <= I < N <= 1000000 "
                                       "(e.g. 0/4)",
                                       arg);
    so->shard_index = (unsigned)i;
    so->shard_count = (unsigned)n;
    return 0;
}

/* --merge DIR. */
static int merge(const char *dir, int quiet)
{
    deftsim_sweep_merge_summary ms;
    deftsim_status st = deftsim_sweep_merge(dir, 0, &ms);
    if (st) return deftsim_cli_fail(st);
    if (!quiet)
        fprintf(stderr,
                "deftsim sweep --merge: %zu shards, %zu points%s (%llu rows) -> %s/rows.csv, "
                "%s/manifest.json\n  next: deftsim analyze %s\n",
                ms.shards, ms.points + ms.extra, ms.extra ? " (with those outside the plan)" : "",
                (unsigned long long)ms.rows, dir, dir, dir);
    return 0;
}

/* A shard's closing lines: whether it joined the shards. */
static void shard_done(deftsim_sweep *sw, const deftsim_sweep_summary *sum)
{
    unsigned si, sn;
    deftsim_sweep_shard(sw, &si, &sn);
    const char *out = deftsim_sweep_output(sw);
    fprintf(stderr,
            "deftsim sweep: shard %u/%u: %zu points: %zu run (%llu rows) in %.1f s, %zu skipped "
            "(finished earlier) -> %s\n",
            si, sn, sum->planned, sum->ran, (unsigned long long)sum->rows, sum->seconds,
            sum->skipped, out);
    if (sum->joined)
        fprintf(stderr, "  every shard has finished: rows.csv and manifest.json joined\n"
                        "  next: deftsim analyze %s\n", out);
    else
        fprintf(stderr, "  other shards are not finished: the last one to finish joins rows.csv, "
                        "or run deftsim sweep --merge %s\n", out);
}

/* Stopped by SIGINT or SIGTERM (deftsim_cli_catch_stop): what is kept, and how to go on. */
static int stopped(deftsim_sweep *sw, const deftsim_sweep_summary *sum, int argc, char **argv)
{
    unsigned si, sn;
    deftsim_sweep_shard(sw, &si, &sn);
    const char *out = deftsim_sweep_output(sw);
    char record[128];
    if (sn) snprintf(record, sizeof record, "shards/shard-%u-of-%u.json", si, sn);
    fprintf(stderr,
            "deftsim sweep: stopped by %s: %zu of %s%zu points finished (%zu in this sweep, %zu "
            "earlier), their files in %s/points/; %s/%s says interrupted; the point that was "
            "running is dropped, no file half-written\n"
            "  resume (the finished points are kept, the other %zu run): ",
            deftsim_cli_stop_name(), sum->finished, sn ? "this shard's " : "", sum->planned,
            sum->ran, sum->skipped, out, out, sn ? record : "manifest.json",
            sum->planned - sum->finished);
    deftsim_cli_print_command(stderr, argc, argv);
    fputc('\n', stderr);
    return deftsim_cli_stop_exit();
}

/* The memory check, the sweep and its closing lines. */
static int run_sweep(deftsim_sweep *sw, int quiet, int argc, char **argv)
{
    deftsim_status st = deftsim_sweep_check_memory(sw, NULL);
    if (st) return deftsim_cli_fail(st);
    if (!quiet) deftsim_conditions_log(stderr, "deftsim sweep", deftsim_sweep_config(sw));
    deftsim_sweep_summary sum;
    memset(&sum, 0, sizeof sum);
    st = deftsim_sweep_run(sw, &sum);
    if (st && sum.interrupted) return stopped(sw, &sum, argc, argv);
    if (st) {
        int rc = deftsim_cli_fail(st);
        if (sum.planned)
            fprintf(stderr, "deftsim sweep: %zu of %zu points ran in %.1f s, %zu skipped (finished "
                            "earlier) -> %s\n",
                    sum.ran, sum.planned, sum.seconds, sum.skipped, deftsim_sweep_output(sw));
        return rc;
    }
    unsigned si, sn;
    deftsim_sweep_shard(sw, &si, &sn);
    if (!quiet && sn) shard_done(sw, &sum);
    else if (!quiet)
        fprintf(stderr,
                "deftsim sweep: %zu points: %zu run (%llu rows) in %.1f s, %zu skipped (finished "
                "earlier) -> %s\n  next: deftsim analyze %s\n",
                sum.planned, sum.ran, (unsigned long long)sum.rows, sum.seconds, sum.skipped,
                deftsim_sweep_output(sw), deftsim_sweep_output(sw));
    return 0;
}

/* Under mpirun: spread mode (docs/CLUSTER.md), every rank running each point on its block of
 * the workers; rank 0 keeps the folder and reports. Otherwise, unless dry: Ctrl-C and SIGTERM
 * stop the sweep between points and iterations, keeping what finished (under mpirun the ranks
 * wait for each other: a signal ends them as before). */
static deftsim_status spread_setup(int *spread, deftsim_team *team, deftsim_sweep_options *so,
                                   int *quiet, int dry)
{
    deftsim_status st = deftsim_mpi_check_launch("sweep", 0, spread);
    if (!st && !*spread && !dry) so->stop = deftsim_cli_catch_stop();
    if (st || !*spread) return st;
    if ((st = deftsim_mpi_spread_team(team))) return st;
    so->team = team;
    if (team->rank != 0) *quiet = 1;
    return DEFTSIM_OK;
}

int deftsim_cmd_sweep(int argc, char **argv)
{
    static const struct option opts[] = {
        {"set", required_argument, NULL, 's'},
        {"vary", required_argument, NULL, 'V'},
        {"output", required_argument, NULL, 'o'},
        {"dry-run", no_argument, NULL, 'n'},
        {"ram", required_argument, NULL, 'r'},
        {"prep-threads", required_argument, NULL, 'j'},
        {"progress", required_argument, NULL, 'p'},
        {"quiet", no_argument, NULL, 'q'},
        {"rerun-noisy", no_argument, NULL, 'N'},
        {"warmup", required_argument, NULL, 'W'},
        {"shard", required_argument, NULL, 'S'},
        {"merge", required_argument, NULL, 'M'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    deftsim_cli_sets sets;
    const char **vary = calloc((size_t)argc + 1, sizeof *vary);
    if (deftsim_cli_sets_init(&sets, argc) || !vary) {
        deftsim_cli_sets_free(&sets);
        free(vary);
        deftsim_cli_fail(deftsim_error_nomem("deftsim sweep"));
        return 1;
    }
    size_t nvary = 0;
    int dry = 0, quiet = 0, c, rc = 0;
    int mode = -1; /* -1 auto, 1 bar, 0 lines */
    deftsim_sweep_options so;
    memset(&so, 0, sizeof so);
    deftsim_config *cfg = NULL;
    deftsim_sweep *sw = NULL;
    deftsim_cli_sweep_progress *bar = NULL;
    const char *merge_dir = NULL;
    int others = 0; /* options other than --quiet and --progress, refused with --merge */
    optind = 0;
    while ((c = getopt_long(argc, argv, "s:V:o:nr:j:p:qhNW:", opts, NULL)) != -1) {
        if (c != 'q' && c != 'p' && c != 'M' && c != 'h') others = c;
        switch (c) {
        case 's': deftsim_cli_sets_add(&sets, optarg); break;
        case 'V': vary[nvary++] = optarg; break;
        case 'o':
            if ((rc = deftsim_cli_sets_output(&sets, optarg))) goto done;
            break;
        case 'n': dry = 1; break;
        case 'r':
            if (deftsim_parse_size(optarg, &so.ram_bytes)) {
                rc = deftsim_cli_usage_error("sweep", "--ram: '%s' is not a size (e.g. 24G)", optarg);
                goto done;
            }
            break;
        case 'j': {
            int64_t v;
            if (deftsim_parse_i64(optarg, &v) || v < 1 || v > 256) {
                rc = deftsim_cli_usage_error("sweep", "--prep-threads: '%s' is not in [1, 256]", optarg);
                goto done;
            }
            so.prep_threads = (unsigned)v;
            break;
        }
        case 'p':
            if (!strcmp(optarg, "auto")) mode = -1;
            else if (!strcmp(optarg, "bar")) mode = 1;
            else if (!strcmp(optarg, "lines")) mode = 0;
            else {
                rc = deftsim_cli_usage_error("sweep", "--progress: '%s' is not auto, bar or lines", optarg);
                goto done;
            }
            break;
        case 'q': quiet = 1; break;
        case 'N': so.rerun_noisy = 1; break;
        case 'W': {
            int64_t v;
            if (deftsim_parse_i64(optarg, &v) || v < 0 || v > 1000000) {
                rc = deftsim_cli_usage_error("sweep", "--warmup: '%s' is not in [0, 1000000]", optarg);
                goto done;
            }
            so.noisy_warmup = (size_t)v;
            break;
        }
        case 'S':
            if ((rc = parse_shard(optarg, &so))) goto done;
            break;
        case 'M': merge_dir = optarg; break;
        case 'h': usage(stdout); goto done;
        default: usage(stderr); rc = 2; goto done;
        }
    }
    if (merge_dir) {
        if (others || optind < argc) {
            rc = deftsim_cli_usage_error("sweep", "--merge DIR takes no SCENARIO and no option "
                                                  "but --quiet: the folder says what to join");
            goto done;
        }
        if (!deftsim_cli_parse_only) rc = merge(merge_dir, quiet);
        goto done;
    }
    if (optind >= argc) {
        rc = deftsim_cli_usage_error("sweep", "missing SCENARIO");
        goto done;
    }
    if (optind + 1 < argc) {
        rc = deftsim_cli_usage_error("sweep", "unexpected argument '%s'", argv[optind + 1]);
        goto done;
    }
    deftsim_cli_sets_finish(&sets);
    deftsim_status st = deftsim_config_load(argv[optind], sets.kv, sets.n, &cfg);
    if (st) {
        rc = deftsim_cli_fail(st);
        goto done;
    }
    if (deftsim_cli_parse_only) goto done;
    int spread = 0;
    deftsim_team team;
    if ((st = spread_setup(&spread, &team, &so, &quiet, dry))) {
        rc = deftsim_cli_fail(st);
        goto done;
    }
    so.vary = vary;
    so.nvary = nvary;
    if (!quiet) {
        if (!(bar = deftsim_cli_sweep_progress_new(stderr, mode == -1 ? isatty(STDERR_FILENO)
                                                                       : mode))) {
            deftsim_cli_fail(deftsim_error_nomem("deftsim sweep"));
            rc = 1;
            goto done;
        }
        so.progress = (deftsim_sweep_progress){deftsim_cli_sweep_progress_event, bar};
    }
    if ((st = deftsim_sweep_new(cfg, &so, &sw))) {
        rc = deftsim_cli_fail(st);
        goto done;
    }
    /* Spread mode: the plan is rank 0's to print; every rank checks its own memory. */
    if (spread && dry && team.rank != 0)
        rc = (st = deftsim_sweep_check_memory(sw, NULL)) ? deftsim_cli_fail(st) : 0;
    else
        rc = dry ? dry_run(sw, &so) : run_sweep(sw, quiet, argc, argv);
    /* Spread mode: a rank that failed ends them all (the others wait for it in MPI). */
    if (spread && rc && !dry) deftsim_mpi_abort(rc);
    deftsim_mpi_finalize();
done:
    deftsim_cli_release_stop();
    deftsim_sweep_free(sw);
    deftsim_cli_sweep_progress_free(bar);
    deftsim_config_free(cfg);
    deftsim_cli_sets_free(&sets);
    free(vary);
    return rc;
}
