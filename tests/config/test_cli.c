/* test_cli.c - `deftsim config` end to end: exit codes, what goes to stdout and stderr. */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli_run.h"
#include "deftsim_config.h"
#include "deftsim_util.h"

typedef deftsim_test_run run_result;

/* Runs $DEFTSIM_EXE with args (NULL-terminated) in the source tree's folder rel. */
static run_result run_in(const char *rel, const char *const *args)
{
    const char *root = getenv("DEFTSIM_SOURCE_ROOT");
    cr_assert(root, "DEFTSIM_SOURCE_ROOT must be set (meson test does)");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/%s", root, rel);
    return deftsim_test_cli(dir, args);
}

#define RUN(rel, ...) run_in(rel, (const char *const[]){__VA_ARGS__, NULL})

static void done(run_result *r)
{
    free(r->out);
    free(r->err);
}

Test(cli_config, prints_a_config_that_reads_back)
{
    run_result r = RUN(".", "config", "scenarios/example.ini");
    cr_assert_eq(r.rc, 0, "stderr: %s", r.err);
    cr_expect_str_empty(r.err);
    deftsim_config *printed, *loaded;
    cr_assert_eq(deftsim_config_parse(r.out, "stdout", NULL, 0, &printed), DEFTSIM_OK, "%s\n%s",
                 deftsim_error_message(), r.out);
    cr_assert_eq(chdir(getenv("DEFTSIM_SOURCE_ROOT")), 0);
    cr_assert_eq(deftsim_config_load("scenarios/example.ini", NULL, 0, &loaded), DEFTSIM_OK);
    cr_expect(deftsim_config_equal(printed, loaded));
    deftsim_config_free(printed);
    deftsim_config_free(loaded);
    done(&r);
}

Test(cli_config, json_and_options_after_the_scenario)
{
    run_result r = RUN(".", "config", "scenarios/example.ini", "--json", "--set", "workers.counts=2..8",
                       "-s", "device.threads=4");
    cr_assert_eq(r.rc, 0, "stderr: %s", r.err);
    json_error_t e;
    json_t *j = json_loads(r.out, 0, &e);
    cr_assert(j, "stdout is not JSON: %s\n%s", e.text, r.out);
    cr_expect_eq(json_array_size(json_object_get(json_object_get(j, "workers"), "counts")), 3);
    cr_expect_eq(json_integer_value(json_object_get(json_object_get(j, "device"), "threads")), 4);
    json_decref(j);
    done(&r);
}

Test(cli_config, bad_file_exits_2_with_the_message)
{
    run_result r = RUN("tests/config/bad", "config", "density_too_large.ini");
    cr_expect_eq(r.rc, 2);
    cr_expect_str_empty(r.out);
    cr_expect_str_eq(r.err, "deftsim: input error: density_too_large.ini:4: [sparsify] densities: "
                            "1.5 is outside (0, 1]\n");
    done(&r);
    r = RUN("tests/config/bad", "config", "no-such-file.ini");
    cr_expect_eq(r.rc, 2);
    cr_expect(strstr(r.err, "no-such-file.ini: cannot open"), "%s", r.err);
    done(&r);
}

Test(cli_config, bad_override_exits_2)
{
    run_result r = RUN(".", "config", "--set", "sparsify.densities=2", "scenarios/example.ini");
    cr_expect_eq(r.rc, 2);
    cr_expect_str_eq(r.err, "deftsim: input error: --set sparsify.densities: 2 is outside (0, 1]\n");
    done(&r);
    r = RUN(".", "config", "scenarios/example.ini", "--set", "nodot=1");
    cr_expect_eq(r.rc, 2);
    cr_expect_str_eq(r.err, "deftsim: usage error: --set nodot: no section (expected section.key=value)\n");
    done(&r);
}

Test(cli_config, usage)
{
    run_result r = RUN(".", "config");
    cr_expect_eq(r.rc, 2);
    cr_expect(strstr(r.err, "missing SCENARIO"), "%s", r.err);
    done(&r);
    r = RUN(".", "config", "a.ini", "b.ini");
    cr_expect_eq(r.rc, 2);
    done(&r);
    r = RUN(".", "config", "--frobnicate", "scenarios/example.ini");
    cr_expect_eq(r.rc, 2);
    done(&r);
    r = RUN(".", "config", "--help");
    cr_expect_eq(r.rc, 0);
    cr_expect(strstr(r.out, "usage: deftsim config"), "%s", r.out);
    done(&r);
    r = RUN(".", "help", "config");
    cr_expect_eq(r.rc, 0);
    cr_expect(strstr(r.out, "usage: deftsim config"), "%s", r.out);
    done(&r);
}

Test(cli_config, keys_lists_the_schema)
{
    run_result r = RUN(".", "config", "--keys");
    cr_assert_eq(r.rc, 0, "%s", r.err);
    char *text = malloc(strlen(r.out) + 2);
    sprintf(text, "\n%s", r.out);
    for (size_t i = 0; i < deftsim_config_key_count(); i++) {
        const deftsim_config_keyinfo *k = deftsim_config_key(i);
        char line[256];
        snprintf(line, sizeof line, "\n%s.%s = %s\n", k->section, k->key,
                 !k->dflt ? "(derived)" : k->dflt[0] ? k->dflt : "(unset)");
        cr_expect(strstr(text, line), "--keys lacks %s", line + 1);
    }
    free(text);
    done(&r);
}

/* The presets: listed, printed as [network] lines that read back as a scenario's, the
 * scenario showing them resolved; an unknown name is bad input naming the known ones. */
Test(cli_config, presets_listed_printed_and_resolved)
{
    run_result r = RUN(".", "config", "--presets");
    cr_assert_eq(r.rc, 0, "stderr: %s", r.err);
    cr_expect(strstr(r.out, "dgx-h100 ") && strstr(r.out, "dgx-a100 ") && strstr(r.out, "dgx1-v100 "),
              "%s", r.out);
    done(&r);
    r = RUN(".", "config", "--preset", "dgx-a100");
    cr_assert_eq(r.rc, 0, "stderr: %s", r.err);
    cr_expect(strstr(r.out, "\n[network]\n") && strstr(r.out, "\nnics_per_node = 8\n") &&
                  strstr(r.out, "\nintra_bandwidth = 300GBps\n") && strstr(r.out, "# source: "),
              "%s", r.out);
    char text[16384];
    snprintf(text, sizeof text, "[gradients]\nmodel = resnet18_cifar10\n%s", r.out);
    deftsim_config *c;
    cr_assert_eq(deftsim_config_parse(text, "preset.ini", NULL, 0, &c), DEFTSIM_OK, "%s",
                 deftsim_error_message());
    cr_expect_eq(c->network.gpus_per_node, 8);
    cr_expect_eq(c->network.nic_bandwidth, 25e9);
    deftsim_config_free(c);
    done(&r);
    /* Every preset's printout reads back (its notes wrapped within a scenario's line length). */
    for (size_t i = 0; i < deftsim_config_preset_count(); i++) {
        const char *name = deftsim_config_preset_get(i)->name;
        r = RUN(".", "config", "--preset", name);
        cr_assert_eq(r.rc, 0, "stderr: %s", r.err);
        cr_assert_lt(strlen(r.out) + 64, sizeof text, "%s: %zu bytes", name, strlen(r.out));
        snprintf(text, sizeof text, "[gradients]\nmodel = resnet18_cifar10\n%s", r.out);
        c = NULL;
        cr_expect_eq(deftsim_config_parse(text, "preset.ini", NULL, 0, &c), DEFTSIM_OK, "%s: %s",
                     name, deftsim_error_message());
        if (c) deftsim_config_free(c);
        c = NULL;
        done(&r);
    }
    r = RUN(".", "config", "scenarios/deft_testbed.ini");
    cr_assert_eq(r.rc, 0, "stderr: %s", r.err);
    cr_expect(strstr(r.out, "\ngpus_per_node = 8\n") && strstr(r.out, "\npreset = dgx1-v100\n"),
              "%s", r.out);
    done(&r);
    r = RUN(".", "config", "--preset", "dgx-b9");
    cr_expect_eq(r.rc, 2);
    cr_expect_str_empty(r.out);
    cr_expect_str_eq(r.err, "deftsim: input error: --preset dgx-b9: no such preset (presets: "
                            "dgx-h100, dgx-a100, dgx1-v100)\n");
    done(&r);
}
