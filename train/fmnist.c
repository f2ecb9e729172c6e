/* fmnist.c - IDX files through zlib (deftsim_fmnist.h). */
#include "deftsim_fmnist.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <zlib.h>

#define IDX_MAGIC_U8_1D 0x00000801u
#define IDX_MAGIC_U8_3D 0x00000803u
/* Far above any real image set, low enough that count * rows * cols cannot overflow. */
#define IDX_MAX_COUNT 100000000u
#define IDX_MAX_SIDE 4096u

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

/* Reads exactly len bytes; a short read is a truncated file. */
static deftsim_status read_exact(gzFile f, const char *path, void *buf, size_t len, size_t at,
                                 const char *what)
{
    unsigned char *p = buf;
    size_t got = 0;
    while (got < len) {
        size_t want = len - got > (1u << 30) ? (1u << 30) : len - got;
        int r = gzread(f, p + got, (unsigned)want);
        if (r < 0) {
            int zerr;
            const char *msg = gzerror(f, &zerr);
            return deftsim_error_set(DEFTSIM_E_INPUT, "%s: byte %zu: reading %s: %s", path,
                                     at + got, what, msg ? msg : "zlib error");
        }
        if (r == 0)
            return deftsim_error_set(DEFTSIM_E_INPUT,
                                     "%s: truncated: %zu bytes of %s expected from byte %zu, the "
                                     "file ends at byte %zu",
                                     path, len, what, at, at + got);
        got += (size_t)r;
    }
    return DEFTSIM_OK;
}

/* "dir/name.gz" if it exists, else "dir/name"; the .gz name when neither does (for the
 * message). */
static char *find_file(const char *dir, const char *name)
{
    size_t len = strlen(dir) + strlen(name) + 8;
    char *p = malloc(len);
    if (!p) return NULL;
    snprintf(p, len, "%s/%s.gz", dir, name);
    if (access(p, R_OK) == 0) return p;
    snprintf(p, len, "%s/%s", dir, name);
    if (access(p, R_OK) == 0) return p;
    snprintf(p, len, "%s/%s.gz", dir, name);
    return p;
}

/* Opens an IDX file, checks its magic and reads its dimensions (ndim of them). */
static deftsim_status open_idx(const char *path, uint32_t magic, uint32_t ndim, uint32_t *dims,
                               gzFile *out)
{
    *out = NULL;
    gzFile f = gzopen(path, "rb");
    if (!f)
        return deftsim_error_set(DEFTSIM_E_INPUT, "%s: cannot open: %s", path,
                                 errno ? strerror(errno) : "zlib could not open it");
    unsigned char hdr[4 + 4 * 3];
    size_t hlen = 4 + 4 * (size_t)ndim;
    deftsim_status st = read_exact(f, path, hdr, hlen, 0, "the IDX header");
    if (st) {
        gzclose(f);
        return st;
    }
    uint32_t m = be32(hdr);
    if (m != magic) {
        gzclose(f);
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "%s: magic number 0x%08x, expected 0x%08x (an IDX file of "
                                 "unsigned bytes with %u dimension%s)",
                                 path, m, magic, ndim, ndim == 1 ? "" : "s");
    }
    for (uint32_t d = 0; d < ndim; d++) dims[d] = be32(hdr + 4 + 4 * d);
    *out = f;
    return DEFTSIM_OK;
}

void deftsim_dataset_free(deftsim_dataset *d)
{
    if (!d) return;
    free(d->pixels);
    free(d->labels);
    free(d->images_path);
    free(d->labels_path);
    free(d);
}

deftsim_status deftsim_dataset_load(const char *dir, deftsim_split split, uint32_t limit,
                                    deftsim_dataset **out)
{
    *out = NULL;
    const char *prefix = split == DEFTSIM_SPLIT_TRAIN ? "train" : "t10k";
    char iname[64], lname[64];
    snprintf(iname, sizeof iname, "%s-images-idx3-ubyte", prefix);
    snprintf(lname, sizeof lname, "%s-labels-idx1-ubyte", prefix);
    deftsim_dataset *d = calloc(1, sizeof *d);
    if (!d || !(d->images_path = find_file(dir, iname)) || !(d->labels_path = find_file(dir, lname))) {
        deftsim_dataset_free(d);
        return deftsim_error_nomem("dataset");
    }
    gzFile fi = NULL, fl = NULL;
    uint32_t idims[3] = {0}, ldims[1] = {0};
    deftsim_status st;
    if ((st = open_idx(d->images_path, IDX_MAGIC_U8_3D, 3, idims, &fi))) goto fail;
    if ((st = open_idx(d->labels_path, IDX_MAGIC_U8_1D, 1, ldims, &fl))) goto fail;
    if (idims[0] == 0 || idims[0] > IDX_MAX_COUNT || idims[1] == 0 || idims[1] > IDX_MAX_SIDE ||
        idims[2] == 0 || idims[2] > IDX_MAX_SIDE) {
        st = deftsim_error_set(DEFTSIM_E_INPUT,
                               "%s: dimensions %u x %u x %u: expected 1 to %u images of 1 to %u "
                               "pixels a side",
                               d->images_path, idims[0], idims[1], idims[2], IDX_MAX_COUNT,
                               IDX_MAX_SIDE);
        goto fail;
    }
    if (ldims[0] != idims[0]) {
        st = deftsim_error_set(DEFTSIM_E_INPUT, "%s: %u labels, but %s holds %u images",
                               d->labels_path, ldims[0], d->images_path, idims[0]);
        goto fail;
    }
    d->count = limit && limit < idims[0] ? limit : idims[0];
    d->rows = idims[1];
    d->cols = idims[2];
    size_t npix = (size_t)d->count * d->rows * d->cols;
    if (!(d->pixels = malloc(npix)) || !(d->labels = malloc(d->count))) {
        st = deftsim_error_nomem("dataset: %u images", d->count);
        goto fail;
    }
    if ((st = read_exact(fi, d->images_path, d->pixels, npix, 16, "the pixels"))) goto fail;
    if ((st = read_exact(fl, d->labels_path, d->labels, d->count, 8, "the labels"))) goto fail;
    uint32_t top = 0;
    for (uint32_t i = 0; i < d->count; i++) {
        if (d->labels[i] == 255) {
            st = deftsim_error_set(DEFTSIM_E_INPUT, "%s: byte %u: label 255 (at most 254 classes)",
                                   d->labels_path, 8 + i);
            goto fail;
        }
        if (d->labels[i] > top) top = d->labels[i];
    }
    d->classes = top + 1;
    gzclose(fi);
    gzclose(fl);
    *out = d;
    return DEFTSIM_OK;
fail:
    if (fi) gzclose(fi);
    if (fl) gzclose(fl);
    deftsim_dataset_free(d);
    return st;
}

static void put_image(const deftsim_dataset *d, uint32_t i, float *x)
{
    const size_t px = (size_t)d->rows * d->cols;
    const uint8_t *p = d->pixels + (size_t)i * px;
    const float scale = 1.0f / (255.0f * DEFTSIM_FMNIST_STD);
    const float shift = DEFTSIM_FMNIST_MEAN / DEFTSIM_FMNIST_STD;
    for (size_t j = 0; j < px; j++) x[j] = (float)p[j] * scale - shift;
}

void deftsim_dataset_batch(const deftsim_dataset *d, const uint32_t *idx, uint32_t B, float *x,
                           uint8_t *y)
{
    const size_t px = (size_t)d->rows * d->cols;
    for (uint32_t b = 0; b < B; b++) {
        put_image(d, idx[b], x + b * px);
        y[b] = d->labels[idx[b]];
    }
}

void deftsim_dataset_range(const deftsim_dataset *d, uint32_t first, uint32_t B, float *x,
                           uint8_t *y)
{
    const size_t px = (size_t)d->rows * d->cols;
    for (uint32_t b = 0; b < B; b++) {
        put_image(d, first + b, x + b * px);
        y[b] = d->labels[first + b];
    }
}
