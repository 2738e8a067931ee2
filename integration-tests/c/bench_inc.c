/* Benchmark program for incremental images (scripts/bench-incremental.sh): fills MiB of
 * memory with noise, prints "ready", then polls the file `cmd` in its working directory
 * every 2 ms and obeys it (then removes it and prints "done <cmd>"):
 *   contig PCT SEED    rewrite PCT % of its memory as one contiguous stretch
 *   scatter PCT SEED   rewrite PCT % of it as 64 KiB blocks at random places
 *   stop               exit 0 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static uint64_t rng = 88172645463325252u;
static uint64_t next(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return rng; }

int main(int argc, char **argv) {
    size_t size = (size_t)(argc > 1 ? atol(argv[1]) : 256) << 20;
    uint64_t *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return 1;
    for (size_t i = 0; i < size / 8; i++) p[i] = next();
    setvbuf(stdout, NULL, _IONBF, 0);
    printf("ready\n");
    for (;;) {
        FILE *f = fopen("cmd", "r");
        if (!f) { usleep(2000); continue; }
        char what[16] = ""; double pct = 0; unsigned long seed = 1;
        int n = fscanf(f, "%15s %lf %lu", what, &pct, &seed);
        fclose(f);
        if (n < 1) { usleep(2000); continue; }
        unlink("cmd");
        if (!strcmp(what, "stop")) { printf("done stop\n"); return 0; }
        rng = seed * 2654435761u + 1;
        size_t bytes = (size_t)(size * pct / 100.0) & ~(size_t)0xffff;
        if (!strcmp(what, "contig")) {
            size_t at = (next() % (size - bytes + 1)) & ~(size_t)0xffff;
            for (size_t i = 0; i < bytes / 8; i++) p[at / 8 + i] = next();
        } else {
            for (size_t b = 0; b < bytes >> 16; b++) {
                size_t at = (next() % (size >> 16)) << 16;
                for (size_t i = 0; i < 8192; i++) p[at / 8 + i] = next();
            }
        }
        printf("done %s %g %lu\n", what, pct, seed);
    }
}
