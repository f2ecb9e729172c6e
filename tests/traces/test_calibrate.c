/* test_calibrate.c - the generator's tensor kinds and kind scales, and deftsim_calibrate
 * recovering the parameters of a synthetic trace it is given. */
#include <criterion/criterion.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deftsim_calibrate.h"
#include "deftsim_gen.h"
#include "deftsim_trace.h"
#include "deftsim_util.h"

static deftsim_model *builtin(const char *name)
{
    deftsim_model *m;
    cr_assert_eq(deftsim_model_builtin(name, &m), DEFTSIM_OK, "%s", deftsim_error_message());
    return m;
}

static size_t layer_named(const deftsim_model *m, const char *name)
{
    for (size_t i = 0; i < m->nlayers; i++)
        if (!strcmp(m->layers[i].name, name)) return i;
    cr_assert_fail("no tensor %s in %s", name, m->name);
    return 0;
}

Test(gen_kinds, tables)
{
    static const struct { const char *model, *tensor, *kind; } cases[] = {
        {"resnet18_cifar10", "conv1.weight", "conv"},
        {"resnet18_cifar10", "bn1.weight", "norm"},
        {"resnet18_cifar10", "bn1.bias", "norm_bias"},
        {"resnet18_cifar10", "layer2.0.shortcut.1.bias", "norm_bias"},
        {"resnet18_cifar10", "linear.weight", "linear"},
        {"resnet18_cifar10", "linear.bias", "bias"},
        {"bert_base_uncased", "embeddings.word_embeddings.weight", "embedding"},
        {"bert_base_uncased", "embeddings.LayerNorm.bias", "norm_bias"},
        {"bert_base_uncased", "encoder.layer.3.attention.self.key.bias", "bias"},
        {"bert_base_uncased", "encoder.layer.3.output.LayerNorm.weight", "norm"},
        {"bert_base_uncased", "pooler.dense.weight", "linear"},
        {"gpt2_small", "wte.weight", "embedding"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        deftsim_model *m = builtin(cases[i].model);
        size_t L = layer_named(m, cases[i].tensor);
        cr_expect_str_eq(deftsim_gen_kind_name(deftsim_gen_layer_kind(m, L)), cases[i].kind,
                         "%s %s", cases[i].model, cases[i].tensor);
        deftsim_model_free(m);
    }
}

/* With spread 0 a layer's scale is 10^(level + depth (x - 1/2)) (drift 0), to float rounding. */
Test(gen_kinds, scale_line)
{
    deftsim_model *m = builtin("resnet18_cifar10");
    deftsim_gen_params p;
    deftsim_gen_params_default(&p);
    p.kind_scales = 1;
    p.drift = 0;
    for (int k = 0; k < DEFTSIM_GEN_NKINDS; k++) {
        p.kind_level[k] = -3.0 + 0.25 * k;
        p.kind_depth[k] = -1.5 + 0.5 * k;
        p.kind_spread[k] = 0;
    }
    deftsim_gen *g;
    cr_assert_eq(deftsim_gen_new(m, &p, &g), DEFTSIM_OK);
    for (size_t L = 0; L < m->nlayers; L++) {
        int k = (int)deftsim_gen_layer_kind(m, L);
        double want = p.kind_level[k] + p.kind_depth[k] * (deftsim_gen_layer_depth(m, L) - 0.5);
        double got = log10(deftsim_gen_layer_scale(g, L, 7));
        cr_expect(fabs(got - want) < 1e-6, "%s: log10 scale %.8f, want %.8f", m->layers[L].name,
                  got, want);
    }
    /* The spread scatters the tensors of one kind within [line - spread/2, line + spread/2]. */
    p.kind_spread[DEFTSIM_GEN_KIND_CONV] = 2;
    deftsim_gen_free(g);
    cr_assert_eq(deftsim_gen_new(m, &p, &g), DEFTSIM_OK);
    double lo = 1, hi = -1;
    for (size_t L = 0; L < m->nlayers; L++) {
        if (deftsim_gen_layer_kind(m, L) != DEFTSIM_GEN_KIND_CONV) continue;
        double line = p.kind_level[0] + p.kind_depth[0] * (deftsim_gen_layer_depth(m, L) - 0.5);
        double r = log10(deftsim_gen_layer_scale(g, L, 0)) - line;
        lo = r < lo ? r : lo;
        hi = r > hi ? r : hi;
    }
    cr_expect(lo >= -1.0 - 1e-6 && hi <= 1.0 + 1e-6 && hi - lo > 1.0, "residuals %g .. %g", lo, hi);
    deftsim_gen_free(g);
    deftsim_model_free(m);
}

/* The size term: log10 c_L gains size * (log10 n_L - 5), n_L the tensor's element count, for
 * its kind's tensors only; log10 of the count is the same as libm's to rounding. */
Test(gen_kinds, scale_size_term)
{
    static const uint64_t ns[] = {1, 2, 10, 1000, 1728, 100000, 2359296, 1ull << 40, 123456789012ull};
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
        cr_expect(fabs(deftsim_gen_log10_exact(ns[i]) - log10((double)ns[i])) < 1e-14,
                  "log10 %llu: %.17g against %.17g", (unsigned long long)ns[i],
                  deftsim_gen_log10_exact(ns[i]), log10((double)ns[i]));
    deftsim_model *m = builtin("resnet18_cifar10");
    deftsim_gen_params p;
    deftsim_gen_params_default(&p);
    p.kind_scales = 1;
    p.drift = 0;
    for (int k = 0; k < DEFTSIM_GEN_NKINDS; k++) {
        p.kind_level[k] = -3.0;
        p.kind_depth[k] = -0.5;
        p.kind_spread[k] = 0;
    }
    p.kind_size[DEFTSIM_GEN_KIND_CONV] = -0.4;
    p.role_offset[DEFTSIM_GEN_ROLE_SHORTCUT] = 0.3;
    deftsim_gen *g;
    cr_assert_eq(deftsim_gen_new(m, &p, &g), DEFTSIM_OK, "%s", deftsim_error_message());
    int seen = 0;
    for (size_t L = 0; L < m->nlayers; L++) {
        deftsim_gen_kind k = deftsim_gen_layer_kind(m, L);
        double want = -3.0 - 0.5 * (deftsim_gen_layer_depth(m, L) - 0.5);
        if (k == DEFTSIM_GEN_KIND_CONV) {
            want += -0.4 * (log10((double)m->layers[L].numel) - 5);
            seen += m->layers[L].numel != 100000;
        }
        if (deftsim_gen_layer_role(m, L) == DEFTSIM_GEN_ROLE_SHORTCUT) want += 0.3;
        double got = log10(deftsim_gen_layer_scale(g, L, 3));
        cr_expect(fabs(got - want) < 1e-6, "%s: log10 scale %.8f, want %.8f", m->layers[L].name,
                  got, want);
    }
    cr_expect_geq(seen, 20);
    deftsim_gen_free(g);
    deftsim_model_free(m);
}

Test(gen_kinds, bad_values_name_the_key)
{
    deftsim_gen_params p;
    deftsim_gen_params_default(&p);
    p.kind_spread[DEFTSIM_GEN_KIND_NORM_BIAS] = 12.5;
    cr_expect_eq(deftsim_gen_params_check(&p), DEFTSIM_E_INPUT);
    cr_expect_str_eq(deftsim_error_message(), "synthetic.norm_bias_spread: 12.5 is outside [0, 12]");
    deftsim_gen_params_default(&p);
    p.kind_level[DEFTSIM_GEN_KIND_EMBEDDING] = NAN;
    cr_expect_eq(deftsim_gen_params_check(&p), DEFTSIM_E_INPUT);
    cr_expect_str_eq(deftsim_error_message(), "synthetic.embedding_scale: nan is outside [-20, 2]");
    deftsim_gen_params_default(&p);
    p.kind_size[DEFTSIM_GEN_KIND_LINEAR] = 1.25;
    cr_expect_eq(deftsim_gen_params_check(&p), DEFTSIM_E_INPUT);
    cr_expect_str_eq(deftsim_error_message(), "synthetic.linear_size: 1.25 is outside [-1, 1]");
}

/* A synthetic trace of known parameters: calibrate recovers the kinds' lines, the spread (0),
 * a role's offset, signal, tail and the workers' spread within the noise of its estimates;
 * the trace has no field, and none is fitted. */
Test(calibrate, recovers_a_synthetic_trace)
{
    const char *csv = "index,name,shape,numel\n"
                      "0,c1.weight,64x32x3x3,18432\n"
                      "1,n1.weight,64,64\n"
                      "2,n1.bias,64,64\n"
                      "3,c2.weight,128x64x3x3,73728\n"
                      "4,n2.weight,128,128\n"
                      "5,n2.bias,128,128\n"
                      "6,c3.weight,128x128x3x3,147456\n"
                      "7,c3.shortcut.weight,128x64x1x1,8192\n"
                      "8,fc.weight,100x256,25600\n"
                      "9,fc.bias,100,100\n";
    deftsim_model *m;
    cr_assert_eq(deftsim_model_parse_csv(csv, strlen(csv), "test", "tiny", &m), DEFTSIM_OK);
    deftsim_gen_params p;
    deftsim_gen_params_default(&p);
    p.kind_scales = 1;
    p.signal = 0.3;
    p.tail = 5;
    p.drift = 0;
    for (int k = 0; k < DEFTSIM_GEN_NKINDS; k++) {
        p.kind_level[k] = -2.5 - 0.1 * k;
        p.kind_depth[k] = k == DEFTSIM_GEN_KIND_CONV ? -1.0 : 0;
        p.kind_spread[k] = 0;
    }
    p.role_offset[DEFTSIM_GEN_ROLE_SHORTCUT] = 0.6;
    p.worker_spread = 1.0;
    deftsim_gen *g;
    cr_assert_eq(deftsim_gen_new(m, &p, &g), DEFTSIM_OK);
    char dir[] = "/tmp/deftsim_calib_XXXXXX";
    cr_assert(mkdtemp(dir));
    char tdir[64];
    snprintf(tdir, sizeof tdir, "%s/t", dir);
    cr_assert_eq(deftsim_gen_write_trace(g, tdir, 4, 2), DEFTSIM_OK, "%s", deftsim_error_message());
    deftsim_trace *t;
    cr_assert_eq(deftsim_trace_open(tdir, &t), DEFTSIM_OK);
    deftsim_calib_opts o;
    deftsim_calib_opts_default(&o);
    o.from = 0;
    deftsim_calib_result r;
    cr_assert_eq(deftsim_calibrate(t, &o, &r), DEFTSIM_OK, "%s", deftsim_error_message());
    const deftsim_gen_params *q = &r.params;
    /* The fitted scales are the workers' median: the generator's centre times the median of
     * the workers' factors, log10, averaged over the two iterations. */
    double shift = 0;
    for (uint64_t it = 0; it < 2; it++) {
        double f[4];
        for (uint32_t w = 0; w < 4; w++)
            f[w] = deftsim_gen_worker_scale(g, 0, it, w) / deftsim_gen_layer_scale(g, 0, it);
        for (int a = 0; a < 4; a++) /* sort 4 */
            for (int b = a + 1; b < 4; b++)
                if (f[b] < f[a]) {
                    double x = f[a];
                    f[a] = f[b];
                    f[b] = x;
                }
        shift += log10(0.5 * (f[1] + f[2])) / 2;
    }
    for (int k = 0; k < DEFTSIM_GEN_NKINDS; k++) p.kind_level[k] += shift;
    cr_expect_eq(q->kind_scales, 1);
    cr_expect_eq(r.kind_tensors[DEFTSIM_GEN_KIND_CONV], 4);
    cr_expect_eq(r.role_tensors[DEFTSIM_GEN_ROLE_SHORTCUT], 1);
    cr_expect(fabs(q->role_offset[DEFTSIM_GEN_ROLE_SHORTCUT] - 0.6) < 0.05, "shortcut %g",
              q->role_offset[DEFTSIM_GEN_ROLE_SHORTCUT]);
    /* 4 workers' norms at 2 iterations: a rough estimate of the width 1 */
    cr_expect(q->worker_spread > 0.4 && q->worker_spread < 1.8, "worker_spread %g",
              q->worker_spread);
    cr_expect(r.field_fitted && q->field < 0.2, "field %g", q->field);
    cr_expect(fabs(q->kind_level[DEFTSIM_GEN_KIND_CONV] - p.kind_level[0]) < 0.03, "conv %g, "
              "want %g", q->kind_level[DEFTSIM_GEN_KIND_CONV], p.kind_level[0]);
    cr_expect(fabs(q->kind_depth[DEFTSIM_GEN_KIND_CONV] + 1.0) < 0.05, "conv depth %g",
              q->kind_depth[DEFTSIM_GEN_KIND_CONV]);
    cr_expect(q->kind_spread[DEFTSIM_GEN_KIND_CONV] < 0.05, "conv spread %g",
              q->kind_spread[DEFTSIM_GEN_KIND_CONV]);
    for (int k = DEFTSIM_GEN_KIND_LINEAR; k < DEFTSIM_GEN_NKINDS; k++) {
        if (!r.kind_tensors[k]) continue;
        cr_expect(fabs(q->kind_level[k] - p.kind_level[k]) < 0.15, "%s: %g, want %g",
                  deftsim_gen_kind_name((deftsim_gen_kind)k), q->kind_level[k], p.kind_level[k]);
    }
    /* The table has no embedding: its line is copied from linear's. */
    cr_expect_eq(r.kind_tensors[DEFTSIM_GEN_KIND_EMBEDDING], 0);
    cr_expect_eq(r.kind_from[DEFTSIM_GEN_KIND_EMBEDDING], DEFTSIM_GEN_KIND_LINEAR);
    cr_expect(fabs(q->signal - 0.3) < 0.06, "signal %g", q->signal);
    cr_expect(q->tail > 3.5 && q->tail < 8, "tail %g", q->tail);
    cr_expect(fabs(r.worker_corr - 0.3) < 0.03, "correlation %g", r.worker_corr);
    cr_expect(r.have_temporal && fabs(r.temporal_corr) < 0.02, "temporal %g", r.temporal_corr);
    /* The file it writes is a parameter file: [synthetic] then keys. */
    char ini[96];
    snprintf(ini, sizeof ini, "%s/p.ini", dir);
    cr_assert_eq(deftsim_calib_write(t, &r, ini), DEFTSIM_OK);
    char *text;
    cr_assert_eq(deftsim_read_file(ini, &text, NULL), DEFTSIM_OK);
    cr_expect(strstr(text, "\n[synthetic]\nscales = kinds\n"));
    cr_expect(strstr(text, "\nrole_shortcut = "));
    cr_expect(strstr(text, "\nworker_spread = "));
    cr_expect(strstr(text, "# embedding: not in the trace; extrapolated: copied from linear\n"));
    free(text);
    deftsim_trace_close(t);
    deftsim_gen_free(g);
    deftsim_model_free(m);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_expect_eq(system(cmd), 0);
}

/* A trace with a magnitude field and two consecutive iterations: calibrate fits a field that
 * gives the trace's per-tensor temporal overlap (the field is what makes it exceed chance). */
Test(calibrate, fits_the_field)
{
    const char *csv = "index,name,shape,numel\n"
                      "0,a.weight,256x256,65536\n"
                      "1,b.weight,256x512,131072\n"
                      "2,c.weight,512x256,131072\n";
    deftsim_model *m;
    cr_assert_eq(deftsim_model_parse_csv(csv, strlen(csv), "test", "field", &m), DEFTSIM_OK);
    deftsim_gen_params p;
    deftsim_gen_params_default(&p);
    p.kind_scales = 1;
    p.signal = 0.2;
    p.tail = 0; /* Gaussian elements: the field is the only heavy tail */
    p.drift = 0;
    p.field = 1.5;
    for (int k = 0; k < DEFTSIM_GEN_NKINDS; k++) {
        p.kind_level[k] = -3;
        p.kind_spread[k] = 0;
    }
    deftsim_gen *g;
    cr_assert_eq(deftsim_gen_new(m, &p, &g), DEFTSIM_OK);
    char dir[] = "/tmp/deftsim_calib_XXXXXX";
    cr_assert(mkdtemp(dir));
    char tdir[64];
    snprintf(tdir, sizeof tdir, "%s/t", dir);
    cr_assert_eq(deftsim_gen_write_trace(g, tdir, 4, 2), DEFTSIM_OK, "%s", deftsim_error_message());
    deftsim_trace *t;
    cr_assert_eq(deftsim_trace_open(tdir, &t), DEFTSIM_OK);
    deftsim_calib_opts o;
    deftsim_calib_opts_default(&o);
    o.from = 0;
    deftsim_calib_result r;
    cr_assert_eq(deftsim_calibrate(t, &o, &r), DEFTSIM_OK, "%s", deftsim_error_message());
    fprintf(stderr, "field: trace temporal overlap %.4f, fitted field %.3f (generator %.4f), "
            "tail %.3g, signal %.3f\n", r.temporal_real, r.params.field, r.temporal_gen,
            r.params.tail, r.params.signal);
    cr_expect(r.field_fitted);
    cr_expect(r.temporal_real > 0.03, "the field keeps large elements: %g", r.temporal_real);
    cr_expect(fabs(r.temporal_gen - r.temporal_real) < 0.015, "temporal %g vs %g",
              r.temporal_gen, r.temporal_real);
    cr_expect(r.params.field > 0.9 && r.params.field < 2.2, "field %g", r.params.field);
    /* --no-field: the same trace, no field, and the file says why. */
    o.no_field = 1;
    cr_assert_eq(deftsim_calibrate(t, &o, &r), DEFTSIM_OK, "%s", deftsim_error_message());
    cr_expect(!r.field_fitted && r.params.field == 0, "no_field: field %g", r.params.field);
    char path[96];
    snprintf(path, sizeof path, "%s/nofield.ini", dir);
    cr_assert_eq(deftsim_calib_write(t, &r, path), DEFTSIM_OK, "%s", deftsim_error_message());
    FILE *f = fopen(path, "r");
    cr_assert(f);
    char text[8192];
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = '\0';
    fclose(f);
    cr_expect(strstr(text, "# field: not fitted (--no-field); none.") && !strstr(text, "\nfield ="),
              "%s", text);
    deftsim_trace_close(t);
    deftsim_gen_free(g);
    deftsim_model_free(m);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_expect_eq(system(cmd), 0);
}

/* Convolutions whose sizes do not follow their depth, with a size slope: calibrate fits the
 * slope together with the depth line and the shortcut's offset; the 1-D kinds get none; with
 * no_size the slope stays 0 and the line misses the tensors by more. */
Test(calibrate, fits_a_size_slope)
{
    const char *csv = "index,name,shape,numel\n"
                      "0,c0.weight,64x3x3x3,1728\n"
                      "1,c1.weight,128x128x3x3,147456\n"
                      "2,c2.weight,32x32x3x3,9216\n"
                      "3,c3.weight,256x128x3x3,294912\n"
                      "4,c4.weight,64x64x3x3,36864\n"
                      "5,c4.shortcut.weight,64x32x1x1,2048\n"
                      "6,c5.weight,128x64x3x3,73728\n"
                      "7,n.weight,128,128\n"
                      "8,n.bias,128,128\n";
    deftsim_model *m;
    cr_assert_eq(deftsim_model_parse_csv(csv, strlen(csv), "test", "sizes", &m), DEFTSIM_OK);
    deftsim_gen_params p;
    deftsim_gen_params_default(&p);
    p.kind_scales = 1;
    p.signal = 0.3;
    p.tail = 5;
    p.drift = 0;
    for (int k = 0; k < DEFTSIM_GEN_NKINDS; k++) {
        p.kind_level[k] = k == DEFTSIM_GEN_KIND_CONV ? -2.5 : -2.6;
        p.kind_depth[k] = k == DEFTSIM_GEN_KIND_CONV ? -0.5 : 0;
        p.kind_spread[k] = 0;
    }
    p.kind_size[DEFTSIM_GEN_KIND_CONV] = -0.4;
    p.role_offset[DEFTSIM_GEN_ROLE_SHORTCUT] = 0.3;
    deftsim_gen *g;
    cr_assert_eq(deftsim_gen_new(m, &p, &g), DEFTSIM_OK);
    char dir[] = "/tmp/deftsim_calib_XXXXXX";
    cr_assert(mkdtemp(dir));
    char tdir[64];
    snprintf(tdir, sizeof tdir, "%s/t", dir);
    cr_assert_eq(deftsim_gen_write_trace(g, tdir, 4, 2), DEFTSIM_OK, "%s", deftsim_error_message());
    deftsim_trace *t;
    cr_assert_eq(deftsim_trace_open(tdir, &t), DEFTSIM_OK);
    deftsim_calib_opts o;
    deftsim_calib_opts_default(&o);
    o.from = 0;
    o.no_field = 1;
    deftsim_calib_result r;
    cr_assert_eq(deftsim_calibrate(t, &o, &r), DEFTSIM_OK, "%s", deftsim_error_message());
    const deftsim_gen_params *q = &r.params;
    cr_expect(r.kind_size_fitted[DEFTSIM_GEN_KIND_CONV]);
    cr_expect(!r.kind_size_fitted[DEFTSIM_GEN_KIND_NORM_WEIGHT]);
    cr_expect_eq(q->kind_size[DEFTSIM_GEN_KIND_NORM_WEIGHT], 0);
    cr_expect(fabs(q->kind_size[DEFTSIM_GEN_KIND_CONV] + 0.4) < 0.03, "conv size %g",
              q->kind_size[DEFTSIM_GEN_KIND_CONV]);
    cr_expect(fabs(q->kind_depth[DEFTSIM_GEN_KIND_CONV] + 0.5) < 0.06, "conv depth %g",
              q->kind_depth[DEFTSIM_GEN_KIND_CONV]);
    cr_expect(fabs(q->kind_level[DEFTSIM_GEN_KIND_CONV] + 2.5) < 0.04, "conv level %g",
              q->kind_level[DEFTSIM_GEN_KIND_CONV]);
    cr_expect(fabs(q->role_offset[DEFTSIM_GEN_ROLE_SHORTCUT] - 0.3) < 0.06, "shortcut %g",
              q->role_offset[DEFTSIM_GEN_ROLE_SHORTCUT]);
    cr_expect(r.kind_rmse[DEFTSIM_GEN_KIND_CONV] < 0.03, "conv residual %g",
              r.kind_rmse[DEFTSIM_GEN_KIND_CONV]);
    char path[96];
    snprintf(path, sizeof path, "%s/size.ini", dir);
    cr_assert_eq(deftsim_calib_write(t, &r, path), DEFTSIM_OK, "%s", deftsim_error_message());
    char *text;
    cr_assert_eq(deftsim_read_file(path, &text, NULL), DEFTSIM_OK);
    cr_expect(strstr(text, "\nconv_size = -0.") && strstr(text, "\nnorm_size = 0.0000\n"), "%s",
              text);
    free(text);
    o.no_size = 1;
    cr_assert_eq(deftsim_calibrate(t, &o, &r), DEFTSIM_OK, "%s", deftsim_error_message());
    cr_expect(!r.kind_size_fitted[DEFTSIM_GEN_KIND_CONV] && q->kind_size[DEFTSIM_GEN_KIND_CONV] == 0,
              "no_size: conv size %g", q->kind_size[DEFTSIM_GEN_KIND_CONV]);
    cr_expect(r.kind_rmse[DEFTSIM_GEN_KIND_CONV] > 0.1, "no_size: conv residual %g",
              r.kind_rmse[DEFTSIM_GEN_KIND_CONV]);
    deftsim_trace_close(t);
    deftsim_gen_free(g);
    deftsim_model_free(m);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_expect_eq(system(cmd), 0);
}

/* Embeddings whose workers share more than the linear tensors' (a signal of their own):
 * calibrate fits the global signal to the linear tensors and embedding_signal to the
 * embeddings, each near its own. */
Test(calibrate, fits_a_kinds_own_signal)
{
    const char *csv = "index,name,shape,numel\n"
                      "0,embeddings.word_embeddings.weight,1024x128,131072\n"
                      "1,embeddings.position_embeddings.weight,512x128,65536\n"
                      "2,l0.weight,256x256,65536\n"
                      "3,l1.weight,256x512,131072\n"
                      "4,l2.weight,512x256,131072\n";
    deftsim_model *m;
    cr_assert_eq(deftsim_model_parse_csv(csv, strlen(csv), "test", "kinds", &m), DEFTSIM_OK);
    deftsim_gen_params p;
    deftsim_gen_params_default(&p);
    p.kind_scales = 1;
    p.signal = 0.2;
    p.kind_signal[DEFTSIM_GEN_KIND_EMBEDDING] = 0.8;
    p.kind_tail[DEFTSIM_GEN_KIND_EMBEDDING] = 3;
    p.drift = 0;
    for (int k = 0; k < DEFTSIM_GEN_NKINDS; k++) {
        p.kind_level[k] = -3;
        p.kind_spread[k] = 0;
    }
    deftsim_gen *g;
    cr_assert_eq(deftsim_gen_new(m, &p, &g), DEFTSIM_OK);
    char dir[] = "/tmp/deftsim_calib_XXXXXX";
    cr_assert(mkdtemp(dir));
    char tdir[64];
    snprintf(tdir, sizeof tdir, "%s/t", dir);
    cr_assert_eq(deftsim_gen_write_trace(g, tdir, 4, 1), DEFTSIM_OK, "%s", deftsim_error_message());
    deftsim_trace *t;
    cr_assert_eq(deftsim_trace_open(tdir, &t), DEFTSIM_OK);
    deftsim_calib_opts o;
    deftsim_calib_opts_default(&o);
    deftsim_calib_result r;
    cr_assert_eq(deftsim_calibrate(t, &o, &r), DEFTSIM_OK, "%s", deftsim_error_message());
    const deftsim_gen_params *q = &r.params;
    fprintf(stderr, "kinds: signal %.3f, embedding_signal %.3f, tail %.3g, embedding_tail %.3g\n",
            q->signal, q->kind_signal[DEFTSIM_GEN_KIND_EMBEDDING], q->tail,
            q->kind_tail[DEFTSIM_GEN_KIND_EMBEDDING]);
    cr_expect(!r.field_fitted && q->field == 0, "one iteration: no field");
    cr_expect(r.kind_own[DEFTSIM_GEN_KIND_EMBEDDING]);
    cr_expect(!r.kind_own[DEFTSIM_GEN_KIND_LINEAR], "linear is the pooled fit");
    cr_expect(fabs(q->signal - 0.2) < 0.06, "signal %g", q->signal);
    cr_expect(fabs(q->kind_signal[DEFTSIM_GEN_KIND_EMBEDDING] - 0.8) < 0.08,
              "embedding_signal %g", q->kind_signal[DEFTSIM_GEN_KIND_EMBEDDING]);
    cr_expect(q->kind_tail[DEFTSIM_GEN_KIND_EMBEDDING] < q->tail, "embeddings heavier: %g, %g",
              q->kind_tail[DEFTSIM_GEN_KIND_EMBEDDING], q->tail);
    cr_expect(q->kind_signal[DEFTSIM_GEN_KIND_LINEAR] == -1);
    deftsim_trace_close(t);
    deftsim_gen_free(g);
    deftsim_model_free(m);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_expect_eq(system(cmd), 0);
}
