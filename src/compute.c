/* compute.c - the training step's own compute in a simulated iteration (deftsim_compute.h,
 * docs/COMPUTE.md): [compute]'s durations or table row, DDP's buckets, the iteration's
 * schedule around a sparsifier's. */
#include "deftsim_compute.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deftsim_analysis.h" /* the CSV reader */
#include "deftsim_util.h"

int deftsim_compute_enabled(const deftsim_config *cfg)
{
    return cfg->compute.forward > 0 || cfg->compute.backward > 0 || cfg->compute.table != NULL;
}

/* ---- the table ------------------------------------------------------------------------------ */

static const char *const table_cols[] = {"model", "device", "batch", "forward_ms", "backward_ms",
                                         "source"};
#define NTABLE_COLS (sizeof table_cols / sizeof table_cols[0])

/* One row's figures, checked: file:line and the column on a bad one. */
static deftsim_status table_row(deftsim_csvr *r, const long *col, double *fwd, double *bwd,
                                double *batch)
{
    deftsim_status st;
    double *dst[3] = {batch, fwd, bwd};
    const size_t which[3] = {2, 3, 4};
    for (size_t i = 0; i < 3; i++) {
        if ((st = deftsim_csvr_number(r, (size_t)col[which[i]], dst[i]))) return st;
        const char *cell = deftsim_csvr_field(r, (size_t)col[which[i]]);
        const char *bad = !cell[0] ? "is empty"
                        : !isfinite(*dst[i]) ? "is not finite"
                        : *dst[i] < 0 ? "is negative"
                        : i == 0 && !(*dst[i] >= 1 && *dst[i] == floor(*dst[i]) && *dst[i] <= 1e9)
                            ? "is not a batch size (an integer >= 1)" : NULL;
        if (bad)
            return deftsim_error_set(DEFTSIM_E_INPUT, "%s:%zu: column %s: '%s' %s",
                                     deftsim_csvr_path(r), deftsim_csvr_line(r),
                                     table_cols[which[i]], cell, bad);
    }
    for (size_t i = 0; i < NTABLE_COLS; i++)
        if (deftsim_utf8_check(deftsim_csvr_field(r, (size_t)col[i]), NULL))
            return deftsim_error_set(DEFTSIM_E_INPUT, "%s:%zu: column %s is not valid UTF-8",
                                     deftsim_csvr_path(r), deftsim_csvr_line(r), table_cols[i]);
    for (size_t i = 0; i < 2; i++)
        if (!deftsim_csvr_field(r, (size_t)col[i])[0])
            return deftsim_error_set(DEFTSIM_E_INPUT, "%s:%zu: column %s is empty",
                                     deftsim_csvr_path(r), deftsim_csvr_line(r), table_cols[i]);
    return DEFTSIM_OK;
}

/* Appends "model/device/batch" to a list of rows for a message. */
static void list_row(char *buf, size_t cap, size_t *o, size_t *n, deftsim_csvr *r,
                     const long *col)
{
    if (*o >= cap) return;
    if (*n == 8) {
        *o += (size_t)snprintf(buf + *o, cap - *o, ", ...");
    } else if (*n < 8) {
        *o += (size_t)snprintf(buf + *o, cap - *o, "%s%s/%s/batch %s (line %zu)", *n ? ", " : "",
                               deftsim_csvr_field(r, (size_t)col[0]),
                               deftsim_csvr_field(r, (size_t)col[1]),
                               deftsim_csvr_field(r, (size_t)col[2]), deftsim_csvr_line(r));
    }
    (*n)++;
}

static deftsim_status table_lookup(const deftsim_config *cfg, const char *model,
                                   deftsim_compute_times *out)
{
    const char *path = cfg->compute.table;
    char w[512];
    deftsim_config_where(cfg, "compute", "table", w, sizeof w);
    deftsim_csvr *r;
    deftsim_status st = deftsim_csvr_open(path, &r);
    if (st) return deftsim_error_wrap(st, "%s", w);
    long col[NTABLE_COLS];
    for (size_t i = 0; i < NTABLE_COLS; i++)
        if ((col[i] = deftsim_csvr_find(r, table_cols[i])) < 0) {
            deftsim_csvr_close(r);
            return deftsim_error_set(DEFTSIM_E_INPUT,
                                     "%s: %s has no column '%s' (columns: model, device, batch, "
                                     "forward_ms, backward_ms, source)",
                                     w, path, table_cols[i]);
        }
    const char *dev = cfg->compute.device;
    int batch = cfg->compute.batch;
    char matches[1024] = "", models[1024] = "";
    size_t nm = 0, om = 0, nall = 0, oall = 0;
    int got;
    while (!(st = deftsim_csvr_next(r, &got)) && got) {
        double f, b, bt;
        if ((st = table_row(r, col, &f, &b, &bt))) break;
        list_row(models, sizeof models, &oall, &nall, r, col);
        if (strcmp(deftsim_csvr_field(r, (size_t)col[0]), model)) continue;
        if (dev && strcmp(deftsim_csvr_field(r, (size_t)col[1]), dev)) continue;
        if (batch > 0 && bt != batch) continue;
        if (!nm) {
            out->forward = f / 1e3;
            out->backward = b / 1e3;
            snprintf(out->origin, sizeof out->origin, "%s:%zu", path, deftsim_csvr_line(r));
            snprintf(out->source, sizeof out->source, "%s", deftsim_csvr_field(r, (size_t)col[5]));
        }
        list_row(matches, sizeof matches, &om, &nm, r, col);
    }
    deftsim_csvr_close(r);
    if (st) return deftsim_error_wrap(st, "%s", w);
    char want[600];
    snprintf(want, sizeof want, "model %s%s%s", model, dev ? ", device " : "", dev ? dev : "");
    if (batch > 0) snprintf(want + strlen(want), sizeof want - strlen(want), ", batch %d", batch);
    if (nm == 0)
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "%s: %s has no row for %s (rows: %s; [compute] model, device "
                                 "and batch select one)",
                                 w, path, want, nall ? models : "none");
    if (nm > 1)
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "%s: %zu rows of %s match %s: %s; set [compute] device and "
                                 "batch to pick one",
                                 w, nm, path, want, matches);
    return DEFTSIM_OK;
}

deftsim_status deftsim_compute_resolve(const deftsim_config *cfg, const char *model_name,
                                       deftsim_compute_times *out)
{
    memset(out, 0, sizeof *out);
    if (!cfg->compute.table) {
        out->forward = cfg->compute.forward;
        out->backward = cfg->compute.backward;
        snprintf(out->origin, sizeof out->origin, "[compute] forward, backward");
        return DEFTSIM_OK;
    }
    return table_lookup(cfg, cfg->compute.model ? cfg->compute.model : model_name, out);
}

/* ---- buckets and the schedule --------------------------------------------------------------- */

void deftsim_compute_plan_free(deftsim_compute_plan *p)
{
    free(p->bucket_elems);
    free(p->bucket_backward);
    free(p->layer_backward);
    memset(p, 0, sizeof *p);
}

deftsim_status deftsim_compute_plan_init(const deftsim_config *cfg, const deftsim_model *m,
                                         deftsim_compute_plan *out)
{
    memset(out, 0, sizeof *out);
    deftsim_status st = deftsim_compute_resolve(cfg, m->name, &out->t);
    if (st) return st;
    out->overlap = cfg->compute.overlap;
    size_t L = m->nlayers;
    out->bucket_elems = calloc(L ? L : 1, sizeof *out->bucket_elems);
    out->bucket_backward = calloc(L ? L : 1, sizeof *out->bucket_backward);
    out->layer_backward = calloc(L ? L : 1, sizeof *out->layer_backward);
    out->nlayers = L;
    if (!out->bucket_elems || !out->bucket_backward || !out->layer_backward) {
        deftsim_compute_plan_free(out);
        return deftsim_error_nomem("[compute]");
    }
    /* DDP's assignment: tensors in reverse parameter order fill a bucket until it holds at
     * least its cap (the first bucket's cap is first_bucket_mb), then the next one starts. */
    uint32_t vb = (uint32_t)cfg->sparsify.value_bytes;
    double cap = cfg->compute.first_bucket_mb > 0 ? cfg->compute.first_bucket_mb
                                                  : cfg->compute.bucket_mb;
    double bytes = 0;
    size_t nb = 0;
    for (size_t i = L; i-- > 0;) {
        const deftsim_layer *ly = &m->layers[i];
        double share = cfg->compute.backward_spread == DEFTSIM_SPREAD_UNIFORM
                           ? 1.0 / (double)L : (double)ly->numel / (double)m->numel;
        out->bucket_elems[nb] += ly->numel;
        out->bucket_backward[nb] += out->t.backward * share;
        out->layer_backward[i] = out->t.backward * share;
        bytes += (double)ly->numel * vb;
        if (bytes >= cap * 1048576.0 || i == 0) {
            nb++;
            bytes = 0;
            cap = cfg->compute.bucket_mb;
        }
    }
    out->nbuckets = nb;
    return DEFTSIM_OK;
}

static deftsim_step *given_step(deftsim_schedule *s, const char *name, double seconds)
{
    deftsim_step *st = deftsim_schedule_add(s, DEFTSIM_STEP_COMPUTE, name);
    if (!st) return NULL;
    st->flags = DEFTSIM_STEP_GIVEN;
    for (uint32_t w = 0; w < s->P; w++) st->seconds[w] = seconds;
    return st;
}

/* A layer-wise schedule: the backward pass in pieces before the steps of each layer (the
 * layers run backward from the last; `left` counts the layers not yet produced). */
static deftsim_status layerwise(const deftsim_compute_plan *p, const deftsim_schedule *sp,
                                deftsim_schedule *out)
{
    size_t left = p->nlayers;
    for (size_t k = 0; k <= sp->nsteps; k++) {
        size_t upto = k < sp->nsteps && sp->steps[k].layer ? sp->steps[k].layer - 1 : 0;
        if (upto < left) {
            double sec = 0;
            for (size_t l = upto; l < left; l++) sec += p->layer_backward[l];
            if (!given_step(out, DEFTSIM_COMPUTE_BACKWARD, sec)) return DEFTSIM_E_NOMEM;
            left = upto;
        }
        if (k < sp->nsteps && !deftsim_schedule_add_copy(out, &sp->steps[k]))
            return DEFTSIM_E_NOMEM;
    }
    return DEFTSIM_OK;
}

deftsim_status deftsim_compute_schedule(const deftsim_compute_plan *p, const deftsim_schedule *sp,
                                        int bucketed, uint32_t value_bytes,
                                        deftsim_schedule *out)
{
    deftsim_schedule_reset(out, sp->P);
    if (!given_step(out, DEFTSIM_COMPUTE_FORWARD, p->t.forward)) goto nomem;
    int tagged = 0;
    for (size_t k = 0; k < sp->nsteps && !tagged; k++)
        tagged = sp->steps[k].layer > 0 && sp->steps[k].layer <= p->nlayers;
    if (!bucketed && p->overlap && tagged) {
        if (layerwise(p, sp, out)) goto nomem;
        return DEFTSIM_OK;
    }
    if (!bucketed || !p->overlap || p->nbuckets == 0) {
        if (!given_step(out, DEFTSIM_COMPUTE_BACKWARD, p->t.backward)) goto nomem;
        for (size_t k = 0; k < sp->nsteps; k++)
            if (!deftsim_schedule_add_copy(out, &sp->steps[k])) goto nomem;
        return DEFTSIM_OK;
    }
    for (size_t b = 0; b < p->nbuckets; b++) {
        if (!given_step(out, DEFTSIM_COMPUTE_BACKWARD, p->bucket_backward[b])) goto nomem;
        char name[DEFTSIM_STEP_NAME_MAX];
        snprintf(name, sizeof name, "bucket%zu", b);
        deftsim_step *a = deftsim_schedule_add(out, DEFTSIM_STEP_ALLREDUCE, name);
        if (!a) goto nomem;
        a->flags = DEFTSIM_STEP_ASYNC;
        for (uint32_t w = 0; w < sp->P; w++) a->bytes[w] = p->bucket_elems[b] * value_bytes;
    }
    return DEFTSIM_OK;
nomem:
    return deftsim_error_set(DEFTSIM_E_NOMEM, "[compute]: out of memory building a schedule");
}
