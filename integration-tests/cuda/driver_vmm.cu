// The driver API's virtual memory management (issue 13): a range reserved
// (cuMemAddressReserve), two physical allocations (cuMemCreate) mapped side by side into it
// (cuMemMap), read-write access set (cuMemSetAccess), written by a kernel across both, read
// back in one copy that spans them; handles retained and queried; one allocation unmapped
// (its bytes kept), mapped again elsewhere, and read; then everything unmapped, released
// and freed. The mappings are device state: a checkpoint at any gate brings them back at the
// same addresses with their bytes, which the program checks after each gate. Checked; PASS.
#include "driver.h"
#include "driver_ptx.h"
#include <cstring>
#include <vector>

#define FUNCS(X) X(cuCtxSynchronize) X(cuLaunchKernel) X(cuMemcpyDtoH) X(cuMemsetD32) X(cuMemAlloc) \
    X(cuMemFree) X(cuMemGetAddressRange) X(cuMemGetAllocationGranularity) X(cuMemAddressReserve) \
    X(cuMemAddressFree) X(cuMemCreate) X(cuMemRelease) X(cuMemMap) X(cuMemUnmap) X(cuMemSetAccess) \
    X(cuMemGetAccess) X(cuMemRetainAllocationHandle) X(cuMemGetAllocationPropertiesFromHandle)
FUNCS(DRIVER)

static CUfunction axpb_f;
// One word in every STRIDE is touched by the kernel (the rest stays as the memset left it).
static const unsigned STRIDE = 16;

static void axpb(CUdeviceptr p, unsigned n, unsigned a, unsigned b) {
    unsigned stride = STRIDE;
    void *params[] = {&p, &n, &stride, &a, &b};
    DRV(p_cuLaunchKernel(axpb_f, (n + 255) / 256, 1, 1, 256, 1, 1, 0, nullptr, params, nullptr));
}

// `bytes` at `d` read in one copy: word i*STRIDE is `base + scale*i`, every other word `fill`.
static void check(CUdeviceptr d, size_t bytes, unsigned base, unsigned scale, unsigned fill, const char *what) {
    std::vector<unsigned> h(bytes / 4);
    DRV(p_cuMemcpyDtoH(h.data(), d, bytes));
    for (size_t k = 0; k < h.size(); k++) {
        unsigned want = k % STRIDE ? fill : base + scale * (unsigned)(k / STRIDE);
        if (h[k] != want) {
            printf("FAIL %s: word %zu = %u, want %u\n", what, k, h[k], want);
            exit(1);
        }
    }
}

int main() {
    FUNCS(LOAD)
    CUdevice dev;
    CUcontext ctx;
    axpb_f = drv_start(&dev, &ctx, AXPB_PTX, "axpb");

    CUmemAllocationProp prop = {};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    size_t gran = 0;
    DRV(p_cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    EXPECT(gran > 0 && gran % 4096 == 0);
    const size_t size = 2 * gran;

    // An ordinary allocation too: the reserved range must not collide with it.
    CUdeviceptr plain;
    DRV(p_cuMemAlloc(&plain, 1 << 20));
    CUdeviceptr va;
    DRV(p_cuMemAddressReserve(&va, size, 0, 0, 0));
    EXPECT(va % gran == 0 && (va + size <= plain || plain + (1 << 20) <= va));
    CUmemGenericAllocationHandle h1, h2;
    DRV(p_cuMemCreate(&h1, gran, &prop, 0));
    DRV(p_cuMemCreate(&h2, gran, &prop, 0));
    DRV(p_cuMemMap(va, gran, 0, h1, 0));
    DRV(p_cuMemMap(va + gran, gran, 0, h2, 0));
    EXPECT(p_cuMemMap(va + gran, gran, 0, h1, 0) != CUDA_SUCCESS);  // h1 is mapped already / the range is taken
    CUmemAccessDesc access = {};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = dev;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    DRV(p_cuMemSetAccess(va, size, &access, 1));
    unsigned long long flags = 0;
    DRV(p_cuMemGetAccess(&flags, &access.location, va + gran + 8));
    EXPECT(flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    CUdeviceptr base;
    size_t len;
    DRV(p_cuMemGetAddressRange(&base, &len, va + gran + 100));
    EXPECT(base == va + gran && len == gran);
    EXPECT(p_cuMemFree(va) != CUDA_SUCCESS);  // mappings are unmapped, not freed
    CUmemGenericAllocationHandle again;
    DRV(p_cuMemRetainAllocationHandle(&again, (void *)(va + gran + 4)));
    EXPECT(again == h2);
    DRV(p_cuMemRelease(again));
    CUmemAllocationProp got = {};
    DRV(p_cuMemGetAllocationPropertiesFromHandle(&got, h1));
    EXPECT(got.type == CU_MEM_ALLOCATION_TYPE_PINNED && got.location.type == CU_MEM_LOCATION_TYPE_DEVICE && got.location.id == dev);

    // A kernel writes across both physical allocations as one range.
    const unsigned n = (unsigned)(size / 4 / STRIDE);
    DRV(p_cuMemsetD32(va, 7, size / 4));
    axpb(va, n, 0, 1);  // word i*STRIDE = 1 + i
    GATE(1);
    DRV(p_cuCtxSynchronize());
    check(va, size, 1, 1, 7, "after the first kernel");
    printf("two physical allocations mapped side by side: %zu bytes written by a kernel and read in one copy\n", size);
    axpb(va, n, 2, 0);  // 2 + 3i
    GATE(2);
    DRV(p_cuCtxSynchronize());
    check(va, size, 2, 3, 7, "after the second kernel");

    // h2 unmapped (its bytes kept), mapped again in a second range.
    DRV(p_cuMemUnmap(va + gran, gran));
    CUdeviceptr va2;
    DRV(p_cuMemAddressReserve(&va2, gran, 0, 0, 0));
    EXPECT(va2 + gran <= va || va + size <= va2);
    DRV(p_cuMemMap(va2, gran, 0, h2, 0));
    DRV(p_cuMemSetAccess(va2, gran, &access, 1));
    GATE(3);
    const unsigned half = n / 2;
    check(va, gran, 2, 3, 7, "h1 where it was");
    check(va2, gran, 2 + 3 * half, 3, 7, "h2 mapped again");
    printf("an unmapped physical allocation kept its bytes and maps again at another address\n");

    DRV(p_cuMemUnmap(va, gran));
    DRV(p_cuMemUnmap(va2, gran));
    DRV(p_cuMemRelease(h1));
    DRV(p_cuMemRelease(h2));
    DRV(p_cuMemAddressFree(va, size));
    DRV(p_cuMemAddressFree(va2, gran));
    DRV(p_cuMemFree(plain));
    printf("PASS\n");
    return 0;
}
