/* Advice and locks on memory survive restarts: regions with MADV_DONTDUMP, MADV_DONTFORK,
 * MADV_WIPEONFORK, MADV_HUGEPAGE/MADV_NOHUGEPAGE, MADV_SEQUENTIAL, MADV_RANDOM and one mlock'ed. At every step the program
 * reads its own smaps for each region's VmFlags, and checks what the flags do: a forked
 * child sees the wipe-on-fork region zeroed and the dont-fork region unmapped. A private
 * mapping made with MAP_NORESERVE keeps the flag ("nr"), and one made without it does not get
 * it (a restart used to map every private region so); a MAP_DROPPABLE one (Linux 6.11) stays
 * droppable ("dp"). */
#define _GNU_SOURCE
#include <setjmp.h>
#include <signal.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PAGES 4
static long pg;

struct want { const char *name; char *p; int advice; const char *flag; };

static int has_flag(char *p, const char *flag) {
    FILE *f = fopen("/proc/self/smaps", "r");
    char line[512];
    unsigned long a, b;
    int in = 0, found = -1;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "%lx-%lx ", &a, &b) == 2 && strchr(line, ' ') && line[strlen(line) - 1] == '\n' && strncmp(line, "VmFlags", 7) != 0) {
            in = (unsigned long)p >= a && (unsigned long)p < b;
        } else if (in && strncmp(line, "VmFlags:", 8) == 0) {
            char tok[8];
            snprintf(tok, sizeof tok, " %s", flag);
            found = strstr(line + 8, tok) != NULL;
            break;
        }
    }
    fclose(f);
    return found;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 40;
    long ms = argc > 2 ? atol(argv[2]) : 20;
    setvbuf(stdout, NULL, _IONBF, 0);
    pg = sysconf(_SC_PAGESIZE);
    struct want w[] = {
        { "dontdump", NULL, MADV_DONTDUMP, "dd" },
        { "dontfork", NULL, MADV_DONTFORK, "dc" },
        { "wipeonfork", NULL, MADV_WIPEONFORK, "wf" },
        { "nohugepage", NULL, MADV_NOHUGEPAGE, "nh" },
        { "sequential", NULL, MADV_SEQUENTIAL, "sr" },
        { "random", NULL, MADV_RANDOM, "rr" },
        { "locked", NULL, -1, "lo" },
    };
    int nw = sizeof w / sizeof w[0];
    for (int i = 0; i < nw; i++) {
        /* A guard page on each side keeps the regions apart (no merging). */
        char *g = mmap(NULL, (PAGES + 2) * pg, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        w[i].p = mmap(g + pg, PAGES * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
        memset(w[i].p, 'a' + i, PAGES * pg);
        int r = w[i].advice == -1 ? mlock(w[i].p, PAGES * pg) : madvise(w[i].p, PAGES * pg, w[i].advice);
        if (r != 0) { printf("FAIL: setting up %s\n", w[i].name); return 1; }
    }
    char *reserved = NULL, *noreserve = NULL;
    for (int i = 0; i < 2; i++) {
        char *g = mmap(NULL, (PAGES + 2) * pg, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        char *p = mmap(g + pg, PAGES * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | (i ? MAP_NORESERVE : 0), -1, 0);
        if (p == MAP_FAILED) { printf("FAIL: mmap\n"); return 1; }
        memset(p, 'x', PAGES * pg);
        *(i ? &noreserve : &reserved) = p;
    }
    /* MAP_DROPPABLE (0x08), where the kernel has it. */
    char *gd = mmap(NULL, (PAGES + 2) * pg, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    char *droppable = mmap(gd + pg, PAGES * pg, PROT_READ | PROT_WRITE, 0x08 | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    if (droppable == MAP_FAILED) droppable = NULL;
    for (int s = 0; s < n; s++) {
        if (droppable && has_flag(droppable, "dp") != 1) { printf("FAIL: a droppable mapping is not droppable at step %d\n", s); return 1; }
        if (has_flag(reserved, "nr") != 0) { printf("FAIL: a mapping made without MAP_NORESERVE has it at step %d\n", s); return 1; }
        if (has_flag(noreserve, "nr") != 1) { printf("FAIL: a mapping made with MAP_NORESERVE lost it at step %d\n", s); return 1; }
        for (int i = 0; i < nw; i++) {
            if (has_flag(w[i].p, w[i].flag) != 1) { printf("FAIL: %s lost VmFlags '%s' at step %d\n", w[i].name, w[i].flag, s); return 1; }
            if (w[i].p[s % (PAGES * pg)] != 'a' + i) { printf("FAIL: %s contents at step %d\n", w[i].name, s); return 1; }
        }
        if (s % 10 == 0) {
            pid_t c = fork();
            if (c == 0) {
                if (w[2].p[0] != 0) _exit(2);                 /* wiped on fork */
                if (msync(w[1].p, pg, MS_ASYNC) == 0) _exit(3); /* not mapped in the child */
                _exit(0);
            }
            int st = 0;
            pid_t r = waitpid(c, &st, 0);
            if (r != c || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
                printf("FAIL: the forked child saw %d at step %d (fork %d, waitpid %d, status %#x, errno %d)\n", WEXITSTATUS(st), s,
                       (int)c, (int)r, st, errno);
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
