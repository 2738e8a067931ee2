// Managed memory: cudaMallocManaged arrays and a __managed__ variable through several
// CPU-write -> kernel -> CPU-read cycles.
#include "common.h"
__managed__ int rounds_done;
__global__ void step(int *x, int n, int r) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = x[i] * 3 + r;
    if (i == 0) rounds_done += 1;
}
int main() {
    const int n = 1 << 14;
    int *x, *ref = (int *)malloc(n * 4);
    CK(cudaMallocManaged(&x, n * 4));
    rounds_done = 0;
    for (int i = 0; i < n; i++) { x[i] = i % 17; ref[i] = i % 17; }
    for (int r = 0; r < 5; r++) {
        x[r * 100] += 1; ref[r * 100] += 1;  // CPU write between kernels
        step<<<n / 256, 256>>>(x, n, r);
        if (r >= 1 && r <= 3) GATE(r);
        CK(cudaGetLastError());
        CK(cudaDeviceSynchronize());
        for (int i = 0; i < n; i++) ref[i] = ref[i] * 3 + r;
        for (int i = 0; i < n; i++) EXPECT(x[i] == ref[i]);
    }
    EXPECT(rounds_done == 5);
    long long s = 0;
    for (int i = 0; i < n; i++) s += x[i];
    printf("rounds %d sum %lld\n", rounds_done, s);
    CK(cudaFree(x));
    printf("PASS\n");
    return 0;
}
