/* smpi_coll.c - the SMPI side of tests/sim: runs one collective with SimGrid SMPI's built-in
 * algorithms (chosen with --cfg=smpi/<collective>:<algorithm> on the smpirun line) for a list
 * of sizes, and prints when each rank finished it.
 *
 *     smpirun -np P ... smpi_coll.so KIND ELEM_BYTES ROOT SIZE...
 *
 * KIND: allgather (SIZE bytes from every rank), allgatherv (rank r contributes
 * deftsim_test_vsize(SIZE, r) bytes), allgatherv_equal (MPI_Allgatherv with SIZE bytes from
 * every rank: SMPI's ring allgather is not MPICH's, its ring allgatherv is), allreduce (SIZE bytes of ELEM_BYTES-byte elements, sum),
 * bcast (SIZE bytes from ROOT), gtopk (gTop-k's tree of SIZE-byte messages: the extra ranks
 * fold into the first ones, then pairwise rounds toward rank 0, then a broadcast from 0),
 * alltoall (SIZE bytes to every rank), oktopk and oktopk_uneven (Ok-Topk's split-and-reduce:
 * rounds of up to 4 peers, rank r sending an index and a value message to r + i and receiving
 * them from r - i, deftsim_test_pair_size bytes each, Irecv/Isend then Waitall per round).
 *
 * Every rank starts collective k at the same simulated instant T_k = 1000 (k + 1) seconds, by
 * computing until then: nothing else (no barrier, no reduction of the results) moves the
 * clocks, so each collective is timed from a common start as deftsim times a schedule. Each
 * rank prints "R k rank seconds" (its end minus T_k); the caller takes the largest.
 * Buffers come from SMPI_SHARED_MALLOC: all ranks share their pages, and SMPI copies nothing
 * of them, so 8 MiB per rank at P = 64 costs neither memory nor time. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#include "vsize.h"

static void wait_until(double t)
{
    double now = MPI_Wtime();
    /* smpi_execute(d) computes for d * smpi/host-speed flops on this host: with the host
     * speed set to the platform's host speed (tests/sim sets both), exactly d seconds. */
    if (t > now) smpi_execute(t - now);
}

static void gtopk_tree(int rank, int P, int bytes, char *buf)
{
    int P2 = 1;
    while (P2 <= P / 2) P2 <<= 1;
    if (rank >= P2)
        MPI_Send(buf, bytes, MPI_BYTE, rank - P2, 7, MPI_COMM_WORLD);
    else if (rank < P - P2)
        MPI_Recv(buf, bytes, MPI_BYTE, rank + P2, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    for (int step = 1; step < P2; step <<= 1) {
        if (rank >= P2 || rank % step) continue;
        if (rank % (2 * step))
            MPI_Send(buf, bytes, MPI_BYTE, rank - step, 7, MPI_COMM_WORLD);
        else if (rank + step < P2)
            MPI_Recv(buf, bytes, MPI_BYTE, rank + step, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    MPI_Bcast(buf, bytes, MPI_BYTE, 0, MPI_COMM_WORLD);
}

static void oktopk_rounds(int rank, int P, int size, int uneven, char *sbuf, char *rbuf)
{
    const int th = (int)DEFTSIM_TEST_OKTOPK_THROTTLE;
    MPI_Request req[4 * DEFTSIM_TEST_OKTOPK_THROTTLE];
    for (int first = 0; first < P; first += th) {
        int n = 0;
        for (int i = first; i < first + th && i < P; i++) {
            if (i == 0) continue;
            int src = (rank - i + P) % P;
            int b = (int)deftsim_test_pair_size((uint64_t)size, (uint32_t)src, (uint32_t)rank, uneven);
            MPI_Irecv(rbuf, b, MPI_BYTE, src, 1, MPI_COMM_WORLD, &req[n++]);
            MPI_Irecv(rbuf, b, MPI_BYTE, src, 2, MPI_COMM_WORLD, &req[n++]);
        }
        for (int i = first; i < first + th && i < P; i++) {
            if (i == 0) continue;
            int dst = (rank + i) % P;
            int b = (int)deftsim_test_pair_size((uint64_t)size, (uint32_t)rank, (uint32_t)dst, uneven);
            MPI_Isend(sbuf, b, MPI_BYTE, dst, 1, MPI_COMM_WORLD, &req[n++]);
            MPI_Isend(sbuf, b, MPI_BYTE, dst, 2, MPI_COMM_WORLD, &req[n++]);
        }
        MPI_Waitall(n, req, MPI_STATUSES_IGNORE);
    }
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, P;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &P);
    if (argc < 5) {
        if (rank == 0) fprintf(stderr, "usage: KIND ELEM_BYTES ROOT SIZE...\n");
        MPI_Finalize();
        return 2;
    }
    const char *kind = argv[1];
    int elem = atoi(argv[2]), root = atoi(argv[3]);
    long max = 0;
    for (int i = 4; i < argc; i++)
        if (atol(argv[i]) > max) max = atol(argv[i]);
    /* Allgathers receive P blocks; everything else one. */
    int gather = strncmp(kind, "allgather", 9) == 0 || strcmp(kind, "alltoall") == 0;
    char *sbuf = SMPI_SHARED_MALLOC((size_t)max + 64);
    char *rbuf = SMPI_SHARED_MALLOC((size_t)max * (gather ? (size_t)P : 1) + 64);
    int *counts = malloc((size_t)P * sizeof *counts), *displs = malloc((size_t)P * sizeof *displs);
    for (int k = 0; k + 4 < argc; k++) {
        int size = atoi(argv[k + 4]);
        double t0 = 1000.0 * (k + 1);
        wait_until(t0);
        if (strcmp(kind, "allgather") == 0) {
            MPI_Allgather(sbuf, size, MPI_BYTE, rbuf, size, MPI_BYTE, MPI_COMM_WORLD);
        } else if (strcmp(kind, "allgatherv") == 0 || strcmp(kind, "allgatherv_equal") == 0) {
            int equal = kind[10] != '\0', off = 0;
            for (int r = 0; r < P; r++) {
                counts[r] = equal ? size : (int)deftsim_test_vsize((uint64_t)size, (uint32_t)r);
                displs[r] = off;
                off += counts[r];
            }
            MPI_Allgatherv(sbuf, counts[rank], MPI_BYTE, rbuf, counts, displs, MPI_BYTE,
                           MPI_COMM_WORLD);
        } else if (strcmp(kind, "allreduce") == 0) {
            MPI_Datatype t = elem == 8 ? MPI_DOUBLE : elem == 2 ? MPI_SHORT : MPI_FLOAT;
            MPI_Allreduce(sbuf, rbuf, size / elem, t, elem == 2 ? MPI_MAX : MPI_SUM, MPI_COMM_WORLD);
        } else if (strcmp(kind, "bcast") == 0) {
            MPI_Bcast(sbuf, size, MPI_BYTE, root, MPI_COMM_WORLD);
        } else if (strcmp(kind, "alltoall") == 0) {
            MPI_Alltoall(sbuf, size, MPI_BYTE, rbuf, size, MPI_BYTE, MPI_COMM_WORLD);
        } else if (strcmp(kind, "oktopk") == 0 || strcmp(kind, "oktopk_uneven") == 0) {
            oktopk_rounds(rank, P, size, kind[6] != '\0', sbuf, rbuf);
        } else if (strcmp(kind, "gtopk") == 0) {
            gtopk_tree(rank, P, size, sbuf);
        } else {
            if (rank == 0) fprintf(stderr, "unknown kind %s\n", kind);
            MPI_Finalize();
            return 2;
        }
        printf("R %d %d %.17g\n", k, rank, MPI_Wtime() - t0);
    }
    fflush(stdout);
    free(counts);
    free(displs);
    SMPI_SHARED_FREE(sbuf);
    SMPI_SHARED_FREE(rbuf);
    MPI_Finalize();
    return 0;
}
