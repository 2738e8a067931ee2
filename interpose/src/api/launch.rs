//! Hidden registration entry points (what nvcc's generated host code calls), kernel launches
//! on both the CUDA 12 (`cudaLaunchKernel`) and CUDA 13 (`__cudaGetKernel` +
//! `__cudaLaunchKernel`) paths, function attributes and occupancy.
#![allow(unsafe_code)]

use std::ffi::{c_char, c_void};
use std::sync::{Arc, Mutex, OnceLock};

use crum_wire::{cuda, Body, Request};

use crate::abi_gen::*;
use crate::client::{call, send};
use crate::errors::{guard, CudaResult};
use crate::ffi::*;
use crate::state::*;

const FATBIN_WRAPPER_MAGIC: u32 = 0x466243B1;
const FATBIN_MAGIC: u32 = 0xBA55ED50;

/// A registered fat binary, loaded into the proxy on first use (CUDA's lazy loading).
pub struct LazyModule {
    addr: u64,
    len: u64,
    id: OnceLock<CudaResult<u64>>,
}

static LAZY: Mutex<Vec<Arc<LazyModule>>> = Mutex::new(Vec::new());

/// The proxy module for registration index `idx`, loading it on first use.
pub fn load(idx: usize) -> CudaResult<u64> {
    let m = LAZY
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(idx)
        .cloned()
        .ok_or(cuda::ERROR_INVALID_RESOURCE_HANDLE)?;
    *m.id.get_or_init(|| {
        if m.len == 0 {
            return Err(cuda::ERROR_INVALID_KERNEL_IMAGE);
        }
        match call(&Request::LoadModule {
            addr: m.addr,
            len: m.len,
        })? {
            Body::Value(id) => Ok(id),
            _ => Err(cuda::ERROR_UNKNOWN),
        }
    })
}

/// Wrapper version of a program built with `-rdc=true`: `filename_or_fatbins` is the
/// NULL-terminated array of the objects' relocatable fat binaries (`fatbinary_section.h`).
const FATBIN_LINK_VERSION: u32 = 2;
/// More relocatable objects than this in one program are not believed (untrusted input).
const MAX_PRELINKED: usize = 1 << 16;
/// The proxy loads no module image larger than this.
const MAX_IMAGE: u64 = 1 << 30;

/// Address and size of the fat binary at `data` (0 size when it is not one we understand).
pub(crate) fn fatbin_at(data: u64) -> (u64, u64) {
    if data == 0 {
        return (0, 0);
    }
    // Read through the kernel: the pointer comes from the program's wrapper.
    let Ok(head) = checked_read(data, 16) else {
        return (0, 0);
    };
    let u = |o: usize, n: usize| head[o..o + n].iter().rev().fold(0u64, |v, &b| v << 8 | b as u64);
    if u(0, 4) != FATBIN_MAGIC as u64 {
        return (0, 0);
    }
    match u(6, 2).checked_add(u(8, 8)) {
        Some(total) => (data, total),
        None => (0, 0),
    }
}

/// The module image the nvcc wrapper describes: (address, size) of its fat binary, or 0 size
/// when it is not one we understand. A program built with separate compilation (`-rdc=true`)
/// registers only the device-link fat binary (SASS of the linked program, no PTX); its
/// objects' relocatable fat binaries, which carry the PTX, hang off the wrapper. The image is
/// then a copy of them all back to back, the device-link one first (what a GPU loads), in
/// memory that lives as long as the program: the proxy reads it now, and again from the
/// restored process after a restart.
pub(crate) fn module_image(wrapper: *const u8) -> (u64, u64) {
    let (Ok(magic), Ok(version), Ok(data), Ok(prelinked)) = (
        field::<u32>(wrapper, 0),
        field::<u32>(wrapper, 4),
        field::<u64>(wrapper, 8),
        field::<u64>(wrapper, 16),
    ) else {
        return (0, 0);
    };
    if magic != FATBIN_WRAPPER_MAGIC {
        return (0, 0);
    }
    let main = fatbin_at(data);
    if version != FATBIN_LINK_VERSION || prelinked == 0 || main.1 == 0 {
        return main;
    }
    let mut parts = vec![main];
    for i in 0..MAX_PRELINKED {
        // The list, like the fat binaries, is read through the kernel: a wrong pointer in a
        // hand-made wrapper must not fault the program.
        let Some(at) = (i as u64).checked_mul(8).and_then(|o| prelinked.checked_add(o)) else { break };
        let Ok(word) = checked_read(at, 8) else { break };
        let p = u64::from_le_bytes(word.try_into().unwrap_or([0; 8]));
        if p == 0 {
            break;
        }
        let part = fatbin_at(p);
        if part.1 == 0 {
            tracing::warn!(object = i, "a relocatable object's fat binary is not one crum reads; skipped");
            continue;
        }
        parts.push(part);
    }
    let total = parts.iter().try_fold(0u64, |t, p| t.checked_add(p.1)).filter(|&t| t <= MAX_IMAGE);
    let Some(total) = total else {
        tracing::warn!("the program's relocatable fat binaries claim more than {MAX_IMAGE} bytes; not loaded");
        return main;
    };
    let mut image = Vec::with_capacity(total as usize);
    for (addr, len) in parts {
        // Read through the kernel: sizes come from headers, and a wrong one must not fault.
        match checked_read(addr, len) {
            Ok(bytes) => image.extend_from_slice(&bytes),
            Err(_) => {
                tracing::warn!(addr, len, "a relocatable fat binary is not readable; the program's kernels are not loaded");
                return main;
            }
        }
    }
    let image = Box::leak(image.into_boxed_slice());
    (image.as_ptr() as u64, image.len() as u64)
}

fn handle_index(handle: *mut *mut c_void) -> CudaResult<usize> {
    if handle.is_null() {
        return Err(cuda::ERROR_INVALID_RESOURCE_HANDLE);
    }
    Ok(read(handle as *const usize)?.wrapping_sub(1))
}

#[no_mangle]
pub extern "C" fn __cudaRegisterFatBinary(fat_cubin: *mut c_void) -> *mut *mut c_void {
    let r = std::panic::catch_unwind(|| {
        let (addr, len) = module_image(fat_cubin as *const u8);
        let mut g = LAZY.lock().unwrap_or_else(|p| p.into_inner());
        g.push(Arc::new(LazyModule {
            addr,
            len,
            id: OnceLock::new(),
        }));
        let idx = g.len() - 1;
        // The handle is a heap cell holding index + 1 (never freed: modules live as long as
        // the program, and the generated code keeps the handle in a static).
        Box::into_raw(Box::new(idx + 1)) as *mut *mut c_void
    });
    r.unwrap_or(std::ptr::null_mut())
}

/// A module the program loads itself (`cudaLibraryLoadData`): `image` is kept for the life
/// of the program (a restart loads it again from the restored memory), registered like a fat
/// binary. Returns its registration index.
pub(crate) fn register_image(image: Vec<u8>) -> usize {
    let image: &'static [u8] = Box::leak(image.into_boxed_slice());
    let mut g = LAZY.lock().unwrap_or_else(|p| p.into_inner());
    g.push(Arc::new(LazyModule { addr: image.as_ptr() as u64, len: image.len() as u64, id: OnceLock::new() }));
    g.len() - 1
}

/// Whether the program registered a fat binary (a CUDA program, even one without kernels).
/// Never blocks: a held lock counts as "yes".
pub fn has_modules() -> bool {
    LAZY.try_lock().map(|g| !g.is_empty()).unwrap_or(true)
}

#[no_mangle]
pub extern "C" fn __cudaRegisterFatBinaryEnd(_handle: *mut *mut c_void) {}

#[no_mangle]
pub extern "C" fn __cudaUnregisterFatBinary(_handle: *mut *mut c_void) {
    // Runs from atexit, once per module: like CUDA's context teardown, let queued device work
    // finish so its printf output reaches stdout; the proxy drops everything else when the
    // program ends.
    static ONCE: std::sync::Once = std::sync::Once::new();
    let _ = std::panic::catch_unwind(|| {
        ONCE.call_once(|| {
            if crate::client::connected() {
                let _ = call(&Request::Flush);
            }
        })
    });
}

#[no_mangle]
pub extern "C" fn __cudaRegisterFunction(
    handle: *mut *mut c_void,
    host_fun: *const c_char,
    _device_fun: *mut c_char,
    device_name: *const c_char,
    _thread_limit: i32,
    _tid: *mut c_void,
    _bid: *mut c_void,
    _bdim: *mut c_void,
    _gdim: *mut c_void,
    _wsize: *mut i32,
) {
    let _ = std::panic::catch_unwind(|| {
        let (Ok(module), Some(name)) = (handle_index(handle), cstr(device_name)) else {
            return;
        };
        let rec = Arc::new(FuncRec {
            module,
            name,
            info: Mutex::new(None),
        });
        state()
            .funcs
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(host_fun as usize, rec);
    });
}

#[no_mangle]
pub extern "C" fn __cudaRegisterVar(
    handle: *mut *mut c_void,
    host_var: *mut c_char,
    _device_address: *mut c_char,
    device_name: *const c_char,
    _ext: i32,
    size: usize,
    _constant: i32,
    _global: i32,
) {
    let _ = std::panic::catch_unwind(|| {
        let (Ok(module), Some(name)) = (handle_index(handle), cstr(device_name)) else {
            return;
        };
        let rec = Arc::new(VarRec {
            module,
            name,
            size: size as u64,
            addr: OnceLock::new(),
        });
        state()
            .vars
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(host_var as usize, rec);
    });
}

#[no_mangle]
pub extern "C" fn __cudaRegisterManagedVar(
    handle: *mut *mut c_void,
    host_var_ptr: *mut *mut c_void,
    _device_address: *mut c_char,
    device_name: *const c_char,
    _ext: i32,
    size: usize,
    _constant: i32,
    _global: i32,
) {
    let _ = std::panic::catch_unwind(|| {
        let (Ok(module), Some(name)) = (handle_index(handle), cstr(device_name)) else {
            return;
        };
        let rec = Arc::new(VarRec {
            module,
            name: name.clone(),
            size: size as u64,
            addr: OnceLock::new(),
        });
        state()
            .vars
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(host_var_ptr as usize, rec.clone());
        // The host code reaches a __managed__ variable through *host_var_ptr: point it at a
        // managed allocation shared with the proxy, holding the variable's initial value.
        let r: CudaResult<()> = (|| {
            let id = load(module)?;
            let Body::Alloc {
                addr,
                memfd: Some(fd),
            } = call(&Request::ManagedVar { module: id, name })?
            else {
                return Err(cuda::ERROR_UNKNOWN);
            };
            crate::managed::register(addr, size as u64, fd, crate::managed::Init::FromProxy)?;
            add_alloc(addr, size as u64, MemKind::Managed, 1);
            let _ = rec.addr.set(addr);
            out(host_var_ptr, addr as *mut c_void)
        })();
        if let Err(c) = r {
            // The module could not be loaded (its kernels fail with the same error at every
            // launch). Point the variable at zeroed host memory so host code touching it does
            // not crash before the program can report the error.
            tracing::error!(code = c, "cannot set up a __managed__ variable");
            // SAFETY: calloc returns zeroed memory or NULL; it is never freed (like the var).
            let fallback = unsafe { libc::calloc(1, size.max(1)) };
            let _ = out(host_var_ptr, fallback);
        }
    });
}

#[no_mangle]
pub extern "C" fn __cudaRegisterHostVar(
    _h: *mut *mut c_void,
    _s: *const c_char,
    _n: *const c_char,
    _v: *mut c_void,
) {
    crate::errors::unsupported("__cudaRegisterHostVar");
}

#[no_mangle]
pub extern "C" fn __cudaRegisterUnifiedTable(_h: *mut *mut c_void, _t: *mut c_void) {
    crate::errors::unsupported("__cudaRegisterUnifiedTable");
}

#[no_mangle]
pub extern "C" fn __cudaInitModule(_handle: *mut *mut c_void) -> c_char {
    1
}

#[no_mangle]
pub extern "C" fn __cudaPushCallConfiguration(
    grid: Dim3,
    block: Dim3,
    shared: usize,
    stream: *mut c_void,
) -> u32 {
    let cfg = CallConfig {
        grid: grid.arr(),
        block: block.arr(),
        shared,
        stream: stream as u64,
    };
    match CONFIGS.try_with(|c| c.borrow_mut().push(cfg)) {
        Ok(()) => 0,
        Err(_) => cuda::ERROR_UNKNOWN,
    }
}

#[no_mangle]
pub extern "C" fn __cudaPopCallConfiguration(
    grid: *mut Dim3,
    block: *mut Dim3,
    shared: *mut usize,
    stream: *mut c_void,
) -> u32 {
    guard("__cudaPopCallConfiguration", || {
        let cfg = CONFIGS
            .try_with(|c| c.borrow_mut().pop())
            .ok()
            .flatten()
            .ok_or(cuda::ERROR_MISSING_CONFIGURATION)?;
        let d = |a: [u32; 3]| Dim3 {
            x: a[0],
            y: a[1],
            z: a[2],
        };
        out(grid, d(cfg.grid))?;
        out(block, d(cfg.block))?;
        out(shared, cfg.shared)?;
        out(stream as *mut u64, cfg.stream)
    })
}

/// Validate and queue one launch (or record it when the stream captures).
#[allow(clippy::too_many_arguments)]
pub fn launch(
    host_fun: usize,
    grid: Dim3,
    block: Dim3,
    args: *mut *mut c_void,
    shared: usize,
    stream: u64,
    ptsz: bool,
    cooperative: bool,
) -> CudaResult<()> {
    launch_extra(host_fun, grid, block, args, std::ptr::null_mut(), shared, stream, ptsz, cooperative)
}

/// [`launch`] with the driver API's `extra` (`CU_LAUNCH_PARAM_BUFFER_POINTER`…) where `args`
/// is null (`cuLaunchKernel`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn launch_extra(
    host_fun: usize,
    grid: Dim3,
    block: Dim3,
    args: *mut *mut c_void,
    extra: *mut *mut c_void,
    shared: usize,
    stream: u64,
    ptsz: bool,
    cooperative: bool,
) -> CudaResult<()> {
    let (k, func) = prepare(host_fun, grid, block, args, extra, shared, cooperative)?;
    let stream = resolve_stream(stream, ptsz)?;
    if crate::capture::any() {
        let mut node = Some(k);
        if crate::capture::record(stream, || {
            Ok(crate::graph::NodeKind::Kernel(node.take().ok_or(cuda::ERROR_UNKNOWN)?))
        })? {
            return Ok(());
        }
        let Some(k) = node else { return Err(cuda::ERROR_UNKNOWN) };
        return issue(&k, stream);
    }
    // The common path: the parameter block moves into the request.
    send(&Request::Launch {
        func,
        grid: k.grid,
        block: k.block,
        shared: k.shared,
        stream,
        cooperative: k.cooperative,
        params: k.params,
    })
}

/// `CU_LAUNCH_PARAM_BUFFER_POINTER`, `_SIZE` and `_END` of an `extra` argument list.
const PARAM_BUFFER_POINTER: usize = 1;
const PARAM_BUFFER_SIZE: usize = 2;
const PARAM_END: usize = 0;

/// Check a launch configuration and copy the arguments (`args`, or the parameter buffer
/// of `extra`) into the kernel's parameter block: what a launch queues and a graph kernel
/// node keeps.
#[allow(clippy::too_many_arguments)]
pub fn kernel_node(
    host_fun: usize,
    grid: Dim3,
    block: Dim3,
    args: *mut *mut c_void,
    extra: *mut *mut c_void,
    shared: usize,
    cooperative: bool,
) -> CudaResult<crate::graph::KernelNode> {
    prepare(host_fun, grid, block, args, extra, shared, cooperative).map(|(k, _)| k)
}

/// [`kernel_node`] and the proxy's handle of the kernel.
#[allow(clippy::too_many_arguments)]
fn prepare(
    host_fun: usize,
    grid: Dim3,
    block: Dim3,
    args: *mut *mut c_void,
    extra: *mut *mut c_void,
    shared: usize,
    cooperative: bool,
) -> CudaResult<(crate::graph::KernelNode, u64)> {
    let (_, info) = function(host_fun)?;
    let p = props()?;
    let (g, b) = (grid.arr(), block.arr());
    let threads: u64 = b.iter().map(|&x| x as u64).product();
    let bad = |d: &[u32; 3], m: &[i32; 3]| {
        d.iter()
            .zip(m)
            .any(|(&x, &l)| x == 0 || x as i64 > l as i64)
    };
    // CUDA 13's runtime answers cudaErrorInvalidValue to a block or grid out of bounds (2048
    // threads, a grid of 0 or 65536 in y: measured on an H200, `cuda_facts.cu`), where older
    // ones answered cudaErrorInvalidConfiguration.
    if bad(&g, &p.max_grid) || bad(&b, &p.max_block) || threads > info.max_threads_per_block as u64
    {
        return Err(cuda::ERROR_INVALID_VALUE);
    }
    if shared as u64 > info.max_dynamic_shared as u64 {
        return Err(cuda::ERROR_INVALID_VALUE);
    }
    if cooperative {
        // Every block of a cooperative grid must be resident at once: at most the occupancy
        // limit times the multiprocessors, refused here, at the launch, as CUDA does.
        let per_sm = occupancy(host_fun as *const c_void, threads as i32, shared)?;
        let blocks: u64 = g.iter().map(|&x| x as u64).product();
        if blocks > per_sm.max(0) as u64 * p.multiprocessors.max(0) as u64 {
            return Err(cuda::ERROR_COOPERATIVE_LAUNCH_TOO_LARGE);
        }
    }
    let mut params = vec![0u8; info.param_bytes as usize];
    if args.is_null() && !extra.is_null() {
        // { BUFFER_POINTER, buf, BUFFER_SIZE, &size, END }
        let (mut buf, mut size) = (std::ptr::null::<u8>(), 0usize);
        for i in (0..16).step_by(2) {
            let key = read(extra.wrapping_add(i) as *const usize)?;
            if key == PARAM_END {
                break;
            }
            let val = read(extra.wrapping_add(i + 1) as *const *const u8)?;
            match key {
                PARAM_BUFFER_POINTER => buf = val,
                PARAM_BUFFER_SIZE => size = read(val as *const usize)?,
                _ => return Err(cuda::ERROR_INVALID_VALUE),
            }
        }
        // As a real driver answers (H200, driver 580): a buffer larger than the kernel's
        // parameters is CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES; a shorter one is taken (the
        // parameters it does not reach are zero here).
        if size > params.len() {
            return Err(cuda::ERROR_LAUNCH_OUT_OF_RESOURCES);
        }
        params[..size].copy_from_slice(bytes(buf, size)?);
    } else {
        for (i, &(off, size)) in info.params.iter().enumerate() {
            let (off, size) = (off as usize, size as usize);
            if off + size > params.len() || args.is_null() {
                return Err(cuda::ERROR_INVALID_VALUE);
            }
            // `args` has one entry per kernel parameter (runtime API contract).
            let argp = read(args.wrapping_add(i) as *const *const u8)?;
            params[off..off + size].copy_from_slice(bytes(argp, size)?);
        }
    }
    let node = crate::graph::KernelNode {
        host_fun,
        grid: g,
        block: b,
        shared: shared as u32,
        cooperative,
        params,
        access_window: None,
        priority: 0,
    };
    Ok((node, info.handle))
}

/// Queue a prepared launch on `stream` (resolved). The kernel handle is looked up now, so a
/// graph built before a restart launches the kernel the new proxy knows.
pub fn issue(k: &crate::graph::KernelNode, stream: u64) -> CudaResult<()> {
    let (_, info) = function(k.host_fun)?;
    send(&Request::Launch {
        func: info.handle,
        grid: k.grid,
        block: k.block,
        shared: k.shared,
        stream,
        cooperative: k.cooperative,
        params: k.params.clone(),
    })
}

crate::export! {
    fn __cudaGetKernel(kernel: *mut *mut c_void, host_fun: *const c_void) {
        function(host_fun as usize)?;
        out(kernel, host_fun as *mut c_void)
    }
    fn __cudaLaunchKernel(kernel: *mut c_void, grid: Dim3, block: Dim3, args: *mut *mut c_void, shared: usize, stream: *mut c_void) {
        launch(kernel as usize, grid, block, args, shared, stream as u64, false, false)
    }
    fn __cudaLaunchKernel_ptsz(kernel: *mut c_void, grid: Dim3, block: Dim3, args: *mut *mut c_void, shared: usize, stream: *mut c_void) {
        launch(kernel as usize, grid, block, args, shared, stream as u64, true, false)
    }
    fn cudaLaunchKernel(func: *const c_void, grid: Dim3, block: Dim3, args: *mut *mut c_void, shared: usize, stream: *mut c_void) {
        launch(func as usize, grid, block, args, shared, stream as u64, false, false)
    }
    fn cudaLaunchKernel_ptsz(func: *const c_void, grid: Dim3, block: Dim3, args: *mut *mut c_void, shared: usize, stream: *mut c_void) {
        launch(func as usize, grid, block, args, shared, stream as u64, true, false)
    }
    fn cudaLaunchCooperativeKernel(func: *const c_void, grid: Dim3, block: Dim3, args: *mut *mut c_void, shared: usize, stream: *mut c_void) {
        launch(func as usize, grid, block, args, shared, stream as u64, false, true)
    }
    fn cudaLaunchCooperativeKernel_ptsz(func: *const c_void, grid: Dim3, block: Dim3, args: *mut *mut c_void, shared: usize, stream: *mut c_void) {
        launch(func as usize, grid, block, args, shared, stream as u64, true, true)
    }
    fn cudaLaunchKernelExC(config: *const u8, func: *const c_void, args: *mut *mut c_void) {
        launch_ex(config, func, args, false)
    }
    fn cudaLaunchKernelExC_ptsz(config: *const u8, func: *const c_void, args: *mut *mut c_void) {
        launch_ex(config, func, args, true)
    }
    fn cudaFuncGetAttributes(attr: *mut u8, func: *const c_void) {
        let (_, info) = function(func as usize)?;
        zero(attr, CUDAFUNCATTRIBUTES_SIZE)?;
        set_field(attr, CUDAFUNCATTRIBUTES_SHAREDSIZEBYTES, info.shared_bytes as usize);
        set_field(attr, CUDAFUNCATTRIBUTES_CONSTSIZEBYTES, info.const_bytes as usize);
        set_field(attr, CUDAFUNCATTRIBUTES_LOCALSIZEBYTES, info.local_bytes as usize);
        set_field(attr, CUDAFUNCATTRIBUTES_MAXTHREADSPERBLOCK, info.max_threads_per_block);
        set_field(attr, CUDAFUNCATTRIBUTES_NUMREGS, info.num_regs);
        set_field(attr, CUDAFUNCATTRIBUTES_PTXVERSION, info.ptx_version);
        set_field(attr, CUDAFUNCATTRIBUTES_BINARYVERSION, info.binary_version);
        set_field(attr, CUDAFUNCATTRIBUTES_MAXDYNAMICSHAREDSIZEBYTES, info.max_dynamic_shared);
        set_field(attr, CUDAFUNCATTRIBUTES_PREFERREDSHMEMCARVEOUT, -1i32);
        Ok(())
    }
    fn cudaFuncSetAttribute(func: *const c_void, attr: u32, value: i32) {
        set_func_attribute(func, attr, value)
    }
    fn cudaFuncGetParamCount(func: *const c_void, count: *mut usize) {
        let (_, info) = function(func as usize)?;
        out(count, info.params.len())
    }
    fn cudaFuncGetParamInfo(func: *const c_void, index: usize, offset: *mut usize, size: *mut usize) {
        let (_, info) = function(func as usize)?;
        let &(o, n) = info.params.get(index).ok_or(cuda::ERROR_INVALID_VALUE)?;
        if offset.is_null() || size.is_null() {
            return Err(cuda::ERROR_INVALID_VALUE);
        }
        out(offset, o as usize)?;
        out(size, n as usize)
    }
    // A `cudaFunction_t` or `cudaKernel_t` handed out here is the kernel's host stub address:
    // every runtime entry point that takes an entry function takes it as is (kernels are
    // looked up by that address), and it stays valid across a restart.
    fn cudaGetFuncBySymbol(f: *mut *const c_void, symbol: *const c_void) {
        if f.is_null() {
            return Err(cuda::ERROR_INVALID_VALUE);
        }
        function(symbol as usize)?;
        out(f, symbol)
    }
    fn cudaGetKernel(k: *mut *const c_void, entry: *const c_void) {
        if k.is_null() {
            return Err(cuda::ERROR_INVALID_VALUE);
        }
        function(entry as usize)?;
        out(k, entry)
    }
    fn cudaKernelSetAttributeForDevice(kernel: *const c_void, attr: u32, value: i32, device: i32) {
        if device != 0 {
            return Err(cuda::ERROR_INVALID_DEVICE);
        }
        set_func_attribute(kernel, attr, value)
    }
    fn cudaFuncSetCacheConfig(func: *const c_void, _config: u32) {
        function(func as usize).map(|_| ())
    }
    fn cudaFuncSetSharedMemConfig(func: *const c_void, _config: u32) {
        function(func as usize).map(|_| ())
    }
    fn cudaFuncGetName(name: *mut *const c_char, func: *const c_void) {
        let (rec, _) = function(func as usize)?;
        let s: &'static std::ffi::CStr = Box::leak(std::ffi::CString::new(rec.name.clone()).map_err(|_| cuda::ERROR_INVALID_VALUE)?.into_boxed_c_str());
        out(name, s.as_ptr())
    }
    fn cudaOccupancyMaxActiveBlocksPerMultiprocessor(num_blocks: *mut i32, func: *const c_void, block_size: i32, dynamic_smem: usize) {
        out(num_blocks, occupancy(func, block_size, dynamic_smem)?)
    }
    fn cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(num_blocks: *mut i32, func: *const c_void, block_size: i32, dynamic_smem: usize, _flags: u32) {
        out(num_blocks, occupancy(func, block_size, dynamic_smem)?)
    }
    fn cudaOccupancyAvailableDynamicSMemPerBlock(smem: *mut usize, func: *const c_void, num_blocks: i32, block_size: i32) {
        let (_, info) = function(func as usize)?;
        let p = props()?;
        if num_blocks <= 0 || block_size <= 0 {
            return Err(cuda::ERROR_INVALID_VALUE);
        }
        let per_block = p.shared_per_sm / num_blocks as u64;
        let avail = per_block.min(p.shared_per_block_optin).saturating_sub(info.shared_bytes);
        out(smem, avail as usize)
    }
}

/// Resident blocks per multiprocessor for a block size (threads, shared memory, registers).
fn occupancy(func: *const c_void, block_size: i32, dynamic_smem: usize) -> CudaResult<i32> {
    let (_, info) = function(func as usize)?;
    let p = props()?;
    if block_size <= 0 {
        return Err(cuda::ERROR_INVALID_VALUE);
    }
    if block_size > info.max_threads_per_block {
        return Ok(0);
    }
    let warps = (block_size + p.warp_size - 1) / p.warp_size;
    let by_threads = p.max_threads_per_sm / (warps * p.warp_size);
    let smem = info.shared_bytes + dynamic_smem as u64;
    let by_smem = if smem == 0 {
        i32::MAX
    } else {
        (p.shared_per_sm / (smem + 1024)) as i32
    };
    let regs = (info.num_regs.max(1) * warps * p.warp_size).max(1);
    let by_regs = p.regs_per_sm / regs;
    Ok(p.max_blocks_per_sm
        .min(by_threads)
        .min(by_smem)
        .min(by_regs)
        .max(0))
}

fn set_func_attribute(func: *const c_void, attr: u32, value: i32) -> CudaResult<()> {
    let (rec, info) = function(func as usize)?;
    call(&Request::FuncSetAttribute { func: info.handle, attr, value })?;
    if attr == cudaFuncAttributeMaxDynamicSharedMemorySize {
        if let Some(i) = rec.info.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
            i.max_dynamic_shared = value;
        }
    }
    Ok(())
}

fn launch_ex(
    config: *const u8,
    func: *const c_void,
    args: *mut *mut c_void,
    ptsz: bool,
) -> CudaResult<()> {
    let grid: Dim3 = field(config, CUDALAUNCHCONFIG_T_GRIDDIM)?;
    let block: Dim3 = field(config, CUDALAUNCHCONFIG_T_BLOCKDIM)?;
    let shared: usize = field(config, CUDALAUNCHCONFIG_T_DYNAMICSMEMBYTES)?;
    let stream: u64 = field(config, CUDALAUNCHCONFIG_T_STREAM)?;
    let attrs: *const u8 = field(config, CUDALAUNCHCONFIG_T_ATTRS)?;
    let n: u32 = field(config, CUDALAUNCHCONFIG_T_NUMATTRS)?;
    let mut cooperative = false;
    for i in 0..n as usize {
        let a = attrs.wrapping_add(i * CUDALAUNCHATTRIBUTE_ST_SIZE);
        let id: u32 = field(a, CUDALAUNCHATTRIBUTE_ST_ID)?;
        if id == cudaLaunchAttributeCooperative {
            cooperative = field::<i32>(a, CUDALAUNCHATTRIBUTE_ST_VAL)? != 0;
        } else if id == cudaLaunchAttributeAccessPolicyWindow {
            // An L2 hint for this launch: checked as CUDA does (window size, hit ratio,
            // properties). It changes no result; the emulated device has no cache, and the
            // cuda backend launches with cuLaunchKernel, which takes no per-launch attributes
            // (a stream's window, cudaStreamSetAttribute, does reach the driver).
            let w = super::stream_attrs::read_window(a.wrapping_add(CUDALAUNCHATTRIBUTE_ST_VAL))?;
            super::stream_attrs::check_window(&w)?;
        }
    }
    launch(
        func as usize,
        grid,
        block,
        args,
        shared,
        stream,
        ptsz,
        cooperative,
    )
}
