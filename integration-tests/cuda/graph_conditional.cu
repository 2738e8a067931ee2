// Conditional graph nodes built with cudaGraphAddNode: an IF node with an else body whose
// condition a kernel sets from device data, a WHILE node whose body counts down with
// cudaGraphSetConditional from a kernel (its handle reset to 1 at every launch by
// cudaGraphCondAssignDefault), and a SWITCH node of three bodies (one filled by a stream
// capture into it). The node parameters (the body graphs in phGraph_out) are read back; a
// body's kernel is changed and the executable graph updated from the graph; the refusals
// CUDA documents (clone, a bad size). The graph is
// instantiated before the gates and launched again after each (and so after a restart), with
// the inputs changed between launches. Every result is checked against the CPU.
#include "common.h"

__global__ void set_if(cudaGraphConditionalHandle h, const int *in) {
    if (threadIdx.x == 0 && blockIdx.x == 0) cudaGraphSetConditional(h, in[0] != 0);
}
__global__ void set_switch(cudaGraphConditionalHandle h, const int *in) {
    if (threadIdx.x == 0 && blockIdx.x == 0) cudaGraphSetConditional(h, (unsigned)in[2]);
}
__global__ void init_counter(int *counter, const int *in) {
    if (threadIdx.x == 0 && blockIdx.x == 0) *counter = in[1];
}
// One WHILE iteration: every element gets the iteration's number, then thread 0 counts down
// and ends the loop at 0 (after the others read the counter: one block).
__global__ void countdown(cudaGraphConditionalHandle h, int *counter, int *a, int n) {
    __shared__ int c;
    if (threadIdx.x == 0) c = *counter;
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) a[i] += c;
    __syncthreads();
    if (threadIdx.x == 0) {
        *counter = c - 1;
        cudaGraphSetConditional(h, c - 1 > 0);
    }
}
__global__ void add(int *a, int n, int v) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) a[i] += v * (i % 3 + 1);
}

static const int N = 1024;

struct Inputs { int if_flag, iters, sel; };

// What one launch adds to a (if/else, then the loop) and to b (the switch), with `then_v` the
// IF body's value.
static void expect_launch(int *ra, int *rb, Inputs in, int then_v) {
    for (int i = 0; i < N; i++) {
        ra[i] += (in.if_flag ? then_v : 1000) * (i % 3 + 1);
        for (int c = in.iters; c > 0; c--) ra[i] += c;
        if (in.iters <= 0) ra[i] += in.iters;  // the body runs once before the check
        if (in.sel >= 0 && in.sel < 3) rb[i] += 100 * (in.sel + 1) * (i % 3 + 1);
    }
}

static void check(const int *ha, const int *hb, const int *ra, const int *rb, const char *what) {
    for (int i = 0; i < N; i++) {
        if (ha[i] != ra[i] || hb[i] != rb[i]) {
            printf("FAIL %s: a[%d] = %d (want %d), b[%d] = %d (want %d)\n", what, i, ha[i], ra[i], i, hb[i], rb[i]);
            exit(1);
        }
    }
}

static cudaGraphNode_t add_kernel(cudaGraph_t g, const cudaGraphNode_t *deps, size_t nd, void *f, dim3 grid, dim3 block, void **args) {
    cudaGraphNodeParams p = {};
    p.type = cudaGraphNodeTypeKernel;
    p.kernel.func = f;
    p.kernel.gridDim = grid;
    p.kernel.blockDim = block;
    p.kernel.kernelParams = args;
    cudaGraphNode_t node;
    CK(cudaGraphAddNode(&node, g, deps, nullptr, nd, &p));
    return node;
}

static cudaGraphNode_t add_cond(cudaGraph_t g, const cudaGraphNode_t *deps, size_t nd, cudaGraphConditionalHandle h,
                                cudaGraphConditionalNodeType ty, unsigned size, cudaGraph_t *bodies) {
    cudaGraphNodeParams p = {};
    p.type = cudaGraphNodeTypeConditional;
    p.conditional.handle = h;
    p.conditional.type = ty;
    p.conditional.size = size;
    cudaGraphNode_t node;
    CK(cudaGraphAddNode(&node, g, deps, nullptr, nd, &p));
    for (unsigned i = 0; i < size; i++) bodies[i] = p.conditional.phGraph_out[i];
    return node;
}

int main() {
    int *da, *db, *din, *dcounter, *ha, *hb, *hin;
    CK(cudaMalloc(&da, N * 4));
    CK(cudaMalloc(&db, N * 4));
    CK(cudaMalloc(&din, 16));
    CK(cudaMalloc(&dcounter, 4));
    CK(cudaMallocHost(&ha, N * 4));
    CK(cudaMallocHost(&hb, N * 4));
    CK(cudaMallocHost(&hin, 16));
    CK(cudaMemset(da, 0, N * 4));
    CK(cudaMemset(db, 0, N * 4));
    static int ra[N], rb[N];
    cudaStream_t s;
    CK(cudaStreamCreate(&s));

    cudaGraph_t g;
    CK(cudaGraphCreate(&g, 0));
    cudaGraphConditionalHandle hif, hwhile, hswitch;
    CK(cudaGraphConditionalHandleCreate(&hif, g, 0, 0));
    CK(cudaGraphConditionalHandleCreate(&hwhile, g, 1, cudaGraphCondAssignDefault));
    CK(cudaGraphConditionalHandleCreate_v2(&hswitch, g, nullptr, 7, 0));
    int n = N;
    // The inputs come from pinned host memory at every launch.
    cudaGraphNodeParams cp = {};
    cp.type = cudaGraphNodeTypeMemcpy;
    cp.memcpy.copyParams.srcPtr = make_cudaPitchedPtr(hin, 16, 16, 1);
    cp.memcpy.copyParams.dstPtr = make_cudaPitchedPtr(din, 16, 16, 1);
    cp.memcpy.copyParams.extent = make_cudaExtent(16, 1, 1);
    cp.memcpy.copyParams.kind = cudaMemcpyHostToDevice;
    cudaGraphNode_t in_node;
    CK(cudaGraphAddNode(&in_node, g, nullptr, nullptr, 0, &cp));

    // IF (with else): +then_v or +1000.
    void *sif[] = {&hif, &din};
    cudaGraphNode_t pif = add_kernel(g, &in_node, 1, (void *)set_if, dim3(1), dim3(32), sif);
    cudaGraph_t if_bodies[2];
    cudaGraphNode_t nif = add_cond(g, &pif, 1, hif, cudaGraphCondTypeIf, 2, if_bodies);
    int then_v = 10, else_v = 1000;
    void *then_args[] = {&da, &n, &then_v};
    void *else_args[] = {&da, &n, &else_v};
    cudaGraphNode_t then_k = add_kernel(if_bodies[0], nullptr, 0, (void *)add, dim3(N / 256), dim3(256), then_args);
    add_kernel(if_bodies[1], nullptr, 0, (void *)add, dim3(N / 256), dim3(256), else_args);

    // WHILE: counter = iters, then the body adds the counter and counts down.
    void *ic[] = {&dcounter, &din};
    cudaGraphNode_t pw = add_kernel(g, &nif, 1, (void *)init_counter, dim3(1), dim3(1), ic);
    cudaGraph_t while_body;
    cudaGraphNode_t nwhile = add_cond(g, &pw, 1, hwhile, cudaGraphCondTypeWhile, 1, &while_body);
    void *cd[] = {&hwhile, &dcounter, &da, &n};
    add_kernel(while_body, nullptr, 0, (void *)countdown, dim3(1), dim3(128), cd);

    // SWITCH over three bodies: b += 100, 200 or 300 (times 1..3); any other value: nothing.
    void *ss[] = {&hswitch, &din};
    cudaGraphNode_t ps = add_kernel(g, &in_node, 1, (void *)set_switch, dim3(1), dim3(32), ss);
    cudaGraph_t sw[3];
    cudaGraphNode_t nsw = add_cond(g, &ps, 1, hswitch, cudaGraphCondTypeSwitch, 3, sw);
    int sv[3] = {100, 200, 300};
    void *sargs[3][3] = {{&db, &n, &sv[0]}, {&db, &n, &sv[1]}, {&db, &n, &sv[2]}};
    for (int k = 0; k < 2; k++) add_kernel(sw[k], nullptr, 0, (void *)add, dim3(N / 256), dim3(256), sargs[k]);
    // The third body is filled by capturing a stream into it.
    cudaStream_t cs;
    CK(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking));
    CK(cudaStreamBeginCaptureToGraph(cs, sw[2], nullptr, nullptr, 0, cudaStreamCaptureModeGlobal));
    add<<<N / 256, 256, 0, cs>>>(db, n, sv[2]);
    cudaGraph_t captured;
    CK(cudaStreamEndCapture(cs, &captured));
    EXPECT(captured == sw[2]);

    // Results back to pinned memory after both branches.
    cudaGraphNode_t ends[] = {nwhile, nsw}, outa, outb;
    CK(cudaGraphAddMemcpyNode1D(&outa, g, ends, 2, ha, da, N * 4, cudaMemcpyDeviceToHost));
    CK(cudaGraphAddMemcpyNode1D(&outb, g, ends, 2, hb, db, N * 4, cudaMemcpyDeviceToHost));

    // Queries and refusals.
    cudaGraphNodeType ty;
    CK(cudaGraphNodeGetType(nsw, &ty));
    EXPECT(ty == cudaGraphNodeTypeConditional);
    cudaGraphNodeParams back = {};
    CK(cudaGraphNodeGetParams(nif, &back));
    EXPECT(back.type == cudaGraphNodeTypeConditional && back.conditional.handle == hif);
    EXPECT(back.conditional.type == cudaGraphCondTypeIf && back.conditional.size == 2);
    EXPECT(back.conditional.phGraph_out[0] == if_bodies[0] && back.conditional.phGraph_out[1] == if_bodies[1]);
    size_t body_nodes = 0;
    CK(cudaGraphGetNodes(while_body, nullptr, &body_nodes));
    EXPECT(body_nodes == 1);
    cudaGraph_t clone;
    EXPECT(cudaGraphClone(&clone, g) == cudaErrorNotSupported);
    cudaGetLastError();
    cudaGraphNodeParams bad = {};
    bad.type = cudaGraphNodeTypeConditional;
    bad.conditional.handle = hwhile;
    bad.conditional.type = cudaGraphCondTypeWhile;
    bad.conditional.size = 2;
    cudaGraphNode_t badn;
    EXPECT(cudaGraphAddNode(&badn, g, nullptr, nullptr, 0, &bad) == cudaErrorInvalidValue);
    cudaGetLastError();

    cudaGraphExec_t exec;
    CK(cudaGraphInstantiate(&exec, g, 0));
    Inputs runs[] = {{1, 3, 0}, {0, 5, 2}, {1, 1, 1}, {0, 2, 9}, {1, 4, 2}, {0, 6, 0}};
    int r = 0;
    auto launch = [&](Inputs in, int tv) {
        hin[0] = in.if_flag; hin[1] = in.iters; hin[2] = in.sel;
        CK(cudaGraphLaunch(exec, s));
        expect_launch(ra, rb, in, tv);
    };
    launch(runs[r++], then_v);
    GATE(1);  // launched, maybe not finished
    CK(cudaStreamSynchronize(s));
    check(ha, hb, ra, rb, "first launch");

    launch(runs[r++], then_v);
    CK(cudaStreamSynchronize(s));
    check(ha, hb, ra, rb, "else, five iterations, case 2");
    launch(runs[r++], then_v);
    GATE(2);
    CK(cudaStreamSynchronize(s));
    check(ha, hb, ra, rb, "one iteration, case 1");

    // The IF body's kernel adds 20 now; the executable graph takes it through an update.
    then_v = 20;
    cudaKernelNodeParams kp = {};
    kp.func = (void *)add; kp.gridDim = dim3(N / 256); kp.blockDim = dim3(256); kp.kernelParams = then_args;
    CK(cudaGraphKernelNodeSetParams(then_k, &kp));
    cudaGraphExecUpdateResultInfo info = {};
    CK(cudaGraphExecUpdate(exec, g, &info));
    EXPECT(info.result == cudaGraphExecUpdateSuccess);
    launch(runs[r++], then_v);
    CK(cudaStreamSynchronize(s));
    check(ha, hb, ra, rb, "updated: else, no case");
    GATE(3);

    // After the gate (and a restart): the graph instantiated before it, twice more.
    launch(runs[r++], then_v);
    launch(runs[r++], then_v);
    CK(cudaStreamSynchronize(s));
    check(ha, hb, ra, rb, "after the gate");

    CK(cudaGraphExecDestroy(exec));
    CK(cudaGraphDestroy(g));
    long sum = 0;
    for (int i = 0; i < N; i++) sum += ha[i] + hb[i];
    printf("conditional graph launches %d checksum %ld\n", r, sum);
    printf("PASS\n");
    return 0;
}
