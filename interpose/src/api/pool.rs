//! Memory pools and the stream-ordered allocator: the exported entry points over
//! `crate::pool`. One device (0), device memory only, no IPC handle types.
#![allow(unsafe_code, non_upper_case_globals)]

use std::ffi::c_void;

use crum_wire::{cuda, Request};

use crate::abi_gen::*;
use crate::client::call;
use crate::errors::CudaResult;
use crate::ffi::*;
use crate::graph::NodeKind;
use crate::pool::{self, AttrValue};
use crate::state::*;

/// `cudaMemLocationTypeDevice`, `cudaMemAllocationTypePinned`, `cudaMemAccessFlagsProtReadWrite`.
const LOCATION_DEVICE: u32 = 1;
const ALLOC_PINNED: u32 = 1;
const ACCESS_READ_WRITE: u32 = 3;

fn check_device(dev: i32) -> CudaResult<()> {
    if dev == 0 {
        Ok(())
    } else {
        Err(cuda::ERROR_INVALID_DEVICE)
    }
}

/// A `cudaMemLocation` naming device 0 with allocation type pinned (device memory): the
/// only kind of pool here.
fn check_location(loc: *const u8, ty: u32) -> CudaResult<()> {
    let lt: u32 = field(loc, CUDAMEMLOCATION_TYPE)?;
    let id: i32 = field(loc, CUDAMEMLOCATION_ID)?;
    if lt != LOCATION_DEVICE {
        return Err(cuda::ERROR_NOT_SUPPORTED);
    }
    check_device(id)?;
    if ty != ALLOC_PINNED {
        return Err(cuda::ERROR_NOT_SUPPORTED);
    }
    Ok(())
}

fn malloc_from(ptr: *mut *mut c_void, size: usize, h: u64, stream: *mut c_void, ptsz: bool) -> CudaResult<()> {
    if ptr.is_null() {
        return Err(cuda::ERROR_INVALID_VALUE);
    }
    let s = resolve_stream(stream as u64, ptsz)?;
    // In a capture: a mem alloc node, its memory allocated now (fixed for the graph's life).
    let mut addr = 0;
    if crate::capture::record(s, || {
        let a = crate::api::graph::graph_alloc(size as u64)?;
        addr = a.addr;
        Ok(NodeKind::MemAlloc(a))
    })? {
        return out(ptr, addr as *mut c_void);
    }
    let a = pool::alloc(h, size as u64)?;
    out(ptr, a as *mut c_void)
}

/// `cudaFreeAsync`: after the stream's earlier work, the block goes back to its pool (other
/// memory is freed). In a capture: a mem free node for an allocation of the same capture;
/// other memory is left allocated (an empty node: the graph's launches may use it).
fn free_async(ptr: *mut c_void, stream: *mut c_void, ptsz: bool) -> CudaResult<()> {
    let s = resolve_stream(stream as u64, ptsz)?;
    if ptr.is_null() {
        return Ok(());
    }
    if crate::capture::record_free(s, ptr as u64)? {
        return Ok(());
    }
    call(&Request::StreamSync { stream: s })?;
    crate::api::graph::forget_graph_alloc(ptr as u64);
    if pool::free(ptr as u64)? {
        return Ok(());
    }
    crate::api::memory::free_any(ptr as u64, false)
}

crate::export! {
    fn cudaMallocAsync(ptr: *mut *mut c_void, size: usize, stream: *mut c_void) {
        malloc_from(ptr, size, pool::current(), stream, false)
    }
    fn cudaMallocAsync_ptsz(ptr: *mut *mut c_void, size: usize, stream: *mut c_void) {
        malloc_from(ptr, size, pool::current(), stream, true)
    }
    fn cudaMallocFromPoolAsync(ptr: *mut *mut c_void, size: usize, pool: *mut c_void, stream: *mut c_void) {
        malloc_from(ptr, size, pool as u64, stream, false)
    }
    fn cudaMallocFromPoolAsync_ptsz(ptr: *mut *mut c_void, size: usize, pool: *mut c_void, stream: *mut c_void) {
        malloc_from(ptr, size, pool as u64, stream, true)
    }
    fn cudaFreeAsync(ptr: *mut c_void, stream: *mut c_void) {
        free_async(ptr, stream, false)
    }
    fn cudaFreeAsync_ptsz(ptr: *mut c_void, stream: *mut c_void) {
        free_async(ptr, stream, true)
    }
    fn cudaDeviceGetDefaultMemPool(p: *mut *mut c_void, dev: i32) {
        check_device(dev)?;
        out(p, pool::default_pool() as *mut c_void)
    }
    fn cudaDeviceGetMemPool(p: *mut *mut c_void, dev: i32) {
        check_device(dev)?;
        out(p, pool::current() as *mut c_void)
    }
    fn cudaDeviceSetMemPool(dev: i32, p: *mut c_void) {
        check_device(dev)?;
        pool::set_current(p as u64)
    }
    fn cudaMemGetDefaultMemPool(p: *mut *mut c_void, loc: *const u8, ty: u32) {
        check_location(loc, ty)?;
        out(p, pool::default_pool() as *mut c_void)
    }
    fn cudaMemGetMemPool(p: *mut *mut c_void, loc: *const u8, ty: u32) {
        check_location(loc, ty)?;
        out(p, pool::current() as *mut c_void)
    }
    fn cudaMemSetMemPool(loc: *const u8, ty: u32, p: *mut c_void) {
        check_location(loc, ty)?;
        pool::set_current(p as u64)
    }
    fn cudaMemPoolCreate(p: *mut *mut c_void, props: *const u8) {
        if p.is_null() {
            return Err(cuda::ERROR_INVALID_VALUE);
        }
        let ty: u32 = field(props, CUDAMEMPOOLPROPS_ALLOCTYPE)?;
        let handles: u32 = field(props, CUDAMEMPOOLPROPS_HANDLETYPES)?;
        let max: u64 = field(props, CUDAMEMPOOLPROPS_MAXSIZE)?;
        check_location(props.wrapping_add(CUDAMEMPOOLPROPS_LOCATION), ty).map_err(|e| {
            if e == cuda::ERROR_NOT_SUPPORTED { cuda::ERROR_INVALID_VALUE } else { e }
        })?;
        if handles != 0 {
            // No IPC: shareable handles need another process's device, which crum has not.
            return Err(cuda::ERROR_NOT_SUPPORTED);
        }
        out(p, pool::create(max) as *mut c_void)
    }
    fn cudaMemPoolDestroy(p: *mut c_void) {
        pool::destroy(p as u64)
    }
    fn cudaMemPoolTrimTo(p: *mut c_void, keep: usize) {
        pool::trim_to(p as u64, keep as u64)
    }
    fn cudaMemPoolSetAttribute(p: *mut c_void, attr: u32, value: *mut c_void) {
        let v = if pool::attr_is_int(attr) {
            AttrValue::Int(read(value as *const i32)?)
        } else {
            AttrValue::U64(read(value as *const u64)?)
        };
        pool::set_attr(p as u64, attr, v)
    }
    fn cudaMemPoolGetAttribute(p: *mut c_void, attr: u32, value: *mut c_void) {
        match pool::get_attr(p as u64, attr)? {
            AttrValue::Int(x) => out(value as *mut i32, x),
            AttrValue::U64(x) => out(value as *mut u64, x),
        }
    }
    fn cudaMemPoolSetAccess(p: *mut c_void, descs: *const u8, count: usize) {
        pool::get_attr(p as u64, cudaMemPoolAttrLocationType)?;
        // cudaMemAccessDesc: a cudaMemLocation and the flags. Device 0 owns the pool and
        // always has read-write access; there is no other device.
        const DESC: usize = CUDAMEMLOCATION_SIZE + 4;
        for i in 0..count {
            let d = descs.wrapping_add(i * DESC);
            let lt: u32 = field(d, CUDAMEMLOCATION_TYPE)?;
            let id: i32 = field(d, CUDAMEMLOCATION_ID)?;
            let flags: u32 = field(d, CUDAMEMLOCATION_SIZE)?;
            if lt != LOCATION_DEVICE || id != 0 {
                return Err(cuda::ERROR_INVALID_DEVICE);
            }
            if flags != ACCESS_READ_WRITE {
                return Err(cuda::ERROR_INVALID_VALUE);
            }
        }
        Ok(())
    }
    fn cudaMemPoolGetAccess(flags: *mut u32, p: *mut c_void, loc: *const u8) {
        pool::get_attr(p as u64, cudaMemPoolAttrLocationType)?;
        let lt: u32 = field(loc, CUDAMEMLOCATION_TYPE)?;
        let id: i32 = field(loc, CUDAMEMLOCATION_ID)?;
        if lt != LOCATION_DEVICE || id != 0 {
            return Err(cuda::ERROR_INVALID_DEVICE);
        }
        out(flags, ACCESS_READ_WRITE)
    }
}
