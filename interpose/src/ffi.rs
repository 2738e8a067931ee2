//! The raw layer: reading arguments the application passes and writing results through its
//! out-pointers, plus the `export!` macro every runtime entry point is declared with.
//!
//! # Safety
//! Every pointer handled here comes from the application through a CUDA runtime entry point,
//! whose contract requires it to be valid for the access the API documents (an out-pointer
//! for one value, a struct of the documented layout, a NUL-terminated name). We check for
//! NULL (CUDA returns cudaErrorInvalidValue for those) and otherwise rely on that contract,
//! as the real runtime does. Struct layouts come from `abi_gen.rs`, measured from the CUDA 13
//! headers.
//!
//! These helpers are the one place where application pointers are dereferenced; they are safe
//! functions taking raw pointers on purpose (like the `extern "C"` exports that call them),
//! so `clippy::not_unsafe_ptr_arg_deref` is allowed here and nowhere else.
#![allow(unsafe_code, clippy::not_unsafe_ptr_arg_deref)]

use std::ffi::{c_char, CStr};

use crum_wire::cuda;

use crate::errors::CudaResult;

/// `dim3`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dim3 {
    pub x: u32,
    pub y: u32,
    pub z: u32,
}

impl Dim3 {
    pub fn arr(self) -> [u32; 3] {
        [self.x, self.y, self.z]
    }
}

/// Declare exported runtime functions returning `cudaError_t`; each body runs under
/// [`crate::errors::guard`] and returns `CudaResult<()>`.
#[macro_export]
macro_rules! export {
    ($(fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $body:block)*) => {
        $(
            #[no_mangle]
            #[allow(non_snake_case, clippy::not_unsafe_ptr_arg_deref)]
            pub extern "C" fn $name($($arg: $ty),*) -> u32 {
                $crate::errors::guard(stringify!($name), || $body)
            }
        )*
    };
}

/// Write `v` through an out-pointer (NULL → cudaErrorInvalidValue).
pub fn out<T>(p: *mut T, v: T) -> CudaResult<()> {
    if p.is_null() {
        return Err(cuda::ERROR_INVALID_VALUE);
    }
    // SAFETY: non-null out-pointer from the application (module docs); unaligned-safe write.
    unsafe { p.write_unaligned(v) };
    Ok(())
}

/// Read a value the application points to (NULL → cudaErrorInvalidValue).
pub fn read<T: Copy>(p: *const T) -> CudaResult<T> {
    if p.is_null() {
        return Err(cuda::ERROR_INVALID_VALUE);
    }
    // SAFETY: non-null pointer to a value of the documented type (module docs).
    Ok(unsafe { p.read_unaligned() })
}

/// Read a field at byte offset `off` of a struct at `base`.
pub fn field<T: Copy>(base: *const u8, off: usize) -> CudaResult<T> {
    if base.is_null() {
        return Err(cuda::ERROR_INVALID_VALUE);
    }
    // SAFETY: `off` is an offset inside the documented struct (abi_gen), base is non-null.
    Ok(unsafe { (base.add(off) as *const T).read_unaligned() })
}

/// Write a field at byte offset `off` of a struct at `base` (the caller checked `base`).
pub fn set_field<T>(base: *mut u8, off: usize, v: T) {
    // SAFETY: as in `field`.
    unsafe { (base.add(off) as *mut T).write_unaligned(v) };
}

/// Zero `len` bytes at `base` (an out-struct of that size).
pub fn zero(base: *mut u8, len: usize) -> CudaResult<()> {
    if base.is_null() {
        return Err(cuda::ERROR_INVALID_VALUE);
    }
    // SAFETY: out-struct of `len` bytes (module docs).
    unsafe { std::ptr::write_bytes(base, 0, len) };
    Ok(())
}

/// A NUL-terminated string from the application.
pub fn cstr(p: *const c_char) -> Option<String> {
    if p.is_null() {
        return None;
    }
    // SAFETY: non-null NUL-terminated string (module docs).
    Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

/// Copy `len` bytes from the application's `src` (kernel argument values).
pub fn bytes(src: *const u8, len: usize) -> CudaResult<&'static [u8]> {
    if src.is_null() && len > 0 {
        return Err(cuda::ERROR_INVALID_VALUE);
    }
    if len == 0 {
        return Ok(&[]);
    }
    // SAFETY: the argument value the application points to has the kernel parameter's size.
    Ok(unsafe { std::slice::from_raw_parts(src, len) })
}

/// Copy between two host-accessible ranges of this process.
pub fn local_copy(dst: u64, src: u64, len: u64) {
    // SAFETY: both are host-accessible application ranges the caller validated or the API
    // contract guarantees; `copy` tolerates overlap.
    unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, len as usize) };
}

/// Copy `len` bytes at `src` of this process through the kernel (cross-memory attach on
/// ourselves): an unmapped range is `cudaErrorInvalidValue`, never a fault.
pub fn checked_read(src: u64, len: u64) -> crate::errors::CudaResult<Vec<u8>> {
    let bad = crum_wire::cuda::ERROR_INVALID_VALUE;
    let n = usize::try_from(len).map_err(|_| bad)?;
    let mut tmp = Vec::new();
    tmp.try_reserve_exact(n).map_err(|_| crum_wire::cuda::ERROR_MEMORY_ALLOCATION)?;
    tmp.resize(n, 0u8);
    let me = crum_ckpt::threads::real_pid();
    let mut done = 0usize;
    while done < n {
        let local = libc::iovec { iov_base: tmp[done..].as_mut_ptr().cast(), iov_len: n - done };
        let remote = libc::iovec { iov_base: (src as usize + done) as *mut libc::c_void, iov_len: n - done };
        // SAFETY: the local iovec is our live buffer; the kernel validates the remote range.
        let r = unsafe { libc::process_vm_readv(me, &local, 1, &remote, 1, 0) };
        if r <= 0 {
            return Err(bad);
        }
        done += r as usize;
    }
    Ok(tmp)
}

/// Copy between two application ranges that the program claimed were device memory but are
/// not (a copy whose direction names a device side): through the kernel (cross-memory
/// attach on ourselves), so a wild or unmapped address is `cudaErrorInvalidValue`, as on a
/// GPU, never a fault. Bounced through a buffer (the ranges may overlap).
pub fn checked_local_copy(dst: u64, src: u64, len: u64) -> crate::errors::CudaResult<()> {
    let bad = crum_wire::cuda::ERROR_INVALID_VALUE;
    let n = usize::try_from(len).map_err(|_| bad)?;
    // The kernel does not fault managed shadow pages in for us.
    crate::managed::prepare_range(src, len, false);
    crate::managed::prepare_range(dst, len, true);
    let mut tmp = checked_read(src, len)?;
    let me = crum_ckpt::threads::real_pid();
    let mut done = 0usize;
    while done < n {
        let local = libc::iovec { iov_base: tmp[done..].as_mut_ptr().cast(), iov_len: n - done };
        let remote = libc::iovec { iov_base: (dst as usize + done) as *mut libc::c_void, iov_len: n - done };
        // SAFETY: as above; the kernel validates that the destination is writable.
        let r = unsafe { libc::process_vm_writev(me, &local, 1, &remote, 1, 0) };
        if r <= 0 {
            return Err(bad);
        }
        done += r as usize;
    }
    Ok(())
}
