/* A program with child processes, which a single process's image does not hold: a child
 * that sleeps (a worker), and one that has exited and is not reaped (a zombie). crum must
 * name both when it writes an image (a warning; an error with --strict), not drop them
 * silently. Prints its steps; at the end it kills and reaps what is still there. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 40;
    long ms = argc > 2 ? atol(argv[2]) : 20;
    setvbuf(stdout, NULL, _IONBF, 0);
    pid_t worker = fork();
    if (worker == 0) {
        for (;;) pause();
    }
    pid_t zombie = fork();
    if (zombie == 0) _exit(7);
    printf("children %d %d\n", (int)worker, (int)zombie);
    for (int s = 0; s < n; s++) {
        printf("step %d\n", s);
        struct timespec ts = { 0, ms * 1000000L };
        nanosleep(&ts, NULL);
    }
    kill(worker, SIGKILL);
    int st;
    waitpid(worker, &st, 0);
    waitpid(zombie, &st, 0);
    printf("done\n");
    return 0;
}
