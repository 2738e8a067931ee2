// Kernels for the preemptible-form tests (ptx/tests/preempt.rs): ones the transformation
// must refuse, one it must accept although it returns before a barrier (the condition is a
// parameter, the same for every thread), and one that raises the preemption flag itself at
// a chosen logical block, so that a test can stop a grid at an exact block boundary.
#include <cooperative_groups.h>

extern "C" __global__ void early_exit_then_barrier(const int* in, int* out, int n) {
    __shared__ int s[256];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    s[threadIdx.x] = in[i];
    __syncthreads();
    out[i] = s[(threadIdx.x + 1) % blockDim.x];
}

__device__ __noinline__ int block_of() { return blockIdx.x; }

extern "C" __global__ void block_id_in_function(int* out) {
    out[blockIdx.x * blockDim.x + threadIdx.x] = block_of();
}

extern "C" __global__ void grid_synced(int* out) {
    out[blockIdx.x] = 1;
    cooperative_groups::this_grid().sync();
    out[blockIdx.x] += out[(blockIdx.x + 1) % gridDim.x];
}

extern "C" __global__ void uniform_exit_then_barrier(const int* in, int* out, int n, int skip) {
    __shared__ int s[256];
    if (skip) return;
    int i = (blockIdx.y * gridDim.x + blockIdx.x) * blockDim.x + threadIdx.x;
    s[threadIdx.x] = i < n ? in[i] : 0;
    __syncthreads();
    if (i < n) out[i] = s[(threadIdx.x + 1) % blockDim.x] + blockIdx.y;
}

// Every thread writes its logical position; thread 0 of logical block `stop` raises *flag.
extern "C" __global__ void raise_flag_at(int* out, unsigned* flag, int stop) {
    int b = blockIdx.y * gridDim.x + blockIdx.x;
    out[b * blockDim.x + threadIdx.x] = b * 1000 + threadIdx.x + 1;
    if (b == stop && threadIdx.x == 0) *(volatile unsigned*)flag = 1;
}

// Warp sums with a bounds check before the shuffles (warp_size_loop.cu's shape): the
// divergent load rejoins before any shuffle, so the kernel is accepted.
extern "C" __global__ void warp_sums(const int* x, int n, int* sums) {
    int i = (blockIdx.y * gridDim.x + blockIdx.x) * blockDim.x + threadIdx.x;
    int v = i < n ? x[i] : 0;
    for (int o = warpSize / 2; o > 0; o /= 2) v += __shfl_down_sync(0xffffffffu, v, o);
    if (threadIdx.x % warpSize == 0) sums[i / warpSize] = v + blockIdx.y;
}

// Warp 1 leaves before a barrier the other warps reach: refused (per-warp condition, but a
// barrier of the whole block follows).
extern "C" __global__ void warp_exit_then_barrier(const int* in, int* out) {
    __shared__ int s[256];
    if (threadIdx.x / 32 == 1) return;
    s[threadIdx.x] = in[threadIdx.x];
    __syncthreads();
    out[threadIdx.x] = s[threadIdx.x ^ 64];
}

// The upper half of each warp leaves before the lower half shuffles: refused (lanes of one
// warp go different ways; the shuffle would wait for lanes that now wait at the hand-out).
extern "C" __global__ void lane_exit_then_shuffle(const int* in, int* out) {
    if (threadIdx.x % 32 >= 16) return;
    int v = in[threadIdx.x];
    v += __shfl_down_sync(0xffffu, v, 8);
    out[threadIdx.x] = v;
}

// A 3-D grid: every block coordinate and grid dimension reaches memory.
extern "C" __global__ void grid3d(int* out) {
    int b = (blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
    out[b * blockDim.x + threadIdx.x] = blockIdx.x + 10 * blockIdx.y + 100 * blockIdx.z + 1000 * gridDim.x + 10000 * gridDim.y + 100000 * gridDim.z + 1000000 * threadIdx.x;
}
