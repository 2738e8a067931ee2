/* Appends to a file through a descriptor kept open across the checkpoint (O_APPEND), and
 * reads another file sequentially through a descriptor whose offset must be restored. At
 * the end, the appended file must hold exactly the lines of an uninterrupted run. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 40;
    long ms = argc > 2 ? atol(argv[2]) : 20;
    setvbuf(stdout, NULL, _IONBF, 0);
    int in = open("input.txt", O_RDWR | O_CREAT | O_TRUNC, 0600);
    for (int i = 0; i < n; i++) dprintf(in, "%04d", i * i % 9973);
    close(in);
    in = open("input.txt", O_RDONLY);
    int out = open("log.txt", O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0600);
    for (int i = 0; i < n; i++) {
        char buf[5] = {0};
        if (read(in, buf, 4) != 4) { printf("short read at %d\n", i); return 1; }
        dprintf(out, "line %d value %s\n", i, buf);
        printf("step %d read %s offset %ld\n", i, buf, (long)lseek(in, 0, SEEK_CUR));
        struct timespec ts = { 0, ms * 1000000L };
        nanosleep(&ts, NULL);
    }
    close(out);
    FILE *f = fopen("log.txt", "r");
    char line[128];
    unsigned long h = 0;
    int lines = 0;
    while (fgets(line, sizeof line, f)) { for (char *p = line; *p; p++) h = h * 131 + (unsigned char)*p; lines++; }
    printf("log has %d lines hash %lu\n", lines, h);
    return 0;
}
