/* measured.c - the real network mode's table (deftsim_analysis.h, docs/CLUSTER.md "Real
 * mode"): per method, density, P and collective of the rows that carry measured times, the
 * mean over iterations of the measured time (measured_seconds: the slowest rank after a
 * barrier) against the simulated one (the collective's span over the workers, max sim_end -
 * min sim_start), with their ratio, and the same for the whole iteration's communication
 * (comm_measured_seconds against comm_seconds). */
#include "deftsim_analysis.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deftsim_csv.h"
#include "deftsim_util.h"

typedef struct {
    double measured, smin, smax, payload;
    int seen;
} m_iter;

typedef struct {
    char *method, *dens, *phase, *kind;
    long P, phase_index; /* phase_index -1: the iteration's communication */
    m_iter *it;
    size_t nit;
} m_group;

struct deftsim_measured {
    m_group *g;
    size_t n, cap;
};

deftsim_status deftsim_measured_new(deftsim_measured **out)
{
    *out = calloc(1, sizeof **out);
    return *out ? DEFTSIM_OK : deftsim_error_nomem("analysis");
}

void deftsim_measured_free(deftsim_measured *m)
{
    if (!m) return;
    for (size_t i = 0; i < m->n; i++) {
        free(m->g[i].method);
        free(m->g[i].dens);
        free(m->g[i].phase);
        free(m->g[i].kind);
        free(m->g[i].it);
    }
    free(m->g);
    free(m);
}

size_t deftsim_measured_count(const deftsim_measured *m) { return m ? m->n : 0; }

static m_group *find(deftsim_measured *m, const char *method, const char *dens, long P,
                     long pi, const char *phase, const char *kind)
{
    for (size_t i = m->n; i-- > 0;) {
        m_group *g = &m->g[i];
        if (g->P == P && g->phase_index == pi && !strcmp(g->method, method) &&
            !strcmp(g->dens, dens) && !strcmp(g->phase, phase))
            return g;
    }
    if (deftsim_grow(&m->g, &m->cap, m->n + 1, sizeof *m->g)) return NULL;
    m_group *g = &m->g[m->n];
    memset(g, 0, sizeof *g);
    g->method = strdup(method), g->dens = strdup(dens), g->phase = strdup(phase);
    g->kind = strdup(kind);
    g->P = P, g->phase_index = pi;
    if (!g->method || !g->dens || !g->phase || !g->kind) return NULL;
    m->n++;
    return g;
}

static m_iter *iter_of(m_group *g, size_t it)
{
    if (it >= g->nit) {
        size_t nn = it + 1 > 2 * g->nit ? it + 1 : 2 * g->nit;
        m_iter *ni = realloc(g->it, nn * sizeof *ni);
        if (!ni) return NULL;
        memset(ni + g->nit, 0, (nn - g->nit) * sizeof *ni);
        g->it = ni;
        g->nit = nn;
    }
    return &g->it[it];
}

static deftsim_status add_row(deftsim_measured *m, deftsim_csvr *r, const long *c)
{
    double P, it, pi, ms, cm, a, b, recv, comm;
    deftsim_status st;
    if ((st = deftsim_csvr_number(r, (size_t)c[2], &P)) ||
        (st = deftsim_csvr_number(r, (size_t)c[3], &it)) ||
        (st = deftsim_csvr_number(r, (size_t)c[5], &pi)) ||
        (st = deftsim_csvr_number(r, (size_t)c[8], &ms)) ||
        (st = deftsim_csvr_number(r, (size_t)c[9], &recv)) ||
        (st = deftsim_csvr_number(r, (size_t)c[10], &cm)) ||
        (st = deftsim_csvr_number(r, (size_t)c[11], &a)) ||
        (st = deftsim_csvr_number(r, (size_t)c[12], &b)) ||
        (st = deftsim_csvr_number(r, (size_t)c[13], &comm)))
        return st;
    if (isnan(cm) || !(it >= 0 && it < 1e9)) return DEFTSIM_OK;
    const char *method = deftsim_csvr_field(r, (size_t)c[0]), *dens = deftsim_csvr_field(r, (size_t)c[1]);
    const char *worker = deftsim_csvr_field(r, (size_t)c[4]);
    m_group *g;
    m_iter *x;
    if (!strcmp(worker, "0") && pi == 0) { /* the iteration, once */
        if (!(g = find(m, method, dens, (long)P, -1, "(iteration)", "all")) || !(x = iter_of(g, (size_t)it)))
            return deftsim_error_nomem("analysis");
        x->measured = cm, x->smin = 0, x->smax = comm, x->seen = 1;
    }
    if (isnan(ms)) return DEFTSIM_OK;
    if (!(g = find(m, method, dens, (long)P, (long)pi, deftsim_csvr_field(r, (size_t)c[6]),
                   deftsim_csvr_field(r, (size_t)c[7]))) || !(x = iter_of(g, (size_t)it)))
        return deftsim_error_nomem("analysis");
    if (!x->seen) x->smin = a, x->smax = b;
    if (a < x->smin) x->smin = a;
    if (b > x->smax) x->smax = b;
    x->measured = ms;
    x->payload += isnan(recv) ? 0 : recv;
    x->seen = 1;
    /* the iteration's payload: every collective's */
    if (!(g = find(m, method, dens, (long)P, -1, "(iteration)", "all")) || !(x = iter_of(g, (size_t)it)))
        return deftsim_error_nomem("analysis");
    x->payload += isnan(recv) ? 0 : recv;
    return DEFTSIM_OK;
}

deftsim_status deftsim_measured_add_file(deftsim_measured *m, const char *path)
{
    static const char *const need[] = {"method", "density", "P", "iteration", "worker",
                                       "phase_index", "phase", "phase_kind", "measured_seconds",
                                       "measured_bytes_recv", "comm_measured_seconds",
                                       "sim_start", "sim_end", "comm_seconds"};
    deftsim_csvr *r;
    deftsim_status st = deftsim_csvr_open(path, &r);
    if (st) return st;
    long c[14];
    for (size_t i = 0; i < 14; i++)
        if ((c[i] = deftsim_csvr_find(r, need[i])) < 0) { /* rows of an older deftsim */
            deftsim_csvr_close(r);
            return DEFTSIM_OK;
        }
    int got;
    while (!(st = deftsim_csvr_next(r, &got)) && got)
        if ((st = add_row(m, r, c))) break;
    deftsim_csvr_close(r);
    return st;
}

/* A group's means over its iterations: measured, simulated seconds and payload bytes. */
static size_t means(const m_group *g, double *meas, double *sim, double *payload)
{
    size_t n = 0;
    double a = 0, b = 0, p = 0;
    for (size_t i = 0; i < g->nit; i++) {
        if (!g->it[i].seen) continue;
        a += g->it[i].measured;
        b += g->it[i].smax - g->it[i].smin;
        p += g->it[i].payload;
        n++;
    }
    *meas = n ? a / n : NAN, *sim = n ? b / n : NAN, *payload = n ? p / n : NAN;
    return n;
}

static void write_rows(const deftsim_measured *m, FILE *f, int md)
{
    char b[4][40];
    for (size_t i = 0; i < m->n; i++) {
        const m_group *g = &m->g[i];
        double a, s, p;
        size_t n = means(g, &a, &s, &p);
        double ratio = s > 0 ? a / s : NAN;
        if (md) {
            /* "-": no value (no simulation, or a simulated time of 0) */
            snprintf(b[0], 40, "%.3g", a * 1e6);
            snprintf(b[1], 40, "%.3g", s * 1e6);
            snprintf(b[3], 40, "%.3g", ratio);
            fprintf(f, "| %s | %s | %ld | %s | %s | %zu | %.0f | %s | %s | %s |\n", g->method,
                    g->dens, g->P, g->phase, g->kind, n, p, isnan(a) ? "-" : b[0],
                    isnan(s) ? "-" : b[1], isnan(ratio) ? "-" : b[3]);
            continue;
        }
        fprintf(f, "%s,%s,%ld,%s,%s,%ld,%zu,%s,%s,%s,%s\n", g->method, g->dens, g->P, g->phase,
                g->kind, g->phase_index, n, deftsim_csv_double(b[0], 40, p),
                deftsim_csv_double(b[1], 40, a), deftsim_csv_double(b[2], 40, s),
                deftsim_csv_double(b[3], 40, ratio));
    }
}

deftsim_status deftsim_measured_write_csv(const deftsim_measured *m, const char *path)
{
    deftsim_afile *af;
    deftsim_status st = deftsim_afile_open(&af, path);
    if (st) return st;
    FILE *f = deftsim_afile_stream(af);
    fputs("method,density,P,collective,kind,phase_index,iterations,payload_bytes,"
          "measured_seconds,simulated_seconds,ratio\n", f);
    write_rows(m, f, 0);
    return deftsim_afile_commit(af);
}

void deftsim_measured_write_md(const deftsim_measured *m, FILE *f)
{
    fputs("\n## Measured against simulated communication\n\n"
          "The rows carry times measured over MPI ([execute] network = mpi, docs/CLUSTER.md, "
          "\"Real mode\"). Per collective: the mean over the iterations of the slowest rank's "
          "time after a barrier (measured) and of the collective's simulated span over the "
          "workers (simulated); payload: the bytes the ranks received, summed over them; "
          "ratio = measured / simulated. (iteration): comm_measured_seconds against "
          "comm_seconds.\n\n"
          "| method | density | P | collective | kind | iterations | payload bytes | measured us "
          "| simulated us | ratio |\n"
          "|---|---|---|---|---|---|---|---|---|---|\n", f);
    write_rows(m, f, 1);
}
