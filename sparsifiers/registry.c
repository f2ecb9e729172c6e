/* registry.c - the table of methods: every lookup by name or position that the config, the
 * CLI, the plots, the engine and the sparsifiers make. Each method's entry (name, titles,
 * capabilities, implementation, closed-form bytes, options, result columns) lives in its own
 * sp_*.c file; `builtin` below lists them once, in registry order. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "deftsim_util.h"
#include "sp_internal.h"

/* The sparsifiers know nothing of scenarios or the network simulation: their headers pull in
 * neither (deftsim_config.h includes deftsim_sparsify.h, not the other way round). */
#if defined(DEFTSIM_CONFIG_H) || defined(JANSSON_H) || defined(DEFTSIM_SIM_H)
#error "deftsim_sparsify.h must not include deftsim_config.h, jansson or deftsim_sim.h"
#endif

/* The built-in methods in registry order: the first DEFTSIM_METHOD_COUNT in the order of
 * deftsim_method, then any method without a value of its own. */
static const deftsim_method_desc *const builtin[] = {
    &deftsim_sp_deft_desc,  &deftsim_sp_topk_desc,  &deftsim_sp_topk_ag_desc,
    &deftsim_sp_cltk_desc,  &deftsim_sp_gtopk_desc, &deftsim_sp_dgc_desc,
    &deftsim_sp_dense_desc, &deftsim_sp_micro_desc, &deftsim_sp_exdyna_desc,
    &deftsim_sp_oktopk_desc, &deftsim_sp_powersgd_desc, &deftsim_sp_lags_desc,
    &deftsim_sp_randk_desc, &deftsim_sp_hardthr_desc, &deftsim_sp_sidco_desc,
};
#define NBUILTIN (sizeof builtin / sizeof builtin[0])
_Static_assert(NBUILTIN >= DEFTSIM_METHOD_COUNT && NBUILTIN <= DEFTSIM_METHOD_MAX,
               "every value of deftsim_method has a registry entry");

static deftsim_method_desc table[DEFTSIM_METHOD_MAX];
static size_t ntable;

/* The names in table order, NULL-terminated (the config's list of choices). */
static const char *names[DEFTSIM_METHOD_MAX + 1];

/* The union of the methods' result columns (rows.csv's method columns). */
#define NCOLS_MAX (DEFTSIM_METHOD_MAX * DEFTSIM_METHOD_COLS_MAX)
static const deftsim_method_column *cols[NCOLS_MAX];
static size_t ncols;

static void cols_add(const deftsim_method_desc *d)
{
    for (size_t j = 0; j < d->ncolumns; j++) {
        size_t i = 0;
        while (i < ncols && strcmp(cols[i]->name, d->columns[j].name)) i++;
        if (i == ncols && ncols < NCOLS_MAX) cols[ncols++] = &d->columns[j];
    }
}

static pthread_once_t init_once = PTHREAD_ONCE_INIT;

static void table_init(void)
{
    for (size_t i = 0; i < NBUILTIN; i++) {
        table[i] = *builtin[i];
        names[i] = table[i].name;
        cols_add(&table[i]);
    }
    ntable = NBUILTIN;
    names[ntable] = NULL;
}

static void ensure(void) { pthread_once(&init_once, table_init); }

size_t deftsim_method_count(void)
{
    ensure();
    return ntable;
}

const deftsim_method_desc *deftsim_method_get(deftsim_method m)
{
    ensure();
    return (int)m >= 0 && (size_t)m < ntable ? &table[m] : NULL;
}

const char *deftsim_method_name(deftsim_method m)
{
    const deftsim_method_desc *d = deftsim_method_get(m);
    return d ? d->name : "?";
}

int deftsim_method_from_name(const char *name, deftsim_method *out)
{
    ensure();
    if (!name) return -1;
    for (size_t i = 0; i < ntable; i++)
        if (strcmp(table[i].name, name) == 0) {
            *out = (deftsim_method)i;
            return 0;
        }
    return -1;
}

int deftsim_method_has(deftsim_method m, unsigned caps)
{
    const deftsim_method_desc *d = deftsim_method_get(m);
    return d && (d->caps & caps) == caps;
}

const char *const *deftsim_method_names(void)
{
    ensure();
    return names;
}

size_t deftsim_method_list(unsigned caps, char *buf, size_t cap)
{
    ensure();
    size_t o = 0;
    if (cap) buf[0] = '\0';
    for (size_t i = 0; i < ntable; i++) {
        if ((table[i].caps & caps) != caps) continue;
        int w = snprintf(o < cap ? buf + o : NULL, o < cap ? cap - o : 0, "%s%s", o ? ", " : "",
                         table[i].name);
        if (w > 0) o += (size_t)w;
    }
    return o;
}

const char *deftsim_method_cap_name(unsigned cap)
{
    static const char *const cap_names[] = {"default",   "keeps-state", "raw-gradients",
                                            "own-momentum", "data-free", "ddp-buckets",
                                            "sends-all"};
    for (size_t i = 0; i < sizeof cap_names / sizeof cap_names[0]; i++)
        if (cap == 1u << i) return cap_names[i];
    return NULL;
}

int deftsim_method_style(deftsim_method m)
{
    if (!deftsim_method_get(m)) return 0;
    int s = (int)m + 1;
    return s >= DEFTSIM_METHOD_STYLE_OTHER ? s + 1 : s;
}

int deftsim_method_reads_grad(deftsim_method m, const deftsim_method_opts *o)
{
    const deftsim_method_desc *d = deftsim_method_get(m);
    if (!d || !(d->caps & DEFTSIM_METHOD_CAP_RAW_GRADIENTS)) return 0;
    return !d->reads_grad || d->reads_grad(o);
}

/* ---- registration ------------------------------------------------------------------------ */

static int name_ok(const char *s, size_t max, int dash)
{
    size_t n = s ? strlen(s) : 0;
    if (n < 1 || n > max) return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') ||
              (dash ? s[i] == '-' : s[i] == '_')))
            return 0;
    return 1;
}

/* An option table's rows: well-formed keys no other method holds, defaults that parse. */
static deftsim_status check_options(const deftsim_method_desc *d)
{
    if (d->noptions > DEFTSIM_METHOD_OPTS_MAX)
        return deftsim_error_set(DEFTSIM_E_USAGE, "method registry: '%s' has %zu options (at most %d)",
                                 d->name, d->noptions, DEFTSIM_METHOD_OPTS_MAX);
    for (size_t j = 0; j < d->noptions; j++) {
        const deftsim_method_option *o = &d->options[j];
        deftsim_method other;
        size_t pos;
        if (!name_ok(o->key, 40, 0) || !o->dflt || !o->help)
            return deftsim_error_set(DEFTSIM_E_USAGE,
                                     "method registry: '%s': option %zu needs a key of [a-z0-9_], "
                                     "a default and a help line",
                                     d->name, j);
        if (deftsim_method_option_find(o->key, &other, &pos) == 0)
            return deftsim_error_set(DEFTSIM_E_USAGE, "method registry: '%s': option %s is %s's",
                                     d->name, o->key, deftsim_method_name(other));
        deftsim_opt_value v;
        if (deftsim_method_option_parse(o, o->dflt, &v))
            return deftsim_error_wrap(DEFTSIM_E_USAGE, "method registry: '%s': default of %s",
                                      d->name, o->key);
    }
    if (d->ncolumns > DEFTSIM_METHOD_COLS_MAX)
        return deftsim_error_set(DEFTSIM_E_USAGE, "method registry: '%s' has %zu columns (at most %d)",
                                 d->name, d->ncolumns, DEFTSIM_METHOD_COLS_MAX);
    for (size_t j = 0; j < d->ncolumns; j++) {
        const deftsim_method_column *c = &d->columns[j];
        if (!name_ok(c->name, 31, 0) || !c->unit || !c->title || !c->doc)
            return deftsim_error_set(DEFTSIM_E_USAGE,
                                     "method registry: '%s': column %zu needs a name of [a-z0-9_], "
                                     "a unit, a title and a doc line",
                                     d->name, j);
    }
    return DEFTSIM_OK;
}

deftsim_status deftsim_method_register(const deftsim_method_desc *d, deftsim_method *id)
{
    deftsim_method other;
    ensure();
    if (!d || !id) return deftsim_error_set(DEFTSIM_E_USAGE, "method registry: NULL argument");
    if (!name_ok(d->name, 15, 1))
        return deftsim_error_set(DEFTSIM_E_USAGE,
                                 "method registry: name '%s' is not 1..15 of [a-z0-9-]",
                                 d->name ? d->name : "(null)");
    if (deftsim_method_from_name(d->name, &other) == 0)
        return deftsim_error_set(DEFTSIM_E_USAGE, "method registry: '%s' is taken", d->name);
    if (!d->impl || !d->impl->init || !d->impl->step)
        return deftsim_error_set(DEFTSIM_E_USAGE, "method registry: '%s' has no implementation",
                                 d->name);
    if ((d->caps & DEFTSIM_METHOD_CAP_DATA_FREE) && !d->impl->step_data_free)
        return deftsim_error_set(DEFTSIM_E_USAGE,
                                 "method registry: '%s' declares DEFTSIM_METHOD_CAP_DATA_FREE "
                                 "without a data-free step",
                                 d->name);
    if (ntable == DEFTSIM_METHOD_MAX)
        return deftsim_error_set(DEFTSIM_E_USAGE, "method registry: full (%d methods)",
                                 DEFTSIM_METHOD_MAX);
    deftsim_status st = check_options(d);
    if (st) return st;
    table[ntable] = *d;
    if (!table[ntable].title) table[ntable].title = d->name;
    if (!table[ntable].short_title) table[ntable].short_title = table[ntable].title;
    *id = (deftsim_method)ntable;
    names[ntable] = d->name;
    names[++ntable] = NULL;
    cols_add(&table[ntable - 1]);
    return DEFTSIM_OK;
}

deftsim_status deftsim_method_closed_form(deftsim_method m, const deftsim_closed_form_in *in,
                                          uint32_t P, deftsim_schedule *s)
{
    deftsim_schedule_init(s, P);
    const deftsim_method_desc *d = deftsim_method_get(m);
    if (!d || !d->closed_form)
        return deftsim_error_set(DEFTSIM_E_USAGE, "%s: no closed-form schedule",
                                 deftsim_method_name(m));
    if (P < 2) return DEFTSIM_OK;
    return d->closed_form(in, P, s);
}

/* ---- options ----------------------------------------------------------------------------- */

int deftsim_method_option_find(const char *key, deftsim_method *m, size_t *pos)
{
    ensure();
    if (!key) return -1;
    for (size_t i = 0; i < ntable; i++)
        for (size_t j = 0; j < table[i].noptions; j++)
            if (!strcmp(table[i].options[j].key, key)) {
                *m = (deftsim_method)i;
                *pos = j;
                return 0;
            }
    return -1;
}

void deftsim_method_opts_default(deftsim_method m, deftsim_method_opts *o)
{
    memset(o, 0, sizeof *o);
    const deftsim_method_desc *d = deftsim_method_get(m);
    for (size_t j = 0; d && j < d->noptions; j++)
        if (deftsim_method_option_parse(&d->options[j], d->options[j].dflt, &o->v[j]))
            memset(&o->v[j], 0, sizeof o->v[j]); /* registration checked every default */
}

/* Position of option `key` in method m's table, or -1. */
static int option_pos(deftsim_method m, const char *key)
{
    const deftsim_method_desc *d = deftsim_method_get(m);
    for (size_t j = 0; d && key && j < d->noptions; j++)
        if (!strcmp(d->options[j].key, key)) return (int)j;
    return -1;
}

deftsim_status deftsim_sparsifier_params_set(deftsim_sparsifier_params *p, const char *key,
                                             const char *text)
{
    int j = option_pos(p->method, key);
    if (j < 0)
        return deftsim_error_set(DEFTSIM_E_USAGE, "%s: no option %s", deftsim_method_name(p->method),
                                 key ? key : "(null)");
    const deftsim_method_option *o = &deftsim_method_get(p->method)->options[j];
    deftsim_opt_value v;
    deftsim_status st = deftsim_method_option_parse(o, text, &v);
    if (st) return deftsim_error_wrap(st, "%s: %s", deftsim_method_name(p->method), key);
    p->opts.v[j] = v;
    return DEFTSIM_OK;
}

/* Every option of p's method in range: the checks a scenario's values pass in the config,
 * for parameters built in code. */
deftsim_status sp_check_options(const deftsim_sparsifier_params *p)
{
    const deftsim_method_desc *d = deftsim_method_get(p->method);
    for (size_t j = 0; d && j < d->noptions; j++) {
        const deftsim_method_option *o = &d->options[j];
        deftsim_opt_value v = p->opts.v[j];
        if (o->type == DEFTSIM_OPT_ENUM) {
            int n = 0;
            while (o->names[n]) n++;
            if (v.i < 0 || v.i >= n)
                return deftsim_error_set(DEFTSIM_E_USAGE, "%s: unknown %s %d", d->name, o->key, v.i);
        } else {
            double x = o->type == DEFTSIM_OPT_INT ? (double)v.i : v.d;
            if (!(x >= o->lo && x <= o->hi))
                return deftsim_error_set(DEFTSIM_E_USAGE, "%s: %s %g is outside [%g, %g]", d->name,
                                         o->key, x, o->lo, o->hi);
        }
    }
    return d && d->check ? d->check(p) : DEFTSIM_OK;
}

/* ---- result columns ---------------------------------------------------------------------- */

size_t deftsim_method_column_count(void)
{
    ensure();
    return ncols;
}

const deftsim_method_column *deftsim_method_column_get(size_t i)
{
    ensure();
    return i < ncols ? cols[i] : NULL;
}

double deftsim_method_column_value(size_t i, deftsim_method m, const deftsim_step_result *r)
{
    const deftsim_method_desc *d = deftsim_method_get(m);
    const deftsim_method_column *c = deftsim_method_column_get(i);
    for (size_t j = 0; d && c && j < d->ncolumns; j++)
        if (!strcmp(d->columns[j].name, c->name))
            return d->columns[j].get ? d->columns[j].get(r) : r->extra[j];
    return NAN;
}

/* ---- the options shared by every method --------------------------------------------------- */

const char *const deftsim_wire_names[] = {"spec", "reference", NULL};

const char *deftsim_wire_name(deftsim_wire w)
{
    for (int i = 0; deftsim_wire_names[i]; i++)
        if (i == (int)w) return deftsim_wire_names[i];
    return "?";
}
