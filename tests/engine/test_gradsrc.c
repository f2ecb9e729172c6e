/* test_gradsrc.c - the gradient source (src/engine/deftsim_gradsrc.h) over its two kinds, the
 * synthetic generator and the shipped trace, against the underlying APIs; and the join of
 * point files into rows.csv (deftsim_rows_join). Suite fast. */
#include <criterion/criterion.h>

#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deftsim_config.h"
#include "deftsim_engine.h"
#include "deftsim_gen.h"
#include "deftsim_gradsrc.h"
#include "deftsim_trace.h"
#include "deftsim_util.h"

static const char tiny_csv[] = "index,name,shape,numel\n"
                               "0,conv.weight,16x3x3x3,432\n"
                               "1,conv.bias,16,16\n"
                               "2,fc1.weight,64x32,2048\n"
                               "3,fc1.bias,64,64\n"
                               "4,fc2.weight,10x64,640\n"
                               "5,fc2.bias,10,10\n";
#define N 3210u

static char tmpdir[64];

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb; (void)flag; (void)ftw;
    return remove(path);
}

static void setup(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/deftsim-gradsrc-XXXXXX");
    cr_assert(mkdtemp(tmpdir), "mkdtemp");
    char p[256];
    snprintf(p, sizeof p, "%s/tiny.csv", tmpdir);
    cr_assert_eq(deftsim_write_file_atomic(p, tiny_csv, strlen(tiny_csv)), DEFTSIM_OK);
}

static void teardown(void) { nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

TestSuite(gradsrc, .init = setup, .fini = teardown);

static deftsim_config *config(const char *gradients)
{
    char text[2048];
    snprintf(text, sizeof text,
             "[scenario]\nname = g\nseed = 11\niterations = 2\noutput = %s/out\n"
             "[gradients]\n%s\n[sparsify]\nmethods = topk\ndensities = 0.05\n"
             "[workers]\ncounts = 2\n",
             tmpdir, gradients);
    deftsim_config *cfg = NULL;
    cr_assert_eq(deftsim_config_parse(text, "g.ini", NULL, 0, &cfg), DEFTSIM_OK, "%s",
                 deftsim_error_message());
    return cfg;
}

/* The synthetic source gives the generator's values with the scenario's seed, by every way
 * of reading, and maps nothing. */
Test(gradsrc, synthetic_reads_the_generator)
{
    char g[512];
    snprintf(g, sizeof g, "model = %s/tiny.csv", tmpdir);
    deftsim_config *cfg = config(g);
    deftsim_gradsrc *src;
    cr_assert_eq(deftsim_gradsrc_open(cfg, &src), DEFTSIM_OK, "%s", deftsim_error_message());
    const deftsim_model *m = deftsim_gradsrc_model(src);
    cr_assert_eq(m->numel, N);
    cr_expect_str_eq(deftsim_gradsrc_kind(src), "synthetic");
    cr_expect_eq(deftsim_gradsrc_maps(src), 0);
    cr_expect_eq(deftsim_gradsrc_workers(src), UINT32_MAX);
    cr_expect_eq(deftsim_gradsrc_iterations(src), SIZE_MAX);
    cr_expect_eq(deftsim_gradsrc_iteration_id(src, 5), 5);

    deftsim_gen_params gp;
    deftsim_gen_params_default(&gp);
    gp.seed = 11;
    deftsim_gen *gen;
    cr_assert_eq(deftsim_gen_new(m, &gp, &gen), DEFTSIM_OK);
    float *want = malloc(3 * N * sizeof(float)), *got = malloc(3 * N * sizeof(float));
    cr_assert(want && got);
    for (uint32_t w = 0; w < 3; w++)
        cr_assert_eq(deftsim_gen_fill(gen, 1, w, 0, N, want + (size_t)w * N), DEFTSIM_OK);

    cr_assert_eq(deftsim_gradsrc_prepare(src, 1, 3, 2), DEFTSIM_OK);
    cr_expect_null(deftsim_gradsrc_map(src, 1, 0));
    /* read: three workers' slice [100, 1100) into the staging buffers. */
    float *stage[3] = {got, got + N, got + 2 * N};
    const float *out[3];
    cr_assert_eq(deftsim_gradsrc_read(src, 1, 0, 3, 100, 1000, stage, out), DEFTSIM_OK);
    for (uint32_t w = 0; w < 3; w++) {
        cr_expect_eq(out[w], stage[w]);
        cr_expect_eq(memcmp(out[w], want + (size_t)w * N + 100, 1000 * sizeof(float)), 0,
                     "worker %u", w);
    }
    /* fill: one worker's whole gradient. */
    cr_assert_eq(deftsim_gradsrc_fill(src, 1, 2, 0, N, got), DEFTSIM_OK);
    cr_expect_eq(memcmp(got, want + 2 * N, N * sizeof(float)), 0);
    json_t *j = json_object();
    deftsim_gradsrc_describe(src, j);
    cr_expect_str_eq(json_string_value(json_object_get(j, "generator_kernel")),
                     deftsim_gen_kernel(gen));
    json_decref(j);
    free(want);
    free(got);
    deftsim_gen_free(gen);
    deftsim_gradsrc_close(src);
    deftsim_config_free(cfg);
}

/* The trace source maps the trace's gradients in place, copies them on fill, and names the
 * trace's iterations by their recorded ids. */
Test(gradsrc, trace_maps_the_recorded_gradients)
{
    char g[512];
    snprintf(g, sizeof g, "source = trace\ntrace = %s/traces/fmnist_cnn_p4",
             getenv("DEFTSIM_SOURCE_ROOT"));
    deftsim_config *cfg = config(g);
    deftsim_gradsrc *src;
    cr_assert_eq(deftsim_gradsrc_open(cfg, &src), DEFTSIM_OK, "%s", deftsim_error_message());
    deftsim_trace *t;
    cr_assert_eq(deftsim_trace_open(cfg->gradients.trace, &t), DEFTSIM_OK);
    const deftsim_model *m = deftsim_gradsrc_model(src);
    uint64_t n = m->numel;
    cr_expect_eq(n, deftsim_trace_model(t)->numel);
    cr_expect_str_eq(deftsim_gradsrc_kind(src), "trace");
    cr_expect_eq(deftsim_gradsrc_maps(src), 1);
    cr_expect_eq(deftsim_gradsrc_workers(src), deftsim_trace_workers(t));
    cr_expect_eq(deftsim_gradsrc_iterations(src), deftsim_trace_iterations(t));
    for (size_t i = 0; i < deftsim_trace_iterations(t); i++)
        cr_expect_eq(deftsim_gradsrc_iteration_id(src, i), deftsim_trace_iteration_id(t, i));

    cr_assert_eq(deftsim_gradsrc_prepare(src, 1, 2, 2), DEFTSIM_OK, "%s", deftsim_error_message());
    const float *want[2];
    for (uint32_t w = 0; w < 2; w++) {
        cr_assert_eq(deftsim_trace_gradient(t, 1, w, &want[w]), DEFTSIM_OK);
        const float *mp = deftsim_gradsrc_map(src, 1, w);
        cr_assert_not_null(mp);
        cr_expect_eq(memcmp(mp, want[w], n * sizeof(float)), 0, "worker %u", w);
    }
    const float *out[2];
    float *stage[2] = {NULL, NULL};
    cr_assert_eq(deftsim_gradsrc_read(src, 1, 0, 2, 7, 500, stage, out), DEFTSIM_OK);
    for (uint32_t w = 0; w < 2; w++) {
        cr_expect_eq(out[w], deftsim_gradsrc_map(src, 1, w) + 7, "in place");
        cr_expect_eq(memcmp(out[w], want[w] + 7, 500 * sizeof(float)), 0);
    }
    float *buf = malloc(n * sizeof(float));
    cr_assert(buf);
    cr_assert_eq(deftsim_gradsrc_fill(src, 1, 1, 0, n, buf), DEFTSIM_OK);
    cr_expect_eq(memcmp(buf, want[1], n * sizeof(float)), 0);
    json_t *j = json_object();
    deftsim_gradsrc_describe(src, j);
    cr_expect_eq(json_integer_value(json_object_get(j, "trace_workers")),
                 (json_int_t)deftsim_trace_workers(t));
    cr_expect_str_eq(json_string_value(json_object_get(j, "trace")), deftsim_trace_dir(t));
    json_decref(j);
    free(buf);
    deftsim_trace_close(t);
    deftsim_gradsrc_close(src);
    deftsim_config_free(cfg);
}

/* A list is refused by open (a sweep's axis); the table alone opens without a generator. */
Test(gradsrc, refuses_a_list_and_opens_the_table_alone)
{
    char g[512];
    snprintf(g, sizeof g, "model = %s/tiny.csv, %s/tiny.csv", tmpdir, tmpdir);
    deftsim_config *cfg = config(g);
    deftsim_gradsrc *src = NULL;
    cr_expect_eq(deftsim_gradsrc_open(cfg, &src), DEFTSIM_E_INPUT);
    cr_expect_null(src);
    cr_expect(strstr(deftsim_error_message(), "is a list; deftsim run takes one"), "%s",
              deftsim_error_message());
    deftsim_config_free(cfg);

    /* The table alone, for deftsim train's check: the model, no generator. */
    snprintf(g, sizeof g, "model = %s/tiny.csv", tmpdir);
    cfg = config(g);
    cr_expect_eq(deftsim_gradsrc_named(cfg), 1);
    cr_expect_str_eq(deftsim_gradsrc_key(cfg), "model");
    cr_expect_str_eq(deftsim_gradsrc_name(cfg), cfg->gradients.model);
    cr_assert_eq(deftsim_gradsrc_open_table(cfg, &src), DEFTSIM_OK, "%s", deftsim_error_message());
    cr_expect_eq(deftsim_gradsrc_model(src)->numel, N);
    cr_expect_eq(deftsim_gradsrc_model(src)->nlayers, 6);
    deftsim_gradsrc_close(src);
    deftsim_config_free(cfg);
}

/* rows.csv's join: the header line dropped, every row after the prefix, a missing file named. */
Test(gradsrc, rows_join_drops_the_header_and_prefixes)
{
    char p[256];
    snprintf(p, sizeof p, "%s/point.csv", tmpdir);
    const char *text = "a,b\n1,2\n3,4\n";
    cr_assert_eq(deftsim_write_file_atomic(p, text, strlen(text)), DEFTSIM_OK);
    char *got = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&got, &len);
    cr_assert(out);
    cr_assert_eq(deftsim_rows_join(out, p, "x,"), DEFTSIM_OK);
    cr_assert_eq(deftsim_rows_join(out, p, ""), DEFTSIM_OK);
    snprintf(p, sizeof p, "%s/none.csv", tmpdir);
    cr_expect_eq(deftsim_rows_join(out, p, ""), DEFTSIM_E_IO);
    cr_expect(strstr(deftsim_error_message(), "none.csv: cannot read"), "%s",
              deftsim_error_message());
    fclose(out);
    cr_expect_str_eq(got, "x,1,2\nx,3,4\n1,2\n3,4\n");
    free(got);
}
