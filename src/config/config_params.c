/* config_params.c - [gradients] params: a parameter file (or a built-in set, the generator's
 * traces/params/) of [synthetic] keys that fill what the scenario and --set leave unset
 * (docs/GENERATOR.md, "Calibration"). */
#include <stdlib.h>
#include <string.h>

#include "config_internal.h"
#include "deftsim_gen.h"
#include "deftsim_util.h"

/* The table index of [synthetic] key, or -1. */
static long synthetic_key(deftsim_config *cfg, const char *key)
{
    const keydef *kd;
    for (size_t i = 0, n = deftsim_cfg_nkeys(); i < n; i++) {
        deftsim_cfg_origin_at(cfg, i, &kd);
        if (!strcmp(kd->info.section, "synthetic") && !strcmp(kd->info.key, key)) return (long)i;
    }
    return -1;
}

/* Lines of `key = value` under one [synthetic] header; comments start with # or ;. */
static deftsim_status read_params(deftsim_config *cfg, const char *name, char *text)
{
    int line = 0, in_synthetic = 0;
    for (char *p = text, *next; p && *p; p = next) {
        line++;
        next = strchr(p, '\n');
        if (next) *next++ = '\0';
        char *l = deftsim_cfg_trim(p);
        if (!*l || *l == '#' || *l == ';') continue;
        if (*l == '[') {
            if (!(in_synthetic = strcmp(l, "[synthetic]") == 0))
                return deftsim_error_set(DEFTSIM_E_INPUT, "%s:%d: section %s: a parameter file "
                                         "holds [synthetic] keys only", name, line, l);
            continue;
        }
        char *eq = strchr(l, '=');
        if (!in_synthetic || !eq)
            return deftsim_error_set(DEFTSIM_E_INPUT, "%s:%d: expected `key = value` under "
                                     "[synthetic]", name, line);
        *eq = '\0';
        char *key = deftsim_cfg_trim(l), *value = deftsim_cfg_trim(eq + 1);
        long k = synthetic_key(cfg, key);
        if (k < 0)
            return deftsim_error_set(DEFTSIM_E_INPUT, "%s:%d: [synthetic] %s: no such key", name,
                                     line, key);
        const keydef *kd;
        int *origin = deftsim_cfg_origin_at(cfg, (size_t)k, &kd);
        if (*origin == DEFTSIM_CFG_ORIGIN_PARAMS)
            return deftsim_error_set(DEFTSIM_E_INPUT, "%s:%d: [synthetic] %s: given twice", name,
                                     line, key);
        if (*origin) continue; /* the scenario's or --set's value wins */
        deftsim_status st = deftsim_cfg_set_value(cfg, kd, value);
        if (st) return deftsim_error_wrap(st, "%s:%d: [synthetic] %s", name, line, key);
        *origin = DEFTSIM_CFG_ORIGIN_PARAMS;
    }
    return DEFTSIM_OK;
}

deftsim_status deftsim_cfg_apply_params(deftsim_config *cfg)
{
    const keydef *kd;
    for (size_t i = 0, n = deftsim_cfg_nkeys(); i < n; i++) {
        int *origin = deftsim_cfg_origin_at(cfg, i, &kd);
        if (*origin != DEFTSIM_CFG_ORIGIN_PARAMS) continue;
        *origin = 0;
        if (kd->info.dflt && deftsim_cfg_set_value(cfg, kd, kd->info.dflt))
            return deftsim_error_wrap(DEFTSIM_E_INTERNAL, "default of [%s] %s", kd->info.section,
                                      kd->info.key);
    }
    const char *name = cfg->gradients.params;
    if (!name) return DEFTSIM_OK;
    const char *builtin = deftsim_gen_builtin_params(name);
    char *text = builtin ? strdup(builtin) : NULL;
    deftsim_status st = DEFTSIM_OK;
    if (builtin && !text) return deftsim_error_nomem("config: parameter file");
    if (!builtin && (st = deftsim_read_file(name, &text, NULL))) {
        char w[600];
        deftsim_config_where(cfg, "gradients", "params", w, sizeof w);
        return deftsim_error_wrap(st, "%s (neither a built-in parameter set nor a file)", w);
    }
    st = read_params(cfg, name, text);
    free(text);
    return st;
}
