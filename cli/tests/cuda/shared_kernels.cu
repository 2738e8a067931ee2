// A shared library holding the kernels of `host_only_main.cpp` (statically_linked_cudart test).
#include <cuda_runtime.h>

__global__ void square(int *p, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = i * i;
}

extern "C" int run_square(int *p, int n) {
    square<<<(n + 63) / 64, 64>>>(p, n);
    return (int)cudaGetLastError();
}
