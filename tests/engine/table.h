/* table.h - rows.csv as the tests read it: a header and cells of text, looked up by column
 * name. The engine quotes only fields holding a comma or quote; the tests' names hold none,
 * so a plain split is exact here. Failures stop the test through Criterion assertions. */
#ifndef DEFTSIM_TEST_TABLE_H
#define DEFTSIM_TEST_TABLE_H

#include <stddef.h>

typedef struct {
    char *buf;
    char **hdr;
    size_t ncols, nrows;
    char **cell; /* nrows x ncols */
} table;

table *load_csv(const char *path);
void table_free(table *t);
/* Index of a column (fails the test if there is none). */
size_t col(const table *t, const char *name);
const char *cell(const table *t, size_t r, const char *name);
/* A cell that must hold a number. */
double num(const table *t, size_t r, const char *name);

#endif
