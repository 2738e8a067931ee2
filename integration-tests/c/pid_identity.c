#define _GNU_SOURCE
/* The process's ids as the program sees them stay those it started with, across restarts:
 * getpid, gettid of the main thread, getpgrp/getpgid/getsid, kill and sigqueue to its own pid
 * (delivered to itself, with the value), tgkill, the same through syscall(), and a forked
 * child's getppid; calls given
 * its own pid (getpriority/setpriority, sched_getscheduler/getparam/getaffinity, prlimit,
 * pidfd_open) act on it; /proc/<its pid>/… and /proc/self/task/<its pid>/… name it (open,
 * fopen, stat, access, readlink, opendir), and a socket pair's SO_PEERCRED names it. Checked from inside at every step; the output has
 * no ids in it. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t got, got_value;

static void handler(int sig, siginfo_t *si, void *uc) {
    (void)sig; (void)uc;
    got++;
    if (si->si_code == SI_QUEUE) got_value = si->si_value.sival_int;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 40;
    long ms = argc > 2 ? atol(argv[2]) : 20;
    setvbuf(stdout, NULL, _IONBF, 0);
    struct sigaction sa = { .sa_sigaction = handler, .sa_flags = SA_SIGINFO | SA_RESTART };
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR2, &sa, NULL);
    pid_t pid = getpid(), pgrp = getpgrp(), sid = getsid(0);
    /* A socket pair's peer credentials name this process (a restart makes the pair again). */
    int sp[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sp)) { printf("FAIL: socketpair\n"); return 1; }
    for (int i = 0; i < n; i++) {
        struct ucred uc;
        socklen_t ul = sizeof uc;
        if (getsockopt(sp[0], SOL_SOCKET, SO_PEERCRED, &uc, &ul) || uc.pid != pid || uc.uid != geteuid()) {
            printf("FAIL: SO_PEERCRED of a socket pair names pid %d at step %d\n", uc.pid == pid ? 0 : 1, i);
            return 1;
        }
        if (getpid() != pid) { printf("FAIL: getpid changed at step %d\n", i); return 1; }
        if (gettid() != pid) { printf("FAIL: main thread's gettid is not the pid at step %d\n", i); return 1; }
        if (getpgrp() != pgrp || getpgid(0) != pgrp || getpgid(pid) != pgrp) { printf("FAIL: process group at step %d\n", i); return 1; }
        if (getsid(pid) != sid) { printf("FAIL: session at step %d\n", i); return 1; }
        int before = got;
        if (kill(pid, SIGUSR2) != 0 || got != before + 1) { printf("FAIL: kill(getpid()) at step %d (errno %d)\n", i, errno); return 1; }
        union sigval v = { .sival_int = 1000 + i };
        if (sigqueue(pid, SIGUSR2, v) != 0 || got != before + 2 || got_value != 1000 + i) { printf("FAIL: sigqueue at step %d\n", i); return 1; }
        if (tgkill(pid, gettid(), SIGUSR2) != 0 || got != before + 3) { printf("FAIL: tgkill at step %d\n", i); return 1; }
        /* The C library's syscall() too (CRIU's zdtm library waits on syscall(__NR_gettid)). */
        if (syscall(SYS_getpid) != pid || syscall(SYS_gettid) != pid || syscall(SYS_getpgid, 0) != pgrp) {
            printf("FAIL: syscall(SYS_getpid/gettid/getpgid) at step %d\n", i);
            return 1;
        }
        if (syscall(SYS_kill, pid, SIGUSR2) != 0 || got != before + 4) { printf("FAIL: syscall(SYS_kill, getpid()) at step %d\n", i); return 1; }
        char path[64], buf[256];
        snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
        FILE *f = fopen(path, "r");
        int statpid = 0;
        if (!f || fscanf(f, "%d", &statpid) != 1) { printf("FAIL: %s at step %d\n", path, i); return 1; }
        fclose(f);
        /* /proc/<pid>/stat names the kernel's pid: the one /proc/self names. */
        snprintf(path, sizeof path, "/proc/self/stat");
        f = fopen(path, "r");
        int selfpid = -1;
        if (!f || fscanf(f, "%d", &selfpid) != 1 || selfpid != statpid) { printf("FAIL: /proc/<pid> is not /proc/self at step %d\n", i); return 1; }
        fclose(f);
        snprintf(path, sizeof path, "/proc/%d/task/%d/comm", (int)pid, (int)pid);
        int fd = open(path, O_RDONLY);
        if (fd < 0 || read(fd, buf, sizeof buf) <= 0 || strncmp(buf, "pid_identity", 12)) { printf("FAIL: %s at step %d\n", path, i); return 1; }
        close(fd);
        struct stat st, st_self;
        snprintf(path, sizeof path, "/proc/%d", (int)pid);
        if (stat(path, &st) || stat("/proc/self", &st_self) || st.st_ino != st_self.st_ino || access(path, R_OK)) { printf("FAIL: stat %s at step %d\n", path, i); return 1; }
        snprintf(path, sizeof path, "/proc/%d/exe", (int)pid);
        ssize_t ln = readlink(path, buf, sizeof buf - 1);
        if (ln <= 0) { printf("FAIL: readlink %s at step %d\n", path, i); return 1; }
        snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
        DIR *d = opendir(path);
        if (!d) { printf("FAIL: opendir %s at step %d\n", path, i); return 1; }
        closedir(d);
        errno = 0;
        int nice_now = getpriority(PRIO_PROCESS, 0);
        if (setpriority(PRIO_PROCESS, pid, nice_now) || getpriority(PRIO_PROCESS, pid) != nice_now || errno) {
            printf("FAIL: set/getpriority of the pid at step %d (errno %d)\n", i, errno);
            return 1;
        }
        struct sched_param sp;
        cpu_set_t cpus;
        if (sched_getscheduler(pid) != SCHED_OTHER || sched_getparam(pid, &sp) || sched_getaffinity(pid, sizeof cpus, &cpus) || CPU_COUNT(&cpus) < 1) {
            printf("FAIL: sched_* of the pid at step %d (errno %d)\n", i, errno);
            return 1;
        }
        struct rlimit rl;
        if (prlimit(pid, RLIMIT_NOFILE, NULL, &rl)) { printf("FAIL: prlimit of the pid at step %d (errno %d)\n", i, errno); return 1; }
        int pfd = pidfd_open(pid, 0);
        if (pfd < 0) { printf("FAIL: pidfd_open of the pid at step %d (errno %d)\n", i, errno); return 1; }
        close(pfd);
        if (i % 10 == 0) {
            pid_t c = fork();
            if (c == 0) _exit(getppid() == pid ? 0 : 7);
            int st = 0;
            pid_t w = waitpid(c, &st, 0);
            if (w != c || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
                /* (exit 7: the child saw another parent; the rest says what else went wrong) */
                printf("FAIL: the child saw another parent at step %d (fork %d, waitpid %d, status %#x, errno %d, pid %d)\n",
                       i, (int)c, (int)w, st, errno, (int)pid);
                return 1;
            }
        }
        printf("step %d ok\n", i);
        struct timespec ts = { 0, ms * 1000000L };
        nanosleep(&ts, NULL);
    }
    printf("done\n");
    return 0;
}
