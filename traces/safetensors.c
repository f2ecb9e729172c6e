/* safetensors.c - the safetensors reader (mmap, validate everything) and header builder. */
#include "deftsim_safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "deftsim_util.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "deftsim reads safetensors (little-endian) in place and needs a little-endian host"
#endif

struct deftsim_st_file {
    char *path;
    uint64_t size;
    void *map;        /* the mapping (mapped) or NULL */
    char *copy;       /* the aligned heap copy (not mapped) or NULL */
    const unsigned char *bytes; /* the file's first byte, in map or copy */
    uint64_t header_len;
    json_t *header;   /* parsed header; names point into it */
    const json_t *metadata;
    size_t count;
    deftsim_st_tensor *tensors;
};

static const struct {
    const char *name;
    size_t size;
} dtypes[] = {
    {"BOOL", 1}, {"U8", 1}, {"I8", 1}, {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"F8_E8M0", 1},
    {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},
    {"I32", 4},  {"U32", 4}, {"F32", 4},
    {"I64", 8},  {"U64", 8}, {"F64", 8}, {"C64", 8},
};

size_t deftsim_st_dtype_size(const char *dtype)
{
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
        if (strcmp(dtypes[i].name, dtype) == 0) return dtypes[i].size;
    return 0;
}

void deftsim_st_close(deftsim_st_file *f)
{
    if (!f) return;
    if (f->map) munmap(f->map, (size_t)f->size);
    free(f->copy);
    json_decref(f->header);
    free(f->tensors);
    free(f->path);
    free(f);
}

const char *deftsim_st_path(const deftsim_st_file *f) { return f->path; }
uint64_t deftsim_st_file_size(const deftsim_st_file *f) { return f->size; }
uint64_t deftsim_st_buffer_offset(const deftsim_st_file *f) { return 8 + f->header_len; }
size_t deftsim_st_count(const deftsim_st_file *f) { return f->count; }
const json_t *deftsim_st_metadata(const deftsim_st_file *f) { return f->metadata; }

const deftsim_st_tensor *deftsim_st_tensor_at(const deftsim_st_file *f, size_t i)
{
    return i < f->count ? &f->tensors[i] : NULL;
}

const deftsim_st_tensor *deftsim_st_find(const deftsim_st_file *f, const char *name)
{
    for (size_t i = 0; i < f->count; i++)
        if (strcmp(f->tensors[i].name, name) == 0) return &f->tensors[i];
    return NULL;
}

/* Reads the whole file into memory placed so that byte `buffer_at` of the file lands on an
 * 8-byte boundary. */
static deftsim_status read_aligned(deftsim_st_file *f, int fd, uint64_t buffer_at)
{
    size_t pad = (size_t)((8 - buffer_at % 8) % 8);
    /* malloc returns memory aligned to at least 16, so base + pad + buffer_at is aligned. */
    f->copy = malloc((size_t)f->size + pad + 1);
    if (!f->copy) return deftsim_error_nomem("%s", f->path);
    unsigned char *dst = (unsigned char *)f->copy + pad;
    uint64_t done = 0;
    while (done < f->size) {
        ssize_t got = pread(fd, dst + done, (size_t)(f->size - done), (off_t)done);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0)
            return deftsim_error_set(DEFTSIM_E_IO, "%s: read failed at byte %" PRIu64 ": %s",
                                     f->path, done, got < 0 ? strerror(errno) : "file shrank");
        done += (uint64_t)got;
    }
    f->bytes = dst;
    return DEFTSIM_OK;
}

static int cmp_begin(const void *a, const void *b)
{
    const deftsim_st_tensor *x = *(const deftsim_st_tensor *const *)a;
    const deftsim_st_tensor *y = *(const deftsim_st_tensor *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

/* A JSON integer in [0, 2^63). */
static int get_u64(const json_t *v, uint64_t *out)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0) return -1;
    *out = (uint64_t)json_integer_value(v);
    return 0;
}

static deftsim_status parse_tensor(deftsim_st_file *f, const char *name, const json_t *v,
                                   uint64_t buffer_len, deftsim_st_tensor *t)
{
    const char *p = f->path;
    if (!json_is_object(v))
        return deftsim_error_set(DEFTSIM_E_INPUT, "%s: header: tensor '%s': not a JSON object", p,
                                 name);
    const char *k;
    json_t *val;
    json_object_foreach((json_t *)v, k, val) {
        if (strcmp(k, "dtype") && strcmp(k, "shape") && strcmp(k, "data_offsets"))
            return deftsim_error_set(DEFTSIM_E_INPUT,
                                     "%s: header: tensor '%s': unknown field '%s'", p, name, k);
    }
    memset(t, 0, sizeof *t);
    t->name = name;
    const json_t *dt = json_object_get(v, "dtype");
    if (!dt)
        return deftsim_error_set(DEFTSIM_E_INPUT, "%s: header: tensor '%s': missing field 'dtype'",
                                 p, name);
    if (!json_is_string(dt))
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "%s: header: tensor '%s': field 'dtype' is not a string", p, name);
    t->dtype = json_string_value(dt);
    t->elem_size = deftsim_st_dtype_size(t->dtype);
    if (!t->elem_size)
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "%s: header: tensor '%s': field 'dtype': unknown or unsupported "
                                 "dtype '%s'", p, name, t->dtype);

    const json_t *sh = json_object_get(v, "shape");
    if (!sh)
        return deftsim_error_set(DEFTSIM_E_INPUT, "%s: header: tensor '%s': missing field 'shape'",
                                 p, name);
    if (!json_is_array(sh))
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "%s: header: tensor '%s': field 'shape' is not an array", p, name);
    if (json_array_size(sh) > DEFTSIM_ST_MAX_DIMS)
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "%s: header: tensor '%s': field 'shape' has %zu dimensions "
                                 "(at most %d supported)", p, name, json_array_size(sh),
                                 DEFTSIM_ST_MAX_DIMS);
    t->ndim = (uint32_t)json_array_size(sh);
    t->numel = 1;
    for (uint32_t d = 0; d < t->ndim; d++) {
        uint64_t dim;
        if (get_u64(json_array_get(sh, d), &dim))
            return deftsim_error_set(DEFTSIM_E_INPUT,
                                     "%s: header: tensor '%s': field 'shape'[%u] is not a "
                                     "non-negative integer", p, name, d);
        t->shape[d] = dim;
        size_t prod;
        if (deftsim_mul_size((size_t)t->numel, (size_t)dim, &prod))
            return deftsim_error_set(DEFTSIM_E_INPUT,
                                     "%s: header: tensor '%s': field 'shape': element count "
                                     "overflows", p, name);
        t->numel = prod;
    }

    const json_t *off = json_object_get(v, "data_offsets");
    if (!off)
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "%s: header: tensor '%s': missing field 'data_offsets'", p, name);
    if (!json_is_array(off) || json_array_size(off) != 2 ||
        get_u64(json_array_get(off, 0), &t->begin) || get_u64(json_array_get(off, 1), &t->end))
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "%s: header: tensor '%s': field 'data_offsets' is not "
                                 "[begin, end] of non-negative integers", p, name);
    if (t->end < t->begin)
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "%s: header: tensor '%s': field 'data_offsets' [%" PRIu64
                                 ", %" PRIu64 "] ends before it begins", p, name, t->begin, t->end);
    size_t bytes;
    if (deftsim_mul_size((size_t)t->numel, t->elem_size, &bytes) || bytes != t->end - t->begin)
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "%s: header: tensor '%s': field 'data_offsets' [%" PRIu64
                                 ", %" PRIu64 "] spans %" PRIu64 " bytes but dtype %s times "
                                 "shape (%" PRIu64 " elements) needs %" PRIu64, p, name,
                                 t->begin, t->end, t->end - t->begin, t->dtype, t->numel,
                                 (uint64_t)t->numel * t->elem_size);
    if (t->end > buffer_len)
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "%s: header: tensor '%s': field 'data_offsets' [%" PRIu64
                                 ", %" PRIu64 "] reaches file byte %" PRIu64 ", beyond the end "
                                 "of the file (%" PRIu64 " bytes; truncated?)", p, name, t->begin,
                                 t->end, 8 + f->header_len + t->end, f->size);
    return DEFTSIM_OK;
}

static deftsim_status parse_header(deftsim_st_file *f)
{
    const char *p = f->path;
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | f->bytes[i];
    f->header_len = n;
    if (n > DEFTSIM_ST_MAX_HEADER)
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "%s: byte 0: header length %" PRIu64 " exceeds the format's "
                                 "limit of %llu bytes", p, n, DEFTSIM_ST_MAX_HEADER);
    if (n > f->size - 8)
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "%s: byte 0: header length %" PRIu64 " reaches beyond the end "
                                 "of the file (%" PRIu64 " bytes; truncated?)", p, n, f->size);
    const char *text = (const char *)f->bytes + 8;
    if (n == 0 || text[0] != '{')
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "%s: byte 8: header does not start with '{' (not a safetensors "
                                 "file?)", p);
    json_error_t err;
    f->header = json_loadb(text, (size_t)n, JSON_REJECT_DUPLICATES, &err);
    /* jansson's position counts the bytes consumed, the offending one included. */
    if (!f->header)
        return deftsim_error_set(DEFTSIM_E_INPUT, "%s: byte %" PRIu64 ": header JSON: %s", p,
                                 8 + (uint64_t)(err.position > 0 ? err.position - 1 : 0), err.text);
    if (!json_is_object(f->header))
        return deftsim_error_set(DEFTSIM_E_INPUT, "%s: byte 8: header is not a JSON object", p);

    uint64_t buffer_len = f->size - 8 - n;
    size_t cap = json_object_size(f->header);
    f->tensors = calloc(cap ? cap : 1, sizeof *f->tensors);
    if (!f->tensors) return deftsim_error_nomem("%s", p);
    const char *key;
    json_t *val;
    deftsim_status st;
    json_object_foreach(f->header, key, val) {
        if (strcmp(key, "__metadata__") == 0) {
            if (!json_is_object(val))
                return deftsim_error_set(DEFTSIM_E_INPUT,
                                         "%s: header: '__metadata__' is not a JSON object", p);
            const char *mk;
            json_t *mv;
            json_object_foreach(val, mk, mv) {
                if (!json_is_string(mv))
                    return deftsim_error_set(DEFTSIM_E_INPUT,
                                             "%s: header: '__metadata__': value of '%s' is not "
                                             "a string", p, mk);
            }
            f->metadata = val;
            continue;
        }
        if ((st = parse_tensor(f, key, val, buffer_len, &f->tensors[f->count]))) return st;
        f->tensors[f->count].data = f->bytes + 8 + n + f->tensors[f->count].begin;
        f->count++;
    }

    /* The tensors must tile the buffer: sorted by offset, each begins where the previous ends,
     * and the last ends at the end of the file. */
    deftsim_st_tensor **order = malloc((f->count ? f->count : 1) * sizeof *order);
    if (!order) return deftsim_error_nomem("%s", p);
    for (size_t i = 0; i < f->count; i++) order[i] = &f->tensors[i];
    qsort(order, f->count, sizeof *order, cmp_begin);
    uint64_t at = 0;
    const char *prev = NULL;
    st = DEFTSIM_OK;
    for (size_t i = 0; i < f->count && !st; i++) {
        const deftsim_st_tensor *t = order[i];
        if (t->begin < at)
            st = deftsim_error_set(DEFTSIM_E_INPUT,
                                   "%s: header: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                                   "] overlap tensor '%s' (which ends at %" PRIu64 ")", p, t->name,
                                   t->begin, t->end, prev, at);
        else if (t->begin > at)
            st = deftsim_error_set(DEFTSIM_E_INPUT,
                                   "%s: header: buffer bytes [%" PRIu64 ", %" PRIu64 ") (file "
                                   "bytes from %" PRIu64 ") belong to no tensor", p, at, t->begin,
                                   8 + n + at);
        at = t->end;
        prev = t->name;
    }
    free(order);
    if (st) return st;
    if (at != buffer_len)
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "%s: byte %" PRIu64 ": %" PRIu64 " trailing bytes after the last "
                                 "tensor's data", p, 8 + n + at, buffer_len - at);
    return DEFTSIM_OK;
}

deftsim_status deftsim_st_open(const char *path, deftsim_st_file **out)
{
    *out = NULL;
    deftsim_st_file *f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup(path))) {
        free(f);
        return deftsim_error_nomem("%s", path);
    }
    deftsim_status st = DEFTSIM_OK;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int err = errno;
        st = deftsim_error_set(deftsim_open_input_status(err), "%s: cannot open: %s", path,
                               strerror(err));
        goto done;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        st = deftsim_error_set(DEFTSIM_E_IO, "%s: cannot stat: %s", path, strerror(errno));
        goto done;
    }
    if (!S_ISREG(sb.st_mode)) {
        st = deftsim_error_set(DEFTSIM_E_INPUT, "%s: not a regular file", path);
        goto done;
    }
    f->size = (uint64_t)sb.st_size;
    if (f->size < 8) {
        st = deftsim_error_set(DEFTSIM_E_INPUT,
                               "%s: byte 0: file has %" PRIu64 " bytes, too short for the 8-byte "
                               "header length (truncated?)", path, f->size);
        goto done;
    }
    if ((uint64_t)(size_t)f->size != f->size) {
        st = deftsim_error_set(DEFTSIM_E_UNSUPPORTED, "%s: file too large to map", path);
        goto done;
    }
    unsigned char len8[8];
    if (pread(fd, len8, 8, 0) != 8) {
        st = deftsim_error_set(DEFTSIM_E_IO, "%s: cannot read the header length", path);
        goto done;
    }
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | len8[i];
    if (n <= f->size - 8 && (8 + n) % 8 != 0) {
        /* An unpadded header: a mapping would leave the data misaligned for float access. */
        if ((st = read_aligned(f, fd, 8 + n))) goto done;
    } else {
        f->map = mmap(NULL, (size_t)f->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (f->map == MAP_FAILED) {
            f->map = NULL;
            st = deftsim_error_set(DEFTSIM_E_IO, "%s: cannot map: %s", path, strerror(errno));
            goto done;
        }
        f->bytes = f->map;
    }
    st = parse_header(f);
done:
    if (fd >= 0) close(fd);
    if (st) {
        deftsim_st_close(f);
        return st;
    }
    *out = f;
    return DEFTSIM_OK;
}

deftsim_status deftsim_st_build_header(const deftsim_st_spec *specs, size_t n,
                                       const json_t *metadata, char **header, size_t *header_len,
                                       uint64_t *data_size)
{
    *header = NULL;
    *header_len = 0;
    *data_size = 0;
    json_t *root = json_object();
    if (!root) return deftsim_error_nomem("safetensors header");
    deftsim_status st = DEFTSIM_OK;
    if (metadata) {
        if (!json_is_object(metadata)) {
            st = deftsim_error_set(DEFTSIM_E_INPUT, "safetensors header: metadata is not an object");
            goto done;
        }
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)metadata, k, v) {
            if (!json_is_string(v)) {
                st = deftsim_error_set(DEFTSIM_E_INPUT,
                                       "safetensors header: metadata value of '%s' is not a string",
                                       k);
                goto done;
            }
        }
        if (json_object_set(root, "__metadata__", (json_t *)metadata)) goto nomem;
    }
    uint64_t at = 0;
    for (size_t i = 0; i < n; i++) {
        const deftsim_st_spec *s = &specs[i];
        size_t es = deftsim_st_dtype_size(s->dtype);
        if (!es) {
            st = deftsim_error_set(DEFTSIM_E_INPUT, "safetensors header: tensor '%s': unknown dtype '%s'",
                                   s->name, s->dtype);
            goto done;
        }
        if (strcmp(s->name, "__metadata__") == 0 || json_object_get(root, s->name)) {
            st = deftsim_error_set(DEFTSIM_E_INPUT, "safetensors header: tensor name '%s' is "
                                   "reserved or repeated", s->name);
            goto done;
        }
        if (s->ndim > DEFTSIM_ST_MAX_DIMS) {
            st = deftsim_error_set(DEFTSIM_E_INPUT, "safetensors header: tensor '%s': too many "
                                   "dimensions", s->name);
            goto done;
        }
        json_t *shape = json_array();
        size_t numel = 1;
        if (!shape) goto nomem;
        for (uint32_t d = 0; d < s->ndim; d++) {
            if (s->shape[d] > (uint64_t)INT64_MAX || deftsim_mul_size(numel, (size_t)s->shape[d], &numel) ||
                json_array_append_new(shape, json_integer((json_int_t)s->shape[d]))) {
                json_decref(shape);
                st = deftsim_error_set(DEFTSIM_E_INPUT, "safetensors header: tensor '%s': shape "
                                       "too large", s->name);
                goto done;
            }
        }
        size_t bytes;
        if (deftsim_mul_size(numel, es, &bytes) || at + bytes < at || at + bytes > (uint64_t)INT64_MAX) {
            json_decref(shape);
            st = deftsim_error_set(DEFTSIM_E_INPUT, "safetensors header: tensor '%s': too large",
                                   s->name);
            goto done;
        }
        json_t *t = json_pack("{s:s, s:o, s:[I, I]}", "dtype", s->dtype, "shape", shape,
                              "data_offsets", (json_int_t)at, (json_int_t)(at + bytes));
        if (!t || json_object_set_new(root, s->name, t)) goto nomem;
        at += bytes;
    }
    char *text = json_dumps(root, JSON_COMPACT);
    if (!text) goto nomem;
    size_t tl = strlen(text);
    size_t padded = (tl + 8 + 7) / 8 * 8 - 8; /* 8 + padded is a multiple of 8 */
    char *buf = malloc(8 + padded);
    if (!buf) {
        free(text);
        goto nomem;
    }
    for (int i = 0; i < 8; i++) buf[i] = (char)(((uint64_t)padded >> (8 * i)) & 0xFF);
    memcpy(buf + 8, text, tl);
    memset(buf + 8 + tl, ' ', padded - tl);
    free(text);
    *header = buf;
    *header_len = 8 + padded;
    *data_size = at;
    goto done;
nomem:
    st = deftsim_error_nomem("safetensors header");
done:
    json_decref(root);
    return st;
}
