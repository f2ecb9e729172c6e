/* test_registry.c - the table of methods (sparsifiers/registry.c): the built-in entries agree
 * with the enum, the config and plots/style.gp; k of a density follows its one rule; and a
 * method registered from here ("firstk": every worker sends its first k elements) runs through
 * the sparsifier API, the config and a one-point engine run like a built-in one. */
#include <criterion/criterion.h>
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "deftsim_config.h"
#include "deftsim_engine.h"
#include "deftsim_plots_path.h"
#include "deftsim_util.h"
#include "sp_internal.h"
#include "sp_test.h"

TestSuite(registry, .init = sp_suite_init, .fini = sp_suite_fini);

/* ---- the built-in table ------------------------------------------------------------------ */

Test(registry, builtin_names_follow_the_enum)
{
    /* The values deftsim_method names sit at their positions; every entry is complete and
     * its name well-formed and unique. */
    static const struct { deftsim_method m; const char *name; } named[] = {
        {DEFTSIM_METHOD_DEFT, "deft"},   {DEFTSIM_METHOD_TOPK, "topk"},
        {DEFTSIM_METHOD_TOPK_AG, "topk-ag"}, {DEFTSIM_METHOD_CLTK, "cltk"},
        {DEFTSIM_METHOD_GTOPK, "gtopk"}, {DEFTSIM_METHOD_DGC, "dgc"},
        {DEFTSIM_METHOD_DENSE, "dense"}, {DEFTSIM_METHOD_MICRO, "micro"},
        {DEFTSIM_METHOD_EXDYNA, "exdyna"}, {DEFTSIM_METHOD_OKTOPK, "oktopk"}};
    cr_assert_eq(sizeof named / sizeof named[0], DEFTSIM_METHOD_COUNT);
    for (size_t i = 0; i < DEFTSIM_METHOD_COUNT; i++)
        cr_expect_str_eq(deftsim_method_name(named[i].m), named[i].name);
    size_t n = deftsim_method_count();
    cr_assert_geq(n, DEFTSIM_METHOD_COUNT);
    const char *const *names = deftsim_method_names();
    for (size_t i = 0; i < n; i++) {
        const deftsim_method_desc *d = deftsim_method_get((deftsim_method)i);
        cr_assert(d);
        cr_expect_str_eq(names[i], d->name);
        cr_expect(d->impl && d->impl->init && d->impl->step, "%s: no implementation", d->name);
        cr_expect(d->closed_form, "%s: no closed form", d->name);
        cr_expect(d->title && d->title[0] && d->short_title && d->short_title[0]);
        /* powersgd: its phases run on OpenBLAS, outside the kernel operations (its check
         * refuses a device profile). */
        cr_expect(d->kernel_ops || (d->caps & DEFTSIM_METHOD_CAP_DATA_FREE) ||
                      !strcmp(d->name, "powersgd"),
                  "%s: no kernel operations", d->name);
        deftsim_method m;
        cr_expect_eq(deftsim_method_from_name(d->name, &m), 0);
        cr_expect_eq(m, (deftsim_method)i);
        for (size_t j = 0; j < i; j++) cr_expect_str_neq(names[j], d->name);
    }
    cr_expect_null(names[n]);
    cr_expect_null(deftsim_method_get((deftsim_method)n));
    cr_expect_null(deftsim_method_get((deftsim_method)-1));
    cr_expect_str_eq(deftsim_method_name((deftsim_method)n), "?");
}

/* The lists by capability are the registry's entries that declare them. */
Test(registry, capabilities)
{
    static const unsigned caps[] = {0, DEFTSIM_METHOD_CAP_DEFAULT, DEFTSIM_METHOD_CAP_KEEPS_STATE,
                                    DEFTSIM_METHOD_CAP_RAW_GRADIENTS,
                                    DEFTSIM_METHOD_CAP_OWN_MOMENTUM, DEFTSIM_METHOD_CAP_DATA_FREE,
                                    DEFTSIM_METHOD_CAP_DDP_BUCKETS, DEFTSIM_METHOD_CAP_SENDS_ALL};
    for (size_t c = 0; c < sizeof caps / sizeof caps[0]; c++) {
        char want[512] = "", buf[512];
        for (size_t i = 0; i < deftsim_method_count(); i++)
            if (deftsim_method_has((deftsim_method)i, caps[c]))
                snprintf(want + strlen(want), sizeof want - strlen(want), "%s%s",
                         want[0] ? ", " : "", deftsim_method_name((deftsim_method)i));
        cr_expect_eq(deftsim_method_list(caps[c], buf, sizeof buf), strlen(want));
        cr_expect_str_eq(buf, want, "caps %#x", caps[c]);
    }
    /* What the engine and the trainer lean on. */
    cr_expect(deftsim_method_has(DEFTSIM_METHOD_DENSE, DEFTSIM_METHOD_CAP_DATA_FREE |
                                                          DEFTSIM_METHOD_CAP_DDP_BUCKETS |
                                                          DEFTSIM_METHOD_CAP_SENDS_ALL));
    cr_expect(deftsim_method_has(DEFTSIM_METHOD_DGC, DEFTSIM_METHOD_CAP_OWN_MOMENTUM));
    char buf[8];
    size_t need = deftsim_method_list(0, buf, sizeof buf);
    cr_expect_eq(strlen(buf), sizeof buf - 1);
    cr_expect_gt(need, sizeof buf);
    /* keeps_state reads the table. */
    deftsim_model *m = sp_model_mix();
    for (size_t i = 0; i < deftsim_method_count(); i++) {
        deftsim_sparsifier_params p = sp_params((deftsim_method)i, 0.05, 3, m);
        deftsim_method_opts_default(p.method, &p.opts); /* PowerSGD's rank has no zero */
        deftsim_sparsifier *s = sp_new(&p);
        cr_expect_eq(!!deftsim_sparsifier_keeps_state(s),
                     deftsim_method_has((deftsim_method)i, DEFTSIM_METHOD_CAP_KEEPS_STATE),
                     "%s", deftsim_method_name((deftsim_method)i));
        deftsim_sparsifier_free(s);
    }
    deftsim_model_free(m);
}

/* The config's methods key takes its choices, type text and default from the table; every
 * method's options are [sparsify] keys with their tables' type, default and help. */
Test(registry, config_uses_the_table)
{
    char all[512], dflt[512], type[600];
    deftsim_method_list(0, all, sizeof all);
    deftsim_method_list(DEFTSIM_METHOD_CAP_DEFAULT, dflt, sizeof dflt);
    snprintf(type, sizeof type, "list of: %s", all);
    const deftsim_config_keyinfo *ki = NULL;
    size_t nopt = 0;
    for (size_t i = 0; i < deftsim_config_key_count(); i++) {
        const deftsim_config_keyinfo *k = deftsim_config_key(i);
        if (!strcmp(k->section, "sparsify") && !strcmp(k->key, "methods")) ki = k;
        deftsim_method m;
        size_t j;
        if (strcmp(k->section, "sparsify") || deftsim_method_option_find(k->key, &m, &j)) continue;
        const deftsim_method_option *o = &deftsim_method_get(m)->options[j];
        cr_expect_str_eq(k->dflt, o->dflt);
        cr_expect_str_eq(k->doc, o->help);
        nopt++;
    }
    cr_assert(ki);
    cr_expect_str_eq(ki->type, type);
    cr_expect_str_eq(ki->dflt, dflt);
    size_t want = 0;
    for (size_t i = 0; i < deftsim_method_count(); i++) {
        const deftsim_method_desc *d = deftsim_method_get((deftsim_method)i);
        want += d->noptions;
        /* Option keys are unique and their defaults parse. */
        for (size_t j = 0; j < d->noptions; j++) {
            deftsim_method m;
            size_t pos;
            cr_expect_eq(deftsim_method_option_find(d->options[j].key, &m, &pos), 0);
            cr_expect_eq(m, (deftsim_method)i, "%s", d->options[j].key);
            cr_expect_eq(pos, j);
            deftsim_opt_value v;
            cr_expect_eq(deftsim_method_option_parse(&d->options[j], d->options[j].dflt, &v),
                         DEFTSIM_OK, "%s", d->options[j].key);
        }
    }
    cr_expect_eq(nopt, want);
}

/* rows.csv's method columns are the union of the registry's, each once; a method's value
 * reaches only its own columns. */
Test(registry, result_columns)
{
    size_t n = deftsim_method_column_count();
    for (size_t i = 0; i < n; i++) {
        const deftsim_method_column *c = deftsim_method_column_get(i);
        for (size_t j = 0; j < i; j++) cr_expect_str_neq(deftsim_method_column_get(j)->name, c->name);
        int found = 0;
        for (size_t e = 0; e < deftsim_engine_column_count(); e++)
            found += !strcmp(deftsim_engine_column(e), c->name);
        cr_expect_eq(found, 1, "rows.csv holds %s %d times", c->name, found);
    }
    cr_expect_null(deftsim_method_column_get(n));
    for (size_t m = 0; m < deftsim_method_count(); m++) {
        const deftsim_method_desc *d = deftsim_method_get((deftsim_method)m);
        for (size_t j = 0; j < d->ncolumns; j++) {
            size_t i = 0;
            while (i < n && strcmp(deftsim_method_column_get(i)->name, d->columns[j].name)) i++;
            cr_assert_lt(i, n, "%s: column %s missing", d->name, d->columns[j].name);
            const deftsim_method_column *c = deftsim_method_column_get(i);
            cr_expect_str_eq(c->unit, d->columns[j].unit, "%s", c->name);
            cr_expect_eq(c->summary, d->columns[j].summary, "%s", c->name);
        }
    }
}

/* Every method's style slot is distinct, not the slot of an unknown name, and plots/style.gp
 * keeps no list of method names of its own. */
Test(registry, style_slots_match_style_gp)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/style.gp", DEFTSIM_PLOTS_DIR);
    char *text = NULL;
    size_t len = 0;
    cr_assert_eq(deftsim_read_file(path, &text, &len), DEFTSIM_OK, "%s", deftsim_error_message());
    for (size_t i = 0; i < deftsim_method_count(); i++) {
        const deftsim_method_desc *d = deftsim_method_get((deftsim_method)i);
        int style = deftsim_method_style((deftsim_method)i);
        cr_expect_gt(style, 0);
        cr_expect_neq(style, DEFTSIM_METHOD_STYLE_OTHER, "%s", d->name);
        for (size_t j = 0; j < i; j++)
            cr_expect_neq(deftsim_method_style((deftsim_method)j), style, "%s and %s share a style",
                          deftsim_method_get((deftsim_method)j)->name, d->name);
        char quoted[40];
        snprintf(quoted, sizeof quoted, "\"%s\"", d->name);
        cr_expect_null(strstr(text, quoted), "style.gp names %s itself", d->name);
    }
    cr_expect_eq(deftsim_method_style((deftsim_method)deftsim_method_count()), 0);
    char other[64];
    snprintf(other, sizeof other, "\nset style line %d lc", DEFTSIM_METHOD_STYLE_OTHER);
    cr_expect(strstr(text, other));
    free(text);
}

/* ---- k of a density ---------------------------------------------------------------------- */

Test(registry, k_of_density)
{
    cr_expect_eq(deftsim_k_of_density(0.01, 1000), 10);
    cr_expect_eq(deftsim_k_of_density(0.0199, 100), 1);    /* floor */
    cr_expect_eq(deftsim_k_of_density(1e-9, 1000), 1);     /* at least 1 */
    cr_expect_eq(deftsim_k_of_density(1.0, 3210), 3210);
    cr_expect_eq(deftsim_k_of_density(2.0, 10), 10);       /* at most n */
    cr_expect_eq(deftsim_k_of_density(0.05, 3210), 160);
    cr_expect_eq(deftsim_k_of_density(0.001, 11173962), 11173);
    /* The sparsifier's k is this one. */
    deftsim_model *m = sp_model_mix();
    const double ds[] = {1e-6, 0.001, 0.0137, 0.5, 1};
    for (size_t i = 0; i < sizeof ds / sizeof ds[0]; i++) {
        deftsim_sparsifier_params p = sp_params(DEFTSIM_METHOD_TOPK, ds[i], 2, m);
        deftsim_sparsifier *s = sp_new(&p);
        sp_accs *a = sp_accs_new(2, m->numel);
        deftsim_step_result *r;
        cr_assert_eq(deftsim_sparsifier_step(s, 0, &a->prov, &r), DEFTSIM_OK);
        cr_expect_eq(r->k, deftsim_k_of_density(ds[i], m->numel), "d=%g", ds[i]);
        sp_accs_free(a);
        deftsim_sparsifier_free(s);
    }
    deftsim_model_free(m);
}

/* ---- a method registered from a test ------------------------------------------------------ */

/* "firstk": every worker sends its first k elements, summed by an allreduce; each residual is
 * zeroed there (the shared gather/residual pass). */
typedef struct {
    float *vals;
    size_t ph_gather, ph_residual;
} firstk_state;

static deftsim_status firstk_init(deftsim_sparsifier *s)
{
    deftsim_status st;
    firstk_state *d = sp_priv(s, sizeof *d);
    if (!d) return DEFTSIM_E_NOMEM;
    if ((st = sp_plan_common(s, 0, s->k)) ||
        (st = sp_alloc_n(s, &d->vals, s->k, sizeof *d->vals, "values")))
        return st;
    d->ph_gather = sp_phase(s, "gather", 0);
    d->ph_residual = sp_phase(s, "residual", 0);
    return DEFTSIM_OK;
}

/* Its option firstk_skip: the elements start there (its .check keeps skip + k <= n). */
static deftsim_status firstk_step(deftsim_sparsifier *s, uint64_t t, const deftsim_acc_provider *a)
{
    (void)t;
    firstk_state *d = s->priv;
    uint64_t skip = (uint64_t)sp_opt_int(&s->p, 0);
    for (uint64_t i = 0; i < s->k; i++) s->agg_idx[i] = (deftsim_kidx)(skip + i);
    s->res.extra[0] = (double)(skip + s->k); /* its column firstk_end (no getter) */
    return sp_gather_residual(s, a, s->k, d->vals, d->ph_gather, d->ph_residual);
}

static deftsim_status firstk_check(const deftsim_sparsifier_params *p)
{
    uint64_t k = deftsim_k_of_density(p->density, p->model->numel);
    if ((uint64_t)sp_opt_int(p, 0) + k > p->model->numel)
        return deftsim_error_set(DEFTSIM_E_USAGE, "firstk: firstk_skip + k is beyond n");
    return DEFTSIM_OK;
}

static const deftsim_method_option firstk_options[] = {
    {.key = "firstk_skip", .type = DEFTSIM_OPT_INT, .dflt = "0", .lo = 0, .hi = 1000000,
     .help = "firstk: the first element sent"},
};

static const deftsim_method_column firstk_columns[] = {
    {.name = "firstk_end", .unit = "elements", .title = "end",
     .doc = "firstk: one past the last element sent", .summary = DEFTSIM_COL_MEDIAN},
};

static const sp_method firstk_impl = {firstk_init, firstk_step, NULL, NULL, 0};

static deftsim_status firstk_closed_form(const deftsim_closed_form_in *in, uint32_t P,
                                         deftsim_schedule *s)
{
    (void)P;
    return sp_cf_add(s, DEFTSIM_STEP_ALLREDUCE, "values", in->k * in->value_bytes)
               ? DEFTSIM_OK : DEFTSIM_E_NOMEM;
}

static deftsim_method firstk_register(void)
{
    const deftsim_method_desc d = {.name = "firstk",
                                   .title = "First k",
                                   .impl = &firstk_impl,
                                   .closed_form = firstk_closed_form,
                                   .options = firstk_options,
                                   .noptions = 1,
                                   .columns = firstk_columns,
                                   .ncolumns = 1,
                                   .check = firstk_check};
    deftsim_method id;
    cr_assert_eq(deftsim_method_register(&d, &id), DEFTSIM_OK, "%s", deftsim_error_message());
    return id;
}

Test(registry, register_rejects_bad_descriptors)
{
    deftsim_method id;
    deftsim_method_desc d = {.name = "topk", .title = "x", .short_title = "x",
                             .impl = &firstk_impl};
    cr_expect_eq(deftsim_method_register(&d, &id), DEFTSIM_E_USAGE);
    cr_expect(strstr(deftsim_error_message(), "'topk' is taken"), "%s", deftsim_error_message());
    d.name = "Bad Name";
    cr_expect_eq(deftsim_method_register(&d, &id), DEFTSIM_E_USAGE);
    d.name = "";
    cr_expect_eq(deftsim_method_register(&d, &id), DEFTSIM_E_USAGE);
    d.name = "noimpl";
    d.impl = NULL;
    cr_expect_eq(deftsim_method_register(&d, &id), DEFTSIM_E_USAGE);
    /* An option another method holds, or a column without its unit. */
    const deftsim_method_option taken[] = {{.key = "cltk_beta", .type = DEFTSIM_OPT_DOUBLE,
                                            .dflt = "0", .lo = 0, .hi = 1, .help = "x"}};
    d.impl = &firstk_impl;
    d.options = taken;
    d.noptions = 1;
    cr_expect_eq(deftsim_method_register(&d, &id), DEFTSIM_E_USAGE);
    cr_expect(strstr(deftsim_error_message(), "cltk_beta is cltk's"), "%s", deftsim_error_message());
    d.options = NULL;
    d.noptions = 0;
    const deftsim_method_column nounit[] = {{.name = "x", .title = "x", .doc = "x"}};
    d.columns = nounit;
    d.ncolumns = 1;
    cr_expect_eq(deftsim_method_register(&d, &id), DEFTSIM_E_USAGE);
    d.columns = NULL;
    d.ncolumns = 0;
    size_t before = deftsim_method_count();
    /* Until the registry is full. */
    d.impl = &firstk_impl;
    char names[DEFTSIM_METHOD_MAX][16];
    size_t added = 0;
    for (size_t i = 0; i < DEFTSIM_METHOD_MAX; i++) {
        snprintf(names[i], sizeof names[i], "extra%zu", i);
        d.name = names[i];
        if (deftsim_method_register(&d, &id) != DEFTSIM_OK) break;
        cr_expect_eq(id, (deftsim_method)(before + i));
        added++;
    }
    cr_expect_eq(added, DEFTSIM_METHOD_MAX - before);
    cr_expect(strstr(deftsim_error_message(), "full"), "%s", deftsim_error_message());
}

Test(registry, registered_method_runs_through_the_sparsifier_api)
{
    size_t nbuiltin = deftsim_method_count();
    deftsim_method id = firstk_register();
    cr_expect_eq(id, (deftsim_method)nbuiltin);
    cr_expect_str_eq(deftsim_method_name(id), "firstk");
    deftsim_method back;
    cr_expect_eq(deftsim_method_from_name("firstk", &back), 0);
    cr_expect_eq(back, id);
    cr_expect_str_eq(deftsim_method_get(id)->short_title, "First k");
    cr_expect_str_eq(deftsim_method_names()[nbuiltin], "firstk");

    deftsim_model *m = sp_model_mix();
    const uint32_t P = 3;
    const size_t n = m->numel;
    deftsim_sparsifier_params p = sp_params(id, 0.01, P, m);
    cr_expect_gt(deftsim_sparsifier_memory(&p), 0);
    deftsim_sparsifier *s = sp_new(&p);
    cr_expect_not(deftsim_sparsifier_keeps_state(s));
    sp_accs *a = sp_accs_new(P, n);
    for (uint32_t w = 0; w < P; w++) sp_fill_int(a->acc[w], n, 1000, sp_seed(), w);
    float **before = sp_accs_copy(a);
    deftsim_step_result *r;
    cr_assert_eq(deftsim_sparsifier_step(s, 0, &a->prov, &r), DEFTSIM_OK, "%s",
                 deftsim_error_message());
    const uint64_t k = deftsim_k_of_density(0.01, n);
    cr_assert_eq(r->method, id);
    cr_assert_eq(r->k, k);
    cr_assert_eq(r->nnz, k);
    for (uint64_t i = 0; i < k; i++) {
        cr_assert_eq(r->agg_index[i], i);
        float sum = 0;
        for (uint32_t w = 0; w < P; w++) sum += before[w][i];
        cr_assert_eq(r->agg_value[i], sum / (float)P, "element %llu", (unsigned long long)i);
    }
    for (uint32_t w = 0; w < P; w++)
        for (size_t i = 0; i < n; i++)
            cr_assert_eq(a->acc[w][i], i < k ? 0.0f : before[w][i], "worker %u element %zu", w, i);
    const deftsim_step *v = sp_find_step(r, DEFTSIM_STEP_ALLREDUCE, "values", 0);
    cr_assert(v);
    cr_expect_eq(v->bytes[1], k * 4);
    cr_expect_eq(r->nphases, 2);
    /* Its column reads extra[0]; another method's column stays empty (NaN) for it. */
    size_t ce = deftsim_method_column_count() - 1;
    cr_expect_str_eq(deftsim_method_column_get(ce)->name, "firstk_end");
    cr_expect_eq(deftsim_method_column_value(ce, id, r), (double)k);
    cr_expect(isnan(deftsim_method_column_value(0, id, r)));
    /* Its option through the parameters: the elements start at firstk_skip. */
    deftsim_sparsifier_params q = p;
    cr_expect_eq(deftsim_sparsifier_params_set(&q, "firstk_skip", "5"), DEFTSIM_OK);
    cr_expect_eq(q.opts.v[0].i, 5); /* firstk_skip, its first option */
    cr_expect_eq(deftsim_sparsifier_params_set(&q, "cltk_beta", "0.5"), DEFTSIM_E_USAGE);
    cr_expect_eq(deftsim_sparsifier_params_set(&q, "firstk_skip", "-1"), DEFTSIM_E_INPUT);
    for (uint32_t w = 0; w < P; w++) memcpy(a->acc[w], before[w], n * sizeof(float));
    deftsim_sparsifier *s5 = sp_new(&q);
    cr_assert_eq(deftsim_sparsifier_step(s5, 0, &a->prov, &r), DEFTSIM_OK);
    cr_expect_eq(r->agg_index[0], 5);
    deftsim_sparsifier_free(s5);
    cr_expect_eq(deftsim_sparsifier_params_set(&q, "firstk_skip", "1000000"), DEFTSIM_OK);
    deftsim_sparsifier *bad = NULL;
    cr_expect_eq(deftsim_sparsifier_new(&q, &bad), DEFTSIM_E_USAGE);
    /* Its closed form, as deftsim bench sim asks for it. */
    deftsim_closed_form_in in = {.model = m, .density = 0.01, .k = k, .index_bytes = 4,
                                 .value_bytes = 4};
    deftsim_schedule cf;
    cr_assert_eq(deftsim_method_closed_form(id, &in, P, &cf), DEFTSIM_OK);
    cr_expect_eq(cf.nsteps, 1);
    cr_expect_eq(cf.steps[0].bytes[2], k * 4);
    deftsim_schedule_free(&cf);
    /* Its table does not say it runs in spread mode: a team of two ranks is refused, naming
     * the method; one rank (or none) is not spread mode. */
    deftsim_team two = {.rank = 0, .size = 2}, one = {.rank = 0, .size = 1};
    deftsim_sparsifier *t = NULL;
    p.team = &two;
    cr_expect_eq(deftsim_sparsifier_new(&p, &t), DEFTSIM_E_UNSUPPORTED);
    cr_expect(strstr(deftsim_error_message(), "firstk") &&
                  strstr(deftsim_error_message(), "spread mode"),
              "%s", deftsim_error_message());
    cr_expect_null(t);
    p.team = &one;
    cr_expect_eq(deftsim_sparsifier_new(&p, &t), DEFTSIM_OK, "%s", deftsim_error_message());
    deftsim_sparsifier_free(t);
    sp_copies_free(before, P);
    sp_accs_free(a);
    deftsim_sparsifier_free(s);
    deftsim_model_free(m);
}

static char tmpdir[64];

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb; (void)flag; (void)ftw;
    return remove(path);
}

/* A scenario names the registered method; one point of it runs through the engine. */
Test(registry, registered_method_runs_one_engine_point)
{
    firstk_register();
    snprintf(tmpdir, sizeof tmpdir, "/tmp/deftsim-registry-XXXXXX");
    cr_assert(mkdtemp(tmpdir));
    char text[1024];
    snprintf(text, sizeof text,
             "[scenario]\nname = reg\nseed = 3\niterations = 2\noutput = %s/out\n"
             "[gradients]\nmodel = resnet18_cifar10\n"
             "[sparsify]\nmethods = firstk\ndensities = 0.001\nfirstk_skip = 7\n"
             "[workers]\ncounts = 2\n[network]\nsimulate = 0\n",
             tmpdir);
    deftsim_config *cfg = NULL;
    cr_assert_eq(deftsim_config_parse(text, "reg.ini", NULL, 0, &cfg), DEFTSIM_OK, "%s",
                 deftsim_error_message());
    cr_assert_eq(cfg->sparsify.nmethods, 1);
    cr_assert_eq(cfg->sparsify.methods[0], (deftsim_method)(deftsim_method_count() - 1));
    cr_expect_eq(deftsim_config_opt(cfg, "firstk_skip"), 7);
    deftsim_run_options opt;
    deftsim_run_options_default(&opt);
    opt.prep_threads = 1;
    deftsim_run_summary sum;
    cr_assert_eq(deftsim_run(cfg, &opt, &sum), DEFTSIM_OK, "%s", deftsim_error_message());
    cr_expect_eq(sum.points, 1);
    cr_expect_gt(sum.rows, 0, "%llu rows", (unsigned long long)sum.rows);
    char path[256], *rows = NULL;
    size_t len = 0;
    snprintf(path, sizeof path, "%s/out/rows.csv", tmpdir);
    cr_assert_eq(deftsim_read_file(path, &rows, &len), DEFTSIM_OK, "%s", deftsim_error_message());
    /* A header, then sum.rows rows, each naming the method. */
    /* Its own column in the header, its value in the rows: skip 7 + k (ResNet-18's
     * 11173962 elements at density 0.001: 11173). */
    cr_expect(strstr(rows, ",firstk_end,"), "no firstk_end column");
    cr_expect(strstr(rows, ",11180,"), "no row with firstk_end = 11180");
    size_t lines = 0, named = 0;
    for (char *l = rows; *l;) {
        char *e = strchr(l, '\n');
        if (e) *e = '\0';
        lines++;
        if (strstr(l, ",firstk,")) named++;
        if (!e) break;
        l = e + 1;
    }
    cr_expect_eq(lines, sum.rows + 1);
    cr_expect_eq(named, sum.rows);
    free(rows);
    deftsim_config_free(cfg);
    nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}
