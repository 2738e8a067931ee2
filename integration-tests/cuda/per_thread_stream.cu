// Built with --default-stream per-thread: two host threads launch on their per-thread default
// streams (cudaStreamPerThread) with dynamic shared memory above 48 KiB, allowed through
// cudaFuncSetAttribute; each reverses its array in shared memory.
#include "common.h"
#include <thread>
extern __shared__ int buf[];
__global__ void reverse(int *x, int n) {
    for (int i = threadIdx.x; i < n; i += blockDim.x) buf[i] = x[i];
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) x[i] = buf[n - 1 - i];
}
static int ok[2];
int main() {
    const int n = 16384;  // 64 KiB of dynamic shared memory
    CK(cudaFuncSetAttribute(reverse, cudaFuncAttributeMaxDynamicSharedMemorySize, n * 4));
    std::thread ts[2];
    for (int t = 0; t < 2; t++)
        ts[t] = std::thread([t] {
            int *h, *d;
            CK(cudaMallocHost(&h, n * 4)); CK(cudaMalloc(&d, n * 4));
            for (int i = 0; i < n; i++) h[i] = i * (t + 1);
            CK(cudaMemcpyAsync(d, h, n * 4, cudaMemcpyHostToDevice, cudaStreamPerThread));
            if (t == 0) GATE(1);
            reverse<<<1, 256, n * 4>>>(d, n);  // the per-thread default stream
            if (t == 0) GATE(2);
            CK(cudaGetLastError());
            CK(cudaMemcpyAsync(h, d, n * 4, cudaMemcpyDeviceToHost, cudaStreamPerThread));
            if (t == 0) GATE(3);
            CK(cudaStreamSynchronize(cudaStreamPerThread));
            for (int i = 0; i < n; i++) if (h[i] != (n - 1 - i) * (t + 1)) return;
            ok[t] = 1;
        });
    for (auto &t : ts) t.join();
    printf("threads %d %d\n", ok[0], ok[1]);
    EXPECT(ok[0] && ok[1]);
    printf("PASS\n");
    return 0;
}
