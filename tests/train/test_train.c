/* test_train.c - training with the sparsifiers in the loop, and recording traces.
 *
 * Small runs: the real MLP on the first few thousand Fashion-MNIST images, tens of
 * iterations. */
#include <criterion/criterion.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "deftsim_nn.h"
#include "deftsim_trace.h"
#include "deftsim_train.h"
#include "deftsim_util.h"

static char tmp[64];

static void setup(void)
{
    snprintf(tmp, sizeof tmp, "/tmp/deftsim-train-XXXXXX");
    cr_assert(mkdtemp(tmp));
    const char *root = getenv("DEFTSIM_SOURCE_ROOT");
    cr_assert(root, "DEFTSIM_SOURCE_ROOT is not set");
    cr_assert_eq(chdir(root), 0);
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    cr_expect_eq(system(cmd), 0);
}

/* A small MLP scenario; extra lines are appended to the [train] section. */
static deftsim_config *scenario(const char *extra_train, const char *methods, const char *counts)
{
    char text[2048];
    snprintf(text, sizeof text,
             "[scenario]\nname = t\noutput = %s/out\niterations = 80\nseed = 3\n"
             "[gradients]\nmodel = train/models/fmnist_mlp.csv\n"
             "[sparsify]\nmethods = %s\ndensities = 0.01\n"
             "[workers]\ncounts = %s\n"
             "[train]\ntrain_samples = 2048\neval_samples = 500\neval_every = 40\n"
             "batch_size = 16\n%s",
             tmp, methods, counts, extra_train);
    deftsim_config *cfg;
    cr_assert_eq(deftsim_config_parse(text, "test.ini", NULL, 0, &cfg), DEFTSIM_OK, "%s",
                 deftsim_error_message());
    return cfg;
}

/* The loss falls: the first 40 iterations' mean training loss against the last 40's, and the
 * test accuracy well above chance (10%), for dense training and sparsified ones. */
Test(train, loss_falls, .init = setup, .fini = teardown)
{
    deftsim_config *cfg = scenario("", "dense", "2");
    deftsim_trainer *tr;
    cr_assert_eq(deftsim_trainer_new(cfg, &tr), DEFTSIM_OK, "%s", deftsim_error_message());
    cr_expect_eq(deftsim_trainer_epoch_iterations(tr, 2), 64);
    cr_expect_eq(deftsim_trainer_iterations(tr, 2), 80);
    const deftsim_method methods[] = {DEFTSIM_METHOD_DENSE, DEFTSIM_METHOD_DEFT,
                                      DEFTSIM_METHOD_TOPK, DEFTSIM_METHOD_DGC};
    for (size_t i = 0; i < 4; i++) {
        deftsim_train_result r;
        double d = methods[i] == DEFTSIM_METHOD_DENSE ? 1.0 : 0.01;
        cr_assert_eq(deftsim_trainer_point(tr, methods[i], d, 2, NULL, &r), DEFTSIM_OK, "%s",
                     deftsim_error_message());
        const char *name = deftsim_method_name(methods[i]);
        /* Rows at iterations 0 (the initial model), 40 and 80. */
        cr_assert_eq(r.nrows, 3, "%s: %zu rows", name, r.nrows);
        cr_expect_eq(r.iterations, 80);
        cr_expect_eq(r.rows[0].iteration, 0);
        cr_expect_eq(r.rows[0].samples, 0);
        cr_expect(isnan(r.rows[0].train_loss) && isnan(r.rows[0].buildup), "%s: row 0 trained", name);
        cr_expect(isfinite(r.rows[0].test_loss) && r.rows[0].test_accuracy < 0.3,
                  "%s: the initial model's test accuracy %g", name, r.rows[0].test_accuracy);
        cr_expect(isnan(r.rows[0].sim_seconds) && isnan(r.rows[2].sim_seconds)); /* not simulated */
        cr_expect_eq(r.rows[2].iteration, 80);
        cr_expect_eq(r.rows[2].samples, 80 * 2 * 16);
        cr_expect(fabs(r.rows[2].epoch - 80.0 / 64) < 1e-12);
        cr_expect_not(r.diverged);
        fprintf(stderr, "%-6s loss %.3f -> %.3f, test accuracy %.3f -> %.3f, buildup %.2f\n", name,
                r.rows[1].train_loss, r.rows[2].train_loss, r.rows[0].test_accuracy,
                r.rows[2].test_accuracy, r.rows[2].buildup);
        cr_expect_lt(r.rows[2].train_loss, 0.8 * r.rows[1].train_loss, "%s: loss %g -> %g", name,
                     r.rows[1].train_loss, r.rows[2].train_loss);
        cr_expect_gt(r.rows[2].test_accuracy, 0.55, "%s: test accuracy %g", name,
                     r.rows[2].test_accuracy);
        if (methods[i] == DEFTSIM_METHOD_DENSE) {
            cr_expect_eq(r.rows[2].buildup, 1.0);
            cr_expect_eq(r.k, r.n);
        } else {
            cr_expect_eq(r.k, (uint64_t)(0.01 * 535818));
        }
        deftsim_train_result_free(&r);
    }
    deftsim_trainer_free(tr);
    deftsim_config_free(cfg);
}

/* Every method at a worker count that is not a power of two (gTop-k folds a rank), and the
 * same point twice gives the same numbers. */
Test(train, every_method_runs_and_repeats, .init = setup, .fini = teardown)
{
    deftsim_config *cfg = scenario("", "dense", "3");
    deftsim_trainer *tr;
    cr_assert_eq(deftsim_trainer_new(cfg, &tr), DEFTSIM_OK, "%s", deftsim_error_message());
    deftsim_train_options opt;
    deftsim_train_options_default(&opt);
    opt.iterations = 6;
    for (int m = 0; m < DEFTSIM_METHOD_COUNT; m++) {
        deftsim_train_result a, b;
        cr_assert_eq(deftsim_trainer_point(tr, (deftsim_method)m, 0.001, 3, &opt, &a), DEFTSIM_OK,
                     "%s: %s", deftsim_method_name((deftsim_method)m), deftsim_error_message());
        cr_assert_eq(deftsim_trainer_point(tr, (deftsim_method)m, 0.001, 3, &opt, &b), DEFTSIM_OK);
        cr_assert_eq(a.nrows, 2); /* iteration 0 (the initial model) and 6 */
        cr_expect_eq(a.rows[0].iteration, 0);
        cr_expect_eq(a.rows[0].test_loss, b.rows[0].test_loss);
        cr_expect_eq(a.rows[1].iteration, 6);
        cr_expect(isfinite(a.rows[1].test_loss));
        cr_expect_eq(a.rows[1].train_loss, b.rows[1].train_loss, "%s: not repeatable",
                     deftsim_method_name((deftsim_method)m));
        cr_expect_eq(a.rows[1].test_loss, b.rows[1].test_loss);
        if (m != DEFTSIM_METHOD_DENSE) cr_expect_gt(a.rows[1].buildup, 0);
        deftsim_train_result_free(&a);
        deftsim_train_result_free(&b);
    }
    deftsim_trainer_free(tr);
    deftsim_config_free(cfg);
}

/* The optimizer, worked by hand for the first two iterations from the recorded gradients:
 * dense (weight decay and momentum after aggregation) and DGC (momentum correction on the
 * workers, weight decay with its own momentum; density 1 sends everything, so the masking
 * clears every worker's momentum after each step). */
typedef struct {
    float *g[2][2]; /* [iteration][worker] */
    uint64_t n;
} grab;

static deftsim_status grab_grads(void *ctx, uint64_t t, uint32_t P, const float *const *grads)
{
    grab *gb = ctx;
    for (uint32_t w = 0; w < P && t < 2; w++) memcpy(gb->g[t][w], grads[w], gb->n * sizeof(float));
    return DEFTSIM_OK;
}

Test(train, optimizer_by_hand, .init = setup, .fini = teardown)
{
    deftsim_config *cfg = scenario("lr = 0.1\nmomentum = 0.5\nweight_decay = 0.01\n", "dense", "2");
    deftsim_trainer *tr;
    cr_assert_eq(deftsim_trainer_new(cfg, &tr), DEFTSIM_OK, "%s", deftsim_error_message());
    const deftsim_model *m = deftsim_trainer_model(tr);
    uint64_t n = m->numel;
    grab gb = {.n = n};
    for (int t = 0; t < 2; t++)
        for (int w = 0; w < 2; w++) gb.g[t][w] = malloc(n * sizeof(float));
    float *p0 = malloc(n * 4), *got = malloc(n * 4);
    deftsim_nn_spec spec;
    deftsim_nn_spec_default(DEFTSIM_NN_MLP, &spec);
    deftsim_nn *net;
    cr_assert_eq(deftsim_nn_new(&spec, 1, &net), DEFTSIM_OK);
    deftsim_nn_init(net, 3, p0);
    deftsim_nn_free(net);

    const float lr = 0.1f, mu = 0.5f, wd = 0.01f;
    for (int dgc = 0; dgc < 2; dgc++) {
        deftsim_train_options opt;
        deftsim_train_options_default(&opt);
        opt.iterations = 2;
        opt.evaluate = 0;
        opt.on_grads = grab_grads;
        opt.ctx = &gb;
        opt.params_out = got;
        deftsim_train_result r;
        cr_assert_eq(deftsim_trainer_point(tr, dgc ? DEFTSIM_METHOD_DGC : DEFTSIM_METHOD_DENSE, 1.0,
                                           2, &opt, &r),
                     DEFTSIM_OK, "%s", deftsim_error_message());
        deftsim_train_result_free(&r);
        size_t bad = 0, first_bad = 0;
        for (size_t L = 0; L < m->nlayers; L++) {
            int sparse = dgc && m->layers[L].ndim > 1;
            for (uint64_t i = m->layers[L].offset; i < m->layers[L].offset + m->layers[L].numel; i++) {
                float p = p0[i], mom = 0, b = 0;
                for (int t = 0; t < 2; t++) {
                    float a = (gb.g[t][0][i] + gb.g[t][1][i]) / 2.0f;
                    if (!dgc) {
                        mom = mu * mom + (a + wd * p);
                        p -= lr * mom;
                    } else {
                        float step = a;
                        if (!sparse) {
                            mom = mu * mom + a;
                            step = mom;
                        }
                        b = mu * b + wd * p;
                        p -= lr * (b + step);
                    }
                }
                if (fabsf(p - got[i]) > 1e-6f * (1 + fabsf(p))) {
                    if (!bad) first_bad = i;
                    bad++;
                }
            }
        }
        cr_expect_eq(bad, 0, "%s: %zu weights differ from the hand computation, first %zu",
                     dgc ? "dgc" : "dense", bad, first_bad);
    }
    for (int t = 0; t < 2; t++)
        for (int w = 0; w < 2; w++) free(gb.g[t][w]);
    free(p0);
    free(got);
    deftsim_trainer_free(tr);
    deftsim_config_free(cfg);
}

/* Recording writes exactly the gradients training computes (replayed from the trace and
 * compared bit for bit), and a second recording writes the same bytes. */
typedef struct {
    deftsim_trace *t;
    size_t matched, differing;
} replay;

static deftsim_status compare_grads(void *ctx, uint64_t it, uint32_t P, const float *const *grads)
{
    replay *rp = ctx;
    size_t idx;
    if (deftsim_trace_find_iteration(rp->t, it, &idx)) return DEFTSIM_OK;
    uint64_t n = deftsim_trace_model(rp->t)->numel;
    for (uint32_t w = 0; w < P; w++) {
        const float *g;
        deftsim_status st = deftsim_trace_gradient(rp->t, idx, w, &g);
        if (st) return st;
        if (memcmp(g, grads[w], n * sizeof(float))) rp->differing++;
        else rp->matched++;
    }
    return DEFTSIM_OK;
}

static int same_file(const char *a, const char *b)
{
    char *x, *y;
    size_t lx, ly;
    if (deftsim_read_file(a, &x, &lx) || deftsim_read_file(b, &y, &ly)) return 0;
    int same = lx == ly && !memcmp(x, y, lx);
    free(x);
    free(y);
    return same;
}

Test(train, record_then_replay, .init = setup, .fini = teardown)
{
    deftsim_config *cfg = scenario("record = 0, 3, 7\n", "dense", "2");
    char d1[128], d2[128];
    snprintf(d1, sizeof d1, "%s/rec1", tmp);
    snprintf(d2, sizeof d2, "%s/rec2", tmp);
    cr_assert_eq(deftsim_train_record(cfg, DEFTSIM_METHOD_TOPK, 0.01, 2, d1, NULL), DEFTSIM_OK, "%s",
                 deftsim_error_message());
    replay rp = {0};
    cr_assert_eq(deftsim_trace_open(d1, &rp.t), DEFTSIM_OK, "%s", deftsim_error_message());
    cr_expect_eq(deftsim_trace_workers(rp.t), 2);
    cr_assert_eq(deftsim_trace_iterations(rp.t), 3);
    cr_expect_eq(deftsim_trace_iteration_id(rp.t, 2), 7);
    cr_expect_str_eq(deftsim_trace_model(rp.t)->name, "fmnist_mlp");
    const json_t *prov = deftsim_trace_provenance(rp.t);
    cr_expect_eq(json_integer_value(json_object_get(prov, "seed")), 3);
    cr_expect_eq(json_integer_value(json_object_get(prov, "P")), 2);
    cr_expect_eq(json_integer_value(json_object_get(prov, "batch_size")), 16);
    cr_expect_eq(json_real_value(json_object_get(prov, "lr")), 0.05);
    cr_expect_str_eq(json_string_value(json_object_get(prov, "model")), "fmnist_mlp");
    cr_expect_str_eq(json_string_value(json_object_get(json_object_get(prov, "aggregation"), "method")),
                     "topk");
    cr_expect_eq(json_array_size(json_object_get(prov, "iterations")), 3);
    cr_expect_eq(json_integer_value(json_object_get(json_object_get(prov, "dataset"), "train_images")),
                 2048);

    deftsim_trainer *tr;
    cr_assert_eq(deftsim_trainer_new(cfg, &tr), DEFTSIM_OK);
    deftsim_train_options opt;
    deftsim_train_options_default(&opt);
    opt.iterations = 8;
    opt.evaluate = 0;
    opt.on_grads = compare_grads;
    opt.ctx = &rp;
    deftsim_train_result r;
    cr_assert_eq(deftsim_trainer_point(tr, DEFTSIM_METHOD_TOPK, 0.01, 2, &opt, &r), DEFTSIM_OK);
    deftsim_train_result_free(&r);
    cr_expect_eq(rp.matched, 6, "%zu gradients matched", rp.matched);
    cr_expect_eq(rp.differing, 0, "%zu gradients differ from the trace", rp.differing);
    /* A different method trains other weights: the later gradients differ, the first not. */
    rp.matched = rp.differing = 0;
    cr_assert_eq(deftsim_trainer_point(tr, DEFTSIM_METHOD_DENSE, 1, 2, &opt, &r), DEFTSIM_OK);
    deftsim_train_result_free(&r);
    cr_expect_eq(rp.matched, 2);
    cr_expect_eq(rp.differing, 4);
    deftsim_trace_close(rp.t);
    deftsim_trainer_free(tr);

    cr_assert_eq(deftsim_train_record(cfg, DEFTSIM_METHOD_TOPK, 0.01, 2, d2, NULL), DEFTSIM_OK);
    const char *files[] = {"iter_000000.safetensors", "iter_000003.safetensors",
                           "iter_000007.safetensors", "manifest.json"};
    for (size_t i = 0; i < 4; i++) {
        char a[300], b[300];
        snprintf(a, sizeof a, "%s/%s", d1, files[i]);
        snprintf(b, sizeof b, "%s/%s", d2, files[i]);
        cr_expect(same_file(a, b), "%s differs between two recordings", files[i]);
    }
    deftsim_config_free(cfg);
}

Test(train, bad_scenarios, .init = setup, .fini = teardown)
{
    deftsim_trainer *tr = NULL;
    deftsim_config *cfg = scenario("model = cnn\n", "dense", "2");
    cr_expect_eq(deftsim_trainer_new(cfg, &tr), DEFTSIM_E_INPUT);
    cr_expect_str_eq(deftsim_error_message(),
                     "test.ini:7: [gradients] model: train/models/fmnist_mlp.csv is not the table of [train] "
                     "model = cnn (fmnist_cnn): 6 tensors against 8; name the network's own table "
                     "(train/models/fmnist_cnn.csv)");
    deftsim_config_free(cfg);

    cfg = scenario("", "dense", "2, 4");
    cr_assert_eq(deftsim_config_apply_override(cfg, "train.batch_size=1024"), DEFTSIM_OK);
    cr_expect_eq(deftsim_trainer_new(cfg, &tr), DEFTSIM_E_INPUT);
    cr_expect_str_eq(deftsim_error_message(),
                     "--set train.batch_size: P = 4 workers x 1024 images = 4096 per iteration, more "
                     "than the 2048 training images");
    deftsim_config_free(cfg);

    cfg = scenario("data = /nonexistent\n", "dense", "2");
    cr_expect_eq(deftsim_trainer_new(cfg, &tr), DEFTSIM_E_INPUT);
    cr_expect(strstr(deftsim_error_message(),
                     "[train] data: /nonexistent/train-images-idx3-ubyte.gz: cannot open"),
              "%s", deftsim_error_message());
    deftsim_config_free(cfg);

    cfg = scenario("", "dense", "2");
    cr_assert_eq(deftsim_config_apply_override(cfg, "device.kind=cuda"), DEFTSIM_OK);
    cr_expect_eq(deftsim_trainer_new(cfg, &tr), DEFTSIM_E_INPUT);
    cr_expect_str_eq(deftsim_error_message(),
                     "--set device.kind = cuda: deftsim train keeps the workers' accumulators in host "
                     "memory, which only the cpu kernels read; set kind = cpu");
    deftsim_config_free(cfg);

    cfg = scenario("", "dense", "2");
    cr_expect_eq(deftsim_train_record(cfg, DEFTSIM_METHOD_DENSE, 1, 2, "/proc/nope/x", NULL),
                 DEFTSIM_E_IO);
    deftsim_config_free(cfg);
    cr_expect_null(tr);
}

/* The committed tables of train/models/ are the networks' own. */
Test(train, model_tables_match_networks, .init = setup, .fini = teardown)
{
    const char *files[] = {"train/models/fmnist_mlp.csv", "train/models/fmnist_cnn.csv"};
    for (int k = 0; k < 2; k++) {
        deftsim_nn_spec s;
        deftsim_nn_spec_default((deftsim_nn_kind)k, &s);
        deftsim_nn *net;
        cr_assert_eq(deftsim_nn_new(&s, 1, &net), DEFTSIM_OK);
        deftsim_model *m;
        cr_assert_eq(deftsim_model_load(files[k], &m), DEFTSIM_OK, "%s", deftsim_error_message());
        const deftsim_model *nm = deftsim_nn_model(net);
        cr_expect_str_eq(m->name, nm->name);
        cr_expect_eq(m->numel, nm->numel);
        cr_assert_eq(m->nlayers, nm->nlayers);
        for (size_t i = 0; i < m->nlayers; i++) {
            cr_expect_str_eq(m->layers[i].name, nm->layers[i].name);
            cr_expect_eq(m->layers[i].numel, nm->layers[i].numel);
            cr_expect_eq(m->layers[i].ndim, nm->layers[i].ndim);
        }
        deftsim_model_free(m);
        deftsim_nn_free(net);
    }
}

/* Simulated time: the rows' clock advances, and dense training's collectives take at least
 * what a ring allreduce of the whole gradient needs on the default 25 Gbit/s links. */
Test(train, simulated_time, .init = setup, .fini = teardown)
{
    deftsim_config *cfg = scenario("", "dense", "2");
    deftsim_trainer *tr;
    cr_assert_eq(deftsim_trainer_new(cfg, &tr), DEFTSIM_OK, "%s", deftsim_error_message());
    deftsim_train_options opt;
    deftsim_train_options_default(&opt);
    opt.iterations = 6;
    opt.evaluate = 0;
    opt.simulate = 1;
    uint64_t n = deftsim_trainer_model(tr)->numel;
    for (int sparse = 0; sparse < 2; sparse++) {
        deftsim_train_result r;
        deftsim_method m = sparse ? DEFTSIM_METHOD_DEFT : DEFTSIM_METHOD_DENSE;
        cr_assert_eq(deftsim_trainer_point(tr, m, sparse ? 0.01 : 1.0, 2, &opt, &r), DEFTSIM_OK,
                     "%s", deftsim_error_message());
        cr_assert_eq(r.nrows, 1);
        const deftsim_train_row *row = &r.rows[0];
        double floor = 6 * (2.0 * (2 - 1) / 2) * (double)n * 4 / (25e9 / 8);
        fprintf(stderr, "%s: simulated %.6f s, of which collectives %.6f s (ring floor for dense "
                "%.6f s)\n", deftsim_method_name(m), row->sim_seconds, row->sim_comm_seconds, floor);
        cr_expect_gt(row->sim_seconds, row->sim_comm_seconds);
        if (!sparse) cr_expect_geq(row->sim_comm_seconds, floor);
        else cr_expect_lt(row->sim_comm_seconds, floor / 2, "DEFT at 1%% sends far less than dense");
        deftsim_train_result_free(&r);
    }
    opt.simulate = 0;
    deftsim_train_result r;
    cr_assert_eq(deftsim_trainer_point(tr, DEFTSIM_METHOD_DENSE, 1.0, 2, &opt, &r), DEFTSIM_OK);
    cr_expect(isnan(r.rows[0].sim_seconds));
    deftsim_train_result_free(&r);
    deftsim_trainer_free(tr);
    deftsim_config_free(cfg);
}

/* [compute] in training (as in run and sweep, docs/COMPUTE.md): the given forward and backward
 * durations replace the measured gradient step in simulated time, so each of the 6
 * iterations lasts at least forward + backward; without overlap the simulated time exceeds
 * communication by at least that; dense with overlap (DDP buckets) at least forward plus
 * backward. A [compute] table without a row for
 * the trained network is an error naming the table and the model. */
static deftsim_config *with_compute(const char *compute)
{
    char extra[512];
    snprintf(extra, sizeof extra, "[compute]\n%s", compute);
    return scenario(extra, "dense", "2");
}

static double sim_of(deftsim_config *cfg, deftsim_method m, double d, double *comm)
{
    deftsim_trainer *tr;
    cr_assert_eq(deftsim_trainer_new(cfg, &tr), DEFTSIM_OK, "%s", deftsim_error_message());
    deftsim_train_options opt;
    deftsim_train_options_default(&opt);
    opt.iterations = 6;
    opt.evaluate = 0;
    opt.simulate = 1;
    deftsim_train_result r;
    cr_assert_eq(deftsim_trainer_point(tr, m, d, 2, &opt, &r), DEFTSIM_OK, "%s",
                 deftsim_error_message());
    double s = r.rows[r.nrows - 1].sim_seconds;
    *comm = r.rows[r.nrows - 1].sim_comm_seconds;
    deftsim_train_result_free(&r);
    deftsim_trainer_free(tr);
    return s;
}

Test(train, compute_section, .init = setup, .fini = teardown)
{
    const double fw = 0.5, bw = 1.0; /* far above the MLP's own gradient time on this machine */
    double comm0, comm1, comm2, comm3;
    deftsim_config *plain = scenario("", "dense", "2");
    double s0 = sim_of(plain, DEFTSIM_METHOD_TOPK, 0.01, &comm0);
    deftsim_config *c1 = with_compute("forward = 0.5\nbackward = 1\noverlap = 0\n");
    double s1 = sim_of(c1, DEFTSIM_METHOD_TOPK, 0.01, &comm1);
    double s2 = sim_of(c1, DEFTSIM_METHOD_DENSE, 1.0, &comm2);
    deftsim_config *c2 = with_compute("forward = 0.5\nbackward = 1\noverlap = 1\nbucket_mb = 0.05\nfirst_bucket_mb = 0.05\n");
    double s3 = sim_of(c2, DEFTSIM_METHOD_DENSE, 1.0, &comm3);
    fprintf(stderr, "train with [compute]: topk %.6f s (without [compute] %.6f s), dense %.6f s, "
            "dense overlapped %.6f s (collectives %.6f, %.6f)\n", s1, s0, s2, s3, comm2, comm3);
    /* Only bounds that hold whatever the measured steps took (the accumulate and update steps
     * stay measured, and a test must not depend on how fast this machine is: under valgrind
     * the MLP's own gradient step takes seconds). That the buckets overlap the backward pass
     * is the simulation's (tests/sim, async_collectives_overlap_compute_in_order). */
    cr_expect_geq(s1, 6 * (fw + bw) + comm1 - 1e-9);
    cr_expect_geq(s2, 6 * (fw + bw) + comm2 - 1e-9);
    cr_expect_geq(s3, 6 * (fw + bw) - 1e-9);
    cr_expect_gt(comm3, 0, "dense with buckets still communicates");
    deftsim_config_free(plain);
    deftsim_config_free(c1);
    deftsim_config_free(c2);
    /* a table without the trained network's row */
    char path[128], text[512];
    snprintf(path, sizeof path, "%s/compute.csv", tmp);
    FILE *f = fopen(path, "w");
    cr_assert(f);
    fprintf(f, "model,device,batch,forward_ms,backward_ms,source\nresnet18,x,16,1,2,s\n");
    fclose(f);
    snprintf(text, sizeof text,
             "[scenario]\nname = t\noutput = %s/out\n[gradients]\nmodel = train/models/fmnist_mlp.csv\n"
             "[compute]\ntable = %s\n", tmp, path);
    deftsim_config *c3 = NULL;
    cr_expect_eq(deftsim_config_parse(text, "test.ini", NULL, 0, &c3), DEFTSIM_E_INPUT);
    fprintf(stderr, "no row: %s\n", deftsim_error_message());
    cr_expect(strstr(deftsim_error_message(), "has no row for model fmnist_mlp"), "%s",
              deftsim_error_message());
    if (c3) deftsim_config_free(c3);
}

/* The progress callback hears one ROW per row of the curve, carrying the point and the row
 * itself, in order; the library prints nothing. */
typedef struct {
    uint64_t iterations[8];
    const char *model;
    size_t n;
    int mismatch;
} row_log;

static void on_train_event(void *user, const deftsim_train_event *ev)
{
    row_log *l = user;
    if (ev->kind != DEFTSIM_TRAIN_ROW || l->n == 8) {
        l->mismatch = 1;
        return;
    }
    if (ev->method != DEFTSIM_METHOD_TOPK || ev->P != 2 || ev->density != 0.01 ||
        ev->iterations != 80)
        l->mismatch = 1;
    l->model = ev->model;
    l->iterations[l->n++] = ev->row->iteration;
}

Test(train, progress_callback_hears_every_row, .init = setup, .fini = teardown)
{
    deftsim_config *cfg = scenario("", "topk", "2");
    deftsim_trainer *tr;
    cr_assert_eq(deftsim_trainer_new(cfg, &tr), DEFTSIM_OK, "%s", deftsim_error_message());
    row_log l;
    memset(&l, 0, sizeof l);
    deftsim_train_options opt;
    deftsim_train_options_default(&opt);
    opt.iterations = 80;
    opt.progress = (deftsim_train_progress){on_train_event, &l};
    deftsim_train_result r;
    cr_assert_eq(deftsim_trainer_point(tr, DEFTSIM_METHOD_TOPK, 0.01, 2, &opt, &r), DEFTSIM_OK,
                 "%s", deftsim_error_message());
    cr_expect_eq(l.mismatch, 0, "only ROW events of this point");
    /* Row 0 (the initial model, nothing trained yet) is recorded but not announced. */
    cr_assert_eq(l.n + 1, r.nrows, "one event per row after iteration 0");
    cr_expect_eq(r.rows[0].iteration, 0);
    for (size_t i = 0; i < l.n; i++) cr_expect_eq(l.iterations[i], r.rows[i + 1].iteration);
    cr_expect_eq(l.iterations[0], 40);
    cr_expect_str_eq(l.model, deftsim_trainer_model(tr)->name);
    deftsim_train_result_free(&r);
    deftsim_trainer_free(tr);
    deftsim_config_free(cfg);
}
