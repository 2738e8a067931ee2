/* Processes a restart would not bring back, which a checkpoint must refuse naming them
 * (CRIU's zdtm stopped*, session0*, child_subreaper_and_reparent). Modes:
 * - `stopped` (default): a child stopped by SIGSTOP that has no crum agent (made by a raw
 *   clone, as a program that forks without the C library does, or stopped before its agent
 *   started); prints "stopped <pid>";
 * - `raw`: a running child made by a raw clone (crum's library mapped, no agent); prints
 *   "raw <pid>";
 * - `escaped`: the program leads a session; a child forks a grandchild and exits, so the
 *   grandchild is reparented outside the job while staying in its session; prints
 *   "escaped <pid>";
 * - `zombie`: a child that made a process group of its own and exited, not reaped yet (a
 *   restart would bring it back in its parent's group: CRIU's zombie01); prints
 *   "zombie <pid>".
 * Then waits for the file "go", lets the process end, and prints "done <status>" (the
 * exit status of the child it waits for, 5). */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void wait_go(void) {
    while (access("go", F_OK) != 0) {
        struct timespec ts = { 0, 5000000L };
        nanosleep(&ts, NULL);
    }
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "stopped";
    setvbuf(stdout, NULL, _IONBF, 0);
    if (!strcmp(mode, "escaped")) {
        if (setsid() < 0) { printf("FAIL setsid\n"); return 1; }
        int p[2];
        if (pipe(p)) return 1;
        pid_t child = fork();
        if (child == 0) {
            pid_t g = fork();
            if (g == 0) {
                close(p[0]);
                close(p[1]);
                wait_go();
                _exit(0);
            }
            write(p[1], &g, sizeof g);
            _exit(5);
        }
        pid_t g = 0;
        if (read(p[0], &g, sizeof g) != sizeof g) { printf("FAIL read\n"); return 1; }
        int st = 0;
        if (waitpid(child, &st, 0) != child) { printf("FAIL waitpid\n"); return 1; }
        /* Until the grandchild has been reparented. */
        for (;;) {
            char path[64], buf[512];
            snprintf(path, sizeof path, "/proc/%d/stat", g);
            FILE *f = fopen(path, "r");
            int ppid = 0;
            if (f && fgets(buf, sizeof buf, f)) {
                char *c = strrchr(buf, ')');
                if (c) sscanf(c + 2, "%*c %d", &ppid);
            }
            if (f) fclose(f);
            if (ppid != child) break;
            struct timespec ts = { 0, 1000000L };
            nanosleep(&ts, NULL);
        }
        printf("escaped %d\n", g);
        wait_go();
        printf("done %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
        return 0;
    }
    if (!strcmp(mode, "zombie")) {
        pid_t z = fork();
        if (z == 0) {
            setpgid(0, 0);
            _exit(5);
        }
        siginfo_t si;
        if (waitid(P_PID, z, &si, WEXITED | WNOWAIT) != 0) { printf("FAIL waitid\n"); return 1; }
        printf("zombie %d\n", z);
        wait_go();
        int st = 0;
        if (waitpid(z, &st, 0) != z) { printf("FAIL waitpid\n"); return 1; }
        printf("done %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
        return 0;
    }
    int stop = !strcmp(mode, "stopped");
    long pid = syscall(SYS_clone, (long)SIGCHLD, 0L, 0L, 0L, 0L);
    if (pid == 0) {
        if (stop)
            syscall(SYS_kill, syscall(SYS_getpid), SIGSTOP);
        else
            wait_go();
        syscall(SYS_exit_group, 5);
    }
    int st = 0;
    if (stop) {
        if (waitpid((pid_t)pid, &st, WUNTRACED) != pid || !WIFSTOPPED(st)) {
            printf("FAIL not stopped\n");
            return 1;
        }
    } else {
        /* Older than crum's grace for an agent starting after a fork. */
        struct timespec ts = { 0, 500000000L };
        nanosleep(&ts, NULL);
    }
    printf("%s %ld\n", stop ? "stopped" : "raw", pid);
    wait_go();
    if (stop)
        kill((pid_t)pid, SIGCONT);
    if (waitpid((pid_t)pid, &st, 0) != pid) {
        printf("FAIL waitpid\n");
        return 1;
    }
    printf("done %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    return 0;
}
