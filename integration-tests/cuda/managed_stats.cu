// A fixed pattern of managed-memory traffic whose shadow-page statistics
// (CRUM_MANAGED_STATS=1) the tests can bound: a 16 MiB array (4096 pages) written by the CPU,
// one int per page updated by a kernel, read back sequentially by the CPU (read-ahead should
// make that a few dozen faults, not 4096), then three ints in three pages written by the CPU
// and a kernel (only those three pages should travel back).
#include "common.h"

__global__ void touch(int *x, int pages, int k) {
    int p = blockIdx.x * blockDim.x + threadIdx.x;
    if (p < pages) x[p * 1024 + (p % 1024)] += k;
}

int main() {
    const int pages = 4096, n = pages * 1024;
    int *x;
    CK(cudaMallocManaged(&x, (size_t)n * 4));
    for (int i = 0; i < n; i++) x[i] = i;
    touch<<<pages / 256, 256>>>(x, pages, 1);
    CK(cudaDeviceSynchronize());
    long long s = 0;
    for (int i = 0; i < n; i++) s += x[i];  // sequential read after a kernel
    long long want = (long long)n * (n - 1) / 2 + pages;
    EXPECT(s == want);
    x[5] = -1;                               // three write faults, three dirty pages
    x[2000 * 1024 + 3] = -2;
    x[n - 1] = -3;
    touch<<<pages / 256, 256>>>(x, pages, 2);
    CK(cudaDeviceSynchronize());
    EXPECT(x[5] == -1 && x[2000 * 1024 + 3] == -2 && x[n - 1] == -3 + 2);
    EXPECT(x[1024 + 1] == 1024 + 1 + 3);
    printf("sum %lld\n", s);
    CK(cudaFree(x));
    printf("PASS\n");
    return 0;
}
