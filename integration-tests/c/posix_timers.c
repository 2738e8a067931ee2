/* POSIX timers (timer_create) across restarts, checked from inside at every step:
 * - a periodic CLOCK_MONOTONIC timer signalling SIGALRM with a value: it keeps firing, and
 *   every signal carries the value and SI_TIMER;
 * - a one-shot CLOCK_REALTIME timer far in the future: still armed, its time left only
 *   shrinking, never fired;
 * - a SIGEV_NONE timer on CLOCK_MONOTONIC, periodic: still armed with its interval;
 * - a disarmed timer (created, never set) and a gap in the ids (one timer deleted): every
 *   timer_t the program holds still names its timer (timer_gettime works, ids unchanged).
 * Output has no times in it. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t fired, bad;

static void on_alarm(int sig, siginfo_t *si, void *uc) {
    (void)sig; (void)uc;
    if (si->si_code != SI_TIMER || si->si_value.sival_int != 4242) bad = 1;
    fired++;
}

static long long ns(struct timespec t) { return t.tv_sec * 1000000000LL + t.tv_nsec; }

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 40;
    long ms = argc > 2 ? atol(argv[2]) : 20;
    setvbuf(stdout, NULL, _IONBF, 0);
    struct sigaction sa = { .sa_sigaction = on_alarm, .sa_flags = SA_SIGINFO | SA_RESTART };
    sigemptyset(&sa.sa_mask);
    sigaction(SIGALRM, &sa, NULL);
    timer_t periodic, far, none, disarmed, gone;
    struct sigevent ev = { .sigev_notify = SIGEV_SIGNAL, .sigev_signo = SIGALRM };
    ev.sigev_value.sival_int = 4242;
    if (timer_create(CLOCK_MONOTONIC, &ev, &periodic)) { printf("FAIL: create\n"); return 1; }
    struct sigevent ev2 = { .sigev_notify = SIGEV_SIGNAL, .sigev_signo = SIGUSR1 };
    if (timer_create(CLOCK_REALTIME, &ev2, &gone) || timer_create(CLOCK_REALTIME, &ev2, &far)) { printf("FAIL: create\n"); return 1; }
    timer_delete(gone);
    struct sigevent evn = { .sigev_notify = SIGEV_NONE };
    if (timer_create(CLOCK_MONOTONIC, &evn, &none) || timer_create(CLOCK_BOOTTIME, &evn, &disarmed)) { printf("FAIL: create\n"); return 1; }
    struct itimerspec p = { { 0, 5000000 }, { 0, 5000000 } };
    struct itimerspec f = { { 0, 0 }, { 3600, 0 } };
    struct itimerspec q = { { 7, 0 }, { 7, 0 } };
    timer_settime(periodic, 0, &p, NULL);
    timer_settime(far, 0, &f, NULL);
    timer_settime(none, 0, &q, NULL);
    long long far_left = 3600LL * 1000000000LL;
    int last_fired = 0;
    for (int i = 0; i < n; i++) {
        struct itimerspec cur;
        if (timer_gettime(far, &cur)) { printf("FAIL: the far timer is gone at step %d (errno %d)\n", i, errno); return 1; }
        if (ns(cur.it_value) == 0 || ns(cur.it_value) > far_left) { printf("FAIL: the far timer's time left grew or it fired at step %d\n", i); return 1; }
        far_left = ns(cur.it_value);
        if (timer_gettime(none, &cur) || ns(cur.it_interval) != 7000000000LL || ns(cur.it_value) == 0) { printf("FAIL: the SIGEV_NONE timer at step %d\n", i); return 1; }
        if (timer_gettime(disarmed, &cur) || ns(cur.it_value) != 0) { printf("FAIL: the disarmed timer at step %d\n", i); return 1; }
        if (timer_gettime(periodic, &cur) || ns(cur.it_interval) != 5000000) { printf("FAIL: the periodic timer at step %d\n", i); return 1; }
        /* The periodic timer fires between steps. */
        while (fired == last_fired) {
            struct timespec ts = { 0, 1000000 };
            nanosleep(&ts, NULL);
        }
        last_fired = fired;
        if (bad) { printf("FAIL: a SIGALRM without the timer's value or code\n"); return 1; }
        printf("step %d ok\n", i);
        /* The whole pause, though SIGALRM cuts nanosleep short every 5 ms: the program must
         * last long enough for the test to checkpoint it after a restart. */
        struct timespec ts = { 0, ms * 1000000L };
        while (nanosleep(&ts, &ts) && errno == EINTR) {}
    }
    printf("done\n");
    return 0;
}
