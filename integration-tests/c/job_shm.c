/* A parent and a forked child sharing memory three ways, mapped before the fork:
 * anonymous shared memory (MAP_SHARED | MAP_ANONYMOUS) holding two process-shared
 * semaphores and the request, a POSIX shared memory object removed right after it was
 * mapped (as python3's multiprocessing does with its semaphores) and a memfd whose
 * descriptor is closed, both holding answers. For each step the parent writes x, posts
 * the request semaphore and waits (at most 20 s) for the child's answers x*x+1 and x+7 in
 * the two other mappings. If a restart gave each process its own copy, the semaphore
 * never comes and the parent says FAIL. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct req { sem_t ask, done; volatile long x; };

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 40;
    setvbuf(stdout, NULL, _IONBF, 0);
    struct req *q = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    char name[64];
    snprintf(name, sizeof name, "/crum-job-shm-%d", (int)getpid());
    int sfd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (q == MAP_FAILED || sfd < 0 || ftruncate(sfd, 4096) != 0) { printf("FAIL setup\n"); return 1; }
    volatile long *y = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, sfd, 0);
    shm_unlink(name);
    close(sfd);
    int mfd = memfd_create("answers", 0);
    if (mfd < 0 || ftruncate(mfd, 4096) != 0) { printf("FAIL memfd\n"); return 1; }
    volatile long *z = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
    close(mfd);
    if (y == MAP_FAILED || z == MAP_FAILED || sem_init(&q->ask, 1, 0) != 0 || sem_init(&q->done, 1, 0) != 0) {
        printf("FAIL map\n");
        return 1;
    }
    pid_t kid = fork();
    if (kid == 0) {
        for (;;) {
            while (sem_wait(&q->ask) != 0) {}
            long x = q->x;
            if (x < 0) _exit(0);
            *y = x * x + 1;
            *z = x + 7;
            sem_post(&q->done);
        }
    }
    for (long i = 0; i < n; i++) {
        q->x = i;
        sem_post(&q->ask);
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += 20;
        int r;
        while ((r = sem_timedwait(&q->done, &until)) != 0 && errno == EINTR) {}
        if (r != 0) { printf("FAIL step %ld: no answer from the child\n", i); return 1; }
        if (*y != i * i + 1 || *z != i + 7) { printf("FAIL step %ld: got %ld %ld\n", i, *y, *z); return 1; }
        printf("step %ld got %ld %ld\n", i, *y, *z);
        struct timespec ts = { 0, 20000000L };
        nanosleep(&ts, NULL);
    }
    q->x = -1;
    sem_post(&q->ask);
    int st = 0;
    if (waitpid(kid, &st, 0) != kid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) { printf("FAIL child %#x\n", st); return 1; }
    printf("done\n");
    return 0;
}
