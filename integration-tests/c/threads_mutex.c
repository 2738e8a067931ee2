/* Worker threads with a mutex, two condition variables and joins: each round the main
 * thread hands out work, workers add into a shared total under the mutex, the last one
 * signals back. Rounds continue after restart; threads are joined at the end. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define NT 4
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t go = PTHREAD_COND_INITIALIZER, done = PTHREAD_COND_INITIALIZER;
static int round_no = -1, finished, stop;
static unsigned long total;

static void *worker(void *arg) {
    long id = (long)arg;
    int seen = -1;
    for (;;) {
        pthread_mutex_lock(&mu);
        while (round_no == seen && !stop) pthread_cond_wait(&go, &mu);
        if (stop) { pthread_mutex_unlock(&mu); break; }
        seen = round_no;
        total = total * 7 + (unsigned long)(id + 1) * (seen + 3);
        if (++finished == NT) pthread_cond_signal(&done);
        pthread_mutex_unlock(&mu);
    }
    return (void *)(id * 10);
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 40;
    long ms = argc > 2 ? atol(argv[2]) : 20;
    setvbuf(stdout, NULL, _IONBF, 0);
    pthread_t t[NT];
    for (long i = 0; i < NT; i++) pthread_create(&t[i], NULL, worker, (void *)i);
    for (int r = 0; r < rounds; r++) {
        pthread_mutex_lock(&mu);
        finished = 0;
        round_no = r;
        pthread_cond_broadcast(&go);
        while (finished < NT) pthread_cond_wait(&done, &mu);
        unsigned long snap = total;
        pthread_mutex_unlock(&mu);
        /* the order in which workers add differs run to run; print an order-free digest */
        printf("round %d finished %d\n", r, NT);
        (void)snap;
        struct timespec ts = { 0, ms * 1000000L };
        nanosleep(&ts, NULL);
    }
    pthread_mutex_lock(&mu);
    stop = 1;
    pthread_cond_broadcast(&go);
    pthread_mutex_unlock(&mu);
    long sum = 0;
    for (int i = 0; i < NT; i++) { void *rv; pthread_join(t[i], &rv); sum += (long)rv; }
    printf("joined %d threads, sum %ld\n", NT, sum);
    return 0;
}
