/* folder.c - what a results folder already holds, checked before a command writes into it
 * (deftsim_folder.h). */
#include "deftsim_folder.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

const char *deftsim_folder_holds(const char *format)
{
    if (!format) return "a manifest.json deftsim did not write";
    if (!strcmp(format, "deftsim-results")) return "the results of deftsim run";
    if (!strcmp(format, "deftsim-sweep")) return "the points of deftsim sweep";
    if (!strcmp(format, "deftsim-train-results")) return "the results of deftsim train";
    if (!strcmp(format, "deftsim-trace")) return "a gradient trace";
    return "something else";
}

json_t *deftsim_folder_config_identity(json_t *config, const char *const (*drop)[2], size_t ndrop)
{
    json_t *cfg = json_deep_copy(config);
    if (!cfg) return NULL;
    for (size_t i = 0; i < ndrop; i++) {
        json_t *sec = json_object_get(cfg, drop[i][0]);
        if (sec) json_object_del(sec, drop[i][1]);
    }
    return json_pack("{s:o}", "config", cfg);
}

json_t *deftsim_folder_run_identity_of(json_t *manifest)
{
    static const char *const drop[][2] = {{"scenario", "output"}, {"engine", "memory_budget"},
                                        {"engine", "regen_slots"}};
    json_t *cfg = json_object_get(manifest, "config");
    if (!json_is_object(cfg)) return NULL;
    return deftsim_folder_config_identity(cfg, drop, sizeof drop / sizeof drop[0]);
}

/* Names the differences between two identities: "[scenario] seed: 2 here, 1 in the folder". */
static void describe_difference(json_t *now, json_t *before, char *buf, size_t cap)
{
    size_t o = 0;
    int shown = 0;
    buf[0] = '\0';
    json_t *cn = json_object_get(now, "config"), *cb = json_object_get(before, "config");
    const char *sec;
    json_t *so;
    json_object_foreach(cn, sec, so) {
        const char *key;
        json_t *vn;
        json_t *sb = json_object_get(cb, sec);
        json_object_foreach(so, key, vn) {
            json_t *vb = sb ? json_object_get(sb, key) : NULL;
            if (vb && json_equal(vn, vb)) continue;
            if (shown++ >= 4) continue;
            char *tn = json_dumps(vn, JSON_ENCODE_ANY | JSON_COMPACT);
            char *tb = vb ? json_dumps(vb, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
            o += (size_t)snprintf(buf + o, o < cap ? cap - o : 0, "%s[%s] %s: %s here, %s in the folder",
                                  o ? "; " : "", sec, key, tn ? tn : "?", tb ? tb : "absent");
            free(tn);
            free(tb);
        }
    }
    json_t *an = json_object_get(now, "axes"), *ab = json_object_get(before, "axes");
    if ((an || ab) && !json_equal(an, ab)) {
        char *tn = an ? json_dumps(an, JSON_COMPACT) : NULL;
        char *tb = ab ? json_dumps(ab, JSON_COMPACT) : NULL;
        o += (size_t)snprintf(buf + o, o < cap ? cap - o : 0, "%saxes %s here, %s in the folder",
                              o ? "; " : "", tn ? tn : "?", tb ? tb : "?");
        free(tn);
        free(tb);
        shown++;
    }
    json_t *coln = json_object_get(now, "columns"), *colb = json_object_get(before, "columns");
    if ((coln || colb) && !json_equal(coln, colb)) {
        o += (size_t)snprintf(buf + o, o < cap ? cap - o : 0,
                              "%sthe rows' columns differ (the points were written by a deftsim "
                              "with other columns)",
                              o ? "; " : "");
        shown++;
    }
    json_t *pn = json_object_get(now, "platform_sha256"), *pb = json_object_get(before, "platform_sha256");
    if ((pn || pb) && !json_equal(pn, pb)) {
        o += (size_t)snprintf(buf + o, o < cap ? cap - o : 0,
                              "%sthe platform file's content differs (SHA-256) from the one the "
                              "points were simulated on",
                              o ? "; " : "");
        shown++;
    }
    if (shown > 4 && o < cap) snprintf(buf + o, cap - o, "; and %d more", shown - 4);
    if (!buf[0]) snprintf(buf, cap, "the manifest's identity cannot be compared");
}

/* Whether path (or a folder in it, down to depth more levels) holds a *.csv file. */
static int holds_csv(const char *path, int depth)
{
    DIR *d = opendir(path);
    if (!d) return 0;
    struct dirent *e;
    int any = 0;
    while (!any && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        size_t l = strlen(e->d_name);
        if (l > 4 && !strcmp(e->d_name + l - 4, ".csv")) any = 1;
        else if (depth > 0) {
            char sub[PATH_MAX + 256];
            int n = snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
            if (n > 0 && (size_t)n < sizeof sub) any = holds_csv(sub, depth - 1);
        }
    }
    closedir(d);
    return any;
}

int deftsim_folder_has_point_files(const char *points_dir) { return holds_csv(points_dir, 1); }

static int path_exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* The folder's identity as this deftsim reads it: a key of this identity that the folder's
 * manifest lacks was added to deftsim after the folder was written (such as [network]
 * compute), and that deftsim ran as the key's default does (a new key's default keeps the old
 * behaviour), so it counts as its default. A new reference, or NULL when out of memory. */
static json_t *identity_as_now(json_t *id, json_t *now)
{
    json_t *out = json_deep_copy(id);
    json_t *cfg = json_object_get(out, "config");
    if (!out || !json_is_object(cfg)) return out;
    deftsim_config *d = NULL;
    if (deftsim_config_default(NULL, &d)) {
        json_decref(out);
        return NULL;
    }
    json_t *dj = deftsim_config_to_json(d);
    deftsim_config_free(d);
    if (!dj) {
        json_decref(out);
        return NULL;
    }
    json_t *fgr = json_object_get(cfg, "gradients");
    json_t *ngr = json_object_get(json_object_get(now, "config"), "gradients");
    int before_sets = json_is_object(fgr) && !json_object_get(fgr, "params_used");
    const char *sec;
    json_t *dsec;
    json_object_foreach(dj, sec, dsec) {
        json_t *fsec = json_object_get(cfg, sec);
        json_t *nsec = json_object_get(json_object_get(now, "config"), sec);
        if (!json_is_object(fsec)) continue; /* a whole section missing: not a config of ours */
        const char *key;
        json_t *dv;
        json_object_foreach(dsec, key, dv)
            if (json_object_get(nsec, key) && !json_object_get(fsec, key))
                json_object_set(fsec, key, dv);
    }
    json_decref(dj);
    /* A folder written before the model tables' default sets (docs/GENERATOR.md) ran an unset
     * [gradients] params as the plain defaults, which params = none asks for now; its
     * [synthetic] values, compared as they are, still tell whether the same parameters ran. */
    if (before_sets && json_is_object(ngr)) {
        json_t *np = json_object_get(ngr, "params");
        if (json_is_null(json_object_get(fgr, "params")) && json_is_string(np) &&
            !strcmp(json_string_value(np), DEFTSIM_PARAMS_NONE))
            json_object_set(fgr, "params", np);
        json_t *nu = json_object_get(ngr, "params_used");
        if (nu) json_object_set(fgr, "params_used", nu);
    }
    return out;
}

deftsim_status deftsim_folder_check(const char *dir, const deftsim_folder_writer *w,
                                    json_t *identity, json_t **manifest)
{
    if (manifest) *manifest = NULL;
    char mpath[4200], ppath[4200];
    snprintf(mpath, sizeof mpath, "%s/manifest.json", dir);
    snprintf(ppath, sizeof ppath, "%s/points", dir);
    struct stat sb;
    if (stat(mpath, &sb) != 0) {
        if (errno != ENOENT && errno != ENOTDIR)
            return deftsim_error_set(DEFTSIM_E_IO, "%s: cannot read: %s", mpath, strerror(errno));
        if (deftsim_folder_has_point_files(ppath))
            return deftsim_error_set(DEFTSIM_E_INPUT,
                                     "%s holds point files but no manifest.json: they cannot be "
                                     "told apart from another scenario's; %s into another "
                                     "folder (%s) or remove them",
                                     ppath, w->verb, w->option);
        for (size_t i = 0; i < w->nfiles; i++) {
            char fpath[4400];
            snprintf(fpath, sizeof fpath, "%s/%s", dir, w->files[i]);
            if (path_exists(fpath))
                return deftsim_error_set(DEFTSIM_E_INPUT,
                                         "%s holds %s but no manifest.json: it cannot be told "
                                         "apart from another scenario's results; %s into another "
                                         "folder (%s) or remove it",
                                         dir, w->files[i], w->verb, w->option);
        }
        return DEFTSIM_OK;
    }
    json_error_t jerr;
    json_t *m = json_load_file(mpath, 0, &jerr);
    if (!m)
        return deftsim_error_set(DEFTSIM_E_INPUT, "%s:%d: not JSON: %s", mpath, jerr.line, jerr.text);
    const char *fmt = json_string_value(json_object_get(m, "format"));
    if (!fmt || strcmp(fmt, w->format)) {
        deftsim_status st = deftsim_error_set(
            DEFTSIM_E_INPUT, "%s: the folder holds %s, not %s; %s into another folder (%s)", dir,
            deftsim_folder_holds(fmt), w->noun, w->verb, w->option);
        json_decref(m);
        return st;
    }
    json_t *id = w->identity_of(m);
    json_t *id_now = id ? identity_as_now(id, identity) : NULL;
    json_decref(id);
    if (id && !id_now) {
        json_decref(m);
        return deftsim_error_nomem("results folder");
    }
    if (!id_now || !json_equal(id_now, identity)) {
        char diff[2048];
        json_t *none = id_now ? NULL : json_object();
        describe_difference(identity, id_now ? id_now : none, diff, sizeof diff);
        json_decref(none);
        json_decref(id_now);
        json_decref(m);
        return deftsim_error_set(DEFTSIM_E_INPUT, "%s holds %s (%s); %s: %s into another folder (%s)",
                                 dir, w->another, diff, w->why, w->verb, w->option);
    }
    json_decref(id_now);
    if (manifest) *manifest = m;
    else json_decref(m);
    return DEFTSIM_OK;
}
