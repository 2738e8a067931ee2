/* Forks while being checkpointed: children in a tight loop, each exits at once with exit()
 * (atexit handlers run) and is waited for; every 50th child instead lives until the file
 * "stop" exists (up to 40 of them), holding whatever descriptors it inherited. Prints
 * "forks N" every 200 forks and "done N" when "stop" appears; exit status 0 only if every
 * fork and wait worked. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    long n = 0;
    int longs = 0;
    printf("ready\n");
    for (;;) {
        if (n % 16 == 0 && access("stop", F_OK) == 0) break;
        int lives = n % 50 == 0 && longs < 40;
        pid_t pid = fork();
        if (pid < 0) {
            printf("FAIL fork: %s\n", strerror(errno));
            return 1;
        }
        if (pid == 0) {
            while (lives && access("stop", F_OK) != 0) {
                struct timespec ts = { 0, 5000000L };
                nanosleep(&ts, NULL);
            }
            exit(0);
        }
        if (lives) {
            longs++;
        } else {
            int st;
            if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
                printf("FAIL child %d: wait %s status %#x\n", (int)pid, strerror(errno), st);
                return 1;
            }
        }
        n++;
        if (n % 200 == 0) printf("forks %ld\n", n);
    }
    while (longs > 0) {
        int st;
        pid_t p = waitpid(-1, &st, 0);
        if (p < 0) {
            printf("FAIL waiting for the long-lived children: %s\n", strerror(errno));
            return 1;
        }
        longs--;
    }
    printf("done %ld\n", n);
    return 0;
}
