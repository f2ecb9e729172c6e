/* deftsim_train.h - data-parallel training on real data with a sparsifier in the loop.
 *
 * P simulated workers train one network (train/deftsim_nn.h) on Fashion-MNIST. Every
 * iteration each worker draws its own shard of B images (a per-epoch shuffle of the training
 * set cut into P * B slices), computes its gradient g_w at the shared weights, and hands its
 * accumulator to the sparsifier, the very code `deftsim run` simulates
 * (sparsifiers/deftsim_sparsify.h); the aggregate it returns (sum / P at the selected
 * indices) is what every worker applies. The optimizer follows the DEFT authors' setup
 * (their reducers on top of the PowerSGD training loop): error feedback
 * (acc_w = residual_w + g_w, residuals updated by the sparsifier), then weight decay and
 * momentum on the aggregate:
 *
 *     d = aggregate + weight_decay * w;   m = momentum * m + d;   w -= lr * m
 *
 * DGC runs its own scheme (Lin et al., and the reference code's DGCSGD): momentum correction
 * on every worker for the tensors it sparsifies (u_w = momentum * u_w + g_w; v_w = v_w + u_w;
 * v_w is the accumulator; the positions a worker sent are zeroed in u_w and v_w), plain
 * momentum after the dense allreduce for its 1-D tensors, and weight decay with its own
 * momentum buffer: b = momentum * b + weight_decay * w; w -= lr * (b + a), where a is the
 * aggregate (sparsified tensors) or the momentum of the aggregate (1-D tensors).
 *
 * Every point (method, density, P) starts from the same initial weights and sees the same
 * sequence of minibatches, so points differ only in what the sparsifier lets through.
 * docs/TRAINING.md describes the commands, the files and measured results. */
#ifndef DEFTSIM_TRAIN_H
#define DEFTSIM_TRAIN_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "deftsim_config.h"
#include "deftsim_error.h"
#include "deftsim_model.h"

typedef struct deftsim_trainer deftsim_trainer;

/* Loads [train] data (training and test split), builds the [train] model network and the
 * kernel context of [device]. DEFTSIM_E_INPUT naming the key for a dataset that does not fit
 * the network, or a [gradients] section whose model table is not the network's (a train
 * scenario names the network's own table there, train/models/, so that 'deftsim run' on the
 * same file simulates the same model). */
deftsim_status deftsim_trainer_new(const deftsim_config *cfg, deftsim_trainer **out);
void deftsim_trainer_free(deftsim_trainer *tr);

const deftsim_model *deftsim_trainer_model(const deftsim_trainer *tr);

/* Iterations of one epoch at P workers: floor(training images / (P * batch_size)); 0 when
 * the training set is smaller than one iteration. */
uint64_t deftsim_trainer_epoch_iterations(const deftsim_trainer *tr, uint32_t P);

/* Iterations a point at P trains: [train] epochs converted (rounded up), or [scenario]
 * iterations when epochs = 0. */
uint64_t deftsim_trainer_iterations(const deftsim_trainer *tr, uint32_t P);

/* Called every iteration with the P workers' gradients (n floats each), after they are
 * computed and before anything is sparsified. A non-OK status stops the point. */
typedef deftsim_status (*deftsim_train_grads_fn)(void *ctx, uint64_t iteration, uint32_t P,
                                                  const float *const *grads);

/* What a progress display hears of training: a ROW after each row of a point's curve, DIVERGED
 * when a point stops on a non-finite loss, RECORDED after each iteration deftsim trace record
 * writes. The library prints no progress itself. */
typedef enum { DEFTSIM_TRAIN_ROW, DEFTSIM_TRAIN_DIVERGED, DEFTSIM_TRAIN_RECORDED } deftsim_train_event_kind;

typedef struct deftsim_train_row deftsim_train_row;

typedef struct {
    deftsim_train_event_kind kind;
    const char *model;             /* ROW, DIVERGED: the network's model table name */
    deftsim_method method;
    double density;
    uint32_t P;
    const deftsim_train_row *row;  /* ROW */
    uint64_t iterations;           /* ROW: the point's iterations; DIVERGED: those it ran */
    uint64_t recorded_iteration;   /* RECORDED: the iteration written */
    size_t recorded, to_record;    /* RECORDED: iterations written so far, of how many */
} deftsim_train_event;

/* A progress callback: fn(user, event); fn NULL: none. */
typedef struct {
    void (*fn)(void *user, const deftsim_train_event *ev);
    void *user;
} deftsim_train_progress;

typedef struct {
    uint64_t iterations;   /* 0: deftsim_trainer_iterations(P) */
    int evaluate;          /* 1: test-set rows every [train] eval_every iterations and after
                              the last; 0: rows carry training metrics only */
    deftsim_train_grads_fn on_grads;
    void *ctx;
    deftsim_train_progress progress; /* told of every row */
    float *params_out;     /* non-NULL: receives the final weights (n floats) */
    /* 1: run the point's iterations through the network simulation of [network]
     * (sim/deftsim_sim.h) and fill the rows' simulated times; 0: those columns stay NAN.
     * deftsim_train_run sets it from [network] simulate. */
    int simulate;
} deftsim_train_options;

void deftsim_train_options_default(deftsim_train_options *o);

/* One row of a training curve, written every eval_every iterations and after the last. */
struct deftsim_train_row {
    uint64_t iteration;        /* iterations completed */
    double epoch;              /* iteration / epoch iterations */
    uint64_t samples;          /* images processed: iteration * P * batch_size */
    double train_loss;         /* mean of the workers' minibatch losses since the last row */
    double train_accuracy;     /* fraction of those minibatch images classified right */
    double test_loss;          /* mean cross-entropy on the test images; NAN if not evaluated */
    double test_accuracy;      /* NAN if not evaluated */
    double buildup;            /* mean |U| / k since the last row */
    double density_actual;     /* mean |U| / n since the last row */
    double compute_seconds;    /* cumulative: per iteration the slowest worker's gradient
                                  (the thread's CPU time with [train] threads = 1, else wall
                                  time) */
    double sparsify_seconds;   /* cumulative: wall time of the sparsifier's steps */
    double wall_seconds;       /* since the point started, evaluations included */
    /* Simulated time (options.simulate): each iteration is one schedule - the workers'
     * gradient and accumulator times (the medians of the point's measurements, on the clock
     * of compute_seconds), the sparsifier's measured phases and collectives, the optimizer
     * step - through SimGrid's network model; cumulative over the iterations. */
    double sim_seconds;        /* simulated training time */
    double sim_comm_seconds;   /* of which collectives (last worker in to last worker out) */
};

typedef struct {
    deftsim_method method;
    double density;
    uint32_t P;
    uint64_t k, n;
    uint64_t iterations;       /* iterations run */
    int diverged;              /* a loss turned non-finite: the point stopped there */
    size_t nrows;
    deftsim_train_row *rows;
    double seconds;            /* wall time of the point */
    double sim_wall_seconds;   /* of which the network simulation */
} deftsim_train_result;

/* Trains one point. A diverging point (non-finite loss) is not an error: it ends with
 * diverged = 1 and the rows up to there. */
deftsim_status deftsim_trainer_point(deftsim_trainer *tr, deftsim_method method, double density,
                                     uint32_t P, const deftsim_train_options *opt,
                                     deftsim_train_result *out);
void deftsim_train_result_free(deftsim_train_result *r);

typedef struct {
    size_t points;
    uint64_t rows;
    double seconds;
} deftsim_train_summary;

/* DEFTSIM_OK when [scenario] output may receive this scenario's training results: it does not
 * exist, holds none, or holds an earlier training run of the same scenario (the resolved
 * configuration, without [scenario] output and [engine] memory_budget, is the same), which the
 * run replaces. Otherwise DEFTSIM_E_INPUT naming what it holds. Reads only. */
deftsim_status deftsim_train_check_output(const deftsim_config *cfg);

/* Trains every method x density x P point of the scenario, in the engine's order (methods,
 * then densities, then worker counts), and writes into [scenario] output: points/<method>_d
 * <density>_P<P>.csv per finished point, curves.csv (every row), final.csv (the last row of
 * each point) and manifest.json (docs/TRAINING.md), all atomically; the manifest first (status
 * "running"), rewritten at the end. A folder holding other results is refused first, as
 * deftsim_train_check_output() says, and nothing is written. */
deftsim_status deftsim_train_run(const deftsim_config *cfg, const deftsim_train_progress *progress,
                                 deftsim_train_summary *summary);

/* Trains P workers with `method` at `density` (dense: density is ignored) up to the last of
 * [train] record's iterations and writes every worker's gradient of each listed iteration
 * into a trace in dir (traces/FORMAT.md), with the run's provenance in the manifest. */
deftsim_status deftsim_train_record(const deftsim_config *cfg, deftsim_method method,
                                    double density, uint32_t P, const char *dir,
                                    const deftsim_train_progress *progress);

#endif
