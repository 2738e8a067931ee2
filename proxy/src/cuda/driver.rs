//! The thin layer over the CUDA driver API (`cudarc::driver::sys`, loaded at run time): each
//! function makes one driver call (or one short, all-or-nothing sequence) and returns the raw
//! `CUresult` number as its error, for [`super::errors`] to translate.
//!
//! Every wrapper links to the driver function it calls; semantics are those of the
//! [CUDA Driver API](https://docs.nvidia.com/cuda/cuda-driver-api/).
//!
//! # Safety
//! - The driver library is loaded by cudarc on first use and *panics* if it is absent or a
//!   symbol is missing; [`library_present`] must be checked (the backend does so in `probe`)
//!   before any other function here is called, and optional symbols are checked with
//!   [`has_symbol`] before use.
//! - Handles (`CUcontext`, `CUstream`, `CUevent`, `CUmodule`, `CUfunction`) are opaque driver
//!   pointers; the backend owns each one in exactly one table entry and destroys it once.
//! - Host pointers passed for copies are either proxy-owned page-locked staging buffers that
//!   stay alive until the stream has passed the copy (the backend returns them to its pool from
//!   a host function queued after the copy, or after waiting for an event recorded after it),
//!   or proxy mappings registered with the driver.
//! - The driver returns `CUresult` as a Rust enum; a code newer than cudarc's bindings would be
//!   an invalid enum value. cudarc 0.19 (cuda-12080 bindings) covers every code that the
//!   CUDA 12 and 13 drivers document; this is a known limit of using cudarc's types.
#![allow(unsafe_code)]

use std::ffi::{c_void, CStr, CString};
use std::sync::OnceLock;

use cudarc::driver::sys;

/// A raw driver error (`CUresult` as a number).
pub type DResult<T> = Result<T, u32>;

fn ck(r: sys::CUresult) -> DResult<()> {
    match r {
        sys::CUresult::CUDA_SUCCESS => Ok(()),
        e => Err(e as u32),
    }
}

/// The environment variable naming the driver library to load instead of the one the dynamic
/// loader finds (a driver installed in an odd place, or crum's emulated driver,
/// `integration-tests/emu-libcuda`): `CRUM_LIBCUDA=/path/to/libcuda.so.1`.
pub const LIBCUDA_ENV: &str = "CRUM_LIBCUDA";

/// The library `CRUM_LIBCUDA` names, loaded once (`dlopen(RTLD_NOW | RTLD_GLOBAL)`, never
/// closed): None when the variable is unset, else its handle or why it cannot be loaded.
///
/// cudarc opens the driver by name (`libcuda.so`, …, `libcuda.so.1`); the dynamic loader
/// answers a name with an already loaded library whose SONAME it is, so the library loaded
/// here is the one cudarc gets, unless a library called `libcuda.so` is on the search path
/// (tried first): [`check_loaded`] finds that out.
fn preloaded() -> Option<&'static Result<usize, String>> {
    static LIB: OnceLock<Option<Result<usize, String>>> = OnceLock::new();
    LIB.get_or_init(|| {
        let path = std::env::var_os(LIBCUDA_ENV)?;
        let Ok(c) = CString::new(path.as_encoded_bytes()) else {
            return Some(Err("the path contains a NUL byte".into()));
        };
        // SAFETY: loads the library the user named (running its initializers, as loading the
        // driver does anyway); the handle is kept for the life of the process.
        let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
        if h.is_null() {
            // SAFETY: dlerror returns a NUL-terminated message or NULL, read at once.
            let why = unsafe {
                let e = libc::dlerror();
                if e.is_null() { "dlopen failed".to_string() } else { CStr::from_ptr(e).to_string_lossy().into_owned() }
            };
            return Some(Err(why));
        }
        Some(Ok(h as usize))
    })
    .as_ref()
}

/// With `CRUM_LIBCUDA` set: whether the driver cudarc loaded is the library it names (the
/// same `cuInit`), or why not.
pub fn check_loaded() -> Result<(), String> {
    let Some(lib) = preloaded() else { return Ok(()) };
    let h = *lib.as_ref().map_err(Clone::clone)?;
    // SAFETY: `h` is a live handle (never closed); looking a symbol up does not call it.
    let ours = unsafe { libc::dlsym(h as *mut c_void, c"cuInit".as_ptr()) };
    // SAFETY: the library is present (checked by the caller); a lookup does not call it.
    let theirs = unsafe { sys::culib().get::<*const c_void>(b"cuInit\0") }.map(|s| *s).ok();
    if ours.is_null() {
        return Err("it has no cuInit".into());
    }
    if theirs != Some(ours as *const c_void) {
        return Err("a library called libcuda.so on the library path was loaded first".into());
    }
    Ok(())
}

/// Whether the driver library (`libcuda.so.1`, or the one `CRUM_LIBCUDA` names) can be loaded.
pub fn library_present() -> bool {
    if preloaded().is_some_and(|r| r.is_err()) {
        return false;
    }
    // SAFETY: only tries to dlopen the candidate names; loads nothing else.
    unsafe { sys::is_culib_present() }
}

/// `CRUM_LIBCUDA` and why the library it names cannot be used, if it is set and cannot.
pub fn env_library_error() -> Option<(String, String)> {
    let path = std::env::var(LIBCUDA_ENV).ok()?;
    match preloaded()? {
        Err(why) => Some((path, why.clone())),
        Ok(_) if !library_present() => Some((path, "not found by the loader".into())),
        Ok(_) => check_loaded().err().map(|why| (path, why)),
    }
}

/// Whether the loaded driver exports `name` (newer entry points on older drivers).
pub fn has_symbol(name: &str) -> bool {
    let Ok(c) = CString::new(name) else { return false };
    // SAFETY: `library_present()` was checked by the caller (module contract); looking a symbol
    // up as an untyped pointer does not call it.
    unsafe { sys::culib().get::<*const c_void>(c.as_bytes_with_nul()).is_ok() }
}

/// [`cuInit`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__INITIALIZE.html)
pub fn init() -> DResult<()> {
    // SAFETY: plain call; flags must be 0.
    ck(unsafe { sys::cuInit(0) })
}

/// `cuDriverGetVersion`: e.g. 12080 for CUDA 12.8.
pub fn driver_version() -> DResult<i32> {
    let mut v = 0;
    // SAFETY: out-pointer to a local.
    ck(unsafe { sys::cuDriverGetVersion(&mut v) })?;
    Ok(v)
}

/// The driver's name of a result code, from our table (`errors::driver_name`): usable even
/// when the library could not be loaded.
pub fn error_name(code: u32) -> String {
    super::errors::driver_name(code).to_string()
}

/// `cuDeviceGetCount`
pub fn device_count() -> DResult<i32> {
    let mut n = 0;
    // SAFETY: out-pointer to a local.
    ck(unsafe { sys::cuDeviceGetCount(&mut n) })?;
    Ok(n)
}

/// A device ordinal as the driver knows it.
#[derive(Debug, Clone, Copy)]
pub struct Device(sys::CUdevice);

/// `cuDeviceGet`
pub fn device_get(ordinal: i32) -> DResult<Device> {
    let mut d = 0;
    // SAFETY: out-pointer to a local.
    ck(unsafe { sys::cuDeviceGet(&mut d, ordinal) })?;
    Ok(Device(d))
}

/// `cuDeviceGetName`
pub fn device_name(dev: Device) -> DResult<String> {
    let mut buf = [0 as std::ffi::c_char; 256];
    // SAFETY: the buffer is 256 chars and we pass its length; the driver NUL-terminates.
    ck(unsafe { sys::cuDeviceGetName(buf.as_mut_ptr(), buf.len() as i32, dev.0) })?;
    // The driver NUL-terminates; force it in case of a truncated name.
    buf[255] = 0;
    // SAFETY: the buffer is NUL-terminated (forced above) and lives for the call.
    Ok(unsafe { CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned())
}

/// `cuDeviceGetAttribute`
pub fn device_attr(dev: Device, attr: sys::CUdevice_attribute) -> DResult<i32> {
    let mut v = 0;
    // SAFETY: out-pointer to a local; `attr` is a valid enum value.
    ck(unsafe { sys::cuDeviceGetAttribute(&mut v, attr, dev.0) })?;
    Ok(v)
}

/// `cuDeviceTotalMem`
pub fn device_total_mem(dev: Device) -> DResult<u64> {
    let mut v = 0usize;
    // SAFETY: out-pointer to a local.
    ck(unsafe { sys::cuDeviceTotalMem_v2(&mut v, dev.0) })?;
    Ok(v as u64)
}

/// `cuDeviceGetUuid`
pub fn device_uuid(dev: Device) -> DResult<[u8; 16]> {
    // SAFETY: CUuuid is a plain byte array; zeroed is valid.
    let mut u: sys::CUuuid = unsafe { std::mem::zeroed() };
    // SAFETY: out-pointer to a local. `_v2` (CUDA 11.4+) is what CUDA 13 headers call; the
    // older entry point remains for older drivers.
    ck(unsafe {
        if has_symbol("cuDeviceGetUuid_v2") {
            sys::cuDeviceGetUuid_v2(&mut u, dev.0)
        } else {
            sys::cuDeviceGetUuid(&mut u, dev.0)
        }
    })?;
    Ok(u.bytes.map(|b| b as u8))
}

/// The device's primary context, retained.
#[derive(Debug)]
pub struct Context(sys::CUcontext);
// SAFETY: a CUcontext may be made current on any thread (driver contract).
unsafe impl Send for Context {}
// SAFETY: as above; the handle itself is never mutated.
unsafe impl Sync for Context {}

/// [`cuDevicePrimaryCtxRetain`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__PRIMARY__CTX.html)
pub fn primary_ctx_retain(dev: Device) -> DResult<Context> {
    let mut c = std::ptr::null_mut();
    // SAFETY: out-pointer to a local.
    ck(unsafe { sys::cuDevicePrimaryCtxRetain(&mut c, dev.0) })?;
    Ok(Context(c))
}

/// `cuCtxSetCurrent`
pub fn ctx_set_current(c: &Context) -> DResult<()> {
    // SAFETY: the context is retained for the backend's lifetime.
    ck(unsafe { sys::cuCtxSetCurrent(c.0) })
}

impl Context {
    pub fn raw(&self) -> usize {
        self.0 as usize
    }
}

/// `cuCtxSynchronize`
pub fn ctx_synchronize() -> DResult<()> {
    // SAFETY: plain call on the current context.
    ck(unsafe { sys::cuCtxSynchronize() })
}

/// `cuMemGetInfo`: (free, total).
pub fn mem_get_info() -> DResult<(u64, u64)> {
    let (mut f, mut t) = (0usize, 0usize);
    // SAFETY: out-pointers to locals.
    ck(unsafe { sys::cuMemGetInfo_v2(&mut f, &mut t) })?;
    Ok((f as u64, t as u64))
}

fn alloc_prop(dev: Device) -> sys::CUmemAllocationProp {
    // SAFETY: all-zero is a valid CUmemAllocationProp (its enums have 0 = INVALID variants,
    // the rest are integers and a pointer) and is the documented default before setting fields.
    let mut p: sys::CUmemAllocationProp = unsafe { std::mem::zeroed() };
    p.type_ = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = dev.0;
    p
}

/// [`cuMemGetAllocationGranularity`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__VA.html):
/// the minimum granularity of pinned device memory (what `cuMemMap` requires; 2 MiB on every
/// GPU so far, the emulated device's layout too) and the recommended one (for speed; it may be
/// larger).
pub fn granularity(dev: Device) -> DResult<(u64, u64)> {
    use sys::CUmemAllocationGranularity_flags as F;
    let prop = alloc_prop(dev);
    let get = |flag| {
        let mut g = 0usize;
        // SAFETY: valid prop and out-pointer.
        ck(unsafe { sys::cuMemGetAllocationGranularity(&mut g, &prop, flag) }).map(|_| g as u64)
    };
    Ok((get(F::CU_MEM_ALLOC_GRANULARITY_MINIMUM)?, get(F::CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)?))
}

/// Reserve the virtual range `[addr, addr+len)` for device memory with
/// [`cuMemAddressReserve`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__VA.html),
/// giving `addr` as the hint and checking that the driver honoured it (it may place the
/// range elsewhere when the address is taken). `addr` and `len` must be multiples of the
/// allocation granularity.
pub fn reserve_exact(addr: u64, len: u64) -> Result<(), MapError> {
    let mut got: sys::CUdeviceptr = 0;
    // SAFETY: out-pointer to a local; flags must be 0.
    ck(unsafe { sys::cuMemAddressReserve(&mut got, len as usize, 0, addr, 0) }).map_err(MapError::Driver)?;
    if got != addr {
        // SAFETY: releasing the reservation just made, with nothing mapped in it.
        let _ = unsafe { sys::cuMemAddressFree(got, len as usize) };
        return Err(MapError::Moved { got });
    }
    Ok(())
}

/// `cuMemAddressFree` of a range reserved by [`reserve_exact`] (everything in it unmapped).
pub fn release_reservation(addr: u64, len: u64) -> DResult<()> {
    // SAFETY: the caller reserved exactly this range and unmapped everything in it.
    ck(unsafe { sys::cuMemAddressFree(addr, len as usize) })
}

/// Physical device memory mapped inside a reserved range.
#[derive(Debug)]
pub struct Mapping {
    pub addr: u64,
    pub len: u64,
    handle: sys::CUmemGenericAllocationHandle,
}

/// Why a fixed reservation failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MapError {
    /// The driver placed the reservation elsewhere (the address is taken in this process).
    Moved { got: u64 },
    Driver(u32),
}

/// Back `[addr, addr+len)` (inside a range reserved by [`reserve_exact`], granularity-aligned)
/// with new physical memory: [`cuMemCreate`] (pinned device memory), [`cuMemMap`], and
/// [`cuMemSetAccess`] read-write for the device. All or nothing: on failure what was done is
/// undone.
///
/// [`cuMemCreate`]: https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__VA.html
/// [`cuMemMap`]: https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__VA.html
/// [`cuMemSetAccess`]: https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__VA.html
pub fn map_in(dev: Device, addr: u64, len: u64) -> DResult<Mapping> {
    let prop = alloc_prop(dev);
    let mut handle = 0;
    // SAFETY: valid prop and out-pointer; flags must be 0.
    ck(unsafe { sys::cuMemCreate(&mut handle, len as usize, &prop, 0) })?;
    // SAFETY: `handle` is a fresh allocation of `len` bytes; the range lies in our reservation
    // and nothing is mapped there (planner contract).
    if let Err(e) = ck(unsafe { sys::cuMemMap(addr, len as usize, 0, handle, 0) }) {
        // SAFETY: releasing the handle just created.
        let _ = unsafe { sys::cuMemRelease(handle) };
        return Err(e);
    }
    // SAFETY: all-zero is a valid CUmemAccessDesc (location type 0 = INVALID, flags 0 =
    // PROT_NONE); the fields are set below.
    let mut access: sys::CUmemAccessDesc = unsafe { std::mem::zeroed() };
    access.location = prop.location;
    access.flags = sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    // SAFETY: the range is mapped (just above); one descriptor.
    if let Err(e) = ck(unsafe { sys::cuMemSetAccess(addr, len as usize, &access, 1) }) {
        // SAFETY: undoing our own map and handle, in reverse order.
        unsafe {
            let _ = sys::cuMemUnmap(addr, len as usize);
            let _ = sys::cuMemRelease(handle);
        }
        return Err(e);
    }
    Ok(Mapping { addr, len, handle })
}

/// Make a mapped range read-only for the device (`cuMemSetAccess` with `PROT_READ`).
pub fn set_read_only(dev: Device, addr: u64, len: u64) -> DResult<()> {
    let prop = alloc_prop(dev);
    // SAFETY: all-zero is a valid CUmemAccessDesc; its fields are set below.
    let mut access: sys::CUmemAccessDesc = unsafe { std::mem::zeroed() };
    access.location = prop.location;
    access.flags = sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READ;
    // SAFETY: the range is mapped (caller contract); one descriptor.
    ck(unsafe { sys::cuMemSetAccess(addr, len as usize, &access, 1) })
}

/// Undo [`map_in`]: `cuMemUnmap`, then `cuMemRelease` (the physical memory is freed once
/// unmapped). The range stays reserved. The caller has made sure the device no longer uses
/// it (`cudaFree` synchronizes).
pub fn unmap(m: Mapping) -> DResult<()> {
    // SAFETY: `m` came from `map_in` and is consumed, so this happens once.
    unsafe {
        ck(sys::cuMemUnmap(m.addr, m.len as usize))?;
        ck(sys::cuMemRelease(m.handle))
    }
}

/// [`cuMemHostRegister`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html):
/// page-lock a proxy mapping and map it for the device (its device address equals its host
/// address under unified addressing), so copies from it are asynchronous DMA.
pub fn host_register(addr: u64, len: u64) -> DResult<()> {
    let flags = sys::CU_MEMHOSTREGISTER_PORTABLE | sys::CU_MEMHOSTREGISTER_DEVICEMAP;
    // SAFETY: `addr..addr+len` is a live mapping of this process owned by the backend.
    ck(unsafe { sys::cuMemHostRegister_v2(addr as *mut c_void, len as usize, flags) })
}

/// `cuMemHostUnregister`
pub fn host_unregister(addr: u64) -> DResult<()> {
    // SAFETY: `addr` was registered by `host_register`.
    ck(unsafe { sys::cuMemHostUnregister(addr as *mut c_void) })
}

/// A page-locked staging buffer (`cuMemHostAlloc`), freed on drop.
pub struct HostBuf {
    ptr: *mut u8,
    len: usize,
}
// SAFETY: plain memory owned by this value; the driver allows any thread to use or free it.
unsafe impl Send for HostBuf {}

impl HostBuf {
    /// `cuMemHostAlloc(PORTABLE)`
    pub fn new(len: usize) -> DResult<HostBuf> {
        let mut p = std::ptr::null_mut();
        // SAFETY: out-pointer to a local.
        ck(unsafe { sys::cuMemHostAlloc(&mut p, len, sys::CU_MEMHOSTALLOC_PORTABLE) })?;
        Ok(HostBuf { ptr: p.cast(), len })
    }
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `ptr` points to `len` bytes owned by self.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, uniquely borrowed.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
    pub fn addr(&self) -> u64 {
        self.ptr as u64
    }
}

impl Drop for HostBuf {
    fn drop(&mut self) {
        // SAFETY: allocated by cuMemHostAlloc, freed once.
        let _ = unsafe { sys::cuMemFreeHost(self.ptr.cast()) };
    }
}

/// A loaded module.
#[derive(Debug)]
pub struct Module {
    handle: sys::CUmodule,
    /// The image, alive while the module is loaded (dropped after `cuModuleUnload`).
    image: Vec<u64>,
    image_len: usize,
}
// SAFETY: module handles are usable from any thread of the context.
unsafe impl Send for Module {}
// SAFETY: as above.
unsafe impl Sync for Module {}

/// [`cuModuleLoadData`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MODULE.html):
/// a fat binary, cubin or NUL-terminated PTX; the driver picks the SASS for this GPU or JITs
/// the PTX.
pub fn module_load(image: &[u8]) -> DResult<Module> {
    // 8-byte aligned copy with a NUL after it (PTX text must be NUL-terminated).
    let mut buf = vec![0u64; image.len() / 8 + 1];
    // SAFETY: `buf` holds at least `image.len() + 1` bytes.
    unsafe { std::ptr::copy_nonoverlapping(image.as_ptr(), buf.as_mut_ptr().cast::<u8>(), image.len()) };
    let mut m = std::ptr::null_mut();
    // SAFETY: the image buffer is live for the call, and kept with the module until it is
    // unloaded: with lazy loading (the default since CUDA 12.2) the driver may read kernels
    // from the image later, and its documentation does not promise a copy.
    ck(unsafe { sys::cuModuleLoadData(&mut m, buf.as_ptr().cast()) })?;
    Ok(Module { handle: m, image: buf, image_len: image.len() })
}

impl Module {
    /// The image the module was loaded from.
    pub fn image(&self) -> &[u8] {
        // SAFETY: `image` holds at least `image_len` initialized bytes (copied in at load).
        unsafe { std::slice::from_raw_parts(self.image.as_ptr().cast::<u8>(), self.image_len) }
    }
}

/// `cuModuleUnload`
pub fn module_unload(m: Module) -> DResult<()> {
    // SAFETY: consumed, so unloaded once.
    ck(unsafe { sys::cuModuleUnload(m.handle) })
}

/// A kernel handle.
#[derive(Debug, Clone, Copy)]
pub struct Function(sys::CUfunction);
// SAFETY: function handles are usable from any thread of the context.
unsafe impl Send for Function {}
// SAFETY: as above.
unsafe impl Sync for Function {}

/// `cuModuleGetFunction`
pub fn module_function(m: &Module, name: &str) -> DResult<Function> {
    let c = CString::new(name).map_err(|_| sys::CUresult::CUDA_ERROR_NOT_FOUND as u32)?;
    let mut f = std::ptr::null_mut();
    // SAFETY: live module, NUL-terminated name, out-pointer.
    ck(unsafe { sys::cuModuleGetFunction(&mut f, m.handle, c.as_ptr()) })?;
    Ok(Function(f))
}

/// The names of module `m`'s kernels (`cuModuleGetFunctionCount`, `cuModuleEnumerateFunctions`,
/// `cuFuncGetName`); None where the driver predates them (CUDA 12.4).
pub fn module_function_names(m: &Module) -> Option<DResult<Vec<String>>> {
    if !["cuModuleGetFunctionCount", "cuModuleEnumerateFunctions", "cuFuncGetName"].iter().all(|n| has_symbol(n)) {
        return None;
    }
    Some((|| {
        let mut n = 0u32;
        // SAFETY: live module, out-pointer; the symbols exist (checked above).
        ck(unsafe { sys::cuModuleGetFunctionCount(&mut n, m.handle) })?;
        let mut funcs = vec![std::ptr::null_mut(); n as usize];
        // SAFETY: live module; `funcs` holds `n` handles.
        ck(unsafe { sys::cuModuleEnumerateFunctions(funcs.as_mut_ptr(), n, m.handle) })?;
        funcs
            .into_iter()
            .map(|f| {
                let mut name = std::ptr::null();
                // SAFETY: a function of the live module; the driver keeps the name it hands out.
                ck(unsafe { sys::cuFuncGetName(&mut name, f) })?;
                if name.is_null() {
                    return Err(sys::CUresult::CUDA_ERROR_INVALID_VALUE as u32);
                }
                // SAFETY: a NUL-terminated string of the driver's, alive with the module.
                Ok(unsafe { std::ffi::CStr::from_ptr(name) }.to_string_lossy().into_owned())
            })
            .collect()
    })())
}

/// `cuModuleGetGlobal`: (device address, size).
pub fn module_global(m: &Module, name: &str) -> DResult<(u64, u64)> {
    let c = CString::new(name).map_err(|_| sys::CUresult::CUDA_ERROR_NOT_FOUND as u32)?;
    let (mut p, mut n) = (0, 0usize);
    // SAFETY: live module, NUL-terminated name, out-pointers.
    ck(unsafe { sys::cuModuleGetGlobal_v2(&mut p, &mut n, m.handle, c.as_ptr()) })?;
    Ok((p, n as u64))
}

/// `cuFuncGetAttribute`
pub fn func_attr(f: Function, a: sys::CUfunction_attribute) -> DResult<i32> {
    let mut v = 0;
    // SAFETY: live function, out-pointer.
    ck(unsafe { sys::cuFuncGetAttribute(&mut v, a, f.0) })?;
    Ok(v)
}

/// `cuFuncSetAttribute`
pub fn func_set_attr(f: Function, a: sys::CUfunction_attribute, v: i32) -> DResult<()> {
    // SAFETY: live function.
    ck(unsafe { sys::cuFuncSetAttribute(f.0, a, v) })
}

/// [`cuFuncGetParamInfo`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EXEC.html)
/// for every parameter: asks for index 0, 1, ... until the driver answers
/// `CUDA_ERROR_INVALID_VALUE` (index past the last parameter). None when the driver predates
/// the call (CUDA 12.4).
pub fn param_layout(f: Function) -> Option<DResult<Vec<(u32, u32)>>> {
    if !has_symbol("cuFuncGetParamInfo") {
        return None;
    }
    let mut out = Vec::new();
    for i in 0..4096usize {
        let (mut off, mut size) = (0usize, 0usize);
        // SAFETY: live function, out-pointers; the symbol exists (checked above).
        match unsafe { sys::cuFuncGetParamInfo(f.0, i, &mut off, &mut size) } {
            sys::CUresult::CUDA_SUCCESS => out.push((off as u32, size as u32)),
            sys::CUresult::CUDA_ERROR_INVALID_VALUE => return Some(Ok(out)),
            e => return Some(Err(e as u32)),
        }
    }
    Some(Err(sys::CUresult::CUDA_ERROR_INVALID_VALUE as u32))
}

/// A stream; the null handle is the legacy default stream.
#[derive(Debug)]
pub struct Stream(sys::CUstream);
// SAFETY: stream handles are usable from any thread of the context.
unsafe impl Send for Stream {}
// SAFETY: as above.
unsafe impl Sync for Stream {}

impl Stream {
    /// The legacy default stream (`NULL` / `CU_STREAM_LEGACY` semantics).
    pub const LEGACY: Stream = Stream(std::ptr::null_mut());
}

/// [`cuStreamCreateWithPriority`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__STREAM.html)
/// (`non_blocking`: `CU_STREAM_NON_BLOCKING`; lower numbers are higher priorities, clamped
/// by the driver).
pub fn stream_create(non_blocking: bool, priority: i32) -> DResult<Stream> {
    let mut s = std::ptr::null_mut();
    let flags = if non_blocking { sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32 } else { 0 };
    // SAFETY: out-pointer to a local.
    ck(unsafe { sys::cuStreamCreateWithPriority(&mut s, flags, priority) })?;
    Ok(Stream(s))
}

impl Drop for Stream {
    /// `cuStreamDestroy`: work already queued still completes.
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: owned handle, destroyed once; the null (legacy) stream is never destroyed.
            let _ = unsafe { sys::cuStreamDestroy_v2(self.0) };
        }
    }
}

/// `cuStreamQuery`: true when idle.
pub fn stream_query(s: &Stream) -> DResult<bool> {
    // SAFETY: live stream.
    match unsafe { sys::cuStreamQuery(s.0) } {
        sys::CUresult::CUDA_SUCCESS => Ok(true),
        sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
        e => Err(e as u32),
    }
}

/// `cuStreamSynchronize`
pub fn stream_sync(s: &Stream) -> DResult<()> {
    // SAFETY: live stream.
    ck(unsafe { sys::cuStreamSynchronize(s.0) })
}

/// An event.
#[derive(Debug)]
pub struct Event(sys::CUevent);
// SAFETY: event handles are usable from any thread of the context.
unsafe impl Send for Event {}
// SAFETY: as above.
unsafe impl Sync for Event {}

/// `cuEventCreate`; `flags` are the runtime's (`cudaEventBlockingSync` = 1,
/// `cudaEventDisableTiming` = 2, `cudaEventInterprocess` = 4), equal to the driver's.
pub fn event_create(flags: u32) -> DResult<Event> {
    let mut e = std::ptr::null_mut();
    // SAFETY: out-pointer to a local.
    ck(unsafe { sys::cuEventCreate(&mut e, flags & 0x7) })?;
    Ok(Event(e))
}

impl Drop for Event {
    /// `cuEventDestroy`: a pending record still completes.
    fn drop(&mut self) {
        // SAFETY: owned handle, destroyed once.
        let _ = unsafe { sys::cuEventDestroy_v2(self.0) };
    }
}

/// `cuEventRecord`
pub fn event_record(e: &Event, s: &Stream) -> DResult<()> {
    // SAFETY: live event and stream.
    ck(unsafe { sys::cuEventRecord(e.0, s.0) })
}

/// `cuEventQuery`: true when complete.
pub fn event_query(e: &Event) -> DResult<bool> {
    // SAFETY: live event.
    match unsafe { sys::cuEventQuery(e.0) } {
        sys::CUresult::CUDA_SUCCESS => Ok(true),
        sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
        r => Err(r as u32),
    }
}

/// `cuEventSynchronize`
pub fn event_sync(e: &Event) -> DResult<()> {
    // SAFETY: live event.
    ck(unsafe { sys::cuEventSynchronize(e.0) })
}

/// `cuEventElapsedTime` in milliseconds.
pub fn event_elapsed(a: &Event, b: &Event) -> DResult<f32> {
    let mut ms = 0f32;
    // SAFETY: live events, out-pointer.
    ck(unsafe { sys::cuEventElapsedTime(&mut ms, a.0, b.0) })?;
    Ok(ms)
}

/// `cuStreamWaitEvent`
pub fn stream_wait_event(s: &Stream, e: &Event) -> DResult<()> {
    // SAFETY: live stream and event; flags 0.
    ck(unsafe { sys::cuStreamWaitEvent(s.0, e.0, 0) })
}

/// [`cuStreamSetAttribute`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__STREAM.html)
/// for the stream attributes the runtime forwards (values checked by the interposer; an
/// enum value the driver's bindings do not know is `CUDA_ERROR_INVALID_VALUE`).
pub fn stream_set_attr(s: &Stream, attr: crum_wire::StreamAttr) -> DResult<()> {
    use crum_wire::StreamAttr as A;
    use sys::CUlaunchAttributeID as Id;
    let invalid = sys::CUresult::CUDA_ERROR_INVALID_VALUE as u32;
    let prop = |p: u32| match p {
        0 => Ok(sys::CUaccessProperty::CU_ACCESS_PROPERTY_NORMAL),
        1 => Ok(sys::CUaccessProperty::CU_ACCESS_PROPERTY_STREAMING),
        2 => Ok(sys::CUaccessProperty::CU_ACCESS_PROPERTY_PERSISTING),
        _ => Err(invalid),
    };
    // SAFETY: an all-zero union of plain integers, floats and pointers is a valid value.
    let mut v: sys::CUstreamAttrValue = unsafe { std::mem::zeroed() };
    let id = match attr {
        A::AccessPolicyWindow(w) => {
            v.accessPolicyWindow = sys::CUaccessPolicyWindow {
                base_ptr: w.base as *mut std::ffi::c_void,
                num_bytes: w.bytes as usize,
                hitRatio: w.hit_ratio,
                hitProp: prop(w.hit_prop)?,
                missProp: prop(w.miss_prop)?,
            };
            Id::CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW
        }
        A::SyncPolicy(p) => {
            v.syncPolicy = match p {
                1 => sys::CUsynchronizationPolicy::CU_SYNC_POLICY_AUTO,
                2 => sys::CUsynchronizationPolicy::CU_SYNC_POLICY_SPIN,
                3 => sys::CUsynchronizationPolicy::CU_SYNC_POLICY_YIELD,
                4 => sys::CUsynchronizationPolicy::CU_SYNC_POLICY_BLOCKING_SYNC,
                _ => return Err(invalid),
            };
            Id::CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY
        }
        A::MemSyncDomain(d) => {
            v.memSyncDomain = match d {
                0 => sys::CUlaunchMemSyncDomain::CU_LAUNCH_MEM_SYNC_DOMAIN_DEFAULT,
                1 => sys::CUlaunchMemSyncDomain::CU_LAUNCH_MEM_SYNC_DOMAIN_REMOTE,
                _ => return Err(invalid),
            };
            Id::CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN
        }
        A::MemSyncDomainMap(default_, remote) => {
            v.memSyncDomainMap = sys::CUlaunchMemSyncDomainMap { default_, remote };
            Id::CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP
        }
    };
    // SAFETY: live stream; `v` is a fully initialized attribute value of the kind `id` names,
    // read by the driver during the call only.
    ck(unsafe { sys::cuStreamSetAttribute(s.0, id, &v) })
}

/// [`cuCtxResetPersistingL2Cache`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__CTX.html)
pub fn reset_persisting_l2() -> DResult<()> {
    // SAFETY: no arguments; acts on the current context (bound by the caller).
    ck(unsafe { sys::cuCtxResetPersistingL2Cache() })
}

/// [`cuCtxSetLimit`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__CTX.html)`(CU_LIMIT_PERSISTING_L2_CACHE_SIZE)`
pub fn set_persisting_l2_limit(bytes: u64) -> DResult<()> {
    // SAFETY: plain values; acts on the current context (bound by the caller).
    ck(unsafe { sys::cuCtxSetLimit(sys::CUlimit::CU_LIMIT_PERSISTING_L2_CACHE_SIZE, bytes as usize) })
}

/// [`cuCtxSetLimit`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__CTX.html)`(CU_LIMIT_MALLOC_HEAP_SIZE)`
pub fn set_heap_limit(bytes: u64) -> DResult<()> {
    // SAFETY: plain values; acts on the current context (bound by the caller).
    ck(unsafe { sys::cuCtxSetLimit(sys::CUlimit::CU_LIMIT_MALLOC_HEAP_SIZE, bytes as usize) })
}

/// [`cuLaunchKernel`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EXEC.html) or
/// `cuLaunchCooperativeKernel`. `params` must match the kernel's layout (checked by the caller
/// against the driver's or the PTX's parameter list).
pub fn launch(f: Function, grid: [u32; 3], block: [u32; 3], shared: u32, s: &Stream, params: &mut super::params::Packed, cooperative: bool) -> DResult<()> {
    let kp = params.as_kernel_params();
    // SAFETY: live function and stream; `kp` is null or points to one pointer per kernel
    // parameter, each to as many bytes as that parameter's size inside `params`, alive for
    // the call (the driver copies parameter values before returning).
    ck(unsafe {
        if cooperative {
            sys::cuLaunchCooperativeKernel(f.0, grid[0], grid[1], grid[2], block[0], block[1], block[2], shared, s.0, kp)
        } else {
            sys::cuLaunchKernel(f.0, grid[0], grid[1], grid[2], block[0], block[1], block[2], shared, s.0, kp, std::ptr::null_mut())
        }
    })
}

/// A 2-D copy between unified addresses (device, managed, registered host) or from/to a
/// proxy staging buffer, with [`cuMemcpy2DAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html).
/// Both addresses are given as unified virtual addresses (`CU_MEMORYTYPE_UNIFIED`).
pub fn copy_2d(dst: u64, dpitch: u64, src: u64, spitch: u64, width: u64, height: u64, s: &Stream) -> DResult<()> {
    if height == 1 {
        // SAFETY: both ranges are live backend memory or page-locked staging (caller contract).
        return ck(unsafe { sys::cuMemcpyAsync(dst, src, width as usize, s.0) });
    }
    // Built field by field: the memory-type fields are Rust enums with no zero value, so the
    // struct must not be zero-initialized.
    let p = sys::CUDA_MEMCPY2D {
        srcXInBytes: 0,
        srcY: 0,
        srcMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_UNIFIED,
        srcHost: std::ptr::null(),
        srcDevice: src,
        srcArray: std::ptr::null_mut(),
        srcPitch: spitch as usize,
        dstXInBytes: 0,
        dstY: 0,
        dstMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_UNIFIED,
        dstHost: std::ptr::null_mut(),
        dstDevice: dst,
        dstArray: std::ptr::null_mut(),
        dstPitch: dpitch as usize,
        WidthInBytes: width as usize,
        Height: height as usize,
    };
    // SAFETY: as above; the descriptor lives for the call.
    ck(unsafe { sys::cuMemcpy2DAsync_v2(&p, s.0) })
}

/// `cuMemsetD8Async` / `cuMemsetD2D8Async`
pub fn memset(dst: u64, pitch: u64, value: u8, width: u64, height: u64, s: &Stream) -> DResult<()> {
    // SAFETY: the range lies in live backend memory (checked by the caller).
    ck(unsafe {
        if height == 1 {
            sys::cuMemsetD8Async(dst, value, width as usize, s.0)
        } else {
            sys::cuMemsetD2D8Async(dst, pitch as usize, value, width as usize, height as usize, s.0)
        }
    })
}

type HostWork = Box<dyn FnOnce() + Send>;

unsafe extern "C" fn host_trampoline(data: *mut c_void) {
    // SAFETY: `data` is the Box leaked by `launch_host_func`, passed to us exactly once.
    let work: Box<HostWork> = unsafe { Box::from_raw(data.cast()) };
    // A panic must not unwind into the driver's thread.
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(work)).is_err() {
        tracing::error!("host function panicked");
    }
}

/// [`cuLaunchHostFunc`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EXEC.html):
/// run `work` on a driver thread when the stream reaches this point; the stream waits for it.
/// `work` must not call the CUDA API.
pub fn launch_host_func(s: &Stream, work: HostWork) -> DResult<()> {
    let data = Box::into_raw(Box::new(work));
    // SAFETY: live stream; the trampoline takes ownership of `data` when it runs.
    let r = ck(unsafe { sys::cuLaunchHostFunc(s.0, Some(host_trampoline), data.cast()) });
    if r.is_err() {
        // The driver did not take it. It is leaked, not dropped: it may own a staging buffer
        // that work queued earlier on the stream still reads or writes, and freeing that
        // would be a use after free. (The call fails only on a broken stream or context.)
        let _ = data;
    }
    r
}
