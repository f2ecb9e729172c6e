/* fuzz_profile.c - device profiles (deftsim_profile_parse) as a run reads a user's file; for a
 * profile that parses, checks that its predictions are finite and never negative, and that
 * writing it and reading it back gives the same coefficients. */
#include <math.h>

#include "deftsim_profile.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    deftsim_profile p, q;
    if (deftsim_profile_parse((const char *)data, size, "fuzz.csv", &p) != DEFTSIM_OK) return 0;
    static const size_t sizes[] = {0, 1, 1000, 100000000};
    for (size_t op = 0; op < DEFTSIM_KOP_COUNT; op++)
        for (size_t i = 0; i < 4; i++) {
            deftsim_kcall c = {(deftsim_kop)op, sizes[i], sizes[3 - i], sizes[i] / 10};
            double t = deftsim_profile_predict(&p, &c);
            FUZZ_CHECK(isfinite(t) || isinf(t), "op %zu: prediction %g", op, t);
            FUZZ_CHECK(t >= 0, "op %zu: negative prediction %g", op, t);
        }
    char path[512];
    snprintf(path, sizeof path, "%s/p.csv", fuzz_scratch());
    FUZZ_CHECK(deftsim_profile_write(path, &p) == DEFTSIM_OK, "write: %s", deftsim_error_message());
    FUZZ_CHECK(deftsim_profile_load(path, &q) == DEFTSIM_OK, "read back: %s",
               deftsim_error_message());
    for (size_t op = 0; op < DEFTSIM_KOP_COUNT; op++)
        for (size_t t = 0; t < DEFTSIM_PTERM_COUNT; t++)
            FUZZ_CHECK(q.ops[op].coef[t] == p.ops[op].coef[t], "op %zu term %zu changed", op, t);
    FUZZ_CHECK(q.threads == p.threads && q.cache_bytes == p.cache_bytes, "keys changed");
    return 0;
}
