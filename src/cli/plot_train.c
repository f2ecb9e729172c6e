/* plot_train.c - `deftsim plot` on a deftsim train folder: test accuracy and test loss
 * against iterations and against simulated time, one curve per method, for each density and
 * worker count of the folder (dense, which runs once per P, in every density's figures).
 *
 * As for the sweep figures, this file writes the numbers (plots/data/train_*.dat: one gnuplot
 * block per method) and plots/train_curve.gp holds every visual decision. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "cli_train.h"
#include "deftsim_analysis.h"
#include "deftsim_sparsify.h"
#include "deftsim_train_results.h"
#include "deftsim_util.h"

typedef struct {
    double it, sim, acc, loss, train_loss;
} crow;

typedef struct {
    const char *method;
    char density[40];    /* as in the point file */
    unsigned P;
    crow *rows;
    size_t n;
} curve;

/* Whether the registry's method of this name sends every element (its density does not
 * apply). */
static int sends_all(const char *name)
{
    deftsim_method m;
    return !deftsim_method_from_name(name, &m) && deftsim_method_has(m, DEFTSIM_METHOD_CAP_SENDS_ALL);
}

static void curves_free(curve *c, size_t n)
{
    for (size_t i = 0; i < n; i++) free(c[i].rows);
    free(c);
}

/* A point file's rows into c (one point per file, as deftsim train writes them). */
static deftsim_status read_curve(const deftsim_train_point_file *pf, curve *c)
{
    memset(c, 0, sizeof *c);
    c->method = pf->method;
    c->P = pf->P;
    deftsim_csvr *r;
    deftsim_status st = deftsim_csvr_open(pf->path, &r);
    if (st) return st;
    static const char *const need[] = {"density", "iteration", "test_accuracy", "test_loss",
                                       "train_loss", "sim_seconds"};
    long col[6];
    for (size_t i = 0; i < 6; i++)
        if ((col[i] = deftsim_csvr_find(r, need[i])) < 0) {
            deftsim_csvr_close(r);
            return deftsim_error_set(DEFTSIM_E_INPUT,
                                     "%s: no column %s (not rows of deftsim train; docs/TRAINING.md)",
                                     pf->path, need[i]);
        }
    size_t cap = 0;
    int got;
    while (!(st = deftsim_csvr_next(r, &got)) && got) {
        crow w;
        if ((st = deftsim_csvr_number(r, (size_t)col[1], &w.it)) ||
            (st = deftsim_csvr_number(r, (size_t)col[2], &w.acc)) ||
            (st = deftsim_csvr_number(r, (size_t)col[3], &w.loss)) ||
            (st = deftsim_csvr_number(r, (size_t)col[4], &w.train_loss)) ||
            (st = deftsim_csvr_number(r, (size_t)col[5], &w.sim)))
            break;
        if (!c->n) snprintf(c->density, sizeof c->density, "%s", deftsim_csvr_field(r, (size_t)col[0]));
        if (deftsim_grow(&c->rows, &cap, c->n + 1, sizeof *c->rows)) {
            st = deftsim_error_nomem("plot");
            break;
        }
        c->rows[c->n++] = w;
    }
    deftsim_csvr_close(r);
    if (!st && !c->n)
        st = deftsim_error_set(DEFTSIM_E_INPUT, "%s: a header and no rows", pf->path);
    return st;
}

static void put_num(FILE *f, double v)
{
    if (isfinite(v))
        fprintf(f, " %.9g", v);
    else
        fputs(" NaN", f);
}

/* One figure: gnuplot runs `script` with terminal `term` into files[0] from the data file
 * files[1], the scripts' folder files[2]. Returns 0, or the exit status after a message (1
 * alone when out of memory). */
static int draw(const char *script, const char *term, const char *const files[3],
                const char *methods, const char *subtitle, const char *yaxis, const char *xaxis)
{
    char *vars = NULL;
    size_t vl = 0;
    FILE *v = open_memstream(&vars, &vl);
    if (!v) return 1;
    fprintf(v, "term=");
    deftsim_cli_gp_quote(v, term);
    fprintf(v, "; outfile=");
    deftsim_cli_gp_quote(v, files[0]);
    fprintf(v, "; datafile=");
    deftsim_cli_gp_quote(v, files[1]);
    fprintf(v, "; plotdir=");
    deftsim_cli_gp_quote(v, files[2]);
    fprintf(v, "; methods=");
    deftsim_cli_gp_quote(v, methods);
    fprintf(v, "; subtitle=");
    deftsim_cli_gp_quote(v, subtitle);
    fprintf(v, "; omitted=''; yaxis='%s'; xaxis='%s'", yaxis, xaxis);
    fclose(v);
    deftsim_status st = deftsim_cli_gnuplot_run(vars, script);
    free(vars);
    struct stat sb;
    if (!st && (stat(files[0], &sb) != 0 || sb.st_size == 0))
        st = deftsim_error_set(DEFTSIM_E_RUNTIME, "plot: gnuplot wrote no %s", files[0]);
    return st ? deftsim_cli_fail(st) : 0;
}

int deftsim_cli_plot_train(const char *dir, const char *scripts, const char (*formats)[8],
                           size_t nformats, int quiet)
{
    deftsim_train_results *rs = NULL;
    curve *cv = NULL;
    int rc = 0;
    size_t written = 0;
    deftsim_status st = deftsim_train_results_open(dir, &rs);
    if (st) return deftsim_cli_fail(st);
    char script[4200], outdir[4200], datadir[4300];
    snprintf(script, sizeof script, "%s/train_curve.gp", scripts);
    snprintf(outdir, sizeof outdir, "%s/plots", dir);
    snprintf(datadir, sizeof datadir, "%s/data", outdir);
    if (access(script, R_OK) != 0) {
        st = deftsim_error_set(DEFTSIM_E_INPUT, "plot: %s: %s (--scripts names the folder)", script,
                               strerror(errno));
        rc = deftsim_cli_fail(st);
        goto done;
    }
    if (!(cv = calloc(rs->npoints, sizeof *cv))) {
        rc = 1;
        goto done;
    }
    for (size_t i = 0; i < rs->npoints; i++)
        if ((st = read_curve(&rs->points[i], &cv[i]))) {
            rc = deftsim_cli_fail(st);
            goto done;
        }
    if ((st = deftsim_mkdir_p(datadir))) {
        rc = deftsim_cli_fail(st);
        goto done;
    }
    /* The figures: every density of a sparsifier (or "all" when the folder holds dense only)
     * times every P, in order of first appearance. */
    size_t n = rs->npoints, ncombo = 0;
    const char **cd = calloc(n, sizeof *cd);
    unsigned *cp = calloc(n, sizeof *cp);
    if (!cd || !cp) {
        free(cd);
        free(cp);
        rc = 1;
        goto done;
    }
    /* A method that sends everything (dense) has no density: its curve joins every density's
     * figure. */
    int any_sparse = 0;
    for (size_t i = 0; i < n; i++)
        if (!sends_all(cv[i].method)) any_sparse = 1;
    for (size_t i = 0; i < n; i++) {
        if (any_sparse && sends_all(cv[i].method)) continue;
        size_t j = 0;
        while (j < ncombo && !(cp[j] == cv[i].P && !strcmp(cd[j], cv[i].density))) j++;
        if (j == ncombo) {
            cd[ncombo] = cv[i].density;
            cp[ncombo++] = cv[i].P;
        }
    }
    for (size_t k = 0; k < ncombo && !rc; k++) {
        char suffix[128] = "", stem[200], data[4600];
        if (ncombo > 1 && any_sparse)
            snprintf(suffix, sizeof suffix, "_d%s_P%u", cd[k], cp[k]);
        else if (ncombo > 1)
            snprintf(suffix, sizeof suffix, "_P%u", cp[k]);
        snprintf(data, sizeof data, "%s/train%s.dat", datadir, suffix);
        deftsim_afile *af;
        if ((st = deftsim_afile_open(&af, data))) {
            rc = deftsim_cli_fail(st);
            break;
        }
        FILE *f = deftsim_afile_stream(af);
        fprintf(f, "# deftsim train curves of %s: density %s, P = %u\n# one block per method; "
                   "columns: iteration sim_seconds test_accuracy(%%) test_loss train_loss\n",
                dir, any_sparse ? cd[k] : "all", cp[k]);
        char methods[1024] = "";
        size_t ml = 0, blocks = 0, have_sim = 0;
        double itmax = 0;
        for (size_t i = 0; i < n; i++) {
            if (cv[i].P != cp[k]) continue;
            if (any_sparse && !sends_all(cv[i].method) && strcmp(cv[i].density, cd[k])) continue;
            fprintf(f, "%s# method %s\n", blocks ? "\n\n" : "", cv[i].method);
            for (size_t r = 0; r < cv[i].n; r++) {
                const crow *w = &cv[i].rows[r];
                fprintf(f, "%.17g", w->it);
                put_num(f, w->sim);
                put_num(f, w->acc * 100);
                put_num(f, w->loss);
                put_num(f, w->train_loss);
                fputc('\n', f);
                if (isfinite(w->sim)) have_sim++;
                if (w->it > itmax) itmax = w->it;
            }
            if (ml < sizeof methods)
                ml += (size_t)snprintf(methods + ml, sizeof methods - ml, "%s%s", blocks ? " " : "",
                                       cv[i].method);
            blocks++;
        }
        if ((st = deftsim_afile_commit(af))) {
            rc = deftsim_cli_fail(st);
            break;
        }
        char subtitle[1024];
        snprintf(subtitle, sizeof subtitle, "%s, %s, density %s, P = %u workers, %g iterations, seed %llu",
                 rs->scenario, rs->network, any_sparse ? cd[k] : "all", cp[k], itmax,
                 (unsigned long long)rs->seed);
        static const char *const ys[] = {"accuracy", "loss"}, *const xs[] = {"iteration", "time"};
        for (size_t y = 0; y < 2 && !rc; y++)
            for (size_t x = 0; x < 2 && !rc; x++) {
                /* test_*: the curves are the test set's accuracy and loss. */
                snprintf(stem, sizeof stem, "test_%s_vs_%s%s", ys[y], xs[x], suffix);
                if (x == 1 && !have_sim) {
                    if (!quiet)
                        fprintf(stderr, "deftsim plot: %s: not drawn: no simulated times (the "
                                        "network was not simulated: [network] simulate = 0)\n",
                                stem);
                    continue;
                }
                for (size_t fi = 0; fi < nformats && !rc; fi++) {
                    char out[4500];
                    snprintf(out, sizeof out, "%s/%s.%s", outdir, stem, formats[fi]);
                    const char *const files[3] = {out, data, scripts};
                    if (!(rc = draw(script, formats[fi], files, methods, subtitle, ys[y], xs[x]))) {
                        written++;
                        if (!quiet) fprintf(stderr, "deftsim plot: %s\n", out);
                    }
                }
            }
    }
    free(cd);
    free(cp);
    if (!rc && !quiet) fprintf(stderr, "deftsim plot: %zu files in %s\n", written, outdir);
done:
    if (cv) curves_free(cv, rs->npoints);
    deftsim_train_results_free(rs);
    return rc;
}
