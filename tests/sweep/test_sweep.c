/* test_sweep.c - deftsim sweep on a tiny model: the plan (axes, variants, point files), resume,
 * the folder's identity, failed points, the lock, rows.csv and the listing deftsim analyze
 * reads; the command's exit codes. Suite fast (each sweep takes well under a second). */
#include <criterion/criterion.h>

#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "cli_run.h"
#include "deftsim_config.h"
#include "deftsim_engine.h"
#include "deftsim_gen.h"
#include "deftsim_model.h"
#include "deftsim_sweep.h"
#include "deftsim_util.h"

/* Six tensors, 3210 elements (as the engine's tests). */
static const char tiny_csv[] = "index,name,shape,numel\n"
                               "0,conv.weight,16x3x3x3,432\n"
                               "1,conv.bias,16,16\n"
                               "2,fc1.weight,64x32,2048\n"
                               "3,fc1.bias,64,64\n"
                               "4,fc2.weight,10x64,640\n"
                               "5,fc2.bias,10,10\n";
/* A second, smaller model for a list of models. */
static const char small_csv[] = "index,name,shape,numel\n"
                                "0,w,40x20,800\n"
                                "1,b,40,40\n";

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

static void put(const char *name, const char *text)
{
    char *p = in_tmp(name);
    char *slash = strrchr(p, '/');
    *slash = '\0';
    cr_assert_eq(deftsim_mkdir_p(p), DEFTSIM_OK);
    *slash = '/';
    cr_assert_eq(deftsim_write_file_atomic(p, text, strlen(text)), DEFTSIM_OK);
    free(p);
}

static void setup(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/deftsim-sweep-XXXXXX");
    cr_assert(mkdtemp(tmpdir), "mkdtemp");
    put("tiny.csv", tiny_csv);
    put("small.csv", small_csv);
}

static void teardown(void) { nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

TestSuite(sweep, .init = setup, .fini = teardown);

static deftsim_config *scenario(const char *out, const char *const *ov, size_t nov)
{
    char text[2048];
    snprintf(text, sizeof text,
             "[scenario]\nname = tiny\nseed = 7\niterations = 2\noutput = %s/%s\n"
             "[gradients]\nmodel = %s/tiny.csv\n"
             "[sparsify]\nmethods = deft, topk, gtopk\ndensities = 0.05\n"
             "[workers]\ncounts = 2..4\n",
             tmpdir, out, tmpdir);
    deftsim_config *cfg = NULL;
    deftsim_status st = deftsim_config_parse(text, "tiny.ini", ov, nov, &cfg);
    cr_assert_eq(st, DEFTSIM_OK, "%s", deftsim_error_message());
    return cfg;
}

static deftsim_sweep *new_sweep(const char *out, const char *const *ov, size_t nov,
                                const char *const *vary, size_t nvary)
{
    deftsim_config *cfg = scenario(out, ov, nov);
    deftsim_sweep_options o;
    memset(&o, 0, sizeof o);
    o.vary = vary;
    o.nvary = nvary;
    o.prep_threads = 2;
    deftsim_sweep *s;
    deftsim_status st = deftsim_sweep_new(cfg, &o, &s);
    deftsim_config_free(cfg);
    cr_assert_eq(st, DEFTSIM_OK, "%s", deftsim_error_message());
    return s;
}

static deftsim_sweep_summary run_sweep(deftsim_sweep *s, deftsim_status want)
{
    deftsim_sweep_summary sum;
    memset(&sum, 0, sizeof sum);
    deftsim_status st = deftsim_sweep_run(s, &sum);
    cr_assert_eq(st, want, "%s", deftsim_error_message());
    return sum;
}

static int exists(const char *rel)
{
    char *p = in_tmp(rel);
    struct stat sb;
    int ok = stat(p, &sb) == 0;
    free(p);
    return ok;
}

static json_t *manifest(const char *out)
{
    char rel[256];
    snprintf(rel, sizeof rel, "%s/manifest.json", out);
    char *p = in_tmp(rel);
    json_error_t e;
    json_t *m = json_load_file(p, 0, &e);
    cr_assert(m, "%s: %s", p, e.text);
    free(p);
    return m;
}

/* Lines of a text file (a CSV's rows plus header). */
static size_t count_lines(const char *rel)
{
    char *p = in_tmp(rel), *text;
    size_t len, n = 0;
    cr_assert_eq(deftsim_read_file(p, &text, &len), DEFTSIM_OK, "%s", deftsim_error_message());
    for (size_t i = 0; i < len; i++) n += text[i] == '\n';
    free(text);
    free(p);
    return n;
}

Test(sweep, runs_every_point_then_resumes_without_rerunning)
{
    deftsim_sweep *s = new_sweep("out", NULL, 0, NULL, 0);
    cr_assert_eq(deftsim_sweep_point_count(s), 3 * 2);
    cr_assert_eq(deftsim_sweep_variant_count(s), 1);
    deftsim_sweep_summary sum = run_sweep(s, DEFTSIM_OK);
    deftsim_sweep_free(s);
    cr_assert_eq(sum.planned, 6);
    cr_assert_eq(sum.ran, 6);
    cr_assert_eq(sum.skipped, 0);
    cr_assert_eq(sum.failed, 0);
    /* The same layout as deftsim run's point files, plus rows.csv and the manifest. */
    const char *files[] = {"out/points/deft_d0.05_P2.csv", "out/points/deft_d0.05_P4.csv",
                           "out/points/topk_d0.05_P2.csv", "out/points/gtopk_d0.05_P4.csv",
                           "out/rows.csv", "out/manifest.json"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) cr_assert(exists(files[i]), "%s", files[i]);
    size_t lines = count_lines("out/rows.csv");
    cr_assert_eq(lines - 1, sum.rows, "rows.csv holds every point's rows once");
    json_t *m = manifest("out");
    cr_assert_str_eq(json_string_value(json_object_get(m, "format")), "deftsim-sweep");
    cr_assert_str_eq(json_string_value(json_object_get(m, "status")), "complete");
    cr_assert_str_eq(json_string_value(json_object_get(m, "rows_csv")), "rows.csv");
    json_t *pts = json_object_get(m, "points");
    cr_assert_eq(json_array_size(pts), 6);
    for (size_t i = 0; i < 6; i++)
        cr_assert_str_eq(json_string_value(json_object_get(json_array_get(pts, i), "status")), "done");
    json_decref(m);

    /* Rerun: nothing runs, the point files stay as they were. */
    char *pf = in_tmp("out/points/deft_d0.05_P4.csv");
    struct stat before, after;
    cr_assert_eq(stat(pf, &before), 0);
    s = new_sweep("out", NULL, 0, NULL, 0);
    sum = run_sweep(s, DEFTSIM_OK);
    deftsim_sweep_free(s);
    cr_assert_eq(sum.ran, 0);
    cr_assert_eq(sum.skipped, 6);
    cr_assert_eq(stat(pf, &after), 0);
    cr_assert(before.st_mtim.tv_sec == after.st_mtim.tv_sec &&
              before.st_mtim.tv_nsec == after.st_mtim.tv_nsec && before.st_ino == after.st_ino,
              "a finished point is not written again");

    /* A lost point file is run again; more worker counts run only the new points. */
    cr_assert_eq(unlink(pf), 0);
    const char *more[] = {"workers.counts=2..8"};
    s = new_sweep("out", more, 1, NULL, 0);
    sum = run_sweep(s, DEFTSIM_OK);
    deftsim_sweep_free(s);
    cr_assert_eq(sum.planned, 9);
    cr_assert_eq(sum.ran, 4, "deft P=4 again and P=8 of each method");
    cr_assert_eq(sum.skipped, 5);
    cr_assert(exists("out/points/deft_d0.05_P4.csv"));
    /* A narrower sweep keeps the wider one's points as results. */
    const char *fewer[] = {"workers.counts=2"};
    s = new_sweep("out", fewer, 1, NULL, 0);
    sum = run_sweep(s, DEFTSIM_OK);
    deftsim_sweep_free(s);
    cr_assert_eq(sum.ran, 0);
    deftsim_result_set *rs;
    char *outdir = in_tmp("out");
    cr_assert_eq(deftsim_results_list(outdir, &rs), DEFTSIM_OK, "%s", deftsim_error_message());
    cr_assert_eq(rs->nfiles, 9, "every finished point of the folder");
    cr_assert_str_eq(rs->kind, "sweep");
    deftsim_results_free(rs);
    free(outdir);
    free(pf);
}

Test(sweep, refuses_a_folder_of_another_scenario)
{
    deftsim_sweep *s = new_sweep("out", NULL, 0, NULL, 0);
    run_sweep(s, DEFTSIM_OK);
    deftsim_sweep_free(s);
    const char *seed[] = {"scenario.seed=3"};
    s = new_sweep("out", seed, 1, NULL, 0);
    deftsim_sweep_summary sum = run_sweep(s, DEFTSIM_E_INPUT);
    cr_assert_eq(sum.ran, 0);
    cr_assert(strstr(deftsim_error_message(), "holds the points of another sweep ([scenario] seed: 3 here, 7 in the folder)"),
              "%s", deftsim_error_message());
    /* The dry run's reading refuses it the same way. */
    cr_assert_eq(deftsim_sweep_load_state(s), DEFTSIM_E_INPUT);
    deftsim_sweep_free(s);
    const char *its[] = {"scenario.iterations=3"};
    s = new_sweep("out", its, 1, NULL, 0);
    run_sweep(s, DEFTSIM_E_INPUT);
    cr_assert(strstr(deftsim_error_message(), "[scenario] iterations: 3 here, 2 in the folder"), "%s",
              deftsim_error_message());
    deftsim_sweep_free(s);
    /* The memory budget and the output folder do not change a point's rows. */
    const char *budget[] = {"engine.memory_budget=0.5"};
    s = new_sweep("out", budget, 1, NULL, 0);
    run_sweep(s, DEFTSIM_OK);
    deftsim_sweep_free(s);

    /* A deftsim run folder, and point files without a manifest. */
    put("runout/manifest.json", "{\"format\": \"deftsim-results\", \"format_version\": 1}\n");
    s = new_sweep("runout", NULL, 0, NULL, 0);
    run_sweep(s, DEFTSIM_E_INPUT);
    cr_assert(strstr(deftsim_error_message(), "the results of deftsim run"), "%s", deftsim_error_message());
    deftsim_sweep_free(s);
    char *d = in_tmp("stray/points");
    cr_assert_eq(deftsim_mkdir_p(d), DEFTSIM_OK);
    free(d);
    put("stray/points/topk_d0.05_P2.csv", "scenario\n");
    s = new_sweep("stray", NULL, 0, NULL, 0);
    run_sweep(s, DEFTSIM_E_INPUT);
    cr_assert(strstr(deftsim_error_message(), "holds point files but no manifest.json"), "%s",
              deftsim_error_message());
    deftsim_sweep_free(s);
}

/* The bytes of a file of the temporary folder (caller frees). */
static char *slurp_tmp(const char *rel, size_t *len)
{
    char *p = in_tmp(rel), *text;
    cr_assert_eq(deftsim_read_file(p, &text, len), DEFTSIM_OK, "%s", deftsim_error_message());
    free(p);
    return text;
}

/* deftsim run's engine with the sweep tests' scenario into out. */
static deftsim_engine *new_engine(const char *out, const char *const *ov, size_t nov)
{
    deftsim_config *cfg = scenario(out, ov, nov);
    deftsim_run_options o;
    deftsim_run_options_default(&o);
    o.prep_threads = 2;
    deftsim_engine *e;
    deftsim_status st = deftsim_engine_new(cfg, &o, &e);
    deftsim_config_free(cfg);
    cr_assert_eq(st, DEFTSIM_OK, "%s", deftsim_error_message());
    return e;
}

/* A run does not go over a sweep's folder nor another scenario's run, and a sweep does not go
 * over a run's folder: refused, every byte of the manifest left, no file added. */
Test(sweep, run_and_sweep_refuse_each_others_folders)
{
    deftsim_sweep *s = new_sweep("sw", NULL, 0, NULL, 0);
    run_sweep(s, DEFTSIM_OK);
    deftsim_sweep_free(s);
    size_t len0, len1;
    char *before = slurp_tmp("sw/manifest.json", &len0);
    deftsim_engine *e = new_engine("sw", NULL, 0);
    cr_assert_eq(deftsim_engine_check_output(e), DEFTSIM_E_INPUT);
    deftsim_run_summary rs;
    cr_assert_eq(deftsim_engine_run(e, &rs), DEFTSIM_E_INPUT);
    cr_assert(strstr(deftsim_error_message(), "/sw: the folder holds the points of deftsim sweep, "
                                              "not a run; run into another folder (--output DIR)"),
              "%s", deftsim_error_message());
    deftsim_engine_free(e);
    char *after = slurp_tmp("sw/manifest.json", &len1);
    cr_assert(len0 == len1 && !memcmp(before, after, len0), "the sweep's manifest changed");
    free(before);
    free(after);

    /* A run; the same scenario again replaces it, another is refused. */
    e = new_engine("rn", NULL, 0);
    cr_assert_eq(deftsim_engine_run(e, &rs), DEFTSIM_OK, "%s", deftsim_error_message());
    deftsim_engine_free(e);
    const char *budget[] = {"engine.memory_budget=0.5"};
    e = new_engine("rn", budget, 1);
    cr_assert_eq(deftsim_engine_check_output(e), DEFTSIM_OK, "%s", deftsim_error_message());
    deftsim_engine_free(e);
    const char *seed[] = {"scenario.seed=3"};
    e = new_engine("rn", seed, 1);
    cr_assert_eq(deftsim_engine_run(e, &rs), DEFTSIM_E_INPUT);
    cr_assert(strstr(deftsim_error_message(), "/rn holds the results of another run ([scenario] "
                                              "seed: 3 here, 7 in the folder); this run would "
                                              "replace them"),
              "%s", deftsim_error_message());
    deftsim_engine_free(e);
    before = slurp_tmp("rn/manifest.json", &len0);
    s = new_sweep("rn", NULL, 0, NULL, 0);
    run_sweep(s, DEFTSIM_E_INPUT);
    cr_assert(strstr(deftsim_error_message(), "the results of deftsim run, not a sweep"), "%s",
              deftsim_error_message());
    deftsim_sweep_free(s);
    cr_assert(!exists("rn/.sweep.lock"), "a refused sweep left its lock file");
    after = slurp_tmp("rn/manifest.json", &len1);
    cr_assert(len0 == len1 && !memcmp(before, after, len0), "the run's manifest changed");
    free(before);
    free(after);
}

/* [network] compute is part of the folder's identity; a folder written before the key existed
 * (its manifest lacks it) ran with its default, measured, and resumes as such. */
Test(sweep, network_compute_is_in_the_identity_and_old_folders_resume)
{
    deftsim_sweep *s = new_sweep("out", NULL, 0, NULL, 0);
    run_sweep(s, DEFTSIM_OK);
    deftsim_sweep_free(s);
    const char *none[] = {"network.compute=none"};
    s = new_sweep("out", none, 1, NULL, 0);
    deftsim_sweep_summary sum = run_sweep(s, DEFTSIM_E_INPUT);
    cr_assert_eq(sum.ran, 0);
    cr_assert(strstr(deftsim_error_message(),
                     "([network] compute: \"none\" here, \"measured\" in the folder)"),
              "%s", deftsim_error_message());
    deftsim_sweep_free(s);

    /* The manifest of an older deftsim: no [network] compute in its identity. */
    json_t *m = manifest("out");
    json_t *net = json_object_get(json_object_get(json_object_get(m, "identity"), "config"), "network");
    cr_assert(json_object_get(net, "compute"));
    cr_assert_eq(json_object_del(net, "compute"), 0);
    char *mp = in_tmp("out/manifest.json");
    cr_assert_eq(json_dump_file(m, mp, JSON_INDENT(2)), 0);
    json_decref(m);
    s = new_sweep("out", NULL, 0, NULL, 0);
    sum = run_sweep(s, DEFTSIM_OK);
    deftsim_sweep_free(s);
    cr_assert_eq(sum.ran, 0);
    cr_assert_eq(sum.skipped, 6);
    m = manifest("out"); /* rewritten with the key */
    net = json_object_get(json_object_get(json_object_get(m, "identity"), "config"), "network");
    cr_assert_str_eq(json_string_value(json_object_get(net, "compute")), "measured");
    cr_assert_eq(json_object_del(net, "compute"), 0);
    cr_assert_eq(json_dump_file(m, mp, JSON_INDENT(2)), 0);
    json_decref(m);
    s = new_sweep("out", none, 1, NULL, 0);
    run_sweep(s, DEFTSIM_E_INPUT);
    cr_assert(strstr(deftsim_error_message(), "[network] compute: \"none\" here, \"measured\" in the folder"),
              "%s", deftsim_error_message());
    deftsim_sweep_free(s);
    free(mp);

    /* A sweep with compute = none resumes as such. */
    s = new_sweep("out_none", none, 1, NULL, 0);
    sum = run_sweep(s, DEFTSIM_OK);
    deftsim_sweep_free(s);
    cr_assert_eq(sum.ran, 6);
    s = new_sweep("out_none", none, 1, NULL, 0);
    sum = run_sweep(s, DEFTSIM_OK);
    deftsim_sweep_free(s);
    cr_assert_eq(sum.skipped, 6);
    s = new_sweep("out_none", NULL, 0, NULL, 0);
    run_sweep(s, DEFTSIM_E_INPUT);
    cr_assert(strstr(deftsim_error_message(), "[network] compute: \"measured\" here, \"none\" in the folder"),
              "%s", deftsim_error_message());
    deftsim_sweep_free(s);
}

/* A folder written before the model tables' default sets (its identity has no params_used)
 * ran an unset params as the plain defaults: it resumes with params = none, which asks for
 * them now. */
Test(sweep, folders_from_before_default_sets_resume_with_params_none)
{
    deftsim_sweep *s = new_sweep("old", NULL, 0, NULL, 0);
    run_sweep(s, DEFTSIM_OK);
    deftsim_sweep_free(s);
    json_t *m = manifest("old");
    json_t *gr = json_object_get(json_object_get(json_object_get(m, "identity"), "config"), "gradients");
    cr_assert(json_is_null(json_object_get(gr, "params")));
    cr_assert_eq(json_object_del(gr, "params_used"), 0);
    char *mp = in_tmp("old/manifest.json");
    cr_assert_eq(json_dump_file(m, mp, JSON_INDENT(2)), 0);
    free(mp);
    json_decref(m);
    const char *none[] = {"gradients.params=none"};
    s = new_sweep("old", none, 1, NULL, 0);
    deftsim_sweep_summary sum = run_sweep(s, DEFTSIM_OK);
    deftsim_sweep_free(s);
    cr_assert_eq(sum.ran, 0);
    cr_assert_eq(sum.skipped, 6);
    /* Rewritten with params_used, the folder is one of params = none. */
    m = manifest("old");
    gr = json_object_get(json_object_get(json_object_get(m, "identity"), "config"), "gradients");
    cr_assert_str_eq(json_string_value(json_object_get(json_object_get(gr, "params_used"), "why")),
                     "none: params = none");
    json_decref(m);
}

/* A list of built-in tables with different default sets: each model's variant takes its own
 * table's set (the scenario's own keys still win), and its configuration says so. */
Test(sweep, model_list_takes_each_tables_set)
{
    const char *ov[] = {"gradients.model=resnet18_cifar10, bert_base_uncased", "synthetic.drift=0.02"};
    deftsim_config *cfg = scenario("sets", ov, 2);
    deftsim_sweep_options o;
    memset(&o, 0, sizeof o);
    deftsim_sweep *s;
    cr_assert_eq(deftsim_sweep_new(cfg, &o, &s), DEFTSIM_OK, "%s", deftsim_error_message());
    deftsim_config_free(cfg);
    cr_assert_eq(deftsim_sweep_variant_count(s), 2);
    const char *want[] = {"resnet18_fmnist_p8", "bert_small_pydoc_p8"};
    for (size_t v = 0; v < 2; v++) {
        const deftsim_config *c = deftsim_sweep_variant_config(s, v);
        deftsim_params_choice ch;
        deftsim_config_params_choice(c, &ch);
        cr_expect_eq(ch.why, DEFTSIM_PARAMS_TABLE, "variant %zu", v);
        cr_expect_str_eq(ch.set, want[v]);
        cr_expect_eq(c->synthetic.scales, 1, "variant %zu: the plain defaults", v);
        cr_expect_eq(c->synthetic.drift, 0.02);
    }
    cr_expect_neq(deftsim_sweep_variant_config(s, 0)->synthetic.kind_level[DEFTSIM_GEN_KIND_CONV],
                  deftsim_sweep_variant_config(s, 1)->synthetic.kind_level[DEFTSIM_GEN_KIND_CONV]);
    deftsim_params_choice ch;
    deftsim_config_params_choice(deftsim_sweep_config(s), &ch);
    cr_expect_eq(ch.why, DEFTSIM_PARAMS_PER_MODEL);
    deftsim_sweep_free(s);
}

Test(sweep, axes_from_a_model_list_and_vary)
{
    char models[600];
    snprintf(models, sizeof models, "gradients.model=%s/tiny.csv, %s/small.csv", tmpdir, tmpdir);
    const char *ov[] = {models, "sparsify.methods=topk, deft"};
    const char *vary[] = {"synthetic.signal=0.2, 0.9", "synthetic.tail=0"};
    deftsim_sweep *s = new_sweep("ax", ov, 2, vary, 2);
    cr_assert_eq(deftsim_sweep_variant_count(s), 4);
    cr_assert_eq(deftsim_sweep_point_count(s), 4 * 2 * 2);
    deftsim_sweep_summary sum = run_sweep(s, DEFTSIM_OK);
    deftsim_sweep_free(s);
    cr_assert_eq(sum.ran, 16);
    /* One folder per variant: the model's file name, then the value. */
    cr_assert(exists("ax/points/tiny_0.2/topk_d0.05_P2.csv"));
    cr_assert(exists("ax/points/small_0.9/deft_d0.05_P4.csv"));
    json_t *m = manifest("ax");
    json_t *axes = json_object_get(m, "axes");
    cr_assert_eq(json_array_size(axes), 2, "one value (tail = 0) is a setting, not an axis");
    cr_assert_str_eq(json_string_value(json_object_get(json_array_get(axes, 0), "key")), "gradients.model");
    cr_assert_str_eq(json_string_value(json_object_get(json_array_get(axes, 1), "key")), "synthetic.signal");
    json_t *v0 = json_object_get(json_array_get(json_object_get(m, "variants"), 0), "config");
    cr_assert_eq(json_number_value(json_object_get(json_object_get(v0, "synthetic"), "tail")), 0);
    json_decref(m);
    /* rows.csv: one leading column per axis. */
    char *p = in_tmp("ax/rows.csv"), *text;
    size_t len;
    cr_assert_eq(deftsim_read_file(p, &text, &len), DEFTSIM_OK);
    cr_assert(!strncmp(text, "gradients.model,synthetic.signal,scenario,model,", 48), "%.80s", text);
    char want[700];
    snprintf(want, sizeof want, "\n%s/small.csv,0.9,tiny,small,", tmpdir);
    cr_assert(strstr(text, want), "a small-model row with its axis values");
    free(text);
    free(p);
    /* The listing for analyze carries the axis values per file. */
    deftsim_result_set *rs;
    char *dir = in_tmp("ax");
    cr_assert_eq(deftsim_results_list(dir, &rs), DEFTSIM_OK, "%s", deftsim_error_message());
    cr_assert_eq(rs->naxes, 2);
    cr_assert_eq(rs->nfiles, 16);
    cr_assert_str_eq(rs->axes[1], "synthetic.signal");
    cr_assert(strstr(rs->files[0].path, "tiny_0.2/topk_d0.05_P2.csv"), "%s", rs->files[0].path);
    cr_assert_str_eq(rs->files[0].values[1], "0.2");
    cr_assert_str_eq(rs->files[15].values[1], "0.9");
    deftsim_results_free(rs);
    free(dir);
}

Test(sweep, bad_axes_are_refused)
{
    deftsim_config *cfg = scenario("x", NULL, 0);
    deftsim_sweep_options o;
    memset(&o, 0, sizeof o);
    deftsim_sweep *s;
    const char *cases[][2] = {
        {"workers.counts=2,4", "already a list every run goes through"},
        {"nosuch.key=1,2", "--vary nosuch.key: no such key"},
        {"synthetic.signal=0.2,,0.4", "an empty value"},
        {"synthetic.signal=0.2,0.2", "'0.2' given twice"},
        {"synthetic.signal=0.2,7", "--vary synthetic.signal=7: "},
        {"scenario.output=a,b", "a sweep writes one folder"},
        {"novalue", "expected section.key=v1,v2"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *vary[] = {cases[i][0]};
        o.vary = vary;
        o.nvary = 1;
        cr_assert_neq(deftsim_sweep_new(cfg, &o, &s), DEFTSIM_OK, "%s accepted", cases[i][0]);
        cr_assert(strstr(deftsim_error_message(), cases[i][1]), "%s: %s", cases[i][0],
                  deftsim_error_message());
    }
    deftsim_config_free(cfg);
    /* A model of the list that does not exist is named by the config check. */
    deftsim_config *bad;
    char text[512];
    snprintf(text, sizeof text, "[gradients]\nmodel = %s/tiny.csv, nosuchmodel\n", tmpdir);
    cr_assert_eq(deftsim_config_parse(text, "x.ini", NULL, 0, &bad), DEFTSIM_E_INPUT);
    cr_assert(strstr(deftsim_error_message(), "nosuchmodel"), "%s", deftsim_error_message());
}

/* Writes a trace of the tiny model with 4 workers and puts a NaN into worker 3's gradient of
 * iteration 1: every point with P = 4 must fail, the others not. */
static char *nan_trace(void)
{
    char *dir = in_tmp("trace");
    char *model = in_tmp("tiny.csv");
    deftsim_model *m;
    cr_assert_eq(deftsim_model_load(model, &m), DEFTSIM_OK);
    deftsim_gen_params gp;
    deftsim_gen_params_default(&gp);
    gp.seed = 7;
    deftsim_gen *g;
    cr_assert_eq(deftsim_gen_new(m, &gp, &g), DEFTSIM_OK);
    cr_assert_eq(deftsim_gen_write_trace(g, dir, 4, 2), DEFTSIM_OK, "%s", deftsim_error_message());
    deftsim_gen_free(g);
    deftsim_model_free(m);
    free(model);
    /* safetensors: 8-byte header length, JSON header, then the data. */
    char file[600];
    snprintf(file, sizeof file, "%s/iter_000001.safetensors", dir);
    FILE *f = fopen(file, "r+b");
    cr_assert(f);
    unsigned char lenb[8];
    cr_assert_eq(fread(lenb, 1, 8, f), 8);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = hl << 8 | lenb[i];
    char *hdr = calloc(hl + 1, 1);
    cr_assert_eq(fread(hdr, 1, hl, f), hl);
    json_error_t je;
    json_t *h = json_loads(hdr, 0, &je);
    cr_assert(h, "%s", je.text);
    json_t *off = json_object_get(json_object_get(h, "worker.0003"), "data_offsets");
    long begin = (long)json_integer_value(json_array_get(off, 0));
    float nan = NAN;
    cr_assert_eq(fseek(f, (long)(8 + hl) + begin + 4 * 100, SEEK_SET), 0);
    cr_assert_eq(fwrite(&nan, 4, 1, f), 1);
    fclose(f);
    json_decref(h);
    free(hdr);
    return dir;
}

Test(sweep, a_failed_point_does_not_lose_the_others)
{
    char *trace = nan_trace();
    char set[700];
    snprintf(set, sizeof set, "gradients.trace=%s", trace);
    const char *ov[] = {"gradients.model=", "gradients.source=trace", set};
    deftsim_sweep *s = new_sweep("fail", ov, 3, NULL, 0);
    /* A NaN is bad input: the sweep goes on, then fails as an input error (exit 2). */
    deftsim_sweep_summary sum = run_sweep(s, DEFTSIM_E_INPUT);
    deftsim_sweep_free(s);
    const char *msg = deftsim_error_message();
    cr_assert(strstr(msg, "3 of 6 points failed (the others are written; fix the input, then "
                          "rerun the sweep to retry):\n"), "%s", msg);
    /* The engine's message names the point once, the iteration and the value. */
    cr_assert(strstr(msg, "\n  deft d=0.05 P=4 iteration 1: "), "%s", msg);
    cr_assert(!strstr(msg, "P=4: deft"), "the point named twice: %s", msg);
    cr_assert(strstr(msg, "NaN (points/deft_d0.05_P4.failed)"), "%s", msg);
    cr_assert_eq(sum.ran, 3);
    cr_assert_eq(sum.failed, 3);
    cr_assert(exists("fail/points/topk_d0.05_P2.csv"));
    cr_assert(!exists("fail/points/topk_d0.05_P4.csv"));
    cr_assert(exists("fail/points/topk_d0.05_P4.failed"));
    cr_assert(!exists("fail/rows.csv"), "rows.csv waits for every point");
    json_t *m = manifest("fail");
    cr_assert_str_eq(json_string_value(json_object_get(m, "status")), "incomplete");
    json_decref(m);
    /* Analyze sees the finished points and says which failed. */
    deftsim_result_set *rs;
    char *dir = in_tmp("fail");
    cr_assert_eq(deftsim_results_list(dir, &rs), DEFTSIM_OK);
    cr_assert_eq(rs->nfiles, 3);
    int named = 0;
    for (size_t i = 0; rs->provenance[i]; i++)
        if (strstr(rs->provenance[i], "Failed (not in the tables): gtopk_d0.05_P4")) named = 1;
    cr_assert(named);
    deftsim_results_free(rs);
    /* A rerun retries the failed points only (and they fail again). */
    s = new_sweep("fail", ov, 3, NULL, 0);
    sum = run_sweep(s, DEFTSIM_E_INPUT);
    deftsim_sweep_free(s);
    cr_assert_eq(sum.skipped, 3);
    cr_assert_eq(sum.failed, 3);
    free(dir);
    free(trace);
}

Test(sweep, one_sweep_per_folder)
{
    deftsim_sweep *s = new_sweep("locked", NULL, 0, NULL, 0);
    char *d = in_tmp("locked");
    cr_assert_eq(deftsim_mkdir_p(d), DEFTSIM_OK);
    char *lock = in_tmp("locked/.sweep.lock");
    int fd = open(lock, O_RDWR | O_CREAT, 0644);
    cr_assert(fd >= 0);
    cr_assert_eq(flock(fd, LOCK_EX), 0);
    run_sweep(s, DEFTSIM_E_INPUT);
    cr_assert(strstr(deftsim_error_message(), "another deftsim sweep is writing this folder"), "%s",
              deftsim_error_message());
    close(fd);
    run_sweep(s, DEFTSIM_OK);
    deftsim_sweep_free(s);
    free(lock);
    free(d);
}

/* ---- the command -------------------------------------------------------------------------- */

/* Runs the deftsim program with args; its stdout and stderr as text (caller frees). Returns
 * the exit status. */
static int run_cli(const char *const *args, char **out, char **err)
{
    deftsim_test_run r = deftsim_test_cli(NULL, args);
    *out = r.out;
    *err = r.err;
    return r.rc;
}

Test(sweep, command_exit_codes_dry_run_and_progress_lines)
{
    char text[1024];
    snprintf(text, sizeof text,
             "[scenario]\nname = cli\nseed = 7\niterations = 2\n"
             "[gradients]\nmodel = %s/tiny.csv\n[sparsify]\nmethods = topk, deft\ndensities = 0.05\n"
             "[workers]\ncounts = 2..4\n",
             tmpdir);
    put("cli.ini", text);
    char *ini = in_tmp("cli.ini"), *outdir = in_tmp("cliout"), *out, *err;
    const char *dry[] = {"sweep", ini, "-o", outdir, "--dry-run", NULL};
    cr_assert_eq(run_cli(dry, &out, &err), 0, "%s", err);
    cr_assert(strstr(out, "4 points: 4 to run, 0 failed before (run again), 0 finished before (skipped)"),
              "%s", out);
    cr_assert(strstr(out, "points/deft_d0.05_P4.csv"), "%s", out);
    cr_assert(strstr(out, "largest P that fits"), "the memory plan: %s", out);
    cr_assert(!exists("cliout"), "a dry run writes nothing");
    free(out);
    free(err);
    const char *run[] = {"sweep", ini, "-o", outdir, "--progress", "lines", "-j", "2", NULL};
    cr_assert_eq(run_cli(run, &out, &err), 0, "%s", err);
    cr_assert(strstr(err, "deftsim sweep: [1/4] topk d=0.05 P=2: "), "%s", err);
    cr_assert(strstr(err, "deftsim sweep: [4/4] deft d=0.05 P=4: "), "%s", err);
    cr_assert(strstr(err, "next: deftsim analyze"), "%s", err);
    free(out);
    free(err);
    cr_assert_eq(run_cli(run, &out, &err), 0, "%s", err);
    cr_assert(strstr(err, "4 finished earlier, skipped"), "%s", err);
    free(out);
    free(err);
    cr_assert_eq(run_cli(dry, &out, &err), 0, "%s", err);
    cr_assert(strstr(out, "4 points: 0 to run, 0 failed before (run again), 4 finished before"), "%s", out);
    free(out);
    free(err);
    /* Another seed into the same folder: refused, exit 2. */
    const char *other[] = {"sweep", ini, "-o", outdir, "--set", "scenario.seed=9", NULL};
    cr_assert_eq(run_cli(other, &out, &err), 2);
    cr_assert(strstr(err, "[scenario] seed: 9 here, 7 in the folder"), "%s", err);
    free(out);
    free(err);
    const char *bad[] = {"sweep", ini, "--progress", "fancy", NULL};
    cr_assert_eq(run_cli(bad, &out, &err), 2);
    free(out);
    free(err);
    /* deftsim run refuses a list of models and points to the sweep. */
    char setm[700];
    snprintf(setm, sizeof setm, "gradients.model=%s/tiny.csv, %s/small.csv", tmpdir, tmpdir);
    const char *runlist[] = {"run", ini, "--set", setm, NULL};
    cr_assert_eq(run_cli(runlist, &out, &err), 2);
    cr_assert(strstr(err, "is a list; deftsim run takes one (deftsim sweep runs each in turn)"), "%s", err);
    free(out);
    free(err);
    free(ini);
    free(outdir);
}

Test(sweep, command_exit_code_two_when_a_point_fails_on_bad_input)
{
    char *trace = nan_trace();
    char text[1024];
    snprintf(text, sizeof text,
             "[scenario]\nname = nan\niterations = 2\n[gradients]\nsource = trace\ntrace = %s\n"
             "[sparsify]\nmethods = topk\ndensities = 0.05\n[workers]\ncounts = 2..4\n",
             trace);
    put("nan.ini", text);
    char *ini = in_tmp("nan.ini"), *outdir = in_tmp("nanout"), *out, *err;
    const char *run[] = {"sweep", ini, "-o", outdir, "--progress", "lines", NULL};
    cr_assert_eq(run_cli(run, &out, &err), 2, "%s", err);
    cr_assert(strstr(err, "[2/2] FAILED: topk d=0.05 P=4 iteration 1: "), "%s", err);
    cr_assert(strstr(err, "deftsim: input error: 1 of 2 points failed"), "%s", err);
    cr_assert(!strstr(err, "P=4: topk"), "the point named twice: %s", err);
    cr_assert(exists("nanout/points/topk_d0.05_P2.csv"));
    free(out);
    free(err);
    free(ini);
    free(outdir);
    free(trace);
}

/* The progress callback hears BEGIN, then START and DONE around every point run, then END, and
 * can read each point as it stands; the library itself prints nothing. */
typedef struct {
    char log[4096];
    size_t len;
    size_t skipped;
    int done_ok_seen_state; /* every DONE saw its point DONE with rows */
} event_log;

static void on_event(void *user, const deftsim_sweep_event *ev)
{
    event_log *l = user;
    char words[512] = "";
    if (ev->kind == DEFTSIM_SWEEP_POINT_START || ev->kind == DEFTSIM_SWEEP_POINT_DONE)
        deftsim_sweep_point_words(ev->sweep, ev->point, words, sizeof words);
    static const char *const kinds[] = {"begin", "start", "done", "end"};
    l->len += (size_t)snprintf(l->log + l->len, sizeof l->log - l->len, "%s%s%s%s;",
                               kinds[ev->kind], words[0] ? " " : "", words,
                               ev->kind == DEFTSIM_SWEEP_POINT_DONE && !ev->ok ? " FAILED" : "");
    if (ev->kind == DEFTSIM_SWEEP_BEGIN) l->skipped = ev->skipped;
    if (ev->kind == DEFTSIM_SWEEP_POINT_DONE && ev->ok) {
        deftsim_sweep_point_info pi;
        deftsim_sweep_point_info_get(ev->sweep, ev->point, &pi);
        if (pi.state != DEFTSIM_POINT_DONE || !pi.ran_now || pi.rows == 0)
            l->done_ok_seen_state = 0;
    }
}

Test(sweep, progress_callback_hears_every_point)
{
    const char *ov[] = {"sparsify.methods=topk", "workers.counts=2,3"};
    deftsim_config *cfg = scenario("cb", ov, 2);
    event_log l;
    memset(&l, 0, sizeof l);
    l.done_ok_seen_state = 1;
    deftsim_sweep_options o;
    memset(&o, 0, sizeof o);
    o.prep_threads = 2;
    o.progress = (deftsim_sweep_progress){on_event, &l};
    deftsim_sweep *s;
    cr_assert_eq(deftsim_sweep_new(cfg, &o, &s), DEFTSIM_OK, "%s", deftsim_error_message());
    run_sweep(s, DEFTSIM_OK);
    deftsim_sweep_free(s);
    cr_expect_str_eq(l.log, "begin;start topk d=0.05 P=2;done topk d=0.05 P=2;"
                            "start topk d=0.05 P=3;done topk d=0.05 P=3;end;");
    cr_expect_eq(l.skipped, 0);
    cr_expect(l.done_ok_seen_state, "a finished point reads as done, with its rows");

    /* Resumed: nothing runs, BEGIN says both were skipped. */
    memset(&l, 0, sizeof l);
    cr_assert_eq(deftsim_sweep_new(cfg, &o, &s), DEFTSIM_OK);
    run_sweep(s, DEFTSIM_OK);
    deftsim_sweep_free(s);
    cr_expect_str_eq(l.log, "begin;end;");
    cr_expect_eq(l.skipped, 2);
    deftsim_config_free(cfg);
}

/* --shard I/N deals the points by estimated cost (gradient elements x P x iterations): on the
 * default study (7 methods at P = 2, 4, ..., 64) every shard's estimated work is within 20 %
 * of every other's for N = 2, 3 and 4, and every shard computes the same deal. Dealt by plan
 * index mod N instead, shard 0 of 2 would get every P = 2, 8, 32 and shard 1 every P = 4, 16,
 * 64: twice the work. */
Test(sweep, shards_are_dealt_by_estimated_cost)
{
    const char *root = getenv("DEFTSIM_SOURCE_ROOT");
    cr_assert(root, "DEFTSIM_SOURCE_ROOT is not set (run the tests through meson test)");
    char ini[4200];
    snprintf(ini, sizeof ini, "%s/scenarios/resnet18_default.ini", root);
    deftsim_config *cfg;
    cr_assert_eq(deftsim_config_load(ini, NULL, 0, &cfg), DEFTSIM_OK, "%s", deftsim_error_message());
    for (unsigned n = 2; n <= 4; n++) {
        size_t npoints = 0;
        unsigned *deal = NULL;
        double load[4] = {0, 0, 0, 0}, mod[4] = {0, 0, 0, 0};
        for (unsigned i = 0; i < n; i++) {
            deftsim_sweep_options so;
            memset(&so, 0, sizeof so);
            so.shard_index = i;
            so.shard_count = n;
            deftsim_sweep *sw;
            cr_assert_eq(deftsim_sweep_new(cfg, &so, &sw), DEFTSIM_OK, "%s", deftsim_error_message());
            npoints = deftsim_sweep_point_count(sw);
            cr_assert_eq(npoints, 42);
            if (!deal) cr_assert(deal = calloc(npoints, sizeof *deal));
            for (size_t k = 0; k < npoints; k++) {
                deftsim_sweep_point_info pi;
                deftsim_sweep_point_info_get(sw, k, &pi);
                cr_assert_eq(pi.cost, 11173962.0 * pi.P * 5, "n x P x iterations");
                if (i == 0) {
                    deal[k] = pi.shard;
                    load[pi.shard] += pi.cost;
                    mod[k % n] += pi.cost;
                }
                cr_expect_eq(pi.shard, deal[k], "shard %u/%u deals point %zu alike", i, n, k);
                cr_expect_eq(pi.in_shard, pi.shard == i);
            }
            deftsim_sweep_free(sw);
        }
        double lo = load[0], hi = load[0], mlo = mod[0], mhi = mod[0];
        for (unsigned i = 1; i < n; i++) {
            lo = fmin(lo, load[i]);
            hi = fmax(hi, load[i]);
            mlo = fmin(mlo, mod[i]);
            mhi = fmax(mhi, mod[i]);
        }
        cr_expect(hi <= 1.2 * lo, "N = %u: estimated work from %g to %g", n, lo, hi);
        cr_log_info("N = %u: shards' estimated work %.3g .. %.3g (x %.3f); by index mod N x %.3f",
                    n, lo, hi, hi / lo, mhi / mlo);
        if (n == 2) cr_expect(mhi > 1.9 * mlo, "the old rule's imbalance, for reference");
        free(deal);
    }
    deftsim_config_free(cfg);
}
