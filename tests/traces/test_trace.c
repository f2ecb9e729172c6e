/* test_trace.c - the trace format: write/read round trip, the safetensors layer, and every
 * kind of damage with the message it must produce (file, field or byte offset, problem). */
#include <criterion/criterion.h>

#include <errno.h>
#include <ftw.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "deftsim_gen.h"
#include "deftsim_safetensors.h"
#include "deftsim_trace.h"
#include "deftsim_util.h"

/* ---- fixtures ------------------------------------------------------------------------- */

/* 3 layers, 25 elements: a weight 4x3 (12), a bias 3, a weight 2x5 (10). */
static const char tiny_csv[] = "index,name,shape,numel\n0,w,4x3,12\n1,b,3,3\n2,v,2x5,10\n";
enum { N = 25, P = 3, T = 3 };
static const uint64_t ids[T] = {0, 5, 7};

static char tmpdir[64];

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb; (void)flag; (void)ftw;
    return remove(path);
}

static void setup(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/deftsim-trace-XXXXXX");
    cr_assert(mkdtemp(tmpdir), "mkdtemp");
}

static void teardown(void)
{
    nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

TestSuite(trace, .init = setup, .fini = teardown);
TestSuite(safetensors, .init = setup, .fini = teardown);

static deftsim_model *tiny_model(void)
{
    deftsim_model *m;
    cr_assert_eq(deftsim_model_parse_csv(tiny_csv, strlen(tiny_csv), "tiny.csv", "tiny", &m),
                 DEFTSIM_OK, "%s", deftsim_error_message());
    return m;
}

static float value(uint64_t it, uint32_t w, uint64_t i)
{
    return (float)((double)(it * 1000 + w * 100 + i) * 0.25 - 37.5);
}

static json_t *provenance(void)
{
    return json_pack("{s:s, s:s, s:I, s:s}", "recorder", "test_trace", "method", "by formula",
                     "seed", (json_int_t)99, "extra", "kept");
}

static char *path_in(const char *name)
{
    static char buf[256];
    snprintf(buf, sizeof buf, "%s/%s", tmpdir, name);
    return buf;
}

static void write_tiny(void)
{
    deftsim_model *m = tiny_model();
    json_t *prov = provenance();
    deftsim_trace_writer *w;
    cr_assert_eq(deftsim_trace_writer_open(tmpdir, m, P, prov, &w), DEFTSIM_OK, "%s",
                 deftsim_error_message());
    for (int t = 0; t < T; t++) {
        float g[P][N];
        const float *ptr[P];
        for (uint32_t k = 0; k < P; k++) {
            for (uint64_t i = 0; i < N; i++) g[k][i] = value(ids[t], k, i);
            ptr[k] = g[k];
        }
        cr_assert_eq(deftsim_trace_writer_put(w, ids[t], ptr), DEFTSIM_OK, "%s",
                     deftsim_error_message());
    }
    cr_assert_eq(deftsim_trace_writer_close(w), DEFTSIM_OK, "%s", deftsim_error_message());
    json_decref(prov);
    deftsim_model_free(m);
}

/* Opening must fail with DEFTSIM_E_INPUT and a message holding every given fragment. */
static void expect_open_fails(const char *what, const char *const *want)
{
    deftsim_trace *t = (deftsim_trace *)1;
    deftsim_status st = deftsim_trace_open(tmpdir, &t);
    cr_assert_eq(st, DEFTSIM_E_INPUT, "%s: status %s, message: %s", what, deftsim_status_name(st),
                 deftsim_error_message());
    cr_assert_null(t, "%s", what);
    for (const char *const *w = want; *w; w++)
        cr_assert(strstr(deftsim_error_message(), *w), "%s: message \"%s\" lacks \"%s\"", what,
                  deftsim_error_message(), *w);
}
#define EXPECT_FAIL(what, ...) expect_open_fails(what, (const char *const[]){__VA_ARGS__, NULL})

static deftsim_trace *open_ok(void)
{
    deftsim_trace *t;
    cr_assert_eq(deftsim_trace_open(tmpdir, &t), DEFTSIM_OK, "%s", deftsim_error_message());
    return t;
}

static unsigned char *slurp(const char *path, size_t *len)
{
    char *d;
    cr_assert_eq(deftsim_read_file(path, &d, len), DEFTSIM_OK, "%s", deftsim_error_message());
    return (unsigned char *)d;
}

static void spit(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    cr_assert(f, "%s", path);
    cr_assert_eq(fwrite(data, 1, len, f), len);
    cr_assert_eq(fclose(f), 0);
}

static uint64_t header_len(const unsigned char *d)
{
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | d[i];
    return n;
}

/* Replaces the JSON header of an iteration file, keeping its buffer: buf_len bytes from byte
 * buf_from of the old buffer (SIZE_MAX: all the rest; beyond the old end: zeros). pad: pad the
 * header so that the buffer starts at a multiple of 8. */
static void rewrite_header(const char *file, const char *json, size_t buf_from, size_t buf_len,
                           int pad)
{
    size_t len;
    unsigned char *d = slurp(path_in(file), &len);
    uint64_t n = header_len(d);
    const unsigned char *buf = d + 8 + n + buf_from;
    size_t avail = len - 8 - n - buf_from;
    if (buf_len == SIZE_MAX) buf_len = avail;
    size_t jl = strlen(json), hl = pad ? (jl + 8 + 7) / 8 * 8 - 8 : jl;
    unsigned char *out = calloc(1, 8 + hl + buf_len); /* a longer buffer ends in zeros */
    for (int i = 0; i < 8; i++) out[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    memcpy(out + 8, json, jl);
    memset(out + 8 + jl, ' ', hl - jl);
    memcpy(out + 8 + hl, buf, buf_len < avail ? buf_len : avail);
    spit(path_in(file), out, 8 + hl + buf_len);
    free(out);
    free(d);
}

static json_t *load_manifest(void)
{
    json_error_t e;
    json_t *j = json_load_file(path_in("manifest.json"), 0, &e);
    cr_assert(j, "manifest: %s", e.text);
    return j;
}

static void save_manifest(json_t *j)
{
    cr_assert_eq(json_dump_file(j, path_in("manifest.json"), JSON_INDENT(1)), 0);
    json_decref(j);
}

/* ---- round trip ----------------------------------------------------------------------- */

Test(trace, round_trip)
{
    write_tiny();
    deftsim_trace *t = open_ok();
    const deftsim_model *m = deftsim_trace_model(t);
    cr_assert_str_eq(m->name, "tiny");
    cr_assert_eq(m->nlayers, 3);
    cr_assert_eq(m->numel, N);
    cr_assert_str_eq(m->layers[1].name, "b");
    cr_assert_eq(m->layers[1].ndim, 1);
    cr_assert_eq(m->layers[1].offset, 12);
    cr_assert_eq(m->layers[2].shape[0], 2);
    cr_assert_eq(m->layers[2].shape[1], 5);
    cr_assert_eq(m->layers[2].offset, 15);
    cr_assert_eq(deftsim_trace_workers(t), P);
    cr_assert_eq(deftsim_trace_iterations(t), T);
    const json_t *prov = deftsim_trace_provenance(t);
    cr_assert_str_eq(json_string_value(json_object_get(prov, "recorder")), "test_trace");
    cr_assert_eq(json_integer_value(json_object_get(prov, "seed")), 99);
    cr_assert_str_eq(json_string_value(json_object_get(prov, "extra")), "kept");
    for (size_t i = 0; i < T; i++) {
        cr_assert_eq(deftsim_trace_iteration_id(t, i), ids[i]);
        size_t idx;
        cr_assert_eq(deftsim_trace_find_iteration(t, ids[i], &idx), DEFTSIM_OK);
        cr_assert_eq(idx, i);
        for (uint32_t w = 0; w < P; w++) {
            const float *g;
            cr_assert_eq(deftsim_trace_gradient(t, i, w, &g), DEFTSIM_OK);
            cr_assert_eq((uintptr_t)g % 4, 0, "aligned floats");
            for (uint64_t e = 0; e < N; e++)
                cr_assert_eq(g[e], value(ids[i], w, e), "iteration %zu worker %u element %" PRIu64,
                             i, w, e);
            cr_assert_eq(deftsim_trace_check_finite(t, i, w), DEFTSIM_OK);
            double norms[3];
            uint64_t nf[3];
            cr_assert_eq(deftsim_trace_layer_stats(t, i, w, norms, nf), DEFTSIM_OK);
            double ss = 0;
            for (uint64_t e = 12; e < 15; e++) ss += (double)value(ids[i], w, e) * value(ids[i], w, e);
            cr_assert_float_eq(norms[1], sqrt(ss), 1e-12 * sqrt(ss));
            cr_assert_eq(nf[0] + nf[1] + nf[2], 0);
        }
    }
    size_t idx;
    cr_assert_eq(deftsim_trace_find_iteration(t, 6, &idx), DEFTSIM_E_INPUT);
    const float *g;
    cr_assert_eq(deftsim_trace_gradient(t, T, 0, &g), DEFTSIM_E_INPUT);
    cr_assert_eq(deftsim_trace_gradient(t, 0, P, &g), DEFTSIM_E_INPUT);
    cr_assert(strstr(deftsim_error_message(), "worker 3 out of range"), "%s", deftsim_error_message());
    cr_assert(strstr(deftsim_trace_iteration_path(t, 1), "iter_000005.safetensors"));
    deftsim_trace_close(t);
}

static deftsim_status fill_formula(void *ctx, uint32_t worker, uint64_t offset, uint64_t count,
                                   float *out)
{
    uint64_t it = *(const uint64_t *)ctx;
    for (uint64_t i = 0; i < count; i++) out[i] = value(it, worker, offset + i);
    return DEFTSIM_OK;
}

Test(trace, put_fill_writes_the_same_bytes)
{
    write_tiny();
    size_t la, lb;
    unsigned char *a = slurp(path_in("iter_000005.safetensors"), &la);
    deftsim_model *m = tiny_model();
    json_t *prov = provenance();
    char sub[128];
    snprintf(sub, sizeof sub, "%s/b", tmpdir);
    deftsim_trace_writer *w;
    cr_assert_eq(deftsim_trace_writer_open(sub, m, P, prov, &w), DEFTSIM_OK);
    uint64_t it = 5;
    cr_assert_eq(deftsim_trace_writer_put_fill(w, it, fill_formula, &it), DEFTSIM_OK, "%s",
                 deftsim_error_message());
    cr_assert_eq(deftsim_trace_writer_close(w), DEFTSIM_OK);
    unsigned char *b = slurp(path_in("b/iter_000005.safetensors"), &lb);
    cr_assert_eq(la, lb);
    cr_assert_eq(memcmp(a, b, la), 0);
    cr_assert_eq((8 + header_len(a)) % 8, 0, "buffer starts at a multiple of 8");
    free(a);
    free(b);
    json_decref(prov);
    deftsim_model_free(m);
}

Test(trace, generator_trace_matches_fill)
{
    deftsim_model *m = tiny_model();
    deftsim_gen_params p;
    deftsim_gen_params_default(&p);
    p.seed = 1ull << 63; /* written as a decimal string */
    deftsim_gen *g;
    cr_assert_eq(deftsim_gen_new(m, &p, &g), DEFTSIM_OK);
    cr_assert_eq(deftsim_gen_write_trace(g, tmpdir, 2, 3), DEFTSIM_OK, "%s", deftsim_error_message());
    deftsim_trace *t = open_ok();
    cr_assert_str_eq(json_string_value(json_object_get(deftsim_trace_provenance(t), "seed")),
                     "9223372036854775808");
    for (size_t i = 0; i < 3; i++)
        for (uint32_t w = 0; w < 2; w++) {
            float x[N];
            const float *y;
            cr_assert_eq(deftsim_gen_fill(g, i, w, 0, N, x), DEFTSIM_OK);
            cr_assert_eq(deftsim_trace_gradient(t, i, w, &y), DEFTSIM_OK);
            cr_assert_eq(memcmp(x, y, sizeof x), 0);
        }
    deftsim_trace_close(t);
    deftsim_gen_free(g);
    deftsim_model_free(m);
}

Test(trace, writer_rejects_misuse)
{
    deftsim_model *m = tiny_model();
    json_t *prov = provenance();
    deftsim_trace_writer *w;
    cr_assert_eq(deftsim_trace_writer_open(tmpdir, m, 0, prov, &w), DEFTSIM_E_INPUT);
    json_t *bad = json_pack("{s:s, s:I}", "recorder", "x", "seed", (json_int_t)1);
    cr_assert_eq(deftsim_trace_writer_open(tmpdir, m, 2, bad, &w), DEFTSIM_E_INPUT);
    cr_assert(strstr(deftsim_error_message(), "provenance.method"), "%s", deftsim_error_message());
    json_decref(bad);
    cr_assert_eq(deftsim_trace_writer_open(tmpdir, m, 1, prov, &w), DEFTSIM_OK);
    cr_assert_eq(deftsim_trace_writer_close(w), DEFTSIM_E_INPUT, "no iterations");
    cr_assert_eq(access(path_in("manifest.json"), F_OK), -1, "no manifest");
    cr_assert_eq(deftsim_trace_writer_open(tmpdir, m, 1, prov, &w), DEFTSIM_OK);
    float g[N] = {0};
    const float *ptr[1] = {g};
    cr_assert_eq(deftsim_trace_writer_put(w, 4, ptr), DEFTSIM_OK);
    cr_assert_eq(deftsim_trace_writer_put(w, 4, ptr), DEFTSIM_E_INPUT);
    cr_assert(strstr(deftsim_error_message(), "strictly increase"), "%s", deftsim_error_message());
    cr_assert_eq(deftsim_trace_writer_put(w, 2, ptr), DEFTSIM_E_INPUT);
    cr_assert_eq(deftsim_trace_writer_put(w, 9, ptr), DEFTSIM_OK);
    cr_assert_eq(deftsim_trace_writer_close(w), DEFTSIM_OK);
    deftsim_trace *t = open_ok();
    cr_assert_eq(deftsim_trace_iterations(t), 2);
    cr_assert_eq(deftsim_trace_iteration_id(t, 1), 9);
    deftsim_trace_close(t);
    /* Reopening for writing removes the old manifest first. */
    cr_assert_eq(deftsim_trace_writer_open(tmpdir, m, 1, prov, &w), DEFTSIM_OK);
    cr_assert_eq(access(path_in("manifest.json"), F_OK), -1);
    deftsim_trace_writer_discard(w);
    json_decref(prov);
    deftsim_model_free(m);
}

/* The writer replaces only the same trace: another manifest.json (a run's results, another
 * trace) is refused and stays as it was. */
Test(trace, writer_replaces_only_the_same_trace)
{
    deftsim_model *m = tiny_model();
    json_t *prov = provenance();
    deftsim_trace_writer *w;
    size_t len0, len1;
    /* A results folder. */
    static const char results[] = "{\"format\": \"deftsim-results\", \"points\": []}\n";
    spit(path_in("manifest.json"), results, sizeof results - 1);
    cr_assert_eq(deftsim_trace_writer_open(tmpdir, m, P, prov, &w), DEFTSIM_E_INPUT);
    cr_assert(strstr(deftsim_error_message(), ": the folder holds the results of deftsim run, not a "
                                              "trace; write the trace into another folder (-o DIR)"),
              "%s", deftsim_error_message());
    unsigned char *d = slurp(path_in("manifest.json"), &len0);
    cr_assert(len0 == sizeof results - 1 && !memcmp(d, results, len0), "the manifest changed");
    free(d);
    unlink(path_in("manifest.json"));
    /* A trace; the same again is replaced, another is refused. */
    write_tiny();
    unsigned char *before = slurp(path_in("manifest.json"), &len0);
    json_t *other = provenance();
    json_object_set_new(other, "seed", json_integer(3));
    cr_assert_eq(deftsim_trace_writer_open(tmpdir, m, P, other, &w), DEFTSIM_E_INPUT);
    cr_assert(strstr(deftsim_error_message(), " holds another trace (provenance seed: 3 here, 99 in "
                                              "the folder); this one would replace it"),
              "%s", deftsim_error_message());
    cr_assert_eq(deftsim_trace_writer_open(tmpdir, m, P + 1, prov, &w), DEFTSIM_E_INPUT);
    cr_assert(strstr(deftsim_error_message(), "workers: 4 here, 3 in the folder"), "%s",
              deftsim_error_message());
    unsigned char *after = slurp(path_in("manifest.json"), &len1);
    cr_assert(len0 == len1 && !memcmp(before, after, len0), "the manifest changed");
    free(before);
    free(after);
    json_decref(other);
    write_tiny();
    json_decref(prov);
    deftsim_model_free(m);
}

/* ---- damaged iteration files ------------------------------------------------------- */

Test(trace, missing_iteration_file)
{
    write_tiny();
    cr_assert_eq(unlink(path_in("iter_000005.safetensors")), 0);
    EXPECT_FAIL("missing file", "iter_000005.safetensors", "missing", "iteration 5");
}

Test(trace, truncated_buffer)
{
    write_tiny();
    size_t len;
    unsigned char *d = slurp(path_in("iter_000007.safetensors"), &len);
    spit(path_in("iter_000007.safetensors"), d, len - 10);
    EXPECT_FAIL("truncated data", "iter_000007.safetensors", "tensor 'worker.0002'",
                "beyond the end of the file", "truncated?");
    free(d);
}

Test(trace, truncated_header_and_tiny_file)
{
    write_tiny();
    size_t len;
    unsigned char *d = slurp(path_in("iter_000000.safetensors"), &len);
    spit(path_in("iter_000000.safetensors"), d, 8 + header_len(d) / 2);
    EXPECT_FAIL("cut inside the header", "iter_000000.safetensors", "byte 0", "header length",
                "beyond the end of the file");
    spit(path_in("iter_000000.safetensors"), d, 5);
    EXPECT_FAIL("5-byte file", "iter_000000.safetensors", "5 bytes", "too short");
    spit(path_in("iter_000000.safetensors"), d, 0);
    EXPECT_FAIL("empty file", "iter_000000.safetensors", "0 bytes");
    free(d);
}

Test(trace, header_length_lies)
{
    write_tiny();
    size_t len;
    unsigned char *d = slurp(path_in("iter_000000.safetensors"), &len);
    uint64_t n = len; /* beyond the file */
    for (int i = 0; i < 8; i++) d[i] = (unsigned char)(n >> (8 * i));
    spit(path_in("iter_000000.safetensors"), d, len);
    EXPECT_FAIL("length beyond file", "iter_000000.safetensors", "byte 0", "header length");
    n = 1ull << 40;
    for (int i = 0; i < 8; i++) d[i] = (unsigned char)(n >> (8 * i));
    spit(path_in("iter_000000.safetensors"), d, len);
    EXPECT_FAIL("huge length", "iter_000000.safetensors", "exceeds the format's limit");
    free(d);
}

Test(trace, header_json_does_not_parse)
{
    write_tiny();
    size_t len;
    unsigned char *d = slurp(path_in("iter_000005.safetensors"), &len);
    unsigned char *colon = memchr(d + 8, ':', (size_t)header_len(d));
    cr_assert(colon);
    *colon = '=';
    spit(path_in("iter_000005.safetensors"), d, len);
    char at[32];
    snprintf(at, sizeof at, "byte %td", colon - d);
    EXPECT_FAIL("bad JSON", "iter_000005.safetensors", "header JSON", at);
    d[8] = '[';
    spit(path_in("iter_000005.safetensors"), d, len);
    EXPECT_FAIL("not an object", "iter_000005.safetensors", "byte 8", "'{'");
    free(d);
}

/* Headers for the 25-element, 3-worker files: 100 bytes per worker, buffer of 300. */
#define W(i, b, e) "\"worker.000" #i "\":{\"dtype\":\"F32\",\"shape\":[25],\"data_offsets\":[" #b "," #e "]}"

Test(trace, offsets_that_lie)
{
    write_tiny();
    const char *f = "iter_000005.safetensors";
    rewrite_header(f, "{" W(0, 0, 100) "," W(1, 0, 100) "," W(2, 200, 300) "}", 0, SIZE_MAX, 1);
    EXPECT_FAIL("overlap", f, "header", "worker.0001", "overlap tensor 'worker.0000'");
    rewrite_header(f, "{" W(0, 0, 100) "," W(1, 100, 200) "," W(2, 204, 304) "}", 0, SIZE_MAX, 1);
    EXPECT_FAIL("outside", f, "tensor 'worker.0002'", "[204, 304]", "beyond the end of the file");
    rewrite_header(f, "{" W(0, 0, 100) "," W(1, 100, 196) "," W(2, 200, 300) "}", 0, SIZE_MAX, 1);
    EXPECT_FAIL("size vs dtype*shape", f, "tensor 'worker.0001'", "spans 96 bytes",
                "needs 100");
    rewrite_header(f, "{" W(0, 0, 100) "," W(1, 104, 204) "," W(2, 204, 304) "}", 0, 304, 1);
    EXPECT_FAIL("gap", f, "buffer bytes [100, 104)", "belong to no tensor");
    rewrite_header(f, "{" W(0, 0, 100) "," W(1, 100, 200) "," W(2, 200, 300) "}", 0, 300, 1);
    /* the buffer is exactly 300 bytes again: valid; now append junk */
    {
        size_t len;
        unsigned char *d = slurp(path_in(f), &len);
        unsigned char *e = malloc(len + 4);
        memcpy(e, d, len);
        memset(e + len, 0, 4);
        spit(path_in(f), e, len + 4);
        free(d);
        free(e);
    }
    EXPECT_FAIL("trailing bytes", f, "4 trailing bytes");
    rewrite_header(f, "{" W(0, 0, 100) "," W(1, 200, 100) "," W(2, 200, 300) "}", 0, 300, 1);
    EXPECT_FAIL("reversed", f, "ends before it begins");
    rewrite_header(f, "{" W(0, 0, 100) "," W(1, 100, 200) ",\"worker.0002\":{\"dtype\":\"F32\","
                      "\"shape\":[25],\"data_offsets\":[200]}}", 0, 300, 1);
    EXPECT_FAIL("one offset", f, "tensor 'worker.0002'", "data_offsets");
    rewrite_header(f, "{" W(0, 0, 100) "," W(1, 100, 200) ",\"worker.0002\":{\"dtype\":\"F99\","
                      "\"shape\":[25],\"data_offsets\":[200,300]}}", 0, 300, 1);
    EXPECT_FAIL("dtype", f, "unknown or unsupported dtype 'F99'");
    rewrite_header(f, "{" W(0, 0, 100) "," W(1, 100, 200) ",\"worker.0002\":{\"dtype\":\"F32\","
                      "\"shape\":[-25],\"data_offsets\":[200,300]}}", 0, 300, 1);
    EXPECT_FAIL("negative dim", f, "'shape'[0]");
    rewrite_header(f, "{" W(0, 0, 100) "," W(1, 100, 200) "," W(2, 200, 300)
                      ",\"__metadata__\":{\"iteration\":5}}", 0, 300, 1);
    EXPECT_FAIL("metadata value", f, "'__metadata__'", "not a string");
}

Test(trace, tensors_that_disagree_with_the_manifest)
{
    write_tiny();
    const char *f = "iter_000007.safetensors";
    /* shape [24]: consistent offsets, but not the model's 25 elements */
    rewrite_header(f, "{\"worker.0000\":{\"dtype\":\"F32\",\"shape\":[24],\"data_offsets\":[0,96]},"
                      "\"worker.0001\":{\"dtype\":\"F32\",\"shape\":[24],\"data_offsets\":[96,192]},"
                      "\"worker.0002\":{\"dtype\":\"F32\",\"shape\":[24],\"data_offsets\":[192,288]}}",
                   0, 288, 1);
    EXPECT_FAIL("shape vs numel", f, "tensor 'worker.0000'", "shape [24]", "needs [25]");
    rewrite_header(f, "{\"worker.0000\":{\"dtype\":\"F32\",\"shape\":[5,5],\"data_offsets\":[0,100]},"
                      W(1, 100, 200) "," W(2, 200, 300) "}", 0, 300, 1);
    EXPECT_FAIL("2-D tensor", f, "tensor 'worker.0000'", "2 dimensions", "needs [25]");
    rewrite_header(f, "{\"worker.0000\":{\"dtype\":\"F16\",\"shape\":[50],\"data_offsets\":[0,100]},"
                      W(1, 100, 200) "," W(2, 200, 300) "}", 0, 300, 1);
    EXPECT_FAIL("dtype F16", f, "tensor 'worker.0000'", "dtype 'F16'");
    rewrite_header(f, "{" W(0, 0, 100) "," W(1, 100, 200) "}", 0, 200, 1);
    EXPECT_FAIL("too few workers", f, "tensor 'worker.0002' missing", "3 workers");
    rewrite_header(f, "{" W(0, 0, 100) "," W(1, 100, 200) "," W(2, 200, 300) ","
                      "\"extra\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[300,304]}}",
                   0, 304, 1);
    EXPECT_FAIL("extra tensor", f, "unexpected tensor 'extra'");
    rewrite_header(f, "{" W(0, 0, 100) "," W(1, 100, 200) "," W(2, 200, 300)
                      ",\"__metadata__\":{\"iteration\":\"8\"}}", 0, 300, 1);
    EXPECT_FAIL("metadata iteration", f, "__metadata__.iteration", "'8'", "iteration 7");
    /* An unpadded header is fine (the reader copies instead of mapping). */
    rewrite_header(f, "{" W(0, 0, 100) "," W(1, 100, 200) "," W(2, 200, 300) "}", 0, 300, 0);
    deftsim_trace *t = open_ok();
    const float *g;
    cr_assert_eq(deftsim_trace_gradient(t, 2, 1, &g), DEFTSIM_OK);
    cr_assert_eq((uintptr_t)g % 4, 0);
    for (uint64_t e = 0; e < N; e++) cr_assert_eq(g[e], value(7, 1, e));
    deftsim_trace_close(t);
}

/* ---- damaged manifests ------------------------------------------------------------ */

typedef void (*edit_fn)(json_t *m);
static void e_version3(json_t *m) { json_object_set_new(m, "format_version", json_integer(3)); }
static void e_version2_nolayout(json_t *m) { json_object_set_new(m, "format_version", json_integer(2)); }
static void e_version2_layout(json_t *m)
{
    json_object_set_new(m, "format_version", json_integer(2));
    json_object_set_new(m, "layout", json_string("sharded"));
}
static void e_version1_layout(json_t *m) { json_object_set_new(m, "layout", json_string("flat")); }
static void e_version_str(json_t *m) { json_object_set_new(m, "format_version", json_string("1")); }
static void e_format(json_t *m) { json_object_set_new(m, "format", json_string("npz")); }
static void e_no_workers(json_t *m) { json_object_del(m, "workers"); }
static void e_workers0(json_t *m) { json_object_set_new(m, "workers", json_integer(0)); }
static void e_workers4(json_t *m) { json_object_set_new(m, "workers", json_integer(4)); }
static void e_workers2(json_t *m) { json_object_set_new(m, "workers", json_integer(2)); }
static void e_workers_real(json_t *m) { json_object_set_new(m, "workers", json_real(3.0)); }
static void e_dtype(json_t *m) { json_object_set_new(m, "dtype", json_string("float16")); }
static void e_unknown(json_t *m) { json_object_set_new(m, "wokers", json_integer(3)); }
static void e_iter_order(json_t *m) { json_object_set_new(m, "iterations", json_pack("[I,I,I]", 0LL, 7LL, 5LL)); }
static void e_iter_neg(json_t *m) { json_object_set_new(m, "iterations", json_pack("[I,I,I]", 0LL, -5LL, 7LL)); }
static void e_iter_empty(json_t *m) { json_object_set_new(m, "iterations", json_array()); }
static void e_iter_extra(json_t *m) { json_array_append_new(json_object_get(m, "iterations"), json_integer(9)); }
static void e_numel(json_t *m) { json_object_set_new(json_object_get(m, "model"), "numel", json_integer(26)); }
static void e_no_layers(json_t *m) { json_object_del(json_object_get(m, "model"), "layers"); }
static void e_layer_zero(json_t *m)
{
    json_t *L = json_array_get(json_object_get(json_object_get(m, "model"), "layers"), 1);
    json_object_set_new(L, "shape", json_pack("[i]", 0));
}
static void e_layer_grow(json_t *m)
{
    json_t *model = json_object_get(m, "model");
    json_t *L = json_array_get(json_object_get(model, "layers"), 1);
    json_object_set_new(L, "shape", json_pack("[i]", 4));
    json_object_set_new(model, "numel", json_integer(26));
}
static void e_layer_name(json_t *m)
{
    json_t *L = json_array_get(json_object_get(json_object_get(m, "model"), "layers"), 2);
    json_object_set_new(L, "name", json_integer(3));
}
static void e_scalar(json_t *m)
{
    json_t *L = json_array_get(json_object_get(json_object_get(m, "model"), "layers"), 1);
    json_object_set_new(L, "shape", json_array());
}
static void e_no_seed(json_t *m) { json_object_del(json_object_get(m, "provenance"), "seed"); }
static void e_seed_real(json_t *m) { json_object_set_new(json_object_get(m, "provenance"), "seed", json_real(1.5)); }
static void e_no_prov(json_t *m) { json_object_del(m, "provenance"); }
static void e_model_str(json_t *m) { json_object_set_new(m, "model", json_string("tiny")); }

Test(trace, bad_manifest_fields)
{
    static const struct {
        edit_fn edit;
        const char *want[3];
    } cases[] = {
        {e_version3, {"field 'format_version'", "unknown version 3", "reads versions 1 and 2"}},
        {e_version2_nolayout, {"field 'layout': missing"}},
        {e_version2_layout, {"field 'layout'", "'sharded'", "'per-rank'"}},
        {e_version1_layout, {"field 'layout'", "unknown field"}},
        {e_version_str, {"field 'format_version'", "expected an integer, found a string"}},
        {e_format, {"field 'format'", "'npz'"}},
        {e_no_workers, {"field 'workers': missing"}},
        {e_workers0, {"field 'workers'", "outside"}},
        {e_workers_real, {"field 'workers'", "found a real number"}},
        {e_workers4, {"iter_000000.safetensors", "tensor 'worker.0003' missing", "4 workers"}},
        {e_workers2, {"iter_000000.safetensors", "unexpected tensor 'worker.0002'"}},
        {e_dtype, {"field 'dtype'", "'float16'"}},
        {e_unknown, {"field 'wokers'", "unknown field"}},
        {e_iter_order, {"field 'iterations[2]'", "strictly increase"}},
        {e_iter_neg, {"field 'iterations[1]'", "non-negative integer"}},
        {e_iter_empty, {"field 'iterations': empty"}},
        {e_iter_extra, {"iter_000009.safetensors", "missing"}},
        {e_numel, {"field 'model.numel'", "add up to 25"}},
        {e_no_layers, {"field 'model.layers': missing"}},
        {e_layer_zero, {"field 'model.layers[1].shape[0]'", "positive integer"}},
        {e_layer_grow, {"iter_000000.safetensors", "shape [25]", "needs [26]"}},
        {e_layer_name, {"field 'model.layers[2].name'", "expected a string, found an integer"}},
        {e_scalar, {"field 'model.layers[1].shape'", "0 dimensions"}},
        {e_no_seed, {"field 'provenance.seed'", "missing"}},
        {e_seed_real, {"field 'provenance.seed'", "found a real number"}},
        {e_no_prov, {"field 'provenance': missing"}},
        {e_model_str, {"field 'model'", "expected an object, found a string"}},
    };
    write_tiny();
    size_t len;
    unsigned char *orig = slurp(path_in("manifest.json"), &len);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        spit(path_in("manifest.json"), orig, len);
        json_t *m = load_manifest();
        cases[i].edit(m);
        save_manifest(m);
        char what[32];
        snprintf(what, sizeof what, "manifest case %zu", i);
        const char *want[5] = {cases[i].want[0], cases[i].want[1], cases[i].want[2], NULL, NULL};
        if (!strstr(cases[i].want[0], ".safetensors")) {
            /* manifest problems name manifest.json */
            for (int k = 0; k < 4; k++)
                if (!want[k]) {
                    want[k] = "manifest.json";
                    break;
                }
        }
        expect_open_fails(what, want);
    }
    const char *broken = "{\"format\": \"deftsim-trace\",\n  oops}";
    spit(path_in("manifest.json"), broken, strlen(broken));
    EXPECT_FAIL("not JSON", "manifest.json:2:", "JSON");
    spit(path_in("manifest.json"), "[1, 2]", strlen("[1, 2]"));
    EXPECT_FAIL("not an object", "manifest.json", "expected a JSON object, found an array");
    cr_assert_eq(unlink(path_in("manifest.json")), 0);
    EXPECT_FAIL("no manifest", "not a trace: no manifest.json", "no iter_<t>/ folders");
    free(orig);
}

/* ---- non-finite values ------------------------------------------------------------ */

Test(trace, nonfinite_counted_and_located)
{
    deftsim_model *m = tiny_model();
    json_t *prov = provenance();
    deftsim_trace_writer *w;
    cr_assert_eq(deftsim_trace_writer_open(tmpdir, m, P, prov, &w), DEFTSIM_OK);
    for (int t = 0; t < T; t++) {
        float g[P][N];
        const float *ptr[P];
        for (uint32_t k = 0; k < P; k++) {
            for (uint64_t i = 0; i < N; i++) g[k][i] = value(ids[t], k, i);
            ptr[k] = g[k];
        }
        if (t == 1) {
            g[2][13] = NAN;      /* layer b, element 1 */
            g[2][20] = INFINITY; /* layer v, element 5: counted, but not the first */
        }
        if (t == 2) g[0][0] = -INFINITY;
        cr_assert_eq(deftsim_trace_writer_put(w, ids[t], ptr), DEFTSIM_OK);
    }
    cr_assert_eq(deftsim_trace_writer_close(w), DEFTSIM_OK);
    deftsim_trace *t = open_ok(); /* values are not the structure: open succeeds */

    cr_assert_eq(deftsim_trace_check_finite(t, 1, 2), DEFTSIM_E_INPUT);
    const char *msg = deftsim_error_message();
    deftsim_st_file *f;
    cr_assert_eq(deftsim_st_open(deftsim_trace_iteration_path(t, 1), &f), DEFTSIM_OK);
    char byte[64];
    snprintf(byte, sizeof byte, "file byte %" PRIu64,
             deftsim_st_buffer_offset(f) + deftsim_st_find(f, "worker.0002")->begin + 13 * 4);
    deftsim_st_close(f);
    const char *want[] = {"iter_000005.safetensors", "tensor 'worker.0002'", "layer 'b' (layer 1)",
                          "element 1 of the layer", "gradient element 13", byte, "NaN"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        cr_assert(strstr(msg, want[i]), "message \"%s\" lacks \"%s\"", msg, want[i]);
    cr_assert_eq(deftsim_trace_check_finite(t, 2, 0), DEFTSIM_E_INPUT);
    cr_assert(strstr(deftsim_error_message(), "layer 'w' (layer 0), element 0 of the layer"),
              "%s", deftsim_error_message());
    cr_assert(strstr(deftsim_error_message(), "-Inf"), "%s", deftsim_error_message());
    cr_assert_eq(deftsim_trace_check_finite(t, 1, 1), DEFTSIM_OK);
    cr_assert_eq(deftsim_trace_check_finite(t, 0, 2), DEFTSIM_OK);

    double norms[3];
    uint64_t nf[3];
    cr_assert_eq(deftsim_trace_layer_stats(t, 1, 2, norms, nf), DEFTSIM_OK);
    cr_assert_eq(nf[0], 0);
    cr_assert_eq(nf[1], 1);
    cr_assert_eq(nf[2], 1);
    double ss = 0;
    for (uint64_t e = 12; e < 15; e++)
        if (e != 13) ss += (double)value(5, 2, e) * value(5, 2, e);
    cr_assert_float_eq(norms[1], sqrt(ss), 1e-12 * sqrt(ss), "norm of the finite values");
    cr_assert(isfinite(norms[2]));
    cr_assert_eq(deftsim_trace_layer_stats(t, 2, 0, NULL, nf), DEFTSIM_OK);
    cr_assert_eq(nf[0], 1);
    deftsim_trace_close(t);
    json_decref(prov);
    deftsim_model_free(m);
}

/* ---- the safetensors layer on its own --------------------------------------------- */

Test(safetensors, build_header_and_read_back)
{
    uint64_t s1[2] = {2, 3}, s2[1] = {5}, s3[1] = {0};
    deftsim_st_spec specs[] = {{"a", "F64", 2, s1}, {"b", "U8", 1, s2}, {"c", "F32", 1, s3},
                               {"d", "BF16", 0, NULL}};
    json_t *meta = json_pack("{s:s}", "k", "v");
    char *h;
    size_t hl;
    uint64_t ds;
    cr_assert_eq(deftsim_st_build_header(specs, 4, meta, &h, &hl, &ds), DEFTSIM_OK, "%s",
                 deftsim_error_message());
    cr_assert_eq(hl % 8, 0);
    cr_assert_eq(ds, 48 + 5 + 0 + 2);
    cr_assert_eq(h[8], '{');
    unsigned char *file = malloc(hl + ds);
    memcpy(file, h, hl);
    for (uint64_t i = 0; i < ds; i++) file[hl + i] = (unsigned char)i;
    spit(path_in("x.safetensors"), file, hl + ds);
    deftsim_st_file *f;
    cr_assert_eq(deftsim_st_open(path_in("x.safetensors"), &f), DEFTSIM_OK, "%s",
                 deftsim_error_message());
    cr_assert_eq(deftsim_st_count(f), 4);
    cr_assert_str_eq(json_string_value(json_object_get(deftsim_st_metadata(f), "k")), "v");
    const deftsim_st_tensor *a = deftsim_st_find(f, "a"), *b = deftsim_st_find(f, "b"),
                            *d = deftsim_st_find(f, "d");
    cr_assert(a && b && d && !deftsim_st_find(f, "zz"));
    cr_assert_eq(a->numel, 6);
    cr_assert_eq((uintptr_t)a->data % 8, 0, "F64 data aligned");
    cr_assert_eq(b->begin, 48);
    cr_assert_eq(((const unsigned char *)b->data)[0], 48);
    cr_assert_eq(d->ndim, 0);
    cr_assert_eq(d->numel, 1, "a scalar has one element");
    cr_assert_eq(deftsim_st_buffer_offset(f), hl);
    deftsim_st_close(f);

    deftsim_st_spec dup[] = {{"a", "F32", 1, s2}, {"a", "F32", 1, s2}};
    free(h);
    cr_assert_eq(deftsim_st_build_header(dup, 2, NULL, &h, &hl, &ds), DEFTSIM_E_INPUT);
    deftsim_st_spec unk[] = {{"a", "F7", 1, s2}};
    cr_assert_eq(deftsim_st_build_header(unk, 1, NULL, &h, &hl, &ds), DEFTSIM_E_INPUT);
    json_decref(meta);
    free(file);
}

Test(safetensors, duplicate_keys_and_unknown_fields)
{
    const char *cases[][2] = {
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
         "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", "duplicate"},
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],\"offsets\":1}}",
         "unknown field 'offsets'"},
        {"{\"a\":{\"shape\":[1],\"data_offsets\":[0,1]}}", "missing field 'dtype'"},
        {"{\"a\":[1]}", "tensor 'a': not a JSON object"},
        {"{\"__metadata__\":[]}", "'__metadata__' is not a JSON object"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *j = cases[i][0];
        size_t jl = strlen(j);
        unsigned char *file = calloc(1, 8 + jl + 1);
        file[0] = (unsigned char)jl;
        memcpy(file + 8, j, jl);
        spit(path_in("y.safetensors"), file, 8 + jl + 1);
        deftsim_st_file *f = (deftsim_st_file *)1;
        cr_assert_eq(deftsim_st_open(path_in("y.safetensors"), &f), DEFTSIM_E_INPUT, "case %zu", i);
        cr_assert_null(f);
        cr_assert(strstr(deftsim_error_message(), cases[i][1]), "case %zu: \"%s\" lacks \"%s\"", i,
                  deftsim_error_message(), cases[i][1]);
        cr_assert(strstr(deftsim_error_message(), "y.safetensors"));
        free(file);
    }
    deftsim_st_file *f;
    cr_assert_eq(deftsim_st_open(path_in("absent.safetensors"), &f), DEFTSIM_E_INPUT);
    cr_assert(strstr(deftsim_error_message(), "absent.safetensors: cannot open"));
    /* A file that cannot be read as given is bad input (exit 2), as an unreadable manifest or
     * scenario is; only the system failing to serve a readable file is an io error. */
    cr_assert_eq(deftsim_open_input_status(EACCES), DEFTSIM_E_INPUT);
    cr_assert_eq(deftsim_open_input_status(ENOTDIR), DEFTSIM_E_INPUT);
    cr_assert_eq(deftsim_open_input_status(EMFILE), DEFTSIM_E_IO);
    cr_assert_eq(deftsim_open_input_status(EIO), DEFTSIM_E_IO);
    if (geteuid() != 0) { /* permissions do not bind root */
        spit(path_in("locked.safetensors"), "12345678", 8);
        cr_assert_eq(chmod(path_in("locked.safetensors"), 0), 0);
        cr_assert_eq(deftsim_st_open(path_in("locked.safetensors"), &f), DEFTSIM_E_INPUT);
        cr_assert(strstr(deftsim_error_message(), "locked.safetensors: cannot open: Permission denied"),
                  "%s", deftsim_error_message());
    }
}

/* ---- the per-rank layout ------------------------------------------------------------ */

/* The float32 value of F16 bits h, computed the slow way. */
static float f16_reference(uint16_t h)
{
    int sign = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v = e == 31 ? (m ? NAN : INFINITY) : e ? ldexp(1024 + m, e - 25) : ldexp(m, -24);
    return (float)(sign ? -v : v);
}

Test(trace, f16_bf16_convert_exactly)
{
    static uint16_t h[65536];
    static float out[65536];
    for (uint32_t i = 0; i < 65536; i++) h[i] = (uint16_t)i;
    deftsim_trace_convert("F16", h, 65536, out);
    for (uint32_t i = 0; i < 65536; i++) {
        float want = f16_reference((uint16_t)i);
        uint32_t bits;
        memcpy(&bits, &out[i], 4);
        if (isnan(want)) {
            cr_assert(isnan(out[i]), "F16 %04x: NaN expected", i);
            cr_assert_eq(bits, ((i & 0x8000u) << 16) | 0x7F800000u | ((i & 0x3FFu) << 13),
                         "F16 %04x: NaN payload and sign kept", i);
        } else {
            cr_assert(memcmp(&want, &out[i], 4) == 0, "F16 %04x: %.9g, want %.9g", i,
                      (double)out[i], (double)want);
        }
    }
    deftsim_trace_convert("BF16", h, 65536, out);
    for (uint32_t i = 0; i < 65536; i++) {
        uint32_t bits;
        memcpy(&bits, &out[i], 4);
        cr_assert_eq(bits, i << 16, "BF16 %04x", i);
    }
    /* Unaligned source. */
    unsigned char raw[9] = {0};
    uint16_t one = 0x3C00; /* 1.0 in F16 */
    memcpy(raw + 1, &one, 2);
    deftsim_trace_convert("F16", raw + 1, 1, out);
    cr_assert_eq(out[0], 1.0f);
}

Test(trace, missing_folder_is_named)
{
    char p[128];
    snprintf(p, sizeof p, "%s/nowhere", tmpdir);
    const char *want1[] = {"nowhere: trace folder does not exist", NULL};
    deftsim_trace *t = (deftsim_trace *)1;
    cr_assert_eq(deftsim_trace_open(p, &t), DEFTSIM_E_INPUT);
    cr_assert_null(t);
    for (const char *const *w = want1; *w; w++)
        cr_assert(strstr(deftsim_error_message(), *w), "%s", deftsim_error_message());
    spit(p, "x", 1);
    cr_assert_eq(deftsim_trace_open(p, &t), DEFTSIM_E_INPUT);
    cr_assert(strstr(deftsim_error_message(), "nowhere: not a folder"), "%s",
              deftsim_error_message());
}

/* Writes dir/iter_<t>/rank_<r>.safetensors: tensors a (2x2, F16 or F32 by half) and b (3, F32),
 * in the file in that order, with optional metadata. */
static void put_rank(uint64_t t, uint32_t r, int half, const json_t *meta, float bad)
{
    char d[160], p[200];
    snprintf(d, sizeof d, "%s/iter_%06" PRIu64, tmpdir, t);
    mkdir(d, 0755);
    snprintf(p, sizeof p, "%s/rank_%04u.safetensors", d, r);
    uint64_t sa[2] = {2, 2}, sb[1] = {3};
    deftsim_st_spec specs[2] = {{"b", "F32", 1, sb}, {"a", half ? "F16" : "F32", 2, sa}};
    char *header;
    size_t hl;
    uint64_t ds;
    cr_assert_eq(deftsim_st_build_header(specs, 2, meta, &header, &hl, &ds), DEFTSIM_OK, "%s",
                 deftsim_error_message());
    float b[3] = {(float)t, (float)r, bad};
    uint16_t ah[4] = {0x3C00, 0xC000, 0x0001, 0x7BFF}; /* 1, -2, 2^-24, 65504 */
    float af[4] = {1, -2, 0x1p-24f, 65504};
    FILE *f = fopen(p, "wb");
    cr_assert(f);
    fwrite(header, 1, hl, f);
    fwrite(b, 4, 3, f);
    if (half) fwrite(ah, 2, 4, f);
    else fwrite(af, 4, 4, f);
    fclose(f);
    free(header);
}

Test(trace, per_rank_read_in_parameter_order)
{
    json_t *meta = json_pack("{s:s, s:s}", DEFTSIM_TRACE_ORDER_KEY, "[\"b\", \"a\"]", "model",
                             "m2");
    for (uint64_t t = 0; t < 2; t++)
        for (uint32_t r = 0; r < 2; r++) put_rank(t * 3, r, r == 1, meta, t == 1 && r == 1 ? NAN : 0.5f);
    deftsim_trace *t;
    cr_assert_eq(deftsim_trace_open(tmpdir, &t), DEFTSIM_OK, "%s", deftsim_error_message());
    cr_assert_str_eq(deftsim_trace_layout(t), DEFTSIM_TRACE_LAYOUT_PER_RANK);
    cr_assert_eq(deftsim_trace_format_version(t), 2);
    cr_assert_str_eq(deftsim_trace_layer_order(t), "metadata");
    const deftsim_model *m = deftsim_trace_model(t);
    cr_assert_str_eq(m->name, "m2");
    cr_assert_eq(m->nlayers, 2);
    cr_assert_str_eq(m->layers[0].name, "b");
    cr_assert_eq(m->numel, 7);
    cr_assert_eq(deftsim_trace_workers(t), 2);
    cr_assert_eq(deftsim_trace_iteration_id(t, 1), 3);
    const float *g;
    const float want[7] = {3, 1, NAN, 1, -2, 0x1p-24f, 65504};
    cr_assert_eq(deftsim_trace_gradient(t, 1, 1, &g), DEFTSIM_OK);
    cr_assert(memcmp(g, want, 2 * sizeof(float)) == 0 && isnan(g[2]) &&
              memcmp(g + 3, want + 3, 4 * sizeof(float)) == 0,
              "F16 rank read as float32, in parameter order");
    cr_assert_eq(deftsim_trace_check_finite(t, 0, 1), DEFTSIM_OK);
    cr_assert_eq(deftsim_trace_check_finite(t, 1, 1), DEFTSIM_E_INPUT);
    const char *msg = deftsim_error_message();
    cr_assert(strstr(msg, "iter_000003/rank_0001.safetensors: tensor 'b' (layer 0), element 2"),
              "%s", msg);
    /* b is first in the file: its element 2 is at buffer byte 8. */
    char byte[64];
    deftsim_st_file *f;
    char p[200];
    snprintf(p, sizeof p, "%s/iter_000003/rank_0001.safetensors", tmpdir);
    cr_assert_eq(deftsim_st_open(p, &f), DEFTSIM_OK);
    snprintf(byte, sizeof byte, "file byte %" PRIu64 "): NaN", deftsim_st_buffer_offset(f) + 8);
    deftsim_st_close(f);
    cr_assert(strstr(msg, byte), "%s lacks %s", msg, byte);
    deftsim_trace_close(t);

    /* Without the order: sorted by name (a before b), reported as such. */
    for (uint64_t i = 0; i < 2; i++)
        for (uint32_t r = 0; r < 2; r++) put_rank(i * 3, r, 0, NULL, 0.5f);
    cr_assert_eq(deftsim_trace_open(tmpdir, &t), DEFTSIM_OK, "%s", deftsim_error_message());
    cr_assert_str_eq(deftsim_trace_layer_order(t), "sorted");
    cr_assert_str_eq(deftsim_trace_model(t)->layers[0].name, "a");
    deftsim_trace_close(t);

    /* import writes a manifest; the trace then opens from it. */
    int written = 0;
    cr_assert_eq(deftsim_trace_import(tmpdir, &written), DEFTSIM_OK, "%s", deftsim_error_message());
    cr_assert_eq(written, 1);
    cr_assert_eq(deftsim_trace_import(tmpdir, &written), DEFTSIM_OK);
    cr_assert_eq(written, 0);
    cr_assert_eq(deftsim_trace_open(tmpdir, &t), DEFTSIM_OK, "%s", deftsim_error_message());
    cr_assert_str_eq(deftsim_trace_layer_order(t), "manifest");
    deftsim_trace_close(t);
    json_decref(meta);
}
