/* test_gpu_sparsify.c - what `[device] kind = cuda` gives the engine, checked against the cpu:
 * every sparsifier run through a "cuda-staged" kernel context and through a "cpu" one on the
 * same accumulators, over several iterations with error feedback, must select the same
 * indices, send the same bytes, aggregate the same values and leave the same residuals, bit
 * for bit (the kernels' contracts: exact sets, ties to the lower index, NaN below every
 * number; IEEE sums in list order). Also the staged operations the sparsifiers do not use
 * (absmax, count_ge, sample_random) against the cpu's.
 *
 * This is the engine's selection path without the engine: the engine needs SimGrid, GSL and
 * inih, which a GPU machine (tests/gpu/run.sh, -Dgpu_only=true) lacks; its `deftsim run` with
 * [device] kind = cuda drives exactly these sparsifiers with such a context.
 *
 * Plain C without Criterion. Prints the seed (DEFTSIM_TEST_SEED replays one) and, per method,
 * the selection seconds on both backends and what the staged context copied. Exit 0: all
 * passed; 1: a check failed; 77: no usable CUDA device (skipped). */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deftsim_kernels.h"
#include "deftsim_model.h"
#include "deftsim_sparsify.h"
#include "gpu_util.h"

static size_t g_checks, g_failures;

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char *fmt, ...)
{
    g_failures++;
    if (g_failures > 40) return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "FAIL: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
}

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        g_checks++;                                                                                \
        if (!(cond)) fail(__VA_ARGS__);                                                            \
    } while (0)

static void *xmalloc(size_t b)
{
    void *p = malloc(b ? b : 1);
    if (!p) {
        fprintf(stderr, "out of memory (%zu bytes)\n", b);
        exit(1);
    }
    return p;
}

/* P persistent accumulators. */
typedef struct {
    float **acc;
} accs;

static float *acc_get(void *ctx, uint32_t w) { return ((accs *)ctx)->acc[w]; }

/* Selection seconds of a step: the phases that decide what is sent, summed over workers. */
static double select_seconds(const deftsim_step_result *r)
{
    double s = 0;
    for (uint32_t w = 0; w < r->P; w++)
        for (size_t i = 0; i < r->nphases; i++)
            if (r->phase_selection[i]) s += r->phase_seconds[(size_t)w * r->nphases + i];
    return s;
}

static int close_enough(double a, double b)
{
    return a == b || fabs(a - b) <= 1e-9 * fmax(fabs(a), fabs(b));
}

static int same_bits(const void *a, const void *b, size_t bytes)
{
    return bytes == 0 || memcmp(a, b, bytes) == 0;
}

/* One method, P and density over `iters` iterations; the accumulators start at zero and get
 * a fresh gradient of `mode` every iteration. */
static void run_case(const deftsim_model *model, deftsim_kctx *cpu, deftsim_kctx *gpu,
                     deftsim_method m, uint32_t P, double d, gu_mode mode, int iters,
                     uint64_t seed)
{
    const size_t n = (size_t)model->numel;
    char label[160];
    snprintf(label, sizeof label, "%s P=%u d=%g %s", deftsim_method_name(m), P, d,
             gu_mode_name(mode));
    deftsim_sparsifier_params p;
    memset(&p, 0, sizeof p);
    p.method = m;
    p.density = d;
    p.P = P;
    p.model = model;
    p.index_bytes = 4;
    p.value_bytes = 4;
    p.wire = DEFTSIM_WIRE_SPEC;
    p.seed = seed;
    deftsim_sparsifier *sc = NULL, *sg = NULL;
    p.kctx = cpu;
    deftsim_status st = deftsim_sparsifier_new(&p, &sc);
    CHECK(!st, "%s: cpu sparsifier: %s", label, deftsim_error_message());
    p.kctx = gpu;
    if (!st) st = deftsim_sparsifier_new(&p, &sg);
    CHECK(!st, "%s: %s sparsifier: %s", label, deftsim_kctx_backend(gpu),
          deftsim_error_message());
    accs ac = {xmalloc(P * sizeof(float *))}, ag = {xmalloc(P * sizeof(float *))};
    for (uint32_t w = 0; w < P; w++) {
        ac.acc[w] = calloc(n, sizeof(float));
        ag.acc[w] = calloc(n, sizeof(float));
        if (!ac.acc[w] || !ag.acc[w]) {
            fprintf(stderr, "out of memory\n");
            exit(1);
        }
    }
    float *g = xmalloc(n * sizeof *g);
    double tc = 0, tg = 0;
    deftsim_kxfer x0, x1;
    deftsim_kctx_transfers(gpu, &x0);
    for (int it = 0; it < iters && !st; it++) {
        for (uint32_t w = 0; w < P; w++) {
            gu_fill(g, n, mode, seed ^ ((uint64_t)it << 40) ^ ((uint64_t)w << 20) ^ (uint64_t)m);
            for (size_t i = 0; i < n; i++) {
                ac.acc[w][i] += g[i];
                ag.acc[w][i] += g[i];
            }
        }
        deftsim_acc_provider pc = {.get = acc_get, .ctx = &ac, .persistent = 1};
        deftsim_acc_provider pg = {.get = acc_get, .ctx = &ag, .persistent = 1};
        deftsim_step_result *rc = NULL, *rg = NULL;
        st = deftsim_sparsifier_step(sc, (uint64_t)it, &pc, &rc);
        CHECK(!st, "%s it %d: cpu step: %s", label, it, deftsim_error_message());
        if (st) break;
        st = deftsim_sparsifier_step(sg, (uint64_t)it, &pg, &rg);
        CHECK(!st, "%s it %d: %s step: %s", label, it, deftsim_kctx_backend(gpu),
              deftsim_error_message());
        if (st) break;
        tc += select_seconds(rc);
        tg += select_seconds(rg);
        CHECK(rc->nnz == rg->nnz, "%s it %d: nnz %" PRIu64 " (cpu) vs %" PRIu64, label, it,
              rc->nnz, rg->nnz);
        CHECK(rc->kj_total == rg->kj_total && rc->common_count == rg->common_count &&
                  rc->leader == rg->leader,
              "%s it %d: kj_total/common_count/leader differ", label, it);
        if (rc->nnz == rg->nnz) {
            CHECK(same_bits(rc->agg_index, rg->agg_index, rc->nnz * sizeof *rc->agg_index),
                  "%s it %d: aggregate indices differ", label, it);
            CHECK(same_bits(rc->agg_value, rg->agg_value, rc->nnz * sizeof *rc->agg_value),
                  "%s it %d: aggregate values differ", label, it);
        }
        CHECK(same_bits(rc->local_count, rg->local_count, P * sizeof *rc->local_count),
              "%s it %d: local counts differ", label, it);
        CHECK(same_bits(rc->bytes_sent, rg->bytes_sent, P * sizeof *rc->bytes_sent) &&
                  same_bits(rc->bytes_recv, rg->bytes_recv, P * sizeof *rc->bytes_recv),
              "%s it %d: bytes sent or received differ", label, it);
        /* gTop-k sums its dropped values in double in the order its merges list them, which
         * the kernels leave open: the same terms, perhaps summed in another order. */
        CHECK(close_enough(rc->lost_mass, rg->lost_mass) &&
                  close_enough(rc->lost_abs_mass, rg->lost_abs_mass) &&
                  rc->lost_entries == rg->lost_entries,
              "%s it %d: lost mass differs (%.17g vs %.17g)", label, it, rc->lost_mass,
              rg->lost_mass);
        CHECK(rc->schedule.nsteps == rg->schedule.nsteps, "%s it %d: schedules differ in length",
              label, it);
        for (uint32_t w = 0; w < P; w++) {
            const deftsim_kidx *ic, *ig;
            uint64_t cc, cg;
            if (deftsim_sparsifier_selection(sc, w, &ic, &cc) ||
                deftsim_sparsifier_selection(sg, w, &ig, &cg)) {
                CHECK(0, "%s it %d: selection of worker %u: %s", label, it, w,
                      deftsim_error_message());
                continue;
            }
            CHECK(cc == cg && same_bits(ic, ig, cc * sizeof *ic),
                  "%s it %d: worker %u selected differently (%" PRIu64 " vs %" PRIu64 ")", label,
                  it, w, cc, cg);
            CHECK(same_bits(ac.acc[w], ag.acc[w], n * sizeof(float)),
                  "%s it %d: worker %u's residual differs", label, it, w);
        }
    }
    deftsim_kctx_transfers(gpu, &x1);
    printf("%-34s select: cpu %.4f s, %s %.6f s; copies %.4f s, %.1f MB in, "
           "%.1f MB out, %" PRIu64 " calls\n",
           label, tc, deftsim_kctx_backend(gpu), tg, x1.copy_seconds - x0.copy_seconds,
           (double)(x1.bytes_to_device - x0.bytes_to_device) / 1e6,
           (double)(x1.bytes_from_device - x0.bytes_from_device) / 1e6, x1.calls - x0.calls);
    fflush(stdout);
    for (uint32_t w = 0; w < P; w++) {
        free(ac.acc[w]);
        free(ag.acc[w]);
    }
    free(ac.acc);
    free(ag.acc);
    free(g);
    deftsim_sparsifier_free(sc);
    deftsim_sparsifier_free(sg);
}

/* The staged operations no sparsifier calls, against the cpu. */
static void other_ops(deftsim_kctx *cpu, deftsim_kctx *gpu, uint64_t seed)
{
    const size_t n = 100003;
    float *x = xmalloc(n * sizeof *x), *a = xmalloc(64 * sizeof *a), *b = xmalloc(64 * sizeof *b);
    for (int mode = 0; mode < GU_MODE_COUNT; mode++) {
        gu_fill(x, n, (gu_mode)mode, seed + (uint64_t)mode);
        float mc = -1, mg = -2;
        CHECK(!deftsim_k_absmax(cpu, x, n, &mc) && !deftsim_k_absmax(gpu, x, n, &mg) &&
                  same_bits(&mc, &mg, sizeof mc),
              "absmax %s: %g vs %g (%s)", gu_mode_name((gu_mode)mode), mc, mg,
              deftsim_error_message());
        size_t cc = 1, cg = 2;
        CHECK(!deftsim_k_count_ge(cpu, x, n, 1.0f, &cc) && !deftsim_k_count_ge(gpu, x, n, 1.0f, &cg) &&
                  cc == cg,
              "count_ge %s: %zu vs %zu (%s)", gu_mode_name((gu_mode)mode), cc, cg,
              deftsim_error_message());
        CHECK(!deftsim_k_sample_random(cpu, x, n, 64, seed, a) &&
                  !deftsim_k_sample_random(gpu, x, n, 64, seed, b) && same_bits(a, b, 64 * sizeof *a),
              "sample_random %s differs (%s)", gu_mode_name((gu_mode)mode), deftsim_error_message());
    }
    free(x);
    free(a);
    free(b);
}

int main(int argc, char **argv)
{
    /* --backend NAME compares NAME with the cpu instead (--backend cpu checks this program
     * itself on a machine without a GPU: a second cpu context must agree bit for bit). */
    int quick = 0;
    const char *backend = "cuda-staged";
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) quick = 1;
        else if (strcmp(argv[i], "--backend") == 0 && i + 1 < argc) backend = argv[++i];
        else {
            fprintf(stderr, "usage: test_gpu_sparsify [--quick] [--backend NAME]\n");
            return 2;
        }
    }
    const char *why = deftsim_kernels_backend_unavailable(backend);
    if (why) {
        fprintf(stderr, "test_gpu_sparsify: skipped: %s\n", why);
        return GPU_SKIP;
    }
    uint64_t seed = 0x5eed5eedULL;
    const char *env = getenv("DEFTSIM_TEST_SEED");
    if (env) seed = strtoull(env, NULL, 0);
    printf("test_gpu_sparsify: cpu against %s; seed %" PRIu64 " (DEFTSIM_TEST_SEED replays)\n",
           backend, seed);
    deftsim_kctx *cpu = NULL, *gpu = NULL;
    deftsim_model *model = NULL;
    if (deftsim_kctx_new(&cpu, "cpu", 1) || deftsim_kctx_new(&gpu, backend, 1) ||
        deftsim_model_builtin("resnet18_cifar10", &model)) {
        fprintf(stderr, "test_gpu_sparsify: setup: %s\n", deftsim_error_message());
        return 1;
    }
    other_ops(cpu, gpu, seed);
    static const deftsim_method methods[] = {DEFTSIM_METHOD_DEFT, DEFTSIM_METHOD_TOPK,
                                             DEFTSIM_METHOD_TOPK_AG, DEFTSIM_METHOD_CLTK,
                                             DEFTSIM_METHOD_GTOPK, DEFTSIM_METHOD_DGC,
                                             DEFTSIM_METHOD_DENSE,
                                             DEFTSIM_METHOD_MICRO, DEFTSIM_METHOD_EXDYNA};
    static const uint32_t Ps[] = {4, 16};
    static const double ds[] = {0.01, 0.001};
    for (size_t mi = 0; mi < sizeof methods / sizeof methods[0]; mi++)
        for (size_t pi = 0; pi < (quick ? 1 : 2); pi++)
            for (size_t di = 0; di < (quick ? 1 : 2); di++)
                run_case(model, cpu, gpu, methods[mi], Ps[pi], ds[di], GU_NORMAL, quick ? 2 : 3,
                         seed + mi * 1000 + pi * 10 + di);
    /* Ties everywhere: the lower index must win on both. */
    for (size_t mi = 0; mi < sizeof methods / sizeof methods[0]; mi++)
        run_case(model, cpu, gpu, methods[mi], 4, 0.01, GU_TIES, 2, seed + 77 + mi);
    deftsim_kxfer x;
    deftsim_kctx_transfers(gpu, &x);
    printf("%s in all: %" PRIu64 " calls, device %.4f s, copies %.4f s, %.1f MB in, "
           "%.1f MB out, host time outside the operations %.4f s\n",
           backend, x.calls, x.device_seconds, x.copy_seconds, (double)x.bytes_to_device / 1e6,
           (double)x.bytes_from_device / 1e6, x.untimed_seconds);
    deftsim_kctx_free(cpu);
    deftsim_kctx_free(gpu);
    deftsim_model_free(model);
    printf("test_gpu_sparsify: %zu checks, %zu failed\n", g_checks, g_failures);
    return g_failures ? 1 : 0;
}
