/* File locks and a pipe's capacity. The program holds an exclusive flock on a.lock, POSIX
 * locks on b.lock (write on bytes 10-19, read from 100 to the end of file), an OFD write
 * lock on c.lock, and a pipe enlarged to 1 MiB that always holds 100 KiB (more than a
 * default pipe can: a restart that made the pipe again at its default size would hang
 * writing the data back). At every step it checks from inside, through new open file
 * descriptions of the same files (flock and OFD locks conflict across open file
 * descriptions, OFD locks with POSIX ones even in one process; opened once and never
 * closed: closing any descriptor of a file drops the process's POSIX locks on it), that
 * every lock is still held, and that the pipe has its size and a byte stream without a gap
 * or a repeat. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#define FILL (100 * 1024)
#define CHUNK 1024

static unsigned long wr = 0, rd = 0;

static int held_flock(int fd) {
    int r = flock(fd, LOCK_EX | LOCK_NB);
    return r != 0 && errno == EWOULDBLOCK;
}

/* The type of the lock conflicting with a write lock on [start, start+len), seen through a
 * new open file description (F_UNLCK: none). */
static int conflict(int fd, off_t start, off_t len) {
    struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = start, .l_len = len };
    if (fcntl(fd, F_OFD_GETLK, &fl) != 0) return -1;
    return fl.l_type;
}

static int lock(int fd, int cmd, short type, off_t start, off_t len) {
    struct flock fl = { .l_type = type, .l_whence = SEEK_SET, .l_start = start, .l_len = len };
    return fcntl(fd, cmd, &fl);
}

static int feed(int w, int n) {
    unsigned char b[CHUNK];
    for (int i = 0; i < n; i++) b[i] = (unsigned char)((wr + i) * 31 + ((wr + i) >> 8));
    if (write(w, b, n) != n) return 0;
    wr += n;
    return 1;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 40;
    long ms = argc > 2 ? atol(argv[2]) : 20;
    setvbuf(stdout, NULL, _IONBF, 0);
    int a = open("a.lock", O_RDWR | O_CREAT | O_TRUNC, 0644);
    int b = open("b.lock", O_RDWR | O_CREAT | O_TRUNC, 0644);
    int c = open("c.lock", O_RDWR | O_CREAT | O_TRUNC, 0644);
    int ca = open("a.lock", O_RDWR), cb = open("b.lock", O_RDWR), cc = open("c.lock", O_RDWR);
    int p[2];
    if (a < 0 || b < 0 || c < 0 || ca < 0 || cb < 0 || cc < 0 || pipe(p) != 0) { printf("FAIL: setup\n"); return 1; }
    if (flock(a, LOCK_EX | LOCK_NB) || lock(b, F_SETLK, F_WRLCK, 10, 10) || lock(b, F_SETLK, F_RDLCK, 100, 0) ||
        lock(c, F_OFD_SETLK, F_WRLCK, 0, 0)) {
        printf("FAIL: locking: %s\n", strerror(errno));
        return 1;
    }
    if (fcntl(p[1], F_SETPIPE_SZ, 1 << 20) < (1 << 20)) { printf("FAIL: F_SETPIPE_SZ\n"); return 1; }
    for (int i = 0; i < FILL / CHUNK; i++)
        if (!feed(p[1], CHUNK)) { printf("FAIL: fill\n"); return 1; }
    for (int s = 0; s < n; s++) {
        if (!held_flock(ca)) { printf("FAIL: the flock on a.lock is gone\n"); return 1; }
        int t1 = conflict(cb, 10, 10), t2 = conflict(cb, 5000, 1), t3 = conflict(cb, 30, 10);
        if (t1 != F_WRLCK || t2 != F_RDLCK || t3 != F_UNLCK) {
            printf("FAIL: b.lock locks: %d %d %d\n", t1, t2, t3);
            return 1;
        }
        if (conflict(cc, 0, 1) != F_WRLCK) { printf("FAIL: the OFD lock on c.lock is gone\n"); return 1; }
        int size = fcntl(p[0], F_GETPIPE_SZ), queued = -1;
        ioctl(p[0], FIONREAD, &queued);
        if (size != 1 << 20 || queued != FILL) { printf("FAIL: pipe size %d, %d bytes queued\n", size, queued); return 1; }
        unsigned char buf[CHUNK];
        if (read(p[0], buf, CHUNK) != CHUNK) { printf("FAIL: pipe read\n"); return 1; }
        for (int i = 0; i < CHUNK; i++, rd++)
            if (buf[i] != (unsigned char)(rd * 31 + (rd >> 8))) { printf("FAIL: pipe byte %lu\n", rd); return 1; }
        if (!feed(p[1], CHUNK)) { printf("FAIL: pipe write\n"); return 1; }
        printf("step %d\n", s);
        struct timespec ts = { 0, ms * 1000000L };
        nanosleep(&ts, NULL);
    }
    printf("done\n");
    return 0;
}
