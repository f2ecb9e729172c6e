/* table.c - see table.h. */
#include "table.h"

#include <criterion/criterion.h>

#include <stdlib.h>
#include <string.h>

#include "deftsim_util.h"

static size_t split(char *line, char **out, size_t cap)
{
    size_t n = 0;
    for (char *p = line;; p++) {
        if (n < cap) out[n] = p;
        n++;
        p = strchr(p, ',');
        if (!p) break;
        *p = '\0';
    }
    return n;
}

table *load_csv(const char *path)
{
    table *t = calloc(1, sizeof *t);
    cr_assert(t);
    size_t len;
    cr_assert_eq(deftsim_read_file(path, &t->buf, &len), DEFTSIM_OK, "%s", deftsim_error_message());
    cr_assert(len > 0 && t->buf[len - 1] == '\n', "%s: does not end in a newline", path);
    size_t lines = 0;
    for (size_t i = 0; i < len; i++) lines += t->buf[i] == '\n';
    char **line = calloc(lines, sizeof *line);
    cr_assert(line);
    char *p = t->buf;
    for (size_t i = 0; i < lines; i++) {
        line[i] = p;
        p = strchr(p, '\n');
        *p++ = '\0';
    }
    t->hdr = calloc(256, sizeof(char *));
    t->ncols = split(line[0], t->hdr, 256);
    cr_assert(t->ncols <= 256, "%s: %zu columns", path, t->ncols);
    t->nrows = lines - 1;
    t->cell = calloc(t->nrows * t->ncols + 1, sizeof(char *));
    cr_assert(t->hdr && t->cell);
    for (size_t r = 0; r < t->nrows; r++) {
        size_t n = split(line[r + 1], t->cell + r * t->ncols, t->ncols);
        cr_assert_eq(n, t->ncols, "%s: row %zu has %zu fields, the header %zu", path, r + 1, n,
                     t->ncols);
    }
    free(line);
    return t;
}

void table_free(table *t)
{
    free(t->buf);
    free(t->hdr);
    free(t->cell);
    free(t);
}

size_t col(const table *t, const char *name)
{
    for (size_t c = 0; c < t->ncols; c++)
        if (strcmp(t->hdr[c], name) == 0) return c;
    cr_assert_fail("no column '%s'", name);
    return 0;
}

const char *cell(const table *t, size_t r, const char *name)
{
    return t->cell[r * t->ncols + col(t, name)];
}

double num(const table *t, size_t r, const char *name)
{
    const char *s = cell(t, r, name);
    cr_assert(s[0], "row %zu: %s is empty", r, name);
    double v;
    cr_assert_eq(deftsim_parse_double(s, &v), 0, "row %zu: %s = '%s' is not a number", r, name, s);
    return v;
}
