/* fuzz_model_csv.c - model tables (index,name,shape,numel CSV) as deftsim_model_parse_csv
 * reads a user's file; for a table that parses, checks the offsets tile the gradient and that a
 * clone is equal, and that every name can go into JSON (trace manifests, results). */
#include <jansson.h>

#include "deftsim_model.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    deftsim_model *m = NULL;
    if (deftsim_model_parse_csv((const char *)data, size, "fuzz.csv", "fuzz", &m) != DEFTSIM_OK)
        return 0;
    uint64_t off = 0;
    for (size_t i = 0; i < m->nlayers; i++) {
        const deftsim_layer *l = &m->layers[i];
        FUZZ_CHECK(l->ndim >= 1 && l->ndim <= DEFTSIM_MAX_DIMS, "layer %zu: ndim %u", i, l->ndim);
        uint64_t p = 1;
        for (uint32_t d = 0; d < l->ndim; d++) p *= l->shape[d];
        FUZZ_CHECK(p == l->numel, "layer %zu: numel %llu is not the product of its shape", i,
                   (unsigned long long)l->numel);
        FUZZ_CHECK(l->offset == off, "layer %zu: offset %llu, expected %llu", i,
                   (unsigned long long)l->offset, (unsigned long long)off);
        off += l->numel;
        FUZZ_CHECK(strlen(l->name) > 0, "layer %zu: empty name", i);
        json_t *j = json_string(l->name);
        FUZZ_CHECK(j != NULL, "layer %zu: name '%s' is not a JSON string", i, l->name);
        json_decref(j);
    }
    FUZZ_CHECK(off == m->numel, "numel %llu, layers add up to %llu", (unsigned long long)m->numel,
               (unsigned long long)off);
    deftsim_model *c = NULL;
    FUZZ_CHECK(deftsim_model_clone(m, &c) == DEFTSIM_OK, "clone: %s", deftsim_error_message());
    FUZZ_CHECK(c->numel == m->numel && c->nlayers == m->nlayers, "clone differs");
    deftsim_model_free(c);
    deftsim_model_free(m);
    return 0;
}
