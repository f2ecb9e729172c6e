/* net_mpi.c - the real network mode (deftsim_net_mpi.h, docs/CLUSTER.md "Real mode"): rank 0
 * serialises a point's schedules into 64-bit words and broadcasts them; every rank executes
 * each collective with MPI's own call and the schedule's byte counts, timed from the end of a
 * barrier with MPI_Wtime; rank 0 collects the maximum time over ranks and each rank's counted
 * bytes. The payload is a zeroed buffer of the schedule's size: the time on the wire depends on
 * the sizes, not on the values. */
#include "deftsim_net_mpi.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deftsim_util.h"

void deftsim_mpi_result_free(deftsim_mpi_result *r)
{
    free(r->first);
    free(r->seconds);
    free(r->sent);
    free(r->recv);
    free(r->comm_seconds);
    memset(r, 0, sizeof *r);
}

int deftsim_mpi_launched_ranks(void)
{
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (!v || !*v) continue;
        char *end;
        long r = strtol(v, &end, 10);
        if (*end == '\0' && r > 0 && r <= 1000000) return (int)r;
    }
    return 0;
}

deftsim_status deftsim_mpi_check_launch(const char *command, int real_mode, int *spread)
{
    int r = deftsim_mpi_launched_ranks();
    *spread = 0;
    if (r <= 1 || real_mode) return DEFTSIM_OK;
    if (strcmp(command, "run") != 0 && strcmp(command, "sweep") != 0)
        return deftsim_error_set(
            DEFTSIM_E_INPUT,
            "deftsim %s: started by an MPI launcher with %d ranks: spread mode (a point's "
            "simulated workers spread over the ranks) runs 'deftsim run' and 'deftsim sweep' "
            "only, and %d processes would each run every point into the same folder; run one "
            "process (docs/CLUSTER.md)",
            command, r, r);
    if (!deftsim_mpi_built())
        return deftsim_error_set(
            DEFTSIM_E_INPUT,
            "deftsim %s: started by an MPI launcher with %d ranks, but this deftsim was built "
            "without MPI: spread mode needs it (install libopenmpi-dev and rebuild with "
            "-Dmpi=enabled), and %d processes would each run every point into the same folder",
            command, r, r);
    *spread = 1;
    return DEFTSIM_OK;
}

#ifndef DEFTSIM_HAVE_MPI

static deftsim_status no_mpi(void)
{
    return deftsim_error_set(DEFTSIM_E_INPUT, "[execute] network = mpi: this deftsim was built "
                             "without MPI (install libopenmpi-dev and rebuild with -Dmpi=enabled)");
}
int deftsim_mpi_built(void) { return 0; }
deftsim_status deftsim_mpi_init(int *rank, int *size)
{
    *rank = 0;
    *size = 1;
    return no_mpi();
}
int deftsim_mpi_active(void) { return 0; }
int deftsim_mpi_size(void) { return 1; }
deftsim_status deftsim_mpi_serve(void) { return no_mpi(); }
deftsim_status deftsim_mpi_execute(const deftsim_schedule *const *s, size_t n, uint32_t elem_bytes,
                                   deftsim_mpi_result *res)
{
    (void)s, (void)n, (void)elem_bytes;
    memset(res, 0, sizeof *res);
    return no_mpi();
}
void deftsim_mpi_release(void) {}
void deftsim_mpi_finalize(void) {}
deftsim_status deftsim_mpi_spread_team(deftsim_team *t)
{
    memset(t, 0, sizeof *t);
    return no_mpi();
}
void deftsim_mpi_abort(int code) { (void)code; }
const char *deftsim_mpi_library(void) { return ""; }
const char *deftsim_mpi_buffers(void) { return ""; }

#else

#include <limits.h>
#include <mpi.h>
#include <time.h>

/* Open MPI declares its CUDA support in mpi-ext.h (MPIX_CUDA_AWARE_SUPPORT at build time,
 * MPIX_Query_cuda_support() at run time). */
#if defined(OPEN_MPI) && OPEN_MPI && defined(__has_include)
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>
#endif
#endif
#ifdef DEFTSIM_HAVE_CUDA
#include "deftsim_kcuda.h"
#endif

enum { CMD_STOP = 0, CMD_RUN = 1 };

static int g_active, g_rank, g_size, g_released;
static char g_lib[MPI_MAX_LIBRARY_VERSION_STRING + 1];

int deftsim_mpi_built(void) { return 1; }
int deftsim_mpi_active(void) { return g_active; }
int deftsim_mpi_size(void) { return g_active ? g_size : 1; }
const char *deftsim_mpi_library(void) { return g_lib; }

deftsim_status deftsim_mpi_init(int *rank, int *size)
{
    int provided = 0, len = 0;
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
        return deftsim_error_set(DEFTSIM_E_IO, "[execute] network = mpi: MPI_Init failed");
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    MPI_Get_library_version(g_lib, &len);
    g_lib[len < 0 ? 0 : len] = 0;
    char *nl = strchr(g_lib, '\n');
    if (nl) *nl = 0;
    for (char *c = g_lib; *c; c++)
        if (*c == ',' || *c == '"' || (unsigned char)*c < 32) *c = ' ';
    g_active = 1;
    *rank = g_rank;
    *size = g_size;
    return DEFTSIM_OK;
}

void deftsim_mpi_finalize(void)
{
    if (!g_active) return;
    MPI_Finalize();
    g_active = 0;
}

/* ---- the words: per schedule its step count, per step kind, root, fan, flags, then for a
 * collective its P * fan byte counts and for SENDRECV and P2P its P * fan peers. */

typedef struct {
    uint64_t *w;
    size_t n, cap;
} words;

static int put(words *v, uint64_t x)
{
    if (deftsim_grow(&v->w, &v->cap, v->n + 1, sizeof *v->w)) return -1;
    v->w[v->n++] = x;
    return 0;
}

static int has_peers(uint64_t kind) { return kind == DEFTSIM_STEP_SENDRECV || kind == DEFTSIM_STEP_P2P; }

static int serialise(const deftsim_schedule *const *s, size_t n, words *v)
{
    for (size_t i = 0; i < n; i++) {
        if (put(v, s[i]->nsteps)) return -1;
        for (size_t k = 0; k < s[i]->nsteps; k++) {
            const deftsim_step *st = &s[i]->steps[k];
            uint64_t fan = st->kind == DEFTSIM_STEP_P2P ? st->fan : 1;
            if (put(v, st->kind) || put(v, st->root) || put(v, fan) || put(v, st->flags)) return -1;
            if (st->kind == DEFTSIM_STEP_COMPUTE) continue;
            for (uint64_t j = 0; j < s[i]->P * fan; j++)
                if (put(v, st->bytes[j])) return -1;
            if (has_peers(st->kind))
                for (uint64_t j = 0; j < s[i]->P * fan; j++)
                    if (put(v, st->peer[j])) return -1;
        }
    }
    return 0;
}

/* A step read back from the words (pointers into them). */
typedef struct {
    uint64_t kind, root, fan, flags;
    const uint64_t *bytes, *peer;
} wstep;

static const uint64_t *read_step(const uint64_t *p, uint32_t P, wstep *st)
{
    st->kind = p[0], st->root = p[1], st->fan = p[2], st->flags = p[3];
    p += 4;
    st->bytes = st->peer = NULL;
    if (st->kind == DEFTSIM_STEP_COMPUTE) return p;
    st->bytes = p;
    p += P * st->fan;
    if (has_peers(st->kind)) {
        st->peer = p;
        p += P * st->fan;
    }
    return p;
}

/* ---- where the payload lives ----------------------------------------------------------------
 * Device memory when deftsim has CUDA, this rank has a usable device and the MPI library says
 * it is CUDA-aware: the collectives then move device buffers directly, as a training job's
 * do. Otherwise host memory. Every rank must agree (one rank's host buffer against another's
 * device buffer would time something else), so the choice is the minimum over the ranks. */

static int g_dev_ok = -1;         /* this rank could use device buffers */
static char g_dev_why[256];

static void device_decide(void)
{
    if (g_dev_ok >= 0) return;
    g_dev_ok = 0;
#ifndef DEFTSIM_HAVE_CUDA
    snprintf(g_dev_why, sizeof g_dev_why, "host: this deftsim was built without CUDA");
#else
    const char *why = deftsim_kcuda_unavailable();
    if (why) {
        snprintf(g_dev_why, sizeof g_dev_why, "host: %s", why);
        return;
    }
#if defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
    if (MPIX_Query_cuda_support()) {
        g_dev_ok = 1;
        snprintf(g_dev_why, sizeof g_dev_why,
                 "device: the MPI library is CUDA-aware (MPIX_Query_cuda_support)");
    } else {
        snprintf(g_dev_why, sizeof g_dev_why, "host: the MPI library was built CUDA-aware, but "
                 "its CUDA support is off at run time (MPIX_Query_cuda_support = 0)");
    }
#else
    snprintf(g_dev_why, sizeof g_dev_why,
             "host: the MPI library does not declare CUDA support (no MPIX_CUDA_AWARE_SUPPORT "
             "in mpi-ext.h)");
#endif
#endif
}

const char *deftsim_mpi_buffers(void)
{
    device_decide();
    return g_dev_why;
}

/* ---- execution */

typedef struct {
    char *sbuf, *rbuf;
    size_t scap, rcap;
    int dev;                      /* sbuf and rbuf are device memory of a fixed capacity */
#ifdef DEFTSIM_HAVE_CUDA
    deftsim_kcuda_pool *pool;
    deftsim_kctx *kc;
#endif
    MPI_Request *req;
    MPI_Status *stat;
    int *cnt, *displ, *scnt, *sdispl;
    size_t reqcap;
} xbufs;

static int grow(const xbufs *x, char **b, size_t *cap, size_t need)
{
    if (need <= *cap) return 0;
    if (x->dev) return -1; /* device buffers are sized for the whole point at once */
    char *nb = realloc(*b, need);
    if (!nb) return -1;
    memset(nb + *cap, 0, need - *cap);
    *b = nb;
    *cap = need;
    return 0;
}

static deftsim_status too_big(uint64_t b)
{
    return deftsim_error_set(DEFTSIM_E_INPUT, "[execute] network = mpi: a message of %llu bytes "
                             "is over MPI's int count", (unsigned long long)b);
}

/* Point-to-point rounds: receives from every sender ascending (then slot), then the sends,
 * then MPI_Waitall; a received byte count is MPI_Get_count's. */
static deftsim_status run_p2p(const wstep *st, uint32_t P, int me, xbufs *x, uint64_t *sent,
                              uint64_t *recv)
{
    uint64_t fan = st->fan, in = 0, out = 0;
    int p2p = st->kind == DEFTSIM_STEP_P2P;
    for (uint64_t j = 0; j < P * fan; j++) {
        uint64_t pe = st->peer[j];
        if (pe == DEFTSIM_NO_PEER || pe >= P || (p2p && pe == j / fan)) continue;
        if (st->bytes[j] > INT_MAX) return too_big(st->bytes[j]);
        if (pe == (uint64_t)me) in += st->bytes[j];
        if (j / fan == (uint64_t)me && st->bytes[j] > out) out = st->bytes[j];
    }
    if (grow(x, &x->rbuf, &x->rcap, in + 1) || grow(x, &x->sbuf, &x->scap, out + 1))
        return deftsim_error_nomem("real mode");
    int nr = 0;
    size_t off = 0;
    for (uint64_t j = 0; j < P * fan; j++) {
        uint64_t pe = st->peer[j], src = j / fan;
        if (pe != (uint64_t)me || (p2p && src == pe)) continue;
        MPI_Irecv(x->rbuf + off, (int)st->bytes[j], MPI_BYTE, (int)src, 0, MPI_COMM_WORLD, &x->req[nr++]);
        off += st->bytes[j];
    }
    int nrecv = nr;
    for (uint64_t j = (uint64_t)me * fan; j < ((uint64_t)me + 1) * fan; j++) {
        uint64_t pe = st->peer[j];
        if (pe == DEFTSIM_NO_PEER || pe >= P || (p2p && pe == (uint64_t)me)) continue;
        MPI_Isend(x->sbuf, (int)st->bytes[j], MPI_BYTE, (int)pe, 0, MPI_COMM_WORLD, &x->req[nr++]);
        *sent += st->bytes[j];
    }
    MPI_Waitall(nr, x->req, x->stat);
    for (int q = 0; q < nrecv; q++) {
        int c = 0;
        MPI_Get_count(&x->stat[q], MPI_BYTE, &c);
        *recv += (uint64_t)c;
    }
    return DEFTSIM_OK;
}

static MPI_Datatype reduce_type(uint64_t nb, uint32_t elem, int *count)
{
    if (elem == 4 && nb % 4 == 0) return *count = (int)(nb / 4), MPI_FLOAT;
    if (elem == 2 && nb % 2 == 0) return *count = (int)(nb / 2), MPI_SHORT;
    return *count = (int)nb, MPI_UNSIGNED_CHAR;
}

/* One collective with MPI's own call. The counts are the payload each rank contributes and
 * receives (not what MPI's algorithm forwards on the way). */
static deftsim_status run_coll(const wstep *st, uint32_t P, int me, uint32_t elem, xbufs *x,
                               uint64_t *sent, uint64_t *recv)
{
    uint64_t total = 0, mine = st->bytes[me];
    for (uint32_t r = 0; r < P; r++) total += st->bytes[r];
    switch (st->kind) {
    case DEFTSIM_STEP_ALLGATHER:
        if (total > INT_MAX) return too_big(total);
        if (grow(x, &x->sbuf, &x->scap, mine + 1) || grow(x, &x->rbuf, &x->rcap, total + 1)) break;
        for (uint32_t r = 0, d = 0; r < P; d += (int)st->bytes[r], r++)
            x->cnt[r] = (int)st->bytes[r], x->displ[r] = (int)d;
        MPI_Allgatherv(x->sbuf, (int)mine, MPI_BYTE, x->rbuf, x->cnt, x->displ, MPI_BYTE, MPI_COMM_WORLD);
        *sent += (P - 1) * mine;
        *recv += total - mine;
        return DEFTSIM_OK;
    case DEFTSIM_STEP_ALLREDUCE: {
        if (mine > INT_MAX) return too_big(mine);
        if (grow(x, &x->sbuf, &x->scap, mine + 1) || grow(x, &x->rbuf, &x->rcap, mine + 1)) break;
        int count;
        MPI_Datatype t = reduce_type(mine, elem, &count);
        MPI_Allreduce(x->sbuf, x->rbuf, count, t, MPI_SUM, MPI_COMM_WORLD);
        *sent += mine;
        *recv += mine;
        return DEFTSIM_OK;
    }
    case DEFTSIM_STEP_BCAST: {
        uint64_t nb = st->bytes[st->root];
        if (nb > INT_MAX) return too_big(nb);
        if (grow(x, &x->rbuf, &x->rcap, nb + 1)) break;
        MPI_Bcast(x->rbuf, (int)nb, MPI_BYTE, (int)st->root, MPI_COMM_WORLD);
        if ((uint64_t)me == st->root) *sent += (P - 1) * nb;
        else *recv += nb;
        return DEFTSIM_OK;
    }
    case DEFTSIM_STEP_ALLTOALL: {
        int equal = 1;
        uint64_t most = 0; /* the same check on every rank */
        for (uint32_t r = 0; r < P; r++) {
            equal &= st->bytes[r] == mine;
            if (st->bytes[r] > most) most = st->bytes[r];
        }
        if (most * P > INT_MAX || total > INT_MAX) return too_big(most * P > total ? most * P : total);
        if (grow(x, &x->sbuf, &x->scap, mine * P + 1) || grow(x, &x->rbuf, &x->rcap, total + 1)) break;
        if (equal) {
            MPI_Alltoall(x->sbuf, (int)mine, MPI_BYTE, x->rbuf, (int)mine, MPI_BYTE, MPI_COMM_WORLD);
        } else {
            for (uint32_t r = 0, d = 0; r < P; d += (int)st->bytes[r], r++) {
                x->scnt[r] = (int)mine, x->sdispl[r] = (int)(r * mine);
                x->cnt[r] = (int)st->bytes[r], x->displ[r] = (int)d;
            }
            MPI_Alltoallv(x->sbuf, x->scnt, x->sdispl, MPI_BYTE, x->rbuf, x->cnt, x->displ,
                          MPI_BYTE, MPI_COMM_WORLD);
        }
        *sent += (P - 1) * mine;
        *recv += total - mine;
        return DEFTSIM_OK;
    }
    default:
        return run_p2p(st, P, me, x, sent, recv);
    }
    return deftsim_error_nomem("real mode");
}

/* The most any step of the words can ask of one payload buffer: what the whole point needs
 * when the buffers cannot grow (device memory). */
static uint64_t words_most(const uint64_t *w, size_t n, uint32_t P)
{
    uint64_t most = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t ns = *w++;
        for (uint64_t k = 0; k < ns; k++) {
            wstep s;
            w = read_step(w, P, &s);
            if (s.kind == DEFTSIM_STEP_COMPUTE) continue;
            uint64_t sum = 0, top = 0;
            for (uint64_t j = 0; j < P * s.fan; j++) {
                sum += s.bytes[j];
                if (s.bytes[j] > top) top = s.bytes[j];
            }
            if (sum > most) most = sum;
            if (top * P > most) most = top * P;
        }
    }
    return most + 1;
}

static void device_free(xbufs *x)
{
#ifdef DEFTSIM_HAVE_CUDA
    if (x->dev) {
        deftsim_kcuda_pool_free(x->pool);
        deftsim_kctx_free(x->kc);
        x->sbuf = x->rbuf = NULL;
    }
#else
    (void)x;
#endif
}

/* dev = 1: the payload buffers in device memory, zeroed, each of `most` bytes. */
static deftsim_status device_alloc(xbufs *x, int dev, uint64_t most)
{
    if (!dev) return DEFTSIM_OK;
#ifdef DEFTSIM_HAVE_CUDA
    deftsim_status st;
    void *a = NULL, *b = NULL;
    if ((st = deftsim_kctx_new(&x->kc, "cuda", 1)) ||
        (st = deftsim_kcuda_pool_new((size_t)(2 * most + 1024), &x->pool)) ||
        (st = deftsim_kcuda_alloc(x->pool, (size_t)most, &a)) ||
        (st = deftsim_kcuda_alloc(x->pool, (size_t)most, &b)) ||
        (st = deftsim_kcuda_memset(x->kc, a, 0, (size_t)most)) ||
        (st = deftsim_kcuda_memset(x->kc, b, 0, (size_t)most)) || (st = deftsim_kcuda_sync(x->kc)))
        return deftsim_error_wrap(st, "real mode, device buffers of %llu bytes",
                                  (unsigned long long)most);
    x->dev = 1;
    x->sbuf = a;
    x->rbuf = b;
    x->scap = x->rcap = (size_t)most;
    return DEFTSIM_OK;
#else
    (void)x, (void)most;
    return deftsim_error_set(DEFTSIM_E_INTERNAL, "real mode: device buffers without CUDA");
#endif
}

/* Executes the words' n schedules of P ranks; per step (over all iterations) this rank's
 * seconds (NaN for COMPUTE) and counted bytes. timed = 0: a warm-up of the first schedule.
 * dev = 1: the payload in device memory. */
static deftsim_status execute_words(const uint64_t *w, size_t n, uint32_t P, uint32_t elem,
                                    double *sec, uint64_t *sent, uint64_t *recv, int timed,
                                    int dev)
{
    xbufs x;
    memset(&x, 0, sizeof x);
    size_t reqcap = 0;
    deftsim_status st = device_alloc(&x, dev, dev ? words_most(w, n, P) : 0);
    if (st) return st;
    x.cnt = malloc(4 * (size_t)P * sizeof(int));
    if (!x.cnt) return deftsim_error_nomem("real mode");
    x.displ = x.cnt + P, x.scnt = x.cnt + 2 * P, x.sdispl = x.cnt + 3 * P;
    size_t g = 0;
    for (size_t i = 0; i < n && !st; i++) {
        uint64_t nsteps = *w++;
        for (uint64_t k = 0; k < nsteps && !st; k++, g++) {
            wstep s;
            w = read_step(w, P, &s);
            if (timed) sec[g] = NAN, sent[g] = recv[g] = 0;
            if (s.kind == DEFTSIM_STEP_COMPUTE) continue;
            size_t need = (size_t)P * s.fan + P;
            if (need > reqcap) {
                free(x.req);
                free(x.stat);
                x.req = malloc(need * sizeof *x.req);
                x.stat = malloc(need * sizeof *x.stat);
                reqcap = need;
                if (!x.req || !x.stat) {
                    st = deftsim_error_nomem("real mode");
                    break;
                }
            }
            uint64_t a = 0, b = 0;
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            st = run_coll(&s, P, g_rank, elem, &x, &a, &b);
            double t1 = MPI_Wtime();
            if (timed) sec[g] = t1 - t0, sent[g] = a, recv[g] = b;
        }
    }
    if (x.dev) {
        device_free(&x);
    } else {
        free(x.sbuf);
        free(x.rbuf);
    }
    free(x.req);
    free(x.stat);
    free(x.cnt);
    return st;
}

/* Every rank: the broadcast words, executed (a warm-up of the first schedule, then all of
 * them timed), the times reduced and the counts gathered onto rank 0 (into res there). */
static deftsim_status run_point(uint64_t *w, size_t nw, size_t n, uint32_t P, uint32_t elem,
                                deftsim_mpi_result *res)
{
    (void)nw;
    size_t S = 0;
    {
        const uint64_t *p = w;
        for (size_t i = 0; i < n; i++) {
            uint64_t ns = *p++;
            for (uint64_t k = 0; k < ns; k++) {
                wstep s;
                p = read_step(p, P, &s);
            }
            S += ns;
        }
    }
    double *sec = malloc((S + 1) * sizeof *sec), *secmax = NULL;
    uint64_t *cnt = malloc((2 * S + 1) * sizeof *cnt), *all = NULL;
    if (g_rank == 0) {
        secmax = malloc((S + 1) * sizeof *secmax);
        all = malloc((2 * S * P + 1) * sizeof *all);
    }
    deftsim_status st = DEFTSIM_OK;
    if (!sec || !cnt || (g_rank == 0 && (!secmax || !all)))
        st = deftsim_error_nomem("real mode");
    /* Device buffers only when every rank can use them. */
    device_decide();
    int dev = g_dev_ok;
    MPI_Allreduce(MPI_IN_PLACE, &dev, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!dev && g_dev_ok)
        snprintf(g_dev_why, sizeof g_dev_why, "host: another rank cannot use device buffers");
    if (!st && n) st = execute_words(w, 1, P, elem, sec, cnt, cnt + S, 0, dev);
    if (!st) st = execute_words(w, n, P, elem, sec, cnt, cnt + S, 1, dev);
    if (st == DEFTSIM_E_NOMEM) { /* on this rank alone: the others would wait for it */
        fprintf(stderr, "deftsim: rank %d: %s\n", g_rank, deftsim_error_message());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (!st) {
        for (size_t g = 0; g < S; g++) if (isnan(sec[g])) sec[g] = -1;
        MPI_Reduce(sec, secmax, (int)S, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        MPI_Gather(cnt, (int)(2 * S), MPI_UINT64_T, all, (int)(2 * S), MPI_UINT64_T, 0, MPI_COMM_WORLD);
    }
    if (!st && g_rank == 0) {
        res->P = P;
        res->n = n;
        res->first = malloc((n + 1) * sizeof *res->first);
        res->seconds = malloc((S + 1) * sizeof *res->seconds);
        res->sent = malloc((S * P + 1) * sizeof *res->sent);
        res->recv = malloc((S * P + 1) * sizeof *res->recv);
        res->comm_seconds = malloc((n + 1) * sizeof *res->comm_seconds);
        if (!res->first || !res->seconds || !res->sent || !res->recv || !res->comm_seconds) {
            st = deftsim_error_nomem("real mode");
        } else {
            const uint64_t *p = w;
            size_t g = 0;
            for (size_t i = 0; i < n; i++) {
                uint64_t ns = *p++;
                res->first[i] = g;
                res->comm_seconds[i] = 0;
                for (uint64_t k = 0; k < ns; k++, g++) {
                    wstep s;
                    p = read_step(p, P, &s);
                    res->seconds[g] = s.kind == DEFTSIM_STEP_COMPUTE ? NAN : secmax[g];
                    if (s.kind != DEFTSIM_STEP_COMPUTE) res->comm_seconds[i] += secmax[g];
                    for (uint32_t r = 0; r < P; r++) {
                        res->sent[g * P + r] = all[(size_t)r * 2 * S + g];
                        res->recv[g * P + r] = all[(size_t)r * 2 * S + S + g];
                    }
                }
            }
            res->first[n] = g;
        }
    }
    free(sec);
    free(secmax);
    free(cnt);
    free(all);
    return st;
}

/* The header goes out as a non-blocking broadcast on every rank (a blocking and a
 * non-blocking collective do not match); ranks > 0 poll it every millisecond, so that a
 * waiting rank leaves the cores to rank 0's engine. */
static void bcast_header(uint64_t *h)
{
    MPI_Request rq;
    MPI_Ibcast(h, 4, MPI_UINT64_T, 0, MPI_COMM_WORLD, &rq);
    if (g_rank == 0) {
        MPI_Wait(&rq, MPI_STATUS_IGNORE);
        return;
    }
    for (;;) {
        int done = 0;
        MPI_Test(&rq, &done, MPI_STATUS_IGNORE);
        if (done) return;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
}

deftsim_status deftsim_mpi_serve(void)
{
    for (;;) {
        uint64_t h[4];
        bcast_header(h);
        if (h[0] != CMD_RUN) return DEFTSIM_OK;
        uint64_t *w = malloc((h[3] + 1) * sizeof *w);
        if (!w) MPI_Abort(MPI_COMM_WORLD, 1);
        MPI_Bcast(w, (int)h[3], MPI_UINT64_T, 0, MPI_COMM_WORLD);
        deftsim_mpi_result dummy;
        memset(&dummy, 0, sizeof dummy);
        uint32_t P = (uint32_t)(h[2] & 0xffffffffu), elem = (uint32_t)(h[2] >> 32);
        /* An error here is rank 0's too (the same checks on the same words, at the same
         * step): it reports it; this rank waits for the next point or the release. */
        (void)run_point(w, h[3], h[1], P, elem, &dummy);
        free(w);
    }
}

deftsim_status deftsim_mpi_execute(const deftsim_schedule *const *s, size_t n, uint32_t elem_bytes,
                                   deftsim_mpi_result *res)
{
    memset(res, 0, sizeof *res);
    if (!g_active || g_rank != 0 || g_released)
        return deftsim_error_set(DEFTSIM_E_INTERNAL, "real mode: MPI is not running on rank 0");
    uint32_t P = n ? s[0]->P : (uint32_t)g_size;
    if (P != (uint32_t)g_size)
        return deftsim_error_set(DEFTSIM_E_INPUT, "[execute] network = mpi: a point of P = %u "
                                 "cannot run on %d ranks", P, g_size);
    words v = {0};
    if (serialise(s, n, &v)) {
        free(v.w);
        return deftsim_error_nomem("real mode");
    }
    if (v.n > INT_MAX) {
        free(v.w);
        return deftsim_error_set(DEFTSIM_E_INPUT, "real mode: the point's schedules are too "
                                 "large to broadcast");
    }
    uint64_t h[4] = {CMD_RUN, n, (uint64_t)P | ((uint64_t)elem_bytes << 32), v.n};
    bcast_header(h);
    MPI_Bcast(v.w, (int)v.n, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    deftsim_status st = run_point(v.w, v.n, n, P, elem_bytes, res);
    free(v.w);
    if (st) deftsim_mpi_result_free(res);
    return st;
}

void deftsim_mpi_release(void)
{
    if (!g_active || g_rank != 0 || g_released) return;
    uint64_t h[4] = {CMD_STOP, 0, 0, 0};
    bcast_header(h);
    g_released = 1;
}


/* ---- spread mode's team ---------------------------------------------------------------------
 * MPI counts are ints: every message goes in pieces of at most 1 GiB. */

#define PIECE ((uint64_t)1 << 30)

static deftsim_status mpi_fail(const char *what, int rc)
{
    char msg[MPI_MAX_ERROR_STRING + 1];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) len = 0;
    msg[len] = 0;
    return deftsim_error_set(DEFTSIM_E_IO, "spread mode: %s failed on rank %d: %s", what, g_rank,
                             msg);
}

enum { OP_SEND, OP_RECV, OP_BCAST };

/* One point-to-point message or broadcast of any size, in pieces of at most PIECE bytes. */
static deftsim_status pieces(int op, int peer, char *p, uint64_t bytes)
{
    static const char *const names[] = {"MPI_Send", "MPI_Recv", "MPI_Bcast"};
    do {
        int c = (int)(bytes < PIECE ? bytes : PIECE), rc;
        if (op == OP_SEND) rc = MPI_Send(p, c, MPI_BYTE, peer, 7, MPI_COMM_WORLD);
        else if (op == OP_RECV)
            rc = MPI_Recv(p, c, MPI_BYTE, peer, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        else rc = MPI_Bcast(p, c, MPI_BYTE, peer, MPI_COMM_WORLD);
        if (rc != MPI_SUCCESS) return mpi_fail(names[op], rc);
        p += c;
        bytes -= (uint64_t)c;
    } while (bytes);
    return DEFTSIM_OK;
}

static deftsim_status team_send(void *ctx, uint32_t to, const void *buf, uint64_t bytes)
{
    (void)ctx;
    return pieces(OP_SEND, (int)to, (char *)buf, bytes); /* MPI_Send only reads it */
}

static deftsim_status team_recv(void *ctx, uint32_t from, void *buf, uint64_t bytes)
{
    (void)ctx;
    return pieces(OP_RECV, (int)from, buf, bytes);
}

static deftsim_status team_bcast(void *ctx, uint32_t root, void *buf, uint64_t bytes)
{
    (void)ctx;
    return pieces(OP_BCAST, (int)root, buf, bytes);
}

/* One allgatherv when every part and the total fit an int; else a broadcast per rank. */
static deftsim_status team_allgatherv(void *ctx, const void *mine, void *all, const uint64_t *bytes)
{
    uint64_t total = 0, off = 0;
    for (int r = 0; r < g_size; r++) total += bytes[r];
    char *a = all;
    for (int r = 0; r < g_rank; r++) off += bytes[r];
    if (total < (uint64_t)INT_MAX) {
        int *cnt = malloc((size_t)g_size * 2 * sizeof *cnt);
        if (!cnt) return deftsim_error_nomem("spread mode");
        int *displ = cnt + g_size, d = 0;
        for (int r = 0; r < g_size; r++) {
            cnt[r] = (int)bytes[r];
            displ[r] = d;
            d += cnt[r];
        }
        int rc;
        if ((const char *)mine == a + off)
            rc = MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_BYTE, a, cnt, displ, MPI_BYTE, MPI_COMM_WORLD);
        else
            rc = MPI_Allgatherv(mine, cnt[g_rank], MPI_BYTE, a, cnt, displ, MPI_BYTE,
                                MPI_COMM_WORLD);
        free(cnt);
        return rc == MPI_SUCCESS ? DEFTSIM_OK : mpi_fail("MPI_Allgatherv", rc);
    }
    if ((const char *)mine != a + off && bytes[g_rank]) memmove(a + off, mine, bytes[g_rank]);
    off = 0;
    for (int r = 0; r < g_size; r++) {
        deftsim_status st;
        if (bytes[r] && (st = team_bcast(ctx, (uint32_t)r, a + off, bytes[r]))) return st;
        off += bytes[r];
    }
    return DEFTSIM_OK;
}

deftsim_status deftsim_mpi_spread_team(deftsim_team *t)
{
    memset(t, 0, sizeof *t);
    int rank, size;
    deftsim_status st = deftsim_mpi_init(&rank, &size);
    if (st) return st;
    g_released = 1; /* no server loop to release: every rank runs the engine */
    t->rank = (uint32_t)rank;
    t->size = (uint32_t)size;
    t->allgatherv = team_allgatherv;
    t->send = team_send;
    t->recv = team_recv;
    t->bcast = team_bcast;
    return DEFTSIM_OK;
}

void deftsim_mpi_abort(int code)
{
    if (g_active) MPI_Abort(MPI_COMM_WORLD, code);
}

#endif
