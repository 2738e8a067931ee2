// More host threads than the channel has lanes (64): the last ones share the overflow lane,
// each holding it for a whole call (a stream synchronize that waits for the device). The
// checkpoints at the gates come while they work, so the checkpoint agent must not need that
// lane (it has its own). Each thread adds 1 to its buffer per round until told to stop, and
// checks the buffer against its own count. Checked; PASS.
#include "common.h"
#include <atomic>
#include <thread>
#include <vector>
__global__ void inc(int *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += 1;
}
int main() {
    const int threads = 80, n = 256;
    std::atomic<bool> stop{false};
    std::atomic<int> bad{0};
    std::vector<std::thread> ts;
    for (int t = 0; t < threads; t++) {
        ts.emplace_back([&, t] {
            cudaStream_t s;
            int *d, h[n];
            // What went wrong, named (a failure says which thread, which call, which error).
            auto failed = [&](const char *what, cudaError_t e) {
                printf("thread %d: %s: %s\n", t, what, cudaGetErrorName(e));
                bad++;
            };
            cudaError_t e;
            if ((e = cudaStreamCreate(&s)) != cudaSuccess) return failed("cudaStreamCreate", e);
            if ((e = cudaMalloc(&d, n * 4)) != cudaSuccess) return failed("cudaMalloc", e);
            if ((e = cudaMemsetAsync(d, 0, n * 4, s)) != cudaSuccess) return failed("cudaMemsetAsync", e);
            int rounds = 0;
            // At least 200 rounds: threads end at different times, and the lanes they free
            // must not be taken by a thread with requests still unread on the overflow lane.
            while (!stop || rounds < 200) {
                inc<<<1, n, 0, s>>>(d, n);
                if ((e = cudaStreamSynchronize(s)) != cudaSuccess) return failed("cudaStreamSynchronize", e);
                rounds++;
            }
            if ((e = cudaMemcpy(h, d, n * 4, cudaMemcpyDeviceToHost)) != cudaSuccess) return failed("cudaMemcpy", e);
            for (int i = 0; i < n; i++) {
                if (h[i] != rounds) {
                    printf("thread %d: buffer[%d] = %d after %d rounds\n", t, i, h[i], rounds);
                    bad++;
                    break;
                }
            }
            cudaFree(d);
            cudaStreamDestroy(s);
            (void)t;
        });
    }
    // No wait for every thread to start: 19 of them share one lane, and on a loaded machine
    // the last may take long to get it; the gates find whichever are inside calls.
    GATE(1);
    GATE(2);
    GATE(3);
    stop = true;
    for (auto &t : ts) t.join();
    EXPECT(bad == 0);
    printf("%d threads, each its own stream: every buffer matches its count\n", threads);
    printf("PASS\n");
    return 0;
}
