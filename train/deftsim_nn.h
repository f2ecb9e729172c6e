/* deftsim_nn.h - two small classifiers with hand-written forward and backward passes.
 *
 *   mlp  input -> fc1 (hidden[0]) -> ReLU -> fc2 (hidden[1]) -> ReLU -> fc3 (classes)
 *   cnn  input (1 channel) -> conv1 (channels[0], kernel x kernel, same padding) -> ReLU ->
 *        max-pool 2x2 -> conv2 (channels[1]) -> ReLU -> max-pool 2x2 -> fc1 (hidden[0]) ->
 *        ReLU -> fc2 (classes)
 *
 * followed by softmax cross-entropy averaged over the minibatch. With the Fashion-MNIST sizes
 * (deftsim_nn_spec_default) the MLP is 784-512-256-10 (535,818 parameters) and the CNN has
 * 3x3 convolutions of 32 and 64 channels and a 128-wide hidden layer (421,642 parameters).
 *
 * Parameters live in one flat float vector in parameter order, the order a gradient has in
 * a trace or a sparsifier: each layer's weight (PyTorch's layout: [out, in] for a linear
 * layer, [out, in, k, k] for a convolution), then its bias. deftsim_nn_model() is that table
 * as a deftsim_model, so a network's gradients go wherever a model table's do.
 *
 * Matrix products go through OpenBLAS: fully connected layers as one product per
 * minibatch, convolutions per image through im2col. Activations and their gradients live in
 * buffers planned for max_batch images at creation; a network object is not thread-safe. */
#ifndef DEFTSIM_NN_H
#define DEFTSIM_NN_H

#include <stddef.h>
#include <stdint.h>

#include "deftsim_error.h"
#include "deftsim_model.h"

typedef enum { DEFTSIM_NN_MLP, DEFTSIM_NN_CNN, DEFTSIM_NN_KIND_COUNT } deftsim_nn_kind;

typedef struct {
    deftsim_nn_kind kind;
    uint32_t in_rows, in_cols; /* one-channel input images; the CNN needs multiples of 4 */
    uint32_t classes;          /* at least 2 */
    uint32_t hidden[2];        /* mlp: both hidden widths; cnn: hidden[0] only */
    uint32_t channels[2];      /* cnn: output channels of conv1 and conv2 */
    uint32_t kernel;           /* cnn: odd kernel size (padding kernel / 2 keeps the size) */
} deftsim_nn_spec;

/* The Fashion-MNIST networks above. */
void deftsim_nn_spec_default(deftsim_nn_kind kind, deftsim_nn_spec *s);

/* "mlp", "cnn"; the inverse returns 0 or -1 for an unknown name. */
const char *deftsim_nn_kind_name(deftsim_nn_kind k);
int deftsim_nn_kind_from_name(const char *name, deftsim_nn_kind *out);

typedef struct deftsim_nn deftsim_nn;

/* Checks the spec (DEFTSIM_E_INPUT naming the field) and allocates every buffer for
 * minibatches of up to max_batch images. The model table is named "fmnist_mlp" or
 * "fmnist_cnn" for the default specs, "mlp" or "cnn" otherwise. */
deftsim_status deftsim_nn_new(const deftsim_nn_spec *spec, uint32_t max_batch, deftsim_nn **out);
void deftsim_nn_free(deftsim_nn *net);

const deftsim_model *deftsim_nn_model(const deftsim_nn *net);

/* PyTorch's default initialisation of Linear and Conv2d: every weight and bias uniform in
 * +-1/sqrt(fan_in), drawn from Philox keyed by seed (the same seed gives the same bytes). */
void deftsim_nn_init(const deftsim_nn *net, uint64_t seed, float *params);

/* One minibatch of B images (x: B * in_rows * in_cols floats, y: B labels below classes):
 * grad (n floats, overwritten) = the gradient of the mean cross-entropy at params; *loss = that
 * mean; *correct = images whose largest logit is their label (either may be NULL).
 * DEFTSIM_E_INPUT for B of 0 or above max_batch, or a label out of range. */
deftsim_status deftsim_nn_grad(deftsim_nn *net, const float *params, const float *x,
                               const uint8_t *y, uint32_t B, float *grad, double *loss,
                               uint32_t *correct);

/* Forward pass only: *loss_sum = the summed (not averaged) cross-entropy of the B images, in
 * double; *correct as above. */
deftsim_status deftsim_nn_eval(deftsim_nn *net, const float *params, const float *x,
                               const uint8_t *y, uint32_t B, double *loss_sum, uint32_t *correct);

/* Floating-point operations of one forward plus backward pass per image (multiply-adds
 * counted as two), for reporting throughput. */
double deftsim_nn_flops_per_image(const deftsim_nn *net);

/* Sets OpenBLAS's thread count (1 .. 256); a no-op for a BLAS without that control. */
void deftsim_nn_blas_threads(int threads);

#endif
