// The driver API for the corpus programs that use it as JIT loaders and Python packages do:
// libcuda.so.1 opened with dlopen (under crum run, crum's), each function found by the name
// cuda.h gives it (cuMemcpy2D is cuMemcpy2D_v2 there). A program lists the functions it
// uses as an X-macro, `#define FUNCS(X) X(cuMemMap) X(cuMemCreate)`, then `FUNCS(DRIVER)`
// declares a pointer `p_cuMemMap` with cuda.h's type for each and `FUNCS(LOAD)` (in main)
// fills them; `DRV(call)` exits with FAIL and the error's name when a call does not succeed.
// `drv_start` does what every program does first: cuInit, device 0, its primary context
// current, and a module loaded from PTX text.
#pragma once
#include "common.h"
#include <cuda.h>
#include <cstring>
#include <dlfcn.h>

#define DRV_STR_(x) #x
#define DRV_STR(x) DRV_STR_(x)
#define DRIVER(f) static decltype(&f) p_##f;
#define LOAD(f) p_##f = (decltype(&f))drv_sym(DRV_STR(f));

static void *drv_lib;
static decltype(&cuGetErrorName) p_errname;

static void *drv_sym(const char *name) {
    if (!drv_lib) {
        drv_lib = dlopen("libcuda.so.1", RTLD_NOW);
        if (!drv_lib) { printf("FAIL dlopen libcuda.so.1: %s\n", dlerror()); exit(1); }
        p_errname = (decltype(&cuGetErrorName))dlsym(drv_lib, "cuGetErrorName");
    }
    void *p = dlsym(drv_lib, name);
    if (!p) { printf("FAIL dlsym %s: %s\n", name, dlerror()); exit(1); }
    return p;
}

#define DRV(x) do { CUresult r_ = (x); if (r_ != CUDA_SUCCESS) { const char *n_ = "?"; p_errname(r_, &n_); \
    printf("FAIL %s:%d %s -> %d %s\n", __FILE__, __LINE__, #x, (int)r_, n_); exit(1); } } while (0)

// The functions of drv_start.
#define START_FUNCS(X) X(cuInit) X(cuDeviceGet) X(cuDevicePrimaryCtxRetain) X(cuCtxSetCurrent) \
    X(cuModuleLoadData) X(cuModuleGetFunction)
START_FUNCS(DRIVER)

// cuInit, device 0 into `dev`, its primary context current (into `primary`), and kernel `name`
// of a module loaded from `ptx` (a copy, freed before the launch: crum keeps the image).
static CUfunction drv_start(CUdevice *dev, CUcontext *primary, const char *ptx, const char *name) {
    START_FUNCS(LOAD)
    DRV(p_cuInit(0));
    DRV(p_cuDeviceGet(dev, 0));
    DRV(p_cuDevicePrimaryCtxRetain(primary, *dev));
    DRV(p_cuCtxSetCurrent(*primary));
    char *text = strdup(ptx);
    CUmodule mod;
    DRV(p_cuModuleLoadData(&mod, text));
    free(text);
    CUfunction f;
    DRV(p_cuModuleGetFunction(&f, mod, name));
    return f;
}
