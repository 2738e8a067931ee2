/* Reaps any child from its SIGCHLD handler, as shells and mpirun do (waitpid(-1, WNOHANG) in
 * a loop). Its own three children are reaped before the loop; crum's image writer must never
 * reach the handler (it used to be reaped there, and the checkpoint then failed). Prints what
 * the handler reaped at every step; at the end checks that the handler is still installed,
 * that no foreign child was ever reaped and that it has no child left. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t reaped, foreign;
static pid_t kids[3];

static void on_chld(int sig) {
    (void)sig;
    int saved = errno;
    for (;;) {
        int st;
        pid_t p = waitpid(-1, &st, WNOHANG);
        if (p <= 0) break;
        int mine = 0;
        for (int i = 0; i < 3; i++) mine |= kids[i] == p;
        if (mine) reaped++;
        else foreign++;
    }
    errno = saved;
}

static void sleep_ms(long ms) {
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 40;
    long ms = argc > 2 ? atol(argv[2]) : 15;
    setvbuf(stdout, NULL, _IONBF, 0);
    struct sigaction sa = { 0 };
    sa.sa_handler = on_chld;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGCHLD, &sa, NULL) != 0) { printf("FAIL sigaction\n"); return 1; }
    /* SIGCHLD held until every child's pid is recorded. */
    sigset_t chld, old;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigprocmask(SIG_BLOCK, &chld, &old);
    for (int i = 0; i < 3; i++) {
        kids[i] = fork();
        if (kids[i] < 0) { printf("FAIL fork\n"); return 1; }
        if (kids[i] == 0) _exit(i);
    }
    sigprocmask(SIG_SETMASK, &old, NULL);
    for (int t = 0; reaped < 3; t++) {
        if (t > 30000) { printf("FAIL children not reaped\n"); return 1; }
        sleep_ms(1);
    }
    for (int i = 0; i < n; i++) {
        printf("step %d reaped %d foreign %d\n", i, (int)reaped, (int)foreign);
        sleep_ms(ms);
    }
    struct sigaction now;
    sigaction(SIGCHLD, NULL, &now);
    if (now.sa_handler != on_chld) { printf("FAIL the SIGCHLD handler is gone\n"); return 1; }
    errno = 0;
    pid_t p = waitpid(-1, NULL, WNOHANG);
    if (p != -1 || errno != ECHILD) { printf("FAIL an unexpected child: waitpid gave %d\n", (int)p); return 1; }
    printf("done reaped %d foreign %d\n", (int)reaped, (int)foreign);
    return foreign != 0;
}
