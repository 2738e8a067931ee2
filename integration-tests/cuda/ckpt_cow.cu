// Device memory saved from the proxy's copy-on-write snapshot (issue 15): the test holds the
// image writer before it writes the device data (CRUM_TEST_STOP_WRITER) and lets the program
// change every byte of its device memory, by kernel, memset and copy, before the writer goes
// on. A restart from that image must see device memory as it was at the cut: the program
// checks it right after gate 1, in every run.
#include "common.h"
#include <vector>

static unsigned pattern(size_t i, unsigned seed) { return (unsigned)(i * 2654435761u) ^ seed; }

__global__ void fill(unsigned *p, size_t n, unsigned seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = (unsigned)(i * 2654435761u) ^ seed;
}

static void expect_pattern(const unsigned *d, size_t n, unsigned seed, const char *when) {
    std::vector<unsigned> h(n);
    CK(cudaMemcpy(h.data(), d, n * sizeof(unsigned), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++)
        if (h[i] != pattern(i, seed)) {
            printf("FAIL %s: element %zu is %08x, want %08x (seed %u)\n", when, i, h[i], pattern(i, seed), seed);
            exit(1);
        }
}

int main() {
    const size_t n = 3 << 20;  // 12 MiB: several image chunks
    unsigned *a, *b;
    CK(cudaMalloc(&a, n * sizeof(unsigned)));
    CK(cudaMalloc(&b, n * sizeof(unsigned)));
    fill<<<256, 256>>>(a, n, 1);
    CK(cudaMemset(b, 0x5a, n * sizeof(unsigned)));
    CK(cudaDeviceSynchronize());
    printf("before the cut\n");
    fflush(stdout);
    GATE(1);
    // What the image must hold, whatever happened to device memory while it was written.
    expect_pattern(a, n, 1, "after gate 1");
    std::vector<unsigned> h(n, 0x5a5a5a5au), got(n);
    CK(cudaMemcpy(got.data(), b, n * sizeof(unsigned), cudaMemcpyDeviceToHost));
    EXPECT(got == h);
    printf("device memory as at the cut\n");
    // Change every byte of both buffers.
    fill<<<256, 256>>>(a, n, 2);
    CK(cudaMemset(a, 0x11, 4096));
    for (size_t i = 0; i < n; i++) h[i] = pattern(i, 3);
    CK(cudaMemcpy(b, h.data(), n * sizeof(unsigned), cudaMemcpyHostToDevice));
    CK(cudaDeviceSynchronize());
    printf("device memory changed\n");
    fflush(stdout);
    GATE(2);
    CK(cudaMemcpy(got.data(), a, 4096, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < 1024; i++) EXPECT(got[i] == 0x11111111u);
    expect_pattern(b, n, 3, "after gate 2");
    CK(cudaFree(a));
    CK(cudaFree(b));
    printf("PASS\n");
    return 0;
}
