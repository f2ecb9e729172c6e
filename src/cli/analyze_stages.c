/* analyze_stages.c - `deftsim analyze`'s account of where the points' wall time went: the
 * stages each point's manifest entry records (deftsim_stages.h), summed per method and P,
 * measured against their floors, into stages.csv and a section of summary.md. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cli.h"
#include "deftsim_util.h"
#include "deftsim_stages.h"

#define NSTAGE 8

typedef struct {
    char variant[128];
    char method[64];
    long P;
    size_t points;
    double total, other, ref;
    double sec[NSTAGE], floor[NSTAGE];
    int has_floor[NSTAGE];
} stage_row;

static int cmp_row(const void *a, const void *b)
{
    const stage_row *x = a, *y = b;
    int c = strcmp(x->variant, y->variant);
    if (!c) c = strcmp(x->method, y->method);
    if (!c) c = (x->P > y->P) - (x->P < y->P);
    return c;
}

/* The rows of the folder's manifest (a run's or a sweep's), one per variant, method and P. */
static size_t collect(json_t *m, stage_row **out)
{
    json_t *pts = json_object_get(m, "points");
    size_t n = 0, cap = json_array_size(pts) ? json_array_size(pts) : 1, i;
    stage_row *rows = calloc(cap, sizeof *rows);
    json_t *p;
    if (!rows) return 0;
    json_array_foreach(pts, i, p) {
        json_t *st = json_object_get(p, "stages");
        if (!json_is_object(st)) continue;
        const char *method = json_string_value(json_object_get(p, "method"));
        const char *variant = json_string_value(json_object_get(p, "variant"));
        long P = (long)json_integer_value(json_object_get(p, "P"));
        stage_row *r = NULL;
        for (size_t k = 0; k < n && !r; k++)
            if (rows[k].P == P && !strcmp(rows[k].method, method ? method : "") &&
                !strcmp(rows[k].variant, variant ? variant : ""))
                r = &rows[k];
        if (!r) {
            r = &rows[n++];
            snprintf(r->method, sizeof r->method, "%s", method ? method : "");
            snprintf(r->variant, sizeof r->variant, "%s", variant ? variant : "");
            r->P = P;
        }
        r->points++;
        r->total += json_number_value(json_object_get(p, "seconds"));
        r->other += json_number_value(json_object_get(st, "other_seconds"));
        for (size_t s = 0; s < NSTAGE; s++) {
            json_t *o = json_object_get(st, deftsim_stages_name(s));
            r->sec[s] += json_number_value(json_object_get(o, "seconds"));
            json_t *f = json_object_get(o, "floor_seconds");
            if (json_is_number(f)) {
                r->floor[s] += json_number_value(f);
                r->has_floor[s] = 1;
            }
        }
    }
    qsort(rows, n, sizeof *rows, cmp_row);
    *out = rows;
    return n;
}

static deftsim_status write_csv(const char *path, const stage_row *rows, size_t n)
{
    deftsim_afile *af;
    deftsim_status st = deftsim_afile_open(&af, path);
    if (st) return st;
    FILE *f = deftsim_afile_stream(af);
    fprintf(f, "variant,method,P,points,seconds");
    for (size_t s = 0; s < NSTAGE; s++)
        fprintf(f, ",%s_seconds,%s_floor_seconds", deftsim_stages_name(s), deftsim_stages_name(s));
    fprintf(f, ",other_seconds\n");
    for (size_t i = 0; i < n; i++) {
        const stage_row *r = &rows[i];
        fprintf(f, "%s,%s,%ld,%zu,%.6g", r->variant, r->method, r->P, r->points, r->total);
        for (size_t s = 0; s < NSTAGE; s++) {
            fprintf(f, ",%.6g,", r->sec[s]);
            if (r->has_floor[s]) fprintf(f, "%.6g", r->floor[s]);
        }
        fprintf(f, ",%.6g\n", r->other);
    }
    return deftsim_afile_commit(af);
}

static void write_md(FILE *f, const stage_row *rows, size_t n)
{
    fprintf(f, "\n## Where the points' time went\n\n"
               "Wall seconds per stage, summed over each method's points at each P (densities "
               "and iterations), as every point's manifest entry records them (`stages`), and in "
               "brackets the stage's floor: the bytes it must touch at the memory bandwidth "
               "measured in the same run (a cold read, one thread; the preparation threads for "
               "`accumulate`), or the elements it generates at the generator's own measured "
               "throughput. docs/TIMING.md defines the stages; stages.csv holds the numbers.\n\n");
    fprintf(f, "| variant | method | P | total");
    for (size_t s = 0; s < NSTAGE; s++) fprintf(f, " | %s", deftsim_stages_name(s));
    fprintf(f, " | other |\n|---|---|---:|---:");
    for (size_t s = 0; s <= NSTAGE; s++) fprintf(f, "|---:");
    fprintf(f, "|\n");
    for (size_t i = 0; i < n; i++) {
        const stage_row *r = &rows[i];
        fprintf(f, "| %s | %s | %ld | %.3g", r->variant[0] ? r->variant : "-", r->method, r->P,
                r->total);
        for (size_t s = 0; s < NSTAGE; s++) {
            fprintf(f, " | %.3g", r->sec[s]);
            if (r->has_floor[s]) fprintf(f, " (%.2g)", r->floor[s]);
        }
        fprintf(f, " | %.2g |\n", r->other);
    }
}

deftsim_status deftsim_cli_analyze_stages(const char *src, const char *outdir, const char *md,
                                          int quiet)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/manifest.json", src);
    json_t *m = json_load_file(path, 0, NULL);
    if (!m) return DEFTSIM_OK; /* a file of rows: no manifest, no stages */
    stage_row *rows = NULL;
    size_t n = collect(m, &rows);
    json_decref(m);
    deftsim_status st = DEFTSIM_OK;
    if (n) {
        snprintf(path, sizeof path, "%s/stages.csv", outdir);
        st = write_csv(path, rows, n);
    }
    if (!st && n) {
        /* summary.md again, with the table at its end. */
        FILE *in = fopen(md, "rb");
        deftsim_afile *af = NULL;
        if (!in) st = deftsim_error_set(DEFTSIM_E_IO, "%s: cannot be read back", md);
        else if (!(st = deftsim_afile_open(&af, md))) {
            FILE *f = deftsim_afile_stream(af);
            char buf[8192];
            size_t k;
            while ((k = fread(buf, 1, sizeof buf, in)) > 0) fwrite(buf, 1, k, f);
            write_md(f, rows, n);
            st = deftsim_afile_commit(af);
        }
        if (in) fclose(in);
        if (!st && !quiet) fprintf(stderr, "deftsim analyze: time by stage -> %s\n", path);
    }
    free(rows);
    return st;
}
