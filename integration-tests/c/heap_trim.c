/* The main arena's heap grows and shrinks at every step: many small blocks (served from the
 * brk heap, below the mmap threshold) are allocated, checked and freed again, so glibc gives
 * the top of its heap back with brk. After a restart the kernel's break may not be the
 * program's (no CAP_SYS_RESOURCE): shrinking must not corrupt the heap. Blocks allocated
 * before the checkpoint are verified at every step. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define KEEP 16
#define BURST 400

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 40;
    long ms = argc > 2 ? atol(argv[2]) : 20;
    setvbuf(stdout, NULL, _IONBF, 0);
    unsigned char *keep[KEEP];
    for (int k = 0; k < KEEP; k++) {
        keep[k] = malloc(1000);
        for (int j = 0; j < 1000; j++) keep[k][j] = (unsigned char)(k * 7 + j);
    }
    static unsigned char *burst[BURST];
    for (int s = 0; s < n; s++) {
        unsigned long sum = 0;
        /* Free the previous step's burst first: a checkpoint (taken while the program
         * sleeps) holds it, so a restarted program's first heap operation is a shrink. */
        for (int i = BURST - 1; s > 0 && i >= 0; i--) {
            for (int j = 0; j < 2000; j += 50)
                if (burst[i][j] != (unsigned char)(i + j + s - 1)) { printf("corrupt burst %d\n", i); return 1; }
            free(burst[i]);
        }
        for (int i = 0; i < BURST; i++) {
            burst[i] = malloc(2000);
            if (!burst[i]) { printf("malloc failed\n"); return 1; }
            for (int j = 0; j < 2000; j += 50) { burst[i][j] = (unsigned char)(i + j + s); sum += burst[i][j]; }
        }
        for (int k = 0; k < KEEP; k++)
            for (int j = 0; j < 1000; j++)
                if (keep[k][j] != (unsigned char)(k * 7 + j)) { printf("corrupt block %d\n", k); return 1; }
        printf("step %d sum %lu\n", s, sum);
        struct timespec ts = { 0, ms * 1000000L };
        nanosleep(&ts, NULL);
    }
    printf("done\n");
    return 0;
}
