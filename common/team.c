/* team.c - the operations of deftsim_team.h built from the team's table. */
#include "deftsim_team.h"

#include <stdlib.h>
#include <string.h>

deftsim_status deftsim_team_gather_var(const deftsim_team *t, const void *mine, uint64_t bytes,
                                       void **all, uint64_t *total, uint64_t *part_bytes)
{
    *all = NULL;
    *total = 0;
    uint32_t R = t ? t->size : 1;
    uint64_t one = 1, *sizes = part_bytes ? part_bytes : malloc(R * sizeof *sizes);
    if (!sizes) return deftsim_error_nomem("spread mode");
    deftsim_status st = DEFTSIM_OK;
    if (!t || R == 1) {
        sizes[0] = bytes;
    } else {
        uint64_t *eight = calloc(R, sizeof *eight);
        if (!eight) {
            st = deftsim_error_nomem("spread mode");
            goto out;
        }
        for (uint32_t r = 0; r < R; r++) eight[r] = sizeof(uint64_t);
        st = t->allgatherv(t->ctx, &bytes, sizes, eight);
        free(eight);
        if (st) goto out;
    }
    uint64_t sum = 0;
    for (uint32_t r = 0; r < R; r++) sum += sizes[r];
    char *buf = malloc(sum ? sum : one);
    if (!buf) {
        st = deftsim_error_nomem("spread mode: %llu bytes", (unsigned long long)sum);
        goto out;
    }
    if (!t || R == 1) {
        if (bytes) memcpy(buf, mine, bytes);
    } else if ((st = t->allgatherv(t->ctx, mine, buf, sizes))) {
        free(buf);
        goto out;
    }
    *all = buf;
    *total = sum;
out:
    if (!part_bytes) free(sizes);
    return st;
}

deftsim_status deftsim_team_chain_in(const deftsim_team *t, void *buf, uint64_t bytes)
{
    if (!t || t->size < 2 || t->rank == 0) return DEFTSIM_OK;
    return t->recv(t->ctx, t->rank - 1, buf, bytes);
}

deftsim_status deftsim_team_chain_out(const deftsim_team *t, void *buf, uint64_t bytes)
{
    if (!t || t->size < 2 || t->rank + 1 == t->size) return DEFTSIM_OK;
    return t->send(t->ctx, t->rank + 1, buf, bytes);
}

deftsim_status deftsim_team_chain_bcast(const deftsim_team *t, void *buf, uint64_t bytes)
{
    if (!t || t->size < 2) return DEFTSIM_OK;
    return t->bcast(t->ctx, t->size - 1, buf, bytes);
}
