/* noise.c - the machine's state while a point ran (deftsim_noise.h, docs/TIMING.md). */
#include "deftsim_noise.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "deftsim_util.h"

/* The parsers proper: 0, or -1 with *why set; no error is recorded, so that sampling around
 * a failed point keeps that point's message. */
static int parse_loadavg(const char *text, deftsim_noise_sample *s)
{
    double l1, l5, l15;
    long long run, total;
    if (!text || sscanf(text, "%lf %lf %lf %lld/%lld", &l1, &l5, &l15, &run, &total) != 5 ||
        l1 < 0 || l5 < 0 || l15 < 0 || run < 0)
        return -1;
    s->has_load = 1;
    s->load[0] = l1;
    s->load[1] = l5;
    s->load[2] = l15;
    s->load_runnable = run;
    return 0;
}

deftsim_status deftsim_noise_parse_loadavg(const char *text, deftsim_noise_sample *s)
{
    if (parse_loadavg(text, s))
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "/proc/loadavg: expected 'load1 load5 load15 running/total "
                                 "lastpid', got '%.60s'",
                                 text ? text : "");
    return DEFTSIM_OK;
}

/* *ncpu: the numbers on the "cpu" line (-1: no such line). */
static int parse_stat(const char *text, deftsim_noise_sample *s, int *ncpu)
{
    *ncpu = -1;
    if (!text) return -1;
    int have_cpu = 0;
    s->procs_running = -1;
    for (const char *line = text; *line;) {
        const char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        if (len > 4 && !strncmp(line, "cpu ", 4)) {
            /* user nice system idle iowait irq softirq steal guest guest_nice */
            unsigned long long v[10] = {0};
            int n = sscanf(line + 4, "%llu %llu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0],
                           &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7], &v[8], &v[9]);
            *ncpu = n < 0 ? 0 : n;
            if (n < 4) return -1;
            uint64_t tot = 0;
            for (int i = 0; i < n && i < 8; i++) tot += v[i];
            s->jiffies_total = tot;
            s->jiffies_idle = v[3] + (n > 4 ? v[4] : 0);
            s->jiffies_steal = n > 7 ? v[7] : 0;
            have_cpu = 1;
        } else if (len > 14 && !strncmp(line, "procs_running ", 14)) {
            long long r;
            if (sscanf(line + 14, "%lld", &r) == 1 && r >= 0) s->procs_running = r;
        }
        line += len + (nl ? 1 : 0);
    }
    if (!have_cpu) return -1;
    s->has_stat = 1;
    return 0;
}

deftsim_status deftsim_noise_parse_stat(const char *text, deftsim_noise_sample *s)
{
    int n;
    if (!parse_stat(text, s, &n)) return DEFTSIM_OK;
    if (n < 0) return deftsim_error_set(DEFTSIM_E_INPUT, "/proc/stat: no 'cpu' line");
    return deftsim_error_set(DEFTSIM_E_INPUT,
                             "/proc/stat: the 'cpu' line has %d numbers, at least 4 expected", n);
}

/* The whole of a small file (at most cap - 1 bytes) into buf; 0 on success. */
static int slurp(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    size_t n = fread(buf, 1, cap - 1, f);
    fclose(f);
    buf[n] = '\0';
    return n ? 0 : -1;
}

void deftsim_noise_sample_now(deftsim_noise_sample *s, const char *root)
{
    memset(s, 0, sizeof *s);
    s->procs_running = -1;
    s->at = deftsim_now();
    if (!root) root = "";
    char path[4200];
    size_t cap = (size_t)1 << 20; /* /proc/stat of a large machine fits */
    char *buf = malloc(cap);
    snprintf(path, sizeof path, "%s/proc/loadavg", root);
    if (buf && !slurp(path, buf, cap)) {
        deftsim_noise_sample tmp = *s;
        if (!parse_loadavg(buf, &tmp)) *s = tmp;
    }
    snprintf(path, sizeof path, "%s/proc/stat", root);
    if (buf && !slurp(path, buf, cap)) {
        deftsim_noise_sample tmp = *s;
        int n;
        if (!parse_stat(buf, &tmp, &n)) *s = tmp;
    }
    free(buf); /* an unreadable file is an absent value, not an error */
    double sum = 0;
    int n = 0;
    long ncpu = sysconf(_SC_NPROCESSORS_CONF);
    if (ncpu < 1) ncpu = 1;
    for (long cpu = 0; cpu < ncpu; cpu++) {
        snprintf(path, sizeof path, "%s/sys/devices/system/cpu/cpu%ld/cpufreq/scaling_cur_freq",
                 root, cpu);
        char fb[64];
        if (slurp(path, fb, sizeof fb)) continue;
        long long khz;
        if (sscanf(fb, "%lld", &khz) == 1 && khz > 0) {
            sum += (double)khz / 1000.0;
            n++;
        }
    }
    s->cpus_with_freq = n;
    s->cpu_mhz = n ? sum / n : 0;
}

static json_t *load_json(const deftsim_noise_sample *s)
{
    if (!s->has_load) return json_null();
    return json_pack("[f, f, f]", s->load[0], s->load[1], s->load[2]);
}

static json_t *runnable_json(const deftsim_noise_sample *s)
{
    if (s->procs_running >= 0) return json_integer((json_int_t)s->procs_running);
    if (s->has_load) return json_integer((json_int_t)s->load_runnable);
    return json_null();
}

json_t *deftsim_noise_json(const deftsim_noise_sample *a, const deftsim_noise_sample *b)
{
    json_t *o = json_object();
    if (!o) return NULL;
    json_object_set_new(o, "load_start", load_json(a));
    json_object_set_new(o, "load_end", load_json(b));
    json_object_set_new(o, "runnable_start", runnable_json(a));
    json_object_set_new(o, "runnable_end", runnable_json(b));
    int d = a->has_stat && b->has_stat && b->jiffies_total > a->jiffies_total;
    double tot = d ? (double)(b->jiffies_total - a->jiffies_total) : 0;
    json_object_set_new(o, "idle_frac",
                        d ? json_real((double)(b->jiffies_idle - a->jiffies_idle) / tot) : json_null());
    json_object_set_new(o, "steal_frac",
                        d ? json_real((double)(b->jiffies_steal - a->jiffies_steal) / tot)
                          : json_null());
    json_object_set_new(o, "cpu_mhz_start", a->cpus_with_freq ? json_real(a->cpu_mhz) : json_null());
    json_object_set_new(o, "cpu_mhz_end", b->cpus_with_freq ? json_real(b->cpu_mhz) : json_null());
    json_object_set_new(o, "seconds", json_real(b->at - a->at));
    return o;
}
