/* Files deleted while open, as programs use them for scratch space and as memfds: a
 * regular file unlinked after it was written (read-write at fd A, and open a second time
 * read-only through /proc/self/fd at fd B: one file, two open file descriptions), and a
 * sealed memfd. At every step the program appends through A, reads everything back
 * through B, and checks both offsets, that A and B are still one file with no name, and the
 * memfd's contents and seals. The files a restart makes anew keep their permission bits
 * (A 0645, the memfd 0642) and times (a third deleted file, never written again, with set
 * access and modification times), and so does the socket file of a Unix socket bound to a
 * path (0640). A pipe's read end opened a second time through /proc/self/fd is an open file
 * description of its own: non-blocking there, blocking at the first descriptor. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define BASE (100 * 1024)

static unsigned char pat(long i) { return (unsigned char)(i * 13 + (i >> 10)); }

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 40;
    long ms = argc > 2 ? atol(argv[2]) : 20;
    setvbuf(stdout, NULL, _IONBF, 0);
    int a = open("scratch.dat", O_RDWR | O_CREAT | O_TRUNC, 0600);
    unsigned char buf[BASE];
    for (long i = 0; i < BASE; i++) buf[i] = pat(i);
    if (a < 0 || write(a, buf, BASE) != BASE || unlink("scratch.dat") != 0) { printf("FAIL: setup\n"); return 1; }
    char self[64];
    snprintf(self, sizeof self, "/proc/self/fd/%d", a);
    int b = open(self, O_RDONLY);
    int m = memfd_create("crum-test", MFD_ALLOW_SEALING);
    if (b < 0 || m < 0 || write(m, "memfd contents", 14) != 14 || fcntl(m, F_ADD_SEALS, F_SEAL_SHRINK) != 0) {
        printf("FAIL: setup 2\n");
        return 1;
    }
    int c = open("fixed.dat", O_RDWR | O_CREAT | O_TRUNC, 0600);
    struct timespec times[2] = { { 1000000000, 5 }, { 1200000000, 7 } };
    if (c < 0 || write(c, buf, 100) != 100 || futimens(c, times) != 0 || unlink("fixed.dat") != 0 ||
        fchmod(a, 0645) != 0 || fchmod(m, 0642) != 0 || fchmod(c, 0604) != 0) {
        printf("FAIL: setup 3\n");
        return 1;
    }
    int u = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sun = { .sun_family = AF_UNIX };
    strcpy(sun.sun_path, "attrs.sock");
    unlink("attrs.sock");
    if (u < 0 || bind(u, (struct sockaddr *)&sun, sizeof sun) != 0 || listen(u, 4) != 0 || chmod("attrs.sock", 0640) != 0) {
        printf("FAIL: setup 4\n");
        return 1;
    }
    int pp[2];
    if (pipe(pp) != 0) { printf("FAIL: pipe\n"); return 1; }
    snprintf(self, sizeof self, "/proc/self/fd/%d", pp[0]);
    int q = open(self, O_RDONLY);
    if (q < 0 || fcntl(q, F_SETFL, O_NONBLOCK) != 0) { printf("FAIL: setup 5\n"); return 1; }
    long brd = 0;
    for (int s = 0; s < n; s++) {
        struct stat st;
        char pc;
        if (!(fcntl(q, F_GETFL) & O_NONBLOCK) || (fcntl(pp[0], F_GETFL) & O_NONBLOCK)) { printf("FAIL: the pipe's status flags\n"); return 1; }
        if (write(pp[1], "p", 1) != 1 || read(q, &pc, 1) != 1 || pc != 'p' || read(q, &pc, 1) != -1 || errno != EAGAIN) {
            printf("FAIL: the pipe read again through /proc\n");
            return 1;
        }
        if (fstat(a, &st) || (st.st_mode & 07777) != 0645) { printf("FAIL: A's mode is %o\n", st.st_mode & 07777); return 1; }
        if (fstat(m, &st) || (st.st_mode & 07777) != 0642) { printf("FAIL: the memfd's mode is %o\n", st.st_mode & 07777); return 1; }
        if (fstat(c, &st) || (st.st_mode & 07777) != 0604 || st.st_mtim.tv_sec != 1200000000 || st.st_mtim.tv_nsec != 7 ||
            st.st_atim.tv_sec != 1000000000 || st.st_atim.tv_nsec != 5 || st.st_size != 100) {
            printf("FAIL: C's mode %o or times %ld.%ld %ld.%ld\n", st.st_mode & 07777, (long)st.st_atim.tv_sec, st.st_atim.tv_nsec,
                   (long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
            return 1;
        }
        if (stat("attrs.sock", &st) || !S_ISSOCK(st.st_mode) || (st.st_mode & 07777) != 0640) {
            printf("FAIL: the socket file's mode is %o\n", st.st_mode & 07777);
            return 1;
        }
        unsigned char c = pat(BASE + s);
        if (write(a, &c, 1) != 1) { printf("FAIL: write through A\n"); return 1; }
        struct stat sa, sb;
        fstat(a, &sa);
        fstat(b, &sb);
        if (sa.st_ino != sb.st_ino || sa.st_dev != sb.st_dev || sa.st_nlink != 0) { printf("FAIL: A and B are not one unnamed file\n"); return 1; }
        if (lseek(a, 0, SEEK_CUR) != BASE + s + 1 || sa.st_size != BASE + s + 1) { printf("FAIL: A's offset or size at step %d\n", s); return 1; }
        /* B reads on from where it was: a quarter of the base per step, then the new bytes. */
        long want_end = BASE + s + 1, chunk = BASE / 4;
        long got = read(b, buf, brd + chunk <= want_end ? chunk : want_end - brd);
        for (long i = 0; i < got; i++)
            if (buf[i] != pat(brd + i)) { printf("FAIL: B read byte %ld\n", brd + i); return 1; }
        brd += got;
        if (lseek(b, 0, SEEK_CUR) != brd) { printf("FAIL: B's offset\n"); return 1; }
        if (write(b, "x", 1) != -1) { printf("FAIL: B is writable\n"); return 1; }
        char mb[32] = { 0 };
        if (pread(m, mb, sizeof mb, 0) != 14 || strcmp(mb, "memfd contents") != 0 || fcntl(m, F_GET_SEALS) != F_SEAL_SHRINK) {
            printf("FAIL: memfd\n");
            return 1;
        }
        printf("step %d\n", s);
        struct timespec ts = { 0, ms * 1000000L };
        nanosleep(&ts, NULL);
    }
    printf("done\n");
    return 0;
}
