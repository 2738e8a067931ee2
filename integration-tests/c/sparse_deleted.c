/* Deleted files and memfds with holes, and a memfd's name and seals. A file deleted while
 * open holds data at 4 KiB blocks 1, 3 and 4 of 7 (holes at the head, in the middle and at
 * the tail), a memfd data at blocks 0 and 2 of 4 with a hole punched between, sealed
 * against shrinking and growing. At every step the program checks where SEEK_DATA and
 * SEEK_HOLE land, every byte, the sizes, the memfd's name (its /proc/self/fd link) and its
 * seals. A restart that wrote the files back whole filled the holes with data blocks of
 * zeros: SEEK_HOLE then found none but at the end. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define BLK 4096

static unsigned char byte_at(int file, off_t off) {
    return (unsigned char)(file * 77 + off * 13 + (off >> 12));
}

static int put(int fd, int file, int blk) {
    unsigned char b[BLK];
    for (int i = 0; i < BLK; i++) b[i] = byte_at(file, (off_t)blk * BLK + i);
    return pwrite(fd, b, BLK, (off_t)blk * BLK) == BLK;
}

/* Checks size, data and holes of `fd`: `data[i]` says whether block i holds data. */
static const char *check(int fd, int file, const int *data, int blocks) {
    if (lseek(fd, 0, SEEK_END) != (off_t)blocks * BLK) return "size";
    for (int i = 0; i < blocks; i++) {
        off_t at = (off_t)i * BLK;
        off_t d = lseek(fd, at, SEEK_DATA), h = lseek(fd, at, SEEK_HOLE);
        if (data[i] ? d != at : d == at) return "SEEK_DATA";
        if (data[i] ? h == at : h != at) return "SEEK_HOLE";
        unsigned char b[BLK];
        if (pread(fd, b, BLK, at) != BLK) return "read";
        for (int j = 0; j < BLK; j++)
            if (b[j] != (data[i] ? byte_at(file, at + j) : 0)) return "bytes";
    }
    return NULL;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 40;
    long ms = argc > 2 ? atol(argv[2]) : 20;
    setvbuf(stdout, NULL, _IONBF, 0);
    static const int fdata[7] = { 0, 1, 0, 1, 1, 0, 0 };
    static const int mdata[4] = { 1, 0, 1, 0 };
    int f = open("sparse.tmp", O_RDWR | O_CREAT | O_TRUNC, 0600);
    int m = memfd_create("crum-sparse", MFD_ALLOW_SEALING);
    if (f < 0 || m < 0 || unlink("sparse.tmp") != 0) { printf("FAIL: setup\n"); return 1; }
    for (int i = 0; i < 7; i++)
        if (fdata[i] && !put(f, 1, i)) { printf("FAIL: write\n"); return 1; }
    if (ftruncate(f, 7 * BLK) != 0 || !put(m, 2, 0) || !put(m, 2, 1) || !put(m, 2, 2) || ftruncate(m, 4 * BLK) != 0 ||
        fallocate(m, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, BLK, BLK) != 0 ||
        fcntl(m, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0) {
        printf("FAIL: memfd setup\n");
        return 1;
    }
    if (lseek(f, 0, SEEK_HOLE) != 0 || lseek(m, BLK, SEEK_HOLE) != BLK) {
        printf("FAIL: this file system keeps no holes\n");
        return 1;
    }
    char link[64], want[64], got[256];
    snprintf(link, sizeof link, "/proc/self/fd/%d", m);
    snprintf(want, sizeof want, "/memfd:crum-sparse (deleted)");
    for (int s = 0; s < n; s++) {
        const char *e = check(f, 1, fdata, 7);
        if (e) { printf("FAIL: deleted file: %s\n", e); return 1; }
        if ((e = check(m, 2, mdata, 4))) { printf("FAIL: memfd: %s\n", e); return 1; }
        ssize_t len = readlink(link, got, sizeof got - 1);
        got[len < 0 ? 0 : len] = 0;
        if (strcmp(got, want) != 0) { printf("FAIL: memfd name %s\n", got); return 1; }
        if (fcntl(m, F_GET_SEALS) != (F_SEAL_SHRINK | F_SEAL_GROW)) { printf("FAIL: seals %d\n", fcntl(m, F_GET_SEALS)); return 1; }
        printf("step %d\n", s);
        struct timespec ts = { 0, ms * 1000000L };
        nanosleep(&ts, NULL);
    }
    printf("done\n");
    return 0;
}
