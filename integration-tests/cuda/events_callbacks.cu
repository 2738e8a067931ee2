// Event timing, cudaStreamAddCallback and cudaLaunchHostFunc: host functions run in stream
// order after the preceding kernel, and see its results.
#include "common.h"
#include <atomic>
__global__ void inc(int *x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] += 1; }
static std::atomic<int> order[4];
static std::atomic<int> next_slot;
static int *host_view;
static void CUDART_CB host_fn(void *arg) {
    order[next_slot++] = (int)(size_t)arg;
}
static void CUDART_CB cb(cudaStream_t, cudaError_t st, void *arg) {
    if (st == cudaSuccess) order[next_slot++] = (int)(size_t)arg;
}
int main() {
    const int n = 4096;
    int *d;
    CK(cudaMallocHost(&host_view, n * 4));
    CK(cudaMalloc(&d, n * 4));
    CK(cudaMemset(d, 0, n * 4));
    cudaStream_t s; cudaEvent_t a, b;
    CK(cudaStreamCreate(&s));
    CK(cudaEventCreate(&a)); CK(cudaEventCreate(&b));
    CK(cudaEventRecord(a, s));
    inc<<<n / 256, 256, 0, s>>>(d, n);
    GATE(1);
    CK(cudaLaunchHostFunc(s, host_fn, (void *)1));
    inc<<<n / 256, 256, 0, s>>>(d, n);
    CK(cudaStreamAddCallback(s, cb, (void *)2, 0));
    CK(cudaMemcpyAsync(host_view, d, n * 4, cudaMemcpyDeviceToHost, s));
    CK(cudaLaunchHostFunc(s, host_fn, (void *)3));
    CK(cudaEventRecord(b, s));
    GATE(2);  // kernels, a copy, host functions and events queued
    CK(cudaEventSynchronize(b));
    EXPECT(cudaEventQuery(b) == cudaSuccess);
    CK(cudaStreamSynchronize(s));
    float ms = -1;
    CK(cudaEventElapsedTime(&ms, a, b));
    EXPECT(ms >= 0.0f);
    GATE(3);
    EXPECT(next_slot == 3);
    EXPECT(order[0] == 1 && order[1] == 2 && order[2] == 3);
    for (int i = 0; i < n; i++) EXPECT(host_view[i] == 2);
    cudaEvent_t nt;
    CK(cudaEventCreateWithFlags(&nt, cudaEventDisableTiming));
    CK(cudaEventRecord(nt, s));
    CK(cudaEventSynchronize(nt));
    EXPECT(cudaEventElapsedTime(&ms, a, nt) == cudaErrorInvalidResourceHandle);
    printf("order %d %d %d\n", order[0].load(), order[1].load(), order[2].load());
    printf("PASS\n");
    return 0;
}
