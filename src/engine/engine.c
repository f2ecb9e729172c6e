/* engine.c - `deftsim run`: every (method, density, P) point of a scenario over the gradient
 * source's iterations, with error feedback, written as tidy CSV rows (deftsim_engine.h,
 * docs/OUTPUT.md). The point loop lives here; the memory plan in engine_plan.c, one point's
 * accumulators in accum.c, its rows in rows.c, its network simulation in point_sim.c, the
 * manifest in manifest.c, the gradients behind deftsim_gradsrc.h. Calls go one way: engine.c
 * -> accum.c -> engine_plan.c. */
#include "engine_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "deftsim_csv.h"
#include "deftsim_folder.h"
#include "deftsim_manifest.h"
#include "deftsim_net_mpi.h"
#include "deftsim_par.h"
#include "deftsim_util.h"

/* ---- the engine ------------------------------------------------------------------------------ */

void deftsim_run_options_default(deftsim_run_options *o)
{
    memset(o, 0, sizeof *o);
}

const deftsim_memory_plan *deftsim_engine_memory(const deftsim_engine *e) { return &e->plan; }

static void fill_params(const deftsim_engine *e, deftsim_method m, double d, uint32_t P,
                        deftsim_sparsifier_params *p)
{
    deftsim_config_sparsifier_params(e->cfg, m, d, P, e->model, e->kctx, e->opt.team, p);
}

/* Spread mode: whether this process writes the results (rank 0; every process otherwise). */
static int writes(const deftsim_engine *e) { return !e->opt.team || e->opt.team->rank == 0; }
/* The caller asked the run to stop (deftsim_run_options.stop). */
static int stopping(const deftsim_engine *e) { return e->opt.stop && *e->opt.stop; }

/* The kernel backend of [device]: "cpu", or for kind = cuda "cuda-staged" (the sparsifiers
 * keep their buffers in host memory; that backend copies each kernel call's arrays to the
 * device, runs the operation there and copies the results back, and the timed phases count
 * the device time of the operations, not the copies: docs/KERNELS_CUDA.md). Refuses kind =
 * cuda with the reason when this build or this machine cannot run it: an input error (exit
 * 2), since the user fixes it by setting kind = cpu. */
static deftsim_status device_check(const deftsim_config *cfg, const char **backend)
{
    *backend = "cpu";
    if (cfg->device.kind != DEFTSIM_DEVICE_CUDA) return DEFTSIM_OK;
    int compiled = 0;
    char names[128] = "", w[600];
    deftsim_config_where(cfg, "device", "kind", w, sizeof w);
    for (size_t i = 0, o = 0; i < deftsim_kernels_backend_count() && o < sizeof names; i++) {
        const char *b = deftsim_kernels_backend_name(i);
        if (strcmp(b, "cuda-staged") == 0) compiled = 1;
        o += (size_t)snprintf(names + o, sizeof names - o, "%s%s", i ? ", " : "", b);
    }
    if (!compiled)
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "%s = cuda: this build of deftsim has no CUDA kernel "
                                 "backend (its backends: %s); set kind = cpu",
                                 w, names);
    const char *why = deftsim_kernels_backend_unavailable("cuda-staged");
    if (why) /* no device, no driver, or the runtime's own error */
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "%s = cuda: no usable GPU was found: %s; set kind = cpu", w,
                                 why);
    *backend = "cuda-staged";
    return DEFTSIM_OK;
}

/* [device] kind = profile: loads the profile and puts its cost model on the kernel context,
 * whose modelled clock then times every compute phase (sparsifiers/sp_internal.h, sp_now). */
static deftsim_status profile_open(deftsim_engine *e)
{
    if (e->cfg->device.kind != DEFTSIM_DEVICE_PROFILE) return DEFTSIM_OK;
    if (!(e->profile = malloc(sizeof *e->profile)))
        return deftsim_error_nomem("engine");
    deftsim_status st = deftsim_profile_load(e->cfg->device.profile, e->profile);
    if (st) {
        char w[600];
        deftsim_config_where(e->cfg, "device", "profile", w, sizeof w);
        return deftsim_error_wrap(st, "%s", w);
    }
    deftsim_kctx_set_cost(e->kctx, deftsim_profile_cost, e->profile);
    for (size_t i = 0; i < e->cfg->sparsify.nmethods; i++) /* an operation without a row */
        if ((st = deftsim_profile_require(e->profile, e->cfg->device.profile,
                                          (int)e->cfg->sparsify.methods[i]))) {
            char w[600];
            deftsim_config_where(e->cfg, "device", "profile", w, sizeof w);
            return deftsim_error_wrap(st, "%s", w);
        }
    return DEFTSIM_OK;
}

/* The gradient source of [gradients], checked against the scenario: its workers and
 * iterations, and the kernels' index range. */
static deftsim_status open_source(deftsim_engine *e)
{
    const deftsim_config *cfg = e->cfg;
    deftsim_status st;
    if ((st = deftsim_gradsrc_open(cfg, &e->src))) return st;
    e->iterations = (size_t)cfg->scenario.iterations;
    e->source_iter = calloc(e->iterations, sizeof *e->source_iter);
    if (!e->source_iter) return deftsim_error_nomem("engine");
    e->model = deftsim_gradsrc_model(e->src);
    uint32_t workers = deftsim_gradsrc_workers(e->src);
    char w[600];
    for (size_t i = 0; i < cfg->workers.ncounts; i++)
        if ((uint64_t)cfg->workers.counts[i] > workers) {
            deftsim_config_where(cfg, "workers", "counts", w, sizeof w);
            return deftsim_error_set(DEFTSIM_E_INPUT,
                                     "%s: P = %" PRId64 " exceeds the %u workers of trace %s; "
                                     "use counts up to %u",
                                     w, cfg->workers.counts[i], workers, cfg->gradients.trace,
                                     workers);
        }
    size_t have = deftsim_gradsrc_iterations(e->src);
    if (e->iterations > have) {
        deftsim_config_where(cfg, "scenario", "iterations", w, sizeof w);
        return deftsim_error_set(DEFTSIM_E_INPUT, "%s: %zu, but trace %s holds %zu iteration%s",
                                 w, e->iterations, cfg->gradients.trace, have,
                                 have == 1 ? "" : "s");
    }
    for (size_t i = 0; i < e->iterations; i++)
        e->source_iter[i] = deftsim_gradsrc_iteration_id(e->src, i);
    if (e->model->numel == 0)
        return deftsim_error_set(DEFTSIM_E_INPUT, "model %s has no elements", e->model->name);
    if (e->model->numel > DEFTSIM_KIDX_MAX_N)
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "model %s: %" PRIu64 " elements exceed the kernels' index range "
                                 "(%zu)",
                                 e->model->name, e->model->numel, DEFTSIM_KIDX_MAX_N);
    return DEFTSIM_OK;
}

void deftsim_engine_free(deftsim_engine *e)
{
    if (!e) return;
    free(e->plan.rows);
    for (size_t i = 0; e->avg_keep && i < e->iterations; i++)
        deftsim_big_free(e->avg_keep[i], (size_t)e->model->numel * sizeof(float));
    free(e->avg_keep);
    free(e->avg_norm2);
    free(e->avg_have);
    for (size_t i = 0; i < e->npool; i++) deftsim_big_free(e->pool[i], (size_t)e->model->numel * sizeof(float));
    free(e->pool);
    free(e->stage);
    free(e->sums);
    if (e->kctx) deftsim_kctx_free(e->kctx);
    free(e->profile);
    deftsim_gradsrc_close(e->src);
    free(e->source_iter);
    free(e->dump_dir);
    deftsim_platform_record_free(&e->platform);
    deftsim_compute_plan_free(&e->compute);
    deftsim_config_free(e->cfg);
    free(e);
}

/* [compute]: the forward and backward times for the source's model and its DDP buckets. */
static deftsim_status compute_open(deftsim_engine *e)
{
    if (!deftsim_compute_enabled(e->cfg)) return DEFTSIM_OK;
    deftsim_status st = deftsim_compute_plan_init(e->cfg, e->model, &e->compute);
    if (st) return st;
    e->has_compute = 1;
    return DEFTSIM_OK;
}

/* [execute] network = mpi: MPI must be running (mpirun -n P deftsim run), and every worker
 * count must be the number of ranks. */
static deftsim_status check_real_mode(const deftsim_config *cfg)
{
    if (cfg->execute.network != DEFTSIM_EXEC_MPI) return DEFTSIM_OK;
    if (!deftsim_mpi_built() || !deftsim_mpi_active())
        return deftsim_error_set(DEFTSIM_E_INPUT, "[execute] network = mpi: %s",
                                 deftsim_mpi_built() ? "only 'mpirun -n P deftsim run SCENARIO' "
                                 "runs it (not sweep or train)"
                                 : "this deftsim was built without MPI (install libopenmpi-dev "
                                 "and rebuild with -Dmpi=enabled)");
    for (size_t i = 0; i < cfg->workers.ncounts; i++)
        if (cfg->workers.counts[i] != deftsim_mpi_size())
            return deftsim_error_set(DEFTSIM_E_INPUT, "[execute] network = mpi: [workers] counts "
                                     "holds P = %lld but mpirun started %d ranks: every point "
                                     "must have P equal to the number of ranks (run one mpirun "
                                     "per P, e.g. --set workers.counts=%d)",
                                     (long long)cfg->workers.counts[i], deftsim_mpi_size(),
                                     deftsim_mpi_size());
    return DEFTSIM_OK;
}

deftsim_status deftsim_engine_new(const deftsim_config *cfg, const deftsim_run_options *opt,
                                  deftsim_engine **out)
{
    *out = NULL;
    deftsim_engine *e = calloc(1, sizeof *e);
    if (!e) return deftsim_error_nomem("engine");
    deftsim_status st;
    if (opt) e->opt = *opt;
    else deftsim_run_options_default(&e->opt);
    if ((st = deftsim_config_clone(cfg, &e->cfg))) goto fail;
    if ((st = deftsim_config_check(e->cfg))) goto fail;
    if ((st = deftsim_platform_record_read(e->cfg, &e->platform))) goto fail;
    if ((st = check_real_mode(e->cfg))) goto fail;
    if (e->opt.dump_dir && !(e->dump_dir = strdup(e->opt.dump_dir))) {
        st = deftsim_error_nomem("engine");
        goto fail;
    }
    e->opt.dump_dir = e->dump_dir;
    const char *backend;
    if ((st = device_check(e->cfg, &backend))) goto fail;
    if ((st = open_source(e))) goto fail;
    if ((st = compute_open(e))) goto fail;
    if ((st = deftsim_kctx_new(&e->kctx, backend, (unsigned)e->cfg->device.threads))) {
        st = deftsim_error_wrap(st, "[device] threads = %d", e->cfg->device.threads);
        goto fail;
    }
    if ((st = profile_open(e))) goto fail;
    e->prep_threads = e->opt.prep_threads ? e->opt.prep_threads : deftsim_cpus_online();
    if (e->prep_threads > DEFTSIM_PAR_MAX_THREADS) e->prep_threads = DEFTSIM_PAR_MAX_THREADS;
    if ((st = deftsim_engine_plan_memory(e))) goto fail;
    *out = e;
    return DEFTSIM_OK;
fail:
    deftsim_engine_free(e);
    return st;
}

/* The generated platform of P workers, into <output>/platforms/P<P>.xml (rewritten for every
 * point: the same bytes each time), so that the run can be reproduced outside deftsim; a
 * user's platform file: its bytes as read, into <output>/platforms/<name>. */
static deftsim_status write_platform(const deftsim_engine *e, const deftsim_sim_params *sp)
{
    const deftsim_config *cfg = e->cfg;
    if (cfg->network.topology == DEFTSIM_TOPO_FILE)
        return deftsim_platform_record_keep(&e->platform, cfg->scenario.output);
    char dir[4200], path[4300];
    snprintf(dir, sizeof dir, "%s/platforms", cfg->scenario.output);
    deftsim_status st = deftsim_mkdir_p(dir);
    if (st) return deftsim_error_wrap(st, "[scenario] output");
    snprintf(path, sizeof path, "%s/P%u.xml", dir, sp->P);
    return deftsim_sim_write_platform(sp, path);
}

/* ---- one point ------------------------------------------------------------------------------- */

static const char *dbl(char *buf, double v) { return deftsim_csv_double(buf, 40, v); }

/* The point's own columns, formatted once: scenario .. P, the feedback and the run's. */
static deftsim_status point_desc_init(const deftsim_engine *e, deftsim_method method,
                                      double density, uint32_t P, point_desc *pd)
{
    const deftsim_config *cfg = e->cfg;
    memset(pd, 0, sizeof *pd);
    pd->method = deftsim_method_name(method);
    pd->density = density;
    pd->P = P;
    pd->k = deftsim_k_of_density(density, e->model->numel);
    deftsim_csv_double(pd->dens_text, sizeof pd->dens_text, density);
    char b[40];
    /* scenario,model,n,source,method,density,k,P */
    FILE *m = fmemopen(pd->prefix, sizeof pd->prefix, "w");
    if (!m) return deftsim_error_nomem("engine");
    deftsim_csv_field(m, cfg->scenario.name);
    fputc(',', m);
    deftsim_csv_field(m, e->model->name);
    fprintf(m, ",%" PRIu64 ",%s,%s,%s,%" PRIu64 ",%u", e->model->numel,
            deftsim_gradsrc_kind(e->src), pd->method, dbl(b, density), pd->k, P);
    fclose(m);
    snprintf(pd->fb_cols, sizeof pd->fb_cols, "%s,%u",
             deftsim_feedback_name(cfg->sparsify.error_feedback),
             cfg->sparsify.error_feedback == DEFTSIM_FEEDBACK_SAMPLED
                 ? (uint32_t)cfg->sparsify.sampled_workers : 0u);
    snprintf(pd->run_cols, sizeof pd->run_cols, "%s,%s,%u,%" PRIu64,
             deftsim_wire_name(cfg->sparsify.wire),
             e->profile ? "profile" : deftsim_kctx_backend(e->kctx),
             deftsim_kctx_threads(e->kctx), cfg->scenario.seed);
    pd->compute = e->has_compute ? &e->compute : NULL;
    return DEFTSIM_OK;
}

/* What a point holds while it runs. */
typedef struct {
    deftsim_sparsifier *sp;
    deftsim_sparsifier **shadows; /* timing repetitions of a method with state */
    size_t nshadows;
    deftsim_timing *tm;
    point_state ps;
    step_metrics m;
    deftsim_afile *af;
    FILE *f;
    row_buffer rb;
    deftsim_point_sim psim;
    deftsim_sim_result sres;
    deftsim_mpi_result mres;      /* [execute] network = mpi: the measured times and bytes */
    deftsim_schedule full;        /* [compute]: the iteration's schedule around the sparsifier's */
    int in_iter, simulated, measured;
} point_run;

/* The sparsifier (and its shadows), the accumulators, the timing protocol, the point's file
 * with its header and the row buffer. */
static deftsim_status point_open(deftsim_engine *e, const point_desc *pd, deftsim_method method,
                                 const char *csv_path, point_run *pr)
{
    const deftsim_config *cfg = e->cfg;
    deftsim_sparsifier_params params;
    fill_params(e, method, pd->density, pd->P, &params);
    deftsim_status st;
    if ((st = deftsim_sparsifier_new(&params, &pr->sp))) return st;
    if ((st = deftsim_acc_init(&pr->ps, e, pd->P, deftsim_engine_data_free(cfg, e->dump_dir, method))))
        return st;
    if ((st = deftsim_acc_fused_init(&pr->ps, pr->sp))) return st;
    const int repeats = deftsim_timing_repeats_of(cfg);
    if ((st = deftsim_timing_new(repeats, cfg->timing.statistic, cfg->timing.cache, pr->ps.n,
                                 &pr->tm)))
        return st;
    deftsim_timing_set_threads(pr->tm, e->prep_threads);
    deftsim_timing_set_scratch(pr->tm, deftsim_acc_is_scratch, &pr->ps);
    if (repeats > 1 && deftsim_sparsifier_keeps_state(pr->sp)) {
        pr->nshadows = (size_t)repeats - 1;
        if (!(pr->shadows = calloc(pr->nshadows, sizeof *pr->shadows)))
            return deftsim_error_nomem("%s", pd->method);
        for (size_t i = 0; i < pr->nshadows; i++)
            if ((st = deftsim_sparsifier_new(&params, &pr->shadows[i]))) return st;
        deftsim_timing_set_shadows(pr->tm, pr->shadows);
    }
    if (!writes(e)) return DEFTSIM_OK; /* spread mode: rank 0 writes the rows */
    if ((st = deftsim_afile_open(&pr->af, csv_path))) return st;
    pr->f = deftsim_afile_stream(pr->af);
    deftsim_rows_header(pr->f);
    return deftsim_row_buffer_open(&pr->rb, csv_path);
}

/* Every iteration: preparation, the timed step, its metrics and rows, its schedule. */
static deftsim_status point_iterations(deftsim_engine *e, const point_desc *pd, point_run *pr,
                                       point_record *rec)
{
    point_state *ps = &pr->ps;
    deftsim_acc_provider prov = deftsim_acc_provider_of(ps);
    deftsim_status st;
    for (size_t it = 0; it < e->iterations; it++) {
        if (stopping(e)) return deftsim_error_set(DEFTSIM_E_RUNTIME, "interrupted");
        ps->it = it;
        ps->src_iter = e->source_iter[it];
        double b0 = deftsim_gradsrc_busy_seconds(e->src), t0 = deftsim_now();
        if (!ps->data_free && (st = deftsim_acc_prepare(ps))) return st;
        double t1 = deftsim_now();
        deftsim_stages_prepared(&rec->stages, ps, t1 - t0, b0);
        ps->fresh = 0;
        deftsim_step_result *r = NULL;
        /* Calls outside the phases (the quality metrics' reference top-k) time nothing. */
        if (e->profile) e->profile->missing = 0;
        uint64_t kb0 = deftsim_kctx_bytes(e->kctx);
        st = deftsim_timing_step(pr->tm, pr->sp, it, ps->data_free ? NULL : &prov, &r);
        double t2 = deftsim_now();
        uint64_t kbytes = deftsim_kctx_bytes(e->kctx) - kb0;
        if (!st && ps->get_status) st = deftsim_error_set(ps->get_status, "%s", ps->get_msg);
        if (!st && e->profile && /* a phase called an operation the profile has no row for */
            (st = deftsim_profile_check(e->profile, e->cfg->device.profile, pd->method))) {
            char w[600];
            deftsim_config_where(e->cfg, "device", "profile", w, sizeof w);
            st = deftsim_error_wrap(st, "%s", w);
        }
        if (st) return st;
        if (r->P != pd->P || r->k != pd->k || r->n != ps->n)
            return deftsim_error_set(DEFTSIM_E_INTERNAL,
                                     "%s: step result for P = %u, k = %" PRIu64 ", n = %" PRIu64
                                     "; expected %u, %" PRIu64 ", %" PRIu64,
                                     pd->method, r->P, r->k, r->n, pd->P, pd->k, ps->n);
        rec->prepare_seconds += t1 - t0;
        rec->step_seconds += t2 - t1;
        deftsim_stages_stepped(&rec->stages, ps, pr->tm, r, t2 - t1, kbytes);
        /* Spread mode: every rank holds the step's result; rank 0 writes it. */
        if (!writes(e)) continue;
        /* [compute]: the rows and the simulation see the whole iteration's schedule. */
        deftsim_step_result whole;
        if (pd->compute) {
            int bucketed = deftsim_method_has(r->method, DEFTSIM_METHOD_CAP_DDP_BUCKETS) && pd->P > 1;
            if ((st = deftsim_compute_schedule(pd->compute, &r->schedule, bucketed,
                                               r->value_wire_bytes, &pr->full)))
                return st;
            whole = *r;
            whole.schedule = pr->full;
            r = &whole;
        }
        double t3 = deftsim_now();
        uint64_t mb0 = deftsim_kctx_bytes(e->kctx);
        if ((st = deftsim_rows_metrics(ps, pd, r, &pr->m))) return st;
        double t4 = deftsim_now();
        rec->stages.metrics_bytes += deftsim_kctx_bytes(e->kctx) - mb0;
        rec->rows += deftsim_rows_write(&pr->rb, ps, pd, r, &pr->m, t1 - t0, t2 - t1, pr->tm);
        if (pr->rb.werr) /* stop at once: the point cannot be written */
            return deftsim_row_buffer_error(&pr->rb, pr->rb.werr);
        if ((st = deftsim_point_sim_add(&pr->psim, r, pr->m.coll_step, pr->m.ncoll,
                                        e->cfg->network.simulate ||
                                        e->cfg->execute.network == DEFTSIM_EXEC_MPI)))
            return st;
        if (e->dump_dir && (st = deftsim_rows_dump(ps, pd, pr->sp, r))) return st;
        rec->stages.metrics += t4 - t3;
        rec->stages.write += deftsim_now() - t4;
    }
    return DEFTSIM_OK;
}

/* [execute] network = mpi: the point's schedules run over MPI by every rank. */
static deftsim_status real_mode(const deftsim_point_sim *psim, deftsim_mpi_result *mres)
{
    const deftsim_schedule **scheds = malloc((psim->n ? psim->n : 1) * sizeof *scheds);
    if (!scheds) return deftsim_error_nomem("engine");
    for (size_t i = 0; i < psim->n; i++) scheds[i] = &psim->it[i].sched;
    deftsim_status st = deftsim_mpi_execute(scheds, psim->n, psim->elem_bytes, mres);
    free(scheds);
    return st;
}

/* The network simulation of the point's iterations ([network] simulate = 1), then its rows
 * with the simulated columns, and the file's commit. */
static deftsim_status point_finish(deftsim_engine *e, point_run *pr, point_record *rec)
{
    const deftsim_config *cfg = e->cfg;
    deftsim_status st;
    if (!writes(e)) return DEFTSIM_OK; /* spread mode: rank 0 simulates and writes */
    if (stopping(e)) return deftsim_error_set(DEFTSIM_E_RUNTIME, "interrupted before its simulation");
    double t0 = deftsim_now();
    if (cfg->network.simulate) {
        deftsim_sim_params sp_net;
        deftsim_point_sim_params(cfg, &pr->psim, &sp_net);
        sp_net.procs = e->prep_threads; /* the iterations side by side on the point's cores */
        st = write_platform(e, &sp_net);
        if (!st) st = deftsim_point_sim_run(&sp_net, &pr->psim, &pr->sres);
        if (st) return st;
        pr->simulated = 1;
        rec->sim_seconds = pr->sres.wall_seconds;
        rec->sim_messages = pr->sres.messages;
        rec->sim_peak_rss = pr->sres.peak_rss_bytes;
        rec->stages.sim_procs = pr->sres.procs;
        rec->stages.sim_messages = pr->sres.messages;
    }
    if (cfg->execute.network == DEFTSIM_EXEC_MPI) {
        if ((st = real_mode(&pr->psim, &pr->mres))) return st;
        pr->measured = 1;
    }
    double t1 = deftsim_now();
    rec->stages.simulate += t1 - t0;
    char run_cols[1024];
    deftsim_sim_mode ran = pr->simulated ? pr->sres.mode : cfg->network.mode;
    if ((st = deftsim_point_sim_run_cols(cfg, &e->platform, ran, run_cols, sizeof run_cols)))
        return st;
    if ((st = deftsim_point_sim_emit(pr->f, &pr->rb, &pr->psim, pr->ps.P,
                                     pr->simulated ? &pr->sres : NULL, run_cols,
                                     pr->measured ? &pr->mres : NULL)))
        return st;
    long bytes = ftell(pr->f);
    st = deftsim_afile_commit(pr->af);
    pr->af = NULL;
    rec->stages.write += deftsim_now() - t1;
    rec->stages.write_bytes += bytes > 0 ? (uint64_t)bytes : 0;
    return st;
}

static void point_close(point_run *pr)
{
    if (pr->af) deftsim_afile_abort(pr->af);
    deftsim_row_buffer_free(&pr->rb);
    deftsim_point_sim_free(&pr->psim);
    deftsim_schedule_free(&pr->full);
    deftsim_sim_result_free(&pr->sres);
    deftsim_mpi_result_free(&pr->mres);
    deftsim_rows_metrics_free(&pr->m);
    deftsim_acc_free(&pr->ps);
    deftsim_timing_free(pr->tm);
    for (size_t i = 0; pr->shadows && i < pr->nshadows; i++) deftsim_sparsifier_free(pr->shadows[i]);
    free(pr->shadows);
    deftsim_sparsifier_free(pr->sp);
}

static deftsim_status run_point(deftsim_engine *e, deftsim_method method, double density,
                                uint32_t P, const char *csv_path, point_record *rec)
{
    point_desc pd;
    deftsim_status st = point_desc_init(e, method, density, P, &pd);
    if (st) return st;
    point_run pr;
    memset(&pr, 0, sizeof pr);
    deftsim_point_sim_init(&pr.psim, P);
    deftsim_schedule_init(&pr.full, P);
    if (pd.compute) pr.psim.nmodel = 2;
    deftsim_kxfer x0;
    deftsim_kctx_transfers(e->kctx, &x0);
    deftsim_noise_sample_now(&rec->machine_start, NULL);
    uint64_t g0 = deftsim_gradsrc_elements(e->src);
    double t_start = deftsim_now();
    if (!(st = point_open(e, &pd, method, csv_path, &pr)) &&
        !(st = deftsim_stages_begin(&rec->stages, e, &pr.ps, pr.tm))) {
        pr.in_iter = 1;
        st = point_iterations(e, &pd, &pr, rec);
        if (!st) {
            pr.in_iter = 0;
            st = point_finish(e, &pr, rec);
        }
    }
    if (st && pr.in_iter)
        st = deftsim_error_wrap(st, "%s d=%s P=%u iteration %zu", pd.method, pd.dens_text, P,
                                pr.ps.it);
    else if (st)
        st = deftsim_error_wrap(st, "%s d=%s P=%u", pd.method, pd.dens_text, P);
    point_close(&pr);
    rec->seconds = deftsim_now() - t_start;
    rec->gradient_elements = deftsim_gradsrc_elements(e->src) - g0;
    rec->stages.total = rec->seconds;
    rec->stages.gen_elements = rec->gradient_elements;
    deftsim_noise_sample_now(&rec->machine_end, NULL);
    deftsim_kctx_transfers(e->kctx, &rec->xfer);
    rec->xfer.calls -= x0.calls;
    rec->xfer.bytes_to_device -= x0.bytes_to_device;
    rec->xfer.bytes_from_device -= x0.bytes_from_device;
    rec->xfer.copy_seconds -= x0.copy_seconds;
    rec->xfer.device_seconds -= x0.device_seconds;
    rec->xfer.untimed_seconds -= x0.untimed_seconds;
    return st;
}

/* ---- the run --------------------------------------------------------------------------------- */

/* rows.csv: the point files of this run, one header. */
static deftsim_status write_combined(const deftsim_engine *e, const point_record *recs, size_t n)
{
    char path[4200], src[4200];
    snprintf(path, sizeof path, "%s/rows.csv", e->cfg->scenario.output);
    deftsim_afile *af;
    deftsim_status st = deftsim_afile_open(&af, path);
    if (st) return st;
    FILE *out = deftsim_afile_stream(af);
    deftsim_rows_header(out);
    for (size_t i = 0; i < n && !st; i++) {
        snprintf(src, sizeof src, "%s/%s", e->cfg->scenario.output, recs[i].file);
        st = deftsim_rows_join(out, src, "");
    }
    if (st) {
        deftsim_afile_abort(af);
        return st;
    }
    return deftsim_afile_commit(af);
}

/* The preparation threads' staging chunks and running sums, allocated once per engine. */
static deftsim_status staging_alloc(deftsim_engine *e)
{
    if (!e->stage) e->stage = malloc((size_t)e->prep_threads * GEN_WORKERS * CHUNK * sizeof(float));
    if (!e->sums) e->sums = malloc((size_t)e->prep_threads * CHUNK * sizeof(double));
    if (!e->stage || !e->sums) return deftsim_error_nomem("engine");
    return DEFTSIM_OK;
}

deftsim_status deftsim_engine_run_point(deftsim_engine *e, deftsim_method method, double density,
                                        uint32_t P, const char *csv_path,
                                        deftsim_point_summary *out)
{
    const deftsim_memory_plan *pl = &e->plan;
    if (out) memset(out, 0, sizeof *out);
    /* The memory plan covers the scenario's worker counts only: a point outside them has not
     * been checked against the budget. */
    const deftsim_memory_row *row = NULL;
    for (size_t i = 0; i < pl->ncounts; i++)
        if (pl->rows[i].P == P) row = &pl->rows[i];
    if (!row)
        return deftsim_error_set(DEFTSIM_E_INPUT, "P = %u is not one of [workers] counts", P);
    if (!row->fits) return deftsim_engine_check_memory(e);
    deftsim_status st = staging_alloc(e);
    if (st) return st;
    point_record rec;
    memset(&rec, 0, sizeof rec);
    rec.method = deftsim_method_name(method);
    rec.density = density;
    rec.P = P;
    st = run_point(e, method, density, P, csv_path, &rec);
    if (out) {
        out->rows = rec.rows;
        out->seconds = rec.seconds;
        out->prepare_seconds = rec.prepare_seconds;
        out->step_seconds = rec.step_seconds;
        out->sim_seconds = rec.sim_seconds;
        out->sim_messages = rec.sim_messages;
        out->gradient_elements = rec.gradient_elements;
        out->machine_start = rec.machine_start;
        out->machine_end = rec.machine_end;
        out->stages = rec.stages;
    }
    return st;
}

/* The progress callback's news of a finished point. */
static void report_point(const deftsim_engine *e, const point_record *rec, size_t done,
                         size_t total, const char *density)
{
    if (!e->opt.progress.fn) return;
    deftsim_run_point_done p = {
        .done = done,
        .total = total,
        .method = rec->method,
        .density = density,
        .P = rec->P,
        .iterations = e->iterations,
        .seconds = rec->seconds,
        .prepare_seconds = rec->prepare_seconds,
        .step_seconds = rec->step_seconds,
        .sim_seconds = rec->sim_seconds,
        .rows = rec->rows,
        .moves_data = deftsim_engine_moves_data(e),
        .device_seconds = rec->xfer.device_seconds,
        .copy_seconds = rec->xfer.copy_seconds,
        .bytes_to_device = rec->xfer.bytes_to_device,
        .bytes_from_device = rec->xfer.bytes_from_device,
        .calls = rec->xfer.calls,
    };
    e->opt.progress.fn(e->opt.progress.user, &p);
}

/* Spread mode, ranks > 0: every point with rank 0, writing nothing. */
static deftsim_status spread_follow(deftsim_engine *e, deftsim_run_summary *summary, double t0)
{
    const deftsim_config *cfg = e->cfg;
    deftsim_status st = staging_alloc(e);
    size_t done = 0;
    for (size_t mi = 0; mi < cfg->sparsify.nmethods && !st; mi++)
        for (size_t di = 0; di < cfg->sparsify.ndensities && !st; di++)
            for (size_t ci = 0; ci < cfg->workers.ncounts && !st; ci++) {
                point_record rec;
                memset(&rec, 0, sizeof rec);
                rec.method = deftsim_method_name(cfg->sparsify.methods[mi]);
                rec.density = cfg->sparsify.densities[di];
                rec.P = (uint32_t)cfg->workers.counts[ci];
                st = run_point(e, cfg->sparsify.methods[mi], rec.density, rec.P, NULL, &rec);
                if (!st) done++;
            }
    if (summary) {
        summary->points = done;
        summary->seconds = deftsim_now() - t0;
    }
    return st;
}

deftsim_status deftsim_engine_run(deftsim_engine *e, deftsim_run_summary *summary)
{
    const deftsim_config *cfg = e->cfg;
    deftsim_status st = deftsim_engine_check_memory(e);
    if (st) return st;
    /* Before anything is created or removed in the folder. */
    if (writes(e) && (st = deftsim_engine_check_output(e))) return st;
    if (summary) memset(summary, 0, sizeof *summary);
    double t0 = deftsim_now();
    if (!writes(e)) return spread_follow(e, summary, t0);
    char started[64], finished[64], dir[4200];
    deftsim_utc_now(started, sizeof started);
    snprintf(dir, sizeof dir, "%s/points", cfg->scenario.output);
    if ((st = deftsim_mkdir_p(dir))) return deftsim_error_wrap(st, "[scenario] output");
    if (e->dump_dir && (st = deftsim_mkdir_p(e->dump_dir))) return deftsim_error_wrap(st, "--dump");
    /* A run killed into this folder before left its uncommitted files: remove those whose
     * writer is gone (a live deftsim writing here keeps its own). */
    deftsim_afile_remove_orphans(cfg->scenario.output);
    deftsim_afile_remove_orphans(dir);
    snprintf(dir, sizeof dir, "%s/platforms", cfg->scenario.output);
    deftsim_afile_remove_orphans(dir);
    snprintf(dir, sizeof dir, "%s/points", cfg->scenario.output);

    size_t total = cfg->sparsify.nmethods * cfg->sparsify.ndensities * cfg->workers.ncounts;
    point_record *recs = calloc(total ? total : 1, sizeof *recs);
    if (!recs) return deftsim_error_nomem("engine");
    if ((st = staging_alloc(e))) {
        free(recs);
        return st;
    }
    /* An unfinished run of this scenario here is resumed; its manifest stays until a point
     * finishes, so that a run stopped before that keeps the points too. */
    json_t *kept = deftsim_engine_kept_points(e);
    if (!kept && (st = deftsim_engine_write_manifest(e, started, NULL, "running", NULL, recs, 0, 0))) {
        free(recs);
        return st;
    }
    size_t done = 0, resumed = 0;
    uint64_t rows = 0;
    int stopped = 0;
    for (size_t mi = 0; mi < cfg->sparsify.nmethods && !st; mi++)
        for (size_t di = 0; di < cfg->sparsify.ndensities && !st; di++)
            for (size_t ci = 0; ci < cfg->workers.ncounts && !st; ci++) {
                deftsim_method m = cfg->sparsify.methods[mi];
                double d = cfg->sparsify.densities[di];
                uint32_t P = (uint32_t)cfg->workers.counts[ci];
                point_record *rec = &recs[done];
                char dt[40], rel[256], full[4500];
                deftsim_csv_double(dt, sizeof dt, d);
                snprintf(rel, sizeof rel, "points/%s_d%s_P%u.csv", deftsim_method_name(m), dt, P);
                snprintf(full, sizeof full, "%s/%s", cfg->scenario.output, rel);
                rec->method = deftsim_method_name(m);
                rec->density = d;
                rec->P = P;
                if (!(rec->file = strdup(rel))) {
                    st = deftsim_error_nomem("engine");
                    break;
                }
                if (deftsim_engine_kept_take(kept, rel, rec)) {
                    done++, resumed++;
                    rows += rec->rows;
                    continue;
                }
                st = (stopped = stopping(e)) ? deftsim_error_set(DEFTSIM_E_RUNTIME, "interrupted")
                                             : run_point(e, m, d, P, full, rec);
                if (st) break;
                done++;
                rows += rec->rows;
                report_point(e, rec, done, total, dt);
                st = deftsim_engine_write_manifest(e, started, NULL, "running", NULL, recs, done, 0);
            }
    json_decref(kept);
    if (st) stopped |= stopping(e);
    if (!st) st = write_combined(e, recs, done);
    deftsim_utc_now(finished, sizeof finished);
    if (st) {
        /* Keep the failure's message: writing the manifest may record another. */
        char msg[2048];
        snprintf(msg, sizeof msg, "%s", deftsim_error_message());
        deftsim_engine_write_manifest(e, started, finished, stopped ? "interrupted" : "failed", msg,
                                      recs, done, 0);
        st = deftsim_error_set(st, "%s", msg);
    } else {
        st = deftsim_engine_write_manifest(e, started, finished, "complete", NULL, recs, done, 1);
    }
    for (size_t i = 0; i < total; i++) {
        free(recs[i].file);
        json_decref(recs[i].kept);
    }
    free(recs);
    if (summary) {
        summary->points = done;
        summary->resumed = resumed;
        summary->interrupted = stopped;
        summary->rows = rows;
        summary->seconds = deftsim_now() - t0;
    }
    return st;
}

deftsim_status deftsim_run(const deftsim_config *cfg, const deftsim_run_options *opt,
                           deftsim_run_summary *summary)
{
    deftsim_engine *e;
    deftsim_status st = deftsim_engine_new(cfg, opt, &e);
    if (st) return st;
    st = deftsim_engine_run(e, summary);
    deftsim_engine_free(e);
    return st;
}

