/* util.c - clocks, atomic files, directories, strict parsing. */
#include "deftsim_util.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

double deftsim_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

deftsim_status deftsim_mkdir_p(const char *path)
{
    char buf[4096];
    size_t len = strlen(path);
    if (len == 0 || len >= sizeof buf)
        return deftsim_error_set(DEFTSIM_E_INPUT, "%s: invalid directory path", path);
    memcpy(buf, path, len + 1);
    for (size_t i = 1; i <= len; i++) {
        if (buf[i] == '/' || buf[i] == '\0') {
            char c = buf[i];
            buf[i] = '\0';
            if (mkdir(buf, 0777) != 0) {
                int err = errno;
                struct stat sb;
                if (err != EEXIST)
                    return deftsim_error_set(DEFTSIM_E_IO, "%s: cannot create directory: %s", buf,
                                             strerror(err));
                /* Something is there already: fine if it is a directory (or a link to one). */
                if (stat(buf, &sb) != 0 || !S_ISDIR(sb.st_mode))
                    return deftsim_error_set(DEFTSIM_E_IO,
                                             "%s: cannot create directory: %s is not a directory",
                                             path, buf);
            }
            buf[i] = c;
        }
    }
    struct stat sb;
    if (stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return deftsim_error_set(DEFTSIM_E_IO, "%s: not a directory", path);
    return DEFTSIM_OK;
}

struct deftsim_afile {
    FILE *f;
    char *path;
    char *tmp;
};

deftsim_status deftsim_afile_open(deftsim_afile **out, const char *path)
{
    *out = NULL;
    deftsim_afile *af = calloc(1, sizeof *af);
    size_t n = strlen(path) + 64;
    if (!af) return deftsim_error_nomem("%s", path);
    af->path = strdup(path);
    af->tmp = malloc(n);
    if (!af->path || !af->tmp) {
        free(af->path); free(af->tmp); free(af);
        return deftsim_error_nomem("%s", path);
    }
    snprintf(af->tmp, n, "%s.tmp.%ld", path, (long)getpid());
    af->f = fopen(af->tmp, "wb");
    if (!af->f) {
        deftsim_status st = deftsim_error_set(DEFTSIM_E_IO, "%s: cannot write: %s", path,
                                              strerror(errno));
        free(af->path); free(af->tmp); free(af);
        return st;
    }
    *out = af;
    return DEFTSIM_OK;
}

FILE *deftsim_afile_stream(deftsim_afile *af) { return af->f; }

static void afile_free(deftsim_afile *af)
{
    free(af->path);
    free(af->tmp);
    free(af);
}

/* Makes a rename in path's folder durable: a power cut after the commit keeps the new file.
 * Best effort (a folder that cannot be opened or synced, e.g. on some network file systems,
 * leaves the rename as durable as the file system makes it). */
static void sync_parent(const char *path)
{
    const char *slash = strrchr(path, '/');
    char *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
    if (!dir) return;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
    free(dir);
}

deftsim_status deftsim_afile_commit(deftsim_afile *af)
{
    deftsim_status st = DEFTSIM_OK;
    int failed = ferror(af->f) || fflush(af->f) != 0;
    int err = errno;
    if (!failed && fsync(fileno(af->f)) != 0) { failed = 1; err = errno; }
    if (fclose(af->f) != 0 && !failed) { failed = 1; err = errno; }
    if (failed) {
        st = deftsim_error_set(DEFTSIM_E_IO, "%s: write failed: %s", af->path,
                               err ? strerror(err) : "stream error");
        unlink(af->tmp);
    } else if (rename(af->tmp, af->path) != 0) {
        st = deftsim_error_set(DEFTSIM_E_IO, "%s: cannot rename into place: %s", af->path,
                               strerror(errno));
        unlink(af->tmp);
    } else {
        sync_parent(af->path);
    }
    afile_free(af);
    return st;
}

void deftsim_afile_abort(deftsim_afile *af)
{
    if (!af) return;
    fclose(af->f);
    unlink(af->tmp);
    afile_free(af);
}

int deftsim_write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

deftsim_status deftsim_write_file_atomic(const char *path, const void *data, size_t len)
{
    deftsim_afile *af;
    deftsim_status st = deftsim_afile_open(&af, path);
    if (st) return st;
    if (len && fwrite(data, 1, len, af->f) != len) {
        int err = errno;
        deftsim_afile_abort(af);
        return deftsim_error_set(DEFTSIM_E_IO, "%s: write failed: %s", path, strerror(err));
    }
    return deftsim_afile_commit(af);
}

deftsim_status deftsim_open_input_status(int err)
{
    switch (err) {
    case ENOENT:
    case EACCES:
    case EPERM:
    case EISDIR:
    case ENOTDIR:
    case ELOOP:
    case ENAMETOOLONG:
    case ENXIO:
        return DEFTSIM_E_INPUT;
    default:
        return DEFTSIM_E_IO;
    }
}

deftsim_status deftsim_read_file(const char *path, char **data, size_t *len)
{
    *data = NULL;
    if (len) *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) {
        int err = errno;
        return deftsim_error_set(deftsim_open_input_status(err), "%s: cannot open: %s", path,
                                 strerror(err));
    }
    struct stat sb;
    if (fstat(fileno(f), &sb) == 0 && S_ISDIR(sb.st_mode)) {
        fclose(f);
        return deftsim_error_set(DEFTSIM_E_INPUT, "%s: is a directory, not a file", path);
    }
    /* cap counts the bytes of buf, the terminating NUL's included. */
    size_t cap = 0, n = 0;
    char *buf = NULL;
    for (;;) {
        if (deftsim_grow(&buf, &cap, n + 4096 + 1, 1)) {
            free(buf);
            buf = NULL;
            break;
        }
        size_t got = fread(buf + n, 1, cap - 1 - n, f);
        n += got;
        if (n < cap - 1) break;
    }
    int bad = ferror(f), err = errno;
    fclose(f);
    if (!buf) return deftsim_error_nomem("%s", path);
    if (bad) {
        free(buf);
        return deftsim_error_set(DEFTSIM_E_IO, "%s: read error: %s", path, strerror(err));
    }
    buf[n] = '\0';
    *data = buf;
    if (len) *len = n;
    return DEFTSIM_OK;
}

int deftsim_parse_i64(const char *s, int64_t *out)
{
    if (!s || !*s) return -1;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end != '\0') return -1;
    *out = (int64_t)v;
    return 0;
}

int deftsim_parse_u64(const char *s, uint64_t *out)
{
    if (!s || !*s || *s == '-') return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end != '\0') return -1;
    *out = (uint64_t)v;
    return 0;
}

int deftsim_parse_double(const char *s, double *out)
{
    if (!s || !*s) return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end != '\0' || !isfinite(v)) return -1;
    *out = v;
    return 0;
}

int deftsim_mul_size(size_t a, size_t b, size_t *out)
{
    if (a && b > SIZE_MAX / a) return -1;
    *out = a * b;
    return 0;
}

int deftsim_add_size(size_t a, size_t b, size_t *out)
{
    if (b > SIZE_MAX - a) return -1;
    *out = a + b;
    return 0;
}

int deftsim_utf8_check(const char *s, size_t *bad_at)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (u[i]) {
        unsigned char c = u[i];
        size_t n = c < 0x80 ? 1 : c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3
                 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
        for (size_t k = 1; k < n; k++)
            if ((u[i + k] & 0xc0) != 0x80) n = 0;
        if (n > 1 && ((c == 0xe0 && u[i + 1] < 0xa0) || (c == 0xed && u[i + 1] > 0x9f) ||
                      (c == 0xf0 && u[i + 1] < 0x90) || (c == 0xf4 && u[i + 1] > 0x8f)))
            n = 0;
        if (!n) {
            if (bad_at) *bad_at = i;
            return -1;
        }
        i += n;
    }
    return 0;
}

size_t deftsim_afile_remove_orphans(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return 0;
    size_t removed = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        const char *t = strstr(e->d_name, ".tmp.");
        if (!t || t == e->d_name || !t[5]) continue;
        const char *q = t + 5;
        while (isdigit((unsigned char)*q)) q++;
        if (*q) continue;
        long pid = strtol(t + 5, NULL, 10);
        if (pid <= 0 || pid == (long)getpid()) continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
        size_t n = strlen(dir) + strlen(e->d_name) + 2;
        char *path = malloc(n);
        if (!path) break;
        snprintf(path, n, "%s/%s", dir, e->d_name);
        if (unlink(path) == 0) removed++;
        free(path);
    }
    closedir(d);
    return removed;
}
