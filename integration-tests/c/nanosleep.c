/* A thread sleeps in long nanosleep() calls (with and without a remainder pointer) and in
 * clock_nanosleep(TIMER_ABSTIME); each must complete normally (no EINTR) even though the
 * thread is stopped for checkpoints in the middle of its sleeps. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static int n;
static long ms;
static volatile int progress;

static void *sleeper(void *arg) {
    (void)arg;
    for (int i = 0; i < n; i++) {
        struct timespec ts = { 0, ms * 1000000L }, rem;
        int r;
        if (i % 3 == 0) {
            r = nanosleep(&ts, NULL);
        } else if (i % 3 == 1) {
            r = nanosleep(&ts, &rem);
        } else {
            struct timespec now;
            clock_gettime(CLOCK_MONOTONIC, &now);
            now.tv_nsec += ms * 1000000L;
            if (now.tv_nsec >= 1000000000L) { now.tv_sec++; now.tv_nsec -= 1000000000L; }
            r = clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &now, NULL);
        }
        printf("sleep %d returned %d%s\n", i, r, r ? (errno == EINTR ? " EINTR" : " error") : "");
        progress = i + 1;
    }
    return NULL;
}

int main(int argc, char **argv) {
    n = argc > 1 ? atoi(argv[1]) : 40;
    ms = argc > 2 ? atol(argv[2]) : 20;
    ms *= 3;
    n /= 3;
    setvbuf(stdout, NULL, _IONBF, 0);
    pthread_t t;
    pthread_create(&t, NULL, sleeper, NULL);
    pthread_join(t, NULL);
    printf("done %d\n", progress);
    return 0;
}
