/* measure_deviations.c - the size of DEFT's norm deviation from the authors' code
 * (docs/SPARSIFIERS.md, "Deviations from the authors' code"), on the synthetic generator's
 * gradients of a built-in model: for every worker's accumulator at iteration 0 (its gradient:
 * the residuals start at zero), the fragments' norms in double (deftsim's seg_norms kernel) and
 * as the authors' float32 torch.norm (deftsim_deft_norm_float32), their largest relative
 * difference, and the fragments whose k_j differs between deftsim's allocation and the
 * authors' (float32 norms, trunc(remain_k * (norm / remain_norm))), with the two causes
 * apart: the norms alone (float32 norms, deftsim's order) and the order alone (double norms,
 * the authors' order).
 *
 *   measure_deviations MODEL DENSITY P [P ...]
 *
 * e.g. `build-dev/tests/sparsify/measure_deviations vgg16_cifar10 0.01 6`. The generator runs
 * with the scenario defaults ([synthetic], seed 1). Exit 0 when everything ran; the figures
 * are printed, not judged. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deftsim_config.h"
#include "deftsim_deft.h"
#include "deftsim_gradsrc.h"
#include "deftsim_kernels.h"
#include "deftsim_sparsify.h"

static int fail(const char *what)
{
    fprintf(stderr, "measure_deviations: %s: %s\n", what, deftsim_error_message());
    return 1;
}

/* Fragments whose k_j differs between a and b, and the sum of |a_j - b_j|. */
static size_t kj_diff(const uint64_t *a, const uint64_t *b, size_t L, uint64_t *moved)
{
    size_t c = 0;
    *moved = 0;
    for (size_t j = 0; j < L; j++)
        if (a[j] != b[j]) {
            c++;
            *moved += a[j] > b[j] ? a[j] - b[j] : b[j] - a[j];
        }
    return c;
}

static int measure_p(deftsim_gradsrc *g, deftsim_kctx *kc, double density, uint32_t P)
{
    const deftsim_model *m = deftsim_gradsrc_model(g);
    const uint64_t n = m->numel, k = deftsim_k_of_density(density, n);
    deftsim_fragment *fr;
    size_t L;
    if (deftsim_deft_fragments(m, P, &fr, &L)) return fail("fragments");
    deftsim_kseg *segs = malloc(L * sizeof *segs);
    double *nd = malloc(L * sizeof *nd), *nf = malloc(L * sizeof *nf);
    uint64_t *kj[4];
    size_t *order = malloc(L * sizeof *order);
    float *acc = malloc(n * sizeof *acc);
    for (int i = 0; i < 4; i++) kj[i] = malloc(L * sizeof *kj[i]);
    size_t sb = 0;
    for (size_t j = 0; j < L; j++) segs[j] = (deftsim_kseg){fr[j].offset, fr[j].size, 0};
    if (deftsim_k_seg_norms_scratch(kc, segs, L, &sb)) return fail("scratch");
    void *scratch = malloc(sb ? sb : 1);
    if (deftsim_gradsrc_prepare(g, 0, P, 1)) return fail("prepare");
    printf("%s P=%u n=%llu k=%llu fragments=%zu\n", m->name, P, (unsigned long long)n,
           (unsigned long long)k, L);
    for (uint32_t w = 0; w < P; w++) {
        if (deftsim_gradsrc_fill(g, 0, w, 0, (size_t)n, acc)) return fail("gradient");
        if (deftsim_k_seg_norms(kc, acc, (size_t)n, segs, L, nd, scratch, sb))
            return fail("norms");
        double worst = 0, worst_seq = 0;
        size_t at = 0;
        for (size_t j = 0; j < L; j++) {
            nf[j] = deftsim_deft_norm_float32(acc + fr[j].offset, fr[j].size);
            double r = nd[j] > 0 ? fabs(nf[j] - nd[j]) / nd[j] : 0;
            if (r > worst) {
                worst = r;
                at = j;
            }
            /* For scale: a plain float32 loop in index order (not what PyTorch does). */
            float sq = 0;
            for (uint64_t i = 0; i < fr[j].size; i++) {
                float v = acc[fr[j].offset + i], v2 = v * v;
                sq += v2;
            }
            r = nd[j] > 0 ? fabs(sqrt((double)sq) - nd[j]) / nd[j] : 0;
            if (r > worst_seq) worst_seq = r;
        }
        deftsim_deft_allocate_k(fr, L, nd, k, kj[0], order);          /* deftsim */
        deftsim_deft_allocate_k_authors(fr, L, nf, k, kj[1], order);  /* the authors' */
        deftsim_deft_allocate_k(fr, L, nf, k, kj[2], order);          /* norms alone */
        deftsim_deft_allocate_k_authors(fr, L, nd, k, kj[3], order);  /* order alone */
        uint64_t mv[3];
        size_t c1 = kj_diff(kj[0], kj[1], L, &mv[0]), c2 = kj_diff(kj[0], kj[2], L, &mv[1]),
               c3 = kj_diff(kj[0], kj[3], L, &mv[2]);
        printf("  worker %u: max |norm32 - norm64| / norm64 = %.3g (fragment %zu, %llu "
               "elements; a sequential float32 loop: %.3g); k_j differ in %zu fragments (sum "
               "|dk| %llu); norms alone %zu (%llu), order alone %zu (%llu)\n",
               w, worst, at, (unsigned long long)fr[at].size, worst_seq, c1,
               (unsigned long long)mv[0], c2, (unsigned long long)mv[1], c3,
               (unsigned long long)mv[2]);
        deftsim_deft_allocate_k(fr, L, nd, k, kj[2], order); /* deftsim's visiting order */
        for (size_t i = 0; i < L; i++) {
            size_t j = order[i];
            if (kj[0][j] != kj[1][j])
                printf("    fragment %zu (%llu elements, visited %zu of %zu): k_j %llu -> %llu, "
                       "norm %.9g vs %.9g\n",
                       j, (unsigned long long)fr[j].size, i + 1, L, (unsigned long long)kj[0][j],
                       (unsigned long long)kj[1][j], nd[j], nf[j]);
        }
    }
    for (int i = 0; i < 4; i++) free(kj[i]);
    free(scratch);
    free(acc);
    free(order);
    free(nd);
    free(nf);
    free(segs);
    free(fr);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: measure_deviations MODEL DENSITY P [P ...]\n");
        return 2;
    }
    char text[512];
    snprintf(text, sizeof text,
             "[scenario]\nname = measure\n[gradients]\nsource = synthetic\nmodel = %s\n", argv[1]);
    deftsim_config *cfg = NULL;
    deftsim_gradsrc *g = NULL;
    deftsim_kctx *kc = NULL;
    if (deftsim_config_parse(text, "measure.ini", NULL, 0, &cfg)) return fail("scenario");
    if (deftsim_gradsrc_open(cfg, &g)) return fail("gradient source");
    if (deftsim_kctx_new(&kc, "cpu", 1)) return fail("kernels");
    double density = strtod(argv[2], NULL);
    int rc = 0;
    for (int i = 3; i < argc && !rc; i++) rc = measure_p(g, kc, density, (uint32_t)atoi(argv[i]));
    deftsim_kctx_free(kc);
    deftsim_gradsrc_close(g);
    deftsim_config_free(cfg);
    return rc;
}
