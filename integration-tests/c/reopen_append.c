/* Opens, appends to and closes its files at every step, the way loggers and result writers
 * do: steps.log through fopen("a") from the first step, late.txt through open(O_APPEND)
 * from step K on, which creates it (O_EXCL: it must not exist before). After each append it
 * reads the file back: it must hold exactly one line per step so far. A restart from a
 * checkpoint taken before the kill must roll both back (the lines written after the
 * checkpoint would otherwise be there twice; late.txt, created after a checkpoint taken
 * before step K, must be gone). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int count_lines(const char *path, int want_last, const char *prefix) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[64], last[64] = "";
    int n = 0;
    while (fgets(line, sizeof line, f)) { n++; strcpy(last, line); }
    fclose(f);
    char want[64];
    snprintf(want, sizeof want, "%s %d\n", prefix, want_last);
    return strcmp(last, want) == 0 ? n : -2;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 40;
    long ms = argc > 2 ? atol(argv[2]) : 20;
    int k = argc > 3 ? atoi(argv[3]) : n / 3;
    setvbuf(stdout, NULL, _IONBF, 0);
    unlink("steps.log");
    unlink("late.txt");
    for (int s = 0; s < n; s++) {
        FILE *f = fopen("steps.log", "a");
        if (!f) { printf("FAIL: fopen: %s\n", strerror(errno)); return 1; }
        fprintf(f, "step %d\n", s);
        fclose(f);
        int got = count_lines("steps.log", s, "step");
        if (got != s + 1) { printf("FAIL: steps.log has %d lines at step %d\n", got, s); return 1; }
        if (s >= k) {
            int fd = open("late.txt", O_WRONLY | O_APPEND | O_CREAT | (s == k ? O_EXCL : 0), 0644);
            if (fd < 0) { printf("FAIL: late.txt at step %d: %s\n", s, strerror(errno)); return 1; }
            dprintf(fd, "late %d\n", s);
            close(fd);
            got = count_lines("late.txt", s, "late");
            if (got != s - k + 1) { printf("FAIL: late.txt has %d lines at step %d\n", got, s); return 1; }
        }
        printf("step %d\n", s);
        struct timespec ts = { 0, ms * 1000000L };
        nanosleep(&ts, NULL);
    }
    printf("done\n");
    return 0;
}
