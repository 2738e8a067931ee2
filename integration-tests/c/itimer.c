/* A periodic ITIMER_REAL drives the program: the main loop waits for SIGALRM ticks with
 * pause(); the timer must keep running after restart. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/time.h>
#include <unistd.h>

static volatile sig_atomic_t ticks;
static void on_alarm(int s) { (void)s; ticks++; }

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 40;
    long ms = argc > 2 ? atol(argv[2]) : 20;
    setvbuf(stdout, NULL, _IONBF, 0);
    struct sigaction a = { 0 };
    a.sa_handler = on_alarm;
    sigaction(SIGALRM, &a, NULL);
    struct itimerval it = { { 0, ms * 1000 }, { 0, ms * 1000 } };
    setitimer(ITIMER_REAL, &it, NULL);
    for (int i = 1; i <= n; i++) {
        while (ticks < i) pause();
        struct itimerval cur;
        getitimer(ITIMER_REAL, &cur);
        printf("tick %d interval-us %ld armed %d\n", i, (long)cur.it_interval.tv_usec,
               cur.it_value.tv_sec != 0 || cur.it_value.tv_usec != 0);
    }
    printf("done\n");
    return 0;
}
