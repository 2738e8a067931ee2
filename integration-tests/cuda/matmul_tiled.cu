// 64x64 tiled matrix multiply through shared memory, integer-valued floats so the result is exact.
#include "common.h"
#define T 16
__global__ void mm(const float *A, const float *B, float *C, int n) {
    __shared__ float sa[T][T], sb[T][T];
    int r = blockIdx.y * T + threadIdx.y, c = blockIdx.x * T + threadIdx.x;
    float acc = 0;
    for (int k0 = 0; k0 < n; k0 += T) {
        sa[threadIdx.y][threadIdx.x] = A[r * n + k0 + threadIdx.x];
        sb[threadIdx.y][threadIdx.x] = B[(k0 + threadIdx.y) * n + c];
        __syncthreads();
        for (int k = 0; k < T; k++) acc += sa[threadIdx.y][k] * sb[k][threadIdx.x];
        __syncthreads();
    }
    C[r * n + c] = acc;
}
int main() {
    const int n = 64;
    static float A[n * n], B[n * n], C[n * n];
    for (int i = 0; i < n * n; i++) { A[i] = (float)(i % 7) - 3; B[i] = (float)(i % 5) - 2; }
    float *dA, *dB, *dC;
    CK(cudaMalloc(&dA, sizeof A)); CK(cudaMalloc(&dB, sizeof B)); CK(cudaMalloc(&dC, sizeof C));
    CK(cudaMemcpy(dA, A, sizeof A, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dB, B, sizeof B, cudaMemcpyHostToDevice));
    GATE(1);
    mm<<<dim3(n / T, n / T), dim3(T, T)>>>(dA, dB, dC, n);
    GATE(2);
    CK(cudaGetLastError());
    CK(cudaMemcpy(C, dC, sizeof C, cudaMemcpyDeviceToHost));
    GATE(3);
    double tr = 0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            float s = 0;
            for (int k = 0; k < n; k++) s += A[i * n + k] * B[k * n + j];
            EXPECT(s == C[i * n + j]);
            if (i == j) tr += s;
        }
    printf("trace %.0f\n", tr);
    printf("PASS\n");
    return 0;
}
