/* Two processes of a job writing to one open file description (issue 17): the root opens
 * `log` (write-only, not appending) and forks a worker; both write one line per step
 * through it, so its offset is theirs together, as a shell's stdout redirected to a file is
 * for the commands it runs. After each write each process checks that the shared offset is
 * at the end of the file (with two descriptions after a restart, one process's lines would
 * overwrite the other's). At the end the root reads the log back: every line of both, once.
 *   job_shared_file STEPS MS */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void nap(long ms) {
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

static int step(int fd, char who, int i) {
    char line[32];
    int n = snprintf(line, sizeof line, "%c %d\n", who, i);
    if (write(fd, line, (size_t)n) != n) return 0;
    struct stat st;
    off_t at = lseek(fd, 0, SEEK_CUR);
    /* The other process may write between the two calls: the offset is at most the size,
     * and never behind what this process just wrote. */
    if (fstat(fd, &st) != 0 || at > st.st_size || at < n) return 0;
    return 1;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 40;
    long ms = argc > 2 ? atol(argv[2]) : 40;
    setvbuf(stdout, NULL, _IONBF, 0);
    int fd = open("log", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) { printf("FAIL open\n"); return 1; }
    pid_t w = fork();
    if (w == 0) {
        for (int i = 0; i < n; i++) {
            if (!step(fd, 'w', i)) _exit(3);
            nap(ms);
        }
        _exit(0);
    }
    for (int i = 0; i < n; i++) {
        if (!step(fd, 'r', i)) { printf("FAIL: step %d: the offset is not the file's end\n", i); return 1; }
        printf("root step %d\n", i);
        nap(ms);
    }
    int st;
    if (waitpid(w, &st, 0) != w || !WIFEXITED(st) || WEXITSTATUS(st) != 0) { printf("FAIL worker %#x\n", st); return 1; }
    FILE *f = fopen("log", "r");
    char line[64];
    int seen[2][1000] = { { 0 } }, lines = 0, bad = 0;
    while (f && fgets(line, sizeof line, f)) {
        char who;
        int i;
        if (sscanf(line, "%c %d", &who, &i) != 2 || (who != 'r' && who != 'w') || i < 0 || i >= n || i >= 1000) { bad++; continue; }
        seen[who == 'w'][i]++;
        lines++;
    }
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < n; i++)
            if (seen[k][i] != 1) bad++;
    printf(bad || lines != 2 * n ? "FAIL: log has %d lines, %d wrong\n" : "log ok: %d lines\n", lines, bad);
    return bad != 0;
}
