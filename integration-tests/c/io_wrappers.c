/* Every C library I/O entry point crum wraps (so that system calls on managed memory work,
 * issue 4), called on ordinary memory: results, errno after a failure (EBADF, EFAULT,
 * ESPIPE, ENOTSOCK: the wrappers must not turn a fault into anything else), and errno left
 * alone by a call that succeeds. Prints "ok <check>" per check and PASS at the end; the first
 * failed check prints "FAIL <check>: ..." and exits 1. Works the same without crum. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

/* The fortified entry points (what -D_FORTIFY_SOURCE builds call), declared by hand: without
 * _FORTIFY_SOURCE the headers do not. */
ssize_t __read_chk(int, void *, size_t, size_t);
ssize_t __pread_chk(int, void *, size_t, off_t, size_t);
ssize_t __pread64_chk(int, void *, size_t, off64_t, size_t);
ssize_t __recv_chk(int, void *, size_t, size_t, int);
ssize_t __recvfrom_chk(int, void *, size_t, size_t, int, struct sockaddr *, socklen_t *);
size_t __fread_chk(void *, size_t, size_t, size_t, FILE *);
size_t __fread_unlocked_chk(void *, size_t, size_t, size_t, FILE *);

#define SENTINEL 4242

static void fail(const char *what, const char *fmt, ...) {
    int e = errno;
    va_list ap;
    va_start(ap, fmt);
    printf("FAIL %s: ", what);
    vprintf(fmt, ap);
    va_end(ap);
    printf(" (errno %d: %s)\n", e, strerror(e));
    exit(1);
}

/* `call` must return `want` and leave errno at SENTINEL. */
#define OK(what, want, call)                                                        \
    do {                                                                            \
        errno = SENTINEL;                                                           \
        long got_ = (long)(call);                                                   \
        if (got_ != (long)(want)) fail(what, "returned %ld, expected %ld", got_, (long)(want)); \
        if (errno != SENTINEL) fail(what, "errno changed to %d by a successful call", errno); \
        printf("ok %s\n", what);                                                    \
    } while (0)

/* `call` must return `bad` with errno `err`. */
#define ERR(what, bad, err, call)                                                   \
    do {                                                                            \
        errno = 0;                                                                  \
        long got_ = (long)(call);                                                   \
        if (got_ != (long)(bad)) fail(what, "returned %ld, expected %ld", got_, (long)(bad)); \
        if (errno != (err)) fail(what, "errno %d, expected %d", errno, (err));      \
        printf("ok %s\n", what);                                                    \
    } while (0)

#define SAME(what, a, b, n)                                                         \
    do {                                                                            \
        if (memcmp((a), (b), (n)) != 0) fail(what, "data differs (%ld bytes)", (long)(n)); \
    } while (0)

static char big_in[1 << 16], big_out[1 << 16];

static void files(void) {
    int fd = open("io.dat", O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) fail("open io.dat", "failed");
    char buf[64];

    OK("write", 10, write(fd, "0123456789", 10));
    OK("pwrite", 2, pwrite(fd, "ab", 2, 2));
    OK("pwrite64", 2, pwrite64(fd, "cd", 2, 4));
    struct iovec wv[2] = {{"ABC", 3}, {"DEFG", 4}};
    OK("writev", 7, writev(fd, wv, 2));
    struct iovec pw[2] = {{"x", 1}, {"yz", 2}};
    OK("pwritev", 3, pwritev(fd, pw, 2, 17));
    OK("pwritev64", 3, pwritev64(fd, pw, 2, 20));
    const char *want = "01abcd6789ABCDEFGxyzxyz"; /* 23 bytes */

    OK("lseek", 0, lseek(fd, 0, SEEK_SET));
    memset(buf, 0, sizeof buf);
    OK("read", 23, read(fd, buf, sizeof buf));
    SAME("read", buf, want, 23);
    OK("read at end of file", 0, read(fd, buf, sizeof buf));
    memset(buf, 0, sizeof buf);
    OK("pread", 5, pread(fd, buf, 5, 10));
    SAME("pread", buf, "ABCDE", 5);
    OK("pread64", 3, pread64(fd, buf, 3, 20));
    SAME("pread64", buf, "xyz", 3);
    char a[4] = {0}, b[8] = {0};
    struct iovec rv[2] = {{a, 4}, {b, 8}};
    OK("lseek", 0, lseek(fd, 0, SEEK_SET));
    OK("readv", 12, readv(fd, rv, 2));
    SAME("readv", a, "01ab", 4);
    SAME("readv", b, "cd6789AB", 8);
    OK("preadv", 12, preadv(fd, rv, 2, 11));
    SAME("preadv", a, "BCDE", 4);
    SAME("preadv", b, "FGxyzxyz", 8);
    OK("preadv64", 5, preadv64(fd, rv, 2, 18));
    SAME("preadv64", a, "yzxy", 4);
    OK("__pread_chk", 4, __pread_chk(fd, buf, 4, 0, sizeof buf));
    SAME("__pread_chk", buf, "01ab", 4);
    OK("__pread64_chk", 4, __pread64_chk(fd, buf, 4, 4, sizeof buf));
    SAME("__pread64_chk", buf, "cd67", 4);
    OK("lseek", 19, lseek(fd, 19, SEEK_SET));
    OK("__read_chk", 4, __read_chk(fd, buf, sizeof buf, sizeof buf));
    SAME("__read_chk", buf, "zxyz", 4);

    /* Failures keep the C library's errno. */
    ERR("read from a bad descriptor", -1, EBADF, read(-1, buf, 1));
    ERR("write to a bad descriptor", -1, EBADF, write(-1, "x", 1));
    ERR("readv from a bad descriptor", -1, EBADF, readv(-1, rv, 2));
    ERR("writev to a bad descriptor", -1, EBADF, writev(-1, wv, 2));
    ERR("pread from a bad descriptor", -1, EBADF, pread(-1, buf, 1, 0));
    ERR("pwrite to a bad descriptor", -1, EBADF, pwrite(-1, "x", 1, 0));
    volatile int minus_one = -1;
    ERR("readv with a negative count", -1, EINVAL, readv(fd, rv, minus_one));
    int p[2];
    if (pipe(p) != 0) fail("pipe", "failed");
    ERR("pread on a pipe", -1, ESPIPE, pread(p[0], buf, 1, 0));
    ERR("pwrite on a pipe", -1, ESPIPE, pwrite(p[1], "x", 1, 0));

    /* A buffer on an unmapped page: the kernel answers EFAULT, and so must we. */
    char *hole = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    munmap(hole, 4096);
    ERR("pread into unmapped memory", -1, EFAULT, pread(fd, hole, 8, 0));
    ERR("pwrite from unmapped memory", -1, EFAULT, pwrite(fd, hole, 8, 0));
    OK("lseek", 0, lseek(fd, 0, SEEK_SET));
    ERR("read into unmapped memory", -1, EFAULT, read(fd, hole, 8));
    ERR("write from unmapped memory", -1, EFAULT, write(fd, hole, 8));
    struct iovec hv[2] = {{hole, 8}, {a, 4}}; /* a fault after some bytes is a short count */
    ERR("readv into unmapped memory", -1, EFAULT, readv(fd, hv, 2));
    ERR("writev from unmapped memory", -1, EFAULT, writev(p[1], hv, 2));
    /* A protected page too (what crum's shadow pages look like to the kernel). */
    char *none = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ERR("read into a PROT_NONE page", -1, EFAULT, pread(fd, none, 8, 0));
    ERR("write from a PROT_NONE page", -1, EFAULT, pwrite(fd, none, 8, 0));
    munmap(none, 4096);
    close(p[0]);
    close(p[1]);
    close(fd);
}

static void stdio(void) {
    FILE *f = fopen("io2.dat", "w+");
    if (!f) fail("fopen io2.dat", "failed");
    for (size_t i = 0; i < sizeof big_out; i++) big_out[i] = (char)(i * 7 + i / 251);
    OK("fwrite", 4, fwrite("head", 1, 4, f));
    OK("fwrite_unlocked", 2, (fwrite_unlocked)("tailtail", 4, 2, f));
    /* Larger than the stream's buffer: the C library writes straight from ours. */
    OK("fwrite of 64 KiB", 16, fwrite(big_out, 4096, 16, f));
    OK("fwrite of nothing", 0, fwrite(big_out, 0, 16, f));
    OK("fflush", 0, fflush(f));
    rewind(f);
    char buf[16] = {0};
    OK("fread", 4, fread(buf, 1, 4, f));
    SAME("fread", buf, "head", 4);
    OK("fread_unlocked", 1, (fread_unlocked)(buf, 8, 1, f));
    SAME("fread_unlocked", buf, "tailtail", 8);
    /* Larger than the stream's buffer: the C library reads straight into ours. */
    OK("fread of 64 KiB", 16, fread(big_in, 4096, 16, f));
    SAME("fread of 64 KiB", big_in, big_out, sizeof big_in);
    OK("fread at end of file", 0, fread(buf, 1, 1, f));
    if (!feof(f)) fail("fread at end of file", "feof not set");
    rewind(f);
    OK("__fread_chk", 2, __fread_chk(buf, sizeof buf, 2, 2, f));
    SAME("__fread_chk", buf, "headtail", 2);
    OK("__fread_unlocked_chk", 3, __fread_unlocked_chk(buf, sizeof buf, 1, 3, f));
    SAME("__fread_unlocked_chk", buf, "tai", 3);
    fclose(f);

    /* fread on a stream opened for writing only: 0 items, error indicator, EBADF. */
    FILE *w = fopen("io2.dat", "w");
    ERR("fread from a write-only stream", 0, EBADF, fread(buf, 1, 4, w));
    if (!ferror(w)) fail("fread from a write-only stream", "ferror not set");
    fclose(w);
}

static void sockets(void) {
    int s[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, s) != 0) fail("socketpair", "failed");
    char buf[64] = {0};
    OK("send", 5, send(s[0], "hello", 5, 0));
    OK("recv", 5, recv(s[1], buf, sizeof buf, 0));
    SAME("recv", buf, "hello", 5);
    OK("sendto", 3, sendto(s[1], "abc", 3, 0, NULL, 0));
    OK("recvfrom", 3, recvfrom(s[0], buf, sizeof buf, 0, NULL, NULL));
    SAME("recvfrom", buf, "abc", 3);
    OK("send", 4, send(s[0], "wxyz", 4, 0));
    OK("__recv_chk", 2, __recv_chk(s[1], buf, 2, sizeof buf, 0));
    SAME("__recv_chk", buf, "wx", 2);
    OK("__recvfrom_chk", 2, __recvfrom_chk(s[1], buf, sizeof buf, sizeof buf, 0, NULL, NULL));
    SAME("__recvfrom_chk", buf, "yz", 2);

    /* sendmsg/recvmsg with two buffers and a descriptor in the control data. */
    int fd = open("io.dat", O_RDONLY);
    struct iovec sv[2] = {{"mes", 3}, {"sage", 4}};
    union { struct cmsghdr h; char b[CMSG_SPACE(sizeof(int))]; } cs, cr;
    memset(&cs, 0, sizeof cs);
    memset(&cr, 0, sizeof cr);
    struct msghdr m = {0};
    m.msg_iov = sv;
    m.msg_iovlen = 2;
    m.msg_control = cs.b;
    m.msg_controllen = sizeof cs.b;
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof fd);
    OK("sendmsg", 7, sendmsg(s[0], &m, 0));
    char x[2] = {0}, y[16] = {0};
    struct iovec rv[2] = {{x, 2}, {y, sizeof y}};
    struct msghdr r = {0};
    r.msg_iov = rv;
    r.msg_iovlen = 2;
    r.msg_control = cr.b;
    r.msg_controllen = sizeof cr.b;
    OK("recvmsg", 7, recvmsg(s[1], &r, 0));
    SAME("recvmsg", x, "me", 2);
    SAME("recvmsg", y, "ssage", 5);
    struct cmsghdr *rc = CMSG_FIRSTHDR(&r);
    if (!rc || rc->cmsg_type != SCM_RIGHTS) fail("recvmsg", "no descriptor received");
    int got;
    memcpy(&got, CMSG_DATA(rc), sizeof got);
    OK("read from the received descriptor", 10, read(got, buf, 10));
    SAME("read from the received descriptor", buf, "01abcd6789", 10);
    close(got);

    ERR("recv on a file", -1, ENOTSOCK, recv(fd, buf, 1, 0));
    ERR("send on a file", -1, ENOTSOCK, send(fd, "x", 1, 0));
    ERR("recvmsg on a bad descriptor", -1, EBADF, recvmsg(-1, &r, 0));
    ERR("sendmsg on a bad descriptor", -1, EBADF, sendmsg(-1, &m, 0));
    char *hole = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    munmap(hole, 4096);
    ERR("send from unmapped memory", -1, EFAULT, send(s[0], hole, 8, 0));
    OK("send", 3, send(s[0], "abc", 3, 0));
    ERR("recv into unmapped memory", -1, EFAULT, recv(s[1], hole, 8, MSG_PEEK));
    ERR("recvfrom into unmapped memory", -1, EFAULT, recvfrom(s[1], hole, 8, MSG_PEEK, NULL, NULL));
    OK("recv", 3, recv(s[1], buf, sizeof buf, 0));
    close(fd);
    close(s[0]);
    close(s[1]);
}

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    files();
    stdio();
    sockets();
    printf("PASS\n");
    return 0;
}
