/* cmd_trace.c - `deftsim trace`: inspect, check, dump and generate gradient traces. */
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cli.h"
#include "deftsim_gen.h"
#include "deftsim_gradsrc.h"
#include "deftsim_trace.h"
#include "deftsim_util.h"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: deftsim trace <info|check|dump|import|gen|bench|record|calibrate> [<args>]\n"
            "\n"
            "Gradient traces (traces/FORMAT.md): a directory with manifest.json and one\n"
            "safetensors file per iteration holding every worker's float32 gradient, or the\n"
            "per-rank layout iter_<t>/rank_<r>.safetensors (PyTorch's {name: grad} per rank).\n"
            "\n"
            "  info DIR [--json] [--no-stats]\n"
            "      validate a trace; print its manifest, the min/median/max L2 norm of each layer\n"
            "      over workers and iterations, and the non-finite values per iteration and worker\n"
            "  check DIR\n"
            "      exit 2 naming the first non-finite value (file, worker, layer, element), else 0\n"
            "  dump DIR --iteration ID --worker W [--offset O] [--count C]\n"
            "      print gradient values one per line (%%.9g: exact for float32)\n"
            "  import DIR\n"
            "      write DIR/manifest.json for a per-rank trace, derived from its files (an\n"
            "      existing manifest that differs is left alone: exit 2)\n"
            "  gen --model NAME --workers P --iterations T --seed S -o DIR\n"
            "      [--params FILE] [--scale-decades X] [--signal X] [--tail X] [--drift X]\n"
            "      [--bias-shift X]\n"
            "      write a synthetic trace (docs/GENERATOR.md); NAME is a built-in model or a CSV;\n"
            "      --params: a parameter file or built-in set ([gradients] params), the options win\n"
            "  bench --model NAME [--workers P] [--seconds S]\n"
            "      time the generator's fill kernels (elements per second, one thread)\n"
            "  record SCENARIO -o DIR [--workers P] [--method M] [--density D] [--set S.K=V]...\n"
            "      train [train] model on Fashion-MNIST and record every worker's gradients at\n"
            "      [train] record's iterations ('deftsim trace record --help')\n"
            "  calibrate DIR [-o FILE] [--from ID]\n"
            "      fit the generator's parameters to a trace; write them as a parameter file\n"
            "      ('deftsim trace calibrate --help')\n");
}

/* ---- info ------------------------------------------------------------------------------ */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void shape_string(const deftsim_layer *L, char *buf, size_t size)
{
    buf[0] = '\0';
    for (uint32_t d = 0; d < L->ndim; d++) {
        size_t o = strlen(buf);
        snprintf(buf + o, size - o, d ? "x%" PRIu64 : "%" PRIu64, L->shape[d]);
    }
}

typedef struct {
    double *norms;      /* [layer][sample], sample = iteration * P + worker */
    uint64_t *nonfinite_layer;
    uint64_t *nonfinite_iw; /* [iteration * P + worker] */
} trace_stats;

static deftsim_status gather_stats(const deftsim_trace *t, trace_stats *s)
{
    const deftsim_model *m = deftsim_trace_model(t);
    size_t T = deftsim_trace_iterations(t), P = deftsim_trace_workers(t), S = T * P;
    s->norms = malloc(m->nlayers * S * sizeof *s->norms);
    s->nonfinite_layer = calloc(m->nlayers, sizeof *s->nonfinite_layer);
    s->nonfinite_iw = calloc(S, sizeof *s->nonfinite_iw);
    double *l2 = malloc(m->nlayers * sizeof *l2);
    uint64_t *nf = malloc(m->nlayers * sizeof *nf);
    deftsim_status st = DEFTSIM_OK;
    if (!s->norms || !s->nonfinite_layer || !s->nonfinite_iw || !l2 || !nf) {
        st = deftsim_error_nomem("trace info");
        goto done;
    }
    for (size_t i = 0; i < T && !st; i++) {
        for (size_t w = 0; w < P && !st; w++) {
            if ((st = deftsim_trace_layer_stats(t, i, (uint32_t)w, l2, nf))) break;
            for (size_t L = 0; L < m->nlayers; L++) {
                s->norms[L * S + i * P + w] = l2[L];
                s->nonfinite_layer[L] += nf[L];
                s->nonfinite_iw[i * P + w] += nf[L];
            }
        }
    }
    for (size_t L = 0; L < m->nlayers && !st; L++)
        qsort(s->norms + L * S, S, sizeof(double), cmp_double);
done:
    free(l2);
    free(nf);
    return st;
}

static double median_sorted(const double *x, size_t n)
{
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

static int print_info_json(const deftsim_trace *t, const trace_stats *s)
{
    const deftsim_model *m = deftsim_trace_model(t);
    size_t T = deftsim_trace_iterations(t), P = deftsim_trace_workers(t), S = T * P;
    json_t *root = json_object(), *iters = json_array(), *layers = json_array(),
           *nonfinite = json_array();
    int bad = !root || !iters || !layers || !nonfinite;
    for (size_t i = 0; i < T && !bad; i++)
        bad |= json_array_append_new(iters, json_integer((json_int_t)deftsim_trace_iteration_id(t, i)));
    for (size_t L = 0; L < m->nlayers && !bad; L++) {
        const deftsim_layer *ly = &m->layers[L];
        json_t *shape = json_array();
        for (uint32_t d = 0; d < ly->ndim && shape; d++)
            json_array_append_new(shape, json_integer((json_int_t)ly->shape[d]));
        json_t *o = json_pack("{s:s, s:o, s:I, s:I}", "name", ly->name, "shape", shape, "numel",
                              (json_int_t)ly->numel, "offset", (json_int_t)ly->offset);
        if (o && s) {
            const double *x = s->norms + L * S;
            json_object_set_new(o, "norm_min", json_real(x[0]));
            json_object_set_new(o, "norm_median", json_real(median_sorted(x, S)));
            json_object_set_new(o, "norm_max", json_real(x[S - 1]));
            json_object_set_new(o, "nonfinite", json_integer((json_int_t)s->nonfinite_layer[L]));
        }
        bad |= json_array_append_new(layers, o);
    }
    for (size_t i = 0; i < T && s && !bad; i++)
        for (size_t w = 0; w < P && !bad; w++)
            if (s->nonfinite_iw[i * P + w])
                bad |= json_array_append_new(
                    nonfinite, json_pack("{s:I, s:I, s:I}", "iteration",
                                         (json_int_t)deftsim_trace_iteration_id(t, i), "worker",
                                         (json_int_t)w, "count",
                                         (json_int_t)s->nonfinite_iw[i * P + w]));
    if (!bad) {
        json_object_set_new(root, "dir", json_string(deftsim_trace_dir(t)));
        json_object_set_new(root, "format", json_string(DEFTSIM_TRACE_FORMAT_NAME));
        json_object_set_new(root, "format_version", json_integer(deftsim_trace_format_version(t)));
        json_object_set_new(root, "layout", json_string(deftsim_trace_layout(t)));
        json_object_set_new(root, "layer_order", json_string(deftsim_trace_layer_order(t)));
        json_object_set_new(root, "model", json_pack("{s:s, s:I, s:I}", "name", m->name,
                                                     "numel", (json_int_t)m->numel, "tensors",
                                                     (json_int_t)m->nlayers));
        json_object_set_new(root, "workers", json_integer((json_int_t)P));
        json_object_set_new(root, "dtype", json_string("float32"));
        json_object_set(root, "iterations", iters);
        json_object_set(root, "provenance", (json_t *)deftsim_trace_provenance(t));
        json_object_set(root, "layers", layers);
        if (s) json_object_set(root, "nonfinite", nonfinite);
        bad = json_dumpf(root, stdout, JSON_INDENT(2)) != 0;
        printf("\n");
    }
    json_decref(root);
    json_decref(iters);
    json_decref(layers);
    json_decref(nonfinite);
    if (bad) return deftsim_cli_fail(deftsim_error_nomem("trace info"));
    return 0;
}

static void print_info_text(const deftsim_trace *t, const trace_stats *s)
{
    const deftsim_model *m = deftsim_trace_model(t);
    size_t T = deftsim_trace_iterations(t), P = deftsim_trace_workers(t), S = T * P;
    printf("trace       %s\n", deftsim_trace_dir(t));
    printf("format      %s, version %d, layout %s\n", DEFTSIM_TRACE_FORMAT_NAME,
           deftsim_trace_format_version(t), deftsim_trace_layout(t));
    if (!strcmp(deftsim_trace_layer_order(t), "sorted"))
        printf("layer order sorted by name: no __metadata__.%s (not PyTorch's parameter order)\n",
               DEFTSIM_TRACE_ORDER_KEY);
    printf("model       %s: %zu tensors, %" PRIu64 " elements\n", m->name, m->nlayers, m->numel);
    printf("workers     %zu\n", P);
    printf("iterations  %zu (ids %" PRIu64 " .. %" PRIu64 ")\n", T,
           deftsim_trace_iteration_id(t, 0), deftsim_trace_iteration_id(t, T - 1));
    printf("dtype       float32\n");
    char *prov = json_dumps(deftsim_trace_provenance(t), JSON_COMPACT);
    printf("provenance  %s\n", prov ? prov : "?");
    free(prov);
    if (!s) return;
    printf("\nL2 norm per layer over %zu samples (%zu iterations x %zu workers; finite values):\n",
           S, T, P);
    printf("%5s  %-40s %-16s %10s %12s %12s %12s %10s\n", "index", "name", "shape", "numel", "min",
           "median", "max", "nonfinite");
    for (size_t L = 0; L < m->nlayers; L++) {
        const deftsim_layer *ly = &m->layers[L];
        const double *x = s->norms + L * S;
        char shape[160];
        shape_string(ly, shape, sizeof shape);
        printf("%5zu  %-40s %-16s %10" PRIu64 " %12.5g %12.5g %12.5g %10" PRIu64 "\n", L, ly->name,
               shape, ly->numel, x[0], median_sorted(x, S), x[S - 1], s->nonfinite_layer[L]);
    }
    uint64_t total = 0;
    for (size_t k = 0; k < S; k++) total += s->nonfinite_iw[k];
    if (!total) {
        printf("\nnon-finite values: none\n");
        return;
    }
    printf("\nnon-finite values: %" PRIu64 " (iteration, worker: count; 'deftsim trace check' "
           "locates the first)\n", total);
    for (size_t i = 0; i < T; i++)
        for (size_t w = 0; w < P; w++)
            if (s->nonfinite_iw[i * P + w])
                printf("  iteration %" PRIu64 ", worker %zu: %" PRIu64 "\n",
                       deftsim_trace_iteration_id(t, i), w, s->nonfinite_iw[i * P + w]);
}

static int cmd_info(int argc, char **argv)
{
    static const struct option opts[] = {
        {"json", no_argument, NULL, 'j'},
        {"no-stats", no_argument, NULL, 'n'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int json = 0, stats = 1, c;
    while ((c = getopt_long(argc, argv, "jnh", opts, NULL)) != -1) {
        switch (c) {
        case 'j': json = 1; break;
        case 'n': stats = 0; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind + 1 != argc) return deftsim_cli_usage_error("trace", "info needs exactly one DIR");
    if (deftsim_cli_parse_only) return 0;
    deftsim_trace *t;
    deftsim_status st = deftsim_trace_open(argv[optind], &t);
    if (st) return deftsim_cli_fail(st);
    trace_stats s = {0};
    int rc = 0;
    if (stats && (st = gather_stats(t, &s))) {
        rc = deftsim_cli_fail(st);
    } else if (json) {
        rc = print_info_json(t, stats ? &s : NULL);
    } else {
        print_info_text(t, stats ? &s : NULL);
    }
    free(s.norms);
    free(s.nonfinite_layer);
    free(s.nonfinite_iw);
    deftsim_trace_close(t);
    return rc;
}

/* ---- check, dump --------------------------------------------------------------------- */

static int cmd_check(int argc, char **argv)
{
    if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        usage(stdout);
        return 0;
    }
    if (argc != 2) return deftsim_cli_usage_error("trace", "check needs exactly one DIR");
    if (deftsim_cli_parse_only) return 0;
    deftsim_trace *t;
    deftsim_status st = deftsim_trace_open(argv[1], &t);
    if (st) return deftsim_cli_fail(st);
    for (size_t i = 0; i < deftsim_trace_iterations(t) && !st; i++)
        for (uint32_t w = 0; w < deftsim_trace_workers(t) && !st; w++)
            st = deftsim_trace_check_finite(t, i, w);
    if (!st)
        printf("%s: %zu iterations x %u workers, every value finite\n", argv[1],
               deftsim_trace_iterations(t), deftsim_trace_workers(t));
    deftsim_trace_close(t);
    return st ? deftsim_cli_fail(st) : 0;
}

static int parse_u64_opt(const char *name, const char *arg, uint64_t *out)
{
    if (deftsim_parse_u64(arg, out))
        return deftsim_cli_usage_error("trace", "%s: '%s' is not a non-negative integer", name,
                                       arg);
    return 0;
}

static int cmd_dump(int argc, char **argv)
{
    static const struct option opts[] = {
        {"iteration", required_argument, NULL, 'i'},
        {"worker", required_argument, NULL, 'w'},
        {"offset", required_argument, NULL, 'o'},
        {"count", required_argument, NULL, 'c'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    uint64_t iter = 0, worker = 0, offset = 0, count = UINT64_MAX;
    int have_iter = 0, have_worker = 0, c, rc;
    while ((c = getopt_long(argc, argv, "i:w:o:c:h", opts, NULL)) != -1) {
        switch (c) {
        case 'i': if ((rc = parse_u64_opt("--iteration", optarg, &iter))) return rc; have_iter = 1; break;
        case 'w': if ((rc = parse_u64_opt("--worker", optarg, &worker))) return rc; have_worker = 1; break;
        case 'o': if ((rc = parse_u64_opt("--offset", optarg, &offset))) return rc; break;
        case 'c': if ((rc = parse_u64_opt("--count", optarg, &count))) return rc; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind + 1 != argc) return deftsim_cli_usage_error("trace", "dump needs exactly one DIR");
    if (!have_iter || !have_worker)
        return deftsim_cli_usage_error("trace", "dump needs --iteration and --worker");
    if (deftsim_cli_parse_only) return 0;
    deftsim_trace *t;
    deftsim_status st = deftsim_trace_open(argv[optind], &t);
    if (st) return deftsim_cli_fail(st);
    size_t idx;
    const float *g = NULL;
    uint64_t n = deftsim_trace_model(t)->numel;
    if (!(st = deftsim_trace_find_iteration(t, iter, &idx))) {
        if (worker >= deftsim_trace_workers(t))
            st = deftsim_error_set(DEFTSIM_E_INPUT, "%s: worker %" PRIu64 " out of range (%u "
                                   "workers)", argv[optind], worker, deftsim_trace_workers(t));
        else if (offset > n)
            st = deftsim_error_set(DEFTSIM_E_INPUT, "--offset %" PRIu64 " beyond the gradient's %"
                                   PRIu64 " elements", offset, n);
        else
            st = deftsim_trace_gradient(t, idx, (uint32_t)worker, &g);
    }
    if (!st) {
        if (count > n - offset) count = n - offset;
        for (uint64_t i = 0; i < count; i++) printf("%.9g\n", (double)g[offset + i]);
    }
    deftsim_trace_close(t);
    return st ? deftsim_cli_fail(st) : 0;
}

/* ---- import --------------------------------------------------------------------------- */

static int cmd_import(int argc, char **argv)
{
    if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        usage(stdout);
        return 0;
    }
    if (argc != 2) return deftsim_cli_usage_error("trace", "import needs exactly one DIR");
    if (deftsim_cli_parse_only) return 0;
    int written = 0;
    deftsim_status st = deftsim_trace_import(argv[1], &written);
    if (st) return deftsim_cli_fail(st);
    deftsim_trace *t;
    if ((st = deftsim_trace_open(argv[1], &t))) return deftsim_cli_fail(st);
    printf("%s/%s: %s (%zu iterations x %u ranks, %zu tensors, %" PRIu64 " elements)\n",
           argv[1], DEFTSIM_TRACE_MANIFEST, written ? "written" : "already there, unchanged",
           deftsim_trace_iterations(t), deftsim_trace_workers(t),
           deftsim_trace_model(t)->nlayers, deftsim_trace_model(t)->numel);
    const char *order = json_string_value(json_object_get(deftsim_trace_provenance(t),
                                                          "layer_order"));
    if (order && strncmp(order, "sorted", 6) == 0)
        fprintf(stderr, "deftsim: note: %s: the files carry no __metadata__.%s, so the layers "
                "are in name order, not PyTorch's parameter order (traces/FORMAT.md)\n", argv[1],
                DEFTSIM_TRACE_ORDER_KEY);
    deftsim_trace_close(t);
    return 0;
}

/* ---- gen, bench ---------------------------------------------------------------------- */

static int parse_double_opt(const char *name, const char *arg, double *out)
{
    if (deftsim_parse_double(arg, out))
        return deftsim_cli_usage_error("trace", "%s: '%s' is not a finite number", name, arg);
    return 0;
}

/* p's fields from a parameter file's [synthetic] keys, read as [gradients] params reads it;
 * the seed stays p's. */
static int gen_params_file(const char *params, deftsim_gen_params *p)
{
    deftsim_config *cfg;
    deftsim_status st = deftsim_config_default("gen", &cfg);
    if (st) return deftsim_cli_fail(st);
    char set[4200];
    snprintf(set, sizeof set, "gradients.params=%s", params);
    if ((st = deftsim_config_apply_override(cfg, set))) {
        deftsim_config_free(cfg);
        return deftsim_cli_fail(st);
    }
    uint64_t seed = p->seed;
    deftsim_gradsrc_gen_params(cfg, p);
    p->seed = seed;
    deftsim_config_free(cfg);
    return 0;
}

static int cmd_gen(int argc, char **argv)
{
    static const struct option opts[] = {
        {"model", required_argument, NULL, 'm'},
        {"workers", required_argument, NULL, 'P'},
        {"iterations", required_argument, NULL, 'T'},
        {"seed", required_argument, NULL, 's'},
        {"output", required_argument, NULL, 'o'},
        {"scale-decades", required_argument, NULL, 1},
        {"signal", required_argument, NULL, 2},
        {"tail", required_argument, NULL, 3},
        {"drift", required_argument, NULL, 4},
        {"bias-shift", required_argument, NULL, 5},
        {"params", required_argument, NULL, 6},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    deftsim_gen_params p;
    deftsim_gen_params_default(&p);
    const char *model = NULL, *dir = NULL, *params = NULL;
    uint64_t workers = 0, iterations = 0;
    int have_seed = 0, c, rc;
    double opt[5];
    int have_opt[5] = {0};
    while ((c = getopt_long(argc, argv, "m:P:T:s:o:h", opts, NULL)) != -1) {
        switch (c) {
        case 'm': model = optarg; break;
        case 'P': if ((rc = parse_u64_opt("--workers", optarg, &workers))) return rc; break;
        case 'T': if ((rc = parse_u64_opt("--iterations", optarg, &iterations))) return rc; break;
        case 's': if ((rc = parse_u64_opt("--seed", optarg, &p.seed))) return rc; have_seed = 1; break;
        case 'o': dir = optarg; break;
        case 1: case 2: case 3: case 4: case 5:
            if ((rc = parse_double_opt(opts[c + 4].name, optarg, &opt[c - 1]))) return rc;
            have_opt[c - 1] = 1;
            break;
        case 6: params = optarg; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc)
        return deftsim_cli_usage_error("trace", "gen: unexpected argument '%s'", argv[optind]);
    if (!model || !dir || !workers || !iterations || !have_seed)
        return deftsim_cli_usage_error("trace",
                                       "gen needs --model, --workers >= 1, --iterations >= 1, "
                                       "--seed and -o");
    if (workers > DEFTSIM_TRACE_MAX_WORKERS)
        return deftsim_cli_usage_error("trace", "gen: --workers must be at most %u",
                                       DEFTSIM_TRACE_MAX_WORKERS);
    if (iterations - 1 > DEFTSIM_GEN_MAX_ITERATION)
        return deftsim_cli_usage_error("trace", "gen: --iterations must be at most 2^32");
    deftsim_status st;
    if (params && (rc = gen_params_file(params, &p))) return rc;
    double *field[5] = {&p.scale_decades, &p.signal, &p.tail, &p.drift, &p.bias_shift};
    for (int i = 0; i < 5; i++)
        if (have_opt[i]) *field[i] = opt[i];
    deftsim_model *m;
    st = deftsim_model_load(model, &m);
    if (st) return deftsim_cli_fail(st);
    deftsim_gen *g;
    if ((st = deftsim_gen_new(m, &p, &g))) {
        deftsim_model_free(m);
        return deftsim_cli_fail(st);
    }
    if (deftsim_cli_parse_only) {
        deftsim_gen_free(g);
        deftsim_model_free(m);
        return 0;
    }
    double t0 = deftsim_now();
    st = deftsim_gen_write_trace(g, dir, (uint32_t)workers, iterations);
    double dt = deftsim_now() - t0;
    if (!st)
        fprintf(stderr, "deftsim trace gen: %s: %s, %" PRIu64 " workers x %" PRIu64
                " iterations x %" PRIu64 " elements in %.2f s\n", dir, m->name, workers,
                iterations, m->numel, dt);
    deftsim_gen_free(g);
    deftsim_model_free(m);
    return st ? deftsim_cli_fail(st) : 0;
}

static int cmd_bench(int argc, char **argv)
{
    static const struct option opts[] = {
        {"model", required_argument, NULL, 'm'},
        {"workers", required_argument, NULL, 'P'},
        {"seconds", required_argument, NULL, 't'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *model = NULL;
    uint64_t workers = 8;
    double seconds = 1.0;
    int c, rc;
    while ((c = getopt_long(argc, argv, "m:P:t:h", opts, NULL)) != -1) {
        switch (c) {
        case 'm': model = optarg; break;
        case 'P': if ((rc = parse_u64_opt("--workers", optarg, &workers))) return rc; break;
        case 't': if ((rc = parse_double_opt("--seconds", optarg, &seconds))) return rc; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc)
        return deftsim_cli_usage_error("trace", "bench: unexpected argument '%s'", argv[optind]);
    if (!model) return deftsim_cli_usage_error("trace", "bench needs --model");
    if (workers < 1 || workers > 1024)
        return deftsim_cli_usage_error("trace", "bench: --workers must be in [1, 1024]");
    if (seconds <= 0 || seconds > 600)
        return deftsim_cli_usage_error("trace", "bench: --seconds must be in (0, 600]");
    deftsim_model *m;
    deftsim_status st = deftsim_model_load(model, &m);
    if (st) return deftsim_cli_fail(st);
    if (deftsim_cli_parse_only) {
        deftsim_model_free(m);
        return 0;
    }
    deftsim_gen_params p;
    deftsim_gen_params_default(&p);
    deftsim_gen *g = NULL;
    float *buf = NULL;
    float **outs = calloc(workers, sizeof *outs);
    size_t bytes;
    if (!outs || deftsim_mul_size((size_t)m->numel, (size_t)workers * sizeof(float), &bytes) ||
        !(buf = malloc(bytes))) {
        st = deftsim_error_nomem("bench: %" PRIu64 " x %" PRIu64 " floats", workers, m->numel);
        goto done;
    }
    for (uint64_t w = 0; w < workers; w++) outs[w] = buf + w * m->numel;
    if ((st = deftsim_gen_new(m, &p, &g))) goto done;
    printf("model %s, %" PRIu64 " elements; best of repeated fills, one thread\n", m->name, m->numel);
    printf("%-10s %-22s %14s %16s\n", "kernel", "call", "ns/element", "elements/s");
    for (size_t k = 0; k < deftsim_gen_kernel_count(); k++) {
        const char *kn = deftsim_gen_kernel_name(k);
        /* The scalar reference exists to be read and ported, not run on whole models. */
        if (!strcmp(kn, "reference") || deftsim_gen_use_kernel(g, kn)) continue;
        for (int many = 0; many < 2; many++) {
            double best = INFINITY, spent = 0;
            uint64_t per = many ? workers : 1;
            for (int rep = 0; rep < 2 || spent < seconds; rep++) {
                double t0 = deftsim_now();
                st = many ? deftsim_gen_fill_workers(g, (uint64_t)rep, 0, (uint32_t)workers, 0,
                                                     m->numel, outs)
                          : deftsim_gen_fill(g, (uint64_t)rep, 0, 0, m->numel, buf);
                if (st) goto done;
                double dt = deftsim_now() - t0;
                spent += dt;
                if (dt < best) best = dt;
            }
            double elems = (double)m->numel * (double)per;
            char call[32];
            snprintf(call, sizeof call, many ? "fill_workers(P=%" PRIu64 ")" : "fill", workers);
            printf("%-10s %-22s %14.3f %16.4g\n", kn, call, best * 1e9 / elems, elems / best);
            fflush(stdout);
        }
    }
done:
    deftsim_gen_free(g);
    free(buf);
    free(outs);
    deftsim_model_free(m);
    return st ? deftsim_cli_fail(st) : 0;
}

int deftsim_cmd_trace(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *sub = argv[1];
    if (!strcmp(sub, "--help") || !strcmp(sub, "-h") || !strcmp(sub, "help")) {
        usage(stdout);
        return 0;
    }
    static const struct {
        const char *name;
        int (*fn)(int, char **);
    } subs[] = {
        {"info", cmd_info}, {"check", cmd_check}, {"dump", cmd_dump}, {"import", cmd_import},
        {"gen", cmd_gen},   {"bench", cmd_bench},   {"record", deftsim_cmd_trace_record},
        {"calibrate", deftsim_cmd_trace_calibrate},
    };
    for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++) {
        if (!strcmp(subs[i].name, sub)) {
            /* 0, not 1: glibc then starts afresh, with permutation, so options may follow
             * DIR (main's scan left it in stop-at-first-non-option mode). */
            optind = 0;
            return subs[i].fn(argc - 1, argv + 1);
        }
    }
    return deftsim_cli_usage_error("trace", "'%s' is not a trace command (info, check, dump, import, "
                                   "gen, bench, record, calibrate)", sub);
}
