/* deftsim_net_mpi.h - the real network mode ([execute] network = mpi, docs/CLUSTER.md, "Real
 * mode"): every iteration's schedule of a point executed over MPI between the ranks of
 * mpirun, each collective with MPI's own call and the schedule's byte counts, timed after a
 * barrier. Rank 0 runs the engine and hands each point's schedules to deftsim_mpi_execute();
 * the other ranks wait in deftsim_mpi_serve() and execute them with it. Built without MPI
 * (meson -Dmpi=disabled, or auto without it), every call but deftsim_mpi_built() fails with
 * a message saying so. */
#ifndef DEFTSIM_NET_MPI_H
#define DEFTSIM_NET_MPI_H

#include <stddef.h>
#include <stdint.h>

#include "deftsim_error.h"
#include "deftsim_schedule.h"
#include "deftsim_team.h"

/* What a point's execution measured, on rank 0. Steps are numbered over all iterations:
 * iteration i's step k is first[i] + k. */
typedef struct {
    uint32_t P;
    size_t n;             /* iterations */
    size_t *first;        /* n + 1 entries */
    double *seconds;      /* per step: max over ranks of its time after the barrier; NaN for
                             a COMPUTE step (not executed) */
    uint64_t *sent, *recv; /* per step and rank ([step * P + rank]): the bytes the executor
                             counted (docs/CLUSTER.md, "What is counted") */
    double *comm_seconds; /* per iteration: the sum of its collectives' seconds */
} deftsim_mpi_result;

/* The number of ranks the MPI launcher that started this process asked for, read from its
 * environment before any MPI call (Open MPI's OMPI_COMM_WORLD_SIZE, MPICH's and Slurm's PMI's
 * PMI_SIZE): 0 when no launcher set it. Works in builds without MPI too. */
int deftsim_mpi_launched_ranks(void);

/* Whether a command started by an MPI launcher with more than one rank runs in spread mode
 * (docs/CLUSTER.md, "Spread mode": a point's P simulated workers spread over the ranks).
 * run and sweep do outside real mode (real_mode = 0); train does not: an input error saying
 * so; so is a build without MPI under a launcher of several ranks. *spread is set to 1 when
 * the command should call deftsim_mpi_spread_team(). */
deftsim_status deftsim_mpi_check_launch(const char *command, int real_mode, int *spread);

/* Spread mode: MPI_Init (as deftsim_mpi_init) and the team of MPI_COMM_WORLD's ranks
 * (deftsim_team.h): its operations over MPI, messages of any size. */
deftsim_status deftsim_mpi_spread_team(deftsim_team *t);

/* Spread mode after a failure on this rank: the other ranks wait in a collective that will
 * never complete, so every rank ends at once (MPI_Abort with this exit status). No-op
 * without MPI. */
void deftsim_mpi_abort(int code);

/* 1 when deftsim was built with MPI. */
int deftsim_mpi_built(void);

/* MPI_Init_thread (funneled: only the main thread calls MPI); the rank and the number of
 * ranks. Once per process. */
deftsim_status deftsim_mpi_init(int *rank, int *size);

/* 1 between deftsim_mpi_init() and deftsim_mpi_finalize(). */
int deftsim_mpi_active(void);
int deftsim_mpi_size(void);

/* Ranks > 0: executes the points rank 0 hands out until it calls deftsim_mpi_release(). */
deftsim_status deftsim_mpi_serve(void);

/* Rank 0: runs the n schedules (all of P = the number of ranks) over MPI with every rank.
 * elem_bytes: the value width, the element of an ALLREDUCE. */
deftsim_status deftsim_mpi_execute(const deftsim_schedule *const *s, size_t n, uint32_t elem_bytes,
                                   deftsim_mpi_result *res);

/* Rank 0: the other ranks leave deftsim_mpi_serve() (once; later calls do nothing). */
void deftsim_mpi_release(void);
void deftsim_mpi_finalize(void);

/* MPI_Get_library_version's text (first line), "" without MPI. */
const char *deftsim_mpi_library(void);

/* Real mode: where the collectives' payload lives, with the reason: "device: the MPI library
 * is CUDA-aware ..." (deftsim built with CUDA, a usable device on every rank, and an MPI that
 * declares CUDA support) or "host: ..." naming what is missing. "" without MPI. */
const char *deftsim_mpi_buffers(void);

void deftsim_mpi_result_free(deftsim_mpi_result *res);

#endif
