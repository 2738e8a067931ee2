// Memory pools: the device attributes that say they exist, the default pool, a created pool,
// cudaMallocAsync / cudaMallocFromPoolAsync / cudaFreeAsync, reuse of freed blocks, the
// release threshold (memory kept or given back at synchronization), cudaMemPoolTrimTo, the
// used/reserved attributes and their high-water marks, the current pool of the device, a
// maximum pool size, and the documented errors. Pool blocks live across the gates (so across
// restarts), cached ones too, and are reused and checked after them.
#include "common.h"
#include <cstdint>

__global__ void iota(int *a, int n, int k) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) a[i] = k * i; }
__global__ void add(int *c, const int *a, const int *b, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) c[i] = a[i] + b[i]; }

static uint64_t attr(cudaMemPool_t p, cudaMemPoolAttr a) {
    uint64_t v = 0;
    CK(cudaMemPoolGetAttribute(p, a, &v));
    return v;
}

static const int N = 1 << 18;  // 1 MiB of ints
static const size_t BYTES = N * sizeof(int);

static void check_sum(const int *dc, int k, const char *what) {
    static int h[N];
    CK(cudaMemcpy(h, dc, BYTES, cudaMemcpyDeviceToHost));
    for (int i = 0; i < N; i++)
        if (h[i] != k * i) { printf("FAIL %s: c[%d] = %d, want %d\n", what, i, h[i], k * i); exit(1); }
}

int main() {
    int v = 0;
    CK(cudaDeviceGetAttribute(&v, cudaDevAttrMemoryPoolsSupported, 0));
    EXPECT(v == 1);
    // Which handle types a pool can export depends on the device (an H200 says 9: POSIX
    // descriptors and fabric handles; crum exports none, 0).
    CK(cudaDeviceGetAttribute(&v, cudaDevAttrMemoryPoolSupportedHandleTypes, 0));
    EXPECT(v >= 0);
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    EXPECT(prop.memoryPoolsSupported == 1);

    cudaMemPool_t def, cur;
    CK(cudaDeviceGetDefaultMemPool(&def, 0));
    CK(cudaDeviceGetMemPool(&cur, 0));
    EXPECT(def != nullptr && cur == def);
    EXPECT(cudaDeviceGetDefaultMemPool(&cur, 1) == cudaErrorInvalidDevice);
    cudaGetLastError();
    EXPECT(attr(def, cudaMemPoolAttrReleaseThreshold) == 0);
    int reuse = -1;
    CK(cudaMemPoolGetAttribute(def, cudaMemPoolReuseAllowOpportunistic, &reuse));
    EXPECT(reuse == 1);
    cudaMemAccessFlags fl;
    cudaMemLocation loc = {};
    loc.type = cudaMemLocationTypeDevice; loc.id = 0;
    CK(cudaMemPoolGetAccess(&fl, def, &loc));
    EXPECT(fl == cudaMemAccessFlagsProtReadWrite);

    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    const int B = 256, G = N / B;

    // Keep everything freed: the threshold is the maximum.
    uint64_t keep = UINT64_MAX;
    CK(cudaMemPoolSetAttribute(def, cudaMemPoolAttrReleaseThreshold, &keep));
    EXPECT(attr(def, cudaMemPoolAttrReleaseThreshold) == UINT64_MAX);
    int *a, *b, *c;
    CK(cudaMallocAsync(&a, BYTES, s));
    CK(cudaMallocAsync(&b, BYTES, s));
    CK(cudaMallocAsync(&c, BYTES, s));
    EXPECT(attr(def, cudaMemPoolAttrUsedMemCurrent) >= 3 * BYTES);
    EXPECT(attr(def, cudaMemPoolAttrReservedMemCurrent) >= attr(def, cudaMemPoolAttrUsedMemCurrent));
    iota<<<G, B, 0, s>>>(a, N, 1);
    iota<<<G, B, 0, s>>>(b, N, 2);
    add<<<G, B, 0, s>>>(c, a, b, N);
    GATE(1);  // pool blocks with kernels queued on them
    CK(cudaStreamSynchronize(s));
    check_sum(c, 3, "default pool");
    cudaPointerAttributes pa;
    CK(cudaPointerGetAttributes(&pa, c));
    EXPECT(pa.type == cudaMemoryTypeDevice);

    // b goes back to the pool and stays reserved; the next allocation of that size reuses it.
    uint64_t reserved = attr(def, cudaMemPoolAttrReservedMemCurrent);
    CK(cudaFreeAsync(b, s));
    CK(cudaStreamSynchronize(s));
    EXPECT(attr(def, cudaMemPoolAttrUsedMemCurrent) == reserved - BYTES);
    EXPECT(attr(def, cudaMemPoolAttrReservedMemCurrent) == reserved);
    GATE(2);  // a freed block cached in the pool
    int *b2;
    CK(cudaMallocAsync(&b2, BYTES, s));
    EXPECT(b2 == b);
    iota<<<G, B, 0, s>>>(b2, N, 5);
    add<<<G, B, 0, s>>>(c, a, b2, N);
    CK(cudaStreamSynchronize(s));
    check_sum(c, 6, "reused block");

    // High-water marks reset to the current value by setting 0; current values are read-only.
    uint64_t zero = 0;
    CK(cudaMemPoolSetAttribute(def, cudaMemPoolAttrUsedMemHigh, &zero));
    EXPECT(attr(def, cudaMemPoolAttrUsedMemHigh) == attr(def, cudaMemPoolAttrUsedMemCurrent));
    EXPECT(cudaMemPoolSetAttribute(def, cudaMemPoolAttrUsedMemCurrent, &zero) == cudaErrorInvalidValue);
    cudaGetLastError();

    // Threshold 0: freed memory goes back at the next synchronization.
    CK(cudaMemPoolSetAttribute(def, cudaMemPoolAttrReleaseThreshold, &zero));
    CK(cudaFreeAsync(a, s));
    CK(cudaFreeAsync(b2, s));
    CK(cudaFreeAsync(c, s));
    CK(cudaStreamSynchronize(s));
    EXPECT(attr(def, cudaMemPoolAttrUsedMemCurrent) == 0);
    EXPECT(attr(def, cudaMemPoolAttrReservedMemCurrent) == 0);
    EXPECT(attr(def, cudaMemPoolAttrReservedMemHigh) >= 3 * BYTES);

    // A created pool, made the device's current pool for a while.
    cudaMemPoolProps props = {};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = 0;
    cudaMemPool_t pool;
    CK(cudaMemPoolCreate(&pool, &props));
    EXPECT(pool != def);
    CK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
    int *x, *y, *z;
    CK(cudaMallocFromPoolAsync(&x, BYTES, pool, s));
    CK(cudaDeviceSetMemPool(0, pool));
    CK(cudaDeviceGetMemPool(&cur, 0));
    EXPECT(cur == pool);
    CK(cudaMallocAsync(&y, BYTES, s));
    CK(cudaDeviceSetMemPool(0, def));
    EXPECT(attr(pool, cudaMemPoolAttrUsedMemCurrent) >= 2 * BYTES);
    EXPECT(attr(def, cudaMemPoolAttrUsedMemCurrent) == 0);
    CK(cudaMallocFromPoolAsync(&z, BYTES, pool, s));
    iota<<<G, B, 0, s>>>(x, N, 3);
    iota<<<G, B, 0, s>>>(y, N, 4);
    add<<<G, B, 0, s>>>(z, x, y, N);
    CK(cudaStreamSynchronize(s));
    GATE(3);
    check_sum(z, 7, "created pool");
    CK(cudaFreeAsync(x, s));
    CK(cudaFree(y));  // a synchronous free of a pool block
    CK(cudaFreeAsync(z, s));
    CK(cudaStreamSynchronize(s));
    EXPECT(attr(pool, cudaMemPoolAttrUsedMemCurrent) == 0);
    EXPECT(attr(pool, cudaMemPoolAttrReservedMemCurrent) >= 2 * BYTES);
    CK(cudaMemPoolTrimTo(pool, 0));
    EXPECT(attr(pool, cudaMemPoolAttrReservedMemCurrent) == 0);
    CK(cudaMemPoolDestroy(pool));

    // A pool of at most 1 MiB refuses more; the default pool cannot be destroyed; pools
    // with IPC handle types are not supported here.
    props.maxSize = BYTES;
    cudaMemPool_t small;
    CK(cudaMemPoolCreate(&small, &props));
    int *big;
    EXPECT(cudaMallocFromPoolAsync(&big, 2 * BYTES, small, s) == cudaErrorMemoryAllocation);
    cudaGetLastError();
    CK(cudaMallocFromPoolAsync(&big, BYTES, small, s));
    CK(cudaFreeAsync(big, s));
    CK(cudaMemPoolDestroy(small));
    EXPECT(cudaMemPoolDestroy(def) == cudaErrorInvalidValue);
    cudaGetLastError();
    props.maxSize = 0;
    props.handleTypes = cudaMemHandleTypePosixFileDescriptor;
    EXPECT(cudaMemPoolCreate(&small, &props) == cudaErrorNotSupported);
    cudaGetLastError();
    CK(cudaStreamDestroy(s));
    printf("pools: default and created, blocks reused after free\n");
    printf("PASS\n");
    return 0;
}
