// A thread inside cudaFree when a checkpoint comes (cudaFree synchronizes the device): a
// kernel of seconds runs, 200 launches are queued behind it, and a second thread frees a
// buffer, waiting for them. The cut saves the free as a call to resume (before, the free's
// own device synchronization waited for ever on the queues the cut held, and the checkpoint
// failed after 120 s). After a restart the free happens once: a second cudaFree of the same
// pointer is an error, the device has the memory back, and the results are right.
// Usage: ckpt_free_cut [LONG_ITERS=8000000]
#include "common.h"
#include "ckpt_work.h"
#include <thread>
int main(int argc, char **argv) {
    const int iters = argc > 1 ? atoi(argv[1]) : 8000000;
    const int n = 1024;
    unsigned *d, *l, *spare, h[n], ref[n], lh[32], lref[32];
    const size_t spare_bytes = 64 << 20;
    CK(cudaMalloc(&d, n * 4));
    CK(cudaMalloc(&l, 32 * 4));
    CK(cudaMalloc(&spare, spare_bytes));
    size_t free0 = 0, total = 0;
    CK(cudaMemGetInfo(&free0, &total));
    for (int i = 0; i < n; i++) ref[i] = h[i] = (unsigned)i * 2654435761u;
    for (int i = 0; i < 32; i++) lref[i] = lh[i] = (unsigned)i + 7;
    CK(cudaMemcpy(d, h, n * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(l, lh, 32 * 4, cudaMemcpyHostToDevice));
    spin<<<1, 32>>>(l, iters);
    for (int i = 0; i < 32; i++)
        for (int t = 0; t < iters; t++) lref[i] = lref[i] * 1664525u + 1013904223u;
    for (int j = 0; j < 200; j++) {
        step<<<n / 256, 256>>>(d, n, (unsigned)j);
        for (int i = 0; i < n; i++) ref[i] = ref[i] * 3u + (unsigned)j + (unsigned)i;
    }
    std::thread freer([&] { CK(cudaFree(spare)); });
    GATE(1);
    freer.join();
    EXPECT(cudaFree(spare) == cudaErrorInvalidValue);  // freed once, not twice, not never
    (void)cudaGetLastError();
    size_t free1 = 0;
    CK(cudaMemGetInfo(&free1, &total));
    EXPECT(free1 >= free0 + spare_bytes);
    GATE(2);
    CK(cudaMemcpy(h, d, n * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(lh, l, 32 * 4, cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++) EXPECT(h[i] == ref[i]);
    for (int i = 0; i < 32; i++) EXPECT(lh[i] == lref[i]);
    GATE(3);
    printf("a cudaFree waiting at the cut happened once after it; %d results match\n", n);
    printf("PASS\n");
    return 0;
}
