/* test_engine_slow.c - the engine on a real model table (ResNet-18, n = 11.2 M): every method at
 * P = 1, 2, 4 with full feedback, and the bounded-memory mode at P = 8, checked against what
 * docs/SPARSIFIERS.md guarantees of each method's aggregate. Suite slow (tens of seconds). */
#include <criterion/criterion.h>

#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "deftsim_config.h"
#include "deftsim_engine.h"
#include "table.h"

static char tmpdir[64];

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb; (void)flag; (void)ftw;
    return remove(path);
}

static void setup(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/deftsim-engine-slow-XXXXXX");
    cr_assert(mkdtemp(tmpdir), "mkdtemp");
}

static void teardown(void) { nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

TestSuite(engine_slow, .init = setup, .fini = teardown);

static table *run(const char *extra_counts, const char *const *ov, size_t nov)
{
    char text[1024];
    snprintf(text, sizeof text,
             "[scenario]\nname = r18\nseed = 11\niterations = 2\noutput = %s/out\n"
             "[gradients]\nmodel = resnet18_cifar10\n"
             "[sparsify]\ndensities = 0.01\n"
             "[workers]\ncounts = %s\n",
             tmpdir, extra_counts);
    deftsim_config *cfg;
    cr_assert_eq(deftsim_config_parse(text, "r18.ini", ov, nov, &cfg), DEFTSIM_OK, "%s",
                 deftsim_error_message());
    deftsim_run_summary sum;
    cr_assert_eq(deftsim_run(cfg, NULL, &sum), DEFTSIM_OK, "%s", deftsim_error_message());
    deftsim_config_free(cfg);
    char path[256];
    snprintf(path, sizeof path, "%s/out/rows.csv", tmpdir);
    table *t = load_csv(path);
    cr_assert_eq(t->nrows, sum.rows);
    return t;
}

Test(engine_slow, resnet18_every_method)
{
    table *t = run("1..4", NULL, 0);
    const double n = 11173962, k = 111739;
    for (size_t r = 0; r < t->nrows; r++) {
        const char *m = cell(t, r, "method");
        double P = num(t, r, "P"), nnz = num(t, r, "nnz");
        cr_assert_eq(num(t, r, "n"), n);
        cr_assert_eq(num(t, r, "k"), k);
        cr_assert_eq(num(t, r, "buildup"), nnz / k);
        double cap = num(t, r, "captured_frac"), top = num(t, r, "topk_frac");
        cr_assert(top > 0 && top <= 1 && cap > 0 && cap <= 1 + 1e-12, "%s P=%g: %g %g", m, P, cap, top);
        if (!strcmp(m, "topk")) {
            cr_assert(nnz >= k && nnz <= P * k, "topk P=%g: |U| = %g", P, nnz);
            if (P == 1) cr_assert_eq(cap, top);
        } else if (!strcmp(m, "cltk")) {
            cr_assert_eq(nnz, k, "CLT-k sends the leader's k indices");
        } else if (!strcmp(m, "gtopk")) {
            cr_assert_leq(nnz, k);
        } else if (!strcmp(m, "dense")) {
            cr_assert_eq(nnz, n);
            cr_assert_float_eq(cap, 1.0, 1e-12);
        } else if (!strcmp(m, "deft")) {
            /* DEFT's union is its k_j picks plus the common fragments. */
            cr_assert_geq(nnz, num(t, r, "common_count"));
        }
        /* At P = 1 every method but DGC and DEFT (norm-proportional k per fragment) selects
         * the exact top-k of the only accumulator, which is the average. */
        if (P == 1 && (!strcmp(m, "topk") || !strcmp(m, "topk-ag") || !strcmp(m, "cltk") ||
                       !strcmp(m, "gtopk")))
            cr_assert_float_eq(num(t, r, "captured_ratio"), 1.0, 1e-12, "%s", m);
    }
    table_free(t);
}

Test(engine_slow, resnet18_without_feedback_at_p8)
{
    const char *ov[] = {"sparsify.error_feedback=none", "sparsify.methods=deft, topk, gtopk"};
    table *t = run("8", ov, 2);
    cr_assert_gt(t->nrows, 0);
    for (size_t r = 0; r < t->nrows; r++) {
        cr_assert_str_eq(cell(t, r, "error_feedback"), "none");
        cr_assert_str_eq(cell(t, r, "residual_kept"), "0");
        cr_assert_eq(num(t, r, "P"), 8);
    }
    table_free(t);
}
