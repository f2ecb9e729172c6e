/* train_record.c - `deftsim trace record`: a training run whose workers' gradients at chosen
 * iterations are written into a trace (deftsim_train.h, traces/FORMAT.md). */
#include "deftsim_train.h"

#include <inttypes.h>
#include <stdio.h>

#include <jansson.h>

#include "deftsim_build_info.h"
#include "deftsim_csv.h"
#include "deftsim_trace.h"
#include "train_internal.h"

typedef struct {
    deftsim_trace_writer *w;
    const int64_t *ids;
    size_t nids, next;
    const deftsim_train_progress *progress;
} record_ctx;

static deftsim_status record_grads(void *ctx, uint64_t t, uint32_t P, const float *const *grads)
{
    record_ctx *rc = ctx;
    (void)P;
    if (rc->next >= rc->nids || (uint64_t)rc->ids[rc->next] != t) return DEFTSIM_OK;
    rc->next++;
    deftsim_status st = deftsim_trace_writer_put(rc->w, t, grads);
    if (!st && rc->progress && rc->progress->fn) {
        deftsim_train_event ev = {.kind = DEFTSIM_TRAIN_RECORDED,
                                  .recorded_iteration = t,
                                  .recorded = rc->next,
                                  .to_record = rc->nids};
        rc->progress->fn(rc->progress->user, &ev);
    }
    return st;
}

deftsim_status deftsim_train_record(const deftsim_config *cfg, deftsim_method method,
                                    double density, uint32_t P, const char *dir,
                                    const deftsim_train_progress *progress)
{
    if (!cfg->train.nrecord)
        return deftsim_error_set(DEFTSIM_E_INPUT, "[train] record: no iterations to record");
    deftsim_trainer *tr;
    deftsim_status st = deftsim_trainer_new(cfg, &tr);
    if (st) return st;
    const deftsim_model *m = deftsim_nn_model(tr->net);
    uint64_t last = (uint64_t)cfg->train.record[cfg->train.nrecord - 1];
    if (deftsim_method_has(method, DEFTSIM_METHOD_CAP_SENDS_ALL)) density = 1.0;

    char how[512], db[40];
    snprintf(how, sizeof how,
             "deftsim trace record: %s trained on Fashion-MNIST by %u data-parallel workers, %d "
             "images each per iteration, SGD (lr %g, momentum %g, weight decay %g), %s aggregation "
             "at density %s; gradients before communication",
             m->name, P, cfg->train.batch_size, cfg->train.lr, cfg->train.momentum,
             cfg->train.weight_decay, deftsim_method_name(method),
             deftsim_csv_double(db, sizeof db, density));
    json_t *ids = json_array();
    for (size_t i = 0; ids && i < cfg->train.nrecord; i++)
        json_array_append_new(ids, json_integer((json_int_t)cfg->train.record[i]));
    json_t *prov = json_pack(
        "{s:s, s:s, s:I, s:s, s:s, s:{s:s, s:s, s:s, s:i}, s:i, s:i, s:f, s:f, s:f, s:{s:s, s:f}, "
        "s:o, s:I}",
        "recorder", "deftsim " DEFTSIM_VERSION " (commit " DEFTSIM_GIT_COMMIT ")", "method", how,
        "seed", (json_int_t)cfg->scenario.seed, "model", m->name, "network",
        deftsim_train_model_name(cfg->train.model), "dataset", "name", "Fashion-MNIST", "images",
        tr->train->images_path, "labels", tr->train->labels_path, "train_images", (int)tr->ntrain,
        "P", (int)P, "batch_size", cfg->train.batch_size, "lr", cfg->train.lr, "momentum",
        cfg->train.momentum, "weight_decay", cfg->train.weight_decay, "aggregation", "method",
        deftsim_method_name(method), "density", density, "iterations", ids, "trained_iterations",
        (json_int_t)(last + 1));
    if (!prov) {
        deftsim_trainer_free(tr);
        return deftsim_error_nomem("trace record");
    }
    record_ctx rc = {.ids = cfg->train.record, .nids = cfg->train.nrecord, .progress = progress};
    st = deftsim_trace_writer_open(dir, m, P, prov, &rc.w);
    json_decref(prov);
    if (st) {
        deftsim_trainer_free(tr);
        return st;
    }
    deftsim_train_options opt;
    deftsim_train_options_default(&opt);
    opt.iterations = last + 1;
    opt.evaluate = 0;
    opt.on_grads = record_grads;
    opt.ctx = &rc;
    deftsim_train_result res;
    st = deftsim_trainer_point(tr, method, density, P, &opt, &res);
    if (!st && res.diverged)
        st = deftsim_error_set(DEFTSIM_E_RUNTIME,
                               "trace record: the training diverged at iteration %" PRIu64
                               " before iteration %" PRIu64 " was recorded; lower [train] lr",
                               res.iterations, last);
    deftsim_train_result_free(&res);
    if (st) {
        deftsim_trace_writer_discard(rc.w);
    } else {
        st = deftsim_trace_writer_close(rc.w);
    }
    deftsim_trainer_free(tr);
    return st;
}
