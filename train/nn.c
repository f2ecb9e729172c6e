/* nn.c - the MLP and the CNN of deftsim_nn.h: forward, backward, initialisation.
 *
 * Layouts are row-major: a minibatch of activations is [B][features], a convolution's
 * activations are [B][channels][rows][cols] (NCHW). A linear layer computes Y = X W^T + b
 * with W stored [out][in], so its three products (forward, weight gradient, input gradient)
 * are one GEMM each over the whole minibatch. A convolution is im2col + one GEMM per image
 * (for the 14x14 layer of the default CNN a 64 x 196 x 288 product, large enough for
 * OpenBLAS to run near its peak); the backward pass rebuilds the image's columns instead of
 * keeping B of them. */
#include "deftsim_nn.h"

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deftsim_philox.h"

/* Matrix products call OpenBLAS through its Fortran entry point sgemm_, not cblas_sgemm:
 * libdeftsim also links GSL, whose pkg-config pulls in GSL's own reference CBLAS
 * (libgslcblas) ahead of OpenBLAS, and the dynamic linker then binds cblas_sgemm to the
 * first library that defines it - the reference loops, ten times slower here. No other
 * library defines sgemm_. OpenBLAS implements it in C and reads no hidden string lengths. */
void sgemm_(const char *transa, const char *transb, const int *m, const int *n, const int *k,
            const float *alpha, const float *a, const int *lda, const float *b, const int *ldb,
            const float *beta, float *c, const int *ldc);
void openblas_set_num_threads(int num_threads);

/* Row-major C[M][N] = alpha op(A) op(B) + beta C, with op(A) M x K and op(B) K x N. A
 * row-major matrix is its column-major transpose, so this is the column-major product
 * C^T = op(B)^T op(A)^T: the operands swap places. */
static void gemm(int transA, int transB, int M, int N, int K, float alpha, const float *A, int lda,
                 const float *B, int ldb, float beta, float *C, int ldc)
{
    const char ta = transA ? 'T' : 'N', tb = transB ? 'T' : 'N';
    sgemm_(&tb, &ta, &N, &M, &K, &alpha, B, &ldb, A, &lda, &beta, C, &ldc);
}
#define NoTrans 0
#define Trans 1

#define MAX_LAYERS 8

struct deftsim_nn {
    deftsim_nn_spec spec;
    uint32_t max_batch;
    deftsim_model *model;
    /* Offsets of each weight and bias in the parameter vector, in layer order. */
    uint64_t w_off[4], b_off[4];
    uint32_t nlin;        /* fully connected layers */
    /* Sizes. */
    uint32_t in_px;       /* in_rows * in_cols */
    uint32_t r1, c1;      /* cnn: conv1 output = input size */
    uint32_t r2, c2;      /* cnn: after pool 1 = conv2 size */
    uint32_t r3, c3;      /* cnn: after pool 2 */
    uint32_t flat;        /* input width of the first fully connected layer */
    /* Activations (max_batch rows each). */
    float *a1, *p1, *a2, *p2; /* cnn: conv1 out, pool1 out, conv2 out, pool2 out (= flat) */
    uint32_t *arg1, *arg2;    /* cnn: the input index of each pooled maximum */
    float *h[3];              /* outputs of the fully connected layers (the last: logits) */
    float *cols, *dcols;      /* cnn: one image's im2col matrix and its gradient */
    /* Gradients of activations. */
    float *dh[3], *dp2, *da2, *dp1, *da1;
};

void deftsim_nn_spec_default(deftsim_nn_kind kind, deftsim_nn_spec *s)
{
    memset(s, 0, sizeof *s);
    s->kind = kind;
    s->in_rows = s->in_cols = 28;
    s->classes = 10;
    if (kind == DEFTSIM_NN_MLP) {
        s->hidden[0] = 512;
        s->hidden[1] = 256;
    } else {
        s->hidden[0] = 128;
        s->channels[0] = 32;
        s->channels[1] = 64;
        s->kernel = 3;
    }
}

static const char *const kind_names[] = {"mlp", "cnn"};

const char *deftsim_nn_kind_name(deftsim_nn_kind k)
{
    return (unsigned)k < DEFTSIM_NN_KIND_COUNT ? kind_names[k] : "?";
}

int deftsim_nn_kind_from_name(const char *name, deftsim_nn_kind *out)
{
    for (int i = 0; i < DEFTSIM_NN_KIND_COUNT; i++)
        if (!strcmp(name, kind_names[i])) {
            *out = (deftsim_nn_kind)i;
            return 0;
        }
    return -1;
}

void deftsim_nn_blas_threads(int threads)
{
    if (threads < 1) threads = 1;
    if (threads > 256) threads = 256;
    openblas_set_num_threads(threads);
}

const deftsim_model *deftsim_nn_model(const deftsim_nn *net) { return net->model; }

void deftsim_nn_free(deftsim_nn *net)
{
    if (!net) return;
    deftsim_model_free(net->model);
    float *bufs[] = {net->a1, net->p1, net->a2, net->p2, net->h[0], net->h[1], net->h[2],
                     net->cols, net->dcols, net->dh[0], net->dh[1], net->dh[2], net->dp2,
                     net->da2, net->dp1, net->da1};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    free(net->arg1);
    free(net->arg2);
    free(net);
}

static deftsim_status check_spec(const deftsim_nn_spec *s, uint32_t max_batch)
{
#define BAD(...) return deftsim_error_set(DEFTSIM_E_INPUT, __VA_ARGS__)
    /* Limits keep every size product far inside 32 bits per image and size_t overall. */
    const uint32_t LIM = 65536;
    if ((unsigned)s->kind >= DEFTSIM_NN_KIND_COUNT) BAD("network: kind %d is not mlp or cnn", (int)s->kind);
    if (s->in_rows == 0 || s->in_cols == 0 || s->in_rows > 1024 || s->in_cols > 1024)
        BAD("network: input %u x %u: each side must be in [1, 1024]", s->in_rows, s->in_cols);
    if (s->classes < 2 || s->classes > 254) BAD("network: classes %u: must be in [2, 254]", s->classes);
    if (s->hidden[0] == 0 || s->hidden[0] > LIM) BAD("network: hidden[0] %u: must be in [1, %u]", s->hidden[0], LIM);
    if (s->kind == DEFTSIM_NN_MLP && (s->hidden[1] == 0 || s->hidden[1] > LIM))
        BAD("network: hidden[1] %u: must be in [1, %u]", s->hidden[1], LIM);
    if (s->kind == DEFTSIM_NN_CNN) {
        if (s->in_rows % 4 || s->in_cols % 4)
            BAD("network: input %u x %u: the CNN's two 2x2 poolings need multiples of 4",
                s->in_rows, s->in_cols);
        if (s->channels[0] == 0 || s->channels[0] > 1024 || s->channels[1] == 0 || s->channels[1] > 1024)
            BAD("network: channels %u, %u: each must be in [1, 1024]", s->channels[0], s->channels[1]);
        if (s->kernel % 2 == 0 || s->kernel > 15)
            BAD("network: kernel %u: must be odd and at most 15", s->kernel);
    }
    if (max_batch == 0 || max_batch > 65536) BAD("network: max_batch %u: must be in [1, 65536]", max_batch);
    return DEFTSIM_OK;
#undef BAD
}

/* Appends one CSV row of the model table. */
static void table_row(char *buf, size_t cap, size_t *o, size_t *idx, const char *name,
                      const uint64_t *shape, int ndim)
{
    uint64_t numel = 1;
    *o += (size_t)snprintf(buf + *o, cap - *o, "%zu,%s,", (*idx)++, name);
    for (int d = 0; d < ndim; d++) {
        *o += (size_t)snprintf(buf + *o, cap - *o, d ? "x%" PRIu64 : "%" PRIu64, shape[d]);
        numel *= shape[d];
    }
    *o += (size_t)snprintf(buf + *o, cap - *o, ",%" PRIu64 "\n", numel);
}

static int is_default(const deftsim_nn_spec *s)
{
    deftsim_nn_spec d;
    deftsim_nn_spec_default(s->kind, &d);
    return !memcmp(&d, s, sizeof d);
}

static deftsim_status build_table(deftsim_nn *net)
{
    const deftsim_nn_spec *s = &net->spec;
    char buf[2048];
    size_t o = 0, idx = 0;
    o += (size_t)snprintf(buf, sizeof buf, "index,name,shape,numel\n");
    char nm[32];
    if (s->kind == DEFTSIM_NN_CNN) {
        uint64_t k = s->kernel;
        uint64_t w1[4] = {s->channels[0], 1, k, k}, b1[1] = {s->channels[0]};
        uint64_t w2[4] = {s->channels[1], s->channels[0], k, k}, b2[1] = {s->channels[1]};
        table_row(buf, sizeof buf, &o, &idx, "conv1.weight", w1, 4);
        table_row(buf, sizeof buf, &o, &idx, "conv1.bias", b1, 1);
        table_row(buf, sizeof buf, &o, &idx, "conv2.weight", w2, 4);
        table_row(buf, sizeof buf, &o, &idx, "conv2.bias", b2, 1);
    }
    uint32_t in = net->flat;
    for (uint32_t l = 0; l < net->nlin; l++) {
        uint32_t out = l + 1 == net->nlin ? s->classes : s->hidden[l];
        uint64_t w[2] = {out, in}, b[1] = {out};
        snprintf(nm, sizeof nm, "fc%u.weight", l + 1);
        table_row(buf, sizeof buf, &o, &idx, nm, w, 2);
        snprintf(nm, sizeof nm, "fc%u.bias", l + 1);
        table_row(buf, sizeof buf, &o, &idx, nm, b, 1);
        in = out;
    }
    const char *name = is_default(s) ? (s->kind == DEFTSIM_NN_MLP ? "fmnist_mlp" : "fmnist_cnn")
                                     : deftsim_nn_kind_name(s->kind);
    deftsim_status st = deftsim_model_parse_csv(buf, o, "network table", name, &net->model);
    if (st) return deftsim_error_wrap(DEFTSIM_E_INTERNAL, "network");
    /* Weight/bias offsets: conv layers first (cnn), then the linear ones. */
    size_t L = 0;
    size_t nconv = s->kind == DEFTSIM_NN_CNN ? 2 : 0;
    for (size_t c = 0; c < nconv; c++, L += 2) {
        net->w_off[c] = net->model->layers[L].offset;
        net->b_off[c] = net->model->layers[L + 1].offset;
    }
    for (uint32_t l = 0; l < net->nlin; l++, L += 2) {
        net->w_off[nconv + l] = net->model->layers[L].offset;
        net->b_off[nconv + l] = net->model->layers[L + 1].offset;
    }
    return DEFTSIM_OK;
}

static float *fbuf(size_t n, int *fail)
{
    float *p = malloc((n ? n : 1) * sizeof *p);
    if (!p) *fail = 1;
    return p;
}

deftsim_status deftsim_nn_new(const deftsim_nn_spec *spec, uint32_t max_batch, deftsim_nn **out)
{
    *out = NULL;
    deftsim_status st = check_spec(spec, max_batch);
    if (st) return st;
    deftsim_nn *net = calloc(1, sizeof *net);
    if (!net) return deftsim_error_nomem("network");
    net->spec = *spec;
    net->max_batch = max_batch;
    const deftsim_nn_spec *s = &net->spec;
    net->in_px = s->in_rows * s->in_cols;
    size_t B = max_batch;
    int fail = 0;
    if (s->kind == DEFTSIM_NN_MLP) {
        net->nlin = 3;
        net->flat = net->in_px;
    } else {
        net->nlin = 2;
        net->r1 = s->in_rows, net->c1 = s->in_cols;
        net->r2 = net->r1 / 2, net->c2 = net->c1 / 2;
        net->r3 = net->r2 / 2, net->c3 = net->c2 / 2;
        net->flat = s->channels[1] * net->r3 * net->c3;
        size_t A1 = (size_t)s->channels[0] * net->r1 * net->c1;
        size_t P1 = (size_t)s->channels[0] * net->r2 * net->c2;
        size_t A2 = (size_t)s->channels[1] * net->r2 * net->c2;
        size_t KK = (size_t)s->kernel * s->kernel;
        size_t cols = KK * net->r1 * net->c1;
        if (KK * s->channels[0] * net->r2 * net->c2 > cols) cols = KK * s->channels[0] * net->r2 * net->c2;
        net->a1 = fbuf(B * A1, &fail);
        net->da1 = fbuf(B * A1, &fail);
        net->p1 = fbuf(B * P1, &fail);
        net->dp1 = fbuf(B * P1, &fail);
        net->a2 = fbuf(B * A2, &fail);
        net->da2 = fbuf(B * A2, &fail);
        net->p2 = fbuf(B * net->flat, &fail);
        net->dp2 = fbuf(B * net->flat, &fail);
        net->cols = fbuf(cols, &fail);
        net->dcols = fbuf(cols, &fail);
        net->arg1 = malloc(B * P1 * sizeof *net->arg1);
        net->arg2 = malloc(B * net->flat * sizeof *net->arg2);
        if (!net->arg1 || !net->arg2) fail = 1;
    }
    for (uint32_t l = 0; l < net->nlin; l++) {
        uint32_t w = l + 1 == net->nlin ? s->classes : s->hidden[l];
        net->h[l] = fbuf(B * w, &fail);
        net->dh[l] = fbuf(B * w, &fail);
    }
    if (fail) {
        deftsim_nn_free(net);
        return deftsim_error_nomem("network: a minibatch of %u", max_batch);
    }
    if ((st = build_table(net))) {
        deftsim_nn_free(net);
        return st;
    }
    *out = net;
    return DEFTSIM_OK;
}

double deftsim_nn_flops_per_image(const deftsim_nn *net)
{
    const deftsim_nn_spec *s = &net->spec;
    double macs = 0;
    if (s->kind == DEFTSIM_NN_CNN) {
        double KK = (double)s->kernel * s->kernel;
        macs += (double)s->channels[0] * KK * net->r1 * net->c1;
        macs += (double)s->channels[1] * s->channels[0] * KK * net->r2 * net->c2;
    }
    uint32_t in = net->flat;
    for (uint32_t l = 0; l < net->nlin; l++) {
        uint32_t out = l + 1 == net->nlin ? s->classes : s->hidden[l];
        macs += (double)in * out;
        in = out;
    }
    /* Forward, weight gradient, input gradient: three products of the same size. */
    return 2.0 * 3.0 * macs;
}

/* ---- initialisation ------------------------------------------------------------------------ */

/* Philox stream for initial weights ("INIT" in the second counter word's top bits). */
#define INIT_STREAM 0x494E0000u

void deftsim_nn_init(const deftsim_nn *net, uint64_t seed, float *params)
{
    const deftsim_model *m = net->model;
    /* fan_in of a layer = numel of its weight / out features; the bias uses its weight's. */
    for (size_t L = 0; L < m->nlayers; L++) {
        const deftsim_layer *ly = &m->layers[L];
        const deftsim_layer *w = ly->ndim == 1 ? &m->layers[L - 1] : ly;
        double fan_in = (double)w->numel / (double)w->shape[0];
        float bound = (float)(1.0 / sqrt(fan_in));
        for (uint64_t i = 0; i < ly->numel; i += 4) {
            uint64_t e = ly->offset + i;
            uint32_t r[4];
            /* One call per group of four, addressed by the group's first element. */
            deftsim_philox4x32_10_words((uint32_t)e, INIT_STREAM | (uint32_t)((e >> 32) & 0xFFFF),
                                        0, 0, (uint32_t)seed, (uint32_t)(seed >> 32), r);
            for (int j = 0; j < 4 && i + (uint64_t)j < ly->numel; j++) {
                float u = (float)(r[j] >> 8) * (1.0f / 16777216.0f); /* [0, 1) */
                params[e + (uint64_t)j] = (2.0f * u - 1.0f) * bound;
            }
        }
    }
}

/* ---- layers -------------------------------------------------------------------------------- */

/* Y[B][out] = X[B][in] W^T + b, then ReLU when relu is set. */
static void linear_fwd(const float *X, const float *W, const float *b, uint32_t B, uint32_t in,
                       uint32_t out, float *Y, int relu)
{
    gemm(NoTrans, Trans, (int)B, (int)out, (int)in, 1.0f, X,
                (int)in, W, (int)in, 0.0f, Y, (int)out);
    for (uint32_t r = 0; r < B; r++) {
        float *y = Y + (size_t)r * out;
        for (uint32_t o = 0; o < out; o++) {
            float v = y[o] + b[o];
            y[o] = relu && v < 0.0f ? 0.0f : v;
        }
    }
}

/* From dY[B][out]: dW = dY^T X, db = column sums of dY, and dX = dY W when dX is non-NULL. */
static void linear_bwd(const float *X, const float *W, const float *dY, uint32_t B, uint32_t in,
                       uint32_t out, float *dW, float *db, float *dX)
{
    gemm(Trans, NoTrans, (int)out, (int)in, (int)B, 1.0f, dY,
                (int)out, X, (int)in, 0.0f, dW, (int)in);
    for (uint32_t o = 0; o < out; o++) db[o] = 0.0f;
    for (uint32_t r = 0; r < B; r++)
        for (uint32_t o = 0; o < out; o++) db[o] += dY[(size_t)r * out + o];
    if (dX)
        gemm(NoTrans, NoTrans, (int)B, (int)in, (int)out, 1.0f, dY,
                    (int)out, W, (int)in, 0.0f, dX, (int)in);
}

/* dY *= (Y > 0): the ReLU's backward pass, from its output. */
static void relu_bwd(const float *Y, float *dY, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!(Y[i] > 0.0f)) dY[i] = 0.0f;
}

/* cols[(c k + ki) k + kj][r C + q] = in[c][r + ki - pad][q + kj - pad], 0 outside. */
static void im2col(const float *in, uint32_t C, uint32_t R, uint32_t Q, uint32_t k, float *cols)
{
    int pad = (int)k / 2;
    size_t RQ = (size_t)R * Q;
    for (uint32_t c = 0; c < C; c++)
        for (uint32_t ki = 0; ki < k; ki++)
            for (uint32_t kj = 0; kj < k; kj++) {
                float *row = cols + ((size_t)(c * k + ki) * k + kj) * RQ;
                const float *plane = in + (size_t)c * RQ;
                for (uint32_t r = 0; r < R; r++) {
                    int sr = (int)r + (int)ki - pad;
                    float *dst = row + (size_t)r * Q;
                    if (sr < 0 || sr >= (int)R) {
                        memset(dst, 0, Q * sizeof *dst);
                        continue;
                    }
                    const float *src = plane + (size_t)sr * Q;
                    for (uint32_t q = 0; q < Q; q++) {
                        int sq = (int)q + (int)kj - pad;
                        dst[q] = sq < 0 || sq >= (int)Q ? 0.0f : src[sq];
                    }
                }
            }
}

/* The adjoint of im2col: din[c][...] += dcols[...] (din is not cleared first). */
static void col2im(const float *dcols, uint32_t C, uint32_t R, uint32_t Q, uint32_t k, float *din)
{
    int pad = (int)k / 2;
    size_t RQ = (size_t)R * Q;
    for (uint32_t c = 0; c < C; c++)
        for (uint32_t ki = 0; ki < k; ki++)
            for (uint32_t kj = 0; kj < k; kj++) {
                const float *row = dcols + ((size_t)(c * k + ki) * k + kj) * RQ;
                float *plane = din + (size_t)c * RQ;
                for (uint32_t r = 0; r < R; r++) {
                    int sr = (int)r + (int)ki - pad;
                    if (sr < 0 || sr >= (int)R) continue;
                    const float *src = row + (size_t)r * Q;
                    float *dst = plane + (size_t)sr * Q;
                    for (uint32_t q = 0; q < Q; q++) {
                        int sq = (int)q + (int)kj - pad;
                        if (sq >= 0 && sq < (int)Q) dst[sq] += src[q];
                    }
                }
            }
}

/* One image: out[Cout][R Q] = ReLU(W[Cout][Cin k k] cols + b). */
static void conv_fwd(const float *in, uint32_t Cin, uint32_t R, uint32_t Q, uint32_t k,
                     const float *W, const float *b, uint32_t Cout, float *cols, float *out)
{
    int K = (int)(Cin * k * k), N = (int)(R * Q);
    im2col(in, Cin, R, Q, k, cols);
    gemm(NoTrans, NoTrans, (int)Cout, N, K, 1.0f, W, K, cols, N,
                0.0f, out, N);
    for (uint32_t c = 0; c < Cout; c++) {
        float *o = out + (size_t)c * (size_t)N;
        for (int i = 0; i < N; i++) {
            float v = o[i] + b[c];
            o[i] = v < 0.0f ? 0.0f : v;
        }
    }
}

/* One image, dout already through the ReLU: dW += dout cols^T, db += row sums of dout, and
 * din = col2im(W^T dout) when din is non-NULL. */
static void conv_bwd(const float *in, uint32_t Cin, uint32_t R, uint32_t Q, uint32_t k,
                     const float *W, uint32_t Cout, const float *dout, float *cols, float *dcols,
                     float *dW, float *db, float *din)
{
    int K = (int)(Cin * k * k), N = (int)(R * Q);
    im2col(in, Cin, R, Q, k, cols);
    gemm(NoTrans, Trans, (int)Cout, K, N, 1.0f, dout, N, cols, N,
                1.0f, dW, K);
    for (uint32_t c = 0; c < Cout; c++) {
        const float *d = dout + (size_t)c * (size_t)N;
        float s = 0.0f;
        for (int i = 0; i < N; i++) s += d[i];
        db[c] += s;
    }
    if (!din) return;
    gemm(Trans, NoTrans, K, N, (int)Cout, 1.0f, W, K, dout, N, 0.0f,
                dcols, N);
    memset(din, 0, (size_t)Cin * (size_t)N * sizeof *din);
    col2im(dcols, Cin, R, Q, k, din);
}

/* 2x2 max-pooling with stride 2 of C planes of R x Q; arg keeps each maximum's input index
 * (the first of equal values, so the backward pass is deterministic). */
static void pool_fwd(const float *in, uint32_t C, uint32_t R, uint32_t Q, float *out, uint32_t *arg)
{
    uint32_t R2 = R / 2, Q2 = Q / 2;
    for (uint32_t c = 0; c < C; c++) {
        const float *p = in + (size_t)c * R * Q;
        for (uint32_t r = 0; r < R2; r++)
            for (uint32_t q = 0; q < Q2; q++) {
                uint32_t i0 = (2 * r) * Q + 2 * q;
                uint32_t cand[4] = {i0, i0 + 1, i0 + Q, i0 + Q + 1};
                uint32_t best = cand[0];
                for (int j = 1; j < 4; j++)
                    if (p[cand[j]] > p[best]) best = cand[j];
                size_t o = ((size_t)c * R2 + r) * Q2 + q;
                out[o] = p[best];
                arg[o] = c * R * Q + best;
            }
    }
}

static void pool_bwd(const float *dout, const uint32_t *arg, size_t nout, size_t nin, float *din)
{
    memset(din, 0, nin * sizeof *din);
    for (size_t o = 0; o < nout; o++) din[arg[o]] += dout[o];
}

/* ---- the whole network --------------------------------------------------------------------- */

static deftsim_status check_batch(const deftsim_nn *net, const uint8_t *y, uint32_t B)
{
    if (B == 0 || B > net->max_batch)
        return deftsim_error_set(DEFTSIM_E_INPUT, "network: minibatch of %u images, expected 1 to %u",
                                 B, net->max_batch);
    for (uint32_t i = 0; i < B; i++)
        if (y[i] >= net->spec.classes)
            return deftsim_error_set(DEFTSIM_E_INPUT, "network: image %u of the minibatch has label "
                                     "%u, but the network has %u classes", i, y[i], net->spec.classes);
    return DEFTSIM_OK;
}

/* Runs the forward pass; the logits end in h[nlin - 1]. */
static void forward(deftsim_nn *net, const float *params, const float *x, uint32_t B)
{
    const deftsim_nn_spec *s = &net->spec;
    const float *in = x;
    size_t li = 0;
    if (s->kind == DEFTSIM_NN_CNN) {
        uint32_t C1 = s->channels[0], C2 = s->channels[1], k = s->kernel;
        size_t A1 = (size_t)C1 * net->r1 * net->c1, P1 = (size_t)C1 * net->r2 * net->c2;
        size_t A2 = (size_t)C2 * net->r2 * net->c2;
        for (uint32_t b = 0; b < B; b++) {
            conv_fwd(x + (size_t)b * net->in_px, 1, net->r1, net->c1, k, params + net->w_off[0],
                     params + net->b_off[0], C1, net->cols, net->a1 + b * A1);
            pool_fwd(net->a1 + b * A1, C1, net->r1, net->c1, net->p1 + b * P1, net->arg1 + b * P1);
            conv_fwd(net->p1 + b * P1, C1, net->r2, net->c2, k, params + net->w_off[1],
                     params + net->b_off[1], C2, net->cols, net->a2 + b * A2);
            pool_fwd(net->a2 + b * A2, C2, net->r2, net->c2, net->p2 + (size_t)b * net->flat,
                     net->arg2 + (size_t)b * net->flat);
        }
        in = net->p2;
        li = 2;
    }
    uint32_t inw = net->flat;
    for (uint32_t l = 0; l < net->nlin; l++) {
        int last = l + 1 == net->nlin;
        uint32_t out = last ? s->classes : s->hidden[l];
        linear_fwd(in, params + net->w_off[li + l], params + net->b_off[li + l], B, inw, out,
                   net->h[l], !last);
        in = net->h[l];
        inw = out;
    }
}

/* Cross-entropy of each image from the logits (log-sum-exp with the maximum taken out, in
 * double); when dlogits is non-NULL it receives (softmax - onehot) * scale. */
static void softmax_xent(const float *logits, const uint8_t *y, uint32_t B, uint32_t K,
                         double *loss_sum, uint32_t *correct, float *dlogits, float scale)
{
    double sum = 0;
    uint32_t ok = 0;
    for (uint32_t b = 0; b < B; b++) {
        const float *z = logits + (size_t)b * K;
        uint32_t arg = 0;
        for (uint32_t j = 1; j < K; j++)
            if (z[j] > z[arg]) arg = j;
        ok += arg == y[b];
        double mx = z[arg], se = 0;
        for (uint32_t j = 0; j < K; j++) se += exp((double)z[j] - mx);
        double lse = mx + log(se);
        sum += lse - (double)z[y[b]];
        if (dlogits) {
            float *d = dlogits + (size_t)b * K;
            for (uint32_t j = 0; j < K; j++) {
                double p = exp((double)z[j] - lse);
                d[j] = (float)((p - (j == y[b] ? 1.0 : 0.0)) * scale);
            }
        }
    }
    if (loss_sum) *loss_sum = sum;
    if (correct) *correct = ok;
}

deftsim_status deftsim_nn_eval(deftsim_nn *net, const float *params, const float *x,
                               const uint8_t *y, uint32_t B, double *loss_sum, uint32_t *correct)
{
    deftsim_status st = check_batch(net, y, B);
    if (st) return st;
    forward(net, params, x, B);
    softmax_xent(net->h[net->nlin - 1], y, B, net->spec.classes, loss_sum, correct, NULL, 0);
    return DEFTSIM_OK;
}

deftsim_status deftsim_nn_grad(deftsim_nn *net, const float *params, const float *x,
                               const uint8_t *y, uint32_t B, float *grad, double *loss,
                               uint32_t *correct)
{
    deftsim_status st = check_batch(net, y, B);
    if (st) return st;
    const deftsim_nn_spec *s = &net->spec;
    forward(net, params, x, B);
    double lsum;
    uint32_t L = net->nlin;
    softmax_xent(net->h[L - 1], y, B, s->classes, &lsum, correct, net->dh[L - 1], 1.0f / (float)B);
    if (loss) *loss = lsum / B;

    size_t li = s->kind == DEFTSIM_NN_CNN ? 2 : 0;
    /* Fully connected layers, last to first; dh[l] is the gradient at layer l's output. */
    for (uint32_t l = L; l-- > 0;) {
        uint32_t out = l + 1 == L ? s->classes : s->hidden[l];
        uint32_t in = l ? s->hidden[l - 1] : net->flat;
        const float *X = l ? net->h[l - 1] : (s->kind == DEFTSIM_NN_CNN ? net->p2 : x);
        float *dX = l ? net->dh[l - 1] : (s->kind == DEFTSIM_NN_CNN ? net->dp2 : NULL);
        linear_bwd(X, params + net->w_off[li + l], net->dh[l], B, in, out, grad + net->w_off[li + l],
                   grad + net->b_off[li + l], dX);
        if (l) relu_bwd(net->h[l - 1], net->dh[l - 1], (size_t)B * in);
    }
    if (s->kind != DEFTSIM_NN_CNN) return DEFTSIM_OK;

    uint32_t C1 = s->channels[0], C2 = s->channels[1], k = s->kernel;
    size_t A1 = (size_t)C1 * net->r1 * net->c1, P1 = (size_t)C1 * net->r2 * net->c2;
    size_t A2 = (size_t)C2 * net->r2 * net->c2;
    float *dW1 = grad + net->w_off[0], *db1 = grad + net->b_off[0];
    float *dW2 = grad + net->w_off[1], *db2 = grad + net->b_off[1];
    memset(dW1, 0, (size_t)C1 * k * k * sizeof *dW1);
    memset(db1, 0, C1 * sizeof *db1);
    memset(dW2, 0, (size_t)C2 * C1 * k * k * sizeof *dW2);
    memset(db2, 0, C2 * sizeof *db2);
    for (uint32_t b = 0; b < B; b++) {
        float *da2 = net->da2 + b * A2, *dp1 = net->dp1 + b * P1, *da1 = net->da1 + b * A1;
        pool_bwd(net->dp2 + (size_t)b * net->flat, net->arg2 + (size_t)b * net->flat, net->flat,
                 A2, da2);
        relu_bwd(net->a2 + b * A2, da2, A2);
        conv_bwd(net->p1 + b * P1, C1, net->r2, net->c2, k, params + net->w_off[1], C2, da2,
                 net->cols, net->dcols, dW2, db2, dp1);
        pool_bwd(dp1, net->arg1 + b * P1, P1, A1, da1);
        relu_bwd(net->a1 + b * A1, da1, A1);
        conv_bwd(x + (size_t)b * net->in_px, 1, net->r1, net->c1, k, params + net->w_off[0], C1,
                 da1, net->cols, net->dcols, dW1, db1, NULL);
    }
    return DEFTSIM_OK;
}
