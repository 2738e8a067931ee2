/* A parent blocked in waitpid for its child while the job is checkpointed (issue 17): the
 * root forks a worker that prints one line per step and ends with 42, and waits for it by its
 * pid (waitpid, then the same with waitid). After a restart the wait, made again by the
 * kernel with the pid of before the restart, must still end with the worker's status.
 *   job_wait STEPS MS */
#include <errno.h>
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

static void worker(int n, long ms, int code) {
    for (int i = 0; i < n; i++) {
        printf("worker %d step %d\n", code, i);
        nap(ms);
    }
    _exit(code);
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 40;
    long ms = argc > 2 ? atol(argv[2]) : 40;
    setvbuf(stdout, NULL, _IONBF, 0);
    pid_t w = fork();
    if (w == 0) worker(n, ms, 42);
    int st = 0;
    pid_t r = waitpid(w, &st, 0);
    if (r != w || !WIFEXITED(st) || WEXITSTATUS(st) != 42) {
        printf("FAIL: waitpid %d (errno %d) status %#x\n", (int)r, errno, st);
        return 1;
    }
    printf("first worker ended with 42\n");
    w = fork();
    if (w == 0) worker(n, ms, 43);
    siginfo_t si;
    memset(&si, 0, sizeof si);
    if (waitid(P_PID, (id_t)w, &si, WEXITED) != 0 || si.si_pid != w || si.si_status != 43) {
        printf("FAIL: waitid (errno %d) pid %d status %d\n", errno, (int)si.si_pid, si.si_status);
        return 1;
    }
    printf("second worker ended with 43\n");
    return 0;
}
