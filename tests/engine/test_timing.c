/* test_timing.c - the timing protocol's pieces (docs/TIMING.md): the estimate of the
 * repetitions, the noise guard's parsing of /proc/loadavg and /proc/stat (fed sample text and
 * a fake file system root), the machine state it records, and the flagging rule. The
 * repetitions themselves are checked end to end by tests/reliability/repeats.py. */
#include <criterion/criterion.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "deftsim_analysis.h"
#include "deftsim_noise.h"
#include "deftsim_timing.h"

Test(timing, estimate_min_and_median)
{
    double v[] = {3, 1, 2};
    cr_expect_eq(deftsim_timing_estimate(DEFTSIM_TIMING_MIN, v, 3), 1);
    double w[] = {3, 1, 2};
    cr_expect_eq(deftsim_timing_estimate(DEFTSIM_TIMING_MEDIAN, w, 3), 2);
    double e[] = {4, 1, 3, 2};
    cr_expect_eq(deftsim_timing_estimate(DEFTSIM_TIMING_MEDIAN, e, 4), 2.5);
    double one[] = {7};
    cr_expect_eq(deftsim_timing_estimate(DEFTSIM_TIMING_MEDIAN, one, 1), 7);
    cr_expect_eq(deftsim_timing_estimate(DEFTSIM_TIMING_MIN, one, 1), 7);
    cr_expect_eq(deftsim_timing_estimate(DEFTSIM_TIMING_MIN, one, 0), 0);
}

Test(timing, new_checks_repeats_and_plans_the_copy)
{
    deftsim_timing *t = NULL;
    cr_expect_eq(deftsim_timing_new(0, DEFTSIM_TIMING_MIN, DEFTSIM_TIMING_COLD, 10, &t),
                 DEFTSIM_E_USAGE);
    cr_expect_null(t);
    cr_expect(strstr(deftsim_error_message(), "[timing] repeats"));
    cr_expect_eq(deftsim_timing_memory(1, 1000), 4000);
    cr_expect_eq(deftsim_timing_memory(3, 1000), 4000);
    cr_assert_eq(deftsim_timing_new(3, DEFTSIM_TIMING_MEDIAN, DEFTSIM_TIMING_WARM, 1000, &t),
                 DEFTSIM_OK);
    deftsim_timing_free(t);
    /* Flushing is harmless on any buffer, aligned or not. */
    char buf[300];
    memset(buf, 1, sizeof buf);
    deftsim_timing_flush(buf + 3, sizeof buf - 3);
    cr_expect_eq(buf[299], 1);
    cr_expect(strlen(deftsim_timing_flush_method()) > 0);
}

Test(noise, parse_loadavg)
{
    deftsim_noise_sample s;
    memset(&s, 0, sizeof s);
    cr_assert_eq(deftsim_noise_parse_loadavg("0.52 1.58 10.59 3/1024 12345\n", &s), DEFTSIM_OK);
    cr_expect(s.has_load);
    cr_expect_eq(s.load[0], 0.52);
    cr_expect_eq(s.load[1], 1.58);
    cr_expect_eq(s.load[2], 10.59);
    cr_expect_eq(s.load_runnable, 3);
    memset(&s, 0, sizeof s);
    cr_expect_eq(deftsim_noise_parse_loadavg("0.52 1.58\n", &s), DEFTSIM_E_INPUT);
    cr_expect(strstr(deftsim_error_message(), "/proc/loadavg"), "%s", deftsim_error_message());
    cr_expect_not(s.has_load);
    cr_expect_eq(deftsim_noise_parse_loadavg("-1 1 1 1/2 3", &s), DEFTSIM_E_INPUT);
}

static const char *const STAT =
    "cpu  100 5 50 800 20 3 2 20 0 0\n"
    "cpu0 50 2 25 400 10 1 1 10 0 0\n"
    "cpu1 50 3 25 400 10 2 1 10 0 0\n"
    "intr 12345 0 0\n"
    "ctxt 999\n"
    "procs_running 4\n"
    "procs_blocked 0\n";

Test(noise, parse_stat)
{
    deftsim_noise_sample s;
    memset(&s, 0, sizeof s);
    cr_assert_eq(deftsim_noise_parse_stat(STAT, &s), DEFTSIM_OK, "%s", deftsim_error_message());
    cr_expect(s.has_stat);
    cr_expect_eq(s.jiffies_total, 1000);
    cr_expect_eq(s.jiffies_idle, 820);
    cr_expect_eq(s.jiffies_steal, 20);
    cr_expect_eq(s.procs_running, 4);
    /* An old kernel's four-number cpu line: no iowait, no steal. */
    memset(&s, 0, sizeof s);
    cr_assert_eq(deftsim_noise_parse_stat("cpu 1 2 3 4\n", &s), DEFTSIM_OK);
    cr_expect_eq(s.jiffies_total, 10);
    cr_expect_eq(s.jiffies_idle, 4);
    cr_expect_eq(s.jiffies_steal, 0);
    cr_expect_eq(s.procs_running, -1);
    memset(&s, 0, sizeof s);
    cr_expect_eq(deftsim_noise_parse_stat("cpu0 1 2 3 4\nintr 5\n", &s), DEFTSIM_E_INPUT);
    cr_expect(strstr(deftsim_error_message(), "no 'cpu' line"), "%s", deftsim_error_message());
    cr_expect_eq(deftsim_noise_parse_stat("cpu 1 2\n", &s), DEFTSIM_E_INPUT);
    cr_expect(strstr(deftsim_error_message(), "has 2 numbers"), "%s", deftsim_error_message());
    cr_expect_not(s.has_stat);
}

static void put(const char *root, const char *rel, const char *text)
{
    char path[512], dir[512];
    snprintf(path, sizeof path, "%s/%s", root, rel);
    snprintf(dir, sizeof dir, "%s", path);
    for (char *p = dir + strlen(root) + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            mkdir(dir, 0700);
            *p = '/';
        }
    FILE *f = fopen(path, "w");
    cr_assert(f, "%s", path);
    fputs(text, f);
    fclose(f);
}

Test(noise, sample_from_a_root_and_json)
{
    char root[] = "/tmp/deftsim-noise-XXXXXX";
    cr_assert(mkdtemp(root));
    put(root, "proc/loadavg", "1.00 2.00 3.00 2/100 77\n");
    put(root, "proc/stat", "cpu  100 0 100 700 100 0 0 0 0 0\nprocs_running 2\n");
    put(root, "sys/devices/system/cpu/cpu0/cpufreq/scaling_cur_freq", "2000000\n");
    deftsim_noise_sample a, b;
    deftsim_noise_sample_now(&a, root);
    cr_expect(a.has_load && a.has_stat);
    cr_expect_eq(a.procs_running, 2);
    long ncpu = sysconf(_SC_NPROCESSORS_CONF);
    cr_expect_eq(a.cpus_with_freq, 1, "%ld CPUs configured", ncpu);
    cr_expect_eq(a.cpu_mhz, 2000.0);
    /* Later: 1000 more jiffies, 500 idle (300 idle + 200 iowait), 100 stolen. */
    put(root, "proc/loadavg", "4.00 2.50 3.00 6/100 78\n");
    put(root, "proc/stat", "cpu  400 0 200 1000 300 0 0 100 0 0\nprocs_running 6\n");
    deftsim_noise_sample_now(&b, root);
    json_t *j = deftsim_noise_json(&a, &b);
    cr_assert(j);
    cr_expect_eq(json_real_value(json_array_get(json_object_get(j, "load_start"), 0)), 1.0);
    cr_expect_eq(json_real_value(json_array_get(json_object_get(j, "load_end"), 0)), 4.0);
    cr_expect_eq(json_integer_value(json_object_get(j, "runnable_start")), 2);
    cr_expect_eq(json_integer_value(json_object_get(j, "runnable_end")), 6);
    cr_expect_eq(json_real_value(json_object_get(j, "idle_frac")), 0.5);
    cr_expect_eq(json_real_value(json_object_get(j, "steal_frac")), 0.1);
    cr_expect_eq(json_real_value(json_object_get(j, "cpu_mhz_start")), 2000.0);
    cr_expect(json_real_value(json_object_get(j, "seconds")) >= 0);
    json_decref(j);
    /* Nothing readable: every field null, and no error left behind. */
    deftsim_noise_sample z;
    char empty[] = "/tmp/deftsim-noise-empty-XXXXXX";
    cr_assert(mkdtemp(empty));
    deftsim_error_set(DEFTSIM_E_INPUT, "the point's own message");
    deftsim_noise_sample_now(&z, empty);
    cr_expect_str_eq(deftsim_error_message(), "the point's own message");
    j = deftsim_noise_json(&z, &z);
    cr_expect(json_is_null(json_object_get(j, "load_start")));
    cr_expect(json_is_null(json_object_get(j, "runnable_end")));
    cr_expect(json_is_null(json_object_get(j, "idle_frac")));
    cr_expect(json_is_null(json_object_get(j, "steal_frac")));
    cr_expect(json_is_null(json_object_get(j, "cpu_mhz_end")));
    json_decref(j);
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf %s %s", root, empty);
    cr_expect_eq(system(cmd), 0);
}

Test(noise, flagging_rule)
{
    cr_expect_eq(DEFTSIM_NOISY_SPREAD, 0.25);
    cr_expect_not(deftsim_analysis_is_noisy(0.25, DEFTSIM_NOISY_SPREAD), "at the threshold: kept");
    cr_expect(deftsim_analysis_is_noisy(0.2501, DEFTSIM_NOISY_SPREAD));
    cr_expect_not(deftsim_analysis_is_noisy(0, DEFTSIM_NOISY_SPREAD));
    cr_expect_not(deftsim_analysis_is_noisy(NAN, DEFTSIM_NOISY_SPREAD), "unknown: not flagged");
    cr_expect(deftsim_analysis_is_noisy(INFINITY, DEFTSIM_NOISY_SPREAD) == 0);
}

/* A hand-written point: 2 workers, 3 iterations; the spread per worker (max - min) / min and
 * its median over workers, then over iterations, decide the flag; the median worker's
 * selection time is the median over workers. */
Test(noise, point_noise_from_rows)
{
    char dir[] = "/tmp/deftsim-pnoise-XXXXXX";
    cr_assert(mkdtemp(dir));
    char path[256];
    snprintf(path, sizeof path, "%s/p.csv", dir);
    FILE *f = fopen(path, "w");
    cr_assert(f);
    fprintf(f, "model,method,density,P,iteration,worker,phase_index,select_seconds,"
               "select_seconds_min,select_seconds_max,worker_seconds,bytes_sent,buildup,"
               "captured_frac,captured_ratio,imbalance_seconds,imbalance_cost\n");
    /* spreads: it0: 0.1, 0.5 -> 0.3; it1: 0.2, 0.2 -> 0.2; it2: 1.0 and one run that agrees
     * to the last digit (unknown: left out) -> 1.0. */
    const double sp[3][2] = {{0.1, 0.5}, {0.2, 0.2}, {1.0, 0.0}};
    for (int it = 0; it < 3; it++)
        for (int w = 0; w < 2; w++)
            fprintf(f, "m,topk,0.01,2,%d,%d,0,%g,%g,%g,1,1,1,1,1,1,1\n", it, w, 1.0 + w, 1.0 + w,
                    (1.0 + w) * (1 + sp[it][w]));
    fclose(f);
    double spread;
    int noisy;
    cr_assert_eq(deftsim_analysis_point_noise(path, 0, 0.25, &spread, &noisy), DEFTSIM_OK, "%s",
                 deftsim_error_message());
    cr_expect(fabs(spread - 0.3) < 1e-12, "%g", spread); /* median of 0.3, 0.2, 1.0 */
    cr_expect(noisy);
    cr_assert_eq(deftsim_analysis_point_noise(path, 0, 0.35, &spread, &noisy), DEFTSIM_OK);
    cr_expect_not(noisy);
    /* Leaving out the first iteration: median of 0.2 and 1.0. */
    cr_assert_eq(deftsim_analysis_point_noise(path, 1, 0.25, &spread, &noisy), DEFTSIM_OK);
    cr_expect(fabs(spread - 0.6) < 1e-12, "%g", spread);
    cr_expect(noisy);
    /* One timed run per worker (hi == lo everywhere): the spread is unknown, never noisy. */
    char one[256];
    snprintf(one, sizeof one, "%s/one.csv", dir);
    f = fopen(one, "w");
    cr_assert(f);
    fprintf(f, "model,method,density,P,iteration,worker,phase_index,select_seconds,"
               "select_seconds_min,select_seconds_max,worker_seconds,bytes_sent,buildup,"
               "captured_frac,captured_ratio,imbalance_seconds,imbalance_cost\n"
               "m,topk,0.01,1,0,0,0,2,2,2,2,1,1,1,1,1,1\n");
    fclose(f);
    cr_assert_eq(deftsim_analysis_point_noise(one, 0, 0.25, &spread, &noisy), DEFTSIM_OK);
    cr_expect(isnan(spread), "%g", spread);
    cr_expect_not(noisy);
    /* summary.csv: the median worker (1.5 in every iteration), the spread and the flag. */
    deftsim_analysis *an = NULL;
    cr_assert_eq(deftsim_analysis_new(NULL, NULL, 0, &an), DEFTSIM_OK);
    cr_assert_eq(deftsim_analysis_add_file(an, path, NULL), DEFTSIM_OK, "%s", deftsim_error_message());
    cr_assert_eq(deftsim_analysis_finish(an), DEFTSIM_OK, "%s", deftsim_error_message());
    char out[256];
    snprintf(out, sizeof out, "%s/summary.csv", dir);
    cr_assert_eq(deftsim_analysis_write_csv(an, out), DEFTSIM_OK);
    deftsim_analysis_free(an);
    f = fopen(out, "r");
    cr_assert(f);
    char head[8192], row[8192];
    cr_assert(fgets(head, sizeof head, f) && fgets(row, sizeof row, f));
    fclose(f);
    const char *want[][2] = {{"select_median_worker_seconds_median", "1.5"},
                             {"select_seconds_median", "2"},
                             {"select_spread_median", "0.3"},
                             {"noisy", "1"}};
    for (size_t k = 0; k < 4; k++) {
        head[strcspn(head, "\n")] = row[strcspn(row, "\n")] = '\0';
        char *hp = head, *rp = row, *h, *r;
        const char *got = NULL;
        while ((h = strsep(&hp, ",")) && (r = strsep(&rp, ",")))
            if (!strcmp(h, want[k][0])) got = r;
        cr_expect(got && fabs(atof(got) - atof(want[k][1])) < 1e-12, "%s: %s, want %s",
                  want[k][0], got ? got : "(none)", want[k][1]);
        f = fopen(out, "r");
        cr_assert(fgets(head, sizeof head, f) && fgets(row, sizeof row, f));
        fclose(f);
    }
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_expect_eq(system(cmd), 0);
}
