/* Sets SIGCHLD to SIG_IGN, so the kernel reaps its children itself. Its own three children
 * are gone before the loop; crum's image writer must not be reaped by the kernel the same
 * way (the checkpoint used to fail then). At the end checks that SIGCHLD is still ignored and
 * that it has no child left. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void sleep_ms(long ms) {
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 40;
    long ms = argc > 2 ? atol(argv[2]) : 15;
    setvbuf(stdout, NULL, _IONBF, 0);
    if (signal(SIGCHLD, SIG_IGN) == SIG_ERR) { printf("FAIL signal\n"); return 1; }
    pid_t kids[3];
    for (int i = 0; i < 3; i++) {
        kids[i] = fork();
        if (kids[i] < 0) { printf("FAIL fork\n"); return 1; }
        if (kids[i] == 0) _exit(0);
    }
    /* Reaped by the kernel: each pid disappears without a wait. */
    for (int i = 0; i < 3; i++) {
        for (int t = 0; kill(kids[i], 0) == 0; t++) {
            if (t > 30000) { printf("FAIL child %d not reaped by the kernel\n", i); return 1; }
            sleep_ms(1);
        }
    }
    for (int i = 0; i < n; i++) {
        printf("step %d\n", i);
        sleep_ms(ms);
    }
    struct sigaction now;
    sigaction(SIGCHLD, NULL, &now);
    if (now.sa_handler != SIG_IGN) { printf("FAIL SIGCHLD is no longer ignored\n"); return 1; }
    errno = 0;
    if (wait(NULL) != -1 || errno != ECHILD) { printf("FAIL an unexpected child\n"); return 1; }
    printf("done\n");
    return 0;
}
