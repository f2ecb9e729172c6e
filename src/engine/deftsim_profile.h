/* deftsim_profile.h - device cost profiles: a fitted cost model per kernel operation, so that
 * the compute phases of a run can take their durations from a profile (measured once, on any
 * device, with `deftsim bench kernels --profile FILE`) instead of the wall clock.
 *
 * Each operation's cost is t = c0 + c_n n + c_k k + c_s segs + c_N N + c_K K, with n, k and
 * segs the sizes of one call as deftsim_kcall defines them (kernels/deftsim_kernels.h), and
 * N = n when the n elements (4 bytes each) exceed the profile's cache_bytes, else 0, and
 * K = k when k cache lines (64 bytes each) exceed it, else 0: streams and indexed accesses
 * whose footprint outgrows the caches pay memory's price per element on top. A term a fit
 * found no evidence for has coefficient 0. Predictions are never negative.
 *
 * The file (docs/KERNELS.md, "Device profiles") is CSV: a format line, key/value lines that
 * describe where and how it was measured (or, for a profile fitted to published figures,
 * their source), a header, one row per operation. An operation without a row has no model:
 * a run whose method calls it is refused (deftsim_profile_check). */
#ifndef DEFTSIM_PROFILE_H
#define DEFTSIM_PROFILE_H

#include <stddef.h>

#include <jansson.h>

#include "deftsim_config.h"
#include "deftsim_error.h"
#include "deftsim_kernels.h"

#define DEFTSIM_PROFILE_FORMAT "deftsim-profile"
#define DEFTSIM_PROFILE_VERSION 1

/* The model's terms, in the order of the file's columns. */
enum {
    DEFTSIM_PTERM_1,
    DEFTSIM_PTERM_N,
    DEFTSIM_PTERM_K,
    DEFTSIM_PTERM_SEGS,
    DEFTSIM_PTERM_N_DRAM,
    DEFTSIM_PTERM_K_DRAM,
    DEFTSIM_PTERM_COUNT
};

typedef struct {
    int present;
    double coef[DEFTSIM_PTERM_COUNT]; /* seconds: per call, element, k entry, fragment, and
                                         per element and k entry beyond the caches */
    unsigned cases;                   /* measurements the fit used */
    double max_rel_err;               /* largest |fit - measured| / measured over them */
} deftsim_profile_op;

typedef struct {
    char device[256];     /* CPU model or GPU name */
    char backend[32];     /* kernel backend measured ("cpu", "cuda") */
    char isa[32];         /* CPU: avx2 or generic; "-" otherwise */
    unsigned threads;     /* the backend's thread count */
    double cache_bytes;   /* the footprint beyond which N and K count (chosen by the fit) */
    char created[32];     /* UTC, ISO 8601 */
    char deftsim[96];     /* version and commit that measured it */
    char conditions[512]; /* how: repetitions, statistic, budget, load */
    char source[512];     /* optional: where the figures come from (a sourced profile) */
    deftsim_profile_op ops[DEFTSIM_KOP_COUNT];
    unsigned missing;     /* set by deftsim_profile_cost: 1 + the first operation called
                             without a row (0: none); read by deftsim_profile_check */
} deftsim_profile;

/* Parses a profile from text[0..len); `file` names it in messages ("FILE:LINE: column NAME
 * (C): problem"). Refuses a wrong format line or version, unknown keys or operations, bad
 * numbers, duplicate rows and a file without any operation's row. */
deftsim_status deftsim_profile_parse(const char *text, size_t len, const char *file,
                                     deftsim_profile *out);
deftsim_status deftsim_profile_load(const char *path, deftsim_profile *out);
/* Writes p to path atomically (the operations present; at least one). */
deftsim_status deftsim_profile_write(const char *path, const deftsim_profile *p);

/* The model's terms for one call, given the cache size. */
void deftsim_profile_terms(const deftsim_kcall *c, double cache_bytes,
                           double x[DEFTSIM_PTERM_COUNT]);

/* Modelled seconds of one call (>= 0). */
double deftsim_profile_predict(const deftsim_profile *p, const deftsim_kcall *c);
/* deftsim_profile_predict as a deftsim_kcost_fn (user: the profile). A call of an operation
 * without a row costs 0 and is recorded in the profile's `missing`. */
double deftsim_profile_cost(void *user, const deftsim_kcall *c);
/* After a compute phase charged by deftsim_profile_cost: DEFTSIM_E_INPUT if an operation
 * without a row was called ("FILE has no row for operation 'union', which METHOD calls; ..."),
 * and the record is cleared. file names the profile, method the caller. */
deftsim_status deftsim_profile_check(deftsim_profile *p, const char *file, const char *method);
/* Before a run: DEFTSIM_E_INPUT, with the same message, if the profile has no row for an
 * operation that method m calls (its registry entry's kernel_ops; a method that declares none
 * is checked by deftsim_profile_check as it runs). */
deftsim_status deftsim_profile_require(const deftsim_profile *p, const char *file, int m);
/* The operations method m calls, one bit per deftsim_kop (its registry entry's kernel_ops). */
unsigned deftsim_profile_method_ops(int m);

/* The kernel context of deftsim train: the cpu kernels with [device] threads; with [device]
 * kind = profile also the profile (*prof, to free; else NULL), its cost model on the context,
 * and the checks that it has a row for every operation the methods and the accumulate step
 * call. Errors name the config key. */
deftsim_status deftsim_profile_kctx_new(const deftsim_config *cfg, deftsim_kctx **kc,
                                        deftsim_profile **prof);
/* deftsim_profile_check for method m (a deftsim_method) of cfg's run, its message naming the
 * config key; DEFTSIM_OK when p is NULL. */
deftsim_status deftsim_profile_check_method(deftsim_profile *p, const deftsim_config *cfg, int m);
/* A manifest's record of a profile: its file, device, backend, threads, created, conditions,
 * and source ("measured" for a profile without a source line). */
json_t *deftsim_profile_json(const deftsim_profile *p, const char *file);

/* One measurement for the fit. */
typedef struct {
    deftsim_kcall call;
    double seconds;
} deftsim_profile_sample;

/* Fits one operation's model to samples[0..ns) by least squares weighted by 1/t^2 (relative
 * errors count alike on every scale). Candidate terms: the intercept and every size that
 * varies over the samples; the most negative term is dropped while any coefficient is negative
 * and the rest refitted (a negative cost means nothing). Fills out (present = 1). */
deftsim_status deftsim_profile_fit(deftsim_kop op, const deftsim_profile_sample *samples,
                                   size_t ns, double cache_bytes, deftsim_profile_op *out);
/* The sum of squared relative errors of a fitted model over the samples. */
double deftsim_profile_sse(const deftsim_profile_op *r, const deftsim_profile_sample *samples,
                           size_t ns, double cache_bytes);

#endif
