/* stdin, stdout and stderr redirected to regular files by the test (`< in > out 2>> err`).
 * Each step reads one line from stdin (unbuffered: it must be the step's own line, so the
 * offset of stdin came back), writes one line to stdout and one to stderr, and checks that
 * stdout's offset and size are exactly the bytes it wrote so far when stdout is a regular
 * file (nothing lost, nothing written twice, no hole). A step file (argv[3]), rewritten at
 * every step, tells the test how far it got. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc < 4) { fprintf(stderr, "usage: stdio_files STEPS MS STEPFILE\n"); return 2; }
    int n = atoi(argv[1]);
    long ms = atol(argv[2]);
    const char *stepfile = argv[3];
    setvbuf(stdin, NULL, _IONBF, 0);
    setvbuf(stdout, NULL, _IONBF, 0);
    long written = 0;
    char line[64], want[64];
    for (int s = 0; s < n; s++) {
        if (!fgets(line, sizeof line, stdin)) { fprintf(stderr, "FAIL: stdin ended at step %d\n", s); return 1; }
        snprintf(want, sizeof want, "in %d\n", s);
        if (strcmp(line, want) != 0) { fprintf(stderr, "FAIL: step %d read from stdin: %s", s, line); return 1; }
        int k = printf("out %d\n", s);
        if (k < 0) { fprintf(stderr, "FAIL: step %d: writing stdout failed\n", s); return 1; }
        written += k;
        struct stat st;
        if (fstat(1, &st) == 0 && S_ISREG(st.st_mode)) {
            off_t o = lseek(1, 0, SEEK_CUR);
            if (o != written || st.st_size != written) {
                fprintf(stderr, "FAIL: step %d: stdout at offset %ld of %ld bytes, %ld written\n", s, (long)o,
                        (long)st.st_size, written);
                return 1;
            }
        }
        fprintf(stderr, "err %d\n", s);
        int fd = open(stepfile, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dprintf(fd, "%d\n", s);
            close(fd);
        }
        struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
        nanosleep(&ts, NULL);
    }
    printf("done\n");
    return 0;
}
