/* config_json.c - a resolved scenario printed: as INI (deftsim_config_to_ini) and as the JSON of
 * the manifests (deftsim_config_to_json). */
#include <string.h>

#include "config_internal.h"

/* ---- printing --------------------------------------------------------------------------- */

deftsim_status deftsim_config_to_ini(const deftsim_config *cfg, FILE *f)
{
    fprintf(f, "# deftsim scenario '%s', fully resolved: every key, defaults filled in.\n",
            cfg->scenario.name);
    for (size_t s = 0; s < deftsim_config_section_count(); s++) {
        fprintf(f, "\n[%s]\n", deftsim_config_section_name(s));
        int any = 0;
        for (size_t i = 0; i < deftsim_cfg_nkeys(); i++) {
            const keydef *k = deftsim_cfg_keydef(i);
            if (strcmp(k->info.section, deftsim_config_section_name(s))) continue;
            kval v = deftsim_cfg_view(cfg, k);
            char buf[DEFTSIM_CONFIG_MAX_LINE + 1];
            size_t n = deftsim_cfg_render(k, &v, buf, sizeof buf);
            if (n >= sizeof buf)
                return deftsim_error_set(DEFTSIM_E_INTERNAL, "[%s] %s: value too long to print",
                                         k->info.section, k->info.key);
            if (n)
                fprintf(f, "%s = %s\n", k->info.key, buf);
            else
                fprintf(f, "%s =\n", k->info.key);
            any = 1;
        }
        if (!any) fprintf(f, "# (no keys yet)\n");
    }
    if (ferror(f)) return deftsim_error_set(DEFTSIM_E_IO, "writing the configuration failed");
    return DEFTSIM_OK;
}

json_t *deftsim_config_to_json(const deftsim_config *cfg)
{
    json_t *root = json_object();
    if (!root) goto nomem;
    for (size_t s = 0; s < deftsim_config_section_count(); s++) {
        json_t *sec = json_object();
        if (!sec || json_object_set_new(root, deftsim_config_section_name(s), sec)) goto nomem;
        for (size_t i = 0; i < deftsim_cfg_nkeys(); i++) {
            const keydef *k = deftsim_cfg_keydef(i);
            if (strcmp(k->info.section, deftsim_config_section_name(s))) continue;
            kval v = deftsim_cfg_view(cfg, k);
            json_t *j = NULL;
            switch (k->type) {
            case T_NAME:
            case T_PATH:
            case T_OPTPATH: j = v.s ? json_string(v.s) : json_null(); break;
            case T_U64: j = json_integer((json_int_t)v.u); break;
            case T_INT: j = json_integer((json_int_t)v.i); break;
            case T_DOUBLE:
            case T_BANDWIDTH:
            case T_DURATION: j = json_real(v.d); break; /* bytes/s, seconds */
            case T_ENUM: j = json_string(knames(k)[v.i]); break;
            case T_ENUM_LIST:
            case T_DOUBLE_LIST:
            case T_INT_LIST:
                j = json_array();
                for (size_t e = 0; j && e < v.n; e++) {
                    json_t *x = k->type == T_ENUM_LIST ? json_string(knames(k)[((int *)v.arr)[e]])
                              : k->type == T_DOUBLE_LIST ? json_real(((double *)v.arr)[e])
                              : json_integer((json_int_t)((int64_t *)v.arr)[e]);
                    if (json_array_append_new(j, x)) {
                        json_decref(j);
                        j = NULL;
                    }
                }
                break;
            }
            if (!j || json_object_set_new(sec, k->info.key, j)) goto nomem;
        }
    }
    /* Which parameter set filled the [synthetic] keys and why (the keys above hold its values). */
    {
        deftsim_params_choice ch;
        deftsim_config_params_choice(cfg, &ch);
        json_t *pu = json_pack("{s:o, s:s}", "set", ch.set ? json_string(ch.set) : json_null(),
                               "why", deftsim_params_why_name(ch.why));
        if (pu && ch.why == DEFTSIM_PARAMS_TABLE) {
            json_object_set_new(pu, "fit", json_string(ch.fitted ? "fitted" : "extrapolated"));
            if (ch.note) json_object_set_new(pu, "note", json_string(ch.note));
        }
        if (!pu || json_object_set_new(json_object_get(root, "gradients"), "params_used", pu))
            goto nomem;
    }
    /* A user's platform file gives every link its own figures and its own shape: the keys
     * that only shape a generated platform do not apply, and a record of the run must not
     * quote their defaults as if they had been simulated (docs/OUTPUT.md). */
    /* One GPU a node (or a user's file): the node keys shape nothing. */
    if (cfg->network.gpus_per_node == 1 || cfg->network.topology == DEFTSIM_TOPO_FILE) {
        static const char *const unused[] = {"intra_fabric", "intra_bandwidth", "intra_latency",
                                             "nics_per_node", "nic_bandwidth"};
        json_t *net = json_object_get(root, "network");
        for (size_t i = 0; i < sizeof unused / sizeof *unused; i++)
            if (json_object_set_new(net, unused[i], json_null())) goto nomem;
    }
    if (cfg->network.topology == DEFTSIM_TOPO_FILE) {
        static const char *const unused[] = {"topology_params", "bandwidth", "latency",
                                             "backbone_bandwidth"};
        json_t *net = json_object_get(root, "network");
        for (size_t i = 0; i < sizeof unused / sizeof *unused; i++)
            if (json_object_set_new(net, unused[i], json_null())) goto nomem;
    }
    return root;
nomem:
    json_decref(root);
    deftsim_error_nomem("config: the scenario's JSON");
    return NULL;
}
