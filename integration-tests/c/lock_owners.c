/* Lock owners as the program sees them, and leases. The parent holds a flock on f.lock, a
 * POSIX write lock on bytes 0-9 of p.lock, a read lease on r.lease (open read-only) and a
 * write lease on w.lease (open write-only: a checkpoint that opened it again to read its
 * bytes would break the lease and wait for the stopped program to give it up). At every
 * step it checks that its fdinfo and /proc/locks name it (getpid()) as the owner of the
 * flock and the POSIX lock, that both leases are still there (F_GETLEASE), and asks its
 * child, through a pipe, to check with F_GETLK on its own descriptor of p.lock that the
 * POSIX lock's owner is its parent (getppid()). After a restart the locks are taken again
 * by the restorer, under the kernel's new pid: the program must still see its own. A third
 * file's write lease is being broken (to F_UNLCK) when the image is cut. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Whether `path` has a `lock:`-style line (prefix `prefix`) of kind `kind` owned by `pid`
 * on inode `ino`. */
static int owns(const char *path, const char *prefix, const char *kind, int pid, unsigned long ino) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[512];
    int found = 0;
    size_t pl = strlen(prefix);
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, prefix, pl) != 0) continue;
        char k[32], adv[32], mode[32];
        int owner, maj, min;
        unsigned long i;
        if (sscanf(line + pl, "%*d: %31s %31s %31s %d %x:%x:%lu", k, adv, mode, &owner, &maj, &min, &i) == 7 &&
            strcmp(k, kind) == 0 && owner == pid && i == ino)
            found = 1;
    }
    fclose(f);
    return found;
}

static int child_loop(int req, int ans) {
    int p = open("p.lock", O_RDWR);
    char c;
    while (read(req, &c, 1) == 1) {
        struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 10 };
        char ok = fcntl(p, F_GETLK, &fl) == 0 && fl.l_type == F_WRLCK && fl.l_pid == getppid() ? 'y' : 'n';
        if (write(ans, &ok, 1) != 1) return 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 40;
    long ms = argc > 2 ? atol(argv[2]) : 20;
    setvbuf(stdout, NULL, _IONBF, 0);
    int f = open("f.lock", O_RDWR | O_CREAT | O_TRUNC, 0644);
    int p = open("p.lock", O_RDWR | O_CREAT | O_TRUNC, 0644);
    int w0 = open("r.lease", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int w1 = open("w.lease", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (f < 0 || p < 0 || w0 < 0 || w1 < 0) { printf("FAIL: setup\n"); return 1; }
    close(w0);
    int r = open("r.lease", O_RDONLY);
    /* A write lease being broken (an open for writing of ours, refused at once): the lease
     * goes to F_UNLCK, which F_GETLEASE answers from then on. The break's signal (SIGIO) is
     * ignored. */
    signal(SIGIO, SIG_IGN);
    int b = open("b.lease", O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (b < 0 || fcntl(b, F_SETLEASE, F_WRLCK) != 0) { printf("FAIL: b.lease: %s\n", strerror(errno)); return 1; }
    if (open("b.lease", O_WRONLY | O_NONBLOCK) >= 0 || errno != EWOULDBLOCK) { printf("FAIL: the lease was not broken\n"); return 1; }
    struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 10 };
    if (r < 0 || flock(f, LOCK_EX) || fcntl(p, F_SETLK, &fl) || fcntl(r, F_SETLEASE, F_RDLCK) ||
        fcntl(w1, F_SETLEASE, F_WRLCK)) {
        printf("FAIL: locking: %s\n", strerror(errno));
        return 1;
    }
    int req[2], ans[2];
    if (pipe(req) || pipe(ans)) { printf("FAIL: pipe\n"); return 1; }
    pid_t child = fork();
    if (child == 0) {
        close(req[1]);
        close(ans[0]);
        _exit(child_loop(req[0], ans[1]));
    }
    close(req[0]);
    close(ans[1]);
    struct stat fs, ps;
    fstat(f, &fs);
    fstat(p, &ps);
    char fdinfo_f[64], fdinfo_p[64];
    snprintf(fdinfo_f, sizeof fdinfo_f, "/proc/self/fdinfo/%d", f);
    snprintf(fdinfo_p, sizeof fdinfo_p, "/proc/self/fdinfo/%d", p);
    for (int s = 0; s < n; s++) {
        int me = getpid();
        if (!owns(fdinfo_f, "lock:\t", "FLOCK", me, fs.st_ino)) { printf("FAIL: fdinfo does not name me as the flock's owner\n"); return 1; }
        if (!owns(fdinfo_p, "lock:\t", "POSIX", me, ps.st_ino)) { printf("FAIL: fdinfo does not name me as the POSIX lock's owner\n"); return 1; }
        if (!owns("/proc/locks", "", "POSIX", me, ps.st_ino) || !owns("/proc/locks", "", "FLOCK", me, fs.st_ino)) {
            printf("FAIL: /proc/locks does not name me as the owner\n");
            return 1;
        }
        if (fcntl(r, F_GETLEASE) != F_RDLCK || fcntl(w1, F_GETLEASE) != F_WRLCK) { printf("FAIL: a lease is gone\n"); return 1; }
        if (fcntl(b, F_GETLEASE) != F_UNLCK) { printf("FAIL: the lease being broken is %d\n", fcntl(b, F_GETLEASE)); return 1; }
        char c = 'q';
        if (write(req[1], &c, 1) != 1 || read(ans[0], &c, 1) != 1) { printf("FAIL: child gone\n"); return 1; }
        if (c != 'y') { printf("FAIL: the child does not see its parent as the POSIX lock's owner\n"); return 1; }
        printf("step %d\n", s);
        struct timespec ts = { 0, ms * 1000000L };
        nanosleep(&ts, NULL);
    }
    close(req[1]);
    int st;
    if (waitpid(child, &st, 0) != child || !WIFEXITED(st) || WEXITSTATUS(st) != 0) { printf("FAIL: child status\n"); return 1; }
    printf("done\n");
    return 0;
}
