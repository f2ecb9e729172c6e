/* csvread.c - a streaming RFC 4180 reader for result tables (deftsim_analysis.h).
 *
 * deftsim quotes a field only when it holds a comma, quote, CR or LF (deftsim_csv_field), but
 * files edited elsewhere may quote anything, so both forms are read. A quoted field may span
 * lines; a record is read line by line until its quotes balance. */
#include "deftsim_analysis.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "deftsim_util.h"

struct deftsim_csvr {
    FILE *f;
    char *path;
    size_t line_next;   /* the next line's number */
    size_t line;        /* where the current record starts */
    char *lbuf;         /* getline buffer */
    size_t lcap;
    char *rec;          /* the current record's unescaped cells, NUL-separated */
    size_t rcap;
    size_t *cell;       /* offsets into rec */
    size_t ncell, ccap;
    char **names;       /* the header */
    size_t ncols;
};

static deftsim_status grow(void *p, size_t *cap, size_t need, size_t elem)
{
    return deftsim_grow(p, cap, need, elem) ? deftsim_error_nomem("CSV reader") : DEFTSIM_OK;
}

/* Reads one record into r->rec / r->cell. *got = 0 at the end of the file. */
static deftsim_status read_record(deftsim_csvr *r, int *got)
{
    *got = 0;
    ssize_t len;
    for (;;) {
        errno = 0;
        len = getline(&r->lbuf, &r->lcap, r->f);
        if (len < 0) {
            if (ferror(r->f))
                return deftsim_error_set(DEFTSIM_E_IO, "%s: read failed: %s", r->path,
                                         strerror(errno));
            return DEFTSIM_OK;
        }
        r->line = r->line_next++;
        /* Skip blank lines (a trailing newline at the end of a file, for instance). */
        if (!(len == 1 && r->lbuf[0] == '\n') && !(len == 2 && r->lbuf[0] == '\r'))
            break;
    }
    size_t out = 0;
    r->ncell = 0;
    deftsim_status st;
    int quoted = 0, at_start = 1, after_quote = 0;
    const char *p = r->lbuf;
    const char *end = r->lbuf + len;
    if ((st = grow(&r->cell, &r->ccap, 1, sizeof *r->cell))) return st;
    r->cell[r->ncell++] = 0;
    for (;;) {
        if (p == end) {
            if (!quoted) break;
            /* An open quote: the field goes on on the next line. */
            errno = 0;
            len = getline(&r->lbuf, &r->lcap, r->f);
            if (len < 0)
                return deftsim_error_set(DEFTSIM_E_INPUT, "%s:%zu: a quoted field is not closed",
                                         r->path, r->line);
            r->line_next++;
            p = r->lbuf;
            end = r->lbuf + len;
            continue;
        }
        char c = *p++;
        if ((st = grow(&r->rec, &r->rcap, out + 2, 1))) return st;
        if (quoted) {
            if (c == '"') {
                if (p < end && *p == '"') {
                    r->rec[out++] = '"';
                    p++;
                } else {
                    quoted = 0;
                    after_quote = 1;
                }
            } else {
                r->rec[out++] = c;
            }
            continue;
        }
        if (c == ',') {
            r->rec[out++] = '\0';
            if ((st = grow(&r->cell, &r->ccap, r->ncell + 1, sizeof *r->cell))) return st;
            r->cell[r->ncell++] = out;
            at_start = 1;
            after_quote = 0;
            continue;
        }
        if (c == '\n' || (c == '\r' && (p == end || *p == '\n'))) break;
        if (c == '"' && at_start) {
            quoted = 1;
            at_start = 0;
            continue;
        }
        if (after_quote)
            return deftsim_error_set(DEFTSIM_E_INPUT,
                                     "%s:%zu: text after the closing quote of field %zu", r->path,
                                     r->line, r->ncell);
        at_start = 0;
        r->rec[out++] = c;
    }
    if ((st = grow(&r->rec, &r->rcap, out + 1, 1))) return st;
    r->rec[out] = '\0';
    *got = 1;
    return DEFTSIM_OK;
}

void deftsim_csvr_close(deftsim_csvr *r)
{
    if (!r) return;
    if (r->f) fclose(r->f);
    for (size_t i = 0; i < r->ncols; i++) free(r->names[i]);
    free(r->names);
    free(r->path);
    free(r->lbuf);
    free(r->rec);
    free(r->cell);
    free(r);
}

deftsim_status deftsim_csvr_open(const char *path, deftsim_csvr **out)
{
    *out = NULL;
    deftsim_csvr *r = calloc(1, sizeof *r);
    if (!r || !(r->path = strdup(path))) {
        free(r);
        return deftsim_error_nomem("CSV reader");
    }
    r->line_next = 1;
    if (!(r->f = fopen(path, "r"))) {
        int err = errno;
        deftsim_status st = deftsim_error_set(deftsim_open_input_status(err), "%s: cannot open: %s",
                                              path, strerror(err));
        deftsim_csvr_close(r);
        return st;
    }
    int got;
    deftsim_status st = read_record(r, &got);
    if (!st && !got) st = deftsim_error_set(DEFTSIM_E_INPUT, "%s: empty file (no header)", path);
    if (st) {
        deftsim_csvr_close(r);
        return st;
    }
    r->names = calloc(r->ncell, sizeof *r->names);
    if (!r->names) {
        deftsim_csvr_close(r);
        return deftsim_error_nomem("CSV reader");
    }
    for (size_t i = 0; i < r->ncell; i++) {
        const char *name = r->rec + r->cell[i];
        if (!*name) {
            st = deftsim_error_set(DEFTSIM_E_INPUT, "%s:1: header column %zu has no name", path,
                                   i + 1);
            break;
        }
        for (size_t j = 0; j < i; j++)
            if (!strcmp(r->names[j], name)) {
                st = deftsim_error_set(DEFTSIM_E_INPUT, "%s:1: header names column '%s' twice",
                                       path, name);
                break;
            }
        if (st) break;
        if (!(r->names[i] = strdup(name))) {
            st = deftsim_error_nomem("CSV reader");
            break;
        }
        r->ncols = i + 1;
    }
    if (st) {
        deftsim_csvr_close(r);
        return st;
    }
    *out = r;
    return DEFTSIM_OK;
}

size_t deftsim_csvr_ncols(const deftsim_csvr *r) { return r->ncols; }
const char *deftsim_csvr_colname(const deftsim_csvr *r, size_t i)
{
    return i < r->ncols ? r->names[i] : NULL;
}
size_t deftsim_csvr_line(const deftsim_csvr *r) { return r->line; }
const char *deftsim_csvr_path(const deftsim_csvr *r) { return r->path; }

long deftsim_csvr_find(const deftsim_csvr *r, const char *name)
{
    for (size_t i = 0; i < r->ncols; i++)
        if (!strcmp(r->names[i], name)) return (long)i;
    return -1;
}

deftsim_status deftsim_csvr_next(deftsim_csvr *r, int *got)
{
    deftsim_status st = read_record(r, got);
    if (st || !*got) return st;
    if (r->ncell != r->ncols)
        return deftsim_error_set(DEFTSIM_E_INPUT, "%s:%zu: %zu fields, but the header has %zu",
                                 r->path, r->line, r->ncell, r->ncols);
    return DEFTSIM_OK;
}

const char *deftsim_csvr_field(const deftsim_csvr *r, size_t i)
{
    return i < r->ncell ? r->rec + r->cell[i] : "";
}

deftsim_status deftsim_csvr_number(const deftsim_csvr *r, size_t col, double *out)
{
    const char *s = deftsim_csvr_field(r, col);
    if (!*s) {
        *out = NAN;
        return DEFTSIM_OK;
    }
    /* deftsim_csv_double writes infinities as "inf" and "-inf". */
    if (!strcmp(s, "inf") || !strcmp(s, "-inf")) {
        *out = s[0] == '-' ? -INFINITY : INFINITY;
        return DEFTSIM_OK;
    }
    if (deftsim_parse_double(s, out))
        return deftsim_error_set(DEFTSIM_E_INPUT, "%s:%zu: column %s: '%s' is not a number",
                                 r->path, r->line, col < r->ncols ? r->names[col] : "?", s);
    return DEFTSIM_OK;
}
