// Warp sums with the loop bound written as `warpSize / 2`, which nvcc compiles to the PTX
// constant WARP_SZ; also a per-warp count written with warpSize. Checked against the CPU.
#include "common.h"
__global__ void warp_sums(const int *x, int n, int *sums, int *lanes) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int v = i < n ? x[i] : 0;
    for (int o = warpSize / 2; o > 0; o /= 2) v += __shfl_down_sync(0xffffffffu, v, o);
    int warp = i / warpSize;
    if (threadIdx.x % warpSize == 0) {
        sums[warp] = v;
        lanes[warp] = warpSize;
    }
}
int main() {
    const int n = 1 << 14, warps = n / 32;
    int *h = (int *)malloc(n * 4), *hs = (int *)malloc(warps * 4), *hl = (int *)malloc(warps * 4);
    for (int i = 0; i < n; i++) h[i] = (i * 2654435761u) % 1000;
    int *d, *ds, *dl;
    CK(cudaMalloc(&d, n * 4)); CK(cudaMalloc(&ds, warps * 4)); CK(cudaMalloc(&dl, warps * 4));
    CK(cudaMemcpy(d, h, n * 4, cudaMemcpyHostToDevice));
    warp_sums<<<n / 128, 128>>>(d, n, ds, dl);
    CK(cudaGetLastError());
    CK(cudaMemcpy(hs, ds, warps * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hl, dl, warps * 4, cudaMemcpyDeviceToHost));
    long long total = 0;
    for (int w = 0; w < warps; w++) {
        int want = 0;
        for (int k = 0; k < 32; k++) want += h[w * 32 + k];
        EXPECT(hs[w] == want);
        EXPECT(hl[w] == 32);
        total += hs[w];
    }
    printf("%d warps, total %lld\n", warps, total);
    printf("PASS\n");
    return 0;
}
