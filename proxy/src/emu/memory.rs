//! Device memory of the emulated device: every allocation is mapped in the proxy at its
//! device address, inside a window reserved PROT_NONE at start (the application reserves the
//! same window, so device addresses never collide with its host allocations).
//!
//! Addresses are chosen first-fit from the bottom of the window, so the same sequence of
//! allocations yields the same addresses (a restarted proxy reproduces them). Managed and
//! pinned memory are memfd-backed shared mappings that the application maps at the same
//! address, so both sides see the same bytes.
//!
//! # Safety
//! All mappings are `MAP_FIXED` inside the window this module reserved for itself at
//! construction (nothing else in the process maps there: the reservation is made with
//! `MAP_FIXED_NOREPLACE`). A mapping is replaced by a PROT_NONE reservation only when its
//! allocation is freed; callers must not hold pointers into freed allocations (the server
//! drains the device before a free, as `cudaFree` does).
#![allow(unsafe_code)]

use std::collections::BTreeMap;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::RwLock;

use crum_wire::AllocKind;

/// Allocation granularity (and alignment) of device memory.
pub const GRANULE: u64 = 4096;
/// The start of the window that no allocation takes, as a GPU's runtime keeps its own
/// allocations below the program's: kernels read it as zeros (a small negative index into
/// the first allocation reads memory, as on a GPU) and cannot write it.
pub const RESERVED: u64 = crum_wire::DEVICE_RESERVED;
/// Allocations at least this large start on a huge-page boundary and ask for transparent
/// huge pages (fewer page faults and faster cross-memory copies into them).
pub const HUGE: u64 = 2 << 20;

struct Alloc {
    len: u64,
    span: u64,
    kind: AllocKind,
    /// Kept open while the allocation lives (the application opens it via /proc).
    _memfd: Option<OwnedFd>,
}

#[derive(Default)]
struct Inner {
    allocs: BTreeMap<u64, Alloc>,
    /// Free ranges: start → length.
    free: BTreeMap<u64, u64>,
    used: u64,
    /// Application ranges registered with cudaHostRegister: start → length.
    registered: BTreeMap<u64, u64>,
}

/// The emulated device's memory.
pub struct Vram {
    base: u64,
    size: u64,
    capacity: u64,
    /// Kernels see exactly the bytes allocated (`--strict-memory`), not whole pages.
    strict: bool,
    inner: RwLock<Inner>,
}

/// A live allocation as lookups see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    pub base: u64,
    pub len: u64,
    pub kind: AllocKind,
}

fn map_fixed(addr: u64, len: u64, prot: i32, flags: i32, fd: i32) -> io::Result<()> {
    // SAFETY: see module docs: [addr, addr+len) lies inside our own reservation.
    let p = unsafe {
        libc::mmap(
            addr as *mut libc::c_void,
            len as usize,
            prot,
            flags | libc::MAP_FIXED,
            fd,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

impl Vram {
    /// Reserve `[base, base+size)`; `capacity` is the memory the device reports.
    pub fn new(base: u64, size: u64, capacity: u64) -> io::Result<Vram> {
        // SAFETY: MAP_FIXED_NOREPLACE never replaces an existing mapping; PROT_NONE and
        // MAP_NORESERVE commit nothing.
        let p = unsafe {
            libc::mmap(
                base as *mut libc::c_void,
                size as usize,
                libc::PROT_NONE,
                libc::MAP_PRIVATE
                    | libc::MAP_ANONYMOUS
                    | libc::MAP_NORESERVE
                    | libc::MAP_FIXED_NOREPLACE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        if p as u64 != base {
            // Old kernels ignore the flag and pick another address.
            // SAFETY: unmapping what we just mapped.
            unsafe { libc::munmap(p, size as usize) };
            return Err(io::Error::from(io::ErrorKind::AddrInUse));
        }
        // The reserved start: zero pages, read-only (kernels check it before storing).
        let reserved = RESERVED.min(size);
        map_fixed(
            base,
            reserved,
            libc::PROT_READ,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
        )?;
        let mut inner = Inner::default();
        if size > reserved {
            inner.free.insert(base + reserved, size - reserved);
        }
        // The VMM range (`cuMemAddressReserve`) is never handed out by `alloc`: only mapped
        // into by `map_at`.
        let vmm_end = crum_wire::VMM_VA_OFFSET + crum_wire::VMM_VA_SIZE;
        if size >= vmm_end {
            inner.free.insert(base + reserved, crum_wire::VMM_VA_OFFSET - reserved);
            if size > vmm_end {
                inner.free.insert(base + vmm_end, size - vmm_end);
            }
        }
        Ok(Vram {
            base,
            size,
            capacity,
            strict: false,
            inner: RwLock::new(inner),
        })
    }

    /// Kernels may touch only the bytes of an allocation, not the rest of its last page nor
    /// the reserved start (finds out-of-bounds accesses a GPU would let pass).
    pub fn set_strict(&mut self, strict: bool) {
        self.strict = strict;
    }

    pub fn strict(&self) -> bool {
        self.strict
    }

    /// What a kernel may access at `addr`: `(base, len, read_only)`. A GPU's allocations sit
    /// in whole pages next to each other, below them the runtime's own, so a small index
    /// past either end of an array reads memory there. Here the rest of an allocation's last
    /// page and the reserved start of the window read as zeros; they are read-only (a value
    /// written there would be state outside every allocation, which no image holds), and
    /// fresh pages of device memory that copies and memsets never reach, so they stay zero
    /// (managed and pinned pages are not lent: the program maps those). Under `strict`
    /// only the allocation's own bytes.
    pub fn kernel_range(&self, addr: u64) -> Option<(u64, u64, bool)> {
        if addr < self.base || addr >= self.base + self.size {
            return None;
        }
        if !self.strict && addr < self.base + RESERVED {
            return Some((self.base, RESERVED.min(self.size), true));
        }
        let g = self.inner.read().unwrap();
        let (&b, a) = g.allocs.range(..=addr).next_back()?;
        if addr < b + a.len {
            Some((b, a.len, false))
        } else if !self.strict && a.kind == AllocKind::Device && addr < b + a.span {
            // (Managed and pinned pages are the program's memory too, which it may write.)
            Some((b + a.len, a.span - a.len, true))
        } else {
            None
        }
    }

    /// Describe a faulting device address for a person: which allocation it lies before,
    /// after or in, and by how much.
    pub fn describe(&self, addr: u64) -> String {
        if addr < self.base || addr >= self.base + self.size {
            return format!("{addr:#x} is outside device memory");
        }
        let g = self.inner.read().unwrap();
        let below = g.allocs.range(..=addr).next_back();
        let above = g.allocs.range(addr + 1..).next();
        match (below, above) {
            (Some((&b, a)), _) if addr < b + a.len => {
                format!("{addr:#x} is inside the allocation at {b:#x} ({} bytes)", a.len)
            }
            (Some((&b, a)), _) if addr < b + a.span => format!(
                "{addr:#x} is {} bytes past the end of the allocation at {b:#x} ({} bytes)",
                addr - (b + a.len),
                a.len
            ),
            (_, Some((&b, a))) if b - addr <= RESERVED => format!(
                "{addr:#x} is {} bytes before the allocation at {b:#x} ({} bytes)",
                b - addr,
                a.len
            ),
            _ => format!("{addr:#x} is in no allocation"),
        }
    }

    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    pub fn used(&self) -> u64 {
        self.inner.read().unwrap().used
    }

    /// Allocate `len` bytes; returns the device address and, for shared kinds, the memfd.
    pub fn alloc(&self, len: u64, kind: AllocKind) -> Result<(u64, Option<i32>), u32> {
        self.place(len, kind, None)
    }

    /// Allocate `len` bytes exactly at `addr` (a restart re-creating a checkpointed
    /// allocation). Fails if the range is not free.
    pub fn alloc_at(&self, addr: u64, len: u64, kind: AllocKind) -> Result<(u64, Option<i32>), u32> {
        if self.in_vmm(addr) && kind == AllocKind::Device {
            return self.map_at(addr, len);
        }
        self.place(len, kind, Some(addr))
    }

    /// Whether `addr` lies in the VMM range (`crum_wire::VMM_VA_OFFSET`).
    pub fn in_vmm(&self, addr: u64) -> bool {
        let off = addr.wrapping_sub(self.base);
        addr >= self.base
            && self.size >= crum_wire::VMM_VA_OFFSET + crum_wire::VMM_VA_SIZE
            && (crum_wire::VMM_VA_OFFSET..crum_wire::VMM_VA_OFFSET + crum_wire::VMM_VA_SIZE).contains(&off)
    }

    /// Device memory of `len` bytes exactly at `addr` in the VMM range (`cuMemMap`; a
    /// restart re-creating such a mapping): granule-aligned, overlapping no other mapping.
    pub fn map_at(&self, addr: u64, len: u64) -> Result<(u64, Option<i32>), u32> {
        let bad = crum_wire::cuda::ERROR_INVALID_VALUE;
        let span = len.checked_next_multiple_of(GRANULE).ok_or(bad)?;
        let end = addr.checked_add(span).ok_or(bad)?;
        if len == 0 || !addr.is_multiple_of(GRANULE) || !self.in_vmm(addr) || !self.in_vmm(end - 1) {
            return Err(bad);
        }
        let mut g = self.inner.write().unwrap();
        if g.used + span > self.capacity {
            return Err(crum_wire::cuda::ERROR_MEMORY_ALLOCATION);
        }
        let below = g.allocs.range(..end).next_back();
        if below.is_some_and(|(&b, a)| b + a.span > addr) {
            return Err(bad);
        }
        map_fixed(
            addr,
            span,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
        )
        .map_err(|_| crum_wire::cuda::ERROR_MEMORY_ALLOCATION)?;
        g.used += span;
        g.allocs.insert(addr, Alloc { len, span, kind: AllocKind::Device, _memfd: None });
        Ok((addr, None))
    }

    fn place(&self, len: u64, kind: AllocKind, at: Option<u64>) -> Result<(u64, Option<i32>), u32> {
        let span = len
            .max(1)
            .checked_next_multiple_of(GRANULE)
            .ok_or(crum_wire::cuda::ERROR_MEMORY_ALLOCATION)?;
        let mut g = self.inner.write().unwrap();
        // Managed memory lives in host memory (sparse memfds), as CUDA's may oversubscribe
        // the device: only device and pinned memory count against the capacity.
        let counted = kind != AllocKind::Managed;
        if counted && g.used + span > self.capacity {
            return Err(crum_wire::cuda::ERROR_MEMORY_ALLOCATION);
        }
        let align = if span >= HUGE { HUGE } else { GRANULE };
        let fit = match at {
            None => g.free.iter().find_map(|(&fs, &fl)| {
                let start = fs.next_multiple_of(align);
                (start + span <= fs + fl).then_some((fs, fl, start))
            }),
            Some(a) => g
                .free
                .range(..=a)
                .next_back()
                .filter(|&(&fs, &fl)| a % GRANULE == 0 && a.checked_add(span).is_some_and(|e| e <= fs + fl))
                .map(|(&fs, &fl)| (fs, fl, a)),
        };
        let Some((fstart, flen, start)) = fit else {
            return Err(crum_wire::cuda::ERROR_MEMORY_ALLOCATION);
        };
        let memfd = match kind {
            AllocKind::Device => {
                map_fixed(
                    start,
                    span,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                    -1,
                )
                .map_err(|_| crum_wire::cuda::ERROR_MEMORY_ALLOCATION)?;
                None
            }
            AllocKind::Managed | AllocKind::PinnedHost => {
                // SAFETY: literal NUL-terminated name; MFD_CLOEXEC keeps it from children.
                let fd = unsafe { libc::memfd_create(c"crum-shared".as_ptr(), libc::MFD_CLOEXEC) };
                if fd < 0 {
                    return Err(crum_wire::cuda::ERROR_MEMORY_ALLOCATION);
                }
                // SAFETY: fresh descriptor we own.
                let fd = unsafe { OwnedFd::from_raw_fd(fd) };
                // SAFETY: valid descriptor.
                if unsafe { libc::ftruncate(fd.as_raw_fd(), span as libc::off_t) } != 0 {
                    return Err(crum_wire::cuda::ERROR_MEMORY_ALLOCATION);
                }
                map_fixed(
                    start,
                    span,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    fd.as_raw_fd(),
                )
                .map_err(|_| crum_wire::cuda::ERROR_MEMORY_ALLOCATION)?;
                Some(fd)
            }
        };
        if span >= HUGE {
            // SAFETY: advice on our own fresh mapping; failure only means no huge pages.
            unsafe {
                libc::madvise(
                    start as *mut libc::c_void,
                    span as usize,
                    libc::MADV_HUGEPAGE,
                )
            };
        }
        g.free.remove(&fstart);
        if start > fstart {
            g.free.insert(fstart, start - fstart);
        }
        if fstart + flen > start + span {
            g.free.insert(start + span, fstart + flen - start - span);
        }
        if counted {
            g.used += span;
        }
        let raw = memfd.as_ref().map(|f| f.as_raw_fd());
        g.allocs.insert(
            start,
            Alloc {
                len,
                span,
                kind,
                _memfd: memfd,
            },
        );
        Ok((start, raw))
    }

    /// Free the allocation that starts at `addr`.
    pub fn free(&self, addr: u64) -> Result<AllocKind, u32> {
        let mut g = self.inner.write().unwrap();
        let a = g
            .allocs
            .remove(&addr)
            .ok_or(crum_wire::cuda::ERROR_INVALID_VALUE)?;
        // Back to a PROT_NONE reservation: releases the pages, keeps the window ours.
        let _ = map_fixed(
            addr,
            a.span,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
        );
        if a.kind != AllocKind::Managed {
            g.used -= a.span;
        }
        if self.in_vmm(addr) {
            // A VMM mapping: its range stays the program's reservation.
            return Ok(a.kind);
        }
        let (mut start, mut len) = (addr, a.span);
        if let Some((&ps, &pl)) = g.free.range(..start).next_back() {
            if ps + pl == start {
                g.free.remove(&ps);
                start = ps;
                len += pl;
            }
        }
        if let Some(&nl) = g.free.get(&(start + len)) {
            g.free.remove(&(start + len));
            len += nl;
        }
        g.free.insert(start, len);
        Ok(a.kind)
    }

    /// Whether `addr` lies in the device window (allocated or not).
    pub fn in_window(&self, addr: u64) -> bool {
        addr >= self.base && addr - self.base < self.size
    }

    /// The allocation containing `addr`.
    pub fn lookup(&self, addr: u64) -> Option<Range> {
        if addr < self.base || addr >= self.base + self.size {
            return None;
        }
        let g = self.inner.read().unwrap();
        let (&b, a) = g.allocs.range(..=addr).next_back()?;
        (addr < b + a.len).then_some(Range {
            base: b,
            len: a.len,
            kind: a.kind,
        })
    }

    /// Whether `[addr, addr+len)` lies inside one allocation, or, in the VMM range, inside
    /// mappings that follow each other without a gap (`cuMemMap` of several physical
    /// allocations side by side makes one range for copies, as on a GPU).
    pub fn contains(&self, addr: u64, len: u64) -> Option<Range> {
        let r = self.lookup(addr)?;
        let end = addr.checked_add(len)?;
        if end <= r.base + r.len {
            return Some(r);
        }
        if !self.in_vmm(addr) {
            return None;
        }
        let g = self.inner.read().unwrap();
        let mut at = r.base;
        for (&b, a) in g.allocs.range(r.base..) {
            if b != at || a.len != a.span {
                return None;
            }
            at = b + a.span;
            if end <= at {
                return Some(r);
            }
        }
        None
    }

    /// The memfd behind the shared allocation starting at `addr`.
    pub fn memfd(&self, addr: u64) -> Option<i32> {
        self.inner.read().unwrap().allocs.get(&addr)?._memfd.as_ref().map(|f| f.as_raw_fd())
    }

    /// Every live allocation (for device reset).
    pub fn all(&self) -> Vec<u64> {
        self.inner.read().unwrap().allocs.keys().copied().collect()
    }

    pub fn register(&self, addr: u64, len: u64) -> Result<(), u32> {
        let mut g = self.inner.write().unwrap();
        let end = addr
            .checked_add(len)
            .ok_or(crum_wire::cuda::ERROR_INVALID_VALUE)?;
        if let Some((&b, &l)) = g.registered.range(..end).next_back() {
            if b + l > addr {
                return Err(crum_wire::cuda::ERROR_HOST_MEMORY_ALREADY_REGISTERED);
            }
        }
        g.registered.insert(addr, len);
        Ok(())
    }

    pub fn unregister(&self, addr: u64) -> Result<(), u32> {
        self.inner
            .write()
            .unwrap()
            .registered
            .remove(&addr)
            .map(|_| ())
            .ok_or(crum_wire::cuda::ERROR_HOST_MEMORY_NOT_REGISTERED)
    }

    pub fn is_registered(&self, addr: u64, len: u64) -> bool {
        let g = self.inner.read().unwrap();
        g.registered
            .range(..=addr)
            .next_back()
            .is_some_and(|(&b, &l)| addr.saturating_add(len) <= b + l)
    }
}

impl Drop for Vram {
    fn drop(&mut self) {
        // SAFETY: the window is ours (module docs); nothing refers into it once the Vram goes.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.size as usize) };
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// A private window per test (tests run in parallel in one process).
    pub(crate) fn window() -> u64 {
        static NEXT: AtomicU64 = AtomicU64::new(0x3000_0000_0000);
        NEXT.fetch_add(1 << 36, Ordering::Relaxed)
    }

    #[test]
    fn allocations_are_first_fit_and_deterministic() {
        let base = window();
        let v = Vram::new(base, 1 << 32, 1 << 30).unwrap();
        let (a, _) = v.alloc(100, AllocKind::Device).unwrap();
        let (b, _) = v.alloc(5000, AllocKind::Device).unwrap();
        assert_eq!(a, base + RESERVED, "allocations start after the reserved area");
        assert_eq!(b, a + GRANULE);
        v.free(a).unwrap();
        let (c, _) = v.alloc(10, AllocKind::Device).unwrap();
        assert_eq!(c, a, "freed space is reused first");
    }

    #[test]
    fn allocation_is_usable_memory_at_its_address() {
        let v = Vram::new(window(), 1 << 32, 1 << 30).unwrap();
        let (a, _) = v.alloc(8192, AllocKind::Device).unwrap();
        // SAFETY: the allocation is mapped RW at `a` for 8192 bytes.
        unsafe { std::ptr::write_bytes(a as *mut u8, 0xab, 8192) };
        // SAFETY: as above.
        assert_eq!(unsafe { *((a + 8191) as *const u8) }, 0xab);
    }

    #[test]
    fn lookup_respects_requested_length() {
        let v = Vram::new(window(), 1 << 32, 1 << 30).unwrap();
        let (a, _) = v.alloc(100, AllocKind::Device).unwrap();
        assert!(v.lookup(a + 99).is_some());
        assert!(v.lookup(a + 100).is_none());
        assert!(v.contains(a, 100).is_some());
        assert!(v.contains(a + 1, 100).is_none());
    }

    #[test]
    fn over_capacity_fails_with_memory_allocation() {
        let v = Vram::new(window(), 1 << 32, 1 << 20).unwrap();
        assert_eq!(
            v.alloc(2 << 20, AllocKind::Device),
            Err(crum_wire::cuda::ERROR_MEMORY_ALLOCATION)
        );
    }

    #[test]
    fn freeing_unknown_address_is_invalid_value() {
        let v = Vram::new(window(), 1 << 32, 1 << 20).unwrap();
        assert_eq!(v.free(12345), Err(crum_wire::cuda::ERROR_INVALID_VALUE));
    }

    #[test]
    fn free_ranges_coalesce() {
        let base = window();
        let v = Vram::new(base, 1 << 32, 1 << 30).unwrap();
        let a: Vec<u64> = (0..3)
            .map(|_| v.alloc(GRANULE, AllocKind::Device).unwrap().0)
            .collect();
        v.free(a[0]).unwrap();
        v.free(a[2]).unwrap();
        v.free(a[1]).unwrap();
        let (big, _) = v.alloc(3 * GRANULE, AllocKind::Device).unwrap();
        assert_eq!(big, base + RESERVED);
    }

    #[test]
    fn vmm_mappings_are_placed_exactly_joined_for_copies_and_never_given_to_alloc() {
        // A whole device window (its VMM range lies 384 GiB in), away from `window()`'s.
        let base = 0x5000_0000_0000;
        let v = Vram::new(base, crum_wire::DEVICE_VA_SIZE, 1 << 30).unwrap();
        let (vmm, g) = (base + crum_wire::VMM_VA_OFFSET, crum_wire::VMM_GRANULARITY);
        assert!(v.map_at(base + RESERVED, g).is_err(), "outside the VMM range");
        assert_eq!(v.map_at(vmm, g).unwrap().0, vmm);
        assert_eq!(v.map_at(vmm + g, g).unwrap().0, vmm + g);
        assert!(v.map_at(vmm + g, g).is_err(), "overlapping a mapping");
        assert!(v.contains(vmm + 100, g).is_some(), "one range across two mappings side by side");
        assert!(v.contains(vmm + g + 100, g).is_none(), "not past the last mapping");
        // SAFETY: both mappings are live, writable, `g` bytes each.
        unsafe {
            *((vmm + g - 4) as *mut u32) = 7;
            *((vmm + g) as *mut u32) = 8;
        }
        v.free(vmm + g).unwrap();
        let (x, _) = v.alloc(g, AllocKind::Device).unwrap();
        assert!(!v.in_vmm(x), "alloc never hands out the VMM range, even after a mapping is freed");
        assert_eq!(v.alloc_at(vmm + g, g, AllocKind::Device).unwrap().0, vmm + g, "a restart maps it again");
        // SAFETY: mapped again just above (fresh pages).
        assert_eq!(unsafe { *((vmm + g) as *const u32) }, 0);
    }

    #[test]
    fn large_allocations_are_huge_page_aligned() {
        let base = window();
        let v = Vram::new(base, 1 << 32, 1 << 30).unwrap();
        v.alloc(100, AllocKind::Device).unwrap();
        let (big, _) = v.alloc(HUGE, AllocKind::Device).unwrap();
        assert_eq!(big % HUGE, 0);
        let (small, _) = v.alloc(100, AllocKind::Device).unwrap();
        assert_eq!(
            small,
            base + RESERVED + GRANULE,
            "the gap before the aligned block is reused"
        );
    }

    #[test]
    fn kernels_see_whole_pages_and_a_read_only_reserved_start_unless_strict() {
        let base = window();
        let mut v = Vram::new(base, 1 << 32, 1 << 30).unwrap();
        let (a, _) = v.alloc(100, AllocKind::Device).unwrap();
        assert_eq!(v.kernel_range(a + 99), Some((a, 100, false)));
        // Past the end within the last page: the rest of the span, read-only zeros.
        assert_eq!(v.kernel_range(a + 100), Some((a + 100, GRANULE - 100, true)));
        // Before the first allocation: the reserved start, readable only.
        assert_eq!(v.kernel_range(a - 4), Some((base, RESERVED, true)));
        // SAFETY: the reserved start is mapped readable (zero pages) for the Vram's life.
        assert_eq!(unsafe { *((a - 4) as *const u32) }, 0);
        assert_eq!(v.kernel_range(a + GRANULE), None, "free space is no memory");
        assert!(v.describe(a + 104).contains("4 bytes past the end of the allocation"));
        assert!(v.describe(a - 8).contains("8 bytes before the allocation"));
        v.set_strict(true);
        assert_eq!(v.kernel_range(a + 99), Some((a, 100, false)));
        assert_eq!(v.kernel_range(a + 100), None);
        assert_eq!(v.kernel_range(a - 4), None);
    }

    #[test]
    fn managed_allocation_has_a_memfd() {
        let v = Vram::new(window(), 1 << 32, 1 << 30).unwrap();
        let (_, fd) = v.alloc(100, AllocKind::Managed).unwrap();
        assert!(fd.is_some());
    }
}
