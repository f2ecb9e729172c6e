/* test_quality.c - [engine] quality = 0 (suite fast): the same rows as quality = 1 in every
 * column but the quality metrics (captured_frac .. acc_norm2, left empty) and the measured
 * times, for every method and feedback mode; the dense baseline's data-free points generate no
 * gradient at all and give the rows of a point that generates them; the memory plan drops what
 * quality = 0 does not hold; the key's bad values are input errors naming it. */
#include <criterion/criterion.h>

#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "deftsim_config.h"
#include "deftsim_engine.h"
#include "deftsim_model.h"
#include "deftsim_sparsify.h"
#include "deftsim_util.h"
#include "table.h"

/* Six tensors, 3210 elements (as test_engine.c's tiny model). */
static const char tiny_csv[] = "index,name,shape,numel\n"
                               "0,conv.weight,16x3x3x3,432\n"
                               "1,conv.bias,16,16\n"
                               "2,fc1.weight,64x32,2048\n"
                               "3,fc1.bias,64,64\n"
                               "4,fc2.weight,10x64,640\n"
                               "5,fc2.bias,10,10\n";
enum { N = 3210 };

/* The columns [engine] quality = 0 leaves empty (docs/OUTPUT.md). */
static const char *const quality_cols[] = {"captured_frac", "topk_frac",     "captured_ratio",
                                           "lost_mass",     "lost_abs_mass", "lost_entries",
                                           "acc_norm2"};
#define NQUALITY (sizeof quality_cols / sizeof quality_cols[0])

static char tmpdir[64];

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb; (void)flag; (void)ftw;
    return remove(path);
}

static void setup(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/deftsim-quality-XXXXXX");
    cr_assert(mkdtemp(tmpdir), "mkdtemp");
    char path[128];
    snprintf(path, sizeof path, "%s/tiny.csv", tmpdir);
    cr_assert_eq(deftsim_write_file_atomic(path, tiny_csv, strlen(tiny_csv)), DEFTSIM_OK);
}

static void teardown(void) { nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

TestSuite(quality, .init = setup, .fini = teardown);

static deftsim_config *scenario(const char *out, const char *methods, const char *const *ov,
                                size_t nov)
{
    char text[2048];
    snprintf(text, sizeof text,
             "[scenario]\nname = tiny\nseed = 7\niterations = 3\noutput = %s/%s\n"
             "[gradients]\nmodel = %s/tiny.csv\n"
             "[sparsify]\nmethods = %s\ndensities = 0.05\noktopk_warmup = 1\n"
             "[workers]\ncounts = 1..4\n",
             tmpdir, out, tmpdir, methods);
    deftsim_config *cfg = NULL;
    deftsim_status st = deftsim_config_parse(text, "tiny.ini", ov, nov, &cfg);
    cr_assert_eq(st, DEFTSIM_OK, "%s", deftsim_error_message());
    return cfg;
}

static table *run_rows(const char *out, const char *methods, const char *dump,
                       const char *const *ov, size_t nov)
{
    deftsim_config *cfg = scenario(out, methods, ov, nov);
    deftsim_run_options opt;
    deftsim_run_options_default(&opt);
    char dumpdir[160], rows[160];
    if (dump) snprintf(dumpdir, sizeof dumpdir, "%s/%s", tmpdir, dump);
    opt.dump_dir = dump ? dumpdir : NULL;
    opt.prep_threads = 2;
    deftsim_status st = deftsim_run(cfg, &opt, NULL);
    cr_assert_eq(st, DEFTSIM_OK, "%s", deftsim_error_message());
    deftsim_config_free(cfg);
    snprintf(rows, sizeof rows, "%s/%s/rows.csv", tmpdir, out);
    return load_csv(rows);
}

/* Measured times, and the simulated times that start from them. */
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

static int is_quality(const char *name)
{
    for (size_t i = 0; i < NQUALITY; i++)
        if (strcmp(name, quality_cols[i]) == 0) return 1;
    return 0;
}

/* Every row of a and b agrees on every column but the times and, with skip_quality, the
 * quality columns. */
static void tables_equal(const table *a, const table *b, int skip_quality)
{
    cr_assert_eq(a->ncols, b->ncols);
    cr_assert_eq(a->nrows, b->nrows);
    for (size_t r = 0; r < a->nrows; r++)
        for (size_t c = 0; c < a->ncols; c++) {
            const char *name = a->hdr[c];
            if (is_timing(name) || (skip_quality && is_quality(name))) continue;
            cr_assert_str_eq(a->cell[r * a->ncols + c], b->cell[r * b->ncols + c],
                             "row %zu, column %s (%s, P=%s, iteration %s, worker %s)", r, name,
                             cell(a, r, "method"), cell(a, r, "P"), cell(a, r, "iteration"),
                             cell(a, r, "worker"));
        }
}

/* Every method of the registry. */
static const char *all_methods_list(void)
{
    static char buf[1024];
    deftsim_method_list(0, buf, sizeof buf);
    return buf;
}

/* quality = 0 against 1 for every method under each feedback mode (CLT-k's filter on, so that
 * lost_mass is not 0 where it is filled): the same rows, the quality columns empty. */
Test(quality, off_gives_the_same_rows_without_the_quality_columns)
{
    static const char *const modes[][2] = {{"sparsify.error_feedback=full", "sparsify.cltk_beta=0.5"},
                                           {"sparsify.error_feedback=sampled", "sparsify.sampled_workers=1"},
                                           {"sparsify.error_feedback=none", "sparsify.cltk_beta=0.5"}};
    for (size_t f = 0; f < sizeof modes / sizeof modes[0]; f++) {
        const char *on[] = {modes[f][0], modes[f][1], "engine.quality=1"};
        const char *off[] = {modes[f][0], modes[f][1], "engine.quality=0"};
        char o1[32], o0[32];
        snprintf(o1, sizeof o1, "on%zu", f);
        snprintf(o0, sizeof o0, "off%zu", f);
        table *a = run_rows(o1, all_methods_list(), NULL, on, 3);
        table *b = run_rows(o0, all_methods_list(), NULL, off, 3);
        tables_equal(a, b, 1);
        size_t lost = 0;
        for (size_t r = 0; r < b->nrows; r++) {
            for (size_t i = 0; i < NQUALITY; i++) {
                cr_assert_str_eq(cell(b, r, quality_cols[i]), "", "quality = 0: %s = '%s' (%s)",
                                 quality_cols[i], cell(b, r, quality_cols[i]), cell(b, r, "method"));
                if (strcmp(quality_cols[i], "lost_mass") && strcmp(quality_cols[i], "lost_abs_mass") &&
                    strcmp(quality_cols[i], "lost_entries") && strcmp(cell(a, r, "P"), "1"))
                    cr_assert_str_neq(cell(a, r, quality_cols[i]), "", "quality = 1: %s empty (%s)",
                                      quality_cols[i], cell(a, r, "method"));
            }
            lost += strcmp(cell(a, r, "method"), "cltk") == 0 && num(a, r, "lost_abs_mass") > 0;
        }
        if (f != 1) cr_assert_gt(lost, 0, "CLT-k's filter lost nothing with quality = 1");
        table_free(a);
        table_free(b);
    }
}

/* The default stays what it was: quality = 1 written out or left out, the same rows. */
Test(quality, the_default_is_on)
{
    const char *on[] = {"engine.quality=1"};
    table *a = run_rows("default", "topk, dense", NULL, NULL, 0);
    table *b = run_rows("on", "topk, dense", NULL, on, 1);
    tables_equal(a, b, 0);
    for (size_t r = 0; r < a->nrows; r++)
        if (strcmp(cell(a, r, "P"), "1")) cr_assert_str_neq(cell(a, r, "captured_frac"), "");
    table_free(a);
    table_free(b);
}

/* one_point's deftsim_run_options.no_resident. */
static int no_resident;

/* Runs one point through deftsim_engine_run_point; returns its summary. */
static deftsim_point_summary one_point(const char *method, uint32_t P, const char *dump,
                                       const char *const *ov, size_t nov, const char *file)
{
    deftsim_config *cfg = scenario("points", method, ov, nov);
    deftsim_run_options opt;
    deftsim_run_options_default(&opt);
    char dumpdir[160], path[200];
    if (dump) snprintf(dumpdir, sizeof dumpdir, "%s/%s", tmpdir, dump);
    opt.dump_dir = dump ? dumpdir : NULL;
    opt.prep_threads = 2;
    opt.no_resident = no_resident;
    deftsim_engine *e;
    cr_assert_eq(deftsim_engine_new(cfg, &opt, &e), DEFTSIM_OK, "%s", deftsim_error_message());
    deftsim_method m;
    cr_assert_eq(deftsim_method_from_name(method, &m), 0);
    snprintf(path, sizeof path, "%s/%s", tmpdir, file);
    deftsim_point_summary s;
    deftsim_status st = deftsim_engine_run_point(e, m, 0.05, P, path, &s);
    cr_assert_eq(st, DEFTSIM_OK, "%s", deftsim_error_message());
    deftsim_engine_free(e);
    deftsim_config_free(cfg);
    return s;
}

/* Dense at quality = 0 without --dump reads no gradient, and its rows are those of the same
 * point that generates them (the --dump run, which needs the values); at quality = 1 it
 * generates them for the metrics. Any feedback mode. */
Test(quality, dense_off_generates_no_gradient)
{
    static const char *const fb[] = {"sparsify.error_feedback=full",
                                     "sparsify.error_feedback=none"};
    for (size_t f = 0; f < 2; f++) {
        const char *off[] = {fb[f], "engine.quality=0"};
        const char *on[] = {fb[f], "engine.quality=1"};
        deftsim_point_summary free_ = one_point("dense", 4, NULL, off, 2, "free.csv");
        deftsim_point_summary gen = one_point("dense", 4, "dump", off, 2, "gen.csv");
        deftsim_point_summary q1 = one_point("dense", 4, NULL, on, 2, "q1.csv");
        cr_assert_eq(free_.gradient_elements, 0, "data-free dense read %llu gradient elements",
                     (unsigned long long)free_.gradient_elements);
        cr_assert_geq(gen.gradient_elements, (uint64_t)4 * 3 * N, "the --dump run read %llu",
                      (unsigned long long)gen.gradient_elements);
        cr_assert_geq(q1.gradient_elements, (uint64_t)4 * 3 * N);
        cr_assert_eq(free_.rows, gen.rows);
        char p1[200], p2[200], p3[200];
        snprintf(p1, sizeof p1, "%s/free.csv", tmpdir);
        snprintf(p2, sizeof p2, "%s/gen.csv", tmpdir);
        snprintf(p3, sizeof p3, "%s/q1.csv", tmpdir);
        table *a = load_csv(p1), *b = load_csv(p2), *c = load_csv(p3);
        tables_equal(a, b, 0);
        tables_equal(a, c, 1);
        cr_assert_gt(a->nrows, 0);
        cr_assert_str_eq(cell(a, 0, "nnz"), "3210");
        cr_assert_str_eq(cell(a, 0, "phase"), "values");
        table_free(a);
        table_free(b);
        table_free(c);
    }
    /* A method that reads its accumulators still reads them, and with error_feedback = none
     * quality = 0 leaves out the gradients only the average needed (regenerating at each
     * visit); with the accumulators resident, each worker's gradient is generated once per
     * iteration either way (4 workers, 3 iterations). */
    const char *off[] = {"sparsify.error_feedback=none", "engine.quality=0"};
    const char *on[] = {"sparsify.error_feedback=none", "engine.quality=1"};
    no_resident = 1;
    deftsim_point_summary t0 = one_point("topk", 4, NULL, off, 2, "t0.csv");
    deftsim_point_summary t1 = one_point("topk", 4, NULL, on, 2, "t1.csv");
    no_resident = 0;
    cr_assert_gt(t0.gradient_elements, 0);
    cr_assert_lt(t0.gradient_elements, t1.gradient_elements, "%llu, %llu",
                 (unsigned long long)t0.gradient_elements, (unsigned long long)t1.gradient_elements);
    deftsim_point_summary r0 = one_point("topk", 4, NULL, off, 2, "r0.csv");
    deftsim_point_summary r1 = one_point("topk", 4, NULL, on, 2, "r1.csv");
    cr_assert_eq(r0.gradient_elements, (uint64_t)4 * 3 * N);
    cr_assert_eq(r1.gradient_elements, (uint64_t)4 * 3 * N);
    cr_assert_lt(r1.gradient_elements, t1.gradient_elements);
}

static float *acc_get(void *ctx, uint32_t w) { return (float *)ctx + (size_t)w * N; }

/* The data-free step gives the step's result but the values; a method that reads its data
 * has none. */
Test(quality, dense_data_free_step_equals_its_step)
{
    deftsim_model *model;
    char path[128];
    snprintf(path, sizeof path, "%s/tiny.csv", tmpdir);
    cr_assert_eq(deftsim_model_load(path, &model), DEFTSIM_OK, "%s", deftsim_error_message());
    deftsim_kctx *kc;
    cr_assert_eq(deftsim_kctx_new(&kc, "cpu", 1), DEFTSIM_OK, "%s", deftsim_error_message());
    for (uint32_t P = 1; P <= 5; P += 2) {
        deftsim_sparsifier_params p = {.method = DEFTSIM_METHOD_DENSE, .density = 0.05, .P = P,
                                       .model = model, .index_bytes = 4, .value_bytes = 2,
                                       .kctx = kc};
        deftsim_sparsifier *a, *b;
        cr_assert_eq(deftsim_sparsifier_new(&p, &a), DEFTSIM_OK, "%s", deftsim_error_message());
        cr_assert_eq(deftsim_sparsifier_new(&p, &b), DEFTSIM_OK, "%s", deftsim_error_message());
        cr_assert(deftsim_method_has(DEFTSIM_METHOD_DENSE, DEFTSIM_METHOD_CAP_DATA_FREE));
        float *acc = malloc((size_t)P * N * sizeof *acc);
        cr_assert(acc);
        for (size_t i = 0; i < (size_t)P * N; i++) acc[i] = (float)((i * 2654435761u) % 1000) - 500;
        for (uint64_t t = 0; t < 2; t++) {
            /* get(w): worker w's accumulator, acc + w n. */
            deftsim_acc_provider prov = {.get = acc_get, .ctx = acc, .persistent = 1};
            deftsim_step_result *ra, *rb;
            cr_assert_eq(deftsim_sparsifier_step(a, t, &prov, &ra), DEFTSIM_OK, "%s",
                         deftsim_error_message());
            cr_assert_eq(deftsim_sparsifier_step_data_free(b, t, &rb), DEFTSIM_OK, "%s",
                         deftsim_error_message());
            cr_assert_null(rb->agg_value);
            cr_assert_eq(ra->nnz, rb->nnz);
            cr_assert_eq(ra->common_count, rb->common_count);
            cr_assert_eq(ra->buildup, rb->buildup);
            cr_assert_eq(ra->density_actual, rb->density_actual);
            cr_assert_eq(ra->nphases, rb->nphases);
            cr_assert_eq(ra->schedule.nsteps, rb->schedule.nsteps);
            cr_assert_eq(ra->schedule.nsteps, P > 1 ? 1u : 0u);
            for (size_t i = 0; i < ra->schedule.nsteps; i++) {
                cr_assert_eq(ra->schedule.steps[i].kind, rb->schedule.steps[i].kind);
                cr_assert_str_eq(ra->schedule.steps[i].name, rb->schedule.steps[i].name);
                for (uint32_t w = 0; w < P; w++)
                    cr_assert_eq(ra->schedule.steps[i].bytes[w], rb->schedule.steps[i].bytes[w]);
            }
            for (uint32_t w = 0; w < P; w++) {
                cr_assert_eq(ra->bytes_sent[w], rb->bytes_sent[w]);
                cr_assert_eq(ra->bytes_recv[w], rb->bytes_recv[w]);
                cr_assert_eq(ra->local_count[w], rb->local_count[w]);
                cr_assert_eq(ra->cost[w], rb->cost[w]);
            }
            for (uint64_t i = 0; i < ra->nnz; i++) cr_assert_eq(ra->agg_index[i], rb->agg_index[i]);
            cr_assert_eq(ra->lost_mass, rb->lost_mass);
        }
        free(acc);
        deftsim_sparsifier_free(a);
        deftsim_sparsifier_free(b);
    }
    deftsim_sparsifier_params p = {.method = DEFTSIM_METHOD_TOPK, .density = 0.05, .P = 2,
                                   .model = model, .index_bytes = 4, .value_bytes = 4,
                                   .kctx = kc};
    deftsim_sparsifier *s;
    cr_assert_eq(deftsim_sparsifier_new(&p, &s), DEFTSIM_OK);
    deftsim_step_result *r;
    cr_assert_eq(deftsim_sparsifier_step_data_free(s, 0, &r), DEFTSIM_E_USAGE);
    cr_assert(strstr(deftsim_error_message(), "topk"), "%s", deftsim_error_message());
    cr_assert(!deftsim_method_has(DEFTSIM_METHOD_TOPK, DEFTSIM_METHOD_CAP_DATA_FREE));
    deftsim_sparsifier_free(s);
    deftsim_kctx_free(kc);
    deftsim_model_free(model);
}

/* The memory plan: no average or reference top-k with quality = 0, and no accumulators at all
 * when every method's points are data-free. */
Test(quality, memory_plan_drops_what_is_not_held)
{
    const deftsim_memory_row *rows[3];
    deftsim_engine *es[3];
    const char *ov[3][1] = {{"engine.quality=1"}, {"engine.quality=0"}, {"engine.quality=0"}};
    const char *methods[3] = {"topk, dense", "topk, dense", "dense"};
    for (int i = 0; i < 3; i++) {
        deftsim_config *cfg = scenario("plan", methods[i], ov[i], 1);
        deftsim_run_options opt;
        deftsim_run_options_default(&opt);
        opt.prep_threads = 1;
        opt.ram_bytes = (uint64_t)1 << 34;
        cr_assert_eq(deftsim_engine_new(cfg, &opt, &es[i]), DEFTSIM_OK, "%s",
                     deftsim_error_message());
        deftsim_config_free(cfg);
        const deftsim_memory_plan *pl = deftsim_engine_memory(es[i]);
        rows[i] = &pl->rows[pl->ncounts - 1]; /* P = 4 */
        cr_assert_eq(rows[i]->P, 4);
    }
    cr_assert_eq(rows[0]->residual_bytes, rows[1]->residual_bytes);
    cr_assert_geq(rows[0]->engine_bytes, rows[1]->engine_bytes + N * sizeof(float));
    cr_assert_gt(rows[1]->residual_bytes, 0);
    cr_assert_eq(rows[2]->residual_bytes, 0);
    for (int i = 0; i < 3; i++) deftsim_engine_free(es[i]);
}

/* Bad values: input errors naming the key (the files' cases are tests/config/bad/quality_*). */
Test(quality, bad_values_name_the_key)
{
    static const char *const bad[] = {"engine.quality=2", "engine.quality=-1",
                                      "engine.quality=yes", "engine.quality=0.5",
                                      "engine.quality="};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        deftsim_config *cfg = NULL;
        deftsim_status st = deftsim_config_parse("[gradients]\nmodel = resnet18_cifar10\n",
                                                 "q.ini", &bad[i], 1, &cfg);
        cr_assert_eq(st, DEFTSIM_E_INPUT, "%s: %s", bad[i], deftsim_error_message());
        cr_assert_null(cfg);
        cr_assert(strstr(deftsim_error_message(), "engine.quality"), "%s: %s", bad[i],
                  deftsim_error_message());
    }
}
