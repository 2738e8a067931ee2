/* A private mapping the kernel grows down on demand (MAP_GROWSDOWN, not the main stack)
 * across restarts, checked from inside at every step: the program maps one page with
 * MAP_GROWSDOWN in a hole of its own and every step touches the page below the mapping's
 * lowest, which the kernel adds to it. Every page keeps its bytes, /proc/self/smaps still
 * shows the mapping as one that grows down ("gd") from the lowest page touched, and the next
 * touch below it still grows it. Before, only the main stack came back growing down: CRIU's
 * grow_map died of SIGSEGV touching below such a mapping after a restart. Nothing of crum's
 * may be mapped in the hole either. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

/* Whether /proc/self/smaps has an entry starting at `lo` and ending at `hi` whose VmFlags
 * include "gd". */
static int smaps_grows_down(uintptr_t lo, uintptr_t hi) {
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f) return -1;
    char line[512];
    int in = 0, found = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long a, b;
        if (sscanf(line, "%lx-%lx ", &a, &b) == 2) {
            in = a == lo && b == hi;
            continue;
        }
        if (in && strncmp(line, "VmFlags:", 8) == 0) {
            found = strstr(line, " gd") != NULL;
            break;
        }
    }
    fclose(f);
    return found;
}

/* Whether anything is mapped in [lo, hi): the program keeps the rest of its hole free, so a
 * mapping there is crum's. Such a mapping at the edge of the kernel's guard gap below the
 * growing mapping stops it from growing (CRIU's grow_map died so after a checkpoint, without
 * a restart: crum's reservations went where the kernel puts mmap(NULL)). */
static int mapped_in(uintptr_t lo, uintptr_t hi) {
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f) return -1;
    char line[512];
    int found = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long a, b;
        if (sscanf(line, "%lx-%lx ", &a, &b) == 2 && a < hi && b > lo) {
            found = 1;
            break;
        }
    }
    fclose(f);
    return found;
}

static char pattern(long page, long i) { return (char)(page * 13 + i % 241); }

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 40;
    long ms = argc > 2 ? atol(argv[2]) : 20;
    setvbuf(stdout, NULL, _IONBF, 0);
    long ps = sysconf(_SC_PAGESIZE);
    /* A hole of 1024 pages; the mapping is its top page. The kernel keeps new mappings out of
     * the stack guard gap below a mapping that grows down, so the hole stays free. */
    char *hole = mmap(NULL, 1024 * ps, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (hole == MAP_FAILED) { printf("FAIL: mmap of the hole\n"); return 1; }
    munmap(hole, 1024 * ps);
    char *top = hole + 1024 * ps;
    char *m = mmap(top - ps, ps, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_GROWSDOWN, -1, 0);
    if (m == MAP_FAILED) { printf("FAIL: mmap MAP_GROWSDOWN\n"); return 1; }
    for (long i = 0; i < ps; i++) m[i] = pattern(0, i);
    long pages = 1;
    for (int s = 0; s < n; s++) {
        /* Touch below the lowest page: the kernel grows the mapping by one page. */
        volatile char *below = (volatile char *)(top - (pages + 1) * ps);
        for (long i = ps - 1; i >= 0; i--) below[i] = pattern(pages, i);
        pages++;
        for (long pg = 0; pg < pages; pg++) {
            char *p = top - (pg + 1) * ps;
            for (long i = 0; i < ps; i++)
                if (p[i] != pattern(pg, i)) { printf("FAIL: step %d: byte %ld of page %ld is %d, not %d\n", s, i, pg, p[i], pattern(pg, i)); return 1; }
        }
        int gd = smaps_grows_down((uintptr_t)(top - pages * ps), (uintptr_t)top);
        if (gd != 1) { printf("FAIL: step %d: smaps has no growing-down mapping of %ld pages below %p (%d)\n", s, pages, (void *)top, gd); return 1; }
        if (mapped_in((uintptr_t)hole, (uintptr_t)(top - pages * ps)) != 0) { printf("FAIL: step %d: something was mapped in the hole below the growing mapping\n", s); return 1; }
        printf("step %d ok\n", s);
        struct timespec ts = { 0, ms * 1000000L };
        nanosleep(&ts, NULL);
    }
    printf("done\n");
    return 0;
}
