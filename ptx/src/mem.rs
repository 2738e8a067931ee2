//! Raw access to device memory through the regions the backend hands out.
//!
//! # Safety
//!
//! [`crate::DeviceMemory::region`] promises that `host..host+len` stays mapped and valid for
//! reads, and for writes unless the region is `read_only`, during the launch. Every access
//! here is bounds-checked against such a region first (`addr >= base && addr + size <= base +
//! len`, and no store or atomic to a read-only region), so the computed host pointer lies
//! inside it and is writable when written. Kernels may race on global memory exactly as they may on a GPU; plain
//! accesses use unaligned volatile-free reads/writes of plain integers (no references are
//! formed), and atomics use `Atomic*::from_ptr` only after checking natural alignment.
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::api::{DeviceMemory, LaunchError, Region};

/// A small cache of the regions a block touched, so lookups stay off the hot path.
pub(crate) struct Regions<'a> {
    mem: &'a dyn DeviceMemory,
    cache: [Option<Region>; 8],
    next: usize,
    /// Extra engine-owned region (grid-sync workspace), checked before the device's.
    pub(crate) extra: Option<Region>,
}

impl<'a> Regions<'a> {
    pub(crate) fn new(mem: &'a dyn DeviceMemory) -> Self {
        Regions { mem, cache: [None; 8], next: 0, extra: None }
    }

    pub(crate) fn mem(&self) -> &'a dyn DeviceMemory {
        self.mem
    }

    /// Host pointer for `size` bytes at device address `addr`, bounds- and alignment-checked
    /// (and, for a store, checked to be writable).
    #[inline]
    pub(crate) fn ptr(&mut self, addr: u64, size: u64, store: bool) -> Result<*mut u8, LaunchError> {
        if size > 1 && !addr.is_multiple_of(size.min(16)) {
            return Err(LaunchError::MisalignedAddress { addr });
        }
        for r in self.cache.iter().flatten() {
            if addr >= r.base && addr.wrapping_sub(r.base).saturating_add(size) <= r.len {
                if store && r.read_only {
                    return Err(LaunchError::IllegalAddress { addr });
                }
                return Ok(r.host.wrapping_add((addr - r.base) as usize));
            }
        }
        self.slow(addr, size, store)
    }

    #[cold]
    fn slow(&mut self, addr: u64, size: u64, store: bool) -> Result<*mut u8, LaunchError> {
        let r = match self.extra {
            Some(r) if addr >= r.base && addr - r.base < r.len => r,
            _ => self.mem.region(addr).ok_or(LaunchError::IllegalAddress { addr })?,
        };
        if addr < r.base || (addr - r.base).saturating_add(size) > r.len || (store && r.read_only) {
            return Err(LaunchError::IllegalAddress { addr });
        }
        self.cache[self.next] = Some(r);
        self.next = (self.next + 1) % self.cache.len();
        Ok(r.host.wrapping_add((addr - r.base) as usize))
    }

    /// Read `size` (1, 2, 4, 8) bytes, zero-extended.
    #[inline]
    pub(crate) fn read(&mut self, addr: u64, size: u32) -> Result<u64, LaunchError> {
        let p = self.ptr(addr, size as u64, false)?;
        // SAFETY: `p..p+size` lies inside a live region (checked by `ptr`).
        Ok(unsafe { read_raw(p, size) })
    }

    #[inline]
    pub(crate) fn write(&mut self, addr: u64, size: u32, v: u64) -> Result<(), LaunchError> {
        let p = self.ptr(addr, size as u64, true)?;
        // SAFETY: as in `read`.
        unsafe { write_raw(p, size, v) };
        Ok(())
    }

    /// Atomic read-modify-write of 4 or 8 bytes: `f(old) -> Some(new)` (None: no store).
    /// Returns the old value.
    pub(crate) fn atomic(&mut self, addr: u64, size: u32, f: &dyn Fn(u64) -> Option<u64>) -> Result<u64, LaunchError> {
        let p = self.ptr(addr, size as u64, true)?;
        if !addr.is_multiple_of(size as u64) {
            return Err(LaunchError::MisalignedAddress { addr });
        }
        match size {
            4 => {
                // SAFETY: `p` is 4-aligned (checked) and inside a live region; all concurrent
                // atomic accesses to it go through `AtomicU32` as well.
                let a = unsafe { AtomicU32::from_ptr(p as *mut u32) };
                let mut old = a.load(Ordering::SeqCst);
                loop {
                    let Some(new) = f(old as u64) else { return Ok(old as u64) };
                    match a.compare_exchange_weak(old, new as u32, Ordering::SeqCst, Ordering::SeqCst) {
                        Ok(_) => return Ok(old as u64),
                        Err(o) => old = o,
                    }
                }
            }
            8 => {
                // SAFETY: as above, 8-aligned.
                let a = unsafe { AtomicU64::from_ptr(p as *mut u64) };
                let mut old = a.load(Ordering::SeqCst);
                loop {
                    let Some(new) = f(old) else { return Ok(old) };
                    match a.compare_exchange_weak(old, new, Ordering::SeqCst, Ordering::SeqCst) {
                        Ok(_) => return Ok(old),
                        Err(o) => old = o,
                    }
                }
            }
            _ => {
                // 16-bit atomics (cas.b16): emulate with the enclosing aligned word.
                let wa = addr & !3;
                let sh = (addr & 3) * 8;
                let old = self.atomic(wa, 4, &|w| {
                    let cur = (w >> sh) & 0xffff;
                    f(cur).map(|n| (w & !(0xffff << sh)) | ((n & 0xffff) << sh))
                })?;
                Ok((old >> sh) & 0xffff)
            }
        }
    }
}

/// # Safety
/// `p..p+size` must be valid for reads.
#[inline]
unsafe fn read_raw(p: *const u8, size: u32) -> u64 {
    // SAFETY: the caller guarantees `size` readable bytes at `p`; unaligned reads are fine.
    unsafe {
        match size {
            1 => *p as u64,
            2 => (p as *const u16).read_unaligned() as u64,
            4 => (p as *const u32).read_unaligned() as u64,
            _ => (p as *const u64).read_unaligned(),
        }
    }
}

/// # Safety
/// `p..p+size` must be valid for writes.
#[inline]
unsafe fn write_raw(p: *mut u8, size: u32, v: u64) {
    // SAFETY: the caller guarantees `size` writable bytes at `p`.
    unsafe {
        match size {
            1 => *p = v as u8,
            2 => (p as *mut u16).write_unaligned(v as u16),
            4 => (p as *mut u32).write_unaligned(v as u32),
            _ => (p as *mut u64).write_unaligned(v),
        }
    }
}

/// Engine-owned atomic words exposed as a [`Region`] at `base` (the grid-sync workspace):
/// every access through it is bounds-checked, and `AtomicU64` permits shared mutation.
pub(crate) fn region_of(buf: &[AtomicU64], base: u64) -> Region {
    Region { base, len: (buf.len() * 8) as u64, host: buf.as_ptr() as *mut u8, read_only: false }
}
