/* profile.c - device cost profiles: the CSV file, predictions and the fit (deftsim_profile.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gsl/gsl_errno.h>
#include <gsl/gsl_matrix.h>
#include <gsl/gsl_multifit.h>
#include <gsl/gsl_vector.h>

#include "deftsim_csv.h"
#include "deftsim_profile.h"
#include "deftsim_sparsify.h"
#include "deftsim_util.h"

static const char *const header[] = {"op",           "intercept_s",  "per_n_s", "per_k_s",
                                     "per_seg_s",    "per_n_dram_s", "per_k_dram_s",
                                     "cases",        "max_rel_err"};
#define NHEADER (sizeof header / sizeof header[0])

/* ---- Reading ------------------------------------------------------------------------------ */

#define MAXF 16
#define FIELD_MAX 512

typedef struct {
    char f[MAXF][FIELD_MAX];
    size_t nf;
} csv_line;

/* Splits one line (no newline) into fields, with "..." quoting and "" for a quote. */
static deftsim_status split(const char *s, size_t len, const char *file, size_t line,
                            csv_line *out)
{
    size_t i = 0;
    out->nf = 0;
    for (;;) {
        if (out->nf == MAXF)
            return deftsim_error_set(DEFTSIM_E_INPUT, "%s:%zu: more than %d fields", file, line,
                                     MAXF);
        char *d = out->f[out->nf];
        size_t o = 0, col = out->nf + 1;
        if (i < len && s[i] == '"') {
            i++;
            for (;;) {
                if (i >= len)
                    return deftsim_error_set(DEFTSIM_E_INPUT,
                                             "%s:%zu: column %zu: unterminated quote", file, line,
                                             col);
                if (s[i] == '"') {
                    if (i + 1 < len && s[i + 1] == '"') {
                        i++;
                    } else {
                        i++;
                        break;
                    }
                }
                if (o + 1 >= FIELD_MAX)
                    return deftsim_error_set(DEFTSIM_E_INPUT,
                                             "%s:%zu: column %zu: longer than %d bytes", file,
                                             line, col, FIELD_MAX - 1);
                d[o++] = s[i++];
            }
            if (i < len && s[i] != ',')
                return deftsim_error_set(DEFTSIM_E_INPUT,
                                         "%s:%zu: column %zu: text after the closing quote", file,
                                         line, col);
        } else {
            while (i < len && s[i] != ',') {
                if (s[i] == '"' || s[i] == '\0')
                    return deftsim_error_set(DEFTSIM_E_INPUT,
                                             "%s:%zu: column %zu: a %s inside an unquoted field",
                                             file, line, col, s[i] ? "quote" : "NUL byte");
                if (o + 1 >= FIELD_MAX)
                    return deftsim_error_set(DEFTSIM_E_INPUT,
                                             "%s:%zu: column %zu: longer than %d bytes", file,
                                             line, col, FIELD_MAX - 1);
                d[o++] = s[i++];
            }
        }
        d[o] = '\0';
        out->nf++;
        if (i >= len) return DEFTSIM_OK;
        i++; /* the comma */
    }
}

static const char *const keys[] = {"device",  "backend", "isa",        "threads",
                                   "cache_bytes", "created", "deftsim", "conditions",
                                   "source"};
#define NKEYS (sizeof keys / sizeof keys[0])

static deftsim_status bad_number(const char *file, size_t line, size_t col, const char *what,
                                 const char *text)
{
    return deftsim_error_set(DEFTSIM_E_INPUT, "%s:%zu: column %s (%zu): '%s' is %s", file, line,
                             header[col - 1], col, text, what);
}

static deftsim_status parse_row(const csv_line *L, const char *file, size_t line,
                                deftsim_profile *p, size_t *row_line)
{
    if (L->nf != NHEADER)
        return deftsim_error_set(DEFTSIM_E_INPUT, "%s:%zu: %zu fields, but the header has %zu",
                                 file, line, L->nf, NHEADER);
    size_t op = 0;
    while (op < DEFTSIM_KOP_COUNT && strcmp(deftsim_kop_name((deftsim_kop)op), L->f[0]) != 0) op++;
    if (op == DEFTSIM_KOP_COUNT) {
        char names[400];
        size_t o = 0;
        for (size_t j = 0; j < DEFTSIM_KOP_COUNT && o < sizeof names; j++)
            o += (size_t)snprintf(names + o, sizeof names - o, "%s%s", j ? ", " : "",
                                  deftsim_kop_name((deftsim_kop)j));
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "%s:%zu: column op (1): unknown operation '%s' (operations: %s)",
                                 file, line, L->f[0], names);
    }
    deftsim_profile_op *r = &p->ops[op];
    if (r->present)
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "%s:%zu: column op (1): a second row for '%s' (the first is on "
                                 "line %zu)",
                                 file, line, L->f[0], row_line[op]);
    for (size_t t = 0; t < DEFTSIM_PTERM_COUNT; t++) {
        double v;
        const char *s = L->f[1 + t];
        if (deftsim_parse_double(s, &v) || !isfinite(v))
            return bad_number(file, line, 2 + t, "not a finite number", s);
        if (v < 0) return bad_number(file, line, 2 + t, "negative (costs are never negative)", s);
        r->coef[t] = v;
    }
    uint64_t cases;
    const size_t ci = 1 + DEFTSIM_PTERM_COUNT, ei = ci + 1;
    if (deftsim_parse_u64(L->f[ci], &cases) || cases > 1000000000u)
        return bad_number(file, line, ci + 1, "not a count", L->f[ci]);
    r->cases = (unsigned)cases;
    double e;
    if (deftsim_parse_double(L->f[ei], &e) || !isfinite(e) || e < 0)
        return bad_number(file, line, ei + 1, "not a number >= 0", L->f[ei]);
    r->max_rel_err = e;
    r->present = 1;
    row_line[op] = line;
    return DEFTSIM_OK;
}

/* The first line, 'format,deftsim-profile,VERSION'. */
static deftsim_status parse_format(const csv_line *L, const char *file, size_t line)
{
    if (L->nf != 3 || strcmp(L->f[0], "format") != 0 ||
        strcmp(L->f[1], DEFTSIM_PROFILE_FORMAT) != 0) {
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "%s:%zu: not a deftsim device profile (the first line "
                                 "must be 'format,%s,%d')",
                                 file, line, DEFTSIM_PROFILE_FORMAT, DEFTSIM_PROFILE_VERSION);
    }
    uint64_t v;
    if (deftsim_parse_u64(L->f[2], &v)) {
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "%s:%zu: column version (3): '%s' is not a version number",
                                 file, line, L->f[2]);
    }
    if (v != DEFTSIM_PROFILE_VERSION) {
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "%s:%zu: column version (3): format version %s is not "
                                 "supported (this deftsim reads version %d; measure the "
                                 "profile again with this deftsim)",
                                 file, line, L->f[2], DEFTSIM_PROFILE_VERSION);
    }
    return DEFTSIM_OK;
}

/* A 'key,value' line before the header; key_line[k] records where key k was seen. */
static deftsim_status parse_key(const csv_line *L, const char *file, size_t line,
                                deftsim_profile *p, size_t *key_line)
{
    size_t k = 0;
    while (k < NKEYS && strcmp(keys[k], L->f[0]) != 0) k++;
    if (k == NKEYS) {
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "%s:%zu: column key (1): unknown key '%s' (keys: device, "
                                 "backend, isa, threads, cache_bytes, created, deftsim, "
                                 "conditions, source; then the header 'op,...')",
                                 file, line, L->f[0]);
    }
    if (L->nf != 2) {
        return deftsim_error_set(DEFTSIM_E_INPUT, "%s:%zu: '%s': %zu fields, expected 2",
                                 file, line, keys[k], L->nf);
    }
    if (key_line[k]) {
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "%s:%zu: column key (1): a second '%s' line (the first is "
                                 "line %zu)",
                                 file, line, keys[k], key_line[k]);
    }
    key_line[k] = line;
    const char *v = L->f[1];
    char *dst[NKEYS] = {p->device,  p->backend, p->isa,       NULL,
                        NULL,       p->created, p->deftsim, p->conditions, p->source};
    size_t cap[NKEYS] = {sizeof p->device, sizeof p->backend, sizeof p->isa, 0, 0,
                         sizeof p->created, sizeof p->deftsim, sizeof p->conditions,
                         sizeof p->source};
    if (dst[k]) {
        size_t vl = strlen(v);
        if (vl >= cap[k]) {
            return deftsim_error_set(DEFTSIM_E_INPUT,
                                     "%s:%zu: column value (2): '%s' is longer than %zu "
                                     "bytes",
                                     file, line, keys[k], cap[k] - 1);
        }
        memcpy(dst[k], v, vl + 1);
        return DEFTSIM_OK;
    }
    if (k == 4) {
        double cb;
        if (deftsim_parse_double(v, &cb) || !isfinite(cb) || cb < 0) {
            return deftsim_error_set(DEFTSIM_E_INPUT,
                                     "%s:%zu: column value (2): cache_bytes '%s' is not a "
                                     "number >= 0",
                                     file, line, v);
        }
        p->cache_bytes = cb;
    } else {
        uint64_t t;
        if (deftsim_parse_u64(v, &t) || t < 1 || t > 1024) {
            return deftsim_error_set(DEFTSIM_E_INPUT,
                                     "%s:%zu: column value (2): threads '%s' is not an "
                                     "integer in [1, 1024]",
                                     file, line, v);
        }
        p->threads = (unsigned)t;
    }
    return DEFTSIM_OK;
}

deftsim_status deftsim_profile_parse(const char *text, size_t len, const char *file,
                                     deftsim_profile *p)
{
    memset(p, 0, sizeof *p);
    csv_line *L = malloc(sizeof *L);
    if (!L) return deftsim_error_nomem("%s", file);
    deftsim_status st = DEFTSIM_OK;
    size_t line = 0, pos = 0, row_line[DEFTSIM_KOP_COUNT] = {0}, key_line[NKEYS] = {0};
    enum { S_FORMAT, S_KEYS, S_ROWS } state = S_FORMAT;
    while (pos < len) {
        const char *s = text + pos;
        const char *nl = memchr(s, '\n', len - pos);
        size_t l = nl ? (size_t)(nl - s) : len - pos;
        pos += l + (nl ? 1 : 0);
        line++;
        if (l && s[l - 1] == '\r') l--;
        if (l == 0) continue; /* blank lines */
        if ((st = split(s, l, file, line, L))) goto done;
        if (state == S_FORMAT) {
            if ((st = parse_format(L, file, line))) goto done;
            state = S_KEYS;
            continue;
        }
        if (state == S_KEYS && strcmp(L->f[0], "op") == 0) {
            for (size_t c = 0; c < NHEADER; c++)
                if (c >= L->nf || strcmp(L->f[c], header[c]) != 0) {
                    st = deftsim_error_set(DEFTSIM_E_INPUT,
                                           "%s:%zu: header, column %zu: '%s', expected '%s'", file,
                                           line, c + 1, c < L->nf ? L->f[c] : "(missing)",
                                           header[c]);
                    goto done;
                }
            if (L->nf != NHEADER) {
                st = deftsim_error_set(DEFTSIM_E_INPUT,
                                       "%s:%zu: header, column %zu: '%s' after the last column",
                                       file, line, NHEADER + 1, L->f[NHEADER]);
                goto done;
            }
            state = S_ROWS;
            continue;
        }
        if (state == S_KEYS) {
            if ((st = parse_key(L, file, line, p, key_line))) goto done;
            continue;
        }
        if ((st = parse_row(L, file, line, p, row_line))) goto done;
    }
    if (state == S_FORMAT) {
        st = deftsim_error_set(DEFTSIM_E_INPUT, "%s: empty, not a deftsim device profile", file);
        goto done;
    }
    for (size_t k = 0; k < 5; k++) /* device, backend, isa, threads, cache_bytes */
        if (!key_line[k]) {
            st = deftsim_error_set(DEFTSIM_E_INPUT, "%s: no '%s' line (before the header)", file,
                                   keys[k]);
            goto done;
        }
    if (state != S_ROWS) {
        st = deftsim_error_set(DEFTSIM_E_INPUT, "%s:%zu: the file ends before the header 'op,...'",
                               file, line);
        goto done;
    }
    /* An operation without a row has no model: a run whose methods call it is refused then
     * (deftsim_profile_check), so a profile may cover only what its sources cover. */
    size_t nops = 0;
    for (size_t op = 0; op < DEFTSIM_KOP_COUNT; op++) nops += p->ops[op].present != 0;
    if (nops == 0) {
        st = deftsim_error_set(DEFTSIM_E_INPUT,
                               "%s:%zu: the file ends without any operation's row (after the "
                               "header, one row per operation)",
                               file, line);
        goto done;
    }
done:
    free(L);
    return st;
}

deftsim_status deftsim_profile_load(const char *path, deftsim_profile *out)
{
    char *data = NULL;
    size_t len = 0;
    deftsim_status st = deftsim_read_file(path, &data, &len);
    if (st) return st;
    st = deftsim_profile_parse(data, len, path, out);
    free(data);
    return st;
}

/* ---- Writing ------------------------------------------------------------------------------ */

static void text_field(FILE *f, const char *s)
{
    char buf[FIELD_MAX];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *c = buf; *c; c++)
        if (*c == '\n' || *c == '\r') *c = ' ';
    deftsim_csv_field(f, buf);
}

deftsim_status deftsim_profile_write(const char *path, const deftsim_profile *p)
{
    size_t nops = 0;
    for (size_t op = 0; op < DEFTSIM_KOP_COUNT; op++) nops += p->ops[op].present != 0;
    if (nops == 0) return deftsim_error_set(DEFTSIM_E_USAGE, "profile: no operation's model");
    deftsim_afile *af;
    deftsim_status st = deftsim_afile_open(&af, path);
    if (st) return st;
    FILE *f = deftsim_afile_stream(af);
    const char *vals[NKEYS] = {p->device, p->backend, p->isa[0] ? p->isa : "-", NULL, NULL,
                               p->created, p->deftsim, p->conditions, p->source};
    fprintf(f, "format,%s,%d\n", DEFTSIM_PROFILE_FORMAT, DEFTSIM_PROFILE_VERSION);
    for (size_t k = 0; k < NKEYS; k++) {
        if (k == NKEYS - 1 && !p->source[0]) continue; /* source: optional */
        fprintf(f, "%s,", keys[k]);
        char cb[40];
        if (k == 3)
            fprintf(f, "%u", p->threads);
        else if (k == 4)
            fputs(deftsim_csv_double(cb, sizeof cb, p->cache_bytes), f);
        else
            text_field(f, vals[k]);
        fputc('\n', f);
    }
    for (size_t c = 0; c < NHEADER; c++) fprintf(f, "%s%s", c ? "," : "", header[c]);
    fputc('\n', f);
    char b[40];
    for (size_t op = 0; op < DEFTSIM_KOP_COUNT; op++) {
        const deftsim_profile_op *r = &p->ops[op];
        if (!r->present) continue; /* no model (see deftsim_profile_parse) */
        fprintf(f, "%s", deftsim_kop_name((deftsim_kop)op));
        for (size_t t = 0; t < DEFTSIM_PTERM_COUNT; t++)
            fprintf(f, ",%s", deftsim_csv_double(b, sizeof b, r->coef[t]));
        fprintf(f, ",%u,%.4f\n", r->cases, r->max_rel_err);
    }
    return deftsim_afile_commit(af);
}

/* ---- Predictions -------------------------------------------------------------------------- */

void deftsim_profile_terms(const deftsim_kcall *c, double cache_bytes,
                           double x[DEFTSIM_PTERM_COUNT])
{
    x[DEFTSIM_PTERM_1] = 1;
    x[DEFTSIM_PTERM_N] = (double)c->n;
    x[DEFTSIM_PTERM_K] = (double)c->k;
    x[DEFTSIM_PTERM_SEGS] = (double)c->segs;
    x[DEFTSIM_PTERM_N_DRAM] = 4.0 * (double)c->n > cache_bytes ? (double)c->n : 0;
    x[DEFTSIM_PTERM_K_DRAM] = 64.0 * (double)c->k > cache_bytes ? (double)c->k : 0;
}

double deftsim_profile_predict(const deftsim_profile *p, const deftsim_kcall *c)
{
    if ((unsigned)c->op >= DEFTSIM_KOP_COUNT) return 0;
    const deftsim_profile_op *r = &p->ops[c->op];
    double x[DEFTSIM_PTERM_COUNT], t = 0;
    deftsim_profile_terms(c, p->cache_bytes, x);
    for (size_t j = 0; j < DEFTSIM_PTERM_COUNT; j++) t += r->coef[j] * x[j];
    return t > 0 ? t : 0;
}

double deftsim_profile_cost(void *user, const deftsim_kcall *c)
{
    deftsim_profile *p = user;
    if ((unsigned)c->op < DEFTSIM_KOP_COUNT && !p->ops[c->op].present) {
        if (!p->missing) p->missing = 1u + (unsigned)c->op;
        return 0;
    }
    return deftsim_profile_predict(p, c);
}

static deftsim_status missing_op(const char *file, deftsim_kop op, const char *method)
{
    return deftsim_error_set(DEFTSIM_E_INPUT,
                             "%s has no row for operation '%s', which method %s calls (a "
                             "profile without a model for an operation cannot time it: add "
                             "its row, or run without %s)",
                             file, deftsim_kop_name(op), method, method);
}

deftsim_status deftsim_profile_check(deftsim_profile *p, const char *file, const char *method)
{
    if (!p->missing) return DEFTSIM_OK;
    deftsim_kop op = (deftsim_kop)(p->missing - 1);
    p->missing = 0;
    return missing_op(file, op, method);
}

/* The kernel operations a method's phases call: its registry entry's kernel_ops (tests/profile
 * checks them by running every method on a profile that has rows for these operations only). */
deftsim_status deftsim_profile_require(const deftsim_profile *p, const char *file, int m)
{
    unsigned ops = deftsim_profile_method_ops(m);
    for (size_t op = 0; op < DEFTSIM_KOP_COUNT; op++)
        if ((ops >> op & 1u) && !p->ops[op].present)
            return missing_op(file, (deftsim_kop)op, deftsim_method_name((deftsim_method)m));
    return DEFTSIM_OK;
}

unsigned deftsim_profile_method_ops(int m)
{
    const deftsim_method_desc *d = deftsim_method_get((deftsim_method)m);
    return d ? d->kernel_ops : 0;
}

/* ---- The fit ------------------------------------------------------------------------------ */

/* Weighted least squares on the terms with use[j] set; coef (unscaled) and standard errors. */
static int wls(const deftsim_profile_sample *s, size_t ns, double cache,
               const int use[DEFTSIM_PTERM_COUNT],
               double coef[DEFTSIM_PTERM_COUNT], double se[DEFTSIM_PTERM_COUNT])
{
    size_t idx[DEFTSIM_PTERM_COUNT], p = 0;
    for (size_t j = 0; j < DEFTSIM_PTERM_COUNT; j++)
        if (use[j]) idx[p++] = j;
    for (size_t j = 0; j < DEFTSIM_PTERM_COUNT; j++) coef[j] = se[j] = 0;
    if (p == 0 || ns < p) return -1;
    /* Columns scaled to a largest value of 1: the sizes span 1 to 1e8. */
    double scale[DEFTSIM_PTERM_COUNT] = {0};
    for (size_t i = 0; i < ns; i++) {
        double x[DEFTSIM_PTERM_COUNT];
        deftsim_profile_terms(&s[i].call, cache, x);
        for (size_t a = 0; a < p; a++)
            if (fabs(x[idx[a]]) > scale[a]) scale[a] = fabs(x[idx[a]]);
    }
    for (size_t a = 0; a < p; a++)
        if (scale[a] == 0) return -1;
    gsl_matrix *X = gsl_matrix_alloc(ns, p), *cov = gsl_matrix_alloc(p, p);
    gsl_vector *y = gsl_vector_alloc(ns), *w = gsl_vector_alloc(ns), *c = gsl_vector_alloc(p);
    gsl_multifit_linear_workspace *ws = gsl_multifit_linear_alloc(ns, p);
    int rc = -1;
    if (X && cov && y && w && c && ws) {
        for (size_t i = 0; i < ns; i++) {
            double x[DEFTSIM_PTERM_COUNT];
            deftsim_profile_terms(&s[i].call, cache, x);
            for (size_t a = 0; a < p; a++) gsl_matrix_set(X, i, a, x[idx[a]] / scale[a]);
            gsl_vector_set(y, i, s[i].seconds);
            gsl_vector_set(w, i, 1.0 / (s[i].seconds * s[i].seconds));
        }
        double chisq;
        gsl_error_handler_t *old = gsl_set_error_handler_off();
        if (gsl_multifit_wlinear(X, w, y, c, cov, &chisq, ws) == GSL_SUCCESS) {
            /* wlinear's covariance assumes the weights are exact inverse variances; scale it
             * by the residual variance, as for unknown errors. */
            double dof = ns > p ? (double)(ns - p) : 0;
            double s2 = dof > 0 ? chisq / dof : 0;
            for (size_t a = 0; a < p; a++) {
                coef[idx[a]] = gsl_vector_get(c, a) / scale[a];
                double v = gsl_matrix_get(cov, a, a) * s2;
                se[idx[a]] = (v > 0 ? sqrt(v) : 0) / scale[a];
            }
            rc = dof > 0 ? 0 : 1; /* 1: exact fit, no standard errors */
        }
        gsl_set_error_handler(old);
    }
    gsl_multifit_linear_free(ws);
    gsl_vector_free(c);
    gsl_vector_free(w);
    gsl_vector_free(y);
    gsl_matrix_free(cov);
    gsl_matrix_free(X);
    return rc;
}

deftsim_status deftsim_profile_fit(deftsim_kop op, const deftsim_profile_sample *s, size_t ns,
                                   double cache, deftsim_profile_op *out)
{
    memset(out, 0, sizeof *out);
    if ((unsigned)op >= DEFTSIM_KOP_COUNT)
        return deftsim_error_set(DEFTSIM_E_USAGE, "profile fit: unknown operation %d", (int)op);
    if (ns == 0)
        return deftsim_error_set(DEFTSIM_E_USAGE, "profile fit: %s: no measurements",
                                 deftsim_kop_name(op));
    for (size_t i = 0; i < ns; i++)
        if (!(s[i].seconds > 0) || !isfinite(s[i].seconds))
            return deftsim_error_set(DEFTSIM_E_INPUT,
                                     "profile fit: %s: measurement %zu is %g s (must be > 0)",
                                     deftsim_kop_name(op), i, s[i].seconds);
    /* Candidates: the intercept, and every size that varies over the measurements. */
    int use[DEFTSIM_PTERM_COUNT] = {1, 0, 0, 0, 0, 0};
    if (!(cache >= 0))
        return deftsim_error_set(DEFTSIM_E_USAGE, "profile fit: cache size %g", cache);
    double x0[DEFTSIM_PTERM_COUNT];
    deftsim_profile_terms(&s[0].call, cache, x0);
    for (size_t i = 1; i < ns; i++) {
        double x[DEFTSIM_PTERM_COUNT];
        deftsim_profile_terms(&s[i].call, cache, x);
        for (size_t j = 1; j < DEFTSIM_PTERM_COUNT; j++)
            if (x[j] != x0[j]) use[j] = 1;
    }
    double coef[DEFTSIM_PTERM_COUNT], se[DEFTSIM_PTERM_COUNT];
    for (;;) {
        int rc = wls(s, ns, cache, use, coef, se);
        if (rc < 0) {
            /* Fewer measurements than terms, or a degenerate design: keep dropping. */
            size_t last = DEFTSIM_PTERM_COUNT;
            for (size_t j = DEFTSIM_PTERM_COUNT; j-- > 1;)
                if (use[j]) {
                    last = j;
                    break;
                }
            if (last == DEFTSIM_PTERM_COUNT)
                return deftsim_error_set(DEFTSIM_E_INPUT, "profile fit: %s: the fit failed",
                                         deftsim_kop_name(op));
            use[last] = 0;
            continue;
        }
        /* A cost term below zero has no physical meaning (it would make some sizes cheaper
         * than none): the one with the most negative t value goes, and the rest is refitted.
         * Positive terms stay even when weak: with noisy timings a significance test drops
         * real costs (a per-call overhead measured at a few microseconds). */
        size_t worst = DEFTSIM_PTERM_COUNT, nuse = 0;
        double wscore = 0;
        for (size_t j = 0; j < DEFTSIM_PTERM_COUNT; j++) {
            if (!use[j]) continue;
            nuse++;
            double score = coef[j] >= 0 ? 0 : rc == 0 && se[j] > 0 ? coef[j] / se[j] : coef[j];
            if (score < wscore) {
                wscore = score;
                worst = j;
            }
        }
        if (worst == DEFTSIM_PTERM_COUNT || nuse == 1) {
            if (nuse == 1 && worst != DEFTSIM_PTERM_COUNT && coef[worst] < 0) coef[worst] = 0;
            break;
        }
        use[worst] = 0;
    }
    for (size_t j = 0; j < DEFTSIM_PTERM_COUNT; j++) out->coef[j] = use[j] ? coef[j] : 0;
    out->present = 1;
    out->cases = (unsigned)ns;
    deftsim_profile tmp;
    memset(&tmp, 0, sizeof tmp);
    tmp.ops[op] = *out;
    tmp.cache_bytes = cache;
    double worst = 0;
    for (size_t i = 0; i < ns; i++) {
        deftsim_kcall c = s[i].call;
        c.op = op;
        double e = fabs(deftsim_profile_predict(&tmp, &c) - s[i].seconds) / s[i].seconds;
        if (e > worst) worst = e;
    }
    out->max_rel_err = worst;
    return DEFTSIM_OK;
}

double deftsim_profile_sse(const deftsim_profile_op *r, const deftsim_profile_sample *s,
                           size_t ns, double cache)
{
    double sse = 0;
    for (size_t i = 0; i < ns; i++) {
        double x[DEFTSIM_PTERM_COUNT], t = 0;
        deftsim_profile_terms(&s[i].call, cache, x);
        for (size_t j = 0; j < DEFTSIM_PTERM_COUNT; j++) t += r->coef[j] * x[j];
        if (t < 0) t = 0;
        double e = (t - s[i].seconds) / s[i].seconds;
        sse += e * e;
    }
    return sse;
}

/* ---- deftsim train ------------------------------------------------------------------------ */

deftsim_status deftsim_profile_kctx_new(const deftsim_config *cfg, deftsim_kctx **kc,
                                        deftsim_profile **prof)
{
    *kc = NULL;
    *prof = NULL;
    deftsim_status st = deftsim_kctx_new(kc, "cpu", (unsigned)cfg->device.threads);
    if (st) return deftsim_error_wrap(st, "[device] threads = %d", cfg->device.threads);
    if (cfg->device.kind != DEFTSIM_DEVICE_PROFILE) return DEFTSIM_OK;
    char w[600];
    deftsim_config_where(cfg, "device", "profile", w, sizeof w);
    deftsim_profile *p = malloc(sizeof *p);
    if (!p) {
        st = deftsim_error_nomem("train");
        goto fail;
    }
    if ((st = deftsim_profile_load(cfg->device.profile, p))) goto wrap;
    for (size_t i = 0; i < cfg->sparsify.nmethods; i++)
        if ((st = deftsim_profile_require(p, cfg->device.profile, (int)cfg->sparsify.methods[i])))
            goto wrap;
    if (!p->ops[DEFTSIM_KOP_ACCUMULATE].present) {
        st = deftsim_error_set(DEFTSIM_E_INPUT,
                               "%s has no row for operation 'accumulate', which deftsim train's "
                               "accumulate step needs (add its row)",
                               cfg->device.profile);
        goto wrap;
    }
    deftsim_kctx_set_cost(*kc, deftsim_profile_cost, p);
    *prof = p;
    return DEFTSIM_OK;
wrap:
    st = deftsim_error_wrap(st, "%s", w);
fail:
    free(p);
    deftsim_kctx_free(*kc);
    *kc = NULL;
    return st;
}

deftsim_status deftsim_profile_check_method(deftsim_profile *p, const deftsim_config *cfg, int m)
{
    if (!p) return DEFTSIM_OK;
    deftsim_status st =
        deftsim_profile_check(p, cfg->device.profile, deftsim_method_name((deftsim_method)m));
    if (!st) return DEFTSIM_OK;
    char w[600];
    deftsim_config_where(cfg, "device", "profile", w, sizeof w);
    return deftsim_error_wrap(st, "%s", w);
}

json_t *deftsim_profile_json(const deftsim_profile *p, const char *file)
{
    return json_pack("{s:s, s:s, s:s, s:i, s:s, s:s, s:s}", "file", file, "device", p->device,
                     "backend", p->backend, "threads", (int)p->threads, "created", p->created,
                     "conditions", p->conditions, "source",
                     p->source[0] ? p->source : "measured");
}
