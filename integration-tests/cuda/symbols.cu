// __device__ and __constant__ module variables through cudaMemcpyToSymbol/FromSymbol and
// cudaGetSymbolAddress/Size, including an initialized __device__ variable.
#include "common.h"
__constant__ float coef[4];
__device__ int counter = 42;
__device__ float table[256];
__global__ void poly(int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { float x = (float)i; table[i] = coef[0] + x * (coef[1] + x * (coef[2] + x * coef[3])); }
    if (i == 0) counter += 1;
}
int main() {
    int c0 = 0;
    CK(cudaMemcpyFromSymbol(&c0, counter, sizeof c0));
    EXPECT(c0 == 42);
    float k[4] = {1, 2, 0.5f, 0.25f};
    CK(cudaMemcpyToSymbol(coef, k, sizeof k));
    GATE(1);
    poly<<<1, 256>>>(256);
    GATE(2);
    CK(cudaGetLastError());
    float got[256];
    CK(cudaMemcpyFromSymbol(got, table, sizeof got));
    for (int i = 0; i < 256; i++) { float x = (float)i; EXPECT(got[i] == k[0] + x * (k[1] + x * (k[2] + x * k[3]))); }
    int *pc; size_t sz;
    CK(cudaGetSymbolAddress((void **)&pc, counter));
    CK(cudaGetSymbolSize(&sz, table));
    GATE(3);
    EXPECT(sz == sizeof got);
    int c1 = 0;
    CK(cudaMemcpy(&c1, pc, 4, cudaMemcpyDeviceToHost));
    EXPECT(c1 == 43);
    // Offset form: write table[10..12) then read it back.
    float two[2] = {-1, -2}, chk[2];
    CK(cudaMemcpyToSymbol(table, two, sizeof two, 10 * sizeof(float)));
    CK(cudaMemcpyFromSymbol(chk, table, sizeof chk, 10 * sizeof(float)));
    EXPECT(chk[0] == -1 && chk[1] == -2);
    printf("counter %d table[255]=%.2f\n", c1, got[255]);
    printf("PASS\n");
    return 0;
}
