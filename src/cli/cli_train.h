/* cli_train.h - `deftsim analyze` and `deftsim plot` on deftsim train folders
 * (analyze_train.c, plot_train.c); cmd_analyze.c and cmd_plot.c hand such folders over. */
#ifndef DEFTSIM_CLI_TRAIN_H
#define DEFTSIM_CLI_TRAIN_H

#include <stddef.h>

#include "deftsim_analysis.h"

/* dirs: the train folders (one repeat each); target: --target's text or NULL for the
 * default; outdir: NULL for the first folder. Returns the exit code. */
int deftsim_cli_analyze_train(int ndirs, char **dirs, const deftsim_boot_options *boot,
                              const char *target, const char *outdir, int quiet);

/* Draws dir's training curves into dir/plots with the scripts of `scripts`, in each of the
 * formats ("png", "svg", "pdf"). Returns the exit code. */
int deftsim_cli_plot_train(const char *dir, const char *scripts, const char (*formats)[8],
                           size_t nformats, int quiet);

#endif
