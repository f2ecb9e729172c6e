/* cmd_analyze.c - `deftsim analyze`: summary.csv and summary.md from a folder of results. */
#include <getopt.h>
#include <libgen.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <limits.h>
#include <unistd.h>

#include "cli.h"
#include "cli_train.h"
#include "deftsim_analysis.h"
#include "deftsim_build_info.h"
#include "deftsim_conditions.h"
#include "deftsim_folder.h"
#include "deftsim_sweep.h"
#include "deftsim_train_results.h"
#include "deftsim_util.h"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: deftsim analyze DIR|FILE [--output DIR] [--bootstrap B] [--level L] [--seed S]\n"
            "                       [--warmup N] [--quiet]\n"
            "       deftsim analyze TRAIN_DIR... [--target ACC] [--output DIR] [--bootstrap B]\n"
            "                       [--level L] [--seed S] [--quiet]\n"
            "\n"
            "Reads the finished points of a results folder (deftsim sweep or deftsim run; a CSV file\n"
            "of rows is read as it is) and writes, into DIR (or --output):\n"
            "  summary.csv  one row per point (variant, model, method, density, P): the median and a\n"
            "               bootstrap confidence interval of the selection time of the slowest\n"
            "               worker, communication and iteration time (when the rows have them),\n"
            "               bytes per worker, build-up, captured norm and load imbalance over the\n"
            "               point's iterations; the scaling exponent of selection time with P; the\n"
            "               speedups over topk at each P\n"
            "  summary.md   the same as tables to read, with the definitions\n"
            "  iterations.csv  one row per iteration of every point: build-up (K / k) and captured\n"
            "               norm over the iterations (the figure buildup_vs_iteration)\n"
            "Folders of deftsim train (one or more, one repeat each: the same scenario with other\n"
            "seeds) give per point (method, density, P) the final and best test accuracy, the\n"
            "final test loss and simulated time, and the iterations and simulated time to a\n"
            "target accuracy: medians over the repeats, intervals when there are two or more.\n"
            "Written into the first TRAIN_DIR (or --output).\n"
            "docs/ANALYSIS.md defines every column.\n"
            "\n"
            "  -o, --output DIR     where to write (default: DIR, or a FILE's folder); a folder\n"
            "                       holding other results is refused\n"
            "  -b, --bootstrap B    bootstrap resamples (default 2000, at least 100)\n"
            "  -l, --level L        confidence level in (0, 1) (default 0.95)\n"
            "  -S, --seed S         seed of the resampling (default 1): the same seed, the same intervals\n"
            "  -w, --warmup N       leave out each point's first N iterations (default 0)\n"
            "  -t, --target ACC     training results: the target test accuracy, ACC in (0, 1], or\n"
            "                       dense:F, F in (0, 1] of dense's final accuracy at the same P\n"
            "                       (default dense:0.95)\n"
            "  -q, --quiet          no summary line on stderr\n"
            "  -h, --help           this help\n"
            "\n"
            "Exit status: 0 done, 2 bad usage or unreadable results, 1 failure while writing.\n");
}

/* analyze writes summary.csv and summary.md beside the results it reads. --output may name
 * another folder, but not one that holds results of its own (a manifest.json of any kind,
 * point files, rows.csv): their summary would be replaced by, or taken for, a summary of other
 * results. Nothing is written then (DEFTSIM_E_INPUT). */
static deftsim_status check_outdir(const char *outdir, const char *src)
{
    char ro[PATH_MAX], rs[PATH_MAX];
    if (!realpath(outdir, ro)) return DEFTSIM_OK; /* not there yet: nothing to replace */
    if (realpath(src, rs) && !strcmp(ro, rs)) return DEFTSIM_OK;
    char path[PATH_MAX + 64];
    const char *holds = NULL;
    snprintf(path, sizeof path, "%s/manifest.json", outdir);
    json_t *m = NULL;
    if (access(path, F_OK) == 0) {
        m = json_load_file(path, 0, NULL);
        holds = deftsim_folder_holds(m ? json_string_value(json_object_get(m, "format")) : NULL);
    } else {
        snprintf(path, sizeof path, "%s/points", outdir);
        if (deftsim_folder_has_point_files(path)) holds = "point files";
        snprintf(path, sizeof path, "%s/rows.csv", outdir);
        if (!holds && access(path, F_OK) == 0) holds = "rows.csv";
    }
    if (!holds) return DEFTSIM_OK;
    deftsim_status st = deftsim_error_set(DEFTSIM_E_INPUT,
                                          "--output %s: the folder holds %s, not those of %s; a "
                                          "summary of %s there would replace or be taken for "
                                          "theirs: analyze into another folder (--output DIR)",
                                          outdir, holds, src, src);
    json_decref(m);
    return st;
}

/* The real network mode's rows ([execute] network = mpi): measured against simulated time
 * per method, collective and size, printed, written to measured.csv and appended to
 * summary.md. Nothing when no row has a measured time. */
static deftsim_status measured_table(const deftsim_result_set *rs, const char *outdir,
                                     const char *md, int quiet)
{
    deftsim_measured *m;
    deftsim_status st = deftsim_measured_new(&m);
    for (size_t i = 0; !st && i < rs->nfiles; i++) st = deftsim_measured_add_file(m, rs->files[i].path);
    if (st || !deftsim_measured_count(m)) {
        deftsim_measured_free(m);
        return st;
    }
    char csv[4200];
    snprintf(csv, sizeof csv, "%s/measured.csv", outdir);
    if (!(st = deftsim_measured_write_csv(m, csv))) {
        /* summary.md again, with the table at its end. */
        FILE *in = fopen(md, "rb");
        deftsim_afile *af = NULL;
        if (!in) st = deftsim_error_set(DEFTSIM_E_IO, "%s: cannot be read back", md);
        else if (!(st = deftsim_afile_open(&af, md))) {
            FILE *f = deftsim_afile_stream(af);
            char buf[8192];
            size_t k;
            while ((k = fread(buf, 1, sizeof buf, in)) > 0) fwrite(buf, 1, k, f);
            deftsim_measured_write_md(m, f);
            st = deftsim_afile_commit(af);
        }
        if (in) fclose(in);
    }
    if (!st && !quiet) {
        deftsim_measured_write_md(m, stdout);
        fprintf(stderr, "deftsim analyze: measured against simulated communication -> %s\n", csv);
    }
    deftsim_measured_free(m);
    return st;
}

/* A run or sweep that did not finish: analysed all the same, and said so. */
static void warn_incomplete(const char *in, const deftsim_result_set *rs)
{
    fprintf(stderr,
            "deftsim analyze: %s is incomplete (status %s): %zu of its %zu points analysed, as "
            "summary.md says; run the same deftsim %s command again to finish it\n",
            in, rs->status ? rs->status : "?", rs->nfiles, rs->planned, rs->kind);
}

int deftsim_cmd_analyze(int argc, char **argv)
{
    static const struct option opts[] = {
        {"output", required_argument, NULL, 'o'},
        {"bootstrap", required_argument, NULL, 'b'},
        {"level", required_argument, NULL, 'l'},
        {"seed", required_argument, NULL, 'S'},
        {"warmup", required_argument, NULL, 'w'},
        {"target", required_argument, NULL, 't'},
        {"quiet", no_argument, NULL, 'q'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    deftsim_analysis_options ao;
    deftsim_analysis_options_default(&ao);
    const char *outdir = NULL;
    int quiet = 0, c, rc = 0;
    deftsim_result_set *rs = NULL;
    deftsim_analysis *an = NULL;
    char **prov = NULL;
    char *dirbuf = NULL;
    const char *target = NULL;
    int warmup_set = 0;
    optind = 0;
    while ((c = getopt_long(argc, argv, "o:b:l:S:w:t:qh", opts, NULL)) != -1) {
        int64_t v;
        double d;
        uint64_t u;
        switch (c) {
        case 'o': outdir = optarg; break;
        case 'b':
            if (deftsim_parse_i64(optarg, &v) || v < 100 || v > 10000000)
                return deftsim_cli_usage_error("analyze", "--bootstrap: '%s' is not in [100, 10000000]", optarg);
            ao.boot.resamples = (size_t)v;
            break;
        case 'l':
            if (deftsim_parse_double(optarg, &d) || !(d > 0 && d < 1))
                return deftsim_cli_usage_error("analyze", "--level: '%s' is not in (0, 1)", optarg);
            ao.boot.level = d;
            break;
        case 'S':
            if (deftsim_parse_u64(optarg, &u))
                return deftsim_cli_usage_error("analyze", "--seed: '%s' is not an unsigned integer", optarg);
            ao.boot.seed = u;
            break;
        case 'w':
            if (deftsim_parse_i64(optarg, &v) || v < 0 || v > 1000000)
                return deftsim_cli_usage_error("analyze", "--warmup: '%s' is not in [0, 1000000]", optarg);
            ao.warmup = (size_t)v;
            warmup_set = 1;
            break;
        case 't': target = optarg; break;
        case 'q': quiet = 1; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind >= argc) return deftsim_cli_usage_error("analyze", "missing DIR");
    if (!deftsim_cli_parse_only && deftsim_train_results_is(argv[optind])) {
        if (warmup_set)
            return deftsim_cli_usage_error("analyze", "--warmup does not apply to training results");
        return deftsim_cli_analyze_train(argc - optind, argv + optind, &ao.boot, target, outdir,
                                         quiet);
    }
    if (target) return deftsim_cli_usage_error("analyze", "--target applies to training results only");
    if (optind + 1 < argc)
        return deftsim_cli_usage_error("analyze", "unexpected argument '%s'", argv[optind + 1]);
    if (deftsim_cli_parse_only) return 0;
    const char *in = argv[optind];
    double t0 = deftsim_now();
    deftsim_status st = deftsim_results_list(in, &rs);
    if (st) {
        rc = deftsim_cli_fail(st);
        goto done;
    }
    /* The folder of the results read: DIR, or a FILE's folder. */
    const char *src = in;
    if (!strcmp(rs->kind, "file")) {
        if (!(dirbuf = strdup(in))) {
            rc = 1;
            goto done;
        }
        src = dirname(dirbuf);
    }
    if (!outdir) outdir = src;
    if ((st = check_outdir(outdir, src)) || (st = deftsim_mkdir_p(outdir))) {
        rc = deftsim_cli_fail(st);
        goto done;
    }
    if ((st = deftsim_results_add_metrics()) ||
        (st = deftsim_analysis_new(&ao, (const char *const *)rs->axes, rs->naxes, &an))) {
        rc = deftsim_cli_fail(st);
        goto done;
    }
    for (size_t i = 0; i < rs->nfiles; i++)
        if ((st = deftsim_analysis_add_file(an, rs->files[i].path,
                                            (const char *const *)rs->files[i].values))) {
            rc = deftsim_cli_fail(st);
            goto done;
        }
    if ((st = deftsim_analysis_finish(an))) {
        rc = deftsim_cli_fail(st);
        goto done;
    }
    /* The results' provenance, then how this analysis ran. */
    size_t np = 0;
    while (rs->provenance && rs->provenance[np]) np++;
    prov = calloc(np + 2, sizeof *prov);
    if (!prov) {
        rc = 1;
        goto done;
    }
    for (size_t i = 0; i < np; i++) prov[i] = rs->provenance[i];
    char line[512];
    snprintf(line, sizeof line,
             "Analysed by deftsim %s (commit %s): %zu bootstrap resamples, %g%% intervals, seed "
             "%llu, warm-up %zu iteration%s left out.",
             DEFTSIM_VERSION, DEFTSIM_GIT_COMMIT, ao.boot.resamples, ao.boot.level * 100,
             (unsigned long long)ao.boot.seed, ao.warmup, ao.warmup == 1 ? "" : "s");
    prov[np] = line;
    char csv[4200], md[4200], its[4200];
    snprintf(csv, sizeof csv, "%s/summary.csv", outdir);
    snprintf(md, sizeof md, "%s/summary.md", outdir);
    snprintf(its, sizeof its, "%s/iterations.csv", outdir);
    if ((st = deftsim_analysis_write_csv(an, csv)) ||
        (st = deftsim_analysis_write_iterations(an, its)) ||
        (st = deftsim_conditions_write_md(an, src, md, (const char *const *)prov))) {
        rc = deftsim_cli_fail(st);
        goto done;
    }
    if ((st = measured_table(rs, outdir, md, quiet)) ||
        (st = deftsim_cli_analyze_stages(src, outdir, md, quiet))) {
        rc = deftsim_cli_fail(st);
        goto done;
    }
    if (!quiet) {
        fprintf(stderr, "deftsim analyze: %zu points from %zu file%s in %.1f s -> %s, %s\n",
                deftsim_analysis_points(an), rs->nfiles, rs->nfiles == 1 ? "" : "s",
                deftsim_now() - t0, csv, md);
        if (!deftsim_analysis_has_values(an, DEFTSIM_M_COMM))
            fprintf(stderr, "deftsim analyze: no communication or iteration times in these rows "
                            "(the network was not simulated); summary.md says so\n");
    }
    if (rs->incomplete) warn_incomplete(in, rs); /* --quiet or not */
done:
    free(prov);
    free(dirbuf);
    deftsim_analysis_free(an);
    deftsim_results_free(rs);
    return rc;
}
