//! The driver API's face (issue 13, `docs/driver-api.md` § 4.2–4.3): the `cu*` entry points
//! that programs calling the driver themselves use (JIT loaders, NVRTC programs, Python
//! packages that load PTX), exported from the same `libcrum.so` as the runtime so that both
//! faces share one device, one context, the same streams, events, memory and modules. `crum
//! run` puts a `libcuda.so.1` that is this library first on the library path (a program
//! linked with `-lcuda`, or one that `dlopen`s it, gets crum's).
//!
//! - One device; the primary context (`cuDevicePrimaryCtxRetain`, the runtime's) and created
//!   ones (`cuCtxCreate`), current per thread, pushed and popped: `api::context`.
//! - `CUstream`, `CUevent` and `CUdeviceptr` are the runtime's values (CUDA's headers make
//!   them the same types); the calls go through the runtime's implementations.
//! - Modules (`cuModuleLoadData[Ex]`, `cuModuleLoad`) are libraries of `api::library`: crum
//!   keeps the image, so a restart loads it again; `CUfunction` is a kernel handle there, so
//!   `cuLaunchKernel` (with `kernelParams` or `extra`) takes the runtime's launch path.
//! - Results are `CUresult`s (`crum_wire::cuda::driver_result`); the runtime's last error is
//!   not touched by a failing driver call... except where the call goes through a runtime
//!   export, which records it as the runtime would.
//! - `cuGetProcAddress` finds these functions by name (the newest `_vN` this library has);
//!   `cuGetExportTable` answers `CUDA_ERROR_NOT_FOUND` (the tables are private to NVIDIA's
//!   runtime, which never runs under crum).
//!
//! - Memory beyond 1-D (host registration, pools, 2-D/3-D copies, arrays, texture
//!   objects): `api::driver_mem`; virtual memory management (`cuMemCreate`, `cuMemMap`…):
//!   `api::vmm`.
//!
//! - Graphs and stream capture (`cuGraph*`, `cuStreamBeginCapture`…): `api::driver_graph`.
//!   Pointer attributes, advice, prefetches and range attributes: `api::driver_ptr`; the
//!   `_ptsz`/`_ptds` variants: `api::driver_ptsz` (`cuGetProcAddress` gives them for
//!   `CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM`).
//!   Libraries (`cuLibraryLoadData`, `cuLibraryGetKernel`…) are modules too: a `CUlibrary` is
//!   its one `CUmodule`, and a `CUkernel` is the kernel handle a `CUfunction` is, so
//!   `cuLaunchKernel` takes either.
//!
//! Not here: surfaces, mipmapped arrays, IPC, external memory, green contexts: their
//! symbols are absent (a `dlsym` for them fails; `cuGetProcAddress` says not found); the list
//! is in `docs/driver-api.md` § 5.
#![allow(unsafe_code, non_snake_case, clippy::not_unsafe_ptr_arg_deref, clippy::too_many_arguments)]

use std::ffi::{c_char, c_void, CStr};

use crum_wire::cuda;

use super::context::{self, PRIMARY};
use crate::errors::CudaResult;
use crate::ffi::*;

/// `CUDA_ERROR_NOT_INITIALIZED` before `cuInit`.
pub(crate) const NOT_INITIALIZED: u32 = 3;
static INITIALIZED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// A runtime export's result as a `CudaResult`.
pub(crate) fn rt(code: u32) -> CudaResult<()> {
    if code == 0 {
        Ok(())
    } else {
        Err(code)
    }
}

pub(crate) fn device(dev: i32) -> CudaResult<()> {
    if dev == 0 {
        Ok(())
    } else {
        Err(cuda::ERROR_INVALID_DEVICE)
    }
}

/// The entry of a driver call: `CUresult` out, through the checkpoint gate. A kernel handle
/// the runtime does not know (`cudaErrorInvalidDeviceFunction`, which has no `CUresult`) is
/// `CUDA_ERROR_INVALID_HANDLE`, as the driver answers for a `CUfunction` or `CUkernel`.
pub(crate) fn guard(name: &'static str, f: impl FnOnce() -> CudaResult<()>) -> u32 {
    let code = crate::errors::guard_driver(name, f);
    cuda::driver_result(if code == cuda::ERROR_INVALID_DEVICE_FUNCTION { cuda::ERROR_INVALID_RESOURCE_HANDLE } else { code })
}

/// Whether the driver was initialized: by `cuInit`, or by the runtime (which initializes it
/// at its first call, so a program using both faces may skip `cuInit`).
pub(crate) fn initialized() -> bool {
    INITIALIZED.load(std::sync::atomic::Ordering::SeqCst) || crate::client::connected()
}

/// The calls that work before `cuInit`.
pub(crate) const BEFORE_INIT: [&str; 6] =
    ["cuInit", "cuDriverGetVersion", "cuGetErrorName", "cuGetErrorString", "cuGetProcAddress_v2", "cuGetExportTable"];

/// Declare exported driver functions returning `CUresult`; each body returns `CudaResult<()>`
/// (runtime codes, converted by [`guard`]) and runs only after `cuInit`.
macro_rules! driver {
    ($(fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $body:block)*) => {
        $(
            #[no_mangle]
            pub extern "C" fn $name($($arg: $ty),*) -> u32 {
                if !$crate::api::driver::BEFORE_INIT.contains(&stringify!($name)) && !$crate::api::driver::initialized() {
                    return $crate::api::driver::NOT_INITIALIZED;
                }
                $crate::api::driver::guard(stringify!($name), || $body)
            }
        )*
    };
}
pub(crate) use driver;

/// `memset` of `n` elements of `elem` bytes with `value` at `dst` on `stream`.
fn memset(dst: u64, value: u32, elem: u32, n: usize, stream: u64, sync: bool) -> CudaResult<()> {
    let stream = crate::state::resolve_stream(stream, false)?;
    let m = crate::graph::MemsetNode { dst, pitch: n as u64 * elem as u64, value, elem, width: n as u64, height: 1 };
    super::graph::run_memset(&m, stream)?;
    if sync {
        rt(super::stream::cudaStreamSynchronize(stream as *mut c_void))?;
    }
    Ok(())
}

/// `cuModuleGetGlobal`/`cuLibraryGetGlobal` (a `CUlibrary` is its own one `CUmodule`): the
/// variable's address and size, each through its out-pointer when given.
fn global_out(dptr: *mut u64, bytes: *mut usize, module: *mut c_void, name: *const c_char) -> CudaResult<()> {
    let l = super::library::library(module)?;
    let name = cstr(name).ok_or(cuda::ERROR_INVALID_VALUE)?;
    let (addr, size) = super::library::global(l, name)?;
    if !dptr.is_null() {
        out(dptr, addr)?;
    }
    if !bytes.is_null() {
        out(bytes, size as usize)?;
    }
    Ok(())
}

/// The handle of this library (libcrum.so, by its SONAME) for `cuGetProcAddress`.
fn own_handle() -> *mut c_void {
    // SAFETY: NUL-terminated name; RTLD_NOLOAD never loads anything.
    unsafe { libc::dlopen(c"libcudart.so.13".as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) }
}

driver! {
    fn cuInit(flags: u32) {
        if flags != 0 {
            return Err(cuda::ERROR_INVALID_VALUE);
        }
        crate::client::ensure()?;
        INITIALIZED.store(true, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }
    fn cuDriverGetVersion(v: *mut i32) {
        rt(super::device::cudaDriverGetVersion(v))
    }
    fn cuDeviceGetCount(n: *mut i32) {
        out(n, 1)
    }
    fn cuDeviceGet(dev: *mut i32, ordinal: i32) {
        device(ordinal)?;
        out(dev, 0)
    }
    fn cuDeviceGetName(name: *mut c_char, len: i32, dev: i32) {
        device(dev)?;
        if name.is_null() || len <= 0 {
            return Err(cuda::ERROR_INVALID_VALUE);
        }
        let p = crate::state::props()?;
        let b = p.name.as_bytes();
        let n = b.len().min(len as usize - 1);
        // SAFETY: the caller's buffer holds `len` bytes; `n + 1 <= len`.
        unsafe {
            std::ptr::copy_nonoverlapping(b.as_ptr(), name.cast(), n);
            *name.add(n) = 0;
        }
        Ok(())
    }
    fn cuDeviceTotalMem_v2(bytes: *mut usize, dev: i32) {
        device(dev)?;
        out(bytes, crate::state::props()?.total_mem as usize)
    }
    fn cuDeviceGetAttribute(v: *mut i32, attr: u32, dev: i32) {
        // CU_DEVICE_ATTRIBUTE_* and cudaDevAttr* have the same values.
        rt(super::device::cudaDeviceGetAttribute(v, attr, dev))
    }
    fn cuDevicePrimaryCtxRetain(ctx: *mut usize, dev: i32) {
        device(dev)?;
        out(ctx, PRIMARY)
    }
    fn cuDevicePrimaryCtxRelease_v2(dev: i32) {
        device(dev)
    }
    fn cuDevicePrimaryCtxGetState(dev: i32, flags: *mut u32, active: *mut i32) {
        device(dev)?;
        out(flags, 0)?;
        out(active, crate::client::connected() as i32)
    }
    fn cuDevicePrimaryCtxSetFlags_v2(dev: i32, _flags: u32) {
        device(dev)
    }
    fn cuDevicePrimaryCtxReset_v2(dev: i32) {
        device(dev)?;
        rt(super::device::cudaDeviceReset())
    }
    fn cuCtxCreate_v2(ctx: *mut usize, flags: u32, dev: i32) {
        device(dev)?;
        if ctx.is_null() {
            return Err(cuda::ERROR_INVALID_VALUE);
        }
        out(ctx, context::create(flags))
    }
    fn cuCtxCreate_v4(ctx: *mut usize, params: *const [usize; 3], flags: u32, dev: i32) {
        device(dev)?;
        if ctx.is_null() {
            return Err(cuda::ERROR_INVALID_VALUE);
        }
        if !params.is_null() {
            // CUctxCreateParams: execution affinity and CIG (shared-memory with graphics)
            // parameters; the emulated device has neither.
            let p = read(params)?;
            if p[0] != 0 || p[2] != 0 {
                return Err(crate::errors::unsupported("cuCtxCreate (execution affinity or CIG parameters)"));
            }
        }
        out(ctx, context::create(flags))
    }
    fn cuCtxDestroy_v2(ctx: usize) {
        if ctx == context::PRIMARY {
            // The primary context is released, not destroyed: it leaves this thread's stack.
            context::leave(ctx);
            return Ok(());
        }
        context::destroy(ctx)
    }
    fn cuCtxGetCurrent(ctx: *mut usize) {
        out(ctx, context::current())
    }
    fn cuCtxSetCurrent(ctx: usize) {
        if ctx != 0 {
            context::check(ctx)?;
        }
        context::set_current(ctx);
        Ok(())
    }
    fn cuCtxPushCurrent_v2(ctx: usize) {
        context::check(ctx)?;
        context::push(ctx);
        Ok(())
    }
    fn cuCtxPopCurrent_v2(ctx: *mut usize) {
        let top = context::pop().ok_or(cuda::ERROR_DEVICE_UNINITIALIZED)?;
        if !ctx.is_null() {
            out(ctx, top)?;
        }
        Ok(())
    }
    fn cuCtxGetFlags(flags: *mut u32) {
        let ctx = context::current();
        context::check(ctx)?;
        out(flags, context::flags(ctx))
    }
    fn cuCtxGetId(ctx: usize, id: *mut u64) {
        let ctx = if ctx == 0 { context::current() } else { ctx };
        context::check(ctx)?;
        out(id, context::id(ctx))
    }
    fn cuCtxGetApiVersion(ctx: usize, version: *mut u32) {
        let ctx = if ctx == 0 { context::current() } else { ctx };
        context::check(ctx)?;
        out(version, 13000)
    }
    fn cuCtxGetDevice(dev: *mut i32) {
        out(dev, 0)
    }
    fn cuCtxSynchronize() {
        rt(super::device::cudaDeviceSynchronize())
    }
    fn cuModuleLoadData(module: *mut usize, image: *const c_void) {
        let h = super::library::load_image(super::library::image_at(image as u64)?)?;
        context::module_loaded(h);
        out(module, h)
    }
    fn cuModuleLoadDataEx(module: *mut usize, image: *const c_void, _n: u32, _options: *mut u32, _values: *mut *mut c_void) {
        let h = super::library::load_image(super::library::image_at(image as u64)?)?;
        context::module_loaded(h);
        out(module, h)
    }
    fn cuModuleLoad(module: *mut usize, fname: *const c_char) {
        let path = cstr(fname).ok_or(cuda::ERROR_INVALID_VALUE)?;
        let h = super::library::load_image(super::library::image_of_file(&path)?)?;
        context::module_loaded(h);
        out(module, h)
    }
    fn cuModuleUnload(module: *mut c_void) {
        super::library::unload(module)
    }
    fn cuModuleGetFunction(f: *mut usize, module: *mut c_void, name: *const c_char) {
        let l = super::library::library(module)?;
        let name = cstr(name).ok_or(cuda::ERROR_INVALID_VALUE)?;
        let k = super::library::kernel(l, &name)?;
        context::function_of(k, module as usize);
        out(f, k)
    }
    fn cuModuleGetGlobal_v2(dptr: *mut u64, bytes: *mut usize, module: *mut c_void, name: *const c_char) {
        global_out(dptr, bytes, module, name)
    }
    fn cuLaunchKernel(f: usize, gx: u32, gy: u32, gz: u32, bx: u32, by: u32, bz: u32, shared: u32, stream: *mut c_void, params: *mut *mut c_void, extra: *mut *mut c_void) {
        context::check_launch(f)?;
        let (grid, block) = (Dim3 { x: gx, y: gy, z: gz }, Dim3 { x: bx, y: by, z: bz });
        super::launch::launch_extra(f, grid, block, params, extra, shared as usize, stream as u64, false, false)
    }
    fn cuLaunchCooperativeKernel(f: usize, gx: u32, gy: u32, gz: u32, bx: u32, by: u32, bz: u32, shared: u32, stream: *mut c_void, params: *mut *mut c_void) {
        context::check_launch(f)?;
        let (grid, block) = (Dim3 { x: gx, y: gy, z: gz }, Dim3 { x: bx, y: by, z: bz });
        super::launch::launch_extra(f, grid, block, params, std::ptr::null_mut(), shared as usize, stream as u64, false, true)
    }
    fn cuFuncGetAttribute(v: *mut i32, attr: u32, f: usize) {
        out(v, func_attribute(attr, f)?)
    }
    fn cuFuncSetAttribute(f: usize, attr: u32, value: i32) {
        // The settable CU_FUNC_ATTRIBUTE_*s have cudaFuncAttribute's values.
        rt(super::launch::cudaFuncSetAttribute(f as *const c_void, attr, value))
    }
    fn cuFuncSetCacheConfig(f: usize, config: u32) {
        rt(super::launch::cudaFuncSetCacheConfig(f as *const c_void, config))
    }
    fn cuFuncGetName(name: *mut *const c_char, f: usize) {
        rt(super::launch::cudaFuncGetName(name, f as *const c_void))
    }
    fn cuFuncGetParamInfo(f: usize, index: usize, offset: *mut usize, size: *mut usize) {
        rt(super::launch::cudaFuncGetParamInfo(f as *const c_void, index, offset, size))
    }
    fn cuKernelSetAttribute(attr: u32, value: i32, kernel: usize, dev: i32) {
        rt(super::launch::cudaKernelSetAttributeForDevice(kernel as *const c_void, attr, value, dev))
    }
    fn cuKernelSetCacheConfig(kernel: usize, config: u32, dev: i32) {
        device(dev)?;
        rt(super::launch::cudaFuncSetCacheConfig(kernel as *const c_void, config))
    }
    fn cuKernelGetName(name: *mut *const c_char, kernel: usize) {
        rt(super::launch::cudaFuncGetName(name, kernel as *const c_void))
    }
    fn cuKernelGetParamInfo(kernel: usize, index: usize, offset: *mut usize, size: *mut usize) {
        rt(super::launch::cudaFuncGetParamInfo(kernel as *const c_void, index, offset, size))
    }
    fn cuLaunchKernelEx(config: *const u8, f: usize, params: *mut *mut c_void, extra: *mut *mut c_void) {
        context::check_launch(f)?;
        // CUlaunchConfig is cudaLaunchConfig_t but for sharedMemBytes, 4 bytes where the
        // runtime has 8; CUlaunchAttribute is cudaLaunchAttribute.
        let mut cfg = [0u8; crate::abi_gen::CUDALAUNCHCONFIG_T_SIZE];
        cfg.copy_from_slice(crate::ffi::bytes(config, crate::abi_gen::CUDALAUNCHCONFIG_T_SIZE)?);
        let shared: u32 = field(config, crate::abi_gen::CUDALAUNCHCONFIG_T_DYNAMICSMEMBYTES)?;
        set_field(cfg.as_mut_ptr(), crate::abi_gen::CUDALAUNCHCONFIG_T_DYNAMICSMEMBYTES, shared as usize);
        if extra.is_null() {
            return rt(super::launch::cudaLaunchKernelExC(cfg.as_ptr(), f as *const c_void, params));
        }
        if field::<u32>(config, crate::abi_gen::CUDALAUNCHCONFIG_T_NUMATTRS)? != 0 {
            return Err(crate::errors::unsupported("cuLaunchKernelEx (extra with launch attributes)"));
        }
        let grid: Dim3 = field(config, crate::abi_gen::CUDALAUNCHCONFIG_T_GRIDDIM)?;
        let block: Dim3 = field(config, crate::abi_gen::CUDALAUNCHCONFIG_T_BLOCKDIM)?;
        let stream: u64 = field(config, crate::abi_gen::CUDALAUNCHCONFIG_T_STREAM)?;
        super::launch::launch_extra(f, grid, block, params, extra, shared as usize, stream, false, false)
    }
    fn cuLibraryLoadData(lib: *mut usize, code: *const c_void, _jit_options: *mut u32, _jit_values: *mut *mut c_void, _num_jit: u32, _lib_options: *mut u32, _lib_values: *mut *mut c_void, _num_lib: u32) {
        if lib.is_null() {
            return Err(cuda::ERROR_INVALID_VALUE);
        }
        let h = super::library::load_image(super::library::image_at(code as u64)?)?;
        context::module_loaded(h);
        out(lib, h)
    }
    fn cuLibraryLoadFromFile(lib: *mut usize, file: *const c_char, _jit_options: *mut u32, _jit_values: *mut *mut c_void, _num_jit: u32, _lib_options: *mut u32, _lib_values: *mut *mut c_void, _num_lib: u32) {
        if lib.is_null() {
            return Err(cuda::ERROR_INVALID_VALUE);
        }
        let path = cstr(file).ok_or(cuda::ERROR_INVALID_VALUE)?;
        let h = super::library::load_image(super::library::image_of_file(&path)?)?;
        context::module_loaded(h);
        out(lib, h)
    }
    fn cuLibraryGetKernelCount(count: *mut u32, lib: *mut c_void) {
        rt(super::library::cudaLibraryGetKernelCount(count, lib))
    }
    fn cuLibraryEnumerateKernels(kernels: *mut usize, num: u32, lib: *mut c_void) {
        rt(super::library::cudaLibraryEnumerateKernels(kernels.cast(), num, lib))?;
        let mut count = 0u32;
        rt(super::library::cudaLibraryGetKernelCount(&mut count, lib))?;
        // The kernels written belong to the library's context, as cuLibraryGetKernel's.
        for i in 0..num.min(count) as usize {
            context::function_of(read(kernels.wrapping_add(i))?, lib as usize);
        }
        Ok(())
    }
    fn cuLibraryGetManaged(dptr: *mut u64, bytes: *mut usize, lib: *mut c_void, name: *const c_char) {
        rt(super::library::cudaLibraryGetManaged(dptr.cast(), bytes, lib, name))
    }
    fn cuLibraryUnload(lib: *mut c_void) {
        super::library::unload(lib)
    }
    fn cuLibraryGetModule(module: *mut usize, lib: *mut c_void) {
        // A library is its one module here.
        super::library::library(lib)?;
        out(module, lib as usize)
    }
    fn cuLibraryGetKernel(kernel: *mut usize, lib: *mut c_void, name: *const c_char) {
        if kernel.is_null() {
            return Err(cuda::ERROR_INVALID_VALUE);
        }
        let l = super::library::library(lib)?;
        let name = cstr(name).ok_or(cuda::ERROR_INVALID_VALUE)?;
        let k = super::library::kernel(l, &name)?;
        context::function_of(k, lib as usize);
        out(kernel, k)
    }
    fn cuKernelGetFunction(f: *mut usize, kernel: usize) {
        // A CUkernel is a kernel handle, as a CUfunction is: the same value serves as both.
        crate::state::function(kernel)?;
        out(f, kernel)
    }
    fn cuKernelGetAttribute(v: *mut i32, attr: u32, kernel: usize, dev: i32) {
        device(dev)?;
        out(v, func_attribute(attr, kernel)?)
    }
    fn cuLibraryGetGlobal(dptr: *mut u64, bytes: *mut usize, lib: *mut c_void, name: *const c_char) {
        global_out(dptr, bytes, lib, name)
    }
    fn cuMemAlloc_v2(dptr: *mut u64, bytes: usize) {
        rt(super::memory::cudaMalloc(dptr.cast(), bytes))?;
        context::own(|o| o.device.push(read(dptr).unwrap_or(0)));
        Ok(())
    }
    fn cuMemAllocPitch_v2(dptr: *mut u64, pitch: *mut usize, width: usize, height: usize, elem: u32) {
        if ![4, 8, 16].contains(&elem) {
            return Err(cuda::ERROR_INVALID_VALUE);
        }
        rt(super::memory::cudaMallocPitch(dptr.cast(), pitch, width, height))?;
        context::own(|o| o.device.push(read(dptr).unwrap_or(0)));
        Ok(())
    }
    fn cuMemAllocManaged(dptr: *mut u64, bytes: usize, flags: u32) {
        rt(super::memory::cudaMallocManaged(dptr.cast(), bytes, flags))?;
        context::own(|o| o.device.push(read(dptr).unwrap_or(0)));
        Ok(())
    }
    fn cuMemFree_v2(dptr: u64) {
        if super::vmm::is_mapped(dptr) {
            // VMM mappings are unmapped (cuMemUnmap), never freed.
            return Err(cuda::ERROR_INVALID_VALUE);
        }
        rt(super::memory::cudaFree(dptr as *mut c_void))?;
        context::disown(|o| &mut o.device, dptr);
        Ok(())
    }
    fn cuMemAllocHost_v2(p: *mut *mut c_void, bytes: usize) {
        rt(super::memory::cudaMallocHost(p, bytes))?;
        context::own(|o| o.host.push(read(p).map_or(0, |p| p as u64)));
        Ok(())
    }
    fn cuMemHostAlloc(p: *mut *mut c_void, bytes: usize, flags: u32) {
        rt(super::memory::cudaHostAlloc(p, bytes, flags))?;
        context::own(|o| o.host.push(read(p).map_or(0, |p| p as u64)));
        Ok(())
    }
    fn cuMemFreeHost(p: *mut c_void) {
        rt(super::memory::cudaFreeHost(p))?;
        context::disown(|o| &mut o.host, p as u64);
        Ok(())
    }
    fn cuMemHostGetDevicePointer_v2(dptr: *mut u64, p: *mut c_void, flags: u32) {
        rt(super::memory::cudaHostGetDevicePointer(dptr.cast(), p, flags))
    }
    fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) {
        rt(super::memory::cudaMemGetInfo(free, total))
    }
    fn cuMemcpy(dst: u64, src: u64, n: usize) {
        rt(super::memory::cudaMemcpy(dst as *mut c_void, src as *const c_void, n, 4))
    }
    fn cuMemcpyAsync(dst: u64, src: u64, n: usize, stream: *mut c_void) {
        rt(super::memory::cudaMemcpyAsync(dst as *mut c_void, src as *const c_void, n, 4, stream))
    }
    fn cuMemcpyHtoD_v2(dst: u64, src: *const c_void, n: usize) {
        rt(super::memory::cudaMemcpy(dst as *mut c_void, src, n, 1))
    }
    fn cuMemcpyDtoH_v2(dst: *mut c_void, src: u64, n: usize) {
        rt(super::memory::cudaMemcpy(dst, src as *const c_void, n, 2))
    }
    fn cuMemcpyDtoD_v2(dst: u64, src: u64, n: usize) {
        rt(super::memory::cudaMemcpy(dst as *mut c_void, src as *const c_void, n, 3))
    }
    fn cuMemcpyHtoDAsync_v2(dst: u64, src: *const c_void, n: usize, stream: *mut c_void) {
        rt(super::memory::cudaMemcpyAsync(dst as *mut c_void, src, n, 1, stream))
    }
    fn cuMemcpyDtoHAsync_v2(dst: *mut c_void, src: u64, n: usize, stream: *mut c_void) {
        rt(super::memory::cudaMemcpyAsync(dst, src as *const c_void, n, 2, stream))
    }
    fn cuMemcpyDtoDAsync_v2(dst: u64, src: u64, n: usize, stream: *mut c_void) {
        rt(super::memory::cudaMemcpyAsync(dst as *mut c_void, src as *const c_void, n, 3, stream))
    }
    fn cuMemsetD8_v2(dst: u64, v: u8, n: usize) {
        memset(dst, v as u32, 1, n, 0, true)
    }
    fn cuMemsetD16_v2(dst: u64, v: u16, n: usize) {
        memset(dst, v as u32, 2, n, 0, true)
    }
    fn cuMemsetD32_v2(dst: u64, v: u32, n: usize) {
        memset(dst, v, 4, n, 0, true)
    }
    fn cuMemsetD8Async(dst: u64, v: u8, n: usize, stream: *mut c_void) {
        memset(dst, v as u32, 1, n, stream as u64, false)
    }
    fn cuMemsetD16Async(dst: u64, v: u16, n: usize, stream: *mut c_void) {
        memset(dst, v as u32, 2, n, stream as u64, false)
    }
    fn cuMemsetD32Async(dst: u64, v: u32, n: usize, stream: *mut c_void) {
        memset(dst, v, 4, n, stream as u64, false)
    }
    fn cuStreamCreate(s: *mut *mut c_void, flags: u32) {
        rt(super::stream::cudaStreamCreateWithFlags(s, flags))?;
        context::own(|o| o.streams.push(read(s).map_or(0, |s| s as u64)));
        Ok(())
    }
    fn cuStreamCreateWithPriority(s: *mut *mut c_void, flags: u32, priority: i32) {
        rt(super::stream::cudaStreamCreateWithPriority(s, flags, priority))?;
        context::own(|o| o.streams.push(read(s).map_or(0, |s| s as u64)));
        Ok(())
    }
    fn cuStreamDestroy_v2(s: *mut c_void) {
        rt(super::stream::cudaStreamDestroy(s))?;
        context::disown(|o| &mut o.streams, s as u64);
        Ok(())
    }
    fn cuStreamSynchronize(s: *mut c_void) {
        rt(super::stream::cudaStreamSynchronize(s))
    }
    fn cuStreamQuery(s: *mut c_void) {
        rt(super::stream::cudaStreamQuery(s))
    }
    fn cuStreamWaitEvent(s: *mut c_void, e: *mut c_void, flags: u32) {
        rt(super::stream::cudaStreamWaitEvent(s, e, flags))
    }
    fn cuEventCreate(e: *mut *mut c_void, flags: u32) {
        rt(super::stream::cudaEventCreateWithFlags(e, flags))?;
        context::own(|o| o.events.push(read(e).map_or(0, |e| e as u64)));
        Ok(())
    }
    fn cuEventRecord(e: *mut c_void, s: *mut c_void) {
        rt(super::stream::cudaEventRecord(e, s))
    }
    fn cuEventSynchronize(e: *mut c_void) {
        rt(super::stream::cudaEventSynchronize(e))
    }
    fn cuEventQuery(e: *mut c_void) {
        rt(super::stream::cudaEventQuery(e))
    }
    fn cuEventElapsedTime(ms: *mut f32, start: *mut c_void, end: *mut c_void) {
        rt(super::stream::cudaEventElapsedTime(ms, start, end))
    }
    fn cuEventElapsedTime_v2(ms: *mut f32, start: *mut c_void, end: *mut c_void) {
        rt(super::stream::cudaEventElapsedTime(ms, start, end))
    }
    fn cuEventDestroy_v2(e: *mut c_void) {
        rt(super::stream::cudaEventDestroy(e))?;
        context::disown(|o| &mut o.events, e as u64);
        Ok(())
    }
    fn cuGetErrorName(code: u32, s: *mut *const c_char) {
        if !cuda::RESULT_NAMES.iter().any(|e| e.0 == code) {
            return Err(cuda::ERROR_INVALID_VALUE);
        }
        out(s, intern(cuda::driver_name(code)))
    }
    fn cuGetErrorString(code: u32, s: *mut *const c_char) {
        let Some(&(_, runtime)) = cuda::DRIVER_RESULTS.iter().find(|e| e.0 == code) else {
            if !cuda::RESULT_NAMES.iter().any(|e| e.0 == code) {
                return Err(cuda::ERROR_INVALID_VALUE);
            }
            return out(s, intern(cuda::driver_name(code)));
        };
        out(s, intern(cuda::description(runtime)))
    }
    fn cuGetProcAddress_v2(symbol: *const c_char, pfn: *mut *mut c_void, version: i32, flags: u64, status: *mut i32) {
        let mut name = cstr(symbol).ok_or(cuda::ERROR_INVALID_VALUE)?;
        if pfn.is_null() {
            return Err(cuda::ERROR_INVALID_VALUE);
        }
        // A versioned name: exactly the function for that version.
        let exact = versioned(&name, version);
        if let Some(v) = exact {
            name = v.to_string();
        }
        let h = own_handle();
        let suffixes: &[&str] = if exact.is_some() { &[""] } else { &["_v4", "_v3", "_v2", ""] };
        // CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM: the `_ptsz`/`_ptds` variant where
        // there is one (`api::driver_ptsz`).
        let per_thread: &[&str] = if flags & 2 != 0 { &["_ptsz", "_ptds", ""] } else { &[""] };
        let candidates = suffixes.iter().flat_map(|v| per_thread.iter().map(move |t| format!("{v}{t}")));
        let found = candidates.into_iter().find_map(|v| {
            let full = std::ffi::CString::new(format!("{name}{v}")).ok()?;
            // SAFETY: `h` is this library's handle (or null: the global scope); a
            // NUL-terminated name.
            let p = unsafe { libc::dlsym(h, full.as_ptr()) };
            // Only crum's own driver functions (`cu` + a capital letter).
            (!p.is_null() && name.starts_with("cu") && name[2..].starts_with(|c: char| c.is_ascii_uppercase())).then_some(p)
        });
        // CU_GET_PROC_ADDRESS_SUCCESS 0, _SYMBOL_NOT_FOUND 1.
        if !status.is_null() {
            out(status, if found.is_some() { 0 } else { 1 })?;
        }
        match found {
            Some(p) => out(pfn, p),
            None => {
                out(pfn, std::ptr::null_mut())?;
                Err(cuda::ERROR_SYMBOL_NOT_FOUND)
            }
        }
    }
    fn cuGetExportTable(_table: *mut *const c_void, _id: *const u8) {
        Err(cuda::ERROR_SYMBOL_NOT_FOUND)
    }
}

/// `CU_FUNC_ATTRIBUTE_*` `attr` of the kernel handle `f` (a `CUfunction` or a `CUkernel`):
/// the values of `cudaFuncAttributes`' fields.
fn func_attribute(attr: u32, f: usize) -> CudaResult<i32> {
    let (_, info) = crate::state::function(f)?;
    Ok(match attr {
        0 => info.max_threads_per_block,
        1 => info.shared_bytes as i32,
        2 => info.const_bytes as i32,
        3 => info.local_bytes as i32,
        4 => info.num_regs,
        5 => info.ptx_version,
        6 => info.binary_version,
        8 => info.max_dynamic_shared,
        _ => return Err(cuda::ERROR_INVALID_VALUE),
    })
}

/// Names whose signature changed, with the function each CUDA version asking for it gets
/// (the newest first; the first whose version is at most the one asked for): a program built
/// for CUDA 11 that asks for `cuGraphGetEdges` gets the one without edge data.
const RENAMED: [(&str, &[(i32, &str)]); 16] = [
    ("cuGraphInstantiate", &[(12000, "cuGraphInstantiateWithFlags"), (0, "cuGraphInstantiate_v2")]),
    ("cuStreamBeginCapture", &[(10010, "cuStreamBeginCapture_v2"), (0, "cuStreamBeginCapture")]),
    (
        "cuStreamGetCaptureInfo",
        &[(12030, "cuStreamGetCaptureInfo_v3"), (11030, "cuStreamGetCaptureInfo_v2"), (0, "cuStreamGetCaptureInfo")],
    ),
    ("cuStreamUpdateCaptureDependencies", &[(12030, "cuStreamUpdateCaptureDependencies_v2"), (0, "cuStreamUpdateCaptureDependencies")]),
    ("cuGraphGetEdges", &[(12030, "cuGraphGetEdges_v2"), (0, "cuGraphGetEdges")]),
    ("cuGraphNodeGetDependencies", &[(12030, "cuGraphNodeGetDependencies_v2"), (0, "cuGraphNodeGetDependencies")]),
    ("cuGraphNodeGetDependentNodes", &[(12030, "cuGraphNodeGetDependentNodes_v2"), (0, "cuGraphNodeGetDependentNodes")]),
    ("cuGraphAddDependencies", &[(12030, "cuGraphAddDependencies_v2"), (0, "cuGraphAddDependencies")]),
    ("cuGraphRemoveDependencies", &[(12030, "cuGraphRemoveDependencies_v2"), (0, "cuGraphRemoveDependencies")]),
    ("cuGraphAddKernelNode", &[(12000, "cuGraphAddKernelNode_v2"), (0, "cuGraphAddKernelNode")]),
    ("cuGraphKernelNodeGetParams", &[(12000, "cuGraphKernelNodeGetParams_v2"), (0, "cuGraphKernelNodeGetParams")]),
    ("cuGraphKernelNodeSetParams", &[(12000, "cuGraphKernelNodeSetParams_v2"), (0, "cuGraphKernelNodeSetParams")]),
    ("cuGraphExecKernelNodeSetParams", &[(12000, "cuGraphExecKernelNodeSetParams_v2"), (0, "cuGraphExecKernelNodeSetParams")]),
    ("cuGraphExecUpdate", &[(12000, "cuGraphExecUpdate_v2"), (0, "cuGraphExecUpdate")]),
    // A CUmemLocation where CUDA 11 took a CUdevice.
    ("cuMemAdvise", &[(12020, "cuMemAdvise_v2"), (0, "cuMemAdvise")]),
    ("cuMemPrefetchAsync", &[(12020, "cuMemPrefetchAsync_v2"), (0, "cuMemPrefetchAsync")]),
];

/// The function a program built for CUDA `version` gets for `name`, where the signature
/// changed (`RENAMED`): `Some("")` when no form is that old; `None` for other names.
fn versioned(name: &str, version: i32) -> Option<&'static str> {
    let versions = RENAMED.iter().find(|r| r.0 == name)?.1;
    Some(versions.iter().find(|v| version >= v.0).map_or("", |v| v.1))
}

/// A C string for `s` that lives for ever (the error strings; a fixed, small set).
fn intern(s: &'static str) -> *const c_char {
    static MAP: std::sync::Mutex<Vec<(&'static str, &'static CStr)>> = std::sync::Mutex::new(Vec::new());
    let mut g = MAP.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(&(_, c)) = g.iter().find(|e| e.0 == s) {
        return c.as_ptr();
    }
    let c: &'static CStr = Box::leak(std::ffi::CString::new(s).unwrap_or_default().into_boxed_c_str());
    g.push((s, c));
    c.as_ptr()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changed_signature_is_looked_up_in_the_form_of_the_version_asked_for() {
        assert_eq!(versioned("cuGraphInstantiate", 13000), Some("cuGraphInstantiateWithFlags"));
        assert_eq!(versioned("cuGraphInstantiate", 11000), Some("cuGraphInstantiate_v2"));
        assert_eq!(versioned("cuStreamGetCaptureInfo", 12030), Some("cuStreamGetCaptureInfo_v3"));
        assert_eq!(versioned("cuStreamGetCaptureInfo", 12020), Some("cuStreamGetCaptureInfo_v2"));
        assert_eq!(versioned("cuStreamGetCaptureInfo", 10010), Some("cuStreamGetCaptureInfo"));
        assert_eq!(versioned("cuGraphGetEdges", 12000), Some("cuGraphGetEdges"));
        assert_eq!(versioned("cuStreamBeginCapture", 10000), Some("cuStreamBeginCapture"));
        assert_eq!(versioned("cuStreamBeginCapture", 10010), Some("cuStreamBeginCapture_v2"));
        assert_eq!(versioned("cuMemAdvise", 12010), Some("cuMemAdvise"));
        assert_eq!(versioned("cuMemAdvise", 12020), Some("cuMemAdvise_v2"));
        assert_eq!(versioned("cuMemPrefetchAsync", 11000), Some("cuMemPrefetchAsync"));
        assert_eq!(versioned("cuMemPrefetchAsync", 13000), Some("cuMemPrefetchAsync_v2"));
    }

    #[test]
    fn a_name_whose_signature_never_changed_is_not_versioned() {
        assert_eq!(versioned("cuGraphLaunch", 10000), None);
        assert_eq!(versioned("cuMemAlloc", 13000), None);
    }

    #[test]
    fn every_versioned_form_is_listed_newest_first_and_ends_with_the_oldest() {
        for (name, forms) in RENAMED {
            assert!(forms.windows(2).all(|w| w[0].0 > w[1].0), "{name}");
            assert_eq!(forms.last().map(|f| f.0), Some(0), "{name}");
        }
    }
}
