/* Lazy restart (issue 15): two regions of MIB MiB each (argument 3) filled with patterns
 * computed from each word's index, and a file of known bytes. Each step checks every word
 * of region A, reads (read(2), a system call writing into memory that may not be restored
 * yet) 64 KiB of the file into region B, checks them and writes B's pattern back; region B
 * as a whole is checked only at the end, so a restart's pages of B stay untouched until then
 * (a checkpoint of a lazily restarted program must bring them in first). With FORK
 * (argument 4) 1, every step while a file `lazy_mem.fork` exists in the working directory
 * forks a child that checks all of B and exits 0 if it is right, as a child of a lazy
 * restart must see every page (a test makes the file before it restarts the program, so
 * that the image is not a job's); only a wrong child prints. Every verdict is printed; any wrong
 * byte prints where. Usage: lazy_mem [STEPS=20] [MS=50] [MIB=64] [FORK=0] */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PIECE (64u << 10)

static uint64_t mix(uint64_t x) {
    x += 0x9e3779b97f4a7c15u;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9u;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebu;
    return x ^ (x >> 31);
}

static size_t words;

/* The first word of `p` (pattern `salt`) that is wrong, or -1. */
static long check(const uint64_t *p, uint64_t salt, size_t from, size_t n) {
    for (size_t i = from; i < from + n; i++)
        if (p[i] != mix(i ^ salt)) return (long)i;
    return -1;
}

int main(int argc, char **argv) {
    int steps = argc > 1 ? atoi(argv[1]) : 20;
    long ms = argc > 2 ? atol(argv[2]) : 50;
    size_t size = (size_t)(argc > 3 ? atol(argv[3]) : 64) << 20;
    int forks = argc > 4 ? atoi(argv[4]) : 0;
    words = size / 8;
    const uint64_t SA = 0xa, SB = 0xb0b0b0b0b;
    uint64_t *a = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    uint64_t *b = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (a == MAP_FAILED || b == MAP_FAILED) return 1;
    for (size_t i = 0; i < words; i++) a[i] = mix(i ^ SA), b[i] = mix(i ^ SB);
    /* The file: PIECE bytes, word k = mix(k ^ 0xf11e). */
    static uint64_t piece[PIECE / 8];
    for (size_t k = 0; k < PIECE / 8; k++) piece[k] = mix(k ^ 0xf11e);
    int fd = open("lazy_mem.dat", O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || write(fd, piece, PIECE) != PIECE) return 1;
    setvbuf(stdout, NULL, _IONBF, 0);
    for (int s = 0; s < steps; s++) {
        long bad = check(a, SA, 0, words);
        /* Into B where no step read before: pages a lazy restart may not have served yet. */
        size_t at = ((size_t)s * 7919 * PIECE) % size / 8;
        ssize_t got = pread(fd, b + at, PIECE, 0);
        int read_ok = got == PIECE && memcmp(b + at, piece, PIECE) == 0;
        for (size_t i = at; i < at + PIECE / 8; i++) b[i] = mix(i ^ SB);
        printf("step %d A %s read %s\n", s, bad < 0 ? "ok" : "BAD", read_ok ? "ok" : "BAD");
        if (bad >= 0) printf("A word %ld is %016llx\n", bad, (unsigned long long)a[bad]);
        if (!read_ok) printf("read returned %zd\n", got);
        if (forks && access("lazy_mem.fork", F_OK) == 0) {
            pid_t c = fork();
            if (c == 0) _exit(check(b, SB, 0, words) < 0 ? 0 : 1);
            int st = 0;
            waitpid(c, &st, 0);
            if (!(c > 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0)) printf("child BAD\n");
        }
        struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
        nanosleep(&ts, NULL);
    }
    long bad = check(b, SB, 0, words);
    printf("B %s\n", bad < 0 ? "ok" : "BAD");
    if (bad >= 0) printf("B word %ld is %016llx\n", bad, (unsigned long long)b[bad]);
    printf("done\n");
    return 0;
}
