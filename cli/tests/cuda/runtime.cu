// Smoke test of the runtime API through crum (no kernels): memory of every kind, copies
// (sync, async, 2-D, default direction), streams, events, host callbacks, several host
// threads with their own streams, and error codes. Prints "runtime: OK" on success.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <pthread.h>
#include <cuda_runtime.h>

static int failures = 0;
#define CHECK(cond) do { if (!(cond)) { printf("FAIL line %d: %s\n", __LINE__, #cond); failures++; } } while (0)
#define OK(x) CHECK((x) == cudaSuccess)

static volatile int callback_ran = 0;
static void CUDART_CB host_fn(void *p) { *(int *)p += 1; callback_ran = 1; }
static void CUDART_CB stream_cb(cudaStream_t, cudaError_t status, void *p) { if (status == cudaSuccess) *(int *)p += 10; }

static void *worker(void *arg) {
  long id = (long)arg;
  cudaStream_t s; OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const int n = 1 << 16;
  int *h; OK(cudaMallocHost(&h, n * sizeof(int)));
  int *d; OK(cudaMalloc(&d, n * sizeof(int)));
  for (int round = 0; round < 20; round++) {
    for (int i = 0; i < n; i++) h[i] = (int)(id * 1000 + round + i);
    OK(cudaMemcpyAsync(d, h, n * sizeof(int), cudaMemcpyHostToDevice, s));
    OK(cudaMemcpyAsync(h, d, n * sizeof(int), cudaMemcpyDeviceToHost, s));
    OK(cudaStreamSynchronize(s));
    for (int i = 0; i < n; i += 997) CHECK(h[i] == (int)(id * 1000 + round + i));
  }
  OK(cudaFree(d)); OK(cudaFreeHost(h)); OK(cudaStreamDestroy(s));
  return nullptr;
}

int main() {
  int count = 0; OK(cudaGetDeviceCount(&count)); CHECK(count == 1);
  cudaDeviceProp p; OK(cudaGetDeviceProperties(&p, 0));
  CHECK(p.major == 8 && p.maxThreadsPerBlock == 1024 && p.warpSize == 32 && p.unifiedAddressing == 1);
  int v = 0; OK(cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, 0)); CHECK(v == p.multiProcessorCount);
  int rt = 0; OK(cudaRuntimeGetVersion(&rt)); CHECK(rt >= 13000);
  size_t fr = 0, tot = 0; OK(cudaMemGetInfo(&fr, &tot)); CHECK(fr > 0 && fr <= tot);

  // 1-D copies, memset, default direction.
  const int n = 1 << 20;
  float *h = (float *)malloc(n * 4), *back = (float *)malloc(n * 4);
  for (int i = 0; i < n; i++) h[i] = i * 0.25f;
  float *d; OK(cudaMalloc(&d, n * 4));
  OK(cudaMemcpy(d, h, n * 4, cudaMemcpyHostToDevice));
  OK(cudaMemcpy(back, d, n * 4, cudaMemcpyDefault));
  CHECK(memcmp(h, back, n * 4) == 0);
  OK(cudaMemset(d, 0, n * 4));
  OK(cudaMemcpy(back, d, 64, cudaMemcpyDeviceToHost)); CHECK(back[7] == 0.0f);
  float *d2; OK(cudaMalloc(&d2, n * 4));
  OK(cudaMemcpy(d, h, n * 4, cudaMemcpyHostToDevice));
  OK(cudaMemcpy(d2, d, n * 4, cudaMemcpyDeviceToDevice));
  OK(cudaMemcpyPeer(d, 0, d2, 0, n * 4));
  OK(cudaMemcpy(back, d, n * 4, cudaMemcpyDeviceToHost)); CHECK(memcmp(h, back, n * 4) == 0);

  // 2-D: pitched allocation, copy a 100x37 float block in and out.
  size_t pitch = 0; float *dp; OK(cudaMallocPitch((void **)&dp, &pitch, 100 * 4, 37)); CHECK(pitch >= 400);
  OK(cudaMemset2D(dp, pitch, 0xff, 100 * 4, 37));
  OK(cudaMemcpy2D(dp, pitch, h, 100 * 4, 100 * 4, 37, cudaMemcpyHostToDevice));
  memset(back, 0, n * 4);
  OK(cudaMemcpy2D(back, 100 * 4, dp, pitch, 100 * 4, 37, cudaMemcpyDeviceToHost));
  CHECK(memcmp(h, back, 100 * 4 * 37) == 0);

  // 3-D: pitched allocation, memset, copy a 16x4x3 float volume in and out.
  {
    const int W = 16, H = 4, D = 3;
    cudaExtent ext = make_cudaExtent(W * sizeof(float), H, D);
    cudaPitchedPtr vol; OK(cudaMalloc3D(&vol, ext)); CHECK(vol.pitch >= W * sizeof(float));
    OK(cudaMemset3D(vol, 0, ext));
    cudaMemcpy3DParms in = {};
    in.srcPtr = make_cudaPitchedPtr(h, W * sizeof(float), W, H); in.dstPtr = vol; in.extent = ext;
    in.kind = cudaMemcpyHostToDevice;
    OK(cudaMemcpy3D(&in));
    memset(back, 0, W * H * D * sizeof(float));
    cudaMemcpy3DParms outp = {};
    outp.srcPtr = vol; outp.dstPtr = make_cudaPitchedPtr(back, W * sizeof(float), W, H); outp.extent = ext;
    outp.kind = cudaMemcpyDeviceToHost;
    OK(cudaMemcpy3D(&outp));
    CHECK(memcmp(h, back, W * H * D * sizeof(float)) == 0);
    OK(cudaFree(vol.ptr));
  }

  // Managed and pinned memory are visible on the host directly.
  int *m; OK(cudaMallocManaged(&m, 4096)); m[0] = 41;
  int *pin; OK(cudaHostAlloc(&pin, 4096, cudaHostAllocDefault)); pin[0] = 1;
  OK(cudaMemcpy(d, m, 4, cudaMemcpyDefault)); OK(cudaMemcpy(pin, d, 4, cudaMemcpyDefault)); CHECK(pin[0] == 41);
  cudaPointerAttributes a;
  OK(cudaPointerGetAttributes(&a, m)); CHECK(a.type == cudaMemoryTypeManaged);
  OK(cudaPointerGetAttributes(&a, d)); CHECK(a.type == cudaMemoryTypeDevice);
  OK(cudaPointerGetAttributes(&a, pin)); CHECK(a.type == cudaMemoryTypeHost);
  OK(cudaPointerGetAttributes(&a, h)); CHECK(a.type == cudaMemoryTypeUnregistered);
  void *dev_of_pin; OK(cudaHostGetDevicePointer(&dev_of_pin, pin, 0)); CHECK(dev_of_pin == pin);
  OK(cudaHostRegister(back, n * 4, cudaHostRegisterDefault)); OK(cudaHostUnregister(back));

  // Streams, events, callbacks.
  cudaStream_t s1, s2; OK(cudaStreamCreate(&s1)); OK(cudaStreamCreateWithPriority(&s2, cudaStreamNonBlocking, -1));
  int prio = 0; OK(cudaStreamGetPriority(s2, &prio)); CHECK(prio == -1);
  unsigned flags = 0; OK(cudaStreamGetFlags(s2, &flags)); CHECK(flags == cudaStreamNonBlocking);
  cudaEvent_t e1, e2; OK(cudaEventCreate(&e1)); OK(cudaEventCreate(&e2));
  int counter = 0;
  OK(cudaEventRecord(e1, s1));
  OK(cudaMemcpyAsync(d, pin, 4096, cudaMemcpyHostToDevice, s1));
  OK(cudaLaunchHostFunc(s1, host_fn, &counter));
  OK(cudaStreamAddCallback(s1, stream_cb, &counter, 0));
  OK(cudaEventRecord(e2, s1));
  OK(cudaStreamWaitEvent(s2, e2, 0));
  OK(cudaStreamSynchronize(s2));
  OK(cudaEventSynchronize(e2));
  CHECK(counter == 11 && callback_ran);
  float ms = -1; OK(cudaEventElapsedTime(&ms, e1, e2)); CHECK(ms >= 0);
  OK(cudaEventQuery(e2)); OK(cudaStreamQuery(s1));
  OK(cudaStreamSynchronize(cudaStreamPerThread));
  OK(cudaDeviceSynchronize());

  // Several host threads, each with its own stream.
  pthread_t t[4];
  for (long i = 0; i < 4; i++) pthread_create(&t[i], nullptr, worker, (void *)i);
  for (int i = 0; i < 4; i++) pthread_join(t[i], nullptr);

  // Errors: codes, names, strings; non-sticky errors clear on cudaGetLastError.
  CHECK(cudaFree((void *)0x1234) == cudaErrorInvalidValue);
  CHECK(cudaGetLastError() == cudaErrorInvalidValue);
  CHECK(cudaGetLastError() == cudaSuccess);
  void *huge; CHECK(cudaMalloc(&huge, 1ull << 45) == cudaErrorMemoryAllocation);
  CHECK(cudaPeekAtLastError() == cudaErrorMemoryAllocation);
  CHECK(cudaGetLastError() == cudaErrorMemoryAllocation);
  CHECK(cudaMemcpy(d, h, (n + 1) * 4, cudaMemcpyHostToDevice) == cudaErrorInvalidValue);
  cudaGetLastError();
  CHECK(strcmp(cudaGetErrorName(cudaErrorIllegalAddress), "cudaErrorIllegalAddress") == 0);
  CHECK(strcmp(cudaGetErrorString(cudaErrorInvalidValue), "invalid argument") == 0);
  CHECK(cudaSetDevice(1) == cudaErrorInvalidDevice);
  cudaGetLastError();
  cudaGraph_t g; CHECK(cudaGraphCreate(&g, 0) == cudaSuccess);
  CHECK(cudaGraphDestroy(g) == cudaSuccess);
  CHECK(cudaStreamSynchronize((cudaStream_t)0x999999) == cudaErrorInvalidResourceHandle);
  cudaGetLastError();

  OK(cudaStreamDestroy(s1)); OK(cudaStreamDestroy(s2));
  OK(cudaEventDestroy(e1)); OK(cudaEventDestroy(e2));
  OK(cudaFree(d)); OK(cudaFree(d2)); OK(cudaFree(dp)); OK(cudaFree(m)); OK(cudaFreeHost(pin));
  if (failures) { printf("runtime: %d failures\n", failures); return 1; }
  printf("runtime: OK\n");
  return 0;
}
