/* System V shared memory across restarts, checked from inside at every step (CRIU's shm).
 * Segment A (key from the command line, 10000 bytes: not a whole number of pages) is
 * attached by the parent and, through fork, by its child: each step the parent writes the
 * step into A and waits for the child to answer in A, and checks the segment through its id
 * (IPC_STAT: key, size, two attachments). Segment B (private, 8192 bytes) is removed
 * (IPC_RMID) as soon as it is attached: it lives while attached, and the parent checks that
 * what it wrote there stays. At the end both are detached with shmdt, which needs them to
 * be System V attachments still (EINVAL after a restart that made them plain shared memory).
 * A is left for the caller to remove (another restart of the same image attaches it again). */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/shm.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define A_SIZE 10000
#define B_SIZE 8192

static void nap(long ms) {
    struct timespec t = { ms / 1000, (ms % 1000) * 1000000L };
    nanosleep(&t, NULL);
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 40;
    long ms = argc > 2 ? atol(argv[2]) : 20;
    key_t key = argc > 3 ? (key_t)strtol(argv[3], NULL, 0) : 0x5eed0001;
    setvbuf(stdout, NULL, _IONBF, 0);
    int a = shmget(key, A_SIZE, IPC_CREAT | 0600);
    if (a < 0) { printf("FAIL: shmget A (errno %d)\n", errno); return 1; }
    volatile int *pa = shmat(a, NULL, 0);
    if (pa == (void *)-1) { printf("FAIL: shmat A (errno %d)\n", errno); return 1; }
    int b = shmget(IPC_PRIVATE, B_SIZE, IPC_CREAT | 0600);
    if (b < 0) { printf("FAIL: shmget B (errno %d)\n", errno); return 1; }
    volatile int *pb = shmat(b, NULL, 0);
    if (pb == (void *)-1) { printf("FAIL: shmat B (errno %d)\n", errno); return 1; }
    if (shmctl(b, IPC_RMID, NULL)) { printf("FAIL: removing B (errno %d)\n", errno); return 1; }
    memset((void *)pa, 0, A_SIZE);
    /* pa[0]: the step the parent asks about; pa[1]: the child's answer; the last int of
     * the segment: written by both, read back (the bytes past the last page boundary). */
    pid_t parent = getpid();
    pid_t child = fork();
    if (child < 0) { printf("FAIL: fork\n"); return 1; }
    if (child == 0) {
        for (;;) {
            int s = pa[0];
            if (s > 0 && pa[1] != s + 1000) pa[1] = s + 1000;
            if (s < 0) _exit(0);
            /* A parent that failed does not say so: do not outlive it. */
            if (getppid() != parent) _exit(1);
            nap(1);
        }
    }
    for (int s = 1; s <= n; s++) {
        struct shmid_ds ds;
        if (shmctl(a, IPC_STAT, &ds)) { printf("FAIL: step %d: IPC_STAT of A's id (errno %d)\n", s, errno); return 1; }
        if (ds.shm_perm.__key != key || ds.shm_segsz != A_SIZE) { printf("FAIL: step %d: A's id names another segment\n", s); return 1; }
        if (ds.shm_nattch != 2) { printf("FAIL: step %d: A has %lu attachments, not 2\n", s, (unsigned long)ds.shm_nattch); return 1; }
        if (s > 1 && (pb[0] != s - 1 || pb[B_SIZE / 4 - 1] != -(s - 1))) { printf("FAIL: step %d: B lost what step %d wrote\n", s, s - 1); return 1; }
        if (s > 1 && pa[A_SIZE / 4 - 1] != s - 1) { printf("FAIL: step %d: the end of A lost step %d\n", s, s - 1); return 1; }
        pb[0] = s;
        pb[B_SIZE / 4 - 1] = -s;
        pa[A_SIZE / 4 - 1] = s;
        pa[0] = s;
        int waited = 0;
        while (pa[1] != s + 1000 && waited < 600000) { nap(1); waited++; }
        if (pa[1] != s + 1000) { printf("FAIL: step %d: the child did not answer through A\n", s); return 1; }
        printf("step %d ok\n", s);
        nap(ms);
    }
    pa[0] = -1;
    int st;
    if (waitpid(child, &st, 0) != child || !WIFEXITED(st) || WEXITSTATUS(st) != 0) { printf("FAIL: the child did not end well\n"); return 1; }
    if (shmdt((void *)pa)) { printf("FAIL: shmdt A (errno %d)\n", errno); return 1; }
    if (shmdt((void *)pb)) { printf("FAIL: shmdt B (errno %d)\n", errno); return 1; }
    printf("done\n");
    return 0;
}
