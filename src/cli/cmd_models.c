/* cmd_models.c - `deftsim models`: list the built-in model tables. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "deftsim_gen.h"
#include "deftsim_model.h"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: deftsim models [--layers NAME] [--csv]\n"
            "\n"
            "Lists the built-in model tables with their tensor counts, parameter totals and the\n"
            "generator parameter set each takes by default ([gradients] params unset).\n"
            "  --layers NAME  print NAME's tensors in parameter order (name, shape, numel, offset)\n"
            "                 NAME may also be the path of a CSV table (index,name,shape,numel)\n"
            "  --csv          machine-readable output\n"
            "  -h, --help     this help\n");
}

int deftsim_cmd_models(int argc, char **argv)
{
    static const struct option opts[] = {
        {"layers", required_argument, NULL, 'l'},
        {"csv", no_argument, NULL, 'c'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *layers = NULL;
    int csv = 0, c;
    while ((c = getopt_long(argc, argv, "l:ch", opts, NULL)) != -1) {
        switch (c) {
        case 'l': layers = optarg; break;
        case 'c': csv = 1; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) return deftsim_cli_usage_error("models", "unexpected argument '%s'", argv[optind]);

    deftsim_model *m;
    deftsim_status st;
    if (layers) {
        if ((st = deftsim_model_load(layers, &m))) return deftsim_cli_fail(st);
        if (deftsim_cli_parse_only) {
            deftsim_model_free(m);
            return 0;
        }
        printf(csv ? "index,name,shape,numel,offset\n" : "%5s  %-48s %-18s %12s %12s\n", "index",
               "name", "shape", "numel", "offset");
        for (size_t i = 0; i < m->nlayers; i++) {
            const deftsim_layer *L = &m->layers[i];
            char shape[160] = "";
            for (uint32_t d = 0; d < L->ndim; d++) {
                size_t o = strlen(shape);
                snprintf(shape + o, sizeof shape - o, d ? "x%llu" : "%llu",
                         (unsigned long long)L->shape[d]);
            }
            printf(csv ? "%zu,%s,%s,%llu,%llu\n" : "%5zu  %-48s %-18s %12llu %12llu\n", i, L->name,
                   shape, (unsigned long long)L->numel, (unsigned long long)L->offset);
        }
        deftsim_model_free(m);
        return 0;
    }
    if (deftsim_cli_parse_only) return 0;
    printf(csv ? "model,tensors,parameters,params_default,params_fit\n" : "%-20s %8s %14s  %s\n",
           "model", "tensors", "parameters", "generator parameters (docs/GENERATOR.md)");
    for (size_t i = 0; i < deftsim_model_builtin_count(); i++) {
        if ((st = deftsim_model_builtin(deftsim_model_builtin_name(i), &m))) return deftsim_cli_fail(st);
        int fitted;
        const char *set = deftsim_gen_table_params(m->name, &fitted, NULL);
        const char *fit = !set ? "" : fitted ? "fitted" : "extrapolated";
        if (csv)
            printf("%s,%zu,%llu,%s,%s\n", m->name, m->nlayers, (unsigned long long)m->numel,
                   set ? set : "", fit);
        else
            printf("%-20s %8zu %14llu  %s%s%s%s\n", m->name, m->nlayers,
                   (unsigned long long)m->numel, set ? set : "plain defaults", set ? " (" : "",
                   fit, set ? ")" : "");
        deftsim_model_free(m);
    }
    return 0;
}
