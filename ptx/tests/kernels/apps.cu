// Small application kernels: bitonic sort in shared memory, n-body forces with shared
// tiles, Mandelbrot escape counts, 2D convolution with a __constant__ filter, transpose.
extern "C" __global__ void bitonic_sort(int* data) {
    __shared__ int s[256];
    unsigned t = threadIdx.x;
    s[t] = data[blockIdx.x * 256 + t];
    __syncthreads();
    for (unsigned k = 2; k <= 256; k <<= 1) {
        for (unsigned j = k >> 1; j > 0; j >>= 1) {
            unsigned p = t ^ j;
            if (p > t) {
                bool up = (t & k) == 0;
                if ((s[t] > s[p]) == up) { int x = s[t]; s[t] = s[p]; s[p] = x; }
            }
            __syncthreads();
        }
    }
    data[blockIdx.x * 256 + t] = s[t];
}

extern "C" __global__ void nbody(const float4* pos, float3* acc, int n) {
    __shared__ float4 tile[64];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float4 me = pos[i];
    float3 a = {0.0f, 0.0f, 0.0f};
    for (int base = 0; base < n; base += 64) {
        tile[threadIdx.x] = pos[base + threadIdx.x];
        __syncthreads();
        for (int k = 0; k < 64; ++k) {
            float dx = tile[k].x - me.x, dy = tile[k].y - me.y, dz = tile[k].z - me.z;
            float d2 = dx * dx + dy * dy + dz * dz + 0.01f;
            float inv = rsqrtf(d2);
            float s = tile[k].w * inv * inv * inv;
            a.x += dx * s; a.y += dy * s; a.z += dz * s;
        }
        __syncthreads();
    }
    acc[i] = a;
}

extern "C" __global__ void mandelbrot(int* out, int w, int h, int max_iter) {
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= w || y >= h) return;
    double cr = -2.0 + 3.0 * x / w, ci = -1.5 + 3.0 * y / h, zr = 0, zi = 0;
    int it = 0;
    while (zr * zr + zi * zi < 4.0 && it < max_iter) {
        double t = zr * zr - zi * zi + cr;
        zi = 2.0 * zr * zi + ci;
        zr = t;
        ++it;
    }
    out[y * w + x] = it;
}

__constant__ float filt[9] = {0.0625f, 0.125f, 0.0625f, 0.125f, 0.25f, 0.125f, 0.0625f, 0.125f, 0.0625f};

extern "C" __global__ void conv2d(const float* in, float* out, int w, int h) {
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= w || y >= h) return;
    float s = 0.0f;
    for (int dy = -1; dy <= 1; ++dy)
        for (int dx = -1; dx <= 1; ++dx) {
            int xx = min(max(x + dx, 0), w - 1), yy = min(max(y + dy, 0), h - 1);
            s += filt[(dy + 1) * 3 + dx + 1] * in[yy * w + xx];
        }
    out[y * w + x] = s;
}

extern "C" __global__ void transpose(const float* in, float* out, int w, int h) {
    __shared__ float tile[16][17];
    int x = blockIdx.x * 16 + threadIdx.x, y = blockIdx.y * 16 + threadIdx.y;
    if (x < w && y < h) tile[threadIdx.y][threadIdx.x] = in[y * w + x];
    __syncthreads();
    x = blockIdx.y * 16 + threadIdx.x;
    y = blockIdx.x * 16 + threadIdx.y;
    if (x < h && y < w) out[y * h + x] = tile[threadIdx.x][threadIdx.y];
}
