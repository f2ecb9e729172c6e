/* sim.c - the network simulation's caller side (deftsim_sim.h): checks the schedules, runs
 * SimGrid in a forked child (process isolation: a SimGrid failure aborts the child, not the
 * caller) and reads its results back; checks a user's platform file the same way.
 *
 * Call order in sim/: docs/ARCHITECTURE.md, the sim/ row of its folder table. */
#include "deftsim_sim.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "deftsim_util.h"
#include "sim_internal.h"

/* How much of what a failed child said is kept for the message. */
#define ERR_TAIL 3000

static deftsim_status check_schedules(const deftsim_sim_params *p,
                                      const deftsim_schedule *const *scheds, size_t nsched)
{
    if (p->gpus_per_node < 1)
        return deftsim_error_set(DEFTSIM_E_INPUT, "gpus_per_node: 0, at least 1 GPU a node");
    if (p->library == DEFTSIM_LIB_NCCL &&
        (p->nccl_channels < 1 || p->nccl_channels > DEFTSIM_NCCL_CHANNELS_MAX))
        return deftsim_error_set(DEFTSIM_E_INPUT, "nccl_channels: %u, not in [1, %u]",
                                 p->nccl_channels, DEFTSIM_NCCL_CHANNELS_MAX);
    if (p->library == DEFTSIM_LIB_NCCL && p->nccl_buffsize < 64)
        return deftsim_error_set(DEFTSIM_E_INPUT, "nccl_buffsize: %llu bytes, fewer than 64",
                                 (unsigned long long)p->nccl_buffsize);
    for (size_t i = 0; i < nsched; i++) {
        const deftsim_schedule *s = scheds[i];
        if (!s || s->P != p->P)
            return deftsim_error_set(DEFTSIM_E_INTERNAL,
                                     "network simulation: schedule %zu has %u ranks, the "
                                     "platform %u",
                                     i, s ? s->P : 0, p->P);
        for (size_t k = 0; k < s->nsteps; k++) {
            const deftsim_step *st = &s->steps[k];
            if ((unsigned)st->kind > DEFTSIM_STEP_KIND_LAST)
                return deftsim_error_set(DEFTSIM_E_INTERNAL,
                                         "network simulation: schedule %zu step %zu: unknown "
                                         "kind %d",
                                         i, k, (int)st->kind);
            if (st->kind == DEFTSIM_STEP_BCAST && st->root >= s->P)
                return deftsim_error_set(DEFTSIM_E_INTERNAL,
                                         "network simulation: schedule %zu step %zu '%s': root %u "
                                         "of %u ranks",
                                         i, k, st->name, st->root, s->P);
            if (st->kind == DEFTSIM_STEP_COMPUTE && (st->flags & DEFTSIM_STEP_ASYNC))
                return deftsim_error_set(DEFTSIM_E_INTERNAL,
                                         "network simulation: schedule %zu step %zu '%s': a "
                                         "compute step cannot be asynchronous",
                                         i, k, st->name);
            if (st->kind == DEFTSIM_STEP_COMPUTE)
                for (uint32_t r = 0; r < s->P; r++)
                    if (!(st->seconds[r] >= 0) || !isfinite(st->seconds[r]))
                        return deftsim_error_set(DEFTSIM_E_INTERNAL,
                                                 "network simulation: schedule %zu step %zu "
                                                 "'%s': rank %u computes for %g s",
                                                 i, k, st->name, r, st->seconds[r]);
            if (st->kind == DEFTSIM_STEP_P2P)
                for (size_t j = 0; j < (size_t)s->P * st->fan; j++)
                    if (st->peer[j] != DEFTSIM_NO_PEER && st->peer[j] >= s->P)
                        return deftsim_error_set(DEFTSIM_E_INTERNAL,
                                                 "network simulation: schedule %zu step %zu "
                                                 "'%s': rank %zu sends to %u of %u ranks",
                                                 i, k, st->name, j / st->fan, st->peer[j], s->P);
            if (st->kind == DEFTSIM_STEP_SENDRECV)
                for (uint32_t r = 0; r < s->P; r++)
                    if (st->peer[r] != DEFTSIM_NO_PEER && st->peer[r] >= s->P)
                        return deftsim_error_set(DEFTSIM_E_INTERNAL,
                                                 "network simulation: schedule %zu step %zu "
                                                 "'%s': rank %u sends to %u of %u ranks",
                                                 i, k, st->name, r, st->peer[r], s->P);
        }
    }
    return DEFTSIM_OK;
}

void deftsim_sim_result_free(deftsim_sim_result *r)
{
    if (!r) return;
    free(r->step_offset);
    free(r->start);
    free(r->end);
    free(r->sent);
    free(r->recv);
    free(r->iteration_seconds);
    free(r->comm_seconds);
    memset(r, 0, sizeof *r);
}

/* Appends to a bounded tail buffer: keeps the last ERR_TAIL bytes. */
static void tail_append(char *tail, size_t *len, const char *data, size_t n)
{
    if (n >= ERR_TAIL) {
        memcpy(tail, data + n - ERR_TAIL, ERR_TAIL);
        *len = ERR_TAIL;
        return;
    }
    if (*len + n > ERR_TAIL) {
        size_t drop = *len + n - ERR_TAIL;
        memmove(tail, tail + drop, *len - drop);
        *len -= drop;
    }
    memcpy(tail + *len, data, n);
    *len += n;
}

/* What a failed SimGrid child said, for a message: the first line SimGrid logged as an error
 * (its log prefix "[time] file:line: [category/ERROR] " dropped), else the first non-empty
 * line; "" if it said nothing. */
static void simgrid_said(const char *text, char *out, size_t cap)
{
    out[0] = '\0';
    const char *pick = NULL;
    static const char *const tags[] = {"/ERROR] ", "/CRITICAL] "};
    for (size_t i = 0; i < 2 && !pick; i++) {
        const char *t = strstr(text, tags[i]);
        if (t) pick = t + strlen(tags[i]);
    }
    if (!pick) {
        pick = text;
        while (*pick == '\n' || *pick == '\r' || *pick == ' ') pick++;
    }
    size_t n = strcspn(pick, "\r\n");
    if (n >= cap) n = cap - 1;
    memcpy(out, pick, n);
    out[n] = '\0';
}

/* The last file this thread found good, and for how many workers: a scenario is checked when
 * it is loaded and again by the engine, and a sweep checks every variant; the same unchanged
 * file is loaded once. */
static _Thread_local struct {
    char path[4096];
    uint32_t P;
    struct stat st;
} platform_ok;

static int same_file(const struct stat *a, const struct stat *b)
{
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
           a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

deftsim_status deftsim_sim_check_platform(const deftsim_sim_params *p)
{
    if (p->topology != DEFTSIM_TOPO_FILE) return DEFTSIM_OK;
    const char *path = p->platform_file;
    if (!path || !path[0])
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "platform_file: missing (required when topology = file)");
    struct stat fst;
    if (access(path, R_OK) != 0 || stat(path, &fst) != 0)
        return deftsim_error_set(DEFTSIM_E_INPUT, "cannot read %s: %s", path, strerror(errno));
    if (platform_ok.P >= p->P && strcmp(platform_ok.path, path) == 0 &&
        same_file(&platform_ok.st, &fst))
        return DEFTSIM_OK;
    sim_check_progress *prog = mmap(NULL, sizeof *prog, PROT_READ | PROT_WRITE,
                                    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (prog == MAP_FAILED)
        return deftsim_error_set(DEFTSIM_E_RUNTIME, "platform check: mmap: %s", strerror(errno));
    memset(prog, 0, sizeof *prog);
    int outp[2], errp[2];
    if (pipe(outp) != 0) {
        munmap(prog, sizeof *prog);
        return deftsim_error_set(DEFTSIM_E_RUNTIME, "platform check: pipe: %s", strerror(errno));
    }
    if (pipe(errp) != 0) {
        close(outp[0]);
        close(outp[1]);
        munmap(prog, sizeof *prog);
        return deftsim_error_set(DEFTSIM_E_RUNTIME, "platform check: pipe: %s", strerror(errno));
    }
    pid_t parent = getpid();
    /* The child leaves with _exit, but flush first anyway: a buffered stdio stream of the
     * parent would otherwise be written twice by any path in the child that flushes. */
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        int err = errno;
        close(outp[0]);
        close(outp[1]);
        close(errp[0]);
        close(errp[1]);
        munmap(prog, sizeof *prog);
        return deftsim_error_set(DEFTSIM_E_RUNTIME, "platform check: fork: %s", strerror(err));
    }
    if (pid == 0) {
        close(outp[0]);
        close(errp[0]);
        sim_child_check_main(parent, outp[1], errp[1], path, p->P, prog);
    }
    close(outp[1]);
    close(errp[1]);
    /* The result is a few bytes (it fits the pipe, the child never blocks on it): read what
     * SimGrid says to the end, then the result. */
    char said[ERR_TAIL + 1];
    size_t said_len = 0;
    for (;;) {
        char chunk[4096];
        ssize_t r = read(errp[0], chunk, sizeof chunk);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        size_t take = (size_t)r < ERR_TAIL - said_len ? (size_t)r : ERR_TAIL - said_len;
        memcpy(said + said_len, chunk, take); /* the first lines: where SimGrid's error is */
        said_len += take;
    }
    said[said_len] = '\0';
    close(errp[0]);
    char res[8 + SIM_MSG_MAX + 1];
    size_t have = 0;
    for (;;) {
        ssize_t r = read(outp[0], res + have, sizeof res - 1 - have);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        have += (size_t)r;
        if (have == sizeof res - 1) break;
    }
    close(outp[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    sim_check_progress pr = *prog;
    munmap(prog, sizeof *prog);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || have < 8) {
        char what[1024], how[64];
        simgrid_said(said, what, sizeof what);
        if (WIFSIGNALED(status))
            snprintf(how, sizeof how, "killed by signal %d", WTERMSIG(status));
        else
            snprintf(how, sizeof how, "exit status %d", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
        pr.from_name[sizeof pr.from_name - 1] = pr.to_name[sizeof pr.to_name - 1] = '\0';
        if (pr.stage == 1) /* SimGrid 3.32 crashes on a route that does not exist */
            return deftsim_error_set(DEFTSIM_E_INPUT,
                                     "%s has no route from host %s to host %s (workers %" PRIu32
                                     " and %" PRIu32 ")",
                                     path, pr.from_name, pr.to_name, pr.from, pr.to);
        if (what[0])
            return deftsim_error_set(DEFTSIM_E_INPUT, "%s is not a SimGrid platform: %s", path,
                                     what);
        return deftsim_error_set(DEFTSIM_E_INPUT, "%s: SimGrid failed loading it (%s)", path, how);
    }
    int32_t rc;
    uint32_t len;
    memcpy(&rc, res, sizeof rc);
    memcpy(&len, res + 4, sizeof len);
    if (len > have - 8) len = (uint32_t)(have - 8);
    res[8 + len] = '\0';
    if (rc != 0) return deftsim_error_set(DEFTSIM_E_INPUT, "%s", res + 8);
    if (strlen(path) < sizeof platform_ok.path) {
        strcpy(platform_ok.path, path);
        platform_ok.P = p->P;
        platform_ok.st = fst;
    }
    return DEFTSIM_OK;
}

/* The result arrays for nsched schedules of p->P workers. */
static deftsim_status result_alloc(const deftsim_sim_params *p,
                                   const deftsim_schedule *const *scheds, size_t nsched,
                                   deftsim_sim_result *out)
{
    uint32_t P = p->P;
    out->P = P;
    out->nsched = nsched;
    out->mode = p->mode;
    out->step_offset = calloc(nsched + 1, sizeof *out->step_offset);
    if (!out->step_offset) goto nomem;
    for (size_t i = 0; i < nsched; i++) out->step_offset[i + 1] = out->step_offset[i] + scheds[i]->nsteps;
    size_t cells = out->step_offset[nsched] * P;
    out->start = malloc((cells ? cells : 1) * sizeof(double));
    out->end = malloc((cells ? cells : 1) * sizeof(double));
    out->sent = malloc((cells ? cells : 1) * sizeof(uint64_t));
    out->recv = malloc((cells ? cells : 1) * sizeof(uint64_t));
    out->iteration_seconds = calloc(nsched ? nsched : 1, sizeof(double));
    out->comm_seconds = calloc(nsched ? nsched : 1, sizeof(double));
    if (!out->start || !out->end || !out->sent || !out->recv || !out->iteration_seconds ||
        !out->comm_seconds)
        goto nomem;
    return DEFTSIM_OK;
nomem:
    return deftsim_error_nomem("network simulation: %u workers", P);
}

/* What the child wrote and said, read together until both pipes close (either can fill):
 * up to `want` bytes of results into buf (more is read and dropped), and the last ERR_TAIL
 * bytes of its messages into tail. Closes both descriptors. Returns nonzero if poll failed. */
static int read_child(int out_fd, int err_fd, char *buf, size_t want, size_t *have, char *tail,
                      size_t *tail_len)
{
    struct pollfd fds[2] = {{out_fd, POLLIN, 0}, {err_fd, POLLIN, 0}};
    int open_fds = 2, failed = 0;
    while (open_fds) {
        int n = poll(fds, 2, -1);
        if (n < 0) {
            if (errno == EINTR) continue;
            failed = 1;
            break;
        }
        for (int i = 0; i < 2; i++) {
            if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            char chunk[65536];
            char *dst = chunk;
            size_t room = sizeof chunk;
            if (i == 0 && buf) {
                dst = buf + *have;
                room = want - *have;
                if (room == 0) {
                    dst = chunk; /* more than a result holds: read and drop */
                    room = sizeof chunk;
                }
            }
            ssize_t r = read(fds[i].fd, dst, room);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) {
                close(fds[i].fd);
                fds[i].fd = -1;
                open_fds--;
                continue;
            }
            if (i == 0 && dst != chunk) *have += (size_t)r;
            if (i == 1) tail_append(tail, tail_len, chunk, (size_t)r);
        }
    }
    for (int i = 0; i < 2; i++)
        if (fds[i].fd >= 0) close(fds[i].fd);
    return failed;
}

/* The last lines of what SimGrid said, on one line, for the error message, without the
 * backtrace SimGrid prints after a failed assertion (the reason is before it). */
static void tail_one_line(char *tail, size_t *tail_len)
{
    tail[*tail_len] = '\0';
    for (size_t i = 0; i < *tail_len; i++)
        if (tail[i] == '\n' || tail[i] == '\r') tail[i] = ' ';
    char *bt = strstr(tail, " Backtrace (displayed");
    if (bt) {
        *bt = '\0';
        *tail_len = (size_t)(bt - tail);
    }
}

/* Checks what the child reported (its exit, the header, the size) and copies its arrays into
 * out. `platform` names the platform in messages. */
static deftsim_status take_results(const char *buf, size_t have, int read_failed, int status,
                                   const char *platform, const char *tail, size_t tail_len,
                                   deftsim_sim_result *out)
{
    uint32_t P = out->P;
    size_t cells = out->step_offset[out->nsched] * P;
    sim_child_header h;
    memset(&h, 0, sizeof h);
    if (have >= sizeof h) memcpy(&h, buf, sizeof h);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || read_failed || h.magic != SIM_MAGIC) {
        char how[64];
        if (WIFSIGNALED(status))
            snprintf(how, sizeof how, "killed by signal %d", WTERMSIG(status));
        else if (WIFEXITED(status))
            snprintf(how, sizeof how, "exit status %d", WEXITSTATUS(status));
        else
            snprintf(how, sizeof how, "status %d", status);
        return deftsim_error_set(DEFTSIM_E_RUNTIME,
                                 "network simulation (SimGrid, %u workers, platform %s) failed: %s%s%s",
                                 P, platform, how, tail_len ? "; SimGrid said: " : "",
                                 tail_len ? tail : "");
    }
    if (h.rc != 0) {
        char msg[SIM_MSG_MAX + 1];
        size_t ml = h.msglen < SIM_MSG_MAX ? h.msglen : SIM_MSG_MAX;
        memcpy(msg, buf + sizeof h, ml);
        msg[ml] = '\0';
        return deftsim_error_set(DEFTSIM_E_RUNTIME, "network simulation (%u workers): %s%s%s", P,
                                 msg, tail_len ? "; SimGrid said: " : "", tail_len ? tail : "");
    }
    size_t need = sizeof h + h.msglen + cells * 2 * (sizeof(double) + sizeof(uint64_t));
    if (have != need)
        return deftsim_error_set(DEFTSIM_E_RUNTIME,
                                 "network simulation: %zu bytes of results, expected %zu", have, need);
    const char *q = buf + sizeof h + h.msglen;
    memcpy(out->start, q, cells * sizeof(double));
    q += cells * sizeof(double);
    memcpy(out->end, q, cells * sizeof(double));
    q += cells * sizeof(double);
    memcpy(out->sent, q, cells * sizeof(uint64_t));
    q += cells * sizeof(uint64_t);
    memcpy(out->recv, q, cells * sizeof(uint64_t));
    out->messages = h.messages;
    return DEFTSIM_OK;
}

/* Per schedule: the end of its last step, and its communication time. */
static void schedule_totals(const deftsim_schedule *const *scheds, deftsim_sim_result *out)
{
    uint32_t P = out->P;
    for (size_t i = 0; i < out->nsched; i++) {
        double it = 0, comm = 0;
        for (size_t k = 0; k < scheds[i]->nsteps; k++) {
            size_t row = out->step_offset[i] + k;
            double last_in = 0, last_out = 0;
            for (uint32_t w = 0; w < P; w++) {
                double s = out->start[row * P + w], e = out->end[row * P + w];
                if (s > last_in) last_in = s;
                if (e > last_out) last_out = e;
            }
            if (last_out > it) it = last_out;
            if (scheds[i]->steps[k].kind != DEFTSIM_STEP_COMPUTE) comm += last_out - last_in;
        }
        out->iteration_seconds[i] = it;
        out->comm_seconds[i] = comm;
    }
}

/* One simulation in a forked child, its results in out (allocated). *not_analytic is set when
 * the child answered that analytic mode does not hold (why says where). */
static deftsim_status run_child(const deftsim_sim_params *p, const sim_platform_file *pf,
                                const deftsim_schedule *const *scheds, size_t nsched,
                                deftsim_sim_result *out, int *not_analytic, char *why, size_t cap)
{
    size_t cells = out->step_offset[nsched] * p->P;
    deftsim_status st;
    int outp[2], errp[2];
    if (pipe(outp) != 0)
        return deftsim_error_set(DEFTSIM_E_RUNTIME, "network simulation: pipe: %s", strerror(errno));
    if (pipe(errp) != 0) {
        close(outp[0]);
        close(outp[1]);
        return deftsim_error_set(DEFTSIM_E_RUNTIME, "network simulation: pipe: %s", strerror(errno));
    }
    double t0 = deftsim_now();
    pid_t parent = getpid();
    /* The child leaves with _exit, but flush first anyway: a buffered stdio stream of the
     * parent would otherwise be written twice by any path in the child that flushes. */
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        st = deftsim_error_set(DEFTSIM_E_RUNTIME, "network simulation: fork: %s", strerror(errno));
        close(outp[0]);
        close(outp[1]);
        close(errp[0]);
        close(errp[1]);
        return st;
    }
    if (pid == 0) {
        close(outp[0]);
        close(errp[0]);
        sim_child_main(parent, outp[1], errp[1], p, pf->path, scheds, nsched, out->step_offset);
    }
    close(outp[1]);
    close(errp[1]);

    size_t want = sizeof(sim_child_header) + SIM_MSG_MAX + cells * 2 * (sizeof(double) + sizeof(uint64_t));
    char *buf = malloc(want);
    size_t have = 0;
    char tail[ERR_TAIL + 1];
    size_t tail_len = 0;
    int read_failed = read_child(outp[0], errp[0], buf, want, &have, tail, &tail_len) || !buf;
    int status = 0;
    struct rusage ru;
    memset(&ru, 0, sizeof ru);
    while (wait4(pid, &status, 0, &ru) < 0 && errno == EINTR) {
    }
    out->wall_seconds += deftsim_now() - t0;
    out->procs = 1;
    if ((uint64_t)ru.ru_maxrss * 1024u > out->peak_rss_bytes)
        out->peak_rss_bytes = (uint64_t)ru.ru_maxrss * 1024u;
    tail_one_line(tail, &tail_len);
    sim_child_header h;
    memset(&h, 0, sizeof h);
    if (buf && have >= sizeof h) memcpy(&h, buf, sizeof h);
    if (!read_failed && WIFEXITED(status) && WEXITSTATUS(status) == 0 && h.magic == SIM_MAGIC &&
        h.rc == SIM_RC_NOT_ANALYTIC) {
        size_t ml = h.msglen < cap - 1 ? h.msglen : cap - 1;
        if (have >= sizeof h + ml) memcpy(why, buf + sizeof h, ml);
        why[ml] = '\0';
        *not_analytic = 1;
        free(buf);
        return DEFTSIM_OK;
    }
    st = take_results(buf, have, read_failed, status, pf->is_fd ? "generated" : pf->path, tail,
                      tail_len, out);
    free(buf);
    return st;
}

/* Several schedules in exact or approximate mode: each in its own process, forked from one
 * load of the platform (deftsim_sim_run_batch's) and simulated from instant 0, up to p->procs
 * of them at once; their results gathered into out (allocated for all of them). The same
 * numbers whatever p->procs is. */
static deftsim_status run_each(const deftsim_sim_params *p, const deftsim_schedule *const *scheds,
                               size_t nsched, deftsim_sim_result *out)
{
    deftsim_sim_job *jobs = calloc(nsched, sizeof *jobs);
    deftsim_sim_result *r = calloc(nsched, sizeof *r);
    deftsim_status st;
    if (!jobs || !r) {
        st = deftsim_error_nomem("network simulation: %zu schedules", nsched);
        goto done;
    }
    for (size_t i = 0; i < nsched; i++) jobs[i] = (deftsim_sim_job){scheds + i, 1};
    size_t failed = 0;
    if ((st = deftsim_sim_run_batch(p, jobs, nsched, r, &failed))) goto done;
    uint32_t P = p->P;
    for (size_t i = 0; i < nsched; i++) {
        size_t at = out->step_offset[i] * (size_t)P, cells = scheds[i]->nsteps * (size_t)P;
        memcpy(out->start + at, r[i].start, cells * sizeof *out->start);
        memcpy(out->end + at, r[i].end, cells * sizeof *out->end);
        memcpy(out->sent + at, r[i].sent, cells * sizeof *out->sent);
        memcpy(out->recv + at, r[i].recv, cells * sizeof *out->recv);
        out->messages += r[i].messages;
        out->wall_seconds += r[i].wall_seconds;
        if (r[i].peak_rss_bytes > out->peak_rss_bytes) out->peak_rss_bytes = r[i].peak_rss_bytes;
        if (r[i].procs > out->procs) out->procs = r[i].procs;
    }
done:
    if (r)
        for (size_t i = 0; i < nsched; i++) deftsim_sim_result_free(&r[i]);
    free(r);
    free(jobs);
    return st;
}

deftsim_status deftsim_sim_run(const deftsim_sim_params *p, const deftsim_schedule *const *scheds,
                               size_t nsched, deftsim_sim_result *out)
{
    memset(out, 0, sizeof *out);
    char tp[128];
    uint64_t hosts;
    sim_platform_file pf; /* the platform the child loads: the user's file or a generated one */
    pf.fd = -1;
    pf.tmp[0] = '\0';
    deftsim_status st = deftsim_sim_platform_shape(p, tp, sizeof tp, &hosts);
    if (st) return st;
    if ((st = check_schedules(p, scheds, nsched))) return st;
    if ((st = result_alloc(p, scheds, nsched, out))) goto fail;
    /* Analytic mode: the closed form where it holds, else the full simulation; out->mode and
     * out->mode_note say which ran and why. */
    deftsim_sim_params q = *p;
    if (q.mode == DEFTSIM_SIM_ANALYTIC && 
        !sim_analytic_eligible(&q, scheds, nsched, out->mode_note, sizeof out->mode_note))
        q.mode = DEFTSIM_SIM_EXACT;
    int not_analytic = 0;
    /* The platform is opened (a generated one written) where this process's child loads it;
     * several schedules go to the batch, which opens its own. */
    int here = q.mode == DEFTSIM_SIM_ANALYTIC || nsched < 2;
    if (here && (st = sim_platform_open(p, &pf))) goto fail;
    if (q.mode == DEFTSIM_SIM_ANALYTIC) {
        st = run_child(&q, &pf, scheds, nsched, out, &not_analytic, out->mode_note, sizeof out->mode_note);
        if (!st && not_analytic) q.mode = DEFTSIM_SIM_EXACT;
    }
    if (!st && q.mode != DEFTSIM_SIM_ANALYTIC)
        st = nsched > 1 ? run_each(&q, scheds, nsched, out)
                        : run_child(&q, &pf, scheds, nsched, out, &not_analytic, out->mode_note,
                                    sizeof out->mode_note);
    if (st) goto fail;
    out->mode = q.mode;
    sim_platform_close(&pf);
    schedule_totals(scheds, out);
    return DEFTSIM_OK;

fail:
    sim_platform_close(&pf);
    deftsim_sim_result_free(out);
    return st;
}

/* ---- batches: one platform load for several simulations ----------------------------------------- */

#if defined(__SANITIZE_ADDRESS__)
#define SIM_BATCH_SEPARATE 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SIM_BATCH_SEPARATE 1
#endif
#endif

static void close_fds(int *fds, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (fds[i] >= 0) close(fds[i]), fds[i] = -1;
}

/* Jobs [0, n) of one batch child; out[i] allocated by the caller. *failed: the job whose
 * failure the status returned names. */
static deftsim_status run_batch_child(const deftsim_sim_params *p, const sim_platform_file *pf,
                                      const deftsim_sim_job *jobs, size_t n,
                                      deftsim_sim_result *out, size_t *failed)
{
    sim_batch_job bj[SIM_BATCH_MAX];
    int fds[4 * SIM_BATCH_MAX], st_p[2] = {-1, -1};
    int *out_r = fds, *out_w = fds + SIM_BATCH_MAX;
    int *err_r = fds + 2 * SIM_BATCH_MAX, *err_w = fds + 3 * SIM_BATCH_MAX;
    for (size_t i = 0; i < 4 * SIM_BATCH_MAX; i++) fds[i] = -1;
    deftsim_status st = DEFTSIM_OK;
    *failed = 0;
    int ok = pipe(st_p) == 0;
    for (size_t i = 0; i < n && ok; i++) {
        int a[2], b[2];
        if (pipe(a) != 0) ok = 0;
        else if (pipe(b) != 0) ok = 0, close(a[0]), close(a[1]);
        else out_r[i] = a[0], out_w[i] = a[1], err_r[i] = b[0], err_w[i] = b[1];
        bj[i] = (sim_batch_job){jobs[i].scheds, jobs[i].nsched, out[i].step_offset};
    }
    if (!ok) {
        st = deftsim_error_set(DEFTSIM_E_RUNTIME, "network simulation: pipe: %s", strerror(errno));
        goto done;
    }
    double t0 = deftsim_now();
    pid_t parent = getpid();
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        st = deftsim_error_set(DEFTSIM_E_RUNTIME, "network simulation: fork: %s", strerror(errno));
        goto done;
    }
    if (pid == 0) {
        close(st_p[0]);
        close_fds(out_r, n);
        close_fds(err_r, n);
        sim_child_batch_main(parent, st_p[1], out_w, err_w, p, pf->path, bj, n);
    }
    close(st_p[1]);
    st_p[1] = -1;
    close_fds(out_w, n);
    close_fds(err_w, n);
    for (size_t i = 0; i < n && !st; i++) {
        *failed = i;
        size_t cells = out[i].step_offset[jobs[i].nsched] * p->P;
        size_t want = sizeof(sim_child_header) + SIM_MSG_MAX + cells * 2 * (sizeof(double) + sizeof(uint64_t));
        char *buf = malloc(want);
        size_t have = 0;
        char tail[ERR_TAIL + 1];
        size_t tail_len = 0;
        int read_failed = read_child(out_r[i], err_r[i], buf, want, &have, tail, &tail_len) || !buf;
        out_r[i] = err_r[i] = -1;
        sim_batch_status bs = {-1, 0};
        size_t got = 0;
        while (got < sizeof bs) {
            ssize_t r = read(st_p[0], (char *)&bs + got, sizeof bs - got);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) break;
            got += (size_t)r;
        }
        int status = bs.status;
        if (got < sizeof bs) { /* the batch's child died: its own status says how */
            while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
            }
            pid = -1;
        }
        double t1 = deftsim_now();
        out[i].wall_seconds = t1 - t0;
        t0 = t1;
        out[i].peak_rss_bytes = (uint64_t)bs.maxrss_kib * 1024u;
        tail_one_line(tail, &tail_len);
        st = take_results(buf, have, read_failed, status, pf->is_fd ? "generated" : pf->path, tail,
                          tail_len, &out[i]);
        free(buf);
        if (!st) out[i].mode = p->mode;
        out[i].procs = p->procs > 1 ? (n < p->procs ? (unsigned)n : p->procs) : 1;
    }
    if (pid > 0) {
        if (st) kill(pid, SIGKILL);
        int status;
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
    }
done:
    close_fds(fds, 4 * SIM_BATCH_MAX);
    close_fds(st_p, 2);
    return st;
}

deftsim_status deftsim_sim_run_batch(const deftsim_sim_params *p, const deftsim_sim_job *jobs,
                                     size_t njobs, deftsim_sim_result *out, size_t *failed)
{
    size_t f = 0;
    deftsim_status st = DEFTSIM_OK;
    for (size_t i = 0; i < njobs; i++) memset(&out[i], 0, sizeof out[i]);
    int separate = p->mode == DEFTSIM_SIM_ANALYTIC || njobs < 2;
#ifdef SIM_BATCH_SEPARATE
    separate = 1; /* actors are threads under ASan: no fork after the engine ran */
#endif
    if (separate) {
        for (f = 0; f < njobs && !st; f++) st = deftsim_sim_run(p, jobs[f].scheds, jobs[f].nsched, &out[f]);
        if (st) f--;
        goto end;
    }
    char tp[128];
    uint64_t hosts;
    sim_platform_file pf;
    pf.fd = -1;
    pf.tmp[0] = '\0';
    if ((st = deftsim_sim_platform_shape(p, tp, sizeof tp, &hosts))) goto end;
    for (f = 0; f < njobs && !st; f++)
        if (!(st = check_schedules(p, jobs[f].scheds, jobs[f].nsched)))
            st = result_alloc(p, jobs[f].scheds, jobs[f].nsched, &out[f]);
    if (st) {
        f--;
        goto end;
    }
    f = 0;
    if ((st = sim_platform_open(p, &pf))) goto end;
    for (size_t first = 0; first < njobs && !st; first += SIM_BATCH_MAX) {
        size_t n = njobs - first < SIM_BATCH_MAX ? njobs - first : SIM_BATCH_MAX;
        st = run_batch_child(p, &pf, jobs + first, n, out + first, &f);
        f += first;
    }
    sim_platform_close(&pf);
    if (!st)
        for (size_t i = 0; i < njobs; i++) schedule_totals(jobs[i].scheds, &out[i]);
end:
    if (st)
        for (size_t i = 0; i < njobs; i++) deftsim_sim_result_free(&out[i]);
    if (failed) *failed = f;
    return st;
}
