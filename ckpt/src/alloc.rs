//! The allocator of the preloaded library: the system allocator, except on the agent
//! thread while a checkpoint has (or is stopping) the program's threads, where it takes
//! memory from a private bump arena.
//!
//! Why: the agent stops threads wherever they are, possibly inside `malloc` holding an
//! arena lock. glibc shares its arenas between threads once there are more threads than
//! arenas (8 per core), so the agent's own `malloc` could then wait forever for a lock held
//! by a stopped thread. Between [`enter`] and [`leave`] the agent allocates from the bump
//! arena instead (frees there are no-ops; frees of system memory are deferred to
//! [`leave`]), so it never touches a lock a stopped thread may hold. The arena is reset at
//! the next [`enter`]; nothing allocated in it may outlive the checkpoint (the agent copies
//! what it returns).
//!
//! A restored process starts with its threads stopped where the image caught them — inside
//! `malloc` too, with its locks held — and the agent must restore the device before they run.
//! It allocates from the arena then as well ([`enter_restored`]), and what it allocated
//! stays: [`keep`] moves the arena's floor above it. Below the floor the arena is ordinary
//! memory of the process (saved in images, never reset); above it, scratch.
//!
//! `interpose/src/agent_hook.rs` installs [`CrumAlloc`] as libcrum's global allocator. In
//! binaries that do not (tests, the restorer), [`enter`]/[`leave`] change nothing.
//!
//! # Safety
//! The arena is one anonymous mapping made with a raw `mmap` (no lock); its bump pointer is
//! an atomic, and only the agent thread allocates from it. Pointers handed out inside the
//! arena are never passed to the system allocator (checked by address); deferred frees are
//! system pointers freed once, after the other threads run again.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering::*};

/// Virtual size of the arena (reserved, not committed).
const ARENA_SIZE: usize = 64 << 30;
const MAX_DEFERRED: usize = 16384;
const PAGE: usize = 4096;

static AGENT_TID: AtomicI32 = AtomicI32::new(0);
static BASE: AtomicUsize = AtomicUsize::new(0);
static NEXT: AtomicUsize = AtomicUsize::new(0);
static HIGH: AtomicUsize = AtomicUsize::new(0);
/// Start of the scratch part: what lies below was allocated while restoring and stays.
static FLOOR: AtomicUsize = AtomicUsize::new(0);
#[allow(clippy::declare_interior_mutable_const)]
const ZERO: AtomicUsize = AtomicUsize::new(0);
static DEFERRED: [AtomicUsize; MAX_DEFERRED] = [ZERO; MAX_DEFERRED];
static NDEFERRED: AtomicUsize = AtomicUsize::new(0);

fn gettid() -> i32 {
    // SAFETY: gettid has no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as i32 }
}

fn bump_mode() -> bool {
    let t = AGENT_TID.load(Relaxed);
    t != 0 && t == gettid()
}

fn in_arena(p: *mut u8) -> bool {
    let b = BASE.load(Relaxed);
    b != 0 && (b..b + ARENA_SIZE).contains(&(p as usize))
}

fn bump(layout: Layout) -> *mut u8 {
    let base = BASE.load(Acquire);
    if base == 0 {
        return std::ptr::null_mut();
    }
    let align = layout.align().max(16);
    let mut cur = NEXT.load(Relaxed);
    loop {
        let start = (cur + align - 1) & !(align - 1);
        let end = match start.checked_add(layout.size()) {
            Some(e) if e <= base + ARENA_SIZE => e,
            _ => return std::ptr::null_mut(),
        };
        match NEXT.compare_exchange_weak(cur, end, Relaxed, Relaxed) {
            Ok(_) => {
                HIGH.fetch_max(end, Relaxed);
                return start as *mut u8;
            }
            Err(c) => cur = c,
        }
    }
}

/// The arena's scratch part (from the floor to the end), once reserved: memory of one
/// checkpoint, whose bytes images do not record (they record the mapping).
pub fn arena() -> Option<(u64, u64)> {
    let b = BASE.load(Acquire);
    (b != 0).then(|| (FLOOR.load(Relaxed).max(b) as u64, (b + ARENA_SIZE) as u64))
}

/// Forgets the scratch part's allocations: bump from the floor again, pages given back.
fn reset_scratch() {
    let floor = FLOOR.load(Relaxed).max(BASE.load(Relaxed));
    let high = HIGH.load(Relaxed);
    if high > floor {
        // SAFETY: our arena above the floor; nothing allocated there is alive (module docs).
        // The pages read back as zeros and cost nothing in images.
        unsafe { libc::madvise(floor as *mut libc::c_void, high - floor, libc::MADV_DONTNEED) };
    }
    NEXT.store(floor, Relaxed);
    HIGH.store(floor, Relaxed);
}

/// Starts bump allocation for the calling (agent) thread. Call before stopping threads.
pub fn enter() {
    if BASE.load(Acquire) == 0 {
        // A fresh private anonymous reservation in crum's range (`highmem`: not next to the
        // program's mappings); MAP_NORESERVE: only touched pages cost memory.
        let Some(p) = crate::highmem::map(ARENA_SIZE, libc::MAP_NORESERVE) else {
            return;
        };
        BASE.store(p as usize, Release);
        FLOOR.store(p as usize, Relaxed);
        NEXT.store(p as usize, Relaxed);
        HIGH.store(p as usize, Relaxed);
    } else {
        reset_scratch();
    }
    AGENT_TID.store(gettid(), Release);
}

/// In a restored process, before anything else on the agent thread: bump allocation again
/// (the thread's id changed), above whatever the image's checkpoint had allocated (scratch,
/// not in the image: zeros now).
pub fn enter_restored() {
    AGENT_TID.store(gettid(), Release);
}

/// Makes everything allocated from the arena so far permanent (the restore's state: tables,
/// connections), while still in bump mode: it is saved in later images, never reset.
pub fn keep() {
    if BASE.load(Relaxed) == 0 {
        return;
    }
    let floor = HIGH.load(Relaxed).next_multiple_of(PAGE);
    FLOOR.store(floor, Relaxed);
    NEXT.store(floor, Relaxed);
    HIGH.store(floor, Relaxed);
}

/// Gives back the whole pages of `[p, p+len)`, an arena allocation already freed (a large
/// buffer of the restore, below the floor once [`keep`] runs).
pub fn discard(p: usize, len: usize) {
    if !in_arena(p as *mut u8) {
        return;
    }
    let start = p.next_multiple_of(PAGE);
    let end = (p + len) / PAGE * PAGE;
    if end > start {
        // SAFETY: whole pages of a dead allocation in our arena; they read back as zeros.
        unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED) };
    }
}

/// Gives the arena's pages back to the system once a checkpoint is over (its sections may be
/// large: a CUDA program's device memory). Only from the agent thread, outside bump mode.
pub fn release() {
    if AGENT_TID.load(Acquire) != 0 {
        return;
    }
    if BASE.load(Relaxed) != 0 {
        reset_scratch();
    }
}

/// Ends bump allocation and frees what was released meanwhile. Call once the program's
/// threads run again (in a restored process too: they may hold malloc's locks until then).
pub fn leave() {
    AGENT_TID.store(0, Release);
    let n = NDEFERRED.swap(0, AcqRel).min(MAX_DEFERRED);
    for d in DEFERRED.iter().take(n) {
        let p = d.swap(0, Relaxed);
        if p != 0 {
            // SAFETY: a system-allocator pointer whose free was deferred, freed once.
            unsafe { libc::free(p as *mut libc::c_void) };
        }
    }
}

/// libcrum's global allocator (see the module documentation).
#[derive(Debug)]
pub struct CrumAlloc;

// SAFETY: every path returns memory valid for the layout (system allocator, or a fresh,
// suitably aligned range of the arena) and frees each system pointer exactly once.
unsafe impl GlobalAlloc for CrumAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if bump_mode() {
            let p = bump(layout);
            if !p.is_null() {
                return p;
            }
        }
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if bump_mode() {
            // Already zero: the arena hands out only memory above everything it handed out
            // since its scratch part was last reset, and a reset gives the pages back (they
            // read as zeros; in a restored process the scratch part is fresh memory). Not
            // writing keeps untouched pages free (a restart's device-data buffer).
            let p = bump(layout);
            if !p.is_null() {
                return p;
            }
        }
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if in_arena(ptr) {
            return;
        }
        if bump_mode() {
            let i = NDEFERRED.fetch_add(1, AcqRel);
            if i < MAX_DEFERRED {
                DEFERRED[i].store(ptr as usize, Relaxed);
            }
            // Beyond the table: leaked (a bounded loss, never a deadlock).
            return;
        }
        // SAFETY: a system pointer with its layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if !in_arena(ptr) && !bump_mode() {
            // SAFETY: a system pointer with its layout.
            return unsafe { System.realloc(ptr, layout, new_size) };
        }
        // SAFETY: the new layout has the old alignment and a size the caller guarantees
        // valid; the copy covers the smaller of both sizes.
        unsafe {
            let new_layout = Layout::from_size_align_unchecked(new_size, layout.align());
            let p = self.alloc(new_layout);
            if !p.is_null() {
                std::ptr::copy_nonoverlapping(ptr, p, layout.size().min(new_size));
                self.dealloc(ptr, layout);
            }
            p
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bump_mode_serves_the_agent_from_the_arena_and_defers_system_frees() {
        let a = CrumAlloc;
        let l = Layout::from_size_align(100, 8).unwrap();
        // SAFETY: plain allocator calls with matching layouts.
        unsafe {
            let sys = a.alloc(l);
            assert!(!in_arena(sys));
            enter();
            let p = a.alloc(l);
            assert!(in_arena(p), "agent allocation did not come from the arena");
            let z = a.alloc_zeroed(Layout::from_size_align(4096, 64).unwrap());
            assert!(in_arena(z) && (z as usize).is_multiple_of(64));
            assert!((0..4096).all(|i| *z.add(i) == 0));
            a.dealloc(sys, l);
            assert_eq!(NDEFERRED.load(Relaxed), 1, "system free was not deferred");
            let grown = a.realloc(p, l, 1000);
            assert!(in_arena(grown));
            // Another thread is not the agent: it gets system memory.
            let other = std::thread::spawn(move || {
                let q = CrumAlloc.alloc(l);
                let inside = in_arena(q);
                CrumAlloc.dealloc(q, l);
                inside
            })
            .join()
            .unwrap();
            assert!(!other, "a non-agent thread was served from the arena");
            leave();
            assert_eq!(NDEFERRED.load(Relaxed), 0);
            let after = a.alloc(l);
            assert!(!in_arena(after));
            a.dealloc(after, l);
            a.dealloc(grown, Layout::from_size_align(1000, 8).unwrap());
        }
    }
}
