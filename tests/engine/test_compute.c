/* test_compute.c - [compute] through the engine (suite fast): the forward and backward rows,
 * the iteration time with the training step's compute against closed forms under CM02 on the
 * flat cluster (the dense baseline's DDP buckets overlapped with the backward pass, or not;
 * a sparsifier's schedule after the whole backward pass), a table row's figures, and the
 * rows shipped in traces/compute.csv. */
#include <criterion/criterion.h>

#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "deftsim_compute.h"
#include "deftsim_config.h"
#include "deftsim_engine.h"
#include "deftsim_util.h"
#include "table.h"

/* Two tensors of 4096 fp32 values (16 KiB each): with 0.01 MiB buckets, DDP's assignment
 * makes one bucket of each, the last tensor first. */
static const char two_csv[] = "index,name,shape,numel\n0,a,64x64,4096\n1,b,64x64,4096\n";

static char tmpdir[64];

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb; (void)flag; (void)ftw;
    return remove(path);
}

static void setup(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/deftsim-compute-XXXXXX");
    cr_assert(mkdtemp(tmpdir), "mkdtemp");
    char path[128];
    snprintf(path, sizeof path, "%s/two.csv", tmpdir);
    cr_assert_eq(deftsim_write_file_atomic(path, two_csv, strlen(two_csv)), DEFTSIM_OK);
}

static void teardown(void) { nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

TestSuite(compute, .init = setup, .fini = teardown);

/* Runs the scenario (P = 4, CM02, measured compute) with the overrides into tmpdir/out and
 * returns its rows. */
static table *run_rows(const char *out, const char *const *ov, size_t nov)
{
    char text[1024];
    snprintf(text, sizeof text,
             "[scenario]\nname = two\nseed = 3\niterations = 2\noutput = %s/%s\n"
             "[gradients]\nmodel = %s/two.csv\n"
             "[sparsify]\nmethods = dense\ndensities = 0.05\n"
             "[workers]\ncounts = 4\n[timing]\nrepeats = 1\n[network]\nmodel = CM02\n",
             tmpdir, out, tmpdir);
    deftsim_config *cfg = NULL;
    deftsim_status st = deftsim_config_parse(text, "two.ini", ov, nov, &cfg);
    cr_assert_eq(st, DEFTSIM_OK, "%s", deftsim_error_message());
    deftsim_run_options opt;
    deftsim_run_options_default(&opt);
    opt.prep_threads = 1;
    deftsim_run_summary sum;
    st = deftsim_run(cfg, &opt, &sum);
    cr_assert_eq(st, DEFTSIM_OK, "%s", deftsim_error_message());
    deftsim_config_free(cfg);
    char path[200];
    snprintf(path, sizeof path, "%s/%s/rows.csv", tmpdir, out);
    return load_csv(path);
}

static int close_to(double got, double want) { return fabs(got - want) <= 1e-9 * want + 4e-9; }

/* Rabenseifner's allreduce of `bytes` at P = 4 on the flat cluster under CM02: two rounds of
 * halving and two of doubling, each message 2 L + (payload + 16) / B. */
static double allreduce4(double bytes)
{
    const double L = 1e-6, B = 3.125e9;
    return 2 * ((2 * L + (bytes / 2 + 16) / B) + (2 * L + (bytes / 4 + 16) / B));
}

static size_t count_kind(const table *t, const char *kind)
{
    size_t n = 0;
    for (size_t r = 0; r < t->nrows; r++) n += !strcmp(cell(t, r, "phase_kind"), kind);
    return n;
}

/* Dense with two buckets: bucket 0 (tensor b) starts when half the backward pass is done,
 * bucket 1 when the backward pass ends and bucket 0 did:
 *   iteration = F + B/2 + max(B/2, A) + A        (A: one 16 KiB allreduce)
 * once with the backward pass hiding bucket 0 and once with bucket 0 longer than it; without
 * overlap it is F + B + the allreduce of the whole 32 KiB. */
Test(compute, dense_buckets_overlap_the_backward_pass)
{
    const double F = 3e-3, A = allreduce4(16384), Afull = allreduce4(32768);
    const struct { const char *bwd; double B; int overlap; } cases[] = {
        {"compute.backward=2ms", 2e-3, 1}, {"compute.backward=10us", 1e-5, 1},
        {"compute.backward=2ms", 2e-3, 0}};
    for (size_t c = 0; c < 3; c++) {
        const char *ov[] = {"compute.forward=3ms", cases[c].bwd, "compute.bucket_mb=0.01",
                            "compute.first_bucket_mb=0.01",
                            cases[c].overlap ? "compute.overlap=1" : "compute.overlap=0"};
        char out[32];
        snprintf(out, sizeof out, "dense%zu", c);
        table *t = run_rows(out, ov, 5);
        double B = cases[c].B;
        double want = cases[c].overlap ? F + B / 2 + fmax(B / 2, A) + A : F + B + Afull;
        cr_assert_eq(count_kind(t, "model"), 2 * 4 * 2, "a forward and a backward row per "
                     "worker and iteration");
        cr_assert_eq(count_kind(t, "allreduce"), (cases[c].overlap ? 2u : 1u) * 4 * 2);
        for (size_t r = 0; r < t->nrows; r++) {
            double got = num(t, r, "iteration_seconds");
            cr_assert(close_to(got, want), "case %zu: iteration %.12e, formula %.12e", c, got, want);
            const char *ph = cell(t, r, "phase");
            if (!strcmp(ph, "forward")) {
                cr_expect_eq(num(t, r, "phase_index"), 0);
                cr_expect(close_to(num(t, r, "phase_seconds"), F));
                cr_expect_eq(num(t, r, "sim_start"), 0);
                cr_expect(close_to(num(t, r, "sim_end"), F));
                cr_expect_str_eq(cell(t, r, "phase_seconds_min"), "");
            } else if (!strcmp(ph, "backward")) {
                cr_expect_eq(num(t, r, "phase_index"), 1);
                cr_expect(close_to(num(t, r, "sim_start"), F));
                cr_expect(close_to(num(t, r, "sim_end"), F + B), "the backward row spans its pieces");
            } else if (!strcmp(ph, "bucket1")) {
                cr_expect(close_to(num(t, r, "sim_start"), F + B / 2 + fmax(B / 2, A)));
                cr_expect(num(t, r, "phase_bytes_sent") > 0);
            }
        }
        printf("dense, 2 buckets, overlap %d, backward %g s: iteration %.9e s, formula %.9e s\n",
               cases[c].overlap, B, num(t, 0, "iteration_seconds"), want);
        table_free(t);
    }
}

/* A sparsifier selects after the whole backward pass: with [network] compute = none (its
 * measured phases take no simulated time, the given forward and backward do) its iteration is
 * F + B + the iteration without [compute], to the last digits; the other rows are the same. */
Test(compute, sparsifier_iteration_is_forward_backward_then_its_schedule)
{
    const char *base[] = {"sparsify.methods=topk, deft, gtopk", "network.compute=none"};
    const char *with[] = {"sparsify.methods=topk, deft, gtopk", "network.compute=none",
                          "compute.forward=30ms", "compute.backward=60ms"};
    table *a = run_rows("plain", base, 2), *b = run_rows("with", with, 4);
    cr_assert_eq(b->nrows, a->nrows + 3 * 2 * 4 * 2, "two more rows per worker and iteration");
    cr_assert_eq(count_kind(a, "model"), 0);
    size_t ra = 0;
    for (size_t r = 0; r < b->nrows; r++) {
        if (!strcmp(cell(b, r, "phase_kind"), "model")) continue;
        cr_assert_str_eq(cell(a, ra, "phase"), cell(b, r, "phase"));
        cr_assert_eq(num(a, ra, "phase_index") + 2, num(b, r, "phase_index"));
        double want = 0.09 + num(a, ra, "iteration_seconds");
        cr_assert(close_to(num(b, r, "iteration_seconds"), want), "%s: %.12e vs %.12e",
                  cell(b, r, "method"), num(b, r, "iteration_seconds"), want);
        cr_assert(close_to(num(b, r, "sim_start"), 0.09 + num(a, ra, "sim_start")));
        cr_assert(close_to(num(b, r, "comm_seconds"), num(a, ra, "comm_seconds")));
        ra++;
    }
    cr_assert_eq(ra, a->nrows);
    table_free(a);
    table_free(b);
}

/* A table row: its figures in the rows; a model the table lacks names the file. */
Test(compute, table_row_gives_the_figures)
{
    char path[128], tset[160], bad[400];
    snprintf(path, sizeof path, "%s/times.csv", tmpdir);
    const char *csv = "model,device,batch,forward_ms,backward_ms,source\n"
                      "two,gpu1,16,12.5,25,https://example.org/one\n"
                      "two,gpu2,16,6,11,\"a source, with a comma\"\n";
    cr_assert_eq(deftsim_write_file_atomic(path, csv, strlen(csv)), DEFTSIM_OK);
    snprintf(tset, sizeof tset, "compute.table=%s", path);
    const char *ov[] = {tset, "compute.device=gpu2", "compute.batch=16"};
    table *t = run_rows("table", ov, 3);
    for (size_t r = 0; r < t->nrows; r++) {
        if (!strcmp(cell(t, r, "phase"), "forward")) cr_expect_eq(num(t, r, "phase_seconds"), 6e-3);
        if (!strcmp(cell(t, r, "phase"), "backward")) cr_expect_eq(num(t, r, "phase_seconds"), 11e-3);
    }
    table_free(t);
    /* Without device: two rows match, and the message says which. */
    char text[512];
    snprintf(text, sizeof text, "[gradients]\nmodel = %s/two.csv\n[compute]\ntable = %s\n",
             tmpdir, path);
    deftsim_config *cfg = NULL;
    cr_assert_eq(deftsim_config_parse(text, "t.ini", NULL, 0, &cfg), DEFTSIM_E_INPUT);
    snprintf(bad, sizeof bad, "t.ini:4: [compute] table: 2 rows of %s match model two: "
             "two/gpu1/batch 16 (line 2), two/gpu2/batch 16 (line 3)", path);
    cr_expect(strstr(deftsim_error_message(), bad), "%s", deftsim_error_message());
}

/* Every row shipped in traces/compute.csv selects itself by model, device and batch, gives its
 * own figures, and names a source page: a row a user cannot pick, or one without a source,
 * fails here. */
Test(compute, shipped_table_rows_resolve_with_a_source)
{
    const char *root = getenv("DEFTSIM_SOURCE_ROOT");
    cr_assert(root, "DEFTSIM_SOURCE_ROOT is not set (run the tests through meson test)");
    char path[512], line[2048];
    snprintf(path, sizeof path, "%s/traces/compute.csv", root);
    FILE *f = fopen(path, "r");
    cr_assert(f, "%s: cannot open", path);
    cr_assert(fgets(line, sizeof line, f));
    cr_assert_str_eq(line, "model,device,batch,forward_ms,backward_ms,source\n");
    size_t rows = 0;
    while (fgets(line, sizeof line, f)) {
        cr_assert(!strchr(line, '"'), "traces/compute.csv:%zu: quoted cell", rows + 2);
        char model[64], device[64];
        int batch;
        double fwd, bwd;
        int used = 0;
        cr_assert_eq(sscanf(line, "%63[^,],%63[^,],%d,%lf,%lf,%n", model, device, &batch, &fwd,
                            &bwd, &used),
                     5, "traces/compute.csv:%zu: %s", rows + 2, line);
        const char *source = line + used;
        cr_expect(!strncmp(source, "https://", 8), "traces/compute.csv:%zu: source '%s'",
                  rows + 2, source);
        char text[1024];
        snprintf(text, sizeof text,
                 "[gradients]\nmodel = resnet18_cifar10\n[compute]\ntable = %s\nmodel = %s\n"
                 "device = %s\nbatch = %d\n",
                 path, model, device, batch);
        deftsim_config *cfg = NULL;
        cr_assert_eq(deftsim_config_parse(text, "t.ini", NULL, 0, &cfg), DEFTSIM_OK,
                     "traces/compute.csv:%zu: %s", rows + 2, deftsim_error_message());
        deftsim_compute_times t;
        cr_assert_eq(deftsim_compute_resolve(cfg, "resnet18_cifar10", &t), DEFTSIM_OK, "%s",
                     deftsim_error_message());
        cr_expect(fwd > 0 && bwd > 0, "traces/compute.csv:%zu", rows + 2);
        cr_expect(close_to(t.forward, fwd / 1e3) && close_to(t.backward, bwd / 1e3),
                  "traces/compute.csv:%zu: %g %g", rows + 2, t.forward, t.backward);
        cr_expect(!strncmp(t.source, source, strlen(t.source)) && t.source[0],
                  "traces/compute.csv:%zu: source '%s'", rows + 2, t.source);
        deftsim_config_free(cfg);
        rows++;
    }
    fclose(f);
    cr_expect_geq(rows, 14, "%zu rows", rows);
}
