/* test_team.c - spread mode's blocks of workers (common/deftsim_team.h): every worker in
 * exactly one rank's contiguous block, the blocks in rank order, sizes within one of each
 * other, deftsim_team_owner the inverse of the blocks; and the operations of one process
 * (no team), which only copy. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "deftsim_team.h"

Test(team, blocks_cover_the_workers_in_order)
{
    for (uint32_t P = 1; P <= 70; P++)
        for (uint32_t R = 1; R <= 17; R++) {
            cr_assert_eq(deftsim_team_first(P, R, 0), 0);
            cr_assert_eq(deftsim_team_first(P, R, R), P);
            uint32_t lo_size = P, hi_size = 0;
            for (uint32_t r = 0; r < R; r++) {
                uint32_t a = deftsim_team_first(P, R, r), b = deftsim_team_first(P, R, r + 1);
                cr_assert_leq(a, b, "P=%u R=%u r=%u", P, R, r);
                if (b - a < lo_size) lo_size = b - a;
                if (b - a > hi_size) hi_size = b - a;
                deftsim_team t = {.rank = r, .size = R};
                uint32_t lo, hi;
                deftsim_team_block(&t, P, &lo, &hi);
                cr_assert(lo == a && hi == b);
                for (uint32_t w = a; w < b; w++)
                    cr_assert_eq(deftsim_team_owner(P, R, w), r, "P=%u R=%u w=%u", P, R, w);
            }
            cr_assert_leq(hi_size - lo_size, 1, "P=%u R=%u", P, R);
        }
    uint32_t lo, hi;
    deftsim_team_block(NULL, 9, &lo, &hi);
    cr_assert(lo == 0 && hi == 9);
    /* Large counts do not overflow. */
    cr_assert_eq(deftsim_team_first(4000000000u, 3, 2), 2666666666u);
    cr_assert_eq(deftsim_team_owner(4000000000u, 3, 3999999999u), 2);
}

Test(team, one_process_copies)
{
    const char msg[] = "seven bytes";
    void *all = NULL;
    uint64_t total = 0;
    cr_assert_eq(deftsim_team_gather_var(NULL, msg, sizeof msg, &all, &total, NULL), DEFTSIM_OK);
    cr_assert_eq(total, sizeof msg);
    cr_assert_eq(memcmp(all, msg, sizeof msg), 0);
    free(all);
    double v = 1.5;
    cr_assert_eq(deftsim_team_chain_in(NULL, &v, sizeof v), DEFTSIM_OK);
    cr_assert_eq(deftsim_team_chain_out(NULL, &v, sizeof v), DEFTSIM_OK);
    cr_assert_eq(deftsim_team_chain_bcast(NULL, &v, sizeof v), DEFTSIM_OK);
    cr_assert_eq(v, 1.5);
}
