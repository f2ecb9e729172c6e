/* analyze_train.c - `deftsim analyze` on deftsim train folders: summary.csv and summary.md
 * with the final and best accuracy and the time to a target (docs/ANALYSIS.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cli_train.h"
#include "deftsim_build_info.h"
#include "deftsim_conditions.h"
#include "deftsim_sparsify.h"
#include "deftsim_train_analysis.h"
#include "deftsim_train_results.h"
#include "deftsim_util.h"

/* A method's legend title from the registry; the name itself for one it does not hold. */
static const char *method_title(const char *name)
{
    deftsim_method m;
    return deftsim_method_from_name(name, &m) ? name : deftsim_method_get(m)->title;
}

int deftsim_cli_analyze_train(int ndirs, char **dirs, const deftsim_boot_options *boot,
                              const char *target, const char *outdir, int quiet)
{
    deftsim_train_analysis_options o;
    deftsim_train_analysis_options_default(&o);
    o.boot = *boot;
    o.title = method_title;
    if (target && deftsim_train_target_parse(target, &o))
        return deftsim_cli_usage_error("analyze", "--target: '%s' is not ACC or dense:F with a number "
                                                  "in (0, 1]",
                                       target);
    if (!outdir) outdir = dirs[0];
    double t0 = deftsim_now();
    deftsim_train_analysis *an = NULL;
    deftsim_train_results **rs = calloc((size_t)ndirs, sizeof *rs);
    char **prov = calloc((size_t)ndirs + 3, sizeof *prov);
    int rc = 0;
    size_t nfiles = 0;
    deftsim_status st;
    if (!rs || !prov) {
        rc = 1;
        goto done;
    }
    if ((st = deftsim_train_analysis_new(&o, &an))) {
        rc = deftsim_cli_fail(st);
        goto done;
    }
    for (int i = 0; i < ndirs; i++) {
        if ((st = deftsim_train_results_open(dirs[i], &rs[i]))) {
            rc = deftsim_cli_fail(st);
            goto done;
        }
        for (int j = 0; j < i; j++)
            if (rs[j]->seed == rs[i]->seed) {
                fprintf(stderr, "deftsim: input error: %s and %s were both trained with seed %llu: "
                                "repeats need different seeds\n",
                        dirs[j], dirs[i], (unsigned long long)rs[i]->seed);
                rc = 2;
                goto done;
            }
        for (size_t p = 0; p < rs[i]->npoints; p++, nfiles++)
            if ((st = deftsim_train_analysis_add_file(an, rs[i]->points[p].path, rs[i]->seed))) {
                rc = deftsim_cli_fail(st);
                goto done;
            }
        char line[4600], cond[800];
        deftsim_conditions_folder(dirs[i], cond, sizeof cond); /* the network, where timed */
        snprintf(line, sizeof line,
                 "Results: `%s` (deftsim train, scenario %s, network %s, seed %llu, %zu points, "
                 "status %s, deftsim commit %s).%s%s",
                 dirs[i], rs[i]->scenario, rs[i]->network, (unsigned long long)rs[i]->seed,
                 rs[i]->npoints, rs[i]->status, rs[i]->commit, cond[0] ? " Conditions: " : "", cond);
        if (!(prov[i] = strdup(line))) {
            rc = 1;
            goto done;
        }
    }
    if ((st = deftsim_train_analysis_finish(an))) {
        rc = deftsim_cli_fail(st);
        goto done;
    }
    char line[512];
    snprintf(line, sizeof line,
             "Analysed by deftsim %s (commit %s): %zu bootstrap resamples, %g%% intervals, seed %llu.",
             DEFTSIM_VERSION, DEFTSIM_GIT_COMMIT, o.boot.resamples, o.boot.level * 100,
             (unsigned long long)o.boot.seed);
    if (!(prov[ndirs] = strdup(line))) {
        rc = 1;
        goto done;
    }
    if ((st = deftsim_mkdir_p(outdir))) {
        rc = deftsim_cli_fail(st);
        goto done;
    }
    char csv[4200], md[4200];
    snprintf(csv, sizeof csv, "%s/summary.csv", outdir);
    snprintf(md, sizeof md, "%s/summary.md", outdir);
    if ((st = deftsim_train_analysis_write_csv(an, csv)) ||
        (st = deftsim_train_analysis_write_md(an, md, (const char *const *)prov))) {
        rc = deftsim_cli_fail(st);
        goto done;
    }
    if (!quiet) {
        size_t reps = deftsim_train_analysis_max_repeats(an);
        fprintf(stderr, "deftsim analyze: %zu training points from %zu file%s, %zu repeat%s, in %.1f "
                        "s -> %s, %s\n",
                deftsim_train_analysis_points(an), nfiles, nfiles == 1 ? "" : "s", reps,
                reps == 1 ? "" : "s", deftsim_now() - t0, csv, md);
        if (reps < 2)
            fprintf(stderr, "deftsim analyze: one repeat per point: no confidence intervals "
                            "(summary.md says so)\n");
    }
done:
    if (prov)
        for (int i = 0; i <= ndirs; i++) free(prov[i]);
    free(prov);
    if (rs)
        for (int i = 0; i < ndirs; i++) deftsim_train_results_free(rs[i]);
    free(rs);
    deftsim_train_analysis_free(an);
    return rc;
}
