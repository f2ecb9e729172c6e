/* test_fmnist.c - the IDX reader on Debian's Fashion-MNIST files and on damaged copies. */
#include <criterion/criterion.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <zlib.h>

#include "deftsim_fmnist.h"

/* Fashion-MNIST is balanced: 6,000 training and 1,000 test images per class. */
Test(fmnist, real_files)
{
    deftsim_dataset *tr, *te;
    cr_assert_eq(deftsim_dataset_load(DEFTSIM_FMNIST_DEFAULT_DIR, DEFTSIM_SPLIT_TRAIN, 0, &tr),
                 DEFTSIM_OK, "%s", deftsim_error_message());
    cr_assert_eq(deftsim_dataset_load(DEFTSIM_FMNIST_DEFAULT_DIR, DEFTSIM_SPLIT_TEST, 0, &te),
                 DEFTSIM_OK, "%s", deftsim_error_message());
    cr_expect_eq(tr->count, 60000);
    cr_expect_eq(te->count, 10000);
    cr_expect_eq(tr->rows, 28);
    cr_expect_eq(tr->cols, 28);
    cr_expect_eq(tr->classes, 10);
    uint32_t htr[10] = {0}, hte[10] = {0};
    for (uint32_t i = 0; i < tr->count; i++) htr[tr->labels[i]]++;
    for (uint32_t i = 0; i < te->count; i++) hte[te->labels[i]]++;
    for (int c = 0; c < 10; c++) {
        cr_expect_eq(htr[c], 6000, "class %d: %u training images", c, htr[c]);
        cr_expect_eq(hte[c], 1000, "class %d: %u test images", c, hte[c]);
    }
    /* The normalisation constants are the training set's: mean 0 and std 1 after it. */
    double s = 0, s2 = 0;
    float x[784];
    uint8_t y;
    for (uint32_t i = 0; i < tr->count; i++) {
        deftsim_dataset_range(tr, i, 1, x, &y);
        for (int j = 0; j < 784; j++) {
            s += x[j];
            s2 += (double)x[j] * x[j];
        }
    }
    double N = 784.0 * tr->count, mean = s / N, sd = sqrt(s2 / N - mean * mean);
    cr_expect(fabs(mean) < 1e-3, "normalised mean %g", mean);
    cr_expect(fabs(sd - 1) < 1e-3, "normalised std %g", sd);
    /* batch and range agree. */
    uint32_t idx[3] = {5, 59999, 0};
    float xb[3 * 784], xr[784];
    uint8_t yb[3], yr;
    deftsim_dataset_batch(tr, idx, 3, xb, yb);
    deftsim_dataset_range(tr, 59999, 1, xr, &yr);
    cr_expect(!memcmp(xb + 784, xr, sizeof xr));
    cr_expect_eq(yb[1], yr);
    deftsim_dataset_free(tr);
    deftsim_dataset_free(te);

    deftsim_dataset *lim;
    cr_assert_eq(deftsim_dataset_load(DEFTSIM_FMNIST_DEFAULT_DIR, DEFTSIM_SPLIT_TEST, 100, &lim),
                 DEFTSIM_OK);
    cr_expect_eq(lim->count, 100);
    deftsim_dataset_free(lim);
}

static char dir[64];

static void put_be32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24), p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8), p[3] = (unsigned char)v;
}

/* Writes an IDX file (gzipped when gz is set) with the given header words and body. */
static void write_idx(const char *name, int gz, const uint32_t *words, int nwords,
                      const unsigned char *body, size_t len)
{
    char path[160];
    snprintf(path, sizeof path, "%s/%s%s", dir, name, gz ? ".gz" : "");
    unsigned char hdr[16];
    for (int i = 0; i < nwords; i++) put_be32(hdr + 4 * i, words[i]);
    if (gz) {
        gzFile f = gzopen(path, "wb");
        cr_assert(f);
        gzwrite(f, hdr, (unsigned)(4 * nwords));
        if (len) gzwrite(f, body, (unsigned)len);
        gzclose(f);
    } else {
        FILE *f = fopen(path, "wb");
        cr_assert(f);
        fwrite(hdr, 1, (size_t)(4 * nwords), f);
        if (len) fwrite(body, 1, len, f);
        fclose(f);
    }
}

static void setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/deftsim-idx-XXXXXX");
    cr_assert(mkdtemp(dir));
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_expect_eq(system(cmd), 0);
}

static void expect_error(const char *want)
{
    deftsim_dataset *d = NULL;
    cr_expect_eq(deftsim_dataset_load(dir, DEFTSIM_SPLIT_TEST, 0, &d), DEFTSIM_E_INPUT);
    cr_expect_null(d);
    cr_expect(strstr(deftsim_error_message(), want), "message '%s' lacks '%s'",
              deftsim_error_message(), want);
}

Test(fmnist, damaged_files, .init = setup, .fini = teardown)
{
    unsigned char px[3 * 2 * 2] = {0, 255, 7, 9, 1, 2, 3, 4, 5, 6, 7, 8};
    unsigned char lab[3] = {0, 2, 1};
    uint32_t ih[4] = {0x803, 3, 2, 2}, lh[2] = {0x801, 3};

    expect_error("t10k-images-idx3-ubyte.gz: cannot open");

    /* Plain (not gzipped) files read as well. */
    write_idx("t10k-images-idx3-ubyte", 0, ih, 4, px, sizeof px);
    write_idx("t10k-labels-idx1-ubyte", 0, lh, 2, lab, sizeof lab);
    deftsim_dataset *d;
    cr_assert_eq(deftsim_dataset_load(dir, DEFTSIM_SPLIT_TEST, 0, &d), DEFTSIM_OK, "%s",
                 deftsim_error_message());
    cr_expect_eq(d->count, 3);
    cr_expect_eq(d->classes, 3);
    cr_expect_eq(d->pixels[1], 255);
    deftsim_dataset_free(d);

    /* The .gz name wins over the plain one. */
    uint32_t bad_magic[4] = {0x802, 3, 2, 2};
    write_idx("t10k-images-idx3-ubyte", 1, bad_magic, 4, px, sizeof px);
    expect_error("t10k-images-idx3-ubyte.gz: magic number 0x00000802, expected 0x00000803");

    write_idx("t10k-images-idx3-ubyte", 1, ih, 4, px, sizeof px - 1);
    expect_error("t10k-images-idx3-ubyte.gz: truncated: 12 bytes of the pixels expected from "
                 "byte 16, the file ends at byte 27");

    write_idx("t10k-images-idx3-ubyte", 1, ih, 2, NULL, 0);
    expect_error("t10k-images-idx3-ubyte.gz: truncated: 16 bytes of the IDX header expected from "
                 "byte 0, the file ends at byte 8");

    write_idx("t10k-images-idx3-ubyte", 1, ih, 4, px, sizeof px);
    uint32_t lh4[2] = {0x801, 4};
    write_idx("t10k-labels-idx1-ubyte", 0, lh4, 2, lab, sizeof lab);
    expect_error("t10k-labels-idx1-ubyte: 4 labels, but");

    unsigned char lab255[3] = {0, 255, 1};
    write_idx("t10k-labels-idx1-ubyte", 0, lh, 2, lab255, sizeof lab255);
    expect_error("t10k-labels-idx1-ubyte: byte 9: label 255");

    uint32_t zero[4] = {0x803, 0, 2, 2};
    write_idx("t10k-images-idx3-ubyte", 1, zero, 4, NULL, 0);
    expect_error("dimensions 0 x 2 x 2");
}
