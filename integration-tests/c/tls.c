/* Thread-local storage (__thread, initialised and zero-initialised, plus pthread keys) in
 * several threads; each thread checks its values after every step. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <errno.h>

#define NT 3
static __thread long tval = 1000;
static __thread char tbuf[256];
static pthread_key_t key;
static pthread_barrier_t bar;
static int n;
static long ms;
static long results[NT];

static void *worker(void *arg) {
    long id = (long)arg;
    tval = id * 100;
    for (int i = 0; i < 256; i++) tbuf[i] = (char)(id + i);
    pthread_setspecific(key, (void *)(id + 7));
    errno = (int)id + 40;
    for (int s = 0; s < n; s++) {
        tval += id + 1;
        int ok = (long)pthread_getspecific(key) == id + 7 && errno == (int)id + 40;
        for (int i = 0; i < 256; i++) ok &= tbuf[i] == (char)(id + i);
        results[id] = ok ? tval : -1;
        pthread_barrier_wait(&bar);
        pthread_barrier_wait(&bar);
    }
    return NULL;
}

int main(int argc, char **argv) {
    n = argc > 1 ? atoi(argv[1]) : 40;
    ms = argc > 2 ? atol(argv[2]) : 20;
    setvbuf(stdout, NULL, _IONBF, 0);
    pthread_key_create(&key, NULL);
    pthread_barrier_init(&bar, NULL, NT + 1);
    pthread_t t[NT];
    for (long i = 0; i < NT; i++) pthread_create(&t[i], NULL, worker, (void *)i);
    for (int s = 0; s < n; s++) {
        pthread_barrier_wait(&bar);
        printf("step %d tls %ld %ld %ld main %ld\n", s, results[0], results[1], results[2], tval);
        tval++;
        struct timespec ts = { 0, ms * 1000000L };
        nanosleep(&ts, NULL);
        pthread_barrier_wait(&bar);
    }
    for (int i = 0; i < NT; i++) pthread_join(t[i], NULL);
    printf("done\n");
    return 0;
}
