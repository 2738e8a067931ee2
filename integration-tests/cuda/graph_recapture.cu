// Recapture into an existing graph (cudaStreamBeginRecaptureToGraph, CUDA 13.3): the same
// sequence of stream work with other parameters updates the graph's nodes in place (same node
// handles, same graph), the program's callback is told each change and whether an
// instantiated graph can take it, and cudaGraphExecUpdate brings the change into the
// executable graph. The documented failures: an extra operation, a missing one, an operation
// of another type, a callback answering an error (cudaErrorGraphRecaptureFailure). Gates:
// after the first recapture, after the second, and before the last launch, so the graph,
// its updated executable graph and a recapture after a restart are all checked.
#include "common.h"
#include <cstring>

__global__ void scale(int *y, const int *x, int k, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = k * x[i]; }
__global__ void add(int *y, const int *z, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] += z[i]; }

static const int N = 4096, B = 256, G = N / B;
static int host_calls = 0;
static void CUDART_CB on_host(void *) { host_calls++; }

struct Seen {
    int calls;
    int kernels, memsets, eligible, ineligible;
    cudaGraphNode_t nodes[8];
    int answer;
};

static cudaError_t CUDART_CB on_change(void *data, cudaGraphNode_t node, const cudaGraphNodeParams *was,
                                       const cudaGraphNodeParams *now, cudaGraphRecaptureStatus status) {
    Seen *s = (Seen *)data;
    if (s->calls < 8) s->nodes[s->calls] = node;
    s->calls++;
    if (was->type != now->type) return cudaErrorInvalidValue;
    if (now->type == cudaGraphNodeTypeKernel) {
        s->kernels++;
        // The old and new arguments are readable: k of scale() changed.
        if (was->kernel.func == (void *)scale) {
            int k0 = *(int *)was->kernel.kernelParams[2], k1 = *(int *)now->kernel.kernelParams[2];
            if (k0 == k1) return cudaErrorInvalidValue;
        }
    }
    if (now->type == cudaGraphNodeTypeMemset) s->memsets++;
    if (status == cudaGraphRecaptureEligibleForUpdate) s->eligible++;
    if (status == cudaGraphRecaptureIneligibleForUpdate) s->ineligible++;
    return (cudaError_t)s->answer;
}

// The stream work: y = k*x + z with z = memset(v) (as bytes), then a host function.
static void work(cudaStream_t s, int *dy, const int *dx, int *dz, int k, int v) {
    scale<<<G, B, 0, s>>>(dy, dx, k, N);
    CK(cudaGetLastError());
    CK(cudaMemsetAsync(dz, v, N * 4, s));
    add<<<G, B, 0, s>>>(dy, dz, N);
    CK(cudaGetLastError());
    CK(cudaLaunchHostFunc(s, on_host, nullptr));
}

static void run_and_check(cudaGraphExec_t exec, cudaStream_t s, const int *hx, int *hy, int *dy, int k, int v, const char *what) {
    CK(cudaGraphLaunch(exec, s));
    CK(cudaMemcpyAsync(hy, dy, N * 4, cudaMemcpyDeviceToHost, s));
    CK(cudaStreamSynchronize(s));
    int z;
    memset(&z, v, 4);
    for (int i = 0; i < N; i++)
        if (hy[i] != k * hx[i] + z) {
            printf("FAIL %s: y[%d] = %d, want %d\n", what, i, hy[i], k * hx[i] + z);
            exit(1);
        }
}

static void recapture(cudaStream_t s, cudaGraph_t g, Seen *seen, int *dy, const int *dx, int *dz, int k, int v) {
    cudaGraphRecaptureCallbackData cb = {on_change, seen};
    CK(cudaStreamBeginRecaptureToGraph(s, cudaStreamCaptureModeGlobal, g, seen ? &cb : nullptr));
    cudaStreamCaptureStatus st;
    cudaGraph_t during;
    CK(cudaStreamGetCaptureInfo(s, &st, nullptr, &during, nullptr, nullptr, nullptr));
    EXPECT(st == cudaStreamCaptureStatusActive && during == g);
    work(s, dy, dx, dz, k, v);
    cudaGraph_t out;
    CK(cudaStreamEndCapture(s, &out));
    EXPECT(out == g);
}

int main() {
    int *hx, *hy, *dx, *dy, *dz;
    CK(cudaMallocHost(&hx, N * 4));
    CK(cudaMallocHost(&hy, N * 4));
    CK(cudaMalloc(&dx, N * 4));
    CK(cudaMalloc(&dy, N * 4));
    CK(cudaMalloc(&dz, N * 4));
    for (int i = 0; i < N; i++) hx[i] = i % 13;
    CK(cudaMemcpy(dx, hx, N * 4, cudaMemcpyHostToDevice));
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

    // The first capture: k = 2, z = 0.
    cudaGraph_t g;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    work(s, dy, dx, dz, 2, 0);
    CK(cudaStreamEndCapture(s, &g));
    size_t n = 0;
    CK(cudaGraphGetNodes(g, nullptr, &n));
    EXPECT(n == 4);
    cudaGraphNode_t before[4];
    CK(cudaGraphGetNodes(g, before, &n));
    cudaGraphExec_t exec;
    CK(cudaGraphInstantiate(&exec, g, 0));
    run_and_check(exec, s, hx, hy, dy, 2, 0, "first capture");

    // Recapture with k = 3 and z = 0x01010101: the same four nodes take the new parameters;
    // the callback hears of the two changed ones (the host node is unchanged).
    Seen seen = {};
    recapture(s, g, &seen, dy, dx, dz, 3, 1);
    CK(cudaGraphGetNodes(g, nullptr, &n));
    EXPECT(n == 4);
    cudaGraphNode_t after[4];
    CK(cudaGraphGetNodes(g, after, &n));
    for (int i = 0; i < 4; i++) EXPECT(after[i] == before[i]);
    EXPECT(seen.calls == 2 && seen.kernels == 1 && seen.memsets == 1 && seen.eligible == 2);
    EXPECT(seen.nodes[0] == before[0] && seen.nodes[1] == before[1]);
    // The executable graph still runs the old parameters until it is updated.
    run_and_check(exec, s, hx, hy, dy, 2, 0, "before the update");
    cudaGraphExecUpdateResultInfo info;
    CK(cudaGraphExecUpdate(exec, g, &info));
    EXPECT(info.result == cudaGraphExecUpdateSuccess);
    run_and_check(exec, s, hx, hy, dy, 3, 1, "after the first recapture");
    GATE(1);
    run_and_check(exec, s, hx, hy, dy, 3, 1, "after gate 1");

    // After the gate (a restart): recapture without a callback, k = 5, z = 0x02020202.
    recapture(s, g, nullptr, dy, dx, dz, 5, 2);
    CK(cudaGraphExecUpdate(exec, g, &info));
    run_and_check(exec, s, hx, hy, dy, 5, 2, "after the second recapture");
    GATE(2);
    run_and_check(exec, s, hx, hy, dy, 5, 2, "after gate 2");

    // Failures. Each leaves its graph undefined: each uses a clone, destroyed after.
    cudaGraph_t c;
    cudaGraph_t out;
    // One operation too many: the extra launch fails, and so does the end.
    CK(cudaGraphClone(&c, g));
    CK(cudaStreamBeginRecaptureToGraph(s, cudaStreamCaptureModeGlobal, c, nullptr));
    work(s, dy, dx, dz, 5, 2);
    scale<<<G, B, 0, s>>>(dy, dx, 1, N);
    EXPECT(cudaGetLastError() == cudaErrorGraphRecaptureFailure);
    EXPECT(cudaStreamEndCapture(s, &out) == cudaErrorGraphRecaptureFailure);
    CK(cudaGraphDestroy(c));
    // One too few.
    CK(cudaGraphClone(&c, g));
    CK(cudaStreamBeginRecaptureToGraph(s, cudaStreamCaptureModeGlobal, c, nullptr));
    scale<<<G, B, 0, s>>>(dy, dx, 5, N);
    EXPECT(cudaStreamEndCapture(s, &out) == cudaErrorGraphRecaptureFailure);
    CK(cudaGraphDestroy(c));
    // Another type where a kernel was.
    CK(cudaGraphClone(&c, g));
    CK(cudaStreamBeginRecaptureToGraph(s, cudaStreamCaptureModeGlobal, c, nullptr));
    EXPECT(cudaMemsetAsync(dz, 0, N * 4, s) == cudaErrorGraphRecaptureFailure);
    EXPECT(cudaStreamEndCapture(s, &out) == cudaErrorGraphRecaptureFailure);
    CK(cudaGraphDestroy(c));
    // The callback refuses the change.
    CK(cudaGraphClone(&c, g));
    Seen no = {};
    no.answer = cudaErrorInvalidValue;
    cudaGraphRecaptureCallbackData cb = {on_change, &no};
    CK(cudaStreamBeginRecaptureToGraph(s, cudaStreamCaptureModeGlobal, c, &cb));
    scale<<<G, B, 0, s>>>(dy, dx, 7, N);
    EXPECT(cudaGetLastError() == cudaErrorGraphRecaptureFailure);
    EXPECT(no.calls == 1);
    EXPECT(cudaStreamEndCapture(s, &out) == cudaErrorGraphRecaptureFailure);
    CK(cudaGraphDestroy(c));
    // The legacy stream cannot capture; a null graph is refused.
    EXPECT(cudaStreamBeginRecaptureToGraph(0, cudaStreamCaptureModeGlobal, g, nullptr) != cudaSuccess);
    cudaGetLastError();
    EXPECT(cudaStreamBeginRecaptureToGraph(s, cudaStreamCaptureModeGlobal, nullptr, nullptr) != cudaSuccess);
    cudaGetLastError();
    GATE(3);

    // The graph and its executable graph, unharmed by the failures on their clones.
    run_and_check(exec, s, hx, hy, dy, 5, 2, "after the failures");
    EXPECT(host_calls == 7);
    CK(cudaGraphExecDestroy(exec));
    CK(cudaGraphDestroy(g));
    printf("recaptured twice, %d host calls\n", host_calls);
    printf("PASS\n");
    return 0;
}
