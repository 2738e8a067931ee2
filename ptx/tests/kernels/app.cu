// A whole program (host + device code) for the fat binary tests.
#include <cstdio>
#include <cuda_runtime.h>

__global__ void scale(float* x, float s, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= s;
}

int main() {
    float* d;
    cudaMalloc(&d, 256 * sizeof(float));
    scale<<<1, 256>>>(d, 2.0f, 256);
    printf("%s\n", cudaGetErrorString(cudaDeviceSynchronize()));
    return 0;
}
