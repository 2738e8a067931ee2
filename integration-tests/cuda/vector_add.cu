// Vector add c = a + b on 1<<16 floats, checked against the CPU.
#include "common.h"
__global__ void add(const float *a, const float *b, float *c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}
int main() {
    const int n = 1 << 16;
    float *a = (float *)malloc(n * 4), *b = (float *)malloc(n * 4), *c = (float *)malloc(n * 4);
    for (int i = 0; i < n; i++) { a[i] = i * 0.5f; b[i] = (float)(n - i); }
    float *da, *db, *dc;
    CK(cudaMalloc(&da, n * 4)); CK(cudaMalloc(&db, n * 4)); CK(cudaMalloc(&dc, n * 4));
    CK(cudaMemcpy(da, a, n * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(db, b, n * 4, cudaMemcpyHostToDevice));
    GATE(1);
    add<<<(n + 255) / 256, 256>>>(da, db, dc, n);
    GATE(2);
    CK(cudaGetLastError());
    CK(cudaMemcpy(c, dc, n * 4, cudaMemcpyDeviceToHost));
    GATE(3);
    for (int i = 0; i < n; i++) EXPECT(c[i] == a[i] + b[i]);
    printf("c[0]=%.1f c[%d]=%.1f\n", c[0], n - 1, c[n - 1]);
    CK(cudaFree(da)); CK(cudaFree(db)); CK(cudaFree(dc));
    printf("PASS\n");
    return 0;
}
