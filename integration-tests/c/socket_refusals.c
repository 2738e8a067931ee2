/* Socket state crum cannot restore exactly, which must refuse the checkpoint and leave the
 * program as it was. `socket_refusals MODE`: sets the state up, prints "ready", waits for a
 * file named "go" in its directory (the test checkpoints meanwhile), then checks the state
 * is intact and prints PASS.
 * - scm: a pipe's read end in flight (SCM_RIGHTS) in a datagram socket pair;
 * - dgram: a datagram waiting in a bound socket from a sender bound to a path and closed
 *   since (a restart could not send it again from that name);
 * - listen: a connection waiting to be accepted by a Unix listener;
 * - tcp-half: a TCP connection its client shut down for sending (the server's end in
 *   CLOSE_WAIT);
 * - tcp-self: an established TCP connection whose two ends are this process's;
 * - removed: a socket whose file was removed after the bind. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define FAIL(...) do { printf("FAIL: " __VA_ARGS__); printf(" (errno %d)\n", errno); exit(1); } while (0)

static void wait_go(void) {
    struct timespec w = { 0, 10000000 };
    for (int i = 0; i < 6000 && access("go", F_OK) != 0; i++) nanosleep(&w, NULL);
    if (access("go", F_OK) != 0) FAIL("no go");
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "scm";
    setvbuf(stdout, NULL, _IONBF, 0);
    if (!strcmp(mode, "scm")) {
        int sp[2], p[2];
        if (socketpair(AF_UNIX, SOCK_DGRAM, 0, sp) || pipe(p)) FAIL("socketpair/pipe");
        if (write(p[1], "hi", 2) != 2) FAIL("pipe write");
        char cbuf[CMSG_SPACE(sizeof(int))] = { 0 };
        struct iovec iov = { "m", 1 };
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf };
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &p[0], sizeof(int));
        if (sendmsg(sp[0], &mh, 0) != 1) FAIL("sendmsg");
        close(p[0]);
        printf("ready\n");
        wait_go();
        char b[4];
        memset(cbuf, 0, sizeof cbuf);
        iov.iov_base = b;
        mh.msg_controllen = sizeof cbuf;
        if (recvmsg(sp[1], &mh, MSG_DONTWAIT) != 1) FAIL("recvmsg");
        c = CMSG_FIRSTHDR(&mh);
        if (!c || c->cmsg_type != SCM_RIGHTS) FAIL("no descriptor came");
        int fd;
        memcpy(&fd, CMSG_DATA(c), sizeof fd);
        if (read(fd, b, 2) != 2 || memcmp(b, "hi", 2)) FAIL("the pipe that came lost its bytes");
    } else if (!strcmp(mode, "dgram")) {
        int r = socket(AF_UNIX, SOCK_DGRAM, 0), s = socket(AF_UNIX, SOCK_DGRAM, 0);
        struct sockaddr_un ra = { .sun_family = AF_UNIX, .sun_path = "recv.sock" };
        struct sockaddr_un sa = { .sun_family = AF_UNIX, .sun_path = "send.sock" };
        unlink(ra.sun_path);
        unlink(sa.sun_path);
        if (bind(r, (struct sockaddr *)&ra, sizeof ra) || bind(s, (struct sockaddr *)&sa, sizeof sa)) FAIL("bind");
        if (sendto(s, "datagram", 8, 0, (struct sockaddr *)&ra, sizeof ra) != 8) FAIL("sendto");
        close(s);
        printf("ready\n");
        wait_go();
        char b[16];
        struct sockaddr_un from = { 0 };
        socklen_t fl = sizeof from;
        if (recvfrom(r, b, sizeof b, MSG_DONTWAIT, (struct sockaddr *)&from, &fl) != 8 || memcmp(b, "datagram", 8)) FAIL("the datagram is gone");
        if (strcmp(from.sun_path, "send.sock")) FAIL("its sender is '%s'", from.sun_path);
        unlink(ra.sun_path);
        unlink(sa.sun_path);
    } else if (!strcmp(mode, "listen")) {
        int l = socket(AF_UNIX, SOCK_STREAM, 0), c = socket(AF_UNIX, SOCK_STREAM, 0);
        struct sockaddr_un a = { .sun_family = AF_UNIX, .sun_path = "listen.sock" };
        unlink(a.sun_path);
        if (bind(l, (struct sockaddr *)&a, sizeof a) || listen(l, 4) || connect(c, (struct sockaddr *)&a, sizeof a)) FAIL("listen/connect");
        if (write(c, "early", 5) != 5) FAIL("write");
        printf("ready\n");
        wait_go();
        int s = accept(l, NULL, NULL);
        char b[8];
        if (s < 0 || read(s, b, sizeof b) != 5 || memcmp(b, "early", 5)) FAIL("the waiting connection is gone");
        unlink(a.sun_path);
    } else if (!strcmp(mode, "tcp-half")) {
        int l = socket(AF_INET, SOCK_STREAM, 0), c = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = { .sin_family = AF_INET };
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t al = sizeof a;
        if (bind(l, (struct sockaddr *)&a, al) || listen(l, 4) || getsockname(l, (struct sockaddr *)&a, &al)) FAIL("listen");
        if (connect(c, (struct sockaddr *)&a, al)) FAIL("connect");
        int s = accept(l, NULL, NULL);
        if (s < 0 || shutdown(c, SHUT_WR)) FAIL("accept/shutdown");
        char b[8];
        if (read(s, b, sizeof b) != 0) FAIL("no end of file");
        printf("ready\n");
        wait_go();
        if (read(s, b, sizeof b) != 0) FAIL("the server end lost its end of file");
        if (write(s, "back", 4) != 4 || read(c, b, sizeof b) != 4 || memcmp(b, "back", 4)) FAIL("the half-closed connection does not carry the other way");
    } else if (!strcmp(mode, "tcp-self")) {
        int l = socket(AF_INET, SOCK_STREAM, 0), c = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = { .sin_family = AF_INET };
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t al = sizeof a;
        if (bind(l, (struct sockaddr *)&a, al) || listen(l, 4) || getsockname(l, (struct sockaddr *)&a, &al)) FAIL("listen");
        if (connect(c, (struct sockaddr *)&a, al)) FAIL("connect");
        int s = accept(l, NULL, NULL);
        if (s < 0 || write(c, "there", 5) != 5) FAIL("accept/write");
        printf("ready\n");
        wait_go();
        char b[8];
        if (read(s, b, sizeof b) != 5 || memcmp(b, "there", 5)) FAIL("the bytes in flight are gone");
        if (write(s, "back", 4) != 4 || read(c, b, sizeof b) != 4 || memcmp(b, "back", 4)) FAIL("the connection is broken");
    } else if (!strcmp(mode, "removed")) {
        int u = socket(AF_UNIX, SOCK_DGRAM, 0);
        struct sockaddr_un a = { .sun_family = AF_UNIX, .sun_path = "gone.sock" };
        unlink(a.sun_path);
        if (bind(u, (struct sockaddr *)&a, sizeof a) || unlink(a.sun_path)) FAIL("bind/unlink");
        printf("ready\n");
        wait_go();
        struct stat st;
        if (stat(a.sun_path, &st) == 0) FAIL("the socket file is back");
        struct sockaddr_un g = { 0 };
        socklen_t gl = sizeof g;
        if (getsockname(u, (struct sockaddr *)&g, &gl) || strcmp(g.sun_path, "gone.sock")) FAIL("its name changed");
    } else {
        FAIL("unknown mode %s", mode);
    }
    printf("PASS\n");
    return 0;
}
