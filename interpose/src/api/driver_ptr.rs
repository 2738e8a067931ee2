//! The driver API's pointer and managed-range calls (issue 13): `cuPointerGetAttribute[s]`,
//! `cuPointerSetAttribute`, `cuMemAdvise`, `cuMemPrefetchAsync`, `cuMemRangeGetAttribute[s]`
//! — what Numba, CuPy, UCX and libfabric ask about the memory they are handed.
//!
//! Answers come from the records the runtime keeps (`state::find_alloc`: the allocation and
//! its kind; `context::owner_of`: the context that allocated it; `pool::pool_of`; the VMM
//! tables of `api::vmm`), so they hold after a restart as the records do: they are the
//! program's memory. Advice, prefetches and range attributes go through the runtime's
//! (`cudaMemAdvise`…: the enums and `CUmemLocation` are the runtime's values); the CUDA 11
//! forms (`cuMemAdvise`, `cuMemPrefetchAsync` with a `CUdevice`, `CU_DEVICE_CPU` = -1 the
//! host) are exported under their plain names for `cuGetProcAddress` before 12.2.
//!
//! Pointer attributes, as CUDA documents them: memory the driver does not know answers
//! `CUDA_ERROR_INVALID_VALUE` in `cuPointerGetAttribute`, its default (zeros) in
//! `cuPointerGetAttributes`. `CU_POINTER_ATTRIBUTE_MEMORY_TYPE` is device or host only:
//! managed memory is `CU_MEMORYTYPE_DEVICE` with `IS_MANAGED` 1, as NVIDIA's driver answers.
//! Booleans are written as one byte (`bool`, as CUDA's own Python bindings pass them).
//!
//! # Safety
//! The only unsafe code is the `#[no_mangle]` exports of `driver!`; application pointers are
//! read and written through `ffi` (`read`, `out`, `zero`), under its contract.
#![allow(unsafe_code, non_snake_case)]

use std::collections::HashSet;
use std::ffi::c_void;
use std::sync::Mutex;

use crum_wire::cuda;

use super::context;
use super::driver::{driver, rt};
use crate::errors::CudaResult;
use crate::ffi::*;
use crate::managed::advice::{LOC_DEVICE, LOC_HOST};
use crate::state::{find_alloc, MemKind};

/// `CUpointer_attribute` (cuda.h).
const CONTEXT: u32 = 1;
const MEMORY_TYPE: u32 = 2;
const DEVICE_POINTER: u32 = 3;
const HOST_POINTER: u32 = 4;
const SYNC_MEMOPS: u32 = 6;
const BUFFER_ID: u32 = 7;
const IS_MANAGED: u32 = 8;
const DEVICE_ORDINAL: u32 = 9;
const IS_LEGACY_CUDA_IPC_CAPABLE: u32 = 10;
const RANGE_START_ADDR: u32 = 11;
const RANGE_SIZE: u32 = 12;
const MAPPED: u32 = 13;
const ALLOWED_HANDLE_TYPES: u32 = 14;
const IS_GPU_DIRECT_RDMA_CAPABLE: u32 = 15;
const ACCESS_FLAGS: u32 = 16;
const MEMPOOL_HANDLE: u32 = 17;
const MAPPING_SIZE: u32 = 18;
const MAPPING_BASE_ADDR: u32 = 19;

/// `CU_MEMORYTYPE_HOST`, `CU_MEMORYTYPE_DEVICE`.
const MEMORYTYPE_HOST: u32 = 1;
const MEMORYTYPE_DEVICE: u32 = 2;
/// `CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE`.
const ACCESS_READWRITE: u32 = 3;
/// `CU_DEVICE_CPU`.
const DEVICE_CPU: i32 = -1;

/// Buffer ids of allocations whose `SYNC_MEMOPS` was set (ids are never reused, so a freed
/// allocation's entry can never be mistaken for a new one's).
static SYNC_MEMOPS_SET: Mutex<Option<HashSet<u64>>> = Mutex::new(None);

fn sync_memops(id: u64) -> bool {
    SYNC_MEMOPS_SET.lock().unwrap_or_else(|p| p.into_inner()).as_ref().is_some_and(|s| s.contains(&id))
}

/// An attribute's value, with the C type it is written as.
#[derive(Debug, PartialEq, Eq)]
enum Value {
    Bool(bool),
    U32(u32),
    I32(i32),
    U64(u64),
}

impl Value {
    fn write(&self, data: *mut c_void) -> CudaResult<()> {
        match *self {
            Value::Bool(b) => out(data as *mut u8, b as u8),
            Value::U32(v) => out(data as *mut u32, v),
            Value::I32(v) => out(data as *mut i32, v),
            Value::U64(v) => out(data as *mut u64, v),
        }
    }

    /// The documented default of `attr` for a pointer CUDA does not know (zero), or `None`
    /// for an attribute this face does not answer.
    fn default_of(attr: u32) -> Option<Value> {
        Some(match attr {
            SYNC_MEMOPS | IS_MANAGED | IS_LEGACY_CUDA_IPC_CAPABLE | MAPPED | IS_GPU_DIRECT_RDMA_CAPABLE => Value::Bool(false),
            MEMORY_TYPE | ACCESS_FLAGS => Value::U32(0),
            DEVICE_ORDINAL => Value::I32(0),
            CONTEXT | DEVICE_POINTER | HOST_POINTER | BUFFER_ID | RANGE_START_ADDR | RANGE_SIZE | ALLOWED_HANDLE_TYPES
            | MEMPOOL_HANDLE | MAPPING_SIZE | MAPPING_BASE_ADDR => Value::U64(0),
            _ => return None,
        })
    }
}

/// Attribute `attr` of `ptr`; `CUDA_ERROR_INVALID_VALUE` for memory CUDA does not know, an
/// attribute it has no value for (a device allocation's host pointer), or one this face does
/// not answer.
fn attribute(attr: u32, ptr: u64) -> CudaResult<Value> {
    let invalid = Err(cuda::ERROR_INVALID_VALUE);
    Value::default_of(attr).ok_or(cuda::ERROR_INVALID_VALUE)?;
    let Some((base, rec)) = find_alloc(ptr) else {
        // A reserved VMM range with nothing mapped at `ptr`: a range, not mapped.
        return match (attr, super::vmm::reservation_of(ptr)) {
            (MAPPED, Some(_)) => Ok(Value::Bool(false)),
            (RANGE_START_ADDR, Some((b, _))) => Ok(Value::U64(b)),
            (RANGE_SIZE, Some((_, l))) => Ok(Value::U64(l)),
            _ => invalid,
        };
    };
    let mapping = super::vmm::mapping_of(ptr);
    let host = matches!(rec.kind, MemKind::Pinned | MemKind::Registered);
    Ok(match attr {
        CONTEXT => Value::U64(context::owner_of(base) as u64),
        MEMORY_TYPE => Value::U32(if host { MEMORYTYPE_HOST } else { MEMORYTYPE_DEVICE }),
        // One address space: the pointer is its own device pointer, and its own host pointer
        // where the host can reach the memory.
        DEVICE_POINTER => Value::U64(ptr),
        HOST_POINTER if host || rec.kind == MemKind::Managed => Value::U64(ptr),
        HOST_POINTER => return invalid,
        SYNC_MEMOPS => Value::Bool(sync_memops(rec.buffer_id)),
        BUFFER_ID => Value::U64(rec.buffer_id),
        IS_MANAGED => Value::Bool(rec.kind == MemKind::Managed),
        DEVICE_ORDINAL => Value::I32(0),
        IS_LEGACY_CUDA_IPC_CAPABLE | IS_GPU_DIRECT_RDMA_CAPABLE => Value::Bool(false),
        // The reserved range of a VMM mapping, else the allocation.
        RANGE_START_ADDR => Value::U64(super::vmm::reservation_of(ptr).map_or(base, |r| r.0)),
        RANGE_SIZE => Value::U64(super::vmm::reservation_of(ptr).map_or(rec.len, |r| r.1)),
        MAPPED => Value::Bool(true),
        ALLOWED_HANDLE_TYPES => Value::U64(0),
        ACCESS_FLAGS => Value::U32(mapping.map_or(ACCESS_READWRITE, |m| super::vmm::access_of(m.0))),
        MEMPOOL_HANDLE => Value::U64(crate::pool::pool_of(base).unwrap_or(0)),
        MAPPING_BASE_ADDR => Value::U64(mapping.map_or(base, |m| m.0)),
        MAPPING_SIZE => Value::U64(mapping.map_or(rec.len, |m| m.1)),
        _ => return invalid,
    })
}

/// A `CUdevice` of the CUDA 11 forms as a `CUmemLocation` passed by value (type in the low
/// half, id in the high half): `CU_DEVICE_CPU` is the host.
fn location_of_device(dev: i32) -> u64 {
    if dev == DEVICE_CPU {
        LOC_HOST as u64
    } else {
        LOC_DEVICE as u64 | ((dev as u32 as u64) << 32)
    }
}

driver! {
    fn cuPointerGetAttribute(data: *mut c_void, attr: u32, ptr: u64) {
        if data.is_null() {
            return Err(cuda::ERROR_INVALID_VALUE);
        }
        attribute(attr, ptr)?.write(data)
    }
    fn cuPointerGetAttributes(num: u32, attrs: *const u32, data: *const *mut c_void, ptr: u64) {
        if num == 0 || attrs.is_null() || data.is_null() {
            return Err(cuda::ERROR_INVALID_VALUE);
        }
        for i in 0..num as usize {
            let attr = read(attrs.wrapping_add(i))?;
            let d = read(data.wrapping_add(i))?;
            if d.is_null() {
                return Err(cuda::ERROR_INVALID_VALUE);
            }
            // Memory CUDA does not know (or an attribute without a value for it) gets the
            // attribute's default rather than failing the call.
            let v = match attribute(attr, ptr) {
                Ok(v) => v,
                Err(_) => Value::default_of(attr).ok_or(cuda::ERROR_INVALID_VALUE)?,
            };
            v.write(d)?;
        }
        Ok(())
    }
    fn cuPointerSetAttribute(value: *const c_void, attr: u32, ptr: u64) {
        if attr != SYNC_MEMOPS || value.is_null() {
            return Err(cuda::ERROR_INVALID_VALUE);
        }
        let (_, rec) = find_alloc(ptr).ok_or(cuda::ERROR_INVALID_VALUE)?;
        let on = read(value as *const u8)? != 0;
        let mut g = SYNC_MEMOPS_SET.lock().unwrap_or_else(|p| p.into_inner());
        let set = g.get_or_insert_with(HashSet::new);
        // Synchronous operations here always synchronize: the flag is only remembered.
        if on {
            set.insert(rec.buffer_id);
        } else {
            set.remove(&rec.buffer_id);
        }
        Ok(())
    }
    fn cuMemAdvise_v2(ptr: u64, count: usize, advice: u32, location: u64) {
        // CUmem_advise and CUmemLocation are the runtime's values and layout.
        rt(super::memory::cudaMemAdvise(ptr as *const c_void, count, advice, location))
    }
    fn cuMemAdvise(ptr: u64, count: usize, advice: u32, dev: i32) {
        rt(super::memory::cudaMemAdvise(ptr as *const c_void, count, advice, location_of_device(dev)))
    }
    fn cuMemPrefetchAsync_v2(ptr: u64, count: usize, location: u64, flags: u32, stream: *mut c_void) {
        rt(super::memory::cudaMemPrefetchAsync(ptr as *const c_void, count, location, flags, stream))
    }
    fn cuMemPrefetchAsync(ptr: u64, count: usize, dev: i32, stream: *mut c_void) {
        rt(super::memory::cudaMemPrefetchAsync(ptr as *const c_void, count, location_of_device(dev), 0, stream))
    }
    fn cuMemRangeGetAttribute(data: *mut u8, size: usize, attr: u32, ptr: u64, count: usize) {
        // CUmem_range_attribute is cudaMemRangeAttribute.
        rt(super::memory::cudaMemRangeGetAttribute(data, size, attr, ptr as *const c_void, count))
    }
    fn cuMemRangeGetAttributes(data: *const *mut u8, sizes: *const usize, attrs: *const u32, num: usize, ptr: u64, count: usize) {
        rt(super::memory::cudaMemRangeGetAttributes(data, sizes, attrs, num, ptr as *const c_void, count))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::add_alloc;

    #[test]
    fn a_device_allocation_has_no_host_pointer_and_managed_memory_is_device_memory_that_is_managed() {
        let dev = 0x2300_0000_0000u64;
        let managed = 0x2300_0010_0000u64;
        add_alloc(dev, 4096, MemKind::Device, 0);
        add_alloc(managed, 4096, MemKind::Managed, 0);
        assert_eq!(attribute(HOST_POINTER, dev + 8), Err(cuda::ERROR_INVALID_VALUE));
        assert_eq!(attribute(DEVICE_POINTER, dev + 8), Ok(Value::U64(dev + 8)));
        assert_eq!(attribute(MEMORY_TYPE, managed), Ok(Value::U32(MEMORYTYPE_DEVICE)));
        assert_eq!(attribute(IS_MANAGED, managed), Ok(Value::Bool(true)));
        assert_eq!(attribute(RANGE_START_ADDR, dev + 100), Ok(Value::U64(dev)));
        assert_eq!(attribute(RANGE_SIZE, dev + 100), Ok(Value::U64(4096)));
    }

    #[test]
    fn buffer_ids_are_unique_and_never_reused_at_the_same_address() {
        let a = 0x2300_0020_0000u64;
        add_alloc(a, 64, MemKind::Device, 0);
        let first = attribute(BUFFER_ID, a);
        crate::state::remove_alloc(a);
        add_alloc(a, 64, MemKind::Device, 0);
        assert_ne!(attribute(BUFFER_ID, a), first);
    }

    #[test]
    fn an_unknown_pointer_is_invalid_and_an_unknown_attribute_has_no_default() {
        assert_eq!(attribute(CONTEXT, 0x1000), Err(cuda::ERROR_INVALID_VALUE));
        assert_eq!(Value::default_of(5), None, "P2P tokens");
        assert_eq!(Value::default_of(MEMORY_TYPE), Some(Value::U32(0)));
    }

    #[test]
    fn the_host_of_the_cuda_11_forms_is_device_cpu() {
        assert_eq!(location_of_device(-1), LOC_HOST as u64);
        assert_eq!(location_of_device(0), LOC_DEVICE as u64);
    }
}
