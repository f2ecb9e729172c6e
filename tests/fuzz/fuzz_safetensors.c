/* fuzz_safetensors.c - safetensors files: the input is written to a file and opened with
 * deftsim_st_open; for a file that opens, every tensor's bytes are read and its fields checked
 * against the file. */
#include "deftsim_safetensors.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char path[512];
    if (!path[0]) snprintf(path, sizeof path, "%s/input.safetensors", fuzz_scratch());
    fuzz_write(path, data, size);
    deftsim_st_file *f = NULL;
    if (deftsim_st_open(path, &f) != DEFTSIM_OK) return 0;
    uint64_t fsize = deftsim_st_file_size(f), base = deftsim_st_buffer_offset(f);
    FUZZ_CHECK(fsize == size, "file size %llu, input %zu", (unsigned long long)fsize, size);
    FUZZ_CHECK(base >= 8 && base <= fsize, "buffer offset %llu", (unsigned long long)base);
    uint64_t covered = 0;
    volatile uint8_t sink = 0;
    for (size_t i = 0; i < deftsim_st_count(f); i++) {
        const deftsim_st_tensor *t = deftsim_st_tensor_at(f, i);
        FUZZ_CHECK(t && t->name && t->dtype, "tensor %zu", i);
        FUZZ_CHECK(t->ndim <= DEFTSIM_ST_MAX_DIMS, "tensor %zu: ndim %u", i, t->ndim);
        FUZZ_CHECK(t->elem_size == deftsim_st_dtype_size(t->dtype), "tensor %s: elem size", t->name);
        FUZZ_CHECK(t->begin <= t->end && base + t->end <= fsize, "tensor %s: offsets", t->name);
        FUZZ_CHECK(t->end - t->begin == t->numel * t->elem_size, "tensor %s: %llu bytes for %llu "
                   "elements", t->name, (unsigned long long)(t->end - t->begin),
                   (unsigned long long)t->numel);
        covered += t->end - t->begin;
        const uint8_t *b = t->data;
        for (uint64_t k = 0; k < t->end - t->begin; k++) sink ^= b[k];
        FUZZ_CHECK(deftsim_st_find(f, t->name) == t, "tensor %s: find", t->name);
    }
    FUZZ_CHECK(base + covered == fsize, "tensors cover %llu of %llu buffer bytes",
               (unsigned long long)covered, (unsigned long long)(fsize - base));
    const json_t *meta = deftsim_st_metadata(f);
    if (meta) FUZZ_CHECK(json_is_object(meta), "metadata is not an object");
    deftsim_st_close(f);
    (void)sink;
    return 0;
}
