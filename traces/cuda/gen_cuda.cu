/* gen_cuda.cu - the synthetic gradient generator on the device, bit for bit the host's
 * (deftsim_gen_cuda.h), on a context of the kernels' "cuda" backend.
 *
 * The element arithmetic is traces/deftsim_gen.h's own static inline functions, compiled here
 * as __host__ __device__ code: this file is built with -fmad=false (no fused multiply-add)
 * and the default IEEE division and square root, so every float operation rounds exactly as
 * on the host, and the final weighting uses the explicit round-to-nearest intrinsics besides.
 *
 * deftsim_gen.h has no qualifier hook for its element functions (deftsim_philox.h has one), so
 * `inline` is defined to carry __host__ __device__ while that header alone is read; every
 * header it includes is read before, so nothing else sees the definition. */
#include <cuda_runtime.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

extern "C" {
#include "deftsim_error.h"
#include "deftsim_model.h"
}

static __host__ __device__ __forceinline__ float kc_gen_sqrtf(float x)
{
#ifdef __CUDA_ARCH__
    return __fsqrt_rn(x);
#else
    return __builtin_sqrtf(x);
#endif
}

#define DEFTSIM_PHILOX_QUALIFIER static __host__ __device__ __forceinline__
#define DEFTSIM_GEN_SQRTF(x) kc_gen_sqrtf(x)
#define inline __host__ __device__ __inline__
extern "C" {
#include "deftsim_gen.h"
}
#undef inline

#include "cuda_internal.cuh"

extern "C" {
#include "deftsim_gen_cuda.h"
#include "deftsim_kcuda.h"
}

/* One thread per (32-element group, lane): the lane's two Philox calls (signal and noise) give
 * four words each, two Bailey pairs, the values of elements 32 g + 8 w + lane for w = 0..3
 * (deftsim_gen.h's layout), so no call is evaluated twice; with a magnitude field a third call
 * (the field stream) gives their four factors. */
__global__ void __launch_bounds__(KC_THREADS)
    kc_gen_kernel(deftsim_gen_consts c, const deftsim_kcuda_gen_layer *layers, uint32_t nl,
                  uint32_t iteration, uint32_t worker, unsigned long long offset,
                  unsigned long long count, float *out)
{
    const unsigned long long end = offset + count;
    const unsigned long long u0 = offset / DEFTSIM_GEN_GROUP * DEFTSIM_GEN_LANES;
    const unsigned long long u1 = (end + DEFTSIM_GEN_GROUP - 1) / DEFTSIM_GEN_GROUP * DEFTSIM_GEN_LANES;
    for (unsigned long long u = u0 + (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
         u < u1; u += (unsigned long long)gridDim.x * blockDim.x) {
        /* u is the Philox call index 8 g + lane. */
        const unsigned long long g = u / DEFTSIM_GEN_LANES;
        const uint32_t lane = (uint32_t)(u % DEFTSIM_GEN_LANES);
        uint32_t ws[4], wn[4];
        deftsim_gen_words(&c, u, DEFTSIM_GEN_STREAM_SIGNAL, 0, iteration, ws);
        deftsim_gen_words(&c, u, DEFTSIM_GEN_STREAM_NOISE, worker, iteration, wn);
        float s[4], z[4];
        deftsim_gen_pair(&c, ws[0], ws[1], &s[0], &s[1]);
        deftsim_gen_pair(&c, ws[2], ws[3], &s[2], &s[3]);
        deftsim_gen_pair(&c, wn[0], wn[1], &z[0], &z[1]);
        deftsim_gen_pair(&c, wn[2], wn[3], &z[2], &z[3]);
        /* The magnitude field: the same call in the field stream, worker and iteration 0; its
         * word w is element w's factor (deftsim_gen_field_value). */
        uint32_t wf[4] = {0, 0, 0, 0};
        if (c.field_w != 0.0f) deftsim_gen_words(&c, u, DEFTSIM_GEN_STREAM_FIELD, 0, 0, wf);
#pragma unroll
        for (uint32_t w = 0; w < 4; w++) {
            unsigned long long e = g * DEFTSIM_GEN_GROUP + DEFTSIM_GEN_LANES * w + lane;
            if (e < offset || e >= end) continue;
            uint32_t lo = 0, hi = nl; /* the last layer starting at or before e */
            while (hi - lo > 1) {
                uint32_t mid = (lo + hi) >> 1;
                if (layers[mid].offset <= e) lo = mid;
                else hi = mid;
            }
            /* (w_signal * S + w_noise * N) * scale, scale = field * layer scale with a field,
             * each operation rounded on its own: the reference's order (deftsim_gen_element). */
            float v = __fadd_rn(__fmul_rn(c.w_signal, s[w]), __fmul_rn(c.w_noise, z[w]));
            float scale = c.field_w != 0.0f
                              ? __fmul_rn(deftsim_gen_field_factor(&c, wf[w]), layers[lo].scale)
                              : layers[lo].scale;
            out[e - offset] = __fmul_rn(v, scale);
        }
    }
}

extern "C" size_t deftsim_kcuda_gen_scratch(size_t nlayers)
{
    return 256 + kc_round(nlayers * sizeof(deftsim_kcuda_gen_layer));
}

extern "C" deftsim_status deftsim_kcuda_gen_fill(deftsim_kctx *ctx, const deftsim_gen_consts *consts,
                                                 const deftsim_kcuda_gen_layer *layers,
                                                 size_t nlayers, uint32_t iteration,
                                                 uint32_t worker, uint64_t offset, uint64_t count,
                                                 float *out, void *scratch, size_t scratch_bytes)
{
    if (!ctx || strcmp(deftsim_kctx_backend(ctx), "cuda") != 0)
        return deftsim_error_set(DEFTSIM_E_USAGE,
                                 "kernels: deftsim_kcuda_gen_fill needs a context of backend cuda");
    if (!consts || (!layers && nlayers))
        return deftsim_error_set(DEFTSIM_E_USAGE, "kernels: cuda generator: NULL argument");
    if (count == 0) return DEFTSIM_OK;
    if (nlayers == 0 || nlayers > UINT32_MAX)
        return deftsim_error_set(DEFTSIM_E_INPUT, "kernels: cuda generator: %zu layers", nlayers);
    for (size_t i = 0; i + 1 < nlayers; i++)
        if (layers[i + 1].offset != layers[i].offset + layers[i].numel)
            return deftsim_error_set(DEFTSIM_E_INPUT,
                                     "kernels: cuda generator: layer %zu starts at %llu, not where "
                                     "layer %zu ends (%llu)",
                                     i + 1, (unsigned long long)layers[i + 1].offset, i,
                                     (unsigned long long)(layers[i].offset + layers[i].numel));
    const deftsim_kcuda_gen_layer *last = &layers[nlayers - 1];
    if (offset < layers[0].offset || count > last->offset + last->numel - offset ||
        offset > last->offset + last->numel)
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "kernels: cuda generator: elements [%llu, %llu + %llu) lie "
                                 "outside the layers [%llu, %llu)",
                                 (unsigned long long)offset, (unsigned long long)offset,
                                 (unsigned long long)count, (unsigned long long)layers[0].offset,
                                 (unsigned long long)(last->offset + last->numel));
    size_t need = deftsim_kcuda_gen_scratch(nlayers);
    if (!scratch || scratch_bytes < need)
        return deftsim_error_set(DEFTSIM_E_USAGE,
                                 "kernels: cuda generator: scratch of %zu bytes given, %zu needed",
                                 scratch ? scratch_bytes : 0, need);
    deftsim_status st;
    if ((st = kc_check_dev(ctx, out, "out")) || (st = kc_check_dev(ctx, scratch, "scratch")))
        return st;
    kc_state *s = kc_st(ctx);
    kc_arena a;
    kc_arena_init(&a, scratch, scratch_bytes);
    size_t tb = nlayers * sizeof(deftsim_kcuda_gen_layer);
    void *d_layers = kc_take(&a, tb);
    kc_stage sg;
    if ((st = kc_stage_take(s, tb, &sg))) return st;
    memcpy(sg.host, layers, tb);
    st = kc_stage_put(s, &sg, d_layers, tb);
    kc_stage_done(&sg);
    if (st) return st;
    unsigned long long calls =
        ((offset + count + DEFTSIM_GEN_GROUP - 1) / DEFTSIM_GEN_GROUP - offset / DEFTSIM_GEN_GROUP) *
        DEFTSIM_GEN_LANES;
    unsigned g = kc_blocks((size_t)calls, KC_THREADS, (unsigned)s->sms * 16u);
    kc_gen_kernel<<<g, KC_THREADS, 0, s->stream>>>(*consts, (const deftsim_kcuda_gen_layer *)d_layers,
                                                   (uint32_t)nlayers, iteration, worker,
                                                   (unsigned long long)offset,
                                                   (unsigned long long)count, out);
    KC_LAUNCHED();
    return DEFTSIM_OK;
}
