/* A job whose worker ends right after a checkpoint's cut (issue 17): the worker (forked,
 * holding MIB of pseudo-random data so that its part takes a while to write) ends as soon as
 * it runs and sees a checkpoint in progress (a `.tmp-ckpt-*` directory in the image
 * directory IMAGES), while its image writer still writes its part. The root prints one line
 * per step and at the end ends the worker if it still runs and reaps it (its status is not
 * printed: it differs between runs).
 *   job_quitter IMAGES MIB STEPS MS */
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void nap(long ms) {
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

static int checkpoint_in_progress(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *e;
    int found = 0;
    while ((e = readdir(d)) != NULL)
        if (strncmp(e->d_name, ".tmp-ckpt-", 10) == 0) found = 1;
    closedir(d);
    return found;
}

int main(int argc, char **argv) {
    if (argc < 5) { fprintf(stderr, "usage: job_quitter IMAGES MIB STEPS MS\n"); return 2; }
    const char *images = argv[1];
    size_t mib = strtoul(argv[2], NULL, 10);
    int n = atoi(argv[3]);
    long ms = atol(argv[4]);
    setvbuf(stdout, NULL, _IONBF, 0);
    pid_t parent = getpid();
    pid_t w = fork();
    if (w == 0) {
        unsigned long long x = 88172645463325252ull, *m = malloc(mib << 20);
        for (size_t i = 0; m && i < (mib << 20) / 8; i++) { x ^= x << 13; x ^= x >> 7; x ^= x << 17; m[i] = x; }
        for (;;) {
            if (checkpoint_in_progress(images) || getppid() != parent) _exit(0);
            nap(1);
        }
    }
    for (int i = 0; i < n; i++) {
        printf("root step %d\n", i);
        nap(ms);
    }
    kill(w, SIGKILL);
    int st;
    if (waitpid(w, &st, 0) != w) { printf("FAIL: the worker is not our child\n"); return 1; }
    printf("done\n");
    return 0;
}
