/* deftsim_noise.h - the machine's state while a point ran (docs/TIMING.md, "Noise guard"):
 * load averages and runnable processes (/proc/loadavg, /proc/stat), CPU time spent idle and
 * stolen by the hypervisor (/proc/stat deltas), and the CPUs' clock where cpufreq shows it
 * (/sys/devices/system/cpu/cpu* /cpufreq/scaling_cur_freq). Recorded in every point's manifest
 * entry so that a reader can tell a quiet measurement from one taken on a busy machine. */
#ifndef DEFTSIM_NOISE_H
#define DEFTSIM_NOISE_H

#include <stdint.h>

#include "deftsim_error.h"

typedef struct {
    int has_load;                 /* /proc/loadavg was read */
    double load[3];               /* 1, 5 and 15 minute load averages */
    int64_t load_runnable;        /* /proc/loadavg's running entities (the "r" of r/total) */
    int has_stat;                 /* /proc/stat's "cpu" line was read */
    uint64_t jiffies_total;       /* sum of the cpu line's fields (guest time excluded: it is
                                     already in user and nice) */
    uint64_t jiffies_idle;        /* idle + iowait */
    uint64_t jiffies_steal;
    int64_t procs_running;        /* /proc/stat procs_running; -1 when absent */
    double cpu_mhz;               /* mean scaling_cur_freq of the CPUs that show it; 0: none */
    int cpus_with_freq;
    double at;                    /* deftsim_now() when taken */
} deftsim_noise_sample;

/* Parse the text of /proc/loadavg ("0.52 0.58 0.59 2/1024 12345") or /proc/stat into s.
 * DEFTSIM_E_INPUT with a message naming the file and the problem when the text does not
 * have the expected form. */
deftsim_status deftsim_noise_parse_loadavg(const char *text, deftsim_noise_sample *s);
deftsim_status deftsim_noise_parse_stat(const char *text, deftsim_noise_sample *s);

/* Takes a sample of this machine now; what cannot be read is marked absent (never fails).
 * root: the file system root to read under ("" or NULL: "/"), for tests. */
void deftsim_noise_sample_now(deftsim_noise_sample *s, const char *root);

/* The state between two samples as a manifest records it (null fields where unreadable):
 * {"load_start": [1, 5, 15 min], "load_end": [...], "runnable_start", "runnable_end",
 *  "idle_frac", "steal_frac", "cpu_mhz_start", "cpu_mhz_end", "seconds"}. */
struct json_t;
struct json_t *deftsim_noise_json(const deftsim_noise_sample *start, const deftsim_noise_sample *end);

#endif
