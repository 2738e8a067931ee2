// cudaMemcpy from a wild address that is neither device nor host memory must fail with
// cudaErrorInvalidValue (as on a real GPU), not crash the program.
#include "common.h"
int main() {
    setvbuf(stdout, nullptr, _IONBF, 0);
    int h = 0, *d;
    GATE(1);
    cudaError_t e = cudaMemcpy(&h, (void *)0x10, 4, cudaMemcpyDeviceToHost);
    printf("wild source: %s\n", cudaGetErrorName(e));
    EXPECT(e == cudaErrorInvalidValue);
    e = cudaMemset((void *)0x10, 0, 4);
    printf("wild memset: %s\n", cudaGetErrorName(e));
    EXPECT(e == cudaErrorInvalidValue);
    GATE(2);
    CK(cudaMalloc(&d, 4));  // non-sticky: the device still works
    CK(cudaMemcpy(d, &h, 4, cudaMemcpyHostToDevice));
    GATE(3);
    CK(cudaFree(d));
    printf("PASS\n");
    return 0;
}
