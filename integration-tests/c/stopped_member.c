/* Children stopped by a signal, members of the job (issue 17): the root forks two children
 * that stop themselves (raise(SIGSTOP)). It takes the report of the first from
 * waitpid(WUNTRACED) and leaves the second's waiting (seen with waitid(WNOWAIT)), and takes
 * the SIGCHLD of their stops (SIGCHLD blocked). At every step, checkpointed or restarted,
 * both must still be stopped (/proc state T), waitpid must have nothing new to say of the
 * first, the second's report must still wait, and no SIGCHLD may be waiting. Then it
 * continues them: SIGCHLD with CLD_CONTINUED, waitpid(WCONTINUED), and each child checks its
 * memory and parent and ends with 10 + its number.
 *   stopped_member STEPS MS */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void nap(long ms) {
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

static int go[2][2];

static void child(int k, pid_t parent) {
    static unsigned data[1 << 16];
    for (unsigned i = 0; i < sizeof data / sizeof data[0]; i++) data[i] = i * 2654435761u + (unsigned)k;
    close(go[k - 1][1]);
    raise(SIGSTOP);
    /* Continued: waits for its parent's word (it has seen the continue first). */
    char c;
    if (read(go[k - 1][0], &c, 1) != 1) _exit(3);
    for (unsigned i = 0; i < sizeof data / sizeof data[0]; i++)
        if (data[i] != i * 2654435761u + (unsigned)k) _exit(1);
    if (getppid() != parent) _exit(2);
    _exit(10 + k);
}

static char state_of(pid_t p) {
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)p);
    FILE *f = fopen(path, "r");
    if (!f) return '?';
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *e = strrchr(buf, ')');
    return e && e[1] && e[2] ? e[2] : '?';
}

#define FAIL(...) do { printf("FAIL: " __VA_ARGS__); printf("\n"); return 1; } while (0)

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 40;
    long ms = argc > 2 ? atol(argv[2]) : 40;
    setvbuf(stdout, NULL, _IONBF, 0);
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigprocmask(SIG_BLOCK, &chld, NULL);
    pid_t me = getpid();
    if (pipe(go[0]) || pipe(go[1])) FAIL("pipe");
    pid_t a = fork();
    if (a == 0) child(1, me);
    pid_t b = fork();
    if (b == 0) child(2, me);
    int st = 0;
    if (waitpid(a, &st, WUNTRACED) != a || !WIFSTOPPED(st) || WSTOPSIG(st) != SIGSTOP) FAIL("first child did not stop: %#x", st);
    siginfo_t si;
    memset(&si, 0, sizeof si);
    if (waitid(P_PID, (id_t)b, &si, WSTOPPED | WNOWAIT) != 0 || si.si_code != CLD_STOPPED) FAIL("second child did not stop");
    struct timespec zero = { 0, 0 };
    while (sigtimedwait(&chld, &si, &zero) == SIGCHLD) {}
    for (int i = 0; i < n; i++) {
        printf("step %d\n", i);
        if (state_of(a) != 'T' || state_of(b) != 'T') FAIL("step %d: children in states %c %c, not stopped", i, state_of(a), state_of(b));
        pid_t r = waitpid(a, &st, WUNTRACED | WCONTINUED | WNOHANG);
        if (r != 0) FAIL("step %d: waitpid of the first child says %d (status %#x, errno %d)", i, (int)r, st, errno);
        memset(&si, 0, sizeof si);
        if (waitid(P_PID, (id_t)b, &si, WSTOPPED | WNOWAIT | WNOHANG) != 0 || si.si_pid != b || si.si_code != CLD_STOPPED || si.si_status != SIGSTOP)
            FAIL("step %d: the second child's stop is not waiting (pid %d code %d status %d errno %d)", i, (int)si.si_pid, si.si_code, si.si_status, errno);
        sigset_t pend;
        sigpending(&pend);
        if (sigismember(&pend, SIGCHLD)) FAIL("step %d: a SIGCHLD is waiting", i);
        nap(ms);
    }
    kill(a, SIGCONT);
    struct timespec ten = { 10, 0 };
    memset(&si, 0, sizeof si);
    if (sigtimedwait(&chld, &si, &ten) != SIGCHLD || si.si_code != CLD_CONTINUED) FAIL("no SIGCHLD for the first child's continue (code %d)", si.si_code);
    if (waitpid(a, &st, WCONTINUED) != a || !WIFCONTINUED(st)) FAIL("first child: waitpid(WCONTINUED) status %#x", st);
    if (write(go[0][1], "g", 1) != 1) FAIL("write");
    if (waitpid(a, &st, 0) != a || !WIFEXITED(st) || WEXITSTATUS(st) != 11) FAIL("first child ended with %#x", st);
    printf("first child continued and ended with 11\n");
    if (waitpid(b, &st, WUNTRACED) != b || !WIFSTOPPED(st) || WSTOPSIG(st) != SIGSTOP) FAIL("second child's stop: %#x", st);
    kill(b, SIGCONT);
    if (waitpid(b, &st, WCONTINUED) != b || !WIFCONTINUED(st)) FAIL("second child: waitpid(WCONTINUED) status %#x", st);
    if (write(go[1][1], "g", 1) != 1) FAIL("write");
    if (waitpid(b, &st, 0) != b || !WIFEXITED(st) || WEXITSTATUS(st) != 12) FAIL("second child ended with %#x", st);
    printf("second child continued and ended with 12\n");
    printf("PASS\n");
    return 0;
}
