// Error semantics: a freed device pointer -> cudaErrorInvalidValue (non-sticky), 2048 threads per block
// -> cudaErrorInvalidValue (non-sticky; CUDA 13's answer, older runtimes said
// cudaErrorInvalidConfiguration), out-of-bounds store -> cudaErrorIllegalAddress
// (sticky: every later call fails with it).
#include "common.h"
__global__ void nop(int *x) { if (x) x[threadIdx.x] = 1; }
__global__ void oob(int *x) { x[(size_t)1 << 40] = 1; }
int main() {
    setvbuf(stdout, nullptr, _IONBF, 0);  // keep the lines printed before a crash
    int h = 0, *gone;
    CK(cudaMalloc(&gone, 4096));
    CK(cudaFree(gone));
    GATE(1);  // the freed pointer must stay invalid
    cudaError_t e = cudaMemcpy(&h, gone, 4, cudaMemcpyDeviceToHost);
    printf("freed pointer: %s\n", cudaGetErrorName(e));
    EXPECT(e == cudaErrorInvalidValue);
    e = cudaFree((void *)0x1234);
    printf("bad free: %s\n", cudaGetErrorName(e));
    EXPECT(e != cudaSuccess);
    cudaGetLastError();
    nop<<<1, 2048>>>(nullptr);
    e = cudaGetLastError();
    printf("2048 threads: %s\n", cudaGetErrorName(e));
    EXPECT(e == cudaErrorInvalidValue);
    EXPECT(cudaGetLastError() == cudaSuccess);  // non-sticky: cleared by the read
    GATE(2);
    int *d;
    CK(cudaMalloc(&d, 64 * 4));
    nop<<<1, 64>>>(d);
    CK(cudaDeviceSynchronize());
    oob<<<1, 1>>>(d);
    e = cudaDeviceSynchronize();
    printf("out of bounds: %s\n", cudaGetErrorName(e));
    EXPECT(e == cudaErrorIllegalAddress);
    GATE(3);  // the sticky error must survive
    int *more;
    e = cudaMalloc(&more, 16);
    printf("after: %s\n", cudaGetErrorName(e));
    EXPECT(e == cudaErrorIllegalAddress);  // sticky
    EXPECT(cudaPeekAtLastError() == cudaErrorIllegalAddress);
    // No work is done after a sticky error: the copy fails and leaves the destination alone,
    // the memset does not reach device memory.
    int back[64];
    for (int i = 0; i < 64; i++) back[i] = -7;
    e = cudaMemcpy(back, d, sizeof back, cudaMemcpyDeviceToHost);
    EXPECT(e == cudaErrorIllegalAddress);
    int untouched = 1;
    for (int i = 0; i < 64; i++) untouched &= back[i] == -7;
    printf("copy after the error left the host buffer alone: %d\n", untouched);
    EXPECT(untouched);
    EXPECT(cudaMemset(d, 0, 64 * 4) == cudaErrorIllegalAddress);
    EXPECT(cudaMemcpyAsync(back, d, sizeof back, cudaMemcpyDeviceToHost, 0) == cudaErrorIllegalAddress);
    EXPECT(cudaStreamSynchronize(0) == cudaErrorIllegalAddress);
    for (int i = 0; i < 64; i++) untouched &= back[i] == -7;
    EXPECT(untouched);
    printf("string: %s\n", cudaGetErrorString(cudaErrorInvalidValue));
    printf("PASS\n");
    return 0;
}
