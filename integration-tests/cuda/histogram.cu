// 64-bin histogram of 1<<16 bytes with shared-memory privatized bins and global atomics.
#include "common.h"
#define NB 64
__global__ void hist(const unsigned char *x, int n, unsigned *bins) {
    __shared__ unsigned s[NB];
    for (int b = threadIdx.x; b < NB; b += blockDim.x) s[b] = 0;
    __syncthreads();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        atomicAdd(&s[x[i] % NB], 1u);
    __syncthreads();
    for (int b = threadIdx.x; b < NB; b += blockDim.x) atomicAdd(&bins[b], s[b]);
}
int main() {
    const int n = 1 << 16;
    unsigned char *h = (unsigned char *)malloc(n);
    unsigned want[NB] = {0}, got[NB];
    for (int i = 0; i < n; i++) { h[i] = (unsigned char)((i * 131u + (i >> 5)) & 0xff); want[h[i] % NB]++; }
    unsigned char *d; unsigned *db;
    CK(cudaMalloc(&d, n)); CK(cudaMalloc(&db, sizeof got));
    CK(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice));
    CK(cudaMemset(db, 0, sizeof got));
    GATE(1);
    hist<<<32, 256>>>(d, n, db);
    GATE(2);
    CK(cudaGetLastError());
    CK(cudaMemcpy(got, db, sizeof got, cudaMemcpyDeviceToHost));
    GATE(3);
    for (int b = 0; b < NB; b++) EXPECT(got[b] == want[b]);
    printf("bin0 %u bin63 %u\n", got[0], got[NB - 1]);
    printf("PASS\n");
    return 0;
}
