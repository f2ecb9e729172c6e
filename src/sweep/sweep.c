/* sweep.c - `deftsim sweep`: the scenario's lists and axes, one point at a time, resumable
 * (deftsim_sweep.h, docs/OUTPUT.md). The plan is built in sweep_plan.c; a results folder is
 * read back in results.c; progress goes to the caller's callback. */
#include "deftsim_build_info.h"
#include "deftsim_sweep.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "deftsim_analysis.h"
#include "deftsim_csv.h"
#include "deftsim_engine.h"
#include "deftsim_folder.h"
#include "deftsim_manifest.h"
#include "deftsim_timing.h"
#include "deftsim_util.h"
#include "sweep_internal.h"


size_t deftsim_sweep_point_count(const deftsim_sweep *s) { return s->npoints; }
size_t deftsim_sweep_variant_count(const deftsim_sweep *s) { return s->nvariants; }
const char *deftsim_sweep_output(const deftsim_sweep *s) { return s->base->scenario.output; }
const deftsim_config *deftsim_sweep_config(const deftsim_sweep *s) { return s->base; }
const deftsim_config *deftsim_sweep_variant_config(const deftsim_sweep *s, size_t v)
{
    return v < s->nvariants ? s->variants[v].cfg : NULL;
}

void deftsim_sweep_shard(const deftsim_sweep *s, unsigned *index, unsigned *count)
{
    *index = s->opt.shard_index;
    *count = s->opt.shard_count;
}

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
        json_decref(p->stages);
    }
    free(s->points);
    json_decref(s->identity);
    json_decref(s->extra_points);
    free(s->started);
    free(s->plan_sha256);
    free(s->shard_running);
    if (s->lock_fd >= 0) {
        lock_forget(s->lock_fd);
        close(s->lock_fd);
    }
    if (s->shard_lock_fd >= 0) {
        lock_forget(s->shard_lock_fd);
        close(s->shard_lock_fd);
    }
    deftsim_config_free(s->base);
    free(s);
}

deftsim_status deftsim_sweep_new(const deftsim_config *cfg, const deftsim_sweep_options *o,
                                 deftsim_sweep **out)
{
    *out = NULL;
    deftsim_sweep *s = calloc(1, sizeof *s);
    if (!s) return deftsim_error_nomem("sweep");
    s->lock_fd = s->shard_lock_fd = -1;
    if (o) s->opt = *o;
    deftsim_status st = deftsim_config_clone(cfg, &s->base);
    if (!st) st = deftsim_sweep_plan(s);
    if (!st && !(s->extra_points = json_array())) st = deftsim_error_nomem("sweep");
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
    deftsim_sweep_path(s, rel, buf, cap);
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
    char mpath[4200];
    path_in(s, "manifest.json", mpath, sizeof mpath);
    /* A shard starting with others may find the first one's points after finding no manifest,
     * which that one created in between: the check is then repeated. */
    if (st && s->opt.shard_count && deftsim_sweep_file_exists(mpath))
        st = deftsim_folder_check(out, &sweep_writer, s->identity, &m);
    if (st) return st;
    if (!m) return deftsim_sweep_shards_load(s);
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
        int done = !strcmp(state, "done") && deftsim_sweep_file_exists(fpath);
        if (!p) {
            /* A point of an earlier, wider sweep of the same scenario: still a result. */
            if (done) json_array_append(s->extra_points, e);
            continue;
        }
        deftsim_sweep_point_from_json(s, p, e);
    }
    json_decref(m);
    return deftsim_sweep_shards_load(s);
}

/* ---- manifest --------------------------------------------------------------------------------- */

static deftsim_status write_manifest(const deftsim_sweep *s, const char *status, const char *finished,
                                     int rows_written)
{
    char path[4200];
    path_in(s, "manifest.json", path, sizeof path);
    json_t *root = deftsim_sweep_manifest_json(s, status, finished, rows_written, 0, 0);
    if (!root) return deftsim_error_set(DEFTSIM_E_NOMEM, "%s: cannot build the manifest", path);
    return deftsim_manifest_write(path, root);
}

/* The state after a point or at the end: a shard's own file, else the manifest. */
static deftsim_status write_state(const deftsim_sweep *s, const char *status, const char *finished,
                                  int rows_written)
{
    if (s->opt.shard_count) return deftsim_sweep_shard_write(s, status, finished);
    return write_manifest(s, status, finished, rows_written);
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
                st = deftsim_error_nomem("sweep");
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
        st = deftsim_rows_join(out, src, prefix);
    }
    if (st) {
        deftsim_afile_abort(af);
        return st;
    }
    return deftsim_afile_commit(af);
}
/* ---- memory and listing ------------------------------------------------------------------------ */

deftsim_status deftsim_sweep_check_memory(deftsim_sweep *s, FILE *plan)
{
    deftsim_run_options o = deftsim_sweep_engine_options(s);
    for (size_t v = 0; v < s->nvariants; v++) {
        /* A shard checks the variants it runs points of. */
        int any = 0;
        for (size_t i = 0; i < s->npoints && !any; i++)
            any = s->points[i].variant == v && s->points[i].in_shard;
        if (!any) continue;
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

/* A file system without flock (Lustre mounted without -o flock, NFS without its lock
 * manager) answers one of these: a shard then runs unlocked, as its correctness does not rest
 * on the locks (docs/CLUSTER.md). */
static int lock_unsupported(int err)
{
    return err == ENOLCK || err == ENOSYS || err == EOPNOTSUPP || err == EINVAL;
}

/* flock(rel, how) on a lock file of the folder into *out (-1 when the file system has no
 * locks and unsupported_ok). busy: the message when another process holds it. */
static deftsim_status lock_file(deftsim_sweep *s, const char *rel, int how, int unsupported_ok,
                                const char *busy, int *out)
{
    char path[4200];
    path_in(s, rel, path, sizeof path);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return deftsim_error_set(DEFTSIM_E_IO, "%s: cannot open: %s", path, strerror(errno));
    if (flock(fd, how | LOCK_NB) != 0) {
        int err = errno;
        close(fd);
        if (err == EWOULDBLOCK) return deftsim_error_set(DEFTSIM_E_INPUT, "%s", busy);
        if (unsupported_ok && lock_unsupported(err)) return DEFTSIM_OK;
        return deftsim_error_set(DEFTSIM_E_IO, "%s: cannot lock: %s", path, strerror(err));
    }
    if (lock_remember(fd) != 0) {
        close(fd);
        return deftsim_error_set(DEFTSIM_E_RUNTIME,
                                 "%s: more than %d sweeps at once in one process",
                                 s->base->scenario.output, MAX_LOCKS);
    }
    *out = fd;
    return DEFTSIM_OK;
}

/* A sweep holds .sweep.lock exclusively; a shard holds it shared (the shards of a folder run
 * together, a sweep without shards runs alone) and its own shards/.shard-<I>-of-<N>.lock
 * exclusively (one process per shard). */
static deftsim_status take_lock(deftsim_sweep *s)
{
    char busy[4400];
    snprintf(busy, sizeof busy,
             "%s: another deftsim sweep is writing this folder; wait for it or sweep into "
             "another folder (--output DIR)",
             s->base->scenario.output);
    if (!s->opt.shard_count) return lock_file(s, ".sweep.lock", LOCK_EX, 0, busy, &s->lock_fd);
    deftsim_status st = lock_file(s, ".sweep.lock", LOCK_SH, 1, busy, &s->lock_fd);
    if (st) return st;
    char rel[128];
    snprintf(rel, sizeof rel, "%s/.shard-%u-of-%u.lock", SHARDS_DIR, s->opt.shard_index,
             s->opt.shard_count);
    snprintf(busy, sizeof busy, "%s: shard %u/%u of this sweep is already running (%s is locked)",
             s->base->scenario.output, s->opt.shard_index, s->opt.shard_count, rel);
    return lock_file(s, rel, LOCK_EX, 1, busy, &s->shard_lock_fd);
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
/* A shard removes only what it wrote itself: leftovers of its own points ("<own file>" then
 * ".tmp.", ".csv.rows." or ".failed.tmp."); the others' may be in use on another machine. */
static int own_leftover(const deftsim_sweep *s, const char *dir, const char *name)
{
    if (!s || !s->opt.shard_count) return 1;
    char path[4600];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    for (size_t i = 0; i < s->npoints; i++) {
        const point *p = &s->points[i];
        if (!p->in_shard) continue;
        char base[4400];
        path_in(s, p->file, base, sizeof base);
        size_t bl = strlen(base) - 4; /* without ".csv" */
        if (!strncmp(path, base, bl) && path[bl] == '.') return 1;
    }
    return 0;
}

static void remove_stale_of(const deftsim_sweep *s, const char *dir, const char *const *exts,
                            size_t nexts)
{
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char path[4600];
    while ((e = readdir(d))) {
        int sweep_tmp = !s || !s->opt.shard_count ? deftsim_sweep_shard_tmp_name(e->d_name) : 0;
        if (!sweep_tmp && !stale_name(e->d_name, exts, nexts) && !strstr(e->d_name, ".csv.rows."))
            continue;
        if (!own_leftover(s, dir, e->d_name)) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    closedir(d);
}

static void remove_stale(const char *dir, const char *const *exts, size_t nexts)
{
    remove_stale_of(NULL, dir, exts, nexts);
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
    path_in(s, SHARDS_DIR, path, sizeof path);
    if (s->opt.shard_count && (st = deftsim_mkdir_p(path)))
        return deftsim_error_wrap(st, "[scenario] output");
    return DEFTSIM_OK;
}

static void clean_stale(deftsim_sweep *s)
{
    static const char *const top[] = {"manifest.json", "rows.csv"};
    static const char *const points[] = {".csv", ".failed"};
    const char *platforms[] = {".xml", ""};
    char path[4200];
    if (s->opt.shard_count) {
        /* A shard: its own points' leftovers and its own file's; nothing shared. */
        static const char *const shard_files[] = {".json"};
        char rel[1200];
        path_in(s, SHARDS_DIR, path, sizeof path);
        DIR *d = opendir(path);
        struct dirent *e;
        char own[64], full[4600];
        snprintf(own, sizeof own, "shard-%u-of-%u.json.tmp.", s->opt.shard_index, s->opt.shard_count);
        while (d && (e = readdir(d)))
            if (!strncmp(e->d_name, own, strlen(own)) && stale_name(e->d_name, shard_files, 1)) {
                snprintf(full, sizeof full, "%s/%s", path, e->d_name);
                unlink(full);
            }
        if (d) closedir(d);
        path_in(s, "points", path, sizeof path);
        remove_stale_of(s, path, points, 2);
        for (size_t v = 0; v < s->nvariants; v++) {
            if (!s->variants[v].label[0]) continue;
            snprintf(rel, sizeof rel, "points/%s", s->variants[v].label);
            path_in(s, rel, path, sizeof path);
            remove_stale_of(s, path, points, 2);
        }
        return;
    }
    path_in(s, "", path, sizeof path);
    remove_stale(path, top, 2);
    path_in(s, SHARDS_DIR, path, sizeof path);
    remove_stale(path, (const char *const[]){".json"}, 1);
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
        if (p->state != DEFTSIM_POINT_DONE || !p->in_shard) continue;
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

static void tell(const deftsim_sweep *s, deftsim_sweep_event ev)
{
    if (!s->opt.progress.fn) return;
    ev.sweep = s;
    s->opt.progress.fn(s->opt.progress.user, &ev);
}

/* Before any point runs: the folder checked, created and locked, its state loaded, the
 * leftovers of a killed sweep removed, the manifest says "running". */
static deftsim_status sweep_begin(deftsim_sweep *s, deftsim_sweep_summary *sum)
{
    deftsim_status st;
    /* A folder of other results is refused before anything is created in it; the check is
     * repeated under the lock, which another sweep may have held meanwhile. */
    if ((st = deftsim_sweep_load_state(s))) return st;
    if ((st = prepare_folders(s))) return st;
    if ((st = take_lock(s))) return st;
    /* A shard: manifest.json and shards/plan.json exist before its state is loaded again. */
    if (s->opt.shard_count && (st = deftsim_sweep_shard_begin(s))) return st;
    if ((st = deftsim_sweep_load_state(s))) return st;
    if (s->shard_running)
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "%s: %s is running, or was stopped before it ended: resume "
                                 "it (deftsim sweep --shard ...) and let every shard finish "
                                 "before sweeping this folder without --shard",
                                 s->base->scenario.output, s->shard_running);
    clean_stale(s);
    if (s->opt.rerun_noisy && (st = deftsim_sweep_mark_noisy(s, &sum->noisy))) return st;
    char now[64];
    deftsim_utc_now(now, sizeof now);
    free(s->started);
    if (!(s->started = strdup(now))) return deftsim_error_nomem("sweep");
    for (size_t i = 0; i < s->npoints; i++) {
        if (!s->points[i].in_shard) continue;
        sum->planned++;
        if (s->points[i].state == DEFTSIM_POINT_DONE) sum->skipped++;
    }
    st = write_state(s, "running", NULL, 0);
    /* The shards' records are in the manifest now: shards/ goes. */
    if (!st && s->shards_found) deftsim_sweep_shards_remove(s);
    return st;
}

/* A point that finished: its numbers, and the failure of an earlier sweep it supersedes. */
static void point_finished(deftsim_sweep *s, point *p, const deftsim_point_summary *ps,
                           deftsim_sweep_summary *sum)
{
    char now[64];
    p->state = DEFTSIM_POINT_DONE;
    p->ran_now = 1;
    p->rows = ps->rows;
    p->seconds = ps->seconds;
    p->prepare_seconds = ps->prepare_seconds;
    p->step_seconds = ps->step_seconds;
    deftsim_utc_now(now, sizeof now);
    free(p->finished);
    free(p->git_commit);
    p->finished = strdup(now);
    p->git_commit = strdup(DEFTSIM_GIT_COMMIT);
    json_decref(p->machine_state);
    p->machine_state = deftsim_noise_json(&ps->machine_start, &ps->machine_end);
    json_decref(p->stages);
    p->stages = deftsim_stages_json(&ps->stages);
    free(p->error);
    p->error = NULL;
    char rel[1500], fpath[4200];
    snprintf(rel, sizeof rel, "points/%s.failed", p->id);
    path_in(s, rel, fpath, sizeof fpath);
    unlink(fpath); /* a failure of an earlier sweep, now superseded */
    sum->ran++;
    sum->rows += ps->rows;
}

/* Every point not done, one engine per variant; the manifest is rewritten after each. Fails
 * only when the manifest cannot be written. */
static deftsim_status run_points(deftsim_sweep *s, deftsim_sweep_summary *sum)
{
    deftsim_run_options eo = deftsim_sweep_engine_options(s);
    deftsim_engine *e = NULL;
    size_t e_variant = SIZE_MAX;
    char *engine_error = NULL;
    deftsim_status engine_status = DEFTSIM_OK, st = DEFTSIM_OK;
    /* Spread mode: the other ranks run the same points, in this order. */
    uint64_t *list = NULL, nlist = 0;
    if (deftsim_sweep_spread_team(s) && (st = deftsim_sweep_spread_list(s, &list, &nlist))) return st;
    for (size_t i = 0; i < s->npoints; i++) {
        point *p = &s->points[i];
        if (p->state == DEFTSIM_POINT_DONE || !p->in_shard) continue;
        if ((sum->interrupted = s->opt.stop && *s->opt.stop)) break;
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
        tell(s, (deftsim_sweep_event){.kind = DEFTSIM_SWEEP_POINT_START, .point = i});
        char csv[4200];
        path_in(s, p->file, csv, sizeof csv);
        deftsim_point_summary ps;
        memset(&ps, 0, sizeof ps);
        if (!e)
            st = deftsim_error_set(engine_status ? engine_status : DEFTSIM_E_RUNTIME, "%s",
                                   engine_error ? engine_error : "engine");
        else st = deftsim_engine_run_point(e, p->method, p->density, p->P, csv, &ps);
        /* Spread mode: the other ranks cannot go on without this one; the sweep ends here,
         * the folder as a killed sweep leaves it (the point stays to run). */
        if (st && deftsim_sweep_spread_team(s)) break;
        /* Stopped by the caller: the point stays to run (the engine committed nothing). */
        if (st && (sum->interrupted = s->opt.stop && *s->opt.stop)) {
            st = DEFTSIM_OK;
            break;
        }
        if (st) {
            char msg[2048];
            snprintf(msg, sizeof msg, "%s", deftsim_error_message());
            mark_failed(s, p, msg);
            p->error_status = st;
            sum->failed++;
        } else {
            point_finished(s, p, &ps, sum);
        }
        tell(s, (deftsim_sweep_event){.kind = DEFTSIM_SWEEP_POINT_DONE, .point = i, .ok = !st});
        if ((st = write_state(s, "running", NULL, 0))) break;
    }
    deftsim_engine_free(e);
    free(engine_error);
    free(list);
    return st;
}

/* The failures, one per line after the count. The status follows their kind: a point that
 * failed on bad input (a NaN in a trace, ...) fails again until the input is fixed, so the
 * sweep is then an input error (exit 2); otherwise a runtime error (exit 1). */
static deftsim_status failures_error(const deftsim_sweep *s, size_t left)
{
    int bad_input = 0;
    size_t planned = 0;
    for (size_t i = 0; i < s->npoints; i++) planned += s->points[i].in_shard;
    for (size_t i = 0; i < s->npoints; i++)
        if (s->points[i].in_shard && s->points[i].state != DEFTSIM_POINT_DONE &&
            (s->points[i].error_status == DEFTSIM_E_INPUT ||
             s->points[i].error_status == DEFTSIM_E_USAGE))
            bad_input = 1;
    char *msg = NULL;
    size_t ml = 0;
    FILE *m = open_memstream(&msg, &ml);
    if (!m) return deftsim_error_nomem("sweep");
    fprintf(m, "%zu of %zu points failed (the others are written; %s):", left, planned,
            bad_input ? "fix the input, then rerun the sweep to retry" : "rerun the sweep to retry");
    for (size_t i = 0; i < s->npoints; i++) {
        const point *p = &s->points[i];
        if (p->state == DEFTSIM_POINT_DONE || !p->in_shard) continue;
        char failure[2600];
        if (p->error) {
            deftsim_sweep_failure_of(s, p, failure, sizeof failure);
            fprintf(m, "\n  %s (points/%s.failed)", failure, p->id);
        } else {
            deftsim_sweep_words(s, p, failure, sizeof failure);
            fprintf(m, "\n  %s: not run (points/%s.failed)", failure, p->id);
        }
    }
    fclose(m);
    deftsim_status st = deftsim_error_set(bad_input ? DEFTSIM_E_INPUT : DEFTSIM_E_RUNTIME, "%s", msg);
    free(msg);
    return st;
}

deftsim_status deftsim_sweep_run(deftsim_sweep *s, deftsim_sweep_summary *summary)
{
    deftsim_sweep_summary sum;
    memset(&sum, 0, sizeof sum);
    double t0 = deftsim_now();
    deftsim_status st;
    if (deftsim_sweep_spread_team(s) && deftsim_sweep_spread_team(s)->rank > 0) {
        st = deftsim_sweep_spread_follow(s, &sum);
        sum.seconds = deftsim_now() - t0;
        if (summary) *summary = sum;
        return st;
    }
    st = sweep_begin(s, &sum);
    if (st) return st;
    tell(s, (deftsim_sweep_event){.kind = DEFTSIM_SWEEP_BEGIN, .skipped = sum.skipped,
                                  .noisy = sum.noisy});
    st = run_points(s, &sum);
    tell(s, (deftsim_sweep_event){.kind = DEFTSIM_SWEEP_END});
    if (st) return st; /* the manifest could not be written: nothing more can be recorded */

    size_t left = 0;
    for (size_t i = 0; i < s->npoints; i++)
        if (s->points[i].in_shard && s->points[i].state != DEFTSIM_POINT_DONE) left++;
    sum.finished = sum.planned - left;
    if (sum.interrupted) {
        /* What finished is kept, the rest stays to run: a rerun resumes. */
        char now[64];
        deftsim_utc_now(now, sizeof now);
        sum.seconds = deftsim_now() - t0;
        if (summary) *summary = sum;
        if ((st = write_state(s, "interrupted", now, 0))) return st;
        return deftsim_error_set(DEFTSIM_E_RUNTIME, "%s: interrupted: %zu of %zu points finished",
                                 s->base->scenario.output, sum.finished, sum.planned);
    }
    int rows_written = 0;
    if (s->opt.shard_count) {
        /* A shard ends its own file; the last one to finish joins them all. */
        char now[64];
        deftsim_utc_now(now, sizeof now);
        if ((st = write_state(s, left ? "incomplete" : "complete", now, 0))) return st;
        if (!left) {
            deftsim_sweep_merge_summary ms;
            if ((st = deftsim_sweep_merge(s->base->scenario.output, 1, &ms)))
                return deftsim_error_wrap(st, "joining the shards");
            sum.joined = ms.joined;
        }
        sum.seconds = deftsim_now() - t0;
        if (summary) *summary = sum;
        if (!sum.failed && !left) return DEFTSIM_OK;
        return failures_error(s, left);
    }
    if (!left) {
        if ((st = write_rows_csv(s))) return st;
        rows_written = 1;
    }
    char now[64];
    deftsim_utc_now(now, sizeof now);
    if ((st = write_manifest(s, left ? "incomplete" : "complete", now, rows_written))) return st;
    sum.seconds = deftsim_now() - t0;
    if (summary) *summary = sum;
    if (!sum.failed && !left) return DEFTSIM_OK;
    return failures_error(s, left);
}
