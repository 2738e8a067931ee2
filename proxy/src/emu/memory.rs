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
        let mut inner = Inner::default();
        inner.free.insert(base, size);
        Ok(Vram {
            base,
            size,
            capacity,
            inner: RwLock::new(inner),
        })
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
        self.place(len, kind, Some(addr))
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

    /// Whether `[addr, addr+len)` lies inside one allocation.
    pub fn contains(&self, addr: u64, len: u64) -> Option<Range> {
        let r = self.lookup(addr)?;
        (addr.checked_add(len)? <= r.base + r.len).then_some(r)
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
        assert_eq!(a, base);
        assert_eq!(b, base + GRANULE);
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
        assert_eq!(big, base);
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
            base + GRANULE,
            "the gap before the aligned block is reused"
        );
    }

    #[test]
    fn managed_allocation_has_a_memfd() {
        let v = Vram::new(window(), 1 << 32, 1 << 30).unwrap();
        let (_, fd) = v.alloc(100, AllocKind::Managed).unwrap();
        assert!(fd.is_some());
    }
}
