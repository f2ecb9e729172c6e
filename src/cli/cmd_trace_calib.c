/* cmd_trace_calib.c - `deftsim trace calibrate`: the generator's parameters fitted to a trace
 * (traces/deftsim_calibrate.h; docs/GENERATOR.md, "Calibration"). */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "deftsim_calibrate.h"
#include "deftsim_trace.h"
#include "deftsim_util.h"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: deftsim trace calibrate DIR [-o FILE] [--from ID] [--tail-density D]\n"
            "                               [--signal-density D] [--scale-density D] [--no-field]\n"
            "                               [--no-size]\n"
            "\n"
            "Fits the synthetic generator's parameters to the recorded trace DIR and writes them\n"
            "as a parameter file of [synthetic] keys (to FILE, else to stdout) that a scenario\n"
            "names with [gradients] params = FILE (docs/GENERATOR.md, \"Calibration\"):\n"
            "  <kind>_scale/_depth/_spread/_size  each tensor kind's line of log10 scale over\n"
            "           depth and (where 3 tensors without a role span a decade of sizes;\n"
            "           none with --no-size) over log10 of the element count;\n"
            "           a tensor's scale: its RMS, or with --scale-density D its top-D threshold\n"
            "           over the generator's\n"
            "  tail     the top share of a weight tensor's squared norm (--tail-density, 0.01)\n"
            "  signal   two workers' top-set overlap in one tensor (--signal-density, 0.001)\n"
            "  field    one worker's top-1%% overlap in a tensor between two consecutive fit\n"
            "           iterations (none with --no-field)\n"
            "  drift    the change of the tensors' RMS between the first iteration after 0 and\n"
            "           the last\n"
            "The fit uses the iterations with id >= --from (default: half the last id).\n");
}

static int parse_d(const char *name, const char *arg, double *out)
{
    if (deftsim_parse_double(arg, out) || !(*out > 0 && *out < 1))
        return deftsim_cli_usage_error("trace", "%s: '%s' is not a number in (0, 1)", name, arg);
    return 0;
}

int deftsim_cmd_trace_calibrate(int argc, char **argv)
{
    static const struct option opts[] = {
        {"output", required_argument, NULL, 'o'},
        {"from", required_argument, NULL, 'f'},
        {"tail-density", required_argument, NULL, 1},
        {"signal-density", required_argument, NULL, 2},
        {"scale-density", required_argument, NULL, 3},
        {"no-field", no_argument, NULL, 4},
        {"no-size", no_argument, NULL, 5},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    deftsim_calib_opts o;
    deftsim_calib_opts_default(&o);
    const char *out = NULL;
    int c, rc;
    uint64_t from;
    while ((c = getopt_long(argc, argv, "o:h", opts, NULL)) != -1) {
        switch (c) {
        case 'o': out = optarg; break;
        case 'f':
            if (deftsim_parse_u64(optarg, &from) || from > INT64_MAX)
                return deftsim_cli_usage_error("trace", "--from: '%s' is not an iteration id",
                                               optarg);
            o.from = (int64_t)from;
            break;
        case 1: if ((rc = parse_d("--tail-density", optarg, &o.tail_density))) return rc; break;
        case 2: if ((rc = parse_d("--signal-density", optarg, &o.signal_density))) return rc; break;
        case 3:
            if (deftsim_parse_double(optarg, &o.scale_density) ||
                !(o.scale_density >= 0 && o.scale_density < 1))
                return deftsim_cli_usage_error("trace", "--scale-density: '%s' is not a number "
                                               "in [0, 1)", optarg);
            break;
        case 4: o.no_field = 1; break;
        case 5: o.no_size = 1; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind + 1 != argc)
        return deftsim_cli_usage_error("trace", "calibrate needs exactly one DIR");
    deftsim_trace *t;
    deftsim_status st = deftsim_trace_open(argv[optind], &t);
    if (st) return deftsim_cli_fail(st);
    if (deftsim_cli_parse_only) {
        deftsim_trace_close(t);
        return 0;
    }
    deftsim_calib_result r;
    double t0 = deftsim_now();
    if (!(st = deftsim_calibrate(t, &o, &r))) st = deftsim_calib_write(t, &r, out);
    if (!st && out)
        fprintf(stderr, "deftsim trace calibrate: %s: tail %.3g, signal %.3g, drift %.3g, weight "
                "scales over %.2f decades (%.1f s)\n", out, r.params.tail, r.params.signal,
                r.params.drift, r.weight_decades, deftsim_now() - t0);
    deftsim_trace_close(t);
    return st ? deftsim_cli_fail(st) : 0;
}
