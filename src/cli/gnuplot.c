/* gnuplot.c - running gnuplot for `deftsim plot` (the sweep figures and the training curves). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"

void deftsim_cli_gp_quote(FILE *f, const char *s)
{
    fputc('\'', f);
    for (; *s; s++) {
        if (*s == '\'') fputc('\'', f);
        fputc(*s, f);
    }
    fputc('\'', f);
}

deftsim_status deftsim_cli_gnuplot_run(const char *vars, const char *script)
{
    char *methods = deftsim_cli_gp_methods(); /* plots/style.gp's method styles */
    if (!methods) return deftsim_error_set(DEFTSIM_E_NOMEM, "plot: out of memory");
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        free(methods);
        return deftsim_error_set(DEFTSIM_E_RUNTIME, "plot: fork: %s", strerror(errno));
    }
    if (pid == 0) {
        int devnull = open("/dev/null", O_WRONLY);
        if (devnull >= 0) dup2(devnull, STDOUT_FILENO);
        execlp("gnuplot", "gnuplot", "-e", methods, "-e", vars, script, (char *)NULL);
        _exit(127);
    }
    free(methods);
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) return deftsim_error_set(DEFTSIM_E_RUNTIME, "plot: waitpid: %s", strerror(errno));
    if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
        return deftsim_error_set(DEFTSIM_E_UNSUPPORTED,
                                 "plot: cannot run gnuplot (is it installed? Debian: apt-get install "
                                 "gnuplot-nox)");
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return deftsim_error_set(DEFTSIM_E_RUNTIME, "plot: gnuplot failed on %s (its messages are above)",
                                 script);
    return DEFTSIM_OK;
}
