/* deftsim_timing.h - the timing protocol of the compute phases (docs/TIMING.md).
 *
 * One iteration's sparsifier step runs R = [timing] repeats times on the same input state:
 * R - 1 timing repetitions on copies of the accumulators (handed out one at a time, never
 * written back, so the real accumulators and residuals stay as they were), then the real
 * step, whose selections, aggregate and residuals are the results. Every repetition times
 * every worker's phases in the sparsifier's order (worker 0 .. P-1 of repetition 0, then of
 * repetition 1, ...: the workers are interleaved). The per-worker estimate of each phase and
 * of each COMPUTE step of the schedule is the minimum or the median of its R times
 * ([timing] statistic); it replaces the real step's own times in the step result, so rows,
 * metrics and the network simulation all see the estimate. With [timing] cache = cold every
 * accumulator the sparsifier is handed is flushed from the CPU caches first. */
#ifndef DEFTSIM_TIMING_H
#define DEFTSIM_TIMING_H

#include <stddef.h>
#include <stdint.h>

#include "deftsim_config.h"
#include "deftsim_error.h"
#include "deftsim_sparsify.h"

typedef struct deftsim_timing deftsim_timing;

/* The repetitions a step runs under cfg: [timing] repeats, but one under [device] kind =
 * profile, where the profile charges every compute phase and a repetition would measure
 * nothing the rows use (each would still regenerate the untracked workers' gradients). */
int deftsim_timing_repeats_of(const deftsim_config *cfg);

/* A timing context for steps over n-element accumulators; allocates the repetition copy (n
 * floats) when repeats > 1. */
deftsim_status deftsim_timing_new(int repeats, deftsim_timing_statistic statistic,
                                  deftsim_timing_cache cache, uint64_t n, deftsim_timing **out);
void deftsim_timing_free(deftsim_timing *t);

/* The threads that copy and flush accumulators (untimed work: the preparation threads); 1 by
 * default. */
void deftsim_timing_set_threads(deftsim_timing *t, unsigned threads);

/* scratch(ctx, w, p): whether p, the real provider's buffer for worker w, is scratch that the
 * provider regenerates whenever it is asked for again after its release (a regeneration slot):
 * a timing repetition then hands it out in place instead of copying it, and passes its release
 * on to the provider. NULL (the default): every accumulator is copied. */
void deftsim_timing_set_scratch(deftsim_timing *t,
                                int (*scratch)(void *ctx, uint32_t w, const float *p), void *ctx);

/* Bytes deftsim_timing_new allocates beyond its own struct (the memory plan): one buffer of n
 * floats, the repetitions' copy and the reference's bytes (whatever R). */
uint64_t deftsim_timing_memory(int repeats, uint64_t n);

/* For a method that keeps state across steps (deftsim_sparsifier_keeps_state): repetition i
 * (i < R - 1) of every step runs on shadows[i], a sparsifier made with the same parameters,
 * so that each instance steps once per iteration and its state follows the real one's. The
 * caller owns the shadows; NULL (the default) runs every repetition on the real sparsifier. */
void deftsim_timing_set_shadows(deftsim_timing *t, deftsim_sparsifier *const *shadows);

/* Runs iteration it R times as described above; *res is the real step's result with the
 * estimated times. The spread of the repetitions is kept until the next call. acc = NULL: the
 * data-free step (deftsim_sparsifier_step_data_free, a method with
 * DEFTSIM_METHOD_CAP_DATA_FREE) R times, estimated the same way. */
deftsim_status deftsim_timing_step(deftsim_timing *t, deftsim_sparsifier *sp, uint64_t it,
                                   const deftsim_acc_provider *acc, deftsim_step_result **res);

/* Of the last step: per worker and phase (worker-major, as phase_seconds), the smallest and
 * largest of the R times; per worker, the smallest and largest of the R selection times (the
 * sum of the selection phases of one repetition). */
const double *deftsim_timing_phase_min(const deftsim_timing *t);
const double *deftsim_timing_phase_max(const deftsim_timing *t);
const double *deftsim_timing_select_min(const deftsim_timing *t);
const double *deftsim_timing_select_max(const deftsim_timing *t);

/* Of the last step, every repetition's phase times as they were measured: R blocks of P x
 * nphases (worker-major, as phase_seconds), repetition 1 first. */
const double *deftsim_timing_phase_raw(const deftsim_timing *t);
int deftsim_timing_repeats(const deftsim_timing *t);
/* Its buffer of n floats (the repetitions' copy, the reference's bytes). */
const float *deftsim_timing_buffer(const deftsim_timing *t);

/* The reference of the last step: before each repetition, the time of one cold read of n
 * floats (the repetition copy's buffer flushed from the caches, then read once); the estimate
 * ([timing] statistic) of the R readings. A measure of this machine's state beside the
 * repetitions, in the same units as a selection that reads its accumulator once
 * (docs/TIMING.md, "Reference"). */
double deftsim_timing_reference(const deftsim_timing *t);
/* Seconds of one cold read of bytes at p (flushed first): the reference's probe. */
double deftsim_timing_read_probe(const void *p, size_t bytes);

/* Since the context was made: seconds and count of the repetitions' accumulator copies and
 * of the cache flushes (cache = cold), which a step's wall time holds beside its phases. */
void deftsim_timing_overheads(const deftsim_timing *t, double *copy_s, double *flush_s,
                              uint64_t *copies, uint64_t *flushes);

/* The estimate of v[0..r): the minimum or the median (the mean of the two middle values when r
 * is even). Reorders v. */
double deftsim_timing_estimate(deftsim_timing_statistic s, double *v, size_t r);

/* How this build flushes a buffer from the CPU caches: "clflushopt" or "clflush" (x86, as the
 * CPU supports), "dc civac" (AArch64),
 * or "none" (cache = cold then has no effect; the manifest says so). */
const char *deftsim_timing_flush_method(void);
/* Flushes bytes from p out of every cache level (the method above). */
void deftsim_timing_flush(const void *p, size_t bytes);

/* The protocol as a manifest names it: {"repeats" (those that ran), "repeats_configured",
 * "statistic", "cache", "flush", "order"}. */
struct json_t;
struct json_t *deftsim_timing_json(const deftsim_config *cfg);

#endif
