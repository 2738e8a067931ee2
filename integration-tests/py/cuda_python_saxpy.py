"""NVIDIA's cuda-python driver bindings and NVRTC, used as their vectorAdd example does: a
kernel compiled at run time to PTX, loaded with cuModuleLoadData, launched with
cuLaunchKernel STEPS times (default 20), y = 2x + y each time; after each step the result is
copied back and checked against numpy, one line per step, 50 ms apart."""
import sys
import time

import numpy as np
from cuda.bindings import driver, nvrtc


def ck(r):
    err = r[0]
    if isinstance(err, driver.CUresult) and err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"CUDA error {err}")
    if isinstance(err, nvrtc.nvrtcResult) and err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise RuntimeError(f"NVRTC error {err}")
    return r[1:] if len(r) > 2 else (r[1] if len(r) == 2 else None)


SRC = b"""extern "C" __global__ void saxpy(float a, const float *x, float *y, unsigned n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}"""

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 20
prog = ck(nvrtc.nvrtcCreateProgram(SRC, b"saxpy.cu", 0, [], []))
ck(nvrtc.nvrtcCompileProgram(prog, 1, [b"--gpu-architecture=compute_80"]))
ptx = b" " * ck(nvrtc.nvrtcGetPTXSize(prog))
ck(nvrtc.nvrtcGetPTX(prog, ptx))
ck(driver.cuInit(0))
dev = ck(driver.cuDeviceGet(0))
ctx = ck(driver.cuCtxCreate(None, 0, dev))
mod = ck(driver.cuModuleLoadData(ptx))
fn = ck(driver.cuModuleGetFunction(mod, b"saxpy"))
n = 1 << 16
x = np.arange(n, dtype=np.float32)
y = np.ones(n, dtype=np.float32)
dx = ck(driver.cuMemAlloc(n * 4))
dy = ck(driver.cuMemAlloc(n * 4))
stream = ck(driver.cuStreamCreate(0))
ck(driver.cuMemcpyHtoDAsync(dx, x.ctypes.data, n * 4, stream))
ck(driver.cuMemcpyHtoDAsync(dy, y.ctypes.data, n * 4, stream))
a = np.array([2.0], dtype=np.float32)
nn = np.array([n], dtype=np.uint32)
pdx = np.array([int(dx)], dtype=np.uint64)
pdy = np.array([int(dy)], dtype=np.uint64)
args = np.array([arg.ctypes.data for arg in [a, pdx, pdy, nn]], dtype=np.uint64)
want = y.copy()
for step in range(steps):
    ck(driver.cuLaunchKernel(fn, n // 256, 1, 1, 256, 1, 1, 0, stream, args.ctypes.data, 0))
    want = 2.0 * x + want
    out = np.zeros(n, dtype=np.float32)
    ck(driver.cuMemcpyDtoHAsync(out.ctypes.data, dy, n * 4, stream))
    ck(driver.cuStreamSynchronize(stream))
    print("step", step, "ok" if np.allclose(out, want) else "WRONG", flush=True)
    time.sleep(0.05)
print("PASS", flush=True)
