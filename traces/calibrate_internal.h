/* calibrate_internal.h - what calibrate.c and calibrate_kinds.c share. */
#ifndef DEFTSIM_CALIBRATE_INTERNAL_H
#define DEFTSIM_CALIBRATE_INTERNAL_H

#include "deftsim_calibrate.h"

/* The median of v[0..n) (sorts v in place); NAN when n is 0. */
double deftsim_calib_median(double *v, size_t n);

/* The kinds' lines of log10 RMS y (per layer; ok[L] = 0: no usable value) over depth and, where
 * the kind's tensors allow, size, jointly with the roles' offsets; each kind's spread is what
 * the residuals' variance leaves above vd (the drift's share). no_size: no size slopes. Fills
 * r->params' kind and role keys and r's kind_* and role_tensors; kinds without tensors copy the
 * nearest present kind's line. */
void deftsim_calib_fit_kinds(const deftsim_model *m, const double *y, const int *ok, double vd,
                             int no_size, deftsim_calib_result *r);

#endif
