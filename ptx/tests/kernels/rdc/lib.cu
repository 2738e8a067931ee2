// Separate compilation, object 1 of 2: a device function, a `__device__` and a `__constant__`
// variable other objects use, a private variable and helper with the same names as object 2's,
// a printf string (`$str` in both objects' PTX) and a kernel of its own.
#include <cstdio>

__device__ int g_scale = 3;
__constant__ int g_offsets[4] = {10, 20, 30, 40};
static __device__ int hidden = 100;

static __device__ __noinline__ int helper(int x) { return x + hidden; }

__device__ __noinline__ int scale(int x) {
    if (x == 0) printf("lib scale %d\n", x);
    return helper(x) * g_scale + g_offsets[x & 3];
}

__global__ void k_lib(int *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = scale(i);
}
