/* Children made by vfork, as python3's subprocess makes them: each ends at once with its
 * own status (its number, modulo 200) and is reaped by the pid vfork gave, its status
 * checked; two forked workers live throughout and are reaped at the end. Prints "round N"
 * every 50 children: a child reaped under another's pid, or a status seen twice, says FAIL. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 60;
    setvbuf(stdout, NULL, _IONBF, 0);
    pid_t workers[2];
    for (int w = 0; w < 2; w++) {
        workers[w] = fork();
        if (workers[w] == 0) {
            for (;;) pause();
        }
    }
    long n = 0;
    for (int r = 0; r < rounds; r++) {
        for (int k = 0; k < 50; k++, n++) {
            pid_t pid = vfork();
            if (pid < 0) { printf("FAIL vfork: %s\n", strerror(errno)); return 1; }
            if (pid == 0) _exit((int)(n % 200));
            int st = 0;
            if (pid == workers[0] || pid == workers[1]) { printf("FAIL child %ld got a worker's pid %d\n", n, (int)pid); return 1; }
            if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != n % 200) {
                printf("FAIL child %ld (pid %d): status %#x\n", n, (int)pid, st);
                return 1;
            }
        }
        printf("round %d\n", r);
        struct timespec ts = { 0, 15000000L };
        nanosleep(&ts, NULL);
    }
    for (int w = 0; w < 2; w++) {
        int st = 0;
        kill(workers[w], SIGTERM);
        if (waitpid(workers[w], &st, 0) != workers[w] || !WIFSIGNALED(st) || WTERMSIG(st) != SIGTERM) {
            printf("FAIL worker %d: status %#x\n", w, st);
            return 1;
        }
    }
    printf("done\n");
    return 0;
}
