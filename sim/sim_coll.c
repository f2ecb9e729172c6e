/* sim_coll.c - the collective algorithms, as each rank runs them, over the point-to-point layer
 * of sim_internal.h. Sizes are bytes.
 *
 * Each algorithm follows a reference implementation message for message, so that it can be
 * checked against SimGrid SMPI's built-in copy of that implementation (tests/sim): the message
 * sizes, the order in which a rank posts them and whether it waits are the reference's,
 * including how it handles a P that is not a power of two and sizes that P does not divide.
 *
 *   allgather(v)  ring                MPICH's ring allgatherv (SMPI: allgatherv mpich_ring):
 *                                     blocks larger than the smallest one, and than 256 KiB,
 *                                     travel in pieces of that size
 *                 recursive_doubling  MPICH's (SMPI: allgather rdb, allgatherv mpich_rdb): the
 *                                     ranks of a subtree missing a partner get its data from
 *                                     the ranks that have it, by recursive halving
 *                 bruck               Open MPI's (SMPI: allgather bruck, allgatherv ompi_bruck)
 *   allreduce     ring                reduce-scatter then allgather around the ring over P
 *                                     chunks, the first count mod P one element larger (MPICH's
 *                                     and Open MPI's split, MPICH's chunk order; SMPI's lr, a
 *                                     rotation of it, when P divides the count); fewer elements
 *                                     than ranks: recursive doubling, as Open MPI
 *                 recursive_doubling  MPICH's (SMPI: allreduce rdb): the first 2 rem ranks pair
 *                                     up, rem = P - the largest power of two pof2 <= P
 *                 rabenseifner        MPICH's reduce-scatter by recursive halving + allgather
 *                                     by recursive doubling (SMPI: allreduce rab_rdb), pof2
 *                                     chunks, the last holding the remainder; fewer elements than
 *                                     pof2: recursive doubling, as MPICH
 *   bcast         binomial            binomial tree (SMPI: bcast binomial_tree)
 *                 scatter_rdb_allgather   MPICH's binomial scatter + recursive-doubling
 *                                     allgather (SMPI: bcast scatter_rdb_allgather)
 *                 scatter_ring_allgather  binomial scatter + ring allgather (SMPI: bcast
 *                                     scatter_LR_allgather)
 *
 *   alltoall      pairwise            in step i = 0 .. P-1 rank r sends its block to r+i and
 *                                     receives from r-i (step 0 a local copy): MPICH's pairwise
 *                                     exchange for any P (SMPI: alltoall ring)
 *
 * With library = nccl every collective goes to NCCL's algorithms instead (sim_nccl.c).
 *
 * Reductions are not charged: the sums an allreduce computes take no simulated time (as in
 * SMPI with smpi/simulate-computation off).
 *
 * Call order in sim/: docs/ARCHITECTURE.md, the sim/ row of its folder table. */
#include <stdint.h>

#include "sim_internal.h"

/* ---- allgather(v) ---------------------------------------------------------------------------- */

/* MPICH's pipeline size for ring allgatherv (SMPI's constant: 32768 * 8 bytes). */
#define RING_PIPELINE_BYTES 262144u

/* Sum of b[(r + i) mod P] for i in [0, n), from the prefix sums. */
static uint64_t block_sum(const sim_ag_info *in, uint32_t P, uint32_t r, uint32_t n)
{
    const uint64_t *pre = in->prefix;
    if ((uint64_t)r + n <= P) return pre[r + n] - pre[r];
    return (pre[P] - pre[r]) + pre[r + n - P];
}

/* Approximate mode for an equal-block ring: steps 1 .. SIM_APPROX_RING_STEPS run; the others
 * repeat the same exchange (the same block size between the same neighbours), and a ring moves
 * at the pace of its slowest hop, so every rank ends the ring at the latest end of the sampled
 * steps plus the remaining steps at the longest sampled step. Returns 1 if it handled the
 * ring. */
static int ring_approx_sizes(sim_worker *w, const deftsim_sim_params *p, uint32_t steps,
                             const uint64_t *bytes)
{
    if (p->mode != DEFTSIM_SIM_APPROXIMATE || steps <= SIM_APPROX_RING_STEPS) return 0;
    uint32_t P = sim_size(w), r = sim_rank(w);
    uint32_t left = (r + P - 1) % P, right = (r + 1) % P;
    /* The ranks first wait for the latest of them to enter the ring (after a broadcast they
     * enter up to log2 P hops apart): in the full ring every rank's last step waits for it
     * anyway, and a sampled step that included the wait would be charged for every step. */
    double start, unused;
    sim_approx_agree(w, sim_now(), 0, &start, &unused);
    sim_sleep(start - sim_now());
    double last = 0;
    for (uint32_t i = 0; i < SIM_APPROX_RING_STEPS; i++) {
        double t0 = sim_now();
        sim_sendrecv(w, right, bytes[i], left);
        last = sim_now() - t0;
    }
    double end, step;
    sim_approx_agree(w, sim_now(), last, &end, &step);
    sim_sleep(end + (double)(steps - SIM_APPROX_RING_STEPS) * step - sim_now());
    return 1;
}

static int ring_approx(sim_worker *w, const deftsim_sim_params *p, uint32_t steps, uint64_t bytes)
{
    uint64_t b[SIM_APPROX_RING_STEPS];
    for (uint32_t i = 0; i < SIM_APPROX_RING_STEPS; i++) b[i] = bytes;
    return ring_approx_sizes(w, p, steps, b);
}

static void ag_ring(sim_worker *w, const deftsim_sim_params *p, const uint64_t *b,
                    const sim_ag_info *in)
{
    uint32_t P = sim_size(w), r = sim_rank(w);
    uint32_t left = (r + P - 1) % P, right = (r + 1) % P;
    uint64_t min = in->min < RING_PIPELINE_BYTES ? RING_PIPELINE_BYTES : in->min;
    if (in->equal && b[0] <= min && ring_approx(w, p, P - 1, b[0])) return;
    uint64_t torecv = in->total - b[r], tosend = in->total - b[right];
    uint32_t sidx = r, ridx = left;
    uint64_t soff = 0, roff = 0;
    while (tosend || torecv) {
        uint64_t sendnow = b[sidx] - soff > min ? min : b[sidx] - soff;
        uint64_t recvnow = b[ridx] - roff > min ? min : b[ridx] - roff;
        if (!tosend) sendnow = 0;
        if (!torecv) recvnow = 0;
        if (!sendnow && !recvnow) {
            /* two neighbours both contribute nothing: nothing to move */
        } else if (!sendnow) {
            sim_recv(w, left);
            torecv -= recvnow;
        } else if (!recvnow) {
            sim_send(w, right, sendnow);
            tosend -= sendnow;
        } else {
            sim_sendrecv(w, right, sendnow, left);
            tosend -= sendnow;
            torecv -= recvnow;
        }
        soff += sendnow;
        roff += recvnow;
        if (soff == b[sidx]) {
            soff = 0;
            sidx = (sidx + P - 1) % P;
        }
        if (roff == b[ridx]) {
            roff = 0;
            ridx = (ridx + P - 1) % P;
        }
    }
}

static void ag_rdb(sim_worker *w, const uint64_t *b)
{
    int64_t P = sim_size(w), r = sim_rank(w);
    uint64_t curr = b[r], last = 0;
    int64_t mask = 1;
    int i = 0;
    while (mask < P) {
        int64_t dst = r ^ mask;
        int64_t dst_tree_root = (dst >> i) << i, my_tree_root = (r >> i) << i;
        if (dst < P) {
            last = sim_sendrecv(w, (uint32_t)dst, curr, (uint32_t)dst);
            curr += last;
        }
        /* Ranks of this subtree whose partner does not exist get the partner subtree's data
         * from the ranks that have it, halving the distance each time. */
        if (dst_tree_root + mask > P) {
            int64_t completed = P - my_tree_root - mask;
            int k = 0;
            for (int64_t j = mask; j; j >>= 1) k++;
            k--;
            for (int64_t tmp = mask >> 1; tmp; tmp >>= 1, k--) {
                int64_t d = r ^ tmp, tree_root = (r >> k) << k;
                if (d > r && r < tree_root + completed && d >= tree_root + completed) {
                    sim_send(w, (uint32_t)d, last);
                } else if (d < r && d < tree_root + completed && r >= tree_root + completed) {
                    last = sim_recv(w, (uint32_t)d);
                    curr += last;
                }
            }
        }
        mask <<= 1;
        i++;
    }
}

static void ag_bruck(sim_worker *w, const sim_ag_info *in)
{
    uint32_t P = sim_size(w), r = sim_rank(w);
    for (uint32_t dist = 1; dist < P; dist <<= 1) {
        uint32_t from = (r + dist) % P, to = (r + P - dist) % P;
        uint32_t blocks = dist <= (P >> 1) ? dist : P - dist;
        sim_sendrecv(w, to, block_sum(in, P, r, blocks), from);
    }
}

void sim_allgather(sim_worker *w, const deftsim_sim_params *p, const uint64_t *bytes,
                   const sim_ag_info *info)
{
    if (sim_size(w) < 2) return;
    if (p->library == DEFTSIM_LIB_NCCL) {
        sim_nccl_allgather(w, p, bytes, info);
        return;
    }
    switch (p->allgather) {
    case DEFTSIM_AG_RING: ag_ring(w, p, bytes, info); return;
    case DEFTSIM_AG_RECURSIVE_DOUBLING: ag_rdb(w, bytes); return;
    case DEFTSIM_AG_BRUCK:
    case DEFTSIM_AG_COUNT: ag_bruck(w, info); return;
    }
}

/* ---- allreduce --------------------------------------------------------------------------------- */

static uint32_t pof2_below(uint32_t P)
{
    uint32_t pof2 = 1;
    while (pof2 <= P / 2) pof2 <<= 1;
    return pof2;
}

static void ar_rdb(sim_worker *w, uint64_t bytes)
{
    uint32_t P = sim_size(w), r = sim_rank(w);
    uint32_t pof2 = pof2_below(P), rem = P - pof2;
    int64_t newrank;
    if (r < 2 * rem) {
        if (r % 2 == 0) {
            sim_send(w, r + 1, bytes);
            newrank = -1;
        } else {
            sim_recv(w, r - 1);
            newrank = r / 2;
        }
    } else {
        newrank = (int64_t)r - rem;
    }
    if (newrank != -1) {
        for (uint32_t mask = 1; mask < pof2; mask <<= 1) {
            uint32_t newdst = (uint32_t)newrank ^ mask;
            uint32_t dst = newdst < rem ? newdst * 2 + 1 : newdst + rem;
            sim_sendrecv(w, dst, bytes, dst);
        }
    }
    if (r < 2 * rem) {
        if (r % 2)
            sim_send(w, r - 1, bytes);
        else
            sim_recv(w, r + 1);
    }
}

static void ar_ring(sim_worker *w, const deftsim_sim_params *p, uint64_t bytes)
{
    uint32_t P = sim_size(w), r = sim_rank(w);
    uint64_t e = p->elem_bytes && bytes % p->elem_bytes == 0 ? p->elem_bytes : 1;
    uint64_t count = bytes / e;
    if (count < P) {
        ar_rdb(w, bytes);
        return;
    }
    uint64_t base = count / P, extra = count % P;
#define CHUNK(c) ((base + ((uint64_t)(c) < extra)) * e)
    uint32_t left = (r + P - 1) % P, right = (r + 1) % P;
    /* Approximate mode samples each phase's first steps with their own chunks: chunks differ by
     * one element at most, so the steps left out are the sampled ones to within an element. */
    uint64_t rs[SIM_APPROX_RING_STEPS], ag[SIM_APPROX_RING_STEPS];
    for (uint32_t i = 0; i < SIM_APPROX_RING_STEPS; i++) {
        rs[i] = CHUNK((r + P - i % P) % P);
        ag[i] = CHUNK((r + 1 + P - i % P) % P);
    }
    /* Reduce-scatter, MPICH's chunk order: in step i rank r sends chunk r-i and receives chunk
     * r-i-1, so that it ends owning chunk r+1. */
    if (!ring_approx_sizes(w, p, P - 1, rs))
        for (uint32_t i = 0; i + 1 < P; i++)
            sim_sendrecv(w, right, CHUNK((r + P - i) % P), left);
    /* Allgather of the reduced chunks: rank r sends chunk r+1-i, receives chunk r-i. */
    if (!ring_approx_sizes(w, p, P - 1, ag))
        for (uint32_t i = 0; i + 1 < P; i++)
            sim_sendrecv(w, right, CHUNK((r + 1 + P - i) % P), left);
#undef CHUNK
}

static void ar_rabenseifner(sim_worker *w, const deftsim_sim_params *p, uint64_t bytes)
{
    uint32_t P = sim_size(w), r = sim_rank(w);
    uint64_t e = p->elem_bytes && bytes % p->elem_bytes == 0 ? p->elem_bytes : 1;
    uint64_t count = bytes / e;
    uint32_t pof2 = pof2_below(P), rem = P - pof2;
    if (count < pof2) {
        ar_rdb(w, bytes);
        return;
    }
    int64_t newrank;
    if (r < 2 * rem) {
        if (r % 2 == 0) {
            sim_send(w, r + 1, bytes);
            newrank = -1;
        } else {
            sim_recv(w, r - 1);
            newrank = r / 2;
        }
    } else {
        newrank = (int64_t)r - rem;
    }
    if (newrank != -1) {
        /* cnts[i] = count / pof2, the last one count - (pof2 - 1) * (count / pof2): the sum
         * over chunks [a, b) is (b - a) * base, plus the remainder when b reaches pof2. */
        uint64_t base = count / pof2, last_extra = count - base * pof2;
#define CHUNKS(a, b) (((uint64_t)(b) - (a)) * base + ((b) == pof2 && (a) < (b) ? last_extra : 0))
        uint32_t nr = (uint32_t)newrank;
        uint32_t send_idx = 0, recv_idx = 0, last_idx = pof2;
        uint32_t mask = 1;
        /* Reduce-scatter by recursive halving. */
        while (mask < pof2) {
            uint32_t newdst = nr ^ mask;
            uint32_t dst = newdst < rem ? newdst * 2 + 1 : newdst + rem;
            uint64_t send_cnt;
            if (nr < newdst) {
                send_idx = recv_idx + pof2 / (mask * 2);
                send_cnt = CHUNKS(send_idx, last_idx);
            } else {
                recv_idx = send_idx + pof2 / (mask * 2);
                send_cnt = CHUNKS(send_idx, recv_idx);
            }
            sim_sendrecv(w, dst, send_cnt * e, dst);
            send_idx = recv_idx;
            mask <<= 1;
            if (mask < pof2) last_idx = recv_idx + pof2 / mask;
        }
        /* Allgather by recursive doubling. */
        mask >>= 1;
        while (mask > 0) {
            uint32_t newdst = nr ^ mask;
            uint32_t dst = newdst < rem ? newdst * 2 + 1 : newdst + rem;
            uint64_t send_cnt;
            if (nr < newdst) {
                if (mask != pof2 / 2) last_idx = last_idx + pof2 / (mask * 2);
                recv_idx = send_idx + pof2 / (mask * 2);
                send_cnt = CHUNKS(send_idx, recv_idx);
            } else {
                recv_idx = send_idx - pof2 / (mask * 2);
                send_cnt = CHUNKS(send_idx, last_idx);
            }
            sim_sendrecv(w, dst, send_cnt * e, dst);
            if (nr > newdst) send_idx = recv_idx;
            mask >>= 1;
        }
#undef CHUNKS
    }
    if (r < 2 * rem) {
        if (r % 2)
            sim_send(w, r - 1, bytes);
        else
            sim_recv(w, r + 1);
    }
}

void sim_allreduce(sim_worker *w, const deftsim_sim_params *p, uint64_t bytes)
{
    if (sim_size(w) < 2) return;
    if (p->library == DEFTSIM_LIB_NCCL) {
        sim_nccl_allreduce(w, p, bytes);
        return;
    }
    switch (p->allreduce) {
    case DEFTSIM_AR_RING: ar_ring(w, p, bytes); return;
    case DEFTSIM_AR_RECURSIVE_DOUBLING: ar_rdb(w, bytes); return;
    case DEFTSIM_AR_RABENSEIFNER:
    case DEFTSIM_AR_COUNT: ar_rabenseifner(w, p, bytes); return;
    }
}

/* ---- broadcast --------------------------------------------------------------------------------- */

static void bc_binomial(sim_worker *w, uint32_t root, uint64_t bytes)
{
    uint32_t P = sim_size(w), r = sim_rank(w);
    uint32_t rel = (r + P - root) % P;
    uint64_t mask = 1;
    while (mask < P) {
        if (rel & mask) {
            sim_recv(w, (uint32_t)((r + P - mask) % P));
            break;
        }
        mask <<= 1;
    }
    for (mask >>= 1; mask > 0; mask >>= 1)
        if (rel + mask < P) sim_send(w, (uint32_t)((r + mask) % P), bytes);
}

/* MPICH's binomial scatter for a broadcast: rank rel ends with the piece of up to
 * ceil(bytes / P) bytes at offset rel * piece (some ranks get nothing). Returns what this rank
 * holds afterwards (its whole subtree's pieces before it forwards them, then its own). */
static int64_t bc_scatter(sim_worker *w, uint32_t root, int64_t nbytes, int64_t piece)
{
    int64_t P = sim_size(w), r = sim_rank(w);
    int64_t rel = (r + P - root) % P;
    int64_t curr = rel == 0 ? nbytes : 0;
    int64_t mask = 1;
    while (mask < P) {
        if (rel & mask) {
            if (nbytes - rel * piece <= 0)
                curr = 0;
            else
                curr = (int64_t)sim_recv(w, (uint32_t)((r - mask + P) % P));
            break;
        }
        mask <<= 1;
    }
    for (mask >>= 1; mask > 0; mask >>= 1) {
        if (rel + mask < P) {
            int64_t send = curr - piece * mask;
            if (send > 0) {
                sim_send(w, (uint32_t)((r + mask) % P), (uint64_t)send);
                curr -= send;
            }
        }
    }
    return curr;
}

static void bc_scatter_rdb_allgather(sim_worker *w, uint32_t root, uint64_t bytes)
{
    int64_t P = sim_size(w), r = sim_rank(w);
    int64_t nbytes = (int64_t)bytes;
    if (nbytes == 0) return;
    int64_t piece = (nbytes + P - 1) / P;
    bc_scatter(w, root, nbytes, piece);
    int64_t rel = (r + P - root) % P;
    int64_t curr = nbytes - rel * piece;
    if (curr > piece) curr = piece;
    if (curr < 0) curr = 0;
    int64_t recv_size = 0;
    int64_t mask = 1;
    int i = 0;
    while (mask < P) {
        int64_t rel_dst = rel ^ mask;
        uint32_t dst = (uint32_t)((rel_dst + root) % P);
        int64_t dst_tree_root = (rel_dst >> i) << i, my_tree_root = (rel >> i) << i;
        if (rel_dst < P) {
            recv_size = (int64_t)sim_sendrecv(w, dst, (uint64_t)curr, dst);
            curr += recv_size;
        }
        if (dst_tree_root + mask > P) {
            int64_t completed = P - my_tree_root - mask;
            int k = 0;
            for (int64_t j = mask; j; j >>= 1) k++;
            k--;
            for (int64_t tmp = mask >> 1; tmp; tmp >>= 1, k--) {
                int64_t rd = rel ^ tmp, tree_root = (rel >> k) << k;
                uint32_t d = (uint32_t)((rd + root) % P);
                if (rd > rel && rel < tree_root + completed && rd >= tree_root + completed) {
                    sim_send(w, d, (uint64_t)recv_size);
                } else if (rd < rel && rd < tree_root + completed && rel >= tree_root + completed) {
                    recv_size = (int64_t)sim_recv(w, d);
                    curr += recv_size;
                }
            }
        }
        mask <<= 1;
        i++;
    }
}

static void bc_scatter_ring_allgather(sim_worker *w, uint32_t root, uint64_t bytes)
{
    int64_t P = sim_size(w), r = sim_rank(w);
    int64_t nbytes = (int64_t)bytes;
    int64_t piece = (nbytes + P - 1) / P;
    bc_scatter(w, root, nbytes, piece);
#define PIECE(i) (nbytes - (i) * piece > piece ? piece : (nbytes - (i) * piece < 0 ? 0 : nbytes - (i) * piece))
    uint32_t left = (uint32_t)((P + r - 1) % P), right = (uint32_t)((r + 1) % P);
    int64_t src = r;
    for (int64_t i = 1; i < P; i++) {
        sim_sendrecv(w, right, (uint64_t)PIECE((src - root + P) % P), left);
        src = (P + src - 1) % P;
    }
#undef PIECE
}

void sim_bcast(sim_worker *w, const deftsim_sim_params *p, uint32_t root, uint64_t bytes)
{
    if (sim_size(w) < 2) return;
    if (p->library == DEFTSIM_LIB_NCCL) {
        sim_nccl_bcast(w, p, root, bytes);
        return;
    }
    switch (p->bcast) {
    case DEFTSIM_BC_BINOMIAL: bc_binomial(w, root, bytes); return;
    case DEFTSIM_BC_SCATTER_RDB_ALLGATHER: bc_scatter_rdb_allgather(w, root, bytes); return;
    case DEFTSIM_BC_SCATTER_RING_ALLGATHER:
    case DEFTSIM_BC_COUNT: bc_scatter_ring_allgather(w, root, bytes); return;
    }
}

/* ---- alltoall ---------------------------------------------------------------------------------- */

void sim_alltoall(sim_worker *w, const deftsim_sim_params *p, uint64_t bytes, int equal)
{
    uint32_t P = sim_size(w), r = sim_rank(w);
    if (P < 2) return;
    if (p->library == DEFTSIM_LIB_NCCL) {
        sim_nccl_alltoall(w, p, bytes, equal);
        return;
    }
    for (uint32_t i = 1; i < P; i++) sim_sendrecv(w, (r + i) % P, bytes, (r + P - i) % P);
}
