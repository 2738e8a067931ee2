/* Process groups and sessions of a job (issue 17, item 2).
 *
 * The root R forks:
 *   F, which stays in R's group (the launcher's: R forks it before leading a group);
 *   A, which starts a session (setsid) and forks B (a group of its own) and C (joins B's);
 *   D and E: R puts D into a group of its own and E into D's (setpgid from the parent, as
 *   a shell with job control does);
 * then R leads a group of its own (setpgid(0, 0)).
 * Every step, each process checks its own group and session (getpgrp, getsid(0)) and R
 * checks every other process's (getpgid, getsid by pid), and the group ids the kernel's
 * group signals reach: at the end R sends SIGUSR1 to B's group and SIGTERM to D's (killpg,
 * kill(-pgid)); B and C end with 40 and 41 on SIGUSR1 (A reaps them and ends with 0 when
 * both did), D and E die by SIGTERM, F ends with 0 once R says so through a pipe. Any
 * mismatch prints FAIL and ends the process that saw it with a code R reports. */
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

static volatile sig_atomic_t got_usr1;
static void on_usr1(int s) { (void)s; got_usr1 = 1; }

/* Waits (without a fixed time) until process pid is in group pgid. */
static void wait_group(pid_t pid, pid_t pgid) {
    while (getpgid(pid) != pgid) nap(1);
}

/* A worker's steps: checks its group and session, then waits for its signal. */
static int steps(const char *name, int n, long ms, pid_t pgid, pid_t sid, int code) {
    for (int i = 0; i < n; i++) {
        if (getpgrp() != pgid || getsid(0) != sid || getpgid(0) != pgid) {
            printf("FAIL %s: group %d session %d, expected %d %d\n", name, (int)getpgrp(), (int)getsid(0), (int)pgid, (int)sid);
            return 90 + code;
        }
        nap(ms);
    }
    while (!got_usr1) nap(5);
    return code;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 40;
    long ms = argc > 2 ? atol(argv[2]) : 50;
    setvbuf(stdout, NULL, _IONBF, 0);
    signal(SIGUSR1, on_usr1);
    pid_t r = getpid(), rg = getpgrp(), rs = getsid(0);
    int go[2];
    if (pipe(go) != 0) return 2;

    pid_t f = fork();
    if (f == 0) {
        close(go[1]);
        char c;
        for (int i = 0; i < n; i++) {
            if (getpgrp() != rg || getsid(0) != rs) {
                printf("FAIL F: group %d session %d, expected %d %d\n", (int)getpgrp(), (int)getsid(0), (int)rg, (int)rs);
                return 9;
            }
            nap(ms);
        }
        return read(go[0], &c, 1) == 1 && c == 'x' ? 0 : 8;
    }
    close(go[0]);

    int ab[2];
    if (pipe(ab) != 0) return 2;
    pid_t a = fork();
    if (a == 0) {
        close(ab[0]);
        if (setsid() != getpid()) return 3;
        pid_t me = getpid();
        pid_t b = fork();
        if (b == 0) {
            setpgid(0, 0);
            return steps("B", n, ms, getpid(), me, 40);
        }
        pid_t c = fork();
        if (c == 0) {
            wait_group(b, b);
            if (setpgid(0, b) != 0) return 4;
            return steps("C", n, ms, b, me, 41);
        }
        wait_group(b, b);
        wait_group(c, b);
        /* R learns B's pid (its group) from A. */
        if (write(ab[1], &b, sizeof b) != sizeof b) return 5;
        close(ab[1]);
        int bad = 0;
        for (int i = 0; i < n; i++) {
            if (getpgrp() != me || getsid(0) != me || getsid(b) != me || getsid(c) != me || getpgid(c) != b) {
                printf("FAIL A: group %d session %d; B %d/%d C %d/%d\n", (int)getpgrp(), (int)getsid(0),
                       (int)getpgid(b), (int)getsid(b), (int)getpgid(c), (int)getsid(c));
                bad = 1;
                break;
            }
            nap(ms);
        }
        int sb = 0, sc = 0;
        if (waitpid(b, &sb, 0) != b || waitpid(c, &sc, 0) != c) return 6;
        if (!WIFEXITED(sb) || WEXITSTATUS(sb) != 40 || !WIFEXITED(sc) || WEXITSTATUS(sc) != 41) {
            printf("FAIL A: B ended %#x, C %#x\n", sb, sc);
            return 7;
        }
        return bad;
    }
    close(ab[1]);
    pid_t b;
    if (read(ab[0], &b, sizeof b) != sizeof b) return 2;
    close(ab[0]);

    pid_t d = fork();
    if (d == 0) {
        wait_group(getpid(), getpid());
        return steps("D", n, ms, getpid(), rs, 50);
    }
    setpgid(d, d);
    pid_t e = fork();
    if (e == 0) {
        wait_group(getpid(), d);
        return steps("E", n, ms, d, rs, 51);
    }
    setpgid(e, d);
    if (setpgid(0, 0) != 0) return 2;
    wait_group(d, d);
    wait_group(e, d);

    for (int i = 0; i < n; i++) {
        struct { const char *name; pid_t pid, pgid, sid; } want[] = {
            { "R", r, r, rs }, { "F", f, rg, rs }, { "A", a, a, a }, { "B", b, b, a },
            { "D", d, d, rs }, { "E", e, d, rs },
        };
        for (unsigned k = 0; k < sizeof want / sizeof want[0]; k++) {
            pid_t g = getpgid(want[k].pid), s = getsid(want[k].pid);
            if (g != want[k].pgid || s != want[k].sid) {
                printf("FAIL step %d: %s (pid %d) in group %d session %d, expected %d %d\n", i, want[k].name,
                       (int)want[k].pid, (int)g, (int)s, (int)want[k].pgid, (int)want[k].sid);
                return 1;
            }
        }
        if (getpgrp() != r) {
            printf("FAIL step %d: getpgrp %d, expected %d\n", i, (int)getpgrp(), (int)r);
            return 1;
        }
        printf("root step %d\n", i);
        nap(ms);
    }
    /* The group signals reach exactly the groups' processes (a process outside them would
     * be ended by SIGTERM or SIGUSR1 at once, the root included: it ignores neither). */
    if (killpg(b, SIGUSR1) != 0 || kill(-d, SIGTERM) != 0) {
        printf("FAIL: group signal: %s\n", strerror(errno));
        return 1;
    }
    if (write(go[1], "x", 1) != 1) return 1;
    int bad = 0, st;
    struct { const char *name; pid_t pid; int sig, code; } ends[] = {
        { "F", f, 0, 0 }, { "A", a, 0, 0 }, { "D", d, SIGTERM, 0 }, { "E", e, SIGTERM, 0 },
    };
    for (unsigned k = 0; k < sizeof ends / sizeof ends[0]; k++) {
        pid_t w = waitpid(ends[k].pid, &st, 0);
        int ok = w == ends[k].pid &&
                 (ends[k].sig ? WIFSIGNALED(st) && WTERMSIG(st) == ends[k].sig : WIFEXITED(st) && WEXITSTATUS(st) == ends[k].code);
        if (!ok) {
            printf("FAIL: %s (pid %d): waitpid %d status %#x\n", ends[k].name, (int)ends[k].pid, (int)w, st);
            bad = 1;
        }
    }
    printf(bad ? "groups wrong\n" : "groups ok\n");
    return bad;
}
