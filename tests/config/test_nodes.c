/* test_nodes.c - the [network] keys of multi-GPU nodes and the presets (suite fast): presets
 * resolve to their table's values; a key set in the file or by --set wins over the preset; a
 * preset changed by --set (as deftsim sweep --vary does on a loaded scenario) replaces the
 * earlier one's keys; nic_bandwidth follows bandwidth until set; the resolved INI reads back
 * equal; the manifest's JSON leaves the node keys null at one GPU a node; the simulation's
 * parameters; messages that name the key. (Bad files: tests/config/bad/network_*.ini.) */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deftsim_config.h"

static const char *const base = "[gradients]\nmodel = resnet18_cifar10\n[network]\n";

static deftsim_config *parse(const char *network, const char *const *ov, size_t nov)
{
    char text[1024];
    snprintf(text, sizeof text, "%s%s", base, network);
    deftsim_config *c = NULL;
    cr_assert_eq(deftsim_config_parse(text, "x.ini", ov, nov, &c), DEFTSIM_OK, "%s",
                 deftsim_error_message());
    return c;
}

static const char *parse_fails(const char *network, const char *const *ov, size_t nov)
{
    char text[1024];
    snprintf(text, sizeof text, "%s%s", base, network);
    deftsim_config *c = NULL;
    cr_expect_eq(deftsim_config_parse(text, "x.ini", ov, nov, &c), DEFTSIM_E_INPUT, "parsed: %s",
                 network);
    deftsim_config_free(c);
    return deftsim_error_message();
}

Test(config_nodes, defaults_are_one_gpu_a_node)
{
    deftsim_config *c = parse("", NULL, 0);
    cr_expect_eq(c->network.preset, 0);
    cr_expect_eq(c->network.gpus_per_node, 1);
    cr_expect_eq(c->network.intra_fabric, DEFTSIM_INTRA_NVSWITCH);
    cr_expect_eq(c->network.intra_bandwidth, 450e9);
    cr_expect_eq(c->network.intra_latency, 1e-6);
    cr_expect_eq(c->network.nics_per_node, 1);
    cr_expect_eq(c->network.nic_bandwidth, c->network.bandwidth, "nic_bandwidth defaults to bandwidth");
    deftsim_sim_params sp;
    deftsim_config_sim_params(c, 16, 4, &sp);
    cr_expect_eq(sp.gpus_per_node, 1);
    deftsim_config_free(c);
    /* nic_bandwidth follows bandwidth, in the file and by --set, until set itself */
    c = parse("bandwidth = 100Gbps\n", NULL, 0);
    cr_expect_eq(c->network.nic_bandwidth, 12.5e9);
    cr_assert_eq(deftsim_config_apply_override(c, "network.bandwidth=10Gbps"), DEFTSIM_OK);
    cr_expect_eq(c->network.nic_bandwidth, 1.25e9);
    cr_assert_eq(deftsim_config_apply_override(c, "network.nic_bandwidth=1GBps"), DEFTSIM_OK);
    cr_assert_eq(deftsim_config_apply_override(c, "network.bandwidth=20Gbps"), DEFTSIM_OK);
    cr_expect_eq(c->network.nic_bandwidth, 1e9);
    deftsim_config_free(c);
}

/* Every preset's keys are [network] keys that parse, and its name is the key's choice. */
Test(config_nodes, every_preset_resolves)
{
    cr_assert_eq(deftsim_config_preset_count(), 3);
    cr_expect_null(deftsim_config_preset_get(3));
    cr_expect_null(deftsim_config_preset_find("dgx-z"));
    for (size_t i = 0; i < deftsim_config_preset_count(); i++) {
        const deftsim_config_preset *pr = deftsim_config_preset_get(i);
        cr_expect_eq(deftsim_config_preset_find(pr->name), pr);
        char net[128];
        snprintf(net, sizeof net, "preset = %s\n", pr->name);
        deftsim_config *c = parse(net, NULL, 0);
        cr_expect_eq(c->network.preset, (int)i + 1, "%s", pr->name);
        cr_expect_eq(c->network.gpus_per_node, 8, "%s", pr->name);
        cr_expect(pr->title && pr->title[0] && pr->source && pr->source[0] && pr->nkeys >= 5);
        for (size_t k = 0; k < pr->nkeys; k++)
            cr_expect(pr->keys[k].note && pr->keys[k].note[0], "%s %s: no note", pr->name,
                      pr->keys[k].key);
        deftsim_config_free(c);
    }
    deftsim_config *c = parse("preset = dgx-h100\n", NULL, 0);
    cr_expect_eq(c->network.intra_fabric, DEFTSIM_INTRA_NVSWITCH);
    cr_expect_eq(c->network.intra_bandwidth, 450e9);
    cr_expect_eq(c->network.nics_per_node, 8);
    cr_expect_eq(c->network.nic_bandwidth, 50e9); /* 400 Gbit/s */
    cr_expect_eq(c->network.bandwidth, 50e9);
    /* the validated NCCL configuration (docs/NETWORK.md, "NCCL as it runs") */
    cr_expect_eq(c->network.latency, 1e-9, "a token latency: NCCL's per-step latencies hold it");
    cr_expect_eq(c->network.library, DEFTSIM_LIB_NCCL, "GPUs exchange through NCCL");
    cr_expect_eq(c->network.model, DEFTSIM_NET_CM02);
    cr_expect_eq(c->network.crosstraffic, 0);
    cr_expect_eq(c->network.nccl_model, DEFTSIM_NCCL_MODEL_TUNED);
    cr_expect_eq(c->network.nccl_algorithm, DEFTSIM_NCCL_AUTO);
    cr_expect_eq(c->network.nccl_arch, DEFTSIM_NCCL_ARCH_HOPPER);
    cr_expect_eq(c->network.nccl_channels, 16);
    cr_expect(c->network.nccl_launch > 0 && c->network.nccl_nvl_efficiency < 1);
    deftsim_sim_params sp;
    deftsim_config_sim_params(c, 16, 4, &sp);
    cr_expect_eq(sp.gpus_per_node, 8);
    cr_expect_eq(sp.nics_per_node, 8);
    cr_expect_eq(sp.intra_bandwidth, 450e9);
    cr_expect_eq(sp.nic_bandwidth, 50e9);
    deftsim_config_free(c);
    c = parse("preset = dgx1-v100\n", NULL, 0);
    cr_expect_eq(c->network.intra_fabric, DEFTSIM_INTRA_NVLINK_MESH);
    cr_expect_eq(c->network.intra_bandwidth, 25e9);
    cr_expect_eq(c->network.nics_per_node, 4);
    cr_expect_eq(c->network.nic_bandwidth, 12.5e9);
    deftsim_config_free(c);
    c = parse("preset = dgx-a100\n", NULL, 0);
    cr_expect_eq(c->network.intra_bandwidth, 300e9);
    cr_expect_eq(c->network.nic_bandwidth, 25e9);
    deftsim_config_free(c);
}

/* MPI's algorithms on a GPU preset's token latencies would be nearly free of latency: refused,
 * naming the preset and the key, unless the scenario gives both latencies. */
Test(config_nodes, mpi_on_a_gpu_preset_needs_real_latencies)
{
    const char *msg = parse_fails("preset = dgx-h100\nlibrary = mpi\n", NULL, 0);
    cr_expect(strstr(msg, "library = mpi with preset dgx-h100") && strstr(msg, "latency"), "%s",
              msg);
    const char *ov[] = {"network.library=mpi"};
    msg = parse_fails("preset = dgx-a100\nlatency = 2us\n", ov, 1);
    cr_expect(strstr(msg, "intra_latency") != NULL, "%s", msg);
    deftsim_config *c = parse("preset = dgx1-v100\nlibrary = mpi\nlatency = 2us\n"
                              "intra_latency = 1us\n", NULL, 0);
    cr_expect_eq(c->network.library, DEFTSIM_LIB_MPI);
    cr_expect_eq(c->network.latency, 2e-6);
    deftsim_config_free(c);
}

/* A key given in the file, before or after the preset's line, or by --set, wins. */
Test(config_nodes, a_set_key_wins_over_the_preset)
{
    const char *ov[] = {"network.nics_per_node=2"};
    deftsim_config *c = parse("intra_bandwidth = 100GBps\npreset = dgx-h100\nbandwidth = 100Gbps\n", ov, 1);
    cr_expect_eq(c->network.intra_bandwidth, 100e9);
    cr_expect_eq(c->network.bandwidth, 12.5e9);
    cr_expect_eq(c->network.nics_per_node, 2);
    cr_expect_eq(c->network.nic_bandwidth, 50e9, "the preset's NIC, not bandwidth");
    cr_expect_eq(c->network.gpus_per_node, 8);
    deftsim_config_free(c);
    /* the preset itself by --set */
    const char *ov2[] = {"network.preset=dgx-a100"};
    c = parse("preset = dgx-h100\ngpus_per_node = 8\n", ov2, 1);
    cr_expect_eq(c->network.preset, 2);
    cr_expect_eq(c->network.intra_bandwidth, 300e9);
    deftsim_config_free(c);
}

/* On a loaded scenario (deftsim sweep --vary network.preset=...): a new preset replaces the
 * old one's keys; none puts them back to their defaults; keys set by the user stay. */
Test(config_nodes, changing_the_preset_replaces_its_keys)
{
    deftsim_config *c = parse("preset = dgx-h100\nintra_latency = 2us\n", NULL, 0);
    cr_assert_eq(deftsim_config_apply_override(c, "network.preset=dgx1-v100"), DEFTSIM_OK);
    cr_expect_eq(c->network.intra_fabric, DEFTSIM_INTRA_NVLINK_MESH);
    cr_expect_eq(c->network.nics_per_node, 4);
    cr_expect_eq(c->network.intra_latency, 2e-6);
    cr_assert_eq(deftsim_config_check(c), DEFTSIM_OK, "%s", deftsim_error_message());
    deftsim_config *copy;
    cr_assert_eq(deftsim_config_clone(c, &copy), DEFTSIM_OK);
    cr_assert_eq(deftsim_config_apply_override(copy, "network.preset=none"), DEFTSIM_OK);
    cr_expect_eq(copy->network.gpus_per_node, 1);
    cr_expect_eq(copy->network.nics_per_node, 1);
    cr_expect_eq(copy->network.bandwidth, 3.125e9);
    cr_expect_eq(copy->network.nic_bandwidth, 3.125e9);
    cr_expect_eq(copy->network.intra_latency, 2e-6);
    cr_expect_eq(c->network.nics_per_node, 4, "the original is untouched");
    deftsim_config_free(copy);
    deftsim_config_free(c);
}

/* The resolved INI (deftsim config) holds the preset's values and reads back equal. */
Test(config_nodes, resolved_ini_reads_back_equal)
{
    deftsim_config *c = parse("preset = dgx-h100\nnics_per_node = 4\n", NULL, 0);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    cr_assert(f);
    cr_assert_eq(deftsim_config_to_ini(c, f), DEFTSIM_OK);
    fclose(f);
    cr_expect(strstr(buf, "\npreset = dgx-h100\n") && strstr(buf, "\ngpus_per_node = 8\n") &&
                  strstr(buf, "\nnics_per_node = 4\n") && strstr(buf, "\nintra_fabric = nvswitch\n"),
              "%s", buf);
    deftsim_config *back = NULL;
    cr_assert_eq(deftsim_config_parse(buf, "back.ini", NULL, 0, &back), DEFTSIM_OK, "%s",
                 deftsim_error_message());
    cr_expect(deftsim_config_equal(c, back));
    free(buf);
    deftsim_config_free(back);
    deftsim_config_free(c);
}

/* The manifest's record: with one GPU a node the node keys shaped nothing and are null. */
Test(config_nodes, json_nulls_the_node_keys_at_one_gpu)
{
    deftsim_config *c = parse("", NULL, 0);
    json_t *j = deftsim_config_to_json(c), *net = json_object_get(j, "network");
    cr_expect_str_eq(json_string_value(json_object_get(net, "preset")), "none");
    cr_expect_eq(json_integer_value(json_object_get(net, "gpus_per_node")), 1);
    cr_expect(json_is_null(json_object_get(net, "intra_bandwidth")));
    cr_expect(json_is_null(json_object_get(net, "nics_per_node")));
    cr_expect(json_is_null(json_object_get(net, "nic_bandwidth")));
    json_decref(j);
    deftsim_config_free(c);
    c = parse("preset = dgx-a100\n", NULL, 0);
    j = deftsim_config_to_json(c);
    net = json_object_get(j, "network");
    cr_expect_str_eq(json_string_value(json_object_get(net, "intra_fabric")), "nvswitch");
    cr_expect_eq(json_real_value(json_object_get(net, "intra_bandwidth")), 300e9);
    cr_expect_eq(json_integer_value(json_object_get(net, "nics_per_node")), 8);
    json_decref(j);
    deftsim_config_free(c);
}

Test(config_nodes, bad_node_keys_name_the_key)
{
    cr_expect_str_eq(parse_fails("gpus_per_node = 4\nnics_per_node = 5\n", NULL, 0),
                     "x.ini:5: [network] nics_per_node: 5 is not in 1 .. gpus_per_node (4)");
    const char *ov[] = {"network.gpus_per_node=2"};
    cr_expect_str_eq(parse_fails("preset = dgx-h100\n", ov, 1),
                     "x.ini:4: [network] preset = dgx-h100, its nics_per_node: 8 is not in 1 .. "
                     "gpus_per_node (2)");
    cr_expect_str_eq(parse_fails("gpus_per_node = 8\nintra_bandwidth = 0\n", NULL, 0),
                     "x.ini:5: [network] intra_bandwidth: 0 (0 bytes/s) is outside (0, 1e+15] bytes/s");
    cr_expect_str_eq(parse_fails("topology = torus\ntopology_params = 2,2\ngpus_per_node = 8\n"
                                 "nics_per_node = 2\n[workers]\ncounts = 32\n",
                                 NULL, 0),
                     "x.ini:5: [network] topology_params: '2,2': 4 hosts, fewer than the 8 NICs "
                     "(4 nodes x 2) (the largest of [workers] counts)");
}

/* [network] preset_file (as `deftsim validate nccl --fit -o` writes it): its keys fill those the
 * scenario leaves at their defaults, ahead of the preset it names; a key the scenario sets
 * wins; a bad line is named by the file and its line. */
static char *write_preset_file(const char *text)
{
    static char path[64];
    snprintf(path, sizeof path, "/tmp/deftsim-presetfile-XXXXXX");
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fputs(text, f);
    fclose(f);
    return path;
}

Test(config_nodes, a_preset_file_fills_ahead_of_its_preset)
{
    char *path = write_preset_file("# fitted\n[network]\npreset = dgx-a100\nnccl_launch = 7us\n"
                                   "nccl_step_scale = 0.9\n");
    char net[256];
    snprintf(net, sizeof net, "preset_file = %s\nnccl_step_scale = 2\n", path);
    deftsim_config *c = parse(net, NULL, 0);
    cr_expect_eq(c->network.preset, 2, "the file names dgx-a100");
    cr_expect_eq(c->network.gpus_per_node, 8, "the preset's node keys");
    cr_expect_eq(c->network.nic_bandwidth, 25e9, "dgx-a100's 200 Gb/s NICs");
    cr_expect_float_eq(c->network.nccl_launch, 7e-6, 1e-12, "the file's figure, not the preset's");
    cr_expect_eq(c->network.nccl_step_scale, 2, "the scenario's key wins");
    deftsim_config_free(c);
    /* the scenario's own preset wins over the file's */
    snprintf(net, sizeof net, "preset = dgx-h100\npreset_file = %s\n", path);
    c = parse(net, NULL, 0);
    cr_expect_eq(c->network.preset, 1);
    cr_expect_float_eq(c->network.nccl_launch, 7e-6, 1e-12);
    deftsim_config_free(c);
    remove(path);

    path = write_preset_file("[network]\nnccl_launch = 7us\nnccl_lunch = 3us\n");
    snprintf(net, sizeof net, "preset_file = %s\n", path);
    char want[160];
    snprintf(want, sizeof want, "%s:3: [network] nccl_lunch: no such key", path);
    cr_expect_str_eq(parse_fails(net, NULL, 0), want);
    remove(path);
    path = write_preset_file("[train]\nlr = 1\n");
    snprintf(net, sizeof net, "preset_file = %s\n", path);
    snprintf(want, sizeof want, "%s:1: section [train]: a preset file holds [network] keys only", path);
    cr_expect_str_eq(parse_fails(net, NULL, 0), want);
    remove(path);
}
