/* A memfd mapped shared (as JITs, Wayland clients and shared-memory IPC do): crum cannot
 * map it again by path, so it must say so when it writes an image. Prints its steps. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 40;
    long ms = argc > 2 ? atol(argv[2]) : 20;
    setvbuf(stdout, NULL, _IONBF, 0);
    int m = memfd_create("crum-shared", 0);
    if (m < 0 || ftruncate(m, 65536) != 0) { printf("FAIL: memfd\n"); return 1; }
    char *p = mmap(NULL, 65536, PROT_READ | PROT_WRITE, MAP_SHARED, m, 0);
    if (p == MAP_FAILED) { printf("FAIL: mmap\n"); return 1; }
    for (int s = 0; s < n; s++) {
        p[s] = (char)s;
        printf("step %d\n", s);
        struct timespec ts = { 0, ms * 1000000L };
        nanosleep(&ts, NULL);
    }
    printf("done\n");
    return 0;
}
