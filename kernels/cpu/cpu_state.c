/* cpu_state.c - the CPU backend's per-context state (its start and end: the thread pool, the
 * instruction sets, the result slots) and the helpers every operation uses: which
 * instruction set, how many threads, how the input is split. The lowest file of kernels/cpu
 * with cpu_pool.c: cpu_backend.c (the table) -> cpu_ops.c, cpu_topk.c -> cpu_select.c ->
 * this file. */
#include <stdlib.h>
#include <unistd.h>

#include "cpu_internal.h"

/* Below this many elements an operation runs on the calling thread alone: waking a worker
 * costs some microseconds, about what one core needs to stream 512 Ki floats from memory. */
#define CPU_PAR_MIN ((size_t)1 << 19)

deftsim_status cpu_init(deftsim_kctx *ctx)
{
    unsigned n = ctx->threads;
    if (n == 0) {
        long on = sysconf(_SC_NPROCESSORS_ONLN);
        n = on < 1 ? 1 : on > 256 ? 256 : (unsigned)on;
    }
    ctx->threads = n;
    cpu_state *cs = calloc(1, sizeof *cs);
    if (!cs) return deftsim_error_nomem("kernels");
    cs->nthreads = n;
    cs->generic = cpu_isa_generic();
    cs->avx2 = cpu_isa_avx2();
    cs->avx512 = cpu_isa_avx512();
    cs->slot_a = calloc(n, sizeof *cs->slot_a);
    cs->slot_b = calloc(n, sizeof *cs->slot_b);
    cs->slot_c = calloc(n, sizeof *cs->slot_c);
    cs->slot_f = calloc(n, sizeof *cs->slot_f);
    deftsim_status st = DEFTSIM_OK;
    if (!cs->slot_a || !cs->slot_b || !cs->slot_c || !cs->slot_f)
        st = deftsim_error_nomem("kernels");
    else
        st = cpu_pool_new(n, &cs->pool);
    if (st) {
        free(cs->slot_a);
        free(cs->slot_b);
        free(cs->slot_c);
        free(cs->slot_f);
        free(cs);
        return st;
    }
    ctx->state = cs;
    return DEFTSIM_OK;
}

void cpu_fini(deftsim_kctx *ctx)
{
    cpu_state *cs = cpu_st(ctx);
    if (!cs) return;
    cpu_pool_free(cs->pool);
    free(cs->slot_a);
    free(cs->slot_b);
    free(cs->slot_c);
    free(cs->slot_f);
    free(cs);
    ctx->state = NULL;
}

const cpu_isa *cpu_isa_peek(const deftsim_kctx *ctx)
{
    const cpu_state *cs = cpu_st(ctx);
    if ((ctx->flags & DEFTSIM_KFLAG_GENERIC) || !cs->avx2) return cs->generic;
    if ((ctx->flags & DEFTSIM_KFLAG_NO_AVX512) || !cs->avx512) return cs->avx2;
    return cs->avx512;
}

const cpu_isa *cpu_isa_for(deftsim_kctx *ctx)
{
    const cpu_isa *isa = cpu_isa_peek(ctx);
    ctx->last.isa = isa->name;
    return isa;
}

unsigned cpu_threads_for(const deftsim_kctx *ctx, size_t work)
{
    unsigned n = cpu_st(ctx)->nthreads;
    return n <= 1 || work < CPU_PAR_MIN ? 1 : n;
}

void cpu_split(size_t n, unsigned nrun, unsigned t, size_t align, size_t *lo, size_t *hi)
{
    size_t chunk = (n + nrun - 1) / nrun;
    chunk = (chunk + align - 1) / align * align;
    size_t a = (size_t)t * chunk;
    *lo = a < n ? a : n;
    *hi = a + chunk < n ? a + chunk : n;
}
