/* progress.h - what deftsim run and sweep show on the terminal while they work (progress.c):
 * the library reports through callbacks and prints nothing itself. */
#ifndef DEFTSIM_CLI_PROGRESS_H
#define DEFTSIM_CLI_PROGRESS_H

#include <stdio.h>

#include "deftsim_engine.h"
#include "deftsim_sweep.h"
#include "deftsim_train.h"

/* deftsim run: one plain line per finished point to the FILE * in user. */
void deftsim_cli_run_progress(void *user, const deftsim_run_point_done *p);

/* deftsim sweep: progress to f. tty: one status line redrawn every second, with a bar and the
 * time left, and a line for a failed point; otherwise one plain line per point. Pass
 * deftsim_cli_sweep_progress_event as the callback and the object as its user data. */
typedef struct deftsim_cli_sweep_progress deftsim_cli_sweep_progress;
deftsim_cli_sweep_progress *deftsim_cli_sweep_progress_new(FILE *f, int tty);
void deftsim_cli_sweep_progress_free(deftsim_cli_sweep_progress *g);
void deftsim_cli_sweep_progress_event(void *user, const deftsim_sweep_event *ev);

/* deftsim train and trace record: one line per curve row, divergence and recorded iteration,
 * to the FILE * in user. */
void deftsim_cli_train_progress(void *user, const deftsim_train_event *ev);

#endif
