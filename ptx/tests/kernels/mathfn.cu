// Math library calls (nvcc's internal .func helpers with .local stacks), printf, assert, trap.
#include <cstdio>
#include <cassert>

extern "C" __global__ void math_fns(const double* x, double* out, float* outf, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        out[3 * i + 0] = pow(x[i], 2.5);
        out[3 * i + 1] = sin(x[i] * 1000.0);
        out[3 * i + 2] = exp(x[i]);
        float xf = (float)x[i];
        outf[2 * i + 0] = sinf(xf * 100.0f);
        outf[2 * i + 1] = powf(xf, 1.5f);
    }
}

extern "C" __global__ void say_hello(int k) {
    printf("block %d thread %d k=%d pi=%.3f %s %5.1e|%-4d|%x\n", blockIdx.x, threadIdx.x, k, 3.14159, "str", 12345.0, 7, 255u);
}

extern "C" __global__ void failing_assert(int v) {
    assert(v > 10);
}

extern "C" __global__ void trapping(int v) {
    if (v == 3) __trap();
}

extern "C" __global__ void device_malloc(int* out) {
    int t = threadIdx.x;
    int* p = (int*)malloc(4 * sizeof(int));
    if (p) {
        for (int k = 0; k < 4; ++k) p[k] = t * k;
        out[t] = p[1] + p[3];
        free(p);
    } else {
        out[t] = -1;
    }
}
