/* deftsim_stages.h - where a point's wall time goes, stage by stage, and the floor of each
 * stage: the bytes it must touch at this machine's memory bandwidth, or the elements it must
 * generate at the generator's own throughput, both measured in the same run
 * (docs/TIMING.md, "Where a point's time goes"). The engine fills one per point; the manifests
 * of deftsim run and deftsim sweep record it, and deftsim analyze sums it per method and P. */
#ifndef DEFTSIM_STAGES_H
#define DEFTSIM_STAGES_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#define DEFTSIM_STAGES_MAX_PHASES 16

typedef struct {
    /* Wall seconds, summed over the point's iterations. */
    double generate;   /* gradient generation or trace reads (accumulator preparation's share,
                          and the step's regenerations) */
    double accumulate; /* the rest of the preparation: residual updates, the average */
    double copy;       /* timing repetitions' accumulator copies */
    double flush;      /* cache = cold: the accumulators' flushes */
    double sparsify;   /* the sparsifier's own work in the step, every repetition: its compute
                          phases and cross-worker steps (the step's wall time less the
                          regenerations, copies and flushes) */
    double metrics;    /* per-iteration metrics (the quality's reference top-k) */
    double simulate;   /* the network simulation */
    double write;      /* the rows, the dump, the point file's commit */
    double total;      /* the point's wall time */
    /* What each stage must touch. */
    uint64_t gen_elements;  /* generated or read */
    uint64_t need_elements; /* the least: each worker's gradient once per iteration */
    uint64_t accum_bytes, copy_bytes, flush_bytes, select_bytes, metrics_bytes, write_bytes;
    uint64_t sum_adds; /* the average's additions (each worker's accumulator into the sums) */
    /* How the accumulators were held (docs/OUTPUT.md): resident workers, regeneration slots,
     * iterations whose average was kept from an earlier point. */
    uint32_t resident, regen_slots, averages_kept;
    /* The network simulation: processes at once (the iterations side by side), messages
     * simulated. */
    uint32_t sim_procs;
    uint64_t sim_messages;
    int trace;         /* the gradients come from a trace: reads, not generation */
    int profile;       /* [device] kind = profile: the phases hold modelled times */
    int repeats;
    /* Per compute phase (by name): seconds as charged, summed over workers and repetitions (a
     * step run once for all workers, such as a union, counts once per worker). */
    size_t nphases;
    char phase[DEFTSIM_STAGES_MAX_PHASES][48];
    double phase_seconds[DEFTSIM_STAGES_MAX_PHASES];
    /* The probes, taken at the point's start. */
    unsigned threads;  /* preparation threads */
    unsigned kthreads; /* the kernel context's threads (the sparsifier's operations) */
    double read_bw1;   /* bytes per second of one cold read on one thread (the best of the
                          point's references) */
    double read_bwn;   /* the same on `threads` threads at once */
    double gen_rate;   /* generator elements per second on `threads` threads; NaN: a trace */
    double sum_rate;   /* the average's additions per second on `threads` threads, in cache */
    /* The engine's running marks between iterations. */
    double mark_regen, mark_copy, mark_flush;
    uint64_t mark_copies, mark_flushes;
} deftsim_stages;

/* Adds secs to the phase named name. */
void deftsim_stages_phase(deftsim_stages *s, const char *name, double secs);
/* The parallel probe: bytes at buf (flushed first) read by `threads` threads at once. */
void deftsim_stages_probe_parallel(deftsim_stages *s, const void *buf, size_t bytes,
                                   unsigned threads);
/* {"probe": {...}, "<stage>": {"seconds", "floor_seconds", "bytes" or "elements"}, ...,
 * "phases": {...}, "other_seconds"}: floor_seconds null where a stage has none. */
json_t *deftsim_stages_json(const deftsim_stages *s);
/* The names of the stages in the order of the JSON object and of `deftsim analyze`'s table;
 * NULL past the last. */
const char *deftsim_stages_name(size_t i);

#endif
