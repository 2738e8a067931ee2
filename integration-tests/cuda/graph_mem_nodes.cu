// Graph memory nodes and the generic node API: cudaGraphAddNode / NodeGetParams /
// NodeSetParams / ExecNodeSetParams for kernel, memset, copy, host, event and child-graph
// (moved in) nodes; mem alloc and free nodes built explicitly and captured from
// cudaMallocAsync / cudaFreeAsync (the allocation keeps its address across launches, the
// graph-memory attributes count it until the graph goes); cudaGraphInstantiateWithParams.
// Graphs are launched again after every gate (so after restarts). Checked against the CPU.
#include "common.h"
#include <cstdint>

__global__ void iota(int *a, int n, int k) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) a[i] = k * i; }
__global__ void addk(int *a, int n, int k) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) a[i] += k; }

static const int N = 1 << 14;
static int host_calls = 0;
static void CUDART_CB on_host(void *) { host_calls++; }

static void check(const int *h, int k, int add, const char *what) {
    for (int i = 0; i < N; i++)
        if (h[i] != k * i + add) { printf("FAIL %s: [%d] = %d, want %d\n", what, i, h[i], k * i + add); exit(1); }
}

static uint64_t graph_mem() {
    uint64_t v = 0;
    CK(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrUsedMemCurrent, &v));
    return v;
}

int main() {
    int *h;
    CK(cudaMallocHost(&h, N * 4));
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    int nn = N;
    const uint64_t mem0 = graph_mem();

    // alloc → iota(k) → addk(1) → copy out → host → free, with the generic API.
    cudaGraph_t g;
    CK(cudaGraphCreate(&g, 0));
    cudaGraphNode_t A, K, K2, C, H, F;
    cudaMemAllocNodeParams ap = {};
    ap.poolProps.allocType = cudaMemAllocationTypePinned;
    ap.poolProps.location.type = cudaMemLocationTypeDevice;
    ap.poolProps.location.id = 0;
    ap.bytesize = N * 4;
    CK(cudaGraphAddMemAllocNode(&A, g, nullptr, 0, &ap));
    int *buf = (int *)ap.dptr;
    EXPECT(buf != nullptr);
    // Graph memory counts from the graph's first launch, not when the node is added (CUDA 13
    // on an H200).
    EXPECT(graph_mem() == mem0);
    int k = 3;
    void *args[] = {&buf, &nn, &k};
    cudaGraphNodeParams np = {};
    np.type = cudaGraphNodeTypeKernel;
    np.kernel.func = (void *)iota;
    np.kernel.gridDim = dim3(N / 256);
    np.kernel.blockDim = dim3(256);
    np.kernel.kernelParams = args;
    CK(cudaGraphAddNode(&K, g, &A, nullptr, 1, &np));
    int one = 1;
    void *args2[] = {&buf, &nn, &one};
    cudaGraphNodeParams np2 = np;
    np2.kernel.func = (void *)addk;
    np2.kernel.kernelParams = args2;
    CK(cudaGraphAddNode(&K2, g, &K, nullptr, 1, &np2));
    cudaGraphNodeParams cp = {};
    cp.type = cudaGraphNodeTypeMemcpy;
    cp.memcpy.copyParams.srcPtr = make_cudaPitchedPtr(buf, N * 4, N * 4, 1);
    cp.memcpy.copyParams.dstPtr = make_cudaPitchedPtr(h, N * 4, N * 4, 1);
    cp.memcpy.copyParams.extent = make_cudaExtent(N * 4, 1, 1);
    cp.memcpy.copyParams.kind = cudaMemcpyDeviceToHost;
    CK(cudaGraphAddNode(&C, g, &K2, nullptr, 1, &cp));
    cudaGraphNodeParams hp = {};
    hp.type = cudaGraphNodeTypeHost;
    hp.host.fn = on_host;
    CK(cudaGraphAddNode(&H, g, &C, nullptr, 1, &hp));
    CK(cudaGraphAddMemFreeNode(&F, g, &H, 1, buf));

    // Reading parameters back.
    cudaGraphNodeParams got = {};
    CK(cudaGraphNodeGetParams(K, &got));
    EXPECT(got.type == cudaGraphNodeTypeKernel && got.kernel.func == (void *)iota);
    EXPECT(*(int *)got.kernel.kernelParams[2] == 3 && got.kernel.gridDim.x == N / 256);
    CK(cudaGraphNodeGetParams(A, &got));
    EXPECT(got.type == cudaGraphNodeTypeMemAlloc && got.alloc.dptr == buf && got.alloc.bytesize == N * 4);
    cudaMemAllocNodeParams ap2 = {};
    CK(cudaGraphMemAllocNodeGetParams(A, &ap2));
    EXPECT(ap2.dptr == buf && ap2.bytesize == N * 4);
    void *freed = nullptr;
    CK(cudaGraphMemFreeNodeGetParams(F, &freed));
    EXPECT(freed == buf);
    cudaGraph_t clone;
    EXPECT(cudaGraphClone(&clone, g) == cudaErrorNotSupported);
    cudaGetLastError();

    cudaGraphInstantiateParams ip = {};
    ip.flags = 0;
    cudaGraphExec_t exec;
    CK(cudaGraphInstantiateWithParams(&exec, g, &ip));
    EXPECT(ip.result_out == cudaGraphInstantiateSuccess);
    CK(cudaGraphLaunch(exec, s));
    GATE(1);
    CK(cudaStreamSynchronize(s));
    check(h, 3, 1, "alloc graph");
    EXPECT(host_calls == 1);

    // The kernel node of the executable graph takes k = 5; the graph node gets k = 7.
    k = 5;
    CK(cudaGraphExecNodeSetParams(exec, K, &np));
    k = 7;
    CK(cudaGraphNodeSetParams(K, &np));
    CK(cudaGraphLaunch(exec, s));
    CK(cudaStreamSynchronize(s));
    check(h, 5, 1, "exec node parameters");
    CK(cudaGraphNodeGetParams(K, &got));
    EXPECT(*(int *)got.kernel.kernelParams[2] == 7);

    // A child graph moved into a parent; memset and event record nodes through the generic API.
    int *d2;
    CK(cudaMalloc(&d2, N * 4));
    cudaGraph_t child, parent;
    CK(cudaGraphCreate(&child, 0));
    cudaGraphNode_t c1, P0, P1, P2, P3;
    int nine = 9;
    void *cargs[] = {&d2, &nn, &nine};
    cudaGraphNodeParams kp = np;
    kp.kernel.func = (void *)addk;
    kp.kernel.kernelParams = cargs;
    CK(cudaGraphAddNode(&c1, child, nullptr, nullptr, 0, &kp));
    CK(cudaGraphCreate(&parent, 0));
    cudaGraphNodeParams msp = {};
    msp.type = cudaGraphNodeTypeMemset;
    msp.memset.dst = d2; msp.memset.value = 0; msp.memset.elementSize = 4; msp.memset.width = N; msp.memset.height = 1;
    CK(cudaGraphAddNode(&P0, parent, nullptr, nullptr, 0, &msp));
    cudaGraphNodeParams chp = {};
    chp.type = cudaGraphNodeTypeGraph;
    chp.graph.graph = child;
    chp.graph.ownership = cudaGraphChildGraphOwnershipMove;
    CK(cudaGraphAddNode(&P1, parent, &P0, nullptr, 1, &chp));
    cudaGraph_t inner;
    CK(cudaGraphChildGraphNodeGetGraph(P1, &inner));
    EXPECT(inner == child);  // moved, not copied
    cudaEvent_t ev;
    CK(cudaEventCreate(&ev));
    cudaGraphNodeParams erp = {};
    erp.type = cudaGraphNodeTypeEventRecord;
    erp.eventRecord.event = ev;
    CK(cudaGraphAddNode(&P2, parent, &P1, nullptr, 1, &erp));
    CK(cudaGraphAddMemcpyNode1D(&P3, parent, &P2, 1, h, d2, N * 4, cudaMemcpyDeviceToHost));
    cudaGraphExec_t pexec;
    CK(cudaGraphInstantiate(&pexec, parent, 0));

    // Captured: cudaMallocAsync / cudaFreeAsync become alloc and free nodes.
    cudaGraph_t cg;
    int *cbuf = nullptr;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    CK(cudaMallocAsync(&cbuf, N * 4, s));
    iota<<<N / 256, 256, 0, s>>>(cbuf, N, 2);
    addk<<<N / 256, 256, 0, s>>>(cbuf, N, 4);
    CK(cudaMemcpyAsync(h, cbuf, N * 4, cudaMemcpyDeviceToHost, s));
    CK(cudaFreeAsync(cbuf, s));
    CK(cudaStreamEndCapture(s, &cg));
    size_t n = 0;
    CK(cudaGraphGetNodes(cg, nullptr, &n));
    EXPECT(n == 5);
    cudaGraphNode_t cnodes[5];
    CK(cudaGraphGetNodes(cg, cnodes, &n));
    cudaGraphNodeType t0, t4;
    CK(cudaGraphNodeGetType(cnodes[0], &t0));
    CK(cudaGraphNodeGetType(cnodes[4], &t4));
    EXPECT(t0 == cudaGraphNodeTypeMemAlloc && t4 == cudaGraphNodeTypeMemFree);
    cudaGraphExec_t cexec;
    CK(cudaGraphInstantiate(&cexec, cg, 0));
    GATE(2);  // graphs with their memory built, not launched

    CK(cudaGraphLaunch(pexec, s));
    CK(cudaStreamSynchronize(s));
    for (int i = 0; i < N; i++) EXPECT(h[i] == 9);
    CK(cudaEventSynchronize(ev));
    CK(cudaGraphLaunch(cexec, s));
    CK(cudaStreamSynchronize(s));
    check(h, 2, 4, "captured alloc graph");
    CK(cudaGraphLaunch(exec, s));
    GATE(3);
    CK(cudaStreamSynchronize(s));
    check(h, 5, 1, "alloc graph after the gates");
    CK(cudaGraphLaunch(cexec, s));
    CK(cudaStreamSynchronize(s));
    check(h, 2, 4, "captured alloc graph after the gates");
    EXPECT(host_calls == 3);

    // Launched, the graphs' memory counts, freed too, until a trim; it goes with the graphs.
    EXPECT(graph_mem() >= mem0 + 2 * N * 4);
    CK(cudaGraphExecDestroy(exec));
    CK(cudaGraphDestroy(g));
    CK(cudaGraphExecDestroy(cexec));
    CK(cudaGraphDestroy(cg));
    CK(cudaDeviceGraphMemTrim(0));
    EXPECT(graph_mem() == mem0);
    uint64_t high = 0;
    CK(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrUsedMemHigh, &high));
    EXPECT(high >= 2 * N * 4);
    CK(cudaGraphExecDestroy(pexec));
    CK(cudaGraphDestroy(parent));
    CK(cudaFree(d2));
    printf("graph memory nodes and generic nodes: %d host calls\n", host_calls);
    printf("PASS\n");
    return 0;
}
