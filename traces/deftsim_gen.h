/* deftsim_gen.h - synthetic per-worker gradients, regenerated on demand.
 *
 * Worker w's gradient at iteration t, element i of layer L (docs/GENERATOR.md has the model):
 *
 *     g[t][w][i] = s_L(t) * f_w(t) * m_i * ( a * S[t][i] + b * N[t][w][i] )
 *
 * with S shared by all workers (the "signal"), N private to each worker, both unit-variance
 * Student-t values, a^2 = signal and b^2 = 1 - signal, and s_L(t) the layer's scale: spread over
 * scale_decades orders of magnitude across layers, shifted for 1-D tensors, drifting slowly
 * with t. Optional: f_w(t) a worker's factor (worker_spread), m_i a magnitude field shared by
 * workers and iterations (field), and signal, tail and field per tensor kind. Every random bit comes from Philox-4x32-10 keyed by the seed and addressed by
 * (element block, stream, worker, iteration), so any slice of any gradient can be computed
 * alone, in any order, on any thread, with the same bits (deftsim_gen_fill).
 *
 * The element arithmetic below is plain IEEE single precision (+ - * / and sqrt, no libm, no
 * fused multiply-add): a port that evaluates the same operations in the same order, such as a
 * CUDA kernel built with -fmad=false, reproduces the bytes. */
#ifndef DEFTSIM_GEN_H
#define DEFTSIM_GEN_H

#include <stdint.h>
#include <string.h>

#include "deftsim_error.h"
#include "deftsim_model.h"
#include "deftsim_philox.h"

/* Kinds of parameter tensors (deftsim_gen_layer_kind): each has its own line of layer scales
 * when the scales come from kinds (kind_scales = 1). */
typedef enum {
    DEFTSIM_GEN_KIND_CONV,        /* >= 3-D weights */
    DEFTSIM_GEN_KIND_LINEAR,      /* 2-D weights other than embeddings */
    DEFTSIM_GEN_KIND_EMBEDDING,   /* 2-D tables whose name says embedding (embed, wte, wpe) */
    DEFTSIM_GEN_KIND_BIAS,        /* 1-D biases of 2-D+ weights, and other 1-D tensors */
    DEFTSIM_GEN_KIND_NORM_WEIGHT, /* 1-D weights (batch and layer norms' gains) */
    DEFTSIM_GEN_KIND_NORM_BIAS,   /* the bias beside a 1-D weight */
    DEFTSIM_GEN_NKINDS
} deftsim_gen_kind;

/* "conv", "linear", "embedding", "bias", "norm", "norm_bias" (the config keys' stems). */
const char *deftsim_gen_kind_name(deftsim_gen_kind k);

/* Layer L's kind, from its dimensions and names (docs/GENERATOR.md, "Kinds"). */
deftsim_gen_kind deftsim_gen_layer_kind(const deftsim_model *m, size_t layer);

/* Roles of 2-D+ weight tensors, from their names (deftsim_gen_layer_role): with scales = kinds
 * each role's tensors sit role_offset decades off their kind's line. */
typedef enum {
    DEFTSIM_GEN_ROLE_NONE = -1,
    DEFTSIM_GEN_ROLE_QK,         /* attention query and key: query, .key., q_proj, k_proj */
    DEFTSIM_GEN_ROLE_V,          /* attention value: .value., v_proj */
    DEFTSIM_GEN_ROLE_ATTN_OUT,   /* attention output: attention.output, out_proj, o_proj,
                                  * attn.c_proj */
    DEFTSIM_GEN_ROLE_FFN_IN,     /* feed-forward in: intermediate, c_fc, fc1, up_proj, gate_proj */
    DEFTSIM_GEN_ROLE_FFN_OUT,    /* feed-forward out: output.dense, mlp.c_proj, fc2, down_proj */
    DEFTSIM_GEN_ROLE_WORD,       /* word embeddings: word_embeddings, wte */
    DEFTSIM_GEN_ROLE_POSITION,   /* position embeddings: position_embeddings, wpe */
    DEFTSIM_GEN_ROLE_TOKEN_TYPE, /* token type embeddings: token_type */
    DEFTSIM_GEN_ROLE_SHORTCUT,   /* residual projections: shortcut, downsample */
    DEFTSIM_GEN_NROLES
} deftsim_gen_role;

/* "qk", "v", "attn_out", "ffn_in", "ffn_out", "word", "position", "token_type", "shortcut"
 * (the config keys role_<name>). */
const char *deftsim_gen_role_name(deftsim_gen_role r);

/* Layer L's role, DEFTSIM_GEN_ROLE_NONE for 1-D tensors and names that say none. */
deftsim_gen_role deftsim_gen_layer_role(const deftsim_model *m, size_t layer);

/* Layer L's depth: its position in the table, 0 for the first tensor and 1 for the last. */
double deftsim_gen_layer_depth(const deftsim_model *m, size_t layer);

/* log10 n in binary64 with + - * / and frexp only, the same bits everywhere (the size term of
 * the layer scales, docs/GENERATOR.md "Exact specification"). n >= 1. */
double deftsim_gen_log10_exact(uint64_t n);

/* Generator parameters. deftsim_gen_params_default() fills the documented defaults; scenario
 * files set them in a [synthetic] section under the same names. */
typedef struct {
    uint64_t seed;        /* Philox key; default 1 */
    double scale_decades; /* spread of the layers' log10 scales, in [0, 24]; default 3 */
    double signal;        /* fraction of the variance shared by all workers, in [0, 1]; default 0.5 */
    double tail;          /* Student-t degrees of freedom, > 2; 0 means Gaussian; default 4 */
    double drift;         /* largest per-iteration change of a layer's natural-log scale (a
                           * relative change), in [0, 0.1]; default 0.01 */
    double bias_shift;    /* log10 offset of 1-D tensors' scales (biases, norms), in [-6, 6];
                           * default 1 */
    /* Layer scales by kind (kind_scales = 1; 0, the default, draws them from scale_decades and
     * bias_shift): log10 c_L = level + depth * (x_L - 1/2) - spread * (U_L - 1/2)
     * + size * (log10 n_L - 5), x_L the layer's depth, U_L its uniform draw, n_L its element
     * count. The defaults reproduce the seed's spread (level -3.5 for weights, -2.5 for 1-D
     * tensors, depth 0, spread 3, size 0). */
    int kind_scales;
    double kind_level[DEFTSIM_GEN_NKINDS];  /* in [-20, 2] */
    double kind_depth[DEFTSIM_GEN_NKINDS];  /* in [-10, 10] */
    double kind_spread[DEFTSIM_GEN_NKINDS]; /* in [0, 12] */
    /* log10 change of the scale per decade of the tensor's element count, from a tensor of
     * 10^5 elements; 0 (the default) leaves the size out. */
    double kind_size[DEFTSIM_GEN_NKINDS];   /* in [-1, 1] */
    /* With kinds: log10 offset of each role's tensors from their kind's line; default 0. */
    double role_offset[DEFTSIM_GEN_NROLES]; /* in [-6, 6] */
    /* Per-kind element statistics (any scales): a kind's own signal, tail and field, or -1
     * (the default) for the global value. */
    double kind_signal[DEFTSIM_GEN_NKINDS]; /* -1 or in [0, 1] */
    double kind_tail[DEFTSIM_GEN_NKINDS];   /* -1, 0 or in (2, 1e6] */
    double kind_field[DEFTSIM_GEN_NKINDS];  /* -1 or in [0, 6] */
    /* Width in decades of the log-uniform magnitude field: a per-element factor, shared by all
     * workers and iterations, with mean square 1; 0 (the default) means none. */
    double field;                           /* in [0, 6] */
    /* Width in decades of the log-uniform factor that scales one worker's whole gradient at
     * one iteration (drawn per worker and iteration); 0 (the default) means none. */
    double worker_spread;                   /* in [0, 6] */
} deftsim_gen_params;

#define DEFTSIM_GEN_DEFAULT_SEED 1
#define DEFTSIM_GEN_DEFAULT_SCALE_DECADES 3.0
#define DEFTSIM_GEN_DEFAULT_SIGNAL 0.5
#define DEFTSIM_GEN_DEFAULT_TAIL 4.0
#define DEFTSIM_GEN_DEFAULT_DRIFT 0.01
#define DEFTSIM_GEN_DEFAULT_BIAS_SHIFT 1.0

/* Iterations are addressed by one 32-bit Philox counter word. */
#define DEFTSIM_GEN_MAX_ITERATION 0xFFFFFFFFull
/* Layer scales move between knots this many iterations apart. */
#define DEFTSIM_GEN_DRIFT_PERIOD 64u

void deftsim_gen_params_default(deftsim_gen_params *p);

/* Built-in parameter sets (the INI files of traces/params/, compiled in): [synthetic] keys fitted to
 * recorded traces by deftsim trace calibrate, for [gradients] params = NAME. The text of the
 * set called name, or NULL if there is none. */
size_t deftsim_gen_builtin_params_count(void);
const char *deftsim_gen_builtin_params_name(size_t i);
const char *deftsim_gen_builtin_params(const char *name);

/* The built-in model tables' own sets (docs/GENERATOR.md, "Default sets"): a scenario with
 * [gradients] source = synthetic and params unset runs the built-in table `table` with the set
 * this names. NULL: the table has none (and any name that is not a built-in table, such as a
 * CSV path), so the plain defaults apply. *fitted (if not NULL): 1 when the set was fitted on a
 * trace of this table's network, 0 when it is extrapolated to it; *note (if not NULL): one
 * line on what the set was fitted on and what differs. The _at form walks the table (i below
 * deftsim_gen_table_params_count()), returning the table's name and its set in *set. */
const char *deftsim_gen_table_params(const char *table, int *fitted, const char **note);
size_t deftsim_gen_table_params_count(void);
const char *deftsim_gen_table_params_at(size_t i, const char **set, int *fitted,
                                        const char **note);

/* DEFTSIM_E_INPUT naming the offending field ("synthetic.tail: ...") if a value is out of range
 * or not finite. */
deftsim_status deftsim_gen_params_check(const deftsim_gen_params *p);

typedef struct deftsim_gen deftsim_gen;

/* A generator for model m (copied) with parameters p (checked). */
deftsim_status deftsim_gen_new(const deftsim_model *m, const deftsim_gen_params *p,
                               deftsim_gen **out);
void deftsim_gen_free(deftsim_gen *g);

const deftsim_model *deftsim_gen_model(const deftsim_gen *g);
const deftsim_gen_params *deftsim_gen_get_params(const deftsim_gen *g);

/* Layer L's scale s_L(t) (layer < the model's nlayers): the standard deviation of its
 * elements at iteration t (before the worker's factor). */
float deftsim_gen_layer_scale(const deftsim_gen *g, size_t layer, uint64_t iteration);

/* s_L(t) times worker's factor at iteration t (worker_spread): the scale fills use. Equals
 * deftsim_gen_layer_scale when worker_spread is 0. */
float deftsim_gen_worker_scale(const deftsim_gen *g, size_t layer, uint64_t iteration,
                               uint32_t worker);

/* Writes elements [offset, offset + count) of worker's gradient at iteration into out. The
 * result does not depend on how a gradient is cut into calls. Thread-safe (g is read only).
 * DEFTSIM_E_INPUT if the range exceeds the model or iteration > DEFTSIM_GEN_MAX_ITERATION. */
deftsim_status deftsim_gen_fill(const deftsim_gen *g, uint64_t iteration, uint32_t worker,
                                uint64_t offset, uint64_t count, float *out);

/* The same slice for workers first_worker .. first_worker + nworkers - 1 at once, worker
 * first_worker + k into out[k]: the same bits as nworkers calls of deftsim_gen_fill, but the
 * shared signal is computed once for all of them, which nearly halves the cost per worker. */
deftsim_status deftsim_gen_fill_workers(const deftsim_gen *g, uint64_t iteration,
                                        uint32_t first_worker, uint32_t nworkers, uint64_t offset,
                                        uint64_t count, float *const *out);

/* A run of elements [offset, offset + count) (deftsim_gen_fill_runs). */
typedef struct {
    uint64_t offset;
    uint64_t count;
} deftsim_gen_run;

/* Several slices of the same workers at once, each in place: run r's elements of worker
 * first_worker + k into out[k] + runs[r].offset (out[k] spans the whole gradient). Runs
 * ascending and disjoint. The same bits as deftsim_gen_fill_workers of each run; a layer's
 * scales are computed once for all the runs that lie in it, so many short runs (the entries a
 * pass reads at a sparse index set) cost little more than their elements. */
deftsim_status deftsim_gen_fill_runs(const deftsim_gen *g, uint64_t iteration,
                                     uint32_t first_worker, uint32_t nworkers,
                                     const deftsim_gen_run *runs, size_t nruns,
                                     float *const *out);

/* Fill kernels: the generator starts with the fastest one this CPU runs ("avx512", "avx2",
 * "vector", "reference"); all return the same bits. deftsim_gen_use_kernel selects one by name (for
 * tests and benchmarks; not thread-safe against concurrent fills of the same generator). */
size_t deftsim_gen_kernel_count(void);
const char *deftsim_gen_kernel_name(size_t i);
const char *deftsim_gen_kernel(const deftsim_gen *g);
deftsim_status deftsim_gen_use_kernel(deftsim_gen *g, const char *name);

/* Writes a trace of `iterations` iterations (ids 0 .. iterations-1) for `workers` workers into
 * dir (traces/FORMAT.md); the manifest's provenance records the parameters. */
deftsim_status deftsim_gen_write_trace(const deftsim_gen *g, const char *dir, uint32_t workers,
                                       uint64_t iterations);

/* ---- Element arithmetic, shared with ports (static inline, no libc) ----------------------- */

/* Philox streams: the top byte of counter word 1. */
#define DEFTSIM_GEN_STREAM_NOISE 1u
#define DEFTSIM_GEN_STREAM_SIGNAL 2u
#define DEFTSIM_GEN_STREAM_LAYER 3u
#define DEFTSIM_GEN_STREAM_DRIFT 4u
#define DEFTSIM_GEN_STREAM_FIELD 5u
#define DEFTSIM_GEN_STREAM_WORKER 6u

/* Per-generator constants of the element arithmetic, computed once on the host
 * (deftsim_gen_new) so that every port starts from the same floats. */
typedef struct {
    uint32_t key[2];   /* seed, low word first */
    float nu;          /* Student-t degrees of freedom (unused when gauss) */
    float inv_nu;      /* (float)(1.0 / nu) */
    int gauss;         /* tail == 0 */
    float w_signal;    /* sqrt(signal) * sqrt((nu - 2) / nu) */
    float w_noise;     /* sqrt(1 - signal) * sqrt((nu - 2) / nu) */
    float field_w;     /* (float)(field * ln 10): the field's natural-log width; 0: none */
    float field_c;     /* (float)sqrt(2 W / (e^(2W) - 1)), W = field_w: mean square 1 */
} deftsim_gen_consts;

/* IEEE sqrt is correctly rounded everywhere; a port may substitute its own spelling. */
#ifndef DEFTSIM_GEN_SQRTF
#define DEFTSIM_GEN_SQRTF(x) __builtin_sqrtf(x)
#endif

static inline uint32_t deftsim_gen_f2u(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float deftsim_gen_u2f(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* ln(u) for u = (2 * (w >> 9) + 1) * 2^-24, a uniform value in (0, 1) that is exact in float.
 * Splits u into 2^e * m with m in [sqrt(1/2), sqrt(2)) and sums the atanh series of
 * s = (m - 1) / (m + 1) (|s| < 0.172: five terms reach float precision). */
static inline float deftsim_gen_ln_u(uint32_t w)
{
    float x = (float)(int32_t)(((w >> 9) << 1) | 1u); /* exact odd integer in [1, 2^24) */
    uint32_t bits = deftsim_gen_f2u(x);
    int32_t e = (int32_t)(bits >> 23) - 127 - 24;
    float m = deftsim_gen_u2f((bits & 0x007FFFFFu) | 0x3F800000u);
    int32_t big = m > 1.41421356f;
    m = big ? m * 0.5f : m;
    e += big;
    float s = (m - 1.0f) / (m + 1.0f);
    float s2 = s * s;
    float p = s2 * (0.333333333f + s2 * (0.2f + s2 * (0.142857143f + s2 * 0.111111111f)));
    float ln_m = 2.0f * s + 2.0f * s * p;
    return (float)e * 0.693147181f + ln_m;
}

/* expm1(y) for y in [0, 17]: y = k ln2 + r with |r| <= ln2/2 (two-part ln2 so that r is
 * exact enough), e^r - 1 by its Taylor polynomial, then 2^k (e^r - 1) + (2^k - 1). Both parts
 * are exact or nearly so for k <= 24, and k = 0 returns the polynomial itself, so small y
 * keep full relative precision. */
static inline float deftsim_gen_expm1(float y)
{
    int32_t k = (int32_t)(y * 1.44269504f + 0.5f);
    float kf = (float)k;
    float r = (y - kf * 0.693145752f) - kf * 1.42860677e-06f;
    float p = r * (1.0f + r * (0.5f + r * (0.166666667f + r * (0.0416666667f +
                  r * (0.00833333333f + r * (0.00138888889f + r * (0.000198412698f +
                  r * 2.48015873e-05f)))))));
    float two_k = deftsim_gen_u2f((uint32_t)(k + 127) << 23);
    return two_k * p + (two_k - 1.0f);
}

/* Two unit-free Student-t values from two words, by Bailey's polar method without rejection
 * (Math. Comp. 62, 1994): with W and A uniform, R^2 = nu (W^(-2/nu) - 1) and (R cos 2piA,
 * R sin 2piA) are each t(nu); as nu -> infinity R^2 -> -2 ln W, the Box-Muller transform.
 * The two values are uncorrelated but share R. Word wr drives the radius, wa the angle; the
 * angle's top two bits pick a quadrant and the rest a uniform point in (-pi/4, pi/4), where
 * short Taylor polynomials reach float precision (a constant rotation of every angle by pi/4
 * leaves the distribution unchanged). */
static inline void deftsim_gen_pair(const deftsim_gen_consts *c, uint32_t wr, uint32_t wa,
                                    float *x, float *y)
{
    float lw = -2.0f * deftsim_gen_ln_u(wr); /* -2 ln W, in (0, 33.3] */
    float r2 = c->gauss ? lw : c->nu * deftsim_gen_expm1(lw * c->inv_nu);
    float r = DEFTSIM_GEN_SQRTF(r2);

    uint32_t q = wa >> 30;
    float t = (float)(int32_t)((((wa >> 7) & 0x007FFFFFu) << 1) | 1u) * 5.96046448e-08f;
    float a = (t - 0.5f) * 1.57079633f;
    float a2 = a * a;
    float sn = a + a * a2 * (-0.166666667f + a2 * (0.00833333333f + a2 * (-0.000198412698f +
                   a2 * 2.75573192e-06f)));
    float cs = 1.0f + a2 * (-0.5f + a2 * (0.0416666667f + a2 * (-0.00138888889f +
                  a2 * 2.48015873e-05f)));
    /* Rotate (cs, sn) by q quarter turns: swap on odd q, then flip signs through the sign bit
     * (q = 1: (-sn, cs), 2: (-cs, -sn), 3: (sn, -cs)). */
    uint32_t odd = q & 1u;
    float u = odd ? sn : cs;
    float v = odd ? cs : sn;
    u = deftsim_gen_u2f(deftsim_gen_f2u(u) ^ (((q + 1u) & 2u) << 30));
    v = deftsim_gen_u2f(deftsim_gen_f2u(v) ^ ((q & 2u) << 30));
    *x = r * u;
    *y = r * v;
}

/* Element layout. Elements come in groups of 32; group g of one stream takes the 8 Philox calls
 * with call index 8g + lane (lane 0..7) and gives element 32g + 8*word + lane the word-th
 * output word of call (8g + lane). Words 0 and 1 form one Bailey pair (radius, angle): the
 * cosine value goes to word 0's element, the sine value to word 1's; words 2 and 3 likewise.
 * So eight consecutive elements come from eight independent calls (a vector lane each), and
 * the two values that share a radius lie 8 elements apart. The call index is addressed by
 * counter words 0 and 1 (its top byte holds the stream), word 2 is the worker (0 for the
 * shared signal) and word 3 the iteration. */
#define DEFTSIM_GEN_GROUP 32u
#define DEFTSIM_GEN_LANES 8u

static inline void deftsim_gen_words(const deftsim_gen_consts *c, uint64_t call, uint32_t stream,
                                     uint32_t worker, uint32_t iteration, uint32_t w[4])
{
    deftsim_philox4x32_10_words((uint32_t)call, (uint32_t)(call >> 32) | (stream << 24), worker,
                                iteration, c->key[0], c->key[1], w);
}

/* Element `index` of one stream, unit-free (before weights and layer scale). */
static inline float deftsim_gen_stream_value(const deftsim_gen_consts *c, uint64_t index,
                                             uint32_t stream, uint32_t worker, uint32_t iteration)
{
    uint32_t w[4];
    uint32_t j = (uint32_t)(index % DEFTSIM_GEN_GROUP);
    uint32_t word = j / DEFTSIM_GEN_LANES, lane = j % DEFTSIM_GEN_LANES;
    uint64_t call = (index / DEFTSIM_GEN_GROUP) * DEFTSIM_GEN_LANES + lane;
    deftsim_gen_words(c, call, stream, worker, iteration, w);
    float x, y;
    uint32_t first = word & 2u;
    deftsim_gen_pair(c, w[first], w[first + 1], &x, &y);
    return (word & 1u) ? y : x;
}

/* The magnitude field's factor from one word x of the field stream: u = (2 (x >> 9) + 1) 2^-24,
 * then (expm1(field_w * u) + 1) * field_c, log-uniform over field_w nats, mean square 1. */
static inline float deftsim_gen_field_factor(const deftsim_gen_consts *c, uint32_t x)
{
    float u = (float)(int32_t)(((x >> 9) << 1) | 1u) * 5.96046448e-08f;
    return (deftsim_gen_expm1(c->field_w * u) + 1.0f) * c->field_c;
}

/* The magnitude field's factor of element `index` (field_w > 0): the factor of word `word` of
 * the call that the element layout gives it, in the field stream with counter words 2 and 3
 * zero (the same for every worker and iteration). */
static inline float deftsim_gen_field_value(const deftsim_gen_consts *c, uint64_t index)
{
    uint32_t w[4];
    uint32_t j = (uint32_t)(index % DEFTSIM_GEN_GROUP);
    uint32_t word = j / DEFTSIM_GEN_LANES, lane = j % DEFTSIM_GEN_LANES;
    uint64_t call = (index / DEFTSIM_GEN_GROUP) * DEFTSIM_GEN_LANES + lane;
    deftsim_gen_words(c, call, DEFTSIM_GEN_STREAM_FIELD, 0, 0, w);
    return deftsim_gen_field_factor(c, w[word]);
}

/* Reference for one element: (w_signal * S + w_noise * N) * scale, in that order, with
 * scale = layer_scale, or field * layer_scale when the field is on (field_w > 0).
 * layer_scale is the worker's (deftsim_gen_worker_scale); c the layer's constants
 * (deftsim_gen_layer_consts). deftsim_gen_fill returns the same bits. */
static inline float deftsim_gen_element(const deftsim_gen_consts *c, uint64_t index,
                                        uint32_t worker, uint32_t iteration, float layer_scale)
{
    float s = deftsim_gen_stream_value(c, index, DEFTSIM_GEN_STREAM_SIGNAL, 0, iteration);
    float n = deftsim_gen_stream_value(c, index, DEFTSIM_GEN_STREAM_NOISE, worker, iteration);
    float scale = c->field_w != 0.0f ? deftsim_gen_field_value(c, index) * layer_scale
                                     : layer_scale;
    return (c->w_signal * s + c->w_noise * n) * scale;
}

/* The constants of a generator (its global signal, tail and field), for ports and for
 * checking fill against the reference. */
const deftsim_gen_consts *deftsim_gen_get_consts(const deftsim_gen *g);

/* Layer L's constants: the global ones unless its kind has its own signal, tail or field. */
const deftsim_gen_consts *deftsim_gen_layer_consts(const deftsim_gen *g, size_t layer);

#endif
