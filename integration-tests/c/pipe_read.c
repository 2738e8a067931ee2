/* A thread spends its life blocked in read(2) on a pipe; the main thread writes one message
 * per step. At checkpoint time the reader is inside read(), which must resume (not fail)
 * after restart; bytes already in the pipe must not be lost. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int p[2], ack[2];

static void *reader(void *arg) {
    (void)arg;
    char buf[32];
    for (;;) {
        ssize_t r = read(p[0], buf, 8);
        if (r < 0) { printf("read failed\n"); exit(1); }
        if (r == 0) break;
        buf[r] = 0;
        printf("reader got %s\n", buf);
        write(ack[1], "k", 1);
    }
    printf("reader saw end of file\n");
    return NULL;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 40;
    long ms = argc > 2 ? atol(argv[2]) : 20;
    setvbuf(stdout, NULL, _IONBF, 0);
    pipe(p);
    pipe(ack);
    pthread_t t;
    pthread_create(&t, NULL, reader, NULL);
    for (int i = 0; i < n; i++) {
        struct timespec ts = { 0, ms * 1000000L };
        nanosleep(&ts, NULL);
        char msg[16];
        snprintf(msg, sizeof msg, "msg%05d", i);
        write(p[1], msg, 8);
        char k;
        if (read(ack[0], &k, 1) != 1) { printf("ack failed\n"); return 1; }
    }
    close(p[1]);
    pthread_join(t, NULL);
    printf("done\n");
    return 0;
}
