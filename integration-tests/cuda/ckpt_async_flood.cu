// A flood of asynchronous work for checkpoints taken with work in flight: kernels on four
// streams (default, non-blocking, high and low priority), device-to-device and device-to-host
// copies into pinned memory, events ordering each stream after its neighbour (both ways), and
// a second host thread blocked in cudaStreamSynchronize. GATE(b) comes right after batch b is
// queued, so a checkpoint there finds all of it queued and a thread inside a CUDA call.
// Usage: ckpt_async_flood [BATCHES=3] [ROUNDS=40]. Checked against a CPU reference; PASS.
#include "common.h"
#include <atomic>
#include <thread>
#define S 4
__global__ void mix(unsigned *x, int n, unsigned salt) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        unsigned v = x[i];
        for (int k = 0; k < 8; k++) v = v * 1664525u + 1013904223u + salt;
        x[i] = v;
    }
}
__global__ void fold(unsigned *x, const unsigned *y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] ^= y[i] >> 3;
}
static void mix_cpu(unsigned *x, int n, unsigned salt) {
    for (int i = 0; i < n; i++) {
        unsigned v = x[i];
        for (int k = 0; k < 8; k++) v = v * 1664525u + 1013904223u + salt;
        x[i] = v;
    }
}
int main(int argc, char **argv) {
    const int batches = argc > 1 ? atoi(argv[1]) : 3, rounds = argc > 2 ? atoi(argv[2]) : 40;
    const int n = 1 << 12;
    int lo, hi;
    CK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
    cudaStream_t st[S];
    CK(cudaStreamCreate(&st[0]));
    CK(cudaStreamCreateWithFlags(&st[1], cudaStreamNonBlocking));
    CK(cudaStreamCreateWithPriority(&st[2], cudaStreamNonBlocking, hi));
    CK(cudaStreamCreateWithPriority(&st[3], cudaStreamDefault, lo));
    cudaEvent_t ready[S], used[S];
    unsigned *d[S], *snap[S], *h[S], *ref[S], *rsnap[S], *rh[S];
    for (int s = 0; s < S; s++) {
        CK(cudaEventCreateWithFlags(&ready[s], cudaEventDisableTiming));
        CK(cudaEventCreateWithFlags(&used[s], cudaEventDisableTiming));
        CK(cudaMalloc(&d[s], n * 4)); CK(cudaMalloc(&snap[s], n * 4));
        CK(cudaMallocHost(&h[s], n * 4));
        ref[s] = (unsigned *)malloc(n * 4); rsnap[s] = (unsigned *)malloc(n * 4); rh[s] = (unsigned *)malloc(n * 4);
        for (int i = 0; i < n; i++) ref[s][i] = h[s][i] = (unsigned)(i * 2654435761u) ^ (unsigned)s;
        CK(cudaMemcpyAsync(d[s], h[s], n * 4, cudaMemcpyHostToDevice, st[s]));
        CK(cudaEventRecord(used[s], st[s]));
    }
    std::atomic<int> queued{0};
    int synced = 0;
    std::thread waiter([&] {  // inside cudaStreamSynchronize while a batch runs
        for (int b = 1; b <= batches; b++) {
            while (queued.load() < b) usleep(200);
            CK(cudaStreamSynchronize(st[S - 1]));
            synced = b;
        }
    });
    for (int b = 0; b < batches; b++) {
        for (int r = 0; r < rounds; r++) {
            for (int s = 0; s < S; s++) {
                unsigned salt = (unsigned)(b * 100000 + r * 10 + s);
                mix<<<n / 256, 256, 0, st[s]>>>(d[s], n, salt);
                mix_cpu(ref[s], n, salt);
            }
            if (r % 10 == 9) {
                // Each stream folds in a snapshot of its left neighbour's data: the snapshot is
                // written only after the neighbour has read the previous one (`used`), and read
                // only after it is written (`ready`).
                for (int s = 0; s < S; s++) {
                    CK(cudaStreamWaitEvent(st[s], used[(s + 1) % S], 0));
                    CK(cudaMemcpyAsync(snap[s], d[s], n * 4, cudaMemcpyDeviceToDevice, st[s]));
                    CK(cudaEventRecord(ready[s], st[s]));
                    memcpy(rsnap[s], ref[s], n * 4);
                }
                for (int s = 0; s < S; s++) {
                    CK(cudaStreamWaitEvent(st[s], ready[(s + S - 1) % S], 0));
                    fold<<<n / 256, 256, 0, st[s]>>>(d[s], snap[(s + S - 1) % S], n);
                    CK(cudaEventRecord(used[s], st[s]));
                    for (int i = 0; i < n; i++) ref[s][i] ^= rsnap[(s + S - 1) % S][i] >> 3;
                }
            }
            if (r % 20 == 19)
                for (int s = 0; s < S; s++) {
                    CK(cudaMemcpyAsync(h[s], d[s], n * 4, cudaMemcpyDeviceToHost, st[s]));
                    memcpy(rh[s], ref[s], n * 4);
                }
        }
        queued = b + 1;
        GATE(b + 1);
    }
    waiter.join();
    CK(cudaDeviceSynchronize());
    EXPECT(synced == batches);
    unsigned sum = 0;
    for (int s = 0; s < S; s++) {
        for (int i = 0; i < n; i++) EXPECT(h[s][i] == rh[s][i]);
        CK(cudaMemcpy(h[s], d[s], n * 4, cudaMemcpyDeviceToHost));
        for (int i = 0; i < n; i++) { EXPECT(h[s][i] == ref[s][i]); sum = sum * 31 + h[s][i]; }
    }
    printf("batches %d rounds %d streams %d checksum %08x\n", batches, rounds, S, sum);
    for (int s = 0; s < S; s++) {
        CK(cudaStreamDestroy(st[s])); CK(cudaEventDestroy(ready[s])); CK(cudaEventDestroy(used[s]));
        CK(cudaFree(d[s])); CK(cudaFree(snap[s])); CK(cudaFreeHost(h[s]));
    }
    printf("PASS\n");
    return 0;
}
