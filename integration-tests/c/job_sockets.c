/* Two processes of a job talking over five kinds of socket: a stream, a seqpacket and a
 * datagram socket pair, a Unix stream connection through a listener at a relative path,
 * and a TCP connection over 127.0.0.1. The root sends numbers ahead of time on each in turn
 * (number x on channel x % 5), the worker (forked; with a third argument "exec", executed
 * again) answers x*x+1 on the same channel a little slower, so that every socket holds
 * messages in flight both ways at any moment. The root checks every answer in order (a
 * message lost or seen twice after a restart breaks the sequence) and that every
 * connection's addresses are what they were. Both keep the two listeners open (shared by
 * the processes of the job); at the end the worker connects to each once more and the root
 * accepts those connections, then reaps the worker by its pid. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CH 5
static const char *names[CH] = { "stream pair", "seqpacket pair", "datagram pair", "unix connection", "tcp connection" };

static void nap(long ms) {
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

static int full(int fd, void *buf, size_t n, int writing) {
    char *p = buf;
    while (n > 0) {
        ssize_t k = writing ? write(fd, p, n) : read(fd, p, n);
        if (k <= 0) return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

/* One message: an int, as one datagram or 4 bytes of a stream. */
static int put(int fd, int x) { return full(fd, &x, sizeof x, 1); }
static int get(int fd, int *x) {
    return full(fd, x, sizeof *x, 0);
}

static int connect_unix(const char *path) {
    struct sockaddr_un a = { .sun_family = AF_UNIX };
    strncpy(a.sun_path, path, sizeof a.sun_path - 1);
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof a) != 0) return -1;
    return s;
}

static int connect_tcp(int port) {
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    int s = socket(AF_INET, SOCK_STREAM, 0);
    if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof a) != 0) return -1;
    int one = 1;
    setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return s;
}

static int worker(int *ch, int tcp_port, long ms) {
    for (int count = 0;; count++) {
        int x, fd = ch[count % CH];
        if (get(fd, &x) != 0) return 3;
        if (x < 0) break;
        nap(ms / 2);
        if (put(fd, x * x + 1) != 0) return 4;
    }
    /* The listeners are still there after any restart: connect once more to each. */
    int u = connect_unix("srv.sock"), t = connect_tcp(tcp_port);
    if (u < 0 || t < 0) return 5;
    if (put(u, 1000) != 0 || put(t, 2000) != 0) return 6;
    close(u);
    close(t);
    return 0;
}

struct names { struct sockaddr_storage local, peer; };
static void names_of(int fd, struct names *n) {
    socklen_t l = sizeof n->local, p = sizeof n->peer;
    memset(n, 0, sizeof *n);
    getsockname(fd, (struct sockaddr *)&n->local, &l);
    getpeername(fd, (struct sockaddr *)&n->peer, &p);
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "worker") == 0) {
        int ch[CH];
        for (int i = 0; i < CH; i++) ch[i] = atoi(argv[2 + i]);
        return worker(ch, atoi(argv[2 + CH]), atol(argv[3 + CH]));
    }
    int n = argc > 1 ? atoi(argv[1]) : 40;
    long ms = argc > 2 ? atol(argv[2]) : 40;
    int exec_worker = argc > 3 && strcmp(argv[3], "exec") == 0;
    setvbuf(stdout, NULL, _IONBF, 0);
    int sp[3][2];
    int types[3] = { SOCK_STREAM, SOCK_SEQPACKET, SOCK_DGRAM };
    for (int i = 0; i < 3; i++)
        if (socketpair(AF_UNIX, types[i], 0, sp[i]) != 0) { printf("FAIL socketpair\n"); return 1; }
    unlink("srv.sock");
    struct sockaddr_un ua = { .sun_family = AF_UNIX, .sun_path = "srv.sock" };
    int ul = socket(AF_UNIX, SOCK_STREAM, 0);
    if (ul < 0 || bind(ul, (struct sockaddr *)&ua, sizeof ua) != 0 || listen(ul, 4) != 0) { printf("FAIL unix listener\n"); return 1; }
    struct sockaddr_in ta = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    int tl = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    setsockopt(tl, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    socklen_t tal = sizeof ta;
    if (tl < 0 || bind(tl, (struct sockaddr *)&ta, sizeof ta) != 0 || listen(tl, 4) != 0 ||
        getsockname(tl, (struct sockaddr *)&ta, &tal) != 0) { printf("FAIL tcp listener\n"); return 1; }
    int port = ntohs(ta.sin_port);
    pid_t kid = fork();
    if (kid == 0) {
        int ch[CH];
        for (int i = 0; i < 3; i++) { close(sp[i][0]); ch[i] = sp[i][1]; }
        ch[3] = connect_unix("srv.sock");
        ch[4] = connect_tcp(port);
        if (ch[3] < 0 || ch[4] < 0) _exit(2);
        if (!exec_worker) _exit(worker(ch, port, ms));
        char *av[CH + 5], buf[CH + 2][24];
        av[0] = argv[0];
        av[1] = "worker";
        for (int i = 0; i < CH; i++) { snprintf(buf[i], 24, "%d", ch[i]); av[2 + i] = buf[i]; }
        snprintf(buf[CH], 24, "%d", port);
        snprintf(buf[CH + 1], 24, "%ld", ms);
        av[2 + CH] = buf[CH];
        av[3 + CH] = buf[CH + 1];
        av[4 + CH] = NULL;
        execv("/proc/self/exe", av);
        _exit(127);
    }
    int ch[CH];
    for (int i = 0; i < 3; i++) { close(sp[i][1]); ch[i] = sp[i][0]; }
    ch[3] = accept(ul, NULL, NULL);
    ch[4] = accept(tl, NULL, NULL);
    if (ch[3] < 0 || ch[4] < 0) { printf("FAIL accept\n"); return 1; }
    struct names before[CH], after;
    for (int i = 0; i < CH; i++) names_of(ch[i], &before[i]);
    int sent = 0;
    for (int i = 0; i < n; i++) {
        while (sent < n && sent < i + 2 * CH) {
            if (put(ch[sent % CH], sent) != 0) { printf("FAIL send at step %d\n", i); return 1; }
            sent++;
        }
        int y;
        if (get(ch[i % CH], &y) != 0) { printf("FAIL receive at step %d on the %s\n", i, names[i % CH]); return 1; }
        if (y != i * i + 1) { printf("FAIL step %d on the %s: got %d, want %d\n", i, names[i % CH], y, i * i + 1); return 1; }
        printf("root step %d got %d on the %s\n", i, y, names[i % CH]);
        nap(ms);
    }
    for (int i = 0; i < CH; i++) {
        names_of(ch[i], &after);
        if (memcmp(&after, &before[i], sizeof after) != 0) { printf("FAIL the addresses of the %s changed\n", names[i]); return 1; }
    }
    /* The worker reads channel k for its k-th number: -1 on the channel it reads next. */
    if (put(ch[n % CH], -1) != 0) { printf("FAIL send end\n"); return 1; }
    int u = accept(ul, NULL, NULL), t = accept(tl, NULL, NULL), a = 0, b = 0;
    if (u < 0 || t < 0 || get(u, &a) != 0 || get(t, &b) != 0 || a != 1000 || b != 2000) {
        printf("FAIL new connections to the listeners (%d %d)\n", a, b);
        return 1;
    }
    int st = 0;
    if (waitpid(kid, &st, 0) != kid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        printf("FAIL worker status %#x\n", st);
        return 1;
    }
    printf("worker ok\n");
    unlink("srv.sock");
    return 0;
}
