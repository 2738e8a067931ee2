/* Single thread: counts and prints progress; heap and stack state must survive restart. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <time.h>

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 50;
    long ms = argc > 2 ? atol(argv[2]) : 20;
    unsigned long sum = 0;
    unsigned long *heap = calloc(1000, sizeof *heap);
    setvbuf(stdout, NULL, _IONBF, 0);
    for (int i = 0; i < n; i++) {
        heap[i % 1000] += i;
        sum = sum * 31 + heap[i % 1000];
        printf("step %d sum %lu\n", i, sum);
        struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
        nanosleep(&ts, NULL);
    }
    printf("done %lu\n", sum);
    return 0;
}
