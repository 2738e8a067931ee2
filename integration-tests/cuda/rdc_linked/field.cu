// Separate compilation (-rdc=true), file 1 of 2: defines the device function, the
// `__device__` and `__constant__` variables that main.cu uses through `extern`, and a kernel
// of its own launched from this file's host code. `s_bias` and the printf format string
// exist in both files under the same PTX names (`$str`, and nvcc's math tables behind sinf).
#include "../common.h"
#include "shared_kernels.h"

__device__ int g_gain = 1;                // written by main.cu with cudaMemcpyToSymbol
__device__ unsigned long long g_hits = 0; // counted by the kernels of both files
__constant__ int c_coef[4] = {1, 1, 1, 1};
static __device__ int s_bias = 5;

__device__ __noinline__ int step_value(int x, int i) {
    return (x * c_coef[i & 3] + g_gain + s_bias) % 1000003;
}

__global__ void relax(int *a, float *f, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i == 0) printf("relax: gain %d bias %d\n", g_gain, s_bias);
    if (i < n) {
        a[i] = step_value(a[i], i);
        f[i] = sinf(f[i] * 3.0f);
        atomicAdd(&g_hits, 1ULL);
    }
}

void launch_scatter(int *a, int v, int n) {
    scatter_mix<int><<<(n + 127) / 128, 128>>>(a, v, n);
    CK(cudaGetLastError());
}

void launch_relax(int *a, float *f, int n) {
    relax<<<(n + 127) / 128, 128>>>(a, f, n);
    CK(cudaGetLastError());
}
