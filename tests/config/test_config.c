/* test_config.c - scenario files: good files, every kind of bad file with its exact message,
 * overrides, printing and reading back, JSON, integer lists. */
#include <criterion/criterion.h>

#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "deftsim_config.h"
#include "deftsim_engine.h"
#include "deftsim_gen.h"
#include "deftsim_model.h"
#include "deftsim_sim.h"
#include "deftsim_units.h"
#include "deftsim_util.h"

static void chdir_source(const char *rel)
{
    const char *root = getenv("DEFTSIM_SOURCE_ROOT");
    cr_assert(root, "DEFTSIM_SOURCE_ROOT is not set (run the tests through meson test)");
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", root, rel);
    cr_assert_eq(chdir(path), 0, "cannot enter %s", path);
}

static deftsim_config *load_ok(const char *path, const char *const *ov, size_t nov)
{
    deftsim_config *cfg = NULL;
    deftsim_status st = deftsim_config_load(path, ov, nov, &cfg);
    cr_assert_eq(st, DEFTSIM_OK, "%s: %s", path, deftsim_error_message());
    return cfg;
}

static deftsim_config *parse_ok(const char *text, const char *origin)
{
    deftsim_config *cfg = NULL;
    deftsim_status st = deftsim_config_parse(text, origin, NULL, 0, &cfg);
    cr_assert_eq(st, DEFTSIM_OK, "%s: %s", origin, deftsim_error_message());
    return cfg;
}

/* The text of a failed parse's message. */
static const char *parse_fails(const char *text, const char *origin)
{
    deftsim_config *cfg = NULL;
    deftsim_status st = deftsim_config_parse(text, origin, NULL, 0, &cfg);
    cr_assert_neq(st, DEFTSIM_OK, "%s: parsed, expected an error", origin);
    cr_assert_null(cfg);
    return deftsim_error_message();
}

static char *to_ini(const deftsim_config *cfg)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    cr_assert(f);
    cr_assert_eq(deftsim_config_to_ini(cfg, f), DEFTSIM_OK, "%s", deftsim_error_message());
    fclose(f);
    return buf;
}

static const int64_t pow2_2_64[] = {2, 4, 8, 16, 32, 64};

/* ---- good files ------------------------------------------------------------------------- */

Test(config_good, example_file)
{
    chdir_source(".");
    deftsim_config *c = load_ok("scenarios/example.ini", NULL, 0);
    cr_expect_str_eq(c->scenario.name, "example");
    cr_expect_eq(c->scenario.seed, 1);
    cr_expect_str_eq(c->scenario.output, "results/example");
    cr_expect_eq(c->scenario.iterations, 3);
    cr_expect_eq(c->gradients.source, DEFTSIM_SOURCE_SYNTHETIC);
    cr_expect_str_eq(c->gradients.model, "resnet18_cifar10");
    cr_expect_null(c->gradients.trace);
    cr_expect_eq(c->synthetic.scale_decades, 3);
    cr_expect_eq(c->synthetic.signal, 0.5);
    cr_expect_eq(c->synthetic.tail, 4);
    cr_expect_eq(c->synthetic.drift, 0.01);
    cr_assert_eq(c->sparsify.nmethods, deftsim_method_count());
    for (size_t i = 0; i < deftsim_method_count(); i++) cr_expect_eq(c->sparsify.methods[i], (deftsim_method)i);
    cr_assert_eq(c->sparsify.ndensities, 2);
    cr_expect_eq(c->sparsify.densities[0], 0.01);
    cr_expect_eq(c->sparsify.densities[1], 0.001);
    cr_expect_eq(c->sparsify.index_bytes, 4);
    cr_expect_eq(c->sparsify.value_bytes, 4);
    cr_expect_eq(c->sparsify.wire, DEFTSIM_WIRE_SPEC);
    cr_expect_eq(c->sparsify.error_feedback, DEFTSIM_FEEDBACK_FULL);
    cr_expect_eq(c->sparsify.sampled_workers, 8);
    /* Every method's options at their tables' defaults. */
    for (size_t m = 0; m < deftsim_method_count(); m++) {
        deftsim_method_opts want;
        deftsim_method_opts_default((deftsim_method)m, &want);
        const deftsim_method_opts *got = deftsim_config_method_opts(c, (deftsim_method)m);
        const deftsim_method_desc *d = deftsim_method_get((deftsim_method)m);
        for (size_t j = 0; j < d->noptions; j++)
            cr_expect_eq(deftsim_config_opt(c, d->options[j].key),
                         d->options[j].type == DEFTSIM_OPT_DOUBLE ? want.v[j].d : want.v[j].i,
                         "%s", d->options[j].key);
        cr_expect_eq(memcmp(got, &want, sizeof want), 0, "%s", d->name);
    }
    cr_expect_eq(deftsim_config_opt(c, "cltk_beta"), 0);
    cr_expect_eq(deftsim_config_opt(c, "oktopk_warmup"), 512);
    cr_expect(isnan(deftsim_config_opt(c, "no_such_option")));
    cr_assert_eq(c->workers.ncounts, 6);
    cr_expect_arr_eq(c->workers.counts, pow2_2_64, sizeof pow2_2_64);
    cr_expect_eq(c->device.kind, DEFTSIM_DEVICE_CPU);
    cr_expect_eq(c->device.threads, 1);
    cr_expect_eq(c->engine.memory_budget, 0.8);
    cr_expect_eq(c->network.simulate, 1);
    cr_expect_eq(c->network.topology, DEFTSIM_TOPO_FLAT);
    cr_expect_null(c->network.platform_file);
    cr_expect_null(c->network.topology_params);
    cr_expect_eq(c->network.bandwidth, 3.125e9);
    cr_expect_eq(c->network.latency, 1e-6);
    cr_expect_eq(c->network.backbone_bandwidth, 0);
    cr_expect_eq(c->network.model, DEFTSIM_NET_LV08);
    cr_expect_eq(c->network.crosstraffic, 0);
    cr_expect_eq(c->network.allgather, DEFTSIM_AG_BRUCK);
    cr_expect_eq(c->network.allreduce, DEFTSIM_AR_RABENSEIFNER);
    cr_expect_eq(c->network.bcast, DEFTSIM_BC_BINOMIAL);
    cr_expect_eq(c->network.eager_threshold, 65536);
    cr_expect_eq(c->network.mode, DEFTSIM_SIM_EXACT);
    cr_expect_eq(c->network.compute, DEFTSIM_SIM_COMPUTE_MEASURED);
    cr_expect_eq(c->network.library, DEFTSIM_LIB_MPI);
    cr_expect_eq(c->network.nccl_algorithm, DEFTSIM_NCCL_RING);
    cr_expect_eq(c->network.nccl_channels, 2);
    cr_expect_eq(c->network.nccl_allgatherv, DEFTSIM_NCCL_AGV_PAD);
    cr_expect_eq(c->network.nccl_buffsize, 4194304);
    cr_expect_str_eq(c->path, "scenarios/example.ini");
    deftsim_config_free(c);
}

/* The example must stay the reference: every key of the schema is written out (not only
 * commented) in its own section. */
Test(config_good, example_documents_every_key)
{
    chdir_source(".");
    char *text;
    cr_assert_eq(deftsim_read_file("scenarios/example.ini", &text, NULL), DEFTSIM_OK);
    for (size_t s = 0; s < deftsim_config_section_count(); s++) {
        char header[64];
        snprintf(header, sizeof header, "\n[%s]\n", deftsim_config_section_name(s));
        cr_expect(strstr(text, header), "example.ini lacks %s", header + 1);
    }
    for (size_t i = 0; i < deftsim_config_key_count(); i++) {
        const deftsim_config_keyinfo *k = deftsim_config_key(i);
        char header[64], line[96];
        snprintf(header, sizeof header, "\n[%s]\n", k->section);
        snprintf(line, sizeof line, "\n%s =", k->key);
        const char *sec = strstr(text, header);
        cr_assert(sec);
        const char *next = strstr(sec + 1, "\n[");
        const char *at = strstr(sec, line);
        cr_expect(at && (!next || at < next), "example.ini: [%s] %s is not set in its section",
                  k->section, k->key);
        cr_expect(k->type && k->type[0] && k->doc && k->doc[0], "%s.%s: no type or doc", k->section,
                  k->key);
    }
    free(text);
}

Test(config_good, minimal_file_is_all_defaults)
{
    chdir_source("tests/config/good");
    deftsim_config *c = load_ok("minimal.ini", NULL, 0), *d;
    cr_assert_eq(deftsim_config_default("minimal", &d), DEFTSIM_OK);
    cr_assert_eq(deftsim_config_apply_override(d, "gradients.model=resnet18_cifar10"), DEFTSIM_OK);
    cr_expect(deftsim_config_equal(c, d));
    deftsim_config_free(c);
    deftsim_config_free(d);
}

Test(config_good, defaults)
{
    deftsim_config *c;
    cr_assert_eq(deftsim_config_default(NULL, &c), DEFTSIM_OK, "%s", deftsim_error_message());
    cr_expect_str_eq(c->scenario.name, "scenario");
    cr_expect_str_eq(c->scenario.output, "results/scenario");
    cr_expect_eq(c->scenario.seed, 1);
    cr_expect_eq(c->scenario.iterations, 3);
    cr_expect_eq(c->gradients.source, DEFTSIM_SOURCE_SYNTHETIC);
    cr_expect_null(c->gradients.model);
    cr_expect_null(c->gradients.trace);
    cr_expect_eq(c->synthetic.scale_decades, 3);
    cr_expect_eq(c->synthetic.signal, 0.5);
    cr_expect_eq(c->synthetic.tail, 4);
    cr_expect_eq(c->synthetic.drift, 0.01);
    cr_expect_eq(c->sparsify.nmethods, 7);
    cr_expect_eq(c->sparsify.methods[6], DEFTSIM_METHOD_DENSE);
    cr_assert_eq(c->sparsify.ndensities, 1);
    cr_expect_eq(c->sparsify.densities[0], 0.01);
    cr_expect_eq(c->sparsify.index_bytes, 4);
    cr_expect_eq(c->sparsify.value_bytes, 4);
    cr_expect_eq(c->sparsify.wire, DEFTSIM_WIRE_SPEC);
    cr_expect_eq(c->sparsify.error_feedback, DEFTSIM_FEEDBACK_FULL);
    cr_expect_eq(c->sparsify.sampled_workers, 8);
    cr_expect_eq(deftsim_config_opt(c, "cltk_charge"), 0); /* leader */
    cr_expect_eq(deftsim_config_opt(c, "cltk_beta"), 0);
    cr_assert_eq(c->workers.ncounts, 6);
    cr_expect_arr_eq(c->workers.counts, pow2_2_64, sizeof pow2_2_64);
    cr_expect_eq(c->device.kind, DEFTSIM_DEVICE_CPU);
    cr_expect_eq(c->device.threads, 1);
    cr_expect_eq(c->engine.memory_budget, 0.8);
    cr_expect_null(c->path);
    /* No model yet: a default config is not runnable. */
    cr_expect_eq(deftsim_config_check(c), DEFTSIM_E_INPUT);
    cr_expect_str_eq(deftsim_error_message(),
                     "[gradients] model: missing (required when source = synthetic)");
    cr_expect_eq(deftsim_config_apply_override(c, "gradients.model=vgg16_cifar10"), DEFTSIM_OK);
    cr_expect_eq(deftsim_config_check(c), DEFTSIM_OK, "%s", deftsim_error_message());
    deftsim_config_free(c);

    cr_expect_eq(deftsim_config_default("a/b", &c), DEFTSIM_E_INPUT);
    cr_expect_str_eq(deftsim_error_message(), "[scenario] name: 'a/b' contains '/'");
}

Test(config_good, trace_source)
{
    chdir_source("tests/config/good");
    deftsim_config *c = load_ok("trace.ini", NULL, 0);
    static const int64_t want[] = {2, 4, 8, 12, 16, 20, 24, 28, 32, 48};
    cr_expect_eq(c->gradients.source, DEFTSIM_SOURCE_TRACE);
    cr_expect_str_eq(c->gradients.trace, "traces/resnet18-run1");
    cr_expect_null(c->gradients.model);
    cr_assert_eq(c->workers.ncounts, 10);
    cr_expect_arr_eq(c->workers.counts, want, sizeof want);
    deftsim_config_free(c);
}

/* BOM, CRLF, '#' and ';' comments, inline comments, indentation, "key: value", spaces in a
 * name, a key-less section. */
Test(config_good, odd_syntax)
{
    chdir_source("tests/config/good");
    deftsim_config *c = load_ok("odd_syntax.ini", NULL, 0);
    cr_expect_str_eq(c->scenario.name, "odd syntax");
    cr_expect_str_eq(c->scenario.output, "results/odd syntax");
    cr_expect_eq(c->scenario.seed, 42);
    cr_expect_str_eq(c->gradients.model, "../bad/tiny.csv");
    cr_assert_eq(c->sparsify.nmethods, 2);
    cr_expect_eq(c->sparsify.methods[0], DEFTSIM_METHOD_DENSE);
    cr_expect_eq(c->sparsify.methods[1], DEFTSIM_METHOD_DEFT);
    cr_assert_eq(c->sparsify.ndensities, 3);
    cr_expect_eq(c->sparsify.densities[0], 0.001);
    cr_expect_eq(c->sparsify.densities[1], 0.5);
    cr_expect_eq(c->sparsify.densities[2], 1.0);
    cr_assert_eq(c->workers.ncounts, 3);
    cr_expect_eq(c->workers.counts[2], 3);
    deftsim_config_free(c);
}

Test(config_good, name_from_file_name)
{
    const char *text = "[gradients]\nmodel = resnet18_cifar10\n";
    deftsim_config *c = parse_ok(text, "runs/sub/my-run.ini");
    cr_expect_str_eq(c->scenario.name, "my-run");
    cr_expect_str_eq(c->scenario.output, "results/my-run");
    deftsim_config_free(c);
    c = parse_ok(text, "sweep.conf");
    cr_expect_str_eq(c->scenario.name, "sweep.conf");
    deftsim_config_free(c);

    /* A file name that cannot be a name is fine when the file names the scenario. */
    char longname[160];
    memset(longname, 'x', 120);
    strcpy(longname + 120, ".ini");
    c = parse_ok("[scenario]\nname = short\n[gradients]\nmodel = resnet18_cifar10\n", longname);
    cr_expect_str_eq(c->scenario.name, "short");
    cr_expect_str_eq(c->scenario.output, "results/short");
    deftsim_config_free(c);
    char want[512];
    snprintf(want, sizeof want,
             "%s: [scenario] name: 'xxxxxxxxxxxxxxxxxxxx...' is longer than 100 characters "
             "(from the file's name; set it in the file)", longname);
    cr_expect_str_eq(parse_fails(text, longname), want);
}

Test(config_good, output_follows_name_until_set)
{
    deftsim_config *c = parse_ok("[scenario]\nname = a\n[gradients]\nmodel = gpt2_small\n", "x.ini");
    cr_expect_str_eq(c->scenario.output, "results/a");
    cr_assert_eq(deftsim_config_apply_override(c, "scenario.name=b"), DEFTSIM_OK);
    cr_expect_str_eq(c->scenario.output, "results/b");
    cr_assert_eq(deftsim_config_apply_override(c, "scenario.output=/tmp/out"), DEFTSIM_OK);
    cr_assert_eq(deftsim_config_apply_override(c, "scenario.name=c"), DEFTSIM_OK);
    cr_expect_str_eq(c->scenario.output, "/tmp/out");
    deftsim_config_free(c);

    c = parse_ok("[scenario]\noutput = elsewhere\n[gradients]\nmodel = gpt2_small\n", "x.ini");
    cr_assert_eq(deftsim_config_apply_override(c, "scenario.name=d"), DEFTSIM_OK);
    cr_expect_str_eq(c->scenario.output, "elsewhere");
    deftsim_config_free(c);
}

/* ---- bad files: tests/config/bad/NAME.ini fails with exactly NAME.expect ---------------- */

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

Test(config_bad, every_file_fails_with_its_message)
{
    chdir_source("tests/config/bad");
    DIR *d = opendir(".");
    cr_assert(d);
    char *names[256];
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l > 4 && strcmp(e->d_name + l - 4, ".ini") == 0) {
            cr_assert(n < 256);
            names[n++] = strdup(e->d_name);
        }
    }
    closedir(d);
    qsort(names, n, sizeof *names, by_name);
    /* The cases named in the issue, and more: a vanished folder must not pass silently. */
    cr_assert_geq(n, 45, "only %zu bad files", n);
    for (size_t i = 0; i < n; i++) {
        char expect_path[300];
        snprintf(expect_path, sizeof expect_path, "%.*s.expect", (int)(strlen(names[i]) - 4), names[i]);
        char *want;
        size_t wl;
        cr_assert_eq(deftsim_read_file(expect_path, &want, &wl), DEFTSIM_OK, "%s", deftsim_error_message());
        while (wl && (want[wl - 1] == '\n' || want[wl - 1] == '\r')) want[--wl] = '\0';
        deftsim_config *cfg = NULL;
        deftsim_status st = deftsim_config_load(names[i], NULL, 0, &cfg);
        cr_expect_eq(st, DEFTSIM_E_INPUT, "%s: status %s, expected input (%s)", names[i],
                     deftsim_status_name(st), deftsim_error_message());
        cr_expect_null(cfg);
        if (st == DEFTSIM_E_INPUT)
            cr_expect_str_eq(deftsim_error_message(), want, "%s:\n  got  %s\n  want %s", names[i],
                             deftsim_error_message(), want);
        deftsim_config_free(cfg);
        free(want);
        free(names[i]);
    }
}

Test(config_bad, nul_byte_and_missing_file)
{
    chdir_source("tests/config/bad");
    deftsim_config *cfg;
    cr_expect_eq(deftsim_config_load("does-not-exist.ini", NULL, 0, &cfg), DEFTSIM_E_INPUT);
    cr_expect_str_eq(deftsim_error_message(), "does-not-exist.ini: cannot open: No such file or directory");
    char tmpl[] = "/tmp/deftsim-config-XXXXXX";
    int fd = mkstemp(tmpl);
    cr_assert(fd >= 0);
    cr_assert_eq(write(fd, "[scenario]\n\0seed = 1\n", 21), 21);
    close(fd);
    cr_expect_eq(deftsim_config_load(tmpl, NULL, 0, &cfg), DEFTSIM_E_INPUT);
    char want[128];
    snprintf(want, sizeof want, "%s: contains a NUL byte", tmpl);
    cr_expect_str_eq(deftsim_error_message(), want);
    unlink(tmpl);
}

/* ---- overrides -------------------------------------------------------------------------- */

Test(config_override, good)
{
    chdir_source("tests/config/good");
    const char *ov[] = {"sparsify.densities = 0.1, 0.2", " workers.counts=4 ", "workers.counts=8..16",
                        "device.kind=cuda", "scenario.seed=18"};
    deftsim_config *c = load_ok("minimal.ini", ov, 5);
    cr_assert_eq(c->sparsify.ndensities, 2);
    cr_expect_eq(c->sparsify.densities[1], 0.2);
    cr_assert_eq(c->workers.ncounts, 2, "a later override replaces an earlier one");
    cr_expect_eq(c->workers.counts[0], 8);
    cr_expect_eq(c->workers.counts[1], 16);
    cr_expect_eq(c->device.kind, DEFTSIM_DEVICE_CUDA);
    cr_expect_eq(c->scenario.seed, 18);
    deftsim_config_free(c);

    /* Switching the source needs the other source's key removed: an empty value unsets it. */
    const char *ov2[] = {"gradients.source=trace", "gradients.trace=/data/t1", "gradients.model="};
    c = load_ok("minimal.ini", ov2, 3);
    cr_expect_eq(c->gradients.source, DEFTSIM_SOURCE_TRACE);
    cr_expect_str_eq(c->gradients.trace, "/data/t1");
    cr_expect_null(c->gradients.model);
    deftsim_config_free(c);
}

Test(config_override, bad)
{
    char long_path[260], long_list[400];
    strcpy(long_path, "scenario.output=");
    memset(long_path + 16, 'p', 200);
    long_path[216] = '\0';
    size_t o = (size_t)snprintf(long_list, sizeof long_list, "workers.counts=");
    for (int i = 0; i < 40; i++) o += (size_t)snprintf(long_list + o, sizeof long_list - o, "%s%d", i ? "," : "", 1000 + 7 * i * i);
    const struct { const char *set; deftsim_status st; const char *msg; } cases[] = {
        {"sparsify.densities0.1", DEFTSIM_E_USAGE, "--set sparsify.densities0.1: expected section.key=value"},
        {"densities=0.1", DEFTSIM_E_USAGE, "--set densities: no section (expected section.key=value)"},
        {"=0.1", DEFTSIM_E_USAGE, "--set : no section (expected section.key=value)"},
        {"sparsify.density=0.1", DEFTSIM_E_USAGE,
         "--set sparsify.density: unknown key (keys: methods, densities, index_bytes, value_bytes, "
         "wire, error_feedback, sampled_workers, deft_norms, deft_norm_precision, topk_ag_mean, "
         "cltk_charge, cltk_beta, oktopk_variant, oktopk_warmup, oktopk_layer_order, "
         "powersgd_rank, powersgd_start_iter, powersgd_min_compression_rate, "
         "powersgd_error_feedback, powersgd_warm_start, powersgd_epsilon, "
         "powersgd_batch_same_shape, lags_rule, lags_backward, lags_gbps, lags_latency_us, "
         "randk_seed, hardthr_lambda, hardthr_exchange, sidco_dist, sidco_stages, "
         "sidco_exchange)"},
        {"sparsifier.densities=0.1", DEFTSIM_E_USAGE,
         "--set sparsifier.densities: unknown section (sections: scenario, gradients, synthetic, "
         "sparsify, workers, device, engine, timing, network, train, compute, execute)"},
        {"network.latency=2s", DEFTSIM_E_INPUT, "--set network.latency: 2s (2 s) is outside [0, 1] s"},
        {"network.bandwith=1Gbps", DEFTSIM_E_USAGE,
         "--set network.bandwith: unknown key (keys: simulate, topology, platform_file, "
         "topology_params, bandwidth, latency, backbone_bandwidth, model, crosstraffic, allgather, "
         "allreduce, bcast, eager_threshold, mode, compute, preset, preset_file, gpus_per_node, intra_fabric, "
         "intra_bandwidth, intra_latency, nics_per_node, nic_bandwidth, library, "
         "nccl_algorithm, nccl_channels, nccl_p2p_channels, nccl_allgatherv, nccl_buffsize, nccl_model, nccl_proto, "
         "nccl_arch, nccl_tuning, nccl_launch, nccl_launch_gpu, nccl_gpus_per_thread, nccl_nvl_efficiency, nccl_net_efficiency, nccl_p2p_net_efficiency, nccl_net_channel_bandwidth, nccl_p2p_channel_bandwidth, nccl_p2p_net_channel_bandwidth, nccl_step_scale, nccl_net_step_scale, nccl_ll_efficiency, nccl_ll128_efficiency, nccl_nvls_step)"},
        {"network.bandwidth=fast", DEFTSIM_E_INPUT,
         "--set network.bandwidth: 'fast' is not a bandwidth (bytes/s, or a number with Bps, "
         "kBps, MBps, GBps, KiBps, MiBps, GiBps, bps, kbps, Mbps, Gbps, ...)"},
        {"network.bandwidth=0Gbps", DEFTSIM_E_INPUT,
         "--set network.bandwidth: 0Gbps (0 bytes/s) is outside (0, 1e+15] bytes/s"},
        {"network.latency=1 us", DEFTSIM_E_INPUT,
         "--set network.latency: '1 us' is not a duration (seconds, or a number with s, ms, us, "
         "ns, ps)"},
        {"network.model=NS3", DEFTSIM_E_INPUT, "--set network.model: 'NS3' is not one of LV08, CM02, SMPI"},
        {"sparsify.densities=1.5", DEFTSIM_E_INPUT, "--set sparsify.densities: 1.5 is outside (0, 1]"},
        {"sparsify.densities=", DEFTSIM_E_INPUT, "--set sparsify.densities: empty list"},
        {"workers.counts=2..1000", DEFTSIM_E_INPUT,
         "--set workers.counts: '2..1000': 1000 is not 2 times a power of two (a..b doubles from a "
         "to b; a..b:step counts in steps)"},
        {"device.kind=tpu", DEFTSIM_E_INPUT, "--set device.kind: 'tpu' is not one of cpu, cuda, profile"},
        {"scenario.name=a ;b", DEFTSIM_E_INPUT,
         "--set scenario.name: 'a ;b' contains ' ;', which a scenario file reads as a comment"},
        {"scenario.name=tab\there", DEFTSIM_E_INPUT, "--set scenario.name: 'tab\there' contains a control character"},
        {long_path, DEFTSIM_E_INPUT,
         "--set scenario.output: value too long: 'output = ...' would need 209 characters, more "
         "than the 198 a scenario file's line holds"},
        {long_list, DEFTSIM_E_INPUT,
         "--set workers.counts: value too long: 'counts = ...' would need 251 characters, more "
         "than the 198 a scenario file's line holds"},
    };
    deftsim_config *c, *before;
    cr_assert_eq(deftsim_config_default("t", &c), DEFTSIM_OK);
    cr_assert_eq(deftsim_config_clone(c, &before), DEFTSIM_OK);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        deftsim_status st = deftsim_config_apply_override(c, cases[i].set);
        cr_expect_eq(st, cases[i].st, "%s: status %s", cases[i].set, deftsim_status_name(st));
        cr_expect_str_eq(deftsim_error_message(), cases[i].msg, "%s:\n  got  %s\n  want %s",
                         cases[i].set, deftsim_error_message(), cases[i].msg);
        cr_expect(deftsim_config_equal(c, before), "%s: a failed override changed the config", cases[i].set);
    }
    deftsim_config_free(c);
    deftsim_config_free(before);
}

/* Cross-field errors name the override that caused them. */
Test(config_override, cross_field_errors_name_the_override)
{
    chdir_source("tests/config/good");
    deftsim_config *c;
    const char *ov[] = {"gradients.model=../bad/tiny.csv", "workers.counts=8, 51"};
    cr_expect_eq(deftsim_config_load("minimal.ini", ov, 2, &c), DEFTSIM_E_INPUT);
    cr_expect_str_eq(deftsim_error_message(),
                     "--set workers.counts: 51 workers exceed the 50 parameters of model tiny");
    const char *ov2[] = {"gradients.source=trace"};
    cr_expect_eq(deftsim_config_load("minimal.ini", ov2, 1, &c), DEFTSIM_E_INPUT);
    cr_expect_str_eq(deftsim_error_message(),
                     "minimal.ini:1: [gradients] trace: missing (required when source = trace)");
    const char *ov3[] = {"gradients.model=nope"};
    cr_expect_eq(deftsim_config_load("minimal.ini", ov3, 1, &c), DEFTSIM_E_INPUT);
    cr_expect_str_eq(deftsim_error_message(),
                     "--set gradients.model: unknown model 'nope' (see 'deftsim models', or give a CSV path)");
    const char *ov4[] = {"sparsify.index_bytes=16"};
    cr_expect_eq(deftsim_config_load("minimal.ini", ov4, 1, &c), DEFTSIM_E_INPUT);
    cr_expect_str_eq(deftsim_error_message(), "--set sparsify.index_bytes: 16 is not one of 4, 8");
    /* wire = reference has no 2-byte values: refused, naming both keys wherever they were
     * set, not sent as 4-byte values behind the user's back. */
    const char *ov7[] = {"sparsify.wire=reference", "sparsify.value_bytes=2"};
    cr_expect_eq(deftsim_config_load("minimal.ini", ov7, 2, &c), DEFTSIM_E_INPUT);
    cr_expect_str_eq(deftsim_error_message(),
                     "--set sparsify.value_bytes: 2, but wire = reference (--set sparsify.wire) "
                     "sends 4-byte (fp32) values, as the authors' code does; set value_bytes = 4, "
                     "or wire = spec");
    const char *ov8[] = {"sparsify.wire=reference", "sparsify.value_bytes=4"};
    cr_expect_eq(deftsim_config_load("minimal.ini", ov8, 2, &c), DEFTSIM_OK, "%s",
                 deftsim_error_message());
    deftsim_config_free(c);
    /* The platform must hold the largest worker count, and the message says it is that. */
    const char *ov5[] = {"network.topology=torus", "network.topology_params=4,4", "workers.counts=4..32"};
    cr_expect_eq(deftsim_config_load("minimal.ini", ov5, 3, &c), DEFTSIM_E_INPUT);
    cr_expect_str_eq(deftsim_error_message(),
                     "--set network.topology_params: '4,4': 16 hosts, fewer than the 32 workers "
                     "(the largest of [workers] counts)");
    const char *ov6[] = {"network.topology=file"};
    cr_expect_eq(deftsim_config_load("minimal.ini", ov6, 1, &c), DEFTSIM_E_INPUT);
    cr_expect_str_eq(deftsim_error_message(),
                     "minimal.ini: [network] platform_file: missing (required when topology = file)");
}

/* deftsim_config_where: the prefix the checks after loading (engine, train) give their
 * messages, the same as the loader's own. */
Test(config_override, where_names_the_origin_of_a_key)
{
    chdir_source("tests/config/good");
    deftsim_config *c;
    const char *text = "[scenario]\niterations = 4\n\n[gradients]\nmodel = ../bad/tiny.csv\n"
                       "[workers]\ncounts = 2\n";
    const char *ov[] = {"sparsify.densities=0.5"};
    cr_assert_eq(deftsim_config_parse(text, "w.ini", ov, 1, &c), DEFTSIM_OK, "%s",
                 deftsim_error_message());
    char buf[300];
    deftsim_config_where(c, "scenario", "iterations", buf, sizeof buf);
    cr_expect_str_eq(buf, "w.ini:2: [scenario] iterations");
    deftsim_config_where(c, "workers", "counts", buf, sizeof buf);
    cr_expect_str_eq(buf, "w.ini:7: [workers] counts");
    /* A key left at its default: its section's line. */
    deftsim_config_where(c, "scenario", "seed", buf, sizeof buf);
    cr_expect_str_eq(buf, "w.ini:1: [scenario] seed");
    /* A default in a section the file does not have: the file alone. */
    deftsim_config_where(c, "network", "bandwidth", buf, sizeof buf);
    cr_expect_str_eq(buf, "w.ini: [network] bandwidth");
    deftsim_config_where(c, "sparsify", "densities", buf, sizeof buf);
    cr_expect_str_eq(buf, "--set sparsify.densities");
    deftsim_config_where(c, "workers", "nope", buf, sizeof buf);
    cr_expect_str_eq(buf, "[workers] nope");
    /* A clone keeps the origins. */
    deftsim_config *k;
    cr_assert_eq(deftsim_config_clone(c, &k), DEFTSIM_OK);
    deftsim_config_where(k, "workers", "counts", buf, sizeof buf);
    cr_expect_str_eq(buf, "w.ini:7: [workers] counts");
    deftsim_config_free(k);
    deftsim_config_free(c);
    /* Built in code: no file. */
    cr_assert_eq(deftsim_config_default(NULL, &c), DEFTSIM_OK);
    deftsim_config_where(c, "workers", "counts", buf, sizeof buf);
    cr_expect_str_eq(buf, "[workers] counts");
    deftsim_config_free(c);
}

/* ---- printing and reading back ---------------------------------------------------------- */

static void round_trip(deftsim_config *c, const char *what)
{
    char *text = to_ini(c);
    deftsim_config *back = NULL;
    deftsim_status st = deftsim_config_parse(text, "printed.ini", NULL, 0, &back);
    cr_assert_eq(st, DEFTSIM_OK, "%s: printed config does not parse: %s\n%s", what,
                 deftsim_error_message(), text);
    cr_expect(deftsim_config_equal(c, back), "%s: read back differs\n%s", what, text);
    char *again = to_ini(back);
    cr_expect_str_eq(again, text, "%s: printing is not stable", what);
    free(text);
    free(again);
    deftsim_config_free(back);
}

Test(config_print, ini_round_trip)
{
    chdir_source("tests/config/good");
    const char *files[] = {"minimal.ini", "trace.ini", "odd_syntax.ini", "network.ini",
                           "../../../scenarios/example.ini"};
    for (size_t i = 0; i < 4; i++) {
        deftsim_config *c = load_ok(files[i], NULL, 0);
        round_trip(c, files[i]);
        deftsim_config_free(c);
    }
    const char *ov[] = {
        "scenario.name=with spaces; and a semicolon",
        "scenario.seed=9223372036854775807",
        "scenario.iterations=1000000",
        "synthetic.tail=0",
        "synthetic.signal=1",
        "synthetic.scale_decades=12.75",
        "synthetic.drift=0",
        "sparsify.methods=dense, gtopk, topk-ag",
        "sparsify.densities=0.3333333333333333, 1e-7, 0.1, 1, 2.2250738585072014e-308",
        "sparsify.index_bytes=8",
        "sparsify.value_bytes=2",
        "sparsify.error_feedback=sampled",
        "sparsify.deft_norms=separate",
        "sparsify.sampled_workers=1048576",
        "sparsify.cltk_charge=all",
        "sparsify.cltk_beta=0.1",
        "workers.counts=1..3:1, 5, 7, 96, 1024..1048576, 1000..1100:25",
        "device.kind=cuda",
        "device.threads=1024",
        "engine.memory_budget=0.1",
        "engine.regen_slots=3",
    };
    deftsim_config *c = load_ok("minimal.ini", ov, sizeof ov / sizeof ov[0]);
    round_trip(c, "every key changed");
    deftsim_config_free(c);
    /* wire = reference sends 4-byte values only, so it is changed on its own. */
    const char *ref[] = {"sparsify.wire=reference", "sparsify.index_bytes=8"};
    c = load_ok("minimal.ini", ref, 2);
    round_trip(c, "wire = reference");
    deftsim_config_free(c);
}

Test(config_print, ini_text)
{
    chdir_source("tests/config/good");
    deftsim_config *c = load_ok("trace.ini", NULL, 0);
    char *text = to_ini(c);
    cr_expect(strstr(text, "\n[gradients]\nsource = trace\nmodel =\ntrace = traces/resnet18-run1\n"), "%s", text);
    cr_expect(strstr(text, "\n[workers]\ncounts = 2..8, 12..32:4, 48\n"), "%s", text);
    cr_expect(strstr(text, "\n[sparsify]\nmethods = deft, topk, topk-ag, cltk, gtopk, dgc, dense\n"
                           "densities = 0.01\n"), "%s", text);
    cr_expect(strstr(text, "\n[network]\n"), "%s", text);
    free(text);
    deftsim_config_free(c);
}

Test(config_print, json)
{
    chdir_source(".");
    deftsim_config *c = load_ok("scenarios/example.ini", NULL, 0);
    json_t *j = deftsim_config_to_json(c);
    cr_assert(j, "%s", deftsim_error_message());
    cr_expect_eq(json_object_size(j), deftsim_config_section_count());
    for (size_t i = 0; i < deftsim_config_key_count(); i++) {
        const deftsim_config_keyinfo *k = deftsim_config_key(i);
        cr_expect(json_object_get(json_object_get(j, k->section), k->key), "JSON lacks %s.%s",
                  k->section, k->key);
    }
    json_t *sc = json_object_get(j, "scenario"), *gr = json_object_get(j, "gradients");
    json_t *sp = json_object_get(j, "sparsify"), *wk = json_object_get(j, "workers");
    cr_expect_str_eq(json_string_value(json_object_get(sc, "name")), "example");
    cr_expect(json_is_integer(json_object_get(sc, "seed")));
    cr_expect_eq(json_integer_value(json_object_get(sc, "seed")), 1);
    cr_expect_eq(json_integer_value(json_object_get(sc, "iterations")), 3);
    cr_expect_str_eq(json_string_value(json_object_get(gr, "source")), "synthetic");
    cr_expect(json_is_null(json_object_get(gr, "trace")));
    json_t *m = json_object_get(sp, "methods");
    cr_assert(json_is_array(m));
    cr_expect_eq(json_array_size(m), deftsim_method_count());
    cr_expect_str_eq(json_string_value(json_array_get(m, 2)), "topk-ag");
    json_t *d = json_object_get(sp, "densities");
    cr_assert_eq(json_array_size(d), 2);
    cr_expect(json_is_real(json_array_get(d, 0)));
    cr_expect_eq(json_real_value(json_array_get(d, 1)), 0.001);
    cr_expect_eq(json_integer_value(json_object_get(sp, "index_bytes")), 4);
    cr_expect_str_eq(json_string_value(json_object_get(sp, "wire")), "spec");
    json_t *w = json_object_get(wk, "counts");
    cr_assert_eq(json_array_size(w), 6);
    cr_expect_eq(json_integer_value(json_array_get(w, 5)), 64);
    cr_expect_eq(json_real_value(json_object_get(json_object_get(j, "engine"), "memory_budget")), 0.8);
    json_t *net = json_object_get(j, "network");
    cr_expect_eq(json_object_size(net), 47);
    cr_expect_str_eq(json_string_value(json_object_get(net, "compute")), "measured");
    cr_expect_str_eq(json_string_value(json_object_get(net, "topology")), "flat");
    cr_expect_eq(json_real_value(json_object_get(net, "bandwidth")), 3.125e9);
    cr_expect_eq(json_real_value(json_object_get(net, "latency")), 1e-6);
    cr_expect(json_is_null(json_object_get(net, "platform_file")));

    /* A dump read back by jansson keeps every double exactly. */
    char *dump = json_dumps(j, 0);
    json_t *back = json_loads(dump, 0, NULL);
    cr_expect(json_equal(j, back), "%s", dump);
    free(dump);
    json_decref(back);
    json_decref(j);
    deftsim_config_free(c);
}

Test(config_print, clone_and_equal)
{
    chdir_source(".");
    deftsim_config *c = load_ok("scenarios/example.ini", NULL, 0), *k;
    cr_assert_eq(deftsim_config_clone(c, &k), DEFTSIM_OK);
    cr_expect(deftsim_config_equal(c, k));
    cr_expect_str_eq(k->path, c->path);
    cr_expect_neq(k->sparsify.densities, c->sparsify.densities);
    cr_assert_eq(deftsim_config_apply_override(k, "sparsify.densities=0.01, 0.002"), DEFTSIM_OK);
    cr_expect_not(deftsim_config_equal(c, k));
    deftsim_config_free(k);
    deftsim_config_free(c);
}

/* ---- names and schema ------------------------------------------------------------------- */

Test(config_names, methods)
{
    /* The registry's names map to their positions and back. */
    const char *const *want = deftsim_method_names();
    size_t n = deftsim_method_count();
    for (size_t i = 0; i < n; i++) {
        cr_expect_str_eq(deftsim_method_name((deftsim_method)i), want[i]);
        deftsim_method m;
        cr_expect_eq(deftsim_method_from_name(want[i], &m), 0);
        cr_expect_eq(m, (deftsim_method)i);
    }
    deftsim_method m;
    cr_expect_eq(deftsim_method_from_name("TopK", &m), -1);
    cr_expect_str_eq(deftsim_method_name((deftsim_method)n), "?");
    cr_expect_str_eq(deftsim_source_name(DEFTSIM_SOURCE_TRACE), "trace");
    cr_expect_str_eq(deftsim_wire_name(DEFTSIM_WIRE_REFERENCE), "reference");
    cr_expect_str_eq(deftsim_feedback_name(DEFTSIM_FEEDBACK_SAMPLED), "sampled");
    cr_expect_str_eq(deftsim_timing_statistic_name(DEFTSIM_TIMING_MEDIAN), "median");
    cr_expect_str_eq(deftsim_timing_cache_name(DEFTSIM_TIMING_COLD), "cold");
    cr_expect_str_eq(deftsim_device_kind_name(DEFTSIM_DEVICE_CUDA), "cuda");
}

Test(config_names, schema)
{
    cr_expect_eq(deftsim_config_section_count(), 12);
    cr_expect_str_eq(deftsim_config_section_name(7), "timing");
    cr_expect_str_eq(deftsim_config_section_name(8), "network");
    cr_expect_str_eq(deftsim_config_section_name(9), "train");
    cr_expect_str_eq(deftsim_config_section_name(10), "compute");
    cr_expect_str_eq(deftsim_config_section_name(11), "execute");
    cr_expect_null(deftsim_config_section_name(12));
    /* 98 + [gradients] params, [synthetic] scales and its 24 kind keys, field, worker_spread and
     * the 18 per-kind signal, tail and field keys, the 9 role keys, + PowerSGD's 7, LAGS's 4,
     * randk's 1, hardthr's 2 and sidco's 3 */
    cr_expect_eq(deftsim_config_key_count(), 179);
    cr_expect_null(deftsim_config_key(deftsim_config_key_count()));
    /* Keys come grouped by section, in section order. */
    size_t s = 0;
    for (size_t i = 0; i < deftsim_config_key_count(); i++) {
        const deftsim_config_keyinfo *k = deftsim_config_key(i);
        while (s < deftsim_config_section_count() && strcmp(deftsim_config_section_name(s), k->section)) s++;
        cr_expect_lt(s, deftsim_config_section_count(), "%s.%s out of section order", k->section, k->key);
    }
}

/* An enum key's type text is its names array's, so a new name shows in --keys and errors. */
Test(config_keys, enum_type_from_names)
{
    const deftsim_config_keyinfo *k = NULL;
    for (size_t i = 0; i < deftsim_config_key_count(); i++) {
        const deftsim_config_keyinfo *c = deftsim_config_key(i);
        if (!strcmp(c->section, "network") && !strcmp(c->key, "allgather")) k = c;
    }
    cr_assert_not_null(k);
    char want[300];
    size_t o = (size_t)snprintf(want, sizeof want, "one of: ");
    for (int i = 0; deftsim_allgather_names[i]; i++)
        o += (size_t)snprintf(want + o, sizeof want - o, "%s%s", i ? ", " : "",
                              deftsim_allgather_names[i]);
    cr_expect_str_eq(k->type, want);
    deftsim_config *cfg = NULL;
    const char *set[] = {"network.allgather=nosuch"};
    cr_assert_neq(deftsim_config_parse("[gradients]\nmodel = resnet18\n", "t.ini", set, 1, &cfg),
                  DEFTSIM_OK);
    cr_expect(strstr(deftsim_error_message(), want + strlen("one of: ")), "%s",
              deftsim_error_message());
}

/* ---- integer lists ---------------------------------------------------------------------- */

static void list_is(const char *text, const int64_t *want, size_t n)
{
    int64_t *v;
    size_t got;
    deftsim_status st = deftsim_parse_int_list(text, 1, 1 << 20, &v, &got);
    cr_assert_eq(st, DEFTSIM_OK, "'%s': %s", text, deftsim_error_message());
    cr_expect_eq(got, n, "'%s': %zu values, want %zu", text, got, n);
    for (size_t i = 0; i < n && i < got; i++)
        cr_expect_eq(v[i], want[i], "'%s'[%zu] = %lld, want %lld", text, i, (long long)v[i], (long long)want[i]);
    free(v);
}

Test(config_lists, parse)
{
    list_is("2..64", pow2_2_64, 6);
    list_is("64, 2..32", pow2_2_64, 6);
    list_is(" 2 , 4,8 ,16..64 ,32", pow2_2_64, 6);
    list_is("2..64, 2..64", pow2_2_64, 6);
    list_is("2..64:62", (const int64_t[]){2, 64}, 2);
    list_is("1..10:3", (const int64_t[]){1, 4, 7, 10}, 4);
    list_is("7..7", (const int64_t[]){7}, 1);
    list_is("3..96", (const int64_t[]){3, 6, 12, 24, 48, 96}, 6);
    list_is("5", (const int64_t[]){5}, 1);
    int64_t *v;
    size_t n;
    cr_expect_eq(deftsim_parse_int_list("-4..-1:1, 0", -10, 10, &v, &n), DEFTSIM_OK);
    cr_expect_eq(n, 5);
    cr_expect_eq(v[0], -4);
    free(v);
    cr_expect_eq(deftsim_parse_int_list("1..1048576:1", 1, 1 << 20, &v, &n), DEFTSIM_E_INPUT);
    cr_expect_str_eq(deftsim_error_message(), "more than 4096 values");
    cr_expect_eq(deftsim_parse_int_list("1..4096:1", 1, 1 << 20, &v, &n), DEFTSIM_OK);
    cr_expect_eq(n, 4096);
    free(v);
    cr_expect_eq(deftsim_parse_int_list("0..8", 0, 10, &v, &n), DEFTSIM_E_INPUT);
    cr_expect_str_eq(deftsim_error_message(), "'0..8': a doubling range must start at 1 or more");
    cr_expect_eq(deftsim_parse_int_list("+4", 0, 10, &v, &n), DEFTSIM_E_INPUT);
    cr_expect_str_eq(deftsim_error_message(), "'+4' is not an integer");
    cr_expect_eq(deftsim_parse_int_list("99999999999999999999", 0, 10, &v, &n), DEFTSIM_E_INPUT);
    cr_expect_str_eq(deftsim_error_message(), "'99999999999999999999' is not an integer");
    cr_expect_eq(deftsim_parse_int_list("1..8:-1", 0, 10, &v, &n), DEFTSIM_E_INPUT);
    cr_expect_str_eq(deftsim_error_message(), "'1..8:-1': step must be positive");
    cr_expect_eq(deftsim_parse_int_list(" ", 0, 10, &v, &n), DEFTSIM_E_INPUT);
    cr_expect_str_eq(deftsim_error_message(), "empty list");
    cr_expect_eq(deftsim_parse_int_list("1,", 0, 10, &v, &n), DEFTSIM_E_INPUT);
    cr_expect_str_eq(deftsim_error_message(), "empty item in list '1,'");
    cr_expect_null(v);
}

static void format_is(const int64_t *v, size_t n, const char *want)
{
    char buf[256];
    size_t len = deftsim_format_int_list(v, n, buf, sizeof buf);
    cr_expect_str_eq(buf, want);
    cr_expect_eq(len, strlen(want));
    /* snprintf-like: the length needed, even when the buffer is too small. */
    char small[4];
    cr_expect_eq(deftsim_format_int_list(v, n, small, sizeof small), len);
    cr_expect_eq(deftsim_format_int_list(v, n, NULL, 0), len);
}

Test(config_lists, format)
{
    format_is(pow2_2_64, 6, "2..64");
    format_is((const int64_t[]){1, 2, 3}, 3, "1..3:1");
    format_is((const int64_t[]){1, 5}, 2, "1, 5");
    format_is((const int64_t[]){2, 4}, 2, "2, 4");
    format_is((const int64_t[]){3, 6, 12, 100, 200, 300, 301}, 7, "3..12, 100..300:100, 301");
    format_is(NULL, 0, "");
}

/* Random sorted lists print to text that parses back to the same list. */
Test(config_lists, format_parse_round_trip)
{
    uint64_t seed = 20240611, x = seed;
    for (int round = 0; round < 2000; round++) {
        int64_t v[64];
        size_t n = 0;
        int64_t cur = 0;
        size_t len = 1 + (size_t)(round % 40);
        for (size_t i = 0; i < len; i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            unsigned r = (unsigned)(x >> 33);
            /* Mix doubling steps, constant steps and jumps so that every run kind appears. */
            int64_t next = r % 3 == 0 ? (cur ? 2 * cur : 1) : r % 3 == 1 ? cur + 4 : cur + 1 + (int64_t)(r % 97);
            if (next > (1 << 20)) break;
            v[n++] = cur = next;
        }
        char text[2048];
        cr_assert_lt(deftsim_format_int_list(v, n, text, sizeof text), sizeof text);
        if (n == 0) continue;
        int64_t *back;
        size_t nb;
        cr_assert_eq(deftsim_parse_int_list(text, 1, 1 << 20, &back, &nb), DEFTSIM_OK,
                     "seed %llu round %d: '%s': %s", (unsigned long long)seed, round, text,
                     deftsim_error_message());
        cr_expect_eq(nb, n, "seed %llu round %d: '%s'", (unsigned long long)seed, round, text);
        cr_expect_arr_eq(back, v, n * sizeof *v, "seed %llu round %d: '%s'", (unsigned long long)seed, round, text);
        free(back);
    }
}

/* ---- [network] ---------------------------------------------------------------------------- */

/* Every [network] key away from its default, units included. */
Test(config_network, every_key_parses)
{
    chdir_source("tests/config/good");
    deftsim_config *c = load_ok("network.ini", NULL, 0);
    cr_expect_eq(c->network.simulate, 0);
    cr_expect_eq(c->network.topology, DEFTSIM_TOPO_FATTREE);
    cr_expect_null(c->network.platform_file);
    cr_expect_str_eq(c->network.topology_params, "2;8,4;1,8;1,1");
    cr_expect_eq(c->network.bandwidth, 1.25e9);
    cr_expect_eq(c->network.latency, 5e-6);
    cr_expect_eq(c->network.backbone_bandwidth, 0);
    cr_expect_eq(c->network.model, DEFTSIM_NET_CM02);
    cr_expect_eq(c->network.crosstraffic, 1);
    cr_expect_eq(c->network.allgather, DEFTSIM_AG_RING);
    cr_expect_eq(c->network.allreduce, DEFTSIM_AR_RECURSIVE_DOUBLING);
    cr_expect_eq(c->network.bcast, DEFTSIM_BC_SCATTER_RING_ALLGATHER);
    cr_expect_eq(c->network.eager_threshold, 0);
    cr_expect_eq(c->network.mode, DEFTSIM_SIM_APPROXIMATE);
    cr_expect_eq(c->network.compute, DEFTSIM_SIM_COMPUTE_NONE);
    deftsim_sim_params sp;
    deftsim_config_sim_params(c, 32, 2, &sp);
    cr_expect_eq(sp.P, 32);
    cr_expect_eq(sp.elem_bytes, 2);
    cr_expect_eq(sp.topology, DEFTSIM_TOPO_FATTREE);
    cr_expect_str_eq(sp.topology_params, "2;8,4;1,8;1,1");
    cr_expect_eq(sp.bandwidth, 1.25e9);
    cr_expect_eq(sp.latency, 5e-6);
    cr_expect_eq(sp.model, DEFTSIM_NET_CM02);
    cr_expect_eq(sp.crosstraffic, 1);
    cr_expect_eq(sp.allgather, DEFTSIM_AG_RING);
    cr_expect_eq(sp.eager_threshold, 0);
    cr_expect_eq(sp.envelope_bytes, 16);
    cr_expect_eq(sp.mode, DEFTSIM_SIM_APPROXIMATE);
    cr_expect_eq(sp.compute, DEFTSIM_SIM_COMPUTE_NONE);
    cr_expect_eq(c->network.library, DEFTSIM_LIB_NCCL);
    cr_expect_eq(sp.library, DEFTSIM_LIB_NCCL);
    cr_expect_eq(sp.nccl_algorithm, DEFTSIM_NCCL_HIERARCHICAL);
    cr_expect_eq(sp.nccl_channels, 8);
    cr_expect_eq(sp.nccl_allgatherv, DEFTSIM_NCCL_AGV_BCAST);
    cr_expect_eq(sp.nccl_buffsize, 1048576);
    cr_expect_eq(sp.gpus_per_node, 1);
    /* Printed in base units with the unit, and read back the same. */
    char *text = to_ini(c);
    cr_expect(strstr(text, "\nbandwidth = 1.25e+09Bps\nlatency = 5e-06s\nbackbone_bandwidth = 0Bps\n"),
              "%s", text);
    free(text);
    deftsim_config_free(c);
}

/* The units SimGrid takes, and their bytes/s and seconds. */
Test(config_network, units)
{
    const struct { const char *text; double bw; } bws[] = {
        {"1e9", 1e9},         {"3125000000Bps", 3.125e9}, {"25Gbps", 3.125e9}, {"1GBps", 1e9},
        {"1GiBps", 1073741824.0}, {"100Mbps", 12.5e6},    {"8bps", 1},         {"2kBps", 2000},
        {"1Kibps", 128},     {"0.5TBps", 5e11}};
    for (size_t i = 0; i < sizeof bws / sizeof bws[0]; i++) {
        double v = -1;
        cr_expect_eq(deftsim_parse_bandwidth(bws[i].text, &v), 0, "%s", bws[i].text);
        cr_expect_eq(v, bws[i].bw, "%s: %.17g, want %.17g", bws[i].text, v, bws[i].bw);
    }
    const struct { const char *text; double s; } ds[] = {
        {"0", 0}, {"1e-6", 1e-6}, {"1us", 1e-6}, {"50ns", 50e-9}, {"0.2ms", 0.2e-3}, {"2s", 2},
        {"3ps", 3e-12}};
    for (size_t i = 0; i < sizeof ds / sizeof ds[0]; i++) {
        double v = -1;
        cr_expect_eq(deftsim_parse_duration(ds[i].text, &v), 0, "%s", ds[i].text);
        cr_expect_eq(v, ds[i].s, "%s: %.17g, want %.17g", ds[i].text, v, ds[i].s);
    }
    const char *bad[] = {"", "Gbps", "1 Gbps", "1gbps", "1Gbit", "1e999Bps", "nan", "1us"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        double v;
        cr_expect_eq(deftsim_parse_bandwidth(bad[i], &v), -1, "'%s' parsed as %g", bad[i], v);
    }
    const char *bad_d[] = {"", "us", "1 us", "1sec", "1m", "inf", "1Gbps"};
    for (size_t i = 0; i < sizeof bad_d / sizeof bad_d[0]; i++) {
        double v;
        cr_expect_eq(deftsim_parse_duration(bad_d[i], &v), -1, "'%s' parsed as %g", bad_d[i], v);
    }
}

/* Derived shapes hold every P; given ones are checked against the largest. */
Test(config_network, platform_shapes)
{
    deftsim_sim_params p;
    deftsim_sim_params_default(&p);
    char tp[128];
    uint64_t hosts;
    const struct { deftsim_topology t; uint32_t P; const char *params; uint64_t hosts; } cases[] = {
        {DEFTSIM_TOPO_FLAT, 7, "", 7},
        {DEFTSIM_TOPO_FATTREE, 16, "1;16;1;1", 16},
        {DEFTSIM_TOPO_FATTREE, 100, "2;32,4;1,32;1,1", 128},
        {DEFTSIM_TOPO_TORUS, 64, "4,4,4", 64},
        {DEFTSIM_TOPO_TORUS, 12, "3,2,2", 12},
        {DEFTSIM_TOPO_TORUS, 1024, "16,8,8", 1024},
        {DEFTSIM_TOPO_TORUS, 13, "3,3,2", 18},     /* a prime: a near-cube with spare hosts */
        {DEFTSIM_TOPO_DRAGONFLY, 20, "1,1;2,1;4,1;4", 32},
        {DEFTSIM_TOPO_DRAGONFLY, 200, "4,1;4,1;4,1;4", 256},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        p.topology = cases[i].t;
        p.P = cases[i].P;
        cr_assert_eq(deftsim_sim_platform_shape(&p, tp, sizeof tp, &hosts), DEFTSIM_OK, "%s",
                     deftsim_error_message());
        cr_expect_str_eq(tp, cases[i].params, "%s P=%u", deftsim_topology_name(cases[i].t), cases[i].P);
        cr_expect_eq(hosts, cases[i].hosts, "%s P=%u: %llu hosts", deftsim_topology_name(cases[i].t),
                     cases[i].P, (unsigned long long)hosts);
    }
    const struct { deftsim_topology t; const char *params; const char *msg; } bad[] = {
        {DEFTSIM_TOPO_FLAT, "4", "topology_params '4': a flat cluster has no parameters"},
        {DEFTSIM_TOPO_TORUS, "4;4", "topology_params '4;4': a torus is its dimensions, 'x,y,...' (e.g. 4,4,4)"},
        {DEFTSIM_TOPO_TORUS, "4,0,4", "topology_params '4,0,4': a torus is its dimensions, 'x,y,...' (e.g. 4,4,4)"},
        {DEFTSIM_TOPO_TORUS, "2,2", "topology_params '2,2': 4 hosts, fewer than the 8 workers"},
        {DEFTSIM_TOPO_FATTREE, "2;4;1,4;1,1",
         "topology_params '2;4;1,4;1,1': a fat tree is 'levels;children,...;parents,...;links,...' "
         "with one positive count per level in each list (e.g. 2;32,4;1,32;1,1)"},
        {DEFTSIM_TOPO_DRAGONFLY, "2,1;4,1;4",
         "topology_params '2,1;4,1;4': a dragonfly is 'groups,links;chassis,links;routers,links;hosts' "
         "(e.g. 2,1;4,1;4,1;4)"},
        {DEFTSIM_TOPO_TORUS, "4096,4096", "topology_params '4096,4096': more than 4194304 hosts"},
    };
    p.P = 8;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        p.topology = bad[i].t;
        p.topology_params = bad[i].params;
        cr_expect_eq(deftsim_sim_platform_shape(&p, tp, sizeof tp, &hosts), DEFTSIM_E_INPUT, "%s",
                     bad[i].params);
        cr_expect_str_eq(deftsim_error_message(), bad[i].msg);
    }
}

/* A train scenario need not name [gradients] model: deftsim train's gradients come from
 * [train] model's network. deftsim run and sweep on the same text still need one. */
Test(config, train_needs_no_gradients_model)
{
    const char *text = "[scenario]\niterations = 4\n[train]\nmodel = mlp\n";
    deftsim_config *c = NULL;
    cr_expect_eq(deftsim_config_parse_train(text, "t.ini", NULL, 0, &c), DEFTSIM_OK, "%s",
                 deftsim_error_message());
    cr_assert_not_null(c);
    cr_expect_null(c->gradients.model);
    /* For run: the model is still required, and the message says so. */
    cr_expect_eq(deftsim_config_check(c), DEFTSIM_E_INPUT);
    cr_expect_str_eq(deftsim_error_message(),
                     "t.ini: [gradients] model: missing (required when source = synthetic)");
    deftsim_config_free(c);
    cr_expect_eq(deftsim_config_parse(text, "t.ini", NULL, 0, &c), DEFTSIM_E_INPUT);
    /* A model that is set is still checked, and a trace without source = trace is refused. */
    const char *bad = "[gradients]\nmodel = nosuchmodel_xyz\n[train]\nmodel = mlp\n";
    cr_expect_eq(deftsim_config_parse_train(bad, "b.ini", NULL, 0, &c), DEFTSIM_E_INPUT);
    cr_expect(strstr(deftsim_error_message(), "b.ini:2: [gradients] model"), "%s",
              deftsim_error_message());
    const char *tr = "[gradients]\ntrace = traces/x\n";
    cr_expect_eq(deftsim_config_parse_train(tr, "c.ini", NULL, 0, &c), DEFTSIM_E_INPUT);
    cr_expect(strstr(deftsim_error_message(), "set, but source = synthetic"), "%s",
              deftsim_error_message());
}

/* [scenario] iterations with source = trace: left unset, every iteration of the trace (the
 * shipped 2-iteration trace runs, a 5-iteration one runs all 5); set, the value given (a
 * smaller one is kept, a larger one is refused when the engine opens the trace). */
Test(config, trace_iterations_default_to_the_whole_trace)
{
    const char *root = getenv("DEFTSIM_SOURCE_ROOT");
    cr_assert(root, "DEFTSIM_SOURCE_ROOT is not set (run the tests through meson test)");
    char text[4400], tmpl[] = "/tmp/deftsim-trace-iters-XXXXXX", dir[4200];
    cr_assert(mkdtemp(tmpl));
    snprintf(text, sizeof text, "[gradients]\nsource = trace\ntrace = %s/traces/fmnist_cnn_p4\n"
             "[workers]\ncounts = 2\n", root);
    deftsim_config *c = parse_ok(text, "two.ini");
    cr_expect_eq(c->scenario.iterations, 2, "the shipped trace holds 2 iterations");
    deftsim_engine *e = NULL;
    cr_expect_eq(deftsim_engine_new(c, NULL, &e), DEFTSIM_OK, "%s", deftsim_error_message());
    deftsim_engine_free(e);
    deftsim_config_free(c);

    /* A 5-iteration trace of a small model, as deftsim trace gen writes it. */
    deftsim_model *m;
    const char *table = "index,name,shape,numel\n0,w,64x8,512\n1,b,64,64\n";
    cr_assert_eq(deftsim_model_parse_csv(table, strlen(table), "m.csv", "m", &m), DEFTSIM_OK);
    deftsim_gen_params gp;
    deftsim_gen_params_default(&gp);
    deftsim_gen *g;
    cr_assert_eq(deftsim_gen_new(m, &gp, &g), DEFTSIM_OK);
    snprintf(dir, sizeof dir, "%s/five", tmpl);
    cr_assert_eq(deftsim_gen_write_trace(g, dir, 4, 5), DEFTSIM_OK, "%s", deftsim_error_message());
    deftsim_gen_free(g);
    deftsim_model_free(m);
    snprintf(text, sizeof text, "[gradients]\nsource = trace\ntrace = %s\n[workers]\ncounts = 2\n",
             dir);
    c = parse_ok(text, "five.ini");
    cr_expect_eq(c->scenario.iterations, 5, "not cut to the default 3");
    cr_assert_eq(deftsim_engine_new(c, NULL, &e), DEFTSIM_OK, "%s", deftsim_error_message());
    deftsim_engine_free(e);
    /* Back to the synthetic source: the key's default again. */
    cr_assert_eq(deftsim_config_apply_override(c, "gradients.source=synthetic"), DEFTSIM_OK);
    cr_assert_eq(deftsim_config_apply_override(c, "gradients.trace="), DEFTSIM_OK);
    cr_expect_eq(c->scenario.iterations, 3);
    deftsim_config_free(c);

    /* Set: kept when the trace holds it, refused when it does not. */
    const char *three[] = {"scenario.iterations=3"}, *six[] = {"scenario.iterations=6"};
    snprintf(text + strlen(text), sizeof text - strlen(text), "[scenario]\n");
    cr_assert_eq(deftsim_config_parse(text, "five.ini", three, 1, &c), DEFTSIM_OK);
    cr_expect_eq(c->scenario.iterations, 3);
    deftsim_config_free(c);
    cr_assert_eq(deftsim_config_parse(text, "five.ini", six, 1, &c), DEFTSIM_OK);
    cr_expect_eq(c->scenario.iterations, 6);
    cr_expect_eq(deftsim_engine_new(c, NULL, &e), DEFTSIM_E_INPUT);
    char want[4600];
    snprintf(want, sizeof want, "--set scenario.iterations: 6, but trace %s holds 5 iterations", dir);
    cr_expect_str_eq(deftsim_error_message(), want);
    deftsim_config_free(c);
    /* The INI a resolved scenario prints reads back the same (the derived count included). */
    c = parse_ok(text, "five.ini");
    char *ini = to_ini(c);
    deftsim_config *back = parse_ok(ini, "back.ini");
    cr_expect(deftsim_config_equal(c, back));
    free(ini);
    deftsim_config_free(back);
    deftsim_config_free(c);
    char cmd[4400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpl);
    cr_expect_eq(system(cmd), 0);
}

/* [gradients] params: the parameter file fills the [synthetic] keys the scenario leaves unset,
 * the scenario's own and --set's win, and a later params replaces what an earlier one set. */
Test(config_good, params_file_fills_unset_synthetic_keys)
{
    chdir_source("tests/config/good");
    deftsim_config *c = load_ok("params.ini", NULL, 0);
    cr_expect_eq(c->synthetic.signal, 0.2);             /* the scenario's */
    cr_expect_eq(c->synthetic.tail, 3.5);               /* the file's */
    cr_expect_eq(c->synthetic.scales, 1);
    cr_expect_eq(c->synthetic.kind_level[DEFTSIM_GEN_KIND_CONV], -2.75);
    cr_expect_eq(c->synthetic.kind_depth[DEFTSIM_GEN_KIND_CONV], -0.5);
    cr_expect_eq(c->synthetic.kind_spread[DEFTSIM_GEN_KIND_CONV], 0.25);
    cr_expect_eq(c->synthetic.kind_size[DEFTSIM_GEN_KIND_CONV], -0.25);
    cr_expect_eq(c->synthetic.kind_size[DEFTSIM_GEN_KIND_LINEAR], 0); /* default */
    cr_expect_eq(c->synthetic.kind_level[DEFTSIM_GEN_KIND_LINEAR], -3.5); /* default */
    cr_expect_eq(c->synthetic.drift, 0.01);
    char w[600];
    deftsim_config_where(c, "synthetic", "tail", w, sizeof w);
    cr_expect_str_eq(w, "params_fit.params: [synthetic] tail (from [gradients] params)");
    deftsim_config_free(c);

    const char *ov[] = {"synthetic.tail=5"};
    c = load_ok("params.ini", ov, 1);
    cr_expect_eq(c->synthetic.tail, 5);
    cr_expect_eq(c->synthetic.scales, 1);
    /* params = none returns the file's keys to the plain defaults (unset, the model table's
     * own set would fill them: config_good::table_default_set_applies_and_none_opts_out). */
    cr_assert_eq(deftsim_config_apply_override(c, "gradients.params=none"), DEFTSIM_OK);
    cr_expect_eq(c->synthetic.scales, 0);
    cr_expect_eq(c->synthetic.kind_level[DEFTSIM_GEN_KIND_CONV], -3.5);
    cr_expect_eq(c->synthetic.tail, 5);
    cr_expect_eq(c->synthetic.signal, 0.2);
    deftsim_config_free(c);
}

/* Every built-in parameter set parses as a parameter file and sets scales = kinds. */
Test(config_good, builtin_params_sets_parse)
{
    cr_assert_geq(deftsim_gen_builtin_params_count(), 2);
    for (size_t i = 0; i < deftsim_gen_builtin_params_count(); i++) {
        deftsim_config *c;
        cr_assert_eq(deftsim_config_default("p", &c), DEFTSIM_OK);
        char set[200];
        snprintf(set, sizeof set, "gradients.params=%s", deftsim_gen_builtin_params_name(i));
        cr_assert_eq(deftsim_config_apply_override(c, set), DEFTSIM_OK, "%s: %s", set,
                     deftsim_error_message());
        cr_expect_eq(c->synthetic.scales, 1, "%s", set);
        deftsim_config_free(c);
    }
}

/* ---- the model tables' default sets (docs/GENERATOR.md, "Default sets") ---------------------- */

/* The [synthetic] section of a scenario of `model` with `params` (NULL: unset) and `extra`
 * lines. */
static deftsim_config *synth(const char *model, const char *params, const char *extra)
{
    char text[1024];
    snprintf(text, sizeof text, "[gradients]\nmodel = %s\n%s%s%s\n%s", model,
             params ? "params = " : "", params ? params : "", params ? "\n" : "",
             extra ? extra : "");
    return parse_ok(text, "defaults.ini");
}

static int same_synthetic(const deftsim_config *a, const deftsim_config *b)
{
    return !memcmp(&a->synthetic, &b->synthetic, sizeof a->synthetic);
}

/* Unset, params is the table's own set: the same keys as naming it, recorded as the table's
 * default, fitted or extrapolated; none keeps the plain defaults; a table without a set too. */
Test(config_good, table_default_set_applies_and_none_opts_out)
{
    deftsim_config *plain, *named, *dflt, *none;
    cr_assert_eq(deftsim_config_default("p", &plain), DEFTSIM_OK);
    struct { const char *model, *set; int fitted; } cases[] = {
        {"resnet18_cifar10", "resnet18_fmnist_p8", 1},
        {"resnet50_imagenet", "resnet18_fmnist_p8", 0},
        {"bert_base_uncased", "bert_small_pydoc_p8", 0},
        {"gpt2_small", "bert_small_pydoc_p8", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        named = synth(cases[i].model, cases[i].set, NULL);
        dflt = synth(cases[i].model, NULL, NULL);
        none = synth(cases[i].model, "none", NULL);
        cr_expect(same_synthetic(named, dflt), "%s: the default differs from naming %s",
                  cases[i].model, cases[i].set);
        cr_expect_eq(dflt->synthetic.scales, 1, "%s", cases[i].model);
        cr_expect(!same_synthetic(dflt, plain), "%s: the plain defaults ran", cases[i].model);
        cr_expect(same_synthetic(none, plain), "%s: params = none is not the plain defaults",
                  cases[i].model);
        deftsim_params_choice ch;
        deftsim_config_params_choice(dflt, &ch);
        cr_expect_eq(ch.why, DEFTSIM_PARAMS_TABLE, "%s", cases[i].model);
        cr_expect_str_eq(ch.set, cases[i].set);
        cr_expect_eq(ch.fitted, cases[i].fitted, "%s", cases[i].model);
        cr_expect(ch.note && *ch.note, "%s: no note", cases[i].model);
        deftsim_config_params_choice(named, &ch);
        cr_expect_eq(ch.why, DEFTSIM_PARAMS_NAMED);
        deftsim_config_params_choice(none, &ch);
        cr_expect_eq(ch.why, DEFTSIM_PARAMS_OFF);
        cr_expect_null(ch.set);
        deftsim_config_free(named);
        deftsim_config_free(dflt);
        deftsim_config_free(none);
    }
    /* Tables of other kinds keep the plain defaults. */
    dflt = synth("lstm3_wikitext2", NULL, NULL);
    cr_expect(same_synthetic(dflt, plain));
    deftsim_params_choice ch;
    deftsim_config_params_choice(dflt, &ch);
    cr_expect_eq(ch.why, DEFTSIM_PARAMS_NO_DEFAULT);
    deftsim_config_free(dflt);
    /* The scenario's own key wins over the set; a key from the set says where it came from. */
    dflt = synth("resnet18_cifar10", NULL, "[synthetic]\ntail = 7\n");
    cr_expect_eq(dflt->synthetic.tail, 7);
    cr_expect_eq(dflt->synthetic.scales, 1);
    char w[600];
    deftsim_config_where(dflt, "synthetic", "signal", w, sizeof w);
    cr_expect_str_eq(w, "resnet18_fmnist_p8: [synthetic] signal (the default set of [gradients] "
                        "model resnet18_cifar10)");
    deftsim_config_free(dflt);
    deftsim_config_free(plain);
}

/* A list of models whose tables have different sets resolves to none in the scenario; setting
 * one model (a sweep's variant) gives it its own set and drops the other's keys. */
Test(config_good, model_list_sets_per_model)
{
    deftsim_config *plain, *bert = synth("bert_base_uncased", NULL, NULL);
    cr_assert_eq(deftsim_config_default("p", &plain), DEFTSIM_OK);
    deftsim_config *res = synth("resnet18_cifar10", NULL, NULL);
    deftsim_config *c = synth("resnet18_cifar10, bert_base_uncased", NULL, "[synthetic]\ndrift = 0.02\n");
    deftsim_params_choice ch;
    deftsim_config_params_choice(c, &ch);
    cr_expect_eq(ch.why, DEFTSIM_PARAMS_PER_MODEL);
    cr_expect_null(ch.set);
    cr_expect_eq(c->synthetic.scales, 0);
    cr_assert_eq(deftsim_config_apply_override(c, "gradients.model=bert_base_uncased"), DEFTSIM_OK);
    cr_expect_eq(c->synthetic.drift, 0.02, "the scenario's own key was lost");
    c->synthetic.drift = bert->synthetic.drift;
    cr_expect(same_synthetic(c, bert), "the BERT variant without BERT's set");
    c->synthetic.drift = 0.02;
    cr_assert_eq(deftsim_config_apply_override(c, "gradients.model=resnet18_cifar10"), DEFTSIM_OK);
    cr_expect_eq(c->synthetic.drift, 0.02, "the scenario's own key was lost");
    c->synthetic.drift = res->synthetic.drift;
    cr_expect(same_synthetic(c, res), "the ResNet variant keeps BERT's keys");
    deftsim_config_free(c);
    /* One set for every table of the list: the set, extrapolated once any table is. */
    c = synth("resnet18_cifar10, resnet50_imagenet", NULL, NULL);
    deftsim_config_params_choice(c, &ch);
    cr_expect_eq(ch.why, DEFTSIM_PARAMS_TABLE);
    cr_expect_str_eq(ch.set, "resnet18_fmnist_p8");
    cr_expect_eq(ch.fitted, 0);
    cr_expect_null(ch.note);
    deftsim_config_free(c);
    /* Unsetting params = none goes back to the table's set. */
    c = synth("resnet18_cifar10", "none", NULL);
    cr_assert_eq(deftsim_config_apply_override(c, "gradients.params="), DEFTSIM_OK);
    cr_expect(same_synthetic(c, res));
    deftsim_config_free(c);
    deftsim_config_free(res);
    deftsim_config_free(bert);
    deftsim_config_free(plain);
}

/* Every manifest embeds the scenario's JSON, which says which set ran and why. */
Test(config_good, json_names_the_set)
{
    struct { const char *model, *params, *set, *why, *fit; } cases[] = {
        {"resnet18_cifar10", NULL, "resnet18_fmnist_p8", "table default", "fitted"},
        {"bert_base_uncased", NULL, "bert_small_pydoc_p8", "table default", "extrapolated"},
        {"resnet18_cifar10", "bert_small_pydoc_p8", "bert_small_pydoc_p8", "named", NULL},
        {"resnet18_cifar10", "none", NULL, "none: params = none", NULL},
        {"ncf_neumf_ml20m", NULL, NULL, "none: no default set for the table", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        deftsim_config *c = synth(cases[i].model, cases[i].params, NULL);
        json_t *j = deftsim_config_to_json(c);
        cr_assert(j);
        json_t *pu = json_object_get(json_object_get(j, "gradients"), "params_used");
        cr_assert(json_is_object(pu), "%s: no params_used", cases[i].model);
        const char *set = json_string_value(json_object_get(pu, "set"));
        if (cases[i].set) cr_expect_str_eq(set, cases[i].set);
        else cr_expect(json_is_null(json_object_get(pu, "set")), "%s: set %s", cases[i].model, set);
        cr_expect_str_eq(json_string_value(json_object_get(pu, "why")), cases[i].why);
        const char *fit = json_string_value(json_object_get(pu, "fit"));
        if (cases[i].fit) cr_expect_str_eq(fit, cases[i].fit);
        else cr_expect_null(fit);
        json_decref(j);
        deftsim_config_free(c);
    }
}

/* The table of default sets names built-in tables and built-in sets only. */
Test(config_good, table_default_sets_exist)
{
    cr_assert_geq(deftsim_gen_table_params_count(), 2);
    for (size_t i = 0; i < deftsim_gen_table_params_count(); i++) {
        const char *set, *note;
        int fitted;
        const char *table = deftsim_gen_table_params_at(i, &set, &fitted, &note);
        deftsim_model *m = NULL;
        cr_expect_eq(deftsim_model_builtin(table, &m), DEFTSIM_OK, "%s: not a built-in table", table);
        if (m) deftsim_model_free(m);
        cr_expect(deftsim_gen_builtin_params(set), "%s: set %s is not built in", table, set);
        cr_expect(note && *note);
    }
    cr_expect_null(deftsim_gen_table_params("traces/models/resnet18_cifar10.csv", NULL, NULL));
}
