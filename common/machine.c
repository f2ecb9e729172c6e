/* machine.c - the machine's facts and the UTC time (deftsim_machine.h). */
#include "deftsim_machine.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

char *deftsim_cpu_model(char *buf, size_t cap, const char *fallback)
{
    snprintf(buf, cap, "%s", fallback);
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return buf;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) != 0) continue;
        char *p = strchr(line, ':');
        if (!p) continue;
        for (p++; *p == ' ' || *p == '\t'; p++) {}
        snprintf(buf, cap, "%.*s", (int)strcspn(p, "\n"), p);
        break;
    }
    fclose(f);
    return buf;
}

char *deftsim_utc_now(char *buf, size_t cap)
{
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    if (!strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm) && cap) buf[0] = '\0';
    return buf;
}

uint64_t deftsim_machine_ram(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (f) {
        char line[256];
        unsigned long long kb = 0;
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "MemTotal: %llu kB", &kb) == 1) break;
        fclose(f);
        if (kb) return (uint64_t)kb * 1024u;
    }
    long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
    if (pages > 0 && psize > 0) return (uint64_t)pages * (uint64_t)psize;
    return 0;
}

unsigned deftsim_cpus_online(void)
{
    long c = sysconf(_SC_NPROCESSORS_ONLN);
    return c > 0 ? (unsigned)c : 1u;
}

void deftsim_hostname(char *buf, size_t cap)
{
    snprintf(buf, cap, "unknown");
    if (gethostname(buf, cap) != 0) snprintf(buf, cap, "unknown");
    buf[cap - 1] = '\0';
}
