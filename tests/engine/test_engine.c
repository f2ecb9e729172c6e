/* test_engine.c - the engine and `deftsim run`: a tiny model through every sparsifier, feedback
 * mode and gradient source, checked through the files a user reads (rows.csv, the point files,
 * manifest.json, the .npy dump), plus the memory budget and the command's exit codes. */
#include <criterion/criterion.h>

#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "cli_run.h"
#include "deftsim_config.h"
#include "deftsim_csv.h"
#include "deftsim_engine.h"
#include "deftsim_gen.h"
#include "deftsim_npy.h"
#include "deftsim_sparsify.h"
#include "deftsim_trace.h"
#include "deftsim_util.h"
#include "table.h"

/* ---- fixtures ------------------------------------------------------------------------- */

/* Six tensors, 3210 elements: big enough for every method to select something at d = 0.05
 * (k = 160), small enough for a run of every method in well under a second. */
static const char tiny_csv[] = "index,name,shape,numel\n"
                               "0,conv.weight,16x3x3x3,432\n"
                               "1,conv.bias,16,16\n"
                               "2,fc1.weight,64x32,2048\n"
                               "3,fc1.bias,64,64\n"
                               "4,fc2.weight,10x64,640\n"
                               "5,fc2.bias,10,10\n";
enum { N = 3210, K = 160, ITERS = 2 };
static const char *const all_methods = "deft, topk, topk-ag, cltk, gtopk, dgc, dense, micro, exdyna, "
                                        "lags, randk, hardthr, sidco";

static char tmpdir[64];

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb; (void)flag; (void)ftw;
    return remove(path);
}

static char *in_tmp(const char *name)
{
    char *buf = malloc(512);
    cr_assert(buf);
    snprintf(buf, 512, "%s/%s", tmpdir, name);
    return buf;
}

static void setup(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/deftsim-engine-XXXXXX");
    cr_assert(mkdtemp(tmpdir), "mkdtemp");
    char *model = in_tmp("tiny.csv");
    cr_assert_eq(deftsim_write_file_atomic(model, tiny_csv, strlen(tiny_csv)), DEFTSIM_OK);
    free(model);
}

static void teardown(void) { nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

TestSuite(npy, .init = setup, .fini = teardown);
TestSuite(engine, .init = setup, .fini = teardown);
TestSuite(cli, .init = setup, .fini = teardown);

/* The scenario text of every engine test; overrides change what a test needs. */
static char *scenario_text(const char *out)
{
    char *text = malloc(2048);
    cr_assert(text);
    snprintf(text, 2048,
             "[scenario]\nname = tiny\nseed = 7\niterations = %d\noutput = %s/%s\n"
             "[gradients]\nmodel = %s/tiny.csv\n"
             "[sparsify]\nmethods = %s\ndensities = 0.05\n"
             "[workers]\ncounts = 1..4\n",
             ITERS, tmpdir, out, tmpdir, all_methods);
    return text;
}

static deftsim_config *scenario(const char *out, const char *const *ov, size_t nov)
{
    char *text = scenario_text(out);
    deftsim_config *cfg = NULL;
    deftsim_status st = deftsim_config_parse(text, "tiny.ini", ov, nov, &cfg);
    free(text);
    cr_assert_eq(st, DEFTSIM_OK, "%s", deftsim_error_message());
    return cfg;
}

/* A run with the machine's RAM, or ram bytes of it (0: the machine's). */
/* run_ok_ram's deftsim_run_options.no_resident. */
static int no_resident;

static deftsim_run_summary run_ok_ram(const char *out, const char *dump, const char *const *ov,
                                      size_t nov, uint64_t ram)
{
    deftsim_config *cfg = scenario(out, ov, nov);
    deftsim_run_options opt;
    deftsim_run_options_default(&opt);
    char *dumpdir = dump ? in_tmp(dump) : NULL;
    opt.dump_dir = dumpdir;
    opt.prep_threads = 2;
    opt.ram_bytes = ram;
    opt.no_resident = no_resident;
    deftsim_run_summary sum;
    deftsim_status st = deftsim_run(cfg, &opt, &sum);
    cr_assert_eq(st, DEFTSIM_OK, "%s", deftsim_error_message());
    free(dumpdir);
    deftsim_config_free(cfg);
    return sum;
}

static deftsim_run_summary run_ok(const char *out, const char *dump, const char *const *ov,
                                  size_t nov)
{
    return run_ok_ram(out, dump, ov, nov, 0);
}

/* Columns that hold measured times, or simulated times that start from them: they differ from
 * run to run. */
static int is_timing(const char *name)
{
    static const char *const timing[] = {"phase_seconds", "phase_seconds_min",
                                         "phase_seconds_max", "select_seconds",
                                         "select_seconds_min", "select_seconds_max",
                                         "worker_seconds",
                                         "imbalance_seconds", "prepare_seconds", "step_seconds",
                                         "ref_seconds", "sim_start", "sim_end", "comm_seconds",
                                         "select_critical_seconds", "iteration_seconds"};
    for (size_t i = 0; i < sizeof timing / sizeof timing[0]; i++)
        if (strcmp(name, timing[i]) == 0) return 1;
    return 0;
}

/* Row r of a and row r of b agree on every column except timings and the listed ones. */
static void rows_equal(const table *a, size_t ra, const table *b, size_t rb,
                       const char *const *skip, size_t nskip)
{
    cr_assert_eq(a->ncols, b->ncols);
    for (size_t c = 0; c < a->ncols; c++) {
        const char *name = a->hdr[c];
        int skipped = is_timing(name);
        for (size_t i = 0; i < nskip; i++) skipped |= strcmp(skip[i], name) == 0;
        if (skipped) continue;
        cr_assert_str_eq(a->cell[ra * a->ncols + c], b->cell[rb * b->ncols + c],
                         "row %zu / %zu, column %s (%s, P=%s, iteration %s, worker %s)", ra, rb,
                         name, cell(a, ra, "method"), cell(a, ra, "P"), cell(a, ra, "iteration"),
                         cell(a, ra, "worker"));
    }
}

static int file_exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* ---- .npy and number formatting -------------------------------------------------------- */

Test(npy, round_trip_and_layout)
{
    char *p8 = in_tmp("a.npy"), *pf = in_tmp("b.npy"), *pe = in_tmp("e.npy");
    deftsim_kidx idx[5] = {0, 3, 17, 4000000000u, 9};
    float vals[3] = {1.5f, -0.0f, 3.0e-38f};
    cr_assert_eq(deftsim_npy_write_u32_as_i8(p8, idx, 5), DEFTSIM_OK, "%s", deftsim_error_message());
    cr_assert_eq(deftsim_npy_write(pf, DEFTSIM_NPY_F4, vals, 3), DEFTSIM_OK);
    cr_assert_eq(deftsim_npy_write(pe, DEFTSIM_NPY_F4, NULL, 0), DEFTSIM_OK);

    deftsim_npy_type t;
    void *data;
    uint64_t n;
    cr_assert_eq(deftsim_npy_read(p8, &t, &data, &n), DEFTSIM_OK, "%s", deftsim_error_message());
    cr_assert_eq(t, DEFTSIM_NPY_I8);
    cr_assert_eq(n, 5);
    for (int i = 0; i < 5; i++) cr_assert_eq(((int64_t *)data)[i], (int64_t)idx[i]);
    free(data);
    cr_assert_eq(deftsim_npy_read(pf, &t, &data, &n), DEFTSIM_OK);
    cr_assert_eq(t, DEFTSIM_NPY_F4);
    cr_assert_eq(n, 3);
    cr_assert_eq(memcmp(data, vals, sizeof vals), 0);
    free(data);
    cr_assert_eq(deftsim_npy_read(pe, &t, &data, &n), DEFTSIM_OK);
    cr_assert_eq(n, 0);
    cr_assert_null(data);

    /* The bytes numpy expects: magic, version 1.0, a header padded to 64 with a newline, the
     * data little-endian right after. */
    char *raw;
    size_t len;
    cr_assert_eq(deftsim_read_file(p8, &raw, &len), DEFTSIM_OK);
    cr_assert_eq(memcmp(raw, "\x93NUMPY\x01\x00", 8), 0);
    size_t hlen = (unsigned char)raw[8] | (size_t)(unsigned char)raw[9] << 8;
    cr_assert_eq((10 + hlen) % 64, 0);
    cr_assert_eq(raw[10 + hlen - 1], '\n');
    cr_assert(strstr(raw + 10, "{'descr': '<i8', 'fortran_order': False, 'shape': (5,), }"));
    cr_assert_eq(len, 10 + hlen + 5 * 8);
    const unsigned char *d = (const unsigned char *)raw + 10 + hlen + 3 * 8;
    cr_assert(d[0] == 0x00 && d[1] == 0x28 && d[2] == 0x6B && d[3] == 0xEE && d[4] == 0);
    free(raw);
    free(p8);
    free(pf);
    free(pe);
}

Test(npy, rejects_what_it_cannot_read)
{
    char *p = in_tmp("bad.npy");
    cr_assert_eq(deftsim_write_file_atomic(p, "hello world, not numpy", 22), DEFTSIM_OK);
    deftsim_npy_type t;
    void *data;
    uint64_t n;
    cr_assert_eq(deftsim_npy_read(p, &t, &data, &n), DEFTSIM_E_INPUT);
    cr_assert(strstr(deftsim_error_message(), "bad magic"), "%s", deftsim_error_message());
    /* A truncated body. */
    unsigned char hdr[128];
    size_t h = deftsim_npy_header(DEFTSIM_NPY_F4, 10, hdr, sizeof hdr);
    cr_assert_eq(deftsim_write_file_atomic(p, hdr, h), DEFTSIM_OK);
    cr_assert_eq(deftsim_npy_read(p, &t, &data, &n), DEFTSIM_E_INPUT);
    cr_assert(strstr(deftsim_error_message(), "needs 40 data bytes, the file holds 0"), "%s",
              deftsim_error_message());
    free(p);
}

Test(npy, csv_numbers_round_trip)
{
    char b[64];
    cr_assert_str_eq(deftsim_csv_double(b, sizeof b, 0.1), "0.1");
    cr_assert_str_eq(deftsim_csv_double(b, sizeof b, 0.05), "0.05");
    cr_assert_str_eq(deftsim_csv_double(b, sizeof b, NAN), "");
    cr_assert_str_eq(deftsim_csv_double(b, sizeof b, 1e300 * 1e10), "inf");
    double v = 1.0 / 3.0;
    cr_assert_eq(strtod(deftsim_csv_double(b, sizeof b, v), NULL), v);
    v = 0.1 + 0.2;
    cr_assert_eq(strtod(deftsim_csv_double(b, sizeof b, v), NULL), v);
}

/* ---- the documented columns ------------------------------------------------------------ */

Test(engine, every_column_is_documented)
{
    const char *root = getenv("DEFTSIM_SOURCE_ROOT");
    cr_assert(root, "DEFTSIM_SOURCE_ROOT is not set (run the tests through meson test)");
    char path[1024];
    snprintf(path, sizeof path, "%s/docs/OUTPUT.md", root);
    char *doc;
    size_t len;
    cr_assert_eq(deftsim_read_file(path, &doc, &len), DEFTSIM_OK, "%s", deftsim_error_message());
    for (size_t i = 0; i < deftsim_engine_column_count(); i++) {
        char pat[80];
        snprintf(pat, sizeof pat, "| `%s` |", deftsim_engine_column(i));
        cr_expect(strstr(doc, pat), "docs/OUTPUT.md has no table row for column %s",
                  deftsim_engine_column(i));
    }
    free(doc);
}

/* ---- end to end through the library ---------------------------------------------------- */

/* Rows one (method, P) point writes per iteration: P x (phases + collectives), learnt from a
 * step of the sparsifier itself on generated accumulators. */
typedef struct {
    float **buf;
} direct_prov;

static float *direct_get(void *ctx, uint32_t w) { return ((direct_prov *)ctx)->buf[w]; }

static uint64_t rows_per_iteration(const deftsim_config *cfg, deftsim_method m, uint32_t P)
{
    deftsim_model *model;
    cr_assert_eq(deftsim_model_load(cfg->gradients.model, &model), DEFTSIM_OK);
    deftsim_gen_params gp;
    deftsim_gen_params_default(&gp);
    deftsim_gen *g;
    cr_assert_eq(deftsim_gen_new(model, &gp, &g), DEFTSIM_OK);
    deftsim_kctx *kc;
    cr_assert_eq(deftsim_kctx_new(&kc, "cpu", 1), DEFTSIM_OK);
    direct_prov dp = {calloc(P, sizeof(float *))};
    for (uint32_t w = 0; w < P; w++) {
        dp.buf[w] = malloc(N * sizeof(float));
        cr_assert_eq(deftsim_gen_fill(g, 0, w, 0, N, dp.buf[w]), DEFTSIM_OK);
    }
    deftsim_sparsifier_params p = {.method = m, .density = 0.05, .P = P, .model = model,
                                   .index_bytes = 4, .value_bytes = 4, .seed = 7, .kctx = kc};
    deftsim_sparsifier *s;
    cr_assert_eq(deftsim_sparsifier_new(&p, &s), DEFTSIM_OK, "%s", deftsim_error_message());
    deftsim_acc_provider prov = {.get = direct_get, .ctx = &dp, .persistent = 1};
    deftsim_step_result *r;
    cr_assert_eq(deftsim_sparsifier_step(s, 0, &prov, &r), DEFTSIM_OK, "%s", deftsim_error_message());
    uint64_t per_worker = r->nphases;
    for (size_t i = 0; i < r->schedule.nsteps; i++)
        per_worker += r->schedule.steps[i].kind != DEFTSIM_STEP_COMPUTE;
    if (per_worker == 0) per_worker = 1; /* the engine's row of kind "none" */
    deftsim_sparsifier_free(s);
    for (uint32_t w = 0; w < P; w++) free(dp.buf[w]);
    free(dp.buf);
    deftsim_kctx_free(kc);
    deftsim_gen_free(g);
    deftsim_model_free(model);
    return per_worker * P;
}

/* The first row of (method, P, iteration, worker) in t, or SIZE_MAX. */
static size_t find_row(const table *t, const char *method, unsigned P, unsigned it, unsigned w)
{
    char ps[16], is[16], ws[16];
    snprintf(ps, sizeof ps, "%u", P);
    snprintf(is, sizeof is, "%u", it);
    snprintf(ws, sizeof ws, "%u", w);
    size_t cm = col(t, "method"), cp = col(t, "P"), ci = col(t, "iteration"), cw = col(t, "worker");
    for (size_t r = 0; r < t->nrows; r++) {
        char **row = t->cell + r * t->ncols;
        if (!strcmp(row[cm], method) && !strcmp(row[cp], ps) && !strcmp(row[ci], is) &&
            !strcmp(row[cw], ws))
            return r;
    }
    return SIZE_MAX;
}

static int64_t *load_i8(const char *path, uint64_t *n)
{
    deftsim_npy_type t;
    void *data;
    cr_assert_eq(deftsim_npy_read(path, &t, &data, n), DEFTSIM_OK, "%s", deftsim_error_message());
    cr_assert_eq(t, DEFTSIM_NPY_I8, "%s: not <i8", path);
    return data;
}

/* Every method of the registry is in all_methods or named here with the reason: a method
 * added to the registry fails here until one of the two takes it. */
Test(engine, method_list_covers_the_registry)
{
    static const char *const elsewhere[] = {
        "oktopk",   /* test_engine's oktopk_* tests, with its warm-up set */
        "powersgd", /* tests/sparsify/powersgd_reference.py runs it through deftsim run: at its
                       default start_iter every iteration here would be its allreduce warm-up,
                       which selects nothing (no select_critical_seconds, as dense), and its
                       options have no all-zero block (rank >= 1) for rows_per_iteration */
    };
    for (size_t i = 0; i < deftsim_method_count(); i++) {
        const char *name = deftsim_method_name((deftsim_method)i);
        int found = 0;
        char list[256];
        snprintf(list, sizeof list, "%s", all_methods);
        for (char *save, *t = strtok_r(list, ", ", &save); t; t = strtok_r(NULL, ", ", &save))
            found += !strcmp(t, name);
        for (size_t j = 0; j < sizeof elsewhere / sizeof elsewhere[0]; j++)
            found += !strcmp(elsewhere[j], name);
        cr_expect_eq(found, 1, "%s: in neither all_methods nor elsewhere (or in both)", name);
    }
}

Test(engine, every_method_end_to_end)
{
    deftsim_run_summary sum = run_ok("out", "dump", NULL, 0);
    deftsim_config *cfg = scenario("out", NULL, 0);
    const unsigned Ps[] = {1, 2, 4};
    cr_assert_eq(sum.points, cfg->sparsify.nmethods * 3);

    char *path = in_tmp("out/rows.csv");
    table *t = load_csv(path);
    free(path);
    /* The header is the documented column list. */
    cr_assert_eq(t->ncols, deftsim_engine_column_count());
    for (size_t c = 0; c < t->ncols; c++) cr_assert_str_eq(t->hdr[c], deftsim_engine_column(c));

    /* Row counts: per point, from the sparsifier itself; the point files add up to rows.csv. */
    uint64_t expect = 0;
    for (size_t mi = 0; mi < cfg->sparsify.nmethods; mi++)
        for (size_t pi = 0; pi < 3; pi++) {
            deftsim_method m = cfg->sparsify.methods[mi];
            uint64_t per = rows_per_iteration(cfg, m, Ps[pi]) * ITERS;
            char rel[128];
            snprintf(rel, sizeof rel, "out/points/%s_d0.05_P%u.csv", deftsim_method_name(m), Ps[pi]);
            char *pp = in_tmp(rel);
            table *pt = load_csv(pp);
            cr_assert_eq(pt->nrows, per, "%s: %zu rows, expected %" PRIu64, rel, pt->nrows, per);
            table_free(pt);
            free(pp);
            expect += per;
        }
    cr_assert_eq(t->nrows, expect, "rows.csv: %zu rows, expected %" PRIu64, t->nrows, expect);
    cr_assert_eq(sum.rows, expect);

    for (size_t r = 0; r < t->nrows; r++) {
        cr_assert_str_eq(cell(t, r, "error_feedback"), "full");
        cr_assert_str_eq(cell(t, r, "residual_kept"), "1");
        cr_assert_str_eq(cell(t, r, "backend"), "cpu");
        cr_assert_str_eq(cell(t, r, "model"), "tiny");
        cr_assert_eq(num(t, r, "k"), K);
        cr_assert_eq(num(t, r, "n"), N);
        cr_assert_eq(num(t, r, "seed"), 7);
        double nnz = num(t, r, "nnz");
        cr_assert_eq(num(t, r, "actual_density"), nnz / N);
        cr_assert_eq(num(t, r, "buildup"), nnz / K);
        const char *kind = cell(t, r, "phase_kind");
        if (strcmp(kind, "none") == 0) {
            /* Only for a worker without phases or collectives: dense at P = 1. */
            cr_assert_str_eq(cell(t, r, "method"), "dense");
            cr_assert_eq(num(t, r, "P"), 1);
        } else if (strcmp(kind, "compute") == 0) {
            cr_assert(num(t, r, "phase_seconds") >= 0);
            /* The spread of the timing repetitions ([timing] repeats, docs/TIMING.md). */
            cr_assert(num(t, r, "phase_seconds_min") >= 0);
            cr_assert(num(t, r, "phase_seconds_min") <= num(t, r, "phase_seconds_max"));
            cr_assert_eq(num(t, r, "phase_bytes_sent"), 0);
        } else {
            cr_assert_str_eq(cell(t, r, "phase_seconds"), "", "a collective has no measured time");
            cr_assert_str_eq(cell(t, r, "phase_seconds_min"), "");
            cr_assert_str_eq(cell(t, r, "phase_seconds_max"), "");
            cr_assert_eq(num(t, r, "phase_selection"), 0);
        }
        cr_assert(num(t, r, "select_seconds_min") <= num(t, r, "select_seconds_max"));
        double cap = num(t, r, "captured_frac"), top = num(t, r, "topk_frac");
        cr_assert(cap >= 0 && cap <= 1 + 1e-12 && top > 0 && top <= 1 + 1e-12);
        cr_assert_eq(num(t, r, "captured_ratio"), cap / top);
        if (strcmp(cell(t, r, "method"), "dense") == 0) {
            cr_assert_eq(nnz, N);
            cr_assert_float_eq(cap, 1.0, 1e-12);
        }
        /* One worker: its top-k of acc is the exact top-k of the average. */
        if (strcmp(cell(t, r, "method"), "topk") == 0 && num(t, r, "P") == 1)
            cr_assert_eq(cap, top);
        /* The count-control columns: MiCRO's and ExDyna's (|U| = K, the counts summed), the
         * threshold methods' (|U| <= K: their workers' picks may overlap); stages: SIDCo's. */
        const char *meth = cell(t, r, "method");
        int thr_method = !strcmp(meth, "hardthr") || !strcmp(meth, "sidco");
        if (!strcmp(meth, "sidco"))
            cr_assert(num(t, r, "stages") >= 1);
        else
            cr_assert_str_eq(cell(t, r, "stages"), "");
        if (thr_method) {
            cr_assert(num(t, r, "count_ratio") >= nnz / K);
            cr_assert(num(t, r, "threshold") > 0);
            double pad = num(t, r, "pad_overhead");
            cr_assert(pad >= 0 && pad <= num(t, r, "P") - 1);
            if (num(t, r, "P") == 1) cr_assert_eq(pad, 0);
        } else if (!strcmp(meth, "micro") || !strcmp(meth, "exdyna")) {
            cr_assert_eq(num(t, r, "count_ratio"), nnz / K);
            cr_assert(num(t, r, "threshold") > 0);
            if (num(t, r, "iteration") == 0)
                cr_assert_eq(num(t, r, "threshold"), 1.0 / (2.0 * sqrt((double)K)));
            double pad = num(t, r, "pad_overhead");
            cr_assert(pad >= 0 && pad <= num(t, r, "P") - 1);
            if (num(t, r, "P") == 1) cr_assert_eq(pad, 0);
        } else {
            cr_assert_str_eq(cell(t, r, "count_ratio"), "");
            cr_assert_str_eq(cell(t, r, "threshold"), "");
            cr_assert_str_eq(cell(t, r, "pad_overhead"), "");
        }
    }

    /* Per worker, the collectives' bytes add up to its totals. */
    for (size_t mi = 0; mi < cfg->sparsify.nmethods; mi++)
        for (size_t pi = 0; pi < 3; pi++)
            for (unsigned w = 0; w < Ps[pi]; w++) {
                const char *mname = deftsim_method_name(cfg->sparsify.methods[mi]);
                size_t r0 = find_row(t, mname, Ps[pi], 0, w);
                cr_assert_neq(r0, SIZE_MAX);
                double sent = 0, recv = 0;
                for (size_t r = r0; r < t->nrows && !strcmp(cell(t, r, "worker"), cell(t, r0, "worker")) &&
                                    !strcmp(cell(t, r, "iteration"), "0");
                     r++) {
                    sent += num(t, r, "phase_bytes_sent");
                    recv += num(t, r, "phase_bytes_recv");
                }
                cr_expect_eq(sent, num(t, r0, "bytes_sent"), "%s P=%u worker %u", mname, Ps[pi], w);
                cr_expect_eq(recv, num(t, r0, "bytes_recv"), "%s P=%u worker %u", mname, Ps[pi], w);
            }

    /* The dump: sorted int64 selections of local_count each, union and values of nnz. */
    for (size_t mi = 0; mi < cfg->sparsify.nmethods; mi++) {
        const char *mname = deftsim_method_name(cfg->sparsify.methods[mi]);
        for (size_t pi = 0; pi < 3; pi++)
            for (unsigned it = 0; it < ITERS; it++) {
                unsigned P = Ps[pi];
                char rel[256];
                snprintf(rel, sizeof rel, "dump/%s/d0.05/P%u/it%u/union.npy", mname, P, it);
                char *up = in_tmp(rel);
                uint64_t nu;
                int64_t *u = load_i8(up, &nu);
                free(up);
                size_t r0 = find_row(t, mname, P, it, 0);
                cr_assert_eq((double)nu, num(t, r0, "nnz"), "%s", rel);
                for (uint64_t i = 1; i < nu; i++) cr_assert_lt(u[i - 1], u[i], "%s: not sorted", rel);
                snprintf(rel, sizeof rel, "dump/%s/d0.05/P%u/it%u/values.npy", mname, P, it);
                char *vp = in_tmp(rel);
                deftsim_npy_type vt;
                void *vals;
                uint64_t nv;
                cr_assert_eq(deftsim_npy_read(vp, &vt, &vals, &nv), DEFTSIM_OK);
                cr_assert_eq(vt, DEFTSIM_NPY_F4);
                cr_assert_eq(nv, nu);
                free(vals);
                free(vp);
                /* DEFT's workers select in disjoint fragments. */
                unsigned char *seen = calloc(N, 1);
                for (unsigned w = 0; w < P; w++) {
                    snprintf(rel, sizeof rel, "dump/%s/d0.05/P%u/it%u/worker%u.npy", mname, P, it, w);
                    char *wp = in_tmp(rel);
                    uint64_t nw;
                    int64_t *sel = load_i8(wp, &nw);
                    free(wp);
                    size_t rw = find_row(t, mname, P, it, w);
                    cr_assert_eq((double)nw, num(t, rw, "local_count"), "%s", rel);
                    for (uint64_t i = 0; i < nw; i++) {
                        cr_assert(sel[i] >= 0 && sel[i] < N);
                        if (i) cr_assert_lt(sel[i - 1], sel[i], "%s: not sorted", rel);
                        if (strcmp(mname, "deft") == 0)
                            cr_assert_eq(seen[sel[i]], 0, "%s: index %" PRId64 " also picked by another worker",
                                         rel, sel[i]);
                        seen[sel[i]] = 1;
                    }
                    free(sel);
                }
                /* Top-k's union is exactly the union of the workers' picks. */
                if (strcmp(mname, "topk") == 0) {
                    uint64_t count = 0;
                    for (size_t i = 0; i < N; i++) count += seen[i];
                    cr_assert_eq(count, nu);
                    for (uint64_t i = 0; i < nu; i++) cr_assert(seen[u[i]]);
                }
                free(seen);
                free(u);
            }
    }
    table_free(t);

    /* The manifest. */
    char *mp = in_tmp("out/manifest.json");
    json_error_t jerr;
    json_t *man = json_load_file(mp, 0, &jerr);
    free(mp);
    cr_assert(man, "manifest.json: %s", jerr.text);
    cr_assert_str_eq(json_string_value(json_object_get(man, "status")), "complete");
    cr_assert_eq(json_integer_value(json_object_get(man, "seed")), 7);
    json_t *c = json_object_get(man, "config");
    cr_assert_eq(json_integer_value(json_object_get(json_object_get(c, "scenario"), "seed")), 7);
    /* Which generator parameter set ran and why: a CSV table has no set of its own. */
    json_t *pu = json_object_get(json_object_get(c, "gradients"), "params_used");
    cr_assert(json_is_null(json_object_get(pu, "set")));
    cr_assert_str_eq(json_string_value(json_object_get(pu, "why")),
                     "none: no default set for the table");
    cr_assert_str_eq(json_string_value(json_object_get(json_object_get(man, "deftsim"), "version")),
                     DEFTSIM_VERSION);
    cr_assert(json_string_value(json_object_get(json_object_get(man, "deftsim"), "git_commit")));
    json_t *mach = json_object_get(man, "machine");
    cr_assert(json_integer_value(json_object_get(mach, "ram_bytes")) > 0);
    cr_assert(json_integer_value(json_object_get(mach, "cpus_online")) > 0);
    cr_assert(json_string_value(json_object_get(mach, "cpu_model")));
    cr_assert_str_eq(json_string_value(json_object_get(json_object_get(man, "kernels"), "backend")),
                     "cpu");
    cr_assert_eq(json_array_size(json_object_get(man, "points")), sum.points);
    cr_assert(json_string_value(json_object_get(man, "started")));
    cr_assert(json_string_value(json_object_get(man, "finished")));
    json_decref(man);
    deftsim_config_free(cfg);
}

/* Every file of dir a equals the same file of dir b, byte for byte. */
static const char *cmp_root_a, *cmp_root_b;
static size_t cmp_files;

static int cmp_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb; (void)ftw;
    if (flag != FTW_F) return 0;
    char other[1024];
    snprintf(other, sizeof other, "%s%s", cmp_root_b, path + strlen(cmp_root_a));
    char *x, *y;
    size_t lx, ly;
    cr_assert_eq(deftsim_read_file(path, &x, &lx), DEFTSIM_OK);
    cr_assert_eq(deftsim_read_file(other, &y, &ly), DEFTSIM_OK, "%s", deftsim_error_message());
    cr_assert(lx == ly && memcmp(x, y, lx) == 0, "%s and %s differ", path, other);
    free(x);
    free(y);
    cmp_files++;
    return 0;
}

/* The dumps in tmp's folders a and b hold the same files, byte for byte, more than least. */
static void dumps_equal(const char *a, const char *b, size_t least)
{
    char *da = in_tmp(a), *db = in_tmp(b);
    cmp_root_a = da;
    cmp_root_b = db;
    cmp_files = 0;
    nftw(da, cmp_entry, 16, FTW_PHYS);
    cr_assert_gt(cmp_files, least);
    free(da);
    free(db);
}

Test(engine, same_seed_same_selections_and_bytes)
{
    run_ok("a", "dump_a", NULL, 0);
    run_ok("b", "dump_b", NULL, 0);
    char *pa = in_tmp("a/rows.csv"), *pb = in_tmp("b/rows.csv");
    table *a = load_csv(pa), *b = load_csv(pb);
    cr_assert_eq(a->nrows, b->nrows);
    for (size_t r = 0; r < a->nrows; r++) rows_equal(a, r, b, r, NULL, 0);
    table_free(a);
    table_free(b);
    free(pa);
    free(pb);
    dumps_equal("dump_a", "dump_b", 100);

    /* Another seed gives other selections. */
    const char *ov[] = {"scenario.seed=8"};
    run_ok("c", NULL, ov, 1);
    pa = in_tmp("a/rows.csv");
    char *pc = in_tmp("c/rows.csv");
    a = load_csv(pa);
    table *c = load_csv(pc);
    int differ = 0;
    for (size_t r = 0; r < a->nrows && !differ; r++)
        differ = strcmp(cell(a, r, "acc_norm2"), cell(c, r, "acc_norm2")) != 0;
    cr_assert(differ, "seed 8 gave the gradients of seed 7");
    table_free(a);
    table_free(c);
    free(pa);
    free(pc);
}

/* A run killed before committing leaves "<file>.tmp.<pid>"; the next run into the folder
 * removes those of writers that are gone and keeps those of a live one. */
Test(engine, a_rerun_removes_a_killed_runs_temporary_files)
{
    pid_t dead = fork();
    cr_assert_geq(dead, 0);
    if (dead == 0) _exit(0);
    cr_assert_eq(waitpid(dead, NULL, 0), dead);
    char *pts = in_tmp("a/points"), *plat = in_tmp("a/platforms");
    cr_assert_eq(deftsim_mkdir_p(pts), DEFTSIM_OK);
    cr_assert_eq(deftsim_mkdir_p(plat), DEFTSIM_OK);
    char orphan[3][600], live[600];
    snprintf(orphan[0], sizeof orphan[0], "%s/a/manifest.json.tmp.%ld", tmpdir, (long)dead);
    snprintf(orphan[1], sizeof orphan[1], "%s/topk_d0.05_P2.csv.tmp.%ld", pts, (long)dead);
    snprintf(orphan[2], sizeof orphan[2], "%s/P4.xml.tmp.%ld", plat, (long)dead);
    snprintf(live, sizeof live, "%s/rows.csv.tmp.%ld", pts, (long)getppid());
    for (int i = 0; i < 3; i++)
        cr_assert_eq(deftsim_write_file_atomic(orphan[i], "half", 4), DEFTSIM_OK);
    cr_assert_eq(deftsim_write_file_atomic(live, "half", 4), DEFTSIM_OK);
    const char *ov[] = {"sparsify.methods=topk", "workers.counts=2"};
    run_ok("a", NULL, ov, 2);
    for (int i = 0; i < 3; i++) cr_assert(!file_exists(orphan[i]), "%s is left", orphan[i]);
    cr_assert(file_exists(live), "a live writer's %s was removed", live);
    free(pts);
    free(plat);
}

/* ---- bounded-memory modes -------------------------------------------------------------- */

Test(engine, feedback_none_and_sampled_are_named_in_every_row)
{
    const char *none[] = {"sparsify.error_feedback=none"};
    run_ok("none", NULL, none, 1);
    const char *sampled[] = {"sparsify.error_feedback=sampled", "sparsify.sampled_workers=1"};
    run_ok("sampled", NULL, sampled, 2);
    run_ok("full", NULL, NULL, 0);

    char *pn = in_tmp("none/rows.csv"), *ps = in_tmp("sampled/rows.csv"), *pf = in_tmp("full/rows.csv");
    table *tn = load_csv(pn), *ts = load_csv(ps), *tf = load_csv(pf);
    cr_assert_eq(tn->nrows, tf->nrows);
    cr_assert_eq(ts->nrows, tf->nrows);
    const char *skip[] = {"error_feedback", "sampled_workers", "residual_kept"};
    size_t changed = 0;
    for (size_t r = 0; r < tn->nrows; r++) {
        cr_assert_str_eq(cell(tn, r, "error_feedback"), "none");
        cr_assert_str_eq(cell(tn, r, "sampled_workers"), "0");
        cr_assert_str_eq(cell(tn, r, "residual_kept"), "0");
        cr_assert_str_eq(cell(ts, r, "error_feedback"), "sampled");
        cr_assert_str_eq(cell(ts, r, "sampled_workers"), "1");
        cr_assert_str_eq(cell(ts, r, "residual_kept"),
                         strcmp(cell(ts, r, "worker"), "0") == 0 ? "1" : "0");
        /* Residuals start at zero: the first iteration is the same in every mode. */
        if (strcmp(cell(tn, r, "iteration"), "0") == 0) {
            rows_equal(tn, r, tf, r, skip, 3);
            rows_equal(ts, r, tf, r, skip, 3);
        } else {
            changed += strcmp(cell(tn, r, "acc_norm2"), cell(tf, r, "acc_norm2")) != 0;
        }
    }
    cr_assert_gt(changed, 0, "dropping the residuals changed nothing at iteration 1");
    table_free(tn);
    table_free(ts);
    table_free(tf);
    free(pn);
    free(ps);
    free(pf);
}

/* Sampled feedback with every worker sampled goes through the regenerating provider (one
 * accumulator valid at a time) but keeps every residual: it must reproduce full feedback. */
Test(engine, sampled_with_every_worker_equals_full)
{
    const char *ov[] = {"sparsify.error_feedback=sampled", "sparsify.sampled_workers=4"};
    run_ok("sampled", "dump_s", ov, 2);
    run_ok("full", "dump_f", NULL, 0);
    char *ps = in_tmp("sampled/rows.csv"), *pf = in_tmp("full/rows.csv");
    table *ts = load_csv(ps), *tf = load_csv(pf);
    cr_assert_eq(ts->nrows, tf->nrows);
    const char *skip[] = {"error_feedback", "sampled_workers"};
    for (size_t r = 0; r < ts->nrows; r++) rows_equal(ts, r, tf, r, skip, 2);
    table_free(ts);
    table_free(tf);
    free(ps);
    free(pf);
    dumps_equal("dump_s", "dump_f", 100);
}

/* [sparsify] deft_norms: the fused norms (computed by the engine's accumulate pass) and the
 * separate pass give the same rows and selections, with full and with sampled feedback (the
 * regenerating provider); the norms phase is 0 under fused and measured under separate. */
Test(engine, deft_norms_fused_equals_separate)
{
    static const char *const fb[][2] = {{"sparsify.error_feedback=full", "sparsify.sampled_workers=8"},
                                        {"sparsify.error_feedback=sampled", "sparsify.sampled_workers=1"}};
    for (int f = 0; f < 2; f++) {
        const char *fu[] = {fb[f][0], fb[f][1], "sparsify.deft_norms=fused"};
        const char *se[] = {fb[f][0], fb[f][1], "sparsify.deft_norms=separate"};
        char o1[32], o2[32], d1[32], d2[32];
        snprintf(o1, sizeof o1, "fused%d", f);
        snprintf(o2, sizeof o2, "separate%d", f);
        snprintf(d1, sizeof d1, "dump_fused%d", f);
        snprintf(d2, sizeof d2, "dump_separate%d", f);
        run_ok(o1, d1, fu, 3);
        run_ok(o2, d2, se, 3);
        char r1[64], r2[64];
        snprintf(r1, sizeof r1, "%s/rows.csv", o1);
        snprintf(r2, sizeof r2, "%s/rows.csv", o2);
        char *p1 = in_tmp(r1), *p2 = in_tmp(r2);
        table *a = load_csv(p1), *b = load_csv(p2);
        cr_assert_eq(a->nrows, b->nrows);
        size_t deft_norm_rows = 0;
        for (size_t r = 0; r < a->nrows; r++) {
            rows_equal(a, r, b, r, NULL, 0);
            if (strcmp(cell(a, r, "method"), "deft") == 0 && strcmp(cell(a, r, "phase"), "norms") == 0) {
                cr_assert_eq(strtod(cell(a, r, "phase_seconds"), NULL), 0.0, "fused: norms phase %s",
                             cell(a, r, "phase_seconds"));
                cr_assert_gt(strtod(cell(b, r, "phase_seconds"), NULL), 0.0);
                deft_norm_rows++;
            }
        }
        cr_assert_gt(deft_norm_rows, 0);
        table_free(a);
        table_free(b);
        free(p1);
        free(p2);
        dumps_equal(d1, d2, 10);
    }
}

/* ---- memory budget --------------------------------------------------------------------- */

static deftsim_engine *engine_with(const char *const *ov, size_t nov, uint64_t ram)
{
    deftsim_config *cfg = scenario("mem", ov, nov);
    deftsim_run_options opt;
    deftsim_run_options_default(&opt);
    opt.ram_bytes = ram;
    opt.prep_threads = 1;
    deftsim_engine *e;
    cr_assert_eq(deftsim_engine_new(cfg, &opt, &e), DEFTSIM_OK, "%s", deftsim_error_message());
    deftsim_config_free(cfg);
    return e;
}

Test(engine, memory_budget_refusal_names_the_largest_p)
{
    const char *ov[] = {"workers.counts=1..64"};
    deftsim_engine *e = engine_with(ov, 1, 1ull << 40);
    const deftsim_memory_plan *pl = deftsim_engine_memory(e);
    cr_assert_eq(pl->ncounts, 7);
    cr_assert_eq(pl->rows[6].P, 64);
    for (size_t i = 0; i < pl->ncounts; i++) {
        const deftsim_memory_row *r = &pl->rows[i];
        cr_assert_geq(r->residual_bytes, (uint64_t)r->P * N * 4, "full feedback keeps P residuals");
        cr_assert_eq(r->bytes, r->residual_bytes + r->sparsifier_bytes + r->engine_bytes);
        if (i) cr_assert_gt(r->bytes, pl->rows[i - 1].bytes);
    }
    uint64_t b16 = pl->rows[4].bytes, b32 = pl->rows[5].bytes;
    deftsim_engine_free(e);

    /* A RAM whose 80 percent lies between what P = 16 and P = 32 need. */
    uint64_t ram = (uint64_t)((double)(b16 + b32) / 2 / 0.8);
    e = engine_with(ov, 1, ram);
    pl = deftsim_engine_memory(e);
    uint32_t L = pl->largest_fit;
    cr_assert(L >= 16 && L < 32, "largest fit %u", L);
    cr_assert(pl->rows[4].fits && !pl->rows[5].fits);
    cr_assert_eq(deftsim_engine_check_memory(e), DEFTSIM_E_INPUT);
    const char *msg = deftsim_error_message();
    char want[200];
    snprintf(want, sizeof want, "the largest P that fits is %u; set [sparsify] error_feedback = "
                                "none or sampled for larger P", L);
    cr_assert(strstr(msg, "workers.counts: P = 32 needs "), "%s", msg);
    cr_assert(strstr(msg, "with error_feedback = full, over the memory budget of "), "%s", msg);
    cr_assert(strstr(msg, "(0.8 of "), "%s", msg);
    cr_assert(strstr(msg, want), "%s", msg);
    /* The run refuses before it writes anything. */
    deftsim_run_summary sum;
    cr_assert_eq(deftsim_engine_run(e, &sum), DEFTSIM_E_INPUT);
    char *out = in_tmp("mem");
    cr_assert_not(file_exists(out), "a refused run created its output folder");
    free(out);
    deftsim_engine_free(e);

    /* L fits, L + 1 does not. */
    char cl[64], cl1[64];
    snprintf(cl, sizeof cl, "workers.counts=%u", L);
    snprintf(cl1, sizeof cl1, "workers.counts=%u", L + 1);
    const char *ovl[] = {cl}, *ovl1[] = {cl1};
    e = engine_with(ovl, 1, ram);
    cr_assert_eq(deftsim_engine_check_memory(e), DEFTSIM_OK, "%s", deftsim_error_message());
    deftsim_engine_free(e);
    e = engine_with(ovl1, 1, ram);
    cr_assert_eq(deftsim_engine_check_memory(e), DEFTSIM_E_INPUT);
    deftsim_engine_free(e);

    /* Without feedback the accumulators take the regeneration slots: one buffer of n floats
     * per worker up to 8 (accum.c regenerates 8 at a time where they fit), so everything
     * fits. */
    const char *ovn[] = {"workers.counts=1..64", "sparsify.error_feedback=none"};
    e = engine_with(ovn, 2, ram);
    pl = deftsim_engine_memory(e);
    for (size_t i = 0; i < pl->ncounts; i++) {
        uint32_t slots = pl->rows[i].P < 8 ? pl->rows[i].P : 8;
        cr_assert_eq(pl->rows[i].regen_slots, slots, "P = %u", pl->rows[i].P);
        cr_assert_eq(pl->rows[i].residual_bytes, (uint64_t)slots * N * 4, "P = %u", pl->rows[i].P);
    }
    cr_assert_eq(deftsim_engine_check_memory(e), DEFTSIM_OK, "%s", deftsim_error_message());
    deftsim_engine_free(e);

    /* Sampled: S residuals plus the slots of the P - S others (P = 1, 2, 4, ..., 64). */
    const char *ovs[] = {"workers.counts=1..64", "sparsify.error_feedback=sampled",
                         "sparsify.sampled_workers=2"};
    e = engine_with(ovs, 3, ram);
    pl = deftsim_engine_memory(e);
    cr_assert_eq(pl->rows[0].residual_bytes, (uint64_t)N * 4);
    cr_assert_eq(pl->rows[1].residual_bytes, (uint64_t)2 * N * 4);
    cr_assert_eq(pl->rows[2].residual_bytes, (uint64_t)4 * N * 4);
    cr_assert_eq(pl->rows[6].residual_bytes, (uint64_t)(2 + 8) * N * 4);
    cr_assert_eq(pl->rows[6].regen_slots, 8);
    deftsim_engine_free(e);

    /* Where the 7 more buffers do not fit beside the rest, one slot: what fitted before. */
    const char *ov64[] = {"workers.counts=64", "sparsify.error_feedback=none"};
    e = engine_with(ov64, 2, ram);
    uint64_t one = deftsim_engine_memory(e)->rows[0].bytes - (uint64_t)7 * N * 4;
    double frac = deftsim_engine_memory(e)->budget_fraction;
    deftsim_engine_free(e);
    e = engine_with(ov64, 2, (uint64_t)((double)(one + 3 * N * 4) / frac));
    pl = deftsim_engine_memory(e);
    cr_assert_eq(pl->rows[0].regen_slots, 1);
    cr_assert_eq(pl->rows[0].bytes, one);
    cr_assert(pl->rows[0].fits);
    deftsim_engine_free(e);

    /* [engine] regen_slots caps them. */
    const char *ov3[] = {"workers.counts=64", "sparsify.error_feedback=none", "engine.regen_slots=3"};
    e = engine_with(ov3, 3, 1ull << 40);
    pl = deftsim_engine_memory(e);
    cr_assert_eq(pl->rows[0].regen_slots, 3);
    cr_assert_eq(pl->rows[0].residual_bytes, (uint64_t)3 * N * 4);
    deftsim_engine_free(e);
}

/* Workers without a residual are kept resident for the iteration where memory allows, and
 * otherwise regenerated 8 at a time where memory allows (accum.c's
 * slots) and one at a time where it does not: the rows and every dumped selection and
 * accumulator are the same either way, for every method, with no feedback and with sampled
 * feedback, with DEFT's fused and separate norm passes. P = 13 with one residual: a worker
 * alone, then blocks of 8 and 4. Without feedback the run with residents also keeps the
 * iterations' averages from the first point for the others (the slot runs do not). */
Test(engine, regeneration_slots_change_nothing)
{
    static const char *const mode[][3] = {
        {"sparsify.error_feedback=none", "sparsify.sampled_workers=8", "sparsify.deft_norms=fused"},
        {"sparsify.error_feedback=sampled", "sparsify.sampled_workers=1",
         "sparsify.deft_norms=separate"},
        {"sparsify.error_feedback=sampled", "sparsify.sampled_workers=1",
         "sparsify.deft_norms=fused"}};
    for (int m = 0; m < 3; m++) {
        /* d = 0.002 (k = 6): DEFT's, MiCRO's and Random-k's gathers read so few entries that
         * the slots are filled there only (accum.c's reads_at), Top-k's union still most. */
        const char *ov[] = {"workers.counts=13", mode[m][0], mode[m][1], mode[m][2],
                            "timing.repeats=2", "sparsify.densities=0.05, 0.002"};
        /* The plans of the runs below (2 preparation threads, a dump). */
        deftsim_config *cfg = scenario("plan", ov, 6);
        deftsim_run_options opt;
        deftsim_run_options_default(&opt);
        opt.prep_threads = 2;
        opt.dump_dir = "unused";
        opt.ram_bytes = 1ull << 40;
        deftsim_engine *e;
        cr_assert_eq(deftsim_engine_new(cfg, &opt, &e), DEFTSIM_OK, "%s", deftsim_error_message());
        const deftsim_memory_plan *pl = deftsim_engine_memory(e);
        cr_assert_eq(pl->rows[0].regen_slots, 8);
        uint64_t one = pl->rows[0].bytes - (uint64_t)7 * N * 4;
        uint64_t ram = (uint64_t)((double)(one + N * 4) / pl->budget_fraction);
        deftsim_engine_free(e);
        opt.ram_bytes = ram;
        cr_assert_eq(deftsim_engine_new(cfg, &opt, &e), DEFTSIM_OK, "%s", deftsim_error_message());
        cr_assert_eq(deftsim_engine_memory(e)->rows[0].regen_slots, 1);
        deftsim_engine_free(e);
        deftsim_config_free(cfg);

        char o8[32], o1[32], d8[32], d1[32];
        snprintf(o8, sizeof o8, "slots8_%d", m);
        snprintf(o1, sizeof o1, "slots1_%d", m);
        snprintf(d8, sizeof d8, "dump_slots8_%d", m);
        snprintf(d1, sizeof d1, "dump_slots1_%d", m);
        /* The slots alone (no resident accumulators), then every untracked worker resident. */
        no_resident = 1;
        run_ok_ram(o8, d8, ov, 6, 1ull << 40);
        run_ok_ram(o1, d1, ov, 6, ram);
        no_resident = 0;
        char oR[32], dR[32];
        snprintf(oR, sizeof oR, "resident_%d", m);
        snprintf(dR, sizeof dR, "dump_resident_%d", m);
        run_ok_ram(oR, dR, ov, 6, 1ull << 40);
        char r8[64], r1[64];
        snprintf(r8, sizeof r8, "%s/rows.csv", o8);
        snprintf(r1, sizeof r1, "%s/rows.csv", o1);
        char *p8 = in_tmp(r8), *p1 = in_tmp(r1);
        table *a = load_csv(p8), *b = load_csv(p1);
        cr_assert_eq(a->nrows, b->nrows);
        cr_assert_gt(a->nrows, 13 * 9);
        for (size_t r = 0; r < a->nrows; r++) rows_equal(a, r, b, r, NULL, 0);
        table_free(b);
        free(p1);
        dumps_equal(d8, d1, 100);
        char rR[64];
        snprintf(rR, sizeof rR, "%s/rows.csv", oR);
        char *pR = in_tmp(rR);
        b = load_csv(pR);
        cr_assert_eq(a->nrows, b->nrows);
        for (size_t r = 0; r < a->nrows; r++) rows_equal(a, r, b, r, NULL, 0);
        table_free(a);
        table_free(b);
        free(p8);
        free(pR);
        dumps_equal(d8, dR, 100);
    }
}

/* A timing repetition hands a regeneration slot out in place (deftsim_timing_set_scratch):
 * whatever the step writes there must not reach a later repetition. P = 9 with one tracked
 * worker and no resident accumulator: the 8 slots hold every other worker all iteration, so a
 * slot the repetitions wrote and did not forget would be read again. With repeats = 3 the
 * rows and dumps are those of repeats = 1, for every method. */
Test(engine, timing_repetitions_leave_the_slots_unwritten)
{
    const char *ov1[] = {"workers.counts=9", "sparsify.error_feedback=sampled",
                         "sparsify.sampled_workers=1", "timing.repeats=1"};
    const char *ov3[] = {"workers.counts=9", "sparsify.error_feedback=sampled",
                         "sparsify.sampled_workers=1", "timing.repeats=3"};
    no_resident = 1;
    run_ok_ram("inplace_r1", "dump_inplace_r1", ov1, 4, 1ull << 40);
    run_ok_ram("inplace_r3", "dump_inplace_r3", ov3, 4, 1ull << 40);
    no_resident = 0;
    char *p1 = in_tmp("inplace_r1/rows.csv"), *p3 = in_tmp("inplace_r3/rows.csv");
    table *a = load_csv(p1), *b = load_csv(p3);
    cr_assert_eq(a->nrows, b->nrows);
    cr_assert_gt(a->nrows, 9 * 9);
    for (size_t r = 0; r < a->nrows; r++) rows_equal(a, r, b, r, NULL, 0);
    table_free(a);
    table_free(b);
    free(p1);
    free(p3);
    dumps_equal("dump_inplace_r1", "dump_inplace_r3", 100);
}

Test(engine, cuda_is_refused_with_the_reason)
{
    const char *ov[] = {"device.kind=cuda"};
    deftsim_config *cfg = scenario("cuda", ov, 1);
    deftsim_engine *e;
    deftsim_status st = deftsim_engine_new(cfg, NULL, &e);
    const char *why = deftsim_kernels_backend_unavailable("cuda-staged");
    if (!why) {
        /* A CUDA build on a machine with a device: the engine runs the kernels there. */
        cr_assert_eq(st, DEFTSIM_OK, "%s", deftsim_error_message());
        deftsim_engine_free(e);
        deftsim_config_free(cfg);
        return;
    }
    /* No CUDA in this build, or no usable device: refused, and the message says which case it
     * is and why. */
    char reason[256];
    snprintf(reason, sizeof reason, "%s", why);
    /* An input error (exit 2): the user fixes it by setting kind = cpu. */
    cr_assert_eq(st, DEFTSIM_E_INPUT, "%s", deftsim_error_message());
    cr_assert(strstr(deftsim_error_message(), "kind = cuda: "), "%s", deftsim_error_message());
    cr_assert(strstr(deftsim_error_message(), "set kind = cpu"), "%s", deftsim_error_message());
    if (deftsim_kernels_backend_count() > 1) {
        cr_assert(strstr(deftsim_error_message(), "no usable GPU was found: "), "%s",
                  deftsim_error_message());
        cr_assert(strstr(deftsim_error_message(), reason), "%s | %s", deftsim_error_message(),
                  reason);
    }
    else
        cr_assert(strstr(deftsim_error_message(), "no CUDA kernel backend"), "%s",
                  deftsim_error_message());
    deftsim_config_free(cfg);
}

/* ---- a trace as the gradient source ----------------------------------------------------- */

/* A trace holding what the generator makes for the scenario with overrides ov. */
static void write_trace_like_generator(const char *dir, uint32_t workers, uint64_t iterations,
                                       const char *const *ov, size_t nov)
{
    deftsim_config *cfg = scenario("unused", ov, nov);
    deftsim_model *m;
    cr_assert_eq(deftsim_model_load(cfg->gradients.model, &m), DEFTSIM_OK);
    deftsim_gen_params gp;
    deftsim_gen_params_default(&gp);
    gp.seed = cfg->scenario.seed;
    gp.scale_decades = cfg->synthetic.scale_decades;
    gp.signal = cfg->synthetic.signal;
    gp.tail = cfg->synthetic.tail;
    gp.drift = cfg->synthetic.drift;
    gp.bias_shift = cfg->synthetic.bias_shift;
    deftsim_gen *g;
    cr_assert_eq(deftsim_gen_new(m, &gp, &g), DEFTSIM_OK);
    cr_assert_eq(deftsim_gen_write_trace(g, dir, workers, iterations), DEFTSIM_OK, "%s",
                 deftsim_error_message());
    deftsim_gen_free(g);
    deftsim_model_free(m);
    deftsim_config_free(cfg);
}

Test(engine, trace_source_reproduces_the_generator)
{
    char *tdir = in_tmp("trace");
    /* Generator settings away from their defaults: the engine must pass each one on. */
    const char *gen_ov[] = {"synthetic.bias_shift=2", "synthetic.signal=0.8",
                            "synthetic.scale_decades=1.5", "synthetic.tail=0", "synthetic.drift=0.05"};
    write_trace_like_generator(tdir, 4, ITERS, gen_ov, 5);
    char set_src[600];
    snprintf(set_src, sizeof set_src, "gradients.trace=%s", tdir);
    const char *ov[] = {"gradients.model=", "gradients.source=trace", set_src};
    run_ok("from_trace", "dump_t", ov, 3);
    run_ok("synthetic", "dump_g", gen_ov, 5);
    char *pt = in_tmp("from_trace/rows.csv"), *pg = in_tmp("synthetic/rows.csv");
    table *tt = load_csv(pt), *tg = load_csv(pg);
    cr_assert_eq(tt->nrows, tg->nrows);
    const char *skip[] = {"source", "model"};
    for (size_t r = 0; r < tt->nrows; r++) {
        cr_assert_str_eq(cell(tt, r, "source"), "trace");
        rows_equal(tt, r, tg, r, skip, 2);
    }
    table_free(tt);
    table_free(tg);
    free(pt);
    free(pg);
    dumps_equal("dump_t", "dump_g", 100);

    /* More workers than the trace holds, more iterations than it holds. */
    const char *ov8[] = {"gradients.model=", "gradients.source=trace", set_src, "workers.counts=2, 8"};
    deftsim_config *cfg = scenario("x", ov8, 4);
    deftsim_engine *e;
    cr_assert_eq(deftsim_engine_new(cfg, NULL, &e), DEFTSIM_E_INPUT);
    /* Named where the count came from: here an override (a file's key gives "FILE:LINE:
     * [workers] counts", tests/badinput). */
    char want[900];
    snprintf(want, sizeof want,
             "--set workers.counts: P = 8 exceeds the 4 workers of trace %s; use counts up to 4", tdir);
    cr_assert_str_eq(deftsim_error_message(), want);
    deftsim_config_free(cfg);
    const char *ovi[] = {"gradients.model=", "gradients.source=trace", set_src, "scenario.iterations=3"};
    cfg = scenario("x", ovi, 4);
    cr_assert_eq(deftsim_engine_new(cfg, NULL, &e), DEFTSIM_E_INPUT);
    snprintf(want, sizeof want, "--set scenario.iterations: 3, but trace %s holds 2 iterations", tdir);
    cr_assert_str_eq(deftsim_error_message(), want);
    deftsim_config_free(cfg);
    free(tdir);
}

/* CLT-k's low-pass filter reads g_w through the provider's grad(): regenerated for the
 * generator, read in place for a trace. Both must give the same rows, and the filter's removed
 * mass shows up as lost_mass. */
Test(engine, cltk_filter_reads_the_gradients)
{
    char *tdir = in_tmp("trace");
    write_trace_like_generator(tdir, 4, ITERS, NULL, 0);
    char set_src[600];
    snprintf(set_src, sizeof set_src, "gradients.trace=%s", tdir);
    const char *base[] = {"sparsify.methods=cltk", "sparsify.cltk_beta=0.3"};
    const char *tr[] = {"sparsify.methods=cltk", "sparsify.cltk_beta=0.3", "gradients.model=",
                        "gradients.source=trace", set_src};
    const char *none[] = {"sparsify.methods=cltk", "sparsify.cltk_beta=0.3",
                          "sparsify.error_feedback=none"};
    run_ok("g", NULL, base, 2);
    run_ok("t", NULL, tr, 5);
    run_ok("n", NULL, none, 3);
    char *pg = in_tmp("g/rows.csv"), *pt = in_tmp("t/rows.csv"), *pn = in_tmp("n/rows.csv");
    table *tg = load_csv(pg), *tt = load_csv(pt), *tn = load_csv(pn);
    cr_assert_eq(tg->nrows, tt->nrows);
    const char *skip[] = {"source", "model"};
    size_t lossy = 0;
    for (size_t r = 0; r < tg->nrows; r++) {
        rows_equal(tg, r, tt, r, skip, 2);
        lossy += num(tg, r, "lost_abs_mass") > 0;
        cr_assert_str_eq(cell(tn, r, "error_feedback"), "none");
    }
    cr_assert_gt(lossy, 0, "the filter removed nothing");
    table_free(tg);
    table_free(tt);
    table_free(tn);
    free(pg);
    free(pt);
    free(pn);
    free(tdir);
}

Test(engine, trace_with_a_nan_is_refused_naming_where)
{
    deftsim_model *m;
    char *model = in_tmp("tiny.csv");
    cr_assert_eq(deftsim_model_load(model, &m), DEFTSIM_OK);
    free(model);
    char *tdir = in_tmp("nan_trace");
    json_t *prov = json_pack("{s:s, s:s, s:I}", "recorder", "test_engine", "method", "constant",
                             "seed", (json_int_t)0);
    deftsim_trace_writer *tw;
    cr_assert_eq(deftsim_trace_writer_open(tdir, m, 2, prov, &tw), DEFTSIM_OK, "%s",
                 deftsim_error_message());
    json_decref(prov);
    float *g0 = malloc(N * sizeof(float)), *g1 = malloc(N * sizeof(float));
    for (size_t i = 0; i < N; i++) g0[i] = g1[i] = (float)(i % 17) - 8.0f;
    g1[1000] = NAN;
    const float *grads[2] = {g0, g1};
    cr_assert_eq(deftsim_trace_writer_put(tw, 0, grads), DEFTSIM_OK);
    cr_assert_eq(deftsim_trace_writer_close(tw), DEFTSIM_OK);
    free(g0);
    free(g1);
    deftsim_model_free(m);

    char set_src[600];
    snprintf(set_src, sizeof set_src, "gradients.trace=%s", tdir);
    const char *ov[] = {"gradients.model=", "gradients.source=trace", set_src,
                        "scenario.iterations=1", "workers.counts=1, 2", "sparsify.methods=topk"};
    deftsim_config *cfg = scenario("nan", ov, 6);
    deftsim_run_summary sum;
    cr_assert_eq(deftsim_run(cfg, NULL, &sum), DEFTSIM_E_INPUT);
    const char *msg = deftsim_error_message();
    cr_assert(strstr(msg, "topk d=0.05 P=2 iteration 0: "), "%s", msg);
    cr_assert(strstr(msg, "iter_000000.safetensors"), "%s", msg);
    cr_assert(strstr(msg, "NaN"), "%s", msg);
    /* P = 1 ran (worker 0 is finite); its point file was committed, rows.csv was not. */
    char *p1 = in_tmp("nan/points/topk_d0.05_P1.csv"), *rows = in_tmp("nan/rows.csv");
    cr_assert(file_exists(p1));
    cr_assert_not(file_exists(rows));
    free(p1);
    free(rows);
    char *mp = in_tmp("nan/manifest.json");
    json_error_t jerr;
    json_t *man = json_load_file(mp, 0, &jerr);
    cr_assert(man, "%s", jerr.text);
    cr_assert_str_eq(json_string_value(json_object_get(man, "status")), "failed");
    cr_assert(strstr(json_string_value(json_object_get(man, "error")), "NaN"));
    json_decref(man);
    free(mp);
    deftsim_config_free(cfg);
    free(tdir);
}

/* ---- the command ------------------------------------------------------------------------ */

/* Runs the deftsim program with args; its stdout and stderr as text (caller frees). Returns
 * the exit status. */
static int run_cli(const char *const *args, char **out, char **err)
{
    deftsim_test_run r = deftsim_test_cli(NULL, args);
    *out = r.out;
    *err = r.err;
    return r.rc;
}

static char *write_scenario(const char *name, const char *out)
{
    char *text = scenario_text(out);
    char *path = in_tmp(name);
    cr_assert_eq(deftsim_write_file_atomic(path, text, strlen(text)), DEFTSIM_OK);
    free(text);
    return path;
}

Test(cli, run_exit_codes_and_messages)
{
    char *ini = write_scenario("tiny.ini", "cli_out");
    char *out, *err;

    const char *ok[] = {"run", ini, "--set", "sparsify.methods=deft, topk", NULL};
    cr_assert_eq(run_cli(ok, &out, &err), 0, "%s", err);
    cr_assert(strstr(err, "deftsim run: [1/6] deft d=0.05 P=1: 2 iterations in "), "%s", err);
    cr_assert(strstr(err, "deftsim run: 6 points, "), "%s", err);
    char *rows = in_tmp("cli_out/rows.csv");
    cr_assert(file_exists(rows));
    free(rows);
    free(out);
    free(err);

    /* Another scenario (other methods) into another folder: the first run's folder would be
     * refused. */
    char *cli_out2 = in_tmp("cli_out2");
    const char *quiet[] = {"run", "-q", ini, "--set", "sparsify.methods=cltk", "-o", cli_out2,
                           NULL};
    cr_assert_eq(run_cli(quiet, &out, &err), 0, "%s", err);
    cr_assert_str_eq(err, "");
    free(out);
    free(err);
    free(cli_out2);

    const char *bad_key[] = {"run", ini, "--set", "sparsify.nonsense=1", NULL};
    cr_assert_eq(run_cli(bad_key, &out, &err), 2);
    cr_assert(strstr(err, "sparsify.nonsense"), "%s", err);
    free(out);
    free(err);

    const char *missing[] = {"run", NULL};
    cr_assert_eq(run_cli(missing, &out, &err), 2);
    cr_assert(strstr(err, "missing SCENARIO"), "%s", err);
    free(out);
    free(err);

    const char *no_file[] = {"run", "/nonexistent/scenario.ini", NULL};
    cr_assert_eq(run_cli(no_file, &out, &err), 2);
    free(out);
    free(err);

    const char *budget[] = {"run", ini, "--ram", "64K", "--set", "workers.counts=2, 4", NULL};
    cr_assert_eq(run_cli(budget, &out, &err), 2);
    cr_assert(strstr(err, "deftsim: input error: --set workers.counts: P = "), "%s", err);
    cr_assert(strstr(err, "over the memory budget of 51.2 KiB (0.8 of 64.0 KiB RAM)"), "%s", err);
    free(out);
    free(err);

    /* A budget some P fit: the largest is named, and it is right. */
    const char *some[] = {"run", ini, "--ram", "1M", "--prep-threads", "2", "--set",
                          "workers.counts=1..64", NULL};
    cr_assert_eq(run_cli(some, &out, &err), 2);
    const char *at = strstr(err, "; the largest P that fits is ");
    cr_assert(at, "%s", err);
    unsigned L = (unsigned)strtoul(at + strlen("; the largest P that fits is "), NULL, 10);
    cr_assert(L >= 1 && L < 64, "%s", err);
    cr_assert(strstr(err, "; set [sparsify] error_feedback = none or sampled for larger P\n"), "%s",
              err);
    free(out);
    free(err);
    char cl[64], cl1[64];
    snprintf(cl, sizeof cl, "workers.counts=%u", L);
    snprintf(cl1, sizeof cl1, "workers.counts=%u", L + 1);
    /* Dry runs check the folder too: these plan other worker counts than cli_out's run. */
    char *dry_out = in_tmp("cli_dry");
    const char *fit[] = {"run", ini, "--dry-run", "--ram", "1M", "-j", "2", "--set", cl,
                         "-o", dry_out, NULL};
    cr_assert_eq(run_cli(fit, &out, &err), 0, "%s", err);
    free(out);
    free(err);
    const char *nofit[] = {"run", ini, "--dry-run", "--ram", "1M", "-j", "2", "--set", cl1,
                           "-o", dry_out, NULL};
    cr_assert_eq(run_cli(nofit, &out, &err), 2, "%s", err);
    free(out);
    free(err);

    const char *dry[] = {"run", ini, "--dry-run", "--ram", "16G", "-o", dry_out, NULL};
    cr_assert_eq(run_cli(dry, &out, &err), 0, "%s", err);
    cr_assert(strstr(out, "largest P that fits: "), "%s", out);
    cr_assert(strstr(out, "memory budget 12.8 GiB = 0.8 of 16.0 GiB RAM"), "%s", out);
    free(out);
    free(err);
    cr_assert(!file_exists(dry_out), "a dry run wrote %s", dry_out);
    free(dry_out);

    const char *bad_ram[] = {"run", ini, "--ram", "lots", NULL};
    cr_assert_eq(run_cli(bad_ram, &out, &err), 2);
    free(out);
    free(err);

    if (deftsim_kernels_backend_unavailable("cuda-staged")) {
        /* A setting the user can change: an input error, exit 2. */
        const char *cuda[] = {"run", ini, "--set", "device.kind=cuda", NULL};
        cr_assert_eq(run_cli(cuda, &out, &err), 2, "%s", err);
        cr_assert(strstr(err, "deftsim: input error: --set device.kind = cuda: "), "%s", err);
        free(out);
        free(err);
    }

    const char *help[] = {"run", "--help", NULL};
    cr_assert_eq(run_cli(help, &out, &err), 0);
    cr_assert(strstr(out, "usage: deftsim run SCENARIO"), "%s", out);
    free(out);
    free(err);
    free(ini);
}

/* ---- the network simulation ------------------------------------------------------------ */

/* The simulated columns of every method agree with the measured ones: a compute phase lasts in
 * simulated time what it took on the kernel, the iteration ends with its last row, the
 * selection critical path ends no later; the platform is in the output and the manifest says
 * what the simulation cost. */
Test(engine, network_simulation_columns)
{
    const char *ov[] = {"network.model=CM02"};
    run_ok("net", NULL, ov, 1);
    char *path = in_tmp("net/rows.csv");
    table *t = load_csv(path);
    free(path);
    for (size_t r = 0; r < t->nrows; r++) {
        cr_assert_str_eq(cell(t, r, "net_topology"), "flat");
        cr_assert_str_eq(cell(t, r, "net_model"), "CM02");
        cr_assert_eq(num(t, r, "net_bandwidth"), 3.125e9);
        cr_assert_eq(num(t, r, "net_latency"), 1e-6);
        cr_assert_str_eq(cell(t, r, "net_allgather"), "bruck");
        cr_assert_str_eq(cell(t, r, "net_allreduce"), "rabenseifner");
        cr_assert_str_eq(cell(t, r, "net_bcast"), "binomial");
        cr_assert_str_eq(cell(t, r, "sim_mode"), "exact");
        const char *method = cell(t, r, "method"), *kind = cell(t, r, "phase_kind");
        double it_s = num(t, r, "iteration_seconds");
        cr_assert(it_s >= 0);
        cr_assert(num(t, r, "comm_seconds") >= 0 && num(t, r, "comm_seconds") <= it_s);
        if (strcmp(method, "dense") == 0)
            cr_assert_str_eq(cell(t, r, "select_critical_seconds"), "", "dense selects nothing");
        else
            cr_assert(num(t, r, "select_critical_seconds") <= it_s);
        /* Empty: a worker with no phase (dense at P = 1) or a phase that did not run (gTop-k's
         * merge at P = 1: no tree; hardthr's threshold after the first step, which fixes it). */
        if (strcmp(kind, "none") == 0 ||
            (!strcmp(method, "gtopk") && !strcmp(cell(t, r, "phase"), "merge") && num(t, r, "P") == 1) ||
            (!strcmp(method, "hardthr") && !strcmp(cell(t, r, "phase"), "threshold") &&
             num(t, r, "iteration") > 0)) {
            cr_assert_str_eq(cell(t, r, "sim_start"), "");
            cr_assert_str_eq(cell(t, r, "sim_end"), "");
            continue;
        }
        double a = num(t, r, "sim_start"), b = num(t, r, "sim_end");
        cr_assert(a >= 0 && b >= a && b <= it_s, "row %zu: %g .. %g in an iteration of %g", r, a, b, it_s);
        if (strcmp(kind, "compute") == 0) {
            /* gTop-k's merge runs once per round and LAGS's phases once per layer, with waits
             * between: their span holds at least the measured sum. Every other phase is one
             * step: its measured time, to SimGrid's timing precision (surf/precision, 1 ns:
             * events closer than that coincide). */
            double want = num(t, r, "phase_seconds");
            if ((strcmp(method, "gtopk") == 0 && strcmp(cell(t, r, "phase"), "merge") == 0) ||
                strcmp(method, "lags") == 0)
                cr_assert(b - a >= want - 4e-9, "row %zu", r);
            else
                cr_assert(fabs((b - a) - want) <= 1e-12 * want + 1e-9,
                          "row %zu: %s %s simulated %.17g s, measured %.17g s", r, method,
                          cell(t, r, "phase"), b - a, want);
        }
    }
    /* iteration_seconds is when the iteration's last row ends. */
    for (size_t r0 = 0; r0 < t->nrows;) {
        size_t r1 = r0;
        double last = 0;
        while (r1 < t->nrows && !strcmp(cell(t, r1, "method"), cell(t, r0, "method")) &&
               !strcmp(cell(t, r1, "P"), cell(t, r0, "P")) &&
               !strcmp(cell(t, r1, "iteration"), cell(t, r0, "iteration"))) {
            if (cell(t, r1, "sim_end")[0] && num(t, r1, "sim_end") > last) last = num(t, r1, "sim_end");
            r1++;
        }
        cr_assert_eq(num(t, r0, "iteration_seconds"), last, "%s P=%s iteration %s",
                     cell(t, r0, "method"), cell(t, r0, "P"), cell(t, r0, "iteration"));
        r0 = r1;
    }
    table_free(t);

    char *plat = in_tmp("net/platforms/P4.xml");
    char *xml;
    cr_assert_eq(deftsim_read_file(plat, &xml, NULL), DEFTSIM_OK, "%s", deftsim_error_message());
    cr_expect(strstr(xml, "<cluster id=\"deftsim\" prefix=\"node-\"") && strstr(xml, "radical=\"0-3\""),
              "%s", xml);
    free(xml);
    free(plat);
    char *mp = in_tmp("net/manifest.json");
    json_t *man = json_load_file(mp, 0, NULL);
    cr_assert(man);
    json_t *pts = json_object_get(man, "points");
    cr_assert_gt(json_array_size(pts), 0);
    for (size_t i = 0; i < json_array_size(pts); i++) {
        json_t *pt = json_array_get(pts, i);
        cr_expect(json_real_value(json_object_get(pt, "sim_seconds")) > 0);
        if (json_integer_value(json_object_get(pt, "P")) > 1 &&
            strcmp(json_string_value(json_object_get(pt, "method")), "dense") == 0)
            cr_expect_gt(json_integer_value(json_object_get(pt, "sim_messages")), 0);
    }
    json_decref(man);
    free(mp);
}

/* dense is one allreduce and nothing else, so its simulated time is the alpha-beta formula:
 * under CM02 on the flat cluster, Rabenseifner on P = 4 and 4096 floats is two rounds of
 * recursive halving (2048, then 1024 floats) and two of doubling (1024, 2048), each message
 * 16 bytes of envelope heavier and crossing two links of latency L. */
Test(engine, dense_allreduce_is_the_alpha_beta_formula)
{
    static const char even_csv[] = "index,name,shape,numel\n0,w,64x64,4096\n";
    char *model = in_tmp("even.csv");
    cr_assert_eq(deftsim_write_file_atomic(model, even_csv, strlen(even_csv)), DEFTSIM_OK);
    char mset[600];
    snprintf(mset, sizeof mset, "gradients.model=%s", model);
    free(model);
    const char *ov[] = {mset, "sparsify.methods=dense", "workers.counts=4", "network.model=CM02"};
    run_ok("even", NULL, ov, 4);
    char *path = in_tmp("even/rows.csv");
    table *t = load_csv(path);
    free(path);
    const double L = 1e-6, B = 3.125e9;
    double want = 2 * ((2 * L + (2048 * 4 + 16) / B) + (2 * L + (1024 * 4 + 16) / B));
    cr_assert_gt(t->nrows, 0);
    for (size_t r = 0; r < t->nrows; r++) {
        double got = num(t, r, "iteration_seconds");
        cr_assert(fabs(got - want) <= 1e-12 * want, "simulated %.17g s, formula %.17g s", got, want);
        cr_assert(fabs(num(t, r, "comm_seconds") - want) <= 1e-12 * want);
        cr_assert_eq(num(t, r, "sim_start"), 0);
        cr_assert(fabs(num(t, r, "sim_end") - want) <= 1e-12 * want);
    }
    printf("dense P=4, 16 KiB allreduce (rabenseifner, CM02): simulated %.9e s, formula %.9e s\n",
           num(t, 0, "iteration_seconds"), want);
    table_free(t);
}

/* compute = none: a compute phase takes no simulated time (its measured time stays in
 * phase_seconds), so the simulated columns depend on the bytes alone: two runs of the same
 * seed give them to the last digit, and the manifest records the setting. dense is still the
 * alpha-beta formula (it has no compute phase). */
Test(engine, network_compute_none_is_the_bytes_alone)
{
    const char *ov[] = {"network.compute=none", "sparsify.methods=deft, topk, gtopk, dense"};
    run_ok("none_a", NULL, ov, 2);
    run_ok("none_b", NULL, ov, 2);
    char *pa = in_tmp("none_a/rows.csv"), *pb = in_tmp("none_b/rows.csv");
    table *a = load_csv(pa), *b = load_csv(pb);
    cr_assert_eq(a->nrows, b->nrows);
    cr_assert_gt(a->nrows, 0);
    static const char *const simulated[] = {"sim_start", "sim_end", "comm_seconds",
                                            "select_critical_seconds", "iteration_seconds"};
    size_t compute_rows = 0;
    for (size_t r = 0; r < a->nrows; r++) {
        rows_equal(a, r, b, r, NULL, 0);
        for (size_t i = 0; i < sizeof simulated / sizeof simulated[0]; i++)
            cr_assert_str_eq(cell(a, r, simulated[i]), cell(b, r, simulated[i]),
                             "row %zu, %s: %s P=%s", r, simulated[i], cell(a, r, "method"),
                             cell(a, r, "P"));
        if (strcmp(cell(a, r, "phase_kind"), "compute") || !cell(a, r, "sim_start")[0]) continue;
        compute_rows++;
        cr_assert(num(a, r, "phase_seconds") >= 0, "row %zu: measured time kept", r);
        /* A phase of one step starts and ends at once; gTop-k's merge spans its rounds and
         * the messages between them. */
        if (strcmp(cell(a, r, "phase"), "merge"))
            cr_assert_eq(num(a, r, "sim_start"), num(a, r, "sim_end"), "row %zu: %s %s", r,
                         cell(a, r, "method"), cell(a, r, "phase"));
        /* Nothing before a worker's first step: it starts at 0. */
        if (!strcmp(cell(a, r, "phase_index"), "0"))
            cr_assert_eq(num(a, r, "sim_start"), 0, "row %zu", r);
    }
    cr_assert_gt(compute_rows, 0);
    table_free(a);
    table_free(b);
    free(pa);
    free(pb);
    char *mp = in_tmp("none_a/manifest.json");
    json_t *man = json_load_file(mp, 0, NULL);
    cr_assert(man);
    json_t *net = json_object_get(json_object_get(man, "config"), "network");
    cr_expect_str_eq(json_string_value(json_object_get(net, "compute")), "none");
    json_decref(man);
    free(mp);
}

/* simulate = 0: the simulated columns stay empty and the rows say so; approximate mode is
 * named in every row it produced; analytic mode names the mode that ran: analytic for a
 * Bruck allgather of equal blocks from a common start, exact on a fat tree (outside its
 * premise), with the same simulated times as the full simulation. */
Test(engine, network_off_and_approximate_are_named)
{
    const char *off[] = {"network.simulate=0", "sparsify.methods=topk, gtopk"};
    run_ok("off", NULL, off, 2);
    const char *approx[] = {"network.mode=approximate", "network.allgather=ring",
                            "sparsify.methods=topk-ag"};
    run_ok("approx", NULL, approx, 3);
    char *po = in_tmp("off/rows.csv"), *pa = in_tmp("approx/rows.csv");
    table *to = load_csv(po), *ta = load_csv(pa);
    for (size_t r = 0; r < to->nrows; r++) {
        cr_assert_str_eq(cell(to, r, "sim_mode"), "off");
        static const char *const empty[] = {"sim_start", "sim_end", "comm_seconds",
                                            "select_critical_seconds", "iteration_seconds",
                                            "net_topology", "net_model", "net_allgather"};
        for (size_t i = 0; i < sizeof empty / sizeof empty[0]; i++)
            cr_assert_str_eq(cell(to, r, empty[i]), "", "%s", empty[i]);
    }
    for (size_t r = 0; r < ta->nrows; r++) {
        cr_assert_str_eq(cell(ta, r, "sim_mode"), "approximate");
        cr_assert_str_eq(cell(ta, r, "net_allgather"), "ring");
        cr_assert(num(ta, r, "iteration_seconds") > 0);
    }
    const char *an[] = {"network.mode=analytic", "network.compute=none",
                        "sparsify.methods=topk-ag"};
    run_ok("analytic", NULL, an, 3);
    const char *ex[] = {"network.mode=exact", "network.compute=none", "sparsify.methods=topk-ag"};
    run_ok("analytic_ref", NULL, ex, 3);
    const char *ft[] = {"network.mode=analytic", "network.topology=fattree",
                        "sparsify.methods=topk-ag"};
    run_ok("analytic_ft", NULL, ft, 3);
    char *pan = in_tmp("analytic/rows.csv"), *pex = in_tmp("analytic_ref/rows.csv");
    char *pft = in_tmp("analytic_ft/rows.csv");
    table *tan = load_csv(pan), *tex = load_csv(pex), *tft = load_csv(pft);
    cr_assert(tan->nrows > 0 && tft->nrows > 0);
    cr_assert_eq(tan->nrows, tex->nrows);
    for (size_t r = 0; r < tan->nrows; r++) {
        cr_expect_str_eq(cell(tan, r, "sim_mode"), "analytic");
        double x = num(tan, r, "iteration_seconds"), y = num(tex, r, "iteration_seconds");
        cr_expect(fabs(x - y) <= 1e-9 * y + 4e-9, "row %zu: %.12e vs %.12e", r, x, y);
    }
    for (size_t r = 0; r < tft->nrows; r++) cr_expect_str_eq(cell(tft, r, "sim_mode"), "exact");
    table_free(tan);
    table_free(tex);
    table_free(tft);
    free(pan);
    free(pex);
    free(pft);
    char *plat = in_tmp("off/platforms");
    struct stat sb;
    cr_expect_neq(stat(plat, &sb), 0, "no simulation, no platform");
    free(plat);
    table_free(to);
    table_free(ta);
    free(po);
    free(pa);
}

/* Ok-Topk through deftsim run: the dense warm-up (one allreduce of n values, the whole vector
 * as the aggregate, its columns empty), then sparse steps with the alltoall of the counts, the
 * split-and-reduce rounds (P2P rows) and the allgathers, and the threshold and balance
 * columns filled; the first sparse step re-cuts the regions (the boundaries' allreduce). */
Test(engine, oktopk_warmup_then_sparse)
{
    const char *ov[] = {"sparsify.methods=oktopk", "workers.counts=3", "scenario.iterations=5",
                        "sparsify.oktopk_warmup=2", "network.compute=none"};
    run_ok("oktopk", NULL, ov, 5);
    char *path = in_tmp("oktopk/rows.csv");
    table *t = load_csv(path);
    free(path);
    cr_assert_gt(t->nrows, 0);
    int seen_dense = 0, seen_p2p = 0, seen_alltoall = 0, seen_boundaries = 0;
    for (size_t r = 0; r < t->nrows; r++) {
        int it = (int)num(t, r, "iteration");
        const char *phase = cell(t, r, "phase"), *kind = cell(t, r, "phase_kind");
        if (it < 2) {
            cr_assert_str_empty(cell(t, r, "threshold_local"), "row %zu", r);
            cr_assert_str_empty(cell(t, r, "region_balance"), "row %zu", r);
            cr_assert_eq(num(t, r, "nnz"), N);
            if (!strcmp(phase, "dense")) {
                cr_assert_str_eq(kind, "allreduce");
                seen_dense++;
            }
            continue;
        }
        cr_assert_gt(num(t, r, "threshold_local"), 0, "row %zu", r);
        cr_assert_geq(num(t, r, "threshold_global"), 0, "row %zu", r);
        cr_assert_geq(num(t, r, "region_balance"), 1, "row %zu", r);
        cr_assert_leq(num(t, r, "region_balance"), 3, "row %zu", r);
        cr_assert(fabs(num(t, r, "buildup") - num(t, r, "nnz") / K) < 1e-12);
        if (!strcmp(kind, "p2p")) {
            cr_assert_str_eq(phase, "reduce");
            seen_p2p++;
        }
        if (!strcmp(kind, "alltoall")) {
            cr_assert_str_eq(phase, "counts");
            cr_assert_eq(num(t, r, "phase_bytes_sent"), 8); /* 4 bytes to each of 2 peers */
            cr_assert_eq(num(t, r, "phase_bytes_recv"), 8);
            seen_alltoall++;
        }
        if (!strcmp(phase, "boundaries")) {
            cr_assert_eq(it, 2, "the regions are cut on the first sparse step only");
            seen_boundaries++;
        }
    }
    cr_expect_eq(seen_dense, 2 * 3);      /* 2 iterations x 3 workers */
    cr_expect_eq(seen_p2p, 3 * 3);        /* 3 sparse iterations x 3 workers, one round */
    cr_expect_eq(seen_alltoall, 3 * 3);
    cr_expect_eq(seen_boundaries, 3);
    table_free(t);
}
