/* npy.c - one-dimensional .npy files (NumPy format version 1.0), see deftsim_npy.h. */
#include "deftsim_npy.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deftsim_util.h"

#define NPY_MAGIC "\x93NUMPY"
#define NPY_MAGIC_LEN 6
#define NPY_ALIGN 64
/* Items converted per write call when the host layout differs from the file's. */
#define NPY_CHUNK 8192

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define NPY_HOST_LE 0
#else
#define NPY_HOST_LE 1
#endif

const char *deftsim_npy_descr(deftsim_npy_type t)
{
    switch (t) {
    case DEFTSIM_NPY_I8: return "<i8";
    case DEFTSIM_NPY_I4: return "<i4";
    case DEFTSIM_NPY_F4: return "<f4";
    }
    return "?";
}

size_t deftsim_npy_itemsize(deftsim_npy_type t) { return t == DEFTSIM_NPY_I8 ? 8 : 4; }

size_t deftsim_npy_header(deftsim_npy_type t, uint64_t count, unsigned char *buf, size_t cap)
{
    char dict[128];
    int len = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (%" PRIu64 ",), }",
                       deftsim_npy_descr(t), count);
    /* magic (6) + version (2) + header length (2) + dict + padding + '\n' */
    size_t total = 10 + (size_t)len + 1;
    total = (total + NPY_ALIGN - 1) / NPY_ALIGN * NPY_ALIGN;
    if (cap < total) return total;
    size_t hlen = total - 10;
    memcpy(buf, NPY_MAGIC, NPY_MAGIC_LEN);
    buf[6] = 1;
    buf[7] = 0;
    buf[8] = (unsigned char)(hlen & 0xFF);
    buf[9] = (unsigned char)(hlen >> 8);
    memcpy(buf + 10, dict, (size_t)len);
    memset(buf + 10 + len, ' ', hlen - (size_t)len - 1);
    buf[total - 1] = '\n';
    return total;
}

static void to_le(void *dst, const void *src, size_t itemsize, size_t count)
{
    const unsigned char *s = src;
    unsigned char *d = dst;
    for (size_t i = 0; i < count; i++)
        for (size_t b = 0; b < itemsize; b++) d[i * itemsize + b] = s[i * itemsize + itemsize - 1 - b];
}

/* Writes the header, then count items produced by convert(src, chunk offset, n, out) in
 * chunks (or the data as it is when convert is NULL). */
typedef void (*npy_convert_fn)(const void *src, uint64_t first, size_t n, unsigned char *out);

static deftsim_status npy_write_with(const char *path, deftsim_npy_type t, const void *data,
                                     uint64_t count, npy_convert_fn convert)
{
    unsigned char header[256];
    size_t hlen = deftsim_npy_header(t, count, header, sizeof header);
    size_t isz = deftsim_npy_itemsize(t);
    deftsim_afile *af;
    deftsim_status st = deftsim_afile_open(&af, path);
    if (st) return st;
    FILE *f = deftsim_afile_stream(af);
    int ok = fwrite(header, 1, hlen, f) == hlen;
    if (ok && count && !convert && NPY_HOST_LE) {
        ok = fwrite(data, isz, (size_t)count, f) == (size_t)count;
    } else if (ok && count) {
        /* Items in host order go to tmp; on a big-endian host they are swapped into out. */
        unsigned char *tmp = malloc(2 * NPY_CHUNK * 8);
        if (!tmp) {
            deftsim_afile_abort(af);
            return deftsim_error_nomem("%s", path);
        }
        unsigned char *out = tmp + NPY_CHUNK * 8;
        for (uint64_t o = 0; ok && o < count; o += NPY_CHUNK) {
            size_t n = (size_t)(count - o < NPY_CHUNK ? count - o : NPY_CHUNK);
            if (convert) convert(data, o, n, tmp);
            else memcpy(tmp, (const unsigned char *)data + o * isz, n * isz);
            if (NPY_HOST_LE) out = tmp;
            else to_le(out, tmp, isz, n);
            ok = fwrite(out, isz, n, f) == n;
        }
        free(tmp);
    }
    if (!ok) {
        int err = errno;
        deftsim_afile_abort(af);
        return deftsim_error_set(DEFTSIM_E_IO, "%s: write failed: %s", path, strerror(err));
    }
    return deftsim_afile_commit(af);
}

deftsim_status deftsim_npy_write(const char *path, deftsim_npy_type t, const void *data,
                                 uint64_t count)
{
    return npy_write_with(path, t, data, count, NULL);
}

static void widen_u32(const void *src, uint64_t first, size_t n, unsigned char *out)
{
    const uint32_t *idx = (const uint32_t *)src + first;
    int64_t *o = (int64_t *)(void *)out;
    for (size_t i = 0; i < n; i++) o[i] = (int64_t)idx[i];
}

deftsim_status deftsim_npy_write_u32_as_i8(const char *path, const uint32_t *idx, uint64_t count)
{
    return npy_write_with(path, DEFTSIM_NPY_I8, idx, count, widen_u32);
}

/* ---- reading ------------------------------------------------------------------------------ */

/* The value text after 'key': in the header dict (NULL if absent). */
static const char *dict_value(const char *dict, const char *key)
{
    char pat[32];
    snprintf(pat, sizeof pat, "'%s'", key);
    const char *p = strstr(dict, pat);
    if (!p) return NULL;
    p += strlen(pat);
    while (*p == ' ') p++;
    if (*p != ':') return NULL;
    p++;
    while (*p == ' ') p++;
    return p;
}

static deftsim_status parse_header(const char *path, const char *dict, deftsim_npy_type *type,
                                   uint64_t *count)
{
    const char *d = dict_value(dict, "descr");
    if (!d || (*d != '\'' && *d != '"'))
        return deftsim_error_set(DEFTSIM_E_INPUT, "%s: header has no 'descr'", path);
    char q = *d++;
    const char *e = strchr(d, q);
    if (!e || e - d > 8) return deftsim_error_set(DEFTSIM_E_INPUT, "%s: bad 'descr'", path);
    char descr[16];
    memcpy(descr, d, (size_t)(e - d));
    descr[e - d] = '\0';
    if (strcmp(descr, "<i8") == 0) *type = DEFTSIM_NPY_I8;
    else if (strcmp(descr, "<i4") == 0) *type = DEFTSIM_NPY_I4;
    else if (strcmp(descr, "<f4") == 0) *type = DEFTSIM_NPY_F4;
    else
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "%s: dtype '%s' is not supported (only <i8, <i4, <f4)", path, descr);

    const char *fo = dict_value(dict, "fortran_order");
    if (!fo || strncmp(fo, "False", 5) != 0)
        return deftsim_error_set(DEFTSIM_E_INPUT, "%s: only fortran_order False is supported", path);

    const char *sh = dict_value(dict, "shape");
    if (!sh || *sh != '(') return deftsim_error_set(DEFTSIM_E_INPUT, "%s: header has no 'shape'", path);
    sh++;
    char *end;
    errno = 0;
    unsigned long long n = strtoull(sh, &end, 10);
    if (end == sh || errno)
        return deftsim_error_set(DEFTSIM_E_INPUT, "%s: shape is not a 1-D array", path);
    while (*end == ' ') end++;
    if (*end == ',') end++;
    while (*end == ' ') end++;
    if (*end != ')') return deftsim_error_set(DEFTSIM_E_INPUT, "%s: shape is not a 1-D array", path);
    *count = n;
    return DEFTSIM_OK;
}

deftsim_status deftsim_npy_read(const char *path, deftsim_npy_type *type, void **data,
                                uint64_t *count)
{
    *data = NULL;
    *count = 0;
    char *buf;
    size_t len;
    deftsim_status st = deftsim_read_file(path, &buf, &len);
    if (st) return st;
    const unsigned char *u = (const unsigned char *)buf;
    if (len < 10 || memcmp(buf, NPY_MAGIC, NPY_MAGIC_LEN) != 0) {
        free(buf);
        return deftsim_error_set(DEFTSIM_E_INPUT, "%s: not a .npy file (bad magic)", path);
    }
    size_t pre, hlen;
    if (u[6] == 1) {
        pre = 10;
        hlen = (size_t)u[8] | (size_t)u[9] << 8;
    } else if ((u[6] == 2 || u[6] == 3) && len >= 12) {
        pre = 12;
        hlen = (size_t)u[8] | (size_t)u[9] << 8 | (size_t)u[10] << 16 | (size_t)u[11] << 24;
    } else {
        unsigned major = u[6], minor = u[7];
        free(buf);
        return deftsim_error_set(DEFTSIM_E_INPUT, "%s: unsupported .npy version %u.%u", path,
                                 major, minor);
    }
    if (hlen > len - pre) {
        free(buf);
        return deftsim_error_set(DEFTSIM_E_INPUT, "%s: header runs past the end of the file", path);
    }
    char *dict = malloc(hlen + 1);
    if (!dict) {
        free(buf);
        return deftsim_error_nomem("%s", path);
    }
    memcpy(dict, buf + pre, hlen);
    dict[hlen] = '\0';
    uint64_t n = 0;
    st = parse_header(path, dict, type, &n);
    free(dict);
    if (st) {
        free(buf);
        return st;
    }
    size_t isz = deftsim_npy_itemsize(*type);
    size_t body = len - pre - hlen;
    if (n > body / isz || (size_t)n * isz != body) {
        free(buf);
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "%s: shape (%" PRIu64 ",) needs %" PRIu64 " data bytes, the file holds %zu",
                                 path, n, n * isz, body);
    }
    if (n) {
        void *out = malloc((size_t)n * isz);
        if (!out) {
            free(buf);
            return deftsim_error_nomem("%s", path);
        }
        if (NPY_HOST_LE) memcpy(out, buf + pre + hlen, (size_t)n * isz);
        else to_le(out, buf + pre + hlen, isz, (size_t)n);
        *data = out;
    }
    free(buf);
    *count = n;
    return DEFTSIM_OK;
}
