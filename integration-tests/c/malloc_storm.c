/* Many threads (more than glibc has malloc arenas on small machines) allocate and free all
 * the time, so checkpoints stop threads inside malloc holding arena locks: the agent must
 * not need those locks. Each thread checks its own blocks; the main thread prints progress. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NT 40
static volatile int stop;
static long rounds[NT];

static void *worker(void *arg) {
    long id = (long)arg;
    unsigned x = (unsigned)id * 2654435761u + 1;
    void *keep[64] = {0};
    while (!stop) {
        x = x * 1103515245u + 12345u;
        int k = (x >> 8) % 64;
        size_t sz = 16 + (x >> 16) % 4000;
        free(keep[k]);
        keep[k] = malloc(sz);
        memset(keep[k], (int)id, sz < 64 ? sz : 64);
        if (((unsigned char *)keep[k])[0] != (unsigned char)id) { printf("corrupt\n"); exit(1); }
        rounds[id]++;
        if ((rounds[id] & 63) == 0) { struct timespec ts = { 0, 200000L }; nanosleep(&ts, NULL); }
    }
    for (int k = 0; k < 64; k++) free(keep[k]);
    return NULL;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 40;
    long ms = argc > 2 ? atol(argv[2]) : 20;
    setvbuf(stdout, NULL, _IONBF, 0);
    pthread_t t[NT];
    for (long i = 0; i < NT; i++) pthread_create(&t[i], NULL, worker, (void *)i);
    for (int s = 0; s < n; s++) {
        struct timespec ts = { 0, ms * 1000000L };
        nanosleep(&ts, NULL);
        printf("step %d\n", s);
    }
    stop = 1;
    for (int i = 0; i < NT; i++) pthread_join(t[i], NULL);
    long total = 0;
    for (int i = 0; i < NT; i++) total += rounds[i] > 0;
    printf("done, %ld threads worked\n", total);
    return 0;
}
