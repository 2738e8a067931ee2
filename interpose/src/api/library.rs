//! The library API (CUDA 12+): modules a program loads at run time from memory
//! (`cudaLibraryLoadData`: a fat binary, a cubin or PTX text, e.g. from NVRTC) or from a file
//! (`cudaLibraryLoadFromFile`), their kernels (`cudaKernel_t`, launched by `cudaLaunchKernel`
//! like an entry function) and their variables.
//!
//! The image is copied into memory crum keeps for the life of the program and registered as
//! a fat binary is (`launch::register_image`): the program may free its buffer or delete the
//! file, and a restart loads the module again from the restored copy. A kernel handle is a
//! key of its own in the runtime's function table, so every entry point that takes an entry
//! function (`cudaLaunchKernel`, `cudaFuncGetAttributes`, `cudaFuncSetAttribute`, occupancy,
//! graph kernel nodes, `cudaKernelSetAttributeForDevice`) takes it as well, across restarts.
//! JIT and library options are accepted and ignored (the emulated device runs the PTX as
//! given; the cuda backend's driver gets the image with its defaults).
//! `cudaLibraryGetUnifiedFunction` answers
//! `cudaErrorSymbolNotFound`, as CUDA does where no device has unified function pointers.
#![allow(unsafe_code)]

use std::collections::HashMap;
use std::ffi::{c_char, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crum_wire::{cuda, Body, Request};

use crate::client::call;
use crate::errors::CudaResult;
use crate::ffi::*;
use crate::state::*;

/// A loaded library (or driver-API module, `api::driver`): its registration index and the
/// kernel handles given out.
pub(crate) struct Library {
    pub(crate) module: usize,
    unloaded: AtomicBool,
    kernels: Mutex<HashMap<String, usize>>,
    /// Its managed variables handed out so far: name → (address, size).
    managed: Mutex<HashMap<String, (u64, u64)>>,
    /// Its variables handed out so far, recorded as device memory (`state::record_symbol`):
    /// forgotten when it is unloaded.
    globals: Mutex<Vec<u64>>,
}

/// The live libraries, by handle (the address of the `Library`, never freed).
static LIBRARIES: Mutex<Vec<usize>> = Mutex::new(Vec::new());
/// Largest image accepted (as the proxy).
const MAX_IMAGE: u64 = 1 << 30;
const ELF_MAGIC: &[u8] = b"\x7fELF";

pub(crate) fn library(handle: *mut c_void) -> CudaResult<&'static Library> {
    let h = handle as usize;
    if !LIBRARIES.lock().unwrap_or_else(|p| p.into_inner()).contains(&h) {
        return Err(cuda::ERROR_INVALID_RESOURCE_HANDLE);
    }
    // SAFETY: every handle in LIBRARIES is a leaked `Library` (see `load`).
    let l = unsafe { &*(h as *const Library) };
    if l.unloaded.load(Ordering::SeqCst) {
        return Err(cuda::ERROR_INVALID_RESOURCE_HANDLE);
    }
    Ok(l)
}

/// The bytes of the image at `code`: a fat binary (or its wrapper), an ELF cubin, or
/// NUL-terminated PTX text. Read through the kernel: a wrong pointer is an error, not a fault.
pub(crate) fn image_at(code: u64) -> CudaResult<Vec<u8>> {
    if code == 0 {
        return Err(cuda::ERROR_INVALID_VALUE);
    }
    let head = checked_read(code, 4)?;
    let magic = u32::from_le_bytes(head[..4].try_into().unwrap_or([0; 4]));
    let (addr, len) = match magic {
        0xBA55ED50 => super::launch::fatbin_at(code),
        0x466243B1 => super::launch::module_image(code as *const u8),
        _ if head == ELF_MAGIC => (code, elf_len(code)?),
        _ => (code, text_len(code)?),
    };
    if len == 0 || len > MAX_IMAGE {
        return Err(cuda::ERROR_INVALID_KERNEL_IMAGE);
    }
    checked_read(addr, len)
}

/// The length of the ELF file at `code`: the furthest of its section contents and its header
/// tables.
fn elf_len(code: u64) -> CudaResult<u64> {
    let h = checked_read(code, 64)?;
    let u = |o: usize, n: usize| h[o..o + n].iter().rev().fold(0u64, |v, &b| v << 8 | b as u64);
    if h[4] != 2 || h[5] != 1 {
        return Err(cuda::ERROR_INVALID_KERNEL_IMAGE); // 64-bit little-endian only
    }
    let (phoff, shoff) = (u(0x20, 8), u(0x28, 8));
    let (phentsize, phnum, shentsize, shnum) = (u(0x36, 2), u(0x38, 2), u(0x3A, 2), u(0x3C, 2));
    let mut end = (64u64).max(phoff + phentsize * phnum).max(shoff + shentsize * shnum);
    if shnum > 0 && shentsize >= 64 {
        let table = checked_read(code + shoff, shentsize * shnum)?;
        for s in table.chunks(shentsize as usize) {
            let v = |o: usize| s[o..o + 8].iter().rev().fold(0u64, |v, &b| v << 8 | b as u64);
            let kind = u32::from_le_bytes(s[4..8].try_into().unwrap_or([0; 4]));
            if kind != 8 {
                // not SHT_NOBITS: its bytes are in the file
                end = end.max(v(0x18).saturating_add(v(0x20)));
            }
        }
    }
    Ok(end)
}

/// The length of the NUL-terminated text at `code`, NUL included.
fn text_len(code: u64) -> CudaResult<u64> {
    let mut at = 0u64;
    while at < MAX_IMAGE {
        // Page by page, so that the read never crosses into memory that is not there.
        let n = 4096 - (code + at) % 4096;
        let b = checked_read(code + at, n)?;
        if let Some(i) = b.iter().position(|&c| c == 0) {
            return Ok(at + i as u64 + 1);
        }
        at += n;
    }
    Err(cuda::ERROR_INVALID_KERNEL_IMAGE)
}

/// Registers `image`, loads it into the proxy now (errors in the image are the load's, as
/// CUDA reports them) and returns the library handle.
fn load(library_out: *mut *mut c_void, image: Vec<u8>) -> CudaResult<()> {
    if library_out.is_null() {
        return Err(cuda::ERROR_INVALID_VALUE);
    }
    out(library_out, load_image(image)? as *mut c_void)
}

/// [`load`]'s work: the handle of the library made of `image`.
pub(crate) fn load_image(image: Vec<u8>) -> CudaResult<usize> {
    crate::client::ensure()?;
    let module = super::launch::register_image(image);
    module_id(module)?;
    let l: &'static Library =
        Box::leak(Box::new(Library {
            module,
            unloaded: AtomicBool::new(false),
            kernels: Mutex::new(HashMap::new()),
            managed: Mutex::new(HashMap::new()),
            globals: Mutex::new(Vec::new()),
        }));
    let h = l as *const Library as usize;
    LIBRARIES.lock().unwrap_or_else(|p| p.into_inner()).push(h);
    Ok(h)
}

/// The image of a file (`cudaLibraryLoadFromFile`, `cuModuleLoad`): PTX text gets its NUL.
pub(crate) fn image_of_file(path: &str) -> CudaResult<Vec<u8>> {
    let mut image = std::fs::read(path).map_err(|e| {
        tracing::error!("cannot read the module file {path}: {e}");
        cuda::ERROR_FILE_NOT_FOUND
    })?;
    if image.is_empty() || image.len() as u64 > MAX_IMAGE {
        return Err(cuda::ERROR_INVALID_KERNEL_IMAGE);
    }
    // PTX text read from a file has no NUL of its own.
    if !image.starts_with(ELF_MAGIC) && !image.starts_with(&0xBA55ED50u32.to_le_bytes()) && image.last() != Some(&0) {
        image.push(0);
    }
    Ok(image)
}

/// Unloads library `handle`: its kernels leave the function table.
pub(crate) fn unload(handle: *mut c_void) -> CudaResult<()> {
    let l = library(handle)?;
    l.unloaded.store(true, Ordering::SeqCst);
    LIBRARIES.lock().unwrap_or_else(|p| p.into_inner()).retain(|&h| h != handle as usize);
    let keys: Vec<usize> = l.kernels.lock().unwrap_or_else(|p| p.into_inner()).values().copied().collect();
    {
        let mut f = state().funcs.write().unwrap_or_else(|p| p.into_inner());
        for k in keys {
            f.remove(&k);
        }
    }
    for g in std::mem::take(&mut *l.globals.lock().unwrap_or_else(|p| p.into_inner())) {
        // A variable that became managed memory (`managed`) stays as it is.
        if crate::state::find_alloc(g).is_some_and(|(b, r)| b == g && r.kind == crate::state::MemKind::Device) {
            crate::state::remove_alloc(g);
        }
    }
    call(&Request::UnloadModule { module: module_id(l.module)? }).map(|_| ())
}

/// A managed variable of library `l` (declared `__managed__`): (address, size), the same each
/// time. Its memory becomes managed memory shared with the program on first use (the
/// variable's value moves with it; kernels launched since use it there), so the host reads
/// and writes it directly; a restart maps it again like any managed allocation.
/// cudaErrorSymbolNotFound if the library has no managed variable of that name.
pub(crate) fn managed(l: &Library, name: String) -> CudaResult<(u64, u64)> {
    let mut g = l.managed.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(&v) = g.get(&name) {
        return Ok(v);
    }
    let (_, size) = global(l, name.clone())?;
    let not_found = |e| if e == cuda::ERROR_INVALID_SYMBOL { cuda::ERROR_SYMBOL_NOT_FOUND } else { e };
    let Body::Alloc { addr, memfd: Some(fd) } = call(&Request::ManagedVar { module: module_id(l.module)?, name: name.clone() }).map_err(not_found)?
    else {
        return Err(cuda::ERROR_UNKNOWN);
    };
    crate::managed::register(addr, size, fd, crate::managed::Init::FromProxy)?;
    add_alloc(addr, size, MemKind::Managed, 1);
    g.insert(name, (addr, size));
    Ok((addr, size))
}

/// A variable of library `l`: (device address, size); cudaErrorSymbolNotFound if absent.
pub(crate) fn global(l: &Library, name: String) -> CudaResult<(u64, u64)> {
    let Body::Pair(addr, size) = call(&Request::GetSymbol { module: module_id(l.module)?, name })
        .map_err(|e| if e == cuda::ERROR_INVALID_SYMBOL { cuda::ERROR_SYMBOL_NOT_FOUND } else { e })?
    else {
        return Err(cuda::ERROR_UNKNOWN);
    };
    if crate::state::record_symbol(addr, size) {
        l.globals.lock().unwrap_or_else(|p| p.into_inner()).push(addr);
    }
    Ok((addr, size))
}

/// The kernel handle of `name` in `l` (the same handle each time).
pub(crate) fn kernel(l: &'static Library, name: &str) -> CudaResult<usize> {
    let mut g = l.kernels.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(&k) = g.get(name) {
        return Ok(k);
    }
    let rec = Arc::new(FuncRec { module: l.module, name: name.to_string(), info: Mutex::new(None) });
    // A unique address of crum's as the key (a byte never freed).
    let key = Box::leak(Box::new(0u8)) as *const u8 as usize;
    state().funcs.write().unwrap_or_else(|p| p.into_inner()).insert(key, rec);
    if let Err(e) = function(key) {
        state().funcs.write().unwrap_or_else(|p| p.into_inner()).remove(&key);
        return Err(if e == cuda::ERROR_INVALID_DEVICE_FUNCTION { cuda::ERROR_SYMBOL_NOT_FOUND } else { e });
    }
    g.insert(name.to_string(), key);
    Ok(key)
}

fn kernel_names(l: &Library) -> CudaResult<Vec<String>> {
    match call(&Request::ModuleKernels { module: module_id(l.module)? })? {
        Body::Names(v) => Ok(v),
        _ => Err(cuda::ERROR_UNKNOWN),
    }
}

crate::export! {
    fn cudaLibraryLoadData(library_out: *mut *mut c_void, code: *const c_void, _jit_options: *mut u32, _jit_values: *mut *mut c_void, _num_jit: u32, _lib_options: *mut u32, _lib_values: *mut *mut c_void, _num_lib: u32) {
        load(library_out, image_at(code as u64)?)
    }
    fn cudaLibraryLoadFromFile(library_out: *mut *mut c_void, file: *const c_char, _jit_options: *mut u32, _jit_values: *mut *mut c_void, _num_jit: u32, _lib_options: *mut u32, _lib_values: *mut *mut c_void, _num_lib: u32) {
        let path = cstr(file).ok_or(cuda::ERROR_INVALID_VALUE)?;
        load(library_out, image_of_file(&path)?)
    }
    fn cudaLibraryUnload(handle: *mut c_void) {
        unload(handle)
    }
    fn cudaLibraryGetKernel(kernel_out: *mut *mut c_void, handle: *mut c_void, name: *const c_char) {
        if kernel_out.is_null() {
            return Err(cuda::ERROR_INVALID_VALUE);
        }
        let l = library(handle)?;
        let name = cstr(name).ok_or(cuda::ERROR_INVALID_VALUE)?;
        out(kernel_out, kernel(l, &name)? as *mut c_void)
    }
    fn cudaLibraryGetGlobal(dptr: *mut *mut c_void, bytes: *mut usize, handle: *mut c_void, name: *const c_char) {
        let l = library(handle)?;
        let name = cstr(name).ok_or(cuda::ERROR_INVALID_VALUE)?;
        let (addr, size) = global(l, name)?;
        if !dptr.is_null() {
            out(dptr, addr as *mut c_void)?;
        }
        if !bytes.is_null() {
            out(bytes, size as usize)?;
        }
        Ok(())
    }
    fn cudaLibraryGetManaged(dptr: *mut *mut c_void, bytes: *mut usize, handle: *mut c_void, name: *const c_char) {
        let l = library(handle)?;
        let name = cstr(name).ok_or(cuda::ERROR_INVALID_VALUE)?;
        if dptr.is_null() && bytes.is_null() {
            return Err(cuda::ERROR_INVALID_VALUE);
        }
        let (addr, size) = managed(l, name)?;
        if !dptr.is_null() {
            out(dptr, addr as *mut c_void)?;
        }
        if !bytes.is_null() {
            out(bytes, size as usize)?;
        }
        Ok(())
    }
    fn cudaLibraryGetKernelCount(count: *mut u32, handle: *mut c_void) {
        let l = library(handle)?;
        out(count, kernel_names(l)?.len() as u32)
    }
    fn cudaLibraryEnumerateKernels(kernels: *mut *mut c_void, num: u32, handle: *mut c_void) {
        let l = library(handle)?;
        if kernels.is_null() {
            return Err(cuda::ERROR_INVALID_VALUE);
        }
        for (i, name) in kernel_names(l)?.iter().take(num as usize).enumerate() {
            out(kernels.wrapping_add(i), kernel(l, name)? as *mut c_void)?;
        }
        Ok(())
    }
}
