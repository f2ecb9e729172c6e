/* deftsim_team.h - the ranks of spread mode (docs/CLUSTER.md, "Spread mode"): a point's P
 * simulated workers split over R processes in contiguous blocks, rank r holding workers
 * deftsim_team_first(P, R, r) .. deftsim_team_first(P, R, r + 1) - 1.
 *
 * A team is a table of the few operations the engine and the sparsifiers need between ranks;
 * src/net/net_mpi.c fills it with MPI. Library code below the engine (the sparsifiers) sees only
 * this table, so it builds and runs without MPI; a NULL team is one process holding every
 * worker. Every operation is collective over the ranks in the order they call them, as MPI's
 * are: every rank runs the same control flow and calls the same operations in the same order.
 *
 * Why contiguous blocks: every sum over workers in deftsim runs in worker order (float or
 * double, as the one-process engine adds them). With contiguous blocks the order survives
 * the split: rank r receives the running sum of workers before its block from rank r - 1,
 * adds its own in order and passes it on (a chain), so the bits equal one process's. */
#ifndef DEFTSIM_TEAM_H
#define DEFTSIM_TEAM_H

#include <stddef.h>
#include <stdint.h>

#include "deftsim_error.h"

typedef struct deftsim_team {
    uint32_t rank, size;
    void *ctx;
    /* Every rank's part, concatenated in rank order into all: part r is bytes[r] bytes at
     * offset sum(bytes[0 .. r)); this rank's own part is read from mine (which may lie at its
     * place in all). */
    deftsim_status (*allgatherv)(void *ctx, const void *mine, void *all, const uint64_t *bytes);
    deftsim_status (*send)(void *ctx, uint32_t to, const void *buf, uint64_t bytes);
    deftsim_status (*recv)(void *ctx, uint32_t from, void *buf, uint64_t bytes);
    deftsim_status (*bcast)(void *ctx, uint32_t root, void *buf, uint64_t bytes);
} deftsim_team;

/* The first worker of rank r's block, floor(r P / R) (r = R gives P). */
static inline uint32_t deftsim_team_first(uint32_t P, uint32_t R, uint32_t r)
{
    return (uint32_t)(((uint64_t)r * P) / R);
}

/* The rank holding worker w. */
static inline uint32_t deftsim_team_owner(uint32_t P, uint32_t R, uint32_t w)
{
    uint32_t r = (uint32_t)((((uint64_t)w + 1) * R - 1) / P);
    while (r > 0 && deftsim_team_first(P, R, r) > w) r--;
    while (r + 1 < R && deftsim_team_first(P, R, r + 1) <= w) r++;
    return r;
}

/* This process's block of P workers: [*lo, *hi); all of them without a team. */
static inline void deftsim_team_block(const deftsim_team *t, uint32_t P, uint32_t *lo,
                                      uint32_t *hi)
{
    *lo = t ? deftsim_team_first(P, t->size, t->rank) : 0;
    *hi = t ? deftsim_team_first(P, t->size, t->rank + 1) : P;
}

/* Every rank's `mine` bytes (any count per rank), concatenated in rank order into a buffer
 * this call allocates (*all, freed by the caller; *total its size): sizes first, then the data.
 * Without a team: a copy of mine. */
deftsim_status deftsim_team_gather_var(const deftsim_team *t, const void *mine, uint64_t bytes,
                                       void **all, uint64_t *total, uint64_t *part_bytes);

/* The chain of an ordered sum: rank r > 0 receives the running value (bytes at buf) from
 * rank r - 1 (chain_in), adds its block, and passes it to r + 1 (chain_out); the last rank's
 * value, the whole sum, can then be broadcast to every rank (chain_bcast). Ranks without
 * workers pass the value through. Several values may travel one after the other: all their
 * chain_in, then all their chain_out, then their chain_bcast. Without a team (or with one
 * rank) all three do nothing. */
deftsim_status deftsim_team_chain_in(const deftsim_team *t, void *buf, uint64_t bytes);
deftsim_status deftsim_team_chain_out(const deftsim_team *t, void *buf, uint64_t bytes);
deftsim_status deftsim_team_chain_bcast(const deftsim_team *t, void *buf, uint64_t bytes);

#endif
