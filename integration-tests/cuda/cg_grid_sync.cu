// grid.sync() of cooperative groups in a cooperative launch: a ring of values shifted across
// block boundaries for several rounds, with a grid-wide barrier between reads and writes.
// The barrier's workspace address comes from %envreg1 (high half) and %envreg2 (low half).
#include <cooperative_groups.h>
#include "common.h"
namespace cg = cooperative_groups;

__global__ void ring(int *a, int *b, int rounds) {
    cg::grid_group grid = cg::this_grid();
    unsigned n = grid.size(), i = grid.thread_rank();
    a[i] = i + 1;
    for (int r = 0; r < rounds; r++) {
        grid.sync();
        // Read a value written by a thread of another block, then write the other buffer.
        b[i] = a[(i + n / 2 + 1) % n] + r;
        grid.sync();
        int *t = a; a = b; b = t;
    }
}

int main() {
    int coop = 0;
    CK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, 0));
    EXPECT(coop == 1);
    const int threads = 128, rounds = 6;
    // Two blocks; a device that cannot keep two resident at once says so, then one block.
    for (int blocks = 2; blocks >= 1; blocks--) {
        int n = blocks * threads;
        int *da, *db;
        CK(cudaMalloc(&da, n * 4)); CK(cudaMalloc(&db, n * 4));
        int r = rounds;
        void *args[] = {&da, &db, &r};
        cudaError_t e = cudaLaunchCooperativeKernel((void *)ring, blocks, threads, args, 0, 0);
        if (e == cudaSuccess) e = cudaDeviceSynchronize();
        if (e == cudaErrorCooperativeLaunchTooLarge && blocks > 1) {
            CK(cudaFree(da)); CK(cudaFree(db));
            continue;
        }
        CK(e);
        int *got = (int *)malloc(n * 4), *want = (int *)malloc(n * 4), *tmp = (int *)malloc(n * 4);
        CK(cudaMemcpy(got, rounds % 2 ? db : da, n * 4, cudaMemcpyDeviceToHost));
        for (int i = 0; i < n; i++) want[i] = i + 1;
        for (int k = 0; k < rounds; k++) {
            for (int i = 0; i < n; i++) tmp[i] = want[(i + n / 2 + 1) % n] + k;
            for (int i = 0; i < n; i++) want[i] = tmp[i];
        }
        for (int i = 0; i < n; i++) EXPECT(got[i] == want[i]);
        printf("%d rounds of grid.sync: ok\n", rounds);
        break;
    }
    printf("PASS\n");
    return 0;
}
