/* sweep_state.c - what sweep.c, sweep_shard.c and sweep_spread.c share of a sweep's folder
 * and run (sweep_internal.h): paths in the folder, a point's record to and from its manifest
 * entry, the manifest's object, the engine's options and spread mode's team. It calls none of
 * them; calls go one way: sweep.c -> sweep_shard.c, sweep_spread.c -> sweep_state.c, and
 * sweep.c, sweep_shard.c -> sweep_plan.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "deftsim_engine.h"
#include "deftsim_manifest.h"
#include "deftsim_timing.h"
#include "sweep_internal.h"

/* ---- the folder ----------------------------------------------------------------------------- */

void deftsim_sweep_path(const deftsim_sweep *s, const char *rel, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s/%s", s->base->scenario.output, rel);
}

int deftsim_sweep_file_exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

void deftsim_sweep_point_from_json(deftsim_sweep *s, point *p, json_t *e)
{
    const char *state = json_string_value(json_object_get(e, "status"));
    const char *file = json_string_value(json_object_get(e, "file"));
    char fpath[4200];
    deftsim_sweep_path(s, file ? file : p->file, fpath, sizeof fpath);
    free(p->error);
    free(p->finished);
    free(p->git_commit);
    p->error = p->finished = p->git_commit = NULL;
    p->state = DEFTSIM_POINT_PENDING;
    if (state && !strcmp(state, "done") && deftsim_sweep_file_exists(fpath)) {
        p->state = DEFTSIM_POINT_DONE;
        p->rows = (uint64_t)json_integer_value(json_object_get(e, "rows"));
        p->seconds = json_number_value(json_object_get(e, "seconds"));
        p->prepare_seconds = json_number_value(json_object_get(e, "prepare_seconds"));
        p->step_seconds = json_number_value(json_object_get(e, "step_seconds"));
        p->finished = dup_or_null(json_string_value(json_object_get(e, "finished")));
        p->git_commit = dup_or_null(json_string_value(json_object_get(e, "git_commit")));
        json_decref(p->machine_state);
        p->machine_state = json_incref(json_object_get(e, "machine_state"));
        json_decref(p->stages);
        p->stages = json_incref(json_object_get(e, "stages"));
    } else if (state && !strcmp(state, "failed")) {
        p->state = DEFTSIM_POINT_FAILED;
        p->error = dup_or_null(json_string_value(json_object_get(e, "error")));
    }
}

/* ---- manifest --------------------------------------------------------------------------------- */

static const char *state_name(deftsim_point_state st)
{
    switch (st) {
    case DEFTSIM_POINT_DONE: return "done";
    case DEFTSIM_POINT_FAILED: return "failed";
    default: return "pending";
    }
}

json_t *deftsim_sweep_point_json(const deftsim_sweep *s, const point *p, int plan_only)
{
    json_t *axes = json_object();
    const variant *v = &s->variants[p->variant];
    for (size_t a = 0; a < s->naxes; a++)
        json_object_set_new(axes, s->axes[a].key, json_string(s->axes[a].values[v->value_index[a]]));
    json_t *o = json_pack("{s:s, s:s, s:s, s:o, s:s, s:f, s:i, s:s}", "id", p->id, "file", p->file,
                          "variant", v->label, "axes", axes, "method",
                          deftsim_method_name(p->method), "density", p->density, "P", (int)p->P,
                          "status", state_name(plan_only ? DEFTSIM_POINT_PENDING : p->state));
    if (o && plan_only && s->opt.shard_count) {
        /* shards/plan.json: the deal, which every shard and the merge read back. */
        json_object_set_new(o, "shard", json_integer((json_int_t)p->shard));
        json_object_set_new(o, "cost", json_real(p->cost));
    }
    if (!o || plan_only) return o;
    if (p->state == DEFTSIM_POINT_DONE) {
        json_object_set_new(o, "rows", json_integer((json_int_t)p->rows));
        json_object_set_new(o, "seconds", json_real(p->seconds));
        json_object_set_new(o, "prepare_seconds", json_real(p->prepare_seconds));
        json_object_set_new(o, "step_seconds", json_real(p->step_seconds));
        json_object_set_new(o, "finished", p->finished ? json_string(p->finished) : json_null());
        json_object_set_new(o, "git_commit", p->git_commit ? json_string(p->git_commit) : json_null());
        if (p->machine_state) json_object_set(o, "machine_state", p->machine_state);
        if (p->stages) json_object_set(o, "stages", p->stages);
    } else if (p->state == DEFTSIM_POINT_FAILED) {
        json_object_set_new(o, "error", json_string(p->error ? p->error : ""));
        char f[1500];
        snprintf(f, sizeof f, "points/%s.failed", p->id);
        json_object_set_new(o, "error_file", json_string(f));
    }
    return o;
}

/* A profile variant's record (deftsim_manifest_profile): which profile timed its points, its
 * device, conditions and source. A profile that cannot be read says why ("error"); its
 * points fail with the same message. */
static json_t *variant_profile_json(const char *file)
{
    deftsim_profile *p = calloc(1, sizeof *p);
    if (!p) return json_null();
    json_t *o = deftsim_profile_load(file, p) == DEFTSIM_OK
                    ? deftsim_manifest_profile(file, p)
                    : json_pack("{s:s, s:s}", "file", file ? file : "", "error",
                                deftsim_error_message());
    free(p);
    return o ? o : json_null();
}

json_t *deftsim_sweep_manifest_json(const deftsim_sweep *s, const char *status,
                                    const char *finished, int rows_written, int only_shard,
                                    int plan_only)
{
    json_t *root = deftsim_manifest_new(MANIFEST_FORMAT, s->base, status, NULL,
                                        s->started ? s->started : "", finished);
    if (!root) return NULL;
    json_object_set_new(root, "machine", deftsim_manifest_machine());
    if (deftsim_sweep_spread_team(s)) json_object_set_new(root, "spread", deftsim_manifest_spread(deftsim_sweep_spread_team(s)));
    json_object_set_new(root, "timing", deftsim_timing_json(s->base));
    json_object_set_new(root, "identity", json_deep_copy(s->identity));
    json_t *axes = json_array();
    for (size_t a = 0; a < s->naxes; a++) {
        json_t *vals = json_array();
        for (size_t j = 0; j < s->axes[a].nvalues; j++)
            json_array_append_new(vals, json_string(s->axes[a].values[j]));
        json_array_append_new(axes, json_pack("{s:s, s:o, s:s}", "key", s->axes[a].key, "values",
                                              vals, "from", s->axes[a].from_scenario ? "scenario"
                                                                                     : "--vary"));
    }
    json_object_set_new(root, "axes", axes);
    json_t *vars = json_array();
    for (size_t v = 0; v < s->nvariants; v++) {
        /* A user's platform file: its name, size and SHA-256, and where the folder keeps its
         * copy (the engine writes it beside the variant's points). */
        const variant *var = &s->variants[v];
        json_t *plat = deftsim_platform_record_json(&var->platform);
        if (var->platform.path && var->label[0] && json_is_object(plat)) {
            char copy[4400];
            snprintf(copy, sizeof copy, "points/%s/%s", var->label, var->platform.copy);
            json_object_set_new(plat, "copy", json_string(copy));
        }
        json_t *vj = json_pack("{s:s, s:o, s:o*, s:o}", "label", var->label, "config",
                               deftsim_config_to_json(var->cfg), "platform", plat, "timing",
                               deftsim_timing_json(var->cfg));
        if (vj && var->cfg->device.kind == DEFTSIM_DEVICE_PROFILE)
            json_object_set_new(vj, "profile", variant_profile_json(var->cfg->device.profile));
        json_array_append_new(vars, vj);
    }
    json_object_set_new(root, "variants", vars);
    json_t *pts = json_array();
    for (size_t i = 0; i < s->npoints; i++)
        if (!only_shard || s->points[i].in_shard)
            json_array_append_new(pts, deftsim_sweep_point_json(s, &s->points[i], plan_only));
    size_t k;
    json_t *e;
    if (!only_shard && !plan_only) json_array_foreach(s->extra_points, k, e) json_array_append(pts, e);
    json_object_set_new(root, "points", pts);
    json_object_set_new(root, "rows_csv", rows_written ? json_string("rows.csv") : json_null());
    return root;
}

/* ---- the run ------------------------------------------------------------------------------- */

deftsim_run_options deftsim_sweep_engine_options(const deftsim_sweep *s)
{
    deftsim_run_options o;
    deftsim_run_options_default(&o);
    o.ram_bytes = s->opt.ram_bytes;
    o.prep_threads = s->opt.prep_threads;
    o.team = s->opt.team;
    o.stop = s->opt.stop;
    return o;
}

/* Spread mode: more than one rank. */
const deftsim_team *deftsim_sweep_spread_team(const deftsim_sweep *s)
{
    return s->opt.team && s->opt.team->size > 1 ? s->opt.team : NULL;
}
