// Stream attributes and the persisting L2 set-aside (issue 14): access policy windows checked
// as CUDA checks them, read back before and after a restart (the gates), copied between
// streams; stream ids; and entry points that were stubs before: kernel parameter queries,
// kernel handles, texture descriptor queries, host functions v2, user objects, graph kernel
// node attributes, 3-D and layered arrays read through textures, 3-D peer
// copies, array-to-array copies and copies with attributes. Results are checked against the
// CPU.
#include "common.h"
#include <cstring>

__global__ void axpb(float *x, int n, float a, float b) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = a * x[i] + b;
}

__global__ void tex_read(cudaTextureObject_t t, float *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = tex1Dfetch<float>(t, i);
}

__global__ void tex3d_read(cudaTextureObject_t t, float *out, int w, int h) {
    int x = threadIdx.x, y = blockIdx.x, z = blockIdx.y;
    out[(z * h + y) * w + x] = tex3D<float>(t, x + 0.5f, y + 0.5f, z + 0.5f);
}

__global__ void tex_layered_read(cudaTextureObject_t t, float *out, int w, int h) {
    int x = threadIdx.x, y = blockIdx.x, layer = blockIdx.y;
    out[(layer * h + y) * w + x] = tex2DLayered<float>(t, x + 0.5f, y + 0.5f, layer);
}

static int host_calls = 0;
static void CUDART_CB bump(void *p) { ++*(int *)p; }
static int destroyed = 0;
static void CUDART_CB on_destroy(void *p) { *(int *)p += 1; }

#define EXPECT_ERR(x, code) do { cudaError_t e_ = (x); if (e_ != (code)) { \
    printf("FAIL %s:%d %s -> %s, want %s\n", __FILE__, __LINE__, #x, cudaGetErrorName(e_), \
           cudaGetErrorName(code)); exit(1); } cudaGetLastError(); } while (0)

static void check_window(cudaStream_t s, const cudaAccessPolicyWindow &want) {
    cudaStreamAttrValue v;
    memset(&v, 0xff, sizeof v);
    CK(cudaStreamGetAttribute(s, cudaStreamAttributeAccessPolicyWindow, &v));
    EXPECT(v.accessPolicyWindow.base_ptr == want.base_ptr);
    EXPECT(v.accessPolicyWindow.num_bytes == want.num_bytes);
    EXPECT(v.accessPolicyWindow.hitRatio == want.hitRatio);
    EXPECT(v.accessPolicyWindow.hitProp == want.hitProp);
    EXPECT(v.accessPolicyWindow.missProp == want.missProp);
}

int main() {
    // --- Device limits for persisting L2 ---
    cudaDeviceProp p;
    CK(cudaGetDeviceProperties(&p, 0));
    int max_l2 = 0, max_win = 0;
    CK(cudaDeviceGetAttribute(&max_l2, cudaDevAttrMaxPersistingL2CacheSize, 0));
    CK(cudaDeviceGetAttribute(&max_win, cudaDevAttrMaxAccessPolicyWindowSize, 0));
    EXPECT(max_l2 == p.persistingL2CacheMaxSize && max_win == p.accessPolicyMaxWindowSize);
    EXPECT(max_l2 > 0 && max_l2 <= p.l2CacheSize && max_win > 0);
    // The set-aside at start depends on the device and driver (an H200 with CUDA 13: 30% of
    // the maximum; the emulated device: none).
    size_t lim = (size_t)-1;
    CK(cudaDeviceGetLimit(&lim, cudaLimitPersistingL2CacheSize));
    EXPECT(lim <= (size_t)max_l2);
    CK(cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, (size_t)max_l2 * 4));
    CK(cudaDeviceGetLimit(&lim, cudaLimitPersistingL2CacheSize));
    EXPECT(lim == (size_t)max_l2);  // clamped to persistingL2CacheMaxSize
    CK(cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, (size_t)max_l2 / 2));
    CK(cudaDeviceGetLimit(&lim, cudaLimitPersistingL2CacheSize));
    EXPECT(lim == (size_t)max_l2 / 2);
    // Features crum does not offer are reported absent.
    int v = 1;
    CK(cudaDeviceGetAttribute(&v, cudaDevAttrIpcEventSupport, 0)); EXPECT(v == 0);
    CK(cudaDeviceGetAttribute(&v, cudaDevAttrSparseCudaArraySupported, 0)); EXPECT(v == 0);
    CK(cudaDeviceGetAttribute(&v, cudaDevAttrClusterLaunch, 0)); EXPECT(v == 0);
    EXPECT_ERR(cudaIpcGetMemHandle(nullptr, nullptr), cudaErrorNotSupported);
    EXPECT_ERR(cudaDeviceGetP2PAttribute(&v, cudaDevP2PAttrAccessSupported, 0, 0), cudaErrorInvalidDevice);

    // --- Access policy windows on streams ---
    const int n = 1 << 16;
    float *d;
    CK(cudaMalloc(&d, n * sizeof(float)));
    float *h = (float *)malloc(n * sizeof(float));
    for (int i = 0; i < n; i++) h[i] = (float)(i % 97);
    CK(cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice));
    cudaStream_t s1, s2, s3;
    CK(cudaStreamCreate(&s1));
    CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    CK(cudaStreamCreate(&s3));
    cudaAccessPolicyWindow w = {};
    w.base_ptr = d;
    w.num_bytes = n * sizeof(float);
    w.hitRatio = 0.75f;
    w.hitProp = cudaAccessPropertyPersisting;
    w.missProp = cudaAccessPropertyStreaming;
    cudaStreamAttrValue val = {};
    val.accessPolicyWindow = w;
    CK(cudaStreamSetAttribute(s1, cudaStreamAttributeAccessPolicyWindow, &val));
    cudaStreamAttrValue bad = val;
    bad.accessPolicyWindow.num_bytes = (size_t)max_win + 1;
    EXPECT_ERR(cudaStreamSetAttribute(s1, cudaStreamAttributeAccessPolicyWindow, &bad), cudaErrorInvalidValue);
    bad = val; bad.accessPolicyWindow.hitRatio = 1.5f;
    EXPECT_ERR(cudaStreamSetAttribute(s1, cudaStreamAttributeAccessPolicyWindow, &bad), cudaErrorInvalidValue);
    bad = val; bad.accessPolicyWindow.hitRatio = -0.25f;
    EXPECT_ERR(cudaStreamSetAttribute(s1, cudaStreamAttributeAccessPolicyWindow, &bad), cudaErrorInvalidValue);
    bad = val; bad.accessPolicyWindow.missProp = cudaAccessPropertyPersisting;
    EXPECT_ERR(cudaStreamSetAttribute(s1, cudaStreamAttributeAccessPolicyWindow, &bad), cudaErrorInvalidValue);
    check_window(s1, w);  // the failed calls changed nothing
    cudaAccessPolicyWindow none = {};
    check_window(s2, none);  // never set: an empty window
    cudaStreamAttrValue sp = {};
    sp.syncPolicy = cudaSyncPolicyYield;
    CK(cudaStreamSetAttribute(s1, cudaStreamAttributeSynchronizationPolicy, &sp));
    CK(cudaStreamCopyAttributes(s2, s1));
    check_window(s2, w);
    unsigned long long id1 = 0, id2 = 0, id3 = 0, idpt = 0;
    CK(cudaStreamGetId(s1, &id1));
    CK(cudaStreamGetId(s2, &id2));
    CK(cudaStreamGetId(s3, &id3));
    CK(cudaStreamGetId(cudaStreamPerThread, &idpt));
    EXPECT(id1 != id2 && id2 != id3 && id1 != id3 && idpt != id1 && idpt != id2 && idpt != id3);

    // A launch with the window as a launch attribute; a bad one is refused at launch.
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((n + 255) / 256);
    cfg.blockDim = dim3(256);
    cfg.stream = s1;
    cudaLaunchAttribute la[1];
    la[0].id = cudaLaunchAttributeAccessPolicyWindow;
    la[0].val.accessPolicyWindow = w;
    cfg.attrs = la;
    cfg.numAttrs = 1;
    CK(cudaLaunchKernelEx(&cfg, axpb, d, n, 2.0f, 1.0f));
    la[0].val.accessPolicyWindow.hitRatio = 2.0f;
    EXPECT_ERR(cudaLaunchKernelEx(&cfg, axpb, d, n, 2.0f, 1.0f), cudaErrorInvalidValue);
    GATE(1);
    check_window(s1, w);
    check_window(s2, w);
    cudaStreamAttrValue got = {};
    CK(cudaStreamGetAttribute(s2, cudaStreamAttributeSynchronizationPolicy, &got));
    EXPECT(got.syncPolicy == cudaSyncPolicyYield);
    CK(cudaDeviceGetLimit(&lim, cudaLimitPersistingL2CacheSize));
    EXPECT(lim == (size_t)max_l2 / 2);
    unsigned long long again = 0;
    CK(cudaStreamGetId(s1, &again)); EXPECT(again == id1);
    CK(cudaStreamGetId(s2, &again)); EXPECT(again == id2);
    CK(cudaStreamGetId(cudaStreamPerThread, &again)); EXPECT(again == idpt);
    // The second pass goes through a kernel handle (cudaGetKernel) on the second stream.
    CK(cudaStreamSynchronize(s1));
    cudaKernel_t kern;
    CK(cudaGetKernel(&kern, axpb));
    cudaFunction_t fn;
    CK(cudaGetFuncBySymbol(&fn, (const void *)axpb));
    int nn = n; float a = 0.5f, b = -1.0f;
    void *args[] = {&d, &nn, &a, &b};
    CK(cudaLaunchKernel((const void *)kern, dim3((n + 255) / 256), dim3(256), args, 0, s2));
    CK(cudaStreamSynchronize(s2));
    // Copying from a stream that never had attributes gives back the defaults.
    cudaStream_t fresh;
    CK(cudaStreamCreate(&fresh));
    CK(cudaStreamCopyAttributes(s2, fresh));
    check_window(s2, none);
    CK(cudaStreamGetAttribute(s2, cudaStreamAttributeSynchronizationPolicy, &got));
    EXPECT(got.syncPolicy == cudaSyncPolicyAuto);
    CK(cudaStreamDestroy(fresh));
    size_t count = 0, off = 0, size = 0;
    CK(cudaFuncGetParamCount((const void *)axpb, &count));
    EXPECT(count == 4);
    size_t want_off[] = {0, 8, 12, 16}, want_size[] = {8, 4, 4, 4};
    for (size_t i = 0; i < count; i++) {
        CK(cudaFuncGetParamInfo((const void *)axpb, i, &off, &size));
        EXPECT(off == want_off[i] && size == want_size[i]);
    }
    EXPECT_ERR(cudaFuncGetParamInfo((const void *)axpb, 4, &off, &size), cudaErrorInvalidValue);
    CK(cudaCtxResetPersistingL2Cache());
    // An empty window resets the policy.
    val.accessPolicyWindow.num_bytes = 0;
    CK(cudaStreamSetAttribute(s3, cudaStreamAttributeAccessPolicyWindow, &val));
    CK(cudaMemcpy(h, d, n * sizeof(float), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++) {
        float x = (float)(i % 97);
        float want = 0.5f * (2.0f * x + 1.0f) - 1.0f;
        if (h[i] != want) { printf("FAIL x[%d] = %f, want %f\n", i, h[i], want); return 1; }
    }

    // --- Texture descriptors read back; host functions v2; user objects ---
    cudaResourceDesc rd = {};
    rd.resType = cudaResourceTypeLinear;
    rd.res.linear.devPtr = d;
    rd.res.linear.desc = cudaCreateChannelDesc<float>();
    rd.res.linear.sizeInBytes = n * sizeof(float);
    cudaTextureDesc td = {};
    td.readMode = cudaReadModeElementType;
    td.addressMode[0] = cudaAddressModeClamp;
    cudaTextureObject_t tex;
    CK(cudaCreateTextureObject(&tex, &rd, &td, nullptr));
    float *o;
    CK(cudaMalloc(&o, n * sizeof(float)));
    tex_read<<<(n + 255) / 256, 256, 0, s3>>>(tex, o, n);
    CK(cudaLaunchHostFunc_v2(s3, bump, &host_calls, cudaHostTaskBlocking));
    CK(cudaLaunchHostFunc_v2(s3, bump, &host_calls, cudaHostTaskSpinWait));
    EXPECT_ERR(cudaLaunchHostFunc_v2(s3, bump, &host_calls, 7), cudaErrorInvalidValue);
    cudaUserObject_t uo;
    CK(cudaUserObjectCreate(&uo, &destroyed, on_destroy, 2, cudaUserObjectNoDestructorSync));
    cudaGraph_t g;
    CK(cudaGraphCreate(&g, 0));
    CK(cudaGraphRetainUserObject(g, uo, 1, cudaGraphUserObjectMove));  // one of ours moves
    CK(cudaUserObjectRetain(uo, 3));
    CK(cudaUserObjectRelease(uo, 4));  // the graph's reference is left
    // Launch attributes of graph kernel nodes: set on one, copied to the other, kept.
    float *e;
    CK(cudaMalloc(&e, n * sizeof(float)));
    CK(cudaMemset(e, 0, n * sizeof(float)));
    cudaGraph_t kg;
    CK(cudaGraphCreate(&kg, 0));
    float one_f = 1.0f;
    void *kargs[] = {&e, &nn, &one_f, &one_f};  // e = e + 1
    cudaKernelNodeParams kp = {};
    kp.func = (void *)axpb;
    kp.gridDim = dim3((n + 255) / 256);
    kp.blockDim = dim3(256);
    kp.kernelParams = kargs;
    cudaGraphNode_t kn1, kn2;
    CK(cudaGraphAddKernelNode(&kn1, kg, nullptr, 0, &kp));
    CK(cudaGraphAddKernelNode(&kn2, kg, &kn1, 1, &kp));
    cudaKernelNodeAttrValue kv = {};
    kv.accessPolicyWindow = w;
    CK(cudaGraphKernelNodeSetAttribute(kn1, cudaKernelNodeAttributeAccessPolicyWindow, &kv));
    kv.accessPolicyWindow.hitRatio = 3.0f;
    EXPECT_ERR(cudaGraphKernelNodeSetAttribute(kn1, cudaKernelNodeAttributeAccessPolicyWindow, &kv), cudaErrorInvalidValue);
    kv = {};
    kv.priority = -3;
    CK(cudaGraphKernelNodeSetAttribute(kn1, cudaKernelNodeAttributePriority, &kv));
    CK(cudaGraphKernelNodeCopyAttributes(kn2, kn1));
    cudaGraphExec_t kx;
    CK(cudaGraphInstantiate(&kx, kg, 0));
    CK(cudaGraphLaunch(kx, s3));
    GATE(2);
    cudaKernelNodeAttrValue kgot;
    CK(cudaGraphKernelNodeGetAttribute(kn2, cudaKernelNodeAttributeAccessPolicyWindow, &kgot));
    EXPECT(kgot.accessPolicyWindow.base_ptr == w.base_ptr && kgot.accessPolicyWindow.num_bytes == w.num_bytes);
    EXPECT(kgot.accessPolicyWindow.hitRatio == w.hitRatio && kgot.accessPolicyWindow.missProp == w.missProp);
    CK(cudaGraphKernelNodeGetAttribute(kn2, cudaKernelNodeAttributePriority, &kgot));
    EXPECT(kgot.priority == -3);
    CK(cudaGraphKernelNodeGetAttribute(kn2, cudaLaunchAttributeCooperative, &kgot));
    EXPECT(kgot.cooperative == 0);
    CK(cudaGraphLaunch(kx, s3));
    cudaResourceDesc rd2;
    cudaTextureDesc td2;
    CK(cudaGetTextureObjectResourceDesc(&rd2, tex));
    CK(cudaGetTextureObjectTextureDesc(&td2, tex));
    EXPECT(rd2.resType == cudaResourceTypeLinear && rd2.res.linear.devPtr == d);
    EXPECT(rd2.res.linear.sizeInBytes == n * sizeof(float) && rd2.res.linear.desc.x == 32);
    EXPECT(td2.addressMode[0] == cudaAddressModeClamp && td2.readMode == cudaReadModeElementType);
    cudaResourceViewDesc vd;
    EXPECT_ERR(cudaGetTextureObjectResourceViewDesc(&vd, tex), cudaErrorInvalidValue);  // none given
    CK(cudaStreamSynchronize(s3));
    EXPECT(host_calls == 2);
    CK(cudaMemcpy(h, o, n * sizeof(float), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++) {
        float x = (float)(i % 97);
        if (h[i] != 0.5f * (2.0f * x + 1.0f) - 1.0f) { printf("FAIL tex[%d]\n", i); return 1; }
    }
    EXPECT(destroyed == 0);
    CK(cudaGraphDestroy(g));  // the last reference: the destructor runs
    EXPECT(destroyed == 1);
    CK(cudaMemcpy(h, e, n * sizeof(float), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++) EXPECT(h[i] == 4.0f);  // two launches of two nodes
    CK(cudaGraphExecDestroy(kx));
    CK(cudaGraphDestroy(kg));
    // A child graph node of an executable graph takes another child graph's parameters.
    float ten_f = 10.0f;
    void *kargs10[] = {&e, &nn, &one_f, &ten_f};  // e = e + 10
    cudaGraph_t child_a, child_b, parent;
    CK(cudaGraphCreate(&child_a, 0));
    CK(cudaGraphCreate(&child_b, 0));
    CK(cudaGraphCreate(&parent, 0));
    cudaGraphNode_t ca, cb, cn;
    CK(cudaGraphAddKernelNode(&ca, child_a, nullptr, 0, &kp));
    kp.kernelParams = kargs10;
    CK(cudaGraphAddKernelNode(&cb, child_b, nullptr, 0, &kp));
    CK(cudaGraphAddChildGraphNode(&cn, parent, nullptr, 0, child_a));
    cudaGraphExec_t px;
    CK(cudaGraphInstantiate(&px, parent, 0));
    CK(cudaGraphLaunch(px, s3));  // 4 + 1
    CK(cudaGraphExecChildGraphNodeSetParams(px, cn, child_b));
    CK(cudaGraphLaunch(px, s3));  // 5 + 10
    EXPECT_ERR(cudaGraphExecChildGraphNodeSetParams(px, cn, parent), cudaErrorInvalidValue);  // other topology
    CK(cudaMemcpy(h, e, n * sizeof(float), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++) EXPECT(h[i] == 15.0f);
    CK(cudaGraphExecDestroy(px));
    CK(cudaGraphDestroy(parent));
    CK(cudaGraphDestroy(child_a));
    CK(cudaGraphDestroy(child_b));
    CK(cudaFree(e));

    // --- 3-D peer copies on the one device; copies between arrays ---
    const int W = 64, H = 16, D = 4;
    cudaPitchedPtr src3, dst3;
    CK(cudaMalloc3D(&src3, make_cudaExtent(W * sizeof(float), H, D)));
    CK(cudaMalloc3D(&dst3, make_cudaExtent(W * sizeof(float), H, D)));
    float *vol = (float *)malloc(W * H * D * sizeof(float));
    for (int i = 0; i < W * H * D; i++) vol[i] = (float)(i * 3 % 1001);
    cudaMemcpy3DParms up = {};
    up.srcPtr = make_cudaPitchedPtr(vol, W * sizeof(float), W, H);
    up.dstPtr = src3;
    up.extent = make_cudaExtent(W * sizeof(float), H, D);
    up.kind = cudaMemcpyHostToDevice;
    CK(cudaMemcpy3D(&up));
    cudaMemcpy3DPeerParms pp = {};
    pp.srcPtr = src3; pp.srcDevice = 0;
    pp.dstPtr = dst3; pp.dstDevice = 0;
    pp.extent = make_cudaExtent(W * sizeof(float), H, D);
    CK(cudaMemcpy3DPeerAsync(&pp, s1));
    pp.dstDevice = 1;
    EXPECT_ERR(cudaMemcpy3DPeer(&pp), cudaErrorInvalidDevice);
    CK(cudaStreamSynchronize(s1));
    float *back = (float *)calloc(W * H * D, sizeof(float));
    cudaMemcpy3DParms down = {};
    down.srcPtr = dst3;
    down.dstPtr = make_cudaPitchedPtr(back, W * sizeof(float), W, H);
    down.extent = make_cudaExtent(W * sizeof(float), H, D);
    down.kind = cudaMemcpyDeviceToHost;
    CK(cudaMemcpy3D(&down));
    EXPECT(memcmp(back, vol, W * H * D * sizeof(float)) == 0);
    cudaChannelFormatDesc cd = cudaCreateChannelDesc<float>();
    cudaArray_t A, B;
    CK(cudaMallocArray(&A, &cd, W, H));
    CK(cudaMallocArray(&B, &cd, W, H));
    CK(cudaMemcpy2DToArray(A, 0, 0, vol, W * sizeof(float), W * sizeof(float), H, cudaMemcpyHostToDevice));
    // Rows 2..9 of A into rows 0..7 of B, then 100 floats from A's row 1 (wrapping rows) to
    // B's row 10, column 8.
    CK(cudaMemcpy2DArrayToArray(B, 0, 0, A, 0, 2, W * sizeof(float), 8, cudaMemcpyDeviceToDevice));
    CK(cudaMemcpyArrayToArray(B, 8 * sizeof(float), 10, A, 0, 1, 100 * sizeof(float), cudaMemcpyDeviceToDevice));
    EXPECT_ERR(cudaMemcpyArrayToArray(B, 0, 15, A, 0, 0, 2 * W * sizeof(float), cudaMemcpyDeviceToDevice), cudaErrorInvalidValue);

    // --- Copies with attributes: a batch of two (two attribute sets), then one alone ---
    float *c1, *c2;
    CK(cudaMalloc(&c1, 4096));
    CK(cudaMalloc(&c2, 4096));
    float src_h[1024], dst_h[512];  // on the stack: read during the call, as the order says
    for (int i = 0; i < 1024; i++) src_h[i] = i * 0.5f;
    cudaMemcpyAttributes at[2] = {};
    at[0].srcAccessOrder = cudaMemcpySrcAccessOrderDuringApiCall;
    at[1].srcAccessOrder = cudaMemcpySrcAccessOrderStream;
    size_t idx[2] = {0, 1};
    void *dsts[2] = {c1, c2};
    const void *srcs[2] = {src_h, src_h + 512};
    size_t sz[2] = {4096, 2048};
    CK(cudaMemcpyBatchAsync(dsts, srcs, sz, 2, at, idx, 2, s1));
    cudaMemcpyAttributes one = {};
    one.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
    CK(cudaMemcpyWithAttributesAsync(dst_h, c2, 2048, &one, s1));
    CK(cudaStreamSynchronize(s1));
    for (int i = 0; i < 512; i++) EXPECT(dst_h[i] == src_h[512 + i]);
    CK(cudaMemcpy(dst_h, c1, 2048, cudaMemcpyDeviceToHost));
    for (int i = 0; i < 512; i++) EXPECT(dst_h[i] == src_h[i]);
    EXPECT_ERR(cudaMemcpyBatchAsync(dsts, srcs, sz, 2, at, idx, 2, 0), cudaErrorInvalidValue);  // legacy stream
    size_t bad_idx[2] = {0, 2};
    EXPECT_ERR(cudaMemcpyBatchAsync(dsts, srcs, sz, 2, at, bad_idx, 2, s1), cudaErrorInvalidValue);
    cudaMemcpyAttributes no_order = {};
    EXPECT_ERR(cudaMemcpyWithAttributesAsync(dst_h, c2, 4, &no_order, s1), cudaErrorInvalidValue);
    // Batched prefetches need concurrent managed access, which the device reports absent.
    CK(cudaDeviceGetAttribute(&v, cudaDevAttrConcurrentManagedAccess, 0)); EXPECT(v == 0);
    EXPECT_ERR(cudaMemPrefetchBatchAsync(nullptr, nullptr, 0, nullptr, nullptr, 0, 0, s1), cudaErrorNotSupported);

    // --- 3-D and layered 2-D arrays, filled by 3-D copies and read through textures ---
    const int AW = 16, AH = 8, AD = 3;
    cudaArray_t a3, al;
    CK(cudaMalloc3DArray(&a3, &cd, make_cudaExtent(AW, AH, AD)));
    CK(cudaMalloc3DArray(&al, &cd, make_cudaExtent(AW, AH, AD), cudaArrayLayered));
    EXPECT_ERR(cudaMalloc3DArray(&A, &cd, make_cudaExtent(AW, AH, 6), cudaArrayCubemap), cudaErrorInvalidValue);  // faces not square
    EXPECT_ERR(cudaMalloc3DArray(&A, &cd, make_cudaExtent(AW, AW, 13), cudaArrayCubemap | cudaArrayLayered), cudaErrorInvalidValue);  // not 6 faces per cube map
    cudaArray_t lc;
    CK(cudaMalloc3DArray(&lc, &cd, make_cudaExtent(AW, AW, 12), cudaArrayCubemap | cudaArrayLayered));  // two cube maps
    CK(cudaFreeArray(lc));
    cudaArray_t plane;
    EXPECT_ERR(cudaArrayGetPlane(&plane, a3, 0), cudaErrorInvalidValue);  // not multi-planar
    cudaExtent ex;
    unsigned int fl = 0;
    cudaChannelFormatDesc cdq;
    CK(cudaArrayGetInfo(&cdq, &ex, &fl, al));
    EXPECT(ex.width == AW && ex.height == AH && ex.depth == AD && fl == cudaArrayLayered && cdq.x == 32);
    cudaMemcpy3DParms c3 = {};
    c3.srcPtr = make_cudaPitchedPtr(vol, AW * sizeof(float), AW, AH);
    c3.dstArray = a3;
    c3.extent = make_cudaExtent(AW, AH, AD);
    c3.kind = cudaMemcpyHostToDevice;
    CK(cudaMemcpy3D(&c3));
    c3.dstArray = al;
    CK(cudaMemcpy3D(&c3));
    cudaTextureObject_t t3, tl;
    cudaResourceDesc ra = {};
    ra.resType = cudaResourceTypeArray;
    ra.res.array.array = a3;
    cudaTextureDesc pt = {};
    pt.readMode = cudaReadModeElementType;
    pt.filterMode = cudaFilterModePoint;
    CK(cudaCreateTextureObject(&t3, &ra, &pt, nullptr));
    ra.res.array.array = al;
    CK(cudaCreateTextureObject(&tl, &ra, &pt, nullptr));
    GATE(3);
    float *r3;
    CK(cudaMalloc(&r3, AW * AH * AD * sizeof(float)));
    float *rh = (float *)calloc(AW * AH * AD, sizeof(float));
    tex3d_read<<<dim3(AH, AD), AW>>>(t3, r3, AW, AH);
    CK(cudaMemcpy(rh, r3, AW * AH * AD * sizeof(float), cudaMemcpyDeviceToHost));
    for (int i = 0; i < AW * AH * AD; i++) EXPECT(rh[i] == vol[i]);
    tex_layered_read<<<dim3(AH, AD), AW>>>(tl, r3, AW, AH);
    CK(cudaMemcpy(rh, r3, AW * AH * AD * sizeof(float), cudaMemcpyDeviceToHost));
    for (int i = 0; i < AW * AH * AD; i++) EXPECT(rh[i] == vol[i]);
    cudaMemcpy3DParms b3 = {};  // slice 1 of the 3-D array back to the host
    b3.srcArray = a3;
    b3.srcPos = make_cudaPos(0, 0, 1);
    b3.dstPtr = make_cudaPitchedPtr(rh, AW * sizeof(float), AW, AH);
    b3.extent = make_cudaExtent(AW, AH, 1);
    b3.kind = cudaMemcpyDeviceToHost;
    CK(cudaMemcpy3D(&b3));
    for (int i = 0; i < AW * AH; i++) EXPECT(rh[i] == vol[AW * AH + i]);
    CK(cudaDestroyTextureObject(t3));
    CK(cudaDestroyTextureObject(tl));
    CK(cudaFreeArray(a3));
    CK(cudaFreeArray(al));
    CK(cudaFree(r3));
    float *bh = (float *)calloc(W * H, sizeof(float));
    CK(cudaMemcpy2DFromArray(bh, W * sizeof(float), B, 0, 0, W * sizeof(float), H, cudaMemcpyDeviceToHost));
    for (int r = 0; r < 8; r++)
        for (int c = 0; c < W; c++) EXPECT(bh[r * W + c] == vol[(r + 2) * W + c]);
    for (int k = 0; k < 100; k++) EXPECT(bh[10 * W + 8 + k] == vol[1 * W + k]);
    check_window(s1, w);

    CK(cudaDestroyTextureObject(tex));
    CK(cudaFreeArray(A)); CK(cudaFreeArray(B));
    CK(cudaFree(src3.ptr)); CK(cudaFree(dst3.ptr));
    CK(cudaFree(d)); CK(cudaFree(o)); CK(cudaFree(c1)); CK(cudaFree(c2));
    CK(cudaStreamDestroy(s1)); CK(cudaStreamDestroy(s2)); CK(cudaStreamDestroy(s3));
    printf("stream attributes, stream ids, kernel handles, texture descriptors, user objects, peer and array copies\n");
    printf("PASS\n");
    return 0;
}
