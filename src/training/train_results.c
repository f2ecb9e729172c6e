/* train_results.c - a deftsim train folder's manifest (deftsim_train_results.h). */
#include "deftsim_train_results.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#define TRAIN_FORMAT "deftsim-train-results"

int deftsim_train_results_is(const char *dir)
{
    char mpath[4200];
    snprintf(mpath, sizeof mpath, "%s/manifest.json", dir);
    if (access(mpath, R_OK) != 0) return 0;
    json_error_t jerr;
    json_t *m = json_load_file(mpath, 0, &jerr);
    if (!m) return 0;
    const char *fmt = json_string_value(json_object_get(m, "format"));
    int is = fmt && !strcmp(fmt, TRAIN_FORMAT);
    json_decref(m);
    return is;
}

void deftsim_train_results_free(deftsim_train_results *r)
{
    if (!r) return;
    for (size_t i = 0; i < r->npoints; i++) {
        free(r->points[i].method);
        free(r->points[i].path);
    }
    free(r->points);
    free(r->dir);
    free(r->scenario);
    free(r->status);
    free(r->commit);
    free(r->network);
    free(r);
}

static char *dup_or_empty(const char *s) { return strdup(s ? s : ""); }

deftsim_status deftsim_train_results_open(const char *dir, deftsim_train_results **out)
{
    *out = NULL;
    char mpath[4200];
    snprintf(mpath, sizeof mpath, "%s/manifest.json", dir);
    json_error_t jerr;
    json_t *m = json_load_file(mpath, 0, &jerr);
    if (!m) {
        if (access(mpath, R_OK) != 0)
            return deftsim_error_set(DEFTSIM_E_INPUT, "%s: %s", mpath, strerror(errno));
        return deftsim_error_set(DEFTSIM_E_INPUT, "%s:%d: not JSON: %s", mpath, jerr.line, jerr.text);
    }
    deftsim_status st = DEFTSIM_OK;
    deftsim_train_results *r = calloc(1, sizeof *r);
    if (!r) {
        json_decref(m);
        return deftsim_error_nomem("%s", mpath);
    }
    const char *fmt = json_string_value(json_object_get(m, "format"));
    json_t *seed = json_object_get(m, "seed"), *pts = json_object_get(m, "points");
    if (!fmt || strcmp(fmt, TRAIN_FORMAT)) {
        st = deftsim_error_set(DEFTSIM_E_INPUT, "%s: not a deftsim train manifest (format %s)",
                               mpath, fmt ? fmt : "missing");
        goto done;
    }
    if (!json_is_integer(seed) || json_integer_value(seed) < 0) {
        st = deftsim_error_set(DEFTSIM_E_INPUT, "%s: \"seed\" missing or not a non-negative integer",
                               mpath);
        goto done;
    }
    if (!json_is_array(pts)) {
        st = deftsim_error_set(DEFTSIM_E_INPUT, "%s: \"points\" missing or not a list", mpath);
        goto done;
    }
    r->seed = (uint64_t)json_integer_value(seed);
    json_t *dv = json_object_get(m, "deftsim"), *net = json_object_get(m, "network");
    if (!(r->dir = strdup(dir)) ||
        !(r->scenario = dup_or_empty(json_string_value(json_object_get(m, "scenario")))) ||
        !(r->status = dup_or_empty(json_string_value(json_object_get(m, "status")))) ||
        !(r->commit = dup_or_empty(json_string_value(json_object_get(dv, "git_commit")))) ||
        !(r->network = dup_or_empty(json_string_value(json_object_get(net, "model"))))) {
        st = deftsim_error_nomem("%s", mpath);
        goto done;
    }
    size_t n = json_array_size(pts);
    if (!n) {
        st = deftsim_error_set(DEFTSIM_E_INPUT, "%s: lists no finished points (no rows to read)",
                               mpath);
        goto done;
    }
    if (!(r->points = calloc(n, sizeof *r->points))) {
        st = deftsim_error_nomem("%s", mpath);
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *p = json_array_get(pts, i);
        const char *method = json_string_value(json_object_get(p, "method"));
        const char *file = json_string_value(json_object_get(p, "file"));
        json_t *d = json_object_get(p, "density"), *P = json_object_get(p, "P");
        if (!method || !file || !json_is_number(d) || !json_is_integer(P) ||
            json_integer_value(P) < 1 || strstr(file, "..") || file[0] == '/') {
            st = deftsim_error_set(DEFTSIM_E_INPUT,
                                   "%s: points[%zu]: method, density, P or file missing or invalid",
                                   mpath, i);
            goto done;
        }
        deftsim_train_point_file *pf = &r->points[r->npoints];
        size_t len = strlen(dir) + strlen(file) + 2;
        if (!(pf->method = strdup(method)) || !(pf->path = malloc(len))) {
            free(pf->method);
            st = deftsim_error_nomem("%s", mpath);
            goto done;
        }
        snprintf(pf->path, len, "%s/%s", dir, file);
        pf->density = json_number_value(d);
        pf->P = (unsigned)json_integer_value(P);
        r->npoints++;
        if (access(pf->path, R_OK) != 0) {
            st = deftsim_error_set(DEFTSIM_E_INPUT, "%s: %s (listed in %s)", pf->path,
                                   strerror(errno), mpath);
            goto done;
        }
    }
done:
    json_decref(m);
    if (st) {
        deftsim_train_results_free(r);
        return st;
    }
    *out = r;
    return DEFTSIM_OK;
}
