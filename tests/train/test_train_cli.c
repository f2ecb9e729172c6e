/* test_train_cli.c - `deftsim train` and `deftsim trace record` end to end, and the shipped
 * trace traces/fmnist_cnn_p4 through `deftsim trace info`, `check` and `run`. */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli_run.h"
#include "deftsim_trace.h"
#include "deftsim_util.h"

typedef deftsim_test_run run_result;

/* Runs $DEFTSIM_EXE with args (NULL-terminated) in the source tree. */
static run_result run(const char *const *args)
{
    const char *root = getenv("DEFTSIM_SOURCE_ROOT");
    cr_assert(root, "DEFTSIM_SOURCE_ROOT must be set (meson test does)");
    return deftsim_test_cli(root, args);
}

static void run_free(run_result *r)
{
    free(r->out);
    free(r->err);
}

static void expect_has(const char *text, const char *want)
{
    cr_expect(strstr(text, want), "output lacks '%s':\n%s", want, text);
}

static char tmp[64];

static void setup(void)
{
    snprintf(tmp, sizeof tmp, "/tmp/deftsim-traincli-XXXXXX");
    cr_assert(mkdtemp(tmp));
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    cr_expect_eq(system(cmd), 0);
}

/* The shipped trace: structure, provenance, norms, finite values. */
Test(train_cli, shipped_trace_info)
{
    run_result r = run((const char *[]){"trace", "info", "traces/fmnist_cnn_p4", NULL});
    cr_expect_eq(r.rc, 0, "%s", r.err);
    expect_has(r.out, "model       fmnist_cnn: 8 tensors, 421642 elements");
    expect_has(r.out, "workers     4");
    expect_has(r.out, "iterations  2 (ids 20 .. 200)");
    expect_has(r.out, "\"recorder\":\"deftsim ");
    expect_has(r.out, "\"dataset\":{\"name\":\"Fashion-MNIST\"");
    expect_has(r.out, "\"batch_size\":32");
    expect_has(r.out, "\"seed\":1");
    expect_has(r.out, "fc1.weight");
    expect_has(r.out, "non-finite values: none");
    run_free(&r);
    r = run((const char *[]){"trace", "check", "traces/fmnist_cnn_p4", NULL});
    cr_expect_eq(r.rc, 0, "%s", r.err);
    expect_has(r.out, "2 iterations x 4 workers, every value finite");
    run_free(&r);
}

/* The shipped trace drives `deftsim run` (the quickstart's replay of real gradients). */
Test(train_cli, shipped_trace_runs, .init = setup, .fini = teardown)
{
    char out[128], set_out[160];
    snprintf(out, sizeof out, "%s/run", tmp);
    snprintf(set_out, sizeof set_out, "scenario.output=%s", out);
    run_result r = run((const char *[]){"run", "scenarios/train_cnn.ini", "-q", "--set", set_out,
                                        "--set", "gradients.source=trace", "--set",
                                        "gradients.model=", "--set",
                                        "gradients.trace=traces/fmnist_cnn_p4", "--set",
                                        "scenario.iterations=2", "--set",
                                        "sparsify.methods=deft,topk", "--set",
                                        "workers.counts=2,4", "--set", "network.simulate=0",
                                        NULL});
    cr_expect_eq(r.rc, 0, "%s", r.err);
    char path[300];
    snprintf(path, sizeof path, "%s/rows.csv", out);
    char *rows;
    size_t len;
    cr_assert_eq(deftsim_read_file(path, &rows, &len), DEFTSIM_OK, "%s", deftsim_error_message());
    expect_has(rows, ",fmnist_cnn,421642,trace,deft,0.01,4216,4,");
    free(rows);
    run_free(&r);
}

Test(train_cli, train_and_record, .init = setup, .fini = teardown)
{
    char set_out[160], rec[160];
    snprintf(set_out, sizeof set_out, "scenario.output=%s/train", tmp);
    snprintf(rec, sizeof rec, "%s/rec", tmp);
    const char *common[] = {"--set", "train.train_samples=512", "--set", "train.eval_samples=100",
                            "--set", "train.batch_size=8", "--set", "scenario.iterations=4",
                            "--set", "train.eval_every=2", "--set", "sparsify.methods=dense,gtopk",
                            "--set", "sparsify.densities=0.01", "--set", "workers.counts=2,3",
                            "--set", "network.simulate=0"};
    const char *args[40] = {"train", "scenarios/train_mlp.ini", "-q", "--set", set_out};
    size_t n = 5;
    for (size_t i = 0; i < sizeof common / sizeof common[0]; i++) args[n++] = common[i];
    args[n] = NULL;
    run_result r = run(args);
    cr_expect_eq(r.rc, 0, "%s", r.err);
    cr_expect_str_eq(r.err, "");
    run_free(&r);
    const char *files[] = {"curves.csv", "final.csv", "manifest.json",
                           "points/dense_d1_P2.csv", "points/gtopk_d0.01_P3.csv"};
    for (size_t i = 0; i < 5; i++) {
        char p[300];
        snprintf(p, sizeof p, "%s/train/%s", tmp, files[i]);
        cr_expect_eq(access(p, R_OK), 0, "%s missing", p);
    }
    char p[300], *text;
    size_t len;
    snprintf(p, sizeof p, "%s/train/curves.csv", tmp);
    cr_assert_eq(deftsim_read_file(p, &text, &len), DEFTSIM_OK);
    expect_has(text, "scenario,model,n,method,density,k,P,batch_size,lr,iteration,epoch,samples,"
                     "train_loss,train_accuracy,test_loss,test_accuracy,buildup,density_actual,"
                     "compute_seconds,sparsify_seconds,wall_seconds,sim_seconds,sim_comm_seconds,"
                     "diverged\n");
    /* 512 images / (3 workers x 8) = 21 iterations an epoch. */
    expect_has(text, "train_mlp,fmnist_mlp,535818,gtopk,0.01,5358,3,8,0.05,4,0.19047619047619047,96,");
    /* Iteration 0 (the initial model): test metrics, the training columns empty. */
    expect_has(text, "train_mlp,fmnist_mlp,535818,gtopk,0.01,5358,3,8,0.05,0,0,0,,,");
    /* 4 points (dense once per P) x 3 rows (iterations 0, 2, 4) + the header. */
    size_t lines = 0;
    for (char *c = text; *c; c++) lines += *c == '\n';
    cr_expect_eq(lines, 13);
    free(text);

    args[0] = "trace";
    args[1] = "record";
    args[2] = "scenarios/train_mlp.ini";
    args[3] = "-q";
    args[4] = "-o";
    args[5] = rec;
    n = 6;
    for (size_t i = 0; i < sizeof common / sizeof common[0]; i++) args[n++] = common[i];
    args[n] = NULL;
    r = run(args);
    cr_expect_eq(r.rc, 2, "two worker counts and no --workers");
    expect_has(r.err, "record: [workers] counts lists 2 worker counts; choose one with --workers");
    run_free(&r);
    args[n++] = "--workers";
    args[n++] = "3";
    args[n++] = "--set";
    args[n++] = "train.record=1,3";
    args[n] = NULL;
    r = run(args);
    cr_expect_eq(r.rc, 0, "%s", r.err);
    run_free(&r);
    deftsim_trace *t;
    cr_assert_eq(deftsim_trace_open(rec, &t), DEFTSIM_OK, "%s", deftsim_error_message());
    cr_expect_eq(deftsim_trace_workers(t), 3);
    cr_expect_eq(deftsim_trace_iterations(t), 2);
    deftsim_trace_close(t);
}

Test(train_cli, tables_and_usage)
{
    run_result r = run((const char *[]){"train", "--table", "cnn", NULL});
    cr_expect_eq(r.rc, 0);
    char *want, path[4200];
    size_t len;
    snprintf(path, sizeof path, "%s/train/models/fmnist_cnn.csv", getenv("DEFTSIM_SOURCE_ROOT"));
    cr_assert_eq(deftsim_read_file(path, &want, &len), DEFTSIM_OK);
    cr_expect_str_eq(r.out, want);
    free(want);
    run_free(&r);
    r = run((const char *[]){"train", "--table", "rnn", NULL});
    cr_expect_eq(r.rc, 2);
    expect_has(r.err, "--table: 'rnn' is not mlp or cnn");
    run_free(&r);
    r = run((const char *[]){"train", NULL});
    cr_expect_eq(r.rc, 2);
    expect_has(r.err, "missing SCENARIO");
    run_free(&r);
    r = run((const char *[]){"trace", "record", "scenarios/train_cnn.ini", NULL});
    cr_expect_eq(r.rc, 2);
    expect_has(r.err, "record needs -o DIR");
    run_free(&r);
    r = run((const char *[]){"trace", "record", "scenarios/train_cnn.ini", "-o", "/tmp/x", "--method",
                             "sgd", NULL});
    cr_expect_eq(r.rc, 2);
    expect_has(r.err, "--method: 'sgd' is not a method");
    run_free(&r);
}
