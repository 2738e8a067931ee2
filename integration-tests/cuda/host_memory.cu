// Host memory and copy kinds: cudaHostRegister/Unregister, mapped pinned memory read by a kernel
// through cudaHostGetDevicePointer, cudaMemcpyDefault inferring the direction, cudaMemsetAsync,
// cudaMemcpyPeer within one device, and streams with priorities.
#include "common.h"
__global__ void twice(const int *src, int *dst, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) dst[i] = 2 * src[i]; }
int main() {
    const int n = 4096;
    int *reg = (int *)aligned_alloc(4096, n * 4);
    for (int i = 0; i < n; i++) reg[i] = i - 100;
    CK(cudaHostRegister(reg, n * 4, cudaHostRegisterDefault));
    int *d, *d2;
    CK(cudaMalloc(&d, n * 4)); CK(cudaMalloc(&d2, n * 4));
    CK(cudaMemcpy(d, reg, n * 4, cudaMemcpyDefault));          // host -> device inferred
    GATE(1);
    int lo, hi;
    CK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
    cudaStream_t s;
    CK(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, hi));
    int pr = 0;
    CK(cudaStreamGetPriority(s, &pr)); EXPECT(pr == hi);
    CK(cudaMemsetAsync(d2, 0xff, n * 4, s));
    twice<<<n / 256, 256, 0, s>>>(d, d2, n / 2);                 // second half stays 0xffffffff
    GATE(2);
    CK(cudaStreamSynchronize(s));
    int *mapped, *dmapped;
    CK(cudaHostAlloc(&mapped, n * 4, cudaHostAllocMapped));
    CK(cudaHostGetDevicePointer((void **)&dmapped, mapped, 0));
    GATE(3);
    CK(cudaMemcpy(mapped, d2, n * 4, cudaMemcpyDefault));      // device -> host inferred
    for (int i = 0; i < n; i++) EXPECT(mapped[i] == (i < n / 2 ? 2 * reg[i] : -1));
    twice<<<n / 256, 256>>>(dmapped, d, n);                     // kernel reads host memory
    CK(cudaMemcpyPeer(d2, 0, d, 0, n * 4));
    CK(cudaMemcpy(reg, d2, n * 4, cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++) EXPECT(reg[i] == 2 * mapped[i]);
    CK(cudaHostUnregister(reg));
    printf("reg[0]=%d reg[%d]=%d\n", reg[0], n - 1, reg[n - 1]);
    CK(cudaFreeHost(mapped)); CK(cudaFree(d)); CK(cudaFree(d2)); CK(cudaStreamDestroy(s));
    printf("PASS\n");
    return 0;
}
