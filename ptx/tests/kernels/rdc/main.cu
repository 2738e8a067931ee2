// Separate compilation, object 2 of 2: calls object 1's `scale` and reads its `g_scale`.
#include <cstdio>

extern __device__ int g_scale;
extern __device__ int scale(int x);
static __device__ int hidden = 7;

static __device__ __noinline__ int helper(int x) { return x - hidden; }

__global__ void k_main(int *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i == 0) printf("main %d\n", g_scale);
    if (i < n) out[i] = scale(i) + helper(g_scale);
}
