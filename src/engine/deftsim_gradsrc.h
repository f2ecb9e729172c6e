/* deftsim_gradsrc.h - where the gradients come from: one interface over the synthetic
 * generator (traces/deftsim_gen.h: any worker's gradient regenerated on demand) and a recorded
 * trace (traces/deftsim_trace.h: mapped and read in place), so that the engine and the trainer
 * never ask which one they have.
 *
 * Iterations are numbered 0 .. iterations-1 in the source's order; deftsim_gradsrc_iteration_id
 * names them as the rows' source_iteration column does (the generator's iteration, or the
 * trace's recorded id). A gradient is read in three ways: deftsim_gradsrc_read (a slice of
 * several workers, into staging buffers or in place), deftsim_gradsrc_fill (a slice of one
 * worker, always into the caller's buffer) and deftsim_gradsrc_map (the whole gradient in
 * place, or NULL for a source that generates it, which the caller then fills). */
#ifndef DEFTSIM_GRADSRC_H
#define DEFTSIM_GRADSRC_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "deftsim_config.h"
#include "deftsim_config_inputs.h" /* deftsim_gradsrc_trace_peek */
#include "deftsim_error.h"
#include "deftsim_gen.h" /* deftsim_gen_run */
#include "deftsim_model.h"

typedef struct deftsim_gradsrc deftsim_gradsrc;

/* The implementation of one kind of source: every function receives its own state. */
typedef struct {
    /* Before an iteration's reads: the gradients of workers 0 .. P-1 become readable (a trace
     * maps them and checks them finite once per iteration and worker, on `threads` threads). */
    deftsim_status (*prepare)(void *impl, size_t it, uint32_t P, unsigned threads);
    /* Elements [off, off + cnt) of workers w0 .. w0 + nw - 1: out[j] points at worker w0 + j's,
     * either in place or written into stage[j] (cnt floats each). */
    deftsim_status (*read)(void *impl, size_t it, uint32_t w0, uint32_t nw, uint64_t off,
                           size_t cnt, float *const *stage, const float **out);
    /* Elements [off, off + cnt) of worker w into dst. */
    deftsim_status (*fill)(void *impl, size_t it, uint32_t w, uint64_t off, size_t cnt,
                           float *dst);
    /* Optional: runs of workers w0 .. w0 + nw - 1, each in place in out[j] (whole gradients);
     * NULL: fill() run by run. */
    deftsim_status (*fill_runs)(void *impl, size_t it, uint32_t w0, uint32_t nw,
                                const deftsim_gen_run *runs, size_t nruns, float *const *out);
    /* Worker w's whole gradient in place (after prepare), or NULL. */
    const float *(*map)(void *impl, size_t it, uint32_t w);
    uint32_t (*workers)(const void *impl);          /* UINT32_MAX: any number */
    size_t (*iterations)(const void *impl);         /* SIZE_MAX: any number */
    uint64_t (*iteration_id)(const void *impl, size_t it);
    /* Adds the kind's own keys to the manifest's "source" object. */
    void (*describe)(const void *impl, json_t *src);
    void (*close)(void *impl);
    int maps;                                       /* map() never returns NULL */
} deftsim_gradsrc_ops;

/* Opens the source [gradients] names: source = trace opens the trace, synthetic loads the
 * model table and creates the generator of [synthetic] with the scenario's seed. A list of
 * models or traces is refused (a sweep runs each in turn). */
deftsim_status deftsim_gradsrc_open(const deftsim_config *cfg, deftsim_gradsrc **out);
/* Only the model table of [gradients], to compare with another (deftsim train): no
 * generator; errors name the key. */
deftsim_status deftsim_gradsrc_open_table(const deftsim_config *cfg, deftsim_gradsrc **out);
void deftsim_gradsrc_close(deftsim_gradsrc *g);

/* The generator's parameters a scenario's [synthetic] keys and [scenario] seed give: the keys
 * already hold [gradients] params' set or the model table's own (the configuration resolved
 * it), so every backend built from these (the host generator; the CUDA one takes its
 * constants) runs the same set. */
void deftsim_gradsrc_gen_params(const deftsim_config *cfg, deftsim_gen_params *gp);

/* Whether [gradients] names a table at all (a trace, or a model for the synthetic source);
 * the key that names it ("trace" or "model") and its value. */
int deftsim_gradsrc_named(const deftsim_config *cfg);
const char *deftsim_gradsrc_key(const deftsim_config *cfg);
const char *deftsim_gradsrc_name(const deftsim_config *cfg);

const deftsim_model *deftsim_gradsrc_model(const deftsim_gradsrc *g);
/* The [gradients] source value of the rows' source column: "synthetic" or "trace". */
const char *deftsim_gradsrc_kind(const deftsim_gradsrc *g);
uint32_t deftsim_gradsrc_workers(const deftsim_gradsrc *g);
size_t deftsim_gradsrc_iterations(const deftsim_gradsrc *g);
uint64_t deftsim_gradsrc_iteration_id(const deftsim_gradsrc *g, size_t it);
int deftsim_gradsrc_maps(const deftsim_gradsrc *g);
void deftsim_gradsrc_describe(const deftsim_gradsrc *g, json_t *src);

deftsim_status deftsim_gradsrc_prepare(deftsim_gradsrc *g, size_t it, uint32_t P,
                                       unsigned threads);
deftsim_status deftsim_gradsrc_read(deftsim_gradsrc *g, size_t it, uint32_t w0, uint32_t nw,
                                    uint64_t off, size_t cnt, float *const *stage,
                                    const float **out);
/* The runs (ascending, disjoint) of workers w0 .. w0 + nw - 1, run r into out[j] +
 * runs[r].offset (out[j]: a whole gradient's buffer); nothing else of out[j] is written. */
deftsim_status deftsim_gradsrc_fill_runs(deftsim_gradsrc *g, size_t it, uint32_t w0, uint32_t nw,
                                         const deftsim_gen_run *runs, size_t nruns,
                                         float *const *out);
deftsim_status deftsim_gradsrc_fill(deftsim_gradsrc *g, size_t it, uint32_t w, uint64_t off,
                                    size_t cnt, float *dst);
const float *deftsim_gradsrc_map(deftsim_gradsrc *g, size_t it, uint32_t w);
/* Gradient elements handed out so far by read, fill and map (map counts the whole gradient),
 * over every thread: what the engine reports per point (deftsim_point_summary), so that a
 * test can see that a point generated nothing. */
uint64_t deftsim_gradsrc_elements(const deftsim_gradsrc *g);
/* Seconds spent inside read and fill so far, summed over the threads that called them (the
 * generation, or a trace's reads, of the stage accounting: deftsim_stages.h). */
double deftsim_gradsrc_busy_seconds(const deftsim_gradsrc *g);
/* The generator's own throughput in elements per second on `threads` threads (tasks of 8
 * workers x 32 Ki elements, as the preparation pass calls it); NaN for a trace. */
deftsim_status deftsim_gradsrc_rate(deftsim_gradsrc *g, unsigned threads, double *rate);

#endif
