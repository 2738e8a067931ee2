/* Socket state that CRIU's zdtm found lost, checked from inside at every step:
 * - a UDP pair connected both ways, one shut down for sending, the other for receiving:
 *   a send on the first still fails with EPIPE, the other way still carries a datagram;
 * - one end of a datagram socket pair and one of a seqpacket pair whose other ends are
 *   closed, with messages waiting: one is read per step, in order, boundaries kept; the
 *   seqpacket end then reads end of file, the datagram end EAGAIN;
 * - a Unix datagram socket bound to a relative path and connected to itself;
 * - a bound Unix datagram socket always holding 9 datagrams, from a sender bound to a path,
 *   an unnamed sender, and one bound to an abstract name and closed right after sending:
 *   each step reads one and checks its bytes and its sender's address;
 * - options: SO_BUF_LOCK, SO_DONTROUTE, TCP_CORK, SO_NO_CHECK, and SO_MARK and
 *   SO_BINDTODEVICE where the process may set them (root).
 * Output is deterministic. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#ifndef SO_BUF_LOCK
#define SO_BUF_LOCK 72
#endif

#define FAIL(...) do { printf("FAIL: " __VA_ARGS__); printf(" (step %d, errno %d)\n", step, errno); exit(1); } while (0)

static int step;

static int geti(int fd, int level, int name) {
    int v = -1;
    socklen_t l = sizeof v;
    if (getsockopt(fd, level, name, &v, &l)) FAIL("getsockopt %d/%d", level, name);
    return v;
}

/* Datagram k comes from the path-named sender (k % 3 == 0), the unnamed one (1) or a
 * socket bound to the abstract name `gone` for the moment (2). */
static void send_from(int k, int rcv, struct sockaddr_un *ra, int snd, int anon, const char *gone, int gone_len) {
    (void)rcv;
    char m[32];
    int len = snprintf(m, sizeof m, "datagram %d", k);
    int s = k % 3 == 0 ? snd : k % 3 == 1 ? anon : socket(AF_UNIX, SOCK_DGRAM, 0);
    if (k % 3 == 2) {
        struct sockaddr_un ga = { .sun_family = AF_UNIX };
        memcpy(ga.sun_path, gone, gone_len);
        if (bind(s, (struct sockaddr *)&ga, offsetof(struct sockaddr_un, sun_path) + gone_len)) FAIL("abstract bind");
    }
    if (sendto(s, m, len, 0, (struct sockaddr *)ra, sizeof *ra) != len) FAIL("sendto %d", k);
    if (k % 3 == 2) close(s);
}

static void expect_from(int k, int rcv, const char *gone, int gone_len) {
    char m[32], got[64];
    int len = snprintf(m, sizeof m, "datagram %d", k);
    struct sockaddr_un from = { 0 };
    socklen_t fl = sizeof from;
    ssize_t n = recvfrom(rcv, got, sizeof got, 0, (struct sockaddr *)&from, &fl);
    if (n != len || memcmp(got, m, len)) FAIL("datagram %d: got %zd bytes", k, n);
    int ok = k % 3 == 0 ? !strcmp(from.sun_path, "snd.sock")
           : k % 3 == 1 ? fl <= offsetof(struct sockaddr_un, sun_path)
           : fl == offsetof(struct sockaddr_un, sun_path) + gone_len && !memcmp(from.sun_path, gone, gone_len);
    if (!ok) FAIL("datagram %d: wrong sender (length %u)", k, (unsigned)fl);
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 20;
    long ms = argc > 2 ? atol(argv[2]) : 20;
    setvbuf(stdout, NULL, _IONBF, 0);

    /* UDP, shut down one way each. */
    int u1 = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0), u2 = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
    struct sockaddr_in a1 = { .sin_family = AF_INET }, a2 = { .sin_family = AF_INET };
    a1.sin_addr.s_addr = a2.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t al = sizeof a1;
    if (bind(u1, (struct sockaddr *)&a1, al) || bind(u2, (struct sockaddr *)&a2, al)) FAIL("udp bind");
    getsockname(u1, (struct sockaddr *)&a1, &al);
    getsockname(u2, (struct sockaddr *)&a2, &al);
    if (connect(u1, (struct sockaddr *)&a2, al) || connect(u2, (struct sockaddr *)&a1, al)) FAIL("udp connect");
    if (shutdown(u1, SHUT_WR) || shutdown(u2, SHUT_RD)) FAIL("udp shutdown");

    /* Pairs whose other end is closed, with messages waiting. */
    int dg[2], sq[2];
    if (socketpair(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK, 0, dg) || socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK, 0, sq)) FAIL("socketpair");
    for (int i = 0; i < n; i++) {
        char m[32];
        int len = snprintf(m, sizeof m, "dgram %d%.*s", i, i % 7, "xxxxxxx");
        if (send(dg[1], m, len, 0) != len) FAIL("dgram send");
        len = snprintf(m, sizeof m, "seq %d%.*s", i, i % 5, "yyyyy");
        if (send(sq[1], m, len, 0) != len) FAIL("seq send");
    }
    close(dg[1]);
    close(sq[1]);

    /* A datagram socket connected to its own name. */
    unlink("self.sock");
    int self = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK, 0);
    struct sockaddr_un sa = { .sun_family = AF_UNIX, .sun_path = "self.sock" };
    if (bind(self, (struct sockaddr *)&sa, sizeof sa) || connect(self, (struct sockaddr *)&sa, sizeof sa)) FAIL("self bind/connect");

    /* Datagrams waiting with their senders. */
    unlink("rcv.sock");
    unlink("snd.sock");
    int rcv = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK, 0), snd = socket(AF_UNIX, SOCK_DGRAM, 0), anon = socket(AF_UNIX, SOCK_DGRAM, 0);
    struct sockaddr_un ra = { .sun_family = AF_UNIX, .sun_path = "rcv.sock" }, na = { .sun_family = AF_UNIX, .sun_path = "snd.sock" };
    if (bind(rcv, (struct sockaddr *)&ra, sizeof ra) || bind(snd, (struct sockaddr *)&na, sizeof na)) FAIL("datagram bind");
    char gone[32];
    int gone_len = snprintf(gone, sizeof gone, "%ccrum-gone-%d", 0, getpid());
    for (int k = 0; k < 9; k++) send_from(k, rcv, &ra, snd, anon, gone, gone_len);

    /* Options. */
    int one = 1, lock = 1 /* SOCK_SNDBUF_LOCK */, mark = 7;
    int t = socket(AF_INET, SOCK_STREAM, 0);
    if (setsockopt(t, IPPROTO_TCP, TCP_CORK, &one, sizeof one)) FAIL("TCP_CORK");
    if (setsockopt(t, SOL_SOCKET, SO_BUF_LOCK, &lock, sizeof lock)) FAIL("SO_BUF_LOCK");
    if (setsockopt(t, SOL_SOCKET, SO_DONTROUTE, &one, sizeof one)) FAIL("SO_DONTROUTE");
    if (setsockopt(u2, SOL_SOCKET, SO_NO_CHECK, &one, sizeof one)) FAIL("SO_NO_CHECK");
    int have_mark = setsockopt(t, SOL_SOCKET, SO_MARK, &mark, sizeof mark) == 0;
    int have_dev = setsockopt(u1, SOL_SOCKET, SO_BINDTODEVICE, "lo", 3) == 0;

    for (step = 0; step < n; step++) {
        char m[64], got[64];
        /* UDP: u1 cannot send, u2 still can. */
        if (send(u1, "x", 1, 0) != -1 || errno != EPIPE) FAIL("the send-shut-down UDP socket sent");
        int len = snprintf(m, sizeof m, "udp %d", step);
        if (send(u2, m, len, 0) != len) FAIL("udp send");
        struct timespec w = { 0, 1000000 };
        ssize_t r;
        for (int tries = 0; (r = recv(u1, got, sizeof got, 0)) < 0 && errno == EAGAIN && tries < 5000; tries++) nanosleep(&w, NULL);
        if (r != len || memcmp(got, m, len)) FAIL("udp recv %zd", r);
        /* One message from each closed pair. */
        len = snprintf(m, sizeof m, "dgram %d%.*s", step, step % 7, "xxxxxxx");
        if (recv(dg[0], got, sizeof got, 0) != len || memcmp(got, m, len)) FAIL("dgram message %d", step);
        len = snprintf(m, sizeof m, "seq %d%.*s", step, step % 5, "yyyyy");
        if (recv(sq[0], got, sizeof got, 0) != len || memcmp(got, m, len)) FAIL("seq message %d", step);
        /* The datagram of this step, from its sender; one more in its place. */
        expect_from(step, rcv, gone, gone_len);
        send_from(step + 9, rcv, &ra, snd, anon, gone, gone_len);
        /* Self-connected socket. */
        len = snprintf(m, sizeof m, "self %d", step);
        if (send(self, m, len, 0) != len) FAIL("self send");
        if (recv(self, got, sizeof got, 0) != len || memcmp(got, m, len)) FAIL("self recv");
        struct sockaddr_un g = { 0 };
        socklen_t gl = sizeof g;
        if (getpeername(self, (struct sockaddr *)&g, &gl) || strcmp(g.sun_path, "self.sock")) FAIL("self peer name");
        /* Options. */
        if (geti(t, IPPROTO_TCP, TCP_CORK) != 1) FAIL("TCP_CORK lost");
        if (geti(t, SOL_SOCKET, SO_BUF_LOCK) != 1) FAIL("SO_BUF_LOCK lost");
        if (geti(t, SOL_SOCKET, SO_DONTROUTE) != 1) FAIL("SO_DONTROUTE lost");
        if (geti(u2, SOL_SOCKET, SO_NO_CHECK) != 1) FAIL("SO_NO_CHECK lost");
        if (have_mark && geti(t, SOL_SOCKET, SO_MARK) != 7) FAIL("SO_MARK lost");
        if (have_dev) {
            char dev[16] = { 0 };
            socklen_t dl = sizeof dev;
            if (getsockopt(u1, SOL_SOCKET, SO_BINDTODEVICE, dev, &dl) || strcmp(dev, "lo")) FAIL("SO_BINDTODEVICE lost");
        }
        printf("step %d ok\n", step);
        struct timespec ts = { ms / 1000, (ms % 1000) * 1000000 };
        nanosleep(&ts, NULL);
    }
    char c;
    if (recv(dg[0], &c, 1, 0) != -1 || errno != EAGAIN) FAIL("the datagram end has more");
    if (recv(sq[0], &c, 1, 0) != 0) FAIL("the seqpacket end does not read end of file");
    unlink("self.sock");
    unlink("rcv.sock");
    unlink("snd.sock");
    printf("PASS\n");
    return 0;
}
