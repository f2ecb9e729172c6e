/* train_internal.h - what the files of deftsim train share (train_loop.c, train_record.c):
 * the trainer's state. deftsim_train.h is the interface. */
#ifndef DEFTSIM_TRAIN_INTERNAL_H
#define DEFTSIM_TRAIN_INTERNAL_H

#include <stdint.h>

#include "deftsim_config.h"
#include "deftsim_fmnist.h"
#include "deftsim_kernels.h"
#include "deftsim_nn.h"
#include "deftsim_profile.h"

struct deftsim_trainer {
    deftsim_config *cfg;
    deftsim_dataset *train, *test;
    deftsim_nn *net;
    deftsim_kctx *kctx;
    deftsim_profile *profile; /* [device] kind = profile: times the kernels and the accumulate */
    uint32_t B;          /* images per worker */
    uint32_t ntrain;     /* training images used */
    uint32_t ntest;      /* test images evaluated */
    float *x;            /* one minibatch or evaluation chunk of inputs */
    uint8_t *y;
};

#endif
