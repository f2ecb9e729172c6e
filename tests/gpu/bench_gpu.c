/* bench_gpu.c - times the CUDA backend's exact top-k and segmented top-k against the memory
 * floor, on the inputs `deftsim bench kernels` uses (same generator, same seed), and writes
 * the inputs so that tests/gpu/torch_topk.py can time torch.topk on the same bytes.
 *
 * Timing: CUDA events on the context's stream, one pair around each call. A spin kernel is
 * queued ahead of each batch of calls so that the host queues the whole batch while the device
 * is busy: the calls then run back to back and each event pair measures device time alone,
 * whatever the host spends planning a call. Median and minimum over many calls after a
 * warm-up. The floor is a device-to-device copy of the input (cudaMemcpyAsync): it reads and
 * writes n floats, so one read is half its time; the absmax kernel (one streaming read) is
 * timed beside it. Every result is verified against the CPU backend after timing.
 *
 * usage: bench_gpu [--dump DIR] [--quick] [--reps N] [--seed N]
 * Prints one CSV row per case on stdout; with --dump, writes DIR/<data>.f32 (raw float32) and
 * DIR/cases.csv (which case reads which file, n and k). Exit 77 without a CUDA device. */
#include <cuda_runtime_api.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "deftsim_kcuda.h"
#include "deftsim_kernels.h"
#include "gpu_util.h"

typedef enum { K_TOPK, K_SEGTOPK } kind;

typedef struct {
    const char *id;
    kind kind;
    size_t n;       /* 0: ResNet-18 (resnet18_cifar10) */
    double density;
    int heavy;
    uint32_t P;
    double target;  /* largest acceptable ratio to the one-read floor */
    double speedup; /* smallest acceptable speedup over torch.topk (0: none) */
    int quick;
} bench_case;

static const bench_case cases[] = {
    {"topk-1e8-d0.01-normal", K_TOPK, 100000000, 0.01, 0, 0, 2.0, 3.0, 0},
    {"topk-1e8-d0.001-normal", K_TOPK, 100000000, 0.001, 0, 0, 0, 0, 0},
    {"topk-1e8-d0.01-heavy", K_TOPK, 100000000, 0.01, 1, 0, 2.0, 3.0, 0},
    {"topk-r18-d0.01-normal", K_TOPK, 0, 0.01, 0, 0, 0, 0, 1},
    {"topk-r18-d0.001-normal", K_TOPK, 0, 0.001, 0, 0, 0, 0, 1},
    {"segtopk-r18-P16-normal", K_SEGTOPK, 0, 0.01, 0, 16, 3.0, 0, 1},
    {"segtopk-r18-P1024-normal", K_SEGTOPK, 0, 0.01, 0, 1024, 3.0, 0, 1},
    {"segtopk-r18-P16-heavy", K_SEGTOPK, 0, 0.01, 1, 16, 3.0, 0, 1},
    {"segtopk-r18-P1024-heavy", K_SEGTOPK, 0, 0.01, 1, 1024, 3.0, 0, 1},
};
#define NCASES (sizeof cases / sizeof cases[0])

#define BATCH 8
#define MAXREP 400

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, size_t n)
{
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#define CU(call)                                                                                  \
    do {                                                                                          \
        cudaError_t e_ = (call);                                                                  \
        if (e_ != cudaSuccess) {                                                                  \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            exit(1);                                                                              \
        }                                                                                         \
    } while (0)

#define OK(call)                                                                                  \
    do {                                                                                          \
        if ((call) != DEFTSIM_OK) {                                                               \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, deftsim_error_message()); \
            exit(1);                                                                              \
        }                                                                                         \
    } while (0)

typedef struct {
    deftsim_kctx *ctx;
    cudaStream_t stream;
    const bench_case *c;
    const float *dx;
    float *dcopy;
    size_t n, k;
    const deftsim_kseg *segs;
    size_t nseg;
    uint32_t *dout;
    void *dscr;
    size_t scr_bytes;
    float *dsink;
} work;

/* 0: the kernel, 1: the copy floor, 2: the absmax read. */
static void run_one(work *w, int what)
{
    switch (what) {
    case 0:
        if (w->c->kind == K_TOPK)
            OK(deftsim_k_topk(w->ctx, w->dx, w->n, w->k, w->dout, w->dscr, w->scr_bytes));
        else
            OK(deftsim_k_segtopk(w->ctx, w->dx, w->n, w->segs, w->nseg, w->dout, w->dscr,
                                 w->scr_bytes));
        break;
    case 1:
        CU(cudaMemcpyAsync(w->dcopy, w->dx, w->n * sizeof(float), cudaMemcpyDeviceToDevice,
                           w->stream));
        break;
    default: {
        /* absmax waits for its result; queue it without a spin ahead (see time_it). */
        float v;
        OK(deftsim_k_absmax(w->ctx, w->dx, w->n, &v));
        break;
    }
    }
}

/* Device times in microseconds of `reps` calls of `what`, in batches behind a spin. */
static size_t time_it(work *w, int what, unsigned reps, double *us, double *host_us)
{
    cudaEvent_t ev[2 * BATCH];
    for (int i = 0; i < 2 * BATCH; i++) CU(cudaEventCreate(&ev[i]));
    for (int i = 0; i < 3; i++) run_one(w, what); /* warm-up */
    OK(deftsim_kcuda_sync(w->ctx));
    size_t got = 0;
    double host = 0;
    /* absmax returns a scalar, so it waits for the device each call: no batch runs ahead of
     * it, and its events measure it alone anyway. */
    int spin = what != 2;
    while (got < reps) {
        unsigned b = reps - got < BATCH ? (unsigned)(reps - got) : BATCH;
        if (spin) OK(deftsim_kcuda_spin(w->ctx, 5e-3));
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (unsigned j = 0; j < b; j++) {
            CU(cudaEventRecord(ev[2 * j], w->stream));
            run_one(w, what);
            CU(cudaEventRecord(ev[2 * j + 1], w->stream));
        }
        clock_gettime(CLOCK_MONOTONIC, &t1);
        host += (double)(t1.tv_sec - t0.tv_sec) * 1e6 + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-3;
        CU(cudaStreamSynchronize(w->stream));
        for (unsigned j = 0; j < b; j++) {
            float ms;
            CU(cudaEventElapsedTime(&ms, ev[2 * j], ev[2 * j + 1]));
            us[got++] = (double)ms * 1e3;
        }
    }
    for (int i = 0; i < 2 * BATCH; i++) CU(cudaEventDestroy(ev[i]));
    if (host_us) *host_us = host / (double)reps;
    return got;
}

static int write_file(const char *path, const void *p, size_t bytes)
{
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t wr = fwrite(p, 1, bytes, f);
    int rc = fclose(f);
    return wr == bytes && rc == 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
    const char *dump = NULL;
    int quick = 0;
    unsigned reps = 64;
    uint64_t seed = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--dump") && i + 1 < argc) dump = argv[++i];
        else if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = (unsigned)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc) seed = strtoull(argv[++i], NULL, 0);
        else {
            fprintf(stderr, "usage: bench_gpu [--dump DIR] [--quick] [--reps N] [--seed N]\n");
            return 2;
        }
    }
    if (reps < 1) reps = 1;
    if (reps > MAXREP) reps = MAXREP;
    const char *why = deftsim_kernels_backend_unavailable("cuda");
    if (why) {
        fprintf(stderr, "bench_gpu: skipped: %s\n", why);
        return GPU_SKIP;
    }
    work w;
    memset(&w, 0, sizeof w);
    deftsim_kctx *cpu;
    OK(deftsim_kctx_new(&w.ctx, "cuda", 1));
    OK(deftsim_kctx_new(&cpu, "cpu", 0));
    w.stream = (cudaStream_t)deftsim_kcuda_stream(w.ctx);
    fprintf(stderr, "bench_gpu: device %s; %u timed calls per case\n",
            deftsim_kcuda_device_name(w.ctx), reps);
    FILE *cf = NULL;
    if (dump) {
        if (mkdir(dump, 0777) && errno != EEXIST) {
            fprintf(stderr, "bench_gpu: cannot create %s\n", dump);
            return 1;
        }
        char p[4096];
        snprintf(p, sizeof p, "%s/cases.csv", dump);
        cf = fopen(p, "w");
        if (!cf) {
            fprintf(stderr, "bench_gpu: cannot write %s\n", p);
            return 1;
        }
        fprintf(cf, "case,kind,data,n,k\n");
    }
    printf("case,kind,n,k,fragments,kernel_us,kernel_min_us,copy_us,floor_us,absmax_us,"
           "nominal_floor_us,ratio,target_ratio,target_met,host_us,candidates,fallbacks,verified\n");
    size_t r18 = gu_model_numel("resnet18_cifar10");
    deftsim_kcuda_pool *pool = NULL;
    int all_ok = 1;
    for (size_t ci = 0; ci < NCASES; ci++) {
        const bench_case *c = &cases[ci];
        if (quick && !c->quick) continue;
        size_t n = c->n ? c->n : r18;
        char data[64];
        snprintf(data, sizeof data, "%s-%s", c->n ? "1e8" : "r18", c->heavy ? "heavy" : "normal");
        float *x = malloc(n * sizeof *x);
        if (!x) return 1;
        gu_fill_bench(x, n, c->heavy, seed * 1000003u + (uint64_t)c->heavy);
        deftsim_kseg one, *segs = &one;
        size_t nseg = 1, k;
        if (c->kind == K_SEGTOPK) {
            if (gu_deft_segments("resnet18_cifar10", c->P, c->density, x, n, &segs, &nseg)) return 1;
            k = 0;
            for (size_t j = 0; j < nseg; j++) k += segs[j].k;
        } else {
            k = (size_t)floor(c->density * (double)n);
            one = (deftsim_kseg){0, n, k};
        }
        size_t sb = 0;
        if (c->kind == K_TOPK) OK(deftsim_k_topk_scratch(w.ctx, n, k, &sb));
        else OK(deftsim_k_segtopk_scratch(w.ctx, segs, nseg, &sb));
        size_t need = 3 * n * sizeof(float) + k * 4 + sb + (16u << 20);
        if (!pool || deftsim_kcuda_pool_capacity(pool) < need) {
            deftsim_kcuda_pool_free(pool);
            OK(deftsim_kcuda_pool_new(need, &pool));
        }
        void *dx, *dcopy, *dout, *dscr;
        OK(deftsim_kcuda_alloc(pool, n * sizeof(float), &dx));
        OK(deftsim_kcuda_alloc(pool, n * sizeof(float), &dcopy));
        OK(deftsim_kcuda_alloc(pool, k * 4, &dout));
        OK(deftsim_kcuda_alloc(pool, sb, &dscr));
        OK(deftsim_kcuda_upload(w.ctx, dx, x, n * sizeof(float)));
        w.c = c;
        w.dx = dx;
        w.dcopy = dcopy;
        w.n = n;
        w.k = k;
        w.segs = segs;
        w.nseg = nseg;
        w.dout = dout;
        w.dscr = dscr;
        w.scr_bytes = sb;

        static double tk[MAXREP], tf[MAXREP], ta[MAXREP];
        double host_us = 0;
        size_t nk = time_it(&w, 0, reps, tk, &host_us);
        deftsim_kstats ks;
        deftsim_kctx_last(w.ctx, &ks);
        size_t nf = time_it(&w, 1, reps, tf, NULL);
        size_t na = time_it(&w, 2, reps < 16 ? reps : 16, ta, NULL);
        double kmin = tk[0];
        for (size_t i = 1; i < nk; i++) kmin = tk[i] < kmin ? tk[i] : kmin;
        double kmed = median(tk, nk), copy = median(tf, nf), amed = median(ta, na);
        double floor_us = copy / 2.0, nominal = (double)n * 4.0 / 4.3e12 * 1e6;
        double ratio = kmed / floor_us;

        /* Verify after timing: the CPU backend's exact sets (per fragment). */
        uint32_t *got = malloc((k ? k : 1) * 4), *ref = malloc((k ? k : 1) * 4);
        size_t csb = 0;
        int verified = got && ref;
        if (verified) {
            void *cs = NULL;
            if (c->kind == K_TOPK) OK(deftsim_k_topk_scratch(cpu, n, k, &csb));
            else OK(deftsim_k_segtopk_scratch(cpu, segs, nseg, &csb));
            cs = malloc(csb ? csb : 1);
            if (c->kind == K_TOPK) OK(deftsim_k_topk(cpu, x, n, k, ref, cs, csb));
            else OK(deftsim_k_segtopk(cpu, x, n, segs, nseg, ref, cs, csb));
            free(cs);
            OK(deftsim_kcuda_download(w.ctx, got, dout, k * 4));
            size_t off = 0;
            for (size_t j = 0; j < nseg && verified; j++) {
                verified = gu_same_set(got + off, ref + off, segs[j].k);
                off += segs[j].k;
            }
        }
        all_ok &= verified;
        int met = c->target <= 0 || ratio <= c->target;
        printf("%s,%s,%zu,%zu,%zu,%.2f,%.2f,%.2f,%.2f,%.2f,%.2f,%.3f,%.1f,%s,%.1f,%zu,%zu,%s\n", c->id,
               c->kind == K_TOPK ? "topk" : "segtopk", n, k, nseg, kmed, kmin, copy, floor_us, amed,
               nominal, ratio, c->target, c->target > 0 ? (met ? "yes" : "no") : "-", host_us,
               ks.candidates, ks.fallbacks, verified ? "yes" : "NO");
        fflush(stdout);
        if (cf) {
            char p[4096];
            snprintf(p, sizeof p, "%s/%s.f32", dump, data);
            struct stat sst;
            if (stat(p, &sst) != 0 && write_file(p, x, n * sizeof(float))) {
                fprintf(stderr, "bench_gpu: cannot write %s\n", p);
                return 1;
            }
            fprintf(cf, "%s,%s,%s,%zu,%zu\n", c->id, c->kind == K_TOPK ? "topk" : "segtopk", data, n,
                    k);
            fflush(cf);
        }
        deftsim_kcuda_release(pool, dx);
        deftsim_kcuda_release(pool, dcopy);
        deftsim_kcuda_release(pool, dout);
        deftsim_kcuda_release(pool, dscr);
        if (segs != &one) free(segs);
        free(got);
        free(ref);
        free(x);
    }
    if (cf) fclose(cf);
    deftsim_kcuda_pool_free(pool);
    deftsim_kctx_free(w.ctx);
    deftsim_kctx_free(cpu);
    return all_ok ? 0 : 1;
}
