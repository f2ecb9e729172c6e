/* engine_plan.c - the memory plan's reports (deftsim_engine.h): the refusal of a worker count
 * over the budget, with what would fit and what to change, and the plan as a table. The plan
 * itself is computed in engine.c (memory_for, compute_plan). */
#include "engine_internal.h"

#include <inttypes.h>
#include <stdio.h>

#include "deftsim_util.h"

/* "23.4 GiB", "512.0 MiB", "96 B": sizes in messages. */
static const char *human_bytes(uint64_t b, char *buf, size_t cap)
{
    static const char *const unit[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
    if (b < 1024) {
        snprintf(buf, cap, "%" PRIu64 " B", b);
        return buf;
    }
    double v = (double)b / 1024.0;
    size_t u = 0;
    while (v >= 1024.0 && u + 1 < sizeof unit / sizeof unit[0]) {
        v /= 1024.0;
        u++;
    }
    snprintf(buf, cap, "%.1f %s", v, unit[u]);
    return buf;
}

deftsim_status deftsim_engine_check_memory(const deftsim_engine *e)
{
    const deftsim_memory_plan *pl = &e->plan;
    for (size_t i = 0; i < pl->ncounts; i++) {
        const deftsim_memory_row *r = &pl->rows[i];
        if (r->fits) continue;
        char need[32], budget[32], ram[32], fb[96], fit[96], hint[160], w[600];
        deftsim_config_where(e->cfg, "workers", "counts", w, sizeof w);
        if (pl->feedback == DEFTSIM_FEEDBACK_SAMPLED)
            snprintf(fb, sizeof fb, "error_feedback = sampled (sampled_workers = %u)",
                     pl->sampled_workers);
        else
            snprintf(fb, sizeof fb, "error_feedback = %s", deftsim_feedback_name(pl->feedback));
        if (pl->largest_fit)
            snprintf(fit, sizeof fit, "the largest P that fits is %u", pl->largest_fit);
        else
            snprintf(fit, sizeof fit, "not even P = 1 fits");
        switch (pl->feedback) {
        case DEFTSIM_FEEDBACK_FULL:
            snprintf(hint, sizeof hint,
                     "set [sparsify] error_feedback = none or sampled for larger P");
            break;
        case DEFTSIM_FEEDBACK_SAMPLED:
            snprintf(hint, sizeof hint,
                     "lower [sparsify] sampled_workers or set error_feedback = none for larger P");
            break;
        default:
            snprintf(hint, sizeof hint,
                     "lower [workers] counts or raise [engine] memory_budget");
            break;
        }
        return deftsim_error_set(
            DEFTSIM_E_INPUT,
            "%s: P = %u needs %s with %s, over the memory budget of %s (%g of %s RAM); %s; %s",
            w, r->P, human_bytes(r->bytes, need, sizeof need), fb,
            human_bytes(pl->budget_bytes, budget, sizeof budget), pl->budget_fraction,
            human_bytes(pl->ram_bytes, ram, sizeof ram), fit, hint);
    }
    return DEFTSIM_OK;
}

void deftsim_engine_print_plan(const deftsim_engine *e, FILE *f)
{
    const deftsim_memory_plan *pl = &e->plan;
    char b1[32], b2[32], b3[32], b4[32];
    fprintf(f, "model %s: n = %" PRIu64 " elements; error_feedback = %s", e->model->name, pl->n,
            deftsim_feedback_name(pl->feedback));
    if (pl->feedback == DEFTSIM_FEEDBACK_SAMPLED)
        fprintf(f, " (sampled_workers = %u)", pl->sampled_workers);
    fprintf(f, "\nmemory budget %s = %g of %s RAM\n", human_bytes(pl->budget_bytes, b1, sizeof b1),
            pl->budget_fraction, human_bytes(pl->ram_bytes, b2, sizeof b2));
    if (e->opt.team && e->opt.team->size > 1)
        fprintf(f, "spread mode: per rank, of %u ranks (the rank with the most workers of each "
                "P; RAM and budget are each rank's)\n", e->opt.team->size);
    fprintf(f, "%8s %12s %12s %12s %12s  %-4s  %-18s  %s\n", "P", "total", "residuals",
            "sparsifier", "engine", "fits", "regeneration slots", "resident");
    for (size_t i = 0; i < pl->ncounts; i++) {
        const deftsim_memory_row *r = &pl->rows[i];
        fprintf(f, "%8u %12s %12s %12s %12s  %-4s  %-18u  %u\n", r->P, human_bytes(r->bytes, b1, sizeof b1),
                human_bytes(r->residual_bytes, b2, sizeof b2),
                human_bytes(r->sparsifier_bytes, b3, sizeof b3),
                human_bytes(r->engine_bytes, b4, sizeof b4), r->fits ? "yes" : "no",
                r->regen_slots, r->resident);
    }
    if (pl->largest_fit)
        fprintf(f, "largest P that fits: %u\n", pl->largest_fit);
    else
        fprintf(f, "not even P = 1 fits\n");
}
