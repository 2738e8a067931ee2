// Launches a kernel that prints and returns from main without synchronizing: as at CUDA's
// context teardown, the work finishes and its output appears after the host's.
#include <cstdio>
__global__ void hi() { printf("device says hi %d\n", threadIdx.x); }
int main() {
  printf("host first\n");
  hi<<<1, 2>>>();
  return 0;
}
