/* train_loop.c - data-parallel training with a sparsifier in the loop (deftsim_train.h). */
#include "deftsim_train.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "deftsim_build_info.h"
#include "deftsim_compute.h"
#include "deftsim_csv.h"
#include "deftsim_fmnist.h"
#include "deftsim_folder.h"
#include "deftsim_gradsrc.h"
#include "deftsim_kernels.h"
#include "deftsim_machine.h"
#include "deftsim_manifest.h"
#include "deftsim_nn.h"
#include "deftsim_philox.h"
#include "deftsim_platform.h"
#include "deftsim_point_sim.h"
#include "deftsim_schedule.h"
#include "deftsim_sim.h"
#include "deftsim_sparsify.h"
#include "deftsim_util.h"
#include "train_internal.h"

/* Test images per forward pass of an evaluation: big enough for efficient products, small
 * enough that the CNN's activations stay near 50 MB. */
#define EVAL_CHUNK 250u

/* Philox stream of the per-epoch shuffles ("PERM"). */
#define PERM_STREAM 0x5045524Du

void deftsim_train_options_default(deftsim_train_options *o)
{
    memset(o, 0, sizeof *o);
    o->evaluate = 1;
}

const deftsim_model *deftsim_trainer_model(const deftsim_trainer *tr) { return deftsim_nn_model(tr->net); }

uint64_t deftsim_trainer_epoch_iterations(const deftsim_trainer *tr, uint32_t P)
{
    return (uint64_t)tr->ntrain / ((uint64_t)P * tr->B);
}

uint64_t deftsim_trainer_iterations(const deftsim_trainer *tr, uint32_t P)
{
    if (tr->cfg->train.epochs > 0)
        return (uint64_t)ceil(tr->cfg->train.epochs * (double)deftsim_trainer_epoch_iterations(tr, P));
    return (uint64_t)tr->cfg->scenario.iterations;
}

void deftsim_trainer_free(deftsim_trainer *tr)
{
    if (!tr) return;
    deftsim_dataset_free(tr->train);
    deftsim_dataset_free(tr->test);
    deftsim_nn_free(tr->net);
    if (tr->kctx) deftsim_kctx_free(tr->kctx);
    free(tr->profile);
    deftsim_config_free(tr->cfg);
    free(tr->x);
    free(tr->y);
    free(tr);
}

/* "" when the two tables have the same tensors (names and shapes, in order), else why not. */
static void compare_tables(const deftsim_model *a, const deftsim_model *b, char *why, size_t cap)
{
    why[0] = '\0';
    if (a->nlayers != b->nlayers) {
        snprintf(why, cap, "%zu tensors against %zu", a->nlayers, b->nlayers);
        return;
    }
    for (size_t i = 0; i < a->nlayers; i++) {
        const deftsim_layer *x = &a->layers[i], *y = &b->layers[i];
        int same = !strcmp(x->name, y->name) && x->ndim == y->ndim;
        for (uint32_t d = 0; same && d < x->ndim; d++) same = x->shape[d] == y->shape[d];
        if (!same) {
            snprintf(why, cap, "tensor %zu is %s (%" PRIu64 " elements) against %s (%" PRIu64
                     " elements)", i, x->name, x->numel, y->name, y->numel);
            return;
        }
    }
}

/* A train scenario's [gradients] section names the network's own table (a CSV of
 * train/models/ or a trace recorded from it), so that the same file drives 'deftsim run'
 * over the same model. */
static deftsim_status check_gradients_table(const deftsim_config *cfg, const deftsim_model *net)
{
    /* No table named: the network's own is used (deftsim_config_load_train allows that). */
    if (!deftsim_gradsrc_named(cfg)) return DEFTSIM_OK;
    deftsim_gradsrc *g;
    deftsim_status st = deftsim_gradsrc_open_table(cfg, &g);
    if (st) return st;
    char why[512], w[600];
    compare_tables(deftsim_gradsrc_model(g), net, why, sizeof why);
    if (why[0]) {
        deftsim_config_where(cfg, "gradients", deftsim_gradsrc_key(cfg), w, sizeof w);
        st = deftsim_error_set(DEFTSIM_E_INPUT,
                               "%s: %s is not the table of [train] model = %s (%s): %s; "
                               "name the network's own table (train/models/%s.csv)",
                               w, deftsim_gradsrc_name(cfg), deftsim_train_model_name(cfg->train.model),
                               net->name, why, net->name);
    }
    deftsim_gradsrc_close(g);
    return st;
}

deftsim_status deftsim_trainer_new(const deftsim_config *cfg, deftsim_trainer **out)
{
    *out = NULL;
    deftsim_trainer *tr = calloc(1, sizeof *tr);
    if (!tr) return deftsim_error_nomem("train");
    deftsim_status st;
    if ((st = deftsim_config_clone(cfg, &tr->cfg))) goto fail;
    const deftsim_config *c = tr->cfg;
    tr->B = (uint32_t)c->train.batch_size;
    deftsim_nn_blas_threads(c->train.threads);

    deftsim_nn_spec spec;
    deftsim_nn_spec_default(c->train.model == DEFTSIM_TRAIN_CNN ? DEFTSIM_NN_CNN : DEFTSIM_NN_MLP,
                            &spec);
    uint32_t maxb = tr->B > EVAL_CHUNK ? tr->B : EVAL_CHUNK;
    if ((st = deftsim_nn_new(&spec, maxb, &tr->net))) goto fail;
    if ((st = check_gradients_table(c, deftsim_nn_model(tr->net)))) goto fail;

    uint32_t limit = (uint32_t)c->train.train_samples;
    if ((st = deftsim_dataset_load(c->train.data, DEFTSIM_SPLIT_TRAIN, limit, &tr->train)) ||
        (st = deftsim_dataset_load(c->train.data, DEFTSIM_SPLIT_TEST, (uint32_t)c->train.eval_samples,
                                   &tr->test))) {
        char w[600];
        deftsim_config_where(c, "train", "data", w, sizeof w);
        st = deftsim_error_wrap(st, "%s", w);
        goto fail;
    }
    const deftsim_dataset *sets[2] = {tr->train, tr->test};
    for (int i = 0; i < 2; i++)
        if (sets[i]->rows != spec.in_rows || sets[i]->cols != spec.in_cols ||
            sets[i]->classes > spec.classes) {
            char w[600];
            deftsim_config_where(c, "train", "data", w, sizeof w);
            st = deftsim_error_set(DEFTSIM_E_INPUT,
                                   "%s: %s holds %u x %u images of %u classes; the %s "
                                   "network takes %u x %u images of at most %u classes",
                                   w, sets[i]->images_path, sets[i]->rows, sets[i]->cols,
                                   sets[i]->classes, deftsim_train_model_name(c->train.model),
                                   spec.in_rows, spec.in_cols, spec.classes);
            goto fail;
        }
    tr->ntrain = tr->train->count;
    tr->ntest = tr->test->count;
    for (size_t i = 0; i < c->workers.ncounts; i++) {
        uint32_t P = (uint32_t)c->workers.counts[i];
        if (deftsim_trainer_epoch_iterations(tr, P) == 0) {
            char w[600];
            deftsim_config_where(c, "train", "batch_size", w, sizeof w);
            st = deftsim_error_set(DEFTSIM_E_INPUT,
                                   "%s: P = %u workers x %u images = %" PRIu64
                                   " per iteration, more than the %u training images",
                                   w, P, tr->B, (uint64_t)P * tr->B, tr->ntrain);
            goto fail;
        }
    }
    size_t px = (size_t)spec.in_rows * spec.in_cols;
    if (!(tr->x = malloc((size_t)maxb * px * sizeof *tr->x)) || !(tr->y = malloc(maxb))) {
        st = deftsim_error_nomem("train");
        goto fail;
    }
    /* The workers' accumulators, gradients and weights are host memory, which the CUDA
     * backend's kernels do not address (docs/KERNELS_CUDA.md). */
    if (c->device.kind == DEFTSIM_DEVICE_CUDA) {
        char w[600];
        deftsim_config_where(c, "device", "kind", w, sizeof w);
        st = deftsim_error_set(DEFTSIM_E_INPUT,
                               "%s = %s: deftsim train keeps the workers' accumulators "
                               "in host memory, which only the cpu kernels read; set kind = cpu",
                               w, deftsim_device_kind_name(c->device.kind));
        goto fail;
    }
    if (c->execute.network == DEFTSIM_EXEC_MPI) { /* docs/CLUSTER.md, "Real mode" */
        st = deftsim_error_set(DEFTSIM_E_INPUT, "[execute] network = mpi: only 'mpirun -n P "
                               "deftsim run SCENARIO' runs it (not sweep or train)");
        goto fail;
    }
    if ((st = deftsim_profile_kctx_new(c, &tr->kctx, &tr->profile))) goto fail; /* + profile */
    *out = tr;
    return DEFTSIM_OK;
fail:
    deftsim_trainer_free(tr);
    return st;
}

/* ---- one point --------------------------------------------------------------------------- */

typedef struct {
    uint32_t P;
    uint64_t n;
    int dgc;
    float *params, *mom, *wdbuf, *agg;
    float **grad, **acc, **u;    /* P each; u only for DGC */
    unsigned char *sparse;       /* DGC: 1 where the element's tensor has more than one dimension */
    uint32_t *perm;
    uint64_t perm_epoch;
    double *grad_s, *acc_s;      /* P: this iteration's measured gradient and accumulator times */
    deftsim_point_sim sim;       /* one schedule per iteration when simulating */
    deftsim_compute_plan compute; /* [compute] (has_compute): its steps replace "gradient" */
    deftsim_schedule full;       /* [compute]: the iteration around the sparsifier's steps */
    int has_compute, bucketed;
    size_t acc_step;             /* the "accumulate" step's index in every schedule */
} point_state;

static void point_state_free(point_state *ps)
{
    for (uint32_t w = 0; w < ps->P; w++) {
        if (ps->grad) free(ps->grad[w]);
        if (ps->acc) free(ps->acc[w]);
        if (ps->u) free(ps->u[w]);
    }
    free(ps->grad);
    free(ps->acc);
    free(ps->u);
    free(ps->params);
    free(ps->mom);
    free(ps->wdbuf);
    free(ps->agg);
    free(ps->sparse);
    free(ps->perm);
    free(ps->grad_s);
    free(ps->acc_s);
    deftsim_point_sim_free(&ps->sim);
    if (ps->has_compute) deftsim_compute_plan_free(&ps->compute);
    deftsim_schedule_free(&ps->full);
    memset(ps, 0, sizeof *ps);
}

static float *zeros(uint64_t n, int *fail)
{
    float *p = calloc(n ? n : 1, sizeof *p);
    if (!p) *fail = 1;
    return p;
}

static deftsim_status point_state_init(point_state *ps, const deftsim_trainer *tr,
                                       deftsim_method method, uint32_t P)
{
    const deftsim_model *m = deftsim_nn_model(tr->net);
    memset(ps, 0, sizeof *ps);
    ps->P = P;
    ps->n = m->numel;
    ps->dgc = deftsim_method_has(method, DEFTSIM_METHOD_CAP_OWN_MOMENTUM);
    ps->perm_epoch = UINT64_MAX;
    deftsim_point_sim_init(&ps->sim, P);
    deftsim_schedule_init(&ps->full, P);
    ps->acc_step = 1;
    if (deftsim_compute_enabled(tr->cfg)) { /* as run and sweep: docs/COMPUTE.md */
        deftsim_status st = deftsim_compute_plan_init(tr->cfg, m, &ps->compute);
        if (st) return st;
        ps->has_compute = 1;
        ps->bucketed = deftsim_method_has(method, DEFTSIM_METHOD_CAP_DDP_BUCKETS) && P > 1;
    }
    int fail = 0;
    ps->params = zeros(ps->n, &fail);
    ps->mom = zeros(ps->n, &fail);
    ps->agg = zeros(ps->n, &fail);
    ps->grad = calloc(P, sizeof *ps->grad);
    ps->acc = calloc(P, sizeof *ps->acc);
    ps->perm = malloc((size_t)tr->ntrain * sizeof *ps->perm);
    ps->grad_s = calloc(P, sizeof *ps->grad_s);
    ps->acc_s = calloc(P, sizeof *ps->acc_s);
    if (!ps->grad || !ps->acc || !ps->perm || !ps->grad_s || !ps->acc_s) fail = 1;
    for (uint32_t w = 0; w < P && !fail; w++) {
        ps->grad[w] = zeros(ps->n, &fail);
        ps->acc[w] = zeros(ps->n, &fail);
    }
    if (ps->dgc && !fail) {
        ps->wdbuf = zeros(ps->n, &fail);
        ps->u = calloc(P, sizeof *ps->u);
        ps->sparse = calloc(ps->n, 1);
        if (!ps->u || !ps->sparse) fail = 1;
        for (uint32_t w = 0; w < P && !fail; w++) ps->u[w] = zeros(ps->n, &fail);
        for (size_t L = 0; L < m->nlayers && !fail; L++)
            if (m->layers[L].ndim > 1)
                memset(ps->sparse + m->layers[L].offset, 1, m->layers[L].numel);
    }
    if (fail) {
        point_state_free(ps);
        return deftsim_error_nomem("train: P = %u workers of %" PRIu64 " parameters", P, m->numel);
    }
    deftsim_nn_init(tr->net, tr->cfg->scenario.seed, ps->params);
    return DEFTSIM_OK;
}

/* A uniform integer in [0, bound) from a 32-bit word (multiply-shift; the bias is below
 * bound / 2^32, negligible for data sets of 60,000). */
static uint32_t below(uint32_t r, uint32_t bound) { return (uint32_t)(((uint64_t)r * bound) >> 32); }

/* The epoch's shuffle of the training images (Fisher-Yates driven by Philox keyed by the
 * seed and addressed by epoch and position): the same for every method and worker count. */
static void shuffle(uint32_t *perm, uint32_t N, uint64_t epoch, uint64_t seed)
{
    for (uint32_t i = 0; i < N; i++) perm[i] = i;
    for (uint32_t i = N - 1; i > 0; i--) {
        uint32_t r[4];
        deftsim_philox4x32_10_words(i, PERM_STREAM, (uint32_t)epoch, (uint32_t)(epoch >> 32),
                                    (uint32_t)seed, (uint32_t)(seed >> 32), r);
        uint32_t j = below(r[0], i + 1);
        uint32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

/* The clock of the training's own work (gradients, accumulators, the optimizer step): the
 * calling thread's CPU time when the networks run on one OpenBLAS thread, so that another
 * process taking the core does not count; wall time when OpenBLAS runs threads of its own,
 * whose work the calling thread's CPU time would miss. */
static double work_clock(int blas_threads)
{
    struct timespec ts;
    if (blas_threads == 1 && clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) == 0)
        return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
    return deftsim_now();
}

static float *prov_get(void *ctx, uint32_t w) { return ((point_state *)ctx)->acc[w]; }
static const float *prov_grad(void *ctx, uint32_t w) { return ((point_state *)ctx)->grad[w]; }

/* Mean loss and accuracy over the evaluated test images. */
static deftsim_status evaluate(deftsim_trainer *tr, const float *params, double *loss, double *acc)
{
    double lsum = 0;
    uint64_t ok = 0;
    for (uint32_t first = 0; first < tr->ntest; first += EVAL_CHUNK) {
        uint32_t b = tr->ntest - first < EVAL_CHUNK ? tr->ntest - first : EVAL_CHUNK;
        deftsim_dataset_range(tr->test, first, b, tr->x, tr->y);
        double l;
        uint32_t c;
        deftsim_status st = deftsim_nn_eval(tr->net, params, tr->x, tr->y, b, &l, &c);
        if (st) return st;
        lsum += l;
        ok += c;
    }
    *loss = lsum / tr->ntest;
    *acc = (double)ok / tr->ntest;
    return DEFTSIM_OK;
}

/* The optimizer step of deftsim_train.h's header comment, with the aggregate in ps->agg. */
static void apply_update(point_state *ps, const deftsim_config *cfg)
{
    const float lr = (float)cfg->train.lr, mu = (float)cfg->train.momentum;
    const float wd = (float)cfg->train.weight_decay;
    float *p = ps->params, *m = ps->mom, *a = ps->agg;
    if (!ps->dgc) {
        for (uint64_t i = 0; i < ps->n; i++) {
            m[i] = mu * m[i] + (a[i] + wd * p[i]);
            p[i] -= lr * m[i];
        }
        return;
    }
    float *b = ps->wdbuf;
    for (uint64_t i = 0; i < ps->n; i++) {
        float step = a[i];
        if (!ps->sparse[i]) {
            m[i] = mu * m[i] + a[i];
            step = m[i];
        }
        b[i] = mu * b[i] + wd * p[i];
        p[i] -= lr * (b[i] + step);
    }
}

/* One iteration as the network simulation sees it: every worker's gradient and accumulator
 * update (measured; see use_median), the sparsifier's own schedule (measured phases and
 * collectives), then the optimizer step (measured once; every worker runs the same one). */
static deftsim_status add_schedule(point_state *ps, uint64_t T, const deftsim_step_result *r,
                                   double update_seconds)
{
    deftsim_schedule *s = deftsim_point_sim_next(&ps->sim);
    if (!s)
        return deftsim_error_nomem("train: %" PRIu64 " schedules", T);
    if (!ps->has_compute) {
        deftsim_step *g = deftsim_schedule_add(s, DEFTSIM_STEP_COMPUTE, "gradient");
        if (!g) return deftsim_error_wrap(DEFTSIM_E_NOMEM, "train: schedule");
        for (uint32_t w = 0; w < ps->P; w++) g->seconds[w] = ps->grad_s[w];
    } else { /* [compute]'s forward and backward (and dense's buckets) instead of "gradient" */
        deftsim_status st = deftsim_compute_schedule(&ps->compute, &r->schedule, ps->bucketed,
                                                     r->value_wire_bytes, &ps->full);
        if (st) return st;
        size_t last = 0;
        for (size_t k = 0; k < ps->full.nsteps; k++)
            if (!strcmp(ps->full.steps[k].name, DEFTSIM_COMPUTE_BACKWARD)) last = k;
        for (size_t k = 0; k <= last; k++)
            if (!deftsim_schedule_add_copy(s, &ps->full.steps[k]))
                return deftsim_error_wrap(DEFTSIM_E_NOMEM, "train: schedule");
        ps->acc_step = last + 1;
    }
    deftsim_step *a = deftsim_schedule_add(s, DEFTSIM_STEP_COMPUTE, "accumulate");
    if (!a) return deftsim_error_wrap(DEFTSIM_E_NOMEM, "train: schedule");
    for (uint32_t w = 0; w < ps->P; w++) a->seconds[w] = ps->acc_s[w];
    for (size_t k = ps->has_compute ? ps->acc_step : 0; ps->has_compute && k < ps->full.nsteps; k++)
        if (!deftsim_schedule_add_copy(s, &ps->full.steps[k]))
            return deftsim_error_wrap(DEFTSIM_E_NOMEM, "train: schedule");
    if (!ps->has_compute && deftsim_point_sim_copy_steps(s, &r->schedule))
        return deftsim_error_wrap(DEFTSIM_E_NOMEM, "train: schedule");
    deftsim_step *u = deftsim_schedule_add(s, DEFTSIM_STEP_COMPUTE, "update");
    if (!u) return deftsim_error_wrap(DEFTSIM_E_NOMEM, "train: schedule");
    for (uint32_t w = 0; w < ps->P; w++) u->seconds[w] = update_seconds;
    return DEFTSIM_OK;
}

static int cmp_dbl(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Sets step `s` of every schedule to the median of its measured seconds over all iterations
 * and workers. The gradient and accumulator work is the same every iteration, so its spread
 * is the noise of a shared machine (other processes taking the core); the median keeps that
 * noise out of the simulated time while the sparsifiers' phases stay as measured. */
static deftsim_status use_median(point_state *ps, size_t s)
{
    size_t cnt = ps->sim.n * ps->P;
    double *v = malloc(cnt * sizeof *v);
    if (!v) return deftsim_error_nomem("train");
    for (size_t i = 0; i < ps->sim.n; i++)
        memcpy(v + i * ps->P, ps->sim.it[i].sched.steps[s].seconds, ps->P * sizeof *v);
    qsort(v, cnt, sizeof *v, cmp_dbl);
    double med = cnt % 2 ? v[cnt / 2] : 0.5 * (v[cnt / 2 - 1] + v[cnt / 2]);
    free(v);
    for (size_t i = 0; i < ps->sim.n; i++)
        for (uint32_t w = 0; w < ps->P; w++) ps->sim.it[i].sched.steps[s].seconds[w] = med;
    return DEFTSIM_OK;
}

/* The network simulation of every iteration of the point; the rows get the cumulative
 * simulated times. */
static deftsim_status simulate(const deftsim_config *cfg, point_state *ps, uint32_t elem_bytes,
                               deftsim_train_result *out)
{
    deftsim_status st;
    if ((!ps->has_compute && (st = use_median(ps, 0))) || (st = use_median(ps, ps->acc_step)))
        return st;
    ps->sim.elem_bytes = elem_bytes;
    deftsim_sim_params sp;
    deftsim_point_sim_params(cfg, &ps->sim, &sp);
    deftsim_sim_result res;
    double t0 = deftsim_now();
    st = deftsim_point_sim_run(&sp, &ps->sim, &res);
    if (st) return deftsim_error_wrap(st, "network simulation");
    out->sim_wall_seconds = deftsim_now() - t0;
    double total = 0, comm = 0;
    size_t row = out->nrows && out->rows[0].iteration == 0; /* row 0: the initial model, at 0 s */
    for (size_t i = 0; i < res.nsched && row < out->nrows; i++) {
        total += res.iteration_seconds[i];
        comm += res.comm_seconds[i];
        while (row < out->nrows && out->rows[row].iteration == i + 1) {
            out->rows[row].sim_seconds = total;
            out->rows[row].sim_comm_seconds = comm;
            row++;
        }
    }
    deftsim_sim_result_free(&res);
    return DEFTSIM_OK;
}

/* Tells the progress callback, when there is one. */
static void tell(const deftsim_train_progress *p, deftsim_train_event ev)
{
    if (p && p->fn) p->fn(p->user, &ev);
}

/* Sums over the iterations since the last row. */
typedef struct {
    double loss, buildup, dens, compute_s, sparsify_s; /* compute_s, sparsify_s: cumulative */
    uint64_t correct, since;
} row_sums;

/* Every worker's gradient at the shared weights, on its own shard of minibatch j; *slowest
 * receives the slowest worker's time, *loss the sum of their losses. */
static deftsim_status worker_grads(deftsim_trainer *tr, point_state *ps, uint64_t j,
                                   double *slowest, double *loss, uint64_t *correct)
{
    const uint32_t B = tr->B;
    const int bt = tr->cfg->train.threads;
    *slowest = *loss = 0;
    for (uint32_t w = 0; w < ps->P; w++) {
        const uint32_t *idx = ps->perm + (size_t)(j * ps->P + w) * B;
        deftsim_dataset_batch(tr->train, idx, B, tr->x, tr->y);
        double t0 = work_clock(bt), l;
        uint32_t ok;
        deftsim_status st = deftsim_nn_grad(tr->net, ps->params, tr->x, tr->y, B, ps->grad[w], &l, &ok);
        if (st) return st;
        double dt = work_clock(bt) - t0;
        ps->grad_s[w] = dt;
        if (dt > *slowest) *slowest = dt;
        *loss += l;
        *correct += ok;
    }
    return DEFTSIM_OK;
}

/* Accumulators: error feedback, and for DGC its momentum correction. */
static void accumulate(point_state *ps, float mu, int bt, const deftsim_profile *prof)
{
    for (uint32_t w = 0; w < ps->P; w++) {
        double ta = work_clock(bt);
        float *a = ps->acc[w];
        const float *g = ps->grad[w];
        if (ps->dgc) {
            float *u = ps->u[w];
            for (uint64_t i = 0; i < ps->n; i++) {
                if (ps->sparse[i]) {
                    u[i] = mu * u[i] + g[i];
                    a[i] += u[i];
                } else {
                    a[i] += g[i];
                }
            }
        } else {
            for (uint64_t i = 0; i < ps->n; i++) a[i] += g[i];
        }
        deftsim_kcall c = {DEFTSIM_KOP_ACCUMULATE, (size_t)ps->n, 0, 0}; /* kind = profile */
        ps->acc_s[w] = prof ? deftsim_profile_predict(prof, &c) : work_clock(bt) - ta;
    }
}

/* DGC's momentum factor masking: what a worker sent leaves its momentum too (the sparsifier
 * already zeroed those positions of its accumulator). */
static deftsim_status dgc_mask(point_state *ps, deftsim_sparsifier *sp)
{
    for (uint32_t w = 0; w < ps->P; w++) {
        const deftsim_kidx *sel;
        uint64_t count;
        deftsim_status st = deftsim_sparsifier_selection(sp, w, &sel, &count);
        if (st) return st;
        for (uint64_t i = 0; i < count; i++) ps->u[w][sel[i]] = 0.0f;
    }
    return DEFTSIM_OK;
}

/* Row 0: the initial model's test metrics before any update (no minibatch yet, no time). */
static deftsim_status initial_row(deftsim_trainer *tr, const point_state *ps,
                                  const deftsim_train_options *opt, deftsim_train_result *out)
{
    deftsim_train_row *row = &out->rows[out->nrows++];
    memset(row, 0, sizeof *row);
    row->train_loss = row->train_accuracy = row->buildup = row->density_actual = NAN;
    row->sim_seconds = row->sim_comm_seconds = opt->simulate ? 0 : NAN;
    return evaluate(tr, ps->params, &row->test_loss, &row->test_accuracy);
}

/* The row after iteration t (0-based): the sums since the last row, the evaluation. */
static deftsim_status add_row(deftsim_trainer *tr, const point_state *ps,
                              const deftsim_train_options *opt, uint64_t t, uint64_t E,
                              uint64_t T, double t_start, row_sums *rs, deftsim_train_result *out)
{
    const uint32_t B = tr->B, P = ps->P;
    deftsim_train_row *row = &out->rows[out->nrows++];
    row->iteration = t + 1;
    row->epoch = (double)(t + 1) / (double)E;
    row->samples = (t + 1) * P * (uint64_t)B;
    row->train_loss = rs->loss / (double)rs->since;
    row->train_accuracy = (double)rs->correct / ((double)rs->since * P * B);
    row->buildup = rs->buildup / (double)rs->since;
    row->density_actual = rs->dens / (double)rs->since;
    row->compute_seconds = rs->compute_s;
    row->sparsify_seconds = rs->sparsify_s;
    row->test_loss = row->test_accuracy = NAN;
    row->sim_seconds = row->sim_comm_seconds = NAN;
    deftsim_status st;
    if (opt->evaluate && (st = evaluate(tr, ps->params, &row->test_loss, &row->test_accuracy)))
        return st;
    row->wall_seconds = deftsim_now() - t_start;
    tell(&opt->progress, (deftsim_train_event){.kind = DEFTSIM_TRAIN_ROW, .row = row,
                                               .model = deftsim_nn_model(tr->net)->name,
                                               .method = out->method, .density = out->density,
                                               .P = out->P, .iterations = T});
    rs->loss = rs->buildup = rs->dens = 0;
    rs->correct = rs->since = 0;
    return DEFTSIM_OK;
}

/* Iteration t: gradients, accumulators, the sparsifier's step, the update; 1 in *stop when
 * the loss is no longer finite. */
static deftsim_status train_iteration(deftsim_trainer *tr, point_state *ps,
                                      deftsim_sparsifier *sp, const deftsim_train_options *opt,
                                      uint64_t t, uint64_t E, uint64_t T, row_sums *rs,
                                      uint32_t *elem_bytes, int *stop, deftsim_train_result *out)
{
    const deftsim_config *cfg = tr->cfg;
    const int bt = cfg->train.threads;
    uint64_t epoch = t / E, j = t % E;
    if (epoch != ps->perm_epoch) {
        shuffle(ps->perm, tr->ntrain, epoch, cfg->scenario.seed);
        ps->perm_epoch = epoch;
    }
    double slowest, iter_loss;
    deftsim_status st = worker_grads(tr, ps, j, &slowest, &iter_loss, &rs->correct);
    if (st) return st;
    rs->compute_s += slowest;
    if (!isfinite(iter_loss)) {
        out->diverged = 1;
        *stop = 1;
        return DEFTSIM_OK;
    }
    rs->loss += iter_loss / ps->P;
    if (opt->on_grads && (st = opt->on_grads(opt->ctx, t, ps->P, (const float *const *)ps->grad)))
        return st;
    accumulate(ps, (float)cfg->train.momentum, bt, tr->profile);
    deftsim_acc_provider prov = {.get = prov_get, .ctx = ps, .persistent = 1, .grad = prov_grad};
    deftsim_step_result *r;
    double t0 = deftsim_now();
    if ((st = deftsim_sparsifier_step(sp, t, &prov, &r))) return st;
    if ((st = deftsim_profile_check_method(tr->profile, cfg, (int)out->method))) return st;
    rs->sparsify_s += deftsim_now() - t0;
    out->k = r->k;
    rs->buildup += r->buildup;
    rs->dens += r->density_actual;
    if (ps->dgc && (st = dgc_mask(ps, sp))) return st;
    double tu = work_clock(bt);
    memset(ps->agg, 0, ps->n * sizeof *ps->agg);
    for (uint64_t i = 0; i < r->nnz; i++) ps->agg[r->agg_index[i]] = r->agg_value[i];
    apply_update(ps, cfg);
    tu = work_clock(bt) - tu;
    if (opt->simulate && (st = add_schedule(ps, T, r, tu))) return st;
    *elem_bytes = r->value_wire_bytes;
    rs->since++;
    return DEFTSIM_OK;
}

deftsim_status deftsim_trainer_point(deftsim_trainer *tr, deftsim_method method, double density,
                                     uint32_t P, const deftsim_train_options *opt,
                                     deftsim_train_result *out)
{
    memset(out, 0, sizeof *out);
    deftsim_train_options defaults;
    if (!opt) {
        deftsim_train_options_default(&defaults);
        opt = &defaults;
    }
    const deftsim_config *cfg = tr->cfg;
    const deftsim_model *m = deftsim_nn_model(tr->net);
    const uint64_t E = deftsim_trainer_epoch_iterations(tr, P);
    const uint64_t T = opt->iterations ? opt->iterations : deftsim_trainer_iterations(tr, P);
    if (P == 0 || E == 0)
        return deftsim_error_set(DEFTSIM_E_INPUT, "train: P = %u workers x %u images do not fit "
                                 "the %u training images", P, tr->B, tr->ntrain);
    out->method = method;
    out->density = density;
    out->P = P;
    out->n = m->numel;
    size_t cap = (size_t)(T / (uint64_t)cfg->train.eval_every) + 3; /* + iteration 0 and T */
    out->rows = calloc(cap, sizeof *out->rows);
    if (!out->rows) return deftsim_error_nomem("train");

    deftsim_sparsifier_params sp_params;
    deftsim_config_sparsifier_params(cfg, method, density, P, m, tr->kctx, NULL, &sp_params);
    deftsim_sparsifier *sp = NULL;
    point_state ps;
    memset(&ps, 0, sizeof ps);
    deftsim_status st;
    double t_start = deftsim_now();
    if ((st = deftsim_sparsifier_new(&sp_params, &sp))) goto done;
    if ((st = point_state_init(&ps, tr, method, P))) goto done;
    if (opt->evaluate && (st = initial_row(tr, &ps, opt, out))) goto done;
    uint32_t elem_bytes = 4;
    row_sums rs;
    memset(&rs, 0, sizeof rs);
    for (uint64_t t = 0; t < T; t++) {
        int stop = 0;
        if ((st = train_iteration(tr, &ps, sp, opt, t, E, T, &rs, &elem_bytes, &stop, out)))
            goto done;
        if (stop) break;
        if ((t + 1) % (uint64_t)cfg->train.eval_every == 0 || t + 1 == T)
            if ((st = add_row(tr, &ps, opt, t, E, T, t_start, &rs, out))) goto done;
        out->iterations = t + 1;
    }
    if (opt->params_out) memcpy(opt->params_out, ps.params, ps.n * sizeof *ps.params);
    if (opt->simulate && ps.sim.n && (st = simulate(cfg, &ps, elem_bytes, out))) goto done;
    if (out->diverged)
        tell(&opt->progress, (deftsim_train_event){.kind = DEFTSIM_TRAIN_DIVERGED, .model = m->name,
                                                   .method = method, .density = density, .P = P,
                                                   .iterations = out->iterations});
done:
    out->seconds = deftsim_now() - t_start;
    point_state_free(&ps);
    deftsim_sparsifier_free(sp);
    if (st) {
        deftsim_train_result_free(out);
        return deftsim_error_wrap(st, "train %s d=%g P=%u", deftsim_method_name(method), density, P);
    }
    return DEFTSIM_OK;
}

void deftsim_train_result_free(deftsim_train_result *r)
{
    if (!r) return;
    free(r->rows);
    r->rows = NULL;
    r->nrows = 0;
}

/* ---- files ------------------------------------------------------------------------------- */

static const char *const columns[] = {
    "scenario", "model", "n", "method", "density", "k", "P", "batch_size", "lr",
    "iteration", "epoch", "samples", "train_loss", "train_accuracy", "test_loss",
    "test_accuracy", "buildup", "density_actual", "compute_seconds", "sparsify_seconds",
    "wall_seconds", "sim_seconds", "sim_comm_seconds", "diverged"};
#define NCOLUMNS (sizeof columns / sizeof columns[0])


static void write_header(FILE *f)
{
    for (size_t i = 0; i < NCOLUMNS; i++) fprintf(f, "%s%s", i ? "," : "", columns[i]);
    fputc('\n', f);
}

static void write_row(FILE *f, const deftsim_config *cfg, const deftsim_train_result *r,
                      const deftsim_train_row *row, int last)
{
    char b[16][40];
    /* Columns 1 .. 21 as above; the simulated times and the divergence flag close the row. */
    deftsim_csv_field(f, cfg->scenario.name);
    fputc(',', f);
    deftsim_csv_field(f, cfg->train.model == DEFTSIM_TRAIN_CNN ? "fmnist_cnn" : "fmnist_mlp");
    fprintf(f, ",%" PRIu64 ",%s,%s,%" PRIu64 ",%u,%d,%s,%" PRIu64 ",%s,%" PRIu64
            ",%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%d\n",
            r->n, deftsim_method_name(r->method), deftsim_csv_double(b[0], 40, r->density), r->k,
            r->P, cfg->train.batch_size, deftsim_csv_double(b[1], 40, cfg->train.lr),
            row->iteration, deftsim_csv_double(b[2], 40, row->epoch), row->samples,
            deftsim_csv_double(b[3], 40, row->train_loss),
            deftsim_csv_double(b[4], 40, row->train_accuracy),
            deftsim_csv_double(b[5], 40, row->test_loss),
            deftsim_csv_double(b[6], 40, row->test_accuracy),
            deftsim_csv_double(b[7], 40, row->buildup),
            deftsim_csv_double(b[8], 40, row->density_actual),
            deftsim_csv_double(b[9], 40, row->compute_seconds),
            deftsim_csv_double(b[10], 40, row->sparsify_seconds),
            deftsim_csv_double(b[11], 40, row->wall_seconds),
            deftsim_csv_double(b[12], 40, row->sim_seconds),
            deftsim_csv_double(b[13], 40, row->sim_comm_seconds), last && r->diverged);
}

typedef struct {
    deftsim_method method;
    double density;
    uint32_t P;
    char file[160];
    deftsim_train_result res;
} point_record;

static deftsim_status write_point_file(const deftsim_config *cfg, const point_record *pr)
{
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", cfg->scenario.output, pr->file);
    deftsim_afile *af;
    deftsim_status st = deftsim_afile_open(&af, path);
    if (st) return st;
    FILE *f = deftsim_afile_stream(af);
    write_header(f);
    for (size_t i = 0; i < pr->res.nrows; i++)
        write_row(f, cfg, &pr->res, &pr->res.rows[i], i + 1 == pr->res.nrows);
    return deftsim_afile_commit(af);
}

static deftsim_status write_tables(const deftsim_config *cfg, const point_record *recs, size_t n)
{
    char path[4400];
    snprintf(path, sizeof path, "%s/curves.csv", cfg->scenario.output);
    deftsim_afile *af;
    deftsim_status st = deftsim_afile_open(&af, path);
    if (st) return st;
    FILE *f = deftsim_afile_stream(af);
    write_header(f);
    for (size_t p = 0; p < n; p++)
        for (size_t i = 0; i < recs[p].res.nrows; i++)
            write_row(f, cfg, &recs[p].res, &recs[p].res.rows[i], i + 1 == recs[p].res.nrows);
    if ((st = deftsim_afile_commit(af))) return st;

    /* final.csv: each point's last row (and its best test accuracy). */
    snprintf(path, sizeof path, "%s/final.csv", cfg->scenario.output);
    if ((st = deftsim_afile_open(&af, path))) return st;
    f = deftsim_afile_stream(af);
    fprintf(f, "scenario,model,n,method,density,k,P,batch_size,iterations,epoch,train_loss,"
               "test_loss,test_accuracy,best_test_accuracy,sim_seconds,diverged,seconds\n");
    for (size_t p = 0; p < n; p++) {
        const deftsim_train_result *r = &recs[p].res;
        if (!r->nrows) continue;
        const deftsim_train_row *last = &r->rows[r->nrows - 1];
        double best = NAN;
        for (size_t i = 0; i < r->nrows; i++)
            if (isnan(best) || r->rows[i].test_accuracy > best) best = r->rows[i].test_accuracy;
        char b[8][40];
        deftsim_csv_field(f, cfg->scenario.name);
        fprintf(f, ",%s,%" PRIu64 ",%s,%s,%" PRIu64 ",%u,%d,%" PRIu64 ",%s,%s,%s,%s,%s,%s,%d,%s\n",
                cfg->train.model == DEFTSIM_TRAIN_CNN ? "fmnist_cnn" : "fmnist_mlp", r->n,
                deftsim_method_name(r->method), deftsim_csv_double(b[0], 40, r->density), r->k,
                r->P, cfg->train.batch_size, last->iteration,
                deftsim_csv_double(b[1], 40, last->epoch),
                deftsim_csv_double(b[2], 40, last->train_loss),
                deftsim_csv_double(b[3], 40, last->test_loss),
                deftsim_csv_double(b[4], 40, last->test_accuracy),
                deftsim_csv_double(b[5], 40, best), deftsim_csv_double(b[7], 40, last->sim_seconds),
                r->diverged,
                deftsim_csv_double(b[6], 40, r->seconds));
    }
    return deftsim_afile_commit(af);
}

static deftsim_status write_manifest(const deftsim_config *cfg, const deftsim_trainer *tr,
                                     const deftsim_platform_record *plat,
                                     const char *started, const char *finished,
                                     const char *status, const char *error,
                                     const point_record *recs, size_t n)
{
    char path[4400], host[256];
    snprintf(path, sizeof path, "%s/manifest.json", cfg->scenario.output);
    deftsim_hostname(host, sizeof host);
    json_t *root = deftsim_manifest_new("deftsim-train-results", cfg, status, error, started,
                                        finished);
    json_t *config = deftsim_config_to_json(cfg), *pts = json_array();
    if (!root || !config || !pts) {
        json_decref(root);
        json_decref(config);
        json_decref(pts);
        return deftsim_error_set(DEFTSIM_E_NOMEM, "%s: cannot build the manifest", path);
    }
    const deftsim_model *m = deftsim_nn_model(tr->net);
    json_object_set_new(root, "hostname", json_string(host));
    json_object_set_new(root, "machine", deftsim_manifest_machine()); /* the CPU that timed */
    json_object_set_new(root, "network",
                        json_pack("{s:s, s:I, s:I, s:f}", "model", m->name, "n",
                                  (json_int_t)m->numel, "tensors", (json_int_t)m->nlayers,
                                  "flops_per_image", deftsim_nn_flops_per_image(tr->net)));
    json_object_set_new(root, "data",
                        json_pack("{s:s, s:s, s:i, s:s, s:s, s:i}", "train_images",
                                  tr->train->images_path, "train_labels", tr->train->labels_path,
                                  "train_count", (int)tr->ntrain, "test_images",
                                  tr->test->images_path, "test_labels", tr->test->labels_path,
                                  "test_count", (int)tr->ntest));
    for (size_t i = 0; i < n; i++)
        json_array_append_new(pts, json_pack("{s:s, s:f, s:i, s:s, s:I, s:I, s:b, s:f, s:f}",
                                             "method", deftsim_method_name(recs[i].method),
                                             "density", recs[i].density, "P", (int)recs[i].P,
                                             "file", recs[i].file, "iterations",
                                             (json_int_t)recs[i].res.iterations, "rows",
                                             (json_int_t)recs[i].res.nrows, "diverged",
                                             recs[i].res.diverged, "seconds", recs[i].res.seconds,
                                             "sim_seconds", recs[i].res.sim_wall_seconds));
    json_object_set_new(root, "points", pts);
    json_object_set_new(root, "platform", deftsim_platform_record_json(plat));
    if (tr->profile) /* [device] kind = profile: the profile that timed the kernels */
        json_object_set_new(root, "profile", deftsim_profile_json(tr->profile, cfg->device.profile));
    json_object_set_new(root, "config", config);
    return deftsim_manifest_write(path, root);
}

/* What a training run writes: a folder of another kind or another scenario's training
 * results is refused (deftsim_folder_check); a rerun of the same scenario replaces its own. */
static const deftsim_folder_writer train_writer = {
    .format = "deftsim-train-results",
    .noun = "a training run",
    .verb = "train",
    .option = "--output DIR",
    .another = "the results of another training run",
    .why = "this run would replace them",
    .identity_of = deftsim_folder_run_identity_of,
    .files = (const char *const[]){"curves.csv", "final.csv"},
    .nfiles = 2,
};

deftsim_status deftsim_train_check_output(const deftsim_config *cfg)
{
    json_t *m = json_pack("{s:o}", "config", deftsim_config_to_json(cfg));
    json_t *id = m ? deftsim_folder_run_identity_of(m) : NULL;
    json_decref(m);
    if (!id) return deftsim_error_set(DEFTSIM_E_NOMEM, "train: cannot describe the configuration");
    deftsim_status st = deftsim_folder_check(cfg->scenario.output, &train_writer, id, NULL);
    json_decref(id);
    return st;
}

deftsim_status deftsim_train_run(const deftsim_config *cfg, const deftsim_train_progress *progress,
                                 deftsim_train_summary *summary)
{
    if (summary) memset(summary, 0, sizeof *summary);
    double t0 = deftsim_now();
    char started[32];
    deftsim_utc_now(started, sizeof started);
    /* Before anything is created in the folder. */
    deftsim_status st = deftsim_train_check_output(cfg);
    if (st) return st;
    deftsim_trainer *tr;
    if ((st = deftsim_trainer_new(cfg, &tr))) return st;
    /* A user's platform file: recorded in the manifest, its bytes kept under platforms/ so that
     * the folder alone reproduces the simulation (docs/TRAINING.md). */
    deftsim_platform_record plat;
    if ((st = deftsim_platform_record_read(cfg, &plat))) {
        deftsim_platform_record_free(&plat);
        deftsim_trainer_free(tr);
        return st;
    }
    char dir[4400];
    snprintf(dir, sizeof dir, "%s/points", cfg->scenario.output);
    /* The manifest comes first, so that a folder a killed run leaves says whose it is. */
    if (!(st = deftsim_mkdir_p(dir)))
        st = write_manifest(cfg, tr, &plat, started, NULL, "running", NULL, NULL, 0);
    if (!st && cfg->network.simulate) st = deftsim_platform_record_keep(&plat, cfg->scenario.output);
    if (st) {
        deftsim_platform_record_free(&plat);
        deftsim_trainer_free(tr);
        return st;
    }
    /* Dense sends everything whatever the density: it runs once per P, as density 1. */
    size_t maxpts = cfg->sparsify.nmethods * cfg->sparsify.ndensities * cfg->workers.ncounts;
    point_record *recs = calloc(maxpts ? maxpts : 1, sizeof *recs);
    if (!recs) {
        deftsim_platform_record_free(&plat);
        deftsim_trainer_free(tr);
        return deftsim_error_nomem("train");
    }
    size_t n = 0;
    deftsim_train_options opt;
    deftsim_train_options_default(&opt);
    if (progress) opt.progress = *progress;
    opt.simulate = cfg->network.simulate;
    for (size_t mi = 0; mi < cfg->sparsify.nmethods && !st; mi++) {
        deftsim_method method = cfg->sparsify.methods[mi];
        int all = deftsim_method_has(method, DEFTSIM_METHOD_CAP_SENDS_ALL);
        size_t nd = all ? 1 : cfg->sparsify.ndensities;
        for (size_t di = 0; di < nd && !st; di++) {
            double d = all ? 1.0 : cfg->sparsify.densities[di];
            for (size_t pi = 0; pi < cfg->workers.ncounts && !st; pi++) {
                point_record *pr = &recs[n];
                pr->method = method;
                pr->density = d;
                pr->P = (uint32_t)cfg->workers.counts[pi];
                char db[40];
                snprintf(pr->file, sizeof pr->file, "points/%s_d%s_P%u.csv",
                         deftsim_method_name(method), deftsim_csv_double(db, sizeof db, d), pr->P);
                if ((st = deftsim_trainer_point(tr, method, d, pr->P, &opt, &pr->res))) break;
                n++;
                if ((st = write_point_file(cfg, pr))) break;
                if (summary) {
                    summary->points++;
                    summary->rows += pr->res.nrows;
                }
            }
        }
    }
    char finished[32];
    deftsim_utc_now(finished, sizeof finished);
    if (!st) st = write_tables(cfg, recs, n);
    if (!st) {
        st = write_manifest(cfg, tr, &plat, started, finished, "complete", NULL, recs, n);
    } else {
        /* Keep the failure's message: the manifest says what finished before it. */
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", deftsim_error_message());
        write_manifest(cfg, tr, &plat, started, NULL, "failed", msg, recs, n);
        deftsim_error_set(st, "%s", msg);
    }
    for (size_t i = 0; i < n; i++) deftsim_train_result_free(&recs[i].res);
    free(recs);
    deftsim_platform_record_free(&plat);
    deftsim_trainer_free(tr);
    if (summary) summary->seconds = deftsim_now() - t0;
    return st;
}
