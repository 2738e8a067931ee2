/* Signals sent to the process and not taken yet: SIGUSR2 (blocked, raised once) and three
 * queued SIGRTMIN+1 with values 1, 2, 3 (blocked). At every step the program checks with
 * sigpending that both are still waiting; at the end it takes them with sigtimedwait: one
 * SIGUSR2 sent by itself, and the three real-time signals in order with their values. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 40;
    long ms = argc > 2 ? atol(argv[2]) : 20;
    setvbuf(stdout, NULL, _IONBF, 0);
    int rt = SIGRTMIN + 1;
    pid_t sender = getpid(); /* (a restarted process has another pid: issue 17's pid namespaces) */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR2);
    sigaddset(&set, rt);
    sigprocmask(SIG_BLOCK, &set, NULL);
    kill(getpid(), SIGUSR2);
    for (int v = 1; v <= 3; v++) {
        union sigval sv = { .sival_int = v };
        if (sigqueue(getpid(), rt, sv) != 0) { printf("FAIL: sigqueue\n"); return 1; }
    }
    for (int s = 0; s < n; s++) {
        sigset_t p;
        sigpending(&p);
        if (!sigismember(&p, SIGUSR2) || !sigismember(&p, rt)) { printf("FAIL: pending signals lost at step %d\n", s); return 1; }
        printf("step %d\n", s);
        struct timespec ts = { 0, ms * 1000000L };
        nanosleep(&ts, NULL);
    }
    struct timespec zero = { 0, 0 };
    siginfo_t si;
    if (sigtimedwait(&set, &si, &zero) != SIGUSR2 || si.si_pid != sender || si.si_code != SI_USER) {
        printf("FAIL: SIGUSR2 (pid %d code %d)\n", si.si_pid, si.si_code);
        return 1;
    }
    for (int v = 1; v <= 3; v++) {
        if (sigtimedwait(&set, &si, &zero) != rt || si.si_code != SI_QUEUE || si.si_value.sival_int != v) {
            printf("FAIL: real-time signal %d (value %d)\n", v, si.si_value.sival_int);
            return 1;
        }
    }
    if (sigtimedwait(&set, &si, &zero) != -1) { printf("FAIL: a signal too many\n"); return 1; }
    printf("done\n");
    return 0;
}
