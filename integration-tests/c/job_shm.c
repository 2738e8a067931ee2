/* A parent and a forked child sharing anonymous shared memory (MAP_SHARED before the fork):
 * the child counts in it, the parent prints steps. A job checkpoint must name the shared
 * memory (a restart would give each process its own copy), never drop the sharing silently. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 40;
    setvbuf(stdout, NULL, _IONBF, 0);
    volatile long *counter = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (counter == MAP_FAILED) { printf("FAIL mmap\n"); return 1; }
    pid_t kid = fork();
    if (kid == 0) {
        for (;;) {
            (*counter)++;
            struct timespec ts = { 0, 5000000L };
            nanosleep(&ts, NULL);
        }
    }
    for (int i = 0; i < n; i++) {
        printf("step %d\n", i);
        struct timespec ts = { 0, 20000000L };
        nanosleep(&ts, NULL);
    }
    kill(kid, SIGKILL);
    waitpid(kid, NULL, 0);
    printf("done\n");
    return 0;
}
