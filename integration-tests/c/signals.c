/* Signal handlers (one with SA_RESTART, one on an alternate stack with SA_ONSTACK), a
 * blocked signal left pending, and an ignored one: all must be in place after restart. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t usr1, usr2, on_alt;
static char altstack[65536];

static void h1(int s) { (void)s; usr1++; }
static void h2(int s) {
    (void)s;
    char here;
    if (&here >= altstack && &here < altstack + sizeof altstack) on_alt++;
    usr2++;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 40;
    long ms = argc > 2 ? atol(argv[2]) : 20;
    setvbuf(stdout, NULL, _IONBF, 0);
    stack_t ss = { .ss_sp = altstack, .ss_size = sizeof altstack, .ss_flags = 0 };
    sigaltstack(&ss, NULL);
    struct sigaction a = { 0 };
    a.sa_handler = h1;
    a.sa_flags = SA_RESTART;
    sigaction(SIGUSR1, &a, NULL);
    a.sa_handler = h2;
    a.sa_flags = SA_ONSTACK;
    sigaction(SIGUSR2, &a, NULL);
    signal(SIGPIPE, SIG_IGN);
    sigset_t block;
    sigemptyset(&block);
    sigaddset(&block, SIGWINCH);
    sigprocmask(SIG_BLOCK, &block, NULL);
    for (int i = 0; i < n; i++) {
        raise(SIGUSR1);
        if (i % 2) raise(SIGUSR2);
        raise(SIGPIPE);
        sigset_t cur;
        sigprocmask(SIG_BLOCK, NULL, &cur);
        struct sigaction q;
        sigaction(SIGUSR1, NULL, &q);
        printf("step %d usr1 %d usr2 %d on-alt %d winch-blocked %d usr1-handler-ok %d\n", i, (int)usr1, (int)usr2,
               (int)on_alt, sigismember(&cur, SIGWINCH), q.sa_handler == h1 && (q.sa_flags & SA_RESTART) != 0);
        struct timespec ts = { 0, ms * 1000000L };
        nanosleep(&ts, NULL);
    }
    printf("done\n");
    return 0;
}
