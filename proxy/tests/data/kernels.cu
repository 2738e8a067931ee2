// Kernels of the backend conformance suite (proxy/tests/conformance.rs).
// Regenerate the committed binaries after editing (from the repository root):
//   eval "$(scripts/setup-cuda.sh --env)"
//   nvcc -fatbin -gencode arch=compute_80,code=[sm_80,compute_80] -gencode arch=compute_90,code=sm_90 \
//        -gencode arch=compute_100,code=sm_100 -gencode arch=compute_120,code=sm_120 \
//        proxy/tests/data/kernels.cu -o proxy/tests/data/kernels.fatbin
//   nvcc -ptx -arch=sm_80 proxy/tests/data/kernels.cu -o proxy/tests/data/kernels.ptx
// (machine code for the GPUs of the last generations: the PTX of a newer nvcc than the
// driver cannot be compiled by it, CUDA_ERROR_UNSUPPORTED_PTX_VERSION)
#include <cuda_runtime.h>

struct Mixed {
    char c;
    double d;
    int i;
};

__device__ int counter;
__managed__ int mcount = 5;
__device__ float table[4] = {1.0f, 2.0f, 3.0f, 4.0f};

// Every kind of parameter: integers of each width, float, double, a struct with padding and a
// vector type; the kernel writes each back as 64-bit words.
extern "C" __global__ void kinds(unsigned long long *out, char c, short s, int i, long long l,
                                 float f, double d, Mixed m, float4 v) {
    out[0] = (unsigned long long)(long long)c;
    out[1] = (unsigned long long)(long long)s;
    out[2] = (unsigned long long)(long long)i;
    out[3] = (unsigned long long)l;
    out[4] = __float_as_uint(f);
    out[5] = (unsigned long long)__double_as_longlong(d);
    out[6] = (unsigned long long)(long long)m.c;
    out[7] = (unsigned long long)__double_as_longlong(m.d);
    out[8] = (unsigned long long)(long long)m.i;
    out[9] = __float_as_uint(v.x) | ((unsigned long long)__float_as_uint(v.w) << 32);
}

extern "C" __global__ void fill(float *p, int n, float v) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = v + i;
}

extern "C" __global__ void reverse_shared(int *out) {
    extern __shared__ int sh[];
    sh[threadIdx.x] = threadIdx.x;
    __syncthreads();
    out[threadIdx.x] = sh[blockDim.x - 1 - threadIdx.x];
}

extern "C" __global__ void bump() { atomicAdd(&counter, 1); }

// Adds one per thread to a __managed__ variable.
extern "C" __global__ void bump_managed() { atomicAdd(&mcount, 1); }

extern "C" __global__ void scale_table(float k) { table[threadIdx.x] *= k; }

// Adds one to every element: run after a copy to check ordering on a stream.
extern "C" __global__ void incr(int *p, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] += 1;
}

// A block of the device heap (device-side malloc) holding v, through a device function.
__device__ __noinline__ int *heap_block(int v) {
    int *p = (int *)malloc(sizeof(int));
    if (p) *p = v;
    return p;
}

// Keeps a block of the device heap and stores its address: the program holds it.
extern "C" __global__ void heap_keep(int **out, int v) { *out = heap_block(v); }
