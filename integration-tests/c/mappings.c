/* Anonymous private and shared mappings, a private (copy-on-write) file mapping that is
 * written to, a read-only shared file mapping of a file opened read-write (which the
 * program can make writable at any time: checked at every step), and a PROT_NONE guard
 * page. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 40;
    long ms = argc > 2 ? atol(argv[2]) : 20;
    setvbuf(stdout, NULL, _IONBF, 0);
    size_t len = 1 << 20;
    unsigned char *anon = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    unsigned char *shanon = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    unsigned char *guard = mmap(NULL, 8192, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    int fd = open("mapped.dat", O_RDWR | O_CREAT | O_TRUNC, 0600);
    for (int i = 0; i < 65536; i++) { unsigned char b = (unsigned char)(i * 7); write(fd, &b, 1); }
    unsigned char *priv = mmap(NULL, 65536, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    unsigned char *shro = mmap(NULL, 65536, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (anon == MAP_FAILED || shanon == MAP_FAILED || priv == MAP_FAILED || shro == MAP_FAILED || guard == MAP_FAILED) {
        printf("mmap failed\n");
        return 1;
    }
    for (int i = 0; i < n; i++) {
        for (size_t j = (size_t)i * 4096; j < len; j += 8192) anon[j] += (unsigned char)(i + 1);
        shanon[(size_t)i * 997 % len] = (unsigned char)i;
        priv[(size_t)i * 1601 % 65536] ^= 0x5a;
        unsigned long s1 = 0, s2 = 0, s3 = 0, s4 = 0;
        for (size_t j = 0; j < len; j += 64) { s1 += anon[j]; s2 += shanon[j]; }
        for (size_t j = 0; j < 65536; j++) { s3 += priv[j] * (j & 15); s4 += shro[j]; }
        if (mprotect(shro, 65536, PROT_READ | PROT_WRITE) != 0) {
            printf("FAIL: the shared file mapping cannot be made writable: %s\n", strerror(errno));
            return 1;
        }
        mprotect(shro, 65536, PROT_READ);
        printf("step %d anon %lu shared %lu private-file %lu shared-file %lu\n", i, s1, s2, s3, s4);
        struct timespec ts = { 0, ms * 1000000L };
        nanosleep(&ts, NULL);
    }
    printf("done\n");
    return 0;
}
