// Prints what the CUDA runtime answers in corner cases and what the device reports, one fact a
// line, and checks nothing: run natively on a GPU and under crum (scripts/gpu-smoke.sh compares
// the outputs), it shows where crum's answers differ from CUDA's. The corpus test only needs
// it to end with PASS on the emulated device.
#include "common.h"
#include <cstring>

__global__ void nop(int *x) { if (x) x[threadIdx.x] = 1; }
__global__ void big_shared(int *x) {
    extern __shared__ int sh[];
    sh[threadIdx.x] = 1;
    if (x) x[0] = sh[0];
}
static void host_fn(void *) {}

#define SAY(what, e) printf("%s: %s\n", what, cudaGetErrorName(e))

int main() {
    cudaDeviceProp p;
    CK(cudaGetDeviceProperties(&p, 0));
    printf("warpSize %d maxThreadsPerBlock %d maxGrid %d/%d/%d\n", p.warpSize, p.maxThreadsPerBlock,
           p.maxGridSize[0], p.maxGridSize[1], p.maxGridSize[2]);
    printf("concurrentManagedAccess %d hostNativeAtomicSupported %d pageableMemoryAccess %d\n",
           p.concurrentManagedAccess, p.hostNativeAtomicSupported, p.pageableMemoryAccess);
    printf("managedMemory %d unifiedAddressing %d cooperativeLaunch %d memoryPoolsSupported %d\n",
           p.managedMemory, p.unifiedAddressing, p.cooperativeLaunch, p.memoryPoolsSupported);
    int v = -1;
    CK(cudaDeviceGetAttribute(&v, cudaDevAttrMemoryPoolSupportedHandleTypes, 0));
    printf("MemoryPoolSupportedHandleTypes %d\n", v);
    size_t lim = 12345;
    SAY("get limit PersistingL2CacheSize", cudaDeviceGetLimit(&lim, cudaLimitPersistingL2CacheSize));
    printf("  = %zu (max %d)\n", lim, p.persistingL2CacheMaxSize);
    SAY("get limit StackSize", cudaDeviceGetLimit(&lim, cudaLimitStackSize));
    printf("  = %zu\n", lim);
    SAY("get limit PrintfFifoSize", cudaDeviceGetLimit(&lim, cudaLimitPrintfFifoSize));
    printf("  = %zu\n", lim);
    SAY("get limit MallocHeapSize", cudaDeviceGetLimit(&lim, cudaLimitMallocHeapSize));
    printf("  = %zu\n", lim);
    int n = -1;
    SAY("get device count", cudaGetDeviceCount(&n));
    SAY("set device count", cudaSetDevice(n));
    cudaGetLastError();

    // Launch configuration errors.
    nop<<<1, 2048>>>(nullptr);
    SAY("2048 threads per block", cudaGetLastError());
    nop<<<dim3(1, 65536), 1>>>(nullptr);
    SAY("grid y 65536", cudaGetLastError());
    nop<<<0, 1>>>(nullptr);
    SAY("grid 0", cudaGetLastError());
    big_shared<<<1, 32, 1 << 20>>>(nullptr);
    SAY("1 MiB dynamic shared", cudaGetLastError());
    big_shared<<<1, 32, p.sharedMemPerBlock + 4>>>(nullptr);
    SAY("dynamic shared over 48 KiB without the attribute", cudaGetLastError());
    SAY("sync after launch errors", cudaDeviceSynchronize());

    // Memory errors.
    int *d = nullptr, h = 0;
    SAY("malloc 0", cudaMalloc(&d, 0));
    printf("  pointer %s\n", d ? "non-null" : "null");
    SAY("free null", cudaFree(nullptr));
    SAY("free 0x1234", cudaFree((void *)0x1234));
    SAY("last error after bad free", cudaGetLastError());
    CK(cudaMalloc(&d, 256));
    CK(cudaFree(d));
    SAY("memcpy from freed", cudaMemcpy(&h, d, 4, cudaMemcpyDeviceToHost));
    SAY("memset freed", cudaMemset(d, 0, 4));
    SAY("free twice", cudaFree(d));
    void *huge = nullptr;
    SAY("malloc 1 PiB", cudaMalloc(&huge, (size_t)1 << 50));
    SAY("last error after failed malloc", cudaGetLastError());
    SAY("last error again", cudaGetLastError());
    cudaPointerAttributes pa;
    int on_stack = 0;
    SAY("pointer attributes of a stack address", cudaPointerGetAttributes(&pa, &on_stack));
    printf("  type %d\n", (int)pa.type);

    // Events.
    cudaEvent_t e0, e1, quiet;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    CK(cudaEventCreateWithFlags(&quiet, cudaEventDisableTiming));
    float ms = 0;
    SAY("elapsed of unrecorded events", cudaEventElapsedTime(&ms, e0, e1));
    SAY("query of an unrecorded event", cudaEventQuery(e0));
    CK(cudaEventRecord(e0));
    CK(cudaEventRecord(quiet));
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    SAY("elapsed with a timing-disabled event", cudaEventElapsedTime(&ms, e0, quiet));
    SAY("elapsed reversed", cudaEventElapsedTime(&ms, e1, e0));
    printf("  negative %d\n", ms <= 0);

    // Surfaces need arrays made for them.
    cudaChannelFormatDesc f = cudaCreateChannelDesc<float>();
    cudaArray_t plain;
    CK(cudaMallocArray(&plain, &f, 16, 16));
    cudaResourceDesc r;
    memset(&r, 0, sizeof r);
    r.resType = cudaResourceTypeArray;
    r.res.array.array = plain;
    cudaSurfaceObject_t surf = 0;
    SAY("surface on a plain array", cudaCreateSurfaceObject(&surf, &r));
    if (surf) cudaDestroySurfaceObject(surf);
    cudaGetLastError();

    // Stream capture: what invalidates it.
    cudaStream_t s, s2;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    cudaEvent_t fork, join;
    CK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
    CK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
    cudaStreamCaptureStatus st;
    cudaGraph_t g = nullptr;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    nop<<<1, 1, 0, s>>>(nullptr);
    CK(cudaEventRecord(fork, s));
    SAY("query of a captured event", cudaEventQuery(fork));
    SAY("  capturing stream", cudaStreamIsCapturing(s, &st));
    printf("  status %d\n", (int)st);
    SAY("  wait on the captured event", cudaStreamWaitEvent(s2, fork, 0));
    SAY("  end capture", cudaStreamEndCapture(s, &g));
    printf("  graph %s\n", g ? "made" : "none");
    if (g) cudaGraphDestroy(g);
    cudaGetLastError();
    g = nullptr;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    nop<<<1, 1, 0, s>>>(nullptr);
    SAY("sync of a capturing stream", cudaStreamSynchronize(s));
    SAY("  capturing stream", cudaStreamIsCapturing(s, &st));
    printf("  status %d\n", (int)st);
    SAY("  end capture", cudaStreamEndCapture(s, &g));
    if (g) cudaGraphDestroy(g);
    cudaGetLastError();
    g = nullptr;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    int *dm = nullptr;
    SAY("malloc during a global capture", cudaMalloc(&dm, 64));
    SAY("  capturing stream", cudaStreamIsCapturing(s, &st));
    printf("  status %d\n", (int)st);
    SAY("  end capture", cudaStreamEndCapture(s, &g));
    if (g) cudaGraphDestroy(g);
    if (dm) cudaFree(dm);
    cudaGetLastError();
    g = nullptr;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    SAY("host function in a capture", cudaLaunchHostFunc(s, host_fn, nullptr));
    SAY("legacy stream query during a capture", cudaStreamQuery(0));
    SAY("  end capture", cudaStreamEndCapture(s, &g));
    if (g) cudaGraphDestroy(g);
    cudaGetLastError();

    // Graph memory: when allocation nodes count.
    size_t used = 0, reserved = 0;
    auto mem = [&](const char *when) {
        CK(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrUsedMemCurrent, &used));
        CK(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrReservedMemCurrent, &reserved));
        printf("graph memory %s: used %s, reserved %s\n", when, used ? "> 0" : "0", reserved ? "> 0" : "0");
    };
    mem("at first");
    cudaGraph_t mg;
    CK(cudaGraphCreate(&mg, 0));
    cudaGraphNode_t an;
    cudaMemAllocNodeParams ap;
    memset(&ap, 0, sizeof ap);
    ap.poolProps.allocType = cudaMemAllocationTypePinned;
    ap.poolProps.location.type = cudaMemLocationTypeDevice;
    ap.poolProps.location.id = 0;
    ap.bytesize = 1 << 20;
    CK(cudaGraphAddMemAllocNode(&an, mg, nullptr, 0, &ap));
    mem("after adding an allocation node");
    cudaGraphExec_t ge;
    CK(cudaGraphInstantiate(&ge, mg, 0));
    mem("after instantiating");
    CK(cudaGraphLaunch(ge, s));
    CK(cudaStreamSynchronize(s));
    mem("after launching");
    CK(cudaFreeAsync(ap.dptr, s));
    CK(cudaStreamSynchronize(s));
    mem("after freeing");
    CK(cudaDeviceGraphMemTrim(0));
    mem("after trimming");
    CK(cudaGraphExecDestroy(ge));
    CK(cudaGraphDestroy(mg));

    cudaFuncAttributes fa;
    CK(cudaFuncGetAttributes(&fa, nop));
    printf("nop: maxThreadsPerBlock %d sharedSizeBytes %zu maxDynamicSharedSizeBytes %d\n", fa.maxThreadsPerBlock,
           fa.sharedSizeBytes, fa.maxDynamicSharedSizeBytes);
    int blocks = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, nop, 256, 0));
    printf("occupancy of nop at 256 threads: %d blocks per SM (max %d)\n", blocks, p.maxBlocksPerMultiProcessor);
    SAY("final sync", cudaDeviceSynchronize());
    printf("PASS\n");
    return 0;
}
