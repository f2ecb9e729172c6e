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

/* Ok-Topk's split-and-reduce rounds in the tests: the bytes of the message from rank src to
 * rank dst, uneven: size * (1 + (src + 2 dst) mod 4) / 4, a multiple of 4. */
static inline uint64_t deftsim_test_pair_size(uint64_t size, uint32_t src, uint32_t dst, int uneven)
{
    return uneven ? deftsim_test_vsize(size, src + 2 * dst) : size;
}

/* Peers per round of Ok-Topk's split-and-reduce (its `throttle`). */
#define DEFTSIM_TEST_OKTOPK_THROTTLE 4u

#endif
