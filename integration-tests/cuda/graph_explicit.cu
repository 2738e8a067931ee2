// CUDA graphs built node by node: kernel, copy (1-D and 3-D parameters), memset (4-byte
// pattern and bytes), host, empty, child-graph, event record and wait nodes, dependencies
// added afterwards; queries (nodes, roots, edges, types, parameters); instantiate, launch
// several times, node parameters changed in the executable graph and through
// cudaGraphExecUpdate, a clone launched on another stream. The graphs built before each gate
// are launched again after it (and so after a restart). Results checked against the CPU.
#include "common.h"
#include <vector>

__global__ void axpy(int *y, const int *x, int n, int k) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += k * x[i];
}
__global__ void scale(int *a, int n, int k) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) a[i] *= k;
}
__global__ void fill(int *a, int n, int v) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) a[i] += v + i;
}

static int host_calls = 0;
static void CUDART_CB on_host(void *arg) { host_calls += *(int *)arg; }

static const int N = 4096;

static void check_y(const int *hy, int k, int extra, const char *what) {
    for (int i = 0; i < N; i++) {
        int want = (3 + k * (i % 7)) * 3 * extra;
        if (hy[i] != want) {
            printf("FAIL %s: y[%d] = %d, want %d\n", what, i, hy[i], want);
            exit(1);
        }
    }
}

static cudaKernelNodeParams axpy_params(void **args) {
    cudaKernelNodeParams p = {};
    p.func = (void *)axpy;
    p.gridDim = dim3(N / 256);
    p.blockDim = dim3(256);
    p.kernelParams = args;
    return p;
}

int main() {
    int *dx, *dy, *dz, *hy, *hz;
    std::vector<int> hx(N);
    for (int i = 0; i < N; i++) hx[i] = i % 7;
    CK(cudaMalloc(&dx, N * 4));
    CK(cudaMalloc(&dy, N * 4));
    CK(cudaMalloc(&dz, N * 4));
    CK(cudaMallocHost(&hy, N * 4));
    CK(cudaMallocHost(&hz, N * 4));
    cudaStream_t s, s2;
    CK(cudaStreamCreate(&s));
    CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    cudaEvent_t ev;
    CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));

    cudaGraph_t g;
    CK(cudaGraphCreate(&g, 0));
    cudaGraphNode_t A, B, C, D, E, F, G, H, I, J;
    // A: x from pageable host memory.
    CK(cudaGraphAddMemcpyNode1D(&A, g, nullptr, 0, dx, hx.data(), N * 4, cudaMemcpyHostToDevice));
    // B: y = 3, a 4-byte pattern whose bytes differ.
    cudaMemsetParams ms = {};
    ms.dst = dy; ms.value = 3; ms.elementSize = 4; ms.width = N; ms.height = 1;
    CK(cudaGraphAddMemsetNode(&B, g, nullptr, 0, &ms));
    // C: y += k * x, after A and B. The arguments are copied now: changing k later does not
    // change the node.
    int k = 2, nn = N;
    void *args[] = {&dy, &dx, &nn, &k};
    cudaKernelNodeParams kp = axpy_params(args);
    cudaGraphNode_t ab[] = {A, B};
    CK(cudaGraphAddKernelNode(&C, g, ab, 2, &kp));
    k = 100;
    // D: a host node.
    static int one = 1;
    cudaHostNodeParams hp = {on_host, &one};
    CK(cudaGraphAddHostNode(&D, g, &C, 1, &hp));
    // E: a child graph: y *= 3, then an empty node.
    cudaGraph_t child;
    CK(cudaGraphCreate(&child, 0));
    cudaGraphNode_t c1, c2;
    int three = 3;
    void *sargs[] = {&dy, &nn, &three};
    cudaKernelNodeParams sp = {};
    sp.func = (void *)scale; sp.gridDim = dim3(N / 256); sp.blockDim = dim3(256); sp.kernelParams = sargs;
    CK(cudaGraphAddKernelNode(&c1, child, nullptr, 0, &sp));
    CK(cudaGraphAddEmptyNode(&c2, child, &c1, 1));
    CK(cudaGraphAddChildGraphNode(&E, g, &D, 1, child));
    CK(cudaGraphDestroy(child));  // the node holds its own copy
    // F: y back to pinned host memory, with 3-D parameters.
    cudaMemcpy3DParms cp = {};
    cp.srcPtr = make_cudaPitchedPtr(dy, N * 4, N * 4, 1);
    cp.dstPtr = make_cudaPitchedPtr(hy, N * 4, N * 4, 1);
    cp.extent = make_cudaExtent(N * 4, 1, 1);
    cp.kind = cudaMemcpyDeviceToHost;
    CK(cudaGraphAddMemcpyNode(&F, g, &E, 1, &cp));
    CK(cudaGraphAddEventRecordNode(&G, g, &F, 1, ev));
    // I: z = 0 (bytes), H: z += 5 + i, J: z back; I → H added as an edge afterwards.
    cudaMemsetParams zs = {};
    zs.dst = dz; zs.value = 0; zs.elementSize = 1; zs.width = N * 4; zs.height = 1;
    CK(cudaGraphAddMemsetNode(&I, g, nullptr, 0, &zs));
    int five = 5;
    void *fargs[] = {&dz, &nn, &five};
    cudaKernelNodeParams fp = sp;
    fp.func = (void *)fill; fp.kernelParams = fargs;
    CK(cudaGraphAddKernelNode(&H, g, nullptr, 0, &fp));
    CK(cudaGraphAddMemcpyNode1D(&J, g, &H, 1, hz, dz, N * 4, cudaMemcpyDeviceToHost));
    CK(cudaGraphAddDependencies(g, &I, &H, nullptr, 1));

    // Queries.
    size_t nodes = 0, roots = 0, edges = 0;
    CK(cudaGraphGetNodes(g, nullptr, &nodes));
    CK(cudaGraphGetRootNodes(g, nullptr, &roots));
    CK(cudaGraphGetEdges(g, nullptr, nullptr, nullptr, &edges));
    EXPECT(nodes == 10 && roots == 3 && edges == 8);
    std::vector<cudaGraphNode_t> from(edges), to(edges);
    CK(cudaGraphGetEdges(g, from.data(), to.data(), nullptr, &edges));
    int found = 0;
    for (size_t i = 0; i < edges; i++) found += (from[i] == I && to[i] == H) + (from[i] == B && to[i] == C);
    EXPECT(found == 2);
    cudaGraphNodeType ty;
    CK(cudaGraphNodeGetType(E, &ty)); EXPECT(ty == cudaGraphNodeTypeGraph);
    CK(cudaGraphNodeGetType(B, &ty)); EXPECT(ty == cudaGraphNodeTypeMemset);
    CK(cudaGraphNodeGetType(G, &ty)); EXPECT(ty == cudaGraphNodeTypeEventRecord);
    cudaGraph_t inner;
    size_t inner_nodes = 0;
    CK(cudaGraphChildGraphNodeGetGraph(E, &inner));
    CK(cudaGraphGetNodes(inner, nullptr, &inner_nodes));
    EXPECT(inner_nodes == 2);
    cudaKernelNodeParams got = {};
    CK(cudaGraphKernelNodeGetParams(C, &got));
    EXPECT(got.func == (void *)axpy && got.gridDim.x == N / 256 && got.blockDim.x == 256);
    EXPECT(*(int *)got.kernelParams[3] == 2 && *(int **)got.kernelParams[0] == dy);
    cudaMemsetParams gm = {};
    CK(cudaGraphMemsetNodeGetParams(B, &gm));
    EXPECT(gm.value == 3 && gm.elementSize == 4 && gm.width == N);
    size_t ndeps = 0;
    CK(cudaGraphNodeGetDependencies(C, nullptr, nullptr, &ndeps));
    EXPECT(ndeps == 2);
    EXPECT(cudaGraphAddDependencies(g, &I, &H, nullptr, 1) == cudaErrorInvalidValue);
    cudaGetLastError();

    cudaGraphExec_t exec;
    CK(cudaGraphInstantiate(&exec, g, 0));
    CK(cudaGraphLaunch(exec, s));
    GATE(1);  // launched, maybe not finished
    CK(cudaStreamSynchronize(s));
    check_y(hy, 2, 1, "first launch");
    for (int i = 0; i < N; i++) EXPECT(hz[i] == 5 + i);
    EXPECT(host_calls == 1);

    // The executable graph's kernel node gets k = 4; the graph keeps 2.
    k = 4;
    kp = axpy_params(args);
    CK(cudaGraphExecKernelNodeSetParams(exec, C, &kp));
    CK(cudaGraphLaunch(exec, s));
    CK(cudaGraphLaunch(exec, s));
    GATE(2);  // two launches queued
    CK(cudaStreamSynchronize(s));
    check_y(hy, 4, 1, "exec node parameters");
    EXPECT(host_calls == 3);

    // The graph's node gets k = 5 and the executable graph is updated from it.
    k = 5;
    kp = axpy_params(args);
    CK(cudaGraphKernelNodeSetParams(C, &kp));
    cudaGraphExecUpdateResultInfo info = {};
    CK(cudaGraphExecUpdate(exec, g, &info));
    EXPECT(info.result == cudaGraphExecUpdateSuccess);
    CK(cudaGraphLaunch(exec, s));

    // A clone with k = 7, launched on another stream: it waits for the launch on s.
    cudaGraph_t g2;
    cudaGraphNode_t C2;
    CK(cudaGraphClone(&g2, g));
    CK(cudaGraphNodeFindInClone(&C2, C, g2));
    k = 7;
    kp = axpy_params(args);
    CK(cudaGraphKernelNodeSetParams(C2, &kp));
    cudaGraphExec_t exec2;
    CK(cudaGraphInstantiateWithFlags(&exec2, g2, 0));
    // g3: waits for the event g's last node records, then y *= 2 and copies it back.
    cudaGraph_t g3;
    CK(cudaGraphCreate(&g3, 0));
    cudaGraphNode_t W, K2, R;
    CK(cudaGraphAddEventWaitNode(&W, g3, nullptr, 0, ev));
    int two = 2;
    void *targs[] = {&dy, &nn, &two};
    cudaKernelNodeParams tp = sp;
    tp.kernelParams = targs;
    CK(cudaGraphAddKernelNode(&K2, g3, &W, 1, &tp));
    CK(cudaGraphAddMemcpyNode1D(&R, g3, &K2, 1, hy, dy, N * 4, cudaMemcpyDeviceToHost));
    cudaGraphExec_t exec3;
    CK(cudaGraphInstantiate(&exec3, g3, 0));
    CK(cudaStreamSynchronize(s));
    check_y(hy, 5, 1, "updated executable graph");
    EXPECT(host_calls == 4);
    CK(cudaGraphLaunch(exec2, s2));
    CK(cudaStreamSynchronize(s2));
    check_y(hy, 7, 1, "clone");
    GATE(3);

    // After the gate: every executable graph again. exec on s records ev; exec3 on s2 waits
    // for it and doubles y.
    CK(cudaGraphLaunch(exec, s));
    CK(cudaGraphLaunch(exec3, s2));
    CK(cudaStreamSynchronize(s2));
    check_y(hy, 5, 2, "event wait node");
    CK(cudaDeviceSynchronize());
    EXPECT(host_calls == 6);  // four launches of exec before, one of its clone, one now

    // A graph of another shape cannot update exec.
    cudaGraph_t g4;
    cudaGraphNode_t e4;
    CK(cudaGraphCreate(&g4, 0));
    CK(cudaGraphAddEmptyNode(&e4, g4, nullptr, 0));
    EXPECT(cudaGraphExecUpdate(exec, g4, &info) == cudaErrorGraphExecUpdateFailure);
    EXPECT(info.result == cudaGraphExecUpdateErrorTopologyChanged);
    cudaGetLastError();

    CK(cudaGraphExecDestroy(exec));
    CK(cudaGraphExecDestroy(exec2));
    CK(cudaGraphExecDestroy(exec3));
    CK(cudaGraphDestroy(g));
    CK(cudaGraphDestroy(g2));
    CK(cudaGraphDestroy(g3));
    CK(cudaGraphDestroy(g4));
    printf("graph nodes %zu edges %zu roots %zu host calls %d\n", nodes, edges, roots, host_calls);
    printf("PASS\n");
    return 0;
}
