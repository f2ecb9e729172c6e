/* trace_rank.c - the per-rank layout of a trace (iter_<t>/rank_<r>.safetensors, FORMAT.md):
 * the iteration folders and rank files scanned, checked against the model (or the model
 * derived from the first file when there is no manifest), and every worker's gradient read
 * and converted to float32 in parameter order, into memory of the trace's own.
 *
 * Call order (a file calls only files below it):
 *   trace_write.c  the writer and the import of a per-rank trace (which opens it to read)
 *   trace.c        the manifest and the reader: opens a trace, hands out gradients
 *   trace_rank.c   the per-rank layout (iter_<t>/rank_<r>.safetensors) */
#include "trace_internal.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "deftsim_util.h"

char *trace_join_path(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", dir, name);
    return p;
}

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


static int cmp_numbered(const void *a, const void *b)
{
    const trace_numbered *x = a, *y = b;
    if (x->id != y->id) return x->id < y->id ? -1 : 1;
    return strcmp(x->name, y->name);
}

void trace_numbered_free(trace_numbered *v, size_t n)
{
    for (size_t i = 0; v && i < n; i++) free(v[i].name);
    free(v);
}

/* The entries of dir named prefix<number>suffix (folders if want_dir, else anything), sorted
 * by number; two names of one number are an error. */
deftsim_status trace_scan_numbered(const char *dir, const char *prefix, const char *suffix,
                                   int want_dir, trace_numbered **out, size_t *count)
{
    *out = NULL;
    *count = 0;
    DIR *d = opendir(dir);
    if (!d)
        return deftsim_error_set(deftsim_open_input_status(errno), "%s: cannot open the folder: %s",
                                 dir, strerror(errno));
    trace_numbered *v = NULL;
    size_t n = 0, cap = 0;
    deftsim_status st = DEFTSIM_OK;
    struct dirent *e;
    while ((e = readdir(d))) {
        uint64_t id;
        if (parse_numbered(e->d_name, prefix, suffix, &id)) continue;
        if (want_dir) {
            char *p = trace_join_path(dir, e->d_name);
            struct stat sb;
            int isdir = p && stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
            free(p);
            if (!isdir) continue;
        }
        if (deftsim_grow(&v, &cap, n + 1, sizeof *v)) {
            st = deftsim_error_nomem("%s", dir);
            break;
        }
        if (!(v[n].name = strdup(e->d_name))) {
            st = deftsim_error_nomem("%s", dir);
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
        trace_numbered_free(v, n);
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
    st = deftsim_error_nomem("%s", path);
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
/* Every iteration of t holds exactly the files of ranks 0 to P-1: ranks[i] (nranks[i] of them,
 * sorted) are iteration i's. */
static deftsim_status check_ranks(const deftsim_trace *t, trace_numbered *const *ranks,
                                  const size_t *nranks, size_t niter, uint64_t P)
{
    deftsim_status st = DEFTSIM_OK;
    for (size_t i = 0; i < niter && !st; i++) {
        for (size_t k = 0; k < nranks[i] && !st; k++) {
            char *p = trace_join_path(t->iters[i].path, ranks[i][k].name);
            if (ranks[i][k].id >= P)
                st = deftsim_error_set(DEFTSIM_E_INPUT, "%s: unexpected rank %" PRIu64 " (the "
                                       "manifest says %" PRIu64 " workers, ranks 0 to %" PRIu64 ")",
                                       p ? p : t->iters[i].path, ranks[i][k].id, P, P - 1);
            else if (ranks[i][k].id != k) {
                char fname[64];
                snprintf(fname, sizeof fname, "rank_%04zu.safetensors", k);
                free(p);
                p = trace_join_path(t->iters[i].path, fname);
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
            char *p = trace_join_path(t->iters[i].path, fname);
            st = deftsim_error_set(DEFTSIM_E_INPUT, "%s: missing: iteration %" PRIu64 " has no "
                                   "file of rank %zu (the trace has %" PRIu64 " ranks, 0 to %"
                                   PRIu64 ")", p ? p : t->iters[i].path, t->iters[i].id,
                                   nranks[i], P, P - 1);
            free(p);
        }
    }
    return st;
}

deftsim_status trace_open_per_rank(deftsim_trace *t, int have_manifest)
{
    const char *dir = t->dir;
    trace_numbered *its = NULL, **ranks = NULL;
    size_t nits = 0, *nranks = NULL, niter = 0;
    deftsim_st_file *first = NULL;
    char *ref = NULL;
    deftsim_status st = trace_scan_numbered(dir, "iter_", "", 1, &its, &nits);
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
                char *p = trace_join_path(dir, fname);
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
        if (!(it->path = trace_join_path(dir, its[use[i]].name))) {
            free(use);
            goto nomem;
        }
        if ((st = trace_scan_numbered(it->path, "rank_", ".safetensors", 0, &ranks[i], &nranks[i])))
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
    st = check_ranks(t, ranks, nranks, niter, P);
    if (st) goto done;
    if (have_manifest) {
        ref = strdup("the manifest");
    } else {
        ref = trace_join_path(t->iters[0].path, ranks[0][0].name);
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
            if (!(it->rank_paths[r] = trace_join_path(it->path, ranks[i][r].name)) ||
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
    st = deftsim_error_nomem("%s", dir);
done:
    for (size_t i = 0; ranks && i < niter; i++) trace_numbered_free(ranks[i], nranks[i]);
    free(ranks);
    free(nranks);
    trace_numbered_free(its, nits);
    deftsim_st_close(first);
    free(ref);
    return st;
}

/* Opens dir; ignore_manifest derives a per-rank trace from its files alone (import). */
