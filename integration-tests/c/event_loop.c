/* An epoll event loop, as servers and runtimes have: an eventfd counting as a semaphore, a
 * plain eventfd holding a running total, a periodic timerfd (edge-triggered), a signalfd
 * for SIGUSR1 (blocked), and a pipe watched with EPOLLONESHOT that has fired once and must
 * stay disarmed. Each step kicks the eventfds and raises SIGUSR1, then waits on epoll until
 * the timer, the semaphore and the signal have all been reported with their own data tags.
 * Everything is checked from inside; the output is the running total (deterministic). */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#define TAG_SEM 0xE1E1E1E1E1ULL
#define TAG_TIMER 0x7171ULL
#define TAG_SIG 0x5151ULL
#define TAG_PIPE 0x9999ULL

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 40;
    long ms = argc > 2 ? atol(argv[2]) : 20;
    setvbuf(stdout, NULL, _IONBF, 0);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    sigprocmask(SIG_BLOCK, &set, NULL);
    int sem = eventfd(0, EFD_SEMAPHORE | EFD_NONBLOCK);
    int total = eventfd(0, EFD_NONBLOCK);
    int tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK);
    int sfd = signalfd(-1, &set, SFD_NONBLOCK);
    int ep = epoll_create1(0);
    int p[2];
    if (sem < 0 || total < 0 || tfd < 0 || sfd < 0 || ep < 0 || pipe(p) != 0) { printf("FAIL: setup\n"); return 1; }
    struct itimerspec its = { { 0, ms * 1000000L }, { 0, ms * 1000000L } };
    timerfd_settime(tfd, 0, &its, NULL);
    struct epoll_event ev;
    ev.events = EPOLLIN; ev.data.u64 = TAG_SEM; epoll_ctl(ep, EPOLL_CTL_ADD, sem, &ev);
    ev.events = EPOLLIN | EPOLLET; ev.data.u64 = TAG_TIMER; epoll_ctl(ep, EPOLL_CTL_ADD, tfd, &ev);
    ev.events = EPOLLIN; ev.data.u64 = TAG_SIG; epoll_ctl(ep, EPOLL_CTL_ADD, sfd, &ev);
    ev.events = EPOLLIN | EPOLLONESHOT; ev.data.u64 = TAG_PIPE; epoll_ctl(ep, EPOLL_CTL_ADD, p[0], &ev);
    /* Fire the one-shot watch once: from now on it is disarmed. */
    write(p[1], "x", 1);
    struct epoll_event got[8];
    if (epoll_wait(ep, got, 8, 1000) != 1 || got[0].data.u64 != TAG_PIPE) { printf("FAIL: one-shot\n"); return 1; }
    uint64_t v = 5;
    write(total, &v, 8);
    for (int s = 0; s < n; s++) {
        v = 3;
        write(sem, &v, 8);
        uint64_t t = 0;
        if (read(total, &t, 8) != 8 || t != (uint64_t)s * 7 + 5) { printf("FAIL: total %llu at step %d\n", (unsigned long long)t, s); return 1; }
        t += 7;
        write(total, &t, 8);
        kill(getpid(), SIGUSR1);
        write(p[1], "y", 1);
        int seen_sem = 0, seen_timer = 0, seen_sig = 0;
        while (!(seen_sem && seen_timer && seen_sig)) {
            int k = epoll_wait(ep, got, 8, 5000);
            if (k <= 0) { printf("FAIL: epoll_wait %d (sem %d timer %d sig %d) at step %d\n", k, seen_sem, seen_timer, seen_sig, s); return 1; }
            for (int i = 0; i < k; i++) {
                uint64_t x;
                if (got[i].data.u64 == TAG_SEM) {
                    int reads = 0;
                    while (read(sem, &x, 8) == 8) { if (x != 1) { printf("FAIL: semaphore read %llu\n", (unsigned long long)x); return 1; } reads++; }
                    if (reads != 3) { printf("FAIL: %d semaphore reads at step %d\n", reads, s); return 1; }
                    seen_sem = 1;
                } else if (got[i].data.u64 == TAG_TIMER) {
                    if (read(tfd, &x, 8) == 8 && x >= 1) seen_timer = 1;
                } else if (got[i].data.u64 == TAG_SIG) {
                    struct signalfd_siginfo si;
                    if (read(sfd, &si, sizeof si) != sizeof si || si.ssi_signo != SIGUSR1) { printf("FAIL: signalfd\n"); return 1; }
                    seen_sig = 1;
                } else {
                    printf("FAIL: event with data %#llx at step %d\n", (unsigned long long)got[i].data.u64, s);
                    return 1;
                }
            }
        }
        printf("step %d total %llu\n", s, (unsigned long long)t);
    }
    printf("done\n");
    return 0;
}
