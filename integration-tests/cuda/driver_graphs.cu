// Driver-API graphs (issue 13): a graph built through the driver (memset, kernel, memcpy,
// child graph, host, event record nodes; one edge added by cuGraphAddDependencies), its
// nodes, roots and edges listed, instantiated and launched by cuGraphLaunch and by the
// runtime's cudaGraphLaunch (the handles are the same objects); a stream captured through the
// driver (cuStreamBeginCapture … cuStreamEndCapture) and a runtime capture of driver calls
// launched by cuGraphLaunch; a library loaded by cuLibraryLoadData whose CUkernel is launched
// by cuLaunchKernel and is the kernel of a node (`kern`, `func` NULL), whose executable graph
// is updated (cuGraphExecKernelNodeSetParams, cuGraphExecUpdate). Graphs are device state:
// after each gate (a restart resumes there) every executable graph made before it is
// launched again and its results checked. Checked on the CPU; PASS.
#include "driver.h"
#include "driver_ptx.h"
#include <cstring>
#include <atomic>
#include <cudaTypedefs.h>

#define FUNCS(X) X(cuCtxSynchronize) X(cuLaunchKernel) X(cuMemAlloc) X(cuMemFree) X(cuMemcpyDtoH) \
    X(cuMemcpyDtoDAsync) X(cuMemsetD32) X(cuMemsetD32Async) X(cuStreamCreate) X(cuStreamSynchronize) \
    X(cuEventCreate) X(cuEventQuery) X(cuGraphCreate) X(cuGraphDestroy) X(cuGraphAddKernelNode) \
    X(cuGraphAddMemcpyNode) X(cuGraphAddMemsetNode) X(cuGraphAddHostNode) X(cuGraphAddEmptyNode) \
    X(cuGraphAddChildGraphNode) X(cuGraphAddEventRecordNode) X(cuGraphAddEventWaitNode) \
    X(cuGraphAddDependencies) X(cuGraphGetNodes) X(cuGraphGetRootNodes) X(cuGraphGetEdges) X(cuGraphClone) \
    X(cuGraphInstantiate) X(cuGraphInstantiateWithParams) X(cuGraphLaunch) X(cuGraphExecDestroy) \
    X(cuGraphExecUpdate) X(cuGraphExecKernelNodeSetParams) X(cuGraphKernelNodeGetParams) \
    X(cuGraphKernelNodeSetParams) X(cuGraphNodeGetType) X(cuGraphDestroyNode) X(cuStreamBeginCapture) \
    X(cuStreamEndCapture) X(cuStreamIsCapturing) X(cuStreamGetCaptureInfo) \
    X(cuThreadExchangeStreamCaptureMode) X(cuLibraryLoadData) X(cuLibraryUnload) X(cuLibraryGetKernel) \
    X(cuLibraryGetModule) X(cuKernelGetFunction) X(cuKernelGetAttribute) X(cuLibraryGetGlobal) \
    X(cuGetProcAddress) X(cuGraphMemcpyNodeSetParams) X(cuGraphExecMemcpyNodeSetParams) \
    X(cuGraphMemsetNodeGetParams) X(cuGraphMemsetNodeSetParams) X(cuGraphExecMemsetNodeSetParams) \
    X(cuGraphHostNodeGetParams) X(cuGraphHostNodeSetParams) X(cuGraphExecHostNodeSetParams) \
    X(cuGraphChildGraphNodeGetGraph) X(cuGraphEventRecordNodeGetEvent) X(cuGraphEventRecordNodeSetEvent) \
    X(cuGraphExecEventRecordNodeSetEvent) X(cuGraphNodeGetDependencies) X(cuGraphNodeGetDependentNodes) \
    X(cuGraphRemoveDependencies) X(cuGraphNodeFindInClone) X(cuGraphUpload) X(cuGraphNodeSetEnabled) \
    X(cuGraphNodeGetEnabled) X(cuGraphExecGetFlags) X(cuLaunchHostFunc) X(cuGraphEventWaitNodeGetEvent) \
    X(cuGraphEventWaitNodeSetEvent) X(cuGraphExecEventWaitNodeSetEvent) X(cuGraphExecChildGraphNodeSetParams) \
    X(cuStreamBeginCaptureToGraph) X(cuStreamUpdateCaptureDependencies) X(cuGraphKernelNodeGetAttribute) \
    X(cuGraphKernelNodeSetAttribute) X(cuGraphKernelNodeCopyAttributes) X(cuGraphDebugDotPrint) \
    X(cuUserObjectCreate) X(cuUserObjectRetain) X(cuUserObjectRelease) X(cuGraphRetainUserObject) \
    X(cuGraphReleaseUserObject) X(cuLibraryLoadFromFile) X(cuLibraryGetKernelCount) \
    X(cuLibraryEnumerateKernels) X(cuLibraryGetManaged) X(cuGraphAddMemAllocNode) \
    X(cuGraphMemAllocNodeGetParams) X(cuGraphAddMemFreeNode) X(cuGraphMemFreeNodeGetParams) \
    X(cuDeviceGraphMemTrim) X(cuDeviceGetGraphMemAttribute) X(cuDeviceSetGraphMemAttribute) \
    X(cuFuncSetAttribute) X(cuFuncGetAttribute) X(cuFuncSetCacheConfig) X(cuFuncGetName) X(cuFuncGetParamInfo) \
    X(cuKernelSetAttribute) X(cuKernelSetCacheConfig) X(cuKernelGetName) X(cuKernelGetParamInfo) \
    X(cuLaunchKernelEx) X(cuGraphMemcpyNodeGetParams) X(cuGraphAddNode) X(cuGraphNodeGetParams) \
    X(cuGraphNodeSetParams) X(cuGraphExecNodeSetParams) X(cuGraphConditionalHandleCreate)
FUNCS(DRIVER)

static const unsigned N = 1024;
static CUfunction axpb_f;
static CUstream s;
static std::atomic<int> host_runs;

static void CUDA_CB count_run(void *arg) { host_runs += *(int *)arg; }
static std::atomic<int> destroyed;
static void CUDA_CB destroy_object(void *arg) { destroyed += *(int *)arg; }

// The older forms, which cudaTypedefs.h names only inside NVIDIA's own build.
typedef CUresult (CUDAAPI *BeginCapture_v10000)(CUstream);
typedef CUresult (CUDAAPI *Instantiate_v11000)(CUgraphExec *, CUgraph, CUgraphNode *, char *, size_t);

// `name` as cuGetProcAddress gives it to a program built for CUDA `version`.
static void *proc(const char *name, int version) {
    void *fn = nullptr;
    CUdriverProcAddressQueryResult r;
    DRV(p_cuGetProcAddress(name, &fn, version, 0, &r));
    EXPECT(fn != nullptr && r == CU_GET_PROC_ADDRESS_SUCCESS);
    return fn;
}

// A temporary file holding `text` (its name in `path`, "/tmp/crum-driver-graphs-XXXXXX").
static void temp_file(char *path, const char *text) {
    int fd = mkstemp(path);
    EXPECT(fd >= 0);
    size_t n = strlen(text);
    EXPECT(write(fd, text, n) == (ssize_t)n);
    close(fd);
}

// Every element i of `d` is `base + scale*i`.
static void check(CUdeviceptr d, unsigned base, unsigned scale, const char *what) {
    static unsigned h[N];
    DRV(p_cuMemcpyDtoH(h, d, sizeof h));
    for (unsigned i = 0; i < N; i++) {
        if (h[i] != base + scale * i) {
            printf("FAIL %s: element %u = %u, want %u\n", what, i, h[i], base + scale * i);
            exit(1);
        }
    }
}

// The parameters of axpb(p, N, 1, a, b) (p[i] = p[i]*a + b + i); kept in static storage
// as a node's parameters are read when it is added.
struct Axpb {
    CUdeviceptr p;
    unsigned n = N, stride = 1, a, b;
    void *params[5] = {&p, &n, &stride, &a, &b};
    Axpb(CUdeviceptr p_, unsigned a_, unsigned b_) : p(p_), a(a_), b(b_) {}
};

static CUDA_KERNEL_NODE_PARAMS kernel_node(CUfunction f, CUkernel k, Axpb &args) {
    CUDA_KERNEL_NODE_PARAMS kp = {};
    kp.func = f;
    kp.kern = k;
    kp.gridDimX = N / 128;
    kp.gridDimY = kp.gridDimZ = 1;
    kp.blockDimX = 128;
    kp.blockDimY = kp.blockDimZ = 1;
    kp.kernelParams = args.params;
    return kp;
}

static CUdeviceptr da, db, dc, dd, de, df;
static CUgraphExec built, captured, by_runtime, updated, with_memory;
static int stage;
static unsigned updated_b;

// Launch each executable graph made so far (through both faces) and check what it writes.
static void launch_all(const char *when) {
    if (stage >= 1) {
        int before = host_runs;
        DRV(p_cuGraphLaunch(built, s));
        DRV(p_cuStreamSynchronize(s));
        check(da, 11, 1, when);
        check(db, 111, 2, when);
        EXPECT(host_runs == before + 1);
        CK(cudaGraphLaunch(built, s));
        CK(cudaStreamSynchronize(s));
        check(db, 111, 2, when);
        EXPECT(host_runs == before + 2);
    }
    if (stage >= 2) {
        CK(cudaGraphLaunch(captured, s));
        DRV(p_cuGraphLaunch(by_runtime, s));
        DRV(p_cuStreamSynchronize(s));
        check(dc, 40, 1, when);
        check(dd, 3, 0, when);
    }
    if (stage >= 3) {
        DRV(p_cuGraphLaunch(updated, s));
        DRV(p_cuStreamSynchronize(s));
        check(de, updated_b, 1, when);
        DRV(p_cuMemsetD32(df, 0, N));
        DRV(p_cuGraphLaunch(with_memory, s));
        DRV(p_cuStreamSynchronize(s));
        check(df, 8, 0, when);
    }
}

// With the argument "crum-checks" (crum tests that native runs and the cuda backend leave out):
// conditional nodes through the driver (the cuda backend has none), and handles never made,
// or destroyed, answering errors (a real driver may crash on them).
static void conditional_nodes(CUcontext ctx) {
    // Two IF nodes whose handles take their default at each launch: 1 runs its body (de = 21),
    // 0 does not (dd stays 0).
    CUgraph cg;
    DRV(p_cuGraphCreate(&cg, 0));
    CUgraphConditionalHandle yes, no;
    DRV(p_cuGraphConditionalHandleCreate(&yes, cg, ctx, 1, CU_GRAPH_COND_ASSIGN_DEFAULT));
    DRV(p_cuGraphConditionalHandleCreate(&no, cg, ctx, 0, CU_GRAPH_COND_ASSIGN_DEFAULT));
    CUdeviceptr dst[2] = {de, dd};
    CUgraphConditionalHandle handles[2] = {yes, no};
    for (int i = 0; i < 2; i++) {
        CUgraphNodeParams np;
        memset(&np, 0, sizeof np);
        np.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
        np.conditional.handle = handles[i];
        np.conditional.type = CU_GRAPH_COND_TYPE_IF;
        np.conditional.size = 1;
        np.conditional.ctx = ctx;
        CUgraphNode cn;
        DRV(p_cuGraphAddNode(&cn, cg, nullptr, nullptr, 0, &np));
        EXPECT(np.conditional.phGraph_out != nullptr && np.conditional.phGraph_out[0] != nullptr);
        CUDA_MEMSET_NODE_PARAMS m = {};
        m.dst = dst[i];
        m.value = 21 + i;
        m.elementSize = 4;
        m.width = N;
        m.height = 1;
        CUgraphNode body;
        DRV(p_cuGraphAddMemsetNode(&body, np.conditional.phGraph_out[0], nullptr, 0, &m, ctx));
    }
    CUgraphExec ce;
    DRV(p_cuGraphInstantiate(&ce, cg, 0));
    DRV(p_cuMemsetD32(de, 0, N));
    DRV(p_cuMemsetD32(dd, 0, N));
    DRV(p_cuGraphLaunch(ce, s));
    DRV(p_cuStreamSynchronize(s));
    check(de, 21, 0, "an IF node whose condition is 1");
    check(dd, 0, 0, "an IF node whose condition is 0");
    DRV(p_cuGraphExecDestroy(ce));
    DRV(p_cuGraphDestroy(cg));
}

static void bad_handles(CUgraph g, CUcontext ctx) {
    void *bad = (void *)0x12345678;
    CUgraphNode n, bad_node = (CUgraphNode)bad;
    EXPECT(p_cuGraphLaunch((CUgraphExec)bad, s) == CUDA_ERROR_INVALID_VALUE);
    EXPECT(p_cuGraphDestroy((CUgraph)bad) == CUDA_ERROR_INVALID_VALUE);
    EXPECT(p_cuGraphExecDestroy((CUgraphExec)bad) == CUDA_ERROR_INVALID_VALUE);
    static Axpb a(0, 1, 0);
    CUDA_KERNEL_NODE_PARAMS kp = kernel_node((CUfunction)bad, nullptr, a);
    EXPECT(p_cuGraphAddKernelNode(&n, g, nullptr, 0, &kp) == CUDA_ERROR_INVALID_HANDLE);
    kp = kernel_node(nullptr, (CUkernel)bad, a);
    EXPECT(p_cuGraphAddKernelNode(&n, g, nullptr, 0, &kp) == CUDA_ERROR_INVALID_HANDLE);
    kp = kernel_node(axpb_f, nullptr, a);
    kp.func = nullptr;
    kp.kern = (CUkernel)axpb_f;
    kp.ctx = (CUcontext)bad;
    EXPECT(p_cuGraphAddKernelNode(&n, g, nullptr, 0, &kp) == CUDA_ERROR_INVALID_CONTEXT);
    kp = kernel_node(axpb_f, nullptr, a);
    EXPECT(p_cuGraphAddKernelNode(&n, (CUgraph)bad, nullptr, 0, &kp) == CUDA_ERROR_INVALID_VALUE);
    EXPECT(p_cuGraphAddEmptyNode(&n, g, &bad_node, 1) == CUDA_ERROR_INVALID_VALUE);
    EXPECT(p_cuGraphAddChildGraphNode(&n, g, nullptr, 0, (CUgraph)bad) == CUDA_ERROR_INVALID_VALUE);
    CUDA_MEMSET_NODE_PARAMS ms = {};
    EXPECT(p_cuGraphAddMemsetNode(&n, g, nullptr, 0, &ms, (CUcontext)bad) == CUDA_ERROR_INVALID_CONTEXT);
    CUgraphNodeType ty;
    EXPECT(p_cuGraphNodeGetType(bad_node, &ty) == CUDA_ERROR_INVALID_VALUE);
    size_t count;
    EXPECT(p_cuGraphGetNodes((CUgraph)bad, nullptr, &count) == CUDA_ERROR_INVALID_VALUE);
    CUDA_KERNEL_NODE_PARAMS got;
    EXPECT(p_cuGraphKernelNodeGetParams(bad_node, &got) == CUDA_ERROR_INVALID_VALUE);
    CUgraphExec e;
    EXPECT(p_cuGraphInstantiate(&e, (CUgraph)bad, 0) == CUDA_ERROR_INVALID_VALUE);
    CUgraphExecUpdateResultInfo info;
    EXPECT(p_cuGraphExecUpdate((CUgraphExec)bad, g, &info) == CUDA_ERROR_INVALID_VALUE);
    CUkernel k;
    EXPECT(p_cuLibraryGetKernel(&k, (CUlibrary)bad, "axpb") == CUDA_ERROR_INVALID_HANDLE);
    CUfunction f;
    EXPECT(p_cuKernelGetFunction(&f, (CUkernel)bad) == CUDA_ERROR_INVALID_HANDLE);
    const char *name;
    EXPECT(p_cuKernelGetName(&name, (CUkernel)bad) == CUDA_ERROR_INVALID_HANDLE);
    EXPECT(p_cuLaunchKernel((CUfunction)bad, 1, 1, 1, 1, 1, 1, 0, s, nullptr, nullptr) == CUDA_ERROR_INVALID_HANDLE);
    // Destroyed handles.
    CUgraph gone;
    DRV(p_cuGraphCreate(&gone, 0));
    DRV(p_cuGraphAddEmptyNode(&n, gone, nullptr, 0));
    DRV(p_cuGraphInstantiate(&e, gone, 0));
    DRV(p_cuGraphDestroy(gone));
    EXPECT(p_cuGraphNodeGetType(n, &ty) == CUDA_ERROR_INVALID_VALUE);
    EXPECT(p_cuGraphGetNodes(gone, nullptr, &count) == CUDA_ERROR_INVALID_VALUE);
    DRV(p_cuGraphLaunch(e, s));  // the executable graph outlives its graph
    DRV(p_cuGraphExecDestroy(e));
    EXPECT(p_cuGraphLaunch(e, s) == CUDA_ERROR_INVALID_VALUE);
    (void)ctx;
}

int main(int argc, char **argv) {
    FUNCS(LOAD)
    CUdevice dev;
    CUcontext ctx;
    axpb_f = drv_start(&dev, &ctx, AXPB_PTX, "axpb");
    DRV(p_cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    for (CUdeviceptr *d : {&da, &db, &dc, &dd, &de, &df}) DRV(p_cuMemAlloc(d, N * 4));

    // Found by cuGetProcAddress under their plain names (cuGraphInstantiate is
    // cuGraphInstantiateWithFlags from CUDA 12).
    void *fn = nullptr;
    CUdriverProcAddressQueryResult found;
    DRV(p_cuGetProcAddress("cuGraphInstantiate", &fn, 12000, 0, &found));
    EXPECT(fn == (void *)p_cuGraphInstantiate && found == CU_GET_PROC_ADDRESS_SUCCESS);
    DRV(p_cuGetProcAddress("cuGraphAddKernelNode", &fn, 13000, 0, &found));
    EXPECT(fn == (void *)p_cuGraphAddKernelNode);

    // Errors, not crashes: null outputs and parameters.
    EXPECT(p_cuGraphCreate(nullptr, 0) == CUDA_ERROR_INVALID_VALUE);
    CUgraph g;
    DRV(p_cuGraphCreate(&g, 0));
    EXPECT(p_cuGraphInstantiate(nullptr, g, 0) == CUDA_ERROR_INVALID_VALUE);
    EXPECT(p_cuGraphAddKernelNode(nullptr, g, nullptr, 0, nullptr) == CUDA_ERROR_INVALID_VALUE);
    EXPECT(p_cuStreamIsCapturing(s, nullptr) == CUDA_ERROR_INVALID_VALUE);
    EXPECT(p_cuGraphLaunch(nullptr, s) == CUDA_ERROR_INVALID_VALUE);
    EXPECT(p_cuGraphDestroy(nullptr) == CUDA_ERROR_INVALID_VALUE);
    EXPECT(p_cuGraphExecDestroy(nullptr) == CUDA_ERROR_INVALID_VALUE);
    EXPECT(p_cuGraphGetNodes(g, nullptr, nullptr) == CUDA_ERROR_INVALID_VALUE);
    if (argc > 1 && strcmp(argv[1], "crum-checks") == 0) {
        bad_handles(g, ctx);
        conditional_nodes(ctx);
    }

    // memset da=5 -> axpb(da, 2, 1): 11+i -> copy to db -> child: axpb(db, 1, 100): 111+2i
    // -> host node -> event record.
    CUDA_MEMSET_NODE_PARAMS ms = {};
    ms.dst = da;
    ms.value = 5;
    ms.elementSize = 4;
    ms.width = N;
    ms.height = 1;
    CUgraphNode n_set, n_kernel, n_copy, n_child, n_host, n_event;
    DRV(p_cuGraphAddMemsetNode(&n_set, g, nullptr, 0, &ms, ctx));
    static Axpb a1(da, 2, 1);
    CUDA_KERNEL_NODE_PARAMS kp = kernel_node(axpb_f, nullptr, a1);
    DRV(p_cuGraphAddKernelNode(&n_kernel, g, &n_set, 1, &kp));
    CUDA_MEMCPY3D cp = {};
    cp.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    cp.srcDevice = da;
    cp.srcPitch = N * 4;
    cp.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    cp.dstDevice = db;
    cp.dstPitch = N * 4;
    cp.WidthInBytes = N * 4;
    cp.Height = 1;
    cp.Depth = 1;
    DRV(p_cuGraphAddMemcpyNode(&n_copy, g, &n_kernel, 1, &cp, ctx));
    CUgraph child;
    DRV(p_cuGraphCreate(&child, 0));
    static Axpb a2(db, 1, 100);
    CUDA_KERNEL_NODE_PARAMS kc = kernel_node(axpb_f, nullptr, a2);
    CUgraphNode n_inner;
    DRV(p_cuGraphAddKernelNode(&n_inner, child, nullptr, 0, &kc));
    DRV(p_cuGraphAddChildGraphNode(&n_child, g, &n_copy, 1, child));
    static int one = 1;
    CUDA_HOST_NODE_PARAMS hp = {count_run, &one};
    DRV(p_cuGraphAddHostNode(&n_host, g, nullptr, 0, &hp));
    DRV(p_cuGraphAddDependencies(g, &n_child, &n_host, nullptr, 1));
    CUevent done;
    DRV(p_cuEventCreate(&done, CU_EVENT_DEFAULT));
    DRV(p_cuGraphAddEventRecordNode(&n_event, g, &n_host, 1, done));
    // An empty node added and destroyed.
    CUgraphNode n_empty;
    DRV(p_cuGraphAddEmptyNode(&n_empty, g, &n_event, 1));
    DRV(p_cuGraphDestroyNode(n_empty));

    size_t count = 0;
    DRV(p_cuGraphGetNodes(g, nullptr, &count));
    EXPECT(count == 6);
    CUgraphNode nodes[6], roots[6], from[6], to[6];
    DRV(p_cuGraphGetNodes(g, nodes, &count));
    count = 6;
    DRV(p_cuGraphGetRootNodes(g, roots, &count));
    EXPECT(count == 1 && roots[0] == n_set);
    count = 6;
    DRV(p_cuGraphGetEdges(g, from, to, nullptr, &count));
    EXPECT(count == 5);
    bool child_to_host = false;
    for (size_t i = 0; i < count; i++) child_to_host |= from[i] == n_child && to[i] == n_host;
    EXPECT(child_to_host);
    CUgraphNodeType ty;
    const CUgraphNode typed[] = {n_set, n_kernel, n_copy, n_child, n_host, n_event};
    const CUgraphNodeType want[] = {CU_GRAPH_NODE_TYPE_MEMSET, CU_GRAPH_NODE_TYPE_KERNEL, CU_GRAPH_NODE_TYPE_MEMCPY,
        CU_GRAPH_NODE_TYPE_GRAPH, CU_GRAPH_NODE_TYPE_HOST, CU_GRAPH_NODE_TYPE_EVENT_RECORD};
    for (int i = 0; i < 6; i++) {
        DRV(p_cuGraphNodeGetType(typed[i], &ty));
        EXPECT(ty == want[i]);
    }
    CUDA_KERNEL_NODE_PARAMS got;
    EXPECT(p_cuGraphKernelNodeGetParams(n_set, &got) == CUDA_ERROR_INVALID_VALUE);  // not a kernel node
    DRV(p_cuGraphKernelNodeGetParams(n_kernel, &got));
    EXPECT(got.gridDimX == N / 128 && got.blockDimX == 128 && got.sharedMemBytes == 0);
    EXPECT(*(unsigned *)got.kernelParams[3] == 2 && *(unsigned *)got.kernelParams[4] == 1);

    // Dependencies both ways, a node found in a clone, the child graph of a node.
    CUgraphNode dep[2];
    count = 2;
    DRV(p_cuGraphNodeGetDependencies(n_kernel, dep, nullptr, &count));
    EXPECT(count == 1 && dep[0] == n_set);
    count = 2;
    DRV(p_cuGraphNodeGetDependentNodes(n_child, dep, nullptr, &count));
    EXPECT(count == 1 && dep[0] == n_host);
    CUgraph got_child;
    DRV(p_cuGraphChildGraphNodeGetGraph(n_child, &got_child));
    DRV(p_cuGraphGetNodes(got_child, nullptr, &count));
    EXPECT(count == 1);
    CUevent got_event;
    DRV(p_cuGraphEventRecordNodeGetEvent(n_event, &got_event));
    EXPECT(got_event == done);

    // The older signatures, for a program that asks for an older CUDA version.
    {
        auto edges_v1 = (PFN_cuGraphGetEdges_v10000)proc("cuGraphGetEdges", 11000);
        EXPECT((void *)edges_v1 != (void *)p_cuGraphGetEdges);
        EXPECT(proc("cuGraphGetEdges", 12030) == (void *)p_cuGraphGetEdges);
        count = 6;
        DRV(edges_v1(g, from, to, &count));
        EXPECT(count == 5);
        auto params_v1 = (PFN_cuGraphKernelNodeGetParams_v10000)proc("cuGraphKernelNodeGetParams", 11000);
        struct {
            CUDA_KERNEL_NODE_PARAMS_v1 p;
            unsigned long long guard[2];
        } k1;
        k1.guard[0] = k1.guard[1] = 0x5a5a5a5a5a5a5a5aull;
        DRV(params_v1(n_kernel, &k1.p));
        EXPECT(k1.p.gridDimX == N / 128 && k1.p.blockDimX == 128);
        EXPECT(k1.guard[0] == 0x5a5a5a5a5a5a5a5aull && k1.guard[1] == 0x5a5a5a5a5a5a5a5aull);
        auto inst_v1 = (Instantiate_v11000)proc("cuGraphInstantiate", 11000);
        CUgraphExec e1;
        CUgraphNode err = n_set;
        char log[16] = "x";
        DRV(inst_v1(&e1, g, &err, log, sizeof log));
        EXPECT(err == nullptr && log[0] == 0);
        auto update_v1 = (PFN_cuGraphExecUpdate_v10020)proc("cuGraphExecUpdate", 11000);
        CUgraphExecUpdateResult ur = CU_GRAPH_EXEC_UPDATE_ERROR;
        DRV(update_v1(e1, g, &err, &ur));
        EXPECT(ur == CU_GRAPH_EXEC_UPDATE_SUCCESS);
        DRV(p_cuGraphExecDestroy(e1));
    }

    DRV(p_cuGraphInstantiate(&built, g, 0));
    // The graph may go once instantiated; the executable graph keeps its nodes.
    CUgraph copy;
    DRV(p_cuGraphClone(&copy, g));
    DRV(p_cuGraphGetNodes(copy, nullptr, &count));
    EXPECT(count == 6);
    CUgraphNode c_host, c_event;
    DRV(p_cuGraphNodeFindInClone(&c_host, n_host, copy));
    DRV(p_cuGraphNodeFindInClone(&c_event, n_event, copy));
    EXPECT(c_host != n_host);
    DRV(p_cuGraphRemoveDependencies(copy, &c_host, &c_event, nullptr, 1));
    count = 6;
    DRV(p_cuGraphGetEdges(copy, from, to, nullptr, &count));
    EXPECT(count == 4);
    DRV(p_cuGraphDestroy(copy));
    // The executable child graph set again from a graph of the same shape and parameters.
    CUgraph child2;
    DRV(p_cuGraphClone(&child2, child));
    DRV(p_cuGraphExecChildGraphNodeSetParams(built, n_child, child2));
    EXPECT(p_cuGraphExecChildGraphNodeSetParams(built, n_set, child2) == CUDA_ERROR_INVALID_VALUE);
    DRV(p_cuGraphDestroy(child2));
    DRV(p_cuGraphDestroy(g));
    DRV(p_cuGraphDestroy(child));
    stage = 1;
    launch_all("the built graph");
    EXPECT(p_cuEventQuery(done) == CUDA_SUCCESS);
    printf("a graph built through the driver ran through both faces\n");

    // Node parameters read and changed, in a graph and in its executable graph: dc = 1
    // (memset) -> copied to dd -> host node (+1) -> event record.
    {
        CUgraph h;
        DRV(p_cuGraphCreate(&h, 0));
        CUDA_MEMSET_NODE_PARAMS m = ms;
        m.dst = dc;
        m.value = 1;
        CUgraphNode h_set, h_copy, h_host, h_event;
        DRV(p_cuGraphAddMemsetNode(&h_set, h, nullptr, 0, &m, ctx));
        CUDA_MEMCPY3D c = cp;
        c.srcDevice = dc;
        c.dstDevice = de;
        DRV(p_cuGraphAddMemcpyNode(&h_copy, h, &h_set, 1, &c, ctx));
        DRV(p_cuGraphAddHostNode(&h_host, h, &h_copy, 1, &hp));
        CUevent other;
        DRV(p_cuEventCreate(&other, CU_EVENT_DEFAULT));
        DRV(p_cuGraphAddEventRecordNode(&h_event, h, &h_host, 1, done));
        CUDA_MEMSET_NODE_PARAMS mg = {};
        DRV(p_cuGraphMemsetNodeGetParams(h_set, &mg));
        EXPECT(mg.dst == dc && mg.value == 1 && mg.elementSize == 4 && mg.width == N && mg.height == 1);
        m.value = 4;
        DRV(p_cuGraphMemsetNodeSetParams(h_set, &m));
        c.dstDevice = dd;
        DRV(p_cuGraphMemcpyNodeSetParams(h_copy, &c));
        CUDA_MEMCPY3D cg;
        memset(&cg, 0xff, sizeof cg);
        DRV(p_cuGraphMemcpyNodeGetParams(h_copy, &cg));
        EXPECT(cg.srcMemoryType == CU_MEMORYTYPE_DEVICE && cg.srcDevice == dc && cg.srcPitch == N * 4);
        EXPECT(cg.dstMemoryType == CU_MEMORYTYPE_DEVICE && cg.dstDevice == dd && cg.dstXInBytes == 0);
        EXPECT(cg.WidthInBytes == N * 4 && cg.Height == 1 && cg.Depth == 1 && cg.srcLOD == 0);
        static int two = 2, three = 3;
        CUDA_HOST_NODE_PARAMS hg = {};
        DRV(p_cuGraphHostNodeGetParams(h_host, &hg));
        EXPECT(hg.fn == count_run && hg.userData == &one);
        CUDA_HOST_NODE_PARAMS h2 = {count_run, &two};
        DRV(p_cuGraphHostNodeSetParams(h_host, &h2));
        DRV(p_cuGraphEventRecordNodeSetEvent(h_event, other));
        DRV(p_cuGraphEventRecordNodeGetEvent(h_event, &got_event));
        EXPECT(got_event == other);
        CUgraphExec eh;
        DRV(p_cuGraphInstantiate(&eh, h, 0));
        cuuint64_t flags = 1;
        DRV(p_cuGraphExecGetFlags(eh, &flags));
        EXPECT(flags == 0);
        DRV(p_cuGraphUpload(eh, s));
        int before = host_runs;
        DRV(p_cuGraphLaunch(eh, s));
        DRV(p_cuStreamSynchronize(s));
        check(dc, 4, 0, "a memset node's new parameters");
        check(dd, 4, 0, "a memcpy node's new parameters");
        EXPECT(host_runs == before + 2 && p_cuEventQuery(other) == CUDA_SUCCESS);
        // The executable graph's nodes changed; the graph's stay.
        m.value = 6;
        DRV(p_cuGraphExecMemsetNodeSetParams(eh, h_set, &m, ctx));
        c.dstDevice = de;
        DRV(p_cuGraphExecMemcpyNodeSetParams(eh, h_copy, &c, ctx));
        CUDA_HOST_NODE_PARAMS h3 = {count_run, &three};
        DRV(p_cuGraphExecHostNodeSetParams(eh, h_host, &h3));
        DRV(p_cuGraphExecEventRecordNodeSetEvent(eh, h_event, done));
        before = host_runs;
        DRV(p_cuGraphLaunch(eh, s));
        DRV(p_cuStreamSynchronize(s));
        check(dc, 6, 0, "an executable memset node's new parameters");
        check(de, 6, 0, "an executable memcpy node's new parameters");
        check(dd, 4, 0, "a copy the executable graph no longer makes");
        EXPECT(host_runs == before + 3);
        DRV(p_cuGraphMemsetNodeGetParams(h_set, &mg));
        EXPECT(mg.value == 4);
        // A node disabled in the executable graph does not run (kernel, memcpy and memset
        // nodes may be disabled, not host nodes).
        EXPECT(p_cuGraphNodeSetEnabled(eh, h_host, 0) == CUDA_ERROR_INVALID_VALUE);
        unsigned enabled = 1;
        DRV(p_cuGraphNodeSetEnabled(eh, h_set, 0));
        DRV(p_cuGraphNodeGetEnabled(eh, h_set, &enabled));
        EXPECT(enabled == 0);
        DRV(p_cuMemsetD32(dc, 9, N));
        before = host_runs;
        DRV(p_cuGraphLaunch(eh, s));
        // A host function through the driver, ordered after the launch.
        DRV(p_cuLaunchHostFunc(s, count_run, &one));
        DRV(p_cuStreamSynchronize(s));
        check(de, 9, 0, "a copy after a disabled memset");
        EXPECT(host_runs == before + 4);
        DRV(p_cuGraphExecDestroy(eh));
        DRV(p_cuGraphDestroy(h));
    }
    GATE(1);
    launch_all("after gate 1");

    // A stream captured through the driver: dc = 7, then axpb(dc, 5, 5): 40+i; a runtime
    // capture of a driver memset: dd = 3.
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    DRV(p_cuThreadExchangeStreamCaptureMode((CUstreamCaptureMode *)&mode));
    EXPECT(mode == cudaStreamCaptureModeGlobal);
    DRV(p_cuThreadExchangeStreamCaptureMode((CUstreamCaptureMode *)&mode));
    DRV(p_cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CUstreamCaptureStatus status;
    DRV(p_cuStreamIsCapturing(s, &status));
    EXPECT(status == CU_STREAM_CAPTURE_STATUS_ACTIVE);
    DRV(p_cuMemsetD32Async(dc, 7, N, s));
    Axpb a3(dc, 5, 5);
    DRV(p_cuLaunchKernel(axpb_f, N / 128, 1, 1, 128, 1, 1, 0, s, a3.params, nullptr));
    cuuint64_t id = 0;
    CUgraph capturing = nullptr;
    const CUgraphNode *deps = nullptr;
    size_t ndeps = 0;
    DRV(p_cuStreamGetCaptureInfo(s, &status, &id, &capturing, &deps, nullptr, &ndeps));
    EXPECT(status == CU_STREAM_CAPTURE_STATUS_ACTIVE && id != 0 && capturing != nullptr && ndeps == 1);
    CUgraph cg;
    DRV(p_cuStreamEndCapture(s, &cg));
    DRV(p_cuStreamIsCapturing(s, &status));
    EXPECT(status == CU_STREAM_CAPTURE_STATUS_NONE);
    DRV(p_cuGraphGetNodes(cg, nullptr, &count));
    EXPECT(count == 2);
    CUDA_GRAPH_INSTANTIATE_PARAMS ip = {};
    DRV(p_cuGraphInstantiateWithParams(&captured, cg, &ip));
    EXPECT(ip.result_out == CUDA_GRAPH_INSTANTIATE_SUCCESS);
    DRV(p_cuGraphDestroy(cg));
    // A runtime capture of a driver call, launched through the driver.
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    DRV(p_cuMemsetD32Async(dd, 3, N, s));
    cudaGraph_t rg;
    CK(cudaStreamEndCapture(s, &rg));
    CK(cudaGraphInstantiate(&by_runtime, rg, 0));  // the runtime's graph and executable graph
    CK(cudaGraphDestroy(rg));
    stage = 2;
    launch_all("the captured graphs");
    printf("captures through the driver and the runtime launched through either\n");
    {
        // CUDA 10.0's capture (no mode) and CUDA 11.3's capture info (no edge data).
        auto begin_v1 = (BeginCapture_v10000)proc("cuStreamBeginCapture", 10000);
        auto info_v2 = (PFN_cuStreamGetCaptureInfo_v11030)proc("cuStreamGetCaptureInfo", 11030);
        EXPECT(proc("cuStreamGetCaptureInfo", 13000) == (void *)p_cuStreamGetCaptureInfo);
        DRV(begin_v1(s));
        DRV(p_cuMemsetD32Async(dc, 1, N, s));
        ndeps = 0;
        DRV(info_v2(s, &status, &id, &capturing, &deps, &ndeps));
        EXPECT(status == CU_STREAM_CAPTURE_STATUS_ACTIVE && ndeps == 1);
        CUgraph old;
        DRV(p_cuStreamEndCapture(s, &old));
        DRV(p_cuGraphGetNodes(old, nullptr, &count));
        EXPECT(count == 1);
        DRV(p_cuGraphDestroy(old));
    }
    {
        // A capture into a graph that has a memset node (dc = 2): axpb(dc, 1, 0) after it,
        // then a copy dc -> dd after both (the memset added to the capture's dependencies).
        CUgraph tg;
        DRV(p_cuGraphCreate(&tg, 0));
        CUDA_MEMSET_NODE_PARAMS m = ms;
        m.dst = dc;
        m.value = 2;
        CUgraphNode t_set;
        DRV(p_cuGraphAddMemsetNode(&t_set, tg, nullptr, 0, &m, ctx));
        DRV(p_cuStreamBeginCaptureToGraph(s, tg, &t_set, nullptr, 1, CU_STREAM_CAPTURE_MODE_GLOBAL));
        Axpb a9(dc, 1, 0);
        DRV(p_cuLaunchKernel(axpb_f, N / 128, 1, 1, 128, 1, 1, 0, s, a9.params, nullptr));
        DRV(p_cuStreamUpdateCaptureDependencies(s, &t_set, nullptr, 1, CU_STREAM_ADD_CAPTURE_DEPENDENCIES));
        DRV(p_cuStreamGetCaptureInfo(s, &status, &id, &capturing, &deps, nullptr, &ndeps));
        EXPECT(capturing == tg && ndeps == 2);
        DRV(p_cuMemcpyDtoDAsync(dd, dc, N * 4, s));
        CUgraph ended;
        DRV(p_cuStreamEndCapture(s, &ended));
        EXPECT(ended == tg);
        DRV(p_cuGraphGetNodes(tg, nullptr, &count));
        EXPECT(count == 3);
        CUgraphExec te;
        DRV(p_cuGraphInstantiate(&te, tg, 0));
        DRV(p_cuGraphLaunch(te, s));
        DRV(p_cuStreamSynchronize(s));
        check(dc, 2, 1, "a capture into a graph");
        check(dd, 2, 1, "a capture into a graph, copied");
        DRV(p_cuGraphExecDestroy(te));
        DRV(p_cuGraphDestroy(tg));
    }
    GATE(2);
    launch_all("after gate 2");

    // A library through the driver: its CUkernel launched by cuLaunchKernel, and the kernel
    // of a node (func NULL, kern set).
    char *text = strdup(AXPB_PTX);
    CUlibrary lib;
    DRV(p_cuLibraryLoadData(&lib, text, nullptr, nullptr, 0, nullptr, nullptr, 0));
    free(text);
    CUkernel k;
    DRV(p_cuLibraryGetKernel(&k, lib, "axpb"));
    CUkernel missing;
    EXPECT(p_cuLibraryGetKernel(&missing, lib, "no_such_kernel") == CUDA_ERROR_NOT_FOUND);
    CUmodule mod;
    DRV(p_cuLibraryGetModule(&mod, lib));
    CUfunction kf;
    DRV(p_cuKernelGetFunction(&kf, k));
    int max_threads = 0;
    DRV(p_cuKernelGetAttribute(&max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, k, dev));
    EXPECT(max_threads >= 128);
    CUdeviceptr gvar;
    EXPECT(p_cuLibraryGetGlobal(&gvar, nullptr, lib, "no_such_global") == CUDA_ERROR_NOT_FOUND);
    // The kernel's name, parameters and attributes, through the CUkernel and the CUfunction.
    const char *name = nullptr;
    DRV(p_cuKernelGetName(&name, k));
    EXPECT(strcmp(name, "axpb") == 0);
    DRV(p_cuFuncGetName(&name, axpb_f));
    EXPECT(strcmp(name, "axpb") == 0);
    size_t off = 0, size = 0;
    DRV(p_cuKernelGetParamInfo(k, 1, &off, &size));  // (u64 p, u32 n, ...): n at 8
    EXPECT(off == 8 && size == 4);
    DRV(p_cuFuncGetParamInfo(axpb_f, 4, &off, &size));
    EXPECT(off == 20 && size == 4);
    DRV(p_cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 2048, k, dev));
    int dyn = 0;
    DRV(p_cuKernelGetAttribute(&dyn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, k, dev));
    EXPECT(dyn == 2048);
    DRV(p_cuFuncSetAttribute(axpb_f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 1024));
    DRV(p_cuFuncGetAttribute(&dyn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, axpb_f));
    EXPECT(dyn == 1024);
    DRV(p_cuKernelSetCacheConfig(k, CU_FUNC_CACHE_PREFER_SHARED, dev));
    DRV(p_cuFuncSetCacheConfig(axpb_f, CU_FUNC_CACHE_PREFER_L1));
    // cuLaunchKernelEx with a launch attribute: de = 1, then 1*4 + 0 + i.
    DRV(p_cuMemsetD32(de, 1, N));
    {
        Axpb ax(de, 4, 0);
        CUlaunchAttribute attr = {};
        attr.id = CU_LAUNCH_ATTRIBUTE_PRIORITY;
        attr.value.priority = 0;
        CUlaunchConfig lc = {};
        lc.gridDimX = N / 128;
        lc.gridDimY = lc.gridDimZ = 1;
        lc.blockDimX = 128;
        lc.blockDimY = lc.blockDimZ = 1;
        lc.sharedMemBytes = 256;
        lc.hStream = s;
        lc.attrs = &attr;
        lc.numAttrs = 1;
        DRV(p_cuLaunchKernelEx(&lc, (CUfunction)k, ax.params, nullptr));
        DRV(p_cuStreamSynchronize(s));
        check(de, 4, 1, "cuLaunchKernelEx");
    }
    DRV(p_cuMemsetD32(de, 1, N));
    Axpb a4(de, 2, 0);
    DRV(p_cuLaunchKernel((CUfunction)k, N / 128, 1, 1, 128, 1, 1, 0, s, a4.params, nullptr));
    DRV(p_cuStreamSynchronize(s));
    check(de, 2, 1, "a CUkernel launched by cuLaunchKernel");

    // A library from a file (deleted once loaded), its kernels enumerated.
    {
        char path[] = "/tmp/crum-driver-graphs-XXXXXX";
        temp_file(path, AXPB_PTX);
        CUlibrary flib;
        DRV(p_cuLibraryLoadFromFile(&flib, path, nullptr, nullptr, 0, nullptr, nullptr, 0));
        unlink(path);
        unsigned kc = 0;
        DRV(p_cuLibraryGetKernelCount(&kc, flib));
        EXPECT(kc == 1);
        CUkernel fk;
        DRV(p_cuLibraryEnumerateKernels(&fk, 1, flib));
        CUdeviceptr mp;
        EXPECT(p_cuLibraryGetManaged(&mp, nullptr, flib, "no_such_variable") == CUDA_ERROR_NOT_FOUND);
        DRV(p_cuMemsetD32(de, 1, N));
        Axpb a8(de, 3, 0);
        DRV(p_cuLaunchKernel((CUfunction)fk, N / 128, 1, 1, 128, 1, 1, 0, s, a8.params, nullptr));
        DRV(p_cuStreamSynchronize(s));
        check(de, 3, 1, "a kernel of a library loaded from a file");
        DRV(p_cuLibraryUnload(flib));
    }
    // Nodes through the generic API (cuGraphAddNode): de = 2 (memset), axpb(de, 3, 1) by the
    // library's kernel: 7+i, copied to dd, a host node (+1).
    {
        CUgraph ng;
        DRV(p_cuGraphCreate(&ng, 0));
        CUgraphNodeParams np;
        memset(&np, 0, sizeof np);
        np.type = CU_GRAPH_NODE_TYPE_MEMSET;
        np.memset.dst = de;
        np.memset.value = 2;
        np.memset.elementSize = 4;
        np.memset.width = N;
        np.memset.height = 1;
        CUgraphNode g_set, g_kernel, g_copy, g_host;
        DRV(p_cuGraphAddNode(&g_set, ng, nullptr, nullptr, 0, &np));
        static Axpb a11(de, 3, 1);
        memset(&np, 0, sizeof np);
        np.type = CU_GRAPH_NODE_TYPE_KERNEL;
        np.kernel.kern = k;
        np.kernel.gridDimX = N / 128;
        np.kernel.gridDimY = np.kernel.gridDimZ = 1;
        np.kernel.blockDimX = 128;
        np.kernel.blockDimY = np.kernel.blockDimZ = 1;
        np.kernel.kernelParams = a11.params;
        DRV(p_cuGraphAddNode(&g_kernel, ng, &g_set, nullptr, 1, &np));
        memset(&np, 0, sizeof np);
        np.type = CU_GRAPH_NODE_TYPE_MEMCPY;
        np.memcpy.copyParams = cp;
        np.memcpy.copyParams.srcDevice = de;
        np.memcpy.copyParams.dstDevice = dd;
        DRV(p_cuGraphAddNode(&g_copy, ng, &g_kernel, nullptr, 1, &np));
        memset(&np, 0, sizeof np);
        np.type = CU_GRAPH_NODE_TYPE_HOST;
        np.host.fn = count_run;
        np.host.userData = &one;
        DRV(p_cuGraphAddNode(&g_host, ng, &g_copy, nullptr, 1, &np));
        memset(&np, 0xff, sizeof np);
        DRV(p_cuGraphNodeGetParams(g_kernel, &np));
        EXPECT(np.type == CU_GRAPH_NODE_TYPE_KERNEL && np.kernel.gridDimX == N / 128 && np.kernel.blockDimX == 128);
        DRV(p_cuGraphNodeGetParams(g_copy, &np));
        EXPECT(np.type == CU_GRAPH_NODE_TYPE_MEMCPY && np.memcpy.copyParams.dstDevice == dd &&
               np.memcpy.copyParams.WidthInBytes == N * 4);
        DRV(p_cuGraphNodeGetParams(g_set, &np));
        EXPECT(np.type == CU_GRAPH_NODE_TYPE_MEMSET && np.memset.value == 2);
        np.memset.value = 4;  // 4*3 + 1 + i
        DRV(p_cuGraphNodeSetParams(g_set, &np));
        CUgraphExec ne;
        DRV(p_cuGraphInstantiate(&ne, ng, 0));
        int before = host_runs;
        DRV(p_cuGraphLaunch(ne, s));
        DRV(p_cuStreamSynchronize(s));
        check(dd, 13, 1, "generic nodes");
        EXPECT(host_runs == before + 1);
        np.memset.value = 5;  // 5*3 + 1 + i
        DRV(p_cuGraphExecNodeSetParams(ne, g_set, &np));
        DRV(p_cuGraphLaunch(ne, s));
        DRV(p_cuStreamSynchronize(s));
        check(dd, 16, 1, "a generic node's executable parameters");
        DRV(p_cuGraphExecDestroy(ne));
        DRV(p_cuGraphDestroy(ng));
        // The runtime's generic node with a driver CUfunction: de = 1, then 1*2 + 5 + i.
        cudaGraph_t rg2;
        CK(cudaGraphCreate(&rg2, 0));
        static Axpb a12(de, 2, 5);
        cudaGraphNodeParams rp = {};
        rp.type = cudaGraphNodeTypeKernel;
        rp.kernel.func = (void *)axpb_f;
        rp.kernel.functionType = cudaKernelFunctionTypeFunction;
        rp.kernel.gridDim = dim3(N / 128);
        rp.kernel.blockDim = dim3(128);
        rp.kernel.kernelParams = a12.params;
        cudaGraphNode_t rn;
        CK(cudaGraphAddNode(&rn, rg2, nullptr, nullptr, 0, &rp));
        cudaGraphExec_t re;
        CK(cudaGraphInstantiate(&re, rg2, 0));
        DRV(p_cuMemsetD32(de, 1, N));
        CK(cudaGraphLaunch(re, s));
        CK(cudaStreamSynchronize(s));
        check(de, 7, 1, "a runtime node of a driver CUfunction");
        CK(cudaGraphExecDestroy(re));
        CK(cudaGraphDestroy(rg2));
    }
    // Kernel node attributes, a user object a graph owns, a graph printed (never launched).
    {
        CUgraph ag;
        DRV(p_cuGraphCreate(&ag, 0));
        static Axpb a10(de, 1, 0);
        CUDA_KERNEL_NODE_PARAMS ka = kernel_node(nullptr, k, a10);
        CUgraphNode k1, k2;
        DRV(p_cuGraphAddKernelNode(&k1, ag, nullptr, 0, &ka));
        DRV(p_cuGraphAddKernelNode(&k2, ag, &k1, 1, &ka));
        CUkernelNodeAttrValue av = {};
        av.cooperative = 1;
        DRV(p_cuGraphKernelNodeSetAttribute(k1, CU_KERNEL_NODE_ATTRIBUTE_COOPERATIVE, &av));
        DRV(p_cuGraphKernelNodeCopyAttributes(k2, k1));
        av.cooperative = 0;
        DRV(p_cuGraphKernelNodeGetAttribute(k2, CU_KERNEL_NODE_ATTRIBUTE_COOPERATIVE, &av));
        EXPECT(av.cooperative == 1);
        static int five = 5;
        CUuserObject obj;
        DRV(p_cuUserObjectCreate(&obj, &five, destroy_object, 1, CU_USER_OBJECT_NO_DESTRUCTOR_SYNC));
        DRV(p_cuUserObjectRetain(obj, 2));
        DRV(p_cuGraphRetainUserObject(ag, obj, 1, CU_GRAPH_USER_OBJECT_MOVE));
        DRV(p_cuGraphRetainUserObject(ag, obj, 1, 0));
        DRV(p_cuGraphReleaseUserObject(ag, obj, 1));
        DRV(p_cuUserObjectRelease(obj, 2));
        EXPECT(destroyed == 0);
        char path[] = "/tmp/crum-driver-graphs-XXXXXX";
        temp_file(path, "");
        DRV(p_cuGraphDebugDotPrint(ag, path, 0));
        FILE *f = fopen(path, "r");
        EXPECT(f != nullptr);
        char head[8] = {};
        EXPECT(fread(head, 1, 7, f) == 7 && strcmp(head, "digraph") == 0);
        fclose(f);
        unlink(path);
        // The graph held the last reference: destroyed with it (the destructor may run later,
        // on another thread; waited for, up to 10 s).
        DRV(p_cuGraphDestroy(ag));
        for (int i = 0; i < 5000 && destroyed == 0; i++) usleep(2000);
        EXPECT(destroyed == 5);
    }

    // de = 0 (memset node), then axpb(de, 0, 3): 3+i, through the library's kernel.
    CUgraph ug;
    DRV(p_cuGraphCreate(&ug, 0));
    ms.dst = de;
    ms.value = 0;
    CUgraphNode u_set, u_wait, u_kernel;
    DRV(p_cuGraphAddMemsetNode(&u_set, ug, nullptr, 0, &ms, nullptr));
    DRV(p_cuGraphAddEventWaitNode(&u_wait, ug, &u_set, 1, done));
    CUevent waited = nullptr;
    DRV(p_cuGraphEventWaitNodeGetEvent(u_wait, &waited));
    EXPECT(waited == done);
    DRV(p_cuGraphEventWaitNodeSetEvent(u_wait, done));
    static Axpb a5(de, 0, 3);
    CUDA_KERNEL_NODE_PARAMS ku = kernel_node(nullptr, k, a5);
    DRV(p_cuGraphAddKernelNode(&u_kernel, ug, &u_wait, 1, &ku));
    DRV(p_cuGraphInstantiate(&updated, ug, 0));
    // Graph memory: allocated by a node (its address fixed when the node is added), set to 8,
    // copied to df, freed by a node.
    CUgraph mg;
    DRV(p_cuGraphCreate(&mg, 0));
    CUDA_MEM_ALLOC_NODE_PARAMS ap = {};
    ap.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    ap.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    ap.poolProps.location.id = dev;
    ap.bytesize = N * 4;
    CUgraphNode m_alloc, m_set, m_copy, m_free;
    DRV(p_cuGraphAddMemAllocNode(&m_alloc, mg, nullptr, 0, &ap));
    EXPECT(ap.dptr != 0);
    CUDA_MEM_ALLOC_NODE_PARAMS apg = {};
    DRV(p_cuGraphMemAllocNodeGetParams(m_alloc, &apg));
    EXPECT(apg.dptr == ap.dptr && apg.bytesize == N * 4);
    CUDA_MEMSET_NODE_PARAMS mm = ms;
    mm.dst = ap.dptr;
    mm.value = 8;
    DRV(p_cuGraphAddMemsetNode(&m_set, mg, &m_alloc, 1, &mm, ctx));
    CUDA_MEMCPY3D mc = cp;
    mc.srcDevice = ap.dptr;
    mc.dstDevice = df;
    DRV(p_cuGraphAddMemcpyNode(&m_copy, mg, &m_set, 1, &mc, ctx));
    DRV(p_cuGraphAddMemFreeNode(&m_free, mg, &m_copy, 1, ap.dptr));
    CUdeviceptr freed = 0;
    DRV(p_cuGraphMemFreeNodeGetParams(m_free, &freed));
    EXPECT(freed == ap.dptr);
    DRV(p_cuGraphInstantiate(&with_memory, mg, 0));
    DRV(p_cuGraphDestroy(mg));
    DRV(p_cuGraphExecEventWaitNodeSetEvent(updated, u_wait, done));
    updated_b = 3;
    stage = 3;
    launch_all("the library's graph");
    // The executable node's parameters changed: b = 9.
    static Axpb a6(de, 0, 9);
    ku = kernel_node(nullptr, k, a6);
    DRV(p_cuGraphExecKernelNodeSetParams(updated, u_kernel, &ku));
    updated_b = 9;
    launch_all("after cuGraphExecKernelNodeSetParams");
    // The graph's node changed (b = 20), the executable graph updated from it.
    static Axpb a7(de, 0, 20);
    ku = kernel_node(kf, nullptr, a7);
    DRV(p_cuGraphKernelNodeSetParams(u_kernel, &ku));
    CUgraphExecUpdateResultInfo info = {};
    DRV(p_cuGraphExecUpdate(updated, ug, &info));
    EXPECT(info.result == CU_GRAPH_EXEC_UPDATE_SUCCESS);
    updated_b = 20;
    launch_all("after cuGraphExecUpdate");
    cuuint64_t reserved = 0;
    DRV(p_cuDeviceGetGraphMemAttribute(dev, CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH, &reserved));
    EXPECT(reserved >= N * 4);
    DRV(p_cuDeviceGraphMemTrim(dev));
    cuuint64_t zero = 0;
    DRV(p_cuDeviceSetGraphMemAttribute(dev, CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH, &zero));
    DRV(p_cuGraphDestroy(ug));
    printf("a library's CUkernel launched directly and from an updated graph\n");
    GATE(3);
    launch_all("after gate 3");

    for (CUgraphExec e : {built, captured, by_runtime, updated, with_memory}) DRV(p_cuGraphExecDestroy(e));
    DRV(p_cuLibraryUnload(lib));
    for (CUdeviceptr d : {da, db, dc, dd, de, df}) DRV(p_cuMemFree(d));
    printf("PASS\n");
    return 0;
}
