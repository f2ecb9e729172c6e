/* deftsim_config_inputs.h - what the configuration reads of the files a scenario names, for
 * its own checks and defaults: the [compute] durations or table row (docs/COMPUTE.md) and a
 * trace's size. The engine builds on them (deftsim_compute.h, deftsim_gradsrc.h include this
 * header); they sit here, below the engine, so that the configuration's checks (config_check.c)
 * call only downwards. */
#ifndef DEFTSIM_CONFIG_INPUTS_H
#define DEFTSIM_CONFIG_INPUTS_H

#include <stddef.h>
#include <stdint.h>

#include "deftsim_config.h"
#include "deftsim_error.h"

/* 1 when the scenario has a training step's compute: [compute] forward or backward above 0,
 * or a table. */
int deftsim_compute_enabled(const deftsim_config *cfg);

/* The figures of one iteration. */
typedef struct {
    double forward, backward; /* seconds */
    char origin[512];         /* where they come from: "[compute] forward, backward" or
                                 "FILE:LINE" of the table row */
    char source[1024];        /* the table row's source column; "" for given durations */
} deftsim_compute_times;

/* The forward and backward seconds for the model named model_name (the gradients' model
 * table; [compute] model overrides it): the durations, or the one table row with that model
 * (and [compute] device and batch when set). DEFTSIM_E_INPUT naming the file and line of a bad
 * row ("compute.csv:4: column forward_ms: '-3' is negative"), or the file and the keys when no
 * row or several match. */
deftsim_status deftsim_compute_resolve(const deftsim_config *cfg, const char *model_name,
                                       deftsim_compute_times *out);

/* A trace's iteration count and gradient elements (numel; 0 when only the files say) from
 * its manifest or its folders' names alone, without opening it: what a scenario's defaults
 * and a sweep's plan need. DEFTSIM_E_INPUT when dir holds no iterations. */
deftsim_status deftsim_gradsrc_trace_peek(const char *dir, size_t *iterations, uint64_t *numel);

#endif
