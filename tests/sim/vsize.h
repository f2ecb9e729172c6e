/* vsize.h - the uneven contributions of the allgatherv checks, shared by the SMPI program and
 * the tests: rank r contributes size * (1 + (r mod 4)) / 4 bytes, rounded down to a multiple
 * of 4 (some ranks a quarter of the size, some all of it). */
#ifndef DEFTSIM_TEST_VSIZE_H
#define DEFTSIM_TEST_VSIZE_H

#include <stdint.h>

static inline uint64_t deftsim_test_vsize(uint64_t size, uint32_t r)
{
    return size * (1 + r % 4) / 4 / 4 * 4;
}

#endif
