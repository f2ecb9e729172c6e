/* deftsim_rng.h - the small counter and state generators every floor uses for seeded data:
 * splitmix64 (a 64-bit mixer, also the stepping generator that seeds the others),
 * xoshiro256** seeded by splitmix64, the two conversions to doubles in (0, 1] and [0, 1), and
 * 64-bit FNV-1a for seeds derived from names. All static inline; the same sequences on every
 * build.
 *
 * The header also compiles as CUDA: under nvcc (__CUDACC__) every function is
 * __host__ __device__, so device code draws exactly the host's numbers. */
#ifndef DEFTSIM_RNG_H
#define DEFTSIM_RNG_H

#include <stdint.h>

#ifdef __CUDACC__
#define DEFTSIM_RNG_FN static __host__ __device__ __forceinline__
#else
#define DEFTSIM_RNG_FN static inline
#endif

#define DEFTSIM_RNG_GOLDEN 0x9e3779b97f4a7c15ull

/* splitmix64's output for counter value z: the finaliser applied to z + golden ratio. */
DEFTSIM_RNG_FN uint64_t deftsim_splitmix64(uint64_t z)
{
    z += DEFTSIM_RNG_GOLDEN;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* The splitmix64 generator: returns deftsim_splitmix64(*state) and steps *state by the
 * golden ratio. */
DEFTSIM_RNG_FN uint64_t deftsim_splitmix64_next(uint64_t *state)
{
    uint64_t r = deftsim_splitmix64(*state);
    *state += DEFTSIM_RNG_GOLDEN;
    return r;
}

/* xoshiro256**: 256 bits of state, seeded with four consecutive splitmix64 outputs. */
typedef struct {
    uint64_t s[4];
} deftsim_xoshiro256;

DEFTSIM_RNG_FN uint64_t deftsim_rotl64(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

DEFTSIM_RNG_FN void deftsim_xoshiro256_seed(deftsim_xoshiro256 *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++) r->s[i] = deftsim_splitmix64_next(&seed);
}

DEFTSIM_RNG_FN uint64_t deftsim_xoshiro256_next(deftsim_xoshiro256 *r)
{
    uint64_t *s = r->s, res = deftsim_rotl64(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = deftsim_rotl64(s[3], 45);
    return res;
}

/* The top 53 bits of x as a double in [0, 1). */
DEFTSIM_RNG_FN double deftsim_rng_unit(uint64_t x)
{
    return (double)(x >> 11) * (1.0 / 9007199254740992.0);
}

/* The top 53 bits of x as a double in (0, 1]: never 0, so logarithms stay finite. */
DEFTSIM_RNG_FN double deftsim_rng_open(uint64_t x)
{
    return ((double)(x >> 11) + 1.0) / 9007199254740992.0;
}

/* 64-bit FNV-1a of a NUL-terminated string, with the offset basis 1469598103934665603 (not
 * the published 14695981039346656037): the value the summaries' seeds have always used, kept
 * so that their bootstrap intervals stay the same. */
DEFTSIM_RNG_FN uint64_t deftsim_fnv1a64(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ull;
    }
    return h;
}

#endif
