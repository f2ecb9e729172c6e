/* config_inputs.c - what the configuration reads of the files a scenario names
 * (deftsim_config_inputs.h): [compute]'s durations or table row, and a trace's size from its
 * manifest or folder names. */
#include "deftsim_config_inputs.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "deftsim_analysis.h" /* the CSV reader */
#include "deftsim_trace.h"
#include "deftsim_util.h"

int deftsim_compute_enabled(const deftsim_config *cfg)
{
    return cfg->compute.forward > 0 || cfg->compute.backward > 0 || cfg->compute.table != NULL;
}

/* ---- the table ------------------------------------------------------------------------------ */

static const char *const table_cols[] = {"model", "device", "batch", "forward_ms", "backward_ms",
                                         "source"};
#define NTABLE_COLS (sizeof table_cols / sizeof table_cols[0])

/* One row's figures, checked: file:line and the column on a bad one. */
static deftsim_status table_row(deftsim_csvr *r, const long *col, double *fwd, double *bwd,
                                double *batch)
{
    deftsim_status st;
    double *dst[3] = {batch, fwd, bwd};
    const size_t which[3] = {2, 3, 4};
    for (size_t i = 0; i < 3; i++) {
        if ((st = deftsim_csvr_number(r, (size_t)col[which[i]], dst[i]))) return st;
        const char *cell = deftsim_csvr_field(r, (size_t)col[which[i]]);
        const char *bad = !cell[0] ? "is empty"
                        : !isfinite(*dst[i]) ? "is not finite"
                        : *dst[i] < 0 ? "is negative"
                        : i == 0 && !(*dst[i] >= 1 && *dst[i] == floor(*dst[i]) && *dst[i] <= 1e9)
                            ? "is not a batch size (an integer >= 1)" : NULL;
        if (bad)
            return deftsim_error_set(DEFTSIM_E_INPUT, "%s:%zu: column %s: '%s' %s",
                                     deftsim_csvr_path(r), deftsim_csvr_line(r),
                                     table_cols[which[i]], cell, bad);
    }
    for (size_t i = 0; i < NTABLE_COLS; i++)
        if (deftsim_utf8_check(deftsim_csvr_field(r, (size_t)col[i]), NULL))
            return deftsim_error_set(DEFTSIM_E_INPUT, "%s:%zu: column %s is not valid UTF-8",
                                     deftsim_csvr_path(r), deftsim_csvr_line(r), table_cols[i]);
    for (size_t i = 0; i < 2; i++)
        if (!deftsim_csvr_field(r, (size_t)col[i])[0])
            return deftsim_error_set(DEFTSIM_E_INPUT, "%s:%zu: column %s is empty",
                                     deftsim_csvr_path(r), deftsim_csvr_line(r), table_cols[i]);
    return DEFTSIM_OK;
}

/* Appends "model/device/batch" to a list of rows for a message. */
static void list_row(char *buf, size_t cap, size_t *o, size_t *n, deftsim_csvr *r,
                     const long *col)
{
    if (*o >= cap) return;
    if (*n == 8) {
        *o += (size_t)snprintf(buf + *o, cap - *o, ", ...");
    } else if (*n < 8) {
        *o += (size_t)snprintf(buf + *o, cap - *o, "%s%s/%s/batch %s (line %zu)", *n ? ", " : "",
                               deftsim_csvr_field(r, (size_t)col[0]),
                               deftsim_csvr_field(r, (size_t)col[1]),
                               deftsim_csvr_field(r, (size_t)col[2]), deftsim_csvr_line(r));
    }
    (*n)++;
}

static deftsim_status table_lookup(const deftsim_config *cfg, const char *model,
                                   deftsim_compute_times *out)
{
    const char *path = cfg->compute.table;
    char w[512];
    deftsim_config_where(cfg, "compute", "table", w, sizeof w);
    deftsim_csvr *r;
    deftsim_status st = deftsim_csvr_open(path, &r);
    if (st) return deftsim_error_wrap(st, "%s", w);
    long col[NTABLE_COLS];
    for (size_t i = 0; i < NTABLE_COLS; i++)
        if ((col[i] = deftsim_csvr_find(r, table_cols[i])) < 0) {
            deftsim_csvr_close(r);
            return deftsim_error_set(DEFTSIM_E_INPUT,
                                     "%s: %s has no column '%s' (columns: model, device, batch, "
                                     "forward_ms, backward_ms, source)",
                                     w, path, table_cols[i]);
        }
    const char *dev = cfg->compute.device;
    int batch = cfg->compute.batch;
    char matches[1024] = "", models[1024] = "";
    size_t nm = 0, om = 0, nall = 0, oall = 0;
    int got;
    while (!(st = deftsim_csvr_next(r, &got)) && got) {
        double f, b, bt;
        if ((st = table_row(r, col, &f, &b, &bt))) break;
        list_row(models, sizeof models, &oall, &nall, r, col);
        if (strcmp(deftsim_csvr_field(r, (size_t)col[0]), model)) continue;
        if (dev && strcmp(deftsim_csvr_field(r, (size_t)col[1]), dev)) continue;
        if (batch > 0 && bt != batch) continue;
        if (!nm) {
            out->forward = f / 1e3;
            out->backward = b / 1e3;
            snprintf(out->origin, sizeof out->origin, "%s:%zu", path, deftsim_csvr_line(r));
            snprintf(out->source, sizeof out->source, "%s", deftsim_csvr_field(r, (size_t)col[5]));
        }
        list_row(matches, sizeof matches, &om, &nm, r, col);
    }
    deftsim_csvr_close(r);
    if (st) return deftsim_error_wrap(st, "%s", w);
    char want[600];
    snprintf(want, sizeof want, "model %s%s%s", model, dev ? ", device " : "", dev ? dev : "");
    if (batch > 0) snprintf(want + strlen(want), sizeof want - strlen(want), ", batch %d", batch);
    if (nm == 0)
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "%s: %s has no row for %s (rows: %s; [compute] model, device "
                                 "and batch select one)",
                                 w, path, want, nall ? models : "none");
    if (nm > 1)
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "%s: %zu rows of %s match %s: %s; set [compute] device and "
                                 "batch to pick one",
                                 w, nm, path, want, matches);
    return DEFTSIM_OK;
}

deftsim_status deftsim_compute_resolve(const deftsim_config *cfg, const char *model_name,
                                       deftsim_compute_times *out)
{
    memset(out, 0, sizeof *out);
    if (!cfg->compute.table) {
        out->forward = cfg->compute.forward;
        out->backward = cfg->compute.backward;
        snprintf(out->origin, sizeof out->origin, "[compute] forward, backward");
        return DEFTSIM_OK;
    }
    return table_lookup(cfg, cfg->compute.model ? cfg->compute.model : model_name, out);
}

/* ---- a trace's size ------------------------------------------------------------------------ */

deftsim_status deftsim_gradsrc_trace_peek(const char *dir, size_t *iterations, uint64_t *numel)
{
    *iterations = 0;
    *numel = 0;
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, DEFTSIM_TRACE_MANIFEST);
    json_error_t jerr;
    json_t *m = json_load_file(path, 0, &jerr);
    if (m) {
        json_int_t n = json_integer_value(json_object_get(json_object_get(m, "model"), "numel"));
        *iterations = json_array_size(json_object_get(m, "iterations"));
        *numel = n > 0 ? (uint64_t)n : 0;
        json_decref(m);
    } else {
        DIR *d = opendir(dir);
        struct dirent *e;
        while (d && (e = readdir(d)))
            if (!strncmp(e->d_name, "iter_", 5) && e->d_name[5] &&
                strspn(e->d_name + 5, "0123456789") == strlen(e->d_name + 5))
                (*iterations)++;
        if (d) closedir(d);
    }
    if (!*iterations)
        return deftsim_error_set(DEFTSIM_E_INPUT, "%s: no iterations (not a trace)", dir);
    return DEFTSIM_OK;
}
