/* A mapping that grows down, made where the program's first mappings land (zdtm grow_map's
 * start): a hole of 10 pages from mmap(NULL), unmapped, a MAP_GROWSDOWN page in its middle,
 * then touched below. Without crum the hole is below the lowest library, with nothing under
 * it, and the mapping grows. `crum run` must not leave holes of its own near the program's
 * libraries where it would land instead (the kernel keeps 1 MiB below such a mapping free of
 * accessible mappings, or it cannot grow: SIGSEGV).
 * Prints "PASS grew" or why not. */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int main(void) {
    long ps = sysconf(_SC_PAGESIZE);
    char *p = mmap(NULL, 10 * ps, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        perror("FAIL mmap");
        return 1;
    }
    munmap(p, 10 * ps);
    char *g = mmap(p + 5 * ps, ps, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_GROWSDOWN | MAP_FIXED, -1, 0);
    if (g == MAP_FAILED) {
        perror("FAIL mmap MAP_GROWSDOWN");
        return 1;
    }
    /* Say where, so a failure (a SIGSEGV below) can be read against the maps. */
    fprintf(stderr, "grows-down page at %p\n", (void *)g);
    g[0] = 1;
    memset(g - 2 * ps, 2, 2 * ps); /* two pages below: the mapping grows by two */
    printf("PASS grew\n");
    return 0;
}
