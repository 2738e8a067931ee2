/* Installs its own SIGUSR1 handler once a file named take-usr1 appears in its working
 * directory (the test decides when), as programs that save
 * their state on a batch system's warning signal do. Under `crum run --on-signal USR1` crum
 * must say that the signal is the program's from then on. Prints its steps and how many
 * SIGUSR1 its handler saw. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t got = 0;
static void on_usr1(int sig) { (void)sig; got++; }

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 40;
    long ms = argc > 2 ? atol(argv[2]) : 20;
    int installed = 0;
    setvbuf(stdout, NULL, _IONBF, 0);
    for (int s = 0; s < n; s++) {
        if (!installed && access("take-usr1", F_OK) == 0) {
            installed = 1;
            struct sigaction sa = { 0 };
            sa.sa_handler = on_usr1;
            sigaction(SIGUSR1, &sa, NULL);
        }
        printf("step %d usr1 %d\n", s, (int)got);
        struct timespec ts = { 0, ms * 1000000L };
        nanosleep(&ts, NULL);
    }
    printf("done\n");
    return 0;
}
