/* config_params.c - [gradients] params: a parameter file (or a built-in set, the generator's
 * traces/params/) of [synthetic] keys that fill what the scenario and --set leave unset
 * (docs/GENERATOR.md, "Calibration"); unset, the model table's own set (deftsim_gen_table_params),
 * and `none` for the plain defaults. Resolved here once: the engine, the CUDA generator (its
 * constants come from the host generator built from these keys) and the manifests read the
 * keys and deftsim_config_params_choice, never the table. */
#include <ctype.h>
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

/* One name of a model list, trimmed, into buf ("" when it does not fit: no table's name). */
static const char *list_item(const char *p, size_t len, char *buf, size_t cap)
{
    while (len && isspace((unsigned char)*p)) p++, len--;
    while (len && isspace((unsigned char)p[len - 1])) len--;
    if (len >= cap) len = 0;
    memcpy(buf, p, len);
    buf[len] = '\0';
    return buf;
}

void deftsim_config_params_choice(const deftsim_config *cfg, deftsim_params_choice *out)
{
    memset(out, 0, sizeof *out);
    const char *named = cfg->gradients.params;
    if (named && !strcmp(named, DEFTSIM_PARAMS_NONE)) {
        out->why = DEFTSIM_PARAMS_OFF;
        return;
    }
    if (named) {
        out->set = named;
        out->why = DEFTSIM_PARAMS_NAMED;
        return;
    }
    if (cfg->gradients.source != DEFTSIM_SOURCE_SYNTHETIC) {
        out->why = DEFTSIM_PARAMS_TRACE;
        return;
    }
    out->why = DEFTSIM_PARAMS_NO_DEFAULT;
    const char *set = NULL, *note = NULL;
    int fitted = 1, n = 0;
    for (const char *p = cfg->gradients.model; p; n++) {
        size_t len = strcspn(p, ",");
        char name[256];
        int fit;
        const char *one_note, *one = deftsim_gen_table_params(list_item(p, len, name, sizeof name),
                                                              &fit, &one_note);
        if (n && (!set != !one || (set && strcmp(set, one)))) {
            out->why = DEFTSIM_PARAMS_PER_MODEL;
            return;
        }
        set = one;
        note = one_note;
        fitted &= fit;
        p = p[len] ? p + len + 1 : NULL;
    }
    if (!set) return;
    out->set = set;
    out->why = DEFTSIM_PARAMS_TABLE;
    out->fitted = fitted;
    out->note = n == 1 ? note : NULL;
}

const char *deftsim_params_why_name(deftsim_params_why why)
{
    switch (why) {
    case DEFTSIM_PARAMS_NAMED: return "named";
    case DEFTSIM_PARAMS_TABLE: return "table default";
    case DEFTSIM_PARAMS_OFF: return "none: params = none";
    case DEFTSIM_PARAMS_NO_DEFAULT: return "none: no default set for the table";
    case DEFTSIM_PARAMS_PER_MODEL: return "per model";
    case DEFTSIM_PARAMS_TRACE: return "none: source = trace";
    }
    return "?";
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
    deftsim_params_choice ch;
    deftsim_config_params_choice(cfg, &ch);
    const char *name = ch.set;
    if (!name) return DEFTSIM_OK;
    const char *builtin = deftsim_gen_builtin_params(name);
    if (!builtin && ch.why == DEFTSIM_PARAMS_TABLE)
        return deftsim_error_set(DEFTSIM_E_INTERNAL, "the model table's default set %s is not "
                                 "built in", name);
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
