/* fuzz_platform.c - the [network] section (platform settings) inside an otherwise valid
 * scenario, through everything deftsim derives and checks before SimGrid starts.
 *
 * Input: the text after the "[network]" header and its "simulate = 0" line (so that a user's
 * platform_file is not loaded by SimGrid in a child process, deftsim_sim_check_platform, which
 * the scenario check does when simulating) of a fixed scenario (a built-in model with
 * 11 million parameters, so any worker count up to 2^20 fits); it may open further sections,
 * e.g. "[workers]" to vary the worker counts. For a scenario that parses, each worker count P
 * gets the simulation parameters (deftsim_config_sim_params) and the platform's shape
 * (deftsim_sim_platform_shape: topology parameters derived or checked, host count); for the
 * largest P the generated SimGrid platform XML is written to a scratch file
 * (deftsim_sim_write_platform). A user's platform_file is checked for readability only here;
 * SimGrid parses it in a child process, which is not started here. */
#include <inttypes.h>

#include "deftsim_config.h"
#include "deftsim_sim.h"
#include "fuzz_util.h"

static const char prefix[] =
    "[scenario]\nname = fuzz\noutput = fuzz-out\niterations = 1\n"
    "[gradients]\nsource = synthetic\nmodel = resnet18_cifar10\n"
    "[network]\nsimulate = 0\n";

static void shape(const deftsim_config *cfg, uint32_t P, int write)
{
    deftsim_sim_params sp;
    deftsim_config_sim_params(cfg, P, 4, &sp);
    char tp[128];
    uint64_t hosts = 0;
    deftsim_status st = deftsim_sim_platform_shape(&sp, tp, sizeof tp, &hosts);
    /* The config's own check ran the largest P: every smaller P of the list must fit too. */
    FUZZ_CHECK(st == DEFTSIM_OK, "P = %u: the config check passed, the shape fails: %s", P,
               deftsim_error_message());
    if (sp.topology == DEFTSIM_TOPO_FILE) {
        FUZZ_CHECK(hosts == 0 && tp[0] == '\0', "topology = file: shape %s, %" PRIu64 " hosts", tp,
                   hosts);
        return;
    }
    FUZZ_CHECK(hosts >= P, "P = %u: %" PRIu64 " hosts", P, hosts);
    if (write) {
        static char path[512];
        if (!path[0]) snprintf(path, sizeof path, "%s/platform.xml", fuzz_scratch());
        FUZZ_CHECK(deftsim_sim_write_platform(&sp, path) == DEFTSIM_OK, "write_platform: %s",
                   deftsim_error_message());
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(sizeof prefix + size);
    if (!text) abort();
    memcpy(text, prefix, sizeof prefix - 1);
    memcpy(text + sizeof prefix - 1, data, size);
    text[sizeof prefix - 1 + size] = '\0';
    deftsim_config *cfg = NULL;
    if (deftsim_config_parse(text, "fuzz.ini", NULL, 0, &cfg) == DEFTSIM_OK) {
        size_t n = cfg->workers.ncounts;
        for (size_t i = 0; i < n; i++)
            if (i < 16 || i + 16 >= n) shape(cfg, (uint32_t)cfg->workers.counts[i], i + 1 == n);
        deftsim_config_free(cfg);
    }
    free(text);
    return 0;
}
