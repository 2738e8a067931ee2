// Checkpoint benchmark program (scripts/bench-cuda-ckpt.sh): allocates MIB MiB of device memory
// (in 256 MiB allocations) and MIB/8 MiB of managed memory, fills them with incompressible
// pseudo-random data (device memory through cudaMemcpy from a host buffer: a CPU-emulated
// device would take minutes to fill it from kernels), prints "ready", then loops a small kernel
// over the first MiB until killed, printing a heartbeat line at every iteration with the
// wall-clock time in microseconds (the benchmark reads the loop's gaps while an image is written).
// Usage: bench_footprint MIB [MANAGED_MIB]   (managed memory: MIB/8 by default)
#include "common.h"
#include <stdint.h>
#include <vector>
#include <time.h>
static unsigned long long now_us() {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (unsigned long long)t.tv_sec * 1000000ull + t.tv_nsec / 1000;
}
__global__ void touch(uint32_t *x, int n, uint32_t k) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = x[i] * 2654435761u + k;
}
static void fill(uint64_t *p, size_t words, uint64_t seed) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < words; i++) {  // xorshift64*
        s ^= s >> 12; s ^= s << 25; s ^= s >> 27;
        p[i] = s * 0x2545F4914F6CDD1Dull;
    }
}
int main(int argc, char **argv) {
    const size_t mib = argc > 1 ? (size_t)atol(argv[1]) : 64, chunk = (size_t)256 << 20;
    size_t dev = mib << 20, man = argc > 2 ? (size_t)atol(argv[2]) << 20 : dev / 8;
    if (man < 4096) man = 4096;
    std::vector<char *> bufs;
    const size_t stage_len = (size_t)64 << 20;
    uint64_t *stage = (uint64_t *)malloc(stage_len);
    for (size_t off = 0; off < dev; off += chunk) {
        size_t len = dev - off < chunk ? dev - off : chunk;
        char *d;
        CK(cudaMalloc(&d, len));
        bufs.push_back(d);
        for (size_t o = 0; o < len; o += stage_len) {
            size_t l = len - o < stage_len ? len - o : stage_len;
            fill(stage, l / 8, off + o);
            CK(cudaMemcpy(d + o, stage, l, cudaMemcpyHostToDevice));
        }
    }
    free(stage);
    uint64_t *m;
    CK(cudaMallocManaged(&m, man));
    fill(m, man / 8, 12345);
    CK(cudaDeviceSynchronize());
    printf("ready device %zu MiB managed %zu MiB\n", dev >> 20, man >> 20);
    fflush(stdout);
    const int n = 1 << 18;  // 1 MiB
    for (uint32_t k = 0;; k++) {
        touch<<<n / 256, 256>>>((uint32_t *)bufs[0], n, k);
        CK(cudaDeviceSynchronize());
        m[k % (man / 8)] += 1;  // the CPU touches managed memory between kernels
        printf("hb %u %llu\n", k, now_us());  // restart: first heartbeat
        fflush(stdout);
    }
}
