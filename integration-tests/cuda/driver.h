// The driver API for the corpus programs that use it as JIT loaders and Python packages do:
// libcuda.so.1 opened with dlopen (under crum run, crum's), each function found by the name
// cuda.h gives it (cuMemcpy2D is cuMemcpy2D_v2 there). `DRIVER(cuMemMap)` declares the
// pointer `p_cuMemMap` with cuda.h's type; `LOAD(cuMemMap)` fills it; `DRV(call)` exits
// with FAIL and the error's name when a call does not succeed.
#pragma once
#include "common.h"
#include <cuda.h>
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
