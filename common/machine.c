/* machine.c - the CPU model and the UTC time (deftsim_machine.h). */
#include "deftsim_machine.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

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
