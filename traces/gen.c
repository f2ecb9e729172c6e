/* gen.c - the synthetic gradient generator (docs/GENERATOR.md). */
#include "deftsim_build_info.h"
#include "deftsim_gen.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "deftsim_trace.h"
#include "deftsim_util.h"

typedef void (*groups_fn)(const deftsim_gen_consts *, uint64_t, uint64_t, uint32_t, uint32_t,
                          uint32_t, const float *, float *const *, uint64_t);

struct deftsim_gen {
    groups_fn groups;     /* the vector kernel in use */
    const char *kernel;   /* its name */
    deftsim_model *model;
    deftsim_gen_params params;
    deftsim_gen_consts c;                   /* the global signal, tail and field */
    deftsim_gen_consts kc[DEFTSIM_GEN_NKINDS]; /* per kind: c, or its own values */
    unsigned char *kind;                    /* per layer, its kind */
    double *log2_scale; /* per layer, the centre of its drift */
};

/* ---- The fill kernel ----------------------------------------------------------------------
 * One group (32 elements) per step: the 8 Philox calls of each stream run as vector lanes,
 * and the Bailey pairs are evaluated on all lanes at once (gen_kernel.inc, written with
 * GCC/Clang vector extensions). It is compiled with 4-lane vectors for the baseline
 * instruction set and, on x86-64 with GCC, with 8-lane vectors for AVX2 and 16-lane vectors
 * for AVX-512 (two groups per vector), chosen at run time.
 * Every copy performs, per element, the operations of deftsim_gen_element in the same order
 * (no fused multiply-add: -ffp-contract=off), so all return the reference's bits. */
#if defined(__GNUC__)

#if defined(__SSE2__)
#include <immintrin.h>
#endif

#define VINLINE static inline __attribute__((always_inline))

#define KSFX base
#define KVB 16
#include "gen_kernel.inc"
#undef KVB
#undef KSFX

#if defined(__x86_64__) && !defined(__clang__)
#define DEFTSIM_GEN_HAVE_AVX2 1
#pragma GCC push_options
#pragma GCC target("avx2")
#define KSFX avx2
#define KVB 32
#define GEN_KERNEL_AVX2 1
#include "gen_kernel.inc"
#undef GEN_KERNEL_AVX2
#undef KVB
#undef KSFX
#pragma GCC pop_options

/* 16 lanes: two groups per vector (gen_kernel.inc). */
#define DEFTSIM_GEN_HAVE_AVX512 1
#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq")
#define KSFX avx512
#define KVB 64
#define GEN_KERNEL_AVX512 1
#include "gen_kernel.inc"
#undef GEN_KERNEL_AVX512
#undef KVB
#undef KSFX
#pragma GCC pop_options
#endif

#endif

static void groups_reference(const deftsim_gen_consts *c, uint64_t g0, uint64_t ngroups,
                             uint32_t worker0, uint32_t nworkers, uint32_t iteration,
                             const float *scale, float *const *out, uint64_t at)
{
    for (uint32_t w = 0; w < nworkers; w++)
        for (uint64_t i = 0; i < ngroups * DEFTSIM_GEN_GROUP; i++)
            out[w][at + i] = deftsim_gen_element(c, g0 * DEFTSIM_GEN_GROUP + i, worker0 + w,
                                                 iteration, scale[w]);
}

/* Kernels by preference; the first one the CPU runs is the default. */
static const struct {
    const char *name;
    groups_fn fn;
} kernels[] = {
#ifdef DEFTSIM_GEN_HAVE_AVX512
    {"avx512", groups_avx512},
#endif
#ifdef DEFTSIM_GEN_HAVE_AVX2
    {"avx2", groups_avx2},
#endif
#if defined(__GNUC__)
    {"vector", groups_base},
#endif
    {"reference", groups_reference},
};

static int kernel_runs_here(const char *name)
{
#ifdef DEFTSIM_GEN_HAVE_AVX512
    if (strcmp(name, "avx512") == 0)
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
#endif
#ifdef DEFTSIM_GEN_HAVE_AVX2
    if (strcmp(name, "avx2") == 0) return __builtin_cpu_supports("avx2");
#endif
    (void)name;
    return 1;
}

deftsim_status deftsim_gen_use_kernel(deftsim_gen *g, const char *name)
{
    for (size_t i = 0; i < sizeof kernels / sizeof kernels[0]; i++) {
        if (strcmp(kernels[i].name, name) == 0) {
            if (!kernel_runs_here(name))
                return deftsim_error_set(DEFTSIM_E_UNSUPPORTED,
                                         "generator: kernel '%s' needs an instruction set this "
                                         "CPU lacks", name);
            g->groups = kernels[i].fn;
            g->kernel = kernels[i].name;
            return DEFTSIM_OK;
        }
    }
    return deftsim_error_set(DEFTSIM_E_INPUT, "generator: unknown kernel '%s'", name);
}

const char *deftsim_gen_kernel(const deftsim_gen *g) { return g->kernel; }

size_t deftsim_gen_kernel_count(void) { return sizeof kernels / sizeof kernels[0]; }

const char *deftsim_gen_kernel_name(size_t i)
{
    return i < sizeof kernels / sizeof kernels[0] ? kernels[i].name : NULL;
}

extern const size_t deftsim_params_data_count;
extern const char *const deftsim_params_data_names[];
extern const char *const deftsim_params_data_csv[];

size_t deftsim_gen_builtin_params_count(void) { return deftsim_params_data_count; }

const char *deftsim_gen_builtin_params_name(size_t i)
{
    return i < deftsim_params_data_count ? deftsim_params_data_names[i] : NULL;
}

const char *deftsim_gen_builtin_params(const char *name)
{
    for (size_t i = 0; i < deftsim_params_data_count; i++)
        if (strcmp(deftsim_params_data_names[i], name) == 0) return deftsim_params_data_csv[i];
    return NULL;
}

/* Which built-in table takes which built-in set by default, decided by the table's tensors:
 * convolutions, batch norms and a classifier take the ResNet-18 set; embeddings, attention,
 * layer norms and feed-forward layers the BERT set; tables of other kinds (recurrent layers,
 * recommendation embeddings) none. Each line says what differs from the recorded network. */
static const struct {
    const char *table, *set;
    int fitted;
    const char *note;
} table_params[] = {
    {"resnet18_cifar10", "resnet18_fmnist_p8", 1,
     "fitted on this network (ResNet-18, CIFAR stem) trained on Fashion-MNIST, P = 8"},
    {"resnet18_imagenet", "resnet18_fmnist_p8", 0,
     "extrapolated: the same kinds (conv, batch norm, one classifier), ImageNet stem and "
     "1000 classes; downsample convolutions take the shortcut offset"},
    {"resnet50_imagenet", "resnet18_fmnist_p8", 0,
     "extrapolated: the same kinds, bottleneck blocks and 53 convolutions against 20; "
     "downsample convolutions take the shortcut offset"},
    {"vgg16_cifar10", "resnet18_fmnist_p8", 0,
     "extrapolated: convolutions and linear layers, no batch norm; conv biases take the level "
     "of the one recorded classifier bias, and the three linear layers the classifier's"},
    {"vgg16_imagenet", "resnet18_fmnist_p8", 0,
     "extrapolated: as vgg16_cifar10, with 124 million of the 138 million elements in linear "
     "layers placed at the recorded classifier's level (likely too high)"},
    {"bert_base_uncased", "bert_small_pydoc_p8", 0,
     "extrapolated: the recorded BERT's tensor names and kinds, 12 layers against 4, hidden "
     "768 against 128, 30,522 words against 2,000"},
    {"gpt2_small", "bert_small_pydoc_p8", 0,
     "extrapolated: embeddings, attention, layer norms and feed-forward as in BERT; the fused "
     "query-key-value tensor (attn.c_attn) takes no role offset"},
};
#define NTABLE_PARAMS (sizeof table_params / sizeof table_params[0])

size_t deftsim_gen_table_params_count(void) { return NTABLE_PARAMS; }

const char *deftsim_gen_table_params_at(size_t i, const char **set, int *fitted,
                                        const char **note)
{
    if (i >= NTABLE_PARAMS) return NULL;
    if (set) *set = table_params[i].set;
    if (fitted) *fitted = table_params[i].fitted;
    if (note) *note = table_params[i].note;
    return table_params[i].table;
}

const char *deftsim_gen_table_params(const char *table, int *fitted, const char **note)
{
    for (size_t i = 0; table && i < NTABLE_PARAMS; i++)
        if (!strcmp(table_params[i].table, table)) {
            const char *set;
            deftsim_gen_table_params_at(i, &set, fitted, note);
            return set;
        }
    if (fitted) *fitted = 0;
    if (note) *note = NULL;
    return NULL;
}

static const char *const kind_names[DEFTSIM_GEN_NKINDS] = {"conv", "linear", "embedding",
                                                            "bias", "norm", "norm_bias"};

const char *deftsim_gen_kind_name(deftsim_gen_kind k)
{
    return (unsigned)k < DEFTSIM_GEN_NKINDS ? kind_names[k] : "?";
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* The tensor named like L's name with its last component replaced by "weight", if any. */
static const deftsim_layer *weight_beside(const deftsim_model *m, const char *name)
{
    const char *dot = strrchr(name, '.');
    size_t stem = dot ? (size_t)(dot - name) + 1 : 0;
    for (size_t i = 0; i < m->nlayers; i++) {
        const char *n = m->layers[i].name;
        if (strncmp(n, name, stem) == 0 && strcmp(n + stem, "weight") == 0) return &m->layers[i];
    }
    return NULL;
}

deftsim_gen_kind deftsim_gen_layer_kind(const deftsim_model *m, size_t layer)
{
    const deftsim_layer *L = &m->layers[layer];
    if (L->ndim >= 3) return DEFTSIM_GEN_KIND_CONV;
    if (L->ndim == 2)
        return strstr(L->name, "embed") || strstr(L->name, "wte") || strstr(L->name, "wpe")
                   ? DEFTSIM_GEN_KIND_EMBEDDING
                   : DEFTSIM_GEN_KIND_LINEAR;
    if (ends_with(L->name, "weight")) return DEFTSIM_GEN_KIND_NORM_WEIGHT;
    if (ends_with(L->name, "bias")) {
        const deftsim_layer *w = weight_beside(m, L->name);
        return w && w->ndim == 1 ? DEFTSIM_GEN_KIND_NORM_BIAS : DEFTSIM_GEN_KIND_BIAS;
    }
    return DEFTSIM_GEN_KIND_BIAS;
}

static const char *const role_names[DEFTSIM_GEN_NROLES] = {
    "qk", "v", "attn_out", "ffn_in", "ffn_out", "word", "position", "token_type", "shortcut"};

const char *deftsim_gen_role_name(deftsim_gen_role r)
{
    return (unsigned)r < DEFTSIM_GEN_NROLES ? role_names[r] : "none";
}

deftsim_gen_role deftsim_gen_layer_role(const deftsim_model *m, size_t layer)
{
    const deftsim_layer *L = &m->layers[layer];
    const char *n = L->name;
#define HAS(s) (strstr(n, s) != NULL)
    if (L->ndim < 2) return DEFTSIM_GEN_ROLE_NONE;
    if (HAS("word_embeddings") || HAS("wte")) return DEFTSIM_GEN_ROLE_WORD;
    if (HAS("position_embeddings") || HAS("wpe")) return DEFTSIM_GEN_ROLE_POSITION;
    if (HAS("token_type")) return DEFTSIM_GEN_ROLE_TOKEN_TYPE;
    if (HAS("query") || HAS(".key.") || HAS("q_proj") || HAS("k_proj")) return DEFTSIM_GEN_ROLE_QK;
    if (HAS(".value.") || HAS("v_proj")) return DEFTSIM_GEN_ROLE_V;
    if (HAS("attention.output") || HAS("out_proj") || HAS("o_proj") || HAS("attn.c_proj"))
        return DEFTSIM_GEN_ROLE_ATTN_OUT;
    if (HAS("intermediate") || HAS("c_fc") || HAS("fc1") || HAS("up_proj") || HAS("gate_proj"))
        return DEFTSIM_GEN_ROLE_FFN_IN;
    if (HAS("output.dense") || HAS("mlp.c_proj") || HAS("fc2") || HAS("down_proj"))
        return DEFTSIM_GEN_ROLE_FFN_OUT;
    if (HAS("shortcut") || HAS("downsample")) return DEFTSIM_GEN_ROLE_SHORTCUT;
#undef HAS
    return DEFTSIM_GEN_ROLE_NONE;
}

double deftsim_gen_layer_depth(const deftsim_model *m, size_t layer)
{
    return m->nlayers > 1 ? (double)layer / (double)(m->nlayers - 1) : 0.0;
}

void deftsim_gen_params_default(deftsim_gen_params *p)
{
    p->seed = DEFTSIM_GEN_DEFAULT_SEED;
    p->scale_decades = DEFTSIM_GEN_DEFAULT_SCALE_DECADES;
    p->signal = DEFTSIM_GEN_DEFAULT_SIGNAL;
    p->tail = DEFTSIM_GEN_DEFAULT_TAIL;
    p->drift = DEFTSIM_GEN_DEFAULT_DRIFT;
    p->bias_shift = DEFTSIM_GEN_DEFAULT_BIAS_SHIFT;
    p->kind_scales = 0;
    for (int k = 0; k < DEFTSIM_GEN_NKINDS; k++) {
        int one_d = k >= DEFTSIM_GEN_KIND_BIAS;
        p->kind_level[k] = -2.0 - DEFTSIM_GEN_DEFAULT_SCALE_DECADES / 2 +
                           (one_d ? DEFTSIM_GEN_DEFAULT_BIAS_SHIFT : 0);
        p->kind_depth[k] = 0;
        p->kind_spread[k] = DEFTSIM_GEN_DEFAULT_SCALE_DECADES;
        p->kind_size[k] = 0;
        p->kind_signal[k] = -1;
        p->kind_tail[k] = -1;
        p->kind_field[k] = -1;
    }
    for (int r = 0; r < DEFTSIM_GEN_NROLES; r++) p->role_offset[r] = 0;
    p->field = 0;
    p->worker_spread = 0;
}

static int tail_ok(double t) { return isfinite(t) && (t == 0 || (t > 2 && t <= 1e6)); }

deftsim_status deftsim_gen_params_check(const deftsim_gen_params *p)
{
    /* The bounds keep every layer scale and every intermediate of the element arithmetic far
     * inside float range (scales between about 1e-30 and 1e+8). */
    if (!isfinite(p->scale_decades) || p->scale_decades < 0 || p->scale_decades > 24)
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "synthetic.scale_decades: %g is outside [0, 24]", p->scale_decades);
    if (!isfinite(p->signal) || p->signal < 0 || p->signal > 1)
        return deftsim_error_set(DEFTSIM_E_INPUT, "synthetic.signal: %g is outside [0, 1]",
                                 p->signal);
    if (!tail_ok(p->tail))
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "synthetic.tail: %g must be 0 (Gaussian) or in (2, 1e6] "
                                 "(Student-t degrees of freedom; the variance needs more than 2)",
                                 p->tail);
    if (!isfinite(p->drift) || p->drift < 0 || p->drift > 0.1)
        return deftsim_error_set(DEFTSIM_E_INPUT, "synthetic.drift: %g is outside [0, 0.1]",
                                 p->drift);
    if (!isfinite(p->bias_shift) || fabs(p->bias_shift) > 6)
        return deftsim_error_set(DEFTSIM_E_INPUT, "synthetic.bias_shift: %g is outside [-6, 6]",
                                 p->bias_shift);
    /* The field's factor needs expm1 up to field * ln 10 <= 17 (deftsim_gen_expm1). */
    if (!isfinite(p->field) || p->field < 0 || p->field > 6)
        return deftsim_error_set(DEFTSIM_E_INPUT, "synthetic.field: %g is outside [0, 6]",
                                 p->field);
    if (!isfinite(p->worker_spread) || p->worker_spread < 0 || p->worker_spread > 6)
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "synthetic.worker_spread: %g is outside [0, 6]", p->worker_spread);
    for (int k = 0; k < DEFTSIM_GEN_NKINDS; k++) {
        double sg = p->kind_signal[k], tl = p->kind_tail[k], fl = p->kind_field[k];
        if (!(sg == -1 || (sg >= 0 && sg <= 1)))
            return deftsim_error_set(DEFTSIM_E_INPUT, "synthetic.%s_signal: %g is neither -1 "
                                     "(the global signal) nor in [0, 1]", kind_names[k], sg);
        if (!(tl == -1 || tail_ok(tl)))
            return deftsim_error_set(DEFTSIM_E_INPUT, "synthetic.%s_tail: %g is neither -1 (the "
                                     "global tail), 0 (Gaussian) nor in (2, 1e6]",
                                     kind_names[k], tl);
        if (!(fl == -1 || (fl >= 0 && fl <= 6)))
            return deftsim_error_set(DEFTSIM_E_INPUT, "synthetic.%s_field: %g is neither -1 "
                                     "(the global field) nor in [0, 6]", kind_names[k], fl);
    }
    for (int r = 0; r < DEFTSIM_GEN_NROLES; r++)
        if (!isfinite(p->role_offset[r]) || fabs(p->role_offset[r]) > 6)
            return deftsim_error_set(DEFTSIM_E_INPUT, "synthetic.role_%s: %g is outside [-6, 6]",
                                     role_names[r], p->role_offset[r]);
    if (p->kind_scales != 0 && p->kind_scales != 1)
        return deftsim_error_set(DEFTSIM_E_INPUT, "synthetic.scales: %d is neither 0 (seed) nor "
                                 "1 (kinds)", p->kind_scales);
    for (int k = 0; k < DEFTSIM_GEN_NKINDS; k++) {
        /* Together with a role's 6 and the size term's at most 15 (a tensor of 2^64 elements
         * lies 14.3 decades above 10^5, one element 5 below), at most 2 + 5 + 6 + 6 + 15 = 34
         * decades above 10^0 or 20 + 11 + 6 + 15 = 52 below 10^-20: inside float range for a
         * scale, but not for values far out in a heavy tail at the extremes; tensors of real
         * models lie within 10^0 and 10^12 elements (7 decades). */
        const struct { const char *what; double v, lo, hi; } f[4] = {
            {"scale", p->kind_level[k], -20, 2},
            {"depth", p->kind_depth[k], -10, 10},
            {"spread", p->kind_spread[k], 0, 12},
            {"size", p->kind_size[k], -1, 1},
        };
        for (int j = 0; j < 4; j++)
            if (!isfinite(f[j].v) || f[j].v < f[j].lo || f[j].v > f[j].hi)
                return deftsim_error_set(DEFTSIM_E_INPUT, "synthetic.%s_%s: %g is outside [%g, %g]",
                                         kind_names[k], f[j].what, f[j].v, f[j].lo, f[j].hi);
    }
    return DEFTSIM_OK;
}

/* 2^x in double with nothing but IEEE arithmetic, so the layer scales are the same bits on
 * every platform (libm's exp differs between implementations in the last place). */
static double exp2_exact(double x)
{
    double k = floor(x);
    double f = (x - k) * 0.69314718055994530942; /* in [0, ln 2) */
    double term = 1.0, sum = 1.0;
    for (int i = 1; i <= 16; i++) {
        term *= f / i;
        sum += term;
    }
    return ldexp(sum, (int)k);
}

/* log10 of a positive integer in double with nothing but IEEE arithmetic (frexp is exact):
 * n = f 2^e with f in [1/sqrt 2, sqrt 2), ln f = 2 atanh s, s = (f - 1) / (f + 1), |s| < 0.172,
 * summed to 14 terms (the next is below 1e-22). */
double deftsim_gen_log10_exact(uint64_t n)
{
    int e;
    double f = frexp((double)n, &e);
    if (f < 0.70710678118654752440) {
        f *= 2;
        e--;
    }
    double s = (f - 1) / (f + 1), s2 = s * s, term = s, sum = 0;
    for (int j = 0; j < 14; j++) {
        sum += term / (2 * j + 1);
        term *= s2;
    }
    return ((double)e * 0.69314718055994530942 + 2 * sum) * 0.43429448190325182765;
}

static double layer_uniform(const deftsim_gen_consts *c, uint32_t stream, uint64_t layer,
                            uint64_t knot)
{
    uint32_t w[4];
    deftsim_philox4x32_10_words((uint32_t)layer, (uint32_t)(layer >> 32) | (stream << 24),
                                (uint32_t)knot, (uint32_t)(knot >> 32), c->key[0], c->key[1], w);
    return deftsim_philox_u01_double(w[0], w[1]);
}

static void make_consts(deftsim_gen_consts *c, uint64_t seed, double signal, double tail,
                        double field)
{
    memset(c, 0, sizeof *c);
    c->key[0] = (uint32_t)seed;
    c->key[1] = (uint32_t)(seed >> 32);
    c->gauss = tail == 0;
    double nu = c->gauss ? 0 : tail;
    double norm = c->gauss ? 1.0 : sqrt((nu - 2.0) / nu); /* t(nu) has variance nu/(nu-2) */
    c->nu = (float)nu;
    c->inv_nu = c->gauss ? 0.0f : (float)(1.0 / nu);
    c->w_signal = (float)(sqrt(signal) * norm);
    c->w_noise = (float)(sqrt(1.0 - signal) * norm);
    if (field > 0) {
        /* e^(W u), u uniform in (0, 1), has mean square (e^(2W) - 1) / (2W). */
        double w = field * 2.30258509299404568402;
        c->field_w = (float)w;
        c->field_c = (float)sqrt(2.0 * w / expm1(2.0 * w));
    }
}

deftsim_status deftsim_gen_new(const deftsim_model *m, const deftsim_gen_params *p,
                               deftsim_gen **out)
{
    *out = NULL;
    deftsim_status st = deftsim_gen_params_check(p);
    if (st) return st;
    deftsim_gen *g = calloc(1, sizeof *g);
    if (!g) return deftsim_error_nomem("generator");
    g->params = *p;
    if ((st = deftsim_model_clone(m, &g->model))) {
        free(g);
        return st;
    }
    g->log2_scale = calloc(m->nlayers ? m->nlayers : 1, sizeof *g->log2_scale);
    if (!g->log2_scale) {
        deftsim_gen_free(g);
        return deftsim_error_nomem("generator");
    }

    g->kind = malloc(m->nlayers ? m->nlayers : 1);
    if (!g->kind) {
        deftsim_gen_free(g);
        return deftsim_error_nomem("generator");
    }
    for (size_t L = 0; L < m->nlayers; L++) g->kind[L] = (unsigned char)deftsim_gen_layer_kind(m, L);
    make_consts(&g->c, p->seed, p->signal, p->tail, p->field);
    for (int k = 0; k < DEFTSIM_GEN_NKINDS; k++)
        make_consts(&g->kc[k], p->seed, p->kind_signal[k] >= 0 ? p->kind_signal[k] : p->signal,
                    p->kind_tail[k] >= 0 ? p->kind_tail[k] : p->tail,
                    p->kind_field[k] >= 0 ? p->kind_field[k] : p->field);
    const deftsim_gen_consts *c = &g->c;

    /* Scales 10^-2 .. 10^-(2 + decades) for weights: the size of per-element gradients of
     * trained CNNs. Only ratios matter to a sparsifier; the absolute level keeps values in a
     * familiar range. */
    for (size_t L = 0; L < m->nlayers; L++) {
        double u = layer_uniform(c, DEFTSIM_GEN_STREAM_LAYER, L, 0);
        double log10s;
        if (p->kind_scales) {
            deftsim_gen_kind k = deftsim_gen_layer_kind(m, L);
            log10s = p->kind_level[k] + p->kind_depth[k] * (deftsim_gen_layer_depth(m, L) - 0.5) -
                     p->kind_spread[k] * (u - 0.5);
            if (p->kind_size[k] != 0)
                log10s = log10s + p->kind_size[k] * (deftsim_gen_log10_exact(m->layers[L].numel) - 5.0);
            deftsim_gen_role r = deftsim_gen_layer_role(m, L);
            if (r != DEFTSIM_GEN_ROLE_NONE && p->role_offset[r] != 0)
                log10s = log10s + p->role_offset[r];
        } else {
            log10s = -2.0 - p->scale_decades * u + (m->layers[L].ndim == 1 ? p->bias_shift : 0);
        }
        g->log2_scale[L] = log10s * 3.32192809488736234787;
    }
    for (size_t i = 0; i < sizeof kernels / sizeof kernels[0]; i++) {
        if (kernel_runs_here(kernels[i].name)) {
            g->groups = kernels[i].fn;
            g->kernel = kernels[i].name;
            break;
        }
    }
    *out = g;
    return DEFTSIM_OK;
}

void deftsim_gen_free(deftsim_gen *g)
{
    if (!g) return;
    deftsim_model_free(g->model);
    free(g->log2_scale);
    free(g->kind);
    free(g);
}

const deftsim_model *deftsim_gen_model(const deftsim_gen *g) { return g->model; }
const deftsim_gen_params *deftsim_gen_get_params(const deftsim_gen *g) { return &g->params; }
const deftsim_gen_consts *deftsim_gen_get_consts(const deftsim_gen *g) { return &g->c; }

const deftsim_gen_consts *deftsim_gen_layer_consts(const deftsim_gen *g, size_t layer)
{
    return &g->kc[g->kind[layer]];
}

/* The drift is a piecewise-linear path through knots DEFTSIM_GEN_DRIFT_PERIOD iterations
 * apart with knot values uniform in [-1/2, 1/2] * period: the log scale's slope between knots
 * is the difference of two such values over the period, so it never exceeds `drift` per
 * iteration, and the scale stays within a factor e^(drift * period / 2) of its centre.
 * Evaluating it costs two Philox calls, whatever the iteration. */
static double layer_log2_scale(const deftsim_gen *g, size_t layer, uint64_t iteration)
{
    const uint64_t K = DEFTSIM_GEN_DRIFT_PERIOD;
    double log2s = g->log2_scale[layer];
    if (g->params.drift > 0) {
        uint64_t j = iteration / K;
        double f = (double)(iteration % K) / (double)K;
        double a0 = layer_uniform(&g->c, DEFTSIM_GEN_STREAM_DRIFT, layer, j) - 0.5;
        double a1 = layer_uniform(&g->c, DEFTSIM_GEN_STREAM_DRIFT, layer, j + 1) - 0.5;
        double d = (double)K * ((1.0 - f) * a0 + f * a1);
        log2s += g->params.drift * d * 1.44269504088896340736;
    }
    return log2s;
}

float deftsim_gen_layer_scale(const deftsim_gen *g, size_t layer, uint64_t iteration)
{
    return (float)exp2_exact(layer_log2_scale(g, layer, iteration));
}

/* The worker's factor: log10 f = worker_spread * (U - 1/2), U = u01 of (stream 6, the worker,
 * the iteration), added to the layer's log2 scale before the one rounding to float. */
float deftsim_gen_worker_scale(const deftsim_gen *g, size_t layer, uint64_t iteration,
                               uint32_t worker)
{
    double log2s = layer_log2_scale(g, layer, iteration);
    if (g->params.worker_spread > 0) {
        double u = layer_uniform(&g->c, DEFTSIM_GEN_STREAM_WORKER, worker, iteration);
        log2s += g->params.worker_spread * (u - 0.5) * 3.32192809488736234787;
    }
    return (float)exp2_exact(log2s);
}

/* Workers filled together (one scale each, on the stack). */
#define FILL_CHUNK 64u

/* Elements [a, b) of one layer (one scale per worker) for nworkers workers, into out[k] + (a - base):
 * whole groups by the vector kernel, a ragged head and tail by the scalar reference. */
static void fill_span(groups_fn groups, const deftsim_gen_consts *c, uint32_t iteration,
                      uint32_t worker0, uint32_t nworkers, uint64_t a, uint64_t b,
                      const float *scale, float *const *out, uint64_t base)
{
    const uint64_t G = DEFTSIM_GEN_GROUP;
    uint64_t ga = (a + G - 1) / G, gb = b / G;
    uint64_t head_end = ga < gb ? ga * G : b;
    for (uint32_t w = 0; w < nworkers; w++)
        for (uint64_t i = a; i < head_end; i++)
            out[w][i - base] = deftsim_gen_element(c, i, worker0 + w, iteration, scale[w]);
    if (ga >= gb) return;
    groups(c, ga, gb - ga, worker0, nworkers, iteration, scale, out, ga * G - base);
    for (uint32_t w = 0; w < nworkers; w++)
        for (uint64_t i = gb * G; i < b; i++)
            out[w][i - base] = deftsim_gen_element(c, i, worker0 + w, iteration, scale[w]);
}

/* Runs (ascending, disjoint, within the model; checked by the callers) of workers
 * first_worker .. + nworkers - 1, element i of worker first_worker + k into out[k][i - base]:
 * each layer's scales once for all the runs that lie in it, a run that goes on past a layer
 * taken up again with the next. */
static void fill_runs(const deftsim_gen *g, uint64_t iteration, uint32_t first_worker,
                      uint32_t nworkers, const deftsim_gen_run *runs, size_t nruns,
                      float *const *out, uint64_t base)
{
    const deftsim_model *m = g->model;
    if (!nruns) return;
    /* The last layer whose offset is <= the first run's. */
    size_t lo = 0, hi = m->nlayers;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (m->layers[mid].offset <= runs[0].offset) lo = mid;
        else hi = mid;
    }
    size_t r = 0;
    for (size_t L = lo; L < m->nlayers && r < nruns; L++) {
        const deftsim_layer *ly = &m->layers[L];
        const uint64_t lend = ly->offset + ly->numel;
        if (runs[r].offset >= lend) continue;
        float scale[FILL_CHUNK];
        for (uint32_t w0 = 0; w0 < nworkers; w0 += FILL_CHUNK) {
            uint32_t nw = nworkers - w0 < FILL_CHUNK ? nworkers - w0 : FILL_CHUNK;
            if (g->params.worker_spread > 0) {
                for (uint32_t w = 0; w < nw; w++)
                    scale[w] = deftsim_gen_worker_scale(g, L, iteration, first_worker + w0 + w);
            } else {
                scale[0] = deftsim_gen_layer_scale(g, L, iteration);
                for (uint32_t w = 1; w < nw; w++) scale[w] = scale[0];
            }
            for (size_t q = r; q < nruns && runs[q].offset < lend; q++) {
                uint64_t a = runs[q].offset > ly->offset ? runs[q].offset : ly->offset;
                uint64_t e = runs[q].offset + runs[q].count;
                uint64_t b = e < lend ? e : lend;
                if (a < b)
                    fill_span(g->groups, &g->kc[g->kind[L]], (uint32_t)iteration,
                              first_worker + w0, nw, a, b, scale, out + w0, base);
            }
        }
        /* The runs that end within this layer are done. */
        while (r < nruns && runs[r].offset + runs[r].count <= lend) r++;
    }
}

deftsim_status deftsim_gen_fill_workers(const deftsim_gen *g, uint64_t iteration,
                                        uint32_t first_worker, uint32_t nworkers, uint64_t offset,
                                        uint64_t count, float *const *out)
{
    const deftsim_model *m = g->model;
    if (offset > m->numel || count > m->numel - offset)
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "generator: elements [%llu, %llu + %llu) lie outside model '%s' "
                                 "(%llu elements)",
                                 (unsigned long long)offset, (unsigned long long)offset,
                                 (unsigned long long)count, m->name, (unsigned long long)m->numel);
    if (iteration > DEFTSIM_GEN_MAX_ITERATION)
        return deftsim_error_set(DEFTSIM_E_INPUT, "generator: iteration %llu exceeds %llu",
                                 (unsigned long long)iteration, DEFTSIM_GEN_MAX_ITERATION);
    if (nworkers > UINT32_MAX - first_worker)
        return deftsim_error_set(DEFTSIM_E_INPUT, "generator: workers %u + %u exceed 2^32",
                                 first_worker, nworkers);
    if (count == 0 || nworkers == 0) return DEFTSIM_OK;
    const deftsim_gen_run run = {offset, count};
    fill_runs(g, iteration, first_worker, nworkers, &run, 1, out, offset);
    return DEFTSIM_OK;
}

deftsim_status deftsim_gen_fill_runs(const deftsim_gen *g, uint64_t iteration,
                                     uint32_t first_worker, uint32_t nworkers,
                                     const deftsim_gen_run *runs, size_t nruns,
                                     float *const *out)
{
    const deftsim_model *m = g->model;
    if (iteration > DEFTSIM_GEN_MAX_ITERATION)
        return deftsim_error_set(DEFTSIM_E_INPUT, "generator: iteration %llu exceeds %llu",
                                 (unsigned long long)iteration, DEFTSIM_GEN_MAX_ITERATION);
    if (nworkers > UINT32_MAX - first_worker)
        return deftsim_error_set(DEFTSIM_E_INPUT, "generator: workers %u + %u exceed 2^32",
                                 first_worker, nworkers);
    uint64_t prev_end = 0;
    for (size_t r = 0; r < nruns; r++) {
        if (runs[r].offset < prev_end || runs[r].offset > m->numel ||
            runs[r].count > m->numel - runs[r].offset)
            return deftsim_error_set(DEFTSIM_E_INPUT,
                                     "generator: run %zu, elements [%llu, %llu + %llu), is not "
                                     "ascending within model '%s' (%llu elements)",
                                     r, (unsigned long long)runs[r].offset,
                                     (unsigned long long)runs[r].offset,
                                     (unsigned long long)runs[r].count, m->name,
                                     (unsigned long long)m->numel);
        prev_end = runs[r].offset + runs[r].count;
    }
    if (nworkers == 0) return DEFTSIM_OK;
    fill_runs(g, iteration, first_worker, nworkers, runs, nruns, out, 0);
    return DEFTSIM_OK;
}

deftsim_status deftsim_gen_fill(const deftsim_gen *g, uint64_t iteration, uint32_t worker,
                                uint64_t offset, uint64_t count, float *out)
{
    return deftsim_gen_fill_workers(g, iteration, worker, 1, offset, count, &out);
}

/* ---- Writing a trace ---------------------------------------------------------------------- */

typedef struct {
    const deftsim_gen *g;
    uint64_t iteration;
} fill_ctx;

static deftsim_status fill_cb(void *ctx, uint32_t worker, uint64_t offset, uint64_t count,
                              float *out)
{
    const fill_ctx *fc = ctx;
    return deftsim_gen_fill(fc->g, fc->iteration, worker, offset, count, out);
}

deftsim_status deftsim_gen_write_trace(const deftsim_gen *g, const char *dir, uint32_t workers,
                                       uint64_t iterations)
{
    if (iterations == 0 || iterations - 1 > DEFTSIM_GEN_MAX_ITERATION)
        return deftsim_error_set(DEFTSIM_E_INPUT, "generator: iterations must be in [1, 2^32]");
    const deftsim_gen_params *p = &g->params;
    json_t *prov = json_pack("{s:s, s:s, s:I, s:{s:f, s:f, s:f, s:f, s:f}}",
                             "recorder", "deftsim " DEFTSIM_VERSION " (commit " DEFTSIM_GIT_COMMIT ")",
                             "method", "synthetic: deftsim trace gen (docs/GENERATOR.md)",
                             "seed", (json_int_t)0,
                             "synthetic", "scale_decades", p->scale_decades, "signal", p->signal,
                             "tail", p->tail, "drift", p->drift, "bias_shift", p->bias_shift);
    if (!prov) return deftsim_error_nomem("generator");
    if (p->kind_scales) { /* the kinds' lines replace scale_decades and bias_shift */
        json_t *syn = json_object_get(prov, "synthetic"), *kinds = json_object();
        int bad = !kinds || json_object_set_new(syn, "kinds", kinds);
        for (int k = 0; k < DEFTSIM_GEN_NKINDS && !bad; k++) {
            json_t *one = json_pack("{s:f, s:f, s:f}", "scale", p->kind_level[k], "depth",
                                    p->kind_depth[k], "spread", p->kind_spread[k]);
            /* the size term only when set, so that files without it keep their bytes */
            if (one && p->kind_size[k] != 0)
                bad = json_object_set_new(one, "size", json_real(p->kind_size[k]));
            bad |= json_object_set_new(kinds, kind_names[k], one);
        }
        if (bad) {
            json_decref(prov);
            return deftsim_error_nomem("generator");
        }
    }
    { /* the element statistics beyond the defaults, only when set */
        json_t *syn = json_object_get(prov, "synthetic");
        int bad = 0;
        if (p->field > 0) bad |= json_object_set_new(syn, "field", json_real(p->field));
        if (p->worker_spread > 0)
            bad |= json_object_set_new(syn, "worker_spread", json_real(p->worker_spread));
        const struct { const char *key; const double *v; } per[3] = {
            {"signal", p->kind_signal}, {"tail", p->kind_tail}, {"field", p->kind_field}};
        for (int k = 0; k < DEFTSIM_GEN_NKINDS && !bad; k++)
            for (int j = 0; j < 3 && !bad; j++)
                if (per[j].v[k] >= 0) {
                    char key[48];
                    snprintf(key, sizeof key, "%s_%s", kind_names[k], per[j].key);
                    bad |= json_object_set_new(syn, key, json_real(per[j].v[k]));
                }
        for (int r = 0; r < DEFTSIM_GEN_NROLES && !bad && p->kind_scales; r++)
            if (p->role_offset[r] != 0) {
                char key[48];
                snprintf(key, sizeof key, "role_%s", role_names[r]);
                bad |= json_object_set_new(syn, key, json_real(p->role_offset[r]));
            }
        if (bad) {
            json_decref(prov);
            return deftsim_error_nomem("generator");
        }
    }
    /* JSON integers are signed 64-bit: larger seeds are written as decimal strings. */
    json_t *seed = p->seed <= (uint64_t)INT64_MAX ? json_integer((json_int_t)p->seed) : NULL;
    if (!seed) {
        char buf[32];
        snprintf(buf, sizeof buf, "%llu", (unsigned long long)p->seed);
        seed = json_string(buf);
    }
    if (!seed || json_object_set_new(prov, "seed", seed)) {
        json_decref(prov);
        return deftsim_error_nomem("generator");
    }
    deftsim_trace_writer *w;
    deftsim_status st = deftsim_trace_writer_open(dir, g->model, workers, prov, &w);
    json_decref(prov);
    if (st) return st;
    for (uint64_t t = 0; t < iterations; t++) {
        fill_ctx fc = {g, t};
        if ((st = deftsim_trace_writer_put_fill(w, t, fill_cb, &fc))) {
            deftsim_trace_writer_discard(w);
            return st;
        }
    }
    return deftsim_trace_writer_close(w);
}
