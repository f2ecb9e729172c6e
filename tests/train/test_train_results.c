/* test_train_results.c - `deftsim analyze` and `deftsim plot` on real deftsim train folders
 * (tiny runs made here): the summary's numbers recomputed from the point files, repeats over
 * two seeds, the figures, and bad inputs (exit 2, the message naming the file). */
#include <criterion/criterion.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli_run.h"
#include "deftsim_analysis.h"
#include "deftsim_util.h"

static char tmp[64];

static void setup(void)
{
    snprintf(tmp, sizeof tmp, "/tmp/deftsim-trainres-XXXXXX");
    cr_assert(mkdtemp(tmp));
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    cr_expect_eq(system(cmd), 0);
}

static deftsim_test_run run(const char *const *args)
{
    const char *root = getenv("DEFTSIM_SOURCE_ROOT");
    cr_assert(root, "DEFTSIM_SOURCE_ROOT must be set (meson test does)");
    return deftsim_test_cli(root, args);
}

static void run_free(deftsim_test_run *r)
{
    free(r->out);
    free(r->err);
}

/* A tiny training run into tmp/name: dense, DEFT and Top-k at P = 2, 6 iterations, a row every
 * 2, with the network simulated; [gradients] model left unset (train does without). */
static void train(const char *name, const char *seed)
{
    char out[160], sd[64];
    snprintf(out, sizeof out, "scenario.output=%s/%s", tmp, name);
    snprintf(sd, sizeof sd, "scenario.seed=%s", seed);
    deftsim_test_run r = run((const char *[]){
        "train", "scenarios/train_mlp.ini", "-q", "--set", out, "--set", sd, "--set",
        "gradients.model=", "--set", "train.train_samples=512", "--set", "train.eval_samples=100",
        "--set", "train.batch_size=8", "--set", "scenario.iterations=6", "--set",
        "train.eval_every=2", "--set", "sparsify.methods=dense,deft,topk", "--set",
        "sparsify.densities=0.01", "--set", "workers.counts=2", NULL});
    cr_assert_eq(r.rc, 0, "deftsim train: %s", r.err);
    run_free(&r);
}

typedef struct {
    double final_acc, best_acc, final_loss, final_sim, it;
    double acc[16], iter[16], sim[16];
    size_t n;
} point_rows;

/* A point file's rows, read independently of the analysis. */
static void read_point(const char *dir, const char *file, point_rows *p)
{
    char path[300];
    snprintf(path, sizeof path, "%s/points/%s", dir, file);
    memset(p, 0, sizeof *p);
    deftsim_csvr *r;
    cr_assert_eq(deftsim_csvr_open(path, &r), DEFTSIM_OK, "%s", deftsim_error_message());
    long ca = deftsim_csvr_find(r, "test_accuracy"), cl = deftsim_csvr_find(r, "test_loss");
    long ci = deftsim_csvr_find(r, "iteration"), cs = deftsim_csvr_find(r, "sim_seconds");
    int got;
    p->best_acc = -1;
    while (deftsim_csvr_next(r, &got) == DEFTSIM_OK && got && p->n < 16) {
        p->acc[p->n] = atof(deftsim_csvr_field(r, (size_t)ca));
        p->iter[p->n] = atof(deftsim_csvr_field(r, (size_t)ci));
        p->sim[p->n] = atof(deftsim_csvr_field(r, (size_t)cs));
        p->final_loss = atof(deftsim_csvr_field(r, (size_t)cl));
        if (p->acc[p->n] > p->best_acc) p->best_acc = p->acc[p->n];
        p->n++;
    }
    deftsim_csvr_close(r);
    cr_assert_gt(p->n, 0);
    p->final_acc = p->acc[p->n - 1];
    p->final_sim = p->sim[p->n - 1];
    p->it = p->iter[p->n - 1];
}

/* The summary.csv row of a method as name -> value lookups. */
typedef struct {
    char cols[64][48];
    char vals[64][48];
    size_t n;
} srow;

static int find_row(const char *csv, const char *method, srow *out)
{
    deftsim_csvr *r;
    cr_assert_eq(deftsim_csvr_open(csv, &r), DEFTSIM_OK, "%s", deftsim_error_message());
    long cm = deftsim_csvr_find(r, "method");
    cr_assert_geq(cm, 0);
    int got, found = 0;
    while (!found && deftsim_csvr_next(r, &got) == DEFTSIM_OK && got) {
        if (strcmp(deftsim_csvr_field(r, (size_t)cm), method)) continue;
        out->n = deftsim_csvr_ncols(r);
        cr_assert_leq(out->n, 64);
        for (size_t i = 0; i < out->n; i++) {
            snprintf(out->cols[i], 48, "%s", deftsim_csvr_colname(r, i));
            snprintf(out->vals[i], 48, "%s", deftsim_csvr_field(r, i));
        }
        found = 1;
    }
    deftsim_csvr_close(r);
    return found;
}

static const char *cell(const srow *s, const char *col)
{
    for (size_t i = 0; i < s->n; i++)
        if (!strcmp(s->cols[i], col)) return s->vals[i];
    cr_assert_fail("summary.csv has no column %s", col);
    return NULL;
}

static double num(const srow *s, const char *col)
{
    const char *v = cell(s, col);
    return *v ? strtod(v, NULL) : NAN;
}

static void expect_has(const char *text, const char *want)
{
    cr_expect(strstr(text, want), "output lacks '%s':\n%s", want, text);
}

static int file_nonempty(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && sb.st_size > 0;
}

Test(train_results, analyze_one_and_two_seeds, .init = setup, .fini = teardown)
{
    train("s1", "1");
    char d1[128], csv[200], md[200];
    snprintf(d1, sizeof d1, "%s/s1", tmp);
    snprintf(csv, sizeof csv, "%s/summary.csv", d1);
    snprintf(md, sizeof md, "%s/summary.md", d1);
    deftsim_test_run r = run((const char *[]){"analyze", d1, "-q", NULL});
    cr_assert_eq(r.rc, 0, "%s", r.err);
    run_free(&r);

    static const char *const meth[] = {"dense", "deft", "topk"};
    static const char *const file[] = {"dense_d1_P2.csv", "deft_d0.01_P2.csv", "topk_d0.01_P2.csv"};
    point_rows pr[3];
    for (size_t m = 0; m < 3; m++) read_point(d1, file[m], &pr[m]);
    double target = 0.95 * pr[0].final_acc;  /* the default: dense:0.95 */
    for (size_t m = 0; m < 3; m++) {
        srow s;
        cr_assert(find_row(csv, meth[m], &s), "no %s row in %s", meth[m], csv);
        cr_expect_eq(num(&s, "P"), 2);
        cr_expect_str_eq(cell(&s, "repeats"), "1");
        cr_expect_str_eq(cell(&s, "seeds"), "1");
        cr_expect_eq(num(&s, "iterations"), pr[m].it);
        cr_expect_eq(num(&s, "final_accuracy_median"), pr[m].final_acc, "%s", meth[m]);
        cr_expect_eq(num(&s, "best_accuracy_median"), pr[m].best_acc, "%s", meth[m]);
        cr_expect_eq(num(&s, "final_test_loss_median"), pr[m].final_loss, "%s", meth[m]);
        cr_expect_eq(num(&s, "sim_seconds_median"), pr[m].final_sim, "%s", meth[m]);
        /* One repeat: no interval. */
        cr_expect_str_eq(cell(&s, "final_accuracy_lo"), "");
        cr_expect_str_eq(cell(&s, "final_accuracy_hi"), "");
        cr_expect_eq(num(&s, "target_accuracy"), target);
        double it = NAN, sim = NAN;
        for (size_t i = 0; i < pr[m].n; i++)
            if (pr[m].acc[i] >= target) {
                it = pr[m].iter[i];
                sim = pr[m].sim[i];
                break;
            }
        if (isnan(it)) {
            cr_expect_str_eq(cell(&s, "target_reached"), "0", "%s", meth[m]);
            cr_expect_str_eq(cell(&s, "target_iterations_median"), "");
        } else {
            cr_expect_str_eq(cell(&s, "target_reached"), "1", "%s", meth[m]);
            cr_expect_eq(num(&s, "target_iterations_median"), it, "%s", meth[m]);
            cr_expect_eq(num(&s, "target_sim_seconds_median"), sim, "%s", meth[m]);
        }
    }
    char *text;
    size_t len;
    cr_assert_eq(deftsim_read_file(md, &text, &len), DEFTSIM_OK);
    expect_has(text, "**One repeat per point**");
    /* The conditions: the network of the run and where its compute phases were timed. */
    expect_has(text, "Conditions: network: preset none, MPI (allreduce ");
    expect_has(text, "compute phases (selection etc.) timed on this machine's CPU (");
    cr_expect(!strstr(text, "NCCL"), "an MPI run's summary.md claims NCCL");
    expect_has(text, "| DEFT | 0.01 | 2 | 1 | 6 |");
    expect_has(text, "| dense allreduce | all | 2 | 1 | 6 |");
    free(text);

    /* A second seed: two repeats, medians over both, bootstrap intervals within them; an
     * absolute target. */
    train("s2", "2");
    char d2[128];
    snprintf(d2, sizeof d2, "%s/s2", tmp);
    char out[128];
    snprintf(out, sizeof out, "%s/both", tmp);
    r = run((const char *[]){"analyze", d1, d2, "-o", out, "--target", "0.2", "-q", NULL});
    cr_assert_eq(r.rc, 0, "%s", r.err);
    run_free(&r);
    snprintf(csv, sizeof csv, "%s/summary.csv", out);
    for (size_t m = 0; m < 3; m++) {
        point_rows q;
        read_point(d2, file[m], &q);
        srow s;
        cr_assert(find_row(csv, meth[m], &s));
        cr_expect_str_eq(cell(&s, "repeats"), "2");
        cr_expect_str_eq(cell(&s, "seeds"), "1;2");
        cr_expect_eq(num(&s, "target_accuracy"), 0.2);
        double lo = fmin(pr[m].final_acc, q.final_acc), hi = fmax(pr[m].final_acc, q.final_acc);
        /* The median of two values is their mean (GSL). */
        cr_expect_float_eq(num(&s, "final_accuracy_median"), (lo + hi) / 2, 1e-12);
        cr_expect_float_eq(num(&s, "final_accuracy_mean"), (lo + hi) / 2, 1e-12);
        cr_expect_geq(num(&s, "final_accuracy_lo"), lo);
        cr_expect_leq(num(&s, "final_accuracy_hi"), hi);
        cr_expect_leq(num(&s, "final_accuracy_lo"), num(&s, "final_accuracy_hi"));
    }
    snprintf(md, sizeof md, "%s/summary.md", out);
    cr_assert_eq(deftsim_read_file(md, &text, &len), DEFTSIM_OK);
    expect_has(text, "Repeats: each folder is one repeat (one seed)");
    expect_has(text, "Target: a test accuracy of 20%.");
    free(text);

    /* The same seed twice, a bad target, --warmup. */
    r = run((const char *[]){"analyze", d1, d1, "-o", out, NULL});
    cr_expect_eq(r.rc, 2);
    expect_has(r.err, "were both trained with seed 1");
    run_free(&r);
    r = run((const char *[]){"analyze", d1, "--target", "1.5", NULL});
    cr_expect_eq(r.rc, 2);
    expect_has(r.err, "--target: '1.5' is not ACC or dense:F");
    run_free(&r);
    r = run((const char *[]){"analyze", d1, "--warmup", "2", NULL});
    cr_expect_eq(r.rc, 2);
    expect_has(r.err, "--warmup does not apply to training results");
    run_free(&r);
}

Test(train_results, plot_and_bad_inputs, .init = setup, .fini = teardown)
{
    train("s1", "1");
    char d1[128], p[300];
    snprintf(d1, sizeof d1, "%s/s1", tmp);
    if (system("command -v gnuplot >/dev/null 2>&1") == 0) {
        deftsim_test_run r = run((const char *[]){"plot", d1, "--pdf", "-q", NULL});
        cr_assert_eq(r.rc, 0, "%s", r.err);
        run_free(&r);
        /* test_*: they show the test set's accuracy and loss. */
        static const char *const figs[] = {"test_accuracy_vs_iteration", "test_accuracy_vs_time",
                                           "test_loss_vs_iteration", "test_loss_vs_time"};
        static const char *const ext[] = {"png", "svg", "pdf"};
        for (size_t f = 0; f < 4; f++)
            for (size_t e = 0; e < 3; e++) {
                snprintf(p, sizeof p, "%s/plots/%s.%s", d1, figs[f], ext[e]);
                cr_expect(file_nonempty(p), "%s not written", p);
                snprintf(p, sizeof p, "%s/plots/train_%s.%s", d1, figs[f] + 5, ext[e]);
                cr_expect(access(p, F_OK) != 0, "%s: the old name is written", p);
            }
        /* Under the subtitle: the network and where the compute phases were timed. */
        snprintf(p, sizeof p, "%s/plots/test_accuracy_vs_time.svg", d1);
        char *svg;
        size_t slen;
        cr_assert_eq(deftsim_read_file(p, &svg, &slen), DEFTSIM_OK, "%s", deftsim_error_message());
        expect_has(svg, "network: preset none, MPI (allreduce ");
        expect_has(svg, "compute phases (selection etc.) timed on this machine's CPU (");
        cr_expect(!strstr(svg, "NCCL"), "an MPI run's figure claims NCCL");
        free(svg);
        /* The data of the figures: one block per method, the point files' numbers. */
        snprintf(p, sizeof p, "%s/plots/data/train.dat", d1);
        char *text;
        size_t len;
        cr_assert_eq(deftsim_read_file(p, &text, &len), DEFTSIM_OK, "%s", deftsim_error_message());
        expect_has(text, "# method dense\n");
        expect_has(text, "# method deft\n");
        expect_has(text, "# method topk\n");
        point_rows pr;
        read_point(d1, "deft_d0.01_P2.csv", &pr);
        char want[64];
        snprintf(want, sizeof want, "\n6 %.9g %.9g", pr.final_sim, pr.final_acc * 100);
        expect_has(text, want);
        /* Every curve starts at iteration 0: the initial model, at simulated time 0. */
        cr_expect_eq(pr.iter[0], 0);
        snprintf(want, sizeof want, "# method deft\n0 0 %.9g", pr.acc[0] * 100);
        expect_has(text, want);
        free(text);
    } else {
        cr_log_warn("gnuplot not found: the figures of deftsim plot are not checked");
    }

    /* A point file with a header and no rows: exit 2, the message naming the file. */
    snprintf(p, sizeof p, "%s/points/deft_d0.01_P2.csv", d1);
    char *text;
    size_t len;
    cr_assert_eq(deftsim_read_file(p, &text, &len), DEFTSIM_OK);
    char *nl = strchr(text, '\n');
    cr_assert(nl);
    cr_assert_eq(deftsim_write_file_atomic(p, text, (size_t)(nl - text + 1)), DEFTSIM_OK);
    free(text);
    deftsim_test_run r = run((const char *[]){"analyze", d1, NULL});
    cr_expect_eq(r.rc, 2);
    expect_has(r.err, "points/deft_d0.01_P2.csv: a header and no rows");
    run_free(&r);
    r = run((const char *[]){"plot", d1, NULL});
    cr_expect_eq(r.rc, 2);
    expect_has(r.err, "points/deft_d0.01_P2.csv: a header and no rows");
    run_free(&r);

    /* A manifest that lists no points, and a listed file that is missing. */
    snprintf(p, sizeof p, "%s/manifest.json", d1);
    const char *empty = "{\"format\": \"deftsim-train-results\", \"seed\": 1, \"points\": []}\n";
    cr_assert_eq(deftsim_write_file_atomic(p, empty, strlen(empty)), DEFTSIM_OK);
    r = run((const char *[]){"analyze", d1, NULL});
    cr_expect_eq(r.rc, 2);
    expect_has(r.err, "manifest.json: lists no finished points");
    run_free(&r);
    const char *missing = "{\"format\": \"deftsim-train-results\", \"seed\": 1, \"points\": "
                          "[{\"method\": \"topk\", \"density\": 0.01, \"P\": 2, \"file\": "
                          "\"points/nosuch.csv\"}]}\n";
    cr_assert_eq(deftsim_write_file_atomic(p, missing, strlen(missing)), DEFTSIM_OK);
    r = run((const char *[]){"plot", d1, NULL});
    cr_expect_eq(r.rc, 2);
    expect_has(r.err, "points/nosuch.csv: No such file or directory");
    run_free(&r);
}
