/* cli_common.c - what every subcommand of deftsim uses (cli.h): a failure's message and exit
 * code, a usage error, SIGINT and SIGTERM while a folder is written, the command line as it
 * can be typed again, and the parse-only switch of the command-line fuzz target. The lowest
 * file of the CLI: it calls none of the others. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

int deftsim_cli_parse_only = 0;

int deftsim_cli_fail(deftsim_status st)
{
    const char *msg = deftsim_error_message();
    fprintf(stderr, "deftsim: %s error: %s\n", deftsim_status_name(st),
            msg[0] ? msg : "(no message)");
    return deftsim_status_exit_code(st);
}

int deftsim_cli_usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "deftsim %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nTry 'deftsim %s --help'.\n", cmd);
    return 2;
}

/* ---- SIGINT and SIGTERM (cli.h) --------------------------------------------------------------- */

static volatile sig_atomic_t stop_signal; /* the first signal caught; 0: none */
static pid_t stop_pid;                    /* the process that catches them */
static int stop_pipe[2] = {-1, -1};       /* the handler wakes the watcher through it */
static pthread_t stop_thread;
static atomic_int stop_active;            /* caught: the watcher runs */

static void say(const char *msg, size_t len)
{
    ssize_t w = write(STDERR_FILENO, msg, len); /* async-signal-safe */
    (void)w;
}

static void on_stop(int sig)
{
    if (getpid() != stop_pid) /* a child in the moment between fork and stop_child() */
        _exit(128 + sig);
    if (stop_signal) {
        static const char now[] = "\ndeftsim: second signal: stopping at once; the finished points "
                                  "are kept, and the same command resumes (it removes the "
                                  "temporary files left)\n";
        say(now, sizeof now - 1);
        signal(sig, SIG_DFL);
        kill(getpid(), sig); /* delivered, with the default action, when the handler returns */
        return;
    }
    stop_signal = sig;
    static const char first[] = "\ndeftsim: stopping before the next iteration (a second signal "
                                "stops at once)\n";
    say(first, sizeof first - 1);
    ssize_t w = write(stop_pipe[1], "", 1);
    (void)w;
}

/* A forked child (the network simulation's) takes the default actions again and leaves the
 * watcher's pipe. */
static void stop_child(void)
{
    static const int sigs[] = {SIGINT, SIGTERM};
    for (size_t i = 0; i < 2; i++) {
        struct sigaction old;
        if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler == on_stop) signal(sigs[i], SIG_DFL);
    }
    if (getpid() != stop_pid && stop_pipe[0] >= 0) {
        close(stop_pipe[0]);
        close(stop_pipe[1]);
    }
}

/* This process's children, SIGKILLed: the network simulation's (there is no other while a run
 * or sweep runs outside mpirun). Ctrl-C reaches the child too, and SimGrid's own SIGINT
 * handler logs and exits inside the handler, which can hang it for good; a SIGTERM sent to
 * this process alone would let it simulate on. Its parent sees the simulation fail, finds the
 * stop flag set and drops the point. */
static void kill_children(void)
{
    DIR *d = opendir("/proc/self/task");
    struct dirent *e;
    while (d && (e = readdir(d))) {
        char path[300];
        snprintf(path, sizeof path, "/proc/self/task/%s/children", e->d_name);
        FILE *f = e->d_name[0] != '.' ? fopen(path, "r") : NULL;
        long pid;
        while (f && fscanf(f, "%ld", &pid) == 1)
            if (pid > 0) kill((pid_t)pid, SIGKILL);
        if (f) fclose(f);
    }
    if (d) closedir(d);
}

/* Waits for the handler's byte; then ends the children until the caller releases the signals
 * (a simulation started just before the flag was seen ends too). */
static void *stop_watch(void *arg)
{
    (void)arg;
    char c;
    ssize_t r;
    while ((r = read(stop_pipe[0], &c, 1)) < 0 && errno == EINTR) {
    }
    while (r == 1 && stop_active) {
        kill_children();
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

const volatile sig_atomic_t *deftsim_cli_catch_stop(void)
{
    static int atfork;
    if (!atfork++) pthread_atfork(NULL, NULL, stop_child);
    stop_signal = 0;
    stop_pid = getpid();
    if (stop_active || pipe2(stop_pipe, O_CLOEXEC) != 0) return &stop_signal;
    /* The watcher blocks both signals, so that the handler runs on another thread. */
    sigset_t all, old;
    sigemptyset(&all);
    sigaddset(&all, SIGINT);
    sigaddset(&all, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    stop_active = 1;
    if (pthread_create(&stop_thread, NULL, stop_watch, NULL) != 0) stop_active = 0;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (!stop_active) {
        close(stop_pipe[0]);
        close(stop_pipe[1]);
        stop_pipe[0] = stop_pipe[1] = -1;
        return &stop_signal;
    }
    static const int sigs[] = {SIGINT, SIGTERM};
    for (size_t i = 0; i < 2; i++) {
        struct sigaction sa, prev;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_stop;
        sigemptyset(&sa.sa_mask);
        sa.sa_flags = SA_RESTART;
        /* A signal ignored from the start (nohup, a background job of a script) stays so. */
        if (sigaction(sigs[i], NULL, &prev) == 0 && prev.sa_handler != SIG_IGN)
            sigaction(sigs[i], &sa, NULL);
    }
    return &stop_signal;
}

void deftsim_cli_release_stop(void)
{
    stop_child();
    if (!stop_active) return;
    stop_active = 0;
    close(stop_pipe[1]); /* the watcher's read ends, or its loop does */
    pthread_join(stop_thread, NULL);
    close(stop_pipe[0]);
    stop_pipe[0] = stop_pipe[1] = -1;
}

const char *deftsim_cli_stop_name(void) { return stop_signal == SIGTERM ? "SIGTERM" : "SIGINT"; }
int deftsim_cli_stop_exit(void) { return 128 + (stop_signal ? stop_signal : SIGINT); }

void deftsim_cli_print_command(FILE *f, int argc, char *const *argv)
{
    fputs("deftsim", f);
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        int plain = a[0] != '\0';
        for (const char *p = a; *p && plain; p++)
            plain = strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                           "_-./=,:+@%", *p) != NULL;
        if (plain) {
            fprintf(f, " %s", a);
            continue;
        }
        fputs(" '", f);
        for (const char *p = a; *p; p++)
            if (*p == '\'') fputs("'\\''", f);
            else fputc(*p, f);
        fputc('\'', f);
    }
}
