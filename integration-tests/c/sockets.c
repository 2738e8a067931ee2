/* Sockets of one process, checked from inside at every step, with data in flight while it
 * sleeps (when checkpoints are taken):
 * - socketpairs of each type: a stream with bytes queued, datagrams and seqpackets with
 *   their boundaries and order;
 * - a Unix stream listener at a relative path, and one connection to it (client and
 *   accepted end both here) echoing; each step a new client connects to the listener;
 * - an abstract-namespace datagram socket that a fresh socket sends to by name;
 * - a TCP listener on 127.0.0.1 (a new connection each step, to the port it had) and, when
 *   the machine has IPv6, one on [::1] with IPV6_V6ONLY;
 * - UDP: a bound receiver and a connected sender whose source port must stay the same;
 * - options (SO_KEEPALIVE, TCP_NODELAY, SO_RCVBUF, O_NONBLOCK) and a shutdown(SHUT_WR).
 * Output is deterministic (no ports or pids printed). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/filter.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define FAIL(...) do { printf("FAIL: " __VA_ARGS__); printf(" (step %d, errno %d)\n", step, errno); exit(1); } while (0)

static int step;

static void expect_msg(int fd, const char *want) {
    char buf[256];
    ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n != (ssize_t)strlen(want) || memcmp(buf, want, n) != 0) FAIL("fd %d: got %zd bytes, want '%s'", fd, n, want);
}

static void expect_empty(int fd) {
    char c;
    if (recv(fd, &c, 1, MSG_DONTWAIT) != -1 || errno != EAGAIN) FAIL("fd %d has more data", fd);
}

static int tcp_connect(int family, unsigned short port) {
    int c = socket(family, SOCK_STREAM, 0);
    int r;
    if (family == AF_INET) {
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = port };
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        r = connect(c, (struct sockaddr *)&a, sizeof a);
    } else {
        struct sockaddr_in6 a = { .sin6_family = AF_INET6, .sin6_port = port, .sin6_addr = IN6ADDR_LOOPBACK_INIT };
        r = connect(c, (struct sockaddr *)&a, sizeof a);
    }
    if (r != 0) FAIL("connect to the TCP listener (family %d)", family);
    return c;
}

static void tcp_round(int l, int family, unsigned short port) {
    int c = tcp_connect(family, port);
    int s = accept(l, NULL, NULL);
    if (s < 0) FAIL("accept on the TCP listener");
    char msg[32];
    int len = snprintf(msg, sizeof msg, "tcp %d", step);
    if (write(c, msg, len) != len) FAIL("tcp write");
    char buf[32];
    if (read(s, buf, sizeof buf) != len || memcmp(buf, msg, len) != 0) FAIL("tcp read");
    close(c);
    close(s);
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 40;
    long ms = argc > 2 ? atol(argv[2]) : 20;
    setvbuf(stdout, NULL, _IONBF, 0);
    int st[2], dg[2], sq[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, st) || socketpair(AF_UNIX, SOCK_DGRAM, 0, dg) || socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sq))
        FAIL("socketpair");
    fcntl(st[1], F_SETFL, O_NONBLOCK);
    int one = 1, rcvbuf = 50000;
    setsockopt(st[0], SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
    setsockopt(dg[1], SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    int want_rcvbuf;
    socklen_t ol = sizeof want_rcvbuf;
    getsockopt(dg[1], SOL_SOCKET, SO_RCVBUF, &want_rcvbuf, &ol);
    /* A classic BPF filter that cuts every datagram to 3 bytes, locked in. */
    int fp[2];
    if (socketpair(AF_UNIX, SOCK_DGRAM, 0, fp)) FAIL("socketpair");
    struct sock_filter cut[] = { BPF_STMT(BPF_RET | BPF_K, 3) };
    struct sock_fprog prog = { .len = 1, .filter = cut };
    if (setsockopt(fp[1], SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof prog) ||
        setsockopt(fp[1], SOL_SOCKET, SO_LOCK_FILTER, &one, sizeof one))
        FAIL("socket filter");
    /* A pair shut down for writing one way: its reader sees end of file after the data. */
    int sh[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sh)) FAIL("socketpair");
    write(sh[0], "last words", 10);
    shutdown(sh[0], SHUT_WR);

    /* Unix listener at a relative path, and one connection to it. */
    unlink("srv.sock");
    int ul = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un ua = { .sun_family = AF_UNIX };
    strcpy(ua.sun_path, "srv.sock");
    if (bind(ul, (struct sockaddr *)&ua, sizeof ua) || listen(ul, 5)) FAIL("unix listener");
    int uc = socket(AF_UNIX, SOCK_STREAM, 0);
    if (connect(uc, (struct sockaddr *)&ua, sizeof ua)) FAIL("unix connect");
    int us = accept(ul, NULL, NULL);
    if (us < 0) FAIL("unix accept");

    /* Abstract datagram receiver, named after this run's pid (kept across restarts). */
    struct sockaddr_un aa = { .sun_family = AF_UNIX };
    int alen = snprintf(aa.sun_path + 1, sizeof aa.sun_path - 1, "crum-sockets-%d", (int)getpid()) + 1;
    socklen_t aalen = offsetof(struct sockaddr_un, sun_path) + alen;
    int ab = socket(AF_UNIX, SOCK_DGRAM, 0);
    if (bind(ab, (struct sockaddr *)&aa, aalen)) FAIL("abstract bind");

    /* TCP listeners. */
    int tl = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in ta = { .sin_family = AF_INET };
    ta.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    setsockopt(tl, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (bind(tl, (struct sockaddr *)&ta, sizeof ta) || listen(tl, 16)) FAIL("tcp listener");
    socklen_t tal = sizeof ta;
    getsockname(tl, (struct sockaddr *)&ta, &tal);
    unsigned short tport = ta.sin_port;
    int tl6 = socket(AF_INET6, SOCK_STREAM, 0);
    unsigned short tport6 = 0;
    if (tl6 >= 0) {
        setsockopt(tl6, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
        struct sockaddr_in6 a6 = { .sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT };
        socklen_t l6 = sizeof a6;
        if (bind(tl6, (struct sockaddr *)&a6, sizeof a6) || listen(tl6, 16) || getsockname(tl6, (struct sockaddr *)&a6, &l6)) {
            close(tl6);
            tl6 = -1;
        } else {
            tport6 = a6.sin6_port;
        }
    }

    /* UDP receiver and connected sender. */
    int ur = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in ra = { .sin_family = AF_INET };
    ra.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(ur, (struct sockaddr *)&ra, sizeof ra)) FAIL("udp bind");
    socklen_t ral = sizeof ra;
    getsockname(ur, (struct sockaddr *)&ra, &ral);
    int usend = socket(AF_INET, SOCK_DGRAM, 0);
    if (connect(usend, (struct sockaddr *)&ra, sizeof ra)) FAIL("udp connect");
    struct sockaddr_in sa;
    socklen_t sal = sizeof sa;
    getsockname(usend, (struct sockaddr *)&sa, &sal);

    for (step = 0; step < n; step++) {
        char m[64];
        /* What the previous step left in flight. */
        if (step > 0) {
            snprintf(m, sizeof m, "stream %d", step - 1);
            expect_msg(st[1], m);
            expect_empty(st[1]);
            for (int k = 0; k < 3; k++) {
                snprintf(m, sizeof m, "dgram %d.%d%.*s", step - 1, k, k * 5, "xxxxxxxxxxxxxxx");
                expect_msg(dg[1], m);
            }
            expect_empty(dg[1]);
            snprintf(m, sizeof m, "seq %d", step - 1);
            expect_msg(sq[0], m);
            snprintf(m, sizeof m, "seq %d again", step - 1);
            expect_msg(sq[0], m);
            snprintf(m, sizeof m, "to server %d", step - 1);
            expect_msg(us, m);
        }
        /* Each step: a new client on each listener. */
        int c = socket(AF_UNIX, SOCK_STREAM, 0);
        if (connect(c, (struct sockaddr *)&ua, sizeof ua)) FAIL("new unix client");
        int a = accept(ul, NULL, NULL);
        if (a < 0) FAIL("unix accept");
        close(c);
        close(a);
        tcp_round(tl, AF_INET, tport);
        if (tl6 >= 0) tcp_round(tl6, AF_INET6, tport6);
        /* State that must be as it was set. */
        int v = 0;
        ol = sizeof v;
        if (getsockopt(st[0], SOL_SOCKET, SO_KEEPALIVE, &v, &ol) || v != 1) FAIL("SO_KEEPALIVE");
        if (getsockopt(tl, IPPROTO_TCP, TCP_NODELAY, &v, &ol) || v != 1) FAIL("TCP_NODELAY");
        if (getsockopt(dg[1], SOL_SOCKET, SO_RCVBUF, &v, &ol) || v != want_rcvbuf) FAIL("SO_RCVBUF %d, want %d", v, want_rcvbuf);
        if (!(fcntl(st[1], F_GETFL) & O_NONBLOCK)) FAIL("O_NONBLOCK");
        if (tl6 >= 0 && (getsockopt(tl6, IPPROTO_IPV6, IPV6_V6ONLY, &v, &ol) || v != 1)) FAIL("IPV6_V6ONLY");
        struct sockaddr_un got = { 0 };
        socklen_t gl = sizeof got;
        if (getsockname(ul, (struct sockaddr *)&got, &gl) || strcmp(got.sun_path, "srv.sock") != 0) FAIL("listener name");
        char lw[16];
        if (recv(sh[1], lw, sizeof lw, MSG_PEEK | MSG_DONTWAIT) != 10) FAIL("shut-down pair lost its data");
        /* The filter still cuts, is still one instruction, and is still locked. */
        send(fp[0], "abcdef", 6, 0);
        if (recv(fp[1], lw, sizeof lw, MSG_DONTWAIT) != 3 || memcmp(lw, "abc", 3)) FAIL("socket filter gone");
        struct sock_filter got_f[4];
        socklen_t fl4 = 4;
        if (getsockopt(fp[1], SOL_SOCKET, SO_GET_FILTER, got_f, &fl4) || fl4 != 1 || got_f[0].k != 3) FAIL("SO_GET_FILTER");
        if (getsockopt(fp[1], SOL_SOCKET, SO_LOCK_FILTER, &v, &ol) || v != 1) FAIL("SO_LOCK_FILTER");
        /* Datagrams to the bound receivers, taken in the same step (a datagram waiting in a
         * socket bound for anyone to send to is named at checkpoint and not carried). */
        snprintf(m, sizeof m, "to abstract %d", step);
        int t = socket(AF_UNIX, SOCK_DGRAM, 0);
        if (sendto(t, m, strlen(m), 0, (struct sockaddr *)&aa, aalen) < 0) FAIL("send to the abstract name");
        close(t);
        expect_msg(ab, m);
        snprintf(m, sizeof m, "udp %d", step);
        if (send(usend, m, strlen(m), 0) < 0) FAIL("udp send");
        struct sockaddr_in from;
        socklen_t fl = sizeof from;
        char b[64];
        ssize_t k;
        do k = recvfrom(ur, b, sizeof b, 0, (struct sockaddr *)&from, &fl); while (k < 0 && errno == EINTR);
        if (k != (ssize_t)strlen(m) || memcmp(b, m, k) != 0) FAIL("udp datagram");
        if (from.sin_port != sa.sin_port) FAIL("udp source port changed");
        /* Echo through the accepted connection. */
        snprintf(m, sizeof m, "echo %d", step);
        if (write(uc, m, strlen(m)) != (ssize_t)strlen(m)) FAIL("unix client write");
        expect_msg(us, m);
        if (write(us, m, strlen(m)) != (ssize_t)strlen(m)) FAIL("unix server write");
        expect_msg(uc, m);
        /* Leave data in flight over the sleep. */
        snprintf(m, sizeof m, "stream %d", step);
        send(st[0], m, strlen(m), 0);
        for (int k = 0; k < 3; k++) {
            snprintf(m, sizeof m, "dgram %d.%d%.*s", step, k, k * 5, "xxxxxxxxxxxxxxx");
            send(dg[0], m, strlen(m), 0);
        }
        snprintf(m, sizeof m, "seq %d", step);
        send(sq[1], m, strlen(m), 0);
        snprintf(m, sizeof m, "seq %d again", step);
        send(sq[1], m, strlen(m), 0);
        snprintf(m, sizeof m, "to server %d", step);
        send(uc, m, strlen(m), 0);
        printf("step %d ok\n", step);
        struct timespec ts = { 0, ms * 1000000L };
        nanosleep(&ts, NULL);
    }
    char lw[16];
    if (read(sh[1], lw, sizeof lw) != 10 || read(sh[1], lw, sizeof lw) != 0) FAIL("shut-down pair: data then end of file");
    printf("done\n");
    return 0;
}
