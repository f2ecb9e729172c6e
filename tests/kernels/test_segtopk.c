/* test_segtopk.c - segmented top-k: every fragment against the sort-based reference. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deftsim_model.h"
#include "kt.h"

static const unsigned path_flags[] = {0, DEFTSIM_KFLAG_FORCE_FALLBACK,
                                      DEFTSIM_KFLAG_FORCE_SAMPLING};

/* Checks every fragment's slice of out against its own reference top-k. */
static void check_fragments(const float *x, const deftsim_kseg *segs, size_t nseg,
                            const uint32_t *out, const char *label)
{
    size_t off = 0;
    for (size_t j = 0; j < nseg; j++) {
        const deftsim_kseg *s = &segs[j];
        uint32_t *ref = kt_ref_order(x + s->offset, s->len);
        for (size_t i = 0; i < s->k; i++) ref[i] += (uint32_t)s->offset;
        char l[400];
        snprintf(l, sizeof l, "%s fragment %zu [%zu, +%zu) k=%zu", label, j, s->offset, s->len,
                 s->k);
        cr_assert(kt_same_set(out + off, ref, s->k, l), "%s: wrong set", l);
        free(ref);
        off += s->k;
    }
}

static void run(const float *x, size_t n, const deftsim_kseg *segs, size_t nseg,
                const char *what, unsigned path_mask, size_t max_configs)
{
    kt_config cfg[16];
    size_t nc = kt_configs(cfg, 16);
    if (nc > max_configs) nc = max_configs;
    size_t ksum = 0;
    for (size_t j = 0; j < nseg; j++) ksum += segs[j].k;
    for (size_t c = 0; c < nc; c++) {
        deftsim_kctx *ctx = kt_ctx(&cfg[c]);
        if (!kt_supported(ctx, DEFTSIM_KOP_SEGTOPK, cfg[c].label)) {
            deftsim_kctx_free(ctx);
            continue;
        }
        for (size_t p = 0; p < 3; p++) {
            if (!(path_mask >> p & 1)) continue;
            unsigned flags = cfg[c].flags | path_flags[p];
            deftsim_kctx_set_flags(ctx, flags);
            char label[200];
            snprintf(label, sizeof label, "segtopk %s [%s, flags %#x]", what, cfg[c].label, flags);
            size_t sb;
            cr_assert_eq(deftsim_k_segtopk_scratch(ctx, segs, nseg, &sb), DEFTSIM_OK, "%s: %s",
                         label, deftsim_error_message());
            kt_buf out, scr;
            kt_buf_alloc(&out, ksum * sizeof(deftsim_kidx));
            kt_buf_alloc(&scr, sb);
            cr_assert_eq(deftsim_k_segtopk(ctx, x, n, segs, nseg, out.p, scr.p, sb), DEFTSIM_OK,
                         "%s: %s", label, deftsim_error_message());
            cr_assert(kt_guard_ok(&out, label), "%s: output guard band overwritten", label);
            cr_assert(kt_guard_ok(&scr, label), "%s: scratch guard band overwritten", label);
            check_fragments(x, segs, nseg, out.p, label);
            deftsim_kstats ks;
            deftsim_kctx_last(ctx, &ks);
            cr_assert_eq(ks.op, DEFTSIM_KOP_SEGTOPK);
            const char *isa = kt_expected_isa(ctx);
            cr_assert(!isa || nseg == 0 || (ks.isa && strcmp(ks.isa, isa) == 0),
                      "%s: ran with %s, expected %s", label, ks.isa ? ks.isa : "(none)",
                      isa ? isa : "");
            kt_buf_free(&out);
            kt_buf_free(&scr);
        }
        deftsim_kctx_free(ctx);
    }
}

/* Random layouts: sizes from empty to beyond the in-cache path, k from 0 to len, offsets
 * anywhere (fragments may overlap and come in any order). */
Test(segtopk, random_layouts)
{
    uint64_t seed = kt_seed();
    static const size_t lens[] = {0, 1, 2, 3, 5, 7, 16, 33, 100, 1000, 5000, 70000};
    size_t n = 200000;
    float *x = malloc(n * sizeof *x);
    deftsim_kseg *segs = malloc(300 * sizeof *segs);
    cr_assert(x && segs);
    for (int rep = 0; rep < 12; rep++) {
        kt_rng r;
        kt_rng_init(&r, seed + 100 + (uint64_t)rep);
        kt_mode mode = (kt_mode)(rep % KT_MODE_COUNT);
        kt_fill(x, n, mode, seed + 200 + (uint64_t)rep);
        size_t nseg = 1 + kt_below(&r, rep < 6 ? 40 : 300);
        for (size_t j = 0; j < nseg; j++) {
            size_t len = lens[kt_below(&r, sizeof lens / sizeof lens[0])];
            if (rep >= 6 && len > 5000) len = 100;
            size_t k;
            switch (kt_below(&r, 5)) {
            case 0: k = 0; break;
            case 1: k = len; break;
            case 2: k = len ? 1 : 0; break;
            default: k = kt_below(&r, len / 10 + 2); break;
            }
            if (k > len) k = len;
            segs[j] = (deftsim_kseg){kt_below(&r, n - len + 1), len, k};
        }
        char what[64];
        snprintf(what, sizeof what, "random %s rep %d", kt_mode_name(mode), rep);
        run(x, n, segs, nseg, what, 7, 16);
    }
    free(segs);
    free(x);
}

/* DEFT's workload: ResNet-18 (CIFAR-10) cut into fragments for P workers, k_j about 1% of
 * each fragment, all fragments in one call, contiguous and in order. */
static void deft_layout(uint32_t P, unsigned path_mask, size_t max_configs)
{
    deftsim_model *m;
    cr_assert_eq(deftsim_model_builtin("resnet18_cifar10", &m), DEFTSIM_OK);
    size_t n = m->numel, cap = 0;
    for (size_t i = 0; i < m->nlayers; i++) cap += m->layers[i].numel * P > n ? P : 1;
    deftsim_kseg *segs = malloc(cap * sizeof *segs);
    float *x = malloc(n * sizeof *x);
    cr_assert(segs && x);
    kt_fill(x, n, KT_NORMAL, kt_seed() + P);
    size_t nseg = 0;
    for (size_t i = 0; i < m->nlayers; i++) {
        const deftsim_layer *L = &m->layers[i];
        size_t parts = L->numel * P > n ? P : 1, off = L->offset;
        for (size_t p = 0; p < parts; p++) {
            size_t len = L->numel / parts + (p < L->numel % parts ? 1 : 0);
            size_t k = len / 100 ? len / 100 : 1;
            segs[nseg++] = (deftsim_kseg){off, len, k};
            off += len;
        }
    }
    char what[64];
    snprintf(what, sizeof what, "resnet18 P=%u (%zu fragments)", P, nseg);
    run(x, n, segs, nseg, what, path_mask, max_configs);
    free(x);
    free(segs);
    deftsim_model_free(m);
}

Test(segtopk, deft_resnet18_p16) { deft_layout(16, 7, 2); }
Test(segtopk, deft_resnet18_p1024) { deft_layout(1024, 3, 2); }

Test(segtopk, errors)
{
    deftsim_kctx *ctx;
    cr_assert_eq(deftsim_kctx_new(&ctx, "cpu", 1), DEFTSIM_OK);
    float x[16] = {0};
    uint32_t out[16];
    deftsim_kseg over[] = {{10, 7, 1}};
    size_t sb;
    cr_assert_eq(deftsim_k_segtopk(ctx, x, 16, over, 1, out, NULL, 0), DEFTSIM_E_INPUT);
    cr_assert(strstr(deftsim_error_message(), "outside"), "%s", deftsim_error_message());
    deftsim_kseg bigk[] = {{0, 4, 5}};
    cr_assert_eq(deftsim_k_segtopk_scratch(ctx, bigk, 1, &sb), DEFTSIM_E_INPUT);
    deftsim_kseg wrap[] = {{SIZE_MAX - 1, 4, 1}};
    cr_assert_eq(deftsim_k_segtopk(ctx, x, 16, wrap, 1, out, NULL, 0), DEFTSIM_E_INPUT);
    cr_assert_eq(deftsim_k_segtopk_scratch(ctx, NULL, 0, &sb), DEFTSIM_OK);
    cr_assert_eq(deftsim_k_segtopk(ctx, x, 16, NULL, 0, NULL, NULL, sb), sb ? DEFTSIM_E_USAGE : DEFTSIM_OK);
    deftsim_kctx_free(ctx);
}
