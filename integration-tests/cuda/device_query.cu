// Device queries: count, properties, attributes, memory info, pointer attributes, versions,
// function attributes and occupancy. Printed values are only those that are stable.
#include "common.h"
#include <cuda_profiler_api.h>  // installed with the toolkit (nvidia-cuda-profiler-api)
__global__ void k(float *x) { x[threadIdx.x] *= 2; }
int main() {
    int n = 0, dev = -1, rt = 0, drv = 0;
    CK(cudaGetDeviceCount(&n)); EXPECT(n >= 1);
    CK(cudaSetDevice(0)); CK(cudaGetDevice(&dev)); EXPECT(dev == 0);
    // No profiler is attached: start and stop succeed and change nothing, as in CUDA.
    CK(cudaProfilerStart()); CK(cudaProfilerStop());
    CK(cudaRuntimeGetVersion(&rt)); CK(cudaDriverGetVersion(&drv));
    EXPECT(rt > 0 && drv >= rt / 1000 * 1000 - 1000);
    cudaDeviceProp p;
    CK(cudaGetDeviceProperties(&p, 0));
    EXPECT(p.name[0] != 0);
    EXPECT(p.warpSize == 32 && p.maxThreadsPerBlock >= 1024 && p.totalGlobalMem > 0);
    EXPECT(p.major >= 7 && p.multiProcessorCount > 0 && p.sharedMemPerBlock >= 48 * 1024);
    int v = 0;
    CK(cudaDeviceGetAttribute(&v, cudaDevAttrWarpSize, 0)); EXPECT(v == 32);
    CK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxThreadsPerBlock, 0)); EXPECT(v == p.maxThreadsPerBlock);
    CK(cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, 0)); EXPECT(v == p.multiProcessorCount);
    CK(cudaDeviceGetAttribute(&v, cudaDevAttrComputeCapabilityMajor, 0)); EXPECT(v == p.major);
    size_t fr = 0, tot = 0, fr2 = 0;
    CK(cudaMemGetInfo(&fr, &tot)); EXPECT(tot > 0 && fr <= tot);
    float *d, *h, *m;
    CK(cudaMalloc(&d, 64 << 20));
    GATE(1);
    CK(cudaMemGetInfo(&fr2, &tot)); EXPECT(fr2 <= fr);
    CK(cudaMallocHost(&h, 4096)); CK(cudaMallocManaged(&m, 4096));
    GATE(2);
    cudaPointerAttributes a;
    CK(cudaPointerGetAttributes(&a, d)); EXPECT(a.type == cudaMemoryTypeDevice && a.devicePointer == d);
    CK(cudaPointerGetAttributes(&a, (char *)d + 100)); EXPECT(a.type == cudaMemoryTypeDevice);
    CK(cudaPointerGetAttributes(&a, h)); EXPECT(a.type == cudaMemoryTypeHost);
    CK(cudaPointerGetAttributes(&a, m)); EXPECT(a.type == cudaMemoryTypeManaged);
    int stackv = 0;
    CK(cudaPointerGetAttributes(&a, &stackv)); EXPECT(a.type == cudaMemoryTypeUnregistered);
    cudaFuncAttributes fa;
    CK(cudaFuncGetAttributes(&fa, k)); EXPECT(fa.maxThreadsPerBlock > 0);
    int blocks = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, k, 128, 0)); EXPECT(blocks >= 1);
    size_t lim = 0;
    CK(cudaDeviceGetLimit(&lim, cudaLimitStackSize)); EXPECT(lim > 0);
    // Every attribute CUDA 13 defines answers (numbers the header skips or reserves aside):
    // texture and surface limits, NUMA and locality attributes answered
    // cudaErrorInvalidValue before.
    const int skip[] = {44, 92, 93, 94, 96, 102, 103, 104, 105, 107, 110, 122, 123, 124, 127, 128, 129,
                        132, 136, 137, 141, 145, 146, 152, 153, 154, 155, 156, 158, 159};
    int answered = 0;
    for (int a = 1; a <= 160; a++) {
        bool skipped = false;
        for (int s : skip) skipped |= s == a;
        if (skipped) continue;
        cudaError_t e = cudaDeviceGetAttribute(&v, (cudaDeviceAttr)a, 0);
        // A driver older than the runtime does not know the newest ones (a GPU with driver
        // 580, CUDA 13.0, answered cudaErrorInvalidValue for 148).
        if (e == cudaErrorInvalidValue && a >= 146 && drv < rt) {
            (void)cudaGetLastError();
            continue;
        }
        if (e != cudaSuccess) printf("attribute %d: %s\n", a, cudaGetErrorName(e));
        EXPECT(e == cudaSuccess);
        answered++;
    }
    EXPECT(answered == 130 || drv < rt);
    CK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxTexture1DLinearWidth, 0));
    size_t lin = 0;
    cudaChannelFormatDesc f4 = cudaCreateChannelDesc<float4>(), odd = {12, 0, 0, 0, cudaChannelFormatKindFloat};
    CK(cudaDeviceGetTexture1DLinearMaxWidth(&lin, &f4, 0)); EXPECT(lin == (size_t)v && lin > 0);
    EXPECT(cudaDeviceGetTexture1DLinearMaxWidth(&lin, &odd, 0) == cudaErrorInvalidChannelDescriptor);
    EXPECT(cudaDeviceGetTexture1DLinearMaxWidth(&lin, &f4, 1) == cudaErrorInvalidDevice);
    (void)cudaGetLastError();
    // Documented absences, with the attributes a program checks first.
    // (A GPU may have them: an H200 reports concurrent managed access.)
    CK(cudaDeviceGetAttribute(&v, cudaDevAttrConcurrentManagedAccess, 0));
    cudaMemLocation loc;
    if (v == 0) EXPECT(cudaMemGetLocationInfo(m, 4096, 4096, 0, &loc) == cudaErrorNotSupported);
    (void)cudaGetLastError();
    GATE(3);
    CK(cudaFree(d)); CK(cudaFreeHost(h)); CK(cudaFree(m));
    CK(cudaDeviceSynchronize());
    printf("devices>=1 warp %d\n", p.warpSize);
    printf("PASS\n");
    return 0;
}
