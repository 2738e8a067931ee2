/* A signal sent to the process never runs the program's handler on one of crum's threads,
 * not even in their first moments. crum ends and starts its threads again around every
 * setns() of a user namespace (libcrum_libc.so), so a worker thread calling
 * setns(-1, CLONE_NEWUSER) (EBADF) over and over makes fresh crum threads while the main
 * thread keeps sending SIGUSR1 and a real-time signal to the process. The main thread blocks
 * both, so the worker is the only program thread that takes them; the handler looks at the
 * name of the thread it runs on (prctl). Prints "PASS handled N" or FAIL lines. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/prctl.h>
#include <unistd.h>

static volatile sig_atomic_t bad, handled, done;
static char bad_name[17];

static void handler(int sig) {
    (void)sig;
    char name[17] = { 0 };
    prctl(PR_GET_NAME, name);
    if (strncmp(name, "crum", 4) == 0) {
        memcpy(bad_name, name, sizeof name);
        bad++;
    }
    handled++;
}

static int rounds;

static void *worker(void *arg) {
    (void)arg;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    sigaddset(&set, SIGRTMIN + 3);
    pthread_sigmask(SIG_UNBLOCK, &set, NULL);
    prctl(PR_SET_NAME, "worker");
    for (int i = 0; i < rounds; i++) {
        if (setns(-1, CLONE_NEWUSER) != -1 || errno != EBADF) {
            printf("FAIL setns(-1) answered %s\n", strerror(errno));
            break;
        }
    }
    done = 1;
    return NULL;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IONBF, 0);
    rounds = argc > 1 ? atoi(argv[1]) : 200;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = handler;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGRTMIN + 3, &sa, NULL);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    sigaddset(&set, SIGRTMIN + 3);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    pthread_t t;
    pthread_create(&t, NULL, worker, NULL);
    long sent = 0;
    while (!done) {
        /* Keep some signals pending at all times, without flooding the worker. */
        if (sent - handled < 16) {
            kill(getpid(), SIGUSR1);
            if (kill(getpid(), SIGRTMIN + 3) == 0) sent++;
        }
        sched_yield();
    }
    pthread_join(t, NULL);
    /* What is still pending for the process goes to this thread now. */
    pthread_sigmask(SIG_UNBLOCK, &set, NULL);
    if (bad) printf("FAIL %d signals handled on crum's thread %s\n", (int)bad, bad_name);
    else printf("PASS handled %d of %ld real-time sends\n", (int)handled, sent);
    return bad != 0;
}
