/* deftsim_units.h - numbers with units, as scenarios and options write them: bandwidths and
 * durations in SimGrid's units ([network] keys, platform files), byte sizes (--ram). */
#ifndef DEFTSIM_UNITS_H
#define DEFTSIM_UNITS_H

#include <stdint.h>

/* Parses "25Gbps", "3.125GBps", "100MiBps", "1e9" (bytes/s) into bytes/s, and "1us", "5ns",
 * "0.1ms", "2s", "1e-6" (seconds) into seconds: SimGrid's unit suffixes. Return 0 on success,
 * -1 with nothing recorded. */
int deftsim_parse_bandwidth(const char *text, double *bytes_per_s);
int deftsim_parse_duration(const char *text, double *seconds);

/* A byte count such as "24G", "1.5T" or "4096" (binary suffixes K, M, G, T, optionally
 * followed by "B" or "iB"). Returns 0, or -1 if malformed or out of range. */
int deftsim_parse_size(const char *s, uint64_t *out);

#endif
