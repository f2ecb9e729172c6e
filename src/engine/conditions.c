/* conditions.c - the network conditions and where compute was timed, as the words every output
 * shows (deftsim_conditions.h). One formatter, format(), reads a configuration in the JSON of
 * the manifests: a configuration in memory goes through deftsim_config_to_json first, so a
 * figure drawn from a folder and the log of the run that wrote it say the same. */
#include "deftsim_conditions.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "deftsim_analysis.h"
#include "deftsim_machine.h"
#include "deftsim_util.h"

struct deftsim_conditions_src {
    json_t *manifest;
    char path[4200];
};

/* ---- the formatter --------------------------------------------------------------------------- */

static const char *jstr(const json_t *o, const char *key, const char *dflt)
{
    const char *v = json_string_value(json_object_get(o, key));
    return v && *v ? v : dflt;
}

/* An integer member, also as text (a sweep axis's value put in by lookup()). */
static long long jint(const json_t *o, const char *key, long long dflt)
{
    json_t *v = json_object_get(o, key);
    if (json_is_integer(v)) return (long long)json_integer_value(v);
    int64_t x;
    if (json_is_string(v) && !deftsim_parse_i64(json_string_value(v), &x)) return (long long)x;
    return dflt;
}

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

/* config: {"network": {...}, "device": {...}, ...} as deftsim_config_to_json writes it;
 * machine: a manifest's "machine" ({"cpu_model"}); kernels: a run manifest's "kernels" (the
 * CUDA device's name, the profile's device), or NULL. */
static void format(const json_t *config, const json_t *machine, const json_t *kernels,
                   deftsim_conditions *out)
{
    memset(out, 0, sizeof *out);
    const json_t *net = json_object_get(config, "network"), *dev = json_object_get(config, "device");
    const char *preset = jstr(net, "preset", "none"), *lib = jstr(net, "library", "mpi");
    long long G = jint(net, "gpus_per_node", 1);
    int nccl = !strcmp(lib, "nccl");
    out->simulated = jint(net, "simulate", 1) != 0;
    out->gpu_cluster = strcmp(preset, "none") != 0 || nccl || G > 1;
    if (!out->simulated) {
        snprintf(out->network, sizeof out->network,
                 "network: not simulated ([network] simulate = 0; bytes only)");
    } else {
        char gpus[64] = "";
        if (G > 1 && !strcmp(preset, "none")) snprintf(gpus, sizeof gpus, " (%lld GPUs per node)", G);
        char algo[160];
        const char *nm = jstr(net, "nccl_model", NULL); /* where the build has it */
        if (nccl)
            snprintf(algo, sizeof algo, "NCCL (nccl_algorithm %s%s%s)",
                     jstr(net, "nccl_algorithm", "?"), nm ? ", nccl_model " : "", nm ? nm : "");
        else
            snprintf(algo, sizeof algo, "MPI (allreduce %s, allgather %s)",
                     jstr(net, "allreduce", "?"), jstr(net, "allgather", "?"));
        snprintf(out->network, sizeof out->network, "network: preset %s%s, %s, model %s", preset,
                 gpus, algo, jstr(net, "model", "?"));
    }
    const char *kind = jstr(dev, "kind", "cpu");
    const char *lead = "compute phases (selection etc.)";
    size_t o;
    if (!strcmp(kind, "profile")) {
        const char *pdev = jstr(json_object_get(kernels, "profile"), "device", NULL);
        o = (size_t)snprintf(out->compute, sizeof out->compute,
                             "%s charged from the device profile %s%s%s%s", lead,
                             base_name(jstr(dev, "profile", "?")), pdev ? " (" : "",
                             pdev ? pdev : "", pdev ? ")" : "");
    } else if (!strcmp(kind, "cuda")) {
        const char *cdev = jstr(kernels, "device", NULL);
        o = (size_t)snprintf(out->compute, sizeof out->compute, "%s timed on %s%s%s", lead,
                             cdev ? "the CUDA device " : "this machine's CUDA device",
                             cdev ? cdev : "", "");
    } else {
        o = (size_t)snprintf(out->compute, sizeof out->compute,
                             "%s timed on this machine's CPU (%s)%s", lead,
                             jstr(machine, "cpu_model", "model not recorded"),
                             out->gpu_cluster ? ", not on the cluster's GPUs" : "");
    }
    if (out->simulated && !strcmp(jstr(net, "compute", "measured"), "none") &&
        o < sizeof out->compute)
        snprintf(out->compute + o, sizeof out->compute - o,
                 "; left out of the simulated times ([network] compute = none)");
}

deftsim_status deftsim_conditions_of_config(const deftsim_config *cfg, const char *cpu,
                                            deftsim_conditions *out)
{
    memset(out, 0, sizeof *out);
    char buf[256];
    if (!cpu) cpu = deftsim_cpu_model(buf, sizeof buf, "unknown");
    json_t *config = deftsim_config_to_json(cfg), *machine = json_pack("{s:s}", "cpu_model", cpu);
    deftsim_status st = DEFTSIM_OK;
    if (!config || !machine)
        st = deftsim_error_nomem("conditions of scenario '%s'",
                               cfg->scenario.name);
    else
        format(config, machine, NULL, out);
    json_decref(config);
    json_decref(machine);
    return st;
}

void deftsim_conditions_join(const deftsim_conditions *c, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s; %s", c->network, c->compute);
}

void deftsim_conditions_log(FILE *f, const char *who, const deftsim_config *cfg)
{
    deftsim_conditions c;
    if (deftsim_conditions_of_config(cfg, NULL, &c)) return;
    char line[800];
    deftsim_conditions_join(&c, line, sizeof line);
    fprintf(f, "%s: %s\n", who, line);
}

/* ---- from a results folder -------------------------------------------------------------------- */

deftsim_status deftsim_conditions_open(const char *dir, deftsim_conditions_src **out)
{
    *out = NULL;
    deftsim_conditions_src *s = calloc(1, sizeof *s);
    if (!s) return deftsim_error_nomem("%s", dir);
    snprintf(s->path, sizeof s->path, "%s/manifest.json", dir);
    if (access(s->path, F_OK) != 0) {
        free(s);
        return DEFTSIM_OK;
    }
    /* A manifest that is not JSON or holds no configuration names no conditions; the command
     * that reads the folder says what is wrong with it. */
    json_error_t jerr;
    json_t *m = s->manifest = json_load_file(s->path, 0, &jerr);
    if (!json_is_object(json_object_get(m, "config")) &&
        !json_is_object(json_object_get(json_object_get(m, "identity"), "config"))) {
        deftsim_conditions_close(s);
        return DEFTSIM_OK;
    }
    *out = s;
    return DEFTSIM_OK;
}

void deftsim_conditions_close(deftsim_conditions_src *s)
{
    if (!s) return;
    json_decref(s->manifest);
    free(s);
}

/* The variant configuration of a sweep point whose axes hold these values, or NULL. */
static json_t *variant_config(json_t *m, const char *const *axes, const char *const *values,
                              size_t naxes)
{
    size_t i, j;
    json_t *p, *v;
    json_array_foreach(json_object_get(m, "points"), i, p) {
        json_t *pa = json_object_get(p, "axes");
        size_t a = 0;
        while (a < naxes && !strcmp(jstr(pa, axes[a], "\x01"), values[a])) a++;
        if (a < naxes) continue;
        const char *label = jstr(p, "variant", NULL);
        if (!label) return NULL;
        json_array_foreach(json_object_get(m, "variants"), j, v)
            if (!strcmp(jstr(v, "label", ""), label) && json_is_object(json_object_get(v, "config")))
                return json_object_get(v, "config");
        return NULL;
    }
    return NULL;
}

deftsim_status deftsim_conditions_lookup(const deftsim_conditions_src *s,
                                         const char *const *axes, const char *const *values,
                                         size_t naxes, deftsim_conditions *out)
{
    memset(out, 0, sizeof *out);
    json_t *m = s->manifest, *base = json_object_get(m, "config");
    if (!base) base = json_object_get(json_object_get(m, "identity"), "config");
    json_t *var = naxes ? variant_config(m, axes, values, naxes) : NULL;
    json_t *cfg = json_deep_copy(var ? var : base);
    if (!cfg) return deftsim_error_nomem("%s", s->path);
    /* No variant found (an older manifest): the axes' values over the folder's configuration. */
    for (size_t a = 0; !var && a < naxes; a++) {
        const char *dot = strchr(axes[a], '.');
        if (!dot) continue;
        char sec[64];
        snprintf(sec, sizeof sec, "%.*s", (int)(dot - axes[a]), axes[a]);
        json_t *so = json_object_get(cfg, sec);
        if (json_is_object(so)) json_object_set_new(so, dot + 1, json_string(values[a]));
    }
    format(cfg, json_object_get(m, "machine"), json_object_get(m, "kernels"), out);
    json_decref(cfg);
    return DEFTSIM_OK;
}

void deftsim_conditions_note(void *ctx, const char *const *axes, const char *const *values,
                             size_t naxes, char *buf, size_t cap)
{
    if (cap) buf[0] = '\0';
    deftsim_conditions c;
    if (!ctx || deftsim_conditions_lookup(ctx, axes, values, naxes, &c)) return;
    deftsim_conditions_join(&c, buf, cap);
}

void deftsim_conditions_folder(const char *dir, char *buf, size_t cap)
{
    deftsim_conditions_src *s = NULL;
    if (cap) buf[0] = '\0';
    if (deftsim_conditions_open(dir, &s)) return;
    deftsim_conditions_note(s, NULL, NULL, 0, buf, cap);
    deftsim_conditions_close(s);
}

deftsim_status deftsim_conditions_write_md(struct deftsim_analysis *a, const char *dir,
                                           const char *path, const char *const *provenance)
{
    deftsim_conditions_src *s;
    deftsim_status st = deftsim_conditions_open(dir, &s);
    if (st) return st;
    deftsim_analysis_set_note(a, s ? deftsim_conditions_note : NULL, s);
    st = deftsim_analysis_write_md(a, path, provenance);
    deftsim_analysis_set_note(a, NULL, NULL);
    deftsim_conditions_close(s);
    return st;
}
