/* A thread that blocks crum's stop signal (SIGRTMAX-1): a checkpoint cannot stop it and must
 * say so, naming the thread, at once. Prints "blocker <tid>" and "ready", waits for the file
 * "go", unblocks the signal (the stop signal of the refused checkpoint is still pending: its
 * handler must not wait for a checkpoint that was given up), then "done". */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static volatile int started;

static void *blocker(void *arg) {
    (void)arg;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGRTMAX - 1);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    prctl(PR_SET_NAME, "blocker");
    printf("blocker %ld\n", (long)syscall(SYS_gettid));
    started = 1;
    while (access("go", F_OK) != 0) {
        struct timespec ts = { 0, 5000000L };
        nanosleep(&ts, NULL);
    }
    pthread_sigmask(SIG_UNBLOCK, &set, NULL);
    return NULL;
}

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    pthread_t t;
    pthread_create(&t, NULL, blocker, NULL);
    while (!started) {
        struct timespec ts = { 0, 1000000L };
        nanosleep(&ts, NULL);
    }
    printf("ready\n");
    pthread_join(t, NULL);
    printf("done\n");
    return 0;
}
