/* deftsim_machine.h - what a run records about where and when it ran: the CPU model and the
 * UTC time, for manifests, profiles and benchmark headers. */
#ifndef DEFTSIM_MACHINE_H
#define DEFTSIM_MACHINE_H

#include <stddef.h>
#include <stdint.h>

/* Writes the value of the first "model name" line of /proc/cpuinfo (leading blanks and the
 * newline removed) to buf; `fallback` when the file cannot be read or has no such line.
 * Returns buf. */
char *deftsim_cpu_model(char *buf, size_t cap, const char *fallback);

/* Writes the current UTC time as "2026-12-01T10:59:18Z" (ISO 8601, seconds) to buf (cap >=
 * 21). Returns buf. */
char *deftsim_utc_now(char *buf, size_t cap);

/* Physical memory in bytes (MemTotal of /proc/meminfo, else sysconf), 0 when unknown. */
uint64_t deftsim_machine_ram(void);
/* Online CPUs (at least 1). */
unsigned deftsim_cpus_online(void);
/* This machine's host name, or "unknown". */
void deftsim_hostname(char *buf, size_t cap);

#endif
