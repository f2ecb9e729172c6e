/* cli.h - shared pieces of the deftsim command line program (not part of the library). */
#ifndef DEFTSIM_CLI_H
#define DEFTSIM_CLI_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "deftsim_error.h"

/* Each subcommand: argv[0] is the subcommand name; returns the process exit code
 * (0 ok, 2 usage or input error, 1 runtime failure). */
typedef int (*deftsim_cli_fn)(int argc, char **argv);

/* The whole program (main() only calls it): dispatches argv to a subcommand. */
int deftsim_cli_main(int argc, char **argv);

/* Nonzero: every subcommand returns 0 right after its options and arguments were parsed and
 * validated, before any work or file output (the command-line fuzz target, tests/fuzz). */
extern int deftsim_cli_parse_only;

int deftsim_cmd_bench(int argc, char **argv);
int deftsim_cmd_config(int argc, char **argv);
int deftsim_cmd_models(int argc, char **argv);
int deftsim_cmd_run(int argc, char **argv);
int deftsim_cmd_sweep(int argc, char **argv);
int deftsim_cmd_analyze(int argc, char **argv);
int deftsim_cmd_plot(int argc, char **argv);
int deftsim_cmd_trace(int argc, char **argv);
int deftsim_cmd_train(int argc, char **argv);
int deftsim_cmd_validate(int argc, char **argv);
/* `deftsim trace record`, dispatched by cmd_trace.c, written in cmd_train.c. */
int deftsim_cmd_trace_record(int argc, char **argv);
int deftsim_cmd_trace_calibrate(int argc, char **argv);

/* Prints "deftsim: <message>" for st's recorded message to stderr and returns the exit code. */
int deftsim_cli_fail(deftsim_status st);

/* Prints "deftsim <cmd>: <message>\nTry 'deftsim <cmd> --help'." and returns 2. */
int deftsim_cli_usage_error(const char *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* The scenario overrides of a command (cli_sets.c): every --set S.K=V in order, then
 * --output DIR as "scenario.output=DIR", last so that it wins over any --set
 * scenario.output. kv and n go to deftsim_config_load once deftsim_cli_sets_finish ran. */
typedef struct {
    const char **kv;
    size_t n;
    char *output; /* the --output override, or NULL */
} deftsim_cli_sets;
/* Room for the overrides of argc arguments: 0, or -1 when out of memory (the caller says so). */
int deftsim_cli_sets_init(deftsim_cli_sets *s, int argc);
/* --set kv (kept by pointer: an argv string). */
void deftsim_cli_sets_add(deftsim_cli_sets *s, const char *kv);
/* --output dir (a later one replaces an earlier one): 0, or 1 (the exit status of a runtime
 * failure) when out of memory; the caller says so. */
int deftsim_cli_sets_output(deftsim_cli_sets *s, const char *dir);
/* Appends the --output override, if any, after the --set ones. Once, before loading. */
void deftsim_cli_sets_finish(deftsim_cli_sets *s);
/* Frees the overrides (a zeroed or freed one too). */
void deftsim_cli_sets_free(deftsim_cli_sets *s);

/* SIGINT and SIGTERM while deftsim run or sweep write a folder (cli_common.c): the first one
 * sets the flag returned, which the library checks between points, iterations and simulations
 * (deftsim_run_options.stop), and says on stderr that the run is stopping; a second one ends
 * the process at once, as a killed run (the next run cleans up and resumes). A forked child
 * (the network simulation's) dies of the signal as before. A signal the process was started
 * ignoring stays ignored. deftsim_cli_release_stop() restores the default handling. */
const volatile sig_atomic_t *deftsim_cli_catch_stop(void);
void deftsim_cli_release_stop(void);
/* The name of the signal caught ("SIGINT", "SIGTERM"), and the exit status of a process it
 * ended: 128 + the signal's number (130, 143), as the shell reports it. */
const char *deftsim_cli_stop_name(void);
int deftsim_cli_stop_exit(void);
/* "deftsim ARGS..." on f, each argument quoted for a POSIX shell where it needs it: the
 * command to run again to resume. */
void deftsim_cli_print_command(FILE *f, int argc, char *const *argv);

/* Writes s to f as a gnuplot single-quoted string (a quote is doubled). */
void deftsim_cli_gp_quote(FILE *f, const char *s);
/* The registry's methods as gnuplot arrays for plots/style.gp (mreg_name, mreg_style,
 * mreg_title, mreg_short and the style's mreg_lc, mreg_pt, mreg_ps, mreg_lw, mreg_dt: one entry
 * per method, the style derived from its registry position): a malloc'd "-e" argument, NULL
 * when out of memory (gnuplot.c). */
char *deftsim_cli_gp_methods(void);

/* Runs `gnuplot -e METHODS -e VARS SCRIPT` (METHODS: deftsim_cli_gp_methods(); its stdout
 * discarded, its messages on our stderr). */
deftsim_status deftsim_cli_gnuplot_run(const char *vars, const char *script);
/* The conditions (src/engine/deftsim_conditions.h) every later figure shows under its subtitle, one
 * line each (plots/style.gp's `conditions` and `compute_note`); "" or NULL: none. */
void deftsim_cli_gp_set_conditions(const char *network, const char *compute);

/* deftsim analyze: the points' time by stage from src's manifest into outdir/stages.csv and a
 * section appended to summary.md (md); nothing for a file of rows (analyze_stages.c). */
deftsim_status deftsim_cli_analyze_stages(const char *src, const char *outdir, const char *md,
                                          int quiet);

#endif
