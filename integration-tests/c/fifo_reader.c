/* A named pipe the program holds only the read end of, with bytes in it that its own
 * writer left before closing (no writer anywhere): a checkpoint must carry them. At every
 * step the program reads 100 bytes and checks that they continue the sequence, then that
 * the rest is still there (FIONREAD). Before, the bytes were named as lost and the restarted
 * program found the pipe empty. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define TOTAL 8192
#define STEP 100

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 40;
    long ms = argc > 2 ? atol(argv[2]) : 20;
    setvbuf(stdout, NULL, _IONBF, 0);
    unlink("ro.fifo");
    if (mkfifo("ro.fifo", 0600) != 0) { printf("FAIL: mkfifo\n"); return 1; }
    int w = open("ro.fifo", O_RDWR);
    int r = open("ro.fifo", O_RDONLY | O_NONBLOCK);
    if (w < 0 || r < 0) { printf("FAIL: open\n"); return 1; }
    unsigned char b[TOTAL];
    for (int i = 0; i < TOTAL; i++) b[i] = (unsigned char)(i * 7 + (i >> 8));
    if (write(w, b, TOTAL) != TOTAL) { printf("FAIL: write\n"); return 1; }
    close(w);
    int at = 0;
    for (int s = 0; s < n && at + STEP <= TOTAL; s++) {
        unsigned char c[STEP];
        if (read(r, c, STEP) != STEP) { printf("FAIL: read at byte %d\n", at); return 1; }
        for (int i = 0; i < STEP; i++, at++)
            if (c[i] != (unsigned char)(at * 7 + (at >> 8))) { printf("FAIL: byte %d\n", at); return 1; }
        int left = -1;
        ioctl(r, FIONREAD, &left);
        if (left != TOTAL - at) { printf("FAIL: %d bytes left, not %d\n", left, TOTAL - at); return 1; }
        printf("step %d\n", s);
        struct timespec ts = { 0, ms * 1000000L };
        nanosleep(&ts, NULL);
    }
    printf("done\n");
    return 0;
}
