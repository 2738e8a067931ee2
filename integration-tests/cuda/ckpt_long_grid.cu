// A long grid (seconds on the emulated device: 512 blocks of 64 threads, each looping ITERS
// times) running when GATE(1) comes: a checkpoint there stops it at a block boundary (policy
// block, the default; the blocks not started are saved and run after a restart) or waits
// for it (CRUM_CKPT_KERNEL=drain). Then a second grid that reads the first's output, and the
// result checked against the CPU. Usage: ckpt_long_grid [ITERS=4000]
#include "common.h"
#include <unistd.h>
#define BLOCKS 512
#define THREADS 64
__global__ void grind(unsigned *x, int iters, volatile unsigned *started) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (threadIdx.x == 0) *started = 1;  // tells the host the grid runs
    unsigned v = (unsigned)i * 2654435761u;
    for (int t = 0; t < iters; t++) v = v * 1664525u + 1013904223u + (v >> 13);
    x[i] = v;
}
__global__ void fold(unsigned *x, unsigned *sum) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    atomicAdd(sum, x[i] >> 8);
}
int main(int argc, char **argv) {
    const int iters = argc > 1 ? atoi(argv[1]) : 4000, n = BLOCKS * THREADS;
    unsigned *d, *sum, *h = (unsigned *)malloc(n * 4), hs = 0;
    CK(cudaMalloc(&d, n * 4));
    CK(cudaMalloc(&sum, 4));
    CK(cudaMemset(sum, 0, 4));
    unsigned *started, *dstarted;
    CK(cudaHostAlloc(&started, 4, cudaHostAllocMapped));
    *started = 0;
    CK(cudaHostGetDevicePointer(&dstarted, started, 0));
    grind<<<BLOCKS, THREADS>>>(d, iters, dstarted);
    while (!*(volatile unsigned *)started) usleep(100);
    GATE(1);  // the grid runs: a checkpoint here finds it in flight
    fold<<<BLOCKS, THREADS>>>(d, sum);
    CK(cudaMemcpy(h, d, n * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(&hs, sum, 4, cudaMemcpyDeviceToHost));
    unsigned want = 0;
    for (int i = 0; i < n; i++) {
        unsigned v = (unsigned)i * 2654435761u;
        for (int t = 0; t < iters; t++) v = v * 1664525u + 1013904223u + (v >> 13);
        EXPECT(h[i] == v);
        want += v >> 8;
    }
    EXPECT(hs == want);
    printf("blocks %d sum %08x\n", BLOCKS, hs);
    GATE(2);
    GATE(3);
    printf("PASS\n");
    return 0;
}
