/* State a restart cannot bring back exactly, which a checkpoint must refuse (no image,
 * whatever --strict says) naming it, leaving the program running: `aio` an asynchronous
 * I/O context (io_setup), `private` a deleted file mapped privately and still open (pages
 * not written yet follow what is written through the descriptor), `memfd` a memfd open in
 * a child too (through /proc/<pid>/fd: another open file description), `clone` a child
 * sharing the descriptor table (clone with CLONE_FILES), `owner` a pipe whose I/O signals
 * go to a process outside the job (F_SETOWN of the parent, `crum run`), `rseq` an rseq area of
 * the program's own instead of the C library's (a restart registered the C library's: CRIU's
 * rseq00; skipped, printing the same, where the kernel or C library has no rseq), `peercred` a
 * socket pair made while the effective user and group were 1 (its SO_PEERCRED; as root
 * only: CRIU's sock_peercred). Prints its steps; at every step it checks the state is as
 * it made it. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <linux/aio_abi.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char stack[65536] __attribute__((aligned(16)));

/* The program's own rseq area (struct rseq, 32 bytes, aligned to 32). */
static __thread volatile unsigned int own_rseq[8] __attribute__((aligned(32)));
extern const ptrdiff_t __rseq_offset __attribute__((weak));
extern const unsigned int __rseq_size __attribute__((weak));

static int sleeper(void *arg) {
    (void)arg;
    for (;;) pause();
    return 0;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "aio";
    int n = argc > 2 ? atoi(argv[2]) : 40;
    long ms = argc > 3 ? atol(argv[3]) : 20;
    setvbuf(stdout, NULL, _IONBF, 0);
    aio_context_t ctx = 0;
    char *map = NULL;
    int fd = -1;
    pid_t child = -1;
    if (!strcmp(mode, "aio")) {
        if (syscall(SYS_io_setup, 8, &ctx) != 0) { printf("FAIL: io_setup\n"); return 1; }
    } else if (!strcmp(mode, "private")) {
        fd = open("private.tmp", O_RDWR | O_CREAT | O_TRUNC, 0600);
        if (fd < 0 || unlink("private.tmp") != 0 || pwrite(fd, "a", 1, 0) != 1 || ftruncate(fd, 4096) != 0) { printf("FAIL: file\n"); return 1; }
        map = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED) { printf("FAIL: mmap\n"); return 1; }
    } else if (!strcmp(mode, "memfd")) {
        fd = memfd_create("crum-two", 0);
        if (fd < 0 || write(fd, "x", 1) != 1) { printf("FAIL: memfd\n"); return 1; }
        pid_t parent = getpid();
        int ready[2];
        if (pipe(ready)) return 1;
        child = fork();
        if (child == 0) {
            char p[64];
            snprintf(p, sizeof p, "/proc/%d/fd/%d", parent, fd);
            int own = open(p, O_RDONLY);
            close(fd);
            if (own < 0 || write(ready[1], "r", 1) != 1) _exit(1);
            for (;;) pause();
        }
        char c;
        if (read(ready[0], &c, 1) != 1) { printf("FAIL: child\n"); return 1; }
    } else if (!strcmp(mode, "clone")) {
        child = clone(sleeper, stack + sizeof stack, CLONE_FILES | SIGCHLD, NULL);
        if (child < 0) { printf("FAIL: clone\n"); return 1; }
    } else if (!strcmp(mode, "owner")) {
        int p[2];
        if (pipe(p)) return 1;
        if (fcntl(p[0], F_SETOWN, getppid()) != 0) { printf("FAIL: F_SETOWN\n"); return 1; }
        fd = p[0];
    } else if (!strcmp(mode, "peercred")) {
        int sp[2];
        if (setegid(1) || seteuid(1) || socketpair(AF_UNIX, SOCK_STREAM, 0, sp) || seteuid(0) || setegid(0)) {
            printf("FAIL: socket pair as uid 1\n");
            return 1;
        }
    } else if (!strcmp(mode, "rseq")) {
        /* Unregister the C library's area, register our own. */
        if (&__rseq_size && __rseq_size) {
            void *glibc = (char *)__builtin_thread_pointer() + __rseq_offset;
            unsigned int len = __rseq_size < 32 ? 32 : __rseq_size;
            if (syscall(SYS_rseq, glibc, len, 1, 0x53053053) != 0) { printf("FAIL: rseq unregister\n"); return 1; }
            if (syscall(SYS_rseq, own_rseq, 32, 0, 0x53053053) != 0) { printf("FAIL: rseq register\n"); return 1; }
        }
    }
    for (int s = 0; s < n; s++) {
        if (map && map[0] != 'a') { printf("FAIL: mapping\n"); return 1; }
        if (ctx && syscall(SYS_io_destroy, 0) == 0) { printf("FAIL: io_destroy\n"); return 1; }
        if (!strcmp(mode, "rseq") && &__rseq_size && __rseq_size &&
            !(syscall(SYS_rseq, own_rseq, 32, 0, 0x53053053) == -1 && errno == EBUSY)) { printf("FAIL: own rseq area not registered\n"); return 1; }
        printf("step %d\n", s);
        struct timespec ts = { 0, ms * 1000000L };
        nanosleep(&ts, NULL);
    }
    if (child > 0) {
        kill(child, SIGKILL);
        waitpid(child, NULL, 0);
    }
    if (ctx) syscall(SYS_io_destroy, ctx);
    printf("done\n");
    return 0;
}
