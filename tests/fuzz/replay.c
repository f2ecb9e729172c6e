/* replay.c - runs a fuzz target's LLVMFuzzerTestOneInput on every file of the given directories
 * (or files), without libFuzzer: the fast suite replays each target's seed corpus and its
 * crashes this way (tests/fuzz/meson.build), so whatever a fuzzer once found stays fixed.
 * Files whose names start with '.' (.gitkeep) are skipped; a missing directory counts as
 * empty. Exits 0 when every input returned (a crash, sanitizer report or failed property aborts). */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
        return -1;
    }
    size_t cap = 4096, n = 0;
    uint8_t *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            uint8_t *nb = realloc(buf, cap *= 2);
            if (!nb) free(buf);
            buf = nb;
        }
    }
    fclose(f);
    if (!buf) {
        fprintf(stderr, "replay: %s: out of memory\n", path);
        return -1;
    }
    /* An exact-size copy, as libFuzzer passes it: reading past the input is caught. */
    uint8_t *exact = malloc(n ? n : 1);
    if (!exact) {
        free(buf);
        return -1;
    }
    memcpy(exact, buf, n);
    free(buf);
    fprintf(stderr, "replay: %s (%zu bytes)\n", path, n);
    LLVMFuzzerTestOneInput(exact, n);
    free(exact);
    return 0;
}

int main(int argc, char **argv)
{
    size_t total = 0;
    int failed = 0;
    for (int i = 1; i < argc; i++) {
        struct stat sb;
        if (stat(argv[i], &sb) != 0) {
            fprintf(stderr, "replay: %s: absent, nothing to replay\n", argv[i]);
            continue;
        }
        if (!S_ISDIR(sb.st_mode)) {
            failed |= run_file(argv[i]) != 0;
            total++;
            continue;
        }
        struct dirent **names;
        int n = scandir(argv[i], &names, NULL, alphasort);
        if (n < 0) {
            fprintf(stderr, "replay: %s: %s\n", argv[i], strerror(errno));
            return 1;
        }
        for (int k = 0; k < n; k++) {
            if (names[k]->d_name[0] != '.') {
                size_t len = strlen(argv[i]) + strlen(names[k]->d_name) + 2;
                char *path = malloc(len);
                if (!path) return 1;
                snprintf(path, len, "%s/%s", argv[i], names[k]->d_name);
                if (stat(path, &sb) == 0 && S_ISREG(sb.st_mode)) {
                    failed |= run_file(path) != 0;
                    total++;
                }
                free(path);
            }
            free(names[k]);
        }
        free(names);
    }
    fprintf(stderr, "replay: %zu inputs%s\n", total, failed ? ", some unreadable" : "");
    return failed ? 1 : 0;
}
