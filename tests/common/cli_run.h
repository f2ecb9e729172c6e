/* cli_run.h - the tests' one way to run the deftsim program and read what it printed. */
#ifndef DEFTSIM_TEST_CLI_RUN_H
#define DEFTSIM_TEST_CLI_RUN_H

typedef struct {
    int rc;         /* the exit status */
    char *out, *err; /* all of stdout and stderr (caller frees) */
} deftsim_test_run;

/* Runs $DEFTSIM_EXE (set by meson test) with args (NULL-terminated, at most 38) in folder dir
 * (NULL: the current one), stdout and stderr captured; fails the test unless the program
 * exits normally. */
deftsim_test_run deftsim_test_cli(const char *dir, const char *const *args);

#endif
