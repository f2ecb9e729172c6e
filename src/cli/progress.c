/* progress.c - deftsim run's and deftsim sweep's progress on the terminal (progress.h): run's
 * lines, and sweep's lines or status bar with its ticker thread and the estimate of the time
 * left. */
#include "progress.h"

#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>

#include "deftsim_util.h"

void deftsim_cli_run_progress(void *user, const deftsim_run_point_done *p)
{
    FILE *f = user;
    fprintf(f,
            "deftsim run: [%zu/%zu] %s d=%s P=%u: %zu iteration%s in %.2f s "
            "(prepare %.2f s, step %.2f s, network %.2f s), %" PRIu64 " rows\n",
            p->done, p->total, p->method, p->density, p->P, p->iterations,
            p->iterations == 1 ? "" : "s", p->seconds, p->prepare_seconds, p->step_seconds,
            p->sim_seconds, p->rows);
    if (p->moves_data)
        fprintf(f,
                "deftsim run:   kernels on the device %.3f s, copies %.3f s "
                "(%.1f MB in, %.1f MB out, %" PRIu64 " calls; not in the phases)\n",
                p->device_seconds, p->copy_seconds, (double)p->bytes_to_device / 1e6,
                (double)p->bytes_from_device / 1e6, p->calls);
    fflush(f);
}

/* ---- deftsim train ------------------------------------------------------------------------------ */

void deftsim_cli_train_progress(void *user, const deftsim_train_event *ev)
{
    FILE *f = user;
    switch (ev->kind) {
    case DEFTSIM_TRAIN_ROW: {
        const deftsim_train_row *row = ev->row;
        fprintf(f, "%s %s d=%g P=%u: iteration %" PRIu64 "/%" PRIu64 " (epoch %.2f) train loss %.4f",
                ev->model, deftsim_method_name(ev->method), ev->density, ev->P, row->iteration,
                ev->iterations, row->epoch, row->train_loss);
        if (!isnan(row->test_accuracy))
            fprintf(f, ", test loss %.4f accuracy %.2f%%", row->test_loss, 100 * row->test_accuracy);
        fprintf(f, ", %.1f s\n", row->wall_seconds);
        fflush(f);
        break;
    }
    case DEFTSIM_TRAIN_DIVERGED:
        fprintf(f, "%s %s d=%g P=%u: the loss is no longer finite at iteration %" PRIu64
                "; the point stops there\n", ev->model, deftsim_method_name(ev->method),
                ev->density, ev->P, ev->iterations);
        break;
    case DEFTSIM_TRAIN_RECORDED:
        fprintf(f, "trace record: iteration %" PRIu64 " written (%zu of %zu)\n",
                ev->recorded_iteration, ev->recorded, ev->to_record);
        fflush(f);
        break;
    }
}

/* ---- deftsim sweep ------------------------------------------------------------------------------ */

struct deftsim_cli_sweep_progress {
    const deftsim_sweep *s;
    FILE *f;
    int tty;
    size_t total, finished;        /* points of the plan; done, skipped or failed so far */
    double t0;                     /* sweep start */
    double point_t0;               /* current point's start */
    double point_estimate;         /* its expected seconds (NaN: unknown) */
    size_t current;                /* the point running (SIZE_MAX: none) */
    /* Seconds per unit of work (P + 1, see rate()) of the points run so far. */
    double *var_method_sec, *var_method_work; /* nvariants x DEFTSIM_METHOD_MAX */
    double all_sec, all_work;
    pthread_mutex_t lock;
    pthread_t ticker;
    int ticker_on, stop;
};

/* Work of a point in the units the rates use: preparation and selection grow with P; the
 * reference top-k and the per-point set-up do not, hence the 1. */
static double work_of(const deftsim_sweep_point_info *p) { return (double)p->P + 1.0; }

static double rate(const deftsim_cli_sweep_progress *g, const deftsim_sweep_point_info *p)
{
    size_t k = p->variant * DEFTSIM_METHOD_MAX + (size_t)p->method;
    if (g->var_method_work && g->var_method_work[k] > 0)
        return g->var_method_sec[k] / g->var_method_work[k];
    if (g->all_work > 0) return g->all_sec / g->all_work;
    return NAN;
}

/* Seconds left: the current point's remaining estimate plus every point still to run. */
static double time_left(const deftsim_cli_sweep_progress *g, double now)
{
    size_t n = deftsim_sweep_point_count(g->s);
    double left = 0;
    for (size_t i = 0; i < n; i++) {
        deftsim_sweep_point_info p;
        deftsim_sweep_point_info_get(g->s, i, &p);
        if (p.state == DEFTSIM_POINT_DONE || p.ran_now || i == g->current || !p.in_shard) continue;
        double r = rate(g, &p);
        if (isnan(r)) return NAN;
        left += r * work_of(&p);
    }
    if (g->current != SIZE_MAX) {
        if (isnan(g->point_estimate)) return NAN;
        double rem = g->point_estimate - (now - g->point_t0);
        if (rem > 0) left += rem;
    }
    return left;
}

static void fmt_duration(char *buf, size_t cap, double s)
{
    if (isnan(s)) {
        snprintf(buf, cap, "?");
        return;
    }
    long t = lround(s);
    if (t >= 3600) snprintf(buf, cap, "%ld:%02ld:%02ld", t / 3600, (t / 60) % 60, t % 60);
    else snprintf(buf, cap, "%ld:%02ld", t / 60, t % 60);
}

static int term_width(FILE *f)
{
    struct winsize ws;
    if (ioctl(fileno(f), TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 40) return ws.ws_col;
    return 80;
}

/* The status line: "[#####.....] 12/49 deft d=0.01 P=32 | 1:02 elapsed, ~3:10 left". Called
 * with the lock held. */
static void draw_bar(deftsim_cli_sweep_progress *g)
{
    double now = deftsim_now();
    char what[512] = "", el[32], lf[64], tail[700];
    if (g->current != SIZE_MAX) deftsim_sweep_point_words(g->s, g->current, what, sizeof what);
    fmt_duration(el, sizeof el, now - g->t0);
    double left = time_left(g, now);
    if (isnan(left)) snprintf(lf, sizeof lf, "estimating");
    else {
        char d[32];
        fmt_duration(d, sizeof d, left);
        snprintf(lf, sizeof lf, "~%s left", d);
    }
    snprintf(tail, sizeof tail, " %zu/%zu%s%s | %s elapsed, %s", g->finished, g->total,
             what[0] ? " " : "", what, el, lf);
    /* A bar of fixed width (it should not jump as the text changes): 30 columns on a wide
     * terminal, less on a narrow one, none below 10; the text is cut at the edge. */
    int width = term_width(g->f) - 1;
    int barw = width >= 100 ? 30 : width - 70;
    if (barw < 10) barw = 0;
    char line[1024];
    size_t o = 0;
    if (barw > 0) {
        int fill = g->total ? (int)((double)barw * (double)g->finished / (double)g->total) : barw;
        line[o++] = '[';
        for (int i = 0; i < barw; i++) line[o++] = i < fill ? '#' : '.';
        line[o++] = ']';
    }
    snprintf(line + o, sizeof line - o, "%s", tail);
    if ((int)strlen(line) > width && width > 0) line[width] = '\0';
    fprintf(g->f, "\r%s\033[K", line);
    fflush(g->f);
}

static void *ticker_main(void *arg)
{
    deftsim_cli_sweep_progress *g = arg;
    for (;;) {
        struct timespec ts = {1, 0};
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&g->lock);
        int stop = g->stop;
        if (!stop) draw_bar(g);
        pthread_mutex_unlock(&g->lock);
        if (stop) return NULL;
    }
}

deftsim_cli_sweep_progress *deftsim_cli_sweep_progress_new(FILE *f, int tty)
{
    deftsim_cli_sweep_progress *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->f = f;
    g->tty = tty;
    g->current = SIZE_MAX;
    g->point_estimate = NAN;
    pthread_mutex_init(&g->lock, NULL);
    return g;
}

void deftsim_cli_sweep_progress_free(deftsim_cli_sweep_progress *g)
{
    if (!g) return;
    pthread_mutex_destroy(&g->lock);
    free(g->var_method_sec);
    free(g->var_method_work);
    free(g);
}

/* The plan, and the ticker that redraws the bar every second on a terminal. */
static void on_begin(deftsim_cli_sweep_progress *g, const deftsim_sweep_event *ev)
{
    const deftsim_sweep *s = ev->sweep;
    g->s = s;
    size_t all = deftsim_sweep_point_count(s);
    g->t0 = deftsim_now();
    size_t n = deftsim_sweep_variant_count(s) * DEFTSIM_METHOD_MAX;
    g->var_method_sec = calloc(n, sizeof(double));
    g->var_method_work = calloc(n, sizeof(double));
    if (!g->var_method_sec || !g->var_method_work) { /* no estimates then */
        free(g->var_method_sec);
        free(g->var_method_work);
        g->var_method_sec = g->var_method_work = NULL;
    }
    for (size_t i = 0; i < all; i++) {
        deftsim_sweep_point_info p;
        deftsim_sweep_point_info_get(s, i, &p);
        if (!p.in_shard) continue;
        g->total++;
        if (p.state == DEFTSIM_POINT_DONE) g->finished++;
    }
    if (g->tty && pthread_create(&g->ticker, NULL, ticker_main, g) == 0) g->ticker_on = 1;
    const deftsim_config *c = deftsim_sweep_config(s);
    size_t nvariants = deftsim_sweep_variant_count(s);
    pthread_mutex_lock(&g->lock);
    if (g->tty) fprintf(g->f, "\r\033[K");
    unsigned si, sn;
    deftsim_sweep_shard(s, &si, &sn);
    if (sn) fprintf(g->f, "deftsim sweep: shard %u/%u: %zu of ", si, sn, g->total);
    fprintf(g->f, "%s%zu points (%zu method%s x %zu densit%s x %zu worker count%s",
            sn ? "" : "deftsim sweep: ", sn ? all : g->total, c->sparsify.nmethods, c->sparsify.nmethods == 1 ? "" : "s",
            c->sparsify.ndensities, c->sparsify.ndensities == 1 ? "y" : "ies",
            c->workers.ncounts, c->workers.ncounts == 1 ? "" : "s");
    if (nvariants > 1) fprintf(g->f, " x %zu variants", nvariants);
    fprintf(g->f, ") -> %s", c->scenario.output);
    if (ev->skipped) fprintf(g->f, "; %zu finished earlier, skipped", ev->skipped);
    if (ev->noisy) fprintf(g->f, "; %zu noisy, run again", ev->noisy);
    fprintf(g->f, "\n");
    fflush(g->f);
    pthread_mutex_unlock(&g->lock);
}

static void on_end(deftsim_cli_sweep_progress *g)
{
    if (g->ticker_on) {
        pthread_mutex_lock(&g->lock);
        g->stop = 1;
        pthread_mutex_unlock(&g->lock);
        pthread_join(g->ticker, NULL);
        g->ticker_on = 0;
    }
    if (g->tty) {
        pthread_mutex_lock(&g->lock);
        g->current = SIZE_MAX;
        draw_bar(g);
        fputc('\n', g->f);
        pthread_mutex_unlock(&g->lock);
    }
}

static void on_start(deftsim_cli_sweep_progress *g, size_t i)
{
    deftsim_sweep_point_info p;
    deftsim_sweep_point_info_get(g->s, i, &p);
    pthread_mutex_lock(&g->lock);
    g->current = i;
    g->point_t0 = deftsim_now();
    double r = rate(g, &p);
    g->point_estimate = isnan(r) ? NAN : r * work_of(&p);
    if (g->tty) draw_bar(g);
    pthread_mutex_unlock(&g->lock);
}

static void on_done(deftsim_cli_sweep_progress *g, size_t i, int ok)
{
    deftsim_sweep_point_info p;
    deftsim_sweep_point_info_get(g->s, i, &p);
    pthread_mutex_lock(&g->lock);
    g->finished++;
    g->current = SIZE_MAX;
    if (ok && g->var_method_sec) {
        size_t k = p.variant * DEFTSIM_METHOD_MAX + (size_t)p.method;
        g->var_method_sec[k] += p.seconds;
        g->var_method_work[k] += work_of(&p);
    }
    if (ok) {
        g->all_sec += p.seconds;
        g->all_work += work_of(&p);
    }
    char what[512], lf[64] = "", failure[2600];
    deftsim_sweep_point_words(g->s, i, what, sizeof what);
    if (!ok) deftsim_sweep_failure_words(g->s, i, failure, sizeof failure);
    double left = time_left(g, deftsim_now());
    if (!isnan(left) && g->finished < g->total) {
        char d[32];
        fmt_duration(d, sizeof d, left);
        snprintf(lf, sizeof lf, "; ~%s left", d);
    }
    if (g->tty) fprintf(g->f, "\r\033[K");
    if (!ok)
        fprintf(g->f, "deftsim sweep: [%zu/%zu] FAILED: %s\n", g->finished, g->total, failure);
    else if (!g->tty)
        fprintf(g->f, "deftsim sweep: [%zu/%zu] %s: %.2f s, %" PRIu64 " rows%s\n", g->finished,
                g->total, what, p.seconds, p.rows, lf);
    if (g->tty) draw_bar(g);
    fflush(g->f);
    pthread_mutex_unlock(&g->lock);
}

void deftsim_cli_sweep_progress_event(void *user, const deftsim_sweep_event *ev)
{
    deftsim_cli_sweep_progress *g = user;
    switch (ev->kind) {
    case DEFTSIM_SWEEP_BEGIN: on_begin(g, ev); break;
    case DEFTSIM_SWEEP_POINT_START: on_start(g, ev->point); break;
    case DEFTSIM_SWEEP_POINT_DONE: on_done(g, ev->point, ev->ok); break;
    case DEFTSIM_SWEEP_END: on_end(g); break;
    }
}
