/* Thread ids the program keeps: two worker threads store their gettid(); at every step the
 * main thread aims kcmp (KCMP_FS, KCMP_VM) and tgkill (signal 0) at them, and each worker
 * checks that gettid() (the C library's and syscall(SYS_gettid)) still gives the stored
 * id. A restart gives every thread a new tid from the kernel: before, those ids named no
 * thread (CRIU's clone_fs: kcmp failed with ESRCH). The last worker calls gettid() without
 * pause, so that checkpoints stop it between the system call and the translation. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define KCMP_VM 1
#define KCMP_FS 3
#define NW 2

static volatile int tids[NW];
static volatile int bad[NW];

static void *worker(void *arg) {
    long i = (long)arg;
    tids[i] = (int)syscall(SYS_gettid);
    for (;;) {
        if (gettid() != tids[i] || syscall(SYS_gettid) != tids[i])
            bad[i] = 1;
        /* The last worker asks without pause: a checkpoint then mostly stops it on its way
         * out of the system call, before the library translated the kernel's tid. */
        if (i == NW - 1)
            continue;
        struct timespec ts = { 0, 2000000L };
        nanosleep(&ts, NULL);
    }
    return NULL;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 40;
    long ms = argc > 2 ? atol(argv[2]) : 20;
    setvbuf(stdout, NULL, _IONBF, 0);
    pthread_t t[NW];
    for (long i = 0; i < NW; i++)
        pthread_create(&t[i], NULL, worker, (void *)i);
    for (int i = 0; i < NW; i++)
        while (!tids[i]) {
            struct timespec ts = { 0, 1000000L };
            nanosleep(&ts, NULL);
        }
    for (int s = 0; s < n; s++) {
        int me = (int)syscall(SYS_gettid);
        for (int i = 0; i < NW; i++) {
            if (syscall(SYS_kcmp, me, tids[i], KCMP_FS, 0, 0) != 0 || syscall(SYS_kcmp, me, tids[i], KCMP_VM, 0, 0) != 0) {
                printf("FAIL: kcmp with thread %d: errno %d\n", i, errno);
                return 1;
            }
            if (syscall(SYS_tgkill, getpid(), tids[i], 0) != 0) {
                printf("FAIL: tgkill thread %d: errno %d\n", i, errno);
                return 1;
            }
            if (bad[i]) {
                printf("FAIL: thread %d sees another tid\n", i);
                return 1;
            }
        }
        printf("step %d\n", s);
        struct timespec ts = { 0, ms * 1000000L };
        nanosleep(&ts, NULL);
    }
    printf("done\n");
    return 0;
}
