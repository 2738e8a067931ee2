/* A job of three processes: the root starts two workers (fork + exec of itself), prints one
 * line per step, and at the end reaps each worker by the pid fork gave it, checking the exit
 * status (a checksum of the worker's whole run). Every step, each worker checks that its
 * pid and its parent's are the ones it started with, and the root that each worker is
 * there (kill 0) and that /proc/<worker pid> names it. A worker that finds otherwise exits
 * with 99; the root then reports the mismatch. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void nap(long ms) {
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

/* The first free descriptor: 3 in every process of this job at its end, before and after
 * restarts (none of the job's links leaks into the program's range). */
static int first_free_fd(void) {
    int fd = dup(0);
    if (fd >= 0) close(fd);
    return fd;
}

static unsigned worker_sum(int k, int n) {
    unsigned sum = (unsigned)k;
    for (int i = 0; i < n; i++) sum = sum * 31 + (unsigned)i;
    return sum % 200 + (unsigned)k;
}

static int worker(int k, int n, long ms, pid_t parent) {
    pid_t me = getpid();
    unsigned sum = (unsigned)k;
    for (int i = 0; i < n; i++) {
        if (getpid() != me || getppid() != parent) return 99;
        sum = sum * 31 + (unsigned)i;
        nap(ms);
    }
    if (first_free_fd() != 3) return 98;
    return (int)(sum % 200 + (unsigned)k);
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "worker") == 0)
        return worker(atoi(argv[2]), atoi(argv[3]), atol(argv[4]), (pid_t)atol(argv[5]));
    int n = argc > 1 ? atoi(argv[1]) : 40;
    long ms = argc > 2 ? atol(argv[2]) : 50;
    setvbuf(stdout, NULL, _IONBF, 0);
    pid_t kids[2];
    char ns[16], mss[24], pp[24], ks[8];
    snprintf(ns, sizeof ns, "%d", n);
    snprintf(mss, sizeof mss, "%ld", ms);
    snprintf(pp, sizeof pp, "%d", (int)getpid());
    for (int k = 0; k < 2; k++) {
        snprintf(ks, sizeof ks, "%d", k + 1);
        kids[k] = fork();
        if (kids[k] == 0) {
            execl("/proc/self/exe", argv[0], "worker", ks, ns, mss, pp, (char *)NULL);
            _exit(127);
        }
    }
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < 2; k++) {
            char path[64];
            snprintf(path, sizeof path, "/proc/%d", (int)kids[k]);
            if (kill(kids[k], 0) != 0 || access(path, F_OK) != 0) {
                printf("step %d: worker %d (pid %d) is gone\n", i, k + 1, (int)kids[k]);
                return 1;
            }
        }
        printf("root step %d\n", i);
        nap(ms);
    }
    int bad = 0;
    if (first_free_fd() != 3) {
        printf("descriptor %d is open\n", first_free_fd() - 1);
        bad = 1;
    }
    for (int k = 0; k < 2; k++) {
        int st = 0;
        pid_t r = waitpid(kids[k], &st, 0);
        if (r != kids[k] || !WIFEXITED(st) || (unsigned)WEXITSTATUS(st) != worker_sum(k + 1, n)) {
            printf("worker %d: waitpid %d status %#x, expected exit %u\n", k + 1, (int)r, st, worker_sum(k + 1, n));
            bad = 1;
        }
    }
    printf(bad ? "workers wrong\n" : "workers ok\n");
    return bad;
}
