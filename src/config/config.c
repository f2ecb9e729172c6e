/* config.c - scenario files: the strict INI reader, overrides, presets and derived values,
 * the lifecycle (defaults, clone, equality, free). The schema table is config_keys.c.
 *
 * A value of any type goes through one path: text -> deftsim_cfg_parse_value() (type, range,
 * choices) -> deftsim_cfg_fits_one_line() -> deftsim_cfg_commit(). Files, --set overrides and
 * the defaults all use it, so a default is validated like user input and every value can be
 * printed on one line of a file and read back. Calls go one way: config.c -> config_check.c,
 * config_params.c -> config_keys.c. */
#include "config_internal.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ini.h>

#include "deftsim_model.h"
#include "deftsim_util.h"

/* ---- lifecycle -------------------------------------------------------------------------- */

void deftsim_config_free(deftsim_config *cfg)
{
    if (!cfg) return;
    for (size_t i = 0, nk = deftsim_cfg_nkeys(); i < nk; i++)
        deftsim_cfg_release(cfg, deftsim_cfg_key_at(i));
    free(cfg->path);
    free(cfg->origin);
    free(cfg);
}

/* [network] preset_file: a file of `key = value` lines under one [network] header (as
 * `deftsim validate nccl --fit -o` writes it); each fills its key while the scenario leaves it
 * at its default, ahead of the built-in preset, which the file may name (`preset = NAME`). */
static deftsim_status apply_preset_file(deftsim_config *cfg)
{
    const char *path = cfg->network.preset_file;
    char *text = NULL;
    size_t len = 0;
    deftsim_status st = deftsim_read_file(path, &text, &len);
    if (st) return deftsim_error_wrap(st, "[network] preset_file");
    int line = 0, in_network = 0;
    for (char *p = text, *next; p && *p; p = next) {
        line++;
        next = strchr(p, '\n');
        if (next) *next++ = '\0';
        char *l = deftsim_cfg_trim(p);
        if (!*l || *l == '#' || *l == ';') continue;
        if (*l == '[') {
            in_network = strcmp(l, "[network]") == 0;
            if (!in_network) {
                st = deftsim_error_set(DEFTSIM_E_INPUT, "%s:%d: section %s: a preset file holds "
                                       "[network] keys only", path, line, l);
                break;
            }
            continue;
        }
        char *eq = strchr(l, '=');
        if (!in_network || !eq) {
            st = deftsim_error_set(DEFTSIM_E_INPUT, "%s:%d: expected `key = value` under [network]",
                                   path, line);
            break;
        }
        *eq = '\0';
        char *key = deftsim_cfg_trim(l), *value = deftsim_cfg_trim(eq + 1);
        int k = deftsim_cfg_key_index("network", key);
        if (k < 0 || (size_t)k == deftsim_cfg_kidx("network", "preset_file")) {
            st = deftsim_error_set(DEFTSIM_E_INPUT, "%s:%d: [network] %s: %s", path, line, key,
                                   k < 0 ? "no such key" : "a preset file cannot name another");
            break;
        }
        if (*deftsim_cfg_key_line(cfg, k) != 0) continue;
        if ((st = deftsim_cfg_set_value(cfg, deftsim_cfg_key_at(k), value))) {
            st = deftsim_error_wrap(st, "%s:%d: [network] %s", path, line, key);
            break;
        }
        *deftsim_cfg_key_line(cfg, k) = DEFTSIM_CFG_ORIGIN_PRESET_FILE;
    }
    free(text);
    return st;
}

/* [network] preset: the keys an earlier preset set go back to their defaults, then the
 * preset file's keys and the preset's fill every key still at its default (one set in the
 * scenario or by --set wins). */
static deftsim_status apply_preset(deftsim_config *cfg)
{
    deftsim_status st;
    for (size_t i = 0, nk = deftsim_cfg_nkeys(); i < nk; i++) {
        int *line = deftsim_cfg_key_line(cfg, i);
        if (*line != DEFTSIM_CFG_ORIGIN_PRESET && *line != DEFTSIM_CFG_ORIGIN_PRESET_FILE)
            continue;
        *line = 0;
        const char *dflt = deftsim_cfg_info(i)->dflt;
        if (dflt && (st = deftsim_cfg_set_value(cfg, deftsim_cfg_key_at(i), dflt)))
            return deftsim_error_wrap(DEFTSIM_E_INTERNAL, "default of [%s] %s",
                                      deftsim_cfg_key_at(i)->info.section,
                                      deftsim_cfg_key_at(i)->info.key);
    }
    if (cfg->network.preset_file && (st = apply_preset_file(cfg))) return st;
    if (cfg->network.preset <= 0) return DEFTSIM_OK;
    const deftsim_config_preset *pr = deftsim_config_preset_get((size_t)cfg->network.preset - 1);
    if (!pr) return deftsim_error_set(DEFTSIM_E_INTERNAL, "[network] preset %d: no such preset",
                                      cfg->network.preset);
    for (size_t j = 0; j < pr->nkeys; j++) {
        int k = deftsim_cfg_key_index("network", pr->keys[j].key);
        if (k < 0)
            return deftsim_error_set(DEFTSIM_E_INTERNAL, "preset %s: no key [network] %s", pr->name,
                                     pr->keys[j].key);
        if (*deftsim_cfg_key_line(cfg, k) != 0) continue;
        if ((st = deftsim_cfg_set_value(cfg, deftsim_cfg_key_at(k), pr->keys[j].value)))
            return deftsim_error_wrap(DEFTSIM_E_INTERNAL, "preset %s: [network] %s", pr->name,
                                      pr->keys[j].key);
        *deftsim_cfg_key_line(cfg, k) = DEFTSIM_CFG_ORIGIN_PRESET;
    }
    return DEFTSIM_OK;
}

/* Keeps output at results/<name> while the user has not set it, and nic_bandwidth at
 * bandwidth while neither the user nor a preset has. */
static deftsim_status derive(deftsim_config *cfg)
{
    size_t kn = deftsim_cfg_kidx("network", "nic_bandwidth");
    if (*deftsim_cfg_key_line(cfg, kn) == 0) cfg->network.nic_bandwidth = cfg->network.bandwidth;
    /* [scenario] iterations unset: a trace's whole length, or "3". */
    size_t ki = deftsim_cfg_kidx("scenario", "iterations");
    if (!*deftsim_cfg_key_line(cfg, ki))
        cfg->scenario.iterations = deftsim_cfg_iterations(cfg, deftsim_cfg_info(ki)->dflt);
    size_t k = deftsim_cfg_kidx("scenario", "output");
    if (*deftsim_cfg_key_line(cfg, k) != 0) return DEFTSIM_OK;
    char buf[NAME_MAX_LEN + 16];
    snprintf(buf, sizeof buf, "results/%s", cfg->scenario.name);
    deftsim_status st = deftsim_cfg_set_value(cfg, deftsim_cfg_key_at(k), buf);
    if (st) {
        char w[512];
        deftsim_cfg_where(cfg, k, w, sizeof w);
        return deftsim_error_wrap(st, "%s", w);
    }
    return DEFTSIM_OK;
}

static deftsim_status config_new(const char *name, const char *path, deftsim_config **out)
{
    *out = NULL;
    deftsim_config *cfg = calloc(1, sizeof *cfg);
    if (!cfg || !(cfg->origin = deftsim_cfg_origin_new(NULL))) {
        free(cfg);
        return deftsim_error_nomem("config");
    }
    deftsim_status st;
    if (path && !(cfg->path = strdup(path))) {
        st = deftsim_error_nomem("config");
        goto fail;
    }
    for (size_t i = 0, nk = deftsim_cfg_nkeys(); i < nk; i++) {
        const char *dflt = deftsim_cfg_info(i)->dflt;
        if (!dflt) continue;
        if ((st = deftsim_cfg_set_value(cfg, deftsim_cfg_key_at(i), dflt))) {
            /* The table's own defaults failed its own checks: a bug, not bad input. */
            st = deftsim_error_wrap(DEFTSIM_E_INTERNAL, "default of [%s] %s",
                                    deftsim_cfg_key_at(i)->info.section,
                                    deftsim_cfg_key_at(i)->info.key);
            goto fail;
        }
    }
    const keydef *kname = deftsim_cfg_key_at(deftsim_cfg_kidx("scenario", "name"));
    if ((st = deftsim_cfg_set_value(cfg, kname, name))) {
        st = deftsim_error_wrap(st, "[scenario] name");
        goto fail;
    }
    if ((st = derive(cfg))) goto fail;
    *out = cfg;
    return DEFTSIM_OK;
fail:
    deftsim_config_free(cfg);
    return st;
}

deftsim_status deftsim_config_default(const char *name, deftsim_config **out)
{
    return config_new(name ? name : "scenario", NULL, out);
}

deftsim_status deftsim_config_clone(const deftsim_config *cfg, deftsim_config **out)
{
    *out = NULL;
    deftsim_config *c = calloc(1, sizeof *c);
    if (!c) return deftsim_error_nomem("config");
    *c = *cfg;
    c->path = NULL;
    c->origin = NULL;
    /* Drop the shallow pointers first so that a failure below frees only what c owns. */
    for (size_t i = 0, nk = deftsim_cfg_nkeys(); i < nk; i++) {
        ktype t = deftsim_cfg_key_at(i)->type;
        if (t == T_NAME || t == T_PATH || t == T_OPTPATH || t == T_ENUM_LIST ||
            t == T_DOUBLE_LIST || t == T_INT_LIST) {
            deftsim_cfg_set_ptr(c, deftsim_cfg_key_at(i)->off, NULL);
            if (deftsim_cfg_key_at(i)->count_off)
                deftsim_cfg_set_count(c, deftsim_cfg_key_at(i)->count_off, 0);
        }
    }
    if (!(c->origin = deftsim_cfg_origin_new(cfg->origin))) goto nomem;
    if (cfg->path && !(c->path = strdup(cfg->path))) goto nomem;
    for (size_t i = 0, nk = deftsim_cfg_nkeys(); i < nk; i++) {
        const keydef *k = deftsim_cfg_key_at(i);
        kval v = deftsim_cfg_view(cfg, k);
        size_t elem = k->type == T_ENUM_LIST ? sizeof(int)
                    : k->type == T_DOUBLE_LIST ? sizeof(double) : sizeof(int64_t);
        switch (k->type) {
        case T_NAME:
        case T_PATH:
        case T_OPTPATH:
            if (v.s) {
                char *s = strdup(v.s);
                if (!s) goto nomem;
                deftsim_cfg_set_ptr(c, k->off, s);
            }
            break;
        case T_ENUM_LIST:
        case T_DOUBLE_LIST:
        case T_INT_LIST: {
            void *a = malloc(v.n ? v.n * elem : 1);
            if (!a) goto nomem;
            if (v.n) memcpy(a, v.arr, v.n * elem);
            deftsim_cfg_set_ptr(c, k->off, a);
            deftsim_cfg_set_count(c, k->count_off, v.n);
            break;
        }
        default: break;
        }
    }
    *out = c;
    return DEFTSIM_OK;
nomem:
    deftsim_config_free(c);
    return deftsim_error_nomem("config");
}

int deftsim_config_equal(const deftsim_config *a, const deftsim_config *b)
{
    for (size_t i = 0, nk = deftsim_cfg_nkeys(); i < nk; i++) {
        const keydef *k = deftsim_cfg_key_at(i);
        kval x = deftsim_cfg_view(a, k), y = deftsim_cfg_view(b, k);
        size_t elem = k->type == T_ENUM_LIST ? sizeof(int)
                    : k->type == T_DOUBLE_LIST ? sizeof(double) : sizeof(int64_t);
        switch (k->type) {
        case T_NAME:
        case T_PATH:
        case T_OPTPATH:
            if (!x.s != !y.s || (x.s && strcmp(x.s, y.s))) return 0;
            break;
        case T_U64: if (x.u != y.u) return 0; break;
        case T_INT:
        case T_ENUM: if (x.i != y.i) return 0; break;
        case T_DOUBLE:
        case T_BANDWIDTH:
        case T_DURATION: if (x.d != y.d) return 0; break;
        case T_ENUM_LIST:
        case T_DOUBLE_LIST:
        case T_INT_LIST:
            if (x.n != y.n || (x.n && memcmp(x.arr, y.arr, x.n * elem))) return 0;
            break;
        }
    }
    return 1;
}

/* ---- overrides -------------------------------------------------------------------------- */

deftsim_status deftsim_config_apply_override(deftsim_config *cfg, const char *assignment)
{
    deftsim_status st = DEFTSIM_OK;
    char *copy = strdup(assignment);
    if (!copy) return deftsim_error_nomem("config");
    char *eq = strchr(copy, '=');
    if (!eq) {
        st = deftsim_error_set(DEFTSIM_E_USAGE, "--set %s: expected section.key=value", assignment);
        goto done;
    }
    *eq = '\0';
    char *lhs = deftsim_cfg_trim(copy), *value = deftsim_cfg_trim(eq + 1);
    char *dot = strchr(lhs, '.');
    if (!dot) {
        st = deftsim_error_set(DEFTSIM_E_USAGE,
                               "--set %s: no section (expected section.key=value)", lhs);
        goto done;
    }
    *dot = '\0';
    const char *section = lhs, *key = dot + 1;
    if (deftsim_cfg_section_index(section) < 0) {
        char known[256];
        deftsim_cfg_list_sections(known, sizeof known);
        st = deftsim_error_set(DEFTSIM_E_USAGE, "--set %s.%s: unknown section (sections: %s)",
                               section, key, known);
        goto done;
    }
    int k = deftsim_cfg_key_index(section, key);
    char w[300];
    snprintf(w, sizeof w, "--set %s.%s", section, key);
    if (k < 0) {
        st = deftsim_cfg_unknown_key_error(DEFTSIM_E_USAGE, w, section);
        goto done;
    }
    if ((st = deftsim_cfg_set_value(cfg, deftsim_cfg_key_at(k), value))) {
        st = deftsim_error_wrap(st, "%s", w);
        goto done;
    }
    *deftsim_cfg_key_line(cfg, k) = -1;
    if (((size_t)k == deftsim_cfg_kidx("network", "preset") ||
         (size_t)k == deftsim_cfg_kidx("network", "preset_file")) &&
        (st = apply_preset(cfg)))
        goto done;
    /* The set follows the model and the source too (a sweep's variant of one model). */
    if (((size_t)k == deftsim_cfg_kidx("gradients", "params") ||
         (size_t)k == deftsim_cfg_kidx("gradients", "model") ||
         (size_t)k == deftsim_cfg_kidx("gradients", "source")) &&
        (st = deftsim_cfg_apply_params(cfg)))
        goto done;
    st = derive(cfg);
done:
    free(copy);
    return st;
}

/* ---- the file reader -------------------------------------------------------------------- */

/* inih does not pass line numbers to the handler in Debian's build (INI_HANDLER_LINENO is 0),
 * so the text is fed to it line by line through this reader, which counts lines. The reader
 * also does what inih would accept silently: it rejects section headers that are unknown,
 * repeated or followed by text, lines without '=', and lines too long for inih's buffer
 * (which inih would split into two lines). It strips leading blanks so that an indented line
 * is never taken as a continuation of the previous value. */
typedef struct {
    const char *p, *end;
    int line;
    int failed;        /* set once a message is recorded; the reader then ends the parse */
    deftsim_status st;
    deftsim_config *cfg;
} reader_state;

static deftsim_status fail_at(reader_state *rs, deftsim_status st)
{
    rs->failed = 1;
    rs->st = st;
    return st;
}

static char *ini_reader_fn(char *str, int num, void *stream)
{
    reader_state *rs = stream;
    if (rs->failed || rs->p >= rs->end) return NULL;
    const char *nl = memchr(rs->p, '\n', (size_t)(rs->end - rs->p));
    const char *s = rs->p, *e = nl ? nl : rs->end;
    rs->p = nl ? nl + 1 : rs->end;
    rs->line++;
    const char *path = rs->cfg->path;
    if (rs->line == 1 && e - s >= 3 && memcmp(s, "\xEF\xBB\xBF", 3) == 0) s += 3;
    while (s < e && (*s == ' ' || *s == '\t')) s++;
    while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r')) e--;
    size_t len = (size_t)(e - s);
    int limit = num - 2 < DEFTSIM_CONFIG_MAX_LINE ? num - 2 : DEFTSIM_CONFIG_MAX_LINE;
    if (len > (size_t)limit) {
        fail_at(rs, deftsim_error_set(DEFTSIM_E_INPUT, "%s:%d: line longer than %d characters",
                                      path, rs->line, limit));
        return NULL;
    }
    char text[DEFTSIM_CONFIG_MAX_LINE + 1];
    memcpy(text, s, len);
    text[len] = '\0';
    if (len && text[0] == '[') {
        char *close = strchr(text, ']');
        if (!close) {
            fail_at(rs, deftsim_error_set(DEFTSIM_E_INPUT, "%s:%d: '%s': section header without ']'",
                                          path, rs->line, text));
            return NULL;
        }
        const char *rest = close + 1;
        while (*rest == ' ' || *rest == '\t') rest++;
        if (*rest && *rest != ';' && *rest != '#') {
            fail_at(rs, deftsim_error_set(DEFTSIM_E_INPUT, "%s:%d: '%s': text after the section header",
                                          path, rs->line, text));
            return NULL;
        }
        *close = '\0';
        int si = deftsim_cfg_section_index(text + 1);
        if (si < 0) {
            char known[256];
            deftsim_cfg_list_sections(known, sizeof known);
            fail_at(rs, deftsim_error_set(DEFTSIM_E_INPUT, "%s:%d: [%s]: unknown section (sections: %s)",
                                          path, rs->line, text + 1, known));
            return NULL;
        }
        int *first = deftsim_cfg_section_line(rs->cfg, si);
        if (*first) {
            fail_at(rs, deftsim_error_set(DEFTSIM_E_INPUT,
                                          "%s:%d: [%s]: section given twice (first on line %d)",
                                          path, rs->line, text + 1, *first));
            return NULL;
        }
        *first = rs->line;
        *close = ']';
    } else if (len && text[0] != ';' && text[0] != '#') {
        /* inih's rule: '=' or ':' before any inline comment (a ';' after a blank). */
        int ok = 0;
        for (size_t i = 0; i < len; i++) {
            if (text[i] == '=' || text[i] == ':') { ok = 1; break; }
            if (text[i] == ';' && i && (text[i - 1] == ' ' || text[i - 1] == '\t')) break;
        }
        if (!ok) {
            fail_at(rs, deftsim_error_set(DEFTSIM_E_INPUT,
                                          "%s:%d: '%s' is not '[section]', 'key = value' or a comment",
                                          path, rs->line, text));
            return NULL;
        }
    }
    memcpy(str, text, len);
    str[len] = '\n';
    str[len + 1] = '\0';
    return str;
}

static int ini_handler_fn(void *user, const char *section, const char *name, const char *value)
{
    reader_state *rs = user;
    if (rs->failed) return 0;
    const char *path = rs->cfg->path;
    if (!value) value = "";
    if (!section[0]) {
        fail_at(rs, deftsim_error_set(DEFTSIM_E_INPUT, "%s:%d: %s: key outside any section", path,
                                      rs->line, name));
        return 0;
    }
    char w[512];
    if (!name[0]) {
        fail_at(rs, deftsim_error_set(DEFTSIM_E_INPUT, "%s:%d: [%s]: no key before '='", path,
                                      rs->line, section));
        return 0;
    }
    snprintf(w, sizeof w, "%s:%d: [%s] %s", path, rs->line, section, name);
    int k = deftsim_cfg_key_index(section, name);
    if (k < 0) {
        fail_at(rs, deftsim_cfg_unknown_key_error(DEFTSIM_E_INPUT, w, section));
        return 0;
    }
    int *first = &*deftsim_cfg_key_line(rs->cfg, k);
    if (*first > 0) {
        fail_at(rs, deftsim_error_set(DEFTSIM_E_INPUT, "%s: duplicate key (first on line %d)", w,
                                      *first));
        return 0;
    }
    deftsim_status st = deftsim_cfg_set_value(rs->cfg, deftsim_cfg_key_at(k), value);
    if (st) {
        fail_at(rs, deftsim_error_wrap(st, "%s", w));
        return 0;
    }
    *first = rs->line;
    return 1;
}

static void default_name(const char *origin, char *buf, size_t cap)
{
    const char *base = strrchr(origin, '/');
    base = base ? base + 1 : origin;
    snprintf(buf, cap, "%s", base);
    size_t n = strlen(buf);
    if (n > 4 && strcmp(buf + n - 4, ".ini") == 0) buf[n - 4] = '\0';
}


static deftsim_status parse_impl(const char *text, const char *origin,
                                 const char *const *overrides, size_t noverrides, int train,
                                 deftsim_config **out)
{
    *out = NULL;
    /* The name from the file's name is filled in last, and only if neither the file nor an
     * override sets one, so that an odd file name never stands in the way of an explicit one. */
    deftsim_config *cfg;
    deftsim_status st = config_new("scenario", origin, &cfg);
    if (st) return st;

    reader_state rs = {.p = text, .end = text + strlen(text), .cfg = cfg};
    int r = ini_parse_stream(ini_reader_fn, &rs, ini_handler_fn, &rs);
    if (rs.failed) {
        st = rs.st;
        goto fail;
    }
    if (r != 0) {
        /* Only reachable if inih rejects something the reader let through. */
        st = deftsim_error_set(DEFTSIM_E_INPUT, "%s:%d: syntax error", origin, r);
        goto fail;
    }
    for (size_t i = 0; i < noverrides; i++)
        if ((st = deftsim_config_apply_override(cfg, overrides[i]))) goto fail;
    size_t kn = deftsim_cfg_kidx("scenario", "name");
    if (*deftsim_cfg_key_line(cfg, kn) == 0) {
        char name[4096];
        default_name(origin, name, sizeof name);
        if ((st = deftsim_cfg_set_value(cfg, deftsim_cfg_key_at(kn), name))) {
            char w[512], why[512];
            deftsim_cfg_where(cfg, kn, w, sizeof w);
            snprintf(why, sizeof why, "%s", deftsim_error_message());
            st = deftsim_error_set(st, "%s: %s (from the file's name; set it in the file)", w, why);
            goto fail;
        }
    }
    if ((st = apply_preset(cfg)) || (st = deftsim_cfg_apply_params(cfg))) goto fail;
    if ((st = derive(cfg))) goto fail;
    if ((st = deftsim_cfg_check(cfg, train))) goto fail;
    *out = cfg;
    return DEFTSIM_OK;
fail:
    deftsim_config_free(cfg);
    return st;
}

deftsim_status deftsim_config_parse(const char *text, const char *origin,
                                    const char *const *overrides, size_t noverrides,
                                    deftsim_config **out)
{
    return parse_impl(text, origin, overrides, noverrides, 0, out);
}

deftsim_status deftsim_config_parse_train(const char *text, const char *origin,
                                          const char *const *overrides, size_t noverrides,
                                          deftsim_config **out)
{
    return parse_impl(text, origin, overrides, noverrides, 1, out);
}

static deftsim_status load_impl(const char *path, const char *const *overrides,
                                size_t noverrides, int train, deftsim_config **out)
{
    *out = NULL;
    char *text;
    size_t len;
    deftsim_status st = deftsim_read_file(path, &text, &len);
    if (st) return st;
    if (strlen(text) != len) {
        free(text);
        return deftsim_error_set(DEFTSIM_E_INPUT, "%s: contains a NUL byte", path);
    }
    st = parse_impl(text, path, overrides, noverrides, train, out);
    free(text);
    return st;
}

deftsim_status deftsim_config_load(const char *path, const char *const *overrides,
                                   size_t noverrides, deftsim_config **out)
{
    return load_impl(path, overrides, noverrides, 0, out);
}

deftsim_status deftsim_config_load_train(const char *path, const char *const *overrides,
                                         size_t noverrides, deftsim_config **out)
{
    return load_impl(path, overrides, noverrides, 1, out);
}
