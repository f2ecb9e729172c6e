/* grow.c - the one growing array (deftsim_util.h). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "deftsim_util.h"

/* The first capacity of an empty array, in elements. */
#define GROW_FIRST 16

deftsim_status deftsim_grow(void *p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap) return DEFTSIM_OK;
    size_t c = *cap ? *cap : GROW_FIRST;
    while (c < need) c = c <= SIZE_MAX / 2 ? 2 * c : need;
    size_t bytes;
    if (deftsim_mul_size(c, elem ? elem : 1, &bytes)) return DEFTSIM_E_NOMEM;
    /* p points at the caller's T *: read and written through memcpy, which any object
     * pointer's representation allows on the platforms deftsim builds for. */
    void *old;
    memcpy(&old, p, sizeof old);
    void *q = realloc(old, bytes);
    if (!q) return DEFTSIM_E_NOMEM;
    memcpy(p, &q, sizeof q);
    *cap = c;
    return DEFTSIM_OK;
}
