/* Link-time stand-in for NVIDIA's libcuda.so (SONAME libcuda.so.1, as the real one): the
 * test program links against it as programs link against NVIDIA's, and under `crum run` gets
 * crum's libcuda.so.1 at run time. Never run. */
#define STUB(name) int name() { return 999; }
STUB(cuInit)
STUB(cuDeviceGet)
STUB(cuCtxCreate_v2)
STUB(cuCtxSynchronize)
STUB(cuModuleLoadData)
STUB(cuModuleGetFunction)
STUB(cuMemAlloc_v2)
STUB(cuMemsetD32_v2)
STUB(cuLaunchKernel)
STUB(cuMemcpyDtoH_v2)
STUB(cuMemFree_v2)
STUB(cuGetErrorName)
