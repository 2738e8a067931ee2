//! Memory: device, managed and pinned allocations, copies (sync, async, 2-D, symbols, peer,
//! `cudaMemcpyDefault`), memsets, host registration and pointer attributes.
//!
//! Copies between two host-accessible ranges (pageable, pinned or managed memory, all mapped
//! here) are done in this process after the stream has drained; everything touching device
//! memory goes to the proxy, which moves the bytes with one cross-memory copy. An async copy
//! is pipelined only when the host side is pinned or managed (the proxy may read it later);
//! from or to pageable memory it waits as CUDA does.
#![allow(unsafe_code)]

use std::ffi::c_void;

use crum_wire::{cuda, AllocKind, Body, CopyKind, Request};

use crate::abi_gen::*;
use crate::client::{call, map_shared, send, unmap_shared};
use crate::errors::CudaResult;
use crate::ffi::*;
use crate::managed::advice::{self, Advice, Loc};
use crate::state::*;

/// `cudaMemcpyKind`.
const H2H: u32 = 0;
pub(crate) const H2D: u32 = 1;
pub(crate) const D2H: u32 = 2;
const D2D: u32 = 3;
const DEFAULT: u32 = 4;

/// Alignment of pitched allocations (texture pitch alignment of sm_80).
const PITCH_ALIGN: u64 = 512;

fn alloc(size: u64, kind: AllocKind, mk: MemKind, flags: u32) -> CudaResult<u64> {
    crate::capture::forbid_unsafe()?;
    alloc_any(size, kind, mk, flags)
}

/// An allocation, also while a stream captures (stream-ordered allocations).
pub(crate) fn alloc_any(size: u64, kind: AllocKind, mk: MemKind, flags: u32) -> CudaResult<u64> {
    crate::client::ensure()?;
    let Body::Alloc { addr, memfd } = call(&Request::Malloc { size, kind })? else {
        return Err(cuda::ERROR_UNKNOWN);
    };
    if addr == 0 {
        return Ok(0);
    }
    match (memfd, kind) {
        (Some(fd), AllocKind::Managed) => {
            if let Err(e) = crate::managed::register(addr, size, fd, crate::managed::Init::Fresh) {
                let _ = call(&Request::Free { addr });
                return Err(e);
            }
        }
        (Some(fd), _) => {
            if let Err(e) = map_shared(addr, size, fd) {
                let _ = call(&Request::Free { addr });
                return Err(e);
            }
        }
        (None, AllocKind::Device) => {}
        (None, _) => {
            // Both backends hand managed and pinned memory out as memfds; one that does not
            // would give an address the host cannot touch: refuse it.
            let _ = call(&Request::Free { addr });
            crate::errors::unsupported("host-accessible memory without a shared mapping on this device");
            return Err(cuda::ERROR_NOT_SUPPORTED);
        }
    }
    add_alloc(addr, size, mk, flags);
    Ok(addr)
}

fn free(addr: u64, host: bool) -> CudaResult<()> {
    if addr == 0 {
        return Ok(());
    }
    crate::capture::forbid_unsafe()?;
    crate::api::graph::forget_graph_alloc(addr);
    free_any(addr, host)
}

/// A free, also while a stream captures (the caller ordered it after the stream's work).
pub(crate) fn free_any(addr: u64, host: bool) -> CudaResult<()> {
    if addr == 0 {
        return Ok(());
    }
    if !host && crate::pool::owns(addr) {
        // cudaFree of a stream-ordered allocation: it leaves its pool.
        call(&Request::Free { addr })?;
        crate::pool::forget(addr);
        remove_alloc(addr);
        return Ok(());
    }
    let rec = find_alloc(addr).filter(|(b, _)| *b == addr).map(|(_, r)| r);
    match rec {
        Some(r) if host != (r.kind == MemKind::Pinned) => return Err(cuda::ERROR_INVALID_VALUE),
        Some(r) if r.kind == MemKind::Registered => return Err(cuda::ERROR_INVALID_VALUE),
        _ => {}
    }
    call(&Request::Free { addr })?;
    if let Some(r) = remove_alloc(addr) {
        match r.kind {
            MemKind::Managed => {
                crate::managed::unregister(addr);
                advice::forget(addr, r.len);
            }
            MemKind::Device => {}
            _ => unmap_shared(addr, r.len),
        }
    }
    Ok(())
}

/// Resolve `cudaMemcpyDefault` (and check explicit kinds) from what we know of each address.
fn direction(dst: u64, src: u64, kind: u32) -> CudaResult<u32> {
    let (d, s) = (is_device(dst), is_device(src));
    match kind {
        DEFAULT => Ok(match (d, s) {
            (false, false) => H2H,
            (true, false) => H2D,
            (false, true) => D2H,
            (true, true) => D2D,
        }),
        H2H..=D2D => Ok(kind),
        _ => Err(cuda::ERROR_INVALID_MEMCPY_DIRECTION),
    }
}

fn wire_kind(k: u32) -> CopyKind {
    match k {
        H2D => CopyKind::HostToDevice,
        D2H => CopyKind::DeviceToHost,
        _ => CopyKind::DeviceToDevice,
    }
}

/// One (possibly 2-D) copy on `stream` (already resolved); `sync` as cudaMemcpy.
#[allow(clippy::too_many_arguments)]
pub fn copy(
    dst: u64,
    dpitch: u64,
    src: u64,
    spitch: u64,
    width: u64,
    height: u64,
    kind: u32,
    stream: u64,
    sync: bool,
) -> CudaResult<()> {
    crate::client::ensure()?;
    if width == 0 || height == 0 {
        return Ok(());
    }
    if dpitch < width || spitch < width {
        return Err(cuda::ERROR_INVALID_PITCH_VALUE);
    }
    if dst == 0 || src == 0 {
        return Err(cuda::ERROR_INVALID_VALUE);
    }
    if sync {
        crate::capture::forbid_unsafe()?;
        crate::capture::check_sync(stream)?;
    } else if crate::capture::record(stream, || {
        direction(dst, src, kind)?;
        Ok(crate::graph::NodeKind::Memcpy(crate::api::graph::copy_params(
            dst, dpitch, src, spitch, width, height, kind,
        )))
    })? {
        return Ok(());
    }
    let k = direction(dst, src, kind)?;
    let span = |p: u64| p * (height - 1) + width;
    let host_ok = |a: u64, p: u64| {
        !is_device(a) && (find_alloc(a).is_none() || is_device_visible(a, span(p)))
    };
    if k == H2H || (host_ok(dst, dpitch) && host_ok(src, spitch)) {
        // Both sides are mapped here: wait for the stream, then copy locally.
        call(&Request::StreamSync { stream })?;
        // A direction naming a device side that is not there: the pointers are unchecked.
        let claimed_device = kind != H2H && kind != DEFAULT;
        for r in 0..height {
            if claimed_device {
                crate::ffi::checked_local_copy(dst + r * dpitch, src + r * spitch, width)?;
            } else {
                local_copy(dst + r * dpitch, src + r * spitch, width);
            }
        }
        return Ok(());
    }
    let pinned = |a: u64, p: u64| is_device_visible(a, span(p));
    let host_pinned = match k {
        H2D => pinned(src, spitch),
        D2H => pinned(dst, dpitch),
        _ => true,
    };
    let req = if height == 1 {
        Request::Memcpy {
            dst,
            src,
            len: width,
            kind: wire_kind(k),
            stream,
            sync,
        }
    } else {
        Request::Memcpy2D {
            dst,
            dpitch,
            src,
            spitch,
            width,
            height,
            kind: wire_kind(k),
            stream,
            sync,
        }
    };
    if sync || !host_pinned {
        call(&req).map(|_| ())
    } else {
        send(&req)
    }
}

pub(crate) fn check_device_range(addr: u64, len: u64) -> CudaResult<()> {
    match find_alloc(addr) {
        Some((b, r)) if r.kind != MemKind::Registered && addr + len <= b + r.len => Ok(()),
        _ => Err(cuda::ERROR_INVALID_VALUE),
    }
}

pub(crate) fn memset(
    dst: u64,
    pitch: u64,
    value: i32,
    width: u64,
    height: u64,
    stream: u64,
) -> CudaResult<()> {
    crate::client::ensure()?;
    if width == 0 || height == 0 {
        return Ok(());
    }
    if pitch < width {
        return Err(cuda::ERROR_INVALID_PITCH_VALUE);
    }
    check_device_range(dst, pitch * (height - 1) + width)?;
    if crate::capture::record(stream, || {
        Ok(crate::graph::NodeKind::Memset(crate::graph::MemsetNode {
            dst,
            pitch,
            value: value as u8 as u32,
            elem: 1,
            width,
            height,
        }))
    })? {
        return Ok(());
    }
    let value = value as u8;
    let req = if height == 1 {
        Request::Memset {
            dst,
            value,
            len: width,
            stream,
            sync: false,
        }
    } else {
        Request::Memset2D {
            dst,
            pitch,
            value,
            width,
            height,
            stream,
            sync: false,
        }
    };
    send(&req)
}

pub(crate) fn symbol_range(sym: *const c_void, count: usize, offset: usize) -> CudaResult<u64> {
    let (addr, size) = symbol(sym as usize)?;
    if (offset as u64)
        .checked_add(count as u64)
        .is_none_or(|end| end > size)
    {
        return Err(cuda::ERROR_INVALID_VALUE);
    }
    Ok(addr + offset as u64)
}

crate::export! {
    fn cudaMalloc(ptr: *mut *mut c_void, size: usize) {
        let a = alloc(size as u64, AllocKind::Device, MemKind::Device, 0)?;
        out(ptr, a as *mut c_void)
    }
    fn cudaMallocManaged(ptr: *mut *mut c_void, size: usize, flags: u32) {
        if ptr.is_null() || size == 0 {
            return Err(cuda::ERROR_INVALID_VALUE);
        }
        let a = alloc(size as u64, AllocKind::Managed, MemKind::Managed, flags)?;
        out(ptr, a as *mut c_void)
    }
    fn cudaMallocHost(ptr: *mut *mut c_void, size: usize) {
        let a = alloc(size as u64, AllocKind::PinnedHost, MemKind::Pinned, 0)?;
        out(ptr, a as *mut c_void)
    }
    fn cudaHostAlloc(ptr: *mut *mut c_void, size: usize, flags: u32) {
        let a = alloc(size as u64, AllocKind::PinnedHost, MemKind::Pinned, flags)?;
        out(ptr, a as *mut c_void)
    }
    fn cudaMallocPitch(ptr: *mut *mut c_void, pitch: *mut usize, width: usize, height: usize) {
        let p = (width.max(1) as u64).next_multiple_of(PITCH_ALIGN);
        let a = alloc(p * height as u64, AllocKind::Device, MemKind::Device, 0)?;
        out(pitch, p as usize)?;
        out(ptr, a as *mut c_void)
    }
    fn cudaFree(ptr: *mut c_void) {
        free(ptr as u64, false)
    }
    fn cudaFreeHost(ptr: *mut c_void) {
        free(ptr as u64, true)
    }
    fn cudaHostRegister(ptr: *mut c_void, size: usize, flags: u32) {
        if ptr.is_null() || size == 0 {
            return Err(cuda::ERROR_INVALID_VALUE);
        }
        call(&Request::HostRegister { addr: ptr as u64, len: size as u64 })?;
        add_alloc(ptr as u64, size as u64, MemKind::Registered, flags);
        Ok(())
    }
    fn cudaHostUnregister(ptr: *mut c_void) {
        call(&Request::HostUnregister { addr: ptr as u64 })?;
        remove_alloc(ptr as u64);
        Ok(())
    }
    fn cudaHostGetDevicePointer(pdev: *mut *mut c_void, host: *mut c_void, _flags: u32) {
        match find_alloc(host as u64) {
            // Unified addressing: the device sees host memory at the same address.
            Some((_, r)) if r.kind != MemKind::Device => out(pdev, host),
            _ => Err(cuda::ERROR_INVALID_VALUE),
        }
    }
    fn cudaHostGetFlags(flags: *mut u32, host: *mut c_void) {
        match find_alloc(host as u64) {
            Some((_, r)) if r.kind == MemKind::Pinned || r.kind == MemKind::Registered => out(flags, r.flags),
            _ => Err(cuda::ERROR_INVALID_VALUE),
        }
    }
    fn cudaMemGetInfo(free: *mut usize, total: *mut usize) {
        let Body::Pair(f, t) = call(&Request::MemGetInfo)? else { return Err(cuda::ERROR_UNKNOWN) };
        out(free, f as usize)?;
        out(total, t as usize)
    }
    fn cudaMemcpy(dst: *mut c_void, src: *const c_void, count: usize, kind: u32) {
        // The legacy stream (this thread's own under a driver `_ptds` call: `state::per_thread`).
        let s = resolve_stream(0, false)?;
        copy(dst as u64, count as u64, src as u64, count as u64, count as u64, 1, kind, s, true)
    }
    fn cudaMemcpy_ptds(dst: *mut c_void, src: *const c_void, count: usize, kind: u32) {
        let s = resolve_stream(0, true)?;
        copy(dst as u64, count as u64, src as u64, count as u64, count as u64, 1, kind, s, true)
    }
    fn cudaMemcpyAsync(dst: *mut c_void, src: *const c_void, count: usize, kind: u32, stream: *mut c_void) {
        let s = resolve_stream(stream as u64, false)?;
        copy(dst as u64, count as u64, src as u64, count as u64, count as u64, 1, kind, s, false)
    }
    fn cudaMemcpyAsync_ptsz(dst: *mut c_void, src: *const c_void, count: usize, kind: u32, stream: *mut c_void) {
        let s = resolve_stream(stream as u64, true)?;
        copy(dst as u64, count as u64, src as u64, count as u64, count as u64, 1, kind, s, false)
    }
    fn cudaMemcpy2D(dst: *mut c_void, dpitch: usize, src: *const c_void, spitch: usize, width: usize, height: usize, kind: u32) {
        copy(dst as u64, dpitch as u64, src as u64, spitch as u64, width as u64, height as u64, kind, 0, true)
    }
    fn cudaMemcpy2DAsync(dst: *mut c_void, dpitch: usize, src: *const c_void, spitch: usize, width: usize, height: usize, kind: u32, stream: *mut c_void) {
        let s = resolve_stream(stream as u64, false)?;
        copy(dst as u64, dpitch as u64, src as u64, spitch as u64, width as u64, height as u64, kind, s, false)
    }
    fn cudaMemcpyToSymbol(sym: *const c_void, src: *const c_void, count: usize, offset: usize, kind: u32) {
        let d = symbol_range(sym, count, offset)?;
        let kind = if kind == DEFAULT { DEFAULT } else if kind == D2D { D2D } else { H2D };
        copy(d, count as u64, src as u64, count as u64, count as u64, 1, kind, 0, true)
    }
    fn cudaMemcpyFromSymbol(dst: *mut c_void, sym: *const c_void, count: usize, offset: usize, kind: u32) {
        let s = symbol_range(sym, count, offset)?;
        let kind = if kind == DEFAULT { DEFAULT } else if kind == D2D { D2D } else { D2H };
        copy(dst as u64, count as u64, s, count as u64, count as u64, 1, kind, 0, true)
    }
    fn cudaMemcpyToSymbolAsync(sym: *const c_void, src: *const c_void, count: usize, offset: usize, kind: u32, stream: *mut c_void) {
        let d = symbol_range(sym, count, offset)?;
        let s = resolve_stream(stream as u64, false)?;
        let kind = if kind == DEFAULT { DEFAULT } else if kind == D2D { D2D } else { H2D };
        copy(d, count as u64, src as u64, count as u64, count as u64, 1, kind, s, false)
    }
    fn cudaMemcpyFromSymbolAsync(dst: *mut c_void, sym: *const c_void, count: usize, offset: usize, kind: u32, stream: *mut c_void) {
        let src = symbol_range(sym, count, offset)?;
        let s = resolve_stream(stream as u64, false)?;
        let kind = if kind == DEFAULT { DEFAULT } else if kind == D2D { D2D } else { D2H };
        copy(dst as u64, count as u64, src, count as u64, count as u64, 1, kind, s, false)
    }
    fn cudaMemcpyPeer(dst: *mut c_void, dst_dev: i32, src: *const c_void, src_dev: i32, count: usize) {
        if dst_dev != 0 || src_dev != 0 {
            return Err(cuda::ERROR_INVALID_DEVICE);
        }
        copy(dst as u64, count as u64, src as u64, count as u64, count as u64, 1, D2D, 0, true)
    }
    fn cudaMemcpyPeerAsync(dst: *mut c_void, dst_dev: i32, src: *const c_void, src_dev: i32, count: usize, stream: *mut c_void) {
        if dst_dev != 0 || src_dev != 0 {
            return Err(cuda::ERROR_INVALID_DEVICE);
        }
        let s = resolve_stream(stream as u64, false)?;
        copy(dst as u64, count as u64, src as u64, count as u64, count as u64, 1, D2D, s, false)
    }
    fn cudaGetSymbolAddress(dev_ptr: *mut *mut c_void, sym: *const c_void) {
        let (a, _) = symbol(sym as usize)?;
        out(dev_ptr, a as *mut c_void)
    }
    fn cudaGetSymbolSize(size: *mut usize, sym: *const c_void) {
        let (_, s) = symbol(sym as usize)?;
        out(size, s as usize)
    }
    fn cudaMemset(dst: *mut c_void, value: i32, count: usize) {
        memset(dst as u64, count as u64, value, count as u64, 1, 0)
    }
    fn cudaMemsetAsync(dst: *mut c_void, value: i32, count: usize, stream: *mut c_void) {
        let s = resolve_stream(stream as u64, false)?;
        memset(dst as u64, count as u64, value, count as u64, 1, s)
    }
    fn cudaMemsetAsync_ptsz(dst: *mut c_void, value: i32, count: usize, stream: *mut c_void) {
        let s = resolve_stream(stream as u64, true)?;
        memset(dst as u64, count as u64, value, count as u64, 1, s)
    }
    fn cudaMemset2D(dst: *mut c_void, pitch: usize, value: i32, width: usize, height: usize) {
        memset(dst as u64, pitch as u64, value, width as u64, height as u64, 0)
    }
    fn cudaMemset2DAsync(dst: *mut c_void, pitch: usize, value: i32, width: usize, height: usize, stream: *mut c_void) {
        let s = resolve_stream(stream as u64, false)?;
        memset(dst as u64, pitch as u64, value, width as u64, height as u64, s)
    }
    fn cudaMemPrefetchAsync(ptr: *const c_void, count: usize, location: u64, _flags: u32, _stream: *mut c_void) {
        prefetch(ptr as u64, count as u64, location)
    }
    fn cudaMemAdvise(ptr: *const c_void, count: usize, advice: u32, location: u64) {
        check_managed_range(ptr as u64, count as u64)?;
        let loc = mem_location(location);
        // Where data lives does not change (the shadow pages fetch what the program touches,
        // the proxy holds the memory): the advice is recorded for cudaMemRangeGetAttribute.
        let f: Box<dyn Fn(&mut Advice)> = match advice {
            1 => Box::new(|a| a.read_mostly = true),
            2 => Box::new(|a| a.read_mostly = false),
            3 => {
                let l = check_location(loc)?;
                Box::new(move |a| a.preferred = Some(l))
            }
            4 => Box::new(|a| a.preferred = None),
            5 | 6 => {
                let on = advice == 5;
                match check_location(loc)?.ty {
                    advice::LOC_DEVICE => Box::new(move |a| a.accessed_by_device = on),
                    _ => Box::new(move |a| a.accessed_by_host = on),
                }
            }
            _ => return Err(cuda::ERROR_INVALID_VALUE),
        };
        advice::update(ptr as u64, count as u64, f);
        Ok(())
    }
    fn cudaMemRangeGetAttribute(data: *mut u8, size: usize, attr: u32, ptr: *const c_void, count: usize) {
        check_managed_range(ptr as u64, count as u64)?;
        range_attribute(data, size, attr, ptr as u64, count as u64)
    }
    fn cudaMemRangeGetAttributes(data: *const *mut u8, sizes: *const usize, attrs: *const u32, num: usize, ptr: *const c_void, count: usize) {
        check_managed_range(ptr as u64, count as u64)?;
        if num == 0 {
            return Err(cuda::ERROR_INVALID_VALUE);
        }
        for i in 0..num {
            let d = read(data.wrapping_add(i))?;
            let n = read(sizes.wrapping_add(i))?;
            let a = read(attrs.wrapping_add(i))?;
            range_attribute(d, n, a, ptr as u64, count as u64)?;
        }
        Ok(())
    }
    fn cudaPointerGetAttributes(attr: *mut u8, ptr: *const c_void) {
        zero(attr, CUDAPOINTERATTRIBUTES_SIZE)?;
        let a = ptr as u64;
        // cudaMemoryType: 0 unregistered, 1 host, 2 device, 3 managed.
        let (ty, dev, host) = match find_alloc(a) {
            Some((_, r)) => match r.kind {
                MemKind::Device => (2, a, 0),
                MemKind::Managed => (3, a, a),
                MemKind::Pinned | MemKind::Registered => (1, a, a),
            },
            None => (0, 0, 0),
        };
        set_field(attr, CUDAPOINTERATTRIBUTES_TYPE, ty as u32);
        set_field(attr, CUDAPOINTERATTRIBUTES_DEVICE, if ty == 0 { -2i32 } else { 0 });
        set_field(attr, CUDAPOINTERATTRIBUTES_DEVICEPOINTER, dev);
        set_field(attr, CUDAPOINTERATTRIBUTES_HOSTPOINTER, host);
        Ok(())
    }
    fn cudaMemset_ptds(dst: *mut c_void, value: i32, count: usize) {
        let s = resolve_stream(0, true)?;
        memset(dst as u64, count as u64, value, count as u64, 1, s)
    }
    fn cudaMemset2D_ptds(dst: *mut c_void, pitch: usize, value: i32, width: usize, height: usize) {
        let s = resolve_stream(0, true)?;
        memset(dst as u64, pitch as u64, value, width as u64, height as u64, s)
    }
    fn cudaMemset2DAsync_ptsz(dst: *mut c_void, pitch: usize, value: i32, width: usize, height: usize, stream: *mut c_void) {
        let s = resolve_stream(stream as u64, true)?;
        memset(dst as u64, pitch as u64, value, width as u64, height as u64, s)
    }
    fn cudaMemcpy2D_ptds(dst: *mut c_void, dpitch: usize, src: *const c_void, spitch: usize, width: usize, height: usize, kind: u32) {
        let s = resolve_stream(0, true)?;
        copy(dst as u64, dpitch as u64, src as u64, spitch as u64, width as u64, height as u64, kind, s, true)
    }
    fn cudaMemcpy2DAsync_ptsz(dst: *mut c_void, dpitch: usize, src: *const c_void, spitch: usize, width: usize, height: usize, kind: u32, stream: *mut c_void) {
        let s = resolve_stream(stream as u64, true)?;
        copy(dst as u64, dpitch as u64, src as u64, spitch as u64, width as u64, height as u64, kind, s, false)
    }
    fn cudaMemcpyToSymbol_ptds(sym: *const c_void, src: *const c_void, count: usize, offset: usize, kind: u32) {
        let d = symbol_range(sym, count, offset)?;
        let s = resolve_stream(0, true)?;
        copy(d, count as u64, src as u64, count as u64, count as u64, 1, to_symbol_kind(kind), s, true)
    }
    fn cudaMemcpyFromSymbol_ptds(dst: *mut c_void, sym: *const c_void, count: usize, offset: usize, kind: u32) {
        let src = symbol_range(sym, count, offset)?;
        let s = resolve_stream(0, true)?;
        copy(dst as u64, count as u64, src, count as u64, count as u64, 1, from_symbol_kind(kind), s, true)
    }
    fn cudaMemcpyToSymbolAsync_ptsz(sym: *const c_void, src: *const c_void, count: usize, offset: usize, kind: u32, stream: *mut c_void) {
        let d = symbol_range(sym, count, offset)?;
        let s = resolve_stream(stream as u64, true)?;
        copy(d, count as u64, src as u64, count as u64, count as u64, 1, to_symbol_kind(kind), s, false)
    }
    fn cudaMemcpyFromSymbolAsync_ptsz(dst: *mut c_void, sym: *const c_void, count: usize, offset: usize, kind: u32, stream: *mut c_void) {
        let src = symbol_range(sym, count, offset)?;
        let s = resolve_stream(stream as u64, true)?;
        copy(dst as u64, count as u64, src, count as u64, count as u64, 1, from_symbol_kind(kind), s, false)
    }
    fn cudaMemPrefetchAsync_ptsz(ptr: *const c_void, count: usize, location: u64, _flags: u32, _stream: *mut c_void) {
        prefetch(ptr as u64, count as u64, location)
    }
    fn cudaStreamAttachMemAsync(stream: *mut c_void, ptr: *mut c_void, _len: usize, _flags: u32) {
        attach_mem(stream, ptr, false)
    }
    fn cudaStreamAttachMemAsync_ptsz(stream: *mut c_void, ptr: *mut c_void, _len: usize, _flags: u32) {
        attach_mem(stream, ptr, true)
    }
}

/// `cudaStreamAttachMemAsync`: managed memory is always visible to both sides here (the
/// shadow pages are flushed before any device work), so attaching changes nothing; the
/// stream (`_ptsz`: 0 is this thread's default stream) and the range are still checked.
fn attach_mem(stream: *mut c_void, ptr: *mut c_void, ptsz: bool) -> CudaResult<()> {
    resolve_stream(stream as u64, ptsz)?;
    match find_alloc(ptr as u64) {
        Some((_, r)) if r.kind == MemKind::Managed => Ok(()),
        _ => Err(cuda::ERROR_INVALID_VALUE),
    }
}

/// `cudaMemPrefetchAsync` (`location`: a `cudaMemLocation` passed by value, type in the low
/// half). To the device: the dirty shadow pages are sent now. To the host: pages are fetched
/// when first touched after the stream's work (read-ahead), as nothing is current before.
fn prefetch(ptr: u64, count: u64, location: u64) -> CudaResult<()> {
    check_managed_range(ptr, count)?;
    let loc = check_location(mem_location(location))?;
    if loc.ty == advice::LOC_DEVICE {
        crate::managed::sync_point();
    }
    advice::update(ptr, count, |a| a.prefetched = Some(loc));
    Ok(())
}

/// `[ptr, ptr+count)` inside one managed allocation (what advice and range queries take).
fn check_managed_range(ptr: u64, count: u64) -> CudaResult<()> {
    match find_alloc(ptr) {
        Some((b, r)) if r.kind == MemKind::Managed && ptr.saturating_add(count) <= b + r.len => Ok(()),
        _ => Err(cuda::ERROR_INVALID_VALUE),
    }
}

/// A `cudaMemLocation` passed by value: `type` in the low half, `id` in the high half.
fn mem_location(v: u64) -> Loc {
    Loc { ty: v as u32, id: (v >> 32) as u32 as i32 }
}

/// A location advice or a prefetch may name: device 0 or the host (any NUMA form).
fn check_location(l: Loc) -> CudaResult<Loc> {
    match l.ty {
        advice::LOC_DEVICE if l.id == 0 => Ok(l),
        advice::LOC_DEVICE => Err(cuda::ERROR_INVALID_DEVICE),
        advice::LOC_HOST | advice::LOC_HOST_NUMA | advice::LOC_HOST_NUMA_CURRENT => Ok(l),
        _ => Err(cuda::ERROR_INVALID_VALUE),
    }
}

/// `cudaCpuDeviceId` and `cudaInvalidDeviceId`.
const CPU_DEVICE_ID: i32 = -1;
const INVALID_DEVICE_ID: i32 = -2;

/// One `cudaMemRangeAttribute` of `[ptr, ptr+count)` into `data` (`size` bytes), as CUDA
/// documents it: a value only when every page of the range has it.
fn range_attribute(data: *mut u8, size: usize, attr: u32, ptr: u64, count: u64) -> CudaResult<()> {
    let q = advice::query(ptr, count);
    let same = |f: fn(&Advice) -> Option<Loc>| -> Option<Loc> {
        let v = f(&q[0]);
        q.iter().all(|a| f(a) == v).then_some(v).flatten()
    };
    let legacy_id = |l: Option<Loc>| match l {
        Some(Loc { ty: advice::LOC_DEVICE, id }) => id,
        Some(_) => CPU_DEVICE_ID,
        None => INVALID_DEVICE_ID,
    };
    let int = |v: i32| -> CudaResult<()> {
        if size != 4 {
            return Err(cuda::ERROR_INVALID_VALUE);
        }
        out(data as *mut i32, v)
    };
    // The id of a location type other than device or host NUMA node is to be ignored.
    let id = |l: Option<Loc>| l.map_or(INVALID_DEVICE_ID, |l| l.id);
    match attr {
        1 => int(q.iter().all(|a| a.read_mostly) as i32),
        2 => int(legacy_id(same(|a| a.preferred))),
        3 => {
            if size == 0 || !size.is_multiple_of(4) {
                return Err(cuda::ERROR_INVALID_VALUE);
            }
            let mut ids = Vec::new();
            if q.iter().all(|a| a.accessed_by_device) {
                ids.push(0);
            }
            if q.iter().all(|a| a.accessed_by_host) {
                ids.push(CPU_DEVICE_ID);
            }
            for i in 0..size / 4 {
                out((data as *mut i32).wrapping_add(i), ids.get(i).copied().unwrap_or(INVALID_DEVICE_ID))?;
            }
            Ok(())
        }
        4 => int(legacy_id(same(|a| a.prefetched))),
        5 => int(same(|a| a.preferred).map_or(0, |l| l.ty) as i32),
        6 => int(id(same(|a| a.preferred))),
        7 => int(same(|a| a.prefetched).map_or(0, |l| l.ty) as i32),
        8 => int(id(same(|a| a.prefetched))),
        _ => Err(cuda::ERROR_INVALID_VALUE),
    }
}

pub(crate) fn to_symbol_kind(kind: u32) -> u32 {
    match kind {
        DEFAULT | D2D => kind,
        _ => H2D,
    }
}

pub(crate) fn from_symbol_kind(kind: u32) -> u32 {
    match kind {
        DEFAULT | D2D => kind,
        _ => D2H,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_direction_is_inferred_from_known_allocations() {
        let dev = 0x2100_0000_0000u64;
        let managed = 0x2100_0010_0000u64;
        add_alloc(dev, 4096, MemKind::Device, 0);
        add_alloc(managed, 4096, MemKind::Managed, 0);
        let host = 0x1000u64;
        assert_eq!(direction(dev + 8, host, DEFAULT), Ok(H2D));
        assert_eq!(direction(host, dev, DEFAULT), Ok(D2H));
        assert_eq!(direction(dev, dev + 64, DEFAULT), Ok(D2D));
        assert_eq!(
            direction(host, managed, DEFAULT),
            Ok(H2H),
            "managed memory is host-accessible"
        );
        assert_eq!(
            direction(host, host, 7),
            Err(cuda::ERROR_INVALID_MEMCPY_DIRECTION)
        );
    }

    #[test]
    fn memset_outside_any_allocation_is_invalid_value() {
        assert_eq!(
            check_device_range(0x2200_0000_0000, 16),
            Err(cuda::ERROR_INVALID_VALUE)
        );
        add_alloc(0x2200_0000_0000, 100, MemKind::Device, 0);
        assert_eq!(check_device_range(0x2200_0000_0000, 100), Ok(()));
        assert_eq!(
            check_device_range(0x2200_0000_0000 + 50, 51),
            Err(cuda::ERROR_INVALID_VALUE)
        );
    }
}
