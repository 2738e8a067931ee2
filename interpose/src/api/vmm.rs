//! The driver API's virtual memory management (issue 13): address ranges reserved
//! (`cuMemAddressReserve`), physical allocations (`cuMemCreate`) mapped into them
//! (`cuMemMap`), access set (`cuMemSetAccess`), unmapped, released and freed.
//!
//! - Ranges are reserved here, in the program, from the part of the device window that the
//!   proxy keeps for them (`crum_wire::VMM_VA_OFFSET`: ordinary allocations never land
//!   there), first fit, aligned to the granularity (2 MiB) or more.
//! - A mapping is device memory the proxy places at exactly that address
//!   (`Request::MapAt`); mappings side by side form one range for copies and kernels. So a
//!   mapping is device memory like any other in a checkpoint: saved with its address and
//!   bytes, and placed at the same address by a restart (no format change).
//! - A physical allocation's bytes live in its mapping while it is mapped; when it is
//!   unmapped and still held (not released), they are copied into the program's memory
//!   and go back into the next mapping — a checkpoint holds them either way.
//! - The tables (ranges, allocations, mappings, access) are the program's memory, restored
//!   with it.
//!
//! Limits on the emulated device, each a documented error (`docs/driver-api.md` § 5): one
//! mapping per physical allocation at a time, of all of it (offset 0, the allocation's
//! size) — `CUDA_ERROR_NOT_SUPPORTED` otherwise; no shareable handles (export/import:
//! absent); access is recorded (`cuMemGetAccess`) but not enforced (a kernel may touch a
//! mapping before `cuMemSetAccess`, where a GPU would fault); `cuMemMap` on the cuda backend
//! answers `CUDA_ERROR_NOT_SUPPORTED`.
//!
//! # Safety
//! The only unsafe code is the `#[no_mangle]` exports of `driver!`; application pointers are
//! read and written through `ffi` (`read`, `field`, `out`), under its contract.
#![allow(unsafe_code, non_snake_case)]

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard};

use crum_wire::{cuda, Body, Request, DEVICE_VA_BASE, VMM_GRANULARITY, VMM_VA_OFFSET, VMM_VA_SIZE};

use super::driver::{driver, rt};
use crate::client::call;
use crate::errors::CudaResult;
use crate::ffi::*;
use crate::state::{add_alloc, remove_alloc, MemKind};

/// `CUmemAllocationProp`'s size and the fields read (offsets measured from cuda.h 13).
const PROP_SIZE: usize = 32;
const PROP_TYPE: usize = 0;
const PROP_LOCATION_TYPE: usize = 8;
const PROP_LOCATION_ID: usize = 12;
/// `CU_MEM_ALLOCATION_TYPE_PINNED`, `CU_MEM_LOCATION_TYPE_DEVICE`.
const TYPE_PINNED: u32 = 1;
const LOCATION_DEVICE: u32 = 1;
/// `CUmemAccessDesc`: location (type, id), flags; 12 bytes.
const ACCESS_SIZE: usize = 12;
/// `CU_MEM_ACCESS_FLAGS_PROT_READWRITE`, the largest flag.
const ACCESS_READWRITE: u32 = 3;

struct Physical {
    size: u64,
    prop: [u8; PROP_SIZE],
    /// References: the creation and each `cuMemRetainAllocationHandle`, less releases.
    refs: u32,
    /// Where it is mapped.
    mapped: Option<u64>,
    /// Its bytes while unmapped (None: never written, or mapped).
    kept: Option<Vec<u8>>,
}

struct Mapping {
    len: u64,
    handle: u64,
    /// `CUmemAccess_flags` for device 0 (0 until `cuMemSetAccess`).
    access: u32,
}

#[derive(Default)]
struct Vmm {
    /// Reserved ranges: start → length.
    reserved: BTreeMap<u64, u64>,
    physical: HashMap<u64, Physical>,
    mappings: BTreeMap<u64, Mapping>,
    next_handle: u64,
}

static VMM: Mutex<Option<Vmm>> = Mutex::new(None);

fn vmm() -> MutexGuard<'static, Option<Vmm>> {
    VMM.lock().unwrap_or_else(|p| p.into_inner())
}

fn with<R>(f: impl FnOnce(&mut Vmm) -> R) -> R {
    f(vmm().get_or_insert_with(Vmm::default))
}

const LO: u64 = DEVICE_VA_BASE + VMM_VA_OFFSET;
const HI: u64 = LO + VMM_VA_SIZE;

/// Whether `addr` is the start of a VMM mapping (which `cuMemFree` must not free).
pub(crate) fn is_mapped(addr: u64) -> bool {
    (LO..HI).contains(&addr) && with(|v| v.mappings.contains_key(&addr))
}

/// The mapping containing `addr`: (start, length).
pub(crate) fn mapping_of(addr: u64) -> Option<(u64, u64)> {
    if !(LO..HI).contains(&addr) {
        return None;
    }
    with(|v| v.mappings.range(..=addr).next_back().filter(|(&b, m)| addr < b + m.len).map(|(&b, m)| (b, m.len)))
}

/// The reserved range containing `addr`: (start, length).
pub(crate) fn reservation_of(addr: u64) -> Option<(u64, u64)> {
    if !(LO..HI).contains(&addr) {
        return None;
    }
    with(|v| v.reserved.range(..=addr).next_back().filter(|(&b, &l)| addr < b + l).map(|(&b, &l)| (b, l)))
}

/// The `CUmemAccess_flags` of device 0 for the mapping at `base` (0: none set).
pub(crate) fn access_of(base: u64) -> u32 {
    with(|v| v.mappings.get(&base).map_or(0, |m| m.access))
}

/// A `CUmemAllocationProp` for device memory of device 0, as `cuMemCreate` takes it.
fn check_prop(prop: *const u8) -> CudaResult<[u8; PROP_SIZE]> {
    let bytes: [u8; PROP_SIZE] = read(prop.cast())?;
    let ty: u32 = field(prop, PROP_TYPE)?;
    let loc: u32 = field(prop, PROP_LOCATION_TYPE)?;
    let id: i32 = field(prop, PROP_LOCATION_ID)?;
    if ty != TYPE_PINNED || loc != LOCATION_DEVICE {
        return Err(cuda::ERROR_INVALID_VALUE);
    }
    if id != 0 {
        return Err(cuda::ERROR_INVALID_DEVICE);
    }
    Ok(bytes)
}

/// First-fit start of `size` bytes aligned to `align` in the VMM range, at `hint` if free.
fn place(v: &Vmm, size: u64, align: u64, hint: u64) -> Option<u64> {
    let free = |at: u64| {
        let end = at.checked_add(size)?;
        let clear = v.reserved.range(..end).next_back().is_none_or(|(&b, &l)| b + l <= at);
        (at >= LO && end <= HI && clear).then_some(at)
    };
    if hint != 0 && hint.is_multiple_of(align) {
        if let Some(at) = free(hint) {
            return Some(at);
        }
    }
    let mut at = LO;
    for (&b, &l) in &v.reserved {
        if at + size <= b {
            return Some(at);
        }
        at = (b + l).next_multiple_of(align);
    }
    free(at)
}

/// Copies `len` bytes of device memory at `addr` into a new buffer.
fn save(addr: u64, len: u64) -> CudaResult<Vec<u8>> {
    let mut buf = vec![0u8; len as usize];
    let stream = crate::state::resolve_stream(0, false)?;
    super::memory::copy(buf.as_mut_ptr() as u64, len, addr, len, len, 1, 2, stream, true)?;
    Ok(buf)
}

driver! {
    fn cuMemGetAllocationGranularity(gran: *mut usize, prop: *const u8, _option: u32) {
        check_prop(prop)?;
        // Minimum and recommended granularity alike.
        out(gran, VMM_GRANULARITY as usize)
    }
    fn cuMemAddressReserve(ptr: *mut u64, size: usize, alignment: usize, addr: u64, flags: u64) {
        let size = size as u64;
        let align = (alignment as u64).max(VMM_GRANULARITY);
        if ptr.is_null() || size == 0 || !size.is_multiple_of(VMM_GRANULARITY) || !align.is_power_of_two() || flags != 0 {
            return Err(cuda::ERROR_INVALID_VALUE);
        }
        let at = with(|v| {
            let at = place(v, size, align, addr)?;
            v.reserved.insert(at, size);
            Some(at)
        })
        .ok_or(cuda::ERROR_MEMORY_ALLOCATION)?;
        out(ptr, at)
    }
    fn cuMemAddressFree(ptr: u64, size: usize) {
        with(|v| {
            if v.reserved.get(&ptr) != Some(&(size as u64)) {
                return Err(cuda::ERROR_INVALID_VALUE);
            }
            // Every mapping inside must be unmapped first.
            if v.mappings.range(ptr..ptr + size as u64).next().is_some() {
                return Err(cuda::ERROR_INVALID_VALUE);
            }
            v.reserved.remove(&ptr);
            Ok(())
        })
    }
    fn cuMemCreate(handle: *mut u64, size: usize, prop: *const u8, flags: u64) {
        let prop = check_prop(prop)?;
        let size = size as u64;
        if handle.is_null() || size == 0 || !size.is_multiple_of(VMM_GRANULARITY) || flags != 0 {
            return Err(cuda::ERROR_INVALID_VALUE);
        }
        // The memory the device reports is what a physical allocation takes, as on a GPU.
        let mut free = 0usize;
        let mut total = 0usize;
        rt(super::memory::cudaMemGetInfo(&mut free, &mut total))?;
        let held: u64 = with(|v| v.physical.values().filter(|p| p.mapped.is_none()).map(|p| p.size).sum());
        if size + held > free as u64 {
            return Err(cuda::ERROR_MEMORY_ALLOCATION);
        }
        let h = with(|v| {
            v.next_handle += 1;
            let h = 0x7e00_0000 + v.next_handle;
            v.physical.insert(h, Physical { size, prop, refs: 1, mapped: None, kept: None });
            h
        });
        out(handle, h)
    }
    fn cuMemRelease(handle: u64) {
        with(|v| {
            let p = v.physical.get_mut(&handle).ok_or(cuda::ERROR_INVALID_VALUE)?;
            p.refs = p.refs.saturating_sub(1);
            // A mapped allocation lives until it is unmapped.
            if p.refs == 0 && p.mapped.is_none() {
                v.physical.remove(&handle);
            }
            Ok(())
        })
    }
    fn cuMemMap(ptr: u64, size: usize, offset: usize, handle: u64, flags: u64) {
        let size = size as u64;
        let kept = with(|v| {
            let p = v.physical.get(&handle).ok_or(cuda::ERROR_INVALID_VALUE)?;
            if flags != 0 || !ptr.is_multiple_of(VMM_GRANULARITY) {
                return Err(cuda::ERROR_INVALID_VALUE);
            }
            if offset != 0 || size != p.size || p.mapped.is_some() {
                return Err(crate::errors::unsupported("cuMemMap (part of a physical allocation, or one mapped twice)"));
            }
            let inside = v.reserved.range(..=ptr).next_back().is_some_and(|(&b, &l)| ptr + size <= b + l);
            let clear = v.mappings.range(..ptr + size).next_back().is_none_or(|(&b, m)| b + m.len <= ptr);
            if !inside || !clear {
                return Err(cuda::ERROR_INVALID_VALUE);
            }
            let p = v.physical.get_mut(&handle).ok_or(cuda::ERROR_INVALID_VALUE)?;
            p.mapped = Some(ptr);
            v.mappings.insert(ptr, Mapping { len: size, handle, access: 0 });
            Ok(v.physical.get_mut(&handle).and_then(|p| p.kept.take()))
        })?;
        let undo = || {
            with(|v| {
                v.mappings.remove(&ptr);
                if let Some(p) = v.physical.get_mut(&handle) {
                    p.mapped = None;
                }
            })
        };
        crate::client::ensure()?;
        match call(&Request::MapAt { addr: ptr, size }) {
            Ok(Body::Alloc { addr, .. }) if addr == ptr => {}
            Ok(_) => {
                undo();
                return Err(cuda::ERROR_UNKNOWN);
            }
            Err(e) => {
                undo();
                return Err(e);
            }
        }
        add_alloc(ptr, size, MemKind::Device, 0);
        if let Some(bytes) = kept {
            let stream = crate::state::resolve_stream(0, false)?;
            super::memory::copy(ptr, size, bytes.as_ptr() as u64, size, size, 1, 1, stream, true)?;
        }
        Ok(())
    }
    fn cuMemUnmap(ptr: u64, size: usize) {
        let end = ptr.checked_add(size as u64).ok_or(cuda::ERROR_INVALID_VALUE)?;
        // The range must cover whole mappings, at least one.
        let maps: Vec<(u64, u64, u64)> = with(|v| {
            let partial = v.mappings.range(..ptr).next_back().is_some_and(|(&b, m)| b + m.len > ptr)
                || v.mappings.range(ptr..end).any(|(&b, m)| b + m.len > end);
            if partial {
                return Err(cuda::ERROR_INVALID_VALUE);
            }
            Ok(v.mappings.range(ptr..end).map(|(&b, m)| (b, m.len, m.handle)).collect())
        })?;
        if maps.is_empty() {
            return Err(cuda::ERROR_INVALID_VALUE);
        }
        rt(super::device::cudaDeviceSynchronize())?;
        for (addr, len, handle) in maps {
            let held = with(|v| v.physical.get(&handle).is_some_and(|p| p.refs > 0));
            let kept = if held { Some(save(addr, len)?) } else { None };
            call(&Request::Free { addr })?;
            remove_alloc(addr);
            with(|v| {
                v.mappings.remove(&addr);
                match v.physical.get_mut(&handle) {
                    Some(p) if p.refs > 0 => {
                        p.mapped = None;
                        p.kept = kept;
                    }
                    _ => {
                        v.physical.remove(&handle);
                    }
                }
            });
        }
        Ok(())
    }
    fn cuMemSetAccess(ptr: u64, size: usize, desc: *const u8, count: usize) {
        if desc.is_null() || count == 0 {
            return Err(cuda::ERROR_INVALID_VALUE);
        }
        let mut flags = None;
        for i in 0..count {
            // `desc` points to `count` descriptors (the ffi module's contract); `field`
            // reads each.
            let d = desc.wrapping_add(i * ACCESS_SIZE);
            let (ty, id, f): (u32, i32, u32) = (field(d, 0)?, field(d, 4)?, field(d, 8)?);
            if ty != LOCATION_DEVICE || f > ACCESS_READWRITE {
                return Err(cuda::ERROR_INVALID_VALUE);
            }
            if id != 0 {
                return Err(cuda::ERROR_INVALID_DEVICE);
            }
            flags = Some(f);
        }
        let end = ptr.checked_add(size as u64).ok_or(cuda::ERROR_INVALID_VALUE)?;
        with(|v| {
            // The range must be mapped all through, mapping after mapping.
            let mut at = ptr;
            let starts: Vec<u64> = v.mappings.range(..end).filter(|(&b, m)| b + m.len > ptr).map(|(&b, _)| b).collect();
            for b in &starts {
                let m = &v.mappings[b];
                if *b > at {
                    return Err(cuda::ERROR_INVALID_VALUE);
                }
                at = b + m.len;
            }
            if size == 0 || at < end {
                return Err(cuda::ERROR_INVALID_VALUE);
            }
            for b in starts {
                if let (Some(m), Some(f)) = (v.mappings.get_mut(&b), flags) {
                    m.access = f;
                }
            }
            Ok(())
        })
    }
    fn cuMemGetAccess(flags: *mut u64, location: *const [u32; 2], ptr: u64) {
        let [ty, id] = read(location)?;
        if ty != LOCATION_DEVICE || id != 0 {
            return Err(cuda::ERROR_INVALID_DEVICE);
        }
        let (b, _) = mapping_of(ptr).ok_or(cuda::ERROR_INVALID_VALUE)?;
        out(flags, with(|v| v.mappings.get(&b).map_or(0, |m| m.access)) as u64)
    }
    fn cuMemRetainAllocationHandle(handle: *mut u64, addr: *mut std::ffi::c_void) {
        let (b, _) = mapping_of(addr as u64).ok_or(cuda::ERROR_INVALID_VALUE)?;
        let h = with(|v| {
            let h = v.mappings.get(&b).map(|m| m.handle)?;
            v.physical.get_mut(&h)?.refs += 1;
            Some(h)
        })
        .ok_or(cuda::ERROR_INVALID_VALUE)?;
        out(handle, h)
    }
    fn cuMemGetAllocationPropertiesFromHandle(prop: *mut [u8; PROP_SIZE], handle: u64) {
        let p = with(|v| v.physical.get(&handle).map(|p| p.prop)).ok_or(cuda::ERROR_INVALID_VALUE)?;
        out(prop, p)
    }
}
