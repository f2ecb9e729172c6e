/* progress.h - what deftsim run and sweep show on the terminal while they work (progress.c):
 * the library reports through callbacks and prints nothing itself. */
#ifndef DEFTSIM_CLI_PROGRESS_H
#define DEFTSIM_CLI_PROGRESS_H

#include <stdio.h>

#include "deftsim_engine.h"

/* deftsim run: one plain line per finished point to the FILE * in user. */
void deftsim_cli_run_progress(void *user, const deftsim_run_point_done *p);

#endif
