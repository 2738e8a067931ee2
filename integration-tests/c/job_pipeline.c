/* Two processes of a job talking over two pipes: the root sends numbers ahead of time to a
 * worker (fork + exec of itself; with a third argument "fork", fork alone, holding a fourth
 * argument's MiB of data if given) through one pipe, the worker answers x*x+1 for each through
 * the other, a little slower than it is sent, so that both pipes hold bytes in flight at any
 * moment. The root checks every answer in order (a byte lost or seen twice after a restart
 * breaks the sequence), then ends the worker with -1 and reaps it by its pid.
 * With a third argument "fifo" the two pipes are named pipes (FIFOs) in the working
 * directory, opened by path by each process, and the root also keeps numbers in flight
 * through a named pipe of its own (both ends its, one opened non-blocking): every number read
 * back is checked. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void nap(long ms) {
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

static int full(int fd, void *buf, size_t n, int writing) {
    char *p = buf;
    while (n > 0) {
        ssize_t k = writing ? write(fd, p, n) : read(fd, p, n);
        if (k <= 0) return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

static int worker(int rfd, int wfd, long ms) {
    for (;;) {
        int x;
        if (full(rfd, &x, sizeof x, 0) != 0) return 3;
        if (x < 0) return 0;
        int y = x * x + 1;
        nap(ms / 2);
        if (full(wfd, &y, sizeof y, 1) != 0) return 4;
    }
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "worker") == 0) return worker(atoi(argv[2]), atoi(argv[3]), atol(argv[4]));
    int n = argc > 1 ? atoi(argv[1]) : 40;
    long ms = argc > 2 ? atol(argv[2]) : 40;
    int fork_only = argc > 3 && strcmp(argv[3], "fork") == 0;
    setvbuf(stdout, NULL, _IONBF, 0);
    int fifo = argc > 3 && strcmp(argv[3], "fifo") == 0;
    int a[2], b[2], own_r = -1, own_w = -1;
    if (fifo) {
        const char *names[] = { "req.fifo", "ans.fifo", "own.fifo" };
        for (int k = 0; k < 3; k++) {
            unlink(names[k]);
            if (mkfifo(names[k], 0600) != 0) { printf("FAIL mkfifo: %s\n", strerror(errno)); return 1; }
        }
        own_r = open("own.fifo", O_RDONLY | O_NONBLOCK);
        own_w = open("own.fifo", O_WRONLY);
        if (own_r < 0 || own_w < 0) { printf("FAIL open own.fifo: %s\n", strerror(errno)); return 1; }
    } else if (pipe(a) != 0 || pipe(b) != 0) { printf("FAIL pipe\n"); return 1; }
    pid_t kid = fork();
    if (kid == 0) {
        char r[16], w[16], m[24];
        if (fifo) {
            a[0] = open("req.fifo", O_RDONLY);
            b[1] = open("ans.fifo", O_WRONLY);
            if (a[0] < 0 || b[1] < 0) _exit(5);
        } else {
            close(a[1]);
            close(b[0]);
        }
        if (fork_only) {
            /* Optional ballast (MiB of pseudo-random data): a worker slower to restore. */
            size_t mib = argc > 4 ? strtoul(argv[4], NULL, 10) : 0;
            unsigned long long x = 88172645463325252ull, *m = mib ? malloc(mib << 20) : NULL;
            for (size_t i = 0; m && i < (mib << 20) / 8; i++) { x ^= x << 13; x ^= x >> 7; x ^= x << 17; m[i] = x; }
            _exit(worker(a[0], b[1], ms));
        }
        snprintf(r, sizeof r, "%d", a[0]);
        snprintf(w, sizeof w, "%d", b[1]);
        snprintf(m, sizeof m, "%ld", ms);
        execl("/proc/self/exe", argv[0], "worker", r, w, m, (char *)NULL);
        _exit(127);
    }
    if (fifo) {
        a[1] = open("req.fifo", O_WRONLY);
        b[0] = open("ans.fifo", O_RDONLY);
        if (a[1] < 0 || b[0] < 0) { printf("FAIL open: %s\n", strerror(errno)); return 1; }
    } else {
        close(a[0]);
        close(b[1]);
    }
    int sent = 0, own_sent = 0;
    for (int i = 0; i < n; i++) {
        while (sent < n && sent < i + 6) {
            if (full(a[1], &sent, sizeof sent, 1) != 0) { printf("FAIL write at step %d\n", i); return 1; }
            sent++;
        }
        int y;
        if (full(b[0], &y, sizeof y, 0) != 0) { printf("FAIL read at step %d\n", i); return 1; }
        if (y != i * i + 1) { printf("FAIL step %d: got %d, want %d\n", i, y, i * i + 1); return 1; }
        if (fifo) {
            /* Three numbers ahead in the root's own named pipe; one read back per step. */
            while (own_sent < i + 3) {
                if (full(own_w, &own_sent, sizeof own_sent, 1) != 0) { printf("FAIL own write\n"); return 1; }
                own_sent++;
            }
            int z;
            if (full(own_r, &z, sizeof z, 0) != 0 || z != i) { printf("FAIL step %d: own.fifo gave %d\n", i, z); return 1; }
        }
        printf("root step %d got %d\n", i, y);
        nap(ms);
    }
    int end = -1, st = 0;
    full(a[1], &end, sizeof end, 1);
    if (waitpid(kid, &st, 0) != kid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        printf("FAIL worker status %#x\n", st);
        return 1;
    }
    printf("worker ok\n");
    return 0;
}
