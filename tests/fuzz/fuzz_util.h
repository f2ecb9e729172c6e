/* fuzz_util.h - helpers shared by the libFuzzer targets of tests/fuzz (header-only: each target
 * is one file plus this header, built either with libFuzzer or with replay.c). */
#ifndef DEFTSIM_FUZZ_UTIL_H
#define DEFTSIM_FUZZ_UTIL_H

#include <fcntl.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char fuzz_tmpdir[256];

static inline int fuzz_rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

static inline void fuzz_rm_tmpdir(void)
{
    if (fuzz_tmpdir[0]) nftw(fuzz_tmpdir, fuzz_rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* A private scratch directory, created once per process (in /dev/shm when it exists: the
 * targets write a file per input) and removed at exit. */
static inline const char *fuzz_scratch(void)
{
    if (fuzz_tmpdir[0]) return fuzz_tmpdir;
    const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("TMPDIR");
    snprintf(fuzz_tmpdir, sizeof fuzz_tmpdir, "%s/deftsim-fuzz-XXXXXX", base && base[0] ? base : "/tmp");
    if (!mkdtemp(fuzz_tmpdir)) {
        perror("deftsim fuzz: mkdtemp");
        abort();
    }
    atexit(fuzz_rm_tmpdir);
    return fuzz_tmpdir;
}

/* Writes data to path (replacing it); aborts on failure: a harness problem, not a finding. */
static inline void fuzz_write(const char *path, const void *data, size_t size)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        perror(path);
        abort();
    }
    const char *p = data;
    while (size) {
        ssize_t n = write(fd, p, size);
        if (n <= 0) {
            perror(path);
            abort();
        }
        p += n;
        size -= (size_t)n;
    }
    close(fd);
}

/* A NUL-terminated copy of the input (NUL bytes inside stay: callers decide). */
static inline char *fuzz_strndup(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s) abort();
    memcpy(s, data, size);
    s[size] = '\0';
    return s;
}

/* A property that must hold was violated: report it and abort (libFuzzer keeps the input). */
#define FUZZ_CHECK(cond, ...)                                                                 \
    do {                                                                                      \
        if (!(cond)) {                                                                        \
            fprintf(stderr, "deftsim fuzz: %s:%d: property violated: %s: ", __FILE__,        \
                    __LINE__, #cond);                                                         \
            fprintf(stderr, __VA_ARGS__);                                                     \
            fputc('\n', stderr);                                                              \
            abort();                                                                          \
        }                                                                                     \
    } while (0)

#endif
