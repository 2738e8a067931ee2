//! Memory of the emulated driver, all of it host memory of this process at the address the
//! driver hands out (unified addressing, as on a GPU with UVA):
//!
//! - **virtual memory management** (`cuMemAddressReserve/Create/Map/SetAccess/Unmap/Release/
//!   AddressFree`): a reservation is a real `PROT_NONE` mapping (at the hint when it is free,
//!   as `MAP_FIXED_NOREPLACE` decides, else where the kernel puts it); physical memory is a
//!   memfd, mapped `MAP_SHARED | MAP_FIXED` into a reservation and made accessible by
//!   `cuMemSetAccess` (`mprotect`), so a mapping nobody gave access to faults on the host too
//!   — copies check access first and answer `CUDA_ERROR_INVALID_VALUE` instead;
//! - **host memory**: `cuMemHostAlloc` (anonymous mappings) and `cuMemHostRegister` (ranges of
//!   the caller's, remembered) — kernels reach both at their host addresses;
//! - **driver memory**: module variables and the device heap (`malloc` in kernels) in two
//!   arenas at fixed addresses, first fit, so a process that loads the same modules in the
//!   same order gets its module variables at the same addresses (what a restart needs, as the
//!   real driver does in a process without address randomization).
//!
//! Every range a kernel may touch is a [`Region`] for the PTX engine ([`Memory::region`]).
//!
//! # Safety
//! The mappings made here are owned by the tables of [`Memory`]: a reservation by its entry
//! until `cuMemAddressFree`, a physical mapping by its entry until `cuMemUnmap` (then the range
//! is `PROT_NONE` again, still reserved), a host allocation until `cuMemFreeHost`, the arenas
//! for the life of the process. Raw memory is touched (copies, memsets) only after
//! [`Memory::check`] found the range accessible or outside every reservation (host memory the
//! caller vouches for, as the driver's contract for host pointers says).
#![allow(unsafe_code)]

use std::collections::{BTreeMap, HashMap};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Mutex;

use crate::code::*;
use crum_ptx::Region;

/// The allocation granularity of device memory (minimum and recommended), as on every GPU so
/// far and as the emulated device lays out its window.
pub const GRANULE: u64 = 2 << 20;

/// Device memory the emulated driver claims to have (that of the emulated device).
pub fn total_mem() -> u64 {
    crum_proxy::emu::emu_props().total_mem
}

/// `CUmemAccess_flags`: none, read, read and write.
pub const ACCESS_NONE: u32 = 0;
pub const ACCESS_READ: u32 = 1;
pub const ACCESS_RW: u32 = 3;

struct Mapping {
    len: u64,
    handle: u64,
    access: u32,
}

struct Phys {
    /// Kept until released; the mappings hold the memory on their own.
    fd: Option<OwnedFd>,
    size: u64,
    maps: usize,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum HostKind {
    Alloc,
    Registered { read_only: bool },
}

struct Host {
    len: u64,
    kind: HostKind,
}

/// A first-fit allocator over a fixed range mapped read-write once.
struct Arena {
    /// Free ranges: start → length.
    free: BTreeMap<u64, u64>,
    /// Live blocks: start → length.
    used: BTreeMap<u64, u64>,
}

impl Arena {
    fn new(base: u64, len: u64) -> Arena {
        Arena { free: BTreeMap::from([(base, len)]), used: BTreeMap::new() }
    }

    fn alloc(&mut self, len: u64, align: u64) -> Option<u64> {
        let len = len.max(1).div_ceil(ALIGN) * ALIGN;
        let align = align.max(ALIGN);
        let (start, flen, at) = self.free.iter().find_map(|(&s, &l)| {
            let at = s.div_ceil(align) * align;
            (at + len <= s + l).then_some((s, l, at))
        })?;
        self.free.remove(&start);
        if at > start {
            self.free.insert(start, at - start);
        }
        if at + len < start + flen {
            self.free.insert(at + len, start + flen - at - len);
        }
        self.used.insert(at, len);
        Some(at)
    }

    fn free(&mut self, at: u64) -> Option<u64> {
        let len = self.used.remove(&at)?;
        let (mut s, mut l) = (at, len);
        if let Some((&ps, &pl)) = self.free.range(..at).next_back() {
            if ps + pl == at {
                self.free.remove(&ps);
                s = ps;
                l += pl;
            }
        }
        if let Some(&nl) = self.free.get(&(at + len)) {
            self.free.remove(&(at + len));
            l += nl;
        }
        self.free.insert(s, l);
        Some(len)
    }

    fn find(&self, addr: u64) -> Option<(u64, u64)> {
        let (&s, &l) = self.used.range(..=addr).next_back()?;
        (addr < s + l).then_some((s, l))
    }
}

/// Alignment of driver allocations (module variables, heap blocks), as `cudaMalloc`'s.
const ALIGN: u64 = 256;
/// Where the arenas of driver memory live: outside crum's device window (0x2000_0000_0000)
/// and the windows the conformance suite gives its backends (0x3000_0000_0000 on), below
/// where the kernel places mappings and the stack.
const ARENA_BASE: u64 = 0x7c00_0000_0000;
/// Each arena (module variables, device heap): address space only until touched, but counted
/// by strict overcommit accounting, so not larger than programs need.
const ARENA_LEN: u64 = 4 << 30;

struct Tables {
    reservations: BTreeMap<u64, u64>,
    mappings: BTreeMap<u64, Mapping>,
    phys: HashMap<u64, Phys>,
    next_handle: u64,
    host: BTreeMap<u64, Host>,
    created: u64,
    globals: Arena,
    heap: Arena,
    heap_used: u64,
    heap_limit: u64,
}

/// The driver's memory tables.
pub struct Memory {
    t: Mutex<Tables>,
}

fn overlaps<V>(m: &BTreeMap<u64, V>, len_of: impl Fn(&V) -> u64, addr: u64, len: u64) -> bool {
    if let Some((&s, v)) = m.range(..addr.saturating_add(len)).next_back() {
        return s + len_of(v) > addr;
    }
    false
}

impl Memory {
    /// The tables, with the arenas of driver memory mapped (at their fixed address when it is
    /// free, else where the kernel puts them).
    pub fn new() -> Memory {
        let len = 2 * ARENA_LEN;
        let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE;
        // SAFETY: a new anonymous mapping; MAP_FIXED_NOREPLACE never replaces one.
        let mut p = unsafe {
            libc::mmap(ARENA_BASE as *mut _, len as usize, libc::PROT_READ | libc::PROT_WRITE, flags | libc::MAP_FIXED_NOREPLACE, -1, 0)
        };
        if p == libc::MAP_FAILED {
            // SAFETY: as above, wherever the kernel chooses.
            p = unsafe { libc::mmap(std::ptr::null_mut(), len as usize, libc::PROT_READ | libc::PROT_WRITE, flags, -1, 0) };
        }
        let base = if p == libc::MAP_FAILED { 0 } else { p as u64 };
        Memory {
            t: Mutex::new(Tables {
                reservations: BTreeMap::new(),
                mappings: BTreeMap::new(),
                phys: HashMap::new(),
                next_handle: 1,
                host: BTreeMap::new(),
                created: 0,
                globals: Arena::new(base, if base == 0 { 0 } else { ARENA_LEN }),
                heap: Arena::new(base + ARENA_LEN, if base == 0 { 0 } else { ARENA_LEN }),
                heap_used: 0,
                heap_limit: 8 << 20,
            }),
        }
    }

    /// `cuMemAddressReserve`: `hint` is only a hint.
    pub fn reserve(&self, size: u64, align: u64, hint: u64) -> CuResult<u64> {
        if size == 0 || !size.is_multiple_of(GRANULE) || !hint.is_multiple_of(GRANULE) || (align != 0 && !align.is_power_of_two()) {
            return Err(INVALID_VALUE);
        }
        let align = align.max(GRANULE);
        let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE;
        let mut t = self.t.lock().unwrap();
        if hint != 0 && hint.is_multiple_of(align) {
            // SAFETY: MAP_FIXED_NOREPLACE fails rather than replace anything mapped there.
            let p = unsafe { libc::mmap(hint as *mut _, size as usize, libc::PROT_NONE, flags | libc::MAP_FIXED_NOREPLACE, -1, 0) };
            if p != libc::MAP_FAILED {
                t.reservations.insert(hint, size);
                return Ok(hint);
            }
        }
        // Elsewhere, aligned: reserve more, then give back the ends.
        let over = size + align;
        // SAFETY: a new PROT_NONE mapping where the kernel chooses.
        let p = unsafe { libc::mmap(std::ptr::null_mut(), over as usize, libc::PROT_NONE, flags, -1, 0) };
        if p == libc::MAP_FAILED {
            return Err(OUT_OF_MEMORY);
        }
        let raw = p as u64;
        let at = raw.div_ceil(align) * align;
        // SAFETY: both ends lie in the mapping just made and are not used.
        unsafe {
            if at > raw {
                libc::munmap(raw as *mut _, (at - raw) as usize);
            }
            if raw + over > at + size {
                libc::munmap((at + size) as *mut _, (raw + over - at - size) as usize);
            }
        }
        t.reservations.insert(at, size);
        Ok(at)
    }

    /// `cuMemAddressFree`: `ptr` and `size` as reserved; what is still mapped there goes too.
    pub fn address_free(&self, ptr: u64, size: u64) -> CuResult<()> {
        let mut t = self.t.lock().unwrap();
        if t.reservations.get(&ptr) != Some(&size) {
            return Err(INVALID_VALUE);
        }
        let inside: Vec<u64> = t.mappings.range(ptr..ptr + size).map(|(&a, _)| a).collect();
        for a in inside {
            let m = t.mappings.remove(&a).expect("listed");
            t.unmapped(m.handle);
        }
        t.reservations.remove(&ptr);
        // SAFETY: the reservation is ours (checked above) and nothing of it is used any more.
        unsafe { libc::munmap(ptr as *mut _, size as usize) };
        Ok(())
    }

    /// `cuMemCreate` of pinned device memory on device 0 (the caller checked the properties).
    pub fn create(&self, size: u64) -> CuResult<u64> {
        if size == 0 || !size.is_multiple_of(GRANULE) {
            return Err(INVALID_VALUE);
        }
        let mut t = self.t.lock().unwrap();
        if t.created + size > total_mem() {
            return Err(OUT_OF_MEMORY);
        }
        // SAFETY: a plain system call with a NUL-terminated name.
        let fd = unsafe { libc::memfd_create(c"crum-emu-vram".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(OUT_OF_MEMORY);
        }
        // SAFETY: `fd` is a new descriptor owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: plain system call on our descriptor.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), size as libc::off_t) } != 0 {
            return Err(OUT_OF_MEMORY);
        }
        let h = t.next_handle;
        t.next_handle += 1;
        t.created += size;
        t.phys.insert(h, Phys { fd: Some(fd), size, maps: 0 });
        Ok(h)
    }

    /// `cuMemRelease`: the memory goes once it is no longer mapped.
    pub fn release(&self, handle: u64) -> CuResult<()> {
        let mut t = self.t.lock().unwrap();
        let p = t.phys.get_mut(&handle).ok_or(INVALID_VALUE)?;
        if p.fd.take().is_none() {
            return Err(INVALID_VALUE);
        }
        t.unmapped_check(handle);
        Ok(())
    }

    /// `cuMemMap`: `size` bytes of `handle` from `offset` at `ptr`, inside one reservation, over
    /// nothing mapped; inaccessible until [`Memory::set_access`].
    pub fn map(&self, ptr: u64, size: u64, offset: u64, handle: u64) -> CuResult<()> {
        if size == 0 || !ptr.is_multiple_of(GRANULE) || !size.is_multiple_of(GRANULE) || !offset.is_multiple_of(GRANULE) {
            return Err(INVALID_VALUE);
        }
        let mut t = self.t.lock().unwrap();
        let p = t.phys.get(&handle).ok_or(INVALID_VALUE)?;
        let fd = p.fd.as_ref().ok_or(INVALID_VALUE)?.as_raw_fd();
        if offset.checked_add(size).is_none_or(|e| e > p.size) {
            return Err(INVALID_VALUE);
        }
        let inside = t.reservations.range(..=ptr).next_back().is_some_and(|(&s, &l)| ptr + size <= s + l);
        if !inside || overlaps(&t.mappings, |m| m.len, ptr, size) {
            return Err(INVALID_VALUE);
        }
        // SAFETY: the range lies in our reservation with nothing mapped in it (checked above);
        // the descriptor is live.
        let r = unsafe { libc::mmap(ptr as *mut _, size as usize, libc::PROT_NONE, libc::MAP_SHARED | libc::MAP_FIXED, fd, offset as libc::off_t) };
        if r == libc::MAP_FAILED {
            return Err(OUT_OF_MEMORY);
        }
        t.phys.get_mut(&handle).expect("checked").maps += 1;
        t.mappings.insert(ptr, Mapping { len: size, handle, access: ACCESS_NONE });
        Ok(())
    }

    /// `cuMemUnmap`: whole mappings only; the range stays reserved.
    pub fn unmap(&self, ptr: u64, size: u64) -> CuResult<()> {
        let mut t = self.t.lock().unwrap();
        let mut at = ptr;
        let mut whole = Vec::new();
        while at < ptr + size {
            match t.mappings.get(&at) {
                Some(m) if at + m.len <= ptr + size => {
                    whole.push(at);
                    at += m.len;
                }
                _ => return Err(INVALID_VALUE),
            }
        }
        if whole.is_empty() {
            return Err(INVALID_VALUE);
        }
        for a in whole {
            let m = t.mappings.remove(&a).expect("listed");
            // SAFETY: our mapping inside our reservation: replaced by reserved address space.
            unsafe {
                libc::mmap(
                    a as *mut _,
                    m.len as usize,
                    libc::PROT_NONE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_FIXED,
                    -1,
                    0,
                )
            };
            t.unmapped(m.handle);
        }
        Ok(())
    }

    /// `cuMemSetAccess` for device 0: the range must be covered by mappings.
    pub fn set_access(&self, ptr: u64, size: u64, access: u32) -> CuResult<()> {
        let prot = match access {
            ACCESS_NONE => libc::PROT_NONE,
            ACCESS_READ => libc::PROT_READ,
            ACCESS_RW => libc::PROT_READ | libc::PROT_WRITE,
            _ => return Err(INVALID_VALUE),
        };
        let mut t = self.t.lock().unwrap();
        let mut at = ptr;
        let mut covered = Vec::new();
        while at < ptr + size {
            match t.mappings.range(..=at).next_back() {
                Some((&s, m)) if at < s + m.len => {
                    covered.push(s);
                    at = s + m.len;
                }
                _ => return Err(INVALID_VALUE),
            }
        }
        for s in covered {
            let m = t.mappings.get_mut(&s).expect("listed");
            // SAFETY: our own mapping.
            unsafe { libc::mprotect(s as *mut _, m.len as usize, prot) };
            m.access = access;
        }
        Ok(())
    }

    /// `cuMemGetInfo`: (free, total).
    pub fn info(&self) -> (u64, u64) {
        let t = self.t.lock().unwrap();
        (total_mem().saturating_sub(t.created), total_mem())
    }

    /// `cuMemHostAlloc`: page-aligned, zero-filled.
    pub fn host_alloc(&self, size: u64) -> CuResult<u64> {
        if size == 0 {
            return Err(INVALID_VALUE);
        }
        let len = size.div_ceil(4096) * 4096;
        // SAFETY: a new anonymous mapping where the kernel chooses.
        let p = unsafe {
            libc::mmap(std::ptr::null_mut(), len as usize, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0)
        };
        if p == libc::MAP_FAILED {
            return Err(OUT_OF_MEMORY);
        }
        self.t.lock().unwrap().host.insert(p as u64, Host { len, kind: HostKind::Alloc });
        Ok(p as u64)
    }

    /// `cuMemFreeHost`
    pub fn host_free(&self, p: u64) -> CuResult<()> {
        let mut t = self.t.lock().unwrap();
        match t.host.get(&p) {
            Some(h) if h.kind == HostKind::Alloc => {
                let len = h.len;
                t.host.remove(&p);
                // SAFETY: our own mapping, no longer handed out.
                unsafe { libc::munmap(p as *mut _, len as usize) };
                Ok(())
            }
            _ => Err(INVALID_VALUE),
        }
    }

    /// `cuMemHostRegister`
    pub fn host_register(&self, p: u64, size: u64, read_only: bool) -> CuResult<()> {
        if p == 0 || size == 0 {
            return Err(INVALID_VALUE);
        }
        let mut t = self.t.lock().unwrap();
        if overlaps(&t.host, |h| h.len, p, size) {
            return Err(HOST_MEMORY_ALREADY_REGISTERED);
        }
        t.host.insert(p, Host { len: size, kind: HostKind::Registered { read_only } });
        Ok(())
    }

    /// `cuMemHostUnregister`: `p` is the start of a registered range.
    pub fn host_unregister(&self, p: u64) -> CuResult<()> {
        let mut t = self.t.lock().unwrap();
        match t.host.get(&p) {
            Some(h) if matches!(h.kind, HostKind::Registered { .. }) => {
                t.host.remove(&p);
                Ok(())
            }
            _ => Err(HOST_MEMORY_NOT_REGISTERED),
        }
    }

    /// Whether the device may read (or write) `[addr, addr+len)`: inside a reservation every
    /// byte must be mapped with access; elsewhere it is host or driver memory.
    pub fn check(&self, addr: u64, len: u64, write: bool) -> CuResult<()> {
        if addr == 0 {
            return Err(INVALID_VALUE);
        }
        if len == 0 {
            return Ok(());
        }
        let end = addr.checked_add(len).ok_or(INVALID_VALUE)?;
        let t = self.t.lock().unwrap();
        if !overlaps(&t.reservations, |&l| l, addr, len) {
            return Ok(());
        }
        let mut at = addr;
        while at < end {
            match t.mappings.range(..=at).next_back() {
                Some((&s, m)) if at < s + m.len && (m.access == ACCESS_RW || (m.access == ACCESS_READ && !write)) => at = s + m.len,
                _ => return Err(INVALID_VALUE),
            }
        }
        Ok(())
    }

    /// The range a kernel may touch at `addr`, for the PTX engine.
    pub fn region(&self, addr: u64) -> Option<Region> {
        let t = self.t.lock().unwrap();
        let reg = |base: u64, len: u64, read_only: bool| Region { base, len, host: base as *mut u8, read_only };
        if let Some((&s, m)) = t.mappings.range(..=addr).next_back() {
            if addr < s + m.len {
                return match m.access {
                    ACCESS_RW => Some(reg(s, m.len, false)),
                    ACCESS_READ => Some(reg(s, m.len, true)),
                    _ => None,
                };
            }
        }
        if let Some((&s, h)) = t.host.range(..=addr).next_back() {
            if addr < s + h.len {
                return Some(reg(s, h.len, matches!(h.kind, HostKind::Registered { read_only: true })));
            }
        }
        if let Some((s, l)) = t.globals.find(addr).or_else(|| t.heap.find(addr)) {
            return Some(reg(s, l, false));
        }
        None
    }

    /// Memory for a module variable, zero-filled.
    pub fn global_alloc(&self, size: u64, align: u64) -> CuResult<u64> {
        self.t.lock().unwrap().globals.alloc(size, align).ok_or(OUT_OF_MEMORY)
    }

    /// Free a module variable's memory (its module is unloaded), zeroing it for the next.
    pub fn global_free(&self, addr: u64) {
        let mut t = self.t.lock().unwrap();
        if let Some(len) = t.globals.free(addr) {
            // SAFETY: the block lies in the arena, mapped read-write for the process's life,
            // and is no longer handed out.
            unsafe { std::ptr::write_bytes(addr as *mut u8, 0, len as usize) };
        }
    }

    /// Device-side `malloc`: None when the heap (`CU_LIMIT_MALLOC_HEAP_SIZE`) is full.
    pub fn heap_alloc(&self, size: u64) -> Option<u64> {
        let mut t = self.t.lock().unwrap();
        let len = size.max(1).div_ceil(ALIGN) * ALIGN;
        if t.heap_used + len > t.heap_limit {
            return None;
        }
        let a = t.heap.alloc(len, ALIGN)?;
        t.heap_used += len;
        Some(a)
    }

    /// Device-side `free`.
    pub fn heap_free(&self, addr: u64) {
        let mut t = self.t.lock().unwrap();
        if let Some(len) = t.heap.free(addr) {
            t.heap_used -= len;
            // SAFETY: as in `global_free`.
            unsafe { std::ptr::write_bytes(addr as *mut u8, 0, len as usize) };
        }
    }

    /// `cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE)`
    pub fn set_heap_limit(&self, bytes: u64) {
        self.t.lock().unwrap().heap_limit = bytes;
    }

    /// `cuCtxGetLimit(CU_LIMIT_MALLOC_HEAP_SIZE)`
    pub fn heap_limit(&self) -> u64 {
        self.t.lock().unwrap().heap_limit
    }
}

impl Tables {
    fn unmapped(&mut self, handle: u64) {
        if let Some(p) = self.phys.get_mut(&handle) {
            p.maps -= 1;
        }
        self.unmapped_check(handle);
    }

    /// Physical memory released and no longer mapped is gone.
    fn unmapped_check(&mut self, handle: u64) {
        if self.phys.get(&handle).is_some_and(|p| p.fd.is_none() && p.maps == 0) {
            let p = self.phys.remove(&handle).expect("checked");
            self.created -= p.size;
        }
    }
}

/// Copy `n` bytes (ranges checked by the caller; they may overlap).
pub fn copy(dst: u64, src: u64, n: u64) {
    // SAFETY: both ranges were found accessible by `Memory::check` or are host memory the
    // caller vouches for (driver contract); `copy` allows overlap.
    unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, n as usize) };
}

/// Set `n` bytes at `dst` to `v` (range checked by the caller).
pub fn fill(dst: u64, v: u8, n: u64) {
    // SAFETY: as in `copy`.
    unsafe { std::ptr::write_bytes(dst as *mut u8, v, n as usize) };
}

/// Write `bytes` at `dst` (driver memory just allocated, or a range checked by the caller).
pub fn write(dst: u64, bytes: &[u8]) {
    // SAFETY: as in `copy`; `bytes` is a live slice that cannot overlap fresh driver memory.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), dst as *mut u8, bytes.len()) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arena_places_first_fit_and_coalesces_freed_blocks() {
        let mut a = Arena::new(0x1000, 0x10000);
        let x = a.alloc(10, 4).unwrap();
        let y = a.alloc(300, 8).unwrap();
        assert_eq!((x, y), (0x1000, 0x1100));
        assert_eq!(a.find(0x1105), Some((0x1100, 512)));
        a.free(x).unwrap();
        // The same requests in the same order get the same addresses again.
        assert_eq!(a.alloc(10, 4), Some(0x1000));
        a.free(0x1000).unwrap();
        a.free(y).unwrap();
        assert_eq!(a.free.len(), 1, "freed neighbours merge");
        assert_eq!(a.alloc(0x10000, 256), Some(0x1000));
        assert_eq!(a.alloc(1, 1), None);
    }

    #[test]
    fn mappings_need_a_reservation_and_access_before_the_device_may_touch_them() {
        let m = Memory::new();
        let va = m.reserve(2 * GRANULE, 0, 0).unwrap();
        let h = m.create(GRANULE).unwrap();
        assert_eq!(m.map(va + GRANULE / 2, GRANULE, 0, h), Err(INVALID_VALUE), "unaligned");
        m.map(va, GRANULE, 0, h).unwrap();
        assert_eq!(m.map(va, GRANULE, 0, h), Err(INVALID_VALUE), "over a mapping");
        assert_eq!(m.check(va, 16, false), Err(INVALID_VALUE), "no access yet");
        m.set_access(va, GRANULE, ACCESS_READ).unwrap();
        assert_eq!(m.check(va, 16, false), Ok(()));
        assert_eq!(m.check(va, 16, true), Err(INVALID_VALUE), "read-only");
        assert!(m.region(va + 8).is_some_and(|r| r.read_only && r.base == va));
        assert_eq!(m.check(va + GRANULE - 8, 16, false), Err(INVALID_VALUE), "runs into the unmapped half");
        m.release(h).unwrap();
        assert_eq!(m.info().0, total_mem() - GRANULE, "released but still mapped");
        assert_eq!(m.unmap(va, GRANULE / 2), Err(INVALID_VALUE), "part of a mapping");
        m.unmap(va, GRANULE).unwrap();
        assert_eq!(m.info().0, total_mem());
        m.address_free(va, 2 * GRANULE).unwrap();
    }

    #[test]
    fn host_registrations_may_not_overlap() {
        let m = Memory::new();
        m.host_register(0x10_0000, 0x2000, false).unwrap();
        assert_eq!(m.host_register(0x10_1000, 0x2000, false), Err(HOST_MEMORY_ALREADY_REGISTERED));
        assert_eq!(m.host_unregister(0x10_1000), Err(HOST_MEMORY_NOT_REGISTERED));
        m.host_unregister(0x10_0000).unwrap();
    }
}
