/* fuzz_cli.c - the deftsim command line: the input is split into arguments at newlines (at most
 * 16; a NUL byte ends the input) and given to the real dispatcher, deftsim_cli_main, in
 * parse-only mode (deftsim_cli_parse_only): every subcommand parses and validates its options
 * and arguments (scenario files load, with their --set overrides) and returns before any work
 * or file output.
 *
 * Each input runs in a scratch directory (the working directory is restored afterwards, so
 * libFuzzer's relative corpus paths keep working) that holds a valid scenario (s.ini), a model table
 * (m.csv) and a results folder name (r), so that seed lines such as "run\ns.ini\n-n" reach the
 * end of the parsing. stdout goes to /dev/null (help texts); stderr stays (run libFuzzer with
 * -close_fd_mask=2 to silence the messages).
 *
 * Inputs that mention platform_file are skipped: a scenario with topology = file has SimGrid
 * load that file in a forked child when it is checked (deftsim_sim_check_platform), and SimGrid
 * is not fuzzed here (a child of a libFuzzer process that SimGrid aborts would also write a
 * crash file of its own). */
#include <getopt.h>
#include <sys/stat.h>

#include "cli.h"
#include "fuzz_util.h"

#define MAX_ARGS 16

static const char scenario[] =
    "[scenario]\nname = s\noutput = r\niterations = 2\n"
    "[gradients]\nsource = synthetic\nmodel = resnet18_cifar10\n"
    "[sparsify]\nmethods = deft, topk\ndensities = 0.01, 0.001\n"
    "[workers]\ncounts = 2..16\n";
static const char model[] = "index,name,shape,numel\n0,w,4x4,16\n1,b,4,4\n";

static int home = -1; /* the working directory libFuzzer started in */

static void setup(void)
{
    static int done;
    if (done) return;
    done = 1;
    if ((home = open(".", O_RDONLY | O_DIRECTORY)) < 0) abort();
    const char *dir = fuzz_scratch();
    if (chdir(dir) != 0) abort();
    fuzz_write("s.ini", scenario, sizeof scenario - 1);
    fuzz_write("m.csv", model, sizeof model - 1);
    if (mkdir("r", 0755) != 0) abort();
    if (fchdir(home) != 0) abort();
    if (!freopen("/dev/null", "w", stdout)) abort();
    deftsim_cli_parse_only = 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    setup();
    char *text = fuzz_strndup(data, size);
    if (strstr(text, "platform_file")) {
        free(text);
        return 0;
    }
    char *argv[MAX_ARGS + 2];
    int argc = 0;
    argv[argc++] = "deftsim";
    char *p = text;
    while (argc < MAX_ARGS + 1) {
        argv[argc++] = p;
        char *nl = strchr(p, '\n');
        if (!nl) break;
        *nl = '\0';
        p = nl + 1;
    }
    argv[argc] = NULL;
    if (chdir(fuzz_scratch()) != 0) abort();
    deftsim_cli_main(argc, argv);
    fflush(stdout);
    if (fchdir(home) != 0) abort();
    free(text);
    return 0;
}
