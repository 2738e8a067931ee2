/* A TCP client of a server outside the process (argv[3]: its port on 127.0.0.1). It reads
 * nothing until step `from` (argv[4]), so what the server sent waits in the socket across
 * checkpoints; then it reads what there is each step. A restart brings the connection back
 * closed, after the bytes that had arrived: the program reads them, then end of file. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 40;
    long ms = argc > 2 ? atol(argv[2]) : 20;
    int port = argc > 3 ? atoi(argv[3]) : 0;
    int from = argc > 4 ? atoi(argv[4]) : 10;
    setvbuf(stdout, NULL, _IONBF, 0);
    int c = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(c, (struct sockaddr *)&a, sizeof a) != 0) { printf("FAIL: connect\n"); return 1; }
    fcntl(c, F_SETFL, O_NONBLOCK);
    long total = 0;
    for (int i = 0; i < n; i++) {
        printf("step %d\n", i);
        if (i >= from) {
            char buf[4096];
            ssize_t k;
            while ((k = read(c, buf, sizeof buf)) > 0) {
                printf("got %zd bytes: %.*s\n", k, (int)k, buf);
                total += k;
            }
            if (k == 0) { printf("peer closed after %ld bytes\n", total); return 0; }
            if (errno != EAGAIN) { printf("read error %d\n", errno); return 1; }
        }
        struct timespec ts = { 0, ms * 1000000L };
        nanosleep(&ts, NULL);
    }
    printf("done\n");
    return 0;
}
