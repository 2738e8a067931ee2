// Small out-of-bounds reads next to allocations, as older benchmark code makes them (a
// stencil that reads a[i-1] and a[i+1] without a bounds check, the checks applied only to
// the result). On a GPU they read memory: the runtime's own allocations lie below the
// program's, and allocations fill whole pages. The results must not depend on what was read.
#include "common.h"
__global__ void stencil(const int *a, int n, int *out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int left = a[i - 1], right = a[i + 1];  // a[-1] and a[n]: outside the array
    out[i] = (i > 0 ? left : 0) + 2 * a[i] + (i < n - 1 ? right : 0);
}
int main() {
    const int n = 1000;  // 4000 bytes: the array ends inside its last page
    int *a, *out, h[n], r[n];
    CK(cudaMalloc(&a, n * sizeof(int)));  // the program's first allocation
    CK(cudaMalloc(&out, n * sizeof(int)));
    for (int i = 0; i < n; i++) h[i] = i * 7 % 31;
    CK(cudaMemcpy(a, h, sizeof h, cudaMemcpyHostToDevice));
    GATE(1);
    stencil<<<(n + 255) / 256, 256>>>(a, n, out);
    CK(cudaGetLastError());
    CK(cudaMemcpy(r, out, sizeof r, cudaMemcpyDeviceToHost));
    GATE(2);
    stencil<<<(n + 255) / 256, 256>>>(a, n, out);  // again after a restart
    CK(cudaMemcpy(r, out, sizeof r, cudaMemcpyDeviceToHost));
    long sum = 0;
    for (int i = 0; i < n; i++) {
        int want = (i > 0 ? h[i - 1] : 0) + 2 * h[i] + (i < n - 1 ? h[i + 1] : 0);
        EXPECT(r[i] == want);
        sum += r[i];
    }
    printf("stencil over %d elements, reads one past each end: sum %ld\n", n, sum);
    GATE(3);
    printf("PASS\n");
    return 0;
}
