/* Benchmark workload: a process holding SIZE MiB of random, compressible or sparse data.
 * It measures its own pauses: the main loop notes the longest gap between iterations and
 * prints it on SIGUSR2 ("maxgap_us N"); it prints a heartbeat ("hb N") every 20 ms so that
 * a restart can be timed, and the cost of a bare fork(2) of itself at start ("fork_us").
 * With a third argument PROCS (default 1) it is a job of PROCS such processes: it forks
 * PROCS-1 children first, each holding its own SIZE MiB (other data); each prints its
 * "ready", heartbeats ("hb N pI" for the I-th) and pauses, and the first passes SIGUSR2 on
 * to the others. */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t report;
static void on_usr2(int s) { (void)s; report = 1; }

static uint64_t now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000u + (uint64_t)t.tv_nsec / 1000u;
}

int main(int argc, char **argv) {
    size_t mib = argc > 1 ? strtoul(argv[1], NULL, 10) : 256;
    const char *kind = argc > 2 ? argv[2] : "random";
    int procs = argc > 3 ? atoi(argv[3]) : 1, me = 0;
    pid_t kids[64];
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (int i = 1; i < procs && i < 64; i++) {
        pid_t k = fork();
        if (k == 0) { me = i; break; }
        kids[i] = k;
    }
    size_t len = mib << 20;
    uint64_t *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) { perror("mmap"); return 1; }
    uint64_t x = 88172645463325252ull + (uint64_t)me * 7919u;
    size_t words = len / 8;
    if (!strcmp(kind, "random")) {
        for (size_t i = 0; i < words; i++) { x ^= x << 13; x ^= x >> 7; x ^= x << 17; m[i] = x; }
    } else if (!strcmp(kind, "compressible")) {
        for (size_t i = 0; i < words; i++) m[i] = (i / 512) % 7 + ((i % 64) << 8);
    } else { /* sparse: one word per 64 KiB, the rest never touched */
        for (size_t i = 0; i < words; i += 8192) m[i] = i;
    }
    struct sigaction a = { 0 };
    a.sa_handler = on_usr2;
    a.sa_flags = SA_RESTART;
    sigaction(SIGUSR2, &a, NULL);
    uint64_t t0 = now_us();
    long pid = syscall(SYS_fork);
    if (pid == 0) syscall(SYS_exit_group, 0);
    uint64_t fork_us = now_us() - t0;
    waitpid((pid_t)pid, NULL, 0);
    printf("ready fork_us %llu\n", (unsigned long long)fork_us);
    uint64_t last = now_us(), maxgap = 0, hb_at = last, hb = 0, it = 0;
    for (;;) {
        m[(it++ * 4099) % words] += 1; /* keeps the program writing (copy-on-write cost) */
        struct timespec ts = { 0, 200000L };
        nanosleep(&ts, NULL);
        uint64_t t = now_us();
        if (t - last > maxgap) maxgap = t - last;
        last = t;
        if (report) {
            report = 0;
            printf("maxgap_us %llu\n", (unsigned long long)maxgap);
            maxgap = 0;
            if (me == 0) for (int i = 1; i < procs && i < 64; i++) kill(kids[i], SIGUSR2);
        }
        if (t - hb_at >= 20000) { hb_at = t; printf("hb %llu p%d\n", (unsigned long long)hb++, me); }
    }
}
