/* trace.c - gradient traces: manifest, reader (flat layout: validating, zero-copy; per-rank
 * layout: read and converted into memory of its own), writer, import. */
#include "deftsim_trace.h"

#include <dirent.h>
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
    int version;        /* format_version: 1 or 2 */
    int per_rank;       /* layout: 0 flat, 1 per-rank (version 2 only) */
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
    char *path;            /* flat: the file; per-rank: the iteration's folder */
    deftsim_st_file *file; /* flat */
    const float **grads;   /* per worker: into the file (flat) or owned[w] (per-rank) */
    uint64_t *byte_offset; /* flat, per worker: file byte offset of element 0 */
    float **owned;         /* per-rank, per worker: the gradient read in parameter order */
    char **rank_paths;     /* per-rank, per worker */
    uint64_t *layer_byte;  /* per-rank, [worker * nlayers + layer]: file byte of element 0 */
    unsigned char *layer_esize; /* per-rank, same index: bytes per element as stored */
} trace_iter;

struct deftsim_trace {
    char *dir;
    manifest man;
    trace_iter *iters;
    const char *order; /* deftsim_trace_layer_order */
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

/* ---- Per-rank layout: iter_<t>/rank_<r>.safetensors ------------------------------------ */

/* Exact conversions to float32: every F16 and BF16 value is a float32 value. */
static float f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1Fu, man = h & 0x3FFu;
    uint32_t bits;
    if (exp == 0x1F) {
        bits = sign | 0x7F800000u | (man << 13); /* infinities; NaNs keep their payload */
    } else if (exp) {
        bits = sign | ((exp + 112) << 23) | (man << 13);
    } else {
        float v = (float)man * 0x1p-24f; /* zero or subnormal: exact, normal in float32 */
        memcpy(&bits, &v, 4);
        bits |= sign;
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static float bf16_to_f32(uint16_t h)
{
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

void deftsim_trace_convert(const char *dtype, const void *src, uint64_t n, float *dst)
{
    const unsigned char *s = src;
    if (!strcmp(dtype, "F32")) {
        memcpy(dst, s, (size_t)n * 4);
        return;
    }
    int bf = !strcmp(dtype, "BF16");
    for (uint64_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, s + 2 * i, 2);
        dst[i] = bf ? bf16_to_f32(h) : f16_to_f32(h);
    }
}

/* "<prefix><digits><suffix>": 1 to 19 decimal digits (leading zeros allowed), value below
 * 2^63. 0 and *id on a match. */
static int parse_numbered(const char *name, const char *prefix, const char *suffix, uint64_t *id)
{
    size_t pl = strlen(prefix), sl = strlen(suffix), nl = strlen(name);
    if (nl <= pl + sl || strncmp(name, prefix, pl) || strcmp(name + nl - sl, suffix)) return -1;
    size_t nd = nl - pl - sl;
    if (nd > 19) return -1;
    uint64_t v = 0;
    for (size_t i = 0; i < nd; i++) {
        char c = name[pl + i];
        if (c < '0' || c > '9') return -1;
        v = v * 10 + (uint64_t)(c - '0');
    }
    if (v > (uint64_t)INT64_MAX) return -1;
    *id = v;
    return 0;
}

typedef struct {
    uint64_t id;
    char *name;
} numbered;

static int cmp_numbered(const void *a, const void *b)
{
    const numbered *x = a, *y = b;
    if (x->id != y->id) return x->id < y->id ? -1 : 1;
    return strcmp(x->name, y->name);
}

static void numbered_free(numbered *v, size_t n)
{
    for (size_t i = 0; v && i < n; i++) free(v[i].name);
    free(v);
}

/* The entries of dir named prefix<number>suffix (folders if want_dir, else anything), sorted
 * by number; two names of one number are an error. */
static deftsim_status scan_numbered(const char *dir, const char *prefix, const char *suffix,
                                    int want_dir, numbered **out, size_t *count)
{
    *out = NULL;
    *count = 0;
    DIR *d = opendir(dir);
    if (!d)
        return deftsim_error_set(deftsim_open_input_status(errno), "%s: cannot open the folder: %s",
                                 dir, strerror(errno));
    numbered *v = NULL;
    size_t n = 0, cap = 0;
    deftsim_status st = DEFTSIM_OK;
    struct dirent *e;
    while ((e = readdir(d))) {
        uint64_t id;
        if (parse_numbered(e->d_name, prefix, suffix, &id)) continue;
        if (want_dir) {
            char *p = join_path(dir, e->d_name);
            struct stat sb;
            int isdir = p && stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
            free(p);
            if (!isdir) continue;
        }
        if (n == cap) {
            size_t nc = cap ? 2 * cap : 16;
            numbered *nv = realloc(v, nc * sizeof *nv);
            if (!nv) {
                st = deftsim_error_set(DEFTSIM_E_NOMEM, "%s: out of memory", dir);
                break;
            }
            v = nv;
            cap = nc;
        }
        if (!(v[n].name = strdup(e->d_name))) {
            st = deftsim_error_set(DEFTSIM_E_NOMEM, "%s: out of memory", dir);
            break;
        }
        v[n++].id = id;
    }
    closedir(d);
    if (!st && n) {
        qsort(v, n, sizeof *v, cmp_numbered);
        for (size_t i = 1; i < n && !st; i++)
            if (v[i].id == v[i - 1].id)
                st = deftsim_error_set(DEFTSIM_E_INPUT, "%s: '%s' and '%s' both name %s %" PRIu64,
                                       dir, v[i - 1].name, v[i].name,
                                       want_dir ? "iteration" : "rank", v[i].id);
    }
    if (st) {
        numbered_free(v, n);
        return st;
    }
    *out = v;
    *count = n;
    return DEFTSIM_OK;
}

static void shape_text(const deftsim_st_tensor *ten, char *buf, size_t size)
{
    size_t o = (size_t)snprintf(buf, size, "[");
    for (uint32_t d = 0; d < ten->ndim && o < size; d++)
        o += (size_t)snprintf(buf + o, size - o, d ? ", %" PRIu64 : "%" PRIu64, ten->shape[d]);
    if (o < size) snprintf(buf + o, size - o, "]");
}

static void layer_shape_text(const deftsim_layer *L, char *buf, size_t size)
{
    size_t o = (size_t)snprintf(buf, size, "[");
    for (uint32_t d = 0; d < L->ndim && o < size; d++)
        o += (size_t)snprintf(buf + o, size - o, d ? ", %" PRIu64 : "%" PRIu64, L->shape[d]);
    if (o < size) snprintf(buf + o, size - o, "]");
}

/* A tensor's shape equals a layer's, a scalar (shape []) counting as [1]. */
static int shape_matches(const deftsim_st_tensor *ten, const deftsim_layer *L)
{
    if (ten->ndim == 0) return L->ndim == 1 && L->shape[0] == 1;
    if (ten->ndim != L->ndim) return 0;
    for (uint32_t d = 0; d < L->ndim; d++)
        if (ten->shape[d] != L->shape[d]) return 0;
    return 1;
}

static int dtype_readable(const char *dtype)
{
    return !strcmp(dtype, "F32") || !strcmp(dtype, "F16") || !strcmp(dtype, "BF16");
}

static deftsim_status bad_dtype(const char *path, const deftsim_st_tensor *ten)
{
    return deftsim_error_set(DEFTSIM_E_INPUT,
                             "%s: tensor '%s': dtype %s is not supported (deftsim reads F32, "
                             "and F16 and BF16 converted exactly to float32; save the gradients "
                             "as float32, float16 or bfloat16)", path, ten->name, ten->dtype);
}

/* The names of __metadata__.parameter_order of f (NULL if absent): a JSON array of distinct
 * strings naming exactly the file's tensors. */
static deftsim_status order_metadata(const deftsim_st_file *f, json_t **out)
{
    *out = NULL;
    const json_t *meta = deftsim_st_metadata(f);
    const json_t *v = meta ? json_object_get(meta, DEFTSIM_TRACE_ORDER_KEY) : NULL;
    if (!v) return DEFTSIM_OK;
    const char *path = deftsim_st_path(f);
    json_error_t err;
    json_t *a = json_loads(json_string_value(v), JSON_REJECT_DUPLICATES, &err);
    size_t n = json_array_size(a);
    int ok = json_is_array(a);
    for (size_t i = 0; ok && i < n; i++) ok = json_is_string(json_array_get(a, i));
    if (!ok) {
        json_decref(a);
        return deftsim_error_set(DEFTSIM_E_INPUT, "%s: header: '__metadata__.%s': not a JSON "
                                 "array of strings", path, DEFTSIM_TRACE_ORDER_KEY);
    }
    deftsim_status st = DEFTSIM_OK;
    for (size_t i = 0; i < n && !st; i++) {
        const char *nm = json_string_value(json_array_get(a, i));
        if (!deftsim_st_find(f, nm))
            st = deftsim_error_set(DEFTSIM_E_INPUT, "%s: header: '__metadata__.%s' lists '%s', "
                                   "which is no tensor of the file", path,
                                   DEFTSIM_TRACE_ORDER_KEY, nm);
        for (size_t j = 0; j < i && !st; j++)
            if (!strcmp(nm, json_string_value(json_array_get(a, j))))
                st = deftsim_error_set(DEFTSIM_E_INPUT, "%s: header: '__metadata__.%s' lists "
                                       "'%s' twice", path, DEFTSIM_TRACE_ORDER_KEY, nm);
    }
    if (!st && n != deftsim_st_count(f)) {
        for (size_t i = 0; i < deftsim_st_count(f) && !st; i++) {
            const char *nm = deftsim_st_tensor_at(f, i)->name;
            int listed = 0;
            for (size_t j = 0; j < n && !listed; j++)
                listed = !strcmp(nm, json_string_value(json_array_get(a, j)));
            if (!listed)
                st = deftsim_error_set(DEFTSIM_E_INPUT, "%s: header: '__metadata__.%s' does not "
                                       "list tensor '%s'", path, DEFTSIM_TRACE_ORDER_KEY, nm);
        }
    }
    if (st) {
        json_decref(a);
        return st;
    }
    *out = a;
    return DEFTSIM_OK;
}

static int cmp_tensor_name(const void *a, const void *b)
{
    return strcmp((*(const deftsim_st_tensor *const *)a)->name,
                  (*(const deftsim_st_tensor *const *)b)->name);
}

/* The model of a per-rank trace without manifest: the first file's tensors, in
 * parameter_order or else sorted by name. */
static deftsim_status derive_model(const deftsim_st_file *f, const char *dir, deftsim_model **out,
                                   int *from_metadata)
{
    *out = NULL;
    const char *path = deftsim_st_path(f);
    size_t n = deftsim_st_count(f);
    if (n == 0)
        return deftsim_error_set(DEFTSIM_E_INPUT, "%s: holds no tensors (a rank's file holds its "
                                 "gradients, one tensor per parameter)", path);
    json_t *order;
    deftsim_status st = order_metadata(f, &order);
    if (st) return st;
    *from_metadata = order != NULL;
    const deftsim_st_tensor **ts = malloc(n * sizeof *ts);
    deftsim_model *m = calloc(1, sizeof *m);
    if (!ts || !m || !(m->layers = calloc(n, sizeof *m->layers))) goto nomem;
    for (size_t i = 0; i < n; i++)
        ts[i] = order ? deftsim_st_find(f, json_string_value(json_array_get(order, i)))
                      : deftsim_st_tensor_at(f, i);
    if (!order) qsort(ts, n, sizeof *ts, cmp_tensor_name);
    const json_t *meta = deftsim_st_metadata(f);
    const json_t *mn = meta ? json_object_get(meta, "model") : NULL;
    if (mn && json_string_length(mn) > 0) {
        m->name = strdup(json_string_value(mn));
    } else {
        const char *b = dir + strlen(dir);
        while (b > dir && b[-1] == '/') b--;
        const char *e = b;
        while (b > dir && b[-1] != '/') b--;
        m->name = e > b ? strndup(b, (size_t)(e - b)) : strdup("trace");
    }
    if (!m->name) goto nomem;
    for (size_t i = 0; i < n; i++) {
        const deftsim_st_tensor *ten = ts[i];
        deftsim_layer *L = &m->layers[i];
        if (!dtype_readable(ten->dtype)) {
            st = bad_dtype(path, ten);
            goto fail;
        }
        if (ten->ndim > DEFTSIM_MAX_DIMS) {
            st = deftsim_error_set(DEFTSIM_E_INPUT, "%s: tensor '%s': %u dimensions (at most %d "
                                   "supported)", path, ten->name, ten->ndim, DEFTSIM_MAX_DIMS);
            goto fail;
        }
        if (ten->numel == 0) {
            st = deftsim_error_set(DEFTSIM_E_INPUT, "%s: tensor '%s': no elements (a dimension "
                                   "is 0)", path, ten->name);
            goto fail;
        }
        L->ndim = ten->ndim ? ten->ndim : 1;
        for (uint32_t d = 0; d < L->ndim; d++) L->shape[d] = ten->ndim ? ten->shape[d] : 1;
        L->numel = ten->numel;
        L->offset = m->numel;
        if (m->numel + L->numel > (1ull << 48)) {
            st = deftsim_error_set(DEFTSIM_E_INPUT, "%s: model too large", path);
            goto fail;
        }
        m->numel += L->numel;
        if (!(L->name = strdup(ten->name))) goto nomem;
        m->nlayers = i + 1;
    }
    free(ts);
    json_decref(order);
    *out = m;
    return DEFTSIM_OK;
nomem:
    st = deftsim_error_set(DEFTSIM_E_NOMEM, "%s: out of memory", path);
fail:
    free(ts);
    json_decref(order);
    deftsim_model_free(m);
    return st;
}

/* Checks a metadata value, if present, against an expected number. */
static deftsim_status meta_number(const deftsim_st_file *f, const char *key, uint64_t want,
                                  const char *what)
{
    const json_t *meta = deftsim_st_metadata(f);
    const json_t *v = meta ? json_object_get(meta, key) : NULL;
    uint64_t got;
    if (v && (deftsim_parse_u64(json_string_value(v), &got) || got != want))
        return deftsim_error_set(DEFTSIM_E_INPUT, "%s: header: '__metadata__.%s' is '%s' but %s "
                                 "%" PRIu64, deftsim_st_path(f), key, json_string_value(v), what,
                                 want);
    return DEFTSIM_OK;
}

/* Reads one rank's file into dst (numel floats, parameter order), checking it against the
 * model; ref names where the model came from in messages. */
static deftsim_status read_rank_file(const deftsim_model *m, const char *ref, uint64_t iteration,
                                     uint32_t rank, uint32_t P, const char *path, float *dst,
                                     uint64_t *layer_byte, unsigned char *layer_esize)
{
    deftsim_st_file *f;
    deftsim_status st = deftsim_st_open(path, &f);
    if (st) return st;
    json_t *order = NULL;
    if ((st = meta_number(f, "iteration", iteration, "the file is in the folder of iteration")) ||
        (st = meta_number(f, "rank", rank, "the file is named for rank")) ||
        (st = meta_number(f, "world_size", P, "the trace has ranks 0 to P-1 with P =")) ||
        (st = order_metadata(f, &order)))
        goto done;
    for (size_t L = 0; L < m->nlayers && !st; L++) {
        const deftsim_layer *ly = &m->layers[L];
        const deftsim_st_tensor *ten = deftsim_st_find(f, ly->name);
        char a[200], b[200];
        if (!ten) {
            st = deftsim_error_set(DEFTSIM_E_INPUT, "%s: tensor '%s' missing (%s has it)", path,
                                   ly->name, ref);
        } else if (!dtype_readable(ten->dtype)) {
            st = bad_dtype(path, ten);
        } else if (!shape_matches(ten, ly)) {
            shape_text(ten, a, sizeof a);
            layer_shape_text(ly, b, sizeof b);
            st = deftsim_error_set(DEFTSIM_E_INPUT, "%s: tensor '%s': shape %s, but %s has %s",
                                   path, ly->name, a, ref, b);
        } else {
            deftsim_trace_convert(ten->dtype, ten->data, ly->numel, dst + ly->offset);
            layer_byte[L] = deftsim_st_buffer_offset(f) + ten->begin;
            layer_esize[L] = (unsigned char)ten->elem_size;
        }
        if (!st && order && strcmp(json_string_value(json_array_get(order, L)), ly->name))
            st = deftsim_error_set(DEFTSIM_E_INPUT, "%s: header: '__metadata__.%s' puts '%s' at "
                                   "position %zu, but %s has '%s' there (parameters in another "
                                   "order)", path, DEFTSIM_TRACE_ORDER_KEY,
                                   json_string_value(json_array_get(order, L)), L, ref, ly->name);
    }
    if (!st && deftsim_st_count(f) != m->nlayers) {
        for (size_t i = 0; i < deftsim_st_count(f) && !st; i++) {
            const char *nm = deftsim_st_tensor_at(f, i)->name;
            int known = 0;
            for (size_t L = 0; L < m->nlayers && !known; L++)
                known = !strcmp(nm, m->layers[L].name);
            if (!known)
                st = deftsim_error_set(DEFTSIM_E_INPUT, "%s: unexpected tensor '%s' (%s has no "
                                       "such parameter)", path, nm, ref);
        }
    }
done:
    json_decref(order);
    deftsim_st_close(f);
    return st;
}

/* Provenance of a per-rank trace without manifest, from the first file's metadata. */
static json_t *derived_provenance(const deftsim_st_file *f, int from_metadata)
{
    const json_t *meta = deftsim_st_metadata(f);
    const json_t *rec = meta ? json_object_get(meta, "recorder") : NULL;
    const json_t *how = meta ? json_object_get(meta, "method") : NULL;
    const json_t *seed = meta ? json_object_get(meta, "seed") : NULL;
    json_t *p = json_object();
    if (!p) return NULL;
    uint64_t s;
    json_t *sv = json_null();
    if (seed && !deftsim_parse_u64(json_string_value(seed), &s))
        sv = s <= (uint64_t)INT64_MAX ? json_integer((json_int_t)s) : json_string(json_string_value(seed));
    if (json_object_set_new(p, "recorder", json_string(rec ? json_string_value(rec) : "unknown")) ||
        json_object_set_new(p, "method",
                            json_string(how ? json_string_value(how)
                                            : "per-rank safetensors files without a manifest")) ||
        json_object_set_new(p, "seed", sv) ||
        json_object_set_new(p, "layer_order",
                            json_string(from_metadata ? "__metadata__." DEFTSIM_TRACE_ORDER_KEY
                                                      : "sorted by name (no __metadata__."
                                                        DEFTSIM_TRACE_ORDER_KEY ")"))) {
        json_decref(p);
        return NULL;
    }
    return p;
}

/* Opens the per-rank layout of t->dir: with t->man filled from a manifest (have_manifest), or
 * deriving the manifest from the files. */
static deftsim_status open_per_rank(deftsim_trace *t, int have_manifest)
{
    const char *dir = t->dir;
    numbered *its = NULL, **ranks = NULL;
    size_t nits = 0, *nranks = NULL, niter = 0;
    deftsim_st_file *first = NULL;
    char *ref = NULL;
    deftsim_status st = scan_numbered(dir, "iter_", "", 1, &its, &nits);
    if (st) return st;
    if (nits == 0) {
        st = deftsim_error_set(DEFTSIM_E_INPUT, "%s: no iteration folders (iter_<t>/) of the "
                               "per-rank layout", dir);
        goto done;
    }
    /* The folders used, in iteration order: the manifest's, or all. */
    niter = have_manifest ? t->man.niter : nits;
    size_t *use = calloc(niter, sizeof *use);
    if (!use) goto nomem;
    if (have_manifest) {
        for (size_t i = 0; i < niter && !st; i++) {
            size_t k = 0;
            while (k < nits && its[k].id != t->man.iters[i]) k++;
            if (k == nits) {
                char fname[64];
                snprintf(fname, sizeof fname, "iter_%06" PRIu64, t->man.iters[i]);
                char *p = join_path(dir, fname);
                st = deftsim_error_set(DEFTSIM_E_INPUT, "%s: missing: the manifest lists iteration "
                                       "%" PRIu64 " but its folder does not exist", p ? p : dir,
                                       t->man.iters[i]);
                free(p);
            }
            use[i] = k;
        }
    } else {
        for (size_t i = 0; i < niter; i++) use[i] = i;
        t->man.version = DEFTSIM_TRACE_FORMAT_VERSION_MAX;
        t->man.per_rank = 1;
        t->man.niter = niter;
        if (!(t->man.iters = malloc(niter * sizeof *t->man.iters))) {
            free(use);
            goto nomem;
        }
        for (size_t i = 0; i < niter; i++) t->man.iters[i] = its[i].id;
    }
    if (st) {
        free(use);
        goto done;
    }
    t->iters = calloc(niter, sizeof *t->iters);
    ranks = calloc(niter, sizeof *ranks);
    nranks = calloc(niter, sizeof *nranks);
    if (!t->iters || !ranks || !nranks) {
        free(use);
        goto nomem;
    }
    uint64_t P = 0;
    for (size_t i = 0; i < niter && !st; i++) {
        trace_iter *it = &t->iters[i];
        it->id = its[use[i]].id;
        if (!(it->path = join_path(dir, its[use[i]].name))) {
            free(use);
            goto nomem;
        }
        if ((st = scan_numbered(it->path, "rank_", ".safetensors", 0, &ranks[i], &nranks[i])))
            break;
        if (nranks[i] == 0)
            st = deftsim_error_set(DEFTSIM_E_INPUT, "%s: no rank files (rank_<r>.safetensors)",
                                   it->path);
        else if (ranks[i][nranks[i] - 1].id + 1 > P)
            P = ranks[i][nranks[i] - 1].id + 1;
    }
    free(use);
    if (st) goto done;
    if (have_manifest) {
        P = t->man.workers;
    } else if (P > DEFTSIM_TRACE_MAX_WORKERS) {
        st = deftsim_error_set(DEFTSIM_E_INPUT, "%s: rank %" PRIu64 " exceeds the limit of %u "
                               "ranks", dir, P - 1, DEFTSIM_TRACE_MAX_WORKERS);
        goto done;
    }
    /* Every iteration holds exactly ranks 0 to P-1. */
    for (size_t i = 0; i < niter && !st; i++) {
        for (size_t k = 0; k < nranks[i] && !st; k++) {
            char *p = join_path(t->iters[i].path, ranks[i][k].name);
            if (ranks[i][k].id >= P)
                st = deftsim_error_set(DEFTSIM_E_INPUT, "%s: unexpected rank %" PRIu64 " (the "
                                       "manifest says %" PRIu64 " workers, ranks 0 to %" PRIu64 ")",
                                       p ? p : t->iters[i].path, ranks[i][k].id, P, P - 1);
            else if (ranks[i][k].id != k) {
                char fname[64];
                snprintf(fname, sizeof fname, "rank_%04zu.safetensors", k);
                free(p);
                p = join_path(t->iters[i].path, fname);
                st = deftsim_error_set(DEFTSIM_E_INPUT, "%s: missing: iteration %" PRIu64 " has no "
                                       "file of rank %zu (the trace has %" PRIu64 " ranks, 0 to %"
                                       PRIu64 ")", p ? p : t->iters[i].path, t->iters[i].id, k, P,
                                       P - 1);
            }
            free(p);
        }
        if (!st && nranks[i] < P) {
            char fname[64];
            snprintf(fname, sizeof fname, "rank_%04zu.safetensors", nranks[i]);
            char *p = join_path(t->iters[i].path, fname);
            st = deftsim_error_set(DEFTSIM_E_INPUT, "%s: missing: iteration %" PRIu64 " has no "
                                   "file of rank %zu (the trace has %" PRIu64 " ranks, 0 to %"
                                   PRIu64 ")", p ? p : t->iters[i].path, t->iters[i].id,
                                   nranks[i], P, P - 1);
            free(p);
        }
    }
    if (st) goto done;
    if (have_manifest) {
        ref = strdup("the manifest");
    } else {
        ref = join_path(t->iters[0].path, ranks[0][0].name);
        if (ref && (st = deftsim_st_open(ref, &first))) goto done;
        int from_meta = 0;
        if (ref && (st = derive_model(first, dir, &t->man.model, &from_meta))) goto done;
        t->order = from_meta ? "metadata" : "sorted";
        t->man.workers = (uint32_t)P;
        if (ref && !(t->man.provenance = derived_provenance(first, from_meta))) goto nomem;
    }
    if (!ref) goto nomem;
    const deftsim_model *m = t->man.model;
    size_t bytes;
    if (deftsim_mul_size((size_t)m->numel, sizeof(float), &bytes)) {
        st = deftsim_error_set(DEFTSIM_E_INPUT, "%s: model too large", dir);
        goto done;
    }
    for (size_t i = 0; i < niter && !st; i++) {
        trace_iter *it = &t->iters[i];
        it->grads = calloc(P, sizeof *it->grads);
        it->owned = calloc(P, sizeof *it->owned);
        it->rank_paths = calloc(P, sizeof *it->rank_paths);
        it->layer_byte = calloc(P * m->nlayers, sizeof *it->layer_byte);
        it->layer_esize = calloc(P * m->nlayers, 1);
        if (!it->grads || !it->owned || !it->rank_paths || !it->layer_byte || !it->layer_esize)
            goto nomem;
        for (uint32_t r = 0; r < P && !st; r++) {
            if (!(it->rank_paths[r] = join_path(it->path, ranks[i][r].name)) ||
                !(it->owned[r] = malloc(bytes ? bytes : 1)))
                goto nomem;
            it->grads[r] = it->owned[r];
            st = read_rank_file(m, ref, it->id, r, (uint32_t)P, it->rank_paths[r], it->owned[r],
                                it->layer_byte + (size_t)r * m->nlayers,
                                it->layer_esize + (size_t)r * m->nlayers);
        }
    }
    goto done;
nomem:
    st = deftsim_error_set(DEFTSIM_E_NOMEM, "%s: out of memory", dir);
done:
    for (size_t i = 0; ranks && i < niter; i++) numbered_free(ranks[i], nranks[i]);
    free(ranks);
    free(nranks);
    numbered_free(its, nits);
    deftsim_st_close(first);
    free(ref);
    return st;
}

/* Opens dir; ignore_manifest derives a per-rank trace from its files alone (import). */
static deftsim_status trace_open(const char *dir, int ignore_manifest, deftsim_trace **out)
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
        return deftsim_error_set(DEFTSIM_E_NOMEM, "%s: out of memory", dir);
    }
    t->order = "manifest";
    deftsim_status st;
    char *mpath = join_path(dir, DEFTSIM_TRACE_MANIFEST);
    if (!mpath) {
        deftsim_trace_close(t);
        return deftsim_error_set(DEFTSIM_E_NOMEM, "%s: out of memory", dir);
    }
    if (ignore_manifest || access(mpath, F_OK) != 0) {
        /* No manifest: the per-rank layout, whose files say everything. */
        int err = errno;
        numbered *its = NULL;
        size_t nits = 0;
        if (!ignore_manifest && err != ENOENT)
            st = deftsim_error_set(deftsim_open_input_status(err), "%s: cannot open: %s", mpath,
                                   strerror(err));
        else if (!(st = scan_numbered(dir, "iter_", "", 1, &its, &nits)) && nits == 0 &&
                 ignore_manifest)
            st = deftsim_error_set(DEFTSIM_E_INPUT, "%s: no iter_<t>/ folders of the per-rank "
                                   "layout to import (traces/FORMAT.md)", dir);
        else if (!st && nits == 0)
            st = deftsim_error_set(DEFTSIM_E_INPUT, "%s: not a trace: no %s (flat layout) and no "
                                   "iter_<t>/ folders (per-rank layout; traces/FORMAT.md)", dir,
                                   DEFTSIM_TRACE_MANIFEST);
        numbered_free(its, nits);
        free(mpath);
        if (!st) st = open_per_rank(t, 0);
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
    if (!st && t->man.per_rank) st = open_per_rank(t, 1);
    if (st || t->man.per_rank) {
        if (st) deftsim_trace_close(t);
        else *out = t;
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
    char *mpath = join_path(dir, DEFTSIM_TRACE_MANIFEST);
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
    st = deftsim_error_set(DEFTSIM_E_NOMEM, "%s: out of memory", dir);
done:
    json_decref(iters);
    json_decref(root);
    json_decref(old);
    free(mpath);
    deftsim_trace_close(t);
    return st;
}
