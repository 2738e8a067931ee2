/* A program with child processes: a child that sleeps (a worker, a member of the job) and
 * one that has exited with 7 and is not reaped (a zombie, made again by a restart). Prints
 * its steps; at the end it kills the worker and reaps both by their pids, checking how each
 * ended. */
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
    int st = 0, sz = 0;
    pid_t w = waitpid(worker, &st, 0);
    pid_t z = waitpid(zombie, &sz, 0);
    if (w != worker || !WIFSIGNALED(st) || WTERMSIG(st) != SIGKILL) { printf("FAIL worker: %d %#x\n", (int)w, st); return 1; }
    if (z != zombie || !WIFEXITED(sz) || WEXITSTATUS(sz) != 7) { printf("FAIL zombie: %d %#x\n", (int)z, sz); return 1; }
    printf("done\n");
    return 0;
}
