// Compute-heavy kernel for scripts/bench-ptx.sh: integer hashing and float FMAs in a loop.
extern "C" __global__ void busy(float* out, int iters) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned h = i * 2654435761u;
    float a = i * 0.001f, b = 1.0001f;
    for (int k = 0; k < iters; ++k) {
        h ^= h << 13; h ^= h >> 17; h ^= h << 5;
        a = a * b + (float)(h & 255) * 0.0001f;
    }
    out[i] = a + (float)(h & 1);
}

// Memory-bound kernel with many small blocks: launch and block set-up overhead.
extern "C" __global__ void vadd(const float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}
