/* A timerfd shared by the processes of a job (issue 17): the root arms it (periodic, 10 ms)
 * and forks a worker; at step 3/4 of the way the worker disarms it and says so through a
 * pipe. From then on the root must find it disarmed (one timer for both: after a restart with
 * one timerfd per process, the root's would still run). Both read its expirations now and
 * then (non-blocking).
 *   job_timerfd STEPS MS */
#include <fcntl.h>
#include <stdint.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void nap(long ms) {
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 40;
    long ms = argc > 2 ? atol(argv[2]) : 40;
    setvbuf(stdout, NULL, _IONBF, 0);
    int tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK);
    struct itimerspec on = { { 0, 10000000 }, { 0, 10000000 } }, off, now;
    memset(&off, 0, sizeof off);
    int p[2];
    if (tfd < 0 || timerfd_settime(tfd, 0, &on, NULL) != 0 || pipe2(p, O_NONBLOCK) != 0) { printf("FAIL setup\n"); return 1; }
    uint64_t ticks;
    pid_t w = fork();
    if (w == 0) {
        close(p[0]);
        for (int i = 0; i < n; i++) {
            if (read(tfd, &ticks, sizeof ticks) < 0) { /* none since the last read */ }
            if (i == 3 * n / 4) {
                if (timerfd_settime(tfd, 0, &off, NULL) != 0 || write(p[1], "d", 1) != 1) _exit(3);
            }
            nap(ms);
        }
        _exit(0);
    }
    close(p[1]);
    int disarmed = 0;
    for (int i = 0; i < n; i++) {
        char c;
        if (!disarmed && read(p[0], &c, 1) == 1) disarmed = 1;
        if (timerfd_gettime(tfd, &now) != 0) { printf("FAIL gettime\n"); return 1; }
        int armed = now.it_value.tv_sec != 0 || now.it_value.tv_nsec != 0;
        if (disarmed && armed) { printf("FAIL: step %d: the worker disarmed the timer, and it runs here\n", i); return 1; }
        if (!disarmed && !armed) {
            /* The worker disarms the timer, then says so: between the two the timer is off
             * and the word not there yet. Wait for it a while before calling it stopped. */
            struct pollfd pf = { .fd = p[0], .events = POLLIN };
            if (poll(&pf, 1, 5000) == 1 && read(p[0], &c, 1) == 1) disarmed = 1;
            else { printf("FAIL: step %d: the timer stopped\n", i); return 1; }
        }
        if (read(tfd, &ticks, sizeof ticks) < 0) { /* none since the last read */ }
        printf("root step %d\n", i);
        nap(ms);
    }
    int st;
    if (waitpid(w, &st, 0) != w || !WIFEXITED(st) || WEXITSTATUS(st) != 0) { printf("FAIL worker %#x\n", st); return 1; }
    printf(disarmed ? "timer ok\n" : "FAIL: never disarmed\n");
    return !disarmed;
}
