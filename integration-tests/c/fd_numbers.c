/* crum's own descriptors sit above the program's range: under `crum run` fds 3..63 are
 * closed when main starts and the first open() returns 3, as without crum; every descriptor
 * crum holds is close-on-exec and CRUM_CHANNEL does not name a closed descriptor; a program
 * this one executes sees the same. Then "ready"; the test checkpoints, kills and restarts it
 * and creates the file "go": the restarted program checks again (its fd 3 is its own). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <dirent.h>

static int fails;

static void fail(const char *what, int fd) {
    printf("FAIL %s (fd %d)\n", what, fd);
    fails++;
}

/* Fds from..63 must be closed. */
static void check_low(int from, const char *when) {
    for (int fd = from; fd < 64; fd++)
        if (fcntl(fd, F_GETFD) != -1 || errno != EBADF) {
            char link[64], target[256] = "";
            snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
            ssize_t n = readlink(link, target, sizeof target - 1);
            if (n > 0) target[n] = 0;
            printf("FAIL %s: fd %d is open (%s)\n", when, fd, target);
            fails++;
        }
}

/* Every descriptor from 64 on is crum's: close-on-exec. */
static void check_high_cloexec(const char *when) {
    DIR *d = opendir("/proc/self/fd");
    if (!d) { fail("opendir /proc/self/fd", -1); return; }
    int dfd = dirfd(d);
    struct dirent *e;
    while ((e = readdir(d))) {
        int fd = atoi(e->d_name);
        if (e->d_name[0] == '.' || fd < 64 || fd == dfd) continue;
        int fl = fcntl(fd, F_GETFD);
        if (fl == -1 || !(fl & FD_CLOEXEC)) {
            printf("FAIL %s: fd %d is not close-on-exec\n", when, fd);
            fails++;
        }
    }
    closedir(d);
}

static void check_env(const char *when) {
    const char *v = getenv("CRUM_CHANNEL");
    if (v && fcntl(atoi(v), F_GETFD) == -1) {
        printf("FAIL %s: CRUM_CHANNEL=%s names a closed descriptor\n", when, v);
        fails++;
    }
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IONBF, 0);
    if (argc > 1 && strcmp(argv[1], "child") == 0) {
        check_low(3, "child");
        check_env("child");
        int a = open("/dev/null", O_RDONLY);
        if (a != 3) fail("child: first open", a);
        printf("child %s\n", fails ? "FAIL" : "PASS");
        return fails != 0;
    }
    check_low(3, "start");
    check_high_cloexec("start");
    check_env("start");
    /* Close-on-exec: the child executed below must find its fd 3 free too. */
    int a = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (a != 3) fail("start: first open", a);
    pid_t pid = fork();
    if (pid == 0) {
        execl("/proc/self/exe", argv[0], "child", (char *)NULL);
        _exit(127);
    }
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        fail("the executed child's checks", -1);
    printf("start %s\n", fails ? "FAIL" : "PASS");
    printf("ready\n");
    while (access("go", F_OK) != 0) {
        struct timespec ts = { 0, 5000000L };
        nanosleep(&ts, NULL);
    }
    if (fcntl(3, F_GETFD) == -1) fail("after: the program's fd 3 is gone", 3);
    check_low(4, "after");
    check_high_cloexec("after");
    int b = open("/dev/null", O_RDONLY);
    if (b != 4) fail("after: next open", b);
    printf("%s\n", fails ? "FAIL" : "PASS");
    return fails != 0;
}
