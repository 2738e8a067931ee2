// Calls that synchronize the device and then change it, caught waiting by a checkpoint: a
// module unload (`unload`) or a device reset (`reset`) made by a second thread while a kernel
// of seconds runs with 200 launches queued behind it. The cut saves the call as one to
// resume (before, its own device synchronization waited for ever on the queues the cut held,
// and the checkpoint failed after 120 s). After a restart it happens once: the unloaded
// library's second unload fails; after the reset the old buffers are gone and new ones work.
// The work queued before the call is done first and its results are right. The test
// inspects an image taken at gate 2 (after the call) for what the device still holds.
// Usage: ckpt_sync_then_cut unload|reset [LONG_ITERS=8000000]
#include "common.h"
#include "ckpt_work.h"
#include <cstring>
#include <thread>

static const char *PTX =
    ".version 8.0\n.target sm_80\n.address_size 64\n"
    ".visible .entry plus_one(.param .u64 p) {\n"
    "  .reg .b32 %r<3>; .reg .b64 %rd<4>;\n"
    "  ld.param.u64 %rd1, [p]; cvta.to.global.u64 %rd1, %rd1;\n"
    "  mov.u32 %r1, %tid.x; mul.wide.u32 %rd2, %r1, 4; add.s64 %rd3, %rd1, %rd2;\n"
    "  ld.global.u32 %r2, [%rd3]; add.s32 %r2, %r2, 1; st.global.u32 [%rd3], %r2;\n"
    "  ret;\n}\n";


int main(int argc, char **argv) {
    const bool reset = argc > 1 && strcmp(argv[1], "reset") == 0;
    const int iters = argc > 2 ? atoi(argv[2]) : 8000000;
    const int n = 1024;
    unsigned *d, *l, h[n], ref[n], lh[32], lref[32];
    cudaLibrary_t lib;
    CK(cudaLibraryLoadData(&lib, PTX, nullptr, nullptr, 0, nullptr, nullptr, 0));
    cudaKernel_t plus;
    CK(cudaLibraryGetKernel(&plus, lib, "plus_one"));
    CK(cudaMalloc(&d, n * 4));
    CK(cudaMalloc(&l, 32 * 4));
    for (int i = 0; i < n; i++) ref[i] = h[i] = (unsigned)i * 2654435761u;
    for (int i = 0; i < 32; i++) lref[i] = lh[i] = (unsigned)i + 7;
    CK(cudaMemcpy(d, h, n * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(l, lh, 32 * 4, cudaMemcpyHostToDevice));
    // The library's kernel works before it is unloaded.
    void *args[] = {&l};
    CK(cudaLaunchKernel((const void *)plus, dim3(1), dim3(32), args, 0, 0));
    for (int i = 0; i < 32; i++) lref[i] += 1;
    spin<<<1, 32>>>(l, iters);
    for (int i = 0; i < 32; i++)
        for (int t = 0; t < iters; t++) lref[i] = lref[i] * 1664525u + 1013904223u;
    for (int j = 0; j < 200; j++) {
        step<<<n / 256, 256>>>(d, n, (unsigned)j);
        for (int i = 0; i < n; i++) ref[i] = ref[i] * 3u + (unsigned)j + (unsigned)i;
    }
    if (!reset) {
        std::thread t([&] { CK(cudaLibraryUnload(lib)); });
        GATE(1);
        t.join();
        // (Unloading it again is not checked: a stale handle is undefined on a GPU. The test
        // checks the module is gone from an image taken at gate 2.)
        CK(cudaMemcpy(h, d, n * 4, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(lh, l, 32 * 4, cudaMemcpyDeviceToHost));
        for (int i = 0; i < n; i++) EXPECT(h[i] == ref[i]);
        for (int i = 0; i < 32; i++) EXPECT(lh[i] == lref[i]);
        GATE(2);
        printf("a module unload waiting at the cut happened once after it; %d results match\n", n + 32);
    } else {
        // What the reset freed is not touched again (undefined on a GPU: a real one, driver
        // 580, answered a copy from `d` after the reset, and its free memory did not grow by
        // a freed buffer's size). The test checks, in an image taken at gate 2, that the
        // device holds only the buffer made after the reset.
        void *spare;
        CK(cudaMalloc(&spare, 64 << 20));
        std::thread t([&] { CK(cudaDeviceReset()); });
        GATE(1);
        t.join();
        unsigned *fresh;
        CK(cudaMalloc(&fresh, n * 4));
        CK(cudaMemcpy(fresh, ref, n * 4, cudaMemcpyHostToDevice));
        step<<<n / 256, 256>>>(fresh, n, 7u);
        CK(cudaMemcpy(h, fresh, n * 4, cudaMemcpyDeviceToHost));
        for (int i = 0; i < n; i++) EXPECT(h[i] == ref[i] * 3u + 7u + (unsigned)i);
        GATE(2);
        printf("a device reset waiting at the cut happened once after it; %d results match\n", n);
    }
    printf("PASS\n");
    return 0;
}
