/* rows.c - the rows of a point (engine_internal.h, docs/OUTPUT.md): the columns, the
 * metrics of one step, the row buffer a point's rows wait in for the network simulation's
 * columns, the selections' dump, and the join of point files into rows.csv. */
#include "engine_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "deftsim_csv.h"
#include "deftsim_npy.h"
#include "deftsim_util.h"

/* The dump widens indices from 32 bits (deftsim_npy_write_u32_as_i8). */
_Static_assert(sizeof(deftsim_kidx) == sizeof(uint32_t) && (deftsim_kidx)-1 == UINT32_MAX,
               "deftsim_kidx is no longer uint32_t: adapt the dump");


/* rows.csv columns, in order; docs/OUTPUT.md describes each (a test checks that it names
 * every one). The methods' own columns (the registry's, deftsim_method_column_get) come
 * between the iteration's and the run's. */
static const char *const head_columns[] = {
    /* the point and the row */
    "scenario", "model", "n", "source", "method", "density", "k", "P", "iteration",
    "source_iteration", "worker", "phase_index", "phase", "phase_kind", "phase_selection",
    "phase_seconds", "phase_seconds_min", "phase_seconds_max", "phase_bytes_sent",
    "phase_bytes_recv", "layer",
    /* the worker in this iteration */
    "select_seconds", "select_seconds_min", "select_seconds_max", "worker_seconds", "cost",
    "local_count", "bytes_sent", "bytes_recv", "residual_kept",
    /* the iteration */
    "leader", "nnz", "common_count", "buildup", "actual_density", "kj_total",
    "imbalance_seconds", "imbalance_cost", "captured_frac", "topk_frac", "captured_ratio",
    "lost_mass", "lost_abs_mass", "lost_entries", "acc_norm2", "prepare_seconds",
    "step_seconds", "ref_seconds",
};
static const char *const tail_columns[] = {
    /* the run */
    "error_feedback", "sampled_workers", "index_bytes", "value_bytes", "wire", "backend",
    "threads", "seed",
    /* the network simulation: the row, the iteration, the run */
    "sim_start", "sim_end", "comm_seconds", "select_critical_seconds", "iteration_seconds",
    "net_topology", "net_model", "net_bandwidth", "net_latency", "net_allgather",
    "net_allreduce", "net_bcast", "sim_mode",
    /* the real network mode ([execute] network = mpi): the row, the iteration */
    "measured_seconds", "measured_bytes_sent", "measured_bytes_recv", "comm_measured_seconds",
};
#define NHEAD (sizeof head_columns / sizeof head_columns[0])
#define NTAIL (sizeof tail_columns / sizeof tail_columns[0])

size_t deftsim_engine_column_count(void) { return NHEAD + deftsim_method_column_count() + NTAIL; }

const char *deftsim_engine_column(size_t i)
{
    size_t nm = deftsim_method_column_count();
    if (i < NHEAD) return head_columns[i];
    if (i < NHEAD + nm) return deftsim_method_column_get(i - NHEAD)->name;
    return i < NHEAD + nm + NTAIL ? tail_columns[i - NHEAD - nm] : NULL;
}

void deftsim_rows_metrics_free(step_metrics *m)
{
    free(m->select_seconds);
    free(m->worker_seconds);
    free(m->coll_sent);
    free(m->coll_recv);
    free(m->coll_step);
    free(m->ref_idx);
    free(m->ref_scratch);
}

/* max / mean; NaN (an empty cell) when the mean is not positive. */
static double max_over_mean(const double *v, size_t n)
{
    double mx = 0, s = 0;
    for (size_t i = 0; i < n; i++) {
        s += v[i];
        if (v[i] > mx) mx = v[i];
    }
    if (!(s > 0)) return NAN;
    return mx / (s / (double)n);
}

deftsim_status deftsim_rows_metrics(point_state *ps, const point_desc *pd,
                                    const deftsim_step_result *r, step_metrics *m)
{
    deftsim_engine *e = ps->e;
    uint32_t P = ps->P;
    if (!m->select_seconds) {
        m->select_seconds = malloc(P * sizeof(double));
        m->worker_seconds = malloc(P * sizeof(double));
        if (!m->select_seconds || !m->worker_seconds)
            return deftsim_error_nomem("engine");
    }
    for (uint32_t w = 0; w < P; w++) {
        double sel = 0, all = 0;
        for (size_t ph = 0; ph < r->nphases; ph++) {
            double v = r->phase_seconds[(size_t)w * r->nphases + ph];
            all += v;
            if (r->phase_selection[ph]) sel += v;
        }
        m->select_seconds[w] = sel;
        m->worker_seconds[w] = all;
    }
    m->imbalance_seconds = max_over_mean(m->select_seconds, P);
    m->imbalance_cost = max_over_mean(r->cost, P);

    /* Bytes per collective and worker under the reference algorithms. */
    size_t ncoll = 0;
    for (size_t i = 0; i < r->schedule.nsteps; i++)
        if (r->schedule.steps[i].kind != DEFTSIM_STEP_COMPUTE) ncoll++;
    if (ncoll > m->cap_coll) {
        free(m->coll_sent);
        free(m->coll_recv);
        free(m->coll_step);
        m->coll_sent = malloc(ncoll * P * sizeof(uint64_t));
        m->coll_recv = malloc(ncoll * P * sizeof(uint64_t));
        m->coll_step = malloc(ncoll * sizeof(size_t));
        m->cap_coll = ncoll;
        if (!m->coll_sent || !m->coll_recv || !m->coll_step) {
            m->cap_coll = 0;
            return deftsim_error_nomem("engine");
        }
    }
    m->ncoll = ncoll;
    if (ncoll) {
        memset(m->coll_sent, 0, ncoll * P * sizeof(uint64_t));
        memset(m->coll_recv, 0, ncoll * P * sizeof(uint64_t));
    }
    for (size_t i = 0, c = 0; i < r->schedule.nsteps; i++) {
        const deftsim_step *st = &r->schedule.steps[i];
        if (st->kind == DEFTSIM_STEP_COMPUTE) continue;
        m->coll_step[c] = i;
        deftsim_step_traffic(st, P, r->value_wire_bytes, m->coll_sent + c * P,
                             m->coll_recv + c * P);
        c++;
    }

    /* [engine] quality = 0: no average, no reference top-k; the columns stay empty. */
    m->captured = m->topk = m->ratio = NAN;
    if (!ps->quality) return DEFTSIM_OK;
    /* Captured norm: the aggregate's indices against the exact top-k of the average, both
     * summed in double over the same float values. */
    const float *a = ps->avg;
    double cap = 0;
    for (uint64_t i = 0; i < r->nnz; i++) {
        double v = a[r->agg_index[i]];
        cap += v * v;
    }
    size_t need = 0, need_union = 0;
    deftsim_status st = deftsim_k_topk_scratch(e->kctx, (size_t)ps->n, (size_t)pd->k, &need);
    if (st || (st = deftsim_k_union_scratch(e->kctx, (size_t)ps->n, &need_union))) return st;
    if (need_union > need) need = need_union;
    if (need > m->ref_scratch_bytes) {
        free(m->ref_scratch);
        if (!(m->ref_scratch = malloc(need))) {
            m->ref_scratch_bytes = 0;
            return deftsim_error_nomem("engine");
        }
        m->ref_scratch_bytes = need;
    }
    if (!m->ref_idx && !(m->ref_idx = malloc(2 * (size_t)pd->k * sizeof(deftsim_kidx))))
        return deftsim_error_nomem("engine");
    deftsim_kidx *sorted = m->ref_idx + pd->k;
    const deftsim_kidx *lists[1] = {m->ref_idx};
    size_t lens[1] = {(size_t)pd->k}, nsorted = 0;
    if ((st = deftsim_k_topk(e->kctx, a, (size_t)ps->n, (size_t)pd->k, m->ref_idx, m->ref_scratch,
                             m->ref_scratch_bytes)))
        return deftsim_error_wrap(st, "reference top-k of the average accumulator");
    /* Summed in index order, as the aggregate's (sorted) indices are: when both sets are equal
     * the two fractions are equal to the last bit. The union of the one list is its indices
     * in order. */
    if (pd->k && (st = deftsim_k_union(e->kctx, (size_t)ps->n, lists, lens, 1, sorted,
                                       (size_t)pd->k, &nsorted, m->ref_scratch,
                                       m->ref_scratch_bytes)))
        return deftsim_error_wrap(st, "reference top-k of the average accumulator, in order");
    double top = 0;
    for (size_t i = 0; i < nsorted; i++) {
        double v = a[sorted[i]];
        top += v * v;
    }
    /* The two sums' reads, beside the operations' own bytes (deftsim_kctx_bytes). */
    deftsim_kctx_touch(e->kctx, (r->nnz + nsorted) * (sizeof *sorted + sizeof *a));
    if (ps->norm2 > 0) {
        m->captured = cap / ps->norm2;
        m->topk = top / ps->norm2;
    } else {
        m->captured = m->topk = NAN;
    }
    m->ratio = m->topk > 0 ? m->captured / m->topk : NAN;
    return DEFTSIM_OK;
}

static const char *dbl(char *buf, double v) { return deftsim_csv_double(buf, 40, v); }


deftsim_status deftsim_row_buffer_open(row_buffer *rb, const char *csv_path)
{
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.rows.XXXXXX", csv_path);
    int fd = mkstemp(tmp);
    if (fd < 0) return deftsim_error_set(DEFTSIM_E_IO, "%s: cannot create: %s", tmp, strerror(errno));
    unlink(tmp); /* gone with the process, whatever happens */
    rb->csv_path = csv_path;
    if (!(rb->f = fdopen(fd, "w+"))) {
        close(fd);
        return deftsim_error_set(DEFTSIM_E_IO, "%s: cannot open: %s", tmp, strerror(errno));
    }
    return DEFTSIM_OK;
}

static void row_done(row_buffer *rb)
{
    if (deftsim_grow(&rb->end, &rb->cap, rb->n + 1, sizeof *rb->end)) {
        rb->failed = 1;
        return;
    }
    if (!rb->werr && ferror(rb->f)) rb->werr = errno ? errno : EIO;
    long at = ftell(rb->f);
    if (at < 0) rb->failed = 1;
    rb->end[rb->n++] = at < 0 ? 0 : (uint64_t)at;
}

/* A failed write of the buffered rows (a full disk, a file size limit), naming the point's
 * file: the buffer is an unlinked file beside it. */
deftsim_status deftsim_row_buffer_error(const row_buffer *rb, int err)
{
    return deftsim_error_set(DEFTSIM_E_IO,
                             "%s: write failed: %s (buffering the point's rows in a temporary "
                             "file beside it)",
                             rb->csv_path, strerror(err ? err : EIO));
}

void deftsim_row_buffer_free(row_buffer *rb)
{
    if (rb->f) fclose(rb->f);
    free(rb->line);
    free(rb->end);
    memset(rb, 0, sizeof *rb);
}

uint64_t deftsim_rows_write(row_buffer *rb, const point_state *ps, const point_desc *pd,
                           const deftsim_step_result *r, const step_metrics *m, double prep_s,
                           double step_s, const deftsim_timing *tm)
{
    FILE *f = rb->f;
    uint32_t P = ps->P;
    char b[23][40];
    const double *phmin = deftsim_timing_phase_min(tm), *phmax = deftsim_timing_phase_max(tm);
    char itcols[2048], lost_n[24] = "";
    if (ps->quality) snprintf(lost_n, sizeof lost_n, "%" PRIu64, r->lost_entries);
    int o = snprintf(itcols, sizeof itcols,
                     "%u,%" PRIu64 ",%" PRIu64 ",%s,%s,%" PRIu64 ",%s,%s,%s,%s,%s,%s,%s,%s"
                     ",%s,%s,%s,%s",
                     r->leader, r->nnz, r->common_count, dbl(b[0], r->buildup),
                     dbl(b[1], r->density_actual), r->kj_total, dbl(b[2], m->imbalance_seconds),
                     dbl(b[3], m->imbalance_cost), dbl(b[4], m->captured), dbl(b[5], m->topk),
                     dbl(b[6], m->ratio), dbl(b[7], r->lost_mass), dbl(b[8], r->lost_abs_mass),
                     lost_n, dbl(b[9], ps->norm2), dbl(b[10], prep_s), dbl(b[11], step_s),
                     dbl(b[22], deftsim_timing_reference(tm)));
    /* The methods' own columns: empty where this method declares none of that name. */
    for (size_t c = 0, nc = deftsim_method_column_count(); c < nc; c++)
        if (o > 0 && (size_t)o < sizeof itcols)
            o += snprintf(itcols + o, sizeof itcols - (size_t)o, ",%s",
                          dbl(b[16], deftsim_method_column_value(c, r->method, r)));
    char tail[512];
    snprintf(tail, sizeof tail, "%s,%u,%u,%s", pd->fb_cols, r->index_wire_bytes,
             r->value_wire_bytes, pd->run_cols);
    uint64_t rows = 0;
    for (uint32_t w = 0; w < P; w++) {
        char wcols[512];
        snprintf(wcols, sizeof wcols, "%s,%s,%s,%s,%s,%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%d",
                 dbl(b[12], m->select_seconds[w]),
                 dbl(b[16], deftsim_timing_select_min(tm)[w]),
                 dbl(b[17], deftsim_timing_select_max(tm)[w]), dbl(b[13], m->worker_seconds[w]),
                 dbl(b[14], r->cost[w]), r->local_count[w], r->bytes_sent[w], r->bytes_recv[w],
                 w < ps->S ? 1 : 0);
        size_t pi = 0;
        /* [compute]: the training step's forward and backward pass, given (not measured):
         * phase_kind model, no repetitions. */
        for (size_t mp = 0; pd->compute && mp < 2; mp++, pi++) {
            fprintf(f, "%s,%zu,%" PRIu64 ",%u,%zu,%s,model,0,%s,,,0,0,,%s,%s,%s\n", pd->prefix,
                    ps->it, ps->src_iter, w, pi,
                    mp ? DEFTSIM_COMPUTE_BACKWARD : DEFTSIM_COMPUTE_FORWARD,
                    dbl(b[15], mp ? pd->compute->t.backward : pd->compute->t.forward), wcols,
                    itcols, tail);
            row_done(rb);
            rows++;
        }
        for (size_t ph = 0; ph < r->nphases; ph++, pi++) {
            fprintf(f, "%s,%zu,%" PRIu64 ",%u,%zu,", pd->prefix, ps->it, ps->src_iter, w, pi);
            deftsim_csv_field(f, r->phase_name[ph]);
            size_t wp = (size_t)w * r->nphases + ph;
            fprintf(f, ",compute,%d,%s,%s,%s,0,0,,%s,%s,%s\n", r->phase_selection[ph] ? 1 : 0,
                    dbl(b[15], r->phase_seconds[wp]), dbl(b[18], phmin[wp]), dbl(b[19], phmax[wp]),
                    wcols, itcols, tail);
            row_done(rb);
            rows++;
        }
        for (size_t c = 0; c < m->ncoll; c++, pi++) {
            const deftsim_step *st = &r->schedule.steps[m->coll_step[c]];
            fprintf(f, "%s,%zu,%" PRIu64 ",%u,%zu,", pd->prefix, ps->it, ps->src_iter, w, pi);
            deftsim_csv_field(f, st->name);
            /* A step of a layer-wise method (LAGS) names its model layer (0-based). */
            char lay[16] = "";
            if (st->layer) snprintf(lay, sizeof lay, "%u", st->layer - 1);
            fprintf(f, ",%s,0,,,,%" PRIu64 ",%" PRIu64 ",%s,%s,%s,%s\n",
                    deftsim_step_kind_name(st->kind), m->coll_sent[c * P + w],
                    m->coll_recv[c * P + w], lay, wcols, itcols, tail);
            row_done(rb);
            rows++;
        }
        /* A worker with neither (dense at P = 1) still gets a row: the iteration's metrics
         * must not vanish from the table. */
        if (pi == 0) {
            fprintf(f, "%s,%zu,%" PRIu64 ",%u,0,none,none,0,0,0,0,0,0,,%s,%s,%s\n", pd->prefix,
                    ps->it, ps->src_iter, w, wcols, itcols, tail);
            row_done(rb);
            rows++;
        }
    }
    return rows;
}

deftsim_status deftsim_rows_dump(const point_state *ps, const point_desc *pd,
                                 deftsim_sparsifier *sp, const deftsim_step_result *r)
{
    const deftsim_engine *e = ps->e;
    char dir[4096], path[4200];
    int len = snprintf(dir, sizeof dir, "%s/%s/d%s/P%u/it%zu", e->dump_dir, pd->method,
                       pd->dens_text, ps->P, ps->it);
    if (len < 0 || (size_t)len >= sizeof dir)
        return deftsim_error_set(DEFTSIM_E_INPUT, "--dump %s: path too long", e->dump_dir);
    deftsim_status st = deftsim_mkdir_p(dir);
    if (st) return st;
    for (uint32_t w = 0; w < ps->P; w++) {
        const deftsim_kidx *idx;
        uint64_t count;
        if ((st = deftsim_sparsifier_selection(sp, w, &idx, &count))) return st;
        snprintf(path, sizeof path, "%s/worker%u.npy", dir, w);
        if ((st = deftsim_npy_write_u32_as_i8(path, idx, count))) return st;
    }
    snprintf(path, sizeof path, "%s/union.npy", dir);
    if ((st = deftsim_npy_write_u32_as_i8(path, r->agg_index, r->nnz))) return st;
    snprintf(path, sizeof path, "%s/values.npy", dir);
    return deftsim_npy_write(path, DEFTSIM_NPY_F4, r->agg_value, r->nnz);
}

/* The CSV header line. */
void deftsim_rows_header(FILE *f)
{
    for (size_t i = 0, n = deftsim_engine_column_count(); i < n; i++)
        fprintf(f, "%s%s", i ? "," : "", deftsim_engine_column(i));
    fputc('\n', f);
}

/* The rows of the point file at path, without its header line, each after `prefix`: how
 * rows.csv joins the point files (deftsim run, deftsim sweep). */
deftsim_status deftsim_rows_join(FILE *out, const char *path, const char *prefix)
{
    FILE *in = fopen(path, "r");
    if (!in) return deftsim_error_set(DEFTSIM_E_IO, "%s: cannot read: %s", path, strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int first = 1;
    while ((len = getline(&line, &cap, in)) > 0) {
        if (first) {
            first = 0;
            continue;
        }
        fputs(prefix, out);
        fwrite(line, 1, (size_t)len, out);
    }
    free(line);
    fclose(in);
    return DEFTSIM_OK;
}
