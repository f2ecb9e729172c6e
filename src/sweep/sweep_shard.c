/* sweep_shard.c - the shards of a sweep (deftsim_sweep.h, docs/CLUSTER.md): N processes, on as
 * many machines, sweep one shared folder, each the points dealt to it by estimated cost
 * (sweep_plan.c; shards/plan.json records the deal).
 *
 * Nothing a shard writes is written by another: its points' files, and its records in
 * shards/shard-<I>-of-<N>.json (rewritten after every point with the atomic writer). What the
 * shards share is created once, by whichever shard comes first, with an exclusive link():
 * manifest.json when the folder has none (the folder's identity, so that every other command
 * and sweep recognises and checks it) and shards/plan.json (the plan every shard must share:
 * the identity, the split N, the point ids in order and each one's shard). rows.csv and the complete manifest.json
 * are joined from those files by the last shard to finish or by deftsim sweep --merge, through
 * unique temporary names (mkstemp's O_EXCL) and rename: two joins at the same moment write the
 * same bytes, and a reader sees one or the other, whole. No step relies on flock, which shared
 * file systems do not all honour. */
#include "deftsim_sweep.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "deftsim_csv.h"
#include "deftsim_engine.h"
#include "deftsim_folder.h"
#include "deftsim_manifest.h"
#include "deftsim_util.h"
#include "sweep_internal.h"


/* "shard-<I>-of-<N>.json", exactly (no leading zeros, no other names). */
static int shard_file_name(const char *name, unsigned *index, unsigned *count)
{
    unsigned i, n;
    int used = -1;
    if (sscanf(name, "shard-%u-of-%u.json%n", &i, &n, &used) != 2 || used < 0 || name[used]) return 0;
    char again[64];
    snprintf(again, sizeof again, "shard-%u-of-%u.json", i, n);
    if (strcmp(again, name) || n == 0 || i >= n) return 0;
    *index = i;
    *count = n;
    return 1;
}

int deftsim_sweep_shard_tmp_name(const char *name)
{
    static const char *const bases[] = {"manifest.json", "rows.csv", "plan.json"};
    static const char *const kinds[] = {".new.", ".join."};
    for (size_t b = 0; b < 3; b++) {
        size_t bl = strlen(bases[b]);
        if (strncmp(name, bases[b], bl)) continue;
        for (size_t k = 0; k < 2; k++) {
            size_t kl = strlen(kinds[k]);
            if (!strncmp(name + bl, kinds[k], kl) && strlen(name + bl + kl) == 6) return 1;
        }
    }
    return 0;
}

/* ---- unique temporary files ------------------------------------------------------------------- */

/* A file written under "<path>.<kind>.XXXXXX", a name no other process on any machine can
 * hold (mkstemp creates it with O_EXCL, which NFSv3 and later honour). */
typedef struct {
    FILE *f;
    char tmp[4400];
    const char *path;
} xfile;

static deftsim_status xfile_open(xfile *x, const char *path, const char *kind)
{
    x->path = path;
    snprintf(x->tmp, sizeof x->tmp, "%s.%s.XXXXXX", path, kind);
    int fd = mkstemp(x->tmp);
    if (fd < 0) return deftsim_error_set(DEFTSIM_E_IO, "%s: cannot write: %s", path, strerror(errno));
    mode_t mask = umask(0);
    umask(mask);
    (void)fchmod(fd, 0666 & ~mask); /* as the atomic writer's files: mkstemp makes them 0600 */
    if (!(x->f = fdopen(fd, "w"))) {
        close(fd);
        unlink(x->tmp);
        return deftsim_error_set(DEFTSIM_E_IO, "%s: cannot write: %s", path, strerror(errno));
    }
    return DEFTSIM_OK;
}

static void xfile_abort(xfile *x)
{
    fclose(x->f);
    unlink(x->tmp);
}

/* Flushes and syncs the file, then puts it in place: renamed over the path, or (exclusive)
 * linked to it only when no file has the name yet (*created says whether this one did). */
static deftsim_status xfile_commit(xfile *x, int exclusive, int *created)
{
    int failed = ferror(x->f) || fflush(x->f) != 0;
    int err = errno;
    if (!failed && fsync(fileno(x->f)) != 0) failed = 1, err = errno;
    if (fclose(x->f) != 0 && !failed) failed = 1, err = errno;
    if (failed) {
        unlink(x->tmp);
        return deftsim_error_set(DEFTSIM_E_IO, "%s: write failed: %s", x->path, strerror(err));
    }
    if (!exclusive) {
        if (rename(x->tmp, x->path) != 0) {
            err = errno;
            unlink(x->tmp);
            return deftsim_error_set(DEFTSIM_E_IO, "%s: cannot rename into place: %s", x->path,
                                     strerror(err));
        }
        return DEFTSIM_OK;
    }
    /* link() fails with EEXIST when the name is taken: the first shard wins. Over NFS a lost
     * reply can make a link that succeeded answer EEXIST; the link count tells. A file system
     * without hard links gets a rename when the name is still free (a narrow race between
     * shards starting in the same instant, which write the same plan). */
    *created = 0;
    if (link(x->tmp, x->path) == 0) *created = 1;
    else {
        err = errno;
        struct stat sb;
        if (err == EEXIST) *created = stat(x->tmp, &sb) == 0 && sb.st_nlink == 2;
        else if (!deftsim_sweep_file_exists(x->path) && rename(x->tmp, x->path) == 0) *created = 1;
    }
    unlink(x->tmp);
    return DEFTSIM_OK;
}

static deftsim_status write_json(const char *path, json_t *root, const char *kind, int exclusive)
{
    char *text = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(root);
    if (!text) return deftsim_error_nomem("%s", path);
    xfile x;
    deftsim_status st = xfile_open(&x, path, kind);
    if (!st) {
        fputs(text, x.f);
        fputc('\n', x.f);
        int created;
        st = xfile_commit(&x, exclusive, &created);
    }
    free(text);
    return st;
}

static json_t *load_json(const char *path, deftsim_status *st)
{
    json_error_t jerr;
    *st = DEFTSIM_OK;
    json_t *j = json_load_file(path, 0, &jerr);
    if (!j) *st = deftsim_error_set(DEFTSIM_E_INPUT, "%s:%d: not JSON: %s", path, jerr.line, jerr.text);
    return j;
}

/* ---- a shard's own files ---------------------------------------------------------------------- */

static void shard_rel(unsigned index, unsigned count, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s/shard-%u-of-%u.json", SHARDS_DIR, index, count);
}

deftsim_status deftsim_sweep_shard_write(const deftsim_sweep *s, const char *status,
                                         const char *finished)
{
    char rel[128], path[4200];
    shard_rel(s->opt.shard_index, s->opt.shard_count, rel, sizeof rel);
    deftsim_sweep_path(s, rel, path, sizeof path);
    json_t *root = deftsim_sweep_manifest_json(s, status, finished, 0, 1, 0);
    if (!root) return deftsim_error_set(DEFTSIM_E_NOMEM, "%s: cannot build the shard's file", path);
    json_object_set_new(root, "format", json_string(SHARD_FORMAT));
    json_object_del(root, "variants"); /* in shards/plan.json */
    json_object_del(root, "rows_csv");
    json_object_set_new(root, "shard", json_pack("{s:i, s:i}", "index", (int)s->opt.shard_index,
                                                 "count", (int)s->opt.shard_count));
    json_object_set_new(root, "plan_sha256", json_string(s->plan_sha256));
    return deftsim_manifest_write(path, root);
}

deftsim_status deftsim_sweep_shard_begin(deftsim_sweep *s)
{
    char path[4200], now[64];
    if (!s->started) {
        deftsim_utc_now(now, sizeof now);
        if (!(s->started = strdup(now))) return deftsim_error_nomem("sweep");
    }
    deftsim_status st;
    deftsim_sweep_path(s, "manifest.json", path, sizeof path);
    if (!deftsim_sweep_file_exists(path)) {
        json_t *m = deftsim_sweep_manifest_json(s, "running", NULL, 0, 0, 0);
        if (!m) return deftsim_error_nomem("sweep");
        json_object_set_new(m, "shards", json_pack("{s:i, s:s}", "count", (int)s->opt.shard_count,
                                                   "plan", SHARDS_DIR "/plan.json"));
        if ((st = write_json(path, m, "new", 1))) return st;
    }
    deftsim_sweep_path(s, SHARDS_DIR "/plan.json", path, sizeof path);
    if (!deftsim_sweep_file_exists(path)) {
        json_t *p = deftsim_sweep_manifest_json(s, "planned", NULL, 0, 0, 1);
        if (!p) return deftsim_error_nomem("sweep");
        json_object_set_new(p, "format", json_string(PLAN_FORMAT));
        json_object_set_new(p, "shards", json_pack("{s:i}", "count", (int)s->opt.shard_count));
        json_object_set_new(p, "plan_sha256", json_string(s->plan_sha256));
        if ((st = write_json(path, p, "new", 1))) return st;
    }
    return DEFTSIM_OK;
}

/* ---- reading shards/ -------------------------------------------------------------------------- */

static point *find_point(deftsim_sweep *s, const char *id)
{
    for (size_t k = 0; id && k < s->npoints; k++)
        if (!strcmp(s->points[k].id, id)) return &s->points[k];
    return NULL;
}

/* A shard's record counts when it says done or failed: a pending one does not undo the
 * manifest's (the shard copies those into its file when it begins). */
static int record_counts(json_t *e)
{
    const char *st = json_string_value(json_object_get(e, "status"));
    return st && (!strcmp(st, "done") || !strcmp(st, "failed"));
}

static deftsim_status check_plan(deftsim_sweep *s, const char *dir)
{
    char path[4400];
    snprintf(path, sizeof path, "%s/plan.json", dir);
    if (!deftsim_sweep_file_exists(path)) return DEFTSIM_OK;
    deftsim_status st;
    json_t *p = load_json(path, &st);
    if (!p) return st;
    const char *fmt = json_string_value(json_object_get(p, "format"));
    unsigned n = (unsigned)json_integer_value(json_object_get(json_object_get(p, "shards"), "count"));
    const char *sha = json_string_value(json_object_get(p, "plan_sha256"));
    const char *out = s->base->scenario.output;
    if (!fmt || strcmp(fmt, PLAN_FORMAT))
        st = deftsim_error_set(DEFTSIM_E_INPUT, "%s: not a sweep's plan (format %s)", path,
                               fmt ? fmt : "missing");
    else if (!json_equal(json_object_get(p, "identity"), s->identity))
        st = deftsim_error_set(DEFTSIM_E_INPUT,
                               "%s: the folder's shards belong to another sweep (its identity "
                               "differs from this scenario's): sweep into another folder "
                               "(--output DIR)",
                               path);
    else if (n != s->opt.shard_count)
        st = deftsim_error_set(DEFTSIM_E_INPUT,
                               "%s: the folder is swept in %u shards, not %u: run --shard I/%u, "
                               "or merge them (deftsim sweep --merge %s) and sweep once without "
                               "--shard before splitting it another way",
                               path, n, s->opt.shard_count, n, out);
    else if (!sha || strcmp(sha, s->plan_sha256))
        st = deftsim_error_set(DEFTSIM_E_INPUT,
                               "%s: the folder's shards run another plan (%zu points there, %zu "
                               "here: other methods, densities, worker counts or axes); shard it "
                               "with the same lists, or merge the shards (deftsim sweep --merge "
                               "%s) and sweep once without --shard before changing them",
                               path, json_array_size(json_object_get(p, "points")), s->npoints, out);
    /* The deal the folder's plan records (an older one's is the plan order mod N): the
     * points stay with the shards they were dealt to. */
    size_t i;
    json_t *e;
    if (!st)
        json_array_foreach(json_object_get(p, "points"), i, e) {
            if (i >= s->npoints) break;
            s->points[i].shard = deftsim_sweep_entry_shard(e, i, n);
            s->points[i].in_shard = s->points[i].shard == s->opt.shard_index;
        }
    json_decref(p);
    return st;
}

/* One shard file, checked against this sweep, its records taken (a shard: only its own). */
static deftsim_status load_shard_file(deftsim_sweep *s, const char *path, unsigned index,
                                      unsigned count)
{
    deftsim_status st;
    json_t *j = load_json(path, &st);
    if (!j) return st;
    const char *fmt = json_string_value(json_object_get(j, "format"));
    const char *sha = json_string_value(json_object_get(j, "plan_sha256"));
    unsigned sc = s->opt.shard_count;
    if (!fmt || strcmp(fmt, SHARD_FORMAT))
        st = deftsim_error_set(DEFTSIM_E_INPUT, "%s: not a sweep's shard (format %s)", path,
                               fmt ? fmt : "missing");
    else if (!json_equal(json_object_get(j, "identity"), s->identity))
        st = deftsim_error_set(DEFTSIM_E_INPUT,
                               "%s: a shard of another sweep (its identity differs from this "
                               "scenario's): sweep into another folder (--output DIR)",
                               path);
    else if (sc && count != sc)
        st = deftsim_error_set(DEFTSIM_E_INPUT,
                               "%s: the folder is swept in %u shards, not %u: run --shard I/%u, "
                               "or merge them and sweep once without --shard before splitting "
                               "it another way",
                               path, count, sc, count);
    else if (sc && (!sha || strcmp(sha, s->plan_sha256)))
        st = deftsim_error_set(DEFTSIM_E_INPUT,
                               "%s: a shard of another plan (other methods, densities, worker "
                               "counts or axes); shard the folder with the same lists",
                               path);
    if (st || (sc && index != s->opt.shard_index)) {
        json_decref(j);
        return st;
    }
    if (!sc) {
        s->shards_found = 1;
        const char *status = json_string_value(json_object_get(j, "status"));
        if (status && !strcmp(status, "running") && !s->shard_running) {
            char what[128];
            snprintf(what, sizeof what, "shard %u/%u (%s/shard-%u-of-%u.json)", index, count,
                     SHARDS_DIR, index, count);
            if (!(s->shard_running = strdup(what))) st = deftsim_error_nomem("sweep");
        }
    }
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(j, "points"), i, e) {
        if (!record_counts(e)) continue;
        point *p = find_point(s, json_string_value(json_object_get(e, "id")));
        if (p && p->in_shard) deftsim_sweep_point_from_json(s, p, e);
        else if (!p && !sc) {
            /* Outside this plan: kept as the manifest's extra points are. */
            const char *file = json_string_value(json_object_get(e, "file"));
            const char *id = json_string_value(json_object_get(e, "id"));
            char fpath[4200];
            deftsim_sweep_path(s, file ? file : "", fpath, sizeof fpath);
            size_t k;
            json_t *x;
            int dup = 0;
            json_array_foreach(s->extra_points, k, x) {
                const char *xid = json_string_value(json_object_get(x, "id"));
                if (id && xid && !strcmp(id, xid)) {
                    json_array_set(s->extra_points, k, e);
                    dup = 1;
                }
            }
            if (!dup && file && !strcmp(json_string_value(json_object_get(e, "status")), "done") &&
                deftsim_sweep_file_exists(fpath))
                json_array_append(s->extra_points, e);
        }
    }
    json_decref(j);
    return st;
}

deftsim_status deftsim_sweep_shards_load(deftsim_sweep *s)
{
    char dir[4200];
    deftsim_sweep_path(s, SHARDS_DIR, dir, sizeof dir);
    s->shards_found = 0;
    free(s->shard_running);
    s->shard_running = NULL;
    deftsim_status st = DEFTSIM_OK;
    if (s->opt.shard_count && (st = check_plan(s, dir))) return st;
    DIR *d = opendir(dir);
    if (!d) return DEFTSIM_OK;
    struct dirent *e;
    while (!st && (e = readdir(d))) {
        unsigned index, count;
        char path[4600];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (!strcmp(e->d_name, "plan.json") && !s->opt.shard_count) s->shards_found = 1;
        if (!shard_file_name(e->d_name, &index, &count)) continue;
        st = load_shard_file(s, path, index, count);
    }
    closedir(d);
    return st;
}

void deftsim_sweep_shards_remove(const deftsim_sweep *s)
{
    char dir[4200];
    deftsim_sweep_path(s, SHARDS_DIR, dir, sizeof dir);
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        unsigned index, count;
        if (!shard_file_name(e->d_name, &index, &count) && strcmp(e->d_name, "plan.json") &&
            strncmp(e->d_name, ".shard-", 7))
            continue;
        char path[4600];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    closedir(d);
    rmdir(dir); /* when nothing else is left in it */
}

/* ---- joining the shards (deftsim sweep --merge) ----------------------------------------------- */

/* The folder's checks for a merge: manifest.json, when there is one, must be this sweep's. */
static json_t *sweep_identity_of(json_t *manifest)
{
    json_t *id = json_object_get(manifest, "identity");
    return id ? json_incref(id) : NULL;
}

static const deftsim_folder_writer merge_writer = {
    .format = MANIFEST_FORMAT,
    .noun = "a sweep",
    .verb = "merge",
    .option = "the folder the shards swept",
    .another = "the points of another sweep",
    .why = "the shards' points cannot be mixed with them",
    .identity_of = sweep_identity_of,
    .files = (const char *const[]){"rows.csv"},
    .nfiles = 1,
};

typedef struct {
    const char *dir;
    unsigned n;
    json_t *plan;            /* shards/plan.json */
    json_t **shard;          /* n shard files (NULL: missing) */
    json_t *base;            /* manifest.json (NULL: none) */
    json_t *records;         /* id -> record: the manifest's, then the shards' */
} merge_state;

static void merge_free(merge_state *m)
{
    for (unsigned i = 0; m->shard && i < m->n; i++) json_decref(m->shard[i]);
    free(m->shard);
    json_decref(m->plan);
    json_decref(m->base);
    json_decref(m->records);
}

static const char *jstr(json_t *o, const char *key)
{
    const char *v = json_string_value(json_object_get(o, key));
    return v ? v : "";
}

static int record_done(const merge_state *m, json_t *rec)
{
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", m->dir, jstr(rec, "file"));
    return rec && !strcmp(jstr(rec, "status"), "done") && deftsim_sweep_file_exists(path);
}

/* Reads plan.json, every shard file and the manifest; refuses what does not belong. */
static deftsim_status merge_read(merge_state *m)
{
    char path[4400];
    deftsim_status st;
    snprintf(path, sizeof path, "%s/%s/plan.json", m->dir, SHARDS_DIR);
    if (!deftsim_sweep_file_exists(path))
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "%s: no %s/plan.json: no shard of a sweep has run in this folder "
                                 "(deftsim sweep SCENARIO --shard I/N -o %s)",
                                 m->dir, SHARDS_DIR, m->dir);
    if (!(m->plan = load_json(path, &st))) return st;
    if (strcmp(jstr(m->plan, "format"), PLAN_FORMAT))
        return deftsim_error_set(DEFTSIM_E_INPUT, "%s: not a sweep's plan (format %s)", path,
                                 jstr(m->plan, "format"));
    json_t *identity = json_object_get(m->plan, "identity");
    json_int_t n = json_integer_value(json_object_get(json_object_get(m->plan, "shards"), "count"));
    if (n < 1 || n > 1000000) return deftsim_error_set(DEFTSIM_E_INPUT, "%s: no shard count", path);
    m->n = (unsigned)n;
    if ((st = deftsim_folder_check(m->dir, &merge_writer, identity, &m->base))) return st;
    if (!(m->shard = calloc(m->n, sizeof *m->shard)) || !(m->records = json_object())) return deftsim_error_nomem("sweep");
    snprintf(path, sizeof path, "%s/%s", m->dir, SHARDS_DIR);
    DIR *d = opendir(path);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        unsigned index, count;
        if (!shard_file_name(e->d_name, &index, &count) || count == m->n) continue;
        st = deftsim_error_set(DEFTSIM_E_INPUT,
                               "%s/%s/%s: a shard of a %u-way split, but the sweep's plan "
                               "(%s/plan.json) splits it %u ways; remove it, or rerun that "
                               "shard's points as --shard I/%u",
                               m->dir, SHARDS_DIR, e->d_name, count, SHARDS_DIR, m->n, m->n);
        closedir(d);
        return st;
    }
    if (d) closedir(d);
    const char *sha = jstr(m->plan, "plan_sha256");
    size_t i;
    json_t *r;
    json_array_foreach(json_object_get(m->base, "points"), i, r)
        json_object_set(m->records, jstr(r, "id"), r);
    for (unsigned k = 0; k < m->n; k++) {
        snprintf(path, sizeof path, "%s/%s/shard-%u-of-%u.json", m->dir, SHARDS_DIR, k, m->n);
        if (!deftsim_sweep_file_exists(path)) continue;
        if (!(m->shard[k] = load_json(path, &st))) return st;
        json_t *sh = json_object_get(m->shard[k], "shard");
        if (strcmp(jstr(m->shard[k], "format"), SHARD_FORMAT) ||
            json_integer_value(json_object_get(sh, "index")) != (json_int_t)k ||
            json_integer_value(json_object_get(sh, "count")) != (json_int_t)m->n)
            return deftsim_error_set(DEFTSIM_E_INPUT, "%s: not shard %u/%u of a sweep", path, k, m->n);
        if (!json_equal(json_object_get(m->shard[k], "identity"), identity) ||
            strcmp(jstr(m->shard[k], "plan_sha256"), sha))
            return deftsim_error_set(DEFTSIM_E_INPUT,
                                     "%s: shard %u/%u of another sweep (its %s differs from "
                                     "%s/plan.json's)",
                                     path, k, m->n,
                                     json_equal(json_object_get(m->shard[k], "identity"), identity)
                                         ? "plan (methods, densities, worker counts, axes)"
                                         : "identity (scenario)",
                                     SHARDS_DIR);
        json_array_foreach(json_object_get(m->shard[k], "points"), i, r)
            if (record_counts(r)) json_object_set(m->records, jstr(r, "id"), r);
    }
    return DEFTSIM_OK;
}

/* "topk d=0.01 P=4" and the variant's label, of a plan entry. */
static void entry_words(json_t *e, char *buf, size_t cap)
{
    char d[40];
    deftsim_csv_double(d, sizeof d, json_number_value(json_object_get(e, "density")));
    const char *v = jstr(e, "variant");
    snprintf(buf, cap, "%s d=%s P=%lld%s%s", jstr(e, "method"), d,
             (long long)json_integer_value(json_object_get(e, "P")), v[0] ? " " : "", v);
}

/* Which shards are missing and which points are not finished, or NULL when none. */
static char *merge_missing(const merge_state *m, size_t *count)
{
    char *msg = NULL;
    size_t ml = 0, listed = 0;
    FILE *f = open_memstream(&msg, &ml);
    if (!f) return NULL;
    *count = 0;
    json_t *pts = json_object_get(m->plan, "points");
    for (unsigned k = 0; k < m->n; k++)
        if (!m->shard[k]) {
            size_t mine = 0;
            for (size_t i = 0; i < json_array_size(pts); i++)
                if (deftsim_sweep_entry_shard(json_array_get(pts, i), i, m->n) == k)
                    mine += !record_done(m, json_object_get(m->records,
                                                            jstr(json_array_get(pts, i), "id")));
            if (!mine) continue;
            fprintf(f, "\n  shard %u/%u: not started (no %s/shard-%u-of-%u.json): %zu point%s",
                    k, m->n, SHARDS_DIR, k, m->n, mine, mine == 1 ? "" : "s");
            *count += mine;
        }
    size_t i;
    json_t *e;
    json_array_foreach(pts, i, e) {
        unsigned k = deftsim_sweep_entry_shard(e, i, m->n);
        json_t *rec = json_object_get(m->records, jstr(e, "id"));
        if (!m->shard[k] || record_done(m, rec)) continue;
        (*count)++;
        if (listed++ >= 20) continue;
        char w[600];
        entry_words(e, w, sizeof w);
        const char *state = jstr(rec, "status");
        if (!strcmp(state, "failed"))
            fprintf(f, "\n  shard %u/%u: %s: failed: %s", k, m->n, w, jstr(rec, "error"));
        else if (!strcmp(state, "done"))
            fprintf(f, "\n  shard %u/%u: %s: its file %s is missing", k, m->n, w, jstr(rec, "file"));
        else fprintf(f, "\n  shard %u/%u: %s: not run", k, m->n, w);
    }
    if (listed > 20) fprintf(f, "\n  and %zu more", listed - 20);
    fclose(f);
    if (!*count) {
        free(msg);
        return NULL;
    }
    return msg;
}

/* One point file's rows after its axis values: as the sweep's rows.csv. */
static deftsim_status rows_of(const merge_state *m, FILE *out, json_t *axes, json_t *rec)
{
    char *prefix = NULL;
    size_t pl = 0;
    FILE *p = open_memstream(&prefix, &pl);
    if (!p) return deftsim_error_nomem("sweep");
    size_t a;
    json_t *ax;
    json_array_foreach(axes, a, ax) {
        deftsim_csv_field(p, jstr(json_object_get(rec, "axes"), jstr(ax, "key")));
        fputc(',', p);
    }
    fclose(p);
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", m->dir, jstr(rec, "file"));
    deftsim_status st = deftsim_rows_join(out, path, prefix);
    free(prefix);
    return st;
}

static deftsim_status merge_rows(const merge_state *m, json_t *points)
{
    char path[4400];
    snprintf(path, sizeof path, "%s/rows.csv", m->dir);
    xfile x;
    deftsim_status st = xfile_open(&x, path, "join");
    if (st) return st;
    json_t *axes = json_object_get(m->plan, "axes");
    size_t i;
    json_t *e;
    json_array_foreach(axes, i, e) {
        deftsim_csv_field(x.f, jstr(e, "key"));
        fputc(',', x.f);
    }
    json_array_foreach(json_object_get(json_object_get(m->plan, "identity"), "columns"), i, e)
        fprintf(x.f, "%s%s", i ? "," : "", json_string_value(e));
    fputc('\n', x.f);
    json_array_foreach(points, i, e)
        if (!st) st = rows_of(m, x.f, axes, e);
    if (st) {
        xfile_abort(&x);
        return st;
    }
    return xfile_commit(&x, 0, NULL);
}

/* The complete manifest: the plan's header, every record in plan order, then the finished
 * points outside the plan; the shards' times and machines. */
static json_t *merge_manifest(const merge_state *m, json_t *points)
{
    json_t *root = json_deep_copy(m->plan);
    if (!root) return NULL;
    const char *started = NULL, *finished = NULL;
    json_t *list = json_array();
    for (unsigned k = 0; k < m->n; k++) {
        json_t *sh = m->shard[k];
        if (!sh) continue; /* its points were all done before it ran: the manifest's */
        const char *a = json_string_value(json_object_get(sh, "started"));
        const char *b = json_string_value(json_object_get(sh, "finished"));
        if (a && a[0] && (!started || strcmp(a, started) < 0)) started = a;
        if (b && (!finished || strcmp(b, finished) > 0)) finished = b;
        char rel[128];
        shard_rel(k, m->n, rel, sizeof rel);
        json_array_append_new(list, json_pack("{s:i, s:s, s:s, s:O?, s:O?, s:O?}", "index", (int)k,
                                              "file", rel, "hostname",
                                              jstr(json_object_get(sh, "machine"), "hostname"),
                                              "status", json_object_get(sh, "status"), "started",
                                              json_object_get(sh, "started"), "finished",
                                              json_object_get(sh, "finished")));
    }
    json_t *first = NULL;
    for (unsigned k = 0; k < m->n && !first; k++) first = m->shard[k];
    json_object_set_new(root, "format", json_string(MANIFEST_FORMAT));
    json_object_set_new(root, "status", json_string("complete"));
    json_object_set_new(root, "started", json_string(started ? started : jstr(m->base, "started")));
    json_object_set_new(root, "finished", json_string(finished ? finished : jstr(m->base, "finished")));
    json_t *mach = first ? json_object_get(first, "machine") : json_object_get(m->base, "machine");
    if (mach) json_object_set(root, "machine", mach);
    json_object_set(root, "points", points);
    json_object_set_new(root, "rows_csv", json_string("rows.csv"));
    json_object_del(root, "shards");
    json_object_set_new(root, "shards", json_pack("{s:i, s:s, s:s, s:o}", "count", (int)m->n,
                                                  "plan", SHARDS_DIR "/plan.json", "plan_sha256",
                                                  jstr(m->plan, "plan_sha256"), "shards", list));
    json_object_del(root, "plan_sha256");
    return root;
}

deftsim_status deftsim_sweep_merge(const char *dir, int only_if_complete,
                                   deftsim_sweep_merge_summary *out)
{
    memset(out, 0, sizeof *out);
    merge_state m = {.dir = dir};
    deftsim_status st = merge_read(&m);
    size_t missing = 0;
    char *why = st ? NULL : merge_missing(&m, &missing);
    json_t *points = NULL;
    if (st) goto done;
    json_t *plan_points = json_object_get(m.plan, "points");
    if (missing) {
        if (!only_if_complete)
            st = deftsim_error_set(DEFTSIM_E_INPUT,
                                   "%s: cannot merge the shards: %zu of the plan's %zu points %s "
                                   "not finished:%s\nresume those shards (deftsim sweep SCENARIO "
                                   "--shard I/%u -o %s), then merge again",
                                   dir, missing, json_array_size(plan_points),
                                   missing == 1 ? "is" : "are", why ? why : "", m.n, dir);
        goto done;
    }
    if (!(points = json_array())) {
        st = deftsim_error_nomem("sweep");
        goto done;
    }
    size_t i;
    json_t *e;
    json_t *in_plan = json_object();
    json_array_foreach(plan_points, i, e) {
        json_t *rec = json_object_get(m.records, jstr(e, "id"));
        json_array_append(points, rec);
        json_object_set_new(in_plan, jstr(e, "id"), json_true());
        out->rows += (uint64_t)json_integer_value(json_object_get(rec, "rows"));
    }
    out->points = json_array_size(points);
    json_array_foreach(json_object_get(m.base, "points"), i, e) {
        if (json_object_get(in_plan, jstr(e, "id")) || !record_done(&m, e)) continue;
        json_array_append(points, e);
        out->extra++;
        out->rows += (uint64_t)json_integer_value(json_object_get(e, "rows"));
    }
    json_decref(in_plan);
    char path[4400];
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    if ((st = merge_rows(&m, points))) goto done;
    json_t *root = merge_manifest(&m, points);
    if (!root) {
        st = deftsim_error_nomem("sweep");
        goto done;
    }
    if ((st = write_json(path, root, "join", 0))) goto done;
    out->shards = m.n;
    out->joined = 1;
done:
    free(why);
    json_decref(points);
    merge_free(&m);
    return st;
}
