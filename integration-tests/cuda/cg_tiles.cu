// Cooperative-groups tiles larger than a warp (tiled_partition<64> and <128>): on sm_80 and
// later their barriers and exchange slots live in the reserved shared memory that
// %reserved_smem_offset_1 points to. Each tile syncs, broadcasts a value from one of its
// threads with shfl, and votes; a block-level __shared__ array must not overlap that scratch.
#include <cooperative_groups.h>
#include "common.h"
namespace cg = cooperative_groups;

template <unsigned Size>
__global__ void tiles(const int *x, int *out) {
    __shared__ int stage[256];
    cg::thread_block b = cg::this_thread_block();
    auto t = cg::tiled_partition<Size>(b);
    int g = blockIdx.x * blockDim.x + b.thread_rank();
    stage[b.thread_rank()] = x[g];
    t.sync();
    // Sum of the tile through shared memory after the tile barrier.
    int base = t.meta_group_rank() * Size, sum = 0;
    for (unsigned k = 0; k < Size; k++) sum += stage[base + k];
    // Value of the tile's thread 5, broadcast across warps of the tile.
    int five = t.shfl(x[g] * 3, 5);
    int any_big = t.any(x[g] > 990);
    int all_pos = t.all(x[g] >= 0);
    out[4 * g + 0] = sum;
    out[4 * g + 1] = five;
    out[4 * g + 2] = any_big;
    out[4 * g + 3] = all_pos * 1000 + t.meta_group_rank() * 10 + (int)t.num_threads() / 64;
}

template <unsigned Size>
static void check(const int *d, int *dout, const int *h, int *hout, int n, int blocks) {
    CK(cudaMemset(dout, 0xff, n * 16));
    tiles<Size><<<blocks, 256>>>(d, dout);
    CK(cudaGetLastError());
    CK(cudaMemcpy(hout, dout, n * 16, cudaMemcpyDeviceToHost));
    for (int g = 0; g < n; g++) {
        int first = g / Size * Size, sum = 0, big = 0;
        for (unsigned k = 0; k < Size; k++) { sum += h[first + k]; big |= h[first + k] > 990; }
        int meta = (g % 256) / Size;
        EXPECT(hout[4 * g + 0] == sum);
        EXPECT(hout[4 * g + 1] == h[first + 5] * 3);
        EXPECT(hout[4 * g + 2] == big);
        EXPECT(hout[4 * g + 3] == 1000 + meta * 10 + (int)Size / 64);
    }
    printf("tiles of %u: ok\n", Size);
}

int main() {
    const int blocks = 8, n = blocks * 256;
    int *h = (int *)malloc(n * 4), *hout = (int *)malloc(n * 16);
    for (int i = 0; i < n; i++) h[i] = (i * 2654435761u) % 1000;
    int *d, *dout;
    CK(cudaMalloc(&d, n * 4)); CK(cudaMalloc(&dout, n * 16));
    CK(cudaMemcpy(d, h, n * 4, cudaMemcpyHostToDevice));
    check<64>(d, dout, h, hout, n, blocks);
    check<128>(d, dout, h, hout, n, blocks);
    printf("PASS\n");
    return 0;
}
