/* cmd_config.c - `deftsim config`: print a scenario's fully resolved configuration. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "deftsim_conditions.h"
#include "deftsim_config.h"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: deftsim config SCENARIO [--set section.key=value]... [--json]\n"
            "       deftsim config --keys\n"
            "       deftsim config --methods\n"
            "       deftsim config --presets\n"
            "       deftsim config --preset NAME\n"
            "\n"
            "Reads a scenario file, applies the overrides, checks everything and prints every key\n"
            "with defaults filled in, as INI that reads back to the same configuration; three\n"
            "comment lines first name the network (preset, library, algorithm, model), where\n"
            "the compute phases are timed, and the generator's parameter set and why it applies.\n"
            "  -s, --set S.K=V  override key K of section S (repeatable; a later one wins)\n"
            "  -j, --json       print JSON instead, as written into result manifests\n"
            "  -k, --keys       list every key: type, default, meaning\n"
            "  -m, --methods    list the sparsifiers, tab-separated: name, title, capabilities,\n"
            "                   their [sparsify] keys, their own rows.csv columns\n"
            "  -P, --presets    list the [network] presets (docs/NETWORK.md, \"Presets\")\n"
            "  -p, --preset N   print preset N's keys as INI, each figure with its source\n"
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

/* The registry, one method a line (the tests read their lists of methods from it). */
static void print_methods(void)
{
    printf("name\ttitle\tcapabilities\toptions\tcolumns\n");
    for (size_t i = 0; i < deftsim_method_count(); i++) {
        const deftsim_method_desc *d = deftsim_method_get((deftsim_method)i);
        printf("%s\t%s\t", d->name, d->title);
        int n = 0;
        for (unsigned b = 1; b; b <<= 1)
            if ((d->caps & b) && deftsim_method_cap_name(b))
                printf("%s%s", n++ ? "," : "", deftsim_method_cap_name(b));
        putchar('\t');
        for (size_t j = 0; j < d->noptions; j++) printf("%s%s", j ? "," : "", d->options[j].key);
        putchar('\t');
        for (size_t j = 0; j < d->ncolumns; j++) printf("%s%s", j ? "," : "", d->columns[j].name);
        putchar('\n');
    }
}

static void print_presets(void)
{
    for (size_t i = 0; i < deftsim_config_preset_count(); i++) {
        const deftsim_config_preset *pr = deftsim_config_preset_get(i);
        printf("%-10s %s\n", pr->name, pr->title);
    }
}

/* text as comment lines of at most 96 characters, broken between words, so that the printed
 * preset reads back as a scenario (whose lines are at most 198 characters). */
static void print_comment(const char *text)
{
    while (*text) {
        size_t n = strlen(text);
        if (n > 94) {
            n = 94;
            while (n > 0 && text[n] != ' ') n--;
            if (!n) n = strcspn(text, " ");
        }
        printf("# %.*s\n", (int)n, text);
        text += n;
        while (*text == ' ') text++;
    }
}

/* A preset as the [network] lines it stands for: reads back as a scenario fragment. */
static int print_preset(const char *name)
{
    const deftsim_config_preset *pr = deftsim_config_preset_find(name);
    if (!pr) {
        char known[256] = "";
        size_t o = 0;
        for (size_t i = 0; i < deftsim_config_preset_count() && o < sizeof known; i++)
            o += (size_t)snprintf(known + o, sizeof known - o, "%s%s", i ? ", " : "",
                                  deftsim_config_preset_get(i)->name);
        return deftsim_cli_fail(deftsim_error_set(DEFTSIM_E_INPUT,
                                                  "--preset %s: no such preset (presets: %s)", name,
                                                  known));
    }
    if (deftsim_cli_parse_only) return 0;
    printf("# [network] preset = %s: %s\n", pr->name, pr->title);
    for (const char *src = pr->source; *src;) { /* one source a line: lines stay readable back */
        size_t n = strcspn(src, ";");
        printf("# source: %.*s\n", (int)n, src);
        src += n;
        while (*src == ';' || *src == ' ') src++;
    }
    printf("# A key set in the scenario or by --set wins over the preset's.\n[network]\n");
    for (size_t k = 0; k < pr->nkeys; k++) {
        print_comment(pr->keys[k].note);
        printf("%s = %s\n", pr->keys[k].key, pr->keys[k].value);
    }
    return 0;
}

int deftsim_cmd_config(int argc, char **argv)
{
    static const struct option opts[] = {
        {"set", required_argument, NULL, 's'},
        {"json", no_argument, NULL, 'j'},
        {"keys", no_argument, NULL, 'k'},
        {"methods", no_argument, NULL, 'm'},
        {"presets", no_argument, NULL, 'P'},
        {"preset", required_argument, NULL, 'p'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    deftsim_cli_sets sets;
    if (deftsim_cli_sets_init(&sets, argc)) {
        deftsim_cli_fail(deftsim_error_nomem("deftsim config"));
        return 1;
    }
    int json = 0, keys = 0, methods = 0, presets = 0, c, rc = 0;
    const char *preset = NULL;
    /* optind = 0 makes glibc's getopt start afresh: main() parsed its own options in "+"
     * (stop at the first argument) mode, which would otherwise stay in effect and make
     * "config FILE --json" stop at FILE. */
    optind = 0;
    while ((c = getopt_long(argc, argv, "s:jkmPp:h", opts, NULL)) != -1) {
        switch (c) {
        case 's': deftsim_cli_sets_add(&sets, optarg); break;
        case 'j': json = 1; break;
        case 'k': keys = 1; break;
        case 'm': methods = 1; break;
        case 'P': presets = 1; break;
        case 'p': preset = optarg; break;
        case 'h': usage(stdout); goto done;
        default: usage(stderr); rc = 2; goto done;
        }
    }
    if (presets || preset) {
        if (optind < argc || keys || (presets && preset)) {
            rc = deftsim_cli_usage_error("config", "--presets and --preset NAME take nothing else");
            goto done;
        }
        if (preset) rc = print_preset(preset);
        else if (!deftsim_cli_parse_only) print_presets();
        goto done;
    }
    if (methods) {
        if (optind < argc || keys) {
            rc = deftsim_cli_usage_error("config", "--methods takes nothing else");
            goto done;
        }
        if (!deftsim_cli_parse_only) print_methods();
        goto done;
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
        /* The conditions the scenario's times are taken in, as comments (the INI reads back). */
        deftsim_conditions cd;
        if (!(st = deftsim_conditions_of_config(cfg, NULL, &cd))) {
            printf("# %s\n# %s\n", cd.network, cd.compute);
            deftsim_params_choice ch;
            deftsim_config_params_choice(cfg, &ch);
            printf("# generator parameters: %s (%s%s)\n", ch.set ? ch.set : "plain defaults",
                   deftsim_params_why_name(ch.why),
                   ch.why != DEFTSIM_PARAMS_TABLE ? "" : ch.fitted ? ", fitted" : ", extrapolated");
            st = deftsim_config_to_ini(cfg, stdout);
        }
    }
    deftsim_config_free(cfg);
    if (!st && fflush(stdout) != 0)
        st = deftsim_error_set(DEFTSIM_E_IO, "writing the configuration failed");
    if (st) rc = deftsim_cli_fail(st);
done:
    deftsim_cli_sets_free(&sets);
    return rc;
}
