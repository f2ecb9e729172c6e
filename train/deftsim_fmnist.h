/* deftsim_fmnist.h - image classification data in IDX files (Fashion-MNIST, MNIST).
 *
 * The IDX format (LeCun's MNIST files, also used by Fashion-MNIST) is a big-endian header,
 * magic 0x00000803 for a 3-D unsigned-byte array (images x rows x columns) or 0x00000801 for
 * a 1-D one (labels), its dimensions as 32-bit integers, then the bytes. Debian's
 * dataset-fashion-mnist installs the gzipped files under /usr/share/datasets/fashion-mnist;
 * they are read through zlib, so plain and gzipped files both work.
 *
 * Pixels are kept as bytes (47 MB for the 60,000 training images instead of 188 MB as
 * floats) and turned into normalised floats per minibatch by deftsim_dataset_batch. */
#ifndef DEFTSIM_FMNIST_H
#define DEFTSIM_FMNIST_H

#include <stddef.h>
#include <stdint.h>

#include "deftsim_error.h"

/* Where dataset-fashion-mnist puts the files. */
#define DEFTSIM_FMNIST_DEFAULT_DIR "/usr/share/datasets/fashion-mnist"

/* Mean and standard deviation of the Fashion-MNIST training pixels scaled to [0, 1]; every
 * split is normalised with the training set's values, as is usual. */
#define DEFTSIM_FMNIST_MEAN 0.2860f
#define DEFTSIM_FMNIST_STD 0.3530f

typedef enum { DEFTSIM_SPLIT_TRAIN, DEFTSIM_SPLIT_TEST } deftsim_split;

typedef struct {
    uint32_t count;       /* images */
    uint32_t rows, cols;  /* 28 x 28 for Fashion-MNIST */
    uint32_t classes;     /* 1 + the largest label */
    uint8_t *pixels;      /* count * rows * cols, row-major per image */
    uint8_t *labels;      /* count */
    char *images_path;    /* the files read, for provenance and messages */
    char *labels_path;
} deftsim_dataset;

/* Reads split's two files from dir: train-images-idx3-ubyte(.gz) and
 * train-labels-idx1-ubyte(.gz), or t10k-... for the test split (the .gz name is tried first).
 * limit > 0 keeps only the first limit images (tests; 0 keeps all). DEFTSIM_E_INPUT names the
 * file and the problem: a missing file, a wrong magic number, dimensions that disagree
 * between images and labels, a label above 254, a file shorter than its header says. */
deftsim_status deftsim_dataset_load(const char *dir, deftsim_split split, uint32_t limit,
                                    deftsim_dataset **out);
void deftsim_dataset_free(deftsim_dataset *d);

/* Writes images idx[0..B-1] as normalised floats ((p / 255 - mean) / std) into x (B * rows *
 * cols floats) and their labels into y. */
void deftsim_dataset_batch(const deftsim_dataset *d, const uint32_t *idx, uint32_t B, float *x,
                           uint8_t *y);

/* The same for the consecutive images first .. first + B - 1. */
void deftsim_dataset_range(const deftsim_dataset *d, uint32_t first, uint32_t B, float *x,
                           uint8_t *y);

#endif
