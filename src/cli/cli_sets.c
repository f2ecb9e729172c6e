/* cli_sets.c - the scenario overrides of run, sweep, train, trace record and config: every
 * --set S.K=V in order, then --output DIR as scenario.output=DIR (cli.h). */
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"

int deftsim_cli_sets_init(deftsim_cli_sets *s, int argc)
{
    s->output = NULL;
    s->n = 0;
    /* Each --set takes at least one argument: argc of them at most, and the --output one. */
    s->kv = calloc((size_t)argc + 2, sizeof *s->kv);
    return s->kv ? 0 : -1;
}

void deftsim_cli_sets_add(deftsim_cli_sets *s, const char *kv) { s->kv[s->n++] = kv; }

int deftsim_cli_sets_output(deftsim_cli_sets *s, const char *dir)
{
    free(s->output);
    if (asprintf(&s->output, "scenario.output=%s", dir) < 0) {
        s->output = NULL;
        return 1;
    }
    return 0;
}

void deftsim_cli_sets_finish(deftsim_cli_sets *s)
{
    /* --output wins over any --set scenario.output: it comes last. */
    if (s->output) s->kv[s->n++] = s->output;
}

void deftsim_cli_sets_free(deftsim_cli_sets *s)
{
    free(s->output);
    free(s->kv);
    s->output = NULL;
    s->kv = NULL;
    s->n = 0;
}
