// A shared library built with nvcc's defaults (the static CUDA runtime inside it), as a
// library or Python extension would be: one function that runs a kernel and checks it.
#include <cstdio>
__global__ void sq(int *x, int n, int k) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = i * i + k;
}
extern "C" int run_round(int k) {
    const int n = 5000;
    int *d;
    static int h[n];
    cudaError_t e = cudaMalloc(&d, n * 4);
    if (e != cudaSuccess) { printf("cudaMalloc: %s\n", cudaGetErrorName(e)); return 1; }
    sq<<<(n + 255) / 256, 256>>>(d, n, k);
    e = cudaMemcpy(h, d, n * 4, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) { printf("cudaMemcpy: %s\n", cudaGetErrorName(e)); return 1; }
    for (int i = 0; i < n; i++) if (h[i] != i * i + k) { printf("h[%d] = %d\n", i, h[i]); return 1; }
    return cudaFree(d) != cudaSuccess;
}
