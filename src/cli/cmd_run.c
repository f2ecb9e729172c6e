/* cmd_run.c - `deftsim run`: run a scenario, every sparsifier, density and worker count. */
#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "deftsim_conditions.h"
#include "deftsim_config.h"
#include "deftsim_engine.h"
#include "deftsim_net_mpi.h"
#include "deftsim_units.h"
#include "deftsim_util.h"
#include "progress.h"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: deftsim run SCENARIO [--set section.key=value]... [--output DIR] [--dump DIR]\n"
            "                   [--dry-run] [--ram SIZE] [--prep-threads N] [--quiet]\n"
            "\n"
            "Runs every sparsifier of the scenario at every density and worker count over the\n"
            "gradient source's iterations, with error feedback, and writes into [scenario] output\n"
            "(or --output DIR):\n"
            "  points/<method>_d<density>_P<P>.csv  one file per point, committed when it ends\n"
            "  rows.csv                            every point's rows, one header\n"
            "  manifest.json                       configuration, seed, version, machine\n"
            "  platforms/P<P>.xml                  the SimGrid platform each P was simulated on\n"
            "  platforms/<name>                    with topology = file: a copy of platform_file\n"
            "Every point's communication is then simulated with SimGrid ([network], docs/NETWORK.md;\n"
            "--set network.simulate=0 skips it). docs/OUTPUT.md names every column and file.\n"
            "Before anything runs, the memory every point needs is checked against [engine]\n"
            "memory_budget of the RAM. A folder holding other results (a sweep's, another\n"
            "scenario's, a trace) is refused and left as it is; a rerun of the same scenario\n"
            "replaces its own results, or resumes them when that run did not finish (stopped,\n"
            "killed or failed): the finished points are kept, the others run.\n"
            "Ctrl-C (SIGINT) or SIGTERM stops the run before its next iteration: the finished\n"
            "points are kept, the manifest says interrupted, and the command to resume is printed\n"
            "(exit status 130 or 143; a second signal stops at once).\n"
            "\n"
            "  -s, --set S.K=V       override key K of section S (repeatable; a later one wins)\n"
            "  -o, --output DIR      results folder (same as --set scenario.output=DIR)\n"
            "  -d, --dump DIR        also write each worker's selected indices and each\n"
            "                        iteration's union and aggregated values as .npy files\n"
            "  -n, --dry-run         print the memory plan and stop (exit 2 if it does not fit or\n"
            "                        the folder would be refused)\n"
            "  -r, --ram SIZE        plan for SIZE of RAM instead of this machine's (bytes, or\n"
            "                        with a suffix K, M, G, T: powers of 1024; e.g. 24G)\n"
            "  -j, --prep-threads N  threads preparing accumulators (default: every CPU); the\n"
            "                        timed kernels use [device] threads\n"
            "  -q, --quiet           no progress lines on stderr\n"
            "  -h, --help            this help\n"
            "\n"
            "Exit status: 0 done, 2 bad usage or scenario (including a run over the memory\n"
            "budget or a refused folder), 1 failure while running, 130 or 143 stopped by SIGINT\n"
            "or SIGTERM.\n");
}

/* Stopped by SIGINT or SIGTERM (deftsim_cli_catch_stop): what is kept, and how to go on. */
static int stopped(const deftsim_config *cfg, const deftsim_run_summary *sum, int argc, char **argv)
{
    const char *out = cfg->scenario.output;
    size_t total = cfg->sparsify.nmethods * cfg->sparsify.ndensities * cfg->workers.ncounts;
    fprintf(stderr,
            "deftsim run: stopped by %s: %zu of %zu points finished (%zu of them kept from the "
            "earlier run), their files in %s/points/; %s/manifest.json lists them with status "
            "interrupted; the point that was running is dropped, no file half-written\n"
            "  resume (the finished points are kept, the other %zu run): ",
            deftsim_cli_stop_name(), sum->points, total, sum->resumed, out, out,
            total - sum->points);
    deftsim_cli_print_command(stderr, argc, argv);
    fputc('\n', stderr);
    return deftsim_cli_stop_exit();
}

int deftsim_cmd_run(int argc, char **argv)
{
    static const struct option opts[] = {
        {"set", required_argument, NULL, 's'},
        {"output", required_argument, NULL, 'o'},
        {"dump", required_argument, NULL, 'd'},
        {"dry-run", no_argument, NULL, 'n'},
        {"ram", required_argument, NULL, 'r'},
        {"prep-threads", required_argument, NULL, 'j'},
        {"quiet", no_argument, NULL, 'q'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    deftsim_cli_sets sets;
    if (deftsim_cli_sets_init(&sets, argc)) {
        deftsim_cli_fail(deftsim_error_nomem("deftsim run"));
        return 1;
    }
    int dry = 0, quiet = 0, c, rc = 0;
    deftsim_run_options opt;
    deftsim_run_options_default(&opt);
    deftsim_config *cfg = NULL;
    deftsim_engine *e = NULL;
    /* optind = 0: glibc's getopt starts afresh (main() parsed its own options in "+" mode). */
    optind = 0;
    while ((c = getopt_long(argc, argv, "s:o:d:nr:j:qh", opts, NULL)) != -1) {
        switch (c) {
        case 's': deftsim_cli_sets_add(&sets, optarg); break;
        case 'o':
            if (deftsim_cli_sets_output(&sets, optarg)) {
                deftsim_cli_fail(deftsim_error_nomem("deftsim run"));
                rc = 1;
                goto done;
            }
            break;
        case 'd': opt.dump_dir = optarg; break;
        case 'n': dry = 1; break;
        case 'r':
            if (deftsim_parse_size(optarg, &opt.ram_bytes)) {
                rc = deftsim_cli_usage_error("run", "--ram: '%s' is not a size (e.g. 24G)", optarg);
                goto done;
            }
            break;
        case 'j': {
            int64_t v;
            if (deftsim_parse_i64(optarg, &v) || v < 1 || v > 256) {
                rc = deftsim_cli_usage_error("run", "--prep-threads: '%s' is not in [1, 256]",
                                             optarg);
                goto done;
            }
            opt.prep_threads = (unsigned)v;
            break;
        }
        case 'q': quiet = 1; break;
        case 'h': usage(stdout); goto done;
        default: usage(stderr); rc = 2; goto done;
        }
    }
    if (optind >= argc) {
        rc = deftsim_cli_usage_error("run", "missing SCENARIO");
        goto done;
    }
    if (optind + 1 < argc) {
        rc = deftsim_cli_usage_error("run", "unexpected argument '%s'", argv[optind + 1]);
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
    if ((st = deftsim_mpi_check_launch("run", cfg->execute.network == DEFTSIM_EXEC_MPI, &spread))) {
        rc = deftsim_cli_fail(st);
        goto done;
    }
    if (spread) {
        /* Spread mode (docs/CLUSTER.md): every rank runs the engine on its block of each
         * point's workers; rank 0 writes. */
        if ((st = deftsim_mpi_spread_team(&team))) {
            rc = deftsim_cli_fail(st);
            goto done;
        }
        opt.team = &team;
        if (team.rank != 0) quiet = 1;
    }
    if (cfg->execute.network == DEFTSIM_EXEC_MPI && deftsim_mpi_built()) {
        /* Real mode (docs/CLUSTER.md): rank 0 runs the engine, the others execute its
         * points' schedules with it until it releases them. */
        int rank, size;
        if ((st = deftsim_mpi_init(&rank, &size))) {
            rc = deftsim_cli_fail(st);
            goto done;
        }
        if (rank != 0) {
            if ((st = deftsim_mpi_serve())) rc = deftsim_cli_fail(st);
            goto done;
        }
    }
    if (!quiet) opt.progress = (deftsim_run_progress){deftsim_cli_run_progress, stderr};
    /* Ctrl-C and SIGTERM stop between points and iterations, keeping what finished; not
     * under mpirun, whose ranks wait for each other. */
    if (!dry && !opt.team && cfg->execute.network != DEFTSIM_EXEC_MPI)
        opt.stop = deftsim_cli_catch_stop();
    if ((st = deftsim_engine_new(cfg, &opt, &e))) {
        rc = deftsim_cli_fail(st);
        goto done;
    }
    if (dry) {
        int first = !opt.team || opt.team->rank == 0;
        if (first) deftsim_engine_print_plan(e, stdout);
        /* Spread mode: every rank plans alike; rank 0 says what it found. */
        if ((st = deftsim_engine_check_memory(e)) ||
            (first && (st = deftsim_engine_check_output(e))))
            rc = first ? deftsim_cli_fail(st) : deftsim_status_exit_code(st);
        goto done;
    }
    if (!quiet) deftsim_conditions_log(stderr, "deftsim run", cfg);
    deftsim_run_summary sum;
    memset(&sum, 0, sizeof sum);
    if ((st = deftsim_engine_run(e, &sum))) {
        if (opt.team) {
            /* The other ranks wait for this one in a collective: end them all, with this
             * rank's message. The folder is left as a killed run leaves it. */
            st = deftsim_error_wrap(st, "spread mode, rank %u of %u", opt.team->rank,
                                    opt.team->size);
            deftsim_mpi_abort(deftsim_cli_fail(st));
        }
        rc = sum.interrupted ? stopped(cfg, &sum, argc, argv) : deftsim_cli_fail(st);
        goto done;
    }
    if (!quiet && sum.resumed)
        fprintf(stderr, "deftsim run: resumed: %zu points kept from the earlier run\n", sum.resumed);
    if (!quiet)
        fprintf(stderr, "deftsim run: %zu points, %llu rows in %.2f s -> %s/rows.csv\n", sum.points,
                (unsigned long long)sum.rows, sum.seconds, cfg->scenario.output);
done:
    deftsim_cli_release_stop();
    deftsim_mpi_release();
    deftsim_mpi_finalize();
    deftsim_engine_free(e);
    deftsim_config_free(cfg);
    deftsim_cli_sets_free(&sets);
    return rc;
}
