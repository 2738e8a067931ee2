// Driver-API contexts (issue 13): the primary context and two created ones (cuCtxCreate, v4
// in CUDA 13), pushed, popped and set current; each with its own module (the same PTX loaded
// three times), memory, stream and events. A kernel is launched only in its module's
// context; cuCtxDestroy frees what the context owns; memory of one context is read from
// another (one device, unified addressing). Results are checked on the CPU, and again after
// each gate (a restart resumes there). Checked; PASS.
#include "driver.h"
#include "driver_ptx.h"
#include <cstring>

#define FUNCS(X) X(cuCtxCreate) X(cuCtxDestroy) X(cuCtxPushCurrent) X(cuCtxPopCurrent) X(cuCtxGetCurrent) \
    X(cuCtxSynchronize) X(cuCtxGetId) X(cuCtxGetFlags) X(cuMemAlloc) X(cuMemFree) X(cuMemsetD32) \
    X(cuMemcpyDtoH) X(cuStreamCreate) X(cuStreamSynchronize) X(cuEventCreate) X(cuEventRecord) \
    X(cuEventSynchronize) X(cuEventElapsedTime) X(cuLaunchKernel)
FUNCS(DRIVER)

static const unsigned N = 1000;

static CUresult axpb(CUfunction f, CUdeviceptr p, unsigned a, unsigned b, CUstream s) {
    unsigned n = N, stride = 1;
    void *params[] = {&p, &n, &stride, &a, &b};
    return p_cuLaunchKernel(f, (N + 127) / 128, 1, 1, 128, 1, 1, 0, s, params, nullptr);
}

// Every element i of `d` is `base + i`.
static void check(CUdeviceptr d, unsigned base, const char *what) {
    static unsigned h[N];
    DRV(p_cuMemcpyDtoH(h, d, sizeof h));
    for (unsigned i = 0; i < N; i++) {
        if (h[i] != base + i) {
            printf("FAIL %s[%u] = %u, want %u\n", what, i, h[i], base + i);
            exit(1);
        }
    }
}

static CUfunction load(CUmodule *m) {
    char *text = strdup(AXPB_PTX);
    DRV(p_cuModuleLoadData(m, text));
    free(text);
    CUfunction f;
    DRV(p_cuModuleGetFunction(&f, *m, "axpb"));
    return f;
}

int main() {
    FUNCS(LOAD)
    CUdevice dev;
    CUcontext primary, c1, c2, cur;
    CUfunction f0 = drv_start(&dev, &primary, AXPB_PTX, "axpb");
    CUmodule m1, m2;
    CUdeviceptr p0;
    DRV(p_cuMemAlloc(&p0, N * 4));
    DRV(p_cuMemsetD32(p0, 1, N));

    // Two created contexts, each current once created.
    DRV(p_cuCtxCreate(&c1, nullptr, 0, dev));
    DRV(p_cuCtxGetCurrent(&cur));
    EXPECT(cur == c1 && c1 != primary);
    CUfunction f1 = load(&m1);
    CUdeviceptr a1;
    DRV(p_cuMemAlloc(&a1, N * 4));
    DRV(p_cuMemsetD32(a1, 0, N));
    CUstream s1;
    DRV(p_cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
    CUevent e0, e1;
    DRV(p_cuEventCreate(&e0, 0));
    DRV(p_cuEventCreate(&e1, 0));

    DRV(p_cuCtxCreate(&c2, nullptr, CU_CTX_SCHED_BLOCKING_SYNC, dev));
    DRV(p_cuCtxGetCurrent(&cur));
    EXPECT(cur == c2 && c2 != c1);
    unsigned flags = 0;
    DRV(p_cuCtxGetFlags(&flags));
    EXPECT((flags & CU_CTX_SCHED_MASK) == CU_CTX_SCHED_BLOCKING_SYNC);
    unsigned long long id0, id1, id2;
    DRV(p_cuCtxGetId(primary, &id0));
    DRV(p_cuCtxGetId(c1, &id1));
    DRV(p_cuCtxGetId(c2, &id2));
    EXPECT(id0 != id1 && id1 != id2 && id0 != id2);
    CUfunction f2 = load(&m2);
    CUdeviceptr a2;
    DRV(p_cuMemAlloc(&a2, N * 4));
    DRV(p_cuMemsetD32(a2, 5, N));

    // The stack: pop c2 (c1 current), push it back, pop again.
    CUcontext popped;
    DRV(p_cuCtxPopCurrent(&popped));
    EXPECT(popped == c2);
    DRV(p_cuCtxGetCurrent(&cur));
    EXPECT(cur == c1);
    DRV(p_cuCtxPushCurrent(c2));
    DRV(p_cuCtxGetCurrent(&cur));
    EXPECT(cur == c2);
    // c1's kernel is not launched in c2.
    EXPECT(axpb(f1, a1, 1, 10, nullptr) != CUDA_SUCCESS);
    DRV(p_cuCtxPopCurrent(&popped));
    EXPECT(popped == c2);

    // In c1: its kernel on its stream between two events.
    DRV(p_cuEventRecord(e0, s1));
    DRV(axpb(f1, a1, 1, 10, s1));  // 10 + i
    DRV(p_cuEventRecord(e1, s1));
    GATE(1);
    DRV(p_cuEventSynchronize(e1));
    float ms = -1;
    DRV(p_cuEventElapsedTime(&ms, e0, e1));
    EXPECT(ms >= 0);
    check(a1, 10, "a1");

    // c2 replaces c1 at the top of the stack.
    DRV(p_cuCtxSetCurrent(c2));
    DRV(p_cuCtxGetCurrent(&cur));
    EXPECT(cur == c2);
    DRV(axpb(f2, a2, 3, 0, nullptr));  // 15 + i
    GATE(2);
    DRV(p_cuCtxSynchronize());
    check(a2, 15, "a2");
    // Memory of c1 read while c2 is current (one device, unified addressing).
    check(a1, 10, "a1 from c2");
    printf("two created contexts: own modules, memory, stream and events; kernels in their own context only\n");

    // Destroying c2 frees what it owns.
    DRV(p_cuCtxDestroy(c2));
    DRV(p_cuCtxGetCurrent(&cur));
    EXPECT(cur == primary);
    EXPECT(p_cuMemFree(a2) != CUDA_SUCCESS);
    // (Pushing the destroyed c2 is not checked: a real driver (580, CUDA 13.0) accepts it;
    // using a destroyed handle is undefined.)
    GATE(3);
    DRV(p_cuCtxPushCurrent(c1));
    DRV(axpb(f1, a1, 2, 0, s1));  // 20 + 3i
    DRV(p_cuStreamSynchronize(s1));
    static unsigned h[N];
    DRV(p_cuMemcpyDtoH(h, a1, sizeof h));
    for (unsigned i = 0; i < N; i++) EXPECT(h[i] == 20 + 3 * i);
    DRV(p_cuCtxDestroy(c1));
    EXPECT(p_cuMemFree(a1) != CUDA_SUCCESS);
    // The primary context and its memory and module are untouched.
    DRV(p_cuCtxGetCurrent(&cur));
    EXPECT(cur == primary);
    DRV(axpb(f0, p0, 2, 0, nullptr));  // 2 + i
    DRV(p_cuCtxSynchronize());
    check(p0, 2, "p0");
    DRV(p_cuMemFree(p0));
    printf("destroyed contexts freed their memory; the primary context's module and memory remain\n");
    printf("PASS\n");
    return 0;
}
