/* fd 7 was inherited from whoever started the program under crum (a pipe to a process
 * outside it: a shell, a batch system); each step writes "step i" to fd 7 and to stdout.
 * At restart, fd 7 is `crum restart`'s own fd 7, or /dev/null. The program checks fd 7 is
 * open and writable at every step.
 *
 *   inherited_fd N MS */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 40;
    long ms = argc > 2 ? atol(argv[2]) : 20;
    setvbuf(stdout, NULL, _IONBF, 0);
    signal(SIGPIPE, SIG_IGN);
    if (fcntl(7, F_GETFD) < 0) { printf("FAIL fd 7 is not open\n"); return 1; }
    for (int i = 0; i < n; i++) {
        char line[32];
        int len = snprintf(line, sizeof line, "step %d\n", i);
        if (write(7, line, len) != len) { printf("FAIL write to fd 7: %s\n", strerror(errno)); return 1; }
        printf("%s", line);
        struct timespec ts = { 0, ms * 1000000L };
        nanosleep(&ts, NULL);
    }
    printf("done\n");
    return 0;
}
