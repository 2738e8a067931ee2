/* The program's last thread ends with a raw exit system call (SYS_exit, not exit_group), as
 * CRIU's zdtm seccomp_strict does under SECCOMP_MODE_STRICT: the process ends when its last
 * thread does, with the main thread's code as its status, and crum's own threads must not
 * keep it alive.
 *   raw_exit main CODE      the main thread, alone, ends with syscall(SYS_exit, CODE)
 *   raw_exit threads CODE   the main thread ends so first; a second thread, later, with 7 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static void *late(void *arg) {
    (void)arg;
    struct timespec ts = { 0, 200 * 1000000L };
    nanosleep(&ts, NULL);
    syscall(SYS_exit, 7);
    return NULL;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "main";
    int code = argc > 2 ? atoi(argv[2]) : 3;
    printf("%s %d\n", mode, code);
    fflush(stdout);
    if (!strcmp(mode, "threads")) {
        pthread_t t;
        pthread_create(&t, NULL, late, NULL);
    }
    syscall(SYS_exit, code);
    return 99;
}
