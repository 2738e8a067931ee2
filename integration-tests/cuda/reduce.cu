// Sum of 1<<16 ints two ways: warp shuffles (__shfl_down_sync) with one atomicAdd per warp,
// and a plain atomicAdd per element; both checked against the CPU.
#include "common.h"
__global__ void shfl_sum(const int *x, int n, unsigned long long *out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int v = i < n ? x[i] : 0;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    if ((threadIdx.x & 31) == 0) atomicAdd(out, (unsigned long long)v);
}
__global__ void atomic_max(const int *x, int n, int *m) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicMax(m, x[i]);
}
int main() {
    const int n = 1 << 16;
    int *h = (int *)malloc(n * 4);
    unsigned long long want = 0; int wmax = 0;
    for (int i = 0; i < n; i++) { h[i] = (i * 2654435761u) % 1000; want += h[i]; if (h[i] > wmax) wmax = h[i]; }
    int *d, *dm; unsigned long long *ds;
    CK(cudaMalloc(&d, n * 4)); CK(cudaMalloc(&ds, 8)); CK(cudaMalloc(&dm, 4));
    CK(cudaMemcpy(d, h, n * 4, cudaMemcpyHostToDevice));
    CK(cudaMemset(ds, 0, 8)); CK(cudaMemset(dm, 0, 4));
    GATE(1);
    shfl_sum<<<n / 256, 256>>>(d, n, ds);
    GATE(2);
    atomic_max<<<n / 256, 256>>>(d, n, dm);
    GATE(3);
    CK(cudaGetLastError());
    unsigned long long got; int gmax;
    CK(cudaMemcpy(&got, ds, 8, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(&gmax, dm, 4, cudaMemcpyDeviceToHost));
    printf("sum %llu max %d\n", got, gmax);
    EXPECT(got == want); EXPECT(gmax == wmax);
    printf("PASS\n");
    return 0;
}
