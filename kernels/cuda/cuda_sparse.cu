/* cuda_sparse.cu - the index-driven operations on the device: index checks, gather, zero,
 * scatter-add, the sorted union and gTop-k's merge (the streaming ones are cuda_ops.cu's).
 *
 * Results equal the CPU backend's bit for bit where the contract fixes them: scatter-add and
 * the merge sum duplicates in list order (a stable sort by index, then one thread per run).
 * Arithmetic that must not fuse uses the explicit round-to-nearest intrinsics, whatever -fmad
 * says. */
#include <cub/device/device_radix_sort.cuh>
#include <stdio.h>
#include <string.h>

#include "cuda_internal.cuh"

extern "C" {
#include "deftsim_kcuda.h"
}

/* Defined in cuda_topk.cu. */
extern "C" deftsim_status kc_grid_select_cands(deftsim_kctx *ctx, uint2 *cand, uint2 *spare,
                                               uint32_t m, uint32_t k, void *fstate_dev,
                                               uint32_t *out);
extern "C" size_t kc_fstate_bytes(void);

/* ---- Index checks -------------------------------------------------------------------------------
 * Sparse operations check every index on the device before anything is written: the check
 * records the first offending position, the operation's kernels see it and do nothing, and
 * the host reports it after waiting for the stream. */

__global__ void kc_check_idx_kernel(const uint32_t *__restrict__ idx, size_t m, size_t n,
                                    kc_ctl *ctl)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < m;
         i += (size_t)gridDim.x * blockDim.x)
        if ((size_t)idx[i] >= n) atomicMax(&ctl->sc.bad, ~(kc_u64)i); /* max of ~i: min of i */
}

/* After kc_readback: the recorded offending index as an error, or OK. */
static deftsim_status index_error(deftsim_kctx *ctx, const char *op, const uint32_t *idx, size_t n)
{
    kc_state *s = kc_st(ctx);
    kc_u64 bad = s->pin->sc.bad;
    if (!bad) return DEFTSIM_OK;
    size_t pos = (size_t)~bad;
    uint32_t v = 0;
    KC_CHECK(cudaMemcpy(&v, idx + pos, sizeof v, cudaMemcpyDeviceToHost));
    return deftsim_error_set(DEFTSIM_E_INPUT,
                             "kernels: %s: index %u at position %zu is outside [0, %zu)", op, v,
                             pos, n);
}

static deftsim_status launch_check(kc_state *s, const uint32_t *idx, size_t m, size_t n)
{
    kc_check_idx_kernel<<<kc_grid_for(s, m, 4), KC_THREADS, 0, s->stream>>>(idx, m, n, s->ctl);
    KC_LAUNCHED();
    return DEFTSIM_OK;
}

/* ---- gather, zero ----------------------------------------------------------------------------- */

__global__ void kc_gather_kernel(const float *__restrict__ x, const uint32_t *__restrict__ idx,
                                 size_t m, float *out, kc_ctl *ctl)
{
    if (*(volatile kc_u64 *)&ctl->sc.bad) return;
    uint32_t nan = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < m;
         i += (size_t)gridDim.x * blockDim.x) {
        float v = x[idx[i]];
        nan += v != v;
        out[i] = v;
    }
    kc_add_count(&ctl->st.nan, nan);
}

extern "C" deftsim_status kc_gather(deftsim_kctx *ctx, const float *x, size_t n,
                                    const deftsim_kidx *idx, size_t m, float *out)
{
    kc_state *s = kc_st(ctx);
    deftsim_status st;
    if ((st = kc_check_dev(ctx, m ? x : NULL, "x")) ||
        (st = kc_check_dev(ctx, m ? idx : NULL, "indices")) ||
        (st = kc_check_dev(ctx, m ? out : NULL, "vals_out")) || (st = kc_begin(ctx, KC_CTL_SMALL)))
        return st;
    if (m) {
        if ((st = launch_check(s, idx, m, n))) return st;
        kc_gather_kernel<<<kc_grid_for(s, m, 4), KC_THREADS, 0, s->stream>>>(x, idx, m, out, s->ctl);
        KC_LAUNCHED();
    }
    if ((st = kc_readback(ctx))) return st;
    return index_error(ctx, "gather", idx, n);
}

__global__ void kc_zero_kernel(float *x, const uint32_t *__restrict__ idx, size_t m,
                               const kc_ctl *ctl)
{
    if (*(const volatile kc_u64 *)&ctl->sc.bad) return;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < m;
         i += (size_t)gridDim.x * blockDim.x)
        x[idx[i]] = 0.0f; /* duplicates store the same zero */
}

extern "C" deftsim_status kc_zero_at(deftsim_kctx *ctx, float *x, size_t n,
                                     const deftsim_kidx *idx, size_t m)
{
    kc_state *s = kc_st(ctx);
    deftsim_status st;
    if ((st = kc_check_dev(ctx, m ? x : NULL, "x")) ||
        (st = kc_check_dev(ctx, m ? idx : NULL, "indices")) || (st = kc_begin(ctx, KC_CTL_SMALL)))
        return st;
    if (m) {
        if ((st = launch_check(s, idx, m, n))) return st;
        kc_zero_kernel<<<kc_grid_for(s, m, 4), KC_THREADS, 0, s->stream>>>(x, idx, m, s->ctl);
        KC_LAUNCHED();
    }
    if ((st = kc_readback(ctx))) return st;
    return index_error(ctx, "zero_at", idx, n);
}

/* ---- Stable sort by index (scatter-add, merge) -------------------------------------------------
 * One CUB instantiation, (uint32 key, uint32 position) pairs: stable, so equal indices keep
 * list order. */

static deftsim_status sort_bytes(uint32_t m, int bits, size_t *bytes)
{
    size_t b = 0;
    KC_CHECK(cub::DeviceRadixSort::SortPairs((void *)NULL, b, (const uint32_t *)NULL,
                                             (uint32_t *)NULL, (const uint32_t *)NULL,
                                             (uint32_t *)NULL, m, 0, bits, (cudaStream_t)0));
    *bytes = b;
    return DEFTSIM_OK;
}

static deftsim_status sort_pairs(kc_state *s, void *tmp, size_t tmp_bytes, const uint32_t *kin,
                                 uint32_t *kout, const uint32_t *vin, uint32_t *vout, uint32_t m,
                                 int bits)
{
    KC_CHECK(cub::DeviceRadixSort::SortPairs(tmp, tmp_bytes, kin, kout, vin, vout, m, 0, bits,
                                             s->stream));
    return DEFTSIM_OK;
}

/* Bits that hold every index below n (at least 1). */
static int index_bits(size_t n)
{
    int b = 1;
    while (b < 32 && ((size_t)1 << b) < n) b++;
    return b;
}

/* ---- scatter-add ----------------------------------------------------------------------------- */

/* The working memory scatter_add draws from the attached pool for m entries into [0, n). */
extern "C" deftsim_status kc_scatter_add_work(size_t n, size_t m, size_t *bytes)
{
    *bytes = 0;
    if (!m) return DEFTSIM_OK;
    if (m > UINT32_MAX)
        return deftsim_error_set(DEFTSIM_E_INPUT, "kernels: cuda: scatter_add: %zu entries", m);
    size_t tb = 0;
    deftsim_status st = sort_bytes((uint32_t)m, index_bits(n), &tb);
    if (st) return st;
    *bytes = 3 * kc_round(m * sizeof(uint32_t)) + kc_round(tb) + 256;
    return DEFTSIM_OK;
}

__global__ void kc_iota_nan_kernel(uint32_t *pos, size_t m, const float *__restrict__ vals,
                                   kc_ctl *ctl)
{
    uint32_t nan = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < m;
         i += (size_t)gridDim.x * blockDim.x) {
        pos[i] = (uint32_t)i;
        if (vals) {
            float v = vals[i];
            nan += v != v;
        }
    }
    kc_add_count(&ctl->st.nan, nan);
}

/* One thread per run of equal indices in sorted order adds the run's values in list order. */
__global__ void kc_scatter_runs_kernel(float *dst, const uint32_t *__restrict__ key,
                                       const uint32_t *__restrict__ pos,
                                       const float *__restrict__ vals, size_t m, const kc_ctl *ctl)
{
    if (*(const volatile kc_u64 *)&ctl->sc.bad) return;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < m;
         i += (size_t)gridDim.x * blockDim.x) {
        uint32_t d = key[i];
        if (i > 0 && key[i - 1] == d) continue;
        float acc = dst[d];
        for (size_t j = i; j < m && key[j] == d; j++) acc = __fadd_rn(acc, vals[pos[j]]);
        dst[d] = acc;
    }
}

extern "C" deftsim_status kc_scatter_add(deftsim_kctx *ctx, float *dst, size_t n,
                                         const deftsim_kidx *idx, const float *vals, size_t m)
{
    kc_state *s = kc_st(ctx);
    deftsim_status st;
    if ((st = kc_check_dev(ctx, m ? dst : NULL, "destination")) ||
        (st = kc_check_dev(ctx, m ? idx : NULL, "indices")) ||
        (st = kc_check_dev(ctx, m ? vals : NULL, "values")) || (st = kc_begin(ctx, KC_CTL_SMALL)))
        return st;
    if (!m) return kc_readback(ctx);
    if (m > UINT32_MAX)
        return deftsim_error_set(DEFTSIM_E_INPUT, "kernels: cuda: scatter_add: %zu entries", m);
    deftsim_kcuda_pool *pool = s->pool;
    if (!pool)
        return deftsim_error_set(DEFTSIM_E_USAGE,
                                 "kernels: cuda: scatter_add sums duplicates in list order, "
                                 "which takes a sort and working memory: attach a device pool "
                                 "to the context (deftsim_kcuda_attach_pool)");
    int bits = index_bits(n);
    size_t tb = 0;
    if ((st = sort_bytes((uint32_t)m, bits, &tb))) return st;
    /* kc_scatter_add_work() reports the same (cuda-staged reserves it). */
    size_t need = 3 * kc_round(m * sizeof(uint32_t)) + kc_round(tb) + 256;
    void *work;
    if ((st = deftsim_kcuda_alloc(pool, need, &work)))
        return deftsim_error_wrap(st, "kernels: cuda: scatter_add working memory");
    kc_arena a;
    kc_arena_init(&a, work, need);
    uint32_t *kout = (uint32_t *)kc_take(&a, m * sizeof(uint32_t));
    uint32_t *pin = (uint32_t *)kc_take(&a, m * sizeof(uint32_t));
    uint32_t *pout = (uint32_t *)kc_take(&a, m * sizeof(uint32_t));
    void *tmp = kc_take(&a, tb);
    do {
        if ((st = launch_check(s, idx, m, n))) break;
        kc_iota_nan_kernel<<<kc_grid_for(s, m, 4), KC_THREADS, 0, s->stream>>>(pin, m, vals, s->ctl);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) {
            st = kc_fail(e, "kc_iota_nan_kernel", __FILE__, __LINE__);
            break;
        }
        if ((st = sort_pairs(s, tmp, tb, idx, kout, pin, pout, (uint32_t)m, bits))) break;
        kc_scatter_runs_kernel<<<kc_grid_for(s, m, 4), KC_THREADS, 0, s->stream>>>(
            dst, kout, pout, vals, m, s->ctl);
        e = cudaGetLastError();
        if (e != cudaSuccess) {
            st = kc_fail(e, "kc_scatter_runs_kernel", __FILE__, __LINE__);
            break;
        }
        st = kc_readback(ctx);
    } while (0);
    /* Every kernel above has finished (kc_readback waits) or failed to queue, so the memory
     * can go back to the pool. After a failed wait the stream is unusable anyway. */
    if (st) (void)cudaStreamSynchronize(s->stream);
    deftsim_kcuda_release(pool, work);
    if (st) return st;
    return index_error(ctx, "scatter_add", idx, n);
}

/* ---- Sorted union ------------------------------------------------------------------------------
 * A bitmap over [0, n): marking is one atomicOr per index in any order, and reading the words
 * back in order yields the union sorted and without duplicates; the output slot of each word
 * comes from a prefix sum of per-block popcounts. The list table (device pointers and lengths)
 * is read by the marking kernel straight from pinned host memory. */

#define KC_UWORDS 2048u /* bitmap words per block */

typedef struct {
    const uint32_t *p;
    unsigned long long len;
} kc_list;

/* Lists l0 .. l0 + nlists - 1; their table is pinned host memory, read in place. */
__global__ void kc_union_mark_kernel(const kc_list *lists, uint32_t l0, uint32_t nlists, size_t n,
                                     uint32_t *bits, kc_ctl *ctl)
{
    for (uint32_t l = blockIdx.y; l < nlists; l += gridDim.y) {
        const kc_list L = lists[l];
        for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < L.len;
             i += (size_t)gridDim.x * blockDim.x) {
            uint32_t d = L.p[i];
            if ((size_t)d >= n) /* first (list, position) wins: min of l << 40 | i */
                atomicMax(&ctl->sc.bad, ~(((kc_u64)(l0 + l) << 40) | (kc_u64)i));
            else
                atomicOr(&bits[d >> 5], 1u << (d & 31));
        }
    }
}

__global__ void __launch_bounds__(KC_THREADS)
    kc_union_count_kernel(const uint32_t *bits, size_t words, uint32_t *bsum)
{
    size_t w0 = (size_t)blockIdx.x * KC_UWORDS;
    uint32_t c = 0;
    for (size_t w = w0 + threadIdx.x; w < words && w < w0 + KC_UWORDS; w += KC_THREADS)
        c += __popc(bits[w]);
    uint32_t tot;
    (void)kc_block_excl_scan(c, &tot);
    if (threadIdx.x == 0) bsum[blockIdx.x] = tot;
}

/* One block: exclusive prefix of the block counts in place; the total is the union size. */
__global__ void __launch_bounds__(KC_THREADS)
    kc_union_scan_kernel(uint32_t *bsum, uint32_t nb, kc_ctl *ctl)
{
    __shared__ uint32_t s_carry;
    if (threadIdx.x == 0) s_carry = 0;
    __syncthreads();
    for (uint32_t b0 = 0; b0 < nb; b0 += KC_THREADS) {
        uint32_t b = b0 + threadIdx.x;
        uint32_t v = b < nb ? bsum[b] : 0u;
        uint32_t tot, ex = kc_block_excl_scan(v, &tot);
        uint32_t carry = s_carry;
        if (b < nb) bsum[b] = carry + ex;
        __syncthreads();
        if (threadIdx.x == 0) s_carry = carry + tot;
        __syncthreads();
    }
    if (threadIdx.x == 0) ctl->sc.count = s_carry;
}

__global__ void __launch_bounds__(KC_THREADS)
    kc_union_emit_kernel(const uint32_t *bits, size_t words, const uint32_t *boff, uint32_t *out,
                         size_t cap, const kc_ctl *ctl)
{
    if (*(const volatile kc_u64 *)&ctl->sc.bad) return;
    const uint32_t per = KC_UWORDS / KC_THREADS;
    size_t w0 = (size_t)blockIdx.x * KC_UWORDS + (size_t)threadIdx.x * per;
    uint32_t wv[KC_UWORDS / KC_THREADS], c = 0;
#pragma unroll
    for (uint32_t j = 0; j < per; j++) {
        wv[j] = w0 + j < words ? bits[w0 + j] : 0u;
        c += __popc(wv[j]);
    }
    uint32_t tot, ex = kc_block_excl_scan(c, &tot);
    size_t o = (size_t)boff[blockIdx.x] + ex;
#pragma unroll
    for (uint32_t j = 0; j < per; j++) {
        uint32_t v = wv[j];
        while (v && o < cap) {
            out[o++] = (uint32_t)((w0 + j) * 32 + (size_t)(__ffs(v) - 1));
            v &= v - 1;
        }
    }
}

extern "C" deftsim_status kc_union_scratch(const deftsim_kctx *ctx, size_t n, size_t *bytes)
{
    (void)ctx;
    size_t words = (n + 31) / 32, nb = (words + KC_UWORDS - 1) / KC_UWORDS;
    *bytes = 256 + kc_round(words * sizeof(uint32_t)) + kc_round(nb * sizeof(uint32_t));
    return DEFTSIM_OK;
}

extern "C" deftsim_status kc_union(deftsim_kctx *ctx, size_t n, const deftsim_kidx *const *lists,
                                   const size_t *lens, size_t nlists, deftsim_kidx *out,
                                   size_t cap, size_t *count, void *scratch, size_t scratch_bytes)
{
    kc_state *s = kc_st(ctx);
    deftsim_status st;
    if ((st = kc_check_dev(ctx, cap ? out : NULL, "output")) ||
        (st = kc_check_dev(ctx, scratch, "scratch")))
        return st;
    for (size_t l = 0; l < nlists; l++) {
        char what[48];
        snprintf(what, sizeof what, "list %zu", l);
        if (lens[l] && (st = kc_check_dev(ctx, lists[l], what))) return st;
        if (lens[l] >= ((size_t)1 << 40))
            return deftsim_error_set(DEFTSIM_E_INPUT, "kernels: cuda: union: list %zu holds %zu "
                                                      "indices (at most 2^40)", l, lens[l]);
    }
    if (nlists >= ((size_t)1 << 23))
        return deftsim_error_set(DEFTSIM_E_INPUT, "kernels: cuda: union: %zu lists", nlists);
    if ((st = kc_begin(ctx, KC_CTL_SMALL))) return st;
    size_t words = (n + 31) / 32, nb = (words + KC_UWORDS - 1) / KC_UWORDS;
    *count = 0;
    if (!words) return kc_readback(ctx);
    kc_arena a;
    kc_arena_init(&a, scratch, scratch_bytes);
    uint32_t *bits = (uint32_t *)kc_take(&a, words * sizeof(uint32_t));
    uint32_t *bsum = (uint32_t *)kc_take(&a, nb * sizeof(uint32_t));
    KC_CHECK(cudaMemsetAsync(bits, 0, words * sizeof(uint32_t), s->stream));
    /* The table goes in ring slots (pinned, so the kernel reads it in place), as many lists
     * per launch as a slot holds. */
    const size_t per_slot = KC_STAGE_SLOT / sizeof(kc_list);
    for (size_t l0 = 0; l0 < nlists; l0 += per_slot) {
        size_t nl = nlists - l0 < per_slot ? nlists - l0 : per_slot, most = 0;
        for (size_t l = l0; l < l0 + nl; l++) most = lens[l] > most ? lens[l] : most;
        if (!most) continue;
        kc_stage sg;
        if ((st = kc_stage_take(s, nl * sizeof(kc_list), &sg))) return st;
        kc_list *h = (kc_list *)sg.host;
        for (size_t l = 0; l < nl; l++) {
            h[l].p = lists[l0 + l];
            h[l].len = lens[l0 + l];
        }
        dim3 grid(kc_blocks(most, KC_THREADS * 4, (unsigned)s->sms * 4u),
                  (unsigned)(nl < 65535 ? nl : 65535));
        kc_union_mark_kernel<<<grid, KC_THREADS, 0, s->stream>>>(h, (uint32_t)l0, (uint32_t)nl, n,
                                                                  bits, s->ctl);
        KC_LAUNCHED();
        /* The slot is busy until the kernel has read it. */
        KC_CHECK(cudaEventRecord(s->stage_ev[sg.slot], s->stream));
        s->stage_busy[sg.slot] = 1;
    }
    kc_union_count_kernel<<<(unsigned)nb, KC_THREADS, 0, s->stream>>>(bits, words, bsum);
    KC_LAUNCHED();
    kc_union_scan_kernel<<<1, KC_THREADS, 0, s->stream>>>(bsum, (uint32_t)nb, s->ctl);
    KC_LAUNCHED();
    if (cap) {
        kc_union_emit_kernel<<<(unsigned)nb, KC_THREADS, 0, s->stream>>>(bits, words, bsum, out,
                                                                        cap, s->ctl);
        KC_LAUNCHED();
    }
    if ((st = kc_readback(ctx))) return st;
    kc_u64 bad = s->pin->sc.bad;
    if (bad) {
        kc_u64 key = ~bad;
        size_t l = (size_t)(key >> 40), i = (size_t)(key & (((kc_u64)1 << 40) - 1));
        uint32_t v = 0;
        KC_CHECK(cudaMemcpy(&v, lists[l] + i, sizeof v, cudaMemcpyDeviceToHost));
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "list %zu: kernels: union: index %u at position %zu is outside "
                                 "[0, %zu)",
                                 l, v, i, n);
    }
    *count = (size_t)s->pin->sc.count;
    return DEFTSIM_OK;
}

/* ---- gTop-k merge ---------------------------------------------------------------------------
 * Both lists in one array (a first), a stable sort by index, one thread per run summing its
 * values in list order; the run heads are the candidates (sorted position, rank of the sum)
 * of the grid-wide selection, whose key breaks ties by sorted position, that is by index. */

__global__ void kc_merge_load_kernel(const uint32_t *__restrict__ ia, const float *__restrict__ va,
                                     size_t na, const uint32_t *__restrict__ ib,
                                     const float *__restrict__ vb, size_t nb, uint32_t *key,
                                     uint32_t *pos, kc_ctl *ctl)
{
    uint32_t nan = 0;
    size_t m = na + nb;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < m;
         i += (size_t)gridDim.x * blockDim.x) {
        float v = i < na ? va[i] : vb[i - na];
        key[i] = i < na ? ia[i] : ib[i - na];
        pos[i] = (uint32_t)i;
        nan += v != v;
    }
    kc_add_count(&ctl->st.nan, nan);
}

__global__ void __launch_bounds__(KC_THREADS)
    kc_merge_runs_kernel(const uint32_t *__restrict__ key, const uint32_t *__restrict__ pos,
                         const float *__restrict__ va, size_t na, const float *__restrict__ vb,
                         size_t m, float *sum, uint2 *cand, kc_ctl *ctl)
{
    __shared__ unsigned long long s_base;
    for (size_t t0 = (size_t)blockIdx.x * KC_THREADS; t0 < m; t0 += (size_t)gridDim.x * KC_THREADS) {
        size_t i = t0 + threadIdx.x;
        uint32_t head = 0, r = 0;
        if (i < m && (i == 0 || key[i - 1] != key[i])) {
            uint32_t d = key[i];
            uint32_t p = pos[i];
            float acc = p < na ? va[p] : vb[p - na];
            for (size_t j = i + 1; j < m && key[j] == d; j++) {
                p = pos[j];
                acc = __fadd_rn(acc, p < na ? va[p] : vb[p - na]);
            }
            sum[i] = acc;
            head = 1;
            r = kc_rank(acc);
        }
        uint32_t tot, ex = kc_block_excl_scan(head, &tot);
        if (threadIdx.x == 0) s_base = tot ? atomicAdd(&ctl->sc.count, (kc_u64)tot) : 0ull;
        __syncthreads();
        if (head) cand[s_base + ex] = make_uint2((uint32_t)i, r);
        __syncthreads();
    }
}

/* out_idx[i], out_val[i] from the i-th selected sorted position (sel, or every candidate). */
__global__ void kc_merge_out_kernel(const uint32_t *sel, const uint2 *cand, size_t kk,
                                    const uint32_t *key, const float *sum, uint32_t *out_idx,
                                    float *out_val)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < kk;
         i += (size_t)gridDim.x * blockDim.x) {
        uint32_t p = sel ? sel[i] : cand[i].x;
        out_idx[i] = key[p];
        out_val[i] = sum[p];
    }
}

typedef struct {
    size_t m, tb;
    size_t off_key, off_kout, off_pos, off_pout, off_sum, off_cand, off_spare, off_fs, off_sel,
        off_tmp, total;
} merge_layout;

static deftsim_status merge_plan(size_t na, size_t nb, merge_layout *L)
{
    memset(L, 0, sizeof *L);
    L->m = na + nb;
    if (L->m > UINT32_MAX)
        return deftsim_error_set(DEFTSIM_E_INPUT, "kernels: cuda: merge_topk: %zu entries", L->m);
    deftsim_status st = sort_bytes((uint32_t)L->m, 32, &L->tb);
    if (st) return st;
    size_t u4 = kc_round(L->m * sizeof(uint32_t)), u8 = kc_round(L->m * sizeof(uint2));
    size_t o = 0;
    L->off_key = o;
    o += u4;
    L->off_kout = o;
    o += u4;
    L->off_pos = o;
    o += u4;
    L->off_pout = o;
    o += u4;
    L->off_sum = o;
    o += u4;
    L->off_cand = o;
    o += u8;
    L->off_spare = o;
    o += u8;
    L->off_fs = o;
    o += kc_round(kc_fstate_bytes());
    L->off_sel = o;
    o += u4;
    L->off_tmp = o;
    o += kc_round(L->tb);
    L->total = o;
    return DEFTSIM_OK;
}

extern "C" deftsim_status kc_merge_topk_scratch(const deftsim_kctx *ctx, size_t na, size_t nb,
                                                size_t *bytes)
{
    (void)ctx;
    merge_layout L;
    deftsim_status st = merge_plan(na, nb, &L);
    if (st) return st;
    *bytes = L.m ? 256 + L.total : 0;
    return DEFTSIM_OK;
}

extern "C" deftsim_status kc_merge_topk(deftsim_kctx *ctx, const deftsim_kidx *ia, const float *va,
                                        size_t na, const deftsim_kidx *ib, const float *vb,
                                        size_t nb, size_t k, deftsim_kidx *out_idx,
                                        float *out_val, size_t *out_n, void *scratch,
                                        size_t scratch_bytes)
{
    kc_state *s = kc_st(ctx);
    deftsim_status st;
    merge_layout L;
    if ((st = merge_plan(na, nb, &L))) return st;
    if ((st = kc_check_dev(ctx, na ? ia : NULL, "indices a")) ||
        (st = kc_check_dev(ctx, na ? va : NULL, "values a")) ||
        (st = kc_check_dev(ctx, nb ? ib : NULL, "indices b")) ||
        (st = kc_check_dev(ctx, nb ? vb : NULL, "values b")) ||
        (st = kc_check_dev(ctx, k && L.m ? out_idx : NULL, "output indices")) ||
        (st = kc_check_dev(ctx, k && L.m ? out_val : NULL, "output values")) ||
        (st = kc_check_dev(ctx, L.m ? scratch : NULL, "scratch")) ||
        (st = kc_begin(ctx, KC_CTL_ALL)))
        return st;
    *out_n = 0;
    if (!L.m) return kc_readback(ctx);
    kc_arena a;
    kc_arena_init(&a, scratch, scratch_bytes);
    unsigned char *b = (unsigned char *)kc_take(&a, L.total);
    uint32_t *key = (uint32_t *)(b + L.off_key), *kout = (uint32_t *)(b + L.off_kout);
    uint32_t *pos = (uint32_t *)(b + L.off_pos), *pout = (uint32_t *)(b + L.off_pout);
    float *sum = (float *)(b + L.off_sum);
    uint2 *cand = (uint2 *)(b + L.off_cand), *spare = (uint2 *)(b + L.off_spare);
    uint32_t *sel = (uint32_t *)(b + L.off_sel);
    unsigned g = kc_grid_for(s, L.m, 4);
    kc_merge_load_kernel<<<g, KC_THREADS, 0, s->stream>>>(ia, va, na, ib, vb, nb, key, pos, s->ctl);
    KC_LAUNCHED();
    if ((st = sort_pairs(s, b + L.off_tmp, L.tb, key, kout, pos, pout, (uint32_t)L.m, 32))) return st;
    kc_merge_runs_kernel<<<g, KC_THREADS, 0, s->stream>>>(kout, pout, va, na, vb, L.m, sum, cand,
                                                          s->ctl);
    KC_LAUNCHED();
    if ((st = kc_readback(ctx))) return st;
    size_t u = (size_t)s->pin->sc.count, kk = k < u ? k : u;
    if (kk) {
        if (kk < u) {
            if ((st = kc_grid_select_cands(ctx, cand, spare, (uint32_t)u, (uint32_t)kk,
                                           b + L.off_fs, sel)))
                return st;
        }
        kc_merge_out_kernel<<<kc_grid_for(s, kk, 4), KC_THREADS, 0, s->stream>>>(
            kk < u ? sel : NULL, cand, kk, kout, sum, out_idx, out_val);
        KC_LAUNCHED();
    }
    /* The record (read back above) counts the NaNs among the input values, as on the CPU. */
    KC_CHECK(cudaStreamSynchronize(s->stream));
    *out_n = kk;
    return DEFTSIM_OK;
}
