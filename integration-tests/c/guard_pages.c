/* Guard regions (MADV_GUARD_INSTALL, Linux 6.13; glibc may use them for thread stack guards)
 * across restarts, checked from inside at every step: in a 16-page private mapping, pages
 * 5-6 and 12 are guards. The other pages keep their bytes (one is rewritten every step);
 * touching a guard page still faults (caught with siglongjmp), and the kernel still reports
 * exactly those pages as guards (PAGEMAP_SCAN, PAGE_IS_GUARD). Before, the image writer (a
 * fork, which keeps guard regions) was killed by SIGSEGV reading them: no checkpoint at all.
 * Where the kernel has no guard regions, the program says so and checks the bytes only. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

struct page_region_ { uint64_t start, end, categories; };
struct pm_scan_arg_ {
    uint64_t size, flags, start, end, walk_end, vec, vec_len, max_pages, category_inverted, category_mask,
        category_anyof_mask, return_mask;
};
#define PAGEMAP_SCAN_ 0xC0606610UL
#define PAGE_IS_GUARD_ (1UL << 8)
#define MADV_GUARD_INSTALL_ 102

static sigjmp_buf jb;
static void on_segv(int sig) { (void)sig; siglongjmp(jb, 1); }

static int faults(volatile char *p) {
    if (sigsetjmp(jb, 1) == 0) {
        (void)*p;
        return 0;
    }
    return 1;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 40;
    long ms = argc > 2 ? atol(argv[2]) : 20;
    setvbuf(stdout, NULL, _IONBF, 0);
    long ps = sysconf(_SC_PAGESIZE);
    char *p = mmap(NULL, 16 * ps, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) { printf("FAIL: mmap\n"); return 1; }
    for (long i = 0; i < 16 * ps; i++) p[i] = (char)(i / ps * 11 + i % 251);
    int guards = madvise(p + 5 * ps, 2 * ps, MADV_GUARD_INSTALL_) == 0 && madvise(p + 12 * ps, ps, MADV_GUARD_INSTALL_) == 0;
    printf(guards ? "guard regions installed\n" : "no guard regions on this kernel\n");
    struct sigaction sa = { .sa_handler = on_segv, .sa_flags = SA_NODEFER };
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, NULL);
    int pm = open("/proc/self/pagemap", O_RDONLY);
    for (int s = 0; s < n; s++) {
        p[4 * ps + 7] = (char)s;
        for (long i = 0; i < 16 * ps; i++) {
            long pg = i / ps;
            if (guards && (pg == 5 || pg == 6 || pg == 12)) continue;
            char want = (pg == 4 && i % ps == 7) ? (char)s : (char)(pg * 11 + i % 251);
            if (p[i] != want) { printf("FAIL: step %d: byte %ld of page %ld is %d, not %d\n", s, i % ps, pg, p[i], want); return 1; }
        }
        if (guards) {
            if (!faults(p + 5 * ps) || !faults(p + 7 * ps - 1) || !faults(p + 12 * ps + 100)) { printf("FAIL: step %d: a guard page does not fault\n", s); return 1; }
            if (faults(p + 7 * ps) || faults(p + 13 * ps)) { printf("FAIL: step %d: a page next to a guard faults\n", s); return 1; }
            struct page_region_ v[8];
            struct pm_scan_arg_ a = { .size = sizeof a, .start = (uint64_t)p, .end = (uint64_t)(p + 16 * ps), .vec = (uint64_t)v,
                                      .vec_len = 8, .category_anyof_mask = PAGE_IS_GUARD_, .return_mask = PAGE_IS_GUARD_ };
            int k = ioctl(pm, PAGEMAP_SCAN_, &a);
            if (k >= 0 && (k != 2 || v[0].start != (uint64_t)(p + 5 * ps) || v[0].end != (uint64_t)(p + 7 * ps) ||
                v[1].start != (uint64_t)(p + 12 * ps) || v[1].end != (uint64_t)(p + 13 * ps))) {
                printf("FAIL: step %d: the kernel reports %d guard ranges, not pages 5-6 and 12\n", s, k);
                return 1;
            }
        }
        printf("step %d ok\n", s);
        struct timespec ts = { 0, ms * 1000000L };
        nanosleep(&ts, NULL);
    }
    printf("done\n");
    return 0;
}
