// Calls the runtime until a call fails (the proxy was killed), then reports the error.
#include <cstdio>
#include <unistd.h>
#include <cuda_runtime.h>
int main() {
  void *d; if (cudaMalloc(&d, 16) != cudaSuccess) return 2;
  printf("ready\n"); fflush(stdout);
  for (int i = 0; i < 100000; i++) {
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) { printf("failed: %s\n", cudaGetErrorName(e)); return 0; }
    usleep(1000);
  }
  return 3;
}
