/* config_methods.c - the sparsifiers' own options in the scenario: the registry's option tables
 * (deftsim_method_desc.options) as rows of the config's schema, each stored in the method's
 * block of deftsim_config's sparsify.opts, and the one mapping from a scenario to a point's
 * sparsifier parameters. */
#include "config_internal.h"
#include "deftsim_config_inputs.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Type texts of the generated rows ("one of: leader, all", "number in [0, 1]"). */
static char type_text[DEFTSIM_METHOD_MAX * DEFTSIM_METHOD_OPTS_MAX][200];

static void make_type(const deftsim_method_option *o, char *buf, size_t cap)
{
    if (o->type == DEFTSIM_OPT_ENUM) {
        size_t n = (size_t)snprintf(buf, cap, "one of: ");
        if (n < cap) deftsim_cfg_names_text(o->names, buf + n, cap - n);
        return;
    }
    snprintf(buf, cap, "%s in [%.17g, %.17g]", o->type == DEFTSIM_OPT_INT ? "integer" : "number",
             o->lo, o->hi);
}

size_t deftsim_cfg_method_keys(size_t first, size_t end, keydef *out, size_t cap)
{
    size_t n = 0;
    for (size_t m = first; m < end; m++) {
        const deftsim_method_desc *d = deftsim_method_get((deftsim_method)m);
        for (size_t j = 0; d && j < d->noptions && n < cap; j++) {
            const deftsim_method_option *o = &d->options[j];
            char *tt = type_text[m * DEFTSIM_METHOD_OPTS_MAX + j];
            make_type(o, tt, sizeof type_text[0]);
            keydef *k = &out[n++];
            memset(k, 0, sizeof *k);
            k->info = (deftsim_config_keyinfo){"sparsify", o->key, tt, o->dflt, o->help};
            k->off = offsetof(deftsim_config, sparsify.opts) + m * sizeof(deftsim_method_opts) +
                     offsetof(deftsim_method_opts, v) + j * sizeof(deftsim_opt_value);
            switch (o->type) {
            case DEFTSIM_OPT_INT:
                k->type = T_INT;
                k->imin = (int64_t)o->lo;
                k->imax = (int64_t)o->hi;
                break;
            case DEFTSIM_OPT_DOUBLE:
                k->type = T_DOUBLE;
                k->lo = o->lo;
                k->hi = o->hi;
                break;
            case DEFTSIM_OPT_ENUM:
                k->type = T_ENUM;
                k->names = o->names;
                break;
            }
        }
    }
    return n;
}

const deftsim_method_opts *deftsim_config_method_opts(const deftsim_config *cfg, deftsim_method m)
{
    static const deftsim_method_opts none;
    return (int)m >= 0 && m < DEFTSIM_METHOD_MAX ? &cfg->sparsify.opts[m] : &none;
}

double deftsim_config_opt(const deftsim_config *cfg, const char *key)
{
    deftsim_method m;
    size_t j;
    if (deftsim_method_option_find(key, &m, &j)) return NAN;
    const deftsim_method_option *o = &deftsim_method_get(m)->options[j];
    deftsim_opt_value v = cfg->sparsify.opts[m].v[j];
    return o->type == DEFTSIM_OPT_DOUBLE ? v.d : (double)v.i;
}

void deftsim_config_sparsifier_params(const deftsim_config *cfg, deftsim_method m, double density,
                                      uint32_t P, const deftsim_model *model, deftsim_kctx *kctx,
                                      const deftsim_team *team, deftsim_sparsifier_params *p)
{
    memset(p, 0, sizeof *p);
    p->method = m;
    p->density = density;
    p->P = P;
    p->model = model;
    p->index_bytes = (uint32_t)cfg->sparsify.index_bytes;
    p->value_bytes = (uint32_t)cfg->sparsify.value_bytes;
    p->wire = cfg->sparsify.wire;
    p->opts = *deftsim_config_method_opts(cfg, m);
    p->seed = cfg->scenario.seed;
    p->kctx = kctx;
    p->team = team && team->size > 1 ? team : NULL;
    p->skip_quality = !cfg->engine.quality;
    p->context = deftsim_config_sparsify_context(cfg, model);
}

deftsim_sparsify_context deftsim_config_sparsify_context(const deftsim_config *cfg,
                                                         const deftsim_model *model)
{
    deftsim_sparsify_context c = {.backward = cfg->compute.backward,
                                  .bandwidth = cfg->network.bandwidth,
                                  .latency = cfg->network.latency};
    /* A [compute] table row's backward time (config_check has resolved it once already). */
    deftsim_compute_times ct;
    if (!(c.backward > 0) && cfg->compute.table && model &&
        deftsim_compute_resolve(cfg, model->name, &ct) == DEFTSIM_OK)
        c.backward = ct.backward;
    return c;
}
