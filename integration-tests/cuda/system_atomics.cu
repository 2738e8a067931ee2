// System-scope atomics on mapped pinned memory while the host does atomics on the same words
// (issue 14). Pinned memory is one set of pages mapped by the program and by the device, so
// atomicAdd_system and the host's __atomic_fetch_add meet on the same bytes. The total is
// exact where the device reports host native atomics; without them (a PCIe GPU: an H200 lost
// about a third of the adds) only bounds hold: no more than all adds, no fewer than either
// side's. A flag handshake in both directions (system-scope load/exchange,
// __threadfence_system) completes. Managed memory is not for this on the emulated device: it reports
// cudaDevAttrConcurrentManagedAccess 0 (the host must not touch managed memory while kernels
// run), and cudaDevAttrHostNativeAtomicSupported 0, as a PCIe GPU does.
#include "common.h"
#include <cstring>
#include <thread>
__global__ void add(unsigned long long *c, int *started, int iters) {
    if (blockIdx.x == 0 && threadIdx.x == 0) atomicExch_system(started, 1);
    for (int i = 0; i < iters; i++) atomicAdd_system(c, 1ULL);
}
__global__ void handshake(int *flag, int *seen) {
    while (atomicAdd_system(flag, 0) == 0) { }  // wait for the host
    *seen = 1;
    __threadfence_system();
    atomicExch_system(flag, 2);  // answer it
}
int main() {
    int v = -1;
    CK(cudaDeviceGetAttribute(&v, cudaDevAttrConcurrentManagedAccess, 0));
    printf("concurrent managed access: %d\n", v);
    CK(cudaDeviceGetAttribute(&v, cudaDevAttrHostNativeAtomicSupported, 0));
    printf("host native atomics: %d\n", v);
    // crum's emulated device runs kernels on the host's cores: its system atomics are the
    // host's, exact although it reports no host native atomics (as a PCIe GPU).
    cudaDeviceProp p;
    CK(cudaGetDeviceProperties(&p, 0));
    const bool native = v == 1 || strstr(p.name, "crum emulated") != nullptr;
    unsigned long long *c;
    int *started, *flag, *seen;
    CK(cudaHostAlloc(&c, sizeof *c, cudaHostAllocMapped));
    CK(cudaHostAlloc(&started, sizeof *started, cudaHostAllocMapped));
    CK(cudaHostAlloc(&flag, sizeof *flag, cudaHostAllocMapped));
    CK(cudaHostAlloc(&seen, sizeof *seen, cudaHostAllocMapped));
    const int blocks = 8, threads = 64, iters = 400, host_adds = 100000;
    for (int round = 1; round <= 3; round++) {
        *c = 0; *started = 0; *flag = 0; *seen = 0;
        GATE(round);
        add<<<blocks, threads>>>(c, started, iters);
        std::thread t([&] {
            while (__atomic_load_n(started, __ATOMIC_SEQ_CST) == 0) { }  // the kernel runs
            for (int i = 0; i < host_adds; i++) __atomic_fetch_add(c, 1ULL, __ATOMIC_SEQ_CST);
        });
        t.join();
        CK(cudaDeviceSynchronize());
        const unsigned long long dev = (unsigned long long)blocks * threads * iters, want = dev + host_adds;
        if (native) {
            EXPECT(*c == want);
        } else {
            EXPECT(*c <= want && *c >= (dev > host_adds ? dev : (unsigned long long)host_adds));
        }
        printf("round %d: total %s\n", round, native ? "exact" : "within its bounds");
        handshake<<<1, 1>>>(flag, seen);
        __atomic_store_n(flag, 1, __ATOMIC_SEQ_CST);
        while (__atomic_load_n(flag, __ATOMIC_SEQ_CST) != 2) { }
        EXPECT(__atomic_load_n(seen, __ATOMIC_SEQ_CST) == 1);
        CK(cudaDeviceSynchronize());
    }
    printf("PASS\n");
    return 0;
}
