/* ref_driver.c - runs one sparsifier on gradients from a file and writes what every step gave,
 * for tests/sparsify/reference.py, which computes the same steps in numpy and compares.
 *
 *   ref_driver METHOD DENSITY P T N SEED GRADS OUT [key=value ...]
 *
 * GRADS: T * P * N float32 (iteration-major, then worker), the gradients g_w(t); the model is
 * one tensor of N elements. Options: wire, and the method's own (randk_seed, hardthr_lambda,
 * hardthr_exchange, sidco_dist, sidco_stages, sidco_exchange), each from its default. OUT
 * receives per step: a text line
 * "step t nnz threshold stages count_total count_max" then the lines "idx ...", "val ..."
 * (the aggregate, values as %a), "count ...", "sent ...", "recv ..." (per worker); and after
 * the last step "res w" lines with each residual (%a). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deftsim_sparsify.h"

/* key=value: wire, or an option of the method's (its registry entry's table). */
static void set_option(deftsim_sparsifier_params *p, const char *kv)
{
    const char *eq = strchr(kv, '=');
    if (!eq) exit(2);
    char key[64];
    snprintf(key, sizeof key, "%.*s", (int)(eq - kv), kv);
    const char *v = eq + 1;
    if (!strcmp(key, "wire")) {
        for (int i = 0; deftsim_wire_names[i]; i++)
            if (!strcmp(deftsim_wire_names[i], v)) p->wire = (deftsim_wire)i;
        return;
    }
    if (deftsim_sparsifier_params_set(p, key, v)) {
        fprintf(stderr, "ref_driver: %s\n", deftsim_error_message());
        exit(2);
    }
}

/* The rows' column `name` of the registry (SIZE_MAX: none). */
static size_t column_of(const char *name)
{
    for (size_t i = 0; i < deftsim_method_column_count(); i++)
        if (!strcmp(deftsim_method_column_get(i)->name, name)) return i;
    return SIZE_MAX;
}

typedef struct {
    float **acc;
} accs;

static float *get(void *ctx, uint32_t w) { return ((accs *)ctx)->acc[w]; }

static int fail(const char *what)
{
    fprintf(stderr, "ref_driver: %s: %s\n", what, deftsim_error_message());
    return 1;
}

int main(int argc, char **argv)
{
    if (argc < 9) {
        fprintf(stderr, "usage: ref_driver METHOD DENSITY P T N SEED GRADS OUT [key=value ...]\n");
        return 2;
    }
    deftsim_method method;
    if (deftsim_method_from_name(argv[1], &method)) return 2;
    double density = strtod(argv[2], NULL);
    uint32_t P = (uint32_t)atoi(argv[3]);
    uint64_t T = strtoull(argv[4], NULL, 10), n = strtoull(argv[5], NULL, 10);
    char csv[128];
    int len = snprintf(csv, sizeof csv, "index,name,shape,numel\n0,t0,%llu,%llu\n",
                       (unsigned long long)n, (unsigned long long)n);
    deftsim_model *model = NULL;
    deftsim_kctx *kc = NULL;
    if (deftsim_model_parse_csv(csv, (size_t)len, "ref", "ref", &model)) return fail("model");
    if (deftsim_kctx_new(&kc, "cpu", 2)) return fail("kernels");
    deftsim_sparsifier_params p;
    memset(&p, 0, sizeof p);
    p.method = method;
    p.density = density;
    p.P = P;
    p.model = model;
    p.index_bytes = 4;
    p.value_bytes = 4;
    p.seed = strtoull(argv[6], NULL, 10);
    p.kctx = kc;
    deftsim_method_opts_default(method, &p.opts);
    for (int i = 9; i < argc; i++) set_option(&p, argv[i]);
    deftsim_sparsifier *s = NULL;
    if (deftsim_sparsifier_new(&p, &s)) return fail("sparsifier");

    FILE *in = fopen(argv[7], "rb"), *out = fopen(argv[8], "w");
    if (!in || !out) return 2;
    accs a = {calloc(P, sizeof(float *))};
    float *g = malloc(n * sizeof *g);
    for (uint32_t w = 0; w < P; w++) a.acc[w] = calloc(n, sizeof(float));
    deftsim_acc_provider prov = {.get = get, .ctx = &a, .persistent = 1};
    size_t col_stages = column_of("stages");
    for (uint64_t t = 0; t < T; t++) {
        for (uint32_t w = 0; w < P; w++) {
            if (fread(g, sizeof *g, n, in) != n) return 2;
            for (uint64_t i = 0; i < n; i++) a.acc[w][i] += g[i];
        }
        deftsim_step_result *r = NULL;
        if (deftsim_sparsifier_step(s, t, &prov, &r)) return fail("step");
        fprintf(out, "step %llu %llu %a %a %llu %llu\nidx", (unsigned long long)t,
                (unsigned long long)r->nnz, r->threshold,
                col_stages == SIZE_MAX ? NAN : deftsim_method_column_value(col_stages, method, r),
                (unsigned long long)r->count_total, (unsigned long long)r->count_max);
        for (uint64_t i = 0; i < r->nnz; i++) fprintf(out, " %u", (unsigned)r->agg_index[i]);
        fprintf(out, "\nval");
        for (uint64_t i = 0; i < r->nnz; i++) fprintf(out, " %a", (double)r->agg_value[i]);
        fprintf(out, "\ncount");
        for (uint32_t w = 0; w < P; w++) fprintf(out, " %llu", (unsigned long long)r->local_count[w]);
        fprintf(out, "\nsent");
        for (uint32_t w = 0; w < P; w++) fprintf(out, " %llu", (unsigned long long)r->bytes_sent[w]);
        fprintf(out, "\nrecv");
        for (uint32_t w = 0; w < P; w++) fprintf(out, " %llu", (unsigned long long)r->bytes_recv[w]);
        fprintf(out, "\n");
    }
    for (uint32_t w = 0; w < P; w++) {
        fprintf(out, "res %u", w);
        for (uint64_t i = 0; i < n; i++) fprintf(out, " %a", (double)a.acc[w][i]);
        fprintf(out, "\n");
    }
    fclose(in);
    fclose(out);
    for (uint32_t w = 0; w < P; w++) free(a.acc[w]);
    free(a.acc);
    free(g);
    deftsim_sparsifier_free(s);
    deftsim_kctx_free(kc);
    deftsim_model_free(model);
    return 0;
}
