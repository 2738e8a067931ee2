// Device printf from a few threads, one block at a time so the order is deterministic.
#include "common.h"
__global__ void hello(int b, float f) {
    printf("block %d thread %d f=%.2f\n", b, (int)threadIdx.x, f * threadIdx.x);
}
int main() {
    for (int b = 0; b < 2; b++) {
        hello<<<1, 2>>>(b, 1.5f);
        GATE(b + 1);  // kernel (and its printf) queued
        CK(cudaDeviceSynchronize());
    }
    GATE(3);
    printf("PASS\n");
    return 0;
}
