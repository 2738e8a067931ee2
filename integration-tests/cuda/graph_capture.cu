// Stream capture: work queued on a capturing stream (copies, kernels, memsets, host
// functions) and on a second stream forked and joined through events becomes a graph instead
// of running; the graph is launched several times (and again after each gate, so after a
// restart; the first gate is in the middle of the capture). The documented errors: unsafe calls in global mode, synchronizing a capturing
// stream, the legacy stream against a blocking capturing stream, captured events, unjoined
// work, invalidated captures; relaxed and thread-local modes and
// cudaThreadExchangeStreamCaptureMode; a graph launched into a capture becomes a child node.
#include "common.h"
#include <thread>

__global__ void twice(int *y, const int *x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = 2 * x[i]; }
__global__ void add1(int *z, const int *x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) z[i] += x[i] + 1; }
__global__ void inc(int *y, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] += 1; }
__global__ void acc(int *y, const int *z, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] += z[i]; }

static int host_calls = 0;
static void CUDART_CB on_host(void *) { host_calls++; }

static const int N = 8192;

static void check(const int *hx, const int *hy, const char *what) {
    for (int i = 0; i < N; i++)
        if (hy[i] != 3 * hx[i] + 2) {
            printf("FAIL %s: y[%d] = %d, want %d\n", what, i, hy[i], 3 * hx[i] + 2);
            exit(1);
        }
}

int main() {
    int *hx, *hy, *dx, *dy, *dz;
    CK(cudaMallocHost(&hx, N * 4));
    CK(cudaMallocHost(&hy, N * 4));
    CK(cudaMalloc(&dx, N * 4));
    CK(cudaMalloc(&dy, N * 4));
    CK(cudaMalloc(&dz, N * 4));
    for (int i = 0; i < N; i++) { hx[i] = i % 11; hy[i] = -1; }
    CK(cudaMemset(dy, 0, N * 4));
    CK(cudaDeviceSynchronize());
    cudaStream_t s, s2;
    CK(cudaStreamCreate(&s));  // blocking
    CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    cudaEvent_t fork, join;
    CK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
    CK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
    const int B = 256, G = N / B;

    // The capture: y = 2x + 1 + (x + 1) = 3x + 2, z computed on a forked stream.
    cudaStreamCaptureStatus st;
    CK(cudaStreamIsCapturing(s, &st));
    EXPECT(st == cudaStreamCaptureStatusNone);
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    CK(cudaStreamIsCapturing(s, &st));
    EXPECT(st == cudaStreamCaptureStatusActive);
    EXPECT(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaErrorIllegalState);
    cudaGetLastError();
    CK(cudaMemcpyAsync(dx, hx, N * 4, cudaMemcpyHostToDevice, s));
    twice<<<G, B, 0, s>>>(dy, dx, N);
    CK(cudaGetLastError());
    CK(cudaMemsetAsync(dz, 0, N * 4, s));
    CK(cudaEventRecord(fork, s));
    CK(cudaStreamWaitEvent(s2, fork, 0));  // s2 joins the capture
    CK(cudaStreamIsCapturing(s2, &st));
    EXPECT(st == cudaStreamCaptureStatusActive);
    add1<<<G, B, 0, s2>>>(dz, dx, N);
    GATE(1);  // in the middle of a capture across two streams
    CK(cudaEventRecord(join, s2));
    inc<<<G, B, 0, s>>>(dy, N);
    CK(cudaLaunchHostFunc(s, on_host, nullptr));
    CK(cudaStreamWaitEvent(s, join, 0));  // join back
    acc<<<G, B, 0, s>>>(dy, dz, N);
    unsigned long long id = 0;
    cudaGraph_t cg = nullptr;
    const cudaGraphNode_t *deps = nullptr;
    size_t ndeps = 0;
    CK(cudaStreamGetCaptureInfo(s, &st, &id, &cg, &deps, nullptr, &ndeps));
    EXPECT(st == cudaStreamCaptureStatusActive && id != 0 && cg != nullptr && ndeps == 1);
    cudaGraphNodeType ty;
    CK(cudaGraphNodeGetType(deps[0], &ty));
    EXPECT(ty == cudaGraphNodeTypeKernel);
    CK(cudaMemcpyAsync(hy, dy, N * 4, cudaMemcpyDeviceToHost, s));
    cudaGraph_t g;
    CK(cudaStreamEndCapture(s, &g));
    EXPECT(g == cg);
    CK(cudaStreamIsCapturing(s2, &st));
    EXPECT(st == cudaStreamCaptureStatusNone);
    // Nothing ran while capturing.
    CK(cudaDeviceSynchronize());
    EXPECT(host_calls == 0 && hy[0] == -1 && hy[N - 1] == -1);
    size_t nodes = 0, roots = 0;
    CK(cudaGraphGetNodes(g, nullptr, &nodes));
    CK(cudaGraphGetRootNodes(g, nullptr, &roots));
    EXPECT(nodes == 8 && roots == 1);

    cudaGraphExec_t exec;
    CK(cudaGraphInstantiate(&exec, g, 0));
    CK(cudaGraphLaunch(exec, s));
    CK(cudaStreamSynchronize(s));
    check(hx, hy, "first launch");
    EXPECT(host_calls == 1);
    // The copy node reads the pinned buffer when the graph runs.
    for (int i = 0; i < N; i++) hx[i] = i % 13;
    CK(cudaGraphLaunch(exec, s));
    GATE(2);  // a launch queued
    CK(cudaStreamSynchronize(s));
    check(hx, hy, "second launch");
    EXPECT(host_calls == 2);

    // An unjoined fork: the capture fails and ends.
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    CK(cudaEventRecord(fork, s));
    CK(cudaStreamWaitEvent(s2, fork, 0));
    inc<<<G, B, 0, s2>>>(dz, N);
    cudaGraph_t bad = (cudaGraph_t)1;
    EXPECT(cudaStreamEndCapture(s, &bad) == cudaErrorStreamCaptureUnjoined);
    EXPECT(bad == nullptr);
    CK(cudaStreamIsCapturing(s2, &st));
    EXPECT(st == cudaStreamCaptureStatusNone);
    cudaGetLastError();

    // Unsafe calls in global mode, from this thread and from another: refused, and the
    // capture is invalidated.
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    void *p = nullptr;
    EXPECT(cudaMalloc(&p, 64) == cudaErrorStreamCaptureUnsupported);
    CK(cudaStreamIsCapturing(s, &st));
    EXPECT(st == cudaStreamCaptureStatusInvalidated);
    inc<<<G, B, 0, s>>>(dy, N);
    EXPECT(cudaGetLastError() == cudaErrorStreamCaptureInvalidated);
    EXPECT(cudaStreamEndCapture(s, &bad) == cudaErrorStreamCaptureInvalidated);
    EXPECT(bad == nullptr);
    cudaGetLastError();

    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    cudaError_t other = cudaSuccess;
    std::thread([&] { void *q; other = cudaMalloc(&q, 64); }).join();
    EXPECT(other == cudaErrorStreamCaptureUnsupported);
    EXPECT(cudaStreamEndCapture(s, &bad) == cudaErrorStreamCaptureInvalidated);
    cudaGetLastError();

    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    EXPECT(cudaStreamSynchronize(s) == cudaErrorStreamCaptureUnsupported);
    EXPECT(cudaStreamEndCapture(s, &bad) == cudaErrorStreamCaptureInvalidated);
    cudaGetLastError();

    // Querying an event recorded in the capture is refused and invalidates it; a stream that
    // then waits for that event is refused (what CUDA 13 answers on an H200).
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    inc<<<G, B, 0, s>>>(dy, N);
    CK(cudaEventRecord(fork, s));
    EXPECT(cudaEventQuery(fork) == cudaErrorCapturedEvent);
    CK(cudaStreamIsCapturing(s, &st));
    EXPECT(st == cudaStreamCaptureStatusInvalidated);
    EXPECT(cudaStreamWaitEvent(s2, fork, 0) == cudaErrorInvalidValue);
    EXPECT(cudaStreamEndCapture(s, &bad) == cudaErrorStreamCaptureInvalidated);
    EXPECT(bad == nullptr);
    cudaGetLastError();

    // The legacy stream, even against a non-blocking capturing stream, in global mode.
    CK(cudaStreamBeginCapture(s2, cudaStreamCaptureModeGlobal));
    EXPECT(cudaStreamQuery(0) == cudaErrorStreamCaptureUnsupported);
    EXPECT(cudaStreamEndCapture(s2, &bad) == cudaErrorStreamCaptureInvalidated);
    cudaGetLastError();

    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    EXPECT(cudaMemcpy(hy, dy, 64, cudaMemcpyDeviceToHost) == cudaErrorStreamCaptureUnsupported);
    EXPECT(cudaStreamEndCapture(s, &bad) == cudaErrorStreamCaptureInvalidated);
    cudaGetLastError();

    // Thread-local: another thread's unsafe call is fine; this thread's is not, unless it
    // switches itself to relaxed.
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    void *q1 = nullptr;
    std::thread([&] { other = cudaMalloc(&q1, 64); }).join();
    CK(other);
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    CK(cudaThreadExchangeStreamCaptureMode(&mode));
    EXPECT(mode == cudaStreamCaptureModeGlobal);
    void *q2 = nullptr;
    CK(cudaMalloc(&q2, 64));
    CK(cudaThreadExchangeStreamCaptureMode(&mode));
    EXPECT(mode == cudaStreamCaptureModeRelaxed);
    inc<<<G, B, 0, s>>>(dy, N);
    cudaGraph_t tl;
    CK(cudaStreamEndCapture(s, &tl));
    CK(cudaGraphDestroy(tl));
    CK(cudaFree(q1));
    CK(cudaFree(q2));

    // Relaxed: unsafe calls are allowed; the legacy stream is not, against a blocking stream.
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
    void *q3 = nullptr;
    CK(cudaMalloc(&q3, 64));
    CK(cudaFree(q3));
    inc<<<G, B>>>(dy, N);
    EXPECT(cudaGetLastError() == cudaErrorStreamCaptureImplicit);
    EXPECT(cudaStreamEndCapture(s, &bad) == cudaErrorStreamCaptureInvalidated);
    cudaGetLastError();

    // A graph launched into a capture becomes a child graph node.
    CK(cudaStreamBeginCapture(s2, cudaStreamCaptureModeGlobal));
    CK(cudaGraphLaunch(exec, s2));
    cudaGraph_t outer;
    CK(cudaStreamEndCapture(s2, &outer));
    size_t outer_nodes = 0;
    CK(cudaGraphGetNodes(outer, nullptr, &outer_nodes));
    cudaGraphNode_t child;
    EXPECT(outer_nodes == 1);
    CK(cudaGraphGetNodes(outer, &child, &outer_nodes));
    CK(cudaGraphNodeGetType(child, &ty));
    EXPECT(ty == cudaGraphNodeTypeGraph);
    cudaGraphExec_t outer_exec;
    CK(cudaGraphInstantiate(&outer_exec, outer, 0));
    GATE(3);

    for (int i = 0; i < N; i++) { hx[i] = (i * 7) % 17; hy[i] = -1; }
    CK(cudaGraphLaunch(outer_exec, s2));
    CK(cudaStreamSynchronize(s2));
    check(hx, hy, "graph captured into a graph");
    for (int i = 0; i < N; i++) hy[i] = -1;
    CK(cudaGraphLaunch(exec, s));
    CK(cudaStreamSynchronize(s));
    check(hx, hy, "launch after the last gate");
    EXPECT(host_calls == 4);
    CK(cudaGraphExecDestroy(outer_exec));
    CK(cudaGraphExecDestroy(exec));
    CK(cudaGraphDestroy(outer));
    CK(cudaGraphDestroy(g));
    printf("captured %zu nodes, %d host calls\n", nodes, host_calls);
    printf("PASS\n");
    return 0;
}
