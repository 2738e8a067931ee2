/* pidfds of other processes of the job across restarts (CRIU's pidfd_child, pidfd_kill),
 * checked from inside at every step. The parent holds a pidfd of its child (PIDFD_NONBLOCK)
 * and one of its grandchild. Each step it signals each of them through its pidfd
 * (pidfd_send_signal) and reads from a pipe the byte that process's handler writes back
 * ('c' from the child, 'g' from the grandchild): each pidfd still names that very process;
 * a pidfd of a live process polls as not readable; the non-blocking flag stays. At the end
 * the grandchild is killed through its pidfd, which then polls readable, and the child
 * likewise, reaped through its pidfd (waitid P_PIDFD) with the status SIGKILL gives. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef P_PIDFD
#define P_PIDFD 3
#endif

static int back = -1;
static char who;
static void on_usr1(int sig) {
    (void)sig;
    int e = errno;
    if (write(back, &who, 1) != 1) _exit(3);
    errno = e;
}

static int pidfd_open(pid_t pid, unsigned flags) { return (int)syscall(SYS_pidfd_open, pid, flags); }
static int pidfd_signal(int fd, int sig) { return (int)syscall(SYS_pidfd_send_signal, fd, sig, NULL, 0); }

/* One byte from the pipe, waiting through signals. */
static int read_byte(int fd) {
    char c;
    for (;;) {
        ssize_t n = read(fd, &c, 1);
        if (n == 1) return c;
        if (n < 0 && errno == EINTR) continue;
        return -1;
    }
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 40;
    long ms = argc > 2 ? atol(argv[2]) : 20;
    setvbuf(stdout, NULL, _IONBF, 0);
    int p[2], ready[2];
    if (pipe(p) || pipe(ready)) { printf("FAIL: pipe\n"); return 1; }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    sa.sa_flags = SA_RESTART;
    pid_t child = fork();
    if (child < 0) { printf("FAIL: fork\n"); return 1; }
    if (child == 0) {
        close(p[0]);
        close(ready[0]);
        back = p[1];
        who = 'c';
        sigaction(SIGUSR1, &sa, NULL);
        pid_t g = fork();
        if (g < 0) _exit(2);
        if (g == 0) {
            who = 'g';
            pid_t me = getpid();
            if (write(ready[1], &me, sizeof me) != sizeof me) _exit(2);
            close(ready[1]);
            for (;;) pause();
        }
        close(ready[1]);
        for (;;) pause();
    }
    close(p[1]);
    close(ready[1]);
    pid_t g;
    if (read(ready[0], &g, sizeof g) != sizeof g) { printf("FAIL: no grandchild\n"); return 1; }
    close(ready[0]);
    int cfd = pidfd_open(child, O_NONBLOCK);
    int gfd = pidfd_open(g, 0);
    if (cfd < 0 || gfd < 0) { printf("FAIL: pidfd_open (errno %d)\n", errno); return 1; }
    int fds[2] = { cfd, gfd };
    const char want[2] = { 'c', 'g' };
    for (int s = 0; s < n; s++) {
        if (!(fcntl(cfd, F_GETFL) & O_NONBLOCK)) { printf("FAIL: step %d: PIDFD_NONBLOCK is gone\n", s); return 1; }
        for (int k = 0; k < 2; k++) {
            struct pollfd q = { .fd = fds[k], .events = POLLIN };
            if (poll(&q, 1, 0) != 0) { printf("FAIL: step %d: pidfd of the %s is readable: it has exited\n", s, k ? "grandchild" : "child"); return 1; }
            if (pidfd_signal(fds[k], SIGUSR1)) { printf("FAIL: step %d: pidfd_send_signal to the %s (errno %d)\n", s, k ? "grandchild" : "child", errno); return 1; }
            int c = read_byte(p[0]);
            if (c != want[k]) { printf("FAIL: step %d: the %s's pidfd reached '%c', not '%c'\n", s, k ? "grandchild" : "child", c, want[k]); return 1; }
        }
        printf("step %d ok\n", s);
        struct timespec ts = { 0, ms * 1000000L };
        nanosleep(&ts, NULL);
    }
    if (pidfd_signal(gfd, SIGKILL)) { printf("FAIL: killing the grandchild (errno %d)\n", errno); return 1; }
    struct pollfd q = { .fd = gfd, .events = POLLIN };
    if (poll(&q, 1, 60000) != 1) { printf("FAIL: the grandchild's pidfd did not become readable\n"); return 1; }
    if (pidfd_signal(cfd, SIGKILL)) { printf("FAIL: killing the child (errno %d)\n", errno); return 1; }
    siginfo_t si;
    memset(&si, 0, sizeof si);
    for (;;) {
        /* Blocking, although the pidfd is non-blocking: waitid waits unless WNOHANG. */
        if (waitid(P_PIDFD, cfd, &si, WEXITED) == 0) break;
        if (errno == EAGAIN) { struct timespec t = { 0, 1000000 }; nanosleep(&t, NULL); continue; }
        if (errno != EINTR) { printf("FAIL: waitid P_PIDFD (errno %d)\n", errno); return 1; }
    }
    if (si.si_code != CLD_KILLED || si.si_status != SIGKILL) { printf("FAIL: the child ended with code %d status %d\n", si.si_code, si.si_status); return 1; }
    printf("done\n");
    return 0;
}
