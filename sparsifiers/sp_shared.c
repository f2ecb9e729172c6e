/* sp_shared.c - what the methods share (sp_internal.h): buffers, scratch queries, phases and
 * their timing, schedule steps, the aggregate, the union, the gather/residual pass, the
 * pairs allgather of variable-size picks, and the two values the registry and the methods
 * both compute (an option's value from its text, k from a density). Below sparsify.c,
 * registry.c and the sp_*.c files: it calls none of them. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sp_internal.h"

/* ---- Values the registry and the methods share ------------------------------------------ */

deftsim_status deftsim_method_option_parse(const deftsim_method_option *o, const char *text,
                                           deftsim_opt_value *out)
{
    memset(out, 0, sizeof *out);
    if (o->type == DEFTSIM_OPT_ENUM) {
        char list[256];
        size_t n = 0;
        list[0] = '\0';
        for (int i = 0; o->names[i]; i++) {
            if (!strcmp(o->names[i], text)) {
                out->i = i;
                return DEFTSIM_OK;
            }
            n += (size_t)snprintf(list + n, n < sizeof list ? sizeof list - n : 0, "%s%s",
                                  i ? ", " : "", o->names[i]);
            if (n >= sizeof list) n = sizeof list - 1;
        }
        return deftsim_error_set(DEFTSIM_E_INPUT, "'%s' is not one of: %s", text, list);
    }
    double v;
    if (o->type == DEFTSIM_OPT_INT) {
        int64_t i;
        if (deftsim_parse_i64(text, &i))
            return deftsim_error_set(DEFTSIM_E_INPUT, "'%s' is not an integer", text);
        v = (double)i;
    } else if (deftsim_parse_double(text, &v) || !isfinite(v)) {
        return deftsim_error_set(DEFTSIM_E_INPUT, "'%s' is not a number", text);
    }
    if (!(v >= o->lo && v <= o->hi))
        return deftsim_error_set(DEFTSIM_E_INPUT, "%s is outside [%.17g, %.17g]", text, o->lo,
                                 o->hi);
    if (o->type == DEFTSIM_OPT_INT) out->i = (int)v;
    else out->d = v;
    return DEFTSIM_OK;
}

uint64_t deftsim_k_of_density(double d, uint64_t n)
{
    double k = floor(d * (double)n);
    if (k < 1) return 1;
    if (k > (double)n) return n;
    return (uint64_t)k;
}

/* ---- Buffers ------------------------------------------------------------------------- */

static void *alloc_tracked(deftsim_sparsifier *s, size_t bytes)
{
    if (deftsim_grow(&s->allocs.ptr, &s->allocs.cap, s->allocs.n + 1, sizeof *s->allocs.ptr))
        return NULL;
    /* calloc: pages that a step never touches (a worst-case capacity) cost nothing. */
    void *p = calloc(1, bytes ? bytes : 1);
    if (p) s->allocs.ptr[s->allocs.n++] = p;
    return p;
}

deftsim_status sp_alloc(deftsim_sparsifier *s, void *out, size_t bytes, const char *what)
{
    void **o = out;
    *o = NULL;
    s->mem_bytes += bytes;
    if (s->dry) return DEFTSIM_OK;
    if (!(*o = alloc_tracked(s, bytes)))
        return deftsim_error_nomem("%s: %s (%zu bytes)", s->name, what, bytes);
    return DEFTSIM_OK;
}

void *sp_priv(deftsim_sparsifier *s, size_t bytes)
{
    s->mem_bytes += bytes;
    void *p = alloc_tracked(s, bytes);
    if (!p) deftsim_error_nomem("%s", s->name);
    s->priv = p;
    return p;
}

deftsim_status sp_alloc_n(deftsim_sparsifier *s, void *out, uint64_t elems, size_t size,
                          const char *what)
{
    size_t bytes;
    if (elems > SIZE_MAX || deftsim_mul_size((size_t)elems, size, &bytes)) {
        *(void **)out = NULL;
        return deftsim_error_set(DEFTSIM_E_NOMEM, "%s: %s: %llu elements overflow the address space",
                                 s->name, what, (unsigned long long)elems);
    }
    return sp_alloc(s, out, bytes, what);
}

static deftsim_status scratch_fit(deftsim_sparsifier *s, deftsim_status qst, size_t bytes)
{
    if (qst) return qst;
    if (!s->ready) {
        if (bytes > s->scratch_bytes) s->scratch_bytes = bytes;
        return DEFTSIM_OK;
    }
    if (bytes <= s->scratch_bytes) return DEFTSIM_OK;
    /* A query asked for more than init planned (a size that depends on the data, such as
     * DEFT's k_j): grow once, outside the timed regions, and keep the larger area. */
    void *np = realloc(s->scratch, bytes);
    if (!np)
        return deftsim_error_nomem("%s: %zu bytes of scratch", s->name, bytes);
    s->scratch = np;
    s->scratch_bytes = bytes;
    return DEFTSIM_OK;
}

deftsim_status sp_scratch_topk(deftsim_sparsifier *s, size_t n, size_t k)
{
    size_t b = 0;
    if (!s->kc) return DEFTSIM_OK;
    deftsim_status st = deftsim_k_topk_scratch(s->kc, n, k, &b);
    return scratch_fit(s, st, b);
}

deftsim_status sp_scratch_segtopk(deftsim_sparsifier *s, const deftsim_kseg *segs, size_t nseg)
{
    size_t b = 0;
    if (!s->kc) return DEFTSIM_OK;
    deftsim_status st = deftsim_k_segtopk_scratch(s->kc, segs, nseg, &b);
    return scratch_fit(s, st, b);
}

deftsim_status sp_scratch_norms(deftsim_sparsifier *s, const deftsim_kseg *segs, size_t nseg)
{
    size_t b = 0;
    if (!s->kc) return DEFTSIM_OK;
    deftsim_status st = deftsim_k_seg_norms_scratch(s->kc, segs, nseg, &b);
    return scratch_fit(s, st, b);
}

deftsim_status sp_scratch_union(deftsim_sparsifier *s)
{
    size_t b = 0;
    if (!s->kc) return DEFTSIM_OK;
    deftsim_status st = deftsim_k_union_scratch(s->kc, (size_t)s->n, &b);
    return scratch_fit(s, st, b);
}

deftsim_status sp_scratch_merge(deftsim_sparsifier *s, size_t na, size_t nb)
{
    size_t b = 0;
    if (!s->kc) return DEFTSIM_OK;
    deftsim_status st = deftsim_k_merge_topk_scratch(s->kc, na, nb, &b);
    return scratch_fit(s, st, b);
}

deftsim_status sp_plan_common(deftsim_sparsifier *s, uint64_t sel_cap, uint64_t agg_cap)
{
    deftsim_status st;
    s->agg_cap = agg_cap;
    if ((st = sp_alloc_n(s, &s->sel, sel_cap, sizeof *s->sel, "selections")) ||
        (st = sp_alloc_n(s, &s->agg_idx, agg_cap, sizeof *s->agg_idx, "aggregate indices")) ||
        (st = sp_alloc_n(s, &s->agg_val, agg_cap, sizeof *s->agg_val, "aggregate values")))
        return st;
    return DEFTSIM_OK;
}

/* ---- Phases, timing, schedule ---------------------------------------------------------- */

size_t sp_phase(deftsim_sparsifier *s, const char *name, int selection)
{
    deftsim_step_result *r = &s->res;
    /* Methods register at most DEFTSIM_MAX_PHASES phases; a table bug shows in every test. */
    if (r->nphases == DEFTSIM_MAX_PHASES) return DEFTSIM_MAX_PHASES - 1;
    r->phase_name[r->nphases] = name;
    r->phase_selection[r->nphases] = (unsigned char)(selection != 0);
    return r->nphases++;
}

size_t sp_compute(deftsim_sparsifier *s, size_t ph)
{
    if (!deftsim_schedule_add(&s->res.schedule, DEFTSIM_STEP_COMPUTE, s->res.phase_name[ph]))
        return SIZE_MAX;
    return s->res.schedule.nsteps - 1;
}

deftsim_step *sp_collective(deftsim_sparsifier *s, deftsim_step_kind kind, const char *name)
{
    return deftsim_schedule_add(&s->res.schedule, kind, name);
}

void sp_charge(deftsim_sparsifier *s, size_t step, size_t ph, uint32_t w, double secs)
{
    s->res.phase_seconds[(size_t)w * s->res.nphases + ph] += secs;
    s->res.schedule.steps[step].seconds[w] += secs;
}

/* ---- Accumulators ---------------------------------------------------------------------- */

deftsim_status sp_get(const deftsim_acc_provider *a, uint32_t w, float **acc)
{
    deftsim_error_clear();
    *acc = a->get(a->ctx, w);
    if (*acc) return DEFTSIM_OK;
    if (deftsim_error_message()[0])
        return deftsim_error_wrap(DEFTSIM_E_RUNTIME, "accumulator of worker %u", w);
    return deftsim_error_set(DEFTSIM_E_RUNTIME,
                             "sparsifier: the provider returned no accumulator for worker %u", w);
}

const double *sp_norms(const deftsim_acc_provider *a, uint32_t w)
{
    return a->norms ? a->norms(a->ctx, w) : NULL;
}

void sp_reads_at(const deftsim_acc_provider *a, const deftsim_kidx *idx, uint64_t nnz)
{
    if (a->reads_at) a->reads_at(a->ctx, idx, nnz);
}

void sp_writes_only(const deftsim_acc_provider *a)
{
    static const deftsim_kidx none[1];
    sp_reads_at(a, none, 0);
}

deftsim_status sp_release(const deftsim_acc_provider *a, uint32_t w)
{
    if (!a->release) return DEFTSIM_OK;
    deftsim_status st = a->release(a->ctx, w);
    if (st) return deftsim_error_wrap(st, "releasing worker %u", w);
    return DEFTSIM_OK;
}

/* ---- Aggregate ------------------------------------------------------------------------ */

void sp_agg_add(deftsim_sparsifier *s, const float *v, uint64_t m, uint32_t w)
{
    float *a = s->agg_val;
    if (w == 0)
        memcpy(a, v, m * sizeof *a);
    else
        for (uint64_t i = 0; i < m; i++) a[i] += v[i];
    /* v read, the aggregate written (and read before, after the first worker) */
    deftsim_kctx_touch(s->kc, m * sizeof *a * (w == 0 ? 2 : 3));
}

void sp_zero_acc(deftsim_sparsifier *s, float *acc)
{
    memset(acc, 0, (size_t)s->n * sizeof *acc);
    deftsim_kctx_touch(s->kc, s->n * sizeof *acc);
}

void sp_agg_finish(deftsim_sparsifier *s, uint64_t nnz)
{
    float inv = 1.0f / (float)s->P;
    /* Multiplying by 1/P is exact for powers of two; otherwise divide, as the references'
     * values / n_workers does. */
    if ((s->P & (s->P - 1)) == 0)
        for (uint64_t i = 0; i < nnz; i++) s->agg_val[i] *= inv;
    else
        for (uint64_t i = 0; i < nnz; i++) s->agg_val[i] /= (float)s->P;
    sp_agg_counts(s, nnz);
}

void sp_agg_counts(deftsim_sparsifier *s, uint64_t nnz)
{
    s->res.nnz = nnz;
    s->res.buildup = (double)nnz / (double)s->k;
    s->res.density_actual = (double)nnz / (double)s->n;
}

deftsim_status sp_union(deftsim_sparsifier *s, const deftsim_kidx *const *lists,
                        const size_t *lens, size_t nlists, uint64_t *count)
{
    deftsim_status st;
    size_t cnt = 0;
    if ((st = sp_scratch_union(s))) return st;
    if ((st = deftsim_k_union(s->kc, (size_t)s->n, lists, lens, nlists, s->agg_idx,
                              (size_t)s->agg_cap, &cnt, s->scratch, s->scratch_bytes)))
        return st;
    if (cnt > s->agg_cap)
        return deftsim_error_set(DEFTSIM_E_INTERNAL,
                                 "%s: union of %zu indices exceeds the planned %llu", s->name,
                                 cnt, (unsigned long long)s->agg_cap);
    *count = cnt;
    return DEFTSIM_OK;
}

deftsim_status sp_gather_residual(deftsim_sparsifier *s, const deftsim_acc_provider *a,
                                  uint64_t nnz, float *vals, size_t ph_gather, size_t ph_residual)
{
    deftsim_status st;
    const uint32_t P = s->P;
    const size_t n = (size_t)s->n;
    float *acc;
    size_t c_gather = sp_compute(s, ph_gather);
    if (c_gather == SIZE_MAX) return DEFTSIM_E_NOMEM;
    if (P > 1) {
        deftsim_step *c = sp_collective(s, DEFTSIM_STEP_ALLREDUCE, "values");
        if (!c) return DEFTSIM_E_NOMEM;
        for (uint32_t w = 0; w < P; w++) c->bytes[w] = nnz * s->sv;
    }
    size_t c_res = sp_compute(s, ph_residual);
    if (c_res == SIZE_MAX) return DEFTSIM_E_NOMEM;
    /* Spread mode: the running sum of the workers before this rank's block arrives first. */
    if ((st = sp_chain_in(s, s->agg_val, nnz * sizeof *s->agg_val))) return st;
    /* The pass reads and zeroes the accumulators at U only. */
    sp_reads_at(a, s->agg_idx, nnz);
    for (uint32_t w = s->lo; w < s->hi; w++) {
        if ((st = sp_get(a, w, &acc))) break;
        float *v = w == 0 ? s->agg_val : vals;
        SP_TIMED(s, c_gather, ph_gather, w,
                 deftsim_k_gather(s->kc, acc, n, s->agg_idx, (size_t)nnz, v));
        if (w) sp_agg_add(s, v, nnz, w);
        SP_TIMED(s, c_res, ph_residual, w,
                 deftsim_k_zero_at(s->kc, acc, n, s->agg_idx, (size_t)nnz));
        if ((st = sp_release(a, w))) break;
    }
    sp_reads_at(a, NULL, 0);
    if (st) return st;
    if ((st = sp_chain_out(s, s->agg_val, nnz * sizeof *s->agg_val)) ||
        (st = sp_chain_bcast(s, s->agg_val, nnz * sizeof *s->agg_val)))
        return st;
    sp_agg_finish(s, nnz);
    return DEFTSIM_OK;
}

deftsim_step *sp_cf_add(deftsim_schedule *s, deftsim_step_kind kind, const char *name,
                        uint64_t bytes)
{
    deftsim_step *st = deftsim_schedule_add(s, kind, name);
    if (!st) return NULL;
    if (kind == DEFTSIM_STEP_BCAST) {
        st->root = 0;
        st->bytes[0] = bytes;
    } else {
        for (uint32_t r = 0; r < s->P; r++) st->bytes[r] = bytes;
    }
    return st;
}

double sp_topk_cost(uint64_t size, uint64_t k)
{
    return k > 1 ? (double)size * log2((double)k) : (double)size;
}

static int cmp_idx(const void *a, const void *b)
{
    deftsim_kidx x = *(const deftsim_kidx *)a, y = *(const deftsim_kidx *)b;
    return (x > y) - (x < y);
}

void sp_sort_idx(deftsim_kidx *a, size_t n)
{
    if (n > 1) qsort(a, n, sizeof *a, cmp_idx);
}

/* ---- Variable-size picks (hardthr, sidco) ---------------------------------------------- */

deftsim_status sp_pairs_init(deftsim_sparsifier *s, sp_pairs *pp)
{
    deftsim_status st;
    uint64_t P = s->P, want = 2 * P * s->k;
    if (want > P * s->n) want = P * s->n;
    memset(pp, 0, sizeof *pp);
    if ((st = sp_plan_common(s, 0, s->n)) ||
        (st = sp_alloc_n(s, &pp->cand, s->n, sizeof *pp->cand, "candidates")) ||
        (st = sp_alloc_n(s, &pp->dense, s->n, sizeof *pp->dense, "dense sums")) ||
        (st = sp_alloc_n(s, &pp->lists, P, sizeof *pp->lists, "lists")) ||
        (st = sp_alloc_n(s, &pp->lens, P, sizeof *pp->lens, "lists")) ||
        (st = sp_scratch_union(s)))
        return st;
    /* The picks grow with the data: counted at their first size. */
    s->mem_bytes += want * (sizeof *pp->picks + sizeof *pp->vals);
    if (s->dry) return DEFTSIM_OK;
    pp->picks = malloc((size_t)(want ? want : 1) * sizeof *pp->picks);
    pp->vals = malloc((size_t)(want ? want : 1) * sizeof *pp->vals);
    if (!pp->picks || !pp->vals)
        return deftsim_error_nomem("%s: the picks", s->name);
    pp->cap = want ? want : 1;
    s->sel = pp->picks;
    return DEFTSIM_OK;
}

void sp_pairs_fini(sp_pairs *pp)
{
    free(pp->picks);
    free(pp->vals);
    pp->picks = NULL;
    pp->vals = NULL;
}

void sp_pairs_begin(sp_pairs *pp) { pp->used = 0; }

/* Room for `need` picks and their values (untimed); the two grow alike. */
static deftsim_status pairs_reserve(deftsim_sparsifier *s, sp_pairs *pp, uint64_t need)
{
    if (need <= pp->cap) return DEFTSIM_OK;
    size_t ci = (size_t)pp->cap, cv = (size_t)pp->cap;
    if (deftsim_grow(&pp->picks, &ci, (size_t)need, sizeof *pp->picks) ||
        deftsim_grow(&pp->vals, &cv, (size_t)need, sizeof *pp->vals))
        return deftsim_error_nomem("%s: %zu picks", s->name, (size_t)need);
    s->mem_bytes += (ci - pp->cap) * (sizeof *pp->picks + sizeof *pp->vals);
    pp->cap = ci;
    s->sel = pp->picks;
    return DEFTSIM_OK;
}

deftsim_status sp_pairs_add(deftsim_sparsifier *s, sp_pairs *pp, uint32_t w, uint64_t cnt,
                            uint64_t *at)
{
    deftsim_status st = pairs_reserve(s, pp, pp->used + cnt);
    if (st) return st;
    memcpy(pp->picks + pp->used, pp->cand, (size_t)cnt * sizeof *pp->picks);
    s->sel_start[w] = pp->used;
    s->res.local_count[w] = cnt;
    *at = pp->used;
    pp->used += cnt;
    return DEFTSIM_OK;
}

/* Spread mode: every worker's picks, values and cost from its owner. Each rank appended its
 * own workers' picks from offset 0; the counts are shared first, so that the buffers can grow
 * to every worker's, then the picks are laid out back to back in worker order, as one process
 * appends them. */
static deftsim_status pairs_share(deftsim_sparsifier *s, sp_pairs *pp)
{
    deftsim_status st;
    if (!sp_spread(s)) return DEFTSIM_OK;
    uint64_t *counts = malloc(s->P * sizeof *counts);
    if (!counts) return deftsim_error_nomem("%s: spread mode", s->name);
    memcpy(counts, s->res.local_count, s->P * sizeof *counts);
    st = sp_share_fixed(s, counts, sizeof *counts);
    uint64_t total = 0;
    for (uint32_t w = 0; !st && w < s->P; w++) total += counts[w];
    free(counts);
    if (st || (st = pairs_reserve(s, pp, total)) || (st = sp_share_sel(s, pp->vals, 1)))
        return st;
    pp->used = total;
    return DEFTSIM_OK;
}

deftsim_status sp_pairs_exchange(deftsim_sparsifier *s, sp_pairs *pp, int padded, size_t ph_sum)
{
    deftsim_status st;
    deftsim_step_result *r = &s->res;
    const uint32_t P = s->P;
    uint64_t K = 0, m = 0;
    if ((st = pairs_share(s, pp))) return st;
    for (uint32_t w = 0; w < P; w++) {
        uint64_t c = r->local_count[w];
        pp->lists[w] = pp->picks + s->sel_start[w];
        pp->lens[w] = (size_t)c;
        K += c;
        if (c > m) m = c;
    }
    if (P > 1) {
        deftsim_step *c = sp_collective(s, DEFTSIM_STEP_ALLGATHER, "counts");
        if (!c) return DEFTSIM_E_NOMEM;
        for (uint32_t w = 0; w < P; w++) c->bytes[w] = s->count_bytes;
        c = sp_collective(s, DEFTSIM_STEP_ALLGATHER, "pairs");
        if (!c) return DEFTSIM_E_NOMEM;
        for (uint32_t w = 0; w < P; w++)
            c->bytes[w] = (padded ? m : r->local_count[w]) *
                          ((uint64_t)s->si + s->sv);
    }
    /* Every worker adds the P received sparse vectors into a dense gradient: run once,
     * charged to every worker; the picks lie back to back in worker order. */
    size_t c_sum = sp_compute(s, ph_sum);
    if (c_sum == SIZE_MAX) return DEFTSIM_E_NOMEM;
    double t0 = sp_now(s);
    st = deftsim_k_scatter_add(s->kc, pp->dense, (size_t)s->n, pp->picks, pp->vals, (size_t)K);
    double dt = sp_now(s) - t0;
    if (st) return st;
    for (uint32_t w = 0; w < P; w++) sp_charge(s, c_sum, ph_sum, w, dt);
    /* The aggregate (untimed): its support, its values, the dense buffer cleared. */
    uint64_t nnz;
    if ((st = sp_union(s, pp->lists, pp->lens, P, &nnz)) ||
        (st = deftsim_k_gather(s->kc, pp->dense, (size_t)s->n, s->agg_idx, (size_t)nnz,
                               s->agg_val)) ||
        (st = deftsim_k_zero_at(s->kc, pp->dense, (size_t)s->n, s->agg_idx, (size_t)nnz)))
        return st;
    sp_agg_finish(s, nnz);
    r->count_control = 1;
    r->count_total = K;
    r->count_max = m;
    return DEFTSIM_OK;
}
