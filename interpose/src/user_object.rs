//! User objects (`cudaUserObjectCreate/Retain/Release`, `cudaGraphRetainUserObject/
//! ReleaseUserObject`): a program's pointer and destructor, reference counted; the
//! destructor runs once the last reference is gone, as CUDA documents.
//!
//! References are held by the program, by graphs (`graph::Graph::user_objects`; a clone
//! holds its own) and by executable graphs (`graph::Exec::user_objects`, taken from the graph
//! and its child graphs at instantiation). An executable graph's references are released
//! after the work of its last launch: by a host function queued behind it on that launch's
//! stream when it is destroyed. Everything lives in the program's memory, so the table
//! survives a checkpoint and restart as it is (the destructor is a program address).
//!
//! CUDA requires `cudaUserObjectNoDestructorSync` and forbids the destructor to call CUDA:
//! it runs on the thread that dropped the last reference (the host-callback thread for an
//! executable graph's), never under this module's lock. `cudaDeviceReset` leaves user
//! objects alone: they belong to the program, not to the device.
//!
//! # Safety
//! The destructor pointers come from the program through `cudaUserObjectCreate`, whose
//! contract makes them callable with the pointer registered with them.
#![allow(unsafe_code)]

use std::collections::HashMap;
use std::sync::Mutex;

use crum_wire::cuda;

use crate::errors::CudaResult;

/// `cudaUserObjectNoDestructorSync`, the only flag CUDA accepts (and requires).
pub const NO_DESTRUCTOR_SYNC: u32 = 1;
/// `cudaGraphUserObjectMove`: the caller's references move to the graph.
pub const GRAPH_MOVE: u32 = 1;

struct Obj {
    ptr: u64,
    destroy: unsafe extern "C" fn(*mut std::ffi::c_void),
    refs: u64,
}

#[derive(Default)]
struct Table {
    next: u64,
    objs: HashMap<u64, Obj>,
}

static TABLE: Mutex<Option<Table>> = Mutex::new(None);

fn with<R>(f: impl FnOnce(&mut Table) -> R) -> R {
    let mut g = TABLE.lock().unwrap_or_else(|p| p.into_inner());
    f(g.get_or_insert_with(Table::default))
}

/// First handle value: far from NULL and from the graph store's handles.
const HANDLE_BASE: u64 = 0x75_0000;

/// `cudaUserObjectCreate`.
pub fn create(
    ptr: u64,
    destroy: Option<unsafe extern "C" fn(*mut std::ffi::c_void)>,
    initial: u32,
    flags: u32,
) -> CudaResult<u64> {
    let (Some(destroy), true, NO_DESTRUCTOR_SYNC) = (destroy, initial > 0, flags) else {
        return Err(cuda::ERROR_INVALID_VALUE);
    };
    Ok(with(|t| {
        t.next += 1;
        let h = HANDLE_BASE + t.next * 0x10;
        t.objs.insert(h, Obj { ptr, destroy, refs: initial as u64 });
        h
    }))
}

/// Add `count` references to a live object.
pub fn retain(obj: u64, count: u32) -> CudaResult<()> {
    if count == 0 {
        return Err(cuda::ERROR_INVALID_VALUE);
    }
    with(|t| {
        let o = t.objs.get_mut(&obj).ok_or(cuda::ERROR_INVALID_VALUE)?;
        o.refs += count as u64;
        Ok(())
    })
}

/// Whether `obj` is a live user object.
pub fn exists(obj: u64) -> bool {
    with(|t| t.objs.contains_key(&obj))
}

/// Drop `count` references; the destructor runs (here, outside the lock) with the last.
/// Releasing more references than exist is `cudaErrorInvalidValue` (CUDA leaves it
/// undefined; nothing is released).
pub fn release(obj: u64, count: u32) -> CudaResult<()> {
    if count == 0 {
        return Err(cuda::ERROR_INVALID_VALUE);
    }
    let last = with(|t| {
        let o = t.objs.get_mut(&obj).ok_or(cuda::ERROR_INVALID_VALUE)?;
        if o.refs < count as u64 {
            return Err(cuda::ERROR_INVALID_VALUE);
        }
        o.refs -= count as u64;
        Ok(if o.refs == 0 { t.objs.remove(&obj) } else { None })
    })?;
    if let Some(o) = last {
        // SAFETY: the program's destructor with the pointer it registered for it, called
        // once (the object is gone from the table); CUDA's contract for it forbids CUDA calls.
        unsafe { (o.destroy)(o.ptr as *mut std::ffi::c_void) };
    }
    Ok(())
}

/// Release a list of (object, count) references, ignoring objects already gone (a reset).
pub fn release_all(refs: &[(u64, u32)]) {
    for &(o, n) in refs {
        let _ = release(o, n);
    }
}

/// Host function (on the callback thread) releasing an executable graph's references after
/// its last launch.
///
/// # Safety
/// `data` is a `Box<Vec<(u64, u32)>>` leaked by [`release_after`], passed exactly once.
pub unsafe extern "C" fn release_trampoline(data: *mut std::ffi::c_void) {
    // SAFETY: `data` is the box leaked by `release_after`, run exactly once.
    let refs = unsafe { Box::from_raw(data as *mut Vec<(u64, u32)>) };
    release_all(&refs);
}

/// Release `refs` once the work queued on `stream` so far is done (or now, without a stream).
pub fn release_after(stream: Option<u64>, refs: Vec<(u64, u32)>) -> CudaResult<()> {
    if refs.is_empty() {
        return Ok(());
    }
    let Some(s) = stream else {
        release_all(&refs);
        return Ok(());
    };
    let data = Box::into_raw(Box::new(refs));
    let r = crate::api::stream::host_func_on(s, release_trampoline as *const () as u64, data as u64);
    if r.is_err() {
        // Not queued: release now rather than never.
        // SAFETY: the box was not handed to anyone.
        let refs = unsafe { Box::from_raw(data) };
        release_all(&refs);
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    static DESTROYED: AtomicU32 = AtomicU32::new(0);
    unsafe extern "C" fn count_destroy(p: *mut std::ffi::c_void) {
        DESTROYED.fetch_add(p as u32, Ordering::SeqCst);
    }

    #[test]
    fn destructor_runs_once_when_the_last_reference_goes() {
        let before = DESTROYED.load(Ordering::SeqCst);
        let o = create(5, Some(count_destroy), 2, NO_DESTRUCTOR_SYNC).unwrap();
        retain(o, 3).unwrap();
        release(o, 4).unwrap();
        assert_eq!(DESTROYED.load(Ordering::SeqCst), before);
        assert_eq!(release(o, 2), Err(cuda::ERROR_INVALID_VALUE));
        release(o, 1).unwrap();
        assert_eq!(DESTROYED.load(Ordering::SeqCst), before + 5);
        assert!(!exists(o));
        assert_eq!(release(o, 1), Err(cuda::ERROR_INVALID_VALUE));
    }

    #[test]
    fn create_requires_the_no_destructor_sync_flag_a_destructor_and_references() {
        assert_eq!(create(1, Some(count_destroy), 1, 0), Err(cuda::ERROR_INVALID_VALUE));
        assert_eq!(create(1, None, 1, NO_DESTRUCTOR_SYNC), Err(cuda::ERROR_INVALID_VALUE));
        assert_eq!(create(1, Some(count_destroy), 0, NO_DESTRUCTOR_SYNC), Err(cuda::ERROR_INVALID_VALUE));
    }
}
