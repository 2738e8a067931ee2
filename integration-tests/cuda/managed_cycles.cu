// CPU-write -> kernel -> CPU-read cycles on several managed allocations of different sizes:
// one page, odd sizes (1 byte, a page plus one, 100003 bytes), and 64 MiB. Every cycle a
// kernel updates every byte of the small allocations and a strided subset of the large one;
// the CPU then writes single bytes into pages the kernel just wrote (partial-page writes: the
// kernel's other bytes in those pages must survive) and, every other cycle, first checks every
// byte it can see against its CPU reference.
//
// The program reads before it writes between two CUDA calls (CRUM's assumption, §III-B): in
// each phase all reads come before any write, so `crum run --managed verify` must not report
// it. Usage: managed_cycles [CYCLES=12]
#include "common.h"
#include <cstring>

// x[i*stride] = x[i*stride] * 5 + r + (i & 7) for i < n / stride (bytes, wrapping).
__global__ void mix(unsigned char *x, size_t n, size_t stride, int r) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i * stride < n) {
        unsigned char v = x[i * stride];
        x[i * stride] = (unsigned char)(v * 5 + r + (i & 7));
    }
}
static void mix_cpu(unsigned char *x, size_t n, size_t stride, int r) {
    for (size_t i = 0; i * stride < n; i++)
        x[i * stride] = (unsigned char)(x[i * stride] * 5 + r + (i & 7));
}

struct Buf {
    size_t n, stride;
    unsigned char *m, *ref;
};

int main(int argc, char **argv) {
    int cycles = argc > 1 ? atoi(argv[1]) : 12;
    const size_t page = 4096;
    // The 64 MiB array: the kernel touches every 1021st byte (odd stride: every page, at
    // moving offsets), the CPU checks those bytes and a few neighbours.
    Buf b[] = {{page, 1}, {1, 1}, {page + 1, 1}, {100003, 1}, {(size_t)64 << 20, 1021}};
    const int nb = sizeof b / sizeof b[0];
    for (int k = 0; k < nb; k++) {
        CK(cudaMallocManaged(&b[k].m, b[k].n));
        b[k].ref = (unsigned char *)malloc(b[k].n);
        // Fresh managed memory is written before it is ever read (no read before a write).
        for (size_t i = 0; i < b[k].n; i++) b[k].m[i] = b[k].ref[i] = (unsigned char)(i * 31 + k);
    }
    unsigned long long sum = 0;
    for (int r = 0; r < cycles; r++) {
        for (int k = 0; k < nb; k++) {
            size_t threads = (b[k].n + b[k].stride - 1) / b[k].stride;
            mix<<<(unsigned)((threads + 255) / 256), 256>>>(b[k].m, b[k].n, b[k].stride, r);
            mix_cpu(b[k].ref, b[k].n, b[k].stride, r);
        }
        CK(cudaGetLastError());
        CK(cudaDeviceSynchronize());
        if (r % 2 == 1) {
            // Read everything first (the large array: the kernel's bytes and their neighbours).
            for (int k = 0; k < nb; k++) {
                if (b[k].stride == 1) {
                    for (size_t i = 0; i < b[k].n; i++) EXPECT(b[k].m[i] == b[k].ref[i]);
                } else {
                    for (size_t i = 0; i < b[k].n; i += b[k].stride) {
                        EXPECT(b[k].m[i] == b[k].ref[i]);
                        if (i + 1 < b[k].n) EXPECT(b[k].m[i + 1] == b[k].ref[i + 1]);
                    }
                }
            }
        }
        // Then write single bytes into pages the kernel wrote (never read back in this phase):
        // the first, the last and a middle byte of each allocation, at offsets that move.
        for (int k = 0; k < nb; k++) {
            size_t n = b[k].n;
            size_t at[3] = {(size_t)r % n, n - 1 - ((size_t)r * 7) % n, (n / 2 + (size_t)r * 4099) % n};
            for (int j = 0; j < 3; j++) {
                unsigned char v = (unsigned char)(0xA0 + r * 3 + j + k);
                b[k].m[at[j]] = v;
                b[k].ref[at[j]] = v;
            }
        }
    }
    // One more kernel, then check every byte of every allocation.
    for (int k = 0; k < nb; k++) {
        size_t threads = (b[k].n + b[k].stride - 1) / b[k].stride;
        mix<<<(unsigned)((threads + 255) / 256), 256>>>(b[k].m, b[k].n, b[k].stride, cycles);
        mix_cpu(b[k].ref, b[k].n, b[k].stride, cycles);
    }
    CK(cudaDeviceSynchronize());
    for (int k = 0; k < nb; k++) {
        EXPECT(memcmp(b[k].m, b[k].ref, b[k].n) == 0);
        unsigned long long s = 0;
        for (size_t i = 0; i < b[k].n; i++) s += b[k].ref[i] * (unsigned long long)(i % 13 + 1);
        printf("alloc %d bytes %zu sum %llu\n", k, b[k].n, s);
        sum += s;
    }
    for (int k = 0; k < nb; k++) CK(cudaFree(b[k].m));
    printf("cycles %d total %llu\n", cycles, sum);
    printf("PASS\n");
    return 0;
}
