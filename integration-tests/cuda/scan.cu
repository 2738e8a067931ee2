// Inclusive prefix sum of 1<<14 ints: per-block Hillis-Steele scan in shared memory, block sums
// scanned on a second pass, then added back. Checked against the CPU.
#include "common.h"
#define B 256
__global__ void block_scan(int *x, int *sums, int n) {
    __shared__ int s[B];
    int i = blockIdx.x * B + threadIdx.x;
    s[threadIdx.x] = i < n ? x[i] : 0;
    __syncthreads();
    for (int o = 1; o < B; o <<= 1) {
        int t = threadIdx.x >= o ? s[threadIdx.x - o] : 0;
        __syncthreads();
        s[threadIdx.x] += t;
        __syncthreads();
    }
    if (i < n) x[i] = s[threadIdx.x];
    if (sums && threadIdx.x == B - 1) sums[blockIdx.x] = s[B - 1];
}
__global__ void add_offsets(int *x, const int *sums, int n) {
    int i = blockIdx.x * B + threadIdx.x;
    if (blockIdx.x > 0 && i < n) x[i] += sums[blockIdx.x - 1];
}
int main() {
    const int n = 1 << 14, nb = n / B;  // nb = 64 <= B, so one block scans the sums
    int *h = (int *)malloc(n * 4), *r = (int *)malloc(n * 4);
    for (int i = 0; i < n; i++) h[i] = (i * 37) % 11 - 5;
    int *d, *ds;
    CK(cudaMalloc(&d, n * 4)); CK(cudaMalloc(&ds, nb * 4));
    CK(cudaMemcpy(d, h, n * 4, cudaMemcpyHostToDevice));
    GATE(1);
    block_scan<<<nb, B>>>(d, ds, n);
    GATE(2);
    block_scan<<<1, B>>>(ds, nullptr, nb);
    add_offsets<<<nb, B>>>(d, ds, n);
    GATE(3);
    CK(cudaGetLastError());
    CK(cudaMemcpy(r, d, n * 4, cudaMemcpyDeviceToHost));
    int acc = 0;
    for (int i = 0; i < n; i++) { acc += h[i]; EXPECT(r[i] == acc); }
    printf("last %d\n", r[n - 1]);
    printf("PASS\n");
    return 0;
}
