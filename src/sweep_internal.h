/* sweep_internal.h - what the files of deftsim sweep share (sweep.c, sweep_plan.c): the
 * plan (axes, variants, points) and the sweep's state. deftsim_sweep.h is the interface. */
#ifndef DEFTSIM_SWEEP_INTERNAL_H
#define DEFTSIM_SWEEP_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "deftsim_platform.h"
#include "deftsim_sweep.h"

#define MANIFEST_FORMAT "deftsim-sweep"
#define MANIFEST_VERSION 1

typedef struct {
    char *key;               /* "section.key" */
    char **values;
    size_t nvalues;
    int from_scenario;       /* a list in the scenario file (model, trace) rather than --vary */
} axis;

typedef struct {
    deftsim_config *cfg;     /* the scenario with this variant's axis values set */
    char *label;             /* folder name under points/; "" without axes */
    size_t *value_index;     /* naxes: which value of each axis */
    deftsim_platform_record platform; /* topology = file: the user's platform file as read */
} variant;

typedef struct {
    size_t variant;
    deftsim_method method;
    double density;
    uint32_t P;
    char *id;                /* [<label>/]<method>_d<density>_P<P> */
    char *file;              /* points/<id>.csv, relative to the output folder */
    deftsim_point_state state;
    int ran_now;             /* run by this sweep */
    uint64_t rows;
    double seconds, prepare_seconds, step_seconds;
    char *error;             /* FAILED: the message */
    deftsim_status error_status; /* FAILED in this sweep: the failure's status */
    char *finished;          /* UTC time it finished */
    char *git_commit;        /* build that wrote it */
    json_t *machine_state;   /* DONE: the machine's state while it ran (deftsim_noise_json) */
} point;

struct deftsim_sweep {
    deftsim_config *base;    /* the scenario as given, single-valued --vary settings applied */
    deftsim_sweep_options opt;
    axis *axes;
    size_t naxes;
    variant *variants;
    size_t nvariants;
    point *points;
    size_t npoints;
    json_t *identity;        /* what must match to resume in a folder */
    json_t *extra_points;    /* finished points in the folder's manifest outside this plan */
    char *started;
    int lock_fd;
    int state_loaded;
};

/* "sweep: out of memory". */
deftsim_status deftsim_sweep_nomem(void);

/* Expands the axes of s->base and s->opt into variants (their configurations checked and
 * their platform files read), points and the identity (sweep_plan.c). */
deftsim_status deftsim_sweep_plan(deftsim_sweep *s);

#endif
