//! An emulated CUDA driver: `libcuda.so.1` (SONAME) implemented on the CPU over `crum-ptx`,
//! so crum's `cuda` backend (`proxy/src/cuda/`) runs real CUDA programs where there is no
//! GPU, in tests. The proxy loads it when `CRUM_LIBCUDA` names it (`docs/gpu-backend.md`).
//!
//! It exports the driver entry points the backend calls, with their documented semantics
//! (<https://docs.nvidia.com/cuda/cuda-driver-api/>) and result codes for bad handles and
//! arguments:
//!
//! - one device (ordinal 0) with the emulated device's properties, its primary context, which
//!   a thread must make current (`cuCtxSetCurrent`) before calls that need one
//!   (`CUDA_ERROR_INVALID_CONTEXT` otherwise), and `cuInit` before anything
//!   (`CUDA_ERROR_NOT_INITIALIZED`);
//! - memory ([`mem`]): virtual memory management over real reservations, page-locked and
//!   registered host memory, module variables and the device heap — all host memory at the
//!   address handed out;
//! - modules and launches ([`module`]): the PTX of fat binaries or PTX text, run by the
//!   interpreter;
//! - streams and events ([`sched`]): asynchronous, one thread per stream, with the legacy
//!   stream's implicit synchronization, event waits and timing, host functions; sticky errors.
//!
//! What it does not do (a real driver does): machine code (cubins, the SASS of a fat binary —
//! only PTX runs), textures and surfaces, arrays, managed memory of its own
//! (`cuMemAllocManaged`), graphs, several devices or contexts, IPC, peer access. Entry points
//! it lacks are absent, so a caller that checks for a symbol sees an older driver.
//!
//! Each export decodes its arguments, calls the safe code of the modules, and encodes the
//! result; a panic becomes `CUDA_ERROR_UNKNOWN` (it must not unwind into the caller).
#![allow(unsafe_code)]

mod code;
mod mem;
mod module;
mod sched;

use std::cell::Cell;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;

use code::*;
use crum_ptx::LaunchConfig;

/// The driver's state, made at `cuInit`.
struct Driver {
    mem: mem::Memory,
    modules: module::Modules,
    sched: sched::Sched,
    persisting_l2: AtomicU64,
    stack: AtomicU64,
    printf_fifo: AtomicU64,
}

static DRIVER: OnceLock<Driver> = OnceLock::new();
static INIT: AtomicBool = AtomicBool::new(false);

/// The primary context's handle.
const CONTEXT: usize = 0xc0_0000;

thread_local! {
    /// Whether this thread made the primary context current.
    static CURRENT: Cell<bool> = const { Cell::new(false) };
}

fn driver() -> CuResult<&'static Driver> {
    if !INIT.load(Ordering::Acquire) {
        return Err(NOT_INITIALIZED);
    }
    DRIVER.get().ok_or(NOT_INITIALIZED)
}

/// The driver, for a call that needs the current context.
fn ctx() -> CuResult<&'static Driver> {
    let d = driver()?;
    if !CURRENT.with(Cell::get) {
        return Err(INVALID_CONTEXT);
    }
    Ok(d)
}

/// Run an export's body: a panic becomes `CUDA_ERROR_UNKNOWN`.
fn guard(name: &str, f: impl FnOnce() -> CuResult<()>) -> u32 {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(Ok(())) => SUCCESS,
        Ok(Err(e)) => {
            if std::env::var_os("CRUM_EMU_LIBCUDA_LOG").is_some() {
                eprintln!("crum emulated driver: {name} -> {e}");
            }
            e
        }
        Err(_) => {
            eprintln!("crum emulated driver: {name} panicked");
            UNKNOWN
        }
    }
}

/// Store `v` through an out-pointer.
fn out<T>(p: *mut T, v: T) -> CuResult<()> {
    if p.is_null() {
        return Err(INVALID_VALUE);
    }
    // SAFETY: a non-null out-pointer of the caller's, valid for a write of `T` (the API's
    // contract for every out-parameter).
    unsafe { p.write(v) };
    Ok(())
}

/// Read a struct argument (`*const T`, not NULL).
fn read_arg<T>(p: *const T) -> CuResult<T> {
    if p.is_null() {
        return Err(INVALID_VALUE);
    }
    // SAFETY: a non-null pointer to the caller's value of type `T`, valid for the call (the
    // API's contract for every struct argument).
    Ok(unsafe { p.read() })
}

/// `text` into the caller's buffer of `len` bytes, truncated, NUL-terminated.
fn write_text(dst: *mut c_char, len: usize, text: &[u8]) -> CuResult<()> {
    if dst.is_null() || len == 0 {
        return Err(INVALID_VALUE);
    }
    let n = text.len().min(len - 1);
    // SAFETY: the caller's buffer holds `len` > n bytes (API contract).
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr(), dst.cast::<u8>(), n);
        *dst.add(n) = 0;
    }
    Ok(())
}

/// A NUL-terminated name argument.
fn name_arg<'a>(p: *const c_char) -> CuResult<&'a str> {
    if p.is_null() {
        return Err(INVALID_VALUE);
    }
    // SAFETY: the API takes NUL-terminated strings; the caller keeps it alive for the call.
    unsafe { CStr::from_ptr(p) }.to_str().map_err(|_| NOT_FOUND)
}

fn device_arg(d: c_int) -> CuResult<()> {
    if d == 0 {
        Ok(())
    } else {
        Err(INVALID_DEVICE)
    }
}

/// `cuDeviceGetAttribute` values: the emulated device's properties; attributes it does not
/// describe are 0 (not supported) up to the last one CUDA 13 defines.
fn device_attribute(a: c_int) -> CuResult<i32> {
    let p = crum_proxy::emu::emu_props();
    Ok(match a {
        1 => p.max_threads_per_block,
        2..=4 => p.max_block[(a - 2) as usize],
        5..=7 => p.max_grid[(a - 5) as usize],
        8 => p.shared_per_block as i32,
        9 => p.const_mem as i32,
        10 => p.warp_size,
        11 => i32::MAX,
        12 => p.regs_per_block,
        13 => p.clock_khz,
        14 => 512,
        15 => 1,
        16 => p.multiprocessors,
        19 => 1,
        31 => p.concurrent_kernels as i32,
        33 => p.pci_bus_id,
        36 => p.mem_clock_khz,
        37 => p.mem_bus_width,
        38 => p.l2_bytes,
        39 => p.max_threads_per_sm,
        40 => 2,
        41 => 1,
        75 => p.major,
        76 => p.minor,
        81 => p.shared_per_sm as i32,
        82 => p.regs_per_sm,
        83 => p.managed as i32,
        95 => p.cooperative_launch as i32,
        97 => p.shared_per_block_optin as i32,
        102 => 1,
        106 => p.max_blocks_per_sm,
        108 => p.max_persisting_l2,
        109 => p.max_access_policy_window,
        a if (1..=150).contains(&a) => 0,
        _ => return Err(INVALID_VALUE),
    })
}

macro_rules! exports {
    ($(fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $body:block)*) => {
        $(
            #[no_mangle]
            pub extern "C" fn $name($($arg: $ty),*) -> u32 {
                guard(stringify!($name), || $body)
            }
        )*
    };
}

/// `CUmemAllocationProp` (the fields read here).
#[repr(C)]
pub struct AllocProp {
    type_: c_uint,
    handle_types: c_uint,
    loc_type: c_uint,
    loc_id: c_int,
    win32: *mut c_void,
    flags: [u8; 8],
}

/// `CUmemAccessDesc`
#[repr(C)]
pub struct AccessDesc {
    loc_type: c_uint,
    loc_id: c_int,
    flags: c_uint,
}

/// `CUDA_MEMCPY2D`
#[repr(C)]
pub struct Memcpy2D {
    src_x: usize,
    src_y: usize,
    src_type: c_uint,
    src_host: *const c_void,
    src_device: u64,
    src_array: *mut c_void,
    src_pitch: usize,
    dst_x: usize,
    dst_y: usize,
    dst_type: c_uint,
    dst_host: *mut c_void,
    dst_device: u64,
    dst_array: *mut c_void,
    dst_pitch: usize,
    width: usize,
    height: usize,
}

/// Pinned device memory on device 0: the only kind `cuMemCreate` makes here.
fn check_prop(p: *const AllocProp) -> CuResult<()> {
    if p.is_null() {
        return Err(INVALID_VALUE);
    }
    // SAFETY: a non-null pointer to the caller's `CUmemAllocationProp`, read once.
    let p = unsafe { p.read() };
    // CU_MEM_ALLOCATION_TYPE_PINNED, CU_MEM_LOCATION_TYPE_DEVICE
    if p.type_ != 1 || p.loc_type != 1 {
        return Err(INVALID_VALUE);
    }
    device_arg(p.loc_id)
}

/// Queue a copy of `height` rows of `width` bytes; ranges checked now, as the driver checks
/// its arguments at the call.
#[allow(clippy::too_many_arguments)]
fn queue_copy(d: &'static Driver, dst: u64, dpitch: u64, src: u64, spitch: u64, width: u64, height: u64, stream: usize) -> CuResult<()> {
    if height == 0 || width == 0 {
        return d.sched.check_stream(stream as u64);
    }
    if height > 1 && (dpitch < width || spitch < width) {
        return Err(INVALID_VALUE);
    }
    let span = |pitch: u64| (height - 1).checked_mul(pitch).and_then(|v| v.checked_add(width)).ok_or(INVALID_VALUE);
    d.mem.check(src, span(spitch)?, false)?;
    d.mem.check(dst, span(dpitch)?, true)?;
    d.sched
        .enqueue(
            stream as u64,
            Vec::new(),
            Box::new(move || {
                for r in 0..height {
                    mem::copy(dst + r * dpitch, src + r * spitch, width);
                }
            }),
        )
        .map(|_| ())
}

fn queue_memset(d: &'static Driver, dst: u64, pitch: u64, v: u8, width: u64, height: u64, stream: usize) -> CuResult<()> {
    if height > 1 && pitch < width {
        return Err(INVALID_VALUE);
    }
    if width == 0 || height == 0 {
        return d.sched.check_stream(stream as u64);
    }
    let span = (height - 1).checked_mul(pitch).and_then(|v| v.checked_add(width)).ok_or(INVALID_VALUE)?;
    d.mem.check(dst, span, true)?;
    d.sched
        .enqueue(
            stream as u64,
            Vec::new(),
            Box::new(move || {
                for r in 0..height {
                    mem::fill(dst + r * pitch, v, width);
                }
            }),
        )
        .map(|_| ())
}

/// `CU_LAUNCH_PARAM_END`, `CU_LAUNCH_PARAM_BUFFER_POINTER`, `CU_LAUNCH_PARAM_BUFFER_SIZE`
const PARAM_END: usize = 0;
const PARAM_BUFFER_POINTER: usize = 1;
const PARAM_BUFFER_SIZE: usize = 2;

/// The packed parameter block of a launch, from `kernelParams` (one pointer per parameter)
/// or `extra` (a buffer and its size).
fn pack_params(info: &crum_ptx::KernelInfo, kp: *mut *mut c_void, extra: *mut *mut c_void) -> CuResult<Vec<u8>> {
    let mut block = vec![0u8; info.param_bytes as usize];
    if !kp.is_null() && !extra.is_null() {
        return Err(INVALID_VALUE);
    }
    if !kp.is_null() {
        for (i, p) in info.params.iter().enumerate() {
            // SAFETY: `kernelParams` holds one pointer per kernel parameter (API contract).
            let arg = unsafe { *kp.add(i) };
            if arg.is_null() {
                return Err(INVALID_VALUE);
            }
            let at = p.offset as usize;
            // SAFETY: each points to a value of its parameter's size (API contract); the
            // destination lies in `block` (the layout's offsets and sizes fit param_bytes).
            unsafe { std::ptr::copy_nonoverlapping(arg.cast::<u8>(), block[at..at + p.size as usize].as_mut_ptr(), p.size as usize) };
        }
        return Ok(block);
    }
    if !extra.is_null() {
        let (mut buf, mut size) = (std::ptr::null_mut::<c_void>(), None);
        let mut i = 0;
        loop {
            // SAFETY: `extra` is a PARAM_END-terminated list of (key, value) pointers.
            let key = unsafe { *extra.add(i) } as usize;
            if key == PARAM_END {
                break;
            }
            // SAFETY: as above: a key is followed by its value.
            let val = unsafe { *extra.add(i + 1) };
            match key {
                PARAM_BUFFER_POINTER => buf = val,
                // SAFETY: the value of BUFFER_SIZE points to a size_t.
                PARAM_BUFFER_SIZE if !val.is_null() => size = Some(unsafe { *val.cast::<usize>() }),
                _ => return Err(INVALID_VALUE),
            }
            i += 2;
        }
        let size = size.ok_or(INVALID_VALUE)?;
        if buf.is_null() || size < block.len() {
            return Err(INVALID_VALUE);
        }
        // SAFETY: the buffer holds `size` ≥ block.len() bytes (API contract, checked size).
        unsafe { std::ptr::copy_nonoverlapping(buf.cast::<u8>(), block.as_mut_ptr(), block.len()) };
        return Ok(block);
    }
    if info.params.is_empty() {
        Ok(block)
    } else {
        Err(INVALID_VALUE)
    }
}

#[allow(clippy::too_many_arguments)]
fn launch(f: usize, grid: [c_uint; 3], block: [c_uint; 3], shared: c_uint, stream: usize, kp: *mut *mut c_void, extra: *mut *mut c_void, cooperative: bool) -> CuResult<()> {
    let d = ctx()?;
    d.sched.sticky()?;
    let func = d.modules.func(f as u64)?;
    d.sched.check_stream(stream as u64)?;
    let cfg = LaunchConfig { grid, block, dynamic_shared_bytes: shared, cooperative };
    d.modules.check_launch(&func, &cfg)?;
    let params = pack_params(&func.info, kp, extra)?;
    d.sched
        .enqueue(
            stream as u64,
            Vec::new(),
            Box::new(move || {
                if let Err(e) = d.modules.run(&func, &cfg, &params, &d.mem) {
                    d.sched.report(e);
                }
            }),
        )
        .map(|_| ())
}

type HostFn = Option<unsafe extern "C" fn(*mut c_void)>;

/// The host function's argument, sent to the stream's thread.
struct UserData(*mut c_void);
// SAFETY: an opaque value of the caller's, handed back to its function on the stream's
// thread as `cuLaunchHostFunc` documents.
unsafe impl Send for UserData {}

exports! {
    fn cuInit(flags: c_uint) {
        if flags != 0 {
            return Err(INVALID_VALUE);
        }
        let d = DRIVER.get_or_init(|| Driver {
            mem: mem::Memory::new(),
            modules: module::Modules::new(),
            sched: sched::Sched::new(),
            persisting_l2: AtomicU64::new(0),
            stack: AtomicU64::new(1024),
            printf_fifo: AtomicU64::new(8650752),
        });
        d.sched.start();
        INIT.store(true, Ordering::Release);
        Ok(())
    }

    fn cuDriverGetVersion(v: *mut c_int) {
        out(v, 13000)
    }

    fn cuGetErrorName(e: c_uint, s: *mut *const c_char) {
        let name: &'static CStr = match e {
            0 => c"CUDA_SUCCESS",
            1 => c"CUDA_ERROR_INVALID_VALUE",
            2 => c"CUDA_ERROR_OUT_OF_MEMORY",
            3 => c"CUDA_ERROR_NOT_INITIALIZED",
            101 => c"CUDA_ERROR_INVALID_DEVICE",
            201 => c"CUDA_ERROR_INVALID_CONTEXT",
            400 => c"CUDA_ERROR_INVALID_HANDLE",
            500 => c"CUDA_ERROR_NOT_FOUND",
            600 => c"CUDA_ERROR_NOT_READY",
            700 => c"CUDA_ERROR_ILLEGAL_ADDRESS",
            _ => c"CUDA_ERROR_UNKNOWN",
        };
        out(s, name.as_ptr())
    }

    fn cuDeviceGetCount(n: *mut c_int) {
        driver()?;
        out(n, 1)
    }

    fn cuDeviceGet(dev: *mut c_int, ordinal: c_int) {
        driver()?;
        device_arg(ordinal)?;
        out(dev, 0)
    }

    fn cuDeviceGetName(name: *mut c_char, len: c_int, dev: c_int) {
        driver()?;
        device_arg(dev)?;
        write_text(name, len.max(0) as usize, b"crum emulated driver (sm_80)")
    }

    fn cuDeviceGetAttribute(v: *mut c_int, attr: c_int, dev: c_int) {
        driver()?;
        device_arg(dev)?;
        out(v, device_attribute(attr)?)
    }

    fn cuDeviceTotalMem_v2(bytes: *mut usize, dev: c_int) {
        driver()?;
        device_arg(dev)?;
        out(bytes, mem::total_mem() as usize)
    }

    fn cuDeviceGetUuid(uuid: *mut [u8; 16], dev: c_int) {
        driver()?;
        device_arg(dev)?;
        out(uuid, *b"crum-emu-libcuda")
    }

    fn cuDeviceGetUuid_v2(uuid: *mut [u8; 16], dev: c_int) {
        driver()?;
        device_arg(dev)?;
        out(uuid, *b"crum-emu-libcuda")
    }

    fn cuDevicePrimaryCtxRetain(c: *mut usize, dev: c_int) {
        driver()?;
        device_arg(dev)?;
        out(c, CONTEXT)
    }

    fn cuDevicePrimaryCtxRelease_v2(dev: c_int) {
        driver()?;
        device_arg(dev)
    }

    fn cuCtxSetCurrent(c: usize) {
        driver()?;
        match c {
            0 => CURRENT.with(|k| k.set(false)),
            CONTEXT => CURRENT.with(|k| k.set(true)),
            _ => return Err(INVALID_CONTEXT),
        }
        Ok(())
    }

    fn cuCtxGetCurrent(c: *mut usize) {
        driver()?;
        out(c, if CURRENT.with(Cell::get) { CONTEXT } else { 0 })
    }

    fn cuCtxSynchronize() {
        ctx()?.sched.sync_all()
    }

    fn cuCtxSetLimit(limit: c_uint, value: usize) {
        let d = ctx()?;
        let v = value as u64;
        match limit {
            0 => d.stack.store(v, Ordering::Relaxed),
            1 => d.printf_fifo.store(v, Ordering::Relaxed),
            2 => d.mem.set_heap_limit(v),
            3..=5 => {}
            6 => {
                // Clamped to the maximum, as the driver does.
                let max = crum_proxy::emu::emu_props().max_persisting_l2 as u64;
                d.persisting_l2.store(v.min(max), Ordering::Relaxed);
            }
            _ => return Err(INVALID_VALUE),
        }
        Ok(())
    }

    fn cuCtxGetLimit(value: *mut usize, limit: c_uint) {
        let d = ctx()?;
        let v = match limit {
            0 => d.stack.load(Ordering::Relaxed),
            1 => d.printf_fifo.load(Ordering::Relaxed),
            2 => d.mem.heap_limit(),
            3 => 2,
            4 => 2048,
            5 => 64,
            6 => d.persisting_l2.load(Ordering::Relaxed),
            _ => return Err(INVALID_VALUE),
        };
        out(value, v as usize)
    }

    fn cuCtxResetPersistingL2Cache() {
        ctx().map(|_| ())
    }

    fn cuCtxGetStreamPriorityRange(least: *mut c_int, greatest: *mut c_int) {
        ctx()?;
        if !least.is_null() {
            out(least, 0)?;
        }
        if !greatest.is_null() {
            out(greatest, -5)?;
        }
        Ok(())
    }

    fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) {
        let (f, t) = ctx()?.mem.info();
        out(free, f as usize)?;
        out(total, t as usize)
    }

    fn cuMemGetAllocationGranularity(g: *mut usize, prop: *const AllocProp, option: c_uint) {
        driver()?;
        check_prop(prop)?;
        if option > 1 {
            return Err(INVALID_VALUE);
        }
        out(g, mem::GRANULE as usize)
    }

    fn cuMemAddressReserve(ptr: *mut u64, size: usize, align: usize, addr: u64, flags: u64) {
        let d = driver()?;
        if flags != 0 || ptr.is_null() {
            return Err(INVALID_VALUE);
        }
        out(ptr, d.mem.reserve(size as u64, align as u64, addr)?)
    }

    fn cuMemAddressFree(ptr: u64, size: usize) {
        driver()?.mem.address_free(ptr, size as u64)
    }

    fn cuMemCreate(handle: *mut u64, size: usize, prop: *const AllocProp, flags: u64) {
        let d = driver()?;
        check_prop(prop)?;
        if flags != 0 || handle.is_null() {
            return Err(INVALID_VALUE);
        }
        out(handle, d.mem.create(size as u64)?)
    }

    fn cuMemRelease(handle: u64) {
        driver()?.mem.release(handle)
    }

    fn cuMemMap(ptr: u64, size: usize, offset: usize, handle: u64, flags: u64) {
        let d = driver()?;
        if flags != 0 {
            return Err(INVALID_VALUE);
        }
        d.mem.map(ptr, size as u64, offset as u64, handle)
    }

    fn cuMemUnmap(ptr: u64, size: usize) {
        let d = driver()?;
        // Work still queued may use the range; the driver's unmap waits for the device.
        d.sched.sync_all().ok();
        d.mem.unmap(ptr, size as u64)
    }

    fn cuMemSetAccess(ptr: u64, size: usize, desc: *const AccessDesc, count: usize) {
        let d = driver()?;
        if desc.is_null() || count == 0 {
            return Err(INVALID_VALUE);
        }
        let mut access = None;
        for i in 0..count {
            // `desc` points to `count` descriptors (API contract).
            let a = read_arg(desc.wrapping_add(i))?;
            if a.loc_type != 1 {
                return Err(INVALID_VALUE);
            }
            device_arg(a.loc_id)?;
            access = Some(a.flags);
        }
        d.mem.set_access(ptr, size as u64, access.expect("count > 0"))
    }

    fn cuMemHostAlloc(pp: *mut *mut c_void, size: usize, flags: c_uint) {
        let d = ctx()?;
        if flags & !0xf != 0 {
            return Err(INVALID_VALUE);
        }
        out(pp, d.mem.host_alloc(size as u64)? as *mut c_void)
    }

    fn cuMemFreeHost(p: *mut c_void) {
        ctx()?.mem.host_free(p as u64)
    }

    fn cuMemHostRegister_v2(p: *mut c_void, size: usize, flags: c_uint) {
        let d = ctx()?;
        if flags & !0xf != 0 {
            return Err(INVALID_VALUE);
        }
        // CU_MEMHOSTREGISTER_READ_ONLY
        d.mem.host_register(p as u64, size as u64, flags & 8 != 0)
    }

    fn cuMemHostUnregister(p: *mut c_void) {
        ctx()?.mem.host_unregister(p as u64)
    }

    fn cuMemcpyAsync(dst: u64, src: u64, n: usize, stream: usize) {
        let d = ctx()?;
        d.sched.sticky()?;
        queue_copy(d, dst, 0, src, 0, n as u64, 1, stream)
    }

    fn cuMemcpy2DAsync_v2(c: *const Memcpy2D, stream: usize) {
        let d = ctx()?;
        d.sched.sticky()?;
        let c = read_arg(c)?;
        // CU_MEMORYTYPE_HOST 1, DEVICE 2, ARRAY 3, UNIFIED 4
        let base = |t: c_uint, host: u64, dev: u64| match t {
            1 => Ok(host),
            2 | 4 => Ok(dev),
            3 => Err(NOT_SUPPORTED),
            _ => Err(INVALID_VALUE),
        };
        let src = base(c.src_type, c.src_host as u64, c.src_device)?;
        let dst = base(c.dst_type, c.dst_host as u64, c.dst_device)?;
        let at = |b: u64, x: usize, y: usize, pitch: usize| (y as u64).checked_mul(pitch as u64).and_then(|o| o.checked_add(x as u64)).and_then(|o| o.checked_add(b)).ok_or(INVALID_VALUE);
        let s = at(src, c.src_x, c.src_y, c.src_pitch)?;
        let t = at(dst, c.dst_x, c.dst_y, c.dst_pitch)?;
        queue_copy(d, t, c.dst_pitch as u64, s, c.src_pitch as u64, c.width as u64, c.height as u64, stream)
    }

    fn cuMemsetD8Async(dst: u64, v: u8, n: usize, stream: usize) {
        let d = ctx()?;
        d.sched.sticky()?;
        queue_memset(d, dst, 0, v, n as u64, 1, stream)
    }

    fn cuMemsetD2D8Async(dst: u64, pitch: usize, v: u8, width: usize, height: usize, stream: usize) {
        let d = ctx()?;
        d.sched.sticky()?;
        queue_memset(d, dst, pitch as u64, v, width as u64, height as u64, stream)
    }

    fn cuModuleLoadData(m: *mut usize, image: *const c_void) {
        let d = ctx()?;
        if image.is_null() || m.is_null() {
            return Err(INVALID_VALUE);
        }
        let bytes = image_bytes(image.cast())?;
        out(m, d.modules.load(bytes, &d.mem)? as usize)
    }

    fn cuModuleUnload(m: usize) {
        let d = ctx()?;
        // Kernels of the module still queued finish first.
        d.sched.sync_all().ok();
        d.modules.unload(m as u64, &d.mem)
    }

    fn cuModuleGetFunction(f: *mut usize, m: usize, name: *const c_char) {
        let d = ctx()?;
        let name = name_arg(name)?;
        out(f, d.modules.function(m as u64, name)? as usize)
    }

    fn cuModuleGetFunctionCount(n: *mut c_uint, m: usize) {
        let d = ctx()?;
        out(n, d.modules.functions(m as u64)?.len() as c_uint)
    }

    fn cuModuleEnumerateFunctions(fs: *mut usize, n: c_uint, m: usize) {
        let d = ctx()?;
        if fs.is_null() {
            return Err(INVALID_VALUE);
        }
        for (i, f) in d.modules.functions(m as u64)?.into_iter().take(n as usize).enumerate() {
            // The caller's array holds `n` handles; i < n.
            out(fs.wrapping_add(i), f as usize)?;
        }
        Ok(())
    }

    fn cuModuleGetGlobal_v2(p: *mut u64, size: *mut usize, m: usize, name: *const c_char) {
        let d = ctx()?;
        let (a, n) = d.modules.global(m as u64, name_arg(name)?)?;
        // Either out-pointer may be NULL (documented: "ignored").
        if !p.is_null() {
            out(p, a)?;
        }
        if !size.is_null() {
            out(size, n as usize)?;
        }
        Ok(())
    }

    fn cuFuncGetName(name: *mut *const c_char, f: usize) {
        let d = ctx()?;
        let func = d.modules.func(f as u64)?;
        // The table keeps the string until the module is unloaded, as long as the driver
        // documents it to live.
        out(name, func.name.as_ptr())
    }

    fn cuFuncGetParamInfo(f: usize, index: usize, offset: *mut usize, size: *mut usize) {
        let d = ctx()?;
        let func = d.modules.func(f as u64)?;
        let p = func.info.params.get(index).ok_or(INVALID_VALUE)?;
        out(offset, p.offset as usize)?;
        if !size.is_null() {
            out(size, p.size as usize)?;
        }
        Ok(())
    }

    fn cuFuncGetAttribute(v: *mut c_int, attr: c_uint, f: usize) {
        let d = ctx()?;
        let func = d.modules.func(f as u64)?;
        out(v, d.modules.attribute(&func, attr)?)
    }

    fn cuFuncSetAttribute(f: usize, attr: c_uint, v: c_int) {
        let d = ctx()?;
        let func = d.modules.func(f as u64)?;
        d.modules.set_attribute(&func, attr, v)
    }

    fn cuLaunchKernel(
        f: usize, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint,
        shared: c_uint, stream: usize, kp: *mut *mut c_void, extra: *mut *mut c_void,
    ) {
        launch(f, [gx, gy, gz], [bx, by, bz], shared, stream, kp, extra, false)
    }

    fn cuLaunchCooperativeKernel(
        f: usize, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint,
        shared: c_uint, stream: usize, kp: *mut *mut c_void,
    ) {
        launch(f, [gx, gy, gz], [bx, by, bz], shared, stream, kp, std::ptr::null_mut(), true)
    }

    fn cuLaunchHostFunc(stream: usize, func: HostFn, data: *mut c_void) {
        let d = ctx()?;
        let func = func.ok_or(INVALID_VALUE)?;
        let data = UserData(data);
        d.sched
            .enqueue(
                stream as u64,
                Vec::new(),
                Box::new(move || {
                    let data = data;
                    // SAFETY: the caller's function and argument, called once when the stream
                    // reaches it (API contract).
                    unsafe { func(data.0) }
                }),
            )
            .map(|_| ())
    }

    fn cuStreamCreateWithPriority(s: *mut usize, flags: c_uint, priority: c_int) {
        let d = ctx()?;
        // CU_STREAM_DEFAULT 0, CU_STREAM_NON_BLOCKING 1
        if flags > 1 || s.is_null() {
            return Err(INVALID_VALUE);
        }
        // Clamped to [greatest, least] = [-5, 0], as the driver does.
        out(s, d.sched.create(flags == 1, priority.clamp(-5, 0)) as usize)
    }

    fn cuStreamCreate(s: *mut usize, flags: c_uint) {
        let d = ctx()?;
        if flags > 1 || s.is_null() {
            return Err(INVALID_VALUE);
        }
        out(s, d.sched.create(flags == 1, 0) as usize)
    }

    fn cuStreamGetPriority(s: usize, p: *mut c_int) {
        out(p, ctx()?.sched.priority(s as u64)?)
    }

    fn cuStreamDestroy_v2(s: usize) {
        ctx()?.sched.destroy(s as u64)
    }

    fn cuStreamQuery(s: usize) {
        if ctx()?.sched.query(s as u64)? {
            Ok(())
        } else {
            Err(NOT_READY)
        }
    }

    fn cuStreamSynchronize(s: usize) {
        ctx()?.sched.sync_stream(s as u64)
    }

    fn cuStreamWaitEvent(s: usize, e: usize, flags: c_uint) {
        let d = ctx()?;
        // CU_EVENT_WAIT_DEFAULT 0, CU_EVENT_WAIT_EXTERNAL 1
        if flags > 1 {
            return Err(INVALID_VALUE);
        }
        d.sched.wait_event(s as u64, e as u64)
    }

    fn cuStreamSetAttribute(s: usize, attr: c_uint, value: *const c_void) {
        let d = ctx()?;
        d.sched.check_stream(s as u64)?;
        if value.is_null() {
            return Err(INVALID_VALUE);
        }
        match attr {
            // CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW: base, bytes, hitRatio, hitProp, missProp
            1 => {
                // SAFETY: the value is a CUaccessPolicyWindow for this attribute (API contract).
                let (bytes, ratio, hit, miss) = unsafe {
                    let b = value.cast::<u8>();
                    (b.add(8).cast::<usize>().read(), b.add(16).cast::<f32>().read(), b.add(20).cast::<u32>().read(), b.add(24).cast::<u32>().read())
                };
                let max = crum_proxy::emu::emu_props().max_access_policy_window as usize;
                if bytes > max || !(0.0..=1.0).contains(&ratio) || hit > 2 || miss > 2 {
                    return Err(INVALID_VALUE);
                }
                Ok(())
            }
            // synchronization policy, memory sync domain map, memory sync domain
            3 | 9 | 10 => Ok(()),
            _ => Err(INVALID_VALUE),
        }
    }

    fn cuEventCreate(e: *mut usize, flags: c_uint) {
        let d = ctx()?;
        // CU_EVENT_BLOCKING_SYNC 1, DISABLE_TIMING 2, INTERPROCESS 4 (needs DISABLE_TIMING)
        if flags & !7 != 0 || (flags & 4 != 0 && flags & 2 == 0) {
            return Err(INVALID_VALUE);
        }
        out(e, d.sched.event_create(flags) as usize)
    }

    fn cuEventDestroy_v2(e: usize) {
        ctx()?.sched.event_destroy(e as u64)
    }

    fn cuEventRecord(e: usize, s: usize) {
        ctx()?.sched.event_record(e as u64, s as u64)
    }

    fn cuEventQuery(e: usize) {
        if ctx()?.sched.event_query(e as u64)? {
            Ok(())
        } else {
            Err(NOT_READY)
        }
    }

    fn cuEventSynchronize(e: usize) {
        ctx()?.sched.event_sync(e as u64)
    }

    fn cuEventElapsedTime(ms: *mut f32, a: usize, b: usize) {
        let d = ctx()?;
        out(ms, d.sched.elapsed(a as u64, b as u64)?)
    }
}

/// The bytes of a module image given by address only: a fat binary's extent comes from its
/// header (and those of fat binaries back to back after it, see [`module::image_ptx`]), PTX
/// text ends at its NUL, a cubin's extent from its ELF header.
fn image_bytes<'a>(p: *const u8) -> CuResult<&'a [u8]> {
    // SAFETY: `cuModuleLoadData` takes a pointer to a complete image; reading its first 16
    // bytes (any image is longer) is within it.
    let head = unsafe { std::slice::from_raw_parts(p, 16) };
    if head.starts_with(&0xBA55_ED50u32.to_le_bytes()) {
        let mut len = 0usize;
        loop {
            if len > 0 {
                if !len.is_multiple_of(8) {
                    break;
                }
                // SAFETY: `len` is the end of the fat binaries read so far, within the image;
                // a following one is looked for only at an 8-byte aligned end (the caller's
                // allocation holds whole words: the proxy's copy is a Vec<u64>).
                let next = unsafe { std::slice::from_raw_parts(p.add(len), 4) };
                if next != 0xBA55_ED50u32.to_le_bytes() {
                    break;
                }
            }
            // SAFETY: a fat binary header (magic checked) is 16 bytes.
            let h = unsafe { std::slice::from_raw_parts(p.add(len), 16) };
            len += crum_ptx::fatbin::fatbin_total_size(h).map_err(|_| INVALID_IMAGE)?;
        }
        // SAFETY: the fat binaries' headers say they span `len` bytes.
        return Ok(unsafe { std::slice::from_raw_parts(p, len) });
    }
    if head.starts_with(b"\x7fELF") {
        return Ok(&[0x7f, b'E', b'L', b'F']);
    }
    // SAFETY: PTX text is NUL-terminated (API contract).
    Ok(unsafe { CStr::from_ptr(p.cast()) }.to_bytes())
}
