/* cmd_config.c - `deftsim config`: print a scenario's fully resolved configuration. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "deftsim_config.h"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: deftsim config SCENARIO [--set section.key=value]... [--json]\n"
            "       deftsim config --keys\n"
            "\n"
            "Reads a scenario file, applies the overrides, checks everything and prints every key\n"
            "with defaults filled in, as INI that reads back to the same configuration.\n"
            "  -s, --set S.K=V  override key K of section S (repeatable; a later one wins)\n"
            "  -j, --json       print JSON instead, as written into result manifests\n"
            "  -k, --keys       list every key: type, default, meaning\n"
            "  -h, --help       this help\n"
            "\n"
            "scenarios/example.ini documents every key.\n");
}

static void print_keys(void)
{
    for (size_t i = 0; i < deftsim_config_key_count(); i++) {
        const deftsim_config_keyinfo *k = deftsim_config_key(i);
        printf("%s.%s = %s\n    %s; %s\n", k->section, k->key,
               !k->dflt ? "(derived)" : k->dflt[0] ? k->dflt : "(unset)", k->type, k->doc);
    }
}

int deftsim_cmd_config(int argc, char **argv)
{
    static const struct option opts[] = {
        {"set", required_argument, NULL, 's'},
        {"json", no_argument, NULL, 'j'},
        {"keys", no_argument, NULL, 'k'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    deftsim_cli_sets sets;
    if (deftsim_cli_sets_init(&sets, argc)) {
        fprintf(stderr, "deftsim config: out of memory\n");
        return 1;
    }
    int json = 0, keys = 0, c, rc = 0;
    /* optind = 0 makes glibc's getopt start afresh: main() parsed its own options in "+"
     * (stop at the first argument) mode, which would otherwise stay in effect and make
     * "config FILE --json" stop at FILE. */
    optind = 0;
    while ((c = getopt_long(argc, argv, "s:jkh", opts, NULL)) != -1) {
        switch (c) {
        case 's': deftsim_cli_sets_add(&sets, optarg); break;
        case 'j': json = 1; break;
        case 'k': keys = 1; break;
        case 'h': usage(stdout); goto done;
        default: usage(stderr); rc = 2; goto done;
        }
    }
    if (keys) {
        if (optind < argc) {
            rc = deftsim_cli_usage_error("config", "--keys takes no scenario");
            goto done;
        }
        if (!deftsim_cli_parse_only) print_keys();
        goto done;
    }
    if (optind >= argc) {
        rc = deftsim_cli_usage_error("config", "missing SCENARIO");
        goto done;
    }
    if (optind + 1 < argc) {
        rc = deftsim_cli_usage_error("config", "unexpected argument '%s'", argv[optind + 1]);
        goto done;
    }

    deftsim_config *cfg;
    deftsim_cli_sets_finish(&sets);
    deftsim_status st = deftsim_config_load(argv[optind], sets.kv, sets.n, &cfg);
    if (st) {
        rc = deftsim_cli_fail(st);
        goto done;
    }
    if (deftsim_cli_parse_only) {
        deftsim_config_free(cfg);
        goto done;
    }
    if (json) {
        json_t *j = deftsim_config_to_json(cfg);
        if (!j) st = DEFTSIM_E_NOMEM;
        else if (json_dumpf(j, stdout, JSON_INDENT(2)) != 0 || fputc('\n', stdout) == EOF)
            st = deftsim_error_set(DEFTSIM_E_IO, "writing the configuration failed");
        json_decref(j);
    } else {
        st = deftsim_config_to_ini(cfg, stdout);
    }
    deftsim_config_free(cfg);
    if (!st && fflush(stdout) != 0)
        st = deftsim_error_set(DEFTSIM_E_IO, "writing the configuration failed");
    if (st) rc = deftsim_cli_fail(st);
done:
    deftsim_cli_sets_free(&sets);
    return rc;
}
