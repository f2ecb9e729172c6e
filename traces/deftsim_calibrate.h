/* deftsim_calibrate.h - fits the synthetic generator's parameters to a recorded trace
 * (deftsim trace calibrate; docs/GENERATOR.md, "Calibration").
 *
 * What each parameter is fitted to, on the trace's late iterations:
 *   <kind>_scale, _depth, _spread, _size  per tensor kind, a least-squares line against the
 *                                  tensor's depth in the table (and, where 3 tensors or more
 *                                  without a role span a decade of sizes, against log10 of its
 *                                  element count) of log10 of its RMS (median over the
 *                                  workers; or, with scale_density, of the threshold of its top
 *                                  fraction over the fitted generator's at unit scale), and the
 *                                  uniform width with the residuals' variance (tensors 3
 *                                  decades below their kind's median left out);
 *   tail    the share of a weight tensor's squared norm in its top 1% of entries (median over
 *           tensors, workers and iterations), matched by the generator's own values;
 *   signal  the overlap of two workers' top-0.1% sets within one tensor (median over tensors),
 *           matched by the generator's own values;
 *   drift   the mean change of the tensors' log RMS between the first and the last fit
 *           iteration, against the generator's mean change over that gap (only when they lie
 *           64 iterations or more apart; otherwise the default stays).
 * The statistics the validation compares (global top-k overlap, build-up, DEFT's allocation and
 * imbalance, top-k density per tensor) are not among them. */
#ifndef DEFTSIM_CALIBRATE_H
#define DEFTSIM_CALIBRATE_H

#include <stdint.h>

#include "deftsim_error.h"
#include "deftsim_gen.h"
#include "deftsim_trace.h"

typedef struct {
    double tail_density;   /* top fraction whose norm share fits tail; default 0.01 */
    double signal_density; /* top fraction whose overlap fits signal; default 0.001 */
    double scale_density;  /* > 0: a tensor's scale from the threshold of its top fraction
                            * this size; default 0: from its RMS */
    int64_t from;          /* fit iterations with id >= from; < 0: half the last id */
    int no_field;          /* 1: no magnitude field even with consecutive fit iterations */
    int no_size;           /* 1: no size slope (<kind>_size = 0) for any kind */
} deftsim_calib_opts;

void deftsim_calib_opts_default(deftsim_calib_opts *o);

/* Element statistics of tensors: the top tail_density share of the squared norm, two
 * workers' overlap of their top signal_density sets, and one worker's overlap of its top-1%
 * sets at consecutive iterations. */
typedef struct {
    double share, ovl, temporal;
} deftsim_calib_elem;

typedef struct {
    deftsim_gen_params params;       /* scales = kinds, signal, tail, drift; seed 1 */
    int kind_tensors[DEFTSIM_GEN_NKINDS];  /* tensors of each kind with a non-zero RMS */
    int kind_from[DEFTSIM_GEN_NKINDS];     /* the kind a missing kind's line is copied from, or -1 */
    int kind_dropped[DEFTSIM_GEN_NKINDS];  /* tensors > 3 decades below the kind's median */
    double kind_rmse[DEFTSIM_GEN_NKINDS];  /* residual standard deviation, decades */
    int kind_size_fitted[DEFTSIM_GEN_NKINDS]; /* 1: the kind's line has a size slope */
    size_t nfit;                     /* fit iterations */
    uint64_t fit_first, fit_last;    /* their ids */
    double weight_decades;           /* max - min log10 RMS over the weight tensors */
    double scale_density, q_unit;    /* the options' scale_density; the generator's threshold */
    double tail_real, tail_gen;      /* top-share statistic: trace, fitted generator */
    double signal_real, signal_gen;  /* per-tensor overlap statistic: trace, fitted generator */
    int field_fitted;                /* two fit iterations are consecutive: field fitted */
    int field_off;                   /* the options' no_field */
    uint64_t field_a;                /* their ids field_a, field_a + 1 */
    double temporal_real, temporal_gen; /* per-tensor temporal overlap: trace, generator */
    deftsim_calib_elem kind_real[DEFTSIM_GEN_NKINDS]; /* per kind (conv, linear, embedding) */
    deftsim_calib_elem kind_gen[DEFTSIM_GEN_NKINDS];  /* the generator, kinds with their own */
    int kind_stat_tensors[DEFTSIM_GEN_NKINDS];        /* tensors behind kind_real */
    int kind_own[DEFTSIM_GEN_NKINDS];   /* 1: the kind's own signal, tail (and field) fitted */
    int kind_own_field[DEFTSIM_GEN_NKINDS];       /* 1: and its own field */
    int kind_temporal_tensors[DEFTSIM_GEN_NKINDS]; /* tensors behind kind_real's temporal */
    int role_tensors[DEFTSIM_GEN_NROLES]; /* tensors of each role in the scale fit */
    double worker_sd;                /* sd over the workers of log10 gradient norm (mean over
                                      * the fit iterations) */
    uint64_t drift_a, drift_b;       /* the iteration ids the drift compares (a == b: none) */
    double drift_real;               /* mean |change of ln RMS| between them */
    int drift_fitted;                /* 1: drift fitted (fit iterations >= 64 apart) */
    double worker_corr;              /* mean pairwise correlation of whole gradients (measured) */
    int have_temporal;               /* two consecutive ids exist */
    uint64_t temporal_a;             /* ids temporal_a, temporal_a + 1 */
    double temporal_corr;            /* one worker's correlation between them (mean) */
    double temporal_overlap;         /* overlap of one worker's top-1% sets between them */
} deftsim_calib_result;

/* Fits the generator to every worker and fit iteration of t. DEFTSIM_E_INPUT when the trace
 * has fewer than 2 workers, no fit iteration, or no tensor with a non-zero gradient. */
deftsim_status deftsim_calibrate(const deftsim_trace *t, const deftsim_calib_opts *o,
                                 deftsim_calib_result *r);

/* Writes the parameter file ([synthetic] keys, with comments saying what each matched and
 * from which trace) to path atomically, or to stdout when path is NULL. */
deftsim_status deftsim_calib_write(const deftsim_trace *t, const deftsim_calib_result *r,
                                   const char *path);

#endif
