// System calls that write into managed memory but are not among the C library I/O calls crum
// wraps (getrandom, fstat, pipe, getcwd, and read through syscall(2)), right after a kernel
// wrote the pages (protected shadow pages). userfaultfd resolves the kernel's own accesses;
// page protection cannot (the kernel answers EFAULT).
#include "common.h"
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

__global__ void fill(unsigned char *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = 0xEE;
}
static void protect(unsigned char *m, int n) {
    fill<<<(n + 255) / 256, 256>>>(m, n);
    CK(cudaDeviceSynchronize());
}

int main() {
    const int n = 64 * 4096;
    unsigned char *m;
    CK(cudaMallocManaged(&m, n));

    protect(m, n);
    EXPECT(getrandom(m + 4096 + 7, 64, 0) == 64);
    CK(cudaDeviceSynchronize());
    EXPECT(m[4096 + 6] == 0xEE && m[4096 + 7 + 64] == 0xEE);

    protect(m, n);
    struct stat *st = (struct stat *)(m + 3 * 4096);
    EXPECT(fstat(0, st) == 0);
    struct stat host;
    EXPECT(fstat(0, &host) == 0);
    CK(cudaDeviceSynchronize());
    EXPECT(st->st_ino == host.st_ino && st->st_mode == host.st_mode);

    protect(m, n);
    int *mfds = (int *)(m + 5 * 4096 + 8), fds[2];
    EXPECT(pipe(mfds) == 0);
    CK(cudaDeviceSynchronize());
    memcpy(fds, mfds, sizeof fds);  // the kernels below overwrite managed memory
    EXPECT(write(fds[1], "abc", 3) == 3);
    char b[3];
    EXPECT(read(fds[0], b, 3) == 3 && memcmp(b, "abc", 3) == 0);

    protect(m, n);
    char *cwd = (char *)m + 7 * 4096 + 100;
    EXPECT(getcwd(cwd, 4096) != nullptr);
    char hc[4096];
    EXPECT(getcwd(hc, sizeof hc) != nullptr);
    CK(cudaDeviceSynchronize());
    EXPECT(strcmp(cwd, hc) == 0);

    protect(m, n);
    EXPECT(lseek(fds[0], 0, SEEK_CUR) == -1);  // a pipe: read through syscall(2) below
    EXPECT(write(fds[1], "0123456789", 10) == 10);
    EXPECT(syscall(SYS_read, fds[0], m + 20 * 4096 + 1, 10) == 10);
    CK(cudaDeviceSynchronize());
    EXPECT(memcmp(m + 20 * 4096 + 1, "0123456789", 10) == 0 && m[20 * 4096] == 0xEE);

    CK(cudaFree(m));
    printf("PASS\n");
    return 0;
}
