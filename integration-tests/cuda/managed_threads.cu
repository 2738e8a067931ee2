// Managed memory from several host threads at once, a CPU write followed by a CPU read with no
// kernel in between, and a 1 GiB managed region touched sparsely (one int per 4 MiB).
#include "common.h"
#include <thread>
#include <vector>
__global__ void add(int *x, int n, int k) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] += k; }
__global__ void sparse(int *x, size_t stride, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i * stride] += i; }
static int ok[4];
int main() {
    const int n = 1 << 12;
    int *m[4];
    for (int t = 0; t < 4; t++) CK(cudaMallocManaged(&m[t], n * 4));
    std::vector<std::thread> ts;
    for (int t = 0; t < 4; t++)
        ts.emplace_back([&, t] {
            cudaStream_t s;
            CK(cudaStreamCreate(&s));
            for (int i = 0; i < n; i++) m[t][i] = i * t;
            for (int r = 1; r <= 3; r++) {
                add<<<n / 128, 128, 0, s>>>(m[t], n, r);
                if (t == 0) GATE(r);  // the other threads keep going
                CK(cudaStreamSynchronize(s));
                m[t][0] += 1000;          // write, then read back with no kernel in between
                if (m[t][0] != r * (r + 1) / 2 + 1000 * r) return;
            }
            for (int i = 1; i < n; i++) if (m[t][i] != i * t + 6) return;
            CK(cudaStreamDestroy(s));
            ok[t] = 1;
        });
    for (auto &t : ts) t.join();
    for (int t = 0; t < 4; t++) EXPECT(ok[t]);
    const size_t big = (size_t)1 << 30, stride = (4 << 20) / sizeof(int);
    const int touches = (int)(big / sizeof(int) / stride);    // 256
    int *g;
    CK(cudaMallocManaged(&g, big));
    for (int i = 0; i < touches; i++) g[i * stride] = 7;
    sparse<<<1, touches>>>(g, stride, touches);
    CK(cudaDeviceSynchronize());
    long long s = 0;
    for (int i = 0; i < touches; i++) { EXPECT(g[i * stride] == 7 + i); s += g[i * stride]; }
    printf("threads ok, sparse sum %lld\n", s);
    CK(cudaFree(g));
    for (int t = 0; t < 4; t++) CK(cudaFree(m[t]));
    printf("PASS\n");
    return 0;
}
