/* A single-threaded program can enter a new user namespace under crum: the kernel allows
 * unshare(CLONE_NEWUSER) only in a single-threaded process, and crum ends its own threads
 * around the call (libcrum_libc.so). Afterwards crum's threads run again: the program waits
 * until its task list shows them ("crum-control") with a deadline. Prints PASS or FAIL. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int has_thread(const char *want) {
    DIR *d = opendir("/proc/self/task");
    if (!d) return 0;
    struct dirent *e;
    int found = 0;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char p[300], name[32] = "";
        snprintf(p, sizeof p, "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen(p, "r");
        if (!f) continue;
        if (fgets(name, sizeof name, f) && strncmp(name, want, strlen(want)) == 0) found = 1;
        fclose(f);
    }
    closedir(d);
    return found;
}

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    uid_t before = getuid();
    if (unshare(CLONE_NEWUSER) != 0) {
        printf("FAIL unshare(CLONE_NEWUSER): %s\n", strerror(errno));
        return 1;
    }
    /* No uid map written: this process is the overflow user in its new namespace. */
    if (getuid() == before && before != 65534) {
        printf("FAIL still uid %u after unshare\n", (unsigned)before);
        return 1;
    }
    time_t t0 = time(NULL);
    while (!has_thread("crum-control")) {
        if (time(NULL) - t0 > 60) {
            printf("FAIL crum's threads did not come back\n");
            return 1;
        }
        struct timespec ts = { 0, 2000000L };
        nanosleep(&ts, NULL);
    }
    printf("PASS\n");
    return 0;
}
