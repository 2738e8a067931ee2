// Host code only; its kernels live in libshared_kernels.so. Linked with `nvcc -rdc=true`,
// the executable gets the device-link step's `.nv_fatbin` but registers no fat binary
// itself (no `__cudaRegisterFatBinary` import), while it NEEDs libcudart.so.13.
#include <cstdio>
#include <cuda_runtime.h>

extern "C" int run_square(int *p, int n);

int main() {
    const int n = 100;
    int *d = nullptr, h[n];
    if (cudaMalloc(&d, n * sizeof(int)) != cudaSuccess) return 1;
    if (run_square(d, n) != 0) return 2;
    if (cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost) != cudaSuccess) return 3;
    for (int i = 0; i < n; i++) {
        if (h[i] != i * i) {
            printf("FAIL at %d: %d\n", i, h[i]);
            return 4;
        }
    }
    printf("PASS\n");
    return 0;
}
