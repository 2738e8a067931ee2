/* Incremental images: MiB (argument 3, default 64) of noise, of which each step rewrites one
 * 64 KiB piece and drops another to zeros (MADV_DONTNEED, as allocators return memory);
 * prints the step and a checksum of all of it, so a restart that brought back any byte wrong
 * (a chunk taken from the wrong image, a dropped page brought back) prints another sum.
 * Usage: inc_memory [STEPS=40] [MS=20] [MIB=64] */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>

#define PIECE (64u << 10)
static size_t SIZE = 64u << 20;

static uint64_t sum_of(const uint64_t *p, size_t n) {
    uint64_t s = 0;
    for (size_t i = 0; i < n; i++) s = s * 1099511628211u + p[i];
    return s;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 40;
    long ms = argc > 2 ? atol(argv[2]) : 20;
    if (argc > 3) SIZE = (size_t)atol(argv[3]) << 20;
    uint64_t *p = mmap(NULL, SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return 1;
    uint64_t x = 88172645463325252u;
    for (size_t i = 0; i < SIZE / 8; i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        p[i] = x;
    }
    setvbuf(stdout, NULL, _IONBF, 0);
    for (int s = 0; s < n; s++) {
        size_t piece = (size_t)(s * 97 % (SIZE / PIECE));
        uint64_t *w = p + piece * PIECE / 8;
        for (size_t i = 0; i < PIECE / 8; i++) w[i] = w[i] * 3 + (uint64_t)s;
        size_t drop = (size_t)((s * 131 + 7) % (SIZE / PIECE));
        madvise((char *)p + drop * PIECE, PIECE, MADV_DONTNEED);
        printf("step %d sum %016llx\n", s, (unsigned long long)sum_of(p, SIZE / 8));
        struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
        nanosleep(&ts, NULL);
    }
    printf("done\n");
    return 0;
}
