/* cli_run.c - runs the deftsim program for the command-line tests. */
#include "cli_run.h"

#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

/* All of an unlinked temporary file, from its start. */
static char *slurp_fd(int fd)
{
    FILE *f = fdopen(fd, "r");
    cr_assert(f);
    rewind(f);
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    cr_assert(buf);
    size_t got;
    while ((got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (cap - n < 2) {
            buf = realloc(buf, cap *= 2);
            cr_assert(buf);
        }
    }
    buf[n] = '\0';
    fclose(f);
    return buf;
}

deftsim_test_run deftsim_test_cli(const char *dir, const char *const *args)
{
    const char *exe = getenv("DEFTSIM_EXE");
    cr_assert(exe, "DEFTSIM_EXE is not set (run the tests through meson test)");
    char out_t[] = "/tmp/deftsim-cli-out-XXXXXX", err_t[] = "/tmp/deftsim-cli-err-XXXXXX";
    int out = mkstemp(out_t), err = mkstemp(err_t);
    cr_assert(out >= 0 && err >= 0);
    unlink(out_t);
    unlink(err_t);
    fflush(NULL);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        if ((dir && chdir(dir) != 0) || dup2(out, 1) < 0 || dup2(err, 2) < 0) _exit(126);
        const char *argv[40] = {exe};
        for (size_t i = 0; args[i] && i < 38; i++) argv[i + 1] = args[i];
        execv(exe, (char *const *)argv);
        _exit(127);
    }
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status), "deftsim did not exit normally (status 0x%x)", status);
    deftsim_test_run r = {WEXITSTATUS(status), slurp_fd(out), slurp_fd(err)};
    return r;
}
