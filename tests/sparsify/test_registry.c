/* test_registry.c - the table of methods (src/sparsify/registry.c): the built-in entries agree
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

TestSuite(registry, .init = sp_suite_init, .fini = sp_suite_fini, .timeout = 120);

/* ---- the built-in table ------------------------------------------------------------------ */

Test(registry, builtin_names_follow_the_enum)
{
    static const char *const want[] = {"deft", "topk", "topk-ag", "cltk", "gtopk",
                                       "dgc", "dense", "micro", "exdyna", "oktopk"};
    cr_assert_eq(sizeof want / sizeof want[0], DEFTSIM_METHOD_COUNT);
    cr_assert_eq(deftsim_method_count(), DEFTSIM_METHOD_COUNT);
    const char *const *names = deftsim_method_names();
    for (int i = 0; i < DEFTSIM_METHOD_COUNT; i++) {
        const deftsim_method_desc *d = deftsim_method_get((deftsim_method)i);
        cr_assert(d);
        cr_expect_str_eq(d->name, want[i]);
        cr_expect_str_eq(names[i], want[i]);
        cr_expect(d->impl && d->impl->init && d->impl->step, "%s: no implementation", d->name);
        cr_expect(d->closed_form, "%s: no closed form", d->name);
        cr_expect(d->title && d->title[0] && d->short_title && d->short_title[0]);
        deftsim_method m;
        cr_expect_eq(deftsim_method_from_name(want[i], &m), 0);
        cr_expect_eq(m, (deftsim_method)i);
    }
    cr_expect_null(names[DEFTSIM_METHOD_COUNT]);
    cr_expect_null(deftsim_method_get(DEFTSIM_METHOD_COUNT));
    cr_expect_null(deftsim_method_get((deftsim_method)-1));
    cr_expect_str_eq(deftsim_method_name(DEFTSIM_METHOD_COUNT), "?");
}

Test(registry, capabilities)
{
    char buf[256];
    deftsim_method_list(DEFTSIM_METHOD_CAP_DEFAULT, buf, sizeof buf);
    cr_expect_str_eq(buf, "deft, topk, topk-ag, cltk, gtopk, dgc, dense");
    deftsim_method_list(DEFTSIM_METHOD_CAP_KEEPS_STATE, buf, sizeof buf);
    cr_expect_str_eq(buf, "micro, exdyna, oktopk");
    deftsim_method_list(DEFTSIM_METHOD_CAP_RAW_GRADIENTS, buf, sizeof buf);
    cr_expect_str_eq(buf, "cltk");
    deftsim_method_list(DEFTSIM_METHOD_CAP_OWN_MOMENTUM, buf, sizeof buf);
    cr_expect_str_eq(buf, "dgc");
    size_t need = deftsim_method_list(0, buf, 8);
    cr_expect_eq(need, strlen("deft, topk, topk-ag, cltk, gtopk, dgc, dense, micro, exdyna, oktopk"));
    cr_expect_str_eq(buf, "deft, t");
    /* keeps_state reads the table. */
    deftsim_model *m = sp_model_mix();
    for (int i = 0; i < DEFTSIM_METHOD_COUNT; i++) {
        deftsim_sparsifier_params p = sp_params((deftsim_method)i, 0.05, 3, m);
        deftsim_sparsifier *s = sp_new(&p);
        cr_expect_eq(!!deftsim_sparsifier_keeps_state(s),
                     deftsim_method_has((deftsim_method)i, DEFTSIM_METHOD_CAP_KEEPS_STATE),
                     "%s", deftsim_method_name((deftsim_method)i));
        deftsim_sparsifier_free(s);
    }
    deftsim_model_free(m);
}

/* The config's methods key takes its choices, type text and default from the table. */
Test(registry, config_uses_the_table)
{
    const deftsim_config_keyinfo *ki = NULL;
    for (size_t i = 0; i < deftsim_config_key_count(); i++) {
        const deftsim_config_keyinfo *k = deftsim_config_key(i);
        if (!strcmp(k->section, "sparsify") && !strcmp(k->key, "methods")) ki = k;
    }
    cr_assert(ki);
    cr_expect_str_eq(ki->type, "list of: deft, topk, topk-ag, cltk, gtopk, dgc, dense, micro, "
                               "exdyna, oktopk");
    cr_expect_str_eq(ki->dflt, "deft, topk, topk-ag, cltk, gtopk, dgc, dense");
}

/* Every method's style slot is distinct, not the slot of an unknown name, and plots/style.gp
 * defines a line style for it; style.gp keeps no list of method names of its own. */
Test(registry, style_slots_match_style_gp)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/style.gp", DEFTSIM_PLOTS_DIR);
    char *text = NULL;
    size_t len = 0;
    cr_assert_eq(deftsim_read_file(path, &text, &len), DEFTSIM_OK, "%s", deftsim_error_message());
    for (size_t i = 0; i < deftsim_method_count(); i++) {
        const deftsim_method_desc *d = deftsim_method_get((deftsim_method)i);
        cr_expect_neq(d->style, DEFTSIM_METHOD_STYLE_OTHER, "%s", d->name);
        for (size_t j = 0; j < i; j++)
            cr_expect_neq(deftsim_method_get((deftsim_method)j)->style, d->style,
                          "%s and %s share a style", deftsim_method_get((deftsim_method)j)->name,
                          d->name);
        char line[64];
        snprintf(line, sizeof line, "\nset style line %d lc", d->style);
        cr_expect(strstr(text, line), "style.gp has no line style %d (%s)", d->style, d->name);
        char quoted[40];
        snprintf(quoted, sizeof quoted, "\"%s\"", d->name);
        cr_expect_null(strstr(text, quoted), "style.gp names %s itself", d->name);
    }
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

static deftsim_status firstk_step(deftsim_sparsifier *s, uint64_t t, const deftsim_acc_provider *a)
{
    (void)t;
    firstk_state *d = s->priv;
    for (uint64_t i = 0; i < s->k; i++) s->agg_idx[i] = (deftsim_kidx)i;
    return sp_gather_residual(s, a, s->k, d->vals, d->ph_gather, d->ph_residual);
}

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
    const deftsim_method_desc d = {"firstk", "First k", NULL, 0, 12, &firstk_impl,
                                   firstk_closed_form};
    deftsim_method id;
    cr_assert_eq(deftsim_method_register(&d, &id), DEFTSIM_OK, "%s", deftsim_error_message());
    return id;
}

Test(registry, register_rejects_bad_descriptors)
{
    deftsim_method id;
    deftsim_method_desc d = {"topk", "x", "x", 0, 12, &firstk_impl, NULL};
    cr_expect_eq(deftsim_method_register(&d, &id), DEFTSIM_E_USAGE);
    cr_expect(strstr(deftsim_error_message(), "'topk' is taken"), "%s", deftsim_error_message());
    d.name = "Bad Name";
    cr_expect_eq(deftsim_method_register(&d, &id), DEFTSIM_E_USAGE);
    d.name = "";
    cr_expect_eq(deftsim_method_register(&d, &id), DEFTSIM_E_USAGE);
    d.name = "noimpl";
    d.impl = NULL;
    cr_expect_eq(deftsim_method_register(&d, &id), DEFTSIM_E_USAGE);
    cr_expect_eq(deftsim_method_count(), DEFTSIM_METHOD_COUNT);
    /* Until the registry is full. */
    d.impl = &firstk_impl;
    char names[DEFTSIM_METHOD_MAX][16];
    size_t added = 0;
    for (size_t i = 0; i < DEFTSIM_METHOD_MAX; i++) {
        snprintf(names[i], sizeof names[i], "extra%zu", i);
        d.name = names[i];
        if (deftsim_method_register(&d, &id) != DEFTSIM_OK) break;
        cr_expect_eq(id, (deftsim_method)(DEFTSIM_METHOD_COUNT + i));
        added++;
    }
    cr_expect_eq(added, DEFTSIM_METHOD_MAX - DEFTSIM_METHOD_COUNT);
    cr_expect(strstr(deftsim_error_message(), "full"), "%s", deftsim_error_message());
}

Test(registry, registered_method_runs_through_the_sparsifier_api)
{
    deftsim_method id = firstk_register();
    cr_expect_eq(id, DEFTSIM_METHOD_COUNT);
    cr_expect_str_eq(deftsim_method_name(id), "firstk");
    deftsim_method back;
    cr_expect_eq(deftsim_method_from_name("firstk", &back), 0);
    cr_expect_eq(back, id);
    cr_expect_str_eq(deftsim_method_get(id)->short_title, "First k");
    cr_expect_str_eq(deftsim_method_names()[DEFTSIM_METHOD_COUNT], "firstk");

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
             "[sparsify]\nmethods = firstk\ndensities = 0.001\n"
             "[workers]\ncounts = 2\n[network]\nsimulate = 0\n",
             tmpdir);
    deftsim_config *cfg = NULL;
    cr_assert_eq(deftsim_config_parse(text, "reg.ini", NULL, 0, &cfg), DEFTSIM_OK, "%s",
                 deftsim_error_message());
    cr_assert_eq(cfg->sparsify.nmethods, 1);
    cr_assert_eq(cfg->sparsify.methods[0], DEFTSIM_METHOD_COUNT);
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
