/* registry.c - the table of methods: one line per sparsifier (its name, titles, capabilities,
 * plot style, implementation and closed-form bytes), and every lookup by name or value that
 * the config, the CLI, the plots and the sparsifiers make. Adding a method is its sp_*.c file
 * plus one line below. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "sp_internal.h"

/* The sparsifiers know nothing of scenarios or the network simulation: their headers pull in
 * neither (deftsim_config.h includes deftsim_sparsify.h, not the other way round). */
#if defined(DEFTSIM_CONFIG_H) || defined(JANSSON_H) || defined(DEFTSIM_SIM_H)
#error "deftsim_sparsify.h must not include deftsim_config.h, jansson or deftsim_sim.h"
#endif

#define CAP_DEF DEFTSIM_METHOD_CAP_DEFAULT
#define CAP_STATE DEFTSIM_METHOD_CAP_KEEPS_STATE

/* The built-in methods, in the order of deftsim_method. Style slots: plots/style.gp's
 * `set style line N` (slot DEFTSIM_METHOD_STYLE_OTHER is a name not listed). */
static deftsim_method_desc table[DEFTSIM_METHOD_MAX] = {
    [DEFTSIM_METHOD_DEFT] = {"deft", "DEFT", "DEFT", CAP_DEF, 1, &deftsim_sp_deft,
                             deftsim_sp_deft_closed_form},
    [DEFTSIM_METHOD_TOPK] = {"topk", "Top-k (allgather idx, allreduce val)", "Top-k", CAP_DEF, 2,
                             &deftsim_sp_topk, deftsim_sp_topk_closed_form},
    [DEFTSIM_METHOD_TOPK_AG] = {"topk-ag", "Top-k (allgather pairs)", "Top-k (pairs)", CAP_DEF, 3,
                                &deftsim_sp_topk_ag, deftsim_sp_topk_ag_closed_form},
    [DEFTSIM_METHOD_CLTK] = {"cltk", "CLT-k", "CLT-k", CAP_DEF | DEFTSIM_METHOD_CAP_RAW_GRADIENTS,
                             4, &deftsim_sp_cltk, deftsim_sp_cltk_closed_form},
    [DEFTSIM_METHOD_GTOPK] = {"gtopk", "gTop-k", "gTop-k", CAP_DEF, 5, &deftsim_sp_gtopk,
                              deftsim_sp_gtopk_closed_form},
    [DEFTSIM_METHOD_DGC] = {"dgc", "DGC", "DGC", CAP_DEF | DEFTSIM_METHOD_CAP_OWN_MOMENTUM, 6,
                            &deftsim_sp_dgc, deftsim_sp_dgc_closed_form},
    [DEFTSIM_METHOD_DENSE] = {"dense", "dense allreduce", "dense",
                              CAP_DEF | DEFTSIM_METHOD_CAP_DATA_FREE, 7, &deftsim_sp_dense,
                              deftsim_sp_dense_closed_form},
    [DEFTSIM_METHOD_MICRO] = {"micro", "MiCRO", "MiCRO", CAP_STATE, 9, &deftsim_sp_micro,
                              deftsim_sp_mcr_closed_form},
    [DEFTSIM_METHOD_EXDYNA] = {"exdyna", "ExDyna", "ExDyna", CAP_STATE, 10, &deftsim_sp_exdyna,
                               deftsim_sp_mcr_closed_form},
    [DEFTSIM_METHOD_OKTOPK] = {"oktopk", "Ok-Topk", "Ok-Topk", CAP_STATE, 11, &deftsim_sp_oktopk,
                               deftsim_sp_oktopk_closed_form},
};
static size_t ntable = DEFTSIM_METHOD_COUNT;

/* The names in table order, NULL-terminated (the config's list of choices). */
static const char *names[DEFTSIM_METHOD_MAX + 1];
static pthread_once_t names_once = PTHREAD_ONCE_INIT;

static void names_build(void)
{
    for (size_t i = 0; i < ntable; i++) names[i] = table[i].name;
    names[ntable] = NULL;
}

size_t deftsim_method_count(void) { return ntable; }

const deftsim_method_desc *deftsim_method_get(deftsim_method m)
{
    return (int)m >= 0 && (size_t)m < ntable ? &table[m] : NULL;
}

const char *deftsim_method_name(deftsim_method m)
{
    const deftsim_method_desc *d = deftsim_method_get(m);
    return d ? d->name : "?";
}

int deftsim_method_from_name(const char *name, deftsim_method *out)
{
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
    pthread_once(&names_once, names_build);
    return names;
}

size_t deftsim_method_list(unsigned caps, char *buf, size_t cap)
{
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

static int name_ok(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (n < 1 || n > 15) return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-'))
            return 0;
    return 1;
}

deftsim_status deftsim_method_register(const deftsim_method_desc *d, deftsim_method *id)
{
    deftsim_method other;
    if (!d || !id) return deftsim_error_set(DEFTSIM_E_USAGE, "method registry: NULL argument");
    if (!name_ok(d->name))
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
    pthread_once(&names_once, names_build);
    table[ntable] = *d;
    if (!table[ntable].title) table[ntable].title = d->name;
    if (!table[ntable].short_title) table[ntable].short_title = table[ntable].title;
    *id = (deftsim_method)ntable;
    names[ntable] = d->name;
    names[++ntable] = NULL;
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

/* ---- The options' names ------------------------------------------------------------------ */

const char *const deftsim_wire_names[] = {"spec", "reference", NULL};
const char *const deftsim_cltk_charge_names[] = {"leader", "all", NULL};
const char *const deftsim_oktopk_variant_names[] = {"vgg", "bert", NULL};
const char *const deftsim_deft_norms_names[] = {"fused", "separate", NULL};
const char *const deftsim_deft_norm_precision_names[] = {"float64", "float32", NULL};
const char *const deftsim_topk_ag_mean_names[] = {"sum", "each", NULL};
const char *const deftsim_oktopk_layer_order_names[] = {"auto", "reverse", "forward", NULL};

static const char *enum_name(const char *const *list, int v)
{
    for (int i = 0; list[i]; i++)
        if (i == v) return list[i];
    return "?";
}

const char *deftsim_wire_name(deftsim_wire w) { return enum_name(deftsim_wire_names, (int)w); }
const char *deftsim_cltk_charge_name(deftsim_cltk_charge c)
{
    return enum_name(deftsim_cltk_charge_names, (int)c);
}
const char *deftsim_oktopk_variant_name(deftsim_oktopk_variant v)
{
    return enum_name(deftsim_oktopk_variant_names, (int)v);
}
const char *deftsim_deft_norms_name(deftsim_deft_norms d)
{
    return enum_name(deftsim_deft_norms_names, (int)d);
}
const char *deftsim_deft_norm_precision_name(deftsim_deft_norm_precision d)
{
    return enum_name(deftsim_deft_norm_precision_names, (int)d);
}
const char *deftsim_topk_ag_mean_name(deftsim_topk_ag_mean m)
{
    return enum_name(deftsim_topk_ag_mean_names, (int)m);
}
const char *deftsim_oktopk_layer_order_name(deftsim_oktopk_layer_order o)
{
    return enum_name(deftsim_oktopk_layer_order_names, (int)o);
}

uint64_t deftsim_k_of_density(double d, uint64_t n)
{
    double k = floor(d * (double)n);
    if (k < 1) return 1;
    if (k > (double)n) return n;
    return (uint64_t)k;
}
