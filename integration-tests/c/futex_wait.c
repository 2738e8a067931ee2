/* Threads blocked in futex waits: one in pthread_cond_wait, one in a raw FUTEX_WAIT, one in
 * pthread_mutex_lock on a mutex the main thread holds while it sleeps. */
#include <linux/futex.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER, held = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int gen, seen_cv, n;
static volatile int word, seen_futex, seen_mutex;

static void *cond_waiter(void *a) {
    (void)a;
    pthread_mutex_lock(&mu);
    for (int g = 0; g < n; g++) {
        while (gen == g) pthread_cond_wait(&cv, &mu);
        seen_cv++;
    }
    pthread_mutex_unlock(&mu);
    return NULL;
}

static void *futex_waiter(void *a) {
    (void)a;
    for (int g = 0; g < n; g++) {
        while (__atomic_load_n(&word, __ATOMIC_ACQUIRE) == g)
            syscall(SYS_futex, &word, FUTEX_WAIT_PRIVATE, g, NULL, NULL, 0);
        __atomic_add_fetch(&seen_futex, 1, __ATOMIC_RELEASE);
    }
    return NULL;
}

static volatile int relocked;

static void *mutex_waiter(void *a) {
    (void)a;
    for (int g = 0; g < n; g++) {
        pthread_mutex_lock(&held); /* blocks: main holds it while it sleeps */
        __atomic_add_fetch(&seen_mutex, 1, __ATOMIC_RELEASE);
        pthread_mutex_unlock(&held);
        while (__atomic_load_n(&relocked, __ATOMIC_ACQUIRE) < g + 1) {
            struct timespec ts = { 0, 200000L };
            nanosleep(&ts, NULL);
        }
    }
    return NULL;
}

int main(int argc, char **argv) {
    n = argc > 1 ? atoi(argv[1]) : 40;
    long ms = argc > 2 ? atol(argv[2]) : 20;
    setvbuf(stdout, NULL, _IONBF, 0);
    pthread_t t[3];
    pthread_mutex_lock(&held);
    pthread_create(&t[0], NULL, cond_waiter, NULL);
    pthread_create(&t[1], NULL, futex_waiter, NULL);
    pthread_create(&t[2], NULL, mutex_waiter, NULL);
    for (int g = 0; g < n; g++) {
        struct timespec ts = { 0, ms * 1000000L };
        nanosleep(&ts, NULL); /* everyone is blocked now */
        pthread_mutex_lock(&mu);
        gen = g + 1;
        pthread_cond_signal(&cv);
        pthread_mutex_unlock(&mu);
        __atomic_store_n(&word, g + 1, __ATOMIC_RELEASE);
        syscall(SYS_futex, &word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
        pthread_mutex_unlock(&held);
        while (__atomic_load_n(&seen_mutex, __ATOMIC_ACQUIRE) < g + 1 || __atomic_load_n(&seen_futex, __ATOMIC_ACQUIRE) < g + 1) {
            struct timespec s2 = { 0, 1000000L };
            nanosleep(&s2, NULL);
        }
        pthread_mutex_lock(&held);
        __atomic_store_n(&relocked, g + 1, __ATOMIC_RELEASE);
        printf("generation %d woke futex %d mutex %d\n", g + 1, seen_futex, seen_mutex);
    }
    pthread_mutex_unlock(&held);
    for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
    printf("done cond %d futex %d mutex %d\n", seen_cv, seen_futex, seen_mutex);
    return 0;
}
