/* config_value.c - the one path of a scenario value: text -> parse_value() (type, range,
 * choices) -> fits_one_line() -> commit(), its rendering back to INI text, and the integer
 * lists with ranges (deftsim_parse_int_list). */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "config_internal.h"
#include "deftsim_units.h"
#include "deftsim_util.h"

static int enum_index(const char *const *names, const char *s)
{
    for (int i = 0; names[i]; i++)
        if (strcmp(names[i], s) == 0) return i;
    return -1;
}

/* ---- values ----------------------------------------------------------------------------- */

void deftsim_cfg_kval_free(kval *v)
{
    free(v->s);
    free(v->arr);
    memset(v, 0, sizeof *v);
}

static void *field(deftsim_config *cfg, size_t off) { return (char *)cfg + off; }
static const void *cfield(const deftsim_config *cfg, size_t off) { return (const char *)cfg + off; }

static void *get_ptr(const deftsim_config *cfg, size_t off)
{
    void *p;
    memcpy(&p, cfield(cfg, off), sizeof p);
    return p;
}

void deftsim_cfg_set_ptr(deftsim_config *cfg, size_t off, void *p) { memcpy(field(cfg, off), &p, sizeof p); }

static size_t get_count(const deftsim_config *cfg, size_t off)
{
    size_t n;
    memcpy(&n, cfield(cfg, off), sizeof n);
    return n;
}

void deftsim_cfg_set_count(deftsim_config *cfg, size_t off, size_t n) { memcpy(field(cfg, off), &n, sizeof n); }

static int get_int(const deftsim_config *cfg, size_t off)
{
    int v;
    memcpy(&v, cfield(cfg, off), sizeof v);
    return v;
}

/* Shortest "%.*g" text that reads back as exactly d. */
static void format_double(double d, char *buf, size_t cap)
{
    for (int p = 1; p <= 17; p++) {
        snprintf(buf, cap, "%.*g", p, d);
        if (strtod(buf, NULL) == d) return;
    }
}

static void format_range(const keydef *k, char *buf, size_t cap)
{
    char lo[40], hi[40];
    format_double(k->lo, lo, sizeof lo);
    format_double(k->hi, hi, sizeof hi);
    /* A whole bound below a million reads better in full ("60", not "6e+01"). */
    if (k->hi == floor(k->hi) && fabs(k->hi) < 1e6) snprintf(hi, sizeof hi, "%.0f", k->hi);
    if (k->flags & HI_INF)
        snprintf(buf, cap, "%c%s, inf)", k->flags & LO_OPEN ? '(' : '[', lo);
    else
        snprintf(buf, cap, "%c%s, %s%c", k->flags & LO_OPEN ? '(' : '[', lo, hi,
                 k->flags & HI_OPEN ? ')' : ']');
}

/* Number checks shared by T_DOUBLE and T_DOUBLE_LIST; tok is the text as written. */
static deftsim_status parse_number(const keydef *k, const char *tok, double *out)
{
    double d;
    if (deftsim_parse_double(tok, &d))
        return deftsim_error_set(DEFTSIM_E_INPUT, "'%s' is not a number", tok);
    if (k->check) {
        const char *why = k->check(d);
        if (why) return deftsim_error_set(DEFTSIM_E_INPUT, "%s %s", tok, why);
    } else {
        int below = (k->flags & LO_OPEN) ? d <= k->lo : d < k->lo;
        int above = (k->flags & HI_INF) ? 0 : (k->flags & HI_OPEN) ? d >= k->hi : d > k->hi;
        if (below || above) {
            char range[96];
            format_range(k, range, sizeof range);
            return deftsim_error_set(DEFTSIM_E_INPUT, "%s is outside %s", tok, range);
        }
    }
    *out = d;
    return DEFTSIM_OK;
}

/* T_BANDWIDTH and T_DURATION: a number in the base unit (bytes/s, seconds) or with one of
 * SimGrid's units; the range is the base unit's. */
static deftsim_status parse_unit_number(const keydef *k, const char *tok, double *out)
{
    double d;
    int bw = k->type == T_BANDWIDTH;
    if (bw ? deftsim_parse_bandwidth(tok, &d) : deftsim_parse_duration(tok, &d))
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 bw ? "'%s' is not a bandwidth (bytes/s, or a number with Bps, "
                                      "kBps, MBps, GBps, KiBps, MiBps, GiBps, bps, kbps, Mbps, "
                                      "Gbps, ...)"
                                    : "'%s' is not a duration (seconds, or a number with s, ms, "
                                      "us, ns, ps)",
                                 tok);
    int below = (k->flags & LO_OPEN) ? d <= k->lo : d < k->lo;
    int above = (k->flags & HI_OPEN) ? d >= k->hi : d > k->hi;
    if (below || above) {
        char range[96], val[40];
        format_range(k, range, sizeof range);
        format_double(d, val, sizeof val);
        return deftsim_error_set(DEFTSIM_E_INPUT, "%s (%s %s) is outside %s %s", tok, val,
                                 bw ? "bytes/s" : "s", range, bw ? "bytes/s" : "s");
    }
    *out = d;
    return DEFTSIM_OK;
}

char *deftsim_cfg_trim(char *s)
{
    while (*s == ' ' || *s == '\t') s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t')) s[--n] = '\0';
    return s;
}

/* Calls fn on each comma-separated item, trimmed; an empty item is an error. */
static deftsim_status for_each_item(const char *text, deftsim_status (*fn)(const char *, void *),
                                    void *ctx)
{
    char *copy = strdup(text);
    if (!copy) return deftsim_error_nomem("config");
    deftsim_status st = DEFTSIM_OK;
    char *p = copy;
    if (!*deftsim_cfg_trim(copy)) {
        st = deftsim_error_set(DEFTSIM_E_INPUT, "empty list");
        goto done;
    }
    for (;;) {
        char *comma = strchr(p, ',');
        if (comma) *comma = '\0';
        char *item = deftsim_cfg_trim(p);
        if (!*item) {
            st = deftsim_error_set(DEFTSIM_E_INPUT, "empty item in list '%s'", text);
            goto done;
        }
        if ((st = fn(item, ctx))) goto done;
        if (!comma) break;
        p = comma + 1;
    }
done:
    free(copy);
    return st;
}

typedef struct {
    const keydef *k;
    kval *v;
    size_t cap;
} list_ctx;

static deftsim_status grow(list_ctx *c, size_t elem)
{
    if (c->v->n < c->cap) return DEFTSIM_OK;
    if (c->v->n >= DEFTSIM_LIST_MAX)
        return deftsim_error_set(DEFTSIM_E_INPUT, "more than %d values", DEFTSIM_LIST_MAX);
    if (deftsim_grow(&c->v->arr, &c->cap, c->v->n + 1, elem)) return deftsim_error_nomem("config");
    return DEFTSIM_OK;
}

void deftsim_cfg_names_text(const char *const *names, char *buf, size_t cap)
{
    size_t o = 0;
    if (cap) buf[0] = '\0';
    for (int i = 0; names[i] && o < cap; i++)
        o += (size_t)snprintf(buf + o, cap - o, "%s%s", i ? ", " : "", names[i]);
}

static deftsim_status parse_enum(const keydef *k, const char *tok, int *out)
{
    int e = enum_index(knames(k), tok);
    if (e < 0) {
        char all[256];
        deftsim_cfg_names_text(knames(k), all, sizeof all);
        return deftsim_error_set(DEFTSIM_E_INPUT, "'%s' is not one of %s", tok, all);
    }
    *out = e;
    return DEFTSIM_OK;
}

static deftsim_status enum_item(const char *tok, void *ctx)
{
    list_ctx *c = ctx;
    int e = 0;
    deftsim_status st = parse_enum(c->k, tok, &e);
    if (st) return st;
    int *a = c->v->arr;
    for (size_t i = 0; i < c->v->n; i++)
        if (a[i] == e) return deftsim_error_set(DEFTSIM_E_INPUT, "'%s' is listed twice", tok);
    if ((st = grow(c, sizeof(int)))) return st;
    ((int *)c->v->arr)[c->v->n++] = e;
    return DEFTSIM_OK;
}

static deftsim_status double_item(const char *tok, void *ctx)
{
    list_ctx *c = ctx;
    double d;
    deftsim_status st = parse_number(c->k, tok, &d);
    if (st) return st;
    double *a = c->v->arr;
    for (size_t i = 0; i < c->v->n; i++)
        if (a[i] == d) return deftsim_error_set(DEFTSIM_E_INPUT, "%s is listed twice", tok);
    if ((st = grow(c, sizeof(double)))) return st;
    ((double *)c->v->arr)[c->v->n++] = d;
    return DEFTSIM_OK;
}

/* Strings must survive a trip through a file and into the results' JSON manifest: valid UTF-8,
 * printable, and no " ;" that inih would read as the start of an inline comment. */
static deftsim_status check_string(const char *s)
{
    size_t bad;
    if (deftsim_utf8_check(s, &bad))
        return deftsim_error_set(DEFTSIM_E_INPUT, "not valid UTF-8 (byte %zu of the value)",
                                 bad + 1);
    /* A printed configuration writes "key = value": a leading ';' would follow a space. */
    if (s[0] == ';')
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "'%s' starts with ';', which a scenario file reads as a comment "
                                 "after 'key = '", s);
    for (const char *p = s; *p; p++) {
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            return deftsim_error_set(DEFTSIM_E_INPUT, "'%s' contains a control character", s);
        if (*p == ';' && p > s && (p[-1] == ' ' || p[-1] == '\t'))
            return deftsim_error_set(DEFTSIM_E_INPUT,
                                     "'%s' contains ' ;', which a scenario file reads as a comment", s);
    }
    if (s[0] && (s[0] == ' ' || s[0] == '\t' || s[strlen(s) - 1] == ' ' || s[strlen(s) - 1] == '\t'))
        return deftsim_error_set(DEFTSIM_E_INPUT, "'%s' starts or ends with a space", s);
    return DEFTSIM_OK;
}

deftsim_status deftsim_cfg_parse_value(const keydef *k, const char *text, kval *v)
{
    memset(v, 0, sizeof *v);
    deftsim_status st;
    switch (k->type) {
    case T_NAME:
    case T_PATH:
    case T_OPTPATH:
        if (!text[0]) {
            if (k->type == T_OPTPATH) return DEFTSIM_OK; /* unset */
            return deftsim_error_set(DEFTSIM_E_INPUT, "empty value");
        }
        if ((st = check_string(text))) return st;
        if (k->type == T_NAME) {
            if (strlen(text) > NAME_MAX_LEN)
                return deftsim_error_set(DEFTSIM_E_INPUT, "'%.20s...' is longer than %d characters",
                                         text, NAME_MAX_LEN);
            if (strchr(text, '/'))
                return deftsim_error_set(DEFTSIM_E_INPUT, "'%s' contains '/'", text);
        }
        v->s = strdup(text);
        if (!v->s) return deftsim_error_nomem("config");
        return DEFTSIM_OK;
    case T_U64:
        if (!text[0]) return deftsim_error_set(DEFTSIM_E_INPUT, "empty value");
        if (text[0] == '-' || text[0] == '+' || deftsim_parse_u64(text, &v->u)) {
            int64_t neg;
            if (text[0] == '-' && !deftsim_parse_i64(text, &neg))
                return deftsim_error_set(DEFTSIM_E_INPUT, "%s is outside [%lld, %lld]", text,
                                         (long long)k->imin, (long long)k->imax);
            return deftsim_error_set(DEFTSIM_E_INPUT, "'%s' is not an integer", text);
        }
        if (v->u > (uint64_t)k->imax)
            return deftsim_error_set(DEFTSIM_E_INPUT, "%s is outside [%lld, %lld]", text,
                                     (long long)k->imin, (long long)k->imax);
        return DEFTSIM_OK;
    case T_INT:
        if (!text[0]) return deftsim_error_set(DEFTSIM_E_INPUT, "empty value");
        if (text[0] == '+' || deftsim_parse_i64(text, &v->i))
            return deftsim_error_set(DEFTSIM_E_INPUT, "'%s' is not an integer", text);
        if (k->choices) {
            char all[64] = "";
            size_t o = 0;
            for (const int *c = k->choices; *c; c++) {
                if (*c == v->i) return DEFTSIM_OK;
                o += (size_t)snprintf(all + o, sizeof all - o, "%s%d", o ? ", " : "", *c);
            }
            return deftsim_error_set(DEFTSIM_E_INPUT, "%s is not one of %s", text, all);
        }
        if (v->i < k->imin || v->i > k->imax)
            return deftsim_error_set(DEFTSIM_E_INPUT, "%s is outside [%lld, %lld]", text,
                                     (long long)k->imin, (long long)k->imax);
        return DEFTSIM_OK;
    case T_DOUBLE:
        if (!text[0]) return deftsim_error_set(DEFTSIM_E_INPUT, "empty value");
        return parse_number(k, text, &v->d);
    case T_BANDWIDTH:
    case T_DURATION:
        if (!text[0]) return deftsim_error_set(DEFTSIM_E_INPUT, "empty value");
        return parse_unit_number(k, text, &v->d);
    case T_ENUM: {
        int e = 0;
        if (!text[0]) return deftsim_error_set(DEFTSIM_E_INPUT, "empty value");
        if ((st = parse_enum(k, text, &e))) return st;
        v->i = e;
        return DEFTSIM_OK;
    }
    case T_ENUM_LIST:
    case T_DOUBLE_LIST: {
        list_ctx c = {k, v, 0};
        st = for_each_item(text, k->type == T_ENUM_LIST ? enum_item : double_item, &c);
        if (st) deftsim_cfg_kval_free(v);
        return st;
    }
    case T_INT_LIST: {
        int64_t *a;
        st = deftsim_parse_int_list(text, k->imin, k->imax, &a, &v->n);
        if (!st) v->arr = a;
        return st;
    }
    }
    return deftsim_error_set(DEFTSIM_E_INTERNAL, "config: unhandled key type");
}

/* Renders a value as its INI text: the inverse of deftsim_cfg_parse_value(). Returns the length needed. */
size_t deftsim_cfg_render(const keydef *k, const kval *v, char *buf, size_t cap)
{
    size_t o = 0;
#define PUT(...) (o += (size_t)snprintf(o < cap ? buf + o : NULL, o < cap ? cap - o : 0, __VA_ARGS__))
    if (cap) buf[0] = '\0';
    switch (k->type) {
    case T_NAME:
    case T_PATH:
    case T_OPTPATH: PUT("%s", v->s ? v->s : ""); break;
    case T_U64: PUT("%llu", (unsigned long long)v->u); break;
    case T_INT: PUT("%lld", (long long)v->i); break;
    case T_DOUBLE:
    case T_BANDWIDTH:
    case T_DURATION: {
        /* Bandwidths and durations print in their base unit, with it: 3.125e+09Bps, 1e-06s. */
        char d[40];
        format_double(v->d, d, sizeof d);
        PUT("%s%s", d, k->type == T_BANDWIDTH ? "Bps" : k->type == T_DURATION ? "s" : "");
        break;
    }
    case T_ENUM: PUT("%s", knames(k)[v->i]); break;
    case T_ENUM_LIST:
        for (size_t i = 0; i < v->n; i++) PUT("%s%s", i ? ", " : "", knames(k)[((int *)v->arr)[i]]);
        break;
    case T_DOUBLE_LIST:
        for (size_t i = 0; i < v->n; i++) {
            char d[40];
            format_double(((double *)v->arr)[i], d, sizeof d);
            PUT("%s%s", i ? ", " : "", d);
        }
        break;
    case T_INT_LIST:
        o = deftsim_format_int_list(v->arr, v->n, buf, cap);
        break;
    }
#undef PUT
    return o;
}

/* A non-owning view of a config's value, for deftsim_cfg_render() and comparisons. */
kval deftsim_cfg_view(const deftsim_config *cfg, const keydef *k)
{
    kval v = {0};
    switch (k->type) {
    case T_NAME:
    case T_PATH:
    case T_OPTPATH: v.s = get_ptr(cfg, k->off); break;
    case T_U64: memcpy(&v.u, cfield(cfg, k->off), sizeof v.u); break;
    case T_INT:
    case T_ENUM: v.i = get_int(cfg, k->off); break;
    case T_DOUBLE:
    case T_BANDWIDTH:
    case T_DURATION: memcpy(&v.d, cfield(cfg, k->off), sizeof v.d); break;
    case T_ENUM_LIST:
    case T_DOUBLE_LIST:
    case T_INT_LIST:
        v.arr = get_ptr(cfg, k->off);
        v.n = get_count(cfg, k->count_off);
        break;
    }
    return v;
}

deftsim_status deftsim_cfg_fits_one_line(const keydef *k, const kval *v)
{
    size_t len = strlen(k->info.key) + 3 + deftsim_cfg_render(k, v, NULL, 0);
    if (len > DEFTSIM_CONFIG_MAX_LINE)
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "value too long: '%s = ...' would need %zu characters, more than "
                                 "the %d a scenario file's line holds",
                                 k->info.key, len, DEFTSIM_CONFIG_MAX_LINE);
    return DEFTSIM_OK;
}

void deftsim_cfg_release(deftsim_config *cfg, const keydef *k)
{
    switch (k->type) {
    case T_NAME:
    case T_PATH:
    case T_OPTPATH:
    case T_ENUM_LIST:
    case T_DOUBLE_LIST:
    case T_INT_LIST:
        free(get_ptr(cfg, k->off));
        deftsim_cfg_set_ptr(cfg, k->off, NULL);
        if (k->count_off) deftsim_cfg_set_count(cfg, k->count_off, 0);
        break;
    default: break;
    }
}

/* Moves v into the config (v is left empty). */
void deftsim_cfg_commit(deftsim_config *cfg, const keydef *k, kval *v)
{
    deftsim_cfg_release(cfg, k);
    switch (k->type) {
    case T_NAME:
    case T_PATH:
    case T_OPTPATH: deftsim_cfg_set_ptr(cfg, k->off, v->s); v->s = NULL; break;
    case T_U64: memcpy(field(cfg, k->off), &v->u, sizeof v->u); break;
    case T_INT:
    case T_ENUM: {
        int i = (int)v->i;
        memcpy(field(cfg, k->off), &i, sizeof i);
        break;
    }
    case T_DOUBLE:
    case T_BANDWIDTH:
    case T_DURATION: memcpy(field(cfg, k->off), &v->d, sizeof v->d); break;
    case T_ENUM_LIST:
    case T_DOUBLE_LIST:
    case T_INT_LIST:
        deftsim_cfg_set_ptr(cfg, k->off, v->arr);
        deftsim_cfg_set_count(cfg, k->count_off, v->n);
        v->arr = NULL;
        v->n = 0;
        break;
    }
}

/* Parses, validates and stores one value; on failure the config is unchanged and the message
 * (without location) is recorded. */
deftsim_status deftsim_cfg_set_value(deftsim_config *cfg, const keydef *k, const char *text)
{
    kval v;
    deftsim_status st = deftsim_cfg_parse_value(k, text, &v);
    if (!st) st = deftsim_cfg_fits_one_line(k, &v);
    if (!st) deftsim_cfg_commit(cfg, k, &v);
    deftsim_cfg_kval_free(&v);
    return st;
}

/* ---- integer lists ---------------------------------------------------------------------- */

typedef struct {
    int64_t min, max;
    int64_t *a;
    size_t n, cap;
} int_list;

static deftsim_status int_push(int_list *l, int64_t v)
{
    if (l->n == l->cap) {
        if (l->n >= DEFTSIM_LIST_MAX)
            return deftsim_error_set(DEFTSIM_E_INPUT, "more than %d values", DEFTSIM_LIST_MAX);
        if (deftsim_grow(&l->a, &l->cap, l->n + 1, sizeof *l->a)) return deftsim_error_nomem("config");
    }
    l->a[l->n++] = v;
    return DEFTSIM_OK;
}

static deftsim_status in_range(const int_list *l, int64_t v)
{
    if (v < l->min || v > l->max)
        return deftsim_error_set(DEFTSIM_E_INPUT, "%lld is outside [%lld, %lld]", (long long)v,
                                 (long long)l->min, (long long)l->max);
    return DEFTSIM_OK;
}

static deftsim_status int_item(const char *tok, void *ctx)
{
    int_list *l = ctx;
    deftsim_status st;
    const char *dots = strstr(tok, "..");
    if (!dots) {
        int64_t v;
        if (tok[0] == '+' || deftsim_parse_i64(tok, &v))
            return deftsim_error_set(DEFTSIM_E_INPUT, "'%s' is not an integer", tok);
        if ((st = in_range(l, v))) return st;
        return int_push(l, v);
    }
    /* a..b or a..b:s */
    char a_txt[32], b_txt[32], s_txt[32] = "";
    const char *colon = strchr(dots + 2, ':');
    size_t la = (size_t)(dots - tok);
    size_t lb = colon ? (size_t)(colon - dots - 2) : strlen(dots + 2);
    int64_t a, b, s = 0;
    int bad = la == 0 || la >= sizeof a_txt || lb == 0 || lb >= sizeof b_txt ||
              (colon && strlen(colon + 1) >= sizeof s_txt);
    if (!bad) {
        memcpy(a_txt, tok, la);
        a_txt[la] = '\0';
        memcpy(b_txt, dots + 2, lb);
        b_txt[lb] = '\0';
        if (colon) strcpy(s_txt, colon + 1);
        bad = a_txt[0] == '+' || b_txt[0] == '+' || s_txt[0] == '+' ||
              deftsim_parse_i64(a_txt, &a) || deftsim_parse_i64(b_txt, &b) ||
              (colon && deftsim_parse_i64(s_txt, &s));
    }
    if (bad)
        return deftsim_error_set(DEFTSIM_E_INPUT, "'%s' is not an integer, a..b or a..b:step", tok);
    if ((st = in_range(l, a)) || (st = in_range(l, b))) return st;
    if (a > b) return deftsim_error_set(DEFTSIM_E_INPUT, "'%s' is empty (%lld > %lld)", tok,
                                        (long long)a, (long long)b);
    if (colon) {
        if (s <= 0) return deftsim_error_set(DEFTSIM_E_INPUT, "'%s': step must be positive", tok);
        /* b >= a, so the unsigned difference is exact even where the signed one overflows. */
        uint64_t span = (uint64_t)b - (uint64_t)a;
        if (span % (uint64_t)s)
            return deftsim_error_set(DEFTSIM_E_INPUT, "'%s' does not end on %lld (%lld + a multiple of %lld)",
                                     tok, (long long)b, (long long)a, (long long)s);
        if (span / (uint64_t)s >= DEFTSIM_LIST_MAX)
            return deftsim_error_set(DEFTSIM_E_INPUT, "more than %d values", DEFTSIM_LIST_MAX);
        for (uint64_t i = 0; i <= span / (uint64_t)s; i++)
            if ((st = int_push(l, (int64_t)((uint64_t)a + i * (uint64_t)s)))) return st;
        return DEFTSIM_OK;
    }
    if (a <= 0)
        return deftsim_error_set(DEFTSIM_E_INPUT, "'%s': a doubling range must start at 1 or more", tok);
    int64_t v = a;
    while (v < b && v <= INT64_MAX / 2) v *= 2;
    if (v != b)
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "'%s': %lld is not %lld times a power of two (a..b doubles from a "
                                 "to b; a..b:step counts in steps)",
                                 tok, (long long)b, (long long)a);
    for (v = a; v <= b; v *= 2) {
        if ((st = int_push(l, v))) return st;
        if (v == b) break;
    }
    return DEFTSIM_OK;
}

static int cmp_i64(const void *x, const void *y)
{
    int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
    return (a > b) - (a < b);
}

deftsim_status deftsim_parse_int_list(const char *text, int64_t min, int64_t max,
                                      int64_t **values, size_t *count)
{
    *values = NULL;
    *count = 0;
    int_list l = {.min = min, .max = max};
    deftsim_status st = for_each_item(text, int_item, &l);
    if (st) {
        free(l.a);
        return st;
    }
    qsort(l.a, l.n, sizeof *l.a, cmp_i64);
    size_t u = 0;
    for (size_t i = 0; i < l.n; i++)
        if (u == 0 || l.a[i] != l.a[u - 1]) l.a[u++] = l.a[i];
    *values = l.a;
    *count = u;
    return DEFTSIM_OK;
}

size_t deftsim_format_int_list(const int64_t *v, size_t n, char *buf, size_t cap)
{
    size_t o = 0;
#define PUT(...) (o += (size_t)snprintf(o < cap ? buf + o : NULL, o < cap ? cap - o : 0, __VA_ARGS__))
    if (cap) buf[0] = '\0';
    for (size_t i = 0; i < n;) {
        const char *sep = i ? ", " : "";
        size_t dj = i;
        while (dj + 1 < n && v[dj] > 0 && v[dj] <= INT64_MAX / 2 && v[dj + 1] == 2 * v[dj]) dj++;
        size_t aj = i;
        if (i + 1 < n && v[i + 1] > v[i] && (uint64_t)v[i + 1] - (uint64_t)v[i] <= INT64_MAX) {
            uint64_t d = (uint64_t)v[i + 1] - (uint64_t)v[i];
            aj = i + 1;
            while (aj + 1 < n && v[aj + 1] > v[aj] && (uint64_t)v[aj + 1] - (uint64_t)v[aj] == d) aj++;
        }
        size_t dlen = dj - i + 1, alen = aj - i + 1;
        if (dlen >= 3 && dlen >= alen) {
            PUT("%s%lld..%lld", sep, (long long)v[i], (long long)v[dj]);
            i = dj + 1;
        } else if (alen >= 3) {
            PUT("%s%lld..%lld:%llu", sep, (long long)v[i], (long long)v[aj],
                (unsigned long long)((uint64_t)v[i + 1] - (uint64_t)v[i]));
            i = aj + 1;
        } else {
            PUT("%s%lld", sep, (long long)v[i]);
            i++;
        }
    }
#undef PUT
    return o;
}
