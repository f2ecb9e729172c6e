/* sp_powersgd.c - PowerSGD (Vogels, Karimireddy, Jaggi, NeurIPS 2019) as PyTorch's DDP
 * communication hook runs it (torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook with
 * its PowerSGDState options), docs/SPARSIFIERS.md ("powersgd").
 *
 * The whole gradient is one bucket. Every tensor is seen as the matrix view(shape[0], -1); with
 * r = min(rows, cols, rank) it is compressed when (rows + cols) r * min_compression_rate <
 * rows cols, else it joins the uncompressed tensors (with the default rate 2, every 1-D tensor
 * does). Iterations t < start_iter run one plain allreduce of each worker's accumulator / P.
 * From start_iter on, one step:
 *   Q: random normal (from the scenario's seed, the iteration and the layer) on the first
 *      compressed step or on every step without warm start, else the previous step's Q;
 *      orthogonalised (Gram-Schmidt for r <= 2, LAPACK's Householder QR above, as torch);
 *   P_w = M_w Q per worker; allreduce of the uncompressed elements (then / P), allreduce of
 *   the P_w (sum); P orthogonalised; Q_w = M_w^T P; allreduce of the Q_w, then / P;
 *   aggregate M = P Q^T; the new residual is acc_w - aggregate (the uncompressed tensors too:
 *   the hook's error is its input less what it returns), or 0 without error feedback.
 * The matrix products run on OpenBLAS (sgemm_, as train/nn.c, and sgeqrf_/sorgqr_); the
 * accumulators must be host memory. In spread mode each rank runs its own workers and every
 * sum over workers is a chain across the ranks' blocks (deftsim_team_chain_*), so that it adds
 * in worker order as one process does. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sp_internal.h"

/* Its options, by position in its table (psgd_options below): PowerSGDState's. */
enum { OPT_RANK, OPT_START, OPT_RATE, OPT_EF, OPT_WARM, OPT_EPS, OPT_BATCH };
/* Its result columns, by position (psgd_columns below): r->extra[COL_*]. */
enum { COL_RANK, COL_RATIO };

/* OpenBLAS's Fortran entry points (train/nn.c says why not cblas_sgemm). */
void sgemm_(const char *transa, const char *transb, const int *m, const int *n, const int *k,
            const float *alpha, const float *a, const int *lda, const float *b, const int *ldb,
            const float *beta, float *c, const int *ldc);
void sgeqrf_(const int *m, const int *n, float *a, const int *lda, float *tau, float *work,
             const int *lwork, int *info);
void sorgqr_(const int *m, const int *n, const int *k, float *a, const int *lda,
             const float *tau, float *work, const int *lwork, int *info);

/* Row-major C[M][N] = op(A) op(B) (+ C when acc), as the column-major C^T = op(B)^T op(A)^T. */
static void gemm(int ta, int tb, int M, int N, int K, const float *A, int lda, const float *B,
                 int ldb, float *C, int ldc)
{
    const char a = ta ? 'T' : 'N', b = tb ? 'T' : 'N';
    const float one = 1, zero = 0;
    sgemm_(&b, &a, &N, &M, &K, &one, B, &ldb, A, &lda, &zero, C, &ldc);
}

typedef struct {
    uint32_t layer;
    uint64_t off;          /* first element in the gradient */
    int rows, cols, r;
    uint64_t p_off, q_off; /* in the P and Q buffers */
} psgd_mat;

typedef struct {
    psgd_mat *mats;        /* the compressed tensors, in table order */
    size_t nmats;
    uint32_t *unc;         /* the uncompressed layers, in table order */
    size_t nunc;
    uint64_t unc_elems, p_elems, q_elems;
    float *pmem, *qmem;    /* the allreduced P and Q (Q kept for warm start) */
    float *pw, *qw;        /* one worker's P or Q */
    float *ubuf;           /* one worker's uncompressed elements, packed */
    float *usum;           /* their sum over workers */
    float *qr_a, *qr_tau, *qr_work; /* LAPACK's column-major copy, tau and workspace */
    int qr_lwork;
    int have_q;            /* warm start: qmem holds the last step's Q */
    size_t ph_orth, ph_compress, ph_project, ph_decompress, ph_residual;
} psgd_state;

/* The hook's _should_compress with r = min(rows, cols, rank). */
static int should_compress(uint64_t rows, uint64_t cols, uint64_t r, double rate)
{
    return (double)((rows + cols) * r) * rate < (double)(rows * cols);
}

static void plan(const deftsim_sparsifier *s, psgd_state *d, int fill)
{
    const deftsim_model *m = s->p.model;
    d->nmats = d->nunc = 0;
    d->unc_elems = d->p_elems = d->q_elems = 0;
    for (size_t i = 0; i < m->nlayers; i++) {
        const deftsim_layer *L = &m->layers[i];
        uint64_t rows = L->shape[0], cols = L->numel / rows;
        uint64_t r = (uint64_t)sp_opt_int(&s->p, OPT_RANK);
        if (r > rows) r = rows;
        if (r > cols) r = cols;
        if (should_compress(rows, cols, r, sp_opt_double(&s->p, OPT_RATE))) {
            if (fill)
                d->mats[d->nmats] = (psgd_mat){(uint32_t)i, L->offset, (int)rows, (int)cols,
                                               (int)r, d->p_elems, d->q_elems};
            d->nmats++;
            d->p_elems += rows * r;
            d->q_elems += cols * r;
        } else {
            if (fill) d->unc[d->nunc] = (uint32_t)i;
            d->nunc++;
            d->unc_elems += L->numel;
        }
    }
}

static deftsim_status psgd_init(deftsim_sparsifier *s)
{
    deftsim_status st;
    const deftsim_sparsifier_params *p = &s->p;
    psgd_state *d = sp_priv(s, sizeof *d);
    if (!d) return DEFTSIM_E_NOMEM;
    plan(s, d, 0);
    uint64_t maxrows = 1, maxcols = 1;
    uint32_t maxr = 1;
    for (size_t i = 0; i < p->model->nlayers; i++) {
        uint64_t rows = p->model->layers[i].shape[0];
        if (rows > maxrows) maxrows = rows;
        if (p->model->layers[i].numel / rows > maxcols) maxcols = p->model->layers[i].numel / rows;
    }
    maxr = (uint32_t)sp_opt_int(p, OPT_RANK);
    uint64_t maxdim = maxrows > maxcols ? maxrows : maxcols;
    if ((st = sp_plan_common(s, 0, s->n)) ||
        (st = sp_alloc_n(s, &d->mats, d->nmats, sizeof *d->mats, "matrices")) ||
        (st = sp_alloc_n(s, &d->unc, d->nunc, sizeof *d->unc, "layers")) ||
        (st = sp_alloc_n(s, &d->pmem, d->p_elems, sizeof(float), "P")) ||
        (st = sp_alloc_n(s, &d->qmem, d->q_elems, sizeof(float), "Q")) ||
        (st = sp_alloc_n(s, &d->pw, d->p_elems, sizeof(float), "P")) ||
        (st = sp_alloc_n(s, &d->qw, d->q_elems, sizeof(float), "Q")) ||
        (st = sp_alloc_n(s, &d->ubuf, d->unc_elems, sizeof(float), "uncompressed")) ||
        (st = sp_alloc_n(s, &d->usum, d->unc_elems, sizeof(float), "uncompressed")))
        return st;
    /* LAPACK (r > 2): a column-major copy of the largest P or Q, its tau, the workspace. */
    if (maxr > 2 && d->nmats) {
        uint64_t r = maxr < maxdim ? maxr : maxdim;
        int lw = (int)(r * 64);
        if (!s->dry) {
            int m = (int)maxdim, nn = (int)r, info = 0, q = -1;
            float w = 0;
            float dummy = 0;
            sgeqrf_(&m, &nn, &dummy, &m, &dummy, &w, &q, &info);
            if (!info && (int)w > lw) lw = (int)w;
            sorgqr_(&m, &nn, &nn, &dummy, &m, &dummy, &w, &q, &info);
            if (!info && (int)w > lw) lw = (int)w;
        }
        d->qr_lwork = lw;
        if ((st = sp_alloc_n(s, &d->qr_a, maxdim * r, sizeof(float), "QR")) ||
            (st = sp_alloc_n(s, &d->qr_tau, r, sizeof(float), "QR")) ||
            (st = sp_alloc_n(s, &d->qr_work, (uint64_t)lw, sizeof(float), "QR")))
            return st;
    }
    if (!s->dry) {
        plan(s, d, 1);
        for (uint64_t i = 0; i < s->n; i++) s->agg_idx[i] = (deftsim_kidx)i;
    }
    d->ph_orth = sp_phase(s, "orthogonalize", 1);
    d->ph_compress = sp_phase(s, "compress", 1);
    d->ph_project = sp_phase(s, "project", 1);
    d->ph_decompress = sp_phase(s, "decompress", 0);
    d->ph_residual = sp_phase(s, "residual", 0);
    return DEFTSIM_OK;
}

/* The hook's _orthogonalize on one row-major rows x r matrix: Gram-Schmidt with epsilon for
 * r <= 2, LAPACK's QR (sgeqrf, sorgqr: torch.linalg.qr's reduced Q) above. */
static deftsim_status orthogonalize(psgd_state *d, float *a, int rows, int r, float eps)
{
    if (r <= 2) {
        for (int i = 0; i < r; i++) {
            double ss = 0;
            for (int k = 0; k < rows; k++) ss += (double)a[(size_t)k * r + i] * a[(size_t)k * r + i];
            float nrm = (float)sqrt(ss), den = eps == 0 ? nrm : nrm + eps;
            for (int k = 0; k < rows; k++) a[(size_t)k * r + i] /= den;
            for (int j = i + 1; j < r; j++) {
                double dot = 0;
                for (int k = 0; k < rows; k++)
                    dot += (double)(a[(size_t)k * r + i] * a[(size_t)k * r + j]);
                float fd = (float)dot;
                for (int k = 0; k < rows; k++) {
                    float prod = fd * a[(size_t)k * r + i];
                    a[(size_t)k * r + j] -= prod;
                }
            }
        }
        return DEFTSIM_OK;
    }
    int info = 0;
    for (int k = 0; k < rows; k++)
        for (int c = 0; c < r; c++) d->qr_a[(size_t)c * rows + k] = a[(size_t)k * r + c];
    sgeqrf_(&rows, &r, d->qr_a, &rows, d->qr_tau, d->qr_work, &d->qr_lwork, &info);
    if (!info) sorgqr_(&rows, &r, &r, d->qr_a, &rows, d->qr_tau, d->qr_work, &d->qr_lwork, &info);
    if (info)
        return deftsim_error_set(DEFTSIM_E_RUNTIME, "powersgd: LAPACK QR of a %d x %d matrix "
                                 "failed (info %d)", rows, r, info);
    for (int k = 0; k < rows; k++)
        for (int c = 0; c < r; c++) a[(size_t)k * r + c] = d->qr_a[(size_t)c * rows + k];
    return DEFTSIM_OK;
}

/* The random Q of matrix m at iteration t: standard normals (Box-Muller on xoshiro256**) from
 * a stream of (seed, t, layer), row-major cols x r, as docs/SPARSIFIERS.md defines it. */
void deftsim_powersgd_draw_q(uint64_t seed, uint64_t t, uint32_t layer, float *q, uint64_t count)
{
    deftsim_xoshiro256 g;
    uint64_t z = deftsim_splitmix64(seed ^ 0x706f776572736764ull); /* "powersgd" */
    z = deftsim_splitmix64(z ^ t);
    z = deftsim_splitmix64(z ^ layer);
    deftsim_xoshiro256_seed(&g, z);
    for (uint64_t i = 0; i < count; i += 2) {
        double u1 = deftsim_rng_open(deftsim_xoshiro256_next(&g));
        double u2 = deftsim_rng_unit(deftsim_xoshiro256_next(&g));
        double rad = sqrt(-2.0 * log(u1)), ang = 6.283185307179586 * u2;
        q[i] = (float)(rad * cos(ang));
        if (i + 1 < count) q[i + 1] = (float)(rad * sin(ang));
    }
}

/* Warm-up (t < start_iter): the hook's plain allreduce of acc_w / P; residual 0. */
static deftsim_status warmup_step(deftsim_sparsifier *s, const deftsim_acc_provider *a)
{
    deftsim_status st;
    float *acc;
    if (s->P > 1) {
        deftsim_step *c = sp_collective(s, DEFTSIM_STEP_ALLREDUCE, "values");
        if (!c) return DEFTSIM_E_NOMEM;
        for (uint32_t w = 0; w < s->P; w++) c->bytes[w] = s->n * s->sv;
    }
    const uint64_t bytes = s->n * sizeof *s->agg_val;
    if ((st = sp_chain_in(s, s->agg_val, bytes))) return st;
    for (uint32_t w = s->lo; w < s->hi; w++) {
        if ((st = sp_get(a, w, &acc))) return st;
        for (uint64_t i = 0; i < s->n; i++) acc[i] /= (float)s->P;
        sp_agg_add(s, acc, s->n, w);
        sp_zero_acc(s, acc);
        if ((st = sp_release(a, w))) return st;
    }
    if ((st = sp_chain_out(s, s->agg_val, bytes)) || (st = sp_chain_bcast(s, s->agg_val, bytes)))
        return st;
    s->res.common_count = s->n;
    s->res.extra[COL_RATIO] = 1;
    sp_agg_counts(s, s->n);
    return DEFTSIM_OK;
}

static deftsim_status add_allreduce(deftsim_sparsifier *s, const char *name, uint64_t elems)
{
    if (s->P < 2 || elems == 0) return DEFTSIM_OK;
    deftsim_step *c = sp_collective(s, DEFTSIM_STEP_ALLREDUCE, name);
    if (!c) return DEFTSIM_E_NOMEM;
    for (uint32_t w = 0; w < s->P; w++) c->bytes[w] = elems * s->sv;
    return DEFTSIM_OK;
}

/* Charges the time since t0 to every worker's phase ph (work every worker does alike). */
static void charge_all(deftsim_sparsifier *s, size_t step, size_t ph, double t0)
{
    double dt = sp_now(s) - t0;
    for (uint32_t w = 0; w < s->P; w++) sp_charge(s, step, ph, w, dt);
}

/* The sum over workers in worker order: dst = v (w = 0) or dst += v. */
static void add_into(float *dst, const float *v, uint64_t m, uint32_t w)
{
    if (w == 0)
        memcpy(dst, v, m * sizeof *dst);
    else
        for (uint64_t i = 0; i < m; i++) dst[i] += v[i];
}

/* Pass 1: every worker's P_w = M_w Q and its uncompressed elements, summed over workers. */
static deftsim_status pass_compress(deftsim_sparsifier *s, psgd_state *d,
                                    const deftsim_acc_provider *a, size_t c_comp)
{
    deftsim_status st;
    const deftsim_model *m = s->p.model;
    float *acc;
    const uint64_t ub = d->unc_elems * sizeof(float), pb = d->p_elems * sizeof(float);
    if ((st = sp_chain_in(s, d->usum, ub)) || (st = sp_chain_in(s, d->pmem, pb))) return st;
    for (uint32_t w = s->lo; w < s->hi; w++) {
        if ((st = sp_get(a, w, &acc))) return st;
        double t0 = sp_now(s);
        uint64_t u = 0;
        for (size_t i = 0; i < d->nunc; i++) {
            const deftsim_layer *L = &m->layers[d->unc[i]];
            memcpy(d->ubuf + u, acc + L->offset, (size_t)L->numel * sizeof(float));
            u += L->numel;
        }
        for (size_t i = 0; i < d->nmats; i++) {
            const psgd_mat *x = &d->mats[i];
            gemm(0, 0, x->rows, x->r, x->cols, acc + x->off, x->cols, d->qmem + x->q_off, x->r,
                 d->pw + x->p_off, x->r);
        }
        sp_charge(s, c_comp, d->ph_compress, w, sp_now(s) - t0);
        add_into(d->usum, d->ubuf, d->unc_elems, w);
        add_into(d->pmem, d->pw, d->p_elems, w);
    }
    if ((st = sp_chain_out(s, d->usum, ub)) || (st = sp_chain_out(s, d->pmem, pb)) ||
        (st = sp_chain_bcast(s, d->usum, ub)) || (st = sp_chain_bcast(s, d->pmem, pb)))
        return st;
    return DEFTSIM_OK;
}

/* Pass 2: every worker's Q_w = M_w^T P, summed over workers. */
static deftsim_status pass_project(deftsim_sparsifier *s, psgd_state *d,
                                   const deftsim_acc_provider *a, size_t c_proj)
{
    deftsim_status st;
    float *acc;
    const uint64_t qb = d->q_elems * sizeof(float);
    if ((st = sp_chain_in(s, d->qmem, qb))) return st;
    for (uint32_t w = s->lo; w < s->hi; w++) {
        if ((st = sp_get(a, w, &acc))) return st;
        double t0 = sp_now(s);
        for (size_t i = 0; i < d->nmats; i++) {
            const psgd_mat *x = &d->mats[i];
            gemm(1, 0, x->cols, x->r, x->rows, acc + x->off, x->cols, d->pmem + x->p_off, x->r,
                 d->qw + x->q_off, x->r);
        }
        sp_charge(s, c_proj, d->ph_project, w, sp_now(s) - t0);
        add_into(d->qmem, d->qw, d->q_elems, w);
    }
    if ((st = sp_chain_out(s, d->qmem, qb)) || (st = sp_chain_bcast(s, d->qmem, qb))) return st;
    return DEFTSIM_OK;
}

/* Pass 3: residual_w = acc_w - aggregate (error feedback) or 0; release in worker order. */
static deftsim_status pass_residual(deftsim_sparsifier *s, psgd_state *d,
                                    const deftsim_acc_provider *a, size_t c_res)
{
    deftsim_status st;
    float *acc;
    const int ef = sp_opt_int(&s->p, OPT_EF);
    const int lost = !ef && !s->p.skip_quality;
    double lost_sums[2] = {0, 0}; /* the lost mass and lost absolute mass, in worker order */
    if (lost && (st = sp_chain_in(s, lost_sums, sizeof lost_sums))) return st;
    for (uint32_t w = s->lo; w < s->hi; w++) {
        if ((st = sp_get(a, w, &acc))) return st;
        if (lost)
            for (uint64_t i = 0; i < s->n; i++) {
                double e = (double)acc[i] - (double)s->agg_val[i];
                lost_sums[0] += e;
                lost_sums[1] += fabs(e);
            }
        double t0 = sp_now(s);
        if (ef)
            for (uint64_t i = 0; i < s->n; i++) acc[i] -= s->agg_val[i];
        else
            sp_zero_acc(s, acc);
        sp_charge(s, c_res, d->ph_residual, w, sp_now(s) - t0);
        if ((st = sp_release(a, w))) return st;
    }
    if (lost) {
        if ((st = sp_chain_out(s, lost_sums, sizeof lost_sums)) ||
            (st = sp_chain_bcast(s, lost_sums, sizeof lost_sums)))
            return st;
        s->res.lost_mass = lost_sums[0];
        s->res.lost_abs_mass = lost_sums[1];
    }
    (void)d;
    return DEFTSIM_OK;
}

static deftsim_status psgd_step(deftsim_sparsifier *s, uint64_t t, const deftsim_acc_provider *a)
{
    psgd_state *d = s->priv;
    deftsim_status st;
    const deftsim_model *m = s->p.model;
    const float eps = (float)sp_opt_double(&s->p, OPT_EPS);
    if (t < (uint64_t)sp_opt_int(&s->p, OPT_START)) return warmup_step(s, a);

    size_t c_orth = sp_compute(s, d->ph_orth);
    if (c_orth == SIZE_MAX) return DEFTSIM_E_NOMEM;
    /* Q: fresh random draws, or the last step's (warm start); orthogonalised either way. */
    const int fresh = !sp_opt_int(&s->p, OPT_WARM) || !d->have_q;
    if (fresh)
        for (size_t i = 0; i < d->nmats; i++) {
            const psgd_mat *x = &d->mats[i];
            deftsim_powersgd_draw_q(s->p.seed, t, x->layer, d->qmem + x->q_off,
                                    (uint64_t)x->cols * (uint64_t)x->r);
        }
    double t0 = sp_now(s);
    for (size_t i = 0; i < d->nmats; i++)
        if ((st = orthogonalize(d, d->qmem + d->mats[i].q_off, d->mats[i].cols, d->mats[i].r, eps)))
            return st;
    charge_all(s, c_orth, d->ph_orth, t0);

    size_t c_comp = sp_compute(s, d->ph_compress);
    if (c_comp == SIZE_MAX) return DEFTSIM_E_NOMEM;
    if ((st = pass_compress(s, d, a, c_comp))) return st;
    if ((st = add_allreduce(s, "uncompressed", d->unc_elems)) || (st = add_allreduce(s, "p", d->p_elems)))
        return st;

    /* Every worker orthogonalises the same allreduced P: once, charged to all. */
    size_t c_orth2 = sp_compute(s, d->ph_orth);
    if (c_orth2 == SIZE_MAX) return DEFTSIM_E_NOMEM;
    t0 = sp_now(s);
    for (size_t i = 0; i < d->nmats; i++)
        if ((st = orthogonalize(d, d->pmem + d->mats[i].p_off, d->mats[i].rows, d->mats[i].r, eps)))
            return st;
    charge_all(s, c_orth2, d->ph_orth, t0);

    size_t c_proj = sp_compute(s, d->ph_project);
    if (c_proj == SIZE_MAX) return DEFTSIM_E_NOMEM;
    if ((st = pass_project(s, d, a, c_proj))) return st;
    if ((st = add_allreduce(s, "q", d->q_elems))) return st;

    /* Decompress (every worker alike): Q / P, M = P Q^T, the uncompressed sum / P. */
    size_t c_dec = sp_compute(s, d->ph_decompress);
    if (c_dec == SIZE_MAX) return DEFTSIM_E_NOMEM;
    t0 = sp_now(s);
    for (uint64_t i = 0; i < d->q_elems; i++) d->qmem[i] /= (float)s->P;
    for (size_t i = 0; i < d->nmats; i++) {
        const psgd_mat *x = &d->mats[i];
        gemm(0, 1, x->rows, x->cols, x->r, d->pmem + x->p_off, x->r, d->qmem + x->q_off, x->r,
             s->agg_val + x->off, x->cols);
    }
    uint64_t u = 0;
    for (size_t i = 0; i < d->nunc; i++) {
        const deftsim_layer *L = &m->layers[d->unc[i]];
        for (uint64_t j = 0; j < L->numel; j++) s->agg_val[L->offset + j] = d->usum[u + j] / (float)s->P;
        u += L->numel;
    }
    charge_all(s, c_dec, d->ph_decompress, t0);
    d->have_q = 1;

    size_t c_res = sp_compute(s, d->ph_residual);
    if (c_res == SIZE_MAX) return DEFTSIM_E_NOMEM;
    if ((st = pass_residual(s, d, a, c_res))) return st;

    double cost = 0;
    for (size_t i = 0; i < d->nmats; i++)
        cost += 2.0 * d->mats[i].rows * (double)d->mats[i].cols * d->mats[i].r;
    for (uint32_t w = 0; w < s->P; w++) s->res.cost[w] = cost;
    s->res.common_count = s->n;
    s->res.extra[COL_RANK] = sp_opt_int(&s->p, OPT_RANK);
    s->res.extra[COL_RATIO] = (double)s->n / (double)(d->unc_elems + d->p_elems + d->q_elems);
    sp_agg_counts(s, s->n);
    return DEFTSIM_OK;
}

static const sp_method psgd_impl = {psgd_init, psgd_step, NULL, NULL, 1};

static const deftsim_method_option psgd_options[] = {
    [OPT_RANK] = {.key = "powersgd_rank", .type = DEFTSIM_OPT_INT, .dflt = "1", .lo = 1,
                  .hi = 1024,
                  .help = "PowerSGD's matrix_approximation_rank (each matrix: min(rows, cols, "
                          "rank))"},
    [OPT_START] = {.key = "powersgd_start_iter", .type = DEFTSIM_OPT_INT, .dflt = "1000",
                   .lo = 0, .hi = 1000000000,
                   .help = "PowerSGD's start_powerSGD_iter: plain allreduce before it (torch's "
                           "default 1000)"},
    [OPT_RATE] = {.key = "powersgd_min_compression_rate", .type = DEFTSIM_OPT_DOUBLE,
                  .dflt = "2", .lo = 0, .hi = 1e9,
                  .help = "PowerSGD compresses a matrix when (rows + cols) rank * this < rows "
                          "cols"},
    [OPT_EF] = {.key = "powersgd_error_feedback", .type = DEFTSIM_OPT_INT, .dflt = "1", .lo = 0,
                .hi = 1,
                .help = "PowerSGD's use_error_feedback: keep acc - aggregate as the residual"},
    [OPT_WARM] = {.key = "powersgd_warm_start", .type = DEFTSIM_OPT_INT, .dflt = "1", .lo = 0,
                  .hi = 1,
                  .help = "PowerSGD's warm_start: start from the last step's Q instead of a new "
                          "random one"},
    [OPT_EPS] = {.key = "powersgd_epsilon", .type = DEFTSIM_OPT_DOUBLE, .dflt = "0", .lo = 0,
                 .hi = 1, .help = "PowerSGD's orthogonalization_epsilon (Gram-Schmidt, rank <= 2)"},
    [OPT_BATCH] = {.key = "powersgd_batch_same_shape", .type = DEFTSIM_OPT_INT, .dflt = "0",
                   .lo = 0, .hi = 1,
                   .help = "PowerSGD's batch_tensors_with_same_shape (the same values either "
                           "way)"},
};

static const deftsim_method_column psgd_columns[] = {
    [COL_RANK] = {.name = "rank", .unit = "count", .title = "rank",
                  .doc = "powersgd: the rank of a compressed step (each matrix min(rows, cols, "
                         "rank)); empty in its allreduce warm-up",
                  .summary = DEFTSIM_COL_MEDIAN},
    [COL_RATIO] = {.name = "compression_ratio", .unit = "ratio", .title = "compression ratio",
                   .doc = "powersgd: n over the elements a worker sends (1 in its allreduce "
                          "warm-up)",
                   .summary = DEFTSIM_COL_MEDIAN},
};

/* What the options' ranges do not say: the products need host memory and 32-bit sizes, and a
 * device profile cannot time them. */
static deftsim_status psgd_check(const deftsim_sparsifier_params *p)
{
    if (p->kctx && strcmp(deftsim_kctx_backend(p->kctx), "cuda") == 0)
        return deftsim_error_set(DEFTSIM_E_UNSUPPORTED,
                                 "powersgd: its matrix products run on the host (OpenBLAS), but "
                                 "kernel backend 'cuda' holds the accumulators on the device; "
                                 "use 'cuda-staged' ([device] kind = cuda) or 'cpu'");
    /* [device] kind = profile: the profile's cost model times the kernel operations only
     * (kernels/deftsim_kernels.h, DEFTSIM_KOP_*); PowerSGD's phases call none of them, so
     * every one would count 0 s. */
    if (p->kctx && deftsim_kctx_has_cost(p->kctx))
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "powersgd: [device] kind = profile cannot time its phases: they "
                                 "are matrix products and QR on OpenBLAS (operation 'gemm'), "
                                 "which no device profile has a row for (a profile times the "
                                 "kernel operations only); run powersgd with [device] kind = "
                                 "cpu or cuda");
    for (size_t i = 0; p->model && i < p->model->nlayers; i++)
        if (p->model->layers[i].numel > (uint64_t)INT32_MAX)
            return deftsim_error_set(DEFTSIM_E_INPUT,
                                     "powersgd: layer '%s' has %llu elements, beyond OpenBLAS's "
                                     "32-bit sizes", p->model->layers[i].name,
                                     (unsigned long long)p->model->layers[i].numel);
    return DEFTSIM_OK;
}

/* `deftsim bench sim`: a compressed iteration (t >= start_iter): the uncompressed elements,
 * then the P and the Q of the compressed matrices, each an allreduce. The rank and the rate
 * are the scenario's (in->opts), or the defaults without them. */
static deftsim_status psgd_closed_form(const deftsim_closed_form_in *in, uint32_t P,
                                       deftsim_schedule *s)
{
    (void)P;
    const deftsim_model *m = in->model;
    deftsim_opt_value rk, rt;
    if (in->opts) {
        rk = in->opts->v[OPT_RANK];
        rt = in->opts->v[OPT_RATE];
    } else if (deftsim_method_option_parse(&psgd_options[OPT_RANK], psgd_options[OPT_RANK].dflt,
                                           &rk) ||
               deftsim_method_option_parse(&psgd_options[OPT_RATE], psgd_options[OPT_RATE].dflt,
                                           &rt)) {
        return DEFTSIM_E_USAGE;
    }
    if (rk.i < 1 || !(rt.d >= 0))
        return deftsim_error_set(DEFTSIM_E_USAGE, "powersgd: rank %d or rate %g out of range",
                                 rk.i, rt.d);
    uint64_t rank = (uint64_t)rk.i, ue = 0, pe = 0, qe = 0;
    double rate = rt.d;
    for (size_t i = 0; i < m->nlayers; i++) {
        uint64_t rows = m->layers[i].shape[0], cols = m->layers[i].numel / rows, r = rank;
        if (r > rows) r = rows;
        if (r > cols) r = cols;
        if (should_compress(rows, cols, r, rate)) {
            pe += rows * r;
            qe += cols * r;
        } else {
            ue += m->layers[i].numel;
        }
    }
    const char *names[3] = {"uncompressed", "p", "q"};
    uint64_t el[3] = {ue, pe, qe};
    for (int i = 0; i < 3; i++)
        if (el[i] && !sp_cf_add(s, DEFTSIM_STEP_ALLREDUCE, names[i], el[i] * in->value_bytes))
            return DEFTSIM_E_NOMEM;
    return DEFTSIM_OK;
}

const deftsim_method_desc deftsim_sp_powersgd_desc = {
    .name = "powersgd",
    .title = "PowerSGD",
    .short_title = "PowerSGD",
    .caps = DEFTSIM_METHOD_CAP_KEEPS_STATE,
    .impl = &psgd_impl,
    .closed_form = psgd_closed_form,
    .options = psgd_options,
    .noptions = sizeof psgd_options / sizeof psgd_options[0],
    .columns = psgd_columns,
    .ncolumns = sizeof psgd_columns / sizeof psgd_columns[0],
    .kernel_ops = 0, /* its phases run on OpenBLAS; psgd_check refuses a device profile */
    .check = psgd_check,
};
