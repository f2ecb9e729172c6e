/* deftsim_philox.h - the Philox-4x32-10 counter-based random number generator.
 *
 * Philox (Salmon, Moraes, Dror, Shaw: "Parallel random numbers: as easy as 1, 2, 3", SC 2011)
 * maps a 128-bit counter and a 64-bit key to 128 random bits through 10 rounds of two 32x32->64
 * multiplications, with the key bumped by Weyl constants between rounds. There is no state: the
 * n-th random word of any stream is computed directly from (key, counter). That is what lets
 * deftsim regenerate any element of any worker's synthetic gradient on demand, in any order,
 * on any number of threads, and later on a GPU, with the same bits.
 *
 * Only integer operations, no tables, no libc: these functions compile unchanged as CUDA
 * __host__ __device__ code (define DEFTSIM_PHILOX_QUALIFIER before including this header).
 * Checked against the Random123 known-answer vectors in tests/traces/test_gen.c. */
#ifndef DEFTSIM_PHILOX_H
#define DEFTSIM_PHILOX_H

#include <stdint.h>

#ifndef DEFTSIM_PHILOX_QUALIFIER
#define DEFTSIM_PHILOX_QUALIFIER static inline
#endif

/* Multipliers and Weyl key increments of Philox-4x32 (Salmon et al., table 2). */
#define DEFTSIM_PHILOX_M0 0xD2511F53u
#define DEFTSIM_PHILOX_M1 0xCD9E8D57u
#define DEFTSIM_PHILOX_W0 0x9E3779B9u
#define DEFTSIM_PHILOX_W1 0xBB67AE85u
#define DEFTSIM_PHILOX_ROUNDS 10

typedef struct {
    uint32_t v[4];
} deftsim_philox_ctr;

typedef struct {
    uint32_t v[2];
} deftsim_philox_key;

/* One round: the two products' high halves are mixed with the other two words and the key,
 * their low halves move over, so every output word depends on every input word after a few
 * rounds. */
DEFTSIM_PHILOX_QUALIFIER void deftsim_philox_round(uint32_t x[4], uint32_t k0, uint32_t k1)
{
    uint64_t p0 = (uint64_t)DEFTSIM_PHILOX_M0 * x[0];
    uint64_t p1 = (uint64_t)DEFTSIM_PHILOX_M1 * x[2];
    uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
    uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
    uint32_t y0 = hi1 ^ x[1] ^ k0;
    uint32_t y2 = hi0 ^ x[3] ^ k1;
    x[0] = y0;
    x[1] = lo1;
    x[2] = y2;
    x[3] = lo0;
}

/* Philox-4x32-10 of (ctr, key): four independent uniformly distributed 32-bit words. */
DEFTSIM_PHILOX_QUALIFIER deftsim_philox_ctr deftsim_philox4x32_10(deftsim_philox_ctr ctr,
                                                                 deftsim_philox_key key)
{
    uint32_t k0 = key.v[0], k1 = key.v[1];
    for (int r = 0; r < DEFTSIM_PHILOX_ROUNDS; r++) {
        if (r > 0) {
            k0 += DEFTSIM_PHILOX_W0;
            k1 += DEFTSIM_PHILOX_W1;
        }
        deftsim_philox_round(ctr.v, k0, k1);
    }
    return ctr;
}

/* The same, written on four separate words so callers can keep counters in registers. */
DEFTSIM_PHILOX_QUALIFIER void deftsim_philox4x32_10_words(uint32_t c0, uint32_t c1, uint32_t c2,
                                                         uint32_t c3, uint32_t k0, uint32_t k1,
                                                         uint32_t out[4])
{
    deftsim_philox_ctr c = {{c0, c1, c2, c3}};
    deftsim_philox_key k = {{k0, k1}};
    c = deftsim_philox4x32_10(c, k);
    out[0] = c.v[0];
    out[1] = c.v[1];
    out[2] = c.v[2];
    out[3] = c.v[3];
}

/* A uniform double in [0, 1) from 53 bits of two words. */
DEFTSIM_PHILOX_QUALIFIER double deftsim_philox_u01_double(uint32_t hi, uint32_t lo)
{
    uint64_t bits = ((uint64_t)hi << 21) ^ (uint64_t)(lo >> 11);
    return (double)bits * (1.0 / 9007199254740992.0); /* 2^-53 */
}

#endif
