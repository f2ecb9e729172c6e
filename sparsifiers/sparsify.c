/* sparsify.c - the sparsifier's front: parameters checked, the object created for a method,
 * each step dispatched to it and its result. The top of sparsifiers/: calls go one way,
 * sparsify.c -> registry.c (the entries) -> sp_*.c (the methods) -> sp_shared.c, sp_team.c,
 * deft_plan.c (what they share); nothing below calls back up. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sp_internal.h"

static const sp_method *method_of(deftsim_method m)
{
    const deftsim_method_desc *d = deftsim_method_get(m);
    return d ? d->impl : NULL;
}

int deftsim_sparsifier_keeps_state(const deftsim_sparsifier *s)
{
    return deftsim_method_has(s->p.method, DEFTSIM_METHOD_CAP_KEEPS_STATE);
}

int deftsim_sparsifier_set_skip_quality(deftsim_sparsifier *s, int skip)
{
    int was = s->p.skip_quality;
    s->p.skip_quality = skip != 0;
    return was;
}

static deftsim_status check_params(const deftsim_sparsifier_params *p)
{
    if (!p) return deftsim_error_set(DEFTSIM_E_USAGE, "sparsifier: NULL parameters");
    if (!method_of(p->method))
        return deftsim_error_set(DEFTSIM_E_USAGE, "sparsifier: unknown method %d", (int)p->method);
    const char *name = deftsim_method_name(p->method);
    if (!p->model || p->model->numel == 0)
        return deftsim_error_set(DEFTSIM_E_USAGE, "%s: no model, or a model without elements",
                                 name);
    if (p->model->numel > DEFTSIM_KIDX_MAX_N)
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "%s: model '%s' has %llu elements, beyond the 32-bit index range",
                                 name, p->model->name, (unsigned long long)p->model->numel);
    if (p->P == 0) return deftsim_error_set(DEFTSIM_E_USAGE, "%s: worker count must be >= 1", name);
    if (!(p->density > 0 && p->density <= 1))
        return deftsim_error_set(DEFTSIM_E_USAGE, "%s: density %g is outside (0, 1]", name,
                                 p->density);
    if (p->index_bytes != 4 && p->index_bytes != 8)
        return deftsim_error_set(DEFTSIM_E_USAGE, "%s: index_bytes %u (4 or 8)", name,
                                 p->index_bytes);
    if (p->value_bytes != 4 && p->value_bytes != 2)
        return deftsim_error_set(DEFTSIM_E_USAGE, "%s: value_bytes %u (4 or 2)", name,
                                 p->value_bytes);
    if (p->wire != DEFTSIM_WIRE_SPEC && p->wire != DEFTSIM_WIRE_REFERENCE)
        return deftsim_error_set(DEFTSIM_E_USAGE, "%s: unknown wire format %d", name, (int)p->wire);
    deftsim_status st = sp_check_options(p);
    if (st) return st;
    if (p->team && p->team->size > 1 && !method_of(p->method)->spread)
        return deftsim_error_set(DEFTSIM_E_UNSUPPORTED,
                                 "%s: spread mode (mpirun without [execute] network = mpi) does "
                                 "not run this method yet; run it as one process (docs/CLUSTER.md)",
                                 name);
    return DEFTSIM_OK;
}

/* ---- Creation ------------------------------------------------------------------------- */

static void release_all(deftsim_sparsifier *s)
{
    if (s->m && s->m->fini) s->m->fini(s);
    for (size_t i = 0; i < s->allocs.n; i++) free(s->allocs.ptr[i]);
    free(s->allocs.ptr);
    free(s->scratch);
    deftsim_schedule_free(&s->res.schedule);
}

/* Fills s from p and runs the method's init (dry: counts bytes only). */
static deftsim_status setup(deftsim_sparsifier *s, const deftsim_sparsifier_params *p, int dry)
{
    deftsim_status st;
    memset(s, 0, sizeof *s);
    if ((st = check_params(p))) return st;
    s->p = *p;
    s->m = method_of(p->method);
    s->name = deftsim_method_name(p->method);
    s->dry = dry;
    s->P = p->P;
    deftsim_team_block(p->team, s->P, &s->lo, &s->hi);
    s->n = p->model->numel;
    s->k = deftsim_k_of_density(p->density, s->n);
    if (p->wire == DEFTSIM_WIRE_REFERENCE) {
        /* The authors' PyTorch code sends int64 indices, fp32 values and int64 counts. */
        s->si = 8;
        s->sv = 4;
        s->count_bytes = 8;
    } else {
        s->si = p->index_bytes;
        s->sv = p->value_bytes;
        s->count_bytes = 4;
    }
    s->kc = p->kctx;
    if (!dry && !s->kc)
        return deftsim_error_set(DEFTSIM_E_USAGE, "%s: no kernel context", s->name);

    deftsim_step_result *r = &s->res;
    r->method = p->method;
    r->P = s->P;
    r->n = s->n;
    r->k = s->k;
    r->index_wire_bytes = s->si;
    r->value_wire_bytes = s->sv;
    uint64_t P = s->P;
    if ((st = sp_alloc_n(s, &s->phase_store, P * DEFTSIM_MAX_PHASES, sizeof(double), "phases")) ||
        (st = sp_alloc_n(s, &r->cost, P, sizeof *r->cost, "costs")) ||
        (st = sp_alloc_n(s, &r->local_count, P, sizeof *r->local_count, "counts")) ||
        (st = sp_alloc_n(s, &r->bytes_sent, P, sizeof *r->bytes_sent, "byte counts")) ||
        (st = sp_alloc_n(s, &r->bytes_recv, P, sizeof *r->bytes_recv, "byte counts")) ||
        (st = sp_alloc_n(s, &s->sel_start, P + 1, sizeof *s->sel_start, "selection offsets")) ||
        (st = sp_alloc_n(s, &s->sel_sorted, P, 1, "selection flags")))
        return st;
    r->phase_seconds = s->phase_store;
    deftsim_schedule_init(&r->schedule, s->P);
    if ((st = s->m->init(s))) return st;
    s->mem_bytes += s->scratch_bytes;
    if (!dry) {
        s->scratch = malloc(s->scratch_bytes ? s->scratch_bytes : 1);
        if (!s->scratch)
            return deftsim_error_nomem("%s: %zu bytes of scratch", s->name, s->scratch_bytes);
    }
    s->ready = 1;
    return DEFTSIM_OK;
}

deftsim_status deftsim_sparsifier_new(const deftsim_sparsifier_params *p, deftsim_sparsifier **out)
{
    if (!out) return deftsim_error_set(DEFTSIM_E_USAGE, "sparsifier: NULL output pointer");
    *out = NULL;
    deftsim_sparsifier *s = malloc(sizeof *s);
    if (!s) return deftsim_error_nomem("sparsifier");
    deftsim_status st = setup(s, p, 0);
    if (st) {
        release_all(s);
        free(s);
        return st;
    }
    *out = s;
    return DEFTSIM_OK;
}

void deftsim_sparsifier_free(deftsim_sparsifier *s)
{
    if (!s) return;
    release_all(s);
    free(s);
}

uint64_t deftsim_sparsifier_memory(const deftsim_sparsifier_params *p)
{
    deftsim_sparsifier s;
    deftsim_status st = setup(&s, p, 1);
    uint64_t bytes = st ? 0 : s.mem_bytes + sizeof s;
    release_all(&s);
    return bytes;
}

/* ---- Steps ---------------------------------------------------------------------------- */

/* The step result before a step: every per-step field cleared. */
static void result_reset(deftsim_sparsifier *s)
{
    deftsim_step_result *r = &s->res;
    size_t P = s->P;
    deftsim_schedule_reset(&r->schedule, s->P);
    memset(r->phase_seconds, 0, P * r->nphases * sizeof *r->phase_seconds);
    memset(r->cost, 0, P * sizeof *r->cost);
    memset(r->local_count, 0, P * sizeof *r->local_count);
    memset(r->bytes_sent, 0, P * sizeof *r->bytes_sent);
    memset(r->bytes_recv, 0, P * sizeof *r->bytes_recv);
    memset(s->sel_start, 0, (P + 1) * sizeof *s->sel_start);
    memset(s->sel_sorted, 0, P);
    r->leader = 0;
    r->common_count = 0;
    r->kj_total = 0;
    r->nnz = 0;
    r->buildup = r->density_actual = 0;
    r->lost_mass = r->lost_abs_mass = s->p.skip_quality ? NAN : 0;
    r->lost_entries = 0;
    r->count_control = 0;
    r->threshold = NAN;
    r->count_total = r->count_max = 0;
    r->oktopk_threshold_local = r->oktopk_threshold_global = r->oktopk_region_balance = NAN;
    r->oktopk_warmup = r->oktopk_local_recompute = r->oktopk_global_recompute = r->oktopk_recut = 0;
    for (size_t j = 0; j < DEFTSIM_METHOD_COLS_MAX; j++) r->extra[j] = NAN;
    r->agg_index = s->agg_idx;
    r->agg_value = s->agg_val;
}

/* After a step: a failed one leaves no half-filled selection behind; a good one gets its
 * bytes per worker. */
static deftsim_status step_done(deftsim_sparsifier *s, deftsim_status st, deftsim_step_result **res)
{
    deftsim_step_result *r = &s->res;
    if (!st) st = sp_share_done(s);
    if (st) {
        memset(r->local_count, 0, s->P * sizeof *r->local_count);
        return st;
    }
    for (size_t i = 0; i < r->schedule.nsteps; i++)
        deftsim_step_traffic(&r->schedule.steps[i], s->P, s->sv, r->bytes_sent, r->bytes_recv);
    *res = r;
    return DEFTSIM_OK;
}

deftsim_status deftsim_sparsifier_step_data_free(deftsim_sparsifier *s, uint64_t t,
                                                 deftsim_step_result **res)
{
    if (res) *res = NULL;
    if (!s || !res) return deftsim_error_set(DEFTSIM_E_USAGE, "sparsifier step: NULL argument");
    if (!s->m->step_data_free || !deftsim_method_has(s->p.method, DEFTSIM_METHOD_CAP_DATA_FREE))
        return deftsim_error_set(DEFTSIM_E_USAGE,
                                 "%s: its step reads the accumulators (no data-free step)",
                                 s->name);
    result_reset(s);
    s->res.agg_value = NULL;
    return step_done(s, s->m->step_data_free(s, t), res);
}

deftsim_status deftsim_sparsifier_step(deftsim_sparsifier *s, uint64_t t,
                                       const deftsim_acc_provider *acc, deftsim_step_result **res)
{
    if (res) *res = NULL;
    if (!s || !acc || !acc->get || !res)
        return deftsim_error_set(DEFTSIM_E_USAGE, "sparsifier step: NULL argument");
    result_reset(s);
    return step_done(s, s->m->step(s, t, acc), res);
}

void deftsim_sparsifier_norm_segments(const deftsim_sparsifier *s, const deftsim_kseg **segs,
                                      size_t *nseg)
{
    *segs = s ? s->norm_segs : NULL;
    *nseg = s && s->norm_segs ? s->norm_nseg : 0;
}

deftsim_status deftsim_sparsifier_selection(deftsim_sparsifier *s, uint32_t w,
                                            const deftsim_kidx **idx, uint64_t *count)
{
    if (!s || !idx || !count)
        return deftsim_error_set(DEFTSIM_E_USAGE, "sparsifier selection: NULL argument");
    if (w >= s->P)
        return deftsim_error_set(DEFTSIM_E_USAGE, "%s: worker %u of %u", s->name, w, s->P);
    uint64_t c = s->res.local_count[w];
    deftsim_kidx *a = s->sel ? s->sel + s->sel_start[w] : NULL;
    if (c && !s->sel_sorted[w]) {
        sp_sort_idx(a, (size_t)c);
        s->sel_sorted[w] = 1;
    }
    *idx = a;
    *count = c;
    return DEFTSIM_OK;
}
