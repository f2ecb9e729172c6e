/* test_bench.c - `deftsim bench kernels` runs, verifies and prints its table. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int run(const char *args, char *out, size_t cap)
{
    const char *exe = getenv("DEFTSIM_EXE");
    cr_assert(exe, "DEFTSIM_EXE is not set");
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s' %s 2>&1", exe, args);
    FILE *p = popen(cmd, "r");
    cr_assert(p);
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = '\0';
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

Test(bench, kernels_csv_row_verified)
{
    static char out[1 << 16];
    int rc = run("bench kernels --csv --quick --cases r18-d0.001-normal --budget 0 --reps 3 "
                 "--threads 1,2",
                 out, sizeof out);
    cr_assert_eq(rc, 0, "exit %d:\n%s", rc, out);
    cr_assert(strstr(out, "# machine: "), "%s", out);
    cr_assert(strstr(out, "case,kernel,backend,isa,n,k,density,data,threads,fragments,median_s"),
              "%s", out);
    /* One row per thread count, each verified. */
    const char *a = strstr(out, "\ntopk-r18-d0.001-normal,topk,cpu,");
    cr_assert(a, "%s", out);
    const char *b = strstr(a + 1, "\ntopk-r18-d0.001-normal,topk,cpu,");
    cr_assert(b, "%s", out);
    cr_assert(strstr(a, ",11173962,11173,"), "%s", out);
    cr_assert_null(strstr(out, ",NO,"), "%s", out);
}

/* --isa: one row per instruction set, each naming the one it ran (generic runs anywhere). */
Test(bench, isa_rows)
{
    static char out[1 << 16];
    int rc = run("bench kernels --csv --quick --cases P1024-normal --budget 0 --reps 3 "
                 "--isa generic",
                 out, sizeof out);
    cr_assert_eq(rc, 0, "exit %d:\n%s", rc, out);
    cr_assert(strstr(out, "\nsegtopk-r18-P1024-normal,segtopk,cpu,generic,"), "%s", out);
    cr_assert_null(strstr(out, ",NO,"), "%s", out);
}

/* The fused accumulate case: one row per thread count, its norms verified bit-identical. */
Test(bench, accumulate_norms_row_verified)
{
    static char out[1 << 16];
    int rc = run("bench kernels --csv --quick --cases accnorms --budget 0 --reps 3 --threads 1,2",
                 out, sizeof out);
    cr_assert_eq(rc, 0, "exit %d:\n%s", rc, out);
    const char *a = strstr(out, "\naccnorms-r18-P16-normal,accumulate+norms,cpu,");
    cr_assert(a, "%s", out);
    cr_assert(strstr(a + 1, "\naccnorms-r18-P16-normal,accumulate+norms,cpu,"), "%s", out);
    cr_assert_null(strstr(out, ",NO,"), "%s", out);
}

Test(bench, usage_errors)
{
    static char out[1 << 14];
    cr_assert_eq(run("bench", out, sizeof out), 2, "%s", out);
    cr_assert_eq(run("bench nosuchtarget", out, sizeof out), 2, "%s", out);
    cr_assert(strstr(out, "unknown target"), "%s", out);
    cr_assert_eq(run("bench kernels --threads 0", out, sizeof out), 2, "%s", out);
    cr_assert_eq(run("bench kernels --cases nothing-matches --quick", out, sizeof out), 2, "%s",
                 out);
    cr_assert_eq(run("bench kernels --isa avx3", out, sizeof out), 2, "%s", out);
    cr_assert(strstr(out, "bad --isa"), "%s", out);
    cr_assert_eq(run("bench kernels --help", out, sizeof out), 0, "%s", out);
    cr_assert(strstr(out, "memory floor"), "%s", out);
}
