// Kernels through crum on the emulated device: launches, module variables (__constant__,
// __device__) via the symbol APIs, managed and
// pinned memory used by kernels, device printf at synchronization, a multi-stream pipeline
// with events, texture objects (linear, pitched, CUDA arrays), launch-configuration errors, and a sticky illegal-address
// error last.
// Prints "kernels: OK" on success.
#include <cstdio>
#include <cstring>
#include <cuda_runtime.h>

static int failures = 0;
#define CHECK(cond) do { if (!(cond)) { printf("FAIL line %d: %s\n", __LINE__, #cond); failures++; } } while (0)
#define OK(x) CHECK((x) == cudaSuccess)

__constant__ float scale;
__device__ int counter;

__global__ void saxpy(int n, float a, const float *x, float *y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * scale * x[i] + y[i];
}

__global__ void count(int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) atomicAdd(&counter, 1);
}

__global__ void hello(int tag) {
  if (threadIdx.x == 0) printf("hello from block %d tag %d\n", blockIdx.x, tag);
}

__global__ void poke(int *p) { *p = 1; }

__global__ void fetch1d(cudaTextureObject_t t, float *out, int n) {
  int i = threadIdx.x;
  if (i < n) out[i] = tex1Dfetch<float>(t, i) * 2;
}

__global__ void fetch2d(cudaTextureObject_t t, float *out, int w, int h) {
  int x = threadIdx.x, y = threadIdx.y;
  if (x < w && y < h) out[y * w + x] = tex2D<float>(t, x + 0.5f, y + 0.5f);
}

int main() {
  const int n = 10000;
  float *x, *y;
  OK(cudaMallocManaged(&x, n * sizeof(float)));
  OK(cudaMallocHost(&y, n * sizeof(float)));
  for (int i = 0; i < n; i++) { x[i] = i; y[i] = 1; }
  float s = 2.0f;
  OK(cudaMemcpyToSymbol(scale, &s, sizeof s));
  float *dy; OK(cudaMalloc(&dy, n * sizeof(float)));
  OK(cudaMemcpy(dy, y, n * sizeof(float), cudaMemcpyHostToDevice));
  saxpy<<<(n + 255) / 256, 256>>>(n, 3.0f, x, dy);
  OK(cudaGetLastError());
  OK(cudaMemcpy(y, dy, n * sizeof(float), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; i += 101) CHECK(y[i] == 6.0f * i + 1);

  // Module variables.
  count<<<40, 256>>>(n);
  OK(cudaDeviceSynchronize());
  int c = 0; OK(cudaMemcpyFromSymbol(&c, counter, sizeof c));
  CHECK(c == n);
  void *addr; OK(cudaGetSymbolAddress(&addr, counter));
  size_t sz; OK(cudaGetSymbolSize(&sz, counter)); CHECK(sz == sizeof(int));

  // printf appears at synchronization, in order.
  hello<<<2, 32>>>(7);
  OK(cudaDeviceSynchronize());
  fflush(stdout);

  // Pipeline: two streams, chunks copied in, computed, copied out; events order them.
  cudaStream_t st[2]; cudaEvent_t done[2];
  for (int k = 0; k < 2; k++) { OK(cudaStreamCreate(&st[k])); OK(cudaEventCreate(&done[k])); }
  const int chunk = n / 2;
  for (int i = 0; i < n; i++) y[i] = 1;
  for (int k = 0; k < 2; k++) {
    OK(cudaMemcpyAsync(dy + k * chunk, y + k * chunk, chunk * sizeof(float), cudaMemcpyHostToDevice, st[k]));
    saxpy<<<(chunk + 127) / 128, 128, 0, st[k]>>>(chunk, 1.0f, x + k * chunk, dy + k * chunk);
    OK(cudaMemcpyAsync(y + k * chunk, dy + k * chunk, chunk * sizeof(float), cudaMemcpyDeviceToHost, st[k]));
    OK(cudaEventRecord(done[k], st[k]));
  }
  OK(cudaStreamWaitEvent(st[0], done[1], 0));
  OK(cudaStreamSynchronize(st[0]));
  for (int i = 0; i < n; i += 97) CHECK(y[i] == 2.0f * i + 1);

  // The public launch entry points (what CUDA 12 headers and libraries call).
  for (int i = 0; i < n; i++) y[i] = 1;
  OK(cudaMemcpy(dy, y, n * sizeof(float), cudaMemcpyHostToDevice));
  {
    int nn = n; float a = 1.0f; float *px = x, *py = dy;
    void *args[] = {&nn, &a, &px, &py};
    OK(cudaLaunchKernel((const void *)saxpy, dim3((n + 63) / 64), dim3(64), args, 0, 0));
    OK(cudaLaunchCooperativeKernel((const void *)saxpy, dim3((n + 63) / 64), dim3(64), args, 0, 0));
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((n + 127) / 128); cfg.blockDim = dim3(128);
    OK(cudaLaunchKernelExC(&cfg, (const void *)saxpy, args));
    OK(cudaMemcpy(y, dy, n * sizeof(float), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i += 89) CHECK(y[i] == 3 * 2.0f * i + 1);
  }

  // Texture objects over linear and pitched memory.
  {
    float src[64], got[64];
    for (int i = 0; i < 64; i++) src[i] = i * 1.5f;
    float *lin; OK(cudaMalloc(&lin, sizeof src));
    OK(cudaMemcpy(lin, src, sizeof src, cudaMemcpyHostToDevice));
    cudaResourceDesc r = {};
    r.resType = cudaResourceTypeLinear; r.res.linear.devPtr = lin;
    r.res.linear.desc = cudaCreateChannelDesc<float>(); r.res.linear.sizeInBytes = sizeof src;
    cudaTextureDesc td = {}; td.readMode = cudaReadModeElementType;
    cudaTextureObject_t t1; OK(cudaCreateTextureObject(&t1, &r, &td, nullptr));
    fetch1d<<<1, 64>>>(t1, dy, 64);
    OK(cudaMemcpy(got, dy, sizeof got, cudaMemcpyDeviceToHost));
    for (int i = 0; i < 64; i++) CHECK(got[i] == 2 * src[i]);
    size_t tp; float *p2; OK(cudaMallocPitch((void **)&p2, &tp, 8 * sizeof(float), 8));
    OK(cudaMemcpy2D(p2, tp, src, 8 * sizeof(float), 8 * sizeof(float), 8, cudaMemcpyHostToDevice));
    cudaResourceDesc r2 = {};
    r2.resType = cudaResourceTypePitch2D; r2.res.pitch2D.devPtr = p2;
    r2.res.pitch2D.desc = cudaCreateChannelDesc<float>();
    r2.res.pitch2D.width = 8; r2.res.pitch2D.height = 8; r2.res.pitch2D.pitchInBytes = tp;
    cudaTextureObject_t t2; OK(cudaCreateTextureObject(&t2, &r2, &td, nullptr));
    fetch2d<<<1, dim3(8, 8)>>>(t2, dy, 8, 8);
    OK(cudaMemcpy(got, dy, sizeof got, cudaMemcpyDeviceToHost));
    for (int i = 0; i < 64; i++) CHECK(got[i] == src[i]);
    // The same through a CUDA array.
    cudaChannelFormatDesc cd = cudaCreateChannelDesc<float>();
    cudaArray_t arr; OK(cudaMallocArray(&arr, &cd, 8, 8));
    OK(cudaMemcpy2DToArray(arr, 0, 0, src, 8 * sizeof(float), 8 * sizeof(float), 8, cudaMemcpyHostToDevice));
    cudaResourceDesc r3 = {};
    r3.resType = cudaResourceTypeArray; r3.res.array.array = arr;
    cudaTextureObject_t t3; OK(cudaCreateTextureObject(&t3, &r3, &td, nullptr));
    fetch2d<<<1, dim3(8, 8)>>>(t3, dy, 8, 8);
    OK(cudaMemcpy(got, dy, sizeof got, cudaMemcpyDeviceToHost));
    for (int i = 0; i < 64; i++) CHECK(got[i] == src[i]);
    memset(got, 0, sizeof got);
    OK(cudaMemcpy2DFromArray(got, 8 * sizeof(float), arr, 0, 0, 8 * sizeof(float), 8, cudaMemcpyDeviceToHost));
    for (int i = 0; i < 64; i++) CHECK(got[i] == src[i]);
    OK(cudaDestroyTextureObject(t3)); OK(cudaFreeArray(arr));
    OK(cudaDestroyTextureObject(t1)); OK(cudaDestroyTextureObject(t2));
    OK(cudaFree(lin)); OK(cudaFree(p2));
  }

  // Attributes and occupancy.
  cudaFuncAttributes fa; OK(cudaFuncGetAttributes(&fa, saxpy)); CHECK(fa.maxThreadsPerBlock >= 256);
  int blocks = 0; OK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, saxpy, 256, 0)); CHECK(blocks > 0);

  // Launch errors are reported at the launch, and are not sticky (CUDA 13: invalid value).
  saxpy<<<1, 2048>>>(n, 1.0f, x, dy);
  CHECK(cudaGetLastError() == cudaErrorInvalidValue);
  saxpy<<<1, 1, 1 << 20>>>(n, 1.0f, x, dy);
  CHECK(cudaGetLastError() != cudaSuccess);
  OK(cudaDeviceSynchronize());

  // An illegal address is sticky: every later call reports it.
  poke<<<1, 1>>>((int *)0x10);
  CHECK(cudaDeviceSynchronize() == cudaErrorIllegalAddress);
  CHECK(cudaMemcpy(y, dy, 4, cudaMemcpyDeviceToHost) == cudaErrorIllegalAddress);
  CHECK(cudaGetLastError() == cudaErrorIllegalAddress);

  if (failures) { printf("kernels: %d failures\n", failures); return 1; }
  printf("kernels: OK\n");
  return 0;
}
