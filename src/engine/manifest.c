/* manifest.c - manifest.json (deftsim_manifest.h): the keys every results folder's manifest
 * opens with, the machine, the atomic write, and the manifest of a run: its folder check and
 * the points an unfinished run of the folder leaves to resume. */
#include "deftsim_manifest.h"

#include <inttypes.h>
#include <stdio.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "deftsim_build_info.h"
#include "deftsim_folder.h"
#include "deftsim_machine.h"
#include "deftsim_net_mpi.h"
#include "deftsim_noise.h"
#include "deftsim_timing.h"
#include "deftsim_util.h"
#ifdef DEFTSIM_HAVE_CUDA
#include "deftsim_kcuda.h"
#endif
#include "engine_internal.h"

/* ---- the real network mode: the MPI library, the ranks, and the collective algorithms the
 * run forced through Open MPI's MCA variables (OMPI_MCA_coll_*); Open MPI does not report the
 * algorithm its coll/tuned component picks for a call (docs/CLUSTER.md, "Real mode"). */
extern char **environ;

static json_t *mpi_json(void)
{
    json_t *vars = json_object();
    for (char **e = environ; e && *e; e++) {
        const char *eq = strchr(*e, '=');
        if (!eq || strncmp(*e, "OMPI_MCA_coll", 13) != 0) continue;
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)(eq - *e), *e);
        json_object_set_new(vars, name, json_string(eq + 1));
    }
    return json_pack("{s:s, s:i, s:o, s:s, s:s}", "library", deftsim_mpi_library(), "ranks",
                     deftsim_mpi_size(), "mca_coll", vars, "algorithms",
                     json_object_size(vars) ? "as mca_coll forces them"
                                            : "chosen by the library (not reported)",
                     "buffers", deftsim_mpi_buffers());
}

json_t *deftsim_manifest_spread(const deftsim_team *t)
{
    return json_pack("{s:i, s:s, s:s}", "ranks", (int)t->size, "library", deftsim_mpi_library(),
                     "workers", "contiguous blocks: rank r holds floor(r P / R) .. "
                                "floor((r + 1) P / R) - 1");
}

/* ---- the machine ---------------------------------------------------------------------------- */

json_t *deftsim_manifest_machine(void)
{
    char host[256], cpu[256];
    deftsim_hostname(host, sizeof host);
    deftsim_cpu_model(cpu, sizeof cpu, "unknown");
    return json_pack("{s:s, s:s, s:i, s:I}", "hostname", host, "cpu_model", cpu, "cpus_online",
                     (int)deftsim_cpus_online(), "ram_bytes", (json_int_t)deftsim_machine_ram());
}

/* ---- every manifest ------------------------------------------------------------------------- */

json_t *deftsim_manifest_new(const char *format, const deftsim_config *cfg, const char *status,
                             const char *error, const char *started, const char *finished)
{
    json_t *root = json_object();
    if (!root) return NULL;
    json_object_set_new(root, "format", json_string(format));
    json_object_set_new(root, "format_version", json_integer(1));
    json_object_set_new(root, "scenario", json_string(cfg->scenario.name));
    json_object_set_new(root, "seed", json_integer((json_int_t)cfg->scenario.seed));
    json_object_set_new(root, "deftsim",
                        json_pack("{s:s, s:s}", "version", DEFTSIM_VERSION, "git_commit",
                                  DEFTSIM_GIT_COMMIT));
    json_object_set_new(root, "status", json_string(status));
    if (error) json_object_set_new(root, "error", json_string(error));
    json_object_set_new(root, "started", json_string(started));
    json_object_set_new(root, "finished", finished ? json_string(finished) : json_null());
    return root;
}

deftsim_status deftsim_manifest_write(const char *path, json_t *root)
{
    char *text = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(root);
    if (!text) return deftsim_error_set(DEFTSIM_E_NOMEM, "%s: cannot build the manifest", path);
    size_t len = strlen(text);
    /* A trailing newline, as text files have. */
    char *withnl = realloc(text, len + 2);
    if (!withnl) {
        free(text);
        return deftsim_error_nomem("%s", path);
    }
    withnl[len] = '\n';
    withnl[len + 1] = '\0';
    deftsim_status st = deftsim_write_file_atomic(path, withnl, len + 1);
    free(withnl);
    return st;
}

json_t *deftsim_manifest_profile(const char *file, const deftsim_profile *p)
{
    return json_pack("{s:s, s:s, s:s, s:i, s:s, s:s, s:s}", "file", file ? file : "", "device",
                     p->device, "backend", p->backend, "threads", (int)p->threads, "created",
                     p->created, "conditions", p->conditions, "source",
                     p->source[0] ? p->source : "measured");
}

/* ---- the manifest of a run ------------------------------------------------------------------ */

static json_t *xfer_json(const deftsim_kxfer *x)
{
    return json_pack("{s:I, s:I, s:I, s:f, s:f, s:f}", "calls", (json_int_t)x->calls,
                     "bytes_to_device", (json_int_t)x->bytes_to_device, "bytes_from_device",
                     (json_int_t)x->bytes_from_device, "copy_seconds", x->copy_seconds,
                     "device_seconds", x->device_seconds, "untimed_seconds", x->untimed_seconds);
}

static json_t *manifest_json(const deftsim_engine *e, const char *started, const char *finished,
                             const char *status, const char *error, const point_record *recs,
                             size_t nrecs, int rows_written)
{
    const deftsim_config *cfg = e->cfg;
    const deftsim_memory_plan *pl = &e->plan;
    json_t *root = deftsim_manifest_new("deftsim-results", cfg, status, error, started, finished);
    json_t *config = deftsim_config_to_json(cfg);
    if (!root || !config) {
        json_decref(root);
        json_decref(config);
        return NULL;
    }
    json_object_set_new(root, "machine", deftsim_manifest_machine());
    if (cfg->execute.network == DEFTSIM_EXEC_MPI) json_object_set_new(root, "mpi", mpi_json());
    if (e->opt.team && e->opt.team->size > 1) json_object_set_new(root, "spread", deftsim_manifest_spread(e->opt.team));
    json_object_set_new(root, "kernels",
                        json_pack("{s:s, s:i, s:i}", "backend", deftsim_kctx_backend(e->kctx),
                                  "threads", (int)deftsim_kctx_threads(e->kctx), "prep_threads",
                                  (int)e->prep_threads));
    json_object_set_new(root, "timing", deftsim_timing_json(cfg));
    if (e->profile)
        json_object_set_new(json_object_get(root, "kernels"), "profile",
                            deftsim_manifest_profile(cfg->device.profile, e->profile));
    json_t *src = json_pack("{s:s, s:s, s:I, s:I}", "kind", deftsim_gradsrc_kind(e->src),
                            "model", e->model->name, "n", (json_int_t)e->model->numel, "layers",
                            (json_int_t)e->model->nlayers);
    json_t *ids = json_array();
    for (size_t i = 0; i < e->iterations; i++) json_array_append_new(ids, json_integer((json_int_t)e->source_iter[i]));
    json_object_set_new(src, "iterations", ids);
    deftsim_gradsrc_describe(e->src, src);
    json_object_set_new(root, "source", src);

    json_t *mem = json_pack("{s:I, s:f, s:I, s:s, s:i, s:i}", "ram_bytes", (json_int_t)pl->ram_bytes,
                            "budget_fraction", pl->budget_fraction, "budget_bytes",
                            (json_int_t)pl->budget_bytes, "error_feedback",
                            deftsim_feedback_name(pl->feedback), "sampled_workers",
                            (int)pl->sampled_workers, "largest_fit", (int)pl->largest_fit);
    json_t *per = json_array();
    for (size_t i = 0; i < pl->ncounts; i++) {
        const deftsim_memory_row *r = &pl->rows[i];
        json_array_append_new(per, json_pack("{s:i, s:I, s:I, s:I, s:I}", "P", (int)r->P, "bytes",
                                             (json_int_t)r->bytes, "residual_bytes",
                                             (json_int_t)r->residual_bytes, "sparsifier_bytes",
                                             (json_int_t)r->sparsifier_bytes, "engine_bytes",
                                             (json_int_t)r->engine_bytes));
    }
    json_object_set_new(mem, "per_P", per);
    json_object_set_new(root, "memory", mem);

    json_t *pts = json_array();
    for (size_t i = 0; i < nrecs; i++)
        json_array_append_new(pts, recs[i].kept ? json_deep_copy(recs[i].kept) : json_pack("{s:s, s:f, s:i, s:s, s:I, s:f, s:f, s:f, s:f, s:I, "
                                             "s:I}", "method",
                                             recs[i].method, "density", recs[i].density, "P",
                                             (int)recs[i].P, "file", recs[i].file, "rows",
                                             (json_int_t)recs[i].rows, "seconds", recs[i].seconds,
                                             "prepare_seconds", recs[i].prepare_seconds,
                                             "step_seconds", recs[i].step_seconds,
                                             "sim_seconds", recs[i].sim_seconds, "sim_messages",
                                             (json_int_t)recs[i].sim_messages, "sim_peak_rss_bytes",
                                             (json_int_t)recs[i].sim_peak_rss));
    json_object_set_new(root, "points", pts);
    for (size_t i = 0; i < nrecs; i++)
        if (!recs[i].kept) { /* a resumed point keeps its record */
            json_object_set_new(json_array_get(pts, i), "machine_state",
                                deftsim_noise_json(&recs[i].machine_start, &recs[i].machine_end));
            json_object_set_new(json_array_get(pts, i), "stages", deftsim_stages_json(&recs[i].stages));
        }
    if (deftsim_engine_moves_data(e)) {
        /* What the cuda-staged backend copied, per point and in all (docs/OUTPUT.md). */
        deftsim_kxfer tot;
        deftsim_kctx_transfers(e->kctx, &tot);
        json_t *kj = json_object_get(root, "kernels");
#ifdef DEFTSIM_HAVE_CUDA
        json_object_set_new(kj, "device", json_string(deftsim_kcuda_device_name(
                                              deftsim_kcuda_staged_device(e->kctx))));
#endif
        json_object_set_new(kj, "copies", xfer_json(&tot));
        for (size_t i = 0; i < nrecs; i++)
            if (!recs[i].kept)
                json_object_set_new(json_array_get(pts, i), "copies", xfer_json(&recs[i].xfer));
    }
    json_object_set_new(root, "rows_csv", rows_written ? json_string("rows.csv") : json_null());
    json_object_set_new(root, "dump", e->dump_dir ? json_string(e->dump_dir) : json_null());
    json_object_set_new(root, "platform", deftsim_platform_record_json(&e->platform));
    /* [compute]: the figures the iterations ran with and where they come from. */
    if (e->has_compute) {
        const deftsim_compute_plan *cp = &e->compute;
        json_t *c = json_object(), *bk = json_array();
        for (size_t b = 0; b < cp->nbuckets; b++)
            json_array_append_new(bk, json_integer((json_int_t)cp->bucket_elems[b]));
        json_object_set_new(c, "forward_seconds", json_real(cp->t.forward));
        json_object_set_new(c, "backward_seconds", json_real(cp->t.backward));
        json_object_set_new(c, "origin", json_string(cp->t.origin));
        json_object_set_new(c, "source", cp->t.source[0] ? json_string(cp->t.source) : json_null());
        json_object_set_new(c, "dense_buckets", bk);
        json_object_set_new(root, "compute", c);
    } else {
        json_object_set_new(root, "compute", json_null());
    }
    json_object_set_new(root, "config", config);
    return root;
}

deftsim_status deftsim_engine_write_manifest(const deftsim_engine *e, const char *started,
                                             const char *finished, const char *status,
                                             const char *error, const point_record *recs,
                                             size_t nrecs, int rows_written)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/manifest.json", e->cfg->scenario.output);
    json_t *root = manifest_json(e, started, finished, status, error, recs, nrecs, rows_written);
    if (!root) return deftsim_error_set(DEFTSIM_E_NOMEM, "%s: cannot build the manifest", path);
    return deftsim_manifest_write(path, root);
}

/* ---- the folder: its check, and what a rerun keeps ----------------------------------------- */

/* What a run writes: a folder of another kind or another scenario's results is refused
 * (deftsim_folder_check); a rerun of the same scenario replaces its own, or resumes it when
 * it did not finish (deftsim_engine_kept_points). */
static const deftsim_folder_writer run_writer = {
    .format = "deftsim-results",
    .noun = "a run",
    .verb = "run",
    .option = "--output DIR",
    .another = "the results of another run",
    .why = "this run would replace them",
    .identity_of = deftsim_folder_run_identity_of,
    .files = (const char *const[]){"rows.csv"},
    .nfiles = 1,
};

deftsim_status deftsim_engine_check_output(const deftsim_engine *e)
{
    json_t *m = json_pack("{s:o}", "config", deftsim_config_to_json(e->cfg));
    json_t *id = m ? deftsim_folder_run_identity_of(m) : NULL;
    json_decref(m);
    if (!id) return deftsim_error_set(DEFTSIM_E_NOMEM, "engine: cannot describe the configuration");
    deftsim_status st = deftsim_folder_check(e->cfg->scenario.output, &run_writer, id, NULL);
    json_decref(id);
    return st;
}

json_t *deftsim_engine_kept_points(const deftsim_engine *e)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/manifest.json", e->cfg->scenario.output);
    json_t *m = json_load_file(path, 0, NULL), *kept = json_array();
    const char *fmt = json_string_value(json_object_get(m, "format"));
    const char *status = json_string_value(json_object_get(m, "status"));
    /* deftsim_engine_check_output() has found the same scenario there, or none. */
    int unfinished = fmt && !strcmp(fmt, "deftsim-results") && status &&
                     (!strcmp(status, "running") || !strcmp(status, "interrupted") ||
                      !strcmp(status, "failed"));
    size_t i;
    json_t *p;
    if (unfinished && kept)
        json_array_foreach(json_object_get(m, "points"), i, p) {
            const char *file = json_string_value(json_object_get(p, "file"));
            struct stat sb;
            snprintf(path, sizeof path, "%s/%s", e->cfg->scenario.output, file ? file : "");
            if (file && stat(path, &sb) == 0 && S_ISREG(sb.st_mode)) json_array_append(kept, p);
        }
    json_decref(m);
    if (!json_array_size(kept)) {
        json_decref(kept);
        return NULL;
    }
    return kept;
}

int deftsim_engine_kept_take(json_t *kept, const char *rel, point_record *rec)
{
    size_t i;
    json_t *p;
    json_array_foreach(kept, i, p) {
        const char *file = json_string_value(json_object_get(p, "file"));
        if (!file || strcmp(file, rel)) continue;
        rec->rows = (uint64_t)json_integer_value(json_object_get(p, "rows"));
        rec->seconds = json_number_value(json_object_get(p, "seconds"));
        rec->prepare_seconds = json_number_value(json_object_get(p, "prepare_seconds"));
        rec->step_seconds = json_number_value(json_object_get(p, "step_seconds"));
        rec->sim_seconds = json_number_value(json_object_get(p, "sim_seconds"));
        rec->sim_messages = (uint64_t)json_integer_value(json_object_get(p, "sim_messages"));
        rec->kept = json_incref(p);
        return 1;
    }
    return 0;
}
