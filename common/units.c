/* units.c - numbers with units: bandwidths and durations in SimGrid's units, byte sizes
 * (deftsim_units.h). */
#include "deftsim_units.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A unit: a power of ten and a power of two to scale by, and whether it counts bits. */
typedef struct {
    const char *suffix;
    int dec, bin, bits;
} unit;

/* A number with an optional unit from the table. The decimal power goes into the number's own
 * exponent before strtod rounds it, so "5us" is the double nearest 5e-6, as the literal is;
 * binary prefixes and bits (/ 8) scale by powers of two, which is exact. */
static int parse_with_units(const char *text, const unit *units, double *out)
{
    if (!text || !*text) return -1;
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (end == text || errno == ERANGE || !isfinite(v)) return -1;
    const unit *u = NULL;
    if (*end) {
        for (const unit *x = units; x->suffix; x++)
            if (strcmp(end, x->suffix) == 0) u = x;
        if (!u) return -1;
    }
    if (u && u->dec) {
        /* mantissa [e exponent] -> mantissa e (exponent + dec) */
        size_t nlen = (size_t)(end - text);
        char num[128];
        if (nlen >= sizeof num - 16) return -1;
        memcpy(num, text, nlen);
        num[nlen] = '\0';
        char *e = strpbrk(num, "eE");
        long exp = 0;
        if (e) {
            char *ee;
            errno = 0;
            exp = strtol(e + 1, &ee, 10);
            if (errno || *ee) return -1;
            *e = '\0';
        }
        char scaled[160];
        snprintf(scaled, sizeof scaled, "%se%ld", num, exp + u->dec);
        errno = 0;
        v = strtod(scaled, &end);
        if (*end || errno == ERANGE || !isfinite(v)) return -1;
    }
    if (u) v = ldexp(v, u->bin - (u->bits ? 3 : 0));
    if (!isfinite(v)) return -1;
    *out = v;
    return 0;
}

int deftsim_parse_bandwidth(const char *text, double *bytes_per_s)
{
    /* SimGrid's bandwidth units: B for bytes, b for bits; decimal and binary prefixes. */
    static const unit units[] = {
        {"Bps", 0, 0, 0},    {"kBps", 3, 0, 0},   {"KBps", 3, 0, 0},   {"MBps", 6, 0, 0},
        {"GBps", 9, 0, 0},   {"TBps", 12, 0, 0},  {"KiBps", 0, 10, 0}, {"MiBps", 0, 20, 0},
        {"GiBps", 0, 30, 0}, {"TiBps", 0, 40, 0}, {"bps", 0, 0, 1},    {"kbps", 3, 0, 1},
        {"Kbps", 3, 0, 1},   {"Mbps", 6, 0, 1},   {"Gbps", 9, 0, 1},   {"Tbps", 12, 0, 1},
        {"Kibps", 0, 10, 1}, {"Mibps", 0, 20, 1}, {"Gibps", 0, 30, 1}, {"Tibps", 0, 40, 1},
        {NULL, 0, 0, 0}};
    return parse_with_units(text, units, bytes_per_s);
}

int deftsim_parse_duration(const char *text, double *seconds)
{
    static const unit units[] = {{"s", 0, 0, 0},   {"ms", -3, 0, 0},  {"us", -6, 0, 0},
                                 {"ns", -9, 0, 0}, {"ps", -12, 0, 0}, {NULL, 0, 0, 0}};
    return parse_with_units(text, units, seconds);
}

int deftsim_parse_size(const char *s, uint64_t *out)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || !isfinite(v) || v <= 0) return -1;
    double mul = 1;
    if (*end) {
        switch (*end) {
        case 'k': case 'K': mul = 1024.0; break;
        case 'm': case 'M': mul = 1024.0 * 1024; break;
        case 'g': case 'G': mul = 1024.0 * 1024 * 1024; break;
        case 't': case 'T': mul = 1024.0 * 1024 * 1024 * 1024; break;
        default: return -1;
        }
        end++;
        if (strcmp(end, "") != 0 && strcmp(end, "iB") != 0 && strcmp(end, "B") != 0) return -1;
    }
    v *= mul;
    if (v < 1 || v > 1.8e19) return -1;
    *out = (uint64_t)v;
    return 0;
}
