// The driver API, as JIT loaders and Python packages use it: libcuda.so.1 opened with dlopen,
// its functions found with dlsym and cuGetProcAddress; cuInit, the device, the primary
// context (the same one the runtime uses), a module loaded from PTX text (cuModuleLoadData),
// cuModuleGetFunction/GetGlobal, cuMemAlloc/cuMemsetD32/copies, a stream and events, and
// cuLaunchKernel with kernelParams and with the `extra` parameter buffer. Driver and
// runtime share memory and streams (a cudaMalloc'd buffer filled by a driver launch on a
// cudaStream_t). The gates come with the module loaded and work queued. Checked; PASS.
#include "common.h"
#include <cstring>
#include <dlfcn.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext, *CUmodule, *CUfunction, *CUstream, *CUevent;
typedef unsigned long long CUdeviceptr;

static void *lib;
template <typename F> static F sym(const char *name) {
    void *p = dlsym(lib, name);
    if (!p) { printf("FAIL dlsym %s: %s\n", name, dlerror()); exit(1); }
    return (F)p;
}
#define DRV(x) do { CUresult r_ = (x); if (r_ != 0) { const char *n_ = "?"; cuGetErrorName(r_, &n_); \
    printf("FAIL %s:%d %s -> %d %s\n", __FILE__, __LINE__, #x, r_, n_); exit(1); } } while (0)

static CUresult (*cuGetErrorName)(CUresult, const char **);

static const char *PTX =
    ".version 8.0\n.target sm_80\n.address_size 64\n"
    ".visible .global .align 4 .u32 bump = 5;\n"
    ".visible .entry add_index(.param .u64 p, .param .u32 n) {\n"
    "  .reg .b32 %r<6>; .reg .b64 %rd<5>; .reg .pred %p1;\n"
    "  ld.param.u64 %rd1, [p]; ld.param.u32 %r1, [n];\n"
    "  mov.u32 %r2, %ctaid.x; mov.u32 %r3, %ntid.x; mov.u32 %r4, %tid.x;\n"
    "  mad.lo.s32 %r2, %r2, %r3, %r4;\n"
    "  setp.ge.u32 %p1, %r2, %r1; @%p1 bra DONE;\n"
    "  cvta.to.global.u64 %rd1, %rd1; mul.wide.u32 %rd2, %r2, 4; add.s64 %rd3, %rd1, %rd2;\n"
    "  ld.global.u32 %r3, [%rd3]; ld.global.u32 %r5, [bump];\n"
    "  add.s32 %r3, %r3, %r2; add.s32 %r3, %r3, %r5; st.global.u32 [%rd3], %r3;\n"
    "DONE:\n  ret;\n}\n";

int main() {
    lib = dlopen("libcuda.so.1", RTLD_NOW);
    if (!lib) { printf("FAIL dlopen libcuda.so.1: %s\n", dlerror()); return 1; }
    cuGetErrorName = sym<CUresult (*)(CUresult, const char **)>("cuGetErrorName");
    auto cuInit = sym<CUresult (*)(unsigned)>("cuInit");
    auto cuDriverGetVersion = sym<CUresult (*)(int *)>("cuDriverGetVersion");
    auto cuDeviceGet = sym<CUresult (*)(CUdevice *, int)>("cuDeviceGet");
    auto cuDeviceGetName = sym<CUresult (*)(char *, int, CUdevice)>("cuDeviceGetName");
    auto cuDeviceGetAttribute = sym<CUresult (*)(int *, int, CUdevice)>("cuDeviceGetAttribute");
    auto cuDevicePrimaryCtxRetain = sym<CUresult (*)(CUcontext *, CUdevice)>("cuDevicePrimaryCtxRetain");
    auto cuCtxSetCurrent = sym<CUresult (*)(CUcontext)>("cuCtxSetCurrent");
    auto cuCtxGetCurrent = sym<CUresult (*)(CUcontext *)>("cuCtxGetCurrent");
    auto cuModuleLoadData = sym<CUresult (*)(CUmodule *, const void *)>("cuModuleLoadData");
    auto cuModuleGetFunction = sym<CUresult (*)(CUfunction *, CUmodule, const char *)>("cuModuleGetFunction");
    auto cuModuleGetGlobal = sym<CUresult (*)(CUdeviceptr *, size_t *, CUmodule, const char *)>("cuModuleGetGlobal_v2");
    auto cuMemAlloc = sym<CUresult (*)(CUdeviceptr *, size_t)>("cuMemAlloc_v2");
    auto cuMemFree = sym<CUresult (*)(CUdeviceptr)>("cuMemFree_v2");
    auto cuMemsetD32 = sym<CUresult (*)(CUdeviceptr, unsigned, size_t)>("cuMemsetD32_v2");
    auto cuMemcpyDtoH = sym<CUresult (*)(void *, CUdeviceptr, size_t)>("cuMemcpyDtoH_v2");
    auto cuMemcpyHtoD = sym<CUresult (*)(CUdeviceptr, const void *, size_t)>("cuMemcpyHtoD_v2");
    auto cuStreamCreate = sym<CUresult (*)(CUstream *, unsigned)>("cuStreamCreate");
    auto cuStreamSynchronize = sym<CUresult (*)(CUstream)>("cuStreamSynchronize");
    auto cuEventCreate = sym<CUresult (*)(CUevent *, unsigned)>("cuEventCreate");
    auto cuEventRecord = sym<CUresult (*)(CUevent, CUstream)>("cuEventRecord");
    auto cuEventSynchronize = sym<CUresult (*)(CUevent)>("cuEventSynchronize");
    auto cuLaunchKernel = sym<CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                           CUstream, void **, void **)>("cuLaunchKernel");
    auto cuGetProcAddress = sym<CUresult (*)(const char *, void **, int, unsigned long long, int *)>("cuGetProcAddress_v2");

    CUdevice dev;
    EXPECT(cuDeviceGet(&dev, 0) == 3);  // CUDA_ERROR_NOT_INITIALIZED before cuInit
    DRV(cuInit(0));
    int ver = 0;
    DRV(cuDriverGetVersion(&ver));
    EXPECT(ver >= 12000);
    DRV(cuDeviceGet(&dev, 0));
    EXPECT(cuDeviceGet(&dev, 1) == 101);  // CUDA_ERROR_INVALID_DEVICE
    char name[256];
    DRV(cuDeviceGetName(name, sizeof name, dev));
    int sms = 0;
    DRV(cuDeviceGetAttribute(&sms, 16, dev));  // CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
    int rt_sms = 0;
    CK(cudaDeviceGetAttribute(&rt_sms, cudaDevAttrMultiProcessorCount, 0));
    EXPECT(sms == rt_sms && sms > 0);
    CUcontext ctx, cur;
    DRV(cuDevicePrimaryCtxRetain(&ctx, dev));
    DRV(cuCtxSetCurrent(ctx));
    DRV(cuCtxGetCurrent(&cur));
    EXPECT(cur == ctx);
    void *pfn = nullptr;
    int st = -1;
    DRV(cuGetProcAddress("cuMemAlloc", &pfn, 12000, 0, &st));
    EXPECT(st == 0 && pfn == (void *)cuMemAlloc);

    char *buf = strdup(PTX);
    CUmodule mod;
    DRV(cuModuleLoadData(&mod, buf));
    free(buf);
    CUfunction add;
    DRV(cuModuleGetFunction(&add, mod, "add_index"));
    CUfunction none;
    EXPECT(cuModuleGetFunction(&none, mod, "nope") == 500);  // CUDA_ERROR_NOT_FOUND
    CUdeviceptr bump;
    size_t bytes = 0;
    DRV(cuModuleGetGlobal(&bump, &bytes, mod, "bump"));
    EXPECT(bytes == 4);

    const unsigned n = 1000;
    CUdeviceptr d;
    DRV(cuMemAlloc(&d, n * 4));
    DRV(cuMemsetD32(d, 7, n));  // every element 7
    CUstream s;
    DRV(cuStreamCreate(&s, 0));
    unsigned nn = n;
    void *params[] = {&d, &nn};
    DRV(cuLaunchKernel(add, (n + 255) / 256, 1, 1, 256, 1, 1, 0, s, params, nullptr));  // 7 + i + 5
    GATE(1);
    // The same kernel through `extra` (a packed parameter buffer), on a runtime stream, into
    // a runtime allocation.
    int *rd;
    CK(cudaMalloc(&rd, n * 4));
    CK(cudaMemset(rd, 0, n * 4));
    cudaStream_t rs;
    CK(cudaStreamCreate(&rs));
    struct { unsigned long long p; unsigned n; } packed = {(unsigned long long)rd, n};
    // The kernel's parameter bytes (8 + 4), not sizeof packed (16, padded): a real driver
    // answers CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES to a larger buffer, and so does crum's.
    size_t psize = 12;
    void *extra[] = {(void *)1, &packed, (void *)2, &psize, (void *)0};  // BUFFER_POINTER, BUFFER_SIZE, END
    unsigned b2 = 100;
    DRV(cuMemcpyHtoD(bump, &b2, 4));
    DRV(cuLaunchKernel(add, (n + 255) / 256, 1, 1, 256, 1, 1, 0, (CUstream)rs, nullptr, extra));  // i + 100
    CUevent ev;
    DRV(cuEventCreate(&ev, 0));
    DRV(cuEventRecord(ev, (CUstream)rs));
    GATE(2);
    DRV(cuEventSynchronize(ev));
    DRV(cuStreamSynchronize(s));
    GATE(3);
    static unsigned h[n];
    static int hr[n];
    DRV(cuMemcpyDtoH(h, d, n * 4));
    CK(cudaMemcpy(hr, rd, n * 4, cudaMemcpyDeviceToHost));
    for (unsigned i = 0; i < n; i++) {
        if (h[i] != 12 + i || hr[i] != (int)(100 + i)) {
            printf("i=%u: %u (want %u), %d (want %u)\n", i, h[i], 12 + i, hr[i], 100 + i);
            EXPECT(false);
        }
    }
    DRV(cuMemFree(d));
    printf("driver API on %s: module from PTX, %u results through kernelParams and extra match\n",
           strlen(name) ? "the device" : "?", n);
    printf("PASS\n");
    return 0;
}
