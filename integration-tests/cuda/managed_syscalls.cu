// System calls and stdio straight into and out of managed memory right after a kernel wrote
// it (with shadow pages those pages are protected, and the kernel answers EFAULT instead of
// faulting): write, pwrite, writev, pwritev, send, sendto, sendmsg and fwrite out of it; read,
// pread, readv, preadv, recv, recvfrom, recvmsg and fread into it at odd offsets that share
// pages with the kernel's data (which must survive); 1 MiB and larger buffers for stdio
// (bypassing its buffer). Every byte is checked against a CPU reference, after a CUDA call so
// the program never reads what it wrote since the last one.
#include "common.h"
#include <cstring>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

// x[i] = pattern(i, r) for i < n.
__device__ __host__ inline unsigned char pat(size_t i, int r) { return (unsigned char)(i * 13 + (i >> 9) + r * 29); }
// Each thread handles 64 bytes (the emulated device interprets PTX: fewer threads, faster).
__global__ void fill(unsigned char *x, size_t n, int r) {
    size_t i0 = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * 64;
    for (size_t i = i0; i < i0 + 64 && i < n; i++) x[i] = pat(i, r);
}
__global__ void add(unsigned char *x, size_t n, int k) {
    size_t i0 = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * 64;
    for (size_t i = i0; i < i0 + 64 && i < n; i++) x[i] = (unsigned char)(x[i] + k);
}
static unsigned blocks(size_t n) { return (unsigned)((n + 64 * 256 - 1) / (64 * 256)); }

static const size_t N = (size_t)3 << 20;  // 3 MiB managed buffer
static unsigned char *m, *ref, *src;
static int round_no;

static void kernel_fill() {
    round_no++;
    fill<<<blocks(N), 256>>>(m, N, round_no);
    CK(cudaDeviceSynchronize());
    for (size_t i = 0; i < N; i++) ref[i] = pat(i, round_no);
}
// After data went into m[off, off+len) from src: a kernel adds 1 to everything, then the CPU
// checks every byte (the kernel's bytes around the range too).
static void check_in(const char *what, size_t off, size_t len) {
    memcpy(ref + off, src, len);
    add<<<blocks(N), 256>>>(m, N, 1);
    CK(cudaDeviceSynchronize());
    for (size_t i = 0; i < N; i++)
        if (m[i] != (unsigned char)(ref[i] + 1)) {
            printf("FAIL %s: byte %zu is %d, want %d\n", what, i, m[i], (unsigned char)(ref[i] + 1));
            exit(1);
        }
    unsigned s = 0;
    for (size_t i = 0; i < len; i++) s = s * 31 + m[off + i];
    printf("%s in %zu@%zu hash %u\n", what, len, off, s);
}
// After m[off, off+len) went out into `got`: it must be the kernel's bytes.
static void check_out(const char *what, const unsigned char *got, size_t off, size_t len) {
    for (size_t i = 0; i < len; i++)
        if (got[i] != ref[off + i]) {
            printf("FAIL %s: byte %zu is %d, want %d\n", what, off + i, got[i], ref[off + i]);
            exit(1);
        }
    unsigned s = 0;
    for (size_t i = 0; i < len; i++) s = s * 31 + got[i];
    printf("%s out %zu@%zu hash %u\n", what, len, off, s);
}
static int tmpfile_fd(char *path) {
    const char *dir = getenv("TMPDIR");
    snprintf(path, 4096, "%s/crum-msys-XXXXXX", dir ? dir : "/tmp");
    int fd = mkstemp(path);
    EXPECT(fd >= 0);
    unlink(path);
    return fd;
}
static void fill_file(int fd, size_t len, int seed) {
    for (size_t i = 0; i < len; i++) src[i] = (unsigned char)(i * 7 + seed + (i >> 12));
    EXPECT(pwrite(fd, src, len, 0) == (ssize_t)len);
    EXPECT(lseek(fd, 0, SEEK_SET) == 0);
}
static ssize_t read_all(int fd, unsigned char *p, size_t len) {
    size_t got = 0;
    while (got < len) {
        ssize_t k = read(fd, p + got, len - got);
        if (k <= 0) return k < 0 ? k : (ssize_t)got;
        got += k;
    }
    return (ssize_t)got;
}

int main() {
    char path[4096];
    CK(cudaMallocManaged(&m, N));
    ref = (unsigned char *)malloc(N);
    src = (unsigned char *)malloc(N);
    unsigned char *got = (unsigned char *)malloc(N);
    int fd = tmpfile_fd(path);

    // read(2): 2 MiB + 3 bytes at an odd offset.
    kernel_fill();
    fill_file(fd, (2 << 20) + 3, 1);
    EXPECT(read_all(fd, m + 4097 * 3 + 5, (2 << 20) + 3) == (2 << 20) + 3);
    check_in("read", 4097 * 3 + 5, (2 << 20) + 3);

    // write(2): 1 MiB + 17 bytes from an odd offset, then read back from the file.
    kernel_fill();
    EXPECT(ftruncate(fd, 0) == 0 && lseek(fd, 0, SEEK_SET) == 0);
    EXPECT(write(fd, m + 12345, (1 << 20) + 17) == (1 << 20) + 17);
    EXPECT(pread(fd, got, (1 << 20) + 17, 0) == (1 << 20) + 17);
    check_out("write", got, 12345, (1 << 20) + 17);

    // pread(2) of 100 bytes into the middle of one page, and 300000 bytes across many.
    kernel_fill();
    fill_file(fd, 400000, 2);
    EXPECT(pread(fd, m + 8192 + 1000, 100, 0) == 100);
    check_in("pread", 8192 + 1000, 100);
    kernel_fill();
    EXPECT(pread(fd, m + 77777, 300000, 0) == 300000);
    check_in("pread", 77777, 300000);

    // pwrite(2): 5000 bytes across a page boundary.
    kernel_fill();
    EXPECT(ftruncate(fd, 0) == 0 && lseek(fd, 0, SEEK_SET) == 0);
    EXPECT(pwrite(fd, m + 4096 * 9 - 2000, 5000, 0) == 5000);
    EXPECT(pread(fd, got, 5000, 0) == 5000);
    check_out("pwrite", got, 4096 * 9 - 2000, 5000);

    // readv(2) into three pieces of managed memory (and one of malloc'd memory).
    kernel_fill();
    fill_file(fd, 70000, 3);
    {
        unsigned char host[1000];
        struct iovec iv[4] = {{m + 10, 3000}, {host, 1000}, {m + 50001, 20000}, {m + N - 46000, 46000}};
        EXPECT(readv(fd, iv, 4) == 70000);
        for (int i = 0; i < 1000; i++) EXPECT(host[i] == src[3000 + i]);
        // Check the three managed pieces: data in place, kernel's bytes elsewhere.
        memcpy(ref + 10, src, 3000);
        memcpy(ref + 50001, src + 4000, 20000);
        memmove(src, src + 24000, 46000);
        check_in("readv", N - 46000, 46000);
    }

    // writev(2) from two managed pieces.
    kernel_fill();
    EXPECT(ftruncate(fd, 0) == 0 && lseek(fd, 0, SEEK_SET) == 0);
    {
        struct iovec iv[2] = {{m + 4096 * 100 + 7, 9000}, {m + 1000000, 4096}};
        EXPECT(writev(fd, iv, 2) == 13096);
        EXPECT(pread(fd, got, 13096, 0) == 13096);
        check_out("writev", got, 4096 * 100 + 7, 9000);
        check_out("writev", got + 9000, 1000000, 4096);
    }
    // preadv(2) into two managed pieces at a file offset, pwritev(2) out of two.
    kernel_fill();
    fill_file(fd, 50000, 4);
    {
        struct iovec iv[2] = {{m + 123, 7000}, {m + 2000000 + 1, 33000}};
        EXPECT(preadv(fd, iv, 2, 10000) == 40000);
        memcpy(ref + 123, src + 10000, 7000);
        memmove(src, src + 17000, 33000);
        check_in("preadv", 2000000 + 1, 33000);
    }
    kernel_fill();
    EXPECT(ftruncate(fd, 0) == 0 && lseek(fd, 0, SEEK_SET) == 0);
    {
        struct iovec iv[2] = {{m + 4096 * 50 - 1, 2}, {m + 4096 * 60 + 9, 12000}};
        EXPECT(pwritev(fd, iv, 2, 100) == 12002);
        EXPECT(pread(fd, got, 12002, 100) == 12002);
        check_out("pwritev", got, 4096 * 50 - 1, 2);
        check_out("pwritev", got + 2, 4096 * 60 + 9, 12000);
    }
    close(fd);

    // sendto(2)/recvfrom(2) and sendmsg(2)/recvmsg(2) over a datagram socketpair.
    {
        int dv[2];
        EXPECT(socketpair(AF_UNIX, SOCK_DGRAM, 0, dv) == 0);
        kernel_fill();
        EXPECT(sendto(dv[0], m + 4095, 30000, 0, nullptr, 0) == 30000);
        EXPECT(recvfrom(dv[1], got, 30000, 0, nullptr, nullptr) == 30000);
        check_out("sendto", got, 4095, 30000);
        kernel_fill();
        for (int i = 0; i < 30000; i++) src[i] = (unsigned char)(i * 3 + 2);
        EXPECT(send(dv[0], src, 30000, 0) == 30000);
        EXPECT(recvfrom(dv[1], m + 300001, 30000, 0, nullptr, nullptr) == 30000);
        check_in("recvfrom", 300001, 30000);
        kernel_fill();
        {
            struct iovec iv[2] = {{m + 40000 + 3, 5000}, {m + 90000, 6000}};
            struct msghdr mh = {};
            mh.msg_iov = iv;
            mh.msg_iovlen = 2;
            EXPECT(sendmsg(dv[0], &mh, 0) == 11000);
            EXPECT(recv(dv[1], got, 11000, 0) == 11000);
            check_out("sendmsg", got, 40000 + 3, 5000);
            check_out("sendmsg", got + 5000, 90000, 6000);
        }
        kernel_fill();
        for (int i = 0; i < 11000; i++) src[i] = (unsigned char)(i * 9 + 4);
        EXPECT(send(dv[0], src, 11000, 0) == 11000);
        {
            struct iovec iv[2] = {{m + 600000 + 5, 4000}, {m + 700000, 7000}};
            struct msghdr mh = {};
            mh.msg_iov = iv;
            mh.msg_iovlen = 2;
            EXPECT(recvmsg(dv[1], &mh, 0) == 11000);
            memcpy(ref + 600000 + 5, src, 4000);
            memmove(src, src + 4000, 7000);
            check_in("recvmsg", 700000, 7000);
        }
        close(dv[0]);
        close(dv[1]);
    }

    // send(2) from and recv(2) into managed memory over a socketpair.
    int sv[2];
    EXPECT(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    kernel_fill();
    EXPECT(send(sv[0], m + 333, 60000, 0) == 60000);
    EXPECT(recv(sv[1], got, 60000, MSG_WAITALL) == 60000);
    check_out("send", got, 333, 60000);
    kernel_fill();
    for (int i = 0; i < 60000; i++) src[i] = (unsigned char)(i * 5 + 1);
    EXPECT(send(sv[0], src, 60000, 0) == 60000);
    EXPECT(recv(sv[1], m + 200000 + 3, 60000, MSG_WAITALL) == 60000);
    check_in("recv", 200000 + 3, 60000);
    close(sv[0]);
    close(sv[1]);

    // fwrite(3) and fread(3) of 1.5 MiB (larger than stdio's buffer: straight to the kernel).
    const size_t big = (3 << 20) / 2 + 11;
    FILE *f = tmpfile();
    EXPECT(f != nullptr);
    kernel_fill();
    EXPECT(fwrite(m + 4099, 1, big, f) == big);
    EXPECT(fflush(f) == 0);
    EXPECT(pread(fileno(f), got, big, 0) == (ssize_t)big);
    check_out("fwrite", got, 4099, big);
    kernel_fill();
    for (size_t i = 0; i < big; i++) src[i] = (unsigned char)(i * 11 + 3);
    EXPECT(pwrite(fileno(f), src, big, 0) == (ssize_t)big);
    rewind(f);
    EXPECT(fread(m + 8190, 1, big, f) == big);
    check_in("fread", 8190, big);
    fclose(f);

    CK(cudaFree(m));
    printf("PASS\n");
    return 0;
}
