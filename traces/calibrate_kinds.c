/* calibrate_kinds.c - deftsim trace calibrate's fit of the layer scales: each tensor kind's
 * line of log10 RMS over depth and size, the roles' offsets and the spread
 * (docs/GENERATOR.md, "Fitting"). calibrate.c measures the trace and calls this. */
#include <math.h>
#include <stdlib.h>

#include "calibrate_internal.h"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double deftsim_calib_median(double *v, size_t n)
{
    if (!n) return NAN;
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static double clampd(double v, double lo, double hi) { return v < lo ? lo : v > hi ? hi : v; }

/* The kind a missing kind's line comes from: the nearest present one in this order. */
static const int kind_fallback[DEFTSIM_GEN_NKINDS][DEFTSIM_GEN_NKINDS - 1] = {
    {1, 2, 4, 5, 3}, {0, 2, 4, 5, 3}, {1, 0, 4, 5, 3},
    {5, 4, 1, 0, 2}, {5, 3, 1, 0, 2}, {3, 4, 1, 0, 2},
};

/* The size term's variable: log10 of the tensor's element count less 5 (deftsim_gen.h). */
static double size_z(const deftsim_model *m, size_t L)
{
    return deftsim_gen_log10_exact(m->layers[L].numel) - 5.0;
}

/* Per kind, with the tensors in use: whether its line gets a size slope. Only weight kinds
 * (conv, linear, embedding: 2-D and larger, whose element count is fan-in times fan-out), with
 * 3 tensors or more without a role spanning a decade of sizes or more: a role's offset takes
 * the mean of its tensors, so sizes that only differ between roles (BERT's attention and
 * feed-forward layers) cannot tell a size slope from the roles. A 1-D tensor's size is the
 * width of the weight it belongs to, and its scale follows that weight's role, which 1-D
 * tensors do not carry (BERT's biases: a slope fitted there made the validation worse,
 * docs/GENERATOR.md "Validation"). */
static void size_fittable(const deftsim_model *m, const int *use, int no_size, int *fit)
{
    for (int k = 0; k < DEFTSIM_GEN_NKINDS; k++) {
        double zmin = INFINITY, zmax = -INFINITY;
        int n = 0;
        for (size_t L = 0; L < m->nlayers && !no_size && k < DEFTSIM_GEN_KIND_BIAS; L++) {
            if (!use[L] || (int)deftsim_gen_layer_kind(m, L) != k ||
                deftsim_gen_layer_role(m, L) != DEFTSIM_GEN_ROLE_NONE)
                continue;
            double z = size_z(m, L);
            zmin = z < zmin ? z : zmin;
            zmax = z > zmax ? z : zmax;
            n++;
        }
        fit[k] = n >= 3 && zmax - zmin >= 1.0;
    }
}

/* One kind's least-squares line of yr against x (depth - 1/2; a slope only when the kind
 * spans at least a fifth of the depth with 3 tensors or more) and, when fit_size, z (size):
 * level, slope and size written; a size whose design is singular with the depth stays 0. */
static void kind_line(const deftsim_model *m, const double *yr, const int *use, int k,
                      int fit_size, double *level, double *slope, double *size)
{
    double sx = 0, sy = 0, sz = 0, sxx = 0, sxy = 0, szz = 0, szy = 0, sxz = 0, xmin = 1, xmax = -1;
    int n = 0;
    for (size_t L = 0; L < m->nlayers; L++) {
        if (!use[L] || (int)deftsim_gen_layer_kind(m, L) != k) continue;
        double x = deftsim_gen_layer_depth(m, L) - 0.5, z = fit_size ? size_z(m, L) : 0;
        sx += x, sy += yr[L], sz += z, sxx += x * x, sxy += x * yr[L], szz += z * z;
        szy += z * yr[L], sxz += x * z, n++;
        xmin = x < xmin ? x : xmin;
        xmax = x > xmax ? x : xmax;
    }
    *level = *slope = *size = 0;
    if (!n) return;
    double mx = sx / n, my = sy / n, mz = sz / n, vx = sxx / n - mx * mx, vz = szz / n - mz * mz,
           cxy = sxy / n - mx * my, czy = szy / n - mz * my, cxz = sxz / n - mx * mz;
    int with_x = n >= 3 && xmax - xmin >= 0.2 && vx > 0, with_z = fit_size && vz > 0;
    double det = vx * vz - cxz * cxz;
    if (with_x && with_z && det > 1e-6 * vx * vz) { /* |correlation| below 0.9999995 */
        *slope = (cxy * vz - czy * cxz) / det;
        *size = (czy * vx - cxy * cxz) / det;
    } else if (with_x) {
        *slope = cxy / vx;
    } else if (with_z) {
        *size = czy / vz;
    }
    *level = my - *slope * mx - *size * mz;
}

/* Per kind: the least-squares line of y (log10 RMS) against x (depth) and, where the kind's
 * tensors allow (size_fittable), z (log10 of the element count); with roles in the model,
 * jointly with one offset per role (the mean residual of its tensors from their kinds' lines),
 * by alternating the two fits. The spread is the residuals' after both. */
void deftsim_calib_fit_kinds(const deftsim_model *m, const double *y, const int *ok, double vd,
                      int no_size, deftsim_calib_result *r)
{
    deftsim_gen_params *p = &r->params;
    size_t NL = m->nlayers;
    double *tmp = malloc((NL ? NL : 1) * sizeof *tmp), *yr = malloc((NL ? NL : 1) * sizeof *yr);
    int *use = calloc(NL ? NL : 1, sizeof *use);
    double floor_k[DEFTSIM_GEN_NKINDS], level[DEFTSIM_GEN_NKINDS] = {0},
           slope[DEFTSIM_GEN_NKINDS] = {0}, size[DEFTSIM_GEN_NKINDS] = {0},
           off[DEFTSIM_GEN_NROLES] = {0};
    int fit_size[DEFTSIM_GEN_NKINDS];
    if (!tmp || !yr || !use) {
        free(tmp);
        free(yr);
        free(use);
        return;
    }
    /* Tensors more than 3 decades below their kind's median are left out: gradients that are
     * zero but for rounding by construction (attention's key biases). */
    for (int k = 0; k < DEFTSIM_GEN_NKINDS; k++) {
        size_t nk = 0;
        for (size_t L = 0; L < NL; L++)
            if (ok[L] && (int)deftsim_gen_layer_kind(m, L) == k) tmp[nk++] = y[L];
        floor_k[k] = nk ? deftsim_calib_median(tmp, nk) - 3 : -INFINITY;
        r->kind_dropped[k] = 0;
        r->kind_tensors[k] = 0;
    }
    int nroles = 0;
    for (int q = 0; q < DEFTSIM_GEN_NROLES; q++) r->role_tensors[q] = 0;
    for (size_t L = 0; L < NL; L++) {
        int k = (int)deftsim_gen_layer_kind(m, L);
        if (!ok[L]) continue;
        if (y[L] < floor_k[k]) {
            r->kind_dropped[k]++;
            continue;
        }
        use[L] = 1;
        r->kind_tensors[k]++;
        deftsim_gen_role q = deftsim_gen_layer_role(m, L);
        if (q != DEFTSIM_GEN_ROLE_NONE) nroles += r->role_tensors[q]++ == 0;
    }
    size_fittable(m, use, no_size, fit_size);
#define LINE(k, L)                                                                                 \
    (level[k] + slope[k] * (deftsim_gen_layer_depth(m, L) - 0.5) +                                 \
     (size[k] != 0 ? size[k] * size_z(m, L) : 0))
    for (int iter = 0; iter < (nroles ? 200 : 1); iter++) {
        for (size_t L = 0; L < NL; L++) {
            deftsim_gen_role q = deftsim_gen_layer_role(m, L);
            yr[L] = y[L] - (q != DEFTSIM_GEN_ROLE_NONE ? off[q] : 0);
        }
        for (int k = 0; k < DEFTSIM_GEN_NKINDS; k++)
            kind_line(m, yr, use, k, fit_size[k], &level[k], &slope[k], &size[k]);
        if (!nroles) break;
        double sum[DEFTSIM_GEN_NROLES] = {0};
        for (size_t L = 0; L < NL; L++) {
            deftsim_gen_role q = deftsim_gen_layer_role(m, L);
            if (!use[L] || q == DEFTSIM_GEN_ROLE_NONE) continue;
            int k = (int)deftsim_gen_layer_kind(m, L);
            sum[q] += y[L] - LINE(k, L);
        }
        for (int q = 0; q < DEFTSIM_GEN_NROLES; q++)
            off[q] = r->role_tensors[q] ? sum[q] / r->role_tensors[q] : 0;
    }
    for (int q = 0; q < DEFTSIM_GEN_NROLES; q++) p->role_offset[q] = clampd(off[q], -6, 6);
    for (int k = 0; k < DEFTSIM_GEN_NKINDS; k++) {
        r->kind_from[k] = -1;
        r->kind_size_fitted[k] = fit_size[k];
        int n = r->kind_tensors[k];
        if (!n) continue;
        double ss = 0;
        for (size_t L = 0; L < NL; L++) {
            if (!use[L] || (int)deftsim_gen_layer_kind(m, L) != k) continue;
            deftsim_gen_role q = deftsim_gen_layer_role(m, L);
            double e = y[L] - (q != DEFTSIM_GEN_ROLE_NONE ? p->role_offset[q] : 0) - LINE(k, L);
            ss += e * e;
        }
        r->kind_rmse[k] = sqrt(ss / n);
        p->kind_level[k] = clampd(level[k], -20, 2);
        p->kind_depth[k] = clampd(slope[k], -10, 10);
        p->kind_size[k] = clampd(size[k], -1, 1);
        /* The drift scatters the layers at any one iteration too (variance vd): the spread
         * takes what it leaves of the residuals' variance. */
        double v = r->kind_rmse[k] * r->kind_rmse[k] - vd;
        p->kind_spread[k] = clampd(sqrt(12.0 * (v > 0 ? v : 0)), 0, 12);
    }
#undef LINE
    free(tmp);
    free(yr);
    free(use);
    for (int k = 0; k < DEFTSIM_GEN_NKINDS; k++) {
        if (r->kind_tensors[k]) continue;
        for (int j = 0; j < DEFTSIM_GEN_NKINDS - 1; j++) {
            int f = kind_fallback[k][j];
            if (!r->kind_tensors[f]) continue;
            r->kind_from[k] = f;
            p->kind_level[k] = p->kind_level[f];
            p->kind_depth[k] = p->kind_depth[f];
            p->kind_spread[k] = p->kind_spread[f];
            p->kind_size[k] = p->kind_size[f];
            break;
        }
    }
}
