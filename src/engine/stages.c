/* stages.c - a point's wall time by stage and each stage's floor (deftsim_stages.h). */
#include "deftsim_stages.h"
#include "engine_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "deftsim_par.h"
#include "deftsim_timing.h"
#include "deftsim_util.h"

static const char *const names[] = {"generate", "accumulate", "copy",    "flush",
                                    "sparsify", "metrics",    "simulate", "write"};

const char *deftsim_stages_name(size_t i)
{
    return i < sizeof names / sizeof names[0] ? names[i] : NULL;
}

void deftsim_stages_phase(deftsim_stages *s, const char *name, double secs)
{
    for (size_t i = 0; i < s->nphases; i++)
        if (!strcmp(s->phase[i], name)) {
            s->phase_seconds[i] += secs;
            return;
        }
    if (s->nphases == DEFTSIM_STAGES_MAX_PHASES) return;
    snprintf(s->phase[s->nphases], sizeof s->phase[0], "%s", name);
    s->phase_seconds[s->nphases++] = secs;
}

typedef struct {
    const unsigned char *p;
    size_t bytes, parts;
    volatile uint64_t sink;
} par_read;

static deftsim_status read_part(void *ctx, size_t i, unsigned thread)
{
    (void)thread;
    par_read *r = ctx;
    size_t per = (r->bytes / r->parts) & ~(size_t)63;
    size_t a = i * per, b = i + 1 == r->parts ? r->bytes : a + per;
    const uint64_t *q = (const uint64_t *)(r->p + a);
    uint64_t x = 0, y = 0;
    size_t nq = (b - a) / 8, j = 0;
    for (; j + 2 <= nq; j += 2) {
        x |= q[j];
        y |= q[j + 1];
    }
    r->sink = x | y;
    return DEFTSIM_OK;
}

void deftsim_stages_probe_parallel(deftsim_stages *s, const void *buf, size_t bytes,
                                   unsigned threads)
{
    s->threads = threads ? threads : 1;
    s->read_bwn = NAN;
    if (!buf || bytes < 4096) return;
    par_read r = {.p = buf, .bytes = bytes, .parts = s->threads};
    for (int k = 0; k < 3; k++) { /* the best of three */
        deftsim_timing_flush(buf, bytes);
        double t0 = deftsim_now();
        deftsim_status st = deftsim_par_run(s->threads, s->threads, read_part, &r);
        double dt = deftsim_now() - t0;
        if (!st && dt > 0 && !((double)bytes / dt <= s->read_bwn)) s->read_bwn = (double)bytes / dt;
    }
}

static json_t *num(double v) { return isfinite(v) ? json_real(v) : json_null(); }

static json_t *stage(double secs, double floor, const char *unit, uint64_t amount)
{
    json_t *o = json_pack("{s:o, s:o}", "seconds", num(secs), "floor_seconds", num(floor));
    if (unit) json_object_set_new(o, unit, json_integer((json_int_t)amount));
    return o;
}

json_t *deftsim_stages_json(const deftsim_stages *s)
{
    double bw1 = s->read_bw1 > 0 ? s->read_bw1 : NAN;
    double bwn = s->read_bwn > 0 ? s->read_bwn : bw1;
    double gen_floor = s->trace ? (double)s->need_elements * 4.0 / bwn
                                : (double)s->need_elements / s->gen_rate;
    if (!s->need_elements) gen_floor = 0;
    json_t *o = json_object();
    json_object_set_new(o, "probe",
                        json_pack("{s:i, s:o, s:o, s:o, s:o}", "threads", (int)s->threads,
                                  "read_bytes_per_second", num(bw1),
                                  "read_bytes_per_second_threads", num(s->read_bwn),
                                  "generator_elements_per_second", num(s->gen_rate),
                                  "additions_per_second", num(s->sum_rate)));
    json_object_set_new(o, "accumulators",
                        json_pack("{s:i, s:i, s:i}", "resident", (int)s->resident,
                                  "regeneration_slots", (int)s->regen_slots, "averages_kept",
                                  (int)s->averages_kept));
    json_object_set_new(o, "generate", stage(s->generate, gen_floor, "elements", s->gen_elements));
    json_object_set_new(json_object_get(o, "generate"), "needed_elements",
                        json_integer((json_int_t)s->need_elements));
    /* The preparation's memory traffic, or its additions into the average's sums at the
     * probe's rate, whichever is longer: a floor of either part is a floor of the whole. */
    double acc_floor = (double)s->accum_bytes / bwn;
    if (s->sum_adds && s->sum_rate > 0 && (double)s->sum_adds / s->sum_rate > acc_floor)
        acc_floor = (double)s->sum_adds / s->sum_rate;
    json_object_set_new(o, "accumulate", stage(s->accumulate, acc_floor, "bytes", s->accum_bytes));
    json_object_set_new(json_object_get(o, "accumulate"), "additions",
                        json_integer((json_int_t)s->sum_adds));
    json_object_set_new(o, "copy", stage(s->copy, (double)s->copy_bytes / bw1, "bytes", s->copy_bytes));
    json_object_set_new(o, "flush",
                        stage(s->flush, (double)s->flush_bytes / bw1, "bytes", s->flush_bytes));
    /* The sparsifier's operations run on its kernel context's threads. */
    double bws = s->kthreads > 1 ? bwn : bw1;
    json_object_set_new(o, "sparsify",
                        stage(s->sparsify, (double)s->select_bytes / bws, "bytes", s->select_bytes));
    json_object_set_new(o, "metrics",
                        stage(s->metrics, (double)s->metrics_bytes / bws, "bytes", s->metrics_bytes));
    json_object_set_new(o, "simulate", stage(s->simulate, NAN, NULL, 0));
    if (s->sim_procs)
        json_object_update_new(json_object_get(o, "simulate"),
                               json_pack("{s:i, s:I}", "processes", (int)s->sim_procs,
                                         "messages", (json_int_t)s->sim_messages));
    json_object_set_new(o, "write", stage(s->write, NAN, "bytes", s->write_bytes));
    json_t *ph = json_object();
    for (size_t i = 0; i < s->nphases; i++)
        json_object_set_new(ph, s->phase[i], json_real(s->phase_seconds[i]));
    json_object_set_new(o, "phases", ph);
    json_object_set_new(o, "repeats", json_integer(s->repeats));
    json_object_set_new(o, "phases_modelled", json_boolean(s->profile));
    double sum = s->generate + s->accumulate + s->copy + s->flush + s->sparsify + s->metrics +
                 s->simulate + s->write;
    json_object_set_new(o, "other_seconds", json_real(s->total - sum));
    return o;
}

/* ---- the engine's accounting ---------------------------------------------------------------- */

deftsim_status deftsim_stages_begin(deftsim_stages *s, deftsim_engine *e, const point_state *ps,
                                    const deftsim_timing *tm)
{
    memset(s, 0, sizeof *s);
    s->trace = deftsim_gradsrc_maps(e->src);
    s->profile = e->profile != NULL;
    s->repeats = deftsim_timing_repeats(tm);
    s->gen_rate = NAN;
    s->mark_regen = ps->regen_seconds;
    deftsim_timing_overheads(tm, &s->mark_copy, &s->mark_flush, &s->mark_copies, &s->mark_flushes);
    deftsim_stages_probe_parallel(s, deftsim_timing_buffer(tm), (size_t)ps->n * sizeof(float),
                                  e->prep_threads);
    s->sum_rate = NAN;
    s->kthreads = e->kctx ? deftsim_kctx_threads(e->kctx) : 1;
    if (ps->data_free) return DEFTSIM_OK;
    deftsim_status st = deftsim_acc_sum_rate(e->prep_threads, &s->sum_rate);
    return st ? st : deftsim_gradsrc_rate(e->src, e->prep_threads, &s->gen_rate);
}

void deftsim_stages_prepared(deftsim_stages *s, point_state *ps, double wall, double busy0)
{
    const deftsim_engine *e = ps->e;
    if (ps->data_free) {
        s->accumulate += wall;
        return;
    }
    /* The generator's calls ran on the preparation threads beside the accumulation: their
     * summed time over the threads that ran is the generation's share of the wall time. */
    size_t items = ps->nseg ? ps->npieces : (size_t)((ps->n + CHUNK - 1) / CHUNK);
    double threads = (double)(items < e->prep_threads ? items : e->prep_threads);
    double gen = (deftsim_gradsrc_busy_seconds(e->src) - busy0) / (threads > 0 ? threads : 1);
    if (gen > wall) gen = wall;
    if (gen < 0) gen = 0;
    s->generate += gen;
    s->accumulate += wall - gen;
    s->resident = ps->C;
    s->regen_slots = ps->nregen;
    s->averages_kept += ps->avg_hit ? 1 : 0;
    uint64_t acc = (uint64_t)(ps->hi < ps->S ? ps->hi : ps->S) - (ps->lo < ps->S ? ps->lo : ps->S);
    uint64_t nb = ps->n * sizeof(float);
    /* Residuals read and written (written only in a point's first iteration), the resident
     * accumulators and the average written, and the pages mapped for them zeroed by the
     * kernel before their first write. */
    s->accum_bytes += acc * nb * (ps->fresh ? 1 : 2) + (uint64_t)ps->C * nb +
                      (ps->quality ? nb * (ps->avg_hit ? 2 : 1) : 0) + ps->mapped_bytes;
    ps->mapped_bytes = 0;
    /* The average: every worker's accumulator added into the double sums (this rank's own in
     * spread mode); kept from an earlier point: copied (above). */
    if (ps->quality && !ps->avg_hit)
        s->sum_adds += (uint64_t)(ps->team ? ps->hi - ps->lo : ps->P) * ps->n;
}

void deftsim_stages_stepped(deftsim_stages *s, const point_state *ps, const deftsim_timing *tm,
                            const deftsim_step_result *r, double wall, uint64_t kernel_bytes)
{
    double copy, flush;
    uint64_t copies, flushes;
    deftsim_timing_overheads(tm, &copy, &flush, &copies, &flushes);
    double regen = ps->regen_seconds - s->mark_regen;
    copy -= s->mark_copy;
    flush -= s->mark_flush;
    uint64_t nb = ps->n * sizeof(float);
    s->copy += copy;
    s->flush += flush;
    s->generate += regen;
    s->copy_bytes += (copies - s->mark_copies) * 2 * nb;
    s->flush_bytes += (flushes - s->mark_flushes) * nb;
    s->mark_regen = ps->regen_seconds;
    deftsim_timing_overheads(tm, &s->mark_copy, &s->mark_flush, &s->mark_copies, &s->mark_flushes);
    /* The phases as measured, every repetition (the estimate replaced the real step's own), as
     * charged: a step run once for all workers (a union) counts once per worker. */
    const double *raw = deftsim_timing_phase_raw(tm);
    size_t R = (size_t)deftsim_timing_repeats(tm), P = r->P, nph = r->nphases;
    for (size_t ph = 0; raw && ph < nph; ph++) {
        double v = 0;
        for (size_t k = 0; k < R; k++)
            for (size_t w = 0; w < P; w++) v += raw[(k * P + w) * nph + ph];
        deftsim_stages_phase(s, r->phase_name[ph], v);
    }
    double own = wall - regen - copy - flush;
    s->sparsify += own > 0 ? own : 0;
    if (!ps->data_free) {
        /* What the step's kernel operations, every repetition, and the sparsifier's own
         * loops had to touch (deftsim_kctx_bytes). */
        s->select_bytes += kernel_bytes;
        s->need_elements += (uint64_t)(ps->quality && !ps->team ? ps->P : ps->hi - ps->lo) * ps->n;
    }
    double ref = deftsim_timing_reference(tm);
    if (ref > 0 && (double)nb / ref > s->read_bw1) s->read_bw1 = (double)nb / ref;
}
