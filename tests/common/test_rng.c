/* test_rng.c - common/deftsim_rng.h against fixed outputs: splitmix64's published first value
 * for seed 0, xoshiro256** seeded by splitmix64 (the values the generators it replaced in
 * cmd_bench.c, the kernel tests and tests/gpu produced), the conversions to doubles and the
 * summaries' FNV-1a. A change to any of them changes data, seeds and selections. */
#include <criterion/criterion.h>

#include <stdint.h>

#include "deftsim_rng.h"

Test(rng, splitmix64)
{
    cr_expect_eq(deftsim_splitmix64(0), 0xe220a8397b1dcdafull);
    cr_expect_eq(deftsim_splitmix64(1234567), 0x599ed017fb08fc85ull);
    cr_expect_eq(deftsim_splitmix64(~0ull), 0xe4d971771b652c20ull);
    uint64_t s = 1234567;
    cr_expect_eq(deftsim_splitmix64_next(&s), 0x599ed017fb08fc85ull);
    cr_expect_eq(s, 1234567 + DEFTSIM_RNG_GOLDEN);
    cr_expect_eq(deftsim_splitmix64_next(&s), 0x2c73f08458540fa5ull);
}

Test(rng, xoshiro256)
{
    static const uint64_t want[4] = {0x2e889d996c587cd1ull, 0xaa472b3b0563da19ull,
                                     0x6a9b7e766177852full, 0x8a2b9779988e7a1bull};
    deftsim_xoshiro256 r;
    deftsim_xoshiro256_seed(&r, 0x5eed2024u);
    for (int i = 0; i < 4; i++) cr_expect_eq(deftsim_xoshiro256_next(&r), want[i], "output %d", i);
    deftsim_xoshiro256_seed(&r, 0);
    cr_expect_eq(deftsim_xoshiro256_next(&r), 0x99ec5f36cb75f2b4ull);
    cr_expect_eq(deftsim_xoshiro256_next(&r), 0xbf6e1f784956452aull);
}

Test(rng, unit_intervals)
{
    cr_expect_eq(deftsim_rng_unit(0), 0.0);
    cr_expect_eq(deftsim_rng_open(0), 1.0 / 9007199254740992.0);
    cr_expect_eq(deftsim_rng_unit(~0ull), 1.0 - 1.0 / 9007199254740992.0);
    cr_expect_eq(deftsim_rng_open(~0ull), 1.0);
    cr_expect_eq(deftsim_rng_unit(1ull << 63), 0.5);
}

Test(rng, fnv1a64)
{
    cr_expect_eq(deftsim_fnv1a64(""), 0x14650fb0739d0383ull);
    cr_expect_eq(deftsim_fnv1a64("a"), 0x44bd8ad473cd9906ull);
    cr_expect_eq(deftsim_fnv1a64("deftsim"), 0x3143d1db1b919ed9ull);
}
