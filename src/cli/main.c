/* main.c - the deftsim command: git-style subcommands, the table of them and the dispatch.
 *
 * Exit codes: 0 success, 2 usage or input error, 1 runtime failure. Data goes to stdout or
 * files, messages to stderr. Calls go one way: main.c -> cmd_*.c -> cli_common.c (what every
 * subcommand uses), so no subcommand calls back into this file. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <gsl/gsl_errno.h>

#include "cli.h"
#include "deftsim_build_info.h"

typedef struct {
    const char *name;
    deftsim_cli_fn fn;
    const char *summary;
} cli_command;

static const cli_command commands[] = {
    {"analyze", deftsim_cmd_analyze, "statistics of a results folder: summary.csv, summary.md"},
    {"bench", deftsim_cmd_bench, "benchmarks: kernels, sim"},
    {"config", deftsim_cmd_config, "print the fully resolved configuration of a scenario"},
    {"models", deftsim_cmd_models, "list the built-in model tables"},
    {"plot", deftsim_cmd_plot, "figures of a results folder (PNG, SVG, PDF) with gnuplot"},
    {"run", deftsim_cmd_run, "run a scenario: every sparsifier, density and worker count"},
    {"sweep", deftsim_cmd_sweep, "run every combination of a scenario's lists, resumable"},
    {"trace", deftsim_cmd_trace, "gradient traces: info, gen"},
    {"train", deftsim_cmd_train, "train on Fashion-MNIST with each sparsifier in the loop"},
    {"validate", deftsim_cmd_validate, "the network model against measurements: nccl (nccl-tests)"},
};

static void usage(FILE *out)
{
    fprintf(out,
            "usage: deftsim [--version] [--help] <command> [<args>]\n"
            "\n"
            "deftsim simulates how gradient sparsifiers (DEFT, Top-k, DGC, gTop-k, CLT-k,\n"
            "MiCRO, ExDyna, Ok-Topk) scale with the number of workers. Commands:\n\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(out, "\nRun 'deftsim <command> --help' for a command's options.\n");
}

/* GSL's default handler aborts the process; deftsim records the error instead and lets the
 * caller's status checks report it. */
static void gsl_handler(const char *reason, const char *file, int line, int gsl_errno)
{
    deftsim_error_set(DEFTSIM_E_RUNTIME, "GSL: %s (%s:%d, code %d)", reason, file, line,
                      gsl_errno);
}

int deftsim_cli_main(int argc, char **argv)
{
    gsl_set_error_handler(gsl_handler);
    optind = 0; /* a fresh getopt state: this may run more than once in a process */

    static const struct option opts[] = {
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    int c;
    /* '+' stops at the first non-option: the subcommand and its own options. */
    while ((c = getopt_long(argc, argv, "+hV", opts, NULL)) != -1) {
        switch (c) {
        case 'h': usage(stdout); return 0;
        case 'V': printf("deftsim %s (commit %s)\n", DEFTSIM_VERSION, DEFTSIM_GIT_COMMIT); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind >= argc) {
        usage(stderr);
        return 2;
    }
    const char *name = argv[optind];
    if (strcmp(name, "help") == 0) {
        if (optind + 1 < argc) {
            char *hargv[] = {argv[optind + 1], "--help", NULL};
            for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
                if (strcmp(commands[i].name, hargv[0]) == 0) {
                    optind = 0;
                    return commands[i].fn(2, hargv);
                }
        }
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        if (strcmp(commands[i].name, name) == 0) {
            int sub_argc = argc - optind;
            char **sub_argv = argv + optind;
            optind = 0; /* reset getopt for the subcommand */
            return commands[i].fn(sub_argc, sub_argv);
        }
    }
    fprintf(stderr, "deftsim: '%s' is not a deftsim command. See 'deftsim --help'.\n", name);
    return 2;
}
