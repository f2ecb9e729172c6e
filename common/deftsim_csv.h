/* deftsim_csv.h - numbers for tidy CSV files: every value printed so that it reads back to
 * the same bits, in as few digits as that takes. */
#ifndef DEFTSIM_CSV_H
#define DEFTSIM_CSV_H

#include <stddef.h>
#include <stdio.h>

/* Shortest of %.15g, %.16g, %.17g that strtod() reads back to v exactly; "" for NaN (an
 * empty cell: undefined), "inf" / "-inf" for infinities. Returns buf. cap >= 32. */
char *deftsim_csv_double(char *buf, size_t cap, double v);

/* Writes s as one CSV field: quoted (with doubled quotes) only when it holds a comma, quote,
 * CR or LF. */
void deftsim_csv_field(FILE *f, const char *s);

#endif
