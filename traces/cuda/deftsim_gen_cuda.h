/* deftsim_gen_cuda.h - the synthetic gradient generator on a CUDA device, next to the host
 * generator it reproduces (deftsim_gen.h).
 *
 * The element arithmetic of traces/deftsim_gen.h compiled for the device without fused
 * multiply-add, so the bytes equal deftsim_gen_fill's. The caller supplies what the host
 * generator computes once: its constants (deftsim_gen_get_consts) and the scales of the layers
 * at this iteration (deftsim_gen_layer_scale, or deftsim_gen_worker_scale for the worker when
 * worker_spread is set), as a table of consecutive layers. One set of constants serves every
 * layer: a generator whose kinds have their own signal or tail (<kind>_signal, <kind>_tail)
 * (or field, <kind>_field) needs one call per run of layers of a kind, with
 * deftsim_gen_layer_consts; the magnitude field (the constants' field_w and field_c) is
 * computed on the device as on the host. It runs on a
 * context of the kernels' "cuda" backend (deftsim_kcuda.h: device pointers, the context's
 * stream); the part of traces/ it needs (deftsim_gen.h) is declarations and inline arithmetic
 * only, so this library does not link the host generator (jansson, zlib).
 *
 * Nothing here chooses parameters: the constants come from a host generator built from
 * resolved ones (a scenario's [synthetic] keys, with [gradients] params or the model table's
 * own set already applied once in src/config/config_params.c; docs/GENERATOR.md, "Default
 * sets"), so the device runs exactly what the host would.
 *
 * Built only when meson finds nvcc (traces/cuda/meson.build). */
#ifndef DEFTSIM_GEN_CUDA_H
#define DEFTSIM_GEN_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "deftsim_error.h"
#include "deftsim_gen.h"
#include "deftsim_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    uint64_t offset; /* first element of the layer in the flattened gradient */
    uint64_t numel;
    float scale;     /* s_L(t) */
} deftsim_kcuda_gen_layer;

/* Scratch for a table of nlayers layers. */
size_t deftsim_kcuda_gen_scratch(size_t nlayers);

/* Writes elements [offset, offset + count) of `worker`'s gradient at `iteration` to out
 * (device memory, count floats). layers must be consecutive (each starts where the previous
 * ends) and cover the range. Queued on ctx's stream (a "cuda" context); returns without
 * waiting. */
deftsim_status deftsim_kcuda_gen_fill(deftsim_kctx *ctx, const deftsim_gen_consts *consts,
                                      const deftsim_kcuda_gen_layer *layers, size_t nlayers,
                                      uint32_t iteration, uint32_t worker, uint64_t offset,
                                      uint64_t count, float *out, void *scratch,
                                      size_t scratch_bytes);

#ifdef __cplusplus
}
#endif

#endif
