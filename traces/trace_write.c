/* trace_write.c - gradient traces written: the writer (flat layout, one file per iteration,
 * the manifest last) and the import, which writes the manifest a per-rank trace's files give.
 *
 * Call order (a file calls only files below it):
 *   trace_write.c  the writer and the import of a per-rank trace (which opens it to read)
 *   trace.c        the manifest and the reader: opens a trace, hands out gradients
 *   trace_rank.c   the per-rank layout (iter_<t>/rank_<r>.safetensors) */
#include "trace_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "deftsim_util.h"

/* ---- Writer -------------------------------------------------------------------------------- */

struct deftsim_trace_writer {
    char *dir;
    deftsim_model *model;
    uint32_t workers;
    json_t *provenance;
    json_t *iterations; /* array of written ids */
    uint64_t last;
    int failed;
    float *chunk;       /* put_fill's buffer */
};

/* Elements per chunk of put_fill: 4 MiB of floats. */
#define WRITER_CHUNK (1u << 20)

void deftsim_trace_writer_discard(deftsim_trace_writer *w)
{
    if (!w) return;
    free(w->dir);
    deftsim_model_free(w->model);
    json_decref(w->provenance);
    json_decref(w->iterations);
    free(w->chunk);
    free(w);
}

/* What another manifest.json in a trace's directory says the directory holds. */
static const char *folder_holds(const char *format)
{
    if (!format) return "a manifest.json deftsim did not write";
    if (!strcmp(format, "deftsim-results")) return "the results of deftsim run";
    if (!strcmp(format, "deftsim-sweep")) return "the points of deftsim sweep";
    if (!strcmp(format, "deftsim-train-results")) return "the results of deftsim train";
    return "something else";
}

/* A trace replaces only a trace of the same model, workers and provenance (its recorder, which
 * names the build, aside): a rerun of the same generation or recording. Any other manifest.json
 * in dir (a results folder, another trace, one that is not JSON) is refused, and dir is left as
 * it is. */
static deftsim_status check_existing(const char *dir, const char *mpath, const deftsim_model *m,
                                     uint32_t workers, const json_t *provenance)
{
    struct stat sb;
    if (stat(mpath, &sb) != 0) return DEFTSIM_OK;
    json_error_t jerr;
    json_t *old = json_load_file(mpath, 0, &jerr);
    if (!old)
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "%s:%d: not JSON: %s; write the trace into another folder (-o DIR)",
                                 mpath, jerr.line, jerr.text);
    const char *fmt = json_string_value(json_object_get(old, "format"));
    if (!fmt || strcmp(fmt, DEFTSIM_TRACE_FORMAT_NAME)) {
        deftsim_status st = deftsim_error_set(DEFTSIM_E_INPUT,
                                              "%s: the folder holds %s, not a trace; write the "
                                              "trace into another folder (-o DIR)",
                                              dir, folder_holds(fmt));
        json_decref(old);
        return st;
    }
    char diff[1024];
    size_t o = 0;
    int shown = 0;
    diff[0] = '\0';
    json_t *om = json_object_get(old, "model");
    const char *oname = json_string_value(json_object_get(om, "name"));
    if (!oname || strcmp(oname, m->name) ||
        json_integer_value(json_object_get(om, "numel")) != (json_int_t)m->numel) {
        o += (size_t)snprintf(diff + o, o < sizeof diff ? sizeof diff - o : 0,
                              "model: %s here, %s in the folder", m->name, oname ? oname : "absent");
        shown++;
    }
    if (json_integer_value(json_object_get(old, "workers")) != (json_int_t)workers) {
        o += (size_t)snprintf(diff + o, o < sizeof diff ? sizeof diff - o : 0,
                              "%sworkers: %u here, %" JSON_INTEGER_FORMAT " in the folder",
                              o ? "; " : "", workers,
                              json_integer_value(json_object_get(old, "workers")));
        shown++;
    }
    /* Provenance: every key either side has, but the recorder. */
    json_t *op = json_object_get(old, "provenance");
    json_t *keys = json_object();
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)provenance, key, v) json_object_set(keys, key, json_true());
    if (json_is_object(op))
        json_object_foreach(op, key, v) json_object_set(keys, key, json_true());
    json_object_foreach(keys, key, v) {
        if (!strcmp(key, "recorder")) continue;
        json_t *vn = json_object_get(provenance, key), *vo = json_object_get(op, key);
        if (vn && vo && json_equal(vn, vo)) continue;
        if (shown++ >= 4) continue;
        char *tn = vn ? json_dumps(vn, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
        char *to = vo ? json_dumps(vo, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
        o += (size_t)snprintf(diff + o, o < sizeof diff ? sizeof diff - o : 0,
                              "%sprovenance %s: %s here, %s in the folder", o ? "; " : "", key,
                              tn ? tn : "absent", to ? to : "absent");
        free(tn);
        free(to);
    }
    json_decref(keys);
    json_decref(old);
    if (!shown) return DEFTSIM_OK;
    if (shown > 4 && o < sizeof diff) snprintf(diff + o, sizeof diff - o, "; and %d more", shown - 4);
    return deftsim_error_set(DEFTSIM_E_INPUT,
                             "%s holds another trace (%s); this one would replace it: write it "
                             "into another folder (-o DIR)",
                             dir, diff);
}

deftsim_status deftsim_trace_writer_open(const char *dir, const deftsim_model *m, uint32_t workers,
                                         const json_t *provenance, deftsim_trace_writer **out)
{
    *out = NULL;
    if (workers < 1 || workers > DEFTSIM_TRACE_MAX_WORKERS)
        return deftsim_error_set(DEFTSIM_E_INPUT, "%s: workers %u outside [1, %u]", dir, workers,
                                 DEFTSIM_TRACE_MAX_WORKERS);
    if (m->nlayers == 0 || m->numel == 0)
        return deftsim_error_set(DEFTSIM_E_INPUT, "%s: model '%s' has no elements", dir, m->name);
    for (size_t i = 0; i < m->nlayers; i++)
        if (m->layers[i].ndim < 1 || m->layers[i].ndim > DEFTSIM_MAX_DIMS)
            return deftsim_error_set(DEFTSIM_E_INPUT, "%s: model '%s': layer '%s' has %u "
                                     "dimensions", dir, m->name, m->layers[i].name,
                                     m->layers[i].ndim);
    deftsim_status st = deftsim_trace_check_provenance(provenance, dir);
    if (st) return st;
    char *mpath = trace_join_path(dir, DEFTSIM_TRACE_MANIFEST);
    if (!mpath) return deftsim_error_nomem("%s", dir);
    if ((st = check_existing(dir, mpath, m, workers, provenance)) || (st = deftsim_mkdir_p(dir))) {
        free(mpath);
        return st;
    }
    /* The directory is no valid trace until the new manifest lands. */
    if (unlink(mpath) != 0 && errno != ENOENT) {
        st = deftsim_error_set(DEFTSIM_E_IO, "%s: cannot remove the old manifest: %s", mpath,
                               strerror(errno));
        free(mpath);
        return st;
    }
    free(mpath);
    deftsim_trace_writer *w = calloc(1, sizeof *w);
    if (!w) return deftsim_error_nomem("%s", dir);
    w->workers = workers;
    w->dir = strdup(dir);
    w->provenance = json_deep_copy(provenance);
    w->iterations = json_array();
    if (!w->dir || !w->provenance || !w->iterations ||
        (st = deftsim_model_clone(m, &w->model))) {
        deftsim_trace_writer_discard(w);
        return st ? st : deftsim_error_nomem("%s", dir);
    }
    *out = w;
    return DEFTSIM_OK;
}

/* Starts iteration's file: checks the id, writes the header. */
static deftsim_status begin_file(deftsim_trace_writer *w, uint64_t iteration, char **path,
                                 deftsim_afile **af)
{
    *path = NULL;
    *af = NULL;
    if (w->failed)
        return deftsim_error_set(DEFTSIM_E_RUNTIME, "%s: an earlier write failed", w->dir);
    if (json_array_size(w->iterations) > 0 && iteration <= w->last)
        return deftsim_error_set(DEFTSIM_E_INPUT, "%s: iteration %" PRIu64 " written after %"
                                 PRIu64 " (ids must strictly increase)", w->dir, iteration,
                                 w->last);
    if (iteration > (uint64_t)INT64_MAX)
        return deftsim_error_set(DEFTSIM_E_INPUT, "%s: iteration %" PRIu64 " exceeds 2^63-1",
                                 w->dir, iteration);
    char fname[64];
    deftsim_trace_iteration_filename(iteration, fname, sizeof fname);
    *path = trace_join_path(w->dir, fname);
    if (!*path) return deftsim_error_nomem("%s", w->dir);

    deftsim_st_spec *specs = calloc(w->workers, sizeof *specs);
    char(*names)[24] = calloc(w->workers, sizeof *names);
    uint64_t shape[1] = {w->model->numel};
    char itbuf[32], pbuf[32];
    snprintf(itbuf, sizeof itbuf, "%" PRIu64, iteration);
    snprintf(pbuf, sizeof pbuf, "%" PRIu32, w->workers);
    json_t *meta = json_pack("{s:s, s:s, s:s, s:s, s:s}", "format", DEFTSIM_TRACE_FORMAT_NAME,
                             "format_version", "1", "model", w->model->name, "iteration", itbuf,
                             "workers", pbuf);
    char *header = NULL;
    size_t hlen = 0;
    uint64_t dsize = 0;
    deftsim_status st = DEFTSIM_OK;
    if (!specs || !names || !meta) {
        st = deftsim_error_nomem("%s", *path);
        goto done;
    }
    for (uint32_t i = 0; i < w->workers; i++) {
        deftsim_trace_worker_name(i, names[i], sizeof names[i]);
        specs[i] = (deftsim_st_spec){names[i], "F32", 1, shape};
    }
    if ((st = deftsim_st_build_header(specs, w->workers, meta, &header, &hlen, &dsize))) goto done;
    if ((st = deftsim_afile_open(af, *path))) goto done;
    if (fwrite(header, 1, hlen, deftsim_afile_stream(*af)) != hlen) {
        st = deftsim_error_set(DEFTSIM_E_IO, "%s: write failed: %s", *path, strerror(errno));
        deftsim_afile_abort(*af);
        *af = NULL;
    }
done:
    free(specs);
    free(names);
    free(header);
    json_decref(meta);
    return st;
}

static deftsim_status end_file(deftsim_trace_writer *w, uint64_t iteration, deftsim_afile *af)
{
    deftsim_status st = deftsim_afile_commit(af);
    if (st) return st;
    if (json_array_append_new(w->iterations, json_integer((json_int_t)iteration)))
        return deftsim_error_nomem("%s", w->dir);
    w->last = iteration;
    return DEFTSIM_OK;
}

deftsim_status deftsim_trace_writer_put(deftsim_trace_writer *w, uint64_t iteration,
                                        const float *const *grads)
{
    char *path;
    deftsim_afile *af;
    deftsim_status st = begin_file(w, iteration, &path, &af);
    if (st) {
        if (st != DEFTSIM_E_INPUT) w->failed = 1;
        free(path);
        return st;
    }
    FILE *f = deftsim_afile_stream(af);
    size_t n = (size_t)w->model->numel;
    for (uint32_t i = 0; i < w->workers; i++) {
        if (fwrite(grads[i], sizeof(float), n, f) != n) {
            st = deftsim_error_set(DEFTSIM_E_IO, "%s: write failed: %s", path, strerror(errno));
            deftsim_afile_abort(af);
            w->failed = 1;
            free(path);
            return st;
        }
    }
    st = end_file(w, iteration, af);
    if (st) w->failed = 1;
    free(path);
    return st;
}

deftsim_status deftsim_trace_writer_put_fill(deftsim_trace_writer *w, uint64_t iteration,
                                             deftsim_trace_fill_fn fill, void *ctx)
{
    if (!w->chunk && !(w->chunk = malloc(WRITER_CHUNK * sizeof *w->chunk)))
        return deftsim_error_nomem("%s", w->dir);
    char *path;
    deftsim_afile *af;
    deftsim_status st = begin_file(w, iteration, &path, &af);
    if (st) {
        if (st != DEFTSIM_E_INPUT) w->failed = 1;
        free(path);
        return st;
    }
    FILE *f = deftsim_afile_stream(af);
    uint64_t n = w->model->numel;
    for (uint32_t i = 0; i < w->workers && !st; i++) {
        for (uint64_t at = 0; at < n && !st; at += WRITER_CHUNK) {
            uint64_t c = n - at < WRITER_CHUNK ? n - at : WRITER_CHUNK;
            if ((st = fill(ctx, i, at, c, w->chunk))) break;
            if (fwrite(w->chunk, sizeof(float), (size_t)c, f) != c)
                st = deftsim_error_set(DEFTSIM_E_IO, "%s: write failed: %s", path,
                                       strerror(errno));
        }
    }
    if (st) {
        deftsim_afile_abort(af);
        w->failed = 1;
    } else if ((st = end_file(w, iteration, af))) {
        w->failed = 1;
    }
    free(path);
    return st;
}

/* The manifest as JSON that reads well: one line per field and per layer. */
static int write_manifest(FILE *f, const json_t *root)
{
    const size_t flags = JSON_COMPACT | JSON_ENCODE_ANY;
    const char *key;
    json_t *v;
    int first = 1, bad = fputs("{", f) == EOF;
    json_object_foreach((json_t *)root, key, v) {
        bad |= fprintf(f, "%s\n  \"%s\": ", first ? "" : ",", key) < 0;
        first = 0;
        if (strcmp(key, "model")) {
            bad |= json_dumpf(v, f, flags) != 0;
            continue;
        }
        const json_t *layers = json_object_get(v, "layers");
        bad |= fprintf(f, "{\"name\": ") < 0 || json_dumpf(json_object_get(v, "name"), f, flags);
        bad |= fprintf(f, ", \"numel\": ") < 0 || json_dumpf(json_object_get(v, "numel"), f, flags);
        bad |= fprintf(f, ", \"layers\": [") < 0;
        for (size_t i = 0; i < json_array_size(layers); i++) {
            bad |= fprintf(f, "%s\n    ", i ? "," : "") < 0;
            bad |= json_dumpf(json_array_get(layers, i), f, flags) != 0;
        }
        bad |= fprintf(f, "\n  ]}") < 0;
    }
    bad |= fputs("\n}\n", f) == EOF;
    return bad;
}

/* The manifest of a trace: version 1 (flat) or version 2 with layout per-rank; NULL when out
 * of memory. */
static json_t *manifest_json(const deftsim_model *m, uint32_t workers, json_t *iterations,
                             json_t *provenance, int per_rank)
{
    json_t *layers = json_array();
    if (!layers) return NULL;
    for (size_t i = 0; i < m->nlayers; i++) {
        const deftsim_layer *L = &m->layers[i];
        json_t *shape = json_array();
        if (!shape) goto fail;
        for (uint32_t d = 0; d < L->ndim; d++)
            if (json_array_append_new(shape, json_integer((json_int_t)L->shape[d]))) {
                json_decref(shape);
                goto fail;
            }
        if (json_array_append_new(layers, json_pack("{s:s, s:o}", "name", L->name, "shape", shape)))
            goto fail;
    }
    json_t *root = json_object();
    if (!root) goto fail;
    int bad = json_object_set_new(root, "format", json_string(DEFTSIM_TRACE_FORMAT_NAME));
    bad |= json_object_set_new(root, "format_version",
                               json_integer(per_rank ? DEFTSIM_TRACE_FORMAT_VERSION_MAX
                                                     : DEFTSIM_TRACE_FORMAT_VERSION));
    if (per_rank)
        bad |= json_object_set_new(root, "layout", json_string(DEFTSIM_TRACE_LAYOUT_PER_RANK));
    bad |= json_object_set_new(root, "model", json_pack("{s:s, s:I, s:o}", "name", m->name,
                                                        "numel", (json_int_t)m->numel,
                                                        "layers", layers));
    layers = NULL; /* stolen by json_pack, even on failure */
    bad |= json_object_set_new(root, "workers", json_integer((json_int_t)workers));
    bad |= json_object_set_new(root, "dtype", json_string("float32"));
    bad |= json_object_set(root, "iterations", iterations);
    bad |= json_object_set(root, "provenance", provenance);
    if (bad) {
        json_decref(root);
        return NULL;
    }
    return root;
fail:
    json_decref(layers);
    return NULL;
}

deftsim_status deftsim_trace_writer_close(deftsim_trace_writer *w)
{
    deftsim_status st = DEFTSIM_OK;
    json_t *root = NULL;
    char *mpath = NULL;
    if (w->failed) {
        st = deftsim_error_set(DEFTSIM_E_RUNTIME, "%s: an earlier write failed; no manifest "
                               "written", w->dir);
        goto done;
    }
    if (json_array_size(w->iterations) == 0) {
        st = deftsim_error_set(DEFTSIM_E_INPUT, "%s: no iteration written; no manifest written",
                               w->dir);
        goto done;
    }
    root = manifest_json(w->model, w->workers, w->iterations, w->provenance, 0);
    if (!root) goto nomem;
    mpath = trace_join_path(w->dir, DEFTSIM_TRACE_MANIFEST);
    if (!mpath) goto nomem;
    deftsim_afile *af;
    if ((st = deftsim_afile_open(&af, mpath))) goto done;
    if (write_manifest(deftsim_afile_stream(af), root)) {
        st = deftsim_error_set(DEFTSIM_E_IO, "%s: write failed: %s", mpath, strerror(errno));
        deftsim_afile_abort(af);
        goto done;
    }
    st = deftsim_afile_commit(af);
    goto done;
nomem:
    st = deftsim_error_nomem("%s", w->dir);
done:
    json_decref(root);
    free(mpath);
    deftsim_trace_writer_discard(w);
    return st;
}

/* ---- Import: a manifest for a per-rank trace ---------------------------------------------- */

deftsim_status deftsim_trace_import(const char *dir, int *written)
{
    *written = 0;
    deftsim_trace *t;
    deftsim_status st = trace_open(dir, 1, &t);
    if (st) return st;
    json_t *iters = json_array(), *root = NULL, *old = NULL;
    char *mpath = trace_join_path(dir, DEFTSIM_TRACE_MANIFEST);
    if (!iters || !mpath) goto nomem;
    for (size_t i = 0; i < t->man.niter; i++)
        if (json_array_append_new(iters, json_integer((json_int_t)t->man.iters[i]))) goto nomem;
    root = manifest_json(t->man.model, t->man.workers, iters, t->man.provenance, 1);
    if (!root) goto nomem;
    if (access(mpath, F_OK) == 0) {
        json_error_t err;
        old = json_load_file(mpath, JSON_REJECT_DUPLICATES, &err);
        if (!old || !json_equal(old, root))
            st = deftsim_error_set(DEFTSIM_E_INPUT, "%s: exists and differs from the manifest "
                                   "that the files give%s; left as it is (remove it to import "
                                   "again)", mpath, old ? "" : " (it is not even JSON)");
        goto done;
    }
    deftsim_afile *af;
    if ((st = deftsim_afile_open(&af, mpath))) goto done;
    if (write_manifest(deftsim_afile_stream(af), root)) {
        st = deftsim_error_set(DEFTSIM_E_IO, "%s: write failed: %s", mpath, strerror(errno));
        deftsim_afile_abort(af);
        goto done;
    }
    if (!(st = deftsim_afile_commit(af))) *written = 1;
    goto done;
nomem:
    st = deftsim_error_nomem("%s", dir);
done:
    json_decref(iters);
    json_decref(root);
    json_decref(old);
    free(mpath);
    deftsim_trace_close(t);
    return st;
}
