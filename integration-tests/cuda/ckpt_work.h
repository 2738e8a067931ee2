// Device work the checkpoint-cut programs queue (ckpt_queue_cut, ckpt_free_cut,
// ckpt_sync_then_cut): a kernel of seconds (`spin`, an LCG per thread) and a short step
// kernel launched many times behind it.
#pragma once
__global__ void spin(unsigned *x, int iters) {
    unsigned v = x[threadIdx.x];
    for (int t = 0; t < iters; t++) v = v * 1664525u + 1013904223u;
    x[threadIdx.x] = v;
}
__global__ void step(unsigned *x, int n, unsigned k) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = x[i] * 3u + k + (unsigned)i;
}
