/* point_sim.c - the network simulation of one point (deftsim_point_sim.h), and the engine's
 * rows with the simulated columns appended (engine_internal.h). */
#include "deftsim_point_sim.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deftsim_compute.h"
#include "deftsim_csv.h"
#include "deftsim_util.h"
#include "engine_internal.h"

static const char *dbl(char *buf, double v) { return deftsim_csv_double(buf, 40, v); }

void deftsim_point_sim_init(deftsim_point_sim *s, uint32_t P)
{
    memset(s, 0, sizeof *s);
    s->P = P;
}

void deftsim_point_sim_free(deftsim_point_sim *s)
{
    for (size_t i = 0; i < s->n; i++) {
        deftsim_schedule_free(&s->it[i].sched);
        free(s->it[i].coll_step);
    }
    free(s->it);
    memset(s, 0, sizeof *s);
}

deftsim_schedule *deftsim_point_sim_next(deftsim_point_sim *s)
{
    if (deftsim_grow(&s->it, &s->cap, s->n + 1, sizeof *s->it)) return NULL;
    deftsim_sim_iter *it = &s->it[s->n];
    memset(it, 0, sizeof *it);
    deftsim_schedule_init(&it->sched, s->P);
    s->n++;
    return &it->sched;
}

deftsim_status deftsim_point_sim_copy_steps(deftsim_schedule *dst, const deftsim_schedule *src)
{
    for (size_t k = 0; k < src->nsteps; k++)
        if (!deftsim_schedule_add_copy(dst, &src->steps[k])) return DEFTSIM_E_NOMEM;
    return DEFTSIM_OK;
}

deftsim_status deftsim_point_sim_add(deftsim_point_sim *s, const deftsim_step_result *r,
                                     const size_t *coll_step, size_t ncoll, int with_schedule)
{
    deftsim_schedule *sched = deftsim_point_sim_next(s);
    if (!sched) return deftsim_error_nomem("engine");
    deftsim_sim_iter *it = &s->it[s->n - 1];
    if (with_schedule && deftsim_point_sim_copy_steps(sched, &r->schedule))
        return deftsim_error_nomem("engine: a schedule's copy");
    it->nphases = r->nphases;
    for (size_t ph = 0; ph < r->nphases; ph++) {
        snprintf(it->phase[ph], sizeof it->phase[ph], "%s", r->phase_name[ph]);
        it->selection[ph] = r->phase_selection[ph];
    }
    it->ncoll = ncoll;
    if (ncoll) {
        if (!(it->coll_step = malloc(ncoll * sizeof *it->coll_step)))
            return deftsim_error_nomem("engine");
        memcpy(it->coll_step, coll_step, ncoll * sizeof *it->coll_step);
    }
    s->elem_bytes = r->value_wire_bytes;
    return DEFTSIM_OK;
}

void deftsim_point_sim_params(const deftsim_config *cfg, const deftsim_point_sim *s,
                              deftsim_sim_params *sp)
{
    deftsim_config_sim_params(cfg, s->P, s->elem_bytes, sp);
}

deftsim_status deftsim_point_sim_run(const deftsim_sim_params *sp, const deftsim_point_sim *s,
                                     deftsim_sim_result *res)
{
    const deftsim_schedule **scheds = malloc((s->n ? s->n : 1) * sizeof *scheds);
    if (!scheds) return deftsim_error_nomem("network simulation");
    for (size_t i = 0; i < s->n; i++) scheds[i] = &s->it[i].sched;
    deftsim_status st = deftsim_sim_run(sp, scheds, s->n, res);
    free(scheds);
    return st;
}

/* Worker w's simulated start and end in row pi of iteration i: a compute phase spans its
 * COMPUTE steps (gTop-k merges once per round), a collective is its own step. With [compute]
 * rows 0 and 1 are the forward and the backward pass (which spans its pieces between DDP's
 * buckets). 0: no step (a phase the iteration did not run, or the row of a worker with
 * neither). */
int deftsim_point_sim_row_span(const deftsim_point_sim *s, const deftsim_sim_result *res,
                               size_t i, uint32_t w, size_t pi, double *a, double *b)
{
    const deftsim_sim_iter *it = &s->it[i];
    static const char *const model[2] = {DEFTSIM_COMPUTE_FORWARD, DEFTSIM_COMPUTE_BACKWARD};
    const char *name = pi < s->nmodel ? model[pi] : NULL;
    if (!name) pi -= s->nmodel;
    if (name || pi < it->nphases) {
        if (!name) name = it->phase[pi];
        int any = 0;
        for (size_t k = 0; k < it->sched.nsteps; k++) {
            const deftsim_step *st = &it->sched.steps[k];
            if (st->kind != DEFTSIM_STEP_COMPUTE || strcmp(st->name, name)) continue;
            double x = deftsim_sim_start(res, i, k, w), y = deftsim_sim_end(res, i, k, w);
            if (!any || x < *a) *a = x;
            if (!any || y > *b) *b = y;
            any = 1;
        }
        return any;
    }
    size_t c = pi - it->nphases;
    if (c >= it->ncoll) return 0;
    *a = deftsim_sim_start(res, i, it->coll_step[c], w);
    *b = deftsim_sim_end(res, i, it->coll_step[c], w);
    return 1;
}

/* The iteration's selection critical path: when the last worker finished its last selection
 * phase (leader phases and the broadcasts before a worker's own selection included). NaN
 * when the method selects nothing (dense). */
double deftsim_point_sim_select_critical(const deftsim_point_sim *s,
                                         const deftsim_sim_result *res, size_t i)
{
    const deftsim_sim_iter *it = &s->it[i];
    double crit = NAN;
    for (size_t k = 0; k < it->sched.nsteps; k++) {
        const deftsim_step *st = &it->sched.steps[k];
        if (st->kind != DEFTSIM_STEP_COMPUTE) continue;
        int sel = 0;
        for (size_t ph = 0; ph < it->nphases; ph++)
            if (it->selection[ph] && strcmp(st->name, it->phase[ph]) == 0) sel = 1;
        if (!sel) continue;
        for (uint32_t w = 0; w < res->P; w++) {
            double e = deftsim_sim_end(res, i, k, w);
            if (isnan(crit) || e > crit) crit = e;
        }
    }
    return crit;
}

/* The real mode's columns of row pi of worker w in iteration i (empty without mres):
 * measured_seconds, measured_bytes_sent and _recv for a collective row, then the iteration's
 * comm_measured_seconds; the line's end. */
static void measured_cols(FILE *out, const deftsim_point_sim *s, const deftsim_mpi_result *mres,
                          size_t i, uint32_t w, size_t pi)
{
    char b[2][40];
    if (!mres || i >= mres->n) {
        fputs(",,,,\n", out);
        return;
    }
    const deftsim_sim_iter *it = &s->it[i];
    size_t head = s->nmodel + it->nphases;
    if (pi >= head && pi - head < it->ncoll) {
        size_t g = mres->first[i] + it->coll_step[pi - head];
        fprintf(out, ",%s,%" PRIu64 ",%" PRIu64, dbl(b[0], mres->seconds[g]),
                mres->sent[g * mres->P + w], mres->recv[g * mres->P + w]);
    } else {
        fputs(",,,", out);
    }
    fprintf(out, ",%s\n", dbl(b[1], mres->comm_seconds[i]));
}

/* Writes the buffered rows to out with the simulated columns appended (empty without res). */
deftsim_status deftsim_point_sim_emit(FILE *out, row_buffer *rb, const deftsim_point_sim *s,
                                      uint32_t P, const deftsim_sim_result *res,
                                      const char *run_cols, const deftsim_mpi_result *mres)
{
    if (rb->failed) return deftsim_error_nomem("engine: the row buffer");
    if (rb->werr) return deftsim_row_buffer_error(rb, rb->werr);
    if (fflush(rb->f) != 0) return deftsim_row_buffer_error(rb, errno);
    if (fseek(rb->f, 0, SEEK_SET) != 0)
        return deftsim_error_set(DEFTSIM_E_IO, "engine: the point's rows cannot be read back: %s",
                                 strerror(errno));
    size_t row = 0;
    uint64_t prev = 0;
    char b[5][40];
    for (size_t i = 0; i < s->n; i++) {
        const deftsim_sim_iter *it = &s->it[i];
        size_t per = s->nmodel + it->nphases + it->ncoll ? s->nmodel + it->nphases + it->ncoll : 1;
        char itcols[160] = ",,";
        if (res)
            snprintf(itcols, sizeof itcols, "%s,%s,%s", dbl(b[0], res->comm_seconds[i]),
                     dbl(b[1], deftsim_point_sim_select_critical(s, res, i)), dbl(b[2], res->iteration_seconds[i]));
        for (uint32_t w = 0; w < P; w++)
            for (size_t pi = 0; pi < per; pi++, row++) {
                if (row >= rb->n || rb->end[row] <= prev)
                    return deftsim_error_set(DEFTSIM_E_INTERNAL,
                                             "engine: row %zu of the point is not where the "
                                             "schedule puts it",
                                             row);
                size_t len = (size_t)(rb->end[row] - prev);
                if (len > rb->line_cap) {
                    char *nl = realloc(rb->line, len);
                    if (!nl) return deftsim_error_nomem("engine");
                    rb->line = nl;
                    rb->line_cap = len;
                }
                if (fread(rb->line, 1, len, rb->f) != len)
                    return deftsim_error_set(DEFTSIM_E_IO, "engine: the point's rows cannot be "
                                             "read back");
                fwrite(rb->line, 1, len - 1, out); /* without its newline */
                double x = 0, y = 0;
                if (res && deftsim_point_sim_row_span(s, res, i, w, pi, &x, &y))
                    fprintf(out, ",%s,%s", dbl(b[3], x), dbl(b[4], y));
                else
                    fputs(",,", out);
                fprintf(out, ",%s,%s", itcols, run_cols);
                measured_cols(out, s, mres, i, w, pi);
                prev = rb->end[row];
            }
    }
    if (row != rb->n)
        return deftsim_error_set(DEFTSIM_E_INTERNAL, "engine: %zu rows buffered, %zu laid out",
                                 rb->n, row);
    return DEFTSIM_OK;
}

/* The simulated run's columns: net_topology .. sim_mode (the mode that ran: analytic mode
 * gives "analytic", or "exact" where the full simulation ran instead). A user's platform file has no one
 * link bandwidth or latency: net_topology names the file ("file:<name>", its copy under
 * platforms/) and those two stay empty. */
deftsim_status deftsim_point_sim_run_cols(const deftsim_config *cfg,
                                          const deftsim_platform_record *plat,
                                          deftsim_sim_mode ran, char *buf, size_t cap)
{
    if (!cfg->network.simulate) {
        snprintf(buf, cap, ",,,,,,,off");
        return DEFTSIM_OK;
    }
    FILE *m = fmemopen(buf, cap, "w");
    if (!m) return deftsim_error_nomem("engine");
    char bw[40], lat[40];
    if (cfg->network.topology == DEFTSIM_TOPO_FILE) {
        char topo[4200];
        snprintf(topo, sizeof topo, "file:%s", plat->name ? plat->name : "");
        deftsim_csv_field(m, topo);
        fprintf(m, ",%s,,,", deftsim_net_model_name(cfg->network.model));
    } else {
        fprintf(m, "%s,%s,%s,%s,", deftsim_topology_name(cfg->network.topology),
                deftsim_net_model_name(cfg->network.model), dbl(bw, cfg->network.bandwidth),
                dbl(lat, cfg->network.latency));
    }
    if (cfg->network.library == DEFTSIM_LIB_NCCL) /* NCCL's: "nccl_ring+pad", "nccl_tree", ... */
        fprintf(m, "nccl_ring+%s,nccl_%s,nccl_ring,%s",
                deftsim_nccl_agv_name(cfg->network.nccl_allgatherv),
                deftsim_nccl_algo_name(cfg->network.nccl_algorithm),
                deftsim_sim_mode_name(ran));
    else
        fprintf(m, "%s,%s,%s,%s", deftsim_allgather_name(cfg->network.allgather),
                deftsim_allreduce_name(cfg->network.allreduce),
                deftsim_bcast_name(cfg->network.bcast), deftsim_sim_mode_name(ran));
    int full = ftell(m) >= (long)cap - 1;
    fclose(m);
    if (full) return deftsim_error_set(DEFTSIM_E_INPUT, "[network] platform_file: name too long");
    return DEFTSIM_OK;
}
