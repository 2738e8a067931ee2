// Included by both files of rdc_linked. With -rdc=true nvcc emits the template kernel and the
// template device function as `.weak` in each object; the linked program keeps one of each.
#pragma once

template <typename T> __device__ __noinline__ T mix(T a, T b) { return (a * 3 + b) % 1000003; }

template <typename T> __global__ void scatter_mix(T *a, T v, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) a[i] = mix(a[i], v + (T)(i & 7));
}
