// One kernel of the module uses a form the emulated device does not run (an indirect call
// through a device function pointer); the other kernels of the same module must still run.
// The indirect kernel either runs correctly (a GPU) or fails its own launch with
// cudaErrorNotSupported, which is not sticky: the plain kernel runs again afterwards.
#include "common.h"
__device__ int twice(int v) { return 2 * v; }
__device__ int square(int v) { return v * v; }
__device__ int (*ops[2])(int) = {twice, square};

__global__ void indirect(int *x, int n, int which) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = ops[which & 1](x[i]);
}
__global__ void add_one(int *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += 1;
}

int main() {
    const int n = 1000;
    int h[n], got[n];
    for (int i = 0; i < n; i++) h[i] = i;
    int *d;
    CK(cudaMalloc(&d, sizeof h));
    CK(cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice));
    add_one<<<(n + 255) / 256, 256>>>(d, n);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    indirect<<<(n + 255) / 256, 256>>>(d, n, 1);
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    EXPECT(e == cudaSuccess || e == cudaErrorNotSupported);
    bool ran = e == cudaSuccess;
    // Not sticky: once read (cudaGetLastError resets it), the context works on.
    cudaGetLastError();
    add_one<<<(n + 255) / 256, 256>>>(d, n);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(got, d, sizeof got, cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++) EXPECT(got[i] == (ran ? (i + 1) * (i + 1) : i + 1) + 1);
    printf("plain kernels of the module run\n");
    printf("PASS\n");
    return 0;
}
