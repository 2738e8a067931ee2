// Reductions (warp shuffles, atomics), block prefix scan, shared-memory histogram.
extern "C" __global__ void reduce_shfl(const float* in, float* out, int n) {
    __shared__ float warp_sums[32];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = i < n ? in[i] : 0.0f;
    for (int off = 16; off > 0; off /= 2) v += __shfl_down_sync(0xffffffff, v, off);
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0) warp_sums[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < blockDim.x / 32 ? warp_sums[lane] : 0.0f;
        for (int off = 16; off > 0; off /= 2) v += __shfl_down_sync(0xffffffff, v, off);
        if (lane == 0) out[blockIdx.x] = v;
    }
}

extern "C" __global__ void reduce_atomic(const int* in, int* sum, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(sum, in[i]);
}

extern "C" __global__ void scan_block(const int* in, int* out, int n) {
    __shared__ int tmp[2][256];
    int t = threadIdx.x;
    int p = 0;
    tmp[0][t] = t < n ? in[t] : 0;
    __syncthreads();
    for (int off = 1; off < blockDim.x; off *= 2) {
        int v = tmp[p][t];
        if (t >= off) v += tmp[p][t - off];
        tmp[1 - p][t] = v;
        p = 1 - p;
        __syncthreads();
    }
    if (t < n) out[t] = tmp[p][t];
}

extern "C" __global__ void histogram(const unsigned char* data, unsigned int* bins, int n) {
    __shared__ unsigned int local[64];
    for (int b = threadIdx.x; b < 64; b += blockDim.x) local[b] = 0;
    __syncthreads();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        atomicAdd(&local[data[i] % 64], 1u);
    __syncthreads();
    for (int b = threadIdx.x; b < 64; b += blockDim.x) atomicAdd(&bins[b], local[b]);
}

extern "C" __global__ void atomics_all(int* i, unsigned* u, float* f, double* d) {
    int t = threadIdx.x;
    atomicMin(&i[0], -t);
    atomicMax(&i[1], t);
    atomicAnd(&i[2], ~(1 << (t % 31)));
    atomicOr(&i[3], 1 << (t % 31));
    atomicXor(&i[4], t);
    atomicExch(&i[5], 7);
    atomicCAS(&i[6], 0, t + 1);
    atomicInc(&u[0], 9u);
    atomicDec(&u[1], 9u);
    atomicAdd(&f[0], 0.5f);
    atomicAdd(&d[0], 0.25);
}

extern "C" __global__ void warp_ops(const int* in, unsigned* out) {
    int t = threadIdx.x;
    int v = in[t];
    unsigned ballot = __ballot_sync(0xffffffff, v > 0);
    int all = __all_sync(0xffffffff, v > -100);
    int any = __any_sync(0xffffffff, v > 1000);
    unsigned active = 0;
    if (t % 2 == 0) active = __activemask();
    unsigned m = __match_any_sync(0xffffffff, v % 4);
    int up = __shfl_up_sync(0xffffffff, v, 3);
    int x = __shfl_xor_sync(0xffffffff, v, 5);
    int idx = __shfl_sync(0xffffffff, v, 7);
    unsigned r = __reduce_add_sync(0xffffffff, (unsigned)v);
    out[t * 9 + 0] = ballot;
    out[t * 9 + 1] = all;
    out[t * 9 + 2] = any;
    out[t * 9 + 3] = active;
    out[t * 9 + 4] = m;
    out[t * 9 + 5] = up;
    out[t * 9 + 6] = x;
    out[t * 9 + 7] = idx;
    out[t * 9 + 8] = r;
}

extern "C" __global__ void bar_red(const int* in, int* out) {
    int c = __syncthreads_count(in[threadIdx.x] > 0);
    int a = __syncthreads_and(in[threadIdx.x] > -1000);
    int o = __syncthreads_or(in[threadIdx.x] > 5);
    out[threadIdx.x] = c * 100 + a * 10 + o;
}

extern "C" __global__ void clocks(long long* out) {
    long long a = clock64();
    unsigned lt, le;
    asm("mov.u32 %0, %%lanemask_lt;" : "=r"(lt));
    asm("mov.u32 %0, %%lanemask_le;" : "=r"(le));
    long long b = clock64();
    out[threadIdx.x * 3 + 0] = b - a;
    out[threadIdx.x * 3 + 1] = lt;
    out[threadIdx.x * 3 + 2] = le;
}

// Half-warp reductions with partial member masks inside divergent code.
extern "C" __global__ void half_warps(const int* in, int* out) {
    int t = threadIdx.x;
    int v = in[t];
    if ((t & 31) < 16) {
        for (int off = 8; off > 0; off /= 2) v += __shfl_down_sync(0x0000ffff, v, off, 16);
    } else {
        for (int off = 8; off > 0; off /= 2) v += __shfl_xor_sync(0xffff0000, v, off, 16);
    }
    out[t] = v;
}

// Warp-synchronous reduction through shared memory with __syncwarp.
extern "C" __global__ void syncwarp_reduce(const int* in, int* out) {
    __shared__ int s[64];
    int t = threadIdx.x, lane = t & 31;
    s[t] = in[t];
    __syncwarp();
    for (int off = 16; off > 0; off /= 2) {
        int v = lane < off ? s[t + off] : 0;
        __syncwarp();
        s[t] += v;
        __syncwarp();
    }
    if (lane == 0) out[t / 32] = s[t];
}

// Shuffles with a sub-warp width, for comparison with the CUDA documentation's rules.
extern "C" __global__ void shfl_width(const int* in, int* out, int delta, int width) {
    int t = threadIdx.x;
    int v = in[t];
    out[t * 3 + 0] = __shfl_up_sync(0xffffffff, v, delta, width);
    out[t * 3 + 1] = __shfl_down_sync(0xffffffff, v, delta, width);
    out[t * 3 + 2] = __shfl_sync(0xffffffff, v, delta, width);
}
