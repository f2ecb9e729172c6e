/* fuzz_manifest.c - trace manifests: the input is a trace directory's manifest.json, next to
 * valid iteration files of a small model, so that a manifest that names them goes through every
 * check of deftsim_trace_open. For a trace that opens, every gradient is read, checked for
 * non-finite values and summarized per layer.
 *
 * The directory (made once per process) holds iterations 0 and 1 of model "fuzz" (layers
 * a.weight 2x3, a.bias 3: 9 floats) for 2 workers, iteration 1 holding a NaN and an infinity;
 * iteration 2 of the same model for 3 workers; iteration 3 of a 4-float model for 2 workers.
 * Beside them, the per-rank layout (traces/FORMAT.md) of the 9-float model: iter_000000/ and
 * iter_000001/ with rank_0000 (F32) and rank_0001 (F16, with __metadata__.parameter_order),
 * iteration 1's rank 1 holding a NaN, so that a version-2 "per-rank" manifest reaches them.
 * The seed corpus's manifest.json (tests/fuzz/corpus/fuzz_manifest/small.json) describes
 * iterations 0 and 1; per_rank.json the per-rank folders. */
#include <math.h>

#include "deftsim_safetensors.h"
#include "deftsim_trace.h"
#include "deftsim_util.h"
#include "fuzz_util.h"

static void put(const char *dir, const deftsim_model *m, uint32_t P, uint64_t iter, int special)
{
    json_t *prov = json_pack("{s:s, s:s, s:i}", "recorder", "fuzz_manifest", "method", "fixture",
                             "seed", 1);
    /* The fixture mixes traces of other models and worker counts in one directory on purpose;
     * the writer replaces only a trace of the same model and workers. */
    char mpath[600];
    snprintf(mpath, sizeof mpath, "%s/manifest.json", dir);
    unlink(mpath);
    deftsim_trace_writer *w = NULL;
    if (!prov || deftsim_trace_writer_open(dir, m, P, prov, &w)) abort();
    float *g = calloc(P * m->numel, sizeof(float));
    const float **ptr = calloc(P, sizeof *ptr);
    if (!g || !ptr) abort();
    for (uint32_t p = 0; p < P; p++) {
        for (uint64_t k = 0; k < m->numel; k++) g[p * m->numel + k] = (float)(p + 1) * 0.5f - (float)k;
        ptr[p] = g + p * m->numel;
    }
    if (special) {
        g[1] = NAN;
        g[m->numel + 4] = -INFINITY;
    }
    if (deftsim_trace_writer_put(w, iter, ptr) || deftsim_trace_writer_close(w)) {
        fprintf(stderr, "fuzz_manifest fixture: %s\n", deftsim_error_message());
        abort();
    }
    free(ptr);
    free(g);
    json_decref(prov);
}

/* dir/iter_<it>/rank_<r>.safetensors of layers a.bias (3) and a.weight (2x3), F16 for rank 1. */
static void put_rank(const char *dir, uint64_t it, uint32_t r)
{
    char d[600], p[700];
    snprintf(d, sizeof d, "%s/iter_%06llu", dir, (unsigned long long)it);
    if (deftsim_mkdir_p(d)) abort();
    snprintf(p, sizeof p, "%s/rank_%04u.safetensors", d, r);
    uint64_t sb[1] = {3}, sw[2] = {2, 3};
    const char *dt = r ? "F16" : "F32";
    deftsim_st_spec specs[2] = {{"a.bias", dt, 1, sb}, {"a.weight", dt, 2, sw}};
    json_t *meta = r ? json_pack("{s:s}", DEFTSIM_TRACE_ORDER_KEY, "[\"a.weight\", \"a.bias\"]")
                     : NULL;
    char *header;
    size_t hl;
    uint64_t ds;
    if (deftsim_st_build_header(specs, 2, meta, &header, &hl, &ds)) abort();
    unsigned char data[36];
    for (int i = 0; i < 9; i++) {
        if (r) {
            uint16_t h = (uint16_t)(0x3C00 + i); /* 1 + i/1024 */
            if (it == 1 && i == 4) h = 0x7E00; /* NaN */
            memcpy(data + 2 * i, &h, 2);
        } else {
            float v = (float)i - 2.5f;
            memcpy(data + 4 * i, &v, 4);
        }
    }
    FILE *f = fopen(p, "wb");
    if (!f || fwrite(header, 1, hl, f) != hl || fwrite(data, 1, (size_t)ds, f) != ds || fclose(f))
        abort();
    free(header);
    json_decref(meta);
}

static const char *fixture(void)
{
    static char dir[512];
    if (dir[0]) return dir;
    snprintf(dir, sizeof dir, "%s/trace", fuzz_scratch());
    static const char csv9[] = "index,name,shape,numel\n0,a.weight,2x3,6\n1,a.bias,3,3\n";
    static const char csv4[] = "index,name,shape,numel\n0,b.weight,4,4\n";
    deftsim_model *m9 = NULL, *m4 = NULL;
    if (deftsim_model_parse_csv(csv9, sizeof csv9 - 1, "fixture", "fuzz", &m9) ||
        deftsim_model_parse_csv(csv4, sizeof csv4 - 1, "fixture", "fuzz4", &m4))
        abort();
    put(dir, m9, 2, 0, 0);
    put(dir, m9, 2, 1, 1);
    put(dir, m9, 3, 2, 0);
    put(dir, m4, 2, 3, 0);
    for (uint64_t it = 0; it < 2; it++)
        for (uint32_t r = 0; r < 2; r++) put_rank(dir, it, r);
    deftsim_model_free(m9);
    deftsim_model_free(m4);
    return dir;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *dir = fixture();
    static char path[600];
    if (!path[0]) snprintf(path, sizeof path, "%s/" DEFTSIM_TRACE_MANIFEST, dir);
    fuzz_write(path, data, size);
    deftsim_trace *t = NULL;
    if (deftsim_trace_open(dir, &t) != DEFTSIM_OK) return 0;
    const deftsim_model *m = deftsim_trace_model(t);
    uint32_t P = deftsim_trace_workers(t);
    size_t T = deftsim_trace_iterations(t);
    FUZZ_CHECK(m && P >= 1 && T >= 1, "opened trace: P %u, %zu iterations", P, T);
    FUZZ_CHECK(deftsim_trace_provenance(t) != NULL, "no provenance");
    double *norm = calloc(m->nlayers + 1, sizeof *norm);
    uint64_t *bad = calloc(m->nlayers + 1, sizeof *bad);
    if (!norm || !bad) abort();
    for (size_t i = 0; i < T; i++) {
        size_t back;
        uint64_t id = deftsim_trace_iteration_id(t, i);
        FUZZ_CHECK(deftsim_trace_find_iteration(t, id, &back) == DEFTSIM_OK && back == i,
                   "iteration %zu (id %llu) not found by id", i, (unsigned long long)id);
        FUZZ_CHECK(deftsim_trace_iteration_path(t, i) != NULL, "iteration %zu: no path", i);
        for (uint32_t w = 0; w <= P; w++) { /* w = P: out of range, must fail */
            const float *g = NULL;
            deftsim_status st = deftsim_trace_gradient(t, i, w, &g);
            if (w == P) {
                FUZZ_CHECK(st != DEFTSIM_OK, "worker %u of %u accepted", w, P);
                continue;
            }
            FUZZ_CHECK(st == DEFTSIM_OK && g, "gradient %zu/%u: %s", i, w, deftsim_error_message());
            int finite = 1;
            for (uint64_t k = 0; k < m->numel; k++) finite &= isfinite(g[k]) != 0;
            st = deftsim_trace_check_finite(t, i, w);
            FUZZ_CHECK((st == DEFTSIM_OK) == finite, "check_finite says %d, the values %d", st,
                       finite);
            FUZZ_CHECK(deftsim_trace_layer_stats(t, i, w, norm, bad) == DEFTSIM_OK,
                       "layer_stats: %s", deftsim_error_message());
            uint64_t nbad = 0;
            for (size_t l = 0; l < m->nlayers; l++) nbad += bad[l];
            FUZZ_CHECK((nbad == 0) == finite, "layer_stats counts %llu non-finite",
                       (unsigned long long)nbad);
        }
        size_t dummy;
        FUZZ_CHECK(deftsim_trace_find_iteration(t, id + 1, &dummy) != DEFTSIM_OK ||
                       (i + 1 < T && deftsim_trace_iteration_id(t, i + 1) == id + 1),
                   "id %llu found but absent", (unsigned long long)id + 1);
    }
    free(norm);
    free(bad);
    deftsim_trace_close(t);
    return 0;
}
