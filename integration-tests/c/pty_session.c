/* A pseudo-terminal the program made and took as the controlling terminal of its own
 * session (CRIU's pty03, tty00): crum can neither make the pair again nor make a terminal
 * controlling again, so a checkpoint names both (warnings; --strict refuses) and a restart of
 * the image is refused naming the master side. Before, the restarted program had a new,
 * unrelated pty at the master's number and no controlling terminal (opening /dev/tty failed
 * with ENXIO). The program leads a session (setsid; a child does it where the program leads
 * its group already), prints "ready", waits for a file named "go" in its directory (the test
 * checkpoints meanwhile), then checks its terminal is intact: /dev/tty opens, and a line
 * written on the master side is read there. It prints PASS. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#define FAIL(...) do { printf("FAIL: " __VA_ARGS__); printf(" (errno %d)\n", errno); exit(1); } while (0)

static void wait_go(void) {
    struct timespec w = { 0, 10000000 };
    for (int i = 0; i < 6000 && access("go", F_OK) != 0; i++) nanosleep(&w, NULL);
    if (access("go", F_OK) != 0) FAIL("no go");
}

static int session(void) {
    int m = posix_openpt(O_RDWR | O_NOCTTY);
    if (m < 0 || grantpt(m) || unlockpt(m)) FAIL("posix_openpt");
    /* The first terminal a session leader without one opens becomes its controlling one. */
    int s = open(ptsname(m), O_RDWR);
    if (s < 0) FAIL("open %s", ptsname(m));
    struct termios t;
    if (tcgetattr(s, &t)) FAIL("tcgetattr");
    t.c_lflag &= ~(ECHO);
    if (tcsetattr(s, TCSANOW, &t)) FAIL("tcsetattr");
    close(s);
    if (tcgetsid(m) != getpid()) FAIL("the pty is not the controlling terminal of this session");
    printf("ready\n");
    wait_go();
    int tty = open("/dev/tty", O_RDWR);
    if (tty < 0) FAIL("no controlling terminal: open /dev/tty");
    if (write(m, "ping\n", 5) != 5) FAIL("write on the master side");
    char buf[8] = { 0 };
    if (read(tty, buf, 5) != 5 || memcmp(buf, "ping\n", 5)) FAIL("the line written on the master side did not arrive: '%s'", buf);
    printf("PASS\n");
    return 0;
}

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    if (setsid() >= 0) return session();
    pid_t c = fork();
    if (c < 0) FAIL("fork");
    if (c == 0) {
        if (setsid() < 0) FAIL("setsid");
        exit(session());
    }
    int st;
    if (waitpid(c, &st, 0) != c) FAIL("waitpid");
    return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}
