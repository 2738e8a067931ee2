// Static shared memory belongs to each kernel: eight kernels with 32 KiB of __shared__ each
// all launch (the module's total, 256 KiB, is more than any block may have), each reports its
// own 32 KiB in cudaFuncGetAttributes, and a kernel that calls a non-inlined function with a
// __shared__ array of its own counts that array too. Results are checked against the CPU.
#include "common.h"
#define WORDS 8192  // 32 KiB of int

#define KERNEL(K)                                                        \
__global__ void k##K(const int *x, int *out) {                          \
    __shared__ int buf[WORDS];                                           \
    for (int j = threadIdx.x; j < WORDS; j += blockDim.x)                \
        buf[j] = x[j] * (K + 1);                                         \
    __syncthreads();                                                     \
    int s = 0;                                                           \
    for (int j = threadIdx.x; j < WORDS; j += blockDim.x)                \
        s += buf[(j + 7 * K + 1) % WORDS];                               \
    atomicAdd(&out[K], s);                                               \
}
KERNEL(0) KERNEL(1) KERNEL(2) KERNEL(3) KERNEL(4) KERNEL(5) KERNEL(6) KERNEL(7)

__device__ __noinline__ int helper_sum(const int *x) {
    __shared__ int scratch[4096];  // 16 KiB, owned by this function
    for (int j = threadIdx.x; j < 4096; j += blockDim.x) scratch[j] = x[j] + 1;
    __syncthreads();
    int s = 0;
    for (int j = threadIdx.x; j < 4096; j += blockDim.x) s += scratch[4095 - j];
    return s;
}
__global__ void with_helper(const int *x, int *out) {
    __shared__ int mine[1024];  // 4 KiB
    mine[threadIdx.x] = helper_sum(x);
    __syncthreads();
    if (threadIdx.x == 0) {
        int s = 0;
        for (int j = 0; j < (int)blockDim.x; j++) s += mine[j];
        out[8] = s;
    }
}

typedef void (*kernel_t)(const int *, int *);

int main() {
    kernel_t ks[8] = {k0, k1, k2, k3, k4, k5, k6, k7};
    int *h = (int *)malloc(WORDS * 4);
    long long base = 0, base4k = 0;
    for (int i = 0; i < WORDS; i++) { h[i] = (i * 2654435761u) % 100; base += h[i]; }
    for (int i = 0; i < 4096; i++) base4k += h[i] + 1;
    int *d, *dout, hout[9];
    CK(cudaMalloc(&d, WORDS * 4)); CK(cudaMalloc(&dout, sizeof hout));
    CK(cudaMemcpy(d, h, WORDS * 4, cudaMemcpyHostToDevice));
    CK(cudaMemset(dout, 0, sizeof hout));
    for (int k = 0; k < 8; k++) {
        cudaFuncAttributes a;
        CK(cudaFuncGetAttributes(&a, (const void *)ks[k]));
        EXPECT(a.sharedSizeBytes == WORDS * 4);
        ks[k]<<<2, 256>>>(d, dout);
        CK(cudaGetLastError());
    }
    cudaFuncAttributes a;
    CK(cudaFuncGetAttributes(&a, (const void *)with_helper));
    printf("with_helper: %zu bytes of static shared memory\n", a.sharedSizeBytes);
    EXPECT(a.sharedSizeBytes == (4096 + 1024) * 4);
    with_helper<<<1, 1024>>>(d, dout);
    CK(cudaGetLastError());
    CK(cudaMemcpy(hout, dout, sizeof hout, cudaMemcpyDeviceToHost));
    for (int k = 0; k < 8; k++) EXPECT(hout[k] == 2 * base * (k + 1));
    EXPECT(hout[8] == base4k);
    printf("8 kernels with %d bytes each: ok\n", WORDS * 4);
    printf("PASS\n");
    return 0;
}
