//! Managed memory (`cudaMallocManaged`, `__managed__`) through shadow pages: CRUM's
//! Algorithm 1, with read-ahead, system-call support, a precise userfaultfd mode and a
//! verified mode. Design and figures: `docs/managed-memory.md`.
//!
//! The proxy holds the real memory of every managed allocation (a memfd; the emulated device
//! computes on it). This process holds:
//! - the *shadow* at the managed address, the only view the program uses;
//! - an *alias*: the proxy's memfd mapped at an address of our choosing, through which data
//!   moves between the two (a memcpy, no request);
//! - in the mprotect modes, a *fill* view: the shadow's own memfd mapped a second time,
//!   always writable, so a page is filled before the program can touch it (filling through
//!   the shadow would open it to every thread).
//!
//! Each shadow page is INVALID (stale, no access), CLEAN (current, read-only), DIRTY (written
//! since the last device call, writable) or NEW (writable since allocation, never flushed).
//! Before any request that lets the device touch memory ([`before_request`]), dirty pages go
//! to the proxy and every page becomes INVALID. A read fault fetches a window of pages (the
//! whole region when small; else one page, doubling while the faults are sequential); a write
//! fault makes pages DIRTY (a window that doubles likewise). All state changes of a region
//! happen under its spin lock with signals blocked, from the fault handler
//! ([`fault`]: SIGSEGV, or the userfaultfd thread in [`uffd`]) or from a program thread.
//!
//! Modes (`CRUM_MANAGED`, `crum run --managed`): `mprotect` (default), `uffd` (precise; the
//! kernel tells reads from writes and system calls wait for the handler instead of failing
//! with EFAULT; falls back to mprotect with a warning where userfaultfd is not allowed) and
//! `verify` (mprotect that also reports reads of pages written before being read since the
//! last CUDA call — CRUM's read-before-write assumption — by single-stepping every access to
//! a dirty page).
#![allow(unsafe_code)]

pub mod advice;
mod fault;
mod uffd;

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU64, AtomicU8, AtomicUsize, Ordering::*};
use std::sync::Mutex;

use crum_wire::{cuda, Request};

use crate::errors::CudaResult;

pub(crate) const PAGE: u64 = 4096;
/// Regions up to this size are fetched whole at their first fault.
const SMALL_REGION: u64 = 256 * 1024;
/// Largest read-ahead / write window, in pages (16 MiB).
const MAX_WINDOW: u64 = 4096;
/// Managed allocations alive at once.
const MAX_REGIONS: usize = 4096;

pub(crate) const INVALID: u8 = 0;
pub(crate) const CLEAN: u8 = 1;
pub(crate) const DIRTY: u8 = 2;
pub(crate) const NEW: u8 = 3;
/// Verify mode: DIRTY, and written before anything in it was read since the last device call
/// (under CRUM's scheme its other bytes would be stale: reading it breaks the assumption).
pub(crate) const WFIRST: u8 = 4;

/// How shadow pages are tracked.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Mode {
    Mprotect = 1,
    Uffd = 2,
    Verify = 3,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Mprotect => "mprotect",
            Mode::Uffd => "uffd",
            Mode::Verify => "verify",
        }
    }
}

/// 0 until the first managed allocation chooses the mode.
static MODE: AtomicU8 = AtomicU8::new(0);

pub(crate) fn mode() -> Mode {
    match MODE.load(Relaxed) {
        2 => Mode::Uffd,
        3 => Mode::Verify,
        _ => Mode::Mprotect,
    }
}

/// Kind of access that faulted.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Access {
    Read,
    Write,
    /// A protection fault whose direction the CPU did not tell: on a readable page it is a
    /// write; on an inaccessible one, handled as a read (a write faults once more).
    #[cfg_attr(target_arch = "x86_64", allow(dead_code))]
    Unknown,
}

/// One managed allocation. Fields are atomics so the fault handler can read them without
/// locks; they change only under `lock` (and `start` is published last).
pub(crate) struct Region {
    lock: AtomicBool,
    pub(crate) start: AtomicU64,
    pub(crate) span: AtomicU64,
    alias: AtomicU64,
    fill: AtomicU64,
    states: AtomicPtr<AtomicU8>,
    /// The shadow's memfd while pages are NEW (mprotect modes): which hold data.
    shadow_fd: AtomicI32,
    /// Pages not INVALID (a region untouched since the last device call costs nothing).
    valid: AtomicU64,
    /// Bounds of the pages not INVALID (`lo >= hi`: none): a flush of a large region touched
    /// in a few places looks at those places only.
    lo: AtomicU64,
    hi: AtomicU64,
    rwin: AtomicU64,
    rnext: AtomicU64,
    wwin: AtomicU64,
    wnext: AtomicU64,
    /// A page was fetched since the last invalidation.
    fetched: AtomicBool,
    /// Verify mode: reads after writes reported in this region.
    reported: AtomicU64,
    /// Uffd mode: registered with the userfaultfd (a fresh region is, from its first flush).
    armed: AtomicBool,
}

impl Region {
    const fn new() -> Region {
        Region {
            lock: AtomicBool::new(false),
            start: AtomicU64::new(0),
            span: AtomicU64::new(0),
            alias: AtomicU64::new(0),
            fill: AtomicU64::new(0),
            states: AtomicPtr::new(std::ptr::null_mut()),
            shadow_fd: AtomicI32::new(-1),
            valid: AtomicU64::new(0),
            lo: AtomicU64::new(u64::MAX),
            hi: AtomicU64::new(0),
            rwin: AtomicU64::new(1),
            rnext: AtomicU64::new(u64::MAX),
            wwin: AtomicU64::new(1),
            wnext: AtomicU64::new(u64::MAX),
            fetched: AtomicBool::new(false),
            reported: AtomicU64::new(0),
            armed: AtomicBool::new(false),
        }
    }

    fn pages(&self) -> u64 {
        self.span.load(Relaxed) / PAGE
    }

    pub(crate) fn state(&self, p: u64) -> u8 {
        // SAFETY: `p` < pages; the array lives as long as the region is published.
        unsafe { (*self.states.load(Relaxed).add(p as usize)).load(Relaxed) }
    }

    fn set(&self, p: u64, s: u8) {
        // SAFETY: as in `state`.
        unsafe { (*self.states.load(Relaxed).add(p as usize)).store(s, Relaxed) }
    }

    fn addr(&self, p: u64) -> u64 {
        self.start.load(Relaxed) + p * PAGE
    }

    /// Pages `[p, p+n)` are no longer INVALID.
    fn touch(&self, p: u64, n: u64) {
        self.lo.fetch_min(p, Relaxed);
        self.hi.fetch_max(p + n, Relaxed);
    }
}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: Region = Region::new();
static REGIONS: [Region; MAX_REGIONS] = [EMPTY; MAX_REGIONS];
/// Slots ever used (the handler scans `REGIONS[..HIGH]`).
static HIGH: AtomicUsize = AtomicUsize::new(0);
/// Live regions (fast paths when the program has none).
static LIVE: AtomicUsize = AtomicUsize::new(0);
/// Serializes region creation and removal (never taken by the fault handler).
static TABLE: Mutex<()> = Mutex::new(());

/// Counters for `CRUM_MANAGED_STATS=1` and the benchmarks.
pub(crate) struct Stats {
    pub read_faults: AtomicU64,
    pub write_faults: AtomicU64,
    pub pages_fetched: AtomicU64,
    pub pages_flushed: AtomicU64,
    pub flushes: AtomicU64,
    pub reads_after_write: AtomicU64,
}
pub(crate) static STATS: Stats = Stats {
    read_faults: AtomicU64::new(0),
    write_faults: AtomicU64::new(0),
    pages_fetched: AtomicU64::new(0),
    pages_flushed: AtomicU64::new(0),
    flushes: AtomicU64::new(0),
    reads_after_write: AtomicU64::new(0),
};

/// The region holding `addr`, if any (async-signal-safe).
pub(crate) fn find(addr: u64) -> Option<&'static Region> {
    if LIVE.load(Acquire) == 0 {
        return None;
    }
    let high = HIGH.load(Acquire);
    REGIONS[..high].iter().find(|r| {
        let s = r.start.load(Acquire);
        s != 0 && addr >= s && addr < s + r.span.load(Relaxed)
    })
}

/// Blocks every signal but synchronous faults while a region lock is held, so no handler (the
/// checkpoint agent's stop signal included) runs on a thread holding it.
pub(crate) struct Masked(libc::sigset_t);

impl Masked {
    pub(crate) fn new() -> Masked {
        // SAFETY: sigset operations on locals; pthread_sigmask is async-signal-safe.
        unsafe {
            let mut all: libc::sigset_t = std::mem::zeroed();
            libc::sigfillset(&mut all);
            for s in [libc::SIGSEGV, libc::SIGBUS, libc::SIGILL, libc::SIGFPE, libc::SIGTRAP] {
                libc::sigdelset(&mut all, s);
            }
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut old);
            Masked(old)
        }
    }
}

impl Drop for Masked {
    fn drop(&mut self) {
        // SAFETY: restores the mask saved by `new`.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.0, std::ptr::null_mut()) };
    }
}

/// A held region lock.
pub(crate) struct Locked<'a> {
    pub(crate) r: &'a Region,
    _mask: Masked,
}

impl Region {
    pub(crate) fn lock(&self) -> Locked<'_> {
        let mask = Masked::new();
        let mut spins = 0u32;
        while self
            .lock
            .compare_exchange_weak(false, true, Acquire, Relaxed)
            .is_err()
        {
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                // SAFETY: plain system call.
                unsafe { libc::sched_yield() };
            }
        }
        Locked { r: self, _mask: mask }
    }

    /// The lock if free (the checkpoint's collect runs with every other thread stopped).
    fn try_lock(&self) -> Option<Locked<'_>> {
        let mask = Masked::new();
        self.lock
            .compare_exchange(false, true, Acquire, Relaxed)
            .ok()
            .map(|_| Locked { r: self, _mask: mask })
    }
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        self.r.lock.store(false, Release);
    }
}

fn protect(addr: u64, len: u64, prot: i32) -> bool {
    // SAFETY: `addr..addr+len` is a shadow range this module mapped.
    unsafe { libc::mprotect(addr as *mut libc::c_void, len as usize, prot) == 0 }
}

fn copy(dst: u64, src: u64, len: u64) {
    // SAFETY: both ranges are mappings of this module (alias, fill or a present shadow page),
    // `len` bytes inside one region; they never overlap (different views).
    unsafe { std::ptr::copy_nonoverlapping(src as *const u8, dst as *mut u8, len as usize) };
}

impl Locked<'_> {
    /// Fetch the pages `[p, p+n)`, all INVALID, from the proxy; they become CLEAN (or DIRTY
    /// and writable with `write`).
    fn fetch_run(&self, p: u64, n: u64, write: bool) -> bool {
        let r = self.r;
        let off = p * PAGE;
        let len = n * PAGE;
        // Marked before the copy starts: [`after_request`] looks at the mark without the
        // lock, and a copy under way while the device still runs must be redone after the
        // synchronization (a fault message the userfaultfd thread takes late, from a thread
        // that was woken by another's fill, fetches at any moment).
        r.fetched.store(true, SeqCst);
        let ok = match mode() {
            Mode::Uffd => uffd::fill(r.start.load(Relaxed) + off, r.alias.load(Relaxed) + off, len, write),
            _ => {
                copy(r.fill.load(Relaxed) + off, r.alias.load(Relaxed) + off, len);
                let prot = if write { libc::PROT_READ | libc::PROT_WRITE } else { libc::PROT_READ };
                protect(r.addr(p), len, prot)
            }
        };
        if !ok {
            return false;
        }
        for q in p..p + n {
            r.set(q, if write { DIRTY } else { CLEAN });
        }
        r.valid.fetch_add(n, Relaxed);
        r.touch(p, n);
        STATS.pages_fetched.fetch_add(n, Relaxed);
        true
    }

    /// The INVALID run starting at `p`, at most `max` pages.
    fn invalid_run(&self, p: u64, max: u64) -> u64 {
        let end = (p + max).min(self.r.pages());
        (p..end).take_while(|&q| self.r.state(q) == INVALID).count() as u64
    }

    /// Make every page of the region current, writable and dirty (when page protections can
    /// no longer be split further: the process ran out of memory mappings).
    fn degrade(&self) {
        let r = self.r;
        let pages = r.pages();
        let mut p = 0;
        while p < pages {
            let n = self.invalid_run(p, pages - p);
            if n > 0 {
                let off = p * PAGE;
                if mode() == Mode::Uffd {
                    // No fill view: the pages are filled in place, writable.
                    if !uffd::fill(r.start.load(Relaxed) + off, r.alias.load(Relaxed) + off, n * PAGE, true) {
                        fault::write_stderr(b"crum: managed memory: cannot fill shadow pages (userfaultfd); they are fetched again at the next access\n");
                        return;
                    }
                } else {
                    copy(r.fill.load(Relaxed) + off, r.alias.load(Relaxed) + off, n * PAGE);
                }
                STATS.pages_fetched.fetch_add(n, Relaxed);
                p += n;
            } else {
                p += 1;
            }
        }
        if mode() == Mode::Uffd {
            uffd::unprotect(r.start.load(Relaxed), r.span.load(Relaxed));
        } else {
            protect(r.start.load(Relaxed), r.span.load(Relaxed), libc::PROT_READ | libc::PROT_WRITE);
        }
        for q in 0..pages {
            if r.state(q) != NEW {
                r.set(q, DIRTY);
            }
        }
        r.valid.store(pages, Relaxed);
        r.touch(0, pages);
        r.fetched.store(true, Relaxed);
    }

    /// A read fault (or a write fault on an INVALID page, `write`) at page `p`.
    fn fault_invalid(&self, p: u64, write: bool) {
        let r = self.r;
        let pages = r.pages();
        if r.span.load(Relaxed) <= SMALL_REGION {
            // Small region: everything that is stale, at once.
            let mut q = 0;
            while q < pages {
                let n = self.invalid_run(q, pages - q);
                if n > 0 {
                    if !self.fetch_run(q, n, false) {
                        self.degrade();
                        return;
                    }
                    q += n;
                } else {
                    q += 1;
                }
            }
        } else {
            let win = if r.rnext.load(Relaxed) == p {
                (r.rwin.load(Relaxed) * 2).min(MAX_WINDOW)
            } else {
                1
            };
            let n = self.invalid_run(p, win).max(1);
            if !self.fetch_run(p, n, false) {
                self.degrade();
                return;
            }
            r.rwin.store(win, Relaxed);
            r.rnext.store(p + n, Relaxed);
        }
        if write {
            self.make_dirty(p);
        }
    }

    /// A write to the CLEAN page `p`: it and the following CLEAN pages of the write window
    /// become DIRTY and writable.
    fn make_dirty(&self, p: u64) {
        let r = self.r;
        if r.state(p) != CLEAN {
            return;
        }
        let win = if r.wnext.load(Relaxed) == p {
            (r.wwin.load(Relaxed) * 2).min(MAX_WINDOW)
        } else {
            1
        };
        let end = (p + win).min(r.pages());
        let n = (p..end).take_while(|&q| r.state(q) == CLEAN).count() as u64;
        let ok = match mode() {
            Mode::Uffd => uffd::unprotect(r.addr(p), n * PAGE),
            // Verify mode keeps dirty pages inaccessible (every access is single-stepped).
            Mode::Verify => true,
            Mode::Mprotect => protect(r.addr(p), n * PAGE, libc::PROT_READ | libc::PROT_WRITE),
        };
        if !ok {
            self.degrade();
            return;
        }
        for q in p..p + n {
            r.set(q, DIRTY);
        }
        r.wwin.store(win, Relaxed);
        r.wnext.store(p + n, Relaxed);
    }

    /// Send DIRTY pages (and NEW pages holding data) to the proxy. With `invalidate`, every
    /// page then becomes INVALID (inaccessible until fetched again).
    fn flush(&self, invalidate: bool) {
        let r = self.r;
        let start = r.start.load(Relaxed);
        let span = r.span.load(Relaxed);
        let lo = r.lo.load(Relaxed);
        let hi = r.hi.load(Relaxed).min(r.pages());
        if r.valid.load(Relaxed) == 0 || lo >= hi {
            return;
        }
        // Only `[lo, hi)` holds pages that are not INVALID (inaccessible or absent already).
        let (first, len) = (start + lo * PAGE, (hi - lo) * PAGE);
        let m = mode();
        // A fresh uffd region is registered at its first flush, before its NEW pages are
        // copied, so that the write protection below stops the program's other threads
        // writing them (a write between the copy and the drop of the pages would be lost).
        // Its absent pages are then not read (that would wait for this lock): the pages that
        // hold something are taken from /proc/self/pagemap.
        let mut arm = invalidate && m == Mode::Uffd && !r.armed.load(Relaxed);
        let mut unarmed = false;
        if arm {
            if uffd::register(start, span) {
                r.armed.store(true, Relaxed);
            } else {
                fault::write_stderr(b"crum: managed memory: cannot register a region with userfaultfd; its pages stay untracked\n");
                arm = false;
                unarmed = true;
            }
        }
        if invalidate && !unarmed {
            // Stop writers first: a write racing with the copy faults and waits for the lock.
            match m {
                Mode::Uffd => uffd::protect_all(first, len),
                _ => {
                    if !protect(first, len, libc::PROT_NONE) && !protect(start, span, libc::PROT_NONE) {
                        fault::write_stderr(
                            b"crum: managed memory: cannot protect a region before a device call; writes racing with it may be lost\n",
                        );
                    }
                }
            }
        }
        // Where the shadow's bytes can be read: the fill view, or the shadow itself (uffd).
        let src = if m == Mode::Uffd { start } else { r.fill.load(Relaxed) };
        let data = if arm { present_pages(first, lo, hi) } else { new_pages_with_data(r) };
        let alias = r.alias.load(Relaxed);
        let mut flushed = 0;
        let mut p = lo;
        // NEW pages travel if they hold data: the proxy's copy of a fresh region is zero.
        let send = |q: u64| match r.state(q) {
            DIRTY | WFIRST => true,
            NEW => data.as_ref().is_none_or(|d| d.has(q)) && !is_zero(src + q * PAGE),
            _ => false,
        };
        while p < hi {
            if !send(p) {
                p += 1;
                continue;
            }
            let mut n = 1;
            while p + n < hi && send(p + n) {
                n += 1;
            }
            copy(alias + p * PAGE, src + p * PAGE, n * PAGE);
            flushed += n;
            p += n;
        }
        STATS.pages_flushed.fetch_add(flushed, Relaxed);
        if invalidate && !unarmed {
            if m == Mode::Uffd {
                uffd::drop_pages(first, len);
            }
            for q in lo..hi {
                r.set(q, INVALID);
            }
            r.valid.store(0, Relaxed);
            r.lo.store(u64::MAX, Relaxed);
            r.hi.store(0, Relaxed);
            r.fetched.store(false, Relaxed);
            r.reported.store(0, Relaxed);
            r.rnext.store(u64::MAX, Relaxed);
            r.wnext.store(u64::MAX, Relaxed);
            let fd = r.shadow_fd.swap(-1, Relaxed);
            if fd >= 0 {
                crum_ckpt::agent::include_fd(fd);
                // SAFETY: our descriptor; the NEW pages it described are gone.
                unsafe { libc::close(fd) };
            }
        }
    }
}

/// Whether the page at `addr` (readable) is all zero bytes.
fn is_zero(addr: u64) -> bool {
    // SAFETY: a whole readable page of ours, 8-byte aligned.
    let words = unsafe { std::slice::from_raw_parts(addr as *const u64, (PAGE / 8) as usize) };
    words.iter().all(|&w| w == 0)
}

/// Which NEW pages of the shadow hold data (`None`: unknown, treat all as data).
struct DataPages {
    runs: Vec<(u64, u64)>,
}

impl DataPages {
    fn has(&self, p: u64) -> bool {
        self.runs.iter().any(|&(a, b)| p >= a && p < b)
    }
}

/// The pages of `[lo, hi)` (the first at `first`) that are present or swapped out, from
/// /proc/self/pagemap: the others are absent and hold nothing. Reads no shadow memory. None
/// (every page may hold data) where pagemap cannot be read.
fn present_pages(first: u64, lo: u64, hi: u64) -> Option<DataPages> {
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::open("/proc/self/pagemap").ok()?;
    let mut runs: Vec<(u64, u64)> = Vec::new();
    let mut buf = vec![0u8; 8 * 4096];
    let mut p = lo;
    while p < hi {
        let n = (hi - p).min(4096);
        let bytes = &mut buf[..(n * 8) as usize];
        f.read_exact_at(bytes, (first / PAGE + (p - lo)) * 8).ok()?;
        for (i, e) in bytes.chunks_exact(8).enumerate() {
            let e = u64::from_ne_bytes(e.try_into().unwrap_or_default());
            // Bit 63: present; bit 62: swapped.
            if e & (3 << 62) != 0 {
                let q = p + i as u64;
                match runs.last_mut() {
                    Some((_, b)) if *b == q => *b = q + 1,
                    _ => runs.push((q, q + 1)),
                }
            }
        }
        p += n;
    }
    Some(DataPages { runs })
}

fn new_pages_with_data(r: &Region) -> Option<DataPages> {
    let fd = r.shadow_fd.load(Relaxed);
    if fd < 0 {
        return None;
    }
    let end = r.span.load(Relaxed) as i64;
    let mut runs = Vec::new();
    let mut off = 0i64;
    while off < end {
        // SAFETY: lseek on our memfd.
        let d = unsafe { libc::lseek(fd, off, libc::SEEK_DATA) };
        if d < 0 {
            break;
        }
        // SAFETY: as above.
        let h = unsafe { libc::lseek(fd, d, libc::SEEK_HOLE) };
        let h = if h < 0 { end } else { h.min(end) };
        runs.push((d as u64 / PAGE, (h as u64).div_ceil(PAGE)));
        off = h;
    }
    Some(DataPages { runs })
}

/// Handle an access to managed memory at `addr` (the fault handler, the userfaultfd thread,
/// or [`prepare_range`]). False if `addr` is not in managed memory.
pub(crate) fn handle(addr: u64, access: Access) -> bool {
    let Some(r) = find(addr) else { return false };
    let g = r.lock();
    // The region may have been freed meanwhile.
    let start = r.start.load(Acquire);
    if start == 0 || addr < start || addr >= start + r.span.load(Relaxed) {
        return false;
    }
    let p = (addr - start) / PAGE;
    match (r.state(p), access) {
        (INVALID, a) => {
            let write = a == Access::Write;
            if write {
                STATS.write_faults.fetch_add(1, Relaxed);
            } else {
                STATS.read_faults.fetch_add(1, Relaxed);
            }
            g.fault_invalid(p, write);
        }
        (CLEAN, Access::Write | Access::Unknown) => {
            STATS.write_faults.fetch_add(1, Relaxed);
            g.make_dirty(p);
        }
        // Another thread got there first.
        _ => {}
    }
    true
}

/// What the verify-mode fault handler does next.
pub(crate) enum Verified {
    NotManaged,
    Done,
    /// The page at this address is open for one instruction (single-step, then close).
    Opened(u64),
}

/// Verify mode: an access to managed memory at `addr`. Dirty pages stay inaccessible, so
/// every access to one faults: a read of a page written since the last CUDA call is
/// reported; the access then runs with the page open for one instruction.
pub(crate) fn verify_access(addr: u64, access: Access) -> Verified {
    let Some(r) = find(addr) else { return Verified::NotManaged };
    let g = r.lock();
    let start = r.start.load(Acquire);
    if start == 0 || addr < start || addr >= start + r.span.load(Relaxed) {
        return Verified::NotManaged;
    }
    let p = (addr - start) / PAGE;
    match r.state(p) {
        INVALID => {
            if access == Access::Write {
                STATS.write_faults.fetch_add(1, Relaxed);
            } else {
                STATS.read_faults.fetch_add(1, Relaxed);
            }
            g.fault_invalid(p, false);
            if access != Access::Write || r.state(p) != CLEAN {
                return Verified::Done;
            }
            r.set(p, WFIRST);
        }
        CLEAN => {
            STATS.write_faults.fetch_add(1, Relaxed);
            r.set(p, DIRTY);
        }
        DIRTY => {}
        WFIRST => {
            if access == Access::Read {
                STATS.reads_after_write.fetch_add(1, Relaxed);
                if r.reported.swap(1, Relaxed) == 0 && fault::REPORTED.fetch_add(1, Relaxed) < fault::REPORT_LIMIT {
                    let mut line = [0u8; 256];
                    let mut n = 0;
                    for part in [
                        &b"crum: managed memory at "[..],
                        &fault::hex(addr)[..],
                        &b" read after write with no CUDA call in between (the page was written before it was read: CRUM's read-before-write assumption does not hold here; crum keeps the data correct)\n"[..],
                    ] {
                        let k = part.len().min(line.len() - n);
                        line[n..n + k].copy_from_slice(&part[..k]);
                        n += k;
                    }
                    fault::write_stderr(&line[..n]);
                }
            }
        }
        _ => return Verified::Done,
    }
    let page = start + p * PAGE;
    if !protect(page, PAGE, libc::PROT_READ | libc::PROT_WRITE) {
        g.degrade();
        return Verified::Done;
    }
    Verified::Opened(page)
}

/// Verify mode: the instruction that touched `page` ran; close the page again.
pub(crate) fn verify_close(page: u64) {
    let Some(r) = find(page) else { return };
    let _g = r.lock();
    let start = r.start.load(Acquire);
    if start == 0 || page < start {
        return;
    }
    let prot = match r.state((page - start) / PAGE) {
        CLEAN => libc::PROT_READ,
        NEW => libc::PROT_READ | libc::PROT_WRITE,
        _ => libc::PROT_NONE,
    };
    protect(page, PAGE, prot);
}

/// Make `[addr, addr+len)` safe for a system call: every shadow page of managed memory in the
/// range becomes readable with current data (`write == false`: the kernel will read it, as in
/// write(2)) or writable and dirty (`write == true`: the kernel will write it, as in read(2)).
/// Addresses outside managed memory are ignored; cheap when the program has none.
pub fn prepare_range(addr: u64, len: u64, write: bool) {
    if LIVE.load(Relaxed) == 0 || len == 0 {
        return;
    }
    let end = addr.saturating_add(len);
    let high = HIGH.load(Acquire);
    for r in &REGIONS[..high] {
        let s = r.start.load(Acquire);
        if s == 0 {
            continue;
        }
        let e = s + r.span.load(Relaxed);
        if end <= s || addr >= e {
            continue;
        }
        let g = r.lock();
        if r.start.load(Acquire) != s {
            continue;
        }
        let first = (addr.max(s) - s) / PAGE;
        let last = (end.min(e) - s).div_ceil(PAGE);
        let mut p = first;
        while p < last {
            match r.state(p) {
                INVALID => {
                    let n = g.invalid_run(p, last - p);
                    if !g.fetch_run(p, n, false) {
                        g.degrade();
                        break;
                    }
                    continue;
                }
                CLEAN if write => {
                    let n = (p..last).take_while(|&q| r.state(q) == CLEAN).count() as u64;
                    let ok = match mode() {
                        Mode::Uffd => uffd::unprotect(r.addr(p), n * PAGE),
                        _ => protect(r.addr(p), n * PAGE, libc::PROT_READ | libc::PROT_WRITE),
                    };
                    if !ok {
                        g.degrade();
                        break;
                    }
                    for q in p..p + n {
                        r.set(q, DIRTY);
                    }
                    p += n;
                }
                DIRTY | WFIRST if mode() == Mode::Verify => {
                    // The kernel, not an instruction, touches it: open it (unverified).
                    protect(r.addr(p), PAGE, libc::PROT_READ | libc::PROT_WRITE);
                    p += 1;
                }
                _ => p += 1,
            }
        }
    }
}

/// [`prepare_range`] for `libcrum_libc.so`'s I/O wrappers.
#[no_mangle]
pub extern "C" fn crum_prepare_range(addr: u64, len: u64, write: std::ffi::c_int) {
    prepare_range(addr, len, write != 0);
}

/// Flush and invalidate every region (a device call follows, or a host function runs).
pub fn sync_point() {
    if LIVE.load(Acquire) == 0 {
        return;
    }
    if mode() == Mode::Uffd {
        uffd::drain();
    }
    let high = HIGH.load(Acquire);
    let mut any = false;
    for r in &REGIONS[..high] {
        if r.start.load(Acquire) == 0 || r.valid.load(Relaxed) == 0 {
            continue;
        }
        let g = r.lock();
        if r.start.load(Acquire) != 0 {
            g.flush(true);
            any = true;
        }
    }
    if any {
        STATS.flushes.fetch_add(1, Relaxed);
    }
}

/// Whether a request lets the device read or write memory, or tells the program it did.
fn touches_device(req: &Request) -> bool {
    !matches!(
        req,
        Request::Hello { .. }
            | Request::Close
            | Request::DeviceProps
            | Request::MemGetInfo
            | Request::Malloc { .. }
            | Request::HostRegister { .. }
            | Request::HostUnregister { .. }
            | Request::LoadModule { .. }
            | Request::GetFunction { .. }
            | Request::GetSymbol { .. }
            | Request::ManagedVar { .. }
            | Request::FuncSetAttribute { .. }
            | Request::StreamSetAttr { .. }
            | Request::ResetPersistingL2
            | Request::SetPersistingL2Limit { .. }
            | Request::SetHeapLimit { .. }
            | Request::ModuleKernels { .. }
            | Request::StreamCreate { .. }
            | Request::EventCreate { .. }
            | Request::EventDestroy { .. }
            | Request::EventElapsed { .. }
            | Request::TexCreate { .. }
            | Request::TexDestroy { .. }
            | Request::CheckpointState
            | Request::CheckpointData { .. }
            | Request::RestoreDevice { .. }
    )
}

/// Called by [`crate::client::call`] and [`crate::client::send`] before every request: before
/// any request that lets the device touch memory, dirty pages go to the proxy and the shadow
/// is invalidated.
#[inline]
pub fn before_request(req: &crum_wire::Request) {
    if LIVE.load(Relaxed) != 0 && touches_device(req) {
        sync_point();
    }
}

/// Called by [`crate::client::call`] after a synchronous request that waited for the device
/// (a synchronization, a query): pages another thread fetched while the device was still
/// running are stale; invalidate them again.
#[inline]
pub fn after_request(req: &crum_wire::Request) {
    if LIVE.load(Relaxed) == 0 || !touches_device(req) {
        return;
    }
    if mode() == Mode::Uffd {
        uffd::drain();
    }
    let high = HIGH.load(Acquire);
    for r in &REGIONS[..high] {
        if r.start.load(Acquire) != 0 && r.fetched.load(SeqCst) {
            let g = r.lock();
            if r.start.load(Acquire) != 0 {
                g.flush(true);
            }
        }
    }
}

/// How a new region's shadow starts.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Init {
    /// `cudaMallocManaged`: writable from the start (pages the program writes are sent at
    /// the first device call).
    Fresh,
    /// The proxy's bytes are the truth (a `__managed__` variable's initializer, a restored
    /// region): every page starts INVALID.
    FromProxy,
}

fn choose_mode() {
    if MODE.load(Acquire) != 0 {
        return;
    }
    let want = std::env::var("CRUM_MANAGED").unwrap_or_default();
    let m = match want.as_str() {
        "" | "mprotect" => Mode::Mprotect,
        "uffd" => Mode::Uffd,
        "verify" => Mode::Verify,
        other => {
            eprintln!("crum: CRUM_MANAGED={other:?} is not a mode (mprotect, uffd, verify); using mprotect");
            Mode::Mprotect
        }
    };
    let m = match m {
        Mode::Uffd => match uffd::start() {
            Ok(()) => {
                if uffd::USER_ONLY.load(Relaxed) {
                    eprintln!(
                        "crum: managed memory: userfaultfd handles user-mode faults only here \
                         (vm.unprivileged_userfaultfd=0); system calls use the C library wrappers"
                    );
                }
                Mode::Uffd
            }
            Err(why) => {
                eprintln!("crum: managed memory: userfaultfd is not available ({why}); using mprotect");
                Mode::Mprotect
            }
        },
        Mode::Verify if !fault::can_verify() => {
            eprintln!("crum: managed memory: verify mode needs x86-64 single-stepping; using mprotect");
            Mode::Mprotect
        }
        m => m,
    };
    if m != Mode::Uffd {
        fault::install(m == Mode::Verify);
    }
    MODE.store(m as u8, Release);
    if std::env::var_os("CRUM_MANAGED_STATS").is_some_and(|v| v == "1") {
        // SAFETY: registers a plain function.
        unsafe { libc::atexit(print_stats) };
    }
}

extern "C" fn print_stats() {
    eprintln!(
        "crum: managed stats mode={} read_faults={} write_faults={} pages_fetched={} pages_flushed={} flushes={} reads_after_write={}",
        mode().name(),
        STATS.read_faults.load(Relaxed),
        STATS.write_faults.load(Relaxed),
        STATS.pages_fetched.load(Relaxed),
        STATS.pages_flushed.load(Relaxed),
        STATS.flushes.load(Relaxed),
        STATS.reads_after_write.load(Relaxed),
    );
}

fn map(addr: u64, len: u64, prot: i32, flags: i32, fd: i32) -> CudaResult<u64> {
    // SAFETY: a fixed mapping only inside our device window (checked by the caller) or a
    // mapping where the kernel chooses.
    let p = unsafe { libc::mmap(addr as *mut libc::c_void, len as usize, prot, flags, fd, 0) };
    if p == libc::MAP_FAILED {
        return Err(cuda::ERROR_MEMORY_ALLOCATION);
    }
    Ok(p as u64)
}

fn unmap(addr: u64, len: u64) {
    if addr != 0 {
        // SAFETY: a mapping of ours.
        unsafe { libc::munmap(addr as *mut libc::c_void, len as usize) };
    }
}

/// Open the proxy's memfd `memfd` and map it where the kernel likes: the alias.
fn map_alias(memfd: i32, span: u64) -> CudaResult<u64> {
    let path = format!("/proc/{}/fd/{}\0", crate::client::proxy_pid(), memfd);
    // SAFETY: NUL-terminated path.
    let fd = unsafe { libc::open(path.as_ptr().cast(), libc::O_RDWR | libc::O_CLOEXEC) };
    if fd < 0 {
        tracing::error!("cannot open the proxy's managed memory {path}: {}", std::io::Error::last_os_error());
        return Err(cuda::ERROR_MEMORY_ALLOCATION);
    }
    let r = map(0, span, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd);
    // SAFETY: our descriptor; the mapping keeps the memory.
    unsafe { libc::close(fd) };
    r
}

/// Set up the shadow of the managed allocation `[addr, addr+len)` whose real memory is the
/// proxy's memfd `memfd` (a descriptor number in the proxy).
pub fn register(addr: u64, len: u64, memfd: i32, init: Init) -> CudaResult<()> {
    choose_mode();
    let span = len.max(1).next_multiple_of(PAGE);
    let pages = span / PAGE;
    let _t = TABLE.lock().unwrap_or_else(|p| p.into_inner());
    // Set up already: a call to allocate it was cut by a checkpoint after the proxy had
    // allocated it, and the restart restored it before the call got its answer.
    if REGIONS.iter().any(|r| r.start.load(Acquire) == addr && r.span.load(Relaxed) == span) {
        return Ok(());
    }
    let slot = REGIONS
        .iter()
        .position(|r| r.start.load(Acquire) == 0 && r.span.load(Relaxed) == 0)
        .ok_or_else(|| {
            static SAID: AtomicBool = AtomicBool::new(false);
            if !SAID.swap(true, Relaxed) {
                eprintln!("crum: managed memory: more than {MAX_REGIONS} managed allocations at once are not supported");
            }
            cuda::ERROR_MEMORY_ALLOCATION
        })?;
    let r = &REGIONS[slot];
    let alias = map_alias(memfd, span)?;
    let states = map(0, pages, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1)
        .inspect_err(|_| unmap(alias, span))?;
    let fresh = init == Init::Fresh;
    let mut fill = 0;
    let mut shadow_fd = -1;
    let setup = (|| -> CudaResult<()> {
        if mode() == Mode::Uffd {
            map(
                addr,
                span,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED | libc::MAP_NORESERVE,
                -1,
            )?;
            // A fresh region starts writable, untracked and NEW; the others absent.
            if !fresh && !uffd::register(addr, span) {
                return Err(cuda::ERROR_MEMORY_ALLOCATION);
            }
        } else {
            // SAFETY: NUL-terminated name.
            let fd = unsafe { libc::memfd_create(c"crum-shadow".as_ptr(), libc::MFD_CLOEXEC) };
            if fd < 0 {
                return Err(cuda::ERROR_MEMORY_ALLOCATION);
            }
            shadow_fd = fd;
            // SAFETY: our descriptor.
            if unsafe { libc::ftruncate(fd, span as i64) } != 0 {
                return Err(cuda::ERROR_MEMORY_ALLOCATION);
            }
            let prot = if fresh { libc::PROT_READ | libc::PROT_WRITE } else { libc::PROT_NONE };
            map(addr, span, prot, libc::MAP_SHARED | libc::MAP_FIXED, fd)?;
            fill = map(0, span, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd)?;
        }
        Ok(())
    })();
    if let Err(e) = setup {
        unmap(alias, span);
        unmap(states, pages);
        unmap(fill, span);
        if shadow_fd >= 0 {
            // SAFETY: our descriptor.
            unsafe { libc::close(shadow_fd) };
        }
        crate::client::unmap_shared(addr, span);
        return Err(e);
    }
    for a in [alias, fill, addr] {
        if a != 0 {
            // Neither the image (the proxy saves managed memory) nor a child needs these.
            crum_ckpt::agent::exclude_region(a, span);
        }
    }
    if fresh && shadow_fd >= 0 {
        crum_ckpt::agent::exclude_fd(shadow_fd);
    } else if shadow_fd >= 0 {
        // SAFETY: our descriptor; nothing is NEW in this region.
        unsafe { libc::close(shadow_fd) };
        shadow_fd = -1;
    }
    let st = states as *mut AtomicU8;
    for p in 0..pages {
        // SAFETY: `states` has `pages` bytes.
        unsafe { (*st.add(p as usize)).store(if fresh { NEW } else { INVALID }, Relaxed) };
    }
    r.armed.store(mode() == Mode::Uffd && !fresh, Relaxed);
    r.alias.store(alias, Relaxed);
    r.fill.store(fill, Relaxed);
    r.states.store(st, Relaxed);
    r.shadow_fd.store(shadow_fd, Relaxed);
    r.valid.store(if fresh { pages } else { 0 }, Relaxed);
    r.lo.store(if fresh { 0 } else { u64::MAX }, Relaxed);
    r.hi.store(if fresh { pages } else { 0 }, Relaxed);
    r.rwin.store(1, Relaxed);
    r.rnext.store(u64::MAX, Relaxed);
    r.wwin.store(1, Relaxed);
    r.wnext.store(u64::MAX, Relaxed);
    r.fetched.store(false, Relaxed);
    r.reported.store(0, Relaxed);
    r.span.store(span, Relaxed);
    r.start.store(addr, Release);
    HIGH.fetch_max(slot + 1, AcqRel);
    LIVE.fetch_add(1, AcqRel);
    Ok(())
}

/// Tear down the shadow of the managed allocation at `addr` (freed) and put the device
/// window's reservation back over it.
pub fn unregister(addr: u64) {
    let _t = TABLE.lock().unwrap_or_else(|p| p.into_inner());
    let Some(r) = REGIONS.iter().find(|r| r.start.load(Acquire) == addr && addr != 0) else {
        return;
    };
    let g = r.lock();
    let span = r.span.load(Relaxed);
    r.start.store(0, Release);
    LIVE.fetch_sub(1, AcqRel);
    for a in [r.alias.load(Relaxed), r.fill.load(Relaxed)] {
        if a != 0 {
            crum_ckpt::agent::include_region(a);
            unmap(a, span);
        }
    }
    let fd = r.shadow_fd.swap(-1, Relaxed);
    if fd >= 0 {
        crum_ckpt::agent::include_fd(fd);
        // SAFETY: our descriptor.
        unsafe { libc::close(fd) };
    }
    unmap(r.states.swap(std::ptr::null_mut(), Relaxed) as u64, span / PAGE);
    crate::client::unmap_shared(addr, span);
    r.alias.store(0, Relaxed);
    r.fill.store(0, Relaxed);
    drop(g);
    // The slot is free for reuse.
    r.span.store(0, Release);
}

/// Tear down every region (a device reset freed them all).
pub fn unregister_all() {
    let addrs: Vec<u64> = {
        let high = HIGH.load(Acquire);
        REGIONS[..high].iter().map(|r| r.start.load(Acquire)).filter(|&a| a != 0).collect()
    };
    for a in addrs {
        unregister(a);
    }
}

/// Checkpoint hook, from `collect` (every other thread stopped, right before the proxy
/// saves device memory): bring the proxy's copy of every managed region up to date. Pages
/// keep their state (the program goes on with them).
pub fn checkpoint_flush() -> Result<(), String> {
    if LIVE.load(Acquire) == 0 {
        return Ok(());
    }
    let high = HIGH.load(Acquire);
    for r in &REGIONS[..high] {
        if r.start.load(Acquire) == 0 {
            continue;
        }
        let g = r
            .try_lock()
            .ok_or("a stopped thread holds a managed-memory region lock")?;
        g.flush(false);
    }
    Ok(())
}

/// Restart hook (the program's threads are stopped), before any region is [`restored`]: the
/// table came back with the process's memory but names views that are not in the image
/// (alias, fill, shadow); forget them. Signal handlers are restored by the restart; a
/// userfaultfd is created anew.
pub fn before_restore() -> Result<(), String> {
    let _t = TABLE.lock().unwrap_or_else(|p| p.into_inner());
    for r in &REGIONS {
        let start = r.start.load(Acquire);
        let span = r.span.load(Relaxed);
        for a in [start, r.alias.load(Relaxed), r.fill.load(Relaxed)] {
            if a != 0 {
                crum_ckpt::agent::include_region(a);
            }
        }
        let fd = r.shadow_fd.swap(-1, Relaxed);
        if fd >= 0 {
            crum_ckpt::agent::include_fd(fd);
        }
        let st = r.states.swap(std::ptr::null_mut(), Relaxed);
        if !st.is_null() && span != 0 {
            unmap(st as u64, span / PAGE);
        }
        r.start.store(0, Release);
        r.span.store(0, Release);
        r.alias.store(0, Relaxed);
        r.fill.store(0, Relaxed);
        r.lock.store(false, Release);
    }
    LIVE.store(0, Release);
    if mode() == Mode::Uffd && MODE.load(Acquire) != 0 {
        if let Err(why) = uffd::restart() {
            // Saved where userfaultfd worked, restarted where it does not: the regions about
            // to be restored are set up for page protection instead.
            eprintln!("crum: managed memory: userfaultfd is not available after the restart ({why}); using mprotect");
            fault::install(false);
            MODE.store(Mode::Mprotect as u8, Release);
        }
    }
    Ok(())
}

/// Restart hook: the new proxy re-created the managed region `[addr, addr+len)` behind its
/// shared memory `memfd` (a descriptor number in the proxy) and filled it with the
/// checkpointed contents. The shadow is mapped again with every page INVALID.
pub fn restored(addr: u64, len: u64, memfd: i32) -> CudaResult<()> {
    register(addr, len, memfd, Init::FromProxy)
}

/// Restart hook, after every managed region is [`restored`].
pub fn after_restore() -> Result<(), String> {
    if MODE.load(Acquire) != 0 && mode() != Mode::Uffd {
        fault::reinstall();
    }
    Ok(())
}
