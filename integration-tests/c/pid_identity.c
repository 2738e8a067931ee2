#define _GNU_SOURCE
/* The process's ids as the program sees them stay those it started with, across restarts:
 * getpid, gettid of the main thread, getpgrp/getpgid/getsid, kill and sigqueue to its own pid
 * (delivered to itself, with the value), tgkill, and a forked child's getppid. Checked from
 * inside at every step; the output has no ids in it. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t got, got_value;

static void handler(int sig, siginfo_t *si, void *uc) {
    (void)sig; (void)uc;
    got++;
    if (si->si_code == SI_QUEUE) got_value = si->si_value.sival_int;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 40;
    long ms = argc > 2 ? atol(argv[2]) : 20;
    setvbuf(stdout, NULL, _IONBF, 0);
    struct sigaction sa = { .sa_sigaction = handler, .sa_flags = SA_SIGINFO | SA_RESTART };
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR2, &sa, NULL);
    pid_t pid = getpid(), pgrp = getpgrp(), sid = getsid(0);
    for (int i = 0; i < n; i++) {
        if (getpid() != pid) { printf("FAIL: getpid changed at step %d\n", i); return 1; }
        if (gettid() != pid) { printf("FAIL: main thread's gettid is not the pid at step %d\n", i); return 1; }
        if (getpgrp() != pgrp || getpgid(0) != pgrp || getpgid(pid) != pgrp) { printf("FAIL: process group at step %d\n", i); return 1; }
        if (getsid(pid) != sid) { printf("FAIL: session at step %d\n", i); return 1; }
        int before = got;
        if (kill(pid, SIGUSR2) != 0 || got != before + 1) { printf("FAIL: kill(getpid()) at step %d (errno %d)\n", i, errno); return 1; }
        union sigval v = { .sival_int = 1000 + i };
        if (sigqueue(pid, SIGUSR2, v) != 0 || got != before + 2 || got_value != 1000 + i) { printf("FAIL: sigqueue at step %d\n", i); return 1; }
        if (tgkill(pid, gettid(), SIGUSR2) != 0 || got != before + 3) { printf("FAIL: tgkill at step %d\n", i); return 1; }
        if (i % 10 == 0) {
            pid_t c = fork();
            if (c == 0) _exit(getppid() == pid ? 0 : 7);
            int st;
            if (waitpid(c, &st, 0) != c || !WIFEXITED(st) || WEXITSTATUS(st) != 0) { printf("FAIL: the child saw another parent at step %d\n", i); return 1; }
        }
        printf("step %d ok\n", i);
        struct timespec ts = { 0, ms * 1000000L };
        nanosleep(&ts, NULL);
    }
    printf("done\n");
    return 0;
}
