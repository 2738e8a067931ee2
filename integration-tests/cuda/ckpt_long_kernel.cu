// One long kernel (seconds on the emulated device) while the main thread waits for it in
// cudaDeviceSynchronize: a checkpoint requested meanwhile waits for the call in flight, then
// the program (and a restart of its image) finishes with the CPU-checked result.
// Usage: ckpt_long_kernel [ITERS=1500000]
#include "common.h"
__global__ void spin(unsigned *x, int iters) {
    unsigned v = threadIdx.x;
    for (int i = 0; i < iters; i++) v = v * 1103515245u + 12345u + (v >> 7);
    x[threadIdx.x] = v;
}
int main(int argc, char **argv) {
    const int iters = argc > 1 ? atoi(argv[1]) : 1500000, n = 64;
    unsigned *d, h[n];
    CK(cudaMalloc(&d, sizeof h));
    spin<<<1, n>>>(d, iters);
    GATE(1);  // the test lets it go on into cudaDeviceSynchronize, then checkpoints
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
    GATE(2);  // still running when the test has its image
    for (int t = 0; t < n; t++) {
        unsigned v = t;
        for (int i = 0; i < iters; i++) v = v * 1103515245u + 12345u + (v >> 7);
        EXPECT(h[t] == v);
    }
    printf("iters %d x[63]=%u\n", iters, h[n - 1]);
    printf("PASS\n");
    return 0;
}
