// Warp lockstep (SIMT): code that relies on the threads of a warp executing each instruction
// together, as GPUs run it. Checked in ptx/tests/lockstep.rs.

// The classic warp-synchronous reduction of pre-Volta code (volatile shared memory, no
// __syncwarp): correct only when a warp's loads of a step happen before its stores.
__device__ void warp_reduce(volatile int *s, int t) {
    s[t] += s[t + 32];
    s[t] += s[t + 16];
    s[t] += s[t + 8];
    s[t] += s[t + 4];
    s[t] += s[t + 2];
    s[t] += s[t + 1];
}
extern "C" __global__ void legacy_reduce(const int *in, int *out) {
    __shared__ int s[256];
    int t = threadIdx.x;
    s[t] = in[blockIdx.x * 256 + t];
    __syncthreads();
    for (int k = 128; k > 32; k >>= 1) {
        if (t < k) s[t] += s[t + k];
        __syncthreads();
    }
    if (t < 32) warp_reduce(s, t);
    if (t == 0) out[blockIdx.x] = s[0];
}

// A missing __syncthreads() that one warp hides: each lane writes its slot, then reads its
// neighbour's, with no barrier between.
extern "C" __global__ void neighbour_no_barrier(int *out) {
    volatile __shared__ int s[32];
    int t = threadIdx.x;
    s[t] = t * 3 + 1;
    out[t] = s[(t + 1) % 32];
}

// Divergence, then reconvergence: lanes loop a lane-dependent number of times, and after the
// loop (where the warp is whole again) exchange through shared memory without a barrier.
extern "C" __global__ void reconverge(int *out) {
    volatile __shared__ int s[32];
    int t = threadIdx.x;
    int v = t;
    for (int i = 0; i < t; i++) v = v * 3 + 1;
    if (t & 1) v += 1000; else v -= 1000;
    s[t] = v;
    out[t] = s[t ^ 1];
}

// One lane waits for a flag that another lane of its warp sets (needs independent progress
// of the lanes, as since Volta).
extern "C" __global__ void lane_waits_for_lane(int *flag, int *out) {
    int t = threadIdx.x;
    if (t == 0) {
        while (atomicAdd(flag, 0) == 0) { }
        out[0] = 1;
    } else if (t == 5) {
        atomicExch(flag, 1);
    }
}
