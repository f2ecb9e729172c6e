/* deftsim_compute.h - the training step's own compute in a simulated iteration ([compute],
 * docs/COMPUTE.md): the forward and backward time of one iteration, given as durations or
 * read from a table of published per-iteration times, and the schedule of an iteration built
 * around a sparsifier's: a forward step, the backward pass, then the sparsifier's steps; for
 * the dense baseline with overlap the backward pass cut at DDP's bucket boundaries, each
 * bucket's allreduce started (asynchronously) once the backward pass has produced all its
 * gradients. These durations are given, not measured: the same for every worker. */
#ifndef DEFTSIM_COMPUTE_H
#define DEFTSIM_COMPUTE_H

#include <stddef.h>
#include <stdint.h>

#include "deftsim_config.h"
#include "deftsim_config_inputs.h" /* deftsim_compute_times, deftsim_compute_resolve */
#include "deftsim_error.h"
#include "deftsim_model.h"
#include "deftsim_schedule.h"

/* The phase names of the model rows (phase_kind "model", docs/OUTPUT.md). */
#define DEFTSIM_COMPUTE_FORWARD "forward"
#define DEFTSIM_COMPUTE_BACKWARD "backward"

/* An iteration's plan for a model: its times, and for the overlapped dense allreduce the DDP
 * buckets (reverse parameter order, the first bucket first_bucket_mb MiB, the others
 * bucket_mb MiB) with the backward seconds that end at each bucket's last gradient. */
typedef struct {
    deftsim_compute_times t;
    int overlap;              /* [compute] overlap */
    size_t nbuckets;
    uint64_t *bucket_elems;   /* per bucket: gradient elements */
    double *bucket_backward;  /* per bucket: backward seconds since the previous bucket */
    size_t nlayers;
    double *layer_backward;   /* per model layer: its share of the backward seconds */
} deftsim_compute_plan;

/* The plan for model m (its tensors in parameter order give the buckets and the backward
 * spread: [compute] backward_spread). */
deftsim_status deftsim_compute_plan_init(const deftsim_config *cfg, const deftsim_model *m,
                                         deftsim_compute_plan *out);
void deftsim_compute_plan_free(deftsim_compute_plan *p);

/* The iteration's schedule into out (reset to sp's P first): forward, backward, then every
 * step of sp. bucketed (the dense baseline with overlap and P > 1, whose sp is one ALLREDUCE
 * of the whole gradient): the backward pass in pieces, bucket b's asynchronous ALLREDUCE
 * ("bucket<b>", elements x value_bytes) after the piece that ends at its last gradient.
 * A layer-wise sp (steps with deftsim_step.layer set: LAGS) with overlap: before each step of
 * layer l the backward pass down to layer l that has not run yet, in one piece (the layers'
 * shares summed, from the last layer down); the rest of it before the first step without a
 * layer, or at the end.
 * DEFTSIM_E_NOMEM with a message when out of memory. */
deftsim_status deftsim_compute_schedule(const deftsim_compute_plan *p, const deftsim_schedule *sp,
                                        int bucketed, uint32_t value_bytes,
                                        deftsim_schedule *out);

#endif
