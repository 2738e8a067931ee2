// The driver API's pointer and managed-range calls, recapture and per-thread variants (issue
// 13): every pointer attribute crum answers (cuPointerGetAttribute[s]) for device memory of
// the primary and of a created context, pinned, registered, managed, pool and VMM-mapped
// memory, a reserved VMM range with nothing mapped, and a host pointer CUDA never saw; buffer
// ids unique and never reused; SYNC_MEMOPS set and read; advice set through cuMemAdvise (and
// its CUDA 11 form found by cuGetProcAddress) and read back through cuMemRangeGetAttribute[s];
// prefetches (both forms); a stream captured into a graph, recaptured through the driver with
// a callback that is given CUgraphNodeParams, and the executable graph updated; the `_ptsz`
// and `_ptds` variants found by dlsym (and by cuGetProcAddress's per-thread flag) on this
// thread's default stream, which captures where the legacy stream cannot. Everything is
// checked on the CPU before the first gate and again after each of the three gates, so a
// restart must keep buffer ids, contexts, pools, mappings, advice, graphs and the per-thread
// stream. Checked; PASS.
#include "driver.h"
#include "driver_ptx.h"
#include <cudaTypedefs.h>
#include <thread>
#include <vector>

#define FUNCS(X) X(cuCtxCreate) X(cuCtxPopCurrent) X(cuCtxDestroy) X(cuCtxSynchronize) X(cuLaunchKernel) \
    X(cuMemAlloc) X(cuMemFree) X(cuMemAllocHost) X(cuMemFreeHost) X(cuMemHostRegister) X(cuMemHostUnregister) \
    X(cuMemAllocManaged) X(cuMemPoolCreate) X(cuMemPoolDestroy) X(cuMemAllocFromPoolAsync) X(cuMemFreeAsync) \
    X(cuStreamCreate) X(cuStreamSynchronize) X(cuStreamDestroy) X(cuStreamIsCapturing) \
    X(cuMemGetAllocationGranularity) X(cuMemAddressReserve) X(cuMemAddressFree) X(cuMemCreate) X(cuMemRelease) \
    X(cuMemMap) X(cuMemUnmap) X(cuMemSetAccess) X(cuPointerGetAttribute) X(cuPointerGetAttributes) \
    X(cuPointerSetAttribute) X(cuMemAdvise) X(cuMemPrefetchAsync) X(cuMemRangeGetAttribute) \
    X(cuMemRangeGetAttributes) X(cuMemcpyDtoH) X(cuMemcpyDtoDAsync) X(cuMemcpyHtoD) X(cuMemsetD32Async) X(cuStreamBeginCapture) \
    X(cuStreamEndCapture) X(cuStreamBeginRecaptureToGraph) X(cuGraphInstantiate) X(cuGraphLaunch) \
    X(cuGraphExecUpdate) X(cuGraphExecDestroy) X(cuGraphDestroy) X(cuGetProcAddress)
FUNCS(DRIVER)

static CUfunction axpb_f;
static const unsigned N = 4096;

static void axpb(CUdeviceptr p, unsigned n, unsigned a, unsigned b, CUstream s) {
    unsigned stride = 1;
    void *params[] = {&p, &n, &stride, &a, &b};
    DRV(p_cuLaunchKernel(axpb_f, (n + 255) / 256, 1, 1, 256, 1, 1, 0, s, params, nullptr));
}

// `n` words at `d`: word i is `base + i`.
static void check_words(CUdeviceptr d, unsigned n, unsigned base, const char *what) {
    std::vector<unsigned> h(n);
    DRV(p_cuMemcpyDtoH(h.data(), d, n * 4));
    for (unsigned i = 0; i < n; i++)
        if (h[i] != base + i) {
            printf("FAIL %s: word %u = %u, want %u\n", what, i, h[i], base + i);
            exit(1);
        }
}

// The memory under test.
enum { DEV, DEV_CTX, PINNED, REGISTERED, MANAGED, POOLED, MAPPED_VMM, KINDS };
static const char *NAMES[KINDS] = {"device", "device (created context)", "pinned", "registered", "managed", "pool", "VMM"};
static CUdeviceptr mem[KINDS];
static size_t len[KINDS];
static unsigned long long ids[KINDS];
static CUcontext primary, created;
static CUmemoryPool pool;
static CUdeviceptr va;  // a reserved range of 2 granules, the first one mapped
static size_t gran;
static int unknown_host_word = 42;
// Under crum (`crum run` sets CRUM_RUN): also what a GPU answers differently — a cuMemAlloc
// block is legacy-IPC capable there, and pool blocks and small allocations lie in larger
// ranges and mappings of the driver's; a reserved range with nothing mapped is described.
static bool under_crum;

template <class T> static T attr(CUpointer_attribute a, CUdeviceptr p) {
    T v{};
    DRV(p_cuPointerGetAttribute(&v, a, p));
    return v;
}

// Every attribute of every kind of memory, as it must be before and after each gate.
static void check_pointers(const char *when) {
    for (int k = 0; k < KINDS; k++) {
        CUdeviceptr p = mem[k] + 16;
        bool host = k == PINNED || k == REGISTERED, managed = k == MANAGED;
        CUcontext want_ctx = k == DEV_CTX ? created : primary;
        if (attr<CUcontext>(CU_POINTER_ATTRIBUTE_CONTEXT, p) != want_ctx) { printf("FAIL %s: %s context\n", when, NAMES[k]); exit(1); }
        unsigned type = attr<unsigned>(CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p);
        if (type != (host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE)) { printf("FAIL %s: %s memory type %u\n", when, NAMES[k], type); exit(1); }
        EXPECT(attr<CUdeviceptr>(CU_POINTER_ATTRIBUTE_DEVICE_POINTER, p) == p);
        void *hp = nullptr;
        CUresult r = p_cuPointerGetAttribute(&hp, CU_POINTER_ATTRIBUTE_HOST_POINTER, p);
        if (host || managed) EXPECT(r == CUDA_SUCCESS && hp == (void *)p);
        else EXPECT(r == CUDA_ERROR_INVALID_VALUE);
        // Booleans read into a zeroed unsigned: right whether one byte or four are written.
        EXPECT(attr<unsigned>(CU_POINTER_ATTRIBUTE_IS_MANAGED, p) == (unsigned)managed);
        EXPECT(attr<int>(CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p) == 0);
        EXPECT(attr<unsigned>(CU_POINTER_ATTRIBUTE_MAPPED, p) == 1);
        if (under_crum || (k != DEV && k != DEV_CTX)) EXPECT(attr<unsigned>(CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, p) == 0);
        EXPECT(attr<unsigned long long>(CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES, p) == 0);
        unsigned long long id = attr<unsigned long long>(CU_POINTER_ATTRIBUTE_BUFFER_ID, p);
        if (!ids[k]) ids[k] = id;
        if (id != ids[k]) { printf("FAIL %s: %s buffer id %llu, was %llu\n", when, NAMES[k], id, ids[k]); exit(1); }
        for (int j = 0; j < k; j++) EXPECT(ids[j] != ids[k]);
        CUmemoryPool mp = attr<CUmemoryPool>(CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, p);
        EXPECT(mp == (k == POOLED ? pool : nullptr));
        EXPECT(attr<unsigned>(CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, p) == (unsigned)(k == DEV_CTX));
        CUdeviceptr start = attr<CUdeviceptr>(CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, p);
        size_t size = attr<size_t>(CU_POINTER_ATTRIBUTE_RANGE_SIZE, p);
        CUdeviceptr mbase = attr<CUdeviceptr>(CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR, p);
        size_t msize = attr<size_t>(CU_POINTER_ATTRIBUTE_MAPPING_SIZE, p);
        if (k == MAPPED_VMM) EXPECT(start == va && size == 2 * gran && mbase == va && msize == gran);
        else if (under_crum) EXPECT(start == mem[k] && size >= len[k] && mbase == mem[k] && msize == size);

        // All at once agrees.
        CUpointer_attribute as[] = {CU_POINTER_ATTRIBUTE_CONTEXT, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                    CU_POINTER_ATTRIBUTE_BUFFER_ID, CU_POINTER_ATTRIBUTE_IS_MANAGED};
        CUcontext c = nullptr;
        unsigned t = 0, m = 0;
        unsigned long long b = 0;
        void *data[] = {&c, &t, &b, &m};
        DRV(p_cuPointerGetAttributes(4, as, data, p));
        EXPECT(c == want_ctx && t == type && b == id && m == (unsigned)managed);
    }
    // The reserved half with nothing mapped: a range, not mapped; no memory type.
    CUdeviceptr hole = va + gran + 4;
    unsigned type;
    if (under_crum) {
        EXPECT(attr<unsigned>(CU_POINTER_ATTRIBUTE_MAPPED, hole) == 0);
        EXPECT(attr<CUdeviceptr>(CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, hole) == va);
        EXPECT(p_cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, hole) == CUDA_ERROR_INVALID_VALUE);
    }
    // A host pointer CUDA never saw: each attribute alone is an error; all at once, defaults.
    CUdeviceptr unknown = (CUdeviceptr)&unknown_host_word;
    CUcontext c;
    EXPECT(p_cuPointerGetAttribute(&c, CU_POINTER_ATTRIBUTE_CONTEXT, unknown) == CUDA_ERROR_INVALID_VALUE);
    EXPECT(p_cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, unknown) == CUDA_ERROR_INVALID_VALUE);
    CUpointer_attribute as[] = {CU_POINTER_ATTRIBUTE_CONTEXT, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                CU_POINTER_ATTRIBUTE_DEVICE_POINTER, CU_POINTER_ATTRIBUTE_IS_MANAGED};
    c = (CUcontext)0x1;
    unsigned t = 7, m = 7;
    CUdeviceptr d = 7;
    void *data[] = {&c, &t, &d, &m};
    DRV(p_cuPointerGetAttributes(4, as, data, unknown));
    EXPECT(c == nullptr && t == 0 && d == 0 && m == 0);
    // An attribute crum does not answer.
    CUDA_POINTER_ATTRIBUTE_P2P_TOKENS tokens;
    EXPECT(p_cuPointerGetAttribute(&tokens, CU_POINTER_ATTRIBUTE_P2P_TOKENS, mem[DEV]) == CUDA_ERROR_INVALID_VALUE);
}

// A new allocation never gets an id handed out before, even at a freed one's address.
static void check_new_ids() {
    CUdeviceptr p;
    DRV(p_cuMemAlloc(&p, 4096));
    unsigned long long a = attr<unsigned long long>(CU_POINTER_ATTRIBUTE_BUFFER_ID, p);
    DRV(p_cuMemFree(p));
    DRV(p_cuMemAlloc(&p, 4096));
    unsigned long long b = attr<unsigned long long>(CU_POINTER_ATTRIBUTE_BUFFER_ID, p);
    DRV(p_cuMemFree(p));
    EXPECT(a != b);
    for (int k = 0; k < KINDS; k++) EXPECT(ids[k] != a && ids[k] != b);
}

static const size_t PART = 64 << 10;  // the managed allocation is 4 parts

static int range_int(CUmem_range_attribute a, int part) {
    int v = 99;
    DRV(p_cuMemRangeGetAttribute(&v, 4, a, mem[MANAGED] + part * PART, PART));
    return v;
}

// The advice and prefetches given before the first gate, read back.
static void check_advice(const char *when) {
    if (range_int(CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, 0) != 1) { printf("FAIL %s: read mostly\n", when); exit(1); }
    EXPECT(range_int(CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, 1) == 0);
    EXPECT(range_int(CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION, 0) == CU_DEVICE_CPU);
    EXPECT(range_int(CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_TYPE, 0) == CU_MEM_LOCATION_TYPE_HOST);
    EXPECT(range_int(CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION, 1) == 0);  // by the CUDA 11 form
    EXPECT(range_int(CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, 2) == 0);
    EXPECT(range_int(CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, 3) == CU_DEVICE_CPU);  // the CUDA 11 form
    int by[2] = {99, 99}, mostly = 99, pref = 99;
    void *data[] = {by, &mostly, &pref};
    size_t sizes[] = {sizeof by, 4, 4};
    CUmem_range_attribute as[] = {CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY, CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY,
                                  CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION};
    DRV(p_cuMemRangeGetAttributes(data, sizes, as, 3, mem[MANAGED], PART));
    EXPECT(by[0] == 0 && by[1] == CU_DEVICE_INVALID && mostly == 1 && pref == CU_DEVICE_CPU);
    // Not managed memory: no range attributes, no advice.
    int v;
    EXPECT(p_cuMemRangeGetAttribute(&v, 4, CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, mem[DEV], 64) == CUDA_ERROR_INVALID_VALUE);
    CUmemLocation dev0 = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
    EXPECT(p_cuMemAdvise(mem[DEV], 64, CU_MEM_ADVISE_SET_READ_MOSTLY, dev0) == CUDA_ERROR_INVALID_VALUE);
}

// The recapture callback's record: what it was given.
struct Seen {
    int calls, kernels, memsets, copies, eligible;
    unsigned memset_was, memset_now, a_was, a_now;
    size_t copy_was, copy_now;
    CUgraphNode nodes[4];
};

static CUdeviceptr work, copied;  // N words each

static CUresult CUDA_CB on_change(void *data, CUgraphNode node, const CUgraphNodeParams *was,
                                  const CUgraphNodeParams *now, CUgraphRecaptureStatus status) {
    Seen *s = (Seen *)data;
    if (s->calls < 4) s->nodes[s->calls] = node;
    s->calls++;
    if (was->type != now->type) return CUDA_ERROR_INVALID_VALUE;
    if (now->type == CU_GRAPH_NODE_TYPE_MEMSET) {
        s->memsets++;
        s->memset_was = was->memset.value;
        s->memset_now = now->memset.value;
    }
    if (now->type == CU_GRAPH_NODE_TYPE_KERNEL) {
        s->kernels++;
        // A CUDA_KERNEL_NODE_PARAMS_v3: the function and its arguments (a is the 4th).
        if (now->kernel.func != axpb_f || now->kernel.gridDimX != N / 256 || now->kernel.blockDimX != 256) return CUDA_ERROR_INVALID_VALUE;
        s->a_was = *(unsigned *)was->kernel.kernelParams[3];
        s->a_now = *(unsigned *)now->kernel.kernelParams[3];
    }
    if (now->type == CU_GRAPH_NODE_TYPE_MEMCPY) {
        // A CUDA_MEMCPY3D (the runtime's node has a cudaMemcpy3DParms there): work to copied.
        const CUDA_MEMCPY3D &c = now->memcpy.copyParams;
        if (c.srcDevice != work || c.dstDevice != copied || c.Height != 1 || c.Depth != 1 ||
            (c.srcMemoryType != CU_MEMORYTYPE_DEVICE && c.srcMemoryType != CU_MEMORYTYPE_UNIFIED))
            return CUDA_ERROR_INVALID_VALUE;
        s->copies++;
        s->copy_was = was->memcpy.copyParams.WidthInBytes;
        s->copy_now = c.WidthInBytes;
    }
    if (status == CU_GRAPH_RECAPTURE_ELIGIBLE_FOR_UPDATE) s->eligible++;
    return CUDA_SUCCESS;
}

static CUstream stream;
static CUgraph graph;
static CUgraphExec exec;
// y = memset(v); y = y*a + b + i; the first v words of y copied
static void capture_work(unsigned v, unsigned a, unsigned b) {
    DRV(p_cuMemsetD32Async(work, v, N, stream));
    axpb(work, N, a, b, stream);
    DRV(p_cuMemcpyDtoDAsync(copied, work, v * 4, stream));
}

// The graph recaptured through the driver with new values; the callback sees both nodes
// change, the executable graph is updated and launched.
static void recapture(unsigned v, unsigned a, unsigned b, unsigned v_was, unsigned a_was, const char *when) {
    Seen seen = {};
    DRV(p_cuStreamBeginRecaptureToGraph(stream, CU_STREAM_CAPTURE_MODE_GLOBAL, graph, on_change, &seen));
    capture_work(v, a, b);
    CUgraph out;
    DRV(p_cuStreamEndCapture(stream, &out));
    EXPECT(out == graph);
    if (seen.calls != 3 || seen.kernels != 1 || seen.memsets != 1 || seen.copies != 1 || seen.eligible != 3) {
        printf("FAIL %s: callback calls %d kernels %d memsets %d copies %d eligible %d\n", when, seen.calls, seen.kernels,
               seen.memsets, seen.copies, seen.eligible);
        exit(1);
    }
    EXPECT(seen.memset_was == v_was && seen.memset_now == v && seen.a_was == a_was && seen.a_now == a);
    EXPECT(seen.copy_was == v_was * 4 && seen.copy_now == v * 4);
    CUgraphExecUpdateResultInfo info;
    DRV(p_cuGraphExecUpdate(exec, graph, &info));
    EXPECT(info.result == CU_GRAPH_EXEC_UPDATE_SUCCESS);
    DRV(p_cuGraphLaunch(exec, stream));
    DRV(p_cuStreamSynchronize(stream));
    check_words(work, N, v * a + b, when);
    check_words(copied, v, v * a + b, when);
}

// The per-thread variants, by their own names.
#define PT_FUNCS(X) X(cuMemsetD32Async_ptsz, cuMemsetD32Async) X(cuMemcpyHtoDAsync_v2_ptsz, cuMemcpyHtoDAsync) \
    X(cuMemcpyDtoH_v2_ptds, cuMemcpyDtoH) X(cuMemsetD32_v2_ptds, cuMemsetD32) X(cuLaunchKernel_ptsz, cuLaunchKernel) \
    X(cuStreamSynchronize_ptsz, cuStreamSynchronize) X(cuStreamQuery_ptsz, cuStreamQuery) \
    X(cuStreamBeginCapture_v2_ptsz, cuStreamBeginCapture) X(cuStreamEndCapture_ptsz, cuStreamEndCapture) \
    X(cuStreamIsCapturing_ptsz, cuStreamIsCapturing) X(cuGraphLaunch_ptsz, cuGraphLaunch) \
    X(cuMemPrefetchAsync_v2_ptsz, cuMemPrefetchAsync) X(cuStreamBeginRecaptureToGraph_ptsz, cuStreamBeginRecaptureToGraph)
#define PT_DECL(v, f) static decltype(&f) pt_##v;
#define PT_LOAD(v, f) pt_##v = (decltype(&f))drv_sym(#v);
PT_FUNCS(PT_DECL)

static CUgraph pt_graph;
static CUgraphExec pt_exec;

// This thread's default stream (stream 0 of the `_ptsz` forms, CU_STREAM_PER_THREAD of the
// plain ones) captures, where the legacy stream cannot.
static void per_thread_capture() {
    EXPECT(p_cuStreamBeginCapture(0, CU_STREAM_CAPTURE_MODE_RELAXED) != CUDA_SUCCESS);  // the legacy stream
    DRV(pt_cuStreamBeginCapture_v2_ptsz(0, CU_STREAM_CAPTURE_MODE_RELAXED));
    CUstreamCaptureStatus st;
    DRV(pt_cuStreamIsCapturing_ptsz(0, &st));
    EXPECT(st == CU_STREAM_CAPTURE_STATUS_ACTIVE);
    DRV(p_cuStreamIsCapturing(CU_STREAM_PER_THREAD, &st));
    EXPECT(st == CU_STREAM_CAPTURE_STATUS_ACTIVE);
    DRV(pt_cuMemsetD32Async_ptsz(work, 11, N, 0));
    unsigned a = 3, b = 4, n = N, stride = 1;
    void *params[] = {&work, &n, &stride, &a, &b};
    DRV(pt_cuLaunchKernel_ptsz(axpb_f, N / 256, 1, 1, 256, 1, 1, 0, 0, params, nullptr));
    DRV(pt_cuStreamEndCapture_ptsz(0, &pt_graph));
    DRV(p_cuGraphInstantiate(&pt_exec, pt_graph, 0));
}

// Another thread's default stream is its own: it does not capture while this thread's does,
// and captures while this thread's goes on capturing.
static void other_thread_capture() {
    DRV(pt_cuStreamBeginCapture_v2_ptsz(0, CU_STREAM_CAPTURE_MODE_RELAXED));
    std::thread t([] {
        CUstreamCaptureStatus st;
        DRV(pt_cuStreamIsCapturing_ptsz(0, &st));
        EXPECT(st == CU_STREAM_CAPTURE_STATUS_NONE);
        DRV(pt_cuStreamBeginCapture_v2_ptsz(0, CU_STREAM_CAPTURE_MODE_RELAXED));
        DRV(pt_cuMemsetD32Async_ptsz(work, 1, N, 0));
        CUgraph g;
        DRV(pt_cuStreamEndCapture_ptsz(0, &g));
        DRV(p_cuGraphDestroy(g));
    });
    t.join();
    CUstreamCaptureStatus st;
    DRV(pt_cuStreamIsCapturing_ptsz(0, &st));
    EXPECT(st == CU_STREAM_CAPTURE_STATUS_ACTIVE);
    CUgraph g;
    DRV(pt_cuStreamEndCapture_ptsz(0, &g));
    DRV(p_cuGraphDestroy(g));
}

static void per_thread_run(const char *when) {
    DRV(pt_cuMemsetD32_v2_ptds(work, 0, N));
    DRV(pt_cuGraphLaunch_ptsz(pt_exec, 0));
    DRV(pt_cuStreamSynchronize_ptsz(0));
    DRV(pt_cuStreamQuery_ptsz(0));
    std::vector<unsigned> h(N);
    DRV(pt_cuMemcpyDtoH_v2_ptds(h.data(), work, N * 4));
    for (unsigned i = 0; i < N; i++)
        if (h[i] != 11 * 3 + 4 + i) { printf("FAIL %s: per-thread graph word %u = %u\n", when, i, h[i]); exit(1); }
    for (unsigned i = 0; i < N; i++) h[i] = 1000 + i;
    DRV(pt_cuMemcpyHtoDAsync_v2_ptsz(work, h.data(), N * 4, 0));
    DRV(pt_cuStreamSynchronize_ptsz(0));
    check_words(work, N, 1000, when);
}

int main() {
    FUNCS(LOAD)
    PT_FUNCS(PT_LOAD)
    under_crum = getenv("CRUM_RUN") != nullptr;
    CUdevice dev;
    axpb_f = drv_start(&dev, &primary, AXPB_PTX, "axpb");
    DRV(p_cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));

    // Memory of every kind.
    len[DEV] = 1 << 20;
    DRV(p_cuMemAlloc(&mem[DEV], len[DEV]));
    DRV(p_cuCtxCreate(&created, nullptr, 0, dev));
    len[DEV_CTX] = 64 << 10;
    DRV(p_cuMemAlloc(&mem[DEV_CTX], len[DEV_CTX]));
    CUcontext popped;
    DRV(p_cuCtxPopCurrent(&popped));
    EXPECT(popped == created);
    len[PINNED] = 64 << 10;
    DRV(p_cuMemAllocHost((void **)&mem[PINNED], len[PINNED]));
    len[REGISTERED] = 64 << 10;
    void *reg = aligned_alloc(4096, len[REGISTERED]);
    DRV(p_cuMemHostRegister(reg, len[REGISTERED], 0));
    mem[REGISTERED] = (CUdeviceptr)reg;
    len[MANAGED] = 4 * PART;
    DRV(p_cuMemAllocManaged(&mem[MANAGED], len[MANAGED], CU_MEM_ATTACH_GLOBAL));
    CUmemPoolProps props = {};
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = dev;
    DRV(p_cuMemPoolCreate(&pool, &props));
    len[POOLED] = 32 << 10;
    DRV(p_cuMemAllocFromPoolAsync(&mem[POOLED], len[POOLED], pool, stream));
    DRV(p_cuStreamSynchronize(stream));
    CUmemAllocationProp prop = {};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    DRV(p_cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    DRV(p_cuMemAddressReserve(&va, 2 * gran, 0, 0, 0));
    CUmemGenericAllocationHandle h;
    DRV(p_cuMemCreate(&h, gran, &prop, 0));
    DRV(p_cuMemMap(va, gran, 0, h, 0));
    CUmemAccessDesc access = {};
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    DRV(p_cuMemSetAccess(va, gran, &access, 1));
    mem[MAPPED_VMM] = va;
    len[MAPPED_VMM] = gran;
    unsigned on = 1;
    DRV(p_cuPointerSetAttribute(&on, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, mem[DEV_CTX]));
    EXPECT(p_cuPointerSetAttribute(&on, CU_POINTER_ATTRIBUTE_BUFFER_ID, mem[DEV]) == CUDA_ERROR_INVALID_VALUE);
    check_pointers("before the gates");
    check_new_ids();
    printf("pointer attributes of device, created-context, pinned, registered, managed, pool and VMM memory\n");

    // Advice (both forms) and prefetches (both forms) on parts of the managed allocation.
    CUmemLocation dev0 = {CU_MEM_LOCATION_TYPE_DEVICE, 0}, host = {CU_MEM_LOCATION_TYPE_HOST, 0};
    DRV(p_cuMemAdvise(mem[MANAGED], PART, CU_MEM_ADVISE_SET_READ_MOSTLY, dev0));
    DRV(p_cuMemAdvise(mem[MANAGED], PART, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, host));
    DRV(p_cuMemAdvise(mem[MANAGED], PART, CU_MEM_ADVISE_SET_ACCESSED_BY, dev0));
    void *fn = nullptr;
    CUdriverProcAddressQueryResult found;
    DRV(p_cuGetProcAddress("cuMemAdvise", &fn, 11000, 0, &found));
    auto advise_v1 = (PFN_cuMemAdvise_v8000)fn;
    DRV(advise_v1(mem[MANAGED] + PART, PART, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, 0));
    DRV(p_cuGetProcAddress("cuMemPrefetchAsync", &fn, 11000, 0, &found));
    auto prefetch_v1 = (PFN_cuMemPrefetchAsync_v8000)fn;
    DRV(p_cuGetProcAddress("cuMemAdvise", &fn, 12020, 0, &found));
    if (under_crum) EXPECT(fn == (void *)p_cuMemAdvise);  // NVIDIA's may hand out another address
    // The managed memory written on the host, prefetched, changed by a kernel, read on the host.
    unsigned *mw = (unsigned *)mem[MANAGED];
    for (unsigned i = 0; i < len[MANAGED] / 4; i++) mw[i] = 5;
    DRV(p_cuMemPrefetchAsync(mem[MANAGED] + 2 * PART, PART, dev0, 0, stream));
    DRV(prefetch_v1(mem[MANAGED] + 3 * PART, PART, CU_DEVICE_CPU, stream));
    DRV(pt_cuMemPrefetchAsync_v2_ptsz(mem[MANAGED], PART, dev0, 0, 0));
    axpb(mem[MANAGED], (unsigned)(len[MANAGED] / 4), 2, 1, stream);
    DRV(p_cuStreamSynchronize(stream));
    for (unsigned i = 0; i < len[MANAGED] / 4; i++) EXPECT(mw[i] == 11 + i);
    // The last prefetch of part 0 was the per-thread one, to the device, like part 2's.
    EXPECT(range_int(CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, 0) == 0);
    check_advice("before the gates");
    printf("advice and prefetches read back through the range attributes\n");

    // A graph captured, instantiated and launched, then recaptured through the driver.
    DRV(p_cuMemAlloc(&work, N * 4));
    DRV(p_cuMemAlloc(&copied, N * 4));
    DRV(p_cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
    capture_work(5, 1, 0);
    DRV(p_cuStreamEndCapture(stream, &graph));
    DRV(p_cuGraphInstantiate(&exec, graph, 0));
    DRV(p_cuGraphLaunch(exec, stream));
    DRV(p_cuStreamSynchronize(stream));
    check_words(work, N, 5, "the captured graph");
    check_words(copied, 5, 5, "the captured graph's copy");
    recapture(9, 2, 1, 5, 1, "the first recapture");
    printf("a graph recaptured through the driver: the callback saw CUgraphNodeParams\n");

    // Per-thread default stream variants.
    void *by_flag = nullptr;
    DRV(p_cuGetProcAddress("cuMemsetD32Async", &by_flag, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &found));
    if (under_crum) EXPECT(by_flag == (void *)pt_cuMemsetD32Async_ptsz);
    DRV(p_cuGetProcAddress("cuMemcpyDtoH", &by_flag, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &found));
    if (under_crum) EXPECT(by_flag == (void *)pt_cuMemcpyDtoH_v2_ptds);
    DRV(p_cuGetProcAddress("cuMemsetD32Async", &by_flag, 13000, 0, &found));
    if (under_crum) EXPECT(by_flag == (void *)p_cuMemsetD32Async);
    per_thread_capture();
    other_thread_capture();
    per_thread_run("before the gates");
    printf("per-thread variants capture and run on this thread's default stream\n");

    GATE(1);
    check_pointers("after gate 1");
    check_advice("after gate 1");
    recapture(7, 3, 2, 9, 2, "a recapture after gate 1");
    per_thread_run("after gate 1");
    GATE(2);
    check_pointers("after gate 2");
    check_advice("after gate 2");
    DRV(p_cuGraphLaunch(exec, stream));
    DRV(p_cuStreamSynchronize(stream));
    check_words(work, N, 7 * 3 + 2, "the updated graph after gate 2");
    per_thread_run("after gate 2");
    GATE(3);
    check_pointers("after gate 3");
    check_new_ids();
    check_advice("after gate 3");
    per_thread_run("after gate 3");
    // A recapture that ends in the per-thread stream's form.
    Seen seen = {};
    DRV(pt_cuStreamBeginRecaptureToGraph_ptsz(0, CU_STREAM_CAPTURE_MODE_RELAXED, pt_graph, on_change, &seen));
    DRV(pt_cuMemsetD32Async_ptsz(work, 11, N, 0));
    unsigned a = 3, b = 4, n = N, stride = 1;
    void *params[] = {&work, &n, &stride, &a, &b};
    DRV(pt_cuLaunchKernel_ptsz(axpb_f, N / 256, 1, 1, 256, 1, 1, 0, 0, params, nullptr));
    CUgraph out;
    DRV(pt_cuStreamEndCapture_ptsz(0, &out));
    EXPECT(out == pt_graph && seen.calls == 0);  // nothing changed
    per_thread_run("after a per-thread recapture");
    printf("after three gates: buffer ids, contexts, pools, mappings, advice, graphs and the per-thread stream kept\n");

    DRV(p_cuGraphExecDestroy(pt_exec));
    DRV(p_cuGraphDestroy(pt_graph));
    DRV(p_cuGraphExecDestroy(exec));
    DRV(p_cuGraphDestroy(graph));
    DRV(p_cuMemFree(work));
    DRV(p_cuMemFree(copied));
    DRV(p_cuMemUnmap(va, gran));
    DRV(p_cuMemRelease(h));
    DRV(p_cuMemAddressFree(va, 2 * gran));
    DRV(p_cuMemFreeAsync(mem[POOLED], stream));
    DRV(p_cuStreamSynchronize(stream));
    DRV(p_cuMemPoolDestroy(pool));
    DRV(p_cuMemFree(mem[MANAGED]));
    DRV(p_cuMemHostUnregister(reg));
    free(reg);
    DRV(p_cuMemFreeHost((void *)mem[PINNED]));
    DRV(p_cuCtxDestroy(created));
    DRV(p_cuMemFree(mem[DEV]));
    DRV(p_cuStreamDestroy(stream));
    printf("PASS\n");
    return 0;
}
