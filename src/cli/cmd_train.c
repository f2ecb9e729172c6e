/* cmd_train.c - `deftsim train` (real training with each sparsifier in the loop) and
 * `deftsim trace record` (a trace of a real training run's gradients). */
#include <getopt.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "deftsim_config.h"
#include "deftsim_net_mpi.h"
#include "deftsim_nn.h"
#include "deftsim_train.h"
#include "deftsim_util.h"
#include "progress.h"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: deftsim train SCENARIO [--set section.key=value]... [--output DIR] [--quiet]\n"
            "       deftsim train --table mlp|cnn\n"
            "\n"
            "Trains [train] model on Fashion-MNIST with P data-parallel workers, every sparsifier\n"
            "of [sparsify] in the loop (the same code 'deftsim run' simulates), at every density\n"
            "and every worker count of [workers]; dense runs once per P. Writes into [scenario]\n"
            "output:\n"
            "  points/<method>_d<density>_P<P>.csv  one file per point, committed when it ends\n"
            "  curves.csv                          every point's rows: test accuracy and loss\n"
            "                                      every [train] eval_every iterations\n"
            "  final.csv                           each point's last row\n"
            "  manifest.json                       configuration, data, network, timings\n"
            "A folder holding other results (another scenario's, a run's, a sweep's, a trace) is\n"
            "refused and left as it is; a rerun of the same scenario replaces its own results.\n"
            "docs/TRAINING.md describes the training, the columns and measured results.\n"
            "\n"
            "  -s, --set S.K=V   override key K of section S (repeatable; a later one wins)\n"
            "  -o, --output DIR  results folder (same as --set scenario.output=DIR)\n"
            "  -q, --quiet       no progress lines on stderr\n"
            "  -t, --table NET   print the model table of network mlp or cnn as CSV (the files\n"
            "                    of train/models/) and exit\n"
            "  -h, --help        this help\n"
            "\n"
            "Exit status: 0 done, 2 bad usage or scenario (or a refused folder), 1 failure while\n"
            "running.\n");
}

static int print_table(const char *name)
{
    deftsim_nn_kind kind;
    if (deftsim_nn_kind_from_name(name, &kind))
        return deftsim_cli_usage_error("train", "--table: '%s' is not mlp or cnn", name);
    deftsim_nn_spec spec;
    deftsim_nn_spec_default(kind, &spec);
    deftsim_nn *net;
    deftsim_status st = deftsim_nn_new(&spec, 1, &net);
    if (st) return deftsim_cli_fail(st);
    const deftsim_model *m = deftsim_nn_model(net);
    printf("index,name,shape,numel\n");
    for (size_t i = 0; i < m->nlayers; i++) {
        const deftsim_layer *L = &m->layers[i];
        printf("%zu,%s,", i, L->name);
        for (uint32_t d = 0; d < L->ndim; d++) printf(d ? "x%" PRIu64 : "%" PRIu64, L->shape[d]);
        printf(",%" PRIu64 "\n", L->numel);
    }
    deftsim_nn_free(net);
    return 0;
}

int deftsim_cmd_train(int argc, char **argv)
{
    static const struct option opts[] = {
        {"set", required_argument, NULL, 's'},
        {"output", required_argument, NULL, 'o'},
        {"quiet", no_argument, NULL, 'q'},
        {"table", required_argument, NULL, 't'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    deftsim_cli_sets sets;
    if (deftsim_cli_sets_init(&sets, argc)) {
        deftsim_cli_fail(deftsim_error_nomem("deftsim train"));
        return 1;
    }
    int quiet = 0, c, rc = 0;
    const char *table = NULL;
    deftsim_config *cfg = NULL;
    optind = 0;
    while ((c = getopt_long(argc, argv, "s:o:qt:h", opts, NULL)) != -1) {
        switch (c) {
        case 's': deftsim_cli_sets_add(&sets, optarg); break;
        case 'o':
            if (deftsim_cli_sets_output(&sets, optarg)) {
                deftsim_cli_fail(deftsim_error_nomem("deftsim train"));
                rc = 1;
                goto done;
            }
            break;
        case 'q': quiet = 1; break;
        case 't': table = optarg; break;
        case 'h': usage(stdout); goto done;
        default: usage(stderr); rc = 2; goto done;
        }
    }
    if (table) {
        rc = optind < argc ? deftsim_cli_usage_error("train", "--table takes no SCENARIO")
                           : print_table(table);
        goto done;
    }
    if (optind >= argc) {
        rc = deftsim_cli_usage_error("train", "missing SCENARIO");
        goto done;
    }
    if (optind + 1 < argc) {
        rc = deftsim_cli_usage_error("train", "unexpected argument '%s'", argv[optind + 1]);
        goto done;
    }
    deftsim_cli_sets_finish(&sets);
    deftsim_status st = deftsim_config_load_train(argv[optind], sets.kv, sets.n, &cfg);
    if (st) {
        rc = deftsim_cli_fail(st);
        goto done;
    }
    if (deftsim_cli_parse_only) goto done;
    int spread_ = 0;
    if ((st = deftsim_mpi_check_launch("train", 0, &spread_))) {
        rc = deftsim_cli_fail(st);
        goto done;
    }
    deftsim_train_summary sum;
    const deftsim_train_progress lines = {deftsim_cli_train_progress, stderr};
    if ((st = deftsim_train_run(cfg, quiet ? NULL : &lines, &sum))) {
        rc = deftsim_cli_fail(st);
        goto done;
    }
    if (!quiet)
        fprintf(stderr, "deftsim train: %zu points, %" PRIu64 " rows in %.1f s -> %s/curves.csv\n",
                sum.points, sum.rows, sum.seconds, cfg->scenario.output);
done:
    deftsim_config_free(cfg);
    deftsim_cli_sets_free(&sets);
    return rc;
}

/* ---- trace record ------------------------------------------------------------------------ */

static void record_usage(FILE *out)
{
    fprintf(out,
            "usage: deftsim trace record SCENARIO -o DIR [--workers P] [--method M]\n"
            "                            [--density D] [--set section.key=value]... [--quiet]\n"
            "\n"
            "Trains [train] model on Fashion-MNIST as 'deftsim train' does, up to the last\n"
            "iteration of [train] record, and writes every worker's gradient (before any\n"
            "communication) at each iteration of [train] record into a trace in DIR\n"
            "(traces/FORMAT.md); the manifest's provenance names the model, data, batch size,\n"
            "learning rate, seed, P and iterations. The same scenario and seed write the same\n"
            "bytes.\n"
            "\n"
            "  -o, --output DIR  the trace directory\n"
            "  -P, --workers P   workers (default: the one count of [workers] counts)\n"
            "  -m, --method M    aggregation the recorded run trains with (default dense)\n"
            "  -d, --density D   its density (default: the first of [sparsify] densities)\n"
            "  -s, --set S.K=V   override key K of section S (repeatable)\n"
            "  -q, --quiet       no progress lines on stderr\n");
}

int deftsim_cmd_trace_record(int argc, char **argv)
{
    static const struct option opts[] = {
        {"output", required_argument, NULL, 'o'},
        {"workers", required_argument, NULL, 'P'},
        {"method", required_argument, NULL, 'm'},
        {"density", required_argument, NULL, 'd'},
        {"set", required_argument, NULL, 's'},
        {"quiet", no_argument, NULL, 'q'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    deftsim_cli_sets sets;
    if (deftsim_cli_sets_init(&sets, argc)) {
        deftsim_cli_fail(deftsim_error_nomem("deftsim trace record"));
        return 1;
    }
    int quiet = 0, c, rc = 0, have_density = 0;
    const char *dir = NULL;
    uint64_t P = 0;
    double density = 0;
    deftsim_method method = DEFTSIM_METHOD_DENSE;
    deftsim_config *cfg = NULL;
    optind = 0;
    while ((c = getopt_long(argc, argv, "o:P:m:d:s:qh", opts, NULL)) != -1) {
        switch (c) {
        case 'o': dir = optarg; break;
        case 'P':
            if (deftsim_parse_u64(optarg, &P) || P < 1 || P > 65536) {
                rc = deftsim_cli_usage_error("trace", "record: --workers: '%s' is not in [1, 65536]",
                                             optarg);
                goto done;
            }
            break;
        case 'm':
            if (deftsim_method_from_name(optarg, &method)) {
                char all[600];
                deftsim_method_list(0, all, sizeof all);
                rc = deftsim_cli_usage_error("trace", "record: --method: '%s' is not a method "
                                             "(%s)", optarg, all);
                goto done;
            }
            break;
        case 'd':
            if (deftsim_parse_double(optarg, &density) || !(density > 0 && density <= 1)) {
                rc = deftsim_cli_usage_error("trace", "record: --density: '%s' is not in (0, 1]",
                                             optarg);
                goto done;
            }
            have_density = 1;
            break;
        case 's': deftsim_cli_sets_add(&sets, optarg); break;
        case 'q': quiet = 1; break;
        case 'h': record_usage(stdout); goto done;
        default: record_usage(stderr); rc = 2; goto done;
        }
    }
    if (optind >= argc) {
        rc = deftsim_cli_usage_error("trace", "record: missing SCENARIO");
        goto done;
    }
    if (optind + 1 < argc) {
        rc = deftsim_cli_usage_error("trace", "record: unexpected argument '%s'", argv[optind + 1]);
        goto done;
    }
    if (!dir) {
        rc = deftsim_cli_usage_error("trace", "record needs -o DIR");
        goto done;
    }
    deftsim_cli_sets_finish(&sets);
    deftsim_status st = deftsim_config_load_train(argv[optind], sets.kv, sets.n, &cfg);
    if (st) {
        rc = deftsim_cli_fail(st);
        goto done;
    }
    if (!P) {
        if (cfg->workers.ncounts != 1) {
            rc = deftsim_cli_usage_error("trace", "record: [workers] counts lists %zu worker "
                                         "counts; choose one with --workers", cfg->workers.ncounts);
            goto done;
        }
        P = (uint64_t)cfg->workers.counts[0];
    }
    if (!have_density) density = cfg->sparsify.densities[0];
    if (deftsim_cli_parse_only) goto done;
    double t0 = deftsim_now();
    const deftsim_train_progress lines = {deftsim_cli_train_progress, stderr};
    if ((st = deftsim_train_record(cfg, method, density, (uint32_t)P, dir, quiet ? NULL : &lines))) {
        rc = deftsim_cli_fail(st);
        goto done;
    }
    if (!quiet)
        fprintf(stderr, "deftsim trace record: %s: %zu iterations x %" PRIu64 " workers in %.1f s\n",
                dir, cfg->train.nrecord, P, deftsim_now() - t0);
done:
    deftsim_config_free(cfg);
    deftsim_cli_sets_free(&sets);
    return rc;
}
