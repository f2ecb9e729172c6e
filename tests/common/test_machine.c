/* test_machine.c - deftsim_utc_now's format and value, deftsim_cpu_model against
 * /proc/cpuinfo's first "model name" (or the fallback where there is none). */
#include <criterion/criterion.h>

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "deftsim_machine.h"

Test(machine, utc_now)
{
    char buf[32];
    time_t before = time(NULL);
    cr_assert_eq(deftsim_utc_now(buf, sizeof buf), buf);
    time_t after = time(NULL);
    cr_assert_eq(strlen(buf), 20, "%s", buf);
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    const char *end = strptime(buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    cr_assert(end && *end == '\0', "not ISO 8601 UTC: %s", buf);
    time_t t = timegm(&tm);
    cr_expect(t >= before && t <= after, "%s is not now", buf);
    char small[4];
    deftsim_utc_now(small, sizeof small);
    cr_expect_str_eq(small, "", "a buffer too small gives an empty string");
}

Test(machine, cpu_model)
{
    char want[256] = "";
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f) {
        char line[512];
        while (fgets(line, sizeof line, f)) {
            char *c = strchr(line, ':');
            if (strncmp(line, "model name", 10) != 0 || !c) continue;
            for (c++; *c == ' ' || *c == '\t'; c++) {}
            c[strcspn(c, "\n")] = '\0';
            snprintf(want, sizeof want, "%s", c);
            break;
        }
        fclose(f);
    }
    char got[256];
    cr_assert_eq(deftsim_cpu_model(got, sizeof got, "no model here"), got);
    cr_expect_str_eq(got, want[0] ? want : "no model here");
    char tiny[5];
    deftsim_cpu_model(tiny, sizeof tiny, "fallback");
    cr_expect_eq(strlen(tiny), 4, "truncated to the buffer: %s", tiny);
}
