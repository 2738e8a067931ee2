/* Memory with contents that the program made inaccessible: pages written and then
 * mprotect'ed to PROT_NONE (as allocators, garbage collectors and sandboxes do), one half
 * of a mapping PROT_NONE and the other half read-write, a write-only page, and a 1 GiB
 * PROT_NONE reservation never touched. At every step the program checks, from inside, that
 * each inaccessible region is still inaccessible (its line in /proc/self/maps) and, after
 * opening it up for a moment, that it holds what was written. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static unsigned char pattern(size_t i, int salt) { return (unsigned char)((i * 131 + salt * 7) ^ (i >> 9)); }

/* The permissions of the mapping holding p, from /proc/self/maps ("---p", "rw-p", ...). */
static void perms_of(void *p, char out[5]) {
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    strcpy(out, "?");
    unsigned long a = (unsigned long)p;
    while (f && fgets(line, sizeof line, f)) {
        unsigned long s, e;
        char perm[5];
        if (sscanf(line, "%lx-%lx %4s", &s, &e, perm) == 3 && a >= s && a < e) { strcpy(out, perm); break; }
    }
    if (f) fclose(f);
}

static int check(const char *what, unsigned char *p, size_t len, int salt, int prot_now, const char *want_perms) {
    char perms[5];
    perms_of(p, perms);
    if (strcmp(perms, want_perms) != 0) { printf("FAIL: %s is %s, not %s\n", what, perms, want_perms); return 0; }
    mprotect(p, len, PROT_READ);
    for (size_t i = 0; i < len; i++)
        if (p[i] != pattern(i, salt)) { printf("FAIL: %s byte %zu is %d, not %d\n", what, i, p[i], pattern(i, salt)); return 0; }
    mprotect(p, len, prot_now);
    return 1;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 40;
    long ms = argc > 2 ? atol(argv[2]) : 20;
    setvbuf(stdout, NULL, _IONBF, 0);
    size_t len = 256 << 10, page = 4096;
    unsigned char *hidden = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    unsigned char *half = mmap(NULL, 2 * len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    unsigned char *shared = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    unsigned char *wonly = mmap(NULL, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    unsigned char *huge = mmap(NULL, 1UL << 30, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (hidden == MAP_FAILED || half == MAP_FAILED || shared == MAP_FAILED || wonly == MAP_FAILED || huge == MAP_FAILED) {
        printf("mmap failed\n");
        return 1;
    }
    for (size_t i = 0; i < len; i++) { hidden[i] = pattern(i, 1); half[i] = pattern(i, 2); shared[i] = pattern(i, 3); }
    for (size_t i = 0; i < page; i++) wonly[i] = pattern(i, 4);
    /* Leave a hole in the hidden region: a page never written reads back as zeros. */
    mprotect(hidden, len, PROT_NONE);
    mprotect(half, len, PROT_NONE);
    mprotect(shared, len, PROT_NONE);
    mprotect(wonly, page, PROT_WRITE);
    for (int s = 0; s < n; s++) {
        /* The read-write half changes at every step. */
        half[len + (size_t)s * 4099 % len] = (unsigned char)s;
        unsigned long sum = 0;
        for (size_t i = 0; i < len; i += 64) sum += half[len + i];
        if (!check("hidden", hidden, len, 1, PROT_NONE, "---p") || !check("half", half, len, 2, PROT_NONE, "---p") ||
            !check("shared", shared, len, 3, PROT_NONE, "---s") || !check("write-only", wonly, page, 4, PROT_WRITE, "-w-p"))
            return 1;
        char perms[5];
        perms_of(huge, perms);
        if (strcmp(perms, "---p") != 0) { printf("FAIL: the reservation is %s\n", perms); return 1; }
        printf("step %d sum %lu\n", s, sum);
        struct timespec ts = { 0, ms * 1000000L };
        nanosleep(&ts, NULL);
    }
    printf("done\n");
    return 0;
}
