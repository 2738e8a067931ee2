// Four streams each copy a chunk from pinned memory (cudaMallocHost / cudaHostAlloc), scale it
// and copy it back asynchronously; events order a final stream after the others and time it.
#include "common.h"
__global__ void scale(float *x, int n, float k) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = x[i] * k + 1.0f;
}
int main() {
    const int n = 1 << 16, ns = 4, chunk = n / ns;
    float *in, *out, *d;
    CK(cudaMallocHost(&in, n * 4));
    CK(cudaHostAlloc(&out, n * 4, cudaHostAllocDefault));
    CK(cudaMalloc(&d, n * 4));
    for (int i = 0; i < n; i++) in[i] = (float)(i % 100);
    cudaStream_t s[ns], fin; cudaEvent_t done[ns], t0, t1;
    CK(cudaStreamCreateWithFlags(&fin, cudaStreamNonBlocking));
    CK(cudaEventCreate(&t0)); CK(cudaEventCreate(&t1));
    CK(cudaEventRecord(t0, 0));
    for (int k = 0; k < ns; k++) {
        CK(cudaStreamCreate(&s[k]));
        CK(cudaEventCreateWithFlags(&done[k], cudaEventDisableTiming));
        int off = k * chunk;
        CK(cudaMemcpyAsync(d + off, in + off, chunk * 4, cudaMemcpyHostToDevice, s[k]));
        scale<<<chunk / 256, 256, 0, s[k]>>>(d + off, chunk, (float)(k + 2));
        CK(cudaMemcpyAsync(out + off, d + off, chunk * 4, cudaMemcpyDeviceToHost, s[k]));
        CK(cudaEventRecord(done[k], s[k]));
        CK(cudaStreamWaitEvent(fin, done[k], 0));
        if (k == 1) GATE(1);  // two streams queued, two not yet created
    }
    CK(cudaEventRecord(t1, fin));
    GATE(2);
    CK(cudaEventSynchronize(t1));
    CK(cudaStreamSynchronize(fin));
    GATE(3);
    for (int k = 0; k < ns; k++) EXPECT(cudaStreamQuery(s[k]) == cudaSuccess);
    float ms = -1;
    CK(cudaEventElapsedTime(&ms, t0, t0));
    EXPECT(ms == 0.0f);
    for (int i = 0; i < n; i++) EXPECT(out[i] == in[i] * (float)(i / chunk + 2) + 1.0f);
    printf("out[%d]=%.1f\n", n - 1, out[n - 1]);
    for (int k = 0; k < ns; k++) { CK(cudaStreamDestroy(s[k])); CK(cudaEventDestroy(done[k])); }
    CK(cudaFreeHost(in)); CK(cudaFreeHost(out)); CK(cudaFree(d));
    printf("PASS\n");
    return 0;
}
