/* A process whose main thread waits in vfork() for its child: the kernel runs none of the
 * parent's signal handlers until the child executes a program or exits, so a checkpoint
 * cannot stop it and must say so at once (CRIU's zdtm vfork00 waited 5 s and then hung).
 * Prints "ready" from the child, which waits for the file "go" and exits; the parent then
 * prints "done <child exit status>". */
#define _GNU_SOURCE
#include <stdio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    pid_t pid = vfork();
    if (pid == 0) {
        /* Only async-signal-safe calls in the child: it runs on the parent's memory. */
        write(1, "ready\n", 6);
        while (access("go", F_OK) != 0) {
            struct timespec ts = { 0, 5000000L };
            nanosleep(&ts, NULL);
        }
        _exit(7);
    }
    int st = 0;
    if (waitpid(pid, &st, 0) != pid) {
        printf("FAIL waitpid\n");
        return 1;
    }
    printf("done %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    return 0;
}
