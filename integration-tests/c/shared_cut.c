/* Private and shared memory written together without pause: a counter in private memory
 * and another in anonymous shared memory (MAP_SHARED), each incremented by one in turn. At
 * any cut they differ by at most one, and they keep their difference; an image whose shared memory was read after the cut
 * (the forked writer does not get a copy-on-write snapshot of shared memory) restarts with
 * the copy ahead of the counter, and the program says FAIL. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 60;
    setvbuf(stdout, NULL, _IONBF, 0);
    volatile long *sh = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) { printf("FAIL mmap\n"); return 1; }
    /* 32 MiB of private data below it (mapped later: lower), written into the image first,
     * so that a writer reading the shared memory live would find it well after the cut. */
    size_t big = 32u << 20;
    unsigned long long x = 88172645463325252ull, *m = mmap(NULL, big, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) { printf("FAIL mmap\n"); return 1; }
    for (size_t k = 0; k < big / 8; k++) { x ^= x << 13; x ^= x >> 7; x ^= x << 17; m[k] = x; }
    static volatile long priv;
    for (int i = 0; i < n; i++) {
        for (long j = 0; j < 2000000; j++) {
            priv = priv + 1;
            sh[j & 1023] = priv;
            sh[1024] = sh[1024] + 1;
        }
        long a = priv, b = sh[1024];
        if (b > a || a - b > 1) { printf("FAIL step %d: private %ld, shared %ld\n", i, a, b); return 1; }
        printf("step %d\n", i);
    }
    printf("done\n");
    return 0;
}
