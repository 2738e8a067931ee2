// The driver API's memory of every kind (issue 13): pinned (cuMemAllocHost, cuMemHostAlloc
// mapped), registered (cuMemHostRegister), managed (cuMemAllocManaged), pitched
// (cuMemAllocPitch), stream-ordered (cuMemAllocAsync, a created pool), 2-D and 3-D copies
// (cuMemcpy2D, cuMemcpy3D) between host, linear device memory and CUDA arrays
// (cuArrayCreate, cuArray3DCreate), a 2-D memset, and a texture object over an array
// (cuTexObjectCreate) read by a kernel launched with cuLaunchKernel. Results are checked on
// the CPU, and checked again after each gate (a restart resumes there). Checked; PASS.
#include "driver.h"
#include "driver_ptx.h"
#include <cstring>
#include <vector>

#define FUNCS(X) X(cuCtxSynchronize) X(cuLaunchKernel) X(cuStreamCreate) X(cuStreamSynchronize) \
    X(cuMemAllocHost) X(cuMemFreeHost) X(cuMemHostAlloc) X(cuMemHostGetDevicePointer) X(cuMemHostRegister) \
    X(cuMemHostUnregister) X(cuMemAllocManaged) X(cuMemAllocPitch) X(cuMemFree) X(cuMemcpy2D) X(cuMemcpy3D) \
    X(cuMemsetD2D32) X(cuMemcpyHtoDAsync) X(cuMemcpyDtoH) X(cuMemAllocAsync) X(cuMemFreeAsync) \
    X(cuMemPoolCreate) X(cuMemPoolDestroy) X(cuMemAllocFromPoolAsync) X(cuArrayCreate) X(cuArray3DCreate) \
    X(cuArrayDestroy) X(cuArrayGetDescriptor) X(cuArray3DGetDescriptor) X(cuTexObjectCreate) \
    X(cuTexObjectDestroy) X(cuTexObjectGetResourceDesc)
FUNCS(DRIVER)

// Reads texel (x, y) of `tex` into out[y*w + x]: launched through the driver.
__global__ void fetch(cudaTextureObject_t tex, float *out, int w, int h) {
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;
    if (x < w && y < h) out[y * w + x] = tex2D<float>(tex, x + 0.5f, y + 0.5f);
}

static const int W = 40, H = 24, D = 3;

static float value(int x, int y, int z) { return x + 100.0f * y + 10000.0f * z; }

static CUfunction axpb_f;
static void axpb(CUdeviceptr p, unsigned n, unsigned a, unsigned b, CUstream s) {
    unsigned stride = 1;
    void *params[] = {&p, &n, &stride, &a, &b};
    DRV(p_cuLaunchKernel(axpb_f, (n + 255) / 256, 1, 1, 256, 1, 1, 0, s, params, nullptr));
}

// The 2-D array (W x H floats) read back with cuMemcpy2D: value(x, y, 0).
static void check_array2d(CUarray a) {
    std::vector<float> h(W * H);
    CUDA_MEMCPY2D c = {};
    c.srcMemoryType = CU_MEMORYTYPE_ARRAY;
    c.srcArray = a;
    c.dstMemoryType = CU_MEMORYTYPE_HOST;
    c.dstHost = h.data();
    c.dstPitch = W * 4;
    c.WidthInBytes = W * 4;
    c.Height = H;
    DRV(p_cuMemcpy2D(&c));
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++)
            if (h[y * W + x] != value(x, y, 0)) { printf("FAIL array2d (%d,%d) = %g\n", x, y, h[y * W + x]); exit(1); }
}

// The texture over the 2-D array, read by a kernel: value(x, y, 0).
static void check_texture(CUtexObject tex, CUdeviceptr out) {
    CUfunction f;
    CK(cudaGetFuncBySymbol((cudaFunction_t *)&f, (const void *)fetch));
    int w = W, h = H;
    void *params[] = {&tex, &out, &w, &h};
    DRV(p_cuLaunchKernel(f, (W + 31) / 32, H, 1, 32, 1, 1, 0, nullptr, params, nullptr));
    std::vector<float> got(W * H);
    DRV(p_cuMemcpyDtoH(got.data(), out, W * H * 4));
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++)
            if (got[y * W + x] != value(x, y, 0)) { printf("FAIL texture (%d,%d) = %g\n", x, y, got[y * W + x]); exit(1); }
}

// The 3-D array read back with cuMemcpy3D into pitched device memory, then to the host.
static void check_array3d(CUarray a3, CUdeviceptr pitched, size_t pitch) {
    CUDA_MEMCPY3D c = {};
    c.srcMemoryType = CU_MEMORYTYPE_ARRAY;
    c.srcArray = a3;
    c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    c.dstDevice = pitched;
    c.dstPitch = pitch;
    c.dstHeight = H;
    c.WidthInBytes = W * 4;
    c.Height = H;
    c.Depth = D;
    DRV(p_cuMemcpy3D(&c));
    std::vector<float> h(W * H * D);
    CUDA_MEMCPY3D b = {};
    b.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    b.srcDevice = pitched;
    b.srcPitch = pitch;
    b.srcHeight = H;
    b.dstMemoryType = CU_MEMORYTYPE_HOST;
    b.dstHost = h.data();
    b.dstPitch = W * 4;
    b.dstHeight = H;
    b.WidthInBytes = W * 4;
    b.Height = H;
    b.Depth = D;
    DRV(p_cuMemcpy3D(&b));
    for (int z = 0; z < D; z++)
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++)
                if (h[(z * H + y) * W + x] != value(x, y, z)) { printf("FAIL array3d (%d,%d,%d)\n", x, y, z); exit(1); }
}

int main() {
    FUNCS(LOAD)
    CUdevice dev;
    CUcontext ctx;
    axpb_f = drv_start(&dev, &ctx, AXPB_PTX, "axpb");
    CUstream s;
    DRV(p_cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));

    // Host memory of three kinds, the source of copies and (mapped) of a kernel.
    const unsigned n = 4096;
    unsigned *pinned, *mapped;
    DRV(p_cuMemAllocHost((void **)&pinned, n * 4));
    DRV(p_cuMemHostAlloc((void **)&mapped, n * 4, CU_MEMHOSTALLOC_DEVICEMAP));
    unsigned *reg = (unsigned *)aligned_alloc(4096, n * 4);
    DRV(p_cuMemHostRegister(reg, n * 4, 0));
    for (unsigned i = 0; i < n; i++) pinned[i] = i, mapped[i] = 2 * i, reg[i] = 3 * i;
    CUdeviceptr dmapped;
    DRV(p_cuMemHostGetDevicePointer(&dmapped, mapped, 0));
    CUdeviceptr managed;
    DRV(p_cuMemAllocManaged(&managed, n * 4, CU_MEM_ATTACH_GLOBAL));
    for (unsigned i = 0; i < n; i++) ((unsigned *)managed)[i] = 5 * i;

    // Stream-ordered memory: the default pool and a created one.
    CUdeviceptr fromdef, frompool;
    DRV(p_cuMemAllocAsync(&fromdef, n * 4, s));
    CUmemPoolProps pp = {};
    pp.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    pp.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    pp.location.id = dev;
    CUmemoryPool pool;
    DRV(p_cuMemPoolCreate(&pool, &pp));
    DRV(p_cuMemAllocFromPoolAsync(&frompool, n * 4, pool, s));
    DRV(p_cuMemcpyHtoDAsync(fromdef, pinned, n * 4, s));
    DRV(p_cuMemcpyHtoDAsync(frompool, reg, n * 4, s));
    axpb(fromdef, n, 2, 1, s);   // 2i + 1 + i = 3i + 1
    axpb(frompool, n, 1, 0, s);  // 3i + i = 4i
    axpb(dmapped, n, 1, 0, s);   // 2i + i = 3i, in host memory
    axpb(managed, n, 1, 0, s);   // 5i + i = 6i
    DRV(p_cuStreamSynchronize(s));

    // A pitched 2-D buffer: cuMemsetD2D32 around a block written by cuMemcpy2D from the host.
    std::vector<float> img(W * H * D);
    for (int z = 0; z < D; z++)
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++) img[(z * H + y) * W + x] = value(x, y, z);
    CUdeviceptr pitched;
    size_t pitch = 0;
    DRV(p_cuMemAllocPitch(&pitched, &pitch, W * 4, H * D, 4));
    EXPECT(pitch >= W * 4);
    DRV(p_cuMemsetD2D32(pitched, pitch, 0xffffffffu, W, H * D));
    CUDA_MEMCPY2D up = {};
    up.srcMemoryType = CU_MEMORYTYPE_HOST;
    up.srcHost = img.data();
    up.srcPitch = W * 4;
    up.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    up.dstDevice = pitched;
    up.dstPitch = pitch;
    up.WidthInBytes = W * 4;
    up.Height = H;
    DRV(p_cuMemcpy2D(&up));

    // A 2-D array filled from the pitched buffer (device to array), and a texture over it.
    CUDA_ARRAY_DESCRIPTOR ad = {};
    ad.Width = W;
    ad.Height = H;
    ad.Format = CU_AD_FORMAT_FLOAT;
    ad.NumChannels = 1;
    CUarray a2;
    DRV(p_cuArrayCreate(&a2, &ad));
    CUDA_ARRAY_DESCRIPTOR ad_got = {};
    DRV(p_cuArrayGetDescriptor(&ad_got, a2));
    EXPECT(ad_got.Width == W && ad_got.Height == H && ad_got.Format == CU_AD_FORMAT_FLOAT && ad_got.NumChannels == 1);
    CUDA_MEMCPY2D toarr = {};
    toarr.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    toarr.srcDevice = pitched;
    toarr.srcPitch = pitch;
    toarr.dstMemoryType = CU_MEMORYTYPE_ARRAY;
    toarr.dstArray = a2;
    toarr.WidthInBytes = W * 4;
    toarr.Height = H;
    DRV(p_cuMemcpy2D(&toarr));
    CUDA_RESOURCE_DESC rd = {};
    rd.resType = CU_RESOURCE_TYPE_ARRAY;
    rd.res.array.hArray = a2;
    CUDA_TEXTURE_DESC td = {};
    td.addressMode[0] = td.addressMode[1] = CU_TR_ADDRESS_MODE_CLAMP;
    td.filterMode = CU_TR_FILTER_MODE_POINT;
    CUtexObject tex;
    DRV(p_cuTexObjectCreate(&tex, &rd, &td, nullptr));
    CUDA_RESOURCE_DESC rd_got = {};
    DRV(p_cuTexObjectGetResourceDesc(&rd_got, tex));
    EXPECT(rd_got.resType == CU_RESOURCE_TYPE_ARRAY && rd_got.res.array.hArray == a2);
    CUdeviceptr texout;
    DRV(p_cuMemAllocAsync(&texout, W * H * 4, s));
    DRV(p_cuStreamSynchronize(s));

    // A 3-D array written from the host in one cuMemcpy3D.
    CUDA_ARRAY3D_DESCRIPTOR ad3 = {};
    ad3.Width = W;
    ad3.Height = H;
    ad3.Depth = D;
    ad3.Format = CU_AD_FORMAT_FLOAT;
    ad3.NumChannels = 1;
    CUarray a3;
    DRV(p_cuArray3DCreate(&a3, &ad3));
    CUDA_ARRAY3D_DESCRIPTOR ad3_got = {};
    DRV(p_cuArray3DGetDescriptor(&ad3_got, a3));
    EXPECT(ad3_got.Width == W && ad3_got.Height == H && ad3_got.Depth == D && ad3_got.Format == CU_AD_FORMAT_FLOAT);
    CUDA_MEMCPY3D c3 = {};
    c3.srcMemoryType = CU_MEMORYTYPE_HOST;
    c3.srcHost = img.data();
    c3.srcPitch = W * 4;
    c3.srcHeight = H;
    c3.dstMemoryType = CU_MEMORYTYPE_ARRAY;
    c3.dstArray = a3;
    c3.WidthInBytes = W * 4;
    c3.Height = H;
    c3.Depth = D;
    DRV(p_cuMemcpy3D(&c3));

    // Every check, now and after each gate.
    auto check_all = [&](const char *when) {
        DRV(p_cuCtxSynchronize());
        std::vector<unsigned> h(n);
        DRV(p_cuMemcpyDtoH(h.data(), fromdef, n * 4));
        for (unsigned i = 0; i < n; i++) EXPECT(h[i] == 3 * i + 1);
        DRV(p_cuMemcpyDtoH(h.data(), frompool, n * 4));
        for (unsigned i = 0; i < n; i++) EXPECT(h[i] == 4 * i);
        for (unsigned i = 0; i < n; i++) EXPECT(mapped[i] == 3 * i && ((unsigned *)managed)[i] == 6 * i);
        check_array2d(a2);
        check_texture(tex, texout);
        check_array3d(a3, pitched, pitch);
        printf("%s: pinned, mapped, registered, managed, pooled, pitched memory, 2-D/3-D arrays and a texture match\n", when);
    };
    check_all("before the gates");
    GATE(1);
    check_all("gate 1");
    GATE(2);
    check_all("gate 2");
    GATE(3);
    check_all("gate 3");

    DRV(p_cuTexObjectDestroy(tex));
    DRV(p_cuArrayDestroy(a2));
    DRV(p_cuArrayDestroy(a3));
    DRV(p_cuMemFreeAsync(fromdef, s));
    DRV(p_cuMemFreeAsync(frompool, s));
    DRV(p_cuMemFreeAsync(texout, s));
    DRV(p_cuStreamSynchronize(s));
    DRV(p_cuMemPoolDestroy(pool));
    DRV(p_cuMemFree(pitched));
    DRV(p_cuMemFree(managed));
    DRV(p_cuMemHostUnregister(reg));
    free(reg);
    DRV(p_cuMemFreeHost(pinned));
    DRV(p_cuMemFreeHost(mapped));
    printf("PASS\n");
    return 0;
}
