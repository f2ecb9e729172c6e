/* schedule.c - building schedules and the reference traffic of each step. */
#include "deftsim_schedule.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deftsim_util.h"

void deftsim_schedule_init(deftsim_schedule *s, uint32_t P)
{
    memset(s, 0, sizeof *s);
    s->P = P;
}

static void step_free(deftsim_step *st)
{
    free(st->seconds);
    free(st->bytes);
    free(st->peer);
}

void deftsim_schedule_reset(deftsim_schedule *s, uint32_t P)
{
    for (size_t i = 0; i < s->nsteps; i++) step_free(&s->steps[i]);
    s->nsteps = 0;
    s->P = P;
}

void deftsim_schedule_free(deftsim_schedule *s)
{
    deftsim_schedule_reset(s, s->P);
    free(s->steps);
    memset(s, 0, sizeof *s);
}

static deftsim_step *add_step(deftsim_schedule *s, deftsim_step_kind kind, const char *name,
                              uint32_t fan)
{
    if (deftsim_grow(&s->steps, &s->cap, s->nsteps + 1, sizeof *s->steps)) {
        deftsim_error_nomem("schedule");
        return NULL;
    }
    deftsim_step *st = &s->steps[s->nsteps];
    memset(st, 0, sizeof *st);
    st->kind = kind;
    snprintf(st->name, sizeof st->name, "%s", name);
    st->fan = fan ? fan : 1;
    size_t P = (s->P ? s->P : 1) * (size_t)st->fan;
    if (kind == DEFTSIM_STEP_COMPUTE) {
        st->seconds = calloc(P, sizeof *st->seconds);
        if (!st->seconds) goto nomem;
    } else {
        st->bytes = calloc(P, sizeof *st->bytes);
        if (!st->bytes) goto nomem;
        if (kind == DEFTSIM_STEP_SENDRECV || kind == DEFTSIM_STEP_P2P) {
            st->peer = malloc(P * sizeof *st->peer);
            if (!st->peer) goto nomem;
            for (size_t r = 0; r < P; r++) st->peer[r] = DEFTSIM_NO_PEER;
        }
    }
    s->nsteps++;
    return st;
nomem:
    step_free(st);
    deftsim_error_nomem("schedule");
    return NULL;
}

deftsim_step *deftsim_schedule_add(deftsim_schedule *s, deftsim_step_kind kind, const char *name)
{
    return add_step(s, kind, name, 1);
}

deftsim_step *deftsim_schedule_add_p2p(deftsim_schedule *s, const char *name, uint32_t fan)
{
    return add_step(s, DEFTSIM_STEP_P2P, name, fan);
}

deftsim_step *deftsim_schedule_add_copy(deftsim_schedule *s, const deftsim_step *src)
{
    deftsim_step *d = add_step(s, src->kind, src->name, src->fan);
    if (!d) return NULL;
    d->root = src->root;
    d->flags = src->flags;
    d->layer = src->layer;
    size_t P = s->P ? s->P : 1;
    if (src->seconds) memcpy(d->seconds, src->seconds, P * sizeof *d->seconds);
    if (src->bytes) memcpy(d->bytes, src->bytes, P * d->fan * sizeof *d->bytes);
    if (src->peer) memcpy(d->peer, src->peer, P * d->fan * sizeof *d->peer);
    return d;
}

const char *deftsim_step_kind_name(deftsim_step_kind k)
{
    switch (k) {
    case DEFTSIM_STEP_COMPUTE: return "compute";
    case DEFTSIM_STEP_ALLGATHER: return "allgather";
    case DEFTSIM_STEP_ALLREDUCE: return "allreduce";
    case DEFTSIM_STEP_BCAST: return "bcast";
    case DEFTSIM_STEP_SENDRECV: return "sendrecv";
    case DEFTSIM_STEP_ALLTOALL: return "alltoall";
    case DEFTSIM_STEP_P2P: return "p2p";
    }
    return "unknown";
}

void deftsim_step_traffic(const deftsim_step *st, uint32_t P, uint32_t elem_bytes,
                          uint64_t *sent, uint64_t *recv)
{
    if (P <= 1 && st->kind != DEFTSIM_STEP_SENDRECV && st->kind != DEFTSIM_STEP_P2P) return;
    switch (st->kind) {
    case DEFTSIM_STEP_COMPUTE:
        return;
    case DEFTSIM_STEP_ALLGATHER: {
        /* Ring: rank r forwards every block but the one of rank r+1 and receives every block
         * but its own. */
        uint64_t total = 0;
        for (uint32_t r = 0; r < P; r++) total += st->bytes[r];
        for (uint32_t r = 0; r < P; r++) {
            sent[r] += total - st->bytes[(r + 1) % P];
            recv[r] += total - st->bytes[r];
        }
        return;
    }
    case DEFTSIM_STEP_ALLREDUCE: {
        /* Ring reduce-scatter then ring allgather over P chunks of near-equal element counts
         * (chunk c: nelem/P elements, one more for c < nelem % P). In the reduce-scatter
         * rank r sends every chunk but r+1 and receives every chunk but r; it then owns chunk
         * r+1, and in the allgather sends every chunk but r+2 and receives every chunk but
         * r+1 (indices mod P). */
        uint64_t nbytes = st->bytes[0];
        uint64_t eb = elem_bytes ? elem_bytes : 1;
        uint64_t nelem = nbytes / eb;
#define CHUNK(c) ((nelem / P + ((uint64_t)(c) < nelem % P)) * eb)
        for (uint32_t r = 0; r < P; r++) {
            sent[r] += (nbytes - CHUNK((r + 1) % P)) + (nbytes - CHUNK((r + 2) % P));
            recv[r] += (nbytes - CHUNK(r)) + (nbytes - CHUNK((r + 1) % P));
        }
#undef CHUNK
        return;
    }
    case DEFTSIM_STEP_BCAST: {
        /* Binomial tree on ranks relative to the root: v > 0 receives once (from v minus its
         * lowest set bit) and sends to v + m for every power of two m below that bit; the
         * root sends to every power of two below P. */
        uint64_t nb = st->bytes[st->root];
        for (uint32_t v = 0; v < P; v++) {
            uint32_t r = (v + st->root) % P;
            if (v) recv[r] += nb;
            uint64_t low = v ? (uint64_t)(v & (~v + 1)) : (uint64_t)P;
            for (uint64_t m = 1; m < low && v + m < P; m <<= 1) sent[r] += nb;
        }
        return;
    }
    case DEFTSIM_STEP_SENDRECV:
        for (uint32_t r = 0; r < P; r++) {
            if (st->peer[r] == DEFTSIM_NO_PEER || st->peer[r] >= P) continue;
            sent[r] += st->bytes[r];
            recv[st->peer[r]] += st->bytes[r];
        }
        return;
    case DEFTSIM_STEP_ALLTOALL:
        /* Pairwise: rank r sends its block to each of the P - 1 others and receives theirs. */
    {
        uint64_t total = 0;
        for (uint32_t r = 0; r < P; r++) total += st->bytes[r];
        for (uint32_t r = 0; r < P; r++) {
            sent[r] += (uint64_t)(P - 1) * st->bytes[r];
            recv[r] += total - st->bytes[r];
        }
        return;
    }
    case DEFTSIM_STEP_P2P:
        for (uint32_t r = 0; r < P; r++)
            for (uint32_t j = 0; j < st->fan; j++) {
                uint32_t d = st->peer[(size_t)r * st->fan + j];
                if (d == DEFTSIM_NO_PEER || d >= P || d == r) continue;
                sent[r] += st->bytes[(size_t)r * st->fan + j];
                recv[d] += st->bytes[(size_t)r * st->fan + j];
            }
        return;
    }
}
