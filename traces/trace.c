/* trace.c - gradient traces: manifest, reader (validating, zero-copy), writer. */
#include "deftsim_trace.h"

#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "deftsim_safetensors.h"
#include "deftsim_util.h"

void deftsim_trace_iteration_filename(uint64_t iteration, char *buf, size_t size)
{
    snprintf(buf, size, "iter_%06" PRIu64 ".safetensors", iteration);
}

void deftsim_trace_worker_name(uint32_t worker, char *buf, size_t size)
{
    snprintf(buf, size, "worker.%04" PRIu32, worker);
}

static char *join_path(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", dir, name);
    return p;
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

typedef struct {
    deftsim_model *model;
    uint32_t workers;
    size_t niter;
    uint64_t *iters;
    json_t *provenance;
} manifest;

static void manifest_free(manifest *m)
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
    if (!model->layers) return deftsim_error_set(DEFTSIM_E_NOMEM, "%s: out of memory", file);
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
        if (!ly->name) return deftsim_error_set(DEFTSIM_E_NOMEM, "%s: out of memory", file);
        model->nlayers = i + 1;
    }
    return DEFTSIM_OK;
}

static deftsim_status parse_manifest(const json_t *root, const char *file, manifest *m)
{
    deftsim_status st;
    const json_t *v;
    memset(m, 0, sizeof *m);
    if (!json_is_object(root))
        return deftsim_error_set(DEFTSIM_E_INPUT, "%s: expected a JSON object, found %s", file,
                                 json_type_name(root));
    static const char *const top[] = {"format", "format_version", "model", "workers", "dtype",
                                      "iterations", "provenance", NULL};
    if ((st = need(root, "format", JSON_STRING, file, "", &v))) return st;
    if (strcmp(json_string_value(v), DEFTSIM_TRACE_FORMAT_NAME))
        return deftsim_error_set(DEFTSIM_E_INPUT, "%s: field 'format': '%s' (expected '%s')", file,
                                 json_string_value(v), DEFTSIM_TRACE_FORMAT_NAME);
    if ((st = need(root, "format_version", JSON_INTEGER, file, "", &v))) return st;
    if (json_integer_value(v) != DEFTSIM_TRACE_FORMAT_VERSION)
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "%s: field 'format_version': unknown version %" JSON_INTEGER_FORMAT
                                 " (this deftsim reads version %d)", file, json_integer_value(v),
                                 DEFTSIM_TRACE_FORMAT_VERSION);
    if ((st = only_keys(root, top, file, ""))) return st;

    const json_t *model, *mname, *mnumel, *layers;
    if ((st = need(root, "model", JSON_OBJECT, file, "", &model))) return st;
    static const char *const mkeys[] = {"name", "numel", "layers", NULL};
    if ((st = only_keys(model, mkeys, file, "model"))) return st;
    if ((st = need(model, "name", JSON_STRING, file, "model", &mname))) return st;
    if ((st = need(model, "numel", JSON_INTEGER, file, "model", &mnumel))) return st;
    if ((st = need(model, "layers", JSON_ARRAY, file, "model", &layers))) return st;
    if (json_string_length(mname) == 0)
        return deftsim_error_set(DEFTSIM_E_INPUT, "%s: field 'model.name': empty", file);
    m->model = calloc(1, sizeof *m->model);
    if (!m->model || !(m->model->name = strdup(json_string_value(mname)))) {
        manifest_free(m);
        return deftsim_error_set(DEFTSIM_E_NOMEM, "%s: out of memory", file);
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
                               "%s: field 'dtype': '%s' (format version 1 stores 'float32')",
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
        st = deftsim_error_set(DEFTSIM_E_NOMEM, "%s: out of memory", file);
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
        st = deftsim_error_set(DEFTSIM_E_NOMEM, "%s: out of memory", file);
        goto fail;
    }
    return DEFTSIM_OK;
fail:
    manifest_free(m);
    return st;
}

/* ---- Reader -------------------------------------------------------------------------------- */

typedef struct {
    uint64_t id;
    char *path;
    deftsim_st_file *file;
    const float **grads; /* per worker, into the file */
    uint64_t *byte_offset; /* per worker, file byte offset of element 0 */
} trace_iter;

struct deftsim_trace {
    char *dir;
    manifest man;
    trace_iter *iters;
};

void deftsim_trace_close(deftsim_trace *t)
{
    if (!t) return;
    if (t->iters) {
        for (size_t i = 0; i < t->man.niter; i++) {
            deftsim_st_close(t->iters[i].file);
            free(t->iters[i].path);
            free(t->iters[i].grads);
            free(t->iters[i].byte_offset);
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
        return deftsim_error_set(DEFTSIM_E_NOMEM, "%s: out of memory", it->path);
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

deftsim_status deftsim_trace_open(const char *dir, deftsim_trace **out)
{
    *out = NULL;
    deftsim_trace *t = calloc(1, sizeof *t);
    if (!t || !(t->dir = strdup(dir))) {
        free(t);
        return deftsim_error_set(DEFTSIM_E_NOMEM, "%s: out of memory", dir);
    }
    deftsim_status st;
    char *mpath = join_path(dir, DEFTSIM_TRACE_MANIFEST);
    if (!mpath) {
        deftsim_trace_close(t);
        return deftsim_error_set(DEFTSIM_E_NOMEM, "%s: out of memory", dir);
    }
    json_error_t err;
    json_t *root = json_load_file(mpath, JSON_REJECT_DUPLICATES, &err);
    if (!root) {
        struct stat sb;
        if (access(mpath, F_OK) != 0)
            st = deftsim_error_set(DEFTSIM_E_INPUT, "%s: cannot open: %s (not a trace directory?)",
                                   mpath, strerror(errno));
        else if (stat(mpath, &sb) == 0 && S_ISDIR(sb.st_mode))
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
    if (st) {
        deftsim_trace_close(t);
        return st;
    }
    t->iters = calloc(t->man.niter, sizeof *t->iters);
    if (!t->iters) {
        deftsim_trace_close(t);
        return deftsim_error_set(DEFTSIM_E_NOMEM, "%s: out of memory", dir);
    }
    for (size_t i = 0; i < t->man.niter; i++) {
        trace_iter *it = &t->iters[i];
        char name[64];
        it->id = t->man.iters[i];
        deftsim_trace_iteration_filename(it->id, name, sizeof name);
        if (!(it->path = join_path(dir, name))) {
            deftsim_trace_close(t);
            return deftsim_error_set(DEFTSIM_E_NOMEM, "%s: out of memory", dir);
        }
        if ((st = open_iteration(t, it))) {
            deftsim_trace_close(t);
            return st;
        }
    }
    *out = t;
    return DEFTSIM_OK;
}

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
            char name[32];
            deftsim_trace_worker_name(worker, name, sizeof name);
            uint64_t flat = ly->offset + i;
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
    char *mpath = join_path(dir, DEFTSIM_TRACE_MANIFEST);
    if (!mpath) return deftsim_error_set(DEFTSIM_E_NOMEM, "%s: out of memory", dir);
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
    if (!w) return deftsim_error_set(DEFTSIM_E_NOMEM, "%s: out of memory", dir);
    w->workers = workers;
    w->dir = strdup(dir);
    w->provenance = json_deep_copy(provenance);
    w->iterations = json_array();
    if (!w->dir || !w->provenance || !w->iterations ||
        (st = deftsim_model_clone(m, &w->model))) {
        deftsim_trace_writer_discard(w);
        return st ? st : deftsim_error_set(DEFTSIM_E_NOMEM, "%s: out of memory", dir);
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
    *path = join_path(w->dir, fname);
    if (!*path) return deftsim_error_set(DEFTSIM_E_NOMEM, "%s: out of memory", w->dir);

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
        st = deftsim_error_set(DEFTSIM_E_NOMEM, "%s: out of memory", *path);
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
        return deftsim_error_set(DEFTSIM_E_NOMEM, "%s: out of memory", w->dir);
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
        return deftsim_error_set(DEFTSIM_E_NOMEM, "%s: out of memory", w->dir);
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

deftsim_status deftsim_trace_writer_close(deftsim_trace_writer *w)
{
    deftsim_status st = DEFTSIM_OK;
    json_t *root = NULL, *layers = NULL;
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
    layers = json_array();
    if (!layers) goto nomem;
    for (size_t i = 0; i < w->model->nlayers; i++) {
        const deftsim_layer *L = &w->model->layers[i];
        json_t *shape = json_array();
        if (!shape) goto nomem;
        for (uint32_t d = 0; d < L->ndim; d++)
            if (json_array_append_new(shape, json_integer((json_int_t)L->shape[d]))) {
                json_decref(shape);
                goto nomem;
            }
        if (json_array_append_new(layers, json_pack("{s:s, s:o}", "name", L->name, "shape", shape)))
            goto nomem;
    }
    root = json_pack("{s:s, s:i, s:{s:s, s:I, s:o}, s:I, s:s, s:O, s:O}",
                     "format", DEFTSIM_TRACE_FORMAT_NAME,
                     "format_version", DEFTSIM_TRACE_FORMAT_VERSION,
                     "model", "name", w->model->name, "numel", (json_int_t)w->model->numel,
                     "layers", layers,
                     "workers", (json_int_t)w->workers,
                     "dtype", "float32",
                     "iterations", w->iterations,
                     "provenance", w->provenance);
    layers = NULL; /* stolen by json_pack, even on failure */
    if (!root) goto nomem;
    mpath = join_path(w->dir, DEFTSIM_TRACE_MANIFEST);
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
    st = deftsim_error_set(DEFTSIM_E_NOMEM, "%s: out of memory", w->dir);
done:
    json_decref(layers);
    json_decref(root);
    free(mpath);
    deftsim_trace_writer_discard(w);
    return st;
}
