/* test_profile.c - device cost profiles: the CSV (a round trip, and malformed files refused
 * with file, line and column), the fit on synthetic timings with known coefficients, the
 * kernels' call log, and [device] kind = profile runs: identical rows across two runs except
 * the wall times, and the same selections and bytes as kind = cpu. */
#include <criterion/criterion.h>

#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "deftsim_config.h"
#include "deftsim_engine.h"
#include "deftsim_kernels.h"
#include "deftsim_profile.h"
#include "deftsim_train.h"
#include "deftsim_util.h"
#include "table.h"

static char tmpdir[64];

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb; (void)flag; (void)ftw;
    return remove(path);
}

static void setup(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/deftsim-profile-XXXXXX");
    cr_assert(mkdtemp(tmpdir), "mkdtemp");
}

static void teardown(void) { nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

TestSuite(profile_csv, .init = setup, .fini = teardown);
TestSuite(profile_fit);
TestSuite(profile_log);
TestSuite(profile_run, .init = setup, .fini = teardown);

/* A profile with distinct coefficients for every operation and term. */
static void sample_profile(deftsim_profile *p)
{
    memset(p, 0, sizeof *p);
    snprintf(p->device, sizeof p->device, "Test CPU, model \"X\"");
    snprintf(p->backend, sizeof p->backend, "cpu");
    snprintf(p->isa, sizeof p->isa, "avx2");
    p->threads = 1;
    p->cache_bytes = 33554432;
    snprintf(p->created, sizeof p->created, "2026-01-01T00:00:00Z");
    snprintf(p->deftsim, sizeof p->deftsim, "test");
    snprintf(p->conditions, sizeof p->conditions, "synthetic, for the tests");
    for (size_t op = 0; op < DEFTSIM_KOP_COUNT; op++) {
        deftsim_profile_op *r = &p->ops[op];
        r->present = 1;
        for (size_t t = 0; t < DEFTSIM_PTERM_COUNT; t++)
            r->coef[t] = (t == 0 ? 1e-6 : 1e-10) * (double)(1 + op + 3 * t);
        r->cases = 5;
        r->max_rel_err = 0.125;
    }
}

static char *path_in_tmp(const char *name)
{
    char *b = malloc(512);
    cr_assert(b);
    snprintf(b, 512, "%s/%s", tmpdir, name);
    return b;
}

Test(profile_csv, round_trip)
{
    deftsim_profile p, q;
    sample_profile(&p);
    snprintf(p.source, sizeof p.source, "sources.csv: 3 rows (1 published, 2 derived)");
    p.ops[DEFTSIM_KOP_UNION].present = 0; /* an operation without a model: no row */
    char *path = path_in_tmp("p.csv");
    cr_assert_eq(deftsim_profile_write(path, &p), DEFTSIM_OK, "%s", deftsim_error_message());
    cr_assert_eq(deftsim_profile_load(path, &q), DEFTSIM_OK, "%s", deftsim_error_message());
    cr_expect_str_eq(q.source, p.source);
    cr_expect(!q.ops[DEFTSIM_KOP_UNION].present);
    p.ops[DEFTSIM_KOP_UNION].present = 1;
    cr_assert_eq(deftsim_profile_write(path, &p), DEFTSIM_OK, "%s", deftsim_error_message());
    cr_assert_eq(deftsim_profile_load(path, &q), DEFTSIM_OK, "%s", deftsim_error_message());
    cr_expect_str_eq(q.device, p.device);
    cr_expect_str_eq(q.backend, "cpu");
    cr_expect_str_eq(q.isa, "avx2");
    cr_expect_eq(q.threads, 1);
    cr_expect_eq(q.cache_bytes, p.cache_bytes);
    cr_expect_str_eq(q.conditions, p.conditions);
    for (size_t op = 0; op < DEFTSIM_KOP_COUNT; op++) {
        cr_expect(q.ops[op].present);
        for (size_t t = 0; t < DEFTSIM_PTERM_COUNT; t++)
            cr_expect_eq(q.ops[op].coef[t], p.ops[op].coef[t], "op %zu term %zu", op, t);
        cr_expect_eq(q.ops[op].cases, 5);
    }
    /* The first line names the format and its version. */
    char *text;
    size_t len;
    cr_assert_eq(deftsim_read_file(path, &text, &len), DEFTSIM_OK);
    cr_expect(strncmp(text, "format,deftsim-profile,1\n", 25) == 0);
    free(text);
    free(path);
}

Test(profile_csv, shipped_profiles_parse)
{
    const char *root = getenv("DEFTSIM_SOURCE_ROOT");
    cr_assert(root);
    char path[1024];
    snprintf(path, sizeof path, "%s/profiles/cpu-intel-xeon.csv", root);
    deftsim_profile p;
    cr_assert_eq(deftsim_profile_load(path, &p), DEFTSIM_OK, "%s", deftsim_error_message());
    cr_expect_str_eq(p.backend, "cpu");
    cr_expect_eq(p.threads, 1);
    cr_expect_str_eq(p.source, "");
}

/* The sourced GPU profiles (scripts/gpu_profiles.py; tests/profile/gpu_profiles_check.py
 * checks that they are what the script fits from profiles/sources). */
static const char *const gpu_profiles[] = {"v100-sxm2-torch", "v100-sxm2-best",
                                           "a100-sxm4-torch", "a100-sxm4-best",
                                           "h100-sxm5-torch", "h100-sxm5-best"};
#define NGPU (sizeof gpu_profiles / sizeof gpu_profiles[0])

Test(profile_csv, gpu_profiles_parse_and_name_their_sources)
{
    const char *root = getenv("DEFTSIM_SOURCE_ROOT");
    cr_assert(root);
    double topk[NGPU];
    for (size_t i = 0; i < NGPU; i++) {
        char path[1024], want[128];
        snprintf(path, sizeof path, "%s/profiles/%s.csv", root, gpu_profiles[i]);
        deftsim_profile p;
        cr_assert_eq(deftsim_profile_load(path, &p), DEFTSIM_OK, "%s", deftsim_error_message());
        cr_expect_str_eq(p.backend, "cuda", "%s", gpu_profiles[i]);
        snprintf(want, sizeof want, "profiles/sources/%.9s.csv: ", gpu_profiles[i]);
        cr_expect(strncmp(p.source, want, strlen(want)) == 0, "%s: source '%s'",
                  gpu_profiles[i], p.source);
        cr_expect(strstr(p.conditions, "https://") != NULL, "%s", gpu_profiles[i]);
        for (size_t op = 0; op < DEFTSIM_KOP_COUNT; op++)
            cr_expect(p.ops[op].present, "%s: %s", gpu_profiles[i],
                      deftsim_kop_name((deftsim_kop)op));
        deftsim_kcall c = {DEFTSIM_KOP_TOPK, 11173962, 111739, 0};
        topk[i] = deftsim_profile_predict(&p, &c);
        cr_expect_gt(topk[i], 0);
    }
    /* Faster memory, faster selection; the best kernels beat PyTorch's on every GPU. */
    cr_expect_gt(topk[0], topk[2]);
    cr_expect_gt(topk[2], topk[4]);
    for (size_t i = 0; i < NGPU; i += 2) cr_expect_gt(topk[i], topk[i + 1]);
}

/* A valid file, then each case replaces one line (or adds one) and must be refused with the
 * exact message. */
static const char good[] =
    "format,deftsim-profile,1\n"                                   /* 1 */
    "device,\"Some CPU, 2 cores\"\n"                               /* 2 */
    "backend,cpu\n"                                                /* 3 */
    "isa,avx2\n"                                                   /* 4 */
    "threads,1\n"                                                  /* 5 */
    "cache_bytes,16777216\n"                                       /* 6 */
    "op,intercept_s,per_n_s,per_k_s,per_seg_s,per_n_dram_s,per_k_dram_s,cases,max_rel_err\n"
    "absmax,1e-6,1e-10,0,0,1e-9,0,6,0.1\n"                         /* 8 */
    "topk,1e-6,2e-10,1e-9,0,1e-9,0,6,0.1\n"
    "segtopk,1e-6,2e-10,1e-9,1e-7,1e-9,0,6,0.1\n"
    "seg_norms,1e-6,1e-10,0,1e-8,1e-9,0,6,0.1\n"
    "filter_ge,1e-6,1e-10,1e-9,0,1e-9,0,6,0.1\n"
    "count_ge,1e-6,1e-10,0,0,1e-9,0,6,0.1\n"
    "sample_strided,1e-6,0,1e-9,0,0,1e-8,6,0.1\n"
    "sample_random,1e-6,0,1e-9,0,0,1e-8,6,0.1\n"
    "gather,1e-6,0,1e-9,0,0,1e-8,6,0.1\n"
    "zero_at,1e-6,0,1e-9,0,0,1e-8,6,0.1\n"
    "scatter_add,1e-6,0,1e-9,0,0,1e-8,6,0.1\n"
    "union,1e-6,1e-10,1e-9,1e-7,1e-10,0,6,0.1\n"
    "merge_topk,1e-6,1e-9,1e-9,0,0,0,6,0.1\n";                     /* 20 */

static void replace_line(const char *src, int line, const char *with, char *out, size_t cap)
{
    size_t o = 0;
    int l = 1;
    const char *p = src;
    while (*p) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) + 1 : strlen(p);
        if (l == line) {
            if (with) o += (size_t)snprintf(out + o, cap - o, "%s", with);
        } else {
            o += (size_t)snprintf(out + o, cap - o, "%.*s", (int)len, p);
        }
        p += len;
        l++;
    }
    if (line >= l && with) o += (size_t)snprintf(out + o, cap - o, "%s", with);
    out[o] = '\0';
}

Test(profile_csv, good_text_parses)
{
    deftsim_profile p;
    cr_assert_eq(deftsim_profile_parse(good, strlen(good), "p.csv", &p), DEFTSIM_OK, "%s",
                 deftsim_error_message());
    cr_expect_str_eq(p.device, "Some CPU, 2 cores");
    cr_expect_eq(p.ops[DEFTSIM_KOP_SEGTOPK].coef[DEFTSIM_PTERM_SEGS], 1e-7);
    /* Predictions: t = terms . coefficients; N counts past cache_bytes (4 bytes each). */
    deftsim_kcall small = {DEFTSIM_KOP_ABSMAX, 1000, 0, 0}, big = {DEFTSIM_KOP_ABSMAX, 8000000, 0, 0};
    cr_expect_float_eq(deftsim_profile_predict(&p, &small), 1e-6 + 1e-7, 1e-15);
    cr_expect_float_eq(deftsim_profile_predict(&p, &big), 1e-6 + 8e-4 + 8e-3, 1e-12);
}

Test(profile_csv, malformed_files_are_refused)
{
    static const struct {
        int line;
        const char *with; /* NULL: the line removed */
        const char *msg;
    } cases[] = {
        {7, "op,intercept_s,per_n_s,per_k_s,per_seg_s,per_n_dram_s,per_k_dram_s,cases,"
            "max_rel_err\n# no rows\n",
         "p.csv:8: 1 fields, but the header has 9"},
        {9, "topk,1e-6,fast,1e-9,0,1e-9,0,6,0.1\n",
         "p.csv:9: column per_n_s (3): 'fast' is not a finite number"},
        {9, "topk,1e-6,2e-10,-1e-9,0,1e-9,0,6,0.1\n",
         "p.csv:9: column per_k_s (4): '-1e-9' is negative (costs are never negative)"},
        {9, "topk,1e-6,2e-10,1e-9,0,1e-9,0,six,0.1\n",
         "p.csv:9: column cases (8): 'six' is not a count"},
        {1, "format,deftsim-profile,2\n",
         "p.csv:1: column version (3): format version 2 is not supported (this deftsim reads "
         "version 1; measure the profile again with this deftsim)"},
        {1, "format,deftsim-trace,1\n",
         "p.csv:1: not a deftsim device profile (the first line must be "
         "'format,deftsim-profile,1')"},
        {9, "topk_fast,1e-6,2e-10,1e-9,0,1e-9,0,6,0.1\n",
         "p.csv:9: column op (1): unknown operation 'topk_fast' (operations: absmax, topk, "
         "segtopk, seg_norms, filter_ge, count_ge, sample_strided, sample_random, gather, "
         "zero_at, scatter_add, union, merge_topk, accumulate)"},
        {10, "topk,1e-6,2e-10,1e-9,0,1e-9,0,6,0.1\n",
         "p.csv:10: column op (1): a second row for 'topk' (the first is on line 9)"},
        {9, "topk,1e-6,2e-10,1e-9,0,1e-9,0,6\n", "p.csv:9: 8 fields, but the header has 9"},
        {7, "op,intercept_s,per_n_s,per_k_s,per_seg_s,cases,max_rel_err\n",
         "p.csv:7: header, column 6: 'cases', expected 'per_n_dram_s'"},
        {3, "backnd,cpu\n",
         "p.csv:3: column key (1): unknown key 'backnd' (keys: device, backend, isa, threads, "
         "cache_bytes, created, deftsim, conditions, source; then the header 'op,...')"},
        {5, "threads,0\n",
         "p.csv:5: column value (2): threads '0' is not an integer in [1, 1024]"},
        {6, NULL, "p.csv: no 'cache_bytes' line (before the header)"},
        {2, "device,\"Some CPU\n", "p.csv:2: column 2: unterminated quote"},
        {9, "topk,1e-6,2e-10,1e-9,0,inf,0,6,0.1\n",
         "p.csv:9: column per_n_dram_s (6): 'inf' is not a finite number"},
    };
    char buf[4096];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        replace_line(good, cases[i].line, cases[i].with, buf, sizeof buf);
        deftsim_profile p;
        deftsim_status st = deftsim_profile_parse(buf, strlen(buf), "p.csv", &p);
        cr_expect_eq(st, DEFTSIM_E_INPUT, "case %zu parsed", i);
        cr_expect_str_eq(deftsim_error_message(), cases[i].msg, "case %zu", i);
    }
    /* The header and no operation's row. */
    static const char norows[] =
        "format,deftsim-profile,1\ndevice,d\nbackend,cuda\nisa,-\nthreads,1\ncache_bytes,0\n"
        "op,intercept_s,per_n_s,per_k_s,per_seg_s,per_n_dram_s,per_k_dram_s,cases,max_rel_err\n";
    deftsim_profile p;
    cr_expect_eq(deftsim_profile_parse(norows, strlen(norows), "n.csv", &p), DEFTSIM_E_INPUT);
    cr_expect_str_eq(deftsim_error_message(),
                     "n.csv:7: the file ends without any operation's row (after the header, "
                     "one row per operation)");
    cr_expect_eq(deftsim_profile_parse("", 0, "e.csv", &p), DEFTSIM_E_INPUT);
    cr_expect_str_eq(deftsim_error_message(), "e.csv: empty, not a deftsim device profile");
    cr_expect_eq(deftsim_profile_load("/nonexistent/p.csv", &p), DEFTSIM_E_INPUT);
}

/* ---- The fit ------------------------------------------------------------------------------ */

static double truth(const double c[DEFTSIM_PTERM_COUNT], const deftsim_kcall *k, double cache)
{
    double x[DEFTSIM_PTERM_COUNT], t = 0;
    deftsim_profile_terms(k, cache, x);
    for (size_t j = 0; j < DEFTSIM_PTERM_COUNT; j++) t += c[j] * x[j];
    return t;
}

Test(profile_fit, recovers_known_coefficients)
{
    /* Segmented top-k-like timings: every term but K. */
    const double cache = 16777216; /* 4 M elements */
    const double c[DEFTSIM_PTERM_COUNT] = {3e-6, 2e-10, 5e-9, 4e-7, 1.5e-9, 0};
    deftsim_profile_sample s[48];
    size_t ns = 0;
    static const size_t ns_[] = {10000, 100000, 1000000, 3000000, 6000000, 12000000};
    static const size_t segs_[] = {1, 16, 300, 5000};
    static const double dens[] = {0.001, 0.01};
    for (size_t a = 0; a < 6; a++)
        for (size_t b = 0; b < 4; b++)
            for (size_t d = 0; d < 2; d++) {
                deftsim_kcall k = {DEFTSIM_KOP_SEGTOPK, ns_[a], (size_t)(dens[d] * ns_[a]),
                                   segs_[b]};
                s[ns++] = (deftsim_profile_sample){k, truth(c, &k, cache)};
            }
    deftsim_profile_op r;
    cr_assert_eq(deftsim_profile_fit(DEFTSIM_KOP_SEGTOPK, s, ns, cache, &r), DEFTSIM_OK, "%s",
                 deftsim_error_message());
    for (size_t j = 0; j < DEFTSIM_PTERM_COUNT; j++)
        cr_expect(fabs(r.coef[j] - c[j]) <= 1e-6 * c[j] + 1e-20, "term %zu: %g, expected %g", j,
                  r.coef[j], c[j]);
    cr_expect_lt(r.max_rel_err, 1e-6);
    cr_expect_eq(r.cases, ns);

    /* 2 % multiplicative noise (a fixed pattern): the coefficients within 10 %. */
    for (size_t i = 0; i < ns; i++) s[i].seconds *= 1 + 0.02 * (double)((int)(i % 5) - 2) / 2;
    cr_assert_eq(deftsim_profile_fit(DEFTSIM_KOP_SEGTOPK, s, ns, cache, &r), DEFTSIM_OK);
    for (size_t j = 0; j < DEFTSIM_PTERM_COUNT; j++)
        cr_expect(fabs(r.coef[j] - c[j]) <= 0.1 * c[j] + 1e-20, "noisy term %zu: %g, expected %g",
                  j, r.coef[j], c[j]);
    cr_expect_lt(r.max_rel_err, 0.05);
}

Test(profile_fit, drops_what_does_not_vary_and_negative_terms)
{
    /* Gather-like: only k varies, t = 1e-6 + 2e-9 k. */
    deftsim_profile_sample s[5];
    for (size_t i = 0; i < 5; i++) {
        deftsim_kcall k = {DEFTSIM_KOP_GATHER, 0, (size_t)1000 << (2 * i), 0};
        s[i] = (deftsim_profile_sample){k, 1e-6 + 2e-9 * (double)k.k};
    }
    deftsim_profile_op r;
    cr_assert_eq(deftsim_profile_fit(DEFTSIM_KOP_GATHER, s, 5, 1e12, &r), DEFTSIM_OK);
    cr_expect_float_eq(r.coef[DEFTSIM_PTERM_1], 1e-6, 1e-12);
    cr_expect_float_eq(r.coef[DEFTSIM_PTERM_K], 2e-9, 1e-15);
    cr_expect_eq(r.coef[DEFTSIM_PTERM_N], 0);
    cr_expect_eq(r.coef[DEFTSIM_PTERM_SEGS], 0);
    /* Timings that fall with k: a negative per-k cost is dropped, a constant remains. */
    for (size_t i = 0; i < 5; i++) s[i].seconds = 1e-3 - 1e-5 * (double)i;
    cr_assert_eq(deftsim_profile_fit(DEFTSIM_KOP_GATHER, s, 5, 1e12, &r), DEFTSIM_OK);
    for (size_t j = 0; j < DEFTSIM_PTERM_COUNT; j++) cr_expect_geq(r.coef[j], 0);
    cr_expect_gt(r.coef[DEFTSIM_PTERM_1], 0);
    /* Bad input. */
    s[0].seconds = 0;
    cr_expect_eq(deftsim_profile_fit(DEFTSIM_KOP_GATHER, s, 5, 1e12, &r), DEFTSIM_E_INPUT);
    cr_expect_eq(deftsim_profile_fit(DEFTSIM_KOP_GATHER, s, 0, 1e12, &r), DEFTSIM_E_USAGE);
}

/* ---- The kernels' call log and modelled clock ------------------------------------------------ */

static double unit_cost(void *user, const deftsim_kcall *c)
{
    (void)user;
    return (double)c->op + 1e-3 * (double)c->n;
}

Test(profile_log, calls_and_sizes)
{
    deftsim_kctx *ctx;
    cr_assert_eq(deftsim_kctx_new(&ctx, "cpu", 1), DEFTSIM_OK);
    enum { n = 1000 };
    float x[n];
    for (int i = 0; i < n; i++) x[i] = (float)((i * 37) % 101) - 50.0f;
    deftsim_kcall log[8];
    deftsim_kctx_set_log(ctx, log, 8);
    deftsim_kctx_set_cost(ctx, unit_cost, NULL);
    size_t sb;
    cr_assert_eq(deftsim_k_topk_scratch(ctx, n, 10, &sb), DEFTSIM_OK);
    void *scr = malloc(sb + 1);
    deftsim_kidx idx[n];
    cr_assert_eq(deftsim_k_topk(ctx, x, n, 10, idx, scr, sb), DEFTSIM_OK);
    free(scr);
    deftsim_kseg segs[2] = {{0, 300, 3}, {500, 200, 5}};
    cr_assert_eq(deftsim_k_segtopk_scratch(ctx, segs, 2, &sb), DEFTSIM_OK);
    scr = malloc(sb + 1);
    cr_assert_eq(deftsim_k_segtopk(ctx, x, n, segs, 2, idx, scr, sb), DEFTSIM_OK);
    free(scr);
    size_t cnt;
    cr_assert_eq(deftsim_k_filter_ge(ctx, x, n, 45.0f, idx, 7, &cnt), DEFTSIM_OK);
    float v[4];
    cr_assert_eq(deftsim_k_gather(ctx, x, n, idx, 4, v), DEFTSIM_OK);
    /* A failed call is neither logged nor charged. */
    cr_assert_neq(deftsim_k_topk(ctx, x, n, n + 1, idx, NULL, 0), DEFTSIM_OK);
    cr_assert_eq(deftsim_kctx_log_count(ctx), 4);
    cr_expect_eq(log[0].op, DEFTSIM_KOP_TOPK);
    cr_expect(log[0].n == n && log[0].k == 10 && log[0].segs == 0);
    cr_expect_eq(log[1].op, DEFTSIM_KOP_SEGTOPK);
    cr_expect(log[1].n == 500 && log[1].k == 8 && log[1].segs == 2);
    cr_expect_eq(log[2].op, DEFTSIM_KOP_FILTER_GE);
    cr_expect(log[2].n == n && log[2].k == (cnt < 7 ? cnt : 7));
    cr_expect_eq(log[3].op, DEFTSIM_KOP_GATHER);
    cr_expect(log[3].n == 0 && log[3].k == 4);
    double want = (DEFTSIM_KOP_TOPK + 1.0) + (DEFTSIM_KOP_SEGTOPK + 0.5) +
                  (DEFTSIM_KOP_FILTER_GE + 1.0) + DEFTSIM_KOP_GATHER;
    cr_expect_float_eq(deftsim_kctx_cost_seconds(ctx), want, 1e-9);
    cr_expect(deftsim_kctx_has_cost(ctx));
    deftsim_kctx_set_cost(ctx, NULL, NULL);
    cr_expect(!deftsim_kctx_has_cost(ctx));
    cr_expect_eq(deftsim_kctx_cost_seconds(ctx), 0);
    deftsim_kctx_free(ctx);
}

/* ---- [device] kind = profile runs -------------------------------------------------------------- */

static const char tiny_csv[] = "index,name,shape,numel\n"
                               "0,conv.weight,16x3x3x3,432\n"
                               "1,conv.bias,16,16\n"
                               "2,fc1.weight,64x32,2048\n"
                               "3,fc1.bias,64,64\n"
                               "4,fc2.weight,10x64,640\n"
                               "5,fc2.bias,10,10\n";

static void run_into(const char *out, const char *kind)
{
    char *model = path_in_tmp("tiny.csv"), *prof = path_in_tmp("p.csv");
    cr_assert_eq(deftsim_write_file_atomic(model, tiny_csv, strlen(tiny_csv)), DEFTSIM_OK);
    deftsim_profile p;
    sample_profile(&p);
    cr_assert_eq(deftsim_profile_write(prof, &p), DEFTSIM_OK);
    char text[2048];
    snprintf(text, sizeof text,
             "[scenario]\nname = tiny\nseed = 7\niterations = 2\noutput = %s/%s\n"
             "[gradients]\nmodel = %s\n"
             "[sparsify]\nmethods = deft, topk, topk-ag, cltk, gtopk, dgc, dense\n"
             "densities = 0.05\n"
             "[workers]\ncounts = 1..4\n"
             "[device]\nkind = %s\n%s%s\n",
             tmpdir, out, model, kind, strcmp(kind, "profile") == 0 ? "profile = " : "",
             strcmp(kind, "profile") == 0 ? prof : "");
    deftsim_config *cfg = NULL;
    cr_assert_eq(deftsim_config_parse(text, "tiny.ini", NULL, 0, &cfg), DEFTSIM_OK, "%s",
                 deftsim_error_message());
    deftsim_run_options opt;
    deftsim_run_options_default(&opt);
    opt.prep_threads = 2;
    deftsim_run_summary sum;
    cr_assert_eq(deftsim_run(cfg, &opt, &sum), DEFTSIM_OK, "%s", deftsim_error_message());
    deftsim_config_free(cfg);
    free(model);
    free(prof);
}

static table *rows_of(const char *out)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s/rows.csv", tmpdir, out);
    return load_csv(p);
}

static int in_list(const char *name, const char *const *list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(name, list[i]) == 0) return 1;
    return 0;
}

Test(profile_run, deterministic_and_same_selections_as_cpu)
{
    run_into("p1", "profile");
    run_into("p2", "profile");
    run_into("c1", "cpu");
    table *a = rows_of("p1"), *b = rows_of("p2"), *c = rows_of("c1");
    cr_assert_eq(a->nrows, b->nrows);
    cr_assert_eq(a->nrows, c->nrows);
    cr_assert_gt(a->nrows, 0);
    cr_assert_eq(a->ncols, b->ncols);
    /* Two profile runs: every column but the wall times. */
    static const char *const wall[] = {"prepare_seconds", "step_seconds", "ref_seconds"};
    /* Against kind = cpu: the times (measured there, modelled here) and the backend. */
    static const char *const timed[] = {
        "phase_seconds", "select_seconds", "worker_seconds", "imbalance_seconds",
        "phase_seconds_min", "phase_seconds_max", "select_seconds_min", "select_seconds_max",
        "prepare_seconds", "step_seconds", "ref_seconds", "sim_start", "sim_end", "comm_seconds",
        "select_critical_seconds", "iteration_seconds", "backend"};
    size_t nphase = 0, positive = 0;
    for (size_t r = 0; r < a->nrows; r++)
        for (size_t k = 0; k < a->ncols; k++) {
            const char *name = a->hdr[k];
            const char *va = a->cell[r * a->ncols + k];
            if (!in_list(name, wall, sizeof wall / sizeof wall[0]))
                cr_assert_str_eq(va, b->cell[r * b->ncols + k], "row %zu column %s", r, name);
            if (!in_list(name, timed, sizeof timed / sizeof timed[0]))
                cr_assert_str_eq(va, c->cell[r * c->ncols + k], "cpu: row %zu column %s", r,
                                 name);
        }
    for (size_t r = 0; r < a->nrows; r++) {
        cr_assert_str_eq(cell(a, r, "backend"), "profile");
        cr_assert_str_eq(cell(c, r, "backend"), "cpu");
        if (strcmp(cell(a, r, "phase_kind"), "compute") == 0) {
            nphase++;
            positive += num(a, r, "phase_seconds") > 0;
        }
    }
    /* The modelled phases are not all zero (the kernels' calls were charged). */
    cr_expect_gt(positive, nphase / 2, "%zu of %zu phases > 0", positive, nphase);
    table_free(a);
    table_free(b);
    table_free(c);
}

Test(profile_run, config_needs_both_keys)
{
    static const char base[] = "[scenario]\nname = t\n[gradients]\nmodel = resnet18_cifar10\n"
                               "[device]\n";
    char text[512];
    deftsim_config *cfg = NULL;
    snprintf(text, sizeof text, "%skind = profile\n", base);
    cr_expect_eq(deftsim_config_parse(text, "t.ini", NULL, 0, &cfg), DEFTSIM_E_INPUT);
    cr_expect_str_eq(deftsim_error_message(),
                     "t.ini:6: [device] kind: profile, but [device] profile is not set (name a "
                     "device profile CSV: deftsim bench kernels --profile FILE)");
    deftsim_config_free(cfg);
    cfg = NULL;
    snprintf(text, sizeof text, "%sprofile = p.csv\n", base);
    cr_expect_eq(deftsim_config_parse(text, "t.ini", NULL, 0, &cfg), DEFTSIM_E_INPUT);
    cr_expect_str_eq(deftsim_error_message(),
                     "t.ini:6: [device] profile: set, but [device] kind = cpu (a profile needs "
                     "kind = profile)");
    deftsim_config_free(cfg);
}

/* A tiny scenario timed by the profile at `prof`; DEFTSIM_OK or the run's status. */
static deftsim_status run_profile(const char *out, const char *methods, const char *prof)
{
    char *model = path_in_tmp("tiny.csv");
    cr_assert_eq(deftsim_write_file_atomic(model, tiny_csv, strlen(tiny_csv)), DEFTSIM_OK);
    char text[2048];
    snprintf(text, sizeof text,
             "[scenario]\nname = tiny\nseed = 7\niterations = 2\noutput = %s/%s\n"
             "[gradients]\nmodel = %s\n[sparsify]\nmethods = %s\ndensities = 0.05\n"
             "[workers]\ncounts = 2, 4\n[device]\nkind = profile\nprofile = %s\n",
             tmpdir, out, model, methods, prof);
    deftsim_config *cfg = NULL;
    cr_assert_eq(deftsim_config_parse(text, "tiny.ini", NULL, 0, &cfg), DEFTSIM_OK, "%s",
                 deftsim_error_message());
    deftsim_run_options opt;
    deftsim_run_options_default(&opt);
    opt.prep_threads = 1;
    deftsim_run_summary sum;
    deftsim_status st = deftsim_run(cfg, &opt, &sum);
    deftsim_config_free(cfg);
    free(model);
    return st;
}

/* The registry's methods a device profile cannot time, each with the reason: refused under
 * kind = profile (profile_run, refused_without_kernel_operations). */
static const char *const untimed[][2] = {
    {"powersgd", "its phases are matrix products and QR on OpenBLAS, no kernel operation"},
};

/* Every method of the registry but those. */
static const char *all_methods_list(void)
{
    static char buf[1024];
    size_t o = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < deftsim_method_count(); i++) {
        const char *name = deftsim_method_name((deftsim_method)i);
        int skip = 0;
        for (size_t j = 0; j < sizeof untimed / sizeof untimed[0]; j++)
            skip |= !strcmp(untimed[j][0], name);
        if (!skip && o < sizeof buf)
            o += (size_t)snprintf(buf + o, sizeof buf - o, "%s%s", o ? ", " : "", name);
    }
    return buf;
}

/* A method whose phases call no kernel operation is refused under a profile (rather than
 * timed at 0 s), with a message naming the operation it would need. */
Test(profile_run, refused_without_kernel_operations)
{
    const char *root = getenv("DEFTSIM_SOURCE_ROOT");
    cr_assert(root);
    char prof[1024];
    snprintf(prof, sizeof prof, "%s/profiles/%s.csv", root, gpu_profiles[0]);
    for (size_t j = 0; j < sizeof untimed / sizeof untimed[0]; j++) {
        char out[32];
        snprintf(out, sizeof out, "untimed%zu", j);
        cr_assert_eq(run_profile(out, untimed[j][0], prof), DEFTSIM_E_INPUT, "%s: %s",
                     untimed[j][0], untimed[j][1]);
        cr_expect(strstr(deftsim_error_message(), "kind = profile") &&
                      strstr(deftsim_error_message(), "operation '"),
                  "%s", deftsim_error_message());
    }
}

/* Every method, timed by each sourced GPU profile: the phases are charged (positive), and the
 * manifest names the profile and its source. */
Test(profile_run, every_gpu_profile_times_every_method)
{
    const char *root = getenv("DEFTSIM_SOURCE_ROOT");
    cr_assert(root);
    for (size_t i = 0; i < NGPU; i++) {
        char prof[1024], out[64], mpath[512];
        snprintf(prof, sizeof prof, "%s/profiles/%s.csv", root, gpu_profiles[i]);
        snprintf(out, sizeof out, "g%zu", i);
        cr_assert_eq(run_profile(out, all_methods_list(), prof), DEFTSIM_OK, "%s: %s",
                     gpu_profiles[i], deftsim_error_message());
        table *t = rows_of(out);
        size_t nphase = 0, positive = 0;
        for (size_t r = 0; r < t->nrows; r++) {
            cr_expect_str_eq(cell(t, r, "backend"), "profile");
            if (strcmp(cell(t, r, "phase_kind"), "compute") == 0 &&
                strcmp(cell(t, r, "method"), "dense") != 0) {
                nphase++;
                positive += num(t, r, "phase_seconds") > 0;
            }
        }
        cr_expect_gt(nphase, 0);
        cr_expect_gt(positive, nphase / 2, "%s: %zu of %zu phases > 0", gpu_profiles[i],
                     positive, nphase);
        table_free(t);
        snprintf(mpath, sizeof mpath, "%s/%s/manifest.json", tmpdir, out);
        char *text;
        size_t len;
        cr_assert_eq(deftsim_read_file(mpath, &text, &len), DEFTSIM_OK);
        cr_expect(strstr(text, gpu_profiles[i]) != NULL, "%s: manifest", gpu_profiles[i]);
        cr_expect(strstr(text, "profiles/sources/") != NULL, "%s: manifest source",
                  gpu_profiles[i]);
        free(text);
    }
}

/* A profile without a row for an operation a method calls: the run is refused, naming the
 * operation, the method and the profile; methods that do not call it run. */
Test(profile_run, missing_operation_refused)
{
    deftsim_profile p;
    sample_profile(&p);
    p.ops[DEFTSIM_KOP_MERGE_TOPK].present = 0;
    char *prof = path_in_tmp("nomerge.csv");
    cr_assert_eq(deftsim_profile_write(prof, &p), DEFTSIM_OK);
    cr_expect_eq(run_profile("ok", "topk, deft", prof), DEFTSIM_OK, "%s",
                 deftsim_error_message());
    /* Refused before anything runs: no results folder. */
    cr_assert_eq(run_profile("bad", "topk, gtopk", prof), DEFTSIM_E_INPUT);
    char want[1024];
    snprintf(want, sizeof want,
             "tiny.ini:15: [device] profile: %s has no row for operation 'merge_topk', which "
             "method gtopk calls (a profile without a model for an operation cannot time it: "
             "add its row, or run without gtopk)",
             prof);
    cr_expect_str_eq(deftsim_error_message(), want);
    char *bad = path_in_tmp("bad");
    struct stat sb;
    cr_expect_neq(stat(bad, &sb), 0, "a refused run left %s", bad);
    free(bad);
    free(prof);
}

/* A call of an operation without a row costs 0 and is recorded; the check after the phase
 * refuses it (the backstop for methods registered at run time) and clears the record. */
Test(profile_log, call_without_row_recorded)
{
    deftsim_profile p;
    sample_profile(&p);
    p.ops[DEFTSIM_KOP_UNION].present = 0;
    deftsim_kcall u = {DEFTSIM_KOP_UNION, 100, 10, 2}, t = {DEFTSIM_KOP_TOPK, 100, 10, 0};
    cr_expect_gt(deftsim_profile_cost(&p, &t), 0);
    cr_expect_eq(deftsim_profile_check(&p, "p.csv", "m"), DEFTSIM_OK);
    cr_expect_eq(deftsim_profile_cost(&p, &u), 0);
    cr_expect_gt(deftsim_profile_cost(&p, &t), 0);
    cr_assert_eq(deftsim_profile_check(&p, "p.csv", "m"), DEFTSIM_E_INPUT);
    cr_expect_str_eq(deftsim_error_message(),
                     "p.csv has no row for operation 'union', which method m calls (a profile "
                     "without a model for an operation cannot time it: add its row, or run "
                     "without m)");
    cr_expect_eq(deftsim_profile_check(&p, "p.csv", "m"), DEFTSIM_OK);
}

/* The table of operations per method is complete: every built-in method runs on a profile
 * with rows for its operations only (a call beyond them would be refused as it runs). */
Test(profile_run, method_operations_table_is_complete)
{
    for (int m = 0; m < DEFTSIM_METHOD_COUNT; m++) {
        deftsim_profile p;
        sample_profile(&p);
        unsigned ops = deftsim_profile_method_ops(m);
        for (size_t op = 0; op < DEFTSIM_KOP_COUNT; op++) p.ops[op].present = (ops >> op) & 1u;
        p.ops[DEFTSIM_KOP_ABSMAX].present = 1; /* a profile holds at least one row */
        char name[64], out[64];
        snprintf(name, sizeof name, "m%d.csv", m);
        snprintf(out, sizeof out, "m%d", m);
        char *prof = path_in_tmp(name);
        cr_assert_eq(deftsim_profile_write(prof, &p), DEFTSIM_OK);
        const char *method = deftsim_method_name((deftsim_method)m);
        cr_expect_eq(run_profile(out, method, prof), DEFTSIM_OK, "%s: %s", method,
                     deftsim_error_message());
        free(prof);
    }
}

/* ---- deftsim train with [device] kind = profile ------------------------------------------- */

static deftsim_config *train_scenario(const char *methods, const char *prof)
{
    const char *root = getenv("DEFTSIM_SOURCE_ROOT");
    cr_assert(root);
    char text[2048];
    snprintf(text, sizeof text,
             "[scenario]\nname = t\noutput = %s/train\niterations = 4\nseed = 3\n"
             "[gradients]\nmodel = %s/train/models/fmnist_mlp.csv\n"
             "[sparsify]\nmethods = %s\ndensities = 0.01\n[workers]\ncounts = 2\n"
             "[train]\ntrain_samples = 256\neval_samples = 100\nbatch_size = 16\n"
             "[device]\nkind = profile\nprofile = %s\n",
             tmpdir, root, methods, prof);
    deftsim_config *cfg = NULL;
    cr_assert_eq(deftsim_config_parse(text, "train.ini", NULL, 0, &cfg), DEFTSIM_OK, "%s",
                 deftsim_error_message());
    return cfg;
}

/* The trainer takes kind = profile: the sparsifiers' phases and the accumulate step are
 * charged from the profile (the accumulate step's time is the profile's, the same for every
 * worker); a profile without the accumulate row, or without an operation a method calls, is
 * refused before training. */
Test(profile_run, train_with_a_gpu_profile)
{
    const char *root = getenv("DEFTSIM_SOURCE_ROOT");
    cr_assert(root);
    char prof[1024];
    snprintf(prof, sizeof prof, "%s/profiles/v100-sxm2-torch.csv", root);
    deftsim_config *cfg = train_scenario("deft, topk, dgc, gtopk", prof);
    deftsim_trainer *tr;
    cr_assert_eq(deftsim_trainer_new(cfg, &tr), DEFTSIM_OK, "%s", deftsim_error_message());
    deftsim_train_options opt;
    deftsim_train_options_default(&opt);
    opt.iterations = 4;
    opt.evaluate = 0;
    opt.simulate = 1;
    const deftsim_method ms[] = {DEFTSIM_METHOD_DEFT, DEFTSIM_METHOD_TOPK, DEFTSIM_METHOD_DGC,
                                 DEFTSIM_METHOD_GTOPK};
    for (size_t i = 0; i < 4; i++) {
        deftsim_train_result r;
        cr_assert_eq(deftsim_trainer_point(tr, ms[i], 0.01, 2, &opt, &r), DEFTSIM_OK, "%s: %s",
                     deftsim_method_name(ms[i]), deftsim_error_message());
        cr_expect(isfinite(r.rows[r.nrows - 1].sim_seconds));
        cr_expect_gt(r.rows[r.nrows - 1].sim_seconds, r.rows[r.nrows - 1].sim_comm_seconds);
        deftsim_train_result_free(&r);
    }
    deftsim_trainer_free(tr);
    deftsim_config_free(cfg);

    deftsim_profile p;
    cr_assert_eq(deftsim_profile_load(prof, &p), DEFTSIM_OK);
    p.ops[DEFTSIM_KOP_ACCUMULATE].present = 0;
    char *noacc = path_in_tmp("noacc.csv");
    cr_assert_eq(deftsim_profile_write(noacc, &p), DEFTSIM_OK);
    cfg = train_scenario("topk", noacc);
    cr_expect_eq(deftsim_trainer_new(cfg, &tr), DEFTSIM_E_INPUT);
    char want[1024];
    snprintf(want, sizeof want,
             "train.ini:19: [device] profile: %s has no row for operation 'accumulate', which "
             "deftsim train's accumulate step needs (add its row)",
             noacc);
    cr_expect_str_eq(deftsim_error_message(), want);
    deftsim_config_free(cfg);
    free(noacc);
}
