/* The heap keeps growing (small and large allocations) and every block is verified at each
 * step, so memory allocated before the checkpoint must be intact and malloc must keep
 * working after restart. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 40;
    long ms = argc > 2 ? atol(argv[2]) : 20;
    setvbuf(stdout, NULL, _IONBF, 0);
    unsigned char **blocks = calloc(n, sizeof *blocks);
    size_t *sizes = calloc(n, sizeof *sizes);
    for (int i = 0; i < n; i++) {
        sizes[i] = (i % 3 == 0) ? (size_t)(i + 1) * 40000 : (size_t)(i + 1) * 100;
        blocks[i] = malloc(sizes[i]);
        for (size_t j = 0; j < sizes[i]; j++) blocks[i][j] = (unsigned char)(i * 31 + j);
        unsigned long sum = 0;
        for (int k = 0; k <= i; k++)
            for (size_t j = 0; j < sizes[k]; j += 97) {
                if (blocks[k][j] != (unsigned char)(k * 31 + j)) { printf("corrupt block %d\n", k); return 1; }
                sum += blocks[k][j];
            }
        if (i % 5 == 4) { free(blocks[i - 2]); blocks[i - 2] = malloc(sizes[i - 2]);
            for (size_t j = 0; j < sizes[i - 2]; j++) blocks[i - 2][j] = (unsigned char)((i - 2) * 31 + j); }
        printf("step %d blocks %d sum %lu\n", i, i + 1, sum);
        struct timespec ts = { 0, ms * 1000000L };
        nanosleep(&ts, NULL);
    }
    printf("done\n");
    return 0;
}
