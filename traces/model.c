/* model.c - model tables: built-in CSVs compiled in, and user CSV files, one parser for both. */
#include "deftsim_model.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "deftsim_util.h"

extern const size_t deftsim_models_data_count;
extern const char *const deftsim_models_data_names[];
extern const char *const deftsim_models_data_csv[];

size_t deftsim_model_builtin_count(void) { return deftsim_models_data_count; }

const char *deftsim_model_builtin_name(size_t i)
{
    return i < deftsim_models_data_count ? deftsim_models_data_names[i] : NULL;
}

void deftsim_model_free(deftsim_model *m)
{
    if (!m) return;
    for (size_t i = 0; i < m->nlayers; i++) free(m->layers[i].name);
    free(m->layers);
    free(m->name);
    free(m);
}

/* Splits one CSV line into exactly 4 fields (no quoting: names never hold commas). */
static int split4(char *line, char *f[4])
{
    int n = 0;
    f[n++] = line;
    for (char *p = line; *p; p++) {
        if (*p == ',') {
            if (n == 4) return -1;
            *p = '\0';
            f[n++] = p + 1;
        }
    }
    return n == 4 ? 0 : -1;
}

static deftsim_status parse_shape(const char *s, deftsim_layer *L, const char *origin, size_t line)
{
    L->ndim = 0;
    const char *p = s;
    uint64_t prod = 1;
    if (!*p)
        return deftsim_error_set(DEFTSIM_E_INPUT, "%s:%zu: field 'shape': empty", origin, line);
    while (*p) {
        if (L->ndim == DEFTSIM_MAX_DIMS)
            return deftsim_error_set(DEFTSIM_E_INPUT,
                                     "%s:%zu: field 'shape': more than %d dimensions", origin,
                                     line, DEFTSIM_MAX_DIMS);
        if (!isdigit((unsigned char)*p))
            return deftsim_error_set(DEFTSIM_E_INPUT,
                                     "%s:%zu: field 'shape': '%s' is not dimensions joined by 'x'",
                                     origin, line, s);
        errno = 0;
        char *end;
        unsigned long long d = strtoull(p, &end, 10);
        if (errno || d == 0)
            return deftsim_error_set(DEFTSIM_E_INPUT,
                                     "%s:%zu: field 'shape': dimension in '%s' is zero or too large",
                                     origin, line, s);
        size_t tmp;
        if (deftsim_mul_size((size_t)prod, (size_t)d, &tmp) || tmp > (1ull << 48))
            return deftsim_error_set(DEFTSIM_E_INPUT, "%s:%zu: field 'shape': '%s' is too large",
                                     origin, line, s);
        prod = tmp;
        L->shape[L->ndim++] = d;
        p = end;
        if (*p == 'x') {
            p++;
            if (!*p)
                return deftsim_error_set(DEFTSIM_E_INPUT,
                                         "%s:%zu: field 'shape': '%s' ends with 'x'", origin,
                                         line, s);
        } else if (*p) {
            return deftsim_error_set(DEFTSIM_E_INPUT,
                                     "%s:%zu: field 'shape': '%s' is not dimensions joined by 'x'",
                                     origin, line, s);
        }
    }
    L->numel = prod;
    return DEFTSIM_OK;
}

deftsim_status deftsim_model_parse_csv(const char *text, size_t len, const char *origin,
                                       const char *model_name, deftsim_model **out)
{
    *out = NULL;
    deftsim_status st = DEFTSIM_OK;
    char *buf = malloc(len + 1);
    deftsim_model *m = calloc(1, sizeof *m);
    size_t cap = 0;
    if (!buf || !m) {
        free(buf); free(m);
        return deftsim_error_nomem("%s", origin);
    }
    memcpy(buf, text, len);
    buf[len] = '\0';
    if (memchr(buf, '\0', len)) {
        st = deftsim_error_set(DEFTSIM_E_INPUT, "%s: contains a NUL byte", origin);
        goto fail;
    }
    m->name = strdup(model_name ? model_name : origin);
    if (!m->name) { st = deftsim_error_nomem("%s", origin); goto fail; }
    if (deftsim_utf8_check(m->name, NULL)) {
        st = deftsim_error_set(DEFTSIM_E_INPUT, "%s: the model's name (the file's name without "
                               ".csv, at most 255 bytes) is not valid UTF-8", origin);
        goto fail;
    }

    size_t lineno = 0;
    int header_seen = 0;
    char *save = NULL;
    for (char *line = buf; line; line = save) {
        char *nl = strchr(line, '\n');
        save = nl ? nl + 1 : NULL;
        if (nl) *nl = '\0';
        lineno++;
        size_t l = strlen(line);
        if (l && line[l - 1] == '\r') line[--l] = '\0';
        if (l == 0) continue;
        char *f[4];
        if (!header_seen) {
            if (split4(line, f) || strcmp(f[0], "index") || strcmp(f[1], "name") ||
                strcmp(f[2], "shape") || strcmp(f[3], "numel")) {
                st = deftsim_error_set(DEFTSIM_E_INPUT,
                                       "%s:%zu: header must be 'index,name,shape,numel'", origin,
                                       lineno);
                goto fail;
            }
            header_seen = 1;
            continue;
        }
        if (split4(line, f)) {
            st = deftsim_error_set(DEFTSIM_E_INPUT, "%s:%zu: expected 4 comma-separated fields",
                                   origin, lineno);
            goto fail;
        }
        uint64_t idx, numel;
        if (deftsim_parse_u64(f[0], &idx) || idx != m->nlayers) {
            st = deftsim_error_set(DEFTSIM_E_INPUT,
                                   "%s:%zu: field 'index': '%s' (expected %zu: rows in parameter order)",
                                   origin, lineno, f[0], m->nlayers);
            goto fail;
        }
        if (!f[1][0]) {
            st = deftsim_error_set(DEFTSIM_E_INPUT, "%s:%zu: field 'name': empty", origin, lineno);
            goto fail;
        }
        size_t bad;
        if (deftsim_utf8_check(f[1], &bad)) {
            /* Names go into JSON (trace manifests, results), which holds UTF-8 only. */
            st = deftsim_error_set(DEFTSIM_E_INPUT,
                                   "%s:%zu: field 'name': not valid UTF-8 (byte %zu of the name)",
                                   origin, lineno, bad + 1);
            goto fail;
        }
        if (deftsim_grow(&m->layers, &cap, m->nlayers + 1, sizeof *m->layers)) {
            st = deftsim_error_nomem("%s", origin);
            goto fail;
        }
        deftsim_layer *L = &m->layers[m->nlayers];
        memset(L, 0, sizeof *L);
        if ((st = parse_shape(f[2], L, origin, lineno))) goto fail;
        if (deftsim_parse_u64(f[3], &numel) || numel != L->numel) {
            st = deftsim_error_set(DEFTSIM_E_INPUT,
                                   "%s:%zu: field 'numel': '%s' is not the product of shape %s",
                                   origin, lineno, f[3], f[2]);
            goto fail;
        }
        L->name = strdup(f[1]);
        if (!L->name) { st = deftsim_error_nomem("%s", origin); goto fail; }
        L->offset = m->numel;
        m->nlayers++;
        if (m->numel + numel > (1ull << 48)) {
            st = deftsim_error_set(DEFTSIM_E_INPUT, "%s:%zu: model too large", origin, lineno);
            goto fail;
        }
        m->numel += numel;
    }
    if (!header_seen) {
        st = deftsim_error_set(DEFTSIM_E_INPUT, "%s: empty model table", origin);
        goto fail;
    }
    if (m->nlayers == 0) {
        st = deftsim_error_set(DEFTSIM_E_INPUT, "%s: model table has no tensors", origin);
        goto fail;
    }
    free(buf);
    *out = m;
    return DEFTSIM_OK;
fail:
    free(buf);
    deftsim_model_free(m);
    return st;
}

deftsim_status deftsim_model_builtin(const char *name, deftsim_model **out)
{
    *out = NULL;
    for (size_t i = 0; i < deftsim_models_data_count; i++) {
        if (strcmp(name, deftsim_models_data_names[i]) == 0) {
            const char *csv = deftsim_models_data_csv[i];
            return deftsim_model_parse_csv(csv, strlen(csv), name, name, out);
        }
    }
    return deftsim_error_set(DEFTSIM_E_INPUT, "unknown model '%s' (see 'deftsim models')", name);
}

deftsim_status deftsim_model_load(const char *name_or_path, deftsim_model **out)
{
    *out = NULL;
    for (size_t i = 0; i < deftsim_models_data_count; i++)
        if (strcmp(name_or_path, deftsim_models_data_names[i]) == 0)
            return deftsim_model_builtin(name_or_path, out);
    if (!strchr(name_or_path, '/') && !strstr(name_or_path, ".csv"))
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "unknown model '%s' (see 'deftsim models', or give a CSV path)",
                                 name_or_path);
    char *text;
    size_t len;
    deftsim_status st = deftsim_read_file(name_or_path, &text, &len);
    if (st) return st;
    const char *base = strrchr(name_or_path, '/');
    base = base ? base + 1 : name_or_path;
    char name[256];
    snprintf(name, sizeof name, "%s", base);
    char *dot = strrchr(name, '.');
    if (dot && strcmp(dot, ".csv") == 0) *dot = '\0';
    st = deftsim_model_parse_csv(text, len, name_or_path, name, out);
    free(text);
    return st;
}

deftsim_status deftsim_model_clone(const deftsim_model *m, deftsim_model **out)
{
    *out = NULL;
    deftsim_model *c = calloc(1, sizeof *c);
    if (!c) return deftsim_error_nomem("model table");
    c->name = strdup(m->name);
    c->layers = calloc(m->nlayers ? m->nlayers : 1, sizeof *c->layers);
    if (!c->name || !c->layers) { deftsim_model_free(c); return deftsim_error_nomem("model table"); }
    for (size_t i = 0; i < m->nlayers; i++) {
        c->layers[i] = m->layers[i];
        c->layers[i].name = strdup(m->layers[i].name);
        c->nlayers = i + 1;
        if (!c->layers[i].name) { deftsim_model_free(c); return deftsim_error_nomem("model table"); }
    }
    c->numel = m->numel;
    *out = c;
    return DEFTSIM_OK;
}
