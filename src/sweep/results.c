/* results.c - reading a results folder for deftsim analyze (deftsim_sweep.h): a sweep's
 * finished points, a run's point files, or the CSV files of a folder without a manifest. */
#include "deftsim_sweep.h"

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "deftsim_analysis.h"
#include "sweep_internal.h"


void deftsim_results_free(deftsim_result_set *r)
{
    if (!r) return;
    for (size_t i = 0; i < r->nfiles; i++) {
        free(r->files[i].path);
        for (size_t a = 0; r->files[i].values && a < r->naxes; a++) free(r->files[i].values[a]);
        free(r->files[i].values);
    }
    free(r->files);
    for (size_t a = 0; a < r->naxes; a++) free(r->axes[a]);
    free(r->axes);
    for (size_t i = 0; r->provenance && r->provenance[i]; i++) free(r->provenance[i]);
    free(r->provenance);
    free(r->kind);
    free(r->status);
    free(r);
}

static deftsim_status add_line(deftsim_result_set *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static deftsim_status add_line(deftsim_result_set *r, const char *fmt, ...)
{
    size_t n = 0;
    while (r->provenance && r->provenance[n]) n++;
    char **p = realloc(r->provenance, (n + 2) * sizeof *p);
    if (!p) return deftsim_error_nomem("sweep");
    r->provenance = p;
    va_list ap;
    va_start(ap, fmt);
    int len = vasprintf(&p[n], fmt, ap);
    va_end(ap);
    if (len < 0) {
        p[n] = NULL;
        return deftsim_error_nomem("sweep");
    }
    p[n + 1] = NULL;
    return DEFTSIM_OK;
}

static deftsim_status add_file(deftsim_result_set *r, const char *path, const char *const *values)
{
    deftsim_result_file *f = realloc(r->files, (r->nfiles + 1) * sizeof *f);
    if (!f) return deftsim_error_nomem("sweep");
    r->files = f;
    deftsim_result_file *x = &r->files[r->nfiles];
    memset(x, 0, sizeof *x);
    r->nfiles++;
    if (!(x->path = strdup(path))) return deftsim_error_nomem("sweep");
    if (r->naxes) {
        if (!(x->values = calloc(r->naxes, sizeof *x->values))) return deftsim_error_nomem("sweep");
        for (size_t a = 0; a < r->naxes; a++)
            if (!(x->values[a] = strdup(values[a] ? values[a] : ""))) return deftsim_error_nomem("sweep");
    }
    return DEFTSIM_OK;
}

/* A string member, or "?" when absent. */
static const char *jstr(json_t *o, const char *key)
{
    const char *v = json_string_value(json_object_get(o, key));
    return v ? v : "?";
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Lines about the build and machine of a manifest. */
static deftsim_status machine_lines(deftsim_result_set *r, json_t *m)
{
    json_t *d = json_object_get(m, "deftsim"), *mach = json_object_get(m, "machine");
    json_t *k = json_object_get(m, "kernels");
    deftsim_status st = DEFTSIM_OK;
    if (d)
        st = add_line(r, "Written by deftsim %s (commit %s).",
                      jstr(d, "version"),
                      jstr(d, "git_commit"));
    if (!st && mach)
        st = add_line(r, "Machine: %s, %d CPUs online, %.1f GiB RAM.",
                      jstr(mach, "cpu_model"),
                      (int)json_integer_value(json_object_get(mach, "cpus_online")),
                      (double)json_integer_value(json_object_get(mach, "ram_bytes")) / 1073741824.0);
    if (!st && k)
        st = add_line(r, "Kernels: %s backend, %d thread(s).",
                      jstr(k, "backend"),
                      (int)json_integer_value(json_object_get(k, "threads")));
    return st;
}

static deftsim_status list_sweep(deftsim_result_set *r, const char *dir, json_t *m)
{
    deftsim_status st;
    size_t i;
    json_t *e;
    json_t *axes = json_object_get(m, "axes");
    r->naxes = json_array_size(axes);
    if (r->naxes && !(r->axes = calloc(r->naxes, sizeof *r->axes))) return deftsim_error_nomem("sweep");
    json_array_foreach(axes, i, e) {
        const char *k = json_string_value(json_object_get(e, "key"));
        if (!(r->axes[i] = strdup(k ? k : "?"))) return deftsim_error_nomem("sweep");
    }
    size_t done = 0, failed = 0, pending = 0;
    const char **vals = calloc(r->naxes ? r->naxes : 1, sizeof *vals);
    if (!vals) return deftsim_error_nomem("sweep");
    st = DEFTSIM_OK;
    json_array_foreach(json_object_get(m, "points"), i, e) {
        const char *state = json_string_value(json_object_get(e, "status"));
        const char *file = json_string_value(json_object_get(e, "file"));
        if (!state || !file) continue;
        if (!strcmp(state, "failed")) failed++;
        if (!strcmp(state, "pending")) pending++;
        if (strcmp(state, "done")) continue;
        done++;
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", dir, file);
        for (size_t a = 0; a < r->naxes; a++)
            vals[a] = json_string_value(json_object_get(json_object_get(e, "axes"), r->axes[a]));
        if ((st = add_file(r, path, vals))) break;
    }
    free(vals);
    if (st) return st;
    json_t *cfg = json_object_get(json_object_get(m, "identity"), "config");
    json_t *sc = json_object_get(cfg, "scenario");
    r->planned = done + failed + pending;
    r->incomplete = strcmp(jstr(m, "status"), "complete") != 0 || failed || pending;
    st = add_line(r, "Results: `%s`, a deftsim sweep of scenario '%s' (seed %lld, %lld iterations "
                     "per point), status %s: %zu point%s finished, %zu failed, %zu not run.",
                  dir, jstr(m, "scenario"),
                  (long long)json_integer_value(json_object_get(m, "seed")),
                  (long long)json_integer_value(json_object_get(sc, "iterations")),
                  jstr(m, "status"), done, done == 1 ? "" : "s",
                  failed, pending);
    if (!st && failed) {
        json_array_foreach(json_object_get(m, "points"), i, e) {
            const char *state = json_string_value(json_object_get(e, "status"));
            if (!state || strcmp(state, "failed") || st) continue;
            st = add_line(r, "Failed (not in the tables): %s: %s",
                          jstr(e, "id"),
                          jstr(e, "error"));
        }
    }
    if (!st && r->incomplete)
        st = add_line(r, "**Incomplete:** the sweep %s: these tables hold %zu of its %zu points. "
                         "Run the same `deftsim sweep` command again (same scenario, options and "
                         "--output) to run the rest; the finished points are kept.",
                      strcmp(jstr(m, "status"), "running") ? "did not finish"
                                                           : "was stopped or is still running",
                      done, r->planned);
    if (!st) st = machine_lines(r, m);
    return st;
}

static deftsim_status list_points_dir(deftsim_result_set *r, const char *dir);

/* Points of the run's plan: methods x densities x worker counts of its configuration. */
static size_t run_planned(json_t *cfg)
{
    json_t *sp = json_object_get(cfg, "sparsify");
    return json_array_size(json_object_get(sp, "methods")) *
           json_array_size(json_object_get(sp, "densities")) *
           json_array_size(json_object_get(json_object_get(cfg, "workers"), "counts"));
}

/* An unfinished run: the committed point files its manifest does not list yet (one killed
 * between a point's commit and the manifest's rewrite, or written by an older deftsim that
 * listed the points only at the end). */
static deftsim_status run_unlisted(deftsim_result_set *r, const char *dir)
{
    deftsim_result_set *all = calloc(1, sizeof *all);
    if (!all) return deftsim_error_nomem("sweep");
    deftsim_status st = list_points_dir(all, dir);
    if (st) deftsim_error_clear(); /* no points/ at all: nothing more */
    for (size_t i = 0; !st && i < all->nfiles; i++) {
        if (!strstr(all->files[i].path, "/points/")) continue; /* rows.csv */
        int listed = 0;
        for (size_t k = 0; k < r->nfiles && !listed; k++) listed = !strcmp(r->files[k].path, all->files[i].path);
        if (!listed) st = add_file(r, all->files[i].path, NULL);
    }
    deftsim_results_free(all);
    return st == DEFTSIM_E_INPUT ? DEFTSIM_OK : st;
}

static deftsim_status list_run(deftsim_result_set *r, const char *dir, json_t *m)
{
    size_t i;
    json_t *e;
    deftsim_status st = DEFTSIM_OK;
    json_array_foreach(json_object_get(m, "points"), i, e) {
        const char *file = json_string_value(json_object_get(e, "file"));
        if (!file) continue;
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", dir, file);
        if ((st = add_file(r, path, NULL))) return st;
    }
    json_t *cfg = json_object_get(m, "config");
    json_t *sc = json_object_get(cfg, "scenario");
    r->planned = run_planned(cfg);
    r->incomplete = strcmp(jstr(m, "status"), "complete") != 0;
    if (r->incomplete && (st = run_unlisted(r, dir))) return st;
    st = add_line(r, "Results: `%s`, a deftsim run of scenario '%s' (seed %lld, %lld iterations per "
                     "point), status %s: %zu of %zu point%s.",
                  dir, jstr(m, "scenario"),
                  (long long)json_integer_value(json_object_get(m, "seed")),
                  (long long)json_integer_value(json_object_get(sc, "iterations")),
                  jstr(m, "status"), r->nfiles, r->planned,
                  r->planned == 1 ? "" : "s");
    if (!st && r->incomplete)
        st = add_line(r, "**Incomplete:** the run %s: these tables hold %zu of its %zu points. "
                         "Run the same `deftsim run` command again (same scenario and --output) "
                         "to run the rest; the finished points are kept.",
                      !strcmp(jstr(m, "status"), "running") ? "was stopped or is still running"
                                                            : "did not finish",
                      r->nfiles, r->planned);
    if (!st) st = machine_lines(r, m);
    return st;
}

static deftsim_status list_points_dir(deftsim_result_set *r, const char *dir)
{
    char pdir[4200];
    snprintf(pdir, sizeof pdir, "%s/points", dir);
    DIR *d = opendir(pdir);
    char **names = NULL;
    size_t n = 0;
    deftsim_status st = DEFTSIM_OK;
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            size_t l = strlen(e->d_name);
            if (l < 5 || strcmp(e->d_name + l - 4, ".csv")) continue;
            char **p = realloc(names, (n + 1) * sizeof *p);
            if (!p || !(p[n] = strdup(e->d_name))) {
                if (p) names = p;
                st = deftsim_error_nomem("sweep");
                break;
            }
            names = p;
            n++;
        }
        closedir(d);
    }
    if (!st && n) qsort(names, n, sizeof *names, cmp_str);
    for (size_t i = 0; i < n && !st; i++) {
        char path[4600];
        snprintf(path, sizeof path, "%s/%s", pdir, names[i]);
        st = add_file(r, path, NULL);
    }
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    if (st) return st;
    if (n) return add_line(r, "Results: the %zu point files in `%s` (no manifest.json).", n, pdir);
    char rows[4200];
    snprintf(rows, sizeof rows, "%s/rows.csv", dir);
    if (!deftsim_sweep_file_exists(rows))
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "%s: no manifest.json, no points/*.csv and no rows.csv: not a "
                                 "folder of deftsim results",
                                 dir);
    if ((st = add_file(r, rows, NULL))) return st;
    return add_line(r, "Results: `%s` (no manifest.json).", rows);
}

deftsim_status deftsim_results_list(const char *dir, deftsim_result_set **out)
{
    *out = NULL;
    deftsim_result_set *r = calloc(1, sizeof *r);
    if (!r) return deftsim_error_nomem("sweep");
    deftsim_status st = DEFTSIM_OK;
    struct stat sb;
    if (stat(dir, &sb) != 0) {
        st = deftsim_error_set(DEFTSIM_E_INPUT, "%s: %s", dir, strerror(errno));
        goto done;
    }
    if (S_ISREG(sb.st_mode)) {
        if (!(r->kind = strdup("file"))) st = deftsim_error_nomem("sweep");
        if (!st) st = add_file(r, dir, NULL);
        if (!st) st = add_line(r, "Results: `%s`.", dir);
        goto done;
    }
    char mpath[4200];
    snprintf(mpath, sizeof mpath, "%s/manifest.json", dir);
    if (!deftsim_sweep_file_exists(mpath)) {
        if (!(r->kind = strdup("points"))) st = deftsim_error_nomem("sweep");
        if (!st) st = list_points_dir(r, dir);
        goto done;
    }
    json_error_t jerr;
    json_t *m = json_load_file(mpath, 0, &jerr);
    if (!m) {
        st = deftsim_error_set(DEFTSIM_E_INPUT, "%s:%d: not JSON: %s", mpath, jerr.line, jerr.text);
        goto done;
    }
    const char *fmt = json_string_value(json_object_get(m, "format"));
    const char *status = json_string_value(json_object_get(m, "status"));
    if (status && !(r->status = strdup(status))) st = deftsim_error_nomem("sweep");
    else if (fmt && !strcmp(fmt, MANIFEST_FORMAT)) {
        if (!(r->kind = strdup("sweep"))) st = deftsim_error_nomem("sweep");
        if (!st) st = list_sweep(r, dir, m);
    } else if (fmt && !strcmp(fmt, "deftsim-results")) {
        if (!(r->kind = strdup("run"))) st = deftsim_error_nomem("sweep");
        if (!st) st = list_run(r, dir, m);
    } else {
        st = deftsim_error_set(DEFTSIM_E_INPUT, "%s: not a deftsim manifest (format %s)", mpath,
                               fmt ? fmt : "missing");
    }
    json_decref(m);
    if (!st && !r->nfiles)
        st = deftsim_error_set(DEFTSIM_E_INPUT, "%s: no finished points to analyse%s", dir,
                               r->incomplete ? " (it stopped before its first point finished; "
                                               "run it again to resume)"
                                             : "");
done:
    if (st) {
        deftsim_results_free(r);
        return st;
    }
    *out = r;
    return DEFTSIM_OK;
}

deftsim_status deftsim_results_add_metrics(void)
{
    for (size_t i = 0, n = deftsim_method_column_count(); i < n; i++) {
        const deftsim_method_column *c = deftsim_method_column_get(i);
        if (c->summary != DEFTSIM_COL_MEDIAN) continue;
        deftsim_status st = deftsim_metric_add(c->name, c->unit, c->title, c->doc);
        if (st) return st;
    }
    return DEFTSIM_OK;
}
