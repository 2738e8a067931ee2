/* A driver-API program linked with -lcuda (NEEDED libcuda.so.1), as a C program built against
 * NVIDIA's driver library: a context, a module from PTX text, a launch, a copy back. Checked;
 * PASS. */
#include <stdio.h>
typedef void *CUcontext, *CUmodule, *CUfunction;
typedef unsigned long long CUdeviceptr;
int cuInit(unsigned);
int cuDeviceGet(int *, int);
int cuCtxCreate_v2(CUcontext *, unsigned, int);
int cuCtxSynchronize(void);
int cuModuleLoadData(CUmodule *, const void *);
int cuModuleGetFunction(CUfunction *, CUmodule, const char *);
int cuMemAlloc_v2(CUdeviceptr *, size_t);
int cuMemsetD32_v2(CUdeviceptr, unsigned, size_t);
int cuLaunchKernel(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *, void **, void **);
int cuMemcpyDtoH_v2(void *, CUdeviceptr, size_t);
int cuMemFree_v2(CUdeviceptr);
int cuGetErrorName(int, const char **);
#define CU(x) do { int r_ = (x); if (r_) { const char *n_ = "?"; cuGetErrorName(r_, &n_); \
    printf("FAIL %s -> %d %s\n", #x, r_, n_); return 1; } } while (0)
static const char *PTX =
    ".version 8.0\n.target sm_80\n.address_size 64\n"
    ".visible .entry twice_plus(.param .u64 p, .param .u32 n) {\n"
    "  .reg .b32 %r<5>; .reg .b64 %rd<4>; .reg .pred %p1;\n"
    "  ld.param.u64 %rd1, [p]; ld.param.u32 %r1, [n];\n"
    "  mov.u32 %r2, %ctaid.x; mov.u32 %r3, %ntid.x; mov.u32 %r4, %tid.x;\n"
    "  mad.lo.s32 %r2, %r2, %r3, %r4;\n"
    "  setp.ge.u32 %p1, %r2, %r1; @%p1 bra DONE;\n"
    "  cvta.to.global.u64 %rd1, %rd1; mul.wide.u32 %rd2, %r2, 4; add.s64 %rd3, %rd1, %rd2;\n"
    "  ld.global.u32 %r3, [%rd3]; shl.b32 %r3, %r3, 1; add.s32 %r3, %r3, %r2; st.global.u32 [%rd3], %r3;\n"
    "DONE:\n  ret;\n}\n";
int main(void) {
    enum { N = 4096 };
    static unsigned h[N];
    int dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction f;
    CUdeviceptr d;
    CU(cuInit(0));
    CU(cuDeviceGet(&dev, 0));
    CU(cuCtxCreate_v2(&ctx, 0, dev));
    CU(cuModuleLoadData(&mod, PTX));
    CU(cuModuleGetFunction(&f, mod, "twice_plus"));
    CU(cuMemAlloc_v2(&d, N * 4));
    CU(cuMemsetD32_v2(d, 3, N));
    unsigned n = N;
    void *args[] = {&d, &n};
    CU(cuLaunchKernel(f, N / 256, 1, 1, 256, 1, 1, 0, 0, args, 0));
    CU(cuCtxSynchronize());
    CU(cuMemcpyDtoH_v2(h, d, N * 4));
    for (unsigned i = 0; i < N; i++)
        if (h[i] != 6 + i) { printf("FAIL h[%u] = %u\n", i, h[i]); return 1; }
    CU(cuMemFree_v2(d));
    printf("linked with -lcuda: %d results match\nPASS\n", N);
    return 0;
}
