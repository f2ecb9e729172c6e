/* engine_plan.c - the memory plan (engine_internal.h, deftsim_engine.h): what each worker
 * count needs (memory_for) and the largest that fits, the regeneration slots and resident
 * accumulators accum.c asks for; and its reports: the refusal of a worker count over the
 * budget, with what would fit and what to change, and the plan as a table. Called by engine.c
 * and accum.c; calls neither. */
#include "engine_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deftsim_machine.h"
#include "deftsim_util.h"

/* ---- the plan -------------------------------------------------------------------------------- */

/* MemAvailable of /proc/meminfo in bytes; 0 where it cannot be read. */
static uint64_t mem_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    unsigned long long kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
    if (f) fclose(f);
    return (uint64_t)kb * 1024u;
}

/* Fills row->resident and resident_bytes: of the `untracked` workers (those without a
 * residual in the largest block), as many as fit, when the source generates its gradients, in
 * one process, unless opt.no_resident. The room: the budget less what the point needs, and on
 * this machine (no --ram) no more than half of what it has available now beside the point's
 * own needs: residents only save time, so they take memory that nothing else (another run on
 * a shared machine) is using. */
static void plan_resident(const deftsim_engine *e, deftsim_memory_row *row, uint32_t untracked)
{
    row->resident = 0;
    row->resident_bytes = 0;
    row->avg_cache = 0;
    row->avg_cache_bytes = 0;
    uint64_t nb = e->model->numel * sizeof(float);
    if (!untracked || e->opt.no_resident || deftsim_gradsrc_maps(e->src) || !nb ||
        (e->opt.team && e->opt.team->size > 1) || row->bytes >= e->plan.budget_bytes)
        return;
    uint64_t room = e->plan.budget_bytes - row->bytes;
    if (!e->opt.ram_bytes) {
        uint64_t avail = mem_available() / 2;
        avail = avail > row->bytes ? avail - row->bytes : 0;
        if (avail < room) room = avail;
    }
    /* The averages first: they save every other point the generation of all P gradients in
     * its preparation pass, where a resident saves one worker's. */
    uint64_t avg = (uint64_t)e->iterations * nb;
    if (e->cfg->engine.quality && e->cfg->sparsify.error_feedback == DEFTSIM_FEEDBACK_NONE &&
        avg <= room) {
        row->avg_cache = 1;
        row->avg_cache_bytes = avg;
        room -= avg;
    }
    uint64_t fit = room / nb;
    row->resident = (uint32_t)(fit < untracked ? fit : untracked);
    row->resident_bytes = (uint64_t)row->resident * nb;
}

/* The largest block of P workers (S of them tracked) that one rank holds: *buffers, the most
 * accumulator buffers a rank needs (its residuals, plus the shared buffer when it holds an
 * untracked worker), and *untracked, the most workers without a residual in one block. */
static void block_shape(const deftsim_engine *e, uint32_t P, uint32_t S, uint64_t *buffers,
                        uint32_t *untracked)
{
    uint32_t R = e->opt.team && e->opt.team->size > 1 ? e->opt.team->size : 1;
    *buffers = 0;
    *untracked = 0;
    for (uint32_t r = 0; r < R; r++) {
        uint32_t lo = deftsim_team_first(P, R, r), hi = deftsim_team_first(P, R, r + 1);
        if (lo == hi) continue;
        uint64_t b = (uint64_t)(hi < S ? hi : S) - (lo < S ? lo : S) + (S < hi ? 1 : 0);
        uint32_t from = lo > S ? lo : S;
        if (b > *buffers) *buffers = b;
        if (hi > from && hi - from > *untracked) *untracked = hi - from;
    }
}

/* What one worker count needs (the most over the scenario's methods and densities). */
static deftsim_status memory_for(const deftsim_engine *e, uint32_t P, deftsim_memory_row *row)
{
    const deftsim_config *cfg = e->cfg;
    uint64_t n = e->model->numel;
    uint32_t S = deftsim_engine_tracked_workers(cfg, P);
    memset(row, 0, sizeof *row);
    row->P = P;
    /* S residuals, plus the buffer the others' accumulators are regenerated into: none when
     * every method's points are data-free (deftsim_engine_data_free). */
    int reads = 0;
    for (size_t mi = 0; mi < cfg->sparsify.nmethods; mi++)
        reads |= !deftsim_engine_data_free(cfg, e->dump_dir, cfg->sparsify.methods[mi]);
    /* Spread mode: what the rank with the largest block holds. */
    uint64_t buffers;
    uint32_t untracked;
    block_shape(e, P, S, &buffers, &untracked);
    if (reads) row->residual_bytes = buffers * n * sizeof(float);
    uint64_t best_sp = 0, best_ref = 0;
    for (size_t di = 0; di < cfg->sparsify.ndensities; di++) {
        double d = cfg->sparsify.densities[di];
        uint64_t k = deftsim_k_of_density(d, n);
        size_t scratch = 0;
        deftsim_status st = deftsim_k_topk_scratch(e->kctx, (size_t)n, (size_t)k, &scratch);
        if (st) return st;
        uint64_t ref = (uint64_t)scratch + k * sizeof(deftsim_kidx);
        if (ref > best_ref) best_ref = ref;
        for (size_t mi = 0; mi < cfg->sparsify.nmethods; mi++) {
            deftsim_sparsifier_params p;
            deftsim_config_sparsifier_params(cfg, cfg->sparsify.methods[mi], d, P, e->model,
                                             e->kctx, e->opt.team, &p);
            uint64_t b = deftsim_sparsifier_memory(&p);
            if (b > best_sp) best_sp = b;
        }
    }
    row->sparsifier_bytes = best_sp;
    /* CLT-k's low-pass filter reads g_w next to acc_w: a synthetic gradient is regenerated
     * into a buffer of its own (a trace's is read in place). */
    if (reads && !deftsim_gradsrc_maps(e->src) && deftsim_engine_needs_grad(cfg))
        row->residual_bytes += n * sizeof(float);
    /* The average accumulator and the reference top-k ([engine] quality = 1), per-worker
     * bookkeeping and the staging buffers of the preparation threads. */
    uint64_t quality_bytes = cfg->engine.quality ? n * sizeof(float) + best_ref : 0;
    /* Spread mode: the running double sums of the average that travel between the ranks. */
    if (cfg->engine.quality && e->opt.team && e->opt.team->size > 1) quality_bytes += n * sizeof(double);
    row->engine_bytes = quality_bytes + (uint64_t)P * 64 +
                        (uint64_t)e->prep_threads * (GEN_WORKERS * CHUNK * sizeof(float) +
                                                     CHUNK * sizeof(double)) +
                        (n / CHUNK + 1) * sizeof(double) +
                        deftsim_timing_memory(deftsim_timing_repeats_of(cfg), n);
    row->bytes = row->residual_bytes + row->sparsifier_bytes + row->engine_bytes;
    row->fits = row->bytes <= e->plan.budget_bytes;
    /* A generated source regenerates the accumulators of workers without a residual
     * GEN_WORKERS at a time (accum.c's slots) where GEN_WORKERS - 1 more buffers fit in the
     * budget beside the rest; else one at a time. */
    row->regen_slots = reads && untracked ? 1 : 0;
    if (reads && untracked > 1 && !deftsim_gradsrc_maps(e->src)) {
        uint32_t most = (uint32_t)cfg->engine.regen_slots;
        if (most > GEN_WORKERS) most = GEN_WORKERS;
        uint32_t slots = untracked < most ? untracked : most;
        uint64_t more = (uint64_t)(slots - 1) * n * sizeof(float);
        if (slots > 1 && row->bytes + more <= e->plan.budget_bytes) {
            row->regen_slots = slots;
            row->residual_bytes += more;
            row->bytes += more;
        }
    }
    plan_resident(e, row, reads ? untracked : 0);
    return DEFTSIM_OK;
}

int deftsim_engine_avg_cache(const deftsim_engine *e, uint32_t P)
{
    for (size_t i = 0; i < e->plan.ncounts; i++)
        if (e->plan.rows[i].P == P) return e->plan.rows[i].avg_cache;
    return 0;
}

uint32_t deftsim_engine_resident(const deftsim_engine *e, uint32_t P)
{
    for (size_t i = 0; i < e->plan.ncounts; i++)
        if (e->plan.rows[i].P == P) return e->plan.rows[i].resident;
    return 0;
}

uint32_t deftsim_engine_regen_slots(const deftsim_engine *e, uint32_t P)
{
    /* The plan has a row for every requested count; any other P is planned here. */
    for (size_t i = 0; i < e->plan.ncounts; i++) {
        uint32_t slots = e->plan.rows[i].regen_slots;
        if (e->plan.rows[i].P == P) return slots ? slots : 1;
    }
    deftsim_memory_row row;
    if (memory_for(e, P, &row)) {
        deftsim_error_clear();
        return 1;
    }
    return row.regen_slots ? row.regen_slots : 1;
}

deftsim_status deftsim_engine_plan_memory(deftsim_engine *e)
{
    const deftsim_config *cfg = e->cfg;
    deftsim_memory_plan *pl = &e->plan;
    pl->ram_bytes = e->opt.ram_bytes ? e->opt.ram_bytes : deftsim_machine_ram();
    if (!pl->ram_bytes)
        return deftsim_error_set(DEFTSIM_E_RUNTIME,
                                 "[engine] memory_budget: cannot read this machine's RAM "
                                 "(/proc/meminfo, sysconf)");
    pl->budget_fraction = cfg->engine.memory_budget;
    pl->budget_bytes = (uint64_t)((double)pl->ram_bytes * pl->budget_fraction);
    pl->feedback = cfg->sparsify.error_feedback;
    pl->sampled_workers =
        pl->feedback == DEFTSIM_FEEDBACK_SAMPLED ? (uint32_t)cfg->sparsify.sampled_workers : 0;
    pl->n = e->model->numel;
    pl->ncounts = cfg->workers.ncounts;
    pl->rows = calloc(pl->ncounts, sizeof *pl->rows);
    if (!pl->rows) return deftsim_error_nomem("memory plan");
    uint32_t pmax = 0;
    for (size_t i = 0; i < pl->ncounts; i++) {
        deftsim_status st = memory_for(e, (uint32_t)cfg->workers.counts[i], &pl->rows[i]);
        if (st) return st;
        if (pl->rows[i].P > pmax) pmax = pl->rows[i].P;
    }
    /* The largest P up to the largest count that fits: memory grows with P, so a binary search
     * finds the boundary; the walk down afterwards guards against a sparsifier whose memory is
     * not monotone in P. */
    deftsim_memory_row r;
    uint32_t lo = 0, hi = pmax;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo + 1) / 2;
        deftsim_status st = memory_for(e, mid, &r);
        if (st) return st;
        if (r.fits) lo = mid;
        else hi = mid - 1;
    }
    while (lo > 0) {
        deftsim_status st = memory_for(e, lo, &r);
        if (st) return st;
        if (r.fits) break;
        lo--;
    }
    pl->largest_fit = lo;
    return DEFTSIM_OK;
}

/* ---- its reports ----------------------------------------------------------------------------- */

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
    for (size_t i = 0; i < pl->ncounts; i++) /* from the room the residents would take */
        if (pl->rows[i].avg_cache)
            fprintf(f, "P = %u: the iterations' averages kept for the points after the first "
                       "(%s, before the residents)\n",
                    pl->rows[i].P, human_bytes(pl->rows[i].avg_cache_bytes, b1, sizeof b1));
    if (pl->largest_fit)
        fprintf(f, "largest P that fits: %u\n", pl->largest_fit);
    else
        fprintf(f, "not even P = 1 fits\n");
}
