// Four host threads, each with its own stream and buffers, run kernels concurrently.
#include "common.h"
#include <thread>
#include <vector>
__global__ void fill(int *x, int n, int t) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = i * (t + 1) + t;
}
static int ok[4];
static void worker(int t) {
    const int n = 1 << 13;
    cudaStream_t s; int *d; int *h;
    CK(cudaStreamCreate(&s));
    CK(cudaMalloc(&d, n * 4));
    CK(cudaMallocHost(&h, n * 4));
    for (int it = 0; it < 4; it++) {
        fill<<<n / 128, 128, 0, s>>>(d, n, t + it);
        CK(cudaMemcpyAsync(h, d, n * 4, cudaMemcpyDeviceToHost, s));
        if (t == 0 && it < 3) GATE(it + 1);  // the other threads keep going
        CK(cudaStreamSynchronize(s));
        for (int i = 0; i < n; i++) if (h[i] != i * (t + it + 1) + t + it) return;
    }
    CK(cudaFree(d)); CK(cudaFreeHost(h)); CK(cudaStreamDestroy(s));
    ok[t] = 1;
}
int main() {
    std::vector<std::thread> ts;
    for (int t = 0; t < 4; t++) ts.emplace_back(worker, t);
    for (auto &t : ts) t.join();
    for (int t = 0; t < 4; t++) { printf("thread %d %s\n", t, ok[t] ? "ok" : "bad"); EXPECT(ok[t]); }
    printf("PASS\n");
    return 0;
}
