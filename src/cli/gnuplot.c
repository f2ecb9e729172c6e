/* gnuplot.c - running gnuplot for `deftsim plot` (the sweep figures and the training curves),
 * with the registry's method styles and the results' conditions (network, where compute was
 * timed) that plots/style.gp prints under every subtitle. */
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

static char gp_network[512], gp_compute[512];

void deftsim_cli_gp_set_conditions(const char *network, const char *compute)
{
    snprintf(gp_network, sizeof gp_network, "%s", network ? network : "");
    snprintf(gp_compute, sizeof gp_compute, "%s", compute ? compute : "");
}

/* "conditions='...'; compute_note='...'" for plots/style.gp, malloc'd; NULL when out of
 * memory. */
static char *conditions_var(void)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *v = open_memstream(&buf, &len);
    if (!v) return NULL;
    fputs("conditions=", v);
    deftsim_cli_gp_quote(v, gp_network);
    fputs("; compute_note=", v);
    deftsim_cli_gp_quote(v, gp_compute);
    if (fclose(v) != 0) {
        free(buf);
        return NULL;
    }
    return buf;
}

deftsim_status deftsim_cli_gnuplot_run(const char *vars, const char *script)
{
    char *methods = deftsim_cli_gp_methods(); /* plots/style.gp's method styles */
    char *cond = conditions_var();
    if (!methods || !cond) {
        free(methods);
        free(cond);
        return deftsim_error_set(DEFTSIM_E_NOMEM, "plot: out of memory");
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        free(methods);
        free(cond);
        return deftsim_error_set(DEFTSIM_E_RUNTIME, "plot: fork: %s", strerror(errno));
    }
    if (pid == 0) {
        int devnull = open("/dev/null", O_WRONLY);
        if (devnull >= 0) dup2(devnull, STDOUT_FILENO);
        execlp("gnuplot", "gnuplot", "-e", methods, "-e", cond, "-e", vars, script, (char *)NULL);
        _exit(127);
    }
    free(methods);
    free(cond);
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
