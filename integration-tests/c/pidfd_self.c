/* pidfds of the process itself across restarts, checked from inside at every step: one of
 * the process (PIDFD_NONBLOCK) and, where the kernel has PIDFD_THREAD (6.9), one of the
 * main thread. Each step signals the process through each pidfd (pidfd_send_signal) and
 * counts the signals its handler saw; a pidfd of a live process polls as not readable; the
 * pid the pidfd's fdinfo names is the process's own (what syscall(SYS_getpid) answers: the
 * pid the program knows, after a restart too); the non-blocking flag stays. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t got;
static void on_usr2(int sig) { (void)sig; got++; }

static int fdinfo_pid(int fd) {
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/self/fdinfo/%d", fd);
    FILE *f = fopen(path, "r");
    int pid = -2;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "Pid:", 4)) pid = atoi(line + 4);
    if (f) fclose(f);
    return pid;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 40;
    long ms = argc > 2 ? atol(argv[2]) : 20;
    setvbuf(stdout, NULL, _IONBF, 0);
    signal(SIGUSR2, on_usr2);
    int pfd = syscall(SYS_pidfd_open, getpid(), O_NONBLOCK);
    if (pfd < 0) { printf("FAIL: pidfd_open (errno %d)\n", errno); return 1; }
    int tfd = syscall(SYS_pidfd_open, getpid(), O_EXCL); /* PIDFD_THREAD */
    int fds[2] = { pfd, tfd };
    int want = 0;
    for (int s = 0; s < n; s++) {
        if (!(fcntl(pfd, F_GETFL) & O_NONBLOCK)) { printf("FAIL: step %d: PIDFD_NONBLOCK is gone\n", s); return 1; }
        for (int k = 0; k < 2; k++) {
            int fd = fds[k];
            if (fd < 0) continue;
            int real = (int)syscall(SYS_getpid);
            if (fdinfo_pid(fd) != real) { printf("FAIL: step %d: pidfd %d names pid %d, not this process\n", s, k, fdinfo_pid(fd)); return 1; }
            struct pollfd p = { .fd = fd, .events = POLLIN };
            if (poll(&p, 1, 0) != 0) { printf("FAIL: step %d: pidfd %d is readable: the process it names has exited\n", s, k); return 1; }
            if (syscall(SYS_pidfd_send_signal, fd, SIGUSR2, NULL, 0)) { printf("FAIL: step %d: pidfd_send_signal %d (errno %d)\n", s, k, errno); return 1; }
            want++;
            for (int i = 0; i < 10000 && got != want; i++) { struct timespec t = { 0, 100000 }; nanosleep(&t, NULL); }
            if (got != want) { printf("FAIL: step %d: %d signals arrived, not %d\n", s, (int)got, want); return 1; }
        }
        printf("step %d ok\n", s);
        struct timespec ts = { 0, ms * 1000000L };
        nanosleep(&ts, NULL);
    }
    printf("done\n");
    return 0;
}
