// grid.sync() of cooperative groups in a cooperative launch: a ring of values shifted across
// block boundaries for several rounds, with a grid-wide barrier between reads and writes.
// The barrier's workspace address comes from %envreg1 (high half) and %envreg2 (low half).
// The grid is as large as the device allows a cooperative grid (occupancy per SM x SMs: every
// block resident at once); one block more is refused at the launch.
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
    int coop = 0, sms = 0, per_sm = 0;
    CK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, 0));
    EXPECT(coop == 1);
    const int threads = 128, rounds = 6;
    // The documented maximum: every block resident at once, blocks per SM times the SMs.
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, ring, threads, 0));
    EXPECT(sms > 0 && per_sm > 0);
    int blocks = per_sm * sms, n = blocks * threads;
    int *da, *db;
    CK(cudaMalloc(&da, n * 4)); CK(cudaMalloc(&db, n * 4));
    int r = rounds;
    void *args[] = {&da, &db, &r};
    // One block more cannot be resident: refused at the launch.
    EXPECT(cudaLaunchCooperativeKernel((void *)ring, blocks + 1, threads, args, 0, 0) == cudaErrorCooperativeLaunchTooLarge);
    EXPECT(cudaGetLastError() == cudaErrorCooperativeLaunchTooLarge);
    GATE(1);
    CK(cudaLaunchCooperativeKernel((void *)ring, blocks, threads, args, 0, 0));
    GATE(2);  // the grid queued or running (a grid that synchronizes is waited for)
    CK(cudaDeviceSynchronize());
    int *got = (int *)malloc(n * 4), *want = (int *)malloc(n * 4), *tmp = (int *)malloc(n * 4);
    CK(cudaMemcpy(got, rounds % 2 ? db : da, n * 4, cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++) want[i] = i + 1;
    for (int k = 0; k < rounds; k++) {
        for (int i = 0; i < n; i++) tmp[i] = want[(i + n / 2 + 1) % n] + k;
        for (int i = 0; i < n; i++) want[i] = tmp[i];
    }
    for (int i = 0; i < n; i++) EXPECT(got[i] == want[i]);
    printf("%d rounds of grid.sync over the occupancy limit's grid: ok\n", rounds);
    GATE(3);
    printf("PASS\n");
    return 0;
}
