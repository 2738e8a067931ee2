//! crum's own large reservations in the program's address space (the agent's scratch arena,
//! the threads' restart stacks) live in a range of their own, below the device window, not
//! where the kernel would put them.
//!
//! Where the kernel puts an `mmap` without an address is next to the program's own mappings:
//! just below the lowest one, at the edge of the guard gap the kernel keeps below a mapping
//! that grows down (`MAP_GROWSDOWN`, `stack_guard_gap`, 256 pages). A mapping there stops that
//! mapping from growing: its next touch below its start is SIGSEGV, with or without a restart
//! (CRIU's `grow_map` after a checkpoint). Here each reservation is placed at the next free
//! address of [`RANGE`] with `MAP_FIXED_NOREPLACE` (never over anything mapped: a sanitizer's
//! shadow or the program's own fixed mappings make it move on), and only where the whole range
//! is taken, where the kernel picks.
//!
//! # Safety
//! `mmap` of new private anonymous memory at a hint that `MAP_FIXED_NOREPLACE` keeps from
//! replacing anything; a mapping a kernel without that flag put elsewhere is unmapped at once.
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// The range: the 2 TiB below the device window (`crum_wire::DEVICE_VA_BASE`, 32 TiB), far
/// from where the kernel places a program's mappings (top down from below the stack) and its
/// heap (after the executable).
pub const RANGE: (u64, u64) = (0x1e00_0000_0000, 0x2000_0000_0000);
/// Alignment of each reservation, and the unmapped gap left after it.
const STEP: u64 = 2 << 20;

static NEXT: AtomicU64 = AtomicU64::new(RANGE.0);

/// New private anonymous read-write memory of `len` bytes (`extra` flags added, e.g.
/// `MAP_NORESERVE`) in crum's range, else where the kernel puts it; None when there is none.
pub fn map(len: usize, extra: i32) -> Option<*mut libc::c_void> {
    let prot = libc::PROT_READ | libc::PROT_WRITE;
    let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | extra;
    let span = (len as u64).next_multiple_of(STEP) + STEP;
    let mut at = NEXT.load(Relaxed);
    while at.checked_add(span).is_some_and(|e| e <= RANGE.1) {
        // SAFETY: module docs.
        let p = unsafe { libc::mmap(at as *mut libc::c_void, len, prot, flags | libc::MAP_FIXED_NOREPLACE, -1, 0) };
        if p as u64 == at {
            NEXT.fetch_max(at + span, Relaxed);
            return Some(p);
        }
        if p != libc::MAP_FAILED {
            // SAFETY: module docs (a kernel that took the flag for a hint).
            unsafe { libc::munmap(p, len) };
            break;
        }
        at += span;
    }
    // SAFETY: a new mapping where the kernel picks.
    let p = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, flags, -1, 0) };
    (p != libc::MAP_FAILED).then_some(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_land_in_crums_range_one_after_the_other_and_skip_what_is_taken() {
        let a = map(1 << 20, libc::MAP_NORESERVE).unwrap() as u64;
        assert!((RANGE.0..RANGE.1).contains(&a), "{a:#x}");
        // Something already mapped where the next one would go: it moves on.
        let next = NEXT.load(Relaxed);
        // SAFETY: a test mapping at a free address of the range (the one `map` would take).
        let block = unsafe {
            libc::mmap(next as *mut libc::c_void, 4096, libc::PROT_NONE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE, -1, 0)
        };
        assert_eq!(block as u64, next);
        let b = map(3 << 20, 0).unwrap() as u64;
        assert!(b > next && (RANGE.0..RANGE.1).contains(&b), "{b:#x} after {next:#x}");
        // SAFETY: the mappings made above.
        unsafe {
            std::ptr::write_volatile(b as *mut u8, 1);
            libc::munmap(a as *mut libc::c_void, 1 << 20);
            libc::munmap(b as *mut libc::c_void, 3 << 20);
            libc::munmap(block, 4096);
        }
    }
}
