/* sweep_plan.c - the plan of a sweep (sweep_internal.h): the scenario's lists and the --vary
 * keys become axes, every combination of their values a variant, every (variant, method,
 * density, P) a point; the identity a folder must match to resume; the points dealt to
 * shards by estimated cost; the points listed and put in words. */
#include "sweep_internal.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deftsim_csv.h"
#include "deftsim_engine.h"
#include "deftsim_gradsrc.h"
#include "deftsim_model.h"
#include "deftsim_sha256.h"
#include "deftsim_util.h"


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
            st = deftsim_error_nomem("sweep");
            break;
        }
        for (size_t i = 0; i < k && !st; i++)
            if (!strcmp(v[i], one)) st = deftsim_error_set(DEFTSIM_E_USAGE, "%s: '%s' given twice", what, one);
        if (!st && deftsim_grow(&v, &cap, k + 1, sizeof *v)) st = deftsim_error_nomem("sweep");
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
    if (!a) return deftsim_error_nomem("sweep");
    s->axes = a;
    axis *x = &s->axes[s->naxes];
    memset(x, 0, sizeof *x);
    if (!(x->key = strdup(key))) return deftsim_error_nomem("sweep");
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

/* A folder name from an axis value: a path's (a model's, a trace's, or any value with a '/'
 * such as a profile's) last component without .csv, other bytes than [A-Za-z0-9._-] as '_';
 * never a name ending in .csv, which the folder's checks take for a point file. */
static void label_part(const char *key, const char *value, char *buf, size_t cap)
{
    const char *v = value;
    if (!strcmp(key, "gradients.model") || !strcmp(key, "gradients.trace") || strchr(v, '/')) {
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
    size_t bl = strlen(buf);
    if (bl >= 4 && !strcmp(buf + bl - 4, ".csv")) buf[bl - 4] = '_';
}

static deftsim_status build_variants(deftsim_sweep *s)
{
    size_t nv = 1;
    for (size_t i = 0; i < s->naxes; i++) nv *= s->axes[i].nvalues;
    if (nv > 100000) return deftsim_error_set(DEFTSIM_E_USAGE, "sweep: %zu variants; too many", nv);
    s->variants = calloc(nv, sizeof *s->variants);
    if (!s->variants) return deftsim_error_nomem("sweep");
    for (size_t v = 0; v < nv; v++) {
        variant *var = &s->variants[v];
        s->nvariants = v + 1;
        var->value_index = calloc(s->naxes ? s->naxes : 1, sizeof *var->value_index);
        if (!var->value_index) return deftsim_error_nomem("sweep");
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
        if (!(var->label = strdup(s->naxes ? label : ""))) return deftsim_error_nomem("sweep");
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
    if (!s->points) return deftsim_error_nomem("sweep");
    for (size_t v = 0; v < s->nvariants; v++) {
        const deftsim_config *vc = s->variants[v].cfg;
        /* The engine's order within a variant: methods, then densities, then P ascending. */
        for (size_t mi = 0; mi < vc->sparsify.nmethods; mi++)
            for (size_t di = 0; di < vc->sparsify.ndensities; di++)
                for (size_t ci = 0; ci < vc->workers.ncounts; ci++) {
                    point *p = &s->points[s->npoints];
                    s->npoints++;
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
                    if (!p->id || !p->file) return deftsim_error_nomem("sweep");
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
                                         {"engine", "regen_slots"},
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

/* The plan's fingerprint: the SHA-256 of its point ids in order, one per line. Shards of one
 * sweep share it; a shard of another plan (other lists) would run other points. */
static deftsim_status plan_digest(deftsim_sweep *s)
{
    deftsim_sha256_ctx c;
    deftsim_sha256_init(&c);
    for (size_t i = 0; i < s->npoints; i++) {
        deftsim_sha256_update(&c, s->points[i].id, strlen(s->points[i].id));
        deftsim_sha256_update(&c, "\n", 1);
    }
    unsigned char d[32];
    deftsim_sha256_final(&c, d);
    if (!(s->plan_sha256 = malloc(65))) return deftsim_error_nomem("sweep");
    for (int i = 0; i < 32; i++) snprintf(s->plan_sha256 + 2 * i, 3, "%02x", d[i]);
    return DEFTSIM_OK;
}

deftsim_status deftsim_sweep_plan(deftsim_sweep *s)
{
    if (s->opt.shard_count && s->opt.shard_index >= s->opt.shard_count)
        return deftsim_error_set(DEFTSIM_E_USAGE, "--shard %u/%u: the index must be below %u",
                                 s->opt.shard_index, s->opt.shard_count, s->opt.shard_count);
    deftsim_status st = collect_axes(s);
    if (!st) st = build_variants(s);
    for (size_t v = 0; !st && v < s->nvariants; v++)
        st = deftsim_platform_record_read(s->variants[v].cfg, &s->variants[v].platform);
    if (!st) st = build_points(s);
    if (!st) deftsim_sweep_deal(s);
    if (!st) st = build_identity(s);
    if (!st) st = plan_digest(s);
    return st;
}

/* ---- dealing the points to shards ----------------------------------------------------------- */

/* Gradient elements of a variant's model or trace, for the cost estimate; 1 when they cannot
 * be read here (the engine reports why when the point runs): every shard reads the same. */
static double variant_elements(const deftsim_config *c)
{
    uint64_t n = 0;
    if (c->gradients.source == DEFTSIM_SOURCE_TRACE) {
        size_t iters;
        if (c->gradients.trace && deftsim_gradsrc_trace_peek(c->gradients.trace, &iters, &n)) n = 0;
    } else if (c->gradients.model) {
        deftsim_model *m;
        if (!deftsim_model_load(c->gradients.model, &m)) {
            n = m->numel;
            deftsim_model_free(m);
        }
    }
    deftsim_error_clear();
    return n ? (double)n : 1.0;
}

typedef struct {
    double cost;
    size_t index;
} dealt;

/* Longest first; ties in plan order. */
static int cmp_dealt(const void *a, const void *b)
{
    const dealt *x = a, *y = b;
    if (x->cost != y->cost) return x->cost > y->cost ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

void deftsim_sweep_deal(deftsim_sweep *s)
{
    double *elems = calloc(s->nvariants ? s->nvariants : 1, sizeof *elems);
    for (size_t v = 0; elems && v < s->nvariants; v++) elems[v] = variant_elements(s->variants[v].cfg);
    for (size_t i = 0; i < s->npoints; i++) {
        point *p = &s->points[i];
        const deftsim_config *c = s->variants[p->variant].cfg;
        p->cost = (elems ? elems[p->variant] : 1.0) * (double)p->P * (double)c->scenario.iterations;
        p->shard = 0;
        p->in_shard = 1;
    }
    free(elems);
    unsigned n = s->opt.shard_count;
    if (!n) return;
    dealt *order = malloc((s->npoints ? s->npoints : 1) * sizeof *order);
    double *load = calloc(n, sizeof *load);
    for (size_t i = 0; order && load && i < s->npoints; i++) order[i] = (dealt){s->points[i].cost, i};
    if (order && load) qsort(order, s->npoints, sizeof *order, cmp_dealt);
    for (size_t j = 0; j < s->npoints; j++) {
        point *p = &s->points[order && load ? order[j].index : j];
        unsigned k = 0;
        if (order && load) {
            for (unsigned q = 1; q < n; q++)
                if (load[q] < load[k]) k = q;
            load[k] += p->cost;
        } else {
            k = (unsigned)(j % n); /* out of memory: the plan order, interleaved */
        }
        p->shard = k;
        p->in_shard = k == s->opt.shard_index;
    }
    free(order);
    free(load);
}

unsigned deftsim_sweep_entry_shard(json_t *entry, size_t i, unsigned n)
{
    json_t *k = json_object_get(entry, "shard");
    if (json_is_integer(k) && json_integer_value(k) >= 0 && json_integer_value(k) < (json_int_t)n)
        return (unsigned)json_integer_value(k);
    return (unsigned)(i % n);
}

/* ---- listing the points --------------------------------------------------------------------- */

void deftsim_sweep_print_points(const deftsim_sweep *s, FILE *f)
{
    size_t n[3] = {0, 0, 0};
    fprintf(f, "%5s  %-8s %-8s %-10s %8s  %s\n", "#", "state", "method", "density", "P",
            s->naxes ? "variant / file" : "file");
    size_t listed = 0;
    for (size_t i = 0; i < s->npoints; i++) {
        const point *p = &s->points[i];
        if (!p->in_shard) continue;
        listed++;
        const char *st = p->state == DEFTSIM_POINT_DONE ? "done" : p->state == DEFTSIM_POINT_FAILED
                                                                       ? "retry"
                                                                       : "run";
        n[p->state]++;
        char d[40];
        deftsim_csv_double(d, sizeof d, p->density);
        fprintf(f, "%5zu  %-8s %-8s %-10s %8u  %s%s%s\n", i, st, deftsim_method_name(p->method),
                d, p->P, s->variants[p->variant].label, s->naxes ? " / " : "", p->file);
    }
    if (s->opt.shard_count) {
        /* The estimated work of this shard against the whole plan's (docs/CLUSTER.md). */
        double mine = 0, all = 0;
        for (size_t i = 0; i < s->npoints; i++) {
            all += s->points[i].cost;
            if (s->points[i].in_shard) mine += s->points[i].cost;
        }
        fprintf(f, "shard %u/%u: %zu of the plan's %zu points (dealt by estimated cost, "
                   "%.1f %% of the plan's): ",
                s->opt.shard_index, s->opt.shard_count, listed, s->npoints,
                all > 0 ? 100.0 * mine / all : 0.0);
    }
    fprintf(f, "%zu points: %zu to run, %zu failed before (run again), %zu finished before (skipped)",
            listed, n[DEFTSIM_POINT_PENDING], n[DEFTSIM_POINT_FAILED], n[DEFTSIM_POINT_DONE]);
    if (json_array_size(s->extra_points) && !s->opt.shard_count)
        fprintf(f, "; the folder also holds %zu finished points outside this plan",
                json_array_size(s->extra_points));
    fprintf(f, "\n");
}


void deftsim_sweep_words(const deftsim_sweep *s, const point *p, char *buf, size_t cap)
{
    char d[40];
    deftsim_csv_double(d, sizeof d, p->density);
    snprintf(buf, cap, "%s d=%s P=%u%s%s", deftsim_method_name(p->method), d, p->P,
             s->naxes ? " " : "", s->variants[p->variant].label);
}

/* A failed point's message for stderr: the engine's begins with the point ("topk d=0.25 P=2
 * iteration 2: ..."), which is then not repeated; the variant, when there are axes, goes after
 * it. Other messages get the point's words in front. */
void deftsim_sweep_failure_of(const deftsim_sweep *s, const point *p, char *buf, size_t cap)
{
    char what[512], d[40], head[512];
    deftsim_sweep_words(s, p, what, sizeof what);
    const char *msg = p->error ? p->error : "?";
    deftsim_csv_double(d, sizeof d, p->density);
    int n = snprintf(head, sizeof head, "%s d=%s P=%u", deftsim_method_name(p->method), d, p->P);
    size_t hl = n > 0 ? (size_t)n : 0;
    if (hl < sizeof head && !strncmp(msg, head, hl) && (msg[hl] == ' ' || msg[hl] == ':'))
        snprintf(buf, cap, "%s%s", what, msg + hl);
    else
        snprintf(buf, cap, "%s: %s", what, msg);
}

void deftsim_sweep_point_words(const deftsim_sweep *s, size_t i, char *buf, size_t cap)
{
    deftsim_sweep_words(s, &s->points[i], buf, cap);
}

void deftsim_sweep_failure_words(const deftsim_sweep *s, size_t i, char *buf, size_t cap)
{
    deftsim_sweep_failure_of(s, &s->points[i], buf, cap);
}

void deftsim_sweep_point_info_get(const deftsim_sweep *s, size_t i, deftsim_sweep_point_info *out)
{
    const point *p = &s->points[i];
    *out = (deftsim_sweep_point_info){.variant = p->variant,
                                      .method = p->method,
                                      .density = p->density,
                                      .P = p->P,
                                      .state = p->state,
                                      .ran_now = p->ran_now,
                                      .in_shard = p->in_shard,
                                      .shard = p->shard,
                                      .cost = p->cost,
                                      .rows = p->rows,
                                      .seconds = p->seconds};
}
