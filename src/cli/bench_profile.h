/* bench_profile.h - `deftsim bench kernels --profile FILE` (bench_profile.c). */
#ifndef DEFTSIM_BENCH_PROFILE_H
#define DEFTSIM_BENCH_PROFILE_H

#include <stdint.h>

typedef struct {
    const char *path;    /* the profile to write */
    const char *backend; /* "cpu" or "cuda" */
    unsigned threads;
    unsigned reps;       /* rounds over all cases; 0: 9 */
    uint64_t seed;
    int quick;           /* fewer sizes, a smaller run */
    int no_validate;     /* write the profile and stop */
    unsigned evict_mib;  /* read this much before every timed call (0: none) */
} bench_profile_opts;

/* Measures, fits, writes and validates; returns the exit status. */
int deftsim_bench_profile(const bench_profile_opts *o);

#endif
