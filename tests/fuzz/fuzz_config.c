/* fuzz_config.c - scenario files with --set overrides.
 *
 * Input: INI text, optionally followed by a line "%%" and then one "section.key=value"
 * override per line (at most 16). Parses and checks it as deftsim_config_parse does for
 * `deftsim run --set ...`; for a valid configuration, checks that deftsim_config_to_ini reads
 * back into an equal configuration, that a clone is equal, and that the JSON form builds.
 *
 * A last override "network.simulate=0" is always added: with simulate = 1 and topology = file,
 * the check has SimGrid load the platform file in a forked child (deftsim_sim_check_platform),
 * and SimGrid is not fuzzed here (a child of a libFuzzer process that SimGrid aborts would
 * also write a crash file of its own). */
#include <jansson.h>

#include "deftsim_config.h"
#include "fuzz_util.h"

#define MAX_OVERRIDES 16 /* from the input; one more is added */

static deftsim_config *reparse(const deftsim_config *cfg)
{
    char *ini = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&ini, &len);
    if (!f) abort();
    deftsim_status st = deftsim_config_to_ini(cfg, f);
    if (fclose(f) != 0) abort();
    FUZZ_CHECK(st == DEFTSIM_OK, "deftsim_config_to_ini: %s", deftsim_error_message());
    deftsim_config *back = NULL;
    st = deftsim_config_parse(ini, "fuzz.ini", NULL, 0, &back);
    FUZZ_CHECK(st == DEFTSIM_OK, "the printed configuration does not read back: %s\n%s",
               deftsim_error_message(), ini);
    FUZZ_CHECK(deftsim_config_equal(cfg, back), "printed and read back, not equal:\n%s", ini);
    free(ini);
    return back;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_strndup(data, size);
    const char *overrides[MAX_OVERRIDES + 1];
    size_t n = 0;
    char *sep = NULL;
    if (strncmp(text, "%%\n", 3) == 0) sep = text;
    else if ((sep = strstr(text, "\n%%\n"))) sep++;
    if (sep) {
        *sep = '\0';
        char *p = sep + 3;
        while (*p && n < MAX_OVERRIDES) {
            char *nl = strchr(p, '\n');
            if (nl) *nl = '\0';
            overrides[n++] = p;
            if (!nl) break;
            p = nl + 1;
        }
    }
    overrides[n++] = "network.simulate=0";
    deftsim_config *cfg = NULL;
    if (deftsim_config_parse(text, "fuzz.ini", overrides, n, &cfg) == DEFTSIM_OK) {
        FUZZ_CHECK(deftsim_config_check(cfg) == DEFTSIM_OK, "parsed, but the check fails: %s",
                   deftsim_error_message());
        deftsim_config *back = reparse(cfg);
        deftsim_config *copy = NULL;
        FUZZ_CHECK(deftsim_config_clone(cfg, &copy) == DEFTSIM_OK, "clone: %s",
                   deftsim_error_message());
        FUZZ_CHECK(deftsim_config_equal(cfg, copy), "a clone differs");
        json_t *j = deftsim_config_to_json(cfg);
        FUZZ_CHECK(j != NULL, "to_json: %s", deftsim_error_message());
        char *js = json_dumps(j, JSON_COMPACT);
        free(js);
        json_decref(j);
        deftsim_config_free(copy);
        deftsim_config_free(back);
        deftsim_config_free(cfg);
    }
    free(text);
    return 0;
}
