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
#include "deftsim_sparsify.h"

void deftsim_cli_gp_quote(FILE *f, const char *s)
{
    fputc('\'', f);
    for (; *s; s++) {
        if (*s == '\'') fputc('\'', f);
        fputc(*s, f);
    }
    fputc('\'', f);
}

/* ---- the methods' styles ----------------------------------------------------------------- */

/* A line style: colour, marker, marker size, line width, dash type. */
typedef struct {
    const char *lc;
    int pt;
    double ps, lw;
    int dt;
} gp_style;

/* Styles 1 .. 11 (8: a name the registry does not hold, in plots/style.gp): a colour-blind-safe
 * palette (Okabe-Ito and Tol's), DEFT's in vermillion, markers and dashes that differ too. */
static const gp_style palette[] = {
    {NULL, 0, 0, 0, 0},
    {"#D55E00", 7, 1.5, 2.2, 1}, {"#0072B2", 5, 1.3, 1.8, 1}, {"#56B4E9", 4, 1.3, 1.8, 2},
    {"#CC79A7", 9, 1.5, 1.8, 1}, {"#009E73", 11, 1.5, 1.8, 1}, {"#E69F00", 13, 1.5, 1.8, 1},
    {"#555555", 3, 1.3, 1.8, 3}, {"#000000", 1, 1.3, 1.5, 1}, {"#882255", 15, 1.5, 1.8, 1},
    {"#117733", 2, 1.5, 1.8, 4}, {"#44AA99", 13, 1.5, 1.8, 5},
};
#define NPALETTE ((int)(sizeof palette / sizeof palette[0]))

/* Style slot s (deftsim_method_style): the palette's, or past it the palette's colours again
 * with markers and dashes of their own, so that every slot differs from every other. */
static gp_style style_of(int s)
{
    if (s > 0 && s < NPALETTE) return palette[s];
    static const int more_pt[] = {6, 8, 10, 12, 14, 16, 18};
    int j = s - NPALETTE;      /* 0, 1, ... */
    int c = 1 + j % 10;        /* the method colours: slots 1 .. 7, 9 .. 11 */
    if (c >= DEFTSIM_METHOD_STYLE_OTHER) c++;
    gp_style g = palette[c];
    g.pt = more_pt[j % 7];
    g.ps = 1.5;
    g.lw = 1.8;
    g.dt = 2 + j % 4;
    return g;
}

char *deftsim_cli_gp_methods(void)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *v = open_memstream(&buf, &len);
    if (!v) return NULL;
    size_t n = deftsim_method_count();
    static const char *const arrays[] = {"mreg_name", "mreg_style", "mreg_title", "mreg_short",
                                         "mreg_lc",   "mreg_pt",    "mreg_ps",    "mreg_lw",
                                         "mreg_dt"};
    for (size_t a = 0; a < sizeof arrays / sizeof arrays[0]; a++) {
        fprintf(v, "%sarray %s[%zu] = [", a ? "; " : "", arrays[a], n);
        for (size_t i = 0; i < n; i++) {
            const deftsim_method_desc *d = deftsim_method_get((deftsim_method)i);
            int slot = deftsim_method_style((deftsim_method)i);
            gp_style g = style_of(slot);
            if (i) fputs(", ", v);
            switch (a) {
            case 0: deftsim_cli_gp_quote(v, d->name); break;
            case 1: fprintf(v, "%d", slot); break;
            case 2: deftsim_cli_gp_quote(v, d->title); break;
            case 3: deftsim_cli_gp_quote(v, d->short_title); break;
            case 4: deftsim_cli_gp_quote(v, g.lc); break;
            case 5: fprintf(v, "%d", g.pt); break;
            case 6: fprintf(v, "%g", g.ps); break;
            case 7: fprintf(v, "%g", g.lw); break;
            default: fprintf(v, "%d", g.dt); break;
            }
        }
        fputc(']', v);
    }
    if (fclose(v) != 0) {
        free(buf);
        return NULL;
    }
    return buf;
}

/* ---- the results' conditions -------------------------------------------------------------- */

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
        return deftsim_error_nomem("plot");
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
