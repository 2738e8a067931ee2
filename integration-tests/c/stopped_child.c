/* A child stopped by SIGSTOP that has no crum agent (made by a raw clone, as a program that
 * forks without the C library does, or stopped before its agent started: CRIU's zdtm
 * stopped*): a restart would not bring it back and its parent's waitpid would fail, so a
 * checkpoint is refused naming it. Prints "stopped <pid>" once the child is stopped, waits
 * for the file "go", continues the child and prints "done <its exit status>". */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    long pid = syscall(SYS_clone, (long)SIGCHLD, 0L, 0L, 0L, 0L);
    if (pid == 0) {
        syscall(SYS_kill, syscall(SYS_getpid), SIGSTOP);
        syscall(SYS_exit_group, 5);
    }
    int st = 0;
    if (waitpid((pid_t)pid, &st, WUNTRACED) != pid || !WIFSTOPPED(st)) {
        printf("FAIL not stopped\n");
        return 1;
    }
    printf("stopped %ld\n", pid);
    while (access("go", F_OK) != 0) {
        struct timespec ts = { 0, 5000000L };
        nanosleep(&ts, NULL);
    }
    kill((pid_t)pid, SIGCONT);
    if (waitpid((pid_t)pid, &st, 0) != pid) {
        printf("FAIL waitpid\n");
        return 1;
    }
    printf("done %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    return 0;
}
