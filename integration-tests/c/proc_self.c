/* What the kernel shows of the process itself: /proc/self/cmdline, environ, auxv and exe, and
 * the "[stack]" of its maps, must be the program's after a restart, not `crum restart`'s
 * (CRIU's zdtm cmdlinenv00, selfexe00). Read at start and compared at every step. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <fcntl.h>

static size_t slurp(const char *path, char *buf, size_t cap) {
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return (size_t)-1;
    size_t n = 0;
    ssize_t r;
    while (n < cap && (r = read(fd, buf + n, cap - n)) > 0)
        n += (size_t)r;
    close(fd);
    return n;
}

static int has_stack(void) {
    static char maps[1 << 16];
    size_t n = slurp("/proc/self/maps", maps, sizeof maps - 1);
    if (n == (size_t)-1)
        return 0;
    maps[n] = 0;
    return strstr(maps, "[stack]") != NULL;
}

#define CAP 8192
static char cmd0[CAP], env0[CAP], aux0[1024], exe0[4096];
static char cmd1[CAP], env1[CAP], aux1[1024], exe1[4096];

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 50;
    long ms = argc > 2 ? atol(argv[2]) : 20;
    setvbuf(stdout, NULL, _IONBF, 0);
    setenv("PROC_SELF_MARK", "set by the program", 1);
    size_t nc = slurp("/proc/self/cmdline", cmd0, CAP), ne = slurp("/proc/self/environ", env0, CAP);
    size_t na = slurp("/proc/self/auxv", aux0, sizeof aux0);
    ssize_t nx = readlink("/proc/self/exe", exe0, sizeof exe0 - 1);
    int stack0 = has_stack();
    if (nc == (size_t)-1 || ne == (size_t)-1 || na == (size_t)-1 || nx < 0 || !stack0) {
        printf("FAIL cannot read /proc/self\n");
        return 1;
    }
    for (int i = 0; i < n; i++) {
        memset(cmd1, 0, CAP);
        memset(env1, 0, CAP);
        memset(aux1, 0, sizeof aux1);
        memset(exe1, 0, sizeof exe1);
        size_t mc = slurp("/proc/self/cmdline", cmd1, CAP), me = slurp("/proc/self/environ", env1, CAP);
        size_t ma = slurp("/proc/self/auxv", aux1, sizeof aux1);
        ssize_t mx = readlink("/proc/self/exe", exe1, sizeof exe1 - 1);
        if (mc != nc || memcmp(cmd0, cmd1, nc)) {
            printf("FAIL step %d cmdline is now '%s'\n", i, cmd1);
            return 1;
        }
        if (me != ne || memcmp(env0, env1, ne)) {
            printf("FAIL step %d environ changed (%zu bytes, was %zu)\n", i, me, ne);
            return 1;
        }
        if (ma != na || memcmp(aux0, aux1, na)) {
            printf("FAIL step %d auxv changed (%zu bytes, was %zu)\n", i, ma, na);
            return 1;
        }
        if (mx != nx || memcmp(exe0, exe1, (size_t)nx)) {
            printf("FAIL step %d exe is now %s\n", i, exe1);
            return 1;
        }
        if (!has_stack()) {
            printf("FAIL step %d no [stack] in maps\n", i);
            return 1;
        }
        if (strcmp(getenv("PROC_SELF_MARK"), "set by the program")) {
            printf("FAIL step %d getenv\n", i);
            return 1;
        }
        printf("step %d ok\n", i);
        struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
        nanosleep(&ts, NULL);
    }
    printf("done\n");
    return 0;
}
