/* trace.c - gradient traces: the manifest and the reader (flat layout: validating, zero-copy;
 * the per-rank layout is trace_rank.c's). The writer and the import are trace_write.c's.
 *
 * Call order (a file calls only files below it):
 *   trace_write.c  the writer and the import of a per-rank trace (which opens it to read)
 *   trace.c        the manifest and the reader: opens a trace, hands out gradients
 *   trace_rank.c   the per-rank layout (iter_<t>/rank_<r>.safetensors) */
#include "trace_internal.h"

#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "deftsim_util.h"

void deftsim_trace_iteration_filename(uint64_t iteration, char *buf, size_t size)
{
    snprintf(buf, size, "iter_%06" PRIu64 ".safetensors", iteration);
}

void deftsim_trace_worker_name(uint32_t worker, char *buf, size_t size)
{
    snprintf(buf, size, "worker.%04" PRIu32, worker);
}

/* ---- Manifest ------------------------------------------------------------------------------ */

/* A JSON integer in [0, 2^63). */
static int json_u64(const json_t *v, uint64_t *out)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0) return -1;
    *out = (uint64_t)json_integer_value(v);
    return 0;
}

static const char *json_type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a real number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "?";
}

/* Rejects keys of obj not in allowed (NULL-terminated): a misspelt field must not pass
 * silently. */
static deftsim_status only_keys(const json_t *obj, const char *const *allowed, const char *file,
                                const char *where)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)obj, k, v) {
        int ok = 0;
        for (const char *const *a = allowed; *a; a++)
            if (strcmp(*a, k) == 0) ok = 1;
        if (!ok)
            return deftsim_error_set(DEFTSIM_E_INPUT, "%s: field '%s%s%s': unknown field", file,
                                     where, *where ? "." : "", k);
    }
    return DEFTSIM_OK;
}

static deftsim_status need(const json_t *obj, const char *key, json_type type, const char *file,
                           const char *where, const json_t **out)
{
    const json_t *v = json_object_get(obj, key);
    const char *dot = *where ? "." : "";
    if (!v)
        return deftsim_error_set(DEFTSIM_E_INPUT, "%s: field '%s%s%s': missing", file, where, dot,
                                 key);
    if (json_typeof(v) != type) {
        const char *want = type == JSON_OBJECT ? "an object" : type == JSON_ARRAY ? "an array"
                           : type == JSON_STRING ? "a string" : "an integer";
        return deftsim_error_set(DEFTSIM_E_INPUT, "%s: field '%s%s%s': expected %s, found %s",
                                 file, where, dot, key, want, json_type_name(v));
    }
    *out = v;
    return DEFTSIM_OK;
}

deftsim_status deftsim_trace_check_provenance(const json_t *prov, const char *where)
{
    if (!json_is_object(prov))
        return deftsim_error_set(DEFTSIM_E_INPUT, "%s: field 'provenance': expected an object",
                                 where);
    const json_t *v;
    deftsim_status st;
    if ((st = need(prov, "recorder", JSON_STRING, where, "provenance", &v))) return st;
    if ((st = need(prov, "method", JSON_STRING, where, "provenance", &v))) return st;
    v = json_object_get(prov, "seed");
    if (!v)
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "%s: field 'provenance.seed': missing (use null if unknown)",
                                 where);
    if (json_is_null(v)) return DEFTSIM_OK;
    if (json_is_integer(v) && json_integer_value(v) >= 0) return DEFTSIM_OK;
    uint64_t s;
    if (json_is_string(v) && deftsim_parse_u64(json_string_value(v), &s) == 0) return DEFTSIM_OK;
    return deftsim_error_set(DEFTSIM_E_INPUT,
                             "%s: field 'provenance.seed': expected a non-negative integer, a "
                             "decimal string or null, found %s", where, json_type_name(v));
}

static void manifest_free(trace_manifest *m)
{
    deftsim_model_free(m->model);
    free(m->iters);
    json_decref(m->provenance);
    memset(m, 0, sizeof *m);
}

static deftsim_status parse_layers(const json_t *layers, const char *file, deftsim_model *model)
{
    size_t n = json_array_size(layers);
    if (n == 0)
        return deftsim_error_set(DEFTSIM_E_INPUT, "%s: field 'model.layers': empty", file);
    model->layers = calloc(n, sizeof *model->layers);
    if (!model->layers) return deftsim_error_nomem("%s", file);
    static const char *const allowed[] = {"name", "shape", NULL};
    for (size_t i = 0; i < n; i++) {
        const json_t *L = json_array_get(layers, i);
        char where[64];
        snprintf(where, sizeof where, "model.layers[%zu]", i);
        if (!json_is_object(L))
            return deftsim_error_set(DEFTSIM_E_INPUT, "%s: field '%s': expected an object, found %s",
                                     file, where, json_type_name(L));
        deftsim_status st;
        const json_t *name, *shape;
        if ((st = only_keys(L, allowed, file, where))) return st;
        if ((st = need(L, "name", JSON_STRING, file, where, &name))) return st;
        if ((st = need(L, "shape", JSON_ARRAY, file, where, &shape))) return st;
        if (json_string_length(name) == 0)
            return deftsim_error_set(DEFTSIM_E_INPUT, "%s: field '%s.name': empty", file, where);
        size_t nd = json_array_size(shape);
        if (nd < 1 || nd > DEFTSIM_MAX_DIMS)
            return deftsim_error_set(DEFTSIM_E_INPUT,
                                     "%s: field '%s.shape': %zu dimensions (1 to %d allowed; "
                                     "record a scalar as [1])", file, where, nd, DEFTSIM_MAX_DIMS);
        deftsim_layer *ly = &model->layers[i];
        ly->ndim = (uint32_t)nd;
        ly->numel = 1;
        for (size_t d = 0; d < nd; d++) {
            uint64_t dim;
            if (json_u64(json_array_get(shape, d), &dim) || dim == 0)
                return deftsim_error_set(DEFTSIM_E_INPUT,
                                         "%s: field '%s.shape[%zu]': expected a positive integer",
                                         file, where, d);
            size_t prod;
            if (deftsim_mul_size((size_t)ly->numel, (size_t)dim, &prod) || prod > (1ull << 48))
                return deftsim_error_set(DEFTSIM_E_INPUT, "%s: field '%s.shape': too large", file,
                                         where);
            ly->shape[d] = dim;
            ly->numel = prod;
        }
        ly->offset = model->numel;
        if (model->numel + ly->numel > (1ull << 48))
            return deftsim_error_set(DEFTSIM_E_INPUT, "%s: field 'model.layers': model too large",
                                     file);
        model->numel += ly->numel;
        ly->name = strdup(json_string_value(name));
        if (!ly->name) return deftsim_error_nomem("%s", file);
        model->nlayers = i + 1;
    }
    return DEFTSIM_OK;
}

static deftsim_status parse_manifest(const json_t *root, const char *file, trace_manifest *m)
{
    deftsim_status st;
    const json_t *v;
    memset(m, 0, sizeof *m);
    if (!json_is_object(root))
        return deftsim_error_set(DEFTSIM_E_INPUT, "%s: expected a JSON object, found %s", file,
                                 json_type_name(root));
    static const char *const top1[] = {"format", "format_version", "model", "workers", "dtype",
                                       "iterations", "provenance", NULL};
    static const char *const top2[] = {"format", "format_version", "layout", "model", "workers",
                                       "dtype", "iterations", "provenance", NULL};
    if ((st = need(root, "format", JSON_STRING, file, "", &v))) return st;
    if (strcmp(json_string_value(v), DEFTSIM_TRACE_FORMAT_NAME))
        return deftsim_error_set(DEFTSIM_E_INPUT, "%s: field 'format': '%s' (expected '%s')", file,
                                 json_string_value(v), DEFTSIM_TRACE_FORMAT_NAME);
    if ((st = need(root, "format_version", JSON_INTEGER, file, "", &v))) return st;
    if (json_integer_value(v) != 1 && json_integer_value(v) != DEFTSIM_TRACE_FORMAT_VERSION_MAX)
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "%s: field 'format_version': unknown version %" JSON_INTEGER_FORMAT
                                 " (this deftsim reads versions 1 and %d)", file,
                                 json_integer_value(v), DEFTSIM_TRACE_FORMAT_VERSION_MAX);
    int version = (int)json_integer_value(v);
    if ((st = only_keys(root, version == 1 ? top1 : top2, file, ""))) return st;
    int per_rank = 0;
    if (version == 2) {
        if ((st = need(root, "layout", JSON_STRING, file, "", &v))) return st;
        if (!strcmp(json_string_value(v), DEFTSIM_TRACE_LAYOUT_PER_RANK))
            per_rank = 1;
        else if (strcmp(json_string_value(v), DEFTSIM_TRACE_LAYOUT_FLAT))
            return deftsim_error_set(DEFTSIM_E_INPUT, "%s: field 'layout': '%s' (expected '%s' or "
                                     "'%s')", file, json_string_value(v), DEFTSIM_TRACE_LAYOUT_FLAT,
                                     DEFTSIM_TRACE_LAYOUT_PER_RANK);
    }

    const json_t *model, *mname, *mnumel, *layers;
    if ((st = need(root, "model", JSON_OBJECT, file, "", &model))) return st;
    static const char *const mkeys[] = {"name", "numel", "layers", NULL};
    if ((st = only_keys(model, mkeys, file, "model"))) return st;
    if ((st = need(model, "name", JSON_STRING, file, "model", &mname))) return st;
    if ((st = need(model, "numel", JSON_INTEGER, file, "model", &mnumel))) return st;
    if ((st = need(model, "layers", JSON_ARRAY, file, "model", &layers))) return st;
    if (json_string_length(mname) == 0)
        return deftsim_error_set(DEFTSIM_E_INPUT, "%s: field 'model.name': empty", file);
    m->version = version;
    m->per_rank = per_rank;
    m->model = calloc(1, sizeof *m->model);
    if (!m->model || !(m->model->name = strdup(json_string_value(mname)))) {
        manifest_free(m);
        return deftsim_error_nomem("%s", file);
    }
    if ((st = parse_layers(layers, file, m->model))) goto fail;
    uint64_t numel;
    if (json_u64(mnumel, &numel) || numel != m->model->numel) {
        st = deftsim_error_set(DEFTSIM_E_INPUT,
                               "%s: field 'model.numel': %" JSON_INTEGER_FORMAT " but the layers' "
                               "shapes add up to %" PRIu64, file, json_integer_value(mnumel),
                               m->model->numel);
        goto fail;
    }

    uint64_t workers;
    if ((st = need(root, "workers", JSON_INTEGER, file, "", &v))) goto fail;
    if (json_u64(v, &workers) || workers < 1 || workers > DEFTSIM_TRACE_MAX_WORKERS) {
        st = deftsim_error_set(DEFTSIM_E_INPUT, "%s: field 'workers': %" JSON_INTEGER_FORMAT
                               " is outside [1, %u]", file, json_integer_value(v),
                               DEFTSIM_TRACE_MAX_WORKERS);
        goto fail;
    }
    m->workers = (uint32_t)workers;

    if ((st = need(root, "dtype", JSON_STRING, file, "", &v))) goto fail;
    if (strcmp(json_string_value(v), "float32")) {
        st = deftsim_error_set(DEFTSIM_E_INPUT,
                               "%s: field 'dtype': '%s' (format versions 1 and 2 store 'float32')",
                               file, json_string_value(v));
        goto fail;
    }

    if ((st = need(root, "iterations", JSON_ARRAY, file, "", &v))) goto fail;
    m->niter = json_array_size(v);
    if (m->niter == 0) {
        st = deftsim_error_set(DEFTSIM_E_INPUT, "%s: field 'iterations': empty", file);
        goto fail;
    }
    m->iters = malloc(m->niter * sizeof *m->iters);
    if (!m->iters) {
        st = deftsim_error_nomem("%s", file);
        goto fail;
    }
    for (size_t i = 0; i < m->niter; i++) {
        if (json_u64(json_array_get(v, i), &m->iters[i])) {
            st = deftsim_error_set(DEFTSIM_E_INPUT,
                                   "%s: field 'iterations[%zu]': expected a non-negative integer, "
                                   "found %s", file, i, json_type_name(json_array_get(v, i)));
            goto fail;
        }
        if (i > 0 && m->iters[i] <= m->iters[i - 1]) {
            st = deftsim_error_set(DEFTSIM_E_INPUT,
                                   "%s: field 'iterations[%zu]': %" PRIu64 " does not follow %"
                                   PRIu64 " (ids must strictly increase)", file, i, m->iters[i],
                                   m->iters[i - 1]);
            goto fail;
        }
    }

    if ((st = need(root, "provenance", JSON_OBJECT, file, "", &v))) goto fail;
    if ((st = deftsim_trace_check_provenance(v, file))) goto fail;
    m->provenance = json_deep_copy(v);
    if (!m->provenance) {
        st = deftsim_error_nomem("%s", file);
        goto fail;
    }
    return DEFTSIM_OK;
fail:
    manifest_free(m);
    return st;
}

/* ---- Reader -------------------------------------------------------------------------------- */

void deftsim_trace_close(deftsim_trace *t)
{
    if (!t) return;
    if (t->iters) {
        for (size_t i = 0; i < t->man.niter; i++) {
            deftsim_st_close(t->iters[i].file);
            free(t->iters[i].path);
            free(t->iters[i].grads);
            free(t->iters[i].byte_offset);
            for (uint32_t w = 0; t->iters[i].owned && w < t->man.workers; w++)
                free(t->iters[i].owned[w]);
            for (uint32_t w = 0; t->iters[i].rank_paths && w < t->man.workers; w++)
                free(t->iters[i].rank_paths[w]);
            free(t->iters[i].owned);
            free(t->iters[i].rank_paths);
            free(t->iters[i].layer_byte);
            free(t->iters[i].layer_esize);
        }
    }
    free(t->iters);
    manifest_free(&t->man);
    free(t->dir);
    free(t);
}

static deftsim_status open_iteration(deftsim_trace *t, trace_iter *it)
{
    deftsim_status st = deftsim_st_open(it->path, &it->file);
    if (st) {
        if (st == DEFTSIM_E_INPUT && access(it->path, F_OK) != 0)
            return deftsim_error_set(DEFTSIM_E_INPUT,
                                     "%s: missing: the manifest lists iteration %" PRIu64
                                     " but its file does not exist", it->path, it->id);
        return st;
    }
    const deftsim_model *m = t->man.model;
    uint32_t P = t->man.workers;
    const json_t *meta = deftsim_st_metadata(it->file);
    const json_t *mi = meta ? json_object_get(meta, "iteration") : NULL;
    if (mi) {
        uint64_t id;
        if (deftsim_parse_u64(json_string_value(mi), &id) || id != it->id)
            return deftsim_error_set(DEFTSIM_E_INPUT,
                                     "%s: header: '__metadata__.iteration' is '%s' but the "
                                     "manifest expects iteration %" PRIu64 " in this file",
                                     it->path, json_string_value(mi), it->id);
    }
    it->grads = calloc(P, sizeof *it->grads);
    it->byte_offset = calloc(P, sizeof *it->byte_offset);
    if (!it->grads || !it->byte_offset)
        return deftsim_error_nomem("%s", it->path);
    size_t found = 0;
    for (uint32_t w = 0; w < P; w++) {
        char name[32];
        deftsim_trace_worker_name(w, name, sizeof name);
        const deftsim_st_tensor *ten = deftsim_st_find(it->file, name);
        if (!ten)
            return deftsim_error_set(DEFTSIM_E_INPUT,
                                     "%s: header: tensor '%s' missing (the manifest says %u "
                                     "workers)", it->path, name, P);
        if (strcmp(ten->dtype, "F32"))
            return deftsim_error_set(DEFTSIM_E_INPUT,
                                     "%s: header: tensor '%s': dtype '%s' (the trace format "
                                     "stores F32)", it->path, name, ten->dtype);
        if (ten->ndim != 1 || ten->shape[0] != m->numel)
            return deftsim_error_set(DEFTSIM_E_INPUT,
                                     "%s: header: tensor '%s': shape %s%" PRIu64 "%s with %" PRIu32
                                     " dimensions, but the manifest's model '%s' needs [%" PRIu64
                                     "]", it->path, name, ten->ndim ? "[" : "",
                                     ten->ndim ? ten->shape[0] : 0, ten->ndim > 1 ? ", ...]" : "]",
                                     ten->ndim, m->name, m->numel);
        it->grads[w] = ten->data;
        it->byte_offset[w] = deftsim_st_buffer_offset(it->file) + ten->begin;
        found++;
    }
    if (deftsim_st_count(it->file) != found) {
        for (size_t i = 0; i < deftsim_st_count(it->file); i++) {
            const char *nm = deftsim_st_tensor_at(it->file, i)->name;
            int known = 0;
            for (uint32_t w = 0; w < P && !known; w++) {
                char name[32];
                deftsim_trace_worker_name(w, name, sizeof name);
                known = strcmp(name, nm) == 0;
            }
            if (!known)
                return deftsim_error_set(DEFTSIM_E_INPUT,
                                         "%s: header: unexpected tensor '%s' (the manifest says "
                                         "%u workers, tensors worker.0000 .. worker.%04u)",
                                         it->path, nm, P, P - 1);
        }
    }
    return DEFTSIM_OK;
}

deftsim_status trace_open(const char *dir, int ignore_manifest, deftsim_trace **out)
{
    *out = NULL;
    struct stat db;
    if (stat(dir, &db) != 0) {
        int err = errno;
        if (err == ENOENT || err == ENOTDIR)
            return deftsim_error_set(DEFTSIM_E_INPUT, "%s: trace folder does not exist", dir);
        return deftsim_error_set(deftsim_open_input_status(err), "%s: cannot open the trace "
                                 "folder: %s", dir, strerror(err));
    }
    if (!S_ISDIR(db.st_mode))
        return deftsim_error_set(DEFTSIM_E_INPUT, "%s: not a folder (a trace is a folder: "
                                 "traces/FORMAT.md)", dir);
    deftsim_trace *t = calloc(1, sizeof *t);
    if (!t || !(t->dir = strdup(dir))) {
        free(t);
        return deftsim_error_nomem("%s", dir);
    }
    t->order = "manifest";
    deftsim_status st;
    char *mpath = trace_join_path(dir, DEFTSIM_TRACE_MANIFEST);
    if (!mpath) {
        deftsim_trace_close(t);
        return deftsim_error_nomem("%s", dir);
    }
    if (ignore_manifest || access(mpath, F_OK) != 0) {
        /* No manifest: the per-rank layout, whose files say everything. */
        int err = errno;
        trace_numbered *its = NULL;
        size_t nits = 0;
        if (!ignore_manifest && err != ENOENT)
            st = deftsim_error_set(deftsim_open_input_status(err), "%s: cannot open: %s", mpath,
                                   strerror(err));
        else if (!(st = trace_scan_numbered(dir, "iter_", "", 1, &its, &nits)) && nits == 0 &&
                 ignore_manifest)
            st = deftsim_error_set(DEFTSIM_E_INPUT, "%s: no iter_<t>/ folders of the per-rank "
                                   "layout to import (traces/FORMAT.md)", dir);
        else if (!st && nits == 0)
            st = deftsim_error_set(DEFTSIM_E_INPUT, "%s: not a trace: no %s (flat layout) and no "
                                   "iter_<t>/ folders (per-rank layout; traces/FORMAT.md)", dir,
                                   DEFTSIM_TRACE_MANIFEST);
        trace_numbered_free(its, nits);
        free(mpath);
        if (!st) st = trace_open_per_rank(t, 0);
        if (st) {
            deftsim_trace_close(t);
            return st;
        }
        *out = t;
        return DEFTSIM_OK;
    }
    json_error_t err;
    json_t *root = json_load_file(mpath, JSON_REJECT_DUPLICATES, &err);
    if (!root) {
        struct stat sb;
        if (stat(mpath, &sb) == 0 && S_ISDIR(sb.st_mode))
            st = deftsim_error_set(DEFTSIM_E_INPUT, "%s: is a directory, not a file", mpath);
        else if (access(mpath, R_OK) != 0)
            st = deftsim_error_set(deftsim_open_input_status(errno), "%s: cannot open: %s", mpath,
                                   strerror(errno));
        else
            st = deftsim_error_set(DEFTSIM_E_INPUT, "%s:%d:%d: JSON: %s", mpath, err.line,
                                   err.column, err.text);
        free(mpath);
        deftsim_trace_close(t);
        return st;
    }
    st = parse_manifest(root, mpath, &t->man);
    json_decref(root);
    free(mpath);
    if (!st && t->man.per_rank) st = trace_open_per_rank(t, 1);
    if (st || t->man.per_rank) {
        if (st) deftsim_trace_close(t);
        else *out = t;
        return st;
    }
    t->iters = calloc(t->man.niter, sizeof *t->iters);
    if (!t->iters) {
        deftsim_trace_close(t);
        return deftsim_error_nomem("%s", dir);
    }
    for (size_t i = 0; i < t->man.niter; i++) {
        trace_iter *it = &t->iters[i];
        char name[64];
        it->id = t->man.iters[i];
        deftsim_trace_iteration_filename(it->id, name, sizeof name);
        if (!(it->path = trace_join_path(dir, name))) {
            deftsim_trace_close(t);
            return deftsim_error_nomem("%s", dir);
        }
        if ((st = open_iteration(t, it))) {
            deftsim_trace_close(t);
            return st;
        }
    }
    *out = t;
    return DEFTSIM_OK;
}

deftsim_status deftsim_trace_open(const char *dir, deftsim_trace **out)
{
    return trace_open(dir, 0, out);
}

int deftsim_trace_format_version(const deftsim_trace *t) { return t->man.version; }
const char *deftsim_trace_layout(const deftsim_trace *t)
{
    return t->man.per_rank ? DEFTSIM_TRACE_LAYOUT_PER_RANK : DEFTSIM_TRACE_LAYOUT_FLAT;
}
const char *deftsim_trace_layer_order(const deftsim_trace *t) { return t->order; }

const char *deftsim_trace_dir(const deftsim_trace *t) { return t->dir; }
const deftsim_model *deftsim_trace_model(const deftsim_trace *t) { return t->man.model; }
uint32_t deftsim_trace_workers(const deftsim_trace *t) { return t->man.workers; }
size_t deftsim_trace_iterations(const deftsim_trace *t) { return t->man.niter; }
const json_t *deftsim_trace_provenance(const deftsim_trace *t) { return t->man.provenance; }

uint64_t deftsim_trace_iteration_id(const deftsim_trace *t, size_t iter_index)
{
    return iter_index < t->man.niter ? t->man.iters[iter_index] : UINT64_MAX;
}

const char *deftsim_trace_iteration_path(const deftsim_trace *t, size_t iter_index)
{
    return iter_index < t->man.niter ? t->iters[iter_index].path : NULL;
}

deftsim_status deftsim_trace_find_iteration(const deftsim_trace *t, uint64_t id,
                                            size_t *iter_index)
{
    size_t lo = 0, hi = t->man.niter;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (t->man.iters[mid] < id) lo = mid + 1;
        else hi = mid;
    }
    if (lo < t->man.niter && t->man.iters[lo] == id) {
        *iter_index = lo;
        return DEFTSIM_OK;
    }
    return deftsim_error_set(DEFTSIM_E_INPUT, "%s: the trace has no iteration %" PRIu64, t->dir,
                             id);
}

static deftsim_status check_index(const deftsim_trace *t, size_t iter_index, uint32_t worker)
{
    if (iter_index >= t->man.niter)
        return deftsim_error_set(DEFTSIM_E_INPUT, "%s: iteration index %zu out of range (%zu "
                                 "iterations)", t->dir, iter_index, t->man.niter);
    if (worker >= t->man.workers)
        return deftsim_error_set(DEFTSIM_E_INPUT, "%s: worker %u out of range (%u workers)",
                                 t->dir, worker, t->man.workers);
    return DEFTSIM_OK;
}

deftsim_status deftsim_trace_gradient(const deftsim_trace *t, size_t iter_index, uint32_t worker,
                                      const float **data)
{
    *data = NULL;
    deftsim_status st = check_index(t, iter_index, worker);
    if (st) return st;
    *data = t->iters[iter_index].grads[worker];
    return DEFTSIM_OK;
}

/* Count of non-finite values in x[0, n). A NaN fails every comparison and an infinity exceeds
 * FLT_MAX; plain comparisons keep the loop vectorizable. */
static uint64_t count_nonfinite(const float *x, uint64_t n)
{
    uint64_t c = 0;
    for (uint64_t i = 0; i < n; i++) c += !(fabsf(x[i]) <= FLT_MAX);
    return c;
}

deftsim_status deftsim_trace_check_finite(const deftsim_trace *t, size_t iter_index,
                                          uint32_t worker)
{
    deftsim_status st = check_index(t, iter_index, worker);
    if (st) return st;
    const deftsim_model *m = t->man.model;
    const trace_iter *it = &t->iters[iter_index];
    const float *g = it->grads[worker];
    for (size_t L = 0; L < m->nlayers; L++) {
        const deftsim_layer *ly = &m->layers[L];
        const float *x = g + ly->offset;
        if (!count_nonfinite(x, ly->numel)) continue;
        for (uint64_t i = 0; i < ly->numel; i++) {
            if (isfinite(x[i])) continue;
            uint64_t flat = ly->offset + i;
            const char *what = isnan(x[i]) ? "NaN" : x[i] > 0 ? "+Inf" : "-Inf";
            if (t->man.per_rank) {
                size_t k = (size_t)worker * m->nlayers + L;
                return deftsim_error_set(DEFTSIM_E_INPUT,
                                         "%s: tensor '%s' (layer %zu), element %" PRIu64 " of the "
                                         "layer (gradient element %" PRIu64 ", file byte %" PRIu64
                                         "): %s", it->rank_paths[worker], ly->name, L, i, flat,
                                         it->layer_byte[k] + (uint64_t)it->layer_esize[k] * i,
                                         what);
            }
            char name[32];
            deftsim_trace_worker_name(worker, name, sizeof name);
            return deftsim_error_set(DEFTSIM_E_INPUT,
                                     "%s: tensor '%s', layer '%s' (layer %zu), element %" PRIu64
                                     " of the layer (gradient element %" PRIu64 ", file byte %"
                                     PRIu64 "): %s", it->path, name, ly->name, L, i, flat,
                                     it->byte_offset[worker] + 4 * flat,
                                     isnan(x[i]) ? "NaN" : x[i] > 0 ? "+Inf" : "-Inf");
        }
    }
    return DEFTSIM_OK;
}

deftsim_status deftsim_trace_layer_stats(const deftsim_trace *t, size_t iter_index,
                                         uint32_t worker, double *l2norm, uint64_t *nonfinite)
{
    deftsim_status st = check_index(t, iter_index, worker);
    if (st) return st;
    const deftsim_model *m = t->man.model;
    const float *g = t->iters[iter_index].grads[worker];
    for (size_t L = 0; L < m->nlayers; L++) {
        const float *x = g + m->layers[L].offset;
        uint64_t n = m->layers[L].numel;
        uint64_t bad = count_nonfinite(x, n);
        double ss = 0;
        if (bad == 0) {
            for (uint64_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
        } else {
            for (uint64_t i = 0; i < n; i++)
                if (isfinite(x[i])) ss += (double)x[i] * x[i];
        }
        if (l2norm) l2norm[L] = sqrt(ss);
        if (nonfinite) nonfinite[L] = bad;
    }
    return DEFTSIM_OK;
}
