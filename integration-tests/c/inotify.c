/* inotify across restarts, checked from inside at every step: an instance (IN_NONBLOCK)
 * watching a directory (IN_CREATE | IN_DELETE), a file in it (IN_MODIFY), and a symbolic
 * link itself (IN_DONT_FOLLOW, IN_ATTRIB), with a gap in the watch numbers (a watch added
 * and removed between them). Each step creates and deletes a file in the directory, appends
 * to the watched file and touches the link, waits for the events with poll and checks each
 * one's watch descriptor, mask and name; the descriptor's flags must stay as they were.
 *
 * Modes (argv[3]): "raw" also adds a watch through the raw system call (crum cannot know
 * its path: the checkpoint must name it); "queue" leaves one event unread between steps
 * (the checkpoint must name it as lost). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static int fd, wd_dir, wd_file, wd_link;

/* Reads events until `want` of them arrived (poll waits up to 10 s for each batch);
 * checks every one against the expected list. */
static int expect(int step, const int *wds, const unsigned *masks, const char **names, int want) {
    char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
    int got = 0;
    while (got < want) {
        struct pollfd p = { .fd = fd, .events = POLLIN };
        int r = poll(&p, 1, 10000);
        if (r != 1) { printf("FAIL: step %d: no event %d after 10 s (poll %d, errno %d)\n", step, got, r, errno); return 0; }
        ssize_t n = read(fd, buf, sizeof buf);
        if (n < 0 && errno == EAGAIN) continue;
        if (n <= 0) { printf("FAIL: step %d: read %zd errno %d\n", step, n, errno); return 0; }
        for (char *q = buf; q < buf + n;) {
            struct inotify_event *e = (struct inotify_event *)q;
            if (got >= want) { printf("FAIL: step %d: an extra event (wd %d mask %#x)\n", step, e->wd, e->mask); return 0; }
            const char *name = e->len ? e->name : "";
            if (e->wd != wds[got] || (e->mask & ~IN_ISDIR) != masks[got] || strcmp(name, names[got])) {
                printf("FAIL: step %d: event %d is wd %d mask %#x name '%s', not wd %d mask %#x name '%s'\n", step, got, e->wd,
                       e->mask, name, wds[got], masks[got], names[got]);
                return 0;
            }
            got++;
            q += sizeof *e + e->len;
        }
    }
    return 1;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 40;
    long ms = argc > 2 ? atol(argv[2]) : 20;
    const char *mode = argc > 3 ? argv[3] : "";
    setvbuf(stdout, NULL, _IONBF, 0);
    mkdir("wdir", 0755);
    FILE *f = fopen("wdir/f", "w");
    if (!f) { printf("FAIL: create\n"); return 1; }
    fclose(f);
    unlink("link");
    mkdir("gap", 0755);
    if (symlink("wdir/f", "link")) { printf("FAIL: symlink\n"); return 1; }
    fd = inotify_init1(IN_NONBLOCK);
    if (fd < 0) { printf("FAIL: inotify_init1\n"); return 1; }
    wd_dir = inotify_add_watch(fd, "wdir", IN_CREATE | IN_DELETE);
    int gap = inotify_add_watch(fd, "gap", IN_ALL_EVENTS);
    inotify_rm_watch(fd, gap);
    wd_file = inotify_add_watch(fd, "wdir/f", IN_MODIFY);
    wd_link = inotify_add_watch(fd, "link", IN_ATTRIB | IN_DONT_FOLLOW);
    if (wd_dir != 1 || gap != 2 || wd_file != 3 || wd_link != 4) {
        printf("FAIL: watch numbers %d %d %d %d\n", wd_dir, gap, wd_file, wd_link);
        return 1;
    }
    /* The removal's IN_IGNORED. */
    int wi[] = { gap };
    unsigned mi[] = { IN_IGNORED };
    const char *ni[] = { "" };
    if (!expect(-1, wi, mi, ni, 1)) return 1;
    if (!strcmp(mode, "raw") && syscall(SYS_inotify_add_watch, fd, "gap", IN_CREATE) < 0) { printf("FAIL: raw add\n"); return 1; }
    int wfd = open("wdir/f", O_WRONLY | O_APPEND);
    for (int i = 0; i < n; i++) {
        if (!(fcntl(fd, F_GETFL) & O_NONBLOCK)) { printf("FAIL: step %d: O_NONBLOCK is gone\n", i); return 1; }
        char name[32];
        snprintf(name, sizeof name, "s%d", i);
        char path[64];
        snprintf(path, sizeof path, "wdir/%s", name);
        close(open(path, O_CREAT | O_WRONLY, 0644));
        unlink(path);
        if (write(wfd, "x", 1) != 1) { printf("FAIL: write\n"); return 1; }
        struct timespec t[2] = { { 0, UTIME_NOW }, { 0, UTIME_NOW } };
        if (utimensat(AT_FDCWD, "link", t, AT_SYMLINK_NOFOLLOW)) { printf("FAIL: utimensat\n"); return 1; }
        int queue = !strcmp(mode, "queue");
        /* In "queue" mode the previous step left the link's IN_ATTRIB unread: it comes first. */
        int w[] = { wd_link, wd_dir, wd_dir, wd_file, wd_link };
        unsigned m[] = { IN_ATTRIB, IN_CREATE, IN_DELETE, IN_MODIFY, IN_ATTRIB };
        const char *nm[] = { "", name, name, "", "" };
        int skip = queue && i > 0 ? 0 : 1;
        if (!expect(i, w + skip, m + skip, nm + skip, 5 - skip)) return 1;
        if (queue && utimensat(AT_FDCWD, "link", t, AT_SYMLINK_NOFOLLOW)) { printf("FAIL: utimensat\n"); return 1; }
        printf("step %d ok\n", i);
        struct timespec ts = { 0, ms * 1000000L };
        nanosleep(&ts, NULL);
    }
    printf("done\n");
    return 0;
}
