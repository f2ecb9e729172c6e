/* csv.c - round-trip number formatting and field quoting for the result files. */
#include "deftsim_csv.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

char *deftsim_csv_double(char *buf, size_t cap, double v)
{
    if (isnan(v)) {
        buf[0] = '\0';
        return buf;
    }
    if (isinf(v)) {
        snprintf(buf, cap, "%s", v > 0 ? "inf" : "-inf");
        return buf;
    }
    /* %.17g always round-trips; the shorter forms keep 0.1 from printing as
     * 0.10000000000000001. */
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(buf, cap, "%.*g", prec, v);
        if (prec == 17 || strtod(buf, NULL) == v) break;
    }
    return buf;
}

void deftsim_csv_field(FILE *f, const char *s)
{
    if (!strpbrk(s, ",\"\r\n")) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (const char *p = s; *p; p++) {
        if (*p == '"') fputc('"', f);
        fputc(*p, f);
    }
    fputc('"', f);
}
