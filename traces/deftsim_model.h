/* deftsim_model.h - model tables: the parameter tensors of a model, in parameter order.
 *
 * A gradient of a model is all its parameter tensors flattened and concatenated in this order
 * (n = total numel elements). Tables come built in (traces/models/, one CSV file each, compiled into the
 * library) or from a user's CSV file with the same columns: index,name,shape,numel
 * (shape as dimensions joined by 'x', e.g. 64x3x3x3). */
#ifndef DEFTSIM_MODEL_H
#define DEFTSIM_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "deftsim_error.h"

#define DEFTSIM_MAX_DIMS 8

typedef struct {
    char *name;                        /* tensor name, e.g. "layer1.0.conv1.weight" */
    uint32_t ndim;                     /* 1..DEFTSIM_MAX_DIMS */
    uint64_t shape[DEFTSIM_MAX_DIMS];
    uint64_t numel;                    /* product of shape */
    uint64_t offset;                   /* first element in the flattened gradient */
} deftsim_layer;

typedef struct {
    char *name;        /* e.g. "resnet18_cifar10" */
    size_t nlayers;
    deftsim_layer *layers;
    uint64_t numel;    /* total elements n */
} deftsim_model;

/* Built-in tables, in a fixed order. */
size_t deftsim_model_builtin_count(void);
const char *deftsim_model_builtin_name(size_t i);

/* Loads a built-in table by name ("resnet18_cifar10", ...). */
deftsim_status deftsim_model_builtin(const char *name, deftsim_model **out);

/* Parses a CSV table from memory; origin names the source in error messages
 * ("file.csv:LINE: ..."). Validates the header, consecutive indices, shapes, numel = product
 * of shape, and that nothing overflows. */
deftsim_status deftsim_model_parse_csv(const char *text, size_t len, const char *origin,
                                       const char *model_name, deftsim_model **out);

/* A built-in name, or else the path of a CSV table. */
deftsim_status deftsim_model_load(const char *name_or_path, deftsim_model **out);

/* Deep copy. */
deftsim_status deftsim_model_clone(const deftsim_model *m, deftsim_model **out);

void deftsim_model_free(deftsim_model *m);

#endif
