/* An eventfd shared by the processes of a job (issue 17): the root makes it (non-blocking)
 * and forks a worker, which adds 1 to its counter at every step; the root takes the counter
 * at every step and keeps the total. At the end the root reaps the worker and takes what is
 * left: the total must be the worker's number of steps (after a restart with one eventfd per
 * process, the worker's additions would never reach the root).
 *   job_eventfd STEPS MS */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void nap(long ms) {
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

static uint64_t take(int fd) {
    uint64_t v = 0;
    if (read(fd, &v, sizeof v) != sizeof v) return 0; /* EAGAIN: nothing added since */
    return v;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 40;
    long ms = argc > 2 ? atol(argv[2]) : 40;
    setvbuf(stdout, NULL, _IONBF, 0);
    int efd = eventfd(0, EFD_NONBLOCK);
    if (efd < 0) { printf("FAIL eventfd\n"); return 1; }
    pid_t w = fork();
    if (w == 0) {
        for (int i = 0; i < n; i++) {
            uint64_t one = 1;
            if (write(efd, &one, sizeof one) != sizeof one) _exit(3);
            nap(ms);
        }
        _exit(0);
    }
    uint64_t total = 0;
    for (int i = 0; i < n; i++) {
        total += take(efd);
        printf("root step %d\n", i);
        nap(ms);
    }
    int st;
    if (waitpid(w, &st, 0) != w || !WIFEXITED(st) || WEXITSTATUS(st) != 0) { printf("FAIL worker %#x\n", st); return 1; }
    total += take(efd);
    printf(total == (uint64_t)n ? "total ok\n" : "FAIL: total %llu, expected %d\n", (unsigned long long)total, n);
    return total != (uint64_t)n;
}
