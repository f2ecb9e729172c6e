/* deftsim_point_sim.h - the network simulation of one point: the schedules of its iterations
 * (copies: a sparsifier reuses its own), run through sim/ in one simulation, and for the
 * engine's rows where each row's step lies in them. Shared by deftsim run and sweep (through
 * the engine) and deftsim train. */
#ifndef DEFTSIM_POINT_SIM_H
#define DEFTSIM_POINT_SIM_H

#include <stddef.h>
#include <stdint.h>

#include "deftsim_config.h"
#include "deftsim_error.h"
#include "deftsim_schedule.h"
#include "deftsim_sim.h"
#include "deftsim_sparsify.h"

/* One iteration: its schedule and, for the engine's rows, how they map onto its steps. */
typedef struct {
    deftsim_schedule sched;
    size_t nphases;
    char phase[DEFTSIM_MAX_PHASES][DEFTSIM_STEP_NAME_MAX]; /* as the COMPUTE steps name them */
    unsigned char selection[DEFTSIM_MAX_PHASES];
    size_t ncoll;
    size_t *coll_step;        /* schedule index of each collective row */
} deftsim_sim_iter;

typedef struct {
    deftsim_sim_iter *it;
    size_t n, cap;
    uint32_t P;
    uint32_t elem_bytes;      /* the value wire width: ALLREDUCE element size */
    size_t nmodel;            /* [compute]: 2, a worker's first rows are the forward and the
                                 backward pass (their COMPUTE steps by name); else 0 */
} deftsim_point_sim;

void deftsim_point_sim_init(deftsim_point_sim *s, uint32_t P);
void deftsim_point_sim_free(deftsim_point_sim *s);

/* A new iteration with an empty schedule of P workers, to fill; NULL when out of memory. */
deftsim_schedule *deftsim_point_sim_next(deftsim_point_sim *s);

/* Appends a copy of every step of src to dst; DEFTSIM_E_NOMEM (no message) when out of memory. */
deftsim_status deftsim_point_sim_copy_steps(deftsim_schedule *dst, const deftsim_schedule *src);

/* The engine's iteration: records r's row layout (its phases, and the schedule index of each of
 * the ncoll collectives), and a copy of its schedule when with_schedule. */
deftsim_status deftsim_point_sim_add(deftsim_point_sim *s, const deftsim_step_result *r,
                                     const size_t *coll_step, size_t ncoll, int with_schedule);

/* The simulation's parameters: the scenario's [network] for P workers and the wire width. */
void deftsim_point_sim_params(const deftsim_config *cfg, const deftsim_point_sim *s,
                              deftsim_sim_params *sp);

/* Runs every iteration's schedule through one simulation (deftsim_sim_run). */
deftsim_status deftsim_point_sim_run(const deftsim_sim_params *sp, const deftsim_point_sim *s,
                                     deftsim_sim_result *res);

/* Worker w's simulated start and end in row pi of iteration i; 0: the row has no step. */
int deftsim_point_sim_row_span(const deftsim_point_sim *s, const deftsim_sim_result *res,
                               size_t i, uint32_t w, size_t pi, double *a, double *b);

/* Iteration i's selection critical path (NaN when the method selects nothing). */
double deftsim_point_sim_select_critical(const deftsim_point_sim *s,
                                         const deftsim_sim_result *res, size_t i);

#endif
