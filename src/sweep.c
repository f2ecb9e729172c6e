/* sweep.c - `deftsim sweep`: the scenario's lists and axes, one point at a time, resumable
 * (deftsim_sweep.h, docs/OUTPUT.md). */
#include "deftsim_build_info.h"
#include "deftsim_sweep.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "deftsim_analysis.h"
#include "deftsim_csv.h"
#include "deftsim_engine.h"
#include "deftsim_folder.h"
#include "deftsim_platform.h"
#include "deftsim_timing.h"
#include "deftsim_util.h"

#define MANIFEST_FORMAT "deftsim-sweep"
#define MANIFEST_VERSION 1

static deftsim_status nomem(void) { return deftsim_error_set(DEFTSIM_E_NOMEM, "sweep: out of memory"); }

/* ---- the plan ------------------------------------------------------------------------------ */

typedef struct {
    char *key;               /* "section.key" */
    char **values;
    size_t nvalues;
    int from_scenario;       /* a list in the scenario file (model, trace) rather than --vary */
} axis;

typedef struct {
    deftsim_config *cfg;     /* the scenario with this variant's axis values set */
    char *label;             /* folder name under points/; "" without axes */
    size_t *value_index;     /* naxes: which value of each axis */
    deftsim_platform_record platform; /* topology = file: the user's platform file as read */
} variant;

typedef struct {
    size_t variant;
    deftsim_method method;
    double density;
    uint32_t P;
    char *id;                /* [<label>/]<method>_d<density>_P<P> */
    char *file;              /* points/<id>.csv, relative to the output folder */
    deftsim_point_state state;
    int ran_now;             /* run by this sweep */
    uint64_t rows;
    double seconds, prepare_seconds, step_seconds;
    char *error;             /* FAILED: the message */
    deftsim_status error_status; /* FAILED in this sweep: the failure's status */
    char *finished;          /* UTC time it finished */
    char *git_commit;        /* build that wrote it */
    json_t *machine_state;   /* DONE: the machine's state while it ran (deftsim_noise_json) */
} point;

struct deftsim_sweep {
    deftsim_config *base;    /* the scenario as given, single-valued --vary settings applied */
    deftsim_sweep_options opt;
    axis *axes;
    size_t naxes;
    variant *variants;
    size_t nvariants;
    point *points;
    size_t npoints;
    json_t *identity;        /* what must match to resume in a folder */
    json_t *extra_points;    /* finished points in the folder's manifest outside this plan */
    char *started;
    int lock_fd;
    int state_loaded;
};

size_t deftsim_sweep_point_count(const deftsim_sweep *s) { return s->npoints; }
size_t deftsim_sweep_variant_count(const deftsim_sweep *s) { return s->nvariants; }
const char *deftsim_sweep_output(const deftsim_sweep *s) { return s->base->scenario.output; }

static void lock_forget(int fd);

void deftsim_sweep_free(deftsim_sweep *s)
{
    if (!s) return;
    for (size_t i = 0; i < s->naxes; i++) {
        free(s->axes[i].key);
        for (size_t j = 0; j < s->axes[i].nvalues; j++) free(s->axes[i].values[j]);
        free(s->axes[i].values);
    }
    free(s->axes);
    for (size_t i = 0; i < s->nvariants; i++) {
        deftsim_config_free(s->variants[i].cfg);
        free(s->variants[i].label);
        free(s->variants[i].value_index);
        deftsim_platform_record_free(&s->variants[i].platform);
    }
    free(s->variants);
    for (size_t i = 0; i < s->npoints; i++) {
        point *p = &s->points[i];
        free(p->id);
        free(p->file);
        free(p->error);
        free(p->finished);
        free(p->git_commit);
        json_decref(p->machine_state);
    }
    free(s->points);
    json_decref(s->identity);
    json_decref(s->extra_points);
    free(s->started);
    if (s->lock_fd >= 0) {
        lock_forget(s->lock_fd);
        close(s->lock_fd);
    }
    deftsim_config_free(s->base);
    free(s);
}

static void free_list(char **items, size_t n)
{
    for (size_t i = 0; i < n; i++) free(items[i]);
    free(items);
}

/* Splits "a, b ,c" at commas into trimmed, non-empty, distinct items. what names the list in
 * messages. On failure nothing is left allocated. */
static deftsim_status split_list(const char *text, const char *what, char ***items, size_t *n)
{
    char **v = NULL;
    size_t k = 0, cap = 0;
    deftsim_status st = DEFTSIM_OK;
    const char *p = text;
    for (;;) {
        size_t len = strcspn(p, ",");
        const char *b = p, *e = p + len;
        while (b < e && isspace((unsigned char)*b)) b++;
        while (e > b && isspace((unsigned char)e[-1])) e--;
        if (b == e) {
            st = deftsim_error_set(DEFTSIM_E_USAGE, "%s: an empty value in '%s'", what, text);
            break;
        }
        char *one = strndup(b, (size_t)(e - b));
        if (!one) {
            st = nomem();
            break;
        }
        for (size_t i = 0; i < k && !st; i++)
            if (!strcmp(v[i], one)) st = deftsim_error_set(DEFTSIM_E_USAGE, "%s: '%s' given twice", what, one);
        if (!st && k == cap) {
            size_t c = cap ? 2 * cap : 4;
            char **q = realloc(v, c * sizeof *q);
            if (!q) st = nomem();
            else {
                v = q;
                cap = c;
            }
        }
        if (st) {
            free(one);
            break;
        }
        v[k++] = one;
        p += len;
        if (!*p) break;
        p++;
    }
    if (st) {
        free_list(v, k);
        v = NULL;
        k = 0;
    }
    *items = v;
    *n = k;
    return st;
}

static int key_exists(const char *key)
{
    for (size_t i = 0; i < deftsim_config_key_count(); i++) {
        const deftsim_config_keyinfo *k = deftsim_config_key(i);
        char full[128];
        snprintf(full, sizeof full, "%s.%s", k->section, k->key);
        if (!strcmp(full, key)) return 1;
    }
    return 0;
}

static deftsim_status add_axis(deftsim_sweep *s, const char *key, char **values, size_t n,
                               int from_scenario)
{
    axis *a = realloc(s->axes, (s->naxes + 1) * sizeof *a);
    if (!a) return nomem();
    s->axes = a;
    axis *x = &s->axes[s->naxes];
    memset(x, 0, sizeof *x);
    if (!(x->key = strdup(key))) return nomem();
    x->values = values;
    x->nvalues = n;
    x->from_scenario = from_scenario;
    s->naxes++;
    return DEFTSIM_OK;
}

/* "[gradients] model" from "gradients.model", for messages. */
static void key_words(const char *key, char *buf, size_t cap)
{
    const char *dot = strchr(key, '.');
    if (!dot) snprintf(buf, cap, "%s", key);
    else snprintf(buf, cap, "[%.*s] %s", (int)(dot - key), key, dot + 1);
}

static deftsim_status collect_axes(deftsim_sweep *s)
{
    deftsim_status st;
    /* The scenario's own lists of models or traces. */
    const char *key = NULL, *text = NULL;
    if (s->base->gradients.source == DEFTSIM_SOURCE_TRACE) {
        key = "gradients.trace";
        text = s->base->gradients.trace;
    } else {
        key = "gradients.model";
        text = s->base->gradients.model;
    }
    if (text && strchr(text, ',')) {
        char **v;
        size_t n;
        char w[64];
        key_words(key, w, sizeof w);
        if ((st = split_list(text, w, &v, &n))) return deftsim_error_set(DEFTSIM_E_INPUT, "%s", deftsim_error_message());
        if (n > 1) {
            if ((st = add_axis(s, key, v, n, 1))) {
                free_list(v, n);
                return st;
            }
        } else {
            /* "model = a," is one model: set it plainly. */
            char ov[4200];
            snprintf(ov, sizeof ov, "%s=%s", key, v[0]);
            free_list(v, n);
            if ((st = deftsim_config_apply_override(s->base, ov))) return st;
        }
    }
    /* --vary section.key=v1,v2,... */
    for (size_t i = 0; i < s->opt.nvary; i++) {
        const char *arg = s->opt.vary[i];
        const char *eq = strchr(arg, '=');
        if (!eq || eq == arg)
            return deftsim_error_set(DEFTSIM_E_USAGE, "--vary '%s': expected section.key=v1,v2,...", arg);
        char k[128];
        snprintf(k, sizeof k, "%.*s", (int)(eq - arg), arg);
        if (!key_exists(k))
            return deftsim_error_set(DEFTSIM_E_USAGE,
                                     "--vary %s: no such key ('deftsim config --keys' lists them)", k);
        if (!strcmp(k, "sparsify.methods") || !strcmp(k, "sparsify.densities") ||
            !strcmp(k, "workers.counts"))
            return deftsim_error_set(DEFTSIM_E_USAGE,
                                     "--vary %s: already a list every run goes through; give it "
                                     "with --set %s=...",
                                     k, k);
        if (!strcmp(k, "scenario.output") || !strcmp(k, "scenario.name"))
            return deftsim_error_set(DEFTSIM_E_USAGE, "--vary %s: a sweep writes one folder", k);
        for (size_t j = 0; j < s->naxes; j++)
            if (!strcmp(s->axes[j].key, k))
                return deftsim_error_set(DEFTSIM_E_USAGE,
                                         "--vary %s: the key already varies (%s)", k,
                                         s->axes[j].from_scenario ? "a list in the scenario"
                                                                  : "another --vary");
        char what[160];
        snprintf(what, sizeof what, "--vary %s", k);
        char **v;
        size_t n;
        if ((st = split_list(eq + 1, what, &v, &n))) return st;
        if (n == 1) {
            /* One value is a setting like --set, not an axis. */
            char ov[4200];
            snprintf(ov, sizeof ov, "%s=%s", k, v[0]);
            free_list(v, n);
            if ((st = deftsim_config_apply_override(s->base, ov)))
                return deftsim_error_set(st, "%s: %s", what, deftsim_error_message());
            continue;
        }
        if ((st = add_axis(s, k, v, n, 0))) {
            free_list(v, n);
            return st;
        }
    }
    return DEFTSIM_OK;
}

/* A folder name from an axis value: a path's last component without .csv, other bytes than
 * [A-Za-z0-9._-] as '_'. */
static void label_part(const char *key, const char *value, char *buf, size_t cap)
{
    const char *v = value;
    if (!strcmp(key, "gradients.model") || !strcmp(key, "gradients.trace")) {
        size_t len = strlen(v);
        while (len > 1 && v[len - 1] == '/') len--;
        const char *slash = NULL;
        for (size_t i = 0; i < len; i++)
            if (v[i] == '/') slash = v + i;
        const char *b = slash ? slash + 1 : v;
        size_t bl = len - (size_t)(b - v);
        if (bl > 4 && !strncmp(b + bl - 4, ".csv", 4)) bl -= 4;
        snprintf(buf, cap, "%.*s", (int)bl, b);
    } else {
        snprintf(buf, cap, "%s", v);
    }
    for (char *p = buf; *p; p++)
        if (!isalnum((unsigned char)*p) && *p != '.' && *p != '_' && *p != '-') *p = '_';
    if (!buf[0] || !strcmp(buf, ".") || !strcmp(buf, "..")) snprintf(buf, cap, "v");
}

static deftsim_status build_variants(deftsim_sweep *s)
{
    size_t nv = 1;
    for (size_t i = 0; i < s->naxes; i++) nv *= s->axes[i].nvalues;
    if (nv > 100000) return deftsim_error_set(DEFTSIM_E_USAGE, "sweep: %zu variants; too many", nv);
    s->variants = calloc(nv, sizeof *s->variants);
    if (!s->variants) return nomem();
    for (size_t v = 0; v < nv; v++) {
        variant *var = &s->variants[v];
        s->nvariants = v + 1;
        var->value_index = calloc(s->naxes ? s->naxes : 1, sizeof *var->value_index);
        if (!var->value_index) return nomem();
        deftsim_status st = deftsim_config_clone(s->base, &var->cfg);
        if (st) return st;
        /* Mixed radix, the first axis slowest: variants in the order the lists give. */
        size_t rem = v;
        for (size_t a = s->naxes; a-- > 0;) {
            var->value_index[a] = rem % s->axes[a].nvalues;
            rem /= s->axes[a].nvalues;
        }
        char label[1024] = "";
        size_t lo = 0;
        for (size_t a = 0; a < s->naxes; a++) {
            const char *val = s->axes[a].values[var->value_index[a]];
            char ov[4200], part[256], w[64];
            snprintf(ov, sizeof ov, "%s=%s", s->axes[a].key, val);
            if ((st = deftsim_config_apply_override(var->cfg, ov))) {
                if (s->axes[a].from_scenario) {
                    key_words(s->axes[a].key, w, sizeof w);
                    return deftsim_error_set(st, "%s: '%s': %s", w, val, deftsim_error_message());
                }
                return deftsim_error_set(st, "--vary %s=%s: %s", s->axes[a].key, val,
                                         deftsim_error_message());
            }
            label_part(s->axes[a].key, val, part, sizeof part);
            lo += (size_t)snprintf(label + lo, lo < sizeof label ? sizeof label - lo : 0, "%s%s",
                                   a ? "_" : "", part);
        }
        if ((st = deftsim_config_check(var->cfg))) {
            char what[512] = "";
            size_t o = 0;
            for (size_t a = 0; a < s->naxes && o < sizeof what; a++)
                o += (size_t)snprintf(what + o, sizeof what - o, "%s%s=%s", a ? ", " : "",
                                      s->axes[a].key, s->axes[a].values[var->value_index[a]]);
            return s->naxes ? deftsim_error_wrap(st, "variant %s", what) : st;
        }
        /* Distinct folder names even when two values sanitise alike. */
        for (size_t u = 0; u < v; u++)
            if (!strcmp(s->variants[u].label, label)) {
                size_t l = strlen(label);
                snprintf(label + l, sizeof label - l, "-%zu", v);
                break;
            }
        if (!(var->label = strdup(s->naxes ? label : ""))) return nomem();
        /* What the engine writes beside the rows (the generated network platform of each P)
         * goes to the variant's own folder, where other variants cannot overwrite it. */
        if (s->naxes) {
            char ov[4400];
            snprintf(ov, sizeof ov, "scenario.output=%s/points/%s", s->base->scenario.output, label);
            if ((st = deftsim_config_apply_override(var->cfg, ov))) return st;
        }
    }
    return DEFTSIM_OK;
}

static deftsim_status build_points(deftsim_sweep *s)
{
    const deftsim_config *c = s->base;
    size_t per = c->sparsify.nmethods * c->sparsify.ndensities * c->workers.ncounts;
    size_t total = per * s->nvariants;
    s->points = calloc(total ? total : 1, sizeof *s->points);
    if (!s->points) return nomem();
    for (size_t v = 0; v < s->nvariants; v++) {
        const deftsim_config *vc = s->variants[v].cfg;
        /* The engine's order within a variant: methods, then densities, then P ascending. */
        for (size_t mi = 0; mi < vc->sparsify.nmethods; mi++)
            for (size_t di = 0; di < vc->sparsify.ndensities; di++)
                for (size_t ci = 0; ci < vc->workers.ncounts; ci++) {
                    point *p = &s->points[s->npoints++];
                    p->variant = v;
                    p->method = vc->sparsify.methods[mi];
                    p->density = vc->sparsify.densities[di];
                    p->P = (uint32_t)vc->workers.counts[ci];
                    char d[40], id[1400];
                    deftsim_csv_double(d, sizeof d, p->density);
                    const char *lab = s->variants[v].label;
                    snprintf(id, sizeof id, "%s%s%s_d%s_P%u", lab, *lab ? "/" : "",
                             deftsim_method_name(p->method), d, p->P);
                    size_t fl = strlen(id) + 16;
                    p->id = strdup(id);
                    p->file = malloc(fl);
                    if (!p->id || !p->file) return nomem();
                    snprintf(p->file, fl, "points/%s.csv", id);
                }
    }
    return DEFTSIM_OK;
}

/* The folder's identity: the resolved configuration without what a sweep may extend or what
 * does not change a point's rows (the swept lists, the axis keys, the output folder, the
 * memory budget), the axis names, and the rows' columns. */
static deftsim_status build_identity(deftsim_sweep *s)
{
    json_t *cfg = deftsim_config_to_json(s->variants[0].cfg);
    if (!cfg) return deftsim_error_set(DEFTSIM_E_NOMEM, "sweep: cannot describe the configuration");
    static const char *const drop[][2] = {{"scenario", "output"}, {"engine", "memory_budget"},
                                         {"sparsify", "methods"}, {"sparsify", "densities"},
                                         {"workers", "counts"}};
    for (size_t i = 0; i < sizeof drop / sizeof drop[0]; i++) {
        json_t *sec = json_object_get(cfg, drop[i][0]);
        if (sec) json_object_del(sec, drop[i][1]);
    }
    json_t *axes = json_array();
    for (size_t a = 0; a < s->naxes; a++) {
        char sec[128];
        const char *dot = strchr(s->axes[a].key, '.');
        snprintf(sec, sizeof sec, "%.*s", (int)(dot - s->axes[a].key), s->axes[a].key);
        json_t *so = json_object_get(cfg, sec);
        if (so) json_object_del(so, dot + 1);
        json_array_append_new(axes, json_string(s->axes[a].key));
    }
    json_t *cols = json_array();
    for (size_t i = 0; i < deftsim_engine_column_count(); i++)
        json_array_append_new(cols, json_string(deftsim_engine_column(i)));
    s->identity = json_pack("{s:o, s:o, s:o}", "config", cfg, "axes", axes, "columns", cols);
    if (!s->identity) return deftsim_error_set(DEFTSIM_E_NOMEM, "sweep: cannot describe the configuration");
    /* A user's platform file belongs to the identity by its content, not only its path: a
     * file edited between a killed sweep and its resumption would mix two networks. */
    int any_file = 0;
    for (size_t v = 0; v < s->nvariants; v++) any_file |= s->variants[v].platform.path != NULL;
    if (any_file) {
        json_t *sums = json_array();
        for (size_t v = 0; sums && v < s->nvariants; v++)
            if (json_array_append_new(sums, s->variants[v].platform.path
                                                ? json_string(s->variants[v].platform.sha256)
                                                : json_null())) {
                json_decref(sums);
                sums = NULL;
            }
        if (!sums || json_object_set_new(s->identity, "platform_sha256", sums))
            return deftsim_error_set(DEFTSIM_E_NOMEM, "sweep: cannot describe the configuration");
    }
    return DEFTSIM_OK;
}

deftsim_status deftsim_sweep_new(const deftsim_config *cfg, const deftsim_sweep_options *o,
                                 deftsim_sweep **out)
{
    *out = NULL;
    deftsim_sweep *s = calloc(1, sizeof *s);
    if (!s) return nomem();
    s->lock_fd = -1;
    if (o) s->opt = *o;
    deftsim_status st = deftsim_config_clone(cfg, &s->base);
    if (!st) st = collect_axes(s);
    if (!st) st = build_variants(s);
    for (size_t v = 0; !st && v < s->nvariants; v++)
        st = deftsim_platform_record_read(s->variants[v].cfg, &s->variants[v].platform);
    if (!st) st = build_points(s);
    if (!st) st = build_identity(s);
    if (!st && !(s->extra_points = json_array())) st = nomem();
    if (st) {
        deftsim_sweep_free(s);
        return st;
    }
    *out = s;
    return DEFTSIM_OK;
}

/* ---- the folder's state --------------------------------------------------------------------- */

static void path_in(const deftsim_sweep *s, const char *rel, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s/%s", s->base->scenario.output, rel);
}

static int file_exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

static json_t *sweep_identity_of(json_t *manifest)
{
    json_t *id = json_object_get(manifest, "identity");
    return id ? json_incref(id) : NULL;
}

/* What a sweep writes: a folder of another kind, another sweep's or stray point files are
 * refused (deftsim_folder_check). */
static const deftsim_folder_writer sweep_writer = {
    .format = MANIFEST_FORMAT,
    .noun = "a sweep",
    .verb = "sweep",
    .option = "--output DIR",
    .another = "the points of another sweep",
    .why = "its points cannot be mixed with this one's",
    .identity_of = sweep_identity_of,
    .files = (const char *const[]){"rows.csv"},
    .nfiles = 1,
};

static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

deftsim_status deftsim_sweep_load_state(deftsim_sweep *s)
{
    const char *out = s->base->scenario.output;
    for (size_t i = 0; i < s->npoints; i++) {
        point *p = &s->points[i];
        p->state = DEFTSIM_POINT_PENDING;
        free(p->error);
        free(p->finished);
        free(p->git_commit);
        p->error = p->finished = p->git_commit = NULL;
    }
    json_array_clear(s->extra_points);
    s->state_loaded = 1;
    json_t *m = NULL;
    deftsim_status st = deftsim_folder_check(out, &sweep_writer, s->identity, &m);
    if (st || !m) return st;
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(m, "points"), i, e) {
        const char *pid = json_string_value(json_object_get(e, "id"));
        const char *state = json_string_value(json_object_get(e, "status"));
        const char *file = json_string_value(json_object_get(e, "file"));
        if (!pid || !state || !file) continue;
        point *p = NULL;
        for (size_t k = 0; k < s->npoints; k++)
            if (!strcmp(s->points[k].id, pid)) p = &s->points[k];
        char fpath[4200];
        path_in(s, file, fpath, sizeof fpath);
        int done = !strcmp(state, "done") && file_exists(fpath);
        if (!p) {
            /* A point of an earlier, wider sweep of the same scenario: still a result. */
            if (done) json_array_append(s->extra_points, e);
            continue;
        }
        if (done) {
            p->state = DEFTSIM_POINT_DONE;
            p->rows = (uint64_t)json_integer_value(json_object_get(e, "rows"));
            p->seconds = json_number_value(json_object_get(e, "seconds"));
            p->prepare_seconds = json_number_value(json_object_get(e, "prepare_seconds"));
            p->step_seconds = json_number_value(json_object_get(e, "step_seconds"));
            p->finished = dup_or_null(json_string_value(json_object_get(e, "finished")));
            p->git_commit = dup_or_null(json_string_value(json_object_get(e, "git_commit")));
            json_decref(p->machine_state);
            p->machine_state = json_incref(json_object_get(e, "machine_state"));
        } else if (!strcmp(state, "failed")) {
            p->state = DEFTSIM_POINT_FAILED;
            p->error = dup_or_null(json_string_value(json_object_get(e, "error")));
        }
    }
    json_decref(m);
    return st;
}

/* ---- manifest --------------------------------------------------------------------------------- */

static void utc_now(char *buf, size_t cap)
{
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static void cpu_model(char *buf, size_t cap)
{
    snprintf(buf, cap, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10)) continue;
        char *p = strchr(line, ':');
        if (!p) continue;
        for (p++; *p == ' ' || *p == '\t'; p++) {}
        snprintf(buf, cap, "%.*s", (int)strcspn(p, "\n"), p);
        break;
    }
    fclose(f);
}

static const char *state_name(deftsim_point_state st)
{
    switch (st) {
    case DEFTSIM_POINT_DONE: return "done";
    case DEFTSIM_POINT_FAILED: return "failed";
    default: return "pending";
    }
}

static json_t *point_json(const deftsim_sweep *s, const point *p)
{
    json_t *axes = json_object();
    const variant *v = &s->variants[p->variant];
    for (size_t a = 0; a < s->naxes; a++)
        json_object_set_new(axes, s->axes[a].key, json_string(s->axes[a].values[v->value_index[a]]));
    json_t *o = json_pack("{s:s, s:s, s:s, s:o, s:s, s:f, s:i, s:s}", "id", p->id, "file", p->file,
                          "variant", v->label, "axes", axes, "method",
                          deftsim_method_name(p->method), "density", p->density, "P", (int)p->P,
                          "status", state_name(p->state));
    if (!o) return NULL;
    if (p->state == DEFTSIM_POINT_DONE) {
        json_object_set_new(o, "rows", json_integer((json_int_t)p->rows));
        json_object_set_new(o, "seconds", json_real(p->seconds));
        json_object_set_new(o, "prepare_seconds", json_real(p->prepare_seconds));
        json_object_set_new(o, "step_seconds", json_real(p->step_seconds));
        json_object_set_new(o, "finished", p->finished ? json_string(p->finished) : json_null());
        json_object_set_new(o, "git_commit", p->git_commit ? json_string(p->git_commit) : json_null());
        if (p->machine_state) json_object_set(o, "machine_state", p->machine_state);
    } else if (p->state == DEFTSIM_POINT_FAILED) {
        json_object_set_new(o, "error", json_string(p->error ? p->error : ""));
        char f[1500];
        snprintf(f, sizeof f, "points/%s.failed", p->id);
        json_object_set_new(o, "error_file", json_string(f));
    }
    return o;
}

static deftsim_status write_manifest(const deftsim_sweep *s, const char *status, const char *finished,
                                     int rows_written)
{
    char path[4200], host[256] = "unknown", cpu[256];
    path_in(s, "manifest.json", path, sizeof path);
    if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "unknown");
    host[sizeof host - 1] = '\0';
    cpu_model(cpu, sizeof cpu);
    json_t *root = json_object();
    json_object_set_new(root, "format", json_string(MANIFEST_FORMAT));
    json_object_set_new(root, "format_version", json_integer(MANIFEST_VERSION));
    json_object_set_new(root, "scenario", json_string(s->base->scenario.name));
    json_object_set_new(root, "seed", json_integer((json_int_t)s->base->scenario.seed));
    json_object_set_new(root, "deftsim", json_pack("{s:s, s:s}", "version", DEFTSIM_VERSION,
                                                   "git_commit", DEFTSIM_GIT_COMMIT));
    json_object_set_new(root, "status", json_string(status));
    json_object_set_new(root, "started", json_string(s->started ? s->started : ""));
    json_object_set_new(root, "finished", finished ? json_string(finished) : json_null());
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    json_object_set_new(root, "machine",
                        json_pack("{s:s, s:s, s:i, s:I}", "hostname", host, "cpu_model", cpu,
                                  "cpus_online", (int)(cpus > 0 ? cpus : 1), "ram_bytes",
                                  (json_int_t)deftsim_machine_ram()));
    json_object_set_new(root, "timing", deftsim_timing_json(s->base));
    json_object_set_new(root, "identity", json_deep_copy(s->identity));
    json_t *axes = json_array();
    for (size_t a = 0; a < s->naxes; a++) {
        json_t *vals = json_array();
        for (size_t j = 0; j < s->axes[a].nvalues; j++)
            json_array_append_new(vals, json_string(s->axes[a].values[j]));
        json_array_append_new(axes, json_pack("{s:s, s:o, s:s}", "key", s->axes[a].key, "values",
                                              vals, "from", s->axes[a].from_scenario ? "scenario"
                                                                                     : "--vary"));
    }
    json_object_set_new(root, "axes", axes);
    json_t *vars = json_array();
    for (size_t v = 0; v < s->nvariants; v++) {
        /* A user's platform file: its name, size and SHA-256, and where the folder keeps its
         * copy (the engine writes it beside the variant's points). */
        const variant *var = &s->variants[v];
        json_t *plat = deftsim_platform_record_json(&var->platform);
        if (var->platform.path && var->label[0] && json_is_object(plat)) {
            char copy[4400];
            snprintf(copy, sizeof copy, "points/%s/%s", var->label, var->platform.copy);
            json_object_set_new(plat, "copy", json_string(copy));
        }
        json_array_append_new(vars, json_pack("{s:s, s:o, s:o*, s:o}", "label", var->label,
                                              "config", deftsim_config_to_json(var->cfg),
                                              "platform", plat, "timing",
                                              deftsim_timing_json(var->cfg)));
    }
    json_object_set_new(root, "variants", vars);
    json_t *pts = json_array();
    for (size_t i = 0; i < s->npoints; i++) json_array_append_new(pts, point_json(s, &s->points[i]));
    size_t k;
    json_t *e;
    json_array_foreach(s->extra_points, k, e) json_array_append(pts, e);
    json_object_set_new(root, "points", pts);
    json_object_set_new(root, "rows_csv", rows_written ? json_string("rows.csv") : json_null());
    char *text = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(root);
    if (!text) return deftsim_error_set(DEFTSIM_E_NOMEM, "%s: cannot build the manifest", path);
    size_t len = strlen(text);
    char *t2 = realloc(text, len + 2);
    if (!t2) {
        free(text);
        return nomem();
    }
    t2[len] = '\n';
    t2[len + 1] = '\0';
    deftsim_status st = deftsim_write_file_atomic(path, t2, len + 1);
    free(t2);
    return st;
}

/* rows.csv: every finished point's rows under one header; with axes, one leading column per
 * axis holding the point's value (the rows themselves do not say which variant they are). */
static deftsim_status write_rows_csv(const deftsim_sweep *s)
{
    char path[4200];
    path_in(s, "rows.csv", path, sizeof path);
    deftsim_afile *af;
    deftsim_status st = deftsim_afile_open(&af, path);
    if (st) return st;
    FILE *out = deftsim_afile_stream(af);
    for (size_t a = 0; a < s->naxes; a++) {
        deftsim_csv_field(out, s->axes[a].key);
        fputc(',', out);
    }
    for (size_t i = 0; i < deftsim_engine_column_count(); i++)
        fprintf(out, "%s%s", i ? "," : "", deftsim_engine_column(i));
    fputc('\n', out);
    char *line = NULL;
    size_t cap = 0;
    size_t nextra = json_array_size(s->extra_points);
    for (size_t i = 0; i < s->npoints + nextra && !st; i++) {
        const char *file;
        json_t *axes = NULL;
        if (i < s->npoints) {
            if (s->points[i].state != DEFTSIM_POINT_DONE) continue;
            file = s->points[i].file;
        } else {
            json_t *e = json_array_get(s->extra_points, i - s->npoints);
            file = json_string_value(json_object_get(e, "file"));
            axes = json_object_get(e, "axes");
        }
        char prefix[2048] = "";
        size_t po = 0;
        for (size_t a = 0; a < s->naxes; a++) {
            const char *val;
            if (i < s->npoints) val = s->axes[a].values[s->variants[s->points[i].variant].value_index[a]];
            else val = json_string_value(json_object_get(axes, s->axes[a].key));
            char *q = NULL;
            size_t ql = 0;
            FILE *m = open_memstream(&q, &ql);
            if (!m) {
                st = nomem();
                break;
            }
            deftsim_csv_field(m, val ? val : "");
            fclose(m);
            po += (size_t)snprintf(prefix + po, po < sizeof prefix ? sizeof prefix - po : 0, "%s,", q);
            free(q);
        }
        if (st) break;
        char src[4200];
        path_in(s, file, src, sizeof src);
        FILE *in = fopen(src, "r");
        if (!in) {
            st = deftsim_error_set(DEFTSIM_E_IO, "%s: cannot read: %s", src, strerror(errno));
            break;
        }
        ssize_t len;
        int first = 1;
        while ((len = getline(&line, &cap, in)) > 0) {
            if (first) {
                first = 0;
                continue;
            }
            fputs(prefix, out);
            fwrite(line, 1, (size_t)len, out);
        }
        fclose(in);
    }
    free(line);
    if (st) {
        deftsim_afile_abort(af);
        return st;
    }
    return deftsim_afile_commit(af);
}

/* ---- memory and listing ------------------------------------------------------------------------ */

static deftsim_run_options engine_options(const deftsim_sweep *s)
{
    deftsim_run_options o;
    deftsim_run_options_default(&o);
    o.ram_bytes = s->opt.ram_bytes;
    o.prep_threads = s->opt.prep_threads;
    return o;
}

deftsim_status deftsim_sweep_check_memory(deftsim_sweep *s, FILE *plan)
{
    deftsim_run_options o = engine_options(s);
    for (size_t v = 0; v < s->nvariants; v++) {
        deftsim_engine *e;
        deftsim_status st = deftsim_engine_new(s->variants[v].cfg, &o, &e);
        if (st) return s->naxes ? deftsim_error_wrap(st, "variant %s", s->variants[v].label) : st;
        if (plan) {
            if (s->naxes) fprintf(plan, "variant %s:\n", s->variants[v].label);
            deftsim_engine_print_plan(e, plan);
        }
        st = deftsim_engine_check_memory(e);
        deftsim_engine_free(e);
        if (st) return s->naxes ? deftsim_error_wrap(st, "variant %s", s->variants[v].label) : st;
    }
    return DEFTSIM_OK;
}

void deftsim_sweep_print_points(const deftsim_sweep *s, FILE *f)
{
    size_t n[3] = {0, 0, 0};
    fprintf(f, "%5s  %-8s %-8s %-10s %8s  %s\n", "#", "state", "method", "density", "P",
            s->naxes ? "variant / file" : "file");
    for (size_t i = 0; i < s->npoints; i++) {
        const point *p = &s->points[i];
        const char *st = p->state == DEFTSIM_POINT_DONE ? "done" : p->state == DEFTSIM_POINT_FAILED
                                                                       ? "retry"
                                                                       : "run";
        n[p->state]++;
        char d[40];
        deftsim_csv_double(d, sizeof d, p->density);
        fprintf(f, "%5zu  %-8s %-8s %-10s %8u  %s%s%s\n", i + 1, st, deftsim_method_name(p->method),
                d, p->P, s->variants[p->variant].label, s->naxes ? " / " : "", p->file);
    }
    fprintf(f, "%zu points: %zu to run, %zu failed before (run again), %zu finished before (skipped)",
            s->npoints, n[DEFTSIM_POINT_PENDING], n[DEFTSIM_POINT_FAILED], n[DEFTSIM_POINT_DONE]);
    if (json_array_size(s->extra_points))
        fprintf(f, "; the folder also holds %zu finished points outside this plan",
                json_array_size(s->extra_points));
    fprintf(f, "\n");
}

/* ---- progress ---------------------------------------------------------------------------------- */

typedef struct {
    const deftsim_sweep *s;
    FILE *f;
    int tty;
    size_t total, finished;        /* points of the plan; done, skipped or failed so far */
    double t0;                     /* sweep start */
    double point_t0;               /* current point's start */
    double point_estimate;         /* its expected seconds (NaN: unknown) */
    const point *current;
    /* Seconds per unit of work (P + 1, see rate()) of the points run so far. */
    double *var_method_sec, *var_method_work; /* nvariants x DEFTSIM_METHOD_COUNT */
    double all_sec, all_work;
    pthread_mutex_t lock;
    pthread_t ticker;
    int ticker_on, stop;
    size_t last_width;
} progress;

/* Work of a point in the units the rates use: preparation and selection grow with P; the
 * reference top-k and the per-point set-up do not, hence the 1. */
static double work_of(const point *p) { return (double)p->P + 1.0; }

static double rate(const progress *g, const point *p)
{
    size_t k = p->variant * DEFTSIM_METHOD_COUNT + (size_t)p->method;
    if (g->var_method_work[k] > 0) return g->var_method_sec[k] / g->var_method_work[k];
    if (g->all_work > 0) return g->all_sec / g->all_work;
    return NAN;
}

/* Seconds left: the current point's remaining estimate plus every point still to run. */
static double time_left(const progress *g, double now)
{
    const deftsim_sweep *s = g->s;
    double left = 0;
    for (size_t i = 0; i < s->npoints; i++) {
        const point *p = &s->points[i];
        if (p->state == DEFTSIM_POINT_DONE || p->ran_now || p == g->current) continue;
        double r = rate(g, p);
        if (isnan(r)) return NAN;
        left += r * work_of(p);
    }
    if (g->current) {
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

static void point_words(const deftsim_sweep *s, const point *p, char *buf, size_t cap)
{
    char d[40];
    deftsim_csv_double(d, sizeof d, p->density);
    snprintf(buf, cap, "%s d=%s P=%u%s%s", deftsim_method_name(p->method), d, p->P,
             s->naxes ? " " : "", s->variants[p->variant].label);
}

/* A failed point's message for stderr: the engine's begins with the point ("topk d=0.25 P=2
 * iteration 2: ..."), which is then not repeated; the variant, when there are axes, goes after
 * it. Other messages get the point's words in front. */
static void failure_words(const deftsim_sweep *s, const point *p, char *buf, size_t cap)
{
    char what[512], d[40], head[512];
    point_words(s, p, what, sizeof what);
    const char *msg = p->error ? p->error : "?";
    deftsim_csv_double(d, sizeof d, p->density);
    int n = snprintf(head, sizeof head, "%s d=%s P=%u", deftsim_method_name(p->method), d, p->P);
    size_t hl = n > 0 ? (size_t)n : 0;
    if (hl < sizeof head && !strncmp(msg, head, hl) && (msg[hl] == ' ' || msg[hl] == ':'))
        snprintf(buf, cap, "%s%s", what, msg + hl);
    else
        snprintf(buf, cap, "%s: %s", what, msg);
}

static int term_width(FILE *f)
{
    struct winsize ws;
    if (ioctl(fileno(f), TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 40) return ws.ws_col;
    return 80;
}

/* The status line: "[#####.....] 12/49 deft d=0.01 P=32 | 1:02 elapsed, ~3:10 left". Called
 * with the lock held. */
static void draw_bar(progress *g)
{
    double now = deftsim_now();
    char what[512] = "", el[32], lf[64], tail[700];
    if (g->current) point_words(g->s, g->current, what, sizeof what);
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
    progress *g = arg;
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

static deftsim_status progress_init(progress *g, const deftsim_sweep *s)
{
    memset(g, 0, sizeof *g);
    g->s = s;
    g->f = s->opt.progress;
    g->tty = s->opt.tty;
    g->total = s->npoints;
    g->t0 = deftsim_now();
    g->point_estimate = NAN;
    size_t n = s->nvariants * DEFTSIM_METHOD_COUNT;
    g->var_method_sec = calloc(n, sizeof(double));
    g->var_method_work = calloc(n, sizeof(double));
    if (!g->var_method_sec || !g->var_method_work) {
        free(g->var_method_sec);
        free(g->var_method_work);
        return nomem();
    }
    pthread_mutex_init(&g->lock, NULL);
    for (size_t i = 0; i < s->npoints; i++)
        if (s->points[i].state == DEFTSIM_POINT_DONE) g->finished++;
    if (g->f && g->tty && pthread_create(&g->ticker, NULL, ticker_main, g) == 0) g->ticker_on = 1;
    return DEFTSIM_OK;
}

static void progress_end(progress *g)
{
    if (g->ticker_on) {
        pthread_mutex_lock(&g->lock);
        g->stop = 1;
        pthread_mutex_unlock(&g->lock);
        pthread_join(g->ticker, NULL);
    }
    if (g->f && g->tty) {
        pthread_mutex_lock(&g->lock);
        g->current = NULL;
        draw_bar(g);
        fputc('\n', g->f);
        pthread_mutex_unlock(&g->lock);
    }
    pthread_mutex_destroy(&g->lock);
    free(g->var_method_sec);
    free(g->var_method_work);
}

static void progress_start(progress *g, const point *p)
{
    pthread_mutex_lock(&g->lock);
    g->current = p;
    g->point_t0 = deftsim_now();
    double r = rate(g, p);
    g->point_estimate = isnan(r) ? NAN : r * work_of(p);
    if (g->f && g->tty) draw_bar(g);
    pthread_mutex_unlock(&g->lock);
}

static void progress_done(progress *g, const point *p, int ok)
{
    pthread_mutex_lock(&g->lock);
    g->finished++;
    g->current = NULL;
    if (ok) {
        size_t k = p->variant * DEFTSIM_METHOD_COUNT + (size_t)p->method;
        g->var_method_sec[k] += p->seconds;
        g->var_method_work[k] += work_of(p);
        g->all_sec += p->seconds;
        g->all_work += work_of(p);
    }
    if (g->f) {
        char what[512], lf[64] = "", failure[2600];
        point_words(g->s, p, what, sizeof what);
        if (!ok) failure_words(g->s, p, failure, sizeof failure);
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
                    g->total, what, p->seconds, p->rows, lf);
        if (g->tty) draw_bar(g);
        fflush(g->f);
    }
    pthread_mutex_unlock(&g->lock);
}

/* ---- running ------------------------------------------------------------------------------------ */

/* The folder's lock is a flock on .sweep.lock, which belongs to the open file description:
 * a child forked while the sweep runs (the network simulation's) shares it, and a child that
 * outlives a killed sweep would keep the folder locked, refusing the resume, until it ends.
 * A fork handler closes the locks' descriptors in every child, so that the lock lives and dies
 * with the sweep's process. (The simulation's child also dies with its parent: sim.c.) */
#define MAX_LOCKS 8
static pthread_mutex_t locks_mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t locks_once = PTHREAD_ONCE_INIT;
static int lock_fds[MAX_LOCKS] = {-1, -1, -1, -1, -1, -1, -1, -1};

static void lock_child(void)
{
    for (int i = 0; i < MAX_LOCKS; i++)
        if (lock_fds[i] >= 0) {
            close(lock_fds[i]);
            lock_fds[i] = -1;
        }
}

static void locks_init(void) { pthread_atfork(NULL, NULL, lock_child); }

static int lock_remember(int fd)
{
    pthread_once(&locks_once, locks_init);
    pthread_mutex_lock(&locks_mutex);
    int slot = -1;
    for (int i = 0; i < MAX_LOCKS && slot < 0; i++)
        if (lock_fds[i] < 0) slot = i;
    if (slot >= 0) lock_fds[slot] = fd;
    pthread_mutex_unlock(&locks_mutex);
    return slot >= 0 ? 0 : -1;
}

static void lock_forget(int fd)
{
    pthread_mutex_lock(&locks_mutex);
    for (int i = 0; i < MAX_LOCKS; i++)
        if (lock_fds[i] == fd) lock_fds[i] = -1;
    pthread_mutex_unlock(&locks_mutex);
}

static deftsim_status take_lock(deftsim_sweep *s)
{
    char path[4200];
    path_in(s, ".sweep.lock", path, sizeof path);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return deftsim_error_set(DEFTSIM_E_IO, "%s: cannot open: %s", path, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int err = errno;
        close(fd);
        if (err == EWOULDBLOCK)
            return deftsim_error_set(DEFTSIM_E_INPUT,
                                     "%s: another deftsim sweep is writing this folder; wait for "
                                     "it or sweep into another folder (--output DIR)",
                                     s->base->scenario.output);
        return deftsim_error_set(DEFTSIM_E_IO, "%s: cannot lock: %s", path, strerror(err));
    }
    if (lock_remember(fd) != 0) {
        close(fd);
        return deftsim_error_set(DEFTSIM_E_RUNTIME,
                                 "%s: more than %d sweeps at once in one process",
                                 s->base->scenario.output, MAX_LOCKS);
    }
    s->lock_fd = fd;
    return DEFTSIM_OK;
}

/* Whether name is "<base><suffix><digits>" for a base ending in one of the given
 * extensions: the atomic writer's "<file>.tmp.<pid>". */
static int stale_name(const char *name, const char *const *exts, size_t nexts)
{
    const char *t = strstr(name, ".tmp.");
    if (!t || !t[5]) return 0;
    for (const char *q = t + 5; *q; q++)
        if (!isdigit((unsigned char)*q)) return 0;
    for (size_t i = 0; i < nexts; i++) {
        size_t el = strlen(exts[i]);
        if ((size_t)(t - name) >= el && !strncmp(t - el, exts[i], el)) return 1;
    }
    return 0;
}

/* What a sweep that was killed can leave in dir: the temporary files of the atomic writer
 * ("<file>.tmp.<pid>": a point that was running, a manifest, rows.csv, a platform or a
 * .failed file being committed) and the engine's row buffer ("<point>.csv.rows.XXXXXX", if
 * the kill fell between its creation and its unlink). Only names a sweep writes, so that a
 * deftsim analyze writing its summary here at the same time keeps its own; safe to remove
 * while this sweep holds the folder's lock. */
static void remove_stale(const char *dir, const char *const *exts, size_t nexts)
{
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char path[4600];
    while ((e = readdir(d))) {
        if (!stale_name(e->d_name, exts, nexts) && !strstr(e->d_name, ".csv.rows.")) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    closedir(d);
}

static deftsim_status prepare_folders(deftsim_sweep *s)
{
    char path[4200];
    deftsim_status st = deftsim_mkdir_p(s->base->scenario.output);
    if (st) return deftsim_error_wrap(st, "[scenario] output");
    for (size_t v = 0; v < s->nvariants; v++) {
        char rel[1200];
        snprintf(rel, sizeof rel, "points%s%s", s->variants[v].label[0] ? "/" : "",
                 s->variants[v].label);
        path_in(s, rel, path, sizeof path);
        if ((st = deftsim_mkdir_p(path))) return deftsim_error_wrap(st, "[scenario] output");
    }
    return DEFTSIM_OK;
}

static void clean_stale(deftsim_sweep *s)
{
    static const char *const top[] = {"manifest.json", "rows.csv"};
    static const char *const points[] = {".csv", ".failed"};
    const char *platforms[] = {".xml", ""};
    char path[4200];
    path_in(s, "", path, sizeof path);
    remove_stale(path, top, 2);
    path_in(s, "points", path, sizeof path);
    remove_stale(path, points, 2);
    /* A user's platform file keeps its own name there. */
    platforms[1] = s->nvariants && !s->variants[0].label[0] ? s->variants[0].platform.name : NULL;
    path_in(s, "platforms", path, sizeof path);
    remove_stale(path, platforms, platforms[1] ? 2 : 1);
    for (size_t v = 0; v < s->nvariants; v++) {
        if (!s->variants[v].label[0]) continue;
        char rel[1200];
        snprintf(rel, sizeof rel, "points/%s", s->variants[v].label);
        path_in(s, rel, path, sizeof path);
        remove_stale(path, points, 2);
        snprintf(rel, sizeof rel, "points/%s/platforms", s->variants[v].label);
        path_in(s, rel, path, sizeof path);
        platforms[1] = s->variants[v].platform.name;
        remove_stale(path, platforms, platforms[1] ? 2 : 1);
    }
}

static void mark_failed(deftsim_sweep *s, point *p, const char *msg)
{
    free(p->error);
    p->error = strdup(msg);
    p->state = DEFTSIM_POINT_FAILED;
    p->ran_now = 1;
    char rel[1500], path[4200];
    snprintf(rel, sizeof rel, "points/%s.failed", p->id);
    path_in(s, rel, path, sizeof path);
    char *text = malloc(strlen(msg) + 2);
    if (text) {
        sprintf(text, "%s\n", msg);
        /* The message is also in the manifest: losing this copy loses nothing. */
        deftsim_write_file_atomic(path, text, strlen(text));
        free(text);
    }
}

/* --rerun-noisy: the finished points of the plan whose point files the noise rule flags
 * (docs/TIMING.md) are marked to run again. */
deftsim_status deftsim_sweep_mark_noisy(deftsim_sweep *s, size_t *count)
{
    *count = 0;
    for (size_t i = 0; i < s->npoints; i++) {
        point *p = &s->points[i];
        if (p->state != DEFTSIM_POINT_DONE) continue;
        char fpath[4200];
        path_in(s, p->file, fpath, sizeof fpath);
        double spread;
        int noisy;
        deftsim_status st = deftsim_analysis_point_noise(fpath, s->opt.noisy_warmup,
                                                         DEFTSIM_NOISY_SPREAD, &spread, &noisy);
        if (st) return deftsim_error_wrap(st, "--rerun-noisy: point %s", p->id);
        if (!noisy) continue;
        p->state = DEFTSIM_POINT_PENDING;
        (*count)++;
    }
    return DEFTSIM_OK;
}

deftsim_status deftsim_sweep_run(deftsim_sweep *s, deftsim_sweep_summary *summary)
{
    deftsim_sweep_summary sum;
    memset(&sum, 0, sizeof sum);
    double t0 = deftsim_now();
    deftsim_status st;
    /* A folder of other results is refused before anything is created in it; the check is
     * repeated under the lock, which another sweep may have held meanwhile. */
    if ((st = deftsim_sweep_load_state(s))) return st;
    if ((st = prepare_folders(s))) return st;
    if ((st = take_lock(s))) return st;
    if ((st = deftsim_sweep_load_state(s))) return st;
    clean_stale(s);
    if (s->opt.rerun_noisy && (st = deftsim_sweep_mark_noisy(s, &sum.noisy))) return st;
    char now[64];
    utc_now(now, sizeof now);
    free(s->started);
    if (!(s->started = strdup(now))) return nomem();
    sum.planned = s->npoints;
    for (size_t i = 0; i < s->npoints; i++)
        if (s->points[i].state == DEFTSIM_POINT_DONE) sum.skipped++;
    if ((st = write_manifest(s, "running", NULL, 0))) return st;

    progress g;
    if ((st = progress_init(&g, s))) return st;
    if (g.f) {
        const deftsim_config *c = s->base;
        pthread_mutex_lock(&g.lock);
        if (g.tty) fprintf(g.f, "\r\033[K");
        fprintf(g.f,
                "deftsim sweep: %zu points (%zu method%s x %zu densit%s x %zu worker count%s",
                s->npoints, c->sparsify.nmethods, c->sparsify.nmethods == 1 ? "" : "s",
                c->sparsify.ndensities, c->sparsify.ndensities == 1 ? "y" : "ies",
                c->workers.ncounts, c->workers.ncounts == 1 ? "" : "s");
        if (s->nvariants > 1) fprintf(g.f, " x %zu variants", s->nvariants);
        fprintf(g.f, ") -> %s", c->scenario.output);
        if (sum.skipped) fprintf(g.f, "; %zu finished earlier, skipped", sum.skipped);
        if (sum.noisy) fprintf(g.f, "; %zu noisy, run again", sum.noisy);
        fprintf(g.f, "\n");
        fflush(g.f);
        pthread_mutex_unlock(&g.lock);
    }

    deftsim_run_options eo = engine_options(s);
    deftsim_engine *e = NULL;
    size_t e_variant = SIZE_MAX;
    char *engine_error = NULL;
    deftsim_status engine_status = DEFTSIM_OK;
    for (size_t i = 0; i < s->npoints; i++) {
        point *p = &s->points[i];
        if (p->state == DEFTSIM_POINT_DONE) continue;
        if (p->variant != e_variant) {
            /* One engine per variant: its gradient source, kernels and buffers serve every
             * point of the variant; the previous one's memory is released first. */
            deftsim_engine_free(e);
            e = NULL;
            free(engine_error);
            engine_error = NULL;
            e_variant = p->variant;
            if ((st = deftsim_engine_new(s->variants[p->variant].cfg, &eo, &e))) {
                engine_error = strdup(deftsim_error_message());
                engine_status = st;
                e = NULL;
            }
        }
        progress_start(&g, p);
        char rel_csv[1500], csv[4200];
        snprintf(rel_csv, sizeof rel_csv, "%s", p->file);
        path_in(s, rel_csv, csv, sizeof csv);
        deftsim_point_summary ps;
        memset(&ps, 0, sizeof ps);
        if (!e)
            st = deftsim_error_set(engine_status ? engine_status : DEFTSIM_E_RUNTIME, "%s",
                                   engine_error ? engine_error : "engine");
        else st = deftsim_engine_run_point(e, p->method, p->density, p->P, csv, &ps);
        if (st) {
            char msg[2048];
            snprintf(msg, sizeof msg, "%s", deftsim_error_message());
            mark_failed(s, p, msg);
            p->error_status = st;
            sum.failed++;
        } else {
            p->state = DEFTSIM_POINT_DONE;
            p->ran_now = 1;
            p->rows = ps.rows;
            p->seconds = ps.seconds;
            p->prepare_seconds = ps.prepare_seconds;
            p->step_seconds = ps.step_seconds;
            utc_now(now, sizeof now);
            free(p->finished);
            free(p->git_commit);
            p->finished = strdup(now);
            p->git_commit = strdup(DEFTSIM_GIT_COMMIT);
            json_decref(p->machine_state);
            p->machine_state = deftsim_noise_json(&ps.machine_start, &ps.machine_end);
            free(p->error);
            p->error = NULL;
            char rel[1500], fpath[4200];
            snprintf(rel, sizeof rel, "points/%s.failed", p->id);
            path_in(s, rel, fpath, sizeof fpath);
            unlink(fpath); /* a failure of an earlier sweep, now superseded */
            sum.ran++;
            sum.rows += ps.rows;
        }
        progress_done(&g, p, !st);
        if ((st = write_manifest(s, "running", NULL, 0))) break;
    }
    deftsim_engine_free(e);
    free(engine_error);
    progress_end(&g);
    if (st) return st; /* the manifest could not be written: nothing more can be recorded */

    size_t left = 0;
    for (size_t i = 0; i < s->npoints; i++)
        if (s->points[i].state != DEFTSIM_POINT_DONE) left++;
    int rows_written = 0;
    if (!left) {
        if ((st = write_rows_csv(s))) return st;
        rows_written = 1;
    }
    utc_now(now, sizeof now);
    if ((st = write_manifest(s, left ? "incomplete" : "complete", now, rows_written))) return st;
    sum.seconds = deftsim_now() - t0;
    if (summary) *summary = sum;
    if (!sum.failed && !left) return DEFTSIM_OK;
    /* The failures, one per line after the count. The status follows their kind: a point that
     * failed on bad input (a NaN in a trace, ...) fails again until the input is fixed, so the
     * sweep is then an input error (exit 2); otherwise a runtime error (exit 1). */
    int bad_input = 0;
    for (size_t i = 0; i < s->npoints; i++)
        if (s->points[i].state != DEFTSIM_POINT_DONE &&
            (s->points[i].error_status == DEFTSIM_E_INPUT ||
             s->points[i].error_status == DEFTSIM_E_USAGE))
            bad_input = 1;
    char *msg = NULL;
    size_t ml = 0;
    FILE *m = open_memstream(&msg, &ml);
    if (!m) return nomem();
    fprintf(m, "%zu of %zu points failed (the others are written; %s):", left, s->npoints,
            bad_input ? "fix the input, then rerun the sweep to retry" : "rerun the sweep to retry");
    for (size_t i = 0; i < s->npoints; i++) {
        const point *p = &s->points[i];
        if (p->state == DEFTSIM_POINT_DONE) continue;
        char failure[2600];
        if (p->error) {
            failure_words(s, p, failure, sizeof failure);
            fprintf(m, "\n  %s (points/%s.failed)", failure, p->id);
        } else {
            point_words(s, p, failure, sizeof failure);
            fprintf(m, "\n  %s: not run (points/%s.failed)", failure, p->id);
        }
    }
    fclose(m);
    st = deftsim_error_set(bad_input ? DEFTSIM_E_INPUT : DEFTSIM_E_RUNTIME, "%s", msg);
    free(msg);
    return st;
}

/* ---- reading a results folder ------------------------------------------------------------------ */

void deftsim_results_free(deftsim_result_set *r)
{
    if (!r) return;
    for (size_t i = 0; i < r->nfiles; i++) {
        free(r->files[i].path);
        for (size_t a = 0; r->files[i].values && a < r->naxes; a++) free(r->files[i].values[a]);
        free(r->files[i].values);
    }
    free(r->files);
    for (size_t a = 0; a < r->naxes; a++) free(r->axes[a]);
    free(r->axes);
    for (size_t i = 0; r->provenance && r->provenance[i]; i++) free(r->provenance[i]);
    free(r->provenance);
    free(r->kind);
    free(r);
}

static deftsim_status add_line(deftsim_result_set *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static deftsim_status add_line(deftsim_result_set *r, const char *fmt, ...)
{
    size_t n = 0;
    while (r->provenance && r->provenance[n]) n++;
    char **p = realloc(r->provenance, (n + 2) * sizeof *p);
    if (!p) return nomem();
    r->provenance = p;
    va_list ap;
    va_start(ap, fmt);
    int len = vasprintf(&p[n], fmt, ap);
    va_end(ap);
    if (len < 0) {
        p[n] = NULL;
        return nomem();
    }
    p[n + 1] = NULL;
    return DEFTSIM_OK;
}

static deftsim_status add_file(deftsim_result_set *r, const char *path, const char *const *values)
{
    deftsim_result_file *f = realloc(r->files, (r->nfiles + 1) * sizeof *f);
    if (!f) return nomem();
    r->files = f;
    deftsim_result_file *x = &r->files[r->nfiles];
    memset(x, 0, sizeof *x);
    r->nfiles++;
    if (!(x->path = strdup(path))) return nomem();
    if (r->naxes) {
        if (!(x->values = calloc(r->naxes, sizeof *x->values))) return nomem();
        for (size_t a = 0; a < r->naxes; a++)
            if (!(x->values[a] = strdup(values[a] ? values[a] : ""))) return nomem();
    }
    return DEFTSIM_OK;
}

/* A string member, or "?" when absent. */
static const char *jstr(json_t *o, const char *key)
{
    const char *v = json_string_value(json_object_get(o, key));
    return v ? v : "?";
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Lines about the build and machine of a manifest. */
static deftsim_status machine_lines(deftsim_result_set *r, json_t *m)
{
    json_t *d = json_object_get(m, "deftsim"), *mach = json_object_get(m, "machine");
    json_t *k = json_object_get(m, "kernels");
    deftsim_status st = DEFTSIM_OK;
    if (d)
        st = add_line(r, "Written by deftsim %s (commit %s).",
                      jstr(d, "version"),
                      jstr(d, "git_commit"));
    if (!st && mach)
        st = add_line(r, "Machine: %s, %d CPUs online, %.1f GiB RAM.",
                      jstr(mach, "cpu_model"),
                      (int)json_integer_value(json_object_get(mach, "cpus_online")),
                      (double)json_integer_value(json_object_get(mach, "ram_bytes")) / 1073741824.0);
    if (!st && k)
        st = add_line(r, "Kernels: %s backend, %d thread(s).",
                      jstr(k, "backend"),
                      (int)json_integer_value(json_object_get(k, "threads")));
    return st;
}

static deftsim_status list_sweep(deftsim_result_set *r, const char *dir, json_t *m)
{
    deftsim_status st;
    size_t i;
    json_t *e;
    json_t *axes = json_object_get(m, "axes");
    r->naxes = json_array_size(axes);
    if (r->naxes && !(r->axes = calloc(r->naxes, sizeof *r->axes))) return nomem();
    json_array_foreach(axes, i, e) {
        const char *k = json_string_value(json_object_get(e, "key"));
        if (!(r->axes[i] = strdup(k ? k : "?"))) return nomem();
    }
    size_t done = 0, failed = 0, pending = 0;
    const char **vals = calloc(r->naxes ? r->naxes : 1, sizeof *vals);
    if (!vals) return nomem();
    st = DEFTSIM_OK;
    json_array_foreach(json_object_get(m, "points"), i, e) {
        const char *state = json_string_value(json_object_get(e, "status"));
        const char *file = json_string_value(json_object_get(e, "file"));
        if (!state || !file) continue;
        if (!strcmp(state, "failed")) failed++;
        if (!strcmp(state, "pending")) pending++;
        if (strcmp(state, "done")) continue;
        done++;
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", dir, file);
        for (size_t a = 0; a < r->naxes; a++)
            vals[a] = json_string_value(json_object_get(json_object_get(e, "axes"), r->axes[a]));
        if ((st = add_file(r, path, vals))) break;
    }
    free(vals);
    if (st) return st;
    json_t *cfg = json_object_get(json_object_get(m, "identity"), "config");
    json_t *sc = json_object_get(cfg, "scenario");
    st = add_line(r, "Results: `%s`, a deftsim sweep of scenario '%s' (seed %lld, %lld iterations "
                     "per point), status %s: %zu point%s finished, %zu failed, %zu not run.",
                  dir, jstr(m, "scenario"),
                  (long long)json_integer_value(json_object_get(m, "seed")),
                  (long long)json_integer_value(json_object_get(sc, "iterations")),
                  jstr(m, "status"), done, done == 1 ? "" : "s",
                  failed, pending);
    if (!st && failed) {
        json_array_foreach(json_object_get(m, "points"), i, e) {
            const char *state = json_string_value(json_object_get(e, "status"));
            if (!state || strcmp(state, "failed") || st) continue;
            st = add_line(r, "Failed (not in the tables): %s: %s",
                          jstr(e, "id"),
                          jstr(e, "error"));
        }
    }
    if (!st) st = machine_lines(r, m);
    return st;
}

static deftsim_status list_run(deftsim_result_set *r, const char *dir, json_t *m)
{
    size_t i;
    json_t *e;
    deftsim_status st = DEFTSIM_OK;
    json_array_foreach(json_object_get(m, "points"), i, e) {
        const char *file = json_string_value(json_object_get(e, "file"));
        if (!file) continue;
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", dir, file);
        if ((st = add_file(r, path, NULL))) return st;
    }
    json_t *cfg = json_object_get(m, "config");
    json_t *sc = json_object_get(cfg, "scenario");
    st = add_line(r, "Results: `%s`, a deftsim run of scenario '%s' (seed %lld, %lld iterations per "
                     "point), status %s: %zu point%s.",
                  dir, jstr(m, "scenario"),
                  (long long)json_integer_value(json_object_get(m, "seed")),
                  (long long)json_integer_value(json_object_get(sc, "iterations")),
                  jstr(m, "status"), r->nfiles,
                  r->nfiles == 1 ? "" : "s");
    if (!st) st = machine_lines(r, m);
    return st;
}

static deftsim_status list_points_dir(deftsim_result_set *r, const char *dir)
{
    char pdir[4200];
    snprintf(pdir, sizeof pdir, "%s/points", dir);
    DIR *d = opendir(pdir);
    char **names = NULL;
    size_t n = 0;
    deftsim_status st = DEFTSIM_OK;
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            size_t l = strlen(e->d_name);
            if (l < 5 || strcmp(e->d_name + l - 4, ".csv")) continue;
            char **p = realloc(names, (n + 1) * sizeof *p);
            if (!p || !(p[n] = strdup(e->d_name))) {
                if (p) names = p;
                st = nomem();
                break;
            }
            names = p;
            n++;
        }
        closedir(d);
    }
    if (!st && n) qsort(names, n, sizeof *names, cmp_str);
    for (size_t i = 0; i < n && !st; i++) {
        char path[4600];
        snprintf(path, sizeof path, "%s/%s", pdir, names[i]);
        st = add_file(r, path, NULL);
    }
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    if (st) return st;
    if (n) return add_line(r, "Results: the %zu point files in `%s` (no manifest.json).", n, pdir);
    char rows[4200];
    snprintf(rows, sizeof rows, "%s/rows.csv", dir);
    if (!file_exists(rows))
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "%s: no manifest.json, no points/*.csv and no rows.csv: not a "
                                 "folder of deftsim results",
                                 dir);
    if ((st = add_file(r, rows, NULL))) return st;
    return add_line(r, "Results: `%s` (no manifest.json).", rows);
}

deftsim_status deftsim_results_list(const char *dir, deftsim_result_set **out)
{
    *out = NULL;
    deftsim_result_set *r = calloc(1, sizeof *r);
    if (!r) return nomem();
    deftsim_status st = DEFTSIM_OK;
    struct stat sb;
    if (stat(dir, &sb) != 0) {
        st = deftsim_error_set(DEFTSIM_E_INPUT, "%s: %s", dir, strerror(errno));
        goto done;
    }
    if (S_ISREG(sb.st_mode)) {
        if (!(r->kind = strdup("file"))) st = nomem();
        if (!st) st = add_file(r, dir, NULL);
        if (!st) st = add_line(r, "Results: `%s`.", dir);
        goto done;
    }
    char mpath[4200];
    snprintf(mpath, sizeof mpath, "%s/manifest.json", dir);
    if (!file_exists(mpath)) {
        if (!(r->kind = strdup("points"))) st = nomem();
        if (!st) st = list_points_dir(r, dir);
        goto done;
    }
    json_error_t jerr;
    json_t *m = json_load_file(mpath, 0, &jerr);
    if (!m) {
        st = deftsim_error_set(DEFTSIM_E_INPUT, "%s:%d: not JSON: %s", mpath, jerr.line, jerr.text);
        goto done;
    }
    const char *fmt = json_string_value(json_object_get(m, "format"));
    if (fmt && !strcmp(fmt, MANIFEST_FORMAT)) {
        if (!(r->kind = strdup("sweep"))) st = nomem();
        if (!st) st = list_sweep(r, dir, m);
    } else if (fmt && !strcmp(fmt, "deftsim-results")) {
        if (!(r->kind = strdup("run"))) st = nomem();
        if (!st) st = list_run(r, dir, m);
    } else {
        st = deftsim_error_set(DEFTSIM_E_INPUT, "%s: not a deftsim manifest (format %s)", mpath,
                               fmt ? fmt : "missing");
    }
    json_decref(m);
    if (!st && !r->nfiles)
        st = deftsim_error_set(DEFTSIM_E_INPUT, "%s: no finished points to analyse", dir);
done:
    if (st) {
        deftsim_results_free(r);
        return st;
    }
    *out = r;
    return DEFTSIM_OK;
}
