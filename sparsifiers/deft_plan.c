/* deft_plan.c - DEFT's fragments, k allocation and bin packing. */
#include "deftsim_deft.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

deftsim_status deftsim_deft_fragments(const deftsim_model *m, uint32_t P, deftsim_fragment **out,
                                      size_t *nfrag)
{
    *out = NULL;
    *nfrag = 0;
    if (P == 0) return deftsim_error_set(DEFTSIM_E_INPUT, "DEFT: worker count must be >= 1");
    if ((uint64_t)P > m->numel)
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "DEFT: %u workers exceed the %llu elements of model '%s'", P,
                                 (unsigned long long)m->numel, m->name);
    /* numel > n / P in exact arithmetic: numel * P > n (no overflow: numel, n < 2^48). */
    size_t count = 0;
    for (size_t i = 0; i < m->nlayers; i++)
        count += (m->layers[i].numel * P > m->numel) ? P : 1;
    deftsim_fragment *f = malloc(count * sizeof *f);
    if (!f) return deftsim_error_nomem("DEFT: %zu fragments", count);
    size_t j = 0;
    for (size_t i = 0; i < m->nlayers; i++) {
        const deftsim_layer *L = &m->layers[i];
        if (L->numel * P > m->numel) {
            uint64_t base = L->numel / P, extra = L->numel % P, off = L->offset;
            for (uint32_t p = 0; p < P; p++) {
                uint64_t sz = base + (p < extra ? 1 : 0);
                f[j++] = (deftsim_fragment){off, sz, (uint32_t)i};
                off += sz;
            }
        } else {
            f[j++] = (deftsim_fragment){L->offset, L->numel, (uint32_t)i};
        }
    }
    *out = f;
    *nfrag = count;
    return DEFTSIM_OK;
}

/* qsort has no context argument in C11; the sort keys are copied next to the ids instead. */
typedef struct {
    double key;
    size_t id;
} keyed;

static int cmp_desc_key_then_id(const void *a, const void *b)
{
    const keyed *x = a, *y = b;
    if (x->key > y->key) return -1;
    if (x->key < y->key) return 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* A double's bits made to order as the double does (negatives: all bits flipped; others: the
 * sign bit set), then flipped so that an ascending sort of them is descending in the double.
 * Exact for every double but NaN and -0 (which compares equal to +0). */
static uint64_t desc_bits(double x)
{
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    u = (u >> 63) ? ~u : u | (1ULL << 63);
    return ~u;
}

#define RADIX_BITS 11

/* ids[0 .. n) receives 0 .. n-1 in descending order of keys, ties in ascending id: the order
 * cmp_desc_key_then_id gives. Each key's desc_bits are cut to their upper 32 bits (sign,
 * exponent and 20 bits of mantissa) and packed with its id into one 64-bit word; a stable
 * least-significant-digit radix sort of the words' upper halves (11 bits a pass, every pass's
 * histogram from one read, the passes in which every key has the same digit skipped) orders
 * them, ids ascending among equal halves; a last pass sorts each run of equal halves by the
 * whole desc_bits, by insertion (such runs are keys within about 1e-6 of each other: few and
 * short). A few passes over the keys instead of qsort's n log2 n calls of a comparison (DEFT's
 * allocation sorts its fragments, up to P per tensor, on every worker at every step). With a
 * NaN or a -0 among the keys, where bits and comparisons disagree, or 2^32 keys or more,
 * qsort sorts them. Returns -1 when out of memory (ids then unspecified). */
static int order_desc(const double *keys, size_t n, size_t *ids)
{
    int plain = n < ((size_t)1 << 32);
    for (size_t i = 0; i < n && plain; i++)
        plain = !isnan(keys[i]) && !(keys[i] == 0 && signbit(keys[i]));
    if (!plain) {
        keyed *t = malloc((n ? n : 1) * sizeof *t);
        if (!t) return -1;
        for (size_t i = 0; i < n; i++) t[i] = (keyed){keys[i], i};
        qsort(t, n, sizeof *t, cmp_desc_key_then_id);
        for (size_t i = 0; i < n; i++) ids[i] = t[i].id;
        free(t);
        return 0;
    }
    if (n < 2) {
        if (n) ids[0] = 0;
        return 0;
    }
    uint64_t *buf = malloc(2 * n * sizeof *buf);
    if (!buf) return -1;
    uint64_t *w0 = buf, *w1 = buf + n;
    enum { NPASS = 3 };
    static const unsigned shift[NPASS] = {32, 32 + RADIX_BITS, 32 + 2 * RADIX_BITS};
    const uint64_t mask = (1u << RADIX_BITS) - 1;
    uint32_t hist[NPASS][1u << RADIX_BITS];
    memset(hist, 0, sizeof hist);
    for (size_t i = 0; i < n; i++) {
        uint64_t w = (desc_bits(keys[i]) & 0xffffffff00000000ULL) | i;
        w0[i] = w;
        for (unsigned p = 0; p < NPASS; p++) hist[p][(w >> shift[p]) & mask]++;
    }
    for (unsigned p = 0; p < NPASS; p++) {
        uint32_t *h = hist[p];
        if (h[(w0[0] >> shift[p]) & mask] == n) continue; /* one digit for all: in order */
        uint32_t sum = 0;
        for (size_t d = 0; d <= mask; d++) {
            uint32_t c = h[d];
            h[d] = sum;
            sum += c;
        }
        for (size_t i = 0; i < n; i++) w1[h[(w0[i] >> shift[p]) & mask]++] = w0[i];
        uint64_t *t = w0;
        w0 = w1;
        w1 = t;
    }
    for (size_t i = 0; i < n; i++) ids[i] = (uint32_t)w0[i];
    /* Runs of equal upper halves: by the whole bits, ascending, then id (insertion: stable). */
    for (size_t a = 0, b; a < n; a = b) {
        for (b = a + 1; b < n && (w0[b] >> 32) == (w0[a] >> 32); b++) {
        }
        for (size_t i = a + 1; i < b; i++) {
            size_t v = ids[i], j = i;
            uint64_t kv = desc_bits(keys[v]);
            while (j > a && desc_bits(keys[ids[j - 1]]) > kv) {
                ids[j] = ids[j - 1];
                j--;
            }
            ids[j] = v;
        }
    }
    free(buf);
    return 0;
}

/* Step 2 with either expression for tau: deftsim's floor(remain_k * norm / remain_norm), or the
 * authors' trunc(remain_k * (norm / remain_norm)) (authors != 0). */
static uint64_t allocate_k(const deftsim_fragment *frags, size_t nfrag, const double *norms,
                           uint64_t k, uint64_t *kj, size_t *order, int authors)
{
    if (order_desc(norms, nfrag, order)) {
        /* Out of memory for the sort keys: an insertion sort in place keeps the result exact. */
        for (size_t i = 0; i < nfrag; i++) {
            size_t v = order[i] = i, p = i;
            while (p > 0 && (norms[order[p - 1]] < norms[v])) { order[p] = order[p - 1]; p--; }
            order[p] = v;
        }
    }
    double remain_norm = 0;
    for (size_t i = 0; i < nfrag; i++) remain_norm += norms[i];
    int64_t remain_k = (int64_t)k;
    uint64_t total = 0;
    for (size_t i = 0; i < nfrag; i++) {
        size_t j = order[i];
        double nj = norms[j];
        int64_t tau = 0;
        if (remain_norm > 0) {
            double q = authors ? trunc((double)remain_k * (nj / remain_norm))
                               : floor((double)remain_k * nj / remain_norm);
            tau = q > 9e18 ? INT64_MAX : (q < -9e18 ? INT64_MIN : (int64_t)q);
        }
        uint64_t size = frags[j].size;
        uint64_t v;
        if (tau > 0 && size < (uint64_t)tau) v = size;
        else v = tau > 1 ? (uint64_t)tau : 1;
        kj[j] = v;
        total += v;
        remain_k -= (int64_t)v;
        remain_norm -= nj;
    }
    return total;
}

uint64_t deftsim_deft_allocate_k(const deftsim_fragment *frags, size_t nfrag, const double *norms,
                                 uint64_t k, uint64_t *kj, size_t *order)
{
    return allocate_k(frags, nfrag, norms, k, kj, order, 0);
}

uint64_t deftsim_deft_allocate_k_authors(const deftsim_fragment *frags, size_t nfrag,
                                         const double *norms, uint64_t k, uint64_t *kj,
                                         size_t *order)
{
    return allocate_k(frags, nfrag, norms, k, kj, order, 1);
}

/* ---- The authors' float32 norm ----------------------------------------------------------- *
 * The reduction PyTorch's CUDA backend (ATen's gpu_reduce_kernel as of PyTorch 1.5, the
 * version the DEFT authors' environment pins) runs for the 2-norm of a contiguous float32
 * vector of m elements, with its order of operations, in float32 on the host. Its launch shape
 * depends on m alone: a block of bw = min(512, the largest power of two <= m) threads; when
 * each thread would see at least 256 values, ctas = min(ceil(ceil(m / bw) / 16), 65535)
 * blocks, else one. Thread x of block c starts at element x + c bw and strides by
 * S = bw ctas, keeping 4 float accumulators (element x + c bw + (4 q + i) S goes to
 * accumulator i: acc_i = fmaf(v, v, acc_i), the contraction nvcc makes of acc + v * v), added
 * as ((a0 + a1) + a2) + a3. A block then adds its threads' values: halving through shared
 * memory down to 32 lanes (lane x += lane x + h, h = bw/2 .. 32), then a warp's shuffle-down
 * tree (lane x += lane x + h, h = 1, 2, .., 16). With several blocks, the last one to finish
 * has thread x add the block results x, x + bw, x + 2 bw, .. in that order from 0, and the
 * same block tree adds the threads; the norm is sqrtf of the total. */

/* The block tree over lanes v[0 .. bw): v[0] receives the block's value. */
static float block_tree(float *v, uint32_t bw)
{
    uint32_t dim = bw;
    if (dim > 32) {
        for (uint32_t h = dim / 2; h >= 32; h >>= 1)
            for (uint32_t x = 0; x < h; x++) v[x] = v[x] + v[x + h];
        dim = 32;
    }
    /* Shuffle down: every lane reads lane x + h before anyone writes; ascending x reads the
     * higher lane before it changes. */
    for (uint32_t h = 1; h < dim; h <<= 1)
        for (uint32_t x = 0; x + h < dim; x++) v[x] = v[x] + v[x + h];
    return v[0];
}

float deftsim_deft_sumsq_float32(const float *x, uint64_t m)
{
    if (m == 0) return 0.0f;
    uint32_t bw = 512;
    if (m < 512) {
        bw = 1;
        while ((uint64_t)bw * 2 <= m) bw *= 2;
    }
    uint64_t per_thread = (m + bw - 1) / bw, ctas = 1;
    if (per_thread >= 256) {
        ctas = (per_thread + 15) / 16;
        if (ctas > 65535) ctas = 65535;
    }
    const uint64_t S = (uint64_t)bw * ctas;
    float lane[512], fin[512];
    for (uint32_t t = 0; t < bw; t++) fin[t] = 0.0f;
    float total = 0.0f;
    for (uint64_t c = 0; c < ctas; c++) {
        for (uint32_t t = 0; t < bw; t++) {
            float a[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            for (uint64_t e = t + c * bw; e < m; e += 4 * S)
                for (uint64_t i = 0; i < 4 && e + i * S < m; i++) {
                    float v = x[e + i * S];
                    a[i] = fmaf(v, v, a[i]);
                }
            lane[t] = ((a[0] + a[1]) + a[2]) + a[3];
        }
        float b = block_tree(lane, bw);
        if (ctas == 1) total = b;
        else fin[c % bw] = fin[c % bw] + b;
    }
    if (ctas > 1) total = block_tree(fin, bw);
    return total;
}

float deftsim_deft_norm_float32(const float *x, uint64_t m)
{
    return sqrtf(deftsim_deft_sumsq_float32(x, m));
}

double deftsim_deft_cost(uint64_t size, uint64_t kj)
{
    return kj > 1 ? (double)size * log2((double)kj) : (double)size;
}

void deftsim_deft_packing_free(deftsim_deft_packing *p)
{
    if (!p) return;
    free(p->bin_start);
    free(p->frag_ids);
    free(p->bin_cost);
    free(p->bin_k);
    free(p->common_ids);
    memset(p, 0, sizeof *p);
}

/* Min-heap of bins ordered by (load, bin index): the least-loaded bin, first on ties. */
static int bin_less(const double *load, uint32_t a, uint32_t b)
{
    return load[a] < load[b] || (load[a] == load[b] && a < b);
}

static void heap_down(uint32_t *h, uint32_t n, const double *load, uint32_t i)
{
    for (;;) {
        uint32_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && bin_less(load, h[l], h[m])) m = l;
        if (r < n && bin_less(load, h[r], h[m])) m = r;
        if (m == i) return;
        uint32_t tmp = h[i]; h[i] = h[m]; h[m] = tmp;
        i = m;
    }
}

deftsim_status deftsim_deft_pack(const deftsim_fragment *frags, size_t nfrag, const uint64_t *kj,
                                 uint32_t P, deftsim_deft_packing *out)
{
    memset(out, 0, sizeof *out);
    if (P == 0) return deftsim_error_set(DEFTSIM_E_INPUT, "DEFT: worker count must be >= 1");
    size_t nf = nfrag ? nfrag : 1;
    double *cost = malloc(nf * sizeof *cost);
    uint32_t *bin_of = malloc(nf * sizeof *bin_of);
    uint32_t *heap = malloc(P * sizeof *heap);
    out->nbins = P;
    out->nfrag = nfrag;
    out->bin_start = calloc((size_t)P + 1, sizeof *out->bin_start);
    out->frag_ids = malloc(nf * sizeof *out->frag_ids);
    out->bin_cost = calloc(P, sizeof *out->bin_cost);
    out->bin_k = calloc(P, sizeof *out->bin_k);
    out->common_ids = malloc(nf * sizeof *out->common_ids);
    size_t *t = malloc(nf * sizeof *t);
    if (!t || !cost || !bin_of || !heap || !out->bin_start || !out->frag_ids || !out->bin_cost ||
        !out->bin_k || !out->common_ids)
        goto nomem;
    /* Common fragments are not packed; their cost key is -1 so they sort last. */
    for (size_t j = 0; j < nfrag; j++)
        cost[j] = kj[j] >= frags[j].size ? -1.0 : deftsim_deft_cost(frags[j].size, kj[j]);
    if (order_desc(cost, nfrag, t)) goto nomem;
    for (uint32_t b = 0; b < P; b++) heap[b] = b; /* all loads 0: index order is a valid heap */
    size_t npacked = 0;
    for (size_t i = 0; i < nfrag; i++) {
        size_t j = t[i];
        if (cost[j] < 0) {
            bin_of[j] = UINT32_MAX;
            continue;
        }
        uint32_t b = heap[0];
        bin_of[j] = b;
        out->bin_cost[b] += cost[j];
        out->bin_k[b] += kj[j];
        out->bin_start[b + 1]++;
        npacked++;
        heap_down(heap, P, out->bin_cost, 0);
    }
    for (uint32_t b = 0; b < P; b++) out->bin_start[b + 1] += out->bin_start[b];
    /* Lay the fragments out by bin, keeping the order in which they were packed. */
    uint32_t *fill = heap; /* reuse as per-bin cursor */
    for (uint32_t b = 0; b < P; b++) fill[b] = out->bin_start[b];
    for (size_t i = 0; i < nfrag; i++) {
        size_t j = t[i];
        if (bin_of[j] != UINT32_MAX) out->frag_ids[fill[bin_of[j]]++] = (uint32_t)j;
    }
    for (size_t j = 0; j < nfrag; j++)
        if (bin_of[j] == UINT32_MAX) out->common_ids[out->ncommon++] = (uint32_t)j;
    (void)npacked;
    free(t);
    free(cost);
    free(bin_of);
    free(heap);
    return DEFTSIM_OK;
nomem:
    free(t);
    free(cost);
    free(bin_of);
    free(heap);
    deftsim_deft_packing_free(out);
    return deftsim_error_nomem("DEFT: packing %zu fragments", nfrag);
}
