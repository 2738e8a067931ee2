// Checkpoints that do not wait for the queue (issue 16). A long kernel runs first; behind it
// 1000 small launches (on the legacy stream and a blocking stream, so each waits for the one
// before), an event record and a stream wait. A second thread then waits in
// cudaDeviceSynchronize, and GATE(1) comes: a checkpoint there finds the long kernel running
// (it is waited for: policy drain), the 1000 launches not started (saved, replayed after a
// restart) and a thread inside a CUDA call (saved, resumed). GATE(2) and GATE(3) come after
// the second and third, shorter rounds. Checked against a CPU reference; PASS.
// Usage: ckpt_queue_cut [SMALL=1000] [LONG_ITERS=8000000]
#include "common.h"
#include "ckpt_work.h"
#include <atomic>
#include <thread>
static unsigned spin_cpu(unsigned v, int iters) {
    for (int t = 0; t < iters; t++) v = v * 1664525u + 1013904223u;
    return v;
}
int main(int argc, char **argv) {
    const int small = argc > 1 ? atoi(argv[1]) : 1000, iters = argc > 2 ? atoi(argv[2]) : 8000000;
    const int n = 1024;
    unsigned *d, *l, h[n], ref[n], lh[32], lref[32];
    CK(cudaMalloc(&d, n * 4));
    CK(cudaMalloc(&l, 32 * 4));
    for (int i = 0; i < n; i++) ref[i] = h[i] = (unsigned)i * 2654435761u;
    for (int i = 0; i < 32; i++) lref[i] = lh[i] = (unsigned)i + 7;
    CK(cudaMemcpy(d, h, n * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(l, lh, 32 * 4, cudaMemcpyHostToDevice));
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    cudaEvent_t e;
    CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    for (int round = 1; round <= 3; round++) {
        int count = round == 1 ? small : small / 4;
        if (round == 1) {
            spin<<<1, 32>>>(l, iters);
            for (int i = 0; i < 32; i++) lref[i] = spin_cpu(lref[i], iters);
        }
        for (int j = 0; j < count; j++) {
            unsigned k = (unsigned)(round * 100000 + j);
            step<<<n / 256, 256, 0, j % 2 ? s : 0>>>(d, n, k);
            for (int i = 0; i < n; i++) ref[i] = ref[i] * 3u + k + (unsigned)i;
            if (j == count / 2) {
                CK(cudaEventRecord(e, s));
                CK(cudaStreamWaitEvent(0, e, 0));
            }
        }
        std::atomic<int> synced{0};
        std::thread waiter([&] {
            CK(cudaDeviceSynchronize());
            synced = 1;
        });
        GATE(round);
        waiter.join();
        EXPECT(synced.load() == 1);
        CK(cudaMemcpy(h, d, n * 4, cudaMemcpyDeviceToHost));
        unsigned sum = 0;
        for (int i = 0; i < n; i++) { EXPECT(h[i] == ref[i]); sum = sum * 31 + h[i]; }
        printf("round %d: %d launches, checksum %08x\n", round, count, sum);
    }
    CK(cudaMemcpy(lh, l, 32 * 4, cudaMemcpyDeviceToHost));
    for (int i = 0; i < 32; i++) EXPECT(lh[i] == lref[i]);
    CK(cudaEventDestroy(e));
    CK(cudaStreamDestroy(s));
    CK(cudaFree(d));
    CK(cudaFree(l));
    printf("PASS\n");
    return 0;
}
